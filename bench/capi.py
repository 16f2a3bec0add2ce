"""libflashgen's C ABI through ctypes, for the benches that call it directly.

The forward comparison (bench.py) runs on the flashgen package; the C ABI stays
for what the package cannot do in one process: time another build of the
library beside this one (--baseline of bench.py and bench_decode.py), launch a
chosen spec string (flashgen_launch_spec: bench.py --tiles), the scripts that
set fields the package does not expose one by one (bench_decode, bench_paged,
bench_varlen, bench_modifiers, bench_softcap), and the host-overhead
comparison with today's ctypes path (bench_host.py).

Problem mirrors flashgen_problem of include/flashgen/flashgen.h field by field;
load_lib() checks the mirror against the library it loads (check_layout), so a
struct that gained fields in the header and not here fails at load instead of
reading or writing past the end.
"""
import ctypes
import glob
import importlib.util
import os
import sys

# Enum codes of include/flashgen/flashgen.h.
DTYPES = {"f16": 0, "bf16": 1}
MASKS = {"none": 0, "causaltl": 1, "causalbr": 2, "windowtl": 3, "windowbr": 4}


class Tensor(ctypes.Structure):
    """flashgen_tensor: BSHD element strides."""
    _fields_ = [("data", ctypes.c_void_p), ("stride_batch", ctypes.c_int64),
                ("stride_seq", ctypes.c_int64), ("stride_head", ctypes.c_int64)]


class Bias(ctypes.Structure):
    """flashgen_bias."""
    _fields_ = [("kind", ctypes.c_int), ("data", ctypes.c_void_p), ("stride_batch", ctypes.c_int64),
                ("stride_head", ctypes.c_int64), ("stride_q", ctypes.c_int64), ("stride_k", ctypes.c_int64)]


class Lse(ctypes.Structure):
    """flashgen_lse."""
    _fields_ = [("data", ctypes.c_void_p), ("stride_batch", ctypes.c_int64), ("stride_head", ctypes.c_int64)]


class Problem(ctypes.Structure):
    """Mirror of flashgen_problem (include/flashgen/flashgen.h), 400 bytes on x86-64."""
    _fields_ = [("dtype", ctypes.c_int), ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64),
                ("seqlen_k", ctypes.c_int64), ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64),
                ("head_dim", ctypes.c_int64), ("head_dim_v", ctypes.c_int64), ("mask", ctypes.c_int),
                ("has_scale", ctypes.c_int), ("scale", ctypes.c_float), ("q", Tensor), ("k", Tensor),
                ("v", Tensor), ("o", Tensor), ("bias", Bias), ("lse", Lse), ("softcap", ctypes.c_float),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64), ("sinks", ctypes.c_void_p),
                ("alibi_slopes", ctypes.c_void_p), ("alibi_stride_batch", ctypes.c_int64),
                # packed (varlen) batch: int32 [batch + 1] device offsets, int32 [batch] or NULL, packed rows
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p), ("seqused_k", ctypes.c_void_p),
                ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
                # paged KV cache: int32 [batch, page_table_stride] device table (NULL: not paged), keys per
                # page (a power of two in [1, 256]), pages of K/V ([num_pages, page_size, heads_kv, d])
                ("page_table", ctypes.c_void_p), ("page_table_stride", ctypes.c_int64),
                ("page_size", ctypes.c_int64), ("num_pages", ctypes.c_int64)]


def check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what}: status {status}: {lib.flashgen_last_error().decode()}")


def load_lib(path):
    """The library at `path` with the argument types of the calls the benches make,
    its flashgen_problem checked against Problem."""
    lib = ctypes.CDLL(path)
    P = ctypes.POINTER(Problem)
    lib.flashgen_problem_init_bshd.argtypes = [P, ctypes.c_int] + [ctypes.c_int64] * 7 + [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.flashgen_forward.argtypes = [P, ctypes.c_void_p]
    lib.flashgen_plan.argtypes = [P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    # (calls an older build may lack: a --baseline of an earlier commit)
    optional = {
        "flashgen_launch_spec": [ctypes.c_char_p, P, ctypes.c_void_p],
        "flashgen_decode": [P, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p],
        "flashgen_decode_workspace_bytes": [P, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int)],
    }
    for name, argtypes in optional.items():
        if hasattr(lib, name):
            getattr(lib, name).argtypes = argtypes
    lib.flashgen_last_error.restype = ctypes.c_char_p
    unknown = check_layout(lib, path)
    if unknown:
        print(f"note: {path} is an older libflashgen: its flashgen_problem ends before {unknown[0]} (fields "
              f"{', '.join(unknown)} unused by it)", file=sys.stderr)
    return lib


def check_layout(lib, path="libflashgen"):
    """Raises when flashgen_problem_init_bshd of `lib` does not write what Problem
    reads. It fills the whole C struct (memset, then every field) over a buffer
    of a fill pattern: a field at another offset reads back wrong, and a C struct
    longer than Problem writes into the guard bytes after it. A shorter one (a
    build from before the last fields were appended, e.g. a --baseline of an
    older commit) leaves Problem's last fields at the pattern: accepted, since
    that library reads only the prefix it knows (Problem() zeroes the rest).
    Returns the names of the fields such a library does not know."""
    n = ctypes.sizeof(Problem)
    guard = 64
    fill = 0xA5
    buf = (ctypes.c_ubyte * (n + guard))(*([fill] * (n + guard)))
    p = Problem.from_buffer(buf)
    # bf16 (1), batch 2, seqlen_q 3, seqlen_k 5, heads 8/4, head dims 16/24, causal bottom-right (2).
    check(lib, lib.flashgen_problem_init_bshd(ctypes.byref(p), 1, 2, 3, 5, 8, 4, 16, 24, 2, 0x1000, 0x2000, 0x3000,
                                              0x4000), "flashgen_problem_init_bshd (layout check)")
    # Problem's trailing fields the library left at the pattern: the ones it does not know.
    unknown = []
    for name, ctype in reversed(Problem._fields_):
        at = getattr(Problem, name).offset
        if any(b != fill for b in buf[at:at + ctypes.sizeof(ctype)]):
            break
        unknown.append(name)
    want = {
        "dtype": 1, "batch": 2, "seqlen_q": 3, "seqlen_k": 5, "heads_q": 8, "heads_kv": 4, "head_dim": 16,
        "head_dim_v": 24, "mask": 2, "has_scale": 0, "scale": 0.0, "softcap": 0.0, "window_left": -1,
        "window_right": -1, "sinks": None, "alibi_slopes": None, "alibi_stride_batch": 0, "cu_seqlens_q": None,
        "cu_seqlens_k": None, "seqused_k": None, "total_q": 0, "total_k": 0, "page_table": None,
        "page_table_stride": 0, "page_size": 0, "num_pages": 0,
        "q": (0x1000, 3 * 8 * 16, 8 * 16, 16), "k": (0x2000, 5 * 4 * 16, 4 * 16, 16),
        "v": (0x3000, 5 * 4 * 24, 4 * 24, 24), "o": (0x4000, 3 * 8 * 24, 8 * 24, 24),
        "bias": (0, None), "lse": None,
    }
    got = {name: getattr(p, name) for name, _ in Problem._fields_}
    for t in ("q", "k", "v", "o"):
        x = got[t]
        got[t] = (x.data, x.stride_batch, x.stride_seq, x.stride_head)
    got["bias"] = (p.bias.kind, p.bias.data)
    got["lse"] = p.lse.data
    wrong = [f"{name} = {got.get(name, '(no such field)')!r} (expected {value!r})"
             for name, value in want.items() if name not in unknown and got.get(name, want) != value]
    wrong += [f"{name} is not checked here (add it to check_layout)" for name in got if name not in want]
    if any(b != fill for b in buf[n:]):
        wrong.append(f"bytes past Problem's {n} written (the C struct is longer)")
    if wrong:
        raise RuntimeError(f"bench/capi.py's Problem does not match flashgen_problem of {path}: " + "; ".join(wrong) +
                           " (update Problem from include/flashgen/flashgen.h)")
    return list(reversed(unknown))


_TORCH_DTYPE_CODES = {}


def _dtype_code(dtype):
    """flashgen_dtype of a torch dtype (KeyError for one the library does not take)."""
    code = _TORCH_DTYPE_CODES.get(dtype)
    if code is None:
        import torch
        _TORCH_DTYPE_CODES.update({torch.float16: DTYPES["f16"], torch.bfloat16: DTYPES["bf16"]})
        code = _TORCH_DTYPE_CODES[dtype]
    return code


def problem_from_tensors(q, k, v, o, mask="none", lse=None, scale=None):
    """A Problem for dense BSHD torch tensors, read from their dtypes, shapes, strides
    and pointers the way an engine fills it per call (no flashgen_problem_init_bshd:
    any strides). lse: float32 [batch, heads_q, seqlen_q] or None."""
    B, Sq, Hq, D = q.shape
    p = Problem()
    p.dtype = _dtype_code(q.dtype)
    p.batch, p.seqlen_q, p.seqlen_k = B, Sq, k.shape[1]
    p.heads_q, p.heads_kv = Hq, k.shape[2]
    p.head_dim, p.head_dim_v = D, v.shape[3]
    p.mask = MASKS[mask]
    if scale is not None:
        p.has_scale, p.scale = 1, scale
    for field, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        s = t.stride()
        dst = getattr(p, field)
        dst.data, dst.stride_batch, dst.stride_seq, dst.stride_head = t.data_ptr(), s[0], s[1], s[2]
    if lse is not None:
        s = lse.stride()
        p.lse.data, p.lse.stride_batch, p.lse.stride_head = lse.data_ptr(), s[0], s[1]
    p.window_left = p.window_right = -1
    return p


def package_library():
    """The libflashgen inside the installed flashgen package (the file its native
    module links: loading it with ctypes shares the package's library, kernels
    and caches included), or None. Found without importing the package."""
    spec = importlib.util.find_spec("flashgen")
    if spec is None or not spec.submodule_search_locations:
        return None
    for where in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(where, "libflashgen.so*")))
        if found:
            return found[-1]
    return None


def default_library(repo_root):
    """--lib's default: the package's libflashgen, else build/libflashgen.so of repo_root."""
    return package_library() or os.path.join(repo_root, "build", "libflashgen.so")
