"""Long rows: the accuracy of f32 row sums at 2^24 elements against an f64
sum, and softmax over rows of 1..65536 elements (lengths off multiples of
32, rows masked with -inf, rows entirely -inf) against the reference
interpreter, on x86 and, where a GPU is present, CUDA (the CUDA cases skip
without one; the lead runs them on the GPU machine).

Bounds: a serial f32 sum of n terms may be off by about n eps sum |x|;
blocked/pairwise (x86: jit/emit_reduce.c) and blocked + compensated
(CUDA: jit/emit_nvptx.c, kSumBlock) partial sums keep it within a few
hundred eps at any length. The data is 0.1f repeated (identical terms round
the same way inside a binade, so a serial chain's error grows linearly:
about 1500 eps at 16384 terms a lane) and uniform [0, 1).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402

EPS = 2.0 ** -24
BOUND_EPS = 128  # times sum |x|
_cuda_ok = None


def cuda_available() -> bool:
    global _cuda_ok
    if _cuda_ok is None:
        g = tj.Graph("probe")
        a = g.input("a", "f32", [1])
        g.output(a + a, "y")
        try:
            tj.compile(g, "cuda").close()
            _cuda_ok = True
        except (tj.UnsupportedError, tj.BackendError):
            _cuda_ok = False
    return _cuda_ok


def compile_for(g, target):
    if target == "cuda" and not cuda_available():
        pytest.skip("no CUDA device")
    return tj.compile(g, target, num_threads=2) if target == "x86" else \
        tj.compile(g, target)


TARGETS = ["x86", "cuda"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("data", ["tenths", "uniform"])
@pytest.mark.parametrize("rows", [1, 3])
def test_long_row_sum_accuracy(target, data, rows):
    n = 1 << 24 if rows == 1 else 1 << 22
    if data == "tenths":
        x = np.full((rows, n), 0.1, np.float32)
    else:
        x = np.random.default_rng(24).random((rows, n), dtype=np.float32)
    g = tj.Graph("long_sum")
    a = g.input("x", "f32", [rows, "N"])
    g.output(a.sum(1), "s")
    g.output(a.mean(1), "m")
    exe = compile_for(g, target)
    s, m = exe(x)
    want = x.astype(np.float64).sum(axis=1)
    absum = np.abs(x.astype(np.float64)).sum(axis=1)
    err = np.abs(s.astype(np.float64) - want)
    print(f"{target} {data} rows={rows}: max error "
          f"{np.max(err / (EPS * absum)):.2f} eps * sum|x|")
    assert np.all(err <= BOUND_EPS * EPS * absum), (
        f"{target}: error {err / (EPS * absum)} eps * sum|x| over "
        f"{n} elements; bound {BOUND_EPS}")
    err_m = np.abs(m.astype(np.float64) - want / n)
    assert np.all(err_m <= (BOUND_EPS + 2) * EPS * absum / n)


def softmax_ref(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):  # rows of -inf: NaN, as intended
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


LENGTHS = [1, 2, 31, 32, 33, 100, 255, 1000, 1025, 4096, 4097, 8191, 32768,
           65536]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_softmax_rows_of_every_length(target, dtype):
    rng = np.random.default_rng(7)
    for n in LENGTHS:
        rows = 5
        x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
        mask = np.zeros((rows, n), np.float32)
        mask[1, ::3] = -np.inf           # partly masked
        mask[2, :] = -np.inf             # all masked: NaN, as the reference
        mask[3, n // 2:] = -np.inf       # a masked tail (causal-like)
        x[4, :] = 0.0                    # a constant row
        g = tj.Graph("masked_softmax")
        a = g.input("x", dtype, ["R", "N"])
        mk = g.input("mask", dtype, ["R", "N"])
        g.output(g.softmax(a * 0.5 + mk, -1), "y")
        exe = compile_for(g, target)
        if dtype == "bf16":
            xa, ma = tj.f32_to_bf16(x), tj.f32_to_bf16(mask)
            got = tj.bf16_to_f32(exe(xa, ma))
            ref = tj.bf16_to_f32(g.run_reference(xa, ma))
            xs, ms = tj.bf16_to_f32(xa), tj.bf16_to_f32(ma)
            rtol, atol = 2 ** -7, 2 ** -9
        else:
            got = exe(x, mask)
            ref = g.run_reference(x, mask)
            xs, ms = x, mask
            rtol, atol = 1e-5, 1e-6
        want = softmax_ref(xs * 0.5 + ms)
        dead = np.all(np.isneginf(mask), axis=1)  # rows entirely masked
        assert dead[2]
        assert np.array_equal(np.isnan(got), np.isnan(ref)), n
        assert np.all(np.isnan(got[dead])), n  # exp(-inf - -inf), as ref
        assert not np.any(np.isnan(got[~dead])), n
        ok = ~np.isnan(ref)
        np.testing.assert_allclose(got[ok], ref[ok], rtol=rtol, atol=atol,
                                   err_msg=f"{target} {dtype} n={n}")
        np.testing.assert_allclose(got[ok], want[ok], rtol=rtol * 2,
                                   atol=atol * 2,
                                   err_msg=f"{target} {dtype} n={n} vs f64")
        # Masked entries of live rows are exactly 0; live rows sum to 1.
        live = ~dead
        assert np.all(got[live][np.isneginf(mask[live])] == 0), n
        sums = got[live].astype(np.float64).sum(axis=1)
        np.testing.assert_allclose(sums, 1.0, rtol=max(rtol, 1e-5) * 4)
