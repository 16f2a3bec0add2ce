"""The eager calls: tensors in, one native call, tensors out.

Every public operation of flashgen (attention, attention_varlen,
attention_paged, decode, merge_states) ends here. This module reads each
tensor's pointer, shape, strides, dtype and device (PyTorch tensors directly;
anything else through DLPack), checks the shapes against each other (the
library checks strides, alignment and every rule of the operation), fills the
flat problem list of _layout.py and calls the native module once. Outputs are
allocated with the inputs' own library (torch.empty, or `empty` of the module
the array type comes from, e.g. cupy.empty) unless given.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from . import _flashgen as _C
from ._aot import _int_arg
from ._layout import BIAS_KINDS, DTYPES, MASKS, MERGE_FIELDS, PROBLEM_FIELDS, STATE_DTYPES

if len(PROBLEM_FIELDS) != _C.PROBLEM_FIELDS or len(MERGE_FIELDS) != _C.MERGE_FIELDS:  # pragma: no cover
    raise ImportError("flashgen: the Python layer and the native module disagree on the problem layout "
                      f"({len(PROBLEM_FIELDS)}/{_C.PROBLEM_FIELDS}, {len(MERGE_FIELDS)}/{_C.MERGE_FIELDS})")

_MAX_ROWS = 1 << 62  # (the library refuses what its kernels cannot count, naming the bound)
_P = {name: i for i, name in enumerate(PROBLEM_FIELDS)}  # position of each field in the flat list
_M = {name: i for i, name in enumerate(MERGE_FIELDS)}
_DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}
_STATE_CODE = {name: i for i, name in enumerate(STATE_DTYPES)}
_MASK_CODE = {name: i for i, name in enumerate(MASKS)}

# ---- tensors ---------------------------------------------------------------------

torch: Any = sys.modules.get("torch")


def _torch():
    global torch
    if torch is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
    return torch


_TORCH_DTYPES: dict = {}


_TORCH_TYPES: dict = {}  # the other way: "f16" -> torch.float16, ...


def _torch_dtypes():
    t = _torch()
    if t is not None and not _TORCH_DTYPES:
        _TORCH_DTYPES.update({t.float16: "f16", t.bfloat16: "bf16", t.float32: "f32", t.int32: "i32"})
        _TORCH_TYPES.update({"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32})
    return _TORCH_DTYPES


def _is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


# DLPack's device types other than kDLCUDA (2), by name (dlpack.h, DLDeviceType).
_DLPACK_DEVICES = {1: "CPU", 3: "CUDA pinned host memory", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                   10: "ROCm", 11: "ROCm pinned host memory", 12: "an extension device", 13: "CUDA managed memory",
                   14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


class _View:
    """What the call needs of one array: pointer, shape, strides (elements), dtype name, device."""

    __slots__ = ("obj", "ptr", "shape", "stride", "dtype", "device", "is_torch")

    def __init__(self, obj, name: str):
        self.obj = obj
        if _is_torch(obj):  # the attributes cheapest to read (each is ~0.1 us; device.type is 0.35)
            self.is_torch = True
            if not obj.is_cuda:
                raise _C.InvalidArgument(f"{name} is on device '{obj.device}'; flashgen runs on CUDA tensors")
            self.ptr = obj.data_ptr()
            self.shape = obj.shape  # torch.Size, a tuple
            self.stride = obj.stride()
            self.dtype = _TORCH_DTYPES.get(obj.dtype) or _torch_dtypes().get(obj.dtype, str(obj.dtype))
            self.device = obj.get_device()
            return
        self.is_torch = False
        if not hasattr(obj, "__dlpack__"):
            raise _C.InvalidArgument(
                f"{name} is a {type(obj).__module__}.{type(obj).__qualname__}; expected a torch.Tensor or an "
                "array that supports DLPack (__dlpack__, e.g. a CuPy array) on a CUDA device")
        ptr, shape, stride, dtype, device_type, device_id = _C.dlpack_view(obj)
        if device_type != 2:  # kDLCUDA
            where = _DLPACK_DEVICES.get(device_type)
            where = f"{where} (DLPack device type {device_type})" if where else f"DLPack device type {device_type}"
            raise _C.InvalidArgument(f"{name} is on {where}; flashgen runs on CUDA memory (kDLCUDA, 2)")
        self.ptr, self.shape, self.stride, self.dtype, self.device = ptr, tuple(shape), tuple(stride), dtype, device_id


def _expect(v: _View, name: str, shape: tuple, dtypes: tuple, what: str) -> None:
    """Refuses a shape or dtype other than the call's, naming both."""
    if v.shape != shape:
        raise _C.InvalidArgument(f"{name} has shape {list(v.shape)}; expected {list(shape)} ({what})")
    if v.dtype not in dtypes:
        raise _C.InvalidArgument(f"{name} has dtype {v.dtype}; allowed: {', '.join(dtypes)}")


def _last_contiguous(v: _View, name: str) -> None:
    """The library's views have no stride for the last dim: it must be 1 (or of extent 1)."""
    if v.shape and v.shape[-1] > 1 and v.stride[-1] != 1:
        raise _C.InvalidArgument(f"{name} has strides {list(v.stride)}; its last dim must be contiguous (stride "
                                 "1): pass .contiguous() or a view whose last dim has stride 1")


def _vector(v: _View, name: str, shape: tuple, what: str) -> None:
    """An int32 / float32 array the kernels read as consecutive elements."""
    if v.shape != shape or v.dtype != ("i32" if what == "int32" else "f32"):
        raise _C.InvalidArgument(f"{name} has shape {list(v.shape)} and dtype {v.dtype}; expected {what} "
                                 f"{list(shape)}")
    if shape[0] > 1 and v.stride[0] != 1:
        raise _C.InvalidArgument(f"{name} has stride {v.stride[0]}; it must be contiguous (stride 1)")


def _real(x, name: str, allow_none: bool = True):
    """A host float argument (scale, softcap), refused by name when it is not one."""
    if x is None and allow_none:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise _C.InvalidArgument(f"{name} is {type(x).__qualname__} {x!r}; expected a float")
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise _C.InvalidArgument(f"{name} is {x!r}, not a float ({e})") from None


def bool_arg(x, name: str) -> bool:
    """A host bool argument (return_lse), refused by name when it is anything else ("yes", 1, None)."""
    if x is not True and x is not False:
        raise _C.InvalidArgument(f"{name} is {type(x).__qualname__} {x!r}; expected True or False")
    return x


def check_page_size(shape, k_name: str, v_name: str) -> None:
    """With page_table, k and v are paged caches [num_pages, page_size, heads_kv, head_dim]: page_size,
    their dim 1, must be a power of two in [1, MAX_PAGE_SIZE] (a dense [batch, seqlen_k, ...] k
    passed with a page_table lands here)."""
    page = shape[1]
    if not (1 <= page <= _C.MAX_PAGE_SIZE and page & (page - 1) == 0):
        raise _C.InvalidArgument(
            f"{k_name} has shape {list(shape)}: with page_table, {k_name} and {v_name} must be paged KV caches shaped "
            f"[num_pages, page_size, heads_kv, head_dim] (head_dim_v for {v_name}), and page_size is their dim 1, "
            f"here {page}, which must be a power of two in [1, {_C.MAX_PAGE_SIZE}] (a dense {k_name} [batch, "
            "seqlen_k, heads_kv, head_dim] takes no page_table)")


def _native_ints(values, names, what: str) -> None:
    """Every value fits the native module's int64 (else InvalidArgument naming the field, not nanobind's
    TypeError)."""
    for value, name in zip(values, names):
        if not -(1 << 63) <= value < (1 << 63):
            raise _C.InvalidArgument(f"{what}: {name} is {value}, outside the int64 range")


def _same_device(views, ref: _View) -> None:
    for name, v in views:
        if v is not None and v.device != ref.device:
            raise _C.InvalidArgument(f"{name} is on cuda:{v.device} but q is on cuda:{ref.device}; every tensor "
                                     "of a call must be on one device")


def _empty_like_module(ref: _View, shape: tuple, dtype: str):
    """A new array of `shape` on ref's device: torch.empty, or `empty` of ref's array module."""
    if ref.is_torch:
        return torch.empty(shape, dtype=_TORCH_TYPES[dtype], device=ref.obj.device)
    mod = sys.modules.get(type(ref.obj).__module__.split(".")[0])
    if mod is None or not hasattr(mod, "empty"):
        raise _C.InvalidArgument(f"cannot allocate an output for a {type(ref.obj).__qualname__}: pass out=")
    np_name = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}[dtype]
    np_dtype = ref.obj.dtype if dtype == ref.dtype else getattr(mod, np_name, np_name)
    device_ctx = getattr(getattr(mod, "cuda", None), "Device", None)
    if device_ctx is not None:
        with device_ctx(ref.device):
            return mod.empty(shape, dtype=np_dtype)
    return mod.empty(shape, dtype=np_dtype)


def _stream_handle(stream, ref: _View, device: int = -1) -> int:
    """The CUDA stream of the call: `stream` if given, else the current stream of ref's library.
    A given stream that names its device (torch's `device_index`) must be on the call's device
    (ref's, else `device`)."""
    if stream is not None:
        if isinstance(stream, int) and not isinstance(stream, bool):
            h = stream
        else:
            h = None
            for attr in ("cuda_stream", "ptr", "handle"):
                a = getattr(stream, attr, None)
                if isinstance(a, int) and not isinstance(a, bool):
                    h = a
                    break
            if h is None and hasattr(stream, "__cuda_stream__"):
                h = int(stream.__cuda_stream__()[1])
            on = getattr(stream, "device_index", None)
            dev = ref.device if ref is not None else device
            if isinstance(on, int) and dev >= 0 and on != dev:
                raise _C.InvalidArgument(f"stream is on CUDA device {on}; the tensors are on device {dev}")
        if h is not None:
            if not 0 <= h < (1 << 64):
                raise _C.InvalidArgument(f"stream is {h}; a CUstream handle is an unsigned 64-bit value")
            return h
        raise _C.InvalidArgument(f"stream is a {type(stream).__qualname__}; expected an int (CUstream), a "
                                 "torch.cuda.Stream, a cupy Stream or an object with __cuda_stream__")
    if ref.is_torch:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(ref.device)
        return torch.cuda.current_stream(ref.obj.device).cuda_stream
    mod = sys.modules.get(type(ref.obj).__module__.split(".")[0])
    cuda = getattr(mod, "cuda", None)
    if cuda is not None and hasattr(cuda, "get_current_stream"):
        return cuda.get_current_stream().ptr
    return 0  # the legacy default stream


class _DeviceGuard:
    """Makes ref's device current for the call when it is not (torch: torch.cuda.device)."""

    __slots__ = ("ctx",)

    def __init__(self, ref: _View):
        self.ctx = None
        if ref.is_torch:
            if torch.cuda.current_device() != ref.device:
                self.ctx = torch.cuda.device(ref.device)
        else:
            mod = sys.modules.get(type(ref.obj).__module__.split(".")[0])
            dev = getattr(getattr(mod, "cuda", None), "Device", None)
            if dev is not None:
                self.ctx = dev(ref.device)

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


# ---- workspace -------------------------------------------------------------------

# Decode workspaces, one per (device, stream): reused by every later decode on that
# stream that fits, replaced by a larger one when needed (torch's caching
# allocator, stream-ordered). During CUDA-graph capture a missing or small one is
# allocated from the graph's pool for that call and not kept.
_workspaces: dict = {}


def _capturing(ref: _View) -> bool:
    return ref.is_torch and torch.cuda.is_current_stream_capturing()


def _workspace_for(ref: _View, stream: int, nbytes: int):
    """A workspace of at least nbytes for a decode on `stream`: the cached one when it is large
    enough (never during capture), else a new one, kept unless the stream is being captured."""
    key = (ref.device, stream)
    capturing = _capturing(ref)
    ws = None if capturing else _workspaces.get(key)
    if ws is not None and _nbytes(ws) >= nbytes:
        return ws
    if ref.is_torch:
        # From the graph's private pool while capturing (it lives as long as the graph);
        # else from the caching allocator, stream-ordered on `stream`.
        ws = torch.empty(nbytes, dtype=torch.uint8, device=ref.obj.device)
        if stream != _stream_handle(None, ref):
            ws.record_stream(torch.cuda.ExternalStream(stream, device=ref.obj.device))
        if not capturing:
            _workspaces[key] = ws
        return ws
    mod = sys.modules.get(type(ref.obj).__module__.split(".")[0])
    ws = mod.empty(nbytes, dtype=getattr(mod, "uint8", "uint8"))
    _workspaces[key] = ws
    return ws


def _nbytes(a) -> int:
    return a.numel() * a.element_size() if _is_torch(a) else int(a.nbytes)


def _ptr(a) -> int:
    return a.data_ptr() if _is_torch(a) else _View(a, "workspace").ptr


# ---- masks -----------------------------------------------------------------------


def mask_code(causal, window) -> tuple:
    """(mask code, window_left, window_right) of the causal= and window= arguments."""
    if causal is False:  # SDPA's and FlashAttention's spelling of "no causal mask"
        causal = None
    if causal is not None and not isinstance(causal, str):
        raise _C.InvalidArgument(
            f"causal is {causal!r}; allowed: None, 'top_left' (j <= i, SDPA's is_causal=True) or 'bottom_right' "
            "(j <= i + seqlen_k - seqlen_q, FlashAttention's causal=True)")
    if causal not in (None, "top_left", "bottom_right"):
        raise _C.InvalidArgument(f"causal is '{causal}'; allowed: None, 'top_left', 'bottom_right'")
    if window is None:
        return (_MASK_CODE["none"] if causal is None else
                _MASK_CODE["causaltl" if causal == "top_left" else "causalbr"]), -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise _C.InvalidArgument(f"window is {window!r}; expected (window_left, window_right), each an int >= -1 "
                                 "or None (unbounded)") from None
    left = -1 if left is None else left
    right = -1 if right is None else right
    for side, val in (("window_left", left), ("window_right", right)):
        if isinstance(val, bool) or not isinstance(val, int) or val < -1:
            raise _C.InvalidArgument(f"window: {side} is {val!r}; allowed: an int >= -1 or None (unbounded)")
    if causal is not None:
        if right not in (0, -1) or window[1] is not None and right != 0:
            raise _C.InvalidArgument(
                f"window is {window!r} with causal='{causal}'; a causal window has window_right 0 (or None)")
        right = 0
    code = _MASK_CODE["windowtl" if causal == "top_left" else "windowbr"]
    return code, left, right


# ---- attention -------------------------------------------------------------------

# Plain dense torch calls (no bias, sinks, ALiBi, workspace or num_splits),
# prepared once per signature: the shapes, strides, dtypes and devices of q, k, v
# (and out), the mask, window, scale, softcap and return_lse. A prepared call only
# reads the four or five data pointers and the stream (the given one, else the
# current one), allocates the outputs and launches
# (_flashgen.PreparedCall: the library still checks every pointer; the plan is
# remade at most every second and when the current CUDA context changes). False marks a
# signature the library runs as a split-KV decode (the general path serves it).
_prepared: dict = {}
_MAX_PREPARED = 1024
_cuda_device = _raw_stream = None  # torch._C's current-device and current-stream readers


def _prepare_ready() -> bool:
    global _cuda_device, _raw_stream
    if _raw_stream is None and torch is not None:
        _cuda_device = getattr(torch._C, "_cuda_getDevice", None)
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if _cuda_device is None:
            _raw_stream = None
    return _raw_stream is not None


def _dense_key(q, k, v, causal, window, scale, softcap, return_lse, out):
    """The signature of a plain dense call on CUDA torch tensors of one device, or None. Each
    argument's type is part of the key beside its value (False == 0 == 0.0 in Python, and the
    general path refuses some of them)."""
    T = torch.Tensor
    if type(q) is not T or type(k) is not T or type(v) is not T or (out is not None and type(out) is not T):
        return None
    dev = q.get_device()
    if k.get_device() != dev or v.get_device() != dev or (out is not None and out.get_device() != dev):
        return None
    if (type(scale) not in _PLAIN or type(softcap) not in _PLAIN or type(causal) not in _PLAIN
            or window is not None and (type(window) is not tuple or any(type(w) not in _PLAIN for w in window))):
        return None  # (other types are left to the general path's checks, unprepared)
    # (get_device() is the index only: is_cuda tells CUDA from other devices; the general path
    # refuses non-CUDA tensors, so such keys are never prepared)
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, dev,
            q.is_cuda, k.is_cuda, v.is_cuda, out is None or out.is_cuda, type(causal), causal,
            None if window is None else tuple((type(w), w) for w in window),
            type(scale), scale, type(softcap), softcap, bool(return_lse),
            None if out is None else (out.shape, out.stride(), out.dtype))


_PLAIN = (type(None), bool, int, float, str)


def plain_call(bias, sinks, alibi_slopes, num_splits, workspace) -> bool:
    """Whether a dense call may be prepared: none of the arguments a signature does not fix."""
    return bias is None and sinks is None and alibi_slopes is None and num_splits is None and workspace is None


def dense_prepared(q, k, v, causal, scale, return_lse, window, softcap, out, stream):
    """A plain dense call (plain_call) of a prepared signature on the current device, launched on
    `stream` (None: the current one): O, or (O, LSE); None when the general path must run it."""
    if _raw_stream is None:
        return None
    key = _dense_key(q, k, v, causal, window, scale, softcap, return_lse, out)
    prepared = None if key is None else _prepared.get(key)
    return _run_prepared(prepared, key[9], q, k, v, return_lse, out, stream) if prepared else None


def _run_prepared(prepared, dev, q, k, v, return_lse, out, stream):
    """Launches a prepared signature (dev: q's device index) on `stream` (None: the current
    stream); None when it must take the general path (another current device, or the library now
    runs it as a split-KV decode)."""
    if dev != _cuda_device():
        return None
    handle = _raw_stream(dev) if stream is None else _stream_handle(stream, None, dev)
    call, o_shape, lse_shape = prepared
    o = q.new_empty(o_shape) if out is None else out
    lse = q.new_empty(lse_shape, dtype=torch.float32) if return_lse else None
    if not call.run(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), 0 if lse is None else lse.data_ptr(),
                    handle):
        return None
    return (o, lse) if return_lse else o


def attention(q, k, v, *, layout: str, causal=None, scale=None, bias=None, return_lse=False, window=None,
              softcap=None, sinks=None, alibi_slopes=None, out=None, num_splits=None, workspace=None, stream=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
              page_table=None, _bind=False):
    """The one eager implementation behind attention / attention_varlen / attention_paged / decode
    (and, with _bind, flashgen.bind: everything checked and planned, nothing launched)."""
    memo_key = None
    if (not _bind and layout == "dense" and plain_call(bias, sinks, alibi_slopes, num_splits, workspace)
            and _prepare_ready()):
        memo_key = _dense_key(q, k, v, causal, window, scale, softcap, return_lse, out)
        prepared = None if memo_key is None else _prepared.get(memo_key)
        if prepared:  # (the custom ops' way in: flashgen.attention tried it already)
            r = _run_prepared(prepared, memo_key[9], q, k, v, return_lse, out, stream)
            if r is not None:
                return r
        if prepared is not None:  # (False: a decode signature; or it could not run here)
            memo_key = None
    qv = _View(q, "q")
    kv = _View(k, "k")
    vv = _View(v, "v")
    _last_contiguous(qv, "q")
    _last_contiguous(kv, "k")
    _last_contiguous(vv, "v")
    dtype = qv.dtype
    if dtype not in _DTYPE_CODE:
        raise _C.InvalidArgument(f"q has dtype {dtype}; allowed: float16, bfloat16")
    if kv.dtype != dtype or vv.dtype != dtype:
        raise _C.InvalidArgument(f"q, k and v have dtypes {qv.dtype}, {kv.dtype}, {vv.dtype}; they must be one "
                                 "(float16 or bfloat16)")
    f = [0] * len(PROBLEM_FIELDS)
    f[_P["dtype"]] = _DTYPE_CODE[dtype]
    f[_P["mask"]], f[_P["window_left"]], f[_P["window_right"]] = mask_code(causal, window)
    cuq = cuk = used = table = None

    if layout == "dense":
        if len(qv.shape) != 4 or len(kv.shape) != 4 or len(vv.shape) != 4:
            raise _C.InvalidArgument(
                f"q, k, v have {len(qv.shape)}, {len(kv.shape)}, {len(vv.shape)} dims; expected BSHD: q [batch, "
                "seqlen_q, heads_q, head_dim], k [batch, seqlen_k, heads_kv, head_dim], v [batch, seqlen_k, "
                "heads_kv, head_dim_v]")
        B, Sq, Hq, D = qv.shape
        _, Sk, Hkv, _ = kv.shape
        Dv = vv.shape[3]
        _expect(kv, "k", (B, Sk, Hkv, D), (dtype,), "batch, seqlen_k, heads_kv, head_dim")
        _expect(vv, "v", (B, Sk, Hkv, Dv), (dtype,), "batch, seqlen_k, heads_kv, head_dim_v")
        o_shape = (B, Sq, Hq, Dv)
        lse_shape = (B, Hq, Sq)
        tq = tk = 0
    else:
        if len(qv.shape) == 3:
            Tq, Hq, D = qv.shape
        elif layout == "paged" and len(qv.shape) == 4:
            Tq = -1
            B, Sq, Hq, D = qv.shape
        else:
            raise _C.InvalidArgument(
                f"q has {len(qv.shape)} dims; expected [total_q, heads_q, head_dim]"
                + (" or [batch, seqlen_q, heads_q, head_dim]" if layout == "paged" else ""))
        if layout == "varlen":
            if len(kv.shape) != 3 or len(vv.shape) != 3:
                raise _C.InvalidArgument(f"k, v have {len(kv.shape)}, {len(vv.shape)} dims; expected k [total_k, "
                                         "heads_kv, head_dim], v [total_k, heads_kv, head_dim_v]")
            Tk, Hkv, _ = kv.shape
            Dv = vv.shape[2]
            _expect(kv, "k", (Tk, Hkv, D), (dtype,), "total_k, heads_kv, head_dim")
            _expect(vv, "v", (Tk, Hkv, Dv), (dtype,), "total_k, heads_kv, head_dim_v")
        else:
            if len(kv.shape) != 4 or len(vv.shape) != 4:
                raise _C.InvalidArgument(f"k_cache, v_cache have {len(kv.shape)}, {len(vv.shape)} dims; expected "
                                         "[num_pages, page_size, heads_kv, head_dim] and [..., head_dim_v]")
            check_page_size(kv.shape, "k_cache", "v_cache")
            P, page, Hkv, _ = kv.shape
            Dv = vv.shape[3]
            _expect(kv, "k_cache", (P, page, Hkv, D), (dtype,), "num_pages, page_size, heads_kv, head_dim")
            _expect(vv, "v_cache", (P, page, Hkv, Dv), (dtype,), "num_pages, page_size, heads_kv, head_dim_v")
        if cu_seqlens_q is not None:
            if Tq < 0:
                raise _C.InvalidArgument("q is [batch, seqlen_q, heads_q, head_dim] but cu_seqlens_q is given; a "
                                         "packed q is [total_q, heads_q, head_dim]")
            cuq = _View(cu_seqlens_q, "cu_seqlens_q")
            if len(cuq.shape) != 1 or cuq.shape[0] < 1 or cuq.dtype != "i32":
                raise _C.InvalidArgument(f"cu_seqlens_q has shape {list(cuq.shape)} and dtype {cuq.dtype}; "
                                         "expected int32 [batch + 1]")
            B = cuq.shape[0] - 1
            _vector(cuq, "cu_seqlens_q", (B + 1,), "int32")
            if max_seqlen_q is None:
                raise _C.InvalidArgument("max_seqlen_q is None; a packed batch needs the host's bound of its "
                                         "sequences' query rows (the grid is sized by it)")
            Sq = _int_arg(max_seqlen_q, "max_seqlen_q", 0, _MAX_ROWS, "the host's bound of the query rows")
        elif Tq >= 0:
            raise _C.InvalidArgument("q is packed [total_q, heads_q, head_dim] but cu_seqlens_q is None")
        if layout == "varlen":
            if cu_seqlens_k is None:
                raise _C.InvalidArgument("cu_seqlens_k is None; a packed batch needs the int32 [batch + 1] offsets "
                                         "of its sequences' keys")
            cuk = _View(cu_seqlens_k, "cu_seqlens_k")
            if cuk.shape != (B + 1,) or cuk.dtype != "i32":
                raise _C.InvalidArgument(f"cu_seqlens_k has shape {list(cuk.shape)} and dtype {cuk.dtype}; "
                                         f"expected int32 [{B + 1}] (batch + 1, as cu_seqlens_q)")
            _vector(cuk, "cu_seqlens_k", (B + 1,), "int32")
            if max_seqlen_k is None:
                raise _C.InvalidArgument("max_seqlen_k is None; a packed batch needs the host's bound of its "
                                         "sequences' keys")
            Sk = _int_arg(max_seqlen_k, "max_seqlen_k", 0, _MAX_ROWS, "the host's bound of the keys")
            tk = Tk
        else:
            table = _View(page_table, "page_table")
            if len(table.shape) != 2 or table.dtype != "i32" or table.shape[0] != B:
                raise _C.InvalidArgument(f"page_table has shape {list(table.shape)} and dtype {table.dtype}; "
                                         f"expected int32 [batch ({B}), max_pages_per_seq]")
            if table.stride[1] != 1 and table.shape[1] > 1:
                raise _C.InvalidArgument(f"page_table has strides {list(table.stride)}; its rows must be "
                                         "contiguous (stride 1 along the pages)")
            Sk = (table.shape[1] * page if max_seqlen_k is None else
                  _int_arg(max_seqlen_k, "max_seqlen_k", 0, _MAX_ROWS, "the host's bound of the keys"))
            tk = 0
        if seqused_k is not None:
            used = _View(seqused_k, "seqused_k")
            if used.shape != (B,) or used.dtype != "i32":
                raise _C.InvalidArgument(f"seqused_k has shape {list(used.shape)} and dtype {used.dtype}; "
                                         f"expected int32 [batch ({B})]")
            _vector(used, "seqused_k", (B,), "int32")
        if Tq >= 0:
            tq = Tq
            o_shape = (Tq, Hq, Dv)
            lse_shape = (Hq, Tq)
        else:
            tq = 0
            o_shape = (B, Sq, Hq, Dv)
            lse_shape = (B, Hq, Sq)

    f[_P["batch"]:_P["head_dim_v"] + 1] = B, Sq, Sk, Hq, Hkv, D, Dv
    packed_q = cuq is not None

    def strides(view, at):
        s = view.stride
        if len(s) == 4:
            f[at:at + 4] = view.ptr, s[0], s[1], s[2]
        else:  # packed: [rows, heads, dim]
            f[at:at + 4] = view.ptr, 0, s[0], s[1]

    strides(qv, _P["q"])
    strides(kv, _P["k"])
    strides(vv, _P["v"])

    if out is None:
        # Ours, contiguous on q's device: its strides are known, no view to read.
        out = _empty_like_module(qv, o_shape, dtype)
        ov = None
        row = Hq * Dv
        f[_P["o"]:_P["o_stride_head"] + 1] = (_ptr(out), 0 if len(o_shape) == 3 else o_shape[1] * row,
                                              row, Dv)
    else:
        ov = _View(out, "out")
        _expect(ov, "out", o_shape, (dtype,), "the output: q's rows and heads, head_dim_v")
        _last_contiguous(ov, "out")
        strides(ov, _P["o"])

    bv = None
    if bias is not None:
        bv = _View(bias, "bias")
        if bv.dtype not in (dtype, "f32"):
            raise _C.InvalidArgument(f"bias has dtype {bv.dtype}; allowed: q's ({dtype}) or float32")
        full = (B, Hq, Sq, Sk)
        nd = len(bv.shape)
        if nd > 4 or any(s not in (1, want) for s, want in zip(bv.shape, full[4 - nd:])):
            raise _C.InvalidArgument(f"bias has shape {list(bv.shape)}; it must broadcast to [batch, heads_q, "
                                     f"seqlen_q, seqlen_k] = {list(full)}")
        st = [0] * (4 - nd) + [0 if n == 1 and want != 1 else s
                               for n, s, want in zip(bv.shape, bv.stride, full[4 - nd:])]
        f[_P["bias_kind"]] = BIAS_KINDS.index("input" if bv.dtype == dtype else "f32")
        f[_P["bias"]:_P["bias_stride_k"] + 1] = bv.ptr, st[0], st[1], st[2], st[3]

    lse = None
    if return_lse:
        lse = _empty_like_module(qv, lse_shape, "f32")  # contiguous: [Hq, total_q] or [B, Hq, Sq]
        if packed_q:
            f[_P["lse"]:_P["lse_stride_head"] + 1] = _ptr(lse), 0, lse_shape[1]
        else:
            f[_P["lse"]:_P["lse_stride_head"] + 1] = _ptr(lse), Hq * Sq, Sq

    sv = av = None
    if sinks is not None:
        sv = _View(sinks, "sinks")
        _expect(sv, "sinks", (Hq,), ("f32",), "one float32 logit per query head")
        if Hq > 1 and sv.stride[0] != 1:
            raise _C.InvalidArgument(f"sinks has stride {sv.stride[0]}; it must be contiguous")
        f[_P["sinks"]] = sv.ptr
    if alibi_slopes is not None:
        av = _View(alibi_slopes, "alibi_slopes")
        if av.dtype != "f32" or av.shape not in ((Hq,), (B, Hq)):
            raise _C.InvalidArgument(f"alibi_slopes has shape {list(av.shape)} and dtype {av.dtype}; expected "
                                     f"float32 [heads_q] = [{Hq}] or [batch, heads_q] = [{B}, {Hq}]")
        if Hq > 1 and av.stride[-1] != 1:
            raise _C.InvalidArgument(f"alibi_slopes has strides {list(av.stride)}; the heads must be contiguous")
        f[_P["alibi_slopes"]] = av.ptr
        f[_P["alibi_stride_batch"]] = av.stride[0] if len(av.shape) == 2 else 0

    if cuq is not None:
        f[_P["cu_seqlens_q"]] = cuq.ptr
        f[_P["total_q"]] = tq
    if cuk is not None:
        f[_P["cu_seqlens_k"]] = cuk.ptr
        f[_P["total_k"]] = tk
    if used is not None:
        f[_P["seqused_k"]] = used.ptr
    if table is not None:
        f[_P["page_table"]:_P["num_pages"] + 1] = table.ptr, table.stride[0], kv.shape[1], kv.shape[0]

    _same_device((("k", kv), ("v", vv), ("out", ov), ("bias", bv), ("sinks", sv), ("alibi_slopes", av),
                  ("cu_seqlens_q", cuq), ("cu_seqlens_k", cuk), ("seqused_k", used), ("page_table", table)), qv)

    if num_splits is None:
        splits = -1
    elif isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise _C.InvalidArgument(f"num_splits is {num_splits!r}; allowed: None, 0 (chosen) or "
                                 f"1..{_C.MAX_DECODE_SPLITS}")
    else:
        splits = num_splits
        if not 0 <= splits <= _C.MAX_DECODE_SPLITS:
            raise _C.InvalidArgument(f"num_splits ({splits}) must be None, 0 (chosen) or in [1, "
                                     f"{_C.MAX_DECODE_SPLITS}]")
    cap = _real(softcap, "softcap") or 0.0
    sc = _real(scale, "scale")
    _native_ints(f, PROBLEM_FIELDS, "the problem")

    with _DeviceGuard(qv):
        if _bind:
            kept = (q, k, v, out, lse, bias, sinks, alibi_slopes)
            return BoundCall(_C.prepare(f, sc, cap), qv, kept, return_lse,
                             dict(causal=causal, scale=scale, bias=bias, window=window, softcap=softcap, sinks=sinks,
                                  alibi_slopes=alibi_slopes))
        s = _stream_handle(stream, qv)
        if memo_key is not None:  # a plain dense signature seen for the first time: prepare it, run it
            if len(_prepared) >= _MAX_PREPARED:
                _prepared.clear()
            call = _C.prepare(f, sc, cap)
            _prepared[memo_key] = (call, o_shape, lse_shape) if call is not None else False
            if call is not None and call.run(f[_P["q"]], f[_P["k"]], f[_P["v"]], f[_P["o"]], f[_P["lse"]], s):
                return (out, lse) if return_lse else out
        if workspace is not None:
            ws_ptr, ws_bytes = _ptr(workspace), _nbytes(workspace)
        else:
            # A cached workspace serves eager calls only: one captured into a CUDA graph must
            # outlive every replay, which a later, larger replacement would not let it.
            cached = _workspaces.get((qv.device, s))
            if cached is not None and not _capturing(qv):
                ws_ptr, ws_bytes = _ptr(cached), _nbytes(cached)
            else:
                ws_ptr, ws_bytes = 0, 0
        need = _C.attention(f, sc, cap, s, splits, ws_ptr, ws_bytes)
        if need:
            if workspace is not None:
                raise _C.InvalidArgument(f"workspace holds {ws_bytes} bytes; this decode needs {need} (pass a "
                                         "larger one, or None for the package's own)")
            ws = _workspace_for(qv, s, need)
            need = _C.attention(f, sc, cap, s, splits, _ptr(ws), _nbytes(ws))
            if need:  # pragma: no cover - the plan does not change between the two calls
                raise _C.Error(f"decode asked for {need} bytes of workspace twice")
    return (out, lse) if return_lse else out


class BoundCall:
    """flashgen.bind's result: one attention call with its tensors fixed (see flashgen.bind)."""

    __slots__ = ("_call", "_qv", "_kept", "_ptrs", "_moved", "_return_lse", "_kw", "out", "lse")

    _NAMES = ("q", "k", "v", "out", "lse", "bias", "sinks", "alibi_slopes")

    def __init__(self, call, qv: _View, kept, return_lse, kw):
        q, k, v, out, lse = kept[:5]
        self._call, self._qv, self._kept, self._return_lse, self._kw = call, qv, kept, bool(return_lse), kw
        self.out, self.lse = out, lse
        self._ptrs = (qv.ptr, _ptr(k), _ptr(v), _ptr(out), 0 if lse is None else _ptr(lse))
        # torch tensors whose data must still be where it was bound (set_, resize_ or a freed
        # storage would leave the kernel the old address)
        self._moved = tuple((name, t, t.data_ptr()) for name, t in zip(self._NAMES, kept) if _is_torch(t))

    @property
    def spec(self):
        """The kernel's spec text as last planned (None: the general path serves this call)."""
        return self._call.spec if self._call is not None else None

    def __call__(self, stream=None):
        """Launches on the current stream of the tensors' library (or `stream`); returns out, or
        (out, lse)."""
        for name, t, ptr in self._moved:
            if t.data_ptr() != ptr:
                raise _C.InvalidArgument(f"{name}'s data moved since flashgen.bind (from {ptr:#x} to "
                                         f"{t.data_ptr():#x}: set_, resize_ or a freed storage); bind again")
        if self._call is not None:
            qv = self._qv
            if stream is None and qv.is_torch and _raw_stream is not None and qv.device == _cuda_device():
                ran = self._call.run(*self._ptrs, _raw_stream(qv.device))
            else:
                with _DeviceGuard(qv):
                    ran = self._call.run(*self._ptrs, _stream_handle(stream, qv))
            if ran:
                return (self.out, self.lse) if self._return_lse else self.out
        # A split-KV decode (or an empty problem): the general path with the same tensors; its LSE
        # is new each time and copied into the bound one.
        q, k, v = self._kept[:3]
        r = attention(q, k, v, layout="dense", return_lse=self._return_lse, out=self.out, stream=stream, **self._kw)
        if not self._return_lse:
            return r
        if _is_torch(self.lse):
            self.lse.copy_(r[1])
        else:
            self.lse = r[1]
        return self.out, self.lse

    def __repr__(self):
        return f"flashgen.BoundCall({self.spec or 'general path'})"


def bind(q, k, v, **kw):
    t = _torch()
    if t is not None:
        compiling = getattr(getattr(t, "compiler", None), "is_compiling", None)
        if compiling is not None and compiling():
            raise _C.InvalidArgument("flashgen.bind cannot be traced (torch.compile / export): call "
                                     "flashgen.attention inside the compiled region")
        for name, x in (("q", q), ("k", k), ("v", v), ("out", kw.get("out")), ("bias", kw.get("bias")),
                        ("sinks", kw.get("sinks")), ("alibi_slopes", kw.get("alibi_slopes"))):
            if isinstance(x, t.Tensor):
                if type(x) is not t.Tensor:
                    raise _C.InvalidArgument(f"{name} is a {type(x).__qualname__} (a torch.Tensor subclass); "
                                             "flashgen.bind takes plain tensors (call flashgen.attention)")
                if x.requires_grad:
                    raise _C.InvalidArgument(f"{name} requires grad; a bound call is not recorded by autograd "
                                             "(call flashgen.attention, or bind tensors that do not require grad)")
    _prepare_ready()
    return attention(q, k, v, layout="dense", _bind=True, **kw)


# ---- merge -----------------------------------------------------------------------


def merge_states(o_partial, lse_partial, *, out=None, out_dtype=None, return_lse=False, stream=None):
    pv = _View(o_partial, "o_partial")
    _last_contiguous(pv, "o_partial")
    lv = _View(lse_partial, "lse_partial")
    if len(pv.shape) != 5:
        raise _C.InvalidArgument(f"o_partial has {len(pv.shape)} dims; expected [num_states, batch, seqlen_q, "
                                 "heads, head_dim_v]")
    S, B, Sq, H, Dv = pv.shape
    if pv.dtype not in _STATE_CODE:
        raise _C.InvalidArgument(f"o_partial has dtype {pv.dtype}; allowed: float32, float16, bfloat16")
    _expect(lv, "lse_partial", (S, B, H, Sq), ("f32",), "num_states, batch, heads, seqlen_q")
    if out is not None:
        ov = _View(out, "out")
        _last_contiguous(ov, "out")
        if out_dtype is not None and _dtype_name(out_dtype) != ov.dtype:
            raise _C.InvalidArgument(f"out_dtype is {out_dtype} but out has dtype {ov.dtype}")
        if ov.dtype not in _STATE_CODE:
            raise _C.InvalidArgument(f"out has dtype {ov.dtype}; allowed: float32, float16, bfloat16")
        _expect(ov, "out", (B, Sq, H, Dv), (ov.dtype,), "batch, seqlen_q, heads, head_dim_v")
    else:
        name = pv.dtype if out_dtype is None else _dtype_name(out_dtype)
        if name not in _STATE_CODE:
            raise _C.InvalidArgument(f"out_dtype is {out_dtype}; allowed: float32, float16, bfloat16")
        out = _empty_like_module(pv, (B, Sq, H, Dv), name)
        ov = _View(out, "out")
    f = [0] * len(MERGE_FIELDS)
    f[_M["partial_dtype"]:_M["head_dim_v"] + 1] = _STATE_CODE[pv.dtype], _STATE_CODE[ov.dtype], S, B, Sq, H, Dv
    ps = pv.stride
    f[_M["o_partial"]:_M["o_partial_stride_head"] + 1] = pv.ptr, ps[0], ps[1], ps[2], ps[3]
    ls = lv.stride
    f[_M["lse_partial"]:_M["lse_partial_stride_seq"] + 1] = lv.ptr, ls[0], ls[1], ls[2], ls[3]
    os_ = ov.stride
    f[_M["o"]:_M["o_stride_head"] + 1] = ov.ptr, os_[0], os_[1], os_[2]
    lse = None
    if return_lse:
        lse = _empty_like_module(pv, (B, H, Sq), "f32")
        lsv = _View(lse, "lse")
        f[_M["lse"]:_M["lse_stride_head"] + 1] = lsv.ptr, lsv.stride[0], lsv.stride[1]
    _same_device((("lse_partial", lv), ("out", ov)), pv)
    _native_ints(f, MERGE_FIELDS, "the merge")
    with _DeviceGuard(pv):
        _C.merge(f, _stream_handle(stream, pv))
    return (out, lse) if return_lse else out


def _dtype_name(dt) -> str:
    if isinstance(dt, str):
        return {"float16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "float": "f32"}.get(dt, dt)
    if _torch() is not None and isinstance(dt, torch.dtype):
        return _torch_dtypes().get(dt, str(dt))
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(getattr(dt, "name", str(dt)), str(dt))
