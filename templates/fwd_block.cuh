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
