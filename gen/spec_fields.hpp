// The field table of KernelSpec: the one list of the fields a spec has, in
// canonical order, each with the kernel families that use it (a family's
// canonical string, kernel name and constants have exactly its fields). KernelSpec::canonical(), KernelSpec::parse(),
// KernelSpec::kernel_name(), the constants the emitters write into the
// generated source (spec_constants) and the problem class and tile of tune
// files (runtime/tune.cpp) are all derived from it. The family is not a
// field: the canonical tag ("flashgen.<family>.v1:") and the kernel-name
// prefix ("flashgen_<family>") carry it. Internal to gen/ and runtime/;
// gen/spec.cpp defines it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashgen/spec.hpp"

namespace flashgen::gen {

/// The part of a spec a field belongs to: the target it runs on, the variant
/// of the operation (what a tune file's problem class is keyed by) or the tile.
enum class SpecFieldGroup { target, variant, tile };

/// How a field's value is written: an integer, a name (an enum's to_string),
/// or a flag (0 / 1 in the canonical string, false / true in tune files).
enum class SpecFieldKind { integer, name, flag };

/// The bit of `f` in SpecField::families.
constexpr unsigned family_bit(KernelFamily f) { return 1u << static_cast<unsigned>(f); }

/// One field of KernelSpec.
struct SpecField {
  std::string_view key;   ///< key in the canonical string ("bm")
  std::string_view name;  ///< the field's name in messages and tune files ("block_m"; "lse" for has_lse)
  SpecFieldGroup group;
  SpecFieldKind kind;
  /// The families whose specs have this field (family_bit of each).
  unsigned families = 0;
  bool applies(KernelFamily f) const { return (families & family_bit(f)) != 0; }
  /// Integer fields: the range a tune file may give ([min, max], a multiple of
  /// `multiple`); validate() states the finer rules. 0, 0, 1 for other kinds.
  int min = 0;
  int max = 0;
  int multiple = 1;
  /// Flag fields added after the first release of a family: written
  /// (canonical string, tune files) only when set, and read as false when
  /// absent, so the strings and files of specs without them stay as they were.
  bool omit_default = false;
  /// The value as the canonical string writes it.
  std::string (*format)(const KernelSpec&) = nullptr;
  /// Set the field from its canonical text; "" on success, else the reason
  /// (a sentence fragment naming the field and the value, e.g. "field 'lse'
  /// has value '2'; allowed: 0, 1").
  std::string (*parse)(KernelSpec&, std::string_view value) = nullptr;
  /// Integer fields: read and write the value (null for other kinds).
  int (*get_int)(const KernelSpec&) = nullptr;
  void (*set_int)(KernelSpec&, int) = nullptr;
  /// Name fields: set the field from a name the enum's parse_* accepts
  /// (aliases included); throws InvalidArgument naming `what` (null for other kinds).
  void (*set_name)(KernelSpec&, std::string_view text, std::string_view what) = nullptr;
  /// Name fields: the enum's value as an int (operator== compares it).
  int (*get_code)(const KernelSpec&) = nullptr;
  /// Flag fields: read and write the value (null for other kinds).
  bool (*get_flag)(const KernelSpec&) = nullptr;
  void (*set_flag)(KernelSpec&, bool) = nullptr;
  /// Position of this field's fragment in kernel_name() (ascending), and the
  /// fragment with its separator ("_bm128"; "" when the name omits the field).
  int name_rank = 0;
  std::string (*name_part)(const KernelSpec&) = nullptr;
  /// The constant the forward templates read ("BLOCK_M"; "" when the field
  /// emits none), its C++ type, its value and the text after "= value;"
  /// (leading spaces and a comment, or "").
  std::string_view constant;
  std::string_view constant_type;
  std::string (*constant_value)(const KernelSpec&) = nullptr;
  std::string_view constant_comment;
};

/// Every field of KernelSpec, in canonical order (of every family: callers
/// that serve one family skip the fields that do not apply to it).
std::span<const SpecField> spec_fields();

/// The fields of `family`, in canonical order.
const std::vector<const SpecField*>& spec_fields(KernelFamily family);

/// The field with canonical key `key`; nullptr when there is none.
const SpecField* find_spec_field(std::string_view key);

/// The canonical keys of `family` in order, comma-separated ("sm,unit,...,lse").
std::string spec_field_list(KernelFamily family = KernelFamily::fwd);

/// The MASK / BIAS_KIND constants of the templates: 0 none, 1 causal top-left,
/// 2 causal bottom-right, 3 window top-left, 4 window bottom-right; 0 none,
/// 1 input dtype, 2 float32.
int mask_code(MaskKind m);
int bias_code(BiasKind b);
/// The PARTIAL_DTYPE / OUT_DTYPE constants of the combine template: 0 f32, 1 f16, 2 bf16.
int state_dtype_code(StateDType d);

}  // namespace flashgen::gen
