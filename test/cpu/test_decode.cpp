// Split-KV decode on the CPU tier: plan_decode's choices (unit, tile, GQA
// packing, number of splits), its refusals, the workspace size, and the
// checks decode() makes before it touches a GPU. The kernels' results are
// checked on the GPU tier (test/gpu/test_decode.cpp); their NVRTC compiles in
// test_compile.cpp (part C).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "flashgen/flashgen.h"
#include "flashgen/flashgen.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

// Fake, aligned device addresses (never dereferenced on the CPU tier).
const void* const kQ = reinterpret_cast<const void*>(uintptr_t{0x1000000});
const void* const kK = reinterpret_cast<const void*>(uintptr_t{0x2000000});
const void* const kV = reinterpret_cast<const void*>(uintptr_t{0x3000000});
void* const kO = reinterpret_cast<void*>(uintptr_t{0x4000000});

AttentionProblem decode_problem(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_k,
                                int64_t d, DType dt = DType::bf16, MaskKind mask = MaskKind::none) {
  return make_bshd_problem(dt, batch, seqlen_q, seqlen_k, heads_q, heads_kv, d, d, mask, kQ, kK, kV, kO);
}

// Every key tile belongs to exactly one split, and (when planned) none is empty.
void check_cover(const AttentionProblem& p, const DecodePlan& dp, bool no_empty) {
  const int64_t tiles = (p.seqlen_k + dp.split.tile.block_n - 1) / dp.split.tile.block_n;
  CAPTURE(tiles);
  CAPTURE(dp.num_splits);
  CAPTURE(dp.tiles_per_split);
  CHECK(dp.tiles_per_split * dp.num_splits >= tiles);
  if (no_empty && tiles > 0) CHECK((dp.num_splits - 1) * dp.tiles_per_split < tiles);
}

}  // namespace

TEST_CASE("decode plan: an m16n8 fwd_split kernel, GQA packing, splits by wave efficiency") {
  // The B1 H32/8 Sk32768 D128 decode on a 132-SM sm_90.
  const AttentionProblem p = decode_problem(1, 32, 8, 1, 32768, 128);
  const DecodePlan dp = plan_decode(p, 90, 132);
  CHECK(dp.split.family == KernelFamily::fwd_split);
  CHECK(dp.split.unit == MatrixUnit::m16n8k16);
  CHECK(dp.split.pack == 4);  // the 4 query heads of a group share a tile
  // 4 packed rows: one 16-row block whose 4 warps split each key tile of 64.
  CHECK(dp.split.tile.block_m == 16);
  CHECK(dp.split.tile.warps == 4);
  CHECK(dp.split.tile.block_n == 64);
  CHECK(dp.split.key_warps() == 4);
  CHECK(validate(dp.split, profile_for_arch(90)).empty());
  CHECK(dp.combine.family == KernelFamily::combine);
  CHECK(dp.combine.partial_dtype == StateDType::f32);
  CHECK(dp.combine.out_dtype == StateDType::bf16);
  CHECK_FALSE(dp.combine.has_lse);
  // 8 row groups, two 128-thread blocks per SM (264 resident): the fewest splits
  // whose 8 * splits blocks fill their wave within 0.95 of the best (33: 264 of
  // 264) is 32 (256), whose 16 tiles apiece equal 31's; 31 has 17 apiece and
  // covers the 512 key tiles with 31 splits.
  CHECK(dp.num_splits == 31);
  check_cover(p, dp, true);
  CHECK(dp.workspace_bytes == decode_workspace_bytes(p, dp));
  CHECK(dp.workspace_bytes % 256 == 0);
  CHECK(dp.workspace_bytes >= int64_t{dp.num_splits} * 32 * 129 * 4);

  // Packing follows heads_q / heads_kv (a power of two up to 16).
  CHECK(plan_decode(decode_problem(1, 32, 32, 1, 4096, 128), 90, 132).split.pack == 1);
  CHECK(plan_decode(decode_problem(1, 64, 8, 1, 4096, 128), 90, 132).split.pack == 8);
  CHECK(plan_decode(decode_problem(32, 8, 1, 1, 8192, 64), 90, 132).split.pack == 8);
  CHECK(plan_decode(decode_problem(1, 48, 4, 1, 4096, 128), 90, 132).split.pack == 4);  // g = 12
  // 64 blocks unsplit: 4 splits fill one wave of 264 (256 blocks); 5 would
  // leave a second wave 21% full.
  CHECK(plan_decode(decode_problem(8, 32, 8, 1, 16384, 128), 90, 132).num_splits == 4);
  // 512 blocks unsplit (B64 H32/8): two waves 0.97 full, no split. 600 blocks
  // (B75): three waves 0.76 full, so 3 splits (1800 blocks in seven waves, 0.97).
  CHECK(plan_decode(decode_problem(75, 32, 8, 1, 4096, 128), 90, 132).num_splits == 3);
  CHECK(plan_decode(decode_problem(64, 32, 8, 1, 4096, 128), 90, 132).num_splits == 1);
  // D256: the profile's one-stage 64x64x4x1 row decodes as two stages of 32
  // keys (a copy in flight behind the one read); two warps split each tile of
  // one 16-row block, 72 KiB of shared memory, three blocks per SM: 3 splits
  // of 128 blocks fill one wave of 396 (384 blocks).
  const DecodePlan d256 = plan_decode(decode_problem(8, 16, 16, 1, 16384, 256), 90, 132);
  CHECK(profile_for_arch(90).tile_for(256, MatrixUnit::m16n8k16).tile.stages == 1);
  CHECK(d256.split.tile.stages == 2);
  CHECK(d256.split.tile.block_n == 32);
  for (int arch : {80, 86, 89}) {
    const DecodePlan a = plan_decode(decode_problem(8, 16, 16, 1, 16384, 256), arch, 108);
    CHECK(a.split.tile.stages == 2);
    CHECK(a.split.tile.block_n == 32);
  }
  CHECK(d256.split.tile.block_m == 16);
  CHECK(d256.split.tile.warps == 2);
  CHECK(d256.split.key_warps() == 2);
  CHECK(d256.num_splits == 3);
  // Many blocks already: no split.
  const AttentionProblem wide = decode_problem(64, 32, 32, 16, 256, 64);
  CHECK(plan_decode(wide, 90, 132).num_splits == 1);
  // Turing: the m16n8k8 unit, f16.
  const DecodePlan t = plan_decode(decode_problem(2, 16, 2, 4, 1000, 96, DType::f16, MaskKind::causal_bottom_right), 75, 40);
  CHECK(t.split.unit == MatrixUnit::m16n8k8);
  CHECK(t.split.mask == MaskKind::causal_bottom_right);
  check_cover(decode_problem(2, 16, 2, 4, 1000, 96, DType::f16), t, true);
}

TEST_CASE("decode plan: the row block follows the packed rows; key-split tiles and their rules") {
  const Profile& hopper = profile_for_arch(90);
  // rows = seqlen_q * pack: 1..16 -> 16 rows, 4 key warps; 17..32 -> 32 rows, two
  // row groups of 2 key warps; more -> the profile's 64 rows, 1 key warp.
  struct R {
    int64_t hq, hkv, sq;
    int bm, w, kw;
  };
  for (const R& r : {R{32, 32, 1, 16, 4, 4}, R{32, 8, 4, 16, 4, 4}, R{64, 8, 2, 16, 4, 4}, R{32, 8, 8, 32, 4, 2},
                     R{32, 8, 16, 64, 4, 1}, R{16, 1, 1, 16, 4, 4}}) {
    const DecodePlan dp =
        plan_decode(decode_problem(2, r.hq, r.hkv, r.sq, 4096, 128, DType::bf16, MaskKind::causal_bottom_right), 90, 132);
    CAPTURE(dp.split.canonical());
    CHECK(dp.split.tile.block_m == r.bm);
    CHECK(dp.split.tile.warps == r.w);
    CHECK(dp.split.key_warps() == r.kw);
    CHECK(validate(dp.split, hopper).empty());
    // The merge reuses the tiles' shared memory: it never needs more here.
    CHECK(dp.split.smem_bytes() == 2 * (r.bm * 128 + 2 * 64 * 256));
  }
  // One split of a key-split tile writes O itself: no combine (decode_merges).
  CHECK_FALSE(decode_merges(plan_decode(decode_problem(64, 32, 8, 1, 4096, 128), 90, 132)));
  CHECK(decode_merges(plan_decode(decode_problem(8, 32, 8, 1, 16384, 128), 90, 132)));  // 4 splits
  CHECK(decode_merges(plan_decode(decode_problem(64, 32, 8, 16, 512, 128), 90, 132, 1)));  // 64 rows: key_warps 1
  // Turing (64 KiB per block): 64 packed rows of the 128-row tile would give 8
  // warps, 2 per 16 rows, whose merge needs 70144 bytes: the profile's tile is kept.
  const DecodePlan turing = plan_decode(
      decode_problem(1, 32, 8, 16, 4096, 128, DType::f16, MaskKind::causal_bottom_right), 75, 40);
  CHECK(turing.split.key_warps() == 1);
  CHECK(validate(turing.split, profile_for_arch(75)).empty());
  KernelSpec too_big = turing.split;
  too_big.tile.block_m = 64;  // 8 warps: 2 key warps per 16 rows
  CHECK(too_big.key_warps() == 2);
  CHECK(too_big.smem_bytes() == 4 * 2 * 64 * (128 + 9));
  REQUIRE_FALSE(validate(too_big, profile_for_arch(75)).empty());
  CHECK(validate(too_big, profile_for_arch(75))[0].find("fewer warps per 16 rows") != std::string::npos);
  // Volta's m8n8k4 kernel has no key-split warps: its rows stay 16 per warp.
  const DecodePlan volta = plan_decode(decode_problem(1, 32, 8, 1, 4096, 128, DType::f16), 70, 80);
  CHECK(volta.split.tile.block_m == 16 * volta.split.tile.warps);
  CHECK(volta.split.key_warps() == 1);
  KernelSpec v16 = volta.split;
  v16.tile.block_m = 16;  // refused by validate(); key_warps() says 1 (no key-split kernel on m8n8k4)
  CHECK(v16.key_warps() == 1);
  CHECK_FALSE(validate(v16, profile_for_arch(70)).empty());

  KernelSpec s = plan_decode(decode_problem(1, 32, 8, 1, 4096, 128), 90, 132).split;
  s.tile.block_n = 48;  // 4 key warps need whole k16 steps each: a multiple of 64
  CHECK_FALSE(validate(s, hopper).empty());
  CHECK(validate(s, hopper)[0].find("block_n (48) must be a multiple of 16 * 4") != std::string::npos);
  s.tile.block_n = 64;
  s.tile.block_m = 48;  // 64 / 48 warps: not a power of two
  CHECK(validate(s, hopper)[0].find("block_m (48) below 16 * warps (64)") != std::string::npos);
  s.tile.block_m = 16;
  s.family = KernelFamily::fwd;  // the forward family has no key-split warps
  s.pack = 1;
  CHECK(validate(s, hopper)[0].find("block_m (16) must be a positive multiple of 16 * warps (64)") != std::string::npos);
  CHECK(s.key_warps() == 1);
  s.family = KernelFamily::fwd_split;
  s.tile.warps = 0;
  CHECK(s.key_warps() == 0);
  // A merge larger than the tiles sets the shared memory: 1 stage of 16 keys at d 16, dv 256.
  KernelSpec m = plan_decode(decode_problem(1, 32, 8, 1, 4096, 16), 90, 132).split;
  m.head_dim_v = 256;
  m.tile = Tile{16, 64, 4, 1};
  CHECK(m.key_warps() == 4);
  CHECK(m.smem_bytes() == 4 * 4 * 16 * (256 + 9));
}

TEST_CASE("decode plan: an explicit profile instead of the arch's") {
  const AttentionProblem p = decode_problem(8, 32, 8, 1, 16384, 128);
  Profile wide = profile_for_arch(90);
  for (FlashTile& row : wide.flash)
    if (row.head_dim_le == 128) row.tile.block_n = 128;  // 4 key warps of 32 keys
  const DecodePlan dp = plan_decode(p, 90, 132, 0, wide);
  CHECK(dp.split.tile.block_n == 128);
  CHECK(dp.split.key_warps() == 4);
  CHECK(validate(dp.split, wide).empty());
  CHECK(plan_decode(p, 90, 132, 0, profile_for_arch(90)).split == plan_decode(p, 90, 132).split);
  Profile other = profile_for_arch(90);
  other.archs = {80};
  CHECK_THROWS_AS(plan_decode(p, 90, 132, 0, other), Unsupported);
  CHECK_THROWS_WITH_AS(plan_decode(p, 90, 0, 0, wide), Contains("sm_count (0) must be at least 1"), InvalidArgument);
}

TEST_CASE("decode plan: an explicit num_splits is used as given; refusals name the argument") {
  const AttentionProblem p = decode_problem(2, 8, 2, 1, 700, 64);  // 11 key tiles of 64
  for (int n : {1, 2, 7, 11, 128}) {
    const DecodePlan dp = plan_decode(p, 80, 108, n);
    CHECK(dp.num_splits == n);
    check_cover(p, dp, false);
  }
  CHECK_THROWS_WITH_AS(plan_decode(p, 80, 108, -1), Contains("num_splits (-1) must be 0 (chosen) or in [1, 128]"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(plan_decode(p, 80, 108, 129), Contains("num_splits (129)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(plan_decode(p, 80, 0), Contains("sm_count (0) must be at least 1"), InvalidArgument);
  // Volta: the m8n8k4 unit (f16).
  AttentionProblem v = p;
  v.dtype = DType::f16;
  const DecodePlan volta = plan_decode(v, 70, 80);
  CHECK(volta.split.unit == MatrixUnit::m8n8k4);
  CHECK(validate(volta.split, profile_for_arch(70)).empty());
  // An arch no profile serves.
  CHECK_THROWS_AS(plan_decode(p, 61, 30), Unsupported);
  // The problem is checked first.
  AttentionProblem bad = p;
  bad.heads_kv = 3;
  CHECK_THROWS_AS(plan_decode(bad, 80, 108), InvalidArgument);
  // No keys at all: one split, nothing to visit.
  const DecodePlan none = plan_decode(decode_problem(1, 8, 8, 1, 0, 64), 80, 108);
  CHECK(none.num_splits == 1);
  CHECK(none.tiles_per_split == 0);
}

TEST_CASE("decode workspace: the partials' bytes, overflow refused") {
  const AttentionProblem p = decode_problem(3, 8, 2, 5, 1000, 64);
  DecodePlan dp = plan_decode(p, 80, 108, 4);
  // 4 splits * 3 * 8 * 5 * (64 + 1) * 4 bytes, rounded up to 256.
  CHECK(decode_workspace_bytes(p, dp) == (int64_t{4} * 3 * 8 * 5 * 65 * 4 + 255) / 256 * 256);
  AttentionProblem huge = p;
  huge.batch = int64_t{1} << 40;
  huge.q.stride_batch = huge.k.stride_batch = huge.v.stride_batch = huge.o.stride_batch = 0;
  // (check_problem may refuse the shape first; either way it is an InvalidArgument naming a field)
  CHECK_THROWS_AS(decode_workspace_bytes(huge, dp), InvalidArgument);
  dp.num_splits = 0;
  CHECK_THROWS_WITH_AS(decode_workspace_bytes(p, dp), Contains("plan.num_splits (0) must be in [1, 128]"),
                       InvalidArgument);
}

TEST_CASE("decode: options are checked before anything launches") {
  const AttentionProblem p = decode_problem(1, 8, 2, 1, 4096, 128);
  const DecodePlan dp = plan_decode(p, 80, 108);
  DecodeOptions o;
  o.plan = &dp;
  o.workspace = reinterpret_cast<void*>(uintptr_t{0x8000000});
  o.workspace_bytes = dp.workspace_bytes - 1;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("options.workspace_bytes"), InvalidArgument);
  o.workspace_bytes = dp.workspace_bytes;
  o.workspace = reinterpret_cast<void*>(uintptr_t{0x8000010});
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("must be 256-byte aligned"), InvalidArgument);
  // A plan of another class.
  AttentionProblem f16 = p;
  f16.dtype = DType::f16;
  o.workspace = reinterpret_cast<void*>(uintptr_t{0x8000000});
  CHECK_THROWS_WITH_AS(decode(f16, nullptr, o), Contains("dtype"), InvalidArgument);
  DecodePlan other = dp;
  other.split.pack = 3;
  o.plan = &other;
  CHECK_THROWS_AS(decode(p, nullptr, o), InvalidArgument);
  other = dp;
  other.combine.has_lse = true;
  o.plan = &other;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("options.plan->combine"), InvalidArgument);
  // An edited tile is refused before the plan enters any arithmetic (0 divided by before).
  for (int which = 0; which < 3; ++which) {
    other = dp;
    (which == 0 ? other.split.tile.block_n : which == 1 ? other.split.tile.block_m : other.split.tile.warps) = 0;
    o.plan = &other;
    CAPTURE(which);
    CHECK_THROWS_AS(decode(p, nullptr, o), InvalidArgument);
  }
  if (!gpu_available()) {
    // Without a plan the current device is asked for: no GPU here.
    CHECK_THROWS_AS(decode(p, nullptr), Unavailable);
  }
}

TEST_CASE("decode c_api: workspace query, status mapping, no GPU") {
  flashgen_problem c;
  REQUIRE(flashgen_problem_init_bshd(&c, FLASHGEN_DTYPE_BF16, 2, 1, 5000, 32, 8, 128, 128, FLASHGEN_MASK_NONE, kQ, kK,
                                     kV, kO) == FLASHGEN_OK);
  int64_t bytes = -1;
  int splits = -1;
  REQUIRE(flashgen_decode_workspace_bytes(&c, 90, 132, 0, &bytes, &splits) == FLASHGEN_OK);
  const AttentionProblem p = decode_problem(2, 32, 8, 1, 5000, 128);
  const DecodePlan dp = plan_decode(p, 90, 132);
  CHECK(bytes == dp.workspace_bytes);
  CHECK(splits == dp.num_splits);
  REQUIRE(flashgen_decode_workspace_bytes(&c, 90, 132, 7, &bytes, nullptr) == FLASHGEN_OK);
  CHECK(bytes == decode_workspace_bytes(p, plan_decode(p, 90, 132, 7)));
  CHECK(flashgen_decode_workspace_bytes(&c, 90, 132, 0, nullptr, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(flashgen_last_error()).find("bytes is NULL") != std::string::npos);
  CHECK(flashgen_decode_workspace_bytes(&c, 90, 132, 500, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(flashgen_last_error()).find("flashgen_decode_workspace_bytes: num_splits (500) must be 0 (chosen) or in [1, 128]") != std::string::npos);
  CHECK(flashgen_decode_workspace_bytes(&c, 61, 30, 0, &bytes, nullptr) == FLASHGEN_ERROR_UNSUPPORTED);
  CHECK(flashgen_decode_workspace_bytes(nullptr, 90, 132, 0, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  if (!gpu_available()) CHECK(flashgen_decode(&c, 0, nullptr, 0, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);

  // The C calls' messages name their own arguments, not DecodeOptions' fields.
  auto last = [] { return std::string(flashgen_last_error()); };
  CHECK(flashgen_decode_workspace_bytes(&c, 90, -3, 0, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last() ==
        "flashgen_decode_workspace_bytes: sm_count = -3; allowed: 0 for this machine's GPU's SM count, or at least 1");
  // Bad input before a missing GPU (arch 0 / sm_count 0 would need one).
  flashgen_problem bad_d = c;
  bad_d.head_dim = bad_d.head_dim_v = 100;
  CHECK(flashgen_decode_workspace_bytes(&bad_d, 0, 0, 0, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last().find("head_dim (100) must be a multiple of 8") != std::string::npos);
  for (int n : {-1, 129}) {
    CAPTURE(n);
    CHECK(flashgen_decode_workspace_bytes(&c, 0, 0, n, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(last() == "flashgen_decode_workspace_bytes: num_splits (" + std::to_string(n) +
                        ") must be 0 (chosen) or in [1, 128]");
  }
  // num_splits given: the SM count is not needed (the size is the same for every count).
  int64_t sized = 0, sized_132 = 0;
  REQUIRE(flashgen_decode_workspace_bytes(&c, 90, 0, 5, &sized, &splits) == FLASHGEN_OK);
  REQUIRE(flashgen_decode_workspace_bytes(&c, 90, 132, 5, &sized_132, nullptr) == FLASHGEN_OK);
  CHECK(splits == 5);
  CHECK(sized == sized_132);
  CHECK(sized > 0);
  for (int arch : {-1, 7, 1000}) {  // refused before the GPU is asked for anything
    CAPTURE(arch);
    CHECK(flashgen_decode_workspace_bytes(&c, arch, 0, 0, &bytes, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(last().find("flashgen_decode_workspace_bytes: arch = " + std::to_string(arch) + "; allowed: ") == 0);
  }
  if (!gpu_available()) {  // arch 0 / sm_count 0: the current device's
    // (the error says what to pass instead of each 0)
    CHECK(flashgen_decode_workspace_bytes(&c, 0, 132, 0, &bytes, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(last().ends_with("; without a GPU pass arch = 10*major+minor (e.g. 90) instead of 0"));
    CHECK(last().find(".;") == std::string::npos);
    CHECK(flashgen_decode_workspace_bytes(&c, 0, 0, 5, &bytes, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(last().ends_with("; without a GPU pass arch = 10*major+minor (e.g. 90) instead of 0"));
    CHECK(flashgen_decode_workspace_bytes(&c, 90, 0, 0, &bytes, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(last().ends_with("; without a GPU pass sm_count = the GPU's count (e.g. 132) instead of 0"));
    CHECK(flashgen_decode_workspace_bytes(&c, 0, 0, 0, &bytes, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(last().ends_with("; without a GPU pass arch = 10*major+minor (e.g. 90) and sm_count = the GPU's count "
                           "(e.g. 132) instead of 0"));
    CHECK(last().find("libcuda.so.1") != std::string::npos);
  }
  CHECK(flashgen_decode(&c, -1, nullptr, 0, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last().starts_with("flashgen_decode: num_splits (-1) must be 0 (chosen) or in [1, "));
  CHECK(flashgen_decode(&c, 0, nullptr, 64, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last().starts_with("flashgen_decode: workspace_bytes (64) is given without workspace "));
  void* const odd = reinterpret_cast<void*>(uintptr_t{0x10008});
  CHECK(flashgen_decode(&c, 0, odd, 4096, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last().starts_with("flashgen_decode: workspace (0x10008) must be 256-byte aligned"));
  CHECK(flashgen_decode(&c, 0, reinterpret_cast<void*>(uintptr_t{0x10000}), 0, nullptr) ==
        FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last().starts_with("flashgen_decode: workspace_bytes (0) must be positive with workspace"));
  CHECK(last().find("options.") == std::string::npos);
}

TEST_CASE("decode_preferred: forward() runs few-row, long-key problems as decode") {
  CHECK(decode_preferred(decode_problem(1, 32, 8, 1, 32768, 128), 90, 132));
  CHECK(decode_preferred(decode_problem(2, 32, 8, 16, 8192, 128), 90, 132));       // 16 * 4 packed rows
  CHECK_FALSE(decode_preferred(decode_problem(8, 32, 8, 1, 16384, 128), 90, 132));  // 256 blocks already
  CHECK_FALSE(decode_preferred(decode_problem(1, 32, 8, 17, 8192, 128), 90, 132));  // 68 packed rows
  CHECK_FALSE(decode_preferred(decode_problem(1, 32, 8, 1, 511, 128), 90, 132));    // few keys
  CHECK(decode_preferred(decode_problem(1, 32, 8, 1, 32768, 128, DType::f16), 70, 80));  // Volta: m8n8k4
  CHECK_FALSE(decode_preferred(decode_problem(1, 32, 8, 1, 32768, 128), 61, 30));        // no profile
  AttentionProblem bad = decode_problem(1, 32, 8, 1, 32768, 128);
  bad.heads_kv = 5;
  CHECK_FALSE(decode_preferred(bad, 90, 132));
  CHECK_FALSE(decode_preferred(decode_problem(0, 32, 8, 1, 32768, 128), 90, 132));  // empty: nothing to run
}

TEST_CASE("decode: review findings (no heads, options before the device, other-class plans, causal splits)") {
  // No heads at all: an empty problem, planned without dividing by heads_kv.
  AttentionProblem none = decode_problem(1, 8, 8, 1, 4096, 64);
  none.heads_q = none.heads_kv = 0;
  const DecodePlan e = plan_decode(none, 90, 132);
  CHECK(e.num_splits == 1);
  int64_t bytes = -1;
  flashgen_problem c;
  REQUIRE(flashgen_problem_init_bshd(&c, FLASHGEN_DTYPE_BF16, 1, 1, 4096, 0, 0, 64, 64, FLASHGEN_MASK_NONE, kQ, kK, kV,
                                     kO) == FLASHGEN_OK);
  CHECK(flashgen_decode_workspace_bytes(&c, 90, 132, 0, &bytes, nullptr) == FLASHGEN_OK);
  // Options that need no device are refused before the device is asked for.
  const AttentionProblem p = decode_problem(1, 32, 8, 1, 4096, 128);
  DecodeOptions o;
  o.num_splits = 129;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("options.num_splits (129)"), InvalidArgument);
  o = DecodeOptions{};
  o.workspace = reinterpret_cast<void*>(uintptr_t{0x50000001});
  o.workspace_bytes = 1 << 20;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("must be 256-byte aligned"), InvalidArgument);
  o.workspace = reinterpret_cast<void*>(uintptr_t{0x50000000});
  o.workspace_bytes = 0;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("must be positive"), InvalidArgument);
  o = DecodeOptions{};
  o.workspace_bytes = 123;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("without options.workspace"), InvalidArgument);
  const DecodePlan dp = plan_decode(p, 90, 132);
  o = DecodeOptions{};
  o.plan = &dp;
  o.num_splits = 4;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("is given with options.plan"), InvalidArgument);
  // A plan of another class names the field and plan_decode.
  AttentionProblem other = p;
  other.head_dim = other.head_dim_v = 64;
  other.q = p.q;
  o.num_splits = 0;
  CHECK_THROWS_WITH_AS(decode(other, nullptr, o),
                       Contains("options.plan->split.head_dim is 128 but the problem's is 64"), InvalidArgument);
  DecodePlan mixed = dp;
  mixed.combine.arch = 80;
  o.plan = &mixed;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("differ"), InvalidArgument);
  // arch 0 names plan_decode's rule; an edited plan's arch names the plan's field.
  CHECK_THROWS_WITH_AS(plan_decode(p, 0, 132), Contains("plan_decode: arch (0)"), InvalidArgument);
  DecodePlan far = dp;
  far.split.arch = 1234;
  o.plan = &far;
  CHECK_THROWS_WITH_AS(decode(p, nullptr, o), Contains("options.plan->split.arch (1234)"), InvalidArgument);
  // Packed rows are counted in 32 bits with the forward's headroom: seqlen_q * pack <= 2^31 - 257.
  const AttentionProblem tall = decode_problem(1, 32, 8, (int64_t{1} << 29) - 64, 4096, 128);  // * 4 = 2^31 - 256
  CHECK_THROWS_WITH_AS(plan_decode(tall, 90, 132), Contains("must be at most 2^31 - 257"), InvalidArgument);
  CHECK_NOTHROW(plan_decode(decode_problem(1, 32, 8, (int64_t{1} << 29) - 65, 4096, 128), 90, 132));
  // Top-left causal: only min(seqlen_q, seqlen_k) keys are visible, so no empty splits.
  const AttentionProblem tl = decode_problem(1, 32, 8, 16, 32768, 128, DType::bf16, MaskKind::causal_top_left);
  const DecodePlan t = plan_decode(tl, 90, 132);
  CHECK(t.num_splits == 1);
  CHECK_FALSE(decode_preferred(tl, 90, 132));
  // bf16 where the unit has f16 only.
  CHECK_FALSE(decode_preferred(decode_problem(1, 32, 8, 1, 32768, 128, DType::bf16), 70, 80));
  // Keys beyond the kernels' 32-bit counts.
  AttentionProblem huge = decode_problem(1, 8, 8, 1, int64_t{1} << 33, 64);
  huge.k.stride_seq = huge.v.stride_seq = 0;
  CHECK_THROWS_WITH_AS(plan_decode(huge, 90, 132), Contains("seqlen_k (8589934592)"), InvalidArgument);
}

TEST_CASE("decode plan: window masks split only the keys the rows can see; sinks and ALiBi are part of the plan") {
  // The kernel splits each block's own visible key tiles (from its first one)
  // into num_splits parts of tiles_per_split: so tiles_per_split * num_splits
  // must cover the tiles of every block, here computed row by row.
  struct W {
    MaskKind mask;
    int64_t hq, hkv, sq, sk, left, right;
  };
  const MaskKind tl = MaskKind::window_top_left, br = MaskKind::window_bottom_right;
  for (const W w : {W{br, 32, 8, 1, 32768, 1023, 0}, W{br, 32, 8, 1, 32768, 1000, 0}, W{br, 32, 8, 1, 32768, 1024, 0},
                    W{br, 32, 8, 4, 32768, 4095, 0}, W{br, 16, 16, 3, 8192, -1, 0}, W{br, 8, 8, 2, 8192, 100, -1},
                    W{tl, 32, 8, 16, 32768, -1, 100}, W{tl, 32, 8, 4, 32768, 5, 5}, W{tl, 8, 1, 7, 5000, -1, -1},
                    W{br, 8, 8, 1, 4096, 10000000, 0}, W{tl, 8, 8, 2, 4096, 3, 1000000000},
                    W{br, 8, 8, 1, 300, 20, 0}}) {
    CAPTURE(to_string(w.mask));
    CAPTURE(w.sq);
    CAPTURE(w.sk);
    CAPTURE(w.left);
    CAPTURE(w.right);
    AttentionProblem p = decode_problem(1, w.hq, w.hkv, w.sq, w.sk, 128, DType::bf16, w.mask);
    p.window_left = w.left;
    p.window_right = w.right;
    const int64_t off = w.mask == br ? w.sk - w.sq : 0;
    auto first_key = [&](int64_t i) { return w.left < 0 ? 0 : std::max<int64_t>(0, i + off - std::min(w.left, w.sk)); };
    auto last_key = [&](int64_t i) {
      return w.right < 0 ? w.sk - 1 : std::min<int64_t>(w.sk - 1, i + off + std::min(w.right, w.sk));
    };
    for (int splits : {0, 1, 3, 8}) {
      CAPTURE(splits);
      const DecodePlan dp = plan_decode(p, 90, 132, splits);
      CHECK(dp.split.mask == w.mask);
      const int bn = dp.split.tile.block_n;
      const int64_t rows = w.sq * dp.split.pack;
      // The union of the rows' keys: what the plan covers.
      const int64_t union_tiles = last_key(w.sq - 1) / bn - first_key(0) / bn + 1;
      CHECK(dp.tiles_per_split == (union_tiles + dp.num_splits - 1) / dp.num_splits);
      // Every block's own tiles fit the splits.
      for (int64_t m0 = 0; m0 < rows; m0 += dp.split.tile.block_m) {
        const int64_t q0 = m0 / dp.split.pack, q1 = (std::min(rows, m0 + dp.split.tile.block_m) - 1) / dp.split.pack;
        const int64_t tiles = last_key(q1) / bn - first_key(q0) / bn + 1;
        CHECK(tiles <= dp.tiles_per_split * dp.num_splits);
      }
      if (splits == 0) CHECK(dp.num_splits <= union_tiles);  // no empty split
    }
  }
  // A sliding window of 1024 keys over 32768: 16 key tiles of 64, not 512.
  AttentionProblem slide = decode_problem(1, 32, 8, 1, 32768, 128, DType::bf16, br);
  slide.window_left = 1023;
  slide.window_right = 0;
  const DecodePlan s = plan_decode(slide, 90, 132, 4);
  CHECK(s.tiles_per_split == 4);
  // Causal masks keep their counts: top-left sees min(seqlen_q, seqlen_k) keys, bottom-right all.
  CHECK(plan_decode(decode_problem(1, 32, 8, 16, 32768, 128, DType::bf16, MaskKind::causal_top_left), 90, 132, 2)
            .tiles_per_split == 1);
  CHECK(plan_decode(decode_problem(1, 32, 8, 16, 32768, 128, DType::bf16, MaskKind::causal_bottom_right), 90, 132, 2)
            .tiles_per_split == 256);

  // Sinks and ALiBi reach the split kernel's spec (the combine is the same).
  AttentionProblem mod = decode_problem(1, 32, 8, 1, 32768, 128);
  mod.sinks = reinterpret_cast<const float*>(uintptr_t{0x5000000});
  mod.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x6000000});
  const DecodePlan m = plan_decode(mod, 90, 132);
  CHECK(m.split.sinks);
  CHECK(m.split.alibi);
  CHECK(m.split.kernel_name().ends_with("_sinks_alibi"));
  CHECK(m.combine == plan_decode(decode_problem(1, 32, 8, 1, 32768, 128), 90, 132).combine);
  // A plan made without them does not fit a problem with them, and the other way round.
  const DecodePlan plain = plan_decode(decode_problem(1, 32, 8, 1, 32768, 128), 90, 132);
  DecodeOptions o;
  o.plan = &plain;
  CHECK_THROWS_WITH_AS(decode(mod, nullptr, o), Contains("options.plan->split.sinks is off but the problem's is on"),
                       InvalidArgument);
  AttentionProblem alibi_only = mod;
  alibi_only.sinks = nullptr;
  o.plan = &m;
  CHECK_THROWS_WITH_AS(decode(alibi_only, nullptr, o),
                       Contains("options.plan->split.sinks is on but the problem's is off"), InvalidArgument);
  DecodePlan sinks_plan = m;
  sinks_plan.split.alibi = false;
  o.plan = &sinks_plan;
  CHECK_THROWS_WITH_AS(decode(mod, nullptr, o), Contains("options.plan->split.alibi is off but the problem's is on"),
                       InvalidArgument);
  // A window plan for a causal problem: the mask is named.
  o.plan = &s;
  AttentionProblem causal = slide;
  causal.mask = MaskKind::causal_bottom_right;
  causal.window_left = causal.window_right = -1;
  CHECK_THROWS_WITH_AS(decode(causal, nullptr, o), Contains("options.plan->split.mask is windowbr but the problem's is "
                                                            "causalbr"),
                       InvalidArgument);
}

TEST_CASE("decode_preferred: a top-left window is treated like a top-left causal mask") {
  AttentionProblem p = decode_problem(1, 32, 8, 16, 32768, 128, DType::bf16, MaskKind::window_top_left);
  p.window_left = 4096;
  CHECK_FALSE(decode_preferred(p, 90, 132));  // few keys visible to 16 top-left rows
  p.mask = MaskKind::window_bottom_right;
  CHECK(decode_preferred(p, 90, 132));
  p.sinks = reinterpret_cast<const float*>(uintptr_t{0x5000000});
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x6000000});
  CHECK(decode_preferred(p, 90, 132));
}
