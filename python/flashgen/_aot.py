"""Ahead-of-time use, no GPU needed: plan, generate, compile, explain, pregen.

A problem is written as the CLI writes it (README, "The flashgen tool"):
"dtype=bf16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr", or
as keyword arguments with the same keys (flashgen.plan(dtype="bf16", ...)).
"""

from __future__ import annotations

import operator
import os
import subprocess
from typing import Iterable, Optional, Sequence, Union

from . import _flashgen as _C

KernelSpec = _C.KernelSpec


def _spec_from_canonical(text: str) -> KernelSpec:
    return KernelSpec.parse(text)


# A spec pickles and copies as its canonical string.
KernelSpec.__reduce__ = lambda self: (_spec_from_canonical, (self.canonical(),))


def problem_text(problem: Union[str, dict, None] = None, **keys) -> str:
    """The CLI's "key=value,..." text of a problem given as text, a dict and/or keywords.

    A bool value is written true / false: the flags (lse, sinks, alibi, seqused_k) take
    it, and the library refuses it for any other key, naming the key (head_dim=True is
    not head_dim 1)."""
    parts = []
    if isinstance(problem, str):
        if problem:
            parts.append(problem)
    elif isinstance(problem, dict):
        keys = {**problem, **keys}
    elif problem is not None:
        raise _C.InvalidArgument(f"problem is a {type(problem).__qualname__}; expected the CLI's problem text "
                                 "('dtype=bf16,seqlen=4096,...'), a dict of its keys, or keywords")
    for key, value in keys.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            try:
                value = ":".join(str(operator.index(x)) for x in value)
            except TypeError:
                raise _C.InvalidArgument(f"problem key '{key}' is {value!r}; a list of lengths holds ints") from None
        else:
            value = str(value)
            if any(c in value for c in ",=\0"):
                raise _C.InvalidArgument(f"problem key '{key}' has value {value!r}; a value holds no ',', '=' or "
                                         "NUL (write each key as its own keyword)")
        parts.append(f"{key}={value}")
    if not parts:
        raise _C.InvalidArgument("no problem given; e.g. plan('dtype=bf16,seqlen=4096,heads=32,head_dim=128', "
                                 "arch=90)")
    text = ",".join(parts)
    if "\0" in text:
        raise _C.InvalidArgument("the problem text holds a NUL character")
    return text


def _int_arg(x, name: str, lo: int, hi: int, what: str) -> int:
    """A host int argument in [lo, hi], refused by name otherwise: no bool, no float, and no
    array (a device scalar would cost a synchronization to read)."""
    if isinstance(x, bool) or not hasattr(x, "__index__") or hasattr(x, "__dlpack__"):
        raise _C.InvalidArgument(f"{name} is {type(x).__qualname__} {x!r}; expected a host int ({what})")
    v = operator.index(x)
    if not lo <= v <= hi:
        raise _C.InvalidArgument(f"{name} is {v}; allowed: {lo}..{hi} ({what})")
    return v


def _device_or_hint(what: str) -> dict:
    """The current GPU; without one, Unavailable saying which argument replaces it."""
    try:
        return _C.current_device()
    except _C.Unavailable as e:
        raise _C.Unavailable(f"{e}; without a GPU pass {what}") from None


def _arch(arch: Optional[int]) -> int:
    if arch is not None:
        return _int_arg(arch, "arch", 10, 999, "a compute capability as 10 * major + minor, e.g. 90")
    return _device_or_hint("arch= (e.g. arch=90)")["arch"]


def _device_name(device: Optional[str]) -> Optional[str]:
    """device= of plan / pregen / explain: None, or a non-empty device name (a tune entry's `device`)."""
    if device is None:
        return None
    if not isinstance(device, str):
        raise _C.InvalidArgument(f"device is {type(device).__qualname__} {device!r}; expected a device name as tune "
                                 "files record it (e.g. 'NVIDIA H200'), or None")
    if not device or "\0" in device:
        raise _C.InvalidArgument(f"device is {device!r}; expected a non-empty device name as tune files record it "
                                 "(e.g. 'NVIDIA H200'), or None for the GPU of `arch` here")
    try:
        device.encode("utf-8")
    except UnicodeEncodeError:  # (e.g. os.fsdecode of bytes that are not UTF-8: lone surrogates)
        raise _C.InvalidArgument(f"device is {device!r}, which is not valid UTF-8; expected a device name as tune "
                                 "files record it (e.g. 'NVIDIA H200')") from None
    return device


def plan(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None, device: Optional[str] = None,
         **keys) -> KernelSpec:
    """The KernelSpec the library picks for a problem on compute capability `arch`
    (None: the current GPU's). Needs no GPU when `arch` is given.

    >>> flashgen.plan("dtype=bf16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr", arch=90)
    KernelSpec('flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,...')

    device: use the tune files' entries measured on the GPU of that name (as
    cuDeviceGetName reports it, e.g. "NVIDIA H200"; `flashgen pregen --device`),
    e.g. on a builder without that GPU. None: the entries of the GPU of `arch`
    here, if there is one (without one every tune entry is ignored, with a
    notice on stderr).

    Raises ValueError (InvalidArgument) for a bad problem, arch or device (not a
    non-empty str), NotImplementedError (Unsupported) for one no profile of
    `arch` serves, Unavailable when `arch` is None and there is no GPU."""
    text = problem_text(problem, **keys)
    name = _device_name(device)
    return _C.plan_text(text, _arch(arch), name)


def plan_decode(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None,
                sm_count: Optional[int] = None, num_splits: int = 0, **keys) -> dict:
    """What a split-KV decode of the problem launches (include/flashgen/decode.hpp,
    plan_decode): {'split': KernelSpec, 'combine': KernelSpec, 'num_splits',
    'workspace_bytes'}. `sm_count` None: the current GPU's."""
    text = problem_text(problem, **keys)
    a = _arch(arch)
    if sm_count is None:
        sm_count = _device_or_hint("sm_count= (e.g. sm_count=132)")["sm_count"]
    sm_count = _int_arg(sm_count, "sm_count", 1, 1 << 20, "the GPU's SM count")
    num_splits = _int_arg(num_splits, "num_splits", 0, _C.MAX_DECODE_SPLITS, "0 chooses")
    return _C.plan_decode_text(text, a, sm_count, num_splits)


def _spec(spec: Union[KernelSpec, str]) -> KernelSpec:
    if isinstance(spec, str):
        return KernelSpec.parse(spec)
    if not isinstance(spec, KernelSpec):
        raise _C.InvalidArgument(f"spec is a {type(spec).__qualname__}; expected a flashgen.KernelSpec or its "
                                 "canonical string")
    return spec


def generate(spec: Union[KernelSpec, str]) -> str:
    """The CUDA source of a kernel (deterministic; extern "C" symbol spec.kernel_name())."""
    return _C.generate(_spec(spec))


class CompiledKernel:
    """A compiled kernel image: spec, name, key (cache key, hex), cubin (bytes),
    from_cache, cache_path, compile_log (the NVRTC log with the ptxas report)."""

    __slots__ = ("spec", "name", "key", "cubin", "from_cache", "cache_path", "compile_log")

    def __init__(self, d: dict):
        for k in self.__slots__:
            setattr(self, k, d[k])

    def __repr__(self):
        return (f"CompiledKernel(name={self.name!r}, {len(self.cubin)} bytes, from_cache={self.from_cache}, "
                f"cache_path={self.cache_path!r})")


def compile(spec: Union[KernelSpec, str]) -> CompiledKernel:  # noqa: A001 - the library's name
    """Generate and compile a kernel through the disk cache (NVRTC on a miss; no GPU
    needed). Raises CompileError, Unavailable (no NVRTC), NotImplementedError."""
    return CompiledKernel(_C.compile(_spec(spec)))


class PregenResult:
    """One spec of pregen(): spec (None for an item that could not be planned), ok, from_cache,
    cache_path, compile_log, seconds, error."""

    __slots__ = ("spec", "ok", "from_cache", "cache_path", "compile_log", "seconds", "error")

    def __init__(self, d: dict):
        for k in self.__slots__:
            setattr(self, k, d[k])

    def __repr__(self):
        state = ("cached" if self.from_cache else "compiled") if self.ok else f"failed: {self.error}"
        what = self.spec.canonical() if self.spec is not None else None
        return f"PregenResult({what!r}, {state}, {self.seconds:.2f} s)"


def pregen(items: Iterable[Union[KernelSpec, str, dict]], *, archs: Optional[Sequence[int]] = None,
           threads: int = 0, decode: bool = False, sm_count: int = 132, device: Optional[str] = None) -> list:
    """Compile kernels ahead of time into the cache (the library's warmup: a thread
    pool, NVRTC, no GPU needed), so the first call of a fleet's GPUs loads a cubin.

    items: KernelSpecs, canonical spec strings, or problems (the CLI's problem
    text or a dict of its keys), each planned for every arch of `archs` (None:
    the current GPU's; not empty); with decode=True also the problem's split-KV
    kernels (plan_decode with `sm_count`). A single item may be passed as is.
    device: plan every problem with the tune entries of that device name (as
    plan(device=); `flashgen pregen --device`).
    Returns one PregenResult per spec, then one failed PregenResult (spec None,
    error naming the item and arch) per item that could not be parsed or
    planned: a failure does not stop the others.

    Raises InvalidArgument for bad arguments (an empty `archs`, a device that is
    not a non-empty str, ...), Unavailable when `archs` is None and there is no
    GPU, and, as `flashgen pregen` does, CacheIOError before compiling anything
    when the user cache cannot receive kernels (FLASHGEN_CACHE_DIR names a file,
    a directory others may write, ...: the message names the directory and the
    problem), since kernels compiled for it would be kept in memory only."""
    if isinstance(items, (str, dict, KernelSpec)):
        items = [items]
    if items is None or not hasattr(items, "__iter__"):
        raise _C.InvalidArgument(f"items is {type(items).__qualname__}; expected KernelSpecs, spec strings or "
                                 "problems (a list, or one of them)")
    if archs is not None and not hasattr(archs, "__iter__"):
        archs = [archs]
    arch_list = None if archs is None else [_int_arg(a, "archs[]", 10, 999, "compute capabilities, e.g. 90")
                                            for a in archs]
    if arch_list == []:
        raise _C.InvalidArgument("archs is empty; expected the compute capabilities to plan the problems for (e.g. "
                                 "archs=[80, 90]), or None for the current GPU's")
    name = _device_name(device)
    threads = _int_arg(threads, "threads", 0, 4096, "0: one per core")
    sm_count = _int_arg(sm_count, "sm_count", 1, 1 << 20, "the GPU's SM count")
    if not isinstance(decode, bool):
        raise _C.InvalidArgument(f"decode is {decode!r}; expected True or False")
    specs: list = []
    failed: list = []

    def fail(what: str, e: Exception) -> None:
        failed.append(PregenResult({"spec": None, "ok": False, "from_cache": False, "cache_path": "",
                                    "compile_log": "", "seconds": 0.0, "error": f"{what}: {e}"}))

    for n, item in enumerate(items):
        if isinstance(item, KernelSpec):
            specs.append(item)
            continue
        if isinstance(item, str) and item.startswith("flashgen."):
            try:
                specs.append(KernelSpec.parse(item))
            except _C.Error as e:
                fail(f"items[{n}]", e)
            continue
        try:
            text = problem_text(item)
        except _C.Error as e:
            fail(f"items[{n}]", e)
            continue
        if arch_list is None:
            arch_list = [_device_or_hint("archs= (e.g. archs=[90])")["arch"]]
        for a in arch_list:
            try:
                specs.append(_C.plan_text(text, a, name))
                if decode:
                    d = _C.plan_decode_text(text, a, sm_count, 0)
                    specs += [d["split"], d["combine"]]
            except _C.Error as e:
                fail(f"items[{n}] on sm_{a}", e)
    if specs:
        _C.pregen_cache_dir()  # (CacheIOError, as flashgen pregen's, when the kernels could not be kept)
    return [PregenResult(d) for d in _C.warmup(specs, threads)] + failed


def _explain_arch() -> int:
    """The arch explain() plans for when arch is None: this GPU's, else sm_90 (as the CLI does)."""
    return _C.current_device()["arch"] if _C.gpu_available() else 90


def cli_path() -> str:
    """The flashgen command-line tool shipped inside the package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "flashgen")


def explain(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None, tile: Optional[str] = None,
            sms: Optional[int] = None, compile: bool = True, device: Optional[str] = None,
            **keys) -> str:  # noqa: A002
    """The report of `flashgen explain` for a problem: the spec, why its tile, the
    roofline model, ptxas registers and spills (compile=False skips NVRTC). Runs
    the packaged CLI. device: plan with the tune entries of that device name (as
    plan(device=); the CLI's --device). Raises ValueError / NotImplementedError
    with its message (ValueError too for a device that is not a non-empty str); a
    problem plan() refuses as invalid, and a broken FLASHGEN_PROFILE, raise the class
    plan() raises for them. arch None: this GPU's, else sm_90 (the report says so;
    plan() needs arch= without a GPU)."""
    text = problem_text(problem, **keys)
    cmd = [cli_path(), "explain", "--problem", text]
    if arch is not None:
        cmd += ["--arch", str(_arch(arch))]
    if device is not None:
        cmd += ["--device", _device_name(device)]
    if tile is not None:
        cmd += ["--tile", str(tile)]
    if sms is not None:
        cmd += ["--sms", str(_int_arg(sms, "sms", 1, 4096, "the SM count for the wave model"))]
    if not compile:
        cmd.append("--no-compile")
    r = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace")
    if r.returncode == 0:
        return r.stdout
    err = r.stderr.strip()
    config = "flashgen explain: configuration error: "
    if r.returncode == 2 and err.startswith(config):
        # A broken FLASHGEN_PROFILE raises here what plan() raises for it (CacheIOError for a file that
        # cannot be read, InvalidArgument for a bad one, Unsupported for one without the arch); the CLI
        # used the arch given, else this GPU's, else sm_90.
        _C.check_profile(_arch(arch) if arch is not None else _explain_arch())
        raise _C.InvalidArgument(err[len(config):])  # (FLASHGEN_NVRTC_LIBRARY and the like)
    if err.startswith("flashgen explain: error: "):
        err = err[len("flashgen explain: error: "):]
    if r.returncode == 2 and "\nunsupported: " in r.stdout:  # the report of a problem no kernel serves: its rules
        report = r.stdout + (("\n" + err) if err else "")
        # A problem plan() refuses as invalid (InvalidArgument: a head_dim no kernel takes, heads_q not a
        # multiple of heads_kv) raises that class here too, with the whole report.
        try:
            _C.plan_text(text, _arch(arch) if arch is not None else _explain_arch(), _device_name(device))
        except _C.InvalidArgument:
            raise _C.InvalidArgument(report) from None
        except _C.Error:
            pass
        raise _C.Unsupported(report)
    if r.returncode == 2:  # a bad problem or option
        raise _C.InvalidArgument(err)
    raise _C.Error(f"flashgen explain exited with {r.returncode}: {err or r.stdout}")
