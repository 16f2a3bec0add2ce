// The kernel cache (internal to libflashgen; its tests and tools/flashgen use
// it directly). See docs/design.md, "Kernel cache".
//
// Key: XXH3-128 (32 lowercase hex digits) of, in order and length-prefixed:
// the cache format version, flashgen::kGeneratorVersion, the full generated
// source, every NVRTC option in its fixed order, the target arch and the NVRTC
// version. Never of the output.
//
// Layers, searched in order:
//   1. read-only bundles: each directory in $FLASHGEN_CACHE_PATH
//      (colon-separated), e.g. pre-generated entries shipped in an image
//      (`flashgen pregen --out DIR`). Never written.
//   2. the writable user cache: $FLASHGEN_CACHE_DIR, else
//      $XDG_CACHE_HOME/flashgen, else $HOME/.cache/flashgen, else the home
//      directory of the passwd entry (created mode 0700, parents included, by
//      the first write: cache_store, cache_claim, cache_dir, dump_dir; a
//      lookup or cache_layers never creates it, and a user cache that does
//      not exist yet holds no entries).
//   3. memory, used only when the user cache cannot be used (unset, not
//      creatable, not writable, untrusted, or a write fails). One warning on
//      stderr per process, printed when the first kernel is kept in memory only.
//
// Trust (a cubin is code that runs with the caller's rights):
//   - the user cache directory must be owned by this process's effective uid
//     and not writable by group or others, and no directory above it may be
//     writable by others without the sticky bit; otherwise nothing in it is
//     loaded or written (memory layer; the warning says why and how to fix it);
//   - a user-cache entry file must be a regular file owned by the effective
//     uid and not writable by group or others; otherwise it is not loaded (one
//     notice), it is recompiled and replaced;
//   - a bundle directory is used only when it is not writable by group or
//     others (one notice per bundle otherwise); a bundle file only when it is
//     a regular file not writable by group or others (its owner does not
//     matter: bundles are typically root-owned and read by every user).
//
// Entry: <dir>/<kernel_name>-<key[0:16]>.cubin = a 128-byte header followed by
// the cubin; <kernel_name>-<key[0:16]>.cu (source) and .log (NVRTC log) beside
// it. Header, little-endian:
//   0   char[8]  "FLASHGEN"
//   8   u32      cache format version (kCacheFormatVersion)
//   12  u32      header size (128)
//   16  char[32] the full key, hex
//   48  u64      payload (cubin) size in bytes
//   56  u64      XXH3-64 of the payload
//   64  u32      target arch (10*major+minor)
//   68  u32      NVRTC major version
//   72  u32      NVRTC minor version
//   76  u32      0
//   80  char[32] generator version (kGeneratorVersion), NUL-padded
//   112 u64      0
//   120 u64      XXH3-64 of header bytes [0, 120)
// Files are written to a unique temp file ".<name>.tmp.<pid>.<tid>.<random>"
// in the same directory, fsync-ed and renamed into place, so readers see a
// whole entry or none, also when the writer is killed. An entry that is empty,
// truncated, corrupt, of another format version, made by another generator
// version or NVRTC version, for another arch or of another key is a miss (one
// stderr line "flashgen: cache entry <path> is <reason>; recompiling"), and
// the caller's store replaces it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/nvrtc.hpp"

namespace flashgen::rt {

inline constexpr uint32_t kCacheFormatVersion = 2;
inline constexpr size_t kCacheHeaderSize = 128;
inline constexpr char kCacheMagic[8] = {'F', 'L', 'A', 'S', 'H', 'G', 'E', 'N'};

/// The cache key (32 hex digits) of one compile.
std::string cache_key(const std::string& source, const std::vector<std::string>& options, int arch,
                      const NvrtcVersion& nvrtc);

/// "<dir>/<kernel_name>-<key[0:16]>" + ext (ext = ".cubin", ".cu" or ".log").
std::string cache_entry_path(const std::string& dir, const std::string& kernel_name,
                             const std::string& key, const char* ext = ".cubin");

/// What an entry was made from, besides the source and the options (which
/// only the key covers). Stored in the header so that a foreign entry is
/// named precisely ("made by NVRTC 12.8", "compiled for sm_80").
struct EntryIdentity {
  std::string key;        ///< 32 hex digits
  int arch = 0;           ///< 10*major+minor
  NvrtcVersion nvrtc;     ///< NVRTC that compiled it
  std::string generator;  ///< flashgen::kGeneratorVersion of the writer (at most 32 bytes)
};

/// The identity of an entry this library would write for `key` now.
EntryIdentity current_identity(const std::string& key, int arch, const NvrtcVersion& nvrtc);

/// A decoded header (the payload is not checked).
struct EntryHeader {
  uint32_t format = 0;
  EntryIdentity id;
  uint64_t payload_size = 0;
  uint64_t payload_hash = 0;
};

/// The header of `bytes` if it has the magic, this format version and an
/// intact header checksum; otherwise nullopt and *reason says why.
std::optional<EntryHeader> decode_cache_header(const char* bytes, size_t size, std::string* reason);

/// Header + payload bytes of an entry.
std::vector<char> encode_cache_entry(const EntryIdentity& id, const std::vector<char>& cubin);
/// Same, with the identity of this library for `key` (arch 0, NVRTC 0.0 when
/// unknown); for tests and tools that store arbitrary payloads.
std::vector<char> encode_cache_entry(const std::string& key, const std::vector<char>& cubin);

/// The payload of `bytes` if it is a whole entry made by `expect` (generator,
/// NVRTC version, arch and key all equal); otherwise nullopt and *reason says
/// why ("empty (0 bytes)", "truncated (...)", "corrupt (...)", "made by NVRTC
/// 12.8 (this process uses 13.0)", "compiled for sm_80 (...)", ...).
std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes,
                                                    const EntryIdentity& expect, std::string* reason);
/// Same, checking only the key (and everything that makes the entry whole).
std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes,
                                                    const std::string& key, std::string* reason);

struct CacheHit {
  std::vector<char> cubin;
  std::string log;   ///< the .log beside the entry ("" if absent)
  std::string path;  ///< entry file; "" for the memory layer
  bool from_bundle = false;
};

/// Look `id` up in the bundles, the user cache and the memory layer.
/// Bad or untrusted entries are reported on stderr (unless `report` is false:
/// a second look after cache_claim, when the first one has said it) and
/// treated as misses. Never throws for cache problems.
std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const EntryIdentity& id, bool report = true);
/// Same with the key only (identity of this library, arch/NVRTC unchecked).
std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const std::string& key, bool report = true);

/// Store an entry in the user cache (created when it does not exist yet), or
/// in memory when it is not usable. Returns the entry path, or "" when the
/// entry went to memory. Never throws for cache problems.
std::string cache_store(const std::string& kernel_name, const EntryIdentity& id,
                        const std::vector<char>& cubin, const std::string& source,
                        const std::string& log);
std::string cache_store(const std::string& kernel_name, const std::string& key,
                        const std::vector<char>& cubin, const std::string& source,
                        const std::string& log);

// ---- compile claims: one compile per key across processes ---------------------
//
// A claim is an exclusive flock(2) on "<dir>/<kernel_name>-<key[0:16]>.lock"
// in the writable layer (the user cache, or the bundle being written). The
// kernel drops a flock when its holder exits or is killed (SIGKILL included),
// so a crash never leaves a claim that blocks anyone; a lock file it leaves
// behind is only a name: the next claimant locks it at once, and cache_prune
// removes it. Locks belong to an open file, so two threads of one process
// exclude each other too. The holder unlinks the lock file before it lets go;
// a claimant that locked a file no longer at the path (unlinked meanwhile)
// opens the path again, so one key never has two holders. Lock files are not
// entries: cache_scan never lists them.
//
// No claim is taken (held() is false, nothing waits) when the cache is
// memory-only, when the lock file cannot be created (read-only directory, no
// space) or when the file system refuses flock.

/// A held (or not held) claim; released by release() or the destructor.
class CacheClaim {
 public:
  CacheClaim() = default;
  ~CacheClaim() { release(); }
  CacheClaim(CacheClaim&& o) noexcept;
  CacheClaim& operator=(CacheClaim&& o) noexcept;
  CacheClaim(const CacheClaim&) = delete;
  CacheClaim& operator=(const CacheClaim&) = delete;

  bool held() const { return fd_ >= 0; }
  /// Seconds spent waiting for another holder (0 when the claim was free).
  double waited_s() const { return waited_s_; }
  /// The lock file ("" when not held).
  const std::string& path() const { return path_; }
  /// Unlinks the lock file and drops the lock; no-op when not held.
  void release() noexcept;

 private:
  friend CacheClaim cache_claim(const std::string& kernel_name, const std::string& key);
  int fd_ = -1;
  std::string path_;
  double waited_s_ = 0;
};

/// Claims the compile of `key`: returns once no other holder has it, or when
/// the wait limit (cache_claim_wait_limit_s) is over, with one stderr line
/// naming the holder's pid, and then without the claim (a stopped or hung
/// holder never blocks others forever). The caller looks the entry up again
/// after a claim (a holder it waited for has stored it) and compiles only on
/// a miss. Never throws for cache problems.
CacheClaim cache_claim(const std::string& kernel_name, const std::string& key);

/// How long cache_claim waits for another holder, seconds (default 300);
/// set_cache_claim_wait_limit_s is for tests.
double cache_claim_wait_limit_s();
void set_cache_claim_wait_limit_s(double seconds);

/// True for a claim's lock file name ("<kernel>-<key16>.lock").
bool is_lock_file_name(const std::string& file_name);

/// The writable user cache directory, "" when memory-only. For writers: it
/// creates the directory when it does not exist yet.
std::string cache_dir();

/// A directory for dumping failed sources: the user cache if writable (not a
/// bundle being written; created when it does not exist yet), else $TMPDIR,
/// else /tmp.
std::string dump_dir();

/// One layer as resolved for this process (flashgen info, cache ls).
struct CacheLayer {
  enum class Kind { bundle, user, memory };
  Kind kind = Kind::user;
  std::string path;     ///< "" for memory
  std::string origin;   ///< "FLASHGEN_CACHE_PATH", "FLASHGEN_CACHE_DIR", "$HOME/.cache/flashgen", ...
  bool usable = false;  ///< searched (bundles) / searched and written (user)
  std::string problem;  ///< why not usable (missing, untrusted, not writable, ...)
  /// User cache: false when its directory does not exist yet (usable then
  /// means that the first write will create it; it holds no entries).
  bool exists = true;
};
/// Bundles in search order, then the user cache (or, when it is not usable,
/// its candidate path with the problem), then the memory layer. Creates
/// nothing (a user cache that does not exist is reported with exists false).
std::vector<CacheLayer> cache_layers();

/// For tools (flashgen pregen --out): use `store_dir` as the writable layer
/// instead of the user cache, search only `bundles`, and, with bundle_mode,
/// create directories 0755 and files 0644 so that every user can read the
/// result (a bundle). Applies to the rest of the process (until reset).
struct CacheOverride {
  std::optional<std::string> store_dir;
  std::optional<std::vector<std::string>> bundles;
  bool bundle_mode = false;
};
void cache_override(const CacheOverride& o);

/// "" when the entry file at `path` may be loaded from a directory of this
/// kind; otherwise the reason (not a regular file, owned by another uid,
/// writable by group or others).
std::string untrusted_file_reason(const std::string& path, bool bundle);
/// "" when directory `dir` may be used (bundle: not writable by group or
/// others; user cache: also owned by the effective uid and no ancestor
/// writable by others without the sticky bit); otherwise reason + fix.
std::string untrusted_dir_reason(const std::string& dir, bool bundle);

/// Write `data` to `path` atomically (unique temp file in the same directory,
/// fsync, rename), with permissions `mode` exactly (not masked by the umask).
/// Returns "" on success, else a sentence saying what failed; the temp file
/// is removed on failure.
std::string write_file_atomic(const std::string& path, const char* data, size_t size,
                              mode_t mode = 0644);

/// True for a writer's temp file name (".<name>.tmp.<...>").
bool is_temp_file_name(const std::string& file_name);

// ---- maintenance (flashgen cache ls | verify | prune | clear) ----------------

/// One entry (.cubin) of a directory, with its verdict.
struct EntryReport {
  std::string path;          ///< the .cubin
  std::string kernel_name;   ///< from the file name
  std::string spec;          ///< canonical spec from the .cu's "// spec:" line ("" if unknown)
  std::optional<EntryHeader> header;
  uint64_t bytes = 0;        ///< .cubin + .cu + .log on disk
  int64_t mtime = 0;         ///< seconds since the epoch
  bool valid = false;        ///< whole, trusted entry
  bool current = false;      ///< valid, made by this generator and this NVRTC (can be a hit)
  std::string problem;       ///< why not valid / not current ("" when current)
};
/// The NVRTC version that compiles for an arch on this machine (nullopt:
/// unknown, e.g. no NVRTC targets it here; such entries count as current).
using NvrtcForArch = std::function<std::optional<NvrtcVersion>(int arch)>;
/// nvrtc_version_for(arch) where an NVRTC serves the arch, else nullopt.
NvrtcForArch loaded_nvrtc_for_arch();

/// Every *.cubin in `dir`, checked (header, payload checksum, trust, key
/// prefix in the file name). An entry of another generator version, or of
/// another NVRTC version than `nvrtc` gives for its arch, is valid but not
/// current; an entry of this generator whose .cu is not what the generator
/// makes today for its spec is "stale" (no lookup can reach it). Unreadable
/// directories give an empty list.
std::vector<EntryReport> cache_scan(const std::string& dir, bool bundle, const NvrtcForArch& nvrtc);

/// The claim lock files in `dir` (is_lock_file_name): `held` by a live claimant (a
/// compile in progress), `left` by one that was stopped (SIGTERM, SIGKILL: cache_prune
/// removes those). Probed with a non-blocking shared flock, let go at once.
struct LockFiles {
  int held = 0, left = 0;
};
LockFiles cache_lock_files(const std::string& dir);

struct PruneOptions {
  bool all = false;               ///< remove every entry (flashgen cache clear)
  int64_t older_than_s = -1;      ///< also remove current entries not modified for this long
  int64_t temp_min_age_s = 600;   ///< temp files / orphans younger than this may belong to a live writer
  bool dry_run = false;
};
struct PruneResult {
  std::vector<std::string> removed;  ///< files removed (or that would be, for a dry run)
  std::vector<std::string> errors;   ///< "path: reason"
  uint64_t bytes = 0;                ///< bytes freed
};
/// Remove from `dir`: invalid and non-current entries (with their .cu/.log),
/// temp files and .cu/.log without a .cubin older than temp_min_age_s, lock
/// files of claims nobody holds (left by a killed holder; a held one belongs
/// to a compile in progress and stays, whatever the options), and, per
/// options, old or all entries. Never touches files that are not cache files
/// (e.g. tune.yml).
PruneResult cache_prune(const std::string& dir, const NvrtcForArch& nvrtc, const PruneOptions& opt);

/// Tests only: forget the resolved directories, the override, the memory
/// layer and the one-warning latches; the environment is read again on next use.
void cache_reset_for_tests();

/// `path` made absolute from the working directory now when it is relative, so that it names
/// the same place after a later chdir and messages show where it is (a relative
/// FLASHGEN_CACHE_DIR, FLASHGEN_CACHE_PATH entry, tool directory or FLASHGEN_TUNE_FILE), then
/// normalised lexically as Python's os.path.abspath does ("." and "x/.." components, repeated
/// and trailing slashes dropped; a ".." after a symbolic link is taken lexically too), so that
/// no directory named only on the way is created. Empty stays empty; unchanged when the working
/// directory cannot be read.
std::string absolute_path(const std::string& path);

}  // namespace flashgen::rt
