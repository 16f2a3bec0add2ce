// KernelSpec: head-dim split, derived sizes, canonical string round trip and
// parse errors, kernel names, validation sentences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "flashgen/spec.hpp"
#include "gen/params.hpp"
#include "gen/spec_fields.hpp"

using namespace flashgen;
using doctest::Contains;

namespace {

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

bool is_c_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// The example spec from DESIGN.md / spec.hpp.
KernelSpec example_spec() {
  KernelSpec s;
  s.arch = 90;
  s.unit = MatrixUnit::m16n8k16;
  s.dtype = DType::f16;
  s.head_dim = 96;
  s.head_dim_v = 96;
  s.tile.block_m = 128;
  s.tile.block_n = 64;
  s.tile.warps = 4;
  s.tile.stages = 2;
  s.mask = MaskKind::causal_bottom_right;
  s.bias = BiasKind::none;
  s.has_lse = true;
  return s;
}
const std::string kExampleCanonical =
    "flashgen.fwd.v1:sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=causalbr,"
    "bias=none,lse=1";

// A profile written out here so the validation tests do not depend on the
// shipped YAML files.
Profile test_profile() {
  Profile p;
  p.name = "testgen";
  p.source = "test/testgen.yml";
  p.archs = {90, 91};
  p.matrix_unit.shape = MatrixUnit::m16n8k16;
  p.matrix_unit.operand_dtypes = {DType::f16};
  p.flash = {{256, 64, 64, 4, 2}};
  p.smem_per_block = 232448;
  p.smem_per_sm = 233472;
  p.registers_per_sm = 65536;
  p.max_threads_per_sm = 2048;
  p.mma_flop_per_clock_per_sm = 2128;
  return p;
}

// A spec valid for test_profile().
KernelSpec valid_spec() {
  KernelSpec s = example_spec();
  s.has_lse = false;
  s.mask = MaskKind::none;
  return s;
}

// validate() of `s` must give exactly one sentence containing every needle.
void check_single_sentence(const KernelSpec& s, const std::vector<std::string>& needles) {
  const auto errors = validate(s, test_profile());
  INFO("spec: ", s.canonical());
  REQUIRE(errors.size() == 1);
  INFO("sentence: ", errors[0]);
  for (const auto& n : needles) CHECK(errors[0].find(n) != std::string::npos);
  CHECK(errors[0].back() == '.');
  CHECK(std::isupper(static_cast<unsigned char>(errors[0][0])) == 0);  // starts with the field name
}

}  // namespace

TEST_CASE("split_head_dim: every multiple of 8 in [16, 256]") {
  for (int d = 16; d <= 256; d += 8) {
    CAPTURE(d);
    const auto chunks = split_head_dim(d);
    REQUIRE(!chunks.empty());
    int sum = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      CHECK(is_power_of_two(chunks[i]));
      CHECK(chunks[i] >= 8);
      if (i > 0) CHECK(chunks[i] < chunks[i - 1]);
      sum += chunks[i];
    }
    CHECK(sum == d);
    // Never padded: a power of two stays one chunk.
    if (is_power_of_two(d)) CHECK(chunks == std::vector<int>{d});
  }
}

TEST_CASE("split_head_dim: exact rows") {
  CHECK(split_head_dim(96) == std::vector<int>{64, 32});
  CHECK(split_head_dim(80) == std::vector<int>{64, 16});
  CHECK(split_head_dim(72) == std::vector<int>{64, 8});
  CHECK(split_head_dim(160) == std::vector<int>{128, 32});
  CHECK(split_head_dim(248) == std::vector<int>{128, 64, 32, 16, 8});
  CHECK(split_head_dim(256) == std::vector<int>{256});
  CHECK(split_head_dim(16) == std::vector<int>{16});
  CHECK(split_head_dim(48, 16) == std::vector<int>{32, 16});
  CHECK(split_head_dim(8) == std::vector<int>{8});
}

TEST_CASE("split_head_dim: errors name head_dim, its value and what is allowed") {
  CHECK_THROWS_WITH_AS(split_head_dim(100), Contains("head_dim (100)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(100), Contains("positive multiple of 8"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(0), Contains("head_dim (0)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(-16), Contains("head_dim (-16)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(72, 16), Contains("positive multiple of 16"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(96, 24), Contains("min_chunk (24)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(split_head_dim(96, 0), Contains("min_chunk (0)"), InvalidArgument);
}

TEST_CASE("KernelSpec derived quantities") {
  KernelSpec s = example_spec();
  CHECK(s.qk_chunks() == std::vector<int>{64, 32});
  CHECK(s.v_chunks() == std::vector<int>{64, 32});
  CHECK(s.threads() == 128);
  // 2 * (128*96 + 2*64*(96+96))
  CHECK(s.smem_bytes() == 2 * (128 * 96 + 2 * 64 * 192));
  s.head_dim = 64;
  s.head_dim_v = 128;  // the Q region is sized for staging O too
  CHECK(s.smem_bytes() == 2 * (128 * 128 + 2 * 64 * (64 + 128)));
  s.head_dim = 256;
  s.head_dim_v = 32;
  s.tile.stages = 3;
  CHECK(s.smem_bytes() == 2 * (128 * 256 + 3 * 64 * (256 + 32)));
}

TEST_CASE("canonical string: exact example") {
  CHECK(example_spec().canonical() == kExampleCanonical);
  CHECK(KernelSpec::parse(kExampleCanonical) == example_spec());
}

TEST_CASE("canonical string: round trip and distinct kernel names over a grid") {
  std::set<std::string> names;
  std::set<std::string> canonicals;
  int count = 0;
  const std::vector<std::pair<int, int>> dims = {{16, 16}, {64, 64}, {96, 96}, {72, 136},
                                                 {128, 64}, {256, 256}, {64, 128}};
  for (int arch : {70, 80, 90})
    for (MatrixUnit unit : {MatrixUnit::m16n8k16, MatrixUnit::m16n8k8, MatrixUnit::m8n8k4})
      for (DType dtype : {DType::f16, DType::bf16})
        for (auto [d, dv] : dims)
          for (auto [bm, bn, w] : {std::tuple{64, 64, 4}, std::tuple{128, 32, 8}, std::tuple{128, 64, 4}})
            for (int st : {1, 2})
              for (MaskKind mask :
                   {MaskKind::none, MaskKind::causal_top_left, MaskKind::causal_bottom_right})
                for (BiasKind bias : {BiasKind::none, BiasKind::input, BiasKind::f32})
                  for (bool lse : {false, true}) {
                    KernelSpec s;
                    s.arch = arch;
                    s.unit = unit;
                    s.dtype = dtype;
                    s.head_dim = d;
                    s.head_dim_v = dv;
                    s.tile.block_m = bm;
                    s.tile.block_n = bn;
                    s.tile.warps = w;
                    s.tile.stages = st;
                    s.mask = mask;
                    s.bias = bias;
                    s.has_lse = lse;
                    const std::string c = s.canonical();
                    const KernelSpec back = KernelSpec::parse(c);
                    if (!(back == s)) FAIL_CHECK("round trip failed for ", c);
                    if (back.canonical() != c) FAIL_CHECK("canonical not stable for ", c);
                    const std::string n = s.kernel_name();
                    if (!is_c_identifier(n)) FAIL_CHECK("not a C identifier: ", n);
                    names.insert(n);
                    canonicals.insert(c);
                    ++count;
                  }
  CHECK(count == 3 * 3 * 2 * 7 * 3 * 2 * 3 * 3 * 2);
  CHECK(names.size() == static_cast<size_t>(count));
  CHECK(canonicals.size() == static_cast<size_t>(count));
}

TEST_CASE("canonical string: out-of-range numbers still round trip") {
  KernelSpec s = example_spec();
  s.arch = -1;
  s.tile.block_m = 0;
  s.head_dim = 2147483647;
  s.head_dim_v = -2147483647 - 1;
  CHECK(KernelSpec::parse(s.canonical()) == s);
  CHECK(is_c_identifier(s.kernel_name()));
  KernelSpec t = s;
  t.arch = 1;
  CHECK(t.kernel_name() != s.kernel_name());
}

TEST_CASE("KernelSpec::parse rejects malformed strings, naming the field and value") {
  const std::string body =
      "sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=1";
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = kExampleCanonical;
    const auto pos = t.find(from);
    REQUIRE(pos != std::string::npos);
    t.replace(pos, from.size(), to);
    return t;
  };

  SUBCASE("tag") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse("flashgen.bwd.v1:" + body), Contains("tag 'flashgen.fwd.v1:'"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(body), Contains("does not start with the tag"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(""), Contains("does not start with the tag"), InvalidArgument);
  }
  SUBCASE("version") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse("flashgen.fwd.v2:" + body), Contains("version 'v2'"),
                         InvalidArgument);
  }
  SUBCASE("missing field") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with(",lse=1", "")), Contains("field 'lse' is missing"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("w=4,", "")), Contains("field 'w' is missing"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse("flashgen.fwd.v1:"), Contains("empty field"), InvalidArgument);
  }
  SUBCASE("duplicate field") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(kExampleCanonical + ",sm=80"),
                         Contains("field 'sm' (value '80') appears more than once"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("dv=96", "d=96")),
                         Contains("field 'd' (value '96') appears more than once"), InvalidArgument);
  }
  SUBCASE("unknown field") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(kExampleCanonical + ",x=1"),
                         Contains("field 'x' (value '1') is unknown"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("bm=128", "block_m=128")),
                         Contains("field 'block_m' (value '128') is unknown"), InvalidArgument);
  }
  SUBCASE("out-of-order field") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("d=96,dv=96", "dv=96,d=96")),
                         Contains("field 'dv' (value '96') is out of order"), InvalidArgument);
  }
  SUBCASE("syntax") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(kExampleCanonical + ","), Contains("empty field"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("w=4", "w4")), Contains("field 'w4' has no '='"),
                         InvalidArgument);
  }
  SUBCASE("non-integer numbers") {
    for (const char* bad : {"12a", "", "+128", "0128", "1.5", "-0", "99999999999", " 128", "0x80"}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(KernelSpec::parse(with("bm=128", std::string("bm=") + bad)),
                           Contains((std::string("field 'bm' has value '") + bad + "'").c_str()), InvalidArgument);
    }
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("sm=90", "sm=sm90")), Contains("field 'sm' has value 'sm90'"),
                         InvalidArgument);
    // A canonical integer beyond int says so (not "not a decimal integer").
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("w=4", "w=99999999999")),
                         Contains("field 'w' has value '99999999999', which is outside the int range [-2147483648, "
                                  "2147483647]"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("bm=128", "bm=0128")),
                         Contains("not a decimal integer in canonical form (no sign but '-', no leading zeros)"),
                         InvalidArgument);
  }
  SUBCASE("unknown names") {
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("unit=m16n8k16", "unit=m16n8k32")),
                         Contains("field 'unit' has value 'm16n8k32'"), InvalidArgument);
    // Only the canonical dtype names are accepted in a canonical string.
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("dtype=f16", "dtype=float16")),
                         Contains("field 'dtype' has value 'float16'; allowed: f16, bf16"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("mask=causalbr", "mask=causal")),
                         Contains("field 'mask' has value 'causal'"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("bias=none", "bias=f16")),
                         Contains("field 'bias' has value 'f16'"), InvalidArgument);
    CHECK_THROWS_WITH_AS(KernelSpec::parse(with("lse=1", "lse=true")),
                         Contains("field 'lse' has value 'true'; allowed: 0, 1"), InvalidArgument);
  }
}

TEST_CASE("kernel names") {
  KernelSpec s = example_spec();
  s.has_lse = false;
  CHECK(s.kernel_name() == "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_causalbr");
  s.has_lse = true;
  CHECK(s.kernel_name() == "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_causalbr_lse");
  s.bias = BiasKind::input;
  CHECK(s.kernel_name() == "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_causalbr_bias16_lse");
  s.bias = BiasKind::f32;
  s.has_lse = false;
  s.mask = MaskKind::causal_top_left;
  s.dtype = DType::bf16;
  s.arch = 80;
  s.head_dim = 64;
  s.head_dim_v = 128;
  s.unit = MatrixUnit::m16n8k8;
  CHECK(s.kernel_name() == "flashgen_fwd_sm80_bf16_d64v128_m16n8k8_bm128_bn64_w4_s2_causaltl_bias32");
  s.mask = MaskKind::none;
  s.bias = BiasKind::none;
  CHECK(s.kernel_name() == "flashgen_fwd_sm80_bf16_d64v128_m16n8k8_bm128_bn64_w4_s2_none");
}

TEST_CASE("softcap: written only when set, read when absent, named last") {
  KernelSpec s = example_spec();
  CHECK(s.canonical().find("softcap") == std::string::npos);  // today's strings stay as they were
  s.softcap = true;
  const std::string text = s.canonical();
  CHECK(text == std::string(kExampleCanonical) + ",softcap=1");
  CHECK(KernelSpec::parse(text) == s);
  CHECK(KernelSpec::parse(text).softcap);
  CHECK_FALSE(KernelSpec::parse(kExampleCanonical).softcap);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(std::string(kExampleCanonical) + ",softcap=0"),
                       doctest::Contains("field 'softcap' has value '0', which the canonical string never holds"),
                       flashgen::InvalidArgument);
  CHECK(s.kernel_name() == example_spec().kernel_name() + "_softcap");
  CHECK_FALSE(s == example_spec());
  for (KernelFamily f : {KernelFamily::fwd_split, KernelFamily::combine}) {
    KernelSpec o = s;
    o.family = f;
    CHECK((o.canonical().find("softcap=1") != std::string::npos) == (f == KernelFamily::fwd_split));
  }
  auto refused = [](const std::string& t) {
    try {
      (void)KernelSpec::parse(t);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused(std::string(kExampleCanonical) + ",softcap=2").find("field 'softcap' has value '2'") != std::string::npos);
  CHECK(refused(std::string(kExampleCanonical) + ",softcap=1,softcap=1").find("more than once") != std::string::npos);
  // out of order: before lse
  std::string moved = kExampleCanonical;
  moved.insert(moved.find(",lse="), ",softcap=1");
  CHECK(refused(moved).find("'softcap'") != std::string::npos);
  CHECK(refused("flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1,softcap=1").find("unknown") != std::string::npos);
}

TEST_CASE("sinks and alibi: written only when set, after softcap, named after it") {
  auto refused = [](const std::string& t) {
    try {
      (void)KernelSpec::parse(t);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const bool softcap : {false, true})
    for (const bool sinks : {false, true})
      for (const bool alibi : {false, true}) {
        CAPTURE(softcap);
        CAPTURE(sinks);
        CAPTURE(alibi);
        KernelSpec s = example_spec();
        s.softcap = softcap;
        s.sinks = sinks;
        s.alibi = alibi;
        const std::string text = s.canonical();
        CHECK(text == std::string(kExampleCanonical) + (softcap ? ",softcap=1" : "") + (sinks ? ",sinks=1" : "") +
                          (alibi ? ",alibi=1" : ""));
        const KernelSpec back = KernelSpec::parse(text);
        CHECK(back == s);
        CHECK(back.softcap == softcap);
        CHECK(back.sinks == sinks);
        CHECK(back.alibi == alibi);
        CHECK(s.kernel_name() == example_spec().kernel_name() + (softcap ? "_softcap" : "") + (sinks ? "_sinks" : "") +
                                     (alibi ? "_alibi" : ""));
        CHECK((s == example_spec()) == (!softcap && !sinks && !alibi));
      }
  KernelSpec s = example_spec();
  CHECK(s.canonical().find("sinks") == std::string::npos);  // today's strings stay as they were
  CHECK(s.canonical().find("alibi") == std::string::npos);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(std::string(kExampleCanonical) + ",sinks=0,alibi=1"),
                       doctest::Contains("field 'sinks' has value '0'"), flashgen::InvalidArgument);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(std::string(kExampleCanonical) + ",alibi=0"),
                       doctest::Contains("allowed: 'alibi=1', or no 'alibi' field for 0"), flashgen::InvalidArgument);
  s.sinks = true;
  KernelSpec a = example_spec();
  a.alibi = true;
  CHECK_FALSE(s == a);
  CHECK(s.kernel_name() != a.kernel_name());
  // The forward families have the flags, combine does not.
  for (KernelFamily f : {KernelFamily::fwd_split, KernelFamily::combine}) {
    KernelSpec o = s;
    o.family = f;
    o.alibi = true;
    const bool fwd = f == KernelFamily::fwd_split;
    CHECK((o.canonical().find(",sinks=1,alibi=1") != std::string::npos) == fwd);
    if (fwd) CHECK(o.kernel_name().ends_with("_sinks_alibi"));
  }
  CHECK(refused(std::string(kExampleCanonical) + ",sinks=2").find("field 'sinks' has value '2'; allowed: 0, 1") !=
        std::string::npos);
  CHECK(refused(std::string(kExampleCanonical) + ",alibi=yes").find("field 'alibi' has value 'yes'; allowed: 0, 1") !=
        std::string::npos);
  CHECK(refused(std::string(kExampleCanonical) + ",sinks=1,sinks=1").find("more than once") != std::string::npos);
  // Out of order: alibi before sinks, sinks before softcap, sinks before lse.
  CHECK(refused(std::string(kExampleCanonical) + ",alibi=1,sinks=1").find("'sinks'") != std::string::npos);
  CHECK(refused(std::string(kExampleCanonical) + ",sinks=1,softcap=1").find("'softcap'") != std::string::npos);
  std::string moved = kExampleCanonical;
  moved.insert(moved.find(",lse="), ",sinks=1");
  CHECK(refused(moved).find("'sinks'") != std::string::npos);
  CHECK(refused("flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1,alibi=1").find("unknown") !=
        std::string::npos);
}

TEST_CASE("varlen: written only when set, after alibi, named last") {
  auto refused = [](const std::string& t) {
    try {
      (void)KernelSpec::parse(t);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  KernelSpec s = example_spec();
  CHECK(s.canonical().find("varlen") == std::string::npos);  // today's strings stay as they were
  CHECK(s.kernel_name().find("varlen") == std::string::npos);
  CHECK_FALSE(KernelSpec::parse(kExampleCanonical).varlen);
  CHECK_THROWS_WITH_AS(KernelSpec::parse(std::string(kExampleCanonical) + ",varlen=0"),
                       doctest::Contains("field 'varlen' has value '0'"), flashgen::InvalidArgument);
  s.varlen = true;
  CHECK(s.canonical() == std::string(kExampleCanonical) + ",varlen=1");
  CHECK(KernelSpec::parse(s.canonical()) == s);
  CHECK(KernelSpec::parse(s.canonical()).varlen);
  CHECK(s.kernel_name() == example_spec().kernel_name() + "_varlen");
  CHECK_FALSE(s == example_spec());
  // With every other flag: varlen comes last in both.
  s.softcap = s.sinks = s.alibi = true;
  CHECK(s.canonical() == std::string(kExampleCanonical) + ",softcap=1,sinks=1,alibi=1,varlen=1");
  CHECK(s.kernel_name() == example_spec().kernel_name() + "_softcap_sinks_alibi_varlen");
  CHECK(KernelSpec::parse(s.canonical()) == s);
  // Every family has the flag (combine: a packed batch's decode merge, which writes only its sequences' rows).
  for (KernelFamily f : {KernelFamily::fwd_split, KernelFamily::combine}) {
    KernelSpec o = example_spec();
    o.family = f;
    o.varlen = true;
    CHECK(o.canonical().ends_with(",varlen=1"));
    CHECK(o.kernel_name().ends_with("_varlen"));
    CHECK(KernelSpec::parse(o.canonical()) == o);
    o.varlen = false;
    CHECK(o.canonical().find("varlen") == std::string::npos);
  }
  CHECK(refused(std::string(kExampleCanonical) + ",varlen=2").find("field 'varlen' has value '2'; allowed: 0, 1") !=
        std::string::npos);
  CHECK(refused(std::string(kExampleCanonical) + ",varlen=1,varlen=1").find("more than once") != std::string::npos);
  // Out of order: varlen before alibi, varlen before lse.
  CHECK(refused(std::string(kExampleCanonical) + ",varlen=1,alibi=1").find("'alibi'") != std::string::npos);
  std::string moved = kExampleCanonical;
  moved.insert(moved.find(",lse="), ",varlen=1");
  CHECK(refused(moved).find("'varlen'") != std::string::npos);
  CHECK(KernelSpec::parse("flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1,varlen=1").varlen);
  CHECK(refused("flashgen.combine.v1:sm=90,part=f32,out=bf16,dv=128,lse=1,paged=1").find("unknown") !=
        std::string::npos);
}

TEST_CASE("window masks: names, canonical string, kernel name") {
  CHECK(to_string(MaskKind::window_top_left) == "windowtl");
  CHECK(to_string(MaskKind::window_bottom_right) == "windowbr");
  CHECK(parse_mask("windowtl") == MaskKind::window_top_left);
  CHECK(parse_mask("windowbr") == MaskKind::window_bottom_right);
  for (MaskKind m : {MaskKind::window_top_left, MaskKind::window_bottom_right}) {
    KernelSpec s = example_spec();
    s.mask = m;
    s.sinks = true;
    const std::string name(to_string(m));
    const std::string text = s.canonical();
    CHECK(text == "flashgen.fwd.v1:sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=" + name +
                      ",bias=none,lse=1,sinks=1");
    CHECK(KernelSpec::parse(text) == s);
    CHECK(s.kernel_name() == "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_" + name + "_lse_sinks");
  }
  // A mask value outside the enumerators is named, with the window masks among the allowed ones.
  KernelSpec bad = example_spec();
  bad.mask = static_cast<MaskKind>(5);
  Profile p;
  p.archs = {90};
  p.matrix_unit.shape = MatrixUnit::m16n8k16;
  p.matrix_unit.operand_dtypes = {DType::f16};
  p.smem_per_block = 232448;
  bool named = false;
  for (const std::string& e : validate(bad, p))
    named = named || e == "mask (5) is not a mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr.";
  CHECK(named);
}

TEST_CASE("the templates' interface: MASK codes, the SINKS and ALIBI constants, varlen, FwdParams' new fields") {
  CHECK(gen::mask_code(MaskKind::none) == 0);
  CHECK(gen::mask_code(MaskKind::causal_top_left) == 1);
  CHECK(gen::mask_code(MaskKind::causal_bottom_right) == 2);
  CHECK(gen::mask_code(MaskKind::window_top_left) == 3);
  CHECK(gen::mask_code(MaskKind::window_bottom_right) == 4);
  const gen::SpecField* mask = gen::find_spec_field("mask");
  REQUIRE(mask != nullptr);
  CHECK(mask->constant_comment ==
        "        // 0 none, 1 causal top-left, 2 causal bottom-right, 3 window top-left, 4 window bottom-right");
  // sinks, alibi and varlen follow softcap in canonical and name order, flags written only when set.
  const std::vector<const gen::SpecField*>& fields = gen::spec_fields(KernelFamily::fwd);
  std::vector<std::string> keys;
  for (const gen::SpecField* f : fields) keys.emplace_back(f->key);
  REQUIRE(keys.size() >= 5);
  CHECK(std::vector<std::string>(keys.end() - 5, keys.end()) ==
        std::vector<std::string>{"softcap", "sinks", "alibi", "varlen", "paged"});
  const gen::SpecField* softcap = gen::find_spec_field("softcap");
  const struct {
    const char* key;
    const char* constant;
    const char* comment;
    const char* part;
  } flags[] = {{"sinks", "SINKS", "   // one fp32 logit per query head joins the softmax (p.sinks)", "_sinks"},
               {"alibi", "ALIBI", "    // S -= slope * |i + off - j| (p.alibi_slopes)", "_alibi"}};
  int rank = softcap->name_rank;
  for (const auto& x : flags) {
    CAPTURE(x.key);
    const gen::SpecField* f = gen::find_spec_field(x.key);
    REQUIRE(f != nullptr);
    CHECK(f->name == x.key);
    CHECK(f->kind == gen::SpecFieldKind::flag);
    CHECK(f->group == gen::SpecFieldGroup::variant);
    CHECK(f->omit_default);
    CHECK(f->constant == x.constant);
    CHECK(f->constant_type == "bool");
    CHECK(f->constant_comment == x.comment);
    CHECK(f->name_rank > rank);
    rank = f->name_rank;
    KernelSpec s = example_spec();
    CHECK(f->constant_value(s) == "false");
    CHECK(f->name_part(s).empty());
    f->set_flag(s, true);
    CHECK(f->constant_value(s) == "true");
    CHECK(f->name_part(s) == x.part);
    CHECK(f->applies(KernelFamily::fwd));
    CHECK(f->applies(KernelFamily::fwd_split));
    CHECK_FALSE(f->applies(KernelFamily::combine));
  }
  // varlen: a flag of every family (combine: a packed batch's decode merge) with
  // no constant of its own in the field table (VARLEN is emitted with the mask's
  // constants, gen/emit.cpp, and by the combine emitter); paged likewise, of the
  // forward families only.
  const gen::SpecField* varlen = gen::find_spec_field("varlen");
  REQUIRE(varlen != nullptr);
  CHECK(varlen->kind == gen::SpecFieldKind::flag);
  CHECK(varlen->group == gen::SpecFieldGroup::variant);
  CHECK(varlen->omit_default);
  CHECK(varlen->constant.empty());
  CHECK(varlen->name_rank > gen::find_spec_field("alibi")->name_rank);
  CHECK(varlen->applies(KernelFamily::fwd));
  CHECK(varlen->applies(KernelFamily::fwd_split));
  CHECK(varlen->applies(KernelFamily::combine));
  const gen::SpecField* paged = gen::find_spec_field("paged");
  REQUIRE(paged != nullptr);
  CHECK(paged->kind == gen::SpecFieldKind::flag);
  CHECK(paged->omit_default);
  CHECK(paged->constant.empty());
  CHECK(paged->name_rank > varlen->name_rank);
  CHECK(paged->applies(KernelFamily::fwd));
  CHECK(paged->applies(KernelFamily::fwd_split));
  CHECK_FALSE(paged->applies(KernelFamily::combine));
  {
    KernelSpec s = example_spec();
    CHECK(varlen->name_part(s).empty());
    varlen->set_flag(s, true);
    CHECK(s.varlen);
    CHECK(varlen->name_part(s) == "_varlen");
  }
  CHECK(gen::spec_field_list(KernelFamily::fwd).ends_with("lse[,softcap][,sinks][,alibi][,varlen][,paged]"));
  // FwdParams: the launch arguments after softcap, in this order, 8 bytes each.
  using P = detail::FwdParams;
  CHECK(offsetof(P, sinks) == offsetof(P, softcap) + 8);
  CHECK(offsetof(P, alibi_slopes) == offsetof(P, softcap) + 16);
  CHECK(offsetof(P, alibi_stride_batch) == offsetof(P, softcap) + 24);
  CHECK(offsetof(P, window_left) == offsetof(P, softcap) + 32);
  CHECK(offsetof(P, window_right) == offsetof(P, softcap) + 40);
  CHECK(offsetof(P, cu_seqlens_q) == offsetof(P, softcap) + 48);
  CHECK(offsetof(P, cu_seqlens_k) == offsetof(P, softcap) + 56);
  CHECK(offsetof(P, seqused_k) == offsetof(P, softcap) + 64);
  CHECK(offsetof(P, total_q) == offsetof(P, softcap) + 72);
  CHECK(offsetof(P, page_table) == offsetof(P, softcap) + 80);
  CHECK(offsetof(P, page_table_stride) == offsetof(P, softcap) + 88);
  CHECK(offsetof(P, page_shift) == offsetof(P, softcap) + 96);
  CHECK(offsetof(P, lpt_groups) == offsetof(P, softcap) + 104);
  CHECK(offsetof(P, lpt_big) == offsetof(P, softcap) + 112);
  CHECK(offsetof(P, lpt_pairs) == offsetof(P, softcap) + 120);
  CHECK(offsetof(P, lpt_first0) == offsetof(P, softcap) + 128);
  CHECK(offsetof(P, lpt_div_group1) == offsetof(P, softcap) + 136);
  CHECK(offsetof(P, lpt_div_group0) == offsetof(P, softcap) + 144);
  CHECK(offsetof(P, lpt_div_pairs1) == offsetof(P, softcap) + 152);
  CHECK(offsetof(P, lpt_div_pairs0) == offsetof(P, softcap) + 160);
  CHECK(sizeof(P) == offsetof(P, lpt_div_pairs0) + 8);
  const std::string source = detail::fwd_params_source();
  CHECK(source.find("  double softcap;\n  const float* sinks;\n  const float* alibi_slopes;\n  long long "
                    "alibi_stride_batch;\n  long long window_left;\n  long long window_right;\n  const int* "
                    "cu_seqlens_q;\n  const int* cu_seqlens_k;\n  const int* seqused_k;\n  long long total_q;\n  const int* "
                    "page_table;\n  long long page_table_stride;\n  long long page_shift;\n  long long lpt_groups;\n  long long "
                    "lpt_big;\n  long long lpt_pairs;\n  long long lpt_first0;\n  long long lpt_div_group1;\n  long long "
                    "lpt_div_group0;\n  long long lpt_div_pairs1;\n  long long lpt_div_pairs0;\n};") !=
        std::string::npos);
}

TEST_CASE("kernel families: tag, kernel name, round trip; fwd_split's pack") {
  const std::string body =
      "sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,mask=causalbr,bias=none,lse=1";
  const std::string split_body =
      "sm=90,unit=m16n8k16,dtype=f16,d=96,dv=96,bm=128,bn=64,w=4,s=2,pack=1,mask=causalbr,bias=none,lse=1";
  // Today's tag is the fwd family's and reads back unchanged.
  CHECK(KernelSpec::parse(kExampleCanonical).family == KernelFamily::fwd);
  CHECK(example_spec().kernel_name() == "flashgen_fwd_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_causalbr_lse");
  {
    KernelSpec s = example_spec();
    s.family = KernelFamily::fwd_split;
    CHECK(s.canonical() == "flashgen.fwd_split.v1:" + split_body);
    CHECK(KernelSpec::parse(s.canonical()) == s);
    CHECK(s.kernel_name() == "flashgen_fwd_split_sm90_f16_d96v96_m16n8k16_bm128_bn64_w4_s2_pack1_causalbr_lse");
    CHECK(validate(s, test_profile()).empty());
    // pack: a power of two up to 16 that divides block_m; the fwd family has no pack.
    s.pack = 8;
    CHECK(KernelSpec::parse(s.canonical()).pack == 8);
    CHECK(validate(s, test_profile()).empty());
    KernelSpec fwd = s;
    fwd.family = KernelFamily::fwd;
    CHECK(fwd.canonical() == "flashgen.fwd.v1:" + body);
    for (int bad : {0, 3, 32, -2}) {
      s.pack = bad;
      const auto errors = validate(s, test_profile());
      REQUIRE(errors.size() == 1);
      CHECK(errors[0].find("pack (" + std::to_string(bad) + ") must be a power of two in [1, 16] that divides block_m (128)") !=
            std::string::npos);
    }
    s.pack = 4;
    s.unit = MatrixUnit::wgmma;
    bool named = false;
    for (const auto& e : validate(s, profile_for_arch(90)))
      named = named || e.find("unit (wgmma) has no split-KV forward") != std::string::npos;
    CHECK(named);
  }
  {
    // combine has its own fields (test_merge.cpp tests them further).
    KernelSpec s = example_spec();
    s.family = KernelFamily::combine;
    CHECK(s.canonical() == "flashgen.combine.v1:sm=90,part=f32,out=f16,dv=96,lse=1");
    CHECK(KernelSpec::parse(s.canonical()) == s);
    CHECK(s.kernel_name() == "flashgen_combine_sm90_pf32_of16_dv96_lse");
    CHECK(validate(s, test_profile()).empty());
  }
  CHECK_THROWS_WITH_AS(KernelSpec::parse("flashgen.combine.v2:" + body),
                       Contains("version 'v2' is not supported; allowed: the tag 'flashgen.combine.v1:'"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(KernelSpec::parse("flashgen.bwd.v1:" + body),
                       Contains("'flashgen.fwd.v1:', 'flashgen.fwd_split.v1:' or 'flashgen.combine.v1:'"),
                       InvalidArgument);
  CHECK(to_string(KernelFamily::fwd_split) == "fwd_split");
  CHECK(parse_kernel_family("combine") == KernelFamily::combine);
  CHECK_THROWS_WITH_AS(parse_kernel_family("bwd"), Contains("family: 'bwd' is not a known kernel family"),
                       InvalidArgument);
}

TEST_CASE("enum names") {
  CHECK(to_string(DType::f16) == "f16");
  CHECK(to_string(DType::bf16) == "bf16");
  CHECK(to_string(MaskKind::causal_top_left) == "causaltl");
  CHECK(to_string(BiasKind::f32) == "f32");
  CHECK(to_string(MatrixUnit::m8n8k4) == "m8n8k4");
  CHECK(parse_dtype("float16") == DType::f16);
  CHECK(parse_dtype("fp16") == DType::f16);
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(parse_mask("causalbr") == MaskKind::causal_bottom_right);
  CHECK(parse_bias("input") == BiasKind::input);
  CHECK(parse_matrix_unit("m16n8k8") == MatrixUnit::m16n8k8);
  CHECK_THROWS_WITH_AS(parse_dtype("f32", "--dtype"),
                       "--dtype: 'f32' is not a known dtype; allowed: f16, bf16, float16, fp16, bfloat16",
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(parse_mask("causal"),
                       "mask: 'causal' is not a known mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr",
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(parse_bias("fp32"), "bias: 'fp32' is not a known bias kind; allowed: none, input, f32",
                       InvalidArgument);
  CHECK(parse_matrix_unit("wgmma") == MatrixUnit::wgmma);
  CHECK_THROWS_WITH_AS(parse_matrix_unit("wmma"),
                       "matrix_unit: 'wmma' is not a known matrix unit; allowed: m16n8k16, m16n8k8, m8n8k4, wgmma",
                       InvalidArgument);
}

TEST_CASE("validate: a valid spec gives no sentence") {
  CHECK(validate(valid_spec(), test_profile()).empty());
  CHECK_NOTHROW(require_valid(valid_spec(), test_profile()));
  KernelSpec s = valid_spec();
  s.has_lse = true;
  s.bias = BiasKind::f32;
  s.mask = MaskKind::causal_top_left;
  s.head_dim = 16;
  s.head_dim_v = 256;
  s.tile.warps = 1;
  s.tile.block_m = 16;
  s.tile.block_n = 256;
  s.tile.stages = 1;
  CHECK(validate(s, test_profile()).empty());
  s.tile.block_n = 16;
  s.tile.stages = 4;
  CHECK(validate(s, test_profile()).empty());
}

TEST_CASE("validate: each rule produces its sentence") {
  KernelSpec s;
  SUBCASE("arch") {
    s = valid_spec();
    s.arch = 80;
    check_single_sentence(s, {"arch (sm_80)", "testgen", "allowed: sm_90, sm_91"});
  }
  SUBCASE("unit") {
    s = valid_spec();
    s.unit = MatrixUnit::m16n8k8;
    check_single_sentence(s, {"unit (m16n8k8)", "allowed: m16n8k16"});
  }
  SUBCASE("dtype") {
    s = valid_spec();
    s.dtype = DType::bf16;
    check_single_sentence(s, {"dtype (bf16)", "allowed: f16"});
  }
  SUBCASE("head_dim not a multiple of 8") {
    s = valid_spec();
    s.head_dim = 100;
    check_single_sentence(s, {"head_dim (100)", "multiple of 8 in [16, 256]"});
  }
  SUBCASE("head_dim too small") {
    s = valid_spec();
    s.head_dim = 8;
    check_single_sentence(s, {"head_dim (8)", "multiple of 8 in [16, 256]"});
  }
  SUBCASE("head_dim_v too large") {
    s = valid_spec();
    s.head_dim_v = 264;
    check_single_sentence(s, {"head_dim_v (264)", "multiple of 8 in [16, 256]"});
  }
  SUBCASE("warps") {
    s = valid_spec();
    s.tile.warps = 0;
    s.tile.block_m = 64;
    check_single_sentence(s, {"warps (0)", "[1, 16]"});
    s.tile.warps = 17;
    s.tile.block_m = 16 * 17;  // > 256 as well, so two sentences
    CHECK(validate(s, test_profile()).size() == 2);
  }
  SUBCASE("block_m not a multiple of 16 * warps") {
    s = valid_spec();
    s.tile.block_m = 96;  // warps 4 -> multiple of 64
    check_single_sentence(s, {"block_m (96)", "multiple of 16 * warps (64)", "at most 256"});
  }
  SUBCASE("block_m too large") {
    s = valid_spec();
    s.tile.block_m = 320;
    s.tile.warps = 4;
    check_single_sentence(s, {"block_m (320)", "at most 256"});
  }
  SUBCASE("block_n") {
    s = valid_spec();
    s.tile.block_n = 24;
    check_single_sentence(s, {"block_n (24)", "positive multiple of 16 and at most 256"});
    s.tile.block_n = 0;
    check_single_sentence(s, {"block_n (0)"});
    s.tile.block_n = 272;
    s.tile.stages = 1;  // keep shared memory within the limit
    check_single_sentence(s, {"block_n (272)"});
  }
  SUBCASE("stages") {
    s = valid_spec();
    s.tile.stages = 0;
    check_single_sentence(s, {"stages (0)", "[1, 4]"});
    s.tile.stages = 5;
    check_single_sentence(s, {"stages (5)", "[1, 4]"});
  }
  SUBCASE("threads") {
    s = valid_spec();
    s.tile.warps = 40;
    s.tile.block_m = 16;
    const auto errors = validate(s, test_profile());
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].find("warps (40)") != std::string::npos);
    CHECK(errors[1].find("threads (32 * warps = 1280) must be at most 1024") != std::string::npos);
  }
  SUBCASE("shared memory") {
    s = valid_spec();
    s.head_dim = 256;
    s.head_dim_v = 256;
    s.tile.block_m = 256;
    s.tile.warps = 16;
    s.tile.block_n = 128;
    s.tile.stages = 4;
    check_single_sentence(s, {"smem_bytes (" + std::to_string(s.smem_bytes()) + " = ", "(232448)",
                              "smem_per_block"});
  }
  SUBCASE("every broken rule is reported") {
    s = valid_spec();
    s.arch = 75;
    s.unit = MatrixUnit::m8n8k4;
    s.dtype = DType::bf16;
    s.head_dim = 12;
    s.head_dim_v = 300;
    s.tile.warps = 0;
    s.tile.block_m = 8;
    s.tile.block_n = 8;
    s.tile.stages = 9;
    CHECK(validate(s, test_profile()).size() == 9);
  }
}

TEST_CASE("require_valid: Unsupported listing every sentence") {
  KernelSpec s = valid_spec();
  s.tile.stages = 0;
  s.tile.block_n = 24;
  const auto errors = validate(s, test_profile());
  REQUIRE(errors.size() == 2);
  const std::string expected = "kernel spec " + s.canonical() +
                               " is not valid for profile testgen (test/testgen.yml):\n  - " + errors[0] +
                               "\n  - " + errors[1];
  CHECK_THROWS_WITH_AS(require_valid(s, test_profile()), expected.c_str(), Unsupported);
}
