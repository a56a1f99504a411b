#!/usr/bin/env python3
"""Row kernels on x86: layer_norm, rms_norm and softmax over the last axis
of x [R, N] in f32, ours (tensorjit from Python, out= given) beside numpy
and, where it imports, torch on the CPU, in the same run, at one thread.

Times are process CPU time per call (time.process_time, so a loaded
machine's waits do not count), the median of --reps blocks of --calls
calls after a warm-up, with the blocks' (max - min) spread. To compare two
builds of the library, run the script twice with TJ_LIBRARY set to each,
alternating:

    TJ_LIBRARY=build/libtensorjit.so python3 bench/x86_rows.py
    ... --ops layer_norm --n 768 4096 --rows 4096 --reps 7

Checks ours against numpy (f64 reference, 1e-4) before timing. Prints a
table; never a pass/fail.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
    torch.set_num_threads(1)
except ImportError:
    torch = None


def graph(op, n):
    g = tj.Graph(op)
    x = g.input("x", "f32", ["R", n])
    if op == "softmax":
        y = g.softmax(x, -1)
    elif op == "layer_norm":
        y = g.layer_norm(x, g.input("w", "f32", [n]), g.input("b", "f32", [n]),
                         1e-5)
    else:
        y = g.rms_norm(x, g.input("w", "f32", [n]), 1e-6)
    g.output(y, "y")
    return g


def numpy_fn(op):
    if op == "softmax":
        def softmax(x, w, b):
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return softmax
    if op == "layer_norm":
        def layer_norm(x, w, b):
            m = x.mean(-1, keepdims=True)
            c = x - m
            return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
        return layer_norm

    def rms_norm(x, w, b):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    return rms_norm


def torch_fn(op):
    if op == "softmax":
        return lambda x, w, b: torch.softmax(x, dim=-1)
    if op == "layer_norm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def cpu_ms(fn, calls, reps):
    fn()
    blocks = []
    for _ in range(reps):
        t = time.process_time()
        for _ in range(calls):
            fn()
        blocks.append((time.process_time() - t) * 1e3 / calls)
    return statistics.median(blocks), max(blocks) - min(blocks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", nargs="*",
                    default=["layer_norm", "rms_norm", "softmax"])
    ap.add_argument("--n", type=int, nargs="*", default=[768, 4096])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    print(f"# x86_rows: tensorjit {tj.version()} "
          f"({os.environ.get('TJ_LIBRARY', 'default library')}), numpy "
          f"{np.__version__}, torch "
          f"{torch.__version__ if torch else 'absent'}; 1 thread, CPU ms "
          f"a call, median of {args.reps} blocks of {args.calls} calls "
          f"(spread)")
    print(f"{'op':>10s} {'R,N':>11s} {'ours':>16s} {'numpy':>16s} "
          f"{'torch':>16s} {'numpy/ours':>10s} {'torch/ours':>10s}")
    rng = np.random.default_rng(0)
    for op in args.ops:
        for n in args.n:
            x = rng.standard_normal((args.rows, n), dtype=np.float32) + 3
            w = rng.standard_normal(n, dtype=np.float32)
            b = rng.standard_normal(n, dtype=np.float32)
            ins = {"softmax": (x,), "layer_norm": (x, w, b),
                   "rms_norm": (x, w)}[op]
            exe = tj.compile(graph(op, n), num_threads=1)
            out = np.empty_like(x)
            exe(*ins, out=out)
            want = numpy_fn(op)(x.astype(np.float64), w, b)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
            ours = cpu_ms(lambda: exe(*ins, out=out), args.calls, args.reps)
            ref = numpy_fn(op)
            nump = cpu_ms(lambda: ref(x, w, b), args.calls, args.reps)
            tor = (float("nan"), 0.0)
            if torch is not None:
                tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
                tf = torch_fn(op)
                tor = cpu_ms(lambda: tf(tx, tw, tb), args.calls, args.reps)
            print(f"{op:>10s} {f'{args.rows},{n}':>11s} "
                  f"{ours[0]:8.3f} ({ours[1]:5.3f}) "
                  f"{nump[0]:8.3f} ({nump[1]:5.3f}) "
                  f"{tor[0]:8.3f} ({tor[1]:5.3f}) "
                  f"{nump[0] / ours[0]:10.2f} {tor[0] / ours[0]:10.2f}")
            exe.close()


if __name__ == "__main__":
    main()
