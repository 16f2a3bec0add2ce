// CPU tests of the C ABI (flashgen.h): status codes and messages for bad
// input, buffer sizes, generate/free, and forward/launch without a GPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "flashgen/flashgen.h"
#include "flashgen/flashgen.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;

namespace {

// Fake, 256-byte aligned device addresses: never dereferenced on the CPU path.
const void* const kQ = reinterpret_cast<const void*>(uintptr_t{0x10000});
const void* const kK = reinterpret_cast<const void*>(uintptr_t{0x20000});
const void* const kV = reinterpret_cast<const void*>(uintptr_t{0x30000});
void* const kO = reinterpret_cast<void*>(uintptr_t{0x40000});

flashgen_problem good_problem(int64_t d = 64, flashgen_mask mask = FLASHGEN_MASK_NONE) {
  flashgen_problem p;
  REQUIRE(flashgen_problem_init_bshd(&p, FLASHGEN_DTYPE_F16, 2, 100, 120, 8, 2, d, d, mask, kQ, kK, kV,
                                     kO) == FLASHGEN_OK);
  return p;
}

std::string last() { return flashgen_last_error(); }

using flashgen::test::contains;

}  // namespace

TEST_CASE("c_api: status numbers are flashgen::ErrorCode's") {
  CHECK(FLASHGEN_OK == 0);
  CHECK(FLASHGEN_ERROR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
  CHECK(FLASHGEN_ERROR_UNSUPPORTED == static_cast<int>(ErrorCode::unsupported));
  CHECK(FLASHGEN_ERROR_COMPILE_FAILED == static_cast<int>(ErrorCode::compile_failed));
  CHECK(FLASHGEN_ERROR_DRIVER == static_cast<int>(ErrorCode::driver));
  CHECK(FLASHGEN_ERROR_UNAVAILABLE == static_cast<int>(ErrorCode::unavailable));
  CHECK(FLASHGEN_ERROR_IO == static_cast<int>(ErrorCode::io));
  CHECK(FLASHGEN_ERROR_INTERNAL == static_cast<int>(ErrorCode::internal));
}

TEST_CASE("c_api: problem_init_bshd fills contiguous strides and rejects bad arguments") {
  flashgen_problem p = good_problem(96);
  CHECK(p.dtype == FLASHGEN_DTYPE_F16);
  CHECK(p.batch == 2);
  CHECK(p.seqlen_q == 100);
  CHECK(p.seqlen_k == 120);
  CHECK(p.heads_q == 8);
  CHECK(p.heads_kv == 2);
  CHECK(p.q.data == kQ);
  CHECK(p.o.data == kO);
  CHECK(p.q.stride_head == 96);
  CHECK(p.q.stride_seq == 8 * 96);
  CHECK(p.q.stride_batch == 100 * 8 * 96);
  CHECK(p.k.stride_seq == 2 * 96);
  CHECK(p.k.stride_batch == 120 * 2 * 96);
  CHECK(p.v.stride_batch == 120 * 2 * 96);
  CHECK(p.o.stride_batch == 100 * 8 * 96);
  CHECK(p.has_scale == 0);
  CHECK(p.bias.kind == FLASHGEN_BIAS_NONE);
  CHECK(p.bias.data == nullptr);
  CHECK(p.lse.data == nullptr);
  CHECK(p.softcap == 0.0f);
  CHECK(p.window_left == -1);
  CHECK(p.window_right == -1);
  CHECK(p.sinks == nullptr);
  CHECK(p.alibi_slopes == nullptr);
  CHECK(p.alibi_stride_batch == 0);
  CHECK(p.cu_seqlens_q == nullptr);  // a dense batch
  CHECK(p.cu_seqlens_k == nullptr);
  CHECK(p.seqused_k == nullptr);
  CHECK(p.total_q == 0);
  CHECK(p.total_k == 0);
  // Garbage in the struct beforehand does not survive init.
  flashgen_problem dirty;
  std::memset(&dirty, 0x5a, sizeof dirty);
  REQUIRE(flashgen_problem_init_bshd(&dirty, FLASHGEN_DTYPE_F16, 1, 10, 10, 1, 1, 64, 64,
                                     FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT, kQ, kK, kV, kO) == FLASHGEN_OK);
  CHECK(dirty.mask == FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT);
  CHECK(dirty.window_left == -1);
  CHECK(dirty.window_right == -1);
  CHECK(dirty.sinks == nullptr);
  CHECK(dirty.alibi_slopes == nullptr);
  CHECK(dirty.alibi_stride_batch == 0);
  CHECK(dirty.cu_seqlens_q == nullptr);
  CHECK(dirty.cu_seqlens_k == nullptr);
  CHECK(dirty.seqused_k == nullptr);
  CHECK(dirty.total_q == 0);
  CHECK(dirty.total_k == 0);
  char dirty_spec[256];
  CHECK(flashgen_plan(&dirty, 80, dirty_spec, sizeof dirty_spec) == FLASHGEN_OK);  // (the garbage would be refused)
  CHECK(std::string(dirty_spec).find("varlen") == std::string::npos);

  CHECK(flashgen_problem_init_bshd(nullptr, FLASHGEN_DTYPE_F16, 1, 1, 1, 1, 1, 64, 64, FLASHGEN_MASK_NONE,
                                   kQ, kK, kV, kO) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem is NULL"));
  CHECK(flashgen_problem_init_bshd(&p, static_cast<flashgen_dtype>(7), 1, 1, 1, 1, 1, 64, 64,
                                   FLASHGEN_MASK_NONE, kQ, kK, kV, kO) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "dtype = 7"));
  CHECK(contains(last(), "FLASHGEN_DTYPE_BF16"));
  CHECK(flashgen_problem_init_bshd(&p, FLASHGEN_DTYPE_F16, 1, 1, 1, 1, 1, 64, 64, static_cast<flashgen_mask>(5),
                                   kQ, kK, kV, kO) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "mask = 5"));
  CHECK(contains(last(), "FLASHGEN_MASK_WINDOW_TOP_LEFT = 3, FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT = 4"));
  CHECK(flashgen_problem_init_bshd(&p, FLASHGEN_DTYPE_F16, 1, -5, 1, 1, 1, 64, 64, FLASHGEN_MASK_NONE, kQ, kK,
                                   kV, kO) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "seqlen_q = -5"));
}

TEST_CASE("c_api: plan matches the C++ plan and round-trips") {
  flashgen_problem p = good_problem(96, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT);
  char spec[256];
  REQUIRE(flashgen_plan(&p, 90, spec, sizeof spec) == FLASHGEN_OK);
  AttentionProblem cpp = make_bshd_problem(DType::f16, 2, 100, 120, 8, 2, 96, 96, MaskKind::causal_bottom_right,
                                           kQ, kK, kV, kO);
  const KernelSpec expected = plan(cpp, 90);
  CHECK(std::string(spec) == expected.canonical());
  CHECK(KernelSpec::parse(spec) == expected);

  // bias and LSE reach the spec
  p.bias.kind = FLASHGEN_BIAS_F32;
  p.bias.data = reinterpret_cast<const void*>(uintptr_t{0x50000});
  p.bias.stride_q = 120;
  p.bias.stride_k = 1;
  p.lse.data = reinterpret_cast<float*>(uintptr_t{0x8000000});
  p.lse.stride_head = 100;
  p.lse.stride_batch = 800;
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  const KernelSpec s = KernelSpec::parse(spec);
  CHECK(s.arch == 80);
  CHECK(s.bias == BiasKind::f32);
  CHECK(s.has_lse);
  CHECK_FALSE(s.softcap);
  CHECK(std::string(spec).find("softcap") == std::string::npos);
  // an LSE written over O is refused before anything is planned
  p.lse.data = static_cast<float*>(const_cast<void*>(p.o.data));
  CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(flashgen_last_error()).find("the forward's two outputs must not overlap") != std::string::npos);
  p.lse.data = reinterpret_cast<float*>(uintptr_t{0x8000000});

  // a softcap reaches the spec; a bad one is refused naming it
  p.softcap = 30.0f;
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(KernelSpec::parse(spec).softcap);
  CHECK(std::string(spec).ends_with(",lse=1,softcap=1"));
  for (float bad : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e-40f, 2000.0f}) {
    p.softcap = bad;
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(flashgen_last_error()).find("softcap") != std::string::npos);
  }
}

TEST_CASE("c_api: window masks, sinks and ALiBi reach the problem and the spec") {
  CHECK(FLASHGEN_MASK_WINDOW_TOP_LEFT == 3);
  CHECK(FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT == 4);
  char spec[256];
  for (auto [c_mask, mask] : {std::pair{FLASHGEN_MASK_WINDOW_TOP_LEFT, MaskKind::window_top_left},
                              std::pair{FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT, MaskKind::window_bottom_right}}) {
    CAPTURE(to_string(mask));
    flashgen_problem p = good_problem(64, c_mask);
    p.window_left = 16;
    p.window_right = 0;
    REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
    CHECK(KernelSpec::parse(spec).mask == mask);
    // The sizes reach check_problem: each is named when refused.
    p.window_left = -2;
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "window_left (-2) must be >= -1"));
    p.window_left = -1;
    p.window_right = -7;
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "window_right (-7) must be >= -1"));
  }
  flashgen_problem p = good_problem(64, FLASHGEN_MASK_CAUSAL_TOP_LEFT);
  p.window_left = 3;
  CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "window_left (3) must be -1 with mask causaltl"));
  CHECK(contains(last(), "windowtl or windowbr"));

  // sinks and alibi_slopes reach the spec (after softcap), and their checks.
  p = good_problem();
  p.sinks = reinterpret_cast<const float*>(uintptr_t{0x70000});
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec).ends_with(",lse=0,sinks=1"));
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x80000});
  p.alibi_stride_batch = 8;
  p.softcap = 20.0f;
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec).ends_with(",lse=0,softcap=1,sinks=1,alibi=1"));
  const KernelSpec s = KernelSpec::parse(spec);
  CHECK(s.sinks);
  CHECK(s.alibi);
  p.alibi_stride_batch = -1;
  CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "alibi_stride_batch (-1) must be >= 0"));
  p.alibi_stride_batch = 0;
  p.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x80002});
  CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "alibi_slopes (0x80002) must be 4-byte aligned"));
  p.alibi_slopes = nullptr;
  p.sinks = reinterpret_cast<const float*>(uintptr_t{0x70001});
  CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "sinks (0x70001) must be 4-byte aligned"));

  // The C plan equals the C++ plan of the same problem.
  flashgen_problem c = good_problem(64, FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT);
  c.window_left = 100;
  c.window_right = 2;
  c.sinks = reinterpret_cast<const float*>(uintptr_t{0x70000});
  c.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x80000});
  REQUIRE(flashgen_plan(&c, 75, spec, sizeof spec) == FLASHGEN_OK);
  AttentionProblem cpp = make_bshd_problem(DType::f16, 2, 100, 120, 8, 2, 64, 64, MaskKind::window_bottom_right, kQ,
                                           kK, kV, kO);
  cpp.window_left = 100;
  cpp.window_right = 2;
  cpp.sinks = c.sinks;
  cpp.alibi_slopes = c.alibi_slopes;
  CHECK(std::string(spec) == plan(cpp, 75).canonical());
}

TEST_CASE("c_api: packed batches: cu_seqlens, seqused_k, total_q and total_k reach the problem and the spec") {
  // The struct grew at its end (0.4.0): the packed-batch fields follow alibi_stride_batch.
  CHECK(offsetof(flashgen_problem, cu_seqlens_q) > offsetof(flashgen_problem, alibi_stride_batch));
  CHECK(offsetof(flashgen_problem, cu_seqlens_k) > offsetof(flashgen_problem, cu_seqlens_q));
  CHECK(offsetof(flashgen_problem, seqused_k) > offsetof(flashgen_problem, cu_seqlens_k));
  CHECK(offsetof(flashgen_problem, total_q) > offsetof(flashgen_problem, seqused_k));
  CHECK(offsetof(flashgen_problem, total_k) > offsetof(flashgen_problem, total_q));
  const auto* const cu_q = reinterpret_cast<const int32_t*>(uintptr_t{0x90000});
  const auto* const cu_k = reinterpret_cast<const int32_t*>(uintptr_t{0x90100});
  const auto* const used = reinterpret_cast<const int32_t*>(uintptr_t{0x90200});
  // 2 sequences of at most 100 query rows and 120 keys, 150 rows and 200 keys in all.
  flashgen_problem p = good_problem(64, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT);
  p.q.stride_batch = p.k.stride_batch = p.v.stride_batch = p.o.stride_batch = 0;
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_k = cu_k;
  p.total_q = 150;
  p.total_k = 200;
  char spec[256];
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec).ends_with(",lse=0,varlen=1"));
  CHECK(KernelSpec::parse(spec).varlen);
  CHECK(KernelSpec::parse(spec).kernel_name().ends_with("_varlen"));
  // The same problem through the C++ API plans the same kernel.
  AttentionProblem cpp = make_bshd_problem(DType::f16, 2, 100, 120, 8, 2, 64, 64, MaskKind::causal_bottom_right, kQ,
                                           kK, kV, kO);
  cpp.q.stride_batch = cpp.k.stride_batch = cpp.v.stride_batch = cpp.o.stride_batch = 0;
  cpp.cu_seqlens_q = cu_q;
  cpp.cu_seqlens_k = cu_k;
  cpp.total_q = 150;
  cpp.total_k = 200;
  CHECK(std::string(spec) == plan(cpp, 80).canonical());
  // seqused_k and an LSE [heads_q, total_q] plan too (LSE is part of the spec, seqused_k is not).
  p.seqused_k = used;
  p.lse.data = reinterpret_cast<float*>(uintptr_t{0x8000000});
  p.lse.stride_head = 150;
  p.lse.stride_batch = 0;
  REQUIRE(flashgen_plan(&p, 90, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec).ends_with(",lse=1,varlen=1"));

  // Each field reaches check_problem: the refusals name it.
  struct Bad {
    void (*change)(flashgen_problem&);
    const char* message;
  };
  for (const Bad& b : std::vector<Bad>{
           {[](flashgen_problem& x) { x.cu_seqlens_k = nullptr; }, "cu_seqlens_k is null but cu_seqlens_q is set"},
           {[](flashgen_problem& x) { x.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x90002}); },
            "cu_seqlens_q (0x90002) must be 4-byte aligned"},
           {[](flashgen_problem& x) { x.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x90101}); },
            "cu_seqlens_k (0x90101) must be 4-byte aligned"},
           {[](flashgen_problem& x) { x.seqused_k = reinterpret_cast<const int32_t*>(uintptr_t{0x90202}); },
            "seqused_k (0x90202) must be 4-byte aligned"},
           {[](flashgen_problem& x) { x.total_q = -1; }, "total_q (-1) must be in [0, 2^31 - 257]"},
           {[](flashgen_problem& x) { x.total_k = int64_t{1} << 31; }, "total_k (2147483648) must be in [0, 2^31 - 257]"},
           {[](flashgen_problem& x) { x.v.stride_batch = 120 * 2 * 64; }, "v.stride_batch (15360) must be 0 with cu_seqlens_q"},
           {[](flashgen_problem& x) { x.lse.stride_batch = 1200; }, "lse.stride_batch (1200) must be 0 with cu_seqlens_q"},
           {[](flashgen_problem& x) { x.cu_seqlens_q = nullptr; },
            "describe a packed batch and must be unset (null, 0) without cu_seqlens_q"},
       }) {
    CAPTURE(b.message);
    flashgen_problem x = p;
    b.change(x);
    CHECK(flashgen_plan(&x, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), b.message));
  }
}

TEST_CASE("c_api: plan refuses a buffer that is too small and says the size needed") {
  flashgen_problem p = good_problem();
  char full[256];
  REQUIRE(flashgen_plan(&p, 80, full, sizeof full) == FLASHGEN_OK);
  const size_t need = std::strlen(full) + 1;
  char small[256];
  std::memset(small, '#', sizeof small);
  CHECK(flashgen_plan(&p, 80, small, need - 1) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "too small"));
  CHECK(contains(last(), "needs " + std::to_string(need) + " bytes"));
  CHECK(small[0] == '#');  // untouched
  CHECK(flashgen_plan(&p, 80, small, need) == FLASHGEN_OK);  // exactly enough
  CHECK(std::string(small) == full);
  CHECK(flashgen_plan(&p, 80, nullptr, 0) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "spec_out is NULL"));
  CHECK(flashgen_plan(nullptr, 80, full, sizeof full) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem is NULL"));
}

TEST_CASE("c_api: plan reports bad problems and unsupported archs") {
  char spec[256];
  {
    flashgen_problem p = good_problem();
    p.heads_q = 7;  // not a multiple of heads_kv = 2
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "heads"));
  }
  {
    flashgen_problem p = good_problem();
    p.head_dim = 20;
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "head_dim"));
  }
  {
    flashgen_problem p = good_problem();
    p.q.data = reinterpret_cast<const void*>(uintptr_t{0x10002});  // misaligned
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK_FALSE(last().empty());
  }
  {
    flashgen_problem p = good_problem();
    p.has_scale = 1;
    p.scale = std::numeric_limits<float>::infinity();
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "scale"));
  }
  {
    flashgen_problem p = good_problem();
    p.o.stride_head = p.head_dim_v - 8;  // rows of the output would overlap
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "o.stride_head"));
    CHECK(contains(last(), "is smaller than the"));
    p = good_problem();
    p.q.stride_head = 8;  // an input may overlap itself
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  }
  {
    flashgen_problem p = good_problem();
    p.bias.kind = static_cast<flashgen_bias_kind>(9);
    CHECK(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "bias.kind = 9"));
  }
  {
    flashgen_problem p = good_problem();
    CHECK(flashgen_plan(&p, 61, spec, sizeof spec) == FLASHGEN_ERROR_UNSUPPORTED);  // no profile
    CHECK(contains(last(), "61"));
    p.dtype = FLASHGEN_DTYPE_BF16;  // the volta profile's unit takes float16 only
    CHECK(flashgen_plan(&p, 70, spec, sizeof spec) == FLASHGEN_ERROR_UNSUPPORTED);
    CHECK(contains(last(), "70"));
    CHECK(contains(last(), "bf16"));
    CHECK(flashgen_plan(&p, -1, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), "arch = -1"));
    // Every arch outside {0} and [10, 999] is refused by the C function, in one style.
    for (int arch : {-1, 1, 9, 1000, 2147483647}) {
      CAPTURE(arch);
      CHECK(flashgen_plan(&p, arch, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
      CHECK(contains(last(), fmt::format("flashgen_plan: arch = {}; allowed: 0 for this machine's GPU, or a compute "
                                         "capability as 10*major+minor in [10, 999]",
                                         arch)));
    }
  }
  if (!gpu_available()) {
    flashgen_problem p = good_problem();
    CHECK(flashgen_plan(&p, 0, spec, sizeof spec) == FLASHGEN_ERROR_UNAVAILABLE);
    CHECK(contains(last(), "libcuda.so.1"));
  }
}

TEST_CASE("c_api: generate and free") {
  flashgen_problem p = good_problem(80);
  char spec[256];
  REQUIRE(flashgen_plan(&p, 86, spec, sizeof spec) == FLASHGEN_OK);
  char* source = reinterpret_cast<char*>(uintptr_t{1});
  REQUIRE(flashgen_generate(spec, &source) == FLASHGEN_OK);
  REQUIRE(source != nullptr);
  const KernelSpec s = KernelSpec::parse(spec);
  CHECK(std::string(source) == generate(s));
  CHECK(contains(source, s.kernel_name()));
  flashgen_free(source);
  flashgen_free(nullptr);

  source = reinterpret_cast<char*>(uintptr_t{1});
  CHECK(flashgen_generate("flashgen.fwd.v1:nonsense", &source) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(source == nullptr);  // reset on failure
  CHECK_FALSE(last().empty());
  CHECK(flashgen_generate(nullptr, &source) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "spec is NULL"));
  CHECK(flashgen_generate(spec, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "source_out is NULL"));

  // A well-formed spec that its arch's profile cannot serve.
  KernelSpec bad = s;
  bad.arch = 70;
  CHECK(flashgen_generate(bad.canonical().c_str(), &source) == FLASHGEN_ERROR_UNSUPPORTED);
  CHECK(contains(last(), "70"));
  // A fwd_split spec with a pack that does not divide block_m.
  KernelSpec split = s;
  split.family = KernelFamily::fwd_split;
  split.pack = 3;
  CHECK(flashgen_generate(split.canonical().c_str(), &source) == FLASHGEN_ERROR_UNSUPPORTED);
  CHECK(contains(last(), "pack (3) must be a power of two"));
}

TEST_CASE("c_api: forward and launch_spec without a GPU are FLASHGEN_ERROR_UNAVAILABLE") {
  if (gpu_available()) {
    MESSAGE("a GPU is present; the no-GPU paths are not exercised here");
    return;
  }
  test::ScopedCache cache;
  flashgen_problem p = good_problem();
  CHECK(flashgen_forward(&p, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
  const std::string msg = last();
  CHECK(contains(msg, "no CUDA driver: libcuda.so.1 could not be loaded"));
  CHECK(contains(msg, "Code generation and compilation work without one."));

  char spec[256];
  // arch 0 means the current GPU's: without one, the error says what to pass instead.
  CHECK(flashgen_plan(&p, 0, spec, sizeof spec) == FLASHGEN_ERROR_UNAVAILABLE);
  CHECK(contains(last(), "without a GPU pass arch = 10*major+minor (e.g. 90) instead of 0"));
  REQUIRE(flashgen_plan(&p, 80, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(flashgen_launch_spec(spec, &p, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
  CHECK(contains(last(), "libcuda.so.1"));

  // Bad input is reported before the missing GPU.
  flashgen_problem bad = p;
  bad.heads_kv = 3;
  CHECK(flashgen_forward(&bad, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(flashgen_forward(nullptr, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem is NULL"));
  // So are the kernels' 32-bit row limits (before: FLASHGEN_ERROR_UNAVAILABLE hid them here).
  flashgen_problem tall = p;
  tall.seqlen_q = int64_t{1} << 31;
  tall.q.stride_batch = tall.seqlen_q * tall.q.stride_seq;  // (strides that nest over the rows)
  tall.o.stride_batch = tall.seqlen_q * tall.o.stride_seq;
  CHECK(flashgen_forward(&tall, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  INFO("last error: ", last());
  CHECK(contains(last(), "seqlen_q (2147483648) and seqlen_k (" + std::to_string(p.seqlen_k) +
                             ") must be at most 2^31 - 257"));

  // A problem that does not match the spec: named mismatch, before any GPU use.
  flashgen_problem other = p;
  other.dtype = FLASHGEN_DTYPE_BF16;
  CHECK(flashgen_launch_spec(spec, &other, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "dtype"));
  CHECK(contains(last(), "bf16"));
  other = p;
  other.mask = FLASHGEN_MASK_CAUSAL_TOP_LEFT;
  CHECK(flashgen_launch_spec(spec, &other, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "mask"));
  other = p;
  other.sinks = reinterpret_cast<const float*>(uintptr_t{0x70000});
  CHECK(flashgen_launch_spec(spec, &other, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem.sinks = 0x70000 (on) but the kernel was generated for sinks = off"));
  other = p;
  other.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x80000});
  CHECK(flashgen_launch_spec(spec, &other, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem.alibi_slopes = 0x80000 (on) but the kernel was generated for alibi_slopes = off"));
  // A packed batch against a dense kernel, and the other way round.
  flashgen_problem packed = p;
  packed.q.stride_batch = packed.k.stride_batch = packed.v.stride_batch = packed.o.stride_batch = 0;
  packed.cu_seqlens_q = reinterpret_cast<const int32_t*>(uintptr_t{0x90000});
  packed.cu_seqlens_k = reinterpret_cast<const int32_t*>(uintptr_t{0x90100});
  packed.total_q = 150;
  packed.total_k = 200;
  CHECK(flashgen_launch_spec(spec, &packed, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "problem.cu_seqlens_q = 0x90000 (a packed batch) but the kernel was generated for "
                         "cu_seqlens_q = dense (varlen off)"));
  char packed_spec[256];
  REQUIRE(flashgen_plan(&packed, 80, packed_spec, sizeof packed_spec) == FLASHGEN_OK);
  CHECK(flashgen_launch_spec(packed_spec, &p, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last(), "(dense) but the kernel was generated for cu_seqlens_q = a packed batch (varlen=1)"));
  CHECK(flashgen_launch_spec(packed_spec, &packed, nullptr) == FLASHGEN_ERROR_UNAVAILABLE);
  CHECK(flashgen_launch_spec("garbage", &p, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);

  // Empty problems launch nothing and need no GPU.
  flashgen_problem empty = p;
  empty.seqlen_q = 0;
  CHECK(flashgen_launch_spec(spec, &empty, nullptr) == FLASHGEN_OK);
  empty = packed;  // a packed batch without rows
  empty.total_q = 0;
  CHECK(flashgen_launch_spec(packed_spec, &empty, nullptr) == FLASHGEN_OK);
}

TEST_CASE("c_api: the last error is per thread and kept across successes") {
  CHECK(flashgen_generate(nullptr, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  const std::string mine = last();
  CHECK_FALSE(mine.empty());
  std::string other_before, other_after;
  std::thread t([&] {
    other_before = flashgen_last_error();
    flashgen_problem p;
    flashgen_problem_init_bshd(&p, static_cast<flashgen_dtype>(5), 1, 1, 1, 1, 1, 64, 64, FLASHGEN_MASK_NONE,
                               kQ, kK, kV, kO);
    other_after = flashgen_last_error();
  });
  t.join();
  CHECK(other_before.empty());
  CHECK(contains(other_after, "dtype = 5"));
  CHECK(last() == mine);  // the other thread's failure did not touch ours
  flashgen_problem p = good_problem();
  (void)p;  // a successful call
  CHECK(last() == mine);
}

TEST_CASE("c++: launch refuses sequence lengths beyond the kernels' 32-bit counts, before any driver call") {
  // K and V repeat one row (stride_seq 0), so 2^33 keys need no memory.
  AttentionProblem p = make_bshd_problem(DType::f16, 1, 10, int64_t{1} << 33, 2, 2, 64, 64, MaskKind::none, kQ, kK,
                                         kV, kO);
  p.k.stride_seq = p.v.stride_seq = 0;
  p.k.stride_batch = p.v.stride_batch = 0;
  // plan() refuses it (so forward() compiles nothing), and so does the C ABI's launch of a
  // spec before it compiles or loads the kernel (no GPU and no NVRTC are reached here).
  CHECK_THROWS_WITH_AS(plan(p, 80), doctest::Contains("seqlen_k (8589934592) must be at most 2^31 - 257"),
                       InvalidArgument);
  AttentionProblem small = p;
  small.seqlen_k = 10;
  Kernel k;
  k.spec = plan(small, 80);
  flashgen_problem c;
  REQUIRE(flashgen_problem_init_bshd(&c, FLASHGEN_DTYPE_F16, 1, 10, 10, 2, 2, 64, 64, FLASHGEN_MASK_NONE, kQ, kK,
                                     kV, kO) == FLASHGEN_OK);
  c.seqlen_k = int64_t{1} << 33;
  c.k.stride_seq = c.v.stride_seq = c.k.stride_batch = c.v.stride_batch = 0;
  CHECK(flashgen_launch_spec(k.spec.canonical().c_str(), &c, nullptr) == FLASHGEN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashgen_last_error(), "seqlen_k (8589934592) must be at most 2^31 - 257"));
  k.function = reinterpret_cast<void*>(uintptr_t{0x1234});
  try {
    launch(k, p, nullptr);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(contains(e.what(), "seqlen_k (8589934592) must be at most 2^31 - 257"));
  }
}

TEST_CASE("c_api/c++: launch checks the problem against the kernel's spec") {
  // The C++ path with a hand-made Kernel (no GPU needed to reach the checks).
  AttentionProblem p = make_bshd_problem(DType::f16, 1, 10, 10, 2, 2, 64, 64, MaskKind::none, kQ, kK, kV, kO);
  Kernel k;
  k.spec = plan(p, 80);
  k.function = reinterpret_cast<void*>(uintptr_t{0x1234});
  AttentionProblem q = p;
  q.head_dim_v = 128;
  q.v.stride_head = 128;
  q.v.stride_seq = 256;
  q.v.stride_batch = 2560;
  q.o.stride_head = 128;
  q.o.stride_seq = 256;
  q.o.stride_batch = 2560;
  try {
    launch(k, q, nullptr);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(contains(e.what(), "head_dim_v = 128"));
    CHECK(contains(e.what(), k.spec.canonical()));
  }
  // sinks and ALiBi on or off must match the spec's, either way.
  AttentionProblem with = p;
  with.sinks = reinterpret_cast<const float*>(uintptr_t{0x70000});
  with.alibi_slopes = reinterpret_cast<const float*>(uintptr_t{0x80000});
  Kernel both = k;
  both.spec = plan(with, 80);
  CHECK(both.spec.sinks);
  CHECK(both.spec.alibi);
  for (const auto& [problem, kernel, what] :
       {std::tuple{&with, &k, "(on) but the kernel was generated for sinks = off"},
        std::tuple{&p, &both, "(off) but the kernel was generated for sinks = on"}}) {
    try {
      launch(*kernel, *problem, nullptr);
      FAIL("expected InvalidArgument");
    } catch (const InvalidArgument& e) {
      CHECK(contains(e.what(), "launch: problem.sinks = "));
      CHECK(contains(e.what(), what));
    }
  }
  AttentionProblem sinks_only = p;  // sinks match, ALiBi does not
  sinks_only.sinks = with.sinks;
  try {
    launch(both, sinks_only, nullptr);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(contains(e.what(), "launch: problem.alibi_slopes = "));
    CHECK(contains(e.what(), "(off) but the kernel was generated for alibi_slopes = on"));
  }
  Kernel null_kernel;
  null_kernel.spec = k.spec;
  CHECK_THROWS_AS(launch(null_kernel, p, nullptr), InvalidArgument);
  // An empty problem returns before touching the driver.
  AttentionProblem empty = p;
  empty.batch = 0;
  CHECK_NOTHROW(launch(k, empty, nullptr));
  if (!gpu_available()) {
    CHECK_THROWS_AS(launch(k, p, nullptr), Unavailable);
    CHECK_THROWS_AS(forward(p, nullptr), Unavailable);
    CHECK_THROWS_AS(current_device(), Unavailable);
    CHECK_THROWS_AS(load_kernel(k.spec), Unavailable);
  }
}

TEST_CASE("c_api: paged KV caches: page_table, page_table_stride, page_size and num_pages reach the problem") {
  // The struct grew at its end (0.4.0): the paged fields follow total_k.
  CHECK(offsetof(flashgen_problem, page_table) > offsetof(flashgen_problem, total_k));
  CHECK(offsetof(flashgen_problem, page_table_stride) > offsetof(flashgen_problem, page_table));
  CHECK(offsetof(flashgen_problem, page_size) > offsetof(flashgen_problem, page_table_stride));
  CHECK(offsetof(flashgen_problem, num_pages) > offsetof(flashgen_problem, page_size));
  flashgen_problem p = good_problem(64, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT);
  CHECK(p.page_table == nullptr);  // init: contiguous K/V
  CHECK(p.page_table_stride == 0);
  CHECK(p.page_size == 0);
  CHECK(p.num_pages == 0);
  p.page_table = reinterpret_cast<const int32_t*>(uintptr_t{0x91000});
  p.page_size = 16;
  p.page_table_stride = (p.seqlen_k + 15) / 16;
  p.num_pages = p.batch * p.page_table_stride;
  p.k.stride_batch = 16 * p.k.stride_seq;
  p.v.stride_batch = 16 * p.v.stride_seq;
  char spec[256];
  REQUIRE(flashgen_plan(&p, 90, spec, sizeof spec) == FLASHGEN_OK);
  CHECK(std::string(spec).ends_with(",paged=1"));
  CHECK(KernelSpec::parse(spec).paged);
  // Each field reaches check_problem: the refusals name it.
  for (const auto& b : std::initializer_list<std::pair<int, const char*>>{
           {0, "page_size (24) must be a power of two in [1, 256]"},
           {1, "page_table_stride (0) must be at least ceil(seqlen_k / page_size)"},
           {2, "num_pages (0) must be >= 1 with a page_table"}}) {
    CAPTURE(b.second);
    flashgen_problem x = p;
    if (b.first == 0) x.page_size = 24;
    if (b.first == 1) x.page_table_stride = 0;
    if (b.first == 2) x.num_pages = 0;
    CHECK(flashgen_plan(&x, 90, spec, sizeof spec) == FLASHGEN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last(), b.second));
  }
}
