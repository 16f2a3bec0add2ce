#!/usr/bin/env python3
"""Sliding windows, attention sinks and ALiBi against the plain forward, one process (issue 13 (c)).

Window rows: our window mask (window_left = W, window_right = 0, bottom-right)
against our causal kernel on the same inputs, and FlashAttention-4 with
window_size = (W, 0) and causal when it imports. "work" is the window's
visible (query, key) pairs over the causal mask's; "per pair" is the window's
time per visible pair over causal's (1.00: time proportional to the visible
work; the target is <= 1.05). "dense" is our plain kernel without a mask over
seqlen_k = W + 128 keys (about the key tiles a 128-row block of the window
visits, every key visible) and "vs dense" the window's time per visible pair
over that one's: what the window costs beyond visiting fewer tiles per work
item. Sinks and ALiBi rows: the specialization against
the plain kernel (FlashAttention-4 with learnable_sink where it takes it).
Times are medians of device-event-timed calls (bench.py's method: functions
take turns call by call, each behind a spin kernel, inputs rotated).
Correctness: ours against FlashAttention-4 on the first input set where both
run (the GPU tier checks against the float64 reference).
    usage: bench_modifiers.py --lib build/libflashgen.so [--runs 20]
"""
import argparse
import ctypes
import sys

import torch

from bench import fa4_function, input_sets, median_ms_pair
from capi import Problem, check, load_lib

WINDOW_SHAPES = [  # (B, Hq, Hkv, S, D, window_left)
    (1, 32, 8, 32768, 128, 4096),
    (1, 32, 8, 32768, 128, 1024),
    (4, 32, 8, 8192, 128, 4096),
]
MODIFIER_SHAPES = [  # (B, Hq, Hkv, S, D, causal)
    (4, 32, 32, 4096, 128, True),
    (4, 32, 32, 4096, 128, False),
]


def visible_pairs(S, left):
    """(query, key) pairs of S x S a bottom-right window (left, 0) shows (left < 0: causal)."""
    if left < 0 or left >= S:
        return S * (S + 1) // 2
    return (left + 1) * S - left * (left + 1) // 2


def make_problems(lib, sets, B, S, Hq, Hkv, D, dtype, mask, setup):
    out = []
    for (q, k, v, o) in sets:
        p = Problem()
        check(lib, lib.flashgen_problem_init_bshd(
            ctypes.byref(p), 0 if dtype == torch.float16 else 1, B, S, S, Hq, Hkv, D, D, mask,
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()), "init")
        setup(p)
        out.append(p)
    return out


def runner(lib, ps, stream):
    return lambda i: check(lib, lib.flashgen_forward(ctypes.byref(ps[i]), stream), "forward")


def max_err_vs(fa4_call, ours, sets):
    """max |ours - FlashAttention-4| on set 0, or None."""
    if fa4_call is None:
        return None
    q, k, v, o = sets[0]
    o.fill_(float("nan"))
    ours(0)
    try:
        ref = fa4_call(0)
    except Exception as e:
        print(f"  note: FlashAttention-4: {type(e).__name__}: {str(e)[:100]}", file=sys.stderr)
        return None
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.cuda.synchronize()
    return (o.float() - ref.float()).abs().max().item()


def timed(fns, n_sets, warmup, runs):
    """Medians of fns (None where a peer's call fails: then the others are timed alone)."""
    try:
        return median_ms_pair(fns, list(range(n_sets)), warmup, runs)
    except Exception as e:
        print(f"  note: {type(e).__name__}: {str(e)[:100]}", file=sys.stderr)
        return median_ms_pair(fns[:2], list(range(n_sets)), warmup, runs) + [None] * (len(fns) - 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--dtypes", default="bf16")
    args = ap.parse_args()
    lib = load_lib(args.lib)
    fa4 = fa4_function()
    stream = torch.cuda.current_stream().cuda_stream
    f = lambda x: f"{x:8.3f}" if x else "     n/a"
    r = lambda a, b: f"{a / b:8.2f}" if a and b else "     n/a"
    e = lambda x: "n/a" if x is None else f"{x:.2e}"
    print(f"device {torch.cuda.get_device_name()}, runs {args.runs} (median), {args.sets} input sets")

    print("\nsliding window (left W, right 0, bottom-right) against causal")
    print(f"{'shape (B, Hq/Hkv, S, D)':26} {'dtype':5} {'W':>5} {'causal ms':>9} {'win ms':>8} {'work':>6} "
          f"{'per pair':>8} {'win TF/s':>8} {'dense ms':>8} {'vs dense':>8} {'fa4 caus':>8} {'fa4 win':>8} "
          f"{'win/fa4':>8} {'max|ours-fa4|':>13}")
    for (B, Hq, Hkv, S, D, W) in WINDOW_SHAPES:
        for dt in args.dtypes.split(","):
            dtype = torch.float16 if dt == "f16" else torch.bfloat16
            sets = input_sets(args.sets, B, S, S, Hq, Hkv, D, dtype)
            causal = make_problems(lib, sets, B, S, Hq, Hkv, D, dtype, 2, lambda p: None)

            def set_window(p):
                p.mask = 4  # FLASHGEN_MASK_WINDOW_BOTTOM_RIGHT
                p.window_left, p.window_right = W, 0
            window = make_problems(lib, sets, B, S, Hq, Hkv, D, dtype, 2, set_window)
            Sk_dense = min(S, W + 128)
            dense = []
            for (q, k, v, o) in sets:
                p = Problem()
                check(lib, lib.flashgen_problem_init_bshd(
                    ctypes.byref(p), 0 if dtype == torch.float16 else 1, B, S, Sk_dense, Hq, Hkv, D, D, 0,
                    q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()), "init")
                dense.append(p)
            fns = [runner(lib, causal, stream), runner(lib, window, stream)]
            fa4_win = None
            if fa4 is not None:
                fns.append(lambda i: fa4(*sets[i][:3], causal=True))
                fa4_win = lambda i: fa4(*sets[i][:3], causal=True, window_size=(W, 0))
                fns.append(fa4_win)
            err = max_err_vs(fa4_win, fns[1], sets)
            t = timed(fns, len(sets), args.warmup, args.runs)
            td = timed([runner(lib, dense, stream)], len(sets), args.warmup, args.runs)[0]
            work = visible_pairs(S, W) / visible_pairs(S, -1)
            flops = 4.0 * B * Hq * visible_pairs(S, W) * D
            vs_dense = (t[1] / visible_pairs(S, W)) / (td / (S * Sk_dense))
            print(f"{str((B, f'{Hq}/{Hkv}', S, D)):26} {dt:5} {W:5d} {t[0]:9.3f} {t[1]:8.3f} {work:6.3f} "
                  f"{t[1] / t[0] / work:8.3f} {flops / (t[1] * 1e-3) / 1e12:8.1f} {td:8.3f} {vs_dense:8.3f} "
                  f"{f(t[2] if len(t) > 2 else None)} {f(t[3] if len(t) > 3 else None)} "
                  f"{r(t[1], t[3] if len(t) > 3 else None)} {e(err):>13}", flush=True)

    print("\nsinks and ALiBi against the plain kernel")
    print(f"{'shape (B, Hq/Hkv, S, D)':26} {'dtype':5} {'mask':6} {'what':6} {'plain ms':>9} {'mod ms':>8} "
          f"{'mod/plain':>9} {'fa4 ms':>8} {'fa4 mod':>8} {'max|ours-fa4|':>13}")
    for (B, Hq, Hkv, S, D, causal) in MODIFIER_SHAPES:
        for dt in args.dtypes.split(","):
            dtype = torch.float16 if dt == "f16" else torch.bfloat16
            sets = input_sets(args.sets, B, S, S, Hq, Hkv, D, dtype)
            mask = 2 if causal else 0
            sinks = torch.randn(Hq, device="cuda", dtype=torch.float32)
            slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / Hq) for h in range(Hq)], device="cuda",
                                  dtype=torch.float32)
            plain = make_problems(lib, sets, B, S, Hq, Hkv, D, dtype, mask, lambda p: None)
            for what in ("sinks", "alibi"):
                def setup(p):
                    if what == "sinks":
                        p.sinks = sinks.data_ptr()
                    else:
                        p.alibi_slopes = slopes.data_ptr()
                mod = make_problems(lib, sets, B, S, Hq, Hkv, D, dtype, mask, setup)
                fns = [runner(lib, plain, stream), runner(lib, mod, stream)]
                fa4_mod = None
                if fa4 is not None and what == "sinks":
                    fns.append(lambda i: fa4(*sets[i][:3], causal=causal))
                    fa4_mod = lambda i: fa4(*sets[i][:3], causal=causal, learnable_sink=sinks)
                    fns.append(fa4_mod)
                err = max_err_vs(fa4_mod, fns[1], sets)
                t = timed(fns, len(sets), args.warmup, args.runs)
                print(f"{str((B, f'{Hq}/{Hkv}', S, D)):26} {dt:5} {'causal' if causal else 'none':6} {what:6} "
                      f"{t[0]:9.3f} {t[1]:8.3f} {t[1] / t[0]:9.2f} {f(t[2] if len(t) > 2 else None)} "
                      f"{f(t[3] if len(t) > 3 else None)} {e(err):>13}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
