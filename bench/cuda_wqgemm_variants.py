#!/usr/bin/env python3
"""The weight-only GEMM's kernel settings side by side in one process
(issue 17, jit/emit_nvptx_wqmma.c): y = x @ W with W [K, N] a constant
quantized "int4" (signed, group --group along K) or "int8" (per output
channel), x bf16 [M, K] with M symbolic, compiled once per setting of
TJ_CUDA_WQGEMM (--variants; "" is the default) and our bf16 GEMM (x @ W
bf16) beside them. Each setting gets a context of its own (the variable
is read when a context is made). Run it with TJ_CACHE_DIR= (no disk
cache), so that no kernel comes from another build's cache.

Timing as bench/cuda_wqgemm_torch.py: CUDA events over back-to-back
calls with out=, median of 5 means of --iters calls and the spread (max
- min); that includes the Python call (~7 us a call on the GPU machine),
so a kernel shorter than that shows the host's time. --calls N instead
runs each case N times with no timing, in a fixed order printed to
stderr, for ncu's per-kernel durations (ncu --metrics
gpu__time_duration.sum --cache-control none --clock-control none).

    PYTHONPATH=python python3 bench/cuda_wqgemm_variants.py \
        --variants "" split1 split8 --shapes 4096,4096 --ms 1,16
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402


def compile_quant(w, fmt, group, ctx):
    k, n = w.shape
    g = tj.Graph("wq_" + fmt, context=ctx)
    x = g.input("x", "bf16", ["M", k])
    g.output(g.matmul(x, g.constant(w, dtype="bf16")), "y")
    return tj.compile(tj.quantize_weights(g, fmt, group_size=group), "cuda")


def compile_bf16(n, k):
    g = tj.Graph("gemm_bf16")
    x = g.input("x", "bf16", ["M", k])
    g.output(g.matmul(x, g.input("w", "bf16", [k, n])), "y")
    return tj.compile(g, "cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="*", default=[""])
    ap.add_argument("--fmts", default="int4,int8")
    ap.add_argument("--shapes", nargs="*", default=["4096,4096", "11008,4096"],
                    help="N,K")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--calls", type=int, default=0,
                    help="run each case this many times untimed (for ncu)")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    ms = [int(v) for v in args.ms.split(",")]
    fmts = args.fmts.split(",")
    print(f"{'N,K':>11s} {'M':>3s} {'case':>14s} {'ms':>8s} {'spread':>7s} "
          f"{'GB/s':>6s} {'/bf16':>6s}", flush=True)
    for shape in args.shapes:
        n, k = (int(v) for v in shape.split(","))
        w = rng.standard_normal((k, n), dtype=np.float32) * 0.05
        wt = torch.from_numpy(w).cuda()
        wkn = wt.bfloat16()
        exes = {}
        for v in args.variants:
            if v:
                os.environ["TJ_CUDA_WQGEMM"] = v
            else:
                os.environ.pop("TJ_CUDA_WQGEMM", None)
            ctx = tj.Context()  # reads the variable
            for fmt in fmts:
                exes[(fmt, v)] = compile_quant(w, fmt, args.group, ctx)
        os.environ.pop("TJ_CUDA_WQGEMM", None)
        if not args.no_bf16:
            exes[("bf16", "")] = compile_bf16(n, k)
        wbytes = {"int4": k * n / 2, "int8": k * n, "bf16": k * n * 2}
        for m in ms:
            xb = torch.randn((m, k), device="cuda").bfloat16()
            want = xb.float() @ wt
            base = None
            order = sorted(exes, key=lambda c: c[0] == "bf16")
            for key in reversed(order) if not args.calls else order:
                fmt, v = key
                fa = (xb, wkn) if fmt == "bf16" else (xb,)
                y = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
                exes[key](*fa, out=y)
                torch.cuda.synchronize()
                cos = torch.nn.functional.cosine_similarity(
                    y.float().flatten(), want.flatten(), dim=0).item()
                assert cos >= 0.99, (key, m, cos)
                name = f"{fmt}:{v or 'default'}"
                if args.calls:
                    print(f"# case {shape} M {m} {name}: 1 + {args.calls} "
                          f"calls", file=sys.stderr, flush=True)
                    for _ in range(args.calls):
                        exes[key](*fa, out=y)
                    torch.cuda.synchronize()
                    continue
                med, lo, hi = cuda_time_ms(lambda: exes[key](*fa, out=y),
                                           args.iters)
                if fmt == "bf16":
                    base = med
                gbs = wbytes[fmt] / (med * 1e-3) * 1e-9
                print(f"{shape:>11s} {m:3d} {name:>14s} {med:8.4f} "
                      f"{hi - lo:7.4f} {gbs:6.0f} "
                      f"{(base / med) if base else float('nan'):6.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
