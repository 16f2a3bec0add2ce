// The flashgen command-line tool (tools/flashgen*.cpp), run as a separate
// process (FLASHGEN_CLI): pregen into a bundle that another process then uses
// without any NVRTC call; explain for a supported and an unsupported problem;
// show; cache ls / verify / prune; info; tune without a GPU and its dry run;
// tune files through --device; progress output on a pseudo-terminal and on a
// pipe; --help on every subcommand and errors on stderr with a non-zero exit;
// the example program's --arch check (FLASHGEN_EXAMPLE).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/cache.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/tune_internal.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "tools/flashgen_cli.hpp"
#include "tools/flashgen_cmds.hpp"

using namespace flashgen;
using flashgen::test::TempDir;

namespace {

using flashgen::test::contains;

std::string read_text(const std::string& path) {
  const std::vector<char> b = test::read_bytes(path);
  return std::string(b.begin(), b.end());
}

struct Run {
  int rc = -1;
  std::string out, err;
};

// The environment every CLI run starts from: no bundles, no tune file, the
// given cache directory.
std::vector<std::string> base_env(const std::string& cache_dir) {
  return {"FLASHGEN_CACHE_DIR=" + cache_dir, "FLASHGEN_CACHE_PATH=", "FLASHGEN_TUNE_FILE=", "FLASHGEN_PROFILE="};
}

void apply_env(const std::vector<std::string>& env) {
  for (const auto& kv : env) {
    const size_t eq = kv.find('=');
    const std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (value.empty()) ::unsetenv(name.c_str());
    else ::setenv(name.c_str(), value.c_str(), 1);
  }
}

[[noreturn]] void exec_program(const char* program, const std::vector<std::string>& args) {
  std::vector<const char*> argv = {program};
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  ::execv(program, const_cast<char* const*>(argv.data()));
  ::_exit(127);
}

[[noreturn]] void exec_cli(const std::vector<std::string>& args) { exec_program(FLASHGEN_CLI, args); }

// Runs `program` (the CLI unless given) with stdout and stderr redirected to files.
// (stdout_to: a file to send stdout to instead, e.g. /dev/full; then r.out is empty)
Run run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const char* program = FLASHGEN_CLI, const char* stdout_to = nullptr) {
  TempDir tmp("flashgen-cli-run");
  const std::string out = tmp.path() + "/out", err = tmp.path() + "/err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    apply_env(env);
    const int o = stdout_to != nullptr ? ::open(stdout_to, O_WRONLY) : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec_program(program, args);
  }
  Run r;
  int status = 0;
  if (::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// Runs the CLI on a pseudo-terminal (stdout and stderr both the terminal);
// returns everything it wrote.
Run run_cli_pty(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  int master = -1;
  winsize ws{};
  ws.ws_col = 100;
  ws.ws_row = 30;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    apply_env(env);
    exec_cli(args);
  }
  Run r;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) {
      r.out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF or EIO: the child closed the terminal
  }
  ::close(master);
  int status = 0;
  if (::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  return r;
}

// Command lines the CLI must refuse as usage errors: exit 2, "flashgen <command>: error: " and
// each of `err`'s parts on stderr, nothing on stdout.
struct UsageError {
  std::vector<std::string> args;
  std::vector<std::string> err;  // parts of stderr
};
void check_usage_errors(const std::vector<UsageError>& cases, const std::vector<std::string>& env) {
  for (const UsageError& b : cases) {
    std::string command_line;
    for (const std::string& a : b.args) command_line += " '" + a + "'";
    CAPTURE(command_line);
    const Run r = run_cli(b.args, env);
    INFO("stdout: ", r.out, "\nstderr: ", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen " + b.args[0] + ": error: "));
    for (const std::string& part : b.err) CHECK(contains(r.err, part));
    CHECK(r.out.empty());
  }
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

const char* child_mode() { return std::getenv("FLASHGEN_TEST_CLI_CHILD"); }

const std::vector<std::string> kPregenSet = {"--arch",  "80,90",     "--head-dims", "16,32", "--dtypes",
                                             "f16",     "--masks",   "none,causalbr"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Writes `path`: a tune file whose one entry gives `tile` (measured at `tflops`) to the class of
// `problem` (--problem text) on sm_90 with the hopper profile, as `flashgen tune` on `device` would.
void save_one_entry_tune_file(const std::string& path, const std::string& device, const std::string& problem,
                              const Tile& tile, double tflops) {
  TuneEntry e;
  e.device = device;
  e.arch = 90;
  e.profile = "hopper";
  e.profile_hash = profile_hash(profile_for_arch(90));
  e.generator = kGeneratorVersion;
  e.problem = problem_class(cli::to_problem(cli::parse_problem_text(problem)));
  e.tile = tile;
  e.tflops = tflops;
  save_tune_file(path, TuneFile{{e}});
}

}  // namespace

TEST_CASE("cli child: bundle" * doctest::skip(child_mode() == nullptr)) {
  // A fresh process with the bundle on FLASHGEN_CACHE_PATH: every kernel is
  // found there; NVRTC is never asked to compile.
  const std::string bundle = std::getenv("FLASHGEN_CACHE_PATH");
  const std::vector<std::string> specs = lines(read_text(std::getenv("SPECS")));
  REQUIRE(specs.size() == 8);
  for (const std::string& text : specs) {
    CAPTURE(text);
    const CompiledKernel k = compile(KernelSpec::parse(text));
    CHECK(k.from_cache);
    CHECK(k.cache_path.rfind(bundle + "/", 0) == 0);
    CHECK(test::is_elf(k.cubin));
    CHECK(k.compile_log.find("registers") != std::string::npos);
  }
  CHECK(rt::nvrtc_compile_count() == 0);
}

TEST_CASE("cli: pregen into a bundle; another process finds every kernel there without compiling") {
  REQUIRE(rt::nvrtc_available());
  TempDir work("flashgen-cli-bundle");
  const std::string bundle = work.path() + "/bundle";
  const auto env = base_env(work.path() + "/producer-cache");

  const Run list = run_cli(with({"pregen"}, with(kPregenSet, {"--list"})), env);
  REQUIRE(list.rc == 0);
  REQUIRE(lines(list.out).size() == 8);
  std::ofstream(work.path() + "/specs") << list.out;

  const Run made = run_cli(with({"pregen"}, with(kPregenSet, {"--out", bundle, "-j", "2"})), env);
  INFO("stdout:\n", made.out, "\nstderr:\n", made.err);
  CHECK(made.rc == 0);
  CHECK(contains(made.out, "pregen: 8 kernels in "));
  CHECK(contains(made.out, "8 compiled"));
  CHECK(contains(made.out, "0 already present, 0 failed"));
  CHECK(contains(made.out, "FLASHGEN_CACHE_PATH=" + bundle));
  CHECK_FALSE(std::filesystem::exists(work.path() + "/producer-cache/flashgen"));
  // A bundle: readable by every user, writable by none but its owner.
  struct stat st {};
  REQUIRE(::stat(bundle.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);
  size_t cubins = 0;
  for (const auto& name : test::list_dir(bundle)) {
    REQUIRE(::stat((bundle + "/" + name).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
    cubins += name.size() > 6 && name.substr(name.size() - 6) == ".cubin" ? 1 : 0;
  }
  CHECK(cubins == 8);

  // Another process: bundle on FLASHGEN_CACHE_PATH, an empty user cache.
  const std::string user = work.path() + "/user";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    apply_env({"FLASHGEN_TEST_CLI_CHILD=1", "SPECS=" + work.path() + "/specs", "FLASHGEN_CACHE_PATH=" + bundle,
               "FLASHGEN_CACHE_DIR=" + user, "FLASHGEN_TUNE_FILE="});
    const int fd = ::open((work.path() + "/child.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const char* argv[] = {"flashgen_tests_cpu", "--test-case=cli child: bundle", "--no-version", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child output:\n", read_text(work.path() + "/child.log"));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(read_text(work.path() + "/child.log"), "1 passed"));
  CHECK((!std::filesystem::exists(user) || test::list_dir(user).empty()));  // nothing compiled, nothing written

  // Pregen again: everything already present.
  const Run again = run_cli(with({"pregen"}, with(kPregenSet, {"--out", bundle})), env);
  CHECK(again.rc == 0);
  CHECK(contains(again.out, "0 compiled"));
  CHECK(contains(again.out, "8 already present, 0 failed"));
}

TEST_CASE("cli: pregen from a problem file, failures are summarized and exit non-zero") {
  TempDir work("flashgen-cli-fail");
  const auto env = base_env(work.path() + "/cache");
  std::ofstream(work.path() + "/problems.yml")
      << "problems:\n"
         "  - {name: small, dtype: f16, seqlen: 100, heads: 2, head_dim: 16}\n"
         "  - {name: wide, dtype: f16, seqlen: 100, heads: 2, head_dim: 320}\n";
  const Run r = run_cli({"pregen", "--arch", "80", "--problems", work.path() + "/problems.yml"}, env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "1 compiled"));
  CHECK(contains(r.out, "1 failed"));
  CHECK(contains(r.err, "pregen: failures:"));
  CHECK(contains(r.err, "wide: f16"));
  CHECK(contains(r.err, "head_dim (320)"));
  // The row of the file, as its parse errors name it (before: the problem only).
  CHECK(contains(r.err, work.path() + "/problems.yml: problems[1]: sm_80 "));
  CHECK_FALSE(contains(r.err, "problems[0]"));

  // A tile that fits no problem of the set: no kernel at all, exit 2 (see "a --tiles tile no problem can take").
  const Run bad_tile = run_cli({"pregen", "--arch", "90", "--head-dims", "256", "--dtypes", "f16", "--masks", "none",
                                "--tiles", "256x128x4x4", "--list"},
                               env);
  CHECK(bad_tile.rc == 2);
  CHECK(contains(bad_tile.err, "not planned"));
  CHECK(contains(bad_tile.err, "smem_bytes"));
}

TEST_CASE("cli: pregen names the kernels whose ptxas report shows spills, as explain reports them") {
  TempDir work("flashgen-cli-spills");
  const auto env = base_env(work.path() + "/cache");
  // Two kernels of one run: sm_80 D256 (its one-stage tile spills with NVRTC 13: bench/NOTES.md
  // session 30) and D64; whether each spills is read from explain's ptxas line, not assumed.
  const Run r = run_cli({"pregen", "--arch", "80", "--head-dims", "64,256", "--dtypes", "bf16", "--masks", "none",
                         "--lse", "yes", "--out", work.path() + "/bundle"},
                        env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(contains(r.out, "2 compiled"));
  size_t spilling = 0;
  for (const char* d : {"64", "256"}) {
    const Run e = run_cli({"explain", "--arch", "80", "--problem",
                           std::string("dtype=bf16,seqlen=1024,heads=8,lse=1,head_dim=") + d},
                          env);
    CAPTURE(d);
    INFO("explain:\n", e.out, e.err);
    REQUIRE(e.rc == 0);
    std::smatch name, regs;
    REQUIRE(std::regex_search(e.out, name, std::regex(R"(\nkernel +(\S+))")));
    REQUIRE(std::regex_search(e.out, regs, std::regex(R"((\d+) per thread, (\d+) bytes spill stores, (\d+) bytes spill loads)")));
    const bool spills = std::stoll(regs[2].str()) + std::stoll(regs[3].str()) > 0;
    spilling += spills ? 1 : 0;
    // The kernel is named with explain's numbers, or not named at all.
    CHECK(contains(r.out, fmt::format("  {}: {} B stored, {} B loaded at {} registers", name[1].str(), regs[2].str(),
                                      regs[3].str(), regs[1].str())) == spills);
    CHECK(contains(r.out, "  " + name[1].str() + ":") == spills);
  }
  CHECK(contains(r.out, fmt::format("registers spill to local memory in {} of 2 kernels", spilling)) == (spilling > 0));
  CHECK_FALSE(contains(r.out, "no ptxas report"));
  // A rerun finds both in the bundle and reports the same; an entry whose compile log is gone is
  // said to have no report (its spills unknown), not passed over as spill-free.
  const Run again = run_cli({"pregen", "--arch", "80", "--head-dims", "64,256", "--dtypes", "bf16", "--masks", "none",
                             "--lse", "yes", "--out", work.path() + "/bundle"},
                            env);
  INFO("again:\n", again.out, again.err);
  REQUIRE(again.rc == 0);
  CHECK(contains(again.out, "2 already present"));
  CHECK(contains(again.err, "(bundle " + work.path() + "/bundle)"));
  CHECK(contains(again.out, fmt::format("registers spill to local memory in {} of 2 kernels", spilling)) == (spilling > 0));
  size_t logs = 0;
  for (const auto& e : std::filesystem::directory_iterator(work.path() + "/bundle"))
    if (e.path().extension() == ".log") logs += std::filesystem::remove(e.path()) ? 1 : 0;
  REQUIRE(logs == 2);
  const Run no_logs = run_cli({"pregen", "--arch", "80", "--head-dims", "64,256", "--dtypes", "bf16", "--masks",
                               "none", "--lse", "yes", "--out", work.path() + "/bundle"},
                              env);
  INFO("no logs:\n", no_logs.out, no_logs.err);
  REQUIRE(no_logs.rc == 0);
  CHECK(contains(no_logs.out, "pregen: 2 kernels carry no ptxas report"));
  CHECK_FALSE(contains(no_logs.out, "registers spill"));
}

TEST_CASE("cli: explain a supported problem") {
  TempDir work("flashgen-cli-explain");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem = "dtype=f16,batch=2,seqlen=1000,heads=8,head_dim=96,mask=causaltl";
  const KernelSpec spec = plan(cli::to_problem(cli::parse_problem_text(problem)), 90);
  const Run r = run_cli({"explain", "--problem", problem, "--arch", "90"}, env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "profile      hopper"));
  CHECK(contains(r.out, "spec         " + spec.canonical()));
  CHECK(contains(r.out, "kernel       " + spec.kernel_name()));
  CHECK(contains(r.out, "head_dim 96 = 64 + 32"));
  CHECK(contains(r.out, "smem         " + std::to_string(spec.smem_bytes()) + " bytes"));
  CHECK(contains(r.out, "per thread"));
  CHECK(contains(r.out, "bytes spill stores"));
  CHECK(contains(r.out, "flops"));
  CHECK(contains(r.out, "ridge point"));
  CHECK((contains(r.out, "compute-bound") || contains(r.out, "memory-bound")));
  CHECK(contains(r.out, "not cached"));
  CHECK(contains(r.out, "not stored"));
  // A dry run writes nothing (it does not even create the cache directory).
  CHECK((!std::filesystem::exists(work.path() + "/cache") || test::list_dir(work.path() + "/cache").empty()));

  // Once compiled, explain says where the entry is.
  REQUIRE(run_cli({"pregen", "--arch", "90", "--head-dims", "96", "--dtypes", "f16", "--masks", "causaltl"}, env).rc ==
          0);
  const Run cached = run_cli({"explain", "--problem", problem, "--arch", "90"}, env);
  CHECK(cached.rc == 0);
  CHECK(contains(cached.out, "cached: " + work.path() + "/cache/" + spec.kernel_name() + "-"));
}

TEST_CASE("cli: explain's occupancy: a tile of the whole 64 KiB fits Turing (no per-block reserve before sm_80)") {
  TempDir work("flashgen-cli-occupancy");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem = "dtype=f16,batch=2,seqlen=4096,heads=32,head_dim=128,mask=causalbr";
  const KernelSpec spec = plan(cli::to_problem(cli::parse_problem_text(problem)), 75);
  REQUIRE(spec.smem_bytes() == 65536);  // (the profile's D128 tile takes all of it)
  const Run r = run_cli({"explain", "--problem", problem, "--arch", "75", "--no-compile"}, env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "occupancy    1 block per SM"));
  CHECK_FALSE(contains(r.out, "occupancy    0 blocks"));
}

TEST_CASE("cli: explain reports what launch refuses: sequences past 2^31 - 257, grids past 2^31 - 1") {
  TempDir work("flashgen-cli-explain-limits");
  const auto env = base_env(work.path() + "/cache");
  const Run keys =
      run_cli({"explain", "--problem", "dtype=f16,seqlen_q=1,seqlen_k=4294967296,heads=1,head_dim=64", "--arch", "80"},
              env);
  INFO("stdout:\n", keys.out, "\nstderr:\n", keys.err);
  CHECK(keys.rc == 2);
  CHECK(contains(keys.out, "seqlen_k (4294967296) must be at most 2^31 - 257"));
  const Run grid = run_cli({"explain", "--problem", "dtype=f16,batch=1048576,seqlen=4096,heads=1024,head_dim=64",
                            "--arch", "80", "--sms", "108"},
                           env);
  INFO("stdout:\n", grid.out, "\nstderr:\n", grid.err);
  CHECK(grid.rc == 2);
  CHECK(contains(grid.out, "= 32 * 1024 * 1048576 blocks, more than the 2^31-1"));
}

TEST_CASE("cli: explain an unsupported problem: every broken rule and the nearest alternatives") {
  TempDir work("flashgen-cli-explain-bad");
  const auto env = base_env(work.path() + "/cache");
  const Run r = run_cli(
      {"explain", "--problem", "dtype=bf16,seqlen=100,heads_q=12,heads_kv=5,head_dim=100", "--arch", "75"}, env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 2);  // unsupported input, as show says it (below)
  CHECK(contains(r.err, "flashgen explain: error: the problem is unsupported on sm_75: 4 rules broken (listed above)"));
  CHECK(contains(r.out, "unsupported: 4 rules broken"));
  CHECK(contains(r.out, "heads_q (12) must be a multiple of heads_kv (5)"));
  CHECK(contains(r.out, "head_dim (100) must be a multiple of 8"));
  CHECK(contains(r.out, "head_dim_v (100) must be a multiple of 8"));
  CHECK(contains(r.out, "dtype (bf16) is not an operand dtype"));
  CHECK(contains(r.out, "nearest supported alternatives:"));
  // Every alternative printed is a kernel that plans, each a different one (heads_kv 4 and 6 plan
  // the same kernel); the nearest keep sm_75 and take f16.
  size_t alternatives = 0;
  std::set<std::string> planned;
  for (const std::string& l : lines(r.out)) {
    const size_t at = l.find("-> ");
    if (at == std::string::npos) continue;
    const std::string kernel = l.substr(at + 3);
    CHECK(kernel.rfind(alternatives == 0 ? "flashgen_fwd_sm75_f16_d" : "flashgen_fwd_sm", 0) == 0);
    CHECK(planned.insert(kernel).second);
    ++alternatives;
  }
  CHECK(alternatives >= 1);

  const Run no_tile = run_cli({"explain", "--problem", "dtype=f16,seqlen=100,heads=2,head_dim=256", "--arch", "90",
                               "--tile", "256x128x4x4"},
                              env);
  CHECK(no_tile.rc == 2);
  CHECK(contains(no_tile.out, "smem_bytes"));
  CHECK(contains(no_tile.out, "the profile's tile"));

  // Each alternative is a different kernel: sm_89 with this tile and sm_89 with its profile's tile
  // (the same 64x32x4x2) are listed once.
  const Run same = run_cli({"explain", "--no-compile", "--arch", "90", "--problem",
                            "seqlen=4096,heads=8,head_dim=64,head_dim_v=256", "--tile", "64x32x4x2"},
                           env);
  INFO("stdout:\n", same.out);
  CHECK(same.rc == 2);
  CHECK(contains(same.out, "warps (4) must be 8 for the wgmma unit at head_dim_v 256"));
  std::set<std::string> kernels;
  size_t listed = 0;
  for (const std::string& l : lines(same.out)) {
    const size_t at = l.find("-> ");
    if (at == std::string::npos) continue;
    ++listed;
    CHECK(kernels.insert(l.substr(at + 3)).second);
  }
  CHECK(listed >= 2);

  // explain and show exit alike for a problem no kernel supports (2: unsupported input), explain after its report.
  for (const std::string& problem : {std::string("dtype=f16,seqlen=128,heads=8,head_dim=100"),
                                     std::string("dtype=bf16,seqlen=128,heads=8,head_dim=64"),
                                     std::string("dtype=f16,seqlen=128,heads_q=12,heads_kv=5,head_dim=64")}) {
    CAPTURE(problem);
    const Run ex = run_cli({"explain", "--problem", problem, "--arch", "75", "--no-compile"}, env);
    const Run show = run_cli({"show", "--problem", problem, "--arch", "75"}, env);
    INFO("explain:\n", ex.out, ex.err, "\nshow:\n", show.err);
    CHECK(ex.rc == 2);
    CHECK(show.rc == 2);
    CHECK(contains(ex.out, "unsupported: "));
    CHECK(contains(show.err, "flashgen show: error: "));
  }
}

TEST_CASE("cli: a softcap in the problem syntax reaches the spec") {
  TempDir work("flashgen-cli-softcap");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem = "dtype=bf16,seqlen=77,heads=3,head_dim=80,mask=causalbr,softcap=30";
  const cli::ProblemDesc d = cli::parse_problem_text(problem);
  CHECK(d.softcap == 30.0f);
  CHECK(contains(d.str(), "softcap=30"));
  const KernelSpec spec = plan(cli::to_problem(d), 80);
  CHECK(spec.softcap);
  const Run a = run_cli({"show", "--problem", problem, "--arch", "80"}, env);
  CHECK(a.rc == 0);
  CHECK(contains(a.out, "constexpr bool SOFTCAP = true;"));
  CHECK(a.out == generate(spec));
  const Run off = run_cli({"show", "--problem", "dtype=bf16,seqlen=77,heads=3,head_dim=80,softcap=0", "--arch", "80"}, env);
  CHECK(off.rc == 0);
  CHECK(contains(off.out, "constexpr bool SOFTCAP = false;"));
}

TEST_CASE("cli: pregen --softcap lists the softcap specializations beside the plain ones") {
  TempDir work("flashgen-cli-pregen-softcap");
  const auto env = base_env(work.path() + "/cache");
  const Run both = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks", "none",
                            "--softcap", "no,yes"},
                           env);
  CHECK(both.rc == 0);
  KernelSpec plain = plan(cli::to_problem(cli::parse_problem_text("dtype=f16,seqlen=1024,heads=1,head_dim=64")), 80);
  KernelSpec capped = plain;
  capped.softcap = true;
  CHECK(contains(both.out, plain.canonical() + "\n"));
  CHECK(contains(both.out, capped.canonical()));
  const Run only_plain = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks",
                                  "none"},
                                 env);
  CHECK(only_plain.rc == 0);
  CHECK_FALSE(contains(only_plain.out, "softcap"));
  // Explicit tiles keep the softcap: pregen --tiles, show/explain --tile, tune's candidates.
  const Run tiles = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks", "none",
                             "--softcap", "yes", "--tiles", "64x64x4x2,default"},
                            env);
  CHECK(tiles.rc == 0);
  CHECK(contains(tiles.out, "bm=64,bn=64,w=4,s=2,mask=none,bias=none,lse=0,softcap=1"));
  CHECK_FALSE(contains(tiles.out, "lse=0\n"));
  const std::string problem = "dtype=f16,seqlen=128,heads=1,head_dim=64,softcap=50";
  const Run show = run_cli({"show", "--arch", "80", "--tile", "64x64x4x2", "--problem", problem}, env);
  CHECK(show.rc == 0);
  CHECK(contains(show.out, "constexpr bool SOFTCAP = true;"));
  const Run dry = run_cli({"tune", "--dry-run", "--arch", "80", "--problem", problem}, env);
  CHECK(dry.rc == 0);
  INFO(dry.out);
  // The profile's tile is one candidate (a candidate spec without the softcap
  // would differ from the default's and list the tile twice).
  const std::string tile = "bm128 bn64 w8 s2";
  size_t n = 0;
  for (size_t at = dry.out.find(tile); at != std::string::npos; at = dry.out.find(tile, at + 1)) ++n;
  CHECK(n == 1);
  CHECK_FALSE(contains(dry.err, "planning for"));  // (--arch given: nothing to say)
  // Without --arch the arch is the GPU's, else sm_90, and that is said (before: sm_90 without a word).
  if (!gpu_available()) {
    const Run guessed = run_cli({"tune", "--dry-run", "--problem", problem}, env);
    CHECK(guessed.rc == 0);
    CHECK(contains(guessed.err, "flashgen tune: planning for sm_90 (no GPU here; choose another with --arch)"));
  }
}

TEST_CASE("cli: window sizes, sinks and alibi in the problem syntax reach the problem and the spec") {
  TempDir work("flashgen-cli-modifiers");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem =
      "dtype=bf16,seqlen_q=77,seqlen_k=300,heads=3,head_dim=80,mask=windowbr,window_left=127,window_right=0,"
      "sinks=1,alibi=yes";
  const cli::ProblemDesc d = cli::parse_problem_text(problem);
  CHECK(d.mask == MaskKind::window_bottom_right);
  CHECK(d.window_left == 127);
  CHECK(d.window_right == 0);
  CHECK(d.sinks);
  CHECK(d.alibi);
  CHECK(contains(d.str(), "mask=windowbr bias=none lse=0 window_left=127 window_right=0 sinks=1 alibi=1"));
  const AttentionProblem ap = cli::to_problem(d);
  CHECK(ap.window_left == 127);
  CHECK(ap.window_right == 0);
  REQUIRE(ap.sinks != nullptr);
  REQUIRE(ap.alibi_slopes != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(ap.sinks) % 16 == 0);
  CHECK(reinterpret_cast<uintptr_t>(ap.alibi_slopes) % 16 == 0);
  CHECK(ap.alibi_stride_batch == 0);
  CHECK_NOTHROW(check_problem(ap));
  const KernelSpec spec = plan(ap, 80);
  CHECK(spec.mask == MaskKind::window_bottom_right);
  CHECK(spec.sinks);
  CHECK(spec.alibi);
  // Defaults: unbounded window sizes, no sinks, no ALiBi; str() says nothing of them.
  const cli::ProblemDesc plain = cli::parse_problem_text("dtype=bf16,seqlen=77,heads=3,head_dim=80,sinks=0,alibi=no");
  CHECK(plain.window_left == -1);
  CHECK(plain.window_right == -1);
  CHECK_FALSE(plain.sinks);
  CHECK_FALSE(plain.alibi);
  CHECK(plain.str() == "bf16 b1 sq77 sk77 hq3 hkv3 d80/v80 mask=none bias=none lse=0");
  CHECK(cli::to_problem(plain).sinks == nullptr);
  CHECK(cli::to_problem(plain).alibi_slopes == nullptr);
  // A window mask with its default sizes (-1, -1) names them.
  CHECK(contains(cli::parse_problem_text("dtype=f16,seqlen=8,heads=1,head_dim=64,mask=windowtl").str(),
                 "mask=windowtl bias=none lse=0 window_left=-1 window_right=-1"));
  // The same keys in a YAML problem set.
  const auto set = cli::parse_problem_set(
      "problems:\n  - {dtype: f16, seqlen: 64, heads: 2, head_dim: 64, mask: windowtl, window_left: 3, "
      "window_right: -1, sinks: true, alibi: false}\n",
      "p.yml");
  REQUIRE(set.size() == 1);
  CHECK(set[0].mask == MaskKind::window_top_left);
  CHECK(set[0].window_left == 3);
  CHECK(set[0].window_right == -1);
  CHECK(set[0].sinks);
  CHECK_FALSE(set[0].alibi);

  const Run a = run_cli({"show", "--problem", problem, "--arch", "80"}, env);
  CHECK(a.rc == 0);
  CHECK(contains(a.out, "constexpr bool SINKS = true;"));
  CHECK(contains(a.out, "constexpr bool ALIBI = true;"));
  CHECK(contains(a.out, "constexpr int MASK = 4;"));
  CHECK(a.out == generate(spec));
  const Run e = run_cli({"explain", "--problem", problem, "--arch", "80", "--no-compile"}, env);
  INFO(e.out, e.err);
  CHECK(e.rc == 0);
  CHECK(contains(e.out, "window       window_left 127, window_right 0: query i sees keys j from i + off - 127 to "
                        "i + off (off = seqlen_k - seqlen_q = 223, bottom-right)"));
  CHECK(contains(e.out, spec.kernel_name()));
  CHECK(contains(e.out, "(window: the keys inside each row's window)"));
  // The unique bytes count the K/V keys the window shows: 1 query row, 4096 of 65536 keys of 8
  // K/V heads, d 128: Q and O 16 KiB, K and V 16 MiB.
  const Run w = run_cli({"explain", "--problem",
                         "dtype=f16,seqlen_q=1,seqlen_k=65536,heads_q=32,heads_kv=8,head_dim=128,mask=windowbr,"
                         "window_left=4095,window_right=0",
                         "--arch", "80", "--no-compile"},
                        env);
  INFO(w.out, w.err);
  CHECK(w.rc == 0);
  CHECK(contains(w.out, "bytes        16.0 MiB unique"));
  // Window sizes with another mask: explain names the rule the library states.
  const Run wrong =
      run_cli({"explain", "--problem", "dtype=f16,seqlen=64,heads=1,head_dim=64,mask=causalbr,window_left=4", "--arch",
               "80", "--no-compile"},
              env);
  CHECK(wrong.rc == 2);
  CHECK(contains(wrong.out, "window_left (4) must be -1 with mask causalbr"));
}

TEST_CASE("cli: pregen --sinks, --alibi and the window masks") {
  TempDir work("flashgen-cli-pregen-modifiers");
  const auto env = base_env(work.path() + "/cache");
  const Run r = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks",
                         "windowtl,windowbr", "--sinks", "no,yes", "--alibi", "no,yes", "--softcap", "no,yes"},
                        env);
  INFO(r.out, r.err);
  CHECK(r.rc == 0);
  for (const char* mask : {"windowtl", "windowbr"})
    for (const char* tail : {"lse=0\n", "lse=0,sinks=1\n", "lse=0,alibi=1\n", "lse=0,sinks=1,alibi=1\n",
                             "lse=0,softcap=1,sinks=1,alibi=1\n"}) {
      CAPTURE(mask);
      CAPTURE(tail);
      CHECK(contains(r.out, std::string("mask=") + mask + ",bias=none," + tail));
    }
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 16);  // 2 masks x 2 x 2 x 2
  const Run plain = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16"}, env);
  CHECK(plain.rc == 0);
  CHECK_FALSE(contains(plain.out, "sinks"));
  CHECK_FALSE(contains(plain.out, "alibi"));
  CHECK_FALSE(contains(plain.out, "window"));
  // The --help text names the window masks and the new options.
  const Run help = run_cli({"pregen", "--help"}, env);
  CHECK(contains(help.out, "windowtl, windowbr"));
  CHECK(contains(help.out, "--sinks"));
  CHECK(contains(help.out, "--alibi"));
}

TEST_CASE("cli: seqlens_q / seqlens_k in the problem syntax make a packed batch") {
  TempDir work("flashgen-cli-varlen");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem =
      "dtype=bf16,seqlens_q=100:37:0:512,seqlens_k=120:37:5:600,heads_q=8,heads_kv=2,head_dim=64,mask=causalbr,lse=1";
  const cli::ProblemDesc d = cli::parse_problem_text(problem);
  CHECK(d.varlen());
  CHECK(d.seqlens_q == std::vector<int64_t>{100, 37, 0, 512});
  CHECK(d.seqlens_k == std::vector<int64_t>{120, 37, 5, 600});
  CHECK(d.batch == 4);       // the count
  CHECK(d.seqlen_q == 512);  // max_seqlen_q
  CHECK(d.seqlen_k == 600);  // max_seqlen_k
  CHECK(d.total_q() == 649);
  CHECK(d.total_k() == 762);
  CHECK_FALSE(d.seqused_k);
  CHECK(d.str() == "bf16 b4 sq512 sk600 hq8 hkv2 d64/v64 mask=causalbr bias=none lse=1 seqlens_q=100:37:0:512 "
                   "seqlens_k=120:37:5:600");
  const AttentionProblem ap = cli::to_problem(d);
  CHECK(ap.varlen());
  REQUIRE(ap.cu_seqlens_q != nullptr);
  REQUIRE(ap.cu_seqlens_k != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(ap.cu_seqlens_q) % 16 == 0);
  CHECK(reinterpret_cast<uintptr_t>(ap.cu_seqlens_k) % 16 == 0);
  CHECK(ap.cu_seqlens_q != ap.cu_seqlens_k);
  CHECK(ap.seqused_k == nullptr);
  CHECK(ap.total_q == 649);
  CHECK(ap.total_k == 762);
  CHECK(ap.batch == 4);
  CHECK(ap.seqlen_q == 512);
  CHECK(ap.seqlen_k == 600);
  for (const TensorRef* t : {&ap.q, &ap.k, &ap.v, &ap.o}) CHECK(t->stride_batch == 0);
  CHECK(ap.q.stride_seq == 8 * 64);
  CHECK(ap.k.stride_seq == 2 * 64);
  CHECK(ap.lse.stride_batch == 0);  // [heads_q, total_q]
  CHECK(ap.lse.stride_head == 649);
  CHECK_NOTHROW(check_problem(ap));
  const KernelSpec spec = plan(ap, 80);
  CHECK(spec.varlen);
  CHECK(spec.kernel_name().ends_with("_lse_varlen"));
  // seqused_k=1 passes a seqused_k array; a dense problem has none of it.
  const cli::ProblemDesc used = cli::parse_problem_text(problem + ",seqused_k=1");
  CHECK(used.seqused_k);
  CHECK(contains(used.str(), " seqused_k=1"));
  REQUIRE(cli::to_problem(used).seqused_k != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(cli::to_problem(used).seqused_k) % 16 == 0);
  CHECK(plan(cli::to_problem(used), 80) == spec);  // (the array is a launch argument)
  const AttentionProblem dense = cli::to_problem(cli::parse_problem_text("dtype=bf16,seqlen=512,heads=8,head_dim=64"));
  CHECK_FALSE(dense.varlen());
  CHECK(dense.cu_seqlens_k == nullptr);
  CHECK(dense.seqused_k == nullptr);
  CHECK(dense.total_q == 0);
  CHECK(dense.total_k == 0);
  // Explicit bounds at least the longest lengths are kept (max_seqlen); an explicit batch equal to the count is fine.
  const cli::ProblemDesc bounded =
      cli::parse_problem_text("dtype=f16,batch=2,seqlen_q=1024,seqlen_k=2048,seqlens_q=7:9,seqlens_k=7:9,heads=1,head_dim=64");
  CHECK(bounded.seqlen_q == 1024);
  CHECK(bounded.seqlen_k == 2048);
  CHECK(bounded.batch == 2);
  CHECK(cli::parse_problem_text("dtype=f16,seqlen=9,seqlens_q=7:9,seqlens_k=7:9,heads=1,head_dim=64").seqlen_k == 9);
  // The largest sum, 2^31 - 1, is accepted.
  const cli::ProblemDesc largest =
      cli::parse_problem_text("dtype=f16,seqlens_q=2147483646:1,seqlens_k=1:2147483646,heads=1,head_dim=64");
  CHECK(largest.total_q() == 2147483647);
  CHECK(largest.total_k() == 2147483647);

  // The same keys in a YAML problem set, as "L1:L2" or as a sequence.
  const auto set = cli::parse_problem_set(
      "problems:\n"
      "  - {dtype: f16, seqlens_q: 100:37, seqlens_k: [120, 37], heads: 2, head_dim: 64, seqused_k: true}\n"
      "  - {dtype: f16, seqlens_q: '5', seqlens_k: '6', heads: 2, head_dim: 64}\n",
      "p.yml");
  REQUIRE(set.size() == 2);
  CHECK(set[0].seqlens_q == std::vector<int64_t>{100, 37});
  CHECK(set[0].seqlens_k == std::vector<int64_t>{120, 37});
  CHECK(set[0].seqused_k);
  CHECK(set[0].batch == 2);
  CHECK(set[1].seqlens_q == std::vector<int64_t>{5});
  CHECK(set[1].seqlen_k == 6);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems:\n  - {dtype: f16, seqlens_q: [100, -1], seqlens_k: [1, 2], "
                                              "heads: 2, head_dim: 64}\n",
                                              "p.yml"),
                       doctest::Contains("p.yml: key 'problems[0].seqlens_q' has value '100:-1': length 2 ('-1') "
                                         "must be an integer in [0, 2147483647]"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems:\n  - {dtype: f16, seqlens_q: [1, [2]], seqlens_k: [1, 2], "
                                              "heads: 2, head_dim: 64}\n",
                                              "p.yml"),
                       doctest::Contains("p.yml: key 'problems[0].seqlens_q' must be \"L1:L2:...\" or a sequence of "
                                         "integers"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems:\n  - {dtype: f16, seqlens_q: 1:2, seqlens_k: 1:2:3, "
                                              "heads: 2, head_dim: 64}\n",
                                              "p.yml"),
                       doctest::Contains("p.yml: problems[0] key 'seqlens_k' has 3 lengths and 'seqlens_q' 2"),
                       InvalidArgument);

  // show: the packed kernel; explain: the packed rows, the grid and the per-sequence FLOPs.
  const Run a = run_cli({"show", "--problem", problem, "--arch", "80"}, env);
  CHECK(a.rc == 0);
  CHECK(contains(a.out, "constexpr bool VARLEN = true;"));
  CHECK(a.out == generate(spec));
  const Run e = run_cli({"explain", "--problem", problem + ",seqused_k=1", "--arch", "80", "--no-compile"}, env);
  INFO(e.out, e.err);
  CHECK(e.rc == 0);
  CHECK(contains(e.out, "packed       4 sequences packed along the rows (cu_seqlens_q, cu_seqlens_k): total_q 649, "
                        "total_k 762, max_seqlen_q 512, max_seqlen_k 600; seqused_k[b] keys of each count"));
  CHECK(contains(e.out, "kernel       " + spec.kernel_name()));
  CHECK(contains(e.out, "(ceil(max_seqlen_q / block_m) x heads_q x batch; those past their sequence's rows exit at "
                        "once)"));
  CHECK(contains(e.out, "= 2 x Hq x (visible (q, k) pairs, summed over the sequences) x (D + Dv)"));
  // The FLOPs explain prints are the per-sequence sum: bottom-right causal, each row of
  // sequence b sees min(sk, i + sk - sq + 1) keys.
  double pairs = 0;
  for (size_t b = 0; b < d.seqlens_q.size(); ++b)
    for (int64_t i = 0; i < d.seqlens_q[b]; ++i)
      pairs += static_cast<double>(std::clamp<int64_t>(i + d.seqlens_k[b] - d.seqlens_q[b] + 1, 0, d.seqlens_k[b]));
  CHECK(cli::problem_flops(d) == 2.0 * 8 * pairs * 128);
  CHECK(contains(e.out, fmt::format("flops        {:.4g} = ", 2.0 * 8 * pairs * 128)));
  // tune ranks packed-batch candidates: the profile's default is one of them (a candidate
  // without varlen would differ from the default and list it a second time).
  const Run dry = run_cli({"tune", "--dry-run", "--arch", "80", "--problem", problem}, env);
  INFO(dry.out, dry.err);
  CHECK(dry.rc == 0);
  CHECK(contains(dry.out, "class bf16 d64/v64 mask=causalbr bias=none lse=1 varlen seqlen_q<=512"));
  size_t defaults = 0;
  for (size_t at = dry.out.find("(profile default)"); at != std::string::npos;
       at = dry.out.find("(profile default)", at + 1))
    ++defaults;
  CHECK(defaults == 1);
  // A packed problem that breaks a rule: explain lists it and offers packed alternatives.
  const Run bad = run_cli({"explain", "--problem", "dtype=f16,seqlens_q=3:4,seqlens_k=3:4,heads=1,head_dim=100",
                           "--arch", "80", "--no-compile"},
                          env);
  INFO(bad.out, bad.err);
  CHECK(bad.rc == 2);
  CHECK(contains(bad.out, "head_dim (100) must be a multiple of 8"));
  CHECK(contains(bad.out, "_varlen\n"));
}

TEST_CASE("cli: pregen --varlen builds the packed-batch kernels") {
  TempDir work("flashgen-cli-pregen-varlen");
  const auto env = base_env(work.path() + "/cache");
  const Run both = run_cli({"pregen", "--arch", "80,90", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks",
                            "none,causalbr", "--varlen", "no,yes", "--sinks", "no,yes"},
                           env);
  INFO(both.out, both.err);
  CHECK(both.rc == 0);
  const std::vector<std::string> specs = lines(both.out);
  CHECK(specs.size() == 16);  // 2 archs x 2 masks x 2 x 2
  size_t packed = 0;
  for (const std::string& text : specs) {
    CAPTURE(text);
    const KernelSpec s = KernelSpec::parse(text);
    CHECK(text.ends_with(",varlen=1") == s.varlen);
    CHECK(s.kernel_name().ends_with("_varlen") == s.varlen);
    if (s.varlen) ++packed;
  }
  CHECK(packed == 8);
  const Run plain = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16"}, env);
  CHECK(plain.rc == 0);
  CHECK_FALSE(contains(plain.out, "varlen"));
  // Compiled: one packed kernel into a bundle, named with _varlen.
  const std::string bundle = work.path() + "/bundle";
  const Run r = run_cli({"pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16", "--masks", "causalbr",
                         "--varlen", "yes", "--out", bundle},
                        env);
  INFO(r.out, r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "pregen: 1 kernel in "));
  CHECK(contains(r.out, "1 compiled"));
  const KernelSpec expected =
      plan(cli::to_problem(cli::parse_problem_text(
               "dtype=f16,seqlens_q=1024,seqlens_k=1024,heads=1,head_dim=64,mask=causalbr")),
           80);
  REQUIRE(expected.kernel_name().ends_with("_varlen"));
  CHECK(contains(r.err, "compiled " + expected.kernel_name()));
  bool found = false;
  for (const std::string& f : test::list_dir(bundle)) found = found || f.rfind(expected.kernel_name() + "-", 0) == 0;
  CHECK(found);
  // A problem file with the packed lengths reaches the same kernel.
  std::ofstream(work.path() + "/p.yml")
      << "problems:\n  - {dtype: f16, seqlens_q: [1024, 3], seqlens_k: 1024:3, heads: 1, head_dim: 64, mask: causalbr}\n";
  const Run file = run_cli({"pregen", "--arch", "80", "--problems", work.path() + "/p.yml", "--list"}, env);
  CHECK(file.rc == 0);
  CHECK(file.out == expected.canonical() + "\n");
  // The help names the option.
  CHECK(contains(run_cli({"pregen", "--help"}, env).out, "--varlen"));
}

TEST_CASE("cli: page_size in the problem syntax makes a paged KV cache") {
  TempDir work("flashgen-cli-paged");
  const auto env = base_env(work.path() + "/cache");
  // Dense Q/O, paged K/V: ceil(1000 / 16) = 63 pages per sequence.
  const std::string problem =
      "dtype=f16,batch=3,seqlen_q=128,seqlen_k=1000,heads_q=8,heads_kv=2,head_dim=64,mask=causalbr,page_size=16";
  const cli::ProblemDesc d = cli::parse_problem_text(problem);
  CHECK(d.paged());
  CHECK_FALSE(d.varlen());
  CHECK(d.page_size == 16);
  CHECK(d.page_table_stride() == 63);
  CHECK(d.num_pages() == 3 * 63);
  CHECK(d.str() == "f16 b3 sq128 sk1000 hq8 hkv2 d64/v64 mask=causalbr bias=none lse=0 page_size=16");
  const AttentionProblem ap = cli::to_problem(d);
  CHECK(ap.paged());
  REQUIRE(ap.page_table != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(ap.page_table) % 16 == 0);
  CHECK(ap.page_size == 16);
  CHECK(ap.page_table_stride == 63);
  CHECK(ap.num_pages == 189);
  CHECK(ap.seqlen_k == 1000);
  CHECK(ap.k.stride_seq == 2 * 64);
  CHECK(ap.k.stride_batch == 16 * 2 * 64);  // (the page stride)
  CHECK(ap.v.stride_batch == 16 * 2 * 64);
  CHECK(ap.q.stride_batch == 128 * 8 * 64);  // (Q and O stay dense)
  CHECK(ap.cu_seqlens_k == nullptr);
  CHECK(ap.seqused_k == nullptr);
  CHECK_NOTHROW(check_problem(ap));
  const KernelSpec spec = plan(ap, 80);
  CHECK(spec.paged);
  CHECK_FALSE(spec.varlen);
  CHECK(spec.kernel_name().ends_with("_paged"));
  INFO(cli::spec_with_tile(d, 80, profile_for_arch(80), spec.tile).canonical(), " vs ", spec.canonical());
  CHECK(cli::spec_with_tile(d, 80, profile_for_arch(80), spec.tile) == spec);
  // The model: the same work as a contiguous cache.
  cli::ProblemDesc contiguous = d;
  contiguous.page_size = 0;
  CHECK_FALSE(contiguous.paged());
  CHECK(cli::problem_flops(d) == cli::problem_flops(contiguous));
  // seqused_k with a dense paged cache passes the array.
  const cli::ProblemDesc used = cli::parse_problem_text(problem + ",seqused_k=1");
  REQUIRE(cli::to_problem(used).seqused_k != nullptr);
  CHECK_NOTHROW(check_problem(cli::to_problem(used)));
  CHECK(plan(cli::to_problem(used), 80) == spec);

  // Packed Q/O with paged K/V: no cu_seqlens_k, seqused_k counts the keys (seqlens_k);
  // ceil(600 / 64) = 10 pages per row of the table, 2 + 1 + 1 + 10 pages in all.
  const std::string packed_text =
      "dtype=bf16,seqlens_q=100:37:0:512,seqlens_k=120:37:5:600,heads_q=8,heads_kv=2,head_dim=64,mask=causalbr,lse=1,"
      "page_size=64";
  const cli::ProblemDesc pd = cli::parse_problem_text(packed_text);
  CHECK(pd.varlen());
  CHECK(pd.paged());
  CHECK(pd.seqlen_k == 600);
  CHECK(pd.page_table_stride() == 10);
  CHECK(pd.num_pages() == 14);
  CHECK(pd.str() == "bf16 b4 sq512 sk600 hq8 hkv2 d64/v64 mask=causalbr bias=none lse=1 seqlens_q=100:37:0:512 "
                    "seqlens_k=120:37:5:600 page_size=64");
  const AttentionProblem pp = cli::to_problem(pd);
  CHECK(pp.varlen());
  CHECK(pp.paged());
  CHECK(pp.cu_seqlens_q != nullptr);
  CHECK(pp.cu_seqlens_k == nullptr);
  REQUIRE(pp.seqused_k != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(pp.seqused_k) % 16 == 0);
  CHECK(pp.total_q == 649);
  CHECK(pp.total_k == 0);
  CHECK(pp.page_table_stride == 10);
  CHECK(pp.num_pages == 14);
  CHECK(pp.k.stride_batch == 64 * 2 * 64);
  CHECK(pp.q.stride_batch == 0);
  CHECK_NOTHROW(check_problem(pp));
  const KernelSpec pspec = plan(pp, 80);
  CHECK(pspec.varlen);
  CHECK(pspec.paged);
  CHECK(pspec.kernel_name().ends_with("_lse_varlen_paged"));

  // A YAML problem file takes page_size too, and checks it.
  const auto set = cli::parse_problem_set(
      "problems:\n"
      "  - {dtype: f16, batch: 3, seqlen_q: 128, seqlen_k: 1000, heads_q: 8, heads_kv: 2, head_dim: 64, mask: causalbr,"
      " page_size: 16}\n"
      "  - {dtype: f16, seqlens_q: [5, 7], seqlens_k: [9, 3], heads: 2, head_dim: 64, page_size: 1}\n",
      "p.yml");
  REQUIRE(set.size() == 2);
  CHECK(set[0].page_size == 16);
  CHECK(plan(cli::to_problem(set[0]), 80) == spec);
  CHECK(set[1].page_size == 1);
  CHECK(set[1].num_pages() == 12);
  CHECK_NOTHROW(check_problem(cli::to_problem(set[1])));
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems:\n  - {dtype: f16, seqlen: 8, heads: 2, head_dim: 64, "
                                              "page_size: 12}\n",
                                              "p.yml"),
                       doctest::Contains("p.yml: key 'problems[0].page_size' has value '12': must be a power of two "
                                         "in [1, 256]"),
                       InvalidArgument);

  // show: the paged kernel; explain: the pages; tune: a paged class.
  const Run a = run_cli({"show", "--problem", problem, "--arch", "80"}, env);
  CHECK(a.rc == 0);
  CHECK(contains(a.out, "constexpr bool PAGED = true;"));
  CHECK(a.out == generate(spec));
  const Run e = run_cli({"explain", "--problem", problem, "--arch", "80", "--no-compile"}, env);
  INFO(e.out, e.err);
  CHECK(e.rc == 0);
  CHECK(contains(e.out, "paged        page_size 16: K/V in 189 pages of 16 keys through page_table "
                        "(page_table_stride 63); modelled as the same work as a contiguous cache"));
  CHECK(contains(e.out, "kernel       " + spec.kernel_name()));
  const Run pe = run_cli({"explain", "--problem", packed_text, "--arch", "80", "--no-compile"}, env);
  INFO(pe.out, pe.err);
  CHECK(pe.rc == 0);
  CHECK(contains(pe.out, "packed       4 sequences packed along the rows (cu_seqlens_q; keys in pages, counted by "
                         "seqused_k): total_q 649"));
  CHECK(contains(pe.out, "paged        page_size 64: K/V in 14 pages of 64 keys through page_table "
                         "(page_table_stride 10), seqused_k[b] = seqlens_k[b] keys of each"));
  CHECK(contains(pe.out, "kernel       " + pspec.kernel_name()));
  const Run dry = run_cli({"tune", "--dry-run", "--arch", "80", "--problem", problem}, env);
  INFO(dry.out, dry.err);
  CHECK(dry.rc == 0);
  CHECK(contains(dry.out, "class f16 d64/v64 mask=causalbr bias=none lse=0 paged seqlen_q<=128"));
  size_t defaults = 0;
  for (size_t at = dry.out.find("(profile default)"); at != std::string::npos;
       at = dry.out.find("(profile default)", at + 1))
    ++defaults;
  CHECK(defaults == 1);
  // sm_90: the wgmma kernel at every page size; its producer gathers pages below 32 keys
  // (gen::kWgmmaGatherPageBelow).
  for (const char* ps : {"1", "4", "16", "32"}) {
    CAPTURE(ps);
    const Run h = run_cli({"explain", "--problem",
                           std::string("dtype=bf16,seqlen_q=256,seqlen_k=1000,heads_q=8,heads_kv=2,head_dim=128,"
                                       "mask=causalbr,page_size=") + ps,
                           "--arch", "90", "--no-compile"},
                          env);
    INFO(h.out, h.err);
    CHECK(h.rc == 0);
    CHECK(contains(h.out, "unit=wgmma,"));
    CHECK(contains(h.out, std::string(" consumer warps + 4 producer warps (") +
                              (std::string(ps) == "32" ? "TMA)" : "cp.async gather: pages below 32 keys)")));
  }
  // A paged problem that breaks a rule: explain lists it and offers paged alternatives.
  const Run bad = run_cli({"explain", "--problem", "dtype=f16,seqlen=64,heads=1,head_dim=100,page_size=16", "--arch",
                           "80", "--no-compile"},
                          env);
  INFO(bad.out, bad.err);
  CHECK(bad.rc == 2);
  CHECK(contains(bad.out, "head_dim (100) must be a multiple of 8"));
  CHECK(contains(bad.out, "_paged\n"));
}

TEST_CASE("cli: pregen --paged builds the paged-KV kernels") {
  TempDir work("flashgen-cli-pregen-paged");
  const auto env = base_env(work.path() + "/cache");
  const Run both = run_cli({"pregen", "--arch", "80,90", "--list", "--head-dims", "64", "--dtypes", "f16", "--masks",
                            "none,causalbr", "--paged", "no,yes", "--varlen", "no,yes"},
                           env);
  INFO(both.out, both.err);
  CHECK(both.rc == 0);
  const std::vector<std::string> specs = lines(both.out);
  CHECK(specs.size() == 16);  // 2 archs x 2 masks x 2 x 2
  size_t paged = 0;
  for (const std::string& text : specs) {
    CAPTURE(text);
    const KernelSpec s = KernelSpec::parse(text);
    CHECK(text.ends_with(",paged=1") == s.paged);
    CHECK(s.kernel_name().ends_with("_paged") == s.paged);
    if (s.paged) ++paged;
  }
  CHECK(paged == 8);
  const Run plain = run_cli({"pregen", "--arch", "80", "--list", "--head-dims", "64", "--dtypes", "f16"}, env);
  CHECK(plain.rc == 0);
  CHECK_FALSE(contains(plain.out, "paged"));
  // Compiled: one paged kernel into a bundle, named with _paged.
  const std::string bundle = work.path() + "/bundle";
  const Run r = run_cli({"pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16", "--masks", "causalbr",
                         "--paged", "yes", "--out", bundle},
                        env);
  INFO(r.out, r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "pregen: 1 kernel in "));
  CHECK(contains(r.out, "1 compiled"));
  const KernelSpec expected =
      plan(cli::to_problem(cli::parse_problem_text("dtype=f16,seqlen=1024,heads=1,head_dim=64,mask=causalbr,page_size=16")),
           80);
  REQUIRE(expected.kernel_name().ends_with("_paged"));
  CHECK(contains(r.err, "compiled " + expected.kernel_name()));
  bool found = false;
  for (const std::string& f : test::list_dir(bundle)) found = found || f.rfind(expected.kernel_name() + "-", 0) == 0;
  CHECK(found);
  // A problem file with a page size reaches the same kernel (any page size: a launch argument).
  std::ofstream(work.path() + "/p.yml")
      << "problems:\n  - {dtype: f16, seqlen: 300, heads: 1, head_dim: 64, mask: causalbr, page_size: 128}\n";
  const Run file = run_cli({"pregen", "--arch", "80", "--problems", work.path() + "/p.yml", "--list"}, env);
  CHECK(file.rc == 0);
  CHECK(file.out == expected.canonical() + "\n");
  // The help names the option.
  CHECK(contains(run_cli({"pregen", "--help"}, env).out, "--paged"));
}

TEST_CASE("cli: show prints the generated source") {
  TempDir work("flashgen-cli-show");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem = "dtype=bf16,seqlen=77,heads=3,head_dim=80,mask=causalbr,lse=1";
  const KernelSpec spec = plan(cli::to_problem(cli::parse_problem_text(problem)), 80);
  const Run a = run_cli({"show", "--problem", problem, "--arch", "80"}, env);
  CHECK(a.rc == 0);
  CHECK(a.out == generate(spec));
  const Run b = run_cli({"show", "--spec", spec.canonical()}, env);
  CHECK(b.rc == 0);
  CHECK(b.out == a.out);
  const Run bad = run_cli({"show", "--spec", "flashgen.fwd.v1:sm=80"}, env);
  CHECK(bad.rc == 2);
  CHECK(bad.out.empty());
  CHECK(contains(bad.err, "flashgen show: error: kernel spec"));
  // A spec names its arch and tile: --arch / --tile beside it are refused, not ignored.
  for (const char* opt : {"--arch", "--tile"}) {
    CAPTURE(opt);
    const Run both = run_cli({"show", "--spec", spec.canonical(), opt, std::string(opt) == "--arch" ? "90" : "64x64x4x2"}, env);
    CHECK(both.rc == 2);
    CHECK(both.out.empty());
    CHECK(contains(both.err, "excludes"));
  }
}

TEST_CASE("cli: cache prune and clear without a usable user cache fail (exit 1) like ls and verify") {
  TempDir work("flashgen-cli-prune-unusable");
  const std::string dir = work.path() + "/cache";
  REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);  // writable by others: not used
  const auto env = base_env(dir);
  for (const char* action : {"ls", "verify", "prune", "clear"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, env);
    CHECK(r.rc == 1);
    CHECK(contains(r.err, std::string("flashgen cache ") + action + ": error:"));
  }
}

TEST_CASE("cli: a relative --dir and a relative FLASHGEN_CACHE_DIR are shown absolute") {
  TempDir work("flashgen-cli-relative");
  std::filesystem::create_directories(work.path() + "/rel");
  const test::ScopedCwd cwd(work.path());
  const std::string here = cwd.current();
  const Run ls = run_cli({"cache", "ls", "--dir", "./rel/"}, base_env("rel"));
  INFO("out: ", ls.out, "err: ", ls.err);
  CHECK(ls.rc == 0);
  CHECK(contains(ls.out, "directory " + here + "/rel"));
  const Run info = run_cli({"info"}, base_env("./rel"));
  CHECK(contains(info.out, here + "/rel (FLASHGEN_CACHE_DIR)"));
}

TEST_CASE("cli: cache ls, verify, prune and clear; info") {
  TempDir work("flashgen-cli-cache");
  const std::string dir = work.path() + "/cache";
  const auto env = base_env(dir);
  REQUIRE(run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none,causaltl"}, env)
              .rc == 0);
  const Run ls = run_cli({"cache", "ls"}, env);
  CHECK(ls.rc == 0);
  CHECK(contains(ls.out, "user cache " + dir + ": 2 entries"));
  CHECK(contains(ls.out, "2 entries: 2 ok"));
  CHECK(run_cli({"cache", "verify"}, env).rc == 0);

  // Damage one entry and leave an old temp file.
  std::string damaged;
  for (const auto& n : test::list_dir(dir))
    if (n.find("causaltl") != std::string::npos && n.size() > 6 && n.substr(n.size() - 6) == ".cubin") damaged = n;
  REQUIRE_FALSE(damaged.empty());
  std::vector<char> bytes = test::read_bytes(dir + "/" + damaged);
  bytes.back() ^= 0x40;
  test::write_bytes(dir + "/" + damaged, bytes);
  test::write_bytes(dir + "/." + damaged + ".tmp.1.2.3", {'x'});
  const Run verify = run_cli({"cache", "verify"}, env);
  CHECK(verify.rc == 1);
  CHECK(contains(verify.out, "BAD"));
  CHECK(contains(verify.out, "checksum"));
  const Run dry = run_cli({"cache", "prune", "--dry-run", "--temp-age", "0"}, env);
  CHECK(dry.rc == 0);
  CHECK(contains(dry.out, "would remove " + dir + "/" + damaged));
  CHECK(test::list_dir(dir).size() == 7);
  const Run prune = run_cli({"cache", "prune", "--temp-age", "0"}, env);
  CHECK(prune.rc == 0);
  CHECK(contains(prune.out, "prune: 4 files"));  // the bad entry's three files and the temp file
  CHECK(run_cli({"cache", "verify"}, env).rc == 0);
  std::ofstream(dir + "/tune.yml") << "version: 1\nentries: []\n";
  const Run clear = run_cli({"cache", "clear"}, env);
  CHECK(clear.rc == 0);
  CHECK(test::list_dir(dir) == std::vector<std::string>{"tune.yml"});

  const Run info = run_cli({"info", "--arch", "80"}, env);
  INFO("info:\n", info.out);
  CHECK(info.rc == 0);
  CHECK(contains(info.out, "flashgen     generator"));
  CHECK(contains(info.out, "profile      sm_80: ampere"));
  CHECK(contains(info.out, "nvrtc        "));
  CHECK(contains(info.out, "cache        user cache " + dir + " (FLASHGEN_CACHE_DIR): searched, written"));
  CHECK(contains(info.out, "tune file    " + dir + "/tune.yml: 0 entries"));
  // --arch naming an arch no profile serves: said in the profile row, exit 2 (not NVRTC advice alone).
  const Run none = run_cli({"info", "--arch", "85"}, env);
  INFO("info --arch 85:\n", none.out);
  CHECK(none.rc == 2);
  CHECK(contains(none.out, "profile      sm_85: no profile for compute capability sm_85; nearest: ampere"));
  CHECK_FALSE(contains(none.out, "CUDA 13 dropped"));
}

TEST_CASE("cli: cache ls, verify, prune and info count one thing in the singular: 1 entry, 1 file") {
  TempDir work("flashgen-cli-cache-one");
  const std::string dir = work.path() + "/cache";
  const auto env = base_env(dir);
  REQUIRE(run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none"}, env).rc == 0);
  for (const char* action : {"ls", "verify"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "user cache " + dir + ": 1 entry, "));
    CHECK(contains(r.out, "\n1 entry: 1 ok"));
    CHECK_FALSE(contains(r.out, "1 entries"));
  }
  test::write_bytes(dir + "/.orphan.tmp.1.2.3", {'x'});
  // A claim's lock file that no process holds (its compile was killed): ls and verify say so.
  const std::string lock = dir + "/flashgen_fwd_sm80_f16_d16v16_m16n8k16_bm128_bn64_w8_s2_none-0123456789abcdef.lock";
  test::write_bytes(lock, {});
  for (const char* action : {"ls", "verify"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, env);
    INFO("stdout:\n", r.out);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "  1 lock file left by a compile or pregen that was stopped (no process holds it): "
                          "`flashgen cache prune` removes it\n"));
  }
  const Run prune = run_cli({"cache", "prune", "--temp-age", "0"}, env);
  INFO("prune:\n", prune.out, prune.err);
  CHECK(prune.rc == 0);
  CHECK(contains(prune.out, "prune: 2 files, 1 byte freed in " + dir));
  CHECK_FALSE(std::filesystem::exists(lock));
  CHECK_FALSE(contains(run_cli({"cache", "ls"}, env).out, "lock file"));
  save_one_entry_tune_file(dir + "/tune.yml", "CLI Test GPU", "dtype=f16,seqlen=128,heads=1,head_dim=16",
                           Tile{64, 64, 4, 2}, 100);
  const Run info = run_cli({"info", "--arch", "80"}, env);
  INFO("info:\n", info.out);
  CHECK(info.rc == 0);
  CHECK(contains(info.out, "tune file    " + dir + "/tune.yml: 1 entry\n"));
}

TEST_CASE("cli: info's rows line up: every value starts after the 12 columns of the labels, the cache rows too") {
  // Before: "cache user cache <dir> ..." ran past the labels' column; "cache bundle <dir>" only just fit.
  TempDir work("flashgen-cli-info-columns");
  const std::string bundle = work.path() + "/bundle", user = work.path() + "/user";
  std::filesystem::create_directory(bundle);
  ::chmod(bundle.c_str(), 0755);
  const Run info = run_cli({"info", "--arch", "80"}, {"FLASHGEN_CACHE_DIR=" + user, "FLASHGEN_CACHE_PATH=" + bundle,
                                                      "FLASHGEN_TUNE_FILE=", "FLASHGEN_PROFILE="});
  INFO("info:\n", info.out);
  CHECK(info.rc == 0);
  CHECK(contains(info.out, "cache        bundle " + bundle + " (FLASHGEN_CACHE_PATH): searched first, read-only\n"));
  CHECK(contains(info.out, "cache        user cache " + user + " (FLASHGEN_CACHE_DIR): does not exist"));
  CHECK(contains(info.out, "cache        memory: unused (the user cache is writable)\n"));
  for (const std::string& line : lines(info.out)) {
    CAPTURE(line);
    REQUIRE(line.size() > 13);
    CHECK(line[12] == ' ');  // (a label of 12 characters, "tune file" and the rest padded to 12)
    CHECK(line[13] != ' ');
  }
}

TEST_CASE("cli: explain counts a tile of one warp and one stage, and a grid of one block, in the singular") {
  TempDir work("flashgen-cli-explain-one");
  const Run r = run_cli({"explain", "--problem", "dtype=f16,seqlen=16,heads=1,head_dim=64", "--arch", "80",
                         "--no-compile", "--tile", "16x64x1x1"},
                        base_env(work.path() + "/cache"));
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "block_m 16, block_n 64, 1 warp (32 threads), 1 stage; from --tile"));
  CHECK(contains(r.out, " + 1 stage x (K "));
  CHECK(contains(r.out, "grid         1 block (ceil(seqlen_q / block_m)"));
}

TEST_CASE("cli: explain's shared memory: the region of block_m x max(head_dim, head_dim_v) is Q/O, not Q") {
  // The first region holds the Q tile and then stages the O tile (KernelSpec::smem_bytes; sO = sQ in the
  // templates): with head_dim_v > head_dim it is sized by O. Before it was labelled "Q".
  TempDir work("flashgen-cli-explain-smem");
  for (const int arch : {80, 90}) {
    CAPTURE(arch);
    const std::string problem = "dtype=f16,seqlen=1024,heads=4,head_dim=64,head_dim_v=128";
    const KernelSpec spec = plan(cli::to_problem(cli::parse_problem_text(problem)), arch);
    const Run r = run_cli({"explain", "--problem", problem, "--arch", std::to_string(arch), "--no-compile"},
                          base_env(work.path() + "/cache"));
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 0);
    const int64_t region = 2 * int64_t{spec.tile.block_m} * 128;  // block_m x head_dim_v, 2-byte elements
    CHECK(contains(r.out, fmt::format("smem         {} bytes = Q/O {} (Q, then O staged for the store) + ",
                                      spec.smem_bytes(), region)));
    CHECK_FALSE(contains(r.out, " = Q " + std::to_string(region)));
  }
}

TEST_CASE("cli: explain and tune describe a block's warps alike: a wgmma tile's consumer and producer warps") {
  // Before: explain said "16 warps, producer warpgroups included" where tune's occupancy column said "1 x 12w".
  TempDir work("flashgen-cli-warps");
  const auto env = base_env(work.path() + "/cache");
  const std::string problem = "dtype=bf16,seqlen=4096,heads=32,head_dim=96";
  const KernelSpec spec = plan(cli::to_problem(cli::parse_problem_text(problem)), 90);
  REQUIRE(spec.unit == MatrixUnit::wgmma);
  REQUIRE(spec.tile == Tile{192, 96, 12, 2});  // (the hopper profile's three-warpgroup D96 row)
  const Run ex = run_cli({"explain", "--problem", problem, "--arch", "90", "--no-compile"}, env);
  INFO("explain:\n", ex.out, ex.err);
  REQUIRE(ex.rc == 0);
  CHECK(contains(ex.out, "tile         block_m 192, block_n 96, 12 consumer warps + 4 producer warps (TMA) (512 "
                         "threads), 2 stages; from "));
  CHECK(contains(ex.out, "occupancy    1 block per SM (1 x 12+4w: 16 warps, 12 consumer + 4 producer each), limited "
                         "by "));
  CHECK_FALSE(contains(ex.out, "producer warpgroups included"));
  const Run tune = run_cli({"tune", "--dry-run", "--arch", "90", "--problem", problem}, env);
  INFO("tune:\n", tune.out, tune.err);
  REQUIRE(tune.rc == 0);
  CHECK(contains(tune.out, "occupancy: blocks per SM x warps per block; C+Pw: C consumer warps + P producer warps"));
  bool found = false;
  for (const std::string& l : lines(tune.out)) {
    if (!contains(l, " bm192 bn96 w12 s2 ")) continue;
    found = true;
    CHECK(contains(l, " 1 x 12+4w "));  // the occupancy explain gives the same tile
    CHECK(contains(l, "(profile default)"));
  }
  CHECK(found);
  CHECK_FALSE(contains(tune.out, "x 12w"));
  // mma.sync: every warp computes, the same notation without a producer.
  const int warps = plan(cli::to_problem(cli::parse_problem_text(problem)), 80).tile.warps;
  const Run ampere = run_cli({"explain", "--problem", problem, "--arch", "80", "--no-compile"}, env);
  CHECK(ampere.rc == 0);
  CHECK(contains(ampere.out, fmt::format(", {} warps ({} threads), ", warps, 32 * warps)));
  const std::regex occupancy(
      fmt::format(R"(occupancy    [0-9]+ blocks? per SM \([0-9]+ x {}w: [0-9]+ warps\), )", warps));
  CHECK(std::regex_search(ampere.out, occupancy));
}

TEST_CASE("cli: tune needs a GPU, its dry run does not; tune files reach pregen and explain through --device") {
  TempDir work("flashgen-cli-tune");
  const auto env = base_env(work.path() + "/cache");
  const std::string llama = "dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr";
  if (!gpu_available()) {
    const Run r = run_cli({"tune", "--problem", llama}, env);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen tune: error:"));
    CHECK(contains(r.err, "--dry-run"));
  }
  const Run dry = run_cli({"tune", "--dry-run", "--arch", "90", "--problem", llama}, env);
  INFO("dry run:\n", dry.out, dry.err);
  CHECK(dry.rc == 0);
  CHECK(contains(dry.out, "tiles fit the profile's shared-memory and register budgets"));
  CHECK(contains(dry.out, "(profile default)"));
  // --compile-only: the candidates through NVRTC, re-ranked with ptxas's registers and spills.
  const Run co = run_cli({"tune", "--compile-only", "--arch", "80", "--compile", "3", "--top", "1", "--problem",
                          "dtype=f16,seqlen=256,heads=2,head_dim=32"},
                         env);
  INFO("compile-only:\n", co.out, co.err);
  CHECK(co.rc == 0);
  CHECK(contains(co.out, "candidates compiled and ranked, not timed"));
  CHECK(contains(co.out, "<- profile default"));
  size_t timed = 0;
  for (const std::string& l : lines(co.out)) timed += l.rfind("   time ", 0) == 0 ? 1 : 0;
  CHECK(timed == 2);  // the best by the model and the profile's default
  // --dry-run (the model only, nothing compiled) and --compile-only (compile, then re-rank) are two different
  // stops: given together, neither is dropped without a word.
  const Run both = run_cli({"tune", "--dry-run", "--compile-only", "--arch", "80", "--problem",
                            "dtype=f16,seqlen=256,heads=2,head_dim=32"},
                           env);
  INFO("both:\n", both.out, both.err);
  CHECK(both.rc == 2);
  CHECK(contains(both.err, "flashgen tune: error: --dry-run and --compile-only exclude each other"));
  CHECK(both.out.empty());

  // A tune file made on "CLI Test GPU" for this class.
  const std::string tune = work.path() + "/tune.yml";
  save_one_entry_tune_file(tune, "CLI Test GPU", llama, Tile{128, 32, 8, 2}, 300);
  std::ofstream(work.path() + "/p.yml") << "problems:\n  - {dtype: f16, seqlen: 4096, heads_q: 32, heads_kv: 8, "
                                           "head_dim: 128, mask: causalbr}\n";
  const Run tuned = run_cli({"pregen", "--arch", "90", "--problems", work.path() + "/p.yml", "--device",
                             "CLI Test GPU", "--tune-file", tune, "--list"},
                            env);
  CHECK(tuned.rc == 0);
  CHECK(contains(tuned.out, "bm=128,bn=32,w=8,s=2"));
  const Run other = run_cli({"pregen", "--arch", "90", "--problems", work.path() + "/p.yml", "--device", "Other GPU",
                             "--tune-file", tune, "--list"},
                            env);
  CHECK(other.rc == 0);
  CHECK_FALSE(contains(other.out, "bm=128,bn=32,w=8,s=2"));
  CHECK(contains(other.err, "is ignored: it was measured on 'CLI Test GPU', this device is 'Other GPU'"));
  auto tenv = env;
  tenv.push_back("FLASHGEN_TUNE_FILE=" + tune);
  const Run ex = run_cli({"explain", "--problem", llama, "--arch", "90", "--device", "CLI Test GPU", "--no-compile"},
                         tenv);
  CHECK(ex.rc == 0);
  CHECK(contains(ex.out, "from tune file " + tune + " (CLI Test GPU, 300.0 TFLOP/s measured)"));
}

TEST_CASE("cli: progress is a bar on a terminal and plain lines on a pipe") {
  REQUIRE(rt::nvrtc_available());
  TempDir work("flashgen-cli-progress");
  const auto env = base_env(work.path() + "/cache");
  const std::vector<std::string> args = {"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16",
                                         "--masks", "none,causalbr", "-j", "1"};
  const Run tty = run_cli_pty(args, env);
  INFO("terminal output: ", tty.out);
  CHECK(tty.rc == 0);
  CHECK(contains(tty.out, "\r\033[K"));    // redrawn in place
  CHECK(contains(tty.out, "pregen ["));    // a bar
  CHECK(contains(tty.out, "] 2/2 "));      // count
  CHECK(contains(tty.out, "/s ETA "));     // rate and ETA
  CHECK(contains(tty.out, "ETA done"));
  CHECK_FALSE(contains(tty.out, "[1/2] compiled"));
  CHECK(contains(tty.out, "pregen: 2 kernels in"));

  const Run pipe = run_cli(args, base_env(work.path() + "/cache2"));
  INFO("pipe stderr: ", pipe.err);
  CHECK(pipe.rc == 0);
  CHECK(contains(pipe.err, "[1/2] compiled flashgen_fwd_sm80_f16_d16v16_"));
  CHECK(contains(pipe.err, "[2/2] compiled flashgen_fwd_sm80_f16_d16v16_"));
  CHECK_FALSE(contains(pipe.err, "\r"));
  CHECK_FALSE(contains(pipe.err, "\033"));
  CHECK(contains(pipe.out, "pregen: 2 kernels in"));
}

TEST_CASE("cli: pregen's summary says 1 kernel, 1 thread, and gives a small size in KiB, not 0.0 MiB") {
  REQUIRE(rt::nvrtc_available());
  TempDir work("flashgen-cli-summary");
  const auto env = base_env(work.path() + "/cache");
  const std::string bundle = work.path() + "/bundle";
  const Run r = run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none", "-j",
                         "1", "--out", bundle},
                        env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.err, "flashgen pregen: 1 kernel for sm_80 into bundle " + bundle + " on 1 thread\n"));
  CHECK(contains(r.out, "pregen: 1 kernel in "));
  CHECK(contains(r.out, " (wall) on 1 thread: 1 compiled"));
  CHECK_FALSE(contains(r.out, "pregen: 1 kernels"));  // (the rate, e.g. "2.21 kernels/s", stays plural)
  CHECK_FALSE(contains(r.out, "on 1 threads"));
  CHECK(contains(r.out, " kernels/s), 0 already present"));
  // One small cubin: its size in KiB (a d16 kernel is tens of KiB), as the files add up.
  uint64_t bytes = 0;
  for (const std::string& f : test::list_dir(bundle))
    if (f.ends_with(".cubin")) bytes += std::filesystem::file_size(bundle + "/" + f);
  REQUIRE(bytes >= 1024);
  REQUIRE(bytes < 1024 * 1024);
  CHECK(contains(r.out, fmt::format("pregen: into bundle {} ({:.1f} KiB of cubins)", bundle, bytes / 1024.0)));
  CHECK_FALSE(contains(r.out, "0.0 MiB"));
  // Present the second time: the same words.
  const Run again = run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none", "-j",
                             "1", "--out", bundle},
                            env);
  CHECK(again.rc == 0);
  CHECK(contains(again.out, "pregen: 1 kernel in "));
  CHECK(contains(again.out, "1 already present"));
  // Nothing compiled: no NVRTC time and no rate (before: "0 compiled (0.0 s of NVRTC, 1895.75 kernels/s)").
  CHECK(contains(again.out, " (wall) on 1 thread: 0 compiled, 1 already present, 0 failed"));
  CHECK_FALSE(contains(again.out, "kernels/s"));
}

TEST_CASE("cli: pregen's summary says where the kernels are: written, already in the target, or in a read-only bundle") {
  REQUIRE(rt::nvrtc_available());
  TempDir work("flashgen-cli-summary-where");
  const std::string bundle = work.path() + "/bundle", user = work.path() + "/user";
  const std::vector<std::string> one = {"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "-j", "1"};
  const auto cubin_kib = [](const std::string& dir) {
    uint64_t bytes = 0;
    for (const std::string& f : test::list_dir(dir))
      if (f.ends_with(".cubin")) bytes += std::filesystem::file_size(dir + "/" + f);
    return fmt::format("{:.1f} KiB", bytes / 1024.0);
  };
  // A bundle with the mask-none kernel.
  REQUIRE(run_cli(with(one, {"--masks", "none", "--out", bundle}), base_env(work.path() + "/producer")).rc == 0);
  const std::string bundle_kib = cubin_kib(bundle);
  const std::vector<std::string> env = {"FLASHGEN_CACHE_DIR=" + user, "FLASHGEN_CACHE_PATH=" + bundle,
                                        "FLASHGEN_TUNE_FILE=", "FLASHGEN_PROFILE="};

  // Everything in the bundle: nothing is written into the user cache, and the summary says so (before:
  // "pregen: into user cache <user> (... of cubins)", counting the bundle's cubins as written there).
  const Run found = run_cli(with(one, {"--masks", "none"}), env);
  INFO("stdout:\n", found.out, "\nstderr:\n", found.err);
  CHECK(found.rc == 0);
  CHECK(contains(found.out, "0 compiled, 1 already present, 0 failed"));
  CHECK(contains(found.out, "pregen: nothing written into user cache " + user + "; 1 kernel already in bundle " +
                                bundle + " (read-only; " + bundle_kib + " of cubins)\n"));
  CHECK_FALSE(contains(found.out, "pregen: into "));
  CHECK(test::list_dir(user).empty());

  // One kernel in the bundle, one compiled: each where it is.
  const Run mixed = run_cli(with(one, {"--masks", "none,causaltl"}), env);
  INFO("stdout:\n", mixed.out, "\nstderr:\n", mixed.err);
  CHECK(mixed.rc == 0);
  CHECK(contains(mixed.out, "1 compiled ("));
  CHECK(contains(mixed.out, "pregen: into user cache " + user + " (" + cubin_kib(user) + " of cubins); 1 kernel "
                                "already in bundle " + bundle + " (read-only; " + bundle_kib + " of cubins)\n"));

  // Both present, one in each: nothing written.
  const Run again = run_cli(with(one, {"--masks", "none,causaltl"}), env);
  INFO("stdout:\n", again.out, "\nstderr:\n", again.err);
  CHECK(again.rc == 0);
  CHECK(contains(again.out, "pregen: nothing written into user cache " + user + "; 1 kernel already there (" +
                                cubin_kib(user) + " of cubins); 1 kernel already in bundle " + bundle +
                                " (read-only; " + bundle_kib + " of cubins)\n"));

  // --out: the bundle being written is the target, whatever FLASHGEN_CACHE_PATH lists.
  const Run out_again = run_cli(with(one, {"--masks", "none", "--out", bundle}), env);
  INFO("stdout:\n", out_again.out, "\nstderr:\n", out_again.err);
  CHECK(out_again.rc == 0);
  CHECK(contains(out_again.out, "pregen: nothing written into bundle " + bundle + "; 1 kernel already there (" +
                                    bundle_kib + " of cubins)\n"));
}

TEST_CASE("cli: --help on every subcommand; usage errors on stderr with a non-zero exit") {
  TempDir work("flashgen-cli-help");
  const auto env = base_env(work.path() + "/cache");
  for (const char* sub : {"", "pregen", "tune", "explain", "show", "cache", "info"}) {
    CAPTURE(sub);
    std::vector<std::string> args;
    if (*sub) args.push_back(sub);
    args.push_back("--help");
    const Run r = run_cli(args, env);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "Usage:"));
    CHECK(r.err.empty());
  }
  struct Bad {
    std::vector<std::string> args;
    const char* err;
  };
  for (const Bad& b : std::vector<Bad>{
           {{}, "subcommand is required"},
           {{"frobnicate"}, "frobnicate"},
           {{"pregen", "--bogus"}, "--bogus"},
           {{"explain"}, "--problem is required"},
           {{"cache", "shred"}, "shred"},
           {{"pregen", "--arch", "eighty"}, "eighty"},
           {{"explain", "--problem", "head_dim=64"}, "flashgen explain: error:"},
           {{"explain", "--problem", "dtype=f16,seqlen=1,heads=1,head_dim=64", "--tile", "big"},
            "is not BLOCK_MxBLOCK_NxWARPSxSTAGES"},
       }) {
    CAPTURE(b.args.size() > 0 ? b.args[0] : std::string("(none)"));
    const Run r = run_cli(b.args, env);
    CHECK(r.rc != 0);
    INFO("stderr: ", r.err);
    CHECK(contains(r.err, b.err));
  }
}

TEST_CASE("cli: --version prints the library's version (the project's in CMakeLists.txt) and exits 0") {
  TempDir work("flashgen-cli-version");
  const std::string cmake = read_text(FLASHGEN_SOURCE_DIR "/CMakeLists.txt");
  std::smatch m;
  REQUIRE(std::regex_search(cmake, m, std::regex(R"(project\(flashgen VERSION ([0-9]+\.[0-9]+\.[0-9]+))")));
  const std::string version = m[1];
  const Run r = run_cli({"--version"}, base_env(work.path() + "/cache"));
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  CHECK(r.rc == 0);
  CHECK(r.out.rfind("flashgen " + version + " (libflashgen " + version + "; code generator " + kGeneratorVersion +
                        ", kernel cache format " + std::to_string(rt::kCacheFormatVersion) + ")\n",
                    0) == 0);
  CHECK(r.err.empty());
  CHECK(contains(run_cli({"--help"}, base_env(work.path() + "/cache")).out, "--version"));
}

// ---------------------------------------------------------------------------
// Numbers, aliases, cache directories and configuration errors (issue 11,
// items 4-6). The family: every numeric option of every subcommand, found by
// walking the application main() builds, refuses what lies outside its stated
// range before CLI11 converts it; every number inside a text argument (problem
// keys, YAML problem files, tiles, head dims) is range-checked by the parser;
// the binary turns each refusal into exit status 2 and a message that names
// the argument, the value and what is allowed.
// ---------------------------------------------------------------------------

namespace {

// The arguments a subcommand needs besides the option under test.
std::vector<std::string> required_args(const std::string& sub) {
  if (sub == "explain") return {"--problem", "dtype=f16,seqlen=1,heads=1,head_dim=64"};
  if (sub == "cache") return {"ls"};
  return {};
}

// Parses `args` with the tool's own application (nothing runs). Returns ""
// when the parse succeeds, else the CLI11 error message; `validation` says
// whether it was an option check (not some other usage error).
std::string parse_only(const std::vector<std::string>& args, bool* validation) {
  CLI::App app{"flashgen"};
  app.require_subcommand(1);
  cli::Commands commands;
  cli::add_commands(app, commands);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  *validation = false;
  try {
    app.parse(reversed);
  } catch (const CLI::ValidationError& e) {
    *validation = true;
    return e.what();
  } catch (const CLI::ParseError& e) {
    return std::string("not a validation error: ") + e.what();
  }
  return "";
}

struct NumericOption {
  std::string sub, name;
  bool integer;
  double lo, hi;
};

// Every option of every subcommand whose value CLI11 reads as a number.
std::vector<NumericOption> numeric_options() {
  CLI::App app{"flashgen"};
  cli::Commands commands;
  cli::add_commands(app, commands);
  std::vector<NumericOption> out;
  const std::regex range(R"((INT|NUMBER) in \[(-?[0-9.e+]+), (-?[0-9.e+]+)\])");
  for (const CLI::App* sub : app.get_subcommands({})) {
    for (const CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      const bool numeric = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0 ||
                           type.rfind("NUMBER", 0) == 0;
      if (!numeric) continue;
      NumericOption n{sub->get_name(), opt->get_name(), type.rfind("FLOAT", 0) != 0, 0, 0};
      CAPTURE(n.sub);
      CAPTURE(n.name);
      CAPTURE(type);
      std::smatch m;
      // A numeric option without a range check is the defect this family exists for.
      REQUIRE_MESSAGE(std::regex_search(type, m, range), "numeric option without a stated range check");
      CHECK((m[1] == "INT") == n.integer);
      n.lo = std::stod(m[2]);
      n.hi = std::stod(m[3]);
      out.push_back(n);
    }
  }
  return out;
}

std::string number_text(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("cli numbers: every numeric option of every subcommand checks its range before conversion") {
  const std::vector<NumericOption> options = numeric_options();
  // The ones the issue names are among them (the walk really sees the options).
  std::vector<std::string> seen;
  for (const NumericOption& o : options) seen.push_back(o.sub + " " + o.name);
  for (const char* must : {"pregen --arch", "pregen --jobs", "tune --top", "tune --compile", "tune --runs",
                           "tune --warmup", "tune --jobs", "tune --arch", "explain --arch", "explain --sms",
                           "show --arch", "cache --older-than", "cache --temp-age", "info --arch"}) {
    CAPTURE(must);
    CHECK(std::find(seen.begin(), seen.end(), must) != seen.end());
  }
  for (const NumericOption& o : options) {
    CAPTURE(o.sub);
    CAPTURE(o.name);
    std::vector<std::string> bad = {"99999999999999999999", "-99999999999999999999", "nan", "inf", "-inf", "1e300",
                                    "12abc", "0x10", " 5", "+5", number_text(o.lo - 1), number_text(o.hi + 1)};
    if (o.integer) bad.insert(bad.end(), {"99999999999", "1.5", "1e3"});
    for (const std::string& v : bad) {
      CAPTURE(v);
      std::vector<std::string> args = with({o.sub}, required_args(o.sub));
      args = with(args, {o.name, v});
      bool validation = false;
      const std::string err = parse_only(args, &validation);
      CHECK(validation);
      CHECK(contains(err, o.name));
      CHECK(contains(err, "'" + v + "'"));
      CHECK(contains(err, "must be"));
      CHECK(contains(err, "[" + number_text(o.lo) + ", " + number_text(o.hi) + "]"));
    }
    for (const double v : {o.lo, o.hi, std::floor((o.lo + o.hi) / 2)}) {
      CAPTURE(v);
      bool validation = false;
      CHECK(parse_only(with(with({o.sub}, required_args(o.sub)), {o.name, number_text(v)}), &validation) == "");
    }
  }
}

TEST_CASE("cli: an option given without its value is refused by name, not fed the next option's name") {
  // Before: `--head-dims --dtypes f16` gave "--head-dims has value '--dtypes': must be D or D:DV ...",
  // `--out --jobs 1` "the following argument was not expected: 1", and `--out --list` compiled into ./--list.
  // Every option of every subcommand that takes a value, found by walking the application main() builds.
  CLI::App app{"flashgen"};
  cli::Commands commands;
  cli::add_commands(app, commands);
  std::vector<std::pair<std::string, std::string>> options;  // (subcommand, option)
  for (const CLI::App* sub : app.get_subcommands({}))
    for (const CLI::Option* opt : sub->get_options())
      if (opt->nonpositional() && opt->get_expected_max() > 0) options.emplace_back(sub->get_name(), opt->get_name());
  for (const char* must : {"pregen --head-dims", "pregen --lse", "pregen --out", "pregen --jobs", "tune --problem",
                           "explain --problem", "explain --tile", "show --spec", "cache --dir", "info --arch"}) {
    CAPTURE(must);
    CHECK(std::find_if(options.begin(), options.end(), [&](const auto& o) { return o.first + " " + o.second == must; }) !=
          options.end());
  }
  for (const auto& [sub, name] : options) {
    for (const std::string& next : {std::string("--list"), std::string("--"), std::string("--no-such-option")}) {
      CAPTURE(sub);
      CAPTURE(name);
      CAPTURE(next);
      std::vector<std::string> args = {sub};
      if (name != "--problem") args = with(args, required_args(sub));
      bool validation = false;
      const std::string err = parse_only(with(args, {name, next}), &validation);
      CHECK(validation);
      CHECK(contains(err, name + ": needs a value (got the option '" + next + "'"));
    }
  }
  // The binary: exit 2, the option and what it got, nothing run.
  TempDir work("flashgen-cli-no-value");
  const auto env = base_env(work.path() + "/cache");
  const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
  check_usage_errors(
      {
          {{"pregen", "--arch", "80", "--head-dims", "--dtypes", "f16", "--list"},
           {"--head-dims: needs a value (got the option '--dtypes'; a value cannot begin with '--')"}},
          {{"pregen", "--arch", "--head-dims", "64", "--list"}, {"--arch: needs a value (got the option '--head-dims'"}},
          {{"pregen", "--arch", "80", "--list", "--out", "--jobs", "1"}, {"--out: needs a value (got the option '--jobs'"}},
          {{"pregen", "--arch", "80", "--list", "--lse", "--dtypes", "f16"}, {"--lse: needs a value (got the option '--dtypes'"}},
          {{"pregen", "--arch", "80", "--list", "-j", "--masks", "none"}, {"--jobs: needs a value (got the option '--masks'"}},
          {{"explain", "--problem", "--arch", "80"}, {"--problem: needs a value (got the option '--arch'"}},
          {{"explain", "--problem", p, "--tile", "--sms", "3"}, {"--tile: needs a value (got the option '--sms'"}},
          {{"show", "--problem", "--tile", "64x64x4x2"}, {"--problem: needs a value (got the option '--tile'"}},
          {{"tune", "--dry-run", "--problem", "--arch", "80"}, {"--problem: needs a value (got the option '--arch'"}},
          {{"cache", "ls", "--dir", "--dry-run"}, {"--dir: needs a value (got the option '--dry-run'"}},
          {{"info", "--arch", "--help"}, {"--arch: needs a value (got the option '--help'"}},
      },
      env);
  CHECK_FALSE(std::filesystem::exists(work.path() + "/cache"));
  // A value that merely contains "--", or a negative number, is still a value.
  bool validation = false;
  CHECK(parse_only({"pregen", "--out", "a--b", "--device", "GPU --x"}, &validation) == "");
  CHECK(contains(parse_only({"pregen", "-j", "-1"}, &validation), "'-1' is not allowed"));
}

TEST_CASE("cli: pregen's no/yes options given an empty value name it, the value and what is allowed") {
  // Before: "--lse has no value: give no, yes or no,yes", without the value it was given.
  TempDir work("flashgen-cli-empty-yes-no");
  const auto env = base_env(work.path() + "/cache");
  std::vector<UsageError> cases;
  for (const char* option : {"--lse", "--softcap", "--sinks", "--alibi", "--varlen", "--paged"}) {
    for (const char* value : {"", ","}) {
      cases.push_back({{"pregen", "--arch", "80", "--list", option, value},
                       {fmt::format("{} has no value ('{}'): give no, yes or no,yes, or leave {} out for its default",
                                    option, value, option)}});
    }
  }
  check_usage_errors(cases, env);
}

TEST_CASE("cli numbers: the binary refuses out-of-range values with exit 2, naming argument, value and range") {
  TempDir work("flashgen-cli-numbers");
  const std::string dir = work.path() + "/cache";
  const auto env = base_env(dir);
  const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
  check_usage_errors({
           {{"explain", "--problem", p, "--arch", "80", "--no-compile", "--tile", "99999999999x64x8x2"},
            {"--tile has value '99999999999x64x8x2'", "BLOCK_M '99999999999' must be an integer in [1, 256]"}},
           {{"show", "--problem", p, "--arch", "80", "--tile", "128x0x4x2"}, {"BLOCK_N '0' must be an integer in [1, 256]"}},
           {{"pregen", "--arch", "80", "--list", "--tiles", "128x64x99999999999x2"},
            {"--tiles has value", "WARPS '99999999999' must be an integer in [1, 16]"}},
           {{"pregen", "--arch", "80", "--list", "--tiles", "128x64x4"}, {"not BLOCK_MxBLOCK_NxWARPSxSTAGES"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "99999999999"},
            {"--head-dims has value '99999999999'", "multiples of 8 in [16, 256]"}},
           // Head dims no kernel takes: refused as values (exit 2), before any planning.
           {{"pregen", "--arch", "80", "--list", "--head-dims", "100"},
            {"--head-dims has value '100': must be D or D:DV (e.g. 96 or 192:128) with D and DV multiples of 8 in [16, "
             "256]"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "64,320"}, {"--head-dims has value '320'", "[16, 256]"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "128:100"}, {"--head-dims has value '128:100'"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "8"}, {"--head-dims has value '8'"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "0"}, {"--head-dims has value '0'"}},
           {{"pregen", "--arch", "80", "--head-dims", "100"}, {"--head-dims has value '100'"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "64:-99999999999"}, {"'64:-99999999999'"}},
           {{"pregen", "--arch", "80", "--list", "-j", "-1"}, {"--jobs", "'-1'", "[0, 4096]"}},
           {{"pregen", "--arch", "80", "--list", "--softcap", "maybe"}, {"--softcap: 'maybe' is not one of no, yes"}},
           {{"pregen", "--arch", "80", "--list", "--sinks", "2"}, {"--sinks: '2' is not one of no, yes"}},
           {{"pregen", "--arch", "80", "--list", "--alibi", "on"}, {"--alibi: 'on' is not one of no, yes"}},
           {{"pregen", "--arch", "80", "--list", "--alibi", ""}, {"--alibi has no value"}},
           {{"pregen", "--arch", "80", "--list", "--sinks", ","}, {"--sinks has no value"}},
           {{"pregen", "--arch", "80", "--list", "--varlen", "maybe"}, {"--varlen: 'maybe' is not one of no, yes"}},
           {{"pregen", "--arch", "80", "--list", "--varlen", ""}, {"--varlen has no value"}},
           {{"pregen", "--arch", "80", "--list", "--paged", "maybe"}, {"--paged: 'maybe' is not one of no, yes"}},
           {{"pregen", "--arch", "80", "--list", "--paged", ""}, {"--paged has no value"}},
           // An empty item beside others is refused too, as an empty field of --problem is.
           {{"pregen", "--arch", "80", "--list", "--head-dims", "64,"},
            {"--head-dims has an empty item in '64,' (a leading, trailing or doubled ',')"}},
           {{"pregen", "--arch", "80", "--list", "--dtypes", ",f16"}, {"--dtypes has an empty item in ',f16'"}},
           {{"pregen", "--arch", "80", "--list", "--lse", "no,,yes"}, {"--lse has an empty item in 'no,,yes'"}},
           {{"pregen", "--arch", "80", "--list", "--tiles", "default,"}, {"--tiles has an empty item in 'default,'"}},
           {{"pregen", "--arch", "80,", "--list"}, {"--arch has an empty item in '80,'"}},
           {{"pregen", "--arch", "80", "--arch", "", "--list"}, {"--arch is given 2 times, once with the empty value ''"}},
           // A space separates nothing: the item keeps it and its check refuses it, as --arch's does.
           {{"pregen", "--arch", "80", "--list", "--head-dims", "64 128"}, {"--head-dims has value '64 128'"}},
           {{"pregen", "--arch", "80", "--list", "--head-dims", "64, 128"}, {"--head-dims has value ' 128'"}},
           {{"pregen", "--arch", "80", "--list", "--dtypes", "f16 bf16"}, {"--dtypes: 'f16 bf16' is not a known dtype"}},
           {{"pregen", "--arch", "80", "--list", "--tiles", "128x64x8x2 "}, {"--tiles has value '128x64x8x2 '"}},
           {{"pregen", "--arch", "70", "--list", "--dtypes", "bf16", "--head-dims", "64", "--masks", "none"},
            {"its only flag combination was skipped"}},
           {{"pregen", "--arch", ",", "--list"}, {"--arch has no value (',')"}},
           {{"pregen", "--arch", "80", "--list", "--profile", "hopper,"}, {"--profile has an empty item in 'hopper,'"}},
           {{"show", "--spec", ""}, {"--spec: an empty spec; give a canonical spec string"}},
           {{"show", "--problem", ""}, {"--problem: an empty problem; give key=value,..."}},
           {{"pregen", "--arch", "80", "--list", "--masks", "window"},
            {"--masks: 'window' is not a known mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr"}},
           {{"pregen", "--arch", "80,99999999999", "--list"}, {"--arch", "'99999999999'", "[10, 999]"}},
           {{"explain", "--problem", p, "--sms", "0"}, {"--sms", "'0'", "[1, 4096]"}},
           {{"explain", "--problem", p, "--arch", "0"}, {"--arch", "'0'", "[10, 999]"}},
           {{"cache", "prune", "--temp-age", "1e300"}, {"--temp-age", "'1e300'", "finite number in [0, "}},
           {{"cache", "prune", "--temp-age", "nan"}, {"--temp-age", "'nan'"}},
           {{"cache", "prune", "--temp-age", "-1"}, {"--temp-age", "'-1'"}},
           {{"cache", "prune", "--older-than", "1e300"}, {"--older-than", "'1e300'", "[0, 36500]"}},
           {{"tune", "--dry-run", "--problem", p, "--top", "99999999999"}, {"--top", "'99999999999'", "[1, 64]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=99999999999999999999,heads=1,head_dim=64"},
            {"key 'seqlen' has value '99999999999999999999': must be an integer in [0, 1099511627776]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,seqlen_q=64,heads=1,head_dim=64"},
            {"key 'seqlen_q' cannot be combined with key 'seqlen'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,heads_q=16,head_dim=64"},
            {"key 'heads_q' cannot be combined with key 'heads'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,softcap=-1"},
            {"key 'softcap' has value '-1': must be 0 (off) or a cap in ["}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,softcap=nan"}, {"key 'softcap' has value 'nan'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,softcap=1e300"}, {"key 'softcap' has value '1e300'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,softcap=1e-40"}, {"key 'softcap' has value '1e-40'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,softcap=1025"},
            {"key 'softcap' has value '1025': must be 0 (off) or a cap in [1.1754944e-38, 1024]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,mask=windowtl,window_left=-2"},
            {"key 'window_left' has value '-2': must be an integer in [-1, 1099511627776]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,mask=windowbr,window_right=1.5"},
            {"key 'window_right' has value '1.5': must be an integer in [-1, 1099511627776]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,sinks=maybe"},
            {"key 'sinks' has value 'maybe': allowed: true, false (or 1, 0, yes, no)"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,alibi=2"},
            {"key 'alibi' has value '2': allowed: true, false (or 1, 0, yes, no)"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,window=3"},
            {"key 'window' is unknown; allowed keys: name, dtype, batch, seqlen, seqlen_q, seqlen_k, heads, heads_q, "
             "heads_kv, head_dim, head_dim_v, mask, bias, lse, softcap, window_left, window_right, sinks, alibi, "
             "seqlens_q, seqlens_k, seqused_k, page_size"}},
           // Packed batches: both lists, the same count, each length and each sum in int32, no conflicting batch or
           // bound, seqused_k only with them.
           {{"explain", "--problem", "dtype=f16,seqlens_q=100:50,heads=8,head_dim=64"},
            {"key 'seqlens_k' is missing: seqlens_q and seqlens_k describe a packed batch together"}},
           {{"explain", "--problem", "dtype=f16,seqlens_k=100:50,heads=8,head_dim=64"}, {"key 'seqlens_q' is missing"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=100:50:7,seqlens_k=100:50,heads=8,head_dim=64"},
            {"key 'seqlens_k' has 2 lengths and 'seqlens_q' 3: a packed batch has one of each per sequence"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=100:-1,seqlens_k=100:50,heads=8,head_dim=64"},
            {"key 'seqlens_q' has value '100:-1': length 2 ('-1') must be an integer in [0, 2147483647] (one length "
             "per sequence, separated by ':'"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=100:50,seqlens_k=100:2147483648,heads=8,head_dim=64"},
            {"key 'seqlens_k' has value '100:2147483648': length 2 ('2147483648') must be an integer in [0, "
             "2147483647]"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=2147483647:1,seqlens_k=1:1,heads=8,head_dim=64"},
            {"key 'seqlens_q' has value '2147483647:1': the first 2 lengths add up to 2147483648, more than "
             "2147483647 = 2^31 - 1 (a packed batch's rows are counted by int32 offsets, cu_seqlens)"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=1:1.5,seqlens_k=1:1,heads=8,head_dim=64"},
            {"key 'seqlens_q' has value '1:1.5': length 2 ('1.5') must be an integer"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=1::2,seqlens_k=1:1:2,heads=8,head_dim=64"},
            {"key 'seqlens_q' has value '1::2': length 2 ('') must be an integer"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=,seqlens_k=1,heads=8,head_dim=64"},
            {"key 'seqlens_q' has value '': length 1 ('') must be an integer"}},
           // (before: an empty name was taken, against "an empty value is refused the same way")
           {{"explain", "--problem", "name=,dtype=f16,seqlen=64,heads=8,head_dim=64"},
            {"key 'name' has value '': must be a non-empty label"}},
           {{"explain", "--problem", "dtype=f16,batch=4,seqlens_q=100:50:7,seqlens_k=100:50:7,heads=8,head_dim=64"},
            {"key 'batch' (4) conflicts with 'seqlens_q' (3 sequences): a packed batch has one sequence per length; "
             "leave batch out or make it 3"}},
           {{"explain", "--problem", "dtype=f16,seqlen_q=50,seqlens_q=100:50,seqlens_k=100:50,heads=8,head_dim=64"},
            {"key 'seqlen_q' (50) is less than the longest of 'seqlens_q' (100): with per-sequence lengths it is "
             "their bound (max_seqlen_q); leave it out or make it at least 100"}},
           {{"explain", "--problem", "dtype=f16,seqlen=100,seqlens_q=100:50,seqlens_k=100:500,heads=8,head_dim=64"},
            {"key 'seqlen' (100) is less than the longest of 'seqlens_k' (500)"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,seqused_k=1"},
            {"key 'seqused_k' is set without 'seqlens_q' and 'seqlens_k'"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=1,seqlens_k=1,heads=8,head_dim=64,seqused_k=maybe"},
            {"key 'seqused_k' has value 'maybe': allowed: true, false (or 1, 0, yes, no)"}},
           {{"explain", "--problem", "dtype=f16,seqlens_q=1,seqlens_q=2,seqlens_k=1,heads=8,head_dim=64"},
            {"key 'seqlens_q' appears more than once"}},
           // Paged KV caches: page_size a power of two in [1, 256].
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=0"},
            {"key 'page_size' has value '0': must be a power of two in [1, 256] (keys per page of a paged KV cache)"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=24"},
            {"key 'page_size' has value '24': must be a power of two in [1, 256]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=512"},
            {"key 'page_size' has value '512': must be a power of two in [1, 256]"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=-16"},
            {"key 'page_size' has value '-16'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=16.0"},
            {"key 'page_size' has value '16.0'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=99999999999999999999"},
            {"key 'page_size' has value '99999999999999999999'"}},
           {{"explain", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64,page_size=16,page_size=32"},
            {"key 'page_size' appears more than once"}},
       },
       env);

  // --temp-age nan must not reach the prune as some integer: an old temp file stays.
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const std::string temp = dir + "/.flashgen_fwd_x-0123456789abcdef.cubin.tmp.1.2.3";
  test::write_bytes(temp, {'x'});
  for (const char* age : {"nan", "-1", "-1e300", "1e300"}) {
    CAPTURE(age);
    CHECK(run_cli({"cache", "prune", "--temp-age", age}, env).rc == 2);
    CHECK(std::filesystem::exists(temp));
  }
  const Run prune = run_cli({"cache", "prune", "--temp-age", "0"}, env);  // in range: it runs
  CHECK(prune.rc == 0);
  CHECK_FALSE(std::filesystem::exists(temp));

  // In range, the same options run.
  CHECK(run_cli({"explain", "--problem", p, "--arch", "80", "--sms", "132", "--no-compile"}, env).rc == 0);
  CHECK(run_cli({"pregen", "--arch", "80", "--head-dims", "64:64", "--dtypes", "f16", "--masks", "none", "--tiles",
                 "128x64x8x2", "-j", "1", "--list"},
                env)
            .rc == 0);
}

TEST_CASE("cli numbers: every numeric problem key, in --problem and in YAML problem files, is range-checked") {
  const std::vector<std::pair<std::string, int64_t>> keys = {
      {"batch", cli::kMaxProblemSize},   {"seqlen", cli::kMaxProblemSize},  {"seqlen_q", cli::kMaxProblemSize},
      {"seqlen_k", cli::kMaxProblemSize}, {"heads", cli::kMaxProblemSize},   {"heads_q", cli::kMaxProblemSize},
      {"heads_kv", cli::kMaxProblemSize}, {"head_dim", cli::kMaxHeadDimArg}, {"head_dim_v", cli::kMaxHeadDimArg}};
  for (const auto& [key, hi] : keys) {
    CAPTURE(key);
    // The rest of a complete problem, without the key under test or an alias of it.
    std::vector<std::string> rest;
    const bool seq = key.rfind("seqlen", 0) == 0, heads = key.rfind("heads", 0) == 0;
    if (!seq) rest.push_back("seqlen=8");
    if (key == "seqlen_k") rest.push_back("seqlen_q=8");
    if (!heads) rest.push_back("heads=1");
    if (key == "heads_kv") rest.push_back("heads_q=1");
    if (key != "head_dim") rest.push_back("head_dim=64");
    auto text_with = [&](const std::string& value) {
      std::string t = key + "=" + value;
      for (const std::string& r : rest) t += "," + r;
      return t;
    };
    auto yaml_with = [&](const std::string& value) {
      std::string t = "problems:\n  - {" + key + ": '" + value + "'";
      for (const std::string& r : rest) t += ", " + r.substr(0, r.find('=')) + ": " + r.substr(r.find('=') + 1);
      return t + "}\n";
    };
    for (const std::string& v : {std::string("99999999999999999999"), std::string("-1"), std::to_string(hi + 1),
                                 std::string("1.5"), std::string("1e3"), std::string("0x10"), std::string(""),
                                 std::string("nan")}) {
      CAPTURE(v);
      const std::string allowed = "must be an integer in [0, " + std::to_string(hi) + "]";
      CHECK_THROWS_WITH_AS(cli::parse_problem_text(text_with(v)),
                           doctest::Contains(("key '" + key + "' has value '" + v + "': " + allowed).c_str()),
                           InvalidArgument);
      CHECK_THROWS_WITH_AS(cli::parse_problem_set(yaml_with(v), "p.yml"),
                           doctest::Contains(("p.yml: key 'problems[0]." + key + "' has value '" + v + "': " + allowed)
                                                 .c_str()),
                           InvalidArgument);
    }
    CHECK_NOTHROW(cli::parse_problem_text(text_with(std::to_string(hi))));
    CHECK_NOTHROW(cli::parse_problem_set(yaml_with("0"), "p.yml"));
  }
}

TEST_CASE("cli problems: an alias and a key it sets are refused together, in either order") {
  for (const auto& [alias, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"seqlen", {"seqlen_q", "seqlen_k"}}, {"heads", {"heads_q", "heads_kv"}}}) {
    for (const std::string& part : parts) {
      CAPTURE(part);
      const std::string base = alias == "seqlen" ? "dtype=f16,heads=1,head_dim=64" : "dtype=f16,seqlen=1,head_dim=64";
      const std::string yaml_base = alias == "seqlen" ? "dtype: f16, heads: 1, head_dim: 64" : "dtype: f16, seqlen: 1, "
                                                                                                "head_dim: 64";
      // alias first: the part is refused; part first: the alias is.
      for (const auto& [first, second] : {std::pair{alias, part}, std::pair{part, alias}}) {
        const std::string message = "key '" + second + "' cannot be combined with key '" + first + "'";
        CHECK_THROWS_WITH_AS(cli::parse_problem_text(base + "," + first + "=64," + second + "=16"),
                             doctest::Contains(message.c_str()), InvalidArgument);
        CHECK_THROWS_WITH_AS(
            cli::parse_problem_set("problems:\n  - {" + yaml_base + ", " + first + ": 64, " + second + ": 16}\n", "p.yml"),
            doctest::Contains(("p.yml: key 'problems[0]." + second + "' cannot be combined with key '" + first + "'")
                                  .c_str()),
            InvalidArgument);
      }
    }
    // The two parts together are fine.
    CHECK_NOTHROW(cli::parse_problem_text(alias == "seqlen" ? "dtype=f16,seqlen_q=64,seqlen_k=16,heads=1,head_dim=64"
                                                            : "dtype=f16,seqlen=1,heads_q=16,heads_kv=4,head_dim=64"));
  }
  TempDir work("flashgen-cli-alias");
  std::ofstream(work.path() + "/p.yml") << "problems:\n  - {dtype: f16, seqlen: 128, seqlen_k: 64, heads: 1, head_dim: 64}\n";
  const Run r = run_cli({"pregen", "--arch", "80", "--problems", work.path() + "/p.yml", "--list"},
                        base_env(work.path() + "/cache"));
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "key 'problems[0].seqlen_k' cannot be combined with key 'seqlen'"));
}

TEST_CASE("cli problems: a problem file names the key of a bad value, is one YAML document, and at most 16 MiB") {
  const std::string row = "dtype: f16, seqlen: 128, heads: 1, head_dim: 64";
  // A value that is not one scalar: the message names the row and the key.
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"problems:\n  - {" + row + "}\n  - {dtype: [f16], seqlen: 128, heads: 1, head_dim: 64}\n",
            "p.yml: key 'problems[1].dtype' has value a sequence: must be a single value"},
           {"problems:\n  - {dtype: f16, seqlen: {q: 1}, heads: 1, head_dim: 64}\n",
            "p.yml: key 'problems[0].seqlen' has value a mapping: must be a single value"},
           {"problems:\n  - {" + row + ", lse: }\n", "p.yml: key 'problems[0].lse' has no value: must be a single value"},
           {"problems:\n  - {dtype: f16, seqlens_q: {a: 1}, seqlens_k: 1, heads: 1, head_dim: 64}\n",
            "p.yml: key 'problems[0].seqlens_q' has value a mapping: must be \"L1:L2:...\" or a sequence of integers"},
           {"problems:\n  - {" + row + ", [a]: 1}\n", "p.yml: key 'problems[0]' has a key that is a sequence, not a name"},
           // A second document would be dropped unread.
           {"problems:\n  - {" + row + "}\n---\nproblems:\n  - {" + row + "}\n",
            "p.yml: has 2 YAML documents (separated by '---'); a problem file is one document"},
       }) {
    CAPTURE(yaml);
    CHECK_THROWS_WITH_AS(cli::parse_problem_set(yaml, "p.yml"), doctest::Contains(message.c_str()), InvalidArgument);
  }
  // One document, with or without its markers (an empty one after a trailing "---" holds nothing).
  for (const std::string& yaml : {"---\nproblems:\n  - {" + row + "}\n...\n", "problems:\n  - {" + row + "}\n---\n"}) {
    CAPTURE(yaml);
    CHECK(cli::parse_problem_set(yaml, "p.yml").size() == 1);
  }
  // Through the binary: exit 2, naming the file, its size and the limit, without reading it (a sparse 4 GiB file).
  TempDir work("flashgen-cli-problem-file");
  const auto env = base_env(work.path() + "/cache");
  const std::string big = work.path() + "/big.yml";
  std::ofstream(big).close();
  REQUIRE(::truncate(big.c_str(), int64_t{4} << 30) == 0);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"pregen", "--arch", "80", "--list", "--problems", big}, {"tune", "--dry-run", "--arch", "80", "--problems", big}}) {
    CAPTURE(args[0]);
    const Run r = run_cli(args, env);
    INFO("stdout: ", r.out, "\nstderr: ", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen " + args[0] + ": error: cannot read problem file '" + big +
                              "': it is 4294967296 bytes, more than the 16777216 bytes (16 MiB) a YAML file may have"));
  }
  std::ofstream(work.path() + "/two.yml") << "problems:\n  - {" + row + "}\n---\nproblems:\n  - {" + row + "}\n";
  const Run two = run_cli({"pregen", "--arch", "80", "--list", "--problems", work.path() + "/two.yml"}, env);
  CHECK(two.rc == 2);
  CHECK(contains(two.err, "has 2 YAML documents"));
}

TEST_CASE("cli: pregen of a decode-shaped problem lists the split-KV kernels forward() runs, and the forward's") {
  TempDir work("flashgen-cli-pregen-decode");
  std::ofstream(work.path() + "/p.yml")
      << "problems:\n  - {dtype: bf16, seqlen_q: 1, seqlen_k: 32768, heads_q: 32, heads_kv: 8, head_dim: 128}\n"
         "  - {dtype: bf16, seqlen: 4096, heads_q: 32, heads_kv: 8, head_dim: 128}\n";
  const Run r = run_cli({"pregen", "--arch", "90", "--problems", work.path() + "/p.yml", "--list"},
                        base_env(work.path() + "/cache"));
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 0);
  const AttentionProblem dec = make_bshd_problem(DType::bf16, 1, 1, 32768, 32, 8, 128, 128, MaskKind::none,
                                                 reinterpret_cast<const void*>(uintptr_t{0x1000}),
                                                 reinterpret_cast<const void*>(uintptr_t{0x2000}),
                                                 reinterpret_cast<const void*>(uintptr_t{0x3000}),
                                                 reinterpret_cast<void*>(uintptr_t{0x4000}));
  const DecodePlan dp = plan_decode(dec, 90, 132);
  CHECK(contains(r.out, dp.split.canonical()));
  CHECK(contains(r.out, dp.combine.canonical()));
  CHECK(contains(r.out, "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128"));
  CHECK(lines(r.out).size() == 3);  // the prefill problem adds nothing: its forward spec is the same
  // explain says so too, with the kernels and the split count for the SMs given.
  const Run ex = run_cli({"explain", "--problem", "dtype=bf16,seqlen_q=1,seqlen_k=32768,heads_q=32,heads_kv=8,head_dim=128",
                          "--arch", "90", "--no-compile", "--sms", "132"},
                         base_env(work.path() + "/cache"));
  INFO("explain:\n", ex.out, "\nstderr:\n", ex.err);
  CHECK(ex.rc == 0);
  CHECK(contains(ex.out, "split-KV decode on 132 SMs: " + std::to_string(dp.num_splits) + " splits"));
  CHECK(contains(ex.out, "split   " + dp.split.canonical()));
  CHECK(contains(ex.out, "combine " + dp.combine.canonical()));
  const Run prefill = run_cli({"explain", "--problem", "dtype=bf16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128",
                               "--arch", "90", "--no-compile", "--sms", "132"},
                              base_env(work.path() + "/cache"));
  CHECK(prefill.rc == 0);
  CHECK_FALSE(contains(prefill.out, "split-KV decode"));
  // Without --sms (and no GPU), a problem that 132 SMs run as one kernel is shown for the fewest
  // SMs that take the decode, and says so.
  if (!gpu_available()) {
    const Run b8 = run_cli({"explain", "--problem",
                            "dtype=bf16,batch=8,seqlen_q=1,seqlen_k=16384,heads_q=32,heads_kv=8,head_dim=128", "--arch",
                            "90", "--no-compile"},
                           base_env(work.path() + "/cache"));
    INFO("explain batch 8:\n", b8.out, "\nstderr:\n", b8.err);
    CHECK(b8.rc == 0);
    std::smatch m;
    const std::regex re("split-KV decode on a GPU of ([0-9]+) SMs or more \\(one of 132 runs it as one kernel; "
                        "shown for ([0-9]+)\\): ([0-9]+) splits");
    REQUIRE(std::regex_search(b8.out, m, re));
    const int n = std::stoi(m[1].str());
    CHECK(m[2].str() == m[1].str());
    const AttentionProblem p8 = make_bshd_problem(DType::bf16, 8, 1, 16384, 32, 8, 128, 128, MaskKind::none,
                                                  reinterpret_cast<const void*>(uintptr_t{0x1000}),
                                                  reinterpret_cast<const void*>(uintptr_t{0x2000}),
                                                  reinterpret_cast<const void*>(uintptr_t{0x3000}),
                                                  reinterpret_cast<void*>(uintptr_t{0x4000}));
    CHECK(decode_preferred(p8, 90, n));
    CHECK_FALSE(decode_preferred(p8, 90, n - 1));
    CHECK_FALSE(decode_preferred(p8, 90, 132));
    CHECK(std::stoi(m[3].str()) == plan_decode(p8, 90, n).num_splits);
  }
}

TEST_CASE("cli numbers: tile fields are range-checked; huge problems saturate instead of wrapping") {
  Tile t;
  CHECK_FALSE(cli::parse_tile_text("--tile", "default", &t));
  CHECK_FALSE(cli::parse_tile_text("--tile", "", &t));
  REQUIRE(cli::parse_tile_text("--tile", "256x256x16x4", &t));
  CHECK(t == Tile{256, 256, 16, 4});
  const char* names[] = {"BLOCK_M", "BLOCK_N", "WARPS", "STAGES"};
  const int his[] = {256, 256, 16, 4};
  for (int field = 0; field < 4; ++field) {
    for (const std::string& v : std::vector<std::string>{"0", "-1", std::to_string(his[field] + 1), "99999999999",
                                                         "99999999999999999999", "", "1.5", "+4"}) {
      CAPTURE(field);
      CAPTURE(v);
      std::string text;
      for (int i = 0; i < 4; ++i) text += (i ? "x" : "") + (i == field ? v : std::string("4"));
      CHECK_THROWS_WITH_AS(cli::parse_tile_text("--tile", text, &t),
                           doctest::Contains(("--tile has value '" + text + "': " + names[field] + " '" + v +
                                              "' must be an integer in [1, " + std::to_string(his[field]) + "]")
                                                 .c_str()),
                           InvalidArgument);
    }
  }
  // Bias and LSE strides of the largest problem the parser lets through: saturated, so that check_problem
  // refuses them as overflowing offsets, never wrapped around to small (or zero) strides.
  const cli::ProblemDesc d = cli::parse_problem_text(
      "dtype=f16,seqlen=4294967296,heads=1099511627776,head_dim=64,bias=f32,lse=1");
  const AttentionProblem p = cli::to_problem(d);
  CHECK(p.bias.stride_head == std::numeric_limits<int64_t>::max());
  CHECK(p.bias.stride_batch == std::numeric_limits<int64_t>::max());
  CHECK(p.lse.stride_batch == std::numeric_limits<int64_t>::max());
  CHECK_THROWS_AS(check_problem(p), InvalidArgument);
}

TEST_CASE("cli numbers: integers are plain decimal: leading zeros, signs and spaces are refused alike everywhere") {
  // Before: a tile field '0192' was taken as 192 while '+192' was refused, and so were problem keys and
  // --head-dims; an option such as --arch passed its check as decimal and CLI11 then read it as octal
  // (--arch 075 planned for sm_61, --sms 010 modelled 8 SMs).
  const std::string kPlain = "in plain decimal (no sign, leading zeros or spaces)";
  Tile t;
  const char* names[] = {"BLOCK_M", "BLOCK_N", "WARPS", "STAGES"};
  const int his[] = {256, 256, 16, 4};
  for (int field = 0; field < 4; ++field) {
    for (const std::string& v : {std::string("01"), std::string("00"), std::string("-0"), std::string("+1"),
                                 std::string(" 1"), std::string("1 "), "0" + std::to_string(his[field])}) {
      CAPTURE(field);
      CAPTURE(v);
      std::string text;
      for (int i = 0; i < 4; ++i) text += (i ? "x" : "") + (i == field ? v : std::string("4"));
      CHECK_THROWS_WITH_AS(cli::parse_tile_text("--tile", text, &t),
                           doctest::Contains(fmt::format("--tile has value '{}': {} '{}' must be an integer in [1, {}] "
                                                         "{} (the tile is BLOCK_MxBLOCK_NxWARPSxSTAGES",
                                                         text, names[field], v, his[field], kPlain)
                                                 .c_str()),
                           InvalidArgument);
    }
  }
  REQUIRE(cli::parse_tile_text("--tile", "192x96x12x2", &t));
  CHECK(t == Tile{192, 96, 12, 2});

  // Problem keys, in --problem and in YAML problem files (quoted or not).
  for (const auto& [key, value, allowed] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"seqlen", "0128", "must be an integer in [0, 1099511627776] " + kPlain},
           {"batch", "00", "must be an integer in [0, 1099511627776] " + kPlain},
           {"heads", "-0", "must be an integer in [0, 1099511627776] " + kPlain},
           {"head_dim", "+64", "must be an integer in [0, 1048576] " + kPlain},
           {"head_dim_v", "064", "must be an integer in [0, 1048576] " + kPlain},
           {"window_left", "-01", "must be an integer in [-1, 1099511627776] in plain decimal (no '+', leading zeros "
                                  "or spaces)"},
           {"window_right", "-0", "must be an integer in [-1, 1099511627776] in plain decimal"},
           {"page_size", "016", "must be a power of two in [1, 256] (keys per page of a paged KV cache), " + kPlain},
       }) {
    CAPTURE(key);
    CAPTURE(value);
    std::string text = "dtype=f16,mask=windowtl," + key + "=" + value;
    std::string yaml = "problems:\n  - {dtype: f16, mask: windowtl, " + key + ": " + value;
    for (const auto& [k, v] : {std::pair{"seqlen", "8"}, std::pair{"heads", "1"}, std::pair{"head_dim", "64"}})
      if (key != k) text += fmt::format(",{}={}", k, v), yaml += fmt::format(", {}: {}", k, v);
    yaml += "}\n";
    CHECK_THROWS_WITH_AS(cli::parse_problem_text(text),
                         doctest::Contains(fmt::format("key '{}' has value '{}': {}", key, value, allowed).c_str()),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(cli::parse_problem_set(yaml, "p.yml"),
                         doctest::Contains(
                             fmt::format("p.yml: key 'problems[0].{}' has value '{}': {}", key, value, allowed).c_str()),
                         InvalidArgument);
  }
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("dtype=f16,seqlens_q=100:037,seqlens_k=100:37,heads=1,head_dim=64"),
                       doctest::Contains(("key 'seqlens_q' has value '100:037': length 2 ('037') must be an integer in "
                                          "[0, 2147483647] (one length per sequence, separated by ':', e.g. "
                                          "100:37:512), " + kPlain)
                                             .c_str()),
                       InvalidArgument);
  // 0 itself, and negative values where allowed, are still numbers.
  const cli::ProblemDesc zero = cli::parse_problem_text(
      "dtype=f16,batch=0,seqlen=0,heads=1,head_dim=64,mask=windowtl,window_left=0,window_right=-1");
  CHECK(zero.batch == 0);
  CHECK(zero.window_left == 0);
  CHECK(zero.window_right == -1);

  // Numeric options: CLI11 must never see a leading zero (it reads it as octal) or "-0".
  for (const NumericOption& o : numeric_options()) {
    if (!o.integer) continue;
    CAPTURE(o.sub);
    CAPTURE(o.name);
    for (const std::string& v : {"0" + number_text(o.hi), std::string("-0"), std::string("00")}) {
      CAPTURE(v);
      bool validation = false;
      const std::string err = parse_only(with(with({o.sub}, required_args(o.sub)), {o.name, v}), &validation);
      CHECK(validation);
      CHECK(contains(err, o.name));
      CHECK(contains(err, "'" + v + "'"));
      CHECK(contains(err, "[" + number_text(o.lo) + ", " + number_text(o.hi) + "]"));
      CHECK(contains(err, "in plain decimal (no sign, leading zeros or spaces)"));
    }
  }

  // The binary: exit 2, naming the argument, its value and what is allowed.
  TempDir work("flashgen-cli-plain-decimal");
  const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
  check_usage_errors(
      {
          {{"explain", "--problem", p, "--arch", "075", "--no-compile"},
           {"--arch", "value '075' is not allowed: must be an integer in [10, 999]", kPlain}},
          {{"explain", "--problem", p, "--arch", "80", "--sms", "010", "--no-compile"},
           {"--sms", "value '010' is not allowed: must be an integer in [1, 4096]", kPlain}},
          {{"explain", "--problem", p, "--arch", "80", "--tile", "0128x64x4x2", "--no-compile"},
           {"--tile has value '0128x64x4x2': BLOCK_M '0128' must be an integer in [1, 256] " + kPlain}},
          {{"show", "--problem", p, "--arch", "80", "--tile", "128x64x4x+2"},
           {"--tile has value '128x64x4x+2': STAGES '+2' must be an integer in [1, 4] " + kPlain}},
          {{"pregen", "--arch", "80", "--list", "--tiles", "128x064x4x2"},
           {"--tiles has value '128x064x4x2': BLOCK_N '064' must be an integer in [1, 256] " + kPlain}},
          {{"explain", "--problem", "dtype=f16,seqlen=0128,heads=1,head_dim=64", "--arch", "80"},
           {"key 'seqlen' has value '0128': must be an integer in [0, 1099511627776] " + kPlain}},
          {{"pregen", "--arch", "80", "--list", "--head-dims", "064"},
           {"--head-dims has value '064': must be D or D:DV (e.g. 96 or 192:128) with D and DV multiples of 8 in [16, "
            "256] (the head dims the kernels take), " + kPlain}},
          {{"pregen", "--arch", "80", "--list", "--head-dims", "64:0128"}, {"--head-dims has value '64:0128'", kPlain}},
          {{"pregen", "--arch", "80", "--list", "--head-dims", "+64"}, {"--head-dims has value '+64'", kPlain}},
      },
      base_env(work.path() + "/cache"));
}

TEST_CASE("cli cache: ls and verify of a directory that does not exist or is not one fail and say so") {
  TempDir work("flashgen-cli-cache-dirs");
  const auto env = base_env(work.path() + "/cache");
  std::ofstream(work.path() + "/file") << "x";
  std::filesystem::create_directories(work.path() + "/empty");
  for (const char* action : {"ls", "verify", "prune", "clear"}) {
    CAPTURE(action);
    const Run missing = run_cli({"cache", action, "--dir", work.path() + "/missing"}, env);
    CHECK(missing.rc == 1);
    CHECK(contains(missing.err, std::string("flashgen cache ") + action + ": error: --dir " + work.path() +
                                    "/missing: no such directory"));
    const Run file = run_cli({"cache", action, "--dir", work.path() + "/file"}, env);
    CHECK(file.rc == 1);
    CHECK(contains(file.err, "--dir " + work.path() + "/file: not a directory"));
    // An empty directory is a directory with no entries.
    CHECK(run_cli({"cache", action, "--dir", work.path() + "/empty"}, env).rc == 0);
  }
  // A configured bundle that is not there: ls and verify fail (exit 1) and name it.
  auto benv = env;
  benv.push_back("FLASHGEN_CACHE_PATH=" + work.path() + "/no-bundle");
  for (const char* action : {"ls", "verify"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, benv);
    CHECK(r.rc == 1);
    CHECK(contains(r.out, "bundle " + work.path() + "/no-bundle: not used: "));
    CHECK(contains(r.err, "1 configured cache directory cannot be used"));
  }
  CHECK(run_cli({"cache", "ls"}, env).rc == 0);
}

namespace {

// Runs `args` with `env`; the configuration error must come once, on stderr,
// with exit 2, naming the variable and the whole reason.
void expect_config_error(const std::vector<std::string>& args, const std::vector<std::string>& env,
                         const std::string& variable, const std::vector<std::string>& reason) {
  CAPTURE(args[0]);
  const Run r = run_cli(args, env);
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  CHECK(r.rc == 2);
  CHECK(count_of(r.err, "configuration error: " + variable) == 1);
  CHECK(count_of(r.err + r.out, variable + "=") == 1);  // reported once, nowhere else
  for (const std::string& part : reason) CHECK(contains(r.err, part));
  CHECK_FALSE(contains(r.out, "rule"));  // explain: not a rule the problem breaks
  CHECK_FALSE(contains(r.err, "FAILED"));  // pregen: no kernel was attempted
}

}  // namespace

TEST_CASE("cli configuration: a broken FLASHGEN_PROFILE is one configuration error before anything is planned") {
  TempDir work("flashgen-cli-profile-config");
  const std::string cache = work.path() + "/cache";
  std::filesystem::create_directories(work.path() + "/a-directory");
  std::ofstream(work.path() + "/unknown-key.yml") << read_text(FLASHGEN_SOURCE_DIR "/profiles/ampere.yml")
                                                 << "\ncolour: blue\n";
  std::ofstream(work.path() + "/turing.yml") << read_text(FLASHGEN_SOURCE_DIR "/profiles/turing.yml");
  std::ofstream(work.path() + "/two-documents.yml") << read_text(FLASHGEN_SOURCE_DIR "/profiles/ampere.yml") << "---\n"
                                                    << read_text(FLASHGEN_SOURCE_DIR "/profiles/turing.yml");
  struct Case {
    std::string path;
    std::vector<std::string> reason;
  };
  for (const Case& c : std::vector<Case>{
           {work.path() + "/a-directory", {"it is a directory"}},
           {work.path() + "/missing.yml", {"cannot read profile file", "No such file or directory"}},
           {work.path() + "/unknown-key.yml", {"key 'colour' is unknown; allowed keys:"}},
           {work.path() + "/turing.yml", {"does not list compute capability sm_80"}},
           {work.path() + "/two-documents.yml",
            {work.path() + "/two-documents.yml: has 2 YAML documents (separated by '---'); a profile file is one "
                           "document"}},
       }) {
    CAPTURE(c.path);
    auto env = base_env(cache);
    env.push_back("FLASHGEN_PROFILE=" + c.path);
    const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
    std::vector<std::string> reason = c.reason;
    reason.push_back("FLASHGEN_PROFILE=" + c.path);
    expect_config_error({"pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16", "--masks", "none,causaltl"},
                        env, "FLASHGEN_PROFILE", reason);
    expect_config_error({"pregen", "--arch", "80", "--head-dims", "64", "--list"}, env, "FLASHGEN_PROFILE", reason);
    expect_config_error({"explain", "--problem", p, "--arch", "80", "--no-compile"}, env, "FLASHGEN_PROFILE", reason);
    expect_config_error({"show", "--problem", p, "--arch", "80"}, env, "FLASHGEN_PROFILE", reason);
    expect_config_error({"tune", "--dry-run", "--arch", "80", "--problem", p}, env, "FLASHGEN_PROFILE", reason);
    const Run info = run_cli({"info", "--arch", "80"}, env);
    CHECK(info.rc == 2);
    CHECK(contains(info.out, "profile      configuration error: FLASHGEN_PROFILE=" + c.path));
    for (const std::string& part : c.reason) CHECK(contains(info.out, part));
    CHECK((!std::filesystem::exists(cache) || test::list_dir(cache).empty()));  // nothing compiled
  }
}

TEST_CASE("cli configuration: pregen --profile (built-in profiles) wins over FLASHGEN_PROFILE") {
  TempDir work("flashgen-cli-profile-option");
  const std::string cache = work.path() + "/cache";
  const std::string turing = work.path() + "/turing.yml";  // lists sm_75 only
  std::ofstream(turing) << read_text(FLASHGEN_SOURCE_DIR "/profiles/turing.yml");
  auto env = base_env(cache);
  env.push_back("FLASHGEN_PROFILE=" + turing);
  const std::vector<std::string> set = {"--head-dims", "64", "--dtypes", "f16", "--masks", "none", "--list"};
  // The option names hopper: its kernel, planned with the built-in profile; a note says the variable is not used.
  const Run r = run_cli(with({"pregen", "--profile", "hopper"}, set), env);
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  CHECK(r.rc == 0);
  const auto builtin = std::find_if(builtin_profiles().begin(), builtin_profiles().end(),
                                    [](const Profile& x) { return x.name == "hopper"; });
  REQUIRE(builtin != builtin_profiles().end());
  const KernelSpec hopper =
      plan(cli::to_problem(cli::parse_problem_text("dtype=f16,seqlen=1024,heads=1,head_dim=64")), 90, *builtin);
  CHECK(r.out == hopper.canonical() + "\n");
  CHECK(contains(r.err, "flashgen pregen: note: --profile hopper names built-in profiles; FLASHGEN_PROFILE=" + turing +
                            " is not used in this run"));
  // Without --profile the variable still decides: it does not list sm_90.
  expect_config_error(with({"pregen", "--arch", "90"}, set), env, "FLASHGEN_PROFILE", {"does not list compute capability "
                                                                                       "sm_90"});
  CHECK(run_cli(with({"pregen", "--arch", "75"}, set), env).rc == 0);
  // The help says so.
  CHECK(contains(run_cli({"pregen", "--help"}, env).out, "FLASHGEN_PROFILE is not used"));
}

TEST_CASE("cli configuration: FLASHGEN_NVRTC_LIBRARY that is not a usable NVRTC is one configuration error") {
  TempDir work("flashgen-cli-nvrtc-config");
  const std::string cache = work.path() + "/cache";
  const std::string text_file = work.path() + "/libnvrtc.so.13";
  std::ofstream(text_file) << "not ELF\n";
  struct Case {
    std::vector<std::string> env;
    std::vector<std::string> reason;
  };
  for (const Case& c : std::vector<Case>{
           {{"FLASHGEN_NVRTC_LIBRARY=" + text_file}, {text_file + ": "}},
           {{"FLASHGEN_NVRTC_LIBRARY=" + work.path()}, {work.path() + ": "}},
           {{"FLASHGEN_NVRTC_LIBRARY=" + work.path() + "/libnvrtc.so.12"}, {"No such file or directory"}},
           {{"FLASHGEN_NVRTC_LIBRARY=libc.so.6"}, {"libc.so.6: loaded, but lacks nvrtcVersion"}},
           {{std::string("FLASHGEN_NVRTC_LIBRARY=") + FLASHGEN_FAKE_NVRTC, "FAKE_NVRTC_VERSION=11.8"},
            {"loaded, but it is NVRTC 11.8; libflashgen needs NVRTC 12.x to 13.x"}},
       }) {
    CAPTURE(c.env[0]);
    auto env = base_env(cache);
    env.insert(env.end(), c.env.begin(), c.env.end());
    std::vector<std::string> reason = c.reason;
    reason.push_back(c.env[0] + " could not be used: ");  // the variable, its value and, on that line, the reason
    const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
    expect_config_error({"pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16", "--masks", "none,causaltl"},
                        env, "FLASHGEN_NVRTC_LIBRARY", reason);
    expect_config_error({"explain", "--problem", p, "--arch", "80"}, env, "FLASHGEN_NVRTC_LIBRARY", reason);
    expect_config_error({"explain", "--problem", p, "--arch", "80", "--no-compile"}, env, "FLASHGEN_NVRTC_LIBRARY",
                        reason);
    expect_config_error({"tune", "--compile-only", "--arch", "80", "--problem", p}, env, "FLASHGEN_NVRTC_LIBRARY",
                        reason);
    expect_config_error({"cache", "verify"}, env, "FLASHGEN_NVRTC_LIBRARY", reason);
    const Run info = run_cli({"info", "--arch", "80"}, env);
    CHECK(info.rc == 2);
    CHECK(contains(info.out, "nvrtc        configuration error: " + c.env[0] + " could not be used: "));
    for (const std::string& part : c.reason) CHECK(contains(info.out, part));
    // What needs no NVRTC still works: listing specs, printing sources.
    CHECK(run_cli({"pregen", "--arch", "80", "--head-dims", "64", "--list"}, env).rc == 0);
    CHECK(run_cli({"show", "--problem", p, "--arch", "80"}, env).rc == 0);
    CHECK((!std::filesystem::exists(cache) || test::list_dir(cache).empty()));
  }
}

TEST_CASE("cli numbers: the largest problems the parser accepts are modelled in closed form, not row by row") {
  // Small problems: the closed form equals the row-by-row count of visible keys.
  for (const MaskKind mask : {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right}) {
    for (const int64_t sq : {0, 1, 5, 17, 64, 100}) {
      for (const int64_t sk : {0, 1, 5, 17, 64, 100}) {
        CAPTURE(to_string(mask));
        CAPTURE(sq);
        CAPTURE(sk);
        const int64_t off = mask == MaskKind::causal_bottom_right ? sk - sq : 0;
        double pairs = 0;
        for (int64_t i = 0; i < sq; ++i)
          pairs += static_cast<double>(mask == MaskKind::none ? sk : std::clamp<int64_t>(i + 1 + off, 0, sk));
        cli::ProblemDesc d;
        d.batch = 2, d.heads_q = d.heads_kv = 3, d.seqlen_q = sq, d.seqlen_k = sk, d.head_dim = 64, d.head_dim_v = 32;
        d.mask = mask;
        CHECK(cli::problem_flops(d) == 2.0 * 2 * 3 * pairs * (64 + 32));
      }
    }
  }
  // seqlen 2^40 (the parser's bound) with a causal mask: explain and the tile model answer at once.
  const std::string huge = "dtype=f16,seqlen=1099511627776,heads=1,head_dim=64,mask=causaltl";
  const cli::ProblemDesc d = cli::parse_problem_text(huge);
  const double n = 1099511627776.0;
  CHECK(cli::problem_flops(d) == doctest::Approx(2.0 * n * (n + 1) / 2 * 128).epsilon(1e-12));
  // (plan() refuses it, as launch() would; the model takes the profile's default spec)
  CHECK_THROWS_WITH_AS(plan(cli::to_problem(d), 80), doctest::Contains("must be at most 2^31 - 257"), InvalidArgument);
  const cli::TileModel m =
      cli::model_tile(rt::plan_default(cli::to_problem(d), 80), d, profile_for_arch(80), cli::DeviceShape{});
  CHECK(m.blocks == 1099511627776 / 128);
  CHECK(m.padding_efficiency > 0.99);  // a causal block pads at most one diagonal block of keys
  TempDir work("flashgen-cli-huge");
  const Run r = run_cli({"explain", "--problem", huge, "--arch", "80", "--no-compile"}, base_env(work.path() + "/c"));
  // The model answers, and explain says what launch() would: one launch covers seqlen up to 2^31 - 257.
  CHECK(r.rc == 2);
  CHECK(contains(r.out, "seqlen_q (1099511627776) and seqlen_k (1099511627776) must be at most 2^31 - 257"));
}

TEST_CASE("cli numbers: window masks are modelled in closed form too: only the keys inside each row's window") {
  for (const MaskKind mask : {MaskKind::window_top_left, MaskKind::window_bottom_right}) {
    for (const int64_t sq : {0, 1, 5, 17, 64}) {
      for (const int64_t sk : {0, 1, 5, 17, 100}) {
        for (const auto& [left, right] : {std::pair<int64_t, int64_t>{-1, -1}, {-1, 0}, {0, -1}, {0, 0}, {3, 1},
                                          {1, 7}, {1000, 2}, {2, 1099511627776}}) {
          CAPTURE(to_string(mask));
          CAPTURE(sq);
          CAPTURE(sk);
          CAPTURE(left);
          CAPTURE(right);
          const int64_t off = mask == MaskKind::window_bottom_right ? sk - sq : 0;
          double pairs = 0;
          for (int64_t i = 0; i < sq; ++i)
            for (int64_t j = 0; j < sk; ++j)
              pairs += (left < 0 || i + off - j <= left) && (right < 0 || j - (i + off) <= right) ? 1.0 : 0.0;
          cli::ProblemDesc d;
          d.batch = 2, d.heads_q = d.heads_kv = 3, d.seqlen_q = sq, d.seqlen_k = sk, d.head_dim = 64,
          d.head_dim_v = 32;
          d.mask = mask;
          d.window_left = left;
          d.window_right = right;
          CHECK(cli::problem_flops(d) == 2.0 * 2 * 3 * pairs * (64 + 32));
        }
      }
    }
  }
  // A sliding window of 128 over 2^40 keys: the model answers at once, and pads
  // at most two key tiles per block.
  const cli::ProblemDesc d = cli::parse_problem_text(
      "dtype=f16,seqlen=1099511627776,heads=1,head_dim=64,mask=windowbr,window_left=127,window_right=0");
  const double n = 1099511627776.0;
  CHECK(cli::problem_flops(d) == doctest::Approx(2.0 * (n * 128 - 127.0 * 128 / 2) * 128).epsilon(1e-12));
  // (check_problem refuses it for a launch: seqlen_q + seqlen_k > 2^31 - 257 with a window)
  const KernelSpec spec = cli::spec_with_tile(d, 80, profile_for_arch(80), Tile{128, 64, 8, 2});
  const cli::TileModel m = cli::model_tile(spec, d, profile_for_arch(80), cli::DeviceShape{});
  CHECK(m.padding_efficiency > 0.3);
  CHECK(m.padding_efficiency <= 1.0);
  CHECK(m.tile_flops <= 2.0 * 128 * (4 * 64) * 128);  // four key tiles per block at most, not the whole key range
}

TEST_CASE("cli problems: a missing key is named once, in --problem and in YAML") {
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("dtype=f16,seqlen=8,heads=1"),
                       "--problem 'dtype=f16,seqlen=8,heads=1': key 'head_dim' is missing", InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems: [{dtype: f16, head_dim: 64, heads: 2}]", "p.yml"),
                       doctest::Contains("key 'seqlen_q' (or 'seqlen') is missing"), InvalidArgument);
  std::string msg;
  try {
    cli::parse_problem_text("");
  } catch (const InvalidArgument& e) {
    msg = e.what();
  }
  CHECK_FALSE(msg.empty());
  CHECK(msg.find("key key") == std::string::npos);
}

TEST_CASE("cli problems: an empty field in --problem (a trailing, leading or doubled ',') is refused, naming it") {
  const std::string p = "dtype=f16,batch=1,seqlen=128,heads=8,head_dim=64";
  CHECK_NOTHROW(cli::parse_problem_text(p));
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {p + ",", "field 6 is empty (a trailing ','"},
           {"," + p, "field 1 is empty (a leading ','"},
           {"dtype=f16,,batch=1,seqlen=128,heads=8,head_dim=64", "field 2 is empty (two ',' in a row"},
           {p + ",,", "field 6 is empty (two ',' in a row"},
           {"", "--problem '' is empty (expected key=value"},
       }) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(cli::parse_problem_text(text),
                         doctest::Contains((text.empty() ? why : "--problem '" + text + "': " + why).c_str()),
                         InvalidArgument);
  }
  // Through the binary: exit 2 before anything is planned, in every command that takes --problem.
  TempDir work("flashgen-cli-trailing-comma");
  const auto env = base_env(work.path() + "/cache");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"explain", "--arch", "80", "--no-compile", "--problem", p + ","},
           {"show", "--arch", "80", "--problem", p + ","},
           {"tune", "--dry-run", "--arch", "80", "--problem", p + ","}}) {
    CAPTURE(args[0]);
    const Run r = run_cli(args, env);
    INFO("stdout: ", r.out, "\nstderr: ", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen " + args[0] + ": error: --problem '" + p + ",': field 6 is empty (a trailing ','"));
    CHECK(r.out.empty());
  }
}


TEST_CASE("cli: an empty --out is refused, not taken as the default destination") {
  TempDir work("flashgen-cli-empty-out");
  const auto env = base_env(work.path() + "/c");
  const Run p = run_cli({"pregen", "--arch", "90", "--head-dims", "64", "--out", ""}, env);
  CHECK(p.rc == 2);
  CHECK(contains(p.err, "--out: an empty path; leave --out out to write into the user cache"));
  const Run t = run_cli({"tune", "--compile-only", "--arch", "90", "--problem", "dtype=f16,seqlen=128,heads=1,head_dim=64",
                         "--out", ""},
                        env);
  CHECK(t.rc == 2);
  CHECK(contains(t.err, "--out: an empty path; leave --out out for $FLASHGEN_TUNE_FILE"));
  const std::string cache = work.path() + "/c";  // nothing compiled into the user cache
  CHECK((!std::filesystem::exists(cache) || test::list_dir(cache).empty()));
}

TEST_CASE("cli: an empty --tile, --tiles, --device, --profile or --tune-file, and a --tune-file that cannot be used, "
          "are refused (exit 2), not taken as the default") {
  TempDir work("flashgen-cli-empty-values");
  const std::string cache = work.path() + "/c";
  const auto env = base_env(cache);
  const std::string p = "dtype=f16,seqlen=128,heads=1,head_dim=64";
  std::ofstream(work.path() + "/not-a-tune-file.yml") << "entries: []\n";
  std::ofstream(work.path() + "/two-documents.yml") << "version: 1\nentries: []\n---\nversion: 1\nentries: []\n";
  const std::vector<std::string> pregen = {"pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16",
                                           "--masks", "none", "--list"};
  check_usage_errors({
           {{"explain", "--problem", p, "--arch", "80", "--no-compile", "--tile", ""},
            {"--tile: an empty tile; give BLOCK_MxBLOCK_NxWARPSxSTAGES (e.g. 128x64x8x2) or 'default', or leave --tile "
             "out"}},
           {{"show", "--problem", p, "--arch", "80", "--tile", ""}, {"--tile: an empty tile; give BLOCK_Mx"}},
           {with(pregen, {"--tiles", ""}), {"--tiles has no value (''): give 'default' or tiles"}},
           {with(pregen, {"--tiles", ","}), {"--tiles has no value (','"}},
           {{"explain", "--problem", p, "--arch", "80", "--no-compile", "--device", ""},
            {"--device: an empty device name; give a device name as tune files record it (e.g. \"NVIDIA H200\"), or "
             "leave --device out"}},
           {with(pregen, {"--device", ""}), {"--device: an empty device name"}},
           {{"pregen", "--head-dims", "64", "--list", "--profile", ""}, {"--profile has no value (''): give built-in "
                                                                         "profile names"}},
           {with(pregen, {"--tune-file", ""}),
            {"--tune-file: an empty path; leave --tune-file out for $FLASHGEN_TUNE_FILE, else tune.yml in the user "
             "cache"}},
           {with(pregen, {"--tune-file", work.path() + "/missing.yml"}),
            {"--tune-file: value '" + work.path() + "/missing.yml' is not allowed: no such file (it must name a tune "
             "file written by flashgen tune)"}},
           {with(pregen, {"--tune-file", work.path()}),
            {"--tune-file: value '" + work.path() + "' is not allowed: it is a directory, not a tune file"}},
           {with(pregen, {"--tune-file", work.path() + "/not-a-tune-file.yml"}),
            {"--tune-file has value '" + work.path() + "/not-a-tune-file.yml', which is not a usable tune file: ",
             "key 'version' is missing"}},
           {with(pregen, {"--tune-file", work.path() + "/two-documents.yml"}),
            {"--tune-file has value '" + work.path() + "/two-documents.yml', which is not a usable tune file: " +
                 work.path() + "/two-documents.yml: has 2 YAML documents (separated by '---'); a tune file is one "
                 "document"}},
       },
       env);
  CHECK((!std::filesystem::exists(cache) || test::list_dir(cache).empty()));
  // Given a value, the same options run.
  CHECK(run_cli({"explain", "--problem", p, "--arch", "80", "--no-compile", "--tile", "default", "--device", "X"}, env)
            .rc == 0);
  CHECK(run_cli(with(pregen, {"--tiles", "default", "--device", "X", "--profile", "ampere"}), env).rc == 0);
}

TEST_CASE("cli: a --problems file that is empty, missing or a directory is refused (exit 2) as --tune-file is") {
  // Before: CLI11's "File does not exist: <path>" without the option, or what it must name.
  TempDir work("flashgen-cli-problems-file");
  const auto env = base_env(work.path() + "/c");
  const std::string missing = work.path() + "/missing.yml";
  std::vector<UsageError> cases;
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"pregen", "--arch", "80", "--list"}, {"tune", "--dry-run", "--arch", "80"}}) {
    cases.push_back({with(command, {"--problems", missing}),
                     {"--problems: value '" + missing + "' is not allowed: no such file (it must name a YAML "
                      "problem file)"}});
    cases.push_back({with(command, {"--problems", work.path()}),
                     {"--problems: value '" + work.path() + "' is not allowed: it is a directory, not a YAML "
                      "problem file"}});
    cases.push_back({with(command, {"--problems", ""}), {"--problems: an empty path; "}});
  }
  check_usage_errors(cases, env);
}

TEST_CASE("cli: inspection commands create no user cache directory; cache ls / verify report it absent") {
  TempDir work("flashgen-cli-no-mkdir");
  const std::string dir = work.path() + "/missing/cache";
  const auto env = base_env(dir);
  const auto absent = [&] { return !std::filesystem::exists(work.path() + "/missing"); };
  for (const char* action : {"ls", "verify"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "user cache " + dir + ": 0 entries, does not exist"));
    CHECK(contains(r.out, "0 entries: 0 ok"));
    CHECK(absent());
  }
  for (const char* action : {"prune", "clear"}) {
    CAPTURE(action);
    const Run r = run_cli({"cache", action}, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, std::string(action) + ": 0 files; the user cache " + dir + " does not exist"));
    CHECK(absent());
  }
  const Run info = run_cli({"info", "--arch", "80"}, env);
  INFO("info:\n", info.out);
  CHECK(info.rc == 0);
  CHECK(contains(info.out, "cache        user cache " + dir + " (FLASHGEN_CACHE_DIR): does not exist"));
  CHECK(absent());
  const std::string problem = "dtype=f16,seqlen=128,heads=1,head_dim=16";
  CHECK(run_cli({"explain", "--arch", "80", "--no-compile", "--problem", problem}, env).rc == 0);
  CHECK(absent());
  CHECK(run_cli({"explain", "--arch", "80", "--problem", problem}, env).rc == 0);  // compiled for the report only
  CHECK(absent());
  CHECK(run_cli({"tune", "--dry-run", "--arch", "80", "--problem", problem}, env).rc == 0);
  CHECK(absent());
  CHECK(run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none", "--list"}, env)
            .rc == 0);
  CHECK(absent());
  // --dir names a directory that must exist (unchanged).
  CHECK(run_cli({"cache", "ls", "--dir", dir}, env).rc == 1);
  CHECK(absent());
  // A path stat() cannot resolve for another reason than a missing last part
  // (a component longer than NAME_MAX; a component that is a file): reported, nothing created.
  const std::string long_name(300, 'b');
  std::string long_path = work.path() + "/long";  // 22 components of 200 bytes: more than PATH_MAX
  for (int i = 0; i < 22; ++i) long_path += "/" + std::string(200, 'p');
  std::ofstream(work.path() + "/afile") << "x";
  for (const std::string& odd : {work.path() + "/long/" + long_name + "/c", long_path, work.path() + "/afile/sub"}) {
    CAPTURE(odd);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"info", "--arch", "80"},
                                                 std::vector<std::string>{"cache", "ls"}}) {
      const Run r = run_cli(args, base_env(odd));
      INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
      CHECK(contains(r.out + r.err, "cannot be used"));
    }
    CHECK_FALSE(std::filesystem::exists(work.path() + "/long"));
  }
  // A missing directory whose parent cannot be written is not "created by the first kernel".
  if (::geteuid() != 0) {
    std::filesystem::create_directory(work.path() + "/ro");
    ::chmod((work.path() + "/ro").c_str(), 0555);
    const Run ro = run_cli({"info", "--arch", "80"}, base_env(work.path() + "/ro/cache"));
    CHECK(contains(ro.out, "cannot be created"));
    ::chmod((work.path() + "/ro").c_str(), 0755);
  }

  // A command that writes creates it, mode 0700.
  const Run made = run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none"}, env);
  INFO("stdout:\n", made.out, "\nstderr:\n", made.err);
  CHECK(made.rc == 0);
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  const Run ls = run_cli({"cache", "ls"}, env);
  CHECK(ls.rc == 0);
  CHECK(contains(ls.out, "user cache " + dir + ": 1 entry, "));
}

TEST_CASE("cli: pregen of a set that yields no kernels fails (exit 2) and says why") {
  TempDir work("flashgen-cli-pregen-empty");
  const std::string cache = work.path() + "/cache";
  const auto env = base_env(cache);
  for (const bool list : {true, false}) {
    CAPTURE(list);
    // (turing: its m16n8k8 unit takes f16 only; an NVRTC of CUDA 13 compiles for it, unlike volta)
    std::vector<std::string> args = {"pregen", "--profile", "turing", "--dtypes", "bf16", "--head-dims", "64"};
    if (list) args.push_back("--list");
    const Run r = run_cli(args, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(contains(r.err, "flashgen pregen: error: the set yields no kernels: all"));
    CHECK(contains(r.err, "bf16 on turing (sm_75)"));
    CHECK(contains(r.err, "nothing to compile"));
  }
  // An empty list names its flag (before: "the flags give no problem", the flag left to guess).
  for (const char* flag : {"--masks", "--head-dims", "--dtypes", "--bias"})
    for (const std::string& value : {std::string(""), std::string(",")}) {
      CAPTURE(flag);
      CAPTURE(value);
      const Run r = run_cli({"pregen", "--arch", "80", flag, value}, env);
      INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
      CHECK(r.rc == 2);
      CHECK(contains(r.err, fmt::format("flashgen pregen: error: {} has no value ('{}'): give one or more", flag, value)));
    }
  CHECK_FALSE(std::filesystem::exists(cache));  // nothing was written
  // A set that yields kernels for some arch is not empty: the bf16 combinations turing cannot run are skipped.
  const Run some = run_cli({"pregen", "--profile", "turing", "--arch", "80", "--dtypes", "bf16", "--head-dims", "64",
                            "--masks", "none", "--list"},
                           env);
  CHECK(some.rc == 0);
  CHECK(lines(some.out).size() == 1);
}

TEST_CASE("cli: pregen with a --tiles tile no problem of the set can take yields no kernels: exit 2, naming the tile and why") {
  // Before: exit 1 and "0 kernels ... 1 failed" (and an empty bundle directory), against the README's exit 2 for a
  // set that yields no kernel at all.
  TempDir work("flashgen-cli-pregen-no-tile");
  const auto env = base_env(work.path() + "/cache");
  const std::string bundle = work.path() + "/bundle";
  for (const bool list : {true, false}) {
    CAPTURE(list);
    std::vector<std::string> args = {"pregen", "--arch",  "90",    "--head-dims", "256",        "--dtypes",
                                     "f16",    "--masks", "none,causalbr", "--tiles", "256x128x4x4"};
    args = with(args, list ? std::vector<std::string>{"--list"} : std::vector<std::string>{"--out", bundle});
    const Run r = run_cli(args, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(contains(r.err, "flashgen pregen: error: the set yields no kernels: 2 combinations could not be planned "
                          "with --tiles 256x128x4x4; nothing to compile"));
    // Each combination, its tile and the rule it breaks.
    CHECK(count_of(r.err, "\n  not planned: sm_90 f16 b1 sq1024 sk1024 hq1 hkv1 d256/v256 mask=") == 2);
    CHECK(count_of(r.err, " tile bm256 bn128 w4 s4: ") == 2);
    CHECK(contains(r.err, "smem_bytes (656384"));
    CHECK_FALSE(contains(r.err, "failed"));
    CHECK_FALSE(std::filesystem::exists(bundle));  // nothing written
    CHECK_FALSE(std::filesystem::exists(work.path() + "/cache"));
  }
  // With dtype skips too, both are said.
  const Run mixed = run_cli({"pregen", "--profile", "turing", "--dtypes", "f16,bf16", "--head-dims", "64", "--masks",
                             "none", "--tiles", "256x128x4x4", "--list"},
                            env);
  INFO("stderr:\n", mixed.err);
  CHECK(mixed.rc == 2);
  CHECK(contains(mixed.err, "1 combination could not be planned with --tiles 256x128x4x4 and 1 flag combination "
                            "skipped (dtype not supported by the profile: bf16 on turing (sm_75))"));
  // A problem file whose every problem is refused: exit 2 as well, each row named.
  const std::string file = work.path() + "/p.yml";
  std::ofstream(file) << "problems:\n  - {dtype: f16, seqlen: 100, heads: 2, head_dim: 320}\n";
  const Run rows = run_cli({"pregen", "--arch", "80", "--problems", file, "--list"}, env);
  INFO("stderr:\n", rows.err);
  CHECK(rows.rc == 2);
  CHECK(contains(rows.err, "the set yields no kernels: 1 combination could not be planned; nothing to compile"));
  CHECK(contains(rows.err, "not planned: " + file + ": problems[0]: sm_80 "));
  CHECK(contains(rows.err, "head_dim (320)"));
  // Some combinations planned: the others are failures (exit 1), as before.
  const Run some = run_cli({"pregen", "--arch", "90", "--head-dims", "64,256", "--dtypes", "f16", "--masks", "none",
                            "--tiles", "128x128x8x2", "--list"},
                           env);
  INFO("stdout:\n", some.out, "\nstderr:\n", some.err);
  CHECK(some.rc == 1);
  CHECK(lines(some.out).size() == 1);
  CHECK(contains(some.err, "flashgen pregen: not planned: sm_90 f16 b1 sq1024 sk1024 hq1 hkv1 d256/v256"));
}

TEST_CASE("cli: problems beyond the kernels' limits: tune refuses them with exit 2, as show does") {
  TempDir work("flashgen-cli-limits");
  const std::string cache = work.path() + "/cache";
  const auto env = base_env(cache);
  const std::string long_seq = "dtype=f16,seqlen=3000000000,heads=1,head_dim=64";
  const std::string big_grid = "dtype=f16,batch=4096,seqlen=2000000000,heads=64,head_dim=64";
  for (const char* mode : {"--dry-run", "--compile-only"}) {
    CAPTURE(mode);
    const Run r = run_cli({"tune", mode, "--arch", "80", "--problem", long_seq}, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen tune: error: launch: seqlen_q (3000000000) and seqlen_k (3000000000) must be at "
                          "most 2^31 - 257"));
  }
  const Run grid = run_cli({"tune", "--dry-run", "--arch", "80", "--problem", big_grid}, env);
  CHECK(grid.rc == 2);
  CHECK(contains(grid.err, "more than the 2^31-1 a grid's x dimension allows"));
  CHECK(run_cli({"show", "--arch", "80", "--problem", long_seq}, env).rc == 2);
  CHECK_FALSE(std::filesystem::exists(cache));  // nothing was compiled

  // Values the problem syntax itself refuses (a length sum past int32, a size past 2^40): exit 2 in every command.
  const std::string sum = "dtype=f16,seqlens_q=2000000000:2000000000,seqlens_k=5:5,heads=1,head_dim=64";
  const std::string huge = "dtype=f16,seqlen=1099511627777,heads=1,head_dim=64";
  std::ofstream(work.path() + "/sum.yml")
      << "problems:\n  - {dtype: f16, seqlens_q: 2000000000:2000000000, seqlens_k: 5:5, heads: 1, head_dim: 64}\n";
  for (const auto& [args, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"explain", "--arch", "80", "--no-compile", "--problem", sum}, "add up to 4000000000, more than"},
           {{"tune", "--dry-run", "--arch", "80", "--problem", sum}, "add up to 4000000000, more than"},
           {{"pregen", "--arch", "80", "--list", "--problems", work.path() + "/sum.yml"}, "add up to 4000000000"},
           {{"explain", "--arch", "80", "--no-compile", "--problem", huge}, "must be an integer in [0, 1099511627776]"},
           {{"tune", "--dry-run", "--arch", "80", "--problem", huge}, "must be an integer in [0, 1099511627776]"},
       }) {
    CAPTURE(args[0]);
    const Run r = run_cli(args, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "flashgen " + args[0] + ": error: "));
    CHECK(contains(r.err, needle));
  }
}

#ifdef FLASHGEN_EXAMPLE
TEST_CASE("example: --arch takes the compute capabilities the library has a profile for; others exit 2") {
  TempDir work("flashgen-example-arch");
  const auto env = base_env(work.path() + "/cache");
  const std::string allowed = "allowed: sm_70, sm_72, sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_103, "
                              "sm_120, sm_121";
  for (const char* arch : {"95", "50", "9", "0", "1000", "-1", "99999999999"}) {
    CAPTURE(arch);
    const Run r = run_cli({"--arch", arch}, env, FLASHGEN_EXAMPLE);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());  // refused before anything is planned or compiled
    CHECK(contains(r.err, std::string("attention: error: --arch: ") + arch + " is not a compute capability"));
    CHECK(contains(r.err, allowed));
  }
  const Run text = run_cli({"--arch", "sm_90"}, env, FLASHGEN_EXAMPLE);
  CHECK(text.rc == 2);
  CHECK(contains(text.err, "'sm_90' is not a compute capability 10*major+minor"));
  const Run help = run_cli({"--help"}, env, FLASHGEN_EXAMPLE);
  CHECK(help.rc == 0);
  CHECK(contains(help.out, "sm_70, sm_72"));
  CHECK_FALSE(std::filesystem::exists(work.path() + "/cache"));
}

TEST_CASE("example: kernels that cannot be compiled are an error (exit 2), never reported as compiled") {
  TempDir work("flashgen-example-nvrtc");
  auto env = base_env(work.path() + "/cache");
  env.push_back("FLASHGEN_NVRTC_LIBRARY=" + work.path() + "/no-such-nvrtc.so");
  const Run r = run_cli({"--shape", "llama"}, env, FLASHGEN_EXAMPLE);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 2);
  CHECK(contains(r.out, "not every kernel was compiled"));
  CHECK_FALSE(contains(r.out, "no GPU: compiled for"));
}
#endif

TEST_CASE("cli: output that cannot be written (stdout on a full device) is a failure, not exit 0") {
  if (!std::filesystem::exists("/dev/full")) return;  // (Linux)
  TempDir work("flashgen-cli-full");
  const auto env = base_env(work.path() + "/cache");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", "--problem", "dtype=f16,seqlen=128,heads=8,head_dim=64"},
        std::vector<std::string>{"explain", "--arch", "80", "--no-compile", "--problem",
                                 "dtype=f16,seqlen=128,heads=8,head_dim=64"},
        std::vector<std::string>{"info"}}) {
    CAPTURE(args[0]);
    const Run r = run_cli(args, env, FLASHGEN_CLI, "/dev/full");
    INFO("stderr:\n", r.err);
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "flashgen " + args[0] + ": error: writing the output to stdout failed"));
  }
  // --help and --version too (before: exit 0, nothing said).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, std::vector<std::string>{"--help"},
        std::vector<std::string>{"show", "--help"}}) {
    CAPTURE(args.back());
    const Run r = run_cli(args, env, FLASHGEN_CLI, "/dev/full");
    INFO("stderr:\n", r.err);
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "error: writing the output to stdout failed: No space left on device"));
    // The same to a writable stdout: exit 0 with the text.
    const Run ok = run_cli(args, env);
    CHECK(ok.rc == 0);
    CHECK_FALSE(ok.out.empty());
  }
}

TEST_CASE("cli: pregen --help shows a --problems file, not a --problem option it does not have") {
  TempDir work("flashgen-cli-pregen-help");
  const Run r = run_cli({"pregen", "--help"}, base_env(work.path() + "/c"));
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "A --problems file lists problems"));
  CHECK_FALSE(contains(r.out, "  --problem dtype="));  // (before: the tool's footer, with a --problem example)
  CHECK(contains(r.out, "Environment: FLASHGEN_CACHE_DIR"));
  const Run top = run_cli({"--help"}, base_env(work.path() + "/c"));
  CHECK(contains(top.out, "Left out: dtype f16, batch 1, seqlen_k = seqlen_q, heads_kv = heads_q"));
}

TEST_CASE("cli: a bundle directory listed twice in FLASHGEN_CACHE_PATH (any spelling) is searched and listed once") {
  TempDir work("flashgen-cli-bundle-twice");
  const std::string bundle = work.path() + "/b";
  const Run made = run_cli({"pregen", "--arch", "80", "--head-dims", "16", "--dtypes", "f16", "--masks", "none", "-j",
                            "1", "--out", bundle},
                           base_env(work.path() + "/c"));
  REQUIRE(made.rc == 0);
  auto env = base_env(work.path() + "/c");
  env.push_back("FLASHGEN_CACHE_PATH=" + bundle + ":" + bundle + "/:" + work.path() + "//b");
  const Run ls = run_cli({"cache", "ls"}, env);
  INFO("stdout:\n", ls.out, "\nstderr:\n", ls.err);
  CHECK(ls.rc == 0);
  CHECK(contains(ls.out, "bundle " + bundle + ": 1 entry"));
  CHECK(contains(ls.out, "\n1 entry: 1 ok"));  // (before: 3 entries, the one kernel listed three times)
}

TEST_CASE("cli: pregen --problems with a feature flag is refused (exit 2), not the flag dropped; --tiles applies") {
  // Before: --head-dims 256 --masks causalbr --lse yes with --problems listed the file's d=64 none lse=0 kernel.
  TempDir work("flashgen-cli-problems-flags");
  const auto env = base_env(work.path() + "/c");
  const std::string file = work.path() + "/p.yml";
  std::ofstream(file) << "problems:\n  - {dtype: f16, seqlen: 128, heads: 2, head_dim: 64}\n";
  const std::vector<std::string> base = {"pregen", "--arch", "80", "--list", "--problems", file};
  std::vector<UsageError> cases;
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--head-dims", "256"}, {"--dtypes", "bf16"}, {"--masks", "causalbr"}, {"--bias", "f32"},
           {"--lse", "yes"}, {"--softcap", "yes"}, {"--sinks", "yes"}, {"--alibi", "yes"}, {"--varlen", "yes"},
           {"--paged", "yes"}})
    cases.push_back({with(base, {flag, value}), {flag + " excludes --problems"}});
  check_usage_errors(cases, env);
  const Run plain = run_cli(base, env);
  INFO("stdout:\n", plain.out, "\nstderr:\n", plain.err);
  REQUIRE(plain.rc == 0);
  CHECK(contains(plain.out, ",d=64,dv=64,"));
  const Run tiled = run_cli(with(base, {"--tiles", "64x64x4x2"}), env);
  CHECK(tiled.rc == 0);
  CHECK(contains(tiled.out, ",bm=64,bn=64,w=4,s=2,"));
}

TEST_CASE("cli: cache options another action takes are refused (exit 2), not ignored; --dir '' is refused") {
  TempDir work("flashgen-cli-cache-opts");
  const auto env = base_env(work.path() + "/cache");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"cache", "clear", "--older-than", "1"}, "--older-than applies to prune only (the action is clear)"},
      {{"cache", "clear", "--dry-run", "--older-than", "1"}, "--older-than applies to prune only"},
      {{"cache", "ls", "--older-than", "5"}, "--older-than applies to prune only (the action is ls)"},
      {{"cache", "verify", "--temp-age", "3"}, "--temp-age applies to prune only (the action is verify)"},
      {{"cache", "clear", "--temp-age", "3"}, "--temp-age applies to prune only"},
      {{"cache", "ls", "--dry-run"}, "--dry-run applies to prune and clear only (the action is ls)"},
      {{"cache", "ls", "--dir", ""}, "--dir"},
  };
  for (const auto& [args, needle] : refused) {
    CAPTURE(args[1]);
    CAPTURE(needle);
    const Run r = run_cli(args, env);
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, needle));
    CHECK(r.out.empty());
  }
  CHECK(run_cli({"cache", "prune", "--dry-run", "--older-than", "1", "--temp-age", "3"}, env).rc == 0);
  CHECK(run_cli({"cache", "clear", "--dry-run"}, env).rc == 0);
}

TEST_CASE("cli: explain models waves only with an SM count, and says so without one") {
  TempDir work("flashgen-cli-waves");
  const auto env = base_env(work.path() + "/cache");
  const std::string p = "dtype=bf16,seqlen=4096,heads=8,head_dim=128";
  // (this machine's GPU, if any, is not an sm_80 one in CI; --sms gives the count)
  const Run none = run_cli({"explain", "--arch", "80", "--no-compile", "--problem", p}, env);
  INFO(none.out, none.err);
  REQUIRE(none.rc == 0);
  if (!gpu_available()) CHECK(contains(none.out, "waves not modelled: give --sms"));
  // 256 blocks of one per SM on 108 SMs: 3 waves, the last 40/108 full: 256 / 324 = 79 %.
  const Run sms = run_cli({"explain", "--arch", "80", "--no-compile", "--sms", "108", "--problem", p}, env);
  INFO(sms.out, sms.err);
  REQUIRE(sms.rc == 0);
  CHECK(contains(sms.out, "waves 79%"));
  CHECK_FALSE(contains(sms.out, "waves not modelled"));
}
