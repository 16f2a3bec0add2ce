// float64 CPU reference of libflashgen's forward attention (see reference.hpp
// and DESIGN.md, "The operation").
#include "test/reference.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
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

/// The mask's alignment: 0 for the top-left masks, seqlen_k - seqlen_q for the
/// bottom-right ones and for mask none (ALiBi's distance |i + off - j| uses it).
int64_t mask_offset(const AttentionProblem& p) {
  const bool top_left = p.mask == MaskKind::causal_top_left || p.mask == MaskKind::window_top_left;
  return top_left ? 0 : p.seqlen_k - p.seqlen_q;
}

/// The keys row i may see under the mask (before bias): first <= j < end (first == end: none).
struct KeyRange {
  int64_t first = 0;
  int64_t end = 0;
};
KeyRange visible_keys(const AttentionProblem& p, int64_t i) {
  const int64_t off = mask_offset(p);
  int64_t first = 0, end = p.seqlen_k;
  // Window sizes beyond the keys act as unbounded (clamped so that nothing overflows).
  const int64_t most = p.seqlen_q + p.seqlen_k;
  switch (p.mask) {
    case MaskKind::none:
      break;
    case MaskKind::causal_top_left:
    case MaskKind::causal_bottom_right:
      end = std::min(end, i + off + 1);  // j <= i + off
      break;
    case MaskKind::window_top_left:
    case MaskKind::window_bottom_right:
      // i + off - window_left <= j <= i + off + window_right; -1: unbounded.
      if (p.window_right >= 0) end = std::min(end, i + off + std::min(p.window_right, most) + 1);
      if (p.window_left >= 0) first = std::max(first, i + off - std::min(p.window_left, most));
      break;
  }
  end = std::max<int64_t>(end, 0);
  return {std::min(first, end), end};
}

/// The keys of sequence b of a paged problem: seqused_k[b] (else seqlen_k).
int64_t paged_keys(const AttentionProblem& p, int64_t b) {
  return p.seqused_k != nullptr ? static_cast<int64_t>(p.seqused_k[b]) : p.seqlen_k;
}

/// A paged KV cache (problem.hpp): page_size >= 1, cu_seqlens_k null, total_k 0,
/// 0 <= seqused_k[b] <= seqlen_k, and the table entries of every used key in [0, num_pages).
template <class Fail>
void check_paged(const AttentionProblem& p, const Fail& fail) {
  if (p.cu_seqlens_k != nullptr) fail("cu_seqlens_k must be null with a page_table");
  if (p.total_k != 0) fail("total_k must be 0 with a page_table");
  if (p.page_size < 1) fail("page_size (" + std::to_string(p.page_size) + ") must be >= 1 with a page_table");
  if (p.num_pages < 0 || p.page_table_stride < 0) fail("num_pages and page_table_stride must be non-negative");
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t keys = paged_keys(p, b);
    if (keys < 0 || keys > p.seqlen_k) {
      fail("seqused_k[" + std::to_string(b) + "] (" + std::to_string(keys) + ") must be in [0, seqlen_k = " +
           std::to_string(p.seqlen_k) + "] (paged)");
    }
    for (int64_t n = 0; n * p.page_size < keys; ++n) {
      const int64_t e = b * p.page_table_stride + n;
      const int64_t page = p.page_table[e];
      if (page < 0 || page >= p.num_pages) {
        fail("page_table[" + std::to_string(e) + "] (" + std::to_string(page) + ", page " + std::to_string(n) +
             " of sequence " + std::to_string(b) + ", which uses " + std::to_string(keys) +
             " keys) must be in [0, num_pages = " + std::to_string(p.num_pages) + ")");
      }
    }
  }
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
  if (p.paged()) check_paged(p, fail);
  if (!p.varlen()) return;
  // A packed batch: the host offsets (problem.hpp's contract).
  if (p.cu_seqlens_k == nullptr && !p.paged()) fail("cu_seqlens_k is null but cu_seqlens_q is set");
  if (p.total_q < 0 || p.total_k < 0) fail("total_q and total_k must be non-negative");
  auto check_offsets = [&](const char* name, const int32_t* cu, int64_t total, const char* total_name) {
    for (int64_t b = 0; b <= p.batch; ++b) {
      const int64_t x = cu[b];
      if (x < 0 || (b > 0 && x < cu[b - 1])) {
        fail(std::string(name) + "[" + std::to_string(b) + "] (" + std::to_string(x) +
             ") must be non-negative and non-decreasing");
      }
    }
    if (cu[p.batch] > total) {
      fail(std::string(name) + "[batch] (" + std::to_string(cu[p.batch]) + ") must be at most " + total_name + " (" +
           std::to_string(total) + ")");
    }
  };
  check_offsets("cu_seqlens_q", p.cu_seqlens_q, p.total_q, "total_q");
  if (p.paged()) return;  // (the keys: check_paged)
  check_offsets("cu_seqlens_k", p.cu_seqlens_k, p.total_k, "total_k");
  if (p.seqused_k != nullptr) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t keys = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
      if (p.seqused_k[b] < 0 || p.seqused_k[b] > keys) {
        fail("seqused_k[" + std::to_string(b) + "] (" + std::to_string(p.seqused_k[b]) + ") must be in [0, " +
             std::to_string(keys) + "] (the sequence's keys, cu_seqlens_k[b + 1] - cu_seqlens_k[b])");
      }
    }
  }
}

/// Sequence b of a packed or paged problem that check_shape accepted.
Sequence sequence_of(const AttentionProblem& p, int64_t b) {
  Sequence s;
  if (p.varlen()) {
    s.q_begin = p.cu_seqlens_q[b];
    s.seqlen_q = std::min<int64_t>(p.cu_seqlens_q[b + 1] - s.q_begin, p.seqlen_q);
  } else {
    s.seqlen_q = p.seqlen_q;  // dense Q: batch b's rows
  }
  if (p.paged()) {
    s.seqlen_k = std::min<int64_t>(paged_keys(p, b), p.seqlen_k);  // (k_begin 0: keys through the pages)
  } else {
    s.k_begin = p.cu_seqlens_k[b];
    const int64_t keys = p.seqused_k != nullptr ? p.seqused_k[b] : p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    s.seqlen_k = std::min<int64_t>(keys, p.seqlen_k);
  }
  return s;
}

/// Gathers the first `keys` keys of sequence b of a paged problem into `st`:
/// K [keys, heads_kv, head_dim], V [keys, heads_kv, head_dim_v], contiguous.
void gather_pages(const AttentionProblem& p, int64_t b, int64_t keys, SequenceStorage& st) {
  const int64_t H = p.heads_kv, D = p.head_dim, Dv = p.head_dim_v;
  st.k.assign(static_cast<size_t>(keys * H * D), 0);
  st.v.assign(static_cast<size_t>(keys * H * Dv), 0);
  const uint16_t* k = static_cast<const uint16_t*>(p.k.data);
  const uint16_t* v = static_cast<const uint16_t*>(p.v.data);
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t page = p.page_table[b * p.page_table_stride + j / p.page_size], slot = j % p.page_size;
    for (int64_t h = 0; h < H; ++h) {
      if (D > 0) {
        const uint16_t* src = k + page * p.k.stride_batch + slot * p.k.stride_seq + h * p.k.stride_head;
        std::copy_n(src, D, st.k.begin() + static_cast<std::ptrdiff_t>((j * H + h) * D));
      }
      if (Dv > 0) {
        const uint16_t* src = v + page * p.v.stride_batch + slot * p.v.stride_seq + h * p.v.stride_head;
        std::copy_n(src, Dv, st.v.begin() + static_cast<std::ptrdiff_t>((j * H + h) * Dv));
      }
    }
  }
}

/// The dense problem of sequence b (see sequence_problem in reference.hpp); a paged
/// problem's keys gathered into `st` (which must outlive the result).
AttentionProblem dense_of(const AttentionProblem& p, int64_t b, SequenceStorage* st) {
  const Sequence s = sequence_of(p, b);
  AttentionProblem d = p;
  d.cu_seqlens_q = nullptr;
  d.cu_seqlens_k = nullptr;
  d.seqused_k = nullptr;
  d.total_q = 0;
  d.total_k = 0;
  d.batch = 1;
  d.seqlen_q = s.seqlen_q;
  d.seqlen_k = s.seqlen_k;
  auto from_row = [](TensorRef t, int64_t row) {
    if (t.data != nullptr) t.data = static_cast<const uint16_t*>(t.data) + row * t.stride_seq;
    t.stride_batch = 0;
    return t;
  };
  d.page_table = nullptr;
  d.page_table_stride = 0;
  d.page_size = 0;
  d.num_pages = 0;
  auto batch_of = [b](TensorRef t) {  // dense Q / O of a paged problem: batch b
    if (t.data != nullptr) t.data = static_cast<const uint16_t*>(t.data) + b * t.stride_batch;
    t.stride_batch = 0;
    return t;
  };
  d.q = p.varlen() ? from_row(p.q, s.q_begin) : batch_of(p.q);
  d.o = p.varlen() ? from_row(p.o, s.q_begin) : batch_of(p.o);
  if (p.paged()) {
    if (st == nullptr) throw InvalidArgument("reference: a paged problem's sequence needs storage for its keys");
    gather_pages(p, b, s.seqlen_k, *st);
    d.k = {st->k.data(), 0, p.heads_kv * p.head_dim, p.head_dim};
    d.v = {st->v.data(), 0, p.heads_kv * p.head_dim_v, p.head_dim_v};
  } else {
    d.k = from_row(p.k, s.k_begin);
    d.v = from_row(p.v, s.k_begin);
  }
  if (p.bias.kind != BiasKind::none && p.bias.data != nullptr) {
    const int64_t elem = p.bias.kind == BiasKind::f32 ? 4 : 2;
    d.bias.data = static_cast<const char*>(p.bias.data) + b * p.bias.stride_batch * elem;
  }
  d.bias.stride_batch = 0;
  if (p.alibi_slopes != nullptr) d.alibi_slopes = p.alibi_slopes + b * p.alibi_stride_batch;
  d.alibi_stride_batch = 0;
  d.lse.data = nullptr;  // (the reference writes no LSE through the problem)
  d.lse.stride_batch = 0;
  return d;
}

/// One unit in the last place of a float32 value (of the largest finite float for inf).
double ulp32(float f) {
  const float a = std::fabs(f);
  if (!std::isfinite(a)) return std::ldexp(1.0, 104);
  const float next = std::nextafter(a, std::numeric_limits<float>::infinity());
  return std::isfinite(next) ? static_cast<double>(next) - static_cast<double>(a) : std::ldexp(1.0, 104);
}

/// Computes one row into o (head_dim_v doubles) and *lse. `qs`, `s` are scratch.
class RowKernel {
 public:
  explicit RowKernel(const AttentionProblem& p)
      : p_(p),
        table_(p.dtype == DType::bf16 ? decode_table().bf16 : decode_table().f16),
        scale_(p.scale()),
        softcap_(static_cast<double>(p.softcap)),
        alibi_off_(mask_offset(p)),
        group_(p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1),
        qs_(static_cast<size_t>(p.head_dim)),
        s_(static_cast<size_t>(std::max<int64_t>(p.seqlen_k, 0))),
        eps_j_(static_cast<size_t>(std::max<int64_t>(p.seqlen_k, 0))) {}

  // Computes row r into o[head_dim_v], *lse; with `b` (non-null) also its
  // bounds: b->o_err (head_dim_v), b->lse_err, b->row_max, b->affected.
  struct Bounds {
    double* o_err;
    double* lse_err;
    double* row_max;
    char* affected;
  };
  void run(const RowId& r, double* o, double* lse, const Bounds* b) {
    const int64_t D = p_.head_dim, Dv = p_.head_dim_v;
    std::fill(o, o + Dv, 0.0);
    *lse = kNegInf;
    if (b) {
      std::fill(b->o_err, b->o_err + Dv, 0.0);
      *b->lse_err = 0.0;
      *b->row_max = kNegInf;
      *b->affected = 0;
    }
    auto mark_affected = [&] {
      // The row reads NaN or inf: its result is not bounded (it may be NaN).
      if (!b) return;
      *b->affected = 1;
      std::fill(b->o_err, b->o_err + Dv, std::numeric_limits<double>::infinity());
      *b->lse_err = std::numeric_limits<double>::infinity();
    };

    // The sink joins the softmax as a logit whose V row is 0; -inf takes no weight.
    const double sink = p_.sinks != nullptr ? static_cast<double>(p_.sinks[r.h]) : kNegInf;
    if (std::isnan(sink) || sink == std::numeric_limits<double>::infinity()) {
      mark_affected();
      return;
    }
    const KeyRange keys = visible_keys(p_, r.i);
    if (keys.first == keys.end) {  // sees no key: O = 0, LSE = the sink (-inf without)
      *lse = sink;
      if (b) *b->row_max = sink;
      return;
    }
    const int64_t hk = r.h / group_;
    bool affected = false;

    // Qs = round_to_dtype(float(q) * float(scale)), the product in float32.
    const uint16_t* q = static_cast<const uint16_t*>(p_.q.data) + r.b * p_.q.stride_batch +
                        r.i * p_.q.stride_seq + r.h * p_.q.stride_head;
    for (int64_t d = 0; d < D; ++d) {
      const float prod = table_[q[d]] * scale_;  // float32 product, as in the kernel
      qs_[static_cast<size_t>(d)] = static_cast<double>(table_[to_dtype(p_.dtype, prod)]);
      affected = affected || !std::isfinite(qs_[static_cast<size_t>(d)]);
    }

    const uint16_t* kbase = static_cast<const uint16_t*>(p_.k.data) + r.b * p_.k.stride_batch +
                            hk * p_.k.stride_head;
    const bool has_bias = p_.bias.kind != BiasKind::none;
    const int64_t bias_row = r.b * p_.bias.stride_batch + r.h * p_.bias.stride_head + r.i * p_.bias.stride_q;
    const bool has_alibi = p_.alibi_slopes != nullptr;
    const float slope = has_alibi ? p_.alibi_slopes[r.b * p_.alibi_stride_batch + r.h] : 0.0f;
    affected = affected || !std::isfinite(slope);  // (inf * distance 0 is NaN)

    // S = f32(f32(f32(Qs . K) + bias) - f32(slope * |i + off - j|)); -inf (from the bias) masks.
    double m = kNegInf, eps_max = 0.0;
    for (int64_t j = keys.first; j < keys.end; ++j) {
      const uint16_t* k = kbase + j * p_.k.stride_seq;
      double acc = 0.0, mag = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        const double t = qs_[static_cast<size_t>(d)] * static_cast<double>(table_[k[d]]);
        acc += t;
        mag += std::fabs(t);
      }
      float sf = static_cast<float>(acc);
      // Softcap: cap * tanh(x / cap) of the fp32 logit, rounded to fp32. It
      // shrinks differences (slope <= 1), so the sum's error bound carries over;
      // the kernel's tanh adds at most cap * 2^-18 (eps below).
      if (softcap_ > 0.0) sf = static_cast<float>(softcap_ * std::tanh(static_cast<double>(sf) / softcap_));
      double bias = 0.0;
      if (has_bias) {
        const int64_t off = bias_row + j * p_.bias.stride_k;
        bias = p_.bias.kind == BiasKind::f32
                   ? static_cast<double>(static_cast<const float*>(p_.bias.data)[off])
                   : static_cast<double>(table_[static_cast<const uint16_t*>(p_.bias.data)[off]]);
        sf = sf + static_cast<float>(bias);  // float32 add, as in the kernel
      }
      // ALiBi: the product slope * distance rounded to fp32, subtracted in fp32
      // (after the bias). A kernel may round the distance to fp32 first or fuse
      // the product into the subtraction: eps below allows 2 ulp of the result
      // and 1 ulp of the product for that.
      double alibi_eps = 0.0;
      if (has_alibi) {
        const double distance = static_cast<double>(std::abs(r.i + alibi_off_ - j));
        const float a = static_cast<float>(static_cast<double>(slope) * distance);
        sf = sf - a;  // float32 subtraction, as in the kernel
        alibi_eps = 2 * ulp32(sf) + ulp32(a);
      }
      double sj = static_cast<double>(sf);
      if (bias == kNegInf) {
        // Masked by the bias. The bias is arithmetic: a NaN or infinite K or V
        // at this key may still make the row NaN (NaN + -inf, 0 * NaN), so the
        // row counts as reading them (V: in the next loop).
        if (!std::isfinite(mag)) affected = true;
        sj = kNegInf;
        s_[static_cast<size_t>(j)] = sj;
        if (!v_finite(j, hk, r.b)) affected = true;
        continue;
      }
      s_[static_cast<size_t>(j)] = sj;
      if (!std::isfinite(sj) || !std::isfinite(mag)) {
        affected = true;
        continue;
      }
      const double eps =
          (static_cast<double>(D) / 4 + 4) * 0x1p-23 * mag + 2 * ulp32(sf) + softcap_ * 0x1p-18 + alibi_eps;
      eps_j_[static_cast<size_t>(j)] = eps;
      eps_max = std::max(eps_max, eps);
      if (sj > m) m = sj;
    }
    if (affected) {
      mark_affected();
      return;
    }
    m = std::max(m, sink);  // (the sink is exact: no eps)
    if (m == kNegInf) return;  // every visible key masked by the bias and no sink: the row sees no key

    // P = exp(S - max), O = P V / sum P, LSE = max + log(sum P), sum P with the sink's exp(sink - max).
    const uint16_t* vbase = static_cast<const uint16_t*>(p_.v.data) + r.b * p_.v.stride_batch +
                            hk * p_.v.stride_head;
    double sum = sink == kNegInf ? 0.0 : std::exp(sink - m);
    for (int64_t j = keys.first; j < keys.end; ++j) {
      const double sj = s_[static_cast<size_t>(j)];
      if (sj == kNegInf) continue;
      const double pj = std::exp(sj - m);
      sum += pj;
      const uint16_t* v = vbase + j * p_.v.stride_seq;
      for (int64_t d = 0; d < Dv; ++d) {
        const double vd = static_cast<double>(table_[v[d]]);
        if (!std::isfinite(vd)) affected = true;
        o[d] += pj * vd;
      }
    }
    const double inv = 1.0 / sum;
    for (int64_t d = 0; d < Dv; ++d) o[d] *= inv;
    *lse = m + std::log(sum);
    if (!b) return;
    *b->row_max = m;
    if (affected) {
      mark_affected();
      return;
    }
    // Logits off by at most eps_j move weight P_j within [lo_j, hi_j],
    // lo_j = P_j exp(-eps_j - E), hi_j = min(1, P_j exp(eps_j + E)) (the
    // normaliser moves by at most exp(+-E)), so |dO_d| <= sum_j d_j |V_jd - O_d|,
    // d_j = max(hi_j - P_j, P_j - lo_j) (RowBounds); valid for any eps, also
    // where logits closer than eps may trade places. The sink is a key with
    // V = 0 and eps = 0: its term is d_sink |O_d|.
    const double log_sum = std::log(sum);
    auto weight_error = [&](double sj, double e) {
      const double pj = std::exp(sj - m - log_sum);
      const double hi = std::exp(std::min(0.0, sj - m - log_sum + e));
      const double lo = std::exp(sj - m - log_sum - e);
      return std::max(hi - pj, pj - lo);
    };
    for (int64_t j = keys.first; j < keys.end; ++j) {
      const double sj = s_[static_cast<size_t>(j)];
      if (sj == kNegInf) continue;
      const double w = weight_error(sj, eps_j_[static_cast<size_t>(j)] + eps_max);
      if (w == 0.0) continue;
      const uint16_t* v = vbase + j * p_.v.stride_seq;
      for (int64_t d = 0; d < Dv; ++d) b->o_err[d] += w * std::fabs(static_cast<double>(table_[v[d]]) - o[d]);
    }
    if (sink != kNegInf) {
      const double w = weight_error(sink, eps_max);
      for (int64_t d = 0; d < Dv; ++d) b->o_err[d] += w * std::fabs(o[d]);
    }
    *b->lse_err = eps_max + 0x1p-21 * std::fabs(m);
  }

 private:
  // Whether V row j of (batch b, KV head hk) is all finite.
  bool v_finite(int64_t j, int64_t hk, int64_t b) const {
    const uint16_t* v = static_cast<const uint16_t*>(p_.v.data) + b * p_.v.stride_batch + hk * p_.v.stride_head +
                        j * p_.v.stride_seq;
    for (int64_t d = 0; d < p_.head_dim_v; ++d)
      if (!std::isfinite(table_[v[d]])) return false;
    return true;
  }

  const AttentionProblem& p_;
  const float* table_;
  float scale_;
  double softcap_;  // 0: off
  int64_t alibi_off_;  // ALiBi's distance is |i + alibi_off_ - j|
  int64_t group_;
  std::vector<double> qs_;
  std::vector<double> s_;
  std::vector<double> eps_j_;
};

}  // namespace

namespace {

/// Runs row r as local_rows[r] of problems[which[r]] (which == nullptr: all of problems[0]).
void run_rows(const std::vector<AttentionProblem>& problems, const std::vector<size_t>* which,
              const std::vector<RowId>& local_rows, int64_t head_dim_v, double* o_out, double* lse_out,
              int threads, RowBounds* bounds) {
  (void)decode_table();  // build the table before the threads start
  if (bounds) {
    bounds->o_err.assign(local_rows.size() * static_cast<size_t>(std::max<int64_t>(head_dim_v, 0)), 0.0);
    bounds->lse_err.assign(local_rows.size(), 0.0);
    bounds->row_max.assign(local_rows.size(), kNegInf);
    bounds->affected.assign(local_rows.size(), 0);
  }

  const int64_t n = static_cast<int64_t>(local_rows.size());
  int64_t nthreads = threads > 0 ? threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  nthreads = std::clamp<int64_t>(nthreads, 1, n);

  // Rows are handed out in small chunks (causal rows differ in cost).
  const int64_t chunk = std::clamp<int64_t>(n / (nthreads * 16), 1, 64);
  std::atomic<int64_t> next{0};
  auto worker = [&]() {
    std::optional<RowKernel> kernel;  // for problems[current]
    size_t current = 0;
    for (;;) {
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= n) break;
      const int64_t end = std::min(n, begin + chunk);
      for (int64_t r = begin; r < end; ++r) {
        const size_t pi = which != nullptr ? (*which)[static_cast<size_t>(r)] : 0;
        if (!kernel || pi != current) {
          kernel.emplace(problems[pi]);
          current = pi;
        }
        if (bounds) {
          const RowKernel::Bounds rb{bounds->o_err.data() + r * head_dim_v, bounds->lse_err.data() + r,
                                     bounds->row_max.data() + r, bounds->affected.data() + r};
          kernel->run(local_rows[static_cast<size_t>(r)], o_out + r * head_dim_v, lse_out + r, &rb);
        } else {
          kernel->run(local_rows[static_cast<size_t>(r)], o_out + r * head_dim_v, lse_out + r, nullptr);
        }
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

[[noreturn]] void bad_row(const RowId& r, const char* what) {
  throw InvalidArgument("reference: row (b " + std::to_string(r.b) + ", i " + std::to_string(r.i) + ", h " +
                        std::to_string(r.h) + ") is outside the " + what);
}

}  // namespace

Sequence sequence(const AttentionProblem& host_problem, int64_t b) {
  check_shape(host_problem);
  if (!host_problem.varlen() && !host_problem.paged())
    throw InvalidArgument("reference: sequence() needs a packed (cu_seqlens_q) or paged (page_table) problem");
  if (b < 0 || b >= host_problem.batch)
    throw InvalidArgument("reference: sequence " + std::to_string(b) + " is outside the batch (" +
                          std::to_string(host_problem.batch) + ")");
  return sequence_of(host_problem, b);
}

AttentionProblem sequence_problem(const AttentionProblem& host_problem, int64_t b) {
  (void)sequence(host_problem, b);  // the checks
  if (host_problem.paged())
    throw InvalidArgument("reference: a paged problem's sequence_problem needs a SequenceStorage for its keys");
  return dense_of(host_problem, b, nullptr);
}

AttentionProblem sequence_problem(const AttentionProblem& host_problem, int64_t b, SequenceStorage& storage) {
  (void)sequence(host_problem, b);  // the checks
  return dense_of(host_problem, b, &storage);
}

void forward_rows(const AttentionProblem& host_problem, const std::vector<RowId>& rows, double* o_out,
                  double* lse_out, int threads, RowBounds* bounds) {
  check_shape(host_problem);
  const AttentionProblem& p = host_problem;
  if (rows.empty()) return;
  if (!p.varlen() && !p.paged()) {
    for (const RowId& r : rows) {
      if (r.b < 0 || r.b >= p.batch || r.i < 0 || r.i >= p.seqlen_q || r.h < 0 || r.h >= p.heads_q)
        bad_row(r, "problem");
    }
    run_rows({p}, nullptr, rows, p.head_dim_v, o_out, lse_out, threads, bounds);
    return;
  }
  // A packed batch or a paged cache: each row through its sequence's dense problem (built once
  // per sequence used; a paged one's keys gathered into storage).
  std::vector<AttentionProblem> problems;
  std::vector<std::unique_ptr<SequenceStorage>> storage;
  std::vector<int64_t> index(static_cast<size_t>(std::max<int64_t>(p.batch, 0)), -1);  // sequence -> problems
  std::vector<size_t> which;
  std::vector<RowId> local;
  which.reserve(rows.size());
  local.reserve(rows.size());
  for (const RowId& r : rows) {
    if (r.b < 0 || r.b >= p.batch || r.h < 0 || r.h >= p.heads_q) bad_row(r, p.varlen() ? "packed problem" : "paged problem");
    int64_t& at = index[static_cast<size_t>(r.b)];
    if (at < 0) {
      at = static_cast<int64_t>(problems.size());
      storage.push_back(std::make_unique<SequenceStorage>());
      problems.push_back(dense_of(p, r.b, storage.back().get()));
    }
    const AttentionProblem& d = problems[static_cast<size_t>(at)];
    if (r.i < 0 || r.i >= d.seqlen_q) bad_row(r, "rows of its sequence");
    which.push_back(static_cast<size_t>(at));
    local.push_back({0, r.i, r.h});
  }
  run_rows(problems, &which, local, p.head_dim_v, o_out, lse_out, threads, bounds);
}

void forward_all(const AttentionProblem& host_problem, std::vector<double>& o_out,
                 std::vector<double>& lse_out, int threads) {
  check_shape(host_problem);
  const AttentionProblem& p = host_problem;
  if (p.varlen()) {
    // [row, h, d] and [h, row] over the packed rows; rows no sequence owns stay NaN.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<RowId> rows;
    std::vector<int64_t> packed_row;  // of each entry of rows
    for (int64_t b = 0; b < p.batch; ++b) {
      const Sequence s = sequence_of(p, b);
      for (int64_t i = 0; i < s.seqlen_q; ++i)
        for (int64_t h = 0; h < p.heads_q; ++h) {
          rows.push_back({b, i, h});
          packed_row.push_back(s.q_begin + i);
        }
    }
    std::vector<double> o_rows(rows.size() * static_cast<size_t>(p.head_dim_v), 0.0);
    std::vector<double> lse_rows(rows.size(), kNegInf);
    forward_rows(p, rows, o_rows.data(), lse_rows.data(), threads);
    o_out.assign(static_cast<size_t>(p.total_q * p.heads_q * p.head_dim_v), nan);
    lse_out.assign(static_cast<size_t>(p.heads_q * p.total_q), nan);
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t row = packed_row[r], h = rows[r].h;
      std::copy_n(o_rows.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(p.head_dim_v)), p.head_dim_v,
                  o_out.begin() + static_cast<std::ptrdiff_t>((row * p.heads_q + h) * p.head_dim_v));
      lse_out[static_cast<size_t>(h * p.total_q + row)] = lse_rows[r];
    }
    return;
  }
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

void merge_states(const MergeProblem& p, std::vector<double>& o_out, std::vector<double>& lse_out) {
  const int64_t B = p.batch, Sq = p.seqlen_q, H = p.heads, D = p.head_dim_v, S = p.num_states;
  o_out.assign(static_cast<size_t>(B * Sq * H * D), 0.0);
  lse_out.assign(static_cast<size_t>(B * H * Sq), 0.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto partial = [&](int64_t s, int64_t b, int64_t i, int64_t h, int64_t d) -> double {
    const int64_t off = s * p.o_partial.stride_state + b * p.o_partial.stride_batch + i * p.o_partial.stride_seq +
                        h * p.o_partial.stride_head + d;
    switch (p.partial_dtype) {
      case StateDType::f32: return static_cast<const float*>(p.o_partial.data)[off];
      case StateDType::f16: return half_to_float(static_cast<const uint16_t*>(p.o_partial.data)[off]);
      case StateDType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p.o_partial.data)[off]);
    }
    return nan;
  };
  std::vector<double> lse(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        double* o = &o_out[static_cast<size_t>(((b * Sq + i) * H + h) * D)];
        double& l_out = lse_out[static_cast<size_t>((b * H + h) * Sq + i)];
        double m = -inf;
        bool bad = false;  // a NaN or +inf LSE_s
        for (int64_t s = 0; s < S; ++s) {
          lse[s] = p.lse_partial.data[s * p.lse_partial.stride_state + b * p.lse_partial.stride_batch +
                                      h * p.lse_partial.stride_head + i * p.lse_partial.stride_seq];
          bad = bad || std::isnan(lse[s]) || lse[s] == inf;
          if (lse[s] > m) m = lse[s];
        }
        if (bad) {
          l_out = nan;
          for (int64_t d = 0; d < D; ++d) o[d] = nan;
          continue;
        }
        if (m == -inf) {
          l_out = -inf;  // o stays 0
          continue;
        }
        double sum = 0.0;
        for (int64_t s = 0; s < S; ++s)
          if (lse[s] != -inf) sum += std::exp(lse[s] - m);
        l_out = m + std::log(sum);
        for (int64_t s = 0; s < S; ++s) {
          if (lse[s] == -inf) continue;
          const double w = std::exp(lse[s] - m) / sum;
          for (int64_t d = 0; d < D; ++d) o[d] += w * partial(s, b, i, h, d);
        }
      }
}

}  // namespace flashgen::ref
