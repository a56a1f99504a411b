"""onnxruntime's int8 GEMM on the CPU beside bench/qgemm_bench.c (issue 17).

MatMulInteger (u8 A [M, K] an input, s8 B [K, N] an initializer: a weight
onnxruntime prepacks at session creation) -> i32, at qgemm_bench's shapes,
on 1 thread and on all the CPUs (intra_op_num_threads). Medians of |runs|
timed runs after a warm-up, with (min..max); GOPS = 2 M N K / time.

    python3 bench/qgemm_ort.py [runs] [--small] [--int7]

--small skips M = 4096; --int7 draws B from [-64, 63] as QGEMM_BENCH_INT7.
"""

import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SHAPES = [(256, 1024, 4096), (2048, 1024, 4096), (4096, 4096, 4096),
          (1, 4096, 4096), (16, 4096, 4096)]


def model(k, n, int7):
    i = np.arange(k * n, dtype=np.int64)
    b = ((i * 13 % 128 - 64) if int7 else (i * 13 % 256 - 128)).astype(np.int8)
    b = b.reshape(k, n)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "qgemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["M", k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["M", n])],
        [numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(args[0]) if args else 5
    small = "--small" in sys.argv
    int7 = "--int7" in sys.argv
    cpus = os.cpu_count() or 1
    print(f"onnxruntime {ort.__version__}, {cpus} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; medians of {runs} runs (min..max)")
    for m, n, k in SHAPES:
        if small and m >= 4096:
            continue
        blob = model(k, n, int7)
        a = (np.arange(m * k, dtype=np.int64) * 7 % 256).astype(np.uint8)
        a = a.reshape(m, k)
        for thr in sorted({1, cpus}):
            so = ort.SessionOptions()
            so.intra_op_num_threads = thr
            so.inter_op_num_threads = 1
            s = ort.InferenceSession(blob, so,
                                     providers=["CPUExecutionProvider"])
            s.run(None, {"a": a})
            t = []
            for _ in range(runs):
                t0 = time.perf_counter()
                s.run(None, {"a": a})
                t.append((time.perf_counter() - t0) * 1e3)
            med = statistics.median(t)
            print(f"{m:5d} {n:5d} {k:5d} {thr:3d} | ort MatMulInteger "
                  f"{med:8.3f} ms ({min(t):.3f}..{max(t):.3f}) "
                  f"{2.0 * m * n * k / med * 1e-6:7.0f} GOPS", flush=True)


if __name__ == "__main__":
    main()
