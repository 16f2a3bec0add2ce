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
// Shared memory: Q (then O), STAGES K tiles, STAGES V tiles (fg_smem below).
static_assert(2 * (Q_REGION + STAGES * BLOCK_N * (HEAD_DIM + HEAD_DIM_V)) == SMEM_BYTES,
              "the kernel's shared-memory layout and KernelSpec::smem_bytes disagree");

@@M16_PARTS@@

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
// PM: FgPvPlain, or FgPvMask on a tile the causal mask cuts (fwd_block.cuh):
// steps no row of the warp sees are skipped, the V fragments of steps some
// rows see are cleaned of non-finite values (fg_pv_step).
template <int W, int OFF, class PM>
FG_DEVICE void fg_pv(const u16* sv, const float (&s)[M_SLICES][NT][4], float (&o)[M_SLICES][OT][4], int lane,
                     PM& pm) {
  const u32 base = fg_smem_addr(sv);
  const FgLdsmOffsets<W> vo = fg_pv_offsets<W>(lane);
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
    bool check = false;
    if constexpr (PM::checked) {
      if (kk * 16 >= pm.skip_from) break;
      check = kk * 16 + 16 > pm.band_from;
    }
    u32 a[M_SLICES][4];
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms) {
      a[ms][0] = fg_pack_in(s[ms][2 * kk][0], s[ms][2 * kk][1]);
      a[ms][1] = fg_pack_in(s[ms][2 * kk][2], s[ms][2 * kk][3]);
      a[ms][2] = fg_pack_in(s[ms][2 * kk + 1][0], s[ms][2 * kk + 1][1]);
      a[ms][3] = fg_pack_in(s[ms][2 * kk + 1][2], s[ms][2 * kk + 1][3]);
    }
    if constexpr (PM::checked) {
      if (check) fg_pv_step<W, OFF, true>(base, vo, kk, a, o, lane, pm);
      else fg_pv_step<W, OFF, false>(base, vo, kk, a, o, lane, pm);
    } else {
      fg_pv_step<W, OFF, false>(base, vo, kk, a, o, lane, pm);
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

  const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p, blockIdx.x);
  const int seqlen_k = blk.seqlen_k, m_start = blk.m_start, rows_valid = blk.rows_valid, n_tiles = blk.n_tiles;
  const i64 b = blk.b, h = blk.h;
  const u16* const q_ptr = blk.q;
  const u16* const k_ptr = blk.k;
  const u16* const v_ptr = blk.v;

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
      const int kv_valid = seqlen_k - (SPLIT ? blk.key0 : 0) - n0;
@@LOAD_K@@
    }
  };
  auto load_v = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sVs = sV + (tile % STAGES) * BLOCK_N * HEAD_DIM_V;
      const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
      const int kv_valid = seqlen_k - (SPLIT ? blk.key0 : 0) - n0;
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
    float corr[M_SLICES][2];
    fg_softmax(p, blk, j, warp, g, t, s, row_max, row_sum, corr);
    fg_rescale_o(o, corr);
  };
  // O += P . V for V tile j in `sVc` (a tile the causal mask cuts: fwd_block.cuh,
  // "causal masks and P.V").
  auto pv = [&](int j, const u16* sVc, const float (&s)[M_SLICES][NT][4]) {
    auto all_chunks = [&](auto& pm) {
@@PV@@
    };
    if (MASK != 0) {
      FgPvMask pm = fg_pv_mask<BLOCK_N>(blk, j, warp * M_SLICES * 16, warp * M_SLICES * 16 + M_SLICES * 16 - 1);
      if (fg_pv_cut<BLOCK_N>(pm)) {
        all_chunks(pm);
        fg_pv_poison(pm, blk, j, warp * M_SLICES * 16, g, row_sum);
        return;
      }
    }
    FgPvPlain plain;
    all_chunks(plain);
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
    pv(j, sV + (j % STAGES) * BLOCK_N * HEAD_DIM_V, sc);
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
  fg_finish_rows(p, blk, warp, g, t, row_max, row_sum, inv);
  if (SPLIT) {
@@STORE_O_PARTIAL@@
    return;
  }
  __syncthreads();  // every warp is done reading sQ (and the K/V buffers)
  u16* const sO = sQ;
@@STAGE_O@@
  __syncthreads();
  u16* const o_ptr = static_cast<u16*>(p.o) + b * p.o_stride_batch + h * p.o_stride_head + (i64)m_start * p.o_stride_seq;
@@STORE_O@@
}
