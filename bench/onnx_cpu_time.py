#!/usr/bin/env python3
"""One of the real models of bench/onnx_models.py (its skeleton refilled,
the batch symbolic, one executable for every batch) on x86: wall and
process CPU time per run, the median and spread of --runs after 3
warm-ups, for each batch. CPU time stays meaningful on a shared host where
the wall time follows the load (conv16, bench/RESULTS.md).

  python3 bench/onnx_cpu_time.py [--model resnet18] [--threads N]
      [--batches 1,32] [--runs N]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "onnx", "models"))
    sys.path.append(os.path.join(HERE, "..", "python"))
    import skeleton
    import tensorjit as tj

    model = skeleton.filled(args.model).SerializeToString()
    t0 = time.perf_counter()
    exe = tj.compile(tj.onnx.load(model), "x86", num_threads=args.threads)
    print("%s, %d threads: compile %.2f s" % (
        args.model, args.threads, time.perf_counter() - t0))
    for b in [int(v) for v in args.batches.split(",") if v]:
        shape = skeleton.input_shape(args.model, b, 128)
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        out = np.asarray(exe(x)).copy()
        for _ in range(3):
            exe(x, out=out)
        wall, cpu = [], []
        for _ in range(args.runs):
            a, p = time.perf_counter(), time.process_time()
            exe(x, out=out)
            wall.append((time.perf_counter() - a) * 1e3)
            cpu.append((time.process_time() - p) * 1e3)
        wall.sort()
        cpu.sort()
        print("batch %d: wall %.2f ms (%.2f..%.2f)  cpu %.2f ms (%.2f..%.2f)"
              % (b, statistics.median(wall), wall[0], wall[-1],
                 statistics.median(cpu), cpu[0], cpu[-1]))


if __name__ == "__main__":
    main()
