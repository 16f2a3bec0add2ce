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
// form the exp2 argument, both exact at every finite fp32 logit:
//  - FFMA (one instruction): fma(s, LOG2E, -m2) with m2 = round(m * LOG2E).
//    The weights are then 2^((s - m) * LOG2E + res), res = m * LOG2E - m2
//    (exact in fp32: the rounding error of a product, PTX ISA fma.rn), a
//    common factor that the factor between tiles and the LSE carry and that
//    the normalisation divides out. Used while |m| <= FG_FFMA_MAX_LOGIT, where
//    |res| <= 2^-7; beyond that m2 overflows or res reaches the exponent's range
//    (logits around 1e11 gave exp2(+-4096) = inf or 0).
//  - SUB (two instructions): (s - m) * LOG2E, for the rows of a warp where
//    some row's max exceeds that bound (e.g. a bias near the fp32 lowest value).
// -inf is the only value that masks: a row whose keys so far are all -inf uses
// the offset m = 0, so exp2(-inf) = 0 and no inf - inf appears.
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float FG_FFMA_MAX_LOGIT = 65536.f;

template <bool B>
struct FgBool {
  static constexpr bool value = B;
};

struct FgOffset {
  float m;       // the row max (natural units); 0 while the row has seen no key
  float neg_m2;  // FFMA: -round(m * LOG2E)
  float res;     // FFMA: m * LOG2E - round(m * LOG2E) (exact); SUB: 0
};

// Whether a row with running max `mx` may use the FFMA form.
FG_DEVICE bool fg_ffma_exact(float mx) { return mx == fg_neg_inf() || fabsf(mx) <= FG_FFMA_MAX_LOGIT; }

template <bool FFMA>
FG_DEVICE FgOffset fg_offset(float mx) {
  FgOffset o;
  o.m = mx == fg_neg_inf() ? 0.f : mx;
  if (FFMA) {
    const float m2 = o.m * LOG2E;
    o.neg_m2 = -m2;
    o.res = fmaf(o.m, LOG2E, -m2);
  } else {
    o.neg_m2 = 0.f;
    o.res = 0.f;
  }
  return o;
}

// Unnormalised weight of logit s against the offset.
template <bool FFMA>
FG_DEVICE float fg_weight(float s, const FgOffset& o) {
  return FFMA ? fg_exp2(fmaf(s, LOG2E, o.neg_m2)) : fg_exp2((s - o.m) * LOG2E);
}

// Factor that takes weights accumulated against (row max m_old, residual
// res_old) to the offset `o`: 2^((m_old - m) * LOG2E + res - res_old); 0 while
// the row had seen no key (m_old = -inf), exactly 1 when nothing moved.
FG_DEVICE float fg_corr(float m_old, float res_old, const FgOffset& o) {
  return fg_exp2(fmaf(m_old - o.m, LOG2E, o.res - res_old));
}

// LSE = ln(sum of exp(s - m)) + m from the accumulated sum l of weights that
// carry the residual res; -inf for a row that saw no key (l = 0).
FG_DEVICE float fg_lse(float m, float res, float l) {
  return l > 0.f ? m + (fg_log2(l) - res) * LN2 : fg_neg_inf();
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
