"""One dense forward under Nsight Compute: ours (libflashgen's C ABI, ctypes),
FlashAttention-4 (flash_attn.cute.flash_attn_func) or PyTorch SDPA's flash backend
(FlashAttention-2, the mma.sync peer of our m16n8k16 kernel), on one shape of bench.py's
list, after warm-up calls outside the profiled range. The profiled call runs
inside the NVTX range "prof" (ncu --nvtx --nvtx-include "prof/"), so the
warm-up calls, the first call's compilation and any other kernels of the
process stay out of the report.

  python3 bench/ncu_dense.py --system ours|fa4|flash --shape 3 --dtype bf16 --mask none [--lib PATH] [--spec SPEC]

--spec runs that kernel spec string (flashgen_launch_spec) instead of the
planned one, e.g. another tile. Prints the max |ours - SDPA| of the warm-up call
(a profile of a wrong kernel is worth nothing).
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import SHAPES, input_sets  # noqa: E402
from capi import check, default_library, load_lib, problem_from_tensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["ours", "fa4", "flash"], required=True)
    ap.add_argument("--shape", type=int, required=True, help=f"index into bench.py's shapes (0-{len(SHAPES) - 1})")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="bf16")
    ap.add_argument("--mask", choices=["none", "causal"], default="none")
    ap.add_argument("--lib", default="", help="libflashgen (default: the package's, else build/libflashgen.so)")
    ap.add_argument("--spec", default="", help="a kernel spec to launch instead of the planned one (ours)")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if not 0 <= args.shape < len(SHAPES):
        raise SystemExit(f"ncu_dense.py: --shape {args.shape} is not an index into the {len(SHAPES)} shapes")
    B, Hq, Hkv, S, D = SHAPES[args.shape]
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    causal = args.mask == "causal"
    q, k, v, o = input_sets(1, B, S, S, Hq, Hkv, D, dtype)[0]
    stream = torch.cuda.current_stream().cuda_stream
    if args.system == "ours":
        repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        lib = load_lib(args.lib or default_library(repo))
        prob = problem_from_tensors(q, k, v, o, mask="causaltl" if causal else "none")
        if args.spec:
            def call():
                check(lib, lib.flashgen_launch_spec(args.spec.encode(), ctypes.byref(prob), stream), "launch_spec")
        else:
            def call():
                check(lib, lib.flashgen_forward(ctypes.byref(prob), stream), "forward")
    elif args.system == "flash":
        def call():  # SDPA takes (B, H, S, D): views of the (B, S, H, D) inputs, its own output
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal, enable_gqa=(Hq != Hkv)).transpose(1, 2)
    else:
        from flash_attn.cute import flash_attn_func

        def call():
            return flash_attn_func(q, k, v, causal=causal)  # its own output (and LSE), compared below
    o.fill_(float("nan"))
    out = None
    for _ in range(args.warmup):
        out = call()
    torch.cuda.synchronize()
    if args.system == "ours":
        out = o
    elif isinstance(out, tuple):  # FlashAttention-4 returns (out, lse); SDPA its output
        out = out[0]
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=causal, enable_gqa=(Hq != Hkv)).transpose(1, 2)
    err = (out.float() - ref.float()).abs().max().item()
    print(f"ncu_dense.py: {args.system} B{B} H{Hq}/{Hkv} S{S} D{D} {args.dtype} {args.mask}: "
          f"max |out - SDPA| {err:.2e}", flush=True)
    torch.cuda.nvtx.range_push("prof")
    call()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
