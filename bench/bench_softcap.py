#!/usr/bin/env python3
"""Softcap against the plain forward, same inputs, one process (issue 13 (c)).

For each shape: our forward with softcap = CAP against our plain forward (the
kernel's SOFTCAP specialization vs none), and FlashAttention-4 with and without
the same softcap when it imports. Times are medians of device-event-timed calls
(bench.py's method: functions take turns call by call, each behind a spin
kernel, inputs rotated). Correctness: ours with softcap against FlashAttention-4
with softcap on the first input set (the GPU tier checks it against the float64
reference; without FlashAttention-4 the column says n/a).
    usage: bench_softcap.py --lib build/libflashgen.so [--cap 50] [--runs 20]
                            [--shape B,HQ,HKV,S,D,CAUSAL ...] (instead of SHAPES; CAUSAL 0 or 1)
"""
import argparse
import ctypes
import sys

import torch

from bench import fa4_function, input_sets, median_ms_pair
from capi import Problem, check, load_lib

SHAPES = [  # (B, Hq, Hkv, S, D, causal)
    (4, 32, 32, 4096, 128, False),
    (4, 32, 32, 4096, 128, True),
    (1, 32, 8, 32768, 128, True),
    (4, 16, 16, 4096, 256, True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cap", type=float, default=50.0)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--shape", action="append", default=[],
                    help="B,HQ,HKV,S,D,CAUSAL (CAUSAL 0 or 1), repeatable; replaces the default shapes")
    args = ap.parse_args()
    shapes = SHAPES
    if args.shape:
        try:
            shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape]
        except ValueError:
            ap.error(f"--shape: integers B,HQ,HKV,S,D,CAUSAL; got {args.shape}")
        bad = [s for s in shapes if len(s) != 6 or min(s[:5]) < 1 or s[5] not in (0, 1) or s[1] % s[2] != 0]
        if bad:
            ap.error(f"--shape: B,HQ,HKV,S,D >= 1 with HKV dividing HQ, CAUSAL 0 or 1; got {bad}")
        shapes = [(b, hq, hkv, sq, d, bool(c)) for (b, hq, hkv, sq, d, c) in shapes]
    lib = load_lib(args.lib)
    fa4 = fa4_function()
    stream = torch.cuda.current_stream().cuda_stream
    print(f"device {torch.cuda.get_device_name()}, softcap {args.cap}, runs {args.runs} (median), {args.sets} input sets")
    print(f"{'shape (B, Hq/Hkv, S, D)':26} {'dtype':5} {'mask':6} {'plain ms':>9} {'cap ms':>8} {'cap/plain':>9} "
          f"{'fa4 ms':>8} {'fa4 cap':>8} {'fa4 c/p':>8} {'cap TF/s':>9} {'max|ours-fa4|':>13}")
    for (B, Hq, Hkv, S, D, causal) in shapes:
        for dt in args.dtypes.split(","):
            dtype = torch.float16 if dt == "f16" else torch.bfloat16
            sets = input_sets(args.sets, B, S, S, Hq, Hkv, D, dtype)
            plain, capped = [], []
            for (q, k, v, o) in sets:
                for cap, out in ((0.0, plain), (args.cap, capped)):
                    p = Problem()
                    check(lib, lib.flashgen_problem_init_bshd(
                        ctypes.byref(p), 0 if dtype == torch.float16 else 1, B, S, S, Hq, Hkv, D, D,
                        1 if causal else 0, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()), "init")
                    p.softcap = cap
                    out.append(p)

            def run(ps):
                return lambda i: check(lib, lib.flashgen_forward(ctypes.byref(ps[i]), stream), "forward")

            fns = [run(plain), run(capped)]
            if fa4 is not None:
                fns.append(lambda i: fa4(*sets[i][:3], causal=causal))
                fns.append(lambda i: fa4(*sets[i][:3], causal=causal, softcap=args.cap))
            err = None
            if fa4 is not None:
                q, k, v, o = sets[0]
                o.fill_(float("nan"))
                run(capped)(0)
                ref = fa4(q, k, v, causal=causal, softcap=args.cap)
                ref = ref[0] if isinstance(ref, tuple) else ref
                torch.cuda.synchronize()
                err = (o.float() - ref.float()).abs().max().item()
            try:
                t = median_ms_pair(fns, list(range(len(sets))), args.warmup, args.runs)
            except Exception as e:  # FlashAttention-4 without softcap support, say
                print(f"  note: {type(e).__name__}: {str(e)[:100]}", file=sys.stderr)
                t = median_ms_pair(fns[:2], list(range(len(sets))), args.warmup, args.runs) + [None, None]
            flops = 4.0 * B * Hq * S * S * D * (0.5 if causal else 1.0)
            f = lambda x: f"{x:8.3f}" if x else "     n/a"
            r = lambda a, b: f"{a / b:8.2f}" if a and b else "     n/a"
            print(f"{str((B, f'{Hq}/{Hkv}', S, D)):26} {dt:5} {'causal' if causal else 'none':6} {t[0]:9.3f} {t[1]:8.3f} "
                  f"{t[1] / t[0]:9.2f} {f(t[2] if len(t) > 2 else None)} {f(t[3] if len(t) > 3 else None)} "
                  f"{r(t[3] if len(t) > 3 else None, t[2] if len(t) > 2 else None)} {flops / (t[1] * 1e-3) / 1e12:9.1f} "
                  f"{'n/a' if err is None else f'{err:.2e}':>13}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
