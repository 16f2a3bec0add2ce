// The flashgen command-line tool (tools/flashgen*.cpp), run as a separate
// process (FLASHGEN_CLI): pregen into a bundle that another process then uses
// without any NVRTC call; explain for a supported and an unsupported problem;
// show; cache ls / verify / prune; info; tune without a GPU and its dry run;
// tune files through --device; progress output on a pseudo-terminal and on a
// pipe; --help on every subcommand and errors on stderr with a non-zero exit.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/cache.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "tools/flashgen_cli.hpp"

using namespace flashgen;
using flashgen::test::TempDir;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

[[noreturn]] void exec_cli(const std::vector<std::string>& args) {
  std::vector<const char*> argv = {FLASHGEN_CLI};
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  ::execv(FLASHGEN_CLI, const_cast<char* const*>(argv.data()));
  ::_exit(127);
}

// Runs the CLI with stdout and stderr redirected to files (a pipe for both).
Run run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  TempDir tmp("flashgen-cli-run");
  const std::string out = tmp.path() + "/out", err = tmp.path() + "/err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    apply_env(env);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec_cli(args);
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
  CHECK(test::list_dir(user).empty());  // nothing compiled, nothing written

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

  const Run bad_tile = run_cli({"pregen", "--arch", "90", "--head-dims", "256", "--dtypes", "f16", "--masks", "none",
                                "--tiles", "256x128x4x4", "--list"},
                               env);
  CHECK(bad_tile.rc == 1);
  CHECK(contains(bad_tile.err, "not planned"));
  CHECK(contains(bad_tile.err, "smem_bytes"));
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
  CHECK(test::list_dir(work.path() + "/cache").empty());  // a dry run writes nothing

  // Once compiled, explain says where the entry is.
  REQUIRE(run_cli({"pregen", "--arch", "90", "--head-dims", "96", "--dtypes", "f16", "--masks", "causaltl"}, env).rc ==
          0);
  const Run cached = run_cli({"explain", "--problem", problem, "--arch", "90"}, env);
  CHECK(cached.rc == 0);
  CHECK(contains(cached.out, "cached: " + work.path() + "/cache/" + spec.kernel_name() + "-"));
}

TEST_CASE("cli: explain an unsupported problem: every broken rule and the nearest alternatives") {
  TempDir work("flashgen-cli-explain-bad");
  const auto env = base_env(work.path() + "/cache");
  const Run r = run_cli(
      {"explain", "--problem", "dtype=bf16,seqlen=100,heads_q=12,heads_kv=5,head_dim=100", "--arch", "75"}, env);
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "unsupported: 4 rules broken"));
  CHECK(contains(r.out, "heads_q (12) must be a multiple of heads_kv (5)"));
  CHECK(contains(r.out, "head_dim (100) must be a multiple of 8"));
  CHECK(contains(r.out, "head_dim_v (100) must be a multiple of 8"));
  CHECK(contains(r.out, "dtype (bf16) is not an operand dtype"));
  CHECK(contains(r.out, "nearest supported alternatives:"));
  // Every alternative printed is a kernel that plans.
  size_t alternatives = 0;
  for (const std::string& l : lines(r.out)) {
    const size_t at = l.find("-> ");
    if (at == std::string::npos) continue;
    ++alternatives;
    CHECK(l.substr(at + 3).rfind("flashgen_fwd_sm75_f16_d", 0) == 0);
  }
  CHECK(alternatives >= 1);

  const Run no_tile = run_cli({"explain", "--problem", "dtype=f16,seqlen=100,heads=2,head_dim=256", "--arch", "90",
                               "--tile", "256x128x4x4"},
                              env);
  CHECK(no_tile.rc == 1);
  CHECK(contains(no_tile.out, "smem_bytes"));
  CHECK(contains(no_tile.out, "the profile's tile"));
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
  CHECK(contains(info.out, "cache user cache " + dir + " (FLASHGEN_CACHE_DIR): searched, written"));
  CHECK(contains(info.out, "tune file    " + dir + "/tune.yml: 0 entries"));
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

  // A tune file made on "CLI Test GPU" for this class.
  const std::string tune = work.path() + "/tune.yml";
  TuneEntry e;
  e.device = "CLI Test GPU";
  e.arch = 90;
  e.profile = "hopper";
  e.profile_hash = profile_hash(profile_for_arch(90));
  e.generator = kGeneratorVersion;
  e.problem = problem_class(cli::to_problem(cli::parse_problem_text(llama)));
  e.tile = TileShape{128, 32, 8, 2};
  e.tflops = 300;
  save_tune_file(tune, TuneFile{{e}});
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
  CHECK(contains(other.err, "is ignored: it was measured on CLI Test GPU, this device is Other GPU"));
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
