"""The Python package's GPU tier: flashgen's calls on a CUDA GPU, through PyTorch.

Every result is checked against a float64 reference written here in PyTorch
(softmax(scale Q K^T + bias - ALiBi, masks, softcap, sinks) V and its LSE; GQA
by repeat_interleave), with the tolerance FlashAttention's tests use: our
largest error against the float64 reference may be at most twice that of a
low-precision computation of the same thing (PyTorch in the inputs' dtype, as
FlashAttention's attention_ref(upcast=False), and
torch.nn.functional.scaled_dot_product_attention where it can express the
problem) plus one unit of the dtype's rounding at the output's magnitude.
Those baselines are themselves checked against the reference (a broken one
would let anything pass), and SDPA in float64 checks the reference.

Inputs are fresh random ones for each check (the conftest's `seed`), outputs
are written into NaN-filled buffers with NaN canaries before and after them
(or into the gaps of strided views), and every output element must be finite
afterwards and every canary still NaN. Keys that must not be read (past
seqused_k, past a packed batch's rows, unused page slots, unused pages) hold
NaN too: a kernel that reads one turns rows into NaN.

Skipped, with the reason, without PyTorch, a CUDA GPU or flashgen.gpu_available()
(conftest.py). About 45 kernel classes: NVRTC compiles them on the first run
(~1-3 s each), the disk cache serves them afterwards.
"""

from __future__ import annotations

import itertools
import math
import random
import re

import pytest

torch = pytest.importorskip("torch", reason="the GPU tier drives the GPU through PyTorch, which is not installed")

import flashgen  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
NAN = float("nan")


@pytest.fixture(autouse=True)
def _fresh_inputs(seed):
    """Every test draws its inputs from its own seed (conftest.py)."""
    return seed


# ---- inputs and poisoned outputs ------------------------------------------------------


def randn(*shape, dtype=F16, scale=1.0):
    return (torch.randn(*shape, device=DEV, dtype=F32) * scale).to(dtype)


class Poisoned:
    """A NaN-filled output: `view` (shape, dtype; optionally strided inside a wider buffer) with
    `pad` NaN canary elements before and after it in the same allocation."""

    def __init__(self, shape, dtype, pad=256, widen_last=0):
        self.shape = tuple(shape)
        full = list(shape)
        full[-1] += widen_last  # gaps between rows of the view (a strided output)
        n = math.prod(full)
        self.pad = pad
        self.buf = torch.full((n + 2 * pad,), NAN, dtype=dtype, device=DEV)
        wide = self.buf[pad:pad + n].view(full)
        self.view = wide[..., :shape[-1]] if widen_last else wide
        self.gaps = wide[..., shape[-1]:] if widen_last else None

    def check_canaries(self):
        assert torch.isnan(self.buf[:self.pad]).all(), "the canary before the output was overwritten"
        assert torch.isnan(self.buf[self.buf.numel() - self.pad:]).all(), "the canary after the output was overwritten"
        if self.gaps is not None:
            assert torch.isnan(self.gaps).all(), "the gaps between the strided output's rows were written"


def poison_allocator(shape, dtype):
    """Fill then free a block of `shape`: the caching allocator hands it to the next allocation of
    that size (outputs the package allocates, e.g. LSE), so stale values there are NaN, not zeros."""
    t = torch.full(shape, NAN, dtype=dtype, device=DEV)
    del t


# ---- the float64 reference and the low-precision baselines ---------------------------


def visible_keys(Sq, Sk, causal, window):
    """Bool [Sq, Sk]: key j visible to query i (problem.hpp's masks). Windows without `causal`
    align bottom-right; `causal` with a window makes window_right 0."""
    i = torch.arange(Sq, device=DEV)[:, None]
    j = torch.arange(Sk, device=DEV)[None, :]
    off = 0 if causal == "top_left" else Sk - Sq
    vis = torch.ones(Sq, Sk, dtype=torch.bool, device=DEV)
    if causal is None and window is None:
        return vis
    wl, wr = (window if window is not None else (-1, -1))
    wl = -1 if wl is None else wl
    wr = -1 if wr is None else wr
    if causal is not None:
        wr = 0
    if wl >= 0:
        vis &= j >= i + off - wl
    if wr >= 0:
        vis &= j <= i + off + wr
    return vis


def attention_ref(q, k, v, *, causal=None, window=None, scale=None, bias=None, softcap=None, sinks=None,
                  alibi=None, upcast=True):
    """O [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] of q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv].

    upcast=True: in float64 from the inputs' values. upcast=False: the low-precision baseline,
    computed as a flash kernel rounds (Q * scale rounded to the dtype, Q K^T and P V in the dtype
    with fp32 accumulation, softmax in fp32, P rounded to the dtype). A row that sees no key gets
    O = 0 and LSE = -inf (with sinks: LSE = the sink)."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kk = k.repeat_interleave(g, dim=2)
    vv = v.repeat_interleave(g, dim=2)
    if upcast:
        acc = torch.float64
        s = torch.einsum("bqhd,bkhd->bhqk", q.double() * scale, kk.double())
    else:
        acc = F32
        qs = (q.float() * scale).to(q.dtype)
        s = torch.einsum("bqhd,bkhd->bhqk", qs, kk).to(acc)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.to(acc)
    i = torch.arange(Sq, device=DEV)[:, None]
    j = torch.arange(Sk, device=DEV)[None, :]
    if alibi is not None:
        off = 0 if causal == "top_left" else Sk - Sq
        slopes = alibi.to(acc).reshape(-1, Hq, 1, 1)  # [1 or B, Hq, 1, 1]
        s = s - slopes * (i + off - j).abs().to(acc)
    s = s.masked_fill(~visible_keys(Sq, Sk, causal, window), -math.inf)
    lse = torch.logsumexp(s, dim=-1) if Sk > 0 else torch.full((B, Hq, Sq), -math.inf, dtype=acc, device=DEV)
    if sinks is not None:
        lse = torch.logaddexp(lse, sinks.to(acc).view(1, Hq, 1))
    p = torch.exp(s - lse[..., None])
    p = torch.where(torch.isneginf(lse)[..., None], torch.zeros((), dtype=acc, device=DEV), p)
    if upcast:
        o = torch.einsum("bhqk,bkhd->bqhd", p, vv.double())
    else:
        o = torch.einsum("bhqk,bkhd->bqhd", p.to(v.dtype), vv).float()
    return o, lse


def sdpa_ref(q, k, v, *, causal=None, window=None, scale=None, bias=None, softcap=None, sinks=None, alibi=None,
             dtype=None):
    """torch.nn.functional.scaled_dot_product_attention on the same problem (in `dtype`, default the
    inputs'), or None where it cannot express it (softcap, sinks, ALiBi, a bias of another dtype,
    rows that see no key)."""
    if softcap or sinks is not None or alibi is not None:
        return None
    dtype = q.dtype if dtype is None else dtype
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    if Sk == 0 or Sq == 0:
        return None
    if bias is not None and bias.dtype != q.dtype and dtype != torch.float64:
        return None
    g = Hq // Hkv
    qt = q.to(dtype).transpose(1, 2)
    kt = k.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    vt = v.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    vis = visible_keys(Sq, Sk, causal, window)
    mask, is_causal = None, False
    if bias is None and causal == "top_left" and window is None:
        is_causal = True  # SDPA's own causal mask: top-left
    elif bias is not None or causal is not None or window is not None:
        if not vis.any(dim=-1).all():
            return None  # a row without keys: SDPA gives NaN there
        add = torch.zeros((), dtype=dtype, device=DEV) if bias is None else bias.to(dtype)
        mask = torch.zeros(Sq, Sk, dtype=dtype, device=DEV).masked_fill(~vis, -math.inf) + add
        if bias is not None and torch.isneginf(mask).all(dim=-1).any():
            return None
    o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, is_causal=is_causal,
                                                         scale=scale)
    return o.transpose(1, 2)


def _max_abs(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def _finite_max_abs(lse, ref):
    fin = torch.isfinite(ref)
    return (lse.double()[fin] - ref.double()[fin]).abs().max().item() if fin.any() else 0.0


class Expected:
    """The reference of one call and the baselines' errors; check() compares a result."""

    def __init__(self, o64, lse64, o_lp, lse_lp, dtype, o_sdpa=None):
        self.o64, self.lse64, self.dtype = o64, lse64, dtype
        self.base = {"PyTorch in " + str(dtype).replace("torch.", ""): _max_abs(o_lp, o64)}
        if o_sdpa is not None:
            self.base["SDPA"] = _max_abs(o_sdpa, o64)
        self.lse_base = _finite_max_abs(lse_lp, lse64)
        mag = max(1.0, o64.abs().max().item()) if o64.numel() else 1.0
        self.atol = torch.finfo(dtype).eps * mag
        fin = lse64[torch.isfinite(lse64)]
        self.lse_atol = torch.finfo(dtype).eps / 4 * max(1.0, fin.abs().max().item() if fin.numel() else 1.0)
        # a baseline that is far off would let anything pass: they must be good low-precision results
        for name, err in self.base.items():
            assert err <= 8 * self.atol, f"baseline {name} is off by {err:.3g} (> 8 x {self.atol:.3g}): a broken test"
        assert self.lse_base <= 64 * self.lse_atol, f"the LSE baseline is off by {self.lse_base:.3g}"

    @classmethod
    def of(cls, q, k, v, **kw):
        o64, lse64 = attention_ref(q, k, v, upcast=True, **kw)
        o_lp, lse_lp = attention_ref(q, k, v, upcast=False, **kw)
        o_sd = sdpa_ref(q, k, v, **kw)
        sd64 = sdpa_ref(q, k, v, dtype=torch.float64, **kw)
        if sd64 is not None:  # the reference agrees with SDPA in float64 (masks, scale, GQA, bias)
            assert _max_abs(sd64, o64) <= 1e-9 * max(1.0, o64.abs().max().item())
        return cls(o64, lse64, o_lp, lse_lp, q.dtype, o_sd)

    def check(self, out, lse=None, what=""):
        assert tuple(out.shape) == tuple(self.o64.shape), f"{what}: O has shape {tuple(out.shape)}"
        assert out.dtype == self.dtype
        bad = (~torch.isfinite(out)).sum().item()
        assert bad == 0, f"{what}: {bad} of {out.numel()} O elements are NaN/inf (not written, or read NaN keys)"
        err = _max_abs(out, self.o64)
        for name, b in self.base.items():
            assert err <= 2 * b + self.atol, (f"{what}: max |O - float64 reference| = {err:.4g} > 2 x {name}'s "
                                              f"{b:.4g} + {self.atol:.3g}")
        if lse is not None:
            assert tuple(lse.shape) == tuple(self.lse64.shape) and lse.dtype == F32
            assert not torch.isnan(lse).any(), f"{what}: NaN in LSE"
            assert torch.equal(torch.isneginf(lse), torch.isneginf(self.lse64)), f"{what}: LSE -inf rows differ"
            e = _finite_max_abs(lse, self.lse64)
            assert e <= 2 * self.lse_base + self.lse_atol, (f"{what}: max |LSE - float64 reference| = {e:.4g} > 2 x "
                                                            f"{self.lse_base:.4g} + {self.lse_atol:.3g}")
        return err


def concat_expected(parts, dtype, packed):
    """Expected of a batch from per-sequence (o64, lse64, o_lp, lse_lp) of batch 1: packed, the
    rows of each (O [total_q, ...], LSE [heads_q, total_q]); else the batches (O [B, ...], LSE [B, ...])."""
    def cat(i):
        if packed:
            return torch.cat([p[i][0] for p in parts], 0 if i in (0, 2) else -1)
        return torch.cat([p[i] for p in parts], 0)
    return Expected(cat(0), cat(1), cat(2), cat(3), dtype)


def ref_parts(q, k, v, **kw):
    return (*attention_ref(q, k, v, upcast=True, **kw), *attention_ref(q, k, v, upcast=False, **kw))


def run_dense(q, k, v, *, lse=True, **kw):
    """flashgen.attention into a poisoned output; returns (O, LSE or None) after checking the canaries."""
    B, Sq, Hq, _ = q.shape
    Dv = v.shape[3]
    out = Poisoned((B, Sq, Hq, Dv), q.dtype)
    poison_allocator((B, Hq, Sq), F32)
    r = flashgen.attention(q, k, v, out=out.view, return_lse=lse, **kw)
    o, l_ = (r if lse else (r, None))
    assert o is out.view
    torch.cuda.synchronize()
    out.check_canaries()
    return o, l_


# ---- dense ------------------------------------------------------------------------------

DENSE = {  # id: dtype, B, Sq, Sk, Hq, Hkv, D, Dv, causal, lse
    "f16": (F16, 2, 200, 200, 4, 4, 64, 64, None, True),
    "bf16": (BF16, 2, 200, 200, 4, 4, 64, 64, None, True),
    "f16-nolse": (F16, 2, 200, 200, 4, 4, 64, 64, None, False),
    "f16-topleft-sq<sk": (F16, 2, 77, 300, 4, 4, 64, 64, "top_left", True),
    "f16-bottomright-sq<sk": (F16, 2, 77, 300, 4, 4, 64, 64, "bottom_right", True),
    "bf16-bottomright-sq>sk": (BF16, 1, 300, 77, 4, 4, 64, 64, "bottom_right", True),  # rows without keys
    "bf16-topleft-sq>sk": (BF16, 1, 300, 77, 4, 4, 64, 64, "top_left", True),
    "gqa-32/8": (BF16, 2, 128, 128, 32, 8, 128, 128, "bottom_right", True),
    "mqa-8/1": (F16, 2, 128, 256, 8, 1, 64, 64, None, True),
    "dv128>d64": (F16, 1, 128, 128, 4, 4, 64, 128, None, True),
    "dv64<d128": (BF16, 1, 100, 160, 4, 2, 128, 64, "top_left", True),
    "d40": (F16, 2, 96, 130, 4, 2, 40, 40, None, True),
    "d72": (BF16, 2, 96, 130, 4, 2, 72, 72, "bottom_right", True),
    "d96": (F16, 2, 96, 130, 4, 2, 96, 96, None, True),
    "d256": (BF16, 1, 64, 192, 2, 2, 256, 256, None, True),
    "seqlen1": (F16, 3, 1, 1, 4, 4, 64, 64, None, True),
}


@pytest.mark.parametrize("case", list(DENSE))
def test_dense(case):
    dtype, B, Sq, Sk, Hq, Hkv, D, Dv, causal, lse = DENSE[case]
    q, k, v = randn(B, Sq, Hq, D, dtype=dtype), randn(B, Sk, Hkv, D, dtype=dtype), randn(B, Sk, Hkv, Dv, dtype=dtype)
    exp = Expected.of(q, k, v, causal=causal)
    o, l_ = run_dense(q, k, v, causal=causal, lse=lse)
    exp.check(o, l_, case)
    # the package's own output allocation: the same bits (the same kernel, deterministic)
    again = flashgen.attention(q, k, v, causal=causal, return_lse=lse)
    torch.cuda.synchronize()
    assert torch.equal(again[0] if lse else again, o)


def test_scale_argument():
    q, k, v = randn(2, 200, 4, 64), randn(2, 200, 4, 64), randn(2, 200, 4, 64)
    scale = 0.37
    exp = Expected.of(q, k, v, scale=scale)
    o, l_ = run_dense(q, k, v, scale=scale)
    exp.check(o, l_, "scale=0.37")


def test_noncontiguous_views():
    """q transposed from BHSD, k and v slices of one packed [B, S, 2, H, D] buffer, O a strided view
    with NaN gaps between its rows; then k broadcast over the batch (stride 0) and q strided
    along the sequence."""
    B, S, H, D = 2, 200, 4, 64
    q = randn(B, H, S, D).transpose(1, 2)
    kv = randn(B, S, 2, H, D)
    k, v = kv[:, :, 0], kv[:, :, 1]
    assert not q.is_contiguous() and not k.is_contiguous()
    exp = Expected.of(q.contiguous(), k.contiguous(), v.contiguous())
    out = Poisoned((B, S, H, D), F16, widen_last=64)
    r, l_ = flashgen.attention(q, k, v, out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(r, l_, "transposed q, sliced k/v, strided O")

    k1 = randn(1, S, H, D).expand(B, S, H, D)  # stride_batch 0
    q2 = randn(B, 2 * S, H, D)[:, ::2]  # stride_seq 2 * H * D
    exp = Expected.of(q2.contiguous(), k1.contiguous(), v.contiguous())
    o, l_ = run_dense(q2, k1, v)
    exp.check(o, l_, "k broadcast over batch, q strided along the sequence")


def test_no_keys_and_empty_problems():
    # seqlen_k 0: every row sees no key -> O = 0, LSE = -inf
    q, k, v = randn(2, 33, 4, 64), randn(2, 0, 4, 64), randn(2, 0, 4, 64)
    o, l_ = run_dense(q, k, v)
    assert torch.equal(o, torch.zeros_like(o)) and torch.isneginf(l_).all()
    # nothing to do: empty outputs, no launch
    for shape_q, shape_kv in (((0, 16, 4, 64), (0, 16, 4, 64)), ((2, 0, 4, 64), (2, 16, 4, 64))):
        o = flashgen.attention(randn(*shape_q), randn(*shape_kv), randn(*shape_kv))
        assert tuple(o.shape) == shape_q and o.dtype == F16


# ---- bias, window, softcap, sinks, ALiBi ----------------------------------------------

BIAS = ["f32-[1,H,Sq,Sk]", "f16-[B,1,Sq,Sk]-with-inf", "f32-[Sq,Sk]-bottom_right", "f32-expand-[B,H,1,Sk]"]


@pytest.mark.parametrize("case", BIAS)
def test_bias(case):
    B, Sq, Sk, H, D = 2, 96, 160, 4, 64
    q, k, v = randn(B, Sq, H, D), randn(B, Sk, H, D), randn(B, Sk, H, D)
    causal = None
    if case == "f32-[1,H,Sq,Sk]":
        bias = randn(1, H, Sq, Sk, dtype=F32)
    elif case == "f16-[B,1,Sq,Sk]-with-inf":
        bias = randn(B, 1, Sq, Sk, dtype=F32)
        bias[torch.rand(B, 1, Sq, Sk, device=DEV) < 0.2] = -math.inf
        bias[0, 0, 5, :] = -math.inf  # a row that sees no key
        bias = bias.to(F16)
    elif case == "f32-[Sq,Sk]-bottom_right":
        bias, causal = randn(Sq, Sk, dtype=F32), "bottom_right"
    else:  # a key-padding mask broadcast with stride 0 over heads and rows
        pad = torch.zeros(B, 1, 1, Sk, dtype=F32, device=DEV)
        pad[0, ..., 130:] = -math.inf
        bias = pad.expand(B, H, Sq, Sk)
    exp = Expected.of(q, k, v, bias=bias, causal=causal)
    o, l_ = run_dense(q, k, v, bias=bias, causal=causal)
    exp.check(o, l_, case)


@pytest.mark.parametrize("causal,window", [(None, (16, 8)), (None, (0, 0)), ("top_left", (32, None)),
                                           ("bottom_right", (20, 0)), (None, (None, 5))])
def test_window(causal, window):
    B, Sq, Sk, H, D = 2, 120, 200, 4, 64
    q, k, v = randn(B, Sq, H, D, dtype=BF16), randn(B, Sk, H, D, dtype=BF16), randn(B, Sk, H, D, dtype=BF16)
    exp = Expected.of(q, k, v, causal=causal, window=window)
    o, l_ = run_dense(q, k, v, causal=causal, window=window)
    exp.check(o, l_, f"causal={causal} window={window}")


@pytest.mark.parametrize("dtype,cap", [(F16, 5.0), (BF16, 8.0)])
def test_softcap(dtype, cap):
    B, S, H, D = 2, 160, 4, 64
    q, k, v = randn(B, S, H, D, dtype=dtype, scale=4.0), randn(B, S, H, D, dtype=dtype), randn(B, S, H, D, dtype=dtype)
    exp = Expected.of(q, k, v, softcap=cap, causal="bottom_right")
    o, l_ = run_dense(q, k, v, softcap=cap, causal="bottom_right")
    exp.check(o, l_, f"softcap={cap}")
    # the cap changes the result (else this test could not tell)
    plain, _ = attention_ref(q, k, v, causal="bottom_right")
    assert _max_abs(plain, exp.o64) > 10 * exp.atol


def test_sinks():
    B, Sq, Sk, H, D = 2, 150, 90, 8, 64  # bottom-right: rows 0..59 see no key -> O = 0, LSE = sink
    q, k, v = randn(B, Sq, H, D), randn(B, Sk, H, D), randn(B, Sk, H, D)
    sinks = torch.randn(H, device=DEV) * 2
    sinks[1] = -math.inf  # takes no weight
    sinks[2] = 6.0  # takes most of it
    exp = Expected.of(q, k, v, sinks=sinks, causal="bottom_right")
    o, l_ = run_dense(q, k, v, sinks=sinks, causal="bottom_right")
    exp.check(o, l_, "sinks")
    assert torch.equal(o[:, :Sq - Sk], torch.zeros_like(o[:, :Sq - Sk]))
    assert torch.equal(l_[:, :, :Sq - Sk], sinks.view(1, H, 1).expand(B, H, Sq - Sk))


@pytest.mark.parametrize("per_batch,causal", [(False, None), (True, "top_left")])
def test_alibi(per_batch, causal):
    B, Sq, Sk, H, D = 2, 100, 180, 4, 64
    q, k, v = randn(B, Sq, H, D), randn(B, Sk, H, D), randn(B, Sk, H, D)
    slopes = torch.rand(B, H, device=DEV) * 0.3 if per_batch else torch.rand(H, device=DEV) * 0.3
    exp = Expected.of(q, k, v, alibi=slopes, causal=causal)
    o, l_ = run_dense(q, k, v, alibi_slopes=slopes, causal=causal)
    exp.check(o, l_, f"alibi per_batch={per_batch} causal={causal}")


def test_everything_at_once():
    """bias + softcap + sinks + ALiBi + a bottom-right window + GQA, bf16."""
    B, Sq, Sk, Hq, Hkv, D = 2, 90, 250, 8, 2, 128
    q, k, v = randn(B, Sq, Hq, D, dtype=BF16, scale=2.0), randn(B, Sk, Hkv, D, dtype=BF16), randn(B, Sk, Hkv, D,
                                                                                                  dtype=BF16)
    kw = dict(bias=randn(B, 1, Sq, Sk, dtype=F32), softcap=10.0, sinks=torch.randn(Hq, device=DEV),
              alibi=torch.rand(Hq, device=DEV) * 0.1, window=(64, 16))
    exp = Expected.of(q, k, v, **kw)
    alibi = kw.pop("alibi")
    o, l_ = run_dense(q, k, v, alibi_slopes=alibi, **kw)
    exp.check(o, l_, "bias+softcap+sinks+alibi+window+GQA")


# ---- packed (varlen) batches ------------------------------------------------------------


def random_lengths(n, hi, specials):
    """n lengths in [0, hi] with the given special values placed at random positions."""
    lens = [random.randint(0, hi) for _ in range(n)]
    for pos, val in zip(random.sample(range(n), len(specials)), specials):
        lens[pos] = val
    return lens


def cumulative(lens):
    return torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=DEV)


def nan_padded(rows, tail, *rest, dtype):
    """[rows + tail, *rest] random, the last `tail` rows NaN; returns (the first `rows` rows, the buffer)."""
    buf = randn(rows + tail, *rest, dtype=dtype)
    buf[rows:] = NAN
    return buf[:rows], buf


@pytest.mark.parametrize("causal,use_seqused,dtype", [(None, False, F16), ("bottom_right", True, BF16),
                                                      ("top_left", True, F16)])
def test_varlen(causal, use_seqused, dtype):
    B, Hq, Hkv, D = 7, 8, 2, 64
    lens_q = random_lengths(B, 130, [0, 1, 1])
    lens_k = random_lengths(B, 140, [0, 1])
    if sum(lens_q) == 0:
        lens_q[0] = 9
    used = None
    if use_seqused:
        used = [random.randint(0, n) for n in lens_k]
        full = max(range(B), key=lambda b: lens_k[b])
        used[full] = lens_k[full]
    Tq, Tk = sum(lens_q), sum(lens_k)
    q, _ = nan_padded(Tq, 8, Hq, D, dtype=dtype)
    k, _ = nan_padded(Tk, 8, Hkv, D, dtype=dtype)  # rows past total_k: NaN, never read
    v, _ = nan_padded(Tk, 8, Hkv, D, dtype=dtype)
    cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
    parts = []
    for b in range(B):
        q0, k0 = cu_q[b].item(), cu_k[b].item()
        n = used[b] if used is not None else lens_k[b]
        if used is not None:  # the keys past seqused_k: NaN, never read
            k[k0 + n:k0 + lens_k[b]] = NAN
            v[k0 + n:k0 + lens_k[b]] = NAN
        if lens_q[b]:
            parts.append(ref_parts(q[q0:q0 + lens_q[b]][None], k[k0:k0 + n][None], v[k0:k0 + n][None],
                                   causal=causal))
    exp = concat_expected(parts, dtype, packed=True)
    max_q = max(lens_q) + (3 if causal == "top_left" else 0)  # a bound above the longest is allowed
    out = Poisoned((Tq, Hq, D), dtype)
    poison_allocator((Hq, Tq), F32)
    seqused = torch.tensor(used, dtype=torch.int32, device=DEV) if used is not None else None
    o, l_ = flashgen.attention_varlen(q, k, v, cu_q, cu_k, max_q, max(lens_k), seqused_k=seqused, causal=causal,
                                      return_lse=True, out=out.view)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, f"varlen lens_q={lens_q} lens_k={lens_k} used={used}")


# ---- paged KV caches --------------------------------------------------------------------


class PagedCache:
    """K/V of `lens` keys per sequence in shuffled pages of `page_size` slots; sequences 0 and 1
    share the full pages of a common prefix; unused slots and `spare` extra pages hold NaN, and
    table entries past a sequence's pages point at a NaN page. The table is a column slice of a
    wider one (its rows `extra_cols` apart)."""

    def __init__(self, lens, page_size, Hkv, D, Dv, dtype, max_seqlen_k, spare=3, extra_cols=3):
        B = len(lens)
        ps = page_size
        self.lens = lens
        self.keys = [randn(n, Hkv, D, dtype=dtype) for n in lens]
        self.values = [randn(n, Hkv, Dv, dtype=dtype) for n in lens]
        shared = min(lens[0], lens[1]) // ps if B > 1 else 0
        if shared:
            n = shared * ps
            self.keys[1][:n] = self.keys[0][:n]
            self.values[1][:n] = self.values[0][:n]
        counts = [(n + ps - 1) // ps for n in lens]
        num_pages = sum(counts) - shared + spare
        ids = torch.randperm(num_pages).tolist()
        nan_page = ids.pop()  # one of the spare pages
        width = (max_seqlen_k + ps - 1) // ps
        table = torch.full((B, width + extra_cols), nan_page, dtype=torch.int32)
        for b in range(B):
            for t in range(counts[b]):
                table[b, t] = int(table[0, t]) if (b == 1 and t < shared) else ids.pop()
        self.k_cache = torch.full((num_pages, ps, Hkv, D), NAN, dtype=dtype, device=DEV)
        self.v_cache = torch.full((num_pages, ps, Hkv, Dv), NAN, dtype=dtype, device=DEV)
        for b in range(B):
            for t in range(counts[b]):
                lo, hi = t * ps, min(lens[b], (t + 1) * ps)
                page = int(table[b, t])
                self.k_cache[page, :hi - lo] = self.keys[b][lo:hi]
                self.v_cache[page, :hi - lo] = self.values[b][lo:hi]
        self.table = table.to(DEV)[:, :width]
        self.seqused = torch.tensor(lens, dtype=torch.int32, device=DEV)
        # the cache holds what the sequences mean: gather each back through the table
        for b in range(B):
            j = torch.arange(lens[b], device=DEV)
            rows = self.table[b, j // ps].long() * ps + j % ps
            assert torch.equal(self.k_cache.view(-1, Hkv, D)[rows], self.keys[b])


@pytest.mark.parametrize("page_size,dtype", [(1, BF16), (16, F16), (256, BF16)])
def test_paged(page_size, dtype):
    """Chunked prefill over a paged cache: dense q, bottom-right causal, one sequence shorter than
    its queries (rows without keys)."""
    B, Sq, Hq, Hkv, D, max_k = 3, 48, 8, 2, 64, 300
    lens = [max_k, random.randint(Sq, max_k - 1), random.randint(1, Sq - 1)]
    cache = PagedCache(lens, page_size, Hkv, D, D, dtype, max_k)
    q = randn(B, Sq, Hq, D, dtype=dtype)
    parts = [ref_parts(q[b:b + 1], cache.keys[b][None], cache.values[b][None], causal="bottom_right")
             for b in range(B)]
    exp = concat_expected(parts, dtype, packed=False)
    out = Poisoned((B, Sq, Hq, D), dtype)
    poison_allocator((B, Hq, Sq), F32)
    o, l_ = flashgen.attention_paged(q, cache.k_cache, cache.v_cache, cache.table, seqused_k=cache.seqused,
                                     max_seqlen_k=max_k, causal="bottom_right", return_lse=True, out=out.view)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, f"paged page_size={page_size} lens={lens}")


def test_paged_packed_q():
    """A packed q (cu_seqlens_q, a zero-length sequence included) over a paged cache."""
    Hq, Hkv, D, ps, max_k = 8, 2, 64, 16, 200
    lens_q = [5, 0, 17, 1]
    lens_k = [200, 150, 40, 1]
    cache = PagedCache(lens_k, ps, Hkv, D, D, F16, max_k)
    Tq = sum(lens_q)
    q = randn(Tq, Hq, D)
    cu_q = cumulative(lens_q)
    parts = []
    for b in range(len(lens_q)):
        if lens_q[b]:
            lo = cu_q[b].item()
            parts.append(ref_parts(q[lo:lo + lens_q[b]][None], cache.keys[b][None], cache.values[b][None],
                                   causal="bottom_right"))
    exp = concat_expected(parts, F16, packed=True)
    out = Poisoned((Tq, Hq, D), F16)
    o, l_ = flashgen.attention_paged(q, cache.k_cache, cache.v_cache, cache.table, seqused_k=cache.seqused,
                                     max_seqlen_k=max_k, cu_seqlens_q=cu_q, max_seqlen_q=max(lens_q),
                                     causal="bottom_right", return_lse=True, out=out.view)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, "paged, packed q")


# ---- split-KV decode and merging states --------------------------------------------------


def _decode_inputs(B=2, Sq=1, Sk=3000, Hq=32, Hkv=8, D=128, dtype=F16):
    return randn(B, Sq, Hq, D, dtype=dtype), randn(B, Sk, Hkv, D, dtype=dtype), randn(B, Sk, Hkv, D, dtype=dtype)


@pytest.mark.parametrize("num_splits", [0, 3, 16, None])
def test_decode(num_splits):
    q, k, v = _decode_inputs()
    exp = Expected.of(q, k, v)
    out = Poisoned(q.shape, F16)
    poison_allocator((2, 32, 1), F32)
    if num_splits is None:  # the library chooses (the decode, for one row over 3000 keys)
        o, l_ = flashgen.attention(q, k, v, out=out.view, return_lse=True)
    else:
        o, l_ = flashgen.decode(q, k, v, num_splits=num_splits, out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, f"decode num_splits={num_splits}")


def test_decode_gqa_rows_and_causal():
    # a few query rows (speculative decoding), bottom-right causal, GQA rows packed by the split kernel
    q, k, v = _decode_inputs(B=3, Sq=4, Sk=1000, Hq=16, Hkv=2, D=64, dtype=BF16)
    exp = Expected.of(q, k, v, causal="bottom_right")
    out = Poisoned(q.shape, BF16)
    o, l_ = flashgen.decode(q, k, v, num_splits=0, causal="bottom_right", out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, "decode Sq=4 causal")


def test_decode_paged():
    Hq, Hkv, D, ps, max_k = 16, 4, 128, 16, 1500
    lens = [1500, random.randint(600, 1499), random.randint(1, 40)]
    cache = PagedCache(lens, ps, Hkv, D, D, F16, max_k)
    q = randn(3, 1, Hq, D)
    parts = [ref_parts(q[b:b + 1], cache.keys[b][None], cache.values[b][None]) for b in range(3)]
    exp = concat_expected(parts, F16, packed=False)
    out = Poisoned(q.shape, F16)
    o, l_ = flashgen.decode(q, cache.k_cache, cache.v_cache, page_table=cache.table, seqused_k=cache.seqused,
                            max_seqlen_k=max_k, num_splits=0, out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, f"paged decode lens={lens}")


def test_decode_workspace():
    """A given workspace too small is refused, naming the bytes needed, before anything runs; one of
    exactly that size works and nothing past it is touched."""
    q, k, v = _decode_inputs(B=1, Sk=2000)
    out = Poisoned(q.shape, F16)
    small = torch.empty(16, dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match=r"workspace holds 16 bytes; this decode needs (\d+)") as e:
        flashgen.decode(q, k, v, num_splits=4, workspace=small, out=out.view)
    torch.cuda.synchronize()
    assert torch.isnan(out.view).all(), "the refused decode wrote O"
    need = int(re.search(r"needs (\d+)", str(e.value)).group(1))
    assert need == (4 * 1 * 32 * 1 * (128 + 1) * 4 + 255) // 256 * 256  # num_splits x rows x (Dv + 1) fp32
    buf = torch.full((need + 512,), 0xA5, dtype=torch.uint8, device=DEV)
    ws = buf[256:256 + need]
    exp = Expected.of(q, k, v)
    o = flashgen.decode(q, k, v, num_splits=4, workspace=ws, out=out.view)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, None, "decode, given workspace")
    assert (buf[:256] == 0xA5).all() and (buf[256 + need:] == 0xA5).all(), "bytes outside the workspace changed"


def _allocations():
    return torch.cuda.memory_stats()["allocation.all.allocated"]  # allocation requests so far


def test_calls_allocate_only_their_outputs():
    """After the first call on a stream (kernel loaded, decode workspace cached), a call allocates
    its outputs and nothing else: none with out= given, one without."""
    q, k, v = _decode_inputs(B=1, Sk=2000)
    flashgen.decode(q, k, v, num_splits=4)
    flashgen.attention(q, k, v, num_splits=None)
    torch.cuda.synchronize()
    out = torch.empty_like(q)
    for call in (lambda **kw: flashgen.decode(q, k, v, num_splits=4, **kw),
                 lambda **kw: flashgen.attention(q, k, v, **kw)):
        before = _allocations()
        call(out=out)
        assert _allocations() == before, "a call with out= allocated"
        call()
        assert _allocations() == before + 1, "a call without out= allocated more than its output"


def test_cuda_graph_keeps_its_workspace():
    """A decode captured on a stream whose cached workspace an eager decode later replaces by a
    larger one: replays must not write into the memory the old one gave back to PyTorch's
    allocator (here taken by other tensors of that size)."""
    S = torch.cuda.Stream()
    q, k, v = _decode_inputs(B=1, Sk=2000)
    out = Poisoned(q.shape, F16)
    S.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(S):
        for _ in range(2):
            flashgen.decode(q, k, v, num_splits=4, out=out.view)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=S):
        flashgen.decode(q, k, v, num_splits=4, out=out.view)
    small = (4 * 1 * 32 * 1 * (128 + 1) * 4 + 255) // 256 * 256  # the captured decode's workspace
    q2, k2, v2 = _decode_inputs(B=4, Sk=2000)
    with torch.cuda.stream(S):
        flashgen.decode(q2, k2, v2, num_splits=16)  # needs a larger workspace on S
        others = [torch.full((small,), 0x5A, dtype=torch.uint8, device=DEV) for _ in range(8)]
    torch.cuda.synchronize()
    for trial in range(2):
        q.copy_(randn(*q.shape))
        k.copy_(randn(*k.shape))
        v.copy_(randn(*v.shape))
        out.view.fill_(NAN)
        exp = Expected.of(q, k, v)
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        assert all(bool((t == 0x5A).all()) for t in others), \
            "a graph replay wrote into memory PyTorch had handed to other tensors (a freed workspace)"
        exp.check(out.view, None, f"replay {trial} after the stream's workspace grew")


def merge_ref(o_p, lse_p):
    """float64: O [B, Sq, H, Dv], LSE [B, H, Sq] of partials [S, B, Sq, H, Dv] / [S, B, H, Sq]."""
    m = lse_p.double()
    lse = torch.logsumexp(m, dim=0)
    w = torch.exp(m - lse[None])
    w = torch.where(torch.isneginf(m) | torch.isneginf(lse)[None], torch.zeros((), dtype=torch.float64,
                                                                              device=DEV), w)
    w = w.permute(0, 1, 3, 2)[..., None]  # [S, B, Sq, H, 1]
    o = torch.where(w > 0, w * o_p.double(), torch.zeros((), dtype=torch.float64, device=DEV)).sum(0)
    return o, lse


@pytest.mark.parametrize("part,out_dtype", [(F32, F16), (F16, BF16), (BF16, F32)])
def test_merge_states(part, out_dtype):
    S, B, Sq, H, Dv = 4, 2, 33, 4, 128
    o_p = randn(S, B, Sq, H, Dv, dtype=part)
    lse_p = torch.randn(S, B, H, Sq, device=DEV) * 3 + 10
    lse_p[1, :, :, ::5] = -math.inf  # empty partials: their O is never used
    o_p[1, :, ::5] = NAN
    lse_p[:, 0, 2, 7] = -math.inf  # a row whose partials are all empty: O = 0, LSE = -inf
    o_p[:, 0, 7, 2] = NAN
    o64, lse64 = merge_ref(o_p, lse_p)
    out = Poisoned((B, Sq, H, Dv), out_dtype)
    poison_allocator((B, H, Sq), F32)
    o, l_ = flashgen.merge_states(o_p, lse_p, out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    assert torch.isfinite(o).all()
    assert torch.equal(o[0, 7, 2], torch.zeros_like(o[0, 7, 2])) and torch.isneginf(l_[0, 2, 7])
    # the output's rounding plus a few fp32 ulps of the merge's arithmetic (exp2, the weights' sum)
    atol = (torch.finfo(out_dtype).eps + 32 * torch.finfo(F32).eps) * max(1.0, o64.abs().max().item())
    assert _max_abs(o, o64) <= atol
    assert torch.equal(torch.isneginf(l_), torch.isneginf(lse64)) and not torch.isnan(l_).any()
    assert _finite_max_abs(l_, lse64) <= 1e-5 * max(1.0, lse64[torch.isfinite(lse64)].abs().max().item())
    # out_dtype without out
    o2 = flashgen.merge_states(o_p, lse_p, out_dtype=out_dtype)
    torch.cuda.synchronize()
    assert o2.dtype == out_dtype and torch.equal(o2, o)


def test_merge_of_key_chunks():
    """Attention over key chunks (one empty) with LSE, merged: the attention over all keys."""
    B, Sq, Sk, H, D = 2, 64, 500, 4, 64
    q, k, v = randn(B, Sq, H, D), randn(B, Sk, H, D), randn(B, Sk, H, D)
    exp = Expected.of(q, k, v)
    cuts = [0, 137, 137, 400, Sk]  # chunk 1 is empty
    parts = [flashgen.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in zip(cuts, cuts[1:])]
    o_p = torch.stack([p[0] for p in parts])
    lse_p = torch.stack([p[1] for p in parts])
    assert torch.isneginf(lse_p[1]).all()
    out = Poisoned((B, Sq, H, D), F16)
    o, l_ = flashgen.merge_states(o_p, lse_p, out=out.view, return_lse=True)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(o, l_, "merge of key chunks")


# ---- torch.compile, CUDA graphs, streams, DLPack ------------------------------------------


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile(backend):
    if getattr(flashgen, "_ops", None) is None:
        pytest.skip("flashgen.torch registers no custom ops (flashgen._ops is None): torch.compile cannot trace "
                    "flashgen.attention")
    import torch._dynamo
    torch._dynamo.reset()

    def f(q, k, v):
        o, lse = flashgen.attention(q, k, v, causal="bottom_right", return_lse=True)
        return o * 2, lse

    cf = torch.compile(f, fullgraph=True, backend=backend)
    for trial in range(2):  # fresh inputs: nothing of the first call is baked in
        q, k, v = randn(2, 77, 4, 64), randn(2, 300, 4, 64), randn(2, 300, 4, 64)
        exp = Expected.of(q, k, v, causal="bottom_right")
        o2, l_ = cf(q, k, v)
        torch.cuda.synchronize()
        exp.check(o2 / 2, l_, f"torch.compile({backend}) call {trial}")


def _capture(fn):
    """Warm up on a side stream (kernel loads, workspaces), then capture fn into a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        res = fn()
    return g, res


@pytest.mark.parametrize("kind", ["forward", "decode"])
def test_cuda_graph(kind):
    """Capture once, then change the inputs in place and replay: each replay computes the new inputs'
    attention into the poisoned outputs."""
    if kind == "forward":
        shapes, causal = ((2, 77, 4, 64), (2, 300, 4, 64)), "bottom_right"
    else:
        shapes, causal = ((2, 1, 32, 128), (2, 3000, 8, 128)), None
    q, k, v = randn(*shapes[0]), randn(*shapes[1]), randn(*shapes[1])
    out = Poisoned(shapes[0], F16)

    def call():
        if kind == "forward":
            return flashgen.attention(q, k, v, causal=causal, out=out.view, return_lse=True)
        return flashgen.decode(q, k, v, num_splits=0, out=out.view, return_lse=True)

    g, (o, lse) = _capture(call)
    assert o is out.view
    for trial in range(3):
        q.copy_(randn(*shapes[0]))
        k.copy_(randn(*shapes[1]))
        v.copy_(randn(*shapes[1]))
        out.view.fill_(NAN)
        lse.fill_(NAN)
        exp = Expected.of(q, k, v, causal=causal)
        g.replay()
        torch.cuda.synchronize()
        out.check_canaries()
        exp.check(o, lse, f"CUDA graph ({kind}) replay {trial}")


def test_prepared_signatures(monkeypatch):
    """The second plain call of a signature takes the prepared path (_core._prepared): fresh inputs
    and outputs each time, results against the reference; the library still checks every pointer
    (a misaligned q of the same shape and strides is refused, the output untouched); the current
    stream (or the one given) is the one read at each call; a signature the library runs as a decode is marked and
    served by the general path."""
    B, S, H, D = 2, 150, 4, 64
    shape = (B, S, H, D)
    n = math.prod(shape)
    for with_out in (False, True):
        for trial in range(3):
            q, k, v = randn(*shape), randn(*shape), randn(*shape)
            exp = Expected.of(q, k, v, causal="bottom_right")
            if with_out:
                out = Poisoned(shape, F16)
                o, lse = flashgen.attention(q, k, v, causal="bottom_right", out=out.view, return_lse=True)
                assert o is out.view
            else:
                poison_allocator(shape, F16)
                o, lse = flashgen.attention(q, k, v, causal="bottom_right", return_lse=True)
            torch.cuda.synchronize()
            if with_out:
                out.check_canaries()
            exp.check(o, lse, f"prepared path (out given: {with_out}), call {trial}")
    prepared = [p for p in flashgen._core._prepared.values() if p and tuple(p[1]) == shape]
    assert prepared and "mask=causalbr" in prepared[0][0].spec and "lse=1" in prepared[0][0].spec

    # A misaligned q (same shape and strides, data 2 bytes off): InvalidArgument, O untouched.
    buf = randn(n + 8)
    good = buf[8:].view(shape)
    k, v = randn(*shape), randn(*shape)
    out = Poisoned(shape, F16)
    flashgen.attention(good, k, v, out=out.view)  # prepares (q, k, v, out) of these strides
    torch.cuda.synchronize()
    out.view.fill_(NAN)
    with pytest.raises(flashgen.InvalidArgument, match=r"q\.data .* aligned"):
        flashgen.attention(buf[1:n + 1].view(shape), k, v, out=out.view)
    torch.cuda.synchronize()
    assert torch.isnan(out.view).all(), "a refused call wrote its output"

    # The current stream, read per call on the prepared path.
    if hasattr(torch.cuda, "_sleep"):
        q_new = randn(*shape)
        q = good
        exp = Expected.of(q_new, k, v)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)
            q.copy_(q_new)
            flashgen.attention(q, k, v, out=out.view)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        out.check_canaries()
        exp.check(out.view, None, "prepared path on a non-default current stream")
        # The same signature with the stream given (a torch.cuda.Stream, then its int handle),
        # served by the prepared path alone (the general path fails the test if reached).
        def general(*args, **kwargs):
            raise AssertionError("the general path ran a prepared signature with stream=")
        monkeypatch.setattr(flashgen._core, "attention", general)
        for given in (s, s.cuda_stream):
            q_new = randn(*shape)
            exp = Expected.of(q_new, k, v)
            out.view.fill_(NAN)
            torch.cuda.synchronize()
            with torch.cuda.stream(s):
                torch.cuda._sleep(100_000_000)
                q.copy_(q_new)
            flashgen.attention(q, k, v, out=out.view, stream=given)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            out.check_canaries()
            exp.check(out.view, None, f"prepared path, stream={type(given).__name__}")
        with pytest.raises(flashgen.InvalidArgument, match="stream is a str"):
            flashgen.attention(q, k, v, out=out.view, stream="s")
        monkeypatch.undo()

    # A decode-shaped signature (one query row, many keys; the library may run it as a split-KV
    # decode, then it is marked False and the general path serves it): right both times.
    q1, kd, vd = randn(2, 1, 32, 128), randn(2, 4096, 8, 128), randn(2, 4096, 8, 128)
    for trial in range(2):
        exp = Expected.of(q1, kd, vd)
        o = flashgen.attention(q1, kd, vd)
        torch.cuda.synchronize()
        exp.check(o, None, f"decode-shaped signature, call {trial}")


@pytest.mark.parametrize("extras", ["plain", "bias+sinks"])
def test_bind(extras):
    """flashgen.bind: checked and planned once; each call() reads the values the bound tensors hold
    then (new q, k, v, bias and sinks written in place between calls) into the same outputs."""
    B, Sq, Sk, Hq, Hkv, D = 2, 120, 200, 8, 2, 64
    q, k, v = randn(B, Sq, Hq, D, dtype=BF16), randn(B, Sk, Hkv, D, dtype=BF16), randn(B, Sk, Hkv, D, dtype=BF16)
    kw = dict(causal="bottom_right")
    if extras == "bias+sinks":
        kw.update(bias=randn(B, 1, Sq, Sk, dtype=F32), sinks=torch.randn(Hq, device=DEV))
    out = Poisoned((B, Sq, Hq, D), BF16)
    call = flashgen.bind(q, k, v, out=out.view, return_lse=True, **kw)
    assert call.spec is not None and "mask=causalbr" in call.spec
    for trial in range(3):
        q.copy_(randn(B, Sq, Hq, D, dtype=BF16))
        k.copy_(randn(B, Sk, Hkv, D, dtype=BF16))
        v.copy_(randn(B, Sk, Hkv, D, dtype=BF16))
        if extras == "bias+sinks":
            kw["bias"].copy_(randn(B, 1, Sq, Sk, dtype=F32))
            kw["sinks"].copy_(torch.randn(Hq, device=DEV))
        out.view.fill_(NAN)
        call.lse.fill_(NAN)
        exp = Expected.of(q, k, v, **kw)
        o, lse = call()
        torch.cuda.synchronize()
        assert o is out.view
        out.check_canaries()
        exp.check(o, lse, f"bound call ({extras}), call {trial}")
    k.set_(torch.empty_like(k))  # the data moved: refused, nothing launched on the old address
    with pytest.raises(flashgen.InvalidArgument, match="k's data moved since flashgen.bind"):
        call()


@pytest.mark.parametrize("how", ["current stream", "stream="])
def test_non_default_stream(how):
    """The call runs on torch's current stream (or the given one): queued behind a long sleep and the
    copy of new q on that stream, it must see the new q. On another stream it would run at once on
    the old q."""
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("torch.cuda._sleep is not available in this PyTorch")
    B, S, H, D = 2, 200, 4, 64
    q_new, k, v = randn(B, S, H, D), randn(B, S, H, D), randn(B, S, H, D)
    q = randn(B, S, H, D)  # old values, replaced on the stream
    flashgen.attention(q, k, v)  # loads the kernel first
    out = Poisoned((B, S, H, D), F16)
    exp = Expected.of(q_new, k, v)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # ~50 ms
        q.copy_(q_new)
    if how == "current stream":
        with torch.cuda.stream(s):
            flashgen.attention(q, k, v, out=out.view)
    else:
        flashgen.attention(q, k, v, out=out.view, stream=s)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    out.check_canaries()
    exp.check(out.view, None, f"on a non-default stream ({how})")


def test_cupy_dlpack():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    B, Sq, Sk, H, D = 2, 77, 300, 4, 64
    qt, kt, vt = randn(B, Sq, H, D), randn(B, Sk, H, D), randn(B, Sk, H, D)
    exp = Expected.of(qt, kt, vt, causal="bottom_right")
    torch.cuda.synchronize()
    q, k, v = (cp.from_dlpack(t) for t in (qt, kt, vt))
    o, lse = flashgen.attention(q, k, v, causal="bottom_right", return_lse=True)
    assert isinstance(o, cp.ndarray) and isinstance(lse, cp.ndarray)
    assert o.dtype == cp.float16 and lse.dtype == cp.float32
    out = cp.full((B, Sq, H, D), cp.nan, dtype=cp.float16)
    o2 = flashgen.attention(q, k, v, causal="bottom_right", out=out)
    assert o2 is out
    cp.cuda.Device().synchronize()
    exp.check(torch.from_dlpack(o), torch.from_dlpack(lse), "CuPy arrays")
    exp.check(torch.from_dlpack(out), None, "CuPy out=")


# ---- argument errors with CUDA tensors: refused before any launch --------------------------


@pytest.mark.parametrize("case,match", [
    ("q_float32", r"q has dtype f32; allowed: float16, bfloat16"),
    ("k_shape", r"k has shape \[2, 64, 2, 32\]; expected \[2, 64, 2, 64\]"),
    ("k_cpu", r"k is on device 'cpu'; flashgen runs on CUDA tensors"),
    ("causal_true", r"causal is True; allowed: None, 'top_left' .* 'bottom_right'"),
    ("q_stride", r"q.stride_head \(68\) must be a multiple of 8 elements"),
    ("bias_shape", r"bias has shape \[2, 4, 32, 64\]; it must broadcast to"),
    ("splits", r"num_splits \(129\) must be None, 0 \(chosen\) or in \[1, 128\]"),
    ("q_misaligned", r"q.data \(0x[0-9a-f]+\) must be 16-byte aligned"),
])
def test_argument_errors_before_launch(case, match):
    B, S, H, D = 2, 32, 4, 64
    q, k, v = randn(B, S, H, D), randn(B, 64, 2, D), randn(B, 64, 2, D)
    out = Poisoned((B, S, H, D), F16)
    kw = {}
    if case == "q_float32":
        q = q.float()
    elif case == "k_shape":
        k = randn(B, 64, 2, 32)
    elif case == "k_cpu":
        k = k.cpu()
    elif case == "causal_true":
        kw["causal"] = True
    elif case == "q_stride":
        q = randn(B, S, H, D + 4)[..., :D]
    elif case == "bias_shape":  # [B, H, 32, 64] does not broadcast to [B, H, 16, 64]
        q = randn(B, 16, H, D)
        out = Poisoned((B, 16, H, D), F16)
        kw["bias"] = randn(B, H, 32, 64, dtype=F32)
    elif case == "splits":
        kw["num_splits"] = 129
    elif case == "q_misaligned":
        q = randn(B * S * H * D + 8)[1:1 + B * S * H * D].view(B, S, H, D)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=match):
        flashgen.attention(q, k, v, out=out.view, **kw)
    torch.cuda.synchronize()
    assert torch.isnan(out.buf).all(), "a refused call wrote into O"
