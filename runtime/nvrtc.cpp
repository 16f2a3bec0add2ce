// NVRTC through dlopen, so libflashgen has no link-time dependency on it.
#include "runtime/nvrtc.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace flashgen::rt {
namespace {

struct NvrtcApi {
  nvrtcResult (*nvrtcVersion)(int*, int*);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  const char* (*nvrtcGetErrorString)(nvrtcResult);
};

struct NvrtcState {
  NvrtcApi api{};
  bool ok = false;
  std::string error;    // Unavailable message when !ok
  std::string library;  // what was loaded
  NvrtcVersion version;
};

std::atomic<uint64_t> g_compile_count{0};

// The NVRTC major versions libflashgen accepts (CUDA 12 and 13).
constexpr int kMinNvrtcMajor = 12;
constexpr int kMaxNvrtcMajor = 13;

// Resolve every symbol from `lib`; returns the missing names ("" if none).
std::string resolve_all(void* lib, NvrtcApi& a) {
  std::string missing;
  auto get = [&](const char* name, void** slot) {
    *slot = dlsym(lib, name);
    if (*slot == nullptr) {
      if (!missing.empty()) missing += ", ";
      missing += name;
    }
  };
#define FLASHGEN_NVRTC_SYM(name) get(#name, reinterpret_cast<void**>(&a.name))
  FLASHGEN_NVRTC_SYM(nvrtcVersion);
  FLASHGEN_NVRTC_SYM(nvrtcCreateProgram);
  FLASHGEN_NVRTC_SYM(nvrtcCompileProgram);
  FLASHGEN_NVRTC_SYM(nvrtcGetProgramLogSize);
  FLASHGEN_NVRTC_SYM(nvrtcGetProgramLog);
  FLASHGEN_NVRTC_SYM(nvrtcGetCUBINSize);
  FLASHGEN_NVRTC_SYM(nvrtcGetCUBIN);
  FLASHGEN_NVRTC_SYM(nvrtcDestroyProgram);
  FLASHGEN_NVRTC_SYM(nvrtcGetErrorString);
#undef FLASHGEN_NVRTC_SYM
  return missing;
}

NvrtcState load_nvrtc() {
  NvrtcState s;
  std::vector<std::string> candidates;
  const char* override_path = std::getenv("FLASHGEN_NVRTC_LIBRARY");
  const bool overridden = override_path != nullptr && *override_path != '\0';
  if (overridden) {
    candidates.emplace_back(override_path);
  } else {
    const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    for (const char* n : names) candidates.emplace_back(n);
    std::vector<std::string> dirs;
    if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0')
      dirs.push_back(std::string(home) + "/lib64");
    if (dirs.empty() || dirs[0] != "/usr/local/cuda/lib64") dirs.emplace_back("/usr/local/cuda/lib64");
    for (const auto& d : dirs)
      for (const char* n : names) candidates.push_back(d + "/" + n);
  }

  std::string tried;
  for (const auto& c : candidates) {
    dlerror();
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      tried += fmt::format("\n  {}: {}", c, why != nullptr ? why : "dlopen failed");
      continue;
    }
    NvrtcApi api{};
    std::string missing = resolve_all(lib, api);
    if (!missing.empty()) {
      tried += fmt::format("\n  {}: loaded, but lacks {}", c, missing);
      dlclose(lib);
      continue;
    }
    int major = 0, minor = 0;
    nvrtcResult r = api.nvrtcVersion(&major, &minor);
    if (r != NVRTC_SUCCESS) {
      tried += fmt::format("\n  {}: nvrtcVersion failed ({})", c, api.nvrtcGetErrorString(r));
      dlclose(lib);
      continue;
    }
    // Only the majors whose NVRTC this library is written and tested against:
    // another major may differ in options, ABI or targets (and its cubins in
    // what the driver accepts), so it is refused by name rather than used.
    if (major < kMinNvrtcMajor || major > kMaxNvrtcMajor) {
      tried += fmt::format("\n  {}: loaded, but it is NVRTC {}.{}; libflashgen needs NVRTC {}.x to {}.x",
                           c, major, minor, kMinNvrtcMajor, kMaxNvrtcMajor);
      dlclose(lib);
      continue;
    }
    // Loaded: the handle stays open until process exit.
    s.api = api;
    s.ok = true;
    s.library = c;
    s.version = NvrtcVersion{major, minor};
    return s;
  }
  if (overridden) {
    s.error = fmt::format(
        "NVRTC is not available: FLASHGEN_NVRTC_LIBRARY names a library that could not be used (no "
        "other location is tried while it is set):{}\nSet FLASHGEN_NVRTC_LIBRARY to the path of a "
        "working libnvrtc.so (CUDA 12 or 13), or unset it to search the default locations.",
        tried);
  } else {
    s.error = fmt::format(
        "NVRTC is not available, so kernels cannot be compiled. Tried:{}\nInstall the CUDA "
        "toolkit's NVRTC (CUDA 12 or 13; e.g. the PyPI wheel nvidia-cuda-nvrtc-cu12), set CUDA_HOME "
        "to the toolkit, or set FLASHGEN_NVRTC_LIBRARY to the path of libnvrtc.so.",
        tried);
  }
  return s;
}

const NvrtcState& state() {
  static const NvrtcState s = load_nvrtc();  // once, thread-safe; failure remembered
  return s;
}

const NvrtcState& loaded() {
  const NvrtcState& s = state();
  if (!s.ok) throw Unavailable(s.error);
  return s;
}

// Owns an nvrtcProgram for the duration of one compile.
class Program {
 public:
  Program(const NvrtcApi& api, nvrtcProgram p) : api_(api), p_(p) {}
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (p_ != nullptr) api_.nvrtcDestroyProgram(&p_);
  }
  nvrtcProgram get() const { return p_; }

 private:
  const NvrtcApi& api_;
  nvrtcProgram p_;
};

}  // namespace

NvrtcVersion nvrtc_version() { return loaded().version; }

bool nvrtc_available() noexcept { return state().ok; }

std::string nvrtc_library() { return loaded().library; }

std::vector<std::string> nvrtc_options(int arch) {
  return {
      fmt::format("--gpu-architecture=sm_{}", arch),
      "-std=c++17",
      "--ptxas-options=--verbose",
      "-default-device",
  };
}

namespace {

NvrtcOutput compile_once(const std::string& source, const std::string& program_name,
                         const std::vector<std::string>& options) {
  const NvrtcApi& api = loaded().api;
  auto err = [&](nvrtcResult r) { return std::string(api.nvrtcGetErrorString(r)); };

  nvrtcProgram raw = nullptr;
  nvrtcResult r =
      api.nvrtcCreateProgram(&raw, source.c_str(), program_name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    throw NvrtcCompileFailure(
        fmt::format("nvrtcCreateProgram({}) failed: {}", program_name, err(r)), err(r), "");
  Program prog(api, raw);

  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const auto& o : options) argv.push_back(o.c_str());

  nvrtcResult compiled = api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());

  NvrtcOutput out;
  size_t log_size = 0;
  if (api.nvrtcGetProgramLogSize(prog.get(), &log_size) == NVRTC_SUCCESS && log_size > 0) {
    std::string log(log_size, '\0');
    if (api.nvrtcGetProgramLog(prog.get(), log.data()) == NVRTC_SUCCESS) {
      while (!log.empty() && log.back() == '\0') log.pop_back();
      out.log = std::move(log);
    }
  }
  if (compiled != NVRTC_SUCCESS)
    throw NvrtcCompileFailure(
        fmt::format("nvrtcCompileProgram({}) failed: {}", program_name, err(compiled)),
        err(compiled), out.log);

  size_t cubin_size = 0;
  r = api.nvrtcGetCUBINSize(prog.get(), &cubin_size);
  if (r != NVRTC_SUCCESS || cubin_size == 0)
    throw NvrtcCompileFailure(
        fmt::format("nvrtcGetCUBINSize({}) failed: {} (size {}); the options must name a real "
                    "architecture (sm_XX), not a virtual one",
                    program_name, err(r), cubin_size),
        err(r), out.log);
  out.cubin.resize(cubin_size);
  r = api.nvrtcGetCUBIN(prog.get(), out.cubin.data());
  if (r != NVRTC_SUCCESS)
    throw NvrtcCompileFailure(fmt::format("nvrtcGetCUBIN({}) failed: {}", program_name, err(r)),
                              err(r), out.log);
  return out;
}

}  // namespace

NvrtcOutput compile_to_cubin(const std::string& source, const std::string& program_name,
                             const std::vector<std::string>& options) {
  g_compile_count.fetch_add(1, std::memory_order_relaxed);
  NvrtcOutput out = compile_once(source, program_name, options);
  // Seen with NVRTC 13.0 on a 16-core machine: one of 216 concurrent compiles
  // came back with an empty program log although ptxas ran verbose. The
  // report is part of the product (explain, tests), so such a compile is
  // repeated once with every other retry serialized.
  const bool verbose = std::find(options.begin(), options.end(), "--ptxas-options=--verbose") != options.end();
  if (verbose && out.log.find("ptxas") == std::string::npos) {
    static std::mutex retry_mutex;
    std::lock_guard<std::mutex> lock(retry_mutex);
    out = compile_once(source, program_name, options);
  }
  return out;
}

uint64_t nvrtc_compile_count() noexcept { return g_compile_count.load(std::memory_order_relaxed); }

}  // namespace flashgen::rt
