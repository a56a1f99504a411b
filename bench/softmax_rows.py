#!/usr/bin/env python3
"""Row kernels over long rows on the GPU (issue 14): softmax, layer_norm
and rms_norm over the last axis of x [R, N] for N from 4096 to 32768 (R
such that x holds --elements elements), ours (tensorjit from Python, torch
CUDA tensors in and out, out= given) beside torch eager and torch.compile
(dynamic shapes: one compile per op and dtype) and a device-to-device copy
of the same bytes, in the same run, with the same timing (CUDA events,
median of 5 means of --iters calls after a warm-up). Also prints our
kernel time alone (tj_executable_profile) and the fraction of the copy's
bandwidth each reaches (compulsory traffic: x read once, y written once).

    TJ_LIBRARY=build/libtensorjit.so python3 bench/softmax_rows.py
    ... --ops softmax --dtypes bf16 --n 8192 32768 --no-compile

Checks ours against torch (assert_close, bf16 2e-2) before timing. Prints
a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402


def time_ms(fn, iters):
    return cuda_time_ms(fn, iters)[0]  # the median


def torch_fn(op):
    if op == "softmax":
        return lambda x, w, b: torch.softmax(x, dim=-1)
    if op == "layer_norm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def graph(op, dtype, n):
    g = tj.Graph(op)
    x = g.input("x", dtype, ["R", n])
    if op == "softmax":
        y = g.softmax(x, -1)
    elif op == "layer_norm":
        y = g.layer_norm(x, g.input("w", dtype, [n]), g.input("b", dtype, [n]),
                         1e-5)
    else:
        y = g.rms_norm(x, g.input("w", dtype, [n]), 1e-6)
    g.output(y, "y")
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", nargs="*",
                    default=["softmax", "layer_norm", "rms_norm"])
    ap.add_argument("--dtypes", nargs="*", default=["bf16", "f32"])
    ap.add_argument("--n", type=int, nargs="*",
                    default=[4096, 8192, 16384, 32768])
    ap.add_argument("--elements", type=int, default=1 << 26)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true",
                    help="skip torch.compile")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    print(f"# softmax_rows: {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, tensorjit {tj.version()}, "
          f"{args.elements} elements a tensor")
    print(f"{'op':>10s} {'dtype':>5s} {'N':>6s} {'copy':>8s} {'ours':>8s} "
          f"{'kernel':>8s} {'eager':>8s} {'compile':>8s} {'ours/copy':>9s} "
          f"{'kern/copy':>9s} {'compile/ours':>12s}")
    for op in args.ops:
        for dtype in args.dtypes:
            ref = torch_fn(op)
            compiled = None if args.no_compile else torch.compile(
                ref, dynamic=True)
            for n in args.n:
                rows = max(1, args.elements // n)
                x = torch.randn(rows, n, device="cuda", dtype=tdt[dtype])
                w = torch.randn(n, device="cuda", dtype=tdt[dtype])
                b = torch.randn(n, device="cuda", dtype=tdt[dtype])
                ins = {"softmax": (x,), "layer_norm": (x, w, b),
                       "rms_norm": (x, w)}[op]
                exe = tj.compile(graph(op, dtype, n), "cuda")
                out = torch.empty_like(x)
                exe(*ins, out=out)
                torch.testing.assert_close(out.float(), ref(x, w, b).float(),
                                           rtol=2e-2, atol=2e-2)
                dst = torch.empty_like(x)
                copy = time_ms(lambda: dst.copy_(x), args.iters)
                ours = time_ms(lambda: exe(*ins, out=out), args.iters)
                kern = exe.profile(*ins, runs=args.iters, out=out).kernel_ms
                ev = time_ms(lambda: ref(x, w, b), args.iters)
                cm = float("nan")
                if compiled is not None:
                    compiled(x, w, b)
                    cm = time_ms(lambda: compiled(x, w, b), args.iters)
                print(f"{op:>10s} {dtype:>5s} {n:6d} {copy:8.4f} {ours:8.4f} "
                      f"{kern:8.4f} {ev:8.4f} {cm:8.4f} {copy / ours:9.2f} "
                      f"{copy / kern:9.2f} {cm / ours:12.2f}")
                exe.close()
    print("# ms per call; ours/copy and kern/copy: the copy's time over ours "
          "(1.0 = copy bandwidth); compile/ours above 1: ours faster")


if __name__ == "__main__":
    main()
