"""Tests of the tensorjit Python package (python/tensorjit) against numpy.

Runs under pytest, or as a plain script (pytest is not required):

    TJ_LIBRARY=build/libtensorjit.so python3 tests/python/test_package.py [s]

runs every test_* function (or those whose name contains s), prints
one line per test and exits non-zero if any failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Iterator, Type

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402
from tensorjit import _lib  # noqa: E402

RNG = np.random.default_rng(20240607)
TARGETS = ("x86", "reference")
_erf = np.vectorize(math.erf)
_erfc = np.vectorize(math.erfc)


@contextlib.contextmanager
def raises(exc: Type[BaseException], match: str = "") -> Iterator[list]:
    """Asserts the block raises |exc| whose message matches |match|."""
    caught: list = []
    try:
        yield caught
    except exc as e:  # noqa: PERF203
        caught.append(e)
        if match and not re.search(match, str(e)):
            raise AssertionError(f"{type(e).__name__} message {str(e)!r} "
                                 f"does not match {match!r}") from e
        return
    raise AssertionError(f"{exc.__name__} not raised")


def close(got: Any, want: Any, rtol: float = 2e-5, atol: float = 2e-5
          ) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        assert np.array_equal(got, want), (got, want)
        return
    assert np.allclose(got.astype(np.float64), want.astype(np.float64),
                       rtol=rtol, atol=atol, equal_nan=True), (
        f"max error {np.nanmax(np.abs(got.astype(np.float64) - want))}")


def f32(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def run_both(build: Callable[[tj.Graph], None], inputs: list,
             expected: Any, **tol: float) -> None:
    """Builds a graph with |build|, runs it on every target and on the
    reference interpreter directly, and compares with |expected|."""
    g = tj.Graph("t")
    build(g)
    want = expected if isinstance(expected, tuple) else (expected,)
    for target in TARGETS:
        exe = tj.compile(g, target=target)
        got = exe.run(inputs)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            close(a, b, **tol)
    got = g.run_reference(*inputs)
    close(got if len(want) == 1 else got[0], want[0], **tol)


#===----------------------------------------------------------------------===#
# Graph building
#===----------------------------------------------------------------------===#


def test_library_loads() -> None:
    assert tj.version() == "0.1.0"
    assert os.path.exists(tj.library_path()) or "tensorjit" in \
        tj.library_path()


def test_graph_building() -> None:
    g = tj.Graph("block")
    x = g.input("x", "f32", ["B", 16])
    w = g.input("w", np.float32, [16, 8])
    b = g.input("b", tj.F32, [8])
    assert x.shape == ("B", 16) and x.dtype == tj.F32 and x.rank == 2
    y = x @ w + b
    assert y.shape == ("B", 8)
    z = g.gelu(-y * 2.0 - 1, approximate=True) / 3.0
    g.output(z, "y")
    g.output(y.sum(1), "s")
    text = g.text()
    for op in ("matmul", "add", "neg", "mul", "sub", "div", "gelu", "sum"):
        assert op in text, (op, text)
    assert "f32[B,16]" in text
    assert g.num_inputs == 3 and g.num_outputs == 2
    assert [n for n, _ in g.inputs] == ["x", "w", "b"]
    assert [n for n, _ in g.outputs] == ["y", "s"]
    assert "Value" in repr(y) and "B" in repr(y)
    # Reverse operators with Python scalars take the Value's dtype.
    r = 1.0 - x
    assert r.dtype == tj.F32 and r.shape == ("B", 16)
    i = g.input("i", "i32", ["B"])
    assert (i * 3).dtype == tj.I32
    assert (2 ** g.cast(i, "f32")).dtype == tj.F32
    assert abs(i).dtype == tj.I32
    assert i.lt(4).dtype == tj.BOOL and x.ge(x).dtype == tj.BOOL
    g.finalize()
    g.finalize()  # idempotent


def test_allow_tf32_is_a_cuda_option() -> None:
    # allow_tf32 lets CUDA f32 matmuls use TF32 tensor cores; other targets
    # ignore it and stay exact f32.
    g = tj.Graph("mm")
    x = g.input("x", "f32", ["B", 40])
    w = g.input("w", "f32", [40, 24])
    g.output(x @ w, "y")
    rng = np.random.default_rng(3)
    xv = rng.uniform(-1, 1, (5, 40)).astype(np.float32)
    wv = rng.uniform(-1, 1, (40, 24)).astype(np.float32)
    got = tj.compile(g, allow_tf32=True)(xv, wv)
    want = g.run_reference(xv, wv)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5,
                               atol=1e-5)


def test_symbolic_dim_expressions() -> None:
    g = tj.Graph("dims")
    x = g.input("x", "f32", ["B", "S"])
    full = g.full("f32", ["B*2+1", "S"], 3.0)
    assert full.shape == ("B*2+1", "S")
    d = g.dim("2*B+1")  # canonical form: equal dims are equal codes
    assert d == g.dim("B*2+1") == g.dim_add(g.dim_mul("B", 2), 1)
    assert g.dim_sub(d, 1) == g.dim_mul("B", 2)
    assert g.dim_div(g.dim_sub(d, 1), 2) == g.dim("B")
    g.output(g.concat([x, x, full], axis=0), "y")
    for target in TARGETS:
        exe = tj.compile(g, target=target)
        for B, S in ((1, 3), (4, 2)):
            xv = f32(B, S)
            y = exe(xv)
            want = np.concatenate([xv, xv, np.full((2 * B + 1, S), 3.0,
                                                   np.float32)])
            close(y, want)


def test_dim_sub_div_refuse_what_is_no_dim() -> None:
    for op, a, b, message in (("dim_sub", "T", 1, "T - 1 is no dim"),
                              ("dim_div", "T", 2, "2 does not divide T")):
        g = tj.Graph("dims")
        with pytest.raises(tj.InvalidArgumentError, match=message):
            getattr(g, op)(g.dim(a), b)


def test_text_round_trip() -> None:
    g = tj.Graph("mlp")
    x = g.input("x", "f32", ["N", 4])
    w = g.constant(f32(4, 3))
    g.output(g.relu(x @ w), "y")
    g.finalize()
    text = g.text()
    h = tj.Graph.parse(text, filename="mlp.tj")
    assert h.text() == text
    assert h.inputs[0][1].shape == ("N", 4)
    xv = f32(5, 4)
    close(tj.compile(h)(xv), g.run_reference(xv))
    close(tj.compile(text)(xv), g.run_reference(xv))


#===----------------------------------------------------------------------===#
# Every op family against numpy
#===----------------------------------------------------------------------===#

UNARY = {
    "neg": (np.negative, None), "abs": (np.abs, None),
    "exp": (np.exp, None), "log": (np.log, (0.1, 4.0)),
    "sqrt": (np.sqrt, (0.0, 4.0)), "rsqrt": (lambda a: 1 / np.sqrt(a),
                                             (0.1, 4.0)),
    "tanh": (np.tanh, None), "sigmoid": (lambda a: 1 / (1 + np.exp(-a)),
                                         None),
    "erf": (_erf, None), "erfc": (_erfc, None), "sin": (np.sin, None), "cos": (np.cos, None),
    "asin": (np.arcsin, (-0.9, 0.9)), "acos": (np.arccos, (-0.9, 0.9)),
    "atan": (np.arctan, None),
    "floor": (np.floor, None), "ceil": (np.ceil, None),
    "round": (np.round, None), "relu": (lambda a: np.maximum(a, 0), None),
    "sign": (np.sign, None),
}


def test_unary_ops() -> None:
    for name, (fn, rng) in UNARY.items():
        lo, hi = rng or (-3.0, 3.0)
        a = f32(3, 5, lo=lo, hi=hi)
        a[0, 0] = 0.5  # a tie for round
        want = fn(a.astype(np.float64)).astype(np.float32)
        run_both(lambda g, name=name: g.output(
            getattr(g, name)(g.input("a", "f32", [3, 5]))), [a], want,
            rtol=1e-5, atol=1e-6)
    b = np.array([True, False, True])
    run_both(lambda g: g.output(g.logical_not(g.input("b", "bool", [3]))),
             [b], ~b)
    n = np.array([1.0, np.nan, -np.inf], np.float32)
    run_both(lambda g: g.output(g.isnan(g.input("n", "f32", [3]))), [n],
             np.isnan(n))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": np.divide, "pow": np.power, "maximum": np.maximum,
    "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "mod": np.mod, "fmod": np.fmod,
}


def test_binary_ops_broadcast() -> None:
    for name, fn in BINARY.items():
        a = f32(4, 1, 3, lo=0.5, hi=2.0)
        b = f32(5, 1, lo=0.5, hi=2.0)
        b[0, 0] = a[0, 0, 0]  # an equal pair for the comparisons
        want = fn(a, b)

        def build(g: tj.Graph, name: str = name) -> None:
            g.output(getattr(g, name)(g.input("a", "f32", [4, 1, 3]),
                                      g.input("b", "f32", [5, 1])))
        run_both(build, [a, b], want, rtol=1e-5)
    p, q = RNG.random(6) > 0.5, RNG.random(6) > 0.5
    for name, fn in (("logical_and", np.logical_and),
                     ("logical_or", np.logical_or)):
        run_both(lambda g, name=name: g.output(getattr(g, name)(
            g.input("p", "bool", [6]), g.input("q", "bool", [6]))), [p, q],
            fn(p, q))
    # Integer semantics: division truncates toward zero, x / 0 is 0.
    i = np.array([7, -7, 5, 3], np.int32)
    j = np.array([2, 2, 0, -2], np.int32)
    run_both(lambda g: g.output(g.input("i", "i32", [4]) /
                                g.input("j", "i32", [4])), [i, j],
             np.array([3, -3, 0, -1], np.int32))
    # Remainders (mod 0 is 0), bitwise ops and shifts (counts >= the width
    # shift every bit out) on every target.
    for name, want in (("mod", [1, 1, 0, -1]), ("fmod", [1, -1, 0, 1]),
                       ("bitwise_and", [2, 0, 0, 2]),
                       ("bitwise_or", [7, -5, 5, -1]),
                       ("bitwise_xor", [5, -5, 5, -3]),
                       ("shift_left", [28, -28, 5, 0]),
                       ("shift_right", [1, -2, 5, 0])):
        run_both(lambda g, name=name: g.output(getattr(g, name)(
            g.input("i", "i32", [4]), g.input("j", "i32", [4]))),
            [i, j], np.array(want, np.int32))


def test_operators() -> None:
    a, b = f32(3, 4), f32(4, 2)

    def build(g: tj.Graph) -> None:
        x = g.input("a", "f32", [3, 4])
        w = g.input("b", "f32", [4, 2])
        g.output(-(x @ w) * 2 + 1 - (x @ w) / 4 + abs(x @ w) ** 2.0)
    m = a @ b
    run_both(build, [a, b], -m * 2 + 1 - m / 4 + np.abs(m) ** 2, rtol=1e-5)
    # A numpy array operand becomes a constant.
    c = f32(4)
    run_both(lambda g: g.output(g.input("a", "f32", [3, 4]) * c), [a],
             a * c)


def test_where_cast_leaves() -> None:
    a = f32(2, 3)

    def build(g: tj.Graph) -> None:
        x = g.input("a", "f32", [2, 3])
        g.output(g.where(x.gt(0.0), x, 0.5))
        g.output(g.cast(x * 10, "i32"))
        g.output(g.iota("i64", [2, 3], axis=1) + g.full("i64", [2, 3], 7))
        g.output(g.scalar("f64", 2.5) * g.ones("f64", [2]))
        g.output(g.constant(np.arange(6, dtype=np.int8).reshape(2, 3)))
        g.output(g.zeros("bool", [3]))
    want = (np.where(a > 0, a, np.float32(0.5)),
            (a * 10).astype(np.int32),
            np.tile(np.arange(3), (2, 1)) + 7,
            np.full(2, 2.5), np.arange(6, dtype=np.int8).reshape(2, 3),
            np.zeros(3, bool))
    run_both(build, [a], want)


def test_reductions() -> None:
    a = f32(3, 4, 5)
    for name, fn in (("sum", np.sum), ("mean", np.mean), ("max", np.max),
                     ("min", np.min), ("prod", np.prod)):
        for axes, keep in ((None, False), ((1,), True), ((0, 2), False),
                           (-1, False)):
            np_axes = None if axes is None else axes
            want = fn(a.astype(np.float64), axis=np_axes, keepdims=keep)
            run_both(lambda g, name=name, axes=axes, keep=keep: g.output(
                getattr(g, name)(g.input("a", "f32", [3, 4, 5]), axes,
                                 keep)), [a], want.astype(np.float32),
                rtol=1e-5, atol=1e-5)
    run_both(lambda g: g.output(g.argmax(g.input("a", "f32", [3, 4, 5]), 1,
                                         keepdims=True)), [a],
             np.argmax(a, axis=1)[:, None, :].astype(np.int64))
    ints = RNG.integers(-9, 9, (4, 6)).astype(np.int64)
    run_both(lambda g: g.output(g.input("i", "i64", [4, 6]).sum(0)), [ints],
             ints.sum(0))


def test_rank0_constant() -> None:
    # A rank-0 constant stays rank 0 (it used to become shape [1]) for
    # every dtype: its own shape, a graph output of shape (), and its use
    # against a [2, 3] input, on every target.
    x_f = RNG.standard_normal((2, 3))
    for dt, np_dt, value in (("f32", np.float32, 2.5), ("f16", np.float16,
                                                         -1.5),
                             ("f64", np.float64, 0.25), ("i8", np.int8, -7),
                             ("i32", np.int32, 123456),
                             ("i64", np.int64, -(2**40)),
                             ("bool", np.bool_, True)):
        c_arr = np.array(value, dtype=np_dt)
        x = (x_f > 0) if np_dt is np.bool_ else (x_f * 10).astype(np_dt)

        def build(g: tj.Graph, dt: str = dt, c_arr: Any = c_arr) -> None:
            c = g.constant(c_arr)
            assert c.shape == () and c.rank == 0, (dt, c.shape)
            xi = g.input("x", dt, [2, 3])
            y = g.logical_or(xi, c) if dt == "bool" else xi + c
            g.output(c, "c")
            g.output(y, "y")
        want_y = np.logical_or(x, c_arr) if np_dt is np.bool_ else x + c_arr
        run_both(build, [x], (c_arr, want_y))
    # bf16: from f32 values.
    g = tj.Graph("t")
    c = g.constant(np.array(3.0, np.float32), dtype="bf16")
    assert c.shape == ()
    g.output(g.cast(c, "f32") * g.input("x", "f32", [2, 3]))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for target in TARGETS:
        got = tj.compile(g, target=target)(x)
        close(got, x * 3.0)


def test_prepare() -> None:
    # Executable.prepare: the load-time warm-up. With shapes (data is not
    # read), with none, repeated; then calls of that shape are right and
    # compile no specialization (specialize="always" compiled it in
    # prepare); a wrong input count or shape is InvalidArgumentError.
    g = tj.Graph("warm")
    x = g.input("x", "f32", ["B", 16])
    w = RNG.standard_normal((16, 24)).astype(np.float32)
    g.output(g.relu(x @ g.constant(w)))
    for specialize in ("never", "always"):
        exe = tj.compile(g, specialize=specialize)
        a = RNG.standard_normal((3, 16)).astype(np.float32)
        exe.prepare(a)
        exe.prepare(x=a)
        exe.prepare()
        want_recompiles = 1 if specialize == "always" else 0
        assert exe.stats.recompiles == want_recompiles
        close(exe(a), np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)
        assert exe.stats.recompiles == want_recompiles
        with raises(tj.InvalidArgumentError, "no input named 'y'"):
            exe.prepare(y=a)
        with raises(tj.InvalidArgumentError):
            exe.prepare(np.ones((3, 15), np.float32))
        exe.close()


_EXIT_SCRIPT = r"""
import gc, sys
sys.path.insert(0, sys.argv[2])
import numpy as np
import pytest
import tensorjit as tj
from tensorjit import _lib
how = sys.argv[1]
messages = []
ctx = (tj.Context(diagnostic=lambda sev, msg: messages.append(msg))
       if how == "callback" else tj.Context())
g = tj.Graph("exit", context=ctx)
x = g.input("x", "f32", ["B", 64])
w = np.linspace(-1, 1, 64 * 96, dtype=np.float32).reshape(64, 96)
g.output(g.gelu(x @ g.constant(w)))
# No disk cache: the deferred small-M code is built by LLVM in the
# background, tens of ms, while this process exits.
exe = tj.compile(g, cache_dir="")
errors = []
if how == "errors":  # the report: run errors caught and kept, no close()
    for _ in range(3):
        try:
            exe(np.ones((2, 3), np.float32))
        except tj.InvalidArgumentError as e:
            errors.append(e)
elif how == "cycle":  # context and executable in one garbage cycle
    class Holder:
        pass
    h = Holder()
    h.me, h.ctx, h.exe = h, ctx, exe
    del ctx, exe, g, x
    if sys.argv[3] == "now":
        del h
        gc.collect()
elif how == "context_first":  # the C context destroyed first
    _lib.lib().tj_context_destroy(ctx.handle)
    ctx._handle = None
    a = np.ones((3, 64), np.float32)
    y = exe(a)
    want = a @ w
    want = 0.5 * want * (1 + np.vectorize(__import__("math").erf)(
        want / np.sqrt(2)))
    assert np.allclose(y, want, rtol=1e-4, atol=1e-4)
elif how == "executable_first":
    exe.close()
print("exiting", how, flush=True)
"""


def test_exit_during_background_build() -> None:
    # Interpreter exit while an executable's deferred code is still being
    # built in the background, with the objects released in every order:
    # a garbage cycle holding both (collected at exit, or at once), the C
    # context destroyed first, the executable first, caught run errors kept
    # (the report: exit hung in tj_executable_release 3 times out of 3 on a
    # busy machine), a Python diagnostic function. 25 processes, 4 at a
    # time, each bounded.
    cases = [("errors", "-"), ("cycle", "exit"), ("cycle", "now"),
             ("context_first", "-"), ("executable_first", "-"),
             ("callback", "-")]
    runs = [cases[i % len(cases)] for i in range(25)]
    env = dict(os.environ, TJ_LOG="cache")
    procs: list = []
    failures = []
    start = time.monotonic()
    while runs or procs:
        while runs and len(procs) < 4:
            how, when = runs.pop()
            p = subprocess.Popen(
                [sys.executable, "-c", _EXIT_SCRIPT, how,
                 os.path.join(ROOT, "python"), when],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            procs.append((p, how, when, time.monotonic()))
        for item in list(procs):
            p, how, when, t0 = item
            if p.poll() is None and time.monotonic() - t0 < 60:
                continue
            procs.remove(item)
            if p.poll() is None:
                p.kill()
                failures.append(f"{how}/{when}: hung for 60 s")
            out = p.communicate()[0].decode(errors="replace")
            if p.returncode != 0 or f"exiting {how}" not in out:
                failures.append(f"{how}/{when}: exit status {p.returncode}: "
                                f"{out[-400:]}")
        time.sleep(0.02)
    assert not failures, "\n".join(failures)
    print(f"  25 exits in {time.monotonic() - start:.1f} s")


def test_matmul_family() -> None:
    cases = [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 1, 4, 6),
                                                      (3, 6, 2)),
             ((7,), (7, 3)), ((5, 7), (7,))]
    for sa, sb in cases:
        a, b = f32(*sa), f32(*sb)
        run_both(lambda g, sa=sa, sb=sb: g.output(
            g.input("a", "f32", list(sa)) @ g.input("b", "f32", list(sb))),
            [a, b], np.matmul(a, b), rtol=1e-5, atol=1e-5)
    x, w, bias = f32(6, 8), f32(8, 4), f32(4)
    run_both(lambda g: g.output(g.linear(g.input("x", "f32", [6, 8]),
                                         g.input("w", "f32", [8, 4]),
                                         g.input("b", "f32", [4]))),
             [x, w, bias], x @ w + bias, rtol=1e-5)
    f64a, f64b = RNG.random((3, 4)), RNG.random((4, 2))
    run_both(lambda g: g.output(g.input("a", "f64", [3, 4]) @
                                g.input("b", "f64", [4, 2])),
             [f64a, f64b], f64a @ f64b, rtol=1e-12)


def _put_along(a, idx, value):
    # numpy.put_along_axis along 2 over idx's extent on axis 1 (numpy
    # itself would broadcast idx there); out[:, :n] is a view.
    out = a.copy()
    np.put_along_axis(out[:, :idx.shape[1]], idx, value, 2)
    return out


def _add_at(a, rows):
    out = a.copy()
    for r in rows:
        out[r] += 1.0
    return out


def test_data_movement() -> None:
    a = f32(2, 3, 4)
    idx = np.array([[2, 0], [1, 1]], np.int64)
    checks = [
        (lambda g, x: g.reshape(x, [4, -1]), a.reshape(4, -1)),
        (lambda g, x: x.reshape(6, 4), a.reshape(6, 4)),
        (lambda g, x: g.transpose(x, [2, 0, 1]), a.transpose(2, 0, 1)),
        (lambda g, x: x.T, a.T),
        (lambda g, x: g.broadcast_to(g.sum(x, 2, True), [5, 2, 3, 4]),
         np.broadcast_to(a.sum(2, keepdims=True), (5, 2, 3, 4))),
        (lambda g, x: g.slice(x, [0, 1, -3], [2, None, 4], [1, 1, 2]),
         a[0:2, 1:, -3:4:2]),
        (lambda g, x: g.concat([x, x * 2], axis=1),
         np.concatenate([a, a * 2], axis=1)),
        (lambda g, x: g.pad(x, [0, 1, 2], [1, 0, 0], value=-1.0),
         np.pad(a, [(0, 1), (1, 0), (2, 0)], constant_values=-1.0)),
        (lambda g, x: g.gather(x, idx, axis=2), np.take(a, idx, axis=2)),
        (lambda g, x: g.gather(x, g.constant(np.array([-1, 0], np.int32)),
                               axis=0), np.take(a, [-1, 0], axis=0)),
        # ops (issue 15): take_along_axis and GatherND (batch_dims 1).
        (lambda g, x: g.gather_elements(x, np.array([[[3, 0, 1]] * 3] * 2),
                                        axis=2),
         np.take_along_axis(a, np.array([[[3, 0, 1]] * 3] * 2), 2)),
        (lambda g, x: g.gather_nd(x, np.array([[[2], [0]], [[1], [1]]]),
                                  batch_dims=1),
         np.stack([a[0][[2, 0]], a[1][[1, 1]]])),
        # ops3 (issue 15): numpy.cumsum / cumprod, and the flags (exclusive
        # drops the element itself; reverse runs from the end).
        (lambda g, x: g.cumsum(x, 1), np.cumsum(a, 1)),
        (lambda g, x: g.cumprod(x, -1), np.cumprod(a, -1)),
        (lambda g, x: g.cumsum(x, 2, exclusive=True, reverse=True),
         np.flip(np.cumsum(np.flip(a, 2), 2), 2) - a),
        # scatter (issue 15): numpy.put_along_axis (the last of duplicates
        # wins), and index_put as ScatterND with add (np.add.at).
        (lambda g, x: g.scatter_elements(x, np.array([[[3, 0, -1]]] * 2),
                                         np.full((2, 1, 3), 7.0), axis=2),
         _put_along(a, np.array([[[3, 0, 3]]] * 2), 7.0)),
        (lambda g, x: g.scatter_nd(x, np.array([[1, 2], [0, 0], [1, 2]]),
                                   np.ones((3, 4), np.float32),
                                   reduction="add"),
         _add_at(a, [(1, 2), (0, 0), (1, 2)])),
    ]
    for build, want in checks:
        run_both(lambda g, build=build: g.output(
            build(g, g.input("a", "f32", [2, 3, 4]))), [a], want,
            rtol=1e-6)


def test_composites() -> None:
    x = f32(4, 6)
    gamma, beta = f32(6), f32(6)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = x64.var(-1, keepdims=True)
    soft = np.exp(x64 - x64.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    checks = [
        (lambda g, v: g.gelu(v), x64 * 0.5 * (1 + _erf(x64 / math.sqrt(2)))),
        (lambda g, v: v.gelu(approximate=True),
         0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                  (x64 + 0.044715 * x64 ** 3)))),
        (lambda g, v: g.silu(v), x64 / (1 + np.exp(-x64))),
        (lambda g, v: g.softmax(v, -1), soft),
        (lambda g, v: g.log_softmax(v, 1), np.log(soft)),
        (lambda g, v: g.layer_norm(v, g.constant(gamma), g.constant(beta),
                                   1e-5),
         (x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta),
        (lambda g, v: g.layer_norm(v), (x64 - mean) / np.sqrt(var + 1e-5)),
        (lambda g, v: g.rms_norm(v, g.constant(gamma), 1e-6),
         x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * gamma),
    ]
    for build, want in checks:
        run_both(lambda g, build=build: g.output(
            build(g, g.input("x", "f32", [4, 6]))), [x],
            want.astype(np.float32), rtol=1e-5, atol=1e-5)


_LAZY_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tensorjit as tj
g = tj.Graph("f")
x = g.input("x", "f32", [4])
g.output(x * 2.0 + 1.0, "y")
y = tj.compile(g, target="x86")(np.arange(4, dtype=np.float32))
assert np.array_equal(y, np.arange(4, dtype=np.float32) * 2 + 1), y
assert tj.dtypes.dtype_of(np.float32) == tj.DType.F32
assert tj.numpy_dtype("f32") == np.float32
print("after f32:", "ml_dtypes" in sys.modules)
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
if ml_dtypes is not None:
    # The caller's own bfloat16 arrays: known without numpy_dtype first.
    assert tj.dtypes.dtype_of(ml_dtypes.bfloat16) == tj.DType.BF16
    assert tj.dtypes.dtype_from_numpy(np.dtype(ml_dtypes.float8_e5m2)) == \
        tj.DType.F8E5M2
    assert tj.numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
else:
    assert tj.numpy_dtype("bf16") == np.uint16
print("bf16:", tj.numpy_dtype("bf16"), tj.numpy_dtype("f8e4m3"))
"""


def test_ml_dtypes_imported_lazily() -> None:
    # Importing ml_dtypes costs ~0.7 s per interpreter: an f32-only program
    # (building, compiling, running, dtype lookups) does not import it; a
    # bf16 numpy dtype asked for, or the caller's own ml_dtypes arrays,
    # still get ml_dtypes' types when it is installed.
    out = subprocess.run(
        [sys.executable, "-c", _LAZY_SCRIPT, os.path.join(ROOT, "python")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
        env=dict(os.environ)).stdout.decode(errors="replace")
    assert "after f32: False" in out, out
    assert "bf16: " in out, out


def test_dtypes() -> None:
    cases = [("f16", np.float16, 1e-3), ("f64", np.float64, 1e-12),
             ("i8", np.int8, 0), ("i32", np.int32, 0), ("i64", np.int64, 0)]
    for name, npd, tol in cases:
        a = (RNG.uniform(-4, 4, (3, 4))).astype(npd)
        b = (RNG.uniform(-4, 4, (3, 4))).astype(npd)
        run_both(lambda g, name=name: g.output(
            g.input("a", name, [3, 4]) + g.input("b", name, [3, 4])),
            [a, b], (a + b).astype(npd), rtol=tol, atol=tol)
    # bf16 crosses as uint16 bits.
    v = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = tj.f32_to_bf16(v)
    assert np.array_equal(tj.bf16_to_f32(bits), v)
    g = tj.Graph("bf")
    x = g.input("x", "bf16", [4])
    g.output(x * 2.0, "y")
    g.output(g.cast(x, "f32"), "z")
    for target in TARGETS:
        y, z = tj.compile(g, target=target)(bits)
        assert y.dtype == np.uint16 or str(y.dtype) == "bfloat16"
        close(tj.bf16_to_f32(y), v * 2)
        close(z, v)


#===----------------------------------------------------------------------===#
# Running: symbolic dims, layouts, DLPack, threads
#===----------------------------------------------------------------------===#


def test_symbolic_batch_one_executable() -> None:
    g = tj.Graph("block")
    x = g.input("x", "f32", ["B", 32])
    w = g.input("w", "f32", [32, 48])
    b = g.input("b", "f32", [48])
    g.output(g.gelu(x @ w + b, approximate=True), "y")
    exe = tj.compile(g)
    wv, bv = f32(32, 48), f32(48)
    batches = (1, 7, 33, 2, 64)
    for B in batches:
        xv = f32(B, 32)
        y = exe(xv, wv, bv)
        assert y.shape == (B, 48) and y.dtype == np.float32
        assert exe.output_shapes(xv, wv, bv) == [(B, 48)]
        close(y, g.run_reference(xv, wv, bv), rtol=1e-5, atol=1e-5)
    # By name, and into caller memory.
    xv = f32(3, 32)
    out = np.empty((3, 48), np.float32)
    assert exe(w=wv, b=bv, x=xv, out=out) is out
    close(out, g.run_reference(xv, wv, bv), rtol=1e-5, atol=1e-5)
    st = exe.stats
    assert st.recompiles == 0 and st.runs == len(batches) + 1
    assert st.num_kernels >= 1 and st.compile_ms > 0


def test_strided_inputs_and_outputs() -> None:
    g = tj.Graph("strided")
    a = g.input("a", "f32", ["M", "N"])
    b = g.input("b", "f32", ["M", "N"])
    g.output(a * 2.0 + b, "y")
    base = f32(8, 10)
    views = [base.T, base[::2, ::3], base[::-1, 1:], base[:, ::-2],
             np.broadcast_to(f32(1, 5), (6, 5)), np.asfortranarray(base),
             base.astype(">f4")]
    for target in TARGETS:
        exe = tj.compile(g, target=target)
        for v in views:
            other = f32(*v.shape)
            close(exe(v, other), v * 2 + other)
            # A strided view as the output.
            big = np.zeros((v.shape[0] * 2, v.shape[1] * 3), np.float32)
            view = big[::2, ::3]
            exe(v, other, out=view)
            close(view, v * 2 + other)
            assert np.count_nonzero(big) <= view.size
        # Unaligned strides are copied first.
        raw = np.zeros(4 * 6 + 1, np.uint8)[1:].view(np.float32).reshape(2, 3)
        raw[:] = 1.5
        close(exe(raw, raw.copy()), raw * 3)


def _numpy_has_dlpack_1() -> bool:
    try:
        np.zeros(1).__dlpack__(max_version=(1, 0))
        return True
    except TypeError:
        return False


# numpy >= 2.1 exports versioned (DLPack 1.0) capsules; Debian 12's 1.24
# only the legacy ones.
NUMPY_DLPACK_1 = _numpy_has_dlpack_1()


class DLPackOnly:
    """A foreign DLPack producer: only the protocol, backed by numpy."""

    def __init__(self, array: np.ndarray, versioned: bool = True) -> None:
        self.array = array
        self.versioned = versioned
        self.calls = 0

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:
        self.calls += 1
        if self.versioned and max_version is not None and NUMPY_DLPACK_1:
            return self.array.__dlpack__(max_version=max_version)
        # The legacy unversioned capsule: what a producer that cannot give
        # the requested version returns (numpy < 2.1 has no max_version).
        return self.array.__dlpack__()

    def __dlpack_device__(self) -> Any:
        return self.array.__dlpack_device__()


class LegacyProducer(DLPackOnly):
    """A pre-1.0 producer: __dlpack__ takes no max_version."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore
        self.calls += 1
        return self.array.__dlpack__()


_CAPSULE_TARGET = ctypes.c_int(1)


def _other_capsule() -> Any:
    """A PyCapsule that is not a DLPack tensor."""
    new = ctypes.PyDLL(None).PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(_CAPSULE_TARGET), b"not_dlpack", None)


def test_dlpack_inputs() -> None:
    g = tj.Graph("dl")
    x = g.input("x", "f32", ["B", 6])
    y = g.input("y", "f32", [6])
    g.output(x * y + 1.0, "z")
    exe = tj.compile(g)
    xv, yv = f32(4, 6), f32(6)
    want = xv * yv + 1
    before = sys.getrefcount(xv)
    for make in (DLPackOnly, lambda a: DLPackOnly(a, versioned=False),
                 LegacyProducer):
        px = make(xv)
        close(exe(px, yv), want)
        assert px.calls == 1
    # Capsules directly: the legacy protocol, versioned and not.
    yc = (yv.__dlpack__(max_version=(1, 0)) if NUMPY_DLPACK_1
          else yv.__dlpack__())
    close(exe(xv.__dlpack__(), yc), want)
    # A strided array through DLPack keeps its strides.
    t = f32(6, 4).T
    close(exe(DLPackOnly(t), yv), t * yv + 1)
    # The deleters ran: no reference to the arrays is left behind.
    del px
    assert sys.getrefcount(xv) == before, (sys.getrefcount(xv), before)
    # A consumed capsule cannot be used twice.
    cap = xv.__dlpack__()
    exe(cap, yv)
    with raises(tj.InvalidArgumentError, "already consumed"):
        exe(cap, yv)
    # Outputs are numpy arrays, themselves DLPack producers (zero-copy).
    z = exe(DLPackOnly(xv), yv)
    back = np.from_dlpack(z)
    assert np.shares_memory(back, z)
    # out= through DLPack writes into the producer's memory.
    target = np.zeros((4, 6), np.float32)
    exe(xv, yv, out=DLPackOnly(target))
    close(target, want)
    # A producer that refuses to export is an exception, not a crash.
    class Refuses(DLPackOnly):
        def __dlpack__(self, **kw: Any) -> Any:
            raise BufferError("requires grad")
    with raises(tj.InvalidArgumentError, "requires grad"):
        exe(Refuses(xv), yv)
    # A capsule of the wrong kind is rejected before it is read.
    with raises(tj.InvalidArgumentError, "capsule"):
        exe(_other_capsule(), yv)
    # A read-only producer cannot be an output.
    ro = np.zeros((4, 6), np.float32)
    ro.flags.writeable = False
    # (numpy < 2.1 refuses to export it at all, itself.)
    with raises(tj.InvalidArgumentError,
                "read-only" if NUMPY_DLPACK_1 else "readonly"):
        exe(xv, yv, out=DLPackOnly(ro))
    with raises(tj.InvalidArgumentError, "read-only"):
        exe(xv, yv, out=ro)


def test_torch_dlpack_if_available() -> None:
    try:
        import torch  # type: ignore
    except ImportError:
        print("    (torch is not importable: torch DLPack round trip skipped)")
        return
    g = tj.Graph("torch")
    g.output(g.input("x", "f32", ["B", 3]) * 2.0, "y")
    exe = tj.compile(g)
    t = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    y = exe(t)
    # torch in gives torch out (issue 14), on the input's device.
    assert isinstance(y, torch.Tensor), type(y)
    assert y.device == t.device
    close(y.numpy(), t.numpy() * 2)
    out = torch.empty(4, 3)
    exe(t, out=out)
    close(out.numpy(), t.numpy() * 2)
    # A numpy result crosses into torch through DLPack without a copy.
    yn = exe(t.numpy())
    assert isinstance(yn, np.ndarray)
    back = torch.from_dlpack(yn)
    assert back.data_ptr() == yn.ctypes.data


def test_threads_share_an_executable() -> None:
    g = tj.Graph("mt")
    x = g.input("x", "f32", ["B", 16])
    w = g.constant(f32(16, 16))
    g.output(g.tanh(x @ w), "y")
    exe = tj.compile(g, num_threads=1)
    errors: list = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(20):
            xv = rng.standard_normal((int(rng.integers(1, 9)), 16)).astype(
                np.float32)
            try:
                close(exe(xv), g.run_reference(xv), rtol=1e-5, atol=1e-5)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_lifetimes() -> None:
    # The executable outlives its graph; borrowed constants stay alive.
    g = tj.Graph("life")
    x = g.input("x", "f32", [3])
    weights = f32(3)
    g.output(x * g.constant(weights, borrowed=True), "y")
    exe = tj.compile(g)
    want = weights.copy()
    g.close()
    del weights
    xv = f32(3)
    close(exe(xv), xv * want)
    with raises(tj.InvalidArgumentError, "closed"):
        g.text()
    with raises(tj.InvalidArgumentError, "closed"):
        x + x
    exe.close()
    exe.close()  # idempotent
    with raises(tj.InvalidArgumentError, "closed"):
        exe(xv)
    # Closing a context closes what was made in it.
    ctx = tj.Context()
    h = tj.Graph("in_ctx", context=ctx)
    v = h.input("x", "f32", [2])
    h.output(v + 1.0, "y")
    e = tj.compile(h)
    ctx.close()
    assert h.closed and e.closed
    with raises(tj.InvalidArgumentError, "closed"):
        tj.Graph("after", context=ctx)
    with tj.Graph("with") as w:
        w.output(w.input("x", "f32", [1]) * 2.0)
    assert w.closed


def test_retain_compiled() -> None:
    """A closed executable's compiled graph is kept by its context (8 by
    default): compiling the graph again runs no pass; with
    retain_compiled=0 the passes run again."""
    for retain, kept in ((None, True), (0, False)):
        ctx = tj.Context(retain_compiled=retain)
        g = tj.Graph("kept", context=ctx)
        x = g.input("x", "f32", ["B", 8])
        g.output(g.tanh(x @ g.input("w", "f32", [8, 8])) * 0.5, "y")
        e = tj.compile(g)
        assert e.stats.passes_ms > 0
        e.close()
        again = tj.compile(g)
        assert (again.stats.passes_ms == 0) == kept
        xv = np.ones((3, 8), np.float32)
        wv = np.full((8, 8), 0.1, np.float32)
        np.testing.assert_allclose(again(xv, wv),
                                   np.tanh(xv @ wv) * 0.5, rtol=1e-5)
        ctx.close()


def test_diagnostics_callback() -> None:
    seen: list = []
    ctx = tj.Context(diagnostic=lambda sev, msg: seen.append((sev, msg)),
                     log="fusion")
    g = tj.Graph("diag", context=ctx)
    g.output(g.relu(g.input("x", "f32", ["B", 4]) + 1.0), "y")
    exe = tj.compile(g)
    close(exe(np.ones((2, 4), np.float32)), np.full((2, 4), 2.0))
    assert any("fusion" in m for _, m in seen), seen
    assert all(s in ("remark", "warning") for s, _ in seen)
    # A misspelled category: one warning, at context creation (once per
    # process, so only when no earlier test has had one).
    seen.clear()
    tj.Context(diagnostic=lambda sev, msg: seen.append((sev, msg)),
               log="fusion,recompile").close()
    assert all("recompile" in m for _, m in seen), seen


#===----------------------------------------------------------------------===#
# Errors become exceptions, never crashes
#===----------------------------------------------------------------------===#


def test_builder_errors_raise_with_message() -> None:
    g = tj.Graph("bad")
    x = g.input("x", "f32", ["B", 8])
    w = g.input("w", "f32", [5, 3])
    with raises(tj.InvalidArgumentError, r"matmul.*8.*5|matmul.*5.*8") as c:
        x @ w
    err = c[0]
    assert err.code == "INVALID_ARGUMENT" and err.code_value == 1
    assert isinstance(err, ValueError) and isinstance(err, tj.TensorJitError)
    assert "matmul" in err.message
    # The error is sticky: later calls and finalize report it again.
    with raises(tj.InvalidArgumentError, "matmul"):
        g.relu(x)
    with raises(tj.InvalidArgumentError, "matmul"):
        g.finalize()
    assert isinstance(g.status(), tj.InvalidArgumentError)
    g2 = tj.Graph("dt")
    with raises(tj.InvalidArgumentError, "exp"):
        g2.exp(g2.input("i", "i32", [3]))
    g3 = tj.Graph("noout")
    g3.input("x", "f32", [1])
    with raises(tj.InvalidArgumentError, "output"):
        g3.finalize()
    with raises(tj.InvalidArgumentError):
        tj.Graph("dup").input("x", "f32", [1]).graph.input("x", "f32", [2])
    with raises(tj.InvalidArgumentError, "C identifier|name"):
        tj.Graph("nm").input("not an identifier", "f32", [1])


def test_wrong_python_arguments() -> None:
    g = tj.Graph("args")
    x = g.input("x", "f32", [2, 3])
    other = tj.Graph("other")
    good = tj.Graph("good")
    good.output(good.input("x", "f32", [2]) * 2.0, "y")
    y = other.input("y", "f32", [2, 3])
    bad_calls = [
        (tj.ArgumentTypeError, lambda: g.input("z", "f32", "B")),
        (tj.ArgumentTypeError, lambda: g.input("z", "f32", [1.5])),
        (tj.ArgumentTypeError, lambda: g.input(3, "f32", [1])),
        (tj.InvalidArgumentError, lambda: g.input("z", "complex", [1])),
        (tj.InvalidArgumentError, lambda: g.input("z", np.complex64, [1])),
        (tj.ArgumentTypeError, lambda: g.input("z", None, [1])),
        (tj.InvalidArgumentError, lambda: g.input("z", "f32", [1] * 9)),
        (tj.InvalidArgumentError, lambda: g.input("z", "f32", [2**70])),
        (tj.InvalidArgumentError, lambda: g.input("z\0", "f32", [1])),
        (tj.InvalidArgumentError, lambda: g.input("z", "f32", ["B-1"])),
        (tj.InvalidArgumentError, lambda: x + y),
        (tj.ArgumentTypeError, lambda: x + "a"),
        (tj.ArgumentTypeError, lambda: g.add(1, 2)),
        (tj.ArgumentTypeError, lambda: g.relu(np.ones(3))),
        (tj.InvalidArgumentError, lambda: g.transpose(x, [0])),
        (tj.InvalidArgumentError, lambda: g.slice(x, [0], [1])),
        (tj.InvalidArgumentError, lambda: g.pad(x, [0, 0, 0], [0, 0, 0])),
        (tj.ArgumentTypeError, lambda: g.sum(x, "0")),
        (tj.InvalidArgumentError, lambda: g.sum(x, [2**40])),
        (tj.ArgumentTypeError, lambda: g.concat(x)),
        (tj.ArgumentTypeError, lambda: g.output(np.ones(2))),
        (tj.InvalidArgumentError, lambda: g.cast(x, "u128")),
        (tj.ArgumentTypeError, lambda: g.scalar("f32", "1")),
        (tj.InvalidArgumentError, lambda: g.constant(np.ones(2, np.complex128))),
        (tj.ArgumentTypeError, lambda: bool(x)),
        (tj.ArgumentTypeError, lambda: tj.Graph(name=None)),
        (tj.ArgumentTypeError, lambda: tj.Graph("c", context=object())),
        (tj.ArgumentTypeError, lambda: tj.compile(42)),
        (tj.InvalidArgumentError, lambda: tj.compile(good, target="tpu")),
        (tj.InvalidArgumentError, lambda: tj.compile(good, specialize="x")),
        (tj.ArgumentTypeError, lambda: tj.compile(good, num_threads="2")),
        (tj.InvalidArgumentError, lambda: tj.compile(good, num_threads=-1)),
        (tj.InvalidArgumentError, lambda: tj.compile(good, pipeline="nope")),
        (tj.ArgumentTypeError, lambda: tj.compile(good, cache_dir=3)),
        (tj.ArgumentTypeError, lambda: tj.Context(log=3)),
        (tj.InvalidArgumentError, lambda: tj.Context(dump_dir="a\0b")),
        (tj.ArgumentTypeError, lambda: tj.Context(retain_compiled="8")),
        (tj.InvalidArgumentError, lambda: tj.Context(retain_compiled=65)),
        # Last: a C-level error recorded on g (f64 constant + f32 value).
        (tj.InvalidArgumentError, lambda: g.add(x, g.constant(np.ones(3)))),
        (tj.InvalidArgumentError, lambda: tj.Graph.parse("func @f(")),
        (tj.ArgumentTypeError, lambda: tj.Graph.parse(b"bytes")),
    ]
    for i, (exc, call) in enumerate(bad_calls):
        try:
            call()
        except exc:
            continue
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"case {i}: expected {exc.__name__}, got "
                                 f"{type(e).__name__}: {e}") from e
        raise AssertionError(f"case {i}: expected {exc.__name__}, nothing "
                             f"raised")


def test_parse_error_has_position() -> None:
    with raises(tj.InvalidArgumentError, r"bad\.tj:\d+:\d+"):
        tj.Graph.parse("func @f(%x: f32[2]) {\n  %1 = frobnicate %x : "
                       "f32[2]\n  return %1\n}\n", filename="bad.tj")


def test_run_errors() -> None:
    g = tj.Graph("run")
    x = g.input("x", "f32", ["B", 4])
    w = g.input("w", "f32", [4, 2])
    g.output(x @ w, "y")
    xv, wv = f32(3, 4), f32(4, 2)
    for target in TARGETS:
        exe = tj.compile(g, target=target)
        with raises(tj.InvalidArgumentError, r"w.*dim|dim.*w"):
            exe(xv, f32(5, 2))
        with raises(tj.InvalidArgumentError, r"f64|dtype"):
            exe(xv.astype(np.float64), wv)
        with raises(tj.InvalidArgumentError, r"rank"):
            exe(f32(3, 4, 1), wv)
        with raises(tj.InvalidArgumentError, "takes 2 inputs"):
            exe(xv, wv, wv)
        with raises(tj.InvalidArgumentError, "missing inputs w"):
            exe(xv)
        with raises(tj.InvalidArgumentError, "no input named"):
            exe(xv, q=wv)
        with raises(tj.InvalidArgumentError, "given twice"):
            exe(xv, wv, x=xv)
        with raises(tj.InvalidArgumentError, "no tensorjit equivalent"):
            exe(xv.astype(np.complex64), wv)
        with raises(tj.InvalidArgumentError, "is u32 but the graph says"):
            exe(xv.astype(np.uint32), wv)
        with raises(tj.ArgumentTypeError):
            exe("x", wv)
        with raises(tj.ArgumentTypeError):
            exe(None, wv)
        with raises(tj.ArgumentTypeError):
            exe(object(), wv)
        with raises(tj.InvalidArgumentError, "rank 9"):
            exe(np.zeros((1,) * 9, np.float32), wv)
        with raises(tj.InvalidArgumentError, r"output.*y"):
            exe(xv, wv, out=np.empty((4, 2), np.float32))
        with raises(tj.InvalidArgumentError, r"f64|dtype|rank"):
            exe(xv, wv, out=np.empty((3, 2), np.float64))
        with raises(tj.ArgumentTypeError):
            exe(xv, wv, out=[[0.0]])
        with raises(tj.InvalidArgumentError, "makes 1 outputs"):
            exe(xv, wv, out=[np.empty((3, 2), np.float32)] * 2)
        buf = np.zeros(64, np.float32)
        with raises(tj.InvalidArgumentError, "overlaps input"):
            exe(buf[:12].reshape(3, 4), wv, out=buf[6:12].reshape(3, 2))
        with raises(tj.ArgumentTypeError):
            exe.run(42)
        # Lists convert to the declared dtype.
        close(exe(xv.tolist(), wv.tolist()), xv @ wv, rtol=1e-5)
        # Zero-size batches are fine.
        assert exe(f32(0, 4), wv).shape == (0, 2)
    # max over an empty axis is -inf; argmax over one is an error.
    h = tj.Graph("empty")
    h.output(h.max(h.input("x", "f32", ["B", 3]), 0), "m")
    h2 = tj.Graph("empty_arg")
    h2.output(h2.argmax(h2.input("x", "f32", ["B", 3]), 0), "a")
    for target in TARGETS:
        close(tj.compile(h, target=target)(f32(0, 3)), np.full(3, -np.inf))
        with raises(tj.InvalidArgumentError, r"argmax.*empty"):
            tj.compile(h2, target=target)(f32(0, 3))
    # gather clamps out-of-range indices; an empty axis has nothing to pick.
    k = tj.Graph("gather_oob")
    k.output(k.gather(k.input("a", "f32", ["N"]), k.input("i", "i64", [2])))
    for target in TARGETS:
        kc = tj.compile(k, target=target)
        close(kc(np.array([1, 2, 3], np.float32), np.array([7, -5])),
              np.array([3, 1], np.float32))
        with raises(tj.InvalidArgumentError, r"gather.*empty"):
            kc(f32(0), np.array([0, 7]))
    with raises(tj.InvalidArgumentError, "B"):
        g.scoreboard()
    # The CUDA target: UNSUPPORTED without a driver; with one, it must agree
    # with the reference.
    tiny = tj.Graph("tiny")
    tiny.output(tiny.exp(tiny.input("t", "f32", ["B", 3])), "e")
    try:
        cu = tj.compile(tiny, target="cuda")
    except tj.UnsupportedError:
        pass
    else:
        tv = f32(2, 3)
        close(cu(tv), np.exp(tv), rtol=1e-5, atol=1e-6)


def test_op_table() -> None:
    # The library's op table (lib/ops.def) is the package's op list: every
    # op has a Graph method named for its builder, and every builder of a
    # shared form is declared from the table.
    ops = _lib.ops()
    names = [name for name, _, _ in ops]
    assert len(ops) > 50 and len(set(names)) == len(names), names
    assert ("not", "logical_not", _lib.OP_FORM_UNARY) in ops
    assert ("sum", "sum", _lib.OP_FORM_REDUCE) in ops
    assert ("matmul", "matmul", _lib.OP_FORM_BINARY) in ops
    assert ("cast", "cast", 0) in ops
    L = _lib.lib()
    for name, builder, form in ops:
        assert callable(getattr(tj.Graph, builder, None)), (name, builder)
        argtypes = getattr(L, "tj_graph_" + builder).argtypes
        assert argtypes, builder
        if form:
            assert len(argtypes) == {_lib.OP_FORM_UNARY: 2,
                                     _lib.OP_FORM_BINARY: 3,
                                     _lib.OP_FORM_REDUCE: 5}[form], builder
    assert L.tj_op_name(len(ops)) is None and L.tj_op_form(-1) == 0


def test_scoreboard() -> None:
    g = tj.Graph("score")
    x = g.input("x", "f32", ["B", 64])
    w = g.input("w", "f32", [64, 128])
    b = g.input("b", "f32", [128])
    g.output(g.gelu(x @ w + b, approximate=True), "y")
    sb = g.scoreboard(B=8)
    assert [r.stage for r in sb.rows] == list(
        ("eager", "canonicalize", "decompose", "fuse", "memplan"))
    assert sb.row("fuse").kernels < sb.row("eager").kernels
    assert sb.activation_bytes == 8 * 128 * 4
    assert "memplan" in str(sb)


def test_profile() -> None:
    g = tj.Graph("prof")
    x = g.input("x", "f32", ["B", 64])
    w = g.input("w", "f32", [64, 128])
    b = g.input("b", "f32", [128])
    g.output(g.softmax(g.gelu(x @ w + b, approximate=True), 1), "y")
    exe = tj.compile(g)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((16, 64)).astype(np.float32)
    ws = rng.standard_normal((64, 128)).astype(np.float32) * 0.1
    bs = rng.standard_normal(128).astype(np.float32)
    y = np.empty((16, 128), np.float32)
    p = exe.profile(xs, ws, bs, runs=5, out=y)
    want = g.run_reference(xs, ws, bs)
    assert np.allclose(y, want, rtol=1e-4, atol=1e-5)
    kernels = [e for e in p.entries if e.kind == "kernel"]
    assert len(kernels) == exe.stats.num_kernels
    assert all(e.name for e in kernels)
    assert {"copy", "setup"} <= {e.kind for e in p.entries}
    assert p.runs == 5 and p.target == "x86" and p.graph == "prof"
    assert p.accounted_ms <= p.run_ms * 1.0001
    assert p.accounted_ms >= 0.9 * p.run_ms
    assert abs(sum(e.share for e in p.entries) - p.accounted_ms / p.run_ms) \
        < 1e-6
    assert kernels[0].name in str(p) and "@prof on x86" in str(p)
    gemm = [e for e in kernels if e.detail == "gemm"]
    assert gemm and gemm[0].flops >= 2 * 16 * 64 * 128


#===----------------------------------------------------------------------===#
# Packaging: pip install ./python bundles the library
#===----------------------------------------------------------------------===#


def test_pip_install_bundles_library() -> None:
    import importlib.util
    if importlib.util.find_spec("pip") is None:
        print("    (pip is not installed: pip install ./python skipped)")
        return
    lib_path = os.environ.get("TJ_LIBRARY") or _lib.library_path()
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "site")
        env = dict(os.environ, TJ_LIBRARY=lib_path,
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
        # Offline: the in-tree build backend needs nothing from an index.
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index",
             "--no-deps", "--no-cache-dir", "--target", target,
             os.path.join(ROOT, "python")],
            env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        bundled = [f for f in os.listdir(os.path.join(target, "tensorjit"))
                   if f.startswith("libtensorjit.so")]
        assert bundled, os.listdir(os.path.join(target, "tensorjit"))
        env.pop("TJ_LIBRARY")
        env["PYTHONPATH"] = target
        code = ("import numpy as np, tensorjit as tj\n"
                "g = tj.Graph('p'); g.output(g.input('x','f32',['B'])*2.0)\n"
                "print(tj.library_path())\n"
                "print(tj.compile(g)(np.arange(3, dtype=np.float32)))\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env,
                              cwd=tmp, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith(target), lines
        assert lines[1] == "[0. 2. 4.]", lines


#===----------------------------------------------------------------------===#
# Plain runner
#===----------------------------------------------------------------------===#


def main() -> int:
    only = sys.argv[1] if len(sys.argv) > 1 else None
    tests = [(n, f) for n, f in sorted(globals().items())
             if n.startswith("test_") and callable(f)
             and (only is None or only in n)]
    failed = 0
    for name, fn in tests:
        start = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
            continue
        print(f"ok   {name} ({time.perf_counter() - start:.2f}s)")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())


def test_verify_clean_and_given_inputs() -> None:
    g = tj.Graph.parse("""
func @f[B](%x: f32[B,16], %w: f32[16,8]) {
  %1 = matmul %x, %w : f32[B,8]
  %2 = relu %1 : f32[B,8]
  %3 = mul %2, %2 : f32[B,8]
  %4 = sum %3 {axes=[1]} : f32[B]
  return %4 as "y"
}
""")
    exe = tj.compile(g, cache_dir="")
    r = exe.verify(symbols={"B": 4}, seed=3, edge_values=False)
    assert r.verdict == "clean" and r.ok, r.text
    assert r.boundaries and r.first_bad is None and r.blamed_pass == ""
    assert r.target == "x86"
    # The boundaries, then the output against the caller's graph.
    assert len(r.values) >= 2 and r.values[-1].against_caller
    assert r.values[-1].output_name == "y"
    assert "verdict: clean" in r.text
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    w = np.ones((16, 8), dtype=np.float32)
    r2 = exe.verify(x, w, rtol={"f32": 1e-3})
    assert r2.ok and r2.values[0].rtol == pytest.approx(1e-3), r2.text
    with pytest.raises(tj.InvalidArgumentError, match="symbol"):
        exe.verify()
    with pytest.raises(tj.InvalidArgumentError, match="no dtype"):
        exe.verify(symbols={"B": 2}, rtol={"f33": 1.0})


def test_verify_reference_target_outputs_only() -> None:
    g = tj.Graph.parse("""
func @f(%x: f32[4]) {
  %1 = exp %x : f32[4]
  return %1 as "y"
}
""")
    r = tj.compile(g, target="reference").verify()
    assert r.ok and not r.boundaries and len(r.values) == 1


def test_ladder_clean() -> None:
    g = tj.Graph.parse("""
func @f[B](%x: f32[B,16], %w: f32[16,8]) {
  %1 = matmul %x, %w : f32[B,8]
  %2 = softmax %1 {axis=1} : f32[B,8]
  return %2 as "y"
}
""")
    r = tj.ladder(g, symbols={"B": 3}, edge_values=False)
    assert r.first_diverging is None and r.blame == "", r.text
    assert [x.level for x in r.rungs] == ["decomposed", "unfused", "fused",
                                          "full", "specialized"]
    assert all(x.ran and not x.diverges for x in r.rungs), r.text
    assert r.bad_rewrite == -1 and r.blamed_pass == ""
    assert "every rung agrees with the reference" in r.text
    with pytest.raises(tj.InvalidArgumentError, match="symbol"):
        tj.ladder(g)
    with pytest.raises(tj.InvalidArgumentError, match="unknown target"):
        tj.ladder(g, target="tpu")
