#!/usr/bin/env python3
"""libflashgen split-KV decode against PyTorch SDPA (flash and cuDNN backends,
GQA through enable_gqa) and FlashAttention-4 (flash_attn.cute, when importable:
../shared/anchors/fa4-carry.sh), on the same inputs; then the merge of attention
states against a device copy of the same bytes.

Ours is flashgen_decode (C ABI, ctypes) with num_splits chosen by the library
and a caller workspace (allocated once, as a serving engine would). Every time
is the median of --runs event-timed calls after a spin-up (bench.py's
median_ms_pair: the systems take turns call by call), the inputs rotating over
--sets independent sets (each set's K/V is larger than L2 for the big rows).
Bandwidth = bytes of K and V read / time (Q and O are small).

usage: bench_decode.py --lib build/libflashgen.so [--baseline other/libflashgen.so[,another.so]] [--runs 30] [--warmup 5] [--sets 3]
                       [--dtypes bf16,f16] [--rows all|0,1,...]
"""
import argparse
import ctypes
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import input_sets, median_ms_pair  # noqa: E402
from capi import Problem, check, load_lib  # noqa: E402

try:
    from flash_attn.cute import flash_attn_func as fa4_func
except Exception as e:  # not installed here
    fa4_func = None
    print(f"note: FlashAttention-4 not importable ({type(e).__name__}: {str(e)[:80]}); its column is n/a",
          file=sys.stderr)

# (B, Hq, Hkv, Sq, Sk, D, causal) — the decode table of the issue.
ROWS = [
    (1, 32, 8, 1, 32768, 128, False),
    (8, 32, 8, 1, 16384, 128, False),
    (64, 32, 8, 1, 4096, 128, False),
    (1, 64, 8, 1, 131072, 128, False),
    (16, 32, 32, 1, 8192, 128, False),
    (32, 8, 1, 1, 8192, 64, False),
    (8, 16, 16, 1, 16384, 256, False),
    (8, 32, 8, 4, 16384, 128, True),
    (8, 32, 8, 16, 8192, 128, True),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--rows", default="all")
    ap.add_argument("--baseline", default="",
                    help="other libflashgen.so builds, comma-separated, timed beside --lib (each with its own splits; "
                         "columns base, base2, ...)")
    args = ap.parse_args()

    def load_decode(path):
        lib = load_lib(path)
        if not hasattr(lib, "flashgen_decode"):
            return None
        lib.flashgen_decode.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_void_p]
        lib.flashgen_decode_workspace_bytes.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.c_int,
                                                        ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                                        ctypes.POINTER(ctypes.c_int)]
        return lib

    lib = load_decode(args.lib)
    if lib is None:
        sys.exit(f"bench_decode.py: {args.lib} has no flashgen_decode")
    bases = []
    for b in (b for b in args.baseline.split(",") if b):
        bases.append(load_decode(b))
        if bases[-1] is None:  # (a library from before split-KV decode)
            print(f"note: baseline {b} has no flashgen_decode; left out", file=sys.stderr)
            bases.pop()
    base_names = ["base" if k == 0 else f"base{k + 1}" for k in range(len(bases))]
    base = bases[0] if bases else None
    props = torch.cuda.get_device_properties(0)
    arch = props.major * 10 + props.minor
    print(f"device {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, runs {args.runs} "
          f"(median), warm-up {args.warmup}, {args.sets} rotated input sets")
    rows = ROWS if args.rows == "all" else [ROWS[int(i)] for i in args.rows.split(",")]
    table, failures = [], 0
    for (B, Hq, Hkv, Sq, Sk, D, causal) in rows:
        for dname in args.dtypes.split(","):
            dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dname]
            sets = input_sets(args.sets, B, Sq, Sk, Hq, Hkv, D, dtype)
            problems = []
            for (q, k, v, o) in sets:
                p = Problem()
                # causal decode: bottom-right (the query rows are the newest keys), mask code 2
                check(lib, lib.flashgen_problem_init_bshd(ctypes.byref(p), 0 if dtype == torch.float16 else 1, B, Sq,
                                                          Sk, Hq, Hkv, D, D, 2 if causal else 0, q.data_ptr(),
                                                          k.data_ptr(), v.data_ptr(), o.data_ptr()), "init")
                problems.append(p)
            stream = torch.cuda.current_stream().cuda_stream

            def decode_fn(l):  # l's decode with a caller workspace sized by its own plan
                ws_bytes, splits = ctypes.c_int64(), ctypes.c_int()
                check(l, l.flashgen_decode_workspace_bytes(ctypes.byref(problems[0]), arch,
                                                           props.multi_processor_count, 0, ctypes.byref(ws_bytes),
                                                           ctypes.byref(splits)), "workspace")
                ws = torch.empty(max(ws_bytes.value, 256), dtype=torch.uint8, device="cuda")

                def run(i):
                    check(l, l.flashgen_decode(ctypes.byref(problems[i]), 0, ws.data_ptr(), ws_bytes.value, stream),
                          "decode")
                return run, splits.value

            ours, splits = decode_fn(lib)

            def sdpa(i, backend):
                q, k, v, _ = sets[i]
                with sdpa_kernel([backend]):
                    # SDPA's is_causal is top-left; decode's causal mask is bottom-right: an explicit mask then.
                    if causal:
                        mask = torch.ones(Sq, Sk, dtype=torch.bool, device="cuda").tril(Sk - Sq)
                        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                              attn_mask=mask, enable_gqa=(Hq != Hkv))
                    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          enable_gqa=(Hq != Hkv))

            q, k, v, o = sets[0]
            o.fill_(float("nan"))
            ours(0)
            torch.cuda.synchronize()
            with sdpa_kernel([SDPBackend.MATH]):
                qf, kf, vf = (t.double().transpose(1, 2) for t in (q, k, v))
                mask = torch.ones(Sq, Sk, dtype=torch.bool, device="cuda").tril(Sk - Sq) if causal else None
                ref = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, enable_gqa=(Hq != Hkv)).transpose(1, 2)
            err = (o.double() - ref).abs().max().item()
            ok = err == err and err < (2e-2 if dtype == torch.bfloat16 else 4e-3)
            failures += 0 if ok else 1
            idx = list(range(len(sets)))
            fns, names = [ours], ["ours"]
            for bl, bn in zip(bases, base_names):
                fns.append(decode_fn(bl)[0])
                names.append(bn)
            peers = [(n, lambda i, b=b: sdpa(i, b))
                     for n, b in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))]
            if fa4_func is not None:
                # FlashAttention-4 aligns causal masks bottom-right when seqlen_q < seqlen_k, as decode does.
                peers.append(("fa4", lambda i: fa4_func(sets[i][0], sets[i][1], sets[i][2], causal=causal)))
            for name, fn in peers:
                try:
                    fn(0)  # (FlashAttention-4 compiles its kernel here)
                    torch.cuda.synchronize()
                    fns.append(fn)
                    names.append(name)
                except Exception as e:  # the backend refuses this shape / mask
                    msg = (str(e).splitlines() or [type(e).__name__])[0][:90]
                    print(f"  note: {name} n/a for {(B, Hq, Hkv, Sq, Sk, D)} {dname}: {msg}", file=sys.stderr)
            times = dict(zip(names, median_ms_pair(fns, idx, args.warmup, args.runs)))
            kv_bytes = 2.0 * B * Sk * Hkv * D * q.element_size()
            table.append(((B, Hq, Hkv, Sq, Sk, D, causal), dname, splits, times, kv_bytes, err, ok))
            t = times["ours"]
            print(f"  B{B} H{Hq}/{Hkv} Sq{Sq} Sk{Sk} D{D}{' causal' if causal else ''} {dname}: ours {t * 1e3:.1f} us "
                  f"({kv_bytes / (t * 1e-3) / 1e12:.2f} TB/s, {splits} splits), "
                  + ", ".join(f"{n} {times[n] * 1e3:.1f} us" for n in names[1:])
                  + f"; max|ours-ref| {err:.2e} {'ok' if ok else 'MISMATCH'}", flush=True)
            del sets, fns
            torch.cuda.empty_cache()

    print()
    print(f"{'(B, Hq/Hkv, Sq, Sk, D)':30} {'dtype':5} {'splits':>6} {'ours us':>8} {'TB/s':>5} {'flash us':>8} "
          f"{'cudnn us':>8} {'fa4 us':>8} {'ours/best':>9}" + "".join(f" {bn + ' us':>8} {'ours/' + bn:>9}" for bn in base_names))
    slower = 0
    for (shape, dname, sp, times, kvb, err, ok) in table:
        B, Hq, Hkv, Sq, Sk, D, causal = shape
        peers = [times[n] for n in ("flash", "cudnn", "fa4") if n in times]
        best = min(peers) if peers else None
        ratio = best / times["ours"] if best else None  # > 1: ours faster
        slower += 1 if ratio is not None and ratio < 1.0 else 0
        f = lambda n: f"{times[n] * 1e3:8.1f}" if n in times else "     n/a"
        print(f"({B}, {Hq}/{Hkv}, {Sq}, {Sk}, {D}){' c' if causal else ''}".ljust(30) +
              f" {dname:5} {sp:6d} {times['ours'] * 1e3:8.1f} {kvb / (times['ours'] * 1e-3) / 1e12:5.2f} {f('flash')} "
              f"{f('cudnn')} {f('fa4')} {(f'{ratio:9.2f}' if ratio else '      n/a')}" +
              "".join(f" {f(bn)} {times[bn] / times['ours']:9.3f}" for bn in base_names))
    print(f"\nrows slower than the fastest peer: {slower} of {len(table)}; output mismatches: {failures}")
    failures += bench_merge(lib, args)
    return 1 if failures else 0


# (num_states, batch, seqlen_q, heads, head_dim_v): decode-sized merges and a
# context-parallel prefill merge.
MERGE_ROWS = [(8, 64, 1, 32, 128), (32, 8, 4, 32, 128), (4, 4, 4096, 32, 128), (2, 1, 32768, 32, 128)]


def bench_merge(lib, args):
    """flashgen_merge_states (fp32 partials -> bf16 O and fp32 LSE) against
    torch's copy of a tensor as large as the partial O: bandwidth = bytes read +
    written / time for both."""
    lib.flashgen_merge_problem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 5 + [
        ctypes.c_void_p] * 4
    lib.flashgen_merge_states.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    print(f"\n{'merge (S, B, Sq, H, Dv)':30} {'ours us':>8} {'GB/s':>7} {'copy us':>8} {'copy GB/s':>9} {'of copy':>7}")
    failures = 0
    stream = torch.cuda.current_stream().cuda_stream
    for (S, B, Sq, H, Dv) in MERGE_ROWS:
        sets, probs = [], []
        for _ in range(args.sets):
            o_part = torch.randn(S, B, Sq, H, Dv, device="cuda", dtype=torch.float32)
            lse_part = torch.randn(S, B, H, Sq, device="cuda", dtype=torch.float32) * 4
            o = torch.empty(B, Sq, H, Dv, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(B, H, Sq, device="cuda", dtype=torch.float32)
            src = torch.empty_like(o_part)
            dst = torch.empty_like(o_part)
            prob = ctypes.create_string_buffer(1024)  # holds a flashgen_merge_problem (filled by _init)
            check(lib, lib.flashgen_merge_problem_init(prob, 0, 2, S, B, Sq, H, Dv, o_part.data_ptr(),
                                                       lse_part.data_ptr(), o.data_ptr(), lse.data_ptr()), "merge init")
            sets.append((o_part, lse_part, o, lse, src, dst))
            probs.append(prob)

        def ours(i):
            check(lib, lib.flashgen_merge_states(probs[i], stream), "merge")

        def copy(i):
            sets[i][5].copy_(sets[i][4])

        o_part, lse_part, o, lse, _, _ = sets[0]
        o.fill_(float("nan"))
        ours(0)
        torch.cuda.synchronize()
        w = torch.softmax(lse_part.double(), dim=0)  # [S, B, H, Sq]
        ref = (w.permute(0, 1, 3, 2).unsqueeze(-1) * o_part.double()).sum(0)
        err = (o.double() - ref).abs().max().item()
        ok = err == err and err < 2e-2
        failures += 0 if ok else 1
        t_ours, t_copy = median_ms_pair([ours, copy], list(range(len(sets))), args.warmup, args.runs)
        moved = 4.0 * (o_part.numel() + lse_part.numel()) + 2.0 * o.numel() + 4.0 * lse.numel()
        copied = 8.0 * o_part.numel()
        print(f"({S}, {B}, {Sq}, {H}, {Dv})".ljust(30) + f" {t_ours * 1e3:8.1f} {moved / (t_ours * 1e-3) / 1e9:7.0f} "
              f"{t_copy * 1e3:8.1f} {copied / (t_copy * 1e-3) / 1e9:9.0f} "
              f"{(moved / t_ours) / (copied / t_copy):7.2f}" + ("" if ok else f"  MISMATCH {err:.2e}"), flush=True)
        del sets
        torch.cuda.empty_cache()
    return failures


if __name__ == "__main__":
    sys.exit(main())
