// libflashgen example: forward attention for two real model shapes.
//
//   Llama-3-8B prefill:           batch 1, seqlen 4096, heads_q 32, heads_kv 8, head_dim 128,
//                                 causal (bottom-right), fp16
//   Allegro video-DiT attention:  batch 1, seqlen 79200, heads 24, head_dim 96, no mask, fp16
//
// For each shape: print the problem, the kernel spec (canonical string) and
// kernel name, generate and compile the kernel (NVRTC, or the disk cache), and,
// when a GPU is present, run it on random inputs, time it with CUDA events and
// check 64 sampled rows against the float64 reference. Without a GPU the
// kernels are still generated and compiled (for --arch, default sm_90).
//
//   attention [--arch N] [--dtype f16|bf16] [--shape llama|allegro|all]
//
// Exit status: 0 when every check passed (or there is no GPU to run on),
// 1 when a check failed, 2 on an error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/driver.hpp"
#include "test/reference.hpp"

namespace {

using flashgen::AttentionProblem;
using flashgen::DType;
using flashgen::MaskKind;
namespace rt = flashgen::rt;
namespace ref = flashgen::ref;

struct Shape {
  const char* key;
  const char* title;
  int64_t batch, seqlen, heads_q, heads_kv, head_dim;
  MaskKind mask;
};

constexpr Shape kShapes[] = {
    {"llama", "Llama-3-8B prefill", 1, 4096, 32, 8, 128, MaskKind::causal_bottom_right},
    {"allegro", "Allegro video-DiT attention", 1, 79200, 24, 24, 96, MaskKind::none},
};

constexpr int kWarmups = 3;
constexpr int kTimedRuns = 10;
constexpr int kCheckedRows = 64;

const char* mask_words(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::causal_top_left: return "causal top-left (j <= i)";
    case MaskKind::causal_bottom_right: return "causal bottom-right (j <= i + seqlen_k - seqlen_q)";
  }
  return "?";
}

void row(const char* label, const std::string& text) { std::printf("  %-11s %s\n", label, text.c_str()); }

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

/// Uniform [-1, 1] values rounded to `dt`, filled on all host threads.
void fill_random(std::vector<uint16_t>& buf, DType dt, uint64_t seed) {
  const size_t n = buf.size();
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 64);
  const size_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(seed + 0x9E3779B97F4A7C15ull * (t + 1));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      const size_t end = std::min(n, (t + 1) * chunk);
      for (size_t i = t * chunk; i < end; ++i) buf[i] = ref::to_dtype(dt, u(rng));
    });
  }
  for (std::thread& th : pool) th.join();
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    rt::check(rt::driver().cuMemAlloc(&ptr_, bytes_), "cuMemAlloc");
  }
  ~DeviceBuffer() { (void)rt::driver().cuMemFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return ptr_; }
  void* ptr() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  void upload(const std::vector<uint16_t>& h) {
    rt::check(rt::driver().cuMemcpyHtoD(ptr_, h.data(), bytes_), "cuMemcpyHtoD");
  }
  void download(std::vector<uint16_t>& h) const {
    h.resize(bytes_ / 2);
    rt::check(rt::driver().cuMemcpyDtoH(h.data(), ptr_, bytes_), "cuMemcpyDtoH");
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Runs, times and checks one shape on the GPU. Returns true when the check passed.
bool run_on_gpu(const AttentionProblem& shape_problem, const flashgen::KernelSpec& spec) {
  const rt::Driver& d = rt::driver();
  const AttentionProblem& s = shape_problem;
  const DType dt = s.dtype;
  const int64_t q_elems = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
  const int64_t k_elems = s.batch * s.seqlen_k * s.heads_kv * s.head_dim;
  const int64_t v_elems = s.batch * s.seqlen_k * s.heads_kv * s.head_dim_v;
  const int64_t o_elems = s.batch * s.seqlen_q * s.heads_q * s.head_dim_v;
  row("memory", fmt::format("Q {}, K {}, V {}, O {}", mib(2 * q_elems), mib(2 * k_elems), mib(2 * v_elems),
                            mib(2 * o_elems)));

  // Random inputs on the host.
  const uint64_t seed = std::random_device{}();
  std::vector<uint16_t> hq(static_cast<size_t>(q_elems)), hk(static_cast<size_t>(k_elems)),
      hv(static_cast<size_t>(v_elems));
  fill_random(hq, dt, seed);
  fill_random(hk, dt, seed + 1);
  fill_random(hv, dt, seed + 2);

  rt::ensure_context();
  DeviceBuffer q(hq.size() * 2), k(hk.size() * 2), v(hv.size() * 2), o(static_cast<size_t>(o_elems) * 2);
  q.upload(hq);
  k.upload(hk);
  v.upload(hv);
  rt::check(d.cuMemsetD16(o.get(), 0xFFFFu, static_cast<size_t>(o_elems)), "cuMemsetD16");  // poison: NaN
  rt::check(d.cuCtxSynchronize(), "cuCtxSynchronize");

  AttentionProblem p = flashgen::make_bshd_problem(dt, s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv,
                                                   s.head_dim, s.head_dim_v, s.mask, q.ptr(), k.ptr(), v.ptr(),
                                                   o.ptr());
  const flashgen::Kernel kernel = flashgen::load_kernel(spec);

  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  rt::check(d.cuStreamCreate(&stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  rt::check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  rt::check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < kWarmups; ++i) flashgen::launch(kernel, p, stream);
  rt::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<float> ms(kTimedRuns);
  for (int i = 0; i < kTimedRuns; ++i) {
    rt::check(d.cuEventRecord(start, stream), "cuEventRecord");
    flashgen::launch(kernel, p, stream);
    rt::check(d.cuEventRecord(stop, stream), "cuEventRecord");
    rt::check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    rt::check(d.cuEventElapsedTime(&ms[static_cast<size_t>(i)], start, stop), "cuEventElapsedTime");
  }
  (void)d.cuEventDestroy(start);
  (void)d.cuEventDestroy(stop);
  (void)d.cuStreamDestroy(stream);
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = kTimedRuns % 2 ? sorted[kTimedRuns / 2]
                                       : 0.5 * (sorted[kTimedRuns / 2 - 1] + sorted[kTimedRuns / 2]);
  const bool causal = s.mask != MaskKind::none;
  const double flops = 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads_q) *
                       static_cast<double>(s.seqlen_q) * static_cast<double>(s.seqlen_k) *
                       static_cast<double>(s.head_dim) / (causal ? 2.0 : 1.0);
  row("time", fmt::format("{:.3f} ms  (median of {} runs after {} warm-ups; min {:.3f}, max {:.3f})", median,
                          kTimedRuns, kWarmups, sorted.front(), sorted.back()));
  row("throughput", fmt::format("{:.1f} TFLOP/s  (FLOPs = 4*B*Hq*Sq*Sk*D{} = {:.3e})",
                                flops / (median * 1e-3) / 1e12, causal ? " / 2 (causal)" : "", flops));

  // Check: every O element written, 64 sampled rows against the reference.
  std::vector<uint16_t> ho;
  o.download(ho);
  int64_t unwritten = 0, nans = 0;
  for (uint16_t bits : ho) {
    if (bits == 0xFFFFu) ++unwritten;
    else if (std::isnan(ref::from_dtype(dt, bits))) ++nans;
  }
  AttentionProblem hp = flashgen::make_bshd_problem(dt, s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv,
                                                    s.head_dim, s.head_dim_v, s.mask, hq.data(), hk.data(),
                                                    hv.data(), nullptr);
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  std::uniform_int_distribution<int64_t> ub(0, s.batch - 1), ui(0, s.seqlen_q - 1), uh(0, s.heads_q - 1);
  std::vector<ref::RowId> rows;
  rows.push_back({0, 0, 0});
  rows.push_back({s.batch - 1, s.seqlen_q - 1, s.heads_q - 1});
  while (static_cast<int>(rows.size()) < kCheckedRows) rows.push_back({ub(rng), ui(rng), uh(rng)});
  std::vector<double> ro(rows.size() * static_cast<size_t>(s.head_dim_v)), rl(rows.size());
  const auto t0 = std::chrono::steady_clock::now();
  ref::forward_rows(hp, rows, ro.data(), rl.data());
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double atol = dt == DType::f16 ? 3e-3 : 2e-2;
  double max_err = 0.0;
  int64_t bad = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const ref::RowId& id = rows[r];
    const int64_t base = ((id.b * s.seqlen_q + id.i) * s.heads_q + id.h) * s.head_dim_v;
    for (int64_t e = 0; e < s.head_dim_v; ++e) {
      const double got = ref::from_dtype(dt, ho[static_cast<size_t>(base + e)]);
      const double err = std::fabs(got - ro[r * static_cast<size_t>(s.head_dim_v) + static_cast<size_t>(e)]);
      if (!(err <= atol)) ++bad;
      if (std::isfinite(err)) max_err = std::max(max_err, err);
    }
  }
  const bool pass = unwritten == 0 && nans == 0 && bad == 0;
  row("check", fmt::format("{} sampled rows vs float64 reference ({:.1f} s): max |err| {:.2e} (tol {:.0e}); "
                           "O elements unwritten {}, NaN {}: {}",
                           rows.size(), ref_s, max_err, atol, unwritten, nans, pass ? "PASS" : "FAIL"));
  if (bad > 0) row("", fmt::format("{} elements off by more than {:.0e}", bad, atol));
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"libflashgen example: generate, compile and run flash-attention forward kernels for two real "
               "model shapes (Llama-3-8B prefill, Allegro video-DiT)"};
  int arch_opt = 0;
  std::string dtype_text = "f16", shape_text = "all";
  app.add_option("--arch", arch_opt, "target compute capability, 10*major+minor (default: the GPU's, else 90)")
      ->check(CLI::Range(10, 1000));
  app.add_option("--dtype", dtype_text, "element type of Q, K, V, O")->check(CLI::IsMember({"f16", "bf16"}));
  app.add_option("--shape", shape_text, "which shape to run")->check(CLI::IsMember({"llama", "allegro", "all"}));
  CLI11_PARSE(app, argc, argv);

  try {
    const DType dtype = flashgen::parse_dtype(dtype_text, "--dtype");

    // The GPU, if any.
    std::optional<flashgen::DeviceInfo> dev;
    std::string no_gpu;
    if (flashgen::gpu_available()) {
      try {
        dev = flashgen::current_device();
      } catch (const flashgen::Error& e) {
        no_gpu = e.what();
      }
    } else {
      try {
        (void)rt::driver();
        no_gpu = "the CUDA driver reports no device";
      } catch (const std::exception& e) {
        no_gpu = e.what();
      }
    }
    const int arch = arch_opt != 0 ? arch_opt : dev ? dev->arch : 90;
    const bool can_run = dev.has_value() && dev->arch == arch;
    const flashgen::Profile& profile = flashgen::profile_for_arch(arch);

    std::printf("libflashgen %s example: forward attention\n", flashgen::kGeneratorVersion);
    row("device", dev ? fmt::format("{} (sm_{}, {} SMs, {} KiB shared memory per block)", dev->name, dev->arch,
                                    dev->sm_count, dev->smem_per_block_optin / 1024)
                      : std::string("none"));
    row("target", fmt::format("sm_{}: profile {} ({}), matrix unit {}", arch, profile.name, profile.source,
                              flashgen::to_string(profile.matrix_unit.shape)));
    row("dtype", std::string(flashgen::to_string(dtype)));
    if (dev && !can_run) {
      row("note", fmt::format("--arch {} is not this GPU's sm_{}: kernels are compiled, not run", arch, dev->arch));
    }

    int failures = 0, errors = 0;  // failed checks / errors (driver, compile, unsupported)
    for (const Shape& sh : kShapes) {
      if (shape_text != "all" && shape_text != sh.key) continue;
      std::printf("\n%s\n", sh.title);
      // Planning needs only the shapes (and aligned non-null pointers); the
      // real device pointers come later.
      void* fake = reinterpret_cast<void*>(uintptr_t{0x10000000});
      const AttentionProblem p = flashgen::make_bshd_problem(dtype, sh.batch, sh.seqlen, sh.seqlen, sh.heads_q,
                                                             sh.heads_kv, sh.head_dim, sh.head_dim, sh.mask, fake,
                                                             fake, fake, fake);
      std::string gqa = sh.heads_q != sh.heads_kv ? fmt::format(" (GQA {}-way)", sh.heads_q / sh.heads_kv) : "";
      row("problem", fmt::format("batch {}, seqlen {} x {}, heads_q {}, heads_kv {}{}, head_dim {}", p.batch,
                                 p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, gqa, p.head_dim));
      row("", fmt::format("mask {}, {}, softmax_scale {:.6g} (1/sqrt(head_dim)), no bias, no LSE",
                          mask_words(p.mask), flashgen::to_string(p.dtype), p.scale()));
      try {
        const flashgen::KernelSpec spec = flashgen::plan(p, arch);
        row("spec", spec.canonical());
        row("kernel", spec.kernel_name());
        row("tile", fmt::format("block_m {}, block_n {}, {} warps, {} stages, {} B shared memory; head_dim {} = {}",
                                spec.block_m, spec.block_n, spec.warps, spec.stages, spec.smem_bytes(),
                                spec.head_dim, join_ints(spec.qk_chunks(), " + ")));
        const std::string source = flashgen::generate(spec);
        row("source", fmt::format("{} bytes of CUDA generated", source.size()));
        const auto t0 = std::chrono::steady_clock::now();
        flashgen::CompiledKernel ck;
        try {
          ck = flashgen::compile(spec);
        } catch (const flashgen::Unavailable& e) {
          row("compile", fmt::format("not possible here: {}", e.what()));
          if (can_run) ++errors;
          continue;
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        row("compile", fmt::format("{:.1f} ms, {}, cubin {} bytes", ms,
                                   ck.from_cache ? "from the disk cache" : "compiled by NVRTC", ck.cubin.size()));
        row("cache", ck.cache_path.empty() ? std::string("memory only (no writable cache directory)") : ck.cache_path);
        if (can_run && !run_on_gpu(p, spec)) ++failures;
      } catch (const flashgen::Error& e) {
        row("error", e.what());
        ++errors;
      }
    }

    std::printf("\n");
    if (!dev) {
      std::printf("no GPU: the launch needs an NVIDIA GPU and driver (%s)\n", no_gpu.c_str());
      return errors == 0 ? 0 : 2;
    }
    if (errors > 0 || failures > 0) {
      std::printf("%d shape(s) FAILED their check, %d shape(s) hit an error\n", failures, errors);
      return errors > 0 ? 2 : 1;
    }
    std::printf("all shapes passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention: error: %s\n", e.what());
    return 2;
  }
}
