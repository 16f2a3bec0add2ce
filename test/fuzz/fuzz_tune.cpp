// libFuzzer target: the tune-file reader, flashgen::parse_tune_file.
//
// tune.hpp promises: any input parses or throws InvalidArgument starting with
// "<origin>:", and nothing else. A file that parses must survive the writer:
// parse_tune_file(format_tune_file(f)) gives f back (tflops to 0.1), and
// formatting that again gives the same text.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "flashgen/tune.hpp"
#include "test/fuzz/fuzz_common.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) { flashgen::fuzz::finding("fuzz_tune", what); }

bool same_entry(const flashgen::TuneEntry& a, const flashgen::TuneEntry& b) {
  return a.device == b.device && a.arch == b.arch && a.profile == b.profile && a.profile_hash == b.profile_hash &&
         a.generator == b.generator && a.problem == b.problem && a.tile == b.tile &&
         std::fabs(a.tflops - b.tflops) <= 0.05 + 1e-9 * std::fabs(a.tflops);
}

void check_round_trip(const flashgen::TuneFile& f) {
  for (const flashgen::TuneEntry& e : f.entries) {
    (void)e.problem.str();
    (void)e.tile.str();
    if (e.device.empty()) finding("a parsed entry has an empty device name");
    if (!(e.tflops >= 0.0)) finding("a parsed entry has tflops < 0 or NaN");
  }
  const std::string text = flashgen::format_tune_file(f);
  flashgen::TuneFile back;
  try {
    back = flashgen::parse_tune_file(text, "formatted.yml");
  } catch (const flashgen::InvalidArgument& e) {
    finding(std::string("format_tune_file wrote a file parse_tune_file refuses: ") + e.what() + "\n" + text);
  }
  if (back.entries.size() != f.entries.size()) finding("the round trip changed the number of entries");
  for (size_t i = 0; i < f.entries.size(); ++i)
    if (!same_entry(f.entries[i], back.entries[i]))
      finding("the round trip changed entry " + std::to_string(i) + ":\n" + text);
  if (flashgen::format_tune_file(back) != text) finding("formatting is not idempotent:\n" + text);
}

}  // namespace

FLASHGEN_FUZZ_ENTRY(tune) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string origin = "fuzz-tune.yml";
  flashgen::fuzz::run_input("fuzz_tune", origin + ":", "an InvalidArgument that does not start with the origin: ", [&] {
    const flashgen::TuneFile f = flashgen::parse_tune_file(text, origin);
    check_round_trip(f);
  });
  return 0;
}
