// Internal to gen/: pieces every forward emitter shares (gen/emit.cpp defines
// them) and the per-unit emitters (gen/emit_<unit>.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "flashgen/spec.hpp"

namespace flashgen::gen {

/// One line per head-dim chunk: `pattern` formatted with {w} (chunk width) and
/// {off} (its offset), each line prefixed by `indent`; no trailing newline.
std::string per_chunk(const std::vector<int>& chunks, const char* indent, const std::string& pattern);

/// A paged KV cache's tile loads (KernelSpec::paged): for each tensor ("k" or
/// "v", whose head base is `<t>_ptr` in the template), `pattern` per chunk with
/// {w}, {off}, {src} (the row-0 pointer), {pg} (extra template arguments) and
/// {pr} (extra call arguments). A tile inside one page is read as one strided
/// view from its first row ({pg}, {pr} empty; {src} = `<t>_page`); otherwise
/// each row through the page table ({pg} = `pg`, {pr} = `pr` with {t} the tensor,
/// {src} = `<t>_ptr`). The tile's first key is KEYS_FROM_KEY0's key0 + n0.
struct PagedLoad {
  std::vector<int> chunks;
  const char* tensor;
  const char* pattern;
  const char* pg;
  const char* pr;
};
std::string paged_loads(const std::vector<PagedLoad>& loads, const char* indent);

/// One step of the Q prologue (FgQChunk of fwd_m16_parts.cuh) for every
/// chunk: declare `q_in<off>`, fetch (global loads of rows [0, rows) from
/// Q row pointer `q`), store (scaled, rounded, swizzled into sQ).
enum class QStep { declare, fetch, store };
std::string q_chunk_lines(const std::vector<int>& chunks, QStep step, const char* indent, const std::string& q = "",
                          const std::string& rows = "");

/// The whole Q prologue of the m16n8 template: every chunk's global loads,
/// then every chunk's shared stores (one memory round trip instead of one per load).
std::string load_q_lines(const std::vector<int>& chunks);

/// The comment block every generated source begins with (spec, name, arch,
/// unit, dtype, head-dim splits, tile, mask/bias/LSE, launch shape).
std::string spec_comment(const KernelSpec& spec);

/// The constants every template starts from, one per field of the spec's
/// family in the field table that has one (gen/spec_fields.hpp; fwd:
/// HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, WARPS, STAGES, MASK, BIAS_KIND,
/// HAS_LSE; combine: PARTIAL_DTYPE, OUT_DTYPE, HEAD_DIM_V, HAS_LSE), one per
/// line, no trailing newline.
std::string spec_constants(const KernelSpec& spec);

/// The whole generated source: spec comment, templates/common.cuh, the
/// FwdParams struct, then `template_name` with `slots` filled (fill_slots).
std::string assemble_forward(const KernelSpec& spec, const std::string& template_name,
                             const std::map<std::string, std::string>& slots);

/// The forward emitter of the m8n8k4 (Volta) unit. Same contract as
/// emit_forward (emit.hpp); throws Unsupported for bf16 (the unit is float16 only).
std::string emit_m8n8k4(const KernelSpec& spec);

/// The forward emitter of the wgmma (sm_90a) unit. Same contract as emit_forward.
std::string emit_wgmma(const KernelSpec& spec);

}  // namespace flashgen::gen
