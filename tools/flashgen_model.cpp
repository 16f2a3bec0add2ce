// The tile model of `flashgen tune` and `flashgen explain` (tools/flashgen_cli.hpp).
//
// For one spec on one problem, per thread block (one block_m x seqlen_k tile
// of one query head), with D = head_dim, Dv = head_dim_v, 2-byte elements:
//   tile FLOPs         2 * block_m * keys * (D + Dv), keys = the block's key
//                      rows rounded up to block_n (causal: up to the diagonal;
//                      window: the tiles from its first visible key to its last)
//   tile global bytes  Q tile + O tile + the K/V stream: 2 * (block_m * (D + Dv)
//                      + keys * (D + Dv))  (+ bias rows, LSE)
//   tile smem bytes    per K/V step, cp.async (wgmma: TMA) writes one K and
//                      one V tile, and every warp reads both with ldmatrix
//                      (wgmma: every consumer warpgroup, through matrix
//                      descriptors): (readers + 1) * block_n * (D + Dv) * 2,
//                      readers = warps (wgmma: warps / 4); plus Q read once,
//                      O staged once.
// Roofs per SM and clock, from the profile:
//   matrix unit        mma_flop_per_clock_per_sm
//   shared memory      ai_smem * smem_bytes_per_clock_per_sm
//   memory             ai_dram * dram_bytes_per_clock_per_sm, ai_dram = useful
//                      FLOPs / unique bytes (K/V re-reads of the other query
//                      blocks of a head are assumed to hit L2)
// The attained rate is the lowest roof times the latency efficiency, the
// smaller of
//   - warps: resident warps / 8 (mma.sync needs two warps per SM
//     sub-partition to keep issuing), and
//   - steps: the SM's busy fraction when each K/V step of a block does
//     T = max(step FLOPs / matrix-unit rate, step smem bytes / smem rate)
//     clocks of work and then waits for what is not hidden: the global load
//     latency (kLoadLatency clocks) minus the work of the (stages - 1) steps
//     in flight of all resident blocks (one stage on m16n8k16: half a step,
//     K and V copied in turn), plus a per-step barrier and softmax
//     reduction cost (kStepOverhead clocks): min(1, blocks_per_sm * T / (T + wait)).
// The score further multiplies the wave efficiency (last partial wave of the
// grid) and the padding efficiency (rows/keys computed beyond seqlen or the
// causal diagonal). Occupancy: blocks per SM from shared memory (+ the 1 KiB
// the GPU reserves per block), registers (allocated per warp in units of 256;
// wgmma: the kernel's launch bounds, two blocks per SM with one consumer
// warpgroup and one with two, setmaxnreg dividing them between producer and
// consumers), threads and 32 blocks per SM. The wgmma kernel is persistent
// (one wave of resident blocks looping over the work items): its wave
// efficiency is that of the work items over the resident blocks.
// Spilling costs a factor 1 / (1 + spill_bytes / 64 / key tiles), once per block or
// work item: every spilling variant read in the SASS spills before the key loop and in
// the epilogue, or loads 1-4 values a key tile of 1100 or more instructions (wgmma D80/D96
// with three warpgroups, softcap and paged, D256 with a bias, bench/NOTES.md session 23;
// mma.sync D128 128x64x4x2, D256 128x64x8x1 and 64x64x4x1, sessions 29-30, the last 1.04-1.09x
// the spill-free 64x32x4x2 it replaced). The two latency
// constants are the model's assumptions, not profile data; the model ranks,
// the GPU decides (flashgen tune times the best few).
// A packed batch (seqlens_q / seqlens_k) is modelled per sequence: the useful
// FLOPs, the executed key tiles and the unique bytes are sums over the
// sequences' own (seqlen_q, seqlen_k) (equal pairs counted once, times their
// number), and the per-block figures are averages over the blocks that have
// rows. The grid is still ceil(max_seqlen_q / block_m) x heads_q x batch; the
// blocks past a sequence's rows exit at once and are left out of the wave
// efficiency. seqused_k is taken as the whole sequence (the model does not
// know the array's values).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "gen/unit_traits.hpp"
#include "tools/flashgen_cli.hpp"

namespace flashgen::cli {
namespace {

constexpr int kMaxBlocksPerSm = 32;
constexpr double kLoadLatency = 600.0;  // SM clocks from cp.async (or TMA) issue to data in shared memory
// Bytes of shared memory the GPU keeps per resident block: 1 KiB from sm_80 on
// (CUDA programming guide, compute capability 8.x and later; cudaDevAttrReservedSharedMemoryPerBlock),
// none on Volta and Turing.
constexpr int64_t kSmemReservedPerBlock = 1024;
int64_t smem_reserved_per_block(int arch) { return arch >= 80 ? kSmemReservedPerBlock : 0; }
constexpr double kStepOverhead = 80.0;  // SM clocks per K/V step: barriers, row max/sum shuffles
constexpr int kRegisterLimit = 255;
constexpr int kRegisterAllocUnit = 256;  // registers, per warp

// Query blocks the model visits for the per-block averages: every block up to
// this many, evenly spaced ones beyond (a seqlen of 2^40 has 2^33 blocks).
constexpr int64_t kMaxModelledBlocks = 65536;

// A problem's mask as a window: row i sees keys j with
// i + off - left <= j <= i + off + right (-1: unbounded on that side); none is
// (-1, -1), causal (-1, 0). Sizes beyond the keys are clamped (they act as unbounded).
struct Window {
  int64_t sq, sk, off, left, right;
};
// (sq, sk: one sequence's query rows and keys; the problem's for a dense batch)
Window window_of(const ProblemDesc& p, int64_t sq, int64_t sk) {
  Window w{sq, sk, 0, -1, -1};
  const bool bottom_right = p.mask == MaskKind::causal_bottom_right || p.mask == MaskKind::window_bottom_right;
  if (bottom_right) w.off = sk - sq;
  if (p.mask == MaskKind::causal_top_left || p.mask == MaskKind::causal_bottom_right) w.right = 0;
  if (p.mask == MaskKind::window_top_left || p.mask == MaskKind::window_bottom_right) {
    const int64_t most = sq + sk;  // (the parser's sizes: no overflow)
    w.left = std::min(p.window_left, most);
    w.right = std::min(p.window_right, most);
  }
  return w;
}

// The sequences of a problem as (seqlen_q, seqlen_k, how many): one entry of
// `batch` for a dense batch; a packed batch's sequences with equal lengths
// merged (in order of first appearance).
struct Sequences {
  int64_t sq, sk, count;
};
std::vector<Sequences> sequences_of(const ProblemDesc& p) {
  if (!p.varlen()) return {{p.seqlen_q, p.seqlen_k, p.batch}};
  std::vector<Sequences> out;
  std::map<std::pair<int64_t, int64_t>, size_t> at;
  for (size_t b = 0; b < p.seqlens_q.size() && b < p.seqlens_k.size(); ++b) {
    const auto key = std::make_pair(p.seqlens_q[b], p.seqlens_k[b]);
    const auto [it, fresh] = at.emplace(key, out.size());
    if (fresh) out.push_back({key.first, key.second, 0});
    ++out[it->second].count;
  }
  return out;
}

// K/V keys some row of a sequence reads: with a sliding window the span from row
// 0's first key to the last row's last one (the rows' intervals overlap, so it
// has no gap), else all of them.
double kv_keys_of(const ProblemDesc& p, const Window& w) {
  if ((p.mask != MaskKind::window_top_left && p.mask != MaskKind::window_bottom_right) || w.sq <= 0)
    return static_cast<double>(w.sk);
  const int64_t last = w.sq - 1;
  const int64_t hi = w.right < 0 ? w.sk : std::clamp<int64_t>(last + w.off + w.right + 1, 0, w.sk);
  const int64_t lo = w.left < 0 ? 0 : std::clamp<int64_t>(w.off - w.left, 0, w.sk);
  return static_cast<double>(std::max<int64_t>(0, hi - lo));
}

// Keys row i sees: the keys before hi(i) = clamp(i + off + right + 1, 0, sk)
// (sk when right is unbounded) that are not before lo(i) = clamp(i + off - left,
// 0, sk) (0 when left is unbounded); lo(i) <= hi(i) since left + right + 1 > 0.
int64_t row_keys(int64_t i, const Window& w) {
  const int64_t hi = w.right < 0 ? w.sk : std::clamp<int64_t>(i + w.off + w.right + 1, 0, w.sk);
  const int64_t lo = w.left < 0 ? 0 : std::clamp<int64_t>(i + w.off - w.left, 0, w.sk);
  return hi - lo;
}

// Keys each query row sees, summed over the query rows [row0, row0 + rows) of
// a problem; exact, in closed form: row_keys is linear between the rows where
// one of its clamps starts or stops acting (i + t = 0 or sk for t = off + right
// + 1 and t = off - left), so each stretch between such rows adds its length
// times the mean of its first and last row's counts (no large differences:
// exact for the problems the tests can count, to a double's rounding beyond).
double visible_pairs(int64_t row0, int64_t rows, const Window& w) {
  rows = std::max<int64_t>(0, std::min(rows, w.sq - row0));
  const int64_t end = row0 + rows;
  std::vector<int64_t> cuts = {row0, end};
  auto cut_at = [&](int64_t t) {
    for (int64_t c : {-t, w.sk - t}) cuts.push_back(std::clamp(c, row0, end));
  };
  if (w.right >= 0) cut_at(w.off + w.right + 1);
  if (w.left >= 0) cut_at(w.off - w.left);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  double pairs = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t a = cuts[c], b = cuts[c + 1];  // rows [a, b): row_keys linear
    pairs += static_cast<double>(b - a) * static_cast<double>(row_keys(a, w) + row_keys(b - 1, w)) / 2.0;
  }
  return pairs;
}

// Key rows a block processes: from the key tile of its first visible key to
// that of its last one, in whole tiles of block_n.
int64_t block_keys(int64_t row0, int64_t block_m, int64_t block_n, const Window& w) {
  const int64_t last_row = std::min(row0 + block_m, w.sq) - 1;
  const int64_t last = w.right < 0 ? w.sk : std::clamp<int64_t>(last_row + w.off + w.right + 1, 0, w.sk);  // exclusive
  const int64_t first = w.left < 0 ? 0 : std::clamp<int64_t>(row0 + w.off - w.left, 0, w.sk);
  const int64_t tiles = (last + block_n - 1) / block_n - first / block_n;
  return std::max<int64_t>(0, tiles) * block_n;
}

}  // namespace

double problem_flops(const ProblemDesc& p) {
  double flops = 0;
  for (const Sequences& s : sequences_of(p))
    flops += 2.0 * static_cast<double>(s.count) * static_cast<double>(p.heads_q) *
             visible_pairs(0, s.sq, window_of(p, s.sq, s.sk)) * static_cast<double>(p.head_dim + p.head_dim_v);
  return flops;
}

namespace {

// Blocks per SM a wgmma kernel is built for (templates/fwd_wgmma.cu MIN_BLOCKS): two with one
// consumer warpgroup, one with two or three.
int wgmma_blocks_per_sm(const gen::UnitTraits& u, int warps) { return warps == u.warps_a ? 2 : 1; }

// Registers per thread no kernel of `s` can do without: the O and S
// accumulators (an m16n8 fragment is 4 floats per thread) and ~40 for
// addresses, loop state and the row statistics.
int accumulator_registers(const KernelSpec& s) {
  const int m_tiles = std::max(1, s.tile.block_m / std::max(1, 16 * s.tile.warps));
  return m_tiles * (s.head_dim_v / 2 + s.tile.block_n / 2) + 40;
}

}  // namespace

int estimate_registers(const KernelSpec& s) {
  // wgmma: what its launch bounds allot (templates/fwd_wgmma.cu LAUNCH_REGS: two blocks per SM
  // with one consumer warpgroup, one otherwise), which ptxas reports; setmaxnreg then moves
  // registers from the producer to the consumers.
  const gen::UnitTraits& u = gen::unit_traits(s.unit);
  if (u.warpgroup && s.threads() > 0) {
    return std::min(255, 65536 / (s.threads() * wgmma_blocks_per_sm(u, s.tile.warps)) / 8 * 8);
  }
  // Accumulators, Q fragments when they fit (m16k16 = 4 registers), and the
  // K/V fragments in flight; ptxas may use up to 255 (launch bounds of one block).
  const int m_tiles = std::max(1, s.tile.block_m / std::max(1, 16 * s.tile.warps));
  return std::min(255, accumulator_registers(s) + m_tiles * s.head_dim / 4 + 20);
}

KernelSpec spec_with_tile(const ProblemDesc& problem, int arch, const Profile& profile, const Tile& tile) {
  KernelSpec s;
  s.arch = arch;
  s.unit = profile.unit_for(static_cast<int>(problem.head_dim), static_cast<int>(problem.head_dim_v));
  s.dtype = problem.dtype;
  s.head_dim = static_cast<int>(problem.head_dim);
  s.head_dim_v = static_cast<int>(problem.head_dim_v);
  s.tile = tile;
  s.mask = problem.mask;
  s.bias = problem.bias;
  s.has_lse = problem.lse;
  s.softcap = problem.softcap > 0.f;  // (every variant field of the spec: plan()'s, runtime/api.cpp)
  s.sinks = problem.sinks;
  s.alibi = problem.alibi;
  s.varlen = problem.varlen();
  s.paged = problem.paged();
  return s;
}

TileModel model_tile(const KernelSpec& spec, const ProblemDesc& p, const Profile& profile, const DeviceShape& dev,
                     int registers, int64_t spill_bytes) {
  TileModel m;
  m.spec = spec;
  m.registers_measured = registers >= 0;
  m.registers = registers >= 0 ? registers : estimate_registers(spec);
  m.spill_bytes = spill_bytes;
  const std::vector<std::string> broken = validate(spec, profile);
  if (!broken.empty()) {
    m.fits = false;
    m.why_not = broken.front();
  }
  const double D = static_cast<double>(spec.head_dim), Dv = static_cast<double>(spec.head_dim_v);
  const double eb = 2.0;  // bytes per element
  const int64_t bm = std::max(1, spec.tile.block_m), bn = std::max(1, spec.tile.block_n);
  const int64_t m_blocks = p.seqlen_q > 0 ? (p.seqlen_q + bm - 1) / bm : 0;  // (packed: of max_seqlen_q)
  m.blocks = m_blocks * p.heads_q * p.batch;
  m.flops = problem_flops(p);

  // Executed work and traffic, averaged over the query blocks of one head that
  // have rows (a packed batch: each sequence's own blocks).
  const std::vector<Sequences> seqs = sequences_of(p);
  double work_blocks = 0;  // blocks with rows, of one head, over the batch
  for (const Sequences& s : seqs)
    work_blocks += static_cast<double>(s.count) * static_cast<double>(s.sq > 0 ? (s.sq + bm - 1) / bm : 0);
  // Key rows of all those blocks together: each distinct sequence's blocks
  // summed, or, beyond kMaxModelledBlocks over all distinct sequences, evenly
  // spaced ones scaled to the rest.
  double keys_all = 0;
  const auto distinct = static_cast<int64_t>(seqs.size());
  for (const Sequences& s : seqs) {
    const int64_t blocks = s.sq > 0 ? (s.sq + bm - 1) / bm : 0;
    const int64_t step = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(static_cast<double>(blocks) * static_cast<double>(distinct) /
                                          static_cast<double>(kMaxModelledBlocks))));
    const Window window = window_of(p, s.sq, s.sk);
    double keys = 0;
    int64_t visited = 0;
    for (int64_t b = 0; b < blocks; b += step, ++visited) keys += static_cast<double>(block_keys(b * bm, bm, bn, window));
    if (step > 1 && visited > 0) keys = keys / static_cast<double>(visited) * static_cast<double>(blocks);
    keys_all += static_cast<double>(s.count) * keys;
  }
  const double mb = std::max<double>(1, work_blocks);
  const double exec_pairs = static_cast<double>(bm) * keys_all;  // of one head, over the batch
  const double keys_avg = keys_all / mb;
  m.tile_flops = 2.0 * (exec_pairs / mb) * (D + Dv);
  const double bias_bytes = p.bias == BiasKind::none ? 0 : (p.bias == BiasKind::f32 ? 4.0 : 2.0);
  m.tile_global_bytes = eb * static_cast<double>(bm) * (D + Dv) + eb * keys_avg * (D + Dv) +
                        bias_bytes * static_cast<double>(bm) * keys_avg + (p.lse ? 4.0 * static_cast<double>(bm) : 0);
  const gen::UnitTraits& unit = gen::unit_traits(spec.unit);
  const bool wgmma = unit.warpgroup;
  // Shared-memory operand readers per block: warps, or warpgroups of a warpgroup-level unit.
  const double smem_readers = wgmma ? std::max(1, spec.tile.warps / 4) : spec.tile.warps;
  const double steps = keys_avg / static_cast<double>(bn);
  m.tile_smem_bytes = steps * (smem_readers + 1) * static_cast<double>(bn) * (D + Dv) * eb +
                      static_cast<double>(bm) * D * eb + 2.0 * static_cast<double>(bm) * Dv * eb;
  const double Hq = static_cast<double>(p.heads_q), Hkv = static_cast<double>(p.heads_kv);
  // Per sequence: its query rows, the K/V keys its rows read (kv_keys_of) and its bias
  // elements (of one head), summed over the batch.
  double rows_q = 0, kv_keys = 0, bias_elems = 0;
  for (const Sequences& s : seqs) {
    const double n = static_cast<double>(s.count);
    rows_q += n * static_cast<double>(s.sq);
    kv_keys += n * kv_keys_of(p, window_of(p, s.sq, s.sk));
    bias_elems += n * static_cast<double>(s.sq) * static_cast<double>(s.sk);
  }
  m.unique_bytes = eb * (rows_q * Hq * D + kv_keys * Hkv * (D + Dv) + rows_q * Hq * Dv) +
                   bias_bytes * Hq * bias_elems + (p.lse ? 4.0 * Hq * rows_q : 0.0);
  m.ai_dram = m.unique_bytes > 0 ? m.flops / m.unique_bytes : 0;
  m.ai_tile = m.tile_global_bytes > 0 ? m.tile_flops / m.tile_global_bytes : 0;
  m.ai_smem = m.tile_smem_bytes > 0 ? m.tile_flops / m.tile_smem_bytes : 0;
  const double P = static_cast<double>(profile.mma_flop_per_clock_per_sm);
  const double Bs = static_cast<double>(profile.smem_bytes_per_clock_per_sm);
  const double Bd = profile.dram_bytes_per_clock_per_sm;
  m.ridge_dram = Bd > 0 ? P / Bd : 0;
  m.ridge_smem = Bs > 0 ? P / Bs : 0;

  // Occupancy.
  const int threads = spec.threads();
  const int64_t smem = spec.smem_bytes();
  const int by_smem =
      smem > 0 ? static_cast<int>(profile.smem_per_sm / (smem + smem_reserved_per_block(spec.arch))) : kMaxBlocksPerSm;
  const int64_t regs_per_warp =
      (static_cast<int64_t>(m.registers) * 32 + kRegisterAllocUnit - 1) / kRegisterAllocUnit * kRegisterAllocUnit;
  const int by_regs = wgmma ? wgmma_blocks_per_sm(unit, spec.tile.warps)
                      : regs_per_warp > 0
                          ? static_cast<int>(profile.registers_per_sm / (regs_per_warp * spec.tile.warps))
                          : kMaxBlocksPerSm;
  const int by_threads = threads > 0 ? profile.max_threads_per_sm / threads : 0;
  m.blocks_per_sm = std::min({by_smem, by_regs, by_threads, kMaxBlocksPerSm});
  if (m.blocks_per_sm == by_smem) m.occupancy_limit = "shared memory";
  else if (m.blocks_per_sm == by_regs) m.occupancy_limit = "registers";
  else if (m.blocks_per_sm == by_threads) m.occupancy_limit = "threads";
  else m.occupancy_limit = "blocks";
  if (m.fits && !wgmma && (m.registers > kRegisterLimit || accumulator_registers(spec) > kRegisterLimit)) {
    m.fits = false;
    m.why_not = fmt::format("needs at least {} registers per thread for its accumulators, more than {}",
                            std::max(m.registers, accumulator_registers(spec)), kRegisterLimit);
  }
  if (m.fits && m.blocks_per_sm < 1) {
    m.fits = false;
    m.why_not = fmt::format("one block does not fit an SM ({} bytes of shared memory, {} registers x {} threads)",
                            smem, m.registers, threads);
  }
  m.resident_warps = std::max(0, m.blocks_per_sm) * std::max(0, threads / 32);
  {
    const double warp_eff = std::min(1.0, static_cast<double>(m.resident_warps) / kWarpsToHideLatency);
    const double step_flops = 2.0 * static_cast<double>(bm) * static_cast<double>(bn) * (D + Dv);
    const double step_smem = (smem_readers + 1) * static_cast<double>(bn) * (D + Dv) * eb;
    const double work = std::max(P > 0 ? step_flops / P : 0.0, Bs > 0 ? step_smem / Bs : 0.0);
    const double occ = std::max(1, m.blocks_per_sm);
    // Steps whose copies are in flight behind this one: stages - 1. One stage on m16n8k16
    // (cp.async, templates/fwd_m16n8.cu) copies K and V in turn, each behind the half of the
    // step that reads the other: half a step. (m16n8k8 stages its copies through registers and
    // waits for them; m8n8k4 likewise.)
    const double in_flight = spec.tile.stages > 1 ? spec.tile.stages - 1.0 : spec.unit == MatrixUnit::m16n8k16 ? 0.5 : 0.0;
    const double hidden = in_flight * occ * work;
    const double wait = std::max(0.0, kLoadLatency - hidden) + kStepOverhead;
    const double step_eff = work > 0 ? std::min(1.0, occ * work / (work + wait)) : 0.0;
    m.latency_efficiency = std::min(warp_eff, step_eff);
  }

  // Roofs (FLOP per clock per SM).
  const double roof_smem = m.ai_smem * Bs;
  const double roof_dram = m.ai_dram * Bd * (exec_pairs > 0 ? 1.0 : 0.0);
  double rate = P;
  m.bound = "matrix unit";
  if (roof_smem < rate) rate = roof_smem, m.bound = "shared memory";
  if (roof_dram > 0 && roof_dram < rate) rate = roof_dram, m.bound = "memory";
  const double attained = rate * m.latency_efficiency;
  if (m.latency_efficiency < 1.0 && attained < 0.999 * rate) m.bound += " (latency-limited occupancy)";
  const double spill_tiles = std::max(1.0, steps);  // (spills amortized over a block's or work item's key tiles)
  m.spill_efficiency = 1.0 / (1.0 + static_cast<double>(spill_bytes) / 64.0 / spill_tiles);
  m.flop_per_clock_per_sm = attained * m.spill_efficiency;

  // The blocks that work: all of them for a dense batch, the ones with rows for a packed one.
  const double busy_blocks = p.varlen() ? work_blocks * Hq : static_cast<double>(m.blocks);
  if (dev.sm_count > 0 && busy_blocks > 0 && m.blocks_per_sm > 0) {
    // (Persistent wgmma blocks take items in rounds of `slots`: the same fraction.)
    const double slots = static_cast<double>(dev.sm_count) * m.blocks_per_sm;
    const double waves = std::ceil(busy_blocks / slots);
    m.wave_efficiency = busy_blocks / (waves * slots);
  }
  const double executed = 2.0 * exec_pairs * (D + Dv) * Hq;
  m.padding_efficiency = executed > 0 ? std::min(1.0, m.flops / executed) : 1.0;
  m.score = m.fits && P > 0 ? m.flop_per_clock_per_sm / P * m.wave_efficiency * m.padding_efficiency : 0.0;
  return m;
}

std::vector<TileModel> rank_tiles(const ProblemDesc& problem, int arch, const Profile& profile,
                                  const DeviceShape& dev) {
  std::vector<TileModel> out;
  const MatrixUnit unit =
      profile.unit_for(static_cast<int>(problem.head_dim), static_cast<int>(problem.head_dim_v));
  const gen::UnitTraits& traits = gen::unit_traits(unit);
  if (traits.block_m_is_16_warps) {
    // wgmma: one warpgroup per 64 query rows (one, two or three consumer warpgroups); any
    // block_n that is a multiple of 16 up to 256 (validate() keeps the ones the unit takes).
    for (int warps : {traits.warps_a, traits.warps_b, traits.warps_c}) {
      if (warps == 0) continue;
      for (int block_n = 32; block_n <= 256; block_n += 16) {
        for (int stages : {traits.min_stages, traits.min_stages + 1}) {
          const KernelSpec s =
              spec_with_tile(problem, arch, profile, Tile{16 * warps, block_n, warps, stages});
          TileModel m = model_tile(s, problem, profile, dev);
          if (m.fits) out.push_back(std::move(m));
        }
      }
    }
  }
  for (int warps : {1, 2, 4, 8, 16}) {
    if (traits.block_m_is_16_warps) break;
    for (int block_m : {16, 32, 64, 128, 256}) {
      if (block_m % (16 * warps) != 0 || block_m / (16 * warps) > 4) continue;
      for (int block_n : {16, 32, 64, 128}) {
        for (int stages : {1, 2, 3}) {
          const KernelSpec s = spec_with_tile(problem, arch, profile, Tile{block_m, block_n, warps, stages});
          TileModel m = model_tile(s, problem, profile, dev);
          if (m.fits) out.push_back(std::move(m));
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const TileModel& a, const TileModel& b) {
    if (a.score != b.score) return a.score > b.score;
    // Ties: less shared memory, then fewer registers (more room for others).
    if (a.spec.smem_bytes() != b.spec.smem_bytes()) return a.spec.smem_bytes() < b.spec.smem_bytes();
    return a.registers < b.registers;
  });
  return out;
}

std::string block_warps(const KernelSpec& spec) {
  const int producer = gen::unit_traits(spec.unit).producer_warps;
  return producer == 0 ? fmt::format("{}w", spec.tile.warps) : fmt::format("{}+{}w", spec.tile.warps, producer);
}

std::string occupancy_text(const TileModel& m) { return fmt::format("{} x {}", m.blocks_per_sm, block_warps(m.spec)); }

}  // namespace flashgen::cli
