// The public C++ API (include/flashgen/flashgen.hpp): plan, generate, compile,
// load_kernel, launch, forward.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"
#include "flashgen/tune.hpp"
#include "gen/emit.hpp"
#include "gen/limits.hpp"
#include "gen/params.hpp"
#include "gen/unit_traits.hpp"
#include "runtime/cache.hpp"
#include "runtime/compile.hpp"
#include "runtime/driver.hpp"
#include "runtime/launch.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/tune_internal.hpp"

namespace flashgen {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += sep;
    out += v[i];
  }
  return out;
}

// The split-KV partials' batch and rows per batch: the problem's, or one batch
// of total_q rows for a packed batch.
int64_t partial_batch(const AttentionProblem& p) { return p.varlen() ? 1 : p.batch; }
int64_t partial_rows(const AttentionProblem& p) { return p.varlen() ? p.total_q : p.seqlen_q; }

// One mutex per key, so that concurrent requests for the same thing do the
// work once while different keys proceed in parallel. Slots are never erased
// (one per distinct kernel; small).
class KeyedMutexes {
 public:
  std::shared_ptr<std::mutex> get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = slots_[key];
    if (!slot) slot = std::make_shared<std::mutex>();
    return slot;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::mutex>> slots_;
};

KeyedMutexes& compile_locks() {
  static auto* m = new KeyedMutexes();  // leaked on purpose: usable from any thread at exit
  return *m;
}

// ---- per-context module cache ----------------------------------------------

struct LoadedKernel {
  bool loaded = false;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  bool from_cache = false;
};

struct ModuleSlot {
  std::mutex mu;
  LoadedKernel k;
};

struct ModuleCache {
  std::mutex mu;
  std::map<std::pair<CUcontext, std::string>, std::shared_ptr<ModuleSlot>> slots;
};

ModuleCache& module_cache() {
  static auto* c = new ModuleCache();  // modules stay loaded until process exit
  return *c;
}

// cuModuleLoadData results that say the image cannot run on this device or
// driver, as opposed to a resource or context problem (out of memory, a
// destroyed context): only these make a cached entry worth recompiling.
bool is_image_error(CUresult r) {
  switch (r) {
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
      return true;
    default:
      return false;
  }
}

std::string mismatch(const char* what, const std::string& problem_value, const std::string& spec_value,
                     const KernelSpec& spec) {
  return fmt::format(
      "launch: problem.{} = {} but the kernel was generated for {} = {} (spec {}); plan a kernel for "
      "this problem (flashgen::plan) or pass a matching problem",
      what, problem_value, what, spec_value, spec.canonical());
}

// The wgmma kernel's tensor maps of K or V (FwdTmaMaps, gen/params.hpp): one
// 4-D map (head-dim column, seq row, head, batch) per chunk width of `dim`,
// box = one chunk x block_n rows, swizzled like the kernel's shared tiles.
// Rows past seqlen_k (a packed batch: past total_k) are zero-filled by the copy engine. A stride-0 (broadcast)
// head or batch dimension is mapped with extent 1 and its coordinate bit in
// `coords` left clear (the kernel reads coordinate 0).
void encode_tma_maps(const rt::Driver& d, const char* name, const TensorRef& t, int dim, const AttentionProblem& pr,
                     const KernelSpec& s, detail::TmaMap (&maps)[3], int64_t& coords, int bit) {
  constexpr int64_t kElem = 2;  // fp16 / bf16 bytes
  const int64_t row_bytes = int64_t{dim} * kElem;
  // (a packed batch: one batch of total_k rows, read from each sequence's first key;
  // a paged cache: (column, slot, head, page), boxes of min(page_size, block_n) slots)
  const int64_t rows = pr.paged() ? pr.page_size : pr.varlen() ? pr.total_k : pr.seqlen_k;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(std::max<int64_t>(rows, 1)),
                        static_cast<cuuint64_t>(pr.heads_kv),
                        static_cast<cuuint64_t>(pr.paged() ? std::max<int64_t>(pr.num_pages, 1) : pr.batch)};
  // (paged: the kernel's boxes, min(page_size, the largest power of two dividing block_n),
  // templates/fwd_wgmma.cu BLOCK_N_POW2_LOG2: a box never crosses a page)
  const int64_t block_n_pow2 = int64_t{s.tile.block_n} & -int64_t{s.tile.block_n};
  const int64_t box_rows = pr.paged() ? std::min<int64_t>(pr.page_size, block_n_pow2) : s.tile.block_n;
  cuuint64_t strides[3] = {static_cast<cuuint64_t>(t.stride_seq > 0 ? t.stride_seq * kElem : row_bytes),
                           static_cast<cuuint64_t>(t.stride_head * kElem),
                           static_cast<cuuint64_t>(t.stride_batch * kElem)};
  if (t.stride_head == 0) {
    dims[2] = 1;
    strides[1] = strides[0] * dims[1];
  } else {
    coords |= int64_t{1} << bit;
  }
  if (t.stride_batch == 0) {
    dims[3] = 1;
    strides[2] = strides[1] * dims[2];
  } else {
    coords |= int64_t{1} << (bit + 1);
  }
  const auto chunks = head_dim_chunks(dim, s.unit);
  for (int w : std::set<int>(chunks.begin(), chunks.end())) {
    const cuuint32_t box[4] = {static_cast<cuuint32_t>(w), static_cast<cuuint32_t>(box_rows), 1, 1};
    const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
    const CUtensorMapSwizzle swizzle = w == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
                                       : w == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                 : CU_TENSOR_MAP_SWIZZLE_32B;
    auto* map = reinterpret_cast<CUtensorMap*>(&maps[gen::tma_map_index(w)]);
    const CUresult r = d.cuTensorMapEncodeTiled(
        map, s.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
        const_cast<void*>(t.data), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      throw InvalidArgument(fmt::format(
          "launch: {} cannot be read through a TMA tensor map (cuTensorMapEncodeTiled returned {} for dims "
          "[{}, {}, {}, {}] elements, byte strides [{}, {}, {}], box [{}, {}]; allowed: byte strides that are "
          "multiples of 16 below 2^40), which the wgmma kernel {} needs; plan a kernel for the mma.sync unit",
          name, rt::result_text(d, r), dims[0], dims[1], dims[2], dims[3], strides[0], strides[1], strides[2], w,
          s.tile.block_n, s.kernel_name()));
  }
}

// Blocks of a loaded kernel that fit one SM at once (at least 1), asked of the
// driver once per function: a launch must not pay a driver query (see
// current_device()).
int resident_blocks_per_sm(const rt::Driver& d, const Kernel& kernel) {
  static std::mutex mu;
  static std::map<void*, int> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(kernel.function);
    if (it != known.end()) return it->second;
  }
  const KernelSpec& s = kernel.spec;
  int per_sm = 0;
  rt::check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, static_cast<CUfunction>(kernel.function),
                                                           s.threads(), static_cast<size_t>(s.smem_bytes())),
            fmt::format("cuOccupancyMaxActiveBlocksPerMultiprocessor({})", s.kernel_name()).c_str());
  per_sm = std::max(per_sm, 1);
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(kernel.function, per_sm);
  return per_sm;
}

}  // namespace

// ---- device ------------------------------------------------------------------

DeviceInfo current_device() {
  const rt::Driver& d = rt::driver();
  CUcontext ctx = rt::ensure_context();
  // A context's device does not change: its attributes are read once per
  // context (forward() plans every call, and the attribute and name queries
  // cost about 0.4 ms per call on a virtualized H200).
  static std::mutex cache_mu;
  static std::map<CUcontext, DeviceInfo> cache;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(ctx);
    if (it != cache.end()) return it->second;
  }
  CUdevice dev = 0;
  rt::check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  auto attr = [&](CUdevice_attribute a, const char* name) {
    int v = 0;
    rt::check(d.cuDeviceGetAttribute(&v, a, dev), name);
    return v;
  };
  DeviceInfo info;
  info.ordinal = static_cast<int>(dev);
  int major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                   "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)");
  int minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                   "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)");
  info.arch = 10 * major + minor;
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                       "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)");
  info.smem_per_block_optin =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
           "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  // The driver API only reports the maximum clock; leave 0 if even that is refused.
  int clock = 0;
  if (d.cuDeviceGetAttribute(&clock, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev) == CUDA_SUCCESS)
    info.clock_khz = clock;
  int l2 = 0;  // (sizes the longest-first block groups of masked grids: rt::lpt_groups)
  if (d.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev) == CUDA_SUCCESS) info.l2_bytes = l2;
  char name[256] = {};
  rt::check(d.cuDeviceGetName(name, static_cast<int>(sizeof name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  std::lock_guard<std::mutex> lock(cache_mu);
  cache.emplace(ctx, info);
  return info;
}

bool gpu_available() { return rt::driver_available(); }

// ---- plan / generate ---------------------------------------------------------

KernelSpec rt::plan_default(const AttentionProblem& problem, int arch) {
  check_problem(problem);  // bad input is reported before the profile is looked up
  return plan_default(problem, arch, profile_for_arch(arch));
}

namespace {

// A forward-family spec's fields that come from the problem (its variant and the arch).
KernelSpec problem_variant(const AttentionProblem& problem, int arch) {
  KernelSpec spec;
  spec.arch = arch;
  spec.dtype = problem.dtype;
  spec.head_dim = static_cast<int>(problem.head_dim);
  spec.head_dim_v = static_cast<int>(problem.head_dim_v);
  spec.mask = problem.mask;
  spec.bias = problem.bias.kind;
  spec.has_lse = problem.lse.data != nullptr;
  spec.softcap = problem.softcap > 0.f;
  spec.sinks = problem.sinks != nullptr;
  spec.alibi = problem.alibi_slopes != nullptr;
  spec.varlen = problem.varlen();
  spec.paged = problem.paged();
  return spec;
}

}  // namespace

KernelSpec rt::plan_default(const AttentionProblem& problem, int arch, const Profile& profile) {
  check_problem(problem);
  const int d = static_cast<int>(problem.head_dim);
  const int dv = static_cast<int>(problem.head_dim_v);
  KernelSpec spec = problem_variant(problem, arch);
  spec.unit = profile.unit_for(d, dv);
  // The wgmma kernel reads K and V through TMA tensor maps, which cannot
  // repeat one row (stride_seq 0) or take strides of 2^40 bytes: the mma.sync
  // unit's copies can.
  if (gen::unit_traits(spec.unit).tma && !gen::wgmma_kv_refusal(problem).empty()) spec.unit = profile.matrix_unit.shape;
  spec.tile = profile.tile_for(std::max(d, dv), spec.unit).tile;
  require_valid(spec, profile);
  return spec;
}

namespace {

// The profile's default spec, then the tile of a tune entry for this class,
// arch, profile and device (runtime/tune.cpp), if one applies and is valid.
KernelSpec plan_tuned(const AttentionProblem& problem, int arch, const Profile& profile,
                      const std::function<std::string()>& device_name) {
  KernelSpec spec = rt::plan_default(problem, arch, profile);
  const auto tuned = rt::find_tuned_tile_lazy(problem_class(problem), arch, profile, device_name);
  if (tuned) {
    KernelSpec t = spec;
    t.tile = tuned->tile;
    const std::vector<std::string> broken = validate(t, profile);
    if (broken.empty()) {
      spec = t;
    } else {
      rt::tune_notice_once(fmt::format("flashgen: warning: tune entry in {} ({}, {}) is ignored: the tile is not valid for "
                                       "profile {}: {}",
                                       tuned->file, problem_class(problem).str(), tuned->tile.str(), profile.name,
                                       join(broken, " ")));
    }
  }
  // A problem this kernel cannot launch (32-bit row counts, the grid's x limit) is refused
  // here, before forward() or a caller compiles and loads the kernel.
  check_launch_limits(problem, spec);
  return spec;
}

}  // namespace

KernelSpec plan(const AttentionProblem& problem, int arch) {
  check_problem(problem);  // bad input is reported before the profile is looked up
  return plan(problem, arch, profile_for_arch(arch));
}

KernelSpec plan(const AttentionProblem& problem, int arch, const Profile& profile) {
  return plan_tuned(problem, arch, profile, [arch] { return rt::device_name_for_arch(arch); });
}

KernelSpec rt::plan_for_device(const AttentionProblem& problem, int arch, const std::string& device_name) {
  check_problem(problem);
  if (!device_name.empty()) {
    if (const std::string why = rt::device_name_problem(device_name); !why.empty())
      throw InvalidArgument(fmt::format("device name {} {}", rt::shown_device_name(device_name), why));
  }
  return plan_tuned(problem, arch, profile_for_arch(arch), [&device_name] { return device_name; });
}

KernelSpec plan(const AttentionProblem& problem) {
  check_problem(problem);  // bad input is reported before the device is looked at
  rt::check_row_limits(problem);
  const DeviceInfo dev = current_device();
  return plan_tuned(problem, dev.arch, profile_for_arch(dev.arch), [&dev] { return dev.name; });
}

KernelSpec plan(const AttentionProblem& problem, const Profile& profile) {
  check_problem(problem);  // bad input is reported before the device is looked at
  rt::check_row_limits(problem);
  const DeviceInfo dev = current_device();
  return plan_tuned(problem, dev.arch, profile, [&dev] { return dev.name; });
}

std::string rt::device_name_for_arch(int arch) noexcept {
  try {
    if (!rt::driver_available()) return "";
    const rt::Driver& d = rt::driver();
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
      if (d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return "";
    }
    int major = 0, minor = 0;
    if (d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
        d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS ||
        10 * major + minor != arch)
      return "";
    char name[256] = {};
    if (d.cuDeviceGetName(name, static_cast<int>(sizeof name) - 1, dev) != CUDA_SUCCESS) return "";
    return name;
  } catch (...) {
    return "";
  }
}

std::string generate(const KernelSpec& spec) {
  require_valid(spec, profile_for_arch(spec.arch));
  return gen::emit(spec);
}

// ---- compile -------------------------------------------------------------------

std::string rt::kernel_source(const KernelSpec& spec) { return gen::emit(spec); }

std::vector<std::string> rt::kernel_nvrtc_options(const KernelSpec& spec) {
  // Only the forward families have a matrix unit (wgmma: the sm_90a target).
  const bool arch_specific = spec.family != KernelFamily::combine && !gen::unit_traits(spec.unit).arch_suffix.empty();
  return rt::nvrtc_options(spec.arch, arch_specific);
}

rt::CompileInputs rt::compile_inputs(const KernelSpec& spec) {
  CompileInputs in;
  in.name = spec.kernel_name();
  in.source = rt::kernel_source(spec);
  in.options = rt::kernel_nvrtc_options(spec);
  // The NVRTC that compiles for this arch (CUDA 12 for sm_70/72); Unavailable without one.
  in.nvrtc = rt::nvrtc_version_for(spec.arch);
  in.key = rt::cache_key(in.source, in.options, spec.arch, in.nvrtc);
  return in;
}

CompiledKernel rt::compile_unvalidated(const KernelSpec& spec, bool force_recompile) {
  CompiledKernel out;
  out.spec = spec;
  rt::CompileInputs in = rt::compile_inputs(spec);
  out.name = in.name;
  const std::string& source = in.source;
  const std::vector<std::string>& options = in.options;
  const rt::NvrtcVersion version = in.nvrtc;
  out.key = in.key;
  const rt::EntryIdentity identity = rt::current_identity(out.key, spec.arch, version);

  // One compile per key within this process: later callers wait, then hit.
  std::shared_ptr<std::mutex> slot = compile_locks().get(out.key);
  std::lock_guard<std::mutex> lock(*slot);

  auto hit = [&](bool report) {
    std::optional<rt::CacheHit> h = rt::cache_lookup(out.name, identity, report);
    if (h) {
      out.cubin = std::move(h->cubin);
      out.compile_log = std::move(h->log);
      out.cache_path = std::move(h->path);
      out.from_cache = true;
    }
    return h.has_value();
  };
  if (!force_recompile && hit(true)) return out;
  // One compile per key across processes: wait while another holds the
  // claim, then look again (the holder stored the entry before letting go;
  // a bad entry the first look reported is not reported twice).
  rt::CacheClaim claim = rt::cache_claim(out.name, out.key);
  if (!force_recompile && hit(false)) return out;

  rt::NvrtcOutput compiled;
  try {
    compiled = rt::compile_to_cubin(source, out.name, options);
  } catch (const rt::NvrtcCompileFailure& e) {
    const std::string dump =
        rt::cache_entry_path(rt::dump_dir(), out.name, out.key, ".cu");
    std::string err = rt::write_file_atomic(dump, source.data(), source.size());
    const std::string where =
        err.empty() ? dump : fmt::format("(not dumped: {})", err);
    throw CompileError(fmt::format(
        "NVRTC {} failed to compile kernel {}: {}\n"
        "  spec:    {}\n"
        "  kernel:  {}\n"
        "  options: {}\n"
        "  source:  {}\n"
        "NVRTC log:\n{}",
        version.str(), out.name, e.what(), spec.canonical(), out.name, join(options, " "), where,
        e.log().empty() ? std::string("(empty)") : e.log()));
  }
  out.cubin = std::move(compiled.cubin);
  out.compile_log = std::move(compiled.log);
  out.cache_path = rt::cache_store(out.name, identity, out.cubin, source, out.compile_log);
  out.from_cache = false;
  return out;
}

CompiledKernel compile(const KernelSpec& spec) {
  require_valid(spec, profile_for_arch(spec.arch));
  return rt::compile_unvalidated(spec);
}

// ---- load ----------------------------------------------------------------------

Kernel load_kernel(const KernelSpec& spec) {
  require_valid(spec, profile_for_arch(spec.arch));
  const rt::Driver& d = rt::driver();
  CUcontext ctx = rt::ensure_context();
  const std::string canonical = spec.canonical();

  std::shared_ptr<ModuleSlot> slot;
  {
    ModuleCache& mc = module_cache();
    std::lock_guard<std::mutex> lock(mc.mu);
    auto& s = mc.slots[{ctx, canonical}];
    if (!s) s = std::make_shared<ModuleSlot>();
    slot = s;
  }
  std::lock_guard<std::mutex> lock(slot->mu);
  if (!slot->k.loaded) {
    CompiledKernel ck = rt::compile_unvalidated(spec);
    CUmodule module = nullptr;
    CUresult r = d.cuModuleLoadData(&module, ck.cubin.data());
    if (r != CUDA_SUCCESS && ck.from_cache && is_image_error(r)) {
      // An entry that verifies but does not load (e.g. written by a broken
      // toolchain) is recompiled and replaced, never an error.
      const char* name = nullptr;
      if (d.cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA error";
      std::fprintf(stderr, "flashgen: cache entry %s is unloadable (%s); recompiling\n",
                   ck.cache_path.empty() ? "(memory)" : ck.cache_path.c_str(), name);
      ck = rt::compile_unvalidated(spec, /*force_recompile=*/true);
      r = d.cuModuleLoadData(&module, ck.cubin.data());
    }
    if (r != CUDA_SUCCESS && is_image_error(r)) {
      // The image itself cannot run here: say which target it is for and
      // which driver and NVRTC are involved (a driver older than the NVRTC
      // that compiled the cubin, or a device of another architecture).
      int driver_version = 0;
      if (d.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS) driver_version = 0;
      try {
        rt::check(r, fmt::format("cuModuleLoadData({})", ck.name).c_str());
      } catch (const DriverError& e) {
        throw DriverError(
            fmt::format("{}; the cubin is for sm_{}, compiled by NVRTC {}, and the CUDA driver "
                        "supports CUDA {}.{}: the device must be sm_{} (or a later minor of that "
                        "major) and the driver at least as new as that NVRTC (update the NVIDIA "
                        "driver, or set FLASHGEN_NVRTC_LIBRARY to an NVRTC no newer than the driver)",
                        e.what(), spec.arch, rt::nvrtc_version_for(spec.arch).str(), driver_version / 1000,
                        driver_version % 1000 / 10, spec.arch),
            e.cu_result());
      }
    }
    rt::check(r, fmt::format("cuModuleLoadData({})", ck.name).c_str());
    CUfunction fn = nullptr;
    try {
      // With lazy module loading the function's code reaches the device here,
      // so these calls can fail for want of memory too.
      rt::check(d.cuModuleGetFunction(&fn, module, ck.name.c_str()),
                fmt::format("cuModuleGetFunction({})", ck.name).c_str());
      const int64_t smem = spec.smem_bytes();
      if (smem > 48 * 1024) {
        rt::check(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(smem)),
                  fmt::format("cuFuncSetAttribute({}, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, {})",
                              ck.name, smem)
                      .c_str());
      }
    } catch (...) {
      // Not kept (the slot stays unloaded, the next call loads afresh), so not
      // leaked either: a retry under memory pressure must not add a module each time.
      (void)d.cuModuleUnload(module);
      throw;
    }
    slot->k.module = module;
    slot->k.function = fn;
    slot->k.from_cache = ck.from_cache;
    slot->k.loaded = true;
  }
  Kernel k;
  k.spec = spec;
  k.function = slot->k.function;
  k.context = ctx;
  k.from_cache = slot->k.from_cache;
  return k;
}

// ---- launch --------------------------------------------------------------------

void rt::check_problem_matches_spec(const AttentionProblem& problem, const KernelSpec& s) {
  if (s.family != KernelFamily::fwd)
    throw InvalidArgument(fmt::format(
        "launch: kernel.spec.family is {} but a forward attention problem needs a fwd kernel (spec {}); plan one "
        "with flashgen::plan(problem, arch)",
        to_string(s.family), s.canonical()));
  if (problem.dtype != s.dtype)
    throw InvalidArgument(mismatch("dtype", std::string(to_string(problem.dtype)),
                                   std::string(to_string(s.dtype)), s));
  if (problem.head_dim != s.head_dim)
    throw InvalidArgument(
        mismatch("head_dim", std::to_string(problem.head_dim), std::to_string(s.head_dim), s));
  if (problem.head_dim_v != s.head_dim_v)
    throw InvalidArgument(mismatch("head_dim_v", std::to_string(problem.head_dim_v),
                                   std::to_string(s.head_dim_v), s));
  if (problem.mask != s.mask)
    throw InvalidArgument(
        mismatch("mask", std::string(to_string(problem.mask)), std::string(to_string(s.mask)), s));
  if (problem.bias.kind != s.bias)
    throw InvalidArgument(mismatch("bias.kind", std::string(to_string(problem.bias.kind)),
                                   std::string(to_string(s.bias)), s));
  if ((problem.softcap > 0.f) != s.softcap)
    throw InvalidArgument(mismatch("softcap", fmt::format("{} ({})", problem.softcap, problem.softcap > 0.f ? "on" : "off"),
                                   s.softcap ? "on" : "off", s));
  if ((problem.sinks != nullptr) != s.sinks)
    throw InvalidArgument(mismatch("sinks", fmt::format("{} ({})", static_cast<const void*>(problem.sinks),
                                                        problem.sinks != nullptr ? "on" : "off"),
                                   s.sinks ? "on" : "off", s));
  if ((problem.alibi_slopes != nullptr) != s.alibi)
    throw InvalidArgument(mismatch("alibi_slopes",
                                   fmt::format("{} ({})", static_cast<const void*>(problem.alibi_slopes),
                                               problem.alibi_slopes != nullptr ? "on" : "off"),
                                   s.alibi ? "on" : "off", s));
  if (problem.varlen() != s.varlen)
    throw InvalidArgument(mismatch("cu_seqlens_q",
                                   fmt::format("{} ({})", static_cast<const void*>(problem.cu_seqlens_q),
                                               problem.varlen() ? "a packed batch" : "dense"),
                                   s.varlen ? "a packed batch (varlen=1)" : "dense (varlen off)", s));
  if (problem.paged() != s.paged)
    throw InvalidArgument(mismatch("page_table",
                                   fmt::format("{} ({})", static_cast<const void*>(problem.page_table),
                                               problem.paged() ? "a paged KV cache" : "contiguous K/V"),
                                   s.paged ? "a paged KV cache (paged=1)" : "contiguous K/V (paged off)", s));
  if (gen::unit_traits(s.unit).tma) {
    const std::string why = gen::wgmma_kv_refusal(problem);
    if (!why.empty())
      throw InvalidArgument(fmt::format("launch: {} (kernel {}); plan a kernel for this problem (flashgen::plan "
                                        "picks the mma.sync unit for it)",
                                        why, s.kernel_name()));
  }
  const bool has_lse = problem.lse.data != nullptr;
  if (has_lse != s.has_lse)
    throw InvalidArgument(fmt::format(
        "launch: problem.lse.data is {} but the kernel was generated {} an LSE output (spec {}); "
        "plan a kernel for this problem (flashgen::plan) or pass a matching problem",
        has_lse ? "set" : "null", s.has_lse ? "with" : "without", s.canonical()));
}

// ---- launch descriptions ---------------------------------------------------------
// Each kernel family describes its launch through rt::FamilyLaunch
// (runtime/launch.hpp): the workspace it needs, driver-side preparation, the
// grid and the kernel arguments. launch_family() does what every family shares:
// the context check, then cuLaunchKernel with the spec's block and shared memory.

namespace {

constexpr int64_t kMaxGridX = 2147483647;  // 2^31 - 1

// The forward family: one FwdParams by value (+ the TMA maps of K/V for the
// wgmma unit); grid num_m_blocks * heads_q * batch, or the resident blocks for
// a persistent kernel.
class FwdLaunch final : public rt::FamilyLaunch {
 public:
  FwdLaunch(const AttentionProblem& problem, const KernelSpec& s, int64_t num_m_blocks, int64_t grid_x)
      : problem_(problem), spec_(s), grid_x_(grid_x) {
    params_.q = problem.q.data;
    params_.k = problem.k.data;
    params_.v = problem.v.data;
    params_.o = const_cast<void*>(problem.o.data);
    params_.bias = problem.bias.kind == BiasKind::none ? nullptr : problem.bias.data;
    params_.lse = problem.lse.data;
    params_.q_stride_batch = problem.q.stride_batch;
    params_.q_stride_seq = problem.q.stride_seq;
    params_.q_stride_head = problem.q.stride_head;
    params_.k_stride_batch = problem.k.stride_batch;
    params_.k_stride_seq = problem.k.stride_seq;
    params_.k_stride_head = problem.k.stride_head;
    params_.v_stride_batch = problem.v.stride_batch;
    params_.v_stride_seq = problem.v.stride_seq;
    params_.v_stride_head = problem.v.stride_head;
    params_.o_stride_batch = problem.o.stride_batch;
    params_.o_stride_seq = problem.o.stride_seq;
    params_.o_stride_head = problem.o.stride_head;
    params_.bias_stride_batch = problem.bias.stride_batch;
    params_.bias_stride_head = problem.bias.stride_head;
    params_.bias_stride_q = problem.bias.stride_q;
    params_.bias_stride_k = problem.bias.stride_k;
    params_.lse_stride_batch = problem.lse.stride_batch;
    params_.lse_stride_head = problem.lse.stride_head;
    params_.batch = problem.batch;
    params_.heads_q = problem.heads_q;
    params_.heads_kv = problem.heads_kv;
    params_.seqlen_q = problem.seqlen_q;
    params_.seqlen_k = problem.seqlen_k;
    params_.num_m_blocks = num_m_blocks;
    params_.softmax_scale = static_cast<double>(problem.scale());
    params_.softcap = static_cast<double>(problem.softcap);
    params_.sinks = problem.sinks;
    params_.alibi_slopes = problem.alibi_slopes;
    params_.alibi_stride_batch = problem.alibi_stride_batch;
    params_.window_left = problem.window_left;  // (-1: unbounded; the kernels read them only with a window mask)
    params_.window_right = problem.window_right;
    params_.cu_seqlens_q = problem.cu_seqlens_q;  // (null unless a packed batch)
    params_.cu_seqlens_k = problem.cu_seqlens_k;
    params_.seqused_k = problem.seqused_k;
    params_.total_q = problem.total_q;
    params_.page_table = problem.page_table;  // (null unless a paged KV cache)
    params_.page_table_stride = problem.page_table_stride;
    params_.page_shift = problem.paged() ? std::countr_zero(static_cast<uint64_t>(problem.page_size)) : 0;
    args_[0] = &params_;
  }
  /// The fwd_split family's extra arguments: the workspace's partials and the split of the key range.
  void set_split(float* o_partial, float* lse_partial, int64_t num_splits, int64_t tiles_per_split) {
    params_.o_partial = o_partial;
    params_.lse_partial = lse_partial;
    params_.num_splits = num_splits;
    params_.tiles_per_split = tiles_per_split;
  }

  void prepare(const rt::Driver& d) override {
    // (the device only for the grids that reorder: causal and window masks, non-persistent kernels)
    if (spec_.mask != MaskKind::none && !gen::unit_traits(spec_.unit).persistent) {
      params_.lpt_groups = rt::lpt_groups(problem_, spec_, current_device().l2_bytes);
      if (params_.lpt_groups > 0) {
        const int64_t pack = spec_.family == KernelFamily::fwd_split ? std::max(spec_.pack, 1) : 1;
        const int64_t pairs = problem_.batch * (problem_.heads_q / pack);
        const rt::LptShape g = rt::lpt_shape(std::min(params_.lpt_groups, pairs), pairs, params_.num_m_blocks);
        params_.lpt_big = g.big;
        params_.lpt_pairs = g.pairs;
        params_.lpt_first0 = g.first0;
        params_.lpt_div_group1 = g.div_group1;
        params_.lpt_div_group0 = g.div_group0;
        params_.lpt_div_pairs1 = g.div_pairs1;
        params_.lpt_div_pairs0 = g.div_pairs0;
      }
    }
    if (gen::unit_traits(spec_.unit).tma) {
      encode_tma_maps(d, "k", problem_.k, spec_.head_dim, problem_, spec_, maps_.k, maps_.kv_coords, 0);
      encode_tma_maps(d, "v", problem_.v, spec_.head_dim_v, problem_, spec_, maps_.v, maps_.kv_coords, 2);
      args_[1] = &maps_;
    }
  }

  int64_t grid(const rt::Driver& d, const Kernel& kernel) const override {
    if (!gen::unit_traits(spec_.unit).persistent) return grid_x_;
    // Persistent: as many blocks as are resident at once (each loops over work
    // items), never more than there are items.
    const int per_sm = resident_blocks_per_sm(d, kernel);
    return std::min<int64_t>(grid_x_, int64_t{per_sm} * std::max(current_device().sm_count, 1));
  }

  void** args() override { return args_; }

 private:
  const AttentionProblem& problem_;
  const KernelSpec& spec_;
  int64_t grid_x_;
  detail::FwdParams params_{};
  detail::FwdTmaMaps maps_{};
  void* args_[2] = {nullptr, nullptr};
};

// The combine family: one CombineParams by value; the block strides over the
// rows, state_groups lane groups per row, so the grid is ceil(rows /
// (rows_per_block / state_groups)) capped at the x limit.
class CombineLaunch final : public rt::FamilyLaunch {
 public:
  CombineLaunch(const MergeProblem& p, const KernelSpec& s) {
    params_.o_partial = p.o_partial.data;
    params_.lse_partial = p.lse_partial.data;
    params_.o = const_cast<void*>(p.o.data);
    params_.lse = p.lse.data;
    params_.op_stride_state = p.o_partial.stride_state;
    params_.op_stride_batch = p.o_partial.stride_batch;
    params_.op_stride_seq = p.o_partial.stride_seq;
    params_.op_stride_head = p.o_partial.stride_head;
    params_.lp_stride_state = p.lse_partial.stride_state;
    params_.lp_stride_batch = p.lse_partial.stride_batch;
    params_.lp_stride_head = p.lse_partial.stride_head;
    params_.lp_stride_seq = p.lse_partial.stride_seq;
    params_.o_stride_batch = p.o.stride_batch;
    params_.o_stride_seq = p.o.stride_seq;
    params_.o_stride_head = p.o.stride_head;
    params_.lse_stride_batch = p.lse.stride_batch;
    params_.lse_stride_head = p.lse.stride_head;
    params_.num_states = p.num_states;
    params_.seqlen_q = p.seqlen_q;
    params_.heads = p.heads;
    // check_merge_problem bounded every byte offset, so the row count fits.
    params_.rows = p.batch * p.seqlen_q * p.heads;
    const gen::CombineShape shape = gen::combine_shape(s);
    params_.state_groups = gen::combine_state_groups(shape, params_.rows, p.num_states);
    const int64_t per_block = shape.rows_per_block / params_.state_groups;
    grid_ = std::min<int64_t>((params_.rows + per_block - 1) / per_block, kMaxGridX);
    args_[0] = &params_;
  }

  /// Only rows whose seq index i lies in [*seq_from, *seq_to) (device int32s) are written; null: all.
  void set_rows(const int32_t* seq_from, const int32_t* seq_to) {
    params_.seq_from = seq_from;
    params_.seq_to = seq_to;
  }

  int64_t grid(const rt::Driver&, const Kernel&) const override { return grid_; }
  void** args() override { return args_; }

 private:
  detail::CombineParams params_{};
  int64_t grid_ = 0;
  void* args_[1] = {nullptr};
};

}  // namespace

int64_t rt::lpt_groups(const AttentionProblem& problem, const KernelSpec& spec, int64_t l2_bytes) {
  if (spec.mask == MaskKind::none || gen::unit_traits(spec.unit).persistent || l2_bytes <= 0) return 0;
  const int64_t pack = spec.family == KernelFamily::fwd_split ? std::max(spec.pack, 1) : 1;  // (fwd kernels: PACK 1)
  const int64_t pairs = std::max<int64_t>(problem.batch * (problem.heads_q / pack), 1);
  const int64_t pairs_per_kv_head = std::max<int64_t>(problem.heads_q / problem.heads_kv / pack, 1);
  const int64_t kv_head_bytes = problem.seqlen_k * (spec.head_dim + spec.head_dim_v) * 2;  // (f16 or bf16)
  const int64_t pair_bytes = std::max<int64_t>(kv_head_bytes / pairs_per_kv_head, 1);
  const int64_t per_group = std::clamp<int64_t>(l2_bytes / 2 / pair_bytes, 1, pairs);
  return per_group == 1 ? 0 : (pairs + per_group - 1) / per_group;
}

int64_t rt::div_invariant(int64_t d) {
  if (d < 1 || d >= (int64_t{1} << 31))
    throw InvalidArgument(fmt::format("div_invariant: d = {} is outside [1, 2^31)", d));
  int64_t s = 0;
  while ((int64_t{1} << s) < d) ++s;
  // (2^s - d < d <= 2^31, so 2^32 (2^s - d) < 2^63, and m <= 2^32 - 1)
  const uint64_t m = (uint64_t{1} << 32) * static_cast<uint64_t>((int64_t{1} << s) - d) / static_cast<uint64_t>(d) + 1;
  return static_cast<int64_t>(m | static_cast<uint64_t>(s) << 32);
}

rt::LptShape rt::lpt_shape(int64_t groups, int64_t pairs, int64_t num_m_blocks) {
  if (groups < 1 || groups > pairs || num_m_blocks < 1)
    throw InvalidArgument(fmt::format("lpt_shape: groups = {}, pairs = {}, num_m_blocks = {}; need 1 <= groups <= "
                                      "pairs and num_m_blocks >= 1",
                                      groups, pairs, num_m_blocks));
  const int64_t base = pairs / groups, extra = pairs % groups;  // groups [0, extra) hold base + 1 pairs
  LptShape g;
  g.big = extra * (base + 1) * num_m_blocks;
  g.pairs = (base + 1) | base << 32;
  g.first0 = extra * (base + 1);
  g.div_group1 = div_invariant((base + 1) * num_m_blocks);
  g.div_group0 = div_invariant(base * num_m_blocks);
  g.div_pairs1 = div_invariant(base + 1);
  g.div_pairs0 = div_invariant(base);
  return g;
}

void rt::launch_family(const Kernel& kernel, FamilyLaunch& launch, CUstream stream) {
  const KernelSpec& s = kernel.spec;
  const rt::Driver& d = rt::driver();
  // The function belongs to the context it was loaded into: make that one
  // current if none is, and refuse a different one.
  CUcontext current = nullptr;
  rt::check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  CUcontext want = static_cast<CUcontext>(kernel.context);
  if (current == nullptr && want != nullptr) {
    rt::check(d.cuCtxSetCurrent(want), "cuCtxSetCurrent");
  } else if (want != nullptr && current != want) {
    throw InvalidArgument(fmt::format(
        "launch: the kernel was loaded into CUDA context {} but context {} is current in this "
        "thread; call flashgen::load_kernel() with the launching context current",
        static_cast<const void*>(want), static_cast<const void*>(current)));
  }
  launch.prepare(d);
  const int64_t grid = launch.grid(d, kernel);
  rt::check(d.cuLaunchKernel(static_cast<CUfunction>(kernel.function),
                             static_cast<unsigned>(grid), 1, 1,
                             static_cast<unsigned>(s.threads()), 1, 1,
                             static_cast<unsigned>(s.smem_bytes()), stream, launch.args(), nullptr),
            fmt::format("cuLaunchKernel({}, grid {}, block {}, smem {})", s.kernel_name(), grid,
                        s.threads(), s.smem_bytes())
                .c_str());
}

void launch(const Kernel& kernel, const AttentionProblem& problem, CUstream stream) {
  check_problem(problem);
  const KernelSpec& s = kernel.spec;
  if (kernel.function == nullptr)
    throw InvalidArgument(
        "launch: kernel.function is null; obtain the Kernel from flashgen::load_kernel()");
  rt::check_problem_matches_spec(problem, s);
  check_launch_limits(problem, s);
  if (problem.empty()) return;  // nothing to compute, nothing launched
  const int64_t num_m_blocks = (problem.seqlen_q + s.tile.block_m - 1) / s.tile.block_m;
  FwdLaunch description(problem, s, num_m_blocks, num_m_blocks * problem.heads_q * problem.batch);
  rt::launch_family(kernel, description, stream);
}

void rt::check_row_limits(const AttentionProblem& problem) {
  if (problem.empty()) return;
  // The kernels count query rows and keys in 32 bits (with a tile's worth of headroom).
  constexpr int64_t kMaxSeqlen = 2147483647 - 256;
  if (problem.seqlen_q > kMaxSeqlen || problem.seqlen_k > kMaxSeqlen)
    throw InvalidArgument(fmt::format("launch: seqlen_q ({}) and seqlen_k ({}) must be at most 2^31 - 257 (the "
                                      "kernels count rows and keys in 32 bits); split the call",
                                      problem.seqlen_q, problem.seqlen_k));
}

void check_launch_limits(const AttentionProblem& problem, const KernelSpec& s) {
  if (s.tile.block_m <= 0)
    throw InvalidArgument(fmt::format("launch: kernel.spec.tile.block_m = {} must be positive", s.tile.block_m));
  if (problem.empty()) return;
  rt::check_row_limits(problem);
  const int64_t num_m_blocks = (problem.seqlen_q + s.tile.block_m - 1) / s.tile.block_m;
  // num_m_blocks * heads_q * batch without overflow.
  const bool too_big = num_m_blocks > kMaxGridX / problem.heads_q ||
                       num_m_blocks * problem.heads_q > kMaxGridX / problem.batch;
  if (too_big)
    throw InvalidArgument(fmt::format(
        "launch: the grid needs ceil(seqlen_q / block_m) * heads_q * batch = {} * {} * {} blocks, "
        "more than the 2^31-1 a grid's x dimension allows; split the {} into smaller calls",
        num_m_blocks, problem.heads_q, problem.batch, problem.batch > 1 ? "batch (or the heads)" : "query heads"));
}

// ---- merge of attention states ---------------------------------------------------

namespace {

bool is_empty_merge(const MergeProblem& p) { return p.batch == 0 || p.seqlen_q == 0 || p.heads == 0; }

}  // namespace

KernelSpec rt::merge_spec(const MergeProblem& problem, int arch) {
  KernelSpec s;
  s.family = KernelFamily::combine;
  s.arch = arch;
  s.partial_dtype = problem.partial_dtype;
  s.out_dtype = problem.out_dtype;
  s.head_dim_v = static_cast<int>(problem.head_dim_v);
  s.has_lse = problem.lse.data != nullptr;
  return s;
}

void rt::check_merge_matches_spec(const MergeProblem& problem, const KernelSpec& s, bool rows_bounded) {
  if (s.family != KernelFamily::combine)
    throw InvalidArgument(fmt::format(
        "launch: kernel.spec.family is {} but a merge of attention states needs a combine kernel (spec {}); "
        "plan one with flashgen::plan(merge_problem, arch)",
        to_string(s.family), s.canonical()));
  if (problem.partial_dtype != s.partial_dtype)
    throw InvalidArgument(mismatch("partial_dtype", std::string(to_string(problem.partial_dtype)),
                                   std::string(to_string(s.partial_dtype)), s));
  if (problem.out_dtype != s.out_dtype)
    throw InvalidArgument(mismatch("out_dtype", std::string(to_string(problem.out_dtype)),
                                   std::string(to_string(s.out_dtype)), s));
  if (problem.head_dim_v != s.head_dim_v)
    throw InvalidArgument(mismatch("head_dim_v", std::to_string(problem.head_dim_v),
                                   std::to_string(s.head_dim_v), s));
  const bool has_lse = problem.lse.data != nullptr;
  if (has_lse != s.has_lse)
    throw InvalidArgument(fmt::format(
        "launch: problem.lse.data is {} but the kernel was generated {} an LSE output (spec {}); "
        "plan a kernel for this problem (flashgen::plan) or pass a matching problem",
        has_lse ? "set" : "null", s.has_lse ? "with" : "without", s.canonical()));
  if (s.varlen && !rows_bounded)
    throw InvalidArgument(fmt::format(
        "launch: kernel spec {} is a packed-batch combine (varlen=1), which only decode() launches (it bounds the "
        "rows it writes by the problem's cu_seqlens_q); plan a merge kernel with flashgen::plan(merge_problem, arch)",
        s.canonical()));
}

KernelSpec plan(const MergeProblem& problem, int arch) {
  check_merge_problem(problem);
  const KernelSpec s = rt::merge_spec(problem, arch);
  require_valid(s, profile_for_arch(arch));
  return s;
}

KernelSpec plan(const MergeProblem& problem) {
  check_merge_problem(problem);
  return plan(problem, current_device().arch);
}

namespace {

// The merge launch; seq_from / seq_to (device int32s, or null) bound the rows'
// seq index i that are written (CombineParams: a packed batch's decode).
void launch_merge(const Kernel& kernel, const MergeProblem& problem, CUstream stream, const int32_t* seq_from,
                  const int32_t* seq_to) {
  check_merge_problem(problem);
  if (kernel.function == nullptr)
    throw InvalidArgument(
        "launch: kernel.function is null; obtain the Kernel from flashgen::load_kernel()");
  rt::check_merge_matches_spec(problem, kernel.spec, seq_from != nullptr);
  if (is_empty_merge(problem)) return;  // nothing to merge, nothing launched
  CombineLaunch description(problem, kernel.spec);
  description.set_rows(seq_from, seq_to);
  rt::launch_family(kernel, description, stream);
}

}  // namespace

void launch(const Kernel& kernel, const MergeProblem& problem, CUstream stream) {
  launch_merge(kernel, problem, stream, nullptr, nullptr);
}

MergeInfo merge_states(const MergeProblem& problem, CUstream stream) {
  MergeInfo info;
  info.spec = plan(problem);  // checks the problem, then the device's profile
  if (is_empty_merge(problem)) return info;
  Kernel k = load_kernel(info.spec);
  launch(k, problem, stream);
  info.launched = true;
  info.from_cache = k.from_cache;
  return info;
}

// ---- split-KV decode (decode.hpp) ---------------------------------------------------

namespace {

StateDType state_dtype_of(DType d) { return d == DType::bf16 ? StateDType::bf16 : StateDType::f16; }

// The keys the rows of `p` can see, all of them together: the consecutive keys
// [first, first + count) (count 0: none). Any set of the problem's rows (a block
// of the split kernel) sees at most these. Query i sees keys j with
// i + off - left <= j <= i + off + right (the mask as a window: none is
// (-1, -1), causal (-1, 0); -1 is unbounded), so over the rows 0..seqlen_q-1 the
// keys from off - left to seqlen_q - 1 + off + right, clamped to the keys.
struct KeySpan {
  int64_t first = 0;
  int64_t count = 0;
};
KeySpan visible_key_span(const AttentionProblem& p) {
  int64_t left = -1, right = -1;
  switch (p.mask) {
    case MaskKind::none: break;
    case MaskKind::causal_top_left:
    case MaskKind::causal_bottom_right: right = 0; break;
    case MaskKind::window_top_left:
    case MaskKind::window_bottom_right:
      left = p.window_left;
      right = p.window_right;
      break;
  }
  const bool bottom_right = p.mask == MaskKind::causal_bottom_right || p.mask == MaskKind::window_bottom_right;
  const int64_t off = bottom_right ? p.seqlen_k - p.seqlen_q : 0;
  KeySpan span;
  if (p.seqlen_q <= 0 || p.seqlen_k <= 0) return span;
  // (check_problem bounded the seqlens; window sizes beyond the keys are clamped before they are added)
  const int64_t first = left < 0 ? 0 : std::max<int64_t>(0, off - std::min(left, p.seqlen_k + p.seqlen_q));
  const int64_t last =
      right < 0 ? p.seqlen_k - 1 : std::min(p.seqlen_k - 1, p.seqlen_q - 1 + off + std::min(right, p.seqlen_k));
  if (last < first) return span;
  span.first = first;
  span.count = last - first + 1;
  return span;
}

// Key tiles of `block_n` keys one block of the split kernel visits at most: the
// tiles of visible_key_span from the one holding its first key (a top-left
// causal mask shows at most seqlen_q keys, bottom-right ones all; a window
// shows its width and the rows' span, plus a tile where its first key is not a
// tile's first). The kernel splits each block's own visible tiles, counted from
// its first one, so ceil(key_tiles / num_splits) tiles per split cover every block.
int64_t key_tiles(const AttentionProblem& p, int block_n) {
  const KeySpan span = visible_key_span(p);
  if (span.count == 0) return 0;
  return (span.first + span.count - 1) / block_n - span.first / block_n + 1;
}

// Query heads per K/V head (1 for an empty problem without heads).
int64_t group_size(const AttentionProblem& p) { return p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1; }

int64_t split_tiles(const AttentionProblem& p, const DecodePlan& dp) {
  const int64_t n = key_tiles(p, dp.split.tile.block_n);
  return (n + dp.num_splits - 1) / dp.num_splits;
}

// Blocks of the fwd_split launch without the split: m blocks over the packed
// rows, row groups, batch (saturated at int64's limit).
int64_t split_blocks(const AttentionProblem& p, const KernelSpec& s) {
  const int64_t rows = p.seqlen_q * s.pack;
  const int64_t m_blocks = (rows + s.tile.block_m - 1) / s.tile.block_m;
  const int64_t groups = p.heads_q / s.pack;
  if (m_blocks > INT64_MAX / std::max<int64_t>(groups, 1) / std::max<int64_t>(p.batch, 1)) return INT64_MAX;
  return m_blocks * groups * p.batch;
}

// Blocks of the split kernel an SM holds, estimated before it is compiled: by
// its shared memory (+1 KiB the driver reserves per block), its threads, and
// its registers counted as 256 per thread (the mma.sync forward kernels use
// 190-255, the key-split ones about 200); at least 1.
int split_blocks_per_sm(const KernelSpec& s, const Profile& profile) {
  const int64_t threads = s.threads();
  int64_t per_sm = profile.smem_per_sm / (s.smem_bytes() + 1024);
  per_sm = std::min<int64_t>(per_sm, profile.max_threads_per_sm / threads);
  per_sm = std::min<int64_t>(per_sm, profile.registers_per_sm / (threads * 256));
  return static_cast<int>(std::max<int64_t>(per_sm, 1));
}

// Splits for `blocks` blocks per split over `tiles` key tiles with `slots`
// blocks resident at once (SMs x blocks per SM). Decode is memory-bound: what
// costs is a last wave that leaves SMs idle. When the unsplit grid's waves
// are at least 0.8 full (blocks over the slots of the waves it takes), 1.
// Otherwise every split count up to min(tiles, 128) that
// changes the tiles per split is scored by its wave efficiency (blocks over the
// slots of the waves it takes), and the fewest splits within 0.95 of the best
// are used (fewer partials to write and merge); then the count is trimmed to an
// even cover of the tiles (no empty split). The rule follows FlashAttention-2's
// split heuristic (Dao, flash_api.cpp num_splits_heuristic).
int choose_splits(int64_t blocks, int64_t tiles, int64_t slots) {
  blocks = std::max<int64_t>(blocks, 1);
  slots = std::max<int64_t>(slots, 1);
  auto efficiency = [&](int64_t n) {
    const double b = static_cast<double>(blocks) * static_cast<double>(n);
    return b / (std::ceil(b / static_cast<double>(slots)) * static_cast<double>(slots));
  };
  if (tiles <= 1 || efficiency(1) >= 0.8) return 1;
  const int64_t cap = std::min<int64_t>(kMaxDecodeSplits, tiles);
  auto per = [&](int64_t n) { return (tiles + n - 1) / n; };
  double best = 0;
  for (int64_t n = 1; n <= cap; ++n)
    if (n == 1 || per(n) != per(n - 1)) best = std::max(best, efficiency(n));
  int64_t n = 1;
  for (; n <= cap; ++n)
    if ((n == 1 || per(n) != per(n - 1)) && efficiency(n) >= 0.95 * best) break;
  n = std::min(n, cap);
  return static_cast<int>((tiles + per(n) - 1) / per(n));
}

// The library's workspace: one device buffer per (context, stream), grown to
// the largest size asked for and kept. Decode calls on one stream run in
// order, so they may share it, provided each call enqueues its two launches
// while it holds the slot (LeasedWorkspace): then another thread's decode on
// the same stream (the legacy default stream included) cannot put its split
// between them. The per-thread default stream is one handle that means
// another stream in each thread, so it is keyed by thread too. Calls on other
// streams get their own buffer.
struct WorkspaceSlot {
  std::mutex in_use;  // held from the buffer's lease to the second launch
  CUdeviceptr ptr = 0;
  int64_t bytes = 0;
};
struct WorkspaceKey {
  CUcontext ctx;
  CUstream stream;
  std::thread::id thread;  // only for CU_STREAM_PER_THREAD (else a default id)
  bool operator<(const WorkspaceKey& o) const {
    return std::tie(ctx, stream, thread) < std::tie(o.ctx, o.stream, o.thread);
  }
};
std::mutex& workspace_mutex() {
  static std::mutex m;
  return m;
}
std::map<WorkspaceKey, WorkspaceSlot>& workspaces() {
  static auto* w = new std::map<WorkspaceKey, WorkspaceSlot>();  // never destroyed: the driver may be gone at exit
  return *w;
}

// A slot's buffer, held until the lease ends (after the decode's launches).
struct LeasedWorkspace {
  std::unique_lock<std::mutex> lease;
  void* ptr = nullptr;
};

LeasedWorkspace library_workspace(int64_t bytes, CUstream stream) {
  const rt::Driver& d = rt::driver();
  CUcontext ctx = nullptr;
  rt::check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  const bool per_thread = stream == CU_STREAM_PER_THREAD;
  WorkspaceSlot* found = nullptr;
  {
    std::lock_guard<std::mutex> lock(workspace_mutex());  // (map nodes stay where they are)
    found = &workspaces()[WorkspaceKey{ctx, stream, per_thread ? std::this_thread::get_id() : std::thread::id{}}];
  }
  WorkspaceSlot& slot = *found;
  LeasedWorkspace out{std::unique_lock<std::mutex>(slot.in_use), nullptr};
  if (slot.bytes < bytes) {
    if (slot.ptr != 0) {
      // Earlier calls on this stream may still read the old buffer.
      rt::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize (before growing the decode workspace)");
      rt::check(d.cuMemFree(slot.ptr), "cuMemFree (decode workspace)");
      slot.ptr = 0;
      slot.bytes = 0;
    }
    CUdeviceptr p = 0;
    rt::check(d.cuMemAlloc(&p, static_cast<size_t>(bytes)),
              fmt::format("cuMemAlloc({} bytes of decode workspace)", bytes).c_str());
    slot.ptr = p;
    slot.bytes = bytes;
  }
  out.ptr = reinterpret_cast<void*>(slot.ptr);
  return out;
}

// A caller's plan (plan_decode validated its own): a fwd_split kernel, a
// split count in range, and both kernels valid for their arch's profile
// before the plan's tile enters any arithmetic (an edited plan: block_m 0 ...).
void check_plan_valid(const DecodePlan& dp) {
  const KernelSpec& s = dp.split;
  if (s.family != KernelFamily::fwd_split)
    throw InvalidArgument(fmt::format("decode: options.plan->split.family is {}; a decode plan's split kernel is "
                                      "of family fwd_split (plan_decode makes one)",
                                      to_string(s.family)));
  if (dp.num_splits < 1 || dp.num_splits > kMaxDecodeSplits)
    throw InvalidArgument(fmt::format("decode: options.plan->num_splits ({}) must be in [1, {}]", dp.num_splits,
                                      kMaxDecodeSplits));
  for (const KernelSpec* k : {&s, &dp.combine}) {
    if (k->arch < gen::kMinArch || k->arch > gen::kMaxArch)  // (before the profile lookup, which names no field)
      throw InvalidArgument(fmt::format("decode: options.plan->{}.arch ({}) must be a compute capability written 10 * "
                                        "major + minor (e.g. 90 for sm_90); make the plan with plan_decode",
                                        k == &s ? "split" : "combine", k->arch));
    const Profile& profile = profile_for_arch(k->arch);
    const auto errors = validate(*k, profile);
    if (errors.empty()) continue;
    std::string why;
    for (const auto& e : errors) why += "\n  - " + e;
    throw InvalidArgument(fmt::format("decode: options.plan->{} ({}) is not a valid kernel for profile {}; make the "
                                      "plan with plan_decode:{}",
                                      k == &s ? "split" : "combine", k->canonical(), profile.name, why));
  }
}

// The decode plan fits the problem: its kernels are of the problem's class.
void check_plan_matches(const AttentionProblem& problem, const DecodePlan& dp) {
  const KernelSpec& s = dp.split;
  auto field = [&](const char* name, const std::string& plan_value, const std::string& problem_value) {
    if (plan_value != problem_value)
      throw InvalidArgument(fmt::format("decode: options.plan->split.{} is {} but the problem's is {}: the plan is of "
                                        "another problem class; make it with plan_decode(problem, ...)",
                                        name, plan_value, problem_value));
  };
  field("dtype", std::string(to_string(s.dtype)), std::string(to_string(problem.dtype)));
  field("head_dim", std::to_string(s.head_dim), std::to_string(problem.head_dim));
  field("head_dim_v", std::to_string(s.head_dim_v), std::to_string(problem.head_dim_v));
  field("mask", std::string(to_string(s.mask)), std::string(to_string(problem.mask)));
  field("bias", std::string(to_string(s.bias)), std::string(to_string(problem.bias.kind)));
  field("softcap", s.softcap ? "on" : "off", problem.softcap > 0.f ? "on" : "off");
  field("sinks", s.sinks ? "on" : "off", problem.sinks != nullptr ? "on" : "off");
  field("alibi", s.alibi ? "on" : "off", problem.alibi_slopes != nullptr ? "on" : "off");
  field("varlen", s.varlen ? "on" : "off", problem.varlen() ? "on" : "off");
  field("paged", s.paged ? "on" : "off", problem.paged() ? "on" : "off");
  const int64_t g = group_size(problem);
  if (s.pack < 1 || g % s.pack != 0)
    throw InvalidArgument(fmt::format("decode: options.plan->split.pack ({}) must divide heads_q / heads_kv ({})",
                                      s.pack, g));
  if (dp.combine.arch != s.arch)
    throw InvalidArgument(fmt::format("decode: options.plan->combine.arch (sm_{}) and split.arch (sm_{}) differ",
                                      dp.combine.arch, s.arch));
  const KernelSpec& c = dp.combine;
  const bool has_lse = problem.lse.data != nullptr;
  if (c.family != KernelFamily::combine || c.partial_dtype != StateDType::f32 ||
      c.out_dtype != state_dtype_of(problem.dtype) || c.head_dim_v != problem.head_dim_v || c.has_lse != has_lse ||
      c.varlen != problem.varlen())
    throw InvalidArgument(fmt::format("decode: options.plan->combine ({}) is not the combine kernel of this problem "
                                      "(partial f32, out {}, head_dim_v {}, lse {}, varlen {}); plan with plan_decode",
                                      c.canonical(), to_string(problem.dtype), problem.head_dim_v, has_lse ? 1 : 0,
                                      problem.varlen() ? 1 : 0));
}

}  // namespace

// (runtime/launch.hpp)
void rt::check_decode_num_splits(int num_splits) {
  if (num_splits < 0 || num_splits > kMaxDecodeSplits)
    throw InvalidArgument(fmt::format("plan_decode: num_splits ({}) must be 0 (chosen) or in [1, {}]", num_splits,
                                      kMaxDecodeSplits));
}

namespace {

// plan_decode's argument checks (both forms; before any profile lookup, which
// would report a bad arch as Unsupported).
void check_decode_args(const AttentionProblem& problem, int arch, int sm_count, int num_splits) {
  check_problem(problem);
  if (sm_count < 1)
    throw InvalidArgument(fmt::format("plan_decode: sm_count ({}) must be at least 1", sm_count));
  rt::check_decode_num_splits(num_splits);
  if (arch < gen::kMinArch || arch > gen::kMaxArch)
    throw InvalidArgument(fmt::format("plan_decode: arch ({}) must be a compute capability written 10 * major + minor "
                                      "(e.g. 90 for sm_90); decode() without a plan uses the current device's",
                                      arch));
}

}  // namespace

DecodePlan plan_decode(const AttentionProblem& problem, int arch, int sm_count, int num_splits) {
  check_decode_args(problem, arch, sm_count, num_splits);
  return plan_decode(problem, arch, sm_count, num_splits, profile_for_arch(arch));
}

DecodePlan plan_decode(const AttentionProblem& problem, int arch, int sm_count, int num_splits,
                       const Profile& profile) {
  check_decode_args(problem, arch, sm_count, num_splits);
  if (problem.seqlen_k > INT32_MAX - 256)
    throw InvalidArgument(fmt::format("plan_decode: seqlen_k ({}) must be at most 2^31 - 257 (the kernels count keys "
                                      "in 32 bits)",
                                      problem.seqlen_k));
  const MatrixUnit unit = profile.matrix_unit.shape;  // an mma.sync unit (a profile's wgmma is an extra)
  if (gen::unit_traits(unit).warpgroup)
    throw Unsupported(fmt::format("plan_decode: profile {} (sm_{}) has matrix unit {}; the split-KV forward is "
                                  "generated for the mma.sync units",
                                  profile.name, arch, to_string(unit)));
  const int d = static_cast<int>(problem.head_dim), dv = static_cast<int>(problem.head_dim_v);
  DecodePlan dp;
  KernelSpec& s = dp.split;
  s = problem_variant(problem, arch);
  s.family = KernelFamily::fwd_split;
  s.unit = unit;
  s.has_lse = false;  // the split kernel always writes partial LSE; the combine writes the problem's
  s.tile = profile.tile_for(std::max(d, dv), unit).tile;
  // Decode streams K/V at memory bandwidth, so it keeps a copy in flight behind the one it reads: a
  // one-stage row (a prefill tile whose K and V copies take turns, e.g. the sm_80-90 D256 64x64x4x1)
  // runs as two stages of half its keys, in the same shared memory.
  if (s.tile.stages == 1 && s.tile.block_n % 32 == 0) {
    s.tile.block_n /= 2;
    s.tile.stages = 2;
  }
  s.tile.block_m = 16 * s.tile.warps;  // one 16-row slice per warp: decode has few rows
  const int64_t g = group_size(problem);
  s.pack = 1;
  while (s.pack * 2 <= gen::kMaxPack && g % (s.pack * 2) == 0 && s.tile.block_m % (s.pack * 2) == 0) s.pack *= 2;
  if (problem.seqlen_q > (INT32_MAX - 256) / s.pack)
    throw InvalidArgument(fmt::format("plan_decode: seqlen_q * pack = {} * {} must be at most 2^31 - 257 (decode packs "
                                      "the query heads of a GQA group as rows, which the kernels count in 32 bits, as "
                                      "the forward's seqlen_q); split the query rows into smaller calls",
                                      problem.seqlen_q, s.pack));
  // Fewer packed rows than the tile has: the smallest power-of-two row block
  // of 16 or more, and the warps left over split each key tile (key_warps:
  // the tensor work per K/V byte shrinks with the rows computed).
  // A key tile too narrow to split, or a merge that does not fit the
  // profile's shared memory (sm_75: 64 KiB), keeps the profile's rows per warp.
  const int64_t rows = problem.seqlen_q * s.pack;
  if (gen::unit_traits(unit).key_split_warps && rows < s.tile.block_m) {
    int bm = 16;
    while (bm < rows) bm *= 2;
    int kw = 16 * s.tile.warps / bm;
    while (kw > 1 && s.tile.block_n % (16 * kw) != 0) kw /= 2;
    KernelSpec k = s;
    k.tile.warps = kw * bm / 16;
    k.tile.block_m = bm;
    if (kw > 1 && validate(k, profile).empty()) s = k;
  }
  require_valid(s, profile);
  KernelSpec& c = dp.combine;
  c.family = KernelFamily::combine;
  c.arch = arch;
  c.partial_dtype = StateDType::f32;
  c.out_dtype = state_dtype_of(problem.dtype);
  c.head_dim_v = dv;
  c.has_lse = problem.lse.data != nullptr;
  c.varlen = problem.varlen();  // (writes only the rows of the packed batch's sequences)
  require_valid(c, profile);

  const int64_t tiles = key_tiles(problem, s.tile.block_n);
  if (num_splits == 0 && problem.empty()) num_splits = 1;  // nothing to split
  if (num_splits == 0) num_splits = choose_splits(split_blocks(problem, s), tiles, int64_t{sm_count} * split_blocks_per_sm(s, profile));
  dp.num_splits = num_splits;
  dp.tiles_per_split = split_tiles(problem, dp);
  dp.workspace_bytes = decode_workspace_bytes(problem, dp);
  return dp;
}

// One split of a key-split tile: its block merges its warps' states anyway and
// writes O and LSE itself (templates/fwd_m16n8.cu, fg_merge_key_warps,
// p.num_splits == 1).
bool decode_merges(const DecodePlan& plan) noexcept { return !(plan.num_splits == 1 && plan.split.key_warps() > 1); }

int64_t decode_workspace_bytes(const AttentionProblem& problem, const DecodePlan& plan) {
  check_problem(problem);
  if (plan.num_splits < 1 || plan.num_splits > kMaxDecodeSplits)
    throw InvalidArgument(fmt::format("decode_workspace_bytes: plan.num_splits ({}) must be in [1, {}]",
                                      plan.num_splits, kMaxDecodeSplits));
  // num_splits * batch * heads_q * seqlen_q * (head_dim_v + 1) * 4, checked
  // (a packed batch: num_splits * total_q * heads_q * ...).
  const int64_t batch = partial_batch(problem), rows = partial_rows(problem);
  int64_t n = plan.num_splits;
  for (int64_t f : {batch, problem.heads_q, rows, problem.head_dim_v + 1, int64_t{4}}) {
    if (f != 0 && n > (INT64_MAX - 255) / f)
      throw InvalidArgument(fmt::format("decode_workspace_bytes: num_splits * batch * heads_q * seqlen_q * "
                                        "(head_dim_v + 1) * 4 = {} * {} * {} * {} * {} * 4 bytes overflows int64",
                                        plan.num_splits, batch, problem.heads_q, rows, problem.head_dim_v + 1));
    n *= f;
  }
  return (n + 255) / 256 * 256;
}

DecodeInfo decode(const AttentionProblem& problem, CUstream stream, const DecodeOptions& options) {
  check_problem(problem);
  // The options that need no device first.
  if (options.plan != nullptr && options.num_splits != 0)
    throw InvalidArgument(fmt::format("decode: options.num_splits ({}) is given with options.plan; the plan's "
                                      "num_splits ({}) is used: pass one of them",
                                      options.num_splits, options.plan->num_splits));
  if (options.num_splits < 0 || options.num_splits > kMaxDecodeSplits)
    throw InvalidArgument(fmt::format("decode: options.num_splits ({}) must be 0 (chosen) or in [1, {}]",
                                      options.num_splits, kMaxDecodeSplits));
  if (options.workspace == nullptr && options.workspace_bytes != 0)
    throw InvalidArgument(fmt::format("decode: options.workspace_bytes ({}) is given without options.workspace "
                                      "(NULL: the library's workspace)",
                                      options.workspace_bytes));
  if (options.workspace != nullptr && reinterpret_cast<uintptr_t>(options.workspace) % 256 != 0)
    throw InvalidArgument(fmt::format("decode: options.workspace ({}) must be 256-byte aligned", options.workspace));
  if (options.workspace != nullptr && options.workspace_bytes <= 0)
    throw InvalidArgument(fmt::format("decode: options.workspace_bytes ({}) must be positive with options.workspace",
                                      options.workspace_bytes));
  DecodeInfo info;
  if (options.plan != nullptr) {
    info.plan = *options.plan;
    check_plan_valid(info.plan);
  } else {
    const DeviceInfo dev = current_device();
    info.plan = plan_decode(problem, dev.arch, dev.sm_count, options.num_splits);
  }
  DecodePlan& dp = info.plan;
  check_plan_matches(problem, dp);
  dp.tiles_per_split = split_tiles(problem, dp);  // of this problem, whatever the plan was made for
  dp.workspace_bytes = decode_workspace_bytes(problem, dp);
  if (options.workspace != nullptr) {
    if (options.workspace_bytes < dp.workspace_bytes)
      throw InvalidArgument(fmt::format("decode: options.workspace_bytes ({}) is less than the {} bytes this decode "
                                        "needs (decode_workspace_bytes)",
                                        options.workspace_bytes, dp.workspace_bytes));
  }
  if (problem.empty()) return info;  // nothing to compute, nothing launched
  const int64_t blocks = split_blocks(problem, dp.split);
  if (blocks > kMaxGridX / dp.num_splits)
    throw InvalidArgument(fmt::format(
        "decode: the split launch needs num_splits * ceil(seqlen_q * pack / block_m) * heads_q / pack * batch = {} * "
        "{} blocks, more than the 2^31-1 a grid's x dimension allows; use fewer splits, or split the batch or the "
        "query rows into smaller calls",
        dp.num_splits, blocks));

  Kernel ks = load_kernel(dp.split);
  const bool combine = decode_merges(dp);
  const Kernel kc = combine ? load_kernel(dp.combine) : Kernel{};
  LeasedWorkspace leased;  // the library's buffer, held through both launches
  if (options.workspace == nullptr) leased = library_workspace(dp.workspace_bytes, stream);
  void* ws = options.workspace != nullptr ? options.workspace : leased.ptr;
  float* const o_partial = static_cast<float*>(ws);
  // The partials: [split, batch, seqlen_q, heads_q, head_dim_v] and [split,
  // batch, heads_q, seqlen_q] (a packed batch: one batch of total_q rows,
  // which the combine merges as such; templates/fwd_block.cuh, fg_part_row).
  const int64_t p_batch = partial_batch(problem), p_rows = partial_rows(problem);
  const int64_t o_elems = int64_t{dp.num_splits} * p_batch * p_rows * problem.heads_q * problem.head_dim_v;
  float* const lse_partial = o_partial + o_elems;

  MergeProblem m;
  m.partial_dtype = StateDType::f32;
  m.out_dtype = state_dtype_of(problem.dtype);
  m.num_states = dp.num_splits;
  m.batch = p_batch;
  m.seqlen_q = p_rows;
  m.heads = problem.heads_q;
  m.head_dim_v = problem.head_dim_v;
  m.o_partial.data = o_partial;
  m.o_partial.stride_head = problem.head_dim_v;
  m.o_partial.stride_seq = problem.heads_q * problem.head_dim_v;
  m.o_partial.stride_batch = p_rows * m.o_partial.stride_seq;
  m.o_partial.stride_state = p_batch * m.o_partial.stride_batch;
  m.lse_partial.data = lse_partial;
  m.lse_partial.stride_seq = 1;
  m.lse_partial.stride_head = p_rows;
  m.lse_partial.stride_batch = problem.heads_q * p_rows;
  m.lse_partial.stride_state = p_batch * m.lse_partial.stride_batch;
  m.o = problem.o;
  m.lse = problem.lse;
  if (combine) check_merge_problem(m);  // before anything launches (the split kernel writes only the workspace)
  const int64_t rows = problem.seqlen_q * dp.split.pack;
  FwdLaunch split(problem, dp.split, (rows + dp.split.tile.block_m - 1) / dp.split.tile.block_m,
                  blocks * dp.num_splits);
  split.set_split(o_partial, lse_partial, dp.num_splits, dp.tiles_per_split);
  rt::launch_family(ks, split, stream);

  // (a packed batch: the merge writes only the rows of its sequences, cu_seqlens_q[0] ..
  // cu_seqlens_q[batch] - 1 of the packed rows)
  if (combine)
    launch_merge(kc, m, stream, problem.varlen() ? problem.cu_seqlens_q : nullptr,
                 problem.varlen() ? problem.cu_seqlens_q + problem.batch : nullptr);
  info.launched = true;
  return info;
}

bool decode_preferred(const AttentionProblem& problem, int arch, int sm_count) noexcept {
  try {
    check_problem(problem);
    const Profile& profile = profile_for_arch(arch);
    if (gen::unit_traits(profile.matrix_unit.shape).warpgroup) return false;
    const auto& dts = profile.matrix_unit.operand_dtypes;
    if (std::find(dts.begin(), dts.end(), problem.dtype) == dts.end()) return false;
    if (problem.empty() || problem.heads_kv < 1 || problem.seqlen_q < 1 || problem.seqlen_k < 512)
      return false;  // (nothing to run, or few keys)
    if ((problem.mask == MaskKind::causal_top_left || problem.mask == MaskKind::window_top_left) &&
        problem.seqlen_q < 512)
      return false;  // few keys visible
    const int64_t g = problem.heads_q / problem.heads_kv;
    if (problem.seqlen_q > 64 / std::max<int64_t>(g, 1)) return false;
    const int64_t blocks = (problem.seqlen_q + 63) / 64;
    return blocks * problem.heads_q < sm_count && blocks * problem.heads_q * problem.batch < sm_count;
  } catch (...) {
    return false;
  }
}

ForwardInfo forward(const AttentionProblem& problem, CUstream stream) {
  ForwardInfo info;
  check_problem(problem);
  rt::check_row_limits(problem);  // (before the device: these limits need none)
  if (!problem.empty()) {
    const DeviceInfo dev = current_device();
    if (decode_preferred(problem, dev.arch, dev.sm_count)) {
      const DecodeInfo d = decode(problem, stream);
      info.spec = d.plan.split;
      info.launched = d.launched;
      info.num_splits = d.plan.num_splits;
      return info;
    }
  }
  info.spec = plan(problem);  // checks the problem, then the device's profile
  if (problem.empty()) return info;
  Kernel k = load_kernel(info.spec);
  launch(k, problem, stream);
  info.launched = true;
  info.from_cache = k.from_cache;
  return info;
}

}  // namespace flashgen
