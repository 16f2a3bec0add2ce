// ---- merge of attention states (templates/combine.cu) ------------------------
// S partial states (O_s, LSE_s) of the same query rows over disjoint key sets ->
//   LSE = m + log(sum_s exp(LSE_s - m)),  m = max_s LSE_s
//   O   = sum_s exp(LSE_s - m) O_s / sum_s exp(LSE_s - m)
// (docs/design.md, "Merging attention states"; the rule's pieces are in
// common.cuh, shared with the split kernel's merge of key warps). Memory-bound: each 16-byte
// piece of each partial O is loaded once (partials with LSE_s = -inf not at
// all), the arithmetic is float32.
//
// Work split: ROW_LANES lanes of a warp form a lane group; lane l holds the
// CHUNKS_PER_LANE 8-element chunks l, l + ROW_LANES, ... of head_dim_v.
// ROW_LANES is a power of two, so a group is an aligned part of the warp and
// its reductions are xor shuffles within the group. A row (b, i, h) is worked
// on by p.state_groups groups of one block (a power of two; the host gives
// rows few states many groups so that enough loads are in flight): each group
// takes every state_groups-th state, and the groups' sums meet in shared
// memory. A block owns ROWS_PER_BLOCK / state_groups consecutive rows per step
// and strides over the rows by the grid (any grid size covers every row).
//
// Exactness: a partial with LSE_s = -inf is not loaded (its O_s may hold
// anything) and adds 0; a row whose partials are all -inf
// gets O = 0 and LSE = -inf; the max is NaN-propagating, so a NaN LSE_s makes
// the row NaN (+inf makes it NaN through inf - inf), and a NaN in the O_s of a
// partial that counts reaches the elements it is added to. Nothing crosses
// rows.

@@CONSTANTS@@

constexpr int VEC = 8;                                        // elements per chunk (16 bytes of f16/bf16)
constexpr int CHUNKS = HEAD_DIM_V / VEC;
constexpr int PART_BYTES = PARTIAL_DTYPE == 0 ? 4 : 2;
constexpr int OUT_BYTES = OUT_DTYPE == 0 ? 4 : 2;
constexpr int PART_LOADS = VEC * PART_BYTES / 16;             // 16-byte loads per chunk of a partial
constexpr int OUT_STORES = VEC * OUT_BYTES / 16;              // 16-byte stores per chunk of O
constexpr int UNROLL = 4;                                     // partials whose loads are in flight together

static_assert(HEAD_DIM_V % VEC == 0, "head_dim_v is a multiple of 8");
static_assert(ROW_LANES >= 1 && ROW_LANES <= 32 && (ROW_LANES & (ROW_LANES - 1)) == 0,
              "a row's lanes are a power-of-two group of one warp");
static_assert(ROW_LANES * CHUNKS_PER_LANE >= CHUNKS && ROW_LANES * (CHUNKS_PER_LANE - 1) < CHUNKS,
              "CHUNKS_PER_LANE chunks per lane cover the row, none of them idle");
static_assert(ROWS_PER_BLOCK * ROW_LANES == THREADS && THREADS % 32 == 0, "whole lane groups per block, whole warps");
static_assert(PART_LOADS >= 1 && OUT_STORES >= 1, "chunks are whole 16-byte vectors");

// 16 bytes from global memory through the non-coherent path (PTX ISA:
// ld, .global.nc): the partials are only read while the kernel runs (the host
// checked that no output overlaps them).
FG_DEVICE U4 fg_ld_nc16(const void* p) {
  U4 r;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// 16 bytes to global memory (PTX ISA: st, .global).
FG_DEVICE void fg_st16(void* p, const U4& v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// float -> bfloat16, round to nearest even, NaN kept a (quiet) NaN: cvt.rn.bf16.f32
// on sm_80+ (PTX ISA: cvt), the same rounding in integer arithmetic below.
FG_DEVICE u16 fg_f32_to_bf16_any(float f) {
#if __CUDA_ARCH__ >= 800
  return fg_f32_to_bf16(f);
#else
  const u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
  return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

// The two 16-bit halves of w as floats (f16 or bf16 by PARTIAL_DTYPE).
FG_DEVICE void fg_unpack2(u32 w, float& lo, float& hi) {
  if (PARTIAL_DTYPE == 1) {
    lo = fg_f16_to_f32((u16)(w & 0xffffu));
    hi = fg_f16_to_f32((u16)(w >> 16));
  } else {
    lo = fg_bf16_to_f32((u16)(w & 0xffffu));
    hi = fg_bf16_to_f32((u16)(w >> 16));
  }
}

// The 8 floats of a chunk held in PART_LOADS 16-byte words.
FG_DEVICE void fg_chunk_floats(const U4 (&raw)[PART_LOADS], float (&x)[VEC]) {
  if (PARTIAL_DTYPE == 0) {
#pragma unroll
    for (int k = 0; k < PART_LOADS; ++k) {
      x[4 * k + 0] = __uint_as_float(raw[k].x);
      x[4 * k + 1] = __uint_as_float(raw[k].y);
      x[4 * k + 2] = __uint_as_float(raw[k].z);
      x[4 * k + 3] = __uint_as_float(raw[k].w);
    }
  } else {
    fg_unpack2(raw[0].x, x[0], x[1]);
    fg_unpack2(raw[0].y, x[2], x[3]);
    fg_unpack2(raw[0].z, x[4], x[5]);
    fg_unpack2(raw[0].w, x[6], x[7]);
  }
}

// Two floats -> one 32-bit word of OUT_DTYPE (f16 or bf16), `lo` in the low half.
FG_DEVICE u32 fg_pack_out(float lo, float hi) {
  if (OUT_DTYPE == 1) return (u32)fg_f32_to_f16(lo) | ((u32)fg_f32_to_f16(hi) << 16);
  return (u32)fg_f32_to_bf16_any(lo) | ((u32)fg_f32_to_bf16_any(hi) << 16);
}

// Store a chunk of 8 floats as OUT_DTYPE at p (16-byte aligned).
FG_DEVICE void fg_store_chunk(char* p, const float (&y)[VEC]) {
  if (OUT_DTYPE == 0) {
#pragma unroll
    for (int k = 0; k < OUT_STORES; ++k) {
      U4 v;
      v.x = __float_as_uint(y[4 * k + 0]);
      v.y = __float_as_uint(y[4 * k + 1]);
      v.z = __float_as_uint(y[4 * k + 2]);
      v.w = __float_as_uint(y[4 * k + 3]);
      fg_st16(p + 16 * k, v);
    }
  } else {
    U4 v;
    v.x = fg_pack_out(y[0], y[1]);
    v.y = fg_pack_out(y[2], y[3]);
    v.z = fg_pack_out(y[4], y[5]);
    v.w = fg_pack_out(y[6], y[7]);
    fg_st16(p, v);
  }
}

// q = n / d, rem = n % d for n >= 0, d >= 1: in 32 bits when both fit (the
// usual case; a 64-bit division is a call, whose saved registers spilled).
FG_DEVICE void fg_divmod(i64 n, i64 d, i64& q, i64& rem) {
  if (((n | d) >> 31) == 0) {
    const unsigned q32 = (unsigned)n / (unsigned)d;
    q = q32;
    rem = (i64)((unsigned)n - q32 * (unsigned)d);
  } else {
    q = n / d;
    rem = n - q * d;
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) @@KERNEL_NAME@@(const CombineParams p) {
  // The groups' sums for the cross-group step, element-major (a warp's lanes
  // touch consecutive words).
  __shared__ float s_acc[CHUNKS_PER_LANE * VEC][THREADS];
  const int groups = (int)p.state_groups;               // lane groups per row
  const int gi = (int)(threadIdx.x / ROW_LANES);        // the block's lane group
  const int lane = (int)(threadIdx.x % ROW_LANES);      // lane within the group
  const int sg = gi % groups;                           // this group's states: sg, sg + groups, ...
  const int rows_per_step = ROWS_PER_BLOCK / groups;
  const unsigned full = 0xffffffffu;
  for (i64 row0 = (i64)blockIdx.x * rows_per_step; row0 < p.rows; row0 += (i64)gridDim.x * rows_per_step) {
    // Every lane runs every step (the shuffles and barriers below need them);
    // lanes of a row past the end read nothing and write nothing.
    const i64 row = row0 + gi / groups;
    const bool row_ok = row < p.rows;
    const i64 r = row_ok ? row : 0;
    i64 bi, h, b, i;
    fg_divmod(r, p.heads, bi, h);
    fg_divmod(bi, p.seqlen_q, b, i);
    const float* lse_row = p.lse_partial + b * p.lp_stride_batch + h * p.lp_stride_head + i * p.lp_stride_seq;
    const char* op_row = static_cast<const char*>(p.o_partial) +
                         (b * p.op_stride_batch + i * p.op_stride_seq + h * p.op_stride_head) * PART_BYTES;

    // m = max_s LSE_s (NaN-propagating), then sum = sum_s exp(LSE_s - m) over
    // the partials that count; every group of the row reduces all states.
    float m = fg_neg_inf();
    for (i64 s = lane; s < p.num_states; s += ROW_LANES)
      if (row_ok) m = fg_max_nan(m, lse_row[s * p.lp_stride_state]);
#pragma unroll
    for (int off = ROW_LANES / 2; off >= 1; off /= 2) m = fg_max_nan(m, __shfl_xor_sync(full, m, off));
    const bool empty = m == fg_neg_inf();  // every partial -inf (or no row)
    float sum = 0.0f;
    if (!empty) {
      for (i64 s = lane; s < p.num_states; s += ROW_LANES)
        sum += fg_state_weight(lse_row[s * p.lp_stride_state], m);
    }
#pragma unroll
    for (int off = ROW_LANES / 2; off >= 1; off /= 2) sum += __shfl_xor_sync(full, sum, off);
    // All -inf: O = 0 (every weight below is 0) and LSE = -inf.
    const float inv_sum = empty ? 0.0f : 1.0f / sum;
    const float lse_out = empty ? fg_neg_inf() : m + logf(sum);

    // O: each partial that counts is loaded once, weighted by exp(LSE_s - m);
    // UNROLL states' loads in flight.
    float acc[CHUNKS_PER_LANE][VEC];
#pragma unroll
    for (int c = 0; c < CHUNKS_PER_LANE; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[c][e] = 0.0f;
    for (i64 s0 = sg; s0 < p.num_states; s0 += (i64)groups * UNROLL) {
      U4 raw[UNROLL][CHUNKS_PER_LANE][PART_LOADS];
      float w[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const i64 s = s0 + groups * u;
        const float l = row_ok && !empty && s < p.num_states ? lse_row[s * p.lp_stride_state] : fg_neg_inf();
        const bool take = l != fg_neg_inf();  // NaN counts (and propagates)
        w[u] = fg_state_weight(l, m);
        const char* src = op_row + s * p.op_stride_state * PART_BYTES;
#pragma unroll
        for (int c = 0; c < CHUNKS_PER_LANE; ++c) {
          const int chunk = lane + c * ROW_LANES;
#pragma unroll
          for (int k = 0; k < PART_LOADS; ++k) {
            if (take && chunk < CHUNKS) {
              raw[u][c][k] = fg_ld_nc16(src + chunk * (VEC * PART_BYTES) + 16 * k);
            } else {
              raw[u][c][k].x = raw[u][c][k].y = raw[u][c][k].z = raw[u][c][k].w = 0u;
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int c = 0; c < CHUNKS_PER_LANE; ++c) {
          float x[VEC];
          fg_chunk_floats(raw[u][c], x);
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[c][e] = fmaf(w[u], x[e], acc[c][e]);
        }
      }
    }

    if (groups > 1) {  // block-uniform: the row's groups add their sums in shared memory
#pragma unroll
      for (int c = 0; c < CHUNKS_PER_LANE; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) s_acc[c * VEC + e][threadIdx.x] = acc[c][e];
      __syncthreads();
      if (sg == 0) {
        for (int g = 1; g < groups; ++g)
#pragma unroll
          for (int c = 0; c < CHUNKS_PER_LANE; ++c)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[c][e] += s_acc[c * VEC + e][threadIdx.x + g * ROW_LANES];
      }
      __syncthreads();  // (the next step writes s_acc again)
    }

    // (VARLEN: a packed batch's rows outside its sequences are merged but not written)
    if (row_ok && sg == 0 && (!VARLEN || (i >= *p.seq_from && i < *p.seq_to))) {
      char* o_row = static_cast<char*>(p.o) + (b * p.o_stride_batch + i * p.o_stride_seq + h * p.o_stride_head) * OUT_BYTES;
#pragma unroll
      for (int c = 0; c < CHUNKS_PER_LANE; ++c) {
        const int chunk = lane + c * ROW_LANES;
        if (chunk < CHUNKS) {
          float y[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) y[e] = acc[c][e] * inv_sum;
          fg_store_chunk(o_row + chunk * (VEC * OUT_BYTES), y);
        }
      }
      if (HAS_LSE && lane == 0) p.lse[b * p.lse_stride_batch + h * p.lse_stride_head + i] = lse_out;
    }
  }
}
