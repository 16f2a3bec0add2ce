// GPU tier of the cache concurrency test (issue 6, item 1): 8 processes x 4
// threads launch the same 4 kernels at once from one empty cache directory.
// Every launch must match the float64 reference (poisoned outputs, every
// element checked, gpu_util.hpp's run_case), each kernel must end as one whole
// entry, and no temp file may be left. Skipped without a GPU.
//
// The processes are this binary re-executed with a filter; the "cache gpu
// child" case runs only with FLASHGEN_TEST_CACHE_GPU_CHILD set.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cache.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "test/gpu/gpu_util.hpp"

namespace {

using namespace fgtest;

bool in_child() { return std::getenv("FLASHGEN_TEST_CACHE_GPU_CHILD") != nullptr; }

// Four small cases with four different kernels (head dims, masks, dtypes).
std::vector<Case> race_cases() {
  std::vector<Case> v;
  for (int i = 0; i < 4; ++i) {
    Case c;
    c.group = "cache race";
    c.dtype = i % 2 ? DType::bf16 : DType::f16;
    c.head_dim = c.head_dim_v = i < 2 ? 64 : 96;
    c.mask = i == 1 ? MaskKind::causal_bottom_right : i == 2 ? MaskKind::causal_top_left : MaskKind::none;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 77;
    c.seqlen_k = 133;
    c.lse = i != 3;
    v.push_back(c);
  }
  return v;
}

std::string read_text(const std::string& path) {
  const std::vector<char> b = flashgen::test::read_bytes(path);
  return std::string(b.begin(), b.end());
}

}  // namespace

TEST_CASE("cache gpu child: race" * doctest::skip(!in_child() || !gpu_present())) {
  const std::string go = std::getenv("RACE_GO");
  for (int i = 0; i < 60000 && !std::filesystem::exists(go); ++i) ::usleep(1000);
  const std::vector<Case> cases = race_cases();
  constexpr int kThreads = 4;
  std::vector<std::vector<CaseResult>> results(kThreads);
  std::vector<std::thread> pool;
  rt::ensure_context();
  CUcontext ctx = nullptr;
  rt::check(drv().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      rt::check(drv().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      for (size_t i = 0; i < cases.size(); ++i) results[t].push_back(run_case(cases[(t + i) % cases.size()]));
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (const CaseResult& r : results[t]) {
      std::printf("  thread %d: %s\n", t, r.line.c_str());
      for (const std::string& e : r.errors) std::printf("      %s\n", e.c_str());
      CHECK(r.ok);
      CHECK(r.launched);
    }
}

TEST_CASE("cache: 8 processes x 4 threads launch the same 4 cold kernels from one empty cache" *
          doctest::skip(!gpu_present() || in_child())) {
  flashgen::test::TempDir work("flashgen-gpu-race");
  const std::string cache = work.path() + "/cache";
  const std::string go = work.path() + "/go";
  constexpr int kProcesses = 8;
  // The children run the device's own matrix unit only: the other units are
  // selected through FLASHGEN_PROFILE, a process-wide setting the 4 threads of a
  // child would race on, and this test is about the cache, not the units.
  const std::string native_unit = units().front().name;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    const std::string log = work.path() + "/log-" + std::to_string(p);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv("FLASHGEN_TEST_CACHE_GPU_CHILD", "1", 1);
      ::setenv("FLASHGEN_CACHE_DIR", cache.c_str(), 1);
      ::unsetenv("FLASHGEN_CACHE_PATH");
      ::unsetenv("FLASHGEN_TUNE_FILE");
      ::setenv("RACE_GO", go.c_str(), 1);
      ::setenv("FLASHGEN_TEST_UNITS", native_unit.c_str(), 1);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const char* argv[] = {"flashgen_tests_gpu", "--test-case=cache gpu child: race", "--no-version", nullptr};
      ::execv("/proc/self/exe", const_cast<char* const*>(argv));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  flashgen::test::write_bytes(go, {'g', 'o'});
  const auto t0 = std::chrono::steady_clock::now();
  for (int p = 0; p < kProcesses; ++p) {
    int status = 0;
    REQUIRE(::waitpid(pids[static_cast<size_t>(p)], &status, 0) == pids[static_cast<size_t>(p)]);
    const std::string log = read_text(work.path() + "/log-" + std::to_string(p));
    INFO("process ", p, " output:\n", log);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(log.find("1 passed") != std::string::npos);  // the child really ran (not skipped)
  }
  std::printf("  8 processes x 4 threads x 4 kernels from a cold cache: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  size_t cubins = 0;
  for (const auto& name : flashgen::test::list_dir(cache)) {
    INFO("file: ", name);
    CHECK_FALSE(rt::is_temp_file_name(name));
    cubins += name.size() > 6 && name.substr(name.size() - 6) == ".cubin" ? 1 : 0;
  }
  CHECK(cubins == 4);
  for (const auto& r : rt::cache_scan(cache, false, rt::loaded_nvrtc_for_arch())) {
    INFO(r.path, ": ", r.problem);
    CHECK(r.valid);
    CHECK(r.current);
  }
}
