"""flashgen: attention CUDA kernels generated at run time (libflashgen), from Python.

Calls (CUDA tensors: torch.Tensor, or any DLPack array such as CuPy's):

    out = flashgen.attention(q, k, v, causal="bottom_right")          # BSHD
    out, lse = flashgen.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q, max_seqlen_k, return_lse=True)
    out = flashgen.attention_paged(q, k_cache, v_cache, page_table, seqused_k=lens)
    out = flashgen.decode(q, k, v, num_splits=0)                       # split-KV
    out = flashgen.merge_states(o_partial, lse_partial)

Ahead of time, no GPU needed: plan, plan_decode, generate, compile, explain,
pregen (the CLI's problem text, README "The flashgen tool").

Every call is asynchronous on the current stream of the tensors' library
(PyTorch's current stream; CuPy's; or stream=). The first call of a kernel
class compiles it with NVRTC (or reads it from the disk cache). Errors are
flashgen.Error subclasses carrying the library's messages: InvalidArgument
(a ValueError), Unsupported (a NotImplementedError), CompileError,
DriverError and Unavailable (RuntimeErrors), CacheIOError (an OSError).

With PyTorch installed, `import flashgen` also registers the operations as
torch.library custom ops (flashgen.torch), so torch.compile(fullgraph=True)
traces through them and CUDA graphs capture them.
"""

from __future__ import annotations

import sys as _sys

# PyTorch is optional; with it, the custom ops are registered at import (end of this file).
# It is imported before the native module: on the GPU machine (torch 2.11 with its CUDA 13
# wheels) importing torch after libflashgen was loaded aborted in torch's own import
# ("free(): invalid pointer"), while the other order works.
try:
    import torch as _torch_mod  # noqa: F401
except ImportError:
    _torch_mod = None

from . import _flashgen
from . import _core
from ._core import BoundCall
from ._aot import (CompiledKernel, KernelSpec, PregenResult, cli_path, compile, explain, generate, plan,
                   plan_decode, pregen, problem_text)
from ._flashgen import (CacheIOError, CompileError, DriverError, Error, InvalidArgument, Unavailable,
                        Unsupported)

__version__ = "0.4.0"
GENERATOR_VERSION = _flashgen.GENERATOR_VERSION
MAX_DECODE_SPLITS = _flashgen.MAX_DECODE_SPLITS

__all__ = [
    "attention", "attention_varlen", "attention_paged", "decode", "merge_states", "bind", "BoundCall",
    "plan", "plan_decode", "generate", "compile", "explain", "pregen", "problem_text", "cli_path",
    "gpu_available", "current_device", "KernelSpec", "CompiledKernel", "PregenResult",
    "Error", "InvalidArgument", "Unsupported", "CompileError", "DriverError", "Unavailable", "CacheIOError",
]


def gpu_available() -> bool:
    """True when the CUDA driver loads and a GPU is present. Never raises."""
    return _flashgen.gpu_available()


def current_device() -> dict:
    """The current CUDA device: ordinal, arch (10 * major + minor), name, sm_count, smem_per_block_optin."""
    return _flashgen.current_device()


# flashgen.torch's op table once its custom ops are registered (PyTorch present).
# A call goes through torch.ops.flashgen.* when _ops.wants(its tensors): under
# torch.compile / export tracing, for tensor subclasses (fake, functional), and
# when autograd records it; else straight to the eager path (_core).
_ops = None


def attention(q, k, v, *, causal=None, scale=None, bias=None, return_lse=False, window=None, softcap=None,
              sinks=None, alibi_slopes=None, out=None, num_splits=None, workspace=None, stream=None):
    """Attention over BSHD tensors; returns O, or (O, LSE) with return_lse=True.

    q [batch, seqlen_q, heads_q, head_dim], k [batch, seqlen_k, heads_kv, head_dim],
    v [batch, seqlen_k, heads_kv, head_dim_v]: float16 or bfloat16 CUDA tensors, any
    strides the library accepts (last dim contiguous, others multiples of 8
    elements, 16-byte aligned; 0 broadcasts); heads_q a multiple of heads_kv (GQA);
    head dims multiples of 8 in [16, 256], head_dim_v may differ from head_dim.
    Returns O [batch, seqlen_q, heads_q, head_dim_v] in q's dtype (written into `out`
    when given) and LSE [batch, heads_q, seqlen_q] float32, natural log.

    causal: None, "top_left" (key j visible to query i iff j <= i: SDPA's
      is_causal=True) or "bottom_right" (j <= i + seqlen_k - seqlen_q:
      FlashAttention's causal=True, the one for decode and chunked prefill).
    scale: multiplies Q K^T; None is 1/sqrt(head_dim).
    bias: additive, broadcastable to [batch, heads_q, seqlen_q, seqlen_k], q's dtype
      or float32; -inf masks.
    window: (window_left, window_right) sliding window in keys (None or -1:
      unbounded), aligned bottom-right, or as `causal` says (then window_right 0).
    softcap: cap > 0 maps each logit x to cap * tanh(x / cap) (Gemma 2); None or 0 off.
    sinks: float32 [heads_q], one logit per head in the softmax denominator.
    alibi_slopes: float32 [heads_q] or [batch, heads_q].
    num_splits: None lets the library choose the forward kernel or the split-KV
      decode (few query rows, long keys); 0 forces the decode with splits chosen
      from the SM count; 1..128 the decode with that many.
    workspace: a uint8 CUDA tensor for the decode's partials (None: one cached per
      device and stream, allocated through PyTorch's allocator, CUDA-graph safe).
    stream: a CUDA stream (int handle, torch.cuda.Stream, cupy Stream) instead of
      the current one.
    return_lse: True or False (anything else, "yes" or 1, raises InvalidArgument).
    """
    _core.bool_arg(return_lse, "return_lse")
    if _ops is not None and _ops.wants(q, k, v, bias, sinks, alibi_slopes):
        return _ops.attention(q, k, v, causal=causal, scale=scale, bias=bias, return_lse=return_lse,
                              window=window, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                              num_splits=num_splits, workspace=workspace, stream=stream)
    if _core.plain_call(bias, sinks, alibi_slopes, num_splits, workspace):  # a signature seen before?
        r = _core.dense_prepared(q, k, v, causal, scale, return_lse, window, softcap, out, stream)
        if r is not None:
            return r
    return _core.attention(q, k, v, layout="dense", causal=causal, scale=scale, bias=bias, return_lse=return_lse,
                           window=window, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                           num_splits=num_splits, workspace=workspace, stream=stream)


def bind(q, k, v, *, causal=None, scale=None, bias=None, return_lse=False, window=None, softcap=None, sinks=None,
         alibi_slopes=None, out=None):
    """One attention call with its tensors fixed, for loops that reuse their buffers: returns a
    BoundCall; `call()` (or `call(stream=s)`) launches it and returns O, or (O, LSE).

    The arguments are those of attention() (BSHD q, k, v, the same masks and modifiers, out=).
    Everything is checked, planned and the kernel loaded (compiled on a first use) here, once;
    nothing is launched. Each call() then only launches the kernel on the current stream (or
    `stream`) with the bound tensors' pointers: new values written into q, k, v (bias, sinks, ALiBi
    slopes) between calls are read, as with a CUDA graph. O (and LSE) are allocated here unless
    `out` is given, and are the same tensors on every call (`call.out`, `call.lse`). The bound
    call keeps references to its tensors; their shapes, strides and storage must not change
    (no resize_ or set_ in place). The library still checks every pointer at each launch. No
    autograd: tensors that require grad are refused. A problem the library runs as a split-KV
    decode keeps working, through attention()'s general path with the same tensors.
    """
    _core.bool_arg(return_lse, "return_lse")
    return _core.bind(q, k, v, causal=causal, scale=scale, bias=bias, return_lse=return_lse, window=window,
                      softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, out=out)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_k=None,
                     causal=None, scale=None, bias=None, return_lse=False, window=None, softcap=None, sinks=None,
                     alibi_slopes=None, out=None, num_splits=None, workspace=None, stream=None):
    """Attention over a packed (variable-length) batch (FlashAttention's varlen layout).

    q [total_q, heads_q, head_dim], k [total_k, heads_kv, head_dim], v [total_k,
    heads_kv, head_dim_v]; cu_seqlens_q, cu_seqlens_k int32 [batch + 1] CUDA
    tensors (sequence b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 and
    keys cu_seqlens_k[b] ..; read by the kernels only, never synchronized on);
    max_seqlen_q / max_seqlen_k: host ints bounding every sequence (they size the
    grid); seqused_k int32 [batch]: only that many keys of each sequence count.
    Masks, windows and ALiBi align per sequence. Returns O [total_q, heads_q,
    head_dim_v] and, with return_lse, LSE [heads_q, total_q] float32. Other
    arguments as attention(); bias is [batch, heads_q, max_seqlen_q, max_seqlen_k]
    in each sequence's own positions.
    """
    _core.bool_arg(return_lse, "return_lse")
    if _ops is not None and _ops.wants(q, k, v, bias, sinks, alibi_slopes):
        return _ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                     seqused_k=seqused_k, causal=causal, scale=scale, bias=bias,
                                     return_lse=return_lse, window=window, softcap=softcap, sinks=sinks,
                                     alibi_slopes=alibi_slopes, out=out, num_splits=num_splits,
                                     workspace=workspace, stream=stream)
    return _core.attention(q, k, v, layout="varlen", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                           max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                           causal=causal, scale=scale, bias=bias, return_lse=return_lse, window=window,
                           softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                           num_splits=num_splits, workspace=workspace, stream=stream)


def attention_paged(q, k_cache, v_cache, page_table, *, seqused_k=None, max_seqlen_k=None, cu_seqlens_q=None,
                    max_seqlen_q=None, causal=None, scale=None, bias=None, return_lse=False, window=None,
                    softcap=None, sinks=None, alibi_slopes=None, out=None, num_splits=None, workspace=None,
                    stream=None):
    """Attention over a paged KV cache (the vLLM / SGLang layout).

    k_cache [num_pages, page_size, heads_kv, head_dim], v_cache [num_pages,
    page_size, heads_kv, head_dim_v] (page_size a power of two in 1..256);
    page_table int32 [batch, max_pages_per_seq] (rows contiguous): key j of
    sequence b is slot j % page_size of page page_table[b, j // page_size]; pages
    may be shared and in any order. seqused_k int32 [batch]: each sequence's key
    count (None: max_seqlen_k each). max_seqlen_k: host bound of the key counts
    (None: max_pages_per_seq * page_size). q dense [batch, seqlen_q, heads_q,
    head_dim], or packed [total_q, heads_q, head_dim] with cu_seqlens_q and
    max_seqlen_q. Chunked prefill: seqlen_q < seqlen_k with causal="bottom_right".
    Returns O shaped like q (head_dim_v last) and, with return_lse, LSE
    [batch, heads_q, seqlen_q] (packed: [heads_q, total_q]). Other arguments as
    attention(). A page_size outside the rule (e.g. a dense k [batch, seqlen_k,
    heads_kv, head_dim]) raises InvalidArgument naming k_cache's dim 1.
    """
    _core.bool_arg(return_lse, "return_lse")
    if _ops is not None and _ops.wants(q, k_cache, v_cache, bias, sinks, alibi_slopes):
        return _ops.attention_paged(q, k_cache, v_cache, page_table, seqused_k=seqused_k,
                                    max_seqlen_k=max_seqlen_k, cu_seqlens_q=cu_seqlens_q,
                                    max_seqlen_q=max_seqlen_q, causal=causal, scale=scale, bias=bias,
                                    return_lse=return_lse, window=window, softcap=softcap, sinks=sinks,
                                    alibi_slopes=alibi_slopes, out=out, num_splits=num_splits,
                                    workspace=workspace, stream=stream)
    return _core.attention(q, k_cache, v_cache, layout="paged", page_table=page_table, seqused_k=seqused_k,
                           max_seqlen_k=max_seqlen_k, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                           causal=causal, scale=scale, bias=bias, return_lse=return_lse, window=window,
                           softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                           num_splits=num_splits, workspace=workspace, stream=stream)


def decode(q, k, v, *, num_splits=0, workspace=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k=None,
           max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, **kwargs):
    """Split-KV decode (include/flashgen/decode.hpp): the key range split over
    blocks, GQA heads packed as rows, fp32 partials in `workspace`, then merged.

    The same tensors as attention() (dense), attention_varlen() (with
    cu_seqlens_q and cu_seqlens_k) or attention_paged() (with page_table: k and v
    are then the caches); the result is theirs to the rounding of the fp32
    partials. num_splits: 0 chooses from the SM count, 1..128 as given.
    workspace: uint8 CUDA tensor (None: the package's cached one); too small a
    one raises ValueError naming the bytes needed. With page_table, k and v must
    be paged caches [num_pages, page_size, heads_kv, head_dim]: a page_size (their
    dim 1) outside the rule, e.g. a dense k's seqlen_k, raises InvalidArgument
    saying so. Other keywords as attention().
    """
    if page_table is not None:
        if cu_seqlens_k is not None:
            raise InvalidArgument("cu_seqlens_k is given with page_table; a paged cache's keys are counted by "
                                  "seqused_k (cu_seqlens_k must be None)")
        shape = getattr(k, "shape", None)
        # (other ranks: attention_paged names them; symbolic sizes of a trace: the op's eager call checks them)
        if shape is not None and len(shape) == 4 and all(type(n) is int for n in shape):
            _core.check_page_size(tuple(shape), "k", "v")
        return attention_paged(q, k, v, page_table, seqused_k=seqused_k, max_seqlen_k=max_seqlen_k,
                               cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, num_splits=num_splits,
                               workspace=workspace, **kwargs)
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                seqused_k=seqused_k, num_splits=num_splits, workspace=workspace, **kwargs)
    if seqused_k is not None or max_seqlen_q is not None or max_seqlen_k is not None:
        raise InvalidArgument("seqused_k / max_seqlen_q / max_seqlen_k are for packed batches (cu_seqlens_q) "
                              "and paged caches (page_table); a dense decode takes neither")
    return attention(q, k, v, num_splits=num_splits, workspace=workspace, **kwargs)


def merge_states(o_partial, lse_partial, *, out=None, out_dtype=None, return_lse=False, stream=None):
    """Merge S partial attention states over disjoint key sets (include/flashgen/merge.hpp):
    LSE = log sum_s exp(LSE_s), O = sum_s exp(LSE_s - LSE) O_s; -inf partials skipped.

    o_partial [num_states, batch, seqlen_q, heads, head_dim_v] float32, float16 or
    bfloat16; lse_partial [num_states, batch, heads, seqlen_q] float32. Returns O
    [batch, seqlen_q, heads, head_dim_v] of out_dtype (None: o_partial's, or out's)
    and, with return_lse, LSE [batch, heads, seqlen_q] float32 (return_lse: True or
    False; anything else raises InvalidArgument).
    """
    _core.bool_arg(return_lse, "return_lse")
    if _ops is not None and _ops.wants(o_partial, lse_partial):
        return _ops.merge_states(o_partial, lse_partial, out=out, out_dtype=out_dtype, return_lse=return_lse,
                                 stream=stream)
    return _core.merge_states(o_partial, lse_partial, out=out, out_dtype=out_dtype, return_lse=return_lse,
                              stream=stream)


if _torch_mod is not None:
    try:
        from . import torch as _torch_integration  # noqa: F401,E402
    except ImportError as _e:  # a PyTorch too old for torch.library.custom_op: eager calls only
        import warnings as _warnings
        _warnings.warn(f"flashgen: PyTorch integration off: {_e}", RuntimeWarning, stacklevel=2)
