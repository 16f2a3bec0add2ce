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
// (FlashAttention's online softmax, Dao et al. 2022, sec. 3.1). Two ways to
// form the exp2 argument:
//  - FFMA (one instruction per logit): fma(s, LOG2E, -m2), m2 = round(m * LOG2E).
//    Every weight then carries the factor 2^res, res = m * LOG2E - m2, which
//    the normalisation divides out within a tile but not between tiles with
//    different m; |res| <= ulp(m2) / 2 <= 2^-15 while |m| <= FG_FFMA_MAX_LOGIT
//    (a relative error below 3e-5, under the fp16 output's 2^-11). Beyond, m2
//    and res grow with |m|: logits near 1e11 gave exp2(+-4096) = inf or 0 and
//    a max near the fp32 lowest value made m2 overflow (inf - inf = NaN).
//  - SUB (two instructions): (s - m) * LOG2E, exact at every finite logit,
//    for a warp where some row's max is beyond that bound.
// -inf is the only value that masks: a row whose keys so far are all -inf uses
// the offset m = 0, so exp2(-inf) = 0 and no inf - inf appears.
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float FG_FFMA_MAX_LOGIT = 512.f;

template <bool B>
struct FgBool {
  static constexpr bool value = B;
};

struct FgOffset {
  float m;       // the row max (natural units); 0 while the row has seen no key
  float neg_m2;  // FFMA: -round(m * LOG2E)
};

// Whether a row may use the FFMA form, from one lane's maximum `mx` over its
// own columns (and the running max): when every lane's is within
// +-FG_FFMA_MAX_LOGIT, so is the row's (their maximum). Conservative: a lane
// below -FG_FFMA_MAX_LOGIT (or at -inf: nothing visible yet) sends its warp to
// the SUB form, which handles such rows exactly; one FSETP per row.
FG_DEVICE bool fg_ffma_exact(float mx) { return fabsf(mx) <= FG_FFMA_MAX_LOGIT; }

template <bool FFMA>
FG_DEVICE FgOffset fg_offset(float mx) {
  FgOffset o;
  o.m = mx == fg_neg_inf() ? 0.f : mx;
  o.neg_m2 = FFMA ? -o.m * LOG2E : 0.f;
  return o;
}

// Unnormalised weight of logit s against the offset.
template <bool FFMA>
FG_DEVICE float fg_weight(float s, const FgOffset& o) {
  return FFMA ? fg_exp2(fmaf(s, LOG2E, o.neg_m2)) : fg_exp2((s - o.m) * LOG2E);
}

// Factor that takes weights accumulated against the previous row max m_old
// to the offset `o`: 2^((m_old - m) * LOG2E); 0 while the row had seen no key
// (m_old = -inf), exactly 1 when the max did not move.
template <bool FFMA>
FG_DEVICE float fg_corr(float m_old, const FgOffset& o) {
  return FFMA ? fg_exp2(fmaf(m_old, LOG2E, o.neg_m2)) : fg_exp2((m_old - o.m) * LOG2E);
}

// LSE = m + ln(l) from the row max m and the sum l of its weights; -inf for a
// row that saw no key (l = 0).
FG_DEVICE float fg_lse(float m, float l) { return l > 0.f ? m + fg_log2(l) * LN2 : fg_neg_inf(); }

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
