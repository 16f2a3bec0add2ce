// ---- pieces of the kernels whose accumulators have the m16n8 C layout ------
// (templates/fwd_m16_parts.cuh: the mma.sync m16n8k16/m16n8k8 kernel and the
// wgmma kernel; PTX ISA "Matrix Fragments for mma.m16n8k16" and "Register
// Fragment ... wgmma .m64nNk16": a warp's 16 rows x 8 columns of an f32
// accumulator tile are c0,c1 = (row g, columns 2t, 2t+1), c2,c3 = (row g+8, same
// columns), g = lane / 4, t = lane % 4.)
// Each template defines before this: THREADS, BLOCK_M, BLOCK_N, M_SLICES (16-row
// slices per warp), KEY_WARPS (warps that share rows and split each key tile,
// 1 but in the mma.sync fwd_split kernel), BN_W (keys of a tile per warp,
// BLOCK_N / KEY_WARPS), NT (n8 tiles of S per slice, BN_W / 8), OT (n8 tiles
// of O per slice), IS_BF16, ASYNC_COPY, MASK, BIAS_KIND, HAS_LSE.

// Warp `warp`'s first block row, and its first key of each key tile.
FG_DEVICE int fg_warp_row0(int warp) { return warp / KEY_WARPS * (M_SLICES * 16); }
FG_DEVICE int fg_warp_key0(int warp) { return warp % KEY_WARPS * BN_W; }

FG_DEVICE float fg_in_to_f32(u16 h) { return IS_BF16 ? fg_bf16_to_f32(h) : fg_f16_to_f32(h); }
FG_DEVICE u16 fg_f32_to_in(float f) { return IS_BF16 ? fg_f32_to_bf16(f) : fg_f32_to_f16(f); }
FG_DEVICE u32 fg_pack_in(float lo, float hi) {
  if constexpr (IS_BF16) return fg_pack_bf16(lo, hi);
  else if constexpr (ASYNC_COPY) return fg_pack_f16(lo, hi);  // cvt.rn.f16x2.f32 is sm_80+, like cp.async
  else return fg_pack_f16_sm70(lo, hi);
}

// Copy ROWS rows x W elements (columns [OFF, OFF+W) of the head dim) from
// global `src` (row stride `stride` elements) into the swizzled sub-tile
// `dst`; rows >= `valid_rows` are zero-filled. ASYNC_COPY: cp.async, 16 bytes
// each (src-size 0 zero-fills and reads no byte, PTX ISA "cp.async": the
// address given is then the row's own, past the valid rows, or, PG, a row of
// page 0); published by fg_copy_wait +
// a barrier. PG: row r is fg_page_row(pr, src, r) (a paged KV cache; `stride`
// is not read). Otherwise 16-byte loads (up to four in flight per thread) then
// shared stores, published by the next barrier. FULL (ASYNC_COPY only): every
// row is valid (valid_rows is not read), so no predicates and one pointer bump
// per copy.
template <int W, int OFF, int ROWS, bool FULL = false, bool PG = false>
FG_DEVICE void fg_copy_tile_async(u16* dst, const u16* src, i64 stride, int valid_rows, int tid,
                                  const FgPageRows& pr = FgPageRows{}) {
  constexpr int UPR = W / 8;
  constexpr int UNITS = ROWS * UPR;
  constexpr int RSTEP = THREADS / UPR;  // rows advanced per pass (UPR <= 32 divides THREADS)
  constexpr int PASSES = (UNITS + THREADS - 1) / THREADS;
  const int row0 = tid / UPR, unit = tid % UPR;
  const u16* g0 = src + (i64)row0 * stride + OFF + unit * 8;
  const i64 gstep = (i64)RSTEP * stride;
  // fg_swz's pattern repeats every 8 rows, so passes 8 rows apart lie a constant distance
  // apart: KB = 8 / RSTEP bases (one when RSTEP is a multiple of 8; e.g. two at W = 256 with 4
  // warps, 4 rows a pass), pass `it` at base it % KB plus a constant. Other steps (RSTEP 3, 5,
  // 6, 7: 3 or 6 warps) form each pass's address (KB = 0).
  constexpr int KB = RSTEP % 8 == 0 ? 1 : (8 % RSTEP == 0 ? 8 / RSTEP : 0);
  constexpr int NB = KB > 0 ? KB : 1;  // (the array's size; KB = 0 reads none of it)
  u32 sb[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) sb[k] = fg_smem_addr(dst) + 2 * fg_swz<W>(row0 + k * RSTEP, unit);
  auto smem_at = [&](int it, int row) {
    return KB > 0 ? sb[it % NB] + 2 * (it / NB) * (NB * RSTEP * W) : fg_smem_addr(dst) + 2 * fg_swz<W>(row, unit);
  };
  if constexpr (ASYNC_COPY && FULL) {
    const u16* g = g0;
#pragma unroll
    for (int it = 0; it < PASSES; ++it) {
      if (UNITS % THREADS == 0 || row0 + it * RSTEP < ROWS) fg_cp_async16_full(smem_at(it, row0 + it * RSTEP), g);
      g += gstep;
    }
  } else if constexpr (ASYNC_COPY) {
    // PG: every pass's page number is read before the first copy is issued. The copies
    // are asm volatile with a memory clobber, so a table read between two of them would
    // wait out its latency alone, once per pass. Table entries and slots count from the
    // tile's first page (`first`; the first key's slot `kslot`) in 32-bit unsigned
    // arithmetic, and a row's offset is two unsigned 64-bit products (the same bits as
    // the signed ones, without sign extensions).
    const u32 mask = (1u << pr.shift) - 1u, kslot = (u32)pr.key & mask;
    const int* const first = pr.pages + (pr.key >> pr.shift);
    const u16* const base = src + OFF + unit * 8;
    // PG, pages of RSTEP to ROWS / 2 rows and a tile that starts a page (kslot 0: a tile's first
    // key is a multiple of BLOCK_N unless a split or sequence starts elsewhere): each pass's
    // rows lie in one page, P = page_size / RSTEP passes to a page (pass it: entry it / P, slot
    // (it % P) * RSTEP + row0). The table is read once per page, and a pass that continues a
    // page steps from the previous pass's address by RSTEP slots, one 64-bit add, where the
    // general path below reads an entry and forms two 64-bit products per pass (at page 16 the
    // decode kernel issued 1.73x the instructions of page 64; bench/NOTES.md session 20).
    // P = 1 << pshift is a run-time value, so one copy of the loop serves every page size (a
    // switch on the shift over compile-time P made up to five copies a load site: the decode
    // kernel grew from 4952 SASS instructions to 6928, and its page-64 rows, which never enter
    // this path, ran 3 % slower).
    constexpr int LOG2_RSTEP = RSTEP >= 256 ? 8 : RSTEP >= 128 ? 7 : RSTEP >= 64 ? 6 : RSTEP >= 32 ? 5 : RSTEP >= 16 ? 4
                             : RSTEP >= 8 ? 3 : RSTEP >= 4 ? 2 : RSTEP >= 2 ? 1 : 0;
    // (the path needs RSTEP a power of two and at most 32 passes, an entry held per pass at
    // page RSTEP: other tiles, e.g. 3 or 6 warps, or one warp with 256 columns, keep the
    // general path)
    constexpr bool RUNS_OK = PG && (1 << LOG2_RSTEP) == RSTEP && PASSES <= 32;
    const int pshift = pr.shift - LOG2_RSTEP;
    // The path also needs a page's and RSTEP slots' byte strides below 2^32 (a page of 16 rows
    // of 8 heads x 128 columns is 2^15 bytes; larger strides keep the general path): a page's
    // first address is then one 32 x 32-bit multiply-add onto the thread's base address.
    const bool runs = RUNS_OK && kslot == 0u && pshift >= 0 && (1 << pshift) < PASSES &&
                      (unsigned long long)(pr.stride_page | RSTEP * pr.stride_seq) < (1ull << 31);
    if constexpr (RUNS_OK) {
      if (runs) {
        // This thread's rows are row0 + r, r < left valid; page q holds rows from q << shift, so
        // entry q is read (e[q], a constant offset from `first`) for q < npg, the pages that hold
        // one of them (npg <= 0: none). An entry left unread is 0: a pass in such a page addresses
        // page 0 at slot row0 + (it % P) * RSTEP (src-size 0; the address is valid, as src's is).
        const int left = min(valid_rows, ROWS) - row0;
        const int npg = (left + (int)mask) >> pr.shift;
        u32 e[PASSES];
#pragma unroll
        for (int q = 0; q < PASSES; ++q) e[q] = q < npg ? (u32)first[q] : 0u;
        typedef unsigned long long addr_t;
        const addr_t thr = reinterpret_cast<addr_t>(base) + 2ull * (u32)row0 * (addr_t)pr.stride_seq;
        const u32 page_bytes = 2u * (u32)pr.stride_page, step_bytes = 2u * RSTEP * (u32)pr.stride_seq;
        addr_t g = thr;
#pragma unroll
        for (int it = 0; it < PASSES; ++it) {
          const int row = row0 + it * RSTEP;
          // Pass it opens a page when P divides it, i.e. P is at most its lowest set bit `low`
          // (one compare per distinct bit, not per pass). Its entry e[it >> pshift] is a select
          // over the shifts that open it: e indexed at run time would be local memory. (ptxas
          // forms both addresses and selects one; written as predicated PTX, or as a multiply-add
          // a pass, the load issued no fewer instructions.)
          const int low = it & -it;
          u32 pg = e[it];
#pragma unroll
          for (int s = 1; s < 5; ++s)
            if ((1 << s) <= low && pshift == s) pg = e[it >> s];
          if (it == 0 || (1 << pshift) <= low) g = thr + (addr_t)pg * page_bytes;
          else g += step_bytes;
          if (UNITS % THREADS == 0 || row < ROWS)
            fg_cp_async16(smem_at(it, row), reinterpret_cast<const void*>(g), it * RSTEP < left ? 16 : 0);
        }
      }
    }
    if (!runs) {
      // Dense rows: one 64-bit byte address per pass, a row past valid_rows keeps its
      // (unread) address and copies no byte (src-size 0).
      // (a row's validity as it * RSTEP < left, a compare with a constant: as row < valid_rows,
      // ptxas held row0 + it * RSTEP for every pass in a register through the key loop)
      const unsigned long long gb0 = reinterpret_cast<unsigned long long>(g0), gstep_bytes = 2ull * (unsigned long long)gstep;
      const int left = valid_rows - row0;
      u32 page[PASSES];
#pragma unroll
      for (int it = 0; it < PASSES; ++it) {
        const int row = row0 + it * RSTEP;
        page[it] = PG && (UNITS % THREADS == 0 || row < ROWS) && it * RSTEP < left ? (u32)first[(kslot + row) >> pr.shift] : 0u;
      }
#pragma unroll
      for (int it = 0; it < PASSES; ++it) {
        const int row = row0 + it * RSTEP;
        if (UNITS % THREADS == 0 || row < ROWS) {
          const bool ok = it * RSTEP < left;
          if constexpr (PG) {
            fg_cp_async16(smem_at(it, row),
                          ok ? base + (i64)((unsigned long long)page[it] * (unsigned long long)pr.stride_page +
                                            (unsigned long long)((kslot + row) & mask) * (unsigned long long)pr.stride_seq)
                             : src + OFF,
                          ok ? 16 : 0);
          } else {
            fg_cp_async16(smem_at(it, row), reinterpret_cast<const void*>(gb0 + (unsigned long long)it * gstep_bytes),
                          ok ? 16 : 0);
          }
        }
      }
    }
    if constexpr (PG) {
      // The next tile's table entries (those of keys ROWS on, which the next call for this
      // tensor reads before its copies): one prefetch into L1 per 128-byte line, by the first
      // threads, so that read is an L1 hit instead of an L2 latency with no copy of its own in
      // flight to cover it (PTX ISA "prefetch"). Only entries of keys that exist.
      if (valid_rows > ROWS) {
        typedef unsigned long long addr_t;
        const addr_t lo = reinterpret_cast<addr_t>(first + ((kslot + ROWS) >> pr.shift));
        const addr_t hi = reinterpret_cast<addr_t>(first + ((kslot + min(2 * ROWS, valid_rows) - 1) >> pr.shift));
        const addr_t line = (lo & ~addr_t{127}) + 128ull * (addr_t)tid;
        if (line <= hi) asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
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
          v[k] = *reinterpret_cast<const U4*>(PG ? fg_page_row(pr, src, row) + OFF + unit * 8 : g0 + it * gstep);
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

// Q rows [0, valid_rows) of this block, columns [OFF, OFF+W): fetch() issues
// the 16-byte global loads into registers, store() multiplies by softmax_scale
// in f32, rounds to the input dtype (DESIGN.md: Qs = round(Q * scale)) and
// stores swizzled (rows >= valid_rows become zeros). The emitters fetch every
// chunk before storing any: a shared store between two global loads keeps
// them in program order (the compiler cannot rule out aliasing), which made
// the block wait one memory round trip per load (8 for D = 128, BLOCK_M = 64).
// ROWS rows by NTHREADS threads (the wgmma kernel: each warpgroup its own 64).
template <int W, int OFF, int ROWS = BLOCK_M, int NTHREADS = THREADS>
struct FgQChunk {
  static constexpr int UPR = W / 8;
  static constexpr int UNITS = ROWS * UPR;
  static constexpr int PASSES = (UNITS + NTHREADS - 1) / NTHREADS;
  U4 v[PASSES];
  // Row r of the block at src + fg_row_offset(r, stride_seq, stride_head).
  FG_DEVICE void fetch(const u16* src, i64 stride_seq, i64 stride_head, int valid_rows, int tid) {
#pragma unroll
    for (int it = 0; it < PASSES; ++it) {
      const int u = it * NTHREADS + tid, row = u / UPR, unit = u % UPR;
      v[it] = U4{0u, 0u, 0u, 0u};
      if ((UNITS % NTHREADS == 0 || u < UNITS) && row < valid_rows)
        v[it] = *reinterpret_cast<const U4*>(src + fg_row_offset(row, stride_seq, stride_head) + OFF + unit * 8);
    }
  }
  FG_DEVICE void store(u16* dst, float scale, int tid) {
#pragma unroll
    for (int it = 0; it < PASSES; ++it) {
      const int u = it * NTHREADS + tid;
      if (UNITS % NTHREADS == 0 || u < UNITS) {
        u32* w = &v[it].x;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float lo = fg_in_to_f32((u16)(w[e] & 0xffffu)) * scale;
          const float hi = fg_in_to_f32((u16)(w[e] >> 16)) * scale;
          w[e] = (u32)fg_f32_to_in(lo) | ((u32)fg_f32_to_in(hi) << 16);
        }
        *reinterpret_cast<U4*>(dst + fg_swz<W>(u / UPR, u % UPR)) = v[it];
      }
    }
  }
};

// SPLIT: this warp's normalised O fragments (columns [OFF, OFF+W)) as the
// split's fp32 partial O [split, batch, seqlen_q, heads_q, head_dim_v]
// (contiguous; the combine family merges the splits), 8-byte stores straight
// from the registers (a lane's two columns; a quad writes 32 bytes of a row).
template <int W, int OFF>
FG_DEVICE void fg_store_o_partial(const FwdParams& p, const FgBlock& blk, const float (&o)[M_SLICES][OT][4],
                                  const float (&inv)[M_SLICES][2], int warp, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = fg_warp_row0(warp) + ms * 16 + g + 8 * r;
      if (row < blk.rows_valid) {
        const int qi = fg_row_q(blk, row);
        float* const dst = p.o_partial +
                           (fg_part_row(p, blk, qi) * p.heads_q + fg_row_h(blk, row)) * HEAD_DIM_V + OFF + 2 * t;
#pragma unroll
        for (int nt = 0; nt < W / 8; ++nt) {
          const float* c = o[ms][OFF / 8 + nt];
          *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(c[2 * r] * inv[ms][r], c[2 * r + 1] * inv[ms][r]);
        }
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
    const int row0 = fg_warp_row0(warp) + ms * 16 + g;
#pragma unroll
    for (int nt = 0; nt < W / 8; ++nt) {
      const float* c = o[ms][OFF / 8 + nt];
      const int off = 2 * t;
      *reinterpret_cast<u32*>(so + fg_swz<W>(row0, nt) + off) = fg_pack_in(c[0] * inv[ms][0], c[1] * inv[ms][0]);
      *reinterpret_cast<u32*>(so + fg_swz<W>(row0 + 8, nt) + off) = fg_pack_in(c[2] * inv[ms][1], c[3] * inv[ms][1]);
    }
  }
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

// ldmatrix.trans offsets of the V matrices of one k16 step (transposed):
// (keys +0..7, dv lo), (keys +8..15, dv lo), (keys +0..7, dv hi), (keys +8..15, dv hi).
template <int W>
FG_DEVICE FgLdsmOffsets<W> fg_pv_offsets(int lane) {
  const int mi = lane >> 3;
  return FgLdsmOffsets<W>((lane & 7) + ((mi & 1) << 3), W >= 16 ? mi >> 1 : 0);
}

// k16 step kk of O[:, OFF:OFF+W] += P.V with mma.sync m16n8k16: A fragments `a`
// of this warp's slices, V fragments read with ldmatrix.trans from the
// swizzled sub-tile at shared address `base` (fg_swz<W>). CHECK (a step some
// rows of the warp see and others not, fwd_block.cuh "causal masks and P.V"):
// non-finite V values are zeroed and the lowest such key lowers pm.bad_key
// (B fragment: b0, b2 hold keys 2t, 2t+1 of the step, b1, b3 keys 2t+8, 2t+9).
template <int W, int OFF, bool CHECK, class PM>
FG_DEVICE void fg_pv_step(u32 base, const FgLdsmOffsets<W>& vo, int kk, const u32 (&a)[M_SLICES][4],
                          float (&o)[M_SLICES][OT][4], int lane, PM& pm) {
  u32 bad_lo = 0, bad_hi = 0;
  if (W >= 16) {
#pragma unroll
    for (int dp = 0; dp < W / 16; ++dp) {
      u32 b0, b1, b2, b3;
      fg_ldsm_x4_trans(base + 2 * vo.at(kk * 16, dp), b0, b1, b2, b3);
      if (CHECK) {
        fg_pv_clean<IS_BF16>(b0, bad_lo);
        fg_pv_clean<IS_BF16>(b2, bad_lo);
        fg_pv_clean<IS_BF16>(b1, bad_hi);
        fg_pv_clean<IS_BF16>(b3, bad_hi);
      }
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms) {
        fg_mma16816(o[ms][OFF / 8 + 2 * dp], a[ms], b0, b1);
        fg_mma16816(o[ms][OFF / 8 + 2 * dp + 1], a[ms], b2, b3);
      }
    }
  } else {
    u32 b0, b1;
    fg_ldsm_x2_trans(base + 2 * vo.at(kk * 16, 0), b0, b1);
    if (CHECK) {
      fg_pv_clean<IS_BF16>(b0, bad_lo);
      fg_pv_clean<IS_BF16>(b1, bad_hi);
    }
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms) fg_mma16816(o[ms][OFF / 8], a[ms], b0, b1);
  }
  if constexpr (CHECK) {
    if (bad_lo | bad_hi) {
      const int k0 = kk * 16 + 2 * (lane & 3);
      if constexpr (PM::window) {
        fg_pv_note(pm, kk >> 1, k0 & 31, bad_lo, bad_hi, 8);  // (a step's 16 keys lie in one word)
      } else {
        const int key = (bad_lo & 0xffffu) ? k0 : bad_lo ? k0 + 1 : (bad_hi & 0xffffu) ? k0 + 8 : k0 + 9;
        pm.bad_key = min(pm.bad_key, key);
      }
    }
  }
}

// O rows *= corr; skipped for a row pair when corr is exactly 1 on every lane
// of the warp (the row maxima did not move).
FG_DEVICE void fg_rescale_o(float (&o)[M_SLICES][OT][4], const float (&corr)[M_SLICES][2]) {
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (__any_sync(0xffffffffu, corr[ms][r] != 1.f)) {
#pragma unroll
        for (int i = 0; i < OT; ++i) {
          o[ms][i][2 * r] *= corr[ms][r];
          o[ms][i][2 * r + 1] *= corr[ms][r];
        }
      }
}

// Bias, masks and the online softmax of key tile j, the rows' LSE and
// normalisation, for this warp's slices in the m16n8 C layout (rows
// (warp * M_SLICES + ms) * 16 + g (+ 8), columns 2t, 2t+1 of each n8 tile):
// fwd_rows.cuh.
struct FgFragM16 {
  static constexpr int NW = 8, E = 2, ROW_STEP = 8, X0 = 1, X1 = 2;
  static FG_DEVICE constexpr int reg(int r, int e) { return 2 * r + e; }
  static FG_DEVICE constexpr int col(int e) { return e; }
};
FG_DEVICE void fg_softmax(const FwdParams& p, const FgBlock& blk, int j, int warp, int g, int t,
                          float (&s)[M_SLICES][NT][4], float (&row_max)[M_SLICES][2],
                          float (&row_sum)[M_SLICES][2], float (&corr)[M_SLICES][2]) {
  fg_bias_mask<FgFragM16>(p, blk, j, fg_warp_row0(warp) + g, fg_warp_key0(warp) + 2 * t, s);
  fg_online_softmax<FgFragM16>(s, row_max, row_sum, corr);
}
FG_DEVICE void fg_finish_rows(const FwdParams& p, const FgBlock& blk, int warp, int g, int t,
                              const float (&row_max)[M_SLICES][2], const float (&row_sum)[M_SLICES][2],
                              float (&inv)[M_SLICES][2]) {
  fg_finish_rows<FgFragM16>(p, blk, fg_warp_row0(warp) + g, t == 0, row_max, row_sum, inv);
}
// The causal mask's cut of key tile j for this warp's rows, in the warp's keys
// (fg_pv_mask's tile-relative keys less fg_warp_key0, within [0, BN_W]).
FG_DEVICE FgPvMask fg_pv_mask_warp(const FgBlock& blk, int j, int warp) {
  const int row0 = fg_warp_row0(warp);
  FgPvMask m = fg_pv_mask<BLOCK_N>(blk, j, row0, row0 + M_SLICES * 16 - 1);
  if (KEY_WARPS > 1) {
    const int k0 = fg_warp_key0(warp);
    m.band_from = max(0, min(BN_W, m.band_from - k0));
    m.skip_from = max(0, min(BN_W, m.skip_from - k0));
    m.bad_key = BN_W;
  }
  return m;
}
// WINDOW: the window's cut of key tile j for this warp's rows and keys.
FG_DEVICE FgPvWindow<BN_W> fg_pv_window_warp(const FgBlock& blk, int j, int warp) {
  const int row0 = fg_warp_row0(warp), k0 = fg_warp_key0(warp);
  const FgPvWindow<BLOCK_N> t = fg_pv_window<BLOCK_N>(blk, j, row0, row0 + M_SLICES * 16 - 1);
  FgPvWindow<BN_W> m;
  m.band_from = max(0, min(BN_W, t.band_from - k0));
  m.skip_from = max(0, min(BN_W, t.skip_from - k0));
  m.skip_below = max(0, min(BN_W, t.skip_below - k0));
  m.band_below = max(0, min(BN_W, t.band_below - k0));
#pragma unroll
  for (int w = 0; w < FgPvWindow<BN_W>::WORDS; ++w) m.bad[w] = 0u;
  return m;
}
FG_DEVICE void fg_pv_poison(FgPvWindow<BN_W>& m, const FgBlock& blk, int j, int warp, int g,
                            float (&row_sum)[M_SLICES][2]) {
  fg_pv_poison<FgFragM16>(m, blk, j, fg_warp_row0(warp) + g, fg_warp_key0(warp), row_sum);
}
FG_DEVICE void fg_pv_poison(const FgPvMask& m, const FgBlock& blk, int j, int warp, int g,
                            float (&row_sum)[M_SLICES][2]) {
  if (KEY_WARPS == 1) {
    fg_pv_poison<FgFragM16>(m, blk, j, fg_warp_row0(warp) + g, row_sum);
  } else {
    const int k = fg_pv_bad_key<BN_W>(m);
    if (k < BN_W) fg_poison_rows<FgFragM16>(blk, j, fg_warp_row0(warp) + g, fg_warp_key0(warp) + k, row_sum);
  }
}

