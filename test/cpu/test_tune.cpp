// Tune files (include/flashgen/tune.hpp): strict parsing with origin + key +
// reason, round trip, plan() using an entry of this device and ignoring
// foreign ones with one notice; warmup(); the tile model of flashgen tune /
// explain (tools/flashgen_model.cpp) and the CLI's problem parsing.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.h"
#include "flashgen/flashgen.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/tune_internal.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "tools/flashgen_cli.hpp"

using namespace flashgen;
using flashgen::test::EnvGuard;
using flashgen::test::ScopedCache;
using flashgen::test::StderrCapture;
using flashgen::test::TempDir;

namespace {

using flashgen::test::contains;

const Profile& hopper() { return profile_for_arch(90); }

std::string entry_text(const std::string& device, int arch, const std::string& hash, const std::string& tile,
                       const std::string& problem = "{dtype: f16, head_dim: 128, head_dim_v: 128, mask: causalbr, "
                                                    "bias: none, lse: false, seqlen_q_le: 4096}") {
  return "  - device: \"" + device + "\"\n    arch: " + std::to_string(arch) +
         "\n    profile: hopper\n    profile_hash: \"" + hash + "\"\n    generator: \"0.1.0\"\n    problem: " + problem +
         "\n    tile: " + tile + "\n    tflops: 345.2\n";
}

const std::string kTile = "{block_m: 128, block_n: 32, warps: 8, stages: 2}";

std::string valid_file() {
  return "version: 1\nentries:\n" + entry_text("Test GPU", 90, profile_hash(hopper()), kTile) +
         entry_text("Test GPU", 90, profile_hash(hopper()), "{block_m: 64, block_n: 64, warps: 4, stages: 3}",
                    "{dtype: bf16, head_dim: 96, head_dim_v: 64, mask: none, bias: f32, lse: true, seqlen_q_le: 131072}");
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, "test bug: '", from, "' not in the text");
  return text.replace(pos, from.size(), to);
}

void check_rejected(const std::string& text, const std::vector<std::string>& needles) {
  try {
    parse_tune_file(text, "t.yml");
    FAIL_CHECK("accepted:\n", text);
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.rfind("t.yml: ", 0) == 0);
    for (const auto& n : needles) CHECK(contains(msg, n));
  }
}

// The Llama-3-8B prefill problem of the example.
cli::ProblemDesc llama() {
  return cli::parse_problem_text("dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr");
}

}  // namespace

TEST_CASE("tune: problem classes and seqlen buckets") {
  CHECK(seqlen_q_bucket(0) == 64);
  CHECK(seqlen_q_bucket(1) == 64);
  CHECK(seqlen_q_bucket(64) == 64);
  CHECK(seqlen_q_bucket(65) == 128);
  CHECK(seqlen_q_bucket(4096) == 4096);
  CHECK(seqlen_q_bucket(4097) == 8192);
  CHECK(seqlen_q_bucket(79200) == 131072);
  const ProblemClass c = problem_class(cli::to_problem(llama()));
  CHECK(c.dtype == DType::f16);
  CHECK(c.head_dim == 128);
  CHECK(c.head_dim_v == 128);
  CHECK(c.mask == MaskKind::causal_bottom_right);
  CHECK(c.bias == BiasKind::none);
  CHECK_FALSE(c.has_lse);
  CHECK(c.seqlen_q_le == 4096);
  CHECK(c.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 seqlen_q<=4096");
  // Batch, heads and seqlen_k do not change the class.
  cli::ProblemDesc other = llama();
  other.batch = 7;
  other.heads_q = other.heads_kv = 4;
  other.seqlen_k = 100;
  other.seqlen_q = 3000;
  CHECK(problem_class(cli::to_problem(other)) == c);
}

TEST_CASE("tune: a tune file round-trips through format and parse") {
  const TuneFile f = parse_tune_file(valid_file(), "t.yml");
  REQUIRE(f.entries.size() == 2);
  const TuneEntry& e = f.entries[1];
  CHECK(e.device == "Test GPU");
  CHECK(e.arch == 90);
  CHECK(e.profile == "hopper");
  CHECK(e.profile_hash == profile_hash(hopper()));
  CHECK(e.generator == "0.1.0");
  CHECK(e.problem.dtype == DType::bf16);
  CHECK(e.problem.head_dim == 96);
  CHECK(e.problem.head_dim_v == 64);
  CHECK(e.problem.bias == BiasKind::f32);
  CHECK(e.problem.has_lse);
  CHECK(e.problem.seqlen_q_le == 131072);
  CHECK(e.tile == Tile{64, 64, 4, 3});
  CHECK(e.tflops == doctest::Approx(345.2));

  const std::string text = format_tune_file(f);
  const TuneFile back = parse_tune_file(text, "formatted");
  REQUIRE(back.entries.size() == f.entries.size());
  for (size_t i = 0; i < f.entries.size(); ++i) {
    CHECK(back.entries[i].device == f.entries[i].device);
    CHECK(back.entries[i].problem == f.entries[i].problem);
    CHECK(back.entries[i].tile == f.entries[i].tile);
    CHECK(back.entries[i].profile_hash == f.entries[i].profile_hash);
    CHECK(back.entries[i].tflops == doctest::Approx(f.entries[i].tflops).epsilon(1e-3));
  }
  CHECK(format_tune_file(back) == text);
  CHECK(parse_tune_file(format_tune_file(TuneFile{}), "empty").entries.empty());

  // Device names with quotes and backslashes, and names YAML would read as null, survive.
  TuneFile odd = f;
  odd.entries[0].device = "GPU \"x\" \\ #1: [a]";
  odd.entries[0].profile = "null";
  odd.entries[1].device = "~";
  const TuneFile odd_back = parse_tune_file(format_tune_file(odd), "odd");
  CHECK(odd_back.entries[0].device == odd.entries[0].device);
  CHECK(odd_back.entries[0].profile == "null");
  CHECK(odd_back.entries[1].device == "~");

  // Save + load, and merge replaces the entry of the same slot.
  TempDir dir("flashgen-tune");
  const std::string path = dir.path() + "/tune.yml";
  save_tune_file(path, f);
  TuneFile loaded = load_tune_file(path);
  TuneEntry changed = loaded.entries[0];
  changed.tile = Tile{64, 32, 4, 2};
  TuneEntry added = loaded.entries[0];
  added.device = "Another GPU";
  merge_tune_entries(loaded, {changed, added});
  REQUIRE(loaded.entries.size() == 3);
  CHECK(loaded.entries[0].tile == Tile{64, 32, 4, 2});
  CHECK(loaded.entries[2].device == "Another GPU");
  CHECK_THROWS_AS(load_tune_file(dir.path() + "/missing.yml"), IoError);
}

TEST_CASE("tune: sinks and alibi in the problem class: written only when set, round trip, distinct classes") {
  cli::ProblemDesc d = llama();
  const ProblemClass plain = problem_class(cli::to_problem(d));
  CHECK_FALSE(plain.sinks);
  CHECK_FALSE(plain.alibi);
  d.sinks = true;
  const ProblemClass with_sinks = problem_class(cli::to_problem(d));
  CHECK(with_sinks.sinks);
  CHECK_FALSE(with_sinks.alibi);
  CHECK(with_sinks.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 sinks seqlen_q<=4096");
  d.alibi = true;
  d.softcap = 30.0f;
  const ProblemClass all = problem_class(cli::to_problem(d));
  CHECK(all.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 softcap sinks alibi seqlen_q<=4096");
  CHECK_FALSE(all == with_sinks);
  CHECK_FALSE(with_sinks == plain);
  // A window mask is a class of its own; its sizes are launch arguments, not part of the class.
  cli::ProblemDesc w = llama();
  w.mask = MaskKind::window_bottom_right;
  w.window_left = 4095;
  const ProblemClass window = problem_class(cli::to_problem(w));
  w.window_left = 128;
  w.window_right = 0;
  CHECK(problem_class(cli::to_problem(w)) == window);
  CHECK(window.str() == "f16 d128/v128 mask=windowbr bias=none lse=0 seqlen_q<=4096");

  TuneFile f = parse_tune_file(valid_file(), "t.yml");
  REQUIRE(f.entries.size() == 2);
  for (const ProblemClass& c : {plain, with_sinks, all, window}) {
    CAPTURE(c.str());
    TuneFile one;
    one.entries = {f.entries[0]};
    one.entries[0].problem = c;
    const std::string text = format_tune_file(one);
    CHECK(contains(text, "sinks: true") == c.sinks);
    CHECK(contains(text, "alibi: true") == c.alibi);
    CHECK_FALSE(contains(text, "sinks: false"));  // (written only when set: other files keep their text)
    CHECK_FALSE(contains(text, "alibi: false"));
    const TuneFile back = parse_tune_file(text, "formatted");
    REQUIRE(back.entries.size() == 1);
    CHECK(back.entries[0].problem == c);
    CHECK(format_tune_file(back) == text);
  }
  // Written out of order (after softcap, in that order) or explicitly false: still read.
  const std::string base = valid_file();
  TuneFile t = parse_tune_file(replace(base, "lse: false,", "lse: false, alibi: true, sinks: false,"), "t.yml");
  CHECK(t.entries[0].problem.alibi);
  CHECK_FALSE(t.entries[0].problem.sinks);
  check_rejected(replace(base, "lse: false,", "lse: false, sinks: maybe,"),
                 {"key 'entries[0].problem.sinks'", "allowed: true, false"});
  check_rejected(replace(base, "lse: false,", "lse: false, alibi: 2,"), {"key 'entries[0].problem.alibi'"});
  // Two entries of one device and tile slot that differ only in sinks are two classes, not a repeat.
  TuneFile two;
  two.entries = {f.entries[0], f.entries[0]};
  two.entries[1].problem.sinks = true;
  CHECK(parse_tune_file(format_tune_file(two), "two").entries.size() == 2);
}

TEST_CASE("tune: varlen in the problem class: written only when set, round trip, a class of its own") {
  const ProblemClass plain = problem_class(cli::to_problem(llama()));
  CHECK_FALSE(plain.varlen);
  // A packed batch of the same shape: its class differs only in varlen; the
  // seqlen bucket is that of max_seqlen_q.
  const cli::ProblemDesc d = cli::parse_problem_text(
      "dtype=f16,seqlens_q=4096:1000:17,seqlens_k=4096:1000:17,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr");
  const ProblemClass packed = problem_class(cli::to_problem(d));
  CHECK(packed.varlen);
  CHECK(packed.seqlen_q_le == 4096);
  CHECK(packed.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 varlen seqlen_q<=4096");
  CHECK_FALSE(packed == plain);
  ProblemClass unpacked = packed;
  unpacked.varlen = false;
  CHECK(unpacked == plain);
  cli::ProblemDesc all = d;
  all.sinks = all.alibi = true;
  all.softcap = 30.0f;
  CHECK(problem_class(cli::to_problem(all)).str() ==
        "f16 d128/v128 mask=causalbr bias=none lse=0 softcap sinks alibi varlen seqlen_q<=4096");

  TuneFile f = parse_tune_file(valid_file(), "t.yml");
  REQUIRE(f.entries.size() == 2);
  for (const ProblemClass& c : {plain, packed, problem_class(cli::to_problem(all))}) {
    CAPTURE(c.str());
    TuneFile one;
    one.entries = {f.entries[0]};
    one.entries[0].problem = c;
    const std::string text = format_tune_file(one);
    CHECK(contains(text, "varlen: true") == c.varlen);
    CHECK_FALSE(contains(text, "varlen: false"));  // (written only when set: other files keep their text)
    const TuneFile back = parse_tune_file(text, "formatted");
    REQUIRE(back.entries.size() == 1);
    CHECK(back.entries[0].problem == c);
    CHECK(format_tune_file(back) == text);
  }
  const std::string base = valid_file();
  CHECK(parse_tune_file(replace(base, "lse: false,", "lse: false, varlen: true,"), "t.yml").entries[0].problem.varlen);
  CHECK_FALSE(parse_tune_file(replace(base, "lse: false,", "lse: false, varlen: false,"), "t.yml")
                  .entries[0]
                  .problem.varlen);
  check_rejected(replace(base, "lse: false,", "lse: false, varlen: 3,"),
                 {"key 'entries[0].problem.varlen'", "allowed: true, false"});
  // Two entries that differ only in varlen are two classes, not a repeat.
  TuneFile two;
  two.entries = {f.entries[0], f.entries[0]};
  two.entries[1].problem.varlen = true;
  CHECK(parse_tune_file(format_tune_file(two), "two").entries.size() == 2);
  // plan() finds a varlen entry for a packed problem only.
  const KernelSpec def = rt::plan_default(cli::to_problem(d), 90);
  CHECK(def.varlen);
  CHECK_FALSE(rt::plan_default(cli::to_problem(llama()), 90).varlen);
}

TEST_CASE("tune: paged in the problem class: written only when set, round trip, a class of its own") {
  const ProblemClass plain = problem_class(cli::to_problem(llama()));
  CHECK_FALSE(plain.paged);
  // The same shape over a paged KV cache: its class differs only in paged (the page size is a launch argument).
  cli::ProblemDesc d = llama();
  d.page_size = 16;
  const ProblemClass paged = problem_class(cli::to_problem(d));
  CHECK(paged.paged);
  CHECK_FALSE(paged == plain);
  ProblemClass unpaged = paged;
  unpaged.paged = false;
  CHECK(unpaged == plain);
  d.page_size = 256;
  CHECK(problem_class(cli::to_problem(d)) == paged);
  CHECK(paged.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 paged seqlen_q<=4096");
  // With a packed batch: "varlen paged", in that order.
  const cli::ProblemDesc packed = cli::parse_problem_text(
      "dtype=f16,seqlens_q=4096:1000:17,seqlens_k=4096:1000:17,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr,"
      "page_size=64,alibi=1");
  const ProblemClass both = problem_class(cli::to_problem(packed));
  CHECK(both.varlen);
  CHECK(both.paged);
  CHECK(both.str() == "f16 d128/v128 mask=causalbr bias=none lse=0 alibi varlen paged seqlen_q<=4096");

  TuneFile f = parse_tune_file(valid_file(), "t.yml");
  REQUIRE(f.entries.size() == 2);
  for (const ProblemClass& c : {plain, paged, both}) {
    CAPTURE(c.str());
    TuneFile one;
    one.entries = {f.entries[0]};
    one.entries[0].problem = c;
    const std::string text = format_tune_file(one);
    CHECK(contains(text, "paged: true") == c.paged);
    CHECK_FALSE(contains(text, "paged: false"));  // (written only when set: other files keep their text)
    const TuneFile back = parse_tune_file(text, "formatted");
    REQUIRE(back.entries.size() == 1);
    CHECK(back.entries[0].problem == c);
    CHECK(format_tune_file(back) == text);
  }
  const std::string base = valid_file();
  CHECK(parse_tune_file(replace(base, "lse: false,", "lse: false, paged: true,"), "t.yml").entries[0].problem.paged);
  CHECK_FALSE(parse_tune_file(replace(base, "lse: false,", "lse: false, paged: false,"), "t.yml")
                  .entries[0]
                  .problem.paged);
  check_rejected(replace(base, "lse: false,", "lse: false, paged: 3,"),
                 {"key 'entries[0].problem.paged'", "allowed: true, false"});
  // Two entries that differ only in paged are two classes, not a repeat.
  TuneFile two;
  two.entries = {f.entries[0], f.entries[0]};
  two.entries[1].problem.paged = true;
  CHECK(parse_tune_file(format_tune_file(two), "two").entries.size() == 2);
  // plan() gives a paged problem a paged kernel.
  d.page_size = 16;
  const KernelSpec def = rt::plan_default(cli::to_problem(d), 90);
  CHECK(def.paged);
  CHECK_FALSE(rt::plan_default(cli::to_problem(llama()), 90).paged);
}

TEST_CASE("tune: every field is validated, unknown keys rejected, with origin, key and reason") {
  const std::string v = valid_file();
  check_rejected(v + "extra: 1\n", {"key 'extra' is unknown", "allowed keys: version, entries"});
  check_rejected(replace(v, "    tflops: 345.2\n", "    tflops: 345.2\n    note: x\n"),
                 {"key 'entries[0].note' is unknown"});
  check_rejected(replace(v, "mask: causalbr,", "mask: causalbr, window: 3,"),
                 {"key 'entries[0].problem.window' is unknown"});
  check_rejected(replace(v, "stages: 2}", "stages: 2, swizzle: 1}"), {"key 'entries[0].tile.swizzle' is unknown"});
  check_rejected(replace(v, "version: 1\n", ""), {"key 'version' is missing"});
  check_rejected(replace(v, "    arch: 90\n", ""), {"key 'entries[0].arch' is missing"});
  check_rejected(replace(v, ", lse: false", ""), {"key 'entries[0].problem.lse' is missing"});
  check_rejected(replace(v, "version: 1", "version: 2"), {"key 'version'", "'2'"});
  check_rejected(replace(v, "device: \"Test GPU\"", "device: \"\""), {"key 'entries[0].device'", "printable"});
  check_rejected(replace(v, "arch: 90", "arch: 9"), {"key 'entries[0].arch'", "'9'", "[10, 999]"});
  check_rejected(replace(v, "profile: hopper", "profile: Hopper"), {"key 'entries[0].profile'", "'Hopper'"});
  check_rejected(replace(v, profile_hash(hopper()), "XYZ"), {"key 'entries[0].profile_hash'", "16 lowercase hex"});
  check_rejected(replace(v, "dtype: f16", "dtype: f32"), {"key 'entries[0].problem.dtype'", "'f32'", "not a known"});
  check_rejected(replace(v, "head_dim: 128,", "head_dim: 100,"),
                 {"key 'entries[0].problem.head_dim'", "100", "multiple of 8"});
  check_rejected(replace(v, "head_dim_v: 128", "head_dim_v: 512"), {"key 'entries[0].problem.head_dim_v'", "'512'"});
  check_rejected(replace(v, "mask: causalbr", "mask: causal"), {"key 'entries[0].problem.mask'", "'causal'"});
  check_rejected(replace(v, "bias: none", "bias: f64"), {"key 'entries[0].problem.bias'", "'f64'"});
  check_rejected(replace(v, "lse: false", "lse: yes"), {"key 'entries[0].problem.lse'", "allowed: true, false"});
  check_rejected(replace(v, "seqlen_q_le: 4096", "seqlen_q_le: 4000"),
                 {"key 'entries[0].problem.seqlen_q_le'", "power of two"});
  check_rejected(replace(v, "seqlen_q_le: 4096", "seqlen_q_le: 32"), {"key 'entries[0].problem.seqlen_q_le'", "'32'"});
  check_rejected(replace(v, "block_m: 128, block_n: 32", "block_m: 96, block_n: 32"),
                 {"key 'entries[0].tile.block_m'", "multiple of 16 * warps (128)"});
  check_rejected(replace(v, "block_n: 32", "block_n: 24"), {"key 'entries[0].tile.block_n'", "multiple of 16"});
  check_rejected(replace(v, "warps: 8", "warps: 32"), {"key 'entries[0].tile.warps'", "'32'"});
  check_rejected(replace(v, "stages: 2}", "stages: 5}"), {"key 'entries[0].tile.stages'", "'5'"});
  for (const char* bad : {"-1", "nan", "inf", "1e3", "fast", "1.2.3", "2000000"}) {
    CAPTURE(bad);
    check_rejected(replace(v, "tflops: 345.2", std::string("tflops: ") + bad), {"key 'entries[0].tflops'"});
  }
  check_rejected("version: 1\nentries:\n" + entry_text("A", 90, profile_hash(hopper()), kTile) +
                     entry_text("A", 90, profile_hash(hopper()), "{block_m: 64, block_n: 64, warps: 4, stages: 2}"),
                 {"key 'entries[1]'", "repeats entries[0]"});
  check_rejected("version: 1\nentries: 3\n", {"key 'entries'", "must be a sequence"});
  check_rejected("- 1\n- 2\n", {"the document must be a mapping"});
  check_rejected("", {"the document must be a mapping"});
  check_rejected("version: [1\n", {"invalid YAML"});
  check_rejected(std::string(200, '[') + std::string(200, ']'), {"nests more than"});
  check_rejected("version: 1\n" + std::string(200, ' ') + "x: 1\n", {"indented more than"});
  check_rejected(std::string("version: 1\0\n", 12), {"NUL"});
}

TEST_CASE("tune: mutated tune files are either accepted or rejected with InvalidArgument, never anything else") {
  const std::string v = valid_file();
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]:,-#&*!|>'\"\n 0123456789abcxyz.%@`\\\t?";
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string t = v;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % t.size();
      switch (rng() % 3) {
        case 0: t[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: t.erase(pos, 1 + rng() % 8); break;
        default: t.insert(pos, std::string(1 + rng() % 3, alphabet[rng() % alphabet.size()])); break;
      }
      if (t.empty()) t = "x";
    }
    try {
      const TuneFile f = parse_tune_file(t, "mutant");
      ++accepted;
      // What parses survives the writer.
      const std::string text = format_tune_file(f);
      const TuneFile back = parse_tune_file(text, "formatted");
      REQUIRE(back.entries.size() == f.entries.size());
      for (size_t k = 0; k < f.entries.size(); ++k) {
        CHECK(back.entries[k].device == f.entries[k].device);
        CHECK(back.entries[k].profile == f.entries[k].profile);
        CHECK(back.entries[k].generator == f.entries[k].generator);
        CHECK(back.entries[k].problem == f.entries[k].problem);
        CHECK(back.entries[k].tile == f.entries[k].tile);
        CHECK(std::fabs(back.entries[k].tflops - f.entries[k].tflops) <= 0.05 + 1e-9);
      }
      CHECK(format_tune_file(back) == text);
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).rfind("mutant: ", 0) == 0);
    }
  }
  MESSAGE(accepted << " of 3000 mutants were still valid tune files");
}

TEST_CASE("tune: plan() uses this device's entry and ignores foreign ones with one notice") {
  ScopedCache cache;
  TempDir dir("flashgen-tune-plan");
  const std::string path = dir.path() + "/tune.yml";
  EnvGuard env("FLASHGEN_TUNE_FILE", path);
  rt::tune_reset_for_tests();
  const AttentionProblem p = cli::to_problem(llama());
  const KernelSpec def = rt::plan_default(p, 90);
  const std::string hash = profile_hash(hopper());
  auto write = [&](const std::string& entries) {
    std::ofstream(path) << "version: 1\nentries:\n" << entries;
    rt::tune_reset_for_tests();
  };
  auto tile_of = [](const KernelSpec& s) { return s.tile; };

  SUBCASE("an entry of this device, arch, profile and class is used") {
    write(entry_text("Test GPU", 90, hash, kTile));
    StderrCapture err;
    const KernelSpec s = rt::plan_for_device(p, 90, "Test GPU");
    CHECK(err.stop().empty());
    CHECK(tile_of(s) == Tile{128, 32, 8, 2});
    CHECK(s.dtype == def.dtype);
    CHECK(s.head_dim == def.head_dim);
    CHECK(s.mask == def.mask);
    // Another seqlen bucket, dtype or mask is another class: the default.
    cli::ProblemDesc longer = llama();
    longer.seqlen_q = longer.seqlen_k = 8192;
    CHECK(tile_of(rt::plan_for_device(cli::to_problem(longer), 90, "Test GPU")) == tile_of(def));
    cli::ProblemDesc bf = llama();
    bf.dtype = DType::bf16;
    CHECK(tile_of(rt::plan_for_device(cli::to_problem(bf), 90, "Test GPU")) == tile_of(def));
  }
  SUBCASE("an entry made on another device is ignored, with one notice") {
    write(entry_text("Other GPU", 90, hash, kTile));
    StderrCapture err;
    const KernelSpec s = rt::plan_for_device(p, 90, "Test GPU");
    const KernelSpec again = rt::plan_for_device(p, 90, "Test GPU");
    const std::string log = err.stop();
    INFO("stderr: ", log);
    CHECK(s == def);
    CHECK(again == def);
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "flashgen: warning: tune entry " + path + "[0]"));
    CHECK(contains(log, "is ignored: it was measured on 'Other GPU', this device is 'Test GPU'"));
  }
  SUBCASE("a device name no tune file can hold is refused, shown sanitized (one line, clipped)") {
    write(entry_text("Other GPU", 90, hash, kTile));
    const std::string name = "Bad\nGPU\x1b[31m" + std::string(100000, 'x');
    StderrCapture err;
    std::string what;
    try {
      (void)rt::plan_for_device(p, 90, name);
    } catch (const InvalidArgument& e) {
      what = e.what();
    }
    CHECK(err.stop().empty());
    INFO("message: ", what.substr(0, 400));
    CHECK(contains(what, "device name 'Bad?GPU?[31mxxx"));
    CHECK(contains(what, "must be 1 to 256 printable ASCII characters"));
    CHECK(contains(what, "it has 100012 bytes, some outside printable ASCII"));
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find('\x1b') == std::string::npos);
    CHECK(what.size() < 600);
    CHECK_THROWS_AS(rt::plan_for_device(p, 90, std::string(257, 'A')), InvalidArgument);
    CHECK(rt::plan_for_device(p, 90, std::string(256, 'A')) == def);  // (the longest name a tune file holds)
  }
  SUBCASE("an entry made for another arch is ignored, with one notice") {
    write(entry_text("Test GPU", 80, hash, kTile));
    StderrCapture err;
    CHECK(rt::plan_for_device(p, 90, "Test GPU") == def);
    const std::string log = err.stop();
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "it was measured for sm_80, this plan is for sm_90"));
  }
  SUBCASE("an entry measured with another version of the profile is ignored, with one notice") {
    write(entry_text("Test GPU", 90, "0123456789abcdef", kTile));
    StderrCapture err;
    CHECK(rt::plan_for_device(p, 90, "Test GPU") == def);
    const std::string log = err.stop();
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "another version of profile hopper"));
    CHECK(contains(log, "run flashgen tune again"));
  }
  SUBCASE("without a GPU to compare with, entries are ignored, with one notice") {
    write(entry_text("Test GPU", 90, hash, kTile));
    if (gpu_available()) {
      MESSAGE("a GPU is present: the no-GPU notice is not checked");
      return;
    }
    StderrCapture err;
    CHECK(plan(p, 90) == def);
    CHECK(plan(p, 90) == def);
    const std::string log = err.stop();
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "no GPU of that arch here"));
  }
  SUBCASE("a tile the profile cannot run is ignored, with one notice") {
    write(entry_text("Test GPU", 90, hash, "{block_m: 256, block_n: 256, warps: 4, stages: 4}"));
    StderrCapture err;
    CHECK(rt::plan_for_device(p, 90, "Test GPU") == def);
    const std::string log = err.stop();
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "the tile is not valid for profile hopper"));
    CHECK(contains(log, "smem_bytes"));
  }
  SUBCASE("an invalid tune file is ignored with one warning; the defaults are used") {
    std::ofstream(path) << "version: 1\nentries: [oops\n";
    rt::tune_reset_for_tests();
    StderrCapture err;
    CHECK(rt::plan_for_device(p, 90, "Test GPU") == def);
    CHECK(rt::plan_for_device(p, 90, "Test GPU") == def);
    const std::string log = err.stop();
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    CHECK(contains(log, "flashgen: warning: tune file " + path + " is not used"));
    CHECK(contains(log, "invalid YAML"));
  }
  SUBCASE("the default tune file beside the user cache is read, and re-read when it changes") {
    EnvGuard no_env("FLASHGEN_TUNE_FILE", std::nullopt);
    CHECK(default_tune_file_path() == cache.path() + "/tune.yml");
    std::ofstream(cache.path() + "/tune.yml") << "version: 1\nentries:\n" << entry_text("Test GPU", 90, hash, kTile);
    rt::tune_reset_for_tests();
    CHECK(tile_of(rt::plan_for_device(p, 90, "Test GPU")) == Tile{128, 32, 8, 2});
    std::ofstream(cache.path() + "/tune.yml")
        << "version: 1\nentries:\n"
        << entry_text("Test GPU", 90, hash, "{block_m: 64, block_n: 32, warps: 4, stages: 3}") << "# changed\n";
    CHECK(tile_of(rt::plan_for_device(p, 90, "Test GPU")) == Tile{64, 32, 4, 3});
  }
  rt::tune_reset_for_tests();
}

TEST_CASE("tune: the C ABI plans with a named device's entries (flashgen_plan_for_device)") {
  ScopedCache cache;
  TempDir dir("flashgen-tune-c");
  const std::string path = dir.path() + "/tune.yml";
  EnvGuard env("FLASHGEN_TUNE_FILE", path);
  std::ofstream(path) << "version: 1\nentries:\n" << entry_text("Test GPU", 90, profile_hash(hopper()), kTile);
  rt::tune_reset_for_tests();
  // llama(): f16, 4096 x 4096, heads 32 / 8, head_dim 128, causal bottom-right.
  flashgen_problem c{};
  const auto ptr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  REQUIRE(flashgen_problem_init_bshd(&c, FLASHGEN_DTYPE_F16, 1, 4096, 4096, 32, 8, 128, 128, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT,
                                     ptr(0x100000), ptr(0x200000), ptr(0x300000), ptr(0x400000)) == FLASHGEN_OK);
  const KernelSpec def = rt::plan_default(cli::to_problem(llama()), 90);
  char spec[256];
  std::fill(std::begin(spec), std::end(spec), '#');
  StderrCapture err;
  REQUIRE(flashgen_plan_for_device(&c, 90, "Test GPU", spec, sizeof spec) == FLASHGEN_OK);
  const KernelSpec tuned = KernelSpec::parse(spec);
  CHECK(tuned.tile == Tile{128, 32, 8, 2});
  CHECK(tuned.tile != def.tile);
  KernelSpec same_but_tile = tuned;
  same_but_tile.tile = def.tile;
  CHECK(same_but_tile == def);
  // Another device's name: its entries (none) are used, with the notice that this one is ignored.
  REQUIRE(flashgen_plan_for_device(&c, 90, "Other GPU", spec, sizeof spec) == FLASHGEN_OK);
  CHECK(KernelSpec::parse(spec) == def);
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(contains(log, "Test GPU"));
  // Bad arguments are refused by name, spec_out untouched.
  std::fill(std::begin(spec), std::end(spec), '#');
  CHECK(flashgen_plan_for_device(&c, 0, "Test GPU", spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "flashgen_plan_for_device: arch = 0; allowed: "));
  CHECK(contains(flashgen_last_error(), "in [10, 999]"));
  for (int arch : {-90, 9, 1000, 2147483647}) {
    CAPTURE(arch);
    CHECK(flashgen_plan_for_device(&c, arch, "Test GPU", spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(flashgen_last_error(), fmt::format("flashgen_plan_for_device: arch = {}; allowed: ", arch)));
  }
  CHECK(flashgen_plan_for_device(&c, 90, nullptr, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "device_name is NULL"));
  CHECK(flashgen_plan_for_device(&c, 90, "NVIDIA\nH200", spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "flashgen_plan_for_device: device_name 'NVIDIA?H200' must be 1 to 256 "
                                        "printable ASCII characters"));
  CHECK(flashgen_plan_for_device(&c, 90, "", spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "device_name is empty"));
  CHECK(flashgen_plan_for_device(nullptr, 90, "Test GPU", spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(flashgen_plan_for_device(&c, 90, "Test GPU", nullptr, 0) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(flashgen_plan_for_device(&c, 90, "Test GPU", spec, 10) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "spec_out_len = 10 is too small"));
  CHECK(flashgen_plan_for_device(&c, 91, "Test GPU", spec, sizeof spec) == FLASHGEN_ERROR_UNSUPPORTED);
  CHECK(std::all_of(std::begin(spec), std::end(spec), [](char ch) { return ch == '#'; }));
  rt::tune_reset_for_tests();
}

TEST_CASE("warmup: compiles a list on a thread pool, reports progress, and isolates failures") {
  ScopedCache cache;
  std::vector<KernelSpec> specs = {test::simple_spec(80, 16), test::simple_spec(90, 16),
                                   test::simple_spec(80, 16, MaskKind::causal_top_left)};
  KernelSpec bad = test::simple_spec(90, 16);
  bad.tile.block_m = 96;  // not a multiple of 16 * warps
  specs.insert(specs.begin() + 1, bad);
  specs.push_back(specs[0]);  // a duplicate compiles once

  std::atomic<int> inside{0};
  std::vector<size_t> done;
  const uint64_t before = rt::nvrtc_compile_count();
  const auto results = warmup(specs, 2, [&](const WarmupProgress& p) {
    CHECK(inside.fetch_add(1) == 0);  // never concurrently
    done.push_back(p.done);
    CHECK(p.total == specs.size());
    CHECK(p.compiled + p.cached + p.failed == p.done);
    REQUIRE(p.last != nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    inside.fetch_sub(1);
  });
  CHECK(rt::nvrtc_compile_count() == before + 3);
  REQUIRE(results.size() == specs.size());
  CHECK(done == std::vector<size_t>{1, 2, 3, 4, 5});
  for (size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].spec == specs[i]);
  }
  CHECK_FALSE(results[1].ok);
  CHECK(results[1].error_code == ErrorCode::unsupported);
  CHECK(contains(results[1].error, "block_m (96)"));
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}, size_t{4}}) {
    CAPTURE(i);
    CHECK(results[i].ok);
    CHECK(results[i].cache_path.rfind(cache.path() + "/", 0) == 0);
    CHECK(contains(results[i].compile_log, "registers"));
  }
  CHECK(results[0].from_cache != results[4].from_cache);  // one of the duplicates compiled
  // Warm: the engine's load_kernel / compile now find every kernel without NVRTC.
  const uint64_t warm = rt::nvrtc_compile_count();
  const auto again = warmup(specs);
  CHECK(rt::nvrtc_compile_count() == warm);
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) CHECK(again[i].from_cache);
  CHECK(compile(specs[2]).from_cache);
  CHECK(warmup({}).empty());
  CHECK_THROWS_AS(warmup(specs, -1), InvalidArgument);
}

TEST_CASE("model: tiles that fit, ranked; the profile default among them; FLOPs and bytes") {
  const cli::ProblemDesc p = llama();
  const Profile& prof = hopper();
  const cli::DeviceShape dev{132, 1.98};
  const auto ranked = cli::rank_tiles(p, 90, prof, dev);
  REQUIRE(ranked.size() > 10);
  for (size_t i = 0; i < ranked.size(); ++i) {
    CAPTURE(ranked[i].spec.canonical());
    CHECK(ranked[i].fits);
    CHECK(validate(ranked[i].spec, prof).empty());
    CHECK(ranked[i].spec.smem_bytes() <= prof.smem_per_block);
    CHECK(ranked[i].registers <= 255);
    CHECK(ranked[i].blocks_per_sm >= 1);
    CHECK(ranked[i].score > 0);
    CHECK(ranked[i].score <= 1.0);
    if (i > 0) CHECK(ranked[i - 1].score >= ranked[i].score);
  }
  const KernelSpec def = rt::plan_default(cli::to_problem(p), 90);
  CHECK(std::any_of(ranked.begin(), ranked.end(), [&](const cli::TileModel& m) { return m.spec == def; }));

  // Exact causal FLOPs: 2 * B * Hq * (visible pairs) * (D + Dv).
  const double pairs = 4096.0 * 4097.0 / 2.0;
  CHECK(cli::problem_flops(p) == doctest::Approx(2.0 * 32 * pairs * 256));
  // The model's arithmetic on a one-warpgroup tile (64 rows, 4 warps).
  KernelSpec m64 = def;
  m64.tile.block_m = 64;
  m64.tile.block_n = 96;
  m64.tile.warps = 4;
  REQUIRE(validate(m64, prof).empty());
  const cli::TileModel m = cli::model_tile(m64, p, prof, dev);
  CHECK(m.unique_bytes == doctest::Approx(2.0 * (4096.0 * 32 * 128 * 2 + 4096.0 * 8 * 256)));
  CHECK(m.ai_dram > m.ridge_dram);  // long-sequence attention is compute-bound
  CHECK(m.ridge_dram == doctest::Approx(2728.0 / 18.4));
  CHECK(m.ridge_smem == doctest::Approx(2728.0 / 128.0));
  // wgmma: the copy writes the K/V tile once and the consumer warpgroup reads
  // it once: on-chip intensity ~ block_m / (warps / 4 + 1).
  REQUIRE(m64.unit == MatrixUnit::wgmma);
  CHECK(m.ai_smem == doctest::Approx(64.0 / 2.0).epsilon(0.05));
  // mma.sync: every warp reads the whole K/V tile with ldmatrix: ~ block_m / (warps + 1).
  KernelSpec sync_unit = m64;
  sync_unit.unit = MatrixUnit::m16n8k16;
  CHECK(cli::model_tile(sync_unit, p, prof, dev).ai_smem == doctest::Approx(64.0 / 5.0).epsilon(0.05));
  CHECK(m.blocks == 64 * 32);
  // More rows per warp raise the shared-memory intensity.
  KernelSpec wide = m64;
  wide.tile.block_m = 128;
  CHECK(cli::model_tile(wide, p, prof, dev).ai_smem > m.ai_smem);
  // Measured registers change the occupancy; spills cost.
  const cli::TileModel measured = cli::model_tile(m64, p, prof, dev, 255, 0);
  CHECK(measured.registers_measured);
  CHECK(measured.blocks_per_sm == 2);
  CHECK(cli::model_tile(m64, p, prof, dev, 255, 512).score < measured.score);
  // Spills cost once per block or work item, 1 / (1 + bytes / 64 / key tiles): they sit
  // before the key loop and in the epilogue (wgmma and mma.sync alike).
  const double clean = cli::model_tile(m64, p, prof, dev, 128, 0).flop_per_clock_per_sm;
  const double spilled = cli::model_tile(m64, p, prof, dev, 128, 64).flop_per_clock_per_sm;
  CHECK(spilled < clean);
  CHECK(spilled > 0.95 * clean);
  const cli::TileModel sync_clean = cli::model_tile(sync_unit, p, prof, dev, 128, 0);
  const cli::TileModel sync_spilled = cli::model_tile(sync_unit, p, prof, dev, 128, 64);
  // (64 bytes over the block's 16-64 key tiles of 64: 0.94-0.98; once per key tile it was 0.5)
  CHECK(sync_clean.spill_efficiency == 1.0);
  CHECK(sync_spilled.spill_efficiency < 0.99);
  CHECK(sync_spilled.spill_efficiency > 0.9);
  CHECK(sync_spilled.flop_per_clock_per_sm == doctest::Approx(sync_spilled.spill_efficiency * sync_clean.flop_per_clock_per_sm));
  // Without a compile, a wgmma tile's registers are what its launch bounds allot
  // (templates/fwd_wgmma.cu): 65536 / (threads x blocks per SM).
  KernelSpec w = m64;
  CHECK(cli::estimate_registers(w) == 128);  // 256 threads, two blocks
  w.tile = Tile{128, 128, 8, 2};
  CHECK(cli::estimate_registers(w) == 168);  // 384 threads, one block
  w.tile = Tile{192, 96, 12, 2};
  CHECK(cli::estimate_registers(w) == 128);  // 512 threads, one block
  // A tile over the budget does not fit.
  KernelSpec huge = def;
  huge.tile.block_m = 256;
  huge.tile.block_n = 128;
  huge.tile.stages = 4;
  CHECK_FALSE(cli::model_tile(huge, p, prof, dev).fits);
}

TEST_CASE("model: a packed batch is modelled per sequence") {
  const Profile& prof = hopper();
  const cli::DeviceShape dev{132, 1.98};
  // Three causal sequences of 4096, 1000 and 17 rows (keys as many) against the
  // dense batch of three 4096-row sequences the grid is sized for.
  const cli::ProblemDesc packed = cli::parse_problem_text(
      "dtype=f16,seqlens_q=4096:1000:17,seqlens_k=4096:1000:17,heads_q=32,heads_kv=8,head_dim=128,mask=causaltl");
  CHECK(packed.batch == 3);
  CHECK(packed.seqlen_q == 4096);
  CHECK(packed.seqlen_k == 4096);
  const cli::ProblemDesc dense =
      cli::parse_problem_text("dtype=f16,batch=3,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causaltl");
  // FLOPs: each sequence's own visible pairs, summed.
  const double pairs = 4096.0 * 4097 / 2 + 1000.0 * 1001 / 2 + 17.0 * 18 / 2;
  CHECK(cli::problem_flops(packed) == doctest::Approx(2.0 * 32 * pairs * 256).epsilon(1e-12));
  CHECK(cli::problem_flops(packed) < cli::problem_flops(dense) / 2);
  // Equal lengths model exactly as the dense batch.
  const cli::ProblemDesc equal = cli::parse_problem_text(
      "dtype=f16,seqlens_q=4096:4096:4096,seqlens_k=4096:4096:4096,heads_q=32,heads_kv=8,head_dim=128,mask=causaltl");
  CHECK(cli::problem_flops(equal) == doctest::Approx(cli::problem_flops(dense)).epsilon(1e-12));
  const KernelSpec spec = rt::plan_default(cli::to_problem(packed), 90);
  REQUIRE(spec.varlen);
  KernelSpec dense_spec = spec;
  dense_spec.varlen = false;
  const cli::TileModel mp = cli::model_tile(spec, packed, prof, dev);
  const cli::TileModel md = cli::model_tile(dense_spec, dense, prof, dev);
  const cli::TileModel me = cli::model_tile(spec, equal, prof, dev);
  // The grid is sized by max_seqlen_q either way.
  CHECK(mp.blocks == md.blocks);
  // Unique bytes: Q, O over the packed rows, K and V over the packed keys.
  const double rows = 4096.0 + 1000 + 17;
  CHECK(mp.unique_bytes == doctest::Approx(2.0 * (rows * 32 * 128 * 2 + rows * 8 * 256)));
  CHECK(me.unique_bytes == doctest::Approx(md.unique_bytes));
  CHECK(me.tile_flops == doctest::Approx(md.tile_flops));
  CHECK(me.padding_efficiency == doctest::Approx(md.padding_efficiency));
  CHECK(me.score == doctest::Approx(md.score));
  // Per block: an average over the blocks with rows (fewer keys per block than the dense batch's).
  CHECK(mp.tile_flops < md.tile_flops);
  CHECK(mp.padding_efficiency > 0.5);
  CHECK(mp.padding_efficiency <= 1.0);
  CHECK(mp.score > 0);
}

TEST_CASE("model: ptxas reports parse") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
      "ptxas info    : Function properties for k\n"
      "    16 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 8 bytes smem, 912 bytes cmem[0]\n";
  const cli::PtxasReport r = cli::parse_ptxas(log);
  CHECK(r.found);
  CHECK(r.registers == 168);
  CHECK(r.spill_stores == 24);
  CHECK(r.spill_loads == 32);
  CHECK(r.stack_frame == 16);
  CHECK(r.smem_static == 8);
  CHECK_FALSE(cli::parse_ptxas("nothing here").found);
}

TEST_CASE("cli: problem text and problem-set files") {
  const cli::ProblemDesc d = llama();
  CHECK(d.dtype == DType::f16);
  CHECK(d.seqlen_q == 4096);
  CHECK(d.seqlen_k == 4096);
  CHECK(d.heads_q == 32);
  CHECK(d.heads_kv == 8);
  CHECK(d.head_dim_v == 128);
  CHECK(d.mask == MaskKind::causal_bottom_right);
  CHECK_NOTHROW(check_problem(cli::to_problem(d)));
  cli::ProblemDesc full =
      cli::parse_problem_text("dtype=bf16,seqlen_q=10,seqlen_k=20,heads=4,head_dim=96,head_dim_v=64,bias=f32,lse=true");
  CHECK(full.seqlen_k == 20);
  CHECK(full.heads_kv == 4);
  CHECK(full.bias == BiasKind::f32);
  CHECK(full.lse);
  CHECK_NOTHROW(check_problem(cli::to_problem(full)));
  CHECK(problem_class(cli::to_problem(full)).has_lse);
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("dtype=f16,seqlen=1,heads=1"), doctest::Contains("'head_dim' is missing"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("head_dim=64,seqlen=1,heads=1,color=red"),
                       doctest::Contains("'color' is unknown"), InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("head_dim=x,seqlen=1,heads=1"), doctest::Contains("'head_dim'"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_text("head_dim=64,seqlen=1,heads=1,head_dim=32"),
                       doctest::Contains("more than once"), InvalidArgument);

  const auto set = cli::parse_problem_set(
      "problems:\n"
      "  - {name: llama3-8b-prefill, dtype: f16, batch: 1, seqlen_q: 4096, heads_q: 32, heads_kv: 8, head_dim: 128, "
      "mask: causalbr}\n"
      "  - {name: allegro, dtype: f16, seqlen: 79200, heads: 24, head_dim: 96}\n",
      "p.yml");
  REQUIRE(set.size() == 2);
  CHECK(set[0].name == "llama3-8b-prefill");
  CHECK(set[0].heads_kv == 8);
  CHECK(set[1].seqlen_k == 79200);
  CHECK(set[1].head_dim_v == 96);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("problems:\n  - {dtype: f16, head_dim: 64, seqlen: 1, heads: 1, x: 2}\n",
                                              "p.yml"),
                       doctest::Contains("p.yml: key 'problems[0].x' is unknown"), InvalidArgument);
  CHECK_THROWS_WITH_AS(cli::parse_problem_set("items: []\n", "p.yml"), doctest::Contains("p.yml"), InvalidArgument);
}

namespace {

// Plans llama() on sm_90 for "Test GPU" with FLASHGEN_TUNE_FILE=`path`, a file plan() cannot
// use: checks that the default tile comes back and returns what plan() wrote to stderr.
std::string plan_with_unusable_tune_file(const std::string& path) {
  ScopedCache cache;
  EnvGuard env("FLASHGEN_TUNE_FILE", path);
  rt::tune_reset_for_tests();
  const AttentionProblem p = cli::to_problem(llama());
  StderrCapture err;
  const KernelSpec s = rt::plan_for_device(p, 90, "Test GPU");
  const std::string warned = err.stop();
  CHECK(s.tile == rt::plan_default(p, 90).tile);
  rt::tune_reset_for_tests();
  return warned;
}

}  // namespace

TEST_CASE("YAML files that are not regular files (a device, a FIFO, a directory) are refused at once") {
  // Before: /dev/zero or a FIFO as FLASHGEN_TUNE_FILE or --problems read forever, growing.
  TempDir dir("flashgen-not-regular");
  const std::string fifo = dir.path() + "/fifo.yml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo, dir.path()}) {
    CAPTURE(path);
    const char* why = path == dir.path() ? "it is a directory, not a YAML file" : "it is not a regular file";
    CHECK_THROWS_WITH_AS(load_tune_file(path), ("cannot read tune file '" + path + "': " + why).c_str(), IoError);
    CHECK_THROWS_WITH_AS(load_profile_file(path), ("cannot read profile file '" + path + "': " + why).c_str(),
                         IoError);
    CHECK_THROWS_WITH_AS(cli::load_problem_set(path), ("cannot read problem file '" + path + "': " + why).c_str(),
                         IoError);
  }
  // plan() reads FLASHGEN_TUNE_FILE: a device there costs one warning and the default tile.
  const std::string warned = plan_with_unusable_tune_file("/dev/zero");
  CHECK(warned.find("tune file /dev/zero is not used") != std::string::npos);
  CHECK(warned.find("it is not a regular file") != std::string::npos);
}

TEST_CASE("tune: a relative FLASHGEN_TUNE_FILE is taken from the working directory once") {
  TempDir dir("flashgen-tune-relative");
  const test::ScopedCwd cwd(dir.path() + "/work");
  const std::string work = cwd.current();
  {
    std::ofstream out("t.yml");
    out << "version: 1\nentries: []\n";
  }
  EnvGuard env("FLASHGEN_TUNE_FILE", "./t.yml");
  rt::tune_reset_for_tests();
  REQUIRE_FALSE(tune_file_paths().empty());
  CHECK(tune_file_paths().front() == work + "/t.yml");
  cwd.move(dir.path() + "/elsewhere");
  CHECK(tune_file_paths().front() == work + "/t.yml");  // (a later chdir keeps the file)
  StderrCapture err;
  (void)rt::plan_for_device(cli::to_problem(llama()), 90, "Test GPU");
  const std::string log = err.stop();
  CHECK_MESSAGE(log.find("is not used") == std::string::npos, log);
}

TEST_CASE("tune: a FLASHGEN_TUNE_FILE that does not exist costs one warning; a missing tune.yml none") {
  // Before: a typo in FLASHGEN_TUNE_FILE left the default tiles without a word.
  TempDir dir("flashgen-tune-missing");
  const std::string missing = dir.path() + "/no-such-tune.yml";
  const std::string warned = plan_with_unusable_tune_file(missing);
  CHECK(contains(warned, "flashgen: warning: tune file " + missing + " (FLASHGEN_TUNE_FILE) is not used: No such file"));
  // The user cache's tune.yml is optional: its absence says nothing (ScopedCache: an empty cache).
  {
    ScopedCache cache;
    EnvGuard env("FLASHGEN_TUNE_FILE", std::nullopt);
    rt::tune_reset_for_tests();
    StderrCapture err;
    (void)rt::plan_for_device(cli::to_problem(llama()), 90, "Test GPU");
    CHECK(err.stop().find("tune file") == std::string::npos);
    rt::tune_reset_for_tests();
  }
}

TEST_CASE("YAML files of more than one document are refused, naming the file: profiles and tune files as problem files") {
  // Before: a profile or tune file gave its first document and dropped the others unread.
  TempDir dir("flashgen-yaml-documents");
  const std::vector<char> hopper_yml = test::read_bytes(std::string(FLASHGEN_SOURCE_DIR) + "/profiles/hopper.yml");
  struct Kind {
    std::string what;  // as the messages name it
    std::string document;
    std::function<void(const std::string&)> load;
  };
  const Kind profile{"profile file", std::string(hopper_yml.begin(), hopper_yml.end()),
                     [](const std::string& path) { (void)load_profile_file(path); }};
  const Kind tune{"tune file", valid_file(), [](const std::string& path) { (void)load_tune_file(path); }};
  const Kind problems{"problem file", "problems:\n  - {dtype: f16, seqlen: 128, heads: 1, head_dim: 64}\n",
                      [](const std::string& path) { (void)cli::load_problem_set(path); }};
  // The file `k.document` twice, separated by "---" (or once and an empty document after the "---").
  const auto write = [&](const Kind& k, bool twice) {
    const std::string name = k.what.substr(0, k.what.find(' '));  // profile, tune, problem
    const std::string path = dir.path() + (twice ? "/two-" : "/trailing-") + name + ".yml";
    std::ofstream(path) << k.document << "---\n" << (twice ? k.document : "");
    return path;
  };
  for (const Kind& k : {profile, tune, problems}) {
    CAPTURE(k.what);
    const std::string two = write(k, true);
    CHECK_THROWS_WITH_AS(k.load(two),
                         doctest::Contains((two + ": has 2 YAML documents (separated by '---'); a " + k.what +
                                            " is one document")
                                               .c_str()),
                         InvalidArgument);
    CHECK_NOTHROW(k.load(write(k, false)));  // an empty document holds nothing to drop
    // An empty document before the one document: refused (yaml-cpp's Load reads only the first).
    const std::string name = k.what.substr(0, k.what.find(' '));
    const std::string late = dir.path() + "/late-" + name + ".yml";
    std::ofstream(late) << "---\n---\n" << k.document;
    CHECK_THROWS_WITH_AS(k.load(late),
                         doctest::Contains((late + ": an empty YAML document ('---') comes before its document; a " +
                                            k.what + " is one document")
                                               .c_str()),
                         InvalidArgument);
    // Text on which yaml-cpp 0.7's LoadAll never returns (fuzz_profile found it): an error, at once.
    const std::string endless = dir.path() + "/endless-" + name + ".yml";
    std::ofstream(endless) << ",[1!!int ";
    CHECK_THROWS_AS(k.load(endless), InvalidArgument);
  }
  // Through FLASHGEN_PROFILE and FLASHGEN_TUNE_FILE: refused as any invalid file is there.
  {
    const std::string two = write(profile, true);
    EnvGuard env("FLASHGEN_PROFILE", two);
    CHECK_THROWS_WITH_AS(
        profile_for_arch(90),
        doctest::Contains(("FLASHGEN_PROFILE=" + two + " cannot be used: " + two + ": has 2 YAML documents").c_str()),
        InvalidArgument);
  }
  const std::string two = write(tune, true);
  const std::string warned = plan_with_unusable_tune_file(two);
  CHECK(contains(warned, "tune file " + two + " is not used"));
  CHECK(contains(warned, two + ": has 2 YAML documents"));
}

TEST_CASE("YAML files larger than 16 MiB are refused before they are read; real profiles and tune files are far below") {
  // Before: a 4 GiB sparse problem file took 42 s and 8 GB of memory. A sparse file costs no disk here.
  TempDir dir("flashgen-yaml-size");
  const int64_t limit = int64_t{16} << 20;
  const std::string big = dir.path() + "/big.yml", at_limit = dir.path() + "/at-limit.yml";
  for (const auto& [path, size] : {std::pair{big, limit + 1}, std::pair{at_limit, limit}}) {
    std::ofstream(path).close();
    REQUIRE(::truncate(path.c_str(), size) == 0);
  }
  const std::string why = "it is 16777217 bytes, more than the 16777216 bytes (16 MiB) a YAML file may have";
  CHECK_THROWS_WITH_AS(load_tune_file(big), ("cannot read tune file '" + big + "': " + why).c_str(), IoError);
  CHECK_THROWS_WITH_AS(load_profile_file(big), ("cannot read profile file '" + big + "': " + why).c_str(), IoError);
  CHECK_THROWS_WITH_AS(cli::load_problem_set(big), ("cannot read problem file '" + big + "': " + why).c_str(), IoError);
  // At the limit a file is read (and these zeros are then not YAML the readers take).
  for (const auto& load : std::vector<std::function<void()>>{[&] { (void)load_tune_file(at_limit); },
                                                              [&] { (void)load_profile_file(at_limit); },
                                                              [&] { (void)cli::load_problem_set(at_limit); }}) {
    std::string msg;
    try {
      load();
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK_FALSE(msg.empty());
    CHECK_FALSE(contains(msg, "a YAML file may have"));
  }
  // The built-in profiles as files load, and a tune file of 2000 entries (far more than one machine makes) too.
  for (const std::string name : {"volta", "turing", "ampere", "ada", "hopper", "blackwell", "blackwell_consumer"}) {
    CAPTURE(name);
    CHECK(load_profile_file(std::string(FLASHGEN_SOURCE_DIR) + "/profiles/" + name + ".yml").name == name);
  }
  TuneFile many;
  for (int i = 0; i < 2000; ++i) {
    TuneEntry e;
    e.device = fmt::format("GPU {}", i);
    e.arch = 90;
    e.profile = "hopper";
    e.profile_hash = profile_hash(profile_for_arch(90));
    e.generator = kGeneratorVersion;
    e.problem = problem_class(cli::to_problem(llama()));
    e.tile = Tile{128, 64, 8, 2};
    e.tflops = 100;
    many.entries.push_back(e);
  }
  const std::string tune = dir.path() + "/tune.yml";
  save_tune_file(tune, many);
  CHECK(load_tune_file(tune).entries.size() == 2000);
  // plan() reads FLASHGEN_TUNE_FILE: one that is too large costs one warning and the default tile.
  const std::string warned = plan_with_unusable_tune_file(big);
  CHECK(contains(warned, "tune file " + big + " is not used"));
  CHECK(contains(warned, "a YAML file may have"));
}
