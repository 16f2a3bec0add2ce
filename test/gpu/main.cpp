// Entry point of the GPU tier (flashgen_tests_gpu).
//
// Every GPU test case is registered with doctest::skip(!gpu_present()), so on a
// machine without a usable GPU all of them are skipped and doctest alone would
// exit 0, which ctest shows as "Passed". After a run in which nothing failed,
// this main therefore exits FLASHGEN_GPU_SKIP_CODE when no GPU is present;
// test/CMakeLists.txt sets the same number as the gpu test's SKIP_RETURN_CODE,
// so ctest reports the tier as skipped. A failure keeps doctest's status, and
// --help, --list-test-cases and the like exit as doctest says.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "flashgen/flashgen.hpp"

#ifndef FLASHGEN_GPU_SKIP_CODE
#error "test/CMakeLists.txt defines FLASHGEN_GPU_SKIP_CODE (the gpu test's SKIP_RETURN_CODE)"
#endif

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  if (!flashgen::gpu_available()) {
    std::printf("[flashgen gpu tier] no GPU: exit status %d, which ctest reports as skipped\n",
                FLASHGEN_GPU_SKIP_CODE);
    return FLASHGEN_GPU_SKIP_CODE;
  }
  return 0;
}
