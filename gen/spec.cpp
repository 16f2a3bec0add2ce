// KernelSpec: head-dim split, derived sizes, canonical string, kernel name,
// validation against a profile.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flashgen/spec.hpp"
#include "gen/limits.hpp"

namespace flashgen {
namespace {

constexpr std::string_view kSpecTag = "flashgen.fwd.v1:";
constexpr std::string_view kSpecTagFamily = "flashgen.fwd.";

using gen::kHeadDimMultiple;
using gen::kMaxBlock;
using gen::kMaxHeadDim;
using gen::kMaxStages;
using gen::kMaxThreads;
using gen::kMaxWarps;
using gen::kMinHeadDim;
using gen::kWgmmaMaxBlockNOneGroup;

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

// ---- canonical string parsing ----------------------------------------------

constexpr std::array<std::string_view, 12> kFields = {
    "sm", "unit", "dtype", "d", "dv", "bm", "bn", "w", "s", "mask", "bias", "lse"};

int field_index(std::string_view key) {
  for (size_t i = 0; i < kFields.size(); ++i) {
    if (kFields[i] == key) return static_cast<int>(i);
  }
  return -1;
}

std::string field_list() {
  std::string s;
  for (auto f : kFields) {
    if (!s.empty()) s += ",";
    s += f;
  }
  return s;
}

[[noreturn]] void spec_error(const std::string& text, const std::string& reason) {
  throw InvalidArgument(fmt::format("kernel spec '{}': {}", text, reason));
}

// Strict decimal integer as canonical() prints it: optional '-', no '+', no
// leading zeros, no "-0", within int.
int parse_spec_int(const std::string& text, std::string_view key, std::string_view value) {
  bool ok = !value.empty();
  std::string_view digits = value;
  if (ok && digits.front() == '-') digits.remove_prefix(1);
  ok = ok && !digits.empty() &&
       std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  ok = ok && !(digits.size() > 1 && digits.front() == '0') && value != "-0";
  int result = 0;
  if (ok) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
    if (ec == std::errc::result_out_of_range)
      spec_error(text, fmt::format("field '{}' has value '{}', which is outside the int range [{}, {}]", key, value,
                                   std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    ok = ec == std::errc() && ptr == value.data() + value.size();
  }
  if (!ok) {
    spec_error(text, fmt::format("field '{}' has value '{}', which is not a decimal integer "
                                 "in canonical form (no sign but '-', no leading zeros)",
                                 key, value));
  }
  return result;
}

}  // namespace

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
  if (unit != MatrixUnit::wgmma) return split_head_dim(head_dim);
  std::vector<int> out;
  for (int w : split_head_dim(head_dim, 16)) {
    for (int left = w; left > 0; left -= 64) out.push_back(left > 64 ? 64 : left);
  }
  return out;
}

int64_t KernelSpec::smem_bytes() const {
  // Q tile (reused to stage O, hence max of both head dims) + per stage one K
  // and one V tile; 2-byte elements.
  const int64_t q_elems = sat_mul(block_m, std::max(head_dim, head_dim_v));
  int64_t kv_elems = sat_mul(sat_mul(stages, block_n), sat_add(int64_t{head_dim}, int64_t{head_dim_v}));
  if (unit == MatrixUnit::wgmma) {
    // Each K and V stage rounded up to 512 elements (1024-byte aligned stages).
    auto stage = [&](int d) { return sat_mul(sat_add(sat_mul(block_n, d), 511) / 512, 512); };
    kv_elems = sat_mul(stages, sat_add(stage(head_dim), stage(head_dim_v)));
  }
  // wgmma tiles start on a 1024-byte boundary (their swizzle acts on address
  // bits), which may skip up to 1024 bytes of the dynamic shared memory.
  return sat_add(sat_mul(dtype_bytes(dtype), sat_add(q_elems, kv_elems)), unit == MatrixUnit::wgmma ? 1024 : 0);
}

std::string KernelSpec::canonical() const {
  return fmt::format("{}sm={},unit={},dtype={},d={},dv={},bm={},bn={},w={},s={},mask={},bias={},lse={}",
                     kSpecTag, arch, to_string(unit), to_string(dtype), head_dim, head_dim_v,
                     block_m, block_n, warps, stages, to_string(mask), to_string(bias),
                     has_lse ? 1 : 0);
}

KernelSpec KernelSpec::parse(const std::string& text) {
  std::string_view rest = text;
  if (rest.substr(0, kSpecTag.size()) != kSpecTag) {
    if (rest.substr(0, kSpecTagFamily.size()) == kSpecTagFamily) {
      auto colon = rest.find(':');
      std::string_view version =
          rest.substr(kSpecTagFamily.size(), colon == std::string_view::npos
                                                 ? std::string_view::npos
                                                 : colon - kSpecTagFamily.size());
      spec_error(text, fmt::format("version '{}' is not supported; allowed: the tag '{}'", version,
                                   kSpecTag));
    }
    spec_error(text, fmt::format("does not start with the tag '{}'", kSpecTag));
  }
  rest.remove_prefix(kSpecTag.size());

  // Split into key=value items.
  std::vector<std::pair<std::string_view, std::string_view>> items;
  while (true) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item.empty()) {
      spec_error(text, fmt::format("empty field at position {}; expected fields {}",
                                   items.size() + 1, field_list()));
    }
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      spec_error(text, fmt::format("field '{}' has no '=' (expected key=value)", item));
    }
    items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }

  // Keys must be exactly kFields, in order; diagnose the first deviation.
  for (size_t i = 0; i < items.size(); ++i) {
    const auto key = items[i].first;
    const int idx = field_index(key);
    if (idx < 0) {
      spec_error(text, fmt::format("field '{}' (value '{}') is unknown; allowed fields in order: {}",
                                   key, items[i].second, field_list()));
    }
    if (static_cast<size_t>(idx) == i) continue;
    if (static_cast<size_t>(idx) < i) {
      spec_error(text, fmt::format("field '{}' (value '{}') appears more than once", key,
                                   items[i].second));
    }
    // idx > i: the expected field is either later (out of order) or absent.
    const auto expected = kFields[i];
    bool later = false;
    for (size_t j = i + 1; j < items.size(); ++j) later = later || items[j].first == expected;
    if (later) {
      spec_error(text, fmt::format("field '{}' (value '{}') is out of order; expected '{}' at "
                                   "position {} (order: {})",
                                   key, items[i].second, expected, i + 1, field_list()));
    }
    spec_error(text, fmt::format("field '{}' is missing (found '{}' at its position {}; order: {})",
                                 expected, key, i + 1, field_list()));
  }
  if (items.size() < kFields.size()) {
    spec_error(text, fmt::format("field '{}' is missing (order: {})", kFields[items.size()],
                                 field_list()));
  }

  auto value = [&](size_t i) { return items[i].second; };
  // parse_* say "<what>: '<text>' is not a known <kind>; allowed: ..."; keep
  // the part from "not a known" on.
  auto enum_error = [&](size_t i, const InvalidArgument& e) -> void {
    const std::string m = e.what();
    const auto pos = m.find("not a known");
    spec_error(text, fmt::format("field '{}' has value '{}', which is {}", kFields[i], value(i),
                                 pos == std::string::npos ? m : m.substr(pos)));
  };

  KernelSpec s;
  s.arch = parse_spec_int(text, kFields[0], value(0));
  try {
    s.unit = parse_matrix_unit(value(1), "unit");
  } catch (const InvalidArgument& e) {
    enum_error(1, e);
  }
  if (value(2) == to_string(DType::f16)) {
    s.dtype = DType::f16;
  } else if (value(2) == to_string(DType::bf16)) {
    s.dtype = DType::bf16;
  } else {
    spec_error(text, fmt::format("field 'dtype' has value '{}'; allowed: {}, {}", value(2),
                                 to_string(DType::f16), to_string(DType::bf16)));
  }
  s.head_dim = parse_spec_int(text, kFields[3], value(3));
  s.head_dim_v = parse_spec_int(text, kFields[4], value(4));
  s.block_m = parse_spec_int(text, kFields[5], value(5));
  s.block_n = parse_spec_int(text, kFields[6], value(6));
  s.warps = parse_spec_int(text, kFields[7], value(7));
  s.stages = parse_spec_int(text, kFields[8], value(8));
  try {
    s.mask = parse_mask(value(9), "mask");
  } catch (const InvalidArgument& e) {
    enum_error(9, e);
  }
  try {
    s.bias = parse_bias(value(10), "bias");
  } catch (const InvalidArgument& e) {
    enum_error(10, e);
  }
  if (value(11) == "0" || value(11) == "1") {
    s.has_lse = value(11) == "1";
  } else {
    spec_error(text, fmt::format("field 'lse' has value '{}'; allowed: 0, 1", value(11)));
  }
  return s;
}

std::string KernelSpec::kernel_name() const {
  std::string name = fmt::format("flashgen_fwd_sm{}_{}_d{}v{}_{}_bm{}_bn{}_w{}_s{}_{}", name_int(arch),
                                 to_string(dtype), name_int(head_dim), name_int(head_dim_v),
                                 to_string(unit), name_int(block_m), name_int(block_n),
                                 name_int(warps), name_int(stages), to_string(mask));
  switch (bias) {
    case BiasKind::none: break;
    case BiasKind::input: name += "_bias16"; break;
    case BiasKind::f32: name += "_bias32"; break;
    default: name += "_biasinvalid"; break;
  }
  if (has_lse) name += "_lse";
  return name;
}

std::vector<std::string> validate(const KernelSpec& spec, const Profile& profile) {
  std::vector<std::string> errors;
  auto add = [&](std::string sentence) { errors.push_back(std::move(sentence)); };

  if (std::find(profile.archs.begin(), profile.archs.end(), spec.arch) == profile.archs.end()) {
    std::vector<std::string> archs;
    for (int a : profile.archs) archs.push_back(fmt::format("sm_{}", a));
    add(fmt::format("arch (sm_{}) is not a compute capability of profile {}; allowed: {}.",
                    spec.arch, profile.name, fmt::join(archs, ", ")));
  }
  const bool wgmma = spec.unit == MatrixUnit::wgmma;
  if (spec.unit != profile.matrix_unit.shape && !(wgmma && !profile.wgmma_flash.empty())) {
    add(fmt::format("unit ({}) is not a matrix unit of profile {}; allowed: {}{}.", to_string(spec.unit),
                    profile.name, to_string(profile.matrix_unit.shape),
                    profile.wgmma_flash.empty() ? "" : ", wgmma"));
  }
  if (wgmma) {
    if (spec.arch != 90) {
      add(fmt::format("arch (sm_{}) must be sm_90 for the wgmma unit (its kernels are compiled for sm_90a, "
                      "which only sm_90 runs).",
                      spec.arch));
    }
    for (auto [field, value] : {std::pair<const char*, int>{"head_dim", spec.head_dim},
                                std::pair<const char*, int>{"head_dim_v", spec.head_dim_v}}) {
      if (value % 16 != 0) {
        add(fmt::format("{} ({}) must be a multiple of 16 for the wgmma unit (its k is 16); the "
                        "mma.sync units take multiples of 8.",
                        field, value));
      }
    }
    if (spec.warps >= 1 && spec.warps <= kMaxWarps &&
        ((spec.warps != 4 && spec.warps != 8) || spec.block_m != 16 * spec.warps)) {
      add(fmt::format("block_m ({}) and warps ({}) must give one or two consumer warpgroups (4 warps each) "
                      "64 query rows apiece for the wgmma unit: warps 4 or 8 and block_m = 16 * warps.",
                      spec.block_m, spec.warps));
    }
    if (spec.warps == 4 && spec.block_n > kWgmmaMaxBlockNOneGroup) {
      add(fmt::format("block_n ({}) must be at most {} for the wgmma unit with warps 4: two such blocks "
                      "share an SM, so a thread starts with 128 registers, fewer than a wgmma m64nNk16 "
                      "with N > {} needs; use warps 8 (one block per SM) for wider key tiles.",
                      spec.block_n, kWgmmaMaxBlockNOneGroup, kWgmmaMaxBlockNOneGroup));
    }
    if (spec.stages == 1) {
      add(fmt::format("stages ({}) must be at least 2 for the wgmma unit (the next K tile is read while "
                      "the current V tile is).",
                      spec.stages));
    }
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
  const bool warps_ok = spec.warps >= 1 && spec.warps <= kMaxWarps;
  if (!warps_ok) {
    add(fmt::format("warps ({}) must be in [1, {}].", spec.warps, kMaxWarps));
  }
  {
    // With an invalid warp count, only the part of the rule that does not
    // depend on it is checked (the warps sentence already explains the rest).
    const int multiple = warps_ok ? 16 * spec.warps : 16;
    if (spec.block_m <= 0 || spec.block_m % multiple != 0 || spec.block_m > kMaxBlock) {
      if (warps_ok) {
        add(fmt::format("block_m ({}) must be a positive multiple of 16 * warps ({}) and at most {}.",
                        spec.block_m, multiple, kMaxBlock));
      } else {
        add(fmt::format("block_m ({}) must be a positive multiple of 16 * warps and at most {}.",
                        spec.block_m, kMaxBlock));
      }
    }
  }
  if (spec.block_n <= 0 || spec.block_n % 16 != 0 || spec.block_n > kMaxBlock) {
    add(fmt::format("block_n ({}) must be a positive multiple of 16 and at most {}.", spec.block_n,
                    kMaxBlock));
  }
  if (spec.stages < 1 || spec.stages > kMaxStages) {
    add(fmt::format("stages ({}) must be in [1, {}].", spec.stages, kMaxStages));
  }
  const int64_t threads = int64_t{spec.warps} * 32 + (wgmma ? 128 : 0);
  if (threads > kMaxThreads) {
    add(fmt::format("threads ({} = {}) must be at most {}.", wgmma ? "32 * warps + 128 producer threads" : "32 * warps",
                    threads, kMaxThreads));
  }
  if (to_string(spec.mask) == "invalid") {
    add(fmt::format("mask ({}) is not a mask kind; allowed: none, causaltl, causalbr.",
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
        "block_m, block_n or stages.",
        smem, wgmma ? ", each K and V stage rounded up to 1024 bytes, + 1024 for the wgmma tiles' alignment" : "",
        profile.name, profile.smem_per_block));
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
