"""numpy's eager capstone block, y = gelu(x @ w + b) (tanh form), f32.

--mode forward times the block; --mode train times the training step of
loss = sum(gelu(x @ w + b)) with the backward written by hand (dx, dw, db).
Prints the median wall time in milliseconds over --reps runs (after one
warm-up), or with --spread the minimum, median and maximum: the "numpy eager" column of the capstone demo and the benchmarks.
Each op allocates its temporary, as eager numpy does.
"""
import argparse
import time

import numpy as np


def block(x, w, b):
    h = x @ w + b
    return 0.5 * h * (1.0 + np.tanh(np.float32(0.7978845608028654) *
                                    (h + np.float32(0.044715) * h * h * h)))


C = np.float32(0.7978845608028654)
A = np.float32(0.044715)


def train(x, w, b):
    h = x @ w + b
    u = C * (h + A * h * h * h)
    t = np.tanh(u)
    y = 0.5 * h * (1.0 + t)
    loss = y.sum()
    # d/dh of 0.5 h (1 + tanh(u)) with u = C (h + A h^3); dL/dy = 1.
    dh = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * C * (1.0 + 3.0 * A * h * h)
    return loss, dh @ w.T, x.T @ dh, dh.sum(axis=0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--mode", choices=("forward", "train"), default="forward")
    p.add_argument("--spread", action="store_true",
                   help="print min, median and max instead of the median")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.k), dtype=np.float32)
    w = rng.standard_normal((a.k, a.n), dtype=np.float32) * np.float32(0.03)
    b = rng.standard_normal((a.n,), dtype=np.float32)
    fn = block if a.mode == "forward" else train
    fn(x, w, b)
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        fn(x, w, b)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    med = times[len(times) // 2]
    if a.spread:
        print(f"{times[0]:.3f} {med:.3f} {times[-1]:.3f}")
    else:
        print(f"{med:.3f}")


if __name__ == "__main__":
    main()
