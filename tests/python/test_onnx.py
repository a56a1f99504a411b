"""tensorjit.onnx.load on models of ONNX's node tests (libonnx-testdata):
from a path and from bytes, run on x86 against the reference target, and
the errors (skipped without the package)."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402

NODE = "/usr/share/libonnx-testdata/data/node"

pytestmark = pytest.mark.skipif(not os.path.isdir(NODE),
                                reason="libonnx-testdata is not installed")


def model(name: str) -> str:
    return os.path.join(NODE, name, "model.onnx")


@pytest.mark.parametrize("name", ["test_softmax_axis_0",
                                  "test_layer_normalization_3d_axis1_epsilon",
                                  "test_gemm_all_attributes"])
def test_load_runs_like_the_reference(name: str) -> None:
    g = tj.onnx.load(model(name))
    with open(model(name), "rb") as f:
        g2 = tj.onnx.load(f.read())
    assert g.text() == g2.text()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(v.shape).astype(np.float32)
            for _, v in g.inputs]
    want = tj.compile(g, target="reference")(*args)
    got = tj.compile(g, target="x86")(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, y in zip(want, got):
        np.testing.assert_allclose(y, w, rtol=1e-4, atol=1e-6)


def test_errors() -> None:
    with pytest.raises(tj.InvalidArgumentError, match="not a ModelProto"):
        tj.onnx.load(b"\x0a\xff\xff\xff\xff\x0f\x01")
    with pytest.raises(tj.UnsupportedError, match=r"\(CumSum, opset \d+\)"):
        tj.onnx.load(model("test_cumsum_1d"))
    with pytest.raises(tj.InvalidArgumentError, match="cannot open"):
        tj.onnx.load("/nonexistent/model.onnx")


def test_input_values_pin_shape_inputs() -> None:
    # ReduceSum's axes arrive as a graph input: refused until pinned.
    name = "test_reduce_sum_keepdims_random"
    with pytest.raises(tj.UnsupportedError, match="must be a constant"):
        tj.onnx.load(model(name))
    g = tj.onnx.load(model(name), input_values={"axes": np.array([1])})
    assert len(g.inputs) == 1
    x = np.random.default_rng(1).standard_normal((3, 2, 2)).astype(np.float32)
    got = tj.compile(g, target="x86")(x)
    np.testing.assert_allclose(got, x.sum(axis=1, keepdims=True), rtol=1e-5)
    with pytest.raises(tj.InvalidArgumentError, match="names no graph input"):
        tj.onnx.load(model(name), input_values={"nope": np.array([1])})
