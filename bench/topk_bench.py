"""topk (issue 15): tj's argtopk on x86 against numpy in the same process.

Rows of n <= 256 run as native rank kernels (O(n^2) compares a row in one
fused reduction, lib/passes/decompose.c); longer rows are a graph break on
the reference semantics. numpy: argpartition + argsort of the k (topk),
argsort(kind="stable") (sort). Prints the median and the spread (min-max)
of 15 runs, in milliseconds.

  TJ_LIBRARY=build/libtensorjit.so python3 bench/topk_bench.py
"""

import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402


def timed(fn, runs=15):
    fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def np_topk(x, k):
    part = np.argpartition(-x, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(x, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def main():
    rng = np.random.default_rng(0)
    print("case | tj x86 ms (median, min-max) | numpy ms (median, min-max)")
    for rows, n, k in ((4096, 32, 4), (4096, 128, 8), (1024, 256, 16),
                       (1024, 1024, 16)):
        x = rng.standard_normal((rows, n)).astype(np.float32)
        for what in ("topk", "sort"):
            kk = k if what == "topk" else n
            g = tj.Graph("bench")
            gx = g.input("x", "f32", [rows, n])
            g.output(g.argtopk(gx, kk if what == "topk" else -1, 1,
                               what == "topk"), "i")
            exe = tj.compile(g, target="x86")
            out = np.empty((rows, kk), np.int64)
            ours = timed(lambda: exe.run([x], out=[out]))
            if what == "topk":
                theirs = timed(lambda: np_topk(x, kk))
            else:
                theirs = timed(lambda: np.argsort(x, axis=1, kind="stable"))
            print(f"{what} [{rows}, {n}] k={kk} | {ours[0]:.3f} "
                  f"({ours[1]:.3f}-{ours[2]:.3f}) | {theirs[0]:.3f} "
                  f"({theirs[1]:.3f}-{theirs[2]:.3f})")


if __name__ == "__main__":
    main()
