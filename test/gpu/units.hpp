// GPU tier: the matrix units every case runs on. The device's own profile
// (e.g. hopper: wgmma, and m16n8k16 for head dims that are not multiples of
// 16) comes first; then each other builtin unit the device
// executes (sm_90 runs m8n8k4 and m16n8k8 correctly, slowly) through a profile
// file written here: the unit's builtin profile (volta, turing) with its tiles,
// listing the device's arch and its shared-memory limits. FLASHGEN_PROFILE
// selects that file while the unit's kernels are planned, compiled and
// launched, so the same public API (plan, compile, forward) runs them: the
// hardware choice stays data.
//
// FLASHGEN_TEST_UNITS=m16n8k16,m8n8k4 (comma-separated unit names) restricts
// the list; unset runs every unit.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"

namespace fgtest {

struct Unit {
  std::string name;                        ///< the matrix unit, e.g. "m8n8k4"
  std::string profile_name;                ///< e.g. "hopper", "volta-on-sm90"
  std::string profile_path;                ///< "" = the builtin profile of the device
  std::vector<flashgen::DType> dtypes;     ///< operand dtypes its profile lists
  bool takes(flashgen::DType d) const { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); }
};

/// Points FLASHGEN_PROFILE at a unit's profile for one scope (restores it after).
class UnitScope {
 public:
  explicit UnitScope(const Unit& u) {
    if (const char* old = std::getenv("FLASHGEN_PROFILE")) old_ = std::string(old);
    if (!u.profile_path.empty()) ::setenv("FLASHGEN_PROFILE", u.profile_path.c_str(), 1);
  }
  ~UnitScope() {
    if (old_) ::setenv("FLASHGEN_PROFILE", old_->c_str(), 1);
    else ::unsetenv("FLASHGEN_PROFILE");
  }
  UnitScope(const UnitScope&) = delete;
  UnitScope& operator=(const UnitScope&) = delete;

 private:
  std::optional<std::string> old_;
};

inline int unit_min_arch(flashgen::MatrixUnit u) {
  return u == flashgen::MatrixUnit::m8n8k4 ? 70 : u == flashgen::MatrixUnit::m16n8k8 ? 75 : 80;
}

/// The YAML of `tiles` (a builtin profile) moved to `arch` with `device`'s resources.
inline std::string unit_profile_yaml(const flashgen::Profile& tiles, const flashgen::Profile& device, int arch,
                                     const std::vector<flashgen::DType>& dtypes) {
  std::string dts;
  for (flashgen::DType d : dtypes) dts += fmt::format("{}{}", dts.empty() ? "" : ", ", d == flashgen::DType::bf16 ? "bfloat16" : "float16");
  std::string y = fmt::format("# written by the GPU tier (test/gpu/units.hpp)\nname: {}-on-sm{}\narchs: [{}]\n", tiles.name,
                              arch, arch);
  y += fmt::format("matrix_unit: {{shape: {}, operand_dtypes: [{}], accumulator_dtype: float32}}\nflash:\n",
                   flashgen::to_string(tiles.matrix_unit.shape), dts);
  for (const flashgen::FlashTile& t : tiles.flash)
    y += fmt::format("  - {{head_dim_le: {}, block_m: {}, block_n: {}, warps: {}, stages: {}}}\n", t.head_dim_le, t.tile.block_m,
                     t.tile.block_n, t.tile.warps, t.tile.stages);
  y += fmt::format("resources: {{smem_per_block: {}, smem_per_sm: {}, registers_per_sm: {}, max_threads_per_sm: {}}}\n",
                   device.smem_per_block, device.smem_per_sm, device.registers_per_sm, device.max_threads_per_sm);
  y += fmt::format("ceiling: {{mma_flop_per_clock_per_sm: {}, smem_bytes_per_clock_per_sm: {}, dram_bytes_per_clock_per_sm: {}}}\n",
                   tiles.mma_flop_per_clock_per_sm, tiles.smem_bytes_per_clock_per_sm, tiles.dram_bytes_per_clock_per_sm);
  return y;
}

/// The units of this device (decided once; needs a GPU).
inline const std::vector<Unit>& device_units() {
  static const std::vector<Unit> list = [] {
    std::vector<Unit> v;
    const int arch = flashgen::current_device().arch;
    const flashgen::Profile& device = flashgen::profile_for_arch(arch);
    // A profile with wgmma tiles runs as the "wgmma" unit; its m16n8k16 kernels
    // are then tested through a copy without them (written by the loop below).
    const flashgen::MatrixUnit own = device.wgmma_flash.empty() ? device.matrix_unit.shape : flashgen::MatrixUnit::wgmma;
    v.push_back({std::string(flashgen::to_string(own)), device.name, "", device.matrix_unit.operand_dtypes});
    char dir_template[] = "/tmp/flashgen-gpu-units-XXXXXX";
    const char* dir = ::mkdtemp(dir_template);
    for (const flashgen::Profile& p : flashgen::builtin_profiles()) {
      const flashgen::MatrixUnit u = p.matrix_unit.shape;
      const std::string name(flashgen::to_string(u));
      const bool have = std::any_of(v.begin(), v.end(), [&](const Unit& x) { return x.name == name; });
      if (have || arch < unit_min_arch(u) || dir == nullptr) continue;
      std::vector<flashgen::DType> dtypes = {flashgen::DType::f16};
      if (u == flashgen::MatrixUnit::m16n8k16) dtypes = p.matrix_unit.operand_dtypes;
      // m16n8k8 has a bf16 form from sm_80 on (the template supports it there).
      if (u == flashgen::MatrixUnit::m16n8k8 && arch >= 80) dtypes.push_back(flashgen::DType::bf16);
      const std::string path = fmt::format("{}/{}-on-sm{}.yml", dir, p.name, arch);
      std::ofstream(path) << unit_profile_yaml(p, device, arch, dtypes);
      v.push_back({name, fmt::format("{}-on-sm{}", p.name, arch), path, dtypes});
    }
    if (const char* only = std::getenv("FLASHGEN_TEST_UNITS"); only != nullptr && *only != '\0') {
      const std::string want = std::string(",") + only + ",";
      v.erase(std::remove_if(v.begin(), v.end(), [&](const Unit& x) { return want.find("," + x.name + ",") == std::string::npos; }),
              v.end());
    }
    std::string names;
    for (const Unit& x : v) names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", x.name, x.profile_name);
    std::printf("[flashgen gpu tier] sm_%d: every case runs on the matrix units %s\n", arch, names.c_str());
    std::fflush(stdout);
    return v;
  }();
  return list;
}

/// The list units() returns while a UnitsOverride is alive (else null).
inline const std::vector<Unit>*& units_override() {
  static const std::vector<Unit>* list = nullptr;
  return list;
}

/// The units every case runs on: the device's (device_units), or a
/// UnitsOverride's list for its scope.
inline const std::vector<Unit>& units() { return units_override() != nullptr ? *units_override() : device_units(); }

/// For one scope, every case runs on `list` instead of the device's units.
class UnitsOverride {
 public:
  explicit UnitsOverride(const std::vector<Unit>& list) : old_(units_override()) { units_override() = &list; }
  ~UnitsOverride() { units_override() = old_; }
  UnitsOverride(const UnitsOverride&) = delete;
  UnitsOverride& operator=(const UnitsOverride&) = delete;

 private:
  const std::vector<Unit>* old_;
};

/// The device's m16n8k16 and m16n8k8 units (of device_units(), so
/// FLASHGEN_TEST_UNITS applies) through profiles whose tiles have one K/V
/// pipeline stage (templates/fwd_m16n8.cu: K and V copied in turn, each while
/// the other is read): d <= 64 128x64x4x1, d <= 128 128x64x8x1 (Q.K^T one tile
/// ahead: QK_AHEAD), d <= 256 64x64x4x1 (96 KiB). Empty where the device's
/// shared memory per block holds less than those tiles need.
inline std::vector<Unit> one_stage_units() {
  std::vector<Unit> v;
  const int arch = flashgen::current_device().arch;
  const flashgen::Profile& device = flashgen::profile_for_arch(arch);
  if (device.smem_per_block < 2 * (64 * 256 + 64 * 512)) return v;
  char dir_template[] = "/tmp/flashgen-gpu-one-stage-XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (dir == nullptr) return v;
  for (const Unit& u : device_units()) {
    if (u.name != "m16n8k16" && u.name != "m16n8k8") continue;
    const auto& builtin = flashgen::builtin_profiles();
    const auto p = std::find_if(builtin.begin(), builtin.end(), [&](const flashgen::Profile& x) {
      return x.wgmma_flash.empty() && flashgen::to_string(x.matrix_unit.shape) == u.name;
    });
    if (p == builtin.end()) continue;
    flashgen::Profile tiles = *p;
    tiles.name += "-one-stage";
    tiles.flash = {{64, {128, 64, 4, 1}}, {128, {128, 64, 8, 1}}, {256, {64, 64, 4, 1}}};
    const std::string name = fmt::format("{}-on-sm{}", tiles.name, arch);
    const std::string path = fmt::format("{}/{}.yml", dir, name);
    std::ofstream(path) << unit_profile_yaml(tiles, device, arch, u.dtypes);
    v.push_back({u.name, name, path, u.dtypes});
  }
  return v;
}

}  // namespace fgtest
