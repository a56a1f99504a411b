"""numpy's eager capstone block, y = gelu(x @ w + b) (tanh form), f32.

Prints the median wall time in milliseconds over --reps runs (after one
warm-up): the "numpy eager" column of the capstone demo and the benchmarks.
Each op allocates its temporary, as eager numpy does.
"""
import argparse
import time

import numpy as np


def block(x, w, b):
    h = x @ w + b
    return 0.5 * h * (1.0 + np.tanh(np.float32(0.7978845608028654) *
                                    (h + np.float32(0.044715) * h * h * h)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.k), dtype=np.float32)
    w = rng.standard_normal((a.k, a.n), dtype=np.float32) * np.float32(0.03)
    b = rng.standard_normal((a.n,), dtype=np.float32)
    block(x, w, b)
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        block(x, w, b)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    print(f"{times[len(times) // 2]:.3f}")


if __name__ == "__main__":
    main()
