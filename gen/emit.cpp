// Emitters: fill the named slots of templates/ with code specialized for one
// KernelSpec. The template files hold the kernel; the generator writes the
// constants and one call per head-dim chunk (96 = 64 + 32 -> two calls, each
// an unrolled fragment loop over its own swizzled sub-tile).
#include "gen/emit.hpp"

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "flashgen/spec.hpp"
#include "flashgen/types.hpp"
#include "flashgen/version.hpp"
#include "gen/params.hpp"
#include "gen/emit_internal.hpp"
#include "gen/spec_fields.hpp"
#include "gen/unit_traits.hpp"

namespace flashgen::detail {
const std::map<std::string, std::string>& embedded_files();
}

namespace flashgen::gen {

const std::string& template_text(const std::string& name) {
  const auto& files = detail::embedded_files();
  auto it = files.find("templates/" + name);
  if (it == files.end()) throw Error(ErrorCode::internal, "template '" + name + "' is not embedded in libflashgen");
  return it->second;
}

std::string fill_slots(const std::string& text, const std::map<std::string, std::string>& slots,
                       const std::string& template_name) {
  std::string out;
  out.reserve(text.size() * 2);
  std::map<std::string, bool> used;
  size_t pos = 0;
  while (true) {
    size_t a = text.find("@@", pos);
    if (a == std::string::npos) break;
    size_t b = text.find("@@", a + 2);
    if (b == std::string::npos) throw Error(ErrorCode::internal, "unterminated slot in template " + template_name);
    const std::string name = text.substr(a + 2, b - a - 2);
    auto it = slots.find(name);
    if (it == slots.end())
      throw Error(ErrorCode::internal, "template " + template_name + " has slot @@" + name + "@@ the emitter does not fill");
    out.append(text, pos, a - pos);
    out += it->second;
    used[name] = true;
    pos = b + 2;
  }
  out.append(text, pos, std::string::npos);
  for (const auto& [name, _] : slots)
    if (!used.count(name))
      throw Error(ErrorCode::internal, "emitter slot " + name + " is not used by template " + template_name);
  return out;
}

// One call per chunk: `pattern` is formatted with {w} (chunk width) and {off}.
std::string per_chunk(const std::vector<int>& chunks, const char* indent, const std::string& pattern) {
  std::string s;
  int off = 0;
  for (int w : chunks) {
    s += indent;
    s += fmt::format(fmt::runtime(pattern), fmt::arg("w", w), fmt::arg("off", off));
    s += '\n';
    off += w;
  }
  if (!s.empty()) s.pop_back();
  return s;
}

std::string paged_loads(const std::vector<PagedLoad>& loads, const char* indent) {
  const std::string in = indent;
  std::string s = in + "const int pkey = (KEYS_FROM_KEY0 ? blk.key0 : 0) + n0;  // the tile's first key (PAGED)\n";
  s += in + "if (fg_one_page(p, pkey, BLOCK_N)) {  // one strided view from the tile's first row\n";
  const std::string inner = in + "  ";
  for (const PagedLoad& l : loads)
    s += fmt::format("{}const u16* const {t}_page = fg_page_row(FgPageRows{{blk.pages, pkey, (int)p.page_shift, "
                     "p.{t}_stride_batch, p.{t}_stride_seq}}, {t}_ptr, 0);\n",
                     inner, fmt::arg("t", l.tensor));
  for (const PagedLoad& l : loads) {
    const std::string src = std::string(l.tensor) + "_page";
    s += per_chunk(l.chunks, inner.c_str(),
                   fmt::format(fmt::runtime(l.pattern), fmt::arg("w", "{w}"), fmt::arg("off", "{off}"), fmt::arg("pg", ""),
                               fmt::arg("src", src), fmt::arg("pr", ""))) +
         "\n";
  }
  s += in + "} else {  // a row per key, each through the page table\n";
  for (const PagedLoad& l : loads)
    s += fmt::format("{}const FgPageRows pr_{t}{{blk.pages, pkey, (int)p.page_shift, p.{t}_stride_batch, p.{t}_stride_seq}};\n",
                     inner, fmt::arg("t", l.tensor));
  for (const PagedLoad& l : loads) {
    const std::string src = std::string(l.tensor) + "_ptr";
    s += per_chunk(l.chunks, inner.c_str(),
                   fmt::format(fmt::runtime(l.pattern), fmt::arg("w", "{w}"), fmt::arg("off", "{off}"),
                               fmt::arg("pg", l.pg), fmt::arg("src", src),
                               fmt::arg("pr", fmt::format(fmt::runtime(l.pr), fmt::arg("t", l.tensor))))) +
         "\n";
  }
  s += in + "}";
  return s;
}

std::string q_chunk_lines(const std::vector<int>& chunks, QStep step, const char* indent, const std::string& q,
                          const std::string& rows) {
  switch (step) {
    case QStep::declare: return per_chunk(chunks, indent, "FgQChunk<{w}, {off}> q_in{off};");
    case QStep::fetch:
      return per_chunk(chunks, indent, "q_in{off}.fetch(" + q + ", p.q_stride_seq, p.q_stride_head, " + rows + ", tid);");
    case QStep::store: return per_chunk(chunks, indent, "q_in{off}.store(sQ + BLOCK_M * {off}, scale, tid);");
  }
  return "";
}

std::string load_q_lines(const std::vector<int>& chunks) {
  return q_chunk_lines(chunks, QStep::declare, "  ") + "\n" +
         q_chunk_lines(chunks, QStep::fetch, "  ", "q_ptr", "rows_valid") + "\n" +
         q_chunk_lines(chunks, QStep::store, "  ");
}

std::string spec_comment(const KernelSpec& spec) {
  const UnitTraits& u = unit_traits(spec.unit);
  auto join = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : " + ") + std::to_string(x);
    return s;
  };
  // The specializations beyond mask, bias and LSE, on one line when there are any.
  std::string also;
  for (const auto& [on, what] : {std::pair<bool, const char*>{spec.softcap, "softcap (p.softcap)"},
                                 {spec.sinks, "sinks (p.sinks)"},
                                 {spec.alibi, "ALiBi (p.alibi_slopes)"},
                                 {spec.varlen, "packed batch (p.cu_seqlens_q, p.cu_seqlens_k, p.seqused_k)"},
                                 {spec.paged, "paged KV cache (p.page_table, p.page_shift, p.seqused_k)"}})
    if (on) also += (also.empty() ? "// also:        " : ", ") + std::string(what);
  if (!also.empty()) also += "\n";
  return fmt::format(
      "// Generated by libflashgen {} — do not edit.\n"
      "// spec:        {}\n"
      "// kernel:      {}\n"
      "// arch:        sm_{}{}\n"
      "// matrix unit: {}\n"
      "// dtype:       {} (f32 accumulate)\n"
      "// head_dim:    {} = {}\n"
      "// head_dim_v:  {} = {}\n"
      "// tile:        block_m {} block_n {} warps {}{} stages {} ({} bytes of shared memory)\n"
      "// mask:        {}   bias: {}   lse: {}\n"
      "{}"
      "// launch:      {}\n",
      kGeneratorVersion, spec.canonical(), spec.kernel_name(), spec.arch,
      u.arch_suffix.empty() ? std::string() : fmt::format(" (compiled for sm_{}{})", spec.arch, u.arch_suffix),
      u.arch_suffix.empty() ? std::string(u.instruction) : fmt::format("{} (sm_{}{})", u.instruction, spec.arch, u.arch_suffix),
      to_string(spec.dtype),
      spec.head_dim, join(spec.qk_chunks()), spec.head_dim_v,
      join(spec.v_chunks()), spec.tile.block_m, spec.tile.block_n, spec.tile.warps,
      u.producer_warps != 0 ? fmt::format(" (+ {} producer)", u.producer_warps) : std::string(), spec.tile.stages,
      spec.smem_bytes(), to_string(spec.mask), to_string(spec.bias), spec.has_lse ? "yes" : "no", also,
      u.persistent ? fmt::format("grid (at most num_m_blocks * heads_q * batch; persistent), block ({}), FwdParams and "
                                 "FgTmaMaps by value",
                                 spec.threads())
                   : spec.family == KernelFamily::fwd_split
                         ? fmt::format("grid (num_splits * num_m_blocks * heads_q / {} * batch; num_m_blocks over "
                                       "seqlen_q * {} packed rows), block ({}), one FwdParams by value",
                                       spec.pack, spec.pack, spec.threads())
                         : fmt::format("grid (num_m_blocks * heads_q * batch), block ({}), one FwdParams by value",
                                       spec.threads()));
}

std::string spec_constants(const KernelSpec& spec) {
  std::string out;
  for (const SpecField* f : spec_fields(spec.family)) {
    if (f->constant.empty()) continue;
    if (!out.empty()) out += '\n';
    out += fmt::format("constexpr {} {} = {};{}", f->constant_type, f->constant, f->constant_value(spec),
                       f->constant_comment);
  }
  // The shared-memory layout is computed once (KernelSpec::smem_bytes, which
  // the launch gives the kernel); each template static_asserts that its own
  // layout takes exactly this much.
  if (spec.family == KernelFamily::fwd || spec.family == KernelFamily::fwd_split) {
    out += fmt::format("\nconstexpr int SMEM_BYTES = {};  // dynamic shared memory per block (KernelSpec::smem_bytes)",
                       spec.smem_bytes());
  }
  return out;
}

std::string assemble_forward(const KernelSpec& spec, const std::string& template_name,
                             const std::map<std::string, std::string>& slots) {
  std::string src = spec_comment(spec);
  src += "\n";
  src += template_text("common.cuh");
  src += "\n";
  src += detail::fwd_params_source();
  src += "\n";
  // The family's shape of a work item (fwd_block.cuh): the split-KV forward
  // (fwd_split) writes fp32 partial O and LSE per key split and packs `pack`
  // query heads of a GQA group into a tile's rows; the fwd family neither.
  src += fmt::format("constexpr bool SPLIT = {};\nconstexpr int PACK = {};  // query heads per packed row group\n",
                     spec.family == KernelFamily::fwd_split ? "true" : "false",
                     spec.family == KernelFamily::fwd_split ? spec.pack : 1);
  // A sliding-window mask (MASK 3 or 4): rows see keys on both sides of a band.
  if (spec.mask == MaskKind::window_top_left || spec.mask == MaskKind::window_bottom_right)
    src += "constexpr bool WINDOW = true;  // a sliding-window mask\n";
  else
    src += "constexpr bool WINDOW = false;  // a sliding-window mask\n";
  // A packed batch: each work item finds its sequence through p.cu_seqlens_q / _k.
  src += fmt::format("constexpr bool VARLEN = {};  // packed batch (cu_seqlens)\n", spec.varlen ? "true" : "false");
  // A paged KV cache: keys through p.page_table, pages of 2^p.page_shift keys.
  src += fmt::format("constexpr bool PAGED = {};  // paged KV cache (page_table)\n", spec.paged ? "true" : "false");
  // Where an f16 row shifts its weights (fwd_block.cuh, the offsets): after the
  // exp2 for a warpgroup unit (P.V waits for all of P), before it otherwise.
  src += fmt::format("constexpr bool LATE_SHIFT = {};  // f16 shift after the exp2\n",
                     unit_traits(spec.unit).warpgroup ? "true" : "false");
  src += template_text("fwd_block.cuh");
  src += "\n";
  src += fill_slots(template_text(template_name), slots, template_name);
  return src;
}

namespace {

// Whether the m16n8 kernel computes Q.K^T one tile ahead. That keeps a
// second S tile live (block_n / 2 registers per 16-row slice), so it is used
// only while the accumulators (S twice, O, and Q when it stays in registers)
// fit in 160 of the 255 registers with head_dim_v <= 128, and without a bias
// (whose loads need more); ptxas reports no spills for those (test_compile).
// (A warp's S tile has block_n / key_warps keys.)
bool qk_ahead(const KernelSpec& spec) {
  const int kw = spec.key_warps();
  const int slices = spec.tile.block_m * kw / (16 * spec.tile.warps);
  const bool q_in_regs = spec.head_dim * slices <= 128;
  const int regs =
      slices * (2 * spec.tile.block_n / kw / 2 + spec.head_dim_v / 2 + (q_in_regs ? spec.head_dim / 4 : 0));
  return spec.bias == BiasKind::none && spec.head_dim_v <= 128 && regs <= 160;
}

// templates/fwd_m16n8.cu serves both m16n8 units: m16n8k16 (sm_80+) and
// m16n8k8 (Turing sm_75 and later; each k16 step as two k8 instructions).
// The m16n8k8 kernel keeps to sm_75 instructions on every arch (plain copies
// instead of cp.async, f16 pairs packed without cvt.rn.f16x2), so running it
// on a newer GPU tests exactly the code a Turing card runs.
std::string emit_m16n8(const KernelSpec& spec) {
  const UnitTraits& u = unit_traits(spec.unit);
  const bool k8 = u.k == 8;
  if (spec.dtype == DType::bf16 && spec.arch < u.bf16_min_arch)
    throw Unsupported(fmt::format(
        "kernel spec {}: bf16 operands of the {} unit need sm_{} or later (sm_{} has float16 "
        "{} only); use dtype f16",
        spec.canonical(), to_string(spec.unit), u.bf16_min_arch, spec.arch, to_string(spec.unit)));
  const auto qk = spec.qk_chunks();
  const auto vc = spec.v_chunks();
  std::map<std::string, std::string> slots;
  slots["CONSTANTS"] = spec_constants(spec) + fmt::format(
      "\nconstexpr bool IS_BF16 = {};\n"
      "constexpr bool QK_AHEAD = {};  // Q.K^T of the next tile overlaps this tile's softmax\n"
      "constexpr int UNIT_K = {};     // mma.sync.aligned.m16n8k{}\n"
      "constexpr bool ASYNC_COPY = {};  // cp.async and cvt.rn.f16x2 (sm_80+ instructions)",
      spec.dtype == DType::bf16 ? "true" : "false", qk_ahead(spec) ? "true" : "false", u.k, u.k,
      k8 ? "false" : "true");
  slots["KERNEL_NAME"] = spec.kernel_name();
  slots["M16_PARTS"] = template_text("fwd_rows.cuh") + "\n" + template_text("fwd_m16_parts.cuh");
  // A paged KV cache reads each tile through the page table (paged_loads).
  const char* copy_k = "fg_copy_tile_async<{w}, {off}, BLOCK_N{pg}>(sKs + BLOCK_N * {off}, {src}, p.k_stride_seq, kv_valid, tid{pr});";
  const char* copy_v = "fg_copy_tile_async<{w}, {off}, BLOCK_N{pg}>(sVs + BLOCK_N * {off}, {src}, p.v_stride_seq, kv_valid, tid{pr});";
  auto dense = [](const char* pattern, const char* src) {
    return fmt::format(fmt::runtime(pattern), fmt::arg("w", "{w}"), fmt::arg("off", "{off}"), fmt::arg("pg", ""),
                       fmt::arg("src", src), fmt::arg("pr", ""));
  };
  slots["LOAD_K"] = spec.paged ? paged_loads({{qk, "k", copy_k, ", false, true", ", pr_{t}"}}, "      ")
                               : per_chunk(qk, "      ", dense(copy_k, "kg"));
  slots["LOAD_V"] = spec.paged ? paged_loads({{vc, "v", copy_v, ", false, true", ", pr_{t}"}}, "      ")
                               : per_chunk(vc, "      ", dense(copy_v, "vg"));
  slots["LOAD_Q"] = load_q_lines(qk);
  slots["LDSM_Q"] = per_chunk(qk, "  ", "fg_ldsm_q<{w}, {off}>(sQ + BLOCK_M * {off}, qf, qf8, warp, lane);");
  slots["QK"] = per_chunk(qk, "    ", "fg_qk<{w}, {off}>(sQ + BLOCK_M * {off}, sKc + BLOCK_N * {off}, qf, qf8, s, warp, lane);");
  slots["PV"] = per_chunk(vc, "    ", "fg_pv<{w}, {off}>(sVc + BLOCK_N * {off}, s, o, warp, lane, pm);");
  slots["STAGE_O"] = per_chunk(vc, "  ", "fg_stage_o<{w}, {off}>(sO + BLOCK_M * {off}, o, inv, warp, lane);");
  slots["STORE_O"] =
      per_chunk(vc, "  ", "fg_store_o<{w}, {off}, BLOCK_M, THREADS>(o_ptr, sO + BLOCK_M * {off}, p.o_stride_seq, rows_valid, tid);");

  slots["STORE_O_PARTIAL"] = per_chunk(vc, "    ", "fg_store_o_partial<{w}, {off}>(p, blk, o, inv, warp, lane);");

  return assemble_forward(spec, "fwd_m16n8.cu", slots);
}

}  // namespace

std::string emit_forward(const KernelSpec& spec) {
  if (spec.family == KernelFamily::fwd_split && spec.unit == MatrixUnit::wgmma)
    throw Unsupported(fmt::format("kernel spec {}: the fwd_split family is generated for the mma.sync units only",
                                  spec.canonical()));
  if (spec.family != KernelFamily::fwd && spec.family != KernelFamily::fwd_split)
    throw Unsupported(fmt::format("kernel spec {}: family {} is not a forward family; allowed: fwd, fwd_split",
                                  spec.canonical(), to_string(spec.family)));
  switch (spec.unit) {
    case MatrixUnit::m16n8k16:
    case MatrixUnit::m16n8k8: return emit_m16n8(spec);
    case MatrixUnit::m8n8k4: return emit_m8n8k4(spec);
    case MatrixUnit::wgmma: return emit_wgmma(spec);
  }
  throw Error(ErrorCode::internal, "unknown matrix unit");
}

}  // namespace flashgen::gen
