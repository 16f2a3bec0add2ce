// float64 CPU reference of libflashgen's forward attention (DESIGN.md, "The operation").
// Used by the tests and the examples; not part of the installed library.
#pragma once

#include <cstdint>
#include <vector>

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

/// Reference for the rows in `rows` of a problem whose data pointers (q, k, v,
/// bias) point to HOST memory in the problem's dtypes and strides.
/// Writes o_out[r * head_dim_v + d] and lse_out[r] for each r-th row id
/// (lse = -inf and o = 0 for rows that see no key). Uses `threads` host
/// threads (0 = hardware concurrency). Qs = round_to_dtype(Q * scale) with the
/// product in float32 (as the kernel does); everything after that in float64:
/// S = Qs.K + bias (+ mask), P = softmax(S), O = P V, LSE = log(sum exp S).
/// (The kernel also rounds P to the dtype before P V; that is inside the tests' tolerance.)
void forward_rows(const AttentionProblem& host_problem, const std::vector<RowId>& rows,
                  double* o_out, double* lse_out, int threads = 0);

/// All rows in (b, i, h) order: o_out has batch*seqlen_q*heads_q*head_dim_v
/// entries ([b, i, h, d] contiguous), lse_out batch*heads_q*seqlen_q ([b, h, i]).
void forward_all(const AttentionProblem& host_problem, std::vector<double>& o_out,
                 std::vector<double>& lse_out, int threads = 0);

}  // namespace flashgen::ref
