// libFuzzer target: the hardware-profile loader, flashgen::parse_profile.
//
// Any input must either parse or throw flashgen::InvalidArgument whose message
// starts with the origin; anything else (another exception type, a crash, a
// sanitizer report, a hang) is a finding. A profile that parses must keep the
// promises profile.hpp makes, and every one of its flash rows must give a spec
// that validate() accepts for it (plan() would otherwise refuse a problem the
// profile claims to serve).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "flashgen/profile.hpp"
#include "flashgen/spec.hpp"
#include "test/fuzz/fuzz_common.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) { flashgen::fuzz::finding("fuzz_profile", what); }

void check_profile(const flashgen::Profile& p) {
  if (p.name.empty()) finding("a parsed profile has an empty name");
  if (p.archs.empty()) finding("a parsed profile lists no arch");
  if (p.flash.empty()) finding("a parsed profile has no flash row");
  if (p.matrix_unit.operand_dtypes.empty()) finding("a parsed profile has no operand dtype");
  if (p.smem_per_block <= 0 || p.smem_per_block > p.smem_per_sm) finding("smem_per_block out of range");
  for (size_t i = 0; i < p.flash.size(); ++i) {
    const flashgen::FlashTile& t = p.flash[i];
    if (i > 0 && t.head_dim_le <= p.flash[i - 1].head_dim_le) finding("flash rows not strictly ascending");
    if (&p.tile_for(t.head_dim_le) != &t) finding("tile_for(head_dim_le) is not its own row");
    // The row's spec at the head dim it serves up to (a multiple of 8, >= 16).
    flashgen::KernelSpec s;
    s.arch = p.archs.front();
    s.unit = p.matrix_unit.shape;
    s.dtype = p.matrix_unit.operand_dtypes.front();
    s.head_dim = s.head_dim_v = std::max(16, t.head_dim_le / 8 * 8);
    s.tile = t.tile;
    const auto errors = flashgen::validate(s, p);
    if (!errors.empty()) finding("flash row " + std::to_string(i) + " gives an invalid spec: " + errors.front());
  }
  try {
    (void)p.tile_for(p.flash.back().head_dim_le + 1);
    finding("tile_for above the last row did not throw");
  } catch (const flashgen::Unsupported&) {
  }
}

}  // namespace

FLASHGEN_FUZZ_ENTRY(profile) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string origin = "fuzz.yml";
  flashgen::fuzz::run_input("fuzz_profile", origin + ":", "an InvalidArgument that does not start with the origin: ", [&] {
    const flashgen::Profile p = flashgen::parse_profile(text, origin);
    if (p.source != origin) finding("the parsed profile does not name its origin");
    check_profile(p);
  });
  return 0;
}
