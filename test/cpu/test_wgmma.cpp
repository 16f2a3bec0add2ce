// The wgmma unit (sm_90a) on the host side: which problems plan() gives it,
// the spec rules it adds, the profile key that enables it, its NVRTC target and
// the source the emitter writes. The kernels' numerics are checked by the GPU
// tier (test/gpu, unit "wgmma"); the NVRTC compile grid (test_compile.cpp)
// compiles the hopper profile's wgmma kernels.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "flashgen/profile.hpp"
#include "flashgen/spec.hpp"
#include "gen/emit.hpp"
#include "gen/limits.hpp"
#include "gen/unit_traits.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

AttentionProblem problem(int head_dim, int head_dim_v) {
  alignas(16) static char buf[16];
  return make_bshd_problem(DType::bf16, 2, 300, 300, 8, 2, head_dim, head_dim_v, MaskKind::causal_bottom_right, buf,
                           buf, buf, buf);
}

KernelSpec wgmma_spec() {
  KernelSpec s;
  s.arch = 90;
  s.unit = MatrixUnit::wgmma;
  s.head_dim = s.head_dim_v = 128;
  s.tile.block_m = 64;
  s.tile.block_n = 96;
  s.tile.warps = 4;
  s.tile.stages = 2;
  return s;
}

bool mentions(const std::vector<std::string>& errors, const std::string& what) {
  for (const auto& e : errors)
    if (e.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("wgmma: plan picks it on sm_90 for head dims that are multiples of 16, m16n8k16 otherwise") {
  const Profile& hopper = profile_for_arch(90);
  REQUIRE_FALSE(hopper.wgmma_flash.empty());
  for (int d = 16; d <= 256; d += 8) {
    for (int dv : {d, 64}) {
      CAPTURE(d);
      CAPTURE(dv);
      const KernelSpec s = plan(problem(d, dv), 90);
      const bool by16 = d % 16 == 0 && dv % 16 == 0;
      CHECK(s.unit == (by16 ? MatrixUnit::wgmma : MatrixUnit::m16n8k16));
      const FlashTile& t = hopper.tile_for(std::max(d, dv), s.unit);
      CHECK(s.tile.block_m == t.tile.block_m);
      CHECK(s.tile.block_n == t.tile.block_n);
      CHECK(validate(s, hopper).empty());
      if (by16) CHECK(s.tile.block_m == 16 * s.tile.warps);
    }
  }
  // Other archs never get it.
  CHECK(plan(problem(128, 128), 80).unit == MatrixUnit::m16n8k16);
  CHECK(plan(problem(128, 128), 89).unit == MatrixUnit::m16n8k16);
  // K or V with one row repeated (stride_seq 0) cannot be read through a TMA
  // tensor map: the m16n8k16 unit serves it; a stride-0 head or batch can.
  for (int which = 0; which < 2; ++which) {
    AttentionProblem rb = problem(128, 128);
    (which == 0 ? rb.k : rb.v).stride_seq = 0;
    CHECK(plan(rb, 90).unit == MatrixUnit::m16n8k16);
    rb.seqlen_k = 1;  // a single key: nothing is repeated
    CHECK(plan(rb, 90).unit == MatrixUnit::wgmma);
  }
  AttentionProblem hb = problem(128, 128);
  hb.k.stride_head = hb.v.stride_head = hb.k.stride_batch = hb.v.stride_batch = 0;
  CHECK(plan(hb, 90).unit == MatrixUnit::wgmma);
  // Byte strides of 2^40 or more cannot be mapped either (extent > 1 only).
  AttentionProblem huge = problem(128, 128);
  huge.k.stride_batch = int64_t{1} << 39;
  CHECK(plan(huge, 90).unit == MatrixUnit::m16n8k16);
  CHECK(gen::wgmma_kv_refusal(huge).find("k.stride_batch (549755813888 elements) is 2^40 bytes or more") !=
        std::string::npos);
  huge.batch = 1;
  CHECK(plan(huge, 90).unit == MatrixUnit::wgmma);
  CHECK(gen::wgmma_kv_refusal(huge).empty());
  // A paged KV cache at every page size: pages of 8 or more keys in TMA boxes, smaller ones
  // gathered by the producer warpgroup (the same paged spec; the mode is page_shift's).
  for (const int64_t ps : {1, 2, 4, 8, 16, 256}) {
    CAPTURE(ps);
    AttentionProblem pg = problem(128, 128);
    pg.page_table = reinterpret_cast<const int32_t*>(uintptr_t{0x71000});
    pg.page_size = ps;
    pg.page_table_stride = (pg.seqlen_k + ps - 1) / ps;
    pg.num_pages = pg.batch * pg.page_table_stride;
    pg.k.stride_seq = pg.v.stride_seq = pg.heads_kv * 128;
    pg.k.stride_head = pg.v.stride_head = 128;
    pg.k.stride_batch = pg.v.stride_batch = ps * pg.k.stride_seq;
    CHECK_NOTHROW(check_problem(pg));
    const KernelSpec s = plan(pg, 90);
    CHECK(s.unit == MatrixUnit::wgmma);
    CHECK(s.paged);
    CHECK(gen::wgmma_kv_refusal(pg).empty());
  }
}

TEST_CASE("wgmma: launch refuses K/V its tensor maps cannot read, before loading anything") {
  const KernelSpec s = plan(problem(128, 128), 90);
  REQUIRE(s.unit == MatrixUnit::wgmma);
  AttentionProblem rb = problem(128, 128);
  rb.v.stride_seq = 0;
  std::string msg;
  try {
    rt::check_problem_matches_spec(rb, s);
  } catch (const InvalidArgument& e) {
    msg = e.what();
  }
  CHECK(msg.find("launch: v.stride_seq is 0 with seqlen_k = 300") != std::string::npos);
  CHECK(msg.find("TMA tensor map, which cannot repeat one row") != std::string::npos);
  CHECK(msg.find(s.kernel_name()) != std::string::npos);
  CHECK_NOTHROW(rt::check_problem_matches_spec(problem(128, 128), s));
}

TEST_CASE("wgmma: spec rules name the field, its value and what is allowed") {
  const Profile& hopper = profile_for_arch(90);
  CHECK(validate(wgmma_spec(), hopper).empty());

  KernelSpec s = wgmma_spec();
  s.head_dim = 72;
  auto e = validate(s, hopper);
  CHECK(mentions(e, "head_dim (72) must be a multiple of 16 for the wgmma unit"));

  s = wgmma_spec();
  s.tile.block_m = 128;  // 4 warps = one warpgroup = 64 rows
  e = validate(s, hopper);
  CHECK(mentions(e, "block_m (128) must be 16 * warps (64) for the wgmma unit: 64 query rows per consumer "
                    "warpgroup."));

  s = wgmma_spec();
  s.tile.warps = 12;  // three consumer warpgroups, 192 rows: the turns go round three barriers
  s.tile.block_m = 192;
  s.tile.block_n = 96;
  CHECK(validate(s, hopper).empty());
  s.tile.block_m = 128;
  CHECK(mentions(validate(s, hopper), "block_m (128) must be 16 * warps (192) for the wgmma unit"));
  s.tile.block_m = 192;
  s.tile.block_n = 208;  // 128 registers a thread at launch, as with one warpgroup
  CHECK(mentions(validate(s, hopper), "block_n (208) must be at most 192 for the wgmma unit with warps 12"));
  s.tile.block_n = 64;
  s.head_dim = s.head_dim_v = 256;  // O alone would take 128 of a consumer's 160 registers
  CHECK(mentions(validate(s, hopper), "warps (12) must be 8 or 4 for the wgmma unit at head_dim 256 and head_dim_v "
                                      "256: three consumer warpgroups have 160 registers a thread and take head dims "
                                      "up to 128."));

  s = wgmma_spec();
  s.tile.warps = 16;  // four consumer warpgroups: more than the kernel has
  s.tile.block_m = 256;
  CHECK(mentions(validate(s, hopper), "warps (16) must be 4, 8 or 12 for the wgmma unit: one, two or three consumer "
                                      "warpgroups"));

  s = wgmma_spec();
  s.tile.block_n = 208;  // with one warpgroup (two blocks per SM) ptxas cannot fit it in 128 registers
  CHECK(mentions(validate(s, hopper), "block_n (208) must be at most 192 for the wgmma unit with warps 4"));
  s.tile.warps = 8;
  s.tile.block_m = 128;
  s.head_dim = s.head_dim_v = 64;  // (128 x 64 Q + 2 x 2 x 208 x 64 K/V fits the shared memory)
  CHECK(validate(s, hopper).empty());

  // One warpgroup and head_dim_v 256: P.V's m64n256k16 needs more than 128 registers (ptxas C7602);
  // 240 (chunks issued one by one) compiles, and head_dim 256 with head_dim_v 128 too.
  s = wgmma_spec();
  s.tile.block_n = 32;
  s.head_dim = 64;
  s.head_dim_v = 256;
  CHECK(mentions(validate(s, hopper), "warps (4) must be 8 for the wgmma unit at head_dim_v 256: one consumer "
                                      "warpgroup (two blocks share an SM) has 128 registers a thread, fewer than P.V "
                                      "over more than 240 columns needs."));
  s.head_dim_v = 240;
  CHECK(validate(s, hopper).empty());
  s.head_dim = 256;
  s.head_dim_v = 128;
  CHECK(validate(s, hopper).empty());
  s.head_dim_v = 256;
  s.tile.warps = 8;
  s.tile.block_m = 128;
  CHECK(validate(s, hopper).empty());

  s = wgmma_spec();
  s.tile.warps = 64;
  s.tile.block_m = 1024;
  CHECK(mentions(validate(s, hopper), "threads (32 * warps + 128 producer threads = 2176) must be at most 1024"));

  s = wgmma_spec();
  s.tile.warps = 2;
  s.tile.block_m = 32;
  CHECK(mentions(validate(s, hopper), "warps (2)"));

  s = wgmma_spec();
  s.tile.block_n = 272;
  CHECK(mentions(validate(s, hopper), "block_n (272) must be a positive multiple of 16 and at most 256"));

  s = wgmma_spec();
  s.arch = 89;
  CHECK(mentions(validate(s, hopper), "arch (sm_89) must be sm_90 for the wgmma unit"));

  s = wgmma_spec();
  s.tile.stages = 1;
  CHECK(mentions(validate(s, hopper), "stages (1) must be at least 2 for the wgmma unit"));

  // A profile without wgmma tiles refuses the unit.
  s = wgmma_spec();
  s.arch = 80;
  CHECK(mentions(validate(s, profile_for_arch(80)), "unit (wgmma) is not a matrix unit of profile ampere"));
}

TEST_CASE("wgmma: shared memory counts the 1024-byte alignment and the padded stages") {
  KernelSpec s = wgmma_spec();
  // Q 64x128, 2 stages of K and V 96x128 (12288 elements, already a multiple of 512), + 1024.
  CHECK(s.smem_bytes() == 2 * (64 * 128 + 2 * 2 * 96 * 128) + 1024);
  s.head_dim = s.head_dim_v = 80;
  s.tile.block_n = 80;  // 6400 elements per stage -> 6656
  CHECK(s.smem_bytes() == 2 * (64 * 80 + 2 * 2 * 6656) + 1024);
  s.unit = MatrixUnit::m16n8k16;
  CHECK(s.smem_bytes() == 2 * (64 * 80 + 2 * 2 * 80 * 80));
}

// An sm_90 profile without wgmma rows, with the hopper profile's resources.
const std::string kWgmmaBaseProfile =
    "name: t\narchs: [90]\n"
    "matrix_unit: {shape: m16n8k16, operand_dtypes: [float16, bfloat16], accumulator_dtype: float32}\n"
    "flash:\n  - {head_dim_le: 256, block_m: 64, block_n: 32, warps: 4, stages: 2}\n"
    "resources: {smem_per_block: 232448, smem_per_sm: 233472, registers_per_sm: 65536, max_threads_per_sm: 2048}\n"
    "ceiling: {mma_flop_per_clock_per_sm: 2728, smem_bytes_per_clock_per_sm: 128, dram_bytes_per_clock_per_sm: 18.4}\n";

TEST_CASE("wgmma: the profile key is checked like flash, and only sm_90 profiles may have it") {
  const std::string& base = kWgmmaBaseProfile;
  const Profile p = parse_profile(base + "wgmma_flash:\n  - {head_dim_le: 128, block_m: 64, block_n: 96, warps: 4, stages: 2}\n", "t.yml");
  REQUIRE(p.wgmma_flash.size() == 1);
  std::string as_unit = base;
  as_unit.replace(as_unit.find("shape: m16n8k16"), 15, "shape: wgmma");
  CHECK_THROWS_WITH_AS(parse_profile(as_unit, "t.yml"),
                       Contains("has value 'wgmma': matrix_unit is the warp-level mma.sync unit"), InvalidArgument);
  CHECK(p.unit_for(128, 128) == MatrixUnit::wgmma);
  CHECK(p.unit_for(256, 256) == MatrixUnit::m16n8k16);  // beyond the wgmma rows
  CHECK(p.unit_for(72, 72) == MatrixUnit::m16n8k16);
  CHECK(parse_profile(base, "t.yml").wgmma_flash.empty());  // optional

  // Rows the loader refuses, each with the field and the reason its message names.
  const std::pair<const char*, const char*> refused[] = {
      {"{head_dim_le: 128, block_m: 128, block_n: 96, warps: 4, stages: 2}", "wgmma_flash[0].block_m"},
      {"{head_dim_le: 128, block_m: 64, block_n: 96, warps: 4, stages: 1}", "wgmma_flash[0].stages"},
      {"{head_dim_le: 64, block_m: 64, block_n: 256, warps: 4, stages: 2}",
       "wgmma_flash[0].block_n' has value 256: must be at most 192 for the wgmma unit with warps 4"},
      {"{head_dim_le: 64, block_m: 256, block_n: 64, warps: 16, stages: 2}",
       "wgmma_flash[0].warps' has value 16: must be 4, 8 or 12 for the wgmma unit: one, two or three consumer"},
      {"{head_dim_le: 64, block_m: 192, block_n: 224, warps: 12, stages: 2}",
       "wgmma_flash[0].block_n' has value 224: must be at most 192 for the wgmma unit with warps 12"},
      {"{head_dim_le: 256, block_m: 192, block_n: 64, warps: 12, stages: 2}",
       "wgmma_flash[0].warps' has value 12: must be 8 or 4 for the wgmma unit at head_dim 256"},
      {"{head_dim_le: 256, block_m: 64, block_n: 64, warps: 4, stages: 2}",
       "wgmma_flash[0].warps' has value 4: must be 8 for the wgmma unit at head_dim_v 256: one consumer warpgroup"},
  };
  for (const auto& [row, what] : refused) {
    CAPTURE(row);
    CHECK_THROWS_WITH_AS(parse_profile(base + "wgmma_flash:\n  - " + row + "\n", "t.yml"), Contains(what),
                         InvalidArgument);
  }
  // ... and the edges it takes: three warpgroups at bn96, one warpgroup up to head dim 240.
  for (const char* row : {"{head_dim_le: 64, block_m: 192, block_n: 96, warps: 12, stages: 2}",
                          "{head_dim_le: 240, block_m: 64, block_n: 64, warps: 4, stages: 2}"}) {
    CAPTURE(row);
    CHECK_NOTHROW(parse_profile(base + "wgmma_flash:\n  - " + row + "\n", "t.yml"));
  }
  std::string other = base;
  other.replace(other.find("[90]"), 4, "[90, 100]");
  CHECK_THROWS_WITH_AS(
      parse_profile(other + "wgmma_flash:\n  - {head_dim_le: 128, block_m: 64, block_n: 96, warps: 4, stages: 2}\n",
                    "t.yml"),
      Contains("archs lists sm_100"), InvalidArgument);
}

TEST_CASE("wgmma: a profile row takes exactly the tiles validate() takes at its head_dim_le") {
  // Both apply gen::tile_rule_breaks; a row serves head dims up to head_dim_le, so it must be refused
  // exactly when a spec with head_dim = head_dim_v = head_dim_le and its tile is.
  const Profile& hopper = profile_for_arch(90);
  int refused = 0, taken = 0;
  for (int warps : {2, 4, 8, 12, 16})
    for (int block_m : {64, 16 * warps})
      for (int block_n : {64, 96, 192, 208})
        for (int stages : {1, 2, 3})
          for (int d : {64, 128, 240, 256}) {
            KernelSpec s = wgmma_spec();
            s.head_dim = s.head_dim_v = d;
            s.tile = {block_m, block_n, warps, stages};
            const std::string row = fmt::format("{{head_dim_le: {}, block_m: {}, block_n: {}, warps: {}, stages: {}}}",
                                                d, block_m, block_n, warps, stages);
            CAPTURE(row);
            const std::vector<std::string> errors = validate(s, hopper);
            CAPTURE(fmt::format("{}", fmt::join(errors, " | ")));
            bool loads = true;
            try {
              parse_profile(kWgmmaBaseProfile + "wgmma_flash:\n  - " + row + "\n", "t.yml");
            } catch (const InvalidArgument&) {
              loads = false;
            }
            CHECK(loads == errors.empty());
            (loads ? taken : refused) += 1;
          }
  CHECK(refused > 0);  // the grid has tiles of each kind
  CHECK(taken > 0);
}

TEST_CASE("wgmma: compiled for sm_90a; sub-tiles of at most 64 columns; wrappers per width") {
  CHECK(rt::nvrtc_options(90, true).front() == "--gpu-architecture=sm_90a");
  CHECK(rt::nvrtc_options(90).front() == "--gpu-architecture=sm_90");
  CHECK(head_dim_chunks(96, MatrixUnit::wgmma) == std::vector<int>{64, 32});
  CHECK(head_dim_chunks(128, MatrixUnit::wgmma) == std::vector<int>{64, 64});
  CHECK(head_dim_chunks(80, MatrixUnit::wgmma) == std::vector<int>{64, 16});
  CHECK(head_dim_chunks(256, MatrixUnit::wgmma) == std::vector<int>{64, 64, 64, 64});
  CHECK(head_dim_chunks(112, MatrixUnit::wgmma) == std::vector<int>{64, 32, 16});

  KernelSpec s = wgmma_spec();
  s.head_dim = s.head_dim_v = 96;
  s.dtype = DType::bf16;
  const std::string src = generate(s);
  CHECK(src.find("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16") != std::string::npos);  // S
  CHECK(src.find("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") != std::string::npos);  // O, 64 columns
  CHECK(src.find("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16") != std::string::npos);  // O, 32 columns
  CHECK(src.find("fence.proxy.async.shared::cta") != std::string::npos);
  CHECK(src.find("// matrix unit: wgmma.mma_async.sync.aligned.m64nNk16 (sm_90a)") != std::string::npos);
  // A causal mask's cut tiles: V scanned for non-finite values at the keys
  // some rows do not see, cleaned only where found; no warp-level P.V.
  CHECK(src.find("fg_v_scan<") != std::string::npos);
  CHECK(src.find("fg_pv_band") == std::string::npos);
  // Warp-specialized: a producer warpgroup with TMA boxes (one map per chunk
  // width: 64 -> 0, 32 -> 1), mbarriers, setmaxnreg; no cp.async left.
  CHECK(s.threads() == 4 * 32 + 128);
  CHECK(src.find("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes") != std::string::npos);
  CHECK(src.find("fg_tma_load(dst + 2 * BLOCK_N * 0, tma.k[0], 0, n0, head_k, batch_k, bar);") != std::string::npos);
  CHECK(src.find("fg_tma_load(dst + 2 * BLOCK_N * 64, tma.k[1], 64, n0, head_k, batch_k, bar);") != std::string::npos);
  CHECK(src.find("fg_tma_load(dst + 2 * BLOCK_N * 64, tma.v[1], 64, n0, head_v, batch_v, bar);") != std::string::npos);
  CHECK(src.find("setmaxnreg.dec.sync.aligned.u32") != std::string::npos);
  CHECK(src.find("fg_copy_tile_async<") == std::string::npos);
  // Paged: pages below 32 keys are gathered by the producer warpgroup with cp.async, chunk by
  // chunk (64 + 32 columns), each thread's copies completing the full barrier.
  KernelSpec sp = s;
  sp.paged = true;
  const std::string paged_src = generate(sp);
  // The run-time choice compares page_shift with the generator's threshold, the one explain names.
  static_assert((gen::kWgmmaGatherPageBelow & (gen::kWgmmaGatherPageBelow - 1)) == 0, "a power of two");
  int shift = 0;
  while ((1 << shift) < gen::kWgmmaGatherPageBelow) ++shift;
  CHECK(paged_src.find(fmt::format("constexpr int GATHER_PAGE_SHIFT = {};", shift)) != std::string::npos);
  CHECK(paged_src.find("const bool gather = PAGED && (int)p.page_shift < GATHER_PAGE_SHIFT;") != std::string::npos);
  CHECK(paged_src.find("fg_gather_rows<64, 0, 1, NR>(dst, head, row_off, row0, nr, kv_valid, lane);") != std::string::npos);
  CHECK(paged_src.find("fg_gather_rows<32, 64, 1, NR>(dst, head, row_off, row0, nr, kv_valid, lane);") != std::string::npos);
  // Equal-width chunks share one call (each shuffled row offset serves them all): D256 is 4 x 64.
  sp.head_dim = sp.head_dim_v = 256;
  sp.tile.warps = 8;  // (one warpgroup takes head_dim_v up to 240)
  sp.tile.block_m = 128;
  sp.tile.block_n = 64;
  CHECK(generate(sp).find("fg_gather_rows<64, 0, 4, NR>(dst, head, row_off, row0, nr, kv_valid, lane);") != std::string::npos);
  CHECK(paged_src.find("cp.async.mbarrier.arrive.noinc.shared::cta.b64") != std::string::npos);
  CHECK(src.find("fg_gather_rows<") == std::string::npos);
  CHECK(gen::tma_map_index(64) == 0);
  CHECK(gen::tma_map_index(32) == 1);
  CHECK(gen::tma_map_index(16) == 2);
  CHECK(s.kernel_name() == "flashgen_fwd_sm90_bf16_d96v96_wgmma_bm64_bn96_w4_s2_none");
  const rt::CompileInputs in = rt::compile_inputs(s);
  CHECK(in.options.front() == "--gpu-architecture=sm_90a");
}

TEST_CASE("unit traits: one row per unit, and the spec's derived sizes follow it") {
  for (MatrixUnit unit : {MatrixUnit::m16n8k16, MatrixUnit::m16n8k8, MatrixUnit::m8n8k4, MatrixUnit::wgmma}) {
    CAPTURE(to_string(unit));
    const gen::UnitTraits& u = gen::unit_traits(unit);
    CHECK(u.unit == unit);
    KernelSpec s;
    s.unit = unit;
    s.tile.warps = 8;
    CHECK(s.threads() == 32 * (8 + u.producer_warps));
    CHECK(rt::kernel_nvrtc_options(s) == rt::nvrtc_options(s.arch, !u.arch_suffix.empty()));
    for (int w : head_dim_chunks(80, unit)) {
      CHECK(w >= u.min_chunk);
      if (u.max_chunk != 0) CHECK(w <= u.max_chunk);
    }
  }
  const gen::UnitTraits& w = gen::unit_traits(MatrixUnit::wgmma);
  CHECK(w.only_arch == 90);
  CHECK(w.arch_suffix == "a");
  CHECK(w.producer_warps == 4);
  CHECK(w.head_dim_multiple == 16);
  CHECK(w.smem_align == 1024);
  CHECK(w.tile_list == "wgmma_flash");
  for (MatrixUnit unit : {MatrixUnit::m16n8k16, MatrixUnit::m16n8k8, MatrixUnit::m8n8k4}) {
    const gen::UnitTraits& u = gen::unit_traits(unit);
    CHECK(u.instruction == "mma.sync.aligned." + std::string(to_string(unit)));
    CHECK(u.arch_suffix.empty());
    CHECK(u.producer_warps == 0);
    CHECK(u.head_dim_multiple == 8);
    CHECK(u.tile_list == "flash");
  }
  CHECK(gen::unit_traits(MatrixUnit::m8n8k4).bf16_min_arch == 0);
  CHECK(gen::unit_traits(MatrixUnit::m16n8k8).min_arch == 75);

  // A value outside the enum: an internal error from the table, one sentence from validate().
  CHECK_THROWS_AS(gen::unit_traits(static_cast<MatrixUnit>(9)), Error);
  KernelSpec bad = wgmma_spec();
  bad.unit = static_cast<MatrixUnit>(9);
  const auto errors = validate(bad, profile_for_arch(90));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == "unit (9) is not a matrix unit; allowed: m16n8k16, m16n8k8, m8n8k4, wgmma.");
}
