"""flashgen's operations as PyTorch custom ops, and an opt-in SDPA backend.

Imported by `import flashgen` when PyTorch (>= 2.5) is installed; importing it
without PyTorch raises ModuleNotFoundError saying how to install it (the
package's `torch` extra).

Custom ops (namespace "flashgen", torch.library.custom_op, each with a fake
implementation so torch.compile(fullgraph=True) and torch.export trace through
them; the real implementation is the eager path, flashgen._core):

    attention(Tensor q, Tensor k, Tensor v, <modifiers>) -> (Tensor out, Tensor lse)
    attention_varlen(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k,
                     SymInt? max_seqlen_q, SymInt? max_seqlen_k, Tensor? seqused_k, <modifiers>)
                     -> (Tensor out, Tensor lse)
    attention_paged(Tensor q, Tensor k_cache, Tensor v_cache, Tensor page_table, Tensor? seqused_k,
                    SymInt? max_seqlen_k, Tensor? cu_seqlens_q, SymInt? max_seqlen_q, <modifiers>)
                    -> (Tensor out, Tensor lse)
    merge_states(Tensor o_partial, Tensor lse_partial, ScalarType? out_dtype, bool return_lse)
                 -> (Tensor out, Tensor lse)

    <modifiers> = str causal, float? scale, Tensor? bias, bool return_lse, SymInt[]? window,
                  float? softcap, Tensor? sinks, Tensor? alibi_slopes, SymInt? num_splits,
                  Tensor? workspace

and for each an `*_out` variant that writes a caller's `Tensor(a!) out` and
returns only `lse` (mutates_args=("out",)). Schemas hold tensors and scalars
only: causal is "" (none), "top_left" or "bottom_right"; window is None or
[window_left, window_right] (-1 unbounded); lse is an empty float32 tensor
when return_lse is False, so every op has one fixed output signature. Shapes
and layouts are those of flashgen.attention & co. (README, "From Python"):
O [batch, seqlen_q, heads_q, head_dim_v] / [total_q, heads_q, head_dim_v] in
q's dtype, LSE [batch, heads_q, seqlen_q] / [heads_q, total_q] float32.

workspace (the split-KV decode's scratch) is a plain `Tensor?`, not declared
mutated: its contents mean nothing before or after a call, so no reader of it
can be reordered wrongly, and declaring it would make the functional ops
mutable, which forbids their autograd registration. Under torch.compile leave it
None: the package's cached workspace (one per device and stream) is used, and a
workspace passed as a graph input would be copied by CUDA-graph trees.

Errors: the fake implementations check only what the output shapes need (ranks)
and raise flashgen.InvalidArgument at trace time; every other rule is checked by
the real call, with the eager path's exceptions and messages. The public
functions' own argument checks (causal, window, out_dtype) run before the op,
at trace time under torch.compile.

flashgen.attention / attention_varlen / attention_paged / decode / merge_states
call the eager path directly (no dispatcher cost) unless `flashgen._ops.wants`
says the call must be seen by PyTorch: under torch.compile / torch.export
tracing, for tensor subclasses (FakeTensor, FunctionalTensor, ...), and when
autograd would record it (grad mode on and an input requires grad). Then they
call torch.ops.flashgen.* with the same arguments.

Autograd: the backward is not implemented yet. A forward with inputs that
require grad runs and returns outputs that require grad; backward through them
raises NotImplementedError naming the op. out= cannot be recorded by autograd
(as for PyTorch's own out= functions): such a call raises InvalidArgument.

CUDA graphs: the real implementation is the eager call (current stream, no host
synchronization, outputs and the cached decode workspace the only allocations);
the ops add one empty (0-element) lse tensor when return_lse is False.

SDPA: enable_sdpa() / disable_sdpa() / with sdpa(): route
torch.nn.functional.scaled_dot_product_attention's flash backend to libflashgen
through torch.nn.attention's flash-implementation registry (see enable_sdpa).
"""

import contextlib
import sys
import warnings
from typing import Optional, Sequence

try:
    import torch
except ModuleNotFoundError as _e:
    if _e.name != "torch":  # (PyTorch is there but one of its own imports is not: its message says which)
        raise
    raise ModuleNotFoundError("flashgen.torch needs PyTorch (>= 2.5), which is not installed: pip install "
                              "'flashgen[torch]' (or pip install torch); flashgen's eager calls and ahead-of-time "
                              "functions work without it", name="torch") from _e
from torch import Tensor

from . import _core
from . import _flashgen as _C

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "register_autograd"):
    raise ImportError(f"flashgen.torch needs PyTorch >= 2.5 (torch.library.custom_op); found {torch.__version__}")

__all__ = ["enable_sdpa", "disable_sdpa", "sdpa_enabled", "sdpa", "SDPA_IMPL_NAME", "OPS"]

OPS = ("attention", "attention_out", "attention_varlen", "attention_varlen_out", "attention_paged",
       "attention_paged_out", "merge_states", "merge_states_out")
"""The custom ops this module registers, as torch.ops.flashgen.<name>."""

_NS = "flashgen"
_InvalidArgument = _C.InvalidArgument

# ---- the real implementations: one eager call each ---------------------------------


def _eager_mods(causal: str, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits,
                workspace) -> dict:
    """_core.attention's keywords from an op's schema arguments."""
    return dict(causal=causal or None, scale=scale, bias=bias, return_lse=return_lse,
                window=None if window is None else tuple(window), softcap=softcap, sinks=sinks,
                alibi_slopes=alibi_slopes, num_splits=num_splits, workspace=workspace)


def _pair(result, ref: Tensor, return_lse: bool):
    """(out, lse) of an eager call; lse empty when not requested (the ops' fixed signature)."""
    if return_lse:
        return result
    return result, ref.new_empty((0,), dtype=torch.float32)


def _lse_only(result, ref: Tensor, return_lse: bool) -> Tensor:
    return result[1] if return_lse else ref.new_empty((0,), dtype=torch.float32)


@torch.library.custom_op(f"{_NS}::attention", mutates_args=())
def _attention(q: Tensor, k: Tensor, v: Tensor, causal: str, scale: Optional[float], bias: Optional[Tensor],
               return_lse: bool, window: Optional[Sequence[int]], softcap: Optional[float], sinks: Optional[Tensor],
               alibi_slopes: Optional[Tensor], num_splits: Optional[int],
               workspace: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _pair(_core.attention(q, k, v, layout="dense", **mods), q, return_lse)


@torch.library.custom_op(f"{_NS}::attention_out", mutates_args=("out",))
def _attention_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: str, scale: Optional[float],
                   bias: Optional[Tensor], return_lse: bool, window: Optional[Sequence[int]], softcap: Optional[float],
                   sinks: Optional[Tensor], alibi_slopes: Optional[Tensor], num_splits: Optional[int],
                   workspace: Optional[Tensor]) -> Tensor:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _lse_only(_core.attention(q, k, v, layout="dense", out=out, **mods), q, return_lse)


@torch.library.custom_op(f"{_NS}::attention_varlen", mutates_args=())
def _attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                      cu_seqlens_k: Optional[Tensor], max_seqlen_q: Optional[int], max_seqlen_k: Optional[int],
                      seqused_k: Optional[Tensor], causal: str, scale: Optional[float], bias: Optional[Tensor],
                      return_lse: bool, window: Optional[Sequence[int]], softcap: Optional[float],
                      sinks: Optional[Tensor], alibi_slopes: Optional[Tensor], num_splits: Optional[int],
                      workspace: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _pair(_core.attention(q, k, v, layout="varlen", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, **mods),
                 q, return_lse)


@torch.library.custom_op(f"{_NS}::attention_varlen_out", mutates_args=("out",))
def _attention_varlen_out(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                          cu_seqlens_k: Optional[Tensor], max_seqlen_q: Optional[int], max_seqlen_k: Optional[int],
                          seqused_k: Optional[Tensor], out: Tensor, causal: str, scale: Optional[float],
                          bias: Optional[Tensor], return_lse: bool, window: Optional[Sequence[int]],
                          softcap: Optional[float], sinks: Optional[Tensor], alibi_slopes: Optional[Tensor],
                          num_splits: Optional[int], workspace: Optional[Tensor]) -> Tensor:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _lse_only(_core.attention(q, k, v, layout="varlen", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                                     out=out, **mods), q, return_lse)


@torch.library.custom_op(f"{_NS}::attention_paged", mutates_args=())
def _attention_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, page_table: Tensor, seqused_k: Optional[Tensor],
                     max_seqlen_k: Optional[int], cu_seqlens_q: Optional[Tensor], max_seqlen_q: Optional[int],
                     causal: str, scale: Optional[float], bias: Optional[Tensor], return_lse: bool,
                     window: Optional[Sequence[int]], softcap: Optional[float], sinks: Optional[Tensor],
                     alibi_slopes: Optional[Tensor], num_splits: Optional[int],
                     workspace: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _pair(_core.attention(q, k_cache, v_cache, layout="paged", page_table=page_table, seqused_k=seqused_k,
                                 max_seqlen_k=max_seqlen_k, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                 **mods), q, return_lse)


@torch.library.custom_op(f"{_NS}::attention_paged_out", mutates_args=("out",))
def _attention_paged_out(q: Tensor, k_cache: Tensor, v_cache: Tensor, page_table: Tensor,
                         seqused_k: Optional[Tensor], max_seqlen_k: Optional[int], cu_seqlens_q: Optional[Tensor],
                         max_seqlen_q: Optional[int], out: Tensor, causal: str, scale: Optional[float],
                         bias: Optional[Tensor], return_lse: bool, window: Optional[Sequence[int]],
                         softcap: Optional[float], sinks: Optional[Tensor], alibi_slopes: Optional[Tensor],
                         num_splits: Optional[int], workspace: Optional[Tensor]) -> Tensor:
    mods = _eager_mods(causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace)
    return _lse_only(_core.attention(q, k_cache, v_cache, layout="paged", page_table=page_table, seqused_k=seqused_k,
                                     max_seqlen_k=max_seqlen_k, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                     out=out, **mods), q, return_lse)


@torch.library.custom_op(f"{_NS}::merge_states", mutates_args=())
def _merge_states(o_partial: Tensor, lse_partial: Tensor, out_dtype: Optional[torch.dtype],
                  return_lse: bool) -> tuple[Tensor, Tensor]:
    return _pair(_core.merge_states(o_partial, lse_partial, out_dtype=out_dtype, return_lse=return_lse), o_partial,
                 return_lse)


@torch.library.custom_op(f"{_NS}::merge_states_out", mutates_args=("out",))
def _merge_states_out(o_partial: Tensor, lse_partial: Tensor, out: Tensor, return_lse: bool) -> Tensor:
    return _lse_only(_core.merge_states(o_partial, lse_partial, out=out, return_lse=return_lse), o_partial,
                     return_lse)


# ---- fake implementations: output shapes, dtypes and devices ------------------------
# The shapes are those of _core.attention / _core.merge_states (README's table);
# everything else about the arguments is checked by the real call.


def _dims_error(what: str, got: Tensor, expected: str) -> _InvalidArgument:
    return _InvalidArgument(f"{what} has {got.dim()} dims; expected {expected}")


def _dense_shapes(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise _InvalidArgument(
            f"q, k, v have {q.dim()}, {k.dim()}, {v.dim()} dims; expected BSHD: q [batch, seqlen_q, heads_q, "
            "head_dim], k [batch, seqlen_k, heads_kv, head_dim], v [batch, seqlen_k, heads_kv, head_dim_v]")
    batch, seqlen_q, heads_q, _ = q.shape
    return (batch, seqlen_q, heads_q, v.shape[-1]), (batch, heads_q, seqlen_q)


def _packed_shapes(q: Tensor, v: Tensor) -> tuple:
    total_q, heads_q, _ = q.shape
    return (total_q, heads_q, v.shape[-1]), (heads_q, total_q)


def _varlen_shapes(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    if q.dim() != 3:
        raise _dims_error("q", q, "[total_q, heads_q, head_dim]")
    if k.dim() != 3 or v.dim() != 3:
        raise _InvalidArgument(f"k, v have {k.dim()}, {v.dim()} dims; expected k [total_k, heads_kv, head_dim], "
                               "v [total_k, heads_kv, head_dim_v]")
    return _packed_shapes(q, v)


def _paged_shapes(q: Tensor, k_cache: Tensor, v_cache: Tensor) -> tuple:
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise _InvalidArgument(f"k_cache, v_cache have {k_cache.dim()}, {v_cache.dim()} dims; expected "
                               "[num_pages, page_size, heads_kv, head_dim] and [..., head_dim_v]")
    if q.dim() == 3:
        return _packed_shapes(q, v_cache)
    if q.dim() == 4:
        batch, seqlen_q, heads_q, _ = q.shape
        return (batch, seqlen_q, heads_q, v_cache.shape[-1]), (batch, heads_q, seqlen_q)
    raise _dims_error("q", q, "[total_q, heads_q, head_dim] or [batch, seqlen_q, heads_q, head_dim]")


def _fake_lse(q: Tensor, lse_shape: tuple, return_lse: bool) -> Tensor:
    return q.new_empty(lse_shape if return_lse else (0,), dtype=torch.float32)


def _fake_pair(q: Tensor, shapes: tuple, return_lse: bool) -> tuple:
    o_shape, lse_shape = shapes
    return q.new_empty(o_shape), _fake_lse(q, lse_shape, return_lse)


@_attention.register_fake
def _(q, k, v, causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_pair(q, _dense_shapes(q, k, v), return_lse)


@_attention_out.register_fake
def _(q, k, v, out, causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_lse(q, _dense_shapes(q, k, v)[1], return_lse)


@_attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, causal, scale, bias, return_lse,
      window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_pair(q, _varlen_shapes(q, k, v), return_lse)


@_attention_varlen_out.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, out, causal, scale, bias,
      return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_lse(q, _varlen_shapes(q, k, v)[1], return_lse)


@_attention_paged.register_fake
def _(q, k_cache, v_cache, page_table, seqused_k, max_seqlen_k, cu_seqlens_q, max_seqlen_q, causal, scale, bias,
      return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_pair(q, _paged_shapes(q, k_cache, v_cache), return_lse)


@_attention_paged_out.register_fake
def _(q, k_cache, v_cache, page_table, seqused_k, max_seqlen_k, cu_seqlens_q, max_seqlen_q, out, causal, scale,
      bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    return _fake_lse(q, _paged_shapes(q, k_cache, v_cache)[1], return_lse)


def _merge_shapes(o_partial: Tensor) -> tuple:
    if o_partial.dim() != 5:
        raise _dims_error("o_partial", o_partial, "[num_states, batch, seqlen_q, heads, head_dim_v]")
    _, batch, seqlen_q, heads, head_dim_v = o_partial.shape
    return (batch, seqlen_q, heads, head_dim_v), (batch, heads, seqlen_q)


@_merge_states.register_fake
def _(o_partial, lse_partial, out_dtype, return_lse):
    o_shape, lse_shape = _merge_shapes(o_partial)
    out = o_partial.new_empty(o_shape, dtype=o_partial.dtype if out_dtype is None else out_dtype)
    return out, _fake_lse(o_partial, lse_shape, return_lse)


@_merge_states_out.register_fake
def _(o_partial, lse_partial, out, return_lse):
    return _fake_lse(o_partial, _merge_shapes(o_partial)[1], return_lse)


# ---- autograd: forward only ----------------------------------------------------------


def _no_backward(name: str):
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"flashgen.{name}: the backward is not implemented yet (libflashgen has forward kernels only). Call it "
            "under torch.no_grad() / torch.inference_mode(), or on inputs that do not require grad.")

    return backward


for _name in ("attention", "attention_varlen", "attention_paged", "merge_states"):
    torch.library.register_autograd(f"{_NS}::{_name}", _no_backward(_name))
del _name

# ---- the public functions' route into the ops ---------------------------------------

# torch.compiler.is_dynamo_compiling is `return False` in eager mode and True where
# Dynamo traces the call (torch.compile, strict export): the cheapest such test.
# Non-strict export and make_fx trace FakeTensors, which the type test catches.
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def _needs_grad(tensors) -> bool:
    for t in tensors:
        if t is not None and t.requires_grad:
            return _grad_enabled()
    return False


def _window_arg(causal, window):
    """window as the schema takes it: None or [left, right] with -1 for unbounded. A missing right
    side of a causal window is 0, which is what the eager path makes of it."""
    if window is None:
        return None
    _core.mask_code(causal, window)  # the eager path's checks and messages
    left, right = window
    if right is None:
        right = -1 if causal is None else 0
    return [-1 if left is None else left, right]


def _refuse_stream(name: str, stream) -> None:
    if stream is not None:
        raise _InvalidArgument(f"flashgen.{name}: stream= is for eager calls; under torch.compile or autograd the op "
                               "runs on PyTorch's current stream (use `with torch.cuda.stream(s):`)")


def _modifiers(name, causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace,
               stream) -> dict:
    """The ops' keyword arguments for the public functions' modifiers."""
    _refuse_stream(name, stream)
    if causal is not None:
        _core.mask_code(causal, None)  # the eager path's checks and messages
    return dict(causal=causal or "", scale=None if scale is None else float(scale), bias=bias,
                return_lse=bool(return_lse), window=_window_arg(causal, window),
                softcap=None if softcap is None else float(softcap), sinks=sinks, alibi_slopes=alibi_slopes,
                num_splits=num_splits, workspace=workspace)


def _refuse_out_with_grad(name: str, tensors) -> None:
    if _needs_grad(tensors):
        raise _InvalidArgument(f"flashgen.{name}: out= cannot be recorded by autograd (as for PyTorch's own out= "
                               "functions) and an input requires grad; call it without out=, or under "
                               "torch.no_grad()")


def _result(out: Tensor, lse: Tensor, return_lse: bool):
    return (out, lse) if return_lse else out


class _OpTable:
    """flashgen._ops: the public functions' calls through torch.ops.flashgen.* (same keywords)."""

    @staticmethod
    def wants(q, k, v=None, bias=None, sinks=None, alibi_slopes=None) -> bool:
        """Must this call go through the custom ops? Under torch.compile / export tracing; for
        tensor subclasses (fake, functional, ...); when autograd would record it. Plain torch
        tensors without grad, and other frameworks' arrays, take the eager path. Runs on every
        eager call: a few attribute reads, ordered for inference (grad mode off) first."""
        if _dynamo_compiling():
            return True
        if type(q) is not _Tensor:
            return isinstance(q, _Tensor)
        if not _grad_enabled():
            return False
        try:
            return (q.requires_grad or k.requires_grad or (v is not None and v.requires_grad)
                    or (bias is not None and bias.requires_grad) or (sinks is not None and sinks.requires_grad)
                    or (alibi_slopes is not None and alibi_slopes.requires_grad))
        except AttributeError:  # another framework's array beside q: nothing for autograd to record
            return False

    @staticmethod
    def attention(q, k, v, *, causal=None, scale=None, bias=None, return_lse=False, window=None, softcap=None,
                  sinks=None, alibi_slopes=None, out=None, num_splits=None, workspace=None, stream=None):
        mods = _modifiers("attention", causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes,
                          num_splits, workspace, stream)
        if out is None:
            o, lse = torch.ops.flashgen.attention(q, k, v, **mods)
            return _result(o, lse, return_lse)
        _refuse_out_with_grad("attention", (q, k, v, bias, sinks, alibi_slopes))
        return _result(out, torch.ops.flashgen.attention_out(q, k, v, out, **mods), return_lse)

    @staticmethod
    def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_k=None,
                         causal=None, scale=None, bias=None, return_lse=False, window=None, softcap=None, sinks=None,
                         alibi_slopes=None, out=None, num_splits=None, workspace=None, stream=None):
        mods = _modifiers("attention_varlen", causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes,
                          num_splits, workspace, stream)
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
        if out is None:
            o, lse = torch.ops.flashgen.attention_varlen(*args, **mods)
            return _result(o, lse, return_lse)
        _refuse_out_with_grad("attention_varlen", (q, k, v, bias, sinks, alibi_slopes))
        return _result(out, torch.ops.flashgen.attention_varlen_out(*args, out, **mods), return_lse)

    @staticmethod
    def attention_paged(q, k_cache, v_cache, page_table, *, seqused_k=None, max_seqlen_k=None, cu_seqlens_q=None,
                        max_seqlen_q=None, causal=None, scale=None, bias=None, return_lse=False, window=None,
                        softcap=None, sinks=None, alibi_slopes=None, out=None, num_splits=None, workspace=None,
                        stream=None):
        mods = _modifiers("attention_paged", causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes,
                          num_splits, workspace, stream)
        args = (q, k_cache, v_cache, page_table, seqused_k, max_seqlen_k, cu_seqlens_q, max_seqlen_q)
        if out is None:
            o, lse = torch.ops.flashgen.attention_paged(*args, **mods)
            return _result(o, lse, return_lse)
        _refuse_out_with_grad("attention_paged", (q, k_cache, v_cache, bias, sinks, alibi_slopes))
        return _result(out, torch.ops.flashgen.attention_paged_out(*args, out, **mods), return_lse)

    @staticmethod
    def merge_states(o_partial, lse_partial, *, out=None, out_dtype=None, return_lse=False, stream=None):
        _refuse_stream("merge_states", stream)
        if out is None:
            o, lse = torch.ops.flashgen.merge_states(o_partial, lse_partial, _torch_dtype(out_dtype), bool(return_lse))
            return _result(o, lse, return_lse)
        if out_dtype is not None and _torch_dtype(out_dtype) != out.dtype:
            raise _InvalidArgument(f"out_dtype is {out_dtype} but out has dtype {out.dtype}")
        _refuse_out_with_grad("merge_states", (o_partial, lse_partial))
        return _result(out, torch.ops.flashgen.merge_states_out(o_partial, lse_partial, out, bool(return_lse)),
                       return_lse)


_STATE_TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _torch_dtype(dtype) -> Optional[torch.dtype]:
    """merge_states' out_dtype (a torch.dtype or a name) as the schema's ScalarType."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = _core._dtype_name(dtype)
    if name not in _STATE_TORCH_DTYPES:
        raise _InvalidArgument(f"out_dtype is {dtype}; allowed: float32, float16, bfloat16")
    return _STATE_TORCH_DTYPES[name]


# ---- SDPA: libflashgen as PyTorch's flash-attention implementation ------------------

SDPA_IMPL_NAME = "flashgen"
"""The name enable_sdpa() registers with torch.nn.attention.register_flash_attention_impl."""

_SDPA_OP = "aten::_scaled_dot_product_flash_attention"
_FLASH = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)


def _sdpa_registry():
    """torch.nn.attention's flash-implementation registry, or an error naming what is missing."""
    attn = torch.nn.attention
    needed = ("register_flash_attention_impl", "activate_flash_attention_impl", "current_flash_attention_impl",
              "restore_flash_attention_impl")
    missing = [n for n in needed if not hasattr(attn, n)]
    if missing or not hasattr(torch.library, "get_kernel"):
        raise _C.Unsupported(
            f"PyTorch {torch.__version__} has no flash-attention implementation registry (torch.nn.attention."
            f"{', '.join(missing) or 'register_flash_attention_impl'}, torch.library.get_kernel; PyTorch >= 2.10): "
            "call flashgen.attention directly")
    return attn


def _sdpa_refusal(query: Tensor, key: Tensor, value: Tensor, dropout_p: float, return_debug_mask: bool) -> str:
    """Why a call of aten::_scaled_dot_product_flash_attention stays with PyTorch's kernel, or ""."""
    if dropout_p != 0.0:
        return "dropout_p > 0"
    if return_debug_mask:
        return "return_debug_mask"
    if value.shape[-1] != query.shape[-1]:
        return "head_dim_v != head_dim (the op's outputs are shaped like query)"
    if _grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "autograd records the call (PyTorch's flash backward needs PyTorch's flash forward)"
    return ""


def _sdpa_forward(original, keyset, query: Tensor, key: Tensor, value: Tensor, dropout_p: float = 0.0,
                  is_causal: bool = False, return_debug_mask: bool = False, *, scale: Optional[float] = None):
    """aten::_scaled_dot_product_flash_attention on CUDA: libflashgen, else PyTorch's own kernel.

    query [batch, heads_q, seqlen_q, head_dim], key / value [batch, heads_kv, seqlen_k, head_dim]
    (SDPA's BHSD; passed to flashgen as BSHD views, no copy). is_causal is the op's (FlashAttention
    2's) meaning, bottom-right aligned; SDPA calls this op with is_causal only when seqlen_q ==
    seqlen_k, where top-left and bottom-right agree. Returns the op's nine outputs: output shaped
    and strided like query (as the op's meta function says), logsumexp [batch, heads_q, seqlen_q]
    float32, undefined cum_seq_q / cum_seq_k, max_q, max_k, rng_state and unused (uninitialized: no
    dropout), an empty debug mask.
    """
    if not _sdpa_refusal(query, key, value, dropout_p, return_debug_mask):
        out = torch.empty_like(query)
        try:
            _, lse = _core.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                     layout="dense", causal="bottom_right" if is_causal else None, scale=scale,
                                     return_lse=True, out=out.transpose(1, 2))
        except (_C.InvalidArgument, _C.Unsupported):
            pass  # a rule of the library's (head dims, strides, alignment, arch): PyTorch's kernel takes it
        else:
            device = query.device
            rng_state = torch.empty((2,), dtype=torch.uint64, device=device)
            unused = torch.empty((), dtype=torch.uint64, device=device)
            debug_mask = torch.empty((0,), dtype=query.dtype, device=device)
            return out, lse, None, None, query.shape[2], key.shape[2], rng_state, unused, debug_mask
    return original.call_boxed(keyset, query, key, value, dropout_p, is_causal, return_debug_mask, scale=scale)


class _SdpaHandle:
    """What activate_flash_attention_impl keeps while flashgen is PyTorch's flash implementation:
    the kernel override and the SDPA backend priority to restore."""

    def __init__(self, library):
        self.library = library
        self.priority = None  # (previous order, the order set) when enable_sdpa moved FLASH first

    def prefer_flash(self) -> None:
        _init_sdp_priority()
        before = list(torch._C._get_sdp_priority_order())
        after = [_FLASH] + [b for b in before if b != _FLASH]
        if after != before:
            torch._C._set_sdp_priority_order(after)
            self.priority = (before, after)

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None
        if self.priority is not None:
            before, after = self.priority
            if list(torch._C._get_sdp_priority_order()) == after:  # unless changed since
                torch._C._set_sdp_priority_order(before)
            self.priority = None


_sdpa_handle: Optional[_SdpaHandle] = None


def _register_sdpa() -> _SdpaHandle:
    """The register_fn of torch.nn.attention.register_flash_attention_impl: overrides the CUDA
    kernel of aten::_scaled_dot_product_flash_attention (forward only; PyTorch's backward
    stays, and is never handed flashgen's outputs in eager mode, see _sdpa_refusal)."""
    global _sdpa_handle
    original = torch.library.get_kernel(_SDPA_OP, "CUDA")

    def forward(keyset, *args, **kwargs):
        return _sdpa_forward(original, keyset, *args, **kwargs)

    library = torch.library.Library("aten", "IMPL", "CUDA")  # noqa: TOR901
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.filterwarnings("ignore", message=".*previously registered kernel", category=UserWarning)
        warnings.filterwarnings("ignore", message="Warning only once for all operators", category=UserWarning)
        library.impl(_SDPA_OP.split("::")[1], forward, "CUDA", with_keyset=True)
    _sdpa_handle = _SdpaHandle(library)
    return _sdpa_handle


def _init_sdp_priority() -> None:
    """Makes PyTorch settle its default SDPA backend order now. On sm90 / sm100 with cuDNN > 9.15,
    PyTorch >= 2.10 moves cuDNN first at its first CUDA backend choice, which would undo an order set
    before it; one choice on tiny tensors runs that step. No-op without CUDA."""
    if not torch.cuda.is_available():
        return
    x = torch.empty((1, 1, 1, 16), dtype=torch.float16, device="cuda")
    try:
        torch._fused_sdp_choice(x, x, x)
    except RuntimeError:
        pass  # every backend disabled by the user: nothing to settle


def enable_sdpa(prefer_flash: bool = True) -> None:
    """Route torch.nn.functional.scaled_dot_product_attention's flash backend to libflashgen.

    Uses PyTorch's own mechanism (torch.nn.attention.register_flash_attention_impl /
    activate_flash_attention_impl, PyTorch >= 2.10; FA3 and FA4 plug in the same way):
    flashgen replaces the CUDA kernel of aten::_scaled_dot_product_flash_attention, so every
    SDPA call for which PyTorch chooses its flash backend runs libflashgen's forward, in eager
    mode, under torch.compile (Inductor calls the op) and in CUDA graphs. PyTorch's backend
    choice is unchanged, so what reaches flashgen is what PyTorch's flash backend admits:
    CUDA float16 / bfloat16 dense tensors, head dims equal and <= 256 (padded to a multiple
    of 8 by SDPA), no attn_mask, is_causal only with seqlen_q == seqlen_k (SDPA's top-left
    causal, there equal to bottom-right), GQA with enable_gqa, scale, dropout_p (see below).
    Within those calls, PyTorch's own flash kernel still runs when:
      - dropout_p > 0, or the op is asked for its debug mask;
      - autograd records the call (grad mode on and q, k or v requires grad): PyTorch's flash
        backward is then handed PyTorch's forward outputs (flashgen has no backward yet);
      - libflashgen refuses the problem (InvalidArgument / Unsupported: head dims below 16,
        strides that are not multiples of 8 elements, misaligned pointers, ...).
    Under torch.compile with training, the compiled forward runs flashgen and the compiled
    backward PyTorch's flash backward on flashgen's output and LSE (same layout and meaning).

    prefer_flash: make FLASH_ATTENTION the first backend of PyTorch's SDPA priority order, so
    that calls every backend could serve go to flash (PyTorch >= 2.10 puts cuDNN first on sm90
    / sm100 with cuDNN > 9.15). disable_sdpa() restores the previous order (unless it was
    changed in between). With prefer_flash=False, flash is reached only where it comes first
    anyway, or within torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION).

    Activating another implementation (activate_flash_attention_impl("FA4")) replaces this one.
    Raises Unsupported (a NotImplementedError) when PyTorch has no such registry.
    """
    attn = _sdpa_registry()
    attn.activate_flash_attention_impl(SDPA_IMPL_NAME)
    if prefer_flash and _sdpa_handle is not None:
        _sdpa_handle.prefer_flash()


def disable_sdpa() -> None:
    """Give SDPA's flash backend back to PyTorch's kernel and restore the backend priority order
    enable_sdpa() changed. Does nothing when flashgen is not the active implementation."""
    if sdpa_enabled():
        torch.nn.attention.restore_flash_attention_impl()


def sdpa_enabled() -> bool:
    """True while libflashgen is PyTorch's active flash-attention implementation."""
    current = getattr(torch.nn.attention, "current_flash_attention_impl", None)
    return current is not None and current() == SDPA_IMPL_NAME


@contextlib.contextmanager
def sdpa(prefer_flash: bool = True):
    """Context manager: enable_sdpa(prefer_flash) inside (unless already enabled), the previous
    state after, also on exceptions. Process-wide, as PyTorch's registry is: not a per-thread
    switch."""
    was_enabled = sdpa_enabled()
    if not was_enabled:
        enable_sdpa(prefer_flash)
    try:
        yield
    finally:
        if not was_enabled:
            disable_sdpa()


if hasattr(torch.nn.attention, "register_flash_attention_impl"):
    torch.nn.attention.register_flash_attention_impl(SDPA_IMPL_NAME, register_fn=_register_sdpa)

# ---- hook into the package -----------------------------------------------------------

# This module runs at the end of the package's __init__, which then routes through _ops.
sys.modules[__package__]._ops = _OpTable()
