// Emitters: KernelSpec -> CUDA source text. Pure C++ (no CUDA headers).
#pragma once

#include <string>

#include "flashgen/spec.hpp"

namespace flashgen::gen {

/// Generate the self-contained CUDA source for `spec` (no #include; begins
/// with a comment listing the spec; extern "C" __global__ symbol is
/// spec.kernel_name(); the kernel takes one `FwdParams` by value and is
/// launched with grid (num_m_blocks * heads_q * batch, 1, 1), block
/// (spec.threads(), 1, 1) and spec.smem_bytes() of dynamic shared memory).
/// Dispatches on spec.unit. Does not validate; callers validate first.
std::string emit_forward(const KernelSpec& spec);

/// The text of an embedded template file (templates/<name>), e.g. "common.cuh".
const std::string& template_text(const std::string& name);

}  // namespace flashgen::gen
