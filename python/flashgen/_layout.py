"""The flat problem lists the native module reads (python/src/flashgen_ext.cpp).

One attention problem travels to C++ as a list of int64 in the order of
PROBLEM_FIELDS (pointers as integers, strides in elements), one merge as
MERGE_FIELDS; the module refuses a list of another length, and the CPU tests
check these names against the module's counts.
"""

PROBLEM_FIELDS = (
    "dtype", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "head_dim_v", "mask",
    "q", "q_stride_batch", "q_stride_seq", "q_stride_head",
    "k", "k_stride_batch", "k_stride_seq", "k_stride_head",
    "v", "v_stride_batch", "v_stride_seq", "v_stride_head",
    "o", "o_stride_batch", "o_stride_seq", "o_stride_head",
    "bias_kind", "bias", "bias_stride_batch", "bias_stride_head", "bias_stride_q", "bias_stride_k",
    "lse", "lse_stride_batch", "lse_stride_head",
    "window_left", "window_right",
    "sinks", "alibi_slopes", "alibi_stride_batch",
    "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "total_q", "total_k",
    "page_table", "page_table_stride", "page_size", "num_pages",
)

MERGE_FIELDS = (
    "partial_dtype", "out_dtype", "num_states", "batch", "seqlen_q", "heads", "head_dim_v",
    "o_partial", "o_partial_stride_state", "o_partial_stride_batch", "o_partial_stride_seq",
    "o_partial_stride_head",
    "lse_partial", "lse_partial_stride_state", "lse_partial_stride_batch", "lse_partial_stride_head",
    "lse_partial_stride_seq",
    "o", "o_stride_batch", "o_stride_seq", "o_stride_head",
    "lse", "lse_stride_batch", "lse_stride_head",
)

# Codes of the library's enums (include/flashgen/types.hpp), in declaration order.
DTYPES = ("f16", "bf16")
STATE_DTYPES = ("f32", "f16", "bf16")
MASKS = ("none", "causaltl", "causalbr", "windowtl", "windowbr")
BIAS_KINDS = ("none", "input", "f32")
