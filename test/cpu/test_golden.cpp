// Golden generated sources: generate(spec) for a fixed set of specs (a
// combine kernel, and for the forward every matrix unit, head-dim splits with two to four chunks, both causal masks,
// both bias kinds, LSE, d != dv, bf16) must equal test/golden/<kernel>.cu byte
// for byte. A refactor of the generator or the templates proves itself by
// leaving them unchanged; a deliberate change of the generated code
// regenerates them with
//   FLASHGEN_UPDATE_GOLDEN=1 build/test/flashgen_tests_cpu -tc='golden*'
// and the diff of test/golden/ is reviewed with the change.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"

using namespace flashgen;

namespace {

const char* const kGoldenSpecs[] = {
    "flashgen.fwd.v1:sm=70,unit=m8n8k4,dtype=f16,d=96,dv=96,bm=64,bn=32,w=4,s=2,mask=causalbr,bias=none,lse=1",
    "flashgen.fwd.v1:sm=75,unit=m16n8k8,dtype=f16,d=128,dv=64,bm=128,bn=32,w=8,s=2,mask=none,bias=f32,lse=0",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=bf16,d=80,dv=80,bm=128,bn=32,w=8,s=2,mask=causaltl,bias=input,lse=1",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=f16,d=72,dv=72,bm=128,bn=32,w=8,s=2,mask=none,bias=none,lse=0",
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=f16,d=96,dv=96,bm=64,bn=128,w=4,s=2,mask=causalbr,bias=none,lse=1",
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=64,bm=128,bn=128,w=8,s=2,mask=none,bias=f32,lse=0",
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=f16,d=256,dv=256,bm=128,bn=64,w=8,s=2,mask=causaltl,bias=none,lse=0",
    "flashgen.fwd.v1:sm=90,unit=m16n8k16,dtype=f16,d=72,dv=72,bm=64,bn=64,w=4,s=2,mask=none,bias=none,lse=0",
    // softcapping (issue 13): the mma.sync and wgmma kernels and Volta's layout
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=128,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=1,softcap=1",
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,bm=128,bn=128,w=8,s=2,mask=none,bias=none,lse=0,softcap=1",
    "flashgen.fwd.v1:sm=70,unit=m8n8k4,dtype=f16,d=64,dv=64,bm=64,bn=32,w=4,s=2,mask=none,bias=input,lse=0,softcap=1",
    // sliding windows, sinks, ALiBi (issue 13): every unit and the split kernel
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,bm=128,bn=128,w=8,s=2,mask=windowbr,bias=none,lse=1,sinks=1,alibi=1",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=windowtl,bias=f32,lse=1,sinks=1",
    "flashgen.fwd.v1:sm=75,unit=m16n8k8,dtype=f16,d=64,dv=64,bm=128,bn=32,w=8,s=2,mask=none,bias=none,lse=0,alibi=1",
    "flashgen.fwd.v1:sm=70,unit=m8n8k4,dtype=f16,d=64,dv=64,bm=64,bn=32,w=4,s=2,mask=windowbr,bias=none,lse=1,sinks=1,alibi=1",
    "flashgen.fwd_split.v1:sm=90,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=16,bn=64,w=4,s=2,pack=4,mask=windowbr,bias=none,lse=1,sinks=1,alibi=1",
    // packed (variable-length) batches (issue 13): every unit and the split kernel
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,bm=128,bn=128,w=8,s=2,mask=causalbr,bias=none,lse=1,varlen=1",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=windowtl,bias=none,lse=1,varlen=1",
    "flashgen.fwd.v1:sm=75,unit=m16n8k8,dtype=f16,d=64,dv=64,bm=128,bn=32,w=8,s=2,mask=none,bias=none,lse=0,varlen=1",
    "flashgen.fwd.v1:sm=70,unit=m8n8k4,dtype=f16,d=64,dv=64,bm=64,bn=32,w=4,s=2,mask=causaltl,bias=none,lse=1,varlen=1",
    "flashgen.fwd_split.v1:sm=90,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=16,bn=64,w=4,s=2,pack=4,mask=none,bias=none,lse=1,varlen=1",
    // paged KV caches (issue 13): every unit, the split kernel, with a packed batch
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,bm=128,bn=128,w=8,s=2,mask=causalbr,bias=none,lse=1,paged=1",
    "flashgen.fwd.v1:sm=90,unit=wgmma,dtype=f16,d=96,dv=96,bm=128,bn=128,w=8,s=2,mask=none,bias=none,lse=0,varlen=1,paged=1",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=128,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=0,paged=1",
    "flashgen.fwd.v1:sm=75,unit=m16n8k8,dtype=f16,d=64,dv=64,bm=128,bn=32,w=8,s=2,mask=windowbr,bias=none,lse=1,paged=1",
    "flashgen.fwd.v1:sm=70,unit=m8n8k4,dtype=f16,d=64,dv=64,bm=64,bn=32,w=4,s=2,mask=causalbr,bias=none,lse=0,paged=1",
    "flashgen.fwd_split.v1:sm=90,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=16,bn=64,w=4,s=2,pack=4,mask=none,bias=none,lse=1,paged=1",
    "flashgen.fwd_split.v1:sm=70,unit=m8n8k4,dtype=f16,d=128,dv=128,bm=64,bn=32,w=4,s=2,pack=4,mask=causalbr,bias=none,lse=0,varlen=1,paged=1",
    // The split-KV forward (fwd_split): GQA packing and a causal mask; m16n8k8 without; m8n8k4.
    "flashgen.fwd_split.v1:sm=90,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=64,bn=64,w=4,s=2,pack=4,mask=causalbr,bias=none,lse=1",
    "flashgen.fwd_split.v1:sm=75,unit=m16n8k8,dtype=f16,d=96,dv=64,bm=64,bn=64,w=4,s=2,pack=1,mask=none,bias=f32,lse=0",
    "flashgen.fwd_split.v1:sm=70,unit=m8n8k4,dtype=f16,d=64,dv=64,bm=64,bn=32,w=4,s=2,pack=8,mask=causalbr,bias=none,lse=0",
    // Key-split warps (block_m < 16 * warps): four warps share 16 packed rows; two row groups of two.
    "flashgen.fwd_split.v1:sm=90,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=16,bn=64,w=4,s=2,pack=4,mask=none,bias=none,lse=0",
    "flashgen.fwd_split.v1:sm=80,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=32,bn=64,w=4,s=2,pack=4,mask=causalbr,bias=input,lse=1",
    // One K/V pipeline stage (K and V copied in turn), with and without Q.K^T one tile ahead.
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=f16,d=256,dv=256,bm=64,bn=64,w=4,s=1,mask=causalbr,bias=none,lse=1",
    "flashgen.fwd.v1:sm=80,unit=m16n8k16,dtype=bf16,d=128,dv=128,bm=128,bn=64,w=8,s=1,mask=none,bias=none,lse=0",
    // The merge of attention states (combine family).
    "flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1",
    // ... and the packed batch's, which writes only the rows of its sequences
    "flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1,varlen=1",
};

std::string golden_path(const KernelSpec& spec) {
  return std::string(FLASHGEN_SOURCE_DIR) + "/test/golden/" + spec.kernel_name() + ".cu";
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// "line N: golden '...' / generated '...'" for the first line that differs.
std::string first_difference(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb) return "the same lines, other line endings";
    if (!ha || !hb || la != lb) {
      return "line " + std::to_string(line) + ": golden '" + (ha ? la : "<end>") + "' / generated '" +
             (hb ? lb : "<end>") + "'";
    }
  }
}

}  // namespace

TEST_CASE("golden: generated sources equal test/golden/ byte for byte") {
  const char* update = std::getenv("FLASHGEN_UPDATE_GOLDEN");
  const bool rewrite = update != nullptr && std::string(update) == "1";
  for (const char* text : kGoldenSpecs) {
    CAPTURE(text);
    const KernelSpec spec = KernelSpec::parse(text);
    const std::string source = generate(spec);
    const std::string path = golden_path(spec);
    if (rewrite) {
      std::ofstream(path, std::ios::binary) << source;
      MESSAGE("rewrote " << path);
    }
    std::string want;
    REQUIRE_MESSAGE(read_file(path, &want), "missing " << path << " (FLASHGEN_UPDATE_GOLDEN=1 writes it)");
    CHECK_MESSAGE(want == source, path << ": " << first_difference(want, source)
                                       << " (a deliberate change: FLASHGEN_UPDATE_GOLDEN=1 regenerates)");
  }
}
