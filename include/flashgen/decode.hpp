// libflashgen — split-KV decode: an AttentionProblem run as a fwd_split launch
// (GQA packing, the key range split over blocks, fp32 partial O and LSE in a
// workspace) followed by a combine launch (the merge of attention states,
// merge.hpp) that writes O and, when asked for, LSE; with one split of a tile
// whose warps split the keys (KernelSpec::key_warps() > 1) the split kernel
// writes O and LSE itself and no combine runs (the same bits). docs/design.md,
// "The split-KV forward". The result is the forward's (problem.hpp) to the
// rounding of the fp32 partials; with a given num_splits it is bitwise the
// same run to run.
//
//   DecodePlan dp = flashgen::plan_decode(problem, arch, sm_count);
//   cuMemAlloc(&ws, n = dp.workspace_bytes)   // device memory, once, reused
//   flashgen::decode(problem, stream, {.plan = &dp, .workspace = ws, .workspace_bytes = n});
// or flashgen::decode(problem, stream): plan for the current device and use
// the library's workspace for the current context and stream (allocated on
// first use and when a larger one is needed, then kept: no allocation on later
// calls of the same or a smaller size; threads deciding on one stream take
// turns enqueuing, and CU_STREAM_PER_THREAD gets one per thread).
#pragma once

#include <cstdint>

#include "flashgen/problem.hpp"
#include "flashgen/spec.hpp"

typedef struct CUstream_st* CUstream;

namespace flashgen {

/// The most key splits of one decode (the combine family's kMaxMergeStates is larger).
inline constexpr int kMaxDecodeSplits = 128;

/// What decode launches: the fwd_split kernel, how many key splits, and the
/// combine kernel that merges them.
struct DecodePlan {
  KernelSpec split;      ///< family fwd_split (an mma.sync unit; pack = query heads per packed row group)
  KernelSpec combine;    ///< family combine: partial f32, out = problem.dtype, LSE as the problem asks
  int num_splits = 1;    ///< key splits, in [1, kMaxDecodeSplits]
  int64_t tiles_per_split = 0;  ///< key tiles of split.tile.block_n keys each split visits (the last may have fewer)
  int64_t workspace_bytes = 0;  ///< decode_workspace_bytes(problem, *this)
};

/// Plan a decode of `problem` on compute capability `arch` with `sm_count`
/// SMs: the profile's mma.sync unit with one 16-row slice per warp, `pack` the
/// largest power of two (at most 16 and block_m) dividing heads_q / heads_kv;
/// with fewer packed rows (seqlen_q * pack) than the tile has, the smallest
/// power-of-two block_m of 16 or more that holds them and the leftover warps
/// splitting each key tile (KernelSpec::key_warps; m16n8 units, when the tile
/// allows it and its merge fits the profile). When num_splits is 0, splits
/// chosen by wave efficiency: 1 when the unsplit grid's waves are at least 0.8
/// full (resident blocks = SMs x blocks per SM, the latter estimated from the
/// kernel's shared memory, threads and 256 registers per thread), else the
/// fewest splits whose blocks fill their waves within 0.95 of the best
/// count's (at most one split per visible key tile and
/// kMaxDecodeSplits; a top-left causal mask shows min(seqlen_q, seqlen_k) keys, a
/// sliding window the keys from off - window_left to seqlen_q - 1 + off + window_right;
/// 1 for an empty problem), trimmed to an even cover of the key tiles; num_splits >= 1 is
/// used as given (1: no split; more splits than key tiles leave some empty,
/// which the combine skips). Checks the problem (check_problem) and that
/// seqlen_q * pack and seqlen_k are at most 2^31 - 257. Needs no GPU. Throws InvalidArgument (naming
/// num_splits, sm_count or the problem's field) / Unsupported (no profile for
/// the arch, or a dtype its unit lacks).
DecodePlan plan_decode(const AttentionProblem& problem, int arch, int sm_count, int num_splits = 0);
/// plan_decode with `profile` instead of profile_for_arch(arch) (a test or a
/// binding chooses the hardware description without FLASHGEN_PROFILE): its
/// matrix_unit, tiles and resources; both kernels are validated against it,
/// which must list `arch` (Unsupported otherwise). decode() with such a plan
/// validates its kernels against profile_for_arch(arch), so it runs only
/// kernels valid there too. Needs no GPU; throws as plan_decode.
DecodePlan plan_decode(const AttentionProblem& problem, int arch, int sm_count, int num_splits, const Profile& profile);

/// Bytes of device workspace a decode of `problem` with `plan` needs:
/// num_splits * batch * heads_q * seqlen_q * (head_dim_v + 1) * 4 (the fp32
/// partial O [split, batch, seqlen_q, heads_q, head_dim_v], then the partial
/// LSE [split, batch, heads_q, seqlen_q]), rounded up to 256; for a packed
/// batch (cu_seqlens_q) one batch of total_q rows: num_splits * total_q *
/// heads_q * (head_dim_v + 1) * 4, and the merge writes only the rows of its
/// sequences (cu_seqlens_q[0] .. cu_seqlens_q[batch] - 1; a sequence longer
/// than seqlen_q, which breaks the contract, gets undefined rows past it). Throws
/// InvalidArgument when that overflows int64.
int64_t decode_workspace_bytes(const AttentionProblem& problem, const DecodePlan& plan);

/// Whether decode() with `plan` launches the combine after the split kernel:
/// false for one split of a tile whose warps split the keys
/// (plan.split.key_warps() > 1), whose blocks write O and LSE themselves.
bool decode_merges(const DecodePlan& plan) noexcept;

/// Whether forward() runs `problem` as a decode on compute capability `arch`
/// with `sm_count` SMs: the arch has a profile whose mma.sync unit takes the
/// dtype, the packed rows
/// of a K/V head fit one block (seqlen_q * heads_q / heads_kv <= 64), there
/// are at least 512 keys some row sees (seqlen_k >= 512, and seqlen_q >= 512 with a top-left causal or
/// window mask), and the one-kernel forward would leave SMs idle
/// (ceil(seqlen_q / 64) * heads_q * batch < sm_count). A heuristic, to be
/// fitted to measurements (bench/bench_decode.py). Needs no GPU; never throws
/// for a problem check_problem accepts (false for one it refuses).
bool decode_preferred(const AttentionProblem& problem, int arch, int sm_count) noexcept;

struct DecodeOptions {
  /// The plan to run (from plan_decode for this problem's class); nullptr:
  /// plan_decode for the current device with `num_splits`.
  const DecodePlan* plan = nullptr;
  int num_splits = 0;  ///< without a plan: 0 chooses, 1..128 as given; with one it must be 0
  /// Device memory for the partials, 256-byte aligned, at least
  /// workspace_bytes of the plan (read and written by the call's kernels
  /// only; it may be reused once the stream has passed the call). nullptr:
  /// the library's workspace for the current context and stream (per thread
  /// for CU_STREAM_PER_THREAD; kept until the process exits). With a caller's
  /// workspace the call allocates nothing and can be captured in a CUDA
  /// graph (the kernels must be loaded before capture: load_kernel).
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;  ///< > 0 with a workspace, 0 without
};

struct DecodeInfo {
  DecodePlan plan;
  bool launched = false;  ///< false for an empty problem (nothing to compute)
};

/// Run `problem` as a split-KV decode on `stream` (asynchronous). O (and LSE)
/// as the forward writes them; the workspace holds the partials meanwhile
/// (one split of a key-split tile leaves it untouched: no combine runs).
/// Throws InvalidArgument (the problem, the options: a workspace too small or
/// misaligned, a plan of another problem class or whose kernels are not valid
/// for their arch's profile, e.g. an edited tile), Unsupported, CompileError,
/// DriverError, Unavailable (no GPU).
DecodeInfo decode(const AttentionProblem& problem, CUstream stream, const DecodeOptions& options = {});

}  // namespace flashgen
