#!/usr/bin/env python3
"""torch eager and torch.compile on the memory-bound kernels of
bench/cuda_membound.c, in the same run, with the same shapes and the same
timing (CUDA events, median of 5 means of N runs after warm-up):

    cuda_membound --out ours.txt
    python3 bench/torch_membound.py --ours ours.txt

Prints GB/s of compulsory traffic (x read once, y written once) for a
device copy, torch eager and torch.compile, and with --ours our figures as
ratios to torch.compile (above 1: ours is faster).
"""

import argparse
import statistics

import torch
import torch.nn.functional as F


def affine(x):
    return x * 2 + 1


def gelu_bias(x, b):
    return F.gelu(x + b)


def softmax(x):
    return torch.softmax(x, dim=1)


def layer_norm(x, g, b):
    return F.layer_norm(x, (x.shape[1],), g, b, 1e-5)


def time_ms(fn, *args, iters=20):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    means = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn(*args)
        stop.record()
        stop.synchronize()
        means.append(start.elapsed_time(stop) / iters)
    return statistics.median(means)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="key value lines from cuda_membound --out")
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--cols", type=int, default=4096)
    args = ap.parse_args()
    ours = {}
    if args.ours:
        with open(args.ours) as f:
            for line in f:
                k, v = line.split()
                ours[k] = float(v)

    x = torch.rand(args.rows, args.cols, device="cuda") * 8 - 4
    b = torch.rand(args.cols, device="cuda") * 2 - 1
    g = torch.ones(args.cols, device="cuda")
    z = torch.zeros(args.cols, device="cuda")
    y = torch.empty_like(x)
    gb = 2 * x.numel() * 4 * 1e-9
    copy = gb / time_ms(lambda: y.copy_(x)) * 1e3
    print(f"f32 [{args.rows}, {args.cols}], torch {torch.__version__}")
    print("| kernel | torch eager GB/s | torch.compile GB/s | ours GB/s | "
          "ours / copy | ours / torch.compile |")
    print("|---|---|---|---|---|---|")
    print(f"| device copy | {copy:.0f} | | {ours.get('copy_gbs', 0):.0f} | | |")
    cases = [("2x+1", "affine", affine, (x,)),
             ("gelu(x+b)", "gelu_bias", gelu_bias, (x, b)),
             ("softmax", "softmax", softmax, (x,)),
             ("layer_norm", "layer_norm", layer_norm, (x, g, z))]
    for name, key, fn, fargs in cases:
        eager = gb / time_ms(fn, *fargs) * 1e3
        compiled = torch.compile(fn, dynamic=False)
        comp = gb / time_ms(compiled, *fargs) * 1e3
        mine = ours.get(key + "_gbs")
        if mine:
            ref = ours.get("copy_gbs", copy)
            print(f"| {name} | {eager:.0f} | {comp:.0f} | {mine:.0f} | "
                  f"{mine / ref:.2f} | {mine / comp:.2f} |")
        else:
            print(f"| {name} | {eager:.0f} | {comp:.0f} | | | |")


if __name__ == "__main__":
    main()
