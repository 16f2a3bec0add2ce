// GPU tier: the tiles flashgen tune may choose, through the path the library
// really takes: a tune file with one entry for this device, arch, profile and
// problem class; plan() must pick the entry's tile and forward() must then
// match the float64 reference (gpu_util.hpp's run_case: poisoned outputs,
// every element checked). Per class, the model's best tiles (one per block
// shape first, as tune takes them) plus single- and three-stage variants.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/tune_internal.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "test/gpu/gpu_util.hpp"
#include "tools/flashgen_cli.hpp"

namespace {

using namespace fgtest;

constexpr size_t kTilesPerClass = 8;

Case tile_case(DType dt, int64_t d, MaskKind mask, BiasKind bias, bool lse) {
  Case c;
  c.group = "tuned tile";
  c.dtype = dt;
  c.head_dim = c.head_dim_v = d;
  c.mask = mask;
  c.bias = bias;
  c.lse = lse;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 150;
  c.seqlen_k = 333;
  return c;
}

flashgen::cli::ProblemDesc desc_of(const Case& c) {
  flashgen::cli::ProblemDesc d;
  d.dtype = c.dtype;
  d.batch = c.batch;
  d.seqlen_q = c.seqlen_q;
  d.seqlen_k = c.seqlen_k;
  d.heads_q = c.heads_q;
  d.heads_kv = c.heads_kv;
  d.head_dim = c.head_dim;
  d.head_dim_v = c.head_dim_v;
  d.mask = c.mask;
  d.bias = c.bias;
  d.lse = c.lse;
  return d;
}

}  // namespace

TEST_CASE("tune: tiles from a tune file are planned for this device and match the reference" *
          doctest::skip(!gpu_present())) {
  const flashgen::DeviceInfo dev = flashgen::current_device();
  const flashgen::Profile& profile = flashgen::profile_for_arch(dev.arch);
  flashgen::test::TempDir dir("flashgen-tune-gpu");
  const std::string tune_path = dir.path() + "/tune.yml";
  flashgen::test::EnvGuard env("FLASHGEN_TUNE_FILE", tune_path);

  std::vector<Case> classes = {tile_case(DType::f16, 64, MaskKind::none, BiasKind::none, false),
                               tile_case(DType::bf16, 96, MaskKind::causal_bottom_right, BiasKind::none, true),
                               tile_case(DType::f16, 128, MaskKind::causal_top_left, BiasKind::input, true)};
  struct Item {
    Case c;
    flashgen::TuneEntry entry;
  };
  std::vector<Item> items;
  std::vector<flashgen::KernelSpec> specs;
  for (const Case& c : classes) {
    if (!profile.supports_dtype(c.dtype)) continue;
    const flashgen::cli::ProblemDesc d = desc_of(c);
    const auto ranked = flashgen::cli::rank_tiles(d, dev.arch, profile, flashgen::cli::DeviceShape{dev.sm_count, 0});
    std::set<std::string> shapes;
    std::vector<flashgen::Tile> tiles;
    for (const auto& m : ranked) {  // one per block shape first
      const std::string key = fmt::format("{}x{}x{}", m.spec.tile.block_m, m.spec.tile.block_n, m.spec.tile.warps);
      if (tiles.size() < kTilesPerClass - 2 && shapes.insert(key).second)
        tiles.push_back(m.spec.tile);
    }
    for (int stages : {1, 3}) {  // the pipeline depths around the usual 2
      for (const auto& m : ranked) {
        if (m.spec.tile.stages != stages) continue;
        tiles.push_back(m.spec.tile);
        break;
      }
    }
    for (const flashgen::Tile& t : tiles) {
      Item it{c, {}};
      it.entry.device = dev.name;
      it.entry.arch = dev.arch;
      it.entry.profile = profile.name;
      it.entry.profile_hash = flashgen::profile_hash(profile);
      it.entry.generator = flashgen::kGeneratorVersion;
      it.entry.problem = flashgen::problem_class(flashgen::cli::to_problem(d));
      it.entry.tile = t;
      it.entry.tflops = 1;
      items.push_back(it);
      specs.push_back(flashgen::cli::spec_with_tile(d, dev.arch, profile, t));
    }
  }
  REQUIRE_FALSE(items.empty());
  std::printf("== tuned tiles on %s (sm_%d): %zu (class, tile) pairs\n", dev.name.c_str(), dev.arch, items.size());
  const auto compiled = flashgen::warmup(specs);  // all cores
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    CAPTURE(it.entry.tile.str());
    CAPTURE(it.entry.problem.str());
    INFO("compile: ", compiled[i].error);
    REQUIRE(compiled[i].ok);
    flashgen::save_tune_file(tune_path, flashgen::TuneFile{{it.entry}});
    flashgen::rt::tune_reset_for_tests();
    // plan() (the one forward() uses) picks the entry's tile ...
    const Geometry g = geometry(it.c);
    const uintptr_t fake = 0x10000000u;
    const AttentionProblem p = make_problem(it.c, g, fake, fake, fake, fake, it.c.bias != BiasKind::none ? fake : 0,
                                            it.c.lse ? fgtest::kFakeLse : 0);
    const flashgen::KernelSpec planned = flashgen::plan(p);
    CHECK(planned == specs[i]);
    // ... and its kernel is right.
    const CaseResult r = run_case(it.c);
    std::printf("  %-20s %s\n", it.entry.tile.str().c_str(), r.line.c_str());
    for (const std::string& e : r.errors) std::printf("      %s\n", e.c_str());
    CHECK(r.ok);
  }
  flashgen::rt::tune_reset_for_tests();
}
