// The kernel cache (internal to libflashgen; its tests use it directly).
// See DESIGN.md, "Cache".
//
// Key: XXH3-128 (32 lowercase hex digits) of, in order and length-prefixed:
// the cache format version, flashgen::kGeneratorVersion, the full generated
// source, every NVRTC option in its fixed order, the target arch and the NVRTC
// version. Never of the output.
//
// Layers, searched in order:
//   1. read-only bundles: each directory in $FLASHGEN_CACHE_BUNDLES
//      (colon-separated), e.g. pre-generated entries shipped in an image;
//   2. the writable user cache: $FLASHGEN_CACHE_DIR, else
//      $XDG_CACHE_HOME/flashgen, else $HOME/.cache/flashgen (created 0700);
//   3. memory, used only when the user cache cannot be created or written
//      (one warning on stderr per process).
//
// Entry: <dir>/<kernel_name>-<key[0:16]>.cubin = a 64-byte header followed by
// the cubin; <kernel_name>-<key[0:16]>.cu (source) and .log (NVRTC log) beside
// it. Header, little-endian:
//   0  char[8]  "FLASHGEN"
//   8  u32      cache format version (kCacheFormatVersion)
//   12 u32      key length (32)
//   16 char[32] the full key, hex
//   48 u64      payload (cubin) size in bytes
//   56 u64      XXH3-64 of the payload
// Files are written to a unique temp file in the same directory, fsync-ed and
// renamed into place, so readers see a whole entry or none. An entry that is
// truncated, corrupt, of another format version or of another key is a miss
// (one stderr line "flashgen: cache entry <path> is <reason>; recompiling"),
// and the caller's store replaces it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/nvrtc.hpp"

namespace flashgen::rt {

inline constexpr uint32_t kCacheFormatVersion = 1;
inline constexpr size_t kCacheHeaderSize = 64;
inline constexpr char kCacheMagic[8] = {'F', 'L', 'A', 'S', 'H', 'G', 'E', 'N'};

/// The cache key (32 hex digits) of one compile.
std::string cache_key(const std::string& source, const std::vector<std::string>& options, int arch,
                      const NvrtcVersion& nvrtc);

/// "<dir>/<kernel_name>-<key[0:16]>" + ext (ext = ".cubin", ".cu" or ".log").
std::string cache_entry_path(const std::string& dir, const std::string& kernel_name,
                             const std::string& key, const char* ext = ".cubin");

struct CacheHit {
  std::vector<char> cubin;
  std::string log;   ///< the .log beside the entry ("" if absent)
  std::string path;  ///< entry file; "" for the memory layer
  bool from_bundle = false;
};

/// Look `key` up in the bundles, the user cache and the memory layer.
/// Bad entries are reported on stderr and treated as misses. Never throws
/// for cache problems.
std::optional<CacheHit> cache_lookup(const std::string& kernel_name, const std::string& key);

/// Store an entry in the user cache (or in memory when it is not writable).
/// Returns the entry path, or "" when the entry went to memory. Never throws
/// for cache problems.
std::string cache_store(const std::string& kernel_name, const std::string& key,
                        const std::vector<char>& cubin, const std::string& source,
                        const std::string& log);

/// The writable user cache directory, "" when memory-only.
std::string cache_dir();

/// A directory for dumping failed sources: the user cache if writable, else
/// $TMPDIR, else /tmp.
std::string dump_dir();

/// Header + payload bytes of an entry.
std::vector<char> encode_cache_entry(const std::string& key, const std::vector<char>& cubin);

/// The payload of `bytes` if it is a valid entry for `key`; otherwise nullopt
/// and *reason says why ("truncated (...)", "corrupt (...)", ...).
std::optional<std::vector<char>> decode_cache_entry(const std::vector<char>& bytes,
                                                    const std::string& key, std::string* reason);

/// Write `data` to `path` atomically (unique temp file in the same directory,
/// fsync, rename). Returns "" on success, else a sentence saying what failed;
/// the temp file is removed on failure.
std::string write_file_atomic(const std::string& path, const char* data, size_t size);

/// Tests only: forget the resolved directories, the memory layer and the
/// one-warning latch; the environment is read again on next use.
void cache_reset_for_tests();

}  // namespace flashgen::rt
