/* libflashgen — C ABI (C89-compatible; usable from C, FFI and other languages).
 *
 * The same library as the C++ API in flashgen.hpp, behind plain C types.
 * Semantics of the operation (see docs/design.md, "The operation"): per batch b and
 * query head h, with g = heads_q / heads_kv and KV head h / g:
 *
 *     Qs  = round_to_dtype(Q * softmax_scale)
 *     S   = softcap(Qs K^T (fp32 accumulate)) + bias - alibi + mask
 *     P   = softmax(S) row-wise (with sinks, exp(sink_h) joins the denominator)
 *     O   = P V    (P rounded to the input dtype, fp32 accumulate)
 *     LSE = log(sum_j exp(S_ij))   (natural log, fp32; + exp(sink_h) with sinks)
 *
 * A row that sees no key (fully masked, or seqlen_k == 0) gets O = 0 and
 * LSE = -inf (with sinks: LSE = sink_h).
 *
 * Masks: key j is visible to query i iff
 *     causal:  j <= i + off
 *     window:  i + off - window_left <= j <= i + off + window_right
 *              (-1: unbounded on that side)
 * with off = 0 for the top-left masks and seqlen_k - seqlen_q for the
 * bottom-right ones; causal is the window (-1, 0). ALiBi's distance
 * |i + off - j| uses the mask's off, and the bottom-right one with no mask.
 *
 * Error handling: every function returns a flashgen_status. FLASHGEN_OK (0)
 * means success; any other value is one of the error codes below, and
 * flashgen_last_error() then returns a sentence, beginning with the function's
 * name ("flashgen_plan: ..."), saying what was wrong and what is allowed. No function ever lets a C++ exception escape. A refused call
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
  FLASHGEN_MASK_WINDOW_TOP_LEFT = 3,     /* query i sees keys i - window_left <= j <= i + window_right */
  FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT = 4, /* the same with i + seqlen_k - seqlen_q for i */
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
 * batch, seqlen_q or heads_q == 0, or a packed batch with total_q == 0,
 * launches nothing). head_dim and head_dim_v are multiples of 8 in [16, 256];
 * heads_q % heads_kv == 0 (GQA / MQA).
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
  flashgen_tensor q;  /* [batch, seqlen_q, heads_q, head_dim] (packed: [total_q, heads_q, head_dim]) */
  flashgen_tensor k;  /* [batch, seqlen_k, heads_kv, head_dim] (packed: [total_k, heads_kv, head_dim]) */
  flashgen_tensor v;  /* [batch, seqlen_k, heads_kv, head_dim_v] (packed: [total_k, ...]) */
  flashgen_tensor o;  /* [batch, seqlen_q, heads_q, head_dim_v] (packed: [total_q, ...]); written by
                         forward */
  flashgen_bias bias; /* kind FLASHGEN_BIAS_NONE: no bias */
  flashgen_lse lse;   /* data NULL: no LSE output (packed: [heads_q, total_q], stride_batch 0) */
  float softcap;      /* > 0: each logit x = Qs.K becomes softcap * tanh(x / softcap) before the
                         bias and the mask; 0: off (flashgen_problem_init_bshd sets 0). Must be 0
                         or in [FLT_MIN, 1024] (the kernels' tanh is accurate to about
                         cap * 2^-21 in absolute terms). (Added in 0.2.0.) */
  int64_t window_left;  /* sliding window, read only with FLASHGEN_MASK_WINDOW_*: query i sees keys */
  int64_t window_right; /* j with i + off - window_left <= j <= i + off + window_right, in keys; -1:
                           unbounded on that side, and a size past the keys acts as unbounded
                           (flashgen_problem_init_bshd sets -1, -1). With a window mask each >= -1
                           and seqlen_q + seqlen_k <= 2^31 - 257; with another mask both must be
                           -1; otherwise FLASHGEN_ERROR_INVALID_ARGUMENT. (Added in 0.3.0.) */
  const float* sinks;   /* attention sinks: device float32 [heads_q], one logit per query head in
                           the units of S (used as given); sink h joins the softmax denominator
                           of every row of head h, LSE includes it, a row that sees no key gets
                           O = 0 and LSE = sink_h; a -inf sink takes no weight, a NaN one makes
                           its rows NaN. NULL: off. 4-byte aligned when there are rows, else
                           FLASHGEN_ERROR_INVALID_ARGUMENT. (Added in 0.3.0.) */
  const float* alibi_slopes; /* ALiBi: device float32 slopes, (batch b, head h) at
                                alibi_slopes[b * alibi_stride_batch + h]; S_ij -= slope *
                                |i + off - j| after the softcap and the bias (off as for the
                                mask; seqlen_k - seqlen_q with FLASHGEN_MASK_NONE). NULL: off.
                                4-byte aligned when there are rows, else
                                FLASHGEN_ERROR_INVALID_ARGUMENT. (Added in 0.3.0.) */
  int64_t alibi_stride_batch; /* in elements, >= 0 (checked when alibi_slopes is set); 0: one
                                 slope per query head for every batch ([heads_q]), heads_q:
                                 [batch, heads_q] slopes. (Added in 0.3.0.) */
  /* Packed (variable-length) batch, FlashAttention's varlen layout (added in 0.4.0;
   * flashgen_problem_init_bshd sets all five to NULL / 0, a dense batch).
   * cu_seqlens_q non-NULL makes the problem a packed batch of `batch` sequences:
   *   - cu_seqlens_q and cu_seqlens_k (both required): device int32 [batch + 1],
   *     4-byte aligned, offsets in rows; sequence b owns query rows
   *     cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q and o and keys
   *     cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 of k and v;
   *   - q and o are [total_q, heads_q, dim], k and v [total_k, heads_kv, dim]:
   *     element [row, h, d] at data + row*stride_seq + h*stride_head + d, and
   *     stride_batch must be 0 for all four;
   *   - seqlen_q / seqlen_k are host upper bounds of every sequence's query rows /
   *     keys (max_seqlen_q / max_seqlen_k; the grid is sized by them);
   *   - masks, windows and ALiBi align per sequence (off = its seqlen_k - seqlen_q);
   *   - lse is [heads_q, total_q] (element [h, row] at data + h*stride_head + row;
   *     lse.stride_batch must be 0);
   *   - bias stays [batch, heads_q, seqlen_q, seqlen_k] in each sequence's own
   *     positions; alibi_slopes and sinks as for a dense batch.
   * The offsets are read on the device only, never checked by the host: they
   * must be non-decreasing from a first offset >= 0, with cu_seqlens_q[batch] <=
   * total_q and cu_seqlens_k[batch] <= total_k (otherwise the kernels read or
   * write rows of other sequences or outside the tensors); a sequence longer
   * than seqlen_q / seqlen_k is cut to that bound (rows past it are not written,
   * keys past it not read). A zero-length sequence is allowed (rows that see no
   * key get O = 0, LSE = -inf, or the sink with sinks).
   * With cu_seqlens_q NULL, cu_seqlens_k, total_q and total_k must be NULL / 0,
   * and seqused_k too unless page_table is set. Any other breach
   * (cu_seqlens_k NULL, a misaligned pointer, total_q or total_k outside
   * [0, 2^31 - 257], a non-zero stride_batch) is FLASHGEN_ERROR_INVALID_ARGUMENT
   * naming the field. A packed batch is its own kernel specialization
   * ("varlen=1" in the spec string). */
  const int32_t* cu_seqlens_q; /* device int32 [batch + 1]; NULL: dense batch */
  const int32_t* cu_seqlens_k; /* device int32 [batch + 1]; required with cu_seqlens_q, except
                                  with a page_table (then NULL) */
  const int32_t* seqused_k;    /* optional device int32 [batch], 4-byte aligned (with cu_seqlens_q
                                  or page_table): only the first seqused_k[b] keys of sequence b
                                  count (at most cu_seqlens_k[b + 1] - cu_seqlens_k[b], paged: at
                                  most seqlen_k; a KV cache allocated longer than it is filled);
                                  NULL: all of them (paged: seqlen_k each) */
  int64_t total_q;             /* rows of q and o (their extent), in [0, 2^31 - 257]; 0 without
                                  cu_seqlens_q */
  int64_t total_k;             /* rows of k and v, in [0, 2^31 - 257]; 0 without cu_seqlens_q and
                                  with a page_table */
  /* Paged KV cache (vLLM / SGLang layout; added in 0.4.0, flashgen_problem_init_bshd
   * sets all four to NULL / 0). page_table non-NULL makes k and v
   * [num_pages, page_size, heads_kv, dim]: element [page, slot, h, d] at
   * data + page*stride_batch + slot*stride_seq + h*stride_head + d. Key j of
   * sequence b is slot j % page_size of page page_table[b * page_table_stride +
   * j / page_size]; sequence b has seqused_k[b] keys (NULL: seqlen_k), seqlen_k
   * bounds them all. Pages may be shared between sequences and come in any
   * order; only the table entries and slots of a sequence's keys are read (each
   * entry must be in [0, num_pages); not checked by the host). q and o stay
   * dense, or packed with cu_seqlens_q (cu_seqlens_k NULL). Chunked prefill:
   * seqlen_q < seqlen_k with FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT. A paged cache is
   * its own kernel specialization ("paged=1"); the wgmma kernel reads pages of 8
   * or more keys in TMA boxes and gathers smaller ones with cp.async. Breaches (page_size not
   * a power of two in [1, 256], page_table_stride < ceil(seqlen_k / page_size),
   * num_pages 0 with keys, a misaligned table, the fields set without a table)
   * are FLASHGEN_ERROR_INVALID_ARGUMENT naming the field. */
  const int32_t* page_table;   /* device int32 [batch, page_table_stride]; NULL: contiguous K/V */
  int64_t page_table_stride;   /* elements between two sequences' rows of page_table */
  int64_t page_size;           /* keys per page: 1, 2, 4, ..., 256 */
  int64_t num_pages;           /* pages of k and v, in [1, 2^31 - 257] when a sequence has keys */
} flashgen_problem;

/* The message of the last call that failed in the calling thread ("" if none
 * has). The pointer stays valid until the next failing call in this thread;
 * successful calls leave it unchanged. Never NULL. */
const char* flashgen_last_error(void);

/* Fill *problem for contiguous BSHD tensors: strides
 *   q/o: [seqlen*heads*dim, heads*dim, dim], k/v likewise with heads_kv,
 * no bias, no LSE, default scale (has_scale = 0), no softcap, window sizes -1, -1,
 * no sinks, no ALiBi (alibi_stride_batch 0), a dense batch (cu_seqlens_q,
 * cu_seqlens_k, seqused_k NULL, total_q and total_k 0). Pointers are device
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
 * minor in [10, 999], e.g. 90; 0 = the current CUDA device, which needs a GPU;
 * any other value is FLASHGEN_ERROR_INVALID_ARGUMENT, as in every function
 * here that takes an arch) and write
 * its canonical spec string, NUL-terminated, to spec_out (capacity
 * spec_out_len bytes; 256 is ample for every spec today). The string can be passed
 * to flashgen_generate and flashgen_launch_spec.
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT (bad problem, including O and LSE
 * sharing bytes; a problem one launch cannot run: seqlen_q or seqlen_k above
 * 2^31 - 257, or more than 2^31 - 1 work items; NULL arguments; buffer too
 * small, the message then says how many bytes are needed and spec_out is left
 * untouched), FLASHGEN_ERROR_UNSUPPORTED (no profile for arch, or the profile
 * cannot serve the problem), FLASHGEN_ERROR_UNAVAILABLE / FLASHGEN_ERROR_DRIVER
 * (arch 0 without a usable GPU). */
flashgen_status flashgen_plan(const flashgen_problem* problem, int arch, char* spec_out,
                              size_t spec_out_len);

/* As flashgen_plan for compute capability `arch` (10*major+minor in [10, 999],
 * e.g. 90; 0 is not accepted here), with the tune files' entries
 * (FLASHGEN_TUNE_FILE, the cache directory's tune.yml; their format and how an
 * entry is matched: include/flashgen/tune.hpp; `flashgen tune` writes them) recorded on the
 * GPU named `device_name` (NUL-terminated, as cuDeviceGetName reports it, e.g.
 * "NVIDIA H200") instead of those of this machine's GPU: a builder without
 * that GPU plans the kernels a fleet of them will run (the CLI's
 * `flashgen pregen --device`, Python's plan(device=)). Entries of other
 * devices are ignored with one notice on stderr, as flashgen_plan does. No GPU
 * needed.
 * Errors: as flashgen_plan; FLASHGEN_ERROR_INVALID_ARGUMENT also for arch
 * outside [10, 999] (0 included) and for a device_name that is NULL or not 1
 * to 256 printable ASCII characters (what a tune file can record). */
flashgen_status flashgen_plan_for_device(const flashgen_problem* problem, int arch, const char* device_name,
                                         char* spec_out, size_t spec_out_len);

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
 * must match the spec (dtype, head dims, mask, bias kind, LSE presence,
 * softcap, sinks and ALiBi on or off, packed or dense batch).
 * Errors: as flashgen_forward; a problem that does not match the spec is
 * FLASHGEN_ERROR_INVALID_ARGUMENT naming the mismatch, and so is a wgmma spec
 * with K or V of stride_seq 0 and seqlen_k > 1 (its TMA tensor maps cannot
 * repeat a row; flashgen_plan picks an mma.sync spec for such problems). */
flashgen_status flashgen_launch_spec(const char* spec, const flashgen_problem* problem,
                                     flashgen_stream stream);

/* ---- merge of attention states (mirrors flashgen/merge.hpp) ----------------
 *
 * Given S partial attention states of the same queries over disjoint key sets
 * (split-KV splits, or key-range chunks computed on other GPUs), per batch b,
 * query row i and head h:
 *
 *     LSE = log(sum_s exp(LSE_s))            natural log, float32
 *     O   = sum_s exp(LSE_s - LSE) * O_s
 *
 * A partial with LSE_s = -inf contributes nothing (its O_s is never read); a
 * row whose partials are all -inf gets O = 0 and LSE = -inf; any finite LSE
 * magnitude works; a NaN or +inf LSE_s makes that row NaN, and a NaN in an
 * O_s that counts reaches that row only. Arithmetic is float32. */

/* Element type of the partial and merged O tensors of a merge. */
typedef enum flashgen_state_dtype {
  FLASHGEN_STATE_F32 = 0,  /* float32 (split-KV workspaces) */
  FLASHGEN_STATE_F16 = 1,  /* IEEE binary16 */
  FLASHGEN_STATE_BF16 = 2, /* bfloat16 */
  FLASHGEN_STATE_RANGE_MIN_ = -0x7FFFFFFF - 1,
  FLASHGEN_STATE_RANGE_MAX_ = 0x7FFFFFFF
} flashgen_state_dtype;

/* The partial O tensors [num_states, batch, seqlen_q, heads, head_dim_v] in
 * device memory: element [s, b, i, h, d] is at
 *   data + s*stride_state + b*stride_batch + i*stride_seq + h*stride_head + d
 * (ELEMENT strides, >= 0, multiples of 16 bytes or 0; data 16-byte aligned). */
typedef struct flashgen_states {
  const void* data;
  int64_t stride_state;
  int64_t stride_batch;
  int64_t stride_seq;
  int64_t stride_head;
} flashgen_states;

/* The partial LSEs [num_states, batch, heads, seqlen_q], float32, natural log,
 * in device memory: element [s, b, h, i] is at
 *   data + s*stride_state + b*stride_batch + h*stride_head + i*stride_seq
 * (stride_seq is 1 for the layout flashgen_forward writes). */
typedef struct flashgen_states_lse {
  const float* data;
  int64_t stride_state;
  int64_t stride_batch;
  int64_t stride_head;
  int64_t stride_seq;
} flashgen_states_lse;

/* One merge (mirrors flashgen::MergeProblem). num_states in [1, 1024];
 * head_dim_v a multiple of 8 in [8, 512]; batch, seqlen_q, heads >= 0 (an
 * empty merge launches nothing). o [batch, seqlen_q, heads, head_dim_v] of
 * out_dtype and lse [batch, heads, seqlen_q] (data NULL: none) are written;
 * they must not broadcast, overlap themselves, each other or any input.
 * Fill it with flashgen_merge_problem_init, then adjust fields. */
typedef struct flashgen_merge_problem {
  flashgen_state_dtype partial_dtype;
  flashgen_state_dtype out_dtype;
  int64_t num_states;
  int64_t batch;
  int64_t seqlen_q;
  int64_t heads;
  int64_t head_dim_v;
  flashgen_states o_partial;
  flashgen_states_lse lse_partial;
  flashgen_tensor o; /* [batch, seqlen_q, heads, head_dim_v]; stride_head steps over heads */
  flashgen_lse lse;  /* [batch, heads, seqlen_q]; data NULL: no LSE output */
} flashgen_merge_problem;

/* Fill *problem for contiguous tensors: o_partial [num_states, batch,
 * seqlen_q, heads, head_dim_v], lse_partial [num_states, batch, heads,
 * seqlen_q], o [batch, seqlen_q, heads, head_dim_v], lse [batch, heads,
 * seqlen_q] (NULL: no LSE output). Only problem non-NULL, the enums and
 * sizes >= 0 are checked here; flashgen_plan_merge / flashgen_merge_states
 * check the rest.
 * Errors: FLASHGEN_ERROR_INVALID_ARGUMENT. */
flashgen_status flashgen_merge_problem_init(flashgen_merge_problem* problem, flashgen_state_dtype partial_dtype,
                                            flashgen_state_dtype out_dtype, int64_t num_states, int64_t batch,
                                            int64_t seqlen_q, int64_t heads, int64_t head_dim_v,
                                            const void* o_partial, const float* lse_partial, void* o, float* lse);

/* The combine kernel's canonical spec string for *problem on `arch` (0 = the
 * current device), written as flashgen_plan does.
 * Errors: as flashgen_plan. */
flashgen_status flashgen_plan_merge(const flashgen_merge_problem* problem, int arch, char* spec_out,
                                    size_t spec_out_len);

/* Split-KV decode (flashgen/decode.hpp, docs/design.md "The split-KV
 * forward"): *problem run as a fwd_split launch (GQA packing, the key range
 * split over blocks, fp32 partials in a workspace) and a combine launch; O and
 * LSE as flashgen_forward writes them.
 *
 * flashgen_decode_workspace_bytes: the device workspace bytes (*bytes) a
 * decode of *problem needs on compute capability `arch` with `sm_count` SMs
 * and `num_splits` splits (0: chosen as flashgen_decode chooses them on such a
 * device; 1..128: as given); *num_splits_out (if not NULL) gets the number of
 * splits. arch 0 and sm_count 0 mean the current CUDA device's (what
 * flashgen_decode on it needs; that asks for a GPU), otherwise no GPU is needed;
 * sm_count only chooses the splits, so with num_splits 1..128 it is not used
 * (0 then asks for no GPU). Errors: FLASHGEN_ERROR_INVALID_ARGUMENT (the
 * problem, num_splits, sm_count, a NULL bytes; reported before a missing GPU),
 * FLASHGEN_ERROR_UNSUPPORTED (no profile for the arch),
 * FLASHGEN_ERROR_UNAVAILABLE / FLASHGEN_ERROR_DRIVER (arch 0, or sm_count 0
 * with num_splits 0, without a usable GPU; the message says what to pass). */
flashgen_status flashgen_decode_workspace_bytes(const flashgen_problem* problem, int arch, int sm_count,
                                                int num_splits, int64_t* bytes, int* num_splits_out);

/* Decode on the current device on `stream`, asynchronously, with `num_splits`
 * (0: chosen from the problem and the device's SMs; 1..128: as given).
 * workspace: device memory of workspace_bytes bytes, 256-byte aligned, at least
 * flashgen_decode_workspace_bytes for this device; the call then allocates
 * nothing and can be captured in a CUDA graph (after a first call has loaded
 * the kernels). NULL: the library's workspace for the current context and
 * stream (allocated on first use, grown when a larger one is needed, kept).
 * Errors: as flashgen_forward; a workspace too small or misaligned is
 * FLASHGEN_ERROR_INVALID_ARGUMENT. */
flashgen_status flashgen_decode(const flashgen_problem* problem, int num_splits, void* workspace,
                                int64_t workspace_bytes, flashgen_stream stream);

/* plan (current device) + compile or load from the cache + launch of the merge
 * on `stream`, asynchronously.
 * Errors: as flashgen_forward. */
flashgen_status flashgen_merge_states(const flashgen_merge_problem* problem, flashgen_stream stream);

/* Launch the combine kernel of canonical spec string `spec` (e.g. from
 * flashgen_plan_merge) for *problem on `stream`; the problem must match the
 * spec (family combine, partial and output dtypes, head_dim_v, LSE presence).
 * Errors: as flashgen_launch_spec. */
flashgen_status flashgen_launch_merge_spec(const char* spec, const flashgen_merge_problem* problem,
                                           flashgen_stream stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHGEN_FLASHGEN_H_ */
