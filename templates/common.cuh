// ---- libflashgen device helpers (templates/common.cuh) ----------------------
// Self-contained: no #include. Inline PTX follows the PTX ISA sections named
// beside each helper.

typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;

struct __align__(16) U4 { u32 x, y, z, w; };

#define FG_DEVICE __device__ __forceinline__

// A bool as a type, to pick a compile-time variant of a generic lambda.
template <bool B>
struct FgBool {
  static constexpr bool value = B;
};

FG_DEVICE float fg_neg_inf() { return __int_as_float(0xff800000u); }

// ---- merging attention states (docs/design.md, "Merging attention states") ----
// max that propagates NaN: once either operand is NaN, so is the result.
FG_DEVICE float fg_max_nan(float a, float b) { return (b > a || b != b) ? b : a; }
// Weight e^(lse - m) of a state with log-sum-exp `lse` against the states'
// NaN-propagating max m (finite or +inf); 0 for a state that saw no key (lse = -inf).
FG_DEVICE float fg_state_weight(float lse, float m) { return lse != fg_neg_inf() ? expf(lse - m) : 0.0f; }

// Generic -> shared state space address (PTX ISA: cvta).
FG_DEVICE u32 fg_smem_addr(const void* p) {
  u32 r;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// ---- dtype conversions (PTX ISA: cvt) ----
FG_DEVICE float fg_f16_to_f32(u16 h) {
  float f;
  asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}
FG_DEVICE float fg_bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }
FG_DEVICE u16 fg_f32_to_f16(float f) {
  u16 r;
  asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(r) : "f"(f));
  return r;
}
FG_DEVICE u16 fg_f32_to_bf16(float f) {
  u16 r;
  asm("{ .reg .b16 t; cvt.rn.bf16.f32 t, %1; mov.b16 %0, t; }" : "=h"(r) : "f"(f));
  return r;
}
// Two floats -> packed pair, `lo` in the low half (PTX ISA: cvt with .f16x2/.bf16x2, sm_80+).
FG_DEVICE u32 fg_pack_f16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
FG_DEVICE u32 fg_pack_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x, approximate, flush-to-zero (PTX ISA: ex2.approx.ftz.f32); ex2(-inf) = +0.
FG_DEVICE float fg_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// log2(x), approximate (PTX ISA: lg2.approx.ftz.f32; max relative error 2^-22).
FG_DEVICE float fg_log2(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// ---- asynchronous copies (PTX ISA: cp.async, sm_80+) ----
// Copies 16 bytes, or zero-fills the destination when src_bytes == 0.
FG_DEVICE void fg_cp_async16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Copies 16 bytes (no zero fill).
FG_DEVICE void fg_cp_async16_full(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
FG_DEVICE void fg_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
FG_DEVICE void fg_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- shared -> register matrix loads (PTX ISA: ldmatrix, sm_75+) ----
FG_DEVICE void fg_ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
FG_DEVICE void fg_ldsm_x2(u32 addr, u32& r0, u32& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
}
FG_DEVICE void fg_ldsm_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
FG_DEVICE void fg_ldsm_x2_trans(u32 addr, u32& r0, u32& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
}

// ---- swizzled shared-memory sub-tiles ----
// A sub-tile holds ROWS rows of W 16-bit elements (W a power of two >= 8),
// i.e. W/8 16-byte units per row. Unit u of row r is stored at unit
// u ^ x(r), where x(r) spreads the 8 rows read by one ldmatrix phase over
// all 8 16-byte bank groups of a 128-byte line:
//   W/8 >= 8: x = r & 7;  W/8 = 4: x = (r >> 1) & 3;  W/8 = 2: x = (r >> 2) & 1;  W/8 = 1: x = 0.
template <int W>
FG_DEVICE int fg_swz_pattern(int row) {
  constexpr int UPR = W / 8;
  constexpr int RPL = UPR >= 8 ? 1 : 8 / UPR;
  constexpr int XM = UPR >= 8 ? 7 : UPR - 1;
  return (row / RPL) & XM;
}
template <int W>
FG_DEVICE int fg_swz(int row, int unit) {
  return row * W + ((unit ^ fg_swz_pattern<W>(row)) << 3);
}

// ldmatrix addressing without per-load arithmetic. A warp reads 16-row blocks
// (rows r16 + lr, r16 % 16 == 0, so the swizzle pattern depends on lr only) at
// unit pairs 2*ks + c (c = 0/1 per lane). Since (2*ks) ^ u = ((2*ks) & ~7) +
// (((2*ks) & 7) ^ u) for u < 8, a lane needs at most four base offsets
// (ks % 4); every other load adds a compile-time constant.
template <int W>
struct FgLdsmOffsets {
  static constexpr int UPR = W / 8;
  static constexpr int NQ = UPR >= 8 ? 4 : (UPR >= 2 ? UPR / 2 : 1);
  int off[NQ];  // element offsets
  FG_DEVICE FgLdsmOffsets(int lr, int c) {
    const int uc = c ^ fg_swz_pattern<W>(lr);
#pragma unroll
    for (int q = 0; q < NQ; ++q) off[q] = lr * W + ((UPR >= 2 ? ((2 * q) ^ uc) : 0) << 3);
  }
  // Element offset of (row r16 + lr, unit pair ks) for compile-time r16 and ks.
  FG_DEVICE int at(int r16, int ks) const { return off[ks % NQ] + r16 * W + (((2 * ks) & ~7) << 3); }
};

// ---- helpers for targets below sm_80 (sm_70 and later) ----
// Two floats -> packed f16 pair, `lo` in the low half, each rounded to nearest
// even: the same bits as fg_pack_f16 (cvt.rn.f16x2.f32 needs sm_80), built from
// two cvt.rn.f16.f32 and one mov.b32 (PTX ISA: cvt, mov).
FG_DEVICE u32 fg_pack_f16_sm70(float lo, float hi) {
  u32 r;
  asm("{ .reg .f16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }"
      : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}
