// flashgen tune: rank the tiles that fit the profile with the model
// (tools/flashgen_model.cpp), compile the best (registers and spills from
// ptxas), time the best few on the GPU with device events (warm-up, median,
// inputs rotated across more memory than L2 holds), check their outputs
// against the profile's default tile, and write the fastest to a tune file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sys/stat.h>

#include "flashgen/flashgen.hpp"
#include "gen/unit_traits.hpp"
#include "runtime/cache.hpp"
#include "runtime/driver.hpp"
#include "runtime/tune_internal.hpp"
#include "tools/flashgen_cli.hpp"
#include "tools/flashgen_cmds.hpp"

namespace flashgen::cli {
namespace {

namespace fgrt = flashgen::rt;

// ---- device memory -------------------------------------------------------------

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) fgrt::check(fgrt::driver().cuMemAlloc(&ptr_, bytes_), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    if (ptr_ != 0) (void)fgrt::driver().cuMemFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return ptr_; }
  void* ptr() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Random values of moderate magnitude (|x| in [2^-5, 2^-1)) as f16 / bf16 bits.
void fill_random(std::vector<uint16_t>& h, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < h.size(); i += 4) {
    const uint64_t r = rng();
    for (size_t j = 0; j < 4 && i + j < h.size(); ++j) {
      const uint16_t bits = static_cast<uint16_t>(r >> (16 * j));
      const uint16_t sign = bits & 0x8000u;
      h[i + j] = dt == DType::f16 ? static_cast<uint16_t>(sign | (0x2800u + (bits & 0x0fffu)))   // 2^-5 .. 2^-1
                                  : static_cast<uint16_t>(sign | (0x3d00u + (bits & 0x01ffu)));  // 2^-5 .. 2^-1
    }
  }
}

// One input/output set; `sets` of them rotate so that timed runs do not find
// their inputs in L2 from the previous run.
struct DeviceSet {
  DeviceBuffer q, k, v, o, bias, lse, sinks, alibi;
  DeviceBuffer cu_seqlens_q, cu_seqlens_k, seqused_k;  // a packed batch's int32 offsets and used keys
  DeviceBuffer page_table;  // a paged KV cache: int32 [batch, page_table_stride]
};

struct Workload {
  ProblemDesc desc;
  std::vector<DeviceSet> sets;
  size_t set_bytes = 0;

  AttentionProblem problem(size_t i) const {
    const DeviceSet& s = sets[i % sets.size()];
    const ProblemDesc& d = desc;
    AttentionProblem p = make_bshd_problem(d.dtype, d.batch, d.seqlen_q, d.seqlen_k, d.heads_q, d.heads_kv, d.head_dim,
                                           d.head_dim_v, d.mask, s.q.ptr(), s.k.ptr(), s.v.ptr(), s.o.ptr());
    p.softcap = d.softcap;
    p.window_left = d.window_left;
    p.window_right = d.window_right;
    if (d.sinks) p.sinks = static_cast<const float*>(s.sinks.ptr());
    if (d.alibi) p.alibi_slopes = static_cast<const float*>(s.alibi.ptr());  // [heads_q], alibi_stride_batch 0
    if (d.varlen()) {
      // One batch of packed rows (the strides within a batch stay): Q/O [total_q, heads_q, d], K/V [total_k, ...].
      for (TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) t->stride_batch = 0;
      p.cu_seqlens_q = static_cast<const int32_t*>(s.cu_seqlens_q.ptr());
      p.cu_seqlens_k = static_cast<const int32_t*>(s.cu_seqlens_k.ptr());
      if (d.seqused_k) p.seqused_k = static_cast<const int32_t*>(s.seqused_k.ptr());
      p.total_q = d.total_q();
      p.total_k = d.total_k();
    }
    if (d.paged()) {
      // K/V [num_pages, page_size, heads_kv, d]: page stride page_size rows; the keys through the page table.
      p.page_table = static_cast<const int32_t*>(s.page_table.ptr());
      p.page_size = d.page_size;
      p.page_table_stride = d.page_table_stride();
      p.num_pages = d.num_pages();
      for (TensorRef* t : {&p.k, &p.v}) t->stride_batch = d.page_size * t->stride_seq;
      if (d.varlen()) {  // (no cu_seqlens_k: seqused_k counts each sequence's keys)
        p.cu_seqlens_k = nullptr;
        p.total_k = 0;
      }
      if (d.varlen() || d.seqused_k) p.seqused_k = static_cast<const int32_t*>(s.seqused_k.ptr());
    }
    if (d.bias != BiasKind::none) {
      p.bias.kind = d.bias;
      p.bias.data = s.bias.ptr();
      p.bias.stride_k = 1;
      p.bias.stride_q = d.seqlen_k;
      p.bias.stride_head = d.seqlen_q * d.seqlen_k;
      p.bias.stride_batch = d.heads_q * d.seqlen_q * d.seqlen_k;
    }
    if (d.lse) {
      p.lse.data = static_cast<float*>(s.lse.ptr());
      p.lse.stride_head = d.varlen() ? d.total_q() : d.seqlen_q;  // (packed: [heads_q, total_q])
      p.lse.stride_batch = d.varlen() ? 0 : d.heads_q * d.seqlen_q;
    }
    return p;
  }
};

Workload make_workload(const ProblemDesc& d, int64_t l2_bytes) {
  Workload w;
  w.desc = d;
  // Rows of Q/O and K/V: batch x seqlen, or a packed batch's sums.
  const int64_t rows_q = d.varlen() ? d.total_q() : d.batch * d.seqlen_q;
  const int64_t rows_k = d.paged()    ? d.num_pages() * d.page_size  // (a paged cache: whole pages)
                         : d.varlen() ? d.total_k()
                                      : d.batch * d.seqlen_k;
  const size_t q = static_cast<size_t>(rows_q * d.heads_q * d.head_dim);
  const size_t k = static_cast<size_t>(rows_k * d.heads_kv * d.head_dim);
  const size_t v = static_cast<size_t>(rows_k * d.heads_kv * d.head_dim_v);
  const size_t o = static_cast<size_t>(rows_q * d.heads_q * d.head_dim_v);
  const size_t bias = d.bias == BiasKind::none ? 0
                                               : static_cast<size_t>(d.batch * d.heads_q * d.seqlen_q * d.seqlen_k) *
                                                     (d.bias == BiasKind::f32 ? 2 : 1);  // in 2-byte units
  const size_t lse = d.lse ? static_cast<size_t>(rows_q * d.heads_q) * 2 : 0;
  // A packed batch's offsets: int32 [batch + 1] prefix sums of the problem's lengths
  // (valid by construction: non-decreasing, ending at total_q / total_k, no sequence
  // past max_seqlen), and seqused_k [batch] = each sequence's keys (all of them).
  std::vector<int32_t> cu_q, cu_k, used_k;
  if (d.varlen()) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (size_t b = 0; b < d.seqlens_q.size(); ++b) {  // (sums within int32: the parser's rule)
      cu_q.push_back(static_cast<int32_t>(cu_q.back() + d.seqlens_q[b]));
      cu_k.push_back(static_cast<int32_t>(cu_k.back() + d.seqlens_k[b]));
      if (d.seqused_k || d.paged()) used_k.push_back(static_cast<int32_t>(d.seqlens_k[b]));
    }
    if (d.paged()) cu_k.clear();  // (a paged packed batch passes no cu_seqlens_k)
  } else if (d.paged() && d.seqused_k) {
    used_k.assign(static_cast<size_t>(d.batch), static_cast<int32_t>(d.seqlen_k));  // (all keys used)
  }
  // A paged cache's table: int32 [batch, page_table_stride], sequence b's pages (ceil(its keys /
  // page_size) of them) in a fixed shuffled order of [0, num_pages) (vLLM's caches are not in order);
  // the entries past a sequence's pages are never read (0).
  std::vector<int32_t> table;
  if (d.paged()) {
    const int64_t stride = d.page_table_stride(), pages = d.num_pages();
    std::vector<int32_t> order(static_cast<size_t>(pages));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);  // (num_pages < 2^31: checked)
    std::shuffle(order.begin(), order.end(), std::mt19937_64(0x9a9e5));
    table.assign(static_cast<size_t>(d.batch * stride), 0);
    size_t next = 0;
    for (int64_t b = 0; b < d.batch; ++b) {
      const int64_t keys = d.varlen() ? d.seqlens_k[static_cast<size_t>(b)] : d.seqlen_k;
      for (int64_t j = 0; j < (keys + d.page_size - 1) / d.page_size; ++j)
        table[static_cast<size_t>(b * stride + j)] = order[next++];
    }
  }
  // Sinks and ALiBi slopes: float32 [heads_q] each, small nonzero values (sink 0.5 for
  // every head; slope 2^-(h+1), the ALiBi paper's geometric sequence).
  const size_t heads = static_cast<size_t>(d.heads_q);
  std::vector<float> sink_values(d.sinks ? heads : 0, 0.5f), slope_values(d.alibi ? heads : 0);
  for (size_t h = 0; h < slope_values.size(); ++h)
    slope_values[h] = std::ldexp(1.0f, -static_cast<int>(std::min<size_t>(h + 1, 126)));
  w.set_bytes = 2 * (q + k + v + o + bias + lse) +
                4 * (sink_values.size() + slope_values.size() + cu_q.size() + cu_k.size() + used_k.size() +
                     table.size());
  // Enough sets that the inputs of one run are evicted from L2 by the next
  // ones, within 8 GiB of device memory.
  size_t n = static_cast<size_t>(std::ceil(2.0 * static_cast<double>(std::max<int64_t>(l2_bytes, 1)) /
                                           static_cast<double>(std::max<size_t>(w.set_bytes, 1)))) +
             1;
  n = std::clamp<size_t>(n, 2, 8);
  while (n > 1 && n * w.set_bytes > (size_t{8} << 30)) --n;
  std::vector<uint16_t> host(std::max({q, k, v, bias, size_t{1}}));
  fill_random(host, d.dtype, 0x5eed);
  const fgrt::Driver& drv = fgrt::driver();
  for (size_t i = 0; i < n; ++i) {
    DeviceSet s{DeviceBuffer(2 * q),
                DeviceBuffer(2 * k),
                DeviceBuffer(2 * v),
                DeviceBuffer(2 * o),
                DeviceBuffer(2 * bias),
                DeviceBuffer(2 * lse),
                DeviceBuffer(4 * sink_values.size()),
                DeviceBuffer(4 * slope_values.size()),
                DeviceBuffer(4 * cu_q.size()),
                DeviceBuffer(4 * cu_k.size()),
                DeviceBuffer(4 * used_k.size()),
                DeviceBuffer(4 * table.size())};
    // Each set gets different data: a different window of the random host buffer.
    auto upload = [&](const DeviceBuffer& b, size_t elems, size_t shift) {
      if (elems == 0) return;
      const size_t off = (shift * 7919) % (host.size() - std::min(host.size() - 1, elems - 1));
      const size_t first = std::min(elems, host.size() - off);
      fgrt::check(drv.cuMemcpyHtoD(b.get(), host.data() + off, 2 * first), "cuMemcpyHtoD");
      if (first < elems)
        fgrt::check(drv.cuMemcpyHtoD(b.get() + 2 * first, host.data(), 2 * (elems - first)), "cuMemcpyHtoD");
    };
    upload(s.q, q, i * 3 + 0);
    upload(s.k, k, i * 3 + 1);
    upload(s.v, v, i * 3 + 2);
    upload(s.bias, bias, i * 3 + 3);
    if (o > 0) fgrt::check(drv.cuMemsetD16(s.o.get(), 0, o), "cuMemsetD16");
    if (!sink_values.empty())
      fgrt::check(drv.cuMemcpyHtoD(s.sinks.get(), sink_values.data(), 4 * sink_values.size()), "cuMemcpyHtoD");
    if (!slope_values.empty())
      fgrt::check(drv.cuMemcpyHtoD(s.alibi.get(), slope_values.data(), 4 * slope_values.size()), "cuMemcpyHtoD");
    for (const auto& [buffer, values] : {std::pair<const DeviceBuffer*, const std::vector<int32_t>*>{&s.cu_seqlens_q, &cu_q},
                                         {&s.cu_seqlens_k, &cu_k},
                                         {&s.seqused_k, &used_k},
                                         {&s.page_table, &table}})
      if (!values->empty())
        fgrt::check(drv.cuMemcpyHtoD(buffer->get(), values->data(), 4 * values->size()), "cuMemcpyHtoD");
    w.sets.push_back(std::move(s));
  }
  fgrt::check(drv.cuCtxSynchronize(), "cuCtxSynchronize");
  return w;
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double tflops = 0;
  std::vector<uint16_t> sample;  // O values of set 0 for the comparison
  std::string error;
};

// Samples O of set 0: the first and last 32768 elements and about 2048 spread between.
std::vector<uint16_t> sample_o(const Workload& w) {
  const DeviceBuffer& o = w.sets[0].o;
  const size_t n = o.bytes() / 2;
  std::vector<uint16_t> all;
  const fgrt::Driver& drv = fgrt::driver();
  if (n <= 3 * 32768) {
    all.resize(n);
    if (n > 0) fgrt::check(drv.cuMemcpyDtoH(all.data(), o.get(), 2 * n), "cuMemcpyDtoH");
    return all;
  }
  std::vector<uint16_t> head(32768), tail(32768);
  fgrt::check(drv.cuMemcpyDtoH(head.data(), o.get(), 2 * head.size()), "cuMemcpyDtoH");
  fgrt::check(drv.cuMemcpyDtoH(tail.data(), o.get() + 2 * (n - tail.size()), 2 * tail.size()), "cuMemcpyDtoH");
  all = head;
  const size_t stride = std::max<size_t>(4097, (n - 2 * 32768) / 2048) | 1;
  for (size_t i = 32768; i + 32768 < n; i += stride) {
    uint16_t x = 0;
    fgrt::check(drv.cuMemcpyDtoH(&x, o.get() + 2 * i, 2), "cuMemcpyDtoH");
    all.push_back(x);
  }
  all.insert(all.end(), tail.begin(), tail.end());
  return all;
}

double to_float(DType dt, uint16_t bits) {
  if (dt == DType::bf16) {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const uint32_t sign = (bits >> 15) & 1, exp = (bits >> 10) & 0x1f, man = bits & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(man), -24);
  else if (exp == 31) v = man ? std::nan("") : INFINITY;
  else v = std::ldexp(static_cast<double>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

Timing time_spec(const KernelSpec& spec, const Workload& w, int warmups, int runs) {
  Timing t;
  const fgrt::Driver& drv = fgrt::driver();
  try {
    const Kernel kernel = load_kernel(spec);
    CUstream stream = nullptr;
    fgrt::check(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    std::vector<CUevent> ev(2 * static_cast<size_t>(runs));
    for (CUevent& e : ev) fgrt::check(drv.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    size_t set = 1;
    for (int i = 0; i < warmups; ++i) launch(kernel, w.problem(set++), stream);
    fgrt::check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (int i = 0; i < runs; ++i) {
      fgrt::check(drv.cuEventRecord(ev[2 * i], stream), "cuEventRecord");
      launch(kernel, w.problem(set++), stream);
      fgrt::check(drv.cuEventRecord(ev[2 * i + 1], stream), "cuEventRecord");
    }
    fgrt::check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize");
    std::vector<double> ms(static_cast<size_t>(runs));
    for (int i = 0; i < runs; ++i) {
      float x = 0;
      fgrt::check(drv.cuEventElapsedTime(&x, ev[2 * i], ev[2 * i + 1]), "cuEventElapsedTime");
      ms[static_cast<size_t>(i)] = x;
    }
    // The output of set 0, for the comparison with the default tile.
    fgrt::check(drv.cuMemsetD16(w.sets[0].o.get(), 0xFFFFu, w.sets[0].o.bytes() / 2), "cuMemsetD16");
    fgrt::check(drv.cuCtxSynchronize(), "cuCtxSynchronize");  // the stream does not wait for the null stream
    launch(kernel, w.problem(0), stream);
    fgrt::check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (CUevent e : ev) (void)drv.cuEventDestroy(e);
    (void)drv.cuStreamDestroy(stream);
    std::sort(ms.begin(), ms.end());
    t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    t.min_ms = ms.front();
    t.max_ms = ms.back();
    t.tflops = problem_flops(w.desc) / (t.median_ms * 1e-3) / 1e12;
    t.sample = sample_o(w);
  } catch (const std::exception& e) {
    t.error = e.what();
  }
  return t;
}

// Largest |a - b| over the samples (inf when a value is NaN or the poison).
double max_difference(DType dt, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = to_float(dt, a[i]), y = to_float(dt, b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    m = std::max(m, std::fabs(x - y));
  }
  return m;
}

struct Candidate {
  TileModel model;
  bool is_default = false;
  bool compiled = false;
  std::string compile_error;
  std::optional<Timing> timing;
  double diff = 0;
};

std::string percent(double x) { return fmt::format("{:.0f}%", 100.0 * x); }

// Tiles that differ only in pipeline stages score alike; candidates are
// taken one per (block_m, block_n, warps) first, best first, then the rest.
std::string shape_key(const KernelSpec& s) { return fmt::format("{}x{}x{}", s.tile.block_m, s.tile.block_n, s.tile.warps); }

std::vector<size_t> diverse_order(size_t n, const std::function<std::string(size_t)>& key) {
  std::vector<size_t> first, rest;
  std::set<std::string> seen;
  for (size_t i = 0; i < n; ++i) (seen.insert(key(i)).second ? first : rest).push_back(i);
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

}  // namespace

CLI::App* add_tune(CLI::App& app, TuneOptions& o) {
  CLI::App* c = app.add_subcommand(
      "tune",
      "On a GPU: rank the tiles that fit the profile with a model, compile the best, time the best few with device "
      "events, and write the fastest per problem class to a tune file (plan() then uses it on this device).");
  c->add_option("--problem", o.problems, "a problem, key=value,... (repeatable; see flashgen --help)");
  c->add_option("--problems", o.problems_file, "YAML file of problems (as for flashgen pregen)")
      ->check(existing_file("a YAML problem file", "leave --problems out and give --problem key=value,..."));
  c->add_option("--out", o.out,
                "tune file to write (merged with its entries; default: $FLASHGEN_TUNE_FILE, else tune.yml in the "
                "user cache)")
      ->check(non_empty_path("leave --out out for $FLASHGEN_TUNE_FILE, else tune.yml in the user cache"));
  c->add_option("--top", o.top, "candidates to time, besides the profile's default tile")
      ->capture_default_str()
      ->check(integer_in(1, 64, "candidates"));
  c->add_option("--compile", o.compile, "candidates to compile (for their ptxas register report)")
      ->capture_default_str()
      ->check(integer_in(1, 256, "candidates"));
  c->add_option("--runs", o.runs, "timed runs per candidate (the median counts)")
      ->capture_default_str()
      ->check(integer_in(1, 1000, "runs"));
  c->add_option("--warmup", o.warmups, "untimed runs before timing")
      ->capture_default_str()
      ->check(integer_in(0, 100, "runs"));
  c->add_option("-j,--jobs", o.threads, "compile threads (default, or 0: one per core)")
      ->check(integer_in(0, kMaxJobs, "0: one per core"));
  c->add_flag("--dry-run", o.dry_run,
              "print the model's ranking only, nothing compiled (no GPU needed; with --arch; not with --compile-only)");
  c->add_flag("--compile-only", o.compile_only,
              "compile the candidates and re-rank them with ptxas's registers and spills, then stop before timing "
              "(no GPU needed; with --arch; not with --dry-run, which compiles nothing)");
  c->add_option("--arch", o.arch,
                "with --dry-run or --compile-only: the arch to rank for (default: the GPU's, else 90)")
      ->check(arch_number());
  return c;
}

int run_tune(const TuneOptions& o) {
  // Two different stops: one of them would be dropped without a word.
  if (o.dry_run && o.compile_only) {
    throw InvalidArgument("--dry-run and --compile-only exclude each other: --dry-run ranks the tiles with the model "
                          "and compiles nothing, --compile-only compiles the candidates and re-ranks them with "
                          "ptxas's registers; give one of them");
  }
  std::vector<ProblemDesc> problems;
  for (const std::string& t : o.problems) problems.push_back(parse_problem_text(t));
  if (!o.problems_file.empty()) {
    const auto more = load_problem_set(o.problems_file);
    problems.insert(problems.end(), more.begin(), more.end());
  }
  if (problems.empty()) throw InvalidArgument("give at least one --problem key=value,... or --problems FILE");

  std::optional<DeviceInfo> dev;
  int arch = 0;
  const bool no_gpu = o.dry_run || o.compile_only;
  if (no_gpu) {
    std::string note;
    arch = choose_arch(o.arch, &note);
    if (o.arch == 0) std::fprintf(stderr, "flashgen tune: planning for %s\n", note.c_str());  // (not silently sm_90)
  } else {
    if (o.arch != 0)
      throw InvalidArgument("--arch is for --dry-run and --compile-only; tune measures the GPU of this machine");
    if (!gpu_available()) {
      std::string why = "the CUDA driver reports no device";
      try {
        (void)fgrt::driver();
      } catch (const std::exception& e) {
        why = e.what();
      }
      throw Unavailable(fmt::format("flashgen tune measures kernels on a GPU and there is none here ({}); "
                                    "`flashgen tune --dry-run --arch N` prints the model's ranking without one",
                                    why));
    }
    dev = current_device();
    arch = dev->arch;
  }
  // A broken configuration is reported once, before any candidate is ranked or compiled.
  check_profile_config({arch});
  if (!o.dry_run) check_nvrtc_config({arch}, true);
  const Profile& profile = profile_for_arch(arch);
  DeviceShape shape;
  int64_t l2_bytes = 0;
  if (dev) {
    shape.sm_count = dev->sm_count;
    shape.clock_ghz = dev->clock_khz / 1e6;
    l2_bytes = dev->l2_bytes;
    std::printf("tune: %s (sm_%d, %d SMs, L2 %.0f MiB), profile %s (hash %s)\n", dev->name.c_str(), arch,
                dev->sm_count, l2_bytes / 1048576.0, profile.name.c_str(), profile_hash(profile).c_str());
  } else {
    std::printf("tune %s: sm_%d, profile %s (hash %s); %s\n", o.dry_run ? "--dry-run" : "--compile-only", arch,
                profile.name.c_str(), profile_hash(profile).c_str(),
                o.dry_run ? "model ranking only" : "candidates compiled and ranked, not timed");
  }

  std::vector<TuneEntry> winners;
  int failures = 0;
  for (const ProblemDesc& p : problems) {
    const AttentionProblem ap = to_problem(p);
    check_problem(ap);
    const ProblemClass cls = problem_class(ap);
    std::printf("\n== %s\n   class %s\n", p.str().c_str(), cls.str().c_str());
    if (ap.empty()) {
      std::printf("   empty problem: nothing to tune\n");
      continue;
    }
    const KernelSpec def = fgrt::plan_default(ap, arch);
    check_launch_limits(ap, def);  // a problem no launch takes (plan() refuses it too): exit 2, as check_problem
    std::vector<TileModel> ranked = rank_tiles(p, arch, profile, shape);
    std::printf("   %s the profile's shared-memory and register budgets (ranked one per block_m x block_n x "
                "warps first, best first, then their other stage counts)\n",
                (count_of(ranked.size(), "tile") + (ranked.size() == 1 ? " fits" : " fit")).c_str());

    std::vector<Candidate> cands;
    for (size_t i : diverse_order(ranked.size(), [&](size_t k) { return shape_key(ranked[k].spec); })) {
      if (static_cast<int>(cands.size()) >= o.compile) break;
      Candidate c;
      c.model = ranked[i];
      c.is_default = ranked[i].spec == def;
      cands.push_back(std::move(c));
    }
    if (std::none_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.is_default; })) {
      Candidate c;
      c.model = model_tile(def, p, profile, shape);
      c.is_default = true;
      cands.push_back(std::move(c));
    }
    // (the occupancy column as explain's occupancy row writes it)
    if (std::any_of(cands.begin(), cands.end(),
                    [](const Candidate& c) { return gen::unit_traits(c.model.spec.unit).producer_warps != 0; }))
      std::printf("   occupancy: blocks per SM x warps per block; C+Pw: C consumer warps + P producer warps\n");
    if (o.dry_run) {
      std::printf("   %-4s %-18s %6s %9s %-14s %7s %7s\n", "rank", "tile", "regs~", "smem", "occupancy", "model",
                  "bound");
      for (size_t i = 0; i < cands.size(); ++i) {
        const TileModel& m = cands[i].model;
        std::printf("   %-4zu %-18s %6d %9lld %-14s %7s %s%s\n", i + 1,
                    m.spec.tile.str().c_str(), m.registers,
                    static_cast<long long>(m.spec.smem_bytes()),
                    occupancy_text(m).c_str(), percent(m.score).c_str(),
                    m.bound.c_str(), cands[i].is_default ? "  (profile default)" : "");
      }
      continue;
    }

    // Compile the candidates (NVRTC on all cores), then re-model with ptxas's registers and spills.
    std::vector<KernelSpec> specs;
    for (const Candidate& c : cands) specs.push_back(c.model.spec);
    Progress compile_progress("compile", specs.size(), stderr, is_terminal(stderr));
    const auto results = warmup(specs, o.threads, [&](const WarmupProgress& w) {
      const WarmupResult& r = *w.last;
      compile_progress.step(fmt::format("{} {} ({:.1f} s)", r.ok ? (r.from_cache ? "present " : "compiled") : "FAILED  ",
                                        r.spec.kernel_name(), r.seconds),
                            !r.ok);
    });
    compile_progress.finish();
    for (size_t i = 0; i < cands.size(); ++i) {
      if (!results[i].ok) {
        cands[i].compile_error = results[i].error;
        continue;
      }
      cands[i].compiled = true;
      const PtxasReport rep = parse_ptxas(results[i].compile_log);
      if (rep.found) {
        cands[i].model = model_tile(cands[i].model.spec, p, profile, shape, rep.registers,
                                    rep.spill_stores + rep.spill_loads);
      }
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
      if (a.compiled != b.compiled) return a.compiled;
      return a.model.score > b.model.score;
    });

    // Time the default and the best `top` by the model.
    std::vector<size_t> to_time;
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i].compiled && cands[i].is_default) to_time.push_back(i);
    for (size_t i : diverse_order(cands.size(), [&](size_t k) { return shape_key(cands[k].model.spec); })) {
      if (static_cast<int>(to_time.size()) >= o.top + 1) break;
      if (cands[i].compiled && !cands[i].is_default && cands[i].model.fits) to_time.push_back(i);
    }
    if (o.compile_only) {
      std::printf("   %-4s %-18s %5s %6s %9s %-9s %6s\n", "", "tile", "regs", "spill", "smem", "occupancy", "model");
      for (size_t i = 0; i < cands.size(); ++i) {
        const TileModel& m = cands[i].model;
        const bool timed = std::find(to_time.begin(), to_time.end(), i) != to_time.end();
        std::printf("   %-4s %-18s %5d %6lld %9lld %-9s %6s %s%s\n", timed ? "time" : "",
                    m.spec.tile.str().c_str(), m.registers,
                    static_cast<long long>(m.spill_bytes), static_cast<long long>(m.spec.smem_bytes()),
                    occupancy_text(m).c_str(), percent(m.score).c_str(),
                    cands[i].compiled ? m.bound.c_str() : ("compile failed: " + cands[i].compile_error.substr(0, 80)).c_str(),
                    cands[i].is_default ? "  <- profile default" : "");
      }
      continue;
    }
    const Workload w = make_workload(p, l2_bytes);
    std::printf("   inputs: %s of %.1f MiB (L2 %.0f MiB)\n", count_of(w.sets.size(), "rotating set").c_str(),
                w.set_bytes / 1048576.0, l2_bytes / 1048576.0);
    Progress time_progress("time", to_time.size(), stderr, is_terminal(stderr));
    const Timing* baseline = nullptr;
    for (size_t idx : to_time) {
      Candidate& c = cands[idx];
      c.timing = time_spec(c.model.spec, w, o.warmups, o.runs);
      if (c.is_default && c.timing->error.empty()) baseline = &*c.timing;
      if (baseline != nullptr && !c.is_default && c.timing->error.empty())
        c.diff = max_difference(p.dtype, baseline->sample, c.timing->sample);
      time_progress.step(c.timing->error.empty()
                             ? fmt::format("{} {:.3f} ms {:.1f} TFLOP/s", c.model.spec.kernel_name(),
                                           c.timing->median_ms, c.timing->tflops)
                             : fmt::format("FAILED {}: {}", c.model.spec.kernel_name(), c.timing->error),
                         !c.timing->error.empty());
    }
    time_progress.finish();

    // A candidate whose output differs from the default tile's is never chosen.
    const double tol = p.dtype == DType::f16 ? 1e-2 : 4e-2;
    const Candidate* best = nullptr;
    for (const Candidate& c : cands) {
      if (!c.timing || !c.timing->error.empty()) continue;
      if (!c.is_default && baseline != nullptr && !(c.diff <= tol)) continue;
      if (best == nullptr || c.timing->median_ms < best->timing->median_ms) best = &c;
    }
    std::printf("   %-4s %-18s %5s %6s %9s %-9s %6s %10s %8s %s\n", "", "tile", "regs", "spill", "smem", "occupancy",
                "model", "median ms", "TFLOP/s", "max|dO| vs default");
    for (const Candidate& c : cands) {
      const TileModel& m = c.model;
      std::string timing = c.timing ? (c.timing->error.empty()
                                           ? fmt::format("{:10.3f} {:8.1f} {}", c.timing->median_ms, c.timing->tflops,
                                                         c.is_default ? "-" : fmt::format("{:.2e}", c.diff))
                                           : "error: " + c.timing->error.substr(0, 60))
                                    : (c.compiled ? "(not timed)" : "(compile failed)");
      std::printf("   %-4s %-18s %5d %6lld %9lld %-9s %6s %s%s\n", &c == best ? "*" : "",
                  m.spec.tile.str().c_str(), m.registers,
                  static_cast<long long>(m.spill_bytes), static_cast<long long>(m.spec.smem_bytes()),
                  occupancy_text(m).c_str(), percent(m.score).c_str(),
                  timing.c_str(), c.is_default ? "  <- profile default" : "");
    }
    if (best == nullptr) {
      std::printf("   no candidate could be timed: nothing written for this class\n");
      ++failures;
      continue;
    }
    TuneEntry e;
    e.device = dev->name;
    e.arch = arch;
    e.profile = profile.name;
    e.profile_hash = profile_hash(profile);
    e.generator = kGeneratorVersion;
    e.problem = cls;
    e.tile = Tile{best->model.spec.tile.block_m, best->model.spec.tile.block_n, best->model.spec.tile.warps,
                       best->model.spec.tile.stages};
    e.tflops = best->timing->tflops;
    std::printf("   winner: %s, %.1f TFLOP/s (%s)\n", e.tile.str().c_str(), e.tflops,
                baseline != nullptr && &*best->timing != baseline
                    ? fmt::format("{:.2f}x the profile default", baseline->median_ms / best->timing->median_ms).c_str()
                    : "the profile default");
    winners.push_back(e);
  }
  if (no_gpu) return 0;

  std::string out = o.out;
  if (out.empty()) {
    const char* env = std::getenv("FLASHGEN_TUNE_FILE");
    out = env != nullptr && *env != '\0' ? env : default_tune_file_path();
  }
  if (out.empty()) throw IoError("no tune file path: give --out FILE (there is no user cache directory)");
  if (out == default_tune_file_path()) (void)fgrt::cache_dir();  // the user cache, created if it does not exist yet
  TuneFile file;
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) file = load_tune_file(out);
  merge_tune_entries(file, winners);
  save_tune_file(out, file);
  std::printf("\ntune: %s written to %s (%s); the winners are compiled in the kernel cache\n",
              count_of(winners.size(), "winner").c_str(), out.c_str(),
              count_of(file.entries.size(), "entry", "entries").c_str());
  std::printf("tune: plan() uses them on this device with FLASHGEN_TUNE_FILE=%s%s\n", out.c_str(),
              out == default_tune_file_path() ? " (or without it: this is the default tune file)" : "");
  return failures == 0 ? 0 : 1;
}

}  // namespace flashgen::cli
