// ---- forward attention, mma.sync m8n8k4 (templates/fwd_m8n8k4.cu) -----------
// The Volta (sm_70) kernel. float16 operands, f32 accumulation; no ldmatrix,
// no cp.async, no sm_80 conversions: plain loads and stores, 8-byte shared
// reads, two cvt.rn.f16.f32 per packed pair.
//
// The unit (PTX ISA, "Matrix Fragments for mma.m8n8k4 with .f16"): a warp is
// four quadpairs; lane = a0 + 2*a1 + 4*q0 + 8*q1 + 16*b belongs to quadpair
// q = q0 + 2*q1 as thread t = a0 + 2*a1 + 4*b (lanes 0-3 and 16-19 form
// quadpair 0). Each quadpair computes its own 8x8x4 product: thread t holds
// row t of A (k = 0..3, two f16x2 registers, k0 in the low half) and column t
// of B (k = 0..3), and accumulator register v = v0 + 2*v1 + 4*v2 holds
// D[m = a0 + 2*v1 + 4*b][n = v0 + 2*a1 + 4*v2].
//
// Here the four quadpairs compute the four 8x8 quadrants of one 16x16 tile:
// quadpair (qm = q0, qn = q1) owns rows 8*qm.. and columns 8*qn... So a thread
// feeds A row 8*qm + t and B column 8*qn + t (one A register pair serves every
// n16 tile of a k step, one B pair every 16-row slice), and its accumulators
// are rows 8*qm + a0 + 4*b + 2*v1 (two rows) x columns 8*qn + 2*a1 + v0 + 4*v2.
// A row's values live in the four lanes that differ in a1 and qn (lane bits 1
// and 3): row statistics are reductions over lane ^ 2 and lane ^ 8.
//
// One block computes BLOCK_M query rows of one (batch, head); each warp owns
// M_SLICES 16-row slices. Shared memory holds every operand k-innermost, as
// [k step x rows, 4] halves ("k slabs"): element (k, r) of an operand with R
// rows is at ((k / 4) * R + r') * 4 + k % 4, r' = r ^ 8 when k / 4 % 4 is 2 or 3
// (R >= 16), so each fragment is one 8-byte read and the reads of a k step
// (16 consecutive rows) and the copies' stores are free of bank conflicts.
// Q and K slabs have query / key rows; V slabs have head-dim columns as rows
// and keys as k, so V is transposed on the way in: a thread loads four
// consecutive keys of two columns and stores each column's four keys with one
// 8-byte store. Each head-dim chunk (96 = 64 + 32) is its own sub-tile.
//
// P.V: the S accumulators are not in A-fragment form (a thread holds two rows
// x four keys, an A fragment is one row x four consecutive keys). A thread's
// A row is its accumulator row v1 = a1, so two exchanges build the fragments:
// lane ^ 2 trades the row each lane does not feed (keys 4j+{0,1} and 4j+{2,3}
// then sit together), lane ^ 8 trades the other quadpair column's keys.
// K/V tiles of BLOCK_N keys go through STAGES buffers (STAGES >= 2: tile j+1 is
// copied while tile j is used, one __syncthreads per tile).

@@CONSTANTS@@

constexpr int THREADS = WARPS * 32;
constexpr int M_SLICES = BLOCK_M / (16 * WARPS);
constexpr int NT = BLOCK_N / 16;            // n16 tiles of S per slice
constexpr int PK = BLOCK_N / 4;             // k4 steps of P.V
constexpr int OT = (HEAD_DIM_V + 15) / 16;  // n16 tiles of O per slice (an 8-wide last chunk uses half of one)
// Q fragments stay in registers while they cost at most 32 registers per thread.
constexpr bool Q_IN_REGS = HEAD_DIM * M_SLICES <= 64;
constexpr int QF_STEPS = Q_IN_REGS ? HEAD_DIM / 4 : 1;
constexpr int Q_REGION = BLOCK_M * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
// Shared memory: Q (then O), STAGES K tiles, STAGES V tiles (fg_smem below).
static_assert(2 * (Q_REGION + STAGES * BLOCK_N * (HEAD_DIM + HEAD_DIM_V)) == SMEM_BYTES,
              "the kernel's shared-memory layout and KernelSpec::smem_bytes disagree");
constexpr u32 FULL = 0xffffffffu;
constexpr bool IS_BF16 = false;  // the unit takes f16 only

// The accumulator layout for fwd_rows.cuh: element e = v0 + 2*v1 + 4*v2 of an
// n16 tile is row rbase + 2*v1, key cbase + v0 + 4*v2 (the lane's row r = v1,
// its elements v0 + 2*v2); a row's other lanes are ^2 and ^8.
struct FgFragM8 {
  static constexpr int NW = 16, E = 4, ROW_STEP = 2, X0 = 2, X1 = 8;
  static FG_DEVICE constexpr int reg(int r, int e) { return (e & 1) + 2 * r + 4 * (e >> 1); }
  static FG_DEVICE constexpr int col(int e) { return (e & 1) + 4 * (e >> 1); }
};

@@ROW_PARTS@@

struct __align__(8) U2 { u32 x, y; };

// D = A.B + D on each quadpair (PTX ISA: mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32).
FG_DEVICE void fg_mma884(float* d, const u32* a, const u32* b) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]));
}

// Slot (8 bytes: k = 4*ks .. 4*ks+3) of row r in a k-slab sub-tile with R rows.
template <int R>
FG_DEVICE int fg_slot(int ks, int r) {
  return ks * R + (R >= 16 ? (r ^ ((ks & 2) << 2)) : r);
}
template <int R>
FG_DEVICE U2 fg_ld_slot(const u16* base, int ks, int r) {
  return *reinterpret_cast<const U2*>(base + fg_slot<R>(ks, r) * 4);
}

// Copy ROWS rows x W elements (columns [OFF, OFF+W)) of a row-major global
// operand (Q or K) into its k-slab sub-tile `dst` (W/4 slabs of ROWS rows).
// A thread loads 16 bytes (two k steps of one row; two lanes cover a 32-byte
// sector) and stores two 8-byte slots. Rows >= valid_rows are zero. SCALE (Q):
// multiply by `scale` in f32 and round to f16 (Qs = round(Q * scale)); Q's rows
// with PACK > 1 (fwd_split) are at fg_row_offset(row, stride, stride_head).
// PG (K of a paged KV cache): row r is fg_page_row(pr, src, r).
template <int W, int OFF, int ROWS, bool SCALE, bool PG = false>
FG_DEVICE void fg_load_kslab(u16* dst, const u16* src, i64 stride, int valid_rows, float scale, int tid,
                             i64 stride_head = 0, const FgPageRows& pr = FgPageRows{}) {
  constexpr int UPR = W / 8;  // 16-byte units per row
  constexpr int ITEMS = ROWS * UPR;
  constexpr int PASSES = (ITEMS + THREADS - 1) / THREADS;
  constexpr int G = PASSES < 4 ? PASSES : 4;  // loads in flight per thread (16 registers at most)
#pragma unroll
  for (int g0 = 0; g0 < PASSES; g0 += G) {
    U4 v[G];
    int rows[G], units[G];
#pragma unroll
    for (int k = 0; k < G; ++k) {  // a group's loads first, then its stores
      const int i = (g0 + k) * THREADS + tid;
      // UPR >= 2: lane pairs take units 2j, 2j+1 of one row, 8 rows per half warp.
      int row, unit;
      if (UPR >= 2) {
        const int pair = i >> 1;
        row = pair % ROWS;
        unit = 2 * (pair / ROWS) + (i & 1);
      } else {
        row = i;
        unit = 0;
      }
      rows[k] = row;
      units[k] = unit;
      v[k] = U4{0u, 0u, 0u, 0u};
      if (g0 + k < PASSES && (ITEMS % THREADS == 0 || i < ITEMS) && row < valid_rows)
        v[k] = *reinterpret_cast<const U4*>(
            PG ? fg_page_row(pr, src, row) + OFF + unit * 8
               : src + (SCALE && PACK > 1 ? fg_row_offset(row, stride, stride_head) : (i64)row * stride) + OFF + unit * 8);
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const int i = (g0 + k) * THREADS + tid;
      if (g0 + k < PASSES && (ITEMS % THREADS == 0 || i < ITEMS)) {
        U4 x = v[k];
        if (SCALE) {
          u32* w = &x.x;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float lo = fg_f16_to_f32((u16)(w[e] & 0xffffu)) * scale;
            const float hi = fg_f16_to_f32((u16)(w[e] >> 16)) * scale;
            w[e] = fg_pack_f16_sm70(lo, hi);
          }
        }
        const int ks = 2 * units[k];
        *reinterpret_cast<U2*>(dst + fg_slot<ROWS>(ks, rows[k]) * 4) = U2{x.x, x.y};
        *reinterpret_cast<U2*>(dst + fg_slot<ROWS>(ks + 1, rows[k]) * 4) = U2{x.z, x.w};
      }
    }
  }
}

// Copy V rows (keys) [0, BLOCK_N) x columns [OFF, OFF+W) into the transposed
// k-slab sub-tile `dst`: slot (kk, c) = V[4kk .. 4kk+3][OFF + c], BLOCK_N/4
// slabs of W rows. A thread takes four keys of columns 2cp, 2cp+1 (four
// 4-byte loads; a warp's lanes read consecutive column pairs) and writes two
// 8-byte slots; lanes with item bit 3 set write their odd column first, so a
// half warp's 16 stores hit 16 distinct bank pairs. Keys >= valid_rows are zero.
// PG (a paged KV cache): key k's row is fg_page_row(pr, src, k).
template <int W, int OFF, bool PG = false>
FG_DEVICE void fg_load_v(u16* dst, const u16* src, i64 stride, int valid_rows, int tid,
                         const FgPageRows& pr = FgPageRows{}) {
  constexpr int CP = W / 2;  // column pairs
  constexpr int ITEMS = (BLOCK_N / 4) * CP;
  constexpr int PASSES = (ITEMS + THREADS - 1) / THREADS;
  constexpr int G = PASSES < 4 ? PASSES : 4;  // loads in flight per thread (16 registers at most)
#pragma unroll
  for (int g0 = 0; g0 < PASSES; g0 += G) {
    u32 w[G][4];
#pragma unroll
    for (int k = 0; k < G; ++k) {  // a group's loads first, then its stores
      const int i = (g0 + k) * THREADS + tid;
      const int kk = i / CP, cp = i % CP;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = 4 * kk + e;
        w[k][e] = 0u;
        if (g0 + k < PASSES && (ITEMS % THREADS == 0 || i < ITEMS) && key < valid_rows)
          w[k][e] = *reinterpret_cast<const u32*>((PG ? fg_page_row(pr, src, key) : src + (i64)key * stride) + OFF + 2 * cp);
      }
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const int i = (g0 + k) * THREADS + tid;
      if (g0 + k < PASSES && (ITEMS % THREADS == 0 || i < ITEMS)) {
        const int kk = i / CP, cp = i % CP;
        // Column 2cp: the low halves of the four keys; column 2cp+1: the high halves.
        const U2 even = {(w[k][0] & 0xffffu) | (w[k][1] << 16), (w[k][2] & 0xffffu) | (w[k][3] << 16)};
        const U2 odd = {(w[k][0] >> 16) | (w[k][1] & 0xffff0000u), (w[k][2] >> 16) | (w[k][3] & 0xffff0000u)};
        const bool odd_first = (i >> 3) & 1;
        *reinterpret_cast<U2*>(dst + fg_slot<W>(kk, 2 * cp + (odd_first ? 1 : 0)) * 4) = odd_first ? odd : even;
        *reinterpret_cast<U2*>(dst + fg_slot<W>(kk, 2 * cp + (odd_first ? 0 : 1)) * 4) = odd_first ? even : odd;
      }
    }
  }
}

// Q fragments (A row `arow` of each of this warp's slices) for head-dim
// columns [OFF, OFF+W), kept in registers when Q_IN_REGS.
template <int W, int OFF>
FG_DEVICE void fg_q_regs(const u16* sq, u32 (&qf)[M_SLICES][QF_STEPS][2], int warp, int arow) {
  if (Q_IN_REGS) {
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int ks = 0; ks < W / 4; ++ks) {
        const U2 a = fg_ld_slot<BLOCK_M>(sq, ks, (warp * M_SLICES + ms) * 16 + arow);
        qf[ms][Q_IN_REGS ? OFF / 4 + ks : 0][0] = a.x;
        qf[ms][Q_IN_REGS ? OFF / 4 + ks : 0][1] = a.y;
      }
  }
}

// S += Q[:, OFF:OFF+W] . K[:, OFF:OFF+W]^T for this warp's slices: per k step
// one A pair per slice (registers or one 8-byte read) and one B pair (key
// 16*nt + bcol) per n16 tile, shared by every slice.
template <int W, int OFF>
FG_DEVICE void fg_qk(const u16* sq, const u16* sk, const u32 (&qf)[M_SLICES][QF_STEPS][2],
                     float (&s)[M_SLICES][NT][8], int warp, int arow, int bcol) {
#pragma unroll
  for (int ks = 0; ks < W / 4; ++ks) {
    u32 a[M_SLICES][2];
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms) {
      if (Q_IN_REGS) {
        a[ms][0] = qf[ms][Q_IN_REGS ? OFF / 4 + ks : 0][0];
        a[ms][1] = qf[ms][Q_IN_REGS ? OFF / 4 + ks : 0][1];
      } else {
        const U2 x = fg_ld_slot<BLOCK_M>(sq, ks, (warp * M_SLICES + ms) * 16 + arow);
        a[ms][0] = x.x;
        a[ms][1] = x.y;
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const U2 x = fg_ld_slot<BLOCK_N>(sk, ks, nt * 16 + bcol);
      const u32 b[2] = {x.x, x.y};
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) fg_mma884(s[ms][nt], a[ms], b);
    }
  }
}

// P (the exponentiated S accumulators) as A fragments of P.V: pf[ms][kk] = this
// lane's A row (its accumulator row v1 = a1) at keys 4kk .. 4kk+3.
// Accumulator pair h[v1][v2] = keys 8qn + 2a1 + 4v2 + {0, 1} of row v1.
FG_DEVICE void fg_make_p(const float (&s)[M_SLICES][NT][8], u32 (&pf)[M_SLICES][PK][2], int a1, int qn) {
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      u32 h[2][2];
#pragma unroll
      for (int v1 = 0; v1 < 2; ++v1)
#pragma unroll
        for (int v2 = 0; v2 < 2; ++v2)
          h[v1][v2] = fg_pack_f16_sm70(s[ms][nt][2 * v1 + 4 * v2], s[ms][nt][2 * v1 + 4 * v2 + 1]);
      // lane ^ 2 (other a1, same row pair): keep row a1, send row 1 - a1, which
      // is the partner's row; receive its keys 8qn + 2(1 - a1) + 4v2 + {0, 1}.
      u32 f[2][2];  // [v2][half]: key step 2qn + v2 of this tile, keys +0,+1 | +2,+3
#pragma unroll
      for (int v2 = 0; v2 < 2; ++v2) {
        const u32 mine = a1 ? h[1][v2] : h[0][v2];
        const u32 other = __shfl_xor_sync(FULL, a1 ? h[0][v2] : h[1][v2], 2);
        f[v2][0] = a1 ? other : mine;
        f[v2][1] = a1 ? mine : other;
      }
      // lane ^ 8 (other qn, same row): its key steps 2(1 - qn) + v2.
      u32 g[2][2];
#pragma unroll
      for (int v2 = 0; v2 < 2; ++v2)
#pragma unroll
        for (int x = 0; x < 2; ++x) g[v2][x] = __shfl_xor_sync(FULL, f[v2][x], 8);
#pragma unroll
      for (int kq = 0; kq < 4; ++kq)
#pragma unroll
        for (int x = 0; x < 2; ++x) pf[ms][4 * nt + kq][x] = (kq >> 1) == qn ? f[kq & 1][x] : g[kq & 1][x];
    }
}

// O[:, OFF:OFF+W] += P . V[:, OFF:OFF+W]: per key step one B pair (column
// 16*dt + bcol) per n16 tile of the chunk, shared by every slice. An 8-wide
// chunk fills half an n16 tile: both quadpair columns read columns 0..7, and
// the qn = 1 half (columns past the chunk) is never stored.
// PM: FgPvPlain, or FgPvMask on a tile the causal mask cuts (fwd_block.cuh,
// "causal masks and P.V"): k4 steps no row of the warp sees are skipped, the
// V values of steps some rows see are cleaned of non-finite values (a B
// fragment holds keys 4kk, 4kk+1 in b[0] and 4kk+2, 4kk+3 in b[1]).
template <int W, int OFF, class PM>
FG_DEVICE void fg_pv(const u16* sv, const u32 (&pf)[M_SLICES][PK][2], float (&o)[M_SLICES][OT][8], int bcol, PM& pm) {
  constexpr int DT = W >= 16 ? W / 16 : 1;
  const int col = W >= 16 ? bcol : (bcol & 7);
#pragma unroll
  for (int kk = 0; kk < PK; ++kk) {
    bool check = false;
    if constexpr (PM::checked) {
      if (kk * 4 >= pm.skip_from) break;
      check = kk * 4 + 4 > pm.band_from;
      if constexpr (PM::window) {
        if (kk * 4 + 4 <= pm.skip_below) continue;
        check = check || kk * 4 < pm.band_below;
      }
    }
    u32 bad_lo = 0, bad_hi = 0;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      const U2 x = fg_ld_slot<W>(sv, kk, dt * 16 + col);
      u32 b[2] = {x.x, x.y};
      if (PM::checked && check) {
        fg_pv_clean<false>(b[0], bad_lo);
        fg_pv_clean<false>(b[1], bad_hi);
      }
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) fg_mma884(o[ms][OFF / 16 + dt], pf[ms][kk], b);
    }
    if constexpr (PM::checked) {
      if (check && (bad_lo | bad_hi)) {
        if constexpr (PM::window) {
          fg_pv_note(pm, kk >> 3, (kk & 7) * 4, bad_lo, bad_hi, 2);
        } else {
          const int key = (bad_lo & 0xffffu) ? 4 * kk : bad_lo ? 4 * kk + 1 : (bad_hi & 0xffffu) ? 4 * kk + 2 : 4 * kk + 3;
          pm.bad_key = min(pm.bad_key, key);
        }
      }
    }
  }
}

// Stage this warp's normalised O (columns [OFF, OFF+W)) in shared memory as
// row-major swizzled sub-tiles (fg_swz, common.cuh).
template <int W, int OFF>
FG_DEVICE void fg_stage_o(u16* so, const float (&o)[M_SLICES][OT][8], const float (&inv)[M_SLICES][2], int warp,
                          int rbase, int cbase);

// SPLIT: this warp's normalised O (columns [OFF, OFF+W)) as the split's fp32
// partial O [split, batch, seqlen_q, heads_q, head_dim_v] (fwd_m16_parts.cuh's
// fg_store_o_partial for this layout: element pairs at columns col, col + 1).
template <int W, int OFF>
FG_DEVICE void fg_store_o_partial(const FwdParams& p, const FgBlock& blk, const float (&o)[M_SLICES][OT][8],
                                  const float (&inv)[M_SLICES][2], int warp, int rbase, int cbase) {
  constexpr int DT = W >= 16 ? W / 16 : 1;
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int v1 = 0; v1 < 2; ++v1) {
      const int row = (warp * M_SLICES + ms) * 16 + rbase + 2 * v1;
      if (row < blk.rows_valid) {
        float* const dst = p.o_partial +
                           (fg_part_row(p, blk, fg_row_q(blk, row)) * p.heads_q + fg_row_h(blk, row)) * HEAD_DIM_V + OFF;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
          for (int v2 = 0; v2 < 2; ++v2) {
            const int col = dt * 16 + cbase + 4 * v2;
            if (W >= 16 || col < W) {
              const float* c = o[ms][OFF / 16 + dt];
              *reinterpret_cast<float2*>(dst + col) =
                  make_float2(c[2 * v1 + 4 * v2] * inv[ms][v1], c[2 * v1 + 4 * v2 + 1] * inv[ms][v1]);
            }
          }
      }
    }
}

template <int W, int OFF>
FG_DEVICE void fg_stage_o(u16* so, const float (&o)[M_SLICES][OT][8], const float (&inv)[M_SLICES][2], int warp,
                          int rbase, int cbase) {
  constexpr int DT = W >= 16 ? W / 16 : 1;
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int v1 = 0; v1 < 2; ++v1)
#pragma unroll
        for (int v2 = 0; v2 < 2; ++v2) {
          const int row = (warp * M_SLICES + ms) * 16 + rbase + 2 * v1;
          const int col = dt * 16 + cbase + 4 * v2;  // even: columns col, col + 1
          if (W >= 16 || col < W) {
            const float* c = o[ms][OFF / 16 + dt];
            *reinterpret_cast<u32*>(so + fg_swz<W>(row, col >> 3) + (col & 7)) =
                fg_pack_f16_sm70(c[2 * v1 + 4 * v2] * inv[ms][v1], c[2 * v1 + 4 * v2 + 1] * inv[ms][v1]);
          }
        }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) @@KERNEL_NAME@@(const FwdParams p) {
  extern __shared__ __align__(128) unsigned char fg_smem[];
  u16* const sQ = reinterpret_cast<u16*>(fg_smem);
  u16* const sK = sQ + Q_REGION;
  u16* const sV = sK + STAGES * BLOCK_N * HEAD_DIM;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Quadpair roles (see the top of this file).
  const int a0 = lane & 1, a1 = (lane >> 1) & 1, qm = (lane >> 2) & 1, qn = (lane >> 3) & 1, hb = lane >> 4;
  const int t = a0 + 2 * a1 + 4 * hb;
  const int arow = 8 * qm + t;                // A row (Q, P) within a 16-row slice
  const int bcol = 8 * qn + t;                // B column (K key, V column) within an n16 tile
  const int rbase = 8 * qm + a0 + 4 * hb;     // accumulator rows rbase + 2*v1
  const int cbase = 8 * qn + 2 * a1;          // accumulator columns cbase + v0 + 4*v2

  const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p, fg_lpt_order<MASK>(p, blockIdx.x));
  if (VARLEN && blk.rows_valid <= 0) return;  // past its sequence's rows (the whole block)
  const int seqlen_k = blk.seqlen_k, m_start = blk.m_start, rows_valid = blk.rows_valid;
  const int n_tiles = blk.n_tiles;
  const i64 h = blk.h;
  const u16* const q_ptr = blk.q;
  const u16* const k_ptr = blk.k;
  const u16* const v_ptr = blk.v;

  // ---- tile 0 (copied before Q; the __syncthreads after Q publishes both) ----
  if (n_tiles > 0) {
    const int n0 = 0;
    u16* sKs = sK;
    u16* sVs = sV;
    const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
    const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
    const int kv_valid = seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - n0;
@@LOAD_KV@@
  }

  // ---- Q: scale, round, stage (and keep in registers when small) ----
  const float scale = (float)p.softmax_scale;
@@LOAD_Q@@
  __syncthreads();
  u32 qf[M_SLICES][QF_STEPS][2];
@@Q_REGS@@

  float o[M_SLICES][OT][8];
  float row_max[M_SLICES][2], row_sum[M_SLICES][2];
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms) {
#pragma unroll
    for (int i = 0; i < OT; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[ms][i][e] = 0.f;
    row_max[ms][0] = row_max[ms][1] = fg_neg_inf();
    row_sum[ms][0] = row_sum[ms][1] = 0.f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    // Tile j is in buffer j % STAGES. STAGES >= 2: one barrier per tile (tile
    // j visible; every warp done with tile j-1, whose buffer may then take
    // tile j+1). STAGES == 1: the one buffer is refilled between two barriers.
    if (STAGES == 1) {
      if (j > 0) {
        const int n0 = j * BLOCK_N;
        u16* sKs = sK;
        u16* sVs = sV;
        const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
        const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
        const int kv_valid = seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - n0;
        __syncthreads();
@@LOAD_KV@@
        __syncthreads();
      }
    } else {
      if (j > 0) __syncthreads();
      const int jn = j + 1;
      if (jn < n_tiles) {
        const int n0 = jn * BLOCK_N;
        u16* sKs = sK + (jn % STAGES) * BLOCK_N * HEAD_DIM;
        u16* sVs = sV + (jn % STAGES) * BLOCK_N * HEAD_DIM_V;
        const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
        const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
        const int kv_valid = seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - n0;
@@LOAD_KV@@
      }
    }
    const u16* sKc = sK + (j % STAGES) * BLOCK_N * HEAD_DIM;
    const u16* sVc = sV + (j % STAGES) * BLOCK_N * HEAD_DIM_V;

    // ---- S = Qs . K^T ----
    float s[M_SLICES][NT][8];
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) s[ms][i][e] = 0.f;
@@QK@@

    // ---- bias, masks and the online softmax (fwd_rows.cuh) ----
    const int row0 = warp * M_SLICES * 16 + rbase;
    float corr_rows[M_SLICES][2];
    fg_bias_mask<FgFragM8>(p, blk, j, row0, cbase, s);
    fg_online_softmax<FgFragM8>(s, row_max, row_sum, corr_rows);
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int v1 = 0; v1 < 2; ++v1) {
        const float corr = corr_rows[ms][v1];
        // corr is exactly 1 when the row max did not move; skip the rescale
        // when that holds for every row of the warp.
        if (__any_sync(FULL, corr != 1.f)) {
#pragma unroll
          for (int i = 0; i < OT; ++i)
#pragma unroll
            for (int v2 = 0; v2 < 2; ++v2) {
              o[ms][i][2 * v1 + 4 * v2] *= corr;
              o[ms][i][2 * v1 + 4 * v2 + 1] *= corr;
            }
        }
      }

    // ---- O += P . V ----
    u32 pf[M_SLICES][PK][2];
    fg_make_p(s, pf, a1, qn);
    auto all_chunks = [&](auto& pm) {
@@PV@@
    };
    bool plain = true;
    if constexpr (WINDOW) {
      FgPvWindow<BLOCK_N> pm = fg_pv_window<BLOCK_N>(blk, j, warp * M_SLICES * 16, warp * M_SLICES * 16 + M_SLICES * 16 - 1);
      if (fg_pv_cut(pm)) {
        plain = false;
        all_chunks(pm);
        fg_pv_poison<FgFragM8>(pm, blk, j, row0, 0, row_sum);
      }
    } else if (MASK != 0) {
      FgPvMask pm = fg_pv_mask<BLOCK_N>(blk, j, warp * M_SLICES * 16, warp * M_SLICES * 16 + M_SLICES * 16 - 1);
      if (fg_pv_cut<BLOCK_N>(pm)) {
        plain = false;
        all_chunks(pm);
        fg_pv_poison<FgFragM8>(pm, blk, j, row0, row_sum);
      }
    }
    if (plain) {
      FgPvPlain none;
      all_chunks(none);
    }
  }

  // ---- epilogue: normalise, LSE, stage O through shared memory, 16-byte stores ----
  float inv[M_SLICES][2];
  fg_finish_rows<FgFragM8>(p, blk, warp * M_SLICES * 16 + rbase, a1 == 0 && qn == 0, row_max, row_sum, inv);
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
