// NVRTC through dlopen, so libflashgen has no link-time dependency on it.
#include "runtime/nvrtc.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
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
  // Optional (NVRTC 11.2+): the real architectures this NVRTC compiles for.
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int*);
  nvrtcResult (*nvrtcGetSupportedArchs)(int*);
};

struct NvrtcState {
  NvrtcApi api{};
  bool ok = false;
  std::string error;    // Unavailable message when !ok
  std::string library;  // what was loaded
  NvrtcVersion version;
  std::vector<int> archs;  // sm numbers it targets (nvrtcGetSupportedArchs); empty = unknown
  bool targets(int arch) const {
    return archs.empty() || std::find(archs.begin(), archs.end(), arch) != archs.end();
  }
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
  a.nvrtcGetNumSupportedArchs =
      reinterpret_cast<nvrtcResult (*)(int*)>(dlsym(lib, "nvrtcGetNumSupportedArchs"));
  a.nvrtcGetSupportedArchs = reinterpret_cast<nvrtcResult (*)(int*)>(dlsym(lib, "nvrtcGetSupportedArchs"));
  return missing;
}

// dlopen `path` and check it is a usable NVRTC; on failure returns a state
// with ok == false and error "<path>: <why>" (one line). A usable library
// stays open until process exit.
NvrtcState try_load(const std::string& path) {
  NvrtcState s;
  const auto refuse = [&](const std::string& why) {
    // dlerror() names the file itself ("<path>: file too short").
    s.error = why.rfind(path + ": ", 0) == 0 ? why : fmt::format("{}: {}", path, why);
    return s;
  };
  dlerror();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return refuse(why != nullptr ? why : "dlopen failed");
  }
  NvrtcApi api{};
  std::string missing = resolve_all(lib, api);
  if (!missing.empty()) {
    dlclose(lib);
    return refuse(fmt::format("loaded, but lacks {}", missing));
  }
  int major = 0, minor = 0;
  nvrtcResult r = api.nvrtcVersion(&major, &minor);
  if (r != NVRTC_SUCCESS) {
    const std::string why = fmt::format("nvrtcVersion failed ({})", api.nvrtcGetErrorString(r));
    dlclose(lib);
    return refuse(why);
  }
  // Only the majors whose NVRTC this library is written and tested against:
  // another major may differ in options, ABI or targets (and its cubins in
  // what the driver accepts), so it is refused by name rather than used.
  if (major < kMinNvrtcMajor || major > kMaxNvrtcMajor) {
    dlclose(lib);
    return refuse(fmt::format("loaded, but it is NVRTC {}.{}; libflashgen needs NVRTC {}.x to {}.x", major, minor,
                              kMinNvrtcMajor, kMaxNvrtcMajor));
  }
  s.api = api;
  s.ok = true;
  s.library = path;
  s.version = NvrtcVersion{major, minor};
  int n = 0;
  if (api.nvrtcGetNumSupportedArchs != nullptr && api.nvrtcGetSupportedArchs != nullptr &&
      api.nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
    std::vector<int> archs(static_cast<size_t>(n));
    if (api.nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS) s.archs = std::move(archs);
  }
  return s;
}

NvrtcState load_nvrtc() {
  const char* override_path = std::getenv("FLASHGEN_NVRTC_LIBRARY");
  if (override_path != nullptr && *override_path != '\0') {
    // Only this file; the whole reason on the message's first line.
    NvrtcState s = try_load(override_path);
    if (!s.ok) {
      s.error = fmt::format(
          "FLASHGEN_NVRTC_LIBRARY={} could not be used: {}. No other NVRTC is searched while it is set: set it to "
          "the path of a working libnvrtc.so (CUDA 12 or 13), or unset it to search the default locations.",
          override_path, s.error);
    }
    return s;
  }
  std::vector<std::string> candidates;
  const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
  for (const char* n : names) candidates.emplace_back(n);
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0')
    dirs.push_back(std::string(home) + "/lib64");
  if (dirs.empty() || dirs[0] != "/usr/local/cuda/lib64") dirs.emplace_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const char* n : names) candidates.push_back(d + "/" + n);

  std::string tried;
  for (const auto& c : candidates) {
    NvrtcState loaded = try_load(c);
    if (loaded.ok) return loaded;
    tried += "\n  " + loaded.error;
  }
  NvrtcState s;
  s.error = fmt::format(
      "NVRTC is not available, so kernels cannot be compiled. Tried:{}\nInstall the CUDA "
      "toolkit's NVRTC (CUDA 12 or 13; e.g. the PyPI wheel nvidia-cuda-nvrtc-cu12), set CUDA_HOME "
      "to the toolkit, or set FLASHGEN_NVRTC_LIBRARY to the path of libnvrtc.so.",
      tried);
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

// Where an NVRTC of CUDA 12 may live when the loader does not find it: the
// PyPI wheel nvidia-cuda-nvrtc-cu12 (site-packages/nvidia/cuda_nvrtc/lib, with
// libnvrtc-builtins beside it) in the usual Python prefixes, then CUDA 12
// toolkits (newest first).
std::vector<std::string> legacy_candidates() {
  std::vector<std::string> out = {"libnvrtc.so.12"};
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  const std::string home = env("HOME");
  const std::string wheel = "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12";
  std::vector<std::string> patterns;
  for (const std::string& prefix : {env("VIRTUAL_ENV"), env("CONDA_PREFIX")})
    if (!prefix.empty()) patterns.push_back(prefix + "/lib/python3*/site-packages" + wheel);
  patterns.push_back("/usr/local/lib/python3*/site-packages" + wheel);
  patterns.push_back("/usr/local/lib/python3*/dist-packages" + wheel);
  patterns.push_back("/usr/lib/python3/dist-packages" + wheel);
  patterns.push_back("/usr/lib/python3*/site-packages" + wheel);
  if (!home.empty()) patterns.push_back(home + "/.local/lib/python3*/site-packages" + wheel);
  for (const std::string& root : {env("PYENV_ROOT"), home.empty() ? std::string() : home + "/.pyenv",
                                  std::string("/root/.pyenv")})
    if (!root.empty()) patterns.push_back(root + "/versions/*/lib/python3*/site-packages" + wheel);
  patterns.push_back("/opt/conda/lib/python3*/site-packages" + wheel);
  for (const std::string& cuda : {env("CUDA_HOME"), std::string("/usr/local/cuda")})
    if (!cuda.empty()) patterns.push_back(cuda + "/lib64/libnvrtc.so.12");
  patterns.push_back("/usr/local/cuda-12*/lib64/libnvrtc.so.12");
  patterns.push_back("/usr/local/cuda-12*/targets/x86_64-linux/lib/libnvrtc.so.12");
  for (const std::string& pat : patterns) {
    glob_t g{};
    if (::glob(pat.c_str(), 0, nullptr, &g) == 0) {
      std::vector<std::string> hits(g.gl_pathv, g.gl_pathv + g.gl_pathc);
      std::sort(hits.rbegin(), hits.rend());  // newest toolkit / Python first
      for (auto& h : hits)
        if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(std::move(h));
    }
    ::globfree(&g);
  }
  return out;
}

std::string arch_names(const std::vector<int>& archs) {
  std::string s;
  for (int a : archs) s += fmt::format("{}sm_{}", s.empty() ? "" : ", ", a);
  return s.empty() ? std::string("(unknown)") : s;
}

// The NVRTC that compiles for sm_<arch>: the primary one when it targets the
// arch, else (CUDA 13 no longer targets sm_70/sm_72) the first NVRTC 12 found
// by legacy_candidates() that does. Chosen once per arch.
const NvrtcState& loaded_for(int arch) {
  const NvrtcState& primary = loaded();
  if (primary.targets(arch)) return primary;
  const char* override_path = std::getenv("FLASHGEN_NVRTC_LIBRARY");
  if (override_path != nullptr && *override_path != '\0') {
    throw Unavailable(fmt::format(
        "FLASHGEN_NVRTC_LIBRARY={} is NVRTC {}, which cannot compile for sm_{} (it targets {}). "
        "sm_{} needs an NVRTC of CUDA 12.x (CUDA 13 dropped it): install one (pip install "
        "nvidia-cuda-nvrtc-cu12, or a CUDA 12 toolkit) and set FLASHGEN_NVRTC_LIBRARY to its "
        "libnvrtc.so.12 (e.g. <site-packages>/nvidia/cuda_nvrtc/lib/libnvrtc.so.12), which also "
        "compiles for the newer archs, or unset FLASHGEN_NVRTC_LIBRARY to search for one.",
        override_path, primary.version.str(), arch, arch_names(primary.archs), arch));
  }
  static std::mutex mu;
  static std::map<int, std::unique_ptr<NvrtcState>> by_arch;  // failures remembered too
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_arch.find(arch);
  if (it == by_arch.end()) {
    auto st = std::make_unique<NvrtcState>();
    std::string tried, others;  // others: NVRTCs that loaded and target other archs
    for (const std::string& c : legacy_candidates()) {
      if (c == primary.library) continue;
      NvrtcState s = try_load(c);
      if (!s.ok) {
        tried += "\n  " + s.error;
        continue;
      }
      if (s.targets(arch)) {
        *st = std::move(s);
        break;
      }
      tried += fmt::format("\n  {}: NVRTC {}, which does not target sm_{}", c, s.version.str(), arch);
      others += fmt::format("; {} (NVRTC {}) targets {}", c, s.version.str(), arch_names(s.archs));
    }
    // Older than every arch the loaded NVRTC targets: one CUDA 13 dropped (sm_70, sm_72), which a
    // CUDA 12 NVRTC compiles for. Otherwise, or when a CUDA 12 NVRTC here does not target it
    // either: an arch no NVRTC here knows (a newer GPU, or one that does not exist).
    const bool older = !primary.archs.empty() && arch < *std::min_element(primary.archs.begin(), primary.archs.end());
    if (!st->ok && (!others.empty() || !older)) {
      st->error = fmt::format(
          "no NVRTC on this machine compiles for sm_{}: {} (NVRTC {}) targets {}{}. Check the arch "
          "(10 * major + minor, e.g. 86 for sm_86); a newer GPU needs a newer NVRTC (set "
          "FLASHGEN_NVRTC_LIBRARY to its libnvrtc.so).",
          arch, primary.library, primary.version.str(), arch_names(primary.archs), others);
    } else if (!st->ok) {
      st->error = fmt::format(
          "no NVRTC on this machine compiles for sm_{}: the one loaded ({}, NVRTC {}) targets {}, "
          "and CUDA 13 dropped sm_{}. It needs an NVRTC of CUDA 12.x. Install the PyPI wheel "
          "(pip install nvidia-cuda-nvrtc-cu12; its site-packages/nvidia/cuda_nvrtc/lib is searched) "
          "or a CUDA 12 toolkit (/usr/local/cuda-12.x), or set FLASHGEN_NVRTC_LIBRARY to the path of "
          "a libnvrtc.so.12. Tried:{}",
          arch, primary.library, primary.version.str(), arch_names(primary.archs), arch, tried);
    }
    it = by_arch.emplace(arch, std::move(st)).first;
  }
  if (!it->second->ok) throw Unavailable(it->second->error);
  return *it->second;
}

// The arch named by a "--gpu-architecture=sm_XX" / "-arch=sm_XX" option, or 0.
int arch_of_options(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    for (const char* prefix : {"--gpu-architecture=sm_", "-arch=sm_", "--gpu-architecture=compute_",
                               "-arch=compute_"}) {
      const std::string pre(prefix);
      if (o.compare(0, pre.size(), pre) == 0) {
        int arch = 0;
        for (size_t i = pre.size(); i < o.size() && o[i] >= '0' && o[i] <= '9'; ++i) arch = arch * 10 + (o[i] - '0');
        return arch;
      }
    }
  }
  return 0;
}

const NvrtcState& loaded_for_options(const std::vector<std::string>& options) {
  const int arch = arch_of_options(options);
  return arch > 0 ? loaded_for(arch) : loaded();
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

NvrtcVersion nvrtc_version_for(int arch) { return loaded_for(arch).version; }

std::string nvrtc_library_for(int arch) { return loaded_for(arch).library; }

bool nvrtc_available_for(int arch) noexcept {
  try {
    (void)loaded_for(arch);
    return true;
  } catch (...) {
    return false;
  }
}

std::vector<std::string> nvrtc_options(int arch, bool arch_specific) {
  return {
      fmt::format("--gpu-architecture=sm_{}{}", arch, arch_specific ? "a" : ""),
      "-std=c++17",
      "--ptxas-options=--verbose",
      "-default-device",
  };
}

namespace {

NvrtcOutput compile_once(const NvrtcApi& api, const std::string& source, const std::string& program_name,
                         const std::vector<std::string>& options) {
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
  const NvrtcApi& api = loaded_for_options(options).api;  // Unavailable before counting
  g_compile_count.fetch_add(1, std::memory_order_relaxed);
  return compile_once(api, source, program_name, options);
}

uint64_t nvrtc_compile_count() noexcept { return g_compile_count.load(std::memory_order_relaxed); }

}  // namespace flashgen::rt
