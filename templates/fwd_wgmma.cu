// ---- forward attention, warpgroup wgmma.mma_async m64nNk16 (templates/fwd_wgmma.cu) ----
// sm_90a. Each warpgroup (4 consecutive warps, 128 threads) owns 64 query rows
// of the block (BLOCK_M = 64 * WARPS / 4); within it warp w holds rows 16w..16w+15
// in the m16n8 accumulator layout, so the softmax, masking and epilogue pieces
// are the ones of the mma.sync kernel (fwd_m16_parts.cuh, M_SLICES = 1).
//   S = Qs.K^T: wgmma with A (Q) and B (K) read from shared memory, both
//     K-major (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate",
//     "Matrix Descriptor", "Shared Memory Matrix Layout": K-major, swizzled).
//   O += P.V: A = P from registers (the S accumulators rounded to the input
//     dtype; the m64nNk16 A register fragment of k block kk is the accumulator
//     of n8 tiles 2kk and 2kk+1), B = V read from shared memory, MN-major
//     (imm-trans-b = 1).
// Shared tiles are the head-dim chunks of the mma.sync kernel with every chunk
// at most 64 wide: a chunk of W elements has W*2-byte rows, and the XOR swizzle
// of fg_swz<W> is exactly the 128-byte (W = 64), 64-byte (32) or 32-byte (16)
// swizzle mode of the descriptor once the chunk starts on a 1024-byte boundary.
// K/V tiles of BLOCK_N keys come through a STAGES-deep (>= 2) cp.async pipeline
// loaded by all threads; the softmax of a tile runs while the tensor cores
// compute P.V of the previous one.

@@CONSTANTS@@

constexpr int THREADS = WARPS * 32;
constexpr int M_SLICES = 1;              // one 16-row slice per warp
constexpr int NT = BLOCK_N / 8;          // n8 tiles of S
constexpr int OT = HEAD_DIM_V / 8;       // n8 tiles of O
constexpr bool ASYNC_COPY = true;
constexpr int Q_REGION = BLOCK_M * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
// K and V stages start on 1024-byte boundaries too (e.g. 80 keys x 80 columns
// is 12800 bytes): their strides are rounded up to 512 elements.
constexpr int K_STAGE = (BLOCK_N * HEAD_DIM + 511) / 512 * 512;
constexpr int V_STAGE = (BLOCK_N * HEAD_DIM_V + 511) / 512 * 512;
typedef unsigned long long u64;

@@M16_PARTS@@

// ---- wgmma plumbing (PTX ISA: wgmma.fence, wgmma.commit_group, wgmma.wait_group,
// fence.proxy.async) ----
FG_DEVICE void fg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
FG_DEVICE void fg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
FG_DEVICE void fg_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (cp.async, st.shared) is
// read by wgmma through the async proxy: each writer fences before the barrier.
FG_DEVICE void fg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving accesses to accumulators across wgmma issue/wait.
template <int N>
FG_DEVICE void fg_reg_fence(float (&r)[1][N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(r[0][i][0]), "+f"(r[0][i][1]), "+f"(r[0][i][2]), "+f"(r[0][i][3])::"memory");
}

// Matrix descriptor of a swizzled sub-tile of W-element (W*2-byte) rows that
// starts at shared address `addr` (PTX ISA "Matrix Descriptor Format": bits
// 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte
// offset >> 4, 62-63 swizzle mode: 1 = 128B, 2 = 64B, 3 = 32B). Rows are
// grouped by 8 (one swizzle atom of 8 * W * 2 bytes); the distance between
// groups is the stride byte offset. The leading byte offset is not used by
// these layouts (K-major: one k16 step lies inside a row; MN-major: N = W is
// one atom wide); it is given the same value.
template <int W>
FG_DEVICE u64 fg_desc(u32 addr) {
  constexpr u64 SWIZZLE = W == 64 ? 1 : (W == 32 ? 2 : 3);
  constexpr u64 GROUP = 8 * W * 2;
  return (u64)((addr & 0x3FFFFu) >> 4) | ((GROUP >> 4) << 16) | ((GROUP >> 4) << 32) | (SWIZZLE << 62);
}

@@WGMMA_OPS@@

// S (+)= Q[:, OFF:OFF+W] . K[:, OFF:OFF+W]^T: W / 16 k16 steps, each +32 bytes
// along the rows of both sub-tiles (inside one swizzle row).
template <int W, int OFF>
FG_DEVICE void fg_qk(u32 q_addr, u32 k_addr, float (&s)[1][NT][4]) {
#pragma unroll
  for (int ks = 0; ks < W / 16; ++ks)
    fg_wgmma_qk(s, fg_desc<W>(q_addr + 32 * ks), fg_desc<W>(k_addr + 32 * ks), OFF == 0 && ks == 0 ? 0 : 1);
}

// O[:, OFF:OFF+W] += P . V[:, OFF:OFF+W]: one k16 step per 16 keys (two row groups).
template <int W, int OFF>
FG_DEVICE void fg_pv(u32 v_addr, const u32 (&pa)[BLOCK_N / 16][4], float (&o)[1][OT][4]) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) FgPv<W>::template mma<OFF / 8>(o, pa[kk], fg_desc<W>(v_addr + kk * 32 * W));
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) @@KERNEL_NAME@@(const FwdParams p) {
  extern __shared__ __align__(128) unsigned char fg_smem_raw[];
  // The swizzle modes act on shared-address bits: tiles start 1024-byte aligned
  // (the spec's smem_bytes() includes the 1024 bytes this may skip).
  unsigned char* const fg_smem = fg_smem_raw + ((1024u - (fg_smem_addr(fg_smem_raw) & 1023u)) & 1023u);
  u16* const sQ = reinterpret_cast<u16*>(fg_smem);
  u16* const sK = sQ + Q_REGION;
  u16* const sV = sK + STAGES * K_STAGE;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wg_row0 = (warp >> 2) * 64;  // first block row of this warpgroup

  const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p);
  const int seqlen_k = blk.seqlen_k, rows_valid = blk.rows_valid, n_tiles = blk.n_tiles;
  const i64 b = blk.b, h = blk.h;
  const u16* const q_ptr = blk.q;
  const u16* const k_ptr = blk.k;
  const u16* const v_ptr = blk.v;

  // ---- K/V pipeline ----
  // K tile t and V tile t live in buffer t % STAGES (STAGES >= 2). Iteration j
  // starts with one barrier, which every warpgroup reaches only once its S of
  // tile j and its P.V of tile j-1 are complete: the buffers of K[j] and V[j-1]
  // are then free and take K[j+STAGES] and V[j+STAGES-1] (one copy group per
  // iteration; K runs one tile ahead of V). K[j+1] and V[j] must have landed:
  // they came in the group issued STAGES-1 iterations earlier, so STAGES-2
  // newer groups may still be in flight.
  auto load_k = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sKs = sK + (tile % STAGES) * K_STAGE;
      const u16* kg = k_ptr + (i64)n0 * p.k_stride_seq;
      const int kv_valid = seqlen_k - n0;
@@LOAD_K@@
    }
  };
  auto load_v = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * BLOCK_N;
      u16* sVs = sV + (tile % STAGES) * V_STAGE;
      const u16* vg = v_ptr + (i64)n0 * p.v_stride_seq;
      const int kv_valid = seqlen_k - n0;
@@LOAD_V@@
    }
  };
  // The groups of iterations -STAGES..-1: {K[i+STAGES], V[i+STAGES-1]}.
#pragma unroll
  for (int i = 0; i < STAGES; ++i) {
    load_k(i);
    if (i >= 1) load_v(i - 1);
    fg_copy_commit();
  }

  // ---- Q: scale, round, stage (read by every S wgmma of this warpgroup) ----
  const float scale = (float)p.softmax_scale;
@@LOAD_Q@@

  float o[1][OT][4];
  float row_max[1][2], row_sum[1][2], corr[1][2];
#pragma unroll
  for (int i = 0; i < OT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
  row_max[0][0] = row_max[0][1] = fg_neg_inf();
  row_sum[0][0] = row_sum[0][1] = 0.f;

  float s[1][NT][4];  // S of one tile (wgmma accumulators), then P in f32
  u32 pa[BLOCK_N / 16][4];  // P rounded to the input dtype: the A fragments of P.V
  // S = Qs . K^T of K tile `tile` (issued and committed, not waited for).
  auto qk = [&](int tile) {
    const u32 q_tile = fg_smem_addr(sQ);
    const u32 k_tile = fg_smem_addr(sK + (tile % STAGES) * K_STAGE);
    fg_wgmma_fence();
@@QK@@
    fg_wgmma_commit();
  };
  auto to_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      pa[kk][0] = fg_pack_in(s[0][2 * kk][0], s[0][2 * kk][1]);
      pa[kk][1] = fg_pack_in(s[0][2 * kk][2], s[0][2 * kk][3]);
      pa[kk][2] = fg_pack_in(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pa[kk][3] = fg_pack_in(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  };

  fg_copy_wait<STAGES - 1>();  // K[0]
  fg_fence_proxy_async();       // and Q's stores
  __syncthreads();
  if (n_tiles > 0) {
    qk(0);
    fg_wgmma_wait<0>();
    fg_reg_fence(s);
    fg_softmax(p, blk, 0, warp, g, t, s, row_max, row_sum, corr);
    to_p();
  }
  // Iteration j (FlashAttention-3's intra-warpgroup overlap, arXiv:2407.08608
  // section 3.2): entering, P of tile j is in `pa` and corr holds the factor
  // for O (no wgmma in flight); S of tile j+1 is issued, O rescaled, P.V of
  // tile j issued, and the softmax of tile j+1 runs while P.V does. S of a tile
  // past the last is computed too (on whatever its buffer holds) and never
  // read: a branch around the wgmma would make ptxas serialize them.
  for (int j = 0; j < n_tiles; ++j) {
    fg_copy_wait<STAGES - 2>();
    fg_fence_proxy_async();
    __syncthreads();  // K[j+1], V[j] visible; K[j], V[j-1] buffers free
    load_k(j + STAGES);
    load_v(j + STAGES - 1);
    fg_copy_commit();
    qk(j + 1);
    fg_rescale_o(o, corr);
    fg_wgmma_fence();
    const u32 v_tile = fg_smem_addr(sV + (j % STAGES) * V_STAGE);
@@PV@@
    fg_wgmma_commit();
    fg_wgmma_wait<1>();  // S of tile j+1 complete (P.V of tile j may still run)
    fg_reg_fence(s);
    const bool next = j + 1 < n_tiles;
    if (next) fg_softmax(p, blk, j + 1, warp, g, t, s, row_max, row_sum, corr);
    fg_wgmma_wait<0>();  // P.V of tile j complete
    fg_reg_fence(o);
    if (next) to_p();
  }
  fg_copy_wait<0>();

  // ---- epilogue: normalise, LSE, stage O through shared memory, 16-byte stores ----
  float inv[1][2];
  fg_finish_rows(p, blk, warp, g, t, row_max, row_sum, inv);
  __syncthreads();  // every warpgroup is done reading sQ and the K/V buffers
  u16* const sO = sQ;
@@STAGE_O@@
  __syncthreads();
  u16* const o_ptr = static_cast<u16*>(p.o) + b * p.o_stride_batch + h * p.o_stride_head + (i64)blk.m_start * p.o_stride_seq;
@@STORE_O@@
}
