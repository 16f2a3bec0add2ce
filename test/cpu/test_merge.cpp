// The merge of attention states on the CPU tier: the combine family's spec
// (canonical string, parse, kernel name, validation), check_merge_problem's
// refusals (every argument), plan(), the C ABI's mapping of them, the float64
// reference, and NVRTC compiles of the combine kernels for every arch of the
// builtin profiles (no spills, no stack; sm_70/72 bounded). The kernel's results are checked on
// the GPU tier (test/gpu/test_merge.cpp).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flashgen/flashgen.h"
#include "flashgen/flashgen.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"
#include "test/reference.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

// Fake, aligned device addresses (never dereferenced on the CPU tier).
const void* const kOp = reinterpret_cast<const void*>(uintptr_t{0x1000000});
const float* const kLp = reinterpret_cast<const float*>(uintptr_t{0x2000000});
void* const kO = reinterpret_cast<void*>(uintptr_t{0x3000000});
float* const kL = reinterpret_cast<float*>(uintptr_t{0x4000000});

MergeProblem good_merge() {
  return make_merge_problem(StateDType::f32, StateDType::f16, 4, 2, 33, 8, 128, kOp, kLp, kO, kL);
}

KernelSpec combine_spec(int arch, StateDType part, StateDType out, int dv, bool lse) {
  KernelSpec s;
  s.family = KernelFamily::combine;
  s.arch = arch;
  s.partial_dtype = part;
  s.out_dtype = out;
  s.head_dim_v = dv;
  s.has_lse = lse;
  return s;
}

void refuses(const MergeProblem& p, const std::string& needle) {
  CHECK_THROWS_WITH_AS(check_merge_problem(p), Contains(needle.c_str()), InvalidArgument);
}

}  // namespace

TEST_CASE("merge spec: canonical string, parse, kernel name, equality over the family's fields") {
  KernelSpec s = combine_spec(90, StateDType::f32, StateDType::bf16, 128, true);
  CHECK(s.canonical() == "flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1");
  CHECK(s.kernel_name() == "flashgen_combine_sm90_pf32_obf16_dv128_lse");
  CHECK(KernelSpec::parse(s.canonical()) == s);
  // Fields the combine family does not have are ignored by ==, canonical() and the name.
  KernelSpec t = s;
  t.unit = MatrixUnit::wgmma;
  t.tile = Tile{128, 128, 8, 3};
  t.head_dim = 32;
  t.mask = MaskKind::causal_top_left;
  CHECK(t == s);
  CHECK(t.canonical() == s.canonical());
  CHECK(t.kernel_name() == s.kernel_name());
  // ... but every combine field matters.
  for (int which = 0; which < 5; ++which) {
    KernelSpec u = s;
    if (which == 0) u.arch = 80;
    if (which == 1) u.partial_dtype = StateDType::f16;
    if (which == 2) u.out_dtype = StateDType::f32;
    if (which == 3) u.head_dim_v = 64;
    if (which == 4) u.has_lse = false;
    CAPTURE(which);
    CHECK_FALSE(u == s);
    CHECK(u.canonical() != s.canonical());
    CHECK(u.kernel_name() != s.kernel_name());
    CHECK(KernelSpec::parse(u.canonical()) == u);
  }
  // A combine spec is not a forward spec with the same values.
  KernelSpec f = s;
  f.family = KernelFamily::fwd;
  CHECK_FALSE(f == s);
  // Every state dtype pair round-trips.
  for (StateDType a : {StateDType::f32, StateDType::f16, StateDType::bf16})
    for (StateDType b : {StateDType::f32, StateDType::f16, StateDType::bf16}) {
      const KernelSpec x = combine_spec(80, a, b, 64, false);
      CHECK(KernelSpec::parse(x.canonical()) == x);
      CHECK(x.kernel_name() ==
            "flashgen_combine_sm80_p" + std::string(to_string(a)) + "_o" + std::string(to_string(b)) + "_dv64");
    }
  CHECK(s.threads() == kCombineThreads);
  CHECK(s.smem_bytes() == 0);
}

TEST_CASE("merge spec: parse refuses malformed combine strings, naming the field") {
  const std::string tag = "flashgen.combine.v1:";
  CHECK_THROWS_WITH_AS(KernelSpec::parse(tag + "sm=90,part=f64,out=f16,dv=128,lse=1"),
                       Contains("field 'part' has value 'f64', which is not a known state dtype; allowed: f32, f16, bf16"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(tag + "sm=90,part=f32,out=half,dv=128,lse=1"),
                       Contains("field 'out' has value 'half'"), InvalidArgument);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(tag + "sm=90,part=f32,out=f16,dv=128"), Contains("field 'lse' is missing"),
                       InvalidArgument);
  // A forward field in a combine string is unknown there, and the list names the combine fields.
  CHECK_THROWS_WITH_AS(KernelSpec::parse(tag + "sm=90,part=f32,out=f16,dv=128,lse=1,bm=64"),
                       Contains("field 'bm' (value '64') is unknown; allowed fields in order: sm,part,out,dv,lse"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(tag + "sm=90,out=f16,part=f32,dv=128,lse=1"),
                       Contains("field 'out' (value 'f16') is out of order"), InvalidArgument);
  // ... and the combine fields are unknown in a forward string.
  CHECK_THROWS_WITH_AS(
      KernelSpec::parse("flashgen.fwd.v1:sm=90,part=f32,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,"
                        "mask=none,bias=none,lse=1"),
      Contains("field 'part' (value 'f32') is unknown"), InvalidArgument);
}

TEST_CASE("merge spec: validate accepts every builtin arch, refuses bad fields with one sentence each") {
  for (const Profile& p : builtin_profiles()) {
    for (int arch : p.archs) {
      CAPTURE(arch);
      for (int dv : {8, 16, 24, 72, 128, 256, 512}) {
        const KernelSpec s = combine_spec(arch, StateDType::f16, StateDType::bf16, dv, dv % 16 == 0);
        const auto errors = validate(s, p);
        CHECK_MESSAGE(errors.empty(), (errors.empty() ? std::string() : errors[0]));
      }
    }
  }
  const Profile& p = profile_for_arch(80);
  for (int dv : {0, 4, 12, 520, 1024, -8}) {
    CAPTURE(dv);
    const auto errors = validate(combine_spec(80, StateDType::f32, StateDType::f16, dv, false), p);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] == "head_dim_v (" + std::to_string(dv) +
                           ") must be a multiple of 8 in [8, 512] for the combine family.");
  }
  KernelSpec bad = combine_spec(80, static_cast<StateDType>(7), static_cast<StateDType>(-1), 64, false);
  auto errors = validate(bad, p);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0] == "partial_dtype (7) is not a state dtype; allowed: f32, f16, bf16.");
  CHECK(errors[1] == "out_dtype (-1) is not a state dtype; allowed: f32, f16, bf16.");
  errors = validate(combine_spec(90, StateDType::f32, StateDType::f16, 64, false), p);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("arch (sm_90) is not a compute capability of profile ampere") != std::string::npos);
  // generate() of a valid combine spec gives its kernel; of an invalid one, Unsupported.
  const KernelSpec s = combine_spec(80, StateDType::f32, StateDType::f16, 64, true);
  const std::string src = generate(s);
  CHECK(src.find("extern \"C\" __global__ void __launch_bounds__(THREADS) " + s.kernel_name() + "(") !=
        std::string::npos);
  CHECK(src.find("constexpr int PARTIAL_DTYPE = 0;") != std::string::npos);
  CHECK(src.find("constexpr int OUT_DTYPE = 1;") != std::string::npos);
  CHECK(src.find("constexpr int HEAD_DIM_V = 64;") != std::string::npos);
  CHECK(src.find("constexpr bool HAS_LSE = true;") != std::string::npos);
  CHECK(src.find("\n#include") == std::string::npos);
  CHECK_THROWS_AS(generate(combine_spec(80, StateDType::f32, StateDType::f16, 12, true)), Unsupported);
}

TEST_CASE("merge problem: plan gives the combine spec; make_merge_problem fills contiguous strides") {
  const MergeProblem p = good_merge();
  CHECK(p.o_partial.stride_head == 128);
  CHECK(p.o_partial.stride_seq == 8 * 128);
  CHECK(p.o_partial.stride_batch == 33 * 8 * 128);
  CHECK(p.o_partial.stride_state == 2 * 33 * 8 * 128);
  CHECK(p.lse_partial.stride_seq == 1);
  CHECK(p.lse_partial.stride_head == 33);
  CHECK(p.lse_partial.stride_batch == 8 * 33);
  CHECK(p.lse_partial.stride_state == 2 * 8 * 33);
  CHECK(p.o.stride_batch == 33 * 8 * 128);
  CHECK(p.lse.stride_batch == 8 * 33);
  check_merge_problem(p);
  const KernelSpec s = plan(p, 86);
  CHECK(s == combine_spec(86, StateDType::f32, StateDType::f16, 128, true));
  MergeProblem q = p;
  q.lse.data = nullptr;
  CHECK_FALSE(plan(q, 86).has_lse);
  CHECK_THROWS_AS(plan(p, 61), Unsupported);  // no profile lists sm_61
  // An empty merge needs no pointers.
  MergeProblem e = make_merge_problem(StateDType::bf16, StateDType::f32, 3, 0, 5, 2, 64, nullptr, nullptr, nullptr,
                                      nullptr);
  check_merge_problem(e);
  e.batch = 2;
  e.heads = 0;
  check_merge_problem(e);
}

TEST_CASE("merge problem: check_merge_problem names every bad argument, its value and what is allowed") {
  MergeProblem p = good_merge();
  SUBCASE("enums") {
    p.partial_dtype = static_cast<StateDType>(5);
    refuses(p, "partial_dtype (5) is not a state dtype; allowed: f32, f16, bf16");
    p = good_merge();
    p.out_dtype = static_cast<StateDType>(-2);
    refuses(p, "out_dtype (-2) is not a state dtype; allowed: f32, f16, bf16");
  }
  SUBCASE("sizes") {
    p.num_states = 0;
    refuses(p, "num_states (0) must be in [1, 1024]");
    p.num_states = 1025;
    refuses(p, "num_states (1025) must be in [1, 1024]");
    p = good_merge();
    p.batch = -1;
    refuses(p, "batch (-1) must be >= 0");
    p = good_merge();
    p.seqlen_q = -3;
    refuses(p, "seqlen_q (-3) must be >= 0");
    p = good_merge();
    p.heads = -1;
    refuses(p, "heads (-1) must be >= 0");
    for (int64_t dv : {0, 4, 12, 520}) {
      p = good_merge();
      p.head_dim_v = dv;
      refuses(p, "head_dim_v (" + std::to_string(dv) + ") must be a multiple of 8 in [8, 512]");
    }
  }
  SUBCASE("strides") {
    p.o_partial.stride_state = -8;
    refuses(p, "o_partial.stride_state (-8) must be >= 0");
    p = good_merge();
    p.o_partial.stride_head = 130;  // f32: multiples of 4
    refuses(p, "o_partial.stride_head (130) must be a multiple of 4 elements (16 bytes of 4-byte elements) or 0");
    p = good_merge();
    p.partial_dtype = StateDType::f16;
    p.o_partial.stride_seq = 8 * 128 + 4;  // f16: multiples of 8
    refuses(p, "o_partial.stride_seq (1028) must be a multiple of 8 elements (16 bytes of 2-byte elements) or 0");
    p = good_merge();
    p.lse_partial.stride_seq = -1;
    refuses(p, "lse_partial.stride_seq (-1) must be >= 0");
    p = good_merge();
    p.o.stride_batch = 12;  // f16: multiples of 8
    refuses(p, "o.stride_batch (12) must be a multiple of 8 elements");
    p = good_merge();
    p.lse.stride_head = -33;
    refuses(p, "lse.stride_head (-33) must be >= 0");
  }
  SUBCASE("inputs may broadcast, outputs may not") {
    p.o_partial.stride_batch = 0;
    p.lse_partial.stride_head = 0;
    p.lse_partial.stride_seq = 0;
    check_merge_problem(p);
    p = good_merge();
    p.o.stride_seq = 0;
    refuses(p, "o.stride_seq (0) must be positive when seqlen_q (33) > 1: an output cannot broadcast");
    p = good_merge();
    p.lse.stride_head = 0;
    refuses(p, "lse.stride_head (0) must be positive when heads (8) > 1: an output cannot broadcast");
  }
  SUBCASE("pointers") {
    p.o_partial.data = nullptr;
    refuses(p, "o_partial.data is null");
    p = good_merge();
    p.lse_partial.data = nullptr;
    refuses(p, "lse_partial.data is null");
    p = good_merge();
    p.o.data = nullptr;
    refuses(p, "o.data is null");
    p = good_merge();
    p.o_partial.data = reinterpret_cast<const void*>(uintptr_t{0x1000008});
    refuses(p, "o_partial.data (0x1000008) must be 16-byte aligned");
    p = good_merge();
    p.o.data = reinterpret_cast<void*>(uintptr_t{0x3000004});
    refuses(p, "o.data (0x3000004) must be 16-byte aligned");
    p = good_merge();
    p.lse_partial.data = reinterpret_cast<const float*>(uintptr_t{0x2000002});
    refuses(p, "lse_partial.data (0x2000002) must be 4-byte aligned");
    p = good_merge();
    p.lse.data = reinterpret_cast<float*>(uintptr_t{0x4000001});
    refuses(p, "lse.data (0x4000001) must be 4-byte aligned");
  }
  SUBCASE("overflow") {
    p.o_partial.stride_state = int64_t{1} << 61;
    refuses(p, "o_partial: the largest offset");
    p = good_merge();
    p.lse_partial.stride_batch = int64_t{1} << 62;
    refuses(p, "lse_partial: the largest offset");
  }
  SUBCASE("outputs overlap themselves") {
    p.o.stride_head = 64;  // < head_dim_v
    refuses(p, "o.stride_head (64) is smaller than the 128 elements it must step over");
    p = good_merge();
    p.lse.stride_head = 8;  // < seqlen_q
    refuses(p, "lse.stride_head (8) is smaller than the 33 elements it must step over");
  }
  SUBCASE("outputs overlap inputs or each other") {
    // o inside the partials' range
    p.o.data = static_cast<const char*>(kOp) + 4096;
    refuses(p, "o (bytes [0x1001000,");
    refuses(p, "overlaps o_partial (bytes [0x1000000,");
    p = good_merge();
    p.o.data = const_cast<float*>(kLp);
    refuses(p, "overlaps lse_partial");
    p = good_merge();
    p.lse.data = static_cast<float*>(kO) + 16;
    refuses(p, "lse (bytes [0x3000040,");
    refuses(p, "overlaps o (bytes [0x3000000,");
    p = good_merge();
    p.lse.data = const_cast<float*>(kLp) + 100;
    refuses(p, "overlaps lse_partial");
    // Just past the end is fine: o_partial spans 4*2*33*8*128 float32 elements.
    p = good_merge();
    p.o.data = static_cast<const char*>(kOp) + int64_t{4} * 2 * 33 * 8 * 128 * 4;
    check_merge_problem(p);
  }
}

TEST_CASE("merge reference: float64 merge of states, -inf partials, all -inf rows, NaN, huge LSEs") {
  // One row, head_dim_v 8, three states as float32.
  const int64_t D = 8;
  std::vector<float> o = std::vector<float>(3 * D);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t d = 0; d < D; ++d) o[s * D + d] = static_cast<float>(s + 1) + 0.125f * static_cast<float>(d);
  std::vector<float> lse = {1.0f, 2.0f, 0.5f};
  MergeProblem p = make_merge_problem(StateDType::f32, StateDType::f32, 3, 1, 1, 1, D, o.data(), lse.data(),
                                      nullptr, nullptr);
  std::vector<double> ro, rl;
  ref::merge_states(p, ro, rl);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  CHECK(rl[0] == doctest::Approx(std::log(z)).epsilon(1e-14));
  for (int64_t d = 0; d < D; ++d) {
    double want = 0;
    for (int64_t s = 0; s < 3; ++s) want += std::exp(static_cast<double>(lse[s])) / z * o[s * D + d];
    CHECK(ro[d] == doctest::Approx(want).epsilon(1e-14));
  }
  // -inf partial: its O (NaN) is not read.
  const float inf = std::numeric_limits<float>::infinity();
  lse[1] = -inf;
  for (int64_t d = 0; d < D; ++d) o[D + d] = std::numeric_limits<float>::quiet_NaN();
  ref::merge_states(p, ro, rl);
  CHECK(std::isfinite(rl[0]));
  for (int64_t d = 0; d < D; ++d) CHECK(std::isfinite(ro[d]));
  // All -inf: O = 0, LSE = -inf.
  lse = {-inf, -inf, -inf};
  ref::merge_states(p, ro, rl);
  CHECK(rl[0] == -std::numeric_limits<double>::infinity());
  for (int64_t d = 0; d < D; ++d) CHECK(ro[d] == 0.0);
  // Huge finite LSEs: shift-invariant.
  lse = {1e30f, 1e30f, -inf};
  for (int64_t d = 0; d < D; ++d) o[D + d] = 0.0f;
  ref::merge_states(p, ro, rl);
  CHECK(rl[0] == doctest::Approx(1e30 + std::log(2.0)));
  for (int64_t d = 0; d < D; ++d) CHECK(ro[d] == doctest::Approx(0.5 * o[d]));
  // NaN LSE: the row is NaN.
  lse = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  ref::merge_states(p, ro, rl);
  CHECK(std::isnan(rl[0]));
  CHECK(std::isnan(ro[0]));
}

TEST_CASE("merge C ABI: init, plan, and every refusal mapped to its status") {
  flashgen_merge_problem c;
  REQUIRE(flashgen_merge_problem_init(&c, FLASHGEN_STATE_F32, FLASHGEN_STATE_F16, 4, 2, 33, 8, 128, kOp, kLp, kO,
                                      kL) == FLASHGEN_OK);
  CHECK(c.o_partial.stride_state == 2 * 33 * 8 * 128);
  CHECK(c.lse_partial.stride_seq == 1);
  char spec[256];
  REQUIRE(flashgen_plan_merge(&c, 90, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec) == "flashgen.combine.v1:sm=90,part=f32,out=f16,dv=128,lse=1");
  char* source = nullptr;
  REQUIRE(flashgen_generate(spec, &source) == FLASHGEN_OK);
  CHECK(std::string(source).find("flashgen_combine_sm90_pf32_of16_dv128_lse") != std::string::npos);
  flashgen_free(source);

  auto last = [] { return std::string(flashgen_last_error()); };
  CHECK(flashgen_plan_merge(&c, 90, spec, 10) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "spec_out_len = 10 is too small"));
  CHECK(flashgen_plan_merge(nullptr, 90, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "flashgen_plan_merge: problem is NULL"));
  CHECK(flashgen_plan_merge(&c, -1, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "flashgen_plan_merge: arch = -1; allowed: 0 for this machine's GPU, or a compute "
                               "capability as 10*major+minor in [10, 999]"));
  CHECK(flashgen_plan_merge(&c, 5, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "flashgen_plan_merge: arch = 5; allowed: "));
  CHECK(flashgen_plan_merge(&c, 61, spec, sizeof spec) == FLASHGEN_ERROR_UNSUPPORTED);
  if (!gpu_available()) {  // arch 0 is the current GPU's: without one, what to pass instead
    CHECK(flashgen_plan_merge(&c, 0, spec, sizeof spec) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(last().ends_with("; without a GPU pass arch = 10*major+minor (e.g. 90) instead of 0"));
  }
  flashgen_merge_problem bad = c;
  bad.partial_dtype = static_cast<flashgen_state_dtype>(9);
  CHECK(flashgen_plan_merge(&bad, 90, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "partial_dtype = 9 is not a flashgen_state_dtype"));
  bad = c;
  bad.num_states = 0;
  CHECK(flashgen_plan_merge(&bad, 90, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "flashgen_plan_merge: num_states (0) must be in [1, 1024]");  // (named by the C function)
  bad = c;
  bad.o.data = kOp;
  CHECK(flashgen_plan_merge(&bad, 90, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "overlaps o_partial"));
  CHECK(flashgen_merge_problem_init(&c, FLASHGEN_STATE_F32, static_cast<flashgen_state_dtype>(3), 1, 1, 1, 1, 8,
                                    kOp, kLp, kO, kL) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "out_dtype = 3 is not a flashgen_state_dtype"));
  CHECK(flashgen_merge_problem_init(&c, FLASHGEN_STATE_F32, FLASHGEN_STATE_F16, 1, -1, 1, 1, 8, kOp, kLp, kO,
                                    kL) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "batch = -1 is negative"));
  CHECK(flashgen_merge_problem_init(nullptr, FLASHGEN_STATE_F32, FLASHGEN_STATE_F16, 1, 1, 1, 1, 8, kOp, kLp, kO,
                                    kL) == FLASHGEN_ERROR_INVALID_ARGUMENT);

  // launch_merge_spec: a spec that does not match, a forward spec, an empty merge (no GPU needed).
  REQUIRE(flashgen_merge_problem_init(&c, FLASHGEN_STATE_F32, FLASHGEN_STATE_F16, 4, 2, 33, 8, 128, kOp, kLp, kO,
                                      kL) == FLASHGEN_OK);
  CHECK(flashgen_launch_merge_spec("flashgen.combine.v1:sm=90,part=f16,out=f16,dv=128,lse=1", &c, nullptr) ==
        FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "problem.partial_dtype = f32 but the kernel was generated for partial_dtype = f16"));
  CHECK(flashgen_launch_merge_spec("flashgen.combine.v1:sm=90,part=f32,out=f16,dv=64,lse=1", &c, nullptr) ==
        FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "head_dim_v = 128"));
  CHECK(flashgen_launch_merge_spec("flashgen.combine.v1:sm=90,part=f32,out=f16,dv=128,lse=0", &c, nullptr) ==
        FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "problem.lse.data is set but the kernel was generated without an LSE output"));
  CHECK(flashgen_launch_merge_spec(
            "flashgen.fwd.v1:sm=90,unit=m16n8k16,dtype=f16,d=128,dv=128,bm=128,bn=64,w=4,s=2,mask=none,bias=none,lse=1",
            &c, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(test::contains(last(), "kernel.spec.family is fwd but a merge of attention states needs a combine kernel"));
  c.seqlen_q = 0;
  CHECK(flashgen_launch_merge_spec("flashgen.combine.v1:sm=90,part=f32,out=f16,dv=128,lse=1", &c, nullptr) ==
        FLASHGEN_OK);
  if (!gpu_available()) {
    test::ScopedCache cache;
    c.seqlen_q = 33;
    CHECK(flashgen_merge_states(&c, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(flashgen_launch_merge_spec("flashgen.combine.v1:sm=90,part=f32,out=f16,dv=128,lse=1", &c, nullptr) ==
          FLASHGEN_ERROR_UNAVAILABLE);
  }
}

// Spill bytes a combine kernel may report: 0, except sm_70/72 (Volta, compiled
// with a CUDA 12 NVRTC), where the kernels with f32 partials, a bf16 or f16
// output and two or three chunks of head_dim_v per row (dv 16, 24) report 8-16
// bytes at 72 registers since the state groups (their shared-memory sum) and
// bf16 rounding in integer arithmetic there; bounded at 16 and listed.
int64_t combine_spill_limit(const KernelSpec& s) { return s.arch < 75 ? 16 : 0; }

TEST_CASE("compile: combine kernels on the NVRTC grid of every arch, no spills (sm_70/72: bounded)") {
  REQUIRE(rt::nvrtc_available());
  std::vector<int> archs;
  for (const Profile& p : builtin_profiles())
    for (int arch : p.archs) {
      if (rt::nvrtc_available_for(arch)) {
        archs.push_back(arch);
      } else {
        MESSAGE("sm_" << arch << " combine kernels skipped: no NVRTC on this machine targets it (sm_70/72 need a "
                      << "CUDA 12 NVRTC: pip install nvidia-cuda-nvrtc-cu12)");
      }
    }
  REQUIRE(archs.size() >= 8);
  // Per arch: every (partial, out) pair, head_dim_v rotating over the list,
  // LSE alternating; plus the extreme head dims with every pair at sm_80.
  const std::vector<int> dvs = {8, 16, 24, 64, 72, 128, 192, 256, 512};
  std::vector<KernelSpec> specs;
  size_t rotate = 0;
  for (int arch : archs)
    for (StateDType a : {StateDType::f32, StateDType::f16, StateDType::bf16})
      for (StateDType b : {StateDType::f32, StateDType::f16, StateDType::bf16}) {
        specs.push_back(combine_spec(arch, a, b, dvs[rotate % dvs.size()], rotate % 2 == 0));
        ++rotate;
      }
  for (int dv : {8, 512})
    for (StateDType a : {StateDType::f32, StateDType::bf16})
      for (StateDType b : {StateDType::f32, StateDType::bf16}) specs.push_back(combine_spec(80, a, b, dv, true));
  std::set<int> covered;
  for (const KernelSpec& s : specs) covered.insert(s.head_dim_v);
  CHECK(covered.size() == dvs.size());

  test::ScopedCache cache;
  std::string report;
  std::string spilled;  // kernels with spills (within their limit), for the summary
  for (const KernelSpec& s : specs) {
    CAPTURE(s.canonical());
    const auto problems = validate(s, profile_for_arch(s.arch));
    REQUIRE(problems.empty());
    CompiledKernel k;
    try {
      k = compile(s);
    } catch (const std::exception& e) {
      FAIL(e.what());
    }
    CHECK(test::is_elf(k.cubin));
    INFO("ptxas report:\n", k.compile_log);
    CHECK(k.compile_log.find("Compiling entry function '" + s.kernel_name() + "' for 'sm_" + std::to_string(s.arch) +
                             "'") != std::string::npos);
    // "N bytes stack frame, N bytes spill stores, N bytes spill loads": all
    // zero, or within combine_spill_limit (then listed).
    std::istringstream in(k.compile_log);
    std::string line;
    int reports = 0;
    while (std::getline(in, line)) {
      if (line.find("bytes spill stores") == std::string::npos) continue;
      ++reports;
      if (line.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") != std::string::npos) continue;
      long long frame = -1, stores = -1, loads = -1;
      const size_t at = line.find_first_of("0123456789");
      REQUIRE(at != std::string::npos);
      REQUIRE(std::sscanf(line.c_str() + at, "%lld bytes stack frame, %lld bytes spill stores, %lld bytes spill loads",
                          &frame, &stores, &loads) == 3);
      CHECK(stores <= combine_spill_limit(s));
      CHECK(loads <= combine_spill_limit(s));
      spilled += fmt::format("\n  {}: {} B spill stores, {} B spill loads", s.kernel_name(), stores, loads);
    }
    CHECK(reports >= 1);
  }
  MESSAGE("combine grid: " << specs.size() << " kernels over " << archs.size() << " archs compiled"
                           << (spilled.empty() ? std::string(", no spills") : ", with spills:" + spilled));
}
