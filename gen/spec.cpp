// KernelSpec: head-dim split, derived sizes, canonical string, kernel name,
// validation against a profile.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flashgen/merge.hpp"
#include "flashgen/spec.hpp"
#include "gen/limits.hpp"
#include "gen/spec_fields.hpp"
#include "gen/unit_traits.hpp"

namespace flashgen {
namespace {

// Canonical tags: "flashgen.<family>.v1:" (today's "flashgen.fwd.v1:" is the fwd family's).
constexpr std::array<KernelFamily, 3> kFamilies = {KernelFamily::fwd, KernelFamily::fwd_split, KernelFamily::combine};
constexpr std::string_view kSpecTagVersion = "v1";

std::string family_tag_prefix(KernelFamily f) { return fmt::format("flashgen.{}.", to_string(f)); }
std::string spec_tag(KernelFamily f) { return fmt::format("{}{}:", family_tag_prefix(f), kSpecTagVersion); }

// "'flashgen.fwd.v1:', 'flashgen.fwd_split.v1:' or 'flashgen.combine.v1:'"
std::string tag_list() {
  std::string s;
  for (size_t i = 0; i < kFamilies.size(); ++i) {
    if (i > 0) s += i + 1 == kFamilies.size() ? " or " : ", ";
    s += fmt::format("'{}'", spec_tag(kFamilies[i]));
  }
  return s;
}

using gen::kHeadDimMultiple;
using gen::kMaxBlock;
using gen::kMaxHeadDim;
using gen::kMaxStages;
using gen::kMaxThreads;
using gen::kMaxWarps;
using gen::kMinHeadDim;

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Saturating int64 arithmetic so that smem_bytes() of a nonsense spec is
// "very large" instead of undefined behaviour.
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return ((a < 0) != (b < 0)) ? std::numeric_limits<int64_t>::min()
                                : std::numeric_limits<int64_t>::max();
  }
  return r;
}
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return a < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
  return r;
}

// An integer in a kernel name: digits, with 'n' in front of negative values so
// the name stays a C identifier and distinct values stay distinct.
std::string name_int(int v) {
  if (v < 0) return fmt::format("n{}", -static_cast<int64_t>(v));
  return std::to_string(v);
}

// ---- the field table ---------------------------------------------------------

[[noreturn]] void spec_error(const std::string& text, const std::string& reason) {
  throw InvalidArgument(fmt::format("kernel spec '{}': {}", text, reason));
}

}  // namespace

namespace gen {
namespace {

// Strict decimal integer as canonical() prints it: optional '-', no '+', no
// leading zeros, no "-0", within int. "" on success, else the tail of the
// message after "field 'K' has value 'V'".
std::string parse_spec_int(std::string_view value, int& result) {
  bool ok = !value.empty();
  std::string_view digits = value;
  if (ok && digits.front() == '-') digits.remove_prefix(1);
  ok = ok && !digits.empty() &&
       std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  ok = ok && !(digits.size() > 1 && digits.front() == '0') && value != "-0";
  result = 0;
  if (ok) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
    if (ec == std::errc::result_out_of_range)
      return fmt::format(", which is outside the int range [{}, {}]", std::numeric_limits<int>::min(),
                         std::numeric_limits<int>::max());
    ok = ec == std::errc() && ptr == value.data() + value.size();
  }
  if (!ok) return ", which is not a decimal integer in canonical form (no sign but '-', no leading zeros)";
  return "";
}

// parse_* say "<what>: '<text>' is not a known <kind>; allowed: ..."; keep
// the part from "not a known" on.
std::string enum_reason(const InvalidArgument& e) {
  const std::string m = e.what();
  const auto pos = m.find("not a known");
  return ", which is " + (pos == std::string::npos ? m : m.substr(pos));
}

// An integer field; Ref is a captureless lambda [](auto& s) -> auto& { return s.<member>; }.
template <class Ref>
SpecField int_field(std::string_view key, std::string_view name, SpecFieldGroup group, int min, int max, int multiple,
                    int name_rank, std::string (*name_part)(const KernelSpec&), std::string_view constant, Ref) {
  SpecField f;
  f.key = key;
  f.name = name;
  f.group = group;
  f.kind = SpecFieldKind::integer;
  f.min = min;
  f.max = max;
  f.multiple = multiple;
  f.format = [](const KernelSpec& s) { return std::to_string(Ref{}(s)); };
  f.parse = [](KernelSpec& s, std::string_view v) {
    int x = 0;
    std::string why = parse_spec_int(v, x);
    if (why.empty()) Ref{}(s) = x;
    return why;
  };
  f.get_int = [](const KernelSpec& s) -> int { return Ref{}(s); };
  f.set_int = [](KernelSpec& s, int v) { Ref{}(s) = v; };
  f.name_rank = name_rank;
  f.name_part = name_part;
  f.constant = constant;
  if (!constant.empty()) {
    f.constant_type = "int";
    f.constant_value = [](const KernelSpec& s) { return std::to_string(Ref{}(s)); };
  }
  return f;
}

// A name field (an enum with to_string and parse_*).
template <class Ref, class Parse>
SpecField name_field(std::string_view key, std::string_view name, SpecFieldGroup group, int name_rank,
                     std::string (*name_part)(const KernelSpec&), Ref, Parse) {
  SpecField f;
  f.key = key;
  f.name = name;
  f.group = group;
  f.kind = SpecFieldKind::name;
  f.format = [](const KernelSpec& s) { return std::string(to_string(Ref{}(s))); };
  f.parse = [](KernelSpec& s, std::string_view v) -> std::string {
    try {
      Ref{}(s) = Parse{}(v, "");
    } catch (const InvalidArgument& e) {
      return enum_reason(e);
    }
    return "";
  };
  f.set_name = [](KernelSpec& s, std::string_view text, std::string_view what) { Ref{}(s) = Parse{}(text, what); };
  f.get_code = [](const KernelSpec& s) { return static_cast<int>(Ref{}(s)); };
  f.name_rank = name_rank;
  f.name_part = name_part;
  return f;
}

// A flag field (a bool member): canonical 0 / 1, kernel-name part `suffix`
// when set, constant `constant` (a bool) with `comment` after it.
template <class Ref>
SpecField flag_field(std::string_view key, SpecFieldGroup group, int name_rank, std::string (*name_part)(const KernelSpec&),
                     std::string_view constant, std::string_view comment, Ref) {
  SpecField f;
  f.key = key;
  f.name = key;
  f.group = group;
  f.kind = SpecFieldKind::flag;
  f.format = [](const KernelSpec& s) { return std::string(Ref{}(s) ? "1" : "0"); };
  f.parse = [](KernelSpec& s, std::string_view v) -> std::string {
    if (v != "0" && v != "1") return "; allowed: 0, 1";
    Ref{}(s) = v == "1";
    return "";
  };
  f.get_flag = [](const KernelSpec& s) -> bool { return Ref{}(s); };
  f.set_flag = [](KernelSpec& s, bool v) { Ref{}(s) = v; };
  f.name_rank = name_rank;
  f.name_part = name_part;
  f.constant = constant;
  f.constant_type = "bool";
  f.constant_value = [](const KernelSpec& s) { return std::string(Ref{}(s) ? "true" : "false"); };
  f.constant_comment = comment;
  return f;
}

std::vector<SpecField> make_spec_fields() {
  using G = SpecFieldGroup;
  std::vector<SpecField> t;
  t.push_back(int_field(
      "sm", "arch", G::target, gen::kMinArch, gen::kMaxArch, 1, 0,
      [](const KernelSpec& s) { return "_sm" + name_int(s.arch); }, "", [](auto& s) -> auto& { return s.arch; }));
  t.push_back(name_field(
      "unit", "unit", G::target, 4, [](const KernelSpec& s) { return "_" + std::string(to_string(s.unit)); },
      [](auto& s) -> auto& { return s.unit; },
      [](std::string_view v, std::string_view what) { return parse_matrix_unit(v, what.empty() ? "unit" : what); }));
  {
    // The canonical string takes exactly the names to_string prints (parse_dtype
    // also accepts "float16", ..., which tune files may use).
    SpecField f = name_field(
        "dtype", "dtype", G::variant, 1, [](const KernelSpec& s) { return "_" + std::string(to_string(s.dtype)); },
        [](auto& s) -> auto& { return s.dtype; },
        [](std::string_view v, std::string_view what) { return parse_dtype(v, what.empty() ? "dtype" : what); });
    f.parse = [](KernelSpec& s, std::string_view v) -> std::string {
      for (DType d : {DType::f16, DType::bf16}) {
        if (v == to_string(d)) {
          s.dtype = d;
          return "";
        }
      }
      return fmt::format("; allowed: {}, {}", to_string(DType::f16), to_string(DType::bf16));
    };
    t.push_back(f);
  }
  t.push_back(int_field(
      "d", "head_dim", G::variant, kMinHeadDim, kMaxHeadDim, kHeadDimMultiple, 2,
      [](const KernelSpec& s) { return "_d" + name_int(s.head_dim); }, "HEAD_DIM",
      [](auto& s) -> auto& { return s.head_dim; }));
  // combine: the element types of the partial O_s and of the merged O.
  for (const bool partial : {true, false}) {
    SpecField f = partial ? name_field(
                                "part", "partial_dtype", G::variant, 2,
                                [](const KernelSpec& s) { return "_p" + std::string(to_string(s.partial_dtype)); },
                                [](auto& s) -> auto& { return s.partial_dtype; },
                                [](std::string_view v, std::string_view what) {
                                  return parse_state_dtype(v, what.empty() ? "partial_dtype" : what);
                                })
                          : name_field(
                                "out", "out_dtype", G::variant, 2,
                                [](const KernelSpec& s) { return "_o" + std::string(to_string(s.out_dtype)); },
                                [](auto& s) -> auto& { return s.out_dtype; },
                                [](std::string_view v, std::string_view what) {
                                  return parse_state_dtype(v, what.empty() ? "out_dtype" : what);
                                });
    f.constant = partial ? "PARTIAL_DTYPE" : "OUT_DTYPE";
    f.constant_type = "int";
    if (partial)
      f.constant_value = [](const KernelSpec& s) { return std::to_string(state_dtype_code(s.partial_dtype)); };
    else
      f.constant_value = [](const KernelSpec& s) { return std::to_string(state_dtype_code(s.out_dtype)); };
    f.constant_comment = "  // 0 f32, 1 f16, 2 bf16";
    t.push_back(f);
  }
  t.push_back(int_field(
      "dv", "head_dim_v", G::variant, kMinHeadDim, kMaxHeadDim, kHeadDimMultiple, 3,
      [](const KernelSpec& s) { return (s.family == KernelFamily::combine ? "_dv" : "v") + name_int(s.head_dim_v); },
      "HEAD_DIM_V", [](auto& s) -> auto& { return s.head_dim_v; }));
  t.push_back(int_field(
      "bm", "block_m", G::tile, 16, kMaxBlock, 16, 5, [](const KernelSpec& s) { return "_bm" + name_int(s.tile.block_m); },
      "BLOCK_M", [](auto& s) -> auto& { return s.tile.block_m; }));
  t.push_back(int_field(
      "bn", "block_n", G::tile, 16, kMaxBlock, 16, 6, [](const KernelSpec& s) { return "_bn" + name_int(s.tile.block_n); },
      "BLOCK_N", [](auto& s) -> auto& { return s.tile.block_n; }));
  t.push_back(int_field(
      "w", "warps", G::tile, 1, kMaxWarps, 1, 7, [](const KernelSpec& s) { return "_w" + name_int(s.tile.warps); }, "WARPS",
      [](auto& s) -> auto& { return s.tile.warps; }));
  t.push_back(int_field(
      "s", "stages", G::tile, 1, kMaxStages, 1, 8, [](const KernelSpec& s) { return "_s" + name_int(s.tile.stages); },
      "STAGES", [](auto& s) -> auto& { return s.tile.stages; }));
  t.push_back(int_field(
      "pack", "pack", G::tile, 1, kMaxPack, 1, 8, [](const KernelSpec& s) { return "_pack" + name_int(s.pack); }, "",
      [](auto& s) -> auto& { return s.pack; }));
  {
    SpecField f = name_field(
        "mask", "mask", G::variant, 9, [](const KernelSpec& s) { return "_" + std::string(to_string(s.mask)); },
        [](auto& s) -> auto& { return s.mask; },
        [](std::string_view v, std::string_view what) { return parse_mask(v, what.empty() ? "mask" : what); });
    f.constant = "MASK";
    f.constant_type = "int";
    f.constant_value = [](const KernelSpec& s) { return std::to_string(mask_code(s.mask)); };
    f.constant_comment =
        "        // 0 none, 1 causal top-left, 2 causal bottom-right, 3 window top-left, 4 window bottom-right";
    t.push_back(f);
  }
  {
    SpecField f = name_field(
        "bias", "bias", G::variant, 10,
        [](const KernelSpec& s) -> std::string {
          switch (s.bias) {
            case BiasKind::none: return "";
            case BiasKind::input: return "_bias16";
            case BiasKind::f32: return "_bias32";
          }
          return "_biasinvalid";
        },
        [](auto& s) -> auto& { return s.bias; },
        [](std::string_view v, std::string_view what) { return parse_bias(v, what.empty() ? "bias" : what); });
    f.constant = "BIAS_KIND";
    f.constant_type = "int";
    f.constant_value = [](const KernelSpec& s) { return std::to_string(bias_code(s.bias)); };
    f.constant_comment = "   // 0 none, 1 input dtype, 2 float32";
    t.push_back(f);
  }
  t.push_back(flag_field(
      "lse", G::variant, 11, [](const KernelSpec& s) { return std::string(s.has_lse ? "_lse" : ""); }, "HAS_LSE", "",
      [](auto& s) -> auto& { return s.has_lse; }));
  {
    SpecField f = flag_field(
        "softcap", G::variant, 12, [](const KernelSpec& s) { return std::string(s.softcap ? "_softcap" : ""); },
        "SOFTCAP", "   // S = cap * tanh(S / cap), cap = p.softcap", [](auto& s) -> auto& { return s.softcap; });
    f.omit_default = true;
    t.push_back(f);
  }
  {
    SpecField f = flag_field(
        "sinks", G::variant, 13, [](const KernelSpec& s) { return std::string(s.sinks ? "_sinks" : ""); }, "SINKS",
        "   // one fp32 logit per query head joins the softmax (p.sinks)", [](auto& s) -> auto& { return s.sinks; });
    f.omit_default = true;
    t.push_back(f);
  }
  {
    SpecField f = flag_field(
        "alibi", G::variant, 14, [](const KernelSpec& s) { return std::string(s.alibi ? "_alibi" : ""); }, "ALIBI",
        "    // S -= slope * |i + off - j| (p.alibi_slopes)", [](auto& s) -> auto& { return s.alibi; });
    f.omit_default = true;
    t.push_back(f);
  }
  {
    SpecField f = flag_field(
        "varlen", G::variant, 15, [](const KernelSpec& s) { return std::string(s.varlen ? "_varlen" : ""); },
        "", "", [](auto& s) -> auto& { return s.varlen; });  // (VARLEN: emitted before fwd_block.cuh, gen/emit.cpp)
    f.omit_default = true;
    t.push_back(f);
  }
  {
    SpecField f = flag_field(
        "paged", G::variant, 16, [](const KernelSpec& s) { return std::string(s.paged ? "_paged" : ""); }, "", "",
        [](auto& s) -> auto& { return s.paged; });  // (PAGED: emitted before fwd_block.cuh, gen/emit.cpp)
    f.omit_default = true;
    t.push_back(f);
  }
  // The families of each field: the forward families have every field but the
  // combine's element types; combine has arch, its element types, head_dim_v, lse.
  const unsigned fwd = family_bit(KernelFamily::fwd) | family_bit(KernelFamily::fwd_split);
  const unsigned combine = family_bit(KernelFamily::combine);
  for (SpecField& f : t) {
    if (f.key == "part" || f.key == "out") {
      f.families = combine;
    } else if (f.key == "pack") {
      f.families = family_bit(KernelFamily::fwd_split);
    } else if (f.key == "sm" || f.key == "dv" || f.key == "lse" || f.key == "varlen") {
      f.families = fwd | combine;
    } else {
      f.families = fwd;
    }
  }
  return t;
}

size_t family_index(KernelFamily f) {
  for (size_t i = 0; i < kFamilies.size(); ++i)
    if (kFamilies[i] == f) return i;
  throw Error(ErrorCode::internal, fmt::format("kernel family {} is not a KernelFamily", static_cast<int>(f)));
}

// The fields of each family in kernel_name() order.
const std::vector<const SpecField*>& name_order(KernelFamily family) {
  static const auto orders = [] {
    std::array<std::vector<const SpecField*>, kFamilies.size()> o;
    for (size_t i = 0; i < kFamilies.size(); ++i) {
      o[i] = spec_fields(kFamilies[i]);
      std::stable_sort(o[i].begin(), o[i].end(),
                       [](const SpecField* a, const SpecField* b) { return a->name_rank < b->name_rank; });
    }
    return o;
  }();
  return orders[family_index(family)];
}

}  // namespace

std::span<const SpecField> spec_fields() {
  static const std::vector<SpecField> fields = make_spec_fields();
  return fields;
}

const std::vector<const SpecField*>& spec_fields(KernelFamily family) {
  static const auto per_family = [] {
    std::array<std::vector<const SpecField*>, kFamilies.size()> v;
    for (size_t i = 0; i < kFamilies.size(); ++i)
      for (const SpecField& f : spec_fields())
        if (f.applies(kFamilies[i])) v[i].push_back(&f);
    return v;
  }();
  return per_family[family_index(family)];
}

const SpecField* find_spec_field(std::string_view key) {
  for (const SpecField& f : spec_fields())
    if (f.key == key) return &f;
  return nullptr;
}

std::string spec_field_list(KernelFamily family) {
  std::string s;
  for (const SpecField* f : spec_fields(family)) {
    if (f->omit_default) {  // (written only when set)
      s += fmt::format("[,{}]", f->key);
      continue;
    }
    if (!s.empty()) s += ",";
    s += f->key;
  }
  return s;
}

int mask_code(MaskKind m) {
  switch (m) {
    case MaskKind::none: return 0;
    case MaskKind::causal_top_left: return 1;
    case MaskKind::causal_bottom_right: return 2;
    case MaskKind::window_top_left: return 3;
    case MaskKind::window_bottom_right: return 4;
  }
  return 0;
}

int state_dtype_code(StateDType d) {
  switch (d) {
    case StateDType::f32: return 0;
    case StateDType::f16: return 1;
    case StateDType::bf16: return 2;
  }
  return 0;
}

int bias_code(BiasKind b) {
  switch (b) {
    case BiasKind::none: return 0;
    case BiasKind::input: return 1;
    case BiasKind::f32: return 2;
  }
  return 0;
}

}  // namespace gen

std::vector<int> split_head_dim(int head_dim, int min_chunk) {
  if (!is_power_of_two(min_chunk)) {
    throw InvalidArgument(fmt::format(
        "split_head_dim: min_chunk ({}) must be a positive power of two (e.g. 8 or 16)", min_chunk));
  }
  if (head_dim <= 0 || head_dim % min_chunk != 0) {
    throw InvalidArgument(fmt::format(
        "head_dim ({}) cannot be split into power-of-two chunks of at least {}; allowed: a "
        "positive multiple of {} ({}, {}, {}, ...)",
        head_dim, min_chunk, min_chunk, min_chunk, 2 * min_chunk, 3 * min_chunk));
  }
  // Binary decomposition, highest bit first. Every set bit is >= min_chunk
  // because head_dim is a multiple of the power of two min_chunk.
  std::vector<int> chunks;
  for (int bit = 30; bit >= 0; --bit) {
    int p = 1 << bit;
    if (head_dim & p) chunks.push_back(p);
  }
  return chunks;
}

std::vector<int> head_dim_chunks(int head_dim, MatrixUnit unit) {
  const gen::UnitTraits& u = gen::unit_traits(unit);
  std::vector<int> out = split_head_dim(head_dim, u.min_chunk);
  if (u.max_chunk == 0) return out;
  std::vector<int> cut;
  for (int w : out) {
    for (int left = w; left > 0; left -= u.max_chunk) cut.push_back(left > u.max_chunk ? u.max_chunk : left);
  }
  return cut;
}

int KernelSpec::threads() const {
  if (family == KernelFamily::combine) return kCombineThreads;
  const int64_t t = (int64_t{tile.warps} + gen::unit_traits(unit).producer_warps) * 32;
  return t > INT32_MAX ? INT32_MAX : t < INT32_MIN ? INT32_MIN : static_cast<int>(t);
}

int KernelSpec::key_warps() const {
  if (tile.warps <= 0 || tile.block_m <= 0) return 0;
  if (family != KernelFamily::fwd_split || tile.block_m >= 16 * int64_t{tile.warps}) return 1;
  if (!gen::unit_traits(unit).key_split_warps) return 1;  // (no key-split kernel: validate() refuses the tile)
  return static_cast<int>(16 * int64_t{tile.warps} / tile.block_m);
}

int64_t KernelSpec::smem_bytes() const {
  // Q tile (reused to stage O, hence max of both head dims) + per stage one K
  // and one V tile.
  if (family == KernelFamily::combine) return 0;
  const gen::UnitTraits& u = gen::unit_traits(unit);
  const int64_t q_elems = sat_mul(tile.block_m, std::max(head_dim, head_dim_v));
  int64_t kv_elems = sat_mul(sat_mul(tile.stages, tile.block_n), sat_add(int64_t{head_dim}, int64_t{head_dim_v}));
  if (u.smem_align > 0) {
    // Each K and V stage rounded up to the alignment (wgmma: 1024 bytes, 512 elements).
    const int64_t align = u.smem_align / dtype_bytes(dtype);
    auto stage = [&](int d) { return sat_mul(sat_add(sat_mul(tile.block_n, d), align - 1) / align, align); };
    kv_elems = sat_mul(tile.stages, sat_add(stage(head_dim), stage(head_dim_v)));
  }
  // Aligned tiles (wgmma: their swizzle acts on address bits) may skip up to
  // smem_align bytes at the start of the dynamic shared memory.
  const int64_t tiles = sat_add(sat_mul(dtype_bytes(dtype), sat_add(q_elems, kv_elems)), u.smem_align);
  // Key-split warps merge their states through shared memory after the key
  // loop (templates/fwd_m16n8.cu, MERGE_BYTES): each warp's LSE and O rows,
  // rows padded by 8 floats.
  const int kw = key_warps();
  if (kw <= 1) return tiles;
  return std::max(tiles, sat_mul(sat_mul(int64_t{4} * kw, tile.block_m), sat_add(int64_t{head_dim_v}, int64_t{9})));
}

std::string KernelSpec::canonical() const {
  std::string out = spec_tag(family);
  bool first = true;
  for (const gen::SpecField* f : gen::spec_fields(family)) {
    if (f->omit_default && !f->get_flag(*this)) continue;  // (a later field at its default)
    if (!first) out += ',';
    first = false;
    out += f->key;
    out += '=';
    out += f->format(*this);
  }
  return out;
}

bool KernelSpec::operator==(const KernelSpec& o) const {
  if (family != o.family) return false;
  for (const gen::SpecField* f : gen::spec_fields(family)) {
    switch (f->kind) {
      case gen::SpecFieldKind::integer:
        if (f->get_int(*this) != f->get_int(o)) return false;
        break;
      case gen::SpecFieldKind::name:
        if (f->get_code(*this) != f->get_code(o)) return false;
        break;
      case gen::SpecFieldKind::flag:
        if (f->get_flag(*this) != f->get_flag(o)) return false;
        break;
    }
  }
  return true;
}

KernelSpec KernelSpec::parse(const std::string& text) {
  std::string_view rest = text;
  KernelSpec s;
  bool tagged = false;
  for (KernelFamily f : kFamilies) {
    const std::string tag = spec_tag(f);
    if (rest.substr(0, tag.size()) == tag) {
      s.family = f;
      rest.remove_prefix(tag.size());
      tagged = true;
      break;
    }
    const std::string prefix = family_tag_prefix(f);
    if (rest.substr(0, prefix.size()) == prefix) {
      auto colon = rest.find(':');
      std::string_view version = rest.substr(
          prefix.size(), colon == std::string_view::npos ? std::string_view::npos : colon - prefix.size());
      spec_error(text, fmt::format("version '{}' is not supported; allowed: the tag '{}'", version, tag));
    }
  }
  if (!tagged) spec_error(text, fmt::format("does not start with the tag {}", tag_list()));

  // The family's fields, less those written only when set (omit_default)
  // that the string does not have (filled in once the items are known).
  std::vector<const gen::SpecField*> fields;
  const std::string order = gen::spec_field_list(s.family);
  auto field_index = [&](std::string_view key) {
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i]->key == key) return static_cast<int>(i);
    return -1;
  };

  // Split into key=value items.
  std::vector<std::pair<std::string_view, std::string_view>> items;
  while (true) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item.empty()) {
      spec_error(text, fmt::format("empty field at position {}; expected fields {}",
                                   items.size() + 1, order));
    }
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      spec_error(text, fmt::format("field '{}' has no '=' (expected key=value)", item));
    }
    items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  for (const gen::SpecField* f : gen::spec_fields(s.family)) {
    bool present = !f->omit_default;
    for (const auto& item : items) present = present || item.first == f->key;
    if (present) fields.push_back(f);
  }

  // Keys must be exactly the table's, in order; diagnose the first deviation.
  for (size_t i = 0; i < items.size(); ++i) {
    const auto key = items[i].first;
    const int idx = field_index(key);
    if (idx < 0) {
      spec_error(text, fmt::format("field '{}' (value '{}') is unknown; allowed fields in order: {}",
                                   key, items[i].second, order));
    }
    if (static_cast<size_t>(idx) == i) continue;
    if (static_cast<size_t>(idx) < i) {
      spec_error(text, fmt::format("field '{}' (value '{}') appears more than once", key,
                                   items[i].second));
    }
    // idx > i: the expected field is either later (out of order) or absent.
    const auto expected = fields[i]->key;
    bool later = false;
    for (size_t j = i + 1; j < items.size(); ++j) later = later || items[j].first == expected;
    if (later) {
      spec_error(text, fmt::format("field '{}' (value '{}') is out of order; expected '{}' at "
                                   "position {} (order: {})",
                                   key, items[i].second, expected, i + 1, order));
    }
    spec_error(text, fmt::format("field '{}' is missing (found '{}' at its position {}; order: {})",
                                 expected, key, i + 1, order));
  }
  if (items.size() < fields.size()) {
    spec_error(text, fmt::format("field '{}' is missing (order: {})", fields[items.size()]->key, order));
  }

  for (size_t i = 0; i < fields.size(); ++i) {
    // A flag written only when set appears as '=1' or not at all: ',softcap=0'
    // would be a second string for the spec without it.
    if (fields[i]->omit_default && items[i].second == "0") {
      spec_error(text, fmt::format("field '{}' has value '0', which the canonical string never holds; allowed: "
                                   "'{}=1', or no '{}' field for 0",
                                   fields[i]->key, fields[i]->key, fields[i]->key));
    }
    const std::string why = fields[i]->parse(s, items[i].second);
    if (!why.empty()) spec_error(text, fmt::format("field '{}' has value '{}'{}", fields[i]->key, items[i].second, why));
  }
  return s;
}

std::string KernelSpec::kernel_name() const {
  std::string name = fmt::format("flashgen_{}", to_string(family));
  for (const gen::SpecField* f : gen::name_order(family)) name += f->name_part(*this);
  return name;
}

std::vector<std::string> validate(const KernelSpec& spec, const Profile& profile) {
  std::vector<std::string> errors;
  auto add = [&](std::string sentence) { errors.push_back(std::move(sentence)); };

  if (spec.family != KernelFamily::fwd && spec.family != KernelFamily::fwd_split &&
      spec.family != KernelFamily::combine) {
    add(fmt::format("family ({}) is not a kernel family; allowed: fwd, fwd_split, combine.",
                    static_cast<int>(spec.family)));
  }

  if (std::find(profile.archs.begin(), profile.archs.end(), spec.arch) == profile.archs.end()) {
    std::vector<std::string> archs;
    for (int a : profile.archs) archs.push_back(fmt::format("sm_{}", a));
    add(fmt::format("arch (sm_{}) is not a compute capability of profile {}; allowed: {}.",
                    spec.arch, profile.name, fmt::join(archs, ", ")));
  }
  if (spec.family == KernelFamily::combine) {
    // No matrix unit, no tile: plain fp32 arithmetic on 16-byte vectors, for every arch.
    for (auto [field, value] : {std::pair<const char*, StateDType>{"partial_dtype", spec.partial_dtype},
                                std::pair<const char*, StateDType>{"out_dtype", spec.out_dtype}}) {
      if (to_string(value) == "invalid")
        add(fmt::format("{} ({}) is not a state dtype; allowed: f32, f16, bf16.", field, static_cast<int>(value)));
    }
    if (spec.head_dim_v < kMergeHeadDimMultiple || spec.head_dim_v > kMaxMergeHeadDim ||
        spec.head_dim_v % kMergeHeadDimMultiple != 0) {
      add(fmt::format("head_dim_v ({}) must be a multiple of {} in [{}, {}] for the combine family.", spec.head_dim_v,
                      kMergeHeadDimMultiple, kMergeHeadDimMultiple, kMaxMergeHeadDim));
    }
    return errors;
  }
  if (to_string(spec.unit) == "invalid") {
    // Nothing else about the unit can be checked (nor the sizes it derives).
    add(fmt::format("unit ({}) is not a matrix unit; allowed: m16n8k16, m16n8k8, m8n8k4, wgmma.",
                    static_cast<int>(spec.unit)));
    return errors;
  }
  const gen::UnitTraits& u = gen::unit_traits(spec.unit);
  const std::string_view unit_name = to_string(spec.unit);
  if (spec.family == KernelFamily::fwd_split) {
    if (u.warpgroup) {
      add(fmt::format("unit ({}) has no split-KV forward; allowed for the fwd_split family: m16n8k16, m16n8k8, "
                      "m8n8k4 (decode is memory-bound: the mma.sync kernel serves sm_90 too).",
                      unit_name));
    }
    if (spec.pack < 1 || spec.pack > gen::kMaxPack || (spec.pack & (spec.pack - 1)) != 0 ||
        (spec.tile.block_m > 0 && spec.tile.block_m % spec.pack != 0)) {
      add(fmt::format("pack ({}) must be a power of two in [1, {}] that divides block_m ({}).", spec.pack, gen::kMaxPack,
                      spec.tile.block_m));
    }
  }
  if (spec.unit != profile.matrix_unit.shape && !(u.warpgroup && !profile.wgmma_flash.empty())) {
    add(fmt::format("unit ({}) is not a matrix unit of profile {}; allowed: {}{}.", unit_name,
                    profile.name, to_string(profile.matrix_unit.shape),
                    profile.wgmma_flash.empty() ? "" : ", wgmma"));
  }
  if (u.only_arch != 0 && spec.arch != u.only_arch) {
    add(fmt::format("arch (sm_{}) must be sm_{} for the {} unit (its kernels are compiled for sm_{}{}, "
                    "which only sm_{} runs).",
                    spec.arch, u.only_arch, unit_name, u.only_arch, u.arch_suffix, u.only_arch));
  }
  if (u.head_dim_multiple != kHeadDimMultiple) {
    for (auto [field, value] : {std::pair<const char*, int>{"head_dim", spec.head_dim},
                                std::pair<const char*, int>{"head_dim_v", spec.head_dim_v}}) {
      if (value % u.head_dim_multiple != 0) {
        add(fmt::format("{} ({}) must be a multiple of {} for the {} unit (its k is {}); the "
                        "mma.sync units take multiples of {}.",
                        field, value, u.head_dim_multiple, unit_name, u.k, kHeadDimMultiple));
      }
    }
  }
  // The unit's own tile rules (shared with the profile loader); a warps or
  // stages value outside the generic bounds below is reported there alone.
  const bool warps_in_range = spec.tile.warps >= 1 && spec.tile.warps <= kMaxWarps;
  for (const gen::TileRuleBreak& r : gen::tile_rule_breaks(u, spec.tile, spec.head_dim, spec.head_dim_v)) {
    if (r.field == "stages" ? spec.tile.stages < 1 : !warps_in_range) continue;
    add(fmt::format("{} ({}) {}.", r.field, r.value, r.allowed));
  }
  if (!profile.supports_dtype(spec.dtype)) {
    std::vector<std::string_view> names;
    for (DType d : profile.matrix_unit.operand_dtypes) names.push_back(to_string(d));
    add(fmt::format("dtype ({}) is not an operand dtype of the {} unit of profile {}; allowed: {}.",
                    to_string(spec.dtype), to_string(profile.matrix_unit.shape), profile.name,
                    fmt::join(names, ", ")));
  }
  for (auto [field, value] : {std::pair<const char*, int>{"head_dim", spec.head_dim},
                              std::pair<const char*, int>{"head_dim_v", spec.head_dim_v}}) {
    if (value < kMinHeadDim || value > kMaxHeadDim || value % kHeadDimMultiple != 0) {
      add(fmt::format("{} ({}) must be a multiple of {} in [{}, {}].", field, value,
                      kHeadDimMultiple, kMinHeadDim, kMaxHeadDim));
    }
  }
  const bool warps_ok = spec.tile.warps >= 1 && spec.tile.warps <= kMaxWarps;
  if (!warps_ok) {
    add(fmt::format("warps ({}) must be in [1, {}].", spec.tile.warps, kMaxWarps));
  }
  const bool key_split = spec.family == KernelFamily::fwd_split && u.key_split_warps && warps_ok &&
                         spec.tile.block_m > 0 && spec.tile.block_m < 16 * spec.tile.warps;
  if (key_split) {
    // Few packed rows: warps that share 16 rows split each key tile.
    const int kw = spec.key_warps();  // (16 * warps / block_m, floored)
    if (spec.tile.block_m % 16 != 0 || kw * spec.tile.block_m != 16 * spec.tile.warps || (kw & (kw - 1)) != 0) {
      add(fmt::format("block_m ({}) below 16 * warps ({}) splits each key tile over 16 * warps / block_m warps "
                      "(fwd_split): block_m must be a multiple of 16 that divides 16 * warps by a power of two.",
                      spec.tile.block_m, 16 * spec.tile.warps));
    } else if (spec.tile.block_n > 0 && spec.tile.block_n % (16 * kw) != 0) {
      add(fmt::format("block_n ({}) must be a multiple of 16 * {} when block_m ({}) and warps ({}) split each key "
                      "tile over {} warps (fwd_split: whole k16 steps of keys per warp).",
                      spec.tile.block_n, kw, spec.tile.block_m, spec.tile.warps, kw));
    }
  } else {
    // With an invalid warp count, only the part of the rule that does not
    // depend on it is checked (the warps sentence already explains the rest).
    const int multiple = warps_ok ? 16 * spec.tile.warps : 16;
    if (spec.tile.block_m <= 0 || spec.tile.block_m % multiple != 0 || spec.tile.block_m > kMaxBlock) {
      if (warps_ok) {
        add(fmt::format("block_m ({}) must be a positive multiple of 16 * warps ({}) and at most {}.",
                        spec.tile.block_m, multiple, kMaxBlock));
      } else {
        add(fmt::format("block_m ({}) must be a positive multiple of 16 * warps and at most {}.",
                        spec.tile.block_m, kMaxBlock));
      }
    }
  }
  if (spec.tile.block_n <= 0 || spec.tile.block_n % 16 != 0 || spec.tile.block_n > kMaxBlock) {
    add(fmt::format("block_n ({}) must be a positive multiple of 16 and at most {}.", spec.tile.block_n,
                    kMaxBlock));
  }
  if (spec.tile.stages < 1 || spec.tile.stages > kMaxStages) {
    add(fmt::format("stages ({}) must be in [1, {}].", spec.tile.stages, kMaxStages));
  }
  const int64_t threads = (int64_t{spec.tile.warps} + u.producer_warps) * 32;
  if (threads > kMaxThreads) {
    add(fmt::format("threads ({} = {}) must be at most {}.",
                    u.producer_warps != 0 ? fmt::format("32 * warps + {} producer threads", 32 * u.producer_warps)
                                          : std::string("32 * warps"),
                    threads, kMaxThreads));
  }
  if (to_string(spec.mask) == "invalid") {
    add(fmt::format("mask ({}) is not a mask kind; allowed: none, causaltl, causalbr, windowtl, windowbr.",
                    static_cast<int>(spec.mask)));
  }
  if (to_string(spec.bias) == "invalid") {
    add(fmt::format("bias ({}) is not a bias kind; allowed: none, input, f32.",
                    static_cast<int>(spec.bias)));
  }
  if (to_string(spec.dtype) == "invalid") {
    add(fmt::format("dtype ({}) is not a dtype; allowed: f16, bf16.", static_cast<int>(spec.dtype)));
  }
  const int64_t smem = spec.smem_bytes();
  if (smem > profile.smem_per_block) {
    add(fmt::format(
        "smem_bytes ({} = 2 * (block_m * max(head_dim, head_dim_v) + stages * block_n * "
        "(head_dim + head_dim_v)){}) must be at most the smem_per_block of profile {} ({}); reduce "
        "block_m, block_n or stages{}.",
        smem,
        u.smem_align != 0 ? fmt::format(", each K and V stage rounded up to {} bytes, + {} for the {} tiles' alignment",
                                        u.smem_align, u.smem_align, unit_name)
        : spec.key_warps() > 1 ? fmt::format(", or the key warps' merge, 4 * {} * block_m * (head_dim_v + 9), if more",
                                             spec.key_warps())
                               : std::string(),
        profile.name, profile.smem_per_block,
        spec.key_warps() > 1 ? "; the merge shrinks with fewer warps per 16 rows (a larger block_m)" : ""));
  }
  return errors;
}

void require_valid(const KernelSpec& spec, const Profile& profile) {
  const auto errors = validate(spec, profile);
  if (errors.empty()) return;
  std::string message = fmt::format("kernel spec {} is not valid for profile {} ({}):",
                                    spec.canonical(), profile.name, profile.source);
  for (const auto& e : errors) {
    message += "\n  - ";
    message += e;
  }
  throw Unsupported(message);
}

}  // namespace flashgen
