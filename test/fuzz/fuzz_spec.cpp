// libFuzzer target: the kernel-spec parser, KernelSpec::parse (canonical string).
//
// Any input must either parse or throw flashgen::InvalidArgument. A string
// that parses must be canonical: canonical() gives it back byte for byte and
// parses to the same spec. Every accessor of a parsed spec must be defined
// behaviour whatever its numbers (kernel_name, smem_bytes, threads, the
// head-dim splits), and validate() against every builtin profile must not
// fail in any other way than returning sentences. A spec valid for a builtin
// profile must generate source that defines its kernel name.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "flashgen/profile.hpp"
#include "flashgen/spec.hpp"
#include "gen/emit.hpp"
#include "test/fuzz/fuzz_common.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) { flashgen::fuzz::finding("fuzz_spec", what); }

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

void check_spec(const std::string& text, const flashgen::KernelSpec& s) {
  const std::string canonical = s.canonical();
  if (canonical != text) finding("accepted a non-canonical string; canonical() is '" + canonical + "'");
  if (!(flashgen::KernelSpec::parse(canonical) == s)) finding("parse(canonical()) differs from the spec");
  if (!is_identifier(s.kernel_name())) finding("kernel_name() is not a C identifier: " + s.kernel_name());
  // Used, so the compiler cannot drop the calls (and any undefined behaviour in them).
  volatile int64_t sink = s.smem_bytes();
  sink = s.threads();
  const int64_t producer = s.unit == flashgen::MatrixUnit::wgmma ? 128 : 0;
  if (s.tile.warps >= 0 && s.tile.warps <= (1 << 20) && sink != int64_t{s.tile.warps} * 32 + producer)
    finding("threads() is not 32 * warps (+ 128 for wgmma) for warps = " + std::to_string(s.tile.warps));
  try {
    (void)s.qk_chunks();
    (void)s.v_chunks();
  } catch (const flashgen::InvalidArgument&) {
    // a head dim that is not a positive multiple of 8: documented refusal
  }
  for (const flashgen::Profile& p : flashgen::builtin_profiles()) {
    if (!flashgen::validate(s, p).empty()) continue;
    const std::string source = flashgen::gen::emit_forward(s);
    if (source.find(s.kernel_name()) == std::string::npos)
      finding("the source generated for a valid spec does not name its kernel");
  }
}

}  // namespace

FLASHGEN_FUZZ_ENTRY(spec) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  flashgen::fuzz::run_input("fuzz_spec", "kernel spec '", "an InvalidArgument that does not quote the spec: ", [&] {
    const flashgen::KernelSpec s = flashgen::KernelSpec::parse(text);
    check_spec(text, s);
  });
  return 0;
}
