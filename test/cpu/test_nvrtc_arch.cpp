// NVRTC per target arch (runtime/nvrtc.hpp): sm_70/72 compile with an NVRTC of
// CUDA 12 when the primary one (CUDA 13) does not target them, the cache key
// carries the NVRTC actually used, and FLASHGEN_NVRTC_LIBRARY naming an NVRTC
// that cannot target the arch is an error that says what is needed.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "flashgen/flashgen.hpp"
#include "runtime/cache.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;

namespace {

KernelSpec volta_spec() {
  return test::spec_for(profile_for_arch(70), 70, DType::f16, 64, 64, MaskKind::causal_bottom_right,
                        BiasKind::none, true);
}

}  // namespace

TEST_CASE("nvrtc: sm_70 compiles with an NVRTC that targets it, and its version is in the cache key") {
  REQUIRE(rt::nvrtc_available());
  if (!rt::nvrtc_available_for(70)) {
    MESSAGE("no NVRTC on this machine targets sm_70 (install nvidia-cuda-nvrtc-cu12); test skipped");
    try {
      (void)rt::nvrtc_version_for(70);
      FAIL("nvrtc_version_for(70) should throw");
    } catch (const Unavailable& e) {
      const std::string msg = e.what();
      CHECK(msg.find("sm_70") != std::string::npos);
      CHECK(msg.find("nvidia-cuda-nvrtc-cu12") != std::string::npos);
      CHECK(msg.find("FLASHGEN_NVRTC_LIBRARY") != std::string::npos);
    }
    return;
  }
  const rt::NvrtcVersion v70 = rt::nvrtc_version_for(70);
  const rt::NvrtcVersion v90 = rt::nvrtc_version_for(90);
  MESSAGE("sm_70: NVRTC " << v70.str() << " from " << rt::nvrtc_library_for(70) << "; sm_90: NVRTC " << v90.str()
                          << " from " << rt::nvrtc_library_for(90));
  CHECK(v70.major == 12);
  CHECK(v90 == rt::nvrtc_version());  // the primary NVRTC serves what it targets
  if (rt::nvrtc_version().major >= 13) CHECK(rt::nvrtc_library_for(70) != rt::nvrtc_library());

  test::ScopedCache cache;
  const KernelSpec spec = volta_spec();
  const CompiledKernel k = compile(spec);
  CHECK(test::is_elf(k.cubin));
  CHECK_FALSE(k.from_cache);
  CHECK(k.compile_log.find("for 'sm_70'") != std::string::npos);
  const std::string source = generate(spec);
  CHECK(k.key == rt::cache_key(source, rt::nvrtc_options(70), 70, v70));
  CHECK(k.key != rt::cache_key(source, rt::nvrtc_options(70), 70, rt::nvrtc_version()));
  CHECK(compile(spec).from_cache);
}

// Runs in a child process: the NVRTC choice is made once per process.
TEST_CASE("nvrtc: FLASHGEN_NVRTC_LIBRARY that cannot target sm_70 is an error naming the NVRTC needed") {
  if (const char* marker = std::getenv("FLASHGEN_TEST_NVRTC_ARCH_CHILD")) {
    REQUIRE(rt::nvrtc_available());
    REQUIRE(rt::nvrtc_version().major >= 13);
    CHECK_FALSE(rt::nvrtc_available_for(70));
    try {
      (void)compile(volta_spec());
      FAIL("compile for sm_70 should throw");
    } catch (const Unavailable& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find("FLASHGEN_NVRTC_LIBRARY=") != std::string::npos);
      CHECK(msg.find("cannot compile for sm_70") != std::string::npos);
      CHECK(msg.find("CUDA 12") != std::string::npos);
      CHECK(msg.find("nvidia-cuda-nvrtc-cu12") != std::string::npos);
    }
    CHECK(rt::nvrtc_available_for(90));  // the same library still serves what it targets
    test::write_bytes(marker, {'o', 'k'});
    return;
  }
  REQUIRE(rt::nvrtc_available());
  if (rt::nvrtc_version().major < 13) {
    MESSAGE("the primary NVRTC is " << rt::nvrtc_version().str() << ", which targets sm_70; test skipped");
    return;
  }
  test::TempDir dir("flashgen-nvrtc-arch-child");
  const std::string marker = dir.path() + "/ok";
  const std::string lib = rt::nvrtc_library();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("FLASHGEN_TEST_NVRTC_ARCH_CHILD", marker.c_str(), 1);
    ::setenv("FLASHGEN_NVRTC_LIBRARY", lib.c_str(), 1);
    ::setenv("FLASHGEN_CACHE_DIR", dir.path().c_str(), 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    const char* argv[] = {"flashgen_tests_cpu", "--test-case=nvrtc: FLASHGEN_NVRTC_LIBRARY that cannot target*",
                          "--no-version", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::filesystem::exists(marker));
}

TEST_CASE("nvrtc: an arch that no NVRTC here targets is named as such, not as one CUDA 13 dropped") {
  REQUIRE(rt::nvrtc_available());
  if (rt::nvrtc_version().major < 13) {
    MESSAGE("the primary NVRTC is " << rt::nvrtc_version().str() << "; test skipped");
    return;
  }
  // sm_85 is no compute capability: neither CUDA 13's NVRTC nor CUDA 12's targets it.
  CHECK_FALSE(rt::nvrtc_available_for(85));
  try {
    (void)rt::nvrtc_version_for(85);
    FAIL("nvrtc_version_for(85) should throw");
  } catch (const Unavailable& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("no NVRTC on this machine compiles for sm_85") != std::string::npos);
    CHECK(msg.find("Check the arch") != std::string::npos);
    CHECK(msg.find("CUDA 13 dropped") == std::string::npos);
  }
}
