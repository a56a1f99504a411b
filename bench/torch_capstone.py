#!/usr/bin/env python3
"""torch eager and torch.compile on the capstone block y = gelu(x @ w + b).

Run on the GPU machine beside bench/cuda_capstone.c (same shapes, same
dtype, exact erf gelu, CUDA events, mean of N runs after warm-up):

    cuda_capstone --out ours.txt
    python3 bench/torch_capstone.py --ours ours.txt

With --ours, prints ours beside torch as ratios (time of ours / time of
theirs: below 1 means ours is faster).

    cuda_capstone --f32 --out ours.txt
    python3 bench/torch_capstone.py --f32 --ours ours.txt

--f32 runs only the f32 block, at every batch, with TF32 off and on
(torch.backends.cuda.matmul.allow_tf32; "f32_tf32" beside our allow_tf32
row). --max-autotune adds torch.compile(mode="max-autotune") beside the
default mode (bf16 only; its compile benchmarks Triton GEMM templates and
takes minutes).
"""

import argparse
import time

import torch
import torch.nn.functional as F


def block(x, w, b):
    return F.gelu(x @ w + b)


def matmul(x, w):
    return x @ w


def time_ms(fn, *args, iters=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(*args)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def tiny_op_overhead_us(n=2000):
    x = torch.randn(256, device="cuda")
    for _ in range(20):
        x.mul(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.mul(x)
    enqueue = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return enqueue


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="key value lines from cuda_capstone --out")
    ap.add_argument("--batches", default="2048,16384")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--f32", action="store_true",
                    help="only f32, every batch, TF32 off and on")
    ap.add_argument("--max-autotune", action="store_true",
                    help="also torch.compile(mode='max-autotune'), bf16")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    print(f"# torch {torch.__version__}, {dev}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results = {}
    results_ma = {}
    K, N = 1024, 4096
    kinds = [(torch.bfloat16, "bf16", False), (torch.float32, "f32", False)]
    if args.f32:
        kinds = [(torch.float32, "f32", False), (torch.float32, "f32_tf32", True)]
    for dtype, dname, tf32 in kinds:
        for B in [int(b) for b in args.batches.split(",")]:
            if dtype == torch.float32 and B != 2048 and not args.f32:
                continue
            x = torch.randn(B, K, device="cuda", dtype=dtype)
            w = torch.randn(K, N, device="cuda", dtype=dtype) * 0.05
            b = torch.randn(N, device="cuda", dtype=dtype)
            flop = 2.0 * B * K * N
            torch.backends.cuda.matmul.allow_tf32 = tf32
            eager = time_ms(block, x, w, b, iters=args.iters)
            mm = time_ms(matmul, x, w, iters=args.iters)
            torch._dynamo.reset()
            compiled = torch.compile(block, dynamic=False)
            t0 = time.perf_counter()
            compiled(x, w, b)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            comp = time_ms(compiled, x, w, b, iters=args.iters)
            ref = block(x.float(), w.float(), b.float())
            err = (compiled(x, w, b).float() - ref).abs().max().item()
            print(f"{dname} B={B}: eager {eager:.4f} ms, matmul alone "
                  f"{mm:.4f} ms ({flop / mm * 1e-9:.0f} TFLOP/s), "
                  f"torch.compile {comp:.4f} ms (compiled in {compile_s:.1f} "
                  f"s; max err vs f32 {err:.3g})")
            if args.max_autotune and dname == "bf16":
                torch._dynamo.reset()
                tuned = torch.compile(block, dynamic=False,
                                      mode="max-autotune")
                t0 = time.perf_counter()
                tuned(x, w, b)
                torch.cuda.synchronize()
                tuned_s = time.perf_counter() - t0
                ma = time_ms(tuned, x, w, b, iters=args.iters)
                print(f"{dname} B={B}: torch.compile max-autotune {ma:.4f} ms"
                      f" (compiled in {tuned_s:.1f} s)")
                results_ma[(dname, B)] = ma
            results[(dname, B)] = (eager, mm, comp)
    overhead = tiny_op_overhead_us()
    print(f"torch eager tiny op: {overhead:.2f} us/op to enqueue")
    if not args.ours:
        return
    ours = {}
    with open(args.ours) as f:
        for line in f:
            k, v = line.split()
            ours[k] = float(v)
    print("\nratios (time of ours / time of theirs; < 1: ours faster)")
    print(f"{'block':<12}{'ours':<10}{'ms':>9}{'/ cuBLAS mm':>13}"
          f"{'/ cuBLASLt+epi':>16}{'/ eager':>10}{'/ compile':>11}")
    for (dname, B), (eager, mm, comp) in results.items():
        for variant, label in [("ours_erf", "autotuned"),
                               ("ours_fused", "fused"),
                               ("ours_tf32", "tf32")]:
            # Our allow_tf32 row is keyed under f32; it meets torch's TF32.
            if (variant == "ours_tf32") != dname.endswith("_tf32"):
                continue
            key = f"{variant}_{dname.replace('_tf32', '')}_B{B}_ms"
            if key not in ours:
                continue
            o = ours[key]
            lt = "cublas_tf32" if variant == "ours_tf32" else "cublas"
            dn = dname.replace("_tf32", "")
            lt_mm = ours.get(f"{lt}_matmul_{dn}_B{B}_ms", float("nan"))
            lt_epi = ours.get(f"{lt}_bias_gelu_{dn}_B{B}_ms", float("nan"))
            print(f"{dname} B={B:<6}{label:<10}{o:>9.4f}{o / lt_mm:>13.2f}"
                  f"{o / lt_epi:>16.2f}{o / eager:>10.2f}{o / comp:>11.2f}")
        print(f"{'':<12}(torch: eager {eager:.4f} ms, matmul alone {mm:.4f} "
              f"ms, torch.compile {comp:.4f} ms)")
        if (dname, B) in results_ma:
            key = f"ours_erf_{dname}_B{B}_ms"
            ma = results_ma[(dname, B)]
            if key in ours:
                print(f"{'':<12}ours / torch.compile max-autotune "
                      f"({ma:.4f} ms): {ours[key] / ma:.2f}")
    if "overhead_graph_us" in ours:
        print(f"tiny graph run overhead: ours {ours['overhead_graph_us']:.2f} us"
              f" per run (CUDA graph replay, enqueue only) vs torch eager "
              f"{overhead:.2f} us per op")


if __name__ == "__main__":
    main()
