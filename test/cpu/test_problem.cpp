// AttentionProblem: contiguous construction, default scale, and one check per
// rule of check_problem (pointers are fake, never dereferenced).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "flashgen/problem.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

const void* ptr(uintptr_t address) { return reinterpret_cast<const void*>(address); }
void* mut_ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

// batch 2, seqlen_q 100, seqlen_k 120, 8 query heads over 2 KV heads (GQA),
// head_dim 96, head_dim_v 64.
AttentionProblem valid_problem() {
  return make_bshd_problem(DType::f16, 2, 100, 120, 8, 2, 96, 64, MaskKind::causal_bottom_right,
                           ptr(0x10000), ptr(0x20000), ptr(0x30000), mut_ptr(0x40000));
}

#define CHECK_REJECTED(problem, text) \
  CHECK_THROWS_WITH_AS(check_problem(problem), Contains(text), InvalidArgument)

}  // namespace

TEST_CASE("make_bshd_problem fills contiguous BSHD strides") {
  const AttentionProblem p = valid_problem();
  CHECK(p.dtype == DType::f16);
  CHECK(p.batch == 2);
  CHECK(p.seqlen_q == 100);
  CHECK(p.seqlen_k == 120);
  CHECK(p.heads_q == 8);
  CHECK(p.heads_kv == 2);
  CHECK(p.head_dim == 96);
  CHECK(p.head_dim_v == 64);
  CHECK(p.mask == MaskKind::causal_bottom_right);
  CHECK(p.q.data == ptr(0x10000));
  CHECK(p.q.stride_head == 96);
  CHECK(p.q.stride_seq == 8 * 96);
  CHECK(p.q.stride_batch == 100 * 8 * 96);
  CHECK(p.k.data == ptr(0x20000));
  CHECK(p.k.stride_head == 96);
  CHECK(p.k.stride_seq == 2 * 96);
  CHECK(p.k.stride_batch == 120 * 2 * 96);
  CHECK(p.v.data == ptr(0x30000));
  CHECK(p.v.stride_head == 64);
  CHECK(p.v.stride_seq == 2 * 64);
  CHECK(p.v.stride_batch == 120 * 2 * 64);
  CHECK(p.o.data == ptr(0x40000));
  CHECK(p.o.stride_head == 64);
  CHECK(p.o.stride_seq == 8 * 64);
  CHECK(p.o.stride_batch == 100 * 8 * 64);
  CHECK(p.bias.kind == BiasKind::none);
  CHECK(p.bias.data == nullptr);
  CHECK(p.lse.data == nullptr);
  CHECK_FALSE(p.softmax_scale.has_value());
  CHECK_NOTHROW(check_problem(p));
}

TEST_CASE("AttentionProblem::scale") {
  AttentionProblem p = valid_problem();
  CHECK(p.scale() == doctest::Approx(1.0 / std::sqrt(96.0)));
  p.head_dim = 64;
  CHECK(p.scale() == 0.125f);
  p.softmax_scale = 0.5f;
  CHECK(p.scale() == 0.5f);
  p.softmax_scale = -2.0f;
  CHECK(p.scale() == -2.0f);
}

TEST_CASE("check_problem: sizes") {
  AttentionProblem p = valid_problem();
  SUBCASE("batch") {
    p.batch = -1;
    CHECK_REJECTED(p, "batch (-1) must be >= 0");
  }
  SUBCASE("seqlen_q") {
    p.seqlen_q = -3;
    CHECK_REJECTED(p, "seqlen_q (-3) must be >= 0");
  }
  SUBCASE("seqlen_k") {
    p.seqlen_k = -1;
    CHECK_REJECTED(p, "seqlen_k (-1) must be >= 0");
  }
  SUBCASE("heads_q") {
    p.heads_q = -1;
    CHECK_REJECTED(p, "heads_q (-1) must be >= 0");
  }
  SUBCASE("heads_kv") {
    p.heads_kv = -2;
    CHECK_REJECTED(p, "heads_kv (-2) must be >= 0");
  }
  SUBCASE("heads_kv == 0 with query heads") {
    p.heads_kv = 0;
    CHECK_REJECTED(p, "heads_kv (0) must be >= 1 when heads_q (8) > 0");
  }
  SUBCASE("heads_q multiple of heads_kv") {
    p.heads_q = 12;
    p.heads_kv = 5;
    CHECK_REJECTED(p, "heads_q (12) must be a multiple of heads_kv (5)");
  }
  SUBCASE("head_dim not a multiple of 8") {
    p.head_dim = 100;
    CHECK_REJECTED(p, "head_dim (100) must be a multiple of 8 in [16, 256]");
  }
  SUBCASE("head_dim too small") {
    p.head_dim = 8;
    CHECK_REJECTED(p, "head_dim (8) must be a multiple of 8 in [16, 256]");
  }
  SUBCASE("head_dim too large") {
    p.head_dim = 264;
    CHECK_REJECTED(p, "head_dim (264) must be a multiple of 8 in [16, 256]");
  }
  SUBCASE("head_dim_v") {
    p.head_dim_v = 12;
    CHECK_REJECTED(p, "head_dim_v (12) must be a multiple of 8 in [16, 256]");
  }
  SUBCASE("dtype out of range") {
    p.dtype = static_cast<DType>(7);
    CHECK_REJECTED(p, "dtype (7) is not a dtype; allowed: f16, bf16");
  }
  SUBCASE("mask out of range") {
    p.mask = static_cast<MaskKind>(9);
    CHECK_REJECTED(p, "mask (9) is not a mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr");
  }
  SUBCASE("MQA and equal heads are fine") {
    p.heads_kv = 1;
    CHECK_NOTHROW(check_problem(p));
    p.heads_kv = 8;
    CHECK_NOTHROW(check_problem(p));
  }
}

TEST_CASE("check_problem: softcap is 0 (off) or a cap in [FLT_MIN, kMaxSoftcap]") {
  AttentionProblem p = valid_problem();
  for (float ok : {0.0f, std::numeric_limits<float>::min(), 1.0f, 50.0f, kMaxSoftcap}) {
    p.softcap = ok;
    CHECK_NOTHROW(check_problem(p));
  }
  p.softcap = -1.0f;
  CHECK_REJECTED(p, "softcap (-1) must be 0 (no softcapping) or a cap in [1.1754944e-38, 1024]");
  p.softcap = std::numeric_limits<float>::infinity();
  CHECK_REJECTED(p, "softcap (inf) must be 0");
  p.softcap = std::numeric_limits<float>::quiet_NaN();
  CHECK_REJECTED(p, "softcap (nan) must be 0");
  p.softcap = 1e-40f;  // subnormal: 2 log2(e) / cap would overflow
  CHECK_REJECTED(p, "softcap (1e-40) must be 0");
  p.softcap = std::nextafter(kMaxSoftcap, 2 * kMaxSoftcap);  // the tanh's absolute error grows with the cap
  CHECK_REJECTED(p, "softcap (1024.0001) must be 0 (no softcapping) or a cap in [1.1754944e-38, 1024]");
  p.softcap = std::numeric_limits<float>::max();
  CHECK_REJECTED(p, "softcap (3.4028235e+38) must be 0");
}

TEST_CASE("check_problem: window sizes are >= -1 with a window mask and -1 with any other") {
  AttentionProblem p = valid_problem();
  CHECK(p.window_left == -1);
  CHECK(p.window_right == -1);
  for (MaskKind m : {MaskKind::window_top_left, MaskKind::window_bottom_right}) {
    CAPTURE(to_string(m));
    p.mask = m;
    // -1 (unbounded), 0, and sizes beyond the keys (they act as unbounded) are fine.
    for (int64_t left : {int64_t{-1}, int64_t{0}, int64_t{7}, int64_t{1000000}, std::numeric_limits<int64_t>::max()})
      for (int64_t right : {int64_t{-1}, int64_t{0}, int64_t{3}, std::numeric_limits<int64_t>::max()}) {
        p.window_left = left;
        p.window_right = right;
        CHECK_NOTHROW(check_problem(p));
      }
    p.window_left = -2;
    p.window_right = 0;
    CHECK_REJECTED(p, "window_left (-2) must be >= -1 (a window size in keys; -1: unbounded on that side)");
    p.window_left = 4;
    p.window_right = std::numeric_limits<int64_t>::min();
    CHECK_REJECTED(p, "window_right (-9223372036854775808) must be >= -1");
  }
  for (MaskKind m : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right}) {
    CAPTURE(to_string(m));
    p.mask = m;
    p.window_left = 5;
    p.window_right = -1;
    CHECK_REJECTED(p, fmt::format("window_left (5) must be -1 with mask {}: window sizes are read only with a "
                                  "sliding-window mask; use mask windowtl or windowbr",
                                  to_string(m)).c_str());
    p.window_left = -1;
    p.window_right = 0;  // (causal is the window (-1, 0), but through its own mask kind)
    CHECK_REJECTED(p, fmt::format("window_right (0) must be -1 with mask {}", to_string(m)).c_str());
    p.window_right = -1;
    CHECK_NOTHROW(check_problem(p));
  }
}

TEST_CASE("check_problem: a window mask needs seqlen_q + seqlen_k <= 2^31 - 257") {
  const int64_t sq = int64_t{1} << 30, sk = 2147483391 - sq;
  for (MaskKind m : {MaskKind::window_top_left, MaskKind::window_bottom_right}) {
    CAPTURE(to_string(m));
    AttentionProblem p = make_bshd_problem(DType::f16, 1, sq, sk, 1, 1, 64, 64, m, ptr(0x10000), ptr(0x20000),
                                           ptr(0x30000), mut_ptr(0x40000));
    p.window_left = 128;
    CHECK_NOTHROW(check_problem(p));
    p = make_bshd_problem(DType::f16, 1, sq, sk + 1, 1, 1, 64, 64, m, ptr(0x10000), ptr(0x20000), ptr(0x30000),
                          mut_ptr(0x40000));
    CHECK_REJECTED(p, fmt::format("seqlen_q (1073741824) + seqlen_k (1073741568) must be at most 2^31 - 257 = "
                                  "2147483391 with a window mask (mask {})",
                                  to_string(m)).c_str());
    p.seqlen_q = std::numeric_limits<int64_t>::max();  // no overflow in the sum
    p.seqlen_k = std::numeric_limits<int64_t>::max();
    p.batch = 0;
    CHECK_REJECTED(p, "seqlen_q (9223372036854775807) + seqlen_k (9223372036854775807) must be at most");
  }
  // Other masks leave the limit to launch() (check_launch_limits: each seqlen at most 2^31 - 257).
  const AttentionProblem causal = make_bshd_problem(DType::f16, 1, sq, sk + 1, 1, 1, 64, 64,
                                                    MaskKind::causal_bottom_right, ptr(0x10000), ptr(0x20000),
                                                    ptr(0x30000), mut_ptr(0x40000));
  CHECK_NOTHROW(check_problem(causal));
}

TEST_CASE("check_problem: sinks are 4-byte aligned when set") {
  AttentionProblem p = valid_problem();
  p.sinks = reinterpret_cast<const float*>(uintptr_t{0x50004});
  CHECK_NOTHROW(check_problem(p));
  p.sinks = reinterpret_cast<const float*>(uintptr_t{0x50002});
  CHECK_REJECTED(p, "sinks (0x50002) must be 4-byte aligned (float32 [heads_q])");
  p.seqlen_q = 0;  // no rows: never read
  CHECK_NOTHROW(check_problem(p));
}

TEST_CASE("check_problem: ALiBi slopes are 4-byte aligned, alibi_stride_batch >= 0") {
  AttentionProblem p = valid_problem();
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x60000});
  for (int64_t stride : {int64_t{0}, int64_t{8}, int64_t{1000}}) {
    p.alibi_stride_batch = stride;
    CHECK_NOTHROW(check_problem(p));
  }
  p.alibi_stride_batch = -1;
  CHECK_REJECTED(p, "alibi_stride_batch (-1) must be >= 0 (0: one slope per query head for every batch");
  p.alibi_stride_batch = 0;
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x60001});
  CHECK_REJECTED(p, "alibi_slopes (0x60001) must be 4-byte aligned (float32)");
  p.seqlen_q = 0;  // no rows: never read (the stride is still checked)
  CHECK_NOTHROW(check_problem(p));
  p.alibi_stride_batch = -3;
  CHECK_REJECTED(p, "alibi_stride_batch (-3) must be >= 0");
  p = valid_problem();
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x60000});
  p.alibi_stride_batch = std::numeric_limits<int64_t>::max() / 4;
  CHECK_REJECTED(p, "alibi_slopes: the largest offset (batch-1)*alibi_stride_batch + heads_q-1 = (2-1)*");
  // Off (null): the stride is not read.
  p.alibi_slopes = nullptr;
  p.alibi_stride_batch = -1;
  CHECK_NOTHROW(check_problem(p));
}

TEST_CASE("check_problem: softmax_scale must be finite (any finite value is allowed)") {
  AttentionProblem p = valid_problem();
  p.softmax_scale = std::numeric_limits<float>::infinity();
  CHECK_REJECTED(p, "softmax_scale (inf) must be finite");
  p.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  CHECK_REJECTED(p, "softmax_scale (nan) must be finite");
  p.softmax_scale = 0.0f;
  CHECK_NOTHROW(check_problem(p));
  p.softmax_scale = -1.0f;
  CHECK_NOTHROW(check_problem(p));
}

TEST_CASE("check_problem: null pointers") {
  AttentionProblem p = valid_problem();
  SUBCASE("q") {
    p.q.data = nullptr;
    CHECK_REJECTED(p, "q.data is null");
  }
  SUBCASE("k") {
    p.k.data = nullptr;
    CHECK_REJECTED(p, "k.data is null");
  }
  SUBCASE("v") {
    p.v.data = nullptr;
    CHECK_REJECTED(p, "v.data is null");
  }
  SUBCASE("o") {
    p.o.data = nullptr;
    CHECK_REJECTED(p, "o.data is null");
  }
}

TEST_CASE("check_problem: empty problems may pass null pointers") {
  SUBCASE("seqlen_q == 0") {
    auto p = make_bshd_problem(DType::bf16, 2, 0, 7, 4, 4, 64, 64, MaskKind::none, nullptr, nullptr,
                               nullptr, nullptr);
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("batch == 0") {
    auto p = make_bshd_problem(DType::f16, 0, 5, 7, 4, 4, 64, 64, MaskKind::none, nullptr, nullptr,
                               nullptr, nullptr);
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("heads_q == 0") {
    auto p = make_bshd_problem(DType::f16, 2, 5, 7, 0, 0, 64, 64, MaskKind::none, nullptr, nullptr,
                               nullptr, nullptr);
    CHECK_NOTHROW(check_problem(p));
    p.heads_kv = 4;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("an empty problem still has valid head dims") {
    auto p = make_bshd_problem(DType::f16, 0, 5, 7, 4, 4, 100, 64, MaskKind::none, nullptr, nullptr,
                               nullptr, nullptr);
    CHECK_REJECTED(p, "head_dim (100)");
  }
  SUBCASE("seqlen_k == 0: k and v may be null, q and o may not") {
    auto p = make_bshd_problem(DType::f16, 2, 5, 0, 4, 4, 64, 64, MaskKind::none, ptr(0x10000),
                               nullptr, nullptr, mut_ptr(0x40000));
    CHECK_NOTHROW(check_problem(p));
    p.q.data = nullptr;
    CHECK_REJECTED(p, "q.data is null");
    p.q.data = ptr(0x10000);
    p.o.data = nullptr;
    CHECK_REJECTED(p, "o.data is null");
  }
}

TEST_CASE("check_problem: 16-byte alignment of q, k, v, o") {
  AttentionProblem p = valid_problem();
  SUBCASE("q") {
    p.q.data = ptr(0x10008);
    CHECK_REJECTED(p, "q.data (0x10008) must be 16-byte aligned");
  }
  SUBCASE("k") {
    p.k.data = ptr(0x20002);
    CHECK_REJECTED(p, "k.data (0x20002) must be 16-byte aligned");
  }
  SUBCASE("v") {
    p.v.data = ptr(0x30004);
    CHECK_REJECTED(p, "v.data (0x30004) must be 16-byte aligned");
  }
  SUBCASE("o") {
    p.o.data = ptr(0x40001);
    CHECK_REJECTED(p, "o.data (0x40001) must be 16-byte aligned");
  }
}

TEST_CASE("check_problem: strides") {
  AttentionProblem p = valid_problem();
  SUBCASE("multiple of 8 elements") {
    p.q.stride_seq = 100;
    CHECK_REJECTED(p, "q.stride_seq (100) must be a multiple of 8 elements");
  }
  SUBCASE("multiple of 8 elements (v.stride_batch)") {
    p.v.stride_batch = 4;
    CHECK_REJECTED(p, "v.stride_batch (4) must be a multiple of 8 elements");
  }
  SUBCASE("negative") {
    p.k.stride_head = -8;
    CHECK_REJECTED(p, "k.stride_head (-8) must be >= 0");
  }
  SUBCASE("negative (o)") {
    p.o.stride_seq = -512;
    CHECK_REJECTED(p, "o.stride_seq (-512) must be >= 0");
  }
  SUBCASE("inputs may broadcast with stride 0") {
    p.q.stride_batch = 0;
    p.k.stride_batch = 0;
    p.v.stride_head = 0;
    p.k.stride_head = 0;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("the output cannot broadcast") {
    p.o.stride_batch = 0;
    CHECK_REJECTED(p, "o.stride_batch (0) must be positive when batch (2) > 1: an output cannot broadcast");
    p.o.stride_batch = 100 * 8 * 64;
    p.o.stride_seq = 0;
    CHECK_REJECTED(p, "o.stride_seq (0) must be positive when seqlen_q (100) > 1");
    p.o.stride_seq = 8 * 64;
    p.o.stride_head = 0;
    CHECK_REJECTED(p, "o.stride_head (0) must be positive when heads_q (8) > 1");
  }
  SUBCASE("an output dim of extent 1 may have stride 0") {
    p.batch = 1;
    p.o.stride_batch = 0;
    CHECK_NOTHROW(check_problem(p));
  }
}

TEST_CASE("check_problem: bias") {
  AttentionProblem p = valid_problem();
  SUBCASE("kind none requires null data") {
    p.bias.data = ptr(0x50000);
    CHECK_REJECTED(p, "bias.data (0x50000) must be null when bias.kind is none");
  }
  SUBCASE("kind input requires data") {
    p.bias.kind = BiasKind::input;
    CHECK_REJECTED(p, "bias.data is null but bias.kind is input");
  }
  SUBCASE("kind f32 requires data") {
    p.bias.kind = BiasKind::f32;
    CHECK_REJECTED(p, "bias.data is null but bias.kind is f32");
  }
  SUBCASE("negative strides") {
    p.bias.kind = BiasKind::f32;
    p.bias.data = ptr(0x50000);
    p.bias.stride_q = -1;
    CHECK_REJECTED(p, "bias.stride_q (-1) must be >= 0");
    p.bias.stride_q = 0;
    p.bias.stride_batch = -5;
    CHECK_REJECTED(p, "bias.stride_batch (-5) must be >= 0");
  }
  SUBCASE("input bias needs 2-byte alignment") {
    p.bias.kind = BiasKind::input;
    p.bias.data = ptr(0x50001);
    CHECK_REJECTED(p, "bias.data (0x50001) must be 2-byte aligned for bias.kind input");
    p.bias.data = ptr(0x50002);
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("f32 bias needs 4-byte alignment") {
    p.bias.kind = BiasKind::f32;
    p.bias.data = ptr(0x50002);
    CHECK_REJECTED(p, "bias.data (0x50002) must be 4-byte aligned for bias.kind f32");
    p.bias.data = ptr(0x50004);
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("broadcast strides (all 0) and odd strides are fine") {
    p.bias.kind = BiasKind::f32;
    p.bias.data = ptr(0x50000);
    CHECK_NOTHROW(check_problem(p));
    p.bias.stride_k = 1;
    p.bias.stride_q = 121;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("kind out of range") {
    p.bias.kind = static_cast<BiasKind>(5);
    CHECK_REJECTED(p, "bias.kind (5) is not a bias kind; allowed: none, input, f32");
  }
}

TEST_CASE("check_problem: lse") {
  AttentionProblem p = valid_problem();
  SUBCASE("strides are ignored when data is null") {
    p.lse.stride_batch = -1;
    p.lse.stride_head = -7;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("valid lse") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_head = 100;
    p.lse.stride_batch = 800;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("negative strides") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_batch = 800;
    p.lse.stride_head = -1;
    CHECK_REJECTED(p, "lse.stride_head (-1) must be >= 0");
  }
  SUBCASE("alignment") {
    p.lse.data = reinterpret_cast<float*>(0x60002);
    p.lse.stride_head = 100;
    p.lse.stride_batch = 800;
    CHECK_REJECTED(p, "lse.data (0x60002) must be 4-byte aligned");
  }
  SUBCASE("an output cannot broadcast") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_head = 100;
    p.lse.stride_batch = 0;
    CHECK_REJECTED(p, "lse.stride_batch (0) must be positive when batch (2) > 1");
  }
}

// Issue 11 item 3: an output view that overlaps itself is refused (O and LSE),
// whatever stride causes it; inputs may overlap.
TEST_CASE("check_problem: outputs that overlap themselves") {
  AttentionProblem p = valid_problem();  // o: head_dim_v 64, heads_q 8, seqlen_q 100, batch 2
  SUBCASE("o.stride_head smaller than head_dim_v") {
    p.o.stride_head = 56;
    CHECK_REJECTED(p, "o.stride_head (56) is smaller than the 64 elements it must step over "
                      "(head_dim_v = 64)");
    CHECK_REJECTED(p, "(contiguous: stride_head >= head_dim_v, stride_seq >= heads_q * stride_head, "
                      "stride_batch >= seqlen_q * stride_seq)");
  }
  SUBCASE("strides left from another head_dim_v") {
    AttentionProblem q = make_bshd_problem(DType::f16, 2, 100, 120, 8, 2, 96, 64,
                                           MaskKind::none, ptr(0x10000), ptr(0x20000),
                                           ptr(0x30000), mut_ptr(0x40000));
    q.head_dim_v = 128;
    q.v.stride_head = 128;  // V fixed up, O left with head_dim_v 64's strides
    q.v.stride_seq = 2 * 128;
    q.v.stride_batch = 120 * 2 * 128;
    CHECK_REJECTED(q, "o.stride_head (64) is smaller than the 128 elements it must step over");
  }
  SUBCASE("o.stride_seq smaller than the heads it steps over") {
    p.o.stride_seq = 7 * 64;  // 8 heads of 64
    CHECK_REJECTED(p, "o.stride_seq (448) is smaller than the 512 elements it must step over "
                      "((heads_q-1)*o.stride_head + head_dim_v = (8-1)*64 + 64)");
  }
  SUBCASE("o.stride_batch smaller than the rows it steps over") {
    p.o.stride_batch = 99 * 8 * 64;
    CHECK_REJECTED(p, "o.stride_batch (50688) is smaller than the 51200 elements");
  }
  SUBCASE("two dimensions with the same stride: both are named") {
    p.o.stride_head = 8 * 64;  // == stride_seq
    CHECK_REJECTED(p, "(change o.stride_head (512) or o.stride_seq (512))");
    p.o.stride_head = 64;
    p.o.stride_seq = 64;  // == stride_head: the user may have meant either
    CHECK_REJECTED(p, "(change o.stride_head (64) or o.stride_seq (64))");
  }
  SUBCASE("a permuted layout (BHSD) and padded strides are fine") {
    p.o.stride_seq = 64;
    p.o.stride_head = 100 * 64;
    p.o.stride_batch = 8 * 100 * 64;
    CHECK_NOTHROW(check_problem(p));
    p.o.stride_seq = 72;  // padded rows
    p.o.stride_head = 100 * 72 + 8;
    p.o.stride_batch = 8 * (100 * 72 + 8) + 64;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("a dimension of extent 1 may have any stride") {
    p.heads_q = 1;
    p.heads_kv = 1;
    p.o.stride_head = 8;
    CHECK_NOTHROW(check_problem(p));
    p.batch = 1;
    p.o.stride_batch = 8;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("inputs may overlap themselves") {
    p.q.stride_head = 8;
    p.q.stride_seq = 16;
    p.k.stride_seq = 8;
    p.v.stride_head = 32;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("lse.stride_head smaller than seqlen_q") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_head = 99;
    p.lse.stride_batch = 800;
    CHECK_REJECTED(p, "lse.stride_head (99) is smaller than the 100 elements it must step over "
                      "(seqlen_q = 100)");
    // (the hint is LSE's own layout, [batch, heads_q, seqlen_q], not O's)
    CHECK_REJECTED(p, "(contiguous: stride_head >= seqlen_q, stride_batch >= heads_q * stride_head)");
  }
  SUBCASE("lse.stride_batch smaller than the heads it steps over") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_head = 100;
    p.lse.stride_batch = 700;
    CHECK_REJECTED(p, "lse.stride_batch (700) is smaller than the 800 elements it must step over");
  }
  SUBCASE("lse sharing bytes with o is refused; next to it is fine") {
    // o spans [0x40000, 0x72000): 2 x 100 x 8 x 64 f16 elements
    p.lse.stride_head = 100;
    p.lse.stride_batch = 800;  // 1600 floats, 6400 bytes
    p.lse.data = reinterpret_cast<float*>(0x60000);
    CHECK_REJECTED(p, "lse (bytes [0x60000, 0x61900)) overlaps o (bytes [0x40000, 0x72000)); the forward's two "
                      "outputs must not overlap");
    p.lse.data = reinterpret_cast<float*>(0x40000 - 6400 + 4);  // its last element on o's first
    CHECK_REJECTED(p, "overlaps o (bytes [0x40000, 0x72000))");
    p.lse.data = reinterpret_cast<float*>(0x40000 - 6400);  // ends where o begins
    CHECK_NOTHROW(check_problem(p));
    p.lse.data = reinterpret_cast<float*>(0x72000);  // begins where o ends
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("lse with batch innermost is fine; overlapping it is not") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_batch = 100;
    p.lse.stride_head = 200;
    CHECK_NOTHROW(check_problem(p));
    p.lse.stride_head = 150;
    CHECK_REJECTED(p, "lse.stride_head (150) is smaller than the 200 elements it must step over");
  }
}

TEST_CASE("check_problem: 64-bit offset overflow") {
  AttentionProblem p = valid_problem();
  SUBCASE("q") {
    p.q.stride_batch = int64_t{1} << 62;  // 2^62 elements fit, 2^63 bytes do not
    CHECK_REJECTED(p, "q: the largest offset");
    p.batch = 1;  // the batch stride is then never multiplied
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("k") {
    p.seqlen_k = int64_t{1} << 40;
    p.k.stride_seq = int64_t{1} << 30;
    CHECK_REJECTED(p, "k: the largest offset");
  }
  SUBCASE("byte offset (elements fit, bytes do not)") {
    p.batch = 3;
    p.v.stride_batch = int64_t{1} << 61;  // 2 * 2^61 elements fits int64, times 2 bytes does not
    CHECK_REJECTED(p, "v: the largest offset");
  }
  SUBCASE("bias") {
    p.bias.kind = BiasKind::input;
    p.bias.data = ptr(0x50000);
    p.bias.stride_head = int64_t{1} << 62;
    CHECK_REJECTED(p, "bias: the largest offset");
  }
  SUBCASE("lse") {
    p.lse.data = reinterpret_cast<float*>(0x8000000);
    p.lse.stride_head = 100;
    p.lse.stride_batch = int64_t{1} << 62;
    CHECK_REJECTED(p, "lse: the largest offset");
  }
  SUBCASE("make_bshd_problem with absurd sizes") {
    auto q = make_bshd_problem(DType::f16, 2, int64_t{1} << 62, 16, 8, 8, 256, 256, MaskKind::none,
                               ptr(0x10000), ptr(0x20000), ptr(0x30000), mut_ptr(0x40000));
    CHECK_REJECTED(q, "the largest offset");
  }
}

namespace {

// A packed batch of 3 sequences (max_seqlen_q 100, max_seqlen_k 120; 250 query
// rows and 300 keys in all), 8 query heads over 2 KV heads, head_dim 96,
// head_dim_v 64: Q/O [total_q, heads, d] and K/V [total_k, heads, d] with
// stride_batch 0.
AttentionProblem valid_packed_problem() {
  AttentionProblem p = valid_problem();
  p.batch = 3;
  for (TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) t->stride_batch = 0;
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x70000});
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70100});
  p.total_q = 250;
  p.total_k = 300;
  return p;
}

}  // namespace

TEST_CASE("check_problem: packed (varlen) batches") {
  AttentionProblem p = valid_packed_problem();
  CHECK(p.varlen());
  CHECK_FALSE(valid_problem().varlen());
  CHECK_NOTHROW(check_problem(p));
  p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70200});
  CHECK_NOTHROW(check_problem(p));
  // LSE [heads_q, total_q]: stride_batch 0, stride_head >= total_q.
  p.lse.data = reinterpret_cast<float*>(0x8000000);
  p.lse.stride_head = 250;
  p.lse.stride_batch = 0;
  CHECK_NOTHROW(check_problem(p));
  p.lse.stride_head = 249;  // rows of two heads would overlap: the extent is total_q, not seqlen_q
  CHECK_REJECTED(p, "lse.stride_head (249) is smaller than the 250 elements it must step over (total_q = 250)");
  p.lse.stride_head = 250;
  p.lse.stride_batch = 250 * 8;  // the dense layout's
  CHECK_REJECTED(p, "lse.stride_batch (2000) must be 0 with cu_seqlens_q: a packed batch's LSE is [heads_q, total_q]");

  SUBCASE("cu_seqlens_k is required") {
    p = valid_packed_problem();
    p.cu_seqlens_k = nullptr;
    CHECK_REJECTED(p, "cu_seqlens_k is null but cu_seqlens_q is set; a packed batch needs both (int32 [batch + 1]");
  }
  SUBCASE("total_q and total_k are in [0, 2^31 - 257]") {
    for (const int64_t bad : {int64_t{-1}, int64_t{2147483648} - 256, std::numeric_limits<int64_t>::max()}) {
      CAPTURE(bad);
      p = valid_packed_problem();
      p.total_q = bad;
      CHECK_REJECTED(p, fmt::format("total_q ({}) must be in [0, 2^31 - 257] (the packed rows, counted by int32 "
                                    "offsets, with a tile's headroom)",
                                    bad).c_str());
      p = valid_packed_problem();
      p.total_k = bad;
      CHECK_REJECTED(p, fmt::format("total_k ({}) must be in [0, 2^31 - 257]", bad).c_str());
    }
    p = valid_packed_problem();
    p.total_q = 2147483647 - 256;  // the largest; the tensors' offsets still fit
    p.total_k = 2147483647 - 256;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("the offsets' pointers are 4-byte aligned") {
    p = valid_packed_problem();
    p.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x70002});
    CHECK_REJECTED(p, "cu_seqlens_q (0x70002) must be 4-byte aligned (int32)");
    p = valid_packed_problem();
    p.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70101});
    CHECK_REJECTED(p, "cu_seqlens_k (0x70101) must be 4-byte aligned (int32)");
    p = valid_packed_problem();
    p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70203});
    CHECK_REJECTED(p, "seqused_k (0x70203) must be 4-byte aligned (int32)");
  }
  SUBCASE("q, k, v and o have stride_batch 0") {
    for (const char* name : {"q", "k", "v", "o"}) {
      CAPTURE(name);
      p = valid_packed_problem();
      TensorRef& t = name[0] == 'q' ? p.q : name[0] == 'k' ? p.k : name[0] == 'v' ? p.v : p.o;
      t.stride_batch = 4096;
      CHECK_REJECTED(p, fmt::format("{}.stride_batch (4096) must be 0 with cu_seqlens_q: a packed batch is [total, "
                                    "heads, d], its sequences found through cu_seqlens",
                                    name)
                            .c_str());
    }
  }
  SUBCASE("the tensors' extents are the packed rows") {
    p = valid_packed_problem();
    p.o.stride_seq = 8;  // smaller than heads_q * stride_head: two packed rows of O would overlap
    CHECK_REJECTED(p, "o.stride_seq (8) is smaller than");
    p = valid_packed_problem();
    p.k.stride_seq = int64_t{1} << 55;  // (total_k - 1) * 2^55 elements overflow a signed 64-bit offset
    CHECK_REJECTED(p, "k: the largest offset (batch-1)*stride_batch + (total_k-1)*stride_seq");
  }
  SUBCASE("without cu_seqlens_q the other four are unset") {
    for (int field = 0; field < 4; ++field) {
      CAPTURE(field);
      p = valid_problem();
      if (field == 0) p.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70100});
      if (field == 1) p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70200});
      if (field == 2) p.total_q = 250;
      if (field == 3) p.total_k = 300;
      CHECK_REJECTED(p, field == 1 ? "seqused_k (0x70200) is set without cu_seqlens_q or page_table; it counts the "
                                     "used keys of a packed batch or a paged KV cache"
                                   : "describe a packed batch and must be unset (null, 0) without cu_seqlens_q; set "
                                     "cu_seqlens_q for a packed batch");
    }
    p = valid_problem();
    p.total_q = 250;
    CHECK_REJECTED(p, "total_q (250)");
  }
  SUBCASE("no packed rows: nothing is read, pointers may be null") {
    p = valid_packed_problem();
    p.total_q = 0;
    p.q.data = nullptr;
    p.o.data = nullptr;
    p.k.data = nullptr;
    p.v.data = nullptr;
    CHECK_NOTHROW(check_problem(p));
    p = valid_packed_problem();
    p.total_k = 0;  // rows without keys: Q and O are still needed
    p.k.data = nullptr;
    p.v.data = nullptr;
    CHECK_NOTHROW(check_problem(p));
    p.o.data = nullptr;
    CHECK_REJECTED(p, "o.data is null");
  }
}

namespace {

// valid_problem() with a paged KV cache: 2 sequences of at most 120 keys in pages of 16
// slots (8 table entries each), 20 pages [page, slot, heads_kv 2, d] (K d 96, V d 64).
AttentionProblem valid_paged_problem() {
  AttentionProblem p = valid_problem();
  p.page_table = reinterpret_cast<const int32_t*>(uintptr_t{0x71000});
  p.page_table_stride = 8;
  p.page_size = 16;
  p.num_pages = 20;
  p.k.stride_batch = 16 * p.k.stride_seq;
  p.v.stride_batch = 16 * p.v.stride_seq;
  return p;
}

}  // namespace

TEST_CASE("check_problem: paged KV caches") {
  AttentionProblem p = valid_paged_problem();
  CHECK(p.paged());
  CHECK_FALSE(valid_problem().paged());
  CHECK_NOTHROW(check_problem(p));
  p.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70200});  // per-sequence key counts
  CHECK_NOTHROW(check_problem(p));
  for (const int64_t ps : {1, 2, 4, 8, 32, 64, 128, 256}) {
    CAPTURE(ps);
    p = valid_paged_problem();
    p.page_size = ps;
    p.page_table_stride = (p.seqlen_k + ps - 1) / ps;
    p.k.stride_batch = ps * p.k.stride_seq;
    p.v.stride_batch = ps * p.v.stride_seq;
    CHECK_NOTHROW(check_problem(p));
  }
  SUBCASE("page_size is a power of two in [1, 256]") {
    for (const int64_t bad : {int64_t{0}, int64_t{-16}, int64_t{3}, int64_t{24}, int64_t{512}}) {
      CAPTURE(bad);
      p = valid_paged_problem();
      p.page_size = bad;
      CHECK_REJECTED(p, fmt::format("page_size ({}) must be a power of two in [1, 256]", bad).c_str());
    }
  }
  p = valid_paged_problem();
  SUBCASE("page_table_stride holds a sequence's pages") {
    p.page_table_stride = 7;  // ceil(120 / 16) = 8
    CHECK_REJECTED(p, "page_table_stride (7) must be at least ceil(seqlen_k / page_size) = ceil(120 / 16) = 8");
  }
  SUBCASE("num_pages") {
    p.num_pages = 0;
    CHECK_REJECTED(p, "num_pages (0) must be >= 1 with a page_table and seqlen_k (120) > 0");
    p.num_pages = -1;
    CHECK_REJECTED(p, "num_pages (-1) must be in [0, 2^31 - 257]");
  }
  SUBCASE("a misaligned table") {
    p.page_table = reinterpret_cast<const int32_t*>(uintptr_t{0x71002});
    CHECK_REJECTED(p, "page_table (0x71002) must be 4-byte aligned (int32)");
  }
  SUBCASE("the page fields without a table") {
    for (int field = 0; field < 3; ++field) {
      CAPTURE(field);
      p = valid_problem();
      if (field == 0) p.page_table_stride = 8;
      if (field == 1) p.page_size = 16;
      if (field == 2) p.num_pages = 20;
      CHECK_REJECTED(p, "describe a paged KV cache and must be 0 without page_table");
    }
  }
  SUBCASE("K/V pages are bounded like tensors: [num_pages, page_size, heads_kv, d]") {
    p.k.stride_batch = std::numeric_limits<int64_t>::max() / 8 * 8;
    CHECK_REJECTED(p, "k: the largest offset");
  }
  SUBCASE("with a packed batch of queries: cu_seqlens_k null, total_k 0") {
    p = valid_paged_problem();
    p.q.stride_batch = p.o.stride_batch = 0;
    p.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x70000});
    p.total_q = 250;
    CHECK_NOTHROW(check_problem(p));
    p.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x70100});
    CHECK_REJECTED(p, "cu_seqlens_k (0x70100) must be null with a page_table");
    p.cu_seqlens_k = nullptr;
    p.total_k = 300;
    CHECK_REJECTED(p, "total_k (300) must be 0 with a page_table");
  }
}
