"""The Python package's CPU tier: runs without a GPU (CI), with or without PyTorch.

What it covers: import and version; the ahead-of-time calls (plan, plan_decode,
generate, compile through NVRTC, explain, pregen); KernelSpec; the exception
classes and the library's messages they carry; the flat problem layout shared
with the native module; and every argument check of the eager calls, which
must refuse a bad call before anything is launched, naming the argument.

Device arrays here are fakecuda.FakeCudaArray: DLPack producers claiming CUDA
memory at made-up addresses. They reach the native module only through the
`native` fixture (records the call, runs the library's own check_problem,
launches nothing) or `guarded_native` (the real native call, which refuses
the problem before any device access; on a machine with a GPU a problem that
would be launched fails the test instead of touching made-up addresses).
Tests that need PyTorch ask for it with pytest.importorskip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import fakecuda as fc
import flashgen
from flashgen import _core, _flashgen as _C, _layout

REPO = Path(__file__).resolve().parents[2]
F = {name: i for i, name in enumerate(_layout.PROBLEM_FIELDS)}
M = {name: i for i, name in enumerate(_layout.MERGE_FIELDS)}
SMALL = "dtype=f16,seqlen=128,heads=2,head_dim=64"  # a problem every profile serves


def _run_python(code: str, env_extra: dict | None = None, block_torch: bool = True, timeout: int = 300):
    """Runs `code` in a fresh interpreter (the environment variables of the library are read
    once per process), with PyTorch made unimportable unless block_torch is False.
    Returns the CompletedProcess."""
    prelude = "import sys\nsys.modules['torch'] = None  # import torch -> ImportError\n" if block_torch else ""
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


# ---- import and version -----------------------------------------------------------


def test_import_and_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", flashgen.__version__)
    pyproject = REPO / "pyproject.toml"
    if pyproject.is_file():  # running from the repository: the package's version is the project's
        m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        assert m and m.group(1) == flashgen.__version__
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            assert version("flashgen") == flashgen.__version__
        except PackageNotFoundError:
            pass  # imported from a source layout, not installed
    except ImportError:  # pragma: no cover - Python < 3.8
        pass
    for name in flashgen.__all__:
        assert hasattr(flashgen, name), name
    assert flashgen.MAX_DECODE_SPLITS == 128
    # one version: the package's, the native library's (version.hpp) and the CMake project's
    assert flashgen.GENERATOR_VERSION == flashgen.__version__
    cmake = REPO / "CMakeLists.txt"
    if cmake.is_file():
        m = re.search(r"project\(flashgen VERSION (\S+)", cmake.read_text())
        assert m and m.group(1) == flashgen.__version__
    assert isinstance(flashgen.gpu_available(), bool)


def test_import_without_torch():
    """The package imports and plans/generates with PyTorch unimportable (it is optional)."""
    r = _run_python(f"""
        import flashgen
        assert flashgen._ops is None  # no custom ops without PyTorch
        s = flashgen.plan("{SMALL}", arch=90)
        assert s.kernel_name() in flashgen.generate(s)
        print("ok", s.canonical())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok flashgen.fwd.v1:sm=90,")


def test_gpu_available_matches_current_device():
    if flashgen.gpu_available():
        d = flashgen.current_device()
        assert set(d) == {"ordinal", "arch", "name", "sm_count", "smem_per_block_optin"}
        assert d["arch"] >= 70 and d["sm_count"] > 0
    else:
        with pytest.raises(flashgen.Unavailable) as e:
            flashgen.current_device()
        assert isinstance(e.value, RuntimeError) and "GPU" in str(e.value)


# ---- problem text -----------------------------------------------------------------


def test_problem_text_forms():
    assert flashgen.problem_text(SMALL) == SMALL
    assert flashgen.problem_text(dict(dtype="f16", seqlen=128), heads=2) == "dtype=f16,seqlen=128,heads=2"
    assert flashgen.problem_text("dtype=f16", lse=True, sinks=False) == "dtype=f16,lse=true,sinks=false"
    assert flashgen.problem_text(seqlens_q=(3, 0, 5)) == "seqlens_q=3:0:5"
    with pytest.raises(ValueError, match="no problem given"):
        flashgen.problem_text()
    with pytest.raises(flashgen.InvalidArgument, match="problem is a int"):
        flashgen.problem_text(42)


# ---- plan / plan_decode -----------------------------------------------------------


def _spec_fields(spec) -> dict:
    tag, _, body = spec.canonical().partition(":")
    return dict(item.split("=", 1) for item in body.split(","))


def test_plan_forms_agree():
    a = flashgen.plan(SMALL, arch=90)
    b = flashgen.plan(dict(dtype="f16", seqlen=128, heads=2, head_dim=64), arch=90)
    c = flashgen.plan(dtype="f16", seqlen=128, heads=2, head_dim=64, arch=90)
    assert isinstance(a, flashgen.KernelSpec)
    assert a == b == c


@pytest.mark.parametrize("arch", [75, 80, 90])
def test_plan_reflects_problem(arch):
    dtype = "f16" if arch == 75 else "bf16"
    s = flashgen.plan(f"dtype={dtype},seqlen_q=100,seqlen_k=300,heads_q=8,heads_kv=2,head_dim=64,head_dim_v=128,"
                      "mask=causalbr,bias=f32,lse=1", arch=arch)
    assert (s.family, s.arch, s.dtype, s.head_dim, s.head_dim_v) == ("fwd", arch, dtype, 64, 128)
    assert (s.mask, s.bias, s.has_lse) == ("causalbr", "f32", True)
    assert not (s.softcap or s.sinks or s.alibi or s.varlen or s.paged)
    assert s.kernel_name().startswith(f"flashgen_fwd_sm{arch}_{dtype}_d64v128_")


def test_plan_flags():
    s = flashgen.plan(SMALL + ",bias=input,softcap=30,sinks=1,alibi=1,mask=windowtl,window_left=8,window_right=0",
                      arch=90)
    assert (s.bias, s.softcap, s.sinks, s.alibi, s.mask) == ("input", True, True, True, "windowtl")
    v = flashgen.plan("dtype=bf16,seqlens_q=3:0:1,seqlens_k=5:7:0,heads=4,head_dim=64,seqused_k=1", arch=90)
    assert v.varlen and not v.paged
    p = flashgen.plan("dtype=bf16,seqlen_q=16,seqlen_k=300,heads=4,head_dim=64,page_size=16", arch=90)
    assert p.paged and not p.varlen


def test_plan_errors_carry_library_messages():
    with pytest.raises(flashgen.InvalidArgument) as e:
        flashgen.plan("dtype=f16,seqlen=128,heads=2,head_dim=100", arch=90)
    assert isinstance(e.value, ValueError) and isinstance(e.value, flashgen.Error)
    assert str(e.value) == "head_dim (100) must be a multiple of 8 in [16, 256]"
    with pytest.raises(ValueError, match=r"key 'dtype': 'f8' is not a known dtype"):
        flashgen.plan("dtype=f8,seqlen=128,heads=2,head_dim=64", arch=90)
    with pytest.raises(ValueError, match=r"item 'seqlen' has no '='"):
        flashgen.plan("dtype=f16,seqlen,heads=2,head_dim=64", arch=90)
    with pytest.raises(flashgen.Unsupported) as e:
        flashgen.plan(SMALL, arch=50)
    assert isinstance(e.value, NotImplementedError) and isinstance(e.value, flashgen.Error)
    assert "no profile for compute capability sm_50" in str(e.value)
    with pytest.raises(NotImplementedError, match=r"dtype \(bf16\) is not an operand dtype of the m16n8k8 unit"):
        flashgen.plan("dtype=bf16,seqlen=128,heads=2,head_dim=64", arch=75)
    for bad in (True, 9.0, "90"):
        with pytest.raises(ValueError, match="arch is"):
            flashgen.plan(SMALL, arch=bad)


def test_plan_without_arch_needs_a_gpu():
    if flashgen.gpu_available():
        assert flashgen.plan(SMALL).arch == flashgen.current_device()["arch"]
    else:
        with pytest.raises(flashgen.Unavailable, match="no CUDA driver|GPU"):
            flashgen.plan(SMALL)


def test_plan_decode():
    problem = "dtype=f16,seqlen_q=1,seqlen_k=4096,heads_q=32,heads_kv=8,head_dim=128"
    for splits in (0, 1, 7, 128):
        d = flashgen.plan_decode(problem, arch=90, sm_count=132, num_splits=splits)
        assert set(d) == {"split", "combine", "num_splits", "workspace_bytes"}
        assert (d["split"].family, d["combine"].family) == ("fwd_split", "combine")
        assert d["split"].dtype == "f16" and d["combine"].dtype == "f16" and d["combine"].head_dim_v == 128
        n = d["num_splits"]
        assert (n == splits) if splits else (1 <= n <= 128)
        # partials: num_splits x batch x heads_q x seqlen_q x (head_dim_v + 1) fp32, rounded up to 256 bytes
        raw = n * 1 * 32 * 1 * (128 + 1) * 4
        assert d["workspace_bytes"] == (raw + 255) // 256 * 256
    with pytest.raises(ValueError, match=r"num_splits is 999; allowed: 0..128"):
        flashgen.plan_decode(problem, arch=90, sm_count=132, num_splits=999)
    if not flashgen.gpu_available():
        with pytest.raises(flashgen.Unavailable):
            flashgen.plan_decode(problem, arch=90)  # sm_count from the (absent) GPU


# ---- KernelSpec -------------------------------------------------------------------


def test_kernel_spec_parse_canonical_properties():
    s = flashgen.plan("dtype=bf16,seqlen_q=64,seqlen_k=256,heads_q=8,heads_kv=2,head_dim=96,head_dim_v=64,"
                      "mask=causaltl,bias=input,lse=1", arch=90)
    text = s.canonical()
    assert str(s) == text and repr(s) == f"KernelSpec('{text}')"
    t = flashgen.KernelSpec.parse(text)
    assert t == s and t.canonical() == text and hash(t) == hash(s)
    f = _spec_fields(s)
    assert text.startswith("flashgen.fwd.v1:")
    assert (int(f["sm"]), f["unit"], f["dtype"]) == (s.arch, s.unit, s.dtype)
    assert (int(f["d"]), int(f["dv"])) == (s.head_dim, s.head_dim_v) == (96, 64)
    assert (int(f["bm"]), int(f["bn"]), int(f["w"]), int(f["s"])) == (s.block_m, s.block_n, s.warps, s.stages)
    assert (f["mask"], f["bias"], f["lse"]) == (s.mask, s.bias, "1" if s.has_lse else "0")
    assert s.smem_bytes() > 0 and s.threads() % 32 == 0
    assert s.kernel_name().startswith("flashgen_fwd_sm90_bf16_d96v64_")
    # generate() takes the spec or its canonical text
    assert flashgen.generate(text) == flashgen.generate(s)


def test_kernel_spec_eq_hash():
    a = flashgen.plan(SMALL, arch=90)
    b = flashgen.plan(SMALL + ",lse=1", arch=90)
    a2 = flashgen.KernelSpec.parse(a.canonical())
    assert a == a2 and not (a != a2)
    assert a != b and not (a == b)
    assert len({a, a2, b}) == 2
    assert {a: 1}[a2] == 1


def test_kernel_spec_eq_other_types():
    """== with something that is not a KernelSpec is False (not a TypeError), != True."""
    a = flashgen.plan(SMALL, arch=90)
    assert (a == a.canonical()) is False
    assert (a != a.canonical()) is True
    assert a not in [None, 1, a.canonical()]


@pytest.mark.parametrize("text,match", [
    ("", "does not start with the tag"),
    ("garbage", "does not start with the tag"),
    ("flashgen.fwd.v1:sm=80", "field 'unit' is missing"),
])
def test_kernel_spec_parse_errors(text, match):
    with pytest.raises(flashgen.InvalidArgument, match=match):
        flashgen.KernelSpec.parse(text)


def test_kernel_spec_parse_unknown_field():
    text = flashgen.plan(SMALL, arch=80).canonical() + ",zz=1"
    with pytest.raises(ValueError, match="field 'zz'"):
        flashgen.KernelSpec.parse(text)


def test_spec_argument_type():
    with pytest.raises(flashgen.InvalidArgument, match="spec is a int"):
        flashgen.generate(42)
    with pytest.raises(flashgen.InvalidArgument, match="spec is a dict"):
        flashgen.compile({})


# ---- generate / compile (NVRTC; no GPU needed) ------------------------------------

_EM_CUDA = 190


def _check_cubin(cubin: bytes, arch: int):
    assert isinstance(cubin, bytes) and len(cubin) > 1000
    assert cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", cubin, 18)[0] == _EM_CUDA  # e_machine
    flags = struct.unpack_from("<I", cubin, 48)[0]  # e_flags (64-bit ELF): the SM, per ELF ABI version
    assert arch in (flags & 0xFF, (flags >> 8) & 0xFF), hex(flags)


def test_generate_is_deterministic_and_names_the_kernel():
    s = flashgen.plan(SMALL + ",mask=causalbr", arch=80)
    src = flashgen.generate(s)
    assert src == flashgen.generate(s.canonical())
    assert f'extern "C"' in src and s.kernel_name() in src
    assert src != flashgen.generate(flashgen.plan(SMALL, arch=80))


@pytest.mark.parametrize("which", ["fwd_sm80", "combine_sm90"])
def test_compile(which):
    if which == "fwd_sm80":
        s = flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=80)
    else:
        s = flashgen.plan_decode("dtype=bf16,seqlen_q=1,seqlen_k=2048,heads=4,head_dim=64", arch=90, sm_count=132,
                                 num_splits=4)["combine"]
    c = flashgen.compile(s)
    assert isinstance(c, flashgen.CompiledKernel)
    assert c.spec == s and c.name == s.kernel_name()
    assert re.fullmatch(r"[0-9a-f]{32}", c.key)
    _check_cubin(c.cubin, s.arch)
    assert c.name in flashgen.generate(s)
    assert isinstance(c.compile_log, str) and isinstance(c.cache_path, str)
    again = flashgen.compile(s.canonical())
    assert again.from_cache is True
    assert (again.key, again.cubin, again.name) == (c.key, c.cubin, c.name)
    if again.cache_path:
        assert Path(again.cache_path).is_file()
    assert "bytes" in repr(c) and c.name in repr(c)


def test_compile_fresh_cache(tmp_path):
    """In a new cache directory the first compile runs NVRTC (from_cache False, the ptxas report
    in the log, the cubin written under the directory) and the second reads the cache."""
    r = _run_python(f"""
        import json, flashgen
        s = flashgen.plan("dtype=bf16,seqlen=64,heads=1,head_dim=48", arch=80)
        a = flashgen.compile(s)
        b = flashgen.compile(s)
        print(json.dumps(dict(a_cached=a.from_cache, b_cached=b.from_cache, path=a.cache_path, log=a.compile_log,
                              same=a.cubin == b.cubin, size=len(a.cubin), name=a.name,
                              kernel=s.kernel_name())))
    """, {"FLASHGEN_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["a_cached"] is False and d["b_cached"] is True and d["same"] and d["name"] == d["kernel"]
    assert Path(d["path"]).parent == tmp_path and Path(d["path"]).stat().st_size >= d["size"]
    assert "ptxas" in d["log"]


# ---- explain ----------------------------------------------------------------------


def test_explain_report():
    problem = "dtype=bf16,seqlen=300,heads_q=8,heads_kv=2,head_dim=128,mask=causalbr"
    report = flashgen.explain(problem, arch=90, compile=False)
    s = flashgen.plan(problem, arch=90)
    assert re.search(r"^spec\s+" + re.escape(s.canonical()) + "$", report, re.M)
    assert re.search(r"^kernel\s+" + re.escape(s.kernel_name()) + "$", report, re.M)
    assert re.search(r"^arch\s+sm_90$", report, re.M)
    # keywords and sms
    assert flashgen.explain(dtype="bf16", seqlen=300, heads_q=8, heads_kv=2, head_dim=128, mask="causalbr", arch=90,
                            sms=132, compile=False).splitlines()[:5] == report.splitlines()[:5]


def test_explain_compiles():
    report = flashgen.explain("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=80)
    assert re.search(r"^registers\s+\d+ per thread", report, re.M), report


def test_explain_errors():
    with pytest.raises(flashgen.InvalidArgument) as e:
        flashgen.explain("dtype=f8,seqlen=128,heads=2,head_dim=64", arch=90, compile=False)
    assert isinstance(e.value, ValueError) and "key 'dtype': 'f8' is not a known dtype" in str(e.value)
    assert not str(e.value).startswith("flashgen explain:")
    with pytest.raises(flashgen.Unsupported) as e:
        flashgen.explain("dtype=bf16,seqlen=1000,heads=8,head_dim=96", arch=75, compile=False)
    msg = str(e.value)
    assert isinstance(e.value, NotImplementedError)
    assert "unsupported: 1 rule broken" in msg and "dtype (bf16) is not an operand dtype" in msg
    assert "nearest supported alternatives" in msg


# ---- pregen -----------------------------------------------------------------------


def test_pregen():
    good = flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=80)  # compiled by test_compile too
    bad = flashgen.KernelSpec.parse(flashgen.plan("dtype=f16,seqlen=128,heads=2,head_dim=96", arch=75).canonical()
                                    .replace("dtype=f16", "dtype=bf16"))  # parses; not valid for sm_75
    results = flashgen.pregen([bad, good.canonical(), "dtype=bf16,seqlen=64,heads=1,head_dim=48"], archs=[80],
                              threads=2)
    assert [r.spec for r in results] == [bad, good, flashgen.plan("dtype=bf16,seqlen=64,heads=1,head_dim=48",
                                                                  arch=80)]
    assert all(isinstance(r, flashgen.PregenResult) for r in results)
    r_bad, r_good, r_problem = results
    assert r_bad.ok is False and "is not an operand dtype" in r_bad.error and "failed" in repr(r_bad)
    for r in (r_good, r_problem):  # the failed spec did not stop them
        assert r.ok is True and r.error == "" and r.seconds >= 0
        if r.cache_path:
            assert Path(r.cache_path).is_file()


def test_pregen_expands_problems():
    # each problem is planned for every arch; decode=True adds the split-KV pair (nothing new compiles:
    # the threads=1 run compiles these small kernels once, later runs read the cache)
    problem = dict(dtype="f16", seqlen_q=1, seqlen_k=512, heads=2, head_dim=32)
    results = flashgen.pregen([problem], archs=[80, 90], decode=True, threads=1)
    fams = [(r.spec.arch, r.spec.family) for r in results]
    assert fams == [(80, "fwd"), (80, "fwd_split"), (80, "combine"), (90, "fwd"), (90, "fwd_split"),
                    (90, "combine")]
    assert all(r.ok for r in results), [r.error for r in results]


def test_pregen_arguments():
    with pytest.raises(ValueError, match="threads is -1"):
        flashgen.pregen([], threads=-1)
    assert flashgen.pregen([], threads=0) == []
    # Items that cannot be parsed or planned fail on their own, named, after the specs that compiled.
    good = "dtype=f16,seqlen=64,heads=1,head_dim=64"
    results = flashgen.pregen([good, "dtype=f16,seqlen=64,heads=1,head_dim=100", "flashgen.fwd.v1:garbage",
                               "dtype=bf16,seqlen=64,heads=1,head_dim=64"], archs=[80, 75], threads=1)
    assert [r.ok for r in results] == [True, True, True, False, False, False, False]
    assert [r.spec.arch for r in results[:3]] == [80, 75, 80]
    errors = [r.error for r in results[3:]]
    assert errors[0].startswith("items[1] on sm_80: ") and "head_dim (100)" in errors[0]
    assert errors[1].startswith("items[1] on sm_75: ")
    assert errors[2].startswith("items[2]: ") and "garbage" in errors[2]
    assert errors[3].startswith("items[3] on sm_75: ") and "bf16" in errors[3]  # Turing has no bf16
    assert all(r.spec is None for r in results[3:]) and "None" in repr(results[3])
    # One item as is; archs as one int.
    assert [r.ok for r in flashgen.pregen(good, archs=80)] == [True]
    for bad, match in (({"archs": [True]}, r"archs\[\] is bool True"), ({"archs": ["80"]}, r"archs\[\] is str"),
                       ({"threads": 2**31}, r"threads is 2147483648; allowed: 0..4096"),
                       ({"decode": "no"}, r"decode is 'no'; expected True or False")):
        with pytest.raises(flashgen.InvalidArgument, match=match):
            flashgen.pregen([good], **({"archs": [80]} | bad))
    with pytest.raises(flashgen.InvalidArgument, match="items is NoneType"):
        flashgen.pregen(None)


# ---- exceptions -------------------------------------------------------------------


def test_exception_classes():
    E = flashgen
    assert issubclass(E.Error, RuntimeError)
    assert issubclass(E.InvalidArgument, E.Error) and issubclass(E.InvalidArgument, ValueError)
    assert issubclass(E.Unsupported, E.Error) and issubclass(E.Unsupported, NotImplementedError)
    for cls in (E.CompileError, E.DriverError, E.Unavailable):
        assert issubclass(cls, E.Error) and issubclass(cls, RuntimeError) and not issubclass(cls, ValueError)
    assert issubclass(E.CacheIOError, E.Error) and issubclass(E.CacheIOError, OSError)
    names = {c.__name__ for c in (E.Error, E.InvalidArgument, E.Unsupported, E.CompileError, E.DriverError,
                                  E.Unavailable, E.CacheIOError)}
    assert len(names) == 7
    assert E.InvalidArgument.__module__ == "flashgen"


_ERROR_PROBE = """
    import flashgen
    try:
        s = flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=80)
        flashgen.compile(s)
    except flashgen.Error as e:
        print(type(e).__name__, isinstance(e, RuntimeError), isinstance(e, OSError))
        print(e)
    else:
        print("no error")
"""


def test_unavailable_without_nvrtc(tmp_path):
    r = _run_python(_ERROR_PROBE, {"FLASHGEN_NVRTC_LIBRARY": str(tmp_path / "libnvrtc.so.missing"),
                                   "FLASHGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    name, _, msg = r.stdout.partition("\n")
    assert name == "Unavailable True False", r.stdout
    assert "FLASHGEN_NVRTC_LIBRARY=" in msg and "could not be used" in msg


def test_cache_io_error_for_unreadable_profile(tmp_path):
    r = _run_python(_ERROR_PROBE, {"FLASHGEN_PROFILE": str(tmp_path / "missing.yml"),
                                   "FLASHGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    name, _, msg = r.stdout.partition("\n")
    assert name == "CacheIOError True True", r.stdout  # (flashgen.Error is a RuntimeError)
    assert "cannot read profile file" in msg and "missing.yml" in msg


_PROFILE_PROBE = """
    import flashgen
    for f in (lambda: flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=ARCH),
              lambda: flashgen.explain("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=ARCH, compile=False)):
        try:
            f()
        except flashgen.Error as e:
            print(type(e).__name__, str(e).splitlines()[0])
        else:
            print("no error")
"""


@pytest.mark.parametrize("case", ["missing", "invalid", "other arch"])
def test_explain_raises_what_plan_raises_for_a_broken_profile(tmp_path, case):
    """A FLASHGEN_PROFILE that cannot serve: explain() (the CLI underneath) raises the class plan()
    raises, with the same first line."""
    path = tmp_path / "profile.yml"
    arch = 90
    if case == "invalid":
        path.write_text("name: [unclosed\n")
    elif case == "other arch":  # a valid profile (the built-in hopper one) asked for sm_80
        path.write_text((REPO / "profiles" / "hopper.yml").read_text())
        arch = 80
    r = _run_python(_PROFILE_PROBE.replace("ARCH", str(arch)),
                    {"FLASHGEN_PROFILE": str(path), "FLASHGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    expected = {"missing": "CacheIOError", "invalid": "InvalidArgument", "other arch": "Unsupported"}[case]
    assert lines[0].split()[0] == expected, r.stdout
    assert lines[1] == lines[0], r.stdout


@pytest.mark.parametrize("problem", ["dtype=f16,seqlen=4096,heads=32,head_dim=100",
                                     "dtype=f16,seqlen=64,heads_q=3,heads_kv=2,head_dim=64"])
def test_explain_raises_what_plan_raises_for_an_invalid_problem(problem):
    """A problem plan() refuses as invalid: explain() raises InvalidArgument too (with its whole report)."""
    with pytest.raises(flashgen.InvalidArgument) as planned:
        flashgen.plan(problem, arch=75)
    with pytest.raises(flashgen.InvalidArgument) as explained:
        flashgen.explain(problem, arch=75, compile=False)
    assert str(planned.value).splitlines()[0] in str(explained.value)
    assert "unsupported: " in str(explained.value)


def test_device_name_that_is_not_utf8_is_refused_by_name():
    name = os.fsdecode(b"NV\xff\xfe")  # lone surrogates, as a file system name that is not UTF-8 decodes
    for f in (lambda: flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=90, device=name),
              lambda: flashgen.explain("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=90, device=name,
                                       compile=False)):
        with pytest.raises(flashgen.InvalidArgument, match="device is .* not valid UTF-8"):
            f()


def test_device_name_no_tune_file_can_hold_is_refused():
    """Tune files record 1 to 256 printable ASCII characters: another name could never match an entry."""
    for name in ("NVIDIA\nH200", "NVIDIA H200 \u00e9", "A" * 257):
        for f in (lambda: flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=90, device=name),
                  lambda: flashgen.explain("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=90, device=name,
                                           compile=False)):
            with pytest.raises(flashgen.InvalidArgument, match="must be 1 to 256 printable ASCII characters"):
                f()
    assert flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=90, device="A" * 256) is not None


def test_compile_error_from_failing_nvrtc(tmp_path):
    """An NVRTC that fails every compile (the C++ tier's test double, test/cpu/fake_nvrtc.c)."""
    src = REPO / "test" / "cpu" / "fake_nvrtc.c"
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not src.is_file() or cc is None:
        pytest.skip("needs the repository's test/cpu/fake_nvrtc.c and a C compiler")
    lib = tmp_path / "libfake_nvrtc.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    r = _run_python(_ERROR_PROBE,
                    {"FLASHGEN_NVRTC_LIBRARY": str(lib), "FAKE_NVRTC_VERSION": "13.0", "FAKE_NVRTC_MODE": "fail",
                     "FLASHGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    name, _, msg = r.stdout.partition("\n")
    assert name == "CompileError True False", r.stdout
    assert "failed to compile kernel flashgen_fwd_sm80_f16_d32v32" in msg
    assert "fake_nvrtc: error: this NVRTC is a test double" in msg  # the NVRTC log travels with it


# ---- the flat problem layout ------------------------------------------------------


def test_layout_matches_native_module():
    assert len(_layout.PROBLEM_FIELDS) == _C.PROBLEM_FIELDS
    assert len(_layout.MERGE_FIELDS) == _C.MERGE_FIELDS
    assert len(set(_layout.PROBLEM_FIELDS)) == len(_layout.PROBLEM_FIELDS)
    assert len(set(_layout.MERGE_FIELDS)) == len(_layout.MERGE_FIELDS)
    with pytest.raises(flashgen.InvalidArgument, match=f"problem list has 3 fields; expected {_C.PROBLEM_FIELDS}"):
        _C.check_problem([0, 0, 0], None, 0.0)
    with pytest.raises(flashgen.InvalidArgument, match=f"merge list has 1 fields; expected {_C.MERGE_FIELDS}"):
        _C.check_merge([0])


def _fields(**kw) -> list:
    """A valid flat problem (contiguous BSHD at made-up addresses), fields overridden by name."""
    B, Sq, Sk, Hq, Hkv, D, Dv = 2, 64, 128, 4, 2, 64, 64
    v = dict(dtype=0, batch=B, seqlen_q=Sq, seqlen_k=Sk, heads_q=Hq, heads_kv=Hkv, head_dim=D, head_dim_v=Dv, mask=0,
             q=0x10000, q_stride_batch=Sq * Hq * D, q_stride_seq=Hq * D, q_stride_head=D,
             k=0x20000, k_stride_batch=Sk * Hkv * D, k_stride_seq=Hkv * D, k_stride_head=D,
             v=0x30000, v_stride_batch=Sk * Hkv * Dv, v_stride_seq=Hkv * Dv, v_stride_head=Dv,
             o=0x40000, o_stride_batch=Sq * Hq * Dv, o_stride_seq=Hq * Dv, o_stride_head=Dv,
             window_left=-1, window_right=-1)
    v.update(kw)
    f = [0] * len(_layout.PROBLEM_FIELDS)
    for name, value in v.items():
        f[F[name]] = value
    return f


def test_layout_enum_codes():
    """_layout's enum codes name what the library takes them for (through the native plan)."""
    assert _C.check_problem(_fields(), None, 0.0) is None
    for code, name in enumerate(_layout.DTYPES):
        assert _C.plan_problem(_fields(dtype=code), None, 0.0, 90).dtype == name
    for code, name in enumerate(_layout.MASKS):
        assert _C.plan_problem(_fields(mask=code), None, 0.0, 90).mask == name
    for code, name in enumerate(_layout.BIAS_KINDS):
        f = _fields(bias_kind=code, bias=0x50000 if code else 0, bias_stride_k=1 if code else 0)
        assert _C.plan_problem(f, None, 0.0, 90).bias == name
    with pytest.raises(flashgen.InvalidArgument, match="mask code 5 is out of range"):
        _C.check_problem(_fields(mask=len(_layout.MASKS)), None, 0.0)
    with pytest.raises(flashgen.InvalidArgument, match="dtype code 2 is out of range"):
        _C.check_problem(_fields(dtype=len(_layout.DTYPES)), None, 0.0)
    assert _layout.STATE_DTYPES == ("f32", "f16", "bf16")


# ---- the eager calls, without a GPU -----------------------------------------------


class _Native:
    """Replaces the native launch calls: records each call's arguments, runs the library's
    checks of the problem (check_problem / check_merge), launches nothing. `need`: the
    workspace bytes a decode asks for (returned while the given workspace is smaller)."""

    def __init__(self):
        self.calls = []
        self.merges = []
        self.need = 0

    def attention(self, fields, scale, softcap, stream, num_splits, workspace, workspace_bytes):
        self.calls.append(dict(fields=list(fields), scale=scale, softcap=softcap, stream=stream,
                               num_splits=num_splits, workspace=workspace, workspace_bytes=workspace_bytes))
        _C.check_problem(fields, scale, softcap)
        return self.need if workspace_bytes < self.need else 0

    def merge(self, fields, stream):
        self.merges.append(dict(fields=list(fields), stream=stream))
        _C.check_merge(fields)

    @property
    def f(self):
        return self.calls[-1]["fields"]


@pytest.fixture
def native(monkeypatch):
    n = _Native()
    monkeypatch.setattr(_C, "attention", n.attention)
    monkeypatch.setattr(_C, "merge", n.merge)
    return n


class WouldLaunch(AssertionError):
    pass


@pytest.fixture
def guarded_native(monkeypatch):
    """The real native calls, which refuse a bad call before any device access. Where a GPU is
    present, a call the library's checks accept would be launched on made-up addresses: it fails
    the test (WouldLaunch) instead."""
    if not flashgen.gpu_available():
        return
    real_attention = _C.attention

    def attention(fields, scale, softcap, stream, num_splits, workspace, workspace_bytes):
        if -1 <= num_splits <= _C.MAX_DECODE_SPLITS:
            _C.check_problem(fields, scale, softcap)  # raises for a bad problem
            raise WouldLaunch("the library accepted this problem; it would be launched on made-up addresses")
        return real_attention(fields, scale, softcap, stream, num_splits, workspace, workspace_bytes)

    def merge(fields, stream):
        _C.check_merge(fields)
        raise WouldLaunch("the library accepted this merge; it would be launched on made-up addresses")

    monkeypatch.setattr(_C, "attention", attention)
    monkeypatch.setattr(_C, "merge", merge)


def dense(B=2, Sq=64, Sk=128, Hq=8, Hkv=2, D=64, Dv=None, dtype="float16"):
    Dv = D if Dv is None else Dv
    return fc.array((B, Sq, Hq, D), dtype), fc.array((B, Sk, Hkv, D), dtype), fc.array((B, Sk, Hkv, Dv), dtype)


def test_dense_call_fields(native):
    q, k, v = dense(Dv=128)
    before = len(fc.allocations)
    out, lse = flashgen.attention(q, k, v, causal="bottom_right", return_lse=True, scale=0.5, softcap=20.0)
    assert len(native.calls) == 1
    c, f = native.calls[0], native.f
    assert (c["scale"], c["softcap"], c["num_splits"], c["stream"]) == (0.5, 20.0, -1, 0)
    assert [f[F[n]] for n in ("dtype", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim",
                              "head_dim_v")] == [0, 2, 64, 128, 8, 2, 64, 128]
    assert _layout.MASKS[f[F["mask"]]] == "causalbr" and (f[F["window_left"]], f[F["window_right"]]) == (-1, -1)
    for name, a in (("q", q), ("k", k), ("v", v), ("o", out)):
        assert [f[F[name]], f[F[name + "_stride_batch"]], f[F[name + "_stride_seq"]],
                f[F[name + "_stride_head"]]] == [a.ptr, *a.strides[:3]], name
    # outputs: O [B, Sq, Hq, Dv] in q's dtype, LSE [B, Hq, Sq] float32, made by the arrays' library
    assert fc.allocations[before:] == [out, lse]
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((2, 64, 8, 128), "float16", (2, 8, 64), "float32")
    assert [f[F["lse"]], f[F["lse_stride_batch"]], f[F["lse_stride_head"]]] == [lse.ptr, 8 * 64, 64]
    assert f[F["bias_kind"]] == 0 and f[F["bias"]] == 0 and f[F["sinks"]] == 0 and f[F["alibi_slopes"]] == 0
    for name in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "total_q", "total_k", "page_table", "page_size",
                 "num_pages"):
        assert f[F[name]] == 0, name
    # the same problem as the CLI's text: the native plan of these fields is plan()'s spec
    spec = _C.plan_problem(f, c["scale"], c["softcap"], 90)
    assert spec == flashgen.plan("dtype=f16,batch=2,seqlen_q=64,seqlen_k=128,heads_q=8,heads_kv=2,head_dim=64,"
                                 "head_dim_v=128,mask=causalbr,lse=1,softcap=20", arch=90)


class _FakePrepared:
    """Stands in for _flashgen.PreparedCall: records run()'s arguments."""

    spec = "flashgen.fwd.v1:fake"

    def __init__(self, fields, scale, softcap):
        _C.check_problem(fields, scale, softcap)
        self.fields, self.scale, self.softcap, self.runs = list(fields), scale, softcap, []
        self.launches = True  # False: as after a replan that chose the split-KV decode

    def run(self, q, k, v, o, lse, stream):
        self.runs.append((q, k, v, o, lse, stream))
        return self.launches


def test_bind_checks_once_and_launches_the_bound_pointers(native, monkeypatch):
    made = []
    monkeypatch.setattr(_C, "prepare", lambda f, sc, cap: made.append(_FakePrepared(f, sc, cap)) or made[-1])
    q, k, v = dense(Dv=128)
    before = len(fc.allocations)
    call = flashgen.bind(q, k, v, causal="bottom_right", return_lse=True, scale=0.5, softcap=20.0)
    assert isinstance(call, flashgen.BoundCall) and not native.calls  # nothing launched at bind
    assert len(made) == 1 and fc.allocations[before:] == [call.out, call.lse]
    p = made[0]
    assert (p.scale, p.softcap) == (0.5, 20.0) and _layout.MASKS[p.fields[F["mask"]]] == "causalbr"
    for name, a in (("q", q), ("k", k), ("v", v), ("o", call.out)):
        assert p.fields[F[name]] == a.ptr, name
    out, lse = call()
    assert (out, lse) == (call.out, call.lse)
    assert call(stream=1234) == (call.out, call.lse)
    assert p.runs == [(q.ptr, k.ptr, v.ptr, call.out.ptr, call.lse.ptr, 0),
                      (q.ptr, k.ptr, v.ptr, call.out.ptr, call.lse.ptr, 1234)]
    assert fc.allocations[before:] == [call.out, call.lse] and not native.calls  # no allocation per call
    # out given, no LSE: the bound output is out itself
    o = fc.array((2, 64, 8, 128), "float16")
    call = flashgen.bind(q, k, v, out=o)
    assert call() is o and made[-1].runs[-1] == (q.ptr, k.ptr, v.ptr, o.ptr, 0, 0) and not native.calls
    # a prepared call that no longer launches (a replan chose the decode): the general path, same tensors
    made[-1].launches = False
    assert call() is o and len(native.calls) == 1 and native.f[F["o"]] == o.ptr and native.f[F["q"]] == q.ptr


def test_bind_decode_signature_takes_the_general_path(native, monkeypatch):
    monkeypatch.setattr(_C, "prepare", lambda f, sc, cap: None)  # (the library would run a split-KV decode)
    q, k, v = dense(Sq=1, Sk=4096)
    call = flashgen.bind(q, k, v, return_lse=True)
    assert call.spec is None and not native.calls
    out, lse = call()
    assert out is call.out and lse is call.lse and len(native.calls) == 1
    assert native.f[F["o"]] == call.out.ptr


def test_bind_refuses_before_preparing(native, monkeypatch):
    monkeypatch.setattr(_C, "prepare", lambda *a: pytest.fail("prepare() reached"))
    q, k, v = dense()
    with pytest.raises(flashgen.InvalidArgument, match="k has shape"):
        flashgen.bind(q, fc.array((2, 128, 2, 32), "float16"), v)
    with pytest.raises(flashgen.InvalidArgument, match="causal is 'yes'"):
        flashgen.bind(q, k, v, causal="yes")
    with pytest.raises(flashgen.InvalidArgument, match="softcap"):
        flashgen.bind(q, k, v, softcap="big")


def test_dense_call_modifiers(native):
    q, k, v = dense(dtype="bfloat16")
    B, Sq, Hq, D = q.shape
    Sk = k.shape[1]
    out = fc.array((B, Sq, Hq, D), "bfloat16")
    bias = fc.array((1, Hq, 1, Sk), "float32")  # broadcast over batch and rows
    sinks = fc.array((Hq,), "float32")
    alibi = fc.array((B, Hq), "float32")
    r = flashgen.attention(q, k, v, causal="top_left", window=(16, None), bias=bias, sinks=sinks,
                           alibi_slopes=alibi, out=out, num_splits=3, stream=1234)
    assert r is out
    c, f = native.calls[0], native.f
    assert (c["num_splits"], c["stream"], c["scale"], c["softcap"]) == (3, 1234, None, 0.0)
    assert _layout.MASKS[f[F["mask"]]] == "windowtl" and (f[F["window_left"]], f[F["window_right"]]) == (16, 0)
    assert _layout.BIAS_KINDS[f[F["bias_kind"]]] == "f32" and f[F["bias"]] == bias.ptr
    assert [f[F["bias_stride_batch"]], f[F["bias_stride_head"]], f[F["bias_stride_q"]],
            f[F["bias_stride_k"]]] == [0, Sk, 0, 1]
    assert f[F["sinks"]] == sinks.ptr
    assert (f[F["alibi_slopes"]], f[F["alibi_stride_batch"]]) == (alibi.ptr, Hq)
    assert f[F["o"]] == out.ptr and f[F["lse"]] == 0
    assert _C.plan_problem(f, None, 0.0, 90) == flashgen.plan(
        "dtype=bf16,batch=2,seqlen_q=64,seqlen_k=128,heads_q=8,heads_kv=2,head_dim=64,mask=windowtl,window_left=16,"
        "window_right=0,bias=f32,sinks=1,alibi=1", arch=90)
    # q-dtype bias of fewer dims, slopes per head
    bias2 = fc.array((Sq, Sk), "bfloat16")
    flashgen.attention(q, k, v, bias=bias2, alibi_slopes=fc.array((Hq,), "float32"), window=(None, 4))
    f = native.f
    assert _layout.BIAS_KINDS[f[F["bias_kind"]]] == "input"
    assert [f[F["bias_stride_batch"]], f[F["bias_stride_head"]], f[F["bias_stride_q"]],
            f[F["bias_stride_k"]]] == [0, 0, Sk, 1]
    assert f[F["alibi_stride_batch"]] == 0
    assert _layout.MASKS[f[F["mask"]]] == "windowbr" and (f[F["window_left"]], f[F["window_right"]]) == (-1, 4)


def test_strided_views_pass_their_strides(native):
    # q from a [B, Hq, Sq, D] tensor (transposed), k and v slices of one packed [B, Sk, 2, Hkv, D] buffer
    B, Sq, Sk, Hq, Hkv, D = 2, 64, 128, 8, 2, 64
    base_q = fc.array((B, Hq, Sq, D))
    q = base_q.view((B, Sq, Hq, D), (Hq * Sq * D, D, Sq * D, 1))
    kv = fc.array((B, Sk, 2, Hkv, D))
    st = kv.strides
    k = kv.view((B, Sk, Hkv, D), (st[0], st[1], st[3], 1))
    v = kv.view((B, Sk, Hkv, D), (st[0], st[1], st[3], 1), offset_elements=st[2])
    kb = fc.array((1, Sk, Hkv, D)).view((B, Sk, Hkv, D), (0, Hkv * D, D, 1))  # broadcast over batch
    flashgen.attention(q, kb, v)
    f = native.f
    assert [f[F["q_stride_batch"]], f[F["q_stride_seq"]], f[F["q_stride_head"]]] == [Hq * Sq * D, D, Sq * D]
    assert f[F["k_stride_batch"]] == 0
    assert [f[F["v"]], f[F["v_stride_batch"]], f[F["v_stride_seq"]]] == [kv.ptr + st[2] * 2, st[0], st[1]]
    flashgen.attention(q, k, v)
    assert native.f[F["k"]] == kv.ptr


def test_varlen_call_fields(native):
    Tq, Tk, Hq, Hkv, D = 100, 150, 8, 2, 64
    q, k, v = fc.array((Tq, Hq, D)), fc.array((Tk, Hkv, D)), fc.array((Tk, Hkv, D))
    cuq, cuk, used = fc.array((4,), "int32"), fc.array((4,), "int32"), fc.array((3,), "int32")
    out, lse = flashgen.attention_varlen(q, k, v, cuq, cuk, 50, 60, seqused_k=used, return_lse=True,
                                         causal="bottom_right")
    f = native.f
    assert [f[F[n]] for n in ("batch", "seqlen_q", "seqlen_k", "total_q", "total_k")] == [3, 50, 60, Tq, Tk]
    assert [f[F["cu_seqlens_q"]], f[F["cu_seqlens_k"]], f[F["seqused_k"]]] == [cuq.ptr, cuk.ptr, used.ptr]
    for name in ("q", "k", "v", "o"):
        assert f[F[name + "_stride_batch"]] == 0, name
    assert (f[F["q_stride_seq"]], f[F["q_stride_head"]]) == (Hq * D, D)
    assert out.shape == (Tq, Hq, D) and lse.shape == (Hq, Tq)
    assert [f[F["lse"]], f[F["lse_stride_batch"]], f[F["lse_stride_head"]]] == [lse.ptr, 0, Tq]
    assert _C.plan_problem(f, None, 0.0, 90) == flashgen.plan(
        "dtype=f16,seqlens_q=50:25:25,seqlens_k=60:45:45,heads_q=8,heads_kv=2,head_dim=64,mask=causalbr,lse=1,"
        "seqused_k=1", arch=90)


def test_paged_call_fields(native):
    B, Sq, Hq, Hkv, D, P, page = 3, 16, 8, 2, 64, 40, 16
    q = fc.array((B, Sq, Hq, D))
    kc, vc = fc.array((P, page, Hkv, D)), fc.array((P, page, Hkv, D))
    table = fc.array((B, 32), "int32").view((B, 10), (32, 1))  # rows 32 apart, 10 pages each
    used = fc.array((B,), "int32")
    flashgen.attention_paged(q, kc, vc, table, seqused_k=used)
    f = native.f
    assert [f[F[n]] for n in ("batch", "seqlen_q", "seqlen_k")] == [B, Sq, 10 * page]
    assert [f[F["page_table"]], f[F["page_table_stride"]], f[F["page_size"]], f[F["num_pages"]]] == [
        table.ptr, 32, page, P]
    assert [f[F["k_stride_batch"]], f[F["k_stride_seq"]], f[F["k_stride_head"]]] == [page * Hkv * D, Hkv * D, D]
    assert f[F["seqused_k"]] == used.ptr and f[F["cu_seqlens_q"]] == 0 and f[F["cu_seqlens_k"]] == 0
    # packed q, an explicit key bound
    qp = fc.array((20, Hq, D))
    cuq = fc.array((B + 1,), "int32")
    out = flashgen.attention_paged(qp, kc, vc, table, cu_seqlens_q=cuq, max_seqlen_q=9, max_seqlen_k=100)
    f = native.f
    assert out.shape == (20, Hq, D)
    assert [f[F[n]] for n in ("seqlen_q", "seqlen_k", "total_q", "total_k")] == [9, 100, 20, 0]
    assert f[F["cu_seqlens_q"]] == cuq.ptr and f[F["q_stride_batch"]] == 0
    assert _C.plan_problem(f, None, 0.0, 90).paged


def test_decode_workspace(native):
    """A decode the library sizes: the package allocates the workspace with the arrays' library,
    calls again, and keeps it for later calls on that stream; a given one that is too small is
    refused naming the bytes, after the one native call that asked (nothing launched)."""
    q, k, v = dense(B=1, Sq=1, Sk=4096, Hq=32, Hkv=8, D=128)
    native.need = 4096 * 8
    _core._workspaces.clear()
    before = len(fc.allocations)
    flashgen.decode(q, k, v)
    assert [c["num_splits"] for c in native.calls] == [0, 0]
    assert native.calls[0]["workspace_bytes"] == 0
    ws = [a for a in fc.allocations[before:] if a.dtype == "uint8"]
    assert len(ws) == 1 and ws[0].nbytes == native.need
    assert (native.calls[1]["workspace"], native.calls[1]["workspace_bytes"]) == (ws[0].ptr, native.need)
    # reused: one call, no new workspace
    n_alloc, n_calls = len(fc.allocations), len(native.calls)
    flashgen.decode(q, k, v, num_splits=5, out=fc.array((1, 1, 32, 128)))
    assert len(native.calls) == n_calls + 1 and len(fc.allocations) == n_alloc
    assert native.calls[-1]["workspace"] == ws[0].ptr and native.calls[-1]["num_splits"] == 5
    # a different stream gets its own
    flashgen.decode(q, k, v, stream=77)
    assert native.calls[-1]["workspace"] not in (0, ws[0].ptr)
    # too small a given one
    n_calls = len(native.calls)
    small = fc.array((1000,), "uint8")
    with pytest.raises(flashgen.InvalidArgument, match=f"workspace holds 1000 bytes; this decode needs {native.need}"):
        flashgen.decode(q, k, v, workspace=small)
    assert len(native.calls) == n_calls + 1
    # a big enough given one is used as is
    big = fc.array((native.need,), "uint8")
    flashgen.decode(q, k, v, workspace=big)
    assert (native.calls[-1]["workspace"], native.calls[-1]["workspace_bytes"]) == (big.ptr, native.need)
    _core._workspaces.clear()


def test_decode_routes(native):
    q, k, v = dense(B=1, Sq=1, Sk=256)
    flashgen.decode(q, k, v, num_splits=2)
    assert native.calls[-1]["num_splits"] == 2 and native.f[F["page_table"]] == 0
    kc, vc = fc.array((8, 64, 2, 64)), fc.array((8, 64, 2, 64))
    flashgen.decode(q, kc, vc, page_table=fc.array((1, 4), "int32"))
    assert native.f[F["page_table"]] != 0 and native.calls[-1]["num_splits"] == 0
    qv, kv_, vv = fc.array((3, 8, 64)), fc.array((300, 2, 64)), fc.array((300, 2, 64))
    flashgen.decode(qv, kv_, vv, cu_seqlens_q=fc.array((4,), "int32"), cu_seqlens_k=fc.array((4,), "int32"),
                    max_seqlen_q=1, max_seqlen_k=200)
    assert native.f[F["cu_seqlens_k"]] != 0 and native.f[F["total_k"]] == 300
    with pytest.raises(flashgen.InvalidArgument, match="seqused_k / max_seqlen_q / max_seqlen_k are for packed"):
        flashgen.decode(q, k, v, seqused_k=fc.array((1,), "int32"))


def test_merge_fields(native):
    S, B, Sq, H, Dv = 3, 2, 5, 4, 64
    o_p, lse_p = fc.array((S, B, Sq, H, Dv), "float32"), fc.array((S, B, H, Sq), "float32")
    out, lse = flashgen.merge_states(o_p, lse_p, out_dtype="bfloat16", return_lse=True, stream=5)
    f, s = native.merges[-1]["fields"], native.merges[-1]["stream"]
    assert s == 5
    assert [_layout.STATE_DTYPES[f[M["partial_dtype"]]], _layout.STATE_DTYPES[f[M["out_dtype"]]]] == ["f32", "bf16"]
    assert [f[M[n]] for n in ("num_states", "batch", "seqlen_q", "heads", "head_dim_v")] == [S, B, Sq, H, Dv]
    assert [f[M["o_partial"]], *[f[M["o_partial_stride_" + n]] for n in ("state", "batch", "seq", "head")]] == [
        o_p.ptr, *o_p.strides[:4]]
    assert [f[M["lse_partial"]], *[f[M["lse_partial_stride_" + n]] for n in ("state", "batch", "head", "seq")]] == [
        lse_p.ptr, *lse_p.strides]
    assert out.shape == (B, Sq, H, Dv) and out.dtype == "bfloat16" and lse.shape == (B, H, Sq)
    assert [f[M["o"]], f[M["lse"]]] == [out.ptr, lse.ptr]
    out2 = fc.array((B, Sq, H, Dv), "float16")
    assert flashgen.merge_states(o_p, lse_p, out=out2) is out2
    f = native.merges[-1]["fields"]
    assert _layout.STATE_DTYPES[f[M["out_dtype"]]] == "f16" and f[M["lse"]] == 0


# ---- argument errors, refused before any launch -----------------------------------

def _expect_refused(match, fn, *args, **kw):
    with pytest.raises(flashgen.InvalidArgument, match=match) as e:
        fn(*args, **kw)
    assert isinstance(e.value, ValueError)
    return e.value


@pytest.mark.parametrize("case,match", [
    ("k_head_dim", r"k has shape \[2, 128, 2, 32\]; expected \[2, 128, 2, 64\]"),
    ("k_batch", r"k has shape \[3, 128, 2, 64\]; expected \[2, 128, 2, 64\]"),
    ("v_seqlen", r"v has shape \[2, 100, 2, 64\]; expected \[2, 128, 2, 64\]"),
    ("v_heads", r"v has shape \[2, 128, 4, 64\]; expected \[2, 128, 2, 64\]"),
    ("k_dtype", r"q, k and v have dtypes f16, bf16, f16"),
    ("q_dtype", r"q has dtype f32; allowed: float16, bfloat16"),
    ("q_dims", r"q, k, v have 3, 4, 4 dims; expected BSHD"),
    ("out_shape", r"out has shape \[2, 64, 8, 32\]; expected \[2, 64, 8, 64\]"),
    ("out_dtype", r"out has dtype bf16; allowed: f16"),
    ("bias_shape", r"bias has shape \[2, 8, 64, 100\]; it must broadcast to \[batch, heads_q, seqlen_q, seqlen_k\] "
                   r"= \[2, 8, 64, 128\]"),
    ("bias_dims", r"bias has shape \[1, 2, 8, 64, 128\]"),
    ("bias_dtype", r"bias has dtype bf16; allowed: q's \(f16\) or float32"),
    ("sinks_shape", r"sinks has shape \[2\]; expected \[8\]"),
    ("sinks_dtype", r"sinks has dtype f16; allowed: f32"),
    ("sinks_stride", r"sinks has stride 2; it must be contiguous"),
    ("alibi_shape", r"alibi_slopes has shape \[3, 8\] and dtype f32; expected float32 \[heads_q\] = \[8\] or "
                    r"\[batch, heads_q\] = \[2, 8\]"),
    ("alibi_dtype", r"alibi_slopes has shape \[8\] and dtype f16"),
    ("alibi_stride", r"alibi_slopes has strides \[2\]; the heads must be contiguous"),
    ("k_device", r"k is on cuda:1 but q is on cuda:0"),
    ("out_device", r"out is on cuda:1 but q is on cuda:0"),
    ("k_host", r"k is on CPU \(DLPack device type 1\); flashgen runs on CUDA memory"),
    ("q_type", r"q is a builtins.list; expected a torch.Tensor or an array that supports DLPack"),
    ("stream", r"stream is a str; expected an int \(CUstream\)"),
    ("stream_handle", r"stream is -1; a CUstream handle is an unsigned 64-bit value"),
    ("stream_device", r"stream is on CUDA device 1; the tensors are on device 0"),
])
def test_dense_shape_errors(guarded_native, case, match):
    q, k, v = dense()
    kw = {}
    B, Sq, Hq, D = q.shape
    Sk = k.shape[1]
    if case == "k_head_dim":
        k = fc.array((2, 128, 2, 32))
    elif case == "k_batch":
        k = fc.array((3, 128, 2, 64))
    elif case == "v_seqlen":
        v = fc.array((2, 100, 2, 64))
    elif case == "v_heads":
        v = fc.array((2, 128, 4, 64))
    elif case == "k_dtype":
        k = fc.array(k.shape, "bfloat16")
    elif case == "q_dtype":
        q, k, v = (fc.array(a.shape, "float32") for a in (q, k, v))
    elif case == "q_dims":
        q = fc.array((64, 8, 64))
    elif case == "out_shape":
        kw["out"] = fc.array((B, Sq, Hq, 32))
    elif case == "out_dtype":
        kw["out"] = fc.array((B, Sq, Hq, D), "bfloat16")
    elif case == "bias_shape":
        kw["bias"] = fc.array((B, Hq, Sq, 100))
    elif case == "bias_dims":
        kw["bias"] = fc.array((1, B, Hq, Sq, Sk))
    elif case == "bias_dtype":
        kw["bias"] = fc.array((B, Hq, Sq, Sk), "bfloat16")
    elif case == "sinks_shape":
        kw["sinks"] = fc.array((2,), "float32")
    elif case == "sinks_dtype":
        kw["sinks"] = fc.array((Hq,), "float16")
    elif case == "sinks_stride":
        kw["sinks"] = fc.array((Hq,), "float32", strides=(2,))
    elif case == "alibi_shape":
        kw["alibi_slopes"] = fc.array((3, Hq), "float32")
    elif case == "alibi_dtype":
        kw["alibi_slopes"] = fc.array((Hq,), "float16")
    elif case == "alibi_stride":
        kw["alibi_slopes"] = fc.array((Hq,), "float32", strides=(2,))
    elif case == "k_device":
        k = fc.array(k.shape, device=1)
    elif case == "out_device":
        kw["out"] = fc.array((B, Sq, Hq, D), device=1)
    elif case == "k_host":
        k = fc.array(k.shape, device_type=fc.KDL_CPU)
    elif case == "q_type":
        q = [[1.0]]
    elif case == "stream":
        kw["stream"] = "default"
    elif case == "stream_handle":  # a stream object whose handle is out of range
        kw["stream"] = types.SimpleNamespace(cuda_stream=-1)
    elif case == "stream_device":  # a torch-like stream of another device
        kw["stream"] = types.SimpleNamespace(cuda_stream=1234, device_index=1)
    _expect_refused(match, flashgen.attention, q, k, v, **kw)


@pytest.mark.parametrize("causal,window,match", [
    (True, None, r"causal is True; allowed: None, 'top_left' .*'bottom_right'"),
    (1, None, r"causal is 1; allowed"),
    ("causal", None, r"causal is 'causal'; allowed: None, 'top_left', 'bottom_right'"),
    ("bottom-right", None, r"causal is 'bottom-right'"),
    (None, 5, r"window is 5; expected \(window_left, window_right\)"),
    (None, (1, 2, 3), r"window is \(1, 2, 3\); expected"),
    (None, (-2, 0), r"window: window_left is -2; allowed: an int >= -1 or None"),
    (None, (0, 1.5), r"window: window_right is 1.5"),
    (None, (True, 0), r"window: window_left is True"),
    ("top_left", (4, 3), r"window is \(4, 3\) with causal='top_left'; a causal window has window_right 0"),
    ("bottom_right", (4, -1), r"a causal window has window_right 0"),
])
def test_mask_argument_errors(guarded_native, causal, window, match):
    q, k, v = dense()
    _expect_refused(match, flashgen.attention, q, k, v, causal=causal, window=window)


def test_causal_false_is_no_mask():
    """causal=False (SDPA's and FlashAttention's spelling) is no mask, as None; True stays ambiguous."""
    from flashgen import _core
    none = _core.mask_code(None, None)
    assert none == (0, -1, -1)
    assert _core.mask_code(False, None) == none
    assert _core.mask_code(False, (16, 0)) == _core.mask_code(None, (16, 0)) == (4, 16, 0)
    assert _core.mask_code("top_left", (16, None)) == (3, 16, 0)


@pytest.mark.parametrize("num_splits,match", [
    (200, r"num_splits \(200\) must be None, 0 \(chosen\) or in \[1, 128\]"),
    (-2, r"num_splits \(-2\) must be"),
    (1.5, r"num_splits is 1.5; allowed: None, 0 \(chosen\) or 1..128"),
    (True, r"num_splits is True"),
    ("4", r"num_splits is '4'"),
])
def test_num_splits_errors(guarded_native, num_splits, match):
    q, k, v = dense(B=1, Sq=1)
    _expect_refused(match, flashgen.attention, q, k, v, num_splits=num_splits)


@pytest.mark.parametrize("case,match", [
    ("head_dim", r"head_dim \(100\) must be a multiple of 8 in \[16, 256\]"),
    ("heads", r"heads_q \(8\) must be a multiple of heads_kv \(3\)"),
    ("q_stride", r"q.stride_seq \(516\) must be a multiple of 8 elements \(16 bytes\) or 0"),
    ("q_align", r"q.data \(0x[0-9a-f]+\) must be 16-byte aligned"),
    ("out_overlap", r"o.stride_head \(0\) must be positive when heads_q \(8\) > 1: an output cannot broadcast"),
    ("scale", r"softmax_scale \(nan\) must be finite"),
    ("softcap", r"softcap \(-1\) must be 0 \(no softcapping\)"),
])
def test_library_checks_before_launch(guarded_native, case, match):
    """What only the library checks (check_problem) arrives as its InvalidArgument, before any
    device access."""
    q, k, v = dense()
    kw = {}
    if case == "head_dim":
        q, k, v = dense(D=100)
    elif case == "heads":
        q, k, v = dense(Hkv=3)
    elif case == "q_stride":
        q = fc.array((2, 64, 8, 64), strides=(64 * 516, 516, 64, 1))
    elif case == "q_align":
        q = fc.array((2, 64, 8, 64), ptr=0x7E0000000008)
    elif case == "out_overlap":
        kw["out"] = fc.array((2, 64, 8, 64), strides=(64 * 64, 64, 0, 1))
    elif case == "scale":
        kw["scale"] = float("nan")
    elif case == "softcap":
        kw["softcap"] = -1
    _expect_refused(match, flashgen.attention, q, k, v, **kw)


def test_valid_call_reaches_the_driver():
    """Without a GPU a valid call passes every check and stops at the driver (Unavailable)."""
    if flashgen.gpu_available():
        pytest.skip("a GPU is present: a valid call would launch on the made-up addresses")
    q, k, v = dense()
    with pytest.raises(flashgen.Unavailable, match="no CUDA driver"):
        flashgen.attention(q, k, v, causal="bottom_right", return_lse=True)


def _varlen(B=3, Tq=100, Tk=150, Hq=8, Hkv=2, D=64):
    return (fc.array((Tq, Hq, D)), fc.array((Tk, Hkv, D)), fc.array((Tk, Hkv, D)), fc.array((B + 1,), "int32"),
            fc.array((B + 1,), "int32"))


@pytest.mark.parametrize("case,match", [
    ("cuq_dtype", r"cu_seqlens_q has shape \[4\] and dtype int64; expected int32 \[batch \+ 1\]"),
    ("cuq_dims", r"cu_seqlens_q has shape \[4, 1\]"),
    ("cuq_empty", r"cu_seqlens_q has shape \[0\]"),
    ("cuk_shape", r"cu_seqlens_k has shape \[5\] and dtype i32; expected int32 \[4\] \(batch \+ 1, as cu_seqlens_q\)"),
    ("cuk_missing", r"cu_seqlens_k is None; a packed batch needs the int32 \[batch \+ 1\] offsets"),
    ("max_q", r"max_seqlen_q is None; a packed batch needs"),
    ("max_k", r"max_seqlen_k is None; a packed batch needs"),
    ("seqused", r"seqused_k has shape \[4\] and dtype i32; expected int32 \[batch \(3\)\]"),
    ("k_dims", r"k, v have 4, 3 dims; expected k \[total_k, heads_kv, head_dim\]"),
    ("v_rows", r"v has shape \[149, 2, 64\]; expected \[150, 2, 64\]"),
    ("q_dims", r"q has 4 dims; expected \[total_q, heads_q, head_dim\]$"),
    ("out_shape", r"out has shape \[100, 8, 32\]; expected \[100, 8, 64\]"),
    ("lse_bias", r"bias has shape \[3, 8, 50, 61\]; it must broadcast to .* = \[3, 8, 50, 60\]"),
    ("q_row_stride", r"q.stride_seq \(516\) must be a multiple of 8"),  # the library's check of packed rows
])
def test_varlen_errors(guarded_native, case, match):
    q, k, v, cuq, cuk = _varlen()
    args = dict(max_seqlen_q=50, max_seqlen_k=60)
    kw = {}
    if case == "cuq_dtype":
        cuq = fc.array((4,), "int64")
    elif case == "cuq_dims":
        cuq = fc.array((4, 1), "int32")
    elif case == "cuq_empty":
        cuq = fc.array((0,), "int32")
    elif case == "cuk_shape":
        cuk = fc.array((5,), "int32")
    elif case == "cuk_missing":
        cuk = None
    elif case == "max_q":
        args["max_seqlen_q"] = None
    elif case == "max_k":
        args["max_seqlen_k"] = None
    elif case == "seqused":
        kw["seqused_k"] = fc.array((4,), "int32")
    elif case == "k_dims":
        k = fc.array((1, 150, 2, 64))
    elif case == "v_rows":
        v = fc.array((149, 2, 64))
    elif case == "q_dims":
        q = fc.array((1, 100, 8, 64))
    elif case == "out_shape":
        kw["out"] = fc.array((100, 8, 32))
    elif case == "lse_bias":
        kw["bias"] = fc.array((3, 8, 50, 61), "float32")
    elif case == "q_row_stride":
        q = fc.array((100, 8, 64), strides=(516, 64, 1))
    _expect_refused(match, flashgen.attention_varlen, q, k, v, cuq, cuk, args["max_seqlen_q"], args["max_seqlen_k"],
                    **kw)


@pytest.mark.parametrize("case,match", [
    ("table_batch", r"page_table has shape \[2, 10\] and dtype i32; expected int32 \[batch \(3\), max_pages_per_seq\]"),
    ("table_dtype", r"page_table has shape \[3, 10\] and dtype int64; expected int32"),
    ("table_dims", r"page_table has shape \[30\]"),
    ("table_rows", r"page_table has strides \[20, 2\]; its rows must be contiguous"),
    ("v_page", r"v_cache has shape \[40, 8, 2, 64\]; expected \[40, 16, 2, 64\]"),
    ("k_dims", r"k_cache, v_cache have 3, 4 dims"),
    ("q_packed_no_cu", r"q is packed \[total_q, heads_q, head_dim\] but cu_seqlens_q is None"),
    ("q_dense_with_cu", r"q is \[batch, seqlen_q, heads_q, head_dim\] but cu_seqlens_q is given"),
    ("q_dims", r"q has 5 dims; expected \[total_q, heads_q, head_dim\] or \[batch, seqlen_q, heads_q, head_dim\]"),
    ("seqused", r"seqused_k has shape \[2\] and dtype i32; expected int32 \[batch \(3\)\]"),
    ("page_size", r"k_cache has shape \[40, 12, 2, 64\]: with page_table, k_cache and v_cache must be paged KV "
                  r"caches shaped \[num_pages, page_size, heads_kv, head_dim\] .*page_size is their dim 1, here 12, "
                  r"which must be a power of two in \[1, 256\]"),
    ("table_short", r"page_table_stride \(10\) must be at least ceil\(seqlen_k / page_size\) = ceil\(1000 / 16\)"),
])
def test_paged_errors(guarded_native, case, match):
    B, Sq, Hq, Hkv, D, P, page = 3, 16, 8, 2, 64, 40, 16
    q = fc.array((B, Sq, Hq, D))
    kc, vc = fc.array((P, page, Hkv, D)), fc.array((P, page, Hkv, D))
    table = fc.array((B, 10), "int32")
    kw = {}
    if case == "table_batch":
        table = fc.array((2, 10), "int32")
    elif case == "table_dtype":
        table = fc.array((B, 10), "int64")
    elif case == "table_dims":
        table = fc.array((30,), "int32")
    elif case == "table_rows":
        table = fc.array((B, 10), "int32", strides=(20, 2))
    elif case == "v_page":
        vc = fc.array((P, 8, Hkv, D))
    elif case == "k_dims":
        kc = fc.array((P * page, Hkv, D))
    elif case == "q_packed_no_cu":
        q = fc.array((B * Sq, Hq, D))
    elif case == "q_dense_with_cu":
        kw.update(cu_seqlens_q=fc.array((B + 1,), "int32"), max_seqlen_q=Sq)
    elif case == "q_dims":
        q = fc.array((1, B, Sq, Hq, D))
    elif case == "seqused":
        kw["seqused_k"] = fc.array((2,), "int32")
    elif case == "page_size":
        kc, vc = fc.array((P, 12, Hkv, D)), fc.array((P, 12, Hkv, D))
    elif case == "table_short":
        kw["max_seqlen_k"] = 1000
    _expect_refused(match, flashgen.attention_paged, q, kc, vc, table, **kw)


@pytest.mark.parametrize("case,match", [
    ("o_dims", r"o_partial has 4 dims; expected \[num_states, batch, seqlen_q, heads, head_dim_v\]"),
    ("o_dtype", r"o_partial has dtype i32; allowed: float32, float16, bfloat16"),
    ("lse_shape", r"lse_partial has shape \[3, 2, 5, 4\]; expected \[3, 2, 4, 5\]"),
    ("lse_dtype", r"lse_partial has dtype f16; allowed: f32"),
    ("out_shape", r"out has shape \[2, 5, 4, 32\]; expected \[2, 5, 4, 64\]"),
    ("out_dtype_conflict", r"out_dtype is float32 but out has dtype f16"),
    ("out_dtype_bad", r"out_dtype is int8; allowed: float32, float16, bfloat16"),
    ("head_dim", r"head_dim_v \(60\)"),
])
def test_merge_errors(guarded_native, case, match):
    S, B, Sq, H, Dv = 3, 2, 5, 4, 64
    o_p, lse_p = fc.array((S, B, Sq, H, Dv), "float32"), fc.array((S, B, H, Sq), "float32")
    kw = {}
    if case == "o_dims":
        o_p = fc.array((S, B, Sq, H * Dv), "float32")
    elif case == "o_dtype":
        o_p = fc.array(o_p.shape, "int32")
    elif case == "lse_shape":
        lse_p = fc.array((S, B, Sq, H), "float32")
    elif case == "lse_dtype":
        lse_p = fc.array(lse_p.shape, "float16")
    elif case == "out_shape":
        kw["out"] = fc.array((B, Sq, H, 32), "float16")
    elif case == "out_dtype_conflict":
        kw.update(out=fc.array((B, Sq, H, Dv), "float16"), out_dtype="float32")
    elif case == "out_dtype_bad":
        kw["out_dtype"] = "int8"
    elif case == "head_dim":
        o_p = fc.array((S, B, Sq, H, 60), "float32")
    _expect_refused(match, flashgen.merge_states, o_p, lse_p, **kw)


# ---- with PyTorch (CPU tensors only: refused before any device access) -------------


def test_torch_cpu_tensors_are_refused():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 16, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 16, 2, 64, dtype=torch.float16)
    _expect_refused(r"^q is on device 'cpu'; flashgen runs on CUDA tensors$", flashgen.attention, q, k, k)
    _expect_refused(r"^q is on device 'cpu'", flashgen.attention_varlen, q[0], k[0], k[0],
                    torch.tensor([0, 16], dtype=torch.int32), torch.tensor([0, 16], dtype=torch.int32), 16, 16)
    _expect_refused(r"^q is on device 'cpu'", flashgen.decode, q, k, k)
    # a CPU tensor beside device arrays is named too
    qf, kf, vf = dense()
    _expect_refused(r"^k is on device 'cpu'", flashgen.attention, qf, torch.empty(2, 128, 2, 64,
                                                                                  dtype=torch.float16), vf)
    _expect_refused(r"^bias is on device 'cpu'", flashgen.attention, qf, kf, vf,
                    bias=torch.zeros(64, 128, dtype=torch.float32))
    o_p = torch.randn(2, 1, 4, 2, 64)
    _expect_refused(r"^o_partial is on device 'cpu'", flashgen.merge_states, o_p, torch.randn(2, 1, 2, 4))


def test_torch_dtype_names(native):
    torch = pytest.importorskip("torch")
    S, B, Sq, H, Dv = 2, 1, 3, 2, 32
    o_p, lse_p = fc.array((S, B, Sq, H, Dv), "float16"), fc.array((S, B, H, Sq), "float32")
    out = flashgen.merge_states(o_p, lse_p, out_dtype=torch.bfloat16)
    assert out.dtype == "bfloat16"
    assert _layout.STATE_DTYPES[native.merges[-1]["fields"][M["out_dtype"]]] == "bf16"
    _expect_refused("out_dtype is torch.float64", flashgen.merge_states, o_p, lse_p, out_dtype=torch.float64)


def test_numpy_arrays_are_refused():
    np = pytest.importorskip("numpy")
    q = np.zeros((1, 16, 2, 64), np.float16)
    _expect_refused(r"^q is on CPU \(DLPack device type 1\); flashgen runs on CUDA memory", flashgen.attention, q, q,
                    q)


# ---- the command-line tool --------------------------------------------------------


def test_python_m_flashgen_help():
    r = subprocess.run([sys.executable, "-m", "flashgen", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Subcommands:" in r.stdout and "explain" in r.stdout and "pregen" in r.stdout
    r = subprocess.run([sys.executable, "-m", "flashgen", "no-such-command"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unknown subcommand 'no-such-command'" in r.stderr


def test_console_script():
    script = Path(sys.executable).parent / "flashgen"
    if not script.is_file():
        pytest.skip(f"no console script at {script} (the package is not pip-installed in this environment)")
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Subcommands:" in r.stdout


def test_cli_path():
    p = flashgen.cli_path()
    assert os.path.basename(p) == "flashgen" and os.access(p, os.X_OK)
    assert Path(p).parent.parent == Path(flashgen.__file__).parent


# ---- the fresh-user review's inputs (2026-12-02) ------------------------------------


def test_last_dim_must_be_contiguous(guarded_native):
    """The library's views carry no last-dim stride: a strided last dim (x[..., ::2]) is refused by
    name instead of being read as if contiguous."""
    q, k, v = dense()
    odd = fc.array((2, 64, 8, 64), strides=(16384, 256, 128, 2))
    _expect_refused(r"q has strides \[16384, 256, 128, 2\]; its last dim must be contiguous", flashgen.attention,
                    odd, k, v)
    _expect_refused(r"k has strides .*its last dim must be contiguous", flashgen.attention, q,
                    fc.array(k.shape, strides=(32768, 256, 128, 2)), v)
    _expect_refused(r"v has strides .*last dim", flashgen.attention, q, k, fc.array(v.shape, strides=(0, 0, 0, 0)))
    _expect_refused(r"out has strides .*last dim", flashgen.attention, q, k, v,
                    out=fc.array((2, 64, 8, 64), strides=(16384, 256, 128, 2)))
    parts = fc.array((3, 2, 64, 8, 64), "float32", strides=(65536, 32768, 512, 64, 2))
    _expect_refused(r"o_partial has strides .*last dim", flashgen.merge_states, parts,
                    fc.array((3, 2, 8, 64), "float32"))
    # Offsets read as consecutive int32 must be contiguous.
    qp, kp, vp = fc.array((10, 8, 64)), fc.array((12, 2, 64)), fc.array((12, 2, 64))
    gapped = fc.array((3,), "int32", strides=(2,))
    _expect_refused(r"cu_seqlens_q has stride 2; it must be contiguous", flashgen.attention_varlen, qp, kp, vp,
                    gapped, fc.array((3,), "int32"), 8, 8)
    _expect_refused(r"seqused_k has stride 2", flashgen.attention_varlen, qp, kp, vp, fc.array((3,), "int32"),
                    fc.array((3,), "int32"), 8, 8, seqused_k=fc.array((2,), "int32", strides=(2,)))


def test_host_arguments_are_named(guarded_native):
    """Values nanobind would reject with an anonymous TypeError, and floats that do not convert."""
    q, k, v = dense()
    _expect_refused(r"the problem: window_left is 1180591620717411303424, outside the int64 range",
                    flashgen.attention, q, k, v, window=(2**70, 0))
    _expect_refused(r"num_splits \(1099511627776\) must be None, 0 \(chosen\) or in \[1, 128\]",
                    flashgen.attention, q, k, v, num_splits=2**40)
    _expect_refused(r"stream is -1; a CUstream handle is an unsigned 64-bit value", flashgen.attention, q, k, v,
                    stream=-1)
    _expect_refused(r"scale is str 'abc'; expected a float", flashgen.attention, q, k, v, scale="abc")
    _expect_refused(r"softcap is list \[1.0\]; expected a float", flashgen.attention, q, k, v, softcap=[1.0])
    _expect_refused(r"scale is bool True", flashgen.attention, q, k, v, scale=True)


def test_problem_keywords_are_values_only():
    """A keyword's value cannot smuggle more keys into the problem text."""
    with pytest.raises(flashgen.InvalidArgument, match=r"problem key 'seqlen' has value '4096,mask=causalbr'; a "
                                                       r"value holds no ','"):
        flashgen.plan(dtype="bf16", seqlen="4096,mask=causalbr", heads=32, head_dim=128, arch=90)
    with pytest.raises(flashgen.InvalidArgument, match=r"problem key 'seqlens_q' is \['a', 2\]; a list of lengths "
                                                       r"holds ints"):
        flashgen.plan(dtype="f16", seqlens_q=["a", 2], seqlens_k=[1, 2], heads=2, head_dim=64, arch=80)
    with pytest.raises(flashgen.InvalidArgument, match="NUL"):
        flashgen.plan("dtype=f16,seqlen=64,heads=2,head_dim=64\0", arch=80)
    for arch, match in ((2**31, r"arch is 2147483648; allowed: 10..999"), (True, "arch is bool True"),
                        ("90", "arch is str '90'")):
        with pytest.raises(flashgen.InvalidArgument, match=match):
            flashgen.plan(SMALL, arch=arch)
    for kw, match in (({"sm_count": "132"}, "sm_count is str"), ({"sm_count": 132, "num_splits": True},
                                                                  "num_splits is bool True")):
        with pytest.raises(flashgen.InvalidArgument, match=match):
            flashgen.plan_decode(SMALL, arch=90, **kw)
    with pytest.raises(flashgen.InvalidArgument, match=r"sms is float 1.9; expected a host int"):
        flashgen.explain(SMALL, arch=90, sms=1.9, compile=False)
    # A bound given as an array (a device scalar would need a synchronization) is refused by name.
    q, k, v = fc.array((10, 8, 64)), fc.array((12, 2, 64)), fc.array((12, 2, 64))
    cu = fc.array((3,), "int32")
    with pytest.raises(flashgen.InvalidArgument, match=r"max_seqlen_q is FakeCudaArray .*expected a host int"):
        flashgen.attention_varlen(q, k, v, cu, cu, fc.array((), "int32"), 8)


def test_kernel_spec_pickles_as_its_string():
    import copy
    import pickle

    a = flashgen.plan(SMALL, arch=90)
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b is not a and b.canonical() == a.canonical()
    assert copy.deepcopy(a) == a and copy.copy(a) == a


# ---- a user trial's findings ---------------------------------------------------------


def test_pregen_refuses_a_cache_that_cannot_receive_kernels(tmp_path):
    """As `flashgen pregen` does, and before compiling anything: a user cache that kernels would
    only pass through (kept in memory, lost at exit) is a CacheIOError naming the directory and
    its problem, with the CLI's message; not results with ok=True and no cache_path."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for cache, why in ((shared, "writable by other users"), (a_file, "not a directory")):
        # (no NVRTC: a compile would fail its result; the refusal comes first)
        r = _run_python("""
            import flashgen
            try:
                flashgen.pregen([flashgen.plan("dtype=f16,seqlen=64,heads=1,head_dim=32", arch=80),
                                 "dtype=f16,seqlen=64,heads=1,head_dim=64"], archs=[80])
            except flashgen.CacheIOError as e:
                print("CacheIOError", isinstance(e, OSError))
                print(e)
            else:
                print("no error")
        """, {"FLASHGEN_CACHE_DIR": str(cache), "FLASHGEN_NVRTC_LIBRARY": str(tmp_path / "libnvrtc.so.missing")})
        assert r.returncode == 0, r.stderr
        name, _, msg = r.stdout.strip().partition("\n")
        assert name == "CacheIOError True", r.stdout
        assert msg.startswith(f"the user cache cannot receive kernels: the kernel cache directory {cache} "
                              "(FLASHGEN_CACHE_DIR) cannot be used: "), msg
        assert why in msg
        cli = subprocess.run([flashgen.cli_path(), "pregen", "--arch", "80", "--head-dims", "64", "--dtypes", "f16",
                              "--masks", "none"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "FLASHGEN_CACHE_DIR": str(cache)})
        assert cli.returncode != 0 and f"flashgen pregen: error: {msg}\n" in cli.stderr, cli.stderr
    with pytest.raises(flashgen.InvalidArgument, match=r"^archs is empty; expected the compute capabilities"):
        flashgen.pregen([SMALL], archs=[])


def test_no_gpu_hint_names_each_functions_parameter():
    r = _run_python(f"""
        import flashgen
        for call in (lambda: flashgen.plan("{SMALL}"), lambda: flashgen.pregen(["{SMALL}"])):
            try:
                call()
            except flashgen.Unavailable as e:
                print(str(e).rsplit("; ", 1)[-1])
            else:
                print("no error")
    """, {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["without a GPU pass arch= (e.g. arch=90)",
                                     "without a GPU pass archs= (e.g. archs=[90])"]


def _profile_hash(arch: int) -> str:
    """profile_hash() of the profile of `arch`, as `flashgen info` reports it."""
    r = subprocess.run([flashgen.cli_path(), "info", "--arch", str(arch)], capture_output=True, text=True, timeout=60)
    m = re.search(rf"^profile\s+sm_{arch}: .*, hash ([0-9a-f]{{16}})$", r.stdout, re.M)
    assert m, r.stdout + r.stderr
    return m.group(1)


def test_device_selects_the_tune_entries_of_that_device(tmp_path):
    """plan / pregen / explain(device=NAME) plan with the tune entries measured on NAME, as the
    CLI's --device does; without it (and no such GPU here) they are ignored."""
    problem = "dtype=f16,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr"
    tune = tmp_path / "tune.yml"
    tune.write_text(textwrap.dedent(f"""\
        version: 1
        entries:
          - device: "Test GPU"
            arch: 90
            profile: hopper
            profile_hash: "{_profile_hash(90)}"
            generator: "{flashgen.__version__}"
            problem: {{dtype: f16, head_dim: 128, head_dim_v: 128, mask: causalbr, bias: none, lse: false,
                      seqlen_q_le: 4096}}
            tile: {{block_m: 128, block_n: 32, warps: 8, stages: 2}}
            tflops: 345.2
    """))
    env = {"FLASHGEN_TUNE_FILE": str(tune), "FLASHGEN_CACHE_DIR": str(tmp_path / "cache")}
    r = _run_python(f"""
        import json, flashgen
        p = "{problem}"
        tile = lambda s: [s.block_m, s.block_n, s.warps, s.stages]
        tuned = flashgen.plan(p, arch=90, device="Test GPU")
        out = dict(default=tile(flashgen.plan(p, arch=90)), tuned=tile(tuned),
                   other=tile(flashgen.plan(p, arch=90, device="Other GPU")), tuned_spec=tuned.canonical(),
                   explain=flashgen.explain(p, arch=90, device="Test GPU", compile=False), errors=[])
        for call in (lambda: flashgen.plan(p, arch=90, device=""), lambda: flashgen.pregen([p], archs=[90], device=90),
                     lambda: flashgen.explain(p, arch=90, device=b"Test GPU", compile=False)):
            try:
                call()
            except flashgen.InvalidArgument as e:
                out["errors"].append(str(e))
            else:
                out["errors"].append("accepted")
        print(json.dumps(out))
    """, env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["tuned"] == [128, 32, 8, 2] and d["default"] != d["tuned"] and d["other"] == d["default"]
    assert re.search(r"^spec\s+" + re.escape(d["tuned_spec"]) + "$", d["explain"], re.M), d["explain"]
    assert d["errors"][0].startswith("device is ''; expected a non-empty device name")
    assert d["errors"][1].startswith("device is int 90; expected a device name")
    assert d["errors"][2].startswith("device is bytes b'Test GPU'; expected a device name")
    # pregen plans every problem item for the device (no NVRTC here: the specs are planned, their compiles fail)
    r = _run_python(f"""
        import flashgen
        for device in ("Test GPU", None):
            print(*[r.spec.canonical() for r in flashgen.pregen(["{problem}"], archs=[90], device=device)])
    """, {**env, "FLASHGEN_NVRTC_LIBRARY": str(tmp_path / "libnvrtc.so.missing")})
    assert r.returncode == 0, r.stderr
    with_device, without = r.stdout.splitlines()
    assert with_device == d["tuned_spec"] and without != with_device


def test_decode_page_table_needs_paged_caches(guarded_native):
    """A dense k [batch, seqlen_k, heads_kv, head_dim] passed with page_table: the message says what
    k and v must be, and which value was taken as the page size."""
    q = fc.array((2, 1, 8, 64))
    k, v = fc.array((2, 4096, 2, 64)), fc.array((2, 4096, 2, 64))
    table = fc.array((2, 16), "int32")
    _expect_refused(r"^k has shape \[2, 4096, 2, 64\]: with page_table, k and v must be paged KV caches shaped "
                    r"\[num_pages, page_size, heads_kv, head_dim\] \(head_dim_v for v\), and page_size is their dim "
                    r"1, here 4096, which must be a power of two in \[1, 256\]", flashgen.decode, q, k, v,
                    page_table=table)


def test_import_flashgen_torch_without_torch_says_how_to_install_it():
    r = _run_python("""
        try:
            import flashgen.torch
        except ImportError as e:
            print(type(e).__name__, e.name)
            print(e)
        else:
            print("imported")
    """)
    assert r.returncode == 0, r.stderr
    name, _, msg = r.stdout.strip().partition("\n")
    assert name == "ModuleNotFoundError torch", r.stdout
    assert msg.startswith("flashgen.torch needs PyTorch (>= 2.5), which is not installed: pip install "
                          "'flashgen[torch]'"), msg
    pyproject = REPO / "pyproject.toml"
    if pyproject.is_file():  # the extra the hint names
        assert re.search(r'^torch = \["torch>=2\.5"\]$', pyproject.read_text(), re.M)


def test_bool_values_only_where_a_bool_is_expected(guarded_native):
    """A bool problem value is a flag's (lse, sinks, alibi, seqused_k), not an int: the key is named.
    return_lse is True or False, not anything truthy. DLPack dtypes and devices are named."""
    for key in ("head_dim", "batch", "seqlen", "heads_q", "softcap"):
        keys = dict(dtype="f16", seqlen=128, heads=2, head_dim=64)
        keys.pop({"heads_q": "heads"}.get(key, key), None)
        with pytest.raises(flashgen.InvalidArgument, match=rf"key '{key}' has value 'true'"):
            flashgen.plan(arch=90, **keys, **{key: True})
    assert flashgen.plan(SMALL, lse=True, arch=90).has_lse and not flashgen.plan(SMALL, lse=False, arch=90).has_lse
    q, k, v = dense()
    qp, kc, table = fc.array((2, 1, 8, 64)), fc.array((4, 16, 2, 64)), fc.array((2, 4), "int32")
    qv, kv, cu = fc.array((10, 8, 64)), fc.array((12, 2, 64)), fc.array((3,), "int32")
    o_p, lse_p = fc.array((2, 1, 3, 2, 32), "float32"), fc.array((2, 1, 2, 3), "float32")
    for bad, shown in (("yes", "str 'yes'"), (1, "int 1"), (None, "NoneType None")):
        match = rf"^return_lse is {re.escape(shown)}; expected True or False$"
        _expect_refused(match, flashgen.attention, q, k, v, return_lse=bad)
        _expect_refused(match, flashgen.bind, q, k, v, return_lse=bad)
        _expect_refused(match, flashgen.decode, q, k, v, return_lse=bad)
        _expect_refused(match, flashgen.attention_varlen, qv, kv, kv, cu, cu, 8, 8, return_lse=bad)
        _expect_refused(match, flashgen.attention_paged, qp, kc, kc, table, return_lse=bad)
        _expect_refused(match, flashgen.decode, qp, kc, kc, page_table=table, return_lse=bad)
        _expect_refused(match, flashgen.merge_states, o_p, lse_p, return_lse=bad)
    _expect_refused(r"^q has dtype float64; allowed: float16, bfloat16$", flashgen.attention, *dense(dtype="float64"))
    _expect_refused(r"^o_partial has dtype float64; allowed", flashgen.merge_states,
                    fc.array((2, 1, 3, 2, 32), "float64"), lse_p)
    _expect_refused(r"^v is on CPU \(DLPack device type 1\); flashgen runs on CUDA memory \(kDLCUDA, 2\)$",
                    flashgen.attention, q, k, fc.array(v.shape, device_type=fc.KDL_CPU))
