#!/usr/bin/env python3
"""Packed (variable-length) batches: libflashgen's varlen forward against PyTorch
SDPA on jagged nested tensors and FlashAttention-4's flash_attn_varlen_func, on
the same inputs (bf16, D 128, GQA Hq 32 / Hkv 8, causal), one process.

(a) Ragged set: --lengths sequences (default 16, 256..8192, printed) packed into
    Q/O [total, 32, 128] and K/V [total, 8, 128] with int32 cu_seqlens [17].
    Ours: flashgen_forward on a flashgen_problem with cu_seqlens_q/_k set,
    batch = sequences, seqlen_q/_k = the longest sequence, total_q/_k = packed
    rows, stride_batch 0, mask causal bottom-right (per sequence; S_q = S_k, so
    either alignment). SDPA: F.scaled_dot_product_attention(..., is_causal=True)
    on nested jagged tensors that are views of the same packed memory
    (torch.nested.nested_tensor_from_jagged(values, offsets), transposed to
    [B, H, j, D]) under each of the flash, cuDNN and efficient backends; with
    enable_gqa=True where the jagged path takes it, else on K/V expanded to 32
    heads once, outside the timing (the table's note says which).
    FA4: flash_attn.cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q=,
    cu_seqlens_k=, max_seqlen_q=, max_seqlen_k=, causal=True) ("n/a" when it
    does not import or refuses the call).
(b) Equal work: --equal (default 16x2048) as a packed problem against our dense
    kernel with batch = 16 on the very same tensors ([16, 2048, H, D] is
    [32768, H, D]); varlen/dense time, target <= 1.05 (FA4's own varlen/dense
    beside it when it imports).

Correctness before timing: every system's output on the first input set against
per-sequence dense SDPA (flash/efficient backend, enable_gqa) over the same
slices (our output poisoned with NaN first); max |x - ref| must be < 2e-2 (bf16;
4e-3 f16) or the system is not timed (ours: exit status 1).
Timing: bench.py's method (median of --runs event-timed calls after a spin-up,
the systems taking turns call by call, each call behind a spin kernel, inputs
rotated over --sets independent random sets, each larger than L2).
FLOPs = sum over sequences of 4 * S*(S+1)/2 * D * Hq (the causal mask's
visible (query, key) pairs of each sequence); TFLOP/s = FLOPs / median time;
ours/x = x's time over ours (> 1: ours faster).

usage: bench_varlen.py --lib build/libflashgen.so [--runs 30] [--warmup 5] [--sets 3]
                       [--lengths 256,8192,...] [--equal 16x2048] [--dtype bf16]
"""
import argparse
import ctypes
import logging
import os
import sys
import warnings

# 16 lengths spread over 256..8192 (fixed, some not multiples of the tiles): 52197 tokens.
RAGGED = [256, 8192, 731, 4096, 1500, 6144, 2048, 3333, 512, 7777, 1024, 5000, 384, 2900, 6500, 1800]
HQ, HKV, D = 32, 8, 128
MASK = 2  # FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT (FlashAttention's causal; per sequence in a packed batch)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--lengths", default=",".join(map(str, RAGGED)), help="the ragged set's sequence lengths")
    ap.add_argument("--equal", default="16x2048", help="equal-work check: SEQUENCESxLENGTH ('' to skip)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    args = ap.parse_args()
    args.lengths = [int(x) for x in args.lengths.split(",") if x]
    if not args.lengths or min(args.lengths) < 1:
        ap.error("--lengths: positive integers, comma-separated")
    return args


def causal_flops(lens):
    return sum(4.0 * s * (s + 1) / 2 * D * HQ for s in lens)


def first_line(e):
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def fa4_varlen_function():
    """FlashAttention-4's flash_attn_varlen_func, or None (with a note)."""
    try:
        from flash_attn.cute import flash_attn_varlen_func
        return flash_attn_varlen_func
    except Exception as e:  # not installed on this machine
        print(f"note: FlashAttention-4 varlen not importable ({type(e).__name__}: {str(e)[:80]}); its rows are n/a",
              file=sys.stderr)
        return None


def md_table(header, rows, left=(0,)):
    """A markdown table with padded columns (readable as plain text too); columns in `left`
    left-aligned, the others right-aligned."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w[i]) if i in left else c.rjust(w[i]) for i, c in enumerate(r)) + " |"
    print(line(header))
    print("|" + "|".join(":" + "-" * (x + 1) if i in left else "-" * (x + 1) + ":" for i, x in enumerate(w)) + "|")
    for r in cells[1:]:
        print(line(r))


def main():
    args = parse_args()  # (--help ends here, before torch is imported)
    global torch, F, SDPBackend, sdpa_kernel
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench import fa4_function, input_sets, median_ms_pair, sm_clock_mhz
    from capi import check, load_lib
    from bench_modifiers import make_problems, runner
    # The refused enable_gqa probes and the backend-restricted calls would print torch's own
    # diagnostics; each refusal is reported once below as a note instead.
    logging.getLogger("torch.nested._internal.sdpa").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*has been runtime disabled")

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    lib = load_lib(args.lib)
    fa4 = fa4_function()
    fa4v = fa4_varlen_function()
    stream = torch.cuda.current_stream().cuda_stream
    idx = list(range(args.sets))
    failures = 0
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, runs {args.runs} (median), "
          f"warm-up {args.warmup}, {args.sets} rotated input sets; {args.dtype}, D {D}, Hq {HQ} / Hkv {HKV}, causal")

    def ok(err):
        return err is not None and err == err and err < tol

    def max_err(a, b):
        return (a.float() - b.float()).abs().max().item()

    def cu_tensor(lens):
        cu = [0]
        for s in lens:
            cu.append(cu[-1] + s)
        return cu, torch.tensor(cu, device="cuda", dtype=torch.int32)

    def varlen_setup(cu_dev, total):
        def setup(p):
            for t in (p.q, p.k, p.v, p.o):  # packed [total, heads, d]: one "batch" of total rows
                t.stride_batch = 0
            p.cu_seqlens_q = p.cu_seqlens_k = cu_dev.data_ptr()
            p.total_q = p.total_k = total
        return setup

    def planned_spec(problem):
        spec = ctypes.create_string_buffer(512)
        check(lib, lib.flashgen_plan(ctypes.byref(problem), 0, spec, 512), "plan")
        s = spec.value.decode()
        if "varlen=1" not in s and problem.cu_seqlens_q:
            print(f"  warning: the planned spec has no varlen=1 ({s}): does this build's flashgen_problem end with "
                  f"cu_seqlens_q .. total_k (bench/capi.py's Problem does)?", file=sys.stderr)
        return s

    def reference(q, k, v, cu):
        """Per-sequence dense SDPA over the packed slices: [total, Hq, D]."""
        ref = torch.empty_like(q)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            for b in range(len(cu) - 1):
                s, e = cu[b], cu[b + 1]
                if s == e:
                    continue
                r = F.scaled_dot_product_attention(*(x[s:e].unsqueeze(0).transpose(1, 2) for x in (q, k, v)),
                                                   is_causal=True, enable_gqa=HQ != HKV)
                ref[s:e] = r.transpose(1, 2)[0]
        return ref

    def check_ours(fn, o, ref, what):
        """Runs ours on set 0 (output poisoned first); max |o - ref|."""
        nonlocal failures
        o.fill_(float("nan"))
        try:
            fn(0)
            torch.cuda.synchronize()
            err = max_err(o, ref)
        except RuntimeError as e:
            print(f"  {what}: {first_line(e)}", flush=True)
            err = None
        if not ok(err):
            failures += 1
            print(f"  {what}: MISMATCH, max|ours-ref| {err} (tolerance {tol}); not timed", flush=True)
        return err

    def probe(fn, to_packed, ref, what):
        """Calls a peer on set 0 (compiling its kernel); (max |out - ref| or None, note)."""
        try:
            out = fn(0)
            out = out[0] if isinstance(out, tuple) else out
            torch.cuda.synchronize()
            err = max_err(to_packed(out), ref)
        except Exception as e:  # refused (backend, shape, GQA) or not available
            print(f"  note: {what} n/a: {first_line(e)}", file=sys.stderr, flush=True)
            return None, f"n/a: {first_line(e)[:60]}"
        if not ok(err):
            print(f"  note: {what} max|x-ref| {err:.2e} over the tolerance; not timed", file=sys.stderr, flush=True)
        return err, ""

    def time_all(fns):
        """Medians of the fns taking turns (None where a function fails: the others are then timed alone)."""
        if not fns:
            return []
        try:
            return median_ms_pair(fns, idx, args.warmup, args.runs)
        except Exception as e:
            print(f"  note: {type(e).__name__}: {first_line(e)}; timing one by one", file=sys.stderr)
        out = []
        for fn in fns:
            try:
                out.append(median_ms_pair([fn], idx, args.warmup, args.runs)[0])
            except Exception as e:
                print(f"  note: {first_line(e)}", file=sys.stderr)
                out.append(None)
        return out

    ms = lambda t: f"{t:.3f}" if t else "n/a"
    tf = lambda fl, t: f"{fl / (t * 1e-3) / 1e12:.1f}" if t else "n/a"
    er = lambda e: f"{e:.2e}" if e is not None else "n/a"

    # ---------------------------------------------------------------- (a) ragged set
    lens = args.lengths
    B, T, Smax = len(lens), sum(lens), max(lens)
    cu, cu_dev = cu_tensor(lens)
    offsets = cu_dev.to(torch.int64)  # the nested tensors' offsets (SDPA converts them to int32 per call)
    flops = causal_flops(lens)
    print(f"\n(a) ragged set: {B} sequences, lengths {lens}; total {T} tokens, max {Smax}")
    print(f"    FLOPs = sum over sequences of 4 * S*(S+1)/2 * D * Hq = {flops / 1e12:.3f} TFLOP")
    sets = [tuple(x[0] for x in s) for s in input_sets(args.sets, 1, T, T, HQ, HKV, D, dtype)]  # [T, H, D] each
    ours_ps = make_problems(lib, sets, B, Smax, HQ, HKV, D, dtype, MASK, varlen_setup(cu_dev, T))
    spec = planned_spec(ours_ps[0])
    ours = runner(lib, ours_ps, stream)
    q0, k0, v0, o0 = sets[0]
    ref = reference(q0, k0, v0, cu)
    ours_err = check_ours(ours, o0, ref, "ours varlen")
    print(f"  ours: {spec}; max|ours-ref| {er(ours_err)}", flush=True)

    # Peers: (name, fn, to_packed, note)
    peers = []

    def jagged(x):  # packed [T, H, D] -> nested [B, H, j, D], a view of x
        return torch.nested.nested_tensor_from_jagged(x, offsets, min_seqlen=min(lens),
                                                      max_seqlen=Smax).transpose(1, 2)

    jag = [tuple(jagged(x) for x in s[:3]) for s in sets]
    jag_x = None  # K/V expanded to HQ heads, made when the jagged path refuses GQA
    unjag = lambda out: out.transpose(1, 2).values()
    for bname, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        def sdpa_gqa(i, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(*jag[i], is_causal=True, enable_gqa=True)
        err, note = probe(sdpa_gqa, unjag, ref, f"SDPA jagged {bname} (enable_gqa)")
        fn, note = sdpa_gqa, "enable_gqa=True"
        if not ok(err):
            if jag_x is None:
                jag_x = [(jq, jagged(k.repeat_interleave(HQ // HKV, dim=1)),
                          jagged(v.repeat_interleave(HQ // HKV, dim=1))) for (jq, _, _), (_, k, v, _) in zip(jag, sets)]

            def sdpa_x(i, backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(*jag_x[i], is_causal=True)
            err, note = probe(sdpa_x, unjag, ref, f"SDPA jagged {bname} (K/V expanded)")
            fn, note = sdpa_x, note or f"K/V expanded to {HQ} heads (jagged SDPA refused GQA)"
        peers.append((f"SDPA jagged ({bname})", fn if ok(err) else None, err, note))
    if fa4v is not None:
        def fa4_call(i):
            q, k, v, _ = sets[i]
            return fa4v(q, k, v, cu_seqlens_q=cu_dev, cu_seqlens_k=cu_dev, max_seqlen_q=Smax, max_seqlen_k=Smax,
                        causal=True)
        err, note = probe(fa4_call, lambda o: o, ref, "FA4 varlen")
        peers.append(("FA4 flash_attn_varlen_func", fa4_call if ok(err) else None, err, note))
    else:
        peers.append(("FA4 flash_attn_varlen_func", None, None, "n/a: flash_attn.cute does not import"))

    fns = ([ours] if ok(ours_err) else []) + [p[1] for p in peers if p[1] is not None]
    times = iter(time_all(fns))
    t_ours = next(times) if ok(ours_err) else None
    clock = sm_clock_mhz()
    t_peers = [next(times) if p[1] is not None else None for p in peers]
    rows = [["libflashgen varlen", ms(t_ours) if ok(ours_err) else "MISMATCH", tf(flops, t_ours), "1.00",
             er(ours_err), "mask causal (bottom-right), flashgen_forward"]]
    for (name, _, err, note), t in zip(peers, t_peers):
        ratio = f"{t / t_ours:.2f}" if t and t_ours else "n/a"
        rows.append([name, ms(t), tf(flops, t), ratio, er(err), note])
    print()
    md_table(["system", "ms", "TFLOP/s", "ours/x", "max abs err", "note"], rows, left=(0, 5))
    print(f"\nragged: {B} sequences, total {T}, max {Smax}; FLOPs = sum 4*S*(S+1)/2*D*Hq = "
          f"{flops / 1e12:.3f} TFLOP; ours/x = x's time / ours; max abs err against per-sequence dense SDPA; "
          f"SM clock after timing {clock if clock else 'n/a'} MHz; ours: {spec}")
    del sets, jag, jag_x, ref, ours_ps, peers, fns, q0, k0, v0, o0
    torch.cuda.empty_cache()

    # ---------------------------------------------------------------- (b) equal work
    if args.equal:
        B, S = (int(x) for x in args.equal.lower().split("x"))
        T = B * S
        cu, cu_dev = cu_tensor([S] * B)
        flops = causal_flops([S] * B)
        print(f"\n(b) equal work: {B} sequences of {S} as a packed problem against our dense kernel with batch {B} "
              f"(same tensors)", flush=True)
        sets = input_sets(args.sets, B, S, S, HQ, HKV, D, dtype)  # [B, S, H, D] = packed [T, H, D]
        dense_ps = make_problems(lib, sets, B, S, HQ, HKV, D, dtype, MASK, lambda p: None)
        var_ps = make_problems(lib, sets, B, S, HQ, HKV, D, dtype, MASK, varlen_setup(cu_dev, T))
        dense, var = runner(lib, dense_ps, stream), runner(lib, var_ps, stream)
        spec_d, spec_v = planned_spec(dense_ps[0]), planned_spec(var_ps[0])
        q0, k0, v0, o0 = sets[0]
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            ref = F.scaled_dot_product_attention(q0.transpose(1, 2), k0.transpose(1, 2), v0.transpose(1, 2),
                                                 is_causal=True, enable_gqa=HQ != HKV).transpose(1, 2)
        err_v = check_ours(var, o0, ref, "ours varlen")
        o_var = o0.clone()
        err_d = check_ours(dense, o0, ref, "ours dense")
        diff = max_err(o_var, o0)
        del o_var
        fns = [var, dense] if ok(err_v) and ok(err_d) else []
        fa4_ok = False
        if fns and fa4 is not None and fa4v is not None:
            def fa4_var(i):
                q, k, v, _ = sets[i]
                return fa4v(q.view(T, HQ, D), k.view(T, HKV, D), v.view(T, HKV, D), cu_seqlens_q=cu_dev,
                            cu_seqlens_k=cu_dev, max_seqlen_q=S, max_seqlen_k=S, causal=True)

            def fa4_dense(i):
                return fa4(*sets[i][:3], causal=True)
            e1, _ = probe(fa4_var, lambda o: o.view(B, S, HQ, D), ref, "FA4 varlen")
            e2, _ = probe(fa4_dense, lambda o: o, ref, "FA4 dense")
            if ok(e1) and ok(e2):
                fns += [fa4_var, fa4_dense]
                fa4_ok = True
        t = time_all(fns)
        tv, td = (t[0], t[1]) if len(t) >= 2 else (None, None)
        ratio = tv / td if tv and td else None
        fa4_ratio = f"{t[2] / t[3]:.3f}" if fa4_ok and t[2] and t[3] else "n/a"
        print()
        md_table(["set", "varlen ms", "dense ms", "varlen/dense", "varlen TFLOP/s", "dense TFLOP/s",
                  "FA4 varlen/dense", "max abs(varlen-dense)", "max abs err"],
                 [[f"{B} x {S}", ms(tv) if ok(err_v) else "MISMATCH", ms(td) if ok(err_d) else "MISMATCH",
                   f"{ratio:.3f}" if ratio else "n/a", tf(flops, tv), tf(flops, td), fa4_ratio, er(diff),
                   er(err_v)]])
        verdict = "n/a" if ratio is None else ("within" if ratio <= 1.05 else "NOT within")
        print(f"\nequal work: varlen/dense {f'{ratio:.3f}' if ratio else 'n/a'}: {verdict} the 5% target; "
              f"FLOPs = {B} * 4*S*(S+1)/2*D*Hq = {flops / 1e12:.3f} TFLOP; varlen {spec_v}; dense {spec_d}")
    print(f"output mismatches (ours): {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
