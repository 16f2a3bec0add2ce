// The per-unit traits table (gen/unit_traits.hpp). Sources: PTX ISA,
// "Warp-level matrix multiply-accumulate instructions" (mma.sync shapes,
// targets and operand registers) and "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate" (wgmma.mma_async, sm_90a).
#include "gen/unit_traits.hpp"

#include <array>
#include <string>

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

}  // namespace flashgen::gen
