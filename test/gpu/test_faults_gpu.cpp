// GPU-side resource faults (issue 6, item 5): a cubin the driver cannot run
// (built for another architecture, which is what a driver too old for the
// cubin also reports) and device memory exhausted at module load and at
// launch. Each must be a typed flashgen::DriverError naming the driver call,
// with the outputs untouched, and the library must work again afterwards.
// Skipped without a GPU; left out of the compute-sanitizer runs, which would
// count the failures these tests provoke on purpose (suite "gpu-faults").
#include <doctest/doctest.h>

#include <cuda.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "test/cpu/rt_test_util.hpp"
#include "test/gpu/gpu_util.hpp"

namespace {

using namespace fgtest;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string join_errors(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : "; ") + e;
  return s;
}

// An architecture whose cubins cannot run on a device of `arch`: SASS runs
// only on its own major version.
int foreign_arch(int arch) { return arch / 10 == 9 ? 100 : 90; }

// The builtin hopper profile's text with its archs replaced by {arch}.
std::string profile_text_for(int arch) {
  std::ifstream in(std::string(FLASHGEN_SOURCE_DIR) + "/profiles/hopper.yml");
  REQUIRE(in.good());
  std::string out, line;
  int replaced = 0;
  bool in_wgmma = false;  // wgmma_flash (sm_90a tiles) is allowed on sm_90 profiles only: left out
  while (std::getline(in, line)) {
    if (line.rfind("wgmma_flash:", 0) == 0) in_wgmma = true;
    else if (!line.empty() && line[0] != ' ' && line[0] != '#') in_wgmma = false;
    if (in_wgmma) continue;
    if (line.rfind("archs:", 0) == 0) {
      line = fmt::format("archs: [{}]", arch);
      ++replaced;
    }
    out += line + "\n";
  }
  REQUIRE(replaced == 1);
  return out;
}

/// Takes (nearly) all free device memory in chunks, from 64 GiB down to 1 MiB;
/// frees it on destruction or release().
class MemoryHog {
 public:
  MemoryHog() {
    for (size_t chunk = size_t{1} << 36; chunk >= (size_t{1} << 20);) {
      CUdeviceptr p = 0;
      if (drv().cuMemAlloc(&p, chunk) == CUDA_SUCCESS) {
        blocks_.push_back(p);
        bytes_ += chunk;
      } else {
        chunk /= 2;
      }
    }
  }
  ~MemoryHog() { release(); }
  void release() {
    for (CUdeviceptr p : blocks_) (void)drv().cuMemFree(p);
    blocks_.clear();
  }
  size_t bytes() const { return bytes_; }
  MemoryHog(const MemoryHog&) = delete;
  MemoryHog& operator=(const MemoryHog&) = delete;

 private:
  std::vector<CUdeviceptr> blocks_;
  size_t bytes_ = 0;
};

// O and LSE of `dc` still hold the poison everywhere (nothing was written).
void check_untouched(const HostCase& hc, const DeviceCase& dc, const char* what) {
  CaseResult r;
  HostCase none = hc;
  none.c.seqlen_q = 0;  // no element of O / LSE may have been written
  const RefRows no_rows;  // nothing reads NaN/inf: no element may be NaN
  check_o_poison(none, no_rows, dc.o.download<uint16_t>(), r);
  if (hc.c.lse) check_lse_poison(none, no_rows, dc.lse.download<float>(), r);
  CHECK_MESSAGE(r.ok, what << ": " << join_errors(r.errors));
}

// forward() on `dc`, then every check of the GPU tier.
void check_forward_works(const HostCase& hc, DeviceCase& dc, const char* what) {
  dc.poison();
  Stream stream;
  const flashgen::ForwardInfo info = flashgen::forward(dc.problem, stream.get());
  stream.sync();
  CHECK(info.launched);
  CaseResult r;
  const std::vector<uint16_t> o_dev = dc.o.download<uint16_t>();
  const std::vector<float> lse_dev = dc.lse.download<float>();
  const RefRows rr = reference(hc);
  check_o_poison(hc, rr, o_dev, r);
  if (hc.c.lse) check_lse_poison(hc, rr, lse_dev, r);
  check_values(hc, rr, o_dev, lse_dev, r);
  std::printf("  %s: %s\n", what, summary_line(hc.c, r, info.from_cache ? "disk cache" : "NVRTC").c_str());
  CHECK_MESSAGE(r.ok, what << ": " << join_errors(r.errors));
}

Case small_case(const char* group) {
  Case c;
  c.group = group;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 70;
  c.seqlen_k = 90;
  c.lse = true;
  return c;
}

}  // namespace

#define FLASHGEN_GPU_FAULT_TEST(name) TEST_CASE(name * doctest::skip(!fgtest::gpu_present()))

TEST_SUITE("gpu-faults") {

FLASHGEN_GPU_FAULT_TEST("faults: a cubin for another architecture is a DriverError naming cuModuleLoadData") {
  const int arch = flashgen::current_device().arch;
  const int other = foreign_arch(arch);
  flashgen::test::TempDir dir("flashgen-foreign-profile");
  const std::string profile_path = dir.path() + "/foreign.yml";
  {
    std::ofstream out(profile_path);
    out << profile_text_for(other);
  }
  flashgen::KernelSpec spec;
  spec.arch = other;
  spec.dtype = DType::f16;
  spec.head_dim = spec.head_dim_v = 64;
  spec.mask = MaskKind::causal_top_left;
  spec.has_lse = true;

  auto expect_driver_error = [&](const char* attempt) {
    INFO(attempt);
    flashgen::test::EnvGuard profile("FLASHGEN_PROFILE", profile_path);
    const flashgen::Profile& p = flashgen::profile_for_arch(other);
    const flashgen::FlashTile& t = p.tile_for(64);
    spec.unit = p.matrix_unit.shape;
    spec.tile = t.tile;
    try {
      (void)flashgen::load_kernel(spec);
      FAIL("an sm_" << other << " cubin loaded on an sm_" << arch << " device");
    } catch (const flashgen::DriverError& e) {
      const std::string msg = e.what();
      std::printf("  %s: DriverError: %s\n", attempt, msg.c_str());
      INFO("message: ", msg);
      CHECK(contains(msg, "cuModuleLoadData(" + spec.kernel_name() + ")"));
      CHECK(contains(msg, fmt::format("the cubin is for sm_{}", other)));
      CHECK(contains(msg, "NVRTC"));
      const int r = e.cu_result();
      CHECK((r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
             r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION));
    }
  };
  expect_driver_error("first load (compiled now or read from the disk cache)");
  // Now the entry is on disk: the loader recompiles it once (its policy for
  // an entry the driver refuses), then gives the same typed error.
  flashgen::test::StderrCapture err;
  expect_driver_error("second load (from the disk cache)");
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(contains(log, "is unloadable"));

  // The context is not poisoned: a kernel for this device still runs.
  const HostCase hc = make_host_case(small_case("after a foreign cubin"));
  DeviceCase dc(hc);
  check_forward_works(hc, dc, "after a foreign cubin");
}

FLASHGEN_GPU_FAULT_TEST("faults: out of device memory at module load and at launch: DriverError, outputs untouched") {
  // A kernel no other test loads (d 200 / dv 56, f32 bias, top-left mask), so
  // its module is loaded for the first time while memory is exhausted.
  Case fresh = small_case("oom fresh module");
  fresh.head_dim = 200;
  fresh.head_dim_v = 56;
  fresh.bias = BiasKind::f32;
  fresh.mask = MaskKind::causal_top_left;
  const HostCase fresh_hc = make_host_case(fresh);
  DeviceCase fresh_dc(fresh_hc);
  flashgen::compile(flashgen::plan(fresh_dc.problem));  // NVRTC now, so only the load remains

  // A kernel that is already loaded, for the launch.
  const HostCase warm_hc = make_host_case(small_case("oom loaded module"));
  DeviceCase warm_dc(warm_hc);
  check_forward_works(warm_hc, warm_dc, "before exhausting memory");
  warm_dc.poison();
  Stream stream;

  bool load_failed = false, launch_failed = false;
  {
    MemoryHog hog;
    std::printf("  holding %.1f GiB of device memory\n", static_cast<double>(hog.bytes()) / (1 << 30));
    CUdeviceptr probe = 0;
    const CUresult more = drv().cuMemAlloc(&probe, size_t{4} << 20);
    if (more == CUDA_SUCCESS) (void)drv().cuMemFree(probe);
    CHECK_MESSAGE(more == CUDA_ERROR_OUT_OF_MEMORY, "the device still had 4 MiB free");

    // Module load with no memory left.
    try {
      (void)flashgen::forward(fresh_dc.problem, stream.get());
      stream.sync();
      MESSAGE("the module loaded and the kernel ran with device memory exhausted");
    } catch (const flashgen::DriverError& e) {
      load_failed = true;
      std::printf("  module load: DriverError: %s\n", e.what());
      // Where the memory runs out depends on the driver's module loading
      // (lazy loading moves a function's code to the device on first use);
      // the error names the call either way.
      const std::string name = flashgen::plan(fresh_dc.problem).kernel_name();
      const std::string msg = e.what();
      CHECK((contains(msg, "cuModuleLoadData(" + name + ")") || contains(msg, "cuModuleGetFunction(" + name + ")") ||
             contains(msg, "cuFuncSetAttribute(" + name + ",") || contains(msg, "cuLaunchKernel(" + name + ",")));
      CHECK((e.cu_result() == CUDA_ERROR_OUT_OF_MEMORY || e.cu_result() == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
      CHECK_FALSE(contains(msg, "the cubin is for"));  // not mistaken for a bad image
    }
    // Launch of a loaded kernel with no memory left.
    try {
      (void)flashgen::forward(warm_dc.problem, stream.get());
      stream.sync();
      MESSAGE("a loaded kernel launched with device memory exhausted");
    } catch (const flashgen::DriverError& e) {
      launch_failed = true;
      std::printf("  launch: DriverError: %s\n", e.what());
      CHECK(contains(e.what(), "cuLaunchKernel("));
      CHECK((e.cu_result() == CUDA_ERROR_OUT_OF_MEMORY || e.cu_result() == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
      check_untouched(warm_hc, warm_dc, "after the failed launch");
    }
    hog.release();
    stream.sync();
  }
  std::printf("  with device memory exhausted: module load %s, launch %s\n",
              load_failed ? "failed (DriverError)" : "succeeded", launch_failed ? "failed (DriverError)" : "succeeded");
  // Outputs of a refused call were not written; then everything works again
  // (a failed load is not remembered as loaded).
  if (load_failed) check_untouched(fresh_hc, fresh_dc, "after the failed module load");
  check_forward_works(fresh_hc, fresh_dc, "after memory was freed (fresh module)");
  check_forward_works(warm_hc, warm_dc, "after memory was freed (loaded module)");
}

}  // TEST_SUITE("gpu-faults")
