"""Graphs built from the ONNX GridSample node tests that once went wrong in
fusion, compiled for x86 and compared with the reference interpreter.

    gridsample_reflection_x86_wrong  a 124-node fused pointwise kernel gave
        wrong values on 4 of 8 outputs: one output of the group was stored
        in place of an input before another output had read it
        (kir/lower.c).
    gridsample_bicubic_fuse_internal  tj_compile failed with INTERNAL "not
        a legal group: more nodes than fuse_max_nodes": the fuser's first
        phase built a kernel its own check rejects (lib/passes/fuse.c).

The minimal graph of each root cause is in tests/unit/x86_fusion_test.c.
Each .tj file's inputs are the .inputs.json beside it (name -> dtype, shape,
data). Runs under pytest, or as a plain script:

    TJ_LIBRARY=build/libtensorjit.so python3 tests/python/test_fusion_repros.py
"""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "python"))

import tensorjit as tj  # noqa: E402

DATA = os.path.join(HERE, "fusion_repros")


def run_case(name: str) -> None:
    """Runs |name|.tj on x86 and on the reference; outputs must agree within
    f32 rounding (1e-5 relative, 1e-6 absolute; the graphs are floors,
    wheres and a few adds, so the wrong answers were off by 0.5 or more)."""
    with open(os.path.join(DATA, name + ".tj")) as f:
        text = f.read()
    with open(os.path.join(DATA, name + ".inputs.json")) as f:
        spec = json.load(f)
    names = re.findall(r"%([A-Za-z0-9_]+): ", text.splitlines()[0])
    args = [np.array(spec[n]["data"], dtype=spec[n]["dtype"]).reshape(
        spec[n]["shape"]) for n in names]
    results = {}
    for target in ("x86", "reference"):
        exe = tj.compile(tj.Graph.parse(text), target=target, cache_dir="",
                         num_threads=1, verify_each=True)
        results[target] = [np.asarray(o) for o in exe.run(args)]
        exe.close()
    assert len(results["x86"]) == len(results["reference"])
    for got, want in zip(results["x86"], results["reference"]):
        assert got.shape == want.shape, (got.shape, want.shape)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (
            f"{name}: x86 {got.ravel()} reference {want.ravel()}")


def test_gridsample_reflection_in_place_store_order() -> None:
    run_case("gridsample_reflection_x86_wrong")


def test_gridsample_bicubic_fuse_max_nodes() -> None:
    run_case("gridsample_bicubic_fuse_internal")


def main() -> int:
    failed = 0
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        try:
            fn()
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
