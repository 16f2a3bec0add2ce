"""CPU tier of flashgen's PyTorch integration (python/flashgen/torch.py): no GPU needed.

- the custom ops are registered with the schemas the integration documents;
- their fake implementations give the right shapes, dtypes and devices under
  FakeTensorMode (fake CUDA tensors), through the public functions as well;
- torch.compile(fullgraph=True) traces the public functions into the ops, and
  AOT functionalizes the out= variants;
- torch.library.opcheck passes with test-only CPU reference kernels standing in
  for the CUDA ones (they are registered for the CPU key in a fixture and
  removed after it; the package itself refuses CPU tensors);
- autograd: forward with inputs that require grad works, backward raises
  NotImplementedError naming the op;
- the arguments' mapping to the schema and back into the eager path;
- the SDPA opt-in installs and uninstalls cleanly, restores PyTorch's backend
  priority, leaves CPU tensors to PyTorch, and its kernel falls back to
  PyTorch's own flash kernel where it must.
"""

from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")
import flashgen  # noqa: E402

ft = pytest.importorskip("flashgen.torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

F16, BF16, F32, I32 = torch.float16, torch.bfloat16, torch.float32, torch.int32
# Fake tensors on "cuda" need no GPU, only a PyTorch built with CUDA (PyPI's Linux wheels are).
FAKE_DEVICE = "cuda" if torch.backends.cuda.is_built() else "cpu"

FUNCTIONAL = ("attention", "attention_varlen", "attention_paged", "merge_states")


def _op(name):
    return getattr(torch.ops.flashgen, name).default


# ---- registration -------------------------------------------------------------------


def test_ops_registered_with_documented_schemas():
    assert set(ft.OPS) == {n for f in FUNCTIONAL for n in (f, f + "_out")}
    modifiers = ("str causal, float? scale, Tensor? bias, bool return_lse, SymInt[]? window, float? softcap, "
                 "Tensor? sinks, Tensor? alibi_slopes, SymInt? num_splits, Tensor? workspace")
    for name in ("attention", "attention_varlen", "attention_paged"):
        functional, out = str(_op(name)._schema), str(_op(name + "_out")._schema)
        assert functional.startswith(f"flashgen::{name}(Tensor q, ") and functional.endswith(") -> (Tensor, Tensor)")
        assert modifiers in functional and modifiers in out
        assert re.search(r"Tensor\(a\d+!\) out", out) and out.endswith(") -> Tensor")
        assert not _op(name)._schema.is_mutable and _op(name + "_out")._schema.is_mutable
    assert str(_op("merge_states")._schema) == ("flashgen::merge_states(Tensor o_partial, Tensor lse_partial, "
                                                "ScalarType? out_dtype, bool return_lse) -> (Tensor, Tensor)")
    assert re.fullmatch(r"flashgen::merge_states_out\(Tensor o_partial, Tensor lse_partial, Tensor\(a\d+!\) out, "
                        r"bool return_lse\) -> Tensor", str(_op("merge_states_out")._schema))


def test_package_routes_through_the_op_table():
    ops = flashgen._ops
    assert ops is not None and callable(ops.wants)
    x = torch.empty(2, 3, 4, 16, dtype=F16)
    assert ops.wants(x, x, x) is False  # plain tensors, no grad: the eager path
    g = x.clone().requires_grad_()
    assert ops.wants(x, x, g) is True  # autograd records it
    assert ops.wants(x, x, x, None, None, torch.zeros(4, requires_grad=True)) is True
    with torch.no_grad():
        assert ops.wants(g, g, g) is False
    with torch.inference_mode():
        assert ops.wants(x, x, x) is False
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
    assert ops.wants(fake, fake, fake) is True  # FakeTensor: traced by the dispatcher
    assert ops.wants(object(), object()) is False  # not a torch tensor: the eager path (DLPack)
    assert ops.wants(x, object(), None) is False  # another framework's array beside q


def test_public_functions_route_by_wants(monkeypatch):
    """Plain tensors without grad reach _core directly (no dispatcher); a grad-requiring input
    goes through the op table (torch.ops.flashgen.*)."""
    seen = []
    monkeypatch.setattr(flashgen._core, "attention", lambda *a, **kw: seen.append("eager") or "eager")
    monkeypatch.setattr(flashgen._core, "merge_states", lambda *a, **kw: seen.append("eager") or "eager")
    table = type(flashgen._ops)
    for name in FUNCTIONAL:
        monkeypatch.setattr(table, name, staticmethod(lambda *a, _n=name, **kw: seen.append(_n) or "ops"))
    x, i = torch.empty(1, 2, 2, 16, dtype=F16), torch.zeros(2, dtype=I32)
    g = x.clone().requires_grad_()
    calls = {
        "attention": lambda t: flashgen.attention(t, x, x),
        "attention_varlen": lambda t: flashgen.attention_varlen(t[0], x[0], x[0], i, i, 2, 2),
        "attention_paged": lambda t: flashgen.attention_paged(t, x, x, i[None]),
        "merge_states": lambda t: flashgen.merge_states(t[None], x[None, :, 0]),
    }
    for name, call in calls.items():
        seen.clear()
        assert call(x) == "eager" and seen == ["eager"]
        assert call(g) == "ops" and seen == ["eager", name]


def test_pytorch_without_custom_ops_leaves_the_eager_path():
    """With a PyTorch older than torch.library.custom_op (2.5), `import flashgen` warns and
    keeps the eager path (flashgen._ops None) instead of failing."""
    import os
    import subprocess
    import sys
    code = ("import warnings, torch\n"
            "del torch.library.custom_op\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import flashgen\n"
            "assert flashgen._ops is None, flashgen._ops\n"
            "print([str(x.message) for x in w if issubclass(x.category, RuntimeWarning)])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(flashgen.__file__)), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "PyTorch integration off: flashgen.torch needs PyTorch >= 2.5" in run.stdout


# ---- fake implementations -----------------------------------------------------------


def _fake(*shape, dtype=F16, device=FAKE_DEVICE):
    return torch.empty(*shape, dtype=dtype, device=device)


def _meta_of(t):
    return tuple(t.shape), t.dtype, t.device


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("heads_q,heads_kv,head_dim,head_dim_v", [(8, 8, 64, 64), (8, 2, 128, 64), (6, 1, 96, 256)])
def test_fake_dense(dtype, return_lse, heads_q, heads_kv, head_dim, head_dim_v):
    with FakeTensorMode():
        q = _fake(3, 17, heads_q, head_dim, dtype=dtype)
        k = _fake(3, 33, heads_kv, head_dim, dtype=dtype)
        v = _fake(3, 33, heads_kv, head_dim_v, dtype=dtype)
        res = flashgen.attention(q, k, v, causal="bottom_right", return_lse=return_lse)
        o, lse = res if return_lse else (res, None)
        assert _meta_of(o) == ((3, 17, heads_q, head_dim_v), dtype, q.device)
        assert o.is_contiguous()
        if return_lse:
            assert _meta_of(lse) == ((3, heads_q, 17), F32, q.device)
        o2, lse2 = torch.ops.flashgen.attention(q, k, v, "", None, None, return_lse, None, None, None, None, None,
                                                None)
        assert _meta_of(o2) == _meta_of(o)
        assert _meta_of(lse2) == (((3, heads_q, 17) if return_lse else (0,)), F32, q.device)


@pytest.mark.parametrize("return_lse", [False, True])
def test_fake_dense_out(return_lse):
    with FakeTensorMode():
        q, k, v = _fake(2, 5, 4, 64), _fake(2, 9, 2, 64), _fake(2, 9, 2, 32)
        out = _fake(2, 5, 4, 32)
        res = flashgen.attention(q, k, v, out=out, return_lse=return_lse)
        if return_lse:
            assert res[0] is out and _meta_of(res[1]) == ((2, 4, 5), F32, q.device)
        else:
            assert res is out
        lse = torch.ops.flashgen.attention_out(q, k, v, out, "", None, None, False, None, None, None, None, None, None)
        assert _meta_of(lse) == ((0,), F32, q.device)


@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("heads_q,heads_kv,head_dim_v", [(4, 4, 64), (8, 2, 32)])
def test_fake_varlen(return_lse, heads_q, heads_kv, head_dim_v):
    with FakeTensorMode():
        q = _fake(40, heads_q, 64, dtype=BF16)
        k, v = _fake(55, heads_kv, 64, dtype=BF16), _fake(55, heads_kv, head_dim_v, dtype=BF16)
        cu_q, cu_k = _fake(4, dtype=I32), _fake(4, dtype=I32)
        res = flashgen.attention_varlen(q, k, v, cu_q, cu_k, 20, 30, seqused_k=_fake(3, dtype=I32),
                                        causal="top_left", return_lse=return_lse)
        o, lse = res if return_lse else (res, None)
        assert _meta_of(o) == ((40, heads_q, head_dim_v), BF16, q.device)
        if return_lse:
            assert _meta_of(lse) == ((heads_q, 40), F32, q.device)
        out = _fake(40, heads_q, head_dim_v, dtype=BF16)
        assert flashgen.attention_varlen(q, k, v, cu_q, cu_k, 20, 30, out=out) is out


@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_fake_paged(return_lse, packed):
    with FakeTensorMode():
        k_cache, v_cache = _fake(64, 16, 2, 128), _fake(64, 16, 2, 64)
        table = _fake(3, 8, dtype=I32)
        if packed:
            q = _fake(21, 8, 128)
            res = flashgen.attention_paged(q, k_cache, v_cache, table, seqused_k=_fake(3, dtype=I32),
                                           cu_seqlens_q=_fake(4, dtype=I32), max_seqlen_q=9, return_lse=return_lse,
                                           causal="bottom_right")
            o_shape, lse_shape = (21, 8, 64), (8, 21)
        else:
            q = _fake(3, 5, 8, 128)
            res = flashgen.attention_paged(q, k_cache, v_cache, table, return_lse=return_lse)
            o_shape, lse_shape = (3, 5, 8, 64), (3, 8, 5)
        o, lse = res if return_lse else (res, None)
        assert _meta_of(o) == (o_shape, F16, q.device)
        if return_lse:
            assert _meta_of(lse) == (lse_shape, F32, q.device)
        out = _fake(*o_shape)
        assert flashgen.attention_paged(q, k_cache, v_cache, table, out=out) is out


def test_fake_decode_layouts():
    with FakeTensorMode():
        q = _fake(4, 1, 32, 128, dtype=BF16)
        k, v = _fake(4, 900, 8, 128, dtype=BF16), _fake(4, 900, 8, 128, dtype=BF16)
        o, lse = flashgen.decode(q, k, v, num_splits=0, return_lse=True, causal="bottom_right")
        assert _meta_of(o) == ((4, 1, 32, 128), BF16, q.device) and _meta_of(lse) == ((4, 32, 1), F32, q.device)
        caches = _fake(100, 64, 8, 128, dtype=BF16), _fake(100, 64, 8, 128, dtype=BF16)
        o = flashgen.decode(q, *caches, page_table=_fake(4, 16, dtype=I32), seqused_k=_fake(4, dtype=I32),
                            num_splits=7)
        assert _meta_of(o) == ((4, 1, 32, 128), BF16, q.device)
        qp, kp = _fake(4, 32, 128, dtype=BF16), _fake(900, 8, 128, dtype=BF16)
        o = flashgen.decode(qp, kp, kp, cu_seqlens_q=_fake(5, dtype=I32), cu_seqlens_k=_fake(5, dtype=I32),
                            max_seqlen_q=1, max_seqlen_k=400)
        assert _meta_of(o) == ((4, 32, 128), BF16, q.device)


@pytest.mark.parametrize("out_dtype,expected", [(None, F32), (BF16, BF16), ("float16", F16), ("bfloat16", BF16)])
@pytest.mark.parametrize("return_lse", [False, True])
def test_fake_merge_states(out_dtype, expected, return_lse):
    with FakeTensorMode():
        o_partial, lse_partial = _fake(5, 2, 3, 8, 64, dtype=F32), _fake(5, 2, 8, 3, dtype=F32)
        res = flashgen.merge_states(o_partial, lse_partial, out_dtype=out_dtype, return_lse=return_lse)
        o, lse = res if return_lse else (res, None)
        assert _meta_of(o) == ((2, 3, 8, 64), expected, o_partial.device)
        if return_lse:
            assert _meta_of(lse) == ((2, 8, 3), F32, o_partial.device)
        out = _fake(2, 3, 8, 64, dtype=BF16)
        assert flashgen.merge_states(o_partial, lse_partial, out=out) is out


def test_fake_rank_errors_carry_messages():
    with FakeTensorMode():
        q4, q3 = _fake(2, 5, 4, 64), _fake(10, 4, 64)
        with pytest.raises(flashgen.InvalidArgument, match="expected BSHD"):
            flashgen.attention(q3, q4, q4)
        with pytest.raises(flashgen.InvalidArgument, match=r"q has 4 dims; expected \[total_q"):
            flashgen.attention_varlen(q4, q3, q3, _fake(3, dtype=I32), _fake(3, dtype=I32), 5, 5)
        with pytest.raises(flashgen.InvalidArgument, match="k_cache, v_cache have 3, 3 dims"):
            flashgen.attention_paged(q4, q3, q3, _fake(2, 4, dtype=I32))
        with pytest.raises(flashgen.InvalidArgument, match="o_partial has 4 dims"):
            flashgen.merge_states(q4, q3)


def test_fake_out_with_grad_is_refused():
    with FakeTensorMode():
        q = _fake(2, 5, 4, 64, device="cpu").requires_grad_()
        with pytest.raises(flashgen.InvalidArgument, match="out= cannot be recorded by autograd"):
            flashgen.attention(q, q, q, out=_fake(2, 5, 4, 64, device="cpu"))
        with torch.no_grad():
            out = _fake(2, 5, 4, 64, device="cpu")
            assert flashgen.attention(q, q, q, out=out) is out


# ---- argument mapping ---------------------------------------------------------------


@pytest.mark.parametrize("causal,window,expected", [
    (None, None, None),
    (None, (None, None), [-1, -1]),
    (None, (128, 0), [128, 0]),
    (None, (-1, 7), [-1, 7]),
    ("top_left", (16, None), [16, 0]),
    ("bottom_right", (None, 0), [-1, 0]),
])
def test_window_mapping(causal, window, expected):
    assert ft._window_arg(causal, window) == expected


@pytest.mark.parametrize("causal,window,match", [
    ("diagonal", None, "causal is 'diagonal'"),
    (True, None, "causal is True"),
    ("top_left", (8, 4), "a causal window has window_right 0"),
    (None, (8,), "expected \\(window_left, window_right\\)"),
    (None, (-2, 0), "window_left is -2"),
])
def test_modifier_errors_match_the_eager_path(causal, window, match):
    with FakeTensorMode():
        q = _fake(1, 4, 2, 64)
        with pytest.raises(flashgen.InvalidArgument, match=match):
            flashgen.attention(q, q, q, causal=causal, window=window)
    with pytest.raises(flashgen.InvalidArgument, match=match):
        flashgen._core.mask_code(causal, window)  # the eager path's own check says the same


def test_stream_is_refused_on_the_op_path():
    with FakeTensorMode():
        q = _fake(1, 4, 2, 64)
        with pytest.raises(flashgen.InvalidArgument, match="stream= is for eager calls"):
            flashgen.attention(q, q, q, stream=0)
        with pytest.raises(flashgen.InvalidArgument, match="stream= is for eager calls"):
            flashgen.merge_states(_fake(2, 1, 4, 2, 64), _fake(2, 1, 2, 4, dtype=F32), stream=0)


def test_merge_out_dtype_errors():
    with FakeTensorMode():
        o_partial, lse_partial = _fake(2, 1, 4, 2, 64, dtype=F32), _fake(2, 1, 2, 4, dtype=F32)
        with pytest.raises(flashgen.InvalidArgument, match="out_dtype is int8"):
            flashgen.merge_states(o_partial, lse_partial, out_dtype="int8")
        with pytest.raises(flashgen.InvalidArgument, match="but out has dtype"):
            flashgen.merge_states(o_partial, lse_partial, out=_fake(1, 4, 2, 64, dtype=F32), out_dtype=F16)


def test_op_bodies_call_the_eager_path(monkeypatch):
    """The ops' real implementations hand _core the public function's arguments: "" causal is
    None, window a tuple, outputs (out, empty lse) without return_lse."""
    calls = []

    def fake_core(q, k, v, **kwargs):
        calls.append(kwargs)
        o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        lse = torch.zeros(1, dtype=F32)
        return (o, lse) if kwargs["return_lse"] else o

    monkeypatch.setattr(flashgen._core, "attention", fake_core)
    x = torch.zeros(1, 3, 2, 16, dtype=F16)
    o, lse = torch.ops.flashgen.attention(x, x, x, "", 0.5, None, False, [4, 0], 30.0, None, None, 3, None)
    assert o.shape == (1, 3, 2, 16) and lse.shape == (0,) and lse.dtype == F32
    assert calls[-1] == dict(layout="dense", causal=None, scale=0.5, bias=None, return_lse=False, window=(4, 0),
                             softcap=30.0, sinks=None, alibi_slopes=None, num_splits=3, workspace=None)
    cu, used = torch.zeros(2, dtype=I32), torch.zeros(1, dtype=I32)
    torch.ops.flashgen.attention_varlen(x[0], x[0], x[0], cu, cu, 3, 3, used, "top_left", None, None, True, None,
                                        None, None, None, None, None)
    assert calls[-1]["layout"] == "varlen" and calls[-1]["causal"] == "top_left"
    assert calls[-1]["cu_seqlens_q"] is cu and calls[-1]["seqused_k"] is used and calls[-1]["max_seqlen_k"] == 3
    out = torch.empty(1, 3, 2, 16, dtype=F16)
    lse = torch.ops.flashgen.attention_paged_out(x, x, x, torch.zeros(1, 1, dtype=I32), None, None, None, None, out,
                                                 "bottom_right", None, None, False, None, None, None, None, None, None)
    assert lse.shape == (0,) and calls[-1]["layout"] == "paged" and calls[-1]["out"] is out


def test_public_call_reaches_the_op_with_schema_arguments(monkeypatch):
    """flashgen.attention with a grad-requiring input goes through torch.ops.flashgen.attention
    with the schema's arguments, and that op's body hands _core the public arguments back."""
    calls = []

    def fake_core(q, k, v, **kwargs):
        calls.append(kwargs)
        return torch.zeros(q.shape, dtype=q.dtype), torch.zeros(q.shape[0], q.shape[2], q.shape[1], dtype=F32)

    monkeypatch.setattr(flashgen._core, "attention", fake_core)
    q = torch.zeros(1, 3, 2, 16, dtype=F16, requires_grad=True)
    o, lse = flashgen.attention(q, q, q, causal="top_left", window=(2, None), scale=1, softcap=5, return_lse=True)
    assert o.requires_grad and lse.shape == (1, 2, 3)
    assert calls == [dict(layout="dense", causal="top_left", scale=1.0, bias=None, return_lse=True, window=(2, 0),
                          softcap=5.0, sinks=None, alibi_slopes=None, num_splits=None, workspace=None)]


# ---- torch.compile ------------------------------------------------------------------


class _Traced(Exception):
    """Raised by the recording backends instead of running the graph (there is no GPU)."""


def _compile_and_capture(fn, args, aot: bool, dynamic=None):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)

        def run(*a):
            raise _Traced()

        return run

    if aot:
        from torch._dynamo.backends.common import aot_autograd
        backend = aot_autograd(fw_compiler=capture)
    else:
        backend = capture
    torch._dynamo.reset()
    with pytest.raises(_Traced):
        torch.compile(fn, fullgraph=True, backend=backend, dynamic=dynamic)(*args)
    assert len(graphs) == 1
    return graphs[0]


def _targets(gm):
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            names.append(str(node.target))
            if "auto_functionalized" in str(node.target):
                names.append(str(node.args[0]))
    return names


def _everything(q, k, v, out, cu, table, k_cache):
    o, lse = flashgen.attention(q, k, v, causal="top_left", return_lse=True, window=(4, None), softcap=30.0)
    flashgen.attention(q, k, v, out=out)
    d = flashgen.decode(q, k, v, num_splits=0)
    ov = flashgen.attention_varlen(q[0], k[0], v[0], cu, cu, 5, 7)
    op = flashgen.attention_paged(q, k_cache, k_cache, table)
    m = flashgen.merge_states(torch.stack([o, o]).float(), torch.stack([lse, lse]), out_dtype="bfloat16")
    return o, lse, d, ov, op, m


def _everything_args():
    q = torch.randn(2, 5, 4, 64, dtype=BF16)
    k = torch.randn(2, 7, 2, 64, dtype=BF16)
    cu = torch.tensor([0, 5], dtype=I32)
    return (q, k, k, torch.empty(2, 5, 4, 64, dtype=BF16), cu, torch.zeros(2, 3, dtype=I32),
            torch.randn(6, 4, 2, 64, dtype=BF16))


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_the_ops(dynamic):
    gm = _compile_and_capture(_everything, _everything_args(), aot=False, dynamic=dynamic)
    targets = _targets(gm)
    for name in ("attention", "attention_out", "attention_varlen", "attention_paged", "merge_states"):
        assert f"flashgen.{name}" in targets, (name, targets)
    assert targets.count("flashgen.attention") == 2  # attention, decode
    nodes = [n for n in gm.graph.nodes if str(n.target) == "flashgen.attention"]
    assert nodes[0].kwargs["causal"] == "top_left" and nodes[0].kwargs["window"] == [4, 0]
    assert nodes[1].kwargs["num_splits"] == 0


def test_compile_aot_functionalizes_the_out_variant():
    gm = _compile_and_capture(_everything, _everything_args(), aot=True)
    targets = _targets(gm)
    assert "flashgen.attention.default" in targets and "flashgen.merge_states.default" in targets
    assert any("auto_functionalized" in t for t in targets) and "flashgen.attention_out.default" in targets


@pytest.mark.parametrize("strict", [True, False])
def test_export_traces_the_ops(strict):
    """torch.export: strict (Dynamo) and non-strict (FakeTensors through the public functions)."""

    class Model(torch.nn.Module):
        def forward(self, q, k, v):
            o, lse = flashgen.attention(q, k, v, causal="top_left", return_lse=True)
            return flashgen.merge_states(torch.stack([o, o]), torch.stack([lse, lse]))

    q, k = torch.randn(2, 5, 4, 64, dtype=BF16), torch.randn(2, 7, 2, 64, dtype=BF16)
    ep = torch.export.export(Model(), (q, k, k), strict=strict)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "flashgen.attention.default" in targets and "flashgen.merge_states.default" in targets
    out_node = [n for n in ep.graph.nodes if n.op == "output"][0]
    assert out_node.args[0][0].meta["val"].shape == (2, 5, 4, 64)


# ---- opcheck with test-only CPU reference kernels -----------------------------------


def _ref_attention(q, k, v, scale):
    """float32 attention over BSHD q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv]."""
    group = q.shape[2] // k.shape[2]
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(group, 1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, 1)
    s = qf @ kf.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return (s.softmax(-1) @ vf).transpose(1, 2), s.logsumexp(-1)  # [B, Sq, Hq, Dv], [B, Hq, Sq]


def _no_lse(q):
    return q.new_empty((0,), dtype=F32)


def _ref_dense(q, k, v, causal, scale, bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits,
               workspace):
    assert causal == "" and bias is None and window is None and softcap is None
    o, lse = _ref_attention(q, k, v, scale)
    return o.to(q.dtype).contiguous(), lse.contiguous() if return_lse else _no_lse(q)


def _ref_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, causal, scale, bias,
                return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    assert causal == "" and seqused_k is None
    o = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=F32)
    for b in range(cu_seqlens_q.shape[0] - 1):
        rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        keys = slice(int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1]))
        ob, lb = _ref_attention(q[None, rows], k[None, keys], v[None, keys], scale)
        o[rows], lse[:, rows] = ob[0].to(q.dtype), lb[0]
    return o, lse if return_lse else _no_lse(q)


def _ref_paged(q, k_cache, v_cache, page_table, seqused_k, max_seqlen_k, cu_seqlens_q, max_seqlen_q, causal, scale,
               bias, return_lse, window, softcap, sinks, alibi_slopes, num_splits, workspace):
    assert causal == "" and cu_seqlens_q is None and q.dim() == 4
    page = k_cache.shape[1]
    outs, lses = [], []
    for b in range(q.shape[0]):
        n = int(seqused_k[b]) if seqused_k is not None else page_table.shape[1] * page
        slots = [(int(page_table[b, j // page]), j % page) for j in range(n)]
        kb = torch.stack([k_cache[p, s] for p, s in slots])[None]
        vb = torch.stack([v_cache[p, s] for p, s in slots])[None]
        ob, lb = _ref_attention(q[b:b + 1], kb, vb, scale)
        outs.append(ob[0])
        lses.append(lb[0])
    return torch.stack(outs).to(q.dtype), torch.stack(lses) if return_lse else _no_lse(q)


def _ref_merge(o_partial, lse_partial, out_dtype, return_lse):
    lse = lse_partial.logsumexp(0)  # [B, H, Sq]
    w = (lse_partial - lse).exp().transpose(2, 3)[..., None]  # [S, B, Sq, H, 1]
    o = (w * o_partial.float()).sum(0).to(o_partial.dtype if out_dtype is None else out_dtype)
    return o, lse if return_lse else _no_lse(o_partial)


def _with_out(ref, out_at):
    def kernel(*args):
        args = list(args)
        out = args.pop(out_at)
        o, lse = ref(*args)
        out.copy_(o)
        return lse

    return kernel


@pytest.fixture
def cpu_reference():
    """Registers the reference kernels for the CPU key of the flashgen ops for one test; removes
    them after (then CPU tensors reach the package's own refusal again)."""
    lib = torch.library.Library("flashgen", "IMPL", "CPU")
    lib.impl("attention", _ref_dense, "CPU")
    lib.impl("attention_out", _with_out(_ref_dense, 3), "CPU")
    lib.impl("attention_varlen", _ref_varlen, "CPU")
    lib.impl("attention_varlen_out", _with_out(_ref_varlen, 8), "CPU")
    lib.impl("attention_paged", _ref_paged, "CPU")
    lib.impl("attention_paged_out", _with_out(_ref_paged, 8), "CPU")
    lib.impl("merge_states", _ref_merge, "CPU")
    lib.impl("merge_states_out", _with_out(lambda p, lp, rl: _ref_merge(p, lp, None, rl), 2), "CPU")
    yield
    lib._destroy()
    x = torch.zeros(1, 2, 2, 16, dtype=F16)
    with pytest.raises(flashgen.InvalidArgument, match="flashgen runs on CUDA tensors"):
        torch.ops.flashgen.attention(x, x, x, "", None, None, False, None, None, None, None, None, None)


def _modifiers(return_lse):
    return ("", 0.125, None, return_lse, None, None, None, None, None, None)


def _opcheck(op, args):
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck_dense(cpu_reference, seed, return_lse):
    q, k, v = torch.randn(2, 5, 4, 64, dtype=BF16), torch.randn(2, 9, 2, 64, dtype=BF16), torch.randn(2, 9, 2, 32)
    v = v.to(BF16)  # head_dim_v 32 != head_dim 64, GQA 4/2
    _opcheck(_op("attention"), (q, k, v, *_modifiers(return_lse)))
    _opcheck(_op("attention_out"), (q, k, v, torch.empty(2, 5, 4, 32, dtype=BF16), *_modifiers(return_lse)))


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck_varlen(cpu_reference, seed, return_lse):
    cu_q, cu_k = torch.tensor([0, 3, 8], dtype=I32), torch.tensor([0, 6, 10], dtype=I32)
    q, k, v = torch.randn(8, 4, 64, dtype=F16), torch.randn(10, 2, 64, dtype=F16), torch.randn(10, 2, 32, dtype=F16)
    args = (q, k, v, cu_q, cu_k, 5, 6, None)
    _opcheck(_op("attention_varlen"), (*args, *_modifiers(return_lse)))
    _opcheck(_op("attention_varlen_out"), (*args, torch.empty(8, 4, 32, dtype=F16), *_modifiers(return_lse)))


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck_paged(cpu_reference, seed, return_lse):
    k_cache, v_cache = torch.randn(6, 4, 2, 64, dtype=F16), torch.randn(6, 4, 2, 64, dtype=F16)
    table = torch.tensor([[5, 0, 3], [1, 1, 2]], dtype=I32)
    q = torch.randn(2, 3, 4, 64, dtype=F16)
    args = (q, k_cache, v_cache, table, torch.tensor([10, 7], dtype=I32), 12, None, None)
    _opcheck(_op("attention_paged"), (*args, *_modifiers(return_lse)))
    _opcheck(_op("attention_paged_out"), (*args, torch.empty(2, 3, 4, 64, dtype=F16), *_modifiers(return_lse)))


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck_merge_states(cpu_reference, seed, return_lse):
    o_partial, lse_partial = torch.randn(3, 2, 5, 4, 32), torch.randn(3, 2, 4, 5)
    _opcheck(_op("merge_states"), (o_partial, lse_partial, BF16, return_lse))
    _opcheck(_op("merge_states_out"), (o_partial, lse_partial, torch.empty(2, 5, 4, 32), return_lse))


def test_references_agree_with_each_other(cpu_reference, seed):
    """The references are attention: varlen over one sequence, paged over identity pages and
    merging two halves' states all equal dense attention (so opcheck compared real values)."""
    q, k, v = torch.randn(1, 6, 4, 64, dtype=F32), torch.randn(1, 8, 2, 64), torch.randn(1, 8, 2, 64)
    o, lse = torch.ops.flashgen.attention(q, k, v, *_modifiers(True))
    cu_q, cu_k = torch.tensor([0, 6], dtype=I32), torch.tensor([0, 8], dtype=I32)
    ov, lv = torch.ops.flashgen.attention_varlen(q[0], k[0], v[0], cu_q, cu_k, 6, 8, None, *_modifiers(True))
    torch.testing.assert_close(ov, o[0])
    torch.testing.assert_close(lv, lse[0])
    op, lp = torch.ops.flashgen.attention_paged(q, k.view(2, 4, 2, 64), v.view(2, 4, 2, 64),
                                                torch.tensor([[0, 1]], dtype=I32), None, None, None, None,
                                                *_modifiers(True))
    torch.testing.assert_close(op, o)
    o1, l1 = torch.ops.flashgen.attention(q, k[:, :3], v[:, :3], *_modifiers(True))
    o2, l2 = torch.ops.flashgen.attention(q, k[:, 3:], v[:, 3:], *_modifiers(True))
    om, lm = torch.ops.flashgen.merge_states(torch.stack([o1, o2]), torch.stack([l1, l2]), None, True)
    torch.testing.assert_close(om, o)
    torch.testing.assert_close(lm, lse)


# ---- autograd -----------------------------------------------------------------------


def _grad_calls():
    """Each functional op through the public functions, on CPU tensors (the reference kernels)
    with one input that requires grad."""
    q = torch.randn(2, 5, 4, 64, dtype=F16, requires_grad=True)
    k, v = torch.randn(2, 7, 2, 64, dtype=F16), torch.randn(2, 7, 2, 64, dtype=F16)
    cu_q, cu_k = torch.tensor([0, 5], dtype=I32), torch.tensor([0, 7], dtype=I32)
    table = torch.tensor([[0, 1]], dtype=I32)
    return {
        "attention": lambda: flashgen.attention(q, k, v, scale=0.125),
        "attention_varlen": lambda: flashgen.attention_varlen(q[0], k[0], v[0], cu_q, cu_k, 5, 7),
        "attention_paged": lambda: flashgen.attention_paged(q[:1], k[:, :4], v[:, :4], table),
        "merge_states": lambda: flashgen.merge_states(torch.randn(2, 2, 5, 4, 64, requires_grad=True),
                                                      torch.randn(2, 2, 4, 5)),
    }


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_autograd_forward_works_backward_raises(cpu_reference, seed, name):
    out = _grad_calls()[name]()
    assert out.requires_grad and out.grad_fn is not None
    assert torch.isfinite(out).all()
    with pytest.raises(NotImplementedError, match=rf"flashgen\.{name}: the backward is not implemented yet"):
        out.float().sum().backward()


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_autograd_without_grad_mode_records_nothing(cpu_reference, seed, name):
    """Under no_grad the public functions take the eager path (which refuses CPU tensors);
    the ops themselves, called directly, record nothing."""
    q = torch.randn(1, 5, 4, 64, dtype=F16, requires_grad=True)
    k = torch.randn(1, 8, 2, 64, dtype=F16)
    cu_q, cu_k = torch.tensor([0, 5], dtype=I32), torch.tensor([0, 8], dtype=I32)
    calls = {
        "attention": lambda: torch.ops.flashgen.attention(q, k, k, *_modifiers(True)),
        "attention_varlen": lambda: torch.ops.flashgen.attention_varlen(q[0], k[0], k[0], cu_q, cu_k, 5, 8, None,
                                                                        *_modifiers(True)),
        "attention_paged": lambda: torch.ops.flashgen.attention_paged(q, k.view(2, 4, 2, 64), k.view(2, 4, 2, 64),
                                                                      torch.tensor([[0, 1]], dtype=I32), None, None,
                                                                      None, None, *_modifiers(True)),
        "merge_states": lambda: torch.ops.flashgen.merge_states(torch.randn(2, 1, 5, 4, 64, requires_grad=True),
                                                                torch.randn(2, 1, 4, 5), None, True),
    }
    with torch.no_grad():
        out, lse = calls[name]()
    assert not out.requires_grad and out.grad_fn is None and not lse.requires_grad
    out, lse = calls[name]()
    assert out.requires_grad and out.grad_fn is not None
    with pytest.raises(flashgen.InvalidArgument, match="flashgen runs on CUDA tensors"):
        with torch.no_grad():
            _grad_calls()[name]()


def test_autograd_under_fake_tensors():
    with FakeTensorMode():
        q = _fake(2, 5, 4, 64, device="cpu").requires_grad_()
        k = _fake(2, 7, 2, 64, device="cpu")
        o, lse = flashgen.attention(q, k, k, return_lse=True)
        assert o.requires_grad and lse.requires_grad
        with pytest.raises(NotImplementedError, match=r"flashgen\.attention: the backward is not implemented"):
            o.sum().backward()


def test_opcheck_autograd_registration(cpu_reference, seed):
    q = torch.randn(1, 3, 2, 64, dtype=F16, requires_grad=True)
    result = torch.library.opcheck(_op("attention"), (q, q.detach(), q.detach(), *_modifiers(True)),
                                   test_utils="test_autograd_registration")
    assert result == {"test_autograd_registration": "SUCCESS"}


# ---- SDPA opt-in ------------------------------------------------------------------------

needs_registry = pytest.mark.skipif(not hasattr(torch.nn.attention, "register_flash_attention_impl")
                                    or not hasattr(torch.library, "get_kernel") or not torch.backends.cuda.is_built(),
                                    reason="this PyTorch has no flash-attention implementation registry, or no CUDA "
                                    "build (no CUDA kernel to replace)")

_SDPA_OP = "aten::_scaled_dot_product_flash_attention"


def _cuda_kernel_of_sdpa_flash() -> str:
    rows = [r for r in torch._C._dispatch_dump_table(_SDPA_OP).splitlines() if r.startswith("CUDA:")]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture
def sdpa_state():
    """Each SDPA test starts and ends with flashgen inactive and PyTorch's priority order intact."""
    ft.disable_sdpa()
    priority = list(torch._C._get_sdp_priority_order())
    yield priority
    ft.disable_sdpa()
    torch._C._set_sdp_priority_order(priority)


@needs_registry
def test_sdpa_registered_not_active(sdpa_state):
    assert ft.SDPA_IMPL_NAME in torch.nn.attention.list_flash_attention_impls()
    assert not ft.sdpa_enabled()
    assert "flashgen" not in _cuda_kernel_of_sdpa_flash()


@needs_registry
def test_sdpa_enable_disable_installs_and_removes_the_kernel(sdpa_state):
    pytorch_kernel = _cuda_kernel_of_sdpa_flash()
    ft.enable_sdpa()
    assert ft.sdpa_enabled() and torch.nn.attention.current_flash_attention_impl() == "flashgen"
    assert re.search(r"flashgen[/\\]torch\.py", _cuda_kernel_of_sdpa_flash())
    ft.enable_sdpa()  # again: replaces itself, still one override
    assert re.search(r"flashgen[/\\]torch\.py", _cuda_kernel_of_sdpa_flash())
    ft.disable_sdpa()
    assert not ft.sdpa_enabled() and torch.nn.attention.current_flash_attention_impl() is None
    assert _cuda_kernel_of_sdpa_flash() == pytorch_kernel
    ft.disable_sdpa()  # when inactive: nothing
    assert _cuda_kernel_of_sdpa_flash() == pytorch_kernel


@needs_registry
def test_sdpa_context_manager_restores_on_exit_and_error(sdpa_state):
    pytorch_kernel = _cuda_kernel_of_sdpa_flash()
    with ft.sdpa():
        assert ft.sdpa_enabled()
    assert not ft.sdpa_enabled() and _cuda_kernel_of_sdpa_flash() == pytorch_kernel
    with pytest.raises(KeyError):
        with ft.sdpa():
            raise KeyError("inside")
    assert not ft.sdpa_enabled() and _cuda_kernel_of_sdpa_flash() == pytorch_kernel
    ft.enable_sdpa()
    with ft.sdpa():
        pass
    assert ft.sdpa_enabled()  # it was on before the block: stays on


@needs_registry
def test_sdpa_priority_puts_flash_first_and_restores(sdpa_state):
    SDPB = torch.nn.attention.SDPBackend
    cudnn_first = [int(SDPB.CUDNN_ATTENTION), int(SDPB.FLASH_ATTENTION), int(SDPB.EFFICIENT_ATTENTION),
                   int(SDPB.MATH), int(SDPB.OVERRIDEABLE)]
    torch._C._set_sdp_priority_order(cudnn_first)
    ft.enable_sdpa(prefer_flash=False)
    assert list(torch._C._get_sdp_priority_order()) == cudnn_first
    ft.enable_sdpa()
    order = list(torch._C._get_sdp_priority_order())
    assert order[0] == int(SDPB.FLASH_ATTENTION) and sorted(order) == sorted(cudnn_first)
    ft.disable_sdpa()
    assert list(torch._C._get_sdp_priority_order()) == cudnn_first
    ft.enable_sdpa()  # a priority the user set in between is theirs: disable leaves it
    mine = [int(SDPB.MATH), int(SDPB.FLASH_ATTENTION), int(SDPB.EFFICIENT_ATTENTION), int(SDPB.CUDNN_ATTENTION),
            int(SDPB.OVERRIDEABLE)]
    torch._C._set_sdp_priority_order(mine)
    ft.disable_sdpa()
    assert list(torch._C._get_sdp_priority_order()) == mine


@needs_registry
@pytest.mark.parametrize("is_causal,enable_gqa", [(False, False), (True, True)])
def test_sdpa_cpu_tensors_stay_with_pytorch(sdpa_state, seed, is_causal, enable_gqa):
    q = torch.randn(2, 4, 9, 32)
    kv = torch.randn(2, 2 if enable_gqa else 4, 9, 32)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = sdpa(q, kv, kv, is_causal=is_causal, enable_gqa=enable_gqa)
    with ft.sdpa():
        got = sdpa(q, kv, kv, is_causal=is_causal, enable_gqa=enable_gqa)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_sdpa_without_registry_is_unsupported(monkeypatch):
    monkeypatch.delattr(torch.nn.attention, "activate_flash_attention_impl")
    with pytest.raises(flashgen.Unsupported, match="activate_flash_attention_impl"):
        ft.enable_sdpa()


class _Original:
    """Stands in for PyTorch's CUDA kernel of the flash op: records the calls it gets."""

    def __init__(self):
        self.calls = []

    def call_boxed(self, keyset, *args, **kwargs):
        self.calls.append((keyset, args, kwargs))
        return "pytorch"


def _bhsd(batch=2, heads=4, heads_kv=2, seqlen_q=6, seqlen_k=6, head_dim=64, dtype=BF16, **kw):
    q = torch.randn(batch, seqlen_q, heads, head_dim, dtype=dtype, **kw).transpose(1, 2)  # BSHD memory
    k = torch.randn(batch, heads_kv, seqlen_k, head_dim, dtype=dtype, **kw)
    v = torch.randn(batch, heads_kv, seqlen_k, head_dim, dtype=dtype, **kw)
    return q, k, v


@pytest.mark.parametrize("case", ["dropout", "debug_mask", "head_dim_v", "grad", "library_refuses"])
def test_sdpa_kernel_falls_back_to_pytorch(seed, case):
    original = _Original()
    q, k, v = _bhsd(requires_grad=(case == "grad"))
    dropout_p, debug = (0.1 if case == "dropout" else 0.0), case == "debug_mask"
    if case == "head_dim_v":
        v = torch.randn(2, 2, 6, 32, dtype=BF16)
    # library_refuses: CPU tensors, which the eager path refuses with InvalidArgument
    result = ft._sdpa_forward(original, "keyset", q, k, v, dropout_p, True, debug, scale=0.5)
    assert result == "pytorch"
    assert original.calls == [("keyset", (q, k, v, dropout_p, True, debug), {"scale": 0.5})]


@pytest.mark.parametrize("is_causal,scale", [(False, None), (True, 0.3)])
def test_sdpa_kernel_outputs_match_the_ops_meta(monkeypatch, seed, is_causal, scale):
    """The flashgen path hands BSHD views of SDPA's tensors to the eager call and returns what
    the op's meta function says (shapes, strides, dtypes): Inductor checks against it."""
    seen = {}

    def fake_core(q, k, v, **kwargs):
        seen.update(q=q, k=k, v=v, **kwargs)
        batch, seqlen_q, heads, _ = q.shape
        return kwargs["out"], torch.zeros(batch, heads, seqlen_q, dtype=F32)

    monkeypatch.setattr(flashgen._core, "attention", fake_core)
    original = _Original()
    q, k, v = _bhsd(seqlen_q=5, seqlen_k=11)
    got = ft._sdpa_forward(original, "keyset", q, k, v, 0.0, is_causal, False, scale=scale)
    assert not original.calls
    assert seen["layout"] == "dense" and seen["return_lse"] is True and seen["scale"] == scale
    assert seen["causal"] == ("bottom_right" if is_causal else None)
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert seen[name].shape == t.transpose(1, 2).shape and seen[name].data_ptr() == t.data_ptr()
    assert seen["out"].data_ptr() == got[0].data_ptr() and seen["out"].shape == (2, 5, 4, 64)
    meta = torch.ops.aten._scaled_dot_product_flash_attention(q.to("meta"), k.to("meta"), v.to("meta"), 0.0,
                                                              is_causal, False, scale=scale)
    assert len(got) == len(meta) == 9
    for i, (mine, theirs) in enumerate(zip(got, meta)):
        if theirs is None or mine is None:
            assert mine is None and theirs is None, i
        elif isinstance(theirs, torch.Tensor):
            assert (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype), i
            if i < 2:  # output, logsumexp: Inductor asserts their sizes and strides
                assert mine.stride() == theirs.stride(), i
        else:
            assert mine == theirs, i


# ---- prepared signatures (python/flashgen/_core.py) --------------------------------------


def test_prepared_signature_keys():
    """A signature key tells apart everything the prepared call fixed (shapes, strides, dtypes,
    device, masks, modifiers, return_lse, out's layout) and is None for what the prepared path
    does not serve (other array types, mixed devices, arguments of other types)."""
    from flashgen import _core
    q = torch.randn(2, 64, 4, 32, dtype=F16)
    k, v, o = q.clone(), q.clone(), q.clone()
    key = _core._dense_key(q, k, v, None, None, None, None, False, None)
    assert key is not None and hash(key) == hash(_core._dense_key(q.clone(), k, v, None, None, None, None, False, None))
    variants = [
        _core._dense_key(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, None, None, None, None, False, None),
        _core._dense_key(q, k.to(BF16), v, None, None, None, None, False, None),
        _core._dense_key(q[:, :32], k, v, None, None, None, None, False, None),
        _core._dense_key(q, k, v, "top_left", None, None, None, False, None),
        _core._dense_key(q, k, v, None, (16, 0), None, None, False, None),
        _core._dense_key(q, k, v, None, None, 0.5, None, False, None),
        _core._dense_key(q, k, v, None, None, None, 30.0, False, None),
        _core._dense_key(q, k, v, None, None, None, None, True, None),
        _core._dense_key(q, k, v, None, None, None, None, False, o),
        _core._dense_key(q, k, v, None, None, None, None, False, o.transpose(1, 2).contiguous().transpose(1, 2)),
    ]
    assert all(x is not None for x in variants)
    assert len({key, *variants}) == len(variants) + 1
    for odd in (
        dict(window=[16, 0]),  # a list
        dict(scale=torch.tensor(0.5)),  # a tensor scalar
        dict(softcap=object()),
        dict(causal=["bottom_right"]),
    ):
        args = dict(causal=None, window=None, scale=None, softcap=None) | odd
        assert _core._dense_key(q, k, v, args["causal"], args["window"], args["scale"], args["softcap"], False,
                                None) is None, odd
    # values equal in Python but of other types (the general path refuses some): other keys
    for a, b in ((dict(causal=False), dict(causal=0)), (dict(scale=1.0), dict(scale=True)),
                 (dict(scale=0.0), dict(scale=False)), (dict(softcap=1.0), dict(softcap=True)),
                 (dict(window=(16, 0)), dict(window=(16.0, 0))), (dict(window=(1, 0)), dict(window=(True, 0)))):
        ka, kb = (_core._dense_key(q, k, v, x.get("causal"), x.get("window"), x.get("scale"), x.get("softcap"),
                                   False, None) for x in (a, b))
        assert ka is not None and kb is not None and ka != kb, (a, b)
    assert _core._dense_key(q.numpy(), k, v, None, None, None, None, False, None) is None
    assert _core._dense_key(q, k, v, None, None, None, None, False, o.numpy()) is None
    with FakeTensorMode():  # a tensor subclass (FakeTensor): never prepared
        fake = torch.empty(2, 64, 4, 32, dtype=F16, device=FAKE_DEVICE)
    assert _core._dense_key(fake, k, v, None, None, None, None, False, None) is None


def test_bind_refuses_tensors_that_require_grad():
    q = torch.randn(1, 16, 2, 32, dtype=F16, requires_grad=True)
    with pytest.raises(flashgen.InvalidArgument, match="q requires grad; a bound call is not recorded by autograd"):
        flashgen.bind(q, q.detach(), q.detach())


def test_bound_call_refuses_moved_data():
    """A bound tensor whose data moved (set_, resize_ of its storage) is refused before any launch:
    the kernel would get the old address."""
    from flashgen import _core

    class Never:
        spec = "fake"

        def run(self, *a):
            pytest.fail("launched with a moved tensor")

    class QView:
        is_torch, device = True, 0

    q = torch.randn(1, 16, 2, 32, dtype=F16)
    k, v, o = q.clone(), q.clone(), q.clone()
    qv = QView()
    qv.ptr = q.data_ptr()
    call = _core.BoundCall(Never(), qv, (q, k, v, o, None, None, None, None), False, {})
    k.set_(torch.empty_like(k))
    with pytest.raises(flashgen.InvalidArgument, match="k's data moved since flashgen.bind"):
        call()
    call = _core.BoundCall(Never(), qv, (q, q.clone(), v, o, None, None, None, None), False, {})
    o.untyped_storage().resize_(0)
    with pytest.raises(flashgen.InvalidArgument, match="out's data moved since flashgen.bind"):
        call()
