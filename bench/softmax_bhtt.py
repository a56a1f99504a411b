#!/usr/bin/env python3
"""The masked softmax of attention scores, softmax(x * scale + mask, -1)
over x [B, H, T, T] with an additive causal mask [1, 1, T, T] (-inf above
the diagonal), on the GPU: ours (tensorjit from Python, torch CUDA tensors
in and out on torch's stream) beside torch eager and torch.compile, in the
same run, with the same timing (CUDA events, median of 5 means of N calls
after warm-up). Also prints our kernel time alone (tj_executable_profile)
and each figure as GB/s of compulsory traffic (x read once, y written once)
beside a device-to-device copy of the same bytes.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/softmax_bhtt.py
    ... --b 16 --h 12 --t 512 --dtype bf16

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402


def time_ms(fn, iters):
    return cuda_time_ms(fn, iters)[0]  # the median


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=16)
    ap.add_argument("--h", type=int, default=12)
    ap.add_argument("--t", type=int, nargs="*", default=[128, 512, 2048])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-compile", action="store_true",
                    help="skip torch.compile")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16,
           "f32": torch.float32}[args.dtype]
    scale = 1.0 / math.sqrt(64)

    def eager(x, mask):
        return torch.softmax(x * scale + mask, dim=-1)

    compiled = None if args.no_compile else torch.compile(eager)
    print(f"# softmax_bhtt: {torch.cuda.get_device_name()}, {args.dtype}, "
          f"torch {torch.__version__}, tensorjit {tj.version()}")
    print(f"{'B,H,T':>14s} {'copy':>8s} {'ours':>8s} {'ours kern':>10s} "
          f"{'eager':>8s} {'compile':>8s} {'ours GB/s':>10s} "
          f"{'compile/ours':>12s}")
    for t in args.t:
        shape = (args.b, args.h, t, t)
        x = torch.randn(shape, device="cuda", dtype=tdt)
        mask = torch.full((1, 1, t, t), float("-inf"), device="cuda",
                          dtype=tdt).triu(1)
        g = tj.Graph("masked_softmax")
        gx = g.input("x", args.dtype, list(shape))
        gm = g.input("mask", args.dtype, [1, 1, t, t])
        g.output(g.softmax(gx * scale + gm, -1), "y")
        exe = tj.compile(g, "cuda")
        y = exe(x, mask)
        torch.testing.assert_close(y.float(), eager(x, mask).float(),
                                   rtol=2e-2, atol=2e-3)
        out = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        dst = torch.empty_like(x)
        copy = time_ms(lambda: dst.copy_(x), args.iters)
        ours = time_ms(lambda: exe(x, mask, out=out), args.iters)
        kern = exe.profile(x, mask, runs=args.iters, out=out).kernel_ms
        ev = time_ms(lambda: eager(x, mask), args.iters)
        cm = float("nan")
        if compiled is not None:
            compiled(x, mask)
            cm = time_ms(lambda: compiled(x, mask), args.iters)
        print(f"{args.b:>4d},{args.h:>3d},{t:>5d} {copy:8.4f} {ours:8.4f} "
              f"{kern:10.4f} {ev:8.4f} {cm:8.4f} "
              f"{nbytes / ours / 1e6:10.1f} {cm / ours:12.2f}")
    print("# ms per call; 'ours kern' is the kernel time alone; copy is "
          "x -> y device to device; compile/ours above 1: ours faster")


if __name__ == "__main__":
    main()
