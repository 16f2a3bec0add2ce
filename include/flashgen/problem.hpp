// libflashgen — AttentionProblem: one forward attention call, described at run time.
//
// Semantics (see docs/design.md, "The operation"): per batch b and query head h,
// with g = heads_q / heads_kv and KV head h / g:
//   Qs  = round_to_dtype(Q * softmax_scale)
//   S   = softcap(Qs K^T (fp32 accumulate)) + bias + mask
//         softcap(x) = cap * tanh(x / cap) when softcap > 0 (else x)
//   P   = softmax(S) row-wise (online, exp2 domain)
//   O   = P V    (P rounded to the input dtype, fp32 accumulate)
//   LSE = log(sum_j exp(S_ij))   (natural log, fp32)
// A row that sees no key (fully masked, or seqlen_k == 0) gets O = 0 and LSE = -inf.
#pragma once

#include <cstdint>
#include <optional>

#include "flashgen/types.hpp"

namespace flashgen {

/// A BSHD tensor view: element [b, s, h, d] is at
/// data + b*stride_batch + s*stride_seq + h*stride_head + d (strides in
/// ELEMENTS, not bytes; the last dim is contiguous; a stride of 0 broadcasts).
struct TensorRef {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
};

/// Additive bias [batch, heads_q, seqlen_q, seqlen_k] through four element
/// strides (0 broadcasts). Its dtype is Q's (BiasKind::input) or float32.
/// -inf entries mask.
struct BiasRef {
  BiasKind kind = BiasKind::none;
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
  int64_t stride_q = 0;
  int64_t stride_k = 0;
};

/// Optional LSE output [batch, heads_q, seqlen_q], float32, natural log.
/// Element [b, h, i] is at data + b*stride_batch + h*stride_head + i. Like O it must not
/// overlap itself: stride_head >= seqlen_q when heads_q > 1, stride_batch covers the heads
/// nested inside it (or the other way round when stride_batch < stride_head).
struct LseRef {
  float* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
};

/// The largest softcap a problem may ask for (AttentionProblem::softcap).
inline constexpr float kMaxSoftcap = 1024.0f;

struct AttentionProblem {
  DType dtype = DType::f16;
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;        ///< heads_q % heads_kv == 0 (GQA / MQA)
  int64_t head_dim = 64;       ///< Q and K last dim
  int64_t head_dim_v = 64;     ///< V and O last dim
  MaskKind mask = MaskKind::none;
  /// Multiplies Q before the first product; default 1/sqrt(head_dim). Must be finite.
  std::optional<float> softmax_scale;

  TensorRef q;  ///< [batch, seqlen_q, heads_q, head_dim]
  TensorRef k;  ///< [batch, seqlen_k, heads_kv, head_dim]
  TensorRef v;  ///< [batch, seqlen_k, heads_kv, head_dim_v]
  /// [batch, seqlen_q, heads_q, head_dim_v], written (data is cast to non-const). Outputs
  /// never overlap themselves: no stride 0 over an extent > 1, and with the dimensions of
  /// extent > 1 in order of increasing stride, each stride covers everything nested inside
  /// it (e.g. stride_head >= head_dim_v). Inputs (q, k, v, bias) may overlap and broadcast.
  TensorRef o;
  BiasRef bias;
  LseRef lse;   ///< data == nullptr: no LSE output
  /// Logit softcapping (Gemma 2, Grok): cap > 0 replaces each logit x = Qs.K by
  /// cap * tanh(x / cap) before the bias and the mask; 0 turns it off. A cap is a
  /// kernel specialization (KernelSpec::softcap) with the value passed at launch.
  /// Must be 0 or in [FLT_MIN, kMaxSoftcap] (InvalidArgument names it otherwise): the
  /// kernels' tanh is accurate to about cap * 2^-21 in absolute terms, which a larger cap
  /// (beyond the logits' range anyway) would make a visible error.
  float softcap = 0.f;

  float scale() const;  ///< softmax_scale or 1/sqrt(head_dim)
};

/// A problem over contiguous BSHD tensors (strides filled in), no bias, no LSE.
AttentionProblem make_bshd_problem(DType dtype, int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                   int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                                   int64_t head_dim_v, MaskKind mask, const void* q, const void* k,
                                   const void* v, void* o);

/// Check every argument of `p` against the rules of the operation and the
/// kernel's requirements (16-byte aligned Q/K/V/O pointers and strides that are
/// multiples of 8 elements or 0, heads_q % heads_kv == 0, non-negative sizes,
/// finite softmax_scale, bias/LSE pointers consistent with their flags, O and LSE
/// views that do not overlap themselves, ...).
/// Throws InvalidArgument naming the argument, its value and what is allowed.
/// Pointer values are only checked for null/alignment, never dereferenced.
void check_problem(const AttentionProblem& p);

}  // namespace flashgen
