// The m8n8k4 forward emitter (Volta, sm_70): fills templates/fwd_m8n8k4.cu.
// One call per head-dim chunk for every copy and fragment loop, like the
// m16n8k16 emitter; the layouts are the template's k slabs (see its header).
#include <fmt/format.h>

#include <map>
#include <string>

#include "flashgen/spec.hpp"
#include "gen/emit.hpp"
#include "gen/emit_internal.hpp"
#include "gen/params.hpp"

namespace flashgen::gen {

std::string emit_m8n8k4(const KernelSpec& spec) {
  if (spec.dtype != DType::f16) {
    throw Unsupported(fmt::format(
        "kernel spec {}: the m8n8k4 matrix unit (Volta) takes float16 operands only; bf16 has no "
        "m8n8k4 form (it needs sm_80 or later and the m16n8k16 unit); use dtype f16",
        spec.canonical()));
  }
  const auto qk = spec.qk_chunks();
  const auto vc = spec.v_chunks();
  std::map<std::string, std::string> slots;
  slots["CONSTANTS"] = spec_constants(spec);
  slots["KERNEL_NAME"] = spec.kernel_name();
  slots["ROW_PARTS"] = template_text("fwd_rows.cuh");
  if (spec.paged) {
    slots["LOAD_KV"] = paged_loads(
        {{qk, "k", "fg_load_kslab<{w}, {off}, BLOCK_N, false{pg}>(sKs + BLOCK_N * {off}, {src}, p.k_stride_seq, kv_valid, 1.f, tid{pr});",
          ", true", ", 0, pr_{t}"},
         {vc, "v", "fg_load_v<{w}, {off}{pg}>(sVs + BLOCK_N * {off}, {src}, p.v_stride_seq, kv_valid, tid{pr});", ", true",
          ", pr_{t}"}},
        "    ");
  } else {
    slots["LOAD_KV"] =
        per_chunk(qk, "    ",
                  "fg_load_kslab<{w}, {off}, BLOCK_N, false>(sKs + BLOCK_N * {off}, kg, p.k_stride_seq, kv_valid, 1.f, tid);") +
        "\n" + per_chunk(vc, "    ", "fg_load_v<{w}, {off}>(sVs + BLOCK_N * {off}, vg, p.v_stride_seq, kv_valid, tid);");
  }
  slots["LOAD_Q"] = per_chunk(
      qk, "  ",
      spec.family == KernelFamily::fwd_split
          ? "fg_load_kslab<{w}, {off}, BLOCK_M, true>(sQ + BLOCK_M * {off}, q_ptr, p.q_stride_seq, rows_valid, scale, "
            "tid, p.q_stride_head);"
          : "fg_load_kslab<{w}, {off}, BLOCK_M, true>(sQ + BLOCK_M * {off}, q_ptr, p.q_stride_seq, rows_valid, scale, tid);");
  slots["Q_REGS"] = per_chunk(qk, "  ", "fg_q_regs<{w}, {off}>(sQ + BLOCK_M * {off}, qf, warp, arow);");
  slots["QK"] =
      per_chunk(qk, "    ", "fg_qk<{w}, {off}>(sQ + BLOCK_M * {off}, sKc + BLOCK_N * {off}, qf, s, warp, arow, bcol);");
  slots["PV"] = per_chunk(vc, "    ", "fg_pv<{w}, {off}>(sVc + BLOCK_N * {off}, pf, o, bcol, pm);");
  slots["STAGE_O"] = per_chunk(vc, "  ", "fg_stage_o<{w}, {off}>(sO + BLOCK_M * {off}, o, inv, warp, rbase, cbase);");
  slots["STORE_O"] =
      per_chunk(vc, "  ", "fg_store_o<{w}, {off}, BLOCK_M, THREADS>(o_ptr, sO + BLOCK_M * {off}, p.o_stride_seq, rows_valid, tid);");

  slots["STORE_O_PARTIAL"] =
      per_chunk(vc, "    ", "fg_store_o_partial<{w}, {off}>(p, blk, o, inv, warp, rbase, cbase);");

  return assemble_forward(spec, "fwd_m8n8k4.cu", slots);
}

}  // namespace flashgen::gen
