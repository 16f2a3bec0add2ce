// The wgmma forward emitter (Hopper, sm_90a): fills templates/fwd_wgmma.cu.
// Besides the per-chunk calls (TMA boxes, wgmma) it writes the wgmma.mma_async
// wrappers, whose operand lists (one register per accumulator element) depend
// on block_n and on the widths of the head-dim chunks.
#include <fmt/format.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "flashgen/problem.hpp"
#include "flashgen/spec.hpp"
#include "gen/emit.hpp"
#include "gen/emit_internal.hpp"
#include "gen/limits.hpp"
#include "gen/params.hpp"

namespace flashgen::gen {

int tma_map_index(int chunk_width) { return chunk_width == 64 ? 0 : chunk_width == 32 ? 1 : 2; }

std::string wgmma_kv_refusal(const AttentionProblem& p) {
  constexpr int64_t kMaxTmaStrideBytes = int64_t{1} << 40;  // cuTensorMapEncodeTiled: strides < 2^40 bytes
  // (of the K/V tensors; paged: a page's slots)
  const int64_t rows = p.paged() ? p.page_size : p.varlen() ? p.total_k : p.seqlen_k;
  const char* rows_name = p.paged() ? "page_size" : p.varlen() ? "total_k" : "seqlen_k";
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef&>{"k", p.k}, {"v", p.v}}) {
    if (t.stride_seq == 0 && rows > 1)
      return fmt::format("{}.stride_seq is 0 with {} = {}: the wgmma kernel reads {} through a TMA tensor map, "
                         "which cannot repeat one row",
                         name, rows_name, rows, name);
    const struct {
      const char* field;
      int64_t stride, extent;
    } dims[] = {{"stride_seq", t.stride_seq, rows}, {"stride_head", t.stride_head, p.heads_kv},
                {"stride_batch", t.stride_batch, p.paged() ? p.num_pages : p.batch}};
    for (const auto& d : dims)
      if (d.extent > 1 && d.stride >= kMaxTmaStrideBytes / 2)
        return fmt::format("{}.{} ({} elements) is 2^40 bytes or more: the wgmma kernel reads {} through a TMA "
                           "tensor map, whose strides must be below 2^40 bytes",
                           name, d.field, d.stride, name);
  }
  return "";
}

namespace {

// "{%first, ..., %first+count-1}"
std::string reg_list(int first, int count) {
  std::string s = "{";
  for (int i = 0; i < count; ++i) s += fmt::format("{}%{}", i ? ", " : "", first + i);
  return s + "}";
}

// "+f"(prefix[index_expr(i)]) for every accumulator element of an n-wide tile.
std::string acc_operands(int n, const std::string& array, const std::string& first_tile) {
  std::string s;
  for (int j = 0; j < n / 8; ++j)
    for (int e = 0; e < 4; ++e)
      s += fmt::format("{}\"+f\"({}[0][{}{}][{}])", s.empty() ? "" : ", ", array, first_tile, j, e);
  return s;
}

// P.V as one wgmma per k16 step across every V chunk (fg_pv_whole) when the chunks
// are all 64 wide, so that they are the N direction's swizzle atoms of one MN-major
// operand (N = head_dim_v <= 256); otherwise one wgmma per chunk (fg_pv).
bool pv_whole(const std::vector<int>& v_chunks) {
  if (v_chunks.size() < 2) return false;
  for (int w : v_chunks)
    if (w != 64) return false;
  return true;
}

std::string wgmma_ops(const KernelSpec& spec, const std::vector<int>& v_chunks) {
  const char* t = spec.dtype == DType::bf16 ? "bf16" : "f16";
  const int n = spec.tile.block_n, regs = n / 2;
  std::string s = fmt::format(
      "// S (+)= A.B: wgmma.mma_async m64n{n}k16, A (Q) and B (K) from shared memory,\n"
      "// both K-major; accumulate = 0 overwrites S (PTX ISA: wgmma.mma_async, scale-d).\n"
      "FG_DEVICE void fg_wgmma_qk(float (&d)[1][NT][4], u64 da, u64 db, int accumulate) {{\n"
      "  asm volatile(\n"
      "      \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n\"\n"
      "      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {regs}, %{da}, %{db}, p, 1, 1, 0, 0;\\n}}\\n\"\n"
      "      : {outs}\n"
      "      : \"l\"(da), \"l\"(db), \"r\"(accumulate));\n"
      "}}\n\n"
      "// O[:, 8*J0 : 8*J0+W] += A.B: wgmma.mma_async m64nWk16, A (P) from registers,\n"
      "// B (V) from shared memory, MN-major (imm-trans-b = 1).\n"
      "template <int W>\n"
      "struct FgPv;\n",
      fmt::arg("n", n), fmt::arg("t", t), fmt::arg("regs", reg_list(0, regs)), fmt::arg("acc", regs + 2),
      fmt::arg("da", regs), fmt::arg("db", regs + 1), fmt::arg("outs", acc_operands(n, "d", "")));
  std::set<int> widths(v_chunks.begin(), v_chunks.end());
  if (pv_whole(v_chunks)) widths.insert(spec.head_dim_v);  // (fg_pv_whole's, N = head_dim_v)
  for (int w : widths) {
    const int r = w / 2;
    s += fmt::format(
        "template <>\n"
        "struct FgPv<{w}> {{\n"
        "  template <int J0>\n"
        "  static FG_DEVICE void mma(float (&o)[1][OT][4], const u32 (&a)[4], u64 db) {{\n"
        "    asm volatile(\n"
        "        \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{one}, 0;\\n\"\n"
        "        \"wgmma.mma_async.sync.aligned.m64n{w}k16.f32.{t}.{t} {regs}, {aregs}, %{db}, p, 1, 1, 1;\\n}}\\n\"\n"
        "        : {outs}\n"
        "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db), \"r\"(1));\n"
        "  }}\n"
        "}};\n",
        fmt::arg("w", w), fmt::arg("t", t), fmt::arg("regs", reg_list(0, r)), fmt::arg("aregs", reg_list(r, 4)),
        fmt::arg("db", r + 4), fmt::arg("one", r + 5), fmt::arg("outs", acc_operands(w, "o", "J0 + ")));
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

std::string emit_wgmma(const KernelSpec& spec) {
  const auto qk = spec.qk_chunks();
  const auto vc = spec.v_chunks();
  std::map<std::string, std::string> slots;
  int gather_shift = 0;
  while ((2 << gather_shift) <= kWgmmaGatherPageBelow) ++gather_shift;
  slots["CONSTANTS"] = spec_constants(spec) + fmt::format(
      "\nconstexpr bool IS_BF16 = {};\nconstexpr int GATHER_PAGE_SHIFT = {};  // pages of 2^page_shift keys below 2^this: cp.async gather",
      spec.dtype == DType::bf16 ? "true" : "false", gather_shift);
  slots["KERNEL_NAME"] = spec.kernel_name();
  slots["M16_PARTS"] = template_text("fwd_rows.cuh") + "\n" + template_text("fwd_m16_parts.cuh");
  slots["WGMMA_OPS"] = wgmma_ops(spec, vc);
  // One TMA box per head-dim chunk, through the tensor map of its width.
  auto tma_lines = [](const std::vector<int>& chunks, const char* maps) {
    std::string out;
    int off = 0;
    for (int w : chunks) {
      out += fmt::format("{}fg_tma_load(dst + 2 * BLOCK_N * {}, tma.{}[{}], {}, n0, head_{}, batch_{}, bar);\n",
                         "            ", off, maps, tma_map_index(w), off, maps, maps);
      off += w;
    }
    if (!out.empty()) out.pop_back();
    return out;
  };
  slots["TMA_K"] = tma_lines(qk, "k");
  slots["TMA_V"] = tma_lines(vc, "v");
  // A paged KV cache: box i of a tile (box_rows keys of one page) at row r0 of every chunk.
  auto tma_paged = [](const std::vector<int>& chunks, const char* maps) {
    std::string out;
    int off = 0;
    for (int w : chunks) {
      out += fmt::format("{}fg_tma_load(dst + 2 * (BLOCK_N * {} + {} * r0), tma.{}[{}], {}, slot, head_{}, page, bar);\n",
                         "              ", off, w, maps, tma_map_index(w), off, maps);
      off += w;
    }
    if (!out.empty()) out.pop_back();
    return out;
  };
  slots["TMA_K_PAGED"] = tma_paged(qk, "k");
  slots["TMA_V_PAGED"] = tma_paged(vc, "v");
  // Pages below kWgmmaGatherPageBelow keys: the producer warpgroup gathers a row per key with cp.async, one
  // call per run of equal-width chunks (D128: one call of two 64-column chunks), so each
  // shuffled row offset serves every chunk of the run.
  auto gather_lines = [](const std::vector<int>& chunks, const char* indent) {
    std::string out;
    int off = 0;
    for (size_t i = 0; i < chunks.size();) {
      size_t n = 1;
      while (i + n < chunks.size() && chunks[i + n] == chunks[i]) ++n;
      out += fmt::format("{}fg_gather_rows<{}, {}, {}, NR>(dst, head, row_off, row0, nr, kv_valid, lane);\n", indent,
                         chunks[i], off, n);
      off += chunks[i] * static_cast<int>(n);
      i += n;
    }
    if (!out.empty()) out.pop_back();
    return out;
  };
  slots["GATHER"] = spec.paged ? "            if constexpr (decltype(is_k)::value) {\n" + gather_lines(qk, "              ") +
                                     "\n            } else {\n" + gather_lines(vc, "              ") + "\n            }"
                               : "            (void)row_off;  // (not paged: gather() is never called)";
  std::string prefetch;
  for (int w : std::set<int>(qk.begin(), qk.end()))
    prefetch += fmt::format("      fg_tma_prefetch(tma.k[{}]);\n", tma_map_index(w));
  for (int w : std::set<int>(vc.begin(), vc.end()))
    prefetch += fmt::format("      fg_tma_prefetch(tma.v[{}]);\n", tma_map_index(w));
  prefetch.pop_back();
  slots["TMA_PREFETCH"] = prefetch;
  slots["TMA_MAPS"] = detail::fwd_tma_maps_source();
  // Q and O: with two consumer warpgroups each fetches, stages and stores its own 64 rows, in
  // its slice of sQ (templates/fwd_wgmma.cu, WG_OWN_ROWS, WG_SLICE); with one or three, the
  // block's rows together ([chunk][BLOCK_M][width]).
  if (spec.tile.warps == 8) {
    slots["Q_DECL"] = per_chunk(qk, "  ", "FgQChunk<{w}, {off}, 64, 128> q_in{off};");
    slots["Q_FETCH"] = per_chunk(
        qk, "      ",
        "q_in{off}.fetch(nb.q + wg_row0 * p.q_stride_seq, p.q_stride_seq, p.q_stride_head, nb.rows_valid - wg_row0, wg_tid);");
    slots["Q_STORE"] = per_chunk(qk, "    ", "q_in{off}.store(sQ + wg * WG_SLICE + 64 * {off}, scale, wg_tid);");
    slots["QK"] = per_chunk(
        qk, "    ", "fg_qk<{w}, {off}>(q_units + (wg * WG_SLICE + 64 * {off}) / 8, k_tile + BLOCK_N * {off} / 8, s);");
    slots["STAGE_O"] =
        per_chunk(vc, "  ", "fg_stage_o<{w}, {off}>(sQ + wg * (WG_SLICE - 64 * {w}) + 64 * {off}, o, inv, warp, lane);");
    slots["STORE_O"] = per_chunk(
        vc, "  ",
        "fg_store_o<{w}, {off}, 64, 128>(o_ptr, sQ + wg * WG_SLICE + 64 * {off}, p.o_stride_seq, rows_valid - wg_row0, "
        "wg_tid);");
  } else {
    slots["Q_DECL"] = q_chunk_lines(qk, QStep::declare, "  ");
    slots["Q_FETCH"] = q_chunk_lines(qk, QStep::fetch, "      ", "nb.q", "nb.rows_valid");
    slots["Q_STORE"] = q_chunk_lines(qk, QStep::store, "    ");
    slots["QK"] = per_chunk(
        qk, "    ", "fg_qk<{w}, {off}>(q_units + (BLOCK_M * {off} + wg_row0 * {w}) / 8, k_tile + BLOCK_N * {off} / 8, s);");
    slots["STAGE_O"] = per_chunk(vc, "  ", "fg_stage_o<{w}, {off}>(sQ + BLOCK_M * {off}, o, inv, warp, lane);");
    slots["STORE_O"] = per_chunk(
        vc, "  ", "fg_store_o<{w}, {off}, BLOCK_M, THREADS>(o_ptr, sQ + BLOCK_M * {off}, p.o_stride_seq, rows_valid, tid);");
  }
  slots["PV"] = pv_whole(vc) ? std::string("    fg_pv_whole<HEAD_DIM_V>(v_tile, pa, o);")
                             : per_chunk(vc, "    ", "fg_pv<{w}, {off}>(v_tile + BLOCK_N * {off} / 8, pa, o);");
  slots["V_SCAN"] = per_chunk(
      vc, "          ",
      "fg_v_scan<{w}, decltype(clean)::value>(v_stage + BLOCK_N * {off}, scan_from, tid, bad, lowest, bits);");
  slots["PV_REDO"] =
      per_chunk(vc, "          ", "fg_pv_redo<{w}, {off}>(v_stage + BLOCK_N * {off}, pa, o, lim0, lim1, lane);");
  slots["V_ZERO"] = per_chunk(vc, "          ", "fg_v_zero<{w}>(v_stage + BLOCK_N * {off}, valid, tid);");
  return assemble_forward(spec, "fwd_wgmma.cu", slots);
}

}  // namespace flashgen::gen
