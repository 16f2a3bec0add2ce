// Per-unit traits: what the host side knows about each matrix unit, in one
// table (gen/unit_traits.cpp). Validation, head-dim splitting, shared-memory
// sizes, generated-source comments, NVRTC targets, planning and the CLI's
// model read it instead of branching on the unit. Internal to gen/, runtime/
// and tools/. The device side (templates/) has its own fragment traits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashgen/types.hpp"

namespace flashgen::gen {

struct UnitTraits {
  MatrixUnit unit;
  /// The PTX instruction the kernel is built on, as the generated source's
  /// comment names it ("mma.sync.aligned.m16n8k16",
  /// "wgmma.mma_async.sync.aligned.m64nNk16").
  std::string_view instruction;
  /// The instruction's k (elements of the reduction per instruction).
  int k;
  /// Per-thread 32-bit registers of the A, B and D fragments of one
  /// warp-level instruction (PTX ISA, mma.sync operand lists); 0 for wgmma,
  /// whose operands are warpgroup-wide and depend on N.
  int a_regs, b_regs, d_regs;
  /// Dense FLOPs of one warp-wide instruction (2*M*N*K; m8n8k4: four
  /// quadpairs of 8x8x4); 0 for wgmma (N varies).
  int64_t flops_per_instruction;
  /// The oldest compute capability with the instruction.
  int min_arch;
  /// 0, or the one compute capability its kernels run on (wgmma: 90, because
  /// they are compiled for the arch-specific target sm_90a).
  int only_arch;
  /// Suffix of the NVRTC target: "" (sm_<arch>) or "a" (sm_<arch>a).
  std::string_view arch_suffix;
  /// The oldest compute capability with a bf16 form; 0 when there is none
  /// (m8n8k4 takes float16 only).
  int bf16_min_arch;
  /// Warps the kernel adds to the tile's warps (wgmma: a 4-warp producer
  /// warpgroup that issues the TMA copies); threads() = 32 * (warps + this).
  int producer_warps;
  /// head_dim and head_dim_v must be multiples of this (8; wgmma: 16, its k).
  int head_dim_multiple;
  /// Head-dim chunks (head_dim_chunks): each a power of two of at least
  /// min_chunk and, when max_chunk > 0, at most max_chunk columns
  /// (wgmma: 16..64, one 128-byte swizzle row).
  int min_chunk, max_chunk;
  /// Tile rules beyond the generic ones (validate(), profile rows):
  /// block_m == 16 * warps instead of a multiple of it; warps one of
  /// warps_a / warps_b / warps_c when they are nonzero (wgmma: 4, 8 or 12,
  /// one, two or three consumer warpgroups); block_n at most
  /// max_block_n_low_warps when warps == warps_a (0 = no such rule); stages at
  /// least min_stages.
  bool block_m_is_16_warps;
  int warps_a, warps_b, warps_c;
  int max_block_n_low_warps;
  int min_stages;
  /// Alignment in bytes of the tiles in dynamic shared memory, with every K
  /// and V stage rounded up to it and this much added for the alignment
  /// (0: none; wgmma: 1024, its swizzle acts on address bits).
  int smem_align;
  /// The kernel is persistent: its grid is the number of blocks resident at
  /// once, each looping over work items (wgmma).
  bool persistent;
  /// K and V are read through TMA tensor maps built at launch (wgmma).
  bool tma;
  /// A warpgroup-level unit, enabled by a profile's `wgmma_flash:` list, never
  /// its `matrix_unit:` (wgmma).
  bool warpgroup;
  /// The profile key of its default tiles: "flash" or "wgmma_flash".
  std::string_view tile_list;
  /// The split-KV forward may give each key tile to several warps that hold
  /// the same 16 rows (fwd_split with block_m < 16 * warps; its rows are few):
  /// the m16n8 units, whose kernel merges the warps' states at the end.
  bool key_split_warps;
};

/// The traits of `unit`. Throws Error(internal) for a value outside the enum.
const UnitTraits& unit_traits(MatrixUnit unit);

/// A unit's own tile rule that a tile breaks: the tile field at fault, its
/// value, and what is allowed, as a clause that reads after "<field>
/// (<value>)" (validate()) or "has value <value>:" (the profile loader), e.g.
/// "must be at most 192 for the wgmma unit with warps 4: ...".
struct TileRuleBreak {
  std::string_view field;  ///< "warps", "block_m", "block_n" or "stages"
  int value;
  std::string allowed;
};

/// The rules of `u` beyond the generic tile bounds (block_m_is_16_warps,
/// warps_a/b/c, max_block_n_low_warps, min_stages, and the register bounds of
/// gen/limits.hpp on the head dims of one and three consumer warpgroups) that
/// `tile` breaks when it serves head dims up to head_dim and head_dim_v; empty
/// when it breaks none. validate() and the profile loader both report these,
/// so a profile row takes exactly the tiles a spec may have.
std::vector<TileRuleBreak> tile_rule_breaks(const UnitTraits& u, const Tile& tile, int head_dim, int head_dim_v);

}  // namespace flashgen::gen
