/* libflashgen — C ABI (C89-compatible; usable from C, FFI and other languages).
 *
 * The same library as the C++ API in flashgen.hpp, behind plain C types.
 * Semantics of the operation (see docs/design.md, "The operation"): per batch b and
 * query head h, with g = heads_q / heads_kv and KV head h / g:
 *
 *     Qs  = round_to_dtype(Q * softmax_scale)
 *     S   = Qs K^T (fp32 accumulate) + bias + mask
 *     P   = softmax(S) row-wise
 *     O   = P V    (P rounded to the input dtype, fp32 accumulate)
 *     LSE = log(sum_j exp(S_ij))   (natural log, fp32)
 *
 * A row that sees no key (fully masked, or seqlen_k == 0) gets O = 0 and
 * LSE = -inf.
 *
 * Error handling: every function returns a flashgen_status. FLASHGEN_OK (0)
 * means success; any other value is one of the error codes below, and
 * flashgen_last_error() then returns a sentence saying what was wrong and what
 * is allowed. No function ever lets a C++ exception escape. A refused call
 * launches nothing and writes no output buffer.
 *
 * Thread safety: every function may be called from any thread concurrently.
 *
 * The CUDA driver (libcuda.so.1) and NVRTC are loaded on first use, so a
 * program linked with libflashgen starts on a machine without a GPU; plan
 * (with an explicit arch) and generate work there, forward and launch return
 * FLASHGEN_ERROR_UNAVAILABLE.
 */
#ifndef FLASHGEN_FLASHGEN_H_
#define FLASHGEN_FLASHGEN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA stream: the driver API's CUstream (cuda.h) or the runtime API's
 * cudaStream_t, both `struct CUstream_st*`. NULL is the legacy default stream.
 * Named differently from CUstream so that this header can be included with or
 * without cuda.h, in any order. */
typedef struct CUstream_st* flashgen_stream;

/* Status of a call. The error numbers equal flashgen::ErrorCode's. */
typedef enum flashgen_status {
  FLASHGEN_OK = 0,
  FLASHGEN_ERROR_INVALID_ARGUMENT = 1, /* a caller-supplied value breaks a documented rule */
  FLASHGEN_ERROR_UNSUPPORTED = 2,      /* valid request the profile / device cannot serve */
  FLASHGEN_ERROR_COMPILE_FAILED = 3,   /* NVRTC rejected the generated source (message: spec,
                                          kernel name, options, log, dumped source path) */
  FLASHGEN_ERROR_DRIVER = 4,           /* a CUDA driver call failed (message names the call) */
  FLASHGEN_ERROR_UNAVAILABLE = 5,      /* no GPU / no driver / no NVRTC on this machine */
  FLASHGEN_ERROR_IO = 6,               /* a file could not be read or written */
  FLASHGEN_ERROR_INTERNAL = 7          /* a bug in libflashgen, or out of memory */
} flashgen_status;

/* The input enums below end with two range markers that are not values: with
 * them every int is a value of the enum type, so a caller's wrong number (from C
 * or through an FFI) is reported as FLASHGEN_ERROR_INVALID_ARGUMENT instead of
 * being undefined behaviour in the C++ implementation. */

/* Element type of Q, K, V and O (and of an "input"-kind bias). */
typedef enum flashgen_dtype {
  FLASHGEN_DTYPE_F16 = 0,  /* IEEE binary16 */
  FLASHGEN_DTYPE_BF16 = 1, /* bfloat16 (needs sm_80 or newer) */
  FLASHGEN_DTYPE_RANGE_MIN_ = -0x7FFFFFFF - 1,
  FLASHGEN_DTYPE_RANGE_MAX_ = 0x7FFFFFFF
} flashgen_dtype;

/* Attention mask, applied on top of the optional bias. */
typedef enum flashgen_mask {
  FLASHGEN_MASK_NONE = 0,               /* every query row sees every key */
  FLASHGEN_MASK_CAUSAL_TOP_LEFT = 1,    /* query i sees keys j <= i */
  FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT = 2, /* query i sees keys j <= i + seqlen_k - seqlen_q */
  FLASHGEN_MASK_RANGE_MIN_ = -0x7FFFFFFF - 1,
  FLASHGEN_MASK_RANGE_MAX_ = 0x7FFFFFFF
} flashgen_mask;

/* Element type of the optional additive bias. */
typedef enum flashgen_bias_kind {
  FLASHGEN_BIAS_NONE = 0,  /* no bias; bias.data must be NULL */
  FLASHGEN_BIAS_INPUT = 1, /* same dtype as Q */
  FLASHGEN_BIAS_F32 = 2,   /* float32 */
  FLASHGEN_BIAS_RANGE_MIN_ = -0x7FFFFFFF - 1,
  FLASHGEN_BIAS_RANGE_MAX_ = 0x7FFFFFFF
} flashgen_bias_kind;

/* A BSHD tensor in device memory: element [b, s, h, d] is at
 *   data + b*stride_batch + s*stride_seq + h*stride_head + d
 * Strides are in ELEMENTS (not bytes); the last dimension is contiguous; a
 * stride of 0 broadcasts (inputs only). The kernel needs data 16-byte aligned
 * and strides that are multiples of 8 elements (or 0). An output (o) must not
 * overlap itself: with its dimensions of extent > 1 in order of increasing
 * stride, each stride covers everything nested inside it (contiguous BSHD:
 * stride_head >= head_dim_v, stride_seq >= heads_q * stride_head, ...);
 * otherwise FLASHGEN_ERROR_INVALID_ARGUMENT names the stride. */
typedef struct flashgen_tensor {
  const void* data;
  int64_t stride_batch;
  int64_t stride_seq;
  int64_t stride_head;
} flashgen_tensor;

/* Additive bias [batch, heads_q, seqlen_q, seqlen_k] in device memory through
 * four element strides (0 broadcasts); element [b, h, i, j] is at
 *   data + b*stride_batch + h*stride_head + i*stride_q + j*stride_k
 * Its dtype is Q's (FLASHGEN_BIAS_INPUT) or float32 (FLASHGEN_BIAS_F32).
 * -inf entries mask. */
typedef struct flashgen_bias {
  flashgen_bias_kind kind;
  const void* data;
  int64_t stride_batch;
  int64_t stride_head;
  int64_t stride_q;
  int64_t stride_k;
} flashgen_bias;

/* Optional LSE output [batch, heads_q, seqlen_q], float32, natural log, in
 * device memory: element [b, h, i] is at data + b*stride_batch +
 * h*stride_head + i. data == NULL: no LSE output. Must not overlap itself
 * (stride_head >= seqlen_q when heads_q > 1, and so on, as for o). */
typedef struct flashgen_lse {
  float* data;
  int64_t stride_batch;
  int64_t stride_head;
} flashgen_lse;

/* One forward attention call (mirrors flashgen::AttentionProblem).
 * Sizes are element counts; all may be 0 except head dims (an empty problem,
 * batch, seqlen_q or heads_q == 0, launches nothing). head_dim and head_dim_v
 * are multiples of 8 in [16, 256]; heads_q % heads_kv == 0 (GQA / MQA).
 * Fill it with flashgen_problem_init_bshd, then adjust fields. */
typedef struct flashgen_problem {
  flashgen_dtype dtype;
  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;   /* Q and K last dimension */
  int64_t head_dim_v; /* V and O last dimension */
  flashgen_mask mask;
  int has_scale;      /* 0: softmax_scale = 1/sqrt(head_dim); else `scale` (finite) */
  float scale;        /* multiplies Q before the first product, when has_scale != 0 */
  flashgen_tensor q;  /* [batch, seqlen_q, heads_q, head_dim] */
  flashgen_tensor k;  /* [batch, seqlen_k, heads_kv, head_dim] */
  flashgen_tensor v;  /* [batch, seqlen_k, heads_kv, head_dim_v] */
  flashgen_tensor o;  /* [batch, seqlen_q, heads_q, head_dim_v]; written by forward */
  flashgen_bias bias; /* kind FLASHGEN_BIAS_NONE: no bias */
  flashgen_lse lse;   /* data NULL: no LSE output */
} flashgen_problem;

/* The message of the last call that failed in the calling thread ("" if none
 * has). The pointer stays valid until the next failing call in this thread;
 * successful calls leave it unchanged. Never NULL. */
const char* flashgen_last_error(void);

/* Fill *problem for contiguous BSHD tensors: strides
 *   q/o: [seqlen*heads*dim, heads*dim, dim], k/v likewise with heads_kv,
 * no bias, no LSE, default scale (has_scale = 0). Pointers are device
 * pointers (never dereferenced here). Only the arguments needed to compute
 * strides are checked (problem non-NULL, enums in range, sizes >= 0); the full
 * check happens in flashgen_plan / flashgen_forward.
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT. */
flashgen_status flashgen_problem_init_bshd(flashgen_problem* problem, flashgen_dtype dtype,
                                           int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                           int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                                           int64_t head_dim_v, flashgen_mask mask, const void* q,
                                           const void* k, const void* v, void* o);

/* Choose the kernel for *problem on compute capability `arch` (10*major +
 * minor, e.g. 90; 0 = the current CUDA device, which needs a GPU) and write
 * its canonical spec string, NUL-terminated, to spec_out (capacity
 * spec_out_len bytes; 256 is ample for every spec today). The string can be passed
 * to flashgen_generate and flashgen_launch_spec.
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT (bad problem; NULL arguments;
 * buffer too small, the message then says how many bytes are needed and
 * spec_out is left untouched), FLASHGEN_ERROR_UNSUPPORTED (no profile for
 * arch, or the profile cannot serve the problem), FLASHGEN_ERROR_UNAVAILABLE /
 * FLASHGEN_ERROR_DRIVER (arch 0 without a usable GPU). */
flashgen_status flashgen_plan(const flashgen_problem* problem, int arch, char* spec_out,
                              size_t spec_out_len);

/* The generated CUDA source for a canonical spec string, NUL-terminated, in a
 * buffer the caller releases with flashgen_free. *source_out is set to NULL
 * on failure. No GPU needed.
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT (NULL arguments, unparsable spec),
 * FLASHGEN_ERROR_UNSUPPORTED (spec invalid for the profile of its arch). */
flashgen_status flashgen_generate(const char* spec, char** source_out);

/* Release memory returned by libflashgen (e.g. flashgen_generate's source).
 * NULL is ignored. */
void flashgen_free(void* p);

/* plan (current device) + compile or load from the cache + launch on
 * `stream`, asynchronously. Pointers in *problem are device pointers of the
 * current CUDA context (device 0's primary context is made current when
 * none is).
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT, FLASHGEN_ERROR_UNSUPPORTED,
 * FLASHGEN_ERROR_COMPILE_FAILED, FLASHGEN_ERROR_DRIVER,
 * FLASHGEN_ERROR_UNAVAILABLE (no GPU / driver / NVRTC). */
flashgen_status flashgen_forward(const flashgen_problem* problem, flashgen_stream stream);

/* Launch the kernel of canonical spec string `spec` (e.g. from flashgen_plan)
 * for *problem on `stream`, asynchronously; the kernel is compiled or read
 * from the cache and loaded on first use in the current context. The problem
 * must match the spec (dtype, head dims, mask, bias kind, LSE presence).
 * Errors: as flashgen_forward; a problem that does not match the spec is
 * FLASHGEN_ERROR_INVALID_ARGUMENT naming the mismatch, and so is a wgmma spec
 * with K or V of stride_seq 0 and seqlen_k > 1 (its TMA tensor maps cannot
 * repeat a row; flashgen_plan picks an mma.sync spec for such problems). */
flashgen_status flashgen_launch_spec(const char* spec, const flashgen_problem* problem,
                                     flashgen_stream stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHGEN_FLASHGEN_H_ */
