// libflashgen — MergeProblem: a merge of attention states, described at run time.
//
// Given S partial attention states of the same queries over disjoint key sets
// (the splits of a split-KV forward, or chunks of the key range computed on
// other GPUs for context / ring parallelism), per batch b, query row i and
// head h:
//   LSE = log(sum_s exp(LSE_s))                      natural log, float32
//   O   = sum_s exp(LSE_s - LSE) * O_s
// which is the attention over the union of the key sets (docs/design.md,
// "Merging attention states"). Exactness rules:
//  - a partial with LSE_s = -inf (it saw no key: an empty split) contributes
//    nothing; its O_s is never used, whatever it holds (NaN, garbage);
//  - a row whose partials are all -inf gets O = 0 and LSE = -inf;
//  - any finite LSE magnitude works (the weights are exp(LSE_s - max_s LSE_s)
//    normalized by their sum, so nothing overflows);
//  - a NaN or +inf LSE_s makes that row's O and LSE NaN; a NaN in O_s (of a
//    partial that counts) makes those elements of the row's O NaN; neither
//    changes another row.
#pragma once

#include <cstdint>

#include "flashgen/problem.hpp"
#include "flashgen/types.hpp"

namespace flashgen {

/// The most partial states one merge takes (num_states).
inline constexpr int64_t kMaxMergeStates = 1024;
/// head_dim_v of a merge: a multiple of kMergeHeadDimMultiple in
/// [kMergeHeadDimMultiple, kMaxMergeHeadDim].
inline constexpr int64_t kMergeHeadDimMultiple = 8;
inline constexpr int64_t kMaxMergeHeadDim = 512;

/// The S partial O tensors [num_states, batch, seqlen_q, heads, head_dim_v]:
/// element [s, b, i, h, d] is at data + s*stride_state + b*stride_batch +
/// i*stride_seq + h*stride_head + d (strides in ELEMENTS of the partial dtype;
/// the last dim is contiguous; a stride of 0 broadcasts).
struct StatesRef {
  const void* data = nullptr;
  int64_t stride_state = 0;
  int64_t stride_batch = 0;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
};

/// The S partial LSEs [num_states, batch, heads, seqlen_q], float32, natural
/// log (as the forward's LSE output writes them): element [s, b, h, i] is at
/// data + s*stride_state + b*stride_batch + h*stride_head + i*stride_seq
/// (ELEMENT strides; 0 broadcasts). stride_seq is 1 for the forward's layout.
struct StatesLseRef {
  const float* data = nullptr;
  int64_t stride_state = 0;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
  int64_t stride_seq = 1;
};

/// One merge of attention states (merge_states, flashgen.hpp).
struct MergeProblem {
  StateDType partial_dtype = StateDType::f32;  ///< element type of the O_s
  StateDType out_dtype = StateDType::f16;      ///< element type of the merged O
  int64_t num_states = 1;   ///< S, in [1, kMaxMergeStates]
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t heads = 1;
  int64_t head_dim_v = 64;  ///< a multiple of 8 in [8, 512]

  StatesRef o_partial;      ///< [num_states, batch, seqlen_q, heads, head_dim_v], read
  StatesLseRef lse_partial; ///< [num_states, batch, heads, seqlen_q] float32, read
  /// Merged O [batch, seqlen_q, heads, head_dim_v] of out_dtype, written (data is
  /// cast to non-const; stride_head steps over heads). Like the forward's O it
  /// never overlaps itself (each stride covers what is nested inside it).
  TensorRef o;
  /// Optional merged LSE [batch, heads, seqlen_q] float32 (LseRef: element
  /// [b, h, i] at data + b*stride_batch + h*stride_head + i); data == nullptr:
  /// none. stride_head steps over heads.
  LseRef lse;
};

/// A merge over contiguous tensors (strides filled in): o_partial
/// [num_states, batch, seqlen_q, heads, head_dim_v], lse_partial
/// [num_states, batch, heads, seqlen_q], o [batch, seqlen_q, heads,
/// head_dim_v], lse [batch, heads, seqlen_q] (nullptr: no LSE output).
/// Strides that overflow saturate, so check_merge_problem refuses them.
MergeProblem make_merge_problem(StateDType partial_dtype, StateDType out_dtype, int64_t num_states,
                                int64_t batch, int64_t seqlen_q, int64_t heads, int64_t head_dim_v,
                                const void* o_partial, const float* lse_partial, void* o, float* lse);

/// Check every argument of `p`: enums in range; num_states in [1,
/// kMaxMergeStates]; batch, seqlen_q, heads >= 0; head_dim_v a multiple of 8
/// in [8, 512]; strides >= 0 and (O tensors) multiples of 16 bytes (4 float32
/// or 8 f16/bf16 elements) or 0; O pointers 16-byte aligned, LSE pointers
/// 4-byte aligned and non-null where something is read or written; no byte
/// offset overflows; outputs (o, lse) do not broadcast nor overlap themselves,
/// each other or any input (o_partial, lse_partial; the test is on the byte
/// ranges the views span). An empty merge (batch, seqlen_q or heads zero)
/// needs no pointers. Throws InvalidArgument naming the argument, its value
/// and what is allowed. Pointers are never dereferenced.
void check_merge_problem(const MergeProblem& p);

}  // namespace flashgen
