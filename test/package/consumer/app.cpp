// C++ consumer of an installed libflashgen (test/package/run.cmake).
//
// readme_includes.inc and readme_body.inc are the README's "Using the library"
// C++ block, as written; the README's CMake lines build this file. Run with no
// GPU (the script hides any with CUDA_VISIBLE_DEVICES=), it checks that:
//  - the README's forward() call, given fake device pointers, throws
//    flashgen::Unavailable (plan for the current device needs a GPU) and
//    launches nothing;
//  - plan(problem, arch) and generate(spec) work without a GPU, and the spec's
//    canonical string parses back to the same spec;
//  - every built-in profile (Profile::source "<builtin>/NAME.yml", the name
//    messages show) is installed as FLASHGEN_PROFILE_DIR/NAME.yml, and that
//    file loads to the same profile.
// Exit status 0 when every check passed, 1 otherwise.
#include "readme_includes.inc"

#include <cstdint>
#include <cstdio>
#include <string>

namespace {

// The README's C++ block, with its free names as parameters.
flashgen::ForwardInfo readme_forward(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                                     int64_t heads_kv, int64_t head_dim, const void* q, const void* k,
                                     const void* v, void* o, float* lse, CUstream stream) {
#include "readme_body.inc"
  return info;
}

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("  %s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

int main() {
  std::printf("flashgen consumer (C++), generator %s\n", flashgen::kGeneratorVersion);
  expect(!flashgen::gpu_available(), "no GPU visible (the test hides it)");

  // Aligned, never dereferenced: nothing may launch without a GPU.
  void* fake = reinterpret_cast<void*>(uintptr_t{0x10000000});
  float* fake_lse = reinterpret_cast<float*>(uintptr_t{0x20000000});
  bool unavailable = false;
  try {
    (void)readme_forward(2, 300, 300, 8, 2, 128, fake, fake, fake, fake, fake_lse, nullptr);
  } catch (const flashgen::Unavailable& e) {
    unavailable = std::string(e.what()).size() > 0;
    std::printf("  forward without a GPU: %s\n", e.what());
  } catch (const std::exception& e) {
    std::printf("  forward threw something else: %s\n", e.what());
  }
  expect(unavailable, "the README's forward() throws flashgen::Unavailable without a GPU");

  flashgen::AttentionProblem p = flashgen::make_bshd_problem(
      flashgen::DType::f16, 2, 300, 300, 8, 2, 128, 128, flashgen::MaskKind::causal_bottom_right, fake, fake,
      fake, fake);
  p.lse = {fake_lse, 8 * 300, 300};
  for (int arch : {80, 90}) {
    const flashgen::KernelSpec spec = flashgen::plan(p, arch);
    const std::string name = spec.kernel_name();
    std::printf("  sm_%d: %s\n", arch, spec.canonical().c_str());
    expect(contains(name, "flashgen_fwd_sm" + std::to_string(arch) + "_f16_d128v128_"),
           "plan(problem, " + std::to_string(arch) + ") -> " + name);
    expect(flashgen::KernelSpec::parse(spec.canonical()) == spec, "the canonical string parses back to the spec");
    const std::string source = flashgen::generate(spec);
    expect(contains(source, "extern \"C\"") && contains(source, name),
           "generate(spec): " + std::to_string(source.size()) + " bytes of CUDA defining " + name);
  }

  const std::string dir = FLASHGEN_PROFILE_DIR;
  const std::string prefix = "<builtin>/";
  expect(!flashgen::builtin_profiles().empty(), "the library has built-in profiles");
  for (const flashgen::Profile& builtin : flashgen::builtin_profiles()) {
    const bool named = builtin.source.rfind(prefix, 0) == 0;
    expect(named, "profile " + builtin.name + " is shown as " + builtin.source);
    if (!named) continue;
    const std::string path = dir + "/" + builtin.source.substr(prefix.size());
    try {
      const flashgen::Profile installed = flashgen::load_profile_file(path);
      expect(installed.name == builtin.name && installed.archs == builtin.archs &&
                 installed.matrix_unit.shape == builtin.matrix_unit.shape,
             builtin.source + " is installed as " + path);
    } catch (const flashgen::Error& e) {
      expect(false, builtin.source + " is installed as " + path + ": " + e.what());
    }
  }

  std::printf("%s\n", failures == 0 ? "all checks passed" : "some checks FAILED");
  return failures == 0 ? 0 : 1;
}
