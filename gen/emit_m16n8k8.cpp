// The m16n8k8 forward emitter (Turing, sm_75): fills templates/fwd_m16n8k8.cu.
// Same slots and chunk calls as the m16n8k16 emitter; the template differs in
// its copies (plain loads/stores, no cp.async) and its k8 instructions.
#include <fmt/format.h>

#include <map>
#include <string>

#include "flashgen/flashgen.hpp"
#include "gen/emit.hpp"
#include "gen/emit_internal.hpp"
#include "gen/params.hpp"

namespace flashgen::gen {

std::string emit_m16n8k8(const KernelSpec& spec) {
  if (spec.dtype == DType::bf16 && spec.arch < 80) {
    throw Unsupported(fmt::format(
        "kernel spec {}: bf16 operands of the m16n8k8 unit need sm_80 or later (sm_{} has float16 "
        "m16n8k8 only); use dtype f16",
        spec.canonical(), spec.arch));
  }
  const auto qk = spec.qk_chunks();
  const auto vc = spec.v_chunks();
  std::map<std::string, std::string> slots;
  slots["CONSTANTS"] = fmt::format(
      "constexpr int HEAD_DIM = {};\n"
      "constexpr int HEAD_DIM_V = {};\n"
      "constexpr int BLOCK_M = {};\n"
      "constexpr int BLOCK_N = {};\n"
      "constexpr int WARPS = {};\n"
      "constexpr int STAGES = {};\n"
      "constexpr bool IS_BF16 = {};\n"
      "constexpr int MASK = {};        // 0 none, 1 causal top-left, 2 causal bottom-right\n"
      "constexpr int BIAS_KIND = {};   // 0 none, 1 input dtype, 2 float32\n"
      "constexpr bool HAS_LSE = {};",
      spec.head_dim, spec.head_dim_v, spec.block_m, spec.block_n, spec.warps, spec.stages,
      spec.dtype == DType::bf16 ? "true" : "false", mask_code(spec.mask), bias_code(spec.bias),
      spec.has_lse ? "true" : "false");
  slots["KERNEL_NAME"] = spec.kernel_name();
  slots["LOAD_KV"] =
      per_chunk(qk, "    ", "fg_copy_tile<{w}, {off}, BLOCK_N>(sKs + BLOCK_N * {off}, kg, p.k_stride_seq, kv_valid, tid);") +
      "\n" +
      per_chunk(vc, "    ", "fg_copy_tile<{w}, {off}, BLOCK_N>(sVs + BLOCK_N * {off}, vg, p.v_stride_seq, kv_valid, tid);");
  slots["LOAD_Q"] =
      per_chunk(qk, "  ", "fg_load_q<{w}, {off}>(sQ + BLOCK_M * {off}, q_ptr, p.q_stride_seq, rows_valid, scale, tid);");
  slots["LDSM_Q"] = per_chunk(qk, "  ", "fg_ldsm_q<{w}, {off}>(sQ + BLOCK_M * {off}, qf, qf8, warp, lane);");
  slots["QK"] = per_chunk(qk, "    ", "fg_qk<{w}, {off}>(sQ + BLOCK_M * {off}, sKc + BLOCK_N * {off}, qf, qf8, s, warp, lane);");
  slots["PV"] = per_chunk(vc, "    ", "fg_pv<{w}, {off}>(sVc + BLOCK_N * {off}, s, o, lane);");
  slots["STAGE_O"] = per_chunk(vc, "  ", "fg_stage_o<{w}, {off}>(sO + BLOCK_M * {off}, o, inv, warp, lane);");
  slots["STORE_O"] =
      per_chunk(vc, "  ", "fg_store_o<{w}, {off}>(o_ptr, sO + BLOCK_M * {off}, p.o_stride_seq, rows_valid, tid);");

  std::string src = spec_comment(spec);
  src += "\n";
  src += template_text("common.cuh");
  src += "\n";
  src += detail::fwd_params_source();
  src += "\n";
  src += fill_slots(template_text("fwd_m16n8k8.cu"), slots, "fwd_m16n8k8.cu");
  return src;
}

}  // namespace flashgen::gen
