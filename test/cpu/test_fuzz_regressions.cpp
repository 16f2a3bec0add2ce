// Every input a fuzzing run (test/fuzz/run.sh) crashed on, as a doctest case
// with the input inline and the behaviour the fix gives. The same inputs are
// also files in test/fuzz/crashes/<target>/, which test_fuzz_replay.cpp runs
// through the fuzz targets' own checks.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "flashgen/spec.hpp"

using namespace flashgen;

// fuzz_spec, crash-ebc481366bc0bde36c5e960c471ab8756914da07 (UBSan: signed
// integer overflow in KernelSpec::threads(), -2147483648 * 32). parse()
// accepts any int for w=; threads() now saturates instead of overflowing.
TEST_CASE("fuzz regression: threads() of a parsed spec with an extreme warp count is defined") {
  const std::string input =
      "flashgen.fwd.v1:sm=-1,unit=m16n8k16,dtype=f16,d=0,dv=-8,bm=0,bn=2147483647,w=-2147483648,s=99,"
      "mask=none,bias=none,lse=1";
  const KernelSpec s = KernelSpec::parse(input);
  CHECK(s.canonical() == input);
  CHECK(s.tile.warps == INT32_MIN);
  CHECK(s.threads() == INT32_MIN);
  KernelSpec big = s;
  big.tile.warps = INT32_MAX;
  CHECK(big.threads() == INT32_MAX);
  big.tile.warps = 4;
  CHECK(big.threads() == 128);
  // validate() refuses it, in sentences, without overflowing either.
  const auto errors = validate(s, builtin_profiles().front());
  CHECK_FALSE(errors.empty());
  bool names_warps = false;
  for (const auto& e : errors) names_warps = names_warps || e.find("warps (-2147483648)") != std::string::npos;
  CHECK(names_warps);
}
