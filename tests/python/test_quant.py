"""The quantization dtypes (issue 17) from Python: u8 and the float8
dtypes map to numpy (float8 as uint8 bits without ml_dtypes), casts agree
with a numpy model of ONNX's rounding (nearest even, saturating), and u8
arithmetic wraps like numpy's uint8, on x86 and the reference."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402
from tensorjit.dtypes import DType, dtype_of, numpy_dtype  # noqa: E402

TARGETS = ("x86", "reference")


def f8_values(dtype: DType) -> np.ndarray:
    """The value of every float8 pattern (numpy model of the formats)."""
    mant_bits, bias = (3, 7) if dtype == DType.F8E4M3 else (2, 15)
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> mant_bits) & ((1 << (7 - mant_bits)) - 1)
    m = b & ((1 << mant_bits) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mant_bits),
                   (m + 2 ** mant_bits) * 2.0 ** (e - bias - mant_bits))
    v = sign * mag
    if dtype == DType.F8E4M3:
        v[(b & 0x7F) == 0x7F] = np.nan
    else:
        v[(b & 0x7F) == 0x7C] = sign[(b & 0x7F) == 0x7C] * np.inf
        v[(b & 0x7F) > 0x7C] = np.nan
    return v


def f8_round(x: np.ndarray, dtype: DType) -> np.ndarray:
    """x rounded to the nearest finite float8 value, ties to the even
    pattern, saturating at +-max (ONNX Cast, saturate=1); NaN stays."""
    v = f8_values(dtype)
    finite = np.isfinite(v) & (np.arange(256) < 0x80)  # magnitudes
    mags, pats = v[finite], np.arange(256)[finite]
    a = np.minimum(np.nan_to_num(np.abs(x), nan=0.0), mags.max())
    d = np.abs(a[:, None] - mags[None, :])
    best = d.min(axis=1, keepdims=True)
    cand = np.where(d == best, pats[None, :], 1 << 20)
    even = np.where(cand % 2 == 0, cand, 1 << 20).min(axis=1)
    pat = np.where(even < (1 << 20), even, cand.min(axis=1))
    out = np.copysign(v[pat], x)
    return np.where(np.isnan(x), np.nan, out)


def test_numpy_mapping() -> None:
    assert dtype_of(np.uint8) == DType.U8
    assert dtype_of("u8") == DType.U8 and DType.U8.is_integer
    assert dtype_of("float8_e4m3fn") == DType.F8E4M3
    assert DType.F8E5M2.itemsize == 1 and DType.F8E5M2.is_float8
    assert str(DType.F8E4M3) == "f8e4m3"
    assert numpy_dtype(DType.U8) == np.dtype(np.uint8)


def test_float8_casts_round_like_onnx() -> None:
    rng = np.random.default_rng(17)
    for dtype in (DType.F8E4M3, DType.F8E5M2):
        v = f8_values(dtype)
        fin = v[np.isfinite(v)]
        srt = np.unique(fin)
        mids = (srt[1:] + srt[:-1]) / 2  # every tie
        x = np.concatenate([fin, mids, rng.normal(0, 30, 500),
                            [np.inf, -np.inf, np.nan, 1e9, -1e9, 470.0]])
        x = x.astype(np.float32)
        g = tj.Graph("f8")
        inp = g.input("x", "f32", [x.size])
        q = g.cast(inp, dtype)
        g.output(g.cast(q, "f32"), "y")
        g.output(q, "bits")
        want = f8_round(x.astype(np.float64), dtype).astype(np.float32)
        for target in TARGETS:
            exe = tj.compile(g, target=target)
            y, bits = exe.run([x])
            assert np.array_equal(y, want, equal_nan=True), (target, dtype)
            assert bits.dtype.itemsize == 1


def test_u8_wraps_like_numpy() -> None:
    x = np.arange(256, dtype=np.uint8)
    g = tj.Graph("u8")
    inp = g.input("x", "u8", [256])
    y = g.mul(g.add(inp, g.scalar("u8", 200)), g.scalar("u8", 3))
    g.output(g.div(y, g.scalar("u8", 7)), "y")
    with np.errstate(over="ignore"):
        want = ((x + np.uint8(200)) * np.uint8(3)) // np.uint8(7)
    for target in TARGETS:
        (got,) = tj.compile(g, target=target).run([x])
        assert got.dtype == np.uint8 and np.array_equal(got, want), target


def test_quantize_dequantize_like_numpy() -> None:
    # quant2 (issue 17): per-axis u8 with zero points and blocked int4
    # against numpy's ONNX formulas, on the reference and on x86.
    rng = np.random.default_rng(17)
    x = rng.uniform(-3, 3, (5, 8)).astype(np.float32)
    s = rng.uniform(0.01, 0.05, 8).astype(np.float32)
    z = rng.integers(100, 150, 8).astype(np.uint8)
    sb = rng.uniform(0.2, 0.5, (5, 2)).astype(np.float32)
    g = tj.Graph("qdq")
    xv = g.input("x", "f32", [5, 8])
    q = g.quantize(xv, s, z, dtype="u8", axis=1)
    g.output(q, "q")
    g.output(g.dequantize(q, s, z, axis=1), "y")
    q4 = g.quantize(xv, sb, None, axis=1, block_size=4, int4="int4")
    g.output(q4, "q4")
    g.output(g.dequantize(q4, sb, None, axis=1, block_size=4, int4="int4"),
             "y4")
    want_q = np.clip(np.rint(x / s) + z.astype(np.float32), 0, 255)
    want_y = (want_q - z.astype(np.float32)) * s
    sbe = np.repeat(sb, 4, axis=1)
    v4 = np.clip(np.rint(x / sbe), -8, 7).astype(np.int32)
    nib = (v4 & 15).astype(np.uint8)
    want_q4 = nib[:, 0::2] | (nib[:, 1::2] << 4)
    for target in ("reference", "x86"):
        got_q, got_y, got_q4, got_y4 = tj.compile(g, target=target).run([x])
        np.testing.assert_array_equal(got_q, want_q.astype(np.uint8))
        np.testing.assert_array_equal(got_y, want_y.astype(np.float32))
        np.testing.assert_array_equal(got_q4, want_q4)
        np.testing.assert_array_equal(got_y4,
                                      (v4 * sbe).astype(np.float32))


def _capstone(w: np.ndarray, b: np.ndarray) -> "tj.Graph":
    g = tj.Graph("capstone")
    x = g.input("x", "f32", ["B", w.shape[0]])
    g.output(g.gelu(g.add(g.matmul(x, g.constant(w)), g.constant(b))), "y")
    return g


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def test_quantize_weights_and_calibrate() -> None:
    # qfold (issue 17): tj_graph_quantize_weights and tj_calibrate from
    # Python; the weights' numpy model (symmetric, round half to even) and
    # the capstone's accuracy against f32 on x86.
    rng = np.random.default_rng(18)
    w = rng.normal(0, 0.1, (256, 96)).astype(np.float32)
    b = rng.normal(0, 0.5, 96).astype(np.float32)
    xs = [rng.normal(0, 2, (8, 256)).astype(np.float32) for _ in range(3)]
    g = _capstone(w, b)
    want = tj.compile(g, target="reference")(xs[0])
    for fmt, group, floor in (("int8", 128, 0.999), ("int4", 128, 0.99),
                              ("int4", 32, 0.99)):
        q = tj.quantize_weights(g, fmt, group_size=group)
        got = tj.compile(q, target="x86")(xs[0])
        ref = tj.compile(q, target="reference")(xs[0])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        assert _cosine(got, want) >= floor
    # int8 per channel: the numpy model of the dequantized weight.
    s = np.abs(w).max(axis=0) / np.float32(127)
    wq = np.clip(np.rint(w / s), -128, 127) * s
    gw = tj.Graph("w")
    x = gw.input("x", "f32", [1, 256])
    gw.output(gw.matmul(x, gw.constant(w)), "y")
    qw = tj.quantize_weights(gw, "int8")
    eye = np.zeros((1, 256), np.float32)
    eye[0, 3] = 1
    np.testing.assert_allclose(tj.compile(qw, target="reference")(eye)[0],
                               wq[3], rtol=1e-6)
    # Static activation QDQ: deterministic, accurate on a held-out sample.
    q8 = tj.quantize_weights(g, "int8")
    a = tj.calibrate(q8, [(x,) for x in xs[:2]], method="percentile",
                     percentile=99.99)
    a2 = tj.calibrate(q8, [(x,) for x in xs[:2]], method="percentile",
                      percentile=99.99)
    assert str(a) == str(a2) and "quantize" in str(a)
    got = tj.compile(a, target="x86")(xs[2])
    assert _cosine(got, tj.compile(g, target="reference")(xs[2])) >= 0.999
    # Entropy (KL) thresholds: deterministic and as accurate.
    e = tj.calibrate(q8, [(x,) for x in xs[:2]], method="entropy", dtype="i8")
    e2 = tj.calibrate(q8, [(x,) for x in xs[:2]], method="entropy", dtype="i8")
    assert str(e) == str(e2) and "quantize" in str(e)
    got = tj.compile(e, target="x86")(xs[2])
    assert _cosine(got, tj.compile(g, target="reference")(xs[2])) >= 0.999
    with pytest.raises(tj.InvalidArgumentError, match="calibration method"):
        tj.calibrate(q8, [(xs[0],)], method="kl")
    with pytest.raises(tj.InvalidArgumentError, match="group size 48"):
        tj.quantize_weights(g, "int4", group_size=48)
    with pytest.raises(tj.InvalidArgumentError, match="sample 0"):
        tj.calibrate(g, [(np.zeros((2, 7), np.float32),)])


def test_torch_float8_tensors() -> None:
    # torch exports float8 tensors with DLPack 1.1's float8 codes: they go
    # in (and come out) as float8, not only as their uint8 bits.
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn((5, 7), generator=gen) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn((7, 3), generator=gen) * 4).to(torch.float8_e5m2)
    g = tj.Graph("f8_torch")
    ia = g.input("a", "f8e4m3", [5, 7])
    ib = g.input("b", "f8e5m2", [7, 3])
    y = g.matmul_f8(ia, ib)
    g.output(y, "y")
    g.output(g.cast(y, "f8e4m3"), "y8")
    want = a.double() @ b.double()  # exact products, f64 sums
    for target in TARGETS:
        y_, y8 = tj.compile(g, target=target)(a, b)
        assert torch.allclose(y_.double(), want, rtol=1e-6, atol=1e-6), \
            target
        assert y8.dtype == torch.float8_e4m3fn, (target, y8.dtype)
        assert torch.equal(y8.view(torch.uint8),
                           y_.to(torch.float8_e4m3fn).view(torch.uint8)), \
            target


def test_calibrate_smooth_outlier_channels() -> None:
    # SmoothQuant: a few activation channels 40x the rest; smoothing
    # before static i8 W8A8 brings the cosine against f32 above 0.999.
    rng = np.random.default_rng(5)
    k, n = 256, 64
    w = (rng.standard_normal((k, n)) / 16).astype(np.float32)
    g = tj.Graph("smooth")
    x = g.input("x", "f32", ["B", k])
    g.output(g.matmul(x, g.constant(w)), "y")

    def acts():
        a = rng.standard_normal((32, k)).astype(np.float32)
        a[:, :8] *= 40
        return a

    samples = [(acts(),) for _ in range(3)]
    held = acts()
    want = held.astype(np.float64) @ w.astype(np.float64)
    cos = {}
    for smooth in (False, True):
        q = tj.quantize_weights(
            tj.calibrate(g, samples, dtype="i8", smooth=smooth), "int8")
        assert (" = mul " in str(q)) == smooth
        y = tj.compile(q)(held).astype(np.float64).ravel()
        cos[smooth] = y @ want.ravel() / np.linalg.norm(y) / \
            np.linalg.norm(want)
    assert cos[True] >= 0.999 and cos[True] > cos[False], cos
