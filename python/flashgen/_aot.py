"""Ahead-of-time use, no GPU needed: plan, generate, compile, explain, pregen.

A problem is written as the CLI writes it (README, "The flashgen tool"):
"dtype=bf16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr", or
as keyword arguments with the same keys (flashgen.plan(dtype="bf16", ...)).
"""

from __future__ import annotations

import os
import subprocess
from typing import Iterable, Optional, Sequence, Union

from . import _flashgen as _C

KernelSpec = _C.KernelSpec


def problem_text(problem: Union[str, dict, None] = None, **keys) -> str:
    """The CLI's "key=value,..." text of a problem given as text, a dict and/or keywords."""
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
            value = "1" if value else "0"
        elif isinstance(value, (list, tuple)):
            value = ":".join(str(int(x)) for x in value)
        parts.append(f"{key}={value}")
    if not parts:
        raise _C.InvalidArgument("no problem given; e.g. plan('dtype=bf16,seqlen=4096,heads=32,head_dim=128', "
                                 "arch=90)")
    return ",".join(parts)


def _arch(arch: Optional[int]) -> int:
    if arch is not None:
        if isinstance(arch, bool) or not isinstance(arch, int):
            raise _C.InvalidArgument(f"arch is {arch!r}; expected a compute capability as 10 * major + minor, "
                                     "e.g. 90")
        return arch
    return _C.current_device()["arch"]


def plan(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None, **keys) -> KernelSpec:
    """The KernelSpec the library picks for a problem on compute capability `arch`
    (None: the current GPU's). Needs no GPU when `arch` is given.

    >>> flashgen.plan("dtype=bf16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr", arch=90)
    KernelSpec('flashgen.fwd.v1:sm=90,unit=wgmma,dtype=bf16,d=128,dv=128,...')

    Raises ValueError (InvalidArgument) for a bad problem, NotImplementedError
    (Unsupported) for one no profile of `arch` serves."""
    return _C.plan_text(problem_text(problem, **keys), _arch(arch))


def plan_decode(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None,
                sm_count: Optional[int] = None, num_splits: int = 0, **keys) -> dict:
    """What a split-KV decode of the problem launches (include/flashgen/decode.hpp,
    plan_decode): {'split': KernelSpec, 'combine': KernelSpec, 'num_splits',
    'workspace_bytes'}. `sm_count` None: the current GPU's."""
    if sm_count is None:
        sm_count = _C.current_device()["sm_count"]
    return _C.plan_decode_text(problem_text(problem, **keys), _arch(arch), sm_count, num_splits)


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
    """One spec of pregen(): spec, ok, from_cache, cache_path, compile_log, seconds, error."""

    __slots__ = ("spec", "ok", "from_cache", "cache_path", "compile_log", "seconds", "error")

    def __init__(self, d: dict):
        for k in self.__slots__:
            setattr(self, k, d[k])

    def __repr__(self):
        state = ("cached" if self.from_cache else "compiled") if self.ok else f"failed: {self.error}"
        return f"PregenResult({self.spec.canonical()!r}, {state}, {self.seconds:.2f} s)"


def pregen(items: Iterable[Union[KernelSpec, str, dict]], *, archs: Optional[Sequence[int]] = None,
           threads: int = 0, decode: bool = False, sm_count: int = 132) -> list:
    """Compile kernels ahead of time into the cache (the library's warmup: a thread
    pool, NVRTC, no GPU needed), so the first call of a fleet's GPUs loads a cubin.

    items: KernelSpecs, canonical spec strings, or problems (the CLI's problem
    text or a dict of its keys), each planned for every arch of `archs`; with
    decode=True also the problem's split-KV kernels (plan_decode with `sm_count`).
    Returns one PregenResult per spec; a failed spec does not stop the others."""
    specs = []
    for item in items:
        if isinstance(item, KernelSpec):
            specs.append(item)
        elif isinstance(item, str) and item.startswith("flashgen."):
            specs.append(KernelSpec.parse(item))
        else:
            text = problem_text(item)
            for a in (archs if archs is not None else [_arch(None)]):
                specs.append(_C.plan_text(text, a))
                if decode:
                    d = _C.plan_decode_text(text, a, sm_count, 0)
                    specs += [d["split"], d["combine"]]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise _C.InvalidArgument(f"threads is {threads!r}; allowed: 0 (one per core) or a positive int")
    return [PregenResult(d) for d in _C.warmup(specs, threads)]


def cli_path() -> str:
    """The flashgen command-line tool shipped inside the package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "flashgen")


def explain(problem: Union[str, dict, None] = None, *, arch: Optional[int] = None, tile: Optional[str] = None,
            sms: Optional[int] = None, compile: bool = True, **keys) -> str:  # noqa: A002
    """The report of `flashgen explain` for a problem: the spec, why its tile, the
    roofline model, ptxas registers and spills (compile=False skips NVRTC). Runs
    the packaged CLI. Raises ValueError / NotImplementedError with its message."""
    cmd = [cli_path(), "explain", "--problem", problem_text(problem, **keys)]
    if arch is not None:
        cmd += ["--arch", str(_arch(arch))]
    if tile is not None:
        cmd += ["--tile", str(tile)]
    if sms is not None:
        cmd += ["--sms", str(int(sms))]
    if not compile:
        cmd.append("--no-compile")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0:
        return r.stdout
    err = r.stderr.strip()
    if err.startswith("flashgen explain: error: "):
        err = err[len("flashgen explain: error: "):]
    if r.returncode == 2:  # a bad problem or option
        raise _C.InvalidArgument(err)
    if r.returncode == 1 and r.stdout:  # the report of a problem no kernel serves: the rules it breaks
        raise _C.Unsupported(r.stdout + (("\n" + err) if err else ""))
    raise _C.Error(f"flashgen explain exited with {r.returncode}: {err or r.stdout}")
