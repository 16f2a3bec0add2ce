// float64 CPU reference of libflashgen's forward attention (DESIGN.md, "The operation").
// Used by the tests and the examples; not part of the installed library.
#pragma once

#include <cstdint>
#include <vector>

#include "flashgen/merge.hpp"
#include "flashgen/problem.hpp"

namespace flashgen::ref {

/// IEEE binary16 / bfloat16 <-> float conversions, round to nearest even.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t to_dtype(DType d, float f);
float from_dtype(DType d, uint16_t h);

/// One (batch, query row, query head) triple.
struct RowId {
  int64_t b, i, h;
};

/// How far a correct kernel's result may be from the reference, beyond the
/// rounding of P and O to the dtype (the tests' fixed tolerances), because its
/// logits are fp32 sums in another order: per row, a bound on |O - O_ref| for
/// each of the head_dim_v elements and on |LSE - LSE_ref|, derived from
/// eps_j = (head_dim/4 + 4) * 2^-23 * sum_d |Qs_d K_jd| + 2 ulp_f32(S_j) (an
/// error bound of the fp32 sum and of the bias add; + cap * 2^-18 with a softcap,
/// + 2 ulp_f32(S_j) + ulp_f32(slope * |i + off - j|) with ALiBi) through the softmax:
/// |dO_d| <= sum_j P_j (exp(eps_j + E) - 1) |V_jd - O_d|, |dLSE| <= E + 2^-21 |max S|,
/// E = max_j eps_j; a sink counts as a key with V = 0 and eps 0. `row_max` is
/// max_j S_j, and the sink if larger (-inf for a row that sees no key and has no sink).
/// A row that reads a NaN or infinite input at a key it sees (or in its Q row, its
/// ALiBi slope, or a NaN or +inf sink) is `affected`: its result may be NaN and is
/// not bounded (bounds +inf).
struct RowBounds {
  std::vector<double> o_err;     // rows * head_dim_v
  std::vector<double> lse_err;   // rows
  std::vector<double> row_max;   // rows
  std::vector<char> affected;    // rows
};

/// Reference for the rows in `rows` of a problem whose data pointers (q, k, v,
/// bias, sinks, alibi_slopes; packed batches also cu_seqlens_q, cu_seqlens_k,
/// seqused_k, see sequence_problem below) point to HOST memory in the problem's
/// dtypes and strides.
/// Writes o_out[r * head_dim_v + d] and lse_out[r] for each r-th row id
/// (o = 0 and lse = -inf, or the row's sink with sinks, for rows that see no key).
/// Uses `threads` host threads (0 = hardware concurrency). Qs = round_to_dtype(Q * scale)
/// with the product in float32 (as the kernel does); the logits are rounded to float32
/// as the kernel forms them, S = f32(f32(f32(Qs.K) + bias) - f32(slope * |i + off - j|))
/// (+ mask; Qs.K summed in float64 before its rounding; with a softcap, f32(Qs.K) is
/// first replaced by f32(cap * tanh(f32(Qs.K) / cap)), the tanh in float64; the ALiBi
/// term only with alibi_slopes, slope = alibi_slopes[b * alibi_stride_batch + h], the
/// product in float64 rounded once, off the mask's alignment: 0 for causaltl / windowtl,
/// seqlen_k - seqlen_q otherwise, mask none included); the mask: causal j <= i + off,
/// window i + off - window_left <= j <= i + off + window_right (-1: unbounded).
/// Everything after that in float64: P = softmax(S), O = P V, LSE = log(sum exp S),
/// at any finite magnitude of S; with sinks, sink = sinks[h] joins the sum
/// (P_j = exp(S_j) / (exp(sink) + sum exp S), LSE = log(exp(sink) + sum exp S)).
/// (The kernel also rounds P to the dtype before P V; that is inside the tests' tolerance.)
/// `bounds` (optional) receives the error bounds described at RowBounds.
void forward_rows(const AttentionProblem& host_problem, const std::vector<RowId>& rows,
                  double* o_out, double* lse_out, int threads = 0, RowBounds* bounds = nullptr);

/// All rows in (b, i, h) order: o_out has batch*seqlen_q*heads_q*head_dim_v
/// entries ([b, i, h, d] contiguous), lse_out batch*heads_q*seqlen_q ([b, h, i]).
/// A packed batch (host_problem.varlen()): o_out has total_q*heads_q*head_dim_v
/// entries ([row, h, d] contiguous, row the packed query row) and lse_out
/// heads_q*total_q ([h, row]), the layouts of the kernels' O and LSE; the entries
/// of packed rows that no sequence owns (before cu_seqlens_q[0], after
/// cu_seqlens_q[batch], or a sequence's rows past the bound seqlen_q) are NaN:
/// the kernels must not write them, there is no reference value.
void forward_all(const AttentionProblem& host_problem, std::vector<double>& o_out,
                 std::vector<double>& lse_out, int threads = 0);

/// Packed (variable-length) batches, problem.hpp's varlen layout: when
/// host_problem.cu_seqlens_q is set, cu_seqlens_q, cu_seqlens_k and seqused_k
/// (optional) point to HOST int32 arrays too, q/k/v are [total, heads, d] through
/// stride_seq and stride_head (stride_batch is ignored), the bias [batch, heads_q,
/// seqlen_q, seqlen_k] in each sequence's own positions. forward_rows then takes
/// RowId{b, i, h} as (sequence b, query row i of that sequence, 0 <= i <
/// sequence(p, b).seqlen_q, query head h), and computes each row as the dense
/// problem sequence_problem(p, b) (batch 1) computes its row (0, i, h): the
/// masks', windows' and ALiBi's alignment per sequence (off = its seqlen_k -
/// seqlen_q), only its first seqlen_k keys read. The offsets are checked
/// (InvalidArgument): cu_seqlens non-negative and non-decreasing,
/// cu_seqlens_q[batch] <= total_q, cu_seqlens_k[batch] <= total_k, 0 <= seqused_k[b]
/// <= cu_seqlens_k[b + 1] - cu_seqlens_k[b].
///
/// Paged KV caches, problem.hpp's paged layout: when host_problem.page_table is set,
/// page_table (and seqused_k, optional) point to HOST int32 arrays, K/V are [num_pages,
/// page_size, heads_kv, d] (stride_batch steps between pages, stride_seq between slots),
/// and Q/O are dense [batch, seqlen_q, ...] or packed (cu_seqlens_q, cu_seqlens_k null).
/// Sequence b has min(seqused_k[b] (else seqlen_k), seqlen_k) keys, key j at slot
/// j % page_size of page page_table[b * page_table_stride + j / page_size]. Each
/// sequence is computed as a dense problem over its keys gathered from the pages
/// (only the table entries and slots of its used keys are read; unused slots and
/// entries may hold anything), its masks', windows' and ALiBi's alignment per sequence
/// (off = its keys - its query rows), as for packed batches; RowId{b, i, h} is row i of
/// sequence b (dense Q: 0 <= i < seqlen_q, batch b of Q; packed Q: as above). Checked
/// (InvalidArgument): page_size >= 1, cu_seqlens_k null, total_k 0, 0 <= seqused_k[b] <=
/// seqlen_k, and the entries of every used page in [0, num_pages). forward_all's layouts
/// are those of Q's layout (dense or packed).
struct Sequence {
  int64_t q_begin = 0;   ///< packed row of its first query (cu_seqlens_q[b]; 0 with a dense Q)
  int64_t seqlen_q = 0;  ///< its query rows, cut to the bound host_problem.seqlen_q
  int64_t k_begin = 0;   ///< packed row of its first key (cu_seqlens_k[b]; 0 when paged)
  int64_t seqlen_k = 0;  ///< its keys (seqused_k[b] when set), cut to the bound host_problem.seqlen_k
};
/// Sequence b (0 <= b < batch) of a packed or paged host problem (offsets checked as above).
Sequence sequence(const AttentionProblem& host_problem, int64_t b);
/// The dense problem (batch 1, not packed) of sequence b of a packed host problem:
/// its seqlen_q / seqlen_k, Q/O/K/V views from its first packed row (stride_batch 0),
/// its bias slice (batch b), its ALiBi slopes (batch b; alibi_stride_batch 0), the
/// same sinks, mask, window, softcap and scale. A paged problem needs the overload below.
AttentionProblem sequence_problem(const AttentionProblem& host_problem, int64_t b);
/// Owns the keys of a paged sequence gathered from its pages (contiguous K [keys,
/// heads_kv, head_dim] and V [keys, heads_kv, head_dim_v]).
struct SequenceStorage {
  std::vector<uint16_t> k, v;
};
/// As above, also for a paged problem: its K/V views point into `storage`, which must
/// outlive the result (Q/O: its packed rows, or batch b of a dense Q).
AttentionProblem sequence_problem(const AttentionProblem& host_problem, int64_t b, SequenceStorage& storage);

/// float64 reference of a merge of attention states (merge.hpp) whose o_partial
/// and lse_partial point to HOST memory in the problem's dtypes and strides
/// (o and lse are not used). o_out gets batch*seqlen_q*heads*head_dim_v entries
/// ([b, i, h, d] contiguous), lse_out batch*heads*seqlen_q ([b, h, i]). Per row:
/// partials with LSE_s = -inf are skipped (their O_s never read); none left:
/// O = 0, LSE = -inf; a NaN or +inf LSE_s: O and LSE NaN; otherwise, with
/// m = max LSE_s, w_s = exp(LSE_s - m) / sum_t exp(LSE_t - m), O = sum_s w_s O_s
/// and LSE = m + log(sum_t exp(LSE_t - m)), all in float64 from the stored values.
void merge_states(const MergeProblem& host_problem, std::vector<double>& o_out, std::vector<double>& lse_out);

}  // namespace flashgen::ref
