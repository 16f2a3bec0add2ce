// SASS of the Volta (sm_70, m8n8k4) kernels: every kernel must reach the
// tensor cores (HMMA.884 instructions) and touch no local memory (no LDL/STL).
//
// The CUDA 13 disassemblers (PyPI nvidia-cuda-nvdisasm, nvidia-cuda-cuobjdump)
// refuse sm_70 cubins ("SM70 is deprecated"), and no CUDA 12 build of them is on
// PyPI. Volta's and Turing's SASS share one encoding, so when nvdisasm refuses
// the cubin it is disassembled again with the ELF header's arch field (e_flags,
// sm_70 in bits 0-7 and 16-23) rewritten to sm_75; the instructions then print
// as Volta wrote them (HMMA.884.F32.F32.STEPn ...). The test says which way it
// went. nvdisasm is looked up in $FLASHGEN_NVDISASM, $PATH, /usr/local/cuda/bin
// and the PyPI wheel (site-packages/nvidia/cu13/bin); without one, or without
// an NVRTC that targets sm_70, the test is skipped with a message.
#include <doctest/doctest.h>

#include <glob.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;

namespace {

std::string find_nvdisasm() {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("FLASHGEN_NVDISASM"); e != nullptr && *e != '\0') return e;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty()) candidates.push_back(dir + "/nvdisasm");
  }
  candidates.push_back("/usr/local/cuda/bin/nvdisasm");
  const char* home = std::getenv("HOME");
  for (const std::string& pat :
       {std::string("/usr/local/lib/python3*/site-packages/nvidia/cu1*/bin/nvdisasm"),
        std::string("/usr/lib/python3/dist-packages/nvidia/cu1*/bin/nvdisasm"),
        std::string(home ? home : "/root") + "/.local/lib/python3*/site-packages/nvidia/cu1*/bin/nvdisasm",
        std::string(home ? home : "/root") + "/.pyenv/versions/*/lib/python3*/site-packages/nvidia/cu1*/bin/nvdisasm",
        std::string("/root/.pyenv/versions/*/lib/python3*/site-packages/nvidia/cu1*/bin/nvdisasm")}) {
    glob_t g{};
    if (::glob(pat.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) candidates.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  for (const std::string& c : candidates)
    if (::access(c.c_str(), X_OK) == 0) return c;
  return "";
}

// Runs `cmd`, returns its output (stdout and stderr) and exit status.
std::pair<std::string, int> run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return {"popen failed", -1};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(f);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace

TEST_CASE("sass: the sm_70 (m8n8k4) kernels hold HMMA.884 and no local-memory instruction") {
  if (!rt::nvrtc_available_for(70)) {
    MESSAGE("SASS check skipped: no NVRTC on this machine targets sm_70 (pip install nvidia-cuda-nvrtc-cu12)");
    return;
  }
  const std::string nvdisasm = find_nvdisasm();
  if (nvdisasm.empty()) {
    MESSAGE("SASS check skipped: no nvdisasm found (pip install nvidia-cuda-nvdisasm, or set FLASHGEN_NVDISASM)");
    return;
  }
  test::ScopedCache cache;
  test::TempDir dir("flashgen-sass");
  const Profile& volta = profile_for_arch(70);
  const std::regex local_mem(R"(\b(LDL|STL)(\.[A-Z0-9_.]+)?\s)");
  int kernels = 0, patched = 0;
  for (int d : {64, 80, 96, 128, 256})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal_bottom_right})
      for (BiasKind bias : {BiasKind::none, BiasKind::f32}) {
        const KernelSpec spec = test::spec_for(volta, 70, DType::f16, d, d, mask, bias, true);
        CAPTURE(spec.kernel_name());
        const CompiledKernel k = compile(spec);
        const std::string path = dir.path() + "/" + spec.kernel_name() + ".cubin";
        test::write_bytes(path, k.cubin);
        auto [sass, rc] = run("'" + nvdisasm + "' '" + path + "'");
        if (rc != 0 || sass.find("HMMA") == std::string::npos) {
          // This nvdisasm does not know sm_70: decode as sm_75 (same encoding).
          std::vector<char> elf = k.cubin;
          REQUIRE(elf.size() > 0x34);
          uint32_t flags;
          std::memcpy(&flags, elf.data() + 0x30, 4);
          REQUIRE((flags & 0xffu) == 70u);
          REQUIRE(((flags >> 16) & 0xffu) == 70u);
          flags = (flags & ~0x00ff00ffu) | 75u | (75u << 16);
          std::memcpy(elf.data() + 0x30, &flags, 4);
          const std::string p75 = dir.path() + "/" + spec.kernel_name() + ".as75.cubin";
          test::write_bytes(p75, elf);
          std::tie(sass, rc) = run("'" + nvdisasm + "' '" + p75 + "'");
          ++patched;
        }
        INFO("nvdisasm output (head): ", sass.substr(0, 2000));
        REQUIRE(rc == 0);
        size_t hmma = 0;
        for (size_t at = sass.find("HMMA.884"); at != std::string::npos; at = sass.find("HMMA.884", at + 1)) ++hmma;
        CHECK(hmma > 0);
        std::smatch m;
        const bool has_local = std::regex_search(sass, m, local_mem);
        CHECK_MESSAGE(!has_local, "local-memory instruction: " << (has_local ? m.str() : ""));
        ++kernels;
      }
  MESSAGE("SASS of " << kernels << " sm_70 kernels checked with " << nvdisasm
                     << std::string(patched ? " (it refuses sm_70: decoded with the ELF arch set to sm_75, Volta's encoding)"
                                            : ""));
}
