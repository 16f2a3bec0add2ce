// mma_probe: measures the achieved throughput of a profile's matrix-unit
// instruction (mma.sync) on the present GPU and prints it beside the
// profile's ceiling, SMs x FLOP per clock per SM x the clock the probe ran at.
//
//   mma_probe [--unit m16n8k16|m16n8k8|m8n8k4] [--dtype f16|bf16] [--iters N] [--repeats N]
//
// Defaults: the current device's profile's unit, f16. Needs a GPU; without one
// it says so and exits with status 2.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "gen/emit.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"

using namespace flashgen;

int main(int argc, char** argv) {
  CLI::App app{"Measure the achieved mma.sync throughput of a matrix unit on the present GPU"};
  std::string unit_name, dtype_name = "f16";
  int iters = 20000, repeats = 5;
  app.add_option("--unit", unit_name, "m16n8k16 | m16n8k8 | m8n8k4 (default: the device profile's unit)");
  app.add_option("--dtype", dtype_name, "operand dtype: f16 | bf16")->capture_default_str();
  app.add_option("--iters", iters, "loop iterations per thread")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed launches (median reported)")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const DType dtype = parse_dtype(dtype_name, "--dtype");
    DeviceInfo dev;
    try {
      dev = current_device();
    } catch (const Unavailable& e) {
      std::fprintf(stderr, "mma_probe: no GPU: %s\n", e.what());
      return 2;
    }
    const Profile& prof = profile_for_arch(dev.arch);
    const MatrixUnit unit = unit_name.empty() ? prof.matrix_unit.shape : parse_matrix_unit(unit_name, "--unit");
    const std::string src = gen::emit_probe(unit, dtype, dev.arch);
    const std::string name = gen::probe_kernel_name(unit, dtype);
    const auto out = rt::compile_to_cubin(src, name, rt::nvrtc_options(dev.arch));
    const rt::Driver& d = rt::driver();
    rt::ensure_context();
    CUmodule mod;
    CUfunction fn;
    rt::check(d.cuModuleLoadData(&mod, out.cubin.data()), "cuModuleLoadData");
    rt::check(d.cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction");
    const int threads = 256, blocks = dev.sm_count * 8;
    CUdeviceptr dout, dclk;
    rt::check(d.cuMemAlloc(&dout, sizeof(float) * threads * blocks), "cuMemAlloc");
    rt::check(d.cuMemAlloc(&dclk, 16), "cuMemAlloc");
    CUevent e0, e1;
    rt::check(d.cuEventCreate(&e0, 0), "cuEventCreate");
    rt::check(d.cuEventCreate(&e1, 0), "cuEventCreate");
    void* args[] = {&dout, &dclk, &iters};
    auto launch = [&] {
      rt::check(d.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr), "cuLaunchKernel");
    };
    launch();  // warm-up (also raises the clocks)
    launch();
    rt::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<double> ms_runs, ghz_runs;
    for (int r = 0; r < repeats; ++r) {
      rt::check(d.cuEventRecord(e0, nullptr), "cuEventRecord");
      launch();
      rt::check(d.cuEventRecord(e1, nullptr), "cuEventRecord");
      rt::check(d.cuEventSynchronize(e1), "cuEventSynchronize");
      float ms = 0;
      rt::check(d.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
      unsigned long long clk[2];
      rt::check(d.cuMemcpyDtoH(clk, dclk, sizeof clk), "cuMemcpyDtoH");
      ms_runs.push_back(ms);
      ghz_runs.push_back(clk[1] ? double(clk[0]) / double(clk[1]) : 0.0);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double ms = median(ms_runs), ghz = median(ghz_runs);
    const double flops = double(blocks) * (threads / 32) * double(iters) * gen::probe_chains() *
                         double(gen::unit_flops_per_instruction(unit));
    const double achieved = flops / (ms * 1e-3) / 1e12;
    const double ceiling = double(dev.sm_count) * double(prof.mma_flop_per_clock_per_sm) * ghz * 1e9 / 1e12;
    std::printf("device          %s (sm_%d, %d SMs)\n", dev.name.c_str(), dev.arch, dev.sm_count);
    std::printf("profile         %s (%s)\n", prof.name.c_str(), prof.source.c_str());
    std::printf("instruction     mma.sync.aligned.%s.row.col.f32.%s.%s.f32\n", std::string(to_string(unit)).c_str(),
                std::string(to_string(dtype)).c_str(), std::string(to_string(dtype)).c_str());
    std::printf("launch          %d blocks x %d threads, %d iterations x %d chains, median of %d\n", blocks, threads,
                iters, gen::probe_chains(), repeats);
    std::printf("SM clock        %.3f GHz (measured in the probe)\n", ghz);
    std::printf("time            %.3f ms\n", ms);
    std::printf("achieved        %.1f TFLOP/s\n", achieved);
    std::printf("profile ceiling %.1f TFLOP/s = %d SMs x %lld FLOP/clock/SM x %.3f GHz\n", ceiling, dev.sm_count,
                (long long)prof.mma_flop_per_clock_per_sm, ghz);
    std::printf("ratio           %.1f%% of the profile ceiling\n", 100.0 * achieved / ceiling);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mma_probe: %s\n", e.what());
    return 1;
  }
}
