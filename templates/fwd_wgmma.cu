// ---- forward attention, warpgroup wgmma.mma_async m64nNk16 (templates/fwd_wgmma.cu) ----
// sm_90a, warp-specialized and persistent.
// Block = WARPS / 4 consumer warpgroups (one to three; BLOCK_M = 64 * WARPS / 4
// query rows, 64 per warpgroup) + one producer warpgroup. Each block loops
// over work items (m block, head, batch); the producer's first thread streams
// every item's K/V tiles into a STAGES-deep ring of shared buffers with TMA
// (cp.async.bulk.tensor, 2-D boxes of BLOCK_N rows x one head-dim chunk, the
// swizzle done by the copy engine) and mbarriers (PTX ISA "Parallel
// Synchronization and Communication Instructions: mbarrier", "Tensor Copy
// Instructions: cp.async.bulk.tensor"): a stage's "full" barrier completes when
// its bytes have landed, its "empty" barrier when every consumer warp's wgmma
// that read it has completed. So the next item's K/V arrive while the
// consumers finish the current item, and the consumers issue no copies.
// setmaxnreg moves registers from the producer (24) to the consumers.
// Consumers: within a warpgroup warp w holds rows 16w..16w+15 in the m16n8
// accumulator layout, so the softmax, masking and epilogue pieces are the ones
// of the mma.sync kernel (fwd_m16_parts.cuh, M_SLICES = 1).
//   S = Qs.K^T: wgmma with A (Q) and B (K) read from shared memory, both
//     K-major (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate",
//     "Matrix Descriptor", "Shared Memory Matrix Layout": K-major, swizzled).
//   O += P.V: A = P from registers (the S accumulators rounded to the input
//     dtype; the m64nNk16 A register fragment of k block kk is the accumulator
//     of n8 tiles 2kk and 2kk+1), B = V read from shared memory, MN-major
//     (imm-trans-b = 1).
// Shared tiles are head-dim chunks at most 64 wide: a chunk of W elements has
// W*2-byte rows, and the XOR swizzle of fg_swz<W> is exactly the 128-byte (W =
// 64), 64-byte (32) or 32-byte (16) swizzle mode of the descriptor and of the
// tensor map once the chunk starts on a 1024-byte boundary. The softmax of a
// tile runs while the tensor cores compute P.V of the previous one
// (FlashAttention-3, arXiv:2407.08608, section 3.2).

@@CONSTANTS@@

constexpr int THREADS = WARPS * 32;          // consumer threads (what the shared parts call THREADS)
constexpr int PRODUCER_THREADS = 128;        // one warpgroup: setmaxnreg acts on whole warpgroups
constexpr int CTA_THREADS = THREADS + PRODUCER_THREADS;
// Two blocks per SM with one consumer warpgroup, one with two or three (the register
// file is 64K 32-bit registers per SM on every sm_90 part).
constexpr int MIN_BLOCKS = WARPS == 4 ? 2 : 1;
constexpr int LAUNCH_REGS = 65536 / (CTA_THREADS * MIN_BLOCKS) / 8 * 8;  // what ptxas allots at launch
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS_ALL = (LAUNCH_REGS + (LAUNCH_REGS - PRODUCER_REGS) * PRODUCER_THREADS / THREADS) / 8 * 8;
constexpr int CONSUMER_REGS = CONSUMER_REGS_ALL > 240 ? 240 : CONSUMER_REGS_ALL;
constexpr int M_SLICES = 1;              // one 16-row slice per warp
constexpr int KEY_WARPS = 1;             // every warp sees the whole key tile
constexpr int BN_W = BLOCK_N;
constexpr int NT = BLOCK_N / 8;          // n8 tiles of S
constexpr int OT = HEAD_DIM_V / 8;       // n8 tiles of O
constexpr bool ASYNC_COPY = true;
constexpr int Q_REGION = BLOCK_M * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
// With two consumer warpgroups (WG_OWN_ROWS; bench/NOTES.md session 26: the
// short D128 rows +2-7 %, while three warpgroups under a causal mask lost
// 2-6 % this way) consumer warpgroup w owns elements [w * WG_SLICE, (w + 1) * WG_SLICE) of sQ:
// its 64 rows of Q, chunk after chunk ([chunk][64][width], each chunk at 64 *
// its column offset), and later its 64 rows of O in the same form. Q's chunks
// (of HEAD_DIM) and O's (of HEAD_DIM_V) may differ in width, so each
// warpgroup's rows stay in its own slice: no warpgroup's O lands on another's Q.
// (A slice is 128 * max(HEAD_DIM, HEAD_DIM_V) bytes, a chunk starts at 128 *
// its offset: both multiples of 1024, the 128-byte swizzle's alignment.)
// With one or three, the block's Q and O rows are staged together ([chunk][BLOCK_M][width])
// and the consumers synchronize as one (fg_consumer_sync).
constexpr bool WG_OWN_ROWS = WARPS == 8;  // two consumer warpgroups
constexpr int WG_SLICE = 64 * (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V);
// K and V stages start on 1024-byte boundaries too (e.g. 80 keys x 80 columns
// is 12800 bytes): their strides are rounded up to 512 elements.
constexpr int K_STAGE = (BLOCK_N * HEAD_DIM + 511) / 512 * 512;
constexpr int V_STAGE = (BLOCK_N * HEAD_DIM_V + 511) / 512 * 512;
constexpr unsigned K_TILE_BYTES = 2u * BLOCK_N * HEAD_DIM;    // what one K tile's TMA boxes deliver
constexpr unsigned V_TILE_BYTES = 2u * BLOCK_N * HEAD_DIM_V;
constexpr int TILE_BYTES = 2 * (Q_REGION + STAGES * (K_STAGE + V_STAGE));
// The full/empty mbarriers of the K and V stages, then 8 bytes for the lowest
// non-finite V key of a tile a causal mask cuts (`band_key` in the kernel), or
// with a window a bit per key of a cut tile that has one (`window_bits`,
// WIN_WORDS words, padded to 8 bytes).
constexpr int WIN_WORDS = (BLOCK_N + 31) / 32;
// PAGED: log2 of the largest power of two dividing BLOCK_N (96: 32), which
// bounds a TMA box: boxes of min(page_size, that) keys never cross a page.
constexpr int BLOCK_N_POW2_LOG2 = BLOCK_N % 256 == 0 ? 8 : BLOCK_N % 128 == 0 ? 7 : BLOCK_N % 64 == 0 ? 6
                                : BLOCK_N % 32 == 0 ? 5 : BLOCK_N % 16 == 0 ? 4 : 3;
constexpr int BAR_BYTES = 8 * 4 * STAGES + (WINDOW ? 8 * ((WIN_WORDS + 1) / 2) : 8);
// The tiles start on a 1024-byte boundary, which skips up to 1023 bytes; the
// mbarriers go into the skipped part or after the tiles (then fewer than
// BAR_BYTES were skipped).
static_assert(TILE_BYTES + 1024 == SMEM_BYTES, "the kernel's shared-memory layout and KernelSpec::smem_bytes disagree");
static_assert(BAR_BYTES <= 512, "the mbarriers must fit beside the alignment");
static_assert(!PAGED || BLOCK_N / 8 <= 32, "a paged tile's boxes (at least 8 keys each) are one per lane of the producer's first warp");
constexpr int UNIT_K = 16;  // for fwd_m16_parts.cuh's warp-level P.V steps (not called here)
typedef unsigned long long u64;

@@TMA_MAPS@@

@@M16_PARTS@@

// ---- wgmma plumbing (PTX ISA: wgmma.fence, wgmma.commit_group, wgmma.wait_group,
// fence.proxy.async) ----
FG_DEVICE void fg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
FG_DEVICE void fg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
FG_DEVICE void fg_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (st.shared) is read by wgmma
// through the async proxy: each writer fences before the barrier.
FG_DEVICE void fg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// One s32 in shared memory at shared address `a` (PTX ISA: ld, st, atom).
FG_DEVICE int fg_ld_shared_s32(u32 a) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}
FG_DEVICE void fg_st_shared_s32(u32 a, int v) { asm volatile("st.shared.s32 [%0], %1;" ::"r"(a), "r"(v) : "memory"); }
FG_DEVICE void fg_atom_min_shared_s32(u32 a, int v) {
  asm volatile("red.shared.min.s32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
FG_DEVICE void fg_red_or_shared_b32(u32 a, u32 v) { asm volatile("red.shared.or.b32 [%0], %1;" ::"r"(a), "r"(v) : "memory"); }
// Keeps the compiler from moving accesses to accumulators across wgmma issue/wait.
template <int N>
FG_DEVICE void fg_reg_fence(float (&r)[1][N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(r[0][i][0]), "+f"(r[0][i][1]), "+f"(r[0][i][2]), "+f"(r[0][i][3])::"memory");
}
// Barrier 1 of the consumer threads only (the producer warpgroup never joins).
FG_DEVICE void fg_consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory"); }
// Ping-pong (two or three consumer warpgroups): the warpgroups take turns
// issuing their GEMMs, round robin, so that one's softmax runs while the
// others' GEMMs occupy the tensor cores (FlashAttention-3, arXiv:2407.08608,
// section 3.1). Named barrier 3 + w is warpgroup w's turn: it waits there
// (bar.sync, TURN_THREADS = its 128 threads + the previous warpgroup's 128
// arrivals) before its QK^T, and after committing its P.V passes the turn to
// warpgroup (w + 1) mod NWG (bar.arrive on that one's barrier; PTX ISA
// "bar.sync / bar.arrive"). The last warpgroup passes once at the start, so
// warpgroup 0 goes first. A turn window (wait .. pass) never contains a
// consumer-wide barrier (fg_consumer_sync, fg_consumers_any): one warpgroup
// would hold the turn there while another waits for it. So a tile's
// consumer-wide steps (the V zeroing of a varlen/paged last tile, the band's
// scan of V) run before its window: each warpgroup reaches them having passed
// its previous turn, and every tile takes turns.
constexpr int NWG = WARPS / 4;  // consumer warpgroups
constexpr bool PINGPONG = NWG >= 2;
constexpr int TURN_THREADS = 256;
static_assert(NWG <= 3, "at most three consumer warpgroups (turn barriers 3..5)");
// Where O is rescaled: with head_dim_v >= 128 at the end of a tile, after
// its P.V and outside the turn window, so the next warpgroup's turn comes
// as soon as this one's wgmmas are issued (the window's length bounds the
// tile pair when the GEMMs are long); below, inside the window, where the
// rescale's FMULs overlap the QK^T wgmma and the softmax's chain is what
// bounds the tile (D64: 2-4 % slower the other way; bench/NOTES.md
// session 22, steps 54-55).
constexpr bool RESCALE_AFTER_PV = HEAD_DIM_V >= 128;
// The last tile of a work item issues P.V alone (see the tile step): with
// three consumer warpgroups, unmasked or at head dims up to 64. Measured on an
// H100 (bench/NOTES.md session 28): +1.6-6.1 % there; 4-6 % slower on the
// masked D96 kernels (a third copy of the tile step at 160 registers a
// thread) and 3-5 % on bf16 D128 (two warpgroups).
constexpr bool PEEL_LAST = NWG == 3 && (MASK == 0 || (HEAD_DIM <= 64 && HEAD_DIM_V <= 64));
// (Immediate barrier ids: with a register id ptxas reserves all 16.)
template <int B>
FG_DEVICE void fg_bar_sync_turn() {
  asm volatile("bar.sync %0, %1;" ::"n"(B), "n"(TURN_THREADS) : "memory");
}
template <int B>
FG_DEVICE void fg_bar_arrive_turn() {
  asm volatile("bar.arrive %0, %1;" ::"n"(B), "n"(TURN_THREADS) : "memory");
}
FG_DEVICE void fg_turn_wait(int wg) {
  if constexpr (NWG == 2) {
    if (wg == 0) fg_bar_sync_turn<3>();
    else fg_bar_sync_turn<4>();
  } else if constexpr (NWG == 3) {
    if (wg == 0) fg_bar_sync_turn<3>();
    else if (wg == 1) fg_bar_sync_turn<4>();
    else fg_bar_sync_turn<5>();
  }
}
FG_DEVICE void fg_turn_pass(int wg) {
  if constexpr (NWG == 2) {
    if (wg == 0) fg_bar_arrive_turn<4>();
    else fg_bar_arrive_turn<3>();
  } else if constexpr (NWG == 3) {
    if (wg == 2) fg_bar_arrive_turn<3>();
    else if (wg == 0) fg_bar_arrive_turn<4>();
    else fg_bar_arrive_turn<5>();
  }
}

// This warpgroup's threads alone (named barrier 6 + wg, 128 threads; with one
// warpgroup, barrier 1 as fg_consumer_sync): what only one warpgroup reads and
// writes, its slice of sQ (WG_SLICE: Q, then O), synchronizes there, so the warpgroups
// do not wait for each other between work items and keep the offset of their
// turns (a warpgroup's epilogue and next Q run under the others' GEMMs).
template <int B>
FG_DEVICE void fg_bar_sync_wg() {
  asm volatile("bar.sync %0, 128;" ::"n"(B) : "memory");
}
// Without WG_OWN_ROWS, every consumer thread (fg_consumer_sync).
FG_DEVICE void fg_wg_sync(int wg) {
  if constexpr (!WG_OWN_ROWS) fg_consumer_sync();
  else if (wg == 0) fg_bar_sync_wg<6>();
  else fg_bar_sync_wg<7>();
}

// ---- mbarrier and TMA (PTX ISA: mbarrier.init / arrive / arrive.expect_tx /
// try_wait.parity, cp.async.bulk.tensor, setmaxnreg, prefetch.tensormap) ----
FG_DEVICE void fg_mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
FG_DEVICE void fg_mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
FG_DEVICE void fg_mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase with the given parity has completed. SLEEP (the
// producer's waits for a free stage, which last about a tile's math): each try
// may suspend the thread until the phase completes, up to the time hint (PTX
// ISA "mbarrier.test_wait / mbarrier.try_wait": suspendTimeHint, in ns), so a
// waiting producer warp does not spin on the issue slots of the consumer warps
// beside it on its SM sub-partition. Without it (the consumers' waits, which
// are short or none) the thread retries at once.
template <bool SLEEP = false>
FG_DEVICE void fg_mbar_wait(u32 bar, u32 parity) {
  if constexpr (SLEEP) {
    asm volatile(
        "{\n.reg .pred done;\nFG_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra FG_WAIT;\n}\n" ::"r"(bar),
        "r"(parity), "n"(10000000)
        : "memory");
  } else {
    asm volatile(
        "{\n.reg .pred done;\nFG_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra FG_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
  }
}
// One box of the 4-D tensor map (column, row, head, batch) into shared `dst`;
// completion is counted in bytes on `bar`.
FG_DEVICE void fg_tma_load(u32 dst, const FgTmaMap& map, int col, int row, int head, int batch, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(col), "r"(row), "r"(head), "r"(batch), "r"(bar)
      : "memory");
}
// Arrives on mbarrier `bar` once every cp.async this thread issued before has
// landed; .noinc: the arrival counts against the barrier's expected count
// (PTX ISA "cp.async.mbarrier.arrive").
FG_DEVICE void fg_cp_async_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// PAGED with gathered pages (below 2^GATHER_PAGE_SHIFT keys): rows row0 .. row0 + nr - 1 (nr <= NR <= 32) of a
// K/V tile, NC chunks of W columns from column OFF (chunk c: [OFF + c W, OFF + (c + 1) W)),
// into the tile's swizzled sub-tiles from shared address `tile` (chunk c's at
// 2 BLOCK_N (OFF + c W) bytes on, fg_swz<W>: the layout the descriptors read), by one
// producer warp. Lane j holds the element offset of row row0 + j from the head's first
// row (`row_off`: its page's and slot's, computed once; 0 for a row from `valid` on); a
// pass takes its row's with two shuffles and copies that row's unit in every chunk.
// UPR = W / 8 lanes per row, 16 bytes each, so a pass reads 32 / UPR whole row chunks
// (128-byte lines at W = 64). Rows from `valid` on are zero-filled (src-size 0, from the
// head's first row, which is valid). The per-copy work is the byte address and the size:
// fg_swz's pattern repeats every 8 rows, so passes 8 rows apart write at a constant
// distance from one base (K bases in all), and no address is selected per copy.
template <int W, int OFF, int NC, int NR>
FG_DEVICE void fg_gather_rows(u32 tile, const u16* head, unsigned long long row_off, int row0, int nr, int valid,
                              int lane) {
  constexpr int UPR = W / 8, RPP = 32 / UPR, PASSES = (NR + RPP - 1) / RPP, K = RPP >= 8 ? 1 : 8 / RPP;
  static_assert(PASSES * RPP <= 32, "a pass's rows are lanes of the warp");
  // (the lane through an empty asm: what derives from it is computed here, per call,
  // instead of hoisted out of the item loop and held through it in 24 registers)
  asm volatile("" : "+r"(lane));
  const int unit = lane % UPR, sub = lane / UPR;
  const char* const first = reinterpret_cast<const char*>(head + OFF + unit * 8);
  const unsigned long long bytes_off = row_off * 2;
  const u32 lo = (u32)bytes_off, hi = (u32)(bytes_off >> 32);
  u32 base[K];
#pragma unroll
  for (int k = 0; k < K; ++k) base[k] = tile + 2 * (BLOCK_N * OFF + fg_swz<W>(row0 + k * RPP + sub, unit));
#pragma unroll
  for (int it = 0; it < PASSES; ++it) {
    const int j = it * RPP + sub;
    const unsigned long long off = ((unsigned long long)__shfl_sync(0xffffffffu, hi, j) << 32) |
                                   __shfl_sync(0xffffffffu, lo, j);
    if (j < nr) {
      const int size = row0 + j < valid ? 16 : 0;
      const char* const src = first + off;
      const u32 dst = base[it % K] + 2u * (it / K) * (K * RPP * W);
#pragma unroll
      for (int c = 0; c < NC; ++c) fg_cp_async16(dst + 2 * BLOCK_N * W * c, src + 2 * W * c, size);
    }
  }
}
FG_DEVICE void fg_tma_prefetch(const FgTmaMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&map)) : "memory");
}

// Matrix descriptor of a swizzled sub-tile of W-element (W*2-byte) rows that
// starts at shared address `addr` (PTX ISA "Matrix Descriptor Format": bits
// 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte
// offset >> 4, 62-63 swizzle mode: 1 = 128B, 2 = 64B, 3 = 32B). Rows are
// grouped by 8 (one swizzle atom of 8 * W * 2 bytes); the distance between
// groups is the stride byte offset. The leading byte offset LBO (bytes) is
// not used by the one-atom layouts (K-major: one k16 step lies inside a row;
// MN-major: N = W is one atom wide) and defaults to the same value; an
// MN-major operand several atoms wide along N (fg_pv_whole) gives the distance
// between its atoms.
// The kernel keeps a tile's start address in descriptor units (`fg_desc_units`:
// bytes / 16, the start-address field) and forms each wgmma's descriptor as
// that plus a constant: a shared address of the block is below 2^18 (at most
// 228 KB of shared memory), so the sum stays inside the 14-bit field, and the
// other fields are constants (the high word entirely). One 32-bit add per
// wgmma, instead of masking and shifting every address.
FG_DEVICE u32 fg_desc_units(u32 addr) { return (addr & 0x3FFFFu) >> 4; }
template <int W, u32 LBO = 8 * W * 2>
FG_DEVICE u64 fg_desc(u32 units) {
  constexpr u32 SWIZZLE = W == 64 ? 1 : (W == 32 ? 2 : 3);
  constexpr u32 GROUP = 8 * W * 2;
  static_assert(LBO % 16 == 0 && (LBO >> 4) < (1u << 14), "fg_desc: the leading byte offset must fit the 14-bit field");
  return ((u64)((GROUP >> 4) | (SWIZZLE << 30)) << 32) | (units + ((LBO >> 4) << 16));  // (units < 2^14)
}

@@WGMMA_OPS@@

// S (+)= Q[:, OFF:OFF+W] . K[:, OFF:OFF+W]^T: W / 16 k16 steps, each +32 bytes
// along the rows of both sub-tiles (inside one swizzle row). q and k: the
// sub-tiles' start addresses in descriptor units (fg_desc_units).
template <int W, int OFF>
FG_DEVICE void fg_qk(u32 q, u32 k, float (&s)[1][NT][4]) {
#pragma unroll
  for (int ks = 0; ks < W / 16; ++ks)
    fg_wgmma_qk(s, fg_desc<W>(q + 2 * ks), fg_desc<W>(k + 2 * ks), OFF == 0 && ks == 0 ? 0 : 1);
}

// O[:, OFF:OFF+W] += P . V[:, OFF:OFF+W]: one k16 step per 16 keys (two row
// groups, 32 * W bytes). v: the sub-tile's start address in descriptor units.
template <int W, int OFF>
FG_DEVICE void fg_pv(u32 v, const u32 (&pa)[BLOCK_N / 16][4], float (&o)[1][OT][4]) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) FgPv<W>::template mma<OFF / 8>(o, pa[kk], fg_desc<W>(v + kk * 2 * W));
}

// O += P . V over all of V's head-dim chunks at once (N = HEAD_DIM_V), when every
// chunk is 64 wide: one wgmma per k16 step. The chunks are then the swizzle atoms of
// one MN-major operand along N, BLOCK_N * 128 bytes apart (the leading byte offset of
// an MN-major layout), and 8-key groups lie 1024 bytes apart (the stride byte offset)
// as in one chunk (PTX ISA "Matrix Descriptor Format", "Shared Memory Matrix Layout").
// v: the tile's start address in descriptor units.
template <int W>
FG_DEVICE void fg_pv_whole(u32 v, const u32 (&pa)[BLOCK_N / 16][4], float (&o)[1][OT][4]) {
  static_assert(W == HEAD_DIM_V && W % 64 == 0 && W <= 256, "fg_pv_whole: 64-wide chunks, N = HEAD_DIM_V <= 256");
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) FgPv<W>::template mma<0>(o, pa[kk], fg_desc<64, BLOCK_N * 128>(v + kk * 128));
}

// ---- causal masks and non-finite V (fwd_block.cuh, "causal masks and P.V") --
// A masked key's weight is 0, but wgmma multiplies it by the key's V, and 0
// times inf or NaN is NaN. The block takes its key tiles from the last one
// down (the producer and the consumers alike), so the first
// tile taken is the one the causal mask cuts and O is 0 before it. After that
// tile's P.V each warp checks its O (one FFMA per value and a vote): almost
// always every value is finite and nothing else runs; otherwise the warp
// recomputes its rows' P.V of that tile with FMAs that skip the keys a row does
// not see (fg_pv_redo), which keeps the values of the keys it sees, non-finite
// ones included. No barrier, and V is never written. On a later cut tile (a
// diagonal that does not fall on a tile edge cuts two) and on the tiles a
// window cuts, O holds earlier tiles, so the consumers look for a non-finite V
// value at the keys row 0 of the block does not see (fg_v_scan,
// fg_consumers_any) before P.V; almost always there is none, and wgmma reads
// the tile as it is. Otherwise the block finds the lowest such key k, zeroes
// those values in shared memory (wgmma then reads the cleaned tile), and the
// rows that see k get NaN (fg_poison_rows): with causal masks a row that sees
// a key sees every lower one, so the other rows see no cleaned value. Those
// decisions are the block's (every consumer thread takes part). Nothing of it
// is a warp-level mma: mma.sync code in this kernel makes ptxas keep the key
// loop's descriptor arithmetic out of the uniform datapath (an R2UR before
// every wgmma; bench/NOTES.md).

// Sub-tile `sub` of a V stage (W columns, BLOCK_N keys; the swizzle moves
// 16-byte units only within a key's row) at keys from `from` on, 16 bytes at
// a time, by consumer thread `i` (of THREADS): `bad` gathers the non-finite
// halves (nonzero: some), `lowest` the lowest key that has one, and with CLEAN
// they are zeroed. The search (CLEAN false, every band tile) loads all of a
// thread's units first, from clamped addresses, and tests them without a
// branch, so the loads are in flight together; the cleaning pass is rare.
// With `bits` (WINDOW: the shared address of window_bits, else 0) the
// cleaning pass also sets the bit of each key it cleans there.
template <int W, bool CLEAN>
FG_DEVICE void fg_v_scan(u16* sub, int from, int i, u32& bad, int& lowest, u32 bits) {
  constexpr int UNITS = BLOCK_N * W / 8, IT = (UNITS + THREADS - 1) / THREADS;
  U4* const u = reinterpret_cast<U4*>(sub);
  if constexpr (!CLEAN) {
    constexpr u32 ADD = IS_BF16 ? 0x00800080u : 0x04000400u;  // carries a half's all-ones exponent into its sign bit
    U4 x[IT];
#pragma unroll
    for (int it = 0; it < IT; ++it) x[it] = u[min(it * THREADS + i, UNITS - 1)];
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int k = it * THREADS + i;
      const u32 top = (((x[it].x & 0x7fff7fffu) + ADD) | ((x[it].y & 0x7fff7fffu) + ADD) |
                       ((x[it].z & 0x7fff7fffu) + ADD) | ((x[it].w & 0x7fff7fffu) + ADD)) &
                      0x80008000u;
      const bool hit = top != 0u && k >= from * (W / 8) && (UNITS % THREADS == 0 || k < UNITS);
      bad |= hit ? top : 0u;
      lowest = hit ? min(lowest, k / (W / 8)) : lowest;
    }
  } else {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int k = it * THREADS + i;
      if ((UNITS % THREADS == 0 || k < UNITS) && k >= from * (W / 8)) {
        U4 x = u[k];
        const U4 m = {fg_nonfinite_halves<IS_BF16>(x.x), fg_nonfinite_halves<IS_BF16>(x.y),
                      fg_nonfinite_halves<IS_BF16>(x.z), fg_nonfinite_halves<IS_BF16>(x.w)};
        if ((m.x | m.y | m.z | m.w) != 0u) {
          x.x &= ~m.x, x.y &= ~m.y, x.z &= ~m.z, x.w &= ~m.w;
          u[k] = x;
          if (bits != 0u) {
            const int key = k / (W / 8);
            fg_red_or_shared_b32(bits + 4 * (key >> 5), 1u << (key & 31));
          }
        }
      }
    }
  }
}

// Zero the rows (keys) from `from` on of sub-tile `sub` of a V stage (W
// columns; a key's row is W / 8 16-byte units, kept together by the swizzle),
// by consumer thread `i` (of THREADS).
template <int W>
FG_DEVICE void fg_v_zero(u16* sub, int from, int i) {
  constexpr int UNITS = BLOCK_N * W / 8;
  U4* const u = reinterpret_cast<U4*>(sub);
  for (int k = from * (W / 8) + i; k < UNITS; k += THREADS) u[k] = U4{0u, 0u, 0u, 0u};
}

// The rare path of the first band tile's check (see `tile` in the kernel): this
// warp's O columns [OFF, OFF + W) recomputed as P.V of the tile with FMAs,
// from P (pa, the values wgmma read, in the input dtype) and V sub-tile `sub`
// (W columns, fg_swz<W>), skipping the keys a row does not see (tile-relative
// keys above lim0 for row g, lim1 for row g + 8). A non-finite V value at such
// a key then adds nothing, where wgmma multiplies its weight 0 by it (NaN); a
// value at a key the row sees makes the row non-finite, as in the reference.
// O before the tile is 0 (it is the first tile), so the sums replace it. Lane
// t of a quad holds P at keys 2t, 2t + 1 (+ 8) of each k16 step (the m16n8 A
// layout, to_p): each key's weights are shuffled from their lane. A runtime
// key loop (rare code, kept small) with no mma (see "causal masks" above).
template <int W, int OFF>
FG_DEVICE void fg_pv_redo(const u16* sub, const u32 (&pa)[BLOCK_N / 16][4], float (&o)[1][OT][4], int lim0, int lim1,
                          int lane) {
  constexpr int T0 = OFF / 8, TN = W / 8;
  const int t = lane & 3;
#pragma unroll
  for (int u = 0; u < TN; ++u) o[0][T0 + u][0] = o[0][T0 + u][1] = o[0][T0 + u][2] = o[0][T0 + u][3] = 0.f;
#pragma unroll 1
  for (int k = 0; k < BLOCK_N; ++k) {
    const int kk = k >> 4, kl = k & 15;
    u32 a = 0u, b = 0u;
#pragma unroll
    for (int q = 0; q < BLOCK_N / 16; ++q)
      if (q == kk) {
        a = kl < 8 ? pa[q][0] : pa[q][2];
        b = kl < 8 ? pa[q][1] : pa[q][3];
      }
    const int src = (lane & ~3) | ((kl & 7) >> 1), sh = (kl & 1) * 16;
    a = __shfl_sync(0xffffffffu, a, src);
    b = __shfl_sync(0xffffffffu, b, src);
    const float p0 = fg_in_to_f32((u16)(a >> sh)), p1 = fg_in_to_f32((u16)(b >> sh));
    const bool see0 = k <= lim0, see1 = k <= lim1;
#pragma unroll
    for (int u = 0; u < TN; ++u) {
      const u32 v = *reinterpret_cast<const u32*>(sub + fg_swz<W>(k, u) + 2 * t);
      const float x0 = fg_in_to_f32((u16)(v & 0xffffu)), x1 = fg_in_to_f32((u16)(v >> 16));
      if (see0) {
        o[0][T0 + u][0] = fmaf(p0, x0, o[0][T0 + u][0]);
        o[0][T0 + u][1] = fmaf(p0, x1, o[0][T0 + u][1]);
      }
      if (see1) {
        o[0][T0 + u][2] = fmaf(p1, x0, o[0][T0 + u][2]);
        o[0][T0 + u][3] = fmaf(p1, x1, o[0][T0 + u][3]);
      }
    }
  }
}

// Whether `v` holds for any consumer thread (named barrier 2 of THREADS
// threads with an OR reduction; PTX ISA "bar.red"). Every consumer calls it.
FG_DEVICE bool fg_consumers_any(bool v) {
  u32 r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n barrier.cta.red.or.pred q, 2, %2, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((u32)v), "n"(THREADS)
      : "memory");
  return r != 0u;
}

// The work item of this block's round r: rounds alternate direction (block i
// takes item i, then the (2G-1-i)-th, ...), so a block that drew a long causal
// item in one round draws a short one in the next.
FG_DEVICE i64 fg_work_item(i64 round) {
  const i64 G = gridDim.x;
  return round * G + ((round & 1) ? G - 1 - (i64)blockIdx.x : (i64)blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(CTA_THREADS, MIN_BLOCKS)
    @@KERNEL_NAME@@(const FwdParams p, const __grid_constant__ FgTmaMaps tma) {
  extern __shared__ __align__(128) unsigned char fg_smem_raw[];
  // The swizzle modes act on shared-address bits: tiles start 1024-byte aligned
  // (the spec's smem_bytes() includes the 1024 bytes this may skip). The
  // mbarriers take BAR_BYTES of those 1024: before the tiles when the skipped
  // part holds them, else after the tiles (then at most BAR_BYTES were skipped).
  const u32 skip = (1024u - (fg_smem_addr(fg_smem_raw) & 1023u)) & 1023u;
  unsigned char* const fg_smem = fg_smem_raw + skip;
  u16* const sQ = reinterpret_cast<u16*>(fg_smem);
  u16* const sK = sQ + Q_REGION;
  u16* const sV = sK + STAGES * K_STAGE;
  const u32 bars = fg_smem_addr(skip >= (u32)BAR_BYTES ? fg_smem - BAR_BYTES : fg_smem + TILE_BYTES);
  // Stage s: K full, K empty, V full, V empty.
  auto full_k = [&](u32 s) { return bars + 8 * s; };
  auto empty_k = [&](u32 s) { return bars + 8 * (STAGES + s); };
  auto full_v = [&](u32 s) { return bars + 8 * (2 * STAGES + s); };
  auto empty_v = [&](u32 s) { return bars + 8 * (3 * STAGES + s); };
  const u32 band_key = bars + 8 * 4 * STAGES;  // a cut tile's lowest non-finite V key (an s32, BLOCK_N: none)
  const u32 window_bits = band_key;             // WINDOW instead: WIN_WORDS words, a bit per key
  // PAGED with pages below 2^GATHER_PAGE_SHIFT keys (gen/limits.hpp
  // kWgmmaGatherPageBelow: below 8 a TMA box would be under one 8-row swizzle
  // atom, and up to 16 the gather is the faster): the whole producer warpgroup gathers the tiles with cp.async, a
  // row per key through the page table (fg_gather_rows, with the swizzle of
  // fg_swz, which the descriptors read), and each producer
  // thread's cp.async.mbarrier.arrive completes the stage's full barrier.
  // Those copies write shared memory through the generic proxy, so each
  // consumer fences (fence.proxy.async) after its wait, before its wgmma.
  const bool gather = PAGED && (int)p.page_shift < GATHER_PAGE_SHIFT;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      // the producer's arrive.expect_tx (+ the tile's bytes), or (gather) one arrive per producer thread
      fg_mbar_init(full_k(s), gather ? PRODUCER_THREADS : 1);
      fg_mbar_init(empty_k(s), WARPS);   // one arrive per consumer warp
      fg_mbar_init(full_v(s), gather ? PRODUCER_THREADS : 1);
      fg_mbar_init(empty_v(s), WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const i64 n_items = p.num_m_blocks * p.heads_q * p.batch;

  // K/V tile number c (counted over all items of this block) lives in stage
  // c % STAGES; its full barrier completes phase c / STAGES, and its empty
  // barrier must have completed phase c / STAGES - 1 before the stage is
  // refilled with tile c.
  if (threadIdx.x >= THREADS) {
    // ---- producer warpgroup: one thread issues every copy ----
    // (PAGED: the first warp, each lane the boxes of its pages; lane 0 claims the stages;
    // gather: every thread)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
    const int plane = (int)threadIdx.x - THREADS;  // the producer thread's lane
    // The item loop, once per way of reading K/V (GATHER: the cp.async gather), so that
    // neither way's registers stay live through the other's code (24 per thread).
    const u32 sk_addr = fg_smem_addr(sK), sv_addr = fg_smem_addr(sV);  // (32-bit shared addresses)
    auto produce = [&](auto gather_tag) {
      constexpr bool GATHER = decltype(gather_tag)::value;
      u32 c = 0;
      for (i64 r = 0;; ++r) {
        const i64 item = fg_work_item(r);
        if (item >= n_items) break;
        const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p, item);
        // (VARLEN: the box rows count from the sequence's first packed key)
        const int row0 = (KEYS_FROM_KEY0 ? blk.key0 : 0) + (VARLEN ? (int)blk.k_off : 0);
        // (PAGED: the batch coordinate is the page; batch_k / batch_v then say whether it is used, 0 or 1)
        const int head_k = (int)(blk.kvh * (tma.kv_coords & 1)), batch_k = (int)((PAGED ? 1 : blk.b) * ((tma.kv_coords >> 1) & 1));
        const int head_v = (int)(blk.kvh * ((tma.kv_coords >> 2) & 1)), batch_v = (int)((PAGED ? 1 : blk.b) * ((tma.kv_coords >> 3) & 1));
        // Stage of tile number cnt in a ring whose stage-0 barriers are
        // `empty0` and `full0` (stage s: + 8 s): wait until the consumers
        // released the stage's previous tile, then announce the tile's bytes.
        auto claim = [&](u32 cnt, u32 empty0, u32 full0, u32 bytes) {
          const u32 s = cnt % STAGES;
          if (cnt >= (u32)STAGES) fg_mbar_wait<true>(empty0 + 8 * s, (cnt / STAGES - 1) & 1);
          if (plane == 0) fg_mbar_expect_tx(full0 + 8 * s, bytes);
          if (PAGED) __syncwarp();
          return s;
        };
        // PAGED: a tile is `boxes` boxes of box_rows keys (a page, or the
        // largest power of two dividing BLOCK_N; a box never crosses a page,
        // runtime/api.cpp maps the same box), those from the sequence's last key on left out (their
        // stale rows: masked in S, zeroed in V by the consumers); box i of
        // key n0 + i * box_rows is issued by lane i through the table (boxes of at least 8 keys:
        // smaller pages are gathered, above, so BLOCK_N / 8 <= 32 boxes fit the warp).
        const int box_shift = min((int)p.page_shift, BLOCK_N_POW2_LOG2), box_rows = 1 << box_shift;
        auto boxes = [&](int n0) { return PAGED ? min(BLOCK_N >> box_shift, (blk.seqlen_k - n0 + box_rows - 1) >> box_shift) : 1; };
        // GATHER: warp w of the producer copies the tile's rows w * GR .. (w + 1) * GR - 1
        // in rounds of at most 32 (a table entry per lane); K's copy also prefetches into L1
        // the table line of the warp's rows of the next tile, the one below (V's copy of this tile reads
        // this tile's entries again, from L1).
        auto gather = [&](u32 dst, const u16* head, int n0, i64 stride_page, i64 stride_seq, auto is_k) {
          constexpr int GR = BLOCK_N / 4, NR = GR < 32 ? GR : 32;
          const int lane = plane & 31, kv_valid = blk.seqlen_k - n0, shift = (int)p.page_shift;
          const u32 page_mask = (1u << shift) - 1u;
#pragma unroll
          for (int k0 = 0; k0 < GR; k0 += NR) {
            const int row0 = (plane >> 5) * GR + k0, nr = min(NR, GR - k0);
            const int key = n0 + row0 + lane;
            const unsigned long long row_off =
                lane < nr && row0 + lane < kv_valid
                    ? (unsigned long long)(u32)blk.pages[key >> shift] * (unsigned long long)stride_page +
                          (unsigned long long)((u32)key & page_mask) * (unsigned long long)stride_seq
                    : 0ull;
@@GATHER@@
            if (decltype(is_k)::value && lane == 0 && n0 - BLOCK_N >= (KEYS_FROM_KEY0 ? blk.key0 : 0))  // (the next: the tile below)
              asm volatile("prefetch.global.L1 [%0];" ::"l"(blk.pages + ((n0 + row0 - BLOCK_N) >> shift)));
          }
        };
        auto load_k = [&](u32 cnt, int n0) {
          if constexpr (GATHER) {  // every producer thread: its rows of the tile, then its arrive
            const u32 s = cnt % STAGES;
            if (cnt >= (u32)STAGES) fg_mbar_wait<true>(empty_k(s), (cnt / STAGES - 1) & 1);
            gather(sk_addr + 2u * s * K_STAGE, blk.k, n0, p.k_stride_batch, p.k_stride_seq, FgBool<true>{});
            fg_cp_async_arrive_noinc(full_k(s));
            return;
          }
          const int nb = boxes(n0);
          // (PAGED: lane i's box i, its page number read before the stage is claimed, so the
          // table's latency overlaps the wait for the consumers instead of following it)
          const int r0 = plane * box_rows, key = n0 + r0, slot = key & ((1 << (int)p.page_shift) - 1);
          const int page = PAGED && plane < nb ? blk.pages[key >> (int)p.page_shift] * batch_k : 0;
          const u32 s = claim(cnt, empty_k(0), full_k(0), PAGED ? K_TILE_BYTES / BLOCK_N * box_rows * nb : K_TILE_BYTES),
                    bar = full_k(s);
          // (PAGED: from the 32-bit base, which keeps the 24-register producer from spilling)
          const u32 dst = PAGED ? sk_addr + 2u * s * K_STAGE : fg_smem_addr(sK + s * K_STAGE);
          if constexpr (PAGED) {
            if (plane < nb) {
@@TMA_K_PAGED@@
            }
          } else {
@@TMA_K@@
          }
        };
        auto load_v = [&](u32 cnt, int n0) {
          if constexpr (GATHER) {  // every producer thread: its rows of the tile, then its arrive
            const u32 s = cnt % STAGES;
            if (cnt >= (u32)STAGES) fg_mbar_wait<true>(empty_v(s), (cnt / STAGES - 1) & 1);
            gather(sv_addr + 2u * s * V_STAGE, blk.v, n0, p.v_stride_batch, p.v_stride_seq, FgBool<false>{});
            fg_cp_async_arrive_noinc(full_v(s));
            return;
          }
          const int nb = boxes(n0);
          // (PAGED: lane i's box i, its page number read before the stage is claimed, so the
          // table's latency overlaps the wait for the consumers instead of following it)
          const int r0 = plane * box_rows, key = n0 + r0, slot = key & ((1 << (int)p.page_shift) - 1);
          const int page = PAGED && plane < nb ? blk.pages[key >> (int)p.page_shift] * batch_v : 0;
          const u32 s = claim(cnt, empty_v(0), full_v(0), PAGED ? V_TILE_BYTES / BLOCK_N * box_rows * nb : V_TILE_BYTES),
                    bar = full_v(s);
          // (PAGED: from the 32-bit base, which keeps the 24-register producer from spilling)
          const u32 dst = PAGED ? sv_addr + 2u * s * V_STAGE : fg_smem_addr(sV + s * V_STAGE);
          if constexpr (PAGED) {
            if (plane < nb) {
@@TMA_V_PAGED@@
            }
          } else {
@@TMA_V@@
          }
        };
        // K runs one tile ahead of V: the consumers need K[j+1] and V[j] together.
        // The tiles go from the last key tile down (the consumers' order, see `tile`).
        const int n = blk.n_tiles;
        for (int t = 0; t <= n; ++t) {
          if (t < n) load_k(c + t, row0 + (n - 1 - t) * BLOCK_N);
          if (t >= 1) load_v(c + t - 1, row0 + (n - t) * BLOCK_N);
        }
        c += n;
      }
    };
    if (PAGED && gather) {
      produce(FgBool<true>{});
    } else if (PAGED ? plane < 32 : plane == 0) {
@@TMA_PREFETCH@@
      produce(FgBool<false>{});
    }
    return;
  }

  // ---- consumer warpgroups ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  // this warpgroup, its first block row (through a shuffle, which ptxas knows to be
  // warp-uniform: what derives from it, the Q descriptors among them, can live in
  // uniform registers)
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wg_row0 = wg * 64, wg_tid = tid & 127;
  if (PINGPONG && wg == NWG - 1) fg_turn_pass(wg);  // warpgroup 0 takes the first turn
  if (MASK != 0 && tid == 0) {  // (before the item loop's first barrier)
    if (WINDOW) {
#pragma unroll
      for (int w = 0; w < WIN_WORDS; ++w) fg_st_shared_s32(window_bits + 4 * w, 0);
    } else {
      fg_st_shared_s32(band_key, BLOCK_N);
    }
  }
  const float scale = (float)p.softmax_scale;
  // The tiles' start addresses in descriptor units (fg_desc): Q, and stage 0
  // of K and V.
  const u32 q_units = fg_desc_units(fg_smem_addr(sQ)), k_units = fg_desc_units(fg_smem_addr(sK)), v_units = fg_desc_units(fg_smem_addr(sV));
  auto release = [&](u32 bar) {
    if (lane == 0) fg_mbar_arrive(bar);
  };

  // Q of an item is fetched into registers while the previous item's epilogue
  // runs (the first item's right here): its global loads are in flight then.
  // Not when O and Q together would take more than 128 registers per thread
  // (D = 256: 128 + 64, ptxas spills), nor with three consumer warpgroups (160
  // registers a consumer: paged D64/D80 kernels spilled): then at the start of
  // the item.
  constexpr bool Q_AHEAD = HEAD_DIM_V / 2 + HEAD_DIM / 4 <= 128 && NWG < 3;
@@Q_DECL@@
  auto fetch_q = [&](i64 item) {
    if (item < n_items) {
      const FgBlock nb = fg_block<BLOCK_M, BLOCK_N, MASK>(p, item);
@@Q_FETCH@@
    }
  };
  if (Q_AHEAD) fetch_q(fg_work_item(0));
  u32 c = 0;
  for (i64 r = 0;; ++r) {
    const i64 item = fg_work_item(r);
    if (item >= n_items) break;
    const FgBlock blk = fg_block<BLOCK_M, BLOCK_N, MASK>(p, item);
    const int rows_valid = blk.rows_valid, n_tiles = blk.n_tiles;
    if (VARLEN && rows_valid <= 0) {  // past its sequence's rows: nothing to load or write
      if (Q_AHEAD) fetch_q(fg_work_item(r + 1));
      continue;
    }
    if (!Q_AHEAD) fetch_q(item);

    // ---- Q: scale, round, stage (read by every S wgmma of this warpgroup) ----
    // (WG_OWN_ROWS: each warpgroup its own 64 rows.) The previous item's O
    // left them after the barrier that ends its epilogue.
@@Q_STORE@@
    fg_fence_proxy_async();  // Q's stores, before wgmma reads them
    fg_wg_sync(wg);

    float o[1][OT][4];
    float row_max[1][2], row_sum[1][2], corr[1][2];
#pragma unroll
    for (int i = 0; i < OT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
    row_max[0][0] = row_max[0][1] = fg_neg_inf();
    row_sum[0][0] = row_sum[0][1] = 0.f;

    float s[1][NT][4];        // S of one tile (wgmma accumulators), then P in f32
    u32 pa[BLOCK_N / 16][4];  // P rounded to the input dtype: the A fragments of P.V
    // S = Qs . K^T of K tile number `cnt` (issued and committed, not waited for).
    auto qk = [&](u32 cnt) {
      const u32 k_tile = k_units + (cnt % STAGES) * (K_STAGE / 8);
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

    if (n_tiles > 0) {
      fg_mbar_wait(full_k(c % STAGES), (c / STAGES) & 1);
      if (gather) fg_fence_proxy_async();  // the producer's cp.async writes, before wgmma reads them
      fg_turn_wait(wg);
      qk(c);
      fg_turn_pass(wg);
      fg_wgmma_wait<0>();
      fg_reg_fence(s);
      release(empty_k(c % STAGES));
      fg_softmax(p, blk, n_tiles - 1, warp, g, t, s, row_max, row_sum, corr);
      if (RESCALE_AFTER_PV) fg_rescale_o(o, corr);  // (O is 0 here)
      to_p();
      // VARLEN: the sequence's last key tile (the first taken) may reach into
      // the next sequence's keys (the tensor map zero-fills only past the
      // packed tensor); PAGED: into a page's unused slots, or rows no box
      // filled. Their weights are 0, but a NaN or inf in V there would make
      // 0 * V NaN, so those V rows are zeroed in shared memory before its P.V
      // reads them. Here, once an item, not in the tile step: there its test
      // and addresses cost about 40 instructions a warp and tile (Nsight
      // Compute, paged page 256 against contiguous: +8 % instructions in the
      // consumers, bench/NOTES.md session 30). Before tile 0's turn: the
      // barrier spans every consumer warpgroup.
      if (VARLEN || PAGED) {
        const int valid = blk.seqlen_k - (KEYS_FROM_KEY0 ? blk.key0 : 0) - (n_tiles - 1) * BLOCK_N;
        if (valid < BLOCK_N) {
          fg_mbar_wait(full_v(c % STAGES), (c / STAGES) & 1);
          if (gather) fg_fence_proxy_async();  // (as above)
          u16* const v_stage = sV + (c % STAGES) * V_STAGE;
@@V_ZERO@@
          fg_fence_proxy_async();  // the zeros, before wgmma reads them
          fg_consumer_sync();
        }
      }
    }
    // Tile i (the i-th taken; key tile kt = n_tiles - 1 - i: the tiles go from
    // the last key tile down, as the producer loads them): entering, P of tile
    // i is in `pa` and corr holds the factor for O (no wgmma in flight); S of
    // tile i+1 and P.V of tile i are issued in this warpgroup's turn, and the
    // softmax of tile i+1 runs while P.V does. O is rescaled by corr between
    // the two issues, or (RESCALE_AFTER_PV) at the end of the previous tile,
    // after its P.V. The last tile taken (LAST) issues P.V alone: it is an
    // instantiation of its own, since a branch around the S wgmma would make
    // ptxas serialize them. Only where PEEL_LAST says (the extra instantiations
    // cost registers): elsewhere the last tile computes an S on whatever the
    // next K stage holds and never reads it. Nothing is in flight between tiles, so the tiles a
    // causal mask cuts for some row of the block (BAND, taken first) run in a
    // loop of their own: the others issue P.V with constant descriptors.
    auto tile = [&](int i, auto band, auto last) {
      constexpr bool BAND = decltype(band)::value, LAST = decltype(last)::value;
      const bool next = !LAST && (PEEL_LAST || i + 1 < n_tiles);  // an S of tile i+1 to use
      const int kt = n_tiles - 1 - i;
      const u32 ck = c + i + 1, cv = c + i;
      if (next) fg_mbar_wait(full_k(ck % STAGES), (ck / STAGES) & 1);
      fg_mbar_wait(full_v(cv % STAGES), (cv / STAGES) & 1);
      if (gather) fg_fence_proxy_async();  // (as above)
      // Non-finite V values at keys some rows do not see (a masked weight 0
      // times inf or NaN is NaN in wgmma's sums):
      //  - the first tile taken, when the causal mask cuts it (CHECK): O is 0
      //    before it, so after its P.V a row's O is non-finite exactly when the
      //    tile put a non-finite value there. Each warp checks its O (one FFMA
      //    per value and a vote) and, on the rare path, recomputes its rows'
      //    P.V with FMAs that skip the keys a row does not see (fg_pv_redo).
      //    No barrier, and the tile's V is never written.
      //  - later cut tiles (a diagonal that does not fall on a tile edge
      //    cuts two), and WINDOW's: V at the keys row 0 of the block does not
      //    see, scanned (fg_v_scan). WINDOW: a tile the window cuts for some
      //    row, all of its V (scanning only the keys some row does not see kept
      //    more registers live: 44 bytes of spills at D128, bench/NOTES.md
      //    session 10). Before the turn, like the zeroing above: its vote and
      //    its rare path's barriers span every consumer warpgroup; the scan's
      //    loads then run under the others' GEMMs.
      const bool check = BAND && !WINDOW && MASK != 0 && i == 0;
      int band_k = BLOCK_N;  // the lowest key with one (BLOCK_N: none)
      if (BAND && MASK != 0 && !check) {
        const int scan_from = WINDOW ? 0 : max(0, blk.m_start + blk.diag + 1 - kt * BLOCK_N);
        const u32 bits = WINDOW ? window_bits : 0u;
        u16* const v_stage = sV + (cv % STAGES) * V_STAGE;
        u32 bad = 0u;
        int lowest = BLOCK_N;
        auto scan = [&](auto clean) {
@@V_SCAN@@
        };
        scan(FgBool<false>{});
        if (WINDOW && fg_consumers_any(bad != 0u)) {
          // rare: the values zeroed and their keys' bits set, then every
          // consumer's rows that see one of those keys poisoned
          scan(FgBool<true>{});
          fg_fence_proxy_async();  // the cleaned values, before wgmma reads them
          fg_consumer_sync();
          fg_window_poison_rows<FgFragM16, WIN_WORDS>([&](int w) { return (u32)fg_ld_shared_s32(window_bits + 4 * w); },
                                                      blk, kt, warp * 16 + g, 0, row_sum);
          fg_consumer_sync();
          if (tid == 0) {
#pragma unroll
            for (int w = 0; w < WIN_WORDS; ++w) fg_st_shared_s32(window_bits + 4 * w, 0);
          }
        } else if (!WINDOW && fg_consumers_any(bad != 0u)) {  // rare: the block's lowest such key, then the values zeroed
          if (lowest < BLOCK_N) fg_atom_min_shared_s32(band_key, lowest);
          fg_consumer_sync();
          band_k = fg_ld_shared_s32(band_key);
          scan(FgBool<true>{});
          fg_fence_proxy_async();  // the cleaned values, before wgmma reads them
          fg_consumer_sync();
          if (tid == 0) fg_st_shared_s32(band_key, BLOCK_N);  // (read by all before the barrier above)
        }
      }
      // The turn window (no consumer-wide barrier or mbarrier wait until the pass below).
      fg_turn_wait(wg);
      if constexpr (!LAST) qk(ck);
      if (!RESCALE_AFTER_PV) fg_rescale_o(o, corr);
      fg_wgmma_fence();
      const u32 v_tile = v_units + (cv % STAGES) * (V_STAGE / 8);
@@PV@@
      fg_wgmma_commit();
      fg_turn_pass(wg);
      if constexpr (!LAST) {
        fg_wgmma_wait<1>();  // S of tile i+1 complete (P.V of tile i may still run)
        fg_reg_fence(s);
        if (next) {
          release(empty_k(ck % STAGES));
          fg_softmax(p, blk, kt - 1, warp, g, t, s, row_max, row_sum, corr);
        }
      }
      fg_wgmma_wait<0>();  // P.V of tile i complete
      fg_reg_fence(o);
      if (check) {
        // o * 0 is 0 for a finite o and NaN otherwise; four chains
        float z[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int x = 0; x < OT; ++x)
#pragma unroll
          for (int e = 0; e < 4; ++e) z[e] = fmaf(o[0][x][e], 0.f, z[e]);
        if (__any_sync(0xffffffffu, (z[0] + z[1]) + (z[2] + z[3]) != 0.f)) {  // rare: some O of the warp is not finite
          const int kfirst = (KEYS_FROM_KEY0 ? blk.key0 : 0) + kt * BLOCK_N, row = blk.m_start + warp * 16 + g;
          const int lim0 = fg_abs_row_q(row) + blk.diag - kfirst, lim1 = fg_abs_row_q(row + 8) + blk.diag - kfirst;
          const u16* const v_stage = sV + (cv % STAGES) * V_STAGE;
@@PV_REDO@@
        }
      }
      if (band_k < BLOCK_N) fg_poison_rows<FgFragM16>(blk, kt, warp * 16 + g, band_k, row_sum);
      release(empty_v(cv % STAGES));
      if (next) {
        if (RESCALE_AFTER_PV) fg_rescale_o(o, corr);  // for tile i+1's P.V
        to_p();
      }
    };
    // The tiles taken first: the ones the mask cuts for row 0 of the block,
    // key tiles from band_from on (the least kt with kt * BLOCK_N + BLOCK_N - 1
    // > m_start + diag). WINDOW: last, the tiles below the first one the
    // block's last row sees whole (cut on the lower side, key tiles below
    // low_band), and the key tiles count from key0.
    const int key0 = KEYS_FROM_KEY0 ? blk.key0 : 0;
    const int band_from = MASK != 0 ? min(n_tiles, max(0, (blk.m_start + blk.diag + 1 - key0) / BLOCK_N)) : n_tiles;
    const int low_band =
        WINDOW ? min(n_tiles, max(0, (blk.m_start + rows_valid - 1 + blk.diag_lo - key0 + BLOCK_N - 1) / BLOCK_N)) : 0;
    // PEEL_LAST: the last tile taken (LAST) out of the loops, in the kind its loop gives it.
    int i = 0;
    if constexpr (PEEL_LAST) {
      if (MASK != 0)
        for (; i < min(n_tiles - band_from, n_tiles - 1); ++i) tile(i, FgBool<true>{}, FgBool<false>{});
      for (; i < min(n_tiles - low_band, n_tiles - 1); ++i) tile(i, FgBool<false>{}, FgBool<false>{});
      if (WINDOW)
        for (; i < n_tiles - 1; ++i) tile(i, FgBool<true>{}, FgBool<false>{});
      if (i < n_tiles) {  // (i == n_tiles - 1)
        if (MASK != 0 && (band_from == 0 || (WINDOW && low_band > 0)))  // key tile 0 cut by the mask or the window
          tile(i, FgBool<MASK != 0>{}, FgBool<true>{});
        else
          tile(i, FgBool<false>{}, FgBool<true>{});
      }
    } else {
      if (MASK != 0)
        for (; i < n_tiles - band_from; ++i) tile(i, FgBool<true>{}, FgBool<false>{});
      for (; i < n_tiles - low_band; ++i) tile(i, FgBool<false>{}, FgBool<false>{});
      if (WINDOW)
        for (; i < n_tiles; ++i) tile(i, FgBool<true>{}, FgBool<false>{});
    }
    c += n_tiles;
    if (Q_AHEAD) fetch_q(fg_work_item(r + 1));

    // ---- epilogue: normalise, LSE, stage O through shared memory, 16-byte stores ----
    float inv[1][2];
    fg_finish_rows(p, blk, warp, g, t, row_max, row_sum, inv);
    // (WG_OWN_ROWS: each warpgroup stages and stores its own 64 rows of O, in its slice.)
    fg_wg_sync(wg);  // done reading Q
@@STAGE_O@@
    fg_wg_sync(wg);
    u16* const o_ptr =
        static_cast<u16*>(p.o) + fg_o_row(p, blk, blk.m_start + (WG_OWN_ROWS ? wg_row0 : 0)) + blk.h * p.o_stride_head;
@@STORE_O@@
    fg_wg_sync(wg);  // O read out of sQ before the next item's Q lands
  }
}
