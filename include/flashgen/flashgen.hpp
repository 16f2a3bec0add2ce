// libflashgen — public C++ API: plan, generate, compile/load, launch, forward.
//
//   AttentionProblem p = make_bshd_problem(...);        // device pointers
//   KernelSpec spec    = flashgen::plan(p);             // current device's profile
//   Kernel kernel      = flashgen::load_kernel(spec);   // cache or NVRTC, then cuModuleLoadData
//   flashgen::launch(kernel, p, stream);                // asynchronous on `stream`
// or simply flashgen::forward(p, stream). A merge of attention states
// (MergeProblem, merge.hpp) goes the same way: plan(merge_problem, arch),
// load_kernel, launch(kernel, merge_problem, stream), or merge_states(m, stream).
//
// The CUDA driver (libcuda.so.1) and NVRTC (libnvrtc.so.13 or .12, or the file
// named by FLASHGEN_NVRTC_LIBRARY) are opened with dlopen on first use, so
// programs linked with libflashgen start on machines without a GPU.
// All functions are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashgen/decode.hpp"
#include "flashgen/merge.hpp"
#include "flashgen/problem.hpp"
#include "flashgen/profile.hpp"
#include "flashgen/spec.hpp"
#include "flashgen/tune.hpp"
#include "flashgen/types.hpp"
#include "flashgen/version.hpp"
#include "flashgen/warmup.hpp"

// Same declaration as cuda.h, so users need not include it.
typedef struct CUstream_st* CUstream;

namespace flashgen {

/// The CUDA device current in the calling thread (its current context, else
/// device 0's primary context, which is then made current).
struct DeviceInfo {
  int ordinal = 0;
  int arch = 0;                   ///< 10*major + minor
  std::string name;
  int sm_count = 0;
  int64_t smem_per_block_optin = 0;  ///< bytes
  int clock_khz = 0;              ///< current SM clock if known, else max
  int64_t l2_bytes = 0;           ///< L2 cache, bytes (0 if the driver does not say)
};
/// Throws Unavailable when there is no driver or GPU, DriverError on a failed call.
DeviceInfo current_device();

/// True when libcuda.so.1 loads and at least one device is present. Never throws.
bool gpu_available();

/// Choose a KernelSpec for `problem` on compute capability `arch`: the profile's
/// matrix unit and its tile for max(head_dim, head_dim_v), unless a tune file
/// (flashgen/tune.hpp: $FLASHGEN_TUNE_FILE, then tune.yml in the user cache)
/// has an entry for this problem class (dtype, head dims, mask, bias kind,
/// LSE, softcap, sinks, ALiBi, seqlen_q bucket), this arch, this profile's hash and the device: the
/// GPU current in this thread (or device 0) when its arch is `arch`; without
/// such a GPU, tune entries are ignored with one notice. An entry of another
/// device, arch or profile version, or with a tile invalid for the profile, is
/// ignored with one notice on stderr. Checks the problem (check_problem), the
/// spec (validate) and that the spec can launch the problem (check_launch_limits),
/// so nothing is compiled for a problem that cannot run. Needs no GPU. Throws
/// InvalidArgument / Unsupported.
KernelSpec plan(const AttentionProblem& problem, int arch);
/// plan(problem, arch) with `profile` instead of profile_for_arch(arch), so a
/// test or a binding chooses the hardware description without the process-wide
/// FLASHGEN_PROFILE variable. The spec is validated against `profile`, which
/// must list `arch` (Unsupported otherwise); tune entries apply when their
/// profile hash is this profile's (profile_hash). `profile` is only read during
/// the call. generate(), compile() and load_kernel() validate a spec against
/// profile_for_arch(spec.arch), so a spec planned for a profile that is not
/// that one is compiled through them only when it is also valid there.
/// Needs no GPU. Throws InvalidArgument / Unsupported.
KernelSpec plan(const AttentionProblem& problem, int arch, const Profile& profile);
/// plan() for the current device (its arch and name). Throws as plan(problem,
/// arch), plus Unavailable / DriverError without a usable GPU.
KernelSpec plan(const AttentionProblem& problem);
/// plan(problem) with `profile` instead of profile_for_arch of the current
/// device's arch (see plan(problem, arch, profile)). Throws as plan(problem).
KernelSpec plan(const AttentionProblem& problem, const Profile& profile);

/// The generated CUDA source for `spec` (self-contained, deterministic; begins
/// with a comment listing the spec; extern "C" symbol = spec.kernel_name()).
/// Throws Unsupported if the spec is invalid for the profile of its arch.
std::string generate(const KernelSpec& spec);

/// A compiled kernel image (no GPU needed to produce it).
struct CompiledKernel {
  KernelSpec spec;
  std::string name;            ///< spec.kernel_name()
  std::string key;             ///< cache key (hex)
  std::vector<char> cubin;     ///< ELF image for sm_<arch> (sm_<arch>a for the wgmma unit)
  bool from_cache = false;     ///< true: read from a disk cache entry, no NVRTC call
  std::string cache_path;      ///< entry file, empty when memory-only
  std::string compile_log;     ///< NVRTC log incl. ptxas report (empty if from cache and no log file)
};

/// Generate + compile `spec`, consulting the disk cache first (see docs/design.md,
/// "Kernel cache"). Throws CompileError (with spec, name, options, log, dumped source
/// path), Unavailable (no NVRTC), Unsupported (invalid spec).
CompiledKernel compile(const KernelSpec& spec);

/// A kernel loaded into the current CUDA context (cheap to copy; owned by the
/// library's per-context module cache, valid until process exit).
struct Kernel {
  KernelSpec spec;
  void* function = nullptr;    ///< CUfunction
  void* context = nullptr;     ///< CUcontext it was loaded into
  bool from_cache = false;     ///< the cubin came from disk, no NVRTC call
};

/// compile() then load into the current context (memoized per context and spec).
/// Throws as compile(), plus Unavailable / DriverError.
Kernel load_kernel(const KernelSpec& spec);

/// Launch `kernel` for `problem` on `stream` (asynchronous). Checks the problem
/// (check_problem) and that it matches the kernel's spec before launching.
/// seqlen_q == 0 or batch == 0 or heads_q == 0 launches nothing.
/// mma.sync units: grid ceil(seqlen_q / block_m) * heads_q * batch blocks.
/// wgmma unit: persistent, grid min(that, resident blocks per SM * SMs); K and V
/// are described to the TMA unit by tensor maps built here (cuTensorMapEncodeTiled,
/// CUDA driver API "Tensor Map Object Management"): InvalidArgument when K or V
/// has stride_seq 0 with seqlen_k > 1 (TMA cannot repeat a row; plan() picks the
/// mma.sync unit for such problems) or the driver refuses the map.
/// Throws InvalidArgument / DriverError.
void launch(const Kernel& kernel, const AttentionProblem& problem, CUstream stream);

/// The limits of one forward launch of `spec` that check_problem does not
/// know: seqlen_q and seqlen_k at most 2^31 - 257 (the kernels count rows and
/// keys in 32 bits) and ceil(seqlen_q / block_m) * heads_q * batch at most
/// 2^31 - 1 work items (a grid's x dimension). plan() and launch() check them
/// (launch() before any driver call; forward() and flashgen_launch_spec before
/// compiling or loading); `flashgen explain` reports them. An empty problem
/// (nothing to launch) passes. Throws InvalidArgument naming the numbers.
void check_launch_limits(const AttentionProblem& problem, const KernelSpec& spec);

/// What forward() did.
struct ForwardInfo {
  KernelSpec spec;             ///< the forward kernel, or decode's fwd_split kernel
  bool launched = false;       ///< false for empty problems (seqlen_q == 0 ...)
  bool from_cache = false;     ///< kernel image came from the disk cache (decode: not reported, false)
  int num_splits = 0;          ///< > 0: run as a split-KV decode (decode.hpp) with this many splits
};

/// plan + load_kernel + launch in one call; a problem decode_preferred()
/// says is a decode runs as decode(problem, stream) instead (the library's
/// workspace, splits chosen for the current device).
ForwardInfo forward(const AttentionProblem& problem, CUstream stream);

// ---- merge of attention states (merge.hpp) ------------------------------------

/// The combine KernelSpec of `problem` on compute capability `arch`: family
/// combine, the problem's partial_dtype, out_dtype and head_dim_v, has_lse =
/// (problem.lse.data != nullptr). Checks the problem (check_merge_problem)
/// and validates the spec against profile_for_arch(arch) (every profile's
/// archs run the combine kernel). Needs no GPU. Throws InvalidArgument /
/// Unsupported (no profile for arch).
KernelSpec plan(const MergeProblem& problem, int arch);
/// plan(problem, arch) for the current device's arch. Throws as that, plus
/// Unavailable / DriverError without a usable GPU.
KernelSpec plan(const MergeProblem& problem);

/// Launch the combine `kernel` (from load_kernel of a plan(merge_problem)
/// spec) for `problem` on `stream` (asynchronous). Checks the problem
/// (check_merge_problem) and that it matches the kernel's spec (family
/// combine, partial_dtype, out_dtype, head_dim_v, LSE presence) before
/// launching; an empty merge (batch, seqlen_q or heads zero) launches
/// nothing. Grid ceil(batch * seqlen_q * heads / rows_per_block) blocks (at
/// most 2^31 - 1; the blocks stride over the rows), 128 threads, where
/// rows_per_block = 128 / (lanes per row: the power of two at least
/// head_dim_v / 8, at most 32). Reads each partial O_s whose LSE_s is not -inf
/// once; needs no workspace. Throws InvalidArgument / DriverError.
void launch(const Kernel& kernel, const MergeProblem& problem, CUstream stream);

/// What merge_states() did.
struct MergeInfo {
  KernelSpec spec;
  bool launched = false;       ///< false for an empty merge
  bool from_cache = false;     ///< kernel image came from the disk cache
};

/// plan (current device) + load_kernel + launch of a merge of attention
/// states in one call (merge.hpp: O = sum_s exp(LSE_s - LSE) O_s, LSE =
/// log sum_s exp(LSE_s); -inf partials are skipped). Asynchronous on
/// `stream`. Throws as plan(problem), load_kernel and launch.
MergeInfo merge_states(const MergeProblem& problem, CUstream stream);

}  // namespace flashgen
