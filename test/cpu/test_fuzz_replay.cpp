// The libFuzzer targets' checks (test/fuzz/fuzz_*.cpp, compiled into this
// binary with FLASHGEN_FUZZ_REPLAY) replayed over every seed of
// test/fuzz/corpus/<target>/, the builtin profiles, and every input a fuzzing
// run ever crashed on (test/fuzz/crashes/<target>/): a broken property is a
// failed check here, so CI needs no clang to keep the findings fixed. The
// findings themselves are also doctest cases with their input inline
// (test_fuzz_regressions.cpp).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "test/cpu/rt_test_util.hpp"
#include "test/fuzz/fuzz_common.hpp"

int flashgen_fuzz_profile(const uint8_t* data, size_t size);
int flashgen_fuzz_spec(const uint8_t* data, size_t size);
int flashgen_fuzz_tune(const uint8_t* data, size_t size);

namespace {

using Target = int (*)(const uint8_t*, size_t);

// Runs `target` on every file of each directory that exists; returns the count.
int replay(const char* name, Target target, const std::vector<std::string>& dirs) {
  int files = 0;
  for (const std::string& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      const std::vector<char> bytes = flashgen::test::read_bytes(entry.path().string());
      INFO(name, " on ", entry.path().string());
      try {
        target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      } catch (const flashgen::fuzz::FuzzFinding& f) {
        FAIL_CHECK(f.what);
      } catch (const std::exception& e) {
        FAIL_CHECK("escaped exception: " << e.what());
      }
      ++files;
    }
  }
  return files;
}

const std::string kFuzzDir = std::string(FLASHGEN_SOURCE_DIR) + "/test/fuzz";

}  // namespace

TEST_CASE("fuzz replay: profile loader over its seeds, the builtin profiles and saved crashes") {
  const int n = replay("fuzz_profile", flashgen_fuzz_profile,
                       {kFuzzDir + "/corpus/profile", std::string(FLASHGEN_SOURCE_DIR) + "/profiles",
                        kFuzzDir + "/crashes/profile"});
  CHECK(n >= 8);
}

TEST_CASE("fuzz replay: spec parser over its seeds and saved crashes") {
  const int n = replay("fuzz_spec", flashgen_fuzz_spec, {kFuzzDir + "/corpus/spec", kFuzzDir + "/crashes/spec"});
  CHECK(n >= 8);
}

TEST_CASE("fuzz replay: tune-file reader over its seeds and saved crashes") {
  const int n = replay("fuzz_tune", flashgen_fuzz_tune, {kFuzzDir + "/corpus/tune", kFuzzDir + "/crashes/tune"});
  CHECK(n >= 2);
}
