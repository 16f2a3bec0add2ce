// The NVRTC compile grid (CPU tier; NVRTC needs no GPU): kernels of the real
// emitters and the builtin profiles for sm_70 (volta, m8n8k4), sm_75 (turing,
// m16n8k8), sm_80, sm_86 (ampere), sm_89 (ada), sm_90 (hopper), sm_100, sm_103
// (blackwell) and sm_120, sm_121 (blackwell_consumer; both through m16n8k16),
// checked to be non-empty ELF cubins whose ptxas report shows no spill stores
// (and, for the m8n8k4 and m16n8k8 kernels, no stack frame: no local memory at
// all). The exceptions (spill_limit_bytes): sm_120/121 kernels with head_dim >
// 128 up to 80 bytes (the d256 causal ones with a bias reach 72 since the
// causal P.V steps), sm_90a wgmma kernels with a causal mask up to 8,
// sm_90's m16n8k16 kernels up to 16 (96 for the 128-row tiles above head dim
// 88), the sm_80-90 one-stage D256 tile 64x64x4x1 up to 96, m8n8k4 fwd_split kernels with head_dim >
// 128 up to 72; every kernel with spills is listed in
// the summary.
//
// The job list is the same on every machine for the archs its NVRTC targets (the
// rotations advance over every known arch; jobs of an arch it does not target are
// dropped), so a machine without sm_70 compiles a subset of what CI compiles.
// Coverage (not a full cross product; every value of every factor at every arch):
//   A. every arch x profile dtype x head_dim in {16, 32, 64, 72, 80, 96, 128, 160, 192, 256},
//      with the (mask, bias, lse) combination rotating through all 18;
//   B. every arch x head_dim in {96, 256} x all 18 (mask, bias, lse)
//      combinations, dtype alternating over the profile's dtypes;
//   C. the split-KV forward (fwd_split) on every arch with the profile's
//      mma.sync unit: head dims 64, 128, 256 x pack 1, 4, 16 x its dtypes,
//      and for pack 4 the decode planner's key-split tile (16 rows);
//   D-F. windows, sinks and ALiBi; packed batches and paged caches; one
//      paged 3-warp tile (each section says what it adds);
//   G. the wgmma kernels (sm_90a) of the sm_90 profile's wgmma_flash tiles: six
//      head dims x its dtypes, windows with sinks and ALiBi, softcap, packed
//      batches over a paged cache.
// sm_70 compiles with an NVRTC of CUDA 12 (CUDA 13's refuses sm_70; see
// runtime/nvrtc.hpp); without one on the machine its part is skipped with a
// message saying so. The Blackwell archs need NVRTC 12.9 or later (12.8 has
// sm_100 and sm_120 only); an older NVRTC skips those it lacks with a message,
// NVRTC 13 must compile them all.
//
// Compiles run on a pool of hardware_concurrency threads into a fresh cache
// directory (every kernel really goes through NVRTC); the per-kernel NVRTC time
// is reported.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "gen/unit_traits.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;

namespace {

struct Combo {
  MaskKind mask;
  BiasKind bias;
  bool lse;
};

std::vector<Combo> all_combos() {
  std::vector<Combo> v;
  for (MaskKind m : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right})
    for (BiasKind b : {BiasKind::none, BiasKind::input, BiasKind::f32})
      for (bool l : {false, true}) v.push_back({m, b, l});
  return v;
}

// Spills reported and bounded instead of failed: NVRTC 13.0's ptxas for
// sm_120/121 does not fit the head_dim > 128 kernels (16 query rows of O and Q
// fragments per warp at head_dim 256) in 255 registers, as it does for the same
// source on sm_86/89 (12..36 bytes in this grid); no m16n8k16 tile has fewer
// rows per warp (profiles/blackwell_consumer.yml).
// Spill bytes a kernel may report (listed in the summary); 0 unless noted.
//  - sm_120/121, head dims above 128: 12-36 bytes at 255 registers (the same
//    source fits for sm_89); bounded at 80.
//  - m16n8k16 one-stage 64x64x4x1 above head dim 128 (the sm_80-90 d<=256 row):
//    8-96 bytes, 0-4 spill loads in the key loop. Bounded at 96.
//  - m8n8k4 with head dims above 128, sinks and a mask: 24-40 bytes in the
//    epilogue (the sink's merge). Bounded at 64.
//  - m16n8k16 with a sliding window: 4-8 bytes at head dims 128-256. Bounded at 16.
//  - the split kernel with ALiBi and packed rows: 16-20 bytes. Bounded at 32.
//  - packed batches or paged KV caches at head dims above 128: 8-32 bytes at
//    255 registers (the sequence's offsets, the page table's row pointer).
//    Bounded at 40.
//  - wgmma with a paged KV cache: 20-72 bytes (the producer warpgroup's 24
//    registers hold the page lookups of its boxes; the consumers' 64-bit work
//    item division becomes a call whose return address goes to the stack; the
//    D256 causal packed batch with LSE loads 72 bytes). Bounded at 80.
//  - wgmma above head dim 128 with a bias: D256 with LSE reports 12 bytes of
//    stores and 48 of loads, at the kernel's start and after the key loop
//    (nvdisasm: no STL/LDL inside a key loop). Bounded at 48.
//  - sm_90a wgmma kernels with a causal mask: the loop of the tiles the mask
//    cuts (templates/fwd_wgmma.cu) is a second copy of the key loop; the D256
//    bm128 bn64 w8 tile reports 8 bytes, the others 0. Bounded at 8.
//  - sm_90's m16n8k16 kernels (Hopper's fallback for head dims that are not
//    multiples of 16 and for K/V with stride_seq 0): the d256 causal kernels
//    with a bias report 4-12 bytes at 255 registers (the causal P.V steps and
//    the shared row parts, templates/fwd_rows.cuh; where the SASS puts them is
//    not checked yet). Bounded at 16.
int64_t spill_limit_bytes(const KernelSpec& s) {
  // fwd_split on m8n8k4, head dims above 128 with pack > 1, a causal mask and a
  // bias: 20-24 bytes of spill stores, 64-68 of loads at 255 registers (the
  // packed rows' address arithmetic).
  if (s.family == KernelFamily::fwd_split && s.unit == MatrixUnit::m8n8k4 && s.head_dim > 128) return 72;
  // m8n8k4, head dims above 128 with sinks and a mask: 24-40 bytes at 255
  // registers in the epilogue (the sink's merge into LSE and O's factor, once
  // per block; NVRTC 12.9 for sm_70).
  if (s.unit == MatrixUnit::m8n8k4 && s.head_dim > 128 && s.sinks && s.mask != MaskKind::none) return 64;
  if ((s.arch == 120 || s.arch == 121) && std::max(s.head_dim, s.head_dim_v) > 128) return 80;
  // The sm_80-90 profiles' one-stage d<=256 row, 64x64x4x1 (a 16x64 S and P a warp beside O's 16x256):
  // 8-96 bytes at 255 registers on sm_80/86/89/90 (NVRTC 13), 0-4 LDL in the key loop of 1100-3800
  // instructions (nvdisasm: sm_86 bf16 LSE 1, sm_80 causal f32 bias 4), the rest in the prologue and
  // epilogue; 1.04-1.09x the spill-free two-stage 64x32 on an H100 (bench/NOTES.md session 30).
  // Bounded at 96 (before the window, packed-batch and sm_90 rules below).
  if (s.unit == MatrixUnit::m16n8k16 && s.tile.stages == 1 && s.tile.block_m == 64 && s.tile.block_n == 64 &&
      std::max(s.head_dim, s.head_dim_v) > 128)
    return 96;
  // (before the window rule: a paged d256 window kernel reports 24-32 bytes)
  if (s.unit == MatrixUnit::wgmma && s.paged) return 80;
  // wgmma above head dim 128 with a bias: 12-16 bytes of stores, 48-52 of loads (D256, LSE; NVRTC 13).
  if (s.unit == MatrixUnit::wgmma && std::max(s.head_dim, s.head_dim_v) > 128 && s.bias != BiasKind::none) return 56;
  if ((s.varlen || s.paged) && std::max(s.head_dim, s.head_dim_v) > 128) return 40;
  // m16n8k16 with a sliding window: 4-8 bytes at 255 registers at head dims 128-256 (the window's
  // lower-edge mask and the P.V steps' bad-key bits); the sm_90 split kernel at D128 (bm128, pack 4,
  // windowtl) 20 since its copies keep a byte address a row (bench/NOTES.md step 63), 24 stored and
  // 32 loaded since step 68 (nvdisasm: 5 LDL in its key loop of 2799 instructions, 4 before).
  // Bounded at 32.
  if (s.unit == MatrixUnit::m16n8k16 && (s.mask == MaskKind::window_top_left || s.mask == MaskKind::window_bottom_right))
    return 32;
  // The split kernel with ALiBi and packed rows: 16-20 bytes at 255 registers (each packed
  // row's head and slope). Bounded at 32.
  if (s.family == KernelFamily::fwd_split && s.alibi && s.pack > 1) return 32;
  // Three consumer warpgroups (160 registers a consumer) with softcap, bn96: D80 f16 one 4-byte
  // register, D96 f16 60 bytes stored and 108 loaded (NVRTC 13), D80 bf16 causal 24 / 44 with the
  // last tile's own step (PEEL_LAST), all before the key loops and in the epilogue (nvdisasm: none
  // inside a key loop). The D64 bn128 tile: f16 causal 80 / 96, some of it inside both key loops
  // (nvdisasm, nvcc 13: 12 of 44 spill instructions); its softcap rows are measured against bn96
  // (bench/NOTES.md session 26). Bounded at 112 (before the masked rules below).
  if (s.unit == MatrixUnit::wgmma && s.tile.warps == 12 && s.softcap) return 112;
  // Three consumer warpgroups with a mask: the last tile's own step (PEEL_LAST) is a third copy of
  // the tile step; D96 f16 causalbr 12 bytes stored, 24 loaded (NVRTC 13); the D64 bn128 tile with
  // a bias 12-28 / 12-32. All before the work item's key loops and in its epilogue (nvdisasm).
  // Bounded at 32.
  if (s.unit == MatrixUnit::wgmma && s.tile.warps == 12 && s.mask != MaskKind::none) return 32;
  if (s.unit == MatrixUnit::wgmma && s.mask != MaskKind::none) return 8;
  // sm_90's 128-row m16n8k16 tiles (two 16-row slices per warp) above head dim 88: 4-40 bytes at
  // 255 registers (tools/sass_stats.sh, bench/NOTES.md step 41), 80 bytes of loads for the split
  // kernel with a bias at D128; still 1.17-1.28x the 64-row tile at D128 on an H200. Bounded at 96.
  if (s.arch == 90 && s.unit == MatrixUnit::m16n8k16 && s.tile.block_m == 128 && std::max(s.head_dim, s.head_dim_v) > 88)
    return 96;
  if (s.arch == 90 && s.unit == MatrixUnit::m16n8k16) return 16;
  return 0;
}

struct PtxasReport {
  int entries = 0;          // "Function properties for" blocks
  int64_t spill_stores = 0;  // sum over the report
  int64_t spill_loads = 0;
  int max_registers = 0;
  int64_t stack_frame = 0;  // sum of "N bytes stack frame"
  bool ok = false;          // every line parsed
};

PtxasReport parse_ptxas(const std::string& log) {
  PtxasReport r;
  r.ok = true;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("Function properties for") != std::string::npos) r.entries++;
    size_t at = line.find("bytes spill stores");
    if (at != std::string::npos) {
      // "...  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
      size_t comma = line.rfind(',', at);
      long long stores = -1, loads = -1;
      if (comma == std::string::npos ||
          std::sscanf(line.c_str() + comma + 1, " %lld bytes spill stores, %lld bytes spill loads", &stores,
                      &loads) != 2) {
        r.ok = false;
        continue;
      }
      r.spill_stores += stores;
      r.spill_loads += loads;
    }
    at = line.find(" bytes stack frame");
    if (at != std::string::npos) {
      size_t start = at;
      while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') --start;
      if (start < at) r.stack_frame += std::stoll(line.substr(start, at - start));
    }
    at = line.find("Used ");
    if (at != std::string::npos && line.find(" registers") != std::string::npos) {
      int regs = 0;
      if (std::sscanf(line.c_str() + at, "Used %d registers", &regs) == 1)
        r.max_registers = std::max(r.max_registers, regs);
    }
  }
  return r;
}

}  // namespace

TEST_CASE("compile: NVRTC grid over archs, dtypes, head dims, masks, bias, LSE, windows, sinks, ALiBi and packed batches") {
  REQUIRE(rt::nvrtc_available());
  std::vector<int> archs = {75, 80, 86, 89, 90};
  if (rt::nvrtc_available_for(70)) {
    archs.insert(archs.begin(), 70);
  } else {
    MESSAGE("sm_70 (volta, m8n8k4) kernels skipped: no NVRTC on this machine targets sm_70 (CUDA 13's does "
            "not); install one with `pip install nvidia-cuda-nvrtc-cu12` or set FLASHGEN_NVRTC_LIBRARY");
  }
  for (int arch : {100, 103, 120, 121}) {
    if (rt::nvrtc_available_for(arch)) {
      archs.push_back(arch);
      continue;
    }
    INFO("NVRTC ", rt::nvrtc_version().str(), " does not target sm_", arch);
    REQUIRE(rt::nvrtc_version().major < 13);  // NVRTC 13 targets every Blackwell arch
    MESSAGE("sm_" << arch << " kernels skipped: NVRTC " << rt::nvrtc_version().str()
                  << " does not target it (NVRTC 12.9 or later does)");
  }
  // The jobs are generated over every arch the grid knows, in one order, and the
  // rotations below advance for each of them whether or not this machine's NVRTC
  // targets it; a job for an arch it does not target is dropped. So every machine
  // compiles the same kernels for the archs it has (without a CUDA 12 NVRTC, sm_70's
  // are left out, not the other archs' combinations shifted to untested ones).
  const std::vector<int> gen_archs = {70, 75, 80, 86, 89, 90, 100, 103, 120, 121};
  const std::set<int> compiled_archs(archs.begin(), archs.end());
  for (int arch : archs) REQUIRE(std::find(gen_archs.begin(), gen_archs.end(), arch) != gen_archs.end());
  const std::vector<int> head_dims = {16, 32, 64, 72, 80, 96, 128, 160, 192, 256};
  const std::vector<int> full_combo_dims = {96, 256};
  const std::vector<Combo> combos = all_combos();
  REQUIRE(combos.size() == 18);

  struct Job {
    KernelSpec spec;
  };
  std::vector<Job> jobs;
  std::set<std::string> seen;
  // A spec the profile must accept, added once; true when it is new.
  auto add_valid = [&](const KernelSpec& s, const Profile& profile) {
    const auto problems = validate(s, profile);
    std::string why;
    for (const auto& pr : problems) why += "\n  " + pr;
    INFO("spec ", s.canonical(), " profile ", profile.name, why);
    REQUIRE(problems.empty());
    if (compiled_archs.count(s.arch) == 0) return false;
    if (!seen.insert(s.canonical()).second) return false;
    jobs.push_back({s});
    return true;
  };
  auto add = [&](const Profile& profile, int arch, DType dt, int d, const Combo& c) {
    add_valid(test::spec_for(profile, arch, dt, d, d, c.mask, c.bias, c.lse), profile);
  };
  size_t rotate = 0;
  for (int arch : gen_archs) {
    const Profile& profile = profile_for_arch(arch);
    const std::vector<DType>& dtypes = profile.matrix_unit.operand_dtypes;
    for (DType dt : dtypes)
      for (int d : head_dims) add(profile, arch, dt, d, combos[rotate++ % combos.size()]);
    for (int d : full_combo_dims)
      for (size_t i = 0; i < combos.size(); ++i) add(profile, arch, dtypes[i % dtypes.size()], d, combos[i]);
  }

  // Coverage: every value of every factor at every arch.
  for (int arch : archs) {
    std::set<int> dts, ds, masks, biases, lses;
    std::set<std::tuple<int, int, int, int>> full;  // (d, mask, bias, lse)
    for (const Job& j : jobs) {
      if (j.spec.arch != arch) continue;
      dts.insert(static_cast<int>(j.spec.dtype));
      ds.insert(j.spec.head_dim);
      masks.insert(static_cast<int>(j.spec.mask));
      biases.insert(static_cast<int>(j.spec.bias));
      lses.insert(j.spec.has_lse ? 1 : 0);
      full.insert({j.spec.head_dim, static_cast<int>(j.spec.mask), static_cast<int>(j.spec.bias),
                   j.spec.has_lse ? 1 : 0});
    }
    CAPTURE(arch);
    CHECK(dts.size() == profile_for_arch(arch).matrix_unit.operand_dtypes.size());
    CHECK(ds.size() == head_dims.size());
    CHECK(masks.size() == 3);
    CHECK(biases.size() == 3);
    CHECK(lses.size() == 2);
    for (int d : full_combo_dims)
      for (const Combo& c : combos)
        CHECK(full.count({d, static_cast<int>(c.mask), static_cast<int>(c.bias), c.lse ? 1 : 0}) == 1);
  }

  // C. The split-KV forward (fwd_split) on every arch with its profile's
  // mma.sync unit: head dims 64, 128, 256, pack 1, 4, 16 and the 18 (mask,
  // bias, lse) combinations rotating, the profile's dtypes.
  size_t split_jobs = 0;
  for (int arch : gen_archs) {
    const Profile& profile = profile_for_arch(arch);
    // (every builtin profile's matrix_unit is an mma.sync unit; wgmma is an extra)
    for (DType dt : profile.matrix_unit.operand_dtypes)
      for (int d : {64, 128, 256})
        for (int pack : {1, 4, 16}) {
          const Combo& c = combos[rotate++ % combos.size()];
          KernelSpec s = test::spec_for(profile, arch, dt, d, d, c.mask, c.bias, c.lse);
          s.family = KernelFamily::fwd_split;
          s.unit = profile.matrix_unit.shape;
          s.pack = pack;
          if (add_valid(s, profile)) ++split_jobs;
          // pack 4: also the decode planner's tile for one query row (4 packed
          // rows: 16-row blocks whose warps split each key tile on the m16n8
          // units, at 3 blocks per SM).
          if (pack != 4) continue;
          const AttentionProblem pr = make_bshd_problem(
              dt, 1, 1, 4096, 32, 8, d, d, c.mask, reinterpret_cast<const void*>(uintptr_t{0x100000}),
              reinterpret_cast<const void*>(uintptr_t{0x200000}), reinterpret_cast<const void*>(uintptr_t{0x300000}),
              reinterpret_cast<void*>(uintptr_t{0x400000}));
          KernelSpec k = plan_decode(pr, arch, 100).split;
          k.bias = c.bias;
          k.has_lse = c.lse;
          CHECK(k.key_warps() == (profile.matrix_unit.shape == MatrixUnit::m8n8k4 ? 1 : std::min(4, k.tile.block_n / 16)));
          INFO("spec ", k.canonical());
          REQUIRE(validate(k, profile).empty());
          if (compiled_archs.count(arch) != 0 && seen.insert(k.canonical()).second) {
            jobs.push_back({k});
            ++split_jobs;
          }
        }
  }
  CHECK(split_jobs > 0);

  // D. Sliding windows, sinks and ALiBi on every arch: head dims 64, 128, 256,
  // five modifier sets rotating (a bias on every other kernel), the
  // forward and the decode planner's split kernel (pack 4).
  struct Modifiers {
    MaskKind mask;
    bool sinks, alibi;
  };
  const Modifiers modifier_sets[] = {{MaskKind::window_top_left, false, false},
                                     {MaskKind::window_bottom_right, true, false},
                                     {MaskKind::none, false, true},
                                     {MaskKind::window_bottom_right, true, true},
                                     {MaskKind::causal_top_left, true, true}};
  size_t modifier_jobs = 0;
  for (int arch : gen_archs) {
    const Profile& profile = profile_for_arch(arch);
    const std::vector<DType>& dtypes = profile.matrix_unit.operand_dtypes;
    for (int d : {64, 128, 256})
      for (bool split : {false, true}) {
        const Modifiers& m = modifier_sets[rotate % 5];
        KernelSpec s = test::spec_for(profile, arch, dtypes[rotate % dtypes.size()], d, d, m.mask,
                                      rotate % 2 == 0 ? BiasKind::f32 : BiasKind::none, true);
        ++rotate;
        s.sinks = m.sinks;
        s.alibi = m.alibi;
        if (split) {
          s.family = KernelFamily::fwd_split;
          s.unit = profile.matrix_unit.shape;
          s.pack = 4;
        }
        if (add_valid(s, profile)) ++modifier_jobs;
      }
  }
  CHECK(modifier_jobs >= archs.size() * 5);

  // E. Packed (variable-length) batches and paged KV caches on every arch: head
  // dims 64 and 256 (the register edge), masks and layouts rotating (packed,
  // paged, both), the forward and the split kernel.
  const MaskKind varlen_masks[] = {MaskKind::causal_bottom_right, MaskKind::window_top_left, MaskKind::none};
  size_t varlen_jobs = 0;
  for (int arch : gen_archs) {
    const Profile& profile = profile_for_arch(arch);
    const std::vector<DType>& dtypes = profile.matrix_unit.operand_dtypes;
    for (int d : {64, 256})
      for (bool split : {false, true}) {
        KernelSpec s = test::spec_for(profile, arch, dtypes[rotate % dtypes.size()], d, d, varlen_masks[rotate % 3],
                                      BiasKind::none, rotate % 2 == 0);
        s.varlen = rotate % 3 != 1;
        s.paged = rotate % 3 != 0;
        ++rotate;
        if (split) {
          s.family = KernelFamily::fwd_split;
          s.unit = profile.matrix_unit.shape;
          s.pack = 4;
        }
        if (add_valid(s, profile)) ++varlen_jobs;
      }
  }
  CHECK(varlen_jobs >= archs.size() * 3);

  // F. A paged tile whose copy pass fg_copy_tile_async's page-run path does not take (a pass
  // must advance a power of two of rows): 3 warps, a pass of 12 rows at d 64. It takes the
  // general per-row path. (The other exclusion, more than 32 passes a tile, needs one-warp
  // tiles, which spill beyond this test's limits at any head dim: checked by hand, bench/NOTES.md
  // step 50.)
  {
    const Profile& profile = profile_for_arch(80);
    KernelSpec s = test::spec_for(profile, 80, DType::f16, 64, 64, MaskKind::causal_bottom_right, BiasKind::none, true);
    s.tile = Tile{48, 64, 3, 2};
    s.paged = true;
    add_valid(s, profile);
  }

  // G. The wgmma kernels (sm_90a) of every sm_90 profile's wgmma_flash tiles: head dims 64, 80,
  // 96, 128, 192, 256 x the profile's dtypes with the (mask, bias, lse) combinations rotating; then
  // at head dims 64, 128 and 256 a sliding window with sinks and ALiBi, softcap with a causal
  // mask, and a packed batch over a paged cache.
  size_t wgmma_jobs = 0;
  for (int arch : gen_archs) {
    const Profile& profile = profile_for_arch(arch);
    if (profile.wgmma_flash.empty()) continue;
    const std::vector<DType>& dtypes = profile.matrix_unit.operand_dtypes;
    auto wgmma_spec = [&](DType dt, int d, MaskKind mask, BiasKind bias, bool lse) {
      KernelSpec s = test::spec_for(profile, arch, dt, d, d, mask, bias, lse);
      s.unit = MatrixUnit::wgmma;
      s.tile = profile.tile_for(d, MatrixUnit::wgmma).tile;
      return s;
    };
    for (DType dt : dtypes)
      for (int d : {64, 80, 96, 128, 192, 256}) {
        const Combo& c = combos[rotate++ % combos.size()];
        if (add_valid(wgmma_spec(dt, d, c.mask, c.bias, c.lse), profile)) ++wgmma_jobs;
      }
    for (int d : {64, 128, 256}) {
      const DType dt = dtypes[rotate++ % dtypes.size()];
      KernelSpec w = wgmma_spec(dt, d, MaskKind::window_bottom_right, BiasKind::none, true);
      w.sinks = w.alibi = true;
      KernelSpec c = wgmma_spec(dt, d, MaskKind::causal_top_left, BiasKind::none, false);
      c.softcap = true;
      KernelSpec v = wgmma_spec(dt, d, MaskKind::causal_bottom_right, BiasKind::none, true);
      v.varlen = v.paged = true;
      for (const KernelSpec& k : {w, c, v})
        if (add_valid(k, profile)) ++wgmma_jobs;
    }
  }
  // Three consumer warpgroups (192-row tiles: the hopper profile's d <= 96 row, and D96 bn64),
  // both dtypes, none / causal with a bias and LSE / a window with sinks and ALiBi / softcap /
  // paged varlen rotating, and softcap without a mask.
  if (compiled_archs.count(90) != 0) {
    const Profile& hopper = profile_for_arch(90);
    const std::pair<int, int> wg3_tiles[] = {{64, 96}, {80, 96}, {96, 96}, {96, 64}};
    int n = 0;
    for (const auto& [d, bn] : wg3_tiles)
      for (DType dt : hopper.matrix_unit.operand_dtypes) {
        KernelSpec s = test::spec_for(hopper, 90, dt, d, d, MaskKind::none, BiasKind::none, false);
        s.unit = MatrixUnit::wgmma;
        s.tile = Tile{192, bn, 12, 2};
        switch (n++ % 5) {
          case 1: s.mask = MaskKind::causal_bottom_right, s.bias = BiasKind::f32, s.has_lse = true; break;
          case 2: s.mask = MaskKind::window_bottom_right, s.sinks = s.alibi = s.has_lse = true; break;
          case 3: s.mask = MaskKind::causal_top_left, s.softcap = true; break;
          case 4: s.mask = MaskKind::causal_bottom_right, s.varlen = s.paged = s.has_lse = true; break;
          default: break;
        }
        if (add_valid(s, hopper)) ++wgmma_jobs;
        KernelSpec sc = test::spec_for(hopper, 90, dt, d, d, MaskKind::none, BiasKind::none, false);
        sc.unit = MatrixUnit::wgmma;
        sc.tile = Tile{192, bn, 12, 2};
        sc.softcap = true;
        if (add_valid(sc, hopper)) ++wgmma_jobs;
        // and a paged cache without a mask and with a window (the Q prefetch's register edge)
        for (MaskKind m : {MaskKind::none, MaskKind::window_top_left}) {
          KernelSpec pg = test::spec_for(hopper, 90, dt, d, d, m, BiasKind::none, true);
          pg.unit = MatrixUnit::wgmma;
          pg.tile = Tile{192, bn, 12, 2};
          pg.paged = true;
          if (add_valid(pg, hopper)) ++wgmma_jobs;
        }
      }
  }
  if (compiled_archs.count(90) != 0) CHECK(wgmma_jobs >= 38);

  test::ScopedCache cache;  // fresh: every kernel goes through NVRTC
  struct Result {
    CompiledKernel kernel;
    std::string error;
    double seconds = 0;
  };
  std::vector<Result> results(jobs.size());
  std::atomic<size_t> next{0};
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t count_before = rt::nvrtc_compile_count();
  const auto wall0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < workers; ++w)
      pool.emplace_back([&] {
        for (size_t i = next++; i < jobs.size(); i = next++) {
          const auto t0 = std::chrono::steady_clock::now();
          try {
            results[i].kernel = compile(jobs[i].spec);
          } catch (const std::exception& e) {
            results[i].error = e.what();
          }
          results[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      });
    for (auto& t : pool) t.join();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  CHECK(rt::nvrtc_compile_count() == count_before + jobs.size());

  std::map<int, std::vector<double>> per_arch;
  std::vector<double> all;
  int worst_regs = 0;
  std::string worst_name;
  std::string spilled;  // one line per kernel with spills, for the summary
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const Result& r = results[i];
    CAPTURE(j.spec.canonical());
    INFO("error: ", r.error);
    REQUIRE(r.error.empty());
    CHECK_FALSE(r.kernel.from_cache);
    CHECK(test::is_elf(r.kernel.cubin));
    CHECK(r.kernel.name == j.spec.kernel_name());
    INFO("ptxas report:\n", r.kernel.compile_log);
    // (wgmma kernels compile for sm_90a: the unit's arch suffix)
    CHECK(r.kernel.compile_log.find("Compiling entry function '" + j.spec.kernel_name() + "' for 'sm_" +
                                    std::to_string(j.spec.arch) + std::string(gen::unit_traits(j.spec.unit).arch_suffix) +
                                    "'") != std::string::npos);
    const PtxasReport rep = parse_ptxas(r.kernel.compile_log);
    CHECK(rep.ok);
    CHECK(rep.entries >= 1);
    CHECK(rep.spill_stores <= spill_limit_bytes(j.spec));
    CHECK(rep.spill_loads <= spill_limit_bytes(j.spec));
    if (j.spec.unit != MatrixUnit::m16n8k16 && spill_limit_bytes(j.spec) == 0) CHECK(rep.stack_frame == 0);
    if (rep.spill_stores != 0 || rep.spill_loads != 0)
      spilled += "\n  " + j.spec.kernel_name() + ": " + std::to_string(rep.spill_stores) + " B spill stores, " +
                 std::to_string(rep.spill_loads) + " B spill loads, " + std::to_string(rep.max_registers) +
                 " registers";
    if (rep.max_registers > worst_regs) {
      worst_regs = rep.max_registers;
      worst_name = j.spec.kernel_name();
    }
    per_arch[j.spec.arch].push_back(r.seconds);
    all.push_back(r.seconds);
  }

  auto summary = [](const std::vector<double>& v) {
    double sum = 0, lo = 1e30, hi = 0;
    for (double x : v) {
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%zu kernels, NVRTC s/kernel mean %.2f min %.2f max %.2f (sum %.1f s)",
                  v.size(), v.empty() ? 0.0 : sum / v.size(), v.empty() ? 0.0 : lo, hi, sum);
    return std::string(buf);
  };
  std::string report = "compile grid: " + summary(all) + "; wall " + std::to_string(wall) + " s on " +
                       std::to_string(workers) + " threads; NVRTC " + rt::nvrtc_version().str() +
                       (rt::nvrtc_available_for(70) ? " (sm_70: NVRTC " + rt::nvrtc_version_for(70).str() + " from " +
                                                          rt::nvrtc_library_for(70) + ")"
                                                    : std::string()) +
                       "; most registers " + std::to_string(worst_regs) + " (" + worst_name + ")";
  for (const auto& [arch, v] : per_arch) report += "\n  sm_" + std::to_string(arch) + ": " + summary(v);
  if (!spilled.empty()) report += "\nkernels with spills:" + spilled;
  MESSAGE(report);
}
