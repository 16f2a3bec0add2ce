#!/usr/bin/env python3
"""Paged KV cache: libflashgen on a paged cache against itself on a contiguous cache
holding the same K/V values, and FlashAttention-4 (flash_attn.cute) paged and
contiguous, on the same inputs (bf16, D 128, GQA Hq 32 / Hkv 8), one process.

Layout: K and V [num_pages, page_size, 8, 128], pages shuffled (a random
permutation of the page ids: a sequence's pages are neither contiguous nor in
order; --order sequential lays them out in order instead), int32 page_table
[batch, ceil(seqlen_k / page_size)]; key j of sequence b is slot j % page_size of
page page_table[b, j / page_size]. --spare (default
1/8) more pages than the sequences use are allocated and filled with NaN, as is
every slot no sequence uses. The contiguous cache is [batch, seqlen_k, 8, 128]
with the same values.

(a) Paged decode (--decode, default 8x16384: batch 8, 16384 keys each; query rows
    --decode-q, default 1 and 4, the 4-row one causal bottom-right): ours through
    flashgen_decode (split-KV, splits chosen by the library, a caller workspace) on
    the paged and on the contiguous problem; FA4 flash_attn_varlen_func(q, k, v,
    page_table=, seqused_k=, max_seqlen_k=) and flash_attn_func on the contiguous
    cache. Reported: us, K/V bandwidth = bytes of K and V read (2 * B * Sk * Hkv *
    D * 2 B; the page table, at most 4 B per key, not counted) / time, and
    paged/contig (time ratio, > 1: paging costs). Targets: page_size >= 16 within
    1.10 of contiguous, page_size 1 within 1.30.
(b) Paged chunked prefill (--prefill, default 4x8192+2048: batch 4, 8192 cached keys
    and 2048 new query rows per sequence, so seqlen_q 2048, seqlen_k 10240, causal
    bottom-right): ours through flashgen_forward, paged and contiguous; FA4 as in
    (a) with causal=True. FLOPs = 4 * D * Hq * sum over sequences and query rows i
    of the keys row i sees (Sk - Sq + i + 1) = 4 * D * Hq * B * (Sq * (Sk - Sq) +
    Sq * (Sq + 1) / 2); TFLOP/s = FLOPs / median time.
Page sizes --page-sizes (default 1,16,64,256); FA4 is n/a (with its reason) where
it refuses a page size. (FA4 4.0.0b36 on sm_90 loads pages by TMA only when
page_size equals its key tile, 128 at D 128, and through cp.async otherwise: add
128 to --page-sizes to see that path.)

(c) Correctness before timing, on the first input set of every page size: ours
    contiguous and ours paged (O poisoned with NaN before each) against a float32
    PyTorch reference (SDPA, math backend, per sequence, on the contiguous K/V, with
    an explicit boolean mask for bottom-right causal), and paged against contiguous;
    then a ragged guard of the paged path alone: seqused_k set to lengths that end
    inside pages, the slots past them poisoned with NaN, the table rows padded
    (page_table_stride + 3) and their entries past each sequence's pages pointed at
    a NaN page, against the reference over each sequence's first seqused_k keys (the
    slots are restored afterwards). max |x - ref| < 2e-2 (bf16; 4e-3 f16) or the
    system is not timed (ours: exit status 1). FA4's output is checked the same way
    (full lengths only) and left out of the timing if over the tolerance.
Timing: bench.py's method (median of --runs event-timed calls after a spin-up, the
systems taking turns call by call, each call behind a spin kernel, inputs rotated
over --sets independent random sets, each set's K/V larger than L2).

--baseline OTHER/libflashgen.so times that build's paged path in the same loop (column
"base", ratio paged/base < 1: ours faster): the clock moves the prefill rows by up to
10 % from call to call, a build beside ours in one loop does not.

usage: bench_paged.py --lib build/libflashgen.so [--runs 30] [--warmup 5] [--sets 3]
                      [--page-sizes 1,16,64,256] [--decode 8x16384] [--decode-q 1,4]
                      [--prefill 4x8192+2048] [--spare 0.125] [--dtype bf16] [--seed 0]
                      [--baseline OTHER/libflashgen.so]
"""
import argparse
import ctypes
import inspect
import os
import sys

HQ, HKV, D = 32, 8, 128
MASK_NONE, MASK_CAUSAL_BR = 0, 2  # FLASHGEN_MASK_NONE, FLASHGEN_MASK_CAUSAL_BOTTOM_RIGHT
DECODE_TARGETS = ((16, 1.10), (1, 1.30))  # (smallest page size, largest paged/contig time ratio)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--page-sizes", default="1,16,64,256", help="powers of two in [1, 256], comma-separated")
    ap.add_argument("--decode", default="8x16384", help="(a) BATCHxSEQLEN_K ('' to skip)")
    ap.add_argument("--decode-q", default="1,4", help="(a) query rows per sequence, one table row group each "
                                                      "(more than 1: causal bottom-right)")
    ap.add_argument("--prefill", default="4x8192+2048", help="(b) BATCHxCACHED+CHUNK ('' to skip)")
    ap.add_argument("--spare", type=float, default=0.125,
                    help="unused pages (NaN) allocated beside the used ones, as a fraction of them (at least 1)")
    ap.add_argument("--order", default="shuffled", choices=["shuffled", "sequential"],
                    help="page ids of the table: a random permutation (default), or in order (each sequence's "
                         "pages contiguous in memory, one after the other: the kernel still reads them "
                         "through the table, page by page)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", default="",
                    help="another libflashgen.so (e.g. the commit before a loader change): its paged time joins "
                         "the same loop, call by call, as the 'base' column and paged/base")
    args = ap.parse_args()
    try:
        args.page_sizes = [int(x) for x in args.page_sizes.split(",") if x]
        args.decode_q = [int(x) for x in args.decode_q.split(",") if x]
        args.decode = tuple(int(x) for x in args.decode.lower().split("x")) if args.decode else None
        if args.prefill:
            b, rest = args.prefill.lower().split("x")
            cached, chunk = rest.split("+")
            args.prefill = (int(b), int(cached), int(chunk))
        else:
            args.prefill = None
    except ValueError:
        ap.error("--page-sizes/--decode-q: integers, comma-separated; --decode BxSK; --prefill BxCACHED+CHUNK")
    if not args.page_sizes or any(p < 1 or p > 256 or p & (p - 1) for p in args.page_sizes):
        ap.error("--page-sizes: powers of two in [1, 256]")
    if args.decode is not None and (len(args.decode) != 2 or min(args.decode) < 1 or not args.decode_q or
                                    min(args.decode_q) < 1 or max(args.decode_q) > args.decode[1]):
        ap.error("--decode BxSK with B, SK >= 1 and --decode-q rows in [1, SK]")
    if args.prefill is not None and (args.prefill[0] < 1 or args.prefill[1] < 0 or args.prefill[2] < 1):
        ap.error("--prefill BxCACHED+CHUNK with B, CHUNK >= 1")
    if args.spare < 0:
        ap.error("--spare >= 0")
    return args


def prefill_flops(B, Sq, Sk):
    """Causal bottom-right: query row i (0-based) sees Sk - Sq + i + 1 keys."""
    return 4.0 * D * HQ * B * (Sq * (Sk - Sq) + Sq * (Sq + 1) / 2)


def ragged_lengths(B, Sq, Sk):
    """seqused_k of the ragged guard: lengths in [Sk - Sk/2, Sk - 1] (at least Sq, so every query row
    sees a key; Sk when Sk is 1), the first Sk - 1, most of them ending inside a page."""
    span = max(1, Sk // 2)
    return [max(Sq, min(Sk, Sk - 1 - (b * 2719) % span)) for b in range(B)]


def main():
    args = parse_args()  # (--help ends here, before torch is imported)
    global torch, F, SDPBackend, sdpa_kernel
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench import fa4_function, input_sets, median_ms_pair, sm_clock_mhz
    from capi import Problem, check, load_lib
    from bench_varlen import fa4_varlen_function, first_line, md_table

    torch.manual_seed(args.seed)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    lib = load_lib(args.lib)
    base = load_lib(args.baseline) if args.baseline else None
    for path, L in ((args.lib, lib), (args.baseline, base)):
        if L is not None and not hasattr(L, "flashgen_decode"):
            sys.exit(f"bench_paged.py: {path} has no flashgen_decode (a build older than the decode and paged paths)")
    fa4 = fa4_function()
    fa4v = fa4_varlen_function()
    fa4_paged_note = ""
    if fa4v is not None:
        params = inspect.signature(fa4v).parameters
        missing = [n for n in ("page_table", "seqused_k", "max_seqlen_k") if n not in params]
        if missing:
            fa4_paged_note = f"n/a: flash_attn_varlen_func has no {', '.join(missing)}"
            fa4v = None
        keep = ("q", "k", "v", "max_seqlen_k", "seqused_k", "page_table", "causal")
        print(f"FA4 flash_attn_varlen_func({', '.join(str(p) for n, p in params.items() if n in keep)}, ...)")
    else:
        fa4_paged_note = "n/a: flash_attn.cute does not import"
    props = torch.cuda.get_device_properties(0)
    arch, sms = props.major * 10 + props.minor, props.multi_processor_count
    stream = torch.cuda.current_stream().cuda_stream
    idx = list(range(args.sets))
    failures = 0
    print(f"device {props.name} ({sms} SMs), torch {torch.__version__}, runs {args.runs} (median), warm-up "
          f"{args.warmup}, {args.sets} rotated input sets; {args.dtype}, D {D}, Hq {HQ} / Hkv {HKV}; page sizes "
          f"{args.page_sizes}, pages {args.order}, {args.spare:g} spare pages (NaN)")

    # ------------------------------------------------------------------ helpers
    def ok(err):
        return err is not None and err == err and err < tol

    def max_err(a, b):
        return (a.float() - b.float()).abs().max().item()

    def make_problem(B, Sq, Sk, mask, q, k, v, o, paged=None):
        """A flashgen_problem over dense BSHD q/o and k/v: contiguous [B, Sk, Hkv, D], or with
        paged = (page_table [B, stride] int32, page_size, seqused_k or None) the pages
        [num_pages, page_size, Hkv, D] (stride_batch steps between pages)."""
        p = Problem()
        check(lib, lib.flashgen_problem_init_bshd(ctypes.byref(p), 0 if dtype == torch.float16 else 1, B, Sq, Sk, HQ,
                                                  HKV, D, D, mask, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                  o.data_ptr()), "init")
        if paged is not None:
            table, page_size, seqused = paged
            for t, x in ((p.k, k), (p.v, v)):
                t.stride_batch, t.stride_seq, t.stride_head = x.stride(0), x.stride(1), x.stride(2)
            p.page_table = table.data_ptr()
            p.page_table_stride = table.stride(0)
            p.page_size = page_size
            p.num_pages = k.shape[0]
            p.seqused_k = seqused.data_ptr() if seqused is not None else None
        return p

    def planned_spec(p, use_decode=False):
        """The spec flashgen_forward plans for p; with use_decode a label instead: flashgen_decode runs
        a fwd_split kernel (mma.sync) and a combine, whose specs the C ABI does not return."""
        if use_decode:
            return "flashgen_decode (a fwd_split mma.sync kernel, then the combine)"
        spec = ctypes.create_string_buffer(512)
        check(lib, lib.flashgen_plan(ctypes.byref(p), 0, spec, 512), "plan")
        s = spec.value.decode()
        if p.page_table and "paged=1" not in s:
            print(f"  warning: the planned spec has no paged=1 ({s}): does this build's flashgen_problem end with "
                  f"page_table .. num_pages (bench/capi.py's Problem does)?", file=sys.stderr)
        return s

    def runner(problems, use_decode, L=None):
        """fn(i) running problems[i] through library L (default ours; decode: flashgen_decode with a
        workspace sized for problems[0], allocated once, as a serving engine would; else
        flashgen_forward), and the number of splits."""
        L = L or lib
        if not use_decode:
            return lambda i: check(L, L.flashgen_forward(ctypes.byref(problems[i]), stream), "forward"), None
        ws_bytes, splits = ctypes.c_int64(), ctypes.c_int()
        check(L, L.flashgen_decode_workspace_bytes(ctypes.byref(problems[0]), arch, sms, 0, ctypes.byref(ws_bytes),
                                                   ctypes.byref(splits)), "workspace")
        ws = torch.empty(max(ws_bytes.value, 256), dtype=torch.uint8, device="cuda")

        def run(i):
            check(L, L.flashgen_decode(ctypes.byref(problems[i]), 0, ws.data_ptr(), ws_bytes.value, stream), "decode")
        return run, splits.value

    def reference(q, k, v, lens, causal):
        """float32 [B, Sq, Hq, D]: per sequence b, SDPA (math backend, float32) of q[b] over the first
        lens[b] keys of the contiguous k/v; causal: bottom-right, as an explicit boolean mask."""
        B, Sq = q.shape[:2]
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        with sdpa_kernel([SDPBackend.MATH]):
            for b in range(B):
                L = lens[b]
                qb, kb, vb = (x.transpose(0, 1).float().unsqueeze(0) for x in (q[b], k[b, :L], v[b, :L]))
                mask = torch.ones(Sq, L, dtype=torch.bool, device=q.device).tril(L - Sq) if causal else None
                out[b] = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, enable_gqa=True)[0].transpose(0, 1)
        return out

    def paged_cache(kc, vc, page_size):
        """The pages of contiguous kc/vc [B, Sk, Hkv, D]: (kp, vp, table, spare) with kp/vp [num_pages,
        page_size, Hkv, D] (unused pages and slots NaN), table int32 [B, ceil(Sk / page_size)] of
        page ids (shuffled, or in order with --order sequential), spare the ids of the unused pages."""
        B, Sk = kc.shape[:2]
        n = -(-Sk // page_size)
        used = B * n
        num_pages = used + max(1, int(used * args.spare))
        perm = (torch.randperm(num_pages, device="cuda") if args.order == "shuffled"
                else torch.arange(num_pages, device="cuda"))
        table = perm[:used].view(B, n).to(torch.int32).contiguous()
        out = []
        for x in (kc, vc):
            if n * page_size != Sk:  # the last page's tail: NaN
                x = torch.cat([x, x.new_full((B, n * page_size - Sk, HKV, D), float("nan"))], dim=1)
            xp = torch.full((num_pages, page_size, HKV, D), float("nan"), dtype=x.dtype, device="cuda")
            xp[perm[:used]] = x.reshape(used, page_size, HKV, D)
            out.append(xp)
        return out[0], out[1], table, perm[used:]

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

    def run_ours(fn, o, ref, what):
        """Ours on set 0 with O poisoned first: (max |o - ref| or None, o's copy or None)."""
        nonlocal failures
        o.fill_(float("nan"))
        try:
            fn(0)
            torch.cuda.synchronize()
            err, out = max_err(o, ref), o.clone()
        except RuntimeError as e:
            print(f"  {what}: {first_line(e)}", flush=True)
            err, out = None, None
        if not ok(err):
            failures += 1
            print(f"  {what}: MISMATCH, max|ours-ref| {err} (tolerance {tol}); not timed", flush=True)
        return err, out

    def probe(fn, ref, what):
        """A peer on set 0 (compiling its kernel): (max |out - ref| or None, note)."""
        try:
            out = fn(0)
            out = out[0] if isinstance(out, tuple) else out
            torch.cuda.synchronize()
            err = max_err(out, ref)
        except Exception as e:  # refused (page size, shape) or not available
            print(f"  note: {what} n/a: {first_line(e)}", file=sys.stderr, flush=True)
            return None, f"{what} n/a: {first_line(e)[:70]}"
        if not ok(err):
            print(f"  note: {what} max|x-ref| {err:.2e} over the tolerance; not timed", file=sys.stderr, flush=True)
            return err, f"{what} max|x-ref| {err:.1e}: not timed"
        return err, ""

    ms = lambda t: f"{t:.3f}" if t else "n/a"
    us = lambda t: f"{t * 1e3:.1f}" if t else "n/a"
    er = lambda e: f"{e:.2e}" if e is not None else "n/a"
    ratio = lambda a, b: f"{a / b:.3f}" if a and b else "n/a"

    def ragged(page_size, cache, set0, lens, ref, B, Sq, Sk, mask, use_decode):
        """The ragged guard on set 0's pages (see the module docstring, (c)): seqused_k = lens, the
        slots past each length in its last page NaN, the table rows padded by 3 and every entry past a
        sequence's pages pointing at a NaN page; the slots are restored afterwards. max |o - ref| or None."""
        q, kc, vc, o = set0
        kp, vp, table, spare = cache
        n = table.shape[1]
        rows = torch.full((B, n + 3), int(spare[0]), dtype=torch.int32, device="cuda")
        tails = []  # (page, first slot past the length, end of its keys, sequence, length)
        for b, L in enumerate(lens):
            m = -(-L // page_size)  # the pages sequence b uses
            rows[b, :m] = table[b, :m]
            if L % page_size:
                # (the page's slots s0.. hold keys L.. up to Sk; slots past Sk are NaN already)
                s0 = L % page_size
                tails.append((int(table[b, L // page_size]), s0, min(page_size, s0 + Sk - L), b, L))
        for page, s0, _, _, _ in tails:
            kp[page, s0:] = float("nan")
            vp[page, s0:] = float("nan")
        seqused = torch.tensor(lens, dtype=torch.int32, device="cuda")
        try:
            p = make_problem(B, Sq, Sk, mask, q, kp, vp, o, (rows, page_size, seqused))
            fn, _ = runner([p], use_decode)
            err, _ = run_ours(fn, o, ref, f"ours paged, seqused_k {lens[:3]}..., page {page_size}")
        finally:
            for page, s0, e, b, L in tails:  # restored from the contiguous cache
                kp[page, s0:e] = kc[b, L:L + e - s0]
                vp[page, s0:e] = vc[b, L:L + e - s0]
        return err

    # ------------------------------------------------------------------ one group: a shape, a page size list
    def run_group(B, Sq, Sk, causal, use_decode, label):
        """Times ours paged, ours contiguous, FA4 paged, FA4 contiguous for every page size on one
        shape; returns [(page_size, times dict, (splits paged, contig), notes, SM clock, (ours paged ok,
        ours contig ok))] and the guard's rows."""
        nonlocal failures
        mask = MASK_CAUSAL_BR if causal else MASK_NONE
        sets = input_sets(args.sets, B, Sq, Sk, HQ, HKV, D, dtype)  # (q, k, v, o): random Q/K/V, contiguous
        q0, k0, v0, o0 = sets[0]
        full = [Sk] * B
        lens = ragged_lengths(B, Sq, Sk)
        ref = reference(q0, k0, v0, full, causal)
        ref_ragged = reference(q0, k0, v0, lens, causal)
        contig_ps = [make_problem(B, Sq, Sk, mask, *s) for s in sets]
        spec_c = planned_spec(contig_ps[0], use_decode)
        contig, splits_c = runner(contig_ps, use_decode)
        err_c, o_contig = run_ours(contig, o0, ref, f"{label}: ours contiguous")
        seqused_full = torch.full((B,), Sk, dtype=torch.int32, device="cuda")  # FA4's key counts

        def fa4_contig(i):
            q, k, v, _ = sets[i]
            return fa4(q, k, v, causal=causal)
        err_fc, note_fc = probe(fa4_contig, ref, "FA4 contiguous") if fa4 is not None else (None, "")
        results, guards = [], []
        for page_size in args.page_sizes:
            caches = [paged_cache(s[1], s[2], page_size) for s in sets]  # (kp, vp, table, spare)
            paged_ps = [make_problem(B, Sq, Sk, mask, s[0], c[0], c[1], s[3], (c[2], page_size, None))
                        for s, c in zip(sets, caches)]
            try:
                spec_p = planned_spec(paged_ps[0], use_decode)
                paged, splits_p = runner(paged_ps, use_decode)
            except RuntimeError as e:
                print(f"  {label} page {page_size}: ours paged refused: {first_line(e)}", flush=True)
                spec_p, paged, splits_p = f"refused: {first_line(e)[:80]}", None, None
            if paged is not None:
                err_p, o_paged = run_ours(paged, o0, ref, f"{label}: ours paged, page {page_size}")
                diff = max_err(o_paged, o_contig) if o_paged is not None and o_contig is not None else None
                err_r = ragged(page_size, caches[0], sets[0], lens, ref_ragged, B, Sq, Sk, mask, use_decode)
            else:
                failures += 1
                err_p = diff = err_r = None
            notes = []
            err_bp = None
            if base is not None:
                try:
                    base_paged, _ = runner(paged_ps, use_decode, base)
                    kept = failures  # (a baseline's mismatch is reported, not counted against ours)
                    err_bp, _ = run_ours(base_paged, o0, ref, f"{label}: base paged, page {page_size}")
                    failures = kept
                except RuntimeError as e:
                    print(f"  {label} page {page_size}: base paged refused: {first_line(e)}", flush=True)

            def fa4_paged(i):
                q = sets[i][0]
                kp, vp, table, _ = caches[i]
                return fa4v(q, kp, vp, page_table=table, seqused_k=seqused_full, max_seqlen_k=Sk, causal=causal)
            if fa4v is not None:
                err_fp, note = probe(fa4_paged, ref, "FA4 paged")
            else:
                err_fp, note = None, fa4_paged_note
            notes += [x for x in (note, note_fc) if x]
            names, fns = [], []
            if ok(err_p):
                names.append("paged"), fns.append(paged)
            if ok(err_c):
                names.append("contig"), fns.append(contig)
            if ok(err_bp):
                names.append("base_paged"), fns.append(base_paged)
            if ok(err_fp):
                names.append("fa4_paged"), fns.append(fa4_paged)
            if ok(err_fc):
                names.append("fa4_contig"), fns.append(fa4_contig)
            times = dict(zip(names, time_all(fns)))
            clock = sm_clock_mhz()
            results.append((page_size, times, (splits_p, splits_c), notes, clock, (ok(err_p), ok(err_c))))
            guards.append([label, str(page_size), er(err_c), er(err_p), er(diff), er(err_r), er(err_fp), er(err_fc),
                           "ok" if ok(err_c) and ok(err_p) and ok(err_r) else "MISMATCH"])
            t = times
            print(f"  {label} page {page_size}: ours paged {us(t.get('paged'))} us, contig {us(t.get('contig'))} us "
                  f"(paged/contig {ratio(t.get('paged'), t.get('contig'))}), FA4 paged {us(t.get('fa4_paged'))} us, "
                  f"contig {us(t.get('fa4_contig'))} us; max|ref| paged {er(err_p)} contig {er(err_c)} ragged "
                  f"{er(err_r)}; base paged {us(t.get('base_paged'))} us (paged/base {ratio(t.get('paged'), t.get('base_paged'))}); "
                  f"ours paged: {spec_p}", flush=True)
            del caches, paged_ps, paged
            torch.cuda.empty_cache()
        print(f"  {label}: ours contiguous: {spec_c}", flush=True)
        del sets, contig_ps, ref, ref_ragged, o_contig
        torch.cuda.empty_cache()
        return results, guards

    guard_rows = []
    # ------------------------------------------------------------------ (a) paged decode
    if args.decode is not None:
        B, Sk = args.decode
        for Sq in args.decode_q:
            causal = Sq > 1
            kv_bytes = 2.0 * B * Sk * HKV * D * torch.finfo(dtype).bits / 8
            label = f"decode B{B} Sq{Sq} Sk{Sk}{' causal' if causal else ''}"
            print(f"\n(a) paged decode: B {B}, Sq {Sq}, Sk {Sk}{', causal bottom-right' if causal else ''}; K/V read "
                  f"per call {kv_bytes / 1e6:.1f} MB", flush=True)
            results, guards = run_group(B, Sq, Sk, causal, True, label)
            guard_rows += guards
            rows, notes = [], []
            tbs = lambda t: f"{kv_bytes / (t * 1e-3) / 1e12:.2f}" if t else "n/a"
            for (ps, t, (sp, sc), nts, clock, (ok_p, ok_c)) in results:
                r = t["paged"] / t["contig"] if t.get("paged") and t.get("contig") else None
                limit = next(lim for lo, lim in DECODE_TARGETS if ps >= lo)
                verdict = "n/a" if r is None else (f"<= {limit:.2f} ok" if r <= limit else f"> {limit:.2f} MISSED")
                rows.append([str(ps), us(t.get("paged")) if ok_p else "MISMATCH", tbs(t.get("paged")),
                             us(t.get("contig")) if ok_c else "MISMATCH",
                             tbs(t.get("contig")), ratio(t.get("paged"), t.get("contig")), verdict,
                             us(t.get("fa4_paged")), tbs(t.get("fa4_paged")), us(t.get("fa4_contig")),
                             ratio(t.get("fa4_paged"), t.get("fa4_contig")), ratio(t.get("fa4_paged"), t.get("paged")),
                             f"{sp}/{sc}", us(t.get("base_paged")), ratio(t.get("paged"), t.get("base_paged")),
                             f"{clock:.0f}" if clock else "n/a"])
                notes += [f"page {ps}: {x}" for x in nts]
            print()
            md_table(["page", "ours paged us", "TB/s", "ours contig us", "TB/s", "paged/contig", "target",
                      "FA4 paged us", "TB/s", "FA4 contig us", "FA4 paged/contig", "ours/FA4", "splits p/c", "base us",
                      "paged/base", "MHz"],
                     rows)
            print(f"\n{label}: TB/s = K/V bytes (2*B*Sk*Hkv*D*{torch.finfo(dtype).bits // 8} = {kv_bytes / 1e6:.1f} MB) / "
                  f"median time; paged/contig = ours paged time / ours contiguous time (targets: page >= 16 <= 1.10, "
                  f"page 1 <= 1.30); ours/FA4 = FA4 paged time / ours paged time (> 1: ours faster); MHz: SM clock "
                  f"after timing")
            for n in dict.fromkeys(notes):
                print(f"  note: {n}")

    # ------------------------------------------------------------------ (b) paged chunked prefill
    if args.prefill is not None:
        B, cached, chunk = args.prefill
        Sq, Sk = chunk, cached + chunk
        flops = prefill_flops(B, Sq, Sk)
        label = f"prefill B{B} Sq{Sq} Sk{Sk} causal"
        print(f"\n(b) paged chunked prefill: B {B}, {cached} cached keys + {chunk} new rows (Sq {Sq}, Sk {Sk}), causal "
              f"bottom-right; FLOPs = 4*D*Hq*B*(Sq*(Sk-Sq) + Sq*(Sq+1)/2) = {flops / 1e12:.3f} TFLOP", flush=True)
        results, guards = run_group(B, Sq, Sk, True, False, label)
        guard_rows += guards
        rows, notes = [], []
        tf = lambda t: f"{flops / (t * 1e-3) / 1e12:.1f}" if t else "n/a"
        for (ps, t, _, nts, clock, (ok_p, ok_c)) in results:
            rows.append([str(ps), ms(t.get("paged")) if ok_p else "MISMATCH", tf(t.get("paged")),
                         ms(t.get("contig")) if ok_c else "MISMATCH", tf(t.get("contig")),
                         ratio(t.get("paged"), t.get("contig")), ms(t.get("fa4_paged")), tf(t.get("fa4_paged")),
                         ms(t.get("fa4_contig")), tf(t.get("fa4_contig")),
                         ratio(t.get("fa4_paged"), t.get("fa4_contig")), ratio(t.get("fa4_paged"), t.get("paged")),
                         ms(t.get("base_paged")), ratio(t.get("paged"), t.get("base_paged")),
                         f"{clock:.0f}" if clock else "n/a"])
            notes += [f"page {ps}: {x}" for x in nts]
        print()
        md_table(["page", "ours paged ms", "TFLOP/s", "ours contig ms", "TFLOP/s", "paged/contig", "FA4 paged ms",
                  "TFLOP/s", "FA4 contig ms", "TFLOP/s", "FA4 paged/contig", "ours/FA4", "base ms", "paged/base", "MHz"],
                 rows)
        print(f"\n{label}: TFLOP/s = 4*D*Hq*B*(Sq*(Sk-Sq) + Sq*(Sq+1)/2) / median time ({flops / 1e12:.3f} TFLOP); "
              f"paged/contig = ours paged time / ours contiguous time; ours/FA4 = FA4 paged time / ours paged time")
        for n in dict.fromkeys(notes):
            print(f"  note: {n}")

    # ------------------------------------------------------------------ (c) the guard's numbers
    print("\n(c) correctness (set 0, before timing): max |x - ref| against the float32 reference; |p-c| = max |ours "
          f"paged - ours contiguous|; ragged = ours paged with seqused_k ending inside pages, NaN past it; tolerance "
          f"{tol}")
    md_table(["shape", "page", "ours contig", "ours paged", "|p-c|", "ours ragged", "FA4 paged", "FA4 contig",
              "ours"], guard_rows, left=(0,))
    print(f"output mismatches (ours): {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
