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
