// ---- a lane's rows of S and O, for every accumulator layout (templates/fwd_rows.cuh) ----
// Bias, masks and the online softmax of a key tile, the rows a non-finite V
// value reaches, and the rows' normalisation and LSE, written once for every
// kernel. A kernel's accumulator layout is a type F:
//   F::NW        keys per n-tile of S
//   F::E         elements of one row a lane holds per n-tile
//   F::reg(r, e) register of the lane's row r (0, 1), element e, in an n-tile
//   F::col(e)    column of element e in the n-tile, past the lane's first column
//   F::ROW_STEP  block rows between the lane's rows 0 and 1
//   F::X0, X1    lane xor masks of the other lanes that hold the same row
// A lane passes `row0`, the block row of its row 0 in slice 0 (slice ms adds
// 16 ms), and `col0`, its first column in an n-tile. The layouts: FgFragM16
// (fwd_m16_parts.cuh, the mma.sync m16n8 and wgmma C fragments) and FgFragM8
// (fwd_m8n8k4.cu, the Volta quadpair). Each template defines before this:
// M_SLICES, NT (n-tiles of S per slice), BLOCK_N, MASK, BIAS_KIND, HAS_LSE,
// IS_BF16.

constexpr bool BOTTOM_RIGHT = MASK == 2 || MASK == 4;  // the mask's alignment (and ALiBi's)

FG_DEVICE float fg_in16_to_f32(u16 h) { return IS_BF16 ? fg_bf16_to_f32(h) : fg_f16_to_f32(h); }

// S of key tile j (softcap, + bias, ALiBi, masks): with SOFTCAP each logit x
// becomes cap * tanh(x / cap); the bias of each visible (row, key) is added,
// with ALIBI -slope_h * |i + off - j| (off: the mask's alignment, bottom-right
// without a mask); keys past seqlen_k and those the mask hides (causal: above
// the diagonal; WINDOW: outside [i + diag_lo, i + diag]) become -inf.
template <class F, int R>
FG_DEVICE void fg_bias_mask(const FwdParams& p, const FgBlock& blk, int j, int row0, int col0,
                            float (&s)[M_SLICES][NT][R]) {
  const int n_start = (KEYS_FROM_KEY0 ? blk.key0 : 0) + j * BLOCK_N;  // first key of the tile
  const int seqlen_q = blk.seqlen_q, seqlen_k = blk.seqlen_k;
  if (SOFTCAP) {
    // tanh(y) = 1 - 2 / (e^(2y) + 1): one exp2 and one approximate reciprocal
    // per logit. +-inf give +-cap exactly (e = inf: 2 / inf = 0; e = 0: 1 - 2),
    // NaN stays NaN; elsewhere the error is a few fp32 ulp of 1, times cap
    // (absolute: cap * 2^-18 bounds it, test/reference.cpp). A normal cap keeps
    // k finite (check_problem).
    const float cap = (float)p.softcap, k = 2.f * LOG2E / cap;
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < R; ++i)
          s[ms][nt][i] = cap * (1.f - __fdividef(2.f, fg_exp2(s[ms][nt][i] * k) + 1.f));
  }
  if (BIAS_KIND != 0) {
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // (the row as m_start + row0 + ...: summed in this order, the d256 m8n8k4 kernels fit their registers)
        const int a = blk.m_start + row0 + ms * 16 + F::ROW_STEP * r, qi = fg_abs_row_q(a);
        if (qi < seqlen_q) {
          // Element (qi, kj) of this lane's first key; with a contiguous key
          // dimension the other offsets are constants (no registers for them),
          // otherwise one running offset per n-tile.
          const i64 first = blk.b * p.bias_stride_batch + fg_abs_row_h(blk, a) * p.bias_stride_head + (i64)qi * p.bias_stride_q +
                            (i64)(n_start + col0) * p.bias_stride_k;
          auto bias_at = [&](i64 off) {
            return BIAS_KIND == 2 ? static_cast<const float*>(p.bias)[off]
                                  : fg_in16_to_f32(static_cast<const u16*>(p.bias)[off]);
          };
          const bool whole = n_start + BLOCK_N <= seqlen_k;
          if (p.bias_stride_k == 1 && whole) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int e = 0; e < F::E; ++e) s[ms][nt][F::reg(r, e)] += bias_at(first + nt * F::NW + F::col(e));
          } else {
            i64 off = first;  // this n-tile's first element
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
              for (int e = 0; e < F::E; ++e)
                if (n_start + col0 + nt * F::NW + F::col(e) < seqlen_k)
                  s[ms][nt][F::reg(r, e)] += bias_at(off + F::col(e) * p.bias_stride_k);
              off += F::NW * p.bias_stride_k;
            }
          }
        }
      }
  }
  if (ALIBI) {
    const int off = BOTTOM_RIGHT || MASK == 0 ? seqlen_k - seqlen_q : 0;
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int a = blk.m_start + row0 + ms * 16 + F::ROW_STEP * r;
        const float slope = p.alibi_slopes[blk.b * p.alibi_stride_batch + fg_abs_row_h(blk, a)];
        const int d0 = fg_abs_row_q(a) + off - (n_start + col0);  // i + off - j for this lane's first key
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < F::E; ++e)
            s[ms][nt][F::reg(r, e)] -= slope * fabsf((float)(d0 - nt * F::NW - F::col(e)));
      }
  }
  const bool need_mask = n_start + BLOCK_N > seqlen_k || (MASK != 0 && n_start + BLOCK_N - 1 > fg_row_q(blk, 0) + blk.diag) ||
                         (WINDOW && n_start < fg_row_q(blk, BLOCK_M - 1) + blk.diag_lo);
  if (need_mask) {
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int qi = fg_abs_row_q(blk.m_start + row0 + ms * 16 + F::ROW_STEP * r);
        const int limit = MASK != 0 ? min(seqlen_k - 1, qi + blk.diag) : seqlen_k - 1;  // last visible key
        // WINDOW: keys [first, limit] visible, one unsigned compare per key
        // (two cost the wgmma kernels registers); `span` keys, 0 when none.
        const int first = WINDOW ? qi + blk.diag_lo : 0;
        const u32 span = (u32)max(0, limit - first + 1);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < F::E; ++e) {
            const int key = n_start + col0 + nt * F::NW + F::col(e);
            if (WINDOW ? (u32)(key - first) >= span : key > limit) s[ms][nt][F::reg(r, e)] = fg_neg_inf();
          }
      }
  }
}

// The online softmax of one key tile (exp2 domain; the offsets and the f16
// shift, early or late (LATE_SHIFT): fwd_block.cuh): `s` becomes P (unnormalised), row_max
// and row_sum move to the new offsets, corr is the factor for the O rows
// (exactly 1 when the row max did not move).
template <class F, int R>
FG_DEVICE void fg_online_softmax(float (&s)[M_SLICES][NT][R], float (&row_max)[M_SLICES][2],
                                 float (&row_sum)[M_SLICES][2], float (&corr)[M_SLICES][2]) {
  constexpr bool LATE = LATE_SHIFT && !IS_BF16;  // (bf16 rows never shift)
  // Every row's max and offsets first, so that one vote covers the lane's rows
  // and the exp2 of all of them form one straight-line sequence.
  float m[M_SLICES][2];
  FgOffset off[M_SLICES][2];
  bool shift = false;
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float x = row_max[ms][r];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < F::E; e += 2)
          x = fmaxf(x, fmaxf(s[ms][nt][F::reg(r, e)], s[ms][nt][F::reg(r, e + 1)]));
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, F::X0));
      m[ms][r] = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, F::X1));
      off[ms][r] = fg_offset<IS_BF16>(m[ms][r]);
      shift = shift || off[ms][r].shift;
    }
  if (!IS_BF16 && !LATE && __any_sync(0xffffffffu, shift)) {  // early shift: rare, warp-uniform
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float by = off[ms][r].shift ? m[ms][r] : 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < F::E; ++e) s[ms][nt][F::reg(r, e)] -= by;
      }
  }
  float sum[M_SLICES][2];  // (LATE: the tile's sums, until the shift)
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      corr[ms][r] = fg_corr<IS_BF16>(row_max[ms][r], m[ms][r], off[ms][r]);
      row_max[ms][r] = m[ms][r];
      float t = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < F::E; e += 2) {
          const float p0 = fg_weight(s[ms][nt][F::reg(r, e)], off[ms][r]);
          const float p1 = fg_weight(s[ms][nt][F::reg(r, e + 1)], off[ms][r]);
          s[ms][nt][F::reg(r, e)] = p0;
          s[ms][nt][F::reg(r, e + 1)] = p1;
          t += p0 + p1;
        }
      if (LATE) sum[ms][r] = t;
      else row_sum[ms][r] = row_sum[ms][r] * corr[ms][r] + t;
    }
  if (LATE) {
    // Late shift (rare, warp-uniform): f16 weights up to 2^64 in fp32 become
    // 2^-c_raw of that before P is rounded to f16.
    if (!IS_BF16 && __any_sync(0xffffffffu, shift)) {
#pragma unroll
      for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float u = off[ms][r].shift ? fg_exp2(-off[ms][r].c_raw) : 1.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < F::E; ++e) s[ms][nt][F::reg(r, e)] *= u;
          sum[ms][r] *= u;
        }
    }
#pragma unroll
    for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
      for (int r = 0; r < 2; ++r) row_sum[ms][r] = row_sum[ms][r] * corr[ms][r] + sum[ms][r];
  }
}

// The lane's rows that see key k of tile j (with causal masks: every row from
// the first that sees it) get row_sum = NaN.
template <class F>
FG_DEVICE void fg_poison_rows(const FgBlock& blk, int j, int row0, int k, float (&row_sum)[M_SLICES][2]) {
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (fg_abs_row_q(blk.m_start + row0 + ms * 16 + F::ROW_STEP * r) + blk.diag >= (KEYS_FROM_KEY0 ? blk.key0 : 0) + j * BLOCK_N + k)
        row_sum[ms][r] = __int_as_float(0x7fffffff);
}

// After the P.V of a tile the causal mask cuts (fwd_block.cuh, "causal masks
// and P.V"): the lane's rows that see the lowest non-finite V key any lane of
// the warp found get row_sum = NaN.
template <class F>
FG_DEVICE void fg_pv_poison(const FgPvMask& m, const FgBlock& blk, int j, int row0, float (&row_sum)[M_SLICES][2]) {
  const int k = fg_pv_bad_key<BLOCK_N>(m);
  if (k < BLOCK_N) fg_poison_rows<F>(blk, j, row0, k, row_sum);
}

// WINDOW: the lane's rows that see a key whose bit is set in bad(w) for words
// w < N (keys of tile j from its key `key_off` on, 32 per word) get row_sum = NaN.
template <class F, int N, class Bad>
FG_DEVICE void fg_window_poison_rows(const Bad& bad, const FgBlock& blk, int j, int row0, int key_off,
                                     float (&row_sum)[M_SLICES][2]) {
  const int t0 = blk.key0 + j * BLOCK_N + key_off;  // the key of bit 0
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = fg_abs_row_q(blk.m_start + row0 + ms * 16 + F::ROW_STEP * r);
      u32 hit = 0u;
#pragma unroll
      for (int w = 0; w < N; ++w) hit |= bad(w) & fg_range_bits(q + blk.diag_lo - t0, q + blk.diag - t0, w);
      if (hit != 0u) row_sum[ms][r] = __int_as_float(0x7fffffff);
    }
}

// WINDOW, after the P.V of a tile the window cuts: the non-finite V keys the
// warp's lanes recorded (keys from `key_off` of the tile), gathered over the
// warp (one vote when there are none), poison the rows that see them.
template <class F, int BN>
FG_DEVICE void fg_pv_poison(FgPvWindow<BN>& m, const FgBlock& blk, int j, int row0, int key_off,
                            float (&row_sum)[M_SLICES][2]) {
  u32 any = 0u;
#pragma unroll
  for (int w = 0; w < FgPvWindow<BN>::WORDS; ++w) any |= m.bad[w];
  if (!__any_sync(0xffffffffu, any != 0u)) return;
#pragma unroll
  for (int w = 0; w < FgPvWindow<BN>::WORDS; ++w)
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) m.bad[w] |= __shfl_xor_sync(0xffffffffu, m.bad[w], d);
  fg_window_poison_rows<F, FgPvWindow<BN>::WORDS>([&](int w) { return m.bad[w]; }, blk, j, row0, key_off, row_sum);
}

// Where block row `row` writes its LSE: LSE [batch, heads_q, seqlen_q] through
// its strides, or (SPLIT) the split's fp32 partial LSE [split, batch, heads_q,
// seqlen_q] (contiguous; the combine family merges the splits). VARLEN: LSE
// [heads_q, total_q] and partial LSE [split, heads_q, total_q].
FG_DEVICE float* fg_lse_dst(const FwdParams& p, const FgBlock& blk, int row) {
  const int qi = fg_row_q(blk, row);
  const i64 h = fg_row_h(blk, row);
  if (SPLIT && VARLEN) return p.lse_partial + (blk.split * p.heads_q + h) * p.total_q + blk.q_off + qi;
  if (SPLIT) return p.lse_partial + ((blk.split * p.batch + blk.b) * p.heads_q + h) * p.seqlen_q + qi;
  return p.lse + blk.b * p.lse_stride_batch + h * p.lse_stride_head + blk.q_off + qi;
}

// Whether the sinks join this block's rows: SINKS, and with SPLIT only in
// split 0 (the combine's merge then counts each sink once).
FG_DEVICE bool fg_sink_here(const FgBlock& blk) { return SINKS && (!SPLIT || blk.split == 0); }

// A row's state (the LSE of its keys, `lse`) joined by its sink logit: returns
// log(e^lse + e^sink) and sets `f` = e^(lse - that), the factor of the row's
// normalised O. No key (lse = -inf): the sink's own (O = 0, LSE = sink); a
// sink of -inf changes nothing; NaN propagates.
FG_DEVICE float fg_add_sink(float lse, float sink, float& f) {
  const float m = fg_max_nan(lse, sink);
  if (m == fg_neg_inf()) {
    f = 0.f;
    return m;
  }
  const float total = m + log1pf(expf(-fabsf(lse - sink)));
  f = expf(lse - total);
  return total;
}

// Row sums across the lanes of each row, 1 / sum for the normalisation (0 for
// a row that saw no key: O = 0; NaN stays NaN) and, with HAS_LSE, LSE (-inf
// for a row that saw no key), written by the lanes with `lse_lane`. With
// sinks (fg_sink_here) each row's sink logit p.sinks[head] joins the
// denominator: O is scaled by fg_add_sink's factor and LSE includes the sink.
template <class F>
FG_DEVICE void fg_finish_rows(const FwdParams& p, const FgBlock& blk, int row0, bool lse_lane,
                              const float (&row_max)[M_SLICES][2], const float (&row_sum)[M_SLICES][2],
                              float (&inv)[M_SLICES][2]) {
#pragma unroll
  for (int ms = 0; ms < M_SLICES; ++ms)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[ms][r];
      l += __shfl_xor_sync(0xffffffffu, l, F::X0);
      l += __shfl_xor_sync(0xffffffffu, l, F::X1);
      inv[ms][r] = l == 0.f ? 0.f : 1.f / l;
      // Plain rows (no sink here): LSE as it is. (A branch taken at compile time
      // for kernels without sinks: one shared form cost the m8n8k4 d256 kernels
      // 40 bytes of spills.)
      auto plain = [&] {
        if ((HAS_LSE || SPLIT) && lse_lane) {
          const int row = row0 + ms * 16 + F::ROW_STEP * r, qi = fg_row_q(blk, row);
          if (qi < blk.seqlen_q) *fg_lse_dst(p, blk, row) = fg_lse<IS_BF16>(row_max[ms][r], l);
        }
      };
      if constexpr (SINKS) {
        if (fg_sink_here(blk)) {
          const int row = row0 + ms * 16 + F::ROW_STEP * r;
          float f;
          const float lse = fg_add_sink(fg_lse<IS_BF16>(row_max[ms][r], l), p.sinks[fg_row_h(blk, row)], f);
          inv[ms][r] *= f;
          if ((HAS_LSE || SPLIT) && lse_lane && fg_row_q(blk, row) < blk.seqlen_q) *fg_lse_dst(p, blk, row) = lse;
        } else {
          plain();
        }
      } else {
        plain();
      }
    }
}
