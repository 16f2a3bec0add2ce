// ---- forward attention, mma.sync m16n8k16 / m16n8k8 (templates/fwd_m16n8.cu) ----
// One block computes BLOCK_M query rows of one (batch, head); each warp owns
// M_SLICES whole 16-row slices, so row statistics never leave the warp.
// K/V tiles of BLOCK_N keys stream through a STAGES-deep pipeline: cp.async
// where the target has it (ASYNC_COPY, sm_80+), else 16-byte loads and shared
// stores (sm_75), published by the same barriers.
// Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16" and
// "... mma.m16n8k8" (A row-major, B column-major, f32 accumulators). With
// UNIT_K == 8 (the m16n8k8 unit, Turing) each k16 step is issued as two k8
// instructions: the k16 fragments {a0,a1,a2,a3}, {b0,b1} are the k8 halves
// {a0,a1},{b0} and {a2,a3},{b1}.

@@CONSTANTS@@

constexpr int THREADS = WARPS * 32;
constexpr int M_SLICES = BLOCK_M / (16 * WARPS);
constexpr int NT = BLOCK_N / 8;          // n8 tiles of S per slice
constexpr int KS16 = HEAD_DIM / 16;      // k16 steps of Q.K^T (the 8-wide tail chunk, if any, uses k8)
constexpr int OT = HEAD_DIM_V / 8;       // n8 tiles of O per slice
// Q fragments stay in registers while they cost at most 32 registers per thread
// (HEAD_DIM / 4 per slice); otherwise they are re-read from shared memory each
// k step, which keeps the O accumulators (HEAD_DIM_V / 2 per slice) from spilling.
constexpr bool Q_IN_REGS = HEAD_DIM * M_SLICES <= 128;
constexpr int QF_STEPS = Q_IN_REGS && KS16 > 0 ? KS16 : 1;
constexpr int Q_REGION = BLOCK_M * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

FG_DEVICE float fg_in_to_f32(u16 h) { return IS_BF16 ? fg_bf16_to_f32(h) : fg_f16_to_f32(h); }
FG_DEVICE u16 fg_f32_to_in(float f) { return IS_BF16 ? fg_f32_to_bf16(f) : fg_f32_to_f16(f); }
FG_DEVICE u32 fg_pack_in(float lo, float hi) {
  if constexpr (IS_BF16) return fg_pack_bf16(lo, hi);
  else if constexpr (ASYNC_COPY) return fg_pack_f16(lo, hi);  // cvt.rn.f16x2.f32 is sm_80+, like cp.async
  else return fg_pack_f16_sm70(lo, hi);
}

// D = A.B + D, m16n8k8 (used for an 8-wide head-dim chunk).
FG_DEVICE void fg_mma1688(float* d, const u32* a, u32 b0) {
  if constexpr (IS_BF16) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
  } else {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
  }
}

// D = A.B + D, m16n8k16 shape, f32 accumulate (PTX ISA: mma.sync.aligned.m16n8k16;
// with UNIT_K == 8 two mma.sync.aligned.m16n8k8).
FG_DEVICE void fg_mma16816(float* d, const u32* a, u32 b0, u32 b1) {
  if constexpr (UNIT_K == 8) {
    fg_mma1688(d, a, b0);
    fg_mma1688(d, a + 2, b1);
  } else if constexpr (IS_BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Copy ROWS rows x W elements (columns [OFF, OFF+W) of the head dim) from
// global `src` (row stride `stride` elements) into the swizzled sub-tile
// `dst`; rows >= `valid_rows` are zero-filled. ASYNC_COPY: cp.async, 16 bytes
// each (src-size 0 zero-fills; the address given is then the tile's first
// row, which is valid); published by fg_copy_wait + a barrier. Otherwise
// 16-byte loads (up to four in flight per thread) then shared stores,
// published by the next barrier.
template <int W, int OFF, int ROWS>
FG_DEVICE void fg_copy_tile_async(u16* dst, const u16* src, i64 stride, int valid_rows, int tid) {
  constexpr int UPR = W / 8;
  constexpr int UNITS = ROWS * UPR;
  constexpr int RSTEP = THREADS / UPR;  // rows advanced per pass (UPR <= 32 divides THREADS)
  constexpr int PASSES = (UNITS + THREADS - 1) / THREADS;
  const int row0 = tid / UPR, unit = tid % UPR;
  const u16* g0 = src + (i64)row0 * stride + OFF + unit * 8;
  const i64 gstep = (i64)RSTEP * stride;
  const u32 s0 = fg_smem_addr(dst) + 2 * fg_swz<W>(row0, unit);
  // A step of a multiple of 8 rows keeps the swizzle pattern: a constant offset.
  auto smem_at = [&](int it, int row) {
    return RSTEP % 8 == 0 ? s0 + 2 * it * RSTEP * W : fg_smem_addr(dst) + 2 * fg_swz<W>(row, unit);
  };
  if constexpr (ASYNC_COPY) {
#pragma unroll
    for (int it = 0; it < PASSES; ++it) {
      const int row = row0 + it * RSTEP;
      if (UNITS % THREADS == 0 || row < ROWS) {
        const bool ok = row < valid_rows;
        fg_cp_async16(smem_at(it, row), ok ? g0 + it * gstep : src + OFF, ok ? 16 : 0);
      }
    }
  } else {
    constexpr int G = PASSES < 4 ? PASSES : 4;
#pragma unroll
    for (int first = 0; first < PASSES; first += G) {
      U4 v[G];
#pragma unroll
      for (int k = 0; k < G; ++k) {  // a group's loads first, then its stores
        const int it = first + k, row = row0 + it * RSTEP;
        v[k] = U4{0u, 0u, 0u, 0u};
        if (it < PASSES && (UNITS % THREADS == 0 || row < ROWS) && row < valid_rows)
          v[k] = *reinterpret_cast<const U4*>(g0 + it * gstep);
      }
#pragma unroll
      for (int k = 0; k < G; ++k) {
        const int it = first + k, row = row0 + it * RSTEP;
        if (it < PASSES && (UNITS % THREADS == 0 || row < ROWS))
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(smem_at(it, row)), "r"(v[k].x), "r"(v[k].y),
                       "r"(v[k].z), "r"(v[k].w) : "memory");
      }
    }
  }
}
FG_DEVICE void fg_copy_commit() {
  if constexpr (ASYNC_COPY) fg_cp_async_commit();
}
template <int N>
FG_DEVICE void fg_copy_wait() {
  if constexpr (ASYNC_COPY) fg_cp_async_wait<N>();
}

// Load Q rows [0, valid_rows) of this block, multiply by softmax_scale in f32,
// round to the input dtype (DESIGN.md: Qs = round(Q * scale)), store swizzled.
template <int W, int OFF>
FG_DEVICE void fg_load_q(u16* dst, const u16* src, i64 stride, int valid_rows, float scale, int tid) {
  constexpr int UPR = W / 8;
  constexpr int UNITS = BLOCK_M * UPR;
#pragma unroll
  for (int it = 0; it < (UNITS + THREADS - 1) / THREADS; ++it) {
    const int u = it * THREADS + tid;
    if (UNITS % THREADS == 0 || u < UNITS) {
      const int row = u / UPR, unit = u % UPR;
      U4 v = {0u, 0u, 0u, 0u};
      if (row < valid_rows) {
        v = *reinterpret_cast<const U4*>(src + (i64)row * stride + OFF + unit * 8);
        u32* w = &v.x;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float lo = fg_in_to_f32((u16)(w[e] & 0xffffu)) * scale;
          const float hi = fg_in_to_f32((u16)(w[e] >> 16)) * scale;
          w[e] = (u32)fg_f32_to_in(lo) | ((u32)fg_f32_to_in(hi) << 16);
        }
      }
      *reinterpret_cast<U4*>(dst + fg_swz<W>(row, unit)) = v;
    }
  }
}

// Q fragments of this warp's slices for head-dim columns [OFF, OFF+W).
template <int W, int OFF>
FG_DEVICE void fg_ldsm_q(const u16* sq, u32 (&qf)[M_SLICES][QF_STEPS][4], u32 (&qf8)[M_SLICES][2],
                         int warp, int lane) {
  const u32 base = fg_smem_addr(sq) + 2 * (warp * M_SLICES * 16) * W;
  const int mi = lane >> 3;
  // matrices: (rows +0..7, k lo), (rows +8..15, k lo), (rows +0..7, k hi), (rows +8..15, k hi)
  const FgLdsmOffsets<W> lo((lane & 7) + ((mi & 1) << 3), mi >> 1);
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms) {
    if (W >= 16) {
      if (Q_IN_REGS) {
#pragma unroll
        for (int ks = 0; ks < W / 16; ++ks) {
          u32* a = qf[ms][Q_IN_REGS ? OFF / 16 + ks : 0];
          fg_ldsm_x4(base + 2 * lo.at(ms * 16, ks), a[0], a[1], a[2], a[3]);
        }
      }
    } else {
      fg_ldsm_x2(base + 2 * lo.at(ms * 16, 0), qf8[ms][0], qf8[ms][1]);
    }
  }
}

// S += Q[:, OFF:OFF+W] . K[:, OFF:OFF+W]^T for this warp's slices.
template <int W, int OFF>
FG_DEVICE void fg_qk(const u16* sq, const u16* sk, const u32 (&qf)[M_SLICES][QF_STEPS][4],
                     const u32 (&qf8)[M_SLICES][2], float (&s)[M_SLICES][NT][4], int warp, int lane) {
  const u32 kbase = fg_smem_addr(sk);
  const u32 qbase = fg_smem_addr(sq) + 2 * (warp * M_SLICES * 16) * W;
  const int mi = lane >> 3;
  if (W >= 16) {
    // K matrices: (keys +0..7, k lo), (keys +0..7, k hi), (keys +8..15, k lo), (keys +8..15, k hi)
    const FgLdsmOffsets<W> ko((lane & 7) + ((mi >> 1) << 3), mi & 1);
    const FgLdsmOffsets<W> qo((lane & 7) + ((mi & 1) << 3), mi >> 1);
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks) {
      u32 aq[M_SLICES][4];
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) {
        if (Q_IN_REGS) {
#pragma unroll
          for (int i = 0; i < 4; ++i) aq[ms][i] = qf[ms][Q_IN_REGS ? OFF / 16 + ks : 0][i];
        } else {
          fg_ldsm_x4(qbase + 2 * qo.at(ms * 16, ks), aq[ms][0], aq[ms][1], aq[ms][2], aq[ms][3]);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        u32 b0, b1, b2, b3;
        fg_ldsm_x4(kbase + 2 * ko.at(np * 16, ks), b0, b1, b2, b3);
#pragma unroll
        for (int ms = 0; ms < M_SLICES; ++ms) {
          fg_mma16816(s[ms][2 * np], aq[ms], b0, b1);
          fg_mma16816(s[ms][2 * np + 1], aq[ms], b2, b3);
        }
      }
    }
  } else {
    const FgLdsmOffsets<W> ko((lane & 7) + ((mi & 1) << 3), 0);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      u32 b0, b1;
      fg_ldsm_x2(kbase + 2 * ko.at(np * 16, 0), b0, b1);
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) {
        fg_mma1688(s[ms][2 * np], qf8[ms], b0);
        fg_mma1688(s[ms][2 * np + 1], qf8[ms], b1);
      }
    }
  }
}

// O[:, OFF:OFF+W] += P . V[:, OFF:OFF+W]; P comes from the S accumulators,
// converted in registers (the m16n8k16 C fragment of two adjacent n8 tiles is
// the A fragment of one k16 step).
template <int W, int OFF>
FG_DEVICE void fg_pv(const u16* sv, const float (&s)[M_SLICES][NT][4], float (&o)[M_SLICES][OT][4], int lane) {
  const u32 base = fg_smem_addr(sv);
  const int mi = lane >> 3;
  // V matrices (transposed): (keys +0..7, dv lo), (keys +8..15, dv lo), (keys +0..7, dv hi), (keys +8..15, dv hi)
  const FgLdsmOffsets<W> vo((lane & 7) + ((mi & 1) << 3), W >= 16 ? mi >> 1 : 0);
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
    u32 a[M_SLICES][4];
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms) {
      a[ms][0] = fg_pack_in(s[ms][2 * kk][0], s[ms][2 * kk][1]);
      a[ms][1] = fg_pack_in(s[ms][2 * kk][2], s[ms][2 * kk][3]);
      a[ms][2] = fg_pack_in(s[ms][2 * kk + 1][0], s[ms][2 * kk + 1][1]);
      a[ms][3] = fg_pack_in(s[ms][2 * kk + 1][2], s[ms][2 * kk + 1][3]);
    }
    if (W >= 16) {
#pragma unroll
      for (int dp = 0; dp < W / 16; ++dp) {
        u32 b0, b1, b2, b3;
        fg_ldsm_x4_trans(base + 2 * vo.at(kk * 16, dp), b0, b1, b2, b3);
#pragma unroll
        for (int ms = 0; ms < M_SLICES; ++ms) {
          fg_mma16816(o[ms][OFF / 8 + 2 * dp], a[ms], b0, b1);
          fg_mma16816(o[ms][OFF / 8 + 2 * dp + 1], a[ms], b2, b3);
        }
      }
    } else {
      u32 b0, b1;
      fg_ldsm_x2_trans(base + 2 * vo.at(kk * 16, 0), b0, b1);
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) fg_mma16816(o[ms][OFF / 8], a[ms], b0, b1);
    }
  }
}

// Stage this warp's normalised O fragments (columns [OFF, OFF+W)) in shared memory.
template <int W, int OFF>
FG_DEVICE void fg_stage_o(u16* so, const float (&o)[M_SLICES][OT][4], const float (&inv)[M_SLICES][2], int warp,
                          int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms) {
    const int row0 = (warp * M_SLICES + ms) * 16 + g;
#pragma unroll
    for (int nt = 0; nt < W / 8; ++nt) {
      const float* c = o[ms][OFF / 8 + nt];
      const int off = 2 * t;
      *reinterpret_cast<u32*>(so + fg_swz<W>(row0, nt) + off) = fg_pack_in(c[0] * inv[ms][0], c[1] * inv[ms][0]);
      *reinterpret_cast<u32*>(so + fg_swz<W>(row0 + 8, nt) + off) = fg_pack_in(c[2] * inv[ms][1], c[3] * inv[ms][1]);
    }
  }
}

// Copy staged O rows [0, valid_rows) to global with 16-byte stores.
template <int W, int OFF>
FG_DEVICE void fg_store_o(u16* dst, const u16* so, i64 stride, int valid_rows, int tid) {
  constexpr int UPR = W / 8;
  constexpr int UNITS = BLOCK_M * UPR;
#pragma unroll
  for (int it = 0; it < (UNITS + THREADS - 1) / THREADS; ++it) {
    const int u = it * THREADS + tid;
    if (UNITS % THREADS == 0 || u < UNITS) {
      const int row = u / UPR, unit = u % UPR;
      if (row < valid_rows)
        *reinterpret_cast<U4*>(dst + (i64)row * stride + OFF + unit * 8) =
            *reinterpret_cast<const U4*>(so + fg_swz<W>(row, unit));
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) @@KERNEL_NAME@@(const FwdParams p) {
  extern __shared__ __align__(128) unsigned char fg_smem[];
  u16* const sQ = reinterpret_cast<u16*>(fg_smem);
  u16* const sK = sQ + Q_REGION;
  u16* const sV = sK + STAGES * BLOCK_N * HEAD_DIM;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;

  // Block -> (m block, head, batch); one grid dimension, 64-bit safe.
  const i64 bid = blockIdx.x;
  i64 m_block = bid % p.num_m_blocks;
  const i64 bh = bid / p.num_m_blocks;
  const i64 h = bh % p.heads_q;
  const i64 b = bh / p.heads_q;
  if (MASK != 0) m_block = p.num_m_blocks - 1 - m_block;  // longest rows first
  const i64 kvh = h / (p.heads_q / p.heads_kv);
  const int m_start = (int)(m_block * BLOCK_M);
  const int seqlen_q = (int)p.seqlen_q, seqlen_k = (int)p.seqlen_k;
  const int rows_valid = min(BLOCK_M, seqlen_q - m_start);

  const u16* q_ptr = static_cast<const u16*>(p.q) + b * p.q_stride_batch + h * p.q_stride_head + (i64)m_start * p.q_stride_seq;
  const u16* k_ptr = static_cast<const u16*>(p.k) + b * p.k_stride_batch + kvh * p.k_stride_head;
  const u16* v_ptr = static_cast<const u16*>(p.v) + b * p.v_stride_batch + kvh * p.v_stride_head;

  // Keys visible to this block: causal masks cut the key range.
  // Query i sees keys j <= i + diag (top-left: diag 0; bottom-right: seqlen_k - seqlen_q).
  const int diag = MASK == 2 ? seqlen_k - seqlen_q : 0;
  int n_tiles = (seqlen_k + BLOCK_N - 1) / BLOCK_N;
  if (MASK != 0) {
    const int last_key = m_start + rows_valid - 1 + diag;  // last key any row of the block sees
    n_tiles = last_key < 0 ? 0 : min(n_tiles, last_key / BLOCK_N + 1);
  }

  // ---- K/V pipeline ----
  // With QK_AHEAD, Q.K^T runs one tile ahead of softmax and P.V, so the tensor
  // cores have the next tile's products to work on while a warp does the
  // current tile's softmax (A = 1 below; A = 0 without it). K tile t and V tile
  // t live in buffer t % STAGES. At iteration j a group {K[j+STAGES-1+A],
  // V[j+STAGES-1]} is issued (K[j-1+A] and V[j-1] were last read at iteration
  // j-1; the barrier orders that), and K[j+A], V[j] must have landed: they came
  // in the group issued STAGES-1 iterations earlier, so STAGES-2 newer groups
  // may still be in flight. With one stage the group is waited for at once.
  constexpr int AHEAD = QK_AHEAD ? 1 : 0;
  auto load_k = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sKs = sK + (tile % STAGES) * BLOCK_N * HEAD_DIM;
      const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
      const int kv_valid = seqlen_k - n0;
@@LOAD_K@@
    }
  };
  auto load_v = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sVs = sV + (tile % STAGES) * BLOCK_N * HEAD_DIM_V;
      const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
      const int kv_valid = seqlen_k - n0;
@@LOAD_V@@
    }
  };
  if (AHEAD) load_k(0);
#pragma unroll
  for (int gi = 1 - STAGES; gi <= -1; ++gi) {
    load_k(gi + STAGES - 1 + AHEAD);
    load_v(gi + STAGES - 1);
    fg_copy_commit();
  }
  if (STAGES == 1 && AHEAD) fg_copy_commit();

  // ---- Q: scale, round, stage, then keep in registers ----
  const float scale = (float)p.softmax_scale;
@@LOAD_Q@@
  u32 qf[M_SLICES][QF_STEPS][4];
  u32 qf8[M_SLICES][2];

  float o[M_SLICES][OT][4];
  float row_max[M_SLICES][2], row_sum[M_SLICES][2];
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms) {
#pragma unroll
    for (int i = 0; i < OT; ++i) o[ms][i][0] = o[ms][i][1] = o[ms][i][2] = o[ms][i][3] = 0.f;
    row_max[ms][0] = row_max[ms][1] = fg_neg_inf();
    row_sum[ms][0] = row_sum[ms][1] = 0.f;
  }

  // S = Qs . K^T for the K tile in `sKc`.
  auto qk = [&](const u16* sKc, float (&s)[M_SLICES][NT][4]) {
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int i = 0; i < NT; ++i) s[ms][i][0] = s[ms][i][1] = s[ms][i][2] = s[ms][i][3] = 0.f;
@@QK@@
  };
  // Bias, masks and the online softmax of tile j; `s` becomes P (unnormalised).
  auto softmax = [&](int j, float (&s)[M_SLICES][NT][4]) {
    const int n_start = j * BLOCK_N;
    // ---- bias and masks ----
    if (BIAS_KIND != 0) {
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int qi = m_start + (warp * M_SLICES + ms) * 16 + g + 8 * r;
          if (qi < seqlen_q) {
            const i64 row_off = b * p.bias_stride_batch + h * p.bias_stride_head + (i64)qi * p.bias_stride_q;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int kj = n_start + nt * 8 + 2 * t + e;
                if (kj < seqlen_k) {
                  const i64 off = row_off + (i64)kj * p.bias_stride_k;
                  const float bv = BIAS_KIND == 2 ? static_cast<const float*>(p.bias)[off]
                                                  : fg_in_to_f32(static_cast<const u16*>(p.bias)[off]);
                  s[ms][nt][2 * r + e] += bv;
                }
              }
          }
        }
    }
    const bool need_mask = n_start + BLOCK_N > seqlen_k || (MASK != 0 && n_start + BLOCK_N - 1 > m_start + diag);
    if (need_mask) {
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int qi = m_start + (warp * M_SLICES + ms) * 16 + g + 8 * r;
          const int limit = MASK != 0 ? min(seqlen_k - 1, qi + diag) : seqlen_k - 1;  // last visible key
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (n_start + nt * 8 + 2 * t + e > limit) s[ms][nt][2 * r + e] = fg_neg_inf();
        }
    }

    // ---- online softmax (exp2 domain) ----
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[ms][r];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[ms][nt][2 * r], s[ms][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row with no visible key so far keeps max -inf; use 0 as the offset so
        // exp2(-inf - offset) = 0 and no NaN appears.
        const float m_use = mx == fg_neg_inf() ? 0.f : mx;
        const float neg_m = -m_use * LOG2E;
        const float corr = fg_exp2(row_max[ms][r] * LOG2E + neg_m);
        row_max[ms][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float p0 = fg_exp2(fmaf(s[ms][nt][2 * r], LOG2E, neg_m));
          const float p1 = fg_exp2(fmaf(s[ms][nt][2 * r + 1], LOG2E, neg_m));
          s[ms][nt][2 * r] = p0;
          s[ms][nt][2 * r + 1] = p1;
          sum += p0 + p1;
        }
        row_sum[ms][r] = row_sum[ms][r] * corr + sum;
        // corr is exactly 1 when the row max did not move; skip the rescale
        // when that holds for every row of the warp.
        if (__any_sync(0xffffffffu, corr != 1.f)) {
#pragma unroll
          for (int i = 0; i < OT; ++i) {
            o[ms][i][2 * r] *= corr;
            o[ms][i][2 * r + 1] *= corr;
          }
        }
      }

  };
  // O += P . V for the V tile in `sVc`.
  auto pv = [&](const u16* sVc, const float (&s)[M_SLICES][NT][4]) {
@@PV@@
  };
  // One iteration: tile j's softmax and P.V, and (QK_AHEAD) tile j+1's Q.K^T into `sn`.
  auto step = [&](int j, float (&sc)[M_SLICES][NT][4], float (&sn)[M_SLICES][NT][4]) {
    if (STAGES == 1) {
      __syncthreads();  // every warp is done with K[j-1+A] and V[j-1]
      load_k(j + AHEAD);
      load_v(j);
      fg_copy_commit();
      fg_copy_wait<0>();
      __syncthreads();
    } else {
      fg_copy_wait<(STAGES > 1 ? STAGES - 2 : 0)>();
      __syncthreads();  // K[j+A], V[j] visible; K[j-1+A], V[j-1] buffers free
      load_k(j + STAGES - 1 + AHEAD);
      load_v(j + STAGES - 1);
      fg_copy_commit();
    }
    if (AHEAD) {
      if (j + 1 < n_tiles) qk(sK + ((j + 1) % STAGES) * BLOCK_N * HEAD_DIM, sn);
    } else {
      qk(sK + (j % STAGES) * BLOCK_N * HEAD_DIM, sc);
    }
    softmax(j, sc);
    pv(sV + (j % STAGES) * BLOCK_N * HEAD_DIM_V, sc);
  };

  float s0[M_SLICES][NT][4], s1[M_SLICES][NT][4];
  if (AHEAD && n_tiles > 0) {
    fg_copy_wait<(STAGES > 1 ? STAGES - 2 : 0)>();  // K[0] (and Q's stores) visible
    __syncthreads();
@@LDSM_Q@@
    qk(sK, s0);
  } else {
    __syncthreads();
@@LDSM_Q@@
  }
  if (AHEAD) {
    // Unrolled by two so the S arrays swap roles without register copies.
    for (int j = 0; j < n_tiles; j += 2) {
      step(j, s0, s1);
      if (j + 1 < n_tiles) step(j + 1, s1, s0);
    }
  } else {
    for (int j = 0; j < n_tiles; ++j) step(j, s0, s1);
  }
  fg_copy_wait<0>();

  // ---- epilogue: normalise, LSE, stage O through shared memory, 16-byte stores ----
  float inv[M_SLICES][2];
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[ms][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[ms][r] = l > 0.f ? 1.f / l : 0.f;  // a row that saw no key: O = 0
      if (HAS_LSE && t == 0) {
        const int qi = m_start + (warp * M_SLICES + ms) * 16 + g + 8 * r;
        if (qi < seqlen_q)
          p.lse[b * p.lse_stride_batch + h * p.lse_stride_head + qi] = l > 0.f ? row_max[ms][r] + fg_log2(l) * LN2 : fg_neg_inf();
      }
    }
  __syncthreads();  // every warp is done reading sQ (and the K/V buffers)
  u16* const sO = sQ;
@@STAGE_O@@
  __syncthreads();
  u16* const o_ptr = static_cast<u16*>(p.o) + b * p.o_stride_batch + h * p.o_stride_head + (i64)m_start * p.o_stride_seq;
@@STORE_O@@
}
