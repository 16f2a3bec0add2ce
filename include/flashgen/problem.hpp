// libflashgen — AttentionProblem: one forward attention call, described at run time.
//
// Semantics (see docs/design.md, "The operation"): per batch b and query head h,
// with g = heads_q / heads_kv and KV head h / g:
//   Qs  = round_to_dtype(Q * softmax_scale)
//   S   = softcap(Qs K^T (fp32 accumulate)) + bias - alibi + mask
//         softcap(x) = cap * tanh(x / cap) when softcap > 0 (else x)
//         alibi_ij = slope_bh * |i + off - j| when alibi_slopes is set (else 0)
//   P   = softmax(S) row-wise (online, exp2 domain); with sinks, the sink
//         logit sink_h joins the denominator: P_ij = exp(S_ij) / (exp(sink_h) + sum_j exp(S_ij))
//   O   = P V    (P rounded to the input dtype, fp32 accumulate)
//   LSE = log(sum_j exp(S_ij))   (natural log, fp32; + exp(sink_h) inside the sum with sinks)
// A row that sees no key (fully masked, or seqlen_k == 0) gets O = 0 and LSE = -inf
// (with sinks: LSE = sink_h).
//
// Masks (MaskKind, types.hpp): key j is visible to query i iff
//   causal:  j <= i + off
//   window:  i + off - window_left <= j <= i + off + window_right
//            (window_left / window_right -1: unbounded on that side)
// with off = 0 for the top-left forms (causaltl, windowtl) and off = seqlen_k - seqlen_q
// for the bottom-right ones (causalbr, windowbr); causal is the window (-1, 0).
// ALiBi uses the mask's alignment, and the bottom-right one (off = seqlen_k -
// seqlen_q) with mask none, as FlashAttention does.
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
/// The largest page size of a paged KV cache (AttentionProblem::page_size, a power of two).
inline constexpr int64_t kMaxPageSize = 256;

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
  /// Sliding window (mask window_top_left / window_bottom_right only): query i sees keys j
  /// with i + off - window_left <= j <= i + off + window_right (off: 0 top-left,
  /// seqlen_k - seqlen_q bottom-right), in keys; -1 leaves that side unbounded, and a
  /// size beyond the keys is allowed (it acts as unbounded). With a window mask each
  /// must be >= -1, and seqlen_q + seqlen_k at most 2^31 - 257 (the kernels add a query
  /// position to a key offset in 32 bits); with any other mask both must be -1.
  /// The sizes are launch arguments, not part of the kernel. InvalidArgument names
  /// the field otherwise.
  int64_t window_left = -1;
  int64_t window_right = -1;
  /// Learnable attention sinks: device pointer to float32 [heads_q], one logit per
  /// query head in the units of S (S is already scaled by softmax_scale; the sink is
  /// used as given: not scaled, softcapped, biased or masked). Sink h joins row i's softmax
  /// denominator: P_ij = exp(S_ij - m) / (exp(sink_h - m) + sum_j exp(S_ij - m)); LSE
  /// includes it; a row that sees no key gets O = 0 and LSE = sink_h; -inf is a sink
  /// that takes no weight. nullptr: off. A kernel specialization (KernelSpec::sinks).
  /// Must be 4-byte aligned when set and the problem has rows.
  const float* sinks = nullptr;
  /// ALiBi: device pointer to float32 slopes; the slope of (batch b, query head h)
  /// is alibi_slopes[b * alibi_stride_batch + h]. Each logit gets
  /// S_ij -= slope * |i + off - j| after the softcap and the bias (fp32), off being
  /// the mask's alignment: 0 for causaltl / windowtl, seqlen_k - seqlen_q for
  /// causalbr / windowbr and for mask none (the FlashAttention convention).
  /// nullptr: off. A kernel specialization (KernelSpec::alibi). Must be 4-byte
  /// aligned when set and the problem has rows.
  const float* alibi_slopes = nullptr;
  /// Elements between the slopes of consecutive batches: 0 (one slope per query
  /// head for every batch, FlashAttention-2's [heads] slopes) or e.g. heads_q
  /// (its [batch, heads] slopes). Must be >= 0 when alibi_slopes is set.
  int64_t alibi_stride_batch = 0;

  /// Packed (variable-length) batch, when cu_seqlens_q is set: `batch` sequences of
  /// different lengths packed along the seq dimension (FlashAttention's varlen layout).
  /// Device pointers to int32 [batch + 1], 4-byte aligned: sequence b owns query rows
  /// cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of Q and O and keys cu_seqlens_k[b] ..
  /// cu_seqlens_k[b + 1] - 1 of K and V. Then
  ///  - q and o are [total_q, heads_q, d], k and v [total_k, heads_kv, d]: their
  ///    stride_batch must be 0 and stride_seq steps over packed rows;
  ///  - seqlen_q / seqlen_k are host upper bounds of every sequence's query rows /
  ///    keys (max_seqlen_q / max_seqlen_k; the grid is sized by them);
  ///  - masks, windows and ALiBi align per sequence (off = its seqlen_k - seqlen_q);
  ///  - lse is [heads_q, total_q]: element (h, row) at lse.data + h * lse.stride_head + row
  ///    (lse.stride_batch must be 0);
  ///  - bias stays [batch, heads_q, seqlen_q, seqlen_k] in each sequence's own positions
  ///    (a padded tensor; a stride of 0 broadcasts), ALiBi slopes as above.
  /// A zero-length sequence is allowed (no rows; or rows that see no key: O = 0, LSE =
  /// -inf). The offsets are read by the kernels, never by the host: they must be
  /// non-decreasing from a first offset >= 0, with cu_seqlens_q[batch] <= total_q,
  /// cu_seqlens_k[batch] <= total_k,
  /// and no sequence longer than seqlen_q / seqlen_k (a longer one is cut to the bound:
  /// its rows past seqlen_q are not written, its keys past seqlen_k not read).
  /// nullptr: the dense BSHD layout above; cu_seqlens_k, total_q and total_k must then be
  /// unset (null, 0), and seqused_k too unless the KV cache is paged. A kernel
  /// specialization (KernelSpec::varlen).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;  ///< required with cu_seqlens_q unless the KV cache is paged (then null)
  /// Optional int32 [batch] (device, 4-byte aligned; with cu_seqlens_q or page_table):
  /// only the first seqused_k[b] keys of sequence b count (a KV cache allocated longer
  /// than it is filled), at most its allocated keys (cu_seqlens_k[b + 1] - cu_seqlens_k[b];
  /// paged: seqlen_k). nullptr: all of them (paged: seqlen_k keys per sequence).
  const int32_t* seqused_k = nullptr;
  int64_t total_q = 0;  ///< with cu_seqlens_q: rows of Q and O (their extent), in [0, 2^31 - 257]
  int64_t total_k = 0;  ///< with cu_seqlens_k: rows of K and V, in [0, 2^31 - 257] (0 with page_table)

  /// Paged KV cache (vLLM / SGLang layout), when page_table is set: K and V are
  /// [num_pages, page_size, heads_kv, d] through their TensorRef, whose stride_batch
  /// steps from one page to the next and stride_seq from one slot to the next; key j
  /// of sequence b is slot j % page_size of page page_table[b * page_table_stride +
  /// j / page_size]. Pages may be shared between sequences (prefix caching) and come
  /// in any order. Sequence b has seqused_k[b] keys (or seqlen_k when seqused_k is
  /// null); seqlen_k bounds them all (max_seqlen_k). Q and O are dense [batch,
  /// seqlen_q, ...] or a packed batch (cu_seqlens_q; cu_seqlens_k must then be null).
  /// Chunked prefill is a paged problem with seqlen_q < seqlen_k and a bottom-right
  /// causal mask; decode is one with few query rows. The table is int32 on the device,
  /// 4-byte aligned, read by the kernels only for slots below a sequence's key count:
  /// its entries there must be in [0, num_pages); entries past them are never read.
  /// A kernel specialization (KernelSpec::paged); the page size is a launch argument.
  const int32_t* page_table = nullptr;
  int64_t page_table_stride = 0;  ///< elements between two sequences' rows of page_table, >= ceil(seqlen_k / page_size)
  int64_t page_size = 0;          ///< keys per page: a power of two in [1, kMaxPageSize] (0 without page_table)
  int64_t num_pages = 0;          ///< pages of K and V, in [1, 2^31 - 257] when a sequence has keys (0 without page_table)

  bool varlen() const { return cu_seqlens_q != nullptr; }
  bool paged() const { return page_table != nullptr; }
  /// Nothing to compute: batch, seqlen_q or heads_q is 0, or a packed batch has total_q 0.
  /// forward()/launch()/decode() launch nothing for it (the outputs have no elements).
  bool empty() const { return batch == 0 || seqlen_q == 0 || heads_q == 0 || (varlen() && total_q == 0); }
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
/// views that do not overlap themselves, window sizes that fit the mask, 4-byte
/// aligned sinks and ALiBi slopes, ...).
/// Throws InvalidArgument naming the argument, its value and what is allowed.
/// Pointer values are only checked for null/alignment, never dereferenced.
void check_problem(const AttentionProblem& p);

}  // namespace flashgen
