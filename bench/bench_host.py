#!/usr/bin/env python3
"""Host overhead per call (issue 14, "Measure"): the host's wall time of one
attention call on a kernel already in memory, on a tiny problem (default B1 S128
H8 D64 f16), with no synchronization in the timed loop, for

  flashgen.attention(q, k, v)              the package's eager call (allocates O)
  ... out=o / return_lse=True              given output / O and LSE allocated
  flashgen.decode(q1, k, v)                split-KV decode, one query row (its cached workspace)
  flashgen.attention(..., stream=s)        a prepared signature with the stream given
  flashgen.attention(..., bias=b)          the general path (every argument read and checked in Python,
                                           the flat field list, forward()'s plan per call): what a call
                                           with bias, sinks, ALiBi or a first signature costs
  flashgen.bind(q, k, v, out=o) call      a call bound to its tensors (flashgen.bind): the contract of
                                           a prebuilt ctypes struct, from the package
  flashgen prepared call, prebuilt ptrs    the prepared call of a seen signature alone
                                           (_flashgen.PreparedCall.run): nanobind + the library's checks
                                           and launch
  ctypes flashgen_forward, struct per call today's path: a flashgen_problem filled per call from the
                                           tensors' dtype, shapes, strides and pointers, the current
                                           stream read per call (as the package reads it)
  ctypes flashgen_forward, prebuilt        one struct built once: ctypes + the library's own cost
  ctypes flashgen_decode, prebuilt         the same for the decode (caller workspace)
  SDPA flash / cuDNN                       F.scaled_dot_product_attention under sdpa_kernel([backend])
                                           (entered outside the timing) on BHSD views of the same memory
  flashgen.attention, CUDA graph           K calls captured in one torch.cuda.CUDAGraph (out=o);
  SDPA flash, CUDA graph                   host cost per call = replay wall time / K (expected ~0)
  empty call                               the timing loop and a Python call alone (the floor)

Method: every function is called until its kernel is loaded and warm, then
timed in chunks (--chunk calls; a graph row: chunk / K replays): each chunk is
queued behind a spin kernel (torch.cuda._sleep) long enough that the GPU is
still busy when the host finishes the chunk, so no call waits for the GPU and
the launch queue never fills (chunks of 100 calls stay far below its ~1000
entries); the wall time of the chunk's calls (time.perf_counter_ns) is
divided by its calls, and the chunk is redone with a spin twice as long when
the spin had ended before the host's last call (reported as "redone"; a
chunk that outlasts even 8x the spin is kept and its row marked (*): its calls
wait for the GPU, so its time is not host time alone). One repeat is --calls
calls; the methods take turns repeat by repeat (a change of
the host's clock hits them alike); the table gives the median over --repeats
and the min. The first call of each method (cold: a disk-cache read or an
NVRTC compile, synchronized) is printed for information.

usage: bench_host.py [--lib LIBFLASHGEN.so] [--batch 1] [--seqlen 128] [--heads 8] [--head-dim 64]
                     [--dtype f16] [--causal] [--calls 2000] [--repeats 7] [--chunk 100]
                     [--graph-calls 100] [--only attention,ctypes,...] [--json out.json]

--lib: the libflashgen of the ctypes rows (default: the one inside the installed
flashgen package, whose kernels and caches the package then shares; else
build/libflashgen.so).
"""
import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = {  # key: (label, what it times)
    "attention": "flashgen.attention(q, k, v)",
    "attention_out": "flashgen.attention(q, k, v, out=o)",
    "attention_lse": "flashgen.attention(..., return_lse=True)",
    "decode": "flashgen.decode(q1, k, v)",
    "attention_stream": "flashgen.attention(..., out=o, stream=s)",
    "attention_general": "flashgen.attention(..., bias=b, out=o)",
    "bound": "flashgen.bind(q, k, v, out=o) call",
    "native": "flashgen prepared call, prebuilt pointers",
    "ctypes": "ctypes flashgen_forward, struct per call",
    "ctypes_prebuilt": "ctypes flashgen_forward, prebuilt struct",
    "ctypes_decode": "ctypes flashgen_decode, prebuilt struct",
    "sdpa_flash": "SDPA flash",
    "sdpa_cudnn": "SDPA cuDNN",
    "graph": "flashgen.attention, CUDA graph replay",
    "sdpa_graph": "SDPA flash, CUDA graph replay",
    "noop": "empty call (loop + Python call)",
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="", help="libflashgen of the ctypes rows (default: the package's own, else "
                                              "build/libflashgen.so)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seqlen", type=int, default=128, help="seqlen_q = seqlen_k (decode: 1 query row)")
    ap.add_argument("--heads", type=int, default=8, help="query heads")
    ap.add_argument("--heads-kv", type=int, default=0, help="key/value heads (0: --heads)")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--causal", action="store_true", help="causal masks (top-left; decode: bottom-right)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per repeat")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--chunk", type=int, default=100, help="calls per chunk behind one spin kernel")
    ap.add_argument("--graph-calls", type=int, default=100, help="calls captured per CUDA graph (K)")
    ap.add_argument("--only", default="", help="comma-separated rows: " + ",".join(ROWS))
    ap.add_argument("--json", default="", help="also write the results to this file")
    args = ap.parse_args()
    args.heads_kv = args.heads_kv or args.heads
    args.only = [r for r in args.only.split(",") if r]
    bad = [r for r in args.only if r not in ROWS]
    if bad:
        ap.error(f"--only: unknown rows {bad}; known: {', '.join(ROWS)}")
    if min(args.calls, args.repeats, args.chunk, args.graph_calls) < 1:
        ap.error("--calls, --repeats, --chunk and --graph-calls must be positive")
    return args


def first_line(e):
    return (str(e).splitlines() or [type(e).__name__])[0][:140]


class Spin:
    """The spin kernel queued before each chunk (torch.cuda._sleep), `cycles` long;
    grown (doubled) when the GPU finished it before the host finished a chunk."""

    def __init__(self, torch, cycles):
        self.torch = torch
        self.cycles = cycles
        self.redone = 0
        self.event = torch.cuda.Event()

    def chunk(self, fn, n, cycles):
        """(host ns of n calls of fn queued behind a spin of `cycles`, whether the
        spin had ended before the last call returned)."""
        torch = self.torch
        torch.cuda._sleep(cycles)
        self.event.record()  # completes when the spin does
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        t1 = time.perf_counter_ns()
        overtaken = self.event.query()
        torch.cuda.synchronize()
        return t1 - t0, overtaken


def host_ns_per_call(spin, fn, calls, chunk, per_invocation=1, ctx=None, max_doublings=3):
    """(host ns per call over `calls` calls of a function that makes per_invocation
    calls each time (a graph replay: K), in chunks of about `chunk` calls; the
    chunks the spin did not cover even 2**max_doublings times longer: their calls
    wait for the GPU, a synchronization inside them)."""
    per_chunk = max(1, chunk // per_invocation)
    total_ns, done, waited = 0, 0, 0
    with ctx() if ctx is not None else contextlib.nullcontext():
        while done < calls:
            n = min(per_chunk, max(1, (calls - done + per_invocation - 1) // per_invocation))
            cycles = spin.cycles
            for attempt in range(1 + (max_doublings if not waited else 0)):
                ns, overtaken = spin.chunk(fn, n, cycles)
                if not overtaken:
                    spin.cycles = cycles  # (only grows: a longer one was needed)
                    break
                if attempt < max_doublings:
                    spin.redone += 1
                    cycles *= 2
            else:
                waited += 1
            total_ns += ns
            done += n * per_invocation
    return total_ns / done, waited


def main():
    args = parse_args()  # (--help ends here, before torch is imported)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, HERE)
    import capi

    if not torch.cuda.is_available():
        raise SystemExit("bench_host.py: no CUDA device")
    try:
        import flashgen as fg
    except ImportError as e:
        raise SystemExit(f"bench_host.py: the flashgen package does not import ({e}); install it first (`pip install "
                         ".`; bench/run.sh does, offline, through test/python/install_offline.sh)")

    B, S, Hq, Hkv, D = args.batch, args.seqlen, args.heads, args.heads_kv, args.head_dim
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    dev = torch.device("cuda", torch.cuda.current_device())
    causal = "top_left" if args.causal else None
    causal_decode = "bottom_right" if args.causal else None
    q = torch.randn(B, S, Hq, D, device=dev, dtype=dtype)
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype)
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype)
    o = torch.empty_like(q)
    q1 = torch.randn(B, 1, Hq, D, device=dev, dtype=dtype)
    o1 = torch.empty_like(q1)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # BHSD views of the same memory, for SDPA
    gqa = Hq != Hkv
    stream = torch.cuda.current_stream().cuda_stream
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    dev_index = dev.index
    if raw_stream is not None:
        def current_stream():
            return raw_stream(dev_index)
    else:  # older PyTorch: the public API
        def current_stream():
            return torch.cuda.current_stream().cuda_stream

    lib_path = args.lib or capi.default_library(os.path.join(HERE, ".."))
    notes = []
    methods = {}  # key -> (fn, per_invocation, ctx factory)

    def add(key, make):
        """Builds a row's function; a refusal or failure becomes an n/a row with its reason."""
        if args.only and key not in args.only:
            return
        try:
            t0 = time.perf_counter()
            fn, per, ctx = make()
            with ctx() if ctx is not None else contextlib.nullcontext():
                fn()  # the first call: a disk-cache read or a compile, and the memory cache filled
                torch.cuda.synchronize()
                first_ms = (time.perf_counter() - t0) * 1e3
                for _ in range(20):  # warm: every lazy path taken, allocator blocks cached
                    fn()
                torch.cuda.synchronize()
            methods[key] = (fn, per, ctx)
            notes.append(f"{ROWS[key]}: set-up and first call {first_ms:.1f} ms")
        except Exception as e:  # refused (backend, capture) or not available
            methods[key] = None
            notes.append(f"{ROWS[key]}: n/a ({type(e).__name__}: {first_line(e)})")

    # ---- the package ------------------------------------------------------------
    add("attention", lambda: (lambda: fg.attention(q, k, v, causal=causal), 1, None))
    add("attention_out", lambda: (lambda: fg.attention(q, k, v, causal=causal, out=o), 1, None))
    add("attention_lse", lambda: (lambda: fg.attention(q, k, v, causal=causal, return_lse=True), 1, None))
    add("decode", lambda: (lambda: fg.decode(q1, k, v, causal=causal_decode), 1, None))
    stream_now = torch.cuda.current_stream()
    add("bound", lambda: (fg.bind(q, k, v, causal=causal, out=o), 1, None))
    add("attention_stream", lambda: (lambda: fg.attention(q, k, v, causal=causal, out=o, stream=stream_now), 1, None))
    bias = torch.randn(q.shape[0], 1, q.shape[1], k.shape[1], device=q.device)  # (heads broadcast)
    add("attention_general", lambda: (lambda: fg.attention(q, k, v, causal=causal, bias=bias, out=o), 1, None))

    def make_native():
        """The prepared call of the signature of attention(q, k, v, out=o) (_core._prepared), run with
        its pointers prebuilt: nanobind + the library's checks and launch."""
        fg.attention(q, k, v, causal=causal, out=o)
        entry = fg._core._prepared.get(fg._core._dense_key(q, k, v, causal, None, None, None, False, o))
        if not entry:
            raise RuntimeError("the call was not prepared")
        call = entry[0]
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), 0, torch.cuda.current_stream().cuda_stream)
        return (lambda: call.run(*ptrs)), 1, None
    add("native", make_native)

    # ---- today's ctypes path ----------------------------------------------------------
    lib = None
    if not args.only or any(r.startswith("ctypes") for r in args.only):
        try:
            lib = capi.load_lib(lib_path)
        except Exception as e:
            notes.append(f"ctypes rows: n/a ({lib_path}: {first_line(e)})")
    mask = "causaltl" if args.causal else "none"
    if lib is not None:
        forward, decode, check = lib.flashgen_forward, lib.flashgen_decode, capi.check
        by_ref = ctypes.byref

        def per_call():
            p = capi.problem_from_tensors(q, k, v, o, mask)
            check(lib, forward(by_ref(p), current_stream()), "flashgen_forward")
        add("ctypes", lambda: (per_call, 1, None))

        p0 = capi.problem_from_tensors(q, k, v, o, mask)
        p0_ref = by_ref(p0)

        def prebuilt():
            check(lib, forward(p0_ref, stream), "flashgen_forward")
        add("ctypes_prebuilt", lambda: (prebuilt, 1, None))

        def make_ctypes_decode():
            pd = capi.problem_from_tensors(q1, k, v, o1, "causalbr" if args.causal else "none")
            pd_ref = by_ref(pd)
            ws_bytes, splits = ctypes.c_int64(), ctypes.c_int()
            check(lib, lib.flashgen_decode_workspace_bytes(pd_ref, 0, 0, 0, by_ref(ws_bytes), by_ref(splits)),
                  "flashgen_decode_workspace_bytes")
            ws = torch.empty(max(ws_bytes.value, 256), dtype=torch.uint8, device=dev)
            ws_ptr, nbytes = ws.data_ptr(), ws_bytes.value
            notes.append(f"decode: {splits.value} split(s), workspace {nbytes} bytes")

            def run():
                check(lib, decode(pd_ref, 0, ws_ptr, nbytes, stream), "flashgen_decode")
            run.workspace = ws  # kept alive with the function
            return run, 1, None
        add("ctypes_decode", make_ctypes_decode)

    # ---- PyTorch SDPA ---------------------------------------------------------------
    def make_sdpa(backend):
        def run():
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal, enable_gqa=gqa)
        return run, 1, (lambda: sdpa_kernel([backend]))
    add("sdpa_flash", lambda: make_sdpa(SDPBackend.FLASH_ATTENTION))
    add("sdpa_cudnn", lambda: make_sdpa(SDPBackend.CUDNN_ATTENTION))

    # ---- CUDA graphs ------------------------------------------------------------------
    K = args.graph_calls

    def make_graph(call, ctx=None):
        with ctx() if ctx is not None else contextlib.nullcontext():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm on a side stream, as torch.cuda.graphs recommends
                for _ in range(3):
                    call()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(K):
                    call()
        g.replay()
        torch.cuda.synchronize()
        return g.replay, K, None
    add("graph", lambda: make_graph(lambda: fg.attention(q, k, v, causal=causal, out=o)))
    add("sdpa_graph", lambda: make_graph(
        lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal, enable_gqa=gqa),
        lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])))

    add("noop", lambda: ((lambda: None), 1, None))

    # ---- the results are right (ours against SDPA's math backend, in float32) ----------
    failures = 0
    try:
        o.fill_(float("nan"))
        fg.attention(q, k, v, causal=causal, out=o)
        with sdpa_kernel([SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), is_causal=args.causal,
                                                 enable_gqa=gqa).transpose(1, 2)
        err = (o.float() - ref).abs().max().item()
        ok = err == err and err < tol
        notes.append(f"max |flashgen.attention - SDPA math| = {err:.2e} ({'ok' if ok else 'MISMATCH'})")
    except Exception as e:
        ok = False
        notes.append(f"flashgen.attention against SDPA math: {type(e).__name__}: {first_line(e)}")
    failures += 0 if ok else 1

    # ---- timing: the rows take turns repeat by repeat -----------------------------------
    timed = {key: m for key, m in methods.items() if m is not None}
    spin = Spin(torch, cycles=args.chunk * 100_000)  # ~50 us of GPU per call at 2 GHz; doubled as needed
    per_repeat = {key: [] for key in timed}
    waited = {key: 0 for key in timed}
    for _ in range(args.repeats):
        for key, (fn, per, ctx) in timed.items():
            gc.collect()
            ns, w = host_ns_per_call(spin, fn, args.calls, args.chunk, per, ctx)
            per_repeat[key].append(ns / 1e3)
            waited[key] += w
    torch.cuda.synchronize()
    for key, w in waited.items():
        if w:
            notes.append(f"WARNING: {ROWS[key]}: {w} chunks outlasted a spin 8x the one that covered the others: "
                         "its calls wait for the GPU (a synchronization inside); its time includes GPU time (*)")

    # ---- report -----------------------------------------------------------------------
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    header = (f"device {torch.cuda.get_device_name()}, CPU {cpu or platform.processor()}, Python "
              f"{platform.python_version()}, torch {torch.__version__}, flashgen {fg.__version__}")
    problem = (f"B{B} S{S} H{Hq}/{Hkv} D{D} {args.dtype} {'causal' if args.causal else 'no mask'} (decode: 1 query "
               f"row, {S} keys)")
    print(header)
    print(f"host overhead per call: {problem}; {args.calls} calls x {args.repeats} repeats (median), chunks of "
          f"{args.chunk} behind a spin kernel (spin {spin.cycles} cycles at the end, {spin.redone} chunks redone), "
          f"CUDA graphs of {K} calls; ctypes library {lib_path if lib is not None else 'n/a'}")
    for n in notes:
        print(f"  {n}")
    ref_key = "ctypes" if per_repeat.get("ctypes") else None
    ref_us = statistics.median(per_repeat[ref_key]) if ref_key else None
    print()
    print(f"{'method':44} {'us/call':>8} {'min':>8} {'max':>8} {'/ctypes':>8}")
    rows = []
    for key, label in ROWS.items():
        if key not in methods:
            continue
        if methods[key] is None:
            print(f"{label:44} {'n/a':>8}")
            rows.append({"key": key, "method": label, "us_per_call": None})
            continue
        xs = per_repeat[key]
        med = statistics.median(xs)
        ratio = f"{med / ref_us:8.2f}" if ref_us else f"{'n/a':>8}"
        print(f"{label + (' (*)' if waited[key] else ''):44} {med:8.2f} {min(xs):8.2f} {max(xs):8.2f} {ratio}")
        rows.append({"key": key, "method": label, "us_per_call": med, "us_min": min(xs), "us_max": max(xs),
                     "us_per_repeat": xs, "calls_per_invocation": timed[key][1], "chunks_waited": waited[key]})
    print(f"\nus/call: host wall time per call (median over repeats); /ctypes: over '{ROWS['ctypes']}'; "
          f"output mismatches: {failures}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "problem": problem, "calls": args.calls, "repeats": args.repeats,
                       "chunk": args.chunk, "graph_calls": K, "spin_cycles": spin.cycles,
                       "chunks_redone": spin.redone, "ctypes_library": lib_path if lib is not None else None,
                       "notes": notes, "rows": rows}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
