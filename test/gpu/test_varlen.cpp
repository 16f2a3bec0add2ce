// GPU tier: packed (variable-length, "varlen") batches (problem.hpp:
// cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k) against the float64
// reference (test/reference.hpp, which computes each sequence as its own dense
// problem), on every matrix unit of the device (units.hpp: wgmma, m16n8k16,
// m16n8k8, m8n8k4 on an H200), through plan() + load_kernel() + launch() and
// through the split-KV decode (decode.hpp: num_splits 1, 3 and auto, GQA packing).
//
// Every (case, unit) draws fresh random inputs (seed printed; FLASHGEN_TEST_SEED=<n>
// fixes it) and sequence lengths made from the planned kernel's tile
// (spec.tile.block_m / block_n): zero-length sequences (first and last), 1,
// block_m - 1, block_m + 1, block_m, keys around multiples of block_n, a sequence
// with rows but no key (O = 0, LSE = -inf; the sink with sinks), one with fewer
// keys than rows, chunked-prefill shapes (seqlen_q < seqlen_k) and decode shapes
// (1..4 query rows, long keys), and bounds seqlen_q / seqlen_k above the longest
// sequence (grid blocks past every sequence's rows) or below it (the longest
// sequences cut: their rows past the bound stay unwritten). The layout:
//  - Q/O [total_q, heads_q, d] with padded heads; the packing starts at
//    cu_seqlens_q[0] > 0 and total_q > cu_seqlens_q[batch]: rows that belong to
//    no sequence;
//  - K/V [total_k, heads_kv, d] (V with a padded row stride), starting at
//    cu_seqlens_k[0] > 0, rows after the last sequence; with seqused_k each
//    sequence owns more keys than it uses;
//  - every input element no sequence may read is NaN: Q rows outside the
//    sequences and head padding, K/V rows before, between (unused keys past
//    seqused_k) and after the sequences, V padding, bias entries outside each
//    sequence's corner, a NaN tail after every input buffer (after total_q /
//    total_k rows, after the sinks and slopes), and 2^30 after the int32
//    offsets; a kernel that reads one makes O NaN or wrong;
//  - O, its padding, its rows outside every sequence and guard bands before and
//    after are poisoned (0xFFFF, NaN in f16 and bf16), the LSE [heads_q, total_q]
//    (padded head stride) and its guard bands with 0xFFFFFFFF. After the run
//    every element of every sequence's rows must be written and match the
//    reference (O to the dtype's tolerance plus the reference's bound; rows
//    without keys exactly 0 and LSE exactly -inf or the sink), every other
//    element must still hold the poison, and every input must be unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/gpu_run.hpp"

namespace {

using namespace fgtest;

enum class Shape {
  prefill,  ///< chunked prefill: up to ~2 block_m rows per sequence, more keys than rows (mostly)
  decode,   ///< 1..4 query rows per sequence, long keys
};

struct VCase {
  std::string group;
  DType dtype = DType::f16;  ///< bf16 runs as f16 on a unit without bf16 (m8n8k4)
  int64_t head_dim = 64, head_dim_v = 64;
  int64_t heads_q = 8, heads_kv = 2;
  MaskKind mask = MaskKind::none;
  int64_t window_left = -1, window_right = -1;
  Shape shape = Shape::prefill;
  bool seqused = false;          ///< seqused_k: sequences own more keys than they use
  bool sinks = false;
  bool alibi = false;            ///< per-sequence slopes (alibi_stride_batch = heads_q)
  bool bias = false;             ///< f32 bias [batch, heads_q, max_seqlen_q, max_seqlen_k], -inf entries
  bool lse = true;
  /// The bounds seqlen_q / seqlen_k this much above the longest sequence (< 0: below it,
  /// the longest sequences are cut: their rows past the bound must stay unwritten).
  int64_t bound_slack_q = 0;
  int64_t bound_slack_k = 0;
  int decode_splits = -1;        ///< -1: plan + launch; 0: decode, splits chosen; n: decode with n splits
  bool caller_workspace = false; ///< decode: the caller's NaN-poisoned workspace

  std::string str(DType dt) const {
    std::string extra;
    if (mask == MaskKind::window_top_left || mask == MaskKind::window_bottom_right)
      extra += fmt::format(" window=({},{})", window_left, window_right);
    if (seqused) extra += " seqused_k";
    if (sinks) extra += " sinks";
    if (alibi) extra += " alibi=b,h";
    if (bias) extra += " bias=f32";
    if (!lse) extra += " lse=0";
    if (bound_slack_q != 0 || bound_slack_k != 0) extra += fmt::format(" bound=max{:+}/max{:+}", bound_slack_q, bound_slack_k);
    if (decode_splits >= 0)
      extra += fmt::format(" decode={}{}", decode_splits == 0 ? std::string("auto") : std::to_string(decode_splits),
                           caller_workspace ? ",ws" : "");
    return fmt::format("[{}] {}{} d{}/v{} hq{} hkv{} {}{}", group, flashgen::to_string(dt),
                       dt != dtype ? "(bf16 n/a)" : "", head_dim, head_dim_v, heads_q, heads_kv,
                       flashgen::to_string(mask), extra);
  }
};

// ---------------------------------------------------------------------------
// Sequence lengths and the packing
// ---------------------------------------------------------------------------

constexpr int32_t kOffsetCanary = 1 << 30;  // after the int32 offset arrays
constexpr int64_t kOffsetCanaries = 8;
constexpr int64_t kNanRows = 16;            // NaN rows after total_q / total_k in the input buffers
constexpr int64_t kNanTail = 16;            // NaN floats after the sinks and the slopes

struct Packing {
  std::vector<int32_t> q_len, k_used, k_alloc;  // per sequence
  std::vector<int32_t> cu_q, cu_k, used;         // [batch + 1], [batch + 1], [batch]
  int64_t total_q = 0, total_k = 0;
  int64_t bound_q = 0, bound_k = 0;              // problem.seqlen_q / seqlen_k
  int64_t batch() const { return static_cast<int64_t>(q_len.size()); }
  /// Sequence b's rows and keys cut to the bounds (problem.hpp: a longer sequence's rows past
  /// seqlen_q are not written, its keys past seqlen_k not read).
  int64_t rows(int64_t b) const { return std::min<int64_t>(q_len[static_cast<size_t>(b)], bound_q); }
  int64_t keys(int64_t b) const { return std::min<int64_t>(k_used[static_cast<size_t>(b)], bound_k); }
  std::string str() const {
    std::string s;
    for (size_t b = 0; b < q_len.size(); ++b)
      s += fmt::format("{}{}:{}{}", s.empty() ? "" : " ", q_len[b], k_used[b],
                       k_alloc[b] != k_used[b] ? fmt::format("/{}", k_alloc[b]) : "");
    return fmt::format("seqs(q:k[/alloc]) {} | total {}/{} bound {}/{}", s, total_q, total_k, bound_q, bound_k);
  }
};

/// Lengths from the tile (bm, bn): see the file comment.
Packing make_packing(const VCase& c, int64_t bm, int64_t bn, std::mt19937_64& rng) {
  auto R = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng); };
  // Keys around a multiple of bn that is above q: m*bn - 1, m*bn or m*bn + 1.
  auto around = [&](int64_t q) { return (q / bn + 1 + R(0, 1)) * bn + R(-1, 1); };
  struct L {
    int64_t q, k;
  };
  std::vector<L> mid;
  L first, last;
  if (c.shape == Shape::prefill) {
    first = {0, R(1, 2 * bn)};               // an empty sequence (its keys are there)
    last = {0, 0};                           // an empty sequence without keys
    mid.push_back({1, around(1)});
    mid.push_back({bm - 1, around(bm - 1)});
    mid.push_back({bm + 1, around(bm + 1)});
    mid.push_back({bm, bn});                 // exact tiles (q > k when bm > bn)
    const int64_t q5 = R(2, bm / 2);
    mid.push_back({q5, q5 + R(bn, 3 * bn)});
    const int64_t q6 = R(bm + 2, 2 * bm);
    mid.push_back({q6, q6 + R(1, 2 * bn)});
    mid.push_back({R(1, bm / 2), 0});        // rows without keys
    const int64_t q8 = R(bm / 2, bm);
    mid.push_back({q8, R(1, q8 - 1)});       // more rows than keys (bottom-right: rows without keys)
    mid.push_back({R(1, 8), bn - 1});
  } else {
    first = {0, R(100, 500)};
    last = {0, 0};
    mid.push_back({1, 1});
    mid.push_back({R(1, 4), bn - 1});
    mid.push_back({R(1, 4), bn + 1});
    mid.push_back({4, R(1500, 2500)});
    mid.push_back({R(1, 4), R(500, 1200)});
    mid.push_back({R(1, 4), 0});             // rows without keys
    mid.push_back({3, 2});                   // more rows than keys
    mid.push_back({1, 8 * bn});
    mid.push_back({2, R(2500, 3500)});
  }
  std::shuffle(mid.begin(), mid.end(), rng);
  std::vector<L> seqs;
  seqs.push_back(first);
  seqs.insert(seqs.end(), mid.begin(), mid.end());
  seqs.push_back(last);

  Packing pk;
  pk.cu_q.push_back(static_cast<int32_t>(R(1, 5)));  // rows before the first sequence
  pk.cu_k.push_back(static_cast<int32_t>(R(1, 9)));  // keys before the first sequence
  int64_t max_q = 0, max_k = 0;
  for (const L& s : seqs) {
    const int64_t alloc = c.seqused && R(0, 3) != 0 ? s.k + R(1, bn + 5) : s.k;
    pk.q_len.push_back(static_cast<int32_t>(s.q));
    pk.k_used.push_back(static_cast<int32_t>(s.k));
    pk.k_alloc.push_back(static_cast<int32_t>(alloc));
    pk.cu_q.push_back(static_cast<int32_t>(pk.cu_q.back() + s.q));
    pk.cu_k.push_back(static_cast<int32_t>(pk.cu_k.back() + alloc));
    if (c.seqused) pk.used.push_back(static_cast<int32_t>(s.k));
    max_q = std::max(max_q, s.q);
    max_k = std::max(max_k, s.k);
  }
  pk.total_q = pk.cu_q.back() + R(1, 7);  // rows after the last sequence
  pk.total_k = pk.cu_k.back() + R(1, 7);
  pk.bound_q = max_q + c.bound_slack_q;
  pk.bound_k = max_k + c.bound_slack_k;
  return pk;
}

// ---------------------------------------------------------------------------
// Buffers, in elements
// ---------------------------------------------------------------------------

struct VGeom {
  int64_t q_sh = 0, q_ss = 0, q_elems = 0;
  int64_t k_ss = 0, k_elems = 0;
  int64_t v_ss = 0, v_elems = 0;
  int64_t o_off = 0, o_sh = 0, o_ss = 0, o_elems = 0;
  int64_t lse_off = 0, lse_sh = 0, lse_elems = 0;
  int64_t bias_sq = 0, bias_sh = 0, bias_sb = 0, bias_elems = 0;
};

VGeom make_geom(const VCase& c, const Packing& pk) {
  VGeom g;
  g.q_sh = c.head_dim + 8;
  g.q_ss = c.heads_q * g.q_sh;
  g.q_elems = (pk.total_q + kNanRows) * g.q_ss;
  g.k_ss = c.heads_kv * c.head_dim;
  g.k_elems = (pk.total_k + kNanRows) * g.k_ss;
  g.v_ss = c.heads_kv * c.head_dim_v + 8;
  g.v_elems = (pk.total_k + kNanRows) * g.v_ss;
  g.o_off = kOutGuard;
  g.o_sh = c.head_dim_v + 8;
  g.o_ss = c.heads_q * g.o_sh;
  g.o_elems = kOutGuard + pk.total_q * g.o_ss + kOutGuard;
  if (c.lse) {
    g.lse_off = kLseGuard;
    g.lse_sh = pk.total_q + 3;
    g.lse_elems = kLseGuard + c.heads_q * g.lse_sh + kLseGuard;
  }
  if (c.bias) {
    g.bias_sq = round_up(std::max<int64_t>(pk.bound_k, 1), 8) + 8;
    g.bias_sh = pk.bound_q * g.bias_sq;
    g.bias_sb = c.heads_q * g.bias_sh;
    g.bias_elems = pk.batch() * g.bias_sb;
  }
  return g;
}

/// The packed problem over buffers at the given base addresses (0: null).
struct Bases {
  uintptr_t q = 0, k = 0, v = 0, o = 0, lse = 0, bias = 0, sinks = 0, alibi = 0, cu_q = 0, cu_k = 0, used = 0;
};

AttentionProblem make_vproblem(const VCase& c, DType dt, const Packing& pk, const VGeom& g, const Bases& a) {
  AttentionProblem p;
  p.dtype = dt;
  p.batch = pk.batch();
  p.seqlen_q = pk.bound_q;
  p.seqlen_k = pk.bound_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.head_dim_v = c.head_dim_v;
  p.mask = c.mask;
  if (c.mask == MaskKind::window_top_left || c.mask == MaskKind::window_bottom_right) {
    p.window_left = c.window_left;
    p.window_right = c.window_right;
  }
  auto ptr = [](uintptr_t base, int64_t elems, int64_t bytes) {
    return base != 0 ? reinterpret_cast<void*>(base + static_cast<uintptr_t>(elems * bytes)) : nullptr;
  };
  p.q = {ptr(a.q, 0, 2), 0, g.q_ss, g.q_sh};
  p.k = {ptr(a.k, 0, 2), 0, g.k_ss, c.head_dim};
  p.v = {ptr(a.v, 0, 2), 0, g.v_ss, c.head_dim_v};
  p.o = {ptr(a.o, g.o_off, 2), 0, g.o_ss, g.o_sh};
  if (c.lse && a.lse != 0) {
    p.lse.data = static_cast<float*>(ptr(a.lse, g.lse_off, 4));
    p.lse.stride_batch = 0;
    p.lse.stride_head = g.lse_sh;
  }
  if (c.bias) {
    p.bias.kind = BiasKind::f32;
    p.bias.data = ptr(a.bias, 0, 4);
    p.bias.stride_batch = g.bias_sb;
    p.bias.stride_head = g.bias_sh;
    p.bias.stride_q = g.bias_sq;
    p.bias.stride_k = 1;
  }
  if (c.sinks) p.sinks = static_cast<const float*>(ptr(a.sinks, 0, 4));
  if (c.alibi) {
    p.alibi_slopes = static_cast<const float*>(ptr(a.alibi, 0, 4));
    p.alibi_stride_batch = c.heads_q;
  }
  p.cu_seqlens_q = static_cast<const int32_t*>(ptr(a.cu_q, 0, 4));
  p.cu_seqlens_k = static_cast<const int32_t*>(ptr(a.cu_k, 0, 4));
  if (c.seqused) p.seqused_k = static_cast<const int32_t*>(ptr(a.used, 0, 4));
  p.total_q = pk.total_q;
  p.total_k = pk.total_k;
  return p;
}

/// Stand-in addresses for plan() (which checks pointers for null / alignment only).
Bases fake_bases(const VCase& c) {
  const uintptr_t f = 0x10000000u;
  Bases a;
  a.q = a.k = a.v = a.o = a.cu_q = a.cu_k = f;
  a.lse = c.lse ? fgtest::kFakeLse : 0;
  a.bias = c.bias ? f : 0;
  a.sinks = c.sinks ? f : 0;
  a.alibi = c.alibi ? f : 0;
  a.used = c.seqused ? f : 0;
  return a;
}

// ---------------------------------------------------------------------------
// Host inputs
// ---------------------------------------------------------------------------

struct VHost {
  VCase c;
  DType dt = DType::f16;
  uint64_t seed = 0;
  Packing pk;
  VGeom g;
  std::vector<uint16_t> q, k, v;
  std::vector<float> bias, sinks, alibi;
  std::vector<int32_t> cu_q, cu_k, used;  // with the canaries after them

  AttentionProblem host_problem() const {
    Bases a;
    auto addr = [](const auto& vec) { return vec.empty() ? uintptr_t{0} : reinterpret_cast<uintptr_t>(vec.data()); };
    a.q = addr(q);
    a.k = addr(k);
    a.v = addr(v);
    a.bias = addr(bias);
    a.sinks = addr(sinks);
    a.alibi = addr(alibi);
    a.cu_q = addr(cu_q);
    a.cu_k = addr(cu_k);
    a.used = addr(used);
    return make_vproblem(c, dt, pk, g, a);  // O and LSE null: the reference does not use them
  }
};

void fill_inputs(VHost& h, std::mt19937_64& rng) {
  const VCase& c = h.c;
  const Packing& pk = h.pk;
  const VGeom& g = h.g;
  const DType dt = h.dt;
  const uint16_t nan16 = ref::to_dtype(dt, std::numeric_limits<float>::quiet_NaN());
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  h.q.assign(static_cast<size_t>(g.q_elems), nan16);
  h.k.assign(static_cast<size_t>(g.k_elems), nan16);
  h.v.assign(static_cast<size_t>(g.v_elems), nan16);
  for (int64_t b = 0; b < pk.batch(); ++b) {
    for (int64_t r = pk.cu_q[b]; r < pk.cu_q[b] + pk.q_len[b]; ++r)
      for (int64_t hh = 0; hh < c.heads_q; ++hh)
        for (int64_t e = 0; e < c.head_dim; ++e) h.q[static_cast<size_t>(r * g.q_ss + hh * g.q_sh + e)] = ref::to_dtype(dt, u(rng));
    for (int64_t j = pk.cu_k[b]; j < pk.cu_k[b] + pk.k_used[b]; ++j)
      for (int64_t hh = 0; hh < c.heads_kv; ++hh) {
        for (int64_t e = 0; e < c.head_dim; ++e)
          h.k[static_cast<size_t>(j * g.k_ss + hh * c.head_dim + e)] = ref::to_dtype(dt, u(rng));
        for (int64_t e = 0; e < c.head_dim_v; ++e)
          h.v[static_cast<size_t>(j * g.v_ss + hh * c.head_dim_v + e)] = ref::to_dtype(dt, u(rng));
      }
  }
  if (c.bias) {
    // [-2, 2] with ~10 % -inf inside each sequence's corner, NaN elsewhere.
    h.bias.assign(static_cast<size_t>(g.bias_elems), nanf);
    std::bernoulli_distribution neg_inf(0.1);
    for (int64_t b = 0; b < pk.batch(); ++b)
      for (int64_t hh = 0; hh < c.heads_q; ++hh)
        for (int64_t i = 0; i < pk.rows(b); ++i)
          for (int64_t j = 0; j < pk.keys(b); ++j)
            h.bias[static_cast<size_t>(b * g.bias_sb + hh * g.bias_sh + i * g.bias_sq + j)] =
                neg_inf(rng) ? -std::numeric_limits<float>::infinity() : 2.0f * u(rng);
  }
  if (c.sinks) {
    std::uniform_real_distribution<float> us(-2.0f, 4.0f);
    for (int64_t hh = 0; hh < c.heads_q; ++hh) h.sinks.push_back(us(rng));
    h.sinks.insert(h.sinks.end(), kNanTail, nanf);
  }
  if (c.alibi) {
    std::uniform_real_distribution<float> ua(0.5f, 2.0f);
    for (int64_t b = 0; b < pk.batch(); ++b)
      for (int64_t hh = 0; hh < c.heads_q; ++hh)
        h.alibi.push_back(ua(rng) * std::exp2(-8.0f * static_cast<float>(hh + 1) / static_cast<float>(c.heads_q)));
    h.alibi.insert(h.alibi.end(), kNanTail, nanf);
  }
  h.cu_q = pk.cu_q;
  h.cu_k = pk.cu_k;
  h.cu_q.insert(h.cu_q.end(), kOffsetCanaries, kOffsetCanary);
  h.cu_k.insert(h.cu_k.end(), kOffsetCanaries, kOffsetCanary);
  if (c.seqused) {
    h.used = pk.used;
    h.used.insert(h.used.end(), kOffsetCanaries, kOffsetCanary);
  }
}

// ---------------------------------------------------------------------------
// Planning: the tile first, then lengths from it
// ---------------------------------------------------------------------------

struct Planned {
  flashgen::KernelSpec spec;       // the forward kernel, or decode's split kernel
  flashgen::DecodePlan dp;         // decode only
  int64_t bm = 0, bn = 0;
};

Planned plan_for(const VCase& c, const AttentionProblem& p) {
  Planned r;
  const flashgen::DeviceInfo dev = flashgen::current_device();
  if (c.decode_splits >= 0) {
    r.dp = flashgen::plan_decode(p, dev.arch, dev.sm_count, c.decode_splits);
    r.spec = r.dp.split;
  } else {
    r.spec = flashgen::plan(p, dev.arch);
  }
  r.bm = r.spec.tile.block_m;
  r.bn = r.spec.tile.block_n;
  return r;
}

/// A packing whose bounds are typical of the case (for the first plan and for precompiling).
Packing provisional_packing(const VCase& c) {
  Packing pk;
  pk.q_len = {c.shape == Shape::decode ? 4 : 300};
  pk.k_used = pk.k_alloc = {c.shape == Shape::decode ? 3000 : 600};
  pk.cu_q = {0, pk.q_len[0]};
  pk.cu_k = {0, pk.k_used[0]};
  if (c.seqused) pk.used = pk.k_used;
  pk.total_q = pk.q_len[0];
  pk.total_k = pk.k_used[0];
  pk.bound_q = pk.q_len[0] + c.bound_slack_q;
  pk.bound_k = pk.k_used[0] + c.bound_slack_k;
  return pk;
}

DType unit_dtype(const VCase& c, const Unit& u) { return u.takes(c.dtype) ? c.dtype : DType::f16; }

/// Compiles every kernel the cases plan for `u` (its profile selected) on all host threads.
void precompile_varlen(const std::vector<VCase>& cases, const Unit& u) {
  std::vector<flashgen::KernelSpec> specs;
  std::set<std::string> seen;
  for (const VCase& c : cases) {
    const DType dt = unit_dtype(c, u);
    if (!u.takes(dt)) continue;
    const Packing pk = provisional_packing(c);
    try {
      const Planned pl = plan_for(c, make_vproblem(c, dt, pk, make_geom(c, pk), fake_bases(c)));
      for (const flashgen::KernelSpec& s : c.decode_splits >= 0 ? std::vector<flashgen::KernelSpec>{pl.dp.split, pl.dp.combine}
                                                                : std::vector<flashgen::KernelSpec>{pl.spec})
        if (seen.insert(s.canonical()).second) specs.push_back(s);
    } catch (const std::exception&) {
      // the case reports it
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::atomic<int> cached{0}, failed{0};
  auto worker = [&] {
    for (size_t n; (n = next.fetch_add(1)) < specs.size();) {
      try {
        cached += flashgen::compile(specs[n]).from_cache ? 1 : 0;
      } catch (const std::exception&) {
        ++failed;  // load_kernel in the case throws it again, with the message
      }
    }
  };
  const size_t nthreads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(specs.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  std::printf("  kernels: %zu for %s (%s) in %.1f s: %d from the disk cache, %d failed\n", specs.size(), u.name.c_str(),
              u.profile_name.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              cached.load(), failed.load());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// One (case, unit): run and check
// ---------------------------------------------------------------------------

/// Where element e of the O buffer lies (for messages).
std::string o_where(const VHost& h, int64_t e) {
  const int64_t n = h.g.o_elems;
  if (e < kOutGuard) return "guard band before O";
  if (e >= n - kOutGuard) return "guard band after O";
  const int64_t x = e - h.g.o_off, row = x / h.g.o_ss, hh = (x % h.g.o_ss) / h.g.o_sh, d = x % h.g.o_sh;
  if (d >= h.c.head_dim_v) return fmt::format("head padding of packed row {} head {}", row, hh);
  if (row < h.pk.cu_q[0]) return fmt::format("packed row {} before the first sequence (cu_seqlens_q[0] = {})", row, h.pk.cu_q[0]);
  if (row >= h.pk.cu_q.back()) return fmt::format("packed row {} after the last sequence (cu_seqlens_q[batch] = {})", row, h.pk.cu_q.back());
  int64_t b = 0;
  while (b + 1 < h.pk.batch() && h.pk.cu_q[b + 1] <= row) ++b;
  if (row - h.pk.cu_q[b] >= h.pk.bound_q)
    return fmt::format("packed row {} = row {} of sequence {}, past the bound seqlen_q = {}", row, row - h.pk.cu_q[b], b,
                       h.pk.bound_q);
  return fmt::format("packed row {} head {} d {}", row, hh, d);
}

UnitOutcome run_one(const VCase& c, const Unit& u) {
  UnitOutcome out;
  CaseResult& res = out.res;
  const DType dt = unit_dtype(c, u);
  std::string desc = c.str(dt), kernel = "-", packing;
  try {
    if (!u.takes(dt)) {
      out.line = fmt::format("{:<78} | {:<8} | skipped: {} takes no {}", desc, u.name, u.profile_name, flashgen::to_string(dt));
      return out;
    }
    UnitScope scope(u);
    VHost h;
    h.c = c;
    h.dt = dt;
    h.seed = case_seed();
    res.seed = h.seed;
    std::mt19937_64 rng(h.seed);

    // The tile, then the lengths made from it (again if the real plan's tile differs).
    Packing pk = provisional_packing(c);
    Planned pl = plan_for(c, make_vproblem(c, dt, pk, make_geom(c, pk), fake_bases(c)));
    for (int attempt = 0;; ++attempt) {
      pk = make_packing(c, pl.bm, pl.bn, rng);
      const Planned again = plan_for(c, make_vproblem(c, dt, pk, make_geom(c, pk), fake_bases(c)));
      const bool same = again.bm == pl.bm && again.bn == pl.bn;
      pl = again;
      if (same || attempt == 2) break;
    }
    h.pk = pk;
    h.g = make_geom(c, pk);
    packing = pk.str();
    fill_inputs(h, rng);

    // Sanity of the case itself (so that the checks below are not vacuous).
    if (!pl.spec.varlen) res.fail("the planned kernel is not a varlen kernel (spec.varlen false)");
    if (pk.q_len.front() != 0 || pk.q_len.back() != 0) res.fail("test bug: the first and last sequences must be empty");
    if (std::none_of(pk.q_len.begin(), pk.q_len.end(), [](int32_t x) { return x > 0; })) res.fail("test bug: no rows");

    rt::ensure_context();
    DeviceBuffer dq = uploaded(h.q), dk = uploaded(h.k), dv = uploaded(h.v), dbias = uploaded(h.bias),
                 dsinks = uploaded(h.sinks), dalibi = uploaded(h.alibi), dcu_q = uploaded(h.cu_q),
                 dcu_k = uploaded(h.cu_k), dused = uploaded(h.used);
    DeviceBuffer dout(static_cast<size_t>(h.g.o_elems) * 2), dlse(static_cast<size_t>(h.g.lse_elems) * 4);
    rt::check(drv().cuMemsetD16(dout.get(), kPoison16, dout.bytes() / 2), "cuMemsetD16 (O poison)");
    if (dlse.bytes() > 0) rt::check(drv().cuMemsetD32(dlse.get(), kPoison32, dlse.bytes() / 4), "cuMemsetD32 (LSE poison)");
    Bases a;
    a.q = dq.address();
    a.k = dk.address();
    a.v = dv.address();
    a.o = dout.address();
    a.lse = dlse.address();
    a.bias = dbias.address();
    a.sinks = dsinks.address();
    a.alibi = dalibi.address();
    a.cu_q = dcu_q.address();
    a.cu_k = dcu_k.address();
    a.used = dused.address();
    const AttentionProblem problem = make_vproblem(c, dt, pk, h.g, a);
    rt::check(drv().cuCtxSynchronize(), "cuCtxSynchronize");

    Stream stream;
    flashgen::KernelSpec ran;
    if (c.decode_splits >= 0) {
      flashgen::DecodeOptions opt;
      opt.plan = &pl.dp;
      DeviceBuffer ws;
      if (c.caller_workspace) {
        ws = DeviceBuffer(static_cast<size_t>(pl.dp.workspace_bytes));
        rt::check(drv().cuMemsetD32(ws.get(), 0x7fc00000u, ws.bytes() / 4), "cuMemsetD32 (workspace NaN)");
        rt::check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
        opt.workspace = reinterpret_cast<void*>(ws.get());
        opt.workspace_bytes = pl.dp.workspace_bytes;
      }
      const flashgen::DecodeInfo di = flashgen::decode(problem, stream.get(), opt);
      stream.sync();
      ran = di.plan.split;
      if (!di.launched) res.fail("decode() reported launched = false");
      if (c.decode_splits > 0 && di.plan.num_splits != c.decode_splits)
        res.fail(fmt::format("decode ran {} splits, asked for {}", di.plan.num_splits, c.decode_splits));
      kernel = fmt::format("split {} bm{} bn{} pack{} kw{} x{}{}", flashgen::to_string(ran.unit), ran.tile.block_m,
                           ran.tile.block_n, ran.pack, ran.key_warps(), di.plan.num_splits,
                           flashgen::decode_merges(di.plan) ? " +combine" : "");
    } else {
      const flashgen::Kernel kern = flashgen::load_kernel(pl.spec);
      flashgen::launch(kern, problem, stream.get());
      stream.sync();
      ran = pl.spec;
      kernel = fmt::format("{} bm{} bn{}", flashgen::to_string(ran.unit), ran.tile.block_m, ran.tile.block_n);
    }
    // The unit: the profile's own, except the wgmma profile's decode (and head
    // dims that are not multiples of 16), which run its m16n8k16 unit.
    flashgen::MatrixUnit want = flashgen::parse_matrix_unit(u.name);
    if (u.name == "wgmma" && (c.decode_splits >= 0 || c.head_dim % 16 != 0 || c.head_dim_v % 16 != 0))
      want = flashgen::MatrixUnit::m16n8k16;
    if (ran.unit != want)
      res.fail(fmt::format("ran unit {} instead of {}", flashgen::to_string(ran.unit), flashgen::to_string(want)));
    if (!ran.varlen) res.fail("the kernel that ran is not a varlen kernel");

    const std::vector<uint16_t> o_dev = dout.download<uint16_t>();
    const std::vector<float> lse_dev = dlse.download<float>();

    // The reference: every row of every sequence.
    const AttentionProblem hp = h.host_problem();
    std::vector<ref::RowId> rows;
    for (int64_t b = 0; b < pk.batch(); ++b) {
      const ref::Sequence s = ref::sequence(hp, b);
      if (s.q_begin != pk.cu_q[b] || s.seqlen_q != pk.rows(b) || s.seqlen_k != pk.keys(b))
        res.fail(fmt::format("test bug: the reference's sequence {} differs from the packing's", b));
    }
    for (int64_t b = 0; b < pk.batch(); ++b)
      for (int64_t i = 0; i < pk.rows(b); ++i)
        for (int64_t hh = 0; hh < c.heads_q; ++hh) rows.push_back({b, i, hh});
    std::vector<double> ro(rows.size() * static_cast<size_t>(c.head_dim_v)), rl(rows.size());
    ref::RowBounds bounds;
    const auto t0 = std::chrono::steady_clock::now();
    ref::forward_rows(hp, rows, ro.data(), rl.data(), 0, &bounds);
    res.ref_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // O: every element of every sequence's rows written and right; everything else poison.
    const double atol = o_atol(dt), rtol = lse_rtol(dt);
    const double ninf = -std::numeric_limits<double>::infinity();
    std::vector<uint8_t> o_cov(o_dev.size(), 0), l_cov(lse_dev.size(), 0);
    int64_t unwritten = 0, nans = 0, bad_o = 0, bad_lse = 0, lse_unwritten = 0, affected = 0;
    std::string first_unwritten, first_nan, first_o, first_lse, first_lse_unwritten;
    for (size_t r = 0; r < rows.size(); ++r) {
      const ref::RowId& id = rows[r];
      const int64_t row = pk.cu_q[id.b] + id.i;
      if (bounds.affected[r]) ++affected;
      const double* want_o = &ro[r * static_cast<size_t>(c.head_dim_v)];
      const bool no_key = std::all_of(want_o, want_o + c.head_dim_v, [](double x) { return x == 0.0; });
      res.rows_no_key += no_key ? 1 : 0;
      const auto where = [&] { return fmt::format("seq {} (q {}, k {}) row {} (packed {}) head {}", id.b, pk.rows(id.b), pk.keys(id.b), id.i, row, id.h); };
      const int64_t base = h.g.o_off + row * h.g.o_ss + id.h * h.g.o_sh;
      for (int64_t d = 0; d < c.head_dim_v; ++d) {
        const auto e = static_cast<size_t>(base + d);
        o_cov[e] = 1;
        const uint16_t bits = o_dev[e];
        if (bits == kPoison16) {
          if (unwritten++ == 0) first_unwritten = fmt::format("O[{} d {}]", where(), d);
          continue;
        }
        if (is_nan16(dt, bits)) {
          if (nans++ == 0) first_nan = fmt::format("O[{} d {}] = 0x{:04x}", where(), d, bits);
          continue;
        }
        const double got = ref::from_dtype(dt, bits), want = want_o[d];
        const double tol = atol + bounds.o_err[r * static_cast<size_t>(c.head_dim_v) + static_cast<size_t>(d)];
        const double err = std::fabs(got - want);
        const bool bad = no_key ? !(got == 0.0) : !(err <= tol);
        if (std::isfinite(err)) res.max_err_o = std::max(res.max_err_o, err);
        if (bad && bad_o++ == 0)
          first_o = fmt::format("O[{} d {}] = {:.6g}, expected {:.6g} (|err| {:.3g}, tol {:.3g}{})", where(), d, got, want,
                                err, tol, no_key ? "; the row sees no key: must be 0" : "");
      }
      if (c.lse) {
        const auto e = static_cast<size_t>(h.g.lse_off + id.h * h.g.lse_sh + row);
        l_cov[e] = 1;
        uint32_t lbits;
        std::memcpy(&lbits, &lse_dev[e], 4);
        const double got = lse_dev[e], want = rl[r];
        if (lbits == kPoison32) {
          if (lse_unwritten++ == 0) first_lse_unwritten = fmt::format("LSE[{}]", where());
          continue;
        }
        bool bad;
        double err = 0.0, tol = 0.0;
        if (no_key || want == ninf) {
          bad = !(got == want);  // -inf, or exactly the sink
        } else {
          err = std::fabs(got - want);
          tol = rtol * std::max(1.0, std::fabs(want - bounds.row_max[r])) + bounds.lse_err[r];
          bad = !(std::isfinite(got) && err <= tol);
          if (std::isfinite(err)) res.max_err_lse = std::max(res.max_err_lse, err);
        }
        if (bad && bad_lse++ == 0)
          first_lse = fmt::format("LSE[{}] = {:.9g}, expected {:.9g} (|err| {:.3g}, tol {:.3g})", where(), got, want, err, tol);
      }
    }
    res.rows_checked = static_cast<int64_t>(rows.size());
    if (affected > 0) res.fail(fmt::format("test bug: the reference read a NaN canary in {} rows", affected));
    if (unwritten > 0) res.fail(fmt::format("{} O elements of sequence rows never written (still poison), first {}", unwritten, first_unwritten));
    if (nans > 0) res.fail(fmt::format("{} O elements are NaN (a canary reached O?), first {}", nans, first_nan));
    if (bad_o > 0) res.fail(fmt::format("{} O elements off, first {}; max |err| {:.3g}", bad_o, first_o, res.max_err_o));
    if (lse_unwritten > 0) res.fail(fmt::format("{} LSE values never written, first {}", lse_unwritten, first_lse_unwritten));
    if (bad_lse > 0) res.fail(fmt::format("{} LSE values off, first {}", bad_lse, first_lse));

    int64_t outside = 0;
    std::string first_outside;
    for (size_t e = 0; e < o_dev.size(); ++e) {
      if (o_cov[e] || o_dev[e] == kPoison16) continue;
      if (outside++ == 0) first_outside = fmt::format("element {} ({}) = 0x{:04x}", e, o_where(h, static_cast<int64_t>(e)), o_dev[e]);
    }
    if (outside > 0) res.fail(fmt::format("{} O elements written outside the sequences' rows, first {}", outside, first_outside));
    int64_t l_outside = 0;
    std::string first_l_outside;
    for (size_t e = 0; e < lse_dev.size(); ++e) {
      uint32_t bits;
      std::memcpy(&bits, &lse_dev[e], 4);
      if (l_cov[e] || bits == kPoison32) continue;
      if (l_outside++ == 0) {
        const int64_t x = static_cast<int64_t>(e) - h.g.lse_off;
        first_l_outside = x < 0 || x >= c.heads_q * h.g.lse_sh
                              ? fmt::format("element {} (guard band) = {}", e, lse_dev[e])
                              : fmt::format("head {} packed row {} = {}", x / h.g.lse_sh, x % h.g.lse_sh, lse_dev[e]);
      }
    }
    if (l_outside > 0) res.fail(fmt::format("{} LSE elements written outside the sequences' rows, first {}", l_outside, first_l_outside));

    check_unchanged("Q", h.q, dq, res);
    check_unchanged("K", h.k, dk, res);
    check_unchanged("V", h.v, dv, res);
    check_unchanged("bias", h.bias, dbias, res);
    check_unchanged("sinks", h.sinks, dsinks, res);
    check_unchanged("alibi", h.alibi, dalibi, res);
    check_unchanged("cu_seqlens_q", h.cu_q, dcu_q, res);
    check_unchanged("cu_seqlens_k", h.cu_k, dcu_k, res);
    check_unchanged("seqused_k", h.used, dused, res);
    // Not vacuous: rows were checked, among them rows that see no key.
    if (res.rows_checked == 0) res.fail("no row checked");
    if (res.rows_no_key == 0) res.fail("test bug: no row without keys (the case has a sequence without keys)");
  } catch (const std::exception& e) {
    res.fail(std::string("exception: ") + e.what());
  }
  out.line = fmt::format("{:<78} | {:<8} | {:<40} | rows {} ({} no-key) | max|dO| {:.2e} max|dLSE| {:.2e} | {}\n      {}", desc,
                         u.name, kernel, res.rows_checked, res.rows_no_key, res.max_err_o, res.max_err_lse,
                         res.ok ? "ok" : fmt::format("FAIL (seed {})", res.seed), packing);
  return out;
}

void run_varlen_group(const char* title, const std::vector<VCase>& cases) {
  run_on_units(title, cases, precompile_varlen, run_one,
               [](const VCase& c, const Unit& u) { return c.str(unit_dtype(c, u)); });
}

VCase vc(const char* group, DType dt, int64_t d, int64_t hq, int64_t hkv, MaskKind m) {
  VCase c;
  c.group = group;
  c.dtype = dt;
  c.head_dim = c.head_dim_v = d;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.mask = m;
  return c;
}

// Forward through plan + launch: every mask (per-sequence alignment), GQA 4 and
// MQA, head dims 64, 128 and 96, seqused_k, sinks, per-sequence ALiBi, a bias.
std::vector<VCase> forward_cases() {
  std::vector<VCase> v;
  VCase c = vc("varlen fwd", DType::f16, 64, 8, 2, MaskKind::none);
  c.seqused = true;
  c.alibi = true;  // mask none aligns ALiBi bottom-right, per sequence
  v.push_back(c);
  c = vc("varlen fwd", DType::bf16, 128, 8, 2, MaskKind::causal_bottom_right);
  c.seqused = true;
  c.bound_slack_q = 37;
  c.bound_slack_k = 5;
  v.push_back(c);
  c = vc("varlen fwd", DType::f16, 128, 4, 1, MaskKind::causal_top_left);
  c.bias = true;
  v.push_back(c);
  c = vc("varlen fwd", DType::bf16, 64, 8, 2, MaskKind::window_bottom_right);
  c.window_left = 100;
  c.window_right = 0;
  c.seqused = true;
  c.sinks = true;
  v.push_back(c);
  c = vc("varlen fwd", DType::f16, 64, 4, 1, MaskKind::window_top_left);
  c.window_left = 50;
  c.window_right = 70;
  c.seqused = true;
  c.bound_slack_q = -3;  // the longest sequences are cut to the bounds
  c.bound_slack_k = -4;
  v.push_back(c);
  c = vc("varlen fwd", DType::f16, 96, 8, 2, MaskKind::causal_bottom_right);
  c.sinks = true;  // the sequence without keys: O = 0, LSE = the sink
  v.push_back(c);
  c = vc("varlen fwd", DType::bf16, 64, 8, 8, MaskKind::causal_top_left);
  c.lse = false;
  c.seqused = true;
  v.push_back(c);
  return v;
}

// Split-KV decode: 1..4 query rows per sequence, long keys, GQA packing 4 and 8,
// num_splits 1, 3 and auto, the library's workspace and the caller's.
std::vector<VCase> decode_cases() {
  std::vector<VCase> v;
  auto dc = [](DType dt, int64_t d, int64_t hq, int64_t hkv, MaskKind m, int splits, bool ws) {
    VCase c = vc("varlen decode", dt, d, hq, hkv, m);
    c.shape = Shape::decode;
    c.decode_splits = splits;
    c.caller_workspace = ws;
    return c;
  };
  VCase c = dc(DType::f16, 128, 32, 8, MaskKind::none, 1, false);
  c.seqused = true;
  v.push_back(c);
  c = dc(DType::bf16, 128, 16, 4, MaskKind::causal_bottom_right, 3, true);
  c.seqused = true;
  v.push_back(c);
  c = dc(DType::f16, 64, 8, 1, MaskKind::causal_top_left, 0, false);
  v.push_back(c);
  c = dc(DType::bf16, 128, 16, 4, MaskKind::window_bottom_right, 3, false);
  c.window_left = 700;
  c.window_right = 0;
  c.sinks = true;
  v.push_back(c);
  c = dc(DType::f16, 64, 8, 2, MaskKind::window_top_left, 0, true);
  c.window_left = 300;
  c.window_right = 1000;
  c.seqused = true;
  v.push_back(c);
  c = dc(DType::f16, 96, 8, 2, MaskKind::none, 3, true);
  c.sinks = true;
  c.alibi = true;
  v.push_back(c);
  c = dc(DType::bf16, 64, 16, 4, MaskKind::causal_bottom_right, 1, true);
  c.seqused = true;
  v.push_back(c);
  c = dc(DType::f16, 128, 32, 8, MaskKind::causal_bottom_right, 0, true);
  c.seqused = true;
  c.sinks = true;
  v.push_back(c);
  return v;
}

}  // namespace

TEST_SUITE("gpu") {

FLASHGEN_GPU_TEST("varlen: forward (plan + launch) on packed batches, every mask, GQA / MQA, seqused_k, every unit") {
  run_varlen_group("varlen forward", forward_cases());
}

FLASHGEN_GPU_TEST("varlen: split-KV decode on packed batches, num_splits 1 / 3 / auto, GQA packing, every unit") {
  run_varlen_group("varlen decode", decode_cases());
}

FLASHGEN_GPU_QUICK_TEST("varlen: quick subset (FLASHGEN_TEST_QUICK=1)") {
  run_varlen_group("varlen quick", {forward_cases()[1], decode_cases()[1]});
}

}  // TEST_SUITE
