// Lazily loaded CUDA driver API: libcuda.so.1 is opened with dlopen on first
// use, cuGetProcAddress resolves every entry point of Driver by its base name,
// then cuInit(0). Nothing here runs before the first call, so programs linked
// with libflashgen start (and generate/compile kernels) without a driver.
#include "runtime/driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include <fmt/format.h>

#include "flashgen/types.hpp"

namespace flashgen::rt {
namespace {

// cuGetProcAddress_v2 (CUDA 12.0+) and the CUDA 11 four-argument form.
using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

// The ABI version we ask entry points for: the CUDA 12.0 signatures, which
// are the ones the Driver struct declares (e.g. cuMemAlloc -> cuMemAlloc_v2).
constexpr int kRequestedCudaVersion = 12000;

constexpr const char* kNoDriverTail =
    "launching kernels needs an NVIDIA GPU and driver. Code generation and compilation work "
    "without one.";

struct DriverState {
  Driver table{};
  bool ok = false;
  std::string error;  // the Unavailable message when !ok
  int device_count = 0;
};


DriverState load_driver() {
  DriverState s;
  // The handle is never closed: the entry points live until process exit.
  dlerror();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    s.error = fmt::format("no CUDA driver: libcuda.so.1 could not be loaded ({}); {}",
                          why != nullptr ? why : "unknown dlopen error", kNoDriverTail);
    return s;
  }

  GetProcV2 get_v2 = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
  GetProcV1 get_v1 = nullptr;
  if (get_v2 == nullptr) get_v1 = reinterpret_cast<GetProcV1>(dlsym(lib, "cuGetProcAddress"));
  if (get_v2 == nullptr && get_v1 == nullptr) {
    s.error = fmt::format(
        "unsupported CUDA driver: libcuda.so.1 has neither cuGetProcAddress_v2 nor cuGetProcAddress "
        "(a driver for CUDA 11.3 or newer is needed, CUDA 12 recommended); {}",
        kNoDriverTail);
    return s;
  }

  std::string missing;
  auto resolve = [&](const char* name, void** slot) {
    void* fn = nullptr;
    CUresult r;
    if (get_v2 != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      r = get_v2(name, &fn, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
    } else {
      r = get_v1(name, &fn, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT);
    }
    if (r != CUDA_SUCCESS || fn == nullptr) {
      if (!missing.empty()) missing += ", ";
      missing += name;
      fn = nullptr;
    }
    *slot = fn;
  };

  Driver& t = s.table;
  // The field names go through cuda.h's versioning macros (cuMemAlloc ->
  // cuMemAlloc_v2) exactly as they did in driver.hpp; the strings are the
  // base names that cuGetProcAddress expects.
#define FLASHGEN_RESOLVE(field, name) resolve(name, reinterpret_cast<void**>(&t.field))
  FLASHGEN_RESOLVE(cuGetErrorName, "cuGetErrorName");
  FLASHGEN_RESOLVE(cuGetErrorString, "cuGetErrorString");
  FLASHGEN_RESOLVE(cuInit, "cuInit");
  FLASHGEN_RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
  FLASHGEN_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
  FLASHGEN_RESOLVE(cuDeviceGet, "cuDeviceGet");
  FLASHGEN_RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  FLASHGEN_RESOLVE(cuDeviceGetName, "cuDeviceGetName");
  FLASHGEN_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  FLASHGEN_RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent");
  FLASHGEN_RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent");
  FLASHGEN_RESOLVE(cuCtxGetDevice, "cuCtxGetDevice");
  FLASHGEN_RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
  FLASHGEN_RESOLVE(cuModuleLoadData, "cuModuleLoadData");
  FLASHGEN_RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
  FLASHGEN_RESOLVE(cuModuleUnload, "cuModuleUnload");
  FLASHGEN_RESOLVE(cuFuncSetAttribute, "cuFuncSetAttribute");
  FLASHGEN_RESOLVE(cuFuncGetAttribute, "cuFuncGetAttribute");
  FLASHGEN_RESOLVE(cuLaunchKernel, "cuLaunchKernel");
  FLASHGEN_RESOLVE(cuMemAlloc, "cuMemAlloc");
  FLASHGEN_RESOLVE(cuMemFree, "cuMemFree");
  FLASHGEN_RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD");
  FLASHGEN_RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH");
  FLASHGEN_RESOLVE(cuMemcpyDtoD, "cuMemcpyDtoD");
  FLASHGEN_RESOLVE(cuMemsetD8, "cuMemsetD8");
  FLASHGEN_RESOLVE(cuMemsetD16, "cuMemsetD16");
  FLASHGEN_RESOLVE(cuMemsetD32, "cuMemsetD32");
  FLASHGEN_RESOLVE(cuStreamCreate, "cuStreamCreate");
  FLASHGEN_RESOLVE(cuStreamDestroy, "cuStreamDestroy");
  FLASHGEN_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
  FLASHGEN_RESOLVE(cuEventCreate, "cuEventCreate");
  FLASHGEN_RESOLVE(cuEventDestroy, "cuEventDestroy");
  FLASHGEN_RESOLVE(cuEventRecord, "cuEventRecord");
  FLASHGEN_RESOLVE(cuEventSynchronize, "cuEventSynchronize");
  FLASHGEN_RESOLVE(cuEventElapsedTime, "cuEventElapsedTime");
  FLASHGEN_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  FLASHGEN_RESOLVE(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
#undef FLASHGEN_RESOLVE

  if (!missing.empty()) {
    s.error = fmt::format(
        "unsupported CUDA driver: libcuda.so.1 lacks the CUDA 12.0 entry points {} (update the "
        "NVIDIA driver); {}",
        missing, kNoDriverTail);
    return s;
  }

  CUresult r = t.cuInit(0);
  if (r != CUDA_SUCCESS) {
    s.error = fmt::format(
        "no usable CUDA device: libcuda.so.1 loaded but cuInit(0) failed with {}; {}",
        result_text(t, r), kNoDriverTail);
    return s;
  }
  int count = 0;
  r = t.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    s.error = fmt::format("no usable CUDA device: cuDeviceGetCount failed with {}; {}",
                          result_text(t, r), kNoDriverTail);
    return s;
  }
  s.device_count = count;
  s.ok = true;
  return s;
}

const DriverState& state() {
  // Function-local static: initialized exactly once, thread-safe (C++11).
  // load_driver never throws, so a failure is remembered, not retried.
  static const DriverState s = load_driver();
  return s;
}

}  // namespace

std::string result_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName == nullptr || d.cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr)
    name = "CUDA_ERROR_UNKNOWN_CODE";
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    text = "no description";
  return fmt::format("{} ({}, code {})", name, text, static_cast<int>(r));
}

const Driver& driver() {
  const DriverState& s = state();
  if (!s.ok) throw Unavailable(s.error);
  return s.table;
}

bool driver_available() noexcept {
  const DriverState& s = state();
  return s.ok && s.device_count > 0;
}

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const DriverState& s = state();
  std::string what;
  if (s.ok) {
    what = result_text(s.table, r);
  } else {
    what = fmt::format("CUresult {}", static_cast<int>(r));
  }
  throw DriverError(fmt::format("{} failed: {}", call, what), static_cast<int>(r));
}

CUcontext ensure_context() {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return ctx;

  // Retain device 0's primary context once per process (a retain per thread
  // would only raise its reference count) and make it current here.
  static std::mutex mu;
  static CUcontext primary = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (primary == nullptr) {
      if (state().device_count <= 0)
        throw Unavailable(
            "no CUDA device: the driver loaded but reports 0 devices; launching kernels needs an "
            "NVIDIA GPU. Code generation and compilation work without one.");
      CUdevice dev = 0;
      check(d.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
      CUcontext c = nullptr;
      check(d.cuDevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain(device 0)");
      primary = c;
    }
    ctx = primary;
  }
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

}  // namespace flashgen::rt
