"""The ops of issue 15's task topk from Python, against numpy: topk, sort and
argsort (stable; NaN largest; ties in index order), einsum by decomposition
(every kind of equation, ellipsis, implicit output), asin/acos/atan, on x86
and the reference; and their errors."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402

TARGETS = ("x86", "reference")


def np_topk(x: np.ndarray, k: int, axis: int, largest: bool):
    """numpy's stable argsort keeps ties in index order; for largest, sort
    by -x with NaN (the largest) as -inf, so that it comes first."""
    if largest:
        key = np.where(np.isnan(x), -np.inf, -x.astype(np.float64))
        order = np.argsort(key, axis=axis, kind="stable")
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


def tied(rng: np.random.Generator, shape, nans: bool = True) -> np.ndarray:
    x = np.floor(rng.uniform(-3, 4, shape)).astype(np.float32)
    if nans:
        x[rng.uniform(size=shape) < 0.1] = np.nan
    return x


def test_topk_like_numpy() -> None:
    rng = np.random.default_rng(15)
    x = tied(rng, (5, 37))
    g = tj.Graph("topk")
    gx = g.input("x", "f32", [5, 37])
    for k, largest in ((1, True), (4, True), (37, False), (6, False)):
        v, i = g.topk(gx, k, axis=1, largest=largest)
        g.output(v, f"v{k}{int(largest)}")
        g.output(i, f"i{k}{int(largest)}")
    for target in TARGETS:
        got = tj.compile(g, target=target).run([x])
        for n, (k, largest) in enumerate(((1, True), (4, True), (37, False),
                                          (6, False))):
            wv, wi = np_topk(x, k, 1, largest)
            assert got[2 * n + 1].dtype == np.int64
            assert np.array_equal(got[2 * n + 1], wi), (target, k, largest)
            assert np.array_equal(got[2 * n], wv, equal_nan=True)


def test_sort_and_argsort_like_numpy() -> None:
    rng = np.random.default_rng(16)
    x = tied(rng, (4, 9, 6))
    a = rng.integers(-3, 3, size=(7, 5)).astype(np.int32)
    g = tj.Graph("sort")
    B = g.symbol("B")
    gx = g.input("x", "f32", [4, 9, B])
    ga = g.input("a", "i32", [7, 5])
    v, i = g.sort(gx, axis=1)
    g.output(v, "v")
    g.output(i, "i")
    g.output(g.argsort(ga, axis=0), "ia")
    v2, _ = g.sort(gx, axis=-1, descending=True)
    g.output(v2, "vd")
    for target in TARGETS:
        got = tj.compile(g, target=target).run([x, a])
        assert np.array_equal(got[0], np.sort(x, axis=1), equal_nan=True)
        assert np.array_equal(got[1], np.argsort(x, axis=1, kind="stable"))
        assert np.array_equal(got[2], np.argsort(a, axis=0, kind="stable"))
        want = np_topk(x, 6, 2, True)[0]
        assert np.array_equal(got[3], want, equal_nan=True)


def test_topk_errors() -> None:
    g = tj.Graph("topk_errors")
    x = g.input("x", "f32", [3, 5])
    with pytest.raises(tj.InvalidArgumentError, match="exceeds the length"):
        g.topk(x, 6, axis=1)
    g = tj.Graph("topk_errors")
    B = g.symbol("B")
    x = g.input("x", "f32", [B])
    with pytest.raises(tj.InvalidArgumentError, match="symbolic"):
        g.topk(x, 2, axis=0)


EINSUM = [
    ("ij,jk->ik", [(3, 5), (5, 4)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 2)]),
    ("ii->", [(5, 5)]),
    ("ii->i", [(4, 4)]),
    ("iij->ji", [(3, 3, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]),
    ("...ij,...jk", [(1, 2, 3), (5, 1, 3, 4)]),
    ("ij,kj", [(2, 6), (3, 6)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("i,i", [(7,), (7,)]),
    ("ij->", [(3, 4)]),
    ("abc,cd->", [(2, 3, 4), (4, 2)]),
    ("Ab,bA->A", [(3, 4), (4, 3)]),
    ("i...->...", [(3, 2, 4)]),
]


def test_einsum_like_numpy() -> None:
    rng = np.random.default_rng(17)
    for eq, shapes in EINSUM:
        xs = [rng.uniform(-1, 1, s).astype(np.float64) for s in shapes]
        g = tj.Graph("einsum")
        vs = [g.input(f"x{i}", "f64", list(s)) for i, s in enumerate(shapes)]
        g.output(g.einsum(eq, *vs), "y")
        want = np.einsum(eq, *xs)
        for target in TARGETS:
            got = tj.compile(g, target=target).run(xs)[0]
            assert got.shape == want.shape, (eq, target, got.shape)
            assert np.allclose(got, want, rtol=1e-12, atol=1e-12), (eq, target)


def test_einsum_errors() -> None:
    g = tj.Graph("einsum_errors")
    x = g.input("x", "f32", [2, 3])
    for eq, what in (("ij,jk", "more terms"), ("ij->ik", "no operand"),
                     ("i->i", "rank"), ("ij->i j j", "repeated")):
        g = tj.Graph("einsum_errors")
        x = g.input("x", "f32", [2, 3])
        with pytest.raises(tj.InvalidArgumentError, match=what):
            g.einsum(eq, x)


def test_inverse_trig_like_numpy() -> None:
    rng = np.random.default_rng(18)
    x = rng.uniform(-1, 1, (7, 33)).astype(np.float32)
    t = rng.uniform(-50, 50, (7, 33)).astype(np.float32)
    g = tj.Graph("trig")
    gx = g.input("x", "f32", [7, 33])
    gt = g.input("t", "f32", [7, 33])
    g.output(g.asin(gx), "a")
    g.output(g.acos(gx), "b")
    g.output(g.atan(gt), "c")
    for target in TARGETS:
        got = tj.compile(g, target=target).run([x, t])
        want = [np.arcsin(x.astype(np.float64)), np.arccos(x.astype(np.float64)),
                np.arctan(t.astype(np.float64))]
        for a, b in zip(got, want):
            # 2 f32 ulps (jit/vecmath.h's bound) at most.
            assert np.allclose(a, b, rtol=3e-7, atol=3e-7), target


def test_long_rows_on_the_host_kernel() -> None:
    """Rows past 256 with k > 16, and a sort along a symbolic axis, run on
    argtopk's native host kernel (a host kernel, not a graph break), with
    numpy's order: NaN largest, ties in index order."""
    rng = np.random.default_rng(7)
    x = tied(rng, (3, 5000))
    g = tj.Graph("vocab")
    gx = g.input("x", "f32", [3, 5000])
    v, i = g.topk(gx, 50, 1, True)
    g.output(v, "v")
    g.output(i, "i")
    exe = tj.compile(g, target="x86")
    got_v, got_i = exe(x)
    want_v, want_i = np_topk(x, 50, 1, True)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, want_v)
    assert exe.stats.num_host_kernels == 1
    assert exe.stats.num_graph_breaks == 0
    s = tj.Graph("symbolic")
    sx = s.input("x", "f32", [2, "L"])
    s.output(s.argsort(sx, 1, descending=True), "i")
    sexe = tj.compile(s, target="x86")
    y = tied(rng, (2, 777))
    _, want = np_topk(y, 777, 1, True)
    np.testing.assert_array_equal(sexe(y), want)
    assert sexe.stats.num_host_kernels == 1
