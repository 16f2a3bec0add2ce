// Checks of the float64 reference itself (test/reference.hpp) against tiny
// hand-computed cases, and of its f16/bf16 conversions against IEEE
// round-to-nearest-even on every 16-bit pattern.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "flashgen/problem.hpp"
#include "test/reference.hpp"

namespace {

using flashgen::AttentionProblem;
using flashgen::BiasKind;
using flashgen::DType;
using flashgen::MaskKind;
namespace ref = flashgen::ref;

constexpr double kInf = std::numeric_limits<double>::infinity();

float bits_to_float(uint32_t u) { return std::bit_cast<float>(u); }

bool half_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu) != 0; }

// ---------------------------------------------------------------------------
// A contiguous BSHD host problem (scale 1, zero-filled) with element setters.
// ---------------------------------------------------------------------------
struct Host {
  AttentionProblem p;
  std::vector<uint16_t> q, k, v, bias16;
  std::vector<float> bias32;

  Host(DType dt, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
       MaskKind mask, BiasKind bias = BiasKind::none) {
    p.dtype = dt;
    p.batch = B;
    p.seqlen_q = Sq;
    p.seqlen_k = Sk;
    p.heads_q = Hq;
    p.heads_kv = Hkv;
    p.head_dim = D;
    p.head_dim_v = Dv;
    p.mask = mask;
    p.softmax_scale = 1.0f;
    q.assign(static_cast<size_t>(B * Sq * Hq * D), 0);
    k.assign(static_cast<size_t>(B * Sk * Hkv * D), 0);
    v.assign(static_cast<size_t>(B * Sk * Hkv * Dv), 0);
    p.q = {q.data(), Sq * Hq * D, Hq * D, D};
    p.k = {k.data(), Sk * Hkv * D, Hkv * D, D};
    p.v = {v.data(), Sk * Hkv * Dv, Hkv * Dv, Dv};
    p.o = {nullptr, Sq * Hq * Dv, Hq * Dv, Dv};  // the reference never touches O
    p.bias.kind = bias;
    if (bias == BiasKind::f32) {
      bias32.assign(static_cast<size_t>(B * Hq * Sq * Sk), 0.0f);
      p.bias.data = bias32.data();
    } else if (bias == BiasKind::input) {
      bias16.assign(static_cast<size_t>(B * Hq * Sq * Sk), ref::to_dtype(dt, 0.0f));
      p.bias.data = bias16.data();
    }
    p.bias.stride_batch = Hq * Sq * Sk;
    p.bias.stride_head = Sq * Sk;
    p.bias.stride_q = Sk;
    p.bias.stride_k = 1;
  }
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  void set_q(int64_t b, int64_t i, int64_t h, int64_t d, float x) {
    q[static_cast<size_t>(b * p.q.stride_batch + i * p.q.stride_seq + h * p.q.stride_head + d)] = ref::to_dtype(p.dtype, x);
  }
  void set_k(int64_t b, int64_t j, int64_t h, int64_t d, float x) {
    k[static_cast<size_t>(b * p.k.stride_batch + j * p.k.stride_seq + h * p.k.stride_head + d)] = ref::to_dtype(p.dtype, x);
  }
  void set_v(int64_t b, int64_t j, int64_t h, int64_t d, float x) {
    v[static_cast<size_t>(b * p.v.stride_batch + j * p.v.stride_seq + h * p.v.stride_head + d)] = ref::to_dtype(p.dtype, x);
  }
  void set_bias(int64_t b, int64_t h, int64_t i, int64_t j, float x) {
    const auto off = static_cast<size_t>(b * p.bias.stride_batch + h * p.bias.stride_head + i * p.bias.stride_q + j);
    if (p.bias.kind == BiasKind::f32) bias32[off] = x;
    else bias16[off] = ref::to_dtype(p.dtype, x);
  }
  void fill_random(std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : q) x = ref::to_dtype(p.dtype, u(rng));
    for (auto& x : k) x = ref::to_dtype(p.dtype, u(rng));
    for (auto& x : v) x = ref::to_dtype(p.dtype, u(rng));
    for (auto& x : bias32) x = 2.0f * u(rng);
    for (auto& x : bias16) x = ref::to_dtype(p.dtype, 2.0f * u(rng));
  }
};

struct Out {
  std::vector<double> o, lse;  // forward_all layouts: o [b, i, h, d], lse [b, h, i]
  double O(const AttentionProblem& p, int64_t b, int64_t i, int64_t h, int64_t d) const {
    return o[static_cast<size_t>(((b * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v + d)];
  }
  double L(const AttentionProblem& p, int64_t b, int64_t i, int64_t h) const {
    return lse[static_cast<size_t>((b * p.heads_q + h) * p.seqlen_q + i)];
  }
};

Out run_all(const AttentionProblem& p, int threads = 0) {
  Out out;
  ref::forward_all(p, out.o, out.lse, threads);
  return out;
}

}  // namespace

TEST_SUITE("reference") {

// ------------------------------ conversions --------------------------------

TEST_CASE("f16: exact values, specials, overflow and ties") {
  CHECK(ref::float_to_half(0.0f) == 0x0000);
  CHECK(ref::float_to_half(-0.0f) == 0x8000);
  CHECK(ref::float_to_half(1.0f) == 0x3C00);
  CHECK(ref::float_to_half(-2.0f) == 0xC000);
  CHECK(ref::float_to_half(0.5f) == 0x3800);
  CHECK(ref::float_to_half(65504.0f) == 0x7BFF);                              // largest finite
  CHECK(ref::float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);        // just below the tie
  CHECK(ref::float_to_half(65520.0f) == 0x7C00);                              // tie -> even = inf
  CHECK(ref::float_to_half(-65520.0f) == 0xFC00);
  CHECK(ref::float_to_half(1.0e6f) == 0x7C00);
  CHECK(ref::float_to_half(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(ref::float_to_half(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(half_is_nan(ref::float_to_half(std::numeric_limits<float>::quiet_NaN())));
  CHECK(half_is_nan(ref::float_to_half(bits_to_float(0x7F800001u))));  // signalling, payload only in low bits
  CHECK(half_is_nan(ref::float_to_half(bits_to_float(0xFFC00000u))));
  // Ties in the normal range: 1 + 2^-11 is halfway between 0x3C00 and 0x3C01.
  CHECK(ref::float_to_half(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(ref::float_to_half(std::nextafter(1.0f + 0x1p-11f, 2.0f)) == 0x3C01);
  CHECK(ref::float_to_half(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(ref::float_to_half(2049.0f) == 0x6800);  // spacing 2 above 2048: tie -> 2048
  CHECK(ref::float_to_half(2051.0f) == 0x6802);  // tie -> 2052
  // Subnormals: value = m * 2^-24.
  CHECK(ref::float_to_half(0x1p-24f) == 0x0001);
  CHECK(ref::float_to_half(-0x1p-24f) == 0x8001);
  CHECK(ref::float_to_half(0x1p-25f) == 0x0000);                          // tie -> 0
  CHECK(ref::float_to_half(-0x1p-25f) == 0x8000);
  CHECK(ref::float_to_half(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(ref::float_to_half(0x1p-26f) == 0x0000);
  CHECK(ref::float_to_half(1.5f * 0x1p-24f) == 0x0002);                   // tie 1|2 -> 2
  CHECK(ref::float_to_half(2.5f * 0x1p-24f) == 0x0002);                   // tie 2|3 -> 2
  CHECK(ref::float_to_half(1023.0f * 0x1p-24f) == 0x03FF);                // largest subnormal
  CHECK(ref::float_to_half(1023.5f * 0x1p-24f) == 0x0400);                // tie -> smallest normal
  CHECK(ref::float_to_half(0x1p-14f) == 0x0400);
  CHECK(ref::float_to_half(1.0e-10f) == 0x0000);
  CHECK(ref::float_to_half(bits_to_float(0x00000001u)) == 0x0000);        // float subnormal

  CHECK(ref::half_to_float(0x0001) == 0x1p-24f);
  CHECK(ref::half_to_float(0x03FF) == 1023.0f * 0x1p-24f);
  CHECK(ref::half_to_float(0x0400) == 0x1p-14f);
  CHECK(ref::half_to_float(0x7BFF) == 65504.0f);
  CHECK(ref::half_to_float(0x3555) == 0.333251953125f);
  CHECK(ref::half_to_float(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(ref::half_to_float(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(ref::half_to_float(0x7E00)));
  CHECK(std::isnan(ref::half_to_float(0xFFFF)));
  CHECK(std::signbit(ref::half_to_float(0x8000)));
}

TEST_CASE("f16: every pattern round-trips and every midpoint rounds to even") {
  int bad_roundtrip = 0, bad_mid = 0;
  for (uint32_t u = 0; u < 65536u; ++u) {
    const auto h = static_cast<uint16_t>(u);
    const float f = ref::half_to_float(h);
    if (half_is_nan(h)) {
      if (!std::isnan(f) || !half_is_nan(ref::float_to_half(f))) ++bad_roundtrip;
      continue;
    }
    if (ref::float_to_half(f) != h) ++bad_roundtrip;
    // Midpoint between h and the next magnitude up (exact in float: 12 significant bits).
    const uint16_t mag = h & 0x7FFFu;
    if (mag >= 0x7C00u) continue;  // inf
    const uint16_t sign = h & 0x8000u;
    const double a = std::fabs(static_cast<double>(f));
    const double b = (mag == 0x7BFFu) ? 65536.0 : std::fabs(static_cast<double>(ref::half_to_float(static_cast<uint16_t>(mag + 1))));
    const float mid = static_cast<float>((a + b) / 2.0);
    REQUIRE(static_cast<double>(mid) == (a + b) / 2.0);
    const float s = sign ? -1.0f : 1.0f;
    const uint16_t even = (mag & 1u) ? static_cast<uint16_t>(mag + 1) : mag;
    if (ref::float_to_half(s * mid) != (sign | even)) ++bad_mid;
    if (ref::float_to_half(s * std::nextafter(mid, 0.0f)) != (sign | mag)) ++bad_mid;
    if (ref::float_to_half(s * std::nextafter(mid, 1.0e30f)) != (sign | (mag + 1))) ++bad_mid;
  }
  CHECK(bad_roundtrip == 0);
  CHECK(bad_mid == 0);
}

TEST_CASE("bf16: exact values, specials, overflow and ties") {
  CHECK(ref::float_to_bf16(0.0f) == 0x0000);
  CHECK(ref::float_to_bf16(-0.0f) == 0x8000);
  CHECK(ref::float_to_bf16(1.0f) == 0x3F80);
  CHECK(ref::float_to_bf16(-2.0f) == 0xC000);
  CHECK(ref::float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);                       // tie -> even
  CHECK(ref::float_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)) == 0x3F81);
  CHECK(ref::float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);                   // tie -> even
  CHECK(ref::float_to_bf16(0.33333334f) == 0x3EAB);
  CHECK(ref::float_to_bf16(bits_to_float(0x7F7F0000u)) == 0x7F7F);          // largest finite
  CHECK(ref::float_to_bf16(bits_to_float(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(ref::float_to_bf16(bits_to_float(0x7F7F8000u)) == 0x7F80);          // tie -> even = inf
  CHECK(ref::float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(ref::float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(ref::float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(bf16_is_nan(ref::float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(bf16_is_nan(ref::float_to_bf16(bits_to_float(0x7F800001u))));       // payload only in dropped bits
  CHECK(bf16_is_nan(ref::float_to_bf16(bits_to_float(0xFF800001u))));
  // Subnormals (float subnormals, same encoding range).
  CHECK(ref::float_to_bf16(bits_to_float(0x00010000u)) == 0x0001);
  CHECK(ref::float_to_bf16(bits_to_float(0x00008000u)) == 0x0000);          // tie -> 0
  CHECK(ref::float_to_bf16(bits_to_float(0x00008001u)) == 0x0001);
  CHECK(ref::float_to_bf16(bits_to_float(0x00018000u)) == 0x0002);          // tie -> even
  CHECK(ref::float_to_bf16(bits_to_float(0x80018000u)) == 0x8002);
  CHECK(ref::float_to_bf16(bits_to_float(0x007FFFFFu)) == 0x0080);          // rounds up into the normals

  CHECK(ref::bf16_to_float(0x3F80) == 1.0f);
  CHECK(ref::bf16_to_float(0x3EAB) == 0.333984375f);
  CHECK(ref::bf16_to_float(0x0001) == bits_to_float(0x00010000u));
  CHECK(ref::bf16_to_float(0xFF80) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(ref::bf16_to_float(0xFFFF)));
}

TEST_CASE("bf16: every pattern round-trips and every midpoint rounds to even") {
  int bad_roundtrip = 0, bad_mid = 0;
  for (uint32_t u = 0; u < 65536u; ++u) {
    const auto h = static_cast<uint16_t>(u);
    const float f = ref::bf16_to_float(h);
    if (bf16_is_nan(h)) {
      if (!std::isnan(f) || !bf16_is_nan(ref::float_to_bf16(f))) ++bad_roundtrip;
      continue;
    }
    if (ref::float_to_bf16(f) != h) ++bad_roundtrip;
    const uint16_t mag = h & 0x7FFFu;
    if (mag >= 0x7F7Fu) continue;  // the midpoint above the largest finite is checked above
    const uint16_t sign = h & 0x8000u;
    // Midpoint: one more mantissa bit, exact in float.
    const uint32_t mid_bits = (static_cast<uint32_t>(mag) << 16) + 0x8000u;
    const float mid = bits_to_float(mid_bits | (static_cast<uint32_t>(sign) << 16));
    const uint16_t even = (mag & 1u) ? static_cast<uint16_t>(mag + 1) : mag;
    if (ref::float_to_bf16(mid) != (sign | even)) ++bad_mid;
    if (ref::float_to_bf16(bits_to_float((mid_bits - 1) | (static_cast<uint32_t>(sign) << 16))) != (sign | mag)) ++bad_mid;
    if (ref::float_to_bf16(bits_to_float((mid_bits + 1) | (static_cast<uint32_t>(sign) << 16))) != (sign | (mag + 1))) ++bad_mid;
  }
  CHECK(bad_roundtrip == 0);
  CHECK(bad_mid == 0);
}

TEST_CASE("to_dtype / from_dtype dispatch on the dtype") {
  CHECK(ref::to_dtype(DType::f16, 1.0f) == 0x3C00);
  CHECK(ref::to_dtype(DType::bf16, 1.0f) == 0x3F80);
  CHECK(ref::from_dtype(DType::f16, 0x3C00) == 1.0f);
  CHECK(ref::from_dtype(DType::bf16, 0x3F80) == 1.0f);
  CHECK(ref::from_dtype(DType::f16, 0xC000) == -2.0f);
  CHECK(ref::from_dtype(DType::bf16, 0xC000) == -2.0f);
}

// ------------------------------- attention ---------------------------------

TEST_CASE("one key: O is the V row and LSE is the score") {
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(static_cast<int>(dt));
    Host h(dt, 1, 1, 1, 1, 1, 8, 8, MaskKind::none);
    const float qv[8] = {0.5f, 1.0f, -1.0f, 0.25f, 0.0f, 2.0f, 0.0f, 0.0f};
    const float kv[8] = {1.0f, 0.5f, 0.25f, -2.0f, 7.0f, 0.125f, 0.0f, 3.0f};
    for (int d = 0; d < 8; ++d) {
      h.set_q(0, 0, 0, d, qv[d]);
      h.set_k(0, 0, 0, d, kv[d]);
      h.set_v(0, 0, 0, d, static_cast<float>(d) - 3.5f);
    }
    // S = 0.5 + 0.5 - 0.25 - 0.5 + 0 + 0.25 = 0.5
    const Out out = run_all(h.p);
    CHECK(out.L(h.p, 0, 0, 0) == 0.5);
    for (int d = 0; d < 8; ++d) CHECK(out.O(h.p, 0, 0, 0, d) == static_cast<double>(d) - 3.5);
  }
}

TEST_CASE("two keys: softmax of scores 0 and 1") {
  Host h(DType::f16, 1, 1, 2, 1, 1, 16, 16, MaskKind::none);
  h.set_q(0, 0, 0, 3, 1.0f);
  h.set_k(0, 1, 0, 3, 1.0f);  // S = [0, 1]
  h.set_v(0, 0, 0, 0, 1.0f);  // V0 = e0, V1 = e1 + 2 e2
  h.set_v(0, 1, 0, 1, 1.0f);
  h.set_v(0, 1, 0, 2, 2.0f);
  const Out out = run_all(h.p);
  const double e = std::exp(1.0);
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(std::log(1.0 + e)).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 0) == doctest::Approx(1.0 / (1.0 + e)).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 1) == doctest::Approx(e / (1.0 + e)).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 2) == doctest::Approx(2.0 * e / (1.0 + e)).epsilon(1e-14));
  for (int d = 3; d < 16; ++d) CHECK(out.O(h.p, 0, 0, 0, d) == 0.0);
}

TEST_CASE("softcap: cap * tanh(S / cap) before the bias; huge logits saturate at the cap") {
  // Keys with S = 4, 64 and -64 (q = 1 at d 0; k = S there; softmax_scale 1),
  // cap 8, bias +1 on key 0: logits 8 tanh(0.5) + 1, 8 tanh(8), -8 tanh(8)
  // (each rounded to fp32 as the kernel forms it).
  Host h(DType::f16, 1, 1, 3, 1, 1, 16, 16, MaskKind::none);
  h.p.softmax_scale = 1.0f;
  h.p.softcap = 8.0f;
  h.set_q(0, 0, 0, 0, 1.0f);
  const float ks[3] = {4.0f, 64.0f, -64.0f};
  for (int j = 0; j < 3; ++j) {
    h.set_k(0, j, 0, 0, ks[j]);
    h.set_v(0, j, 0, j, 1.0f);  // V_j = e_j
  }
  std::vector<float> bias = {1.0f, 0.0f, 0.0f};
  h.p.bias.kind = BiasKind::f32;
  h.p.bias.data = bias.data();
  h.p.bias.stride_k = 1;
  double s[3];
  for (int j = 0; j < 3; ++j) s[j] = static_cast<float>(8.0 * std::tanh(ks[j] / 8.0));
  s[0] = static_cast<float>(static_cast<float>(s[0]) + 1.0f);
  const double m = std::max({s[0], s[1], s[2]});
  double sum = 0.0;
  for (double x : s) sum += std::exp(x - m);
  const Out out = run_all(h.p);
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(m + std::log(sum)).epsilon(1e-14));
  for (int j = 0; j < 3; ++j) CHECK(out.O(h.p, 0, 0, 0, j) == doctest::Approx(std::exp(s[j] - m) / sum).epsilon(1e-14));
  // Uncapped, key 1 would take all but e^-59 of the weight; capped 8 vs 4.69: 0.965.
  CHECK(out.O(h.p, 0, 0, 0, 1) < 0.97);
}

TEST_CASE("softmax_scale multiplies Q in float32, then Q is rounded to the dtype") {
  // q = 1, k = 1, one key: LSE = S = round_to_dtype(1 * scale).
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(static_cast<int>(dt));
    Host h(dt, 1, 1, 1, 1, 1, 16, 16, MaskKind::none);
    h.p.softmax_scale = 1.0f / 3.0f;
    h.set_q(0, 0, 0, 0, 1.0f);
    h.set_k(0, 0, 0, 0, 1.0f);
    const double expected = dt == DType::f16 ? 0.333251953125 : 0.333984375;
    const Out out = run_all(h.p);
    CHECK(out.L(h.p, 0, 0, 0) == expected);  // unrounded would be 0.3333333432674408
    CHECK(out.O(h.p, 0, 0, 0, 0) == 0.0);
  }
}

TEST_CASE("masks: top-left j <= i, bottom-right j <= i + seqlen_k - seqlen_q") {
  // q = 0: every visible key gets the same score, so O is the mean of the
  // visible V rows and LSE = log(count). V row j = (j, 10 j).
  struct M {
    MaskKind mask;
    int64_t sq, sk;
  };
  for (const M m : {M{MaskKind::none, 3, 5}, M{MaskKind::causal_top_left, 3, 5},
                    M{MaskKind::causal_bottom_right, 3, 5}, M{MaskKind::none, 5, 3},
                    M{MaskKind::causal_top_left, 5, 3}, M{MaskKind::causal_bottom_right, 5, 3},
                    M{MaskKind::causal_top_left, 4, 4}, M{MaskKind::causal_bottom_right, 4, 4}}) {
    CAPTURE(static_cast<int>(m.mask));
    CAPTURE(m.sq);
    CAPTURE(m.sk);
    Host h(DType::f16, 1, m.sq, m.sk, 1, 1, 16, 16, m.mask);
    for (int64_t j = 0; j < m.sk; ++j) {
      h.set_v(0, j, 0, 0, static_cast<float>(j));
      h.set_v(0, j, 0, 1, 10.0f * static_cast<float>(j));
    }
    const Out out = run_all(h.p);
    for (int64_t i = 0; i < m.sq; ++i) {
      CAPTURE(i);
      int64_t count = m.sk;  // keys 0 .. count-1 are visible
      if (m.mask == MaskKind::causal_top_left) count = std::min(m.sk, i + 1);
      if (m.mask == MaskKind::causal_bottom_right) count = std::clamp<int64_t>(i + m.sk - m.sq + 1, 0, m.sk);
      if (count == 0) {
        CHECK(out.L(h.p, 0, i, 0) == -kInf);
        for (int d = 0; d < 16; ++d) CHECK(out.O(h.p, 0, i, 0, d) == 0.0);
        continue;
      }
      const double mean = static_cast<double>(count - 1) / 2.0;
      CHECK(out.L(h.p, 0, i, 0) == doctest::Approx(std::log(static_cast<double>(count))).epsilon(1e-14));
      CHECK(out.O(h.p, 0, i, 0, 0) == doctest::Approx(mean).epsilon(1e-14));
      CHECK(out.O(h.p, 0, i, 0, 1) == doctest::Approx(10.0 * mean).epsilon(1e-14));
    }
  }
  // Spot values written out by hand: sq 5, sk 3, bottom-right: rows 0 and 1 see
  // nothing, row 2 sees key 0 only, row 4 sees all three.
  Host h(DType::f16, 1, 5, 3, 1, 1, 16, 16, MaskKind::causal_bottom_right);
  for (int64_t j = 0; j < 3; ++j) h.set_v(0, j, 0, 0, static_cast<float>(j + 1));
  const Out out = run_all(h.p);
  CHECK(out.L(h.p, 0, 0, 0) == -kInf);
  CHECK(out.L(h.p, 0, 1, 0) == -kInf);
  CHECK(out.L(h.p, 0, 2, 0) == 0.0);
  CHECK(out.O(h.p, 0, 2, 0, 0) == 1.0);
  CHECK(out.O(h.p, 0, 4, 0, 0) == doctest::Approx(2.0).epsilon(1e-14));
}

TEST_CASE("bias: added to the score (f32 and input dtype); -inf masks; a fully masked row") {
  for (BiasKind bk : {BiasKind::f32, BiasKind::input}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      CAPTURE(static_cast<int>(bk));
      CAPTURE(static_cast<int>(dt));
      // batch 2, heads 2, 3 queries, 3 keys, q = 0: S = bias.
      Host h(dt, 2, 3, 3, 2, 2, 16, 16, MaskKind::none, bk);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t hh = 0; hh < 2; ++hh)
          for (int64_t j = 0; j < 3; ++j) {
            h.set_v(b, j, hh, 0, static_cast<float>(j == 1));
            h.set_v(b, j, hh, 1, static_cast<float>(j == 2));
          }
      const float ninf = -std::numeric_limits<float>::infinity();
      // Row 0: [0, 1, -inf]; row 1: all -inf; row 2: [-inf, -inf, 2].
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t hh = 0; hh < 2; ++hh) {
          h.set_bias(b, hh, 0, 0, 0.0f);
          h.set_bias(b, hh, 0, 1, 1.0f);
          h.set_bias(b, hh, 0, 2, ninf);
          for (int64_t j = 0; j < 3; ++j) h.set_bias(b, hh, 1, j, ninf);
          h.set_bias(b, hh, 2, 0, ninf);
          h.set_bias(b, hh, 2, 1, ninf);
          h.set_bias(b, hh, 2, 2, 2.0f);
        }
      const Out out = run_all(h.p);
      const double e = std::exp(1.0);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t hh = 0; hh < 2; ++hh) {
          CHECK(out.L(h.p, b, 0, hh) == doctest::Approx(std::log(1.0 + e)).epsilon(1e-14));
          CHECK(out.O(h.p, b, 0, hh, 0) == doctest::Approx(e / (1.0 + e)).epsilon(1e-14));
          CHECK(out.O(h.p, b, 0, hh, 1) == 0.0);
          CHECK(out.L(h.p, b, 1, hh) == -kInf);
          CHECK(out.O(h.p, b, 1, hh, 0) == 0.0);
          CHECK(out.O(h.p, b, 1, hh, 1) == 0.0);
          CHECK(out.L(h.p, b, 2, hh) == 2.0);
          CHECK(out.O(h.p, b, 2, hh, 0) == 0.0);
          CHECK(out.O(h.p, b, 2, hh, 1) == 1.0);
        }
    }
  }
}

TEST_CASE("bias -inf on every key a causal row may see: the row sees no key") {
  // Top-left: row 0 sees key 0 only; its bias is -inf there (finite elsewhere).
  Host h(DType::f16, 1, 2, 4, 1, 1, 16, 16, MaskKind::causal_top_left, BiasKind::f32);
  h.set_bias(0, 0, 0, 0, -std::numeric_limits<float>::infinity());
  h.set_bias(0, 0, 1, 0, -std::numeric_limits<float>::infinity());  // row 1 sees keys 0, 1; 0 masked
  h.set_v(0, 1, 0, 0, 1.0f);
  const Out out = run_all(h.p);
  CHECK(out.L(h.p, 0, 0, 0) == -kInf);
  CHECK(out.O(h.p, 0, 0, 0, 0) == 0.0);
  CHECK(out.L(h.p, 0, 1, 0) == 0.0);  // row 1 sees key 1 only (score 0)
  CHECK(out.O(h.p, 0, 1, 0, 0) == 1.0);
}

// ---- finite logits of any magnitude (DESIGN.md "Numerics") ----
// The reference's softmax is shift-invariant from the fp32 lowest value to the
// largest: rows whose logits are all equal give the mean of V and LSE = S +
// ln(n); one logit far above the others gives its V row and LSE = that logit.
TEST_CASE("logits at every fp32 magnitude: all-equal rows and one dominant logit") {
  const float lowest = std::numeric_limits<float>::lowest();
  const float largest = std::numeric_limits<float>::max();
  for (float mag : {1e2f, 1e4f, 1e6f, 1e10f, 1e20f, 1e30f, 1e38f, largest}) {
    for (float sign : {-1.0f, 1.0f}) {
      const float m = sign * mag;
      CAPTURE(m);
      // Row 0: every key's logit is m. Row 1: key 2 has m, the others m - |m|/2
      // (or lowest/2 away): exp(-|m|/2) = 0 in float64.
      Host h(DType::bf16, 1, 2, 4, 1, 1, 16, 16, MaskKind::none, BiasKind::f32);
      for (int64_t j = 0; j < 4; ++j) {
        h.set_v(0, j, 0, 0, static_cast<float>(j) / 4);
        h.set_v(0, j, 0, 1, 1.0f);
        h.set_bias(0, 0, 0, j, m);
        h.set_bias(0, 0, 1, j, j == 2 ? m : m - mag / 2);
      }
      ref::RowBounds bounds;
      std::vector<ref::RowId> rows{{0, 0, 0}, {0, 1, 0}};
      std::vector<double> o(2 * 16), lse(2);
      ref::forward_rows(h.p, rows, o.data(), lse.data(), 1, &bounds);
      CHECK(o[0] == doctest::Approx((0.0 + 0.25 + 0.5 + 0.75) / 4).epsilon(1e-14));
      CHECK(o[1] == doctest::Approx(1.0).epsilon(1e-14));
      CHECK(lse[0] == doctest::Approx(static_cast<double>(m) + std::log(4.0)).epsilon(1e-14));
      CHECK(o[16] == 0.5);
      CHECK(o[17] == 1.0);
      CHECK(lse[1] == static_cast<double>(m));
      CHECK(std::isfinite(bounds.lse_err[0]));
      CHECK(bounds.row_max[0] == static_cast<double>(m));
      CHECK_FALSE(bounds.affected[0]);
      CHECK_FALSE(bounds.affected[1]);
    }
  }
  // The fp32 lowest value on every key: all equal, not masked.
  Host h(DType::f16, 1, 1, 3, 1, 1, 16, 16, MaskKind::none, BiasKind::f32);
  for (int64_t j = 0; j < 3; ++j) {
    h.set_bias(0, 0, 0, j, lowest);
    h.set_v(0, j, 0, 0, static_cast<float>(j));
  }
  const Out out = run_all(h.p);
  CHECK(out.O(h.p, 0, 0, 0, 0) == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(static_cast<double>(lowest)).epsilon(1e-14));
}

TEST_CASE("logits are rounded to float32 as the kernel forms them: f32(f32(Qs.K) + bias)") {
  // Qs.K = 1 on key 0 and 0 on key 1; bias 1e8 on both: in float32 1e8 + 1 =
  // 1e8 (its ulp is 8), so the two logits are equal and P = (1/2, 1/2).
  Host h(DType::f16, 1, 1, 2, 1, 1, 16, 16, MaskKind::none, BiasKind::f32);
  h.set_q(0, 0, 0, 0, 1.0f);
  h.set_k(0, 0, 0, 0, 1.0f);
  h.set_v(0, 0, 0, 0, 1.0f);
  for (int64_t j = 0; j < 2; ++j) h.set_bias(0, 0, 0, j, 1e8f);
  const Out out = run_all(h.p);
  CHECK(out.O(h.p, 0, 0, 0, 0) == 0.5);
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(1e8 + std::log(2.0)).epsilon(1e-15));
}

TEST_CASE("bounds: tight for small logits, growing with the logits' fp32 spacing") {
  std::mt19937_64 rng(7);
  auto o_err_of = [&](float bias) {
    Host h(DType::f16, 1, 4, 64, 1, 1, 64, 64, MaskKind::none, BiasKind::f32);
    h.fill_random(rng);
    for (auto& x : h.bias32) x = bias;
    ref::RowBounds b;
    std::vector<ref::RowId> rows{{0, 0, 0}, {0, 3, 0}};
    std::vector<double> o(2 * 64), lse(2);
    ref::forward_rows(h.p, rows, o.data(), lse.data(), 1, &b);
    double worst = 0;
    for (double e : b.o_err) worst = std::max(worst, e);
    return worst;
  };
  const double small = o_err_of(0.0f), big = o_err_of(1e4f);  // ulp(1e4) = 2^-10
  CHECK(small < 1e-4);  // far below the f16 tolerance: the tests stay sharp
  CHECK(big > 1e-3);
  CHECK(big < 1e-2);
}

TEST_CASE("NaN and inf inputs: only the rows that read them are affected") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf}) {
    // Top-left causal, 4 rows over 4 keys, 2 heads (one KV head each).
    Host h(DType::f16, 1, 4, 4, 2, 2, 16, 16, MaskKind::causal_top_left, BiasKind::f32);
    std::mt19937_64 rng(3);
    h.fill_random(rng);
    h.set_v(0, 2, 0, 5, bad);       // head 0, key 2: rows 2, 3 of head 0 see it
    h.set_q(0, 0, 1, 3, bad);       // head 1, row 0
    h.set_bias(0, 1, 2, 1, bad);    // head 1, row 2, key 1
    h.set_v(0, 3, 1, 2, bad);       // head 1, key 3: only row 3 sees it (causal)
    std::vector<ref::RowId> rows;
    for (int64_t hh = 0; hh < 2; ++hh)
      for (int64_t i = 0; i < 4; ++i) rows.push_back({0, i, hh});
    ref::RowBounds b;
    std::vector<double> o(rows.size() * 16), lse(rows.size());
    ref::forward_rows(h.p, rows, o.data(), lse.data(), 1, &b);
    const std::vector<char> want{0, 0, 1, 1, 1, 0, 1, 1};
    for (size_t r = 0; r < rows.size(); ++r) {
      CAPTURE(r);
      CHECK(b.affected[r] == want[r]);
      if (!want[r]) {
        CHECK(std::isfinite(lse[r]));
        CHECK(std::isfinite(b.lse_err[r]));
      } else {
        CHECK(b.lse_err[r] == kInf);
      }
    }
  }
}

TEST_CASE("bias broadcast through stride 0") {
  Host h(DType::f16, 2, 1, 2, 3, 3, 16, 16, MaskKind::none, BiasKind::f32);
  h.p.bias.stride_batch = 0;
  h.p.bias.stride_head = 0;
  h.set_bias(0, 0, 0, 1, 1.0f);  // shared by every (b, h): S = [0, 1]
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hh = 0; hh < 3; ++hh) h.set_v(b, 1, hh, 0, 1.0f);
  const Out out = run_all(h.p);
  const double e = std::exp(1.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hh = 0; hh < 3; ++hh) {
      CHECK(out.L(h.p, b, 0, hh) == doctest::Approx(std::log(1.0 + e)).epsilon(1e-14));
      CHECK(out.O(h.p, b, 0, hh, 0) == doctest::Approx(e / (1.0 + e)).epsilon(1e-14));
    }
}

TEST_CASE("GQA: query head h reads kv head h / (heads_q / heads_kv)") {
  struct G {
    int64_t hq, hkv;
  };
  for (const G g : {G{4, 4}, G{8, 2}, G{6, 3}, G{7, 1}, G{14, 2}, G{16, 2}}) {
    CAPTURE(g.hq);
    CAPTURE(g.hkv);
    Host h(DType::bf16, 2, 2, 1, g.hq, g.hkv, 16, 16, MaskKind::none);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t kh = 0; kh < g.hkv; ++kh) {
        h.set_v(b, 0, kh, 0, static_cast<float>(kh + 1));
        h.set_v(b, 0, kh, 1, static_cast<float>(b + 1));
        h.set_k(b, 0, kh, 0, static_cast<float>(kh));  // S = q0 * kh
      }
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t hh = 0; hh < g.hq; ++hh) h.set_q(b, i, hh, 0, 1.0f);
    const Out out = run_all(h.p);
    const int64_t group = g.hq / g.hkv;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t hh = 0; hh < g.hq; ++hh) {
          CAPTURE(hh);
          CHECK(out.O(h.p, b, i, hh, 0) == static_cast<double>(hh / group + 1));
          CHECK(out.O(h.p, b, i, hh, 1) == static_cast<double>(b + 1));
          CHECK(out.L(h.p, b, i, hh) == static_cast<double>(hh / group));
        }
  }
}

TEST_CASE("strided and broadcast views read the same elements as a contiguous copy") {
  std::mt19937_64 rng(1234);
  const DType dt = DType::f16;
  const int64_t B = 2, Sq = 5, Sk = 7, Hq = 4, Hkv = 2, D = 16, Dv = 24;
  Host c(dt, B, Sq, Sk, Hq, Hkv, D, Dv, MaskKind::causal_bottom_right);
  c.fill_random(rng);
  // K and V identical across the batch in the contiguous copy, so the strided
  // view may broadcast them with stride_batch 0.
  for (int64_t j = 0; j < Sk * Hkv * D; ++j) c.k[static_cast<size_t>(Sk * Hkv * D + j)] = c.k[static_cast<size_t>(j)];
  for (int64_t j = 0; j < Sk * Hkv * Dv; ++j) c.v[static_cast<size_t>(Sk * Hkv * Dv + j)] = c.v[static_cast<size_t>(j)];

  // Strided copy: padded Q (NaN in the padding), K/V [Sk, Hkv, d] with batch stride 0.
  AttentionProblem s = c.p;
  const int64_t qsh = D + 8, qss = Hq * qsh + 8, qsb = Sq * qss + 16;
  std::vector<uint16_t> qbuf(static_cast<size_t>(B * qsb), 0x7E00);  // NaN everywhere first
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t hh = 0; hh < Hq; ++hh)
        for (int64_t d = 0; d < D; ++d)
          qbuf[static_cast<size_t>(b * qsb + i * qss + hh * qsh + d)] =
              c.q[static_cast<size_t>(b * c.p.q.stride_batch + i * c.p.q.stride_seq + hh * c.p.q.stride_head + d)];
  s.q = {qbuf.data(), qsb, qss, qsh};
  std::vector<uint16_t> kbuf(c.k.begin(), c.k.begin() + Sk * Hkv * D);
  std::vector<uint16_t> vbuf(c.v.begin(), c.v.begin() + Sk * Hkv * Dv);
  s.k = {kbuf.data(), 0, Hkv * D, D};
  s.v = {vbuf.data(), 0, Hkv * Dv, Dv};

  const Out a = run_all(c.p), b = run_all(s);
  CHECK(a.o == b.o);  // same arithmetic in the same order: bit-identical
  CHECK(a.lse == b.lse);
  for (double x : b.o) REQUIRE(std::isfinite(x));
}

TEST_CASE("K/V heads broadcast with stride_head 0") {
  Host h(DType::f16, 1, 1, 1, 4, 2, 16, 16, MaskKind::none);
  // One physical head: logical kv heads 0 and 1 read the same row.
  h.p.k.stride_head = 0;
  h.p.v.stride_head = 0;
  h.set_v(0, 0, 0, 5, 3.0f);
  const Out out = run_all(h.p);
  for (int64_t hh = 0; hh < 4; ++hh) CHECK(out.O(h.p, 0, 0, hh, 5) == 3.0);
}

TEST_CASE("seqlen_k = 0 (null K/V): O = 0 and LSE = -inf for every row") {
  for (MaskKind m : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right}) {
    Host h(DType::bf16, 2, 3, 0, 2, 1, 16, 32, m);
    h.p.k.data = nullptr;
    h.p.v.data = nullptr;
    std::mt19937_64 rng(7);
    h.fill_random(rng);
    const Out out = run_all(h.p);
    REQUIRE(out.o.size() == static_cast<size_t>(2 * 3 * 2 * 32));
    REQUIRE(out.lse.size() == static_cast<size_t>(2 * 2 * 3));
    for (double x : out.o) CHECK(x == 0.0);
    for (double x : out.lse) CHECK(x == -kInf);
  }
}

TEST_CASE("seqlen_q = 0: nothing to compute") {
  Host h(DType::f16, 1, 0, 4, 1, 1, 16, 16, MaskKind::causal_bottom_right);
  const Out out = run_all(h.p);
  CHECK(out.o.empty());
  CHECK(out.lse.empty());
}

TEST_CASE("forward_rows agrees with forward_all; thread count does not change the result") {
  std::mt19937_64 rng(99);
  for (DType dt : {DType::f16, DType::bf16}) {
    Host h(dt, 2, 7, 9, 4, 2, 16, 8, MaskKind::causal_bottom_right, BiasKind::f32);
    h.fill_random(rng);
    h.p.softmax_scale = 0.25f;
    const Out one = run_all(h.p, 1);
    const Out many = run_all(h.p, 3);
    CHECK(one.o == many.o);
    CHECK(one.lse == many.lse);

    std::vector<ref::RowId> rows = {{1, 6, 3}, {0, 0, 0}, {1, 2, 1}, {0, 5, 2}, {1, 0, 3}};
    std::vector<double> o(rows.size() * 8, -1.0), lse(rows.size(), -1.0);
    ref::forward_rows(h.p, rows, o.data(), lse.data(), 2);
    for (size_t r = 0; r < rows.size(); ++r) {
      CAPTURE(r);
      CHECK(lse[r] == one.L(h.p, rows[r].b, rows[r].i, rows[r].h));
      for (int64_t d = 0; d < 8; ++d) CHECK(o[r * 8 + static_cast<size_t>(d)] == one.O(h.p, rows[r].b, rows[r].i, rows[r].h, d));
    }
  }
}

TEST_CASE("random rows against a direct (naive) softmax formula") {
  std::mt19937_64 rng(4242);
  const int64_t B = 2, Sq = 6, Sk = 11, Hq = 6, Hkv = 2, D = 24, Dv = 16;
  for (DType dt : {DType::f16, DType::bf16}) {
    Host h(dt, B, Sq, Sk, Hq, Hkv, D, Dv, MaskKind::causal_top_left, BiasKind::input);
    h.fill_random(rng);
    h.p.softmax_scale = 0.2f;
    const Out out = run_all(h.p);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t hh = 0; hh < Hq; ++hh) {
          const int64_t kh = hh / (Hq / Hkv);
          double sum = 0.0;
          std::vector<double> o(static_cast<size_t>(Dv), 0.0);
          for (int64_t j = 0; j <= std::min(i, Sk - 1); ++j) {
            double s = 0.0;  // f32(f32(Qs.K) + bias), as the kernel forms it
            for (int64_t d = 0; d < D; ++d) {
              const float qf = ref::from_dtype(dt, h.q[static_cast<size_t>(((b * Sq + i) * Hq + hh) * D + d)]);
              const double qs = ref::from_dtype(dt, ref::to_dtype(dt, qf * 0.2f));
              s += qs * ref::from_dtype(dt, h.k[static_cast<size_t>(((b * Sk + j) * Hkv + kh) * D + d)]);
            }
            s = static_cast<float>(static_cast<float>(s) + ref::from_dtype(dt, h.bias16[static_cast<size_t>(((b * Hq + hh) * Sq + i) * Sk + j)]));
            const double p = std::exp(s);  // |s| is small: no max subtraction needed
            sum += p;
            for (int64_t d = 0; d < Dv; ++d)
              o[static_cast<size_t>(d)] += p * ref::from_dtype(dt, h.v[static_cast<size_t>(((b * Sk + j) * Hkv + kh) * Dv + d)]);
          }
          CHECK(out.L(h.p, b, i, hh) == doctest::Approx(std::log(sum)).epsilon(1e-12));
          for (int64_t d = 0; d < Dv; ++d)
            CHECK(out.O(h.p, b, i, hh, d) == doctest::Approx(o[static_cast<size_t>(d)] / sum).epsilon(1e-12).scale(1.0));
        }
  }
}

// ------------------------ windows, ALiBi, sinks ----------------------------

TEST_CASE("window masks: i + off - left <= j <= i + off + right, the same as an explicit -inf bias") {
  struct W {
    MaskKind mask;
    int64_t sq, sk, left, right;
  };
  const MaskKind tl = MaskKind::window_top_left, br = MaskKind::window_bottom_right;
  std::mt19937_64 rng(31);
  for (const W w : {W{tl, 7, 9, 2, 0}, W{br, 7, 9, 2, 0}, W{tl, 9, 7, 0, 3}, W{br, 9, 7, 0, 3}, W{tl, 6, 6, -1, 1},
                    W{br, 5, 11, 3, -1}, W{tl, 8, 5, -1, -1}, W{br, 8, 5, 0, 0}, W{br, 4, 12, 100, 2},
                    W{tl, 4, 12, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()},
                    W{br, 12, 3, 1, 1}}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      CAPTURE(to_string(w.mask));
      CAPTURE(w.sq);
      CAPTURE(w.sk);
      CAPTURE(w.left);
      CAPTURE(w.right);
      Host win(dt, 2, w.sq, w.sk, 2, 1, 16, 16, w.mask, BiasKind::f32);
      win.fill_random(rng);
      win.p.window_left = w.left;
      win.p.window_right = w.right;
      win.p.softmax_scale = 0.5f;
      // The same problem with mask none and the hidden keys' bias set to -inf.
      Host biased(dt, 2, w.sq, w.sk, 2, 1, 16, 16, MaskKind::none, BiasKind::f32);
      biased.q = win.q;
      biased.k = win.k;
      biased.v = win.v;
      biased.bias32 = win.bias32;
      biased.p.softmax_scale = 0.5f;
      const int64_t off = w.mask == br ? w.sk - w.sq : 0;
      int64_t hidden = 0, seen = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t hh = 0; hh < 2; ++hh)
          for (int64_t i = 0; i < w.sq; ++i)
            for (int64_t j = 0; j < w.sk; ++j) {
              // (as differences: sizes up to INT64_MAX do not overflow)
              const bool visible = (w.left < 0 || i + off - j <= w.left) && (w.right < 0 || j - (i + off) <= w.right);
              if (!visible) biased.set_bias(b, hh, i, j, -std::numeric_limits<float>::infinity());
              ++(visible ? seen : hidden);
            }
      const Out a = run_all(win.p);
      const Out c = run_all(biased.p);
      CHECK(a.o == c.o);
      CHECK(a.lse == c.lse);
      CHECK(seen > 0);
    }
  }
  // Causal is the window (-1, 0) of the same alignment.
  for (auto [window, causal] :
       {std::pair{tl, MaskKind::causal_top_left}, std::pair{br, MaskKind::causal_bottom_right}}) {
    Host w(DType::f16, 1, 9, 6, 2, 2, 16, 16, window);
    w.fill_random(rng);
    w.p.window_left = -1;
    w.p.window_right = 0;
    Host c(DType::f16, 1, 9, 6, 2, 2, 16, 16, causal);
    c.q = w.q;
    c.k = w.k;
    c.v = w.v;
    const Out a = run_all(w.p), b = run_all(c.p);
    CHECK(a.o == b.o);
    CHECK(a.lse == b.lse);
  }
  // By hand: q = 0, so each row's O is the mean of its visible V rows (V row j = j)
  // and LSE = log(count). sq 4, sk 6, bottom-right (off 2), left 1, right 0: row 0
  // sees keys 1..2, row 3 keys 4..5; top-left left 0, right 1: row 3 sees 3..4.
  Host h(DType::f16, 1, 4, 6, 1, 1, 16, 16, br);
  h.p.window_left = 1;
  h.p.window_right = 0;
  for (int64_t j = 0; j < 6; ++j) h.set_v(0, j, 0, 0, static_cast<float>(j));
  Out out = run_all(h.p);
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(std::log(2.0)).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 0) == doctest::Approx(1.5).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 3, 0, 0) == doctest::Approx(4.5).epsilon(1e-14));
  h.p.mask = tl;
  h.p.window_left = 0;
  h.p.window_right = 1;
  out = run_all(h.p);
  CHECK(out.O(h.p, 0, 3, 0, 0) == doctest::Approx(3.5).epsilon(1e-14));
  // A window beyond the keys (top-left, left 0, right 0, sq > sk): rows past the keys see nothing.
  Host past(DType::f16, 1, 5, 3, 1, 1, 16, 16, tl);
  past.p.window_left = 0;
  past.p.window_right = 0;
  out = run_all(past.p);
  CHECK(out.L(past.p, 0, 2, 0) == 0.0);
  CHECK(out.L(past.p, 0, 3, 0) == -kInf);
  CHECK(out.L(past.p, 0, 4, 0) == -kInf);
}

TEST_CASE("ALiBi: the same as an explicit f32 bias of -f32(slope * |i + off - j|), off the mask's alignment") {
  std::mt19937_64 rng(77);
  const int64_t B = 2, Hq = 4, Hkv = 2;
  struct C {
    MaskKind mask;
    int64_t sq, sk;
  };
  for (const C c : {C{MaskKind::none, 5, 9}, C{MaskKind::none, 9, 5}, C{MaskKind::causal_top_left, 7, 10},
                    C{MaskKind::causal_bottom_right, 7, 10}, C{MaskKind::window_top_left, 8, 8},
                    C{MaskKind::window_bottom_right, 6, 11}}) {
    for (const int64_t stride : {int64_t{0}, Hq}) {
      CAPTURE(to_string(c.mask));
      CAPTURE(c.sq);
      CAPTURE(c.sk);
      CAPTURE(stride);
      std::vector<float> slopes(static_cast<size_t>(B * Hq));
      for (size_t x = 0; x < slopes.size(); ++x) slopes[x] = std::ldexp(1.0f, -static_cast<int>(x % 5) - 1) * 1.3f;
      Host a(DType::bf16, B, c.sq, c.sk, Hq, Hkv, 16, 16, c.mask);
      a.fill_random(rng);
      a.p.softmax_scale = 0.7f;
      a.p.alibi_slopes = slopes.data();
      a.p.alibi_stride_batch = stride;
      if (c.mask == MaskKind::window_top_left || c.mask == MaskKind::window_bottom_right) {
        a.p.window_left = 3;
        a.p.window_right = 1;
      }
      Host e(DType::bf16, B, c.sq, c.sk, Hq, Hkv, 16, 16, c.mask, BiasKind::f32);
      e.q = a.q;
      e.k = a.k;
      e.v = a.v;
      e.p.softmax_scale = 0.7f;
      e.p.window_left = a.p.window_left;
      e.p.window_right = a.p.window_right;
      // off: 0 for the top-left masks, seqlen_k - seqlen_q for the others (mask none included).
      const bool top_left = c.mask == MaskKind::causal_top_left || c.mask == MaskKind::window_top_left;
      const int64_t off = top_left ? 0 : c.sk - c.sq;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t hh = 0; hh < Hq; ++hh)
          for (int64_t i = 0; i < c.sq; ++i)
            for (int64_t j = 0; j < c.sk; ++j) {
              const float slope = slopes[static_cast<size_t>(b * stride + hh)];
              const float d = static_cast<float>(std::abs(i + off - j));
              e.set_bias(b, hh, i, j, -static_cast<float>(static_cast<double>(slope) * d));
            }
      const Out x = run_all(a.p), y = run_all(e.p);
      CHECK(x.o == y.o);
      CHECK(x.lse == y.lse);
    }
  }
  // By hand: q = 0, sq 1, sk 3, slope 0.5. Mask none aligns bottom-right (off 2):
  // distances 2, 1, 0, S = [-1, -0.5, 0]. causaltl (off 0): only key 0, distance 0.
  float slope = 0.5f;
  Host h(DType::f16, 1, 1, 3, 1, 1, 16, 16, MaskKind::none);
  h.p.alibi_slopes = &slope;
  for (int64_t j = 0; j < 3; ++j) h.set_v(0, j, 0, static_cast<int>(j), 1.0f);
  Out out = run_all(h.p);
  const double sum = std::exp(-1.0) + std::exp(-0.5) + 1.0;
  CHECK(out.L(h.p, 0, 0, 0) == doctest::Approx(std::log(sum)).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 0) == doctest::Approx(std::exp(-1.0) / sum).epsilon(1e-14));
  CHECK(out.O(h.p, 0, 0, 0, 2) == doctest::Approx(1.0 / sum).epsilon(1e-14));
  h.p.mask = MaskKind::causal_top_left;
  out = run_all(h.p);
  CHECK(out.L(h.p, 0, 0, 0) == 0.0);
  CHECK(out.O(h.p, 0, 0, 0, 0) == 1.0);
  // In fp32 and after the bias: key 0 (distance 2, slope 0.5) has Qs.K = 1 and bias
  // 2^-24, so S = f32(f32(1 + 2^-24) - 1) = 0 (1 + 2^-24 rounds to 1), not 2^-24;
  // keys 1 and 2 are masked by the bias, so LSE = S of key 0.
  Host r(DType::f16, 1, 1, 3, 1, 1, 16, 16, MaskKind::none, BiasKind::f32);
  r.set_q(0, 0, 0, 0, 1.0f);
  r.set_k(0, 0, 0, 0, 1.0f);
  r.set_bias(0, 0, 0, 0, 0x1p-24f);
  r.set_bias(0, 0, 0, 1, -std::numeric_limits<float>::infinity());
  r.set_bias(0, 0, 0, 2, -std::numeric_limits<float>::infinity());
  r.p.alibi_slopes = &slope;
  out = run_all(r.p);
  CHECK(out.L(r.p, 0, 0, 0) == 0.0);
  // A NaN or infinite slope makes the rows of its head affected (not bounded).
  Host n(DType::f16, 1, 2, 3, 2, 1, 16, 16, MaskKind::none);
  std::vector<float> bad = {0.25f, std::numeric_limits<float>::quiet_NaN()};
  n.p.alibi_slopes = bad.data();
  std::vector<ref::RowId> rows = {{0, 0, 0}, {0, 1, 1}};
  std::vector<double> o(2 * 16), l(2);
  ref::RowBounds bounds;
  ref::forward_rows(n.p, rows, o.data(), l.data(), 1, &bounds);
  CHECK(bounds.affected[0] == 0);
  CHECK(bounds.affected[1] == 1);
  bad[1] = std::numeric_limits<float>::infinity();
  ref::forward_rows(n.p, rows, o.data(), l.data(), 1, &bounds);
  CHECK(bounds.affected[1] == 1);
}

TEST_CASE("sinks: join the denominator; LSE = logaddexp(LSE without, sink); no key: O = 0, LSE = sink") {
  std::mt19937_64 rng(5);
  for (MaskKind m : {MaskKind::none, MaskKind::causal_bottom_right, MaskKind::window_top_left}) {
    CAPTURE(to_string(m));
    const int64_t B = 2, Sq = 7, Sk = 5, Hq = 4, Hkv = 2, Dv = 16;
    Host h(DType::f16, B, Sq, Sk, Hq, Hkv, 16, Dv, m, BiasKind::input);
    h.fill_random(rng);
    if (m == MaskKind::window_top_left) h.p.window_left = h.p.window_right = 1;  // rows 6.. see nothing
    const Out plain = run_all(h.p);
    std::vector<float> sinks = {0.5f, -3.0f, 40.0f, -std::numeric_limits<float>::infinity()};
    h.p.sinks = sinks.data();
    const Out with = run_all(h.p);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t hh = 0; hh < Hq; ++hh) {
          CAPTURE(b);
          CAPTURE(i);
          CAPTURE(hh);
          const double sink = sinks[static_cast<size_t>(hh)];
          const double l0 = plain.L(h.p, b, i, hh);
          const double l1 = with.L(h.p, b, i, hh);
          if (l0 == -kInf) {  // sees no key: O = 0, LSE = the sink
            CHECK(l1 == sink);
            for (int64_t d = 0; d < Dv; ++d) CHECK(with.O(h.p, b, i, hh, d) == 0.0);
            continue;
          }
          if (sink == -kInf) {  // takes no weight
            CHECK(l1 == l0);
            for (int64_t d = 0; d < Dv; ++d) CHECK(with.O(h.p, b, i, hh, d) == plain.O(h.p, b, i, hh, d));
            continue;
          }
          const double hi = std::max(l0, sink);
          const double logaddexp = hi + std::log(std::exp(l0 - hi) + std::exp(sink - hi));
          CHECK(l1 == doctest::Approx(logaddexp).epsilon(1e-13));
          // O shrinks by the keys' share of the sum: exp(LSE without - LSE with).
          const double share = std::exp(l0 - l1);
          for (int64_t d = 0; d < Dv; ++d)
            CHECK(with.O(h.p, b, i, hh, d) ==
                  doctest::Approx(plain.O(h.p, b, i, hh, d) * share).epsilon(1e-12).scale(1e-300));
        }
  }
  // seqlen_k = 0: every row gets O = 0 and LSE = its head's sink.
  Host e(DType::bf16, 1, 3, 0, 2, 1, 16, 16, MaskKind::none);
  e.p.k.data = e.p.v.data = nullptr;
  std::vector<float> sinks = {1.25f, -7.0f};
  e.p.sinks = sinks.data();
  const Out out = run_all(e.p);
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(out.L(e.p, 0, i, 0) == 1.25);
    CHECK(out.L(e.p, 0, i, 1) == -7.0);
  }
  for (double x : out.o) CHECK(x == 0.0);
  // By hand: one key with S = 0 and V = 1, sink ln 3: P = 1/4, LSE = ln 4.
  Host one(DType::f16, 1, 1, 1, 1, 1, 16, 16, MaskKind::none);
  one.set_v(0, 0, 0, 0, 1.0f);
  float ln3 = static_cast<float>(std::log(3.0));
  one.p.sinks = &ln3;
  std::vector<ref::RowId> rows = {{0, 0, 0}};
  std::vector<double> o(16), l(1);
  ref::RowBounds bounds;
  ref::forward_rows(one.p, rows, o.data(), l.data(), 1, &bounds);
  const double s3 = static_cast<double>(ln3);
  CHECK(l[0] == doctest::Approx(std::log(1.0 + std::exp(s3))).epsilon(1e-14));
  CHECK(o[0] == doctest::Approx(1.0 / (1.0 + std::exp(s3))).epsilon(1e-14));
  CHECK(bounds.row_max[0] == s3);  // the sink is the row's largest logit
  CHECK(bounds.affected[0] == 0);
  CHECK(std::isfinite(bounds.lse_err[0]));
  // A NaN or +inf sink makes the row affected, also a row that sees no key.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    one.p.sinks = &bad;
    ref::forward_rows(one.p, rows, o.data(), l.data(), 1, &bounds);
    CHECK(bounds.affected[0] == 1);
    CHECK(bounds.lse_err[0] == kInf);
    Host none(DType::f16, 1, 1, 0, 1, 1, 16, 16, MaskKind::none);
    none.p.sinks = &bad;
    ref::forward_rows(none.p, rows, o.data(), l.data(), 1, &bounds);
    CHECK(bounds.affected[0] == 1);
  }
}

TEST_CASE("sinks: the error bound counts the sink as a key with V = 0") {
  // Random rows: the bound with a sink is at least the bound without, scaled by the keys' share,
  // and the sink adds |O| * (its weight's possible movement).
  std::mt19937_64 rng(11);
  Host h(DType::bf16, 1, 4, 6, 2, 2, 32, 16, MaskKind::none);
  h.fill_random(rng);
  std::vector<ref::RowId> rows;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t hh = 0; hh < 2; ++hh) rows.push_back({0, i, hh});
  std::vector<double> o(rows.size() * 16), l(rows.size());
  ref::RowBounds plain, with;
  ref::forward_rows(h.p, rows, o.data(), l.data(), 1, &plain);
  std::vector<float> sinks = {0.0f, 2.0f};
  h.p.sinks = sinks.data();
  ref::forward_rows(h.p, rows, o.data(), l.data(), 1, &with);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    CHECK(with.affected[r] == 0);
    CHECK(with.lse_err[r] >= plain.lse_err[r] - 1e-300);
    bool positive = false;
    for (size_t d = 0; d < 16; ++d) positive = positive || with.o_err[r * 16 + d] > 0.0;
    CHECK(positive);
  }
}

TEST_CASE("invalid shapes and rows are refused") {
  Host h(DType::f16, 1, 2, 2, 6, 4, 16, 16, MaskKind::none);
  std::vector<double> o, lse;
  CHECK_THROWS_AS(ref::forward_all(h.p, o, lse), flashgen::InvalidArgument);
  Host g(DType::f16, 1, 2, 2, 2, 2, 16, 16, MaskKind::none);
  std::vector<ref::RowId> rows = {{0, 2, 0}};
  std::vector<double> o1(16), l1(1);
  CHECK_THROWS_AS(ref::forward_rows(g.p, rows, o1.data(), l1.data()), flashgen::InvalidArgument);
}

// ------------------------- packed (varlen) batches --------------------------

// A packed batch built by hand: sequence b owns query rows q_begin[b] .. of
// [total_q, Hq, D] Q (cu_seqlens_q[0] > 0, rows left over after the last
// sequence) and keys cu_seqlens_k[b] .. of [total_k, Hkv, D] K and V (a padded
// head stride), of which the first used[b] count. Every Q, K, V element that no
// sequence reads (rows before, between and after the sequences, keys past
// seqused_k) is NaN, so a reference that reads one makes rows NaN / affected.
// The bias is [B, Hq, max_sq, max_sk] in per-sequence positions, NaN outside each
// sequence's own [seqlen_q, seqlen_k] corner.
struct Packed {
  AttentionProblem p;
  std::vector<int32_t> cu_q, cu_k, used;
  std::vector<uint16_t> q, k, v;
  std::vector<float> bias, sinks, slopes;
  int64_t D, Dv, Hq, Hkv;

  Packed(DType dt, MaskKind mask, const std::vector<int32_t>& q_lens, const std::vector<int32_t>& k_lens,
         const std::vector<int32_t>& used_k, int64_t hq, int64_t hkv, int64_t d, int64_t dv, std::mt19937_64& rng,
         bool with_bias, bool with_sinks, bool with_alibi)
      : D(d), Dv(dv), Hq(hq), Hkv(hkv) {
    const int64_t B = static_cast<int64_t>(q_lens.size());
    const uint16_t nan16 = ref::to_dtype(dt, std::numeric_limits<float>::quiet_NaN());
    cu_q = {3};  // three rows before the first sequence
    cu_k = {2};  // two keys before the first sequence
    for (int64_t b = 0; b < B; ++b) {
      cu_q.push_back(cu_q.back() + q_lens[static_cast<size_t>(b)]);
      cu_k.push_back(cu_k.back() + k_lens[static_cast<size_t>(b)]);
    }
    used = used_k;
    const int64_t total_q = cu_q.back() + 4, total_k = cu_k.back() + 3;  // rows left after the last sequence
    const int64_t q_sh = D + 8, q_ss = Hq * q_sh;                          // padded heads
    const int64_t k_ss = Hkv * D, v_ss = Hkv * Dv;
    q.assign(static_cast<size_t>(total_q * q_ss), nan16);
    k.assign(static_cast<size_t>(total_k * k_ss), nan16);
    v.assign(static_cast<size_t>(total_k * v_ss), nan16);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t max_sq = 0, max_sk = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t keys = used.empty() ? k_lens[static_cast<size_t>(b)] : used[static_cast<size_t>(b)];
      max_sq = std::max<int64_t>(max_sq, q_lens[static_cast<size_t>(b)]);
      max_sk = std::max<int64_t>(max_sk, keys);
      for (int64_t i = cu_q[b]; i < cu_q[b + 1]; ++i)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t e = 0; e < D; ++e) q[static_cast<size_t>(i * q_ss + h * q_sh + e)] = ref::to_dtype(dt, u(rng));
      for (int64_t j = cu_k[b]; j < cu_k[b] + keys; ++j)
        for (int64_t h = 0; h < Hkv; ++h) {
          for (int64_t e = 0; e < D; ++e) k[static_cast<size_t>(j * k_ss + h * D + e)] = ref::to_dtype(dt, u(rng));
          for (int64_t e = 0; e < Dv; ++e) v[static_cast<size_t>(j * v_ss + h * Dv + e)] = ref::to_dtype(dt, u(rng));
        }
    }
    p.dtype = dt;
    p.batch = B;
    p.seqlen_q = max_sq;
    p.seqlen_k = max_sk;
    p.heads_q = Hq;
    p.heads_kv = Hkv;
    p.head_dim = D;
    p.head_dim_v = Dv;
    p.mask = mask;
    p.softmax_scale = 0.3f;
    if (mask == MaskKind::window_top_left || mask == MaskKind::window_bottom_right) {
      p.window_left = 2;
      p.window_right = 1;
    }
    p.q = {q.data(), 0, q_ss, q_sh};
    p.k = {k.data(), 0, k_ss, D};
    p.v = {v.data(), 0, v_ss, Dv};
    p.o = {nullptr, 0, Hq * Dv, Dv};
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_k = cu_k.data();
    p.seqused_k = used.empty() ? nullptr : used.data();
    p.total_q = total_q;
    p.total_k = total_k;
    if (with_bias) {
      const int64_t sk = max_sk + 1, sq = max_sq + 2;  // padded bias rows / heads
      bias.assign(static_cast<size_t>(B * Hq * sq * sk), std::numeric_limits<float>::quiet_NaN());
      for (int64_t b = 0; b < B; ++b) {
        const int64_t keys = used.empty() ? k_lens[static_cast<size_t>(b)] : used[static_cast<size_t>(b)];
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < q_lens[static_cast<size_t>(b)]; ++i)
            for (int64_t j = 0; j < keys; ++j) bias[static_cast<size_t>(((b * Hq + h) * sq + i) * sk + j)] = 2.0f * u(rng);
      }
      p.bias = {BiasKind::f32, bias.data(), Hq * sq * sk, sq * sk, sk, 1};
    }
    if (with_sinks) {
      for (int64_t h = 0; h < Hq; ++h) sinks.push_back(u(rng) + 0.5f);
      p.sinks = sinks.data();
    }
    if (with_alibi) {
      for (int64_t x = 0; x < B * Hq; ++x) slopes.push_back(0.25f + 0.5f * std::fabs(u(rng)));
      p.alibi_slopes = slopes.data();
      p.alibi_stride_batch = Hq;
    }
  }
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;
};

// Sequence b of `pk` copied into its own contiguous dense problem (batch 1), by
// hand: the reference's packed path must give bit-identical rows.
struct DenseCopy {
  std::unique_ptr<Host> h;
  std::vector<float> slope;
  DenseCopy(const Packed& pk, int64_t b, int64_t sq, int64_t sk) {
    const AttentionProblem& p = pk.p;
    h = std::make_unique<Host>(p.dtype, 1, sq, sk, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v, p.mask,
                               p.bias.kind);
    h->p.softmax_scale = p.softmax_scale;
    h->p.window_left = p.window_left;
    h->p.window_right = p.window_right;
    h->p.sinks = p.sinks;
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t hh = 0; hh < p.heads_q; ++hh)
        for (int64_t e = 0; e < p.head_dim; ++e)
          h->q[static_cast<size_t>((i * p.heads_q + hh) * p.head_dim + e)] =
              pk.q[static_cast<size_t>((pk.cu_q[b] + i) * p.q.stride_seq + hh * p.q.stride_head + e)];
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t hh = 0; hh < p.heads_kv; ++hh) {
        for (int64_t e = 0; e < p.head_dim; ++e)
          h->k[static_cast<size_t>((j * p.heads_kv + hh) * p.head_dim + e)] =
              pk.k[static_cast<size_t>((pk.cu_k[b] + j) * p.k.stride_seq + hh * p.k.stride_head + e)];
        for (int64_t e = 0; e < p.head_dim_v; ++e)
          h->v[static_cast<size_t>((j * p.heads_kv + hh) * p.head_dim_v + e)] =
              pk.v[static_cast<size_t>((pk.cu_k[b] + j) * p.v.stride_seq + hh * p.v.stride_head + e)];
      }
    if (p.bias.kind == BiasKind::f32)
      for (int64_t hh = 0; hh < p.heads_q; ++hh)
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t j = 0; j < sk; ++j)
            h->set_bias(0, hh, i, j,
                        pk.bias[static_cast<size_t>(b * p.bias.stride_batch + hh * p.bias.stride_head +
                                                    i * p.bias.stride_q + j)]);
    if (p.alibi_slopes != nullptr) {
      for (int64_t hh = 0; hh < p.heads_q; ++hh) slope.push_back(p.alibi_slopes[b * p.alibi_stride_batch + hh]);
      h->p.alibi_slopes = slope.data();
    }
  }
};

// Every packed row of forward_all against the dense reference of its
// sequence's hand-made copy, bit for bit; rows no sequence owns are NaN.
// Returns the number of rows compared.
int64_t check_packed_against_dense(const Packed& pk, int threads) {
  const AttentionProblem& p = pk.p;
  std::vector<double> o, lse;
  ref::forward_all(p, o, lse, threads);
  REQUIRE(o.size() == static_cast<size_t>(p.total_q * p.heads_q * p.head_dim_v));
  REQUIRE(lse.size() == static_cast<size_t>(p.heads_q * p.total_q));
  std::vector<char> owned(static_cast<size_t>(p.total_q), 0);
  int64_t compared = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    CAPTURE(b);
    const int64_t keys = pk.used.empty() ? pk.cu_k[b + 1] - pk.cu_k[b] : pk.used[static_cast<size_t>(b)];
    const int64_t sq = std::min<int64_t>(pk.cu_q[b + 1] - pk.cu_q[b], p.seqlen_q);
    const int64_t sk = std::min<int64_t>(keys, p.seqlen_k);
    const ref::Sequence seq = ref::sequence(p, b);
    CHECK(seq.q_begin == pk.cu_q[b]);
    CHECK(seq.k_begin == pk.cu_k[b]);
    CHECK(seq.seqlen_q == sq);
    CHECK(seq.seqlen_k == sk);
    DenseCopy dc(pk, b, sq, sk);
    const Out dense = run_all(dc.h->p, 1);
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t row = pk.cu_q[b] + i;
      owned[static_cast<size_t>(row)] = 1;
      for (int64_t h = 0; h < p.heads_q; ++h) {
        CAPTURE(i);
        CAPTURE(h);
        const double want_lse = dense.L(dc.h->p, 0, i, h);
        CHECK(!std::isnan(want_lse));
        CHECK(lse[static_cast<size_t>(h * p.total_q + row)] == want_lse);
        bool same = true;
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const double got = o[static_cast<size_t>((row * p.heads_q + h) * p.head_dim_v + d)];
          same = same && got == dense.O(dc.h->p, 0, i, h, d) && std::isfinite(got);
        }
        CHECK(same);
        ++compared;
      }
    }
  }
  for (int64_t row = 0; row < p.total_q; ++row) {
    if (owned[static_cast<size_t>(row)]) continue;
    CAPTURE(row);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      CHECK(std::isnan(lse[static_cast<size_t>(h * p.total_q + row)]));
      CHECK(std::isnan(o[static_cast<size_t>((row * p.heads_q + h) * p.head_dim_v)]));
    }
  }
  return compared;
}

TEST_CASE("reference, varlen: every packed row equals the dense reference of its sequence (masks, seqused_k, empty sequences)") {
  std::mt19937_64 rng(2718);
  // Sequence 1 is empty, sequence 2 has rows but no key (O = 0, LSE = -inf or
  // the sink), sequences 0, 3 and 5 use fewer keys than they own (seqused_k), 4
  // has fewer keys than rows (bottom-right rows without keys).
  const std::vector<int32_t> q_lens = {3, 0, 4, 2, 6, 5}, k_lens = {7, 4, 0, 9, 3, 8}, used = {4, 2, 0, 5, 3, 6};
  for (MaskKind m : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right,
                     MaskKind::window_top_left, MaskKind::window_bottom_right}) {
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(to_string(m));
      CAPTURE(variant);
      const DType dt = variant == 1 ? DType::bf16 : DType::f16;
      Packed pk(dt, m, q_lens, k_lens, variant == 2 ? std::vector<int32_t>{} : used, 4, 2, 16, 24, rng,
                /*bias*/ variant == 1, /*sinks*/ variant != 0, /*alibi*/ variant == 1);
      const int64_t compared = check_packed_against_dense(pk, variant + 1);
      CHECK(compared == (3 + 4 + 2 + 6 + 5) * 4);
      // The sequence without keys: O = 0, LSE = -inf (the sink with sinks).
      std::vector<double> o, lse;
      ref::forward_all(pk.p, o, lse);
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t h = 0; h < 4; ++h) {
          const int64_t row = pk.cu_q[2] + i;
          CHECK(lse[static_cast<size_t>(h * pk.p.total_q + row)] ==
                (pk.p.sinks != nullptr ? static_cast<double>(pk.sinks[static_cast<size_t>(h)]) : -kInf));
          for (int64_t d = 0; d < pk.p.head_dim_v; ++d)
            CHECK(o[static_cast<size_t>((row * 4 + h) * pk.p.head_dim_v + d)] == 0.0);
        }
    }
  }
}

TEST_CASE("reference, varlen: per-sequence alignment differs from the batch bound's; seqused_k changes the result") {
  // Not vacuous: with causalbr, a sequence of 2 rows and 5 keys aligns with
  // off = 3 (its own), not with the bounds' off (max_sk - max_sq); and
  // seqused_k = 3 of 5 keys gives other rows than all 5.
  std::mt19937_64 rng(31);
  const std::vector<int32_t> q_lens = {2, 6}, k_lens = {5, 6};
  Packed a(DType::f16, MaskKind::causal_bottom_right, q_lens, k_lens, {}, 2, 1, 16, 16, rng, false, false, false);
  std::vector<double> o, lse;
  ref::forward_all(a.p, o, lse);
  // Row 0 of sequence 0 sees keys 0..3 (off 3): LSE over 4 keys; by hand.
  {
    const int64_t b = 0, i = 0, h = 1;
    double m = -kInf;
    std::vector<double> s;
    for (int64_t j = 0; j <= i + 3; ++j) {
      double acc = 0.0;
      for (int64_t e = 0; e < 16; ++e) {
        const float qf = ref::from_dtype(DType::f16, a.q[static_cast<size_t>((a.cu_q[b] + i) * a.p.q.stride_seq + h * a.p.q.stride_head + e)]);
        const double qs = ref::from_dtype(DType::f16, ref::to_dtype(DType::f16, qf * 0.3f));
        acc += qs * ref::from_dtype(DType::f16, a.k[static_cast<size_t>((a.cu_k[b] + j) * a.p.k.stride_seq + e)]);
      }
      s.push_back(static_cast<float>(acc));
      m = std::max(m, s.back());
    }
    double sum = 0.0;
    for (double x : s) sum += std::exp(x - m);
    CHECK(lse[static_cast<size_t>(h * a.p.total_q + a.cu_q[b] + i)] == doctest::Approx(m + std::log(sum)).epsilon(1e-12));
  }
  std::vector<int32_t> used = {3, 6};
  a.used = used;
  a.p.seqused_k = a.used.data();
  std::vector<double> o2, lse2;
  ref::forward_all(a.p, o2, lse2);
  CHECK(lse2[static_cast<size_t>(a.cu_q[0])] != lse[static_cast<size_t>(a.cu_q[0])]);
  // (sequence 1 is unchanged: all of its keys are used either way)
  CHECK(lse2[static_cast<size_t>(a.cu_q[1] + 3)] == lse[static_cast<size_t>(a.cu_q[1] + 3)]);
}

TEST_CASE("reference, varlen: bounds cut longer sequences; forward_rows agrees with forward_all, bounds included") {
  std::mt19937_64 rng(404);
  const std::vector<int32_t> q_lens = {5, 1, 0, 7}, k_lens = {9, 2, 3, 4};
  Packed pk(DType::bf16, MaskKind::causal_bottom_right, q_lens, k_lens, {}, 4, 1, 16, 16, rng, false, true, false);
  pk.p.seqlen_q = 4;  // sequences 0 and 3 are cut to 4 rows, sequence 0 to 6 keys
  pk.p.seqlen_k = 6;
  CHECK(check_packed_against_dense(pk, 2) == (4 + 1 + 0 + 4) * 4);
  std::vector<double> o, lse;
  ref::forward_all(pk.p, o, lse);
  for (int64_t i = 4; i < 7; ++i) CHECK(std::isnan(lse[static_cast<size_t>(pk.cu_q[3] + i)]));  // past the bound

  std::vector<ref::RowId> rows = {{3, 3, 2}, {0, 0, 0}, {1, 0, 3}, {0, 3, 1}, {3, 0, 0}};
  std::vector<double> ro(rows.size() * 16), rl(rows.size());
  ref::RowBounds bounds;
  ref::forward_rows(pk.p, rows, ro.data(), rl.data(), 3, &bounds);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    const int64_t row = pk.cu_q[rows[r].b] + rows[r].i;
    CHECK(rl[r] == lse[static_cast<size_t>(rows[r].h * pk.p.total_q + row)]);
    for (int64_t d = 0; d < 16; ++d)
      CHECK(ro[r * 16 + static_cast<size_t>(d)] == o[static_cast<size_t>((row * 4 + rows[r].h) * 16 + d)]);
    CHECK(bounds.affected[r] == 0);  // the NaN around the sequences is never read
    CHECK(std::isfinite(bounds.lse_err[r]));
  }
  // The bounds are those of the dense copy's row.
  DenseCopy dc(pk, 3, 4, 4);
  std::vector<ref::RowId> drow = {{0, 3, 2}};
  std::vector<double> d_o(16), d_l(1);
  ref::RowBounds dense_bounds;
  ref::forward_rows(dc.h->p, drow, d_o.data(), d_l.data(), 1, &dense_bounds);
  CHECK(bounds.lse_err[0] == dense_bounds.lse_err[0]);
  CHECK(bounds.row_max[0] == dense_bounds.row_max[0]);
  for (size_t d = 0; d < 16; ++d) CHECK(bounds.o_err[d] == dense_bounds.o_err[d]);
  // sequence_problem: the dense view of sequence 3.
  const AttentionProblem sp = ref::sequence_problem(pk.p, 3);
  CHECK(sp.batch == 1);
  CHECK(sp.seqlen_q == 4);
  CHECK(sp.seqlen_k == 4);
  CHECK(!sp.varlen());
  CHECK(sp.q.data == pk.q.data() + pk.cu_q[3] * pk.p.q.stride_seq);
  CHECK(sp.k.data == pk.k.data() + pk.cu_k[3] * pk.p.k.stride_seq);
}

TEST_CASE("reference, varlen: bad offsets and rows outside a sequence are refused") {
  std::mt19937_64 rng(1);
  const std::vector<int32_t> q_lens = {2, 0, 3}, k_lens = {3, 1, 2};
  Packed pk(DType::f16, MaskKind::none, q_lens, k_lens, {3, 1, 1}, 2, 2, 16, 16, rng, false, false, false);
  std::vector<double> o(16), l(1);
  std::vector<ref::RowId> rows = {{1, 0, 0}};  // sequence 1 has no rows
  CHECK_THROWS_AS(ref::forward_rows(pk.p, rows, o.data(), l.data()), flashgen::InvalidArgument);
  rows = {{2, 3, 0}};
  CHECK_THROWS_AS(ref::forward_rows(pk.p, rows, o.data(), l.data()), flashgen::InvalidArgument);
  rows = {{3, 0, 0}};
  CHECK_THROWS_AS(ref::forward_rows(pk.p, rows, o.data(), l.data()), flashgen::InvalidArgument);
  rows = {{2, 2, 1}};
  CHECK_NOTHROW(ref::forward_rows(pk.p, rows, o.data(), l.data()));
  std::vector<double> oa, la;
  pk.used[1] = 2;  // more than sequence 1's keys
  CHECK_THROWS_AS(ref::forward_all(pk.p, oa, la), flashgen::InvalidArgument);
  pk.used[1] = 1;
  pk.cu_q[2] = 1;  // decreasing
  CHECK_THROWS_AS(ref::forward_all(pk.p, oa, la), flashgen::InvalidArgument);
  pk.cu_q[2] = pk.cu_q[1];
  pk.p.total_q = pk.cu_q.back() - 1;  // the last sequence past total_q
  CHECK_THROWS_AS(ref::forward_all(pk.p, oa, la), flashgen::InvalidArgument);
  pk.p.total_q = pk.cu_q.back();
  pk.p.total_k = pk.cu_k.back() - 1;
  CHECK_THROWS_AS(ref::forward_all(pk.p, oa, la), flashgen::InvalidArgument);
  pk.p.total_k = pk.cu_k.back();
  CHECK_NOTHROW(ref::forward_all(pk.p, oa, la));
  pk.p.cu_seqlens_k = nullptr;
  CHECK_THROWS_AS(ref::forward_all(pk.p, oa, la), flashgen::InvalidArgument);
}

// ---------------------------------------------------------------------------
// Paged KV caches: the keys of a Packed copied into pages.
// ---------------------------------------------------------------------------

bool same_or_both_nan(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// A paged copy of pk's keys: pages of `ps` keys with padded slot and page strides,
// page ids a random permutation, sequences 0 and 1 sharing their first `shared` pages
// (sequence 1's first shared * ps keys made equal to sequence 0's in pk first), NaN in
// every slot no sequence uses (the unused tail of each sequence's last page, spare
// pages), and every table entry past a sequence's pages pointing at a page full of NaN.
// problem(): pk.p with its keys through the pages and seqused_k set (dense Q with
// dense_q: [batch, seqlen_q, heads_q, head_dim] copied from pk's packed rows).
struct PagedKV {
  std::vector<uint16_t> k, v, dq;
  std::vector<int32_t> table, used;
  int64_t ps = 1, num_pages = 0, stride = 0, k_ss = 0, v_ss = 0, k_sp = 0, v_sp = 0, nan_page = 0;
  int64_t tail_nan_slots = 0;  // slots past the used keys in sequences' last pages

  PagedKV(Packed& pk, int64_t page_size, int64_t shared, std::mt19937_64& rng) : ps(page_size) {
    const AttentionProblem& p = pk.p;
    const int64_t B = p.batch, Hkv = pk.Hkv, D = pk.D, Dv = pk.Dv;
    const uint16_t nan16 = ref::to_dtype(p.dtype, std::numeric_limits<float>::quiet_NaN());
    for (int64_t b = 0; b < B; ++b)
      used.push_back(pk.used.empty() ? pk.cu_k[b + 1] - pk.cu_k[b] : pk.used[static_cast<size_t>(b)]);
    const int64_t pk_kss = p.k.stride_seq, pk_vss = p.v.stride_seq;
    if (shared > 0) {
      REQUIRE(B >= 2);
      REQUIRE(used[0] >= shared * ps);
      REQUIRE(used[1] >= shared * ps);
      for (int64_t j = 0; j < shared * ps; ++j) {
        std::copy_n(pk.k.begin() + (pk.cu_k[0] + j) * pk_kss, Hkv * D, pk.k.begin() + (pk.cu_k[1] + j) * pk_kss);
        std::copy_n(pk.v.begin() + (pk.cu_k[0] + j) * pk_vss, Hkv * Dv, pk.v.begin() + (pk.cu_k[1] + j) * pk_vss);
      }
    }
    auto pages_of = [&](int64_t b) { return (used[static_cast<size_t>(b)] + ps - 1) / ps; };
    int64_t own = 0;
    for (int64_t b = 0; b < B; ++b) own += pages_of(b) - (b == 1 ? shared : 0);
    num_pages = own + 3;  // three spare pages, all NaN; one of them pads the table
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    for (int64_t n = 0; n < num_pages; ++n) perm[static_cast<size_t>(n)] = static_cast<int32_t>(n);
    std::shuffle(perm.begin(), perm.end(), rng);
    nan_page = perm.back();
    stride = (p.seqlen_k + ps - 1) / ps + 2;
    table.assign(static_cast<size_t>(B * stride), static_cast<int32_t>(nan_page));
    size_t next = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < pages_of(b); ++n)
        table[static_cast<size_t>(b * stride + n)] =
            b == 1 && n < shared ? table[static_cast<size_t>(n)] : perm[next++];
    k_ss = Hkv * D + 8;
    v_ss = Hkv * Dv + 8;
    k_sp = ps * k_ss + 8;
    v_sp = ps * v_ss + 16;
    k.assign(static_cast<size_t>(num_pages * k_sp), nan16);
    v.assign(static_cast<size_t>(num_pages * v_sp), nan16);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < used[static_cast<size_t>(b)]; ++j) {
        const int64_t page = table[static_cast<size_t>(b * stride + j / ps)], slot = j % ps;
        std::copy_n(pk.k.begin() + (pk.cu_k[b] + j) * pk_kss, Hkv * D, k.begin() + page * k_sp + slot * k_ss);
        std::copy_n(pk.v.begin() + (pk.cu_k[b] + j) * pk_vss, Hkv * Dv, v.begin() + page * v_sp + slot * v_ss);
      }
      tail_nan_slots += pages_of(b) * ps - used[static_cast<size_t>(b)];
    }
  }

  AttentionProblem problem(const Packed& pk, bool dense_q) {
    AttentionProblem p = pk.p;
    p.cu_seqlens_k = nullptr;
    p.total_k = 0;
    p.seqused_k = used.data();
    p.k = {k.data(), k_sp, k_ss, pk.D};
    p.v = {v.data(), v_sp, v_ss, pk.Dv};
    p.page_table = table.data();
    p.page_table_stride = stride;
    p.page_size = ps;
    p.num_pages = num_pages;
    if (dense_q) {
      // [batch, seqlen_q, heads_q, D], batch stride padded with NaN.
      const int64_t Sq = p.seqlen_q, Hq = pk.Hq, D = pk.D, sb = Sq * Hq * D + 8;
      dq.assign(static_cast<size_t>(p.batch * sb), ref::to_dtype(p.dtype, std::numeric_limits<float>::quiet_NaN()));
      for (int64_t b = 0; b < p.batch; ++b) {
        REQUIRE(pk.cu_q[b + 1] - pk.cu_q[b] == Sq);
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t h = 0; h < Hq; ++h)
            std::copy_n(pk.q.begin() + (pk.cu_q[b] + i) * pk.p.q.stride_seq + h * pk.p.q.stride_head, D,
                        dq.begin() + b * sb + (i * Hq + h) * D);
      }
      p.cu_seqlens_q = nullptr;
      p.total_q = 0;
      p.q = {dq.data(), sb, Hq * D, D};
      p.o = {nullptr, Sq * Hq * pk.Dv, Hq * pk.Dv, pk.Dv};
    }
    return p;
  }
};

TEST_CASE("reference, paged: packed Q over pages equals the contiguous packed cache (shuffled / shared pages, page sizes 1, 4, 16)") {
  std::mt19937_64 rng(4242);
  // Sequence 2 has keys but no rows, 3 rows but no key; keys end inside pages for
  // page size 4 (9, 7, 3, 11) and 16; sequences 0 and 1 share a prefix.
  const std::vector<int32_t> q_lens = {3, 2, 0, 4, 6, 5}, k_lens = {9, 10, 4, 0, 3, 13}, used = {9, 7, 4, 0, 3, 11};
  for (const int64_t ps : {int64_t{1}, int64_t{4}, int64_t{16}}) {
    for (MaskKind m : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right,
                       MaskKind::window_top_left, MaskKind::window_bottom_right}) {
      for (int variant = 0; variant < 2; ++variant) {
        CAPTURE(ps);
        CAPTURE(to_string(m));
        CAPTURE(variant);
        const DType dt = variant == 1 ? DType::bf16 : DType::f16;
        Packed pk(dt, m, q_lens, k_lens, used, 4, 2, 16, 24, rng, /*bias*/ variant == 1, /*sinks*/ variant == 1,
                  /*alibi*/ variant == 1);
        const int64_t shared = ps == 1 ? 5 : ps == 4 ? 1 : 0;
        PagedKV pg(pk, ps, shared, rng);  // (makes sequence 1's prefix sequence 0's first)
        if (ps > 1) CHECK(pg.tail_nan_slots > 0);
        const AttentionProblem paged = pg.problem(pk, false);
        std::vector<double> o_want, l_want, o_got, l_got;
        ref::forward_all(pk.p, o_want, l_want, 2);
        ref::forward_all(paged, o_got, l_got, 3);
        REQUIRE(o_got.size() == o_want.size());
        REQUIRE(l_got.size() == l_want.size());
        int64_t diff = 0, finite = 0;
        for (size_t e = 0; e < o_want.size(); ++e) {
          diff += same_or_both_nan(o_got[e], o_want[e]) ? 0 : 1;
          finite += std::isfinite(o_got[e]) ? 1 : 0;
        }
        for (size_t e = 0; e < l_want.size(); ++e) diff += same_or_both_nan(l_got[e], l_want[e]) ? 0 : 1;
        CHECK(diff == 0);
        CHECK(finite == (3 + 2 + 4 + 6 + 5) * 4 * 24);  // every owned row finite: no NaN slot was read
        for (int64_t b = 0; b < paged.batch; ++b) {
          const ref::Sequence s = ref::sequence(paged, b);
          CHECK(s.q_begin == pk.cu_q[b]);
          CHECK(s.k_begin == 0);
          CHECK(s.seqlen_k == used[static_cast<size_t>(b)]);
        }
        // forward_rows with bounds: no row reads a NaN slot.
        std::vector<ref::RowId> rows;
        for (int64_t b = 0; b < paged.batch; ++b)
          for (int64_t i = 0; i < q_lens[static_cast<size_t>(b)]; ++i) rows.push_back({b, i, 1});
        std::vector<double> o(rows.size() * 24), l(rows.size());
        ref::RowBounds bounds;
        ref::forward_rows(paged, rows, o.data(), l.data(), 2, &bounds);
        CHECK(std::count(bounds.affected.begin(), bounds.affected.end(), 1) == 0);
      }
    }
  }
}

TEST_CASE("reference, paged: dense Q over pages equals each sequence's own dense problem (seqused_k inside a page)") {
  std::mt19937_64 rng(977);
  const int64_t Sq = 5;
  const std::vector<int32_t> q_lens = {5, 5, 5, 5}, k_lens = {9, 12, 2, 6}, used = {9, 11, 0, 3};
  for (const int64_t ps : {int64_t{1}, int64_t{4}}) {
    for (MaskKind m : {MaskKind::none, MaskKind::causal_bottom_right, MaskKind::window_bottom_right,
                       MaskKind::causal_top_left}) {
      for (int variant = 0; variant < 2; ++variant) {
        CAPTURE(ps);
        CAPTURE(to_string(m));
        CAPTURE(variant);
        Packed pk(variant ? DType::bf16 : DType::f16, m, q_lens, k_lens, used, 8, 2, 16, 16, rng, variant == 1,
                  variant == 1, variant == 1);
        PagedKV pg(pk, ps, ps == 1 ? 6 : 2, rng);
        const AttentionProblem paged = pg.problem(pk, true);
        const Out got = run_all(paged, 2);
        REQUIRE(got.o.size() == static_cast<size_t>(4 * Sq * 8 * 16));
        int64_t compared = 0;
        for (int64_t b = 0; b < 4; ++b) {
          CAPTURE(b);
          const int64_t sk = used[static_cast<size_t>(b)];
          const ref::Sequence s = ref::sequence(paged, b);
          CHECK(s.q_begin == 0);
          CHECK(s.seqlen_q == Sq);
          CHECK(s.seqlen_k == sk);
          DenseCopy dc(pk, b, Sq, sk);
          const Out want = run_all(dc.h->p, 1);
          for (int64_t i = 0; i < Sq; ++i)
            for (int64_t h = 0; h < 8; ++h) {
              bool same = got.L(paged, b, i, h) == want.L(dc.h->p, 0, i, h);
              for (int64_t d = 0; d < 16; ++d)
                same = same && got.O(paged, b, i, h, d) == want.O(dc.h->p, 0, i, h, d) &&
                       std::isfinite(got.O(paged, b, i, h, d));
              CHECK(same);
              ++compared;
            }
        }
        CHECK(compared == 4 * Sq * 8);
        // The sequence without keys: O = 0, LSE = -inf (the sink with sinks).
        CHECK(got.L(paged, 2, 0, 0) == (variant == 1 ? static_cast<double>(pk.sinks[0]) : -kInf));
        // sequence_problem needs storage for a paged problem; with it, it is sequence 1's dense problem.
        CHECK_THROWS_AS(ref::sequence_problem(paged, 1), flashgen::InvalidArgument);
        ref::SequenceStorage st;
        const AttentionProblem d1 = ref::sequence_problem(paged, 1, st);
        CHECK(d1.batch == 1);
        CHECK(d1.seqlen_k == 11);
        CHECK(!d1.paged());
        const Out one = run_all(d1, 1);
        CHECK(one.L(d1, 0, 4, 3) == got.L(paged, 1, 4, 3));
      }
    }
  }
}

TEST_CASE("reference, paged: bad tables and key counts are refused; entries past the used keys are not read") {
  std::mt19937_64 rng(5);
  const std::vector<int32_t> q_lens = {2, 3}, k_lens = {5, 6}, used = {5, 6};
  Packed pk(DType::f16, MaskKind::causal_bottom_right, q_lens, k_lens, used, 2, 1, 16, 16, rng, false, false, false);
  PagedKV pg(pk, 4, 0, rng);
  AttentionProblem p = pg.problem(pk, false);
  std::vector<double> o, l;
  CHECK_NOTHROW(ref::forward_all(p, o, l));
  pg.table[static_cast<size_t>(0 * pg.stride + 2)] = -7;  // past sequence 0's two pages: never read
  pg.table[static_cast<size_t>(1 * pg.stride + 3)] = 1 << 30;
  CHECK_NOTHROW(ref::forward_all(p, o, l));
  pg.table[static_cast<size_t>(1 * pg.stride + 1)] = static_cast<int32_t>(pg.num_pages);  // a used page out of range
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  pg.table[static_cast<size_t>(1 * pg.stride + 1)] = -1;
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  pg.table[static_cast<size_t>(1 * pg.stride + 1)] = 0;
  CHECK_NOTHROW(ref::forward_all(p, o, l));
  pg.used[1] = static_cast<int32_t>(p.seqlen_k + 1);  // more keys than the bound
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  pg.used[1] = -1;
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  pg.used[1] = 6;
  p.cu_seqlens_k = pk.cu_k.data();  // cu_seqlens_k with a page table
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  p.cu_seqlens_k = nullptr;
  p.page_size = 0;
  CHECK_THROWS_AS(ref::forward_all(p, o, l), flashgen::InvalidArgument);
  p.page_size = 4;
  CHECK_NOTHROW(ref::forward_all(p, o, l));
  std::vector<ref::RowId> rows = {{2, 0, 0}};  // no sequence 2
  std::vector<double> o1(16), l1(1);
  CHECK_THROWS_AS(ref::forward_rows(p, rows, o1.data(), l1.data()), flashgen::InvalidArgument);
}

}  // TEST_SUITE
