// Bounds of the kernel spec that the spec validator (gen/spec.cpp) and the
// profile loader (gen/profile.cpp) both enforce. Internal to gen/.
#pragma once

namespace flashgen::gen {

/// Compute capabilities (10 * major + minor) that profile_for_arch() and the
/// profile loader accept.
constexpr int kMinArch = 10;
constexpr int kMaxArch = 999;
constexpr int kMinHeadDim = 16;
constexpr int kMaxHeadDim = 256;
constexpr int kHeadDimMultiple = 8;
constexpr int kMaxWarps = 16;
constexpr int kMaxBlock = 256;
constexpr int kMaxStages = 4;
constexpr int kMaxPack = 16;  // fwd_split: query heads packed per tile row group (KernelSpec::pack)
constexpr int kMaxThreads = 1024;
/// The wgmma kernel with one consumer warpgroup runs two blocks per SM, so a
/// thread starts with 65536 / (2 * 256) = 128 registers; ptxas cannot fit a
/// wgmma m64nNk16 accumulator of N > 192 (and its operands) in that.
constexpr int kWgmmaMaxBlockNOneGroup = 192;

}  // namespace flashgen::gen
