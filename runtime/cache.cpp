// The disk kernel cache; see runtime/cache.hpp and docs/design.md, "Kernel cache".
#include "runtime/cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <xxhash.h>

#include "flashgen/flashgen.hpp"
#include "runtime/compile.hpp"

namespace flashgen::rt {
namespace {

// The names in directory `dir` ("." and ".." among them), or nullopt with errno set when
// it cannot be opened.
std::optional<std::vector<std::string>> dir_names(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

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

// Header field offsets (see cache.hpp).
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 12;
constexpr size_t kOffKey = 16;
constexpr size_t kKeyLen = 32;
constexpr size_t kOffPayloadSize = 48;
constexpr size_t kOffPayloadHash = 56;
constexpr size_t kOffArch = 64;
constexpr size_t kOffNvrtcMajor = 68;
constexpr size_t kOffNvrtcMinor = 72;
constexpr size_t kOffGenerator = 80;
constexpr size_t kGeneratorLen = 32;
constexpr size_t kOffHeaderHash = 120;

// Printable form of bytes read from a file (a damaged header may hold anything).
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\0') break;
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return out;
}

std::string mode_text(mode_t m) { return fmt::format("{:04o}", static_cast<unsigned>(m & 07777)); }

// ---- configuration ---------------------------------------------------------

struct MemoryEntry {
  std::vector<char> cubin;
  std::string log;
};

struct Bundle {
  std::string path;
  bool usable = false;
  std::string problem;
};

struct CacheState {
  std::mutex mu;
  bool resolved = false;
  std::string dir;            // usable writable layer; "" = memory-only
  std::string dir_candidate;  // what the user cache would be ("" if none)
  std::string dir_origin;     // where dir_candidate came from
  std::string dir_problem;    // why dir_candidate is not used
  bool dir_absent = false;    // dir_candidate does not exist yet: the first write creates it (ensure_dir_locked)
  std::vector<Bundle> bundles;
  bool warned = false;        // the one memory-only warning was printed
  std::map<std::string, MemoryEntry> memory;
  CacheOverride override_;
  bool has_override = false;
};

CacheState& cache_state() {
  static CacheState* s = new CacheState();  // leaked: usable during static destruction
  return *s;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::vector<std::string> split_path_list(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t next = text.find(':', pos);
    if (next == std::string::npos) next = text.size();
    std::string d = text.substr(pos, next - pos);
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (!d.empty()) out.push_back(d);
    pos = next + 1;
  }
  return out;
}

std::string uncreatable_dir_reason(const std::string& path);

// Why an existing `path` is not a directory this process can write ("" when it is).
std::string usable_dir_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string failed = fmt::format("stat failed: {}", errno_text(err));
    if (err != ENOTDIR) return failed;
    const std::string above = uncreatable_dir_reason(path);  // (names the file above it)
    return above.empty() ? failed : above;
  }
  if (!S_ISDIR(st.st_mode)) return "it exists and is not a directory";
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    return fmt::format("it is not writable by this process: {}", errno_text(errno));
  return "";
}

// Why `path`, which does not exist, could not be created by make_dirs ("" when
// its nearest existing ancestor is a directory this process can write). Reads only.
std::string uncreatable_dir_reason(const std::string& path) {
  for (size_t pos = 0; pos < path.size();) {
    const size_t next = std::min(path.find('/', pos), path.size());
    if (next - pos > NAME_MAX)
      return fmt::format("it cannot be created: a path component is {} bytes long, more than NAME_MAX ({})", next - pos,
                         NAME_MAX);
    pos = next + 1;
  }
  std::string cur = path;
  while (true) {
    const size_t slash = cur.find_last_of('/');
    if (slash == std::string::npos) cur = ".";
    else cur = slash == 0 ? "/" : cur.substr(0, slash);
    struct stat st {};
    if (::stat(cur.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return fmt::format("it cannot be created: {} is not a directory", cur);
      if (::access(cur.c_str(), W_OK | X_OK) != 0)
        return fmt::format("it cannot be created: {} is not writable by this process: {}", cur, errno_text(errno));
      return "";
    }
    // (ENOTDIR: a component above is a file, which the walk up reaches)
    if (errno != ENOENT && errno != ENOTDIR)
      return fmt::format("it cannot be created: stat {} failed: {}", cur, errno_text(errno));
    if (cur == "/" || cur == ".") return "";
  }
}

// mkdir -p; every directory it creates gets exactly `mode`. "" on success.
std::string make_dirs(const std::string& path, mode_t mode) {
  if (path.empty()) return "the path is empty";
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    const std::string cur = path.substr(0, next);
    pos = next + 1;
    if (cur.empty() || cur == "/") continue;
    if (::mkdir(cur.c_str(), mode) == 0) {
      ::chmod(cur.c_str(), mode);  // exactly `mode`, whatever the umask
    } else if (errno != EEXIST) {
      return fmt::format("mkdir {} failed: {}", cur, errno_text(errno));
    }
  }
  return usable_dir_reason(path);
}

void warn_memory_only_locked(CacheState& s, const std::string& what) {
  if (s.warned) return;
  s.warned = true;
  std::fprintf(stderr,
               "flashgen: warning: %s; compiled kernels are kept in memory only for this process "
               "(set FLASHGEN_CACHE_DIR to a writable directory of yours to cache them on disk)\n",
               what.c_str());
}

std::string home_dir() {
  std::string home = env("HOME");
  if (!home.empty()) return home;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) return pw->pw_dir;
  return "";
}

// Checks the user cache candidate (s.dir_candidate) and sets s.dir (usable)
// or s.dir_problem. A candidate that does not exist is created (mode 0700, a
// bundle being written 0755, parents included) only with `create`; without
// it, s.dir_absent is set instead: looking entries up and inspecting the
// layers never create a directory.
void settle_dir_locked(CacheState& s, bool create) {
  const bool bundle_mode = s.has_override && s.override_.bundle_mode;
  const std::string& dir = s.dir_candidate;
  s.dir.clear();
  s.dir_problem.clear();
  s.dir_absent = false;
  if (dir.empty()) {
    s.dir_problem = "there is no kernel cache directory (FLASHGEN_CACHE_DIR, XDG_CACHE_HOME and HOME are unset "
                    "and the user has no home directory)";
    return;
  }
  std::string why;
  struct stat st {};
  if (!create && ::stat(dir.c_str(), &st) != 0) {
    // Inspecting creates nothing: a missing directory is absent (if it could be
    // created), any other failure is the directory's problem.
    why = errno == ENOENT || errno == ENOTDIR ? uncreatable_dir_reason(dir)
                                              : fmt::format("stat failed: {}", errno_text(errno));
    if (why.empty()) {
      s.dir_absent = true;
      return;
    }
  } else {
    why = create ? make_dirs(dir, bundle_mode ? 0755 : 0700) : usable_dir_reason(dir);
  }
  if (why.empty()) {
    why = untrusted_dir_reason(dir, bundle_mode);
    if (!why.empty()) why = "it " + why;
  }
  if (!why.empty()) {
    s.dir_problem = fmt::format("the kernel cache directory {} ({}) cannot be used: {}", dir, s.dir_origin, why);
    return;
  }
  s.dir = dir;
}

void resolve_locked(CacheState& s) {
  if (s.resolved) return;
  s.resolved = true;
  const bool bundle_mode = s.has_override && s.override_.bundle_mode;

  s.bundles.clear();
  const std::vector<std::string> bundle_paths =
      s.has_override && s.override_.bundles ? *s.override_.bundles : split_path_list(env("FLASHGEN_CACHE_PATH"));
  std::vector<std::pair<dev_t, ino_t>> seen;  // a directory listed twice (by any spelling) is searched once
  for (const auto& listed : bundle_paths) {
    const std::string b = absolute_path(listed);
    Bundle bundle;
    bundle.path = b;
    struct stat st {};
    const bool exists = ::stat(b.c_str(), &st) == 0;
    if (exists) {
      const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
    }
    const char* const origin = s.has_override && s.override_.bundles ? "the tool's bundle list" : "FLASHGEN_CACHE_PATH";
    if (!exists) {
      // (named explicitly, so a typo is worth one line: its kernels would otherwise be compiled at run time)
      bundle.problem = fmt::format("cannot be examined: {}", errno_text(errno));
      std::fprintf(stderr, "flashgen: bundle directory %s (%s) is not used: it %s\n", b.c_str(), origin,
                   bundle.problem.c_str());
    } else {
      bundle.problem = untrusted_dir_reason(b, /*bundle=*/true);
      if (!bundle.problem.empty()) {
        std::fprintf(stderr,
                     "flashgen: bundle directory %s (%s) is not used: it %s; its kernels are code, so they are "
                     "not loaded\n",
                     b.c_str(), origin, bundle.problem.c_str());
      }
    }
    bundle.usable = bundle.problem.empty();
    s.bundles.push_back(bundle);
  }

  std::string dir;
  std::string origin;
  if (s.has_override && s.override_.store_dir) {
    dir = *s.override_.store_dir;
    origin = bundle_mode ? "the bundle being written" : "the tool's --cache-dir";
  } else {
    dir = env("FLASHGEN_CACHE_DIR");
    origin = "FLASHGEN_CACHE_DIR";
    if (dir.empty()) {
      const std::string xdg = env("XDG_CACHE_HOME");
      if (!xdg.empty() && xdg[0] == '/') {
        dir = xdg + "/flashgen";
        origin = "$XDG_CACHE_HOME/flashgen";
      } else {
        const std::string home = home_dir();
        if (!home.empty()) {
          dir = home + "/.cache/flashgen";
          origin = "$HOME/.cache/flashgen";
        }
      }
    }
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  dir = absolute_path(dir);
  s.dir_candidate = dir;
  s.dir_origin = origin;
  settle_dir_locked(s, /*create=*/false);
}

// The user cache for a write (a store, a claim, a dump): created now if it
// did not exist when it was resolved.
void ensure_dir_locked(CacheState& s) {
  resolve_locked(s);
  if (s.dir_absent) settle_dir_locked(s, /*create=*/true);
}

struct Snapshot {
  std::string dir;
  std::vector<Bundle> bundles;
  bool bundle_mode = false;
};

// The layers as resolved; `for_write` creates the user cache first when it does not exist.
Snapshot snapshot(bool for_write = false) {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (for_write) ensure_dir_locked(s);
  else resolve_locked(s);
  return Snapshot{s.dir, s.bundles, s.has_override && s.override_.bundle_mode};
}

// ---- files -----------------------------------------------------------------

// "" when a file with status `st` may be loaded from a directory of this kind.
std::string untrusted_stat_reason(const struct stat& st, bool bundle) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link (only regular files are loaded from the user cache)";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (!bundle && st.st_uid != ::geteuid()) {
    return fmt::format(
        "owned by uid {}, not by uid {} that runs this process (a cached kernel is code: only your own "
        "files are loaded; it is replaced by one of yours, or remove it with `flashgen cache prune`)",
        static_cast<long>(st.st_uid), static_cast<long>(::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("writable by {} (mode {}; a cached kernel is code: fix with chmod go-w)",
                       (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                       : (st.st_mode & S_IWGRP)                         ? "its group"
                                                                        : "others",
                       mode_text(st.st_mode));
  }
  return "";
}

enum class ReadStatus { ok, missing, failed, untrusted };

// Reads a whole file after checking that it may be trusted.
ReadStatus read_trusted(const std::string& path, bool bundle, std::vector<char>* out, std::string* error) {
  const int flags = O_RDONLY | O_CLOEXEC | (bundle ? 0 : O_NOFOLLOW);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    if (errno == ENOENT) return ReadStatus::missing;
    if (errno == ELOOP && !bundle) {
      *error = "not trusted: a symbolic link (only regular files are loaded from the user cache)";
      return ReadStatus::untrusted;
    }
    *error = fmt::format("unreadable ({})", errno_text(errno));
    return ReadStatus::failed;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *error = fmt::format("unreadable (fstat: {})", errno_text(errno));
    ::close(fd);
    return ReadStatus::failed;
  }
  if (std::string why = untrusted_stat_reason(st, bundle); !why.empty()) {
    *error = "not trusted: " + why;
    ::close(fd);
    return ReadStatus::untrusted;
  }
  out->clear();
  out->reserve(static_cast<size_t>(st.st_size));
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

bool read_plain(const std::string& path, std::vector<char>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->insert(out->end(), buf, buf + n);
  }
  ::close(fd);
  return true;
}

std::string read_text_or_empty(const std::string& path) {
  std::vector<char> bytes;
  if (!read_plain(path, &bytes)) return "";
  return std::string(bytes.begin(), bytes.end());
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

// Decodes `bytes` against a key and, when `full` is set, the whole identity.
std::optional<std::vector<char>> decode(const std::vector<char>& bytes, const std::string& key,
                                        const EntryIdentity* full, std::string* reason) {
  std::optional<EntryHeader> h = decode_cache_header(bytes.data(), bytes.size(), reason);
  if (!h) return std::nullopt;
  if (full != nullptr) {
    if (h->id.generator != full->generator) {
      *reason = fmt::format("made by flashgen generator {} (this library is {})", h->id.generator, full->generator);
      return std::nullopt;
    }
    if (!(h->id.nvrtc == full->nvrtc)) {
      *reason = fmt::format("made by NVRTC {} (this process uses NVRTC {})", h->id.nvrtc.str(), full->nvrtc.str());
      return std::nullopt;
    }
    if (h->id.arch != full->arch) {
      *reason = fmt::format("compiled for sm_{} (this lookup is for sm_{})", h->id.arch, full->arch);
      return std::nullopt;
    }
  }
  if (h->id.key != key) {
    *reason = fmt::format(
        "for another key ({} instead of {}: written for a different source, NVRTC options, arch or NVRTC "
        "version)",
        h->id.key, key);
    return std::nullopt;
  }
  const uint64_t have = bytes.size() - kCacheHeaderSize;
  if (have < h->payload_size) {
    *reason = fmt::format("truncated (payload has {} of {} bytes)", have, h->payload_size);
    return std::nullopt;
  }
  if (have > h->payload_size) {
    *reason = fmt::format("corrupt ({} unexpected bytes after the {}-byte payload)", have - h->payload_size,
                          h->payload_size);
    return std::nullopt;
  }
  const char* payload = bytes.data() + kCacheHeaderSize;
  if (XXH3_64bits(payload, h->payload_size) != h->payload_hash) {
    *reason = "corrupt (payload checksum mismatch)";
    return std::nullopt;
  }
  if (h->payload_size == 0) {
    *reason = "corrupt (empty payload)";
    return std::nullopt;
  }
  return std::vector<char>(payload, payload + h->payload_size);
}

std::string layer_file_notice(bool read_only, const std::string& path, const std::string& reason) {
  if (read_only) return fmt::format("flashgen: bundle entry {} is {}; ignoring it\n", path, reason);
  return fmt::format("flashgen: cache entry {} is {}; recompiling\n", path, reason);
}

std::optional<CacheHit> lookup_impl(const std::string& kernel_name, const std::string& key,
                                    const EntryIdentity* full, bool report) {
  Snapshot snap = snapshot();
  // `bundle`: trust rules of a bundle; `writable`: the layer a miss is stored into.
  auto try_dir = [&](const std::string& dir, bool bundle, bool writable) -> std::optional<CacheHit> {
    const std::string path = cache_entry_path(dir, kernel_name, key);
    std::vector<char> bytes;
    std::string reason;
    switch (read_trusted(path, bundle, &bytes, &reason)) {
      case ReadStatus::missing: return std::nullopt;
      case ReadStatus::failed:
      case ReadStatus::untrusted: break;
      case ReadStatus::ok:
        if (auto cubin = decode(bytes, key, full, &reason)) {
          return CacheHit{std::move(*cubin), read_text_or_empty(cache_entry_path(dir, kernel_name, key, ".log")),
                          path, bundle};
        }
        break;
    }
    if (report) std::fputs(layer_file_notice(!writable, path, reason).c_str(), stderr);
    return std::nullopt;
  };
  for (const auto& b : snap.bundles) {
    if (!b.usable) continue;
    if (auto hit = try_dir(b.path, true, false)) return hit;
  }
  if (!snap.dir.empty()) {
    if (auto hit = try_dir(snap.dir, snap.bundle_mode, true)) {
      hit->from_bundle = false;
      return hit;
    }
  }
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.memory.find(key);
  if (it != s.memory.end()) return CacheHit{it->second.cubin, it->second.log, "", false};
  return std::nullopt;
}

std::string store_impl(const std::string& kernel_name, const EntryIdentity& id, const std::vector<char>& cubin,
                       const std::string& source, const std::string& log) {
  Snapshot snap = snapshot(/*for_write=*/true);
  CacheState& s = cache_state();
  if (!snap.dir.empty()) {
    // Source and log first, so that a visible .cubin always has them beside it.
    std::string err = write_file_atomic(cache_entry_path(snap.dir, kernel_name, id.key, ".cu"), source.data(),
                                        source.size());
    if (err.empty())
      err = write_file_atomic(cache_entry_path(snap.dir, kernel_name, id.key, ".log"), log.data(), log.size());
    const std::string path = cache_entry_path(snap.dir, kernel_name, id.key);
    if (err.empty()) {
      std::vector<char> bytes = encode_cache_entry(id, cubin);
      err = write_file_atomic(path, bytes.data(), bytes.size());
    }
    if (err.empty()) {
      fsync_dir(snap.dir);
      return path;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    warn_memory_only_locked(s, fmt::format("the kernel cache directory {} cannot be written ({})", snap.dir, err));
    s.memory[id.key] = MemoryEntry{cubin, log};
    return "";
  }
  std::lock_guard<std::mutex> lock(s.mu);
  warn_memory_only_locked(s, s.dir_problem);
  s.memory[id.key] = MemoryEntry{cubin, log};
  return "";
}

// Splits "<kernel>-<key16>.<ext>" (ext without the dot); false if not that form.
bool split_entry_name(const std::string& name, std::string* kernel, std::string* key16, std::string* ext) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.empty() || name[0] == '.') return false;
  const std::string stem = name.substr(0, dot);
  *ext = name.substr(dot + 1);
  const size_t dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0 || stem.size() - dash - 1 != 16) return false;
  *key16 = stem.substr(dash + 1);
  if (key16->find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *kernel = stem.substr(0, dash);
  return true;
}

std::string spec_line_of(const std::string& source) {
  const std::string tag = "// spec:";
  const size_t at = source.find(tag);
  if (at == std::string::npos || at > 4096) return "";
  size_t b = at + tag.size();
  while (b < source.size() && source[b] == ' ') ++b;
  const size_t e = source.find('\n', b);
  return source.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

}  // namespace

// (runtime/cache.hpp)
std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::filesystem::path full = path;
  if (path[0] != '/') {
    std::error_code ec;
    const std::filesystem::path cwd = std::filesystem::current_path(ec);
    if (ec) return path;
    full = cwd / full;
  }
  // Lexically, as Python's os.path.abspath: "x/../y" is "y" even where x is a symbolic link.
  std::string out = full.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

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

std::string cache_entry_path(const std::string& dir, const std::string& kernel_name, const std::string& key,
                             const char* ext) {
  return fmt::format("{}/{}-{}{}", dir, kernel_name, key.substr(0, 16), ext);
}

EntryIdentity current_identity(const std::string& key, int arch, const NvrtcVersion& nvrtc) {
  return EntryIdentity{key, arch, nvrtc, kGeneratorVersion};
}

std::optional<EntryHeader> decode_cache_header(const char* h, size_t size, std::string* reason) {
  if (size == 0) {
    *reason = "empty (0 bytes)";
    return std::nullopt;
  }
  if (size < kOffHeaderSize) {
    *reason = fmt::format("truncated ({} bytes, shorter than the {}-byte header)", size, kCacheHeaderSize);
    return std::nullopt;
  }
  if (std::memcmp(h, kCacheMagic, 8) != 0) {
    *reason = "not a flashgen cache entry (bad magic)";
    return std::nullopt;
  }
  const uint32_t version = get_u32(h + kOffVersion);
  if (version != kCacheFormatVersion) {
    *reason = fmt::format("of cache format version {} (this library uses {})", version, kCacheFormatVersion);
    return std::nullopt;
  }
  if (size < kCacheHeaderSize) {
    *reason = fmt::format("truncated ({} bytes, shorter than the {}-byte header)", size, kCacheHeaderSize);
    return std::nullopt;
  }
  if (XXH3_64bits(h, kOffHeaderHash) != get_u64(h + kOffHeaderHash)) {
    *reason = "corrupt (header checksum mismatch)";
    return std::nullopt;
  }
  if (get_u32(h + kOffHeaderSize) != kCacheHeaderSize) {
    *reason = fmt::format("corrupt (header size {} instead of {})", get_u32(h + kOffHeaderSize), kCacheHeaderSize);
    return std::nullopt;
  }
  EntryHeader out;
  out.format = version;
  out.id.key = printable(std::string_view(h + kOffKey, kKeyLen));
  out.id.arch = static_cast<int>(get_u32(h + kOffArch));
  out.id.nvrtc.major = static_cast<int>(get_u32(h + kOffNvrtcMajor));
  out.id.nvrtc.minor = static_cast<int>(get_u32(h + kOffNvrtcMinor));
  out.id.generator = printable(std::string_view(h + kOffGenerator, kGeneratorLen));
  out.payload_size = get_u64(h + kOffPayloadSize);
  out.payload_hash = get_u64(h + kOffPayloadHash);
  return out;
}

std::vector<char> encode_cache_entry(const EntryIdentity& id, const std::vector<char>& cubin) {
  std::vector<char> out(kCacheHeaderSize + cubin.size(), '\0');
  char* h = out.data();
  std::memcpy(h, kCacheMagic, 8);
  put_u32(h + kOffVersion, kCacheFormatVersion);
  put_u32(h + kOffHeaderSize, static_cast<uint32_t>(kCacheHeaderSize));
  std::memcpy(h + kOffKey, id.key.data(), std::min(id.key.size(), kKeyLen));
  put_u64(h + kOffPayloadSize, cubin.size());
  put_u64(h + kOffPayloadHash, XXH3_64bits(cubin.data(), cubin.size()));
  put_u32(h + kOffArch, static_cast<uint32_t>(id.arch));
  put_u32(h + kOffNvrtcMajor, static_cast<uint32_t>(id.nvrtc.major));
  put_u32(h + kOffNvrtcMinor, static_cast<uint32_t>(id.nvrtc.minor));
  std::memcpy(h + kOffGenerator, id.generator.data(), std::min(id.generator.size(), kGeneratorLen));
  put_u64(h + kOffHeaderHash, XXH3_64bits(h, kOffHeaderHash));
  if (!cubin.empty()) std::memcpy(h + kCacheHeaderSize, cubin.data(), cubin.size());
  return out;
}

std::vector<char> encode_cache_entry(const std::string& key, const std::vector<char>& cubin) {
  return encode_cache_entry(current_identity(key, 0, NvrtcVersion{}), cubin);
}

std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes, const EntryIdentity& expect,
                                                    std::string* reason) {
  return decode(bytes, expect.key, &expect, reason);
}

std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes, const std::string& key,
                                                    std::string* reason) {
  return decode(bytes, key, nullptr, reason);
}

bool is_temp_file_name(const std::string& name) {
  return !name.empty() && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

std::string write_file_atomic(const std::string& path, const char* data, size_t size, mode_t mode) {
  const std::string tmp = fmt::format("{}/.{}.tmp.{}", dir_of(path), base_of(path), temp_suffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
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
  if (::fchmod(fd, mode) != 0) return fail("fchmod of");
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

std::string untrusted_file_reason(const std::string& path, bool bundle) {
  struct stat st {};
  const int r = bundle ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (r != 0) return fmt::format("cannot be examined ({})", errno_text(errno));
  return untrusted_stat_reason(st, bundle);
}

std::string untrusted_dir_reason(const std::string& dir, bool bundle) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("cannot be examined ({})", errno_text(errno));
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (!bundle && st.st_uid != ::geteuid()) {
    return fmt::format(
        "is owned by uid {}, not by uid {} that runs this process (cached kernels are code: only a directory "
        "of your own is used; fix: set FLASHGEN_CACHE_DIR to a directory of yours)",
        static_cast<long>(st.st_uid), static_cast<long>(::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("is writable by {} (mode {}; {} are code: fix with chmod go-w {})",
                       (st.st_mode & S_IWOTH) != 0 ? "other users" : "its group", mode_text(st.st_mode),
                       bundle ? "bundled kernels" : "cached kernels", dir);
  }
  if (bundle) return "";
  // Directories above: nobody else may be able to rename or replace the cache.
  char real[PATH_MAX];
  if (::realpath(dir.c_str(), real) == nullptr) return "";
  std::string p = real;
  while (p.size() > 1) {
    p = dir_of(p);
    struct stat up {};
    if (::stat(p.c_str(), &up) != 0) break;
    if ((up.st_mode & S_IWOTH) != 0 && (up.st_mode & S_ISVTX) == 0) {
      return fmt::format(
          "lies in {}, which every user may write (mode {}, no sticky bit), so others could replace the cache "
          "(cached kernels are code: fix with chmod o-w {} or choose another FLASHGEN_CACHE_DIR)",
          p, mode_text(up.st_mode), p);
    }
  }
  return "";
}

std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const EntryIdentity& id, bool report) {
  return lookup_impl(kernel_name, id.key, &id, report);
}

std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const std::string& key, bool report) {
  return lookup_impl(kernel_name, key, nullptr, report);
}

std::string cache_store(const std::string& kernel_name, const EntryIdentity& id, const std::vector<char>& cubin,
                        const std::string& source, const std::string& log) {
  return store_impl(kernel_name, id, cubin, source, log);
}

std::string cache_store(const std::string& kernel_name, const std::string& key, const std::vector<char>& cubin,
                        const std::string& source, const std::string& log) {
  return store_impl(kernel_name, current_identity(key, 0, NvrtcVersion{}), cubin, source, log);
}

std::string cache_dir() { return snapshot(/*for_write=*/true).dir; }

// ---- compile claims ------------------------------------------------------------

namespace {

std::mutex& claim_limit_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
double& claim_limit_ref() {
  static double limit = 300.0;
  return limit;
}

// Same file as the one at `path` now (not unlinked or replaced since fd was opened).
bool still_at_path(int fd, const std::string& path) {
  struct stat by_fd {}, by_path {};
  if (::fstat(fd, &by_fd) != 0 || ::lstat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

// The pid a holder wrote into its lock file (0 if none).
long holder_pid(const std::string& path) {
  const std::string text = read_text_or_empty(path);
  return std::strtol(text.c_str(), nullptr, 10);
}

}  // namespace

CacheClaim::CacheClaim(CacheClaim&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), waited_s_(o.waited_s_) {
  o.fd_ = -1;
  o.path_.clear();
}

CacheClaim& CacheClaim::operator=(CacheClaim&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    waited_s_ = o.waited_s_;
    o.fd_ = -1;
    o.path_.clear();
  }
  return *this;
}

void CacheClaim::release() noexcept {
  if (fd_ < 0) return;
  // Unlink while still holding the lock: nobody else can hold it now, so the
  // name goes away with this holder's file and a claimant locking the old
  // file sees that it is no longer at the path (still_at_path) and retries.
  ::unlink(path_.c_str());
  ::close(fd_);  // drops the flock
  fd_ = -1;
  path_.clear();
}

double cache_claim_wait_limit_s() {
  std::lock_guard<std::mutex> lock(claim_limit_mu());
  return claim_limit_ref();
}

void set_cache_claim_wait_limit_s(double seconds) {
  std::lock_guard<std::mutex> lock(claim_limit_mu());
  claim_limit_ref() = seconds;
}

bool is_lock_file_name(const std::string& name) {
  std::string kernel, key16, ext;
  return split_entry_name(name, &kernel, &key16, &ext) && ext == "lock";
}

LockFiles cache_lock_files(const std::string& dir) {
  LockFiles out;
  const auto names = dir_names(dir);
  if (!names) return out;
  for (const std::string& name : *names) {
    if (!is_lock_file_name(name)) continue;
    const int fd = ::open((dir + "/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
      ++out.left;
      ::flock(fd, LOCK_UN);
    } else {
      ++out.held;
    }
    ::close(fd);
  }
  return out;
}

CacheClaim cache_claim(const std::string& kernel_name, const std::string& key) {
  CacheClaim claim;
  const Snapshot snap = snapshot(/*for_write=*/true);
  if (snap.dir.empty()) return claim;  // memory-only: nothing to share with other processes
  const std::string path = cache_entry_path(snap.dir, kernel_name, key, ".lock");
  const double limit = cache_claim_wait_limit_s();
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  useconds_t pause = 2000;  // polled, so that the wait is bounded; doubles up to 50 ms
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return claim;  // read-only or full directory, a foreign file: compile unclaimed
    for (;;) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) {  // e.g. ENOLCK: the file system has no locks
        ::close(fd);
        return claim;
      }
      if (waited() >= limit) {
        std::fprintf(stderr,
                     "flashgen: waited %.0f s for process %ld, which holds the claim %s on compiling %s; "
                     "compiling it here as well\n",
                     waited(), holder_pid(path), path.c_str(), kernel_name.c_str());
        ::close(fd);
        claim.waited_s_ = waited();
        return claim;
      }
      ::usleep(pause);
      pause = std::min<useconds_t>(pause * 2, 50000);
    }
    if (!still_at_path(fd, path)) {
      ::close(fd);  // its holder unlinked it before letting go: lock the file at the path now
      continue;
    }
    // The holder's pid, for the message of a claimant that gives up waiting.
    const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
    claim.fd_ = fd;
    claim.path_ = path;
    claim.waited_s_ = waited();
    return claim;
  }
}

std::string dump_dir() {
  const Snapshot snap = snapshot(/*for_write=*/true);
  if (!snap.dir.empty() && !snap.bundle_mode) return snap.dir;  // never litter a bundle being written
  std::string tmp = env("TMPDIR");
  while (tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  if (!tmp.empty() && ::access(tmp.c_str(), W_OK | X_OK) == 0) return tmp;
  return "/tmp";
}

std::vector<CacheLayer> cache_layers() {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve_locked(s);
  std::vector<CacheLayer> out;
  for (const auto& b : s.bundles) {
    out.push_back(CacheLayer{CacheLayer::Kind::bundle, b.path,
                             s.has_override && s.override_.bundles ? "the tool's bundle list" : "FLASHGEN_CACHE_PATH",
                             b.usable, b.problem});
  }
  // (A user cache that does not exist yet is usable: the first write creates it.)
  const bool user_usable = !s.dir.empty() || s.dir_absent;
  out.push_back(CacheLayer{CacheLayer::Kind::user, s.dir_candidate, s.dir_origin, user_usable, s.dir_problem,
                           !s.dir_absent});
  out.push_back(CacheLayer{CacheLayer::Kind::memory, "", "this process", !user_usable,
                           user_usable ? "used only when the user cache cannot be" : ""});
  return out;
}

void cache_override(const CacheOverride& o) {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.override_ = o;
  s.has_override = true;
  s.resolved = false;
}

// ---- maintenance -------------------------------------------------------------

NvrtcForArch loaded_nvrtc_for_arch() {
  return [](int arch) -> std::optional<NvrtcVersion> {
    if (arch <= 0 || !nvrtc_available_for(arch)) return std::nullopt;
    try {
      return nvrtc_version_for(arch);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
}

std::vector<EntryReport> cache_scan(const std::string& dir, bool bundle, const NvrtcForArch& nvrtc_for) {
  std::vector<EntryReport> out;
  auto listed = dir_names(dir);
  if (!listed) return out;
  std::vector<std::string>& names = *listed;
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string kernel, key16, ext;
    if (!split_entry_name(name, &kernel, &key16, &ext) || ext != "cubin") continue;
    EntryReport r;
    r.path = dir + "/" + name;
    r.kernel_name = kernel;
    const std::string stem = dir + "/" + kernel + "-" + key16;
    struct stat st {};
    if (::lstat(r.path.c_str(), &st) == 0) {
      r.mtime = static_cast<int64_t>(st.st_mtime);
      r.bytes = static_cast<uint64_t>(st.st_size);
    }
    for (const char* other : {".cu", ".log"}) {
      struct stat o {};
      if (::stat((stem + other).c_str(), &o) == 0) r.bytes += static_cast<uint64_t>(o.st_size);
    }
    const std::string source = read_text_or_empty(stem + ".cu");
    r.spec = spec_line_of(source);

    std::vector<char> bytes;
    std::string reason;
    const ReadStatus rs = read_trusted(r.path, bundle, &bytes, &reason);
    if (rs != ReadStatus::ok) {
      r.problem = rs == ReadStatus::missing ? "vanished while scanning" : reason;
      out.push_back(std::move(r));
      continue;
    }
    r.header = decode_cache_header(bytes.data(), bytes.size(), &reason);
    if (!r.header) {
      r.problem = reason;
      out.push_back(std::move(r));
      continue;
    }
    if (r.header->id.key.substr(0, 16) != key16) {
      r.problem = fmt::format("misnamed (its header holds key {})", r.header->id.key);
      out.push_back(std::move(r));
      continue;
    }
    if (!decode(bytes, r.header->id.key, nullptr, &reason)) {
      r.problem = reason;
      out.push_back(std::move(r));
      continue;
    }
    r.valid = true;
    const std::optional<NvrtcVersion> nvrtc = nvrtc_for ? nvrtc_for(r.header->id.arch) : std::nullopt;
    if (r.header->id.generator != kGeneratorVersion) {
      r.problem = fmt::format("made by flashgen generator {} (this library is {})", r.header->id.generator,
                              kGeneratorVersion);
    } else if (nvrtc && !(r.header->id.nvrtc == *nvrtc)) {
      r.problem = fmt::format("made by NVRTC {} (this process uses NVRTC {})", r.header->id.nvrtc.str(), nvrtc->str());
    } else if (nvrtc && !r.spec.empty()) {
      // Stale: the generator now writes different code for this spec, so no
      // lookup can ever reach this entry again.
      try {
        const KernelSpec spec = KernelSpec::parse(r.spec);
        const std::string now = kernel_source(spec);
        if (spec.arch != r.header->id.arch) {
          r.problem = fmt::format("inconsistent (its source is for sm_{}, its header for sm_{})", spec.arch,
                                  r.header->id.arch);
        } else if (cache_key(now, kernel_nvrtc_options(spec), spec.arch, *nvrtc) != r.header->id.key) {
          r.problem = now == source ? "unreachable (its key does not match its source)"
                                    : "stale (this generator now writes different code for its spec)";
        }
      } catch (const std::exception& e) {
        r.problem = fmt::format("stale (its spec cannot be generated any more: {})", e.what());
      }
    }
    r.current = r.problem.empty();
    out.push_back(std::move(r));
  }
  return out;
}

PruneResult cache_prune(const std::string& dir, const NvrtcForArch& nvrtc, const PruneOptions& opt) {
  PruneResult res;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto remove = [&](const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return;
    if (!opt.dry_run && ::unlink(path.c_str()) != 0) {
      if (errno != ENOENT) res.errors.push_back(fmt::format("{}: {}", path, errno_text(errno)));
      return;
    }
    res.removed.push_back(path);
    res.bytes += static_cast<uint64_t>(st.st_size);
  };

  std::set<std::string> kept_stems;  // entries that stay: their .cu/.log stay too
  std::set<std::string> removed_stems;
  for (const EntryReport& r : cache_scan(dir, false, nvrtc)) {
    const std::string stem = r.path.substr(0, r.path.size() - std::strlen(".cubin"));
    bool drop = opt.all || !r.current;
    if (!drop && opt.older_than_s >= 0 && now - r.mtime > opt.older_than_s) drop = true;
    if (drop) {
      remove(r.path);
      removed_stems.insert(stem);
    } else {
      kept_stems.insert(stem);
    }
  }

  const auto names = dir_names(dir);
  if (!names) {
    res.errors.push_back(fmt::format("{}: {}", dir, errno_text(errno)));
    return res;
  }
  for (const auto& name : *names) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const int64_t age = now - static_cast<int64_t>(st.st_mtime);
    if (is_temp_file_name(name)) {
      if (age >= opt.temp_min_age_s) remove(path);
      continue;
    }
    if (is_lock_file_name(name)) {
      // Removed only when nobody holds it (its holder was killed), and under
      // its lock, as a holder removes it; a held one is a compile in progress.
      const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && still_at_path(fd, path)) remove(path);
      ::close(fd);
      continue;
    }
    std::string kernel, key16, ext;
    if (!split_entry_name(name, &kernel, &key16, &ext) || (ext != "cu" && ext != "log")) continue;
    const std::string stem = dir + "/" + kernel + "-" + key16;
    if (removed_stems.count(stem)) {
      remove(path);
    } else if (!kept_stems.count(stem) && age >= opt.temp_min_age_s) {
      remove(path);  // orphan: its writer died before the .cubin, or it was removed
    }
  }
  if (!opt.dry_run && !res.removed.empty()) fsync_dir(dir);
  return res;
}

void cache_reset_for_tests() {
  CacheState& s = cache_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.resolved = false;
  s.dir.clear();
  s.dir_candidate.clear();
  s.dir_origin.clear();
  s.dir_problem.clear();
  s.dir_absent = false;
  s.bundles.clear();
  s.warned = false;
  s.memory.clear();
  s.override_ = CacheOverride{};
  s.has_override = false;
}

}  // namespace flashgen::rt
