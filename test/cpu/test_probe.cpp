// The matrix-unit probe kernels compile with NVRTC for every unit the
// m16n8k16-capable archs execute (sm_80 and sm_90 run m16n8k8 and m8n8k4 too).
#include <doctest/doctest.h>

#include <string>

#include "gen/emit.hpp"
#include "runtime/nvrtc.hpp"

using namespace flashgen;

TEST_CASE("probe kernels compile for every unit and dtype") {
  if (!rt::nvrtc_available()) {
    MESSAGE("NVRTC not available: probe compile skipped");
    return;
  }
  for (int arch : {80, 90}) {
    for (MatrixUnit unit : {MatrixUnit::m16n8k16, MatrixUnit::m16n8k8, MatrixUnit::m8n8k4}) {
      for (DType dtype : {DType::f16, DType::bf16}) {
        if (unit == MatrixUnit::m8n8k4 && dtype == DType::bf16) continue;  // m8n8k4 is f16 only
        const std::string src = gen::emit_probe(unit, dtype, arch);
        const std::string name = gen::probe_kernel_name(unit, dtype);
        CAPTURE(name);
        CHECK(src.find("extern \"C\" __global__") != std::string::npos);
        CHECK(src.find("@@") == std::string::npos);
        const auto out = rt::compile_to_cubin(src, name, rt::nvrtc_options(arch));
        REQUIRE(out.cubin.size() > 4);
        CHECK(std::string(out.cubin.data(), 4) == "\x7f" "ELF");
        CHECK(out.log.find("0 bytes spill stores") != std::string::npos);
      }
    }
  }
  CHECK(gen::unit_flops_per_instruction(MatrixUnit::m16n8k16) == 4096);
  CHECK(gen::unit_flops_per_instruction(MatrixUnit::m16n8k8) == 2048);
  CHECK(gen::unit_flops_per_instruction(MatrixUnit::m8n8k4) == 2048);
}
