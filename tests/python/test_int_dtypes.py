"""The integer dtypes of issue 15 (i16, u16, u32, u64) from Python: they
map to numpy's int16, uint16, uint32 and uint64 (uint16 is bf16 bits only
where a bf16 value is expected), and arithmetic, compares, bitwise ops,
shifts, casts and reductions agree with numpy bit for bit on x86 and the
reference."""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402
from tensorjit.dtypes import DType, dtype_of, numpy_dtype  # noqa: E402

TARGETS = ("x86", "reference")
DTYPES = {DType.I16: np.int16, DType.U16: np.uint16, DType.U32: np.uint32,
          DType.U64: np.uint64}


def test_numpy_mapping() -> None:
    for dt, npt in DTYPES.items():
        assert dtype_of(npt) == dt and dt.is_integer
        assert numpy_dtype(dt) == np.dtype(npt)
        assert dt.itemsize == np.dtype(npt).itemsize
        assert dtype_of(dt.short_name) == dt
    assert dtype_of("uint64") == DType.U64 and str(DType.I16) == "i16"


def full_range(rng: np.random.Generator, npt: type, shape: tuple
               ) -> np.ndarray:
    info = np.iinfo(npt)
    return rng.integers(info.min, info.max, size=shape, dtype=npt,
                        endpoint=True)


def test_elementwise_like_numpy() -> None:
    rng = np.random.default_rng(15)
    for dt, npt in DTYPES.items():
        bits = np.dtype(npt).itemsize * 8
        x = full_range(rng, npt, (9, 13))
        z = full_range(rng, npt, (9, 13))
        y = rng.integers(1, 9, size=(9, 13)).astype(npt)  # divisors
        s = rng.integers(0, bits, size=(9, 13)).astype(npt)  # shifts
        g = tj.Graph("ints")
        gx = g.input("x", dt, [9, 13])
        gz = g.input("z", dt, [9, 13])
        gy = g.input("y", dt, [9, 13])
        gs = g.input("s", dt, [9, 13])
        outs = [g.add(gx, gz), g.sub(gx, gz), g.mul(gx, gz), g.div(gx, gy),
                g.mod(gx, gy), g.fmod(gx, gy), g.maximum(gx, gz),
                g.minimum(gx, gz), g.lt(gx, gz), g.bitwise_and(gx, gz),
                g.bitwise_xor(gx, g.bitwise_not(gz)), g.shift_left(gx, gs),
                g.shift_right(gx, gs), g.cast(gx, "f64"),
                g.cast(g.cast(gx, "i64"), dt)]
        for i, o in enumerate(outs):
            g.output(o, f"o{i}")
        with np.errstate(over="ignore"):
            # Our integer division truncates toward zero (C), as numpy's
            # // does for the non-negative.
            trunc = (x - np.fmod(x, y)) // y
            want = [x + z, x - z, x * z, trunc, np.mod(x, y), np.fmod(x, y),
                    np.maximum(x, z), np.minimum(x, z), x < z, x & z,
                    x ^ ~z, np.left_shift(x, s), np.right_shift(x, s),
                    x.astype(np.float64), x]
        for target in TARGETS:
            got = tj.compile(g, target=target).run([x, z, y, s])
            for i, (a, b) in enumerate(zip(got, want)):
                assert a.dtype == b.dtype, (target, dt, i, a.dtype)
                assert np.array_equal(a, b), (target, dt, i)


def test_casts_and_reductions_like_numpy() -> None:
    rng = np.random.default_rng(16)
    for dt, npt in DTYPES.items():
        info = np.iinfo(npt)
        x = full_range(rng, npt, (6, 11))
        # floats inside the range (numpy's astype is defined there)
        f = rng.uniform(max(info.min, -1e15), min(info.max, 1e15), (6, 11))
        g = tj.Graph("red")
        gx = g.input("x", dt, [6, 11])
        gf = g.input("f", "f64", [6, 11])
        g.output(g.sum(gx, 1), "sum")
        g.output(g.max(gx, 0), "max")
        g.output(g.min(gx, 1), "min")
        g.output(g.argmax(gx, 1), "argmax")
        g.output(g.cast(gf, dt), "cast")
        g.output(g.cast(gx, "f32"), "f32")
        want = [x.sum(axis=1, dtype=npt), x.max(axis=0), x.min(axis=1),
                x.argmax(axis=1), f.astype(npt), x.astype(np.float32)]
        for target in TARGETS:
            got = tj.compile(g, target=target).run([x, f])
            for i, (a, b) in enumerate(zip(got, want)):
                assert a.dtype == b.dtype, (target, dt, i, a.dtype)
                assert np.array_equal(a, b), (target, dt, i)


def test_uint16_is_bf16_bits_where_bf16_is_expected() -> None:
    g = tj.Graph("bf16")
    gx = g.input("x", "bf16", [3])
    g.output(g.cast(gx, "f32"), "y")
    bits = np.array([0x3F80, 0x4000, 0xBF80], dtype=np.uint16)
    (y,) = tj.compile(g, target="x86").run([bits])
    assert np.array_equal(y, np.array([1.0, 2.0, -1.0], np.float32))
