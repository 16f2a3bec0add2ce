// Profiles: built-in set, strict YAML schema, selection by arch, FLASHGEN_PROFILE.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "flashgen/profile.hpp"
#include "flashgen/spec.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

const char* const kOrigin = "test.yml";

// A valid profile in block style, one key per line, so tests can replace or
// delete single lines.
const std::string kBase = R"(# comment
name: testgen
archs: [75]
matrix_unit:
  shape: m16n8k8
  operand_dtypes: [float16]
  accumulator_dtype: float32
flash:
  - {head_dim_le: 64, block_m: 64, block_n: 64, warps: 4, stages: 2}
  - {head_dim_le: 128, block_m: 64, block_n: 32, warps: 4, stages: 2}
resources:
  smem_per_block: 65536
  smem_per_sm: 65536
  registers_per_sm: 65536
  max_threads_per_sm: 1024
ceiling:
  mma_flop_per_clock_per_sm: 1024
  smem_bytes_per_clock_per_sm: 128
  dram_bytes_per_clock_per_sm: 5.9
)";

std::string replace(const std::string& from, const std::string& to) {
  std::string t = kBase;
  const auto pos = t.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, "test bug: '", from, "' not in the base profile");
  t.replace(pos, from.size(), to);
  return t;
}

// parse_profile(text) must throw InvalidArgument whose message contains every needle.
void check_rejected(const std::string& text, const std::vector<std::string>& needles) {
  try {
    parse_profile(text, kOrigin);
    FAIL_CHECK("accepted:\n", text);
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.rfind(std::string(kOrigin) + ": ", 0) == 0);
    for (const auto& n : needles) CHECK(msg.find(n) != std::string::npos);
  }
}

// Sets (or clears) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::filesystem::path temp_file(const std::string& stem, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              (stem + "-" + std::to_string(::getpid()) + ".yml");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("builtin profiles load") {
  ScopedEnv env("FLASHGEN_PROFILE", nullptr);
  const auto& all = builtin_profiles();
  REQUIRE(all.size() >= 2);
  const Profile* ampere = nullptr;
  const Profile* hopper = nullptr;
  for (const auto& p : all) {
    if (p.name == "ampere") ampere = &p;
    if (p.name == "hopper") hopper = &p;
  }
  REQUIRE(ampere);
  REQUIRE(hopper);
  CHECK(ampere->source == "<builtin>/ampere.yml");
  CHECK(hopper->source == "<builtin>/hopper.yml");
  CHECK(ampere->archs == std::vector<int>{80, 86, 87});
  CHECK(hopper->archs == std::vector<int>{90});
  CHECK(hopper->matrix_unit.shape == MatrixUnit::m16n8k16);
  CHECK(hopper->matrix_unit.accumulator_dtype == "float32");
  CHECK(hopper->supports_dtype(DType::f16));
  CHECK(hopper->supports_dtype(DType::bf16));
  CHECK(hopper->smem_per_block == 232448);
  CHECK(hopper->smem_per_sm == 233472);
  CHECK(hopper->registers_per_sm == 65536);
  CHECK(hopper->max_threads_per_sm == 2048);
  CHECK(hopper->mma_flop_per_clock_per_sm == 2728);
  CHECK(ampere->smem_per_block == 101376);
  CHECK(ampere->smem_per_sm == 102400);
  CHECK(ampere->max_threads_per_sm == 1536);
  CHECK(ampere->mma_flop_per_clock_per_sm == 2048);
  for (const Profile& p : builtin_profiles()) {
    CAPTURE(p.name);
    CHECK(p.smem_bytes_per_clock_per_sm == 128);
    CHECK(p.dram_bytes_per_clock_per_sm > 0.0);
  }
  CHECK(hopper->dram_bytes_per_clock_per_sm == doctest::Approx(18.4));

  CHECK(&profile_for_arch(90) == hopper);
  CHECK(&profile_for_arch(80) == ampere);
  CHECK(&profile_for_arch(86) == ampere);
  CHECK(&profile_for_arch(87) == ampere);
}

TEST_CASE("builtin profiles: every tile row fits, for every head dim it serves") {
  for (const auto& p : builtin_profiles()) {
    CAPTURE(p.name);
    REQUIRE(!p.flash.empty());
    CHECK(p.flash.back().head_dim_le >= 256);
    for (size_t i = 1; i < p.flash.size(); ++i) CHECK(p.flash[i - 1].head_dim_le < p.flash[i].head_dim_le);
    for (const auto& t : p.flash) {
      KernelSpec worst;
      worst.head_dim = worst.head_dim_v = t.head_dim_le;
      worst.tile.block_m = t.tile.block_m;
      worst.tile.block_n = t.tile.block_n;
      worst.tile.stages = t.tile.stages;
      CHECK(worst.smem_bytes() <= p.smem_per_block);
    }
    for (int d = 16; d <= 256; d += 8) {
      for (int dv = 16; dv <= 256; dv += 8) {
        const FlashTile& t = p.tile_for(std::max(d, dv));
        for (DType dtype : p.matrix_unit.operand_dtypes) {
          KernelSpec s;
          s.arch = p.archs.front();
          s.unit = p.matrix_unit.shape;
          s.dtype = dtype;
          s.head_dim = d;
          s.head_dim_v = dv;
          s.tile = t.tile;
          s.mask = MaskKind::causal_bottom_right;
          s.bias = BiasKind::f32;
          s.has_lse = true;
          const auto errors = validate(s, p);
          if (!errors.empty()) FAIL_CHECK(s.canonical(), ": ", errors.front());
        }
      }
    }
  }
}

TEST_CASE("builtin profiles match profiles/*.yml in the source tree") {
  for (const auto& p : builtin_profiles()) {
    const std::string path = std::string(FLASHGEN_SOURCE_DIR) + "/profiles/" + p.name + ".yml";
    const Profile f = load_profile_file(path);
    CHECK(f.source == path);
    CHECK(f.name == p.name);
    CHECK(f.archs == p.archs);
    CHECK(f.smem_per_block == p.smem_per_block);
    CHECK(f.flash.size() == p.flash.size());
  }
}

TEST_CASE("Profile::tile_for and supports_dtype") {
  const Profile p = parse_profile(kBase, kOrigin);
  CHECK(p.name == "testgen");
  CHECK(p.source == kOrigin);
  CHECK(p.tile_for(16).head_dim_le == 64);
  CHECK(p.tile_for(64).head_dim_le == 64);
  CHECK(p.tile_for(72).head_dim_le == 128);
  CHECK(p.tile_for(128).tile.block_n == 32);
  CHECK_THROWS_WITH_AS(p.tile_for(136), Contains("head_dim (136; of a problem, the larger of head_dim and head_dim_v)"), Unsupported);
  CHECK_THROWS_WITH_AS(p.tile_for(136), Contains("at most 128"), Unsupported);
  CHECK(p.supports_dtype(DType::f16));
  CHECK_FALSE(p.supports_dtype(DType::bf16));
}

TEST_CASE("parse_profile: unknown keys") {
  check_rejected(kBase + "extra: 1\n",
                 {"key 'extra' is unknown; allowed keys: name, archs, matrix_unit, flash, resources, ceiling"});
  check_rejected(replace("  accumulator_dtype: float32\n", "  accumulator_dtype: float32\n  peak: 3\n"),
                 {"key 'matrix_unit.peak' is unknown; allowed keys: shape, operand_dtypes, accumulator_dtype"});
  check_rejected(replace("stages: 2}\nresources", "stages: 2, swizzle: 1}\nresources"),
                 {"key 'flash[1].swizzle' is unknown; allowed keys: head_dim_le, block_m, block_n, warps, stages"});
  check_rejected(replace("  max_threads_per_sm: 1024\n", "  max_threads_per_sm: 1024\n  l2: 5\n"),
                 {"key 'resources.l2' is unknown"});
}

TEST_CASE("parse_profile: missing keys") {
  check_rejected(replace("ceiling:\n  mma_flop_per_clock_per_sm: 1024\n  smem_bytes_per_clock_per_sm: 128\n"
                         "  dram_bytes_per_clock_per_sm: 5.9\n",
                         ""),
                 {"key 'ceiling' is missing"});
  check_rejected(replace("  smem_bytes_per_clock_per_sm: 128\n", ""),
                 {"key 'ceiling.smem_bytes_per_clock_per_sm' is missing"});
  check_rejected(replace("  dram_bytes_per_clock_per_sm: 5.9\n", ""),
                 {"key 'ceiling.dram_bytes_per_clock_per_sm' is missing"});
  check_rejected(replace("name: testgen\n", ""), {"key 'name' is missing"});
  check_rejected(replace("  smem_per_sm: 65536\n", ""), {"key 'resources.smem_per_sm' is missing"});
  check_rejected(replace("  operand_dtypes: [float16]\n", ""), {"key 'matrix_unit.operand_dtypes' is missing"});
  check_rejected(replace(" warps: 4, stages: 2}\nresources", " warps: 4}\nresources"),
                 {"key 'flash[1].stages' is missing"});
}

TEST_CASE("parse_profile: bad values") {
  check_rejected(replace("name: testgen", "name: Test Gen"), {"key 'name'", "'Test Gen'"});
  check_rejected(replace("archs: [75]", "archs: []"), {"key 'archs'", "non-empty sequence"});
  check_rejected(replace("archs: [75]", "archs: 75"), {"key 'archs'", "non-empty sequence"});
  check_rejected(replace("archs: [75]", "archs: [7]"), {"key 'archs[0]'", "'7'", "compute capability"});
  check_rejected(replace("archs: [75]", "archs: [75, sm_80]"), {"key 'archs[1]'", "'sm_80'"});
  check_rejected(replace("archs: [75]", "archs: [75, 75]"), {"key 'archs[1]'", "listed twice"});
  check_rejected(replace("shape: m16n8k8", "shape: m16n8k32"),
                 {"key 'matrix_unit.shape'", "'m16n8k32'", "m16n8k16, m16n8k8, m8n8k4"});
  check_rejected(replace("[float16]", "[float16, float32]"),
                 {"key 'matrix_unit.operand_dtypes[1]'", "'float32'", "allowed:"});
  check_rejected(replace("[float16]", "[]"), {"key 'matrix_unit.operand_dtypes'", "non-empty"});
  check_rejected(replace("accumulator_dtype: float32", "accumulator_dtype: float16"),
                 {"key 'matrix_unit.accumulator_dtype'", "'float16'", "allowed: float32"});
  check_rejected(replace("smem_per_block: 65536", "smem_per_block: -1"),
                 {"key 'resources.smem_per_block'", "'-1'", "positive integer"});
  check_rejected(replace("smem_per_block: 65536", "smem_per_block: 64KiB"),
                 {"key 'resources.smem_per_block'", "'64KiB'", "positive integer"});
  check_rejected(replace("smem_per_block: 65536", "smem_per_block: 70000"),
                 {"key 'resources.smem_per_block'", "70000", "at most resources.smem_per_sm (65536)"});
  check_rejected(replace("registers_per_sm: 65536", "registers_per_sm: 1.5"),
                 {"key 'resources.registers_per_sm'", "'1.5'"});
  check_rejected(replace("mma_flop_per_clock_per_sm: 1024", "mma_flop_per_clock_per_sm: 0"),
                 {"key 'ceiling.mma_flop_per_clock_per_sm'", "'0'"});
  check_rejected(replace("smem_bytes_per_clock_per_sm: 128", "smem_bytes_per_clock_per_sm: 0"),
                 {"key 'ceiling.smem_bytes_per_clock_per_sm'", "'0'", "[1, 4096]"});
  check_rejected(replace("smem_bytes_per_clock_per_sm: 128", "smem_bytes_per_clock_per_sm: 128.5"),
                 {"key 'ceiling.smem_bytes_per_clock_per_sm'", "'128.5'"});
  for (const char* bad : {"0", "0.0", "-3", "1e3", "nan", "inf", ".5", "5.", "1.2.3", "5000", "fast"}) {
    CAPTURE(bad);
    check_rejected(replace("dram_bytes_per_clock_per_sm: 5.9", std::string("dram_bytes_per_clock_per_sm: ") + bad),
                   {"key 'ceiling.dram_bytes_per_clock_per_sm'", std::string("'") + bad + "'",
                    "positive decimal number"});
  }
  check_rejected(replace("{head_dim_le: 64,", "{head_dim_le: 0,"), {"key 'flash[0].head_dim_le'", "'0'"});
  check_rejected(replace("{head_dim_le: 128,", "{head_dim_le: 512,"),
                 {"key 'flash[1].head_dim_le'", "'512'", "[1, 256]"});
  check_rejected(replace("block_m: 64, block_n: 64", "block_m: 96, block_n: 64"),
                 {"key 'flash[0].block_m'", "96", "multiple of 16 * warps (64)"});
  check_rejected(replace("block_n: 64", "block_n: 24"), {"key 'flash[0].block_n'", "24", "multiple of 16"});
  check_rejected(replace("warps: 4, stages: 2}\n  - {head_dim_le: 128", "warps: 32, stages: 2}\n  - {head_dim_le: 128"),
                 {"key 'flash[0].warps'", "'32'", "[1, 16]"});
  check_rejected(replace("stages: 2}\nresources", "stages: 5}\nresources"), {"key 'flash[1].stages'", "'5'", "[1, 4]"});
  check_rejected(replace("stages: 2}\nresources", "stages: 4}\nresources"),
                 {"key 'flash[1]'", "81920 bytes", "head dim 128", "smem_per_block (65536)"});
  check_rejected(replace("flash:\n  - {head_dim_le: 64, block_m: 64, block_n: 64, warps: 4, stages: 2}\n"
                         "  - {head_dim_le: 128, block_m: 64, block_n: 32, warps: 4, stages: 2}\n",
                         "flash: []\n"),
                 {"key 'flash'", "non-empty sequence"});
  check_rejected(replace("  - {head_dim_le: 64", "  - 3\n  - {head_dim_le: 64"), {"key 'flash[0]'", "mapping"});
}

TEST_CASE("parse_profile: resources out of range name the key, its value and the allowed range") {
  const std::string regs = "[16384, 1048576]", threads = "a multiple of 32 in [128, 65536]",
                    smem = "positive integer in [1, 16777216]";
  for (const char* bad : {"1", "0", "16383", "1048577", "-65536"}) {
    CAPTURE(bad);
    check_rejected(replace("registers_per_sm: 65536", std::string("registers_per_sm: ") + bad),
                   {"key 'resources.registers_per_sm'", std::string("'") + bad + "'", regs, "128 registers"});
  }
  for (const char* bad : {"1", "0", "96", "65568", "-1024"}) {
    CAPTURE(bad);
    check_rejected(replace("max_threads_per_sm: 1024", std::string("max_threads_per_sm: ") + bad),
                   {"key 'resources.max_threads_per_sm'", std::string("'") + bad + "'", threads});
  }
  for (const char* bad : {"1000", "2047", "130"}) {  // in range, not whole warps
    CAPTURE(bad);
    check_rejected(replace("max_threads_per_sm: 1024", std::string("max_threads_per_sm: ") + bad),
                   {"key 'resources.max_threads_per_sm'", std::string("has value ") + bad, threads, "whole warps"});
  }
  check_rejected(replace("smem_per_sm: 65536", "smem_per_sm: 0"), {"key 'resources.smem_per_sm'", "'0'", smem});
  check_rejected(replace("smem_per_sm: 65536", "smem_per_sm: 16777217"),
                 {"key 'resources.smem_per_sm'", "'16777217'", smem});
  check_rejected(replace("smem_per_block: 65536", "smem_per_block: 16777217"),
                 {"key 'resources.smem_per_block'", "'16777217'", smem});
  // smem_per_sm below smem_per_block.
  check_rejected(replace("smem_per_sm: 65536", "smem_per_sm: 1024"),
                 {"key 'resources.smem_per_block'", "65536", "at most resources.smem_per_sm (1024)"});
  // The bounds themselves are accepted.
  CHECK_NOTHROW(parse_profile(replace("registers_per_sm: 65536", "registers_per_sm: 16384"), kOrigin));
  CHECK_NOTHROW(parse_profile(replace("registers_per_sm: 65536", "registers_per_sm: 1048576"), kOrigin));
  CHECK_NOTHROW(parse_profile(replace("max_threads_per_sm: 1024", "max_threads_per_sm: 128"), kOrigin));
  CHECK_NOTHROW(parse_profile(replace("max_threads_per_sm: 1024", "max_threads_per_sm: 65536"), kOrigin));
  CHECK_NOTHROW(parse_profile(replace("smem_per_sm: 65536", "smem_per_sm: 16777216"), kOrigin));
  // Every built-in profile lies inside them.
  for (const Profile& p : builtin_profiles()) {
    CAPTURE(p.name);
    CHECK(p.registers_per_sm >= 16384);
    CHECK(p.max_threads_per_sm % 32 == 0);
    CHECK(p.smem_per_block <= p.smem_per_sm);
  }
}

TEST_CASE("parse_profile: unsorted or duplicate flash rows") {
  const std::string swapped = replace(
      "  - {head_dim_le: 64, block_m: 64, block_n: 64, warps: 4, stages: 2}\n"
      "  - {head_dim_le: 128, block_m: 64, block_n: 32, warps: 4, stages: 2}\n",
      "  - {head_dim_le: 128, block_m: 64, block_n: 32, warps: 4, stages: 2}\n"
      "  - {head_dim_le: 64, block_m: 64, block_n: 64, warps: 4, stages: 2}\n");
  check_rejected(swapped, {"key 'flash[1].head_dim_le'", "64", "ascending", "previous row has 128"});
  check_rejected(replace("{head_dim_le: 128,", "{head_dim_le: 64,"),
                 {"key 'flash[1].head_dim_le'", "strictly ascending"});
}

TEST_CASE("parse_profile: malformed documents") {
  check_rejected("name: [unclosed\n", {"invalid YAML at line"});
  check_rejected("", {"document must be a mapping"});
  check_rejected("- 1\n- 2\n", {"document must be a mapping"});
  check_rejected(kBase + "name: other\n", {"key 'name' appears more than once"});
}

TEST_CASE("load_profile_file: unreadable file") {
  CHECK_THROWS_WITH_AS(load_profile_file("/nonexistent/flashgen/x.yml"),
                       Contains("cannot read profile file '/nonexistent/flashgen/x.yml'"), IoError);
  const auto path = temp_file("flashgen-bad-profile", replace("block_n: 64", "block_n: 24"));
  CHECK_THROWS_WITH_AS(load_profile_file(path.string()), Contains((path.string() + ": key 'flash[0].block_n'").c_str()),
                       InvalidArgument);
  std::filesystem::remove(path);
}

TEST_CASE("profile_for_arch: no match names the nearest profiles") {
  ScopedEnv env("FLASHGEN_PROFILE", nullptr);
  CHECK_THROWS_WITH_AS(profile_for_arch(61),
                       Contains("no profile for compute capability sm_61; nearest: volta (sm_70, sm_72) above"),
                       Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(85),
                       Contains("sm_85; nearest: ampere (sm_80, sm_86, sm_87) on both sides."), Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(88),
                       Contains("sm_88; nearest: ampere (sm_80, sm_86, sm_87) below and ada (sm_89) above"),
                       Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(95), Contains("sm_95; nearest: hopper (sm_90) below and blackwell (sm_100, "
                                                     "sm_103) above."),
                       Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(110),
                       Contains("sm_110; nearest: blackwell (sm_100, sm_103) below and blackwell_consumer (sm_120, "
                                "sm_121) above."),
                       Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(130), Contains("sm_130; nearest: blackwell_consumer (sm_120, sm_121) below."),
                       Unsupported);
  CHECK_THROWS_WITH_AS(profile_for_arch(61), Contains("FLASHGEN_PROFILE"), Unsupported);
  // Not a compute capability at all (0 is the C ABI's "current device", not an arch).
  for (int bad : {0, -90, 9, 1000}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(profile_for_arch(bad),
                         Contains(("arch (" + std::to_string(bad) + ") must be a compute capability written 10 * "
                                   "major + minor, in [10, 999] (e.g. 90 for sm_90)")
                                      .c_str()),
                         InvalidArgument);
  }
}

TEST_CASE("FLASHGEN_PROFILE overrides the built-in profiles") {
  const auto path = temp_file("flashgen-test-profile", kBase);
  {
    ScopedEnv env("FLASHGEN_PROFILE", path.c_str());
    const Profile& p = profile_for_arch(75);
    CHECK(p.name == "testgen");
    CHECK(p.source == path.string());
    CHECK(p.matrix_unit.shape == MatrixUnit::m16n8k8);
    CHECK(&profile_for_arch(75) == &p);  // loaded once, cached
    CHECK_THROWS_WITH_AS(profile_for_arch(90), Contains("does not list compute capability sm_90"), Unsupported);
    CHECK_THROWS_WITH_AS(profile_for_arch(90), Contains(path.c_str()), Unsupported);
  }
  {
    ScopedEnv env("FLASHGEN_PROFILE", "/nonexistent/flashgen/profile.yml");
    CHECK_THROWS_AS(profile_for_arch(90), IoError);
  }
  // Back to the built-in set once the variable is gone.
  ScopedEnv env("FLASHGEN_PROFILE", nullptr);
  CHECK(profile_for_arch(90).name == "hopper");
  CHECK(profile_for_arch(75).name == "turing");
  CHECK_THROWS_AS(profile_for_arch(61), Unsupported);
  std::filesystem::remove(path);
}

TEST_CASE("plan(problem, arch, profile): an explicit profile instead of FLASHGEN_PROFILE") {
  ScopedEnv env("FLASHGEN_PROFILE", nullptr);
  const Profile p = parse_profile(kBase, kOrigin);
  alignas(16) static char buf[16];
  const AttentionProblem prob =
      make_bshd_problem(DType::f16, 1, 100, 100, 4, 4, 128, 128, MaskKind::none, buf, buf, buf, buf);
  const KernelSpec s = plan(prob, 75, p);
  CHECK(s.arch == 75);
  CHECK(s.unit == MatrixUnit::m16n8k8);
  CHECK(s.tile == p.tile_for(128).tile);
  CHECK(validate(s, p).empty());
  // The same spec as selecting the file through the environment variable.
  const auto path = temp_file("flashgen-test-profile-plan", kBase);
  {
    ScopedEnv file("FLASHGEN_PROFILE", path.c_str());
    CHECK(plan(prob, 75) == s);
  }
  std::filesystem::remove(path);
  // Without the variable, plan(problem, arch) still uses the built-in profile.
  CHECK(plan(prob, 75) == plan(prob, 75, profile_for_arch(75)));
  // The profile must list the arch; bad input is refused before the profile matters.
  CHECK_THROWS_WITH_AS(plan(prob, 80, p), Contains("arch (sm_80) is not a compute capability of profile testgen"),
                       Unsupported);
  AttentionProblem bad = prob;
  bad.head_dim = 12;
  CHECK_THROWS_AS(plan(bad, 75, p), InvalidArgument);
}

TEST_CASE("builtin profiles from Volta to Blackwell, selected by compute capability") {
  ScopedEnv env("FLASHGEN_PROFILE", nullptr);
  const std::vector<std::pair<int, std::string>> want = {
      {70, "volta"},  {72, "volta"},  {75, "turing"},    {80, "ampere"},
      {86, "ampere"}, {87, "ampere"}, {89, "ada"},       {90, "hopper"},
      {100, "blackwell"}, {103, "blackwell"}, {120, "blackwell_consumer"}, {121, "blackwell_consumer"}};
  for (const auto& [arch, name] : want) {
    CAPTURE(arch);
    const Profile& p = profile_for_arch(arch);
    CHECK(p.name == name);
    CHECK(p.source == "<builtin>/" + name + ".yml");
  }
  const Profile& volta = profile_for_arch(70);
  CHECK(volta.matrix_unit.shape == MatrixUnit::m8n8k4);
  CHECK(volta.matrix_unit.operand_dtypes == std::vector<DType>{DType::f16});
  CHECK(volta.tile_for(256).tile.block_m == 64);
  CHECK(volta.tile_for(256).tile.block_n == 32);
  CHECK(volta.smem_per_block == 98304);
  const Profile& turing = profile_for_arch(75);
  CHECK(turing.matrix_unit.shape == MatrixUnit::m16n8k8);
  CHECK_FALSE(turing.supports_dtype(DType::bf16));
  CHECK(turing.smem_per_block == 65536);
  const Profile& ada = profile_for_arch(89);
  CHECK(ada.matrix_unit.shape == MatrixUnit::m16n8k16);
  CHECK(ada.supports_dtype(DType::bf16));
  CHECK(ada.smem_per_block == 101376);
  // Blackwell through mma.sync m16n8k16 (tcgen05 is future work); the CUDA
  // programming guide's figures for compute capabilities 10.x and 12.x.
  const Profile& dc = profile_for_arch(100);
  CHECK(&profile_for_arch(103) == &dc);
  CHECK(dc.matrix_unit.shape == MatrixUnit::m16n8k16);
  CHECK(dc.matrix_unit.operand_dtypes == std::vector<DType>{DType::f16, DType::bf16});
  CHECK(dc.wgmma_flash.empty());
  CHECK(dc.smem_per_block == 232448);
  CHECK(dc.smem_per_sm == 233472);
  CHECK(dc.registers_per_sm == 65536);
  CHECK(dc.max_threads_per_sm == 2048);
  const Profile& consumer = profile_for_arch(120);
  CHECK(&profile_for_arch(121) == &consumer);
  CHECK(consumer.matrix_unit.shape == MatrixUnit::m16n8k16);
  CHECK(consumer.matrix_unit.operand_dtypes == std::vector<DType>{DType::f16, DType::bf16});
  CHECK(consumer.wgmma_flash.empty());
  CHECK(consumer.smem_per_block == 101376);
  CHECK(consumer.smem_per_sm == 102400);
  CHECK(consumer.registers_per_sm == 65536);
  CHECK(consumer.max_threads_per_sm == 1536);
}

// `text` with its first `from` replaced by `to`.
std::string swap(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

TEST_CASE("parse_profile: a matrix unit on archs the PTX ISA does not give it, bf16 where it has none") {
  check_rejected(replace("archs: [75]", "archs: [70, 75]"),
                 {"key 'archs[0]'", "70", "matrix unit m16n8k8", "needs sm_75 or later"});
  check_rejected(replace("shape: m16n8k8", "shape: m16n8k16"), {"key 'archs[0]'", "m16n8k16", "sm_80"});
  check_rejected(replace("[float16]", "[float16, bfloat16]"),
                 {"key 'matrix_unit.operand_dtypes[1]'", "bfloat16", "need sm_80 or later", "sm_75"});
  check_rejected(swap(replace("shape: m16n8k8", "shape: m8n8k4"), "[float16]", "[bfloat16]"),
                 {"key 'matrix_unit.operand_dtypes[0]'", "m8n8k4 takes float16 operands only"});
  // Accepted: m8n8k4 on sm_70, m16n8k8 with bf16 on sm_80 and later.
  CHECK_NOTHROW(parse_profile(swap(replace("shape: m16n8k8", "shape: m8n8k4"), "archs: [75]", "archs: [70, 90]"), kOrigin));
  CHECK_NOTHROW(parse_profile(swap(replace("[float16]", "[float16, bfloat16]"), "archs: [75]", "archs: [80, 90]"), kOrigin));
}
