"""topk (issue 15): tj's argtopk on x86 against numpy or torch in the same
process.

Rows of n <= 256 run as native rank kernels and k <= 16 as selection
passes (O(n^2) and O(n k) compares a row in one fused reduction,
lib/passes/decompose.c); longer rows with larger k, and rows of symbolic
length, run on argtopk's native host kernel (backends/runtime/host_topk.c),
or on the reference interpreter (a graph break) under TJ_NATIVE_TOPK=off.

Default mode, against numpy (argpartition + argsort of the k for topk,
argsort(kind="stable") for sort): the median and the spread (min-max) of
15 runs, wall milliseconds.

  TJ_LIBRARY=build/libtensorjit.so python3 bench/topk_bench.py

--torch: against torch.topk / torch.argsort(stable=True) on the CPU, and
the same graph compiled with TJ_NATIVE_TOPK=off (the graph break it
replaces), one thread each (tj num_threads=1, torch.set_num_threads(1)),
the calling thread's CPU time per call; the three alternate round by round, --rounds rounds of
--calls calls; prints medians, min-max and the ratios tj / torch.

  TJ_LIBRARY=build/libtensorjit.so /work/venv-x86/bin/python \\
      bench/topk_bench.py --torch
"""

import argparse
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


def against_numpy():
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
            ours = timed(lambda: exe(x, out=[out]))
            if what == "topk":
                theirs = timed(lambda: np_topk(x, kk))
            else:
                theirs = timed(lambda: np.argsort(x, axis=1, kind="stable"))
            print(f"{what} [{rows}, {n}] k={kk} | {ours[0]:.3f} "
                  f"({ours[1]:.3f}-{ours[2]:.3f}) | {theirs[0]:.3f} "
                  f"({theirs[1]:.3f}-{theirs[2]:.3f})")


def cpu_per_call(fn, calls):
    # The calling thread's CPU time: everything runs on it (one thread),
    # and other threads' spinning (numpy's OpenBLAS) stays out.
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t0) * 1e3 / calls


def spread(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2], ts[0], ts[-1]


def against_torch(rounds, calls):
    import torch

    torch.set_num_threads(1)
    # TJ_NATIVE_TOPK is read when a context is created: one context each.
    native_ctx = tj.Context()
    os.environ["TJ_NATIVE_TOPK"] = "off"
    off_ctx = tj.Context()
    del os.environ["TJ_NATIVE_TOPK"]
    rng = np.random.default_rng(0)
    # top-8: x86 takes the host kernel past k = 4; under the switch,
    # decompose's 8 selection passes (no graph break either way).
    cases = (("top-50 [8, 50257]", 8, 50257, 50),
             ("top-1 [1, 50257]", 1, 50257, 1),
             ("top-8 [8, 50257]", 8, 50257, 8),
             ("argsort [64, 4096]", 64, 4096, -1))
    print("case | tj native ms | tj TJ_NATIVE_TOPK=off ms | torch ms | "
          "native / torch | off / torch  (thread CPU a call, 1 thread; "
          f"median and min-max of {rounds} rounds of {calls} calls)")
    for name, rows, n, k in cases:
        x = rng.standard_normal((rows, n)).astype(np.float32)
        xt = torch.from_numpy(x)
        kk = n if k < 0 else k
        exes = []
        for ctx in (native_ctx, off_ctx):
            g = tj.Graph("bench", context=ctx)
            gx = g.input("x", "f32", [rows, n])
            if k < 0:
                g.output(g.argsort(gx, 1), "i")
            else:
                v, i = g.topk(gx, k, 1, True)
                g.output(v, "v")
                g.output(i, "i")
            exe = tj.compile(g, target="x86", num_threads=1)
            if k < 0:
                outs = [np.empty((rows, kk), np.int64)]
            else:
                outs = [np.empty((rows, kk), np.float32),
                        np.empty((rows, kk), np.int64)]
            st = exe.stats
            exes.append((exe, outs, st))
        if k < 0:
            def theirs():
                torch.argsort(xt, dim=1, stable=True)
        else:
            def theirs():
                torch.topk(xt, k, dim=1, largest=True, sorted=True)
        # The same indices (torch's topk may order ties otherwise: random
        # floats have none).
        got = exes[0][0].run([x], out=exes[0][1])
        want = (torch.argsort(xt, dim=1, stable=True) if k < 0 else
                torch.topk(xt, k, dim=1).indices).numpy()
        assert np.array_equal(got[-1], want), name
        # The call's fast path (exe.run's list form re-plans the call:
        # ~0.3 ms of Python a call).
        fns = [lambda e=e, o=o: e(x, out=o) for e, o, _ in exes]
        fns.append(theirs)
        for f in fns:
            f()
        ts = [[], [], []]
        for _ in range(rounds):
            for j, f in enumerate(fns):
                ts[j].append(cpu_per_call(f, calls))
        med = [spread(t) for t in ts]
        nat, off, tor = med
        print(f"{name} k={kk} | {nat[0]:.3f} ({nat[1]:.3f}-{nat[2]:.3f}) | "
              f"{off[0]:.3f} ({off[1]:.3f}-{off[2]:.3f}) | "
              f"{tor[0]:.3f} ({tor[1]:.3f}-{tor[2]:.3f}) | "
              f"{nat[0] / tor[0]:.2f} | {off[0] / tor[0]:.2f}  "
              f"[native: {exes[0][2].num_graph_breaks} breaks; "
              f"off: {exes[1][2].num_graph_breaks} breaks]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    if a.torch:
        against_torch(a.rounds, a.calls)
    else:
        against_numpy()


if __name__ == "__main__":
    main()
