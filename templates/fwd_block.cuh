// ---- pieces every forward kernel shares (templates/fwd_block.cuh) ------------
// Which rows and keys a work item covers: item (the block id, or a persistent
// block's item number) -> (m block, head, batch), 64-bit safe; causal masks reverse the m blocks so the
// longest rows start first and cut the key range to what the block's rows can
// see. And the 16-byte copy of staged O rows to global memory.
struct FgBlock {
  i64 b, h, kvh;       // batch, query head, K/V head (GQA: heads_q / heads_kv query heads per K/V head)
  int m_start;         // first query row of the block
  int rows_valid;      // query rows of the block inside seqlen_q
  int seqlen_q, seqlen_k;
  int diag;            // query i sees keys j <= i + diag (top-left 0; bottom-right seqlen_k - seqlen_q)
  int n_tiles;         // key tiles of BN keys the block visits
  const u16* q;        // Q row m_start of (b, h)
  const u16* k;        // K row 0 of (b, kvh)
  const u16* v;        // V row 0 of (b, kvh)
};

template <int BM, int BN, int MSK>
FG_DEVICE FgBlock fg_block(const FwdParams& p, i64 bid) {
  FgBlock r;
  i64 m_block = bid % p.num_m_blocks;
  const i64 bh = bid / p.num_m_blocks;
  r.h = bh % p.heads_q;
  r.b = bh / p.heads_q;
  if (MSK != 0) m_block = p.num_m_blocks - 1 - m_block;  // longest rows first
  r.kvh = r.h / (p.heads_q / p.heads_kv);
  r.m_start = (int)(m_block * BM);
  r.seqlen_q = (int)p.seqlen_q;
  r.seqlen_k = (int)p.seqlen_k;
  r.rows_valid = min(BM, r.seqlen_q - r.m_start);
  r.q = static_cast<const u16*>(p.q) + r.b * p.q_stride_batch + r.h * p.q_stride_head + (i64)r.m_start * p.q_stride_seq;
  r.k = static_cast<const u16*>(p.k) + r.b * p.k_stride_batch + r.kvh * p.k_stride_head;
  r.v = static_cast<const u16*>(p.v) + r.b * p.v_stride_batch + r.kvh * p.v_stride_head;
  r.diag = MSK == 2 ? r.seqlen_k - r.seqlen_q : 0;
  r.n_tiles = (r.seqlen_k + BN - 1) / BN;
  if (MSK != 0) {
    const int last_key = r.m_start + r.rows_valid - 1 + r.diag;  // last key any row of the block sees
    r.n_tiles = last_key < 0 ? 0 : min(r.n_tiles, last_key / BN + 1);
  }
  return r;
}

// ---- the online softmax's offsets (exp2 domain) ----------------------------
// A key tile's P is exp2 of each logit's distance from the row's running max m
// in log2 units, P = 2^((s - m) * log2 e), accumulated as O and the row sum l
// (FlashAttention's online softmax, Dao et al. 2022, sec. 3.1). The argument
// is one FFMA per logit, fma(s, a, -K), with a per-row offset (a, K) that is a
// function of m alone (fg_offset), in one of two frames:
//  - |m| <= FG_LOG2E_FRAME_MAX: a = LOG2E, K = m * LOG2E rounded up. Every
//    weight carries the same factor 2^c, c = m * LOG2E - K in (-ulp(K), 0],
//    so no weight exceeds 1 and the max's is at least 2^-32; it cancels in
//    O / l because the rescale between tiles is 2^(K_old - K_new) (the same
//    K's, exact differences) and LSE adds -c back (fg_lse).
//  - beyond (and at m = -inf): a = 1, K = m, i.e. P = 2^(s - m). Logits
//    there are fp32 values at least 16 apart unless equal (spacing 16 from
//    2^28 down to 2^27 and wider above), so every logit below the max has a
//    weight under e^-16 = 1.1e-7 of the max's in the exact softmax; P then
//    gives the ties weight 1 and the others under 2^-16 of it, and the result
//    is the exact one within 1.1e-7 relative, at every finite magnitude (a max
//    near the fp32 lowest value included).
// The frame is chosen per row without a branch; -inf is the only value that
// masks: a row that saw only -inf keys has P = 0 (the offset K = FLT_MAX in
// frame a = 1 keeps -inf - K = -inf and K - K = 0, never inf - inf).
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float FG_LOG2E_FRAME_MAX = 268435456.f;  // 2^28
constexpr float FG_F32_MAX = 3.40282347e+38f;

struct FgOffset {
  float a;      // LOG2E, or 1 in the wide frame
  float neg_k;  // -K
};

// The offset of a row whose max is m (-inf: no visible key yet). NaN (a NaN
// input the row sees) gives a NaN row, as allowed.
FG_DEVICE FgOffset fg_offset(float m) {
  const bool wide = !(fabsf(m) <= FG_LOG2E_FRAME_MAX);
  FgOffset o;
  o.a = wide ? 1.f : LOG2E;
  o.neg_k = wide ? -fmaxf(m, -FG_F32_MAX) : -__fmul_ru(m, LOG2E);
  return o;
}

// Unnormalised weight of logit s against the offset.
FG_DEVICE float fg_weight(float s, const FgOffset& o) { return fg_exp2(fmaf(s, o.a, o.neg_k)); }

// Factor that takes weights accumulated against the offset of the previous
// row max m_old to `o`: 2^(K_old - K) within a frame (exactly 1 when the max
// did not move); across frames the old max's weight in the new frame, which
// is below 2^-16 (the frames meet at |m| = 2^28, where a max that moved did so
// by at least 16). While the row had seen no key (m_old = -inf) O and l are 0
// and the factor is finite (at most 1).
FG_DEVICE float fg_corr(float m_old, const FgOffset& o) {
  const FgOffset p = fg_offset(m_old);
  return fg_exp2(p.a == o.a ? o.neg_k - p.neg_k : fmaf(m_old, o.a, o.neg_k));
}

// LSE = m + ln(l) + (K - m * a) ln 2 from the row max m and the sum l of its
// weights (the offset's factor added back); -inf for a row that saw no key
// (l = 0), NaN for a row whose l is NaN.
FG_DEVICE float fg_lse(float m, float l) {
  const FgOffset o = fg_offset(m);
  return l == 0.f ? fg_neg_inf() : m + (fg_log2(l) - fmaf(m, o.a, o.neg_k)) * LN2;
}

// ---- causal masks and P.V: where a non-finite V value may go --------------
// The mask sets a hidden key's weight to 0, but P.V still multiplies it by the
// key's V row, and 0 * NaN = 0 * inf = NaN: a NaN or inf in V at a key hidden
// from some rows of a tile would reach them. On the tiles the mask cuts, the
// kernels zero such V values where P.V reads them and give the rows that do
// see the key NaN (their row sum l becomes NaN): with causal masks a row that
// sees a key sees every lower one, so the lowest such key of a tile decides.
// Uncut tiles (every row sees every key, or none) are read as they are.

// 0xffff in each 16-bit half of `x` (two f16 or bf16 values) that is NaN or
// +-inf (exponent all ones), 0 in the others.
template <bool BF16>
FG_DEVICE u32 fg_nonfinite_halves(u32 x) {
  const u32 top = ((x & 0x7fff7fffu) + (BF16 ? 0x00800080u : 0x04000400u)) & 0x80008000u;
  return (top >> 15) * 0xffffu;
}

// Which steps of P.V for key tile j the causal mask cuts for a warp whose rows
// are block rows [row_lo, row_hi]; keys are tile-relative.
struct FgPvMask {
  static constexpr bool checked = true;
  int skip_from;  // steps starting here or later: no row of the warp sees them (skipped)
  int band_from;  // steps reaching past this key: some rows see them, some not (V checked)
  int bad_key;    // this lane's lowest key with a non-finite V value in a checked step (BN: none)
};
// The plain P.V of an uncut tile.
struct FgPvPlain {
  static constexpr bool checked = false;
};

template <int BN>
FG_DEVICE FgPvMask fg_pv_mask(const FgBlock& blk, int j, int row_lo, int row_hi) {
  const int first = blk.m_start + blk.diag + 1 - j * BN;  // + row: the first key that row does not see
  FgPvMask m;
  m.band_from = max(0, min(BN, first + row_lo));
  m.skip_from = max(0, min(BN, first + row_hi));
  m.bad_key = BN;
  return m;
}
// Whether the mask cuts the tile for these rows (warp-uniform).
FG_DEVICE bool fg_pv_cut(const FgPvMask& m) { return m.band_from < m.skip_from; }

// Zero the non-finite values of a V fragment register of a checked step;
// `bad` collects their halves.
template <bool BF16>
FG_DEVICE void fg_pv_clean(u32& b, u32& bad) {
  const u32 m = fg_nonfinite_halves<BF16>(b);
  b &= ~m;
  bad |= m;
}

// The lowest key with a non-finite V value any lane of the warp found in a
// cut tile (BN: none); one vote when there is none.
template <int BN>
FG_DEVICE int fg_pv_bad_key(const FgPvMask& m) {
  int k = m.bad_key;
  if (__any_sync(0xffffffffu, k < BN)) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) k = min(k, __shfl_xor_sync(0xffffffffu, k, d));
  }
  return k;
}

// Copy the staged O rows [0, valid_rows) of a block of ROWS rows (columns
// [OFF, OFF+W) of the head dim, a swizzled sub-tile, fg_swz<W> of common.cuh)
// to global memory with 16-byte stores by NTHREADS threads.
template <int W, int OFF, int ROWS, int NTHREADS>
FG_DEVICE void fg_store_o(u16* dst, const u16* so, i64 stride, int valid_rows, int tid) {
  constexpr int UPR = W / 8;
  constexpr int UNITS = ROWS * UPR;
#pragma unroll
  for (int it = 0; it < (UNITS + NTHREADS - 1) / NTHREADS; ++it) {
    const int u = it * NTHREADS + tid;
    if (UNITS % NTHREADS == 0 || u < UNITS) {
      const int row = u / UPR, unit = u % UPR;
      if (row < valid_rows)
        *reinterpret_cast<U4*>(dst + (i64)row * stride + OFF + unit * 8) =
            *reinterpret_cast<const U4*>(so + fg_swz<W>(row, unit));
    }
  }
}
