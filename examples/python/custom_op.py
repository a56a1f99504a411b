"""The README's Python custom-op example (section "Custom ops"), whole: a
numpy function with a shape rule and a VJP kept in a compiled graph, run as
the README runs it and then at several batch sizes from one executable,
each checked against numpy (the VJP itself is tests/python/
test_custom_op.py's). Exits non-zero on any mismatch. Keep the lines between "README begin" and "README end" as the
README has them.

    python3 examples/python/custom_op.py

The library comes from $TJ_LIBRARY, the installed package or the system;
from a source checkout, run it with PYTHONPATH=python.
"""

from __future__ import annotations

import os
import sys

import numpy as np

try:
    import tensorjit as tj
except ImportError:  # a source checkout: use python/ beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), os.pardir, os.pardir, "python"))
    import tensorjit as tj


def main() -> int:
    # README begin
    def same(x):
        return x                          # a TensorType: dtype and shape

    @tj.custom_op("clip3", shape=same,
                  vjp=lambda g, ins, y, gy: [gy * g.abs(ins[0]).lt(3.0)
                                             .cast("f32")])
    def clip3(x):
        return np.clip(x, -3.0, 3.0)

    g = tj.Graph("f")
    x = g.input("x", "f32", ["B", 16])
    g.output(clip3(g.exp(x)) * 2.0, "y")
    y = tj.compile(g)(np.ones((5, 16), np.float32))
    # README end
    bad = 0
    want = np.clip(np.exp(np.ones((5, 16), np.float32)), -3.0, 3.0) * 2.0
    err = float(np.max(np.abs(np.asarray(y) - want)))
    print(f"README run: B=5 y[0,0]={float(np.asarray(y)[0, 0]):.6f} "
          f"max |y - numpy| {err:.1e}")
    bad += err > 1e-5
    exe = tj.compile(g)
    for b in (1, 3, 64):
        xs = np.linspace(-2.0, 2.0, b * 16, dtype=np.float32).reshape(b, 16)
        ys = np.asarray(exe(xs))
        ref = np.clip(np.exp(xs), -3.0, 3.0) * 2.0
        err = float(np.max(np.abs(ys - ref)))
        ok = err <= 1e-5
        bad += not ok
        print(f"B={b:<3d} y[0,0]={float(ys[0, 0]):.6f} "
              f"y[-1,-1]={float(ys[-1, -1]):.6f} max |y - numpy| {err:.1e} "
              f"{'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
