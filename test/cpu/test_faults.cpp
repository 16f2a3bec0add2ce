// Resource faults the CPU tier can stage (issue 6, item 5): no CUDA driver, an
// NVRTC that is missing, not NVRTC, of another major version or failing, and
// a kernel cache directory that fills up, vanishes or becomes a file mid-run.
// Each must end in a typed flashgen error or a warning with a fallback: never
// a crash, never a half-written cache entry.
//
// NVRTC is loaded once per process, so every NVRTC fault runs in a child: this
// test binary re-executed with --test-case=<a "fault child:" case> and the
// fault in its environment (FLASHGEN_TEST_FAULT_CHILD=1 enables those cases;
// in a normal run they are reported as skipped). The child's output is shown
// when it fails.
//
// The NVRTC stand-in is fake_nvrtc.c (built beside this binary): it reports
// the version in FAKE_NVRTC_VERSION and fails compiles as FAKE_NVRTC_MODE says.
// "Disk full" is a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past
// it fail with EFBIG, which root cannot bypass, unlike directory permissions),
// and, where this process may mount, a real ENOSPC on a small tmpfs.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashgen/flashgen.h"
#include "flashgen/flashgen.hpp"
#include "gen/emit.hpp"
#include "runtime/cache.hpp"
#include "runtime/compile.hpp"
#include "runtime/driver.hpp"
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

bool in_fault_child() { return std::getenv("FLASHGEN_TEST_FAULT_CHILD") != nullptr; }

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

// Every '|'-separated part of $FAULT_EXPECT must occur in `message`.
void check_expected_parts(const std::string& message) {
  std::stringstream parts(env_or("FAULT_EXPECT", ""));
  std::string part;
  while (std::getline(parts, part, '|')) {
    INFO("message: ", message);
    INFO("expected part: ", part);
    CHECK(contains(message, part));
  }
}

// No temp file, no hidden file, nothing but finished entry parts in `dir`;
// every .cubin present decodes as an entry (a whole one).
void check_no_partial_entries(const std::string& dir) {
  for (const auto& name : test::list_dir(dir)) {
    INFO("file: ", dir, "/", name);
    CHECK(name[0] != '.');
    CHECK_FALSE(contains(name, ".tmp."));
    CHECK((ends_with(name, ".cubin") || ends_with(name, ".cu") || ends_with(name, ".log")));
    if (ends_with(name, ".cubin")) {
      const std::vector<char> bytes = test::read_bytes(dir + "/" + name);
      REQUIRE(bytes.size() >= rt::kCacheHeaderSize);
      // The key is in the header (bytes 16..48); a whole entry decodes with it.
      const std::string key(bytes.data() + 16, 32);
      std::string reason;
      CHECK_MESSAGE(rt::decode_cache_entry(bytes, key, &reason).has_value(), reason);
    }
  }
}

// The file names in `dir` that start with the kernel name of `spec`.
std::vector<std::string> entry_files(const std::string& dir, const KernelSpec& spec) {
  std::vector<std::string> out;
  for (const auto& name : test::list_dir(dir))
    if (name.rfind(spec.kernel_name() + "-", 0) == 0) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

/// Limits the size of files this process writes (RLIMIT_FSIZE soft limit) and
/// ignores SIGXFSZ, so writes past the limit fail with EFBIG; restores both.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &saved_action_) == 0);
    struct rlimit lim = saved_;
    lim.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    active_ = true;
  }
  ~FileSizeLimit() { lift(); }
  void lift() {
    if (!active_) return;
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::sigaction(SIGXFSZ, &saved_action_, nullptr);
    active_ = false;
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit saved_ {};
  struct sigaction saved_action_ {};
  bool active_ = false;
};

struct ChildResult {
  int status = -1;     // waitpid status
  std::string output;  // stdout + stderr
  bool passed() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

/// Runs the "fault child:" test case `test_case` of this binary in a fresh
/// process with `env` added to (or, with nullopt, removed from) the environment.
ChildResult run_child(const std::string& test_case,
                      const std::vector<std::pair<std::string, std::optional<std::string>>>& env) {
  TempDir dir("flashgen-fault-child");
  const std::string out_path = dir.path() + "/output";
  const std::string filter = "--test-case=" + test_case;
  std::fflush(stdout);
  std::fflush(stderr);
  ChildResult result;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("FLASHGEN_TEST_FAULT_CHILD", "1", 1);
    for (const auto& [name, value] : env) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    const char* argv[] = {"flashgen_tests_cpu", filter.c_str(), "--no-version", "--no-colors", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  REQUIRE(::waitpid(pid, &result.status, 0) == pid);
  const std::vector<char> out = test::read_bytes(out_path);
  result.output.assign(out.begin(), out.end());
  return result;
}

void expect_child_passes(const std::string& test_case,
                         const std::vector<std::pair<std::string, std::optional<std::string>>>& env) {
  const ChildResult r = run_child(test_case, env);
  INFO("child output:\n", r.output);
  CHECK(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 0);
  // The child really ran its case (a filter that matched nothing also exits 0).
  CHECK(contains(r.output, "1 passed"));
}

// A valid problem over fake (never dereferenced) 16-byte aligned pointers.
AttentionProblem fake_problem() {
  auto* base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  return make_bshd_problem(DType::f16, 1, 64, 64, 2, 2, 64, 64, MaskKind::causal_bottom_right, base,
                           base + (1 << 16), base + (2 << 16), base + (3 << 16));
}

}  // namespace

// ---------------------------------------------------------------------------
// No CUDA driver
// ---------------------------------------------------------------------------

TEST_CASE("faults: without libcuda.so.1 every GPU entry point is Unavailable; generation and compilation work") {
  if (rt::driver_available()) {
    MESSAGE("a CUDA driver is present here; the no-driver checks are skipped");
    return;
  }
  ScopedCache cache;
  CHECK_FALSE(gpu_available());
  try {
    (void)rt::driver();
    FAIL("rt::driver() should throw without a driver");
  } catch (const Unavailable& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(e.code() == ErrorCode::unavailable);
    CHECK(contains(msg, "libcuda.so.1"));
    CHECK(contains(msg, "Code generation and compilation work without one"));
  }
  CHECK_THROWS_AS(current_device(), Unavailable);
  CHECK_THROWS_AS(rt::ensure_context(), Unavailable);

  const AttentionProblem p = fake_problem();
  CHECK_THROWS_AS(plan(p), Unavailable);
  CHECK_THROWS_AS(forward(p, nullptr), Unavailable);
  // Bad input is still reported as bad input first.
  AttentionProblem bad = p;
  bad.heads_kv = 3;
  CHECK_THROWS_AS(forward(bad, nullptr), InvalidArgument);

  const KernelSpec spec = plan(p, 80);
  CHECK_THROWS_AS(load_kernel(spec), Unavailable);
  // A Kernel that did not come from load_kernel: the driver is needed before
  // its function pointer would be touched.
  Kernel forged;
  forged.spec = spec;
  forged.function = reinterpret_cast<void*>(uintptr_t{0x1000});
  CHECK_THROWS_AS(launch(forged, p, nullptr), Unavailable);
  // Checking a failed result needs no driver either (no name lookup then).
  try {
    rt::check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
    FAIL("rt::check should throw");
  } catch (const DriverError& e) {
    CHECK(e.cu_result() == static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY));
    CHECK(contains(e.what(), "cuMemAlloc failed"));
  }

  // The C ABI says the same through a status.
  flashgen_problem cp;
  REQUIRE(flashgen_problem_init_bshd(&cp, FLASHGEN_DTYPE_F16, 1, 64, 64, 2, 2, 64, 64, FLASHGEN_MASK_NONE,
                                     p.q.data, p.k.data, p.v.data, const_cast<void*>(p.o.data)) ==
          FLASHGEN_OK);
  CHECK(flashgen_forward(&cp, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
  CHECK(contains(flashgen_last_error(), "libcuda.so.1"));

  // What needs no GPU still works.
  CHECK_FALSE(generate(spec).empty());
  const CompiledKernel k = compile(spec);
  CHECK(test::is_elf(k.cubin));
}

// ---------------------------------------------------------------------------
// NVRTC faults (child processes)
// ---------------------------------------------------------------------------

TEST_SUITE("fault child") {

// FLASHGEN_NVRTC_LIBRARY names something that must be refused; $FAULT_EXPECT
// lists parts of the expected message.
TEST_CASE("fault child: NVRTC is unusable" * doctest::skip(!in_fault_child())) {
  ScopedCache cache;
  CHECK_FALSE(rt::nvrtc_available());
  try {
    (void)rt::nvrtc_version();
    FAIL("nvrtc_version() should throw Unavailable");
  } catch (const Unavailable& e) {
    // The variable, its value and the whole reason on the first line: callers
    // that show one line (a pregen progress line, explain) keep the reason.
    const std::string msg = e.what();
    const std::string first = msg.substr(0, msg.find('\n'));
    CHECK(contains(first, std::string("FLASHGEN_NVRTC_LIBRARY=") + env_or("FLASHGEN_NVRTC_LIBRARY", "?") +
                              " could not be used: "));
    check_expected_parts(first);
  }
  const KernelSpec spec = test::simple_spec(80, 64);
  try {
    (void)compile(spec);
    FAIL("compile() should throw Unavailable");
  } catch (const Unavailable& e) {
    const std::string msg = e.what();
    check_expected_parts(msg.substr(0, msg.find('\n')));
  }
  CHECK_THROWS_AS(compile(spec), Unavailable);  // the failure is remembered, not retried into a crash
  CHECK_THROWS_AS(rt::nvrtc_library(), Unavailable);
  // Planning and generating need no NVRTC.
  const KernelSpec planned = plan(fake_problem(), 80);
  CHECK(planned.mask == MaskKind::causal_bottom_right);
  CHECK_FALSE(generate(planned).empty());
  char* source = nullptr;
  CHECK(flashgen_generate(spec.canonical().c_str(), &source) == FLASHGEN_OK);
  flashgen_free(source);
  CHECK(test::list_dir(cache.path()).empty());  // nothing was written
}

// An NVRTC that loads but fails (fake_nvrtc.c, FAKE_NVRTC_MODE): CompileError
// with the NVRTC result and log, the source dumped beside the cache, and
// still a CompileError (saying it was not dumped) when nothing can be written.
TEST_CASE("fault child: NVRTC fails the compile" * doctest::skip(!in_fault_child())) {
  ScopedCache cache;
  REQUIRE(rt::nvrtc_available());
  CHECK(rt::nvrtc_library() == env_or("FLASHGEN_NVRTC_LIBRARY", "?"));
  const KernelSpec spec = test::simple_spec(80, 64);
  const uint64_t before = rt::nvrtc_compile_count();
  std::string first_message;
  try {
    (void)compile(spec);
    FAIL("compile() through the failing NVRTC should throw CompileError");
  } catch (const CompileError& e) {
    first_message = e.what();
  }
  INFO("message: ", first_message);
  CHECK(contains(first_message, spec.canonical()));
  CHECK(contains(first_message, spec.kernel_name()));
  CHECK(contains(first_message, "NVRTC " + rt::nvrtc_version().str()));
  check_expected_parts(first_message);
  CHECK(rt::nvrtc_compile_count() > before);
  // The dumped source is whole, and nothing else was left.
  const std::vector<std::string> files = entry_files(cache.path(), spec);
  REQUIRE(files.size() == 1);
  CHECK(ends_with(files[0], ".cu"));
  CHECK(contains(first_message, cache.path() + "/" + files[0]));
  const std::vector<char> dumped = test::read_bytes(cache.path() + "/" + files[0]);
  CHECK(std::string(dumped.begin(), dumped.end()) == gen::emit_forward(spec));
  check_no_partial_entries(cache.path());

  // Again with a full disk: still the CompileError, which says the source
  // could not be dumped; no partial file is left anywhere.
  std::filesystem::remove(cache.path() + "/" + files[0]);
  std::string second_message;
  {
    FileSizeLimit full(512);
    try {
      (void)compile(spec);
    } catch (const CompileError& e) {
      second_message = e.what();
    }
  }
  INFO("message with a full disk: ", second_message);
  CHECK(contains(second_message, "(not dumped:"));
  CHECK(contains(second_message, std::strerror(EFBIG)));
  check_expected_parts(second_message);
  CHECK(entry_files(cache.path(), spec).empty());
  check_no_partial_entries(cache.path());
}

}  // TEST_SUITE("fault child")

TEST_CASE("faults: FLASHGEN_NVRTC_LIBRARY naming a library that is not NVRTC is Unavailable") {
  TempDir dir("flashgen-not-nvrtc");
  const std::string text_file = dir.path() + "/libnvrtc.so.13";
  test::write_bytes(text_file, {'n', 'o', 't', ' ', 'E', 'L', 'F', '\n'});

  SUBCASE("the C library") {
    expect_child_passes("fault child: NVRTC is unusable",
                        {{"FLASHGEN_NVRTC_LIBRARY", "libc.so.6"},
                         {"FAULT_EXPECT", "libc.so.6: loaded, but lacks nvrtcVersion"}});
  }
  SUBCASE("a text file") {
    expect_child_passes("fault child: NVRTC is unusable",
                        {{"FLASHGEN_NVRTC_LIBRARY", text_file}, {"FAULT_EXPECT", text_file + ": "}});
  }
  SUBCASE("a directory") {
    expect_child_passes("fault child: NVRTC is unusable",
                        {{"FLASHGEN_NVRTC_LIBRARY", dir.path()}, {"FAULT_EXPECT", dir.path() + ": "}});
  }
  SUBCASE("a file that does not exist") {
    expect_child_passes("fault child: NVRTC is unusable",
                        {{"FLASHGEN_NVRTC_LIBRARY", dir.path() + "/libnvrtc.so.12"},
                         {"FAULT_EXPECT", "No such file or directory"}});
  }
}

TEST_CASE("faults: an NVRTC of another major version is refused, naming the version found and the ones needed") {
  for (const std::string version : {"11.8", "14.0", "0.0"}) {
    CAPTURE(version);
    expect_child_passes(
        "fault child: NVRTC is unusable",
        {{"FLASHGEN_NVRTC_LIBRARY", FLASHGEN_FAKE_NVRTC},
         {"FAKE_NVRTC_VERSION", version},
         {"FAULT_EXPECT", "loaded, but it is NVRTC " + version + "|needs NVRTC 12.x to 13.x"}});
  }
}

TEST_CASE("faults: NVRTC failures are CompileErrors naming the NVRTC result, dumped or not") {
  // NVRTC 12.4 and 13.0 are accepted versions: the fake loads, then fails.
  SUBCASE("compilation error with a log") {
    expect_child_passes("fault child: NVRTC fails the compile",
                        {{"FLASHGEN_NVRTC_LIBRARY", FLASHGEN_FAKE_NVRTC},
                         {"FAKE_NVRTC_VERSION", "13.0"},
                         {"FAKE_NVRTC_MODE", "fail"},
                         {"FAULT_EXPECT", "NVRTC_ERROR_COMPILATION|fake_nvrtc: error: this NVRTC is a test double"}});
  }
  SUBCASE("out of memory creating the program") {
    expect_child_passes("fault child: NVRTC fails the compile",
                        {{"FLASHGEN_NVRTC_LIBRARY", FLASHGEN_FAKE_NVRTC},
                         {"FAKE_NVRTC_VERSION", "12.4"},
                         {"FAKE_NVRTC_MODE", "oom"},
                         {"FAULT_EXPECT", "NVRTC_ERROR_OUT_OF_MEMORY"}});
  }
  SUBCASE("an empty cubin") {
    expect_child_passes("fault child: NVRTC fails the compile",
                        {{"FLASHGEN_NVRTC_LIBRARY", FLASHGEN_FAKE_NVRTC},
                         {"FAKE_NVRTC_VERSION", "13.0"},
                         {"FAKE_NVRTC_MODE", "empty_cubin"},
                         {"FAULT_EXPECT", "nvrtcGetCUBINSize"}});
  }
}

// ---------------------------------------------------------------------------
// Kernel cache directory faults (in this process; real NVRTC)
// ---------------------------------------------------------------------------

TEST_CASE("faults: a cache directory that fills up mid-run: warning, kernels from memory, no partial entry") {
  ScopedCache cache;
  const KernelSpec before_full = test::simple_spec(80, 64);
  const KernelSpec during_full = test::simple_spec(80, 128, MaskKind::causal_top_left);
  const KernelSpec after_full = test::simple_spec(80, 32, MaskKind::causal_bottom_right);

  const CompiledKernel a = compile(before_full);
  REQUIRE_FALSE(a.cache_path.empty());
  REQUIRE(entry_files(cache.path(), before_full).size() == 3);

  // Not even the source (~27 KB) fits any more.
  const uint64_t compiles = rt::nvrtc_compile_count();
  StderrCapture err;
  std::optional<CompiledKernel> b, b_again, a_again;
  {
    FileSizeLimit full(4096);
    b = compile(during_full);
    b_again = compile(during_full);
    a_again = compile(before_full);
  }
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(test::is_elf(b->cubin));
  CHECK_FALSE(b->from_cache);
  CHECK(b->cache_path.empty());  // memory only
  CHECK(b_again->from_cache);    // from the memory layer, no second NVRTC call
  CHECK(b_again->cubin == b->cubin);
  CHECK(a_again->from_cache);    // entries already on disk are still read
  CHECK(a_again->cache_path == a.cache_path);
  CHECK(rt::nvrtc_compile_count() == compiles + 1);
  // One warning, naming the directory and the reason.
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(contains(log, "flashgen: warning:"));
  CHECK(contains(log, cache.path()));
  CHECK(contains(log, std::strerror(EFBIG)));
  CHECK(contains(log, "memory only"));
  CHECK(entry_files(cache.path(), during_full).empty());
  check_no_partial_entries(cache.path());

  // Space again: the next new kernel is stored on disk.
  const CompiledKernel c = compile(after_full);
  CHECK_FALSE(c.cache_path.empty());
  CHECK(entry_files(cache.path(), after_full).size() == 3);
  check_no_partial_entries(cache.path());
}

TEST_CASE("faults: a disk that fills up between an entry's source and its cubin leaves no cubin") {
  // head_dim 256: the cubin is about twice the size of the source.
  const KernelSpec spec = test::simple_spec(80, 256);
  const size_t source_size = generate(spec).size();
  size_t entry_size = 0;
  {
    ScopedCache probe;
    const CompiledKernel k = compile(spec);
    entry_size = k.cubin.size() + rt::kCacheHeaderSize;
    REQUIRE(k.compile_log.size() < source_size);
  }
  const size_t limit = source_size + 1024;
  if (entry_size <= limit) {
    MESSAGE("the cubin (" << entry_size << " bytes) is not larger than the source; case skipped");
    return;
  }
  ScopedCache cache;
  StderrCapture err;
  std::optional<CompiledKernel> k, again;
  {
    FileSizeLimit full(limit);
    k = compile(spec);
    again = compile(spec);
  }
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(test::is_elf(k->cubin));
  CHECK(k->cache_path.empty());
  CHECK(again->from_cache);
  CHECK(again->cubin == k->cubin);
  CHECK(contains(log, "memory only"));
  // Source and log are whole; the cubin is absent, not cut short.
  std::vector<std::string> files = entry_files(cache.path(), spec);
  INFO("files: ", doctest::toString(files.size()));
  for (const auto& f : files) CHECK_FALSE(ends_with(f, ".cubin"));
  for (const auto& f : files) {
    if (!ends_with(f, ".cu")) continue;
    const std::vector<char> text = test::read_bytes(cache.path() + "/" + f);
    CHECK(std::string(text.begin(), text.end()) == generate(spec));
  }
  check_no_partial_entries(cache.path());

  // The next process (cache state reset) with space stores the whole entry.
  rt::cache_reset_for_tests();
  const CompiledKernel fresh = compile(spec);
  CHECK_FALSE(fresh.from_cache);
  CHECK_FALSE(fresh.cache_path.empty());
  CHECK(entry_files(cache.path(), spec).size() == 3);
  check_no_partial_entries(cache.path());
}

TEST_CASE("faults: a cache directory removed or replaced by a file mid-run: warning, kernels from memory") {
  TempDir root("flashgen-vanish");
  const std::string dir = root.path() + "/cache";
  EnvGuard env("FLASHGEN_CACHE_DIR", dir);
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  rt::cache_reset_for_tests();

  const CompiledKernel a = compile(test::simple_spec(80, 64));
  REQUIRE_FALSE(a.cache_path.empty());

  SUBCASE("removed") { std::filesystem::remove_all(dir); }
  SUBCASE("replaced by a regular file") {
    std::filesystem::remove_all(dir);
    test::write_bytes(dir, {'x'});
  }
  StderrCapture err;
  const KernelSpec spec = test::simple_spec(90, 64, MaskKind::causal_top_left);
  const CompiledKernel b = compile(spec);
  const CompiledKernel b_again = compile(spec);
  const CompiledKernel a_again = compile(test::simple_spec(80, 64));  // its entry is gone: recompiled
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(test::is_elf(b.cubin));
  CHECK(b.cache_path.empty());
  CHECK(b_again.from_cache);
  CHECK(b_again.cubin == b.cubin);
  CHECK(a_again.cubin == a.cubin);  // NVRTC is deterministic
  CHECK(a_again.cache_path.empty());
  CHECK(contains(log, "flashgen: warning:"));
  CHECK(contains(log, "memory only"));
  // No directory or stray file appeared where the cache was.
  if (std::filesystem::is_directory(dir)) {
    CHECK(test::list_dir(dir).empty());
  }
  rt::cache_reset_for_tests();
}

TEST_CASE("faults: a full file system (ENOSPC on a small tmpfs) falls back to memory without partial entries") {
  TempDir mount_point("flashgen-tmpfs");
  if (::mount("flashgen-test", mount_point.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") !=
      0) {
    MESSAGE("cannot mount a tmpfs here (" << std::strerror(errno) << "); the RLIMIT_FSIZE cases cover a full disk");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point.path()};

  const std::string dir = mount_point.path() + "/cache";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  // Fill the file system to the last byte.
  {
    const std::string filler = mount_point.path() + "/filler";
    const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    std::vector<char> block(4096, 'f');
    int last_errno = 0;
    while (true) {
      const ssize_t n = ::write(fd, block.data(), block.size());
      if (n <= 0) {
        last_errno = errno;
        break;
      }
    }
    ::close(fd);
    REQUIRE(last_errno == ENOSPC);
  }
  EnvGuard env("FLASHGEN_CACHE_DIR", dir);
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  rt::cache_reset_for_tests();

  const KernelSpec spec = test::simple_spec(80, 96);
  StderrCapture err;
  const CompiledKernel k = compile(spec);
  const CompiledKernel again = compile(spec);
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(test::is_elf(k.cubin));
  CHECK(k.cache_path.empty());
  CHECK(again.from_cache);
  CHECK(again.cubin == k.cubin);
  CHECK(contains(log, std::strerror(ENOSPC)));
  CHECK(contains(log, "memory only"));
  CHECK(entry_files(dir, spec).empty());
  check_no_partial_entries(dir);
  rt::cache_reset_for_tests();
}
