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
// KEY_WARPS > 1 (fwd_split with block_m < 16 * warps, few packed rows): the
// warps form row groups of KEY_WARPS warps that hold the same 16 rows and
// split each key tile, warp w taking keys [w % KEY_WARPS * BN_W, + BN_W); their
// states are merged through shared memory at the end (fg_merge_key_warps).
constexpr int KEY_WARPS = BLOCK_M < 16 * WARPS ? 16 * WARPS / BLOCK_M : 1;
constexpr int BN_W = BLOCK_N / KEY_WARPS;  // keys of a tile per warp
constexpr int M_SLICES = BLOCK_M * KEY_WARPS / (16 * WARPS);
constexpr int NT = BN_W / 8;             // n8 tiles of S per slice
static_assert(KEY_WARPS == 1 || (SPLIT && M_SLICES == 1 && BN_W % 16 == 0 && WARPS % KEY_WARPS == 0),
              "key-split warps: fwd_split, one 16-row slice per warp, whole k16 steps of keys per warp");
constexpr int KS16 = HEAD_DIM / 16;      // k16 steps of Q.K^T (the 8-wide tail chunk, if any, uses k8)
constexpr int OT = HEAD_DIM_V / 8;       // n8 tiles of O per slice
// Q fragments stay in registers while they cost at most 32 registers per thread
// (HEAD_DIM / 4 per slice); otherwise they are re-read from shared memory each
// k step, which keeps the O accumulators (HEAD_DIM_V / 2 per slice) from spilling.
constexpr bool Q_IN_REGS = HEAD_DIM * M_SLICES <= 128;
constexpr int QF_STEPS = Q_IN_REGS && KS16 > 0 ? KS16 : 1;
constexpr int Q_REGION = BLOCK_M * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
// Shared memory: Q (then O), STAGES K tiles, STAGES V tiles (fg_smem below);
// KEY_WARPS > 1: after the key loop, the warps' LSE and O rows for the merge
// (MERGE_BYTES from the start, over all of it; rows padded by 8 floats).
constexpr int MERGE_STRIDE = HEAD_DIM_V + 8;
constexpr int MERGE_BYTES = KEY_WARPS > 1 ? 4 * KEY_WARPS * BLOCK_M * (MERGE_STRIDE + 1) : 0;
constexpr int TILE_BYTES = 2 * (Q_REGION + STAGES * BLOCK_N * (HEAD_DIM + HEAD_DIM_V));
static_assert((TILE_BYTES > MERGE_BYTES ? TILE_BYTES : MERGE_BYTES) == SMEM_BYTES,
              "the kernel's shared-memory layout and KernelSpec::smem_bytes disagree");

@@M16_PARTS@@

// Q fragments of this warp's slices for head-dim columns [OFF, OFF+W).
template <int W, int OFF>
FG_DEVICE void fg_ldsm_q(const u16* sq, u32 (&qf)[M_SLICES][QF_STEPS][4], u32 (&qf8)[M_SLICES][2],
                         int warp, int lane) {
  const u32 base = fg_smem_addr(sq) + 2 * fg_warp_row0(warp) * W;
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
  const u32 kbase = fg_smem_addr(sk) + 2 * fg_warp_key0(warp) * W;  // (a multiple of 16 rows: the same swizzle)
  const u32 qbase = fg_smem_addr(sq) + 2 * fg_warp_row0(warp) * W;
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
// Keys are the warp's (KEY_WARPS > 1: BN_W of them from fg_warp_key0).
template <int W, int OFF, class PM>
FG_DEVICE void fg_pv(const u16* sv, const float (&s)[M_SLICES][NT][4], float (&o)[M_SLICES][OT][4], int warp,
                     int lane, PM& pm) {
  const u32 base = fg_smem_addr(sv) + 2 * fg_warp_key0(warp) * W;
  const FgLdsmOffsets<W> vo = fg_pv_offsets<W>(lane);
#pragma unroll
  for (int kk = 0; kk < BN_W / 16; ++kk) {
    bool check = false;
    if constexpr (PM::checked) {
      if (kk * 16 >= pm.skip_from) break;
      check = kk * 16 + 16 > pm.band_from;
      if constexpr (PM::window) {
        if (kk * 16 + 16 <= pm.skip_below) continue;
        check = check || kk * 16 < pm.band_below;
      }
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

// KEY_WARPS > 1, after the key loop: the KEY_WARPS warps of a row group hold
// states (row max, row sum, O) of the same 16 rows over disjoint keys. Each
// warp's rows become (O_w / l_w, LSE_w) and are merged by the combine family's
// rule (common.cuh: fg_max_nan, fg_state_weight), with the sink as one more
// state (O = 0, LSE = sink) where fg_sink_here: m = max_w LSE_w,
// LSE = m + log(sum_w e^(LSE_w - m)), O = sum_w e^(LSE_w - m) O_w / sum; a row
// no warp saw a key of gets O = 0, LSE = -inf; NaN propagates. The split's
// fp32 partial O and LSE (fg_store_o_partial's layout) are then written with
// 16-byte stores; with one split (p.num_splits == 1) the merged rows are the
// result: O in the input dtype and LSE (when p.lse is set) go straight to the
// problem's tensors, and decode() launches no combine (decode_merges in
// runtime/api.cpp; a combine of one state would write the same bits). `sm`: the
// block's shared memory, MERGE_BYTES of it (the caller has synchronised: no
// warp reads the K/V tiles any more).
FG_DEVICE void fg_merge_key_warps(const FwdParams& p, const FgBlock& blk, const float (&o)[M_SLICES][OT][4],
                                  const float (&row_max)[M_SLICES][2], const float (&row_sum)[M_SLICES][2],
                                  float* sm, int warp, int lane) {
  const int g = lane >> 2, t = lane & 3, kw = warp % KEY_WARPS;
  const bool direct = p.num_splits == 1;
  float* const s_lse = sm;                        // [KEY_WARPS][BLOCK_M]
  float* const s_o = sm + KEY_WARPS * BLOCK_M;    // [KEY_WARPS][BLOCK_M][MERGE_STRIDE]
  float lse[2], inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[0][r];
    l += __shfl_xor_sync(0xffffffffu, l, FgFragM16::X0);
    l += __shfl_xor_sync(0xffffffffu, l, FgFragM16::X1);
    lse[r] = fg_lse<IS_BF16>(row_max[0][r], l);
    inv[r] = l == 0.f ? 0.f : 1.f / l;
    if (t == 0) s_lse[kw * BLOCK_M + fg_warp_row0(warp) + g + 8 * r] = lse[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = fg_warp_row0(warp) + g + 8 * r;
    float m = fg_neg_inf();
#pragma unroll
    for (int w = 0; w < KEY_WARPS; ++w) m = fg_max_nan(m, s_lse[w * BLOCK_M + row]);
    // With sinks (fg_sink_here) the row's sink logit is one more state, whose O
    // is 0 (compile-time branches: the kernels without sinks keep their code).
    float sink = fg_neg_inf();
    if constexpr (SINKS) {
      if (fg_sink_here(blk)) sink = p.sinks[fg_row_h(blk, row)];
      m = fg_max_nan(m, sink);
    }
    const bool empty = m == fg_neg_inf();
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < KEY_WARPS; ++w) sum += fg_state_weight(s_lse[w * BLOCK_M + row], m);
    if constexpr (SINKS) sum += fg_state_weight(sink, m);
    // This warp's factor: its weight over the sum, times its 1 / l_w (0 when it saw no key).
    const bool take = !empty && lse[r] != fg_neg_inf();
    const float f = take ? fg_state_weight(lse[r], m) / sum * inv[r] : 0.f;
    float* const dst = s_o + (kw * BLOCK_M + row) * MERGE_STRIDE + 2 * t;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
      *reinterpret_cast<float2*>(dst + 8 * nt) =
          take ? make_float2(o[0][nt][2 * r] * f, o[0][nt][2 * r + 1] * f) : make_float2(0.f, 0.f);
    if (kw == 0 && t == 0 && row < blk.rows_valid) {
      const float lse_row = empty ? fg_neg_inf() : m + logf(sum);
      if (!direct) *fg_lse_dst(p, blk, row) = lse_row;
      else if (p.lse != nullptr)
        p.lse[blk.b * p.lse_stride_batch + fg_row_h(blk, row) * p.lse_stride_head + blk.q_off + fg_row_q(blk, row)] =
            lse_row;
    }
  }
  __syncthreads();
  constexpr int UPR = HEAD_DIM_V / 4;  // float4 units per row
  for (int u = threadIdx.x; u < BLOCK_M * UPR; u += THREADS) {
    const int row = u / UPR, c = u % UPR;
    if (row < blk.rows_valid) {
      float4 acc = *reinterpret_cast<const float4*>(s_o + row * MERGE_STRIDE + 4 * c);
#pragma unroll
      for (int w = 1; w < KEY_WARPS; ++w) {
        const float4 x = *reinterpret_cast<const float4*>(s_o + (w * BLOCK_M + row) * MERGE_STRIDE + 4 * c);
        acc.x += x.x;
        acc.y += x.y;
        acc.z += x.z;
        acc.w += x.w;
      }
      const int qi = fg_row_q(blk, row);
      if (direct) {
        u16* const out = static_cast<u16*>(p.o) + fg_o_row(p, blk, qi) + fg_row_h(blk, row) * p.o_stride_head;
        *reinterpret_cast<uint2*>(out + 4 * c) = make_uint2(fg_pack_in(acc.x, acc.y), fg_pack_in(acc.z, acc.w));
      } else {
        float* const out = p.o_partial +
                           (fg_part_row(p, blk, qi) * p.heads_q + fg_row_h(blk, row)) * HEAD_DIM_V;
        *reinterpret_cast<float4*>(out + 4 * c) = acc;
      }
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

  const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p, fg_lpt_order<MASK>(p, blockIdx.x));
  if (VARLEN && blk.rows_valid <= 0) return;  // past its sequence's rows (the whole block)
  const int seqlen_k = blk.seqlen_k, m_start = blk.m_start, rows_valid = blk.rows_valid, n_tiles = blk.n_tiles;
  const i64 h = blk.h;
  const u16* const q_ptr = blk.q;
  const u16* const k_ptr = blk.k;
  const u16* const v_ptr = blk.v;

  // ---- K/V pipeline ----
  // With QK_AHEAD, Q.K^T runs one tile ahead of softmax and P.V, so the tensor
  // cores have the next tile's products to work on while a warp does the
  // current tile's softmax (A = 1 below; A = 0 without it). K tile t and V tile
  // t live in buffer t % STAGES. STAGES >= 2: at iteration j a group
  // {K[j+STAGES-1+A], V[j+STAGES-1]} is issued (K[j-1+A] and V[j-1] were last
  // read at iteration j-1; the barrier orders that), and K[j+A], V[j] must have
  // landed: they came in the group issued STAGES-1 iterations earlier, so
  // STAGES-2 newer groups may still be in flight. STAGES == 1 (one K and one V
  // buffer): K and V are copied in turn, each while the other is in use. At
  // iteration j, once K[j+A] has landed and every warp is done with V[j-1], V[j]
  // is issued and lands during Q.K^T and the softmax; once it has landed and
  // every warp is done with K[j+A], K[j+1+A] is issued and lands during P.V.
  constexpr int AHEAD = QK_AHEAD ? 1 : 0;
  auto load_k = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sKs = sK + (tile % STAGES) * BLOCK_N * HEAD_DIM;
      const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
      const int kv_valid = seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - n0;
@@LOAD_K@@
    }
  };
  auto load_v = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sVs = sV + (tile % STAGES) * BLOCK_N * HEAD_DIM_V;
      const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
      const int kv_valid = seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - n0;
@@LOAD_V@@
    }
  };
  if (AHEAD || STAGES == 1) load_k(0);
#pragma unroll
  for (int gi = 1 - STAGES; gi <= -1; ++gi) {
    load_k(gi + STAGES - 1 + AHEAD);
    load_v(gi + STAGES - 1);
    fg_copy_commit();
  }
  if (STAGES == 1) fg_copy_commit();

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
    if constexpr (WINDOW) {
      FgPvWindow<BN_W> pm = fg_pv_window_warp(blk, j, warp);
      if (fg_pv_cut(pm)) {
        all_chunks(pm);
        fg_pv_poison(pm, blk, j, warp, g, row_sum);
        return;
      }
    } else if (MASK != 0) {
      FgPvMask pm = fg_pv_mask_warp(blk, j, warp);
      if (fg_pv_cut<BN_W>(pm)) {
        all_chunks(pm);
        fg_pv_poison(pm, blk, j, warp, g, row_sum);
        return;
      }
    }
    FgPvPlain plain;
    all_chunks(plain);
  };
  // One iteration: tile j's softmax and P.V, and (QK_AHEAD) tile j+1's Q.K^T into `sn`.
  auto step = [&](int j, float (&sc)[M_SLICES][NT][4], float (&sn)[M_SLICES][NT][4]) {
    if constexpr (STAGES == 1) {
      fg_copy_wait<0>();
      __syncthreads();  // K[j+A] visible; every warp is done with V[j-1]
      load_v(j);
      fg_copy_commit();
      if (AHEAD) {
        if (j + 1 < n_tiles) qk(sK, sn);
      } else {
        qk(sK, sc);
      }
      softmax(j, sc);
      fg_copy_wait<0>();
      __syncthreads();  // V[j] visible; every warp is done with K[j+A]
      load_k(j + 1 + AHEAD);
      fg_copy_commit();
      pv(j, sV, sc);
    } else {
      fg_copy_wait<(STAGES > 1 ? STAGES - 2 : 0)>();
      __syncthreads();  // K[j+A], V[j] visible; K[j-1+A], V[j-1] buffers free
      load_k(j + STAGES - 1 + AHEAD);
      load_v(j + STAGES - 1);
      fg_copy_commit();
      if (AHEAD) {
        if (j + 1 < n_tiles) qk(sK + ((j + 1) % STAGES) * BLOCK_N * HEAD_DIM, sn);
      } else {
        qk(sK + (j % STAGES) * BLOCK_N * HEAD_DIM, sc);
      }
      softmax(j, sc);
      pv(j, sV + (j % STAGES) * BLOCK_N * HEAD_DIM_V, sc);
    }
  };

  float s0[M_SLICES][NT][4], s1[M_SLICES][NT][4];
  if (AHEAD && n_tiles > 0) {
    fg_copy_wait<(STAGES > 1 ? STAGES - 2 : 0)>();  // K[0] (and Q's stores) visible
    __syncthreads();
@@LDSM_Q@@
    qk(sK, s0);
    if (STAGES == 1) {
      __syncthreads();  // every warp is done with K[0]
      load_k(1);
      fg_copy_commit();
    }
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
  if constexpr (KEY_WARPS > 1) {
    __syncthreads();  // every warp is done with the K/V buffers: the merge reuses them
    fg_merge_key_warps(p, blk, o, row_max, row_sum, reinterpret_cast<float*>(fg_smem), warp, lane);
    return;
  }
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
  u16* const o_ptr = static_cast<u16*>(p.o) + fg_o_row(p, blk, m_start) + h * p.o_stride_head;
@@STORE_O@@
}
