// Launch descriptions on the CPU tier: rt::lpt_groups, the groups of the
// longest-first block order of masked forward grids (templates/fwd_block.cuh,
// fg_lpt_order), and that order transcribed to C++ over the operands the host
// gives it (rt::lpt_shape, rt::div_invariant). On the GPU tier
// (test_forward.cpp, "masked grids in longest-first groups") a block the order
// skipped leaves poison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "flashgen/decode.hpp"
#include "flashgen/flashgen.hpp"
#include "runtime/launch.hpp"

using namespace flashgen;

namespace {

const void* const kQ = reinterpret_cast<const void*>(uintptr_t{0x1000000});
const void* const kK = reinterpret_cast<const void*>(uintptr_t{0x2000000});
const void* const kV = reinterpret_cast<const void*>(uintptr_t{0x3000000});
void* const kO = reinterpret_cast<void*>(uintptr_t{0x4000000});

AttentionProblem problem(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t d, int64_t dv,
                         MaskKind mask) {
  return make_bshd_problem(DType::bf16, batch, 512, seqlen_k, heads_q, heads_kv, d, dv, mask, kQ, kK, kV, kO);
}

int64_t groups_on_ampere(const AttentionProblem& p, int64_t l2) { return rt::lpt_groups(p, plan(p, 80), l2); }

}  // namespace

TEST_CASE("launch: longest-first groups hold the pairs whose K/V fit in half the L2") {
  const int64_t l2 = 50 << 20;
  // 16 x 32 pairs, 512 keys of 128 + 128 columns: 256 KiB a K/V head, so 100 pairs in 25 MiB:
  // 512 pairs in 6 groups (of 86 and 85).
  CHECK(groups_on_ampere(problem(16, 32, 32, 512, 128, 128, MaskKind::causal_top_left), l2) == 6);
  // GQA 32/8: four pairs share a K/V head (a pair's share is 64 KiB): 400 a group, 2 groups.
  CHECK(groups_on_ampere(problem(16, 32, 8, 512, 128, 128, MaskKind::causal_bottom_right), l2) == 2);
  // head_dim_v counts: 512 keys of 128 + 64 columns, 192 KiB a head: 133 a group, 4 groups.
  CHECK(groups_on_ampere(problem(16, 32, 32, 512, 128, 64, MaskKind::window_top_left), l2) == 4);
  // Fewer pairs than fit: one group (every pair's longest block first).
  CHECK(groups_on_ampere(problem(1, 3, 3, 512, 128, 128, MaskKind::causal_top_left), l2) == 1);
  // A pair alone fills the budget: the block order is kept.
  CHECK(groups_on_ampere(problem(1, 4, 4, 1 << 20, 128, 128, MaskKind::causal_top_left), l2) == 0);
  // At the bound: two pairs of 12.5 MiB fit in 25 MiB (8 pairs, 4 groups); one key more and only one does.
  const int64_t keys = (int64_t{25} << 20) / 2 / 512;
  CHECK(groups_on_ampere(problem(1, 8, 8, keys, 128, 128, MaskKind::causal_top_left), l2) == 4);
  CHECK(groups_on_ampere(problem(1, 8, 8, keys + 1, 128, 128, MaskKind::causal_top_left), l2) == 0);
  // B4 H32 S4096 D128: 2 MiB a head, 12 a group: 128 pairs in 11 groups (of 12 and 11).
  CHECK(groups_on_ampere(problem(4, 32, 32, 4096, 128, 128, MaskKind::causal_top_left), l2) == 11);
  // The split-KV decode's pairs pack query heads of one K/V head: GQA 8/2 packed by 4 is 2 pairs of
  // one K/V head (15 MiB) each, one a group: the order is kept (unpacked, 8 pairs of 3.75 MiB would
  // be 2 groups of 6 and 2).
  const AttentionProblem dec = problem(1, 8, 2, 30720, 128, 128, MaskKind::causal_bottom_right);
  const DecodePlan dp = plan_decode(dec, 80, 108);
  REQUIRE(dp.split.pack == 4);
  CHECK(rt::lpt_groups(dec, dp.split, l2) == 0);
  // A forward spec's pack is not the kernel's (fwd kernels take PACK 1).
  const AttentionProblem fwd = problem(4, 32, 32, 4096, 128, 128, MaskKind::causal_top_left);
  KernelSpec packed = plan(fwd, 80);
  packed.pack = 8;
  CHECK(rt::lpt_groups(fwd, packed, l2) == 11);
  // One pair: one group of it, so the order is kept.
  CHECK(groups_on_ampere(problem(1, 1, 1, 512, 128, 128, MaskKind::causal_top_left), l2) == 0);
}

TEST_CASE("launch: unmasked grids, persistent kernels and an unknown L2 keep the block order") {
  const int64_t l2 = 50 << 20;
  const AttentionProblem causal = problem(4, 32, 32, 4096, 128, 128, MaskKind::causal_top_left);
  CHECK(groups_on_ampere(problem(4, 32, 32, 4096, 128, 128, MaskKind::none), l2) == 0);
  const KernelSpec wgmma = plan(causal, 90);
  REQUIRE(wgmma.unit == MatrixUnit::wgmma);
  CHECK(rt::lpt_groups(causal, wgmma, l2) == 0);
  CHECK(groups_on_ampere(causal, 0) == 0);
  CHECK(groups_on_ampere(causal, l2) == 11);
  AttentionProblem f16 = causal;  // (the m8n8k4 kernel too)
  f16.dtype = DType::f16;
  const KernelSpec volta = plan(f16, 70);
  REQUIRE(volta.unit == MatrixUnit::m8n8k4);
  CHECK(rt::lpt_groups(f16, volta, l2) == 11);
}

// fg_div_invariant (templates/fwd_block.cuh), transcribed: its operand from rt::div_invariant.
static uint32_t div_by_operand(uint32_t x, int64_t ms) {
  const uint32_t m = static_cast<uint32_t>(ms), s = static_cast<uint32_t>(ms >> 32);
  const uint32_t hi = static_cast<uint32_t>((uint64_t{x} * m) >> 32);
  return (hi + x) >> s;  // (x < 2^31: no wrap)
}

TEST_CASE("launch: division by invariant integers is exact below 2^31 (rt::div_invariant)") {
  std::vector<int64_t> ds;
  for (int64_t d = 1; d <= 5000; ++d) ds.push_back(d);
  for (int k = 12; k <= 30; ++k)
    for (int64_t e : {-3, -1, 0, 1, 3}) ds.push_back((int64_t{1} << k) + e);
  ds.push_back((int64_t{1} << 31) - 1);
  uint64_t state = 0x9E3779B97F4A7C15ull;  // (xorshift: fixed divisors are the point, not fresh draws)
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < 2000; ++i) ds.push_back(1 + static_cast<int64_t>(next() % ((uint64_t{1} << 31) - 1)));
  const uint32_t top = (uint32_t{1} << 31) - 1;
  int64_t checked = 0, failed = 0;
  for (int64_t d : ds) {
    const int64_t ms = rt::div_invariant(d);
    const uint32_t ud = static_cast<uint32_t>(d);
    // Every x near a multiple of d, the ends of the range, and random x.
    std::vector<uint32_t> xs = {0, 1, top, top - 1, ud - 1, ud, ud + 1};
    for (uint32_t q : {top / ud, top / ud - 1, 1u, 2u, 3u})
      for (int64_t e : {-1, 0, 1}) {
        const int64_t x = int64_t{q} * d + e;
        if (x >= 0 && x <= top) xs.push_back(static_cast<uint32_t>(x));
      }
    for (int j = 0; j < 64; ++j) xs.push_back(static_cast<uint32_t>(next() % (uint64_t{top} + 1)));
    for (uint32_t x : xs) {
      if (x > top) continue;
      ++checked;
      if (div_by_operand(x, ms) != x / ud) {
        if (++failed <= 5) FAIL_CHECK("d = " << d << ", x = " << x << ": " << div_by_operand(x, ms) << " != " << x / ud);
      }
    }
  }
  CHECK(failed == 0);
  CHECK(checked > 400000);
  CHECK_THROWS_AS(rt::div_invariant(0), InvalidArgument);
  CHECK_THROWS_AS(rt::div_invariant(int64_t{1} << 31), InvalidArgument);
}

// fg_lpt_order (templates/fwd_block.cuh), transcribed: the block id -> item map from the group
// shape rt::lpt_shape gives.
static int64_t lpt_item(const rt::LptShape& g, uint32_t nm, uint32_t ns, uint32_t id) {
  const uint32_t split = id % ns, r = id / ns;
  const bool larger = r < static_cast<uint32_t>(g.big);
  const uint32_t rg = larger ? r : r - static_cast<uint32_t>(g.big);
  const uint32_t n = larger ? static_cast<uint32_t>(g.pairs) : static_cast<uint32_t>(g.pairs >> 32);
  const uint32_t grp = div_by_operand(rg, larger ? g.div_group1 : g.div_group0);
  const uint32_t in_group = rg - grp * n * nm;
  const uint32_t rank = div_by_operand(in_group, larger ? g.div_pairs1 : g.div_pairs0);
  const uint32_t pair = (larger ? 0u : static_cast<uint32_t>(g.first0)) + grp * n + (in_group - rank * n);
  return (int64_t{pair} * nm + rank) * ns + split;
}

TEST_CASE("launch: the longest-first order is a bijection that issues each group's pairs rank by rank") {
  int64_t configs = 0;
  for (uint32_t pairs = 1; pairs <= 23; ++pairs)
    for (uint32_t groups = 1; groups <= pairs; ++groups)
      for (uint32_t nm : {1u, 2u, 3u, 7u, 16u})
        for (uint32_t ns : {1u, 3u}) {
          ++configs;
          CAPTURE(pairs);
          CAPTURE(groups);
          CAPTURE(nm);
          CAPTURE(ns);
          const rt::LptShape g = rt::lpt_shape(groups, pairs, nm);
          const uint32_t grid = pairs * nm * ns;
          std::vector<int> hits(grid, 0);
          // The groups in block order: consecutive pairs, sizes within one, the larger first.
          const uint32_t base = pairs / groups, extra = pairs % groups;
          uint32_t id = 0;
          bool ok = true;
          for (uint32_t grp = 0, first = 0; grp < groups; ++grp) {
            const uint32_t n = grp < extra ? base + 1 : base;
            for (uint32_t rank = 0; rank < nm; ++rank)
              for (uint32_t k = 0; k < n; ++k)
                for (uint32_t split = 0; split < ns; ++split, ++id) {
                  const int64_t item = lpt_item(g, nm, ns, id);
                  ok = ok && item == (int64_t{first + k} * nm + rank) * ns + split;
                  if (item >= 0 && item < grid) ++hits[item];
                }
            first += n;
          }
          CHECK(ok);
          CHECK(id == grid);
          CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        }
  CHECK(configs > 2000);
  // A grid near the 2^31 - 1 blocks of a launch: the block ids at the ends of each group.
  const uint32_t nm = 65521, pairs = 32767, groups = 1000;  // 2,146,926,607 blocks
  const rt::LptShape g = rt::lpt_shape(groups, pairs, nm);
  const uint32_t base = pairs / groups, extra = pairs % groups;
  uint32_t block = 0;
  for (uint32_t grp = 0, first = 0; grp < groups; ++grp) {
    const uint32_t n = grp < extra ? base + 1 : base;
    CHECK(lpt_item(g, nm, 1, block) == int64_t{first} * nm);                                      // rank 0, first pair
    CHECK(lpt_item(g, nm, 1, block + n * nm - 1) == int64_t{first + n - 1} * nm + (nm - 1));  // last rank, last pair
    block += n * nm;
    first += n;
  }
  CHECK(block == uint64_t{pairs} * nm);
  CHECK_THROWS_AS(rt::lpt_shape(0, 4, 2), InvalidArgument);
  CHECK_THROWS_AS(rt::lpt_shape(5, 4, 2), InvalidArgument);
}
