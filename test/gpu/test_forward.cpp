// GPU tier: flashgen::forward against the float64 reference on fresh random
// inputs, with poisoned outputs that must be overwritten exactly where the
// output views are. Every test case is skipped (and counted as skipped by
// doctest) when no GPU is present.
//
// Per case one line: the case, where the kernel came from (disk cache or
// NVRTC), rows checked, max |error| of O and LSE, ok / FAIL. Set
// FLASHGEN_TEST_SEED=<n> to rerun with fixed inputs (the seed of a failing case
// is printed). FLASHGEN_TEST_QUICK=1 runs only a small representative subset
// (quick_cases) and the refusal checks, for the compute-sanitizer runs.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "test/gpu/gpu_run.hpp"

namespace {

using namespace fgtest;

constexpr MaskKind kMasks[3] = {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right};
constexpr DType kDtypes[2] = {DType::f16, DType::bf16};
constexpr int64_t kSeqlens[11] = {1, 2, 17, 63, 64, 65, 127, 128, 129, 1000, 4097};

// Every multiple of 8 from 16 to 256, both dtypes; masks and LSE rotate.
std::vector<Case> head_dim_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : kDtypes)
    for (int64_t d = 16; d <= 256; d += 8, ++k) {
      Case c = base("head_dim");
      c.dtype = dt;
      c.head_dim = c.head_dim_v = d;
      c.batch = 1;
      c.heads_q = 2;
      c.heads_kv = 2;
      c.seqlen_q = 65;
      c.seqlen_k = 129;
      c.mask = kMasks[k % 3];
      c.lse = k % 4 != 3;
      v.push_back(c);
    }
  return v;
}

// head_dim != head_dim_v, both directions, both dtypes.
std::vector<Case> head_dim_v_cases() {
  struct P {
    int64_t d, dv;
  };
  const P pairs[] = {{64, 128}, {192, 128}, {128, 64}, {16, 256}, {256, 16}, {96, 40}, {40, 96}, {80, 48}, {256, 128}, {32, 64}};
  std::vector<Case> v;
  int k = 0;
  for (const P& p : pairs) {
    for (DType dt : kDtypes) {
      Case c = base("d!=dv");
      c.dtype = dt;
      c.head_dim = p.d;
      c.head_dim_v = p.dv;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = 100;
      c.seqlen_k = 150;
      c.mask = kMasks[k % 3];
      c.lse = k % 5 != 4;
      ++k;
      v.push_back(c);
    }
  }
  return v;
}

// head_dim != head_dim_v with many work items per block (more than every SM's
// blocks take at once): the Q and O tiles share shared memory, in chunks of
// different widths when the head dims differ (wgmma: 128 = 64 + 64 against
// 96 = 64 + 32; 80 = 64 + 16 against 96), and a block's next item must not
// meet the previous one's O there. Sampled rows, every O element checked for
// poison.
std::vector<Case> head_dim_v_many_items_cases() {
  struct P {
    int64_t d, dv;
    MaskKind mask;
  };
  const P pairs[] = {{128, 96, MaskKind::none},
                     {96, 128, MaskKind::causal_bottom_right},
                     {80, 96, MaskKind::none},
                     {96, 64, MaskKind::causal_top_left}};
  std::vector<Case> v;
  int k = 0;
  for (const P& p : pairs) {
    Case c = base("d!=dv, many items");
    c.dtype = k % 2 == 0 ? DType::f16 : DType::bf16;
    c.head_dim = p.d;
    c.head_dim_v = p.dv;
    c.batch = 4;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seqlen_q = c.seqlen_k = 1000;  // 8 blocks of 128 rows (6 of 192) a head: 768-1024 items
    c.mask = p.mask;
    c.lse = k % 2 == 1;
    c.sample_rows = 512;
    ++k;
    v.push_back(c);
  }
  return v;
}

// Masked grids in several longest-first groups of unequal size (the mma.sync
// and m8n8k4 kernels: templates/fwd_block.cuh, fg_lpt_order; rt::lpt_groups
// sizes a group to the pairs whose K/V fit in half the L2). seqlen_k is chosen
// from this GPU's L2 so that a group holds at most 4 (batch, head) pairs of 2
// per K/V head: 18 pairs form groups of 4, 4, 4, 3, 3, 10 pairs 4, 3, 3 and 14
// pairs 4, 4, 3, 3 (the other tiers' problems fit one group). A block the
// order skipped leaves poison in O; sampled rows against the reference.
std::vector<Case> lpt_groups_cases() {
  const int64_t l2 = flashgen::current_device().l2_bytes;
  struct P {
    DType dt;
    int64_t d, dv, batch, heads_q;
    MaskKind mask;
    int64_t window_left;
  };
  const P ps[] = {{DType::f16, 64, 64, 3, 6, MaskKind::causal_bottom_right, -1},
                  {DType::bf16, 128, 64, 1, 10, MaskKind::window_bottom_right, 5000},
                  {DType::bf16, 96, 96, 1, 14, MaskKind::causal_top_left, -1}};
  std::vector<Case> v;
  for (const P& p : ps) {
    Case c = base("longest-first groups");
    c.dtype = p.dt;
    c.head_dim = p.d;
    c.head_dim_v = p.dv;
    c.batch = p.batch;
    c.heads_q = p.heads_q;
    c.heads_kv = p.heads_q / 2;
    // A pair's share of its K/V head, seqlen_k * (d + dv) * 2 bytes / 2, is l2 / 2 / 4.5.
    c.seqlen_k = l2 > 0 ? l2 / (9 * (p.d + p.dv)) : 40000;
    c.seqlen_q = p.mask == MaskKind::causal_top_left ? c.seqlen_k : 700;
    c.mask = p.mask;
    c.window_left = p.window_left;
    c.window_right = p.mask == MaskKind::window_bottom_right ? 0 : -1;
    c.sample_rows = 256;
    v.push_back(c);
  }
  return v;
}

// All 121 (seqlen_q, seqlen_k) pairs, at head dims 64, 96 and 128. Dtype and
// mask follow r = iq + ik + shift (shift 0, 1, 2 by head dim): for a fixed
// seqlen on one side the other side's 11 values walk through all 6 (dtype,
// mask) combinations, so every mask and dtype meets every seqlen on both
// sides at each head dim; over the three head dims every pair meets every
// mask and both dtypes.
std::vector<Case> seqlen_cases(int64_t head_dim) {
  std::vector<Case> v;
  const int shift = head_dim == 64 ? 0 : head_dim == 96 ? 1 : 2;
  const std::string group = fmt::format("seqlen d{}", head_dim);
  for (int iq = 0; iq < 11; ++iq)
    for (int ik = 0; ik < 11; ++ik) {
      Case c = base(group.c_str());
      const int r = iq + ik + shift;
      c.dtype = kDtypes[r % 2];
      c.mask = kMasks[r % 3];
      c.head_dim = c.head_dim_v = head_dim;
      c.seqlen_q = kSeqlens[iq];
      c.seqlen_k = kSeqlens[ik];
      switch (shift) {
        case 0:  // GQA 2
          c.batch = 1;
          c.heads_q = 2;
          c.heads_kv = 1;
          c.lse = true;
          break;
        case 1:  // two batches
          c.batch = 2;
          c.heads_q = 2;
          c.heads_kv = 2;
          c.lse = (iq * 11 + ik) % 2 == 0;
          break;
        default:  // MQA 4
          c.batch = 1;
          c.heads_q = 4;
          c.heads_kv = 1;
          c.lse = (iq * 11 + ik) % 2 == 1;
          break;
      }
      v.push_back(c);  // sample_rows auto: 256 sampled rows when a side is 4097
    }
  return v;
}

// Additive bias: input dtype and f32; random values, -inf entries, whole -inf
// rows and -inf prefixes; broadcast over batch and heads via stride 0.
std::vector<Case> bias_cases() {
  std::vector<Case> v;
  int k = 0;
  for (BiasKind bk : {BiasKind::input, BiasKind::f32})
    for (DType dt : kDtypes)
      for (int pattern = 0; pattern < 3; ++pattern, ++k) {
        Case c = base("bias");
        c.dtype = dt;
        c.bias = bk;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.seqlen_q = 77;
        c.seqlen_k = 200;
        c.head_dim = c.head_dim_v = k % 2 == 0 ? 64 : 128;
        c.mask = kMasks[k % 3];
        c.bias_neg_inf = pattern != 1;
        c.bias_neg_inf_rows = pattern != 0;
        c.bias_broadcast = pattern == 2;
        c.lse = true;
        v.push_back(c);
      }
  // Longer rows: several key tiles, broadcast f32 bias with -inf rows.
  Case big = base("bias");
  big.dtype = DType::bf16;
  big.bias = BiasKind::f32;
  big.bias_neg_inf = big.bias_neg_inf_rows = big.bias_broadcast = true;
  big.batch = 1;
  big.heads_q = 2;
  big.heads_kv = 1;
  big.seqlen_q = big.seqlen_k = 1000;
  big.head_dim = big.head_dim_v = 128;
  big.mask = MaskKind::causal_bottom_right;
  v.push_back(big);
  // Decode-like: one query against 4097 keys, input-dtype bias with -inf entries.
  Case dec = base("bias");
  dec.dtype = DType::f16;
  dec.bias = BiasKind::input;
  dec.bias_neg_inf = true;
  dec.batch = 2;
  dec.heads_q = 8;
  dec.heads_kv = 2;
  dec.seqlen_q = 1;
  dec.seqlen_k = 4097;
  dec.sample_rows = 0;  // all 16 rows
  dec.head_dim = dec.head_dim_v = 64;
  dec.mask = MaskKind::causal_bottom_right;
  v.push_back(dec);
  // Bias with the seqlen_q > seqlen_k bottom-right mask (rows without keys) and no LSE.
  Case nokey = base("bias");
  nokey.dtype = DType::f16;
  nokey.bias = BiasKind::f32;
  nokey.bias_neg_inf = true;
  nokey.batch = 1;
  nokey.heads_q = 2;
  nokey.heads_kv = 2;
  nokey.seqlen_q = 150;
  nokey.seqlen_k = 70;
  nokey.head_dim = nokey.head_dim_v = 96;
  nokey.mask = MaskKind::causal_bottom_right;
  nokey.lse = false;
  v.push_back(nokey);
  return v;
}

// GQA group sizes 1, 2, 4, 7, 8 (heads_kv 2, and 1 / 3 for MQA and an odd count).
std::vector<Case> gqa_cases() {
  std::vector<Case> v;
  int k = 0;
  for (int64_t group : {1, 2, 4, 7, 8})
    for (DType dt : kDtypes) {
      Case c = base("gqa");
      c.dtype = dt;
      c.heads_kv = 2;
      c.heads_q = 2 * group;
      c.batch = 2;
      c.seqlen_q = 97;
      c.seqlen_k = 160;
      c.head_dim = c.head_dim_v = k % 2 == 0 ? 64 : 128;
      c.mask = kMasks[k % 3];
      c.lse = true;
      ++k;
      v.push_back(c);
    }
  Case mqa = base("gqa");
  mqa.heads_q = 8;
  mqa.heads_kv = 1;
  mqa.batch = 3;
  mqa.seqlen_q = 50;
  mqa.seqlen_k = 300;
  mqa.mask = MaskKind::causal_bottom_right;
  v.push_back(mqa);
  Case odd = base("gqa");
  odd.dtype = DType::bf16;
  odd.heads_q = 21;
  odd.heads_kv = 3;
  odd.batch = 1;
  odd.seqlen_q = 130;
  odd.seqlen_k = 130;
  odd.head_dim = odd.head_dim_v = 96;
  odd.mask = MaskKind::causal_top_left;
  v.push_back(odd);
  return v;
}

// The same shapes with and without the LSE output.
std::vector<Case> lse_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : kDtypes)
    for (bool lse : {true, false}) {
      Case c = base("lse");
      c.dtype = dt;
      c.lse = lse;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 4;
      c.seqlen_q = 200;
      c.seqlen_k = 333;
      c.head_dim = c.head_dim_v = 128;
      c.mask = kMasks[k++ % 3];
      v.push_back(c);
    }
  return v;
}

// Softcap (cap * tanh(S / cap)): every mask, both dtypes, bias, GQA, head
// dims of one and of several chunks, caps that bind (logits around 1e2 and
// 1e4 from Q and K, far past the cap) and one that barely does.
std::vector<Case> softcap_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : kDtypes)
    for (float cap : {5.0f, 30.0f, 1000.0f}) {
      Case c = base("softcap");
      c.dtype = dt;
      c.softcap = cap;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = 150;
      c.seqlen_k = 333;
      c.head_dim = c.head_dim_v = k % 3 == 0 ? 64 : (k % 3 == 1 ? 96 : 128);
      c.mask = kMasks[k % 3];
      c.bias = k % 2 == 0 ? BiasKind::f32 : BiasKind::none;
      c.bias_neg_inf = c.bias != BiasKind::none;
      c.logits = Logits::qk;
      c.magnitude = k % 2 == 0 ? 1e2 : 1e4;
      c.lse = true;
      v.push_back(c);
      ++k;
    }
  // Several key tiles per row and a head dim of four chunks.
  Case c = base("softcap");
  c.dtype = DType::bf16;
  c.softcap = 50.0f;
  c.heads_q = c.heads_kv = 2;
  c.seqlen_q = c.seqlen_k = 1000;
  c.head_dim = c.head_dim_v = 256;
  c.mask = MaskKind::causal_bottom_right;
  v.push_back(c);
  return v;
}

// Sliding windows (issue 13): both alignments, windows smaller than, equal to
// and larger than the sequences, one side unbounded, only the diagonal; GQA,
// bias, seqlen_q above and below seqlen_k, head dims of one and several chunks.
std::vector<Case> window_cases() {
  struct W {
    int64_t left, right;
  };
  const W windows[] = {{16, 0}, {100, 20}, {-1, 8}, {5, -1}, {0, 0}, {332, 0}, {1000, 1000}, {40, 40}};
  std::vector<Case> v;
  int k = 0;
  for (const W& w : windows)
    for (MaskKind m : {MaskKind::window_top_left, MaskKind::window_bottom_right}) {
      Case c = base("window");
      c.dtype = kDtypes[k % 2];
      c.mask = m;
      c.window_left = w.left;
      c.window_right = w.right;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = k % 3 == 0 ? 1 : 2;
      c.seqlen_q = k % 4 == 3 ? 400 : 150;
      c.seqlen_k = 333;
      c.head_dim = c.head_dim_v = k % 3 == 0 ? 64 : (k % 3 == 1 ? 96 : 128);
      c.bias = k % 5 == 0 ? BiasKind::f32 : BiasKind::none;
      c.bias_neg_inf = c.bias != BiasKind::none;
      c.lse = k % 4 != 1;
      v.push_back(c);
      ++k;
    }
  // Long rows: many tiles skipped on both sides, the wgmma tiles' loops.
  for (int64_t d : {128, 256}) {
    Case c = base("window");
    c.dtype = d == 128 ? DType::bf16 : DType::f16;
    c.mask = MaskKind::window_bottom_right;
    c.window_left = 256;
    c.window_right = 0;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 1000;
    c.seqlen_k = 1500;
    c.head_dim = c.head_dim_v = d;
    v.push_back(c);
  }
  return v;
}

// Non-finite V under windows: some rows see the bad keys, others (on either
// side of the window) do not and must stay exact.
std::vector<Case> window_poison_cases() {
  std::vector<Case> v;
  int k = 0;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    for (MaskKind m : {MaskKind::window_top_left, MaskKind::window_bottom_right})
      for (int64_t d : {64, 128}) {
        Case c = base("window poison");
        c.dtype = kDtypes[k % 2];
        c.mask = m;
        c.window_left = k % 2 == 0 ? 32 : 3;
        c.window_right = k % 4 < 2 ? 8 : 0;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.seqlen_q = 300;
        c.seqlen_k = 300;
        c.head_dim = c.head_dim_v = d;
        c.poison = Poison::v_many;
        c.poison_value = bad;
        c.sample_rows = 0;
        v.push_back(c);
        ++k;
      }
  return v;
}

// Learnable sinks: every mask, rows that see no key (whole -inf bias rows, a
// window past the keys) get O = 0 and LSE = sink; GQA; both dtypes.
std::vector<Case> sinks_cases() {
  std::vector<Case> v;
  const MaskKind masks[] = {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right,
                            MaskKind::window_bottom_right};
  int k = 0;
  for (DType dt : kDtypes)
    for (MaskKind m : masks) {
      Case c = base("sinks");
      c.dtype = dt;
      c.mask = m;
      c.window_left = 20;
      c.window_right = 3;
      c.sinks = true;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = k % 2 == 0 ? 150 : 400;
      c.seqlen_k = 333;
      c.head_dim = c.head_dim_v = k % 3 == 0 ? 64 : (k % 3 == 1 ? 96 : 128);
      c.bias = k % 2 == 0 ? BiasKind::f32 : BiasKind::input;
      c.bias_neg_inf_rows = true;  // whole -inf rows: no key seen
      c.lse = k % 4 != 3;
      v.push_back(c);
      ++k;
    }
  // No keys at all: every row is the sink's.
  Case c = base("sinks");
  c.sinks = true;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 70;
  c.seqlen_k = 0;
  v.push_back(c);
  return v;
}

// ALiBi against the reference's explicit -slope * |i + off - j|: every
// alignment, slopes per head and per (batch, head), with a bias, softcap and a window.
std::vector<Case> alibi_cases() {
  std::vector<Case> v;
  const MaskKind masks[] = {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right,
                            MaskKind::window_top_left};
  int k = 0;
  for (DType dt : kDtypes)
    for (MaskKind m : masks) {
      Case c = base("alibi");
      c.dtype = dt;
      c.mask = m;
      c.window_left = 64;
      c.window_right = 16;
      c.alibi = true;
      c.alibi_per_batch = k % 2 == 1;
      c.batch = 2;
      c.heads_q = 8;
      c.heads_kv = 2;
      c.seqlen_q = k % 2 == 0 ? 150 : 400;
      c.seqlen_k = 333;
      c.head_dim = c.head_dim_v = k % 3 == 0 ? 64 : (k % 3 == 1 ? 80 : 128);
      c.bias = k % 3 == 2 ? BiasKind::f32 : BiasKind::none;
      c.softcap = k % 4 == 1 ? 30.0f : 0.0f;
      c.sinks = k == 5;
      v.push_back(c);
      ++k;
    }
  return v;
}

// seqlen_k = 0 (O = 0, LSE = -inf, null K/V), seqlen_q = 0 and batch = 0 (no launch).
std::vector<Case> empty_cases() {
  std::vector<Case> v;
  int k = 0;
  for (DType dt : kDtypes)
    for (MaskKind m : kMasks) {
      Case c = base("empty");
      c.dtype = dt;
      c.mask = m;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = 65;
      c.seqlen_k = 0;
      c.lse = k % 3 != 2;
      if (k == 4) c.bias = BiasKind::f32;  // a bias that is never read: null is allowed
      ++k;
      v.push_back(c);
    }
  for (DType dt : kDtypes) {
    Case c = base("empty");
    c.dtype = dt;
    c.seqlen_q = 0;
    c.seqlen_k = 64;
    c.mask = MaskKind::causal_bottom_right;
    v.push_back(c);
  }
  Case nob = base("empty");
  nob.batch = 0;
  nob.seqlen_q = 10;
  nob.seqlen_k = 10;
  v.push_back(nob);
  return v;
}

// K/V stored once per (b, s) and read by several logical KV heads (stride_head 0).
std::vector<Case> kv_broadcast_cases() {
  std::vector<Case> v;
  Case a = base("kv stride_head 0");
  a.layout = Layout::kv_head_broadcast;
  a.heads_q = 4;
  a.heads_kv = 2;
  a.seqlen_q = 100;
  a.seqlen_k = 190;
  v.push_back(a);
  Case b = a;
  b.dtype = DType::bf16;
  b.heads_q = 8;
  b.heads_kv = 4;
  b.head_dim = b.head_dim_v = 128;
  b.mask = MaskKind::causal_bottom_right;
  b.batch = 2;
  v.push_back(b);
  // K/V shared by the batch (stride_batch 0; the wgmma kernel's tensor maps
  // map that dimension with extent 1), and one key row repeated (stride_seq
  // 0; plan() then takes the mma.sync unit, TMA cannot repeat a row).
  Case bb = a;
  bb.layout = Layout::kv_batch_broadcast;
  bb.batch = 3;
  bb.head_dim = bb.head_dim_v = 128;
  bb.mask = MaskKind::causal_top_left;
  v.push_back(bb);
  Case rb = a;
  rb.layout = Layout::kv_row_broadcast;
  rb.batch = 2;
  rb.head_dim = rb.head_dim_v = 64;
  v.push_back(rb);
  Case c = a;
  c.heads_q = 6;
  c.heads_kv = 6;
  c.head_dim = 96;
  c.head_dim_v = 64;
  c.mask = MaskKind::causal_top_left;
  c.lse = false;
  v.push_back(c);
  return v;
}

// Q, K, V as head slices of one [B, S, 3, H, d] buffer.
std::vector<Case> packed_cases() {
  std::vector<Case> v;
  auto add = [&](DType dt, int64_t B, int64_t S, int64_t H, int64_t d, MaskKind m, bool lse) {
    Case c = base("packed qkv");
    c.layout = Layout::packed_qkv;
    c.dtype = dt;
    c.batch = B;
    c.seqlen_q = c.seqlen_k = S;
    c.heads_q = c.heads_kv = H;
    c.head_dim = c.head_dim_v = d;
    c.mask = m;
    c.lse = lse;
    v.push_back(c);
  };
  add(DType::f16, 2, 130, 4, 64, MaskKind::none, true);
  add(DType::bf16, 1, 257, 3, 128, MaskKind::causal_top_left, true);
  add(DType::f16, 3, 64, 2, 96, MaskKind::causal_bottom_right, false);
  add(DType::bf16, 1, 1000, 2, 256, MaskKind::causal_bottom_right, true);
  return v;
}

// More (batch, head) pairs than a 65535 grid dimension holds.
std::vector<Case> big_grid_cases() {
  std::vector<Case> v;
  Case a = base("grid > 65535");
  a.batch = 1100;
  a.heads_q = 64;
  a.heads_kv = 64;
  a.seqlen_q = 2;
  a.seqlen_k = 2;
  a.head_dim = a.head_dim_v = 16;
  v.push_back(a);
  Case b = a;
  b.dtype = DType::bf16;
  b.heads_kv = 8;
  b.seqlen_k = 3;
  b.mask = MaskKind::causal_bottom_right;
  v.push_back(b);
  Case c = base("grid > 65535");
  c.batch = 2;
  c.heads_q = 40000;
  c.heads_kv = 5000;
  c.seqlen_q = 1;
  c.seqlen_k = 5;
  c.head_dim = c.head_dim_v = 16;
  c.mask = MaskKind::causal_top_left;
  v.push_back(c);
  return v;
}

// Every tensor padded (O and LSE padding must stay poisoned; NaN input padding
// must not leak into O).
std::vector<Case> padded_cases() {
  std::vector<Case> v;
  Case a = base("padded");
  a.layout = Layout::padded;
  a.batch = 2;
  a.heads_q = 4;
  a.heads_kv = 2;
  a.seqlen_q = 100;
  a.seqlen_k = 150;
  v.push_back(a);
  Case b = a;
  b.dtype = DType::bf16;
  b.head_dim = b.head_dim_v = 128;
  b.mask = MaskKind::causal_bottom_right;
  b.bias = BiasKind::input;
  b.bias_neg_inf = true;
  b.bias_neg_inf_rows = true;
  v.push_back(b);
  Case c = a;
  c.head_dim = 80;
  c.head_dim_v = 48;
  c.mask = MaskKind::causal_top_left;
  c.seqlen_q = 129;
  c.seqlen_k = 63;
  c.lse = false;
  v.push_back(c);
  Case d = a;
  d.dtype = DType::bf16;
  d.seqlen_q = 1;
  d.seqlen_k = 1;
  d.head_dim = d.head_dim_v = 256;
  v.push_back(d);
  return v;
}

// Long sequences with GQA (sampled rows; every O element still checked for poison).
std::vector<Case> long_cases() {
  std::vector<Case> v;
  Case a = base("long");
  a.dtype = DType::bf16;
  a.batch = 1;
  a.heads_q = 8;
  a.heads_kv = 2;
  a.seqlen_q = a.seqlen_k = 4097;
  a.head_dim = a.head_dim_v = 128;
  a.mask = MaskKind::causal_bottom_right;
  v.push_back(a);
  Case b = a;
  b.dtype = DType::f16;
  b.seqlen_q = 1000;
  b.seqlen_k = 8191;
  b.head_dim = b.head_dim_v = 64;
  b.mask = MaskKind::none;
  v.push_back(b);
  return v;
}

// FLASHGEN_TEST_QUICK=1: a representative subset with short sequences, for
// the compute-sanitizer runs (test/run_sanitizers_device.sh). It keeps every
// mask with both dtypes, head dims 16/72/96/128/256 and d != dv, query and key
// tails (seqlens that are not multiples of the block, 1 and 2), many key tiles
// (1000 keys), both bias kinds with -inf rows and broadcast, LSE on and off,
// GQA (odd group, MQA), seqlen_k = 0, seqlen_q = 0, batch = 0 and the padded,
// packed-QKV and K/V-broadcast layouts.
std::vector<Case> quick_cases() {
  std::vector<Case> v;
  struct Shape {
    int64_t sq, sk;
  };
  const Shape shapes[] = {{65, 129}, {17, 63}, {1, 2}, {129, 65}, {64, 64}};
  int k = 0;
  for (int64_t d : {16, 72, 96, 128, 256})
    for (DType dt : kDtypes) {
      Case c = base("quick head_dim");
      c.dtype = dt;
      c.head_dim = c.head_dim_v = d;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = shapes[k % 5].sq;
      c.seqlen_k = shapes[k % 5].sk;
      c.mask = kMasks[k % 3];
      c.lse = k % 2 == 0;
      ++k;
      v.push_back(c);
    }
  // Every mask with both dtypes at one shape with tails on both sides.
  for (DType dt : kDtypes)
    for (MaskKind m : kMasks) {
      Case c = base("quick mask");
      c.dtype = dt;
      c.mask = m;
      c.batch = 2;
      c.seqlen_q = 77;
      c.seqlen_k = 100;
      v.push_back(c);
    }
  {
    Case a = base("quick d!=dv");
    a.head_dim = 96;
    a.head_dim_v = 40;
    a.mask = MaskKind::causal_top_left;
    v.push_back(a);
    Case b = base("quick d!=dv");
    b.dtype = DType::bf16;
    b.head_dim = 16;
    b.head_dim_v = 256;
    b.mask = MaskKind::causal_bottom_right;
    b.lse = false;
    v.push_back(b);
  }
  {
    Case many = base("quick many key tiles");
    many.dtype = DType::bf16;
    many.head_dim = many.head_dim_v = 128;
    many.heads_q = 2;
    many.heads_kv = 1;
    many.seqlen_q = 130;
    many.seqlen_k = 1000;
    many.mask = MaskKind::causal_bottom_right;
    v.push_back(many);
  }
  {
    Case a = base("quick bias");
    a.bias = BiasKind::input;
    a.bias_neg_inf = a.bias_neg_inf_rows = true;
    a.seqlen_q = 70;
    a.seqlen_k = 90;
    a.mask = MaskKind::causal_top_left;
    v.push_back(a);
    Case b = base("quick bias");
    b.dtype = DType::bf16;
    b.bias = BiasKind::f32;
    b.bias_neg_inf = b.bias_neg_inf_rows = b.bias_broadcast = true;
    b.head_dim = b.head_dim_v = 128;
    b.batch = 2;
    b.seqlen_q = 50;
    b.seqlen_k = 140;
    v.push_back(b);
    Case c = base("quick bias");
    c.bias = BiasKind::f32;
    c.bias_neg_inf = true;
    c.head_dim = c.head_dim_v = 96;
    c.seqlen_q = 150;
    c.seqlen_k = 70;
    c.mask = MaskKind::causal_bottom_right;  // rows without keys
    c.lse = false;
    v.push_back(c);
  }
  {
    Case odd = base("quick gqa");
    odd.dtype = DType::bf16;
    odd.heads_q = 21;
    odd.heads_kv = 3;
    odd.seqlen_q = odd.seqlen_k = 40;
    odd.mask = MaskKind::causal_top_left;
    v.push_back(odd);
    Case mqa = base("quick gqa");
    mqa.heads_q = 8;
    mqa.heads_kv = 1;
    mqa.seqlen_q = 33;
    mqa.seqlen_k = 97;
    v.push_back(mqa);
  }
  for (DType dt : kDtypes) {
    Case c = base("quick empty");
    c.dtype = dt;
    c.seqlen_q = 65;
    c.seqlen_k = 0;
    c.mask = dt == DType::f16 ? MaskKind::causal_bottom_right : MaskKind::none;
    v.push_back(c);
  }
  {
    Case q0 = base("quick empty");
    q0.seqlen_q = 0;
    q0.seqlen_k = 64;
    v.push_back(q0);
    Case b0 = base("quick empty");
    b0.batch = 0;
    b0.seqlen_q = b0.seqlen_k = 10;
    v.push_back(b0);
  }
  {
    Case padded = base("quick padded");
    padded.layout = Layout::padded;
    padded.dtype = DType::bf16;
    padded.head_dim = padded.head_dim_v = 128;
    padded.seqlen_q = 70;
    padded.seqlen_k = 90;
    padded.mask = MaskKind::causal_bottom_right;
    padded.bias = BiasKind::input;
    padded.bias_neg_inf = true;
    v.push_back(padded);
    Case packed = base("quick packed qkv");
    packed.layout = Layout::packed_qkv;
    packed.seqlen_q = packed.seqlen_k = 130;
    packed.mask = MaskKind::causal_top_left;
    v.push_back(packed);
    Case bcast = base("quick kv stride_head 0");
    bcast.layout = Layout::kv_head_broadcast;
    bcast.dtype = DType::bf16;
    bcast.heads_q = 4;
    bcast.heads_kv = 2;
    bcast.seqlen_q = 50;
    bcast.seqlen_k = 80;
    v.push_back(bcast);
  }
  return v;
}

// One K/V pipeline stage (fgtest::one_stage_units: the m16n8 kernels copy V
// while Q.K^T and the softmax read K, and the next K while P.V reads V): the
// quick subset, the sliding windows (tiles skipped on both sides), sinks with
// rows that see no key, and split-KV decode (key-split warps), with key-tile
// counts 0 .. 32 (odd and even: the QK_AHEAD loop is unrolled by two).
std::vector<Case> one_stage_cases() {
  std::vector<Case> v = quick_cases();
  for (const Case& c : window_cases()) v.push_back(c);
  for (const Case& c : sinks_cases()) v.push_back(c);
  int k = 0;
  for (int64_t d : {64, 96, 128, 256})
    for (int64_t sk : {1, 64, 127, 191, 2049}) {
      Case c = base("one stage key tiles");
      c.dtype = kDtypes[k % 2];
      c.head_dim = c.head_dim_v = d;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = k % 3 == 0 ? 300 : 129;
      c.seqlen_k = sk;
      c.mask = kMasks[k % 3];
      ++k;
      v.push_back(c);
    }
  struct D {
    DType dt;
    int64_t hq, hkv, sq, sk, d;
    int splits;
  };
  const D decodes[] = {{DType::bf16, 32, 8, 1, 1000, 128, 0}, {DType::f16, 8, 2, 1, 4097, 128, 3},
                       {DType::f16, 4, 4, 4, 700, 256, 2},    {DType::bf16, 8, 1, 2, 129, 64, 0}};
  for (const D& x : decodes) {
    Case c = base("one stage decode");
    c.dtype = x.dt;
    c.batch = 2;
    c.heads_q = x.hq;
    c.heads_kv = x.hkv;
    c.seqlen_q = x.sq;
    c.seqlen_k = x.sk;
    c.head_dim = c.head_dim_v = x.d;
    c.mask = MaskKind::causal_bottom_right;
    c.decode_splits = x.splits;
    c.sample_rows = 0;
    v.push_back(c);
  }
  return v;
}

}  // namespace

TEST_SUITE("gpu") {

FLASHGEN_GPU_TEST("forward: every head_dim 16..256 (step 8), f16 and bf16") {
  run_group("head_dim 16..256", head_dim_cases());
}

FLASHGEN_GPU_TEST("forward: head_dim != head_dim_v") { run_group("head_dim != head_dim_v", head_dim_v_cases()); }

FLASHGEN_GPU_TEST("forward: head_dim != head_dim_v over many work items per block") {
  run_group("head_dim != head_dim_v, many items", head_dim_v_many_items_cases());
}

FLASHGEN_GPU_TEST("forward: masked grids in longest-first groups of unequal size") {
  run_group("longest-first groups", lpt_groups_cases());
}

FLASHGEN_GPU_TEST("forward: all seqlen_q x seqlen_k pairs at head_dim 64") {
  run_group("seqlen pairs, head_dim 64", seqlen_cases(64));
}

FLASHGEN_GPU_TEST("forward: all seqlen_q x seqlen_k pairs at head_dim 96") {
  run_group("seqlen pairs, head_dim 96", seqlen_cases(96));
}

FLASHGEN_GPU_TEST("forward: all seqlen_q x seqlen_k pairs at head_dim 128") {
  run_group("seqlen pairs, head_dim 128", seqlen_cases(128));
}

FLASHGEN_GPU_TEST("forward: additive bias (input dtype, f32), -inf entries and rows, broadcast") {
  run_group("bias", bias_cases());
}

FLASHGEN_GPU_TEST("forward: GQA / MQA group sizes 1, 2, 4, 7, 8") { run_group("gqa", gqa_cases()); }

FLASHGEN_GPU_TEST("forward: softcap with logits past the cap, bias, every mask") {
  run_group("softcap", softcap_cases());
}

FLASHGEN_GPU_TEST("forward: sliding windows, both alignments, GQA, bias") { run_group("window", window_cases()); }

FLASHGEN_GPU_TEST("forward: NaN / inf in V under sliding windows reach only the rows that see them") {
  run_group("window poison", window_poison_cases());
}

FLASHGEN_GPU_TEST("forward: attention sinks, rows that see no key") { run_group("sinks", sinks_cases()); }

FLASHGEN_GPU_TEST("forward: ALiBi, every alignment, per-head and per-batch slopes") {
  run_group("alibi", alibi_cases());
}

FLASHGEN_GPU_TEST("forward: LSE on and off") { run_group("lse", lse_cases()); }

FLASHGEN_GPU_TEST("forward: seqlen_k = 0, seqlen_q = 0, batch = 0") { run_group("empty", empty_cases()); }

FLASHGEN_GPU_TEST("forward: K/V heads broadcast with stride_head 0") {
  run_group("kv stride_head 0", kv_broadcast_cases());
}

FLASHGEN_GPU_TEST("forward: Q, K, V slices of one packed QKV buffer") { run_group("packed qkv", packed_cases()); }

FLASHGEN_GPU_TEST("forward: batch x heads above 65535") { run_group("grid > 65535", big_grid_cases()); }

FLASHGEN_GPU_TEST("forward: padded (non-contiguous) Q, K, V, O and LSE") { run_group("padded", padded_cases()); }

FLASHGEN_GPU_TEST("forward: long sequences (4097, 8191) with GQA") { run_group("long", long_cases()); }

FLASHGEN_GPU_TEST("forward: one K/V pipeline stage (K and V copied in turn), m16n8k16 and m16n8k8") {
  const std::vector<fgtest::Unit> list = fgtest::one_stage_units();
  if (list.empty()) {
    MESSAGE("no m16n8 unit selected, or the device's shared memory per block holds no one-stage tile: skipped");
    return;
  }
  fgtest::UnitsOverride scope(list);
  run_group("one stage", one_stage_cases());
}

FLASHGEN_GPU_QUICK_TEST("forward: quick representative subset (FLASHGEN_TEST_QUICK=1)") {
  run_group("quick subset", quick_cases());
}

FLASHGEN_GPU_ALWAYS_TEST("forward: bad input is refused before launch and outputs stay untouched") {
  Case c = base("refused");
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 65;
  c.seqlen_k = 65;
  c.lse = true;
  const HostCase hc = make_host_case(c);
  DeviceCase dc(hc);
  Stream stream;

  auto expect_refused = [&](const char* what, const AttentionProblem& p) {
    INFO(what);
    bool refused = false;
    try {
      (void)flashgen::forward(p, stream.get());
    } catch (const flashgen::InvalidArgument& e) {
      refused = true;
      std::printf("  refused (%s): %s\n", what, e.what());
    }
    CHECK_MESSAGE(refused, what << ": forward() did not throw InvalidArgument");
    stream.sync();
    CaseResult r;
    Case none = c;
    none.seqlen_q = 0;  // no element of O / LSE may have been written
    HostCase view = hc;
    view.c = none;
    check_o_poison(view, RefRows{}, dc.o.download<uint16_t>(), r);
    check_lse_poison(view, RefRows{}, dc.lse.download<float>(), r);
    CHECK_MESSAGE(r.ok, what << ": " << join(r.errors));
  };

  AttentionProblem p = dc.problem;
  p.heads_kv = 3;  // 4 % 3 != 0
  expect_refused("heads_q % heads_kv != 0", p);

  p = dc.problem;
  p.q.data = static_cast<const char*>(p.q.data) + 2;  // one element off: not 16-byte aligned
  expect_refused("misaligned q pointer", p);

  p = dc.problem;
  p.o.data = static_cast<const char*>(p.o.data) + 8;
  expect_refused("misaligned o pointer", p);

  p = dc.problem;
  p.k.stride_seq += 4;  // not a multiple of 8 elements
  expect_refused("k.stride_seq not a multiple of 8", p);

  p = dc.problem;
  p.o.stride_head = 0;  // an output cannot broadcast
  expect_refused("o.stride_head = 0", p);

  p = dc.problem;
  p.head_dim = 20;
  p.head_dim_v = 20;
  expect_refused("head_dim 20 (not a multiple of 8)", p);

  p = dc.problem;
  p.softmax_scale = std::numeric_limits<float>::infinity();
  expect_refused("softmax_scale = inf", p);

  p = dc.problem;
  p.bias.kind = BiasKind::f32;  // no bias pointer
  expect_refused("bias.kind f32 with null bias.data", p);

  // launch() refusals: nothing written either.
  auto expect_launch_refused = [&](const char* what, const flashgen::Kernel& kernel, const AttentionProblem& p) {
    INFO(what);
    bool refused = false;
    try {
      flashgen::launch(kernel, p, stream.get());
    } catch (const flashgen::InvalidArgument& e) {
      refused = true;
      std::printf("  refused (%s): %s\n", what, e.what());
    }
    CHECK_MESSAGE(refused, what << ": launch() did not throw InvalidArgument");
    stream.sync();
    CaseResult r;
    HostCase view = hc;
    view.c.seqlen_q = 0;
    check_o_poison(view, RefRows{}, dc.o.download<uint16_t>(), r);
    check_lse_poison(view, RefRows{}, dc.lse.download<float>(), r);
    CHECK_MESSAGE(r.ok, what << ": " << join(r.errors));
  };
  {
    // A kernel planned for another problem (mask differs).
    AttentionProblem other = dc.problem;
    other.mask = MaskKind::causal_top_left;
    expect_launch_refused("kernel/problem mismatch", flashgen::load_kernel(flashgen::plan(other)), dc.problem);
  }
  const flashgen::KernelSpec planned = flashgen::plan(dc.problem);
  if (planned.unit == flashgen::MatrixUnit::wgmma) {
    // The wgmma kernel reads K/V through TMA tensor maps, which cannot repeat a row.
    AttentionProblem rb = dc.problem;
    rb.k.stride_seq = 0;
    expect_launch_refused("wgmma kernel, k.stride_seq = 0", flashgen::load_kernel(planned), rb);
  }

  // And the unmodified problem then runs and passes every check.
  const flashgen::ForwardInfo info = flashgen::forward(dc.problem, stream.get());
  stream.sync();
  CHECK(info.launched);
  CaseResult r;
  const std::vector<uint16_t> o_dev = dc.o.download<uint16_t>();
  const std::vector<float> lse_dev = dc.lse.download<float>();
  const RefRows rr = reference(hc);
  check_o_poison(hc, rr, o_dev, r);
  check_lse_poison(hc, rr, lse_dev, r);
  check_values(hc, rr, o_dev, lse_dev, r);
  std::printf("  %s\n", summary_line(c, r, info.from_cache ? "disk cache" : "NVRTC").c_str());
  CHECK_MESSAGE(r.ok, join(r.errors));
}

}  // TEST_SUITE
