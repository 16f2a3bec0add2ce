// libflashgen example: forward attention for two real model shapes.
//
//   Llama-3-8B prefill:           batch 1, seqlen 4096, heads_q 32, heads_kv 8, head_dim 128,
//                                 causal (bottom-right), fp16
//   Allegro video-DiT attention:  batch 1, seqlen 79200, heads 24, head_dim 96, no mask, fp16
//
// For each shape: print the problem, the kernel spec (canonical string) and
// kernel name, generate and compile the kernel (NVRTC, or the disk cache), and,
// when a GPU is present, run it on random inputs, time it with CUDA events and
// check 64 sampled rows against a float64 reference computed here.
//
// Without a GPU nothing can run: the kernels are still generated and compiled,
// for --arch if given, else for a default arch (sm_90), and the program says
// so. --arch takes the compute capabilities the library has a profile for
// (the built-in profiles': sm_70 to sm_121; --help lists them) and refuses
// others with that list. Exit status 0 when every check passed (or there is
// no GPU to run on and every kernel compiled), 1 when a check failed, 2 on an
// error (a usage error, or a kernel that could not be compiled, too).
//
//   attention [--arch N] [--dtype f16|bf16] [--shape llama|allegro|all]
//
// The example uses libflashgen's public header only. Device memory, streams
// and events come from the CUDA driver API, which this file opens with dlopen
// as libflashgen does, so the program also starts on a machine without a
// driver; an application that already uses the CUDA runtime (or PyTorch)
// passes its own device pointers and stream instead.
#include <cuda.h>
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <flashgen/flashgen.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using flashgen::AttentionProblem;
using flashgen::DType;
using flashgen::MaskKind;

/// The default target when there is no GPU to ask (and no --arch).
constexpr int kDefaultArch = 90;

/// The compute capabilities of the built-in profiles ("sm_70, sm_72, ...").
std::string known_archs_text() {
  std::vector<int> archs;
  for (const flashgen::Profile& p : flashgen::builtin_profiles())
    archs.insert(archs.end(), p.archs.begin(), p.archs.end());
  std::sort(archs.begin(), archs.end());
  std::string out;
  for (int a : archs) out += fmt::format("{}sm_{}", out.empty() ? "" : ", ", a);
  return out;
}

/// The --arch check: "" for an arch the library has a profile for (a built-in
/// one, or the FLASHGEN_PROFILE file's), else why not and which archs it knows.
std::string arch_refusal(std::string& text) {
  int64_t arch = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), arch);
  if (text.empty() || end != text.data() + text.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return fmt::format("'{}' is not a compute capability 10*major+minor (e.g. 90 for sm_90)", text);
  std::string why;
  if (ec == std::errc() && arch >= 0 && arch <= std::numeric_limits<int>::max()) {
    try {
      (void)flashgen::profile_for_arch(static_cast<int>(arch));
      return "";
    } catch (const flashgen::Error& e) {
      why = e.what();
    }
  }
  const char* env = std::getenv("FLASHGEN_PROFILE");
  if (env != nullptr && *env != '\0' && !why.empty()) return why;  // it names the file and the archs it lists
  return fmt::format("{} is not a compute capability libflashgen has a profile for; allowed: {} (FLASHGEN_PROFILE "
                     "names a profile file of your own for another)",
                     text, known_archs_text());
}

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
    case MaskKind::window_top_left: return "sliding window top-left";
    case MaskKind::window_bottom_right: return "sliding window bottom-right";
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

// ---- fp16 / bf16 <-> float (round to nearest even; the inputs here are finite) ----

uint16_t float_to_f16(float f) {
  const uint16_t sign = static_cast<uint16_t>((std::bit_cast<uint32_t>(f) >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7C00u;  // rounds to infinity
  if (a < 0x1p-14f) {                         // subnormal: a multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f)));
  }
  const uint32_t r = std::bit_cast<uint32_t>(a) - 0x38000000u;  // exponent bias 127 -> 15
  uint32_t h = r >> 13;
  const uint32_t rest = r & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const float mag = exp == 0    ? std::ldexp(static_cast<float>(mant), -24)
                    : exp == 31 ? (mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity())
                                : std::ldexp(static_cast<float>(1024 + mant), exp - 25);
  return (h & 0x8000u) ? -mag : mag;
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t to_dtype(DType dt, float f) { return dt == DType::bf16 ? float_to_bf16(f) : float_to_f16(f); }
float from_dtype(DType dt, uint16_t h) { return dt == DType::bf16 ? bf16_to_float(h) : f16_to_float(h); }

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
      for (size_t i = t * chunk; i < end; ++i) buf[i] = to_dtype(dt, u(rng));
    });
  }
  for (std::thread& th : pool) th.join();
}

// ---- float64 reference for single rows (contiguous BSHD host tensors) ----------

struct RowId {
  int64_t b, i, h;  ///< batch, query row, query head
};

/// O[b, i, h, :] in float64: Qs = round_to_dtype(Q * scale) (product in fp32), then
/// S = Qs K^T, the mask, softmax and P V in float64 (the operation of
/// flashgen/problem.hpp; the kernel also rounds P to the dtype, well inside the
/// tolerance used below).
void reference_row(const Shape& s, DType dt, float scale, const std::vector<uint16_t>& q,
                   const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, const RowId& id, double* out) {
  const int64_t d = s.head_dim, g = s.heads_q / s.heads_kv, kvh = id.h / g;
  std::vector<double> qs(static_cast<size_t>(d));
  const uint16_t* qrow = &q[static_cast<size_t>(((id.b * s.seqlen + id.i) * s.heads_q + id.h) * d)];
  for (int64_t e = 0; e < d; ++e) qs[e] = from_dtype(dt, to_dtype(dt, from_dtype(dt, qrow[e]) * scale));
  // Bottom-right causal: query i sees keys j <= i + seqlen_k - seqlen_q (= i here).
  const int64_t keys = s.mask == MaskKind::none ? s.seqlen : id.i + 1;
  std::vector<double> sc(static_cast<size_t>(keys));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    const uint16_t* krow = &k[static_cast<size_t>(((id.b * s.seqlen + j) * s.heads_kv + kvh) * d)];
    double acc = 0.0;
    for (int64_t e = 0; e < d; ++e) acc += qs[e] * from_dtype(dt, krow[e]);
    sc[j] = acc;
    m = std::max(m, acc);
  }
  double sum = 0.0;
  std::fill(out, out + d, 0.0);
  for (int64_t j = 0; j < keys; ++j) {
    const double p = std::exp(sc[j] - m);
    sum += p;
    const uint16_t* vrow = &v[static_cast<size_t>(((id.b * s.seqlen + j) * s.heads_kv + kvh) * d)];
    for (int64_t e = 0; e < d; ++e) out[e] += p * from_dtype(dt, vrow[e]);
  }
  for (int64_t e = 0; e < d; ++e) out[e] /= sum;
}

// ---- the CUDA driver entry points this example uses ------------------------------

/// Resolved from libcuda.so.1 with cuGetProcAddress (CUDA 12 signatures), only
/// once libflashgen has found a GPU.
struct Cuda {
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemcpyHtoD) copy_to_device = nullptr;
  decltype(&::cuMemcpyDtoH) copy_to_host = nullptr;
  decltype(&::cuMemsetD16) memset16 = nullptr;
  decltype(&::cuCtxSynchronize) ctx_sync = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
  decltype(&::cuStreamSynchronize) stream_sync = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventDestroy) event_destroy = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventSynchronize) event_sync = nullptr;
  decltype(&::cuEventElapsedTime) event_ms = nullptr;
};

const Cuda& cuda() {
  static const Cuda c = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) throw std::runtime_error("libcuda.so.1 could not be loaded");
    using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    const auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
    if (get == nullptr) throw std::runtime_error("libcuda.so.1 has no cuGetProcAddress_v2 (CUDA 12 driver needed)");
    Cuda t;
    auto resolve = [&](const char* name, auto& fn) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult status{};
      if (get(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || p == nullptr)
        throw std::runtime_error(std::string("the CUDA driver has no ") + name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    resolve("cuMemAlloc", t.mem_alloc);
    resolve("cuMemFree", t.mem_free);
    resolve("cuMemcpyHtoD", t.copy_to_device);
    resolve("cuMemcpyDtoH", t.copy_to_host);
    resolve("cuMemsetD16", t.memset16);
    resolve("cuCtxSynchronize", t.ctx_sync);
    resolve("cuStreamCreate", t.stream_create);
    resolve("cuStreamDestroy", t.stream_destroy);
    resolve("cuStreamSynchronize", t.stream_sync);
    resolve("cuEventCreate", t.event_create);
    resolve("cuEventDestroy", t.event_destroy);
    resolve("cuEventRecord", t.event_record);
    resolve("cuEventSynchronize", t.event_sync);
    resolve("cuEventElapsedTime", t.event_ms);
    return t;
  }();
  return c;
}

void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(fmt::format("{} failed with CUresult {}", call, static_cast<int>(r)));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { check(cuda().mem_alloc(&ptr_, bytes_), "cuMemAlloc"); }
  ~DeviceBuffer() { (void)cuda().mem_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return ptr_; }
  void* ptr() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  void upload(const std::vector<uint16_t>& h) { check(cuda().copy_to_device(ptr_, h.data(), bytes_), "cuMemcpyHtoD"); }
  void download(std::vector<uint16_t>& h) const {
    h.resize(bytes_ / 2);
    check(cuda().copy_to_host(h.data(), ptr_, bytes_), "cuMemcpyDtoH");
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Runs, times and checks one shape on the GPU. Returns true when the check passed.
bool run_on_gpu(const Shape& s, DType dt, const flashgen::KernelSpec& spec) {
  const Cuda& c = cuda();
  const int64_t qo_elems = s.batch * s.seqlen * s.heads_q * s.head_dim;
  const int64_t kv_elems = s.batch * s.seqlen * s.heads_kv * s.head_dim;
  row("memory", fmt::format("Q {}, K {}, V {}, O {}", mib(2 * qo_elems), mib(2 * kv_elems), mib(2 * kv_elems),
                            mib(2 * qo_elems)));

  // Random inputs on the host.
  const uint64_t seed = std::random_device{}();
  std::vector<uint16_t> hq(static_cast<size_t>(qo_elems)), hk(static_cast<size_t>(kv_elems)),
      hv(static_cast<size_t>(kv_elems));
  fill_random(hq, dt, seed);
  fill_random(hk, dt, seed + 1);
  fill_random(hv, dt, seed + 2);

  // flashgen::current_device() (called by main) made device 0's primary
  // context current in this thread; the buffers live in it.
  DeviceBuffer q(hq.size() * 2), k(hk.size() * 2), v(hv.size() * 2), o(static_cast<size_t>(qo_elems) * 2);
  q.upload(hq);
  k.upload(hk);
  v.upload(hv);
  check(c.memset16(o.get(), 0xFFFFu, static_cast<size_t>(qo_elems)), "cuMemsetD16");  // poison: NaN
  check(c.ctx_sync(), "cuCtxSynchronize");

  const AttentionProblem p = flashgen::make_bshd_problem(dt, s.batch, s.seqlen, s.seqlen, s.heads_q, s.heads_kv,
                                                         s.head_dim, s.head_dim, s.mask, q.ptr(), k.ptr(), v.ptr(),
                                                         o.ptr());
  const flashgen::Kernel kernel = flashgen::load_kernel(spec);

  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  check(c.stream_create(&stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  check(c.event_create(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(c.event_create(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < kWarmups; ++i) flashgen::launch(kernel, p, stream);
  check(c.stream_sync(stream), "cuStreamSynchronize");
  std::vector<float> ms(kTimedRuns);
  for (int i = 0; i < kTimedRuns; ++i) {
    check(c.event_record(start, stream), "cuEventRecord");
    flashgen::launch(kernel, p, stream);
    check(c.event_record(stop, stream), "cuEventRecord");
    check(c.event_sync(stop), "cuEventSynchronize");
    check(c.event_ms(&ms[static_cast<size_t>(i)], start, stop), "cuEventElapsedTime");
  }
  (void)c.event_destroy(start);
  (void)c.event_destroy(stop);
  (void)c.stream_destroy(stream);
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = kTimedRuns % 2 ? sorted[kTimedRuns / 2]
                                       : 0.5 * (sorted[kTimedRuns / 2 - 1] + sorted[kTimedRuns / 2]);
  const bool causal = s.mask != MaskKind::none;
  const double flops = 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads_q) *
                       static_cast<double>(s.seqlen) * static_cast<double>(s.seqlen) *
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
    else if (std::isnan(from_dtype(dt, bits))) ++nans;
  }
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  std::uniform_int_distribution<int64_t> ub(0, s.batch - 1), ui(0, s.seqlen - 1), uh(0, s.heads_q - 1);
  std::vector<RowId> rows;
  rows.push_back({0, 0, 0});
  rows.push_back({s.batch - 1, s.seqlen - 1, s.heads_q - 1});
  while (static_cast<int>(rows.size()) < kCheckedRows) rows.push_back({ub(rng), ui(rng), uh(rng)});
  const size_t d = static_cast<size_t>(s.head_dim);
  std::vector<double> ro(rows.size() * d);
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> pool;
    const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, rows.size());
    for (size_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (size_t r = t; r < rows.size(); r += threads)
          reference_row(s, dt, p.scale(), hq, hk, hv, rows[r], &ro[r * d]);
      });
    }
    for (std::thread& th : pool) th.join();
  }
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double atol = dt == DType::f16 ? 3e-3 : 2e-2;
  double max_err = 0.0;
  int64_t bad = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowId& id = rows[r];
    const size_t base = static_cast<size_t>(((id.b * s.seqlen + id.i) * s.heads_q + id.h) * s.head_dim);
    for (size_t e = 0; e < d; ++e) {
      const double err = std::fabs(from_dtype(dt, ho[base + e]) - ro[r * d + e]);
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
  app.add_option("--arch", arch_opt,
                 fmt::format("target compute capability, 10*major+minor, one the library has a profile for: {} "
                             "(default: the GPU's; without a GPU {})",
                             known_archs_text(), kDefaultArch))
      ->check(CLI::Validator(arch_refusal, "ARCH"));
  app.add_option("--dtype", dtype_text, "element type of Q, K, V, O")->check(CLI::IsMember({"f16", "bf16"}));
  app.add_option("--shape", shape_text, "which shape to run")->check(CLI::IsMember({"llama", "allegro", "all"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::fprintf(stderr, "attention: error: %s; see attention --help\n", e.what());
    return 2;  // a usage error is an error (exit status 2, as documented above)
  }

  try {
    const DType dtype = flashgen::parse_dtype(dtype_text, "--dtype");

    // The GPU, if any. current_device() throws Unavailable without one; its
    // message says why (no driver, no device, ...).
    std::optional<flashgen::DeviceInfo> dev;
    std::string no_gpu = "the CUDA driver reports no device";
    try {
      dev = flashgen::current_device();
    } catch (const flashgen::Error& e) {
      no_gpu = e.what();
    }
    const int arch = arch_opt != 0 ? arch_opt : dev ? dev->arch : kDefaultArch;
    const bool can_run = dev.has_value() && dev->arch == arch;
    const flashgen::Profile& profile = flashgen::profile_for_arch(arch);

    std::printf("libflashgen %s example: forward attention\n", flashgen::kGeneratorVersion);
    row("device", dev ? fmt::format("{} (sm_{}, {} SMs, {} KiB shared memory per block)", dev->name, dev->arch,
                                    dev->sm_count, dev->smem_per_block_optin / 1024)
                      : std::string("none"));
    row("target", fmt::format("sm_{}: profile {} ({}), matrix unit {}{}", arch, profile.name, profile.source,
                              flashgen::to_string(profile.matrix_unit.shape),
                              profile.wgmma_flash.empty() ? "" : "; wgmma (sm_90a) for head dims that are multiples of 16"));
    row("dtype", std::string(flashgen::to_string(dtype)));
    if (!dev) {
      row("note", arch_opt != 0
                      ? fmt::format("no GPU: kernels are generated and compiled for --arch {}, not run", arch)
                      : fmt::format("no GPU: kernels are generated and compiled for the default arch sm_{} "
                                    "(choose another with --arch), not run",
                                    arch));
    } else if (!can_run) {
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
                                spec.tile.block_m, spec.tile.block_n, spec.tile.warps, spec.tile.stages, spec.smem_bytes(),
                                spec.head_dim, join_ints(spec.qk_chunks(), " + ")));
        const std::string source = flashgen::generate(spec);
        row("source", fmt::format("{} bytes of CUDA generated", source.size()));
        const auto t0 = std::chrono::steady_clock::now();
        flashgen::CompiledKernel ck;
        try {
          ck = flashgen::compile(spec);
        } catch (const flashgen::Unavailable& e) {
          row("compile", fmt::format("not possible here: {}", e.what()));
          ++errors;  // (the example's point is a compiled kernel, GPU or not)
          continue;
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        row("compile", fmt::format("{:.1f} ms, {}, cubin {} bytes", ms,
                                   ck.from_cache ? "from the disk cache" : "compiled by NVRTC", ck.cubin.size()));
        row("cache", ck.cache_path.empty() ? std::string("memory only (no writable cache directory)") : ck.cache_path);
        if (can_run && !run_on_gpu(sh, dtype, spec)) ++failures;
      } catch (const flashgen::Error& e) {
        row("error", e.what());
        ++errors;
      }
    }

    std::printf("\n");
    if (!dev) {
      if (errors > 0) {
        std::printf("no GPU, and %d shape(s) hit an error (see above): not every kernel was compiled for sm_%d\n", errors,
                    arch);
        return 2;
      }
      std::printf("no GPU: compiled for sm_%d%s; the launch needs an NVIDIA GPU and driver (%s)\n", arch,
                  arch_opt != 0 ? "" : " (the default arch)", no_gpu.c_str());
      return 0;
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
