// libflashgen — KernelSpec: everything that changes the generated code.
//
// Batch, seqlens, heads, strides, pointers and softmax_scale are kernel
// arguments, not specialization; they live in AttentionProblem (problem.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashgen/profile.hpp"
#include "flashgen/types.hpp"

namespace flashgen {

/// A head dimension written as a sum of powers of two, largest first, each at
/// least `min_chunk` (96 -> {64, 32}, 72 -> {64, 8}); never padded.
std::vector<int> split_head_dim(int head_dim, int min_chunk = 8);

/// The head-dim chunks of a kernel's shared-memory sub-tiles for a matrix unit:
/// split_head_dim(head_dim) for the mma.sync units; for wgmma
/// split_head_dim(head_dim, 16) with every part cut into 64-column pieces (one
/// 128-byte swizzle row each: 128 = 64 + 64, 96 = 64 + 32, 80 = 64 + 16).
/// Throws InvalidArgument for a head dim the unit cannot split.
std::vector<int> head_dim_chunks(int head_dim, MatrixUnit unit);

/// The specialization of one generated kernel (a plain value type).
///
/// A family uses some of the fields (gen/spec_fields.hpp lists which):
///  - fwd: arch, unit, dtype, head_dim, head_dim_v, tile, mask, bias, has_lse, softcap, sinks, alibi, varlen, paged;
///  - fwd_split: those and pack;
///  - combine: arch, partial_dtype, out_dtype, head_dim_v, has_lse.
/// The others are ignored: canonical(), kernel_name() and operator== leave
/// them out, and parse() leaves them at their defaults.
struct KernelSpec {
  KernelFamily family = KernelFamily::fwd;  ///< which kernel (types.hpp); fwd and combine are generated
  int arch = 80;                          ///< target compute capability, 10*major+minor
  MatrixUnit unit = MatrixUnit::m16n8k16;
  DType dtype = DType::f16;               ///< Q, K, V, O element type
  int head_dim = 64;                      ///< Q/K head dim, multiple of 8 in [16, 256] (wgmma: of 16)
  int head_dim_v = 64;                    ///< V/O head dim, multiple of 8 in [16, 256] (wgmma: of 16)
  Tile tile{64, 64, 4, 2};                ///< block_m, block_n, warps, stages (types.hpp; the rules: validate())
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool has_lse = false;                   ///< write LSE [batch, heads_q, seqlen_q] fp32
  /// Logit softcapping, S = cap * tanh(S / cap) before bias and mask (the cap
  /// is a launch argument, AttentionProblem::softcap); canonical() writes the
  /// field only when set ("softcap=1"), so specs without it keep their strings.
  bool softcap = false;
  /// Learnable attention sinks: one fp32 logit per query head joins each row's
  /// softmax denominator (the logits are a launch argument, AttentionProblem::sinks);
  /// written only when set ("sinks=1"), like softcap.
  bool sinks = false;
  /// ALiBi: S -= slope * |i + off - j| after the softcap and the bias (the slopes
  /// are a launch argument, AttentionProblem::alibi_slopes); written only when set
  /// ("alibi=1"), like softcap.
  bool alibi = false;
  /// Packed (variable-length) batch: sequence b owns query rows cu_seqlens_q[b] ..
  /// cu_seqlens_q[b + 1] - 1 of Q/O and keys cu_seqlens_k[b] .. of K/V (the offsets are
  /// launch arguments, AttentionProblem::cu_seqlens_q / cu_seqlens_k / seqused_k);
  /// written only when set ("varlen=1"), like softcap.
  bool varlen = false;
  /// Paged KV cache: key j of sequence b is slot j % page_size of page
  /// page_table[b][j / page_size] (the table and page size are launch arguments,
  /// AttentionProblem::page_table / page_size); written only when set ("paged=1").
  bool paged = false;
  /// fwd_split: query heads of one GQA group packed as rows of one tile (GQA
  /// packing: row r of the packed problem is query position r / pack of head
  /// r % pack of the group, so the group's K/V are read once); 1, 2, 4, 8 or
  /// 16, dividing block_m and heads_q / heads_kv.
  int pack = 1;
  StateDType partial_dtype = StateDType::f32;  ///< combine: element type of the partial O_s
  StateDType out_dtype = StateDType::f16;      ///< combine: element type of the merged O

  /// Head-dim chunks of the generated sub-tiles (derived, never stored): head_dim_chunks(head_dim, unit).
  std::vector<int> qk_chunks() const { return head_dim_chunks(head_dim, unit); }
  std::vector<int> v_chunks() const { return head_dim_chunks(head_dim_v, unit); }
  /// Threads per block: 32 * warps, + 128 for the wgmma unit (its producer
  /// warpgroup, which issues the TMA copies); combine: kCombineThreads (128);
  /// saturated to the int range:
  /// defined for every parsed spec (KernelSpec::parse accepts any int;
  /// validate() says which are allowed). Throws Error(internal) for a unit
  /// outside the MatrixUnit enumerators.
  int threads() const;
  /// Warps that hold the same query rows and split each key tile between
  /// them: 16 * warps / block_m for a fwd_split kernel with block_m < 16 *
  /// warps (decode with few packed rows: each warp takes block_n / key_warps
  /// keys of a tile, and the block merges the warps' states before writing
  /// its split's partial O and LSE); 1 otherwise (each warp owns block_m /
  /// warps rows of the whole tile), also for the units without key-split
  /// warps (m8n8k4, wgmma). 0 where warps or block_m is not positive. Defined
  /// by the formula for any tile; meaningful for tiles validate() accepts
  /// (a power of two dividing warps). Throws Error(internal) for a unit
  /// outside the MatrixUnit enumerators, as threads() does.
  int key_warps() const;
  /// Dynamic shared memory bytes: Q tile + stages * (K tile + V tile), + 1024
  /// for the wgmma unit (its tiles are aligned to 1024 bytes); with
  /// key_warps() > 1 at least the merge's 4 * key_warps * block_m *
  /// (head_dim_v + 9) bytes (it reuses the tiles' memory); combine: 0.
  int64_t smem_bytes() const;

  /// Canonical string: the family's versioned tag, then every field in fixed
  /// order, e.g.
  /// "flashgen.fwd.v1:sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=1"
  /// (tags: "flashgen.fwd.v1:", "flashgen.fwd_split.v1:", "flashgen.combine.v1:"); the
  /// flags added later (softcap, sinks, alibi, varlen, paged) follow, in that order, only when set
  /// (",softcap=1,sinks=1,alibi=1,varlen=1,paged=1").
  std::string canonical() const;
  /// Parse a canonical string of any family; throws InvalidArgument naming the
  /// bad tag or field.
  static KernelSpec parse(const std::string& text);
  /// Readable name, the extern "C" symbol, NVRTC program name and cache stem, e.g.
  /// "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_causalbr" (+ "_bias16" for an
  /// input-dtype bias or "_bias32" for a float32 bias, then "_lse" when has_lse, then
  /// "_softcap" when softcap, "_sinks" when sinks, "_alibi" when alibi, "_varlen" when varlen, "_paged" when paged); the
  /// prefix is "flashgen_<family>" ("flashgen_fwd_split_...", "flashgen_combine_...").
  /// combine: "flashgen_combine_sm90_pf32_of16_dv128" (+ "_lse").
  std::string kernel_name() const;

  /// Same family and equal values of every field the family uses (the
  /// canonical strings are equal).
  bool operator==(const KernelSpec&) const;
};

/// Threads per block of a combine kernel.
inline constexpr int kCombineThreads = 128;

/// Every rule `spec` breaks for `profile`, one sentence each (empty = valid).
/// A combine spec needs an arch of the profile, a partial_dtype and out_dtype
/// of f32, f16 or bf16 and a head_dim_v that is a multiple of 8 in [8, 512]; it runs
/// on every arch (no matrix unit).
std::vector<std::string> validate(const KernelSpec& spec, const Profile& profile);
/// Throws Unsupported (listing every broken rule) if validate() is non-empty.
void require_valid(const KernelSpec& spec, const Profile& profile);

}  // namespace flashgen
