// Compile claims (issue 11, item 11), CPU tier: a per-key flock on
// "<kernel>-<key16>.lock" in the writable cache directory makes processes and
// threads that ask for the same uncompiled kernel at once compile it once.
//   - a process that waits for the claim loads the holder's entry and runs no
//     NVRTC compile;
//   - a holder killed with SIGKILL (idle, or in the middle of a real compile)
//     blocks nobody, and what it leaves never loads as an entry;
//   - a lock file left by a crash is taken at once, removed after use and by
//     prune; a held one survives prune and clear; lock files are not entries;
//   - a holder that never lets go (stopped) is waited for only up to the
//     limit, with one line naming its pid;
//   - two threads of one process exclude each other;
//   - a memory-only cache, or a lock file that cannot be created, takes no
//     claim and still compiles.
// The 8-process race in test_cache_reliability.cpp counts the NVRTC compiles
// of all processes (one per kernel).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/cache.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;
using flashgen::test::EnvGuard;
using flashgen::test::ScopedCache;
using flashgen::test::StderrCapture;
using flashgen::test::TempDir;

namespace {

using flashgen::test::contains;

size_t lock_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& name : test::list_dir(dir)) n += rt::is_lock_file_name(name) ? 1 : 0;
  return n;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits up to `seconds` for `path` to exist.
bool wait_for_file(const std::string& path, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) < seconds) {
    if (std::filesystem::exists(path)) return true;
    ::usleep(2000);
  }
  return false;
}

// Exit status of `pid`, waiting at most `seconds`; -1 if it did not exit by then
// (it is then killed) or was killed by a signal.
int wait_exit_within(pid_t pid, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0 || since(t0) > seconds) break;
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// A child that takes the claim of (name, key), creates `held`, and then sleeps
// until killed.
pid_t spawn_holder(const std::string& name, const std::string& key, const std::string& held) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  rt::CacheClaim claim = rt::cache_claim(name, key);
  if (!claim.held()) ::_exit(3);
  test::write_bytes(held, {'1'});
  for (;;) ::pause();
}

// Restores the claim wait limit on exit.
struct WaitLimit {
  explicit WaitLimit(double s) : old(rt::cache_claim_wait_limit_s()) { rt::set_cache_claim_wait_limit_s(s); }
  ~WaitLimit() { rt::set_cache_claim_wait_limit_s(old); }
  double old;
};

}  // namespace

TEST_CASE("cache claim: a process that waits for the claim loads the holder's entry instead of compiling") {
  REQUIRE(rt::nvrtc_available());
  const KernelSpec spec = test::simple_spec(80, 16);
  const rt::CompileInputs in = rt::compile_inputs(spec);
  CompiledKernel made;
  {
    ScopedCache scratch;  // the entry the holder will store, compiled elsewhere first
    made = compile(spec);
  }
  TempDir work("flashgen-claim");
  ScopedCache cache;
  const std::string go = work.path() + "/go";
  // Forked before the claim is taken, so that the child does not inherit it.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    try {
      if (!wait_for_file(go, 60)) ::_exit(90);
      const uint64_t before = rt::nvrtc_compile_count();
      const CompiledKernel k = compile(spec);
      if (!k.from_cache) code |= 1;
      if (rt::nvrtc_compile_count() != before) code |= 2;
      if (k.cubin != made.cubin) code |= 4;
    } catch (...) {
      code = 99;
    }
    ::_exit(code);
  }
  rt::CacheClaim claim = rt::cache_claim(made.name, made.key);
  REQUIRE(claim.held());
  CHECK(claim.path() == rt::cache_entry_path(cache.path(), made.name, made.key, ".lock"));
  test::write_bytes(go, {'g'});
  ::usleep(1500 * 1000);  // the child looks the kernel up, misses and waits for the claim
  int status = 0;
  const pid_t early = ::waitpid(pid, &status, WNOHANG);
  CHECK_MESSAGE(early == 0, "the child finished while the claim was held: it did not wait for it");
  rt::cache_store(made.name, rt::current_identity(made.key, spec.arch, in.nvrtc), made.cubin, in.source,
                  made.compile_log);
  claim.release();
  CHECK_FALSE(claim.held());
  const int rc = early == pid ? (WIFEXITED(status) ? WEXITSTATUS(status) : -1) : wait_exit_within(pid, 120);
  INFO("child exit code (1: compiled instead of loading, 2: ran NVRTC, 4: other bytes): ", rc);
  CHECK(rc == 0);
  CHECK(lock_files(cache.path()) == 0);
}

TEST_CASE("cache claim: a holder killed with SIGKILL blocks nobody") {
  REQUIRE(rt::nvrtc_available());
  WaitLimit limit(120);
  TempDir work("flashgen-claim");
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(80, 32);
  const rt::CompileInputs in = rt::compile_inputs(spec);
  const std::string held = work.path() + "/held";
  const pid_t pid = spawn_holder(in.name, in.key, held);
  REQUIRE(pid > 0);
  REQUIRE(wait_for_file(held, 60));

  std::atomic<bool> done{false};
  CompiledKernel k;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread asker([&] {
    try {
      k = compile(spec);
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });
  ::usleep(800 * 1000);
  CHECK_MESSAGE(!done.load(), "compile() did not wait for the claim of a live holder");
  kill_and_reap(pid);
  asker.join();
  const double waited = since(t0);
  INFO("error: ", error);
  REQUIRE(error.empty());
  CHECK_FALSE(k.from_cache);
  CHECK(test::is_elf(k.cubin));
  CHECK(waited < 60);  // released by the kernel at the kill, not by the wait limit
  CHECK(lock_files(cache.path()) == 0);
  for (const rt::EntryReport& r : rt::cache_scan(cache.path(), false, rt::loaded_nvrtc_for_arch())) {
    INFO(r.path, ": ", r.problem);
    CHECK(r.valid);
  }
  MESSAGE("compile() waited for a holder, which was killed after 0.8 s; done after " << waited << " s");
}

TEST_CASE("cache claim: processes killed with SIGKILL in the middle of a compile leave nothing that blocks or loads") {
  REQUIRE(rt::nvrtc_available());
  WaitLimit limit(120);
  ScopedCache cache;
  const std::vector<KernelSpec> specs = {test::simple_spec(80, 64), test::simple_spec(90, 64)};
  std::mt19937 rng(2024);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    const KernelSpec& spec = specs[static_cast<size_t>(round) % specs.size()];
    // Remove a finished entry so that each round really compiles.
    for (const char* ext : {".cubin", ".cu", ".log"}) {
      const rt::CompileInputs in = rt::compile_inputs(spec);
      ::unlink(rt::cache_entry_path(cache.path(), in.name, in.key, ext).c_str());
    }
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        (void)compile(spec);
      } catch (...) {
      }
      for (;;) ::pause();  // hold nothing more, wait to be killed
    }
    ::usleep(static_cast<useconds_t>(std::uniform_int_distribution<int>(0, 1500000)(rng)));
    kill_and_reap(pid);
    const auto t0 = std::chrono::steady_clock::now();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK(since(t0) < 60);
    CHECK(test::is_elf(k.cubin));
    CHECK_FALSE(contains(log, "recompiling"));  // a killed writer never leaves a bad entry
    CHECK(lock_files(cache.path()) == 0);       // a lock file it left was taken and removed
  }
  for (const rt::EntryReport& r : rt::cache_scan(cache.path(), false, rt::loaded_nvrtc_for_arch())) {
    INFO(r.path, ": ", r.problem);
    CHECK(r.valid);
  }
}

TEST_CASE("cache claim: a lock file left by a crash is taken at once; prune removes only unheld ones") {
  ScopedCache cache;
  const std::string name = "flashgen_fwd_claimed";
  const std::string key = rt::cache_key("claimed source", rt::nvrtc_options(80), 80, rt::NvrtcVersion{1, 0});
  const std::string lock = rt::cache_entry_path(cache.path(), name, key, ".lock");
  CHECK(rt::is_lock_file_name(lock.substr(lock.rfind('/') + 1)));
  CHECK_FALSE(rt::is_lock_file_name(name + "-" + key.substr(0, 16) + ".cubin"));
  CHECK_FALSE(rt::is_temp_file_name(lock.substr(lock.rfind('/') + 1)));

  // What a holder killed with SIGKILL leaves: the file, with its pid, unlocked.
  test::write_bytes(lock, {'1', '2', '3', '\n'});
  {
    const auto t0 = std::chrono::steady_clock::now();
    rt::CacheClaim claim = rt::cache_claim(name, key);
    CHECK(claim.held());
    CHECK(since(t0) < 1.0);
    const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
    CHECK(test::read_bytes(lock) == std::vector<char>(pid.begin(), pid.end()));
  }
  CHECK_FALSE(std::filesystem::exists(lock));  // released: the name is gone

  // Lock files are not entries.
  test::write_bytes(lock, {'1', '\n'});
  rt::cache_store(name, key, std::vector<char>{'\x7f', 'E', 'L', 'F', 1}, "source", "log");
  CHECK(rt::cache_scan(cache.path(), false, rt::loaded_nvrtc_for_arch()).size() == 1);

  rt::PruneOptions po;
  po.dry_run = true;
  rt::PruneResult pr = rt::cache_prune(cache.path(), rt::loaded_nvrtc_for_arch(), po);
  CHECK(std::count(pr.removed.begin(), pr.removed.end(), lock) == 1);
  CHECK(std::filesystem::exists(lock));
  po.dry_run = false;
  pr = rt::cache_prune(cache.path(), rt::loaded_nvrtc_for_arch(), po);
  CHECK(pr.errors.empty());
  CHECK(std::count(pr.removed.begin(), pr.removed.end(), lock) == 1);
  CHECK_FALSE(std::filesystem::exists(lock));
  CHECK(rt::cache_lookup(name, key).has_value());  // the entry itself stays

  // A held claim (a compile in progress) survives prune and clear.
  rt::CacheClaim claim = rt::cache_claim(name, key);
  REQUIRE(claim.held());
  po.all = true;
  pr = rt::cache_prune(cache.path(), rt::loaded_nvrtc_for_arch(), po);
  CHECK(pr.errors.empty());
  CHECK(std::count(pr.removed.begin(), pr.removed.end(), lock) == 0);
  CHECK(std::filesystem::exists(lock));
  CHECK_FALSE(rt::cache_lookup(name, key).has_value());  // clear removed the entry
  claim.release();
  CHECK(test::list_dir(cache.path()).empty());
}

TEST_CASE("cache claim: a holder that never lets go is waited for only up to the limit") {
  WaitLimit limit(0.5);
  TempDir work("flashgen-claim");
  ScopedCache cache;
  const std::string name = "flashgen_fwd_stuck";
  const std::string key = rt::cache_key("stuck source", rt::nvrtc_options(80), 80, rt::NvrtcVersion{1, 0});
  const std::string held = work.path() + "/held";
  const pid_t pid = spawn_holder(name, key, held);
  REQUIRE(pid > 0);
  REQUIRE(wait_for_file(held, 60));
  ::kill(pid, SIGSTOP);  // a stopped holder: alive, so its lock stays
  StderrCapture err;
  const auto t0 = std::chrono::steady_clock::now();
  rt::CacheClaim claim = rt::cache_claim(name, key);
  const double waited = since(t0);
  const std::string log = err.stop();
  kill_and_reap(pid);
  INFO("stderr: ", log);
  CHECK_FALSE(claim.held());
  CHECK(waited >= 0.5);
  CHECK(waited < 10);
  CHECK(claim.waited_s() >= 0.5);
  CHECK(contains(log, " s for process " + std::to_string(pid) + ", which holds the claim"));
  CHECK(contains(log, "compiling it here as well"));
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
}

TEST_CASE("cache claim: two threads of one process exclude each other") {
  ScopedCache cache;
  const std::string name = "flashgen_fwd_threads";
  const std::string key = rt::cache_key("threads source", rt::nvrtc_options(80), 80, rt::NvrtcVersion{1, 0});
  rt::CacheClaim first = rt::cache_claim(name, key);
  REQUIRE(first.held());
  std::atomic<bool> got{false};
  double waited = 0;
  std::thread second([&] {
    rt::CacheClaim c = rt::cache_claim(name, key);
    waited = c.waited_s();
    got = c.held();
  });
  ::usleep(300 * 1000);
  CHECK_FALSE(got.load());
  first.release();
  second.join();
  CHECK(got.load());
  CHECK(waited >= 0.3);
  CHECK(lock_files(cache.path()) == 0);
}

TEST_CASE("cache claim: no claim without a usable directory or lock file; compiles still work") {
  REQUIRE(rt::nvrtc_available());
  const KernelSpec spec = test::simple_spec(80, 16);
  const rt::CompileInputs in = rt::compile_inputs(spec);
  SUBCASE("memory-only cache") {
    TempDir root("flashgen-claim");
    const std::string dir = root.path() + "/cache";
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);  // writable by others: not used
    EnvGuard env("FLASHGEN_CACHE_DIR", dir);
    EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
    rt::cache_reset_for_tests();
    StderrCapture err;
    REQUIRE(rt::cache_dir().empty());
    const rt::CacheClaim claim = rt::cache_claim(in.name, in.key);
    CHECK_FALSE(claim.held());
    CHECK(claim.waited_s() == 0);
    const CompiledKernel k = compile(spec);
    CHECK(test::is_elf(k.cubin));
    CHECK(k.cache_path.empty());
    err.stop();
    CHECK(test::list_dir(dir).empty());
    rt::cache_reset_for_tests();
  }
  SUBCASE("the lock file cannot be created") {
    ScopedCache cache;
    const std::string lock = rt::cache_entry_path(cache.path(), in.name, in.key, ".lock");
    REQUIRE(::mkdir(lock.c_str(), 0700) == 0);  // a directory in its place: open fails
    const auto t0 = std::chrono::steady_clock::now();
    const rt::CacheClaim claim = rt::cache_claim(in.name, in.key);
    CHECK_FALSE(claim.held());
    CHECK(since(t0) < 1.0);
    const CompiledKernel k = compile(spec);
    CHECK(test::is_elf(k.cubin));
    CHECK(k.cache_path == rt::cache_entry_path(cache.path(), in.name, in.key));
    CHECK(std::filesystem::is_directory(lock));  // not ours to remove
  }
}
