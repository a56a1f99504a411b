#!/usr/bin/env python3
"""What a transformer block costs to compile (issue 14: "cold compile of a
block, tuning included <= 0.5 s; warm <= 10 ms"), beside torch.compile's
cold compile of the same block in the same run.

The blocks are bench/transformer_blocks.py's (GPT and Llama, weights as
inputs). Each row is one fresh process-level situation:

- cold: a new context and an empty kernel cache directory; tj.compile,
  then the first run (on CUDA, tuning with autotune "on" happens in the
  first run: every GEMM candidate compiled and timed), then the second.
- cold, background: the same with autotune "background": the first run
  serves the default kernels while the candidates compile and are timed on
  the library's own thread; "tuned" is the wait until every decision is in.
- warm (same context): the same graph built again in the context that
  compiled it (x86 takes the executable from the compile memo; CUDA has no
  memo and compiles again from the context's memory and disk caches).
- warm (disk): a new context on the cold row's cache directory.

Times are wall milliseconds on the calling thread (the device synchronized
after each run); "llvm", "ptxas" and "tuning" are the executable's own
counters (tj_executable_stats).

    python3 bench/block_compile_time.py --target cuda --dtype bf16 --bt 8192
    python3 bench/block_compile_time.py --target x86 --dtype f32 --bt 512
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import transformer_blocks as tb  # noqa: E402
from transformer_blocks import tj, torch  # noqa: E402

CLOCK = time.perf_counter


def ms(t0):
    return (CLOCK() - t0) * 1e3


def sync(cuda):
    if cuda and torch is not None:
        torch.cuda.synchronize()


def inputs(c, b, t, dtype, cuda, rng):
    arrs = tb.inputs_for(c, b, t, rng)
    if torch is not None:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        dev = "cuda" if cuda else "cpu"
        ins = [torch.from_numpy(a).to(dev, tdt) for a in arrs]
        return ins, torch.empty(b, t, c.d, device=dev, dtype=tdt)
    if dtype == "bf16":
        arrs = [tj.f32_to_bf16(a) for a in arrs]
    return arrs, np.empty_like(arrs[0])


def row(label, compile_ms, first_ms, second_ms, stats, extra=""):
    total = compile_ms + first_ms
    second = f"{second_ms:7.2f}" if second_ms is not None else "      -"
    print(f"  {label:<26s} compile {compile_ms:9.1f}  first run "
          f"{first_ms:9.1f}  = {total:9.1f}  second run {second}"
          f"  | llvm {stats.llvm_ms:8.1f} ptxas {stats.ptxas_ms:7.1f} "
          f"tuning {stats.tuning_ms:8.1f} kernels {stats.num_kernels}"
          f"{extra}", flush=True)


def measure(c, args, autotune, rng):
    cuda = args.target == "cuda"
    b, t = max(1, args.bt // args.t), min(args.t, args.bt)
    cache = tempfile.mkdtemp(prefix="tj_block_cache_")
    try:
        ctx = tj.Context(log="")
        g = tb.build(c, args.dtype, b, t, context=ctx)
        ins, out = inputs(c, b, t, args.dtype, cuda, rng)
        t0 = CLOCK()
        exe = tj.compile(g, args.target, cache_dir=cache, autotune=autotune)
        cold = ms(t0)
        t0 = CLOCK()
        exe(*ins, out=out)
        sync(cuda)
        first = ms(t0)
        t0 = CLOCK()
        exe(*ins, out=out)
        sync(cuda)
        second = ms(t0)
        extra = ""
        if autotune == "background":
            t0 = CLOCK()
            ctx.wait_autotune()
            extra = f"  tuned after {first + ms(t0):.1f} more"
        row(f"cold, autotune {autotune}", cold, first, second, exe.stats,
            extra)

        # The same graph built again in the same context.
        g2 = tb.build(c, args.dtype, b, t, context=ctx)
        t0 = CLOCK()
        exe2 = tj.compile(g2, args.target, cache_dir=cache, autotune=autotune)
        warm = ms(t0)
        t0 = CLOCK()
        exe2(*ins, out=out)
        sync(cuda)
        row("warm (same context)", warm, ms(t0), None, exe2.stats)
        exe2.close()
        exe.close()
        ctx.close()

        # A new context (as a new process would) on the same cache.
        ctx3 = tj.Context(log="")
        g3 = tb.build(c, args.dtype, b, t, context=ctx3)
        t0 = CLOCK()
        exe3 = tj.compile(g3, args.target, cache_dir=cache, autotune=autotune)
        disk = ms(t0)
        t0 = CLOCK()
        exe3(*ins, out=out)
        sync(cuda)
        row("warm (disk)", disk, ms(t0), None, exe3.stats)
        exe3.close()
        ctx3.close()
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def torch_cold(c, args, rng):
    if torch is None or args.no_torch:
        return
    cuda = args.target == "cuda"
    b, t = max(1, args.bt // args.t), min(args.t, args.bt)
    ins, _ = inputs(c, b, t, args.dtype, cuda, rng)
    torch._dynamo.reset()
    fn = torch.compile(tb.torch_block(c))
    with torch.no_grad():
        t0 = CLOCK()
        fn(*ins)
        sync(cuda)
        first = ms(t0)
        t0 = CLOCK()
        fn(*ins)
        sync(cuda)
        second = ms(t0)
    print(f"  {'torch.compile':<26s} first call {first:9.1f} (compile "
          f"included; Inductor's caches as the machine has them)  second "
          f"call {second:7.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="cuda", choices=("x86", "cuda"))
    ap.add_argument("--blocks", nargs="*", default=["gpt", "llama"])
    ap.add_argument("--dtype", default="bf16", choices=("f32", "bf16"))
    ap.add_argument("--bt", type=int, default=8192)
    ap.add_argument("--t", type=int, default=512)
    ap.add_argument("--autotune", nargs="*", default=None,
                    help="modes to measure (default: on and background on "
                    "CUDA, off on x86)")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    modes = args.autotune or (["on", "background"] if args.target == "cuda"
                              else ["off"])
    rng = np.random.default_rng(14)
    print(f"# block_compile_time: {args.target}, {args.dtype}, B.T {args.bt},"
          f" T {args.t}, tensorjit {tj.version()}"
          + (f", torch {torch.__version__}" if torch is not None else ""))
    for kind in args.blocks:
        c = tb.GPT if kind == "gpt" else tb.LLAMA
        print(f"{kind}:", flush=True)
        for mode in modes:
            measure(c, args, mode, rng)
        torch_cold(c, args, rng)


if __name__ == "__main__":
    main()
