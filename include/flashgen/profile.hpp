// libflashgen — hardware profiles (profiles/*.yml).
//
// A profile describes one GPU generation as data: its matrix unit, the default
// flash-attention tiles by head_dim bound, its SM resources and the numbers
// needed to compute its matrix-unit ceiling. No code in libflashgen names a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashgen/types.hpp"

namespace flashgen {

/// One row of a profile's `flash:` list: the tile (types.hpp) used for head
/// dims <= head_dim_le (rows are sorted by head_dim_le; the first that covers
/// the problem's max(head_dim, head_dim_v) wins).
/// Rows of `wgmma_flash:` (the wgmma unit) follow stricter rules: warps 4, 8
/// or 12 (one, two or three consumer warpgroups; the kernel adds a producer
/// warpgroup), block_m == 16 * warps (64 query rows per warpgroup), block_n <=
/// 256 (<= 192 with warps 4 or 12), head_dim_le <= 128 with warps 12 and <= 240
/// with warps 4 (register budgets: gen/limits.hpp), stages in [2, 4].
struct FlashTile {
  int head_dim_le = 0;  ///< inclusive head-dim bound, elements
  Tile tile;            ///< block_m, block_n, warps, stages
};

/// The warp-level mma.sync instruction of a profile (m16n8k16, m16n8k8 or
/// m8n8k4; never wgmma, which a profile enables with wgmma_flash). Its operand
/// dtypes also bound the wgmma kernels' dtypes.
struct MatrixUnitDesc {
  MatrixUnit shape = MatrixUnit::m16n8k16;
  std::vector<DType> operand_dtypes;    ///< operand dtypes the unit accepts
  std::string accumulator_dtype = "float32";
};

/// A hardware generation (see profiles/*.yml for the field documentation).
struct Profile {
  std::string name;                 ///< e.g. "hopper"
  std::string source;               ///< file the profile was read from ("<builtin>/hopper.yml")
  std::vector<int> archs;           ///< compute capabilities as 10*major+minor, e.g. {90}
  MatrixUnitDesc matrix_unit;
  std::vector<FlashTile> flash;     ///< sorted by head_dim_le ascending
  /// Optional (`wgmma_flash:`, sm_90 profiles only): tiles of the wgmma unit
  /// (sm_90a), used instead of `flash` and `matrix_unit` for head dims that are
  /// multiples of 16 up to the last row's bound; same fields, block_m = 16 * warps.
  std::vector<FlashTile> wgmma_flash;
  int64_t smem_per_block = 0;       ///< bytes of shared memory one block may opt into; in [1, 16 MiB], <= smem_per_sm
  int64_t smem_per_sm = 0;          ///< bytes of shared memory per SM; in [1, 16 MiB]
  int64_t registers_per_sm = 0;     ///< 32-bit registers per SM; in [16384, 2^20]
  int max_threads_per_sm = 0;       ///< a multiple of 32 in [128, 65536]
  int64_t mma_flop_per_clock_per_sm = 0;  ///< dense FLOP per clock per SM of matrix_unit (mma.sync), not of wgmma
  int64_t smem_bytes_per_clock_per_sm = 0;  ///< shared-memory bandwidth, bytes per SM clock per SM
  double dram_bytes_per_clock_per_sm = 0;   ///< device-memory bandwidth / (SMs x SM clock), bytes

  bool supports_dtype(DType d) const;
  /// The unit plan() picks for these head dims: wgmma when wgmma_flash is given,
  /// both are multiples of 16 and max(head_dim, head_dim_v) <= its last row's
  /// head_dim_le; else matrix_unit.shape.
  MatrixUnit unit_for(int head_dim, int head_dim_v) const;
  /// The tile of `unit`'s list (wgmma_flash for wgmma, else flash) for
  /// `head_dim` (for a problem, max(head_dim, head_dim_v)); throws Unsupported
  /// when no row covers it. Pass unit_for(head_dim, head_dim_v) to get the row
  /// plan() uses.
  const FlashTile& tile_for(int head_dim, MatrixUnit unit = MatrixUnit::m16n8k16) const;
};

/// Parse a profile from YAML text. Every field is validated; unknown keys and a
/// second YAML document (empty ones aside) are rejected. Throws InvalidArgument naming `origin` (file name), the key and the reason.
Profile parse_profile(const std::string& yaml_text, const std::string& origin);

/// Read and parse a profile file. Throws IoError if unreadable.
Profile load_profile_file(const std::string& path);

/// The profiles compiled into the library (profiles/*.yml at build time).
const std::vector<Profile>& builtin_profiles();

/// The profile for compute capability `arch` (10*major+minor).
/// If the environment variable FLASHGEN_PROFILE names a file, that profile is
/// used instead (it must list `arch`). Throws Unsupported naming the nearest
/// profiles when none matches.
const Profile& profile_for_arch(int arch);

}  // namespace flashgen
