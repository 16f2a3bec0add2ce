// Emitters: KernelSpec -> CUDA source text. Pure C++ (no CUDA headers).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "flashgen/problem.hpp"
#include "flashgen/spec.hpp"

namespace flashgen::gen {

/// Generate the self-contained CUDA source for `spec` (no #include; begins
/// with a comment listing the spec; extern "C" __global__ symbol is
/// spec.kernel_name(); block (spec.threads(), 1, 1) and spec.smem_bytes() of
/// dynamic shared memory). The mma.sync kernels take one `FwdParams` by value
/// and are launched with grid (num_m_blocks * heads_q * batch, 1, 1); the
/// wgmma kernel takes `FwdParams` and `FwdTmaMaps` (gen/params.hpp; named
/// FgTmaMaps in the generated source) and is
/// persistent: any grid size from 1 up to that many blocks covers every work
/// item. Dispatches on spec.unit. Does not validate; callers validate first.
/// Throws Unsupported for a family other than fwd (not generated yet).
std::string emit_forward(const KernelSpec& spec);

/// The generated CUDA source of `spec`, by its family: emit_forward (fwd) or
/// emit_combine (combine). Does not validate. Throws Unsupported for a family
/// that is not generated yet (fwd_split).
std::string emit(const KernelSpec& spec);

/// How a combine kernel splits its work (templates/combine.cu, which
/// static_asserts the values the generator writes): row_lanes lanes of a warp
/// form a lane group (the power of two at least head_dim_v / 8, at most 32),
/// each lane holding chunks_per_lane 8-element chunks of a row; rows_per_block
/// = threads / row_lanes lane groups per block, which are the block's rows per
/// grid step when each row has one group (state_groups 1).
struct CombineShape {
  int row_lanes = 0;
  int chunks_per_lane = 0;
  int rows_per_block = 0;
};
CombineShape combine_shape(const KernelSpec& spec);
/// Lane groups that share one row of a merge of `rows` rows of `num_states`
/// states (CombineParams::state_groups): a power of two, at most
/// shape.rows_per_block and at most num_states, doubled while the rows' lanes
/// (rows * row_lanes * groups) number fewer than 65536, so that a merge of few
/// rows still has enough loads in flight (each group takes every groups-th
/// state; the row's groups add their sums in shared memory).
int combine_state_groups(const CombineShape& shape, int64_t rows, int64_t num_states);

/// The combine kernel (a merge of attention states) for a combine `spec`:
/// self-contained source, extern "C" symbol spec.kernel_name(), block
/// (spec.threads(), 1, 1), no dynamic shared memory, one `CombineParams`
/// (gen/params.hpp) by value; any grid size from 1 covers every row (the
/// block strides over the rows). Does not validate. Throws Error(internal)
/// for a spec of another family.
std::string emit_combine(const KernelSpec& spec);

/// Which of the three tensor maps of a tensor (FwdTmaMaps, gen/params.hpp) the
/// wgmma kernel reads a chunk of this width through: 64 -> 0, 32 -> 1, 16 -> 2.
int tma_map_index(int chunk_width);

/// Why the wgmma kernel cannot read this problem's K or V through its TMA
/// tensor maps, as a sentence naming the field and its value; empty when it
/// can. Refused: stride_seq 0 with seqlen_k > 1 (a map cannot repeat a row)
/// and byte strides of 2^40 or more on a dimension of extent > 1 (the limit of
/// cuTensorMapEncodeTiled, CUDA driver API "Tensor Map Object Management").
/// plan() then picks the mma.sync unit; launch() of a wgmma kernel refuses.
std::string wgmma_kv_refusal(const AttentionProblem& p);


/// A matrix-unit throughput probe kernel (templates/mma_probe.cu) for `unit`
/// with `dtype` operands, f32 accumulate. extern "C" symbol: probe_kernel_name().
/// Signature: (float* out /*one per thread*/, unsigned long long* clocks /*2: SM
/// clocks and global-timer ns of block 0's loop*/, int iters); launch with 256
/// threads per block. Each warp issues probe_chains() instructions per iteration.
std::string emit_probe(MatrixUnit unit, DType dtype, int arch);
std::string probe_kernel_name(MatrixUnit unit, DType dtype);
int probe_chains();
/// Dense FLOPs one warp-wide instruction of `unit` performs (2*M*N*K; m8n8k4:
/// four quadpairs of 8x8x4 each, 2048).
int64_t unit_flops_per_instruction(MatrixUnit unit);

/// Replace every "@@NAME@@" in `text` (the template `template_name`) by
/// slots[NAME]. Every slot in the text must be provided and every provided
/// slot used; otherwise Error(internal) naming the slot.
std::string fill_slots(const std::string& text, const std::map<std::string, std::string>& slots,
                       const std::string& template_name);

/// The text of an embedded template file (templates/<name>), e.g. "common.cuh".
const std::string& template_text(const std::string& name);

}  // namespace flashgen::gen
