// Internal runtime entry points: the compile path (generate -> key -> cache ->
// NVRTC) and the problem/spec match check shared by launch and the C ABI.
// flashgen::compile() validates the spec against its arch's profile first and
// then calls this; tests use it directly to compile specs for an arch that no
// builtin profile lists yet (e.g. sm_89 with the ampere tiles).
#pragma once

#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/nvrtc.hpp"

namespace flashgen::rt {

/// What compile() uses for `spec`: kernel name, generated source, NVRTC
/// options, the version of the NVRTC that compiles for spec.arch, cache key.
/// Throws Unavailable when no NVRTC serves the arch.
struct CompileInputs {
  std::string name;
  std::string source;
  std::vector<std::string> options;
  NvrtcVersion nvrtc;
  std::string key;
};
CompileInputs compile_inputs(const KernelSpec& spec);

/// The generated CUDA source of `spec` (the generator's emit, by family; no
/// profile validation); throws Unsupported for a spec it cannot generate.
std::string kernel_source(const KernelSpec& spec);

/// The NVRTC options of `spec`: nvrtc_options(spec.arch), for the
/// arch-specific target sm_<arch>a when its unit needs one (wgmma; see
/// gen/unit_traits.hpp). Part of the cache key.
std::vector<std::string> kernel_nvrtc_options(const KernelSpec& spec);

/// gen::emit(spec), then the disk cache, then NVRTC on a miss (and
/// store). No profile validation. Concurrent calls for the same key compile
/// once, within a process (a mutex per key) and across processes sharing the
/// cache directory (rt::cache_claim); the others then read the fresh entry.
/// force_recompile skips the cache lookup (used when a cached cubin fails to
/// load) and replaces the entry.
/// Throws CompileError (spec, kernel name, options, log, dumped source path)
/// or Unavailable (no NVRTC).
CompiledKernel compile_unvalidated(const KernelSpec& spec, bool force_recompile = false);

/// Throws InvalidArgument naming the first field where `problem` does not
/// match `spec` (dtype, head_dim, head_dim_v, mask, bias kind, LSE presence).
/// Does not run check_problem.
void check_problem_matches_spec(const AttentionProblem& problem, const KernelSpec& spec);

}  // namespace flashgen::rt
