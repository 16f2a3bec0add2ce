// libflashgen — basic vocabulary types and the error hierarchy.
//
// Every public function of libflashgen reports failure by throwing one of the
// exception types below (the C ABI in flashgen.h maps them to error codes).
// Each message names the offending argument, its value and what is allowed.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace flashgen {

/// The kind of kernel a KernelSpec describes. Each family has its own
/// canonical tag ("flashgen.<family>.v1:") and kernel-name prefix
/// ("flashgen_<family>_").
///  - fwd:       the dense forward kernel (one launch computes O and LSE).
///  - fwd_split: split-KV forward: blocks over parts of the key range write
///               partial O (fp32) and LSE into a workspace. Not generated yet.
///  - combine:   merges S partial attention states (O_s, LSE_s) over disjoint
///               key sets into O and LSE (merge_states, flashgen.hpp; the merge
///               step of split-KV). Generated (templates/combine.cu).
/// validate() refuses the families that are not generated yet (fwd_split:
/// Unsupported); backward families (bwd_*) come later.
enum class KernelFamily { fwd, fwd_split, combine };

/// Element type of Q, K, V and O. fp16 is IEEE binary16, bf16 is bfloat16
/// (8-bit exponent, 7-bit mantissa). Accumulation is always float32.
enum class DType { f16, bf16 };

/// Element type of the O tensors of a merge of attention states
/// (MergeProblem, merge.hpp): the partial O_s and the merged O.
///  - f32:  float32 (what a split-KV workspace holds).
///  - f16:  IEEE binary16.
///  - bf16: bfloat16.
/// Arithmetic is float32 whatever the element types.
enum class StateDType { f32, f16, bf16 };

/// Attention mask applied on top of the optional additive bias.
///  - none:                every query row sees every key.
///  - causal_top_left:     query i sees keys j <= i.
///  - causal_bottom_right: query i sees keys j <= i + seqlen_k - seqlen_q
///                         (the FlashAttention-2 convention for seqlen_q != seqlen_k).
///  - window_top_left:     sliding window: query i sees keys j with
///                         i - window_left <= j <= i + window_right
///                         (AttentionProblem::window_left / window_right; -1 = unbounded on that side).
///  - window_bottom_right: the same window aligned at the bottom right: i + off - window_left <= j <=
///                         i + off + window_right, off = seqlen_k - seqlen_q.
/// Causal is the window (-1, 0) of the same alignment.
enum class MaskKind { none, causal_top_left, causal_bottom_right, window_top_left, window_bottom_right };

/// Element type of the optional additive bias [batch, heads_q, seqlen_q, seqlen_k].
///  - none:  no bias.
///  - input: same dtype as Q (fp16 or bf16).
///  - f32:   float32.
enum class BiasKind { none, input, f32 };

/// Tensor-core instruction shape a kernel is built around (PTX ISA, "Warp-level
/// matrix multiply-accumulate instructions", mma.sync.aligned.<shape>).
///  - m16n8k16: sm_80 and later, f16/bf16 operands, f32 accumulator.
///  - m16n8k8:  sm_75 and later, f16 (bf16 from sm_80) operands, f32 accumulator.
///  - m8n8k4:   sm_70 (Volta) quadpair layout, f16 operands, f32 accumulator.
///  - wgmma:    sm_90a warpgroup wgmma.mma_async.sync.aligned.m64nNk16 (PTX ISA,
///              "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"), f16/bf16
///              operands, f32 accumulator; head dims must be multiples of 16. Kernels
///              are compiled for the arch-specific target sm_90a.
enum class MatrixUnit { m16n8k16, m16n8k8, m8n8k4, wgmma };

std::string_view to_string(KernelFamily);  ///< "fwd" | "fwd_split" | "combine"
std::string_view to_string(DType);       ///< "f16" | "bf16"
std::string_view to_string(MaskKind);    ///< "none" | "causaltl" | "causalbr" | "windowtl" | "windowbr"
std::string_view to_string(BiasKind);    ///< "none" | "input" | "f32"
std::string_view to_string(MatrixUnit);  ///< "m16n8k16" | "m16n8k8" | "m8n8k4" | "wgmma"
std::string_view to_string(StateDType);  ///< "f32" | "f16" | "bf16"

/// Parse the names printed by to_string (DType also accepts "float16",
/// "fp16", "bfloat16", "bf16"). Throws InvalidArgument naming `what` on an
/// unknown name.
DType parse_dtype(std::string_view text, std::string_view what = "dtype");
MaskKind parse_mask(std::string_view text, std::string_view what = "mask");
BiasKind parse_bias(std::string_view text, std::string_view what = "bias");
MatrixUnit parse_matrix_unit(std::string_view text, std::string_view what = "matrix_unit");
KernelFamily parse_kernel_family(std::string_view text, std::string_view what = "family");
/// Exactly the names to_string(StateDType) prints ("f32", "f16", "bf16").
StateDType parse_state_dtype(std::string_view text, std::string_view what = "dtype");

/// The tile of a forward kernel: the query rows and keys one thread block
/// works on per step, its warps and its K/V pipeline depth. A value type; a
/// default-constructed Tile is all zero (no tile). The rules a tile must
/// follow depend on the matrix unit and the profile: validate() (spec.hpp)
/// states them, one sentence per broken rule.
struct Tile {
  int block_m = 0;  ///< query rows per thread block: a positive multiple of 16 * warps, at most 256
                    ///< (wgmma: exactly 16 * warps, 64 query rows per consumer warpgroup; fwd_split on
                    ///< the m16n8 units may also be 16 * warps / k, k a power of two: k warps share
                    ///< 16 rows and split each key tile, KernelSpec::key_warps)
  int block_n = 0;  ///< keys per pipeline step: a positive multiple of 16, at most 256 (wgmma with warps 4
                    ///< or 12: at most 192)
  int warps = 0;    ///< warps per block, [1, 16] (wgmma: the consumer warps, 4, 8 or 12; the kernel adds a
                    ///< 4-warp producer warpgroup; warps 4 takes head_dim_v up to 240, warps 12 head dims
                    ///< up to 128); each warp owns block_m / warps query rows
  int stages = 0;   ///< K/V shared-memory pipeline depth, [1, 4] (wgmma: [2, 4])

  bool operator==(const Tile&) const = default;
  /// e.g. "bm128 bn64 w8 s2"
  std::string str() const;
};

/// Size in bytes of one element of `d` (2 for both f16 and bf16).
constexpr int dtype_bytes(DType) { return 2; }
/// Size in bytes of one element of `d` (f32: 4, f16 and bf16: 2).
constexpr int dtype_bytes(StateDType d) { return d == StateDType::f32 ? 4 : 2; }

/// Error categories; the C ABI returns these numbers (see flashgen.h).
enum class ErrorCode {
  invalid_argument = 1,  ///< a caller-supplied value breaks a documented rule
  unsupported = 2,       ///< valid request the selected profile/device cannot serve
  compile_failed = 3,    ///< NVRTC rejected the generated source
  driver = 4,            ///< a CUDA driver call failed
  unavailable = 5,       ///< no GPU / no driver / no NVRTC on this machine
  io = 6,                ///< a file could not be read or written
  internal = 7,          ///< a bug in libflashgen
};

/// Base of all libflashgen exceptions.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// A caller-supplied value is outside what is allowed. Raised before any
/// launch; output buffers are untouched.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(ErrorCode::invalid_argument, m) {}
};

/// A well-formed request the chosen profile cannot serve (e.g. bf16 on a
/// matrix unit without bf16 operands). Raised before any launch.
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& m) : Error(ErrorCode::unsupported, m) {}
};

/// NVRTC failed to compile a generated kernel. The message holds the spec,
/// kernel name, NVRTC options, the compile log and the path of the dumped source.
class CompileError : public Error {
 public:
  explicit CompileError(const std::string& m) : Error(ErrorCode::compile_failed, m) {}
};

/// A CUDA driver API call failed; the message names the call and the CUresult.
class DriverError : public Error {
 public:
  DriverError(const std::string& m, int cu_result) : Error(ErrorCode::driver, m), result_(cu_result) {}
  int cu_result() const noexcept { return result_; }

 private:
  int result_;
};

/// A facility is missing on this machine: no libcuda.so.1 / no GPU, or no
/// loadable NVRTC. The message says what is missing and how to provide it.
class Unavailable : public Error {
 public:
  explicit Unavailable(const std::string& m) : Error(ErrorCode::unavailable, m) {}
};

/// A file could not be read or written (profiles, tune files, dumps).
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorCode::io, m) {}
};

}  // namespace flashgen
