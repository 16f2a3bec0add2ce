// ---- pieces every forward kernel shares (templates/fwd_block.cuh) ------------
// Which rows and keys a work item covers: item (the block id, through
// fg_lpt_order for a masked grid, or a persistent block's item number) -> (m block, head, batch), 64-bit safe; causal masks reverse the m blocks so the
// longest rows start first and cut the key range to what the block's rows can
// see. And the 16-byte copy of staged O rows to global memory.
// The split-KV forward (SPLIT, fwd_split) also splits the key range over
// p.num_splits items of p.tiles_per_split key tiles each, and packs PACK query
// heads of a GQA group as rows of one block: block row r is query position
// (m_start + r) / PACK of head h + (m_start + r) % PACK (PACK divides BLOCK_M,
// so a block starts at a query position).
// Window masks (MASK 3, 4: WINDOW) bound each row's keys on both sides: query i
// sees keys j with i + diag_lo <= j <= i + diag, off = 0 (top-left) or seqlen_k -
// seqlen_q (bottom-right), diag = off + window_right, diag_lo = off - window_left,
// each clamped so that an unbounded side (-1) or one past the keys covers every
// key without overflowing 32 bits (check_problem: seqlen_q + seqlen_k < 2^31).
// The upper side then works exactly as a causal mask's (diag), the lower one is
// WINDOW's own (diag_lo), and a block visits only the key tiles its rows see,
// from key0 (KEYS_FROM_KEY0).
// Packed batches (VARLEN): sequence b is query rows q_off = p.cu_seqlens_q[b] ..
// and keys k_off = p.cu_seqlens_k[b] .. of the packed Q/O and K/V (their
// stride_batch is 0), with its own seqlen_q and seqlen_k (seqused_k when set),
// each cut to the host's bound (p.seqlen_q, p.seqlen_k: max_seqlen_q / _k, which
// size the grid); a block past its sequence's rows has rows_valid <= 0 and no
// key tile, and the kernels skip it. Masks align per sequence.
// A paged KV cache (PAGED): key j of sequence b is slot j % 2^page_shift of page
// pages[j >> page_shift] (pages = p.page_table + b * p.page_table_stride), page n
// at n * stride_batch of K/V; blk.k / blk.v are then the K/V head's base (page
// 0, slot 0) and the loaders find each key's row (fg_paged_row, FgPageRows);
// seqused_k[b] (else p.seqlen_k) keys count.
// (WINDOW is emitted before this part, with SPLIT.)
constexpr bool KEYS_FROM_KEY0 = SPLIT || WINDOW;  // a block's keys start at key0, not at 0

struct FgBlock {
  i64 b, h, kvh;       // batch, query head (PACK > 1: the group's first), K/V head (GQA: heads_q / heads_kv per K/V head)
  int m_start;         // first row of the block (PACK > 1: of the packed rows, seqlen_q * PACK of them)
  int rows_valid;      // rows of the block inside the problem
  int seqlen_q, seqlen_k;  // of the item's sequence (VARLEN: its own; else the problem's)
  i64 q_off, k_off;    // VARLEN: packed row of the sequence's first query / key (else 0)
  const int* pages;    // PAGED: the sequence's row of the page table
  int diag;            // query i sees keys j <= i + diag (top-left 0; bottom-right seqlen_k - seqlen_q; WINDOW: + window_right)
  int diag_lo;         // WINDOW: query i sees keys j >= i + diag_lo
  int split;           // SPLIT: the key split; its first key is key0
  int key0;            // first key of the item's range (0 without KEYS_FROM_KEY0; read as KEYS_FROM_KEY0 ? key0 : 0,
                       // a constant for the other kernels: a helper function there changed how NVVM unrolled
                       // the m8n8k4 d256 kernels, which then spilled)
  int n_tiles;         // key tiles of BN keys the block visits, from key0
  const u16* q;        // Q row m_start of (b, h)
  const u16* k;        // K row key0 of (b, kvh)
  const u16* v;        // V row key0 of (b, kvh)
};

// Query position and head of row `a` of the (packed) problem, and of block row r.
FG_DEVICE int fg_abs_row_q(int a) { return a / PACK; }
FG_DEVICE i64 fg_abs_row_h(const FgBlock& blk, int a) { return blk.h + (PACK == 1 ? 0 : a % PACK); }
FG_DEVICE int fg_row_q(const FgBlock& blk, int r) { return fg_abs_row_q(blk.m_start + r); }
FG_DEVICE i64 fg_row_h(const FgBlock& blk, int r) { return fg_abs_row_h(blk, blk.m_start + r); }
// Offset (elements) of block row r from row 0 in a [.., seq, head, ..] view.
FG_DEVICE i64 fg_row_offset(int r, i64 stride_seq, i64 stride_head) {
  return PACK == 1 ? (i64)r * stride_seq : (i64)(r / PACK) * stride_seq + (i64)(r % PACK) * stride_head;
}

template <int BM, int BN, int MSK>
FG_DEVICE FgBlock fg_block(const FwdParams& p, i64 bid) {
  FgBlock r;
  r.split = 0;
  if (SPLIT) {
    r.split = (int)(bid % p.num_splits);
    bid /= p.num_splits;
  }
  i64 m_block = bid % p.num_m_blocks;
  const i64 bh = bid / p.num_m_blocks;
  const i64 groups = p.heads_q / PACK;
  r.h = bh % groups * PACK;
  r.b = bh / groups;
  if (MSK != 0) m_block = p.num_m_blocks - 1 - m_block;  // longest rows first
  r.kvh = r.h / (p.heads_q / p.heads_kv);
  r.m_start = (int)(m_block * BM);
  r.seqlen_q = (int)p.seqlen_q;
  r.seqlen_k = (int)p.seqlen_k;
  r.q_off = 0;
  r.k_off = 0;
  r.pages = nullptr;
  if (VARLEN) {
    const int q0 = p.cu_seqlens_q[r.b];
    r.seqlen_q = min(max(p.cu_seqlens_q[r.b + 1] - q0, 0), r.seqlen_q);
    r.q_off = q0;
  }
  if (VARLEN && !PAGED) {
    const int k0 = p.cu_seqlens_k[r.b];
    const int used_k = p.seqused_k != nullptr ? p.seqused_k[r.b] : p.cu_seqlens_k[r.b + 1] - k0;
    r.seqlen_k = min(max(used_k, 0), r.seqlen_k);
    r.k_off = k0;
  }
  if (PAGED) {
    if (p.seqused_k != nullptr) r.seqlen_k = min(max(p.seqused_k[r.b], 0), r.seqlen_k);
    r.pages = p.page_table + r.b * p.page_table_stride;
  }
  r.rows_valid = min(BM, r.seqlen_q * PACK - r.m_start);
  r.q = static_cast<const u16*>(p.q) + r.b * p.q_stride_batch + r.h * p.q_stride_head +
        (r.q_off + r.m_start / PACK) * p.q_stride_seq;
  // (PAGED: stride_batch steps between pages, and keys are found through the table)
  r.k = static_cast<const u16*>(p.k) + (PAGED ? 0 : r.b * p.k_stride_batch) + r.kvh * p.k_stride_head +
        r.k_off * p.k_stride_seq;
  r.v = static_cast<const u16*>(p.v) + (PAGED ? 0 : r.b * p.v_stride_batch) + r.kvh * p.v_stride_head +
        r.k_off * p.v_stride_seq;
  r.diag = MSK == 2 || MSK == 4 ? r.seqlen_k - r.seqlen_q : 0;
  r.diag_lo = 0;
  int first_tile = 0;  // the first key tile some row of the block sees
  if (MSK == 3 || MSK == 4) {
    // (64-bit: window sizes are any int64 >= -1; the clamps keep i + diag in 32 bits)
    const i64 off = r.diag;
    r.diag = (int)(p.window_right < 0 ? (i64)r.seqlen_k : min((i64)r.seqlen_k, off + p.window_right));
    r.diag_lo = (int)(p.window_left < 0 ? -(i64)r.seqlen_q : max(-(i64)r.seqlen_q, off - p.window_left));
    const int first_key = r.m_start / PACK + r.diag_lo;  // first key any row of the block sees
    first_tile = first_key <= 0 ? 0 : first_key / BN;
  }
  r.n_tiles = (r.seqlen_k + BN - 1) / BN;
  if (MSK != 0) {
    const int last_key = (r.m_start + r.rows_valid - 1) / PACK + r.diag;  // last key any row of the block sees
    r.n_tiles = last_key < 0 ? 0 : min(r.n_tiles, last_key / BN + 1);
  }
  r.key0 = 0;
  if (MSK == 3 || MSK == 4) {
    r.n_tiles = max(0, r.n_tiles - first_tile);
    r.key0 = first_tile * BN;
  }
  if (SPLIT) {
    // The split's tiles, counted from the block's first visible tile.
    const int first = r.split * (int)p.tiles_per_split;
    r.key0 += first * BN;
    r.n_tiles = max(0, min(r.n_tiles, first + (int)p.tiles_per_split) - first);
    if (!PAGED) {
      r.k += (i64)r.key0 * p.k_stride_seq;
      r.v += (i64)r.key0 * p.v_stride_seq;
    }
  } else if ((MSK == 3 || MSK == 4) && !PAGED) {
    r.k += (i64)r.key0 * p.k_stride_seq;
    r.v += (i64)r.key0 * p.v_stride_seq;
  }
  if (VARLEN && r.rows_valid <= 0) r.n_tiles = 0;  // a block past its sequence's rows (skipped)
  return r;
}

// x / d for x < 2^31 and an invariant d >= 1, by the multiplier m and shift s
// the host derived from d (rt::lpt_params), packed as m | s << 32:
// (umulhi(x, m) + x) >> s (division by invariant integers using multiplication,
// Granlund and Montgomery, PLDI 1994, figure 4.1). Block-uniform operands stay
// in the uniform datapath: no vector registers, unlike the reciprocal sequence
// of a division by a run-time value.
FG_DEVICE unsigned fg_div_invariant(unsigned x, long long ms) {
  return (__umulhi(x, (unsigned)ms) + x) >> (unsigned)(ms >> 32);
}

// The item a block of a non-persistent masked grid takes (the mma.sync and
// m8n8k4 kernels: one item per block, dispatched about in block order). A
// causal row block's key tiles grow with its m block, so a grid whose last
// blocks are long ones ends with a few SMs busy and the rest idle; fg_block's
// reversal alone only sorts each (batch, head group) pair's own blocks.
// Longest-processing-time-first list scheduling (Graham 1969) sorts them within
// p.lpt_groups groups of consecutive pairs (sizes differing by at most one,
// the larger first): a group issues the longest m block of each of its pairs,
// then the second longest, ..., so the grid ends on the shortest blocks of a
// group as large as the others, while the K/V of a group's pairs (the host
// sizes the groups to half the L2, rt::lpt_groups) stay cached between its m
// blocks. Returns the item number fg_block takes (pair * num_m_blocks + rank,
// rank 0 the m block fg_block takes first, the longest under a causal mask or a
// window bounded on the right; SPLIT: times num_splits, the split fastest), a
// bijection of [0, grid); unmasked grids and p.lpt_groups <= 0 keep the block id.
// The host's rt::lpt_params gives the groups' shape: lpt_big blocks (split
// excluded) in the larger groups, their pairs (low half of lpt_pairs) and the
// smaller groups' (high half), the smaller groups' first pair (lpt_first0), and
// the divisors (pairs of a group x num_m_blocks, pairs of a group) as
// fg_div_invariant operands.
template <int MSK>
FG_DEVICE i64 fg_lpt_order(const FwdParams& p, i64 bid) {
  if constexpr (MSK == 0) {
    return bid;
  } else {
    if (p.lpt_groups <= 0) return bid;
    // (32-bit: the grid, num_m_blocks * pairs * num_splits, is below 2^31)
    const unsigned ns = SPLIT ? (unsigned)p.num_splits : 1u;
    const unsigned nm = (unsigned)p.num_m_blocks;
    const unsigned id = (unsigned)bid, split = SPLIT ? id % ns : 0u;
    const unsigned r = SPLIT ? id / ns : id;
    const bool larger = r < (unsigned)p.lpt_big;  // in one of the groups of one more pair
    const unsigned rg = larger ? r : r - (unsigned)p.lpt_big;
    const unsigned n = larger ? (unsigned)p.lpt_pairs : (unsigned)(p.lpt_pairs >> 32);  // the group's pairs
    const unsigned g = fg_div_invariant(rg, larger ? p.lpt_div_group1 : p.lpt_div_group0);  // rg / (n * nm)
    const unsigned in_group = rg - g * n * nm;
    const unsigned rank = fg_div_invariant(in_group, larger ? p.lpt_div_pairs1 : p.lpt_div_pairs0);  // in_group / n
    const unsigned pair = (larger ? 0u : (unsigned)p.lpt_first0) + g * n + (in_group - rank * n);
    return ((i64)pair * nm + rank) * ns + split;
  }
}

// Where query qi of the block's sequence goes: O element offset (head and
// column excluded) from p.o, and the row of the split-KV partials
// [split, batch, seqlen_q, ...] (VARLEN: [split, total_q, ...], one batch of
// packed rows).
FG_DEVICE i64 fg_o_row(const FwdParams& p, const FgBlock& blk, int qi) {
  return blk.b * p.o_stride_batch + (blk.q_off + qi) * p.o_stride_seq;
}
FG_DEVICE i64 fg_part_row(const FwdParams& p, const FgBlock& blk, int qi) {
  return VARLEN ? blk.split * p.total_q + blk.q_off + qi : (blk.split * p.batch + blk.b) * p.seqlen_q + qi;
}

// PAGED: the rows of a key tile from key `key` on, in a K or V view whose head
// base (page 0, slot 0) the loader is given: row r is key + r, in page
// pages[(key + r) >> shift] (stride_page elements apart) at slot (key + r) &
// (2^shift - 1) (stride_seq apart). Only rows below the tile's valid keys are
// looked up.
struct FgPageRows {
  const int* pages;
  int key, shift;
  i64 stride_page, stride_seq;
};
FG_DEVICE const u16* fg_page_row(const FgPageRows& pr, const u16* base, int r) {
  const int key = pr.key + r;
  return base + (i64)pr.pages[key >> pr.shift] * pr.stride_page + (i64)(key & ((1 << pr.shift) - 1)) * pr.stride_seq;
}
// Whether ROWS keys from `key` lie in one page (then the tile is read as one
// strided view from its first row).
FG_DEVICE bool fg_one_page(const FwdParams& p, int key, int rows) {
  return (key & ((1 << (int)p.page_shift) - 1)) + rows <= (1 << (int)p.page_shift);
}

// ---- the online softmax's offsets (exp2 domain) ----------------------------
// A key tile's P is exp2 of each logit's distance from the row's running max m
// in log2 units, P = 2^((s - m) * log2 e), accumulated as O and the row sum l
// (FlashAttention's online softmax, Dao et al. 2022, sec. 3.1). The argument
// is one FFMA per logit, fma(s, a, -K), with a per-row offset that is a
// function of m alone (fg_offset), chosen without a branch:
//  - the LOG2E frame, |m| <= 2^26 (f16) or 2^29 (bf16): a = LOG2E, K = m *
//    LOG2E rounded down (f16) or up (bf16). Every weight carries the factor
//    2^c, c = m * LOG2E - K, an exact fp32 residual: f16 c in [0, ulp(K)) <=
//    [0, 8), so the max's weight lies in [1, 256), inside f16 and never lower
//    than 1 (P rounded to f16 keeps its relative precision down to the
//    smallest weight that matters); bf16 c in (-ulp(K), 0], so no weight
//    exceeds 1 (a V near the bf16 limit cannot overflow O) and bf16 P has the
//    fp32 exponent range. The rescale between tiles and LSE take c out again
//    (fg_corr, fg_lse), so it cancels.
//  - f16, 2^26 < |m| <= 2^29 (fg_offset's `shift`; rare, a warp-uniform
//    branch): the row's weights are shifted so that c = 0 for the rescale and
//    LSE, in one of two places. Early (mma.sync kernels, whose P.V steps then
//    interleave with the exp2 of later columns): a = LOG2E, K = 0, and m is
//    first subtracted from the row's logits (exact for every weight that is
//    not 0). Late (LATE_SHIFT, the wgmma kernel, whose P.V waits for all of P
//    anyway): a = LOG2E and K rounded down as in the LOG2E frame, so c =
//    `c_raw` may reach ulp(K) = 64, too much for f16 P; the fp32 weights (at
//    most 2^64) are multiplied by 2^-c_raw after the exp2, before P is rounded
//    to f16, and the FFMA + exp2 sequence has no branch in front of it.
//  - |m| > 2^29 (and m = -inf): a = 1, K = m, P = 2^(s - m). fp32 logits there
//    are at least 64 apart unless equal, so any logit below the max has an
//    exact weight under e^-64 of the max's: P (2^-64) keeps the result exact to
//    that relative amount per key, at every finite magnitude (a max near the
//    fp32 lowest value included).
// -inf is the only value that masks: a row that saw only -inf keys has
// m = -inf, K = -FLT_MAX and P = exp2(-inf) = 0, never inf - inf.
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float FG_NEAR_MAX_F16 = 67108864.f;  // 2^26
constexpr float FG_WIDE_MIN = 536870912.f;  // 2^29
constexpr float FG_F32_MAX = 3.40282347e+38f;

struct FgOffset {
  float a;      // LOG2E, or 1 beyond 2^29
  float neg_k;  // -K
  float c;      // log2 of every weight's common factor (0 for a shifted row)
  float c_raw;  // LATE_SHIFT: m * a - K (a shifted row's weights are multiplied by 2^-c_raw); else c
  bool shift;   // f16, 2^26 < |m| <= 2^29: the row's weights are shifted to c = 0
};

template <bool BF16>
FG_DEVICE FgOffset fg_offset(float m) {
  const float am = fabsf(m);
  const bool wide = !(am <= FG_WIDE_MIN);  // also -inf (NaN: a row that reads a NaN)
  FgOffset o;
  o.shift = !BF16 && am > FG_NEAR_MAX_F16 && !wide;
  o.a = wide ? 1.f : LOG2E;
  const float k = BF16 ? __fmul_ru(m, LOG2E) : __fmul_rd(m, LOG2E);
  if constexpr (LATE_SHIFT && !BF16) {
    o.neg_k = wide ? -fmaxf(m, -FG_F32_MAX) : -k;
    o.c_raw = fmaf(m, o.a, o.neg_k);
    o.c = o.shift ? 0.f : o.c_raw;
  } else {
    o.neg_k = wide ? -fmaxf(m, -FG_F32_MAX) : o.shift ? 0.f : -k;
    o.c = o.shift ? 0.f : fmaf(m, o.a, o.neg_k);
    o.c_raw = o.c;
  }
  return o;
}

// Unnormalised weight of logit s against the offset (a shifted row: of s - m
// early; late, times 2^c_raw until the kernel shifts it).
FG_DEVICE float fg_weight(float s, const FgOffset& o) { return fg_exp2(fmaf(s, o.a, o.neg_k)); }

// Factor that takes weights accumulated against the previous row max m_old to
// the offset `o` of the new max m: e^(m_old - m) * 2^(c - c_old), i.e.
// 2^(K_old - K) within the LOG2E frame (exactly 1 when the max did not move).
// 0 while the row had seen no key (m_old = -inf; O and l are 0).
// (The -inf case is a select on the argument, so no branch splits the softmax.)
template <bool BF16>
FG_DEVICE float fg_corr(float m_old, float m, const FgOffset& o) {
  const float x = fmaf(m_old - m, LOG2E, o.c - fg_offset<BF16>(m_old).c);
  return fg_exp2(m_old == fg_neg_inf() ? fg_neg_inf() : x);
}

// LSE = m + (log2(l) - c) ln 2 from the row max m and the sum l of its weights
// (their factor 2^c taken out); -inf for a row that saw no key (l = 0), NaN for
// a row whose l is NaN.
template <bool BF16>
FG_DEVICE float fg_lse(float m, float l) {
  return l == 0.f ? fg_neg_inf() : m + (fg_log2(l) - fg_offset<BF16>(m).c) * LN2;
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
  static constexpr bool window = false;
  int skip_from;  // steps starting here or later: no row of the warp sees them (skipped)
  int band_from;  // steps reaching past this key: some rows see them, some not (V checked)
  int bad_key;    // this lane's lowest key with a non-finite V value in a checked step (BN: none)
};
// The plain P.V of an uncut tile.
struct FgPvPlain {
  static constexpr bool checked = false;
  static constexpr bool window = false;
};

template <int BN>
FG_DEVICE FgPvMask fg_pv_mask(const FgBlock& blk, int j, int row_lo, int row_hi) {
  FgPvMask m;
  if constexpr (PACK == 1 && !KEYS_FROM_KEY0) {
    // (this form, exactly: another one of the same value cost the m8n8k4 d256 kernels 40 bytes of spills)
    const int first = blk.m_start + blk.diag + 1 - j * BN;  // + row: the first key that row does not see
    m.band_from = max(0, min(BN, first + row_lo));
    m.skip_from = max(0, min(BN, first + row_hi));
  } else {
    // The first key (tile-relative) a row does not see: its query position + diag + 1.
    const int first = blk.diag + 1 - ((KEYS_FROM_KEY0 ? blk.key0 : 0) + j * BN);
    m.band_from = max(0, min(BN, fg_row_q(blk, row_lo) + first));
    m.skip_from = max(0, min(BN, fg_row_q(blk, row_hi) + first));
  }
  m.bad_key = BN;
  return m;
}
// WINDOW: the cut of key tile j for rows [row_lo, row_hi] on both sides of the
// window. With a window a row sees an interval of keys, so the rows that see a
// non-finite V value are found per key: each lane keeps a bit per key of its
// checked steps that has one (`bad`, tile-relative keys, 32 per word), and
// fg_window_poison tests every row's interval against them.
template <int BN>
struct FgPvWindow {
  static constexpr bool checked = true;
  static constexpr bool window = true;
  static constexpr int WORDS = (BN + 31) / 32;
  int skip_below;  // steps ending at or below this key: no row of the warp sees them (skipped)
  int band_below;  // steps starting below this key: some rows do not see them (V checked)
  int skip_from;   // as FgPvMask: steps from here on are skipped,
  int band_from;   // and those reaching past this key checked
  u32 bad[WORDS];
};
template <int BN>
FG_DEVICE FgPvWindow<BN> fg_pv_window(const FgBlock& blk, int j, int row_lo, int row_hi) {
  FgPvWindow<BN> m;
  const int t0 = blk.key0 + j * BN;  // (WINDOW: KEYS_FROM_KEY0)
  const int q_lo = fg_row_q(blk, row_lo), q_hi = fg_row_q(blk, row_hi);
  m.band_from = max(0, min(BN, q_lo + blk.diag + 1 - t0));
  m.skip_from = max(0, min(BN, q_hi + blk.diag + 1 - t0));
  m.skip_below = max(0, min(BN, q_lo + blk.diag_lo - t0));
  m.band_below = max(0, min(BN, q_hi + blk.diag_lo - t0));
#pragma unroll
  for (int w = 0; w < FgPvWindow<BN>::WORDS; ++w) m.bad[w] = 0u;
  return m;
}
template <int BN>
FG_DEVICE bool fg_pv_cut(const FgPvWindow<BN>& m) { return m.band_from < BN || m.band_below > 0; }

// Record the non-finite halves a checked step found (`lo`: keys k, k + 1 of
// the halves of `lo`; `hi`: keys k + HI, k + HI + 1), all in word `word` of the
// lane's record from bit `bit` (the layouts keep a step's keys in one word).
template <int BN>
FG_DEVICE void fg_pv_note(FgPvWindow<BN>& m, int word, int bit, u32 lo, u32 hi, int HI) {
  const u32 x = ((lo & 0xffffu) ? 1u : 0u) | ((lo >> 16) ? 2u : 0u) | ((hi & 0xffffu) ? (1u << HI) : 0u) |
                ((hi >> 16) ? (2u << HI) : 0u);
  m.bad[word] |= x << bit;
}

// The bits of keys [lo, hi] (relative to bit 0 of word w; any range) in word w.
FG_DEVICE u32 fg_range_bits(int lo, int hi, int w) {
  lo -= 32 * w;
  hi -= 32 * w;
  if (hi < 0 || lo > 31 || lo > hi) return 0u;
  lo = max(lo, 0);
  hi = min(hi, 31);
  return (0xffffffffu >> (31 - hi)) & (0xffffffffu << lo);
}

// Whether the mask cuts the tile for these rows: some key is hidden from the
// first (warp-uniform). That includes a tile hidden from every row of the warp
// (skip_from = 0: no step runs), which other warps of the block see.
template <int BN>
FG_DEVICE bool fg_pv_cut(const FgPvMask& m) { return m.band_from < BN; }

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
