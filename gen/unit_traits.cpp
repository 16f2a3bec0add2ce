// The per-unit traits table (gen/unit_traits.hpp). Sources: PTX ISA,
// "Warp-level matrix multiply-accumulate instructions" (mma.sync shapes,
// targets and operand registers) and "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate" (wgmma.mma_async, sm_90a).
#include "gen/unit_traits.hpp"

#include <algorithm>
#include <array>
#include <string>

#include <fmt/format.h>

#include "gen/limits.hpp"

namespace flashgen::gen {
namespace {

// Columns: unit, instruction, k, a/b/d registers, FLOPs per instruction,
// min_arch, only_arch, arch_suffix, bf16_min_arch, producer_warps,
// head_dim_multiple, min_chunk, max_chunk, block_m_is_16_warps, warps_a,
// warps_b, warps_c, max_block_n_low_warps, min_stages, smem_align, persistent, tma,
// warpgroup, tile_list, key_split_warps.
constexpr std::array<UnitTraits, 4> kUnits{{
    {MatrixUnit::m16n8k16, "mma.sync.aligned.m16n8k16", 16, 4, 2, 4, 2 * 16 * 8 * 16, 80, 0, "", 80, 0, 8, 8, 0,
     false, 0, 0, 0, 0, 1, 0, false, false, false, "flash", true},
    {MatrixUnit::m16n8k8, "mma.sync.aligned.m16n8k8", 8, 2, 1, 4, 2 * 16 * 8 * 8, 75, 0, "", 80, 0, 8, 8, 0, false, 0,
     0, 0, 0, 1, 0, false, false, false, "flash", true},
    {MatrixUnit::m8n8k4, "mma.sync.aligned.m8n8k4", 4, 2, 2, 8, 4 * 2 * 8 * 8 * 4, 70, 0, "", 0, 0, 8, 8, 0, false, 0,
     0, 0, 0, 1, 0, false, false, false, "flash", false},
    {MatrixUnit::wgmma, "wgmma.mma_async.sync.aligned.m64nNk16", 16, 0, 0, 0, 0, 90, 90, "a", 90, 4, 16, 16, 64, true,
     4, 8, 12, kWgmmaMaxBlockNOneGroup, 2, 1024, true, true, true, "wgmma_flash", false},
}};

}  // namespace

const UnitTraits& unit_traits(MatrixUnit unit) {
  for (const UnitTraits& t : kUnits)
    if (t.unit == unit) return t;
  throw Error(ErrorCode::internal,
              "unit_traits: matrix unit " + std::to_string(static_cast<int>(unit)) + " is not a MatrixUnit");
}

std::vector<TileRuleBreak> tile_rule_breaks(const UnitTraits& u, const Tile& t, int head_dim, int head_dim_v) {
  std::vector<TileRuleBreak> out;
  const std::string_view unit = to_string(u.unit);
  if (u.warps_a != 0 && t.warps != u.warps_a && t.warps != u.warps_b && t.warps != u.warps_c) {
    out.push_back({"warps", t.warps,
                   fmt::format("must be {}, {} or {} for the {} unit: one, two or three consumer warpgroups (the "
                               "kernel adds a producer warpgroup)",
                               u.warps_a, u.warps_b, u.warps_c, unit)});
  }
  if (u.block_m_is_16_warps && t.block_m != 16 * t.warps) {
    out.push_back({"block_m", t.block_m,
                   fmt::format("must be 16 * warps ({}) for the {} unit: 64 query rows per consumer warpgroup",
                               16 * t.warps, unit)});
  }
  // One consumer warpgroup runs two blocks per SM and three run 512 threads a
  // block: either way a thread starts with 128 registers.
  const bool low_regs = u.warps_a != 0 && (t.warps == u.warps_a || t.warps == u.warps_c);
  if (u.max_block_n_low_warps != 0 && low_regs && t.block_n > u.max_block_n_low_warps) {
    out.push_back({"block_n", t.block_n,
                   fmt::format("must be at most {} for the {} unit with warps {}: a thread starts with 128 "
                               "registers (warps {}: two blocks share an SM; warps {}: 512 threads a block), fewer "
                               "than a wgmma m64nNk16 with N > {} needs; use warps {} for wider key tiles",
                               u.max_block_n_low_warps, unit, t.warps, u.warps_a, u.warps_c,
                               u.max_block_n_low_warps, u.warps_b)});
  }
  if (u.warps_c != 0 && t.warps == u.warps_c && std::max(head_dim, head_dim_v) > kWgmmaMaxHeadDimThreeGroups) {
    out.push_back({"warps", t.warps,
                   fmt::format("must be {} or {} for the {} unit at head_dim {} and head_dim_v {}: three consumer "
                               "warpgroups have 160 registers a thread and take head dims up to {}",
                               u.warps_b, u.warps_a, unit, head_dim, head_dim_v, kWgmmaMaxHeadDimThreeGroups)});
  }
  if (u.block_m_is_16_warps && u.warps_a != 0 && t.warps == u.warps_a && head_dim_v > kWgmmaMaxHeadDimVOneGroup) {
    out.push_back({"warps", t.warps,
                   fmt::format("must be {} for the {} unit at head_dim_v {}: one consumer warpgroup (two blocks "
                               "share an SM) has 128 registers a thread, fewer than P.V over more than {} "
                               "columns needs",
                               u.warps_b, unit, head_dim_v, kWgmmaMaxHeadDimVOneGroup)});
  }
  if (t.stages < u.min_stages) {
    out.push_back({"stages", t.stages,
                   fmt::format("must be at least {} for the {} unit (the next K tile is read while the current V "
                               "tile is)",
                               u.min_stages, unit)});
  }
  return out;
}

}  // namespace flashgen::gen
