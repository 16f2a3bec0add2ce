// Names of the vocabulary enums (types.hpp): printing and strict parsing.
#include <array>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "flashgen/types.hpp"

namespace flashgen {
namespace {

template <class E, size_t N>
using NameTable = std::array<std::pair<std::string_view, E>, N>;

// Looks `text` up in `table`; on a miss throws InvalidArgument listing every
// accepted name in table order.
template <class E, size_t N>
E parse_name(const NameTable<E, N>& table, std::string_view text, std::string_view what,
             std::string_view kind) {
  for (const auto& [name, value] : table) {
    if (name == text) return value;
  }
  std::string allowed;
  for (const auto& entry : table) {
    if (!allowed.empty()) allowed += ", ";
    allowed += entry.first;
  }
  throw InvalidArgument(
      fmt::format("{}: '{}' is not a known {}; allowed: {}", what, text, kind, allowed));
}

constexpr NameTable<DType, 5> kDTypeNames{{
    {"f16", DType::f16},
    {"bf16", DType::bf16},
    {"float16", DType::f16},
    {"fp16", DType::f16},
    {"bfloat16", DType::bf16},
}};

constexpr NameTable<MaskKind, 5> kMaskNames{{
    {"none", MaskKind::none},
    {"causaltl", MaskKind::causal_top_left},
    {"causalbr", MaskKind::causal_bottom_right},
    {"windowtl", MaskKind::window_top_left},
    {"windowbr", MaskKind::window_bottom_right},
}};

constexpr NameTable<BiasKind, 3> kBiasNames{{
    {"none", BiasKind::none},
    {"input", BiasKind::input},
    {"f32", BiasKind::f32},
}};

constexpr NameTable<MatrixUnit, 4> kUnitNames{{
    {"m16n8k16", MatrixUnit::m16n8k16},
    {"m16n8k8", MatrixUnit::m16n8k8},
    {"m8n8k4", MatrixUnit::m8n8k4},
    {"wgmma", MatrixUnit::wgmma},
}};

constexpr NameTable<KernelFamily, 3> kFamilyNames{{
    {"fwd", KernelFamily::fwd},
    {"fwd_split", KernelFamily::fwd_split},
    {"combine", KernelFamily::combine},
}};

constexpr NameTable<StateDType, 3> kStateDTypeNames{{
    {"f32", StateDType::f32},
    {"f16", StateDType::f16},
    {"bf16", StateDType::bf16},
}};

// Value outside the enumerators (only reachable through a cast); printed as
// such so that a corrupted value is visible in messages instead of crashing.
constexpr std::string_view kInvalidName = "invalid";

}  // namespace

std::string_view to_string(KernelFamily f) {
  switch (f) {
    case KernelFamily::fwd: return "fwd";
    case KernelFamily::fwd_split: return "fwd_split";
    case KernelFamily::combine: return "combine";
  }
  return kInvalidName;
}

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return kInvalidName;
}

std::string_view to_string(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::causal_top_left: return "causaltl";
    case MaskKind::causal_bottom_right: return "causalbr";
    case MaskKind::window_top_left: return "windowtl";
    case MaskKind::window_bottom_right: return "windowbr";
  }
  return kInvalidName;
}

std::string_view to_string(BiasKind b) {
  switch (b) {
    case BiasKind::none: return "none";
    case BiasKind::input: return "input";
    case BiasKind::f32: return "f32";
  }
  return kInvalidName;
}

std::string_view to_string(MatrixUnit u) {
  switch (u) {
    case MatrixUnit::m16n8k16: return "m16n8k16";
    case MatrixUnit::m16n8k8: return "m16n8k8";
    case MatrixUnit::m8n8k4: return "m8n8k4";
    case MatrixUnit::wgmma: return "wgmma";
  }
  return kInvalidName;
}

std::string_view to_string(StateDType d) {
  switch (d) {
    case StateDType::f32: return "f32";
    case StateDType::f16: return "f16";
    case StateDType::bf16: return "bf16";
  }
  return kInvalidName;
}

StateDType parse_state_dtype(std::string_view text, std::string_view what) {
  return parse_name(kStateDTypeNames, text, what, "state dtype");
}

KernelFamily parse_kernel_family(std::string_view text, std::string_view what) {
  return parse_name(kFamilyNames, text, what, "kernel family");
}

DType parse_dtype(std::string_view text, std::string_view what) {
  return parse_name(kDTypeNames, text, what, "dtype");
}

MaskKind parse_mask(std::string_view text, std::string_view what) {
  return parse_name(kMaskNames, text, what, "mask kind");
}

BiasKind parse_bias(std::string_view text, std::string_view what) {
  return parse_name(kBiasNames, text, what, "bias kind");
}

MatrixUnit parse_matrix_unit(std::string_view text, std::string_view what) {
  return parse_name(kUnitNames, text, what, "matrix unit");
}

std::string Tile::str() const { return fmt::format("bm{} bn{} w{} s{}", block_m, block_n, warps, stages); }

}  // namespace flashgen
