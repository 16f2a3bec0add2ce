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
/// Same register budget, P.V: with head_dim_v 256 (four 64-wide chunks) P.V is
/// one m64n256k16 whose accumulator alone is 128 registers a thread, and ptxas
/// refuses it (C7602, "insufficient registers (128)"); head_dim_v 240 (chunks
/// 64+64+64+32+16, one wgmma each) compiles without spills.
constexpr int kWgmmaMaxHeadDimVOneGroup = 240;
/// Three consumer warpgroups: 160 registers a consumer after setmaxnreg; O
/// alone takes head_dim_v / 2 of them, and above 128 ptxas spills hundreds of
/// bytes or refuses.
constexpr int kWgmmaMaxHeadDimThreeGroups = 128;
/// The paged wgmma kernel reads pages of fewer keys than this (a power of two)
/// with the producer warpgroup's cp.async, a row per key through the page
/// table, and larger pages as TMA boxes (a box holds at least one 8-row swizzle
/// atom, so pages of 1-4 keys can only be gathered). The crossover of the two
/// measured on an H100, bf16 D128 chunked prefill (bench/NOTES.md session 28):
/// at page 8 the gather takes 0.65x the boxes' time, at 16 0.97x, at 32 1.10x.
constexpr int kWgmmaGatherPageBelow = 32;

}  // namespace flashgen::gen
