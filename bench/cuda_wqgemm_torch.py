#!/usr/bin/env python3
"""Weight-only quantized GEMM on the GPU for decode (issue 17, qfold on
CUDA, jit/emit_nvptx_wqgemm.c): y = x @ W with W [K, N] a constant, at M =
1, 4, 16, in the same run:
  int4    ours: W quantized by tensorjit.quantize_weights("int4", group
          --group (128): signed, per group along K), x --x-dtype (f32;
          bf16: W and its scales bf16 too); the GEMM reads the packed
          weight (half a byte an element)
  int8    ours: the same with "int8" (per output channel)
  bf16    ours: x bf16 @ W bf16 (W an input [K, N], the layout our
          tensor-core GEMM reads)
  torch   torch.matmul(x bf16, W^T bf16) (cuBLAS)
The quantized outputs are checked against x @ W in f32 (cosine >= 0.99)
before they are timed. One executable per format and shape with M
symbolic (the same one runs M = 1, 4, 16; the bf16 GEMM tunes each M's
power-of-two bucket on its first run, the quantized ones have no
candidates). Timing: CUDA events, median of 5 means of --iters calls after
a warm-up (ms per call, spread max - min of the 5 means); kern: our
kernels alone (tj_executable_profile). Progress and each compile's cost
(wall, then tj_executable_stats' passes / lowering / LLVM / ptxas) and
first run go to stderr.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_wqgemm_torch.py
    TJ_CUDA_WQGEMM=fma ...   # the CUDA-core kernel instead of tensor cores

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402

T0 = time.time()


def step(what):
    """A progress line on stderr, so that a slow step shows where it is."""
    print(f"# {time.time() - T0:7.1f} s: {what}", file=sys.stderr, flush=True)


def time_ms(fn, iters):
    """(median ms a call over 5 rounds, max - min of the rounds)."""
    median, low, high = cuda_time_ms(fn, iters)
    return median, high - low


def compile_quant(w, fmt, x_dtype, group):
    k, n = w.shape
    g = tj.Graph("wq_" + fmt)
    x = g.input("x", x_dtype, ["M", k])
    g.output(g.matmul(x, g.constant(w, dtype=x_dtype)), "y")
    return tj.compile(tj.quantize_weights(g, fmt, group_size=group), "cuda")


def compile_bf16(n, k):
    # W [K, N]: our tensor-core GEMM reads B contiguous along n (x @ W^T of
    # an [N, K] W is a graph break to the host on CUDA, see RESULTS.md).
    g = tj.Graph("gemm_bf16")
    x = g.input("x", "bf16", ["M", k])
    g.output(g.matmul(x, g.input("w", "bf16", [k, n])), "y")
    return tj.compile(g, "cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=["4096,4096", "11008,4096"],
                    help="N,K")
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--x-dtype", default="f32", choices=("f32", "bf16"),
                    help="x (and the quantized weight's scale) of the "
                    "quantized GEMMs")
    ap.add_argument("--group", type=int, default=128,
                    help="int4's group along K (32, 64, 128)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    print(f"# cuda_wqgemm_torch: {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, tensorjit {tj.version()}, x {args.x_dtype}, "
          f"int4 group {args.group}, TJ_CUDA_WQGEMM="
          f"{os.environ.get('TJ_CUDA_WQGEMM', '')}")
    print(f"{'N,K':>11s} {'M':>3s} {'case':>6s} {'ms':>16s} {'kern ms':>8s} "
          f"{'GB/s':>7s} {'/our bf16':>9s} {'/torch':>7s}", flush=True)
    rng = np.random.default_rng(1)
    ms = [int(v) for v in args.ms.split(",")]
    for shape in args.shapes:
        n, k = (int(v) for v in shape.split(","))
        w = (rng.standard_normal((k, n), dtype=np.float32) * 0.05)
        wt = torch.from_numpy(w).cuda()
        wbf = wt.t().contiguous().bfloat16()  # [N, K] for torch
        wkn = wt.bfloat16()  # [K, N] for ours
        exes = {}
        for fmt in ("int4", "int8", "bf16"):
            t = time.time()
            try:
                exes[fmt] = (compile_bf16(n, k) if fmt == "bf16" else
                             compile_quant(w, fmt, args.x_dtype, args.group))
            except Exception as e:  # noqa: BLE001
                step(f"{shape} {fmt}: compile failed: {e!r}")
                continue
            st = exes[fmt].stats
            step(f"{shape} {fmt}: compiled in {(time.time() - t) * 1e3:.0f} "
                 f"ms (passes {st.passes_ms:.0f}, lowering "
                 f"{st.lowering_ms:.0f}, LLVM {st.llvm_ms:.0f}, ptxas "
                 f"{st.ptxas_ms:.0f} ms)")
        wbytes = {"int4": k * n / 2, "int8": k * n, "bf16": k * n * 2,
                  "torch": k * n * 2}
        nan = ((float("nan"), float("nan")), float("nan"))
        for m in ms:
            x = torch.randn((m, k), device="cuda")
            xb = x.bfloat16()
            want = x @ wt
            rows = {name: nan for name in wbytes}
            for fmt in ("int4", "int8", "bf16"):
                if fmt not in exes:
                    continue
                # A case that fails is reported and skipped: the other
                # rows still print.
                try:
                    xq = xb if args.x_dtype == "bf16" else x
                    xin, args_ = (xb, (xb, wkn)) if fmt == "bf16" else \
                        (xq, (xq,))
                    y = torch.empty((m, n), device="cuda", dtype=xin.dtype)
                    t = time.time()
                    exes[fmt](*args_, out=y)  # bf16: tunes M's bucket
                    torch.cuda.synchronize()
                    step(f"{shape} M {m} {fmt}: first run "
                         f"{(time.time() - t) * 1e3:.0f} ms")
                    cos = torch.nn.functional.cosine_similarity(
                        y.float().flatten(), want.flatten(), dim=0).item()
                    assert cos >= 0.99, (fmt, m, cos)
                    t = time_ms(lambda: exes[fmt](*args_, out=y), args.iters)
                    kern = exes[fmt].profile(*args_, runs=args.iters,
                                             out=y).kernel_ms
                    rows[fmt] = (t, kern)
                except Exception as e:  # noqa: BLE001
                    step(f"{shape} M {m} {fmt} failed: {e!r}")
            rows["torch"] = (time_ms(lambda: torch.matmul(xb, wbf.t()),
                                     args.iters), None)
            for name in ("int4", "int8", "bf16", "torch"):
                (t, spread), kern = rows[name]
                gbs = wbytes[name] / (t * 1e-3) * 1e-9
                print(f"{shape:>11s} {m:3d} {name:>6s} {t:8.4f}({spread:6.4f}) "
                      f"{kern if kern is not None else float('nan'):8.4f} "
                      f"{gbs:7.0f} {rows['bf16'][0][0] / t:9.2f} "
                      f"{rows['torch'][0][0] / t:7.2f}", flush=True)
    print("# ms per call: median (max-min) of 5 means; kern: our kernels "
          "alone; GB/s: weight bytes / ms; /our bf16 and /torch above 1: "
          "faster than our bf16 GEMM / torch.matmul bf16")


if __name__ == "__main__":
    main()
