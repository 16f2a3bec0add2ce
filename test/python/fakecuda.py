"""Stand-in CUDA arrays for the CPU tier: DLPack producers that claim device
memory (kDLCUDA) at made-up addresses, so the package's argument handling
(python/flashgen/_core.py) runs to the native call without a GPU and without
PyTorch.

Nothing ever reads or writes these addresses: the tests only call operations
whose arguments are refused before any device access, or replace the native
launch (test_cpu.py, `native`). The module itself plays an array library to
_core: `empty` allocates outputs (as cupy.empty would), `__dlpack__` exports a
DLPack capsule (unversioned, "dltensor"; nanobind accepts it), and `nbytes`
sizes workspaces.
"""

from __future__ import annotations

import ctypes
import itertools
import math

# DLPack (dlpack.h, v0.8 ABI; nanobind reads the unversioned capsule).
KDL_CPU, KDL_CUDA = 1, 2
_CODES = {"int32": (0, 32), "int64": (0, 64), "uint8": (1, 8), "float16": (2, 16), "float32": (2, 32),
          "float64": (2, 64), "bfloat16": (4, 16)}
_ITEMSIZE = {name: bits // 8 for name, (_, bits) in _CODES.items()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_CAPSULE_NAME = b"dltensor"  # kept alive by the module: the capsule points at it
_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)

# Made-up device addresses: 1 MiB apart, 256-byte aligned, never 0.
_next_address = itertools.count(0x7F0000000000, 1 << 20)


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


class FakeCudaArray:
    """A strided array "on cuda:<device>" at `ptr` (a made-up address): shape,
    strides in elements, dtype name ("float16", "bfloat16", "float32", "int32",
    "int64", "uint8")."""

    def __init__(self, shape, dtype="float16", *, strides=None, ptr=None, device=0, device_type=KDL_CUDA):
        if dtype not in _CODES:
            raise ValueError(f"fakecuda: unknown dtype {dtype!r}")
        self.shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.strides = tuple(int(s) for s in strides) if strides is not None else contiguous_strides(self.shape)
        if len(self.strides) != len(self.shape):
            raise ValueError("fakecuda: strides and shape differ in length")
        self.dtype = dtype
        self.ptr = int(ptr) if ptr is not None else next(_next_address)
        self.device = int(device)
        self.device_type = int(device_type)
        self._keep = []  # the ctypes objects behind every capsule handed out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def view(self, shape, strides, offset_elements=0) -> "FakeCudaArray":
        """Another view of the same (made-up) memory."""
        return FakeCudaArray(shape, self.dtype, strides=strides, ptr=self.ptr + offset_elements * self.itemsize,
                             device=self.device, device_type=self.device_type)

    def __dlpack_device__(self):
        return (self.device_type, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # Always the unversioned capsule (what producers predating DLPack 1.0 give).
        n = len(self.shape)
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(n, 1))(*self.strides)
        code, bits = _CODES[self.dtype]
        mt = _DLManagedTensor()
        mt.dl_tensor.data = self.ptr
        mt.dl_tensor.device = _DLDevice(self.device_type, self.device)
        mt.dl_tensor.ndim = n
        mt.dl_tensor.dtype = _DLDataType(code, bits, 1)
        mt.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        mt.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        mt.dl_tensor.byte_offset = 0
        mt.manager_ctx = None
        mt.deleter = None
        self._keep.append((shape, strides, mt))
        return _PyCapsule_New(ctypes.addressof(mt), _CAPSULE_NAME, None)

    def __repr__(self):
        return (f"FakeCudaArray(shape={list(self.shape)}, strides={list(self.strides)}, dtype={self.dtype}, "
                f"ptr={self.ptr:#x})")


# The array-library face _core looks for (`empty` of the module an array's type comes from).
allocations: list = []  # every array `empty` made, in order (the tests inspect them)


def empty(shape, dtype="float16"):
    dtype = getattr(dtype, "name", dtype)
    a = FakeCudaArray(shape if isinstance(shape, (tuple, list)) else (int(shape),), str(dtype))
    allocations.append(a)
    return a


def array(shape, dtype="float16", **kw) -> FakeCudaArray:
    return FakeCudaArray(shape, dtype, **kw)
