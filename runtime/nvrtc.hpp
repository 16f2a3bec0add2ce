// Lazily loaded NVRTC (internal to libflashgen; tests use it too).
//
// The library is found on first use, in this order:
//   1. the file named by $FLASHGEN_NVRTC_LIBRARY, if set (no fallback then);
//   2. libnvrtc.so.13, libnvrtc.so.12 through the dynamic loader's search path;
//   3. the same names under $CUDA_HOME/lib64, then /usr/local/cuda/lib64.
// A library whose nvrtcVersion() reports a major other than 12 or 13 is not
// used (the error names the version found and the ones needed).
//
// Per target: a compile for sm_XX uses that library when it targets sm_XX
// (nvrtcGetSupportedArchs). CUDA 13's NVRTC no longer targets sm_70/sm_72, so
// for those a second NVRTC, of CUDA 12, is searched (once per arch):
// libnvrtc.so.12 through the loader, then the PyPI wheel nvidia-cuda-nvrtc-cu12
// (<prefix>/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 for
// $VIRTUAL_ENV, $CONDA_PREFIX, /usr/local, /usr, ~/.local, pyenv versions and
// /opt/conda), then $CUDA_HOME/lib64, /usr/local/cuda/lib64 and
// /usr/local/cuda-12*/lib64. With FLASHGEN_NVRTC_LIBRARY set nothing else is
// searched: an NVRTC there that cannot target the arch is an Unavailable error
// that says which NVRTC is needed and how to point at it.
// NVRTC needs no GPU and no driver.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashgen/types.hpp"

namespace flashgen::rt {

struct NvrtcVersion {
  int major = 0;
  int minor = 0;
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
  bool operator==(const NvrtcVersion&) const = default;
};

/// The loaded NVRTC's version. Throws flashgen::Unavailable (listing every
/// path tried and mentioning FLASHGEN_NVRTC_LIBRARY) when none loads; with
/// FLASHGEN_NVRTC_LIBRARY set, the message's first line names the variable,
/// its value and why that file could not be used.
NvrtcVersion nvrtc_version();

/// True when NVRTC loads. Never throws.
bool nvrtc_available() noexcept;

/// The path or name NVRTC was loaded from (loads it; throws like nvrtc_version).
std::string nvrtc_library();

/// The version / path of the NVRTC that compiles for sm_<arch> (see above);
/// this version is the one in the arch's cache keys. Throws Unavailable when no
/// NVRTC on the machine targets the arch (naming the NVRTC needed and how to
/// provide it).
NvrtcVersion nvrtc_version_for(int arch);
std::string nvrtc_library_for(int arch);
/// True when an NVRTC that targets sm_<arch> loads. Never throws.
bool nvrtc_available_for(int arch) noexcept;

/// The NVRTC options for a kernel of compute capability `arch`, in the fixed
/// order that is part of the cache key:
///   "--gpu-architecture=sm_<arch>", "-std=c++17", "--ptxas-options=--verbose",
///   "-default-device".
/// `arch_specific` selects the arch-specific target sm_<arch>a (wgmma needs
/// sm_90a; its cubin loads only on that exact compute capability).
/// --ptxas-options=--verbose makes the compile log hold ptxas's per-kernel
/// report ("Used N registers", "N bytes spill stores, N bytes spill loads").
std::vector<std::string> nvrtc_options(int arch, bool arch_specific = false);

/// NVRTC rejected a program. what() is a short summary; the fields carry the
/// details so callers (runtime/api.cpp) can build the full CompileError.
class NvrtcCompileFailure : public CompileError {
 public:
  NvrtcCompileFailure(const std::string& summary, std::string result, std::string log)
      : CompileError(summary), result_(std::move(result)), log_(std::move(log)) {}
  const std::string& result() const noexcept { return result_; }  ///< e.g. "NVRTC_ERROR_COMPILATION"
  const std::string& log() const noexcept { return log_; }        ///< the program log

 private:
  std::string result_;
  std::string log_;
};

struct NvrtcOutput {
  std::vector<char> cubin;  ///< ELF image
  std::string log;          ///< program log (ptxas report with --ptxas-options=--verbose)
};

/// Compile `source` (program name `program_name`, used in diagnostics) with
/// `options` to a cubin, with the NVRTC for the arch named by the options'
/// --gpu-architecture (the primary NVRTC when none is named). Thread-safe: each call owns its nvrtcProgram.
/// Throws NvrtcCompileFailure (a CompileError) when NVRTC fails, Unavailable
/// when NVRTC is missing.
NvrtcOutput compile_to_cubin(const std::string& source, const std::string& program_name,
                             const std::vector<std::string>& options);

/// Number of compile_to_cubin calls that reached NVRTC in this process (tests use it to
/// prove a cache hit made no NVRTC call).
uint64_t nvrtc_compile_count() noexcept;

}  // namespace flashgen::rt
