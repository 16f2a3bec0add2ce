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

// fuzz_spec, crash-57ffd2a3af14bb5d0ab84ded14dcabe93ac34af4 (CI, 2026-12-02):
// "accepted a non-canonical string". A flag written only when set (softcap,
// sinks, alibi, varlen, paged) was read from ',softcap=0' as well as from its
// absence, so two strings named one spec. '=0' is now refused.
TEST_CASE("fuzz regression: a flag written only when set is refused as '=0'") {
  const std::string canonical =
      "flashgen.fwd.v1:sm=75,unit=m16n8k8,dtype=f16,d=728,dv=128,bm=94,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=1";
  CHECK(KernelSpec::parse(canonical).canonical() == canonical);
  for (const char* flag : {"softcap", "sinks", "alibi", "varlen", "paged"}) {
    CAPTURE(flag);
    const std::string why = std::string("field '") + flag + "' has value '0'";
    CHECK_THROWS_WITH_AS(KernelSpec::parse(canonical + "," + flag + "=0"), doctest::Contains(why.c_str()),
                         InvalidArgument);
    const KernelSpec set = KernelSpec::parse(canonical + "," + flag + "=1");
    CHECK(set.canonical() == canonical + "," + flag + "=1");
  }
}
