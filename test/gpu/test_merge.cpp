// GPU tier: the merge of attention states (flashgen::merge_states, the
// combine kernel) against the float64 reference (ref::merge_states).
//
// Every case draws fresh random partials (FLASHGEN_TEST_SEED=<n> fixes the
// seed) and checks every element: partials with LSE_s = -inf whose O_s is NaN
// (must be skipped, not read into a result), rows whose partials are all -inf
// (O = 0, LSE = -inf), huge and tiny finite LSEs (around +-1e30, +-1e-30),
// NaN in an LSE_s or in a counted O_s (NaN only in that row), S = 1..16 and
// larger, float32 and f16/bf16 partials, every output dtype, contiguous and
// strided views. Inputs sit in NaN-filled buffers (padding read by mistake
// shows up as NaN); O and LSE are poisoned (0xFF bytes) with poisoned guard
// bands before and after and in every padding gap: every view element must be
// overwritten, every byte outside the views must keep the poison, and the
// inputs must be unchanged.
//
// The last case merges two forward halves: flashgen::forward over K/V keys
// [0, k1) and [k1, seqlen_k) with LSE output, merged with f16 partials, must
// equal the forward over all keys (and a split with an empty half, whose LSE
// is -inf, must equal it too).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "test/gpu/gpu_run.hpp"

namespace {

using flashgen::MergeProblem;
using flashgen::StateDType;
using fgtest::DeviceBuffer;
using fgtest::Stream;
namespace ref = flashgen::ref;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kGuard = 256;  // poisoned bytes before and after each output view (multiple of 16)

enum class Special { none, neg_inf_garbage, all_neg_inf_rows, huge, tiny, nan };

const char* special_name(Special s) {
  switch (s) {
    case Special::none: return "random";
    case Special::neg_inf_garbage: return "-inf partials with NaN O";
    case Special::all_neg_inf_rows: return "all -inf rows";
    case Special::huge: return "LSE ~ +-1e30";
    case Special::tiny: return "LSE ~ +-1e-30";
    case Special::nan: return "NaN LSE / NaN O";
  }
  return "?";
}

struct MergeCase {
  int64_t states = 2, batch = 1, seqlen_q = 7, heads = 3, head_dim_v = 64;
  StateDType part = StateDType::f32, out = StateDType::f16;
  bool lse = true;
  bool strided = false;  // padded strides on every tensor (and a non-unit LSE stride_seq)
  Special special = Special::none;
  std::string str() const {
    return fmt::format("S{} B{} Sq{} H{} dv{} part {} out {} lse {} {} {}", states, batch, seqlen_q, heads,
                       head_dim_v, flashgen::to_string(part), flashgen::to_string(out), lse ? 1 : 0,
                       strided ? "strided" : "contiguous", special_name(special));
  }
};

int64_t bytes_of(StateDType d) { return flashgen::dtype_bytes(d); }

// The element of a state dtype as bits in a byte buffer.
void put(std::vector<uint8_t>& buf, StateDType d, int64_t index, float v) {
  if (d == StateDType::f32) {
    std::memcpy(&buf[static_cast<size_t>(index * 4)], &v, 4);
  } else {
    const uint16_t h = d == StateDType::f16 ? ref::float_to_half(v) : ref::float_to_bf16(v);
    std::memcpy(&buf[static_cast<size_t>(index * 2)], &h, 2);
  }
}
float get(const std::vector<uint8_t>& buf, StateDType d, int64_t index) {
  if (d == StateDType::f32) {
    float v;
    std::memcpy(&v, &buf[static_cast<size_t>(index * 4)], 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, &buf[static_cast<size_t>(index * 2)], 2);
  return d == StateDType::f16 ? ref::half_to_float(h) : ref::bf16_to_float(h);
}

struct Result {
  bool ok = true;
  std::vector<std::string> errors;
  double max_err_o = 0, max_err_lse = 0;
  void fail(const std::string& e) {
    ok = false;
    if (errors.size() < 8) errors.push_back(e);
  }
};

Result run_merge_case(const MergeCase& c) {
  Result res;
  const uint64_t seed = fgtest::case_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::uniform_real_distribution<float> lse_dist(-6.0f, 6.0f);
  const int64_t S = c.states, B = c.batch, Q = c.seqlen_q, H = c.heads, D = c.head_dim_v;
  const int64_t pad_p = c.strided ? 16 / bytes_of(c.part) * 3 : 0;  // elements, keeps 16-byte multiples
  const int64_t pad_o = c.strided ? 16 / bytes_of(c.out) * 2 : 0;

  // Layouts: the contiguous one, or each stride padded.
  MergeProblem p = flashgen::make_merge_problem(c.part, c.out, S, B, Q, H, D, nullptr, nullptr, nullptr, nullptr);
  if (c.strided) {
    p.o_partial.stride_head = D + pad_p;
    p.o_partial.stride_seq = H * p.o_partial.stride_head + pad_p;
    p.o_partial.stride_batch = Q * p.o_partial.stride_seq + pad_p;
    p.o_partial.stride_state = B * p.o_partial.stride_batch + pad_p;
    p.lse_partial.stride_seq = 3;
    p.lse_partial.stride_head = Q * 3 + 5;
    p.lse_partial.stride_batch = H * p.lse_partial.stride_head + 2;
    p.lse_partial.stride_state = B * p.lse_partial.stride_batch + 7;
    p.o.stride_head = D + pad_o;
    p.o.stride_seq = H * p.o.stride_head + pad_o;
    p.o.stride_batch = Q * p.o.stride_seq + pad_o;
    p.lse.stride_head = Q + 3;
    p.lse.stride_batch = H * p.lse.stride_head + 1;
  }
  const int64_t op_elems = (S - 1) * p.o_partial.stride_state + (B - 1) * p.o_partial.stride_batch +
                           (Q - 1) * p.o_partial.stride_seq + (H - 1) * p.o_partial.stride_head + D + pad_p;
  const int64_t lp_elems = (S - 1) * p.lse_partial.stride_state + (B - 1) * p.lse_partial.stride_batch +
                           (H - 1) * p.lse_partial.stride_head + (Q - 1) * p.lse_partial.stride_seq + 1 + 8;
  const int64_t o_elems = (B - 1) * p.o.stride_batch + (Q - 1) * p.o.stride_seq + (H - 1) * p.o.stride_head + D;
  const int64_t l_elems = (B - 1) * p.lse.stride_batch + (H - 1) * p.lse.stride_head + Q;

  // Inputs in NaN-filled buffers.
  std::vector<uint8_t> op(static_cast<size_t>(op_elems * bytes_of(c.part)), 0xFF);
  std::vector<float> lp(static_cast<size_t>(lp_elems), std::numeric_limits<float>::quiet_NaN());
  auto op_index = [&](int64_t s, int64_t b, int64_t i, int64_t h) {
    return s * p.o_partial.stride_state + b * p.o_partial.stride_batch + i * p.o_partial.stride_seq +
           h * p.o_partial.stride_head;
  };
  auto lp_index = [&](int64_t s, int64_t b, int64_t h, int64_t i) {
    return s * p.lse_partial.stride_state + b * p.lse_partial.stride_batch + h * p.lse_partial.stride_head +
           i * p.lse_partial.stride_seq;
  };
  std::vector<char> row_nan(static_cast<size_t>(B * Q * H), 0);  // rows whose result may be NaN
  int64_t rows_all_inf = 0, partials_inf = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = (b * Q + i) * H + h;
        const bool all_inf = c.special == Special::all_neg_inf_rows && row % 3 == 1;
        rows_all_inf += all_inf ? 1 : 0;
        for (int64_t s = 0; s < S; ++s) {
          float l = lse_dist(rng);
          if (c.special == Special::huge) l = (row % 2 == 0 ? 1e30f : -1e30f) * (1.0f + 1e-7f * static_cast<float>(s));
          if (c.special == Special::tiny) l = 1e-30f * l;
          const bool neg_inf = all_inf || (c.special == Special::neg_inf_garbage && S > 1 && (s + row) % 3 == 0) ||
                               (c.special == Special::neg_inf_garbage && S == 1 && row % 2 == 0);
          if (neg_inf) {
            l = -kInf;
            ++partials_inf;
          }
          lp[static_cast<size_t>(lp_index(s, b, h, i))] = l;
          for (int64_t d = 0; d < D; ++d) {
            // A skipped partial holds NaN: reading it into a result would show.
            const float v = neg_inf ? std::numeric_limits<float>::quiet_NaN() : uni(rng);
            put(op, c.part, op_index(s, b, i, h) + d, v);
          }
        }
        if (c.special == Special::nan && row % 5 == 2) {
          lp[static_cast<size_t>(lp_index(S - 1, b, h, i))] = std::numeric_limits<float>::quiet_NaN();
          row_nan[static_cast<size_t>(row)] = 1;
        }
        if (c.special == Special::nan && row % 5 == 4) {
          put(op, c.part, op_index(0, b, i, h) + D / 2, std::numeric_limits<float>::quiet_NaN());
          row_nan[static_cast<size_t>(row)] = 1;
        }
      }
  if (c.special == Special::all_neg_inf_rows && rows_all_inf == 0) res.fail("no all -inf row in the case");
  if (c.special == Special::neg_inf_garbage && partials_inf == 0) res.fail("no -inf partial in the case");

  // Reference over the host copies.
  MergeProblem hp = p;
  hp.o_partial.data = op.data();
  hp.lse_partial.data = lp.data();
  std::vector<double> ro, rl;
  ref::merge_states(hp, ro, rl);

  // Device buffers: outputs poisoned with guard bands.
  DeviceBuffer d_op(op.size()), d_lp(lp.size() * 4);
  d_op.upload(op);
  d_lp.upload(lp);
  const int64_t o_bytes = o_elems * bytes_of(c.out);
  std::vector<uint8_t> o_poison(static_cast<size_t>(o_bytes + 2 * kGuard), 0xFF);
  std::vector<uint8_t> l_poison(static_cast<size_t>(l_elems * 4 + 2 * kGuard), 0xFF);
  DeviceBuffer d_o(o_poison.size()), d_l(l_poison.size());
  d_o.upload(o_poison);
  d_l.upload(l_poison);
  p.o_partial.data = reinterpret_cast<const void*>(d_op.address());
  p.lse_partial.data = reinterpret_cast<const float*>(d_lp.address());
  p.o.data = reinterpret_cast<const void*>(d_o.address() + kGuard);
  p.lse.data = c.lse ? reinterpret_cast<float*>(d_l.address() + kGuard) : nullptr;

  Stream stream;
  const flashgen::MergeInfo info = flashgen::merge_states(p, stream.get());
  stream.sync();
  if (!info.launched) res.fail("merge_states did not launch");

  const std::vector<uint8_t> o_dev = d_o.download<uint8_t>();
  const std::vector<uint8_t> l_dev = d_l.download<uint8_t>();
  if (d_op.download<uint8_t>() != op) res.fail("o_partial changed");
  if (d_lp.download<float>().size() != lp.size() ||
      std::memcmp(d_lp.download<float>().data(), lp.data(), lp.size() * 4) != 0)
    res.fail("lse_partial changed");

  // Which output bytes are inside the views.
  std::vector<char> o_in(o_dev.size(), 0), l_in(l_dev.size(), 0);
  const double o_atol = c.out == StateDType::f32 ? 2e-5 : c.out == StateDType::f16 ? 2e-3 : 1.6e-2;
  const double o_rtol = c.out == StateDType::f32 ? 2e-5 : c.out == StateDType::f16 ? 1e-3 : 8e-3;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = (b * Q + i) * H + h;
        const bool may_nan = row_nan[static_cast<size_t>(row)] != 0;
        const int64_t o_at = b * p.o.stride_batch + i * p.o.stride_seq + h * p.o.stride_head;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t byte = kGuard + (o_at + d) * bytes_of(c.out);
          bool poison = true;
          for (int64_t k = 0; k < bytes_of(c.out); ++k) {
            o_in[static_cast<size_t>(byte + k)] = 1;
            poison = poison && o_dev[static_cast<size_t>(byte + k)] == 0xFF;
          }
          if (poison) res.fail(fmt::format("O[b{} i{} h{} d{}] still holds the poison", b, i, h, d));
          std::vector<uint8_t> one(o_dev.begin() + byte, o_dev.begin() + byte + bytes_of(c.out));
          const double got = get(one, c.out, 0);
          const double want = ro[static_cast<size_t>(row * D + d)];
          if (std::isnan(want)) {
            if (!std::isnan(got)) res.fail(fmt::format("O[b{} i{} h{} d{}] = {} but the row is NaN", b, i, h, d, got));
            continue;
          }
          if (std::isnan(got) && may_nan) continue;  // a NaN O_s element reaches its own elements
          const double err = std::abs(got - want);
          if (!(err <= o_atol + o_rtol * std::abs(want)))
            res.fail(fmt::format("O[b{} i{} h{} d{}] = {} vs {} (err {:.3e})", b, i, h, d, got, want, err));
          if (std::isfinite(err)) res.max_err_o = std::max(res.max_err_o, err);
        }
        if (!c.lse) continue;
        const int64_t l_at = b * p.lse.stride_batch + h * p.lse.stride_head + i;
        const int64_t byte = kGuard + l_at * 4;
        for (int k = 0; k < 4; ++k) l_in[static_cast<size_t>(byte + k)] = 1;
        float got;
        std::memcpy(&got, &l_dev[static_cast<size_t>(byte)], 4);
        uint32_t bits;
        std::memcpy(&bits, &got, 4);
        if (bits == 0xFFFFFFFFu) res.fail(fmt::format("LSE[b{} h{} i{}] still holds the poison", b, h, i));
        const double want = rl[static_cast<size_t>((b * H + h) * Q + i)];
        if (std::isnan(want) || std::isinf(want)) {
          if (!(std::isnan(want) ? std::isnan(got) : got == want))
            res.fail(fmt::format("LSE[b{} h{} i{}] = {} vs {}", b, h, i, got, want));
          continue;
        }
        const double err = std::abs(got - want);
        if (!(err <= 1e-5 + 4e-7 * std::abs(want)))
          res.fail(fmt::format("LSE[b{} h{} i{}] = {} vs {} (err {:.3e})", b, h, i, got, want, err));
        if (std::isfinite(err)) res.max_err_lse = std::max(res.max_err_lse, err);
      }
  for (size_t k = 0; k < o_dev.size(); ++k)
    if (!o_in[k] && o_dev[k] != 0xFF) {
      res.fail(fmt::format("O byte {} outside the view (guard or padding) was written", static_cast<int64_t>(k) - kGuard));
      break;
    }
  for (size_t k = 0; k < l_dev.size(); ++k)
    if (!l_in[k] && l_dev[k] != 0xFF) {
      res.fail(fmt::format("LSE byte {} outside the view (guard or padding) was written", static_cast<int64_t>(k) - kGuard));
      break;
    }
  if (!res.ok) res.errors.push_back(fmt::format("seed {} (FLASHGEN_TEST_SEED reproduces)", seed));
  return res;
}

void run_merge_group(const char* title, const std::vector<MergeCase>& cases) {
  std::printf("== %s: %zu cases\n", title, cases.size());
  int failed = 0;
  for (const MergeCase& c : cases) {
    Result r;
    try {
      r = run_merge_case(c);
    } catch (const std::exception& e) {
      r.fail(std::string("exception: ") + e.what());
    }
    std::printf("  %-96s | max|dO| %.2e max|dLSE| %.2e | %s\n", c.str().c_str(), r.max_err_o, r.max_err_lse,
                r.ok ? "ok" : "FAIL");
    for (const std::string& e : r.errors) std::printf("      %s\n", e.c_str());
    std::fflush(stdout);
    failed += r.ok ? 0 : 1;
    CHECK_MESSAGE(r.ok, c.str() << ": " << fgtest::join(r.errors));
  }
  std::printf("== %s: %zu cases, %d failed\n", title, cases.size(), failed);
}

std::vector<MergeCase> dtype_cases() {
  std::vector<MergeCase> v;
  int k = 0;
  for (StateDType part : {StateDType::f32, StateDType::f16, StateDType::bf16})
    for (StateDType out : {StateDType::f32, StateDType::f16, StateDType::bf16})
      for (int64_t dv : {8, 64, 72, 128, 256, 512}) {
        MergeCase c;
        c.part = part;
        c.out = out;
        c.head_dim_v = dv;
        c.states = 1 + (k * 5) % 16;
        c.lse = k % 2 == 0;
        c.strided = k % 3 == 1;
        c.batch = 1 + k % 2;
        c.seqlen_q = 1 + (k * 7) % 13;
        c.heads = 1 + k % 5;
        v.push_back(c);
        ++k;
      }
  return v;
}

std::vector<MergeCase> states_cases() {
  std::vector<MergeCase> v;
  for (int64_t s = 1; s <= 16; ++s)
    for (bool strided : {false, true}) {
      MergeCase c;
      c.states = s;
      c.strided = strided;
      c.seqlen_q = 9;
      c.heads = 4;
      c.head_dim_v = 128;
      c.part = s % 2 == 0 ? StateDType::f32 : StateDType::bf16;
      c.out = s % 3 == 0 ? StateDType::f32 : StateDType::bf16;
      v.push_back(c);
    }
  for (int64_t s : {31, 64, 257, 1024}) {
    MergeCase c;
    c.states = s;
    c.seqlen_q = 3;
    c.heads = 2;
    c.head_dim_v = 96;
    v.push_back(c);
  }
  return v;
}

std::vector<MergeCase> special_cases() {
  std::vector<MergeCase> v;
  int k = 0;
  for (Special sp : {Special::neg_inf_garbage, Special::all_neg_inf_rows, Special::huge, Special::tiny, Special::nan})
    for (int64_t s : {1, 2, 5, 16})
      for (StateDType part : {StateDType::f32, StateDType::f16}) {
        MergeCase c;
        c.special = sp;
        c.states = s;
        c.part = part;
        c.out = k % 2 == 0 ? StateDType::f16 : StateDType::f32;
        c.strided = k % 2 == 1;
        c.seqlen_q = 11;
        c.heads = 3;
        c.head_dim_v = 64 + 8 * (k % 3);
        v.push_back(c);
        ++k;
      }
  return v;
}

// A large merge: many rows, so the grid has many blocks.
std::vector<MergeCase> large_cases() {
  MergeCase c;
  c.states = 8;
  c.batch = 4;
  c.seqlen_q = 257;
  c.heads = 32;
  c.head_dim_v = 128;
  MergeCase d = c;
  d.part = StateDType::bf16;
  d.out = StateDType::bf16;
  d.strided = true;
  d.head_dim_v = 64;
  return {c, d};
}

}  // namespace

FLASHGEN_GPU_ALWAYS_TEST("merge: every partial x output dtype, head_dim_v 8..512, contiguous and strided") {
  run_merge_group("merge dtypes", dtype_cases());
}

FLASHGEN_GPU_ALWAYS_TEST("merge: S = 1..16 and up to 1024 states") { run_merge_group("merge states", states_cases()); }

FLASHGEN_GPU_ALWAYS_TEST("merge: -inf partials with NaN O, all -inf rows, huge and tiny LSEs, NaN") {
  run_merge_group("merge special values", special_cases());
}

FLASHGEN_GPU_TEST("merge: many rows") { run_merge_group("merge large", large_cases()); }

// ---- the merge of a forward split in two key halves equals the unsplit forward ----

namespace {

struct SplitResult {
  bool ok = true;
  std::string error;
  double max_err_o = 0, max_err_lse = 0;
};

SplitResult split_forward_case(flashgen::DType dtype, int64_t B, int64_t Sq, int64_t Sk, int64_t k1, int64_t Hq,
                               int64_t Hkv, int64_t d) {
  SplitResult r;
  std::mt19937_64 rng(fgtest::case_seed());
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto random16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = ref::to_dtype(dtype, uni(rng));
    return v;
  };
  const std::vector<uint16_t> q = random16(B * Sq * Hq * d), k = random16(B * Sk * Hkv * d),
                              v = random16(B * Sk * Hkv * d);
  DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2);
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  const int64_t o_elems = B * Sq * Hq * d, l_elems = B * Hq * Sq;
  DeviceBuffer o_full(o_elems * 2), l_full(l_elems * 4), o_parts(2 * o_elems * 2), l_parts(2 * l_elems * 4),
      o_merged(o_elems * 2), l_merged(l_elems * 4);
  Stream stream;
  auto fwd = [&](int64_t key0, int64_t keys, uintptr_t o, uintptr_t l) {
    flashgen::AttentionProblem p = flashgen::make_bshd_problem(
        dtype, B, Sq, keys, Hq, Hkv, d, d, flashgen::MaskKind::none, reinterpret_cast<const void*>(dq.address()),
        reinterpret_cast<const void*>(dk.address() + key0 * Hkv * d * 2),
        reinterpret_cast<const void*>(dv.address() + key0 * Hkv * d * 2), reinterpret_cast<void*>(o));
    // The halves are views into the full K/V: same strides, fewer keys.
    p.k.stride_batch = Sk * Hkv * d;
    p.v.stride_batch = Sk * Hkv * d;
    p.lse.data = reinterpret_cast<float*>(l);
    p.lse.stride_head = Sq;
    p.lse.stride_batch = Hq * Sq;
    flashgen::forward(p, stream.get());
  };
  fwd(0, Sk, o_full.address(), l_full.address());
  fwd(0, k1, o_parts.address(), l_parts.address());
  fwd(k1, Sk - k1, o_parts.address() + o_elems * 2, l_parts.address() + l_elems * 4);
  const StateDType io = dtype == flashgen::DType::f16 ? StateDType::f16 : StateDType::bf16;
  const MergeProblem m = flashgen::make_merge_problem(
      io, io, 2, B, Sq, Hq, d, reinterpret_cast<const void*>(o_parts.address()),
      reinterpret_cast<const float*>(l_parts.address()), reinterpret_cast<void*>(o_merged.address()),
      reinterpret_cast<float*>(l_merged.address()));
  flashgen::merge_states(m, stream.get());
  stream.sync();
  const auto of = o_full.download<uint16_t>(), om = o_merged.download<uint16_t>();
  const auto lf = l_full.download<float>(), lm = l_merged.download<float>();
  // The halves are rounded to the dtype before the merge: about two roundings.
  const double atol = 2 * fgtest::o_atol(dtype);
  for (size_t i = 0; i < of.size(); ++i) {
    const double a = ref::from_dtype(dtype, of[i]), b = ref::from_dtype(dtype, om[i]);
    const double err = std::abs(a - b);
    r.max_err_o = std::max(r.max_err_o, err);
    if (!(err <= atol)) {
      r.ok = false;
      r.error = fmt::format("O element {}: split-and-merged {} vs unsplit {}", i, b, a);
      return r;
    }
  }
  for (size_t i = 0; i < lf.size(); ++i) {
    const double err = std::abs(static_cast<double>(lf[i]) - lm[i]);
    r.max_err_lse = std::max(r.max_err_lse, err);
    if (!(err <= 1e-4 + 1e-5 * std::abs(lf[i]))) {
      r.ok = false;
      r.error = fmt::format("LSE element {}: split-and-merged {} vs unsplit {}", i, lm[i], lf[i]);
      return r;
    }
  }
  return r;
}

}  // namespace

FLASHGEN_GPU_ALWAYS_TEST("merge: forward over two key halves, merged, equals the unsplit forward") {
  struct Shape {
    flashgen::DType dtype;
    int64_t B, Sq, Sk, k1, Hq, Hkv, d;
  };
  const Shape shapes[] = {
      {flashgen::DType::f16, 2, 37, 301, 150, 4, 2, 64},  {flashgen::DType::bf16, 1, 5, 1000, 333, 8, 8, 128},
      {flashgen::DType::f16, 1, 64, 96, 95, 2, 1, 96},    {flashgen::DType::f16, 1, 16, 200, 200, 2, 2, 64},
      {flashgen::DType::bf16, 3, 1, 4096, 2048, 8, 2, 128},
  };
  for (const Shape& s : shapes) {
    const std::string name = fmt::format("{} B{} Sq{} Sk{} split at {} Hq{} Hkv{} d{}", flashgen::to_string(s.dtype),
                                         s.B, s.Sq, s.Sk, s.k1, s.Hq, s.Hkv, s.d);
    SplitResult r;
    try {
      r = split_forward_case(s.dtype, s.B, s.Sq, s.Sk, s.k1, s.Hq, s.Hkv, s.d);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = std::string("exception: ") + e.what();
    }
    std::printf("  split forward %-60s | max|dO| %.2e max|dLSE| %.2e | %s %s\n", name.c_str(), r.max_err_o,
                r.max_err_lse, r.ok ? "ok" : "FAIL", r.error.c_str());
    std::fflush(stdout);
    CHECK_MESSAGE(r.ok, name << ": " << r.error);
  }
}
