// libflashgen — warm-up: compile a list of kernels ahead of time on a thread
// pool, so that an engine pays for NVRTC while it loads its model instead of
// at the first call (`flashgen pregen` is built on it).
//
//   std::vector<flashgen::KernelSpec> specs = ...;        // e.g. plan() of every expected problem
//   auto results = flashgen::warmup(specs);               // all cores; no GPU needed
//   // later: load_kernel(spec) reads the cubin from the cache, no NVRTC call
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "flashgen/spec.hpp"
#include "flashgen/types.hpp"

namespace flashgen {

/// What warmup() did for one spec.
struct WarmupResult {
  KernelSpec spec;
  bool ok = false;              ///< compiled, or found in a cache layer
  bool from_cache = false;      ///< already present (bundle, user cache or memory): no NVRTC call
  std::string cache_path;       ///< entry file ("" when kept in memory only, or on failure)
  std::string compile_log;      ///< NVRTC log with the ptxas report (registers, spills)
  double seconds = 0.0;         ///< wall time of this spec's compile or lookup
  ErrorCode error_code = ErrorCode::internal;  ///< meaningful when !ok
  std::string error;            ///< the exception's message when !ok
};

/// Progress after each finished spec.
struct WarmupProgress {
  size_t done = 0;        ///< specs finished (ok or not)
  size_t total = 0;       ///< specs requested
  size_t compiled = 0;    ///< finished by an NVRTC compile
  size_t cached = 0;      ///< finished from a cache layer
  size_t failed = 0;      ///< finished with an error
  double elapsed_s = 0;   ///< since warmup() began
  const WarmupResult* last = nullptr;  ///< the spec that just finished
};
/// Called after every finished spec, from a worker thread, never concurrently
/// with itself (calls are serialized). It must not call warmup().
using WarmupCallback = std::function<void(const WarmupProgress&)>;

/// compile() every spec of `specs` on `threads` worker threads (0: one per
/// hardware thread; never more threads than specs). NVRTC compiles separate
/// programs concurrently; duplicates in `specs` compile once (the others are
/// cache hits). Each spec is validated against its arch's profile first.
/// Never throws for a spec: a failed spec (invalid, compile error, no NVRTC)
/// is reported in its WarmupResult and the others still compile. Results are
/// in the order of `specs`. Throws InvalidArgument if threads < 0.
std::vector<WarmupResult> warmup(const std::vector<KernelSpec>& specs, int threads = 0,
                                 const WarmupCallback& progress = {});

}  // namespace flashgen
