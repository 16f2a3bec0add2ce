// The disk kernel cache; see runtime/cache.hpp and DESIGN.md, "Cache".
#include "runtime/cache.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <xxhash.h>

#include "flashgen/flashgen.hpp"

namespace flashgen::rt {
namespace {

// ---- little-endian helpers -------------------------------------------------

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string errno_text(int e) { return std::strerror(e); }

// ---- configuration ---------------------------------------------------------

struct MemoryEntry {
  std::vector<char> cubin;
  std::string log;
};

struct CacheState {
  std::mutex mu;
  bool resolved = false;
  std::string dir;                   // writable user cache; "" = memory-only
  std::vector<std::string> bundles;  // read-only layers
  bool warned = false;               // the one memory-only warning was printed
  std::map<std::string, MemoryEntry> memory;
};

CacheState& cache_state() {
  static CacheState* s = new CacheState();  // leaked: usable during static destruction
  return *s;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// mkdir -p with mode 0700 for every directory it creates. "" on success.
std::string make_dirs(const std::string& path) {
  if (path.empty()) return "the path is empty";
  std::string cur;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    cur = path.substr(0, next);
    pos = next + 1;
    if (cur.empty() || cur == "/") continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("mkdir {} failed: {}", cur, errno_text(errno));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fmt::format("stat failed: {}", errno_text(errno));
  if (!S_ISDIR(st.st_mode)) return "it exists and is not a directory";
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    return fmt::format("it is not writable: {}", errno_text(errno));
  return "";
}

void warn_memory_only_locked(CacheState& s, const std::string& what) {
  if (s.warned) return;
  s.warned = true;
  std::fprintf(stderr,
               "flashgen: warning: %s; compiled kernels are kept in memory only for this process "
               "(set FLASHGEN_CACHE_DIR to a writable directory to cache them on disk)\n",
               what.c_str());
}

void resolve_locked(CacheState& s) {
  if (s.resolved) return;
  s.resolved = true;
  s.bundles.clear();
  std::string bundles = env("FLASHGEN_CACHE_BUNDLES");
  size_t pos = 0;
  while (pos <= bundles.size() && !bundles.empty()) {
    size_t next = bundles.find(':', pos);
    if (next == std::string::npos) next = bundles.size();
    std::string d = bundles.substr(pos, next - pos);
    if (!d.empty()) s.bundles.push_back(d);
    pos = next + 1;
  }

  std::string dir = env("FLASHGEN_CACHE_DIR");
  std::string origin = "FLASHGEN_CACHE_DIR";
  if (dir.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    if (!xdg.empty() && xdg[0] == '/') {
      dir = xdg + "/flashgen";
      origin = "$XDG_CACHE_HOME/flashgen";
    } else {
      std::string home = env("HOME");
      if (home.empty()) {
        if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr)
          home = pw->pw_dir;
      }
      if (!home.empty()) {
        dir = home + "/.cache/flashgen";
        origin = "$HOME/.cache/flashgen";
      }
    }
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) {
    s.dir.clear();
    warn_memory_only_locked(
        s, "no kernel cache directory (FLASHGEN_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)");
    return;
  }
  std::string why = make_dirs(dir);
  if (!why.empty()) {
    s.dir.clear();
    warn_memory_only_locked(s, fmt::format("the kernel cache directory {} ({}) cannot be used: {}",
                                           dir, origin, why));
    return;
  }
  s.dir = dir;
}

struct Snapshot {
  std::string dir;
  std::vector<std::string> bundles;
};

Snapshot snapshot() {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve_locked(s);
  return Snapshot{s.dir, s.bundles};
}

// ---- files -----------------------------------------------------------------

enum class ReadStatus { ok, missing, failed };

ReadStatus read_file(const std::string& path, std::vector<char>* out, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return ReadStatus::missing;
    *error = fmt::format("unreadable ({})", errno_text(errno));
    return ReadStatus::failed;
  }
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = fmt::format("unreadable ({})", errno_text(errno));
      ::close(fd);
      return ReadStatus::failed;
    }
    if (n == 0) break;
    out->insert(out->end(), buf, buf + n);
  }
  ::close(fd);
  return ReadStatus::ok;
}

std::string temp_suffix() {
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    seed ^= static_cast<uint64_t>(::getpid()) << 17;
    seed ^= std::hash<std::thread::id>{}(std::this_thread::get_id());
    return std::mt19937_64(seed);
  }();
  return fmt::format("{}.{:x}.{:016x}", static_cast<long>(::getpid()),
                     std::hash<std::thread::id>{}(std::this_thread::get_id()) & 0xffffffffu, rng());
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads a whole entry: nullopt on miss; *reason set when the entry exists but is bad.
std::optional<std::vector<char>> read_entry(const std::string& path, const std::string& key,
                                            std::string* reason) {
  std::vector<char> bytes;
  std::string error;
  ReadStatus st = read_file(path, &bytes, &error);
  if (st == ReadStatus::missing) return std::nullopt;
  if (st == ReadStatus::failed) {
    *reason = error;
    return std::nullopt;
  }
  return decode_cache_entry(bytes, key, reason);
}

std::string read_text_or_empty(const std::string& path) {
  std::vector<char> bytes;
  std::string error;
  if (read_file(path, &bytes, &error) != ReadStatus::ok) return "";
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

// ---- public ----------------------------------------------------------------

std::string cache_key(const std::string& source, const std::vector<std::string>& options, int arch,
                      const NvrtcVersion& nvrtc) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  auto put = [&](std::string_view s) {
    char len[8];
    put_u64(len, s.size());
    XXH3_128bits_update(st, len, sizeof len);
    XXH3_128bits_update(st, s.data(), s.size());
  };
  put("flashgen.cache.key");
  put(std::to_string(kCacheFormatVersion));
  put(kGeneratorVersion);
  put(source);
  put(std::to_string(options.size()));
  for (const auto& o : options) put(o);
  put(std::to_string(arch));
  put(nvrtc.str());
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  std::string hex;
  hex.reserve(32);
  for (unsigned char b : c.digest) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string cache_entry_path(const std::string& dir, const std::string& kernel_name,
                             const std::string& key, const char* ext) {
  return fmt::format("{}/{}-{}{}", dir, kernel_name, key.substr(0, 16), ext);
}

std::vector<char> encode_cache_entry(const std::string& key, const std::vector<char>& cubin) {
  std::vector<char> out(kCacheHeaderSize + cubin.size(), '\0');
  std::memcpy(out.data(), kCacheMagic, 8);
  put_u32(out.data() + 8, kCacheFormatVersion);
  put_u32(out.data() + 12, static_cast<uint32_t>(key.size()));
  std::memcpy(out.data() + 16, key.data(), std::min<size_t>(key.size(), 32));
  put_u64(out.data() + 48, cubin.size());
  put_u64(out.data() + 56, XXH3_64bits(cubin.data(), cubin.size()));
  if (!cubin.empty()) std::memcpy(out.data() + kCacheHeaderSize, cubin.data(), cubin.size());
  return out;
}

std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes,
                                                    const std::string& key, std::string* reason) {
  if (bytes.empty()) {
    *reason = "empty (0 bytes)";
    return std::nullopt;
  }
  if (bytes.size() < kCacheHeaderSize) {
    *reason = fmt::format("truncated ({} bytes, shorter than the {}-byte header)", bytes.size(),
                          kCacheHeaderSize);
    return std::nullopt;
  }
  const char* h = bytes.data();
  if (std::memcmp(h, kCacheMagic, 8) != 0) {
    *reason = "not a flashgen cache entry (bad magic)";
    return std::nullopt;
  }
  uint32_t version = get_u32(h + 8);
  if (version != kCacheFormatVersion) {
    *reason = fmt::format("of cache format version {} (this library uses {})", version,
                          kCacheFormatVersion);
    return std::nullopt;
  }
  uint32_t key_len = get_u32(h + 12);
  std::string stored_key(h + 16, h + 16 + std::min<uint32_t>(key_len, 32));
  if (key_len != key.size() || stored_key != key) {
    *reason = fmt::format(
        "for another key ({} instead of {}: written for a different source, NVRTC options, arch or "
        "NVRTC version)",
        stored_key, key);
    return std::nullopt;
  }
  uint64_t size = get_u64(h + 48);
  uint64_t have = bytes.size() - kCacheHeaderSize;
  if (have < size) {
    *reason = fmt::format("truncated (payload has {} of {} bytes)", have, size);
    return std::nullopt;
  }
  if (have > size) {
    *reason = fmt::format("corrupt ({} unexpected bytes after the {}-byte payload)", have - size, size);
    return std::nullopt;
  }
  uint64_t sum = get_u64(h + 56);
  const char* payload = h + kCacheHeaderSize;
  if (XXH3_64bits(payload, size) != sum) {
    *reason = "corrupt (payload checksum mismatch)";
    return std::nullopt;
  }
  if (size == 0) {
    *reason = "corrupt (empty payload)";
    return std::nullopt;
  }
  return std::vector<char>(payload, payload + size);
}

std::string write_file_atomic(const std::string& path, const char* data, size_t size) {
  const std::string tmp = fmt::format("{}/.{}.tmp.{}", dir_of(path), base_of(path), temp_suffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("creating {} failed: {}", tmp, errno_text(errno));
  auto fail = [&](const char* what) {
    std::string msg = fmt::format("{} {} failed: {}", what, tmp, errno_text(errno));
    ::close(fd);
    ::unlink(tmp.c_str());
    return msg;
  };
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("writing");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync of");
  if (::close(fd) != 0) {
    std::string msg = fmt::format("closing {} failed: {}", tmp, errno_text(errno));
    ::unlink(tmp.c_str());
    return msg;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string msg = fmt::format("renaming {} to {} failed: {}", tmp, path, errno_text(errno));
    ::unlink(tmp.c_str());
    return msg;
  }
  return "";
}

std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const std::string& key) {
  Snapshot snap = snapshot();

  for (const auto& b : snap.bundles) {
    const std::string path = cache_entry_path(b, kernel_name, key);
    std::string reason;
    if (auto cubin = read_entry(path, key, &reason)) {
      return CacheHit{std::move(*cubin), read_text_or_empty(cache_entry_path(b, kernel_name, key, ".log")),
                      path, true};
    }
    if (!reason.empty())
      std::fprintf(stderr, "flashgen: bundle entry %s is %s; ignoring it\n", path.c_str(), reason.c_str());
  }

  if (!snap.dir.empty()) {
    const std::string path = cache_entry_path(snap.dir, kernel_name, key);
    std::string reason;
    if (auto cubin = read_entry(path, key, &reason)) {
      return CacheHit{std::move(*cubin),
                      read_text_or_empty(cache_entry_path(snap.dir, kernel_name, key, ".log")), path,
                      false};
    }
    if (!reason.empty())
      std::fprintf(stderr, "flashgen: cache entry %s is %s; recompiling\n", path.c_str(), reason.c_str());
  }

  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.memory.find(key);
  if (it != s.memory.end()) return CacheHit{it->second.cubin, it->second.log, "", false};
  return std::nullopt;
}

std::string cache_store(const std::string& kernel_name, const std::string& key,
                        const std::vector<char>& cubin, const std::string& source,
                        const std::string& log) {
  Snapshot snap = snapshot();
  if (!snap.dir.empty()) {
    // Source and log first, so that a visible .cubin always has them beside it.
    std::string err = write_file_atomic(cache_entry_path(snap.dir, kernel_name, key, ".cu"),
                                        source.data(), source.size());
    if (err.empty())
      err = write_file_atomic(cache_entry_path(snap.dir, kernel_name, key, ".log"), log.data(),
                              log.size());
    const std::string path = cache_entry_path(snap.dir, kernel_name, key);
    if (err.empty()) {
      std::vector<char> bytes = encode_cache_entry(key, cubin);
      err = write_file_atomic(path, bytes.data(), bytes.size());
    }
    if (err.empty()) {
      fsync_dir(snap.dir);
      return path;
    }
    CacheState& s = cache_state();
    std::lock_guard<std::mutex> lock(s.mu);
    warn_memory_only_locked(
        s, fmt::format("the kernel cache directory {} cannot be written ({})", snap.dir, err));
    s.memory[key] = MemoryEntry{cubin, log};
    return "";
  }
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.memory[key] = MemoryEntry{cubin, log};
  return "";
}

std::string cache_dir() { return snapshot().dir; }

std::string dump_dir() {
  std::string d = cache_dir();
  if (!d.empty()) return d;
  std::string tmp = env("TMPDIR");
  while (tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  if (!tmp.empty() && ::access(tmp.c_str(), W_OK | X_OK) == 0) return tmp;
  return "/tmp";
}

void cache_reset_for_tests() {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.resolved = false;
  s.dir.clear();
  s.bundles.clear();
  s.warned = false;
  s.memory.clear();
}

}  // namespace flashgen::rt
