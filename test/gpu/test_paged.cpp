// GPU tier: paged KV caches (problem.hpp: page_table, page_table_stride,
// page_size, num_pages, seqused_k) against the float64 reference
// (test/reference.hpp, which gathers each sequence's keys from the pages and
// computes it as its own dense problem), on every matrix unit of the device
// (units.hpp), through plan() + load_kernel() + launch() and through the
// split-KV decode (decode.hpp: num_splits 1, 3 and auto). The model is
// test_varlen.cpp; select these cases with -tc='paged*'.
//
// Every (case, unit) draws fresh random inputs (seed printed; FLASHGEN_TEST_SEED=<n>
// fixes it):
//  - K [num_pages, page_size, heads_kv, d] contiguous, V with padded slot and page
//    strides; page ids a random permutation; sequences 0 and 1 share their first
//    pages (prefix caching: the same ids at the start of both table rows);
//    seqused_k mostly not a multiple of the page size; a sequence without keys
//    (its rows: O = 0, LSE = -inf) where the shape has one;
//  - NaN in every page slot no sequence uses (tails of last pages, three spare
//    pages), every table entry past a sequence's pages names a spare page full of
//    NaN, NaN slots after the last page, 2^30 after the int32 table / seqused_k /
//    cu_seqlens_q, NaN head padding and NaN rows around Q;
//  - Q/O dense [batch, seqlen_q, heads_q, d] (padded heads) or packed (cu_seqlens_q
//    starting above 0, rows after the last sequence);
//  - O (its padding, rows outside the sequences, guard bands) poisoned with 0xFFFF,
//    the LSE (padded strides, guard bands) with 0xFFFFFFFF; afterwards every
//    element of every sequence's rows must be written and match the reference,
//    everything else must still be poison, and every input must be unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test/gpu/gpu_run.hpp"

namespace {

using namespace fgtest;

constexpr int32_t kTableCanary = 1 << 30;  // after the int32 arrays
constexpr int64_t kIntCanaries = 8;
constexpr int64_t kNanSlots = 16;          // NaN slots after the last page of K/V
constexpr int64_t kQNanRows = 4;           // NaN rows after Q

struct PCase {
  std::string group;
  DType dtype = DType::f16;  ///< bf16 runs as f16 on a unit without bf16 (m8n8k4)
  int64_t head_dim = 64;
  int64_t heads_q = 8, heads_kv = 2;
  MaskKind mask = MaskKind::none;
  int64_t window_left = -1, window_right = -1;
  int64_t page_size = 16;
  bool packed_q = false;   ///< cu_seqlens_q (cu_seqlens_k null)
  bool decode_shape = false;  ///< 1..4 query rows, up to ~3000 keys
  bool seqused = true;     ///< seqused_k (else every sequence has seqlen_k keys)
  int decode_splits = -1;  ///< -1: plan + launch; 0: decode, splits chosen; n: decode with n splits

  std::string str(DType dt) const {
    std::string extra;
    if (mask == MaskKind::window_top_left || mask == MaskKind::window_bottom_right)
      extra += fmt::format(" window=({},{})", window_left, window_right);
    extra += packed_q ? " q=packed" : " q=dense";
    if (!seqused) extra += " seqused_k=null";
    if (decode_splits >= 0)
      extra += fmt::format(" decode={}", decode_splits == 0 ? std::string("auto") : std::to_string(decode_splits));
    return fmt::format("[{}] {}{} d{} hq{} hkv{} {} page{}{}", group, flashgen::to_string(dt),
                       dt != dtype ? "(bf16 n/a)" : "", head_dim, heads_q, heads_kv, flashgen::to_string(mask),
                       page_size, extra);
  }
};

// ---------------------------------------------------------------------------
// Lengths, pages and buffers
// ---------------------------------------------------------------------------

struct PLayout {
  // lengths
  std::vector<int32_t> q_len, keys;  // per sequence (dense Q: q_len[b] = seqlen_q)
  std::vector<int32_t> cu_q;         // packed Q: [batch + 1]
  int64_t seqlen_q = 0, seqlen_k = 0, total_q = 0;
  // pages
  int64_t ps = 1, num_pages = 0, table_stride = 0, shared = 0, nan_page = 0;
  std::vector<int32_t> table;  // [batch * table_stride] (+ canaries in the host buffer)
  // strides (elements)
  int64_t q_sh = 0, q_ss = 0, q_sb = 0, q_elems = 0;
  int64_t k_ss = 0, k_sp = 0, k_elems = 0, v_ss = 0, v_sp = 0, v_elems = 0;
  int64_t o_sh = 0, o_ss = 0, o_sb = 0, o_elems = 0;
  int64_t lse_sh = 0, lse_sb = 0, lse_elems = 0;
  int64_t batch() const { return static_cast<int64_t>(keys.size()); }
  int64_t pages_of(int64_t b) const { return (keys[static_cast<size_t>(b)] + ps - 1) / ps; }
  int64_t q_row(int64_t b, int64_t i) const { return cu_q.empty() ? 0 : cu_q[static_cast<size_t>(b)] + i; }
  std::string str() const {
    std::string s;
    for (int64_t b = 0; b < batch(); ++b) s += fmt::format("{}{}:{}", s.empty() ? "" : " ", q_len[b], keys[b]);
    return fmt::format("seqs(q:k) {} | bound {}/{} | {} pages of {}, {} shared", s, seqlen_q, seqlen_k, num_pages, ps,
                       shared);
  }
};

PLayout make_layout(const PCase& c, std::mt19937_64& rng) {
  auto R = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng); };
  PLayout L;
  L.ps = c.page_size;
  const int64_t ps = L.ps;
  auto off_page = [&](int64_t k) { return ps > 1 && k > 0 && k % ps == 0 ? k + 1 : k; };  // ends inside a page
  std::vector<int64_t> k, q;
  if (c.decode_shape) {
    k = {off_page(R(1500, 3000)), R(1000, 3000), off_page(R(1, 40)), off_page(R(200, 600))};
    for (size_t b = 0; b < k.size(); ++b) q.push_back(R(1, 4));
  } else if (c.packed_q) {
    k = {off_page(R(300, 900)), R(300, 900), off_page(R(10, 40)), off_page(R(100, 300)), 0};
    q = {R(1, 100), 0, R(50, 150), R(1, 4), R(20, 80)};
  } else {
    k = {off_page(R(300, 900)), R(300, 900), off_page(R(1, 60)), 0};
    const int64_t sq = R(40, 130);
    q.assign(k.size(), sq);
  }
  if (!c.packed_q) {  // dense Q: one seqlen_q
    const int64_t sq = q[0];
    std::fill(q.begin(), q.end(), sq);
  }
  const int64_t max_k = *std::max_element(k.begin(), k.end());
  if (!c.seqused) std::fill(k.begin(), k.end(), max_k);  // every sequence has seqlen_k keys
  L.seqlen_k = max_k + (c.seqused ? R(0, 3) : 0);
  L.seqlen_q = *std::max_element(q.begin(), q.end());
  for (size_t b = 0; b < k.size(); ++b) {
    L.keys.push_back(static_cast<int32_t>(k[b]));
    L.q_len.push_back(static_cast<int32_t>(q[b]));
  }
  if (c.packed_q) {
    L.cu_q.push_back(static_cast<int32_t>(R(1, 5)));  // rows before the first sequence
    for (int64_t x : q) L.cu_q.push_back(static_cast<int32_t>(L.cu_q.back() + x));
    L.total_q = L.cu_q.back() + R(1, 5);  // rows after the last sequence
  }
  // Pages: sequences 0 and 1 share their first pages; three spare pages, one pads the table.
  const int64_t common = std::min<int64_t>(L.keys[0], L.keys[1]) / ps;
  L.shared = common == 0 ? 0 : std::max<int64_t>(1, common / 2);
  int64_t own = 0;
  for (int64_t b = 0; b < L.batch(); ++b) own += L.pages_of(b) - (b == 1 ? L.shared : 0);
  L.num_pages = own + 3;
  std::vector<int32_t> perm(static_cast<size_t>(L.num_pages));
  for (int64_t n = 0; n < L.num_pages; ++n) perm[static_cast<size_t>(n)] = static_cast<int32_t>(n);
  std::shuffle(perm.begin(), perm.end(), rng);
  L.nan_page = perm.back();
  L.table_stride = (L.seqlen_k + ps - 1) / ps + 1;
  L.table.assign(static_cast<size_t>(L.batch() * L.table_stride), static_cast<int32_t>(L.nan_page));
  size_t next = 0;
  for (int64_t b = 0; b < L.batch(); ++b)
    for (int64_t n = 0; n < L.pages_of(b); ++n)
      L.table[static_cast<size_t>(b * L.table_stride + n)] =
          b == 1 && n < L.shared ? L.table[static_cast<size_t>(n)] : perm[next++];
  // Buffers.
  const int64_t D = c.head_dim, Hq = c.heads_q, Hkv = c.heads_kv;
  L.q_sh = D + 8;
  L.q_ss = Hq * L.q_sh;
  L.q_sb = c.packed_q ? 0 : L.seqlen_q * L.q_ss;
  L.q_elems = ((c.packed_q ? L.total_q : L.batch() * L.seqlen_q) + kQNanRows) * L.q_ss;
  L.k_ss = Hkv * D;
  L.k_sp = ps * L.k_ss;
  L.k_elems = L.num_pages * L.k_sp + kNanSlots * L.k_ss;
  L.v_ss = Hkv * D + 8;
  L.v_sp = ps * L.v_ss + 8;
  L.v_elems = L.num_pages * L.v_sp + kNanSlots * L.v_ss;
  L.o_sh = D + 8;
  L.o_ss = Hq * L.o_sh;
  L.o_sb = c.packed_q ? 0 : L.seqlen_q * L.o_ss;
  L.o_elems = kOutGuard + (c.packed_q ? L.total_q : L.batch() * L.seqlen_q) * L.o_ss + kOutGuard;
  const int64_t rows = c.packed_q ? L.total_q : L.seqlen_q;
  L.lse_sh = rows + 3;
  L.lse_sb = c.packed_q ? 0 : Hq * L.lse_sh + 5;
  L.lse_elems = kLseGuard + (c.packed_q ? Hq * L.lse_sh : L.batch() * L.lse_sb) + kLseGuard;
  return L;
}

struct Bases {
  uintptr_t q = 0, k = 0, v = 0, o = 0, lse = 0, table = 0, used = 0, cu_q = 0;
};

AttentionProblem make_pproblem(const PCase& c, DType dt, const PLayout& L, const Bases& a) {
  AttentionProblem p;
  p.dtype = dt;
  p.batch = L.batch();
  p.seqlen_q = L.seqlen_q;
  p.seqlen_k = L.seqlen_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = p.head_dim_v = c.head_dim;
  p.mask = c.mask;
  if (c.mask == MaskKind::window_top_left || c.mask == MaskKind::window_bottom_right) {
    p.window_left = c.window_left;
    p.window_right = c.window_right;
  }
  auto ptr = [](uintptr_t base, int64_t elems, int64_t bytes) {
    return base != 0 ? reinterpret_cast<void*>(base + static_cast<uintptr_t>(elems * bytes)) : nullptr;
  };
  p.q = {ptr(a.q, 0, 2), L.q_sb, L.q_ss, L.q_sh};
  p.k = {ptr(a.k, 0, 2), L.k_sp, L.k_ss, c.head_dim};
  p.v = {ptr(a.v, 0, 2), L.v_sp, L.v_ss, c.head_dim};
  p.o = {ptr(a.o, kOutGuard, 2), L.o_sb, L.o_ss, L.o_sh};
  if (a.lse != 0) {
    p.lse.data = static_cast<float*>(ptr(a.lse, kLseGuard, 4));
    p.lse.stride_batch = L.lse_sb;
    p.lse.stride_head = L.lse_sh;
  }
  p.page_table = static_cast<const int32_t*>(ptr(a.table, 0, 4));
  p.page_table_stride = L.table_stride;
  p.page_size = L.ps;
  p.num_pages = L.num_pages;
  if (c.seqused) p.seqused_k = static_cast<const int32_t*>(ptr(a.used, 0, 4));
  if (c.packed_q) {
    p.cu_seqlens_q = static_cast<const int32_t*>(ptr(a.cu_q, 0, 4));
    p.total_q = L.total_q;
  }
  return p;
}

Bases fake_bases(const PCase& c) {
  const uintptr_t f = 0x10000000u;
  Bases a;
  a.q = a.k = a.v = a.o = a.table = f;
  a.lse = fgtest::kFakeLse;
  a.used = c.seqused ? f : 0;
  a.cu_q = c.packed_q ? f : 0;
  return a;
}

struct PHost {
  PCase c;
  DType dt = DType::f16;
  PLayout L;
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> table, used, cu_q;  // with canaries after them

  AttentionProblem host_problem() const {
    auto addr = [](const auto& vec) { return vec.empty() ? uintptr_t{0} : reinterpret_cast<uintptr_t>(vec.data()); };
    Bases a;
    a.q = addr(q);
    a.k = addr(k);
    a.v = addr(v);
    a.table = addr(table);
    a.used = addr(used);
    a.cu_q = addr(cu_q);
    return make_pproblem(c, dt, L, a);  // O and LSE null: the reference does not use them
  }
};

void fill_inputs(PHost& h, std::mt19937_64& rng) {
  const PCase& c = h.c;
  const PLayout& L = h.L;
  const uint16_t nan16 = ref::to_dtype(h.dt, std::numeric_limits<float>::quiet_NaN());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t D = c.head_dim;
  h.q.assign(static_cast<size_t>(L.q_elems), nan16);
  h.k.assign(static_cast<size_t>(L.k_elems), nan16);
  h.v.assign(static_cast<size_t>(L.v_elems), nan16);
  for (int64_t b = 0; b < L.batch(); ++b) {
    for (int64_t i = 0; i < L.q_len[static_cast<size_t>(b)]; ++i) {
      const int64_t base = c.packed_q ? L.q_row(b, i) * L.q_ss : b * L.q_sb + i * L.q_ss;
      for (int64_t hh = 0; hh < c.heads_q; ++hh)
        for (int64_t e = 0; e < D; ++e) h.q[static_cast<size_t>(base + hh * L.q_sh + e)] = ref::to_dtype(h.dt, u(rng));
    }
    for (int64_t j = 0; j < L.keys[static_cast<size_t>(b)]; ++j) {
      if (b == 1 && j / L.ps < L.shared) continue;  // sequence 0's pages
      const int64_t page = L.table[static_cast<size_t>(b * L.table_stride + j / L.ps)], slot = j % L.ps;
      for (int64_t hh = 0; hh < c.heads_kv; ++hh)
        for (int64_t e = 0; e < D; ++e) {
          h.k[static_cast<size_t>(page * L.k_sp + slot * L.k_ss + hh * D + e)] = ref::to_dtype(h.dt, u(rng));
          h.v[static_cast<size_t>(page * L.v_sp + slot * L.v_ss + hh * D + e)] = ref::to_dtype(h.dt, u(rng));
        }
    }
  }
  h.table = L.table;
  h.table.insert(h.table.end(), kIntCanaries, kTableCanary);
  if (c.seqused) {
    h.used = L.keys;
    h.used.insert(h.used.end(), kIntCanaries, kTableCanary);
  }
  if (c.packed_q) {
    h.cu_q = L.cu_q;
    h.cu_q.insert(h.cu_q.end(), kIntCanaries, kTableCanary);
  }
}

// ---------------------------------------------------------------------------
// Planning and precompiling
// ---------------------------------------------------------------------------

struct Planned {
  flashgen::KernelSpec spec;  // the forward kernel, or decode's split kernel
  flashgen::DecodePlan dp;    // decode only
};

Planned plan_for(const PCase& c, const AttentionProblem& p) {
  Planned r;
  const flashgen::DeviceInfo dev = flashgen::current_device();
  if (c.decode_splits >= 0) {
    r.dp = flashgen::plan_decode(p, dev.arch, dev.sm_count, c.decode_splits);
    r.spec = r.dp.split;
  } else {
    r.spec = flashgen::plan(p, dev.arch);
  }
  return r;
}

DType unit_dtype(const PCase& c, const Unit& u) { return u.takes(c.dtype) ? c.dtype : DType::f16; }

void precompile_paged(const std::vector<PCase>& cases, const Unit& u) {
  std::vector<flashgen::KernelSpec> specs;
  std::set<std::string> seen;
  for (const PCase& c : cases) {
    const DType dt = unit_dtype(c, u);
    if (!u.takes(dt)) continue;
    try {
      std::mt19937_64 rng(1);
      const PLayout L = make_layout(c, rng);
      const Planned pl = plan_for(c, make_pproblem(c, dt, L, fake_bases(c)));
      for (const flashgen::KernelSpec& s : c.decode_splits >= 0 ? std::vector<flashgen::KernelSpec>{pl.dp.split, pl.dp.combine}
                                                                : std::vector<flashgen::KernelSpec>{pl.spec})
        if (seen.insert(s.canonical()).second) specs.push_back(s);
    } catch (const std::exception&) {
      // the case reports it
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (size_t n; (n = next.fetch_add(1)) < specs.size();) {
      try {
        (void)flashgen::compile(specs[n]);
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
  std::printf("  kernels: %zu for %s (%s) in %.1f s, %d failed\n", specs.size(), u.name.c_str(), u.profile_name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failed.load());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// One (case, unit): run and check
// ---------------------------------------------------------------------------

UnitOutcome run_one(const PCase& c, const Unit& u) {
  UnitOutcome out;
  CaseResult& res = out.res;
  const DType dt = unit_dtype(c, u);
  std::string desc = c.str(dt), kernel = "-", layout;
  try {
    if (!u.takes(dt)) {
      out.line = fmt::format("{:<78} | {:<8} | skipped: {} takes no {}", desc, u.name, u.profile_name, flashgen::to_string(dt));
      return out;
    }
    UnitScope scope(u);
    PHost h;
    h.c = c;
    h.dt = dt;
    res.seed = case_seed();
    std::mt19937_64 rng(res.seed);
    h.L = make_layout(c, rng);
    const PLayout& L = h.L;
    layout = L.str();
    fill_inputs(h, rng);
    const Planned pl = plan_for(c, make_pproblem(c, dt, L, fake_bases(c)));
    if (!pl.spec.paged) res.fail("the planned kernel is not a paged kernel (spec.paged false)");

    rt::ensure_context();
    DeviceBuffer dq = uploaded(h.q), dk = uploaded(h.k), dv = uploaded(h.v), dtable = uploaded(h.table),
                 dused = uploaded(h.used), dcu_q = uploaded(h.cu_q);
    DeviceBuffer dout(static_cast<size_t>(L.o_elems) * 2), dlse(static_cast<size_t>(L.lse_elems) * 4);
    rt::check(drv().cuMemsetD16(dout.get(), kPoison16, dout.bytes() / 2), "cuMemsetD16 (O poison)");
    rt::check(drv().cuMemsetD32(dlse.get(), kPoison32, dlse.bytes() / 4), "cuMemsetD32 (LSE poison)");
    Bases a;
    a.q = dq.address();
    a.k = dk.address();
    a.v = dv.address();
    a.o = dout.address();
    a.lse = dlse.address();
    a.table = dtable.address();
    a.used = dused.address();
    a.cu_q = dcu_q.address();
    const AttentionProblem problem = make_pproblem(c, dt, L, a);
    rt::check(drv().cuCtxSynchronize(), "cuCtxSynchronize");

    Stream stream;
    flashgen::KernelSpec ran;
    if (c.decode_splits >= 0) {
      flashgen::DecodeOptions opt;
      opt.plan = &pl.dp;
      const flashgen::DecodeInfo di = flashgen::decode(problem, stream.get(), opt);
      stream.sync();
      ran = di.plan.split;
      if (!di.launched) res.fail("decode() reported launched = false");
      if (c.decode_splits > 0 && di.plan.num_splits != c.decode_splits)
        res.fail(fmt::format("decode ran {} splits, asked for {}", di.plan.num_splits, c.decode_splits));
      kernel = fmt::format("split {} bm{} bn{} pack{} x{}{}", flashgen::to_string(ran.unit), ran.tile.block_m,
                           ran.tile.block_n, ran.pack, di.plan.num_splits, flashgen::decode_merges(di.plan) ? " +combine" : "");
    } else {
      const flashgen::Kernel kern = flashgen::load_kernel(pl.spec);
      flashgen::launch(kern, problem, stream.get());
      stream.sync();
      ran = pl.spec;
      kernel = fmt::format("{} bm{} bn{}", flashgen::to_string(ran.unit), ran.tile.block_m, ran.tile.block_n);
    }
    // The unit: the profile's own, except the wgmma profile's decode, which runs its
    // m16n8k16 unit (page sizes below 8 included: the wgmma producer gathers them).
    flashgen::MatrixUnit want = flashgen::parse_matrix_unit(u.name);
    if (u.name == "wgmma" && (c.decode_splits >= 0 || c.head_dim % 16 != 0)) want = flashgen::MatrixUnit::m16n8k16;
    if (ran.unit != want)
      res.fail(fmt::format("ran unit {} instead of {}", flashgen::to_string(ran.unit), flashgen::to_string(want)));
    if (!ran.paged) res.fail("the kernel that ran is not a paged kernel");

    const std::vector<uint16_t> o_dev = dout.download<uint16_t>();
    const std::vector<float> lse_dev = dlse.download<float>();

    // The reference: every row of every sequence.
    const AttentionProblem hp = h.host_problem();
    std::vector<ref::RowId> rows;
    for (int64_t b = 0; b < L.batch(); ++b) {
      const ref::Sequence s = ref::sequence(hp, b);
      if (s.seqlen_q != L.q_len[b] || s.seqlen_k != L.keys[b])
        res.fail(fmt::format("test bug: the reference's sequence {} differs from the layout's", b));
      for (int64_t i = 0; i < L.q_len[b]; ++i)
        for (int64_t hh = 0; hh < c.heads_q; ++hh) rows.push_back({b, i, hh});
    }
    const int64_t D = c.head_dim;
    std::vector<double> ro(rows.size() * static_cast<size_t>(D)), rl(rows.size());
    ref::RowBounds bounds;
    const auto t0 = std::chrono::steady_clock::now();
    ref::forward_rows(hp, rows, ro.data(), rl.data(), 0, &bounds);
    res.ref_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const double atol = o_atol(dt), rtol = lse_rtol(dt);
    const double ninf = -std::numeric_limits<double>::infinity();
    std::vector<uint8_t> o_cov(o_dev.size(), 0), l_cov(lse_dev.size(), 0);
    int64_t unwritten = 0, nans = 0, bad_o = 0, bad_lse = 0, lse_unwritten = 0, affected = 0;
    std::string first_unwritten, first_nan, first_o, first_lse, first_lse_unwritten;
    for (size_t r = 0; r < rows.size(); ++r) {
      const ref::RowId& id = rows[r];
      if (bounds.affected[r]) ++affected;
      const double* want_o = &ro[r * static_cast<size_t>(D)];
      const bool no_key = std::all_of(want_o, want_o + D, [](double x) { return x == 0.0; }) && rl[r] == ninf;
      res.rows_no_key += no_key ? 1 : 0;
      const auto where = [&] {
        return fmt::format("seq {} (q {}, k {}) row {} head {}", id.b, L.q_len[id.b], L.keys[id.b], id.i, id.h);
      };
      const int64_t base = kOutGuard + (c.packed_q ? L.q_row(id.b, id.i) * L.o_ss : id.b * L.o_sb + id.i * L.o_ss) +
                           id.h * L.o_sh;
      for (int64_t d = 0; d < D; ++d) {
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
        const double tol = atol + bounds.o_err[r * static_cast<size_t>(D) + static_cast<size_t>(d)];
        const double err = std::fabs(got - want);
        const bool bad = no_key ? !(got == 0.0) : !(err <= tol);
        if (std::isfinite(err)) res.max_err_o = std::max(res.max_err_o, err);
        if (bad && bad_o++ == 0)
          first_o = fmt::format("O[{} d {}] = {:.6g}, expected {:.6g} (|err| {:.3g}, tol {:.3g})", where(), d, got, want,
                                err, tol);
      }
      const auto e = static_cast<size_t>(kLseGuard + (c.packed_q ? id.h * L.lse_sh + L.q_row(id.b, id.i)
                                                                 : id.b * L.lse_sb + id.h * L.lse_sh + id.i));
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
      if (want == ninf) {
        bad = !(got == want);
      } else {
        err = std::fabs(got - want);
        tol = rtol * std::max(1.0, std::fabs(want - bounds.row_max[r])) + bounds.lse_err[r];
        bad = !(std::isfinite(got) && err <= tol);
        if (std::isfinite(err)) res.max_err_lse = std::max(res.max_err_lse, err);
      }
      if (bad && bad_lse++ == 0)
        first_lse = fmt::format("LSE[{}] = {:.9g}, expected {:.9g} (|err| {:.3g}, tol {:.3g})", where(), got, want, err, tol);
    }
    res.rows_checked = static_cast<int64_t>(rows.size());
    if (affected > 0) res.fail(fmt::format("test bug: the reference read a NaN canary in {} rows", affected));
    if (unwritten > 0) res.fail(fmt::format("{} O elements never written (still poison), first {}", unwritten, first_unwritten));
    if (nans > 0) res.fail(fmt::format("{} O elements are NaN (a NaN slot or page reached O?), first {}", nans, first_nan));
    if (bad_o > 0) res.fail(fmt::format("{} O elements off, first {}; max |err| {:.3g}", bad_o, first_o, res.max_err_o));
    if (lse_unwritten > 0) res.fail(fmt::format("{} LSE values never written, first {}", lse_unwritten, first_lse_unwritten));
    if (bad_lse > 0) res.fail(fmt::format("{} LSE values off, first {}", bad_lse, first_lse));

    int64_t outside = 0, l_outside = 0;
    size_t first_outside = 0, first_l_outside = 0;
    for (size_t e = 0; e < o_dev.size(); ++e)
      if (!o_cov[e] && o_dev[e] != kPoison16 && outside++ == 0) first_outside = e;
    for (size_t e = 0; e < lse_dev.size(); ++e) {
      uint32_t bits;
      std::memcpy(&bits, &lse_dev[e], 4);
      if (!l_cov[e] && bits != kPoison32 && l_outside++ == 0) first_l_outside = e;
    }
    if (outside > 0)
      res.fail(fmt::format("{} O elements written outside the sequences' rows (padding, guard bands or rows no "
                           "sequence owns), first element {} of the buffer (view starts at {})",
                           outside, first_outside, kOutGuard));
    if (l_outside > 0)
      res.fail(fmt::format("{} LSE elements written outside the sequences' rows, first element {} (view starts at {})",
                           l_outside, first_l_outside, kLseGuard));

    check_unchanged("Q", h.q, dq, res);
    check_unchanged("K", h.k, dk, res);
    check_unchanged("V", h.v, dv, res);
    check_unchanged("page_table", h.table, dtable, res);
    check_unchanged("seqused_k", h.used, dused, res);
    check_unchanged("cu_seqlens_q", h.cu_q, dcu_q, res);
    if (res.rows_checked == 0) res.fail("no row checked");
  } catch (const std::exception& e) {
    res.fail(std::string("exception: ") + e.what());
  }
  out.line = fmt::format("{:<78} | {:<8} | {:<36} | rows {} ({} no-key) | max|dO| {:.2e} max|dLSE| {:.2e} | {}\n      {}",
                         desc, u.name, kernel, res.rows_checked, res.rows_no_key, res.max_err_o, res.max_err_lse,
                         res.ok ? "ok" : fmt::format("FAIL (seed {})", res.seed), layout);
  return out;
}

void run_paged_group(const char* title, const std::vector<PCase>& cases) {
  run_on_units(title, cases, precompile_paged, run_one,
               [](const PCase& c, const Unit& u) { return c.str(unit_dtype(c, u)); });
}

PCase pc(const char* group, DType dt, int64_t d, int64_t hq, int64_t hkv, MaskKind m, int64_t ps) {
  PCase c;
  c.group = group;
  c.dtype = dt;
  c.head_dim = d;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.mask = m;
  c.page_size = ps;
  return c;
}

// Forward through plan + launch, dense Q: chunked prefill (causal bottom-right),
// no mask, a bottom-right window, GQA 4; page sizes 1, 2, 4, 8, 16, 64, 256 (below 32 the
// wgmma producer gathers rows with cp.async: head dims 64 + 32 and 4 x 64 chunks there too).
std::vector<PCase> forward_cases() {
  std::vector<PCase> v;
  v.push_back(pc("paged fwd", DType::f16, 64, 8, 2, MaskKind::causal_bottom_right, 16));
  v.push_back(pc("paged fwd", DType::bf16, 128, 8, 2, MaskKind::none, 1));
  v.push_back(pc("paged fwd", DType::bf16, 128, 16, 4, MaskKind::causal_bottom_right, 1));
  v.push_back(pc("paged fwd", DType::f16, 96, 8, 2, MaskKind::causal_bottom_right, 2));
  v.push_back(pc("paged fwd", DType::bf16, 256, 8, 2, MaskKind::causal_bottom_right, 4));
  PCase c = pc("paged fwd", DType::f16, 64, 8, 2, MaskKind::window_bottom_right, 8);
  c.window_left = 100;
  c.window_right = 0;
  v.push_back(c);
  v.push_back(pc("paged fwd", DType::bf16, 64, 16, 4, MaskKind::causal_bottom_right, 64));
  v.push_back(pc("paged fwd", DType::f16, 128, 8, 2, MaskKind::causal_bottom_right, 256));
  c = pc("paged fwd", DType::f16, 64, 8, 2, MaskKind::none, 16);
  c.seqused = false;
  v.push_back(c);
  return v;
}

// Paged keys with a packed Q (cu_seqlens_q, cu_seqlens_k null).
std::vector<PCase> packed_cases() {
  std::vector<PCase> v;
  PCase c = pc("paged+packed", DType::f16, 64, 8, 2, MaskKind::causal_bottom_right, 16);
  c.packed_q = true;
  v.push_back(c);
  c = pc("paged+packed", DType::bf16, 128, 8, 2, MaskKind::window_bottom_right, 1);
  c.window_left = 64;
  c.window_right = 0;
  c.packed_q = true;
  v.push_back(c);
  c = pc("paged+packed", DType::f16, 64, 16, 4, MaskKind::none, 256);
  c.packed_q = true;
  v.push_back(c);
  return v;
}

// Split-KV decode: 1..4 query rows, up to ~3000 keys, page sizes 1, 16, 256, num_splits 1 / 3 / auto.
std::vector<PCase> decode_cases() {
  std::vector<PCase> v;
  auto dc = [](DType dt, int64_t d, int64_t hq, int64_t hkv, MaskKind m, int64_t ps, int splits) {
    PCase c = pc("paged decode", dt, d, hq, hkv, m, ps);
    c.decode_shape = true;
    c.decode_splits = splits;
    return c;
  };
  v.push_back(dc(DType::f16, 128, 32, 8, MaskKind::none, 16, 1));
  v.push_back(dc(DType::bf16, 128, 16, 4, MaskKind::causal_bottom_right, 256, 3));
  v.push_back(dc(DType::f16, 64, 8, 2, MaskKind::causal_bottom_right, 1, 0));
  PCase c = dc(DType::f16, 128, 16, 4, MaskKind::window_bottom_right, 16, 3);
  c.window_left = 500;
  c.window_right = 0;
  c.packed_q = true;
  v.push_back(c);
  v.push_back(dc(DType::bf16, 64, 8, 2, MaskKind::none, 256, 0));
  v.push_back(dc(DType::f16, 64, 8, 2, MaskKind::causal_bottom_right, 1, 3));
  return v;
}

}  // namespace

TEST_SUITE("gpu") {

FLASHGEN_GPU_TEST("paged: forward (plan + launch), dense Q, chunked prefill / none / window, GQA, page sizes 1..256, every unit") {
  run_paged_group("paged forward", forward_cases());
}

FLASHGEN_GPU_TEST("paged: forward (plan + launch) with a packed Q (cu_seqlens_q), every unit") {
  run_paged_group("paged packed", packed_cases());
}

FLASHGEN_GPU_TEST("paged: split-KV decode, num_splits 1 / 3 / auto, page sizes 1 / 16 / 256, every unit") {
  run_paged_group("paged decode", decode_cases());
}

FLASHGEN_GPU_QUICK_TEST("paged: quick subset (FLASHGEN_TEST_QUICK=1)") {
  run_paged_group("paged quick", {forward_cases()[0], packed_cases()[0], decode_cases()[1]});
}

}  // TEST_SUITE
