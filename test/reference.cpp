// float64 CPU reference of libflashgen's forward attention (see reference.hpp
// and DESIGN.md, "The operation").
#include "test/reference.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

namespace flashgen::ref {

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;

  if (ax > 0x7F800000u) {  // NaN: keep it quiet and keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x03FFu));
  }
  if (ax >= 0x477FF000u) {  // >= 65520 (incl. inf): rounds to inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (ax >= 0x38800000u) {  // >= 2^-14: normal half
    // Re-bias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
    const uint32_t r = ax - 0x38000000u;
    uint32_t h = r >> 13;
    const uint32_t rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (ax < 0x33000000u) {  // < 2^-25: below half of the smallest subnormal -> 0
    return sign;
  }
  // Subnormal half: value = m * 2^-24. The float is mant * 2^(e - 150) with the
  // implicit bit set, so m = mant * 2^(e - 126) = mant >> (126 - e).
  const uint32_t e = ax >> 23;                      // 102 .. 112
  const uint32_t mant = (ax & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - e;                  // 14 .. 24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // 0x3FF + 1 = 0x400, the smallest normal: correct
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x03FFu;
  uint32_t bits;
  if (exp == 0x1Fu) {  // inf / NaN
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // +-0
    bits = sign;
  } else {  // subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(v);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: truncate and force quiet
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; overflow carries into inf,
  // subnormals round within the same encoding (bf16 has float's exponent range).
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7FFFu + lsb) >> 16);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t to_dtype(DType d, float f) { return d == DType::bf16 ? float_to_bf16(f) : float_to_half(f); }

float from_dtype(DType d, uint16_t h) { return d == DType::bf16 ? bf16_to_float(h) : half_to_float(h); }

// ---------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------

namespace {

/// float value of every 16-bit pattern of one dtype (built once).
struct DecodeTable {
  float f16[65536];
  float bf16[65536];
  DecodeTable() {
    for (uint32_t i = 0; i < 65536u; ++i) {
      f16[i] = half_to_float(static_cast<uint16_t>(i));
      bf16[i] = bf16_to_float(static_cast<uint16_t>(i));
    }
  }
};

const DecodeTable& decode_table() {
  static const DecodeTable table;
  return table;
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// Number of keys row i may see under the mask (before bias): keys j < limit.
int64_t visible_keys(const AttentionProblem& p, int64_t i) {
  int64_t limit = p.seqlen_k;
  switch (p.mask) {
    case MaskKind::none:
      break;
    case MaskKind::causal_top_left:
      limit = std::min(limit, i + 1);  // j <= i
      break;
    case MaskKind::causal_bottom_right:
      limit = std::min(limit, i + p.seqlen_k - p.seqlen_q + 1);  // j <= i + sk - sq
      break;
  }
  return std::max<int64_t>(limit, 0);
}

void check_shape(const AttentionProblem& p) {
  auto fail = [](const std::string& what) {
    throw InvalidArgument("reference: " + what);
  };
  if (p.batch < 0 || p.seqlen_q < 0 || p.seqlen_k < 0 || p.heads_q < 0 || p.heads_kv < 0 ||
      p.head_dim < 0 || p.head_dim_v < 0) {
    fail("sizes must be non-negative");
  }
  if (p.heads_q > 0 && (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)) {
    fail("heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_kv (" +
         std::to_string(p.heads_kv) + ")");
  }
}

/// Computes one row into o (head_dim_v doubles) and *lse. `qs`, `s` are scratch.
class RowKernel {
 public:
  explicit RowKernel(const AttentionProblem& p)
      : p_(p),
        table_(p.dtype == DType::bf16 ? decode_table().bf16 : decode_table().f16),
        scale_(p.scale()),
        group_(p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1),
        qs_(static_cast<size_t>(p.head_dim)),
        s_(static_cast<size_t>(std::max<int64_t>(p.seqlen_k, 0))) {}

  void run(const RowId& r, double* o, double* lse) {
    const int64_t D = p_.head_dim, Dv = p_.head_dim_v;
    std::fill(o, o + Dv, 0.0);
    *lse = kNegInf;

    const int64_t limit = visible_keys(p_, r.i);
    if (limit == 0) return;
    const int64_t hk = r.h / group_;

    // Qs = round_to_dtype(float(q) * float(scale)), the product in float32.
    const uint16_t* q = static_cast<const uint16_t*>(p_.q.data) + r.b * p_.q.stride_batch +
                        r.i * p_.q.stride_seq + r.h * p_.q.stride_head;
    for (int64_t d = 0; d < D; ++d) {
      const float prod = table_[q[d]] * scale_;  // float32 product, as in the kernel
      qs_[static_cast<size_t>(d)] = static_cast<double>(table_[to_dtype(p_.dtype, prod)]);
    }

    const uint16_t* kbase = static_cast<const uint16_t*>(p_.k.data) + r.b * p_.k.stride_batch +
                            hk * p_.k.stride_head;
    const bool has_bias = p_.bias.kind != BiasKind::none;
    const int64_t bias_row = r.b * p_.bias.stride_batch + r.h * p_.bias.stride_head + r.i * p_.bias.stride_q;

    // S = Qs . K + bias; -inf (from the bias) masks.
    double m = kNegInf;
    for (int64_t j = 0; j < limit; ++j) {
      const uint16_t* k = kbase + j * p_.k.stride_seq;
      double acc = 0.0;
      for (int64_t d = 0; d < D; ++d) acc += qs_[static_cast<size_t>(d)] * static_cast<double>(table_[k[d]]);
      if (has_bias) {
        const int64_t off = bias_row + j * p_.bias.stride_k;
        if (p_.bias.kind == BiasKind::f32) {
          acc += static_cast<double>(static_cast<const float*>(p_.bias.data)[off]);
        } else {
          acc += static_cast<double>(table_[static_cast<const uint16_t*>(p_.bias.data)[off]]);
        }
      }
      s_[static_cast<size_t>(j)] = acc;
      if (acc > m) m = acc;
    }
    if (m == kNegInf) return;  // every visible key masked by the bias: the row sees no key

    // P = exp(S - max), O = P V / sum P, LSE = max + log(sum P).
    const uint16_t* vbase = static_cast<const uint16_t*>(p_.v.data) + r.b * p_.v.stride_batch +
                            hk * p_.v.stride_head;
    double sum = 0.0;
    for (int64_t j = 0; j < limit; ++j) {
      const double sj = s_[static_cast<size_t>(j)];
      if (sj == kNegInf) continue;
      const double pj = std::exp(sj - m);
      sum += pj;
      const uint16_t* v = vbase + j * p_.v.stride_seq;
      for (int64_t d = 0; d < Dv; ++d) o[d] += pj * static_cast<double>(table_[v[d]]);
    }
    const double inv = 1.0 / sum;
    for (int64_t d = 0; d < Dv; ++d) o[d] *= inv;
    *lse = m + std::log(sum);
  }

 private:
  const AttentionProblem& p_;
  const float* table_;
  float scale_;
  int64_t group_;
  std::vector<double> qs_;
  std::vector<double> s_;
};

}  // namespace

void forward_rows(const AttentionProblem& host_problem, const std::vector<RowId>& rows, double* o_out,
                  double* lse_out, int threads) {
  check_shape(host_problem);
  const AttentionProblem& p = host_problem;
  if (rows.empty()) return;
  for (const RowId& r : rows) {
    if (r.b < 0 || r.b >= p.batch || r.i < 0 || r.i >= p.seqlen_q || r.h < 0 || r.h >= p.heads_q) {
      throw InvalidArgument("reference: row (b " + std::to_string(r.b) + ", i " + std::to_string(r.i) +
                            ", h " + std::to_string(r.h) + ") is outside the problem");
    }
  }
  (void)decode_table();  // build the table before the threads start

  const int64_t n = static_cast<int64_t>(rows.size());
  int64_t nthreads = threads > 0 ? threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  nthreads = std::clamp<int64_t>(nthreads, 1, n);

  // Rows are handed out in small chunks (causal rows differ in cost).
  const int64_t chunk = std::clamp<int64_t>(n / (nthreads * 16), 1, 64);
  std::atomic<int64_t> next{0};
  auto worker = [&]() {
    RowKernel kernel(p);
    for (;;) {
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= n) break;
      const int64_t end = std::min(n, begin + chunk);
      for (int64_t r = begin; r < end; ++r) {
        kernel.run(rows[static_cast<size_t>(r)], o_out + r * p.head_dim_v, lse_out + r);
      }
    }
  };
  if (nthreads == 1) {
    worker();
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(nthreads - 1));
  for (int64_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

void forward_all(const AttentionProblem& host_problem, std::vector<double>& o_out,
                 std::vector<double>& lse_out, int threads) {
  check_shape(host_problem);
  const AttentionProblem& p = host_problem;
  const int64_t nrows = p.batch * p.seqlen_q * p.heads_q;
  std::vector<RowId> rows;
  rows.reserve(static_cast<size_t>(nrows));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h) rows.push_back({b, i, h});

  o_out.assign(static_cast<size_t>(nrows * p.head_dim_v), 0.0);
  std::vector<double> lse_rows(static_cast<size_t>(nrows), kNegInf);
  forward_rows(p, rows, o_out.data(), lse_rows.data(), threads);

  // LSE is [b, h, i]; rows are in (b, i, h) order.
  lse_out.assign(static_cast<size_t>(nrows), kNegInf);
  for (int64_t r = 0; r < nrows; ++r) {
    const RowId& id = rows[static_cast<size_t>(r)];
    lse_out[static_cast<size_t>((id.b * p.heads_q + id.h) * p.seqlen_q + id.i)] = lse_rows[static_cast<size_t>(r)];
  }
}

}  // namespace flashgen::ref
