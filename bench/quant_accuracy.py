#!/usr/bin/env python3
"""Weight bytes and accuracy of quantized weights (issue 17's goals table):
the capstone y = gelu(x @ w + b) (K 1024, N 4096) and the two transformer
blocks of bench/transformer_blocks.py (GPT: linears with bias; Llama:
matmuls, grouped-query attention, SwiGLU), every weight a graph constant,
as f32, bf16, and quantized by tensorjit.quantize_weights: int8 per output
channel, int4 per group of 32 and of 128 (of the f32 graph: f32 scales; of
the bf16 graph: bf16 scales).

  weight MB: the scoreboard's weight bytes (tj_graph_scoreboard, memplan
             row: the constants the kernels read, as stored, norms and
             biases included), and the ratio bf16 / this format
  accuracy:  each quantized f32 graph against the f32 graph, run on x86
             for the same random x: max |y - y_f32| / max |y_f32| and the
             cosine of y and y_f32 (bf16: the bf16 graph, bf16 inputs)

    TJ_LIBRARY=build/libtensorjit.so python3 bench/quant_accuracy.py

Deterministic (fixed seeds); prints a table; never a pass/fail.
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402
import transformer_blocks as tb  # noqa: E402

FORMATS = (("int8", "int8", 128), ("int4 g32", "int4", 32),
           ("int4 g128", "int4", 128))


def capstone(dtype, w, b, rows):
    g = tj.Graph("capstone")
    x = g.input("x", dtype, [rows, w.shape[0]])
    g.output(g.gelu(g.matmul(x, g.constant(w, dtype)) + g.constant(b, dtype)),
             "y")
    return g


def weight_bytes(g):
    return g.scoreboard().row("memplan").weight_bytes_read


def compare(y, ref):
    y = np.asarray(y, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    rel = np.abs(y - ref).max() / np.abs(ref).max()
    cos = float(y @ ref / math.sqrt((y @ y) * (ref @ ref)))
    return rel, cos


def to_bf16(a):
    """f32 -> bf16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def report(name, make, x):
    """make(dtype) builds the model of that dtype (weights constants)."""
    g32 = make("f32")
    gbf = make("bf16")
    ref = tj.compile(g32)(x)
    ybf = from_bf16(np.asarray(tj.compile(gbf)(to_bf16(x))).view(np.uint16))
    wbf = weight_bytes(gbf)
    rows = [("f32", weight_bytes(g32), None), ("bf16", wbf, compare(ybf, ref))]
    for label, fmt, group in FORMATS:
        q32 = tj.quantize_weights(g32, fmt, group_size=group)
        qbf = tj.quantize_weights(gbf, fmt, group_size=group)
        acc = compare(tj.compile(q32)(x), ref)
        rows.append((label + " (f32 scales)", weight_bytes(q32), acc))
        rows.append((label + " (bf16 scales)", weight_bytes(qbf), None))
    for label, wb, acc in rows:
        a = (f"{acc[0]:10.3g} {acc[1]:10.6f}" if acc else
             f"{'':>10s} {'':>10s}")
        print(f"{name:>10s} {label:>24s} {wb / 1e6:10.3f} {wbf / wb:8.2f}x "
              f"{a}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64,
                    help="capstone rows; the blocks run 1 x 64 tokens")
    args = ap.parse_args()
    print(f"# quant_accuracy: tensorjit {tj.version()}")
    print(f"{'model':>10s} {'format':>24s} {'weight MB':>10s} {'bf16/x':>9s} "
          f"{'max rel':>10s} {'cosine':>10s}", flush=True)
    rng = np.random.default_rng(7)
    k, n = 1024, 4096
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    b = (0.1 * rng.standard_normal(n)).astype(np.float32)
    x = rng.standard_normal((args.rows, k)).astype(np.float32)
    report("capstone", lambda dt: capstone(dt, w, b, args.rows), x)
    for c in (tb.GPT, tb.LLAMA):
        t = 64
        arrs = tb.inputs_for(c, 1, t, rng)
        names = [name for name, _ in tb.weight_shapes(c)]
        consts = dict(zip(names, arrs[1:]))

        def make(dt, c=c, t=t, consts=consts):
            cs = {k_: (to_bf16(v) if dt == "bf16" else v)
                  for k_, v in consts.items()}
            return tb.build(c, dt, 1, t, constants=cs)

        report(c.kind + " blk", make, arrs[0])
    print("# weight MB: scoreboard weight bytes (memplan row); bf16/x: the "
          "bf16 graph's over this row's; max rel: max |y - y_f32| / max "
          "|y_f32|; cosine against y_f32 (x86)")


if __name__ == "__main__":
    main()
