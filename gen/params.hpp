// The forward kernel's single by-value argument. One field list serves both
// the host struct (runtime/ fills it) and the struct text the emitters write
// into the generated source, so their layouts cannot drift apart.
// Every field is 8 bytes wide, so both sides lay it out identically.
// lpt_groups: the number of groups of (batch, head group) pairs of the longest-first
// block order of a masked, non-persistent forward grid (fg_lpt_order in
// templates/fwd_block.cuh; rt::lpt_groups computes it); 0: fg_block's own order.
// lpt_big ... lpt_div_pairs0: that order's group shape (rt::lpt_params; unused
// when lpt_groups is 0).
#pragma once

#include <cstdint>
#include <string>

// X(type_host, type_device, name)
#define FLASHGEN_FWD_PARAMS(X)                                  \
  X(const void*, const void*, q)                                \
  X(const void*, const void*, k)                                \
  X(const void*, const void*, v)                                \
  X(void*, void*, o)                                            \
  X(const void*, const void*, bias)                             \
  X(float*, float*, lse)                                        \
  X(int64_t, long long, q_stride_batch)                         \
  X(int64_t, long long, q_stride_seq)                           \
  X(int64_t, long long, q_stride_head)                          \
  X(int64_t, long long, k_stride_batch)                         \
  X(int64_t, long long, k_stride_seq)                           \
  X(int64_t, long long, k_stride_head)                          \
  X(int64_t, long long, v_stride_batch)                         \
  X(int64_t, long long, v_stride_seq)                           \
  X(int64_t, long long, v_stride_head)                          \
  X(int64_t, long long, o_stride_batch)                         \
  X(int64_t, long long, o_stride_seq)                           \
  X(int64_t, long long, o_stride_head)                          \
  X(int64_t, long long, bias_stride_batch)                      \
  X(int64_t, long long, bias_stride_head)                       \
  X(int64_t, long long, bias_stride_q)                          \
  X(int64_t, long long, bias_stride_k)                          \
  X(int64_t, long long, lse_stride_batch)                       \
  X(int64_t, long long, lse_stride_head)                        \
  X(int64_t, long long, batch)                                  \
  X(int64_t, long long, heads_q)                                \
  X(int64_t, long long, heads_kv)                               \
  X(int64_t, long long, seqlen_q)                               \
  X(int64_t, long long, seqlen_k)                               \
  X(int64_t, long long, num_m_blocks)                           \
  X(double, double, softmax_scale)                              \
  X(float*, float*, o_partial)                                  \
  X(float*, float*, lse_partial)                                \
  X(int64_t, long long, num_splits)                             \
  X(int64_t, long long, tiles_per_split)                        \
  X(double, double, softcap)                                    \
  X(const float*, const float*, sinks)                          \
  X(const float*, const float*, alibi_slopes)                   \
  X(int64_t, long long, alibi_stride_batch)                     \
  X(int64_t, long long, window_left)                            \
  X(int64_t, long long, window_right)                           \
  X(const int32_t*, const int*, cu_seqlens_q)                   \
  X(const int32_t*, const int*, cu_seqlens_k)                   \
  X(const int32_t*, const int*, seqused_k)                      \
  X(int64_t, long long, total_q)                                \
  X(const int32_t*, const int*, page_table)                     \
  X(int64_t, long long, page_table_stride)                      \
  X(int64_t, long long, page_shift)                             \
  X(int64_t, long long, lpt_groups)                             \
  X(int64_t, long long, lpt_big)                                \
  X(int64_t, long long, lpt_pairs)                              \
  X(int64_t, long long, lpt_first0)                             \
  X(int64_t, long long, lpt_div_group1)                         \
  X(int64_t, long long, lpt_div_group0)                         \
  X(int64_t, long long, lpt_div_pairs1)                         \
  X(int64_t, long long, lpt_div_pairs0)

// The combine kernel's single by-value argument (templates/combine.cu): a
// merge of attention states (MergeProblem, merge.hpp). rows = batch *
// seqlen_q * heads; row r is (b, i, h) with r = (b * seqlen_q + i) * heads + h;
// state_groups: lane groups per row (gen::combine_state_groups); seq_from /
// seq_to: null, or device int32s bounding the rows' i (a packed batch's decode:
// &cu_seqlens_q[0] and &cu_seqlens_q[batch]; rows outside are not written).
// X(type_host, type_device, name)
#define FLASHGEN_COMBINE_PARAMS(X)                              \
  X(const void*, const void*, o_partial)                        \
  X(const float*, const float*, lse_partial)                    \
  X(void*, void*, o)                                            \
  X(float*, float*, lse)                                        \
  X(int64_t, long long, op_stride_state)                        \
  X(int64_t, long long, op_stride_batch)                        \
  X(int64_t, long long, op_stride_seq)                          \
  X(int64_t, long long, op_stride_head)                         \
  X(int64_t, long long, lp_stride_state)                        \
  X(int64_t, long long, lp_stride_batch)                        \
  X(int64_t, long long, lp_stride_head)                         \
  X(int64_t, long long, lp_stride_seq)                          \
  X(int64_t, long long, o_stride_batch)                         \
  X(int64_t, long long, o_stride_seq)                           \
  X(int64_t, long long, o_stride_head)                          \
  X(int64_t, long long, lse_stride_batch)                       \
  X(int64_t, long long, lse_stride_head)                        \
  X(int64_t, long long, num_states)                             \
  X(int64_t, long long, seqlen_q)                               \
  X(int64_t, long long, heads)                                  \
  X(int64_t, long long, rows)                                   \
  X(int64_t, long long, state_groups)                           \
  X(const int32_t*, const int*, seq_from)                       \
  X(const int32_t*, const int*, seq_to)

namespace flashgen::detail {

struct CombineParams {
#define FLASHGEN_X(th, td, name) th name;
  FLASHGEN_COMBINE_PARAMS(FLASHGEN_X)
#undef FLASHGEN_X
};

/// The same struct as CUDA source text ("struct CombineParams { ... };").
inline std::string combine_params_source() {
  std::string s = "struct CombineParams {\n";
#define FLASHGEN_X(th, td, name) s += "  " #td " " #name ";\n";
  FLASHGEN_COMBINE_PARAMS(FLASHGEN_X)
#undef FLASHGEN_X
  s += "};\n";
  return s;
}

struct FwdParams {
#define FLASHGEN_X(th, td, name) th name;
  FLASHGEN_FWD_PARAMS(FLASHGEN_X)
#undef FLASHGEN_X
};

/// The same struct as CUDA source text ("struct FwdParams { ... };").
inline std::string fwd_params_source() {
  std::string s = "struct FwdParams {\n";
#define FLASHGEN_X(th, td, name) s += "  " #td " " #name ";\n";
  FLASHGEN_FWD_PARAMS(FLASHGEN_X)
#undef FLASHGEN_X
  s += "};\n";
  return s;
}

/// One CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), as
/// cuTensorMapEncodeTiled writes it.
struct alignas(64) TmaMap {
  uint64_t opaque[16];
};

/// The wgmma kernel's second by-value argument (a __grid_constant__ parameter,
/// so the TMA unit reads the maps in place). K and V each have one 4-D map
/// (head-dim column, seq row, head, batch) per chunk width, indexed by
/// tma_map_index (64 -> 0, 32 -> 1, 16 -> 2; maps of widths the kernel does
/// not use are left zero). kv_coords: bit 0/1 = the K head/batch coordinate is
/// used, bit 2/3 = the V head/batch coordinate is used; a clear bit is a
/// broadcast (stride 0) dimension, mapped with extent 1 and read at 0.
struct FwdTmaMaps {
  TmaMap k[3];
  TmaMap v[3];
  int64_t kv_coords;
};

/// The same struct as CUDA source text (FgTmaMap, FgTmaMaps).
inline std::string fwd_tma_maps_source() {
  return "struct __align__(64) FgTmaMap {\n  unsigned long long opaque[16];\n};\n"
         "struct FgTmaMaps {\n  FgTmaMap k[3];\n  FgTmaMap v[3];\n  long long kv_coords;\n};";
}

}  // namespace flashgen::detail
