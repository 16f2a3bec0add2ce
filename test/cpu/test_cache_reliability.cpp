// Cache reliability (issue 6, items 1-4) and the layered cache's awkward
// places (issue 5, item 1), CPU tier:
//   - 8 processes x 4 threads ask at once for the same 4 cold kernels in one
//     empty directory: all succeed with the same bytes, the 32 threads run 4
//     NVRTC compiles in all (the per-key claims, test_cache_claim.cpp), each
//     kernel ends as one valid entry, no temp or lock file is left;
//   - writers killed with SIGKILL at random points never leave anything that
//     loads as a valid entry; prune then removes their temp files;
//   - trust: a cache directory writable by others, entry files not owned by
//     this user or writable by others, bundles writable by others are not
//     loaded (one notice saying why and how to fix it);
//   - a read-only bundle with an unwritable user directory, a non-root user, a
//     missing home directory and a read-only file system all work;
//   - prune and clear keep what is current and never touch other files.
// Child processes are this test binary re-executed with a filter (the "cache
// child:" cases run only with FLASHGEN_TEST_CACHE_CHILD set) or plain forks.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <map>
#include <random>
#include <set>
#include <sstream>
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
using flashgen::test::ends_with;
using flashgen::test::ScopedCache;
using flashgen::test::StderrCapture;
using flashgen::test::TempDir;

namespace {

using flashgen::test::contains;

const char* child_mode() { return std::getenv("FLASHGEN_TEST_CACHE_CHILD"); }

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

std::vector<std::string> files_with(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& n : test::list_dir(dir))
    if (ends_with(n, suffix)) out.push_back(n);
  return out;
}

size_t temp_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& name : test::list_dir(dir)) n += rt::is_temp_file_name(name) ? 1 : 0;
  return n;
}

// Every .cubin in `dir` is a whole, valid entry whose file name matches its key.
void check_entries_valid(const std::string& dir) {
  for (const rt::EntryReport& r : rt::cache_scan(dir, false, rt::loaded_nvrtc_for_arch())) {
    INFO("entry: ", r.path, ": ", r.problem);
    CHECK(r.valid);
  }
}

// Runs this binary with `filter` and `env` (NAME=value) in a child; returns
// its exit status (-1 when it did not exit). Output goes to `log`.
pid_t spawn_self(const std::string& filter, const std::vector<std::string>& env, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (const auto& kv : env) {
    const size_t eq = kv.find('=');
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  const std::string tc = "--test-case=" + filter;
  const char* argv[] = {"flashgen_tests_cpu", tc.c_str(), "--no-version", nullptr};
  ::execv("/proc/self/exe", const_cast<char* const*>(argv));
  ::_exit(127);
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  const std::vector<char> b = test::read_bytes(path);
  return std::string(b.begin(), b.end());
}

// The four cold kernels of the race: small, for four (arch, head_dim) pairs.
std::vector<KernelSpec> race_specs() {
  return {test::simple_spec(80, 16), test::simple_spec(90, 16), test::simple_spec(80, 32),
          test::simple_spec(90, 32, MaskKind::causal_bottom_right)};
}

// A whole entry file of `dir` for `spec` is loadable with compile()'s identity.
std::optional<rt::CacheHit> lookup(const KernelSpec& spec) {
  const rt::CompileInputs in = rt::compile_inputs(spec);
  return rt::cache_lookup(in.name, rt::current_identity(in.key, spec.arch, in.nvrtc));
}

// Copies the three files of a compiled kernel's entry into `dir`.
void copy_entry(const CompiledKernel& k, const std::string& from, const std::string& to) {
  for (const char* ext : {".cubin", ".cu", ".log"}) {
    std::filesystem::copy_file(rt::cache_entry_path(from, k.name, k.key, ext), rt::cache_entry_path(to, k.name, k.key, ext),
                               std::filesystem::copy_options::overwrite_existing);
    ::chmod(rt::cache_entry_path(to, k.name, k.key, ext).c_str(), 0644);
  }
}

}  // namespace

// ---- 1. concurrency -----------------------------------------------------------

TEST_CASE("cache child: race" * doctest::skip(child_mode() == nullptr || std::string(child_mode()) != "race")) {
  // Wait for the parent's go (every sibling is started by then).
  const std::string go = std::getenv("RACE_GO");
  for (int i = 0; i < 60000 && !std::filesystem::exists(go); ++i) ::usleep(1000);
  const std::vector<KernelSpec> specs = race_specs();
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<char>>> got(kThreads, std::vector<std::vector<char>>(specs.size()));
  std::vector<std::string> errors(kThreads);
  const uint64_t compiles_before = rt::nvrtc_compile_count();
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (size_t i = 0; i < specs.size(); ++i) {
          const size_t k = (t + i) % specs.size();  // each thread starts with another kernel
          const CompiledKernel ck = compile(specs[k]);
          // "Load" the bytes the way load_kernel gets them: from the cache.
          const auto hit = lookup(specs[k]);
          if (!hit) throw std::runtime_error("no cache entry after compile() of " + ck.name);
          if (hit->cubin != ck.cubin) throw std::runtime_error("cache entry differs from compile() for " + ck.name);
          got[t][k] = ck.cubin;
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  std::ofstream(std::getenv("RACE_COMPILES")) << rt::nvrtc_compile_count() - compiles_before << '\n';
  std::ofstream out(std::getenv("RACE_RESULT"));
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(errors[t].empty());
    for (size_t k = 0; k < specs.size(); ++k) {
      CHECK(test::is_elf(got[t][k]));
      CHECK(got[t][k] == got[0][k]);
    }
  }
  for (size_t k = 0; k < specs.size(); ++k)
    out << specs[k].kernel_name() << ' ' << std::hash<std::string>{}(std::string(got[0][k].begin(), got[0][k].end()))
        << '\n';
}

TEST_CASE("cache: 8 processes x 4 threads asking for the same 4 cold kernels at once") {
  REQUIRE(rt::nvrtc_available());
  TempDir work("flashgen-race");
  const std::string cache = work.path() + "/cache";
  const std::string go = work.path() + "/go";
  constexpr int kProcesses = 8;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    pids.push_back(spawn_self("cache child: race",
                              {"FLASHGEN_TEST_CACHE_CHILD=race", "FLASHGEN_CACHE_DIR=" + cache, "FLASHGEN_CACHE_PATH=",
                               "RACE_GO=" + go, "RACE_RESULT=" + work.path() + "/result-" + std::to_string(p),
                               "RACE_COMPILES=" + work.path() + "/compiles-" + std::to_string(p)},
                              work.path() + "/log-" + std::to_string(p)));
  }
  test::write_bytes(go, {'g', 'o'});
  const auto t0 = std::chrono::steady_clock::now();
  std::string first;
  uint64_t compiles = 0;  // NVRTC compiles of all processes together
  for (int p = 0; p < kProcesses; ++p) {
    CAPTURE(p);
    const int rc = wait_exit(pids[static_cast<size_t>(p)]);
    INFO("child output:\n", read_text(work.path() + "/log-" + std::to_string(p)));
    CHECK(rc == 0);
    const std::string result = read_text(work.path() + "/result-" + std::to_string(p));
    CHECK(count_lines(result) == 4);
    if (p == 0) first = result;
    CHECK(result == first);  // every process got the same cubins
    compiles += std::stoull("0" + read_text(work.path() + "/compiles-" + std::to_string(p)));
  }
  // The claims: each kernel compiled by one thread of one process, the others
  // waited and loaded its entry.
  CHECK(compiles == 4);
  MESSAGE("8 x 4 race over 4 cold kernels: "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s, " << compiles
          << " NVRTC compiles in all processes");
  // Each kernel is exactly one entry (cubin + source + log), whole; nothing else.
  CHECK(files_with(cache, ".cubin").size() == 4);
  CHECK(files_with(cache, ".cu").size() == 4);
  CHECK(files_with(cache, ".log").size() == 4);
  CHECK(test::list_dir(cache).size() == 12);
  CHECK(temp_files(cache) == 0);
  const auto reports = rt::cache_scan(cache, false, rt::loaded_nvrtc_for_arch());
  REQUIRE(reports.size() == 4);
  for (const auto& r : reports) {
    INFO(r.path, ": ", r.problem);
    CHECK(r.valid);
    CHECK(r.current);
  }
}

// ---- 2. crashes -----------------------------------------------------------------

TEST_CASE("cache: writers killed with SIGKILL at random points never leave a loadable partial entry") {
  ScopedCache cache;
  REQUIRE_FALSE(rt::cache_dir().empty());
  struct Item {
    std::string name, key;
    std::vector<char> payload;
  };
  std::vector<Item> items;
  for (int i = 0; i < 3; ++i) {
    Item it;
    it.name = "flashgen_fwd_killed_" + std::to_string(i);
    it.key = rt::cache_key("killed source " + std::to_string(i), rt::nvrtc_options(80), 80, rt::NvrtcVersion{1, 0});
    it.payload.resize(static_cast<size_t>(1 + i) << 20);  // 1, 2, 3 MiB: writes take a while
    std::mt19937 rng(static_cast<unsigned>(i));
    for (char& c : it.payload) c = static_cast<char>(rng());
    it.payload[0] = '\x7f';
    items.push_back(std::move(it));
  }
  std::mt19937 rng(12345);
  constexpr int kRounds = 40;
  for (int round = 0; round < kRounds; ++round) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Write forever, round-robin, until killed.
      for (size_t n = static_cast<size_t>(round);; ++n) {
        const Item& it = items[n % items.size()];
        rt::cache_store(it.name, it.key, it.payload, "source", "log");
      }
    }
    ::usleep(static_cast<useconds_t>(std::uniform_int_distribution<int>(0, 20000)(rng)));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    // Whatever is there: an entry loads whole or not at all.
    StderrCapture err;
    for (const Item& it : items) {
      const auto hit = rt::cache_lookup(it.name, it.key);
      if (hit) CHECK(hit->cubin == it.payload);
    }
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK(log.empty());  // never a bad entry under a .cubin name
  }
  check_entries_valid(cache.path());
  MESSAGE(kRounds << " writers killed at random points; " << temp_files(cache.path())
                  << " temp files left behind (never loaded); prune removes them");
  // Temp files of dead writers are never loaded, and prune removes them.
  rt::PruneOptions po;
  po.temp_min_age_s = 0;
  const rt::PruneResult pr = rt::cache_prune(cache.path(), rt::loaded_nvrtc_for_arch(), po);
  CHECK(pr.errors.empty());
  CHECK(temp_files(cache.path()) == 0);
  for (const Item& it : items) {
    const auto hit = rt::cache_lookup(it.name, it.key);
    if (hit) CHECK(hit->cubin == it.payload);
  }
  check_entries_valid(cache.path());
}

// ---- 3. trust -------------------------------------------------------------------

TEST_CASE("cache: a cache directory writable by other users is not used (one warning, how to fix it)") {
  for (mode_t mode : {mode_t{0777}, mode_t{0775}, mode_t{0722}}) {
    CAPTURE(mode);
    TempDir root("flashgen-trust");
    const std::string dir = root.path() + "/cache";
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    // A valid entry is already there...
    const KernelSpec spec = test::simple_spec(80, 16);
    CompiledKernel good;
    {
      EnvGuard env("FLASHGEN_CACHE_DIR", dir);
      EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
      rt::cache_reset_for_tests();
      good = compile(spec);
      REQUIRE_FALSE(good.cache_path.empty());
    }
    // ...but the directory is opened to others: nothing in it is loaded.
    REQUIRE(::chmod(dir.c_str(), mode) == 0);
    EnvGuard env("FLASHGEN_CACHE_DIR", dir);
    EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
    rt::cache_reset_for_tests();
    const uint64_t before = rt::nvrtc_compile_count();
    StderrCapture err;
    const CompiledKernel a = compile(spec);
    const CompiledKernel b = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK(rt::cache_dir().empty());
    CHECK_FALSE(a.from_cache);       // not loaded from the untrusted directory
    CHECK(a.cache_path.empty());     // nor written there
    CHECK(b.from_cache);             // memory
    CHECK(rt::nvrtc_compile_count() == before + 1);
    CHECK(count_lines(log) == 1);
    CHECK(contains(log, "flashgen: warning:"));
    CHECK(contains(log, dir));
    CHECK(contains(log, (mode & S_IWOTH) != 0 ? "writable by other users" : "writable by its group"));
    CHECK(contains(log, "chmod go-w " + dir));
    CHECK(contains(log, "memory only"));
    CHECK(test::read_bytes(good.cache_path) == rt::encode_cache_entry(
                                                   rt::current_identity(good.key, spec.arch,
                                                                        rt::nvrtc_version_for(spec.arch)),
                                                   good.cubin));  // untouched
    rt::cache_reset_for_tests();
  }
}

TEST_CASE("cache: a directory above the cache writable by every user without the sticky bit makes it untrusted") {
  TempDir root("flashgen-trust-up");
  const std::string open_dir = root.path() + "/open";
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  const std::string dir = open_dir + "/cache";
  EnvGuard env("FLASHGEN_CACHE_DIR", dir);
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  rt::cache_reset_for_tests();
  CHECK(rt::cache_dir().empty());
  const auto layers = rt::cache_layers();
  const auto user = std::find_if(layers.begin(), layers.end(),
                                 [](const rt::CacheLayer& l) { return l.kind == rt::CacheLayer::Kind::user; });
  REQUIRE(user != layers.end());
  CHECK_FALSE(user->usable);
  CHECK(contains(user->problem, "every user may write"));
  CHECK(contains(user->problem, open_dir));
  // With the sticky bit (as /tmp has), others cannot replace the cache: trusted.
  REQUIRE(::chmod(open_dir.c_str(), 01777) == 0);
  rt::cache_reset_for_tests();
  CHECK(rt::cache_dir() == dir);
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: entry files not owned by this user or writable by others are not loaded, then replaced") {
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(80, 16, MaskKind::causal_top_left);
  const CompiledKernel good = compile(spec);
  REQUIRE_FALSE(good.cache_path.empty());
  const std::vector<char> bytes = test::read_bytes(good.cache_path);

  SUBCASE("writable by group or others") {
    for (mode_t mode : {mode_t{0664}, mode_t{0646}}) {
      CAPTURE(mode);
      test::write_bytes(good.cache_path, bytes);
      REQUIRE(::chmod(good.cache_path.c_str(), mode) == 0);
      const uint64_t before = rt::nvrtc_compile_count();
      StderrCapture err;
      const CompiledKernel k = compile(spec);
      const std::string log = err.stop();
      INFO("stderr: ", log);
      CHECK_FALSE(k.from_cache);
      CHECK(rt::nvrtc_compile_count() == before + 1);
      CHECK(count_lines(log) == 1);
      CHECK(contains(log, "flashgen: cache entry " + good.cache_path + " is not trusted: writable by"));
      CHECK(contains(log, "chmod go-w"));
      struct stat st {};
      REQUIRE(::stat(good.cache_path.c_str(), &st) == 0);
      CHECK((st.st_mode & 022) == 0);  // replaced by a file of ours
      CHECK(compile(spec).from_cache);
    }
  }
  SUBCASE("owned by another user") {
    // Only root can give a file away; as anyone else the case is skipped.
    if (::geteuid() != 0 || ::chown(good.cache_path.c_str(), 65534, 65534) != 0) {
      MESSAGE("cannot chown a file to uid 65534 here (not root): the not-owned-by-you case is skipped");
      return;
    }
    const uint64_t before = rt::nvrtc_compile_count();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK_FALSE(k.from_cache);
    CHECK(k.cubin == good.cubin);
    CHECK(rt::nvrtc_compile_count() == before + 1);
    CHECK(count_lines(log) == 1);
    CHECK(contains(log, "is not trusted: owned by uid 65534, not by uid " + std::to_string(::geteuid())));
    CHECK(contains(log, "flashgen cache prune"));
    struct stat st {};
    REQUIRE(::stat(good.cache_path.c_str(), &st) == 0);
    CHECK(st.st_uid == ::geteuid());  // replaced by a file of ours
    CHECK(compile(spec).from_cache);
  }
  SUBCASE("a symbolic link") {
    const std::string elsewhere = cache.path() + "/elsewhere.bin";
    test::write_bytes(elsewhere, bytes);
    REQUIRE(::unlink(good.cache_path.c_str()) == 0);
    REQUIRE(::symlink(elsewhere.c_str(), good.cache_path.c_str()) == 0);
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK_FALSE(k.from_cache);
    CHECK(contains(log, "symbolic link"));
    struct stat st {};
    REQUIRE(::lstat(good.cache_path.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
  }
}

TEST_CASE("cache: bundles are trusted only when neither they nor their files are writable by others") {
  TempDir bundle("flashgen-bundle-trust");
  const KernelSpec spec = test::simple_spec(90, 16);
  CompiledKernel original;
  {
    ScopedCache producer;
    original = compile(spec);
    copy_entry(original, producer.path(), bundle.path());
  }
  ScopedCache user;
  EnvGuard bundles("FLASHGEN_CACHE_PATH", bundle.path());
  const std::string entry = rt::cache_entry_path(bundle.path(), original.name, original.key);

  SUBCASE("trusted") {
    rt::cache_reset_for_tests();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    CHECK(err.stop().empty());
    CHECK(k.from_cache);
    CHECK(k.cache_path == entry);
  }
  SUBCASE("directory writable by others") {
    REQUIRE(::chmod(bundle.path().c_str(), 0777) == 0);
    rt::cache_reset_for_tests();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const CompiledKernel again = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK_FALSE(k.from_cache);
    CHECK(k.cache_path == rt::cache_entry_path(user.path(), original.name, original.key));
    CHECK(again.cache_path == k.cache_path);
    CHECK(count_lines(log) == 1);
    CHECK(contains(log, "flashgen: bundle directory " + bundle.path()));
    CHECK(contains(log, "is not used"));
    CHECK(contains(log, "chmod go-w " + bundle.path()));
  }
  SUBCASE("entry file writable by others") {
    REQUIRE(::chmod(entry.c_str(), 0666) == 0);
    rt::cache_reset_for_tests();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK_FALSE(k.from_cache);
    CHECK(count_lines(log) == 1);
    CHECK(contains(log, "flashgen: bundle entry " + entry + " is not trusted: writable by"));
    CHECK(contains(log, "ignoring it"));
    CHECK(test::read_bytes(entry).size() > rt::kCacheHeaderSize);  // a bundle is never written
  }
  SUBCASE("owned by another user (allowed: bundles are typically root's, read by everyone)") {
    if (::geteuid() != 0 || ::chown(entry.c_str(), 65534, 65534) != 0) {
      MESSAGE("cannot chown a file to uid 65534 here (not root): sub-case skipped");
      return;
    }
    rt::cache_reset_for_tests();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    CHECK(err.stop().empty());
    CHECK(k.from_cache);
  }
  rt::cache_reset_for_tests();
}

// ---- layers: unwritable, non-root, no home, read-only file system -------------

namespace {

// Runs `body` in a forked child as a non-root user (uid/gid 65534 when this
// process is root; else as is), stderr into *err; returns the child's exit
// status (0 = every check passed; the body returns a failure count).
int run_unprivileged(const std::function<int()>& body, std::string* err) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    ::dup2(pipefd[1], 2);
    if (::geteuid() == 0) {
      const gid_t gid = 65534;
      if (::setgroups(1, &gid) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    }
    int failures = 100;
    try {
      failures = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child exception: %s\n", e.what());
      failures = 101;
    }
    std::fflush(stderr);
    ::_exit(std::min(failures, 99));
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  *err = text;
  return wait_exit(pid);
}

// A bundle of `specs` under `root` (dirs 0755, files 0644), and compiled kernels.
std::vector<CompiledKernel> make_bundle(const std::vector<KernelSpec>& specs, const std::string& bundle_dir) {
  std::vector<CompiledKernel> out;
  ScopedCache producer;
  rt::CacheOverride ov;
  ov.store_dir = bundle_dir;
  ov.bundles = std::vector<std::string>{};
  ov.bundle_mode = true;
  rt::cache_override(ov);
  for (const KernelSpec& s : specs) out.push_back(compile(s));
  rt::cache_reset_for_tests();
  return out;
}

}  // namespace

TEST_CASE("cache: a read-only bundle with an unwritable user directory, as a non-root user") {
  REQUIRE(rt::nvrtc_available());
  TempDir root("flashgen-ro");
  REQUIRE(::chmod(root.path().c_str(), 0755) == 0);
  const std::string bundle = root.path() + "/bundle";
  const std::vector<KernelSpec> in_bundle = {test::simple_spec(80, 16), test::simple_spec(90, 16)};
  const auto compiled = make_bundle(in_bundle, bundle);
  for (const auto& k : compiled) REQUIRE(k.cache_path.rfind(bundle + "/", 0) == 0);
  struct stat st {};
  REQUIRE(::stat(bundle.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);  // a bundle: readable by every user
  REQUIRE(::stat(compiled[0].cache_path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);

  // The user directory exists but this user cannot write it.
  const std::string user_dir = root.path() + "/user";
  REQUIRE(::mkdir(user_dir.c_str(), 0755) == 0);
  if (::geteuid() != 0) REQUIRE(::chmod(user_dir.c_str(), 0555) == 0);
  const KernelSpec not_in_bundle = test::simple_spec(80, 32);
  (void)rt::nvrtc_version_for(80);  // NVRTC loaded before the fork
  (void)rt::nvrtc_version_for(90);

  std::string err;
  const int rc = run_unprivileged(
      [&] {
        int failures = 0;
        auto expect = [&](bool ok, const char* what) {
          if (!ok) std::fprintf(stderr, "CHILD CHECK FAILED: %s\n", what), ++failures;
        };
        ::setenv("FLASHGEN_CACHE_PATH", bundle.c_str(), 1);
        ::setenv("FLASHGEN_CACHE_DIR", user_dir.c_str(), 1);
        rt::cache_reset_for_tests();
        expect(::access(user_dir.c_str(), W_OK) != 0, "the user directory is not writable for this user");
        const uint64_t before = rt::nvrtc_compile_count();
        for (size_t i = 0; i < in_bundle.size(); ++i) {
          const CompiledKernel k = compile(in_bundle[i]);
          expect(k.from_cache, "bundled kernel found without compiling");
          expect(k.cache_path == compiled[i].cache_path, "bundled kernel read from the bundle");
          expect(k.cubin == compiled[i].cubin, "bundled kernel bytes");
        }
        expect(rt::nvrtc_compile_count() == before, "no NVRTC call for bundled kernels");
        std::fprintf(stderr, "-- bundled kernels done\n");
        const CompiledKernel a = compile(not_in_bundle);
        const CompiledKernel b = compile(not_in_bundle);
        expect(!a.from_cache && a.cache_path.empty(), "unbundled kernel compiled into memory");
        expect(b.from_cache && b.cubin == a.cubin, "second request served from memory");
        expect(rt::nvrtc_compile_count() == before + 1, "one NVRTC call for the unbundled kernel");
        return failures;
      },
      &err);
  INFO("child stderr:\n", err);
  CHECK(rc == 0);
  const std::string after = err.substr(err.find("-- bundled kernels done\n") + 24);
  CHECK(err.find("-- bundled kernels done") != std::string::npos);
  CHECK(err.find("warning") > err.find("-- bundled kernels done"));  // nothing while only the bundle was used
  CHECK(count_lines(after) == 1);                                   // one warning, when memory was needed
  CHECK(contains(after, "flashgen: warning:"));
  CHECK(contains(after, user_dir));
  CHECK(contains(after, "memory only"));
  CHECK(test::list_dir(user_dir).empty());
}

TEST_CASE("cache: a missing home directory falls back to memory with one warning") {
  REQUIRE(rt::nvrtc_available());
  TempDir root("flashgen-nohome");
  REQUIRE(::chmod(root.path().c_str(), 0755) == 0);
  const std::string locked = root.path() + "/locked";
  REQUIRE(::mkdir(locked.c_str(), 0555) == 0);
  const KernelSpec spec = test::simple_spec(90, 16, MaskKind::causal_top_left);
  (void)rt::nvrtc_version_for(90);
  std::string err;
  const int rc = run_unprivileged(
      [&] {
        int failures = 0;
        ::unsetenv("FLASHGEN_CACHE_DIR");
        ::unsetenv("FLASHGEN_CACHE_PATH");
        ::unsetenv("XDG_CACHE_HOME");
        // Root dropped to nobody: no HOME, and the passwd home (/nonexistent) cannot be created.
        // Otherwise: HOME names a directory that does not exist below one this user cannot write.
        if (::getuid() == 65534) ::unsetenv("HOME");
        else ::setenv("HOME", (locked + "/home").c_str(), 1);
        rt::cache_reset_for_tests();
        const CompiledKernel a = compile(spec);
        const CompiledKernel b = compile(spec);
        if (!(a.cache_path.empty() && test::is_elf(a.cubin))) ++failures, std::fprintf(stderr, "CHILD: a\n");
        if (!b.from_cache) ++failures, std::fprintf(stderr, "CHILD: b\n");
        if (!rt::cache_dir().empty()) ++failures, std::fprintf(stderr, "CHILD: dir\n");
        return failures;
      },
      &err);
  INFO("child stderr:\n", err);
  CHECK(rc == 0);
  CHECK(count_lines(err) == 1);
  CHECK(contains(err, "flashgen: warning:"));
  CHECK(contains(err, "memory only"));
}

TEST_CASE("cache: a bundle and a user cache on a read-only file system") {
  TempDir mount_point("flashgen-rofs");
  if (::mount("flashgen-rofs", mount_point.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=0755") != 0) {
    MESSAGE("cannot mount a tmpfs here (" << std::string(std::strerror(errno))
                                          << "); the unwritable-directory cases cover a read-only location");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point.path()};
  const std::string bundle = mount_point.path() + "/bundle";
  const KernelSpec spec = test::simple_spec(80, 16);
  const auto compiled = make_bundle({spec}, bundle);
  REQUIRE(::mkdir((mount_point.path() + "/user").c_str(), 0700) == 0);
  REQUIRE(::mount(nullptr, mount_point.path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                  nullptr) == 0);
  {
    EnvGuard bundles("FLASHGEN_CACHE_PATH", bundle);
    EnvGuard env("FLASHGEN_CACHE_DIR", mount_point.path() + "/user");
    rt::cache_reset_for_tests();
    StderrCapture err;
    const CompiledKernel k = compile(spec);
    const CompiledKernel other = compile(test::simple_spec(90, 16));
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK(k.from_cache);
    CHECK(k.cache_path == compiled[0].cache_path);
    CHECK(other.cache_path.empty());
    CHECK(count_lines(log) == 1);
    CHECK(contains(log, "memory only"));
    CHECK(contains(log, std::strerror(EROFS)));
  }
  rt::cache_reset_for_tests();
}

// ---- 4. maintenance ------------------------------------------------------------

TEST_CASE("cache: prune removes bad, foreign, stale and abandoned files and keeps current entries") {
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(80, 16);
  const CompiledKernel good = compile(spec);
  const std::string dir = cache.path();
  // A foreign entry: a whole entry made by another NVRTC (under its own key).
  const std::string foreign_key = rt::cache_key("x", rt::nvrtc_options(80), 80, rt::NvrtcVersion{12, 1});
  const std::string foreign = rt::cache_entry_path(dir, "flashgen_fwd_old", foreign_key);
  const auto foreign_bytes =
      rt::encode_cache_entry(rt::EntryIdentity{foreign_key, 80, rt::NvrtcVersion{12, 1}, kGeneratorVersion},
                             good.cubin);
  test::write_bytes(foreign, foreign_bytes);
  // A stale entry: this generator and NVRTC, but its source is not what the generator writes now.
  std::string stale_source = generate(test::simple_spec(80, 32));
  stale_source += "\n// an older template\n";
  const rt::NvrtcVersion v = rt::nvrtc_version_for(80);
  const std::string stale_key = rt::cache_key(stale_source, rt::nvrtc_options(80), 80, v);
  const std::string stale_name = test::simple_spec(80, 32).kernel_name();
  REQUIRE_FALSE(rt::cache_store(stale_name, rt::current_identity(stale_key, 80, v), good.cubin, stale_source, "")
                    .empty());
  // A bad entry, a temp file, an orphaned source and a file that is not the cache's.
  const std::string bad = rt::cache_entry_path(dir, "flashgen_fwd_bad", std::string(32, 'a'));
  test::write_bytes(bad, {'b', 'a', 'd'});
  test::write_bytes(dir + "/.x.cubin.tmp.1.2.3", {'t'});
  test::write_bytes(rt::cache_entry_path(dir, "flashgen_fwd_orphan", std::string(32, 'b'), ".cu"), {'o'});
  test::write_bytes(dir + "/tune.yml", {'v'});

  const auto reports = rt::cache_scan(dir, false, rt::loaded_nvrtc_for_arch());
  std::map<std::string, std::string> problems;
  for (const auto& r : reports) problems[r.path] = r.problem;
  CHECK(problems.at(good.cache_path).empty());
  CHECK(contains(problems.at(foreign), "made by NVRTC 12.1"));
  CHECK(contains(problems.at(bad), "truncated"));
  CHECK(contains(problems.at(rt::cache_entry_path(dir, stale_name, stale_key)), "stale"));

  rt::PruneOptions po;
  po.temp_min_age_s = 0;
  po.dry_run = true;
  CHECK(rt::cache_prune(dir, rt::loaded_nvrtc_for_arch(), po).removed.size() == 7);
  CHECK(test::list_dir(dir).size() == 11);  // a dry run removes nothing
  po.dry_run = false;
  const rt::PruneResult pr = rt::cache_prune(dir, rt::loaded_nvrtc_for_arch(), po);
  CHECK(pr.errors.empty());
  std::set<std::string> left;
  for (const auto& n : test::list_dir(dir)) left.insert(n);
  const std::string stem = good.cache_path.substr(dir.size() + 1, good.cache_path.size() - dir.size() - 7);
  CHECK(left == std::set<std::string>{stem + ".cubin", stem + ".cu", stem + ".log", "tune.yml"});
  CHECK(compile(spec).from_cache);

  // clear: every entry, still not tune.yml.
  po.all = true;
  rt::cache_prune(dir, rt::loaded_nvrtc_for_arch(), po);
  CHECK(test::list_dir(dir) == std::vector<std::string>{"tune.yml"});
}
