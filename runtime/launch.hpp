// Launch descriptions per kernel family (runtime/api.cpp): what one launch of
// a family's kernel needs besides the kernel itself. An operation is one or
// more such launches (a merge of attention states is one combine launch;
// split-KV decode will be a fwd_split launch and a combine launch).
#pragma once

#include <cstdint>

#include "flashgen/flashgen.hpp"
#include "runtime/driver.hpp"

namespace flashgen::rt {

/// One launch of a family's kernel: built from a checked problem and the
/// kernel's spec (the family's launch() checks both first), then handed to
/// launch_family.
class FamilyLaunch {
 public:
  virtual ~FamilyLaunch() = default;
  /// Device workspace bytes the launch needs (0: none; no family needs one yet).
  virtual int64_t workspace_bytes() const { return 0; }
  /// Driver-side setup once the kernel's context is current (the wgmma
  /// forward's TMA tensor maps); throws InvalidArgument / DriverError.
  virtual void prepare(const Driver&) {}
  /// The grid's x dimension (blocks), in [1, 2^31 - 1].
  virtual int64_t grid(const Driver& d, const Kernel& kernel) const = 0;
  /// The kernel's parameter array for cuLaunchKernel (pointers into this object).
  virtual void** args() = 0;
};

/// Make the kernel's context current (or refuse another one), prepare,
/// then cuLaunchKernel with grid launch.grid(), block kernel.spec.threads()
/// and kernel.spec.smem_bytes() bytes of dynamic shared memory on `stream`.
/// Throws InvalidArgument (wrong context) / DriverError.
void launch_family(const Kernel& kernel, FamilyLaunch& launch, CUstream stream);

/// Throws InvalidArgument when seqlen_q or seqlen_k exceeds 2^31 - 257 (the
/// kernels count rows and keys in 32 bits): check_launch_limits' part that
/// needs no spec, run by the device-planning entry points before they look
/// for a GPU. An empty problem passes.
void check_row_limits(const AttentionProblem& problem);

/// Throws InvalidArgument "plan_decode: num_splits (N) must be 0 (chosen) or in [1,
/// kMaxDecodeSplits]" unless num_splits is 0 or in that range (plan_decode's check, which
/// the C ABI runs before it looks for a GPU).
void check_decode_num_splits(int num_splits);

/// The number of groups of (batch, head group) pairs in the longest-first block
/// order of a forward launch (FwdParams::lpt_groups; templates/fwd_block.cuh,
/// fg_lpt_order): 0 for a grid that keeps its block order (no causal or window
/// mask, a persistent kernel, `l2_bytes` <= 0: unknown, or K/V so long that a
/// group would be one pair), else ceil(pairs / G), G the most pairs whose K and
/// V (seqlen_k keys of head_dim + head_dim_v elements; GQA: a K/V head is
/// shared by heads_q / heads_kv query heads, pack of them a pair) fit in half
/// of `l2_bytes`; pairs = batch * heads_q / pack.
int64_t lpt_groups(const AttentionProblem& problem, const KernelSpec& spec, int64_t l2_bytes);

/// The operand of fg_div_invariant (templates/fwd_block.cuh) that divides by
/// `d` (1 <= d < 2^31): the multiplier m = floor(2^32 (2^s - d) / d) + 1 and the
/// shift s = ceil(log2 d), packed as m | s << 32; then x / d = (umulhi(x, m) +
/// x) >> s for every 0 <= x < 2^31 (Granlund and Montgomery, "Division by
/// invariant integers using multiplication", PLDI 1994, figure 4.1).
/// Throws InvalidArgument for d outside [1, 2^31).
int64_t div_invariant(int64_t d);

/// The group shape fg_lpt_order reads (FwdParams::lpt_big ... lpt_div_pairs0)
/// for `groups` >= 1 groups of consecutive pairs out of `pairs` (groups <=
/// pairs), each pair num_m_blocks blocks: the first pairs % groups groups hold
/// one pair more than the others.
struct LptShape {
  int64_t big = 0;           // blocks in the larger groups (split excluded)
  int64_t pairs = 0;         // pairs of a larger group | pairs of a smaller group << 32
  int64_t first0 = 0;        // the first pair of the smaller groups
  int64_t div_group1 = 0;    // div_invariant(larger group's pairs * num_m_blocks)
  int64_t div_group0 = 0;    // div_invariant(smaller group's pairs * num_m_blocks)
  int64_t div_pairs1 = 0;    // div_invariant(larger group's pairs)
  int64_t div_pairs0 = 0;    // div_invariant(smaller group's pairs)
};
LptShape lpt_shape(int64_t groups, int64_t pairs, int64_t num_m_blocks);

/// The combine spec of a merge on `arch` (no checks).
KernelSpec merge_spec(const MergeProblem& problem, int arch);

/// Throws InvalidArgument naming the first field where `problem` does not
/// match the combine spec `spec` (family, partial_dtype, out_dtype,
/// head_dim_v, LSE presence). A packed-batch combine (spec.varlen) is refused
/// unless `rows_bounded`: only decode() launches it, with the device bounds of
/// the rows it may write (a packed batch's cu_seqlens_q). Does not run
/// check_merge_problem.
void check_merge_matches_spec(const MergeProblem& problem, const KernelSpec& spec, bool rows_bounded = false);

}  // namespace flashgen::rt
