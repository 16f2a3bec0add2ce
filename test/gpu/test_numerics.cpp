// GPU tier, numerics (issue 11; DESIGN "Numerics"): finite logits of every
// fp32 magnitude, built from Q/K and from the bias, on every matrix unit of the
// device, against the float64 softmax of the fp32-rounded logits (the
// reference's RowBounds widen the tolerance by what fp32 sums of logits that
// large cannot avoid); and NaN / +inf inputs, which may make only the rows that
// read them NaN (every other row, head and batch compared with the reference).
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "test/gpu/gpu_run.hpp"

namespace {

using namespace fgtest;

constexpr float kLowest = std::numeric_limits<float>::lowest();
constexpr float kLargest = std::numeric_limits<float>::max();

// Shapes that give several key tiles, a partial last tile, GQA and (with
// causal bottom-right and seqlen_q > seqlen_k) rows that see no key.
struct Shape {
  int64_t head_dim, seqlen_q, seqlen_k, heads_q, heads_kv;
  MaskKind mask;
};
constexpr Shape kShapes[] = {
    {64, 77, 300, 4, 2, MaskKind::none},
    {128, 130, 257, 2, 1, MaskKind::causal_top_left},
    {96, 200, 150, 4, 2, MaskKind::causal_bottom_right},  // rows 0..49 see no key
    {80, 64, 193, 3, 3, MaskKind::causal_bottom_right},
};

Case shaped(const char* group, DType dt, int k) {
  const Shape& s = kShapes[k % 4];
  Case c = base(group);
  c.dtype = dt;
  c.head_dim = c.head_dim_v = s.head_dim;
  c.seqlen_q = s.seqlen_q;
  c.seqlen_k = s.seqlen_k;
  c.heads_q = s.heads_q;
  c.heads_kv = s.heads_kv;
  c.mask = s.mask;
  c.batch = 2;
  return c;
}

// Logits from Q and K: |S| around 1e2 ... up to what the dtype holds (f16
// inputs up to 65504, so |S| up to ~1e8; bf16 up to ~1e37).
std::vector<Case> qk_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : {DType::f16, DType::bf16}) {
    std::vector<double> mags{1e2, 1e4, 1e6};
    if (dt == DType::f16) mags.push_back(1e8);
    else mags.insert(mags.end(), {1e11, 1e20, 1e30, 1e37});
    for (double m : mags) {
      Case c = shaped("logits qk", dt, k++);
      c.logits = Logits::qk;
      c.magnitude = m;
      v.push_back(c);
    }
  }
  return v;
}

// Logits from the bias: bias = M + u[-2, 2] for M from +-1e2 to the fp32
// limits; f32 bias, and the input dtype's bias where it holds M. Some cases
// add -inf entries and whole -inf rows / prefixes (fully masked tiles).
std::vector<Case> bias_shift_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : {DType::f16, DType::bf16}) {
    // 3e7, 1.2e8, 3e8: where the softmax offsets change frame (2^26, 2^27, 2^29) and fp32 logits
    // are 2-32 apart, so the keys one step below the max still weigh e^-2 .. e^-32.
    for (double m : {1e2, 1e4, 1e6, 3e7, 1.2e8, 3e8, 1e10, 1e20, 1e30, 3e38}) {
      for (double sign : {1.0, -1.0}) {
        Case c = shaped("logits bias", dt, k++);
        c.bias = BiasKind::f32;
        c.logits = Logits::bias_shift;
        c.magnitude = sign * m;
        c.bias_neg_inf_rows = k % 3 == 0;
        c.bias_neg_inf = k % 4 == 1;
        v.push_back(c);
      }
    }
    const double input_max = dt == DType::f16 ? 6e4 : 1e30;
    for (double sign : {1.0, -1.0}) {
      Case c = shaped("logits bias", dt, k++);
      c.bias = BiasKind::input;
      c.logits = Logits::bias_shift;
      c.magnitude = sign * input_max;
      v.push_back(c);
    }
  }
  return v;
}

// All-equal rows (O = mean of V, LSE = M + ln n), one huge logit among tiny
// ones (O = its V row; often in a later key tile, so the offsets move from
// small to huge mid-row), and bias rows of the fp32 lowest value.
std::vector<Case> pattern_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (double m : {static_cast<double>(kLowest), -1e30, -7.0, 1e30, static_cast<double>(kLargest)}) {
      Case c = shaped("logits all-equal", dt, k++);
      c.bias = BiasKind::f32;
      c.logits = Logits::all_equal;
      c.magnitude = m;
      c.bias_neg_inf_rows = k % 2 == 0;
      v.push_back(c);
    }
    for (double m : {1e4, 1e6, 1e30, static_cast<double>(kLargest)}) {
      Case c = shaped("logits one-huge", dt, k++);
      c.bias = BiasKind::f32;
      c.logits = Logits::one_huge;
      c.magnitude = m;
      v.push_back(c);
    }
    for (int r = 0; r < 2; ++r) {
      Case c = shaped("logits lowest rows", dt, k++);
      c.bias = BiasKind::f32;
      c.logits = Logits::lowest_rows;
      c.bias_neg_inf_rows = r == 1;
      v.push_back(c);
    }
  }
  return v;
}

// A NaN or +inf in Q, K, V or the bias; every row is checked, and the rows
// that do not read it must equal the reference (the others may be NaN). V
// under causal masks: bad values at keys that rows of the same query block do
// not see (a masked weight 0 times NaN is NaN), several in one tile, both
// alignments, seqlen_q < seqlen_k and > seqlen_k, head dims of one and of two
// chunks (96 = 64 + 32), and more query blocks than the GPU holds at once.
std::vector<Case> poison_cases() {
  std::vector<Case> v;
  int k = 0;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (Poison where : {Poison::q, Poison::k, Poison::v, Poison::bias}) {
      for (MaskKind mask : {MaskKind::none, MaskKind::causal_top_left}) {
        Case c = base("poison");
        c.dtype = k++ % 3 == 2 ? DType::bf16 : DType::f16;
        c.head_dim = c.head_dim_v = 64;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.seqlen_q = 150;
        c.seqlen_k = 150;
        c.mask = mask;
        c.poison = where;
        c.poison_value = bad;
        c.bias = where == Poison::bias ? BiasKind::f32 : BiasKind::none;
        c.sample_rows = 0;
        v.push_back(c);
      }
    }
    struct Shape {
      MaskKind mask;
      int64_t sq, sk, d;
    };
    for (const Shape& s : {Shape{MaskKind::causal_top_left, 200, 200, 96}, Shape{MaskKind::causal_bottom_right, 100, 230, 64},
                           Shape{MaskKind::causal_bottom_right, 190, 130, 128}, Shape{MaskKind::causal_top_left, 77, 300, 80}}) {
      Case c = base("poison");
      c.dtype = k++ % 2 == 1 ? DType::bf16 : DType::f16;
      c.head_dim = c.head_dim_v = s.d;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = s.sq;
      c.seqlen_k = s.sk;
      c.mask = s.mask;
      c.poison = Poison::v_many;
      c.poison_value = bad;
      c.lse = true;
      c.sample_rows = 0;
      v.push_back(c);
    }
    // More work items than resident blocks: the persistent wgmma kernel's
    // blocks take several items each, so the band tiles' scans follow each
    // other through every stage.
    Case c = base("poison");
    c.dtype = k++ % 2 == 1 ? DType::bf16 : DType::f16;
    c.head_dim = c.head_dim_v = 64;
    c.batch = 2;
    c.heads_q = 16;
    c.heads_kv = 4;
    c.seqlen_q = 1100;
    c.seqlen_k = 1100;
    c.mask = MaskKind::causal_top_left;
    c.poison = Poison::v_many;
    c.poison_value = bad;
    c.sample_rows = 0;
    v.push_back(c);
  }
  return v;
}

}  // namespace

TEST_SUITE("gpu") {

FLASHGEN_GPU_TEST("numerics: logits from Q and K at |S| 1e2 .. 1e37") { run_group("logits qk", qk_cases()); }

FLASHGEN_GPU_TEST("numerics: logits from the bias at +-1e2 .. the fp32 limits") {
  run_group("logits bias", bias_shift_cases());
}

FLASHGEN_GPU_TEST("numerics: all-equal rows, one huge logit, fp32-lowest rows") {
  run_group("logits patterns", pattern_cases());
}

FLASHGEN_GPU_TEST("numerics: a NaN or +inf input changes only the rows that read it") {
  run_group("poison", poison_cases());
}

}  // TEST_SUITE
