"""tj_reference_run against numpy, for every op over the dtypes it allows.

Plain python (no pytest): `TJ_LIBRARY=build/libtensorjit.so python3
tests/python/test_reference.py [substring]` runs every case (or those whose
name contains the substring) and exits non-zero if any failed, printing each
failing case with its seed. TJ_TEST_SEED changes the base seed.

Expected values follow the reference's eager semantics: the inputs (exactly
representable in their dtype) are converted to float64, the op is computed in
float64 (or exactly, for integers) and the result is rounded once to the
result dtype. So for most ops the expected value is bit-exact, and the
tolerances below only absorb libm-vs-numpy differences in transcendentals and
summation order.
"""
import math
import os
import sys
import time
import traceback
import warnings
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tjc  # noqa: E402
from tjc import F32, F16, BF16, F64, I8, I32, I64, BOOL  # noqa: E402

FLOATS = (F32, F16, BF16, F64)
INTS = (I8, I32, I64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (BOOL,)
NAME = tjc.DTYPE_NAMES

# (rtol, atol) per dtype. f32: about 10 ulp relative; f16 about one ulp
# (2^-10); bf16 two ulps (2^-7 each); f64 a handful of ulps scaled for
# summation-order differences. Integers and bool are compared exactly.
TOL = {F32: (1.3e-6, 1e-5), F16: (1e-3, 1e-4), BF16: (1.6e-2, 1e-3),
       F64: (1e-12, 1e-13)}

BASE_SEED = int(os.environ.get("TJ_TEST_SEED", "1234"))
ONLY = sys.argv[1] if len(sys.argv) > 1 else None

cases_run = 0
failures = []


#===--- dtype conversions (numpy side) ---===#

def bf16_from_f64(x):
    """float64 -> bf16 bits, one rounding to nearest even (normal range)."""
    x = np.array(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    bits = x.view(np.uint64)
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = (bits + np.uint64((1 << 44) - 1) + lsb) & ~np.uint64(
        (1 << 45) - 1)
    with np.errstate(all="ignore"):
        f = rounded.view(np.float64).astype(np.float32)
    out = (f.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    out[np.isnan(x)] = 0x7FC0
    return out.reshape(shape)


def bf16_to_f64(bits):
    bits = np.array(bits, dtype=np.uint16)
    flat = bits.reshape(-1).astype(np.uint32) << np.uint32(16)
    return flat.view(np.float32).astype(np.float64).reshape(bits.shape)


def to_f64(arr, dtype):
    if dtype == BF16:
        return bf16_to_f64(arr)
    return np.asarray(arr).astype(np.float64)


INT_RANGE = {I8: (-2**7, 2**7 - 1), I32: (-2**31, 2**31 - 1),
             I64: (-2**63, 2**63 - 1)}


def from_f64(values, dtype):
    """float64 values -> storage of |dtype| with tj_graph_cast's rules."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):
        if dtype == BF16:
            return bf16_from_f64(values)
        if dtype in FLOATS:
            return values.astype(tjc.NUMPY_DTYPES[dtype])
        if dtype == BOOL:
            return values != 0
        lo, hi = INT_RANGE[dtype]
        t = np.trunc(values)
        ok = np.isfinite(t) & (t >= lo) & (t < float(hi) + 1)
        return np.where(ok, t, 0).astype(tjc.NUMPY_DTYPES[dtype])


def from_int(values, dtype):
    """Exact integers (int64 array or python ints) -> storage of |dtype|,
    wrapping to the width for ints."""
    if dtype in INTS:
        arr = np.asarray(values, dtype=object) if not isinstance(
            values, np.ndarray) or values.dtype == object else values
        if isinstance(arr, np.ndarray) and arr.dtype == object:
            bits = {I8: 8, I32: 32, I64: 64}[dtype]
            wrap = np.vectorize(
                lambda v: ((int(v) + (1 << (bits - 1))) % (1 << bits))
                - (1 << (bits - 1)), otypes=[object])
            arr = wrap(arr) if arr.size else arr
            return np.array(arr.tolist(), dtype=tjc.NUMPY_DTYPES[dtype]
                            ).reshape(arr.shape)
        return arr.astype(np.int64).astype(tjc.NUMPY_DTYPES[dtype])
    if dtype == BOOL:
        return np.asarray(values) != 0
    return from_f64(np.asarray(values).astype(np.float64), dtype)


def to_exact(arr, dtype):
    """Storage -> int64 (ints, bool)."""
    return np.asarray(arr).astype(np.int64)


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5,
            1e-3, 7.0]


def rand(rng, dtype, shape, low=None, high=None, specials=False,
         positive=False):
    """Random storage of |dtype| and |shape|."""
    shape = tuple(shape)
    n = int(np.prod(shape)) if shape else 1
    if dtype in FLOATS:
        v = rng.standard_normal(n) * 3.0
        if positive:
            v = np.abs(v) + 0.01
        if low is not None:
            v = rng.uniform(low, high, n)
        if specials and n >= 4:
            k = min(n // 2, len(SPECIALS))
            pos = rng.choice(n, k, replace=False)
            v[pos] = np.array(SPECIALS[:k])
        return from_f64(v.reshape(shape), dtype)
    if dtype == BOOL:
        return (rng.integers(0, 2, n) != 0).reshape(shape)
    lo, hi = INT_RANGE[dtype]
    if low is not None:
        lo, hi = low, high
    v = rng.integers(lo, hi, n, dtype=np.int64, endpoint=True)
    if specials and n >= 4 and low is None:
        v[:4] = [INT_RANGE[dtype][0], INT_RANGE[dtype][1], 0, -1]
        rng.shuffle(v)
    return v.reshape(shape).astype(tjc.NUMPY_DTYPES[dtype])


#===--- comparing and running ---===#

def compare(got, want, dtype, tol=None):
    """None if equal within |dtype|'s tolerance, else a description."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if dtype not in FLOATS:
        g = to_exact(got, dtype)
        w = to_exact(want, dtype)
        bad = g != w
        if not bad.any():
            return None
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {bad.size} elements differ; at {i}: "
                f"got {g[i]}, expected {w[i]}")
    rtol, atol = tol or TOL[dtype]
    g = to_f64(got, dtype)
    w = to_f64(want, dtype)
    gn, wn = np.isnan(g), np.isnan(w)
    with np.errstate(all="ignore"):
        close = np.abs(g - w) <= atol + rtol * np.abs(w)
    inf = np.isinf(g) | np.isinf(w)
    ok = np.where(gn | wn, gn & wn, np.where(inf, g == w, close))
    if ok.all():
        return None
    bad = ~ok
    i = tuple(int(x) for x in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ "
            f"(rtol {rtol}, atol {atol}); at {i}: got {g[i]!r}, "
            f"expected {w[i]!r}")


def case_seed(name):
    return (BASE_SEED * 1000003 + zlib.crc32(name.encode())) % (2**31)


def run_case(name, body):
    """Runs body(rng) -> None or a failure description; records the result."""
    global cases_run
    if ONLY and ONLY not in name:
        return
    seed = case_seed(name)
    cases_run += 1
    try:
        with np.errstate(all="ignore"):
            problem = body(np.random.default_rng(seed))
    except Exception:  # noqa: BLE001 - any exception fails the case
        problem = traceback.format_exc()
    if problem:
        failures.append((name, seed, problem))
        print(f"FAIL {name} (seed {seed}): {problem}", flush=True)


def build_and_run(inputs, build, input_dims=None):
    """inputs: list of (dtype, storage array). build(g, *values) returns the
    output value or a list of them. Returns the output arrays."""
    g = tjc.Graph()
    values = []
    for i, (dtype, arr) in enumerate(inputs):
        dims = input_dims[i] if input_dims else arr.shape
        values.append(g.input(dtype, list(dims), f"x{i}"))
    outs = build(g, *values)
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for i, v in enumerate(outs):
        g.output(v, f"y{i}")
    g.finalize()
    return g.run([arr for _, arr in inputs])


def expect_one(inputs, build, want, dtype, tol=None, input_dims=None):
    got = build_and_run(inputs, build, input_dims)
    return compare(got[0], want, dtype, tol)


#===--- elementwise unary ---===#

def np_erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


def np_relu(x):
    return np.where(x > 0, x, np.where(np.isnan(x), x, 0.0))


UNARY_FLOAT = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": np_erf,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "round": np.round, "relu": np_relu, "sign": np.sign,
}
UNARY_INT = {
    "neg": lambda x: -x, "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0), "sign": np.sign,
    "bitwise_not": np.invert,
}
SHAPES_1 = [(), (1,), (3,), (17,), (33,), (2, 0, 3), (4, 33), (3, 1, 5)]


def test_unary():
    for op, fn in UNARY_FLOAT.items():
        for dt in FLOATS:
            for shape in SHAPES_1:
                def body(rng, op=op, fn=fn, dt=dt, shape=shape):
                    positive = op in ("log", "sqrt", "rsqrt") and \
                        rng.random() < 0.5
                    a = rand(rng, dt, shape, specials=True, positive=positive)
                    want = from_f64(fn(to_f64(a, dt)), dt)
                    return expect_one([(dt, a)],
                                      lambda g, x: getattr(g, op)(x), want, dt)
                run_case(f"unary/{op}/{NAME[dt]}/{shape}", body)
    for op, fn in UNARY_INT.items():
        for dt in INTS:
            for shape in SHAPES_1:
                def body(rng, op=op, fn=fn, dt=dt, shape=shape):
                    a = rand(rng, dt, shape, specials=True)
                    want = fn(a).astype(a.dtype)  # numpy wraps too
                    return expect_one([(dt, a)],
                                      lambda g, x: getattr(g, op)(x), want, dt)
                run_case(f"unary/{op}/{NAME[dt]}/{shape}", body)
    for shape in SHAPES_1:
        run_case(f"unary/logical_not/bool/{shape}", lambda rng, shape=shape: (
            lambda a: expect_one([(BOOL, a)], lambda g, x: g.logical_not(x),
                                 ~a, BOOL))(rand(rng, BOOL, shape)))
        for dt in FLOATS:
            def body(rng, dt=dt, shape=shape):
                a = rand(rng, dt, shape, specials=True)
                return expect_one([(dt, a)], lambda g, x: g.isnan(x),
                                  np.isnan(to_f64(a, dt)), BOOL)
            run_case(f"unary/isnan/{NAME[dt]}/{shape}", body)


def test_cast():
    float_vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.7, -0.7, 2.9, -2.9,
                  127.5, 128.0, -128.9, -129.0, 255.0, 300.0, 65504.0,
                  65520.0, 1e10, -3e9, 2147483647.0, 2147483648.0,
                  -2147483648.0, 9.3e18, -9.3e18, 1e-8, 0.3333333333,
                  1.00048828125, 1.0009765625]
    for src in ALL:
        for dst in ALL:
            def body(rng, src=src, dst=dst):
                if src in FLOATS:
                    v = np.array(float_vals + list(rng.standard_normal(9) *
                                                   100))
                    a = from_f64(v, src)
                    want = from_f64(to_f64(a, src), dst)
                else:
                    a = rand(rng, src, (37,), specials=True)
                    want = from_int(a.astype(np.int64), dst) \
                        if dst != BOOL else a.astype(np.int64) != 0
                return expect_one([(src, a)], lambda g, x: g.cast(x, dst),
                                  want, dst)
            run_case(f"cast/{NAME[src]}->{NAME[dst]}", body)


#===--- elementwise binary ---===#

def c_pow_scalar(x, y):
    """C99 pow (math.pow follows Annex F); numpy's scalar and SIMD paths
    disagree with it and with each other on e.g. pow(-inf, 0.5)."""
    odd = math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0
    try:
        return math.pow(x, y)
    except ValueError:
        if x == 0.0:  # pole: C gives an infinity, python raises
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan  # negative finite base, non-integer exponent
    except OverflowError:
        return -math.inf if x < 0 and odd else math.inf


def c_pow(a, b):
    a, b = np.broadcast_arrays(a, b)
    if a.size == 0:
        return np.zeros(a.shape)
    return np.vectorize(c_pow_scalar, otypes=[np.float64])(a, b)


def np_quiet(fn):
    def call(a, b):
        with np.errstate(all="ignore"):
            return fn(a, b)
    return call


BINARY_FLOAT = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": np.divide, "pow": c_pow, "maximum": np.maximum,
    "minimum": np.minimum, "mod": np_quiet(np.mod),
    "fmod": np_quiet(np.fmod),
}
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less,
           "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
BROADCAST_PAIRS = [((), ()), ((3,), (3,)), ((2, 3), (3,)), ((4, 1), (1, 5)),
                   ((), (2, 3)), ((2, 0, 3), (1, 3)), ((17,), (1,)),
                   ((1, 1, 33), (2, 1, 1)), ((3, 1, 4, 1), (5, 1, 1))]


def int_div(a, b):
    """C division on exact integers: truncate toward zero, x/0 = 0."""
    out = []
    for x, y in zip(a.ravel().tolist(), b.ravel().tolist()):
        if y == 0:
            out.append(0)
        else:
            q = abs(x) // abs(y)
            out.append(q if (x < 0) == (y < 0) else -q)
    return np.array(out, dtype=object).reshape(a.shape)


def int_opsmisc(op, x, y, bits):
    """The integer remainders, bitwise ops and shifts of lib/ops.def on
    exact python ints (x mod 0 = 0; shifts out of [0, bits) shift every bit
    out)."""
    if op in ("mod", "fmod"):
        if y == 0:
            return 0
        r = abs(x) % abs(y) * (1 if x >= 0 else -1)  # C: the sign of x
        if op == "mod" and r != 0 and (r < 0) != (y < 0):
            r += y
        return r
    if op == "shift_left":
        return 0 if y < 0 or y >= bits else x << y
    if op == "shift_right":
        return (-1 if x < 0 else 0) if y < 0 or y >= bits else x >> y
    return {"bitwise_and": x & y, "bitwise_or": x | y,
            "bitwise_xor": x ^ y}[op]


def test_binary():
    for op in ("mod", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor",
               "shift_left", "shift_right"):
        for dt in INTS:
            for sa, sb in BROADCAST_PAIRS:
                def body(rng, op=op, dt=dt, sa=sa, sb=sb):
                    bits = {I8: 8, I32: 32, I64: 64}[dt]
                    a = rand(rng, dt, sa, specials=True)
                    if op.startswith("shift"):
                        b = rand(rng, dt, sb, low=-2, high=min(bits + 3, 127))
                    elif op.endswith("mod") and rng.random() < 0.5:
                        b = rand(rng, dt, sb, low=-5, high=5)
                    else:
                        b = rand(rng, dt, sb, specials=True)
                    aa, bb = np.broadcast_arrays(a.astype(object),
                                                 b.astype(object))
                    exact = [int_opsmisc(op, int(x), int(y), bits)
                             for x, y in zip(aa.ravel(), bb.ravel())]
                    want = from_int(np.array(exact, dtype=object).reshape(
                        aa.shape), dt)
                    return expect_one(
                        [(dt, a), (dt, b)],
                        lambda g, x, y: getattr(g, op)(x, y), want, dt)
                run_case(f"binary/{op}/{NAME[dt]}/{sa}x{sb}", body)
    for op, fn in BINARY_FLOAT.items():
        for dt in FLOATS:
            for sa, sb in BROADCAST_PAIRS:
                def body(rng, op=op, fn=fn, dt=dt, sa=sa, sb=sb):
                    a = rand(rng, dt, sa, specials=True,
                             positive=op == "pow" and rng.random() < 0.7)
                    b = rand(rng, dt, sb, specials=True)
                    if op == "pow":
                        b = from_f64(np.round(to_f64(b, dt) * 2) / 2, dt)
                    want = from_f64(fn(to_f64(a, dt), to_f64(b, dt)), dt)
                    return expect_one(
                        [(dt, a), (dt, b)],
                        lambda g, x, y: getattr(g, op)(x, y), want, dt)
                run_case(f"binary/{op}/{NAME[dt]}/{sa}x{sb}", body)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        for dt in INTS:
            for sa, sb in BROADCAST_PAIRS:
                def body(rng, op=op, dt=dt, sa=sa, sb=sb):
                    a = rand(rng, dt, sa, specials=True)
                    small = op in ("div",) and rng.random() < 0.5
                    b = rand(rng, dt, sb, specials=True) if not small else \
                        rand(rng, dt, sb, low=-5, high=5)
                    aa, bb = np.broadcast_arrays(a.astype(object),
                                                 b.astype(object))
                    exact = {"add": lambda: aa + bb, "sub": lambda: aa - bb,
                             "mul": lambda: aa * bb,
                             "div": lambda: int_div(aa, bb),
                             "maximum": lambda: np.maximum(aa, bb),
                             "minimum": lambda: np.minimum(aa, bb)}[op]()
                    want = from_int(np.asarray(exact, dtype=object), dt)
                    return expect_one(
                        [(dt, a), (dt, b)],
                        lambda g, x, y: getattr(g, op)(x, y), want, dt)
                run_case(f"binary/{op}/{NAME[dt]}/{sa}x{sb}", body)
    for op, fn in COMPARE.items():
        # Ordering needs numbers; equality takes bool too.
        for dt in ALL if op in ("eq", "ne") else NUMERIC:
            for sa, sb in BROADCAST_PAIRS[:6]:
                def body(rng, op=op, fn=fn, dt=dt, sa=sa, sb=sb):
                    a = rand(rng, dt, sa, specials=True)
                    b = rand(rng, dt, sb, specials=True)
                    if dt in INTS and rng.random() < 0.5:
                        a = rand(rng, dt, sa, low=-2, high=2)
                        b = rand(rng, dt, sb, low=-2, high=2)
                    if dt in FLOATS:
                        want = fn(to_f64(a, dt), to_f64(b, dt))
                    else:  # exact: i64 values beyond 2^53 must compare right
                        want = fn(a.astype(object), b.astype(object)).astype(
                            bool)
                    return expect_one(
                        [(dt, a), (dt, b)],
                        lambda g, x, y: getattr(g, op)(x, y), want, BOOL)
                run_case(f"compare/{op}/{NAME[dt]}/{sa}x{sb}", body)
    for op, fn in (("logical_and", np.logical_and),
                   ("logical_or", np.logical_or)):
        for sa, sb in BROADCAST_PAIRS:
            def body(rng, op=op, fn=fn, sa=sa, sb=sb):
                a, b = rand(rng, BOOL, sa), rand(rng, BOOL, sb)
                return expect_one([(BOOL, a), (BOOL, b)],
                                  lambda g, x, y: getattr(g, op)(x, y),
                                  fn(a, b), BOOL)
            run_case(f"binary/{op}/bool/{sa}x{sb}", body)
    # Large i64 values that a double would round.
    def i64_exact(rng):
        a = np.array([2**53 + 1, -(2**62) - 3, 2**63 - 1, 12345678901234567],
                     dtype=np.int64)
        b = np.array([1, 2**62 + 5, 1, -7], dtype=np.int64)
        want = from_int(a.astype(object) + b.astype(object), I64)
        return expect_one([(I64, a), (I64, b)], lambda g, x, y: g.add(x, y),
                          want, I64)
    run_case("binary/add/i64/beyond_2^53", i64_exact)


def test_where():
    shapes = [((3,), (3,), (3,)), ((2, 1), (1, 4), ()), ((), (2, 3), (2, 3)),
              ((0, 3), (1, 3), (3,)), ((17, 1), (1, 5), (17, 5))]
    for dt in ALL:
        for sc, sa, sb in shapes:
            def body(rng, dt=dt, sc=sc, sa=sa, sb=sb):
                c = rand(rng, BOOL, sc)
                a, b = rand(rng, dt, sa, specials=True), rand(rng, dt, sb)
                want = np.where(c, a, b)
                return expect_one([(BOOL, c), (dt, a), (dt, b)],
                                  lambda g, x, y, z: g.where(x, y, z),
                                  want, dt)
            run_case(f"where/{NAME[dt]}/{sc},{sa},{sb}", body)


#===--- leaves ---===#

def test_leaves():
    for dt in ALL:
        for dims, value in (((2, 3), 2.7), ((0, 4), 1.0), ((), -1.5),
                            ((17,), float("nan") if dt in FLOATS else 0.0),
                            ((5,), 300.0)):
            def body(rng, dt=dt, dims=dims, value=value):
                want = from_f64(np.full(dims, value), dt)
                got = build_and_run([], lambda g: g.full(dt, list(dims),
                                                         value))[0]
                return compare(got, want, dt)
            run_case(f"full/{NAME[dt]}/{dims}/{value}", body)
        for dims, axis in (((4, 3), 0), ((4, 3), 1), ((2, 0, 3), 2),
                           ((33,), 0), ((2, 3, 4), -1)):
            if dt == BOOL:
                continue  # iota is numeric
            def body(rng, dt=dt, dims=dims, axis=axis):
                ax = axis % len(dims)
                idx = np.indices(dims)[ax] if dims else np.zeros(())
                want = from_int(idx.astype(np.int64), dt) if dt != BOOL \
                    else idx != 0
                got = build_and_run([], lambda g: g.iota(dt, list(dims),
                                                         axis))[0]
                return compare(got, want, dt)
            run_case(f"iota/{NAME[dt]}/{dims}/axis{axis}", body)

        def body(rng, dt=dt):
            c = rand(rng, dt, (3, 5), specials=True)
            got = build_and_run([], lambda g: [g.constant(dt, c),
                                               g.scalar(dt, 3.75)])
            return compare(got[0], c, dt) or compare(
                got[1], from_f64(np.array(3.75), dt), dt)
        run_case(f"constant_scalar/{NAME[dt]}", body)


#===--- reductions ---===#

REDUCE_SHAPES = [((5,), ()), ((5,), (0,)), ((4, 3), (1,)), ((4, 3), (0,)),
                 ((4, 3), ()), ((2, 3, 4), (0, 2)), ((2, 3, 4), (-1,)),
                 ((2, 0, 3), (1,)), ((2, 0, 3), (0,)), ((0,), ()),
                 ((1, 1, 17), (2, 0)), ((33, 2), (0,)), ((), ())]


def np_reduce(op, x, axes, keepdims, dt):
    ax = tuple(a % x.ndim for a in axes) if axes else None
    if x.ndim == 0:
        ax = None
    exact = dt not in FLOATS
    if op == "sum":
        return np.sum(x, axis=ax, keepdims=keepdims,
                      dtype=np.int64 if exact else np.float64)
    if op == "prod":
        return np.prod(x, axis=ax, keepdims=keepdims,
                       dtype=np.int64 if exact else np.float64)
    if op == "mean":
        return np.mean(x, axis=ax, keepdims=keepdims)
    # max/min of an empty reduction: the identity.
    out_shape = np.sum(np.zeros(x.shape), axis=ax, keepdims=keepdims).shape
    if x.size == 0:
        if exact:
            lo, hi = INT_RANGE[dt] if dt != BOOL else (0, 1)
            fill = lo if op == "max" else hi
        else:
            fill = -np.inf if op == "max" else np.inf
        return np.full(out_shape, fill)
    fn = np.max if op == "max" else np.min
    return fn(x, axis=ax, keepdims=keepdims)


def test_reductions():
    for op in ("sum", "prod", "max", "min", "mean"):
        dtypes = FLOATS if op == "mean" else NUMERIC
        for dt in dtypes:
            for shape, axes in REDUCE_SHAPES:
                for keepdims in (False, True):
                    def body(rng, op=op, dt=dt, shape=shape, axes=axes,
                             keepdims=keepdims):
                        if op == "prod" and dt in FLOATS:
                            a = from_f64(rng.uniform(0.5, 1.5, shape), dt)
                        else:
                            a = rand(rng, dt, shape,
                                     specials=rng.random() < 0.3)
                        x = to_f64(a, dt) if dt in FLOATS else \
                            a.astype(np.int64)
                        want = np_reduce(op, x, axes, keepdims, dt)
                        want = from_f64(want, dt) if dt in FLOATS else \
                            from_int(np.asarray(want).astype(np.int64), dt)
                        return expect_one(
                            [(dt, a)],
                            lambda g, v: g.reduce(op, v, axes, keepdims),
                            want, dt)
                    run_case(f"reduce/{op}/{NAME[dt]}/{shape}/axes{axes}/"
                             f"keep{int(keepdims)}", body)
    for argop, npfn in (("argmax", np.argmax), ("argmin", np.argmin)):
        for dt in NUMERIC:
            for shape, axis in (((5,), 0), ((4, 3), 1), ((4, 3), 0),
                                ((2, 3, 4), -1), ((2, 0, 3), 2), ((17, 33), 1),
                                ((1,), 0)):
                for keepdims in (False, True):
                    def body(rng, dt=dt, shape=shape, axis=axis,
                             keepdims=keepdims, argop=argop, npfn=npfn):
                        # Few distinct values make ties; NaNs must win.
                        a = rand(rng, dt, shape, low=-2, high=2)
                        if dt in FLOATS and a.size > 3 and rng.random() < 0.5:
                            v = to_f64(a, dt).ravel()
                            v[rng.choice(v.size, 2, replace=False)] = np.nan
                            a = from_f64(v.reshape(shape), dt)
                        x = to_f64(a, dt) if dt in FLOATS else a
                        want = npfn(x, axis=axis)
                        if keepdims:
                            want = np.expand_dims(want, axis)
                        return expect_one(
                            [(dt, a)],
                            lambda g, v: getattr(g, argop)(v, axis, keepdims),
                            want.astype(np.int64), I64)
                    run_case(f"{argop}/{NAME[dt]}/{shape}/axis{axis}/"
                             f"keep{int(keepdims)}", body)


#===--- matmul and linear ---===#

MATMUL_SHAPES = [((3, 4), (4, 5)), ((1, 1), (1, 1)), ((17, 33), (33, 3)),
                 ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                 ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)),
                 ((3, 0), (0, 4)), ((0, 3), (3, 4)), ((2, 5, 3), (2, 3, 1)),
                 ((7, 1029), (1029, 9))]


def test_matmul():
    for dt in NUMERIC:
        for sa, sb in MATMUL_SHAPES:
            def body(rng, dt=dt, sa=sa, sb=sb):
                if dt in FLOATS:
                    a, b = rand(rng, dt, sa), rand(rng, dt, sb)
                    # Both sides sum in float64 and round once, so even f16
                    # and bf16 need no allowance for K.
                    want = from_f64(np.matmul(to_f64(a, dt), to_f64(b, dt)),
                                    dt)
                    tol = None
                else:
                    lo, hi = (-100, 100) if rng.random() < 0.5 else \
                        INT_RANGE[dt]
                    a, b = rand(rng, dt, sa, lo, hi), rand(rng, dt, sb, lo, hi)
                    want = from_int(np.matmul(a.astype(np.int64),
                                              b.astype(np.int64)), dt)
                    tol = None
                return expect_one([(dt, a), (dt, b)],
                                  lambda g, x, y: g.matmul(x, y), want, dt,
                                  tol)
            run_case(f"matmul/{NAME[dt]}/{sa}x{sb}", body)
    for dt in FLOATS:
        for sx, sw, sb in (((3, 4), (4, 5), (5,)), ((2, 3, 4), (4, 5), None),
                           ((1, 17), (17, 33), (33,)), ((0, 4), (4, 2), (2,)),
                           ((5, 3), (3, 1), (1,))):
            def body(rng, dt=dt, sx=sx, sw=sw, sb=sb):
                x, w = rand(rng, dt, sx), rand(rng, dt, sw)
                ins = [(dt, x), (dt, w)]
                y = np.matmul(to_f64(x, dt), to_f64(w, dt))
                if sb is not None:
                    b = rand(rng, dt, sb)
                    ins.append((dt, b))
                    y = y + to_f64(b, dt)
                build = (lambda g, x_, w_, b_: g.linear(x_, w_, b_)) \
                    if sb is not None else \
                    (lambda g, x_, w_: g.linear(x_, w_, tjc.Value(0)))
                return expect_one(ins, build, from_f64(y, dt), dt)
            run_case(f"linear/{NAME[dt]}/{sx},{sw},{sb}", body)


#===--- composites ---===#

def np_gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) *
                                        (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + np_erf(x / math.sqrt(2.0)))


def np_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def test_composites():
    for dt in FLOATS:
        for shape in ((), (7,), (3, 17), (2, 0, 4), (2, 3, 33)):
            for approximate in (False, True):
                def body(rng, dt=dt, shape=shape, approximate=approximate):
                    a = rand(rng, dt, shape, specials=True)
                    want = from_f64(np_gelu(to_f64(a, dt), approximate), dt)
                    return expect_one([(dt, a)],
                                      lambda g, x: g.gelu(x, approximate),
                                      want, dt)
                run_case(f"gelu/{NAME[dt]}/{shape}/approx{int(approximate)}",
                         body)

            def body(rng, dt=dt, shape=shape):
                a = rand(rng, dt, shape, specials=True)
                x = to_f64(a, dt)
                want = from_f64(x / (1.0 + np.exp(-x)), dt)
                return expect_one([(dt, a)], lambda g, v: g.silu(v), want, dt)
            run_case(f"silu/{NAME[dt]}/{shape}", body)
        for shape, axis in (((7,), 0), ((3, 17), 1), ((3, 17), 0),
                            ((2, 3, 33), -1), ((2, 3, 5), 1), ((4, 0), 0),
                            ((1, 1), 1)):
            for op, fn in (("softmax", np_softmax),
                           ("log_softmax", np_log_softmax)):
                def body(rng, dt=dt, shape=shape, axis=axis, op=op, fn=fn):
                    # Large logits: exp overflows without the max shift.
                    a = from_f64(to_f64(rand(rng, dt, shape), dt) * 300.0,
                                 dt)
                    want = from_f64(fn(to_f64(a, dt), axis), dt) \
                        if a.size else a.copy()
                    return expect_one([(dt, a)],
                                      lambda g, x: getattr(g, op)(x, axis),
                                      want, dt)
                run_case(f"{op}/{NAME[dt]}/{shape}/axis{axis}", body)
        for shape in ((5,), (3, 17), (2, 3, 33), (4, 1), (0, 8)):
            for with_gamma, with_beta in ((False, False), (True, False),
                                          (True, True), (False, True)):
                def body(rng, dt=dt, shape=shape, with_gamma=with_gamma,
                         with_beta=with_beta):
                    n = shape[-1]
                    x = rand(rng, dt, shape)
                    ins = [(dt, x)]
                    xf = to_f64(x, dt)
                    mean = xf.mean(axis=-1, keepdims=True) if x.size else xf
                    var = ((xf - mean) ** 2).mean(axis=-1, keepdims=True) \
                        if x.size else xf
                    y = (xf - mean) / np.sqrt(var + 1e-5)
                    gamma = beta = None
                    if with_gamma:
                        gamma = rand(rng, dt, (n,))
                        ins.append((dt, gamma))
                        y = y * to_f64(gamma, dt)
                    if with_beta:
                        beta = rand(rng, dt, (n,))
                        ins.append((dt, beta))
                        y = y + to_f64(beta, dt)

                    def build(g, xv, *rest):
                        rest = list(rest)
                        gv = rest.pop(0) if with_gamma else None
                        bv = rest.pop(0) if with_beta else None
                        return g.layer_norm(xv, gv, bv, 1e-5)
                    return expect_one(ins, build, from_f64(y, dt), dt)
                run_case(f"layer_norm/{NAME[dt]}/{shape}/g{int(with_gamma)}"
                         f"b{int(with_beta)}", body)
            for with_gamma in (False, True):
                def body(rng, dt=dt, shape=shape, with_gamma=with_gamma):
                    x = rand(rng, dt, shape)
                    xf = to_f64(x, dt)
                    ms = (xf ** 2).mean(axis=-1, keepdims=True) \
                        if x.size else xf
                    y = xf / np.sqrt(ms + 1e-6)
                    ins = [(dt, x)]
                    if with_gamma:
                        gamma = rand(rng, dt, (shape[-1],))
                        ins.append((dt, gamma))
                        y = y * to_f64(gamma, dt)
                    build = (lambda g, xv, gv: g.rms_norm(xv, gv, 1e-6)) \
                        if with_gamma else \
                        (lambda g, xv: g.rms_norm(xv, None, 1e-6))
                    return expect_one(ins, build, from_f64(y, dt), dt)
                run_case(f"rms_norm/{NAME[dt]}/{shape}/g{int(with_gamma)}",
                         body)


#===--- data movement (exact for every dtype) ---===#

def test_movement():
    for dt in ALL:
        def reshape_body(rng, dt=dt):
            a = rand(rng, dt, (4, 6))
            out = build_and_run([(dt, a)], lambda g, x: [
                g.reshape(x, [3, 8]), g.reshape(x, [2, -1, 3]),
                g.reshape(x, [24]), g.reshape(g.transpose(x, [1, 0]),
                                              [6, 2, 2])])
            return (compare(out[0], a.reshape(3, 8), dt) or
                    compare(out[1], a.reshape(2, -1, 3), dt) or
                    compare(out[2], a.reshape(24), dt) or
                    compare(out[3], a.T.reshape(6, 2, 2), dt))
        run_case(f"reshape/{NAME[dt]}", reshape_body)

        for shape, perm in (((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)),
                            ((1, 0, 3), (2, 1, 0)), ((5,), (0,)),
                            ((2, 3, 4, 5), (3, 1, 2, 0))):
            def body(rng, dt=dt, shape=shape, perm=perm):
                a = rand(rng, dt, shape)
                return expect_one([(dt, a)],
                                  lambda g, x: g.transpose(x, list(perm)),
                                  np.transpose(a, perm), dt)
            run_case(f"transpose/{NAME[dt]}/{shape}/{perm}", body)

        for shape, to in (((3,), (2, 3)), ((1,), (4,)), ((2, 1), (2, 0)),
                          ((), (3, 2)), ((4, 1, 3), (2, 4, 5, 3))):
            def body(rng, dt=dt, shape=shape, to=to):
                a = rand(rng, dt, shape)
                return expect_one([(dt, a)],
                                  lambda g, x: g.broadcast_to(x, list(to)),
                                  np.broadcast_to(a, to), dt)
            run_case(f"broadcast_to/{NAME[dt]}/{shape}->{to}", body)

        big = 2**63 - 1
        for shape, starts, stops, steps in (
                ((10,), [2], [8], [3]), ((10,), [-3], [big], [1]),
                ((4, 5), [1, 0], [3, 5], [1, 2]),
                ((4, 5), [0, 7], [4, 9], None),  # empty: start past the end
                ((6, 7, 3), [-5, 1, 0], [100, -1, 3], [2, 3, 1]),
                ((17,), [0], [17], [16])):
            def body(rng, dt=dt, shape=shape, starts=starts, stops=stops,
                     steps=steps):
                a = rand(rng, dt, shape)
                idx = tuple(slice(s, None if e == big else e,
                                  1 if steps is None else st)
                            for s, e, st in zip(starts, stops,
                                                steps or [1] * len(shape)))
                return expect_one([(dt, a)],
                                  lambda g, x: g.slice(x, starts, stops,
                                                       steps),
                                  a[idx], dt)
            run_case(f"slice/{NAME[dt]}/{shape}/{starts}:{stops}:{steps}",
                     body)

        for shapes, axis in ((((2, 3), (4, 3), (1, 3)), 0),
                             (((2, 3), (2, 0), (2, 5)), 1),
                             (((3,), (3,)), 0), (((2, 1, 4), (2, 3, 4)), -2),
                             (((5,),), 0)):
            def body(rng, dt=dt, shapes=shapes, axis=axis):
                arrs = [rand(rng, dt, s) for s in shapes]
                return expect_one([(dt, a) for a in arrs],
                                  lambda g, *vs: g.concat(list(vs), axis),
                                  np.concatenate(arrs, axis=axis), dt)
            run_case(f"concat/{NAME[dt]}/{shapes}/axis{axis}", body)

        for shape, low, high, value in (((3,), [1], [2], 0.0),
                                        ((2, 3), [0, 2], [1, 0], 1.5),
                                        ((0, 2), [1, 1], [1, 0], -2.0),
                                        ((), [], [], 3.0),
                                        ((2, 3, 4), [1, 0, 2], [0, 3, 1],
                                         7.0)):
            def body(rng, dt=dt, shape=shape, low=low, high=high,
                     value=value):
                a = rand(rng, dt, shape)
                fill = from_f64(np.array(value), dt)
                want = np.pad(a, list(zip(low, high)), mode="constant",
                              constant_values=fill) if shape else a.copy()
                return expect_one([(dt, a)],
                                  lambda g, x: g.pad(x, low, high, value),
                                  want, dt)
            run_case(f"pad/{NAME[dt]}/{shape}/{low}/{high}", body)

        for shape, ishape, axis, idt in (((5,), (3,), 0, I64),
                                         ((4, 3), (2, 2), 0, I32),
                                         ((4, 3), (5,), 1, I64),
                                         ((2, 3, 4), (), -1, I32),
                                         ((3, 4), (0,), 1, I64),
                                         ((0, 4), (2,), 1, I32),
                                         ((6, 17), (3, 1), -2, I64)):
            def body(rng, dt=dt, shape=shape, ishape=ishape, axis=axis,
                     idt=idt):
                a = rand(rng, dt, shape)
                n = shape[axis]
                idx = rng.integers(-n, n, ishape).astype(
                    tjc.NUMPY_DTYPES[idt])
                want = np.take(a, idx.astype(np.int64), axis=axis)
                return expect_one([(dt, a), (idt, idx)],
                                  lambda g, x, i: g.gather(x, i, axis),
                                  want, dt)
            run_case(f"gather/{NAME[dt]}/{shape}/{ishape}/axis{axis}/"
                     f"{NAME[idt]}", body)

        # ops (issue 15): numpy.take_along_axis, and GatherND written out
        # with numpy indexing (in-range indices, negative ones included).
        for shape, ishape, axis, idt in (((4, 3), (4, 5), 1, I64),
                                         ((4, 3), (2, 3), 0, I32),
                                         ((2, 3, 4), (2, 3, 6), -1, I64)):
            def body(rng, dt=dt, shape=shape, ishape=ishape, axis=axis,
                     idt=idt):
                a = rand(rng, dt, shape)
                n = shape[axis]
                idx = rng.integers(-n, n, ishape).astype(
                    tjc.NUMPY_DTYPES[idt])
                want = np.take_along_axis(
                    a, np.where(idx < 0, idx + n, idx).astype(np.int64), axis)
                return expect_one([(dt, a), (idt, idx)],
                                  lambda g, x, i: g.gather_elements(x, i,
                                                                    axis),
                                  want, dt)
            run_case(f"gather_elements/{NAME[dt]}/{shape}/{ishape}/"
                     f"axis{axis}/{NAME[idt]}", body)

        for shape, ishape, bd, idt in (((4, 3), (5, 2), 0, I64),
                                       ((4, 3, 2), (2, 1), 0, I32),
                                       ((3, 4, 5), (3, 2, 1), 1, I64)):
            def body(rng, dt=dt, shape=shape, ishape=ishape, bd=bd,
                     idt=idt):
                a = rand(rng, dt, shape)
                k = ishape[-1]
                dims = np.array(shape[bd:bd + k])
                idx = rng.integers(-dims, dims, ishape).astype(
                    tjc.NUMPY_DTYPES[idt])
                pos = np.where(idx < 0, idx + dims, idx).astype(np.int64)
                if bd == 0:
                    want = a[tuple(np.moveaxis(pos, -1, 0))]
                else:
                    want = np.stack([a[b][tuple(np.moveaxis(pos[b], -1, 0))]
                                     for b in range(shape[0])])
                return expect_one([(dt, a), (idt, idx)],
                                  lambda g, x, i: g.gather_nd(x, i, bd),
                                  want, dt)
            run_case(f"gather_nd/{NAME[dt]}/{shape}/{ishape}/batch{bd}/"
                     f"{NAME[idt]}", body)

        # scatter (issue 15): reduction none moves bytes, so every dtype is
        # exact; written out in row-major order of the updates (the last of
        # duplicates wins), indices out of range wrapped once and clamped.
        def pick(v, n):
            p = v + n if v < 0 else v
            return min(max(p, 0), n - 1)

        for shape, ishape, axis, idt in (((4, 3), (4, 5), 1, I64),
                                         ((4, 3), (2, 3), 0, I32),
                                         ((2, 3, 4), (2, 2, 6), -1, I64)):
            def body(rng, dt=dt, shape=shape, ishape=ishape, axis=axis,
                     idt=idt):
                a = rand(rng, dt, shape)
                u = rand(rng, dt, ishape)
                n = shape[axis]
                idx = rng.integers(-n - 2, n + 2, ishape).astype(
                    tjc.NUMPY_DTYPES[idt])
                want = a.copy()
                for pos in np.ndindex(*ishape):
                    t = list(pos)
                    t[axis] = pick(int(idx[pos]), n)
                    want[tuple(t)] = u[pos]
                return expect_one(
                    [(dt, a), (idt, idx), (dt, u)],
                    lambda g, x, i, v: g.scatter_elements(x, i, v, axis),
                    want, dt)
            run_case(f"scatter_elements/{NAME[dt]}/{shape}/{ishape}/"
                     f"axis{axis}/{NAME[idt]}", body)

        for shape, ishape, idt in (((5, 3), (4, 1), I64),
                                   ((3, 4, 2), (2, 3, 2), I32)):
            def body(rng, dt=dt, shape=shape, ishape=ishape, idt=idt):
                a = rand(rng, dt, shape)
                k = ishape[-1]
                u = rand(rng, dt, ishape[:-1] + shape[k:])
                idx = rng.integers(-6, 6, ishape).astype(
                    tjc.NUMPY_DTYPES[idt])
                want = a.copy()
                for pos in np.ndindex(*ishape[:-1]):
                    t = tuple(pick(int(idx[pos][j]), shape[j])
                              for j in range(k))
                    want[t] = u[pos]
                return expect_one([(dt, a), (idt, idx), (dt, u)],
                                  lambda g, x, i, v: g.scatter_nd(x, i, v),
                                  want, dt)
            run_case(f"scatter_nd/{NAME[dt]}/{shape}/{ishape}/"
                     f"{NAME[idt]}", body)


#===--- symbolic dims, strided tensors, graphs of several nodes ---===#

def test_symbolic():
    def graph_for(dt):
        g = tjc.Graph()
        B = g.symbol("B")
        x = g.input(dt, [B, 3], "x")
        y = g.input(dt, [3], "y")
        w = g.input(dt, [3, 5], "w")
        s = g.add(x, y)
        g.output(g.reduce("sum", s, [0]), "colsum")
        g.output(g.matmul(s, w), "mm")
        g.output(g.reshape(s, [g.dim_mul(B, 3)]), "flat")
        g.output(g.softmax(s, 1), "sm")
        g.output(g.concat([x, s], 0), "cat")
        g.output(g.full(dt, [B, 2], 1.25), "ones")
        g.output(g.argmax(s, 0), "am")
        g.finalize()
        return g

    graphs = {}
    for dt in (F32, F64, F16):
        for b in (1, 2, 3, 17, 64):
            def body(rng, dt=dt, b=b):
                if dt not in graphs:  # one graph serves every B
                    graphs[dt] = graph_for(dt)
                graph = graphs[dt]
                x, y = rand(rng, dt, (b, 3)), rand(rng, dt, (3,))
                w = rand(rng, dt, (3, 5))
                out = graph.run([x, y, w])
                xf, yf, wf = to_f64(x, dt), to_f64(y, dt), to_f64(w, dt)
                s64 = xf + yf
                s = to_f64(from_f64(s64, dt), dt)  # the add node rounds
                checks = [
                    (out[0], from_f64(s.sum(axis=0), dt), dt),
                    (out[1], from_f64(s @ wf, dt), dt),
                    (out[2], from_f64(s.reshape(-1), dt), dt),
                    (out[3], from_f64(np_softmax(s, 1), dt), dt),
                    (out[4], from_f64(np.concatenate([xf, s], 0), dt), dt),
                    (out[5], from_f64(np.full((b, 2), 1.25), dt), dt),
                    (out[6], np.argmax(s, axis=0), I64),
                ]
                for i, (got, want, d) in enumerate(checks):
                    problem = compare(got, want, d)
                    if problem:
                        return f"output {i}: {problem}"
                return None
            run_case(f"symbolic/{NAME[dt]}/B={b}", body)

    def two_symbols(rng):
        g = tjc.Graph()
        B, C = g.symbol("B"), g.symbol("C")
        a = g.input(F32, [B, 4], "a")
        c = g.input(F32, [C, 4], "c")
        g.output(g.concat([a, c], 0), "y")
        g.output(g.pad(a, [1, 0], [2, 1], 9.0), "p")
        g.finalize()
        for b, cc in ((1, 1), (3, 5), (17, 2)):
            av, cv = rand(rng, F32, (b, 4)), rand(rng, F32, (cc, 4))
            out = g.run([av, cv])
            problem = compare(out[0], np.concatenate([av, cv]), F32) or \
                compare(out[1], np.pad(av, [(1, 2), (0, 1)],
                                       constant_values=9.0), F32)
            if problem:
                return f"B={b} C={cc}: {problem}"
        return None
    run_case("symbolic/two_symbols", two_symbols)

    def zero_batch(rng):
        # Symbols may be 0 at run time: every op sees empty tensors.
        g = tjc.Graph()
        B = g.symbol("B")
        x = g.input(F32, [B, 3], "x")
        w = g.input(F32, [3, 5], "w")
        s = g.gelu(g.add(x, g.full(F32, [3], 1.0)))
        g.output(g.reduce("sum", s, [0]), "colsum")
        g.output(g.reduce("max", s, [0]), "colmax")
        g.output(g.matmul(s, w), "mm")
        g.output(g.softmax(s, 1), "sm")
        g.output(g.layer_norm(s), "ln")
        g.output(g.matmul(g.transpose(s, [1, 0]), s), "gram")
        g.finalize()
        out = g.run([np.zeros((0, 3), np.float32),
                     rand(rng, F32, (3, 5))])
        z = np.zeros((3,), np.float32)
        return (compare(out[0], z, F32) or
                compare(out[1], np.full(3, -np.inf, np.float32), F32) or
                compare(out[2], np.zeros((0, 5), np.float32), F32) or
                compare(out[3], np.zeros((0, 3), np.float32), F32) or
                compare(out[4], np.zeros((0, 3), np.float32), F32) or
                compare(out[5], np.zeros((3, 3), np.float32), F32))
    run_case("symbolic/zero_batch", zero_batch)


def test_strided():
    """Strided and transposed inputs, strided outputs."""
    for dt in (F32, F16, BF16, I32, I64, BOOL, F64, I8):
        def body(rng, dt=dt):
            base = rand(rng, dt, (6, 10))
            views = {"T": base.T, "step": base[::2, 1::3],
                     "neg": base[::-1, ::-2],
                     "bcast": np.broadcast_to(base[:1, :5], (4, 5))}
            for name, v in views.items():
                g = tjc.Graph()
                x = g.input(dt, list(v.shape), "x")
                g.output(g.reshape(x, [v.size]), "flat")
                g.output(g.transpose(x, [1, 0]), "t")
                if dt in NUMERIC:
                    g.output(g.reduce("max", x, [1]), "m")
                    g.output(g.add(x, x), "s")
                g.finalize()
                out = g.run([v])
                problem = compare(out[0], v.reshape(-1), dt) or \
                    compare(out[1], v.T, dt)
                if not problem and dt in NUMERIC:
                    xv = to_f64(v, dt) if dt in FLOATS else v.astype(np.int64)
                    mx = xv.max(axis=1)
                    ss = xv + xv
                    problem = compare(out[2], from_f64(mx, dt) if dt in FLOATS
                                      else from_int(mx, dt), dt) or \
                        compare(out[3], from_f64(ss, dt) if dt in FLOATS
                                else from_int(ss, dt), dt)
                if problem:
                    return f"view {name}: {problem}"
            return None
        run_case(f"strided/inputs/{NAME[dt]}", body)

    def matmul_transposed(rng):
        a = rand(rng, F32, (33, 17))
        b = rand(rng, F32, (5, 33))
        want = from_f64(to_f64(a, F32).T @ to_f64(b, F32).T, F32)
        return expect_one([(F32, a.T), (F32, b.T)],
                          lambda g, x, y: g.matmul(x, y), want, F32)
    run_case("strided/matmul_transposed", matmul_transposed)

    def strided_output(rng):
        a = rand(rng, F32, (4, 6))
        g = tjc.Graph()
        x = g.input(F32, [4, 6], "x")
        g.output(g.neg(x), "y")
        g.output(g.transpose(x, [1, 0]), "t")
        g.finalize()
        big = np.full((8, 12), 99.0, dtype=np.float32)
        out0 = big[::2, ::2]
        t_store = np.zeros((4, 6), dtype=np.float32)
        out1 = t_store.T  # a transposed (column-major) output
        g.run_into([a], [out0, out1])
        if not np.array_equal(out0, -a):
            return "strided output 0 wrong"
        if not (big[1::2] == 99.0).all() or not (big[:, 1::2] == 99.0).all():
            return "wrote outside the strided output"
        if not np.array_equal(out1, a.T):
            return "transposed output 1 wrong"
        return None
    run_case("strided/outputs", strided_output)


def test_graphs():
    """Several nodes: values reused late (buffer lifetimes), inputs and
    constants as outputs, one node output twice."""
    def chain(rng):
        x = rand(rng, F32, (5, 7))
        c = rand(rng, F32, (7,))
        g = tjc.Graph()
        xv = g.input(F32, [5, 7], "x")
        cv = g.constant(F32, c)
        a = g.mul(xv, cv)
        b = g.exp(g.neg(g.abs(a)))
        d = g.sub(b, a)  # a used again after three nodes
        e = g.reduce("sum", g.mul(d, d), [1], True)
        g.output(g.div(d, e), "y")
        g.output(xv, "x_again")
        g.output(cv, "c_again")
        g.output(d, "d1")
        g.output(d, "d2")
        g.finalize()
        out = g.run([x])
        f = lambda v: to_f64(from_f64(v, F32), F32)  # noqa: E731
        a64 = f(to_f64(x, F32) * to_f64(c, F32))
        b64 = f(np.exp(f(-f(np.abs(a64)))))
        d64 = f(b64 - a64)
        e64 = f(f(d64 * d64).sum(axis=1, keepdims=True))
        return (compare(out[0], from_f64(d64 / e64, F32), F32) or
                compare(out[1], x, F32) or compare(out[2], c, F32) or
                compare(out[3], from_f64(d64, F32), F32) or
                compare(out[4], from_f64(d64, F32), F32))
    run_case("graph/chain_and_reuse", chain)


#===--- errors ---===#

def expect_error(fn, code, *needles):
    try:
        fn()
    except tjc.Error as e:
        if e.code != code:
            return f"expected {code}, got {e.code}: {e.message}"
        for n in needles:
            if n not in e.message:
                return f"message {e.message!r} lacks {n!r}"
        return None
    return f"expected {code}, but the call succeeded"


def test_errors():
    def make():
        g = tjc.Graph()
        B = g.symbol("B")
        x = g.input(F32, [B, 4], "x")
        w = g.input(F32, [4, 3], "w")
        g.output(g.matmul(x, w), "y")
        g.finalize()
        return g

    def wrong_shape(rng):
        g = make()
        x = np.zeros((2, 5), np.float32)
        w = np.zeros((4, 3), np.float32)
        return expect_error(lambda: g.run_into(
            [x, w], [np.zeros((2, 3), np.float32)]), "INVALID_ARGUMENT", "x")
    run_case("errors/wrong_input_shape", wrong_shape)

    def wrong_dtype(rng):
        g = make()
        x = np.zeros((2, 4), np.float64)
        w = np.zeros((4, 3), np.float32)
        return expect_error(lambda: g.run_into(
            [x, w], [np.zeros((2, 3), np.float32)]), "INVALID_ARGUMENT", "x")
    run_case("errors/wrong_input_dtype", wrong_dtype)

    def wrong_count(rng):
        g = make()
        return expect_error(lambda: g.run_into(
            [np.zeros((2, 4), np.float32)], [np.zeros((2, 3), np.float32)]),
            "INVALID_ARGUMENT", "inputs")
    run_case("errors/wrong_input_count", wrong_count)

    def out_shape(rng):
        g = make()
        x = np.zeros((2, 4), np.float32)
        w = np.zeros((4, 3), np.float32)
        return expect_error(lambda: g.run_into(
            [x, w], [np.zeros((3, 3), np.float32)]), "INVALID_ARGUMENT",
            "output 0", '"y"', "f32[3,3]", "f32[2,3]")
    run_case("errors/output_shape_mismatch", out_shape)

    def out_dtype(rng):
        g = make()
        x = np.zeros((2, 4), np.float32)
        w = np.zeros((4, 3), np.float32)
        return expect_error(lambda: g.run_into(
            [x, w], [np.zeros((2, 3), np.float64)]), "INVALID_ARGUMENT",
            "output 0", "f64[2,3]", "f32[2,3]")
    run_case("errors/output_dtype_mismatch", out_dtype)

    def out_count(rng):
        g = make()
        x = np.zeros((2, 4), np.float32)
        w = np.zeros((4, 3), np.float32)
        return expect_error(lambda: g.run_into([x, w], []),
                            "INVALID_ARGUMENT", "outputs")
    run_case("errors/output_count", out_count)

    def overlap(rng):
        g = tjc.Graph()
        x = g.input(F32, [4], "x")
        g.output(g.neg(x), "y")
        g.finalize()
        buf = np.zeros(6, np.float32)
        return expect_error(lambda: g.run_into([buf[:4]], [buf[2:]]),
                            "INVALID_ARGUMENT", "overlaps", '"x"')
    run_case("errors/output_overlaps_input", overlap)

    def unbound(rng):
        g = tjc.Graph()
        B = g.symbol("B")
        C = g.symbol("C")
        x = g.input(F32, [B], "x")
        g.output(g.full(F32, [C], 1.0), "y")
        g.output(g.neg(x), "z")
        g.finalize()
        x_arr = np.zeros(3, np.float32)
        return expect_error(lambda: g.run_into(
            [x_arr], [np.zeros(1, np.float32), np.zeros(3, np.float32)]),
            "INVALID_ARGUMENT", "C")
    run_case("errors/unbound_symbol", unbound)

    def gather_oob(rng):
        # Out of range after wrapping once: clamped into [0, n - 1].
        g = tjc.Graph()
        a = g.input(F32, [4, 3], "a")
        i = g.input(I64, [4], "i")
        g.output(g.gather(a, i, 0), "y")
        g.finalize()
        av = np.arange(12, dtype=np.float32).reshape(4, 3)
        out = g.run([av, np.array([0, 7, -1, -9], np.int64)])
        want = av[[0, 3, 3, 0]]
        if not np.array_equal(out[0], want):
            return f"gather clamps to {want.tolist()}, got {out[0].tolist()}"
        return None
    run_case("gather/out_of_range_clamps", gather_oob)

    def gather_empty(rng):
        g = tjc.Graph()
        N = g.symbol("N")
        a = g.input(I32, [N], "a")
        i = g.input(I32, [2], "i")
        g.output(g.gather(a, i, 0), "y")
        g.finalize()
        return expect_error(lambda: g.run(
            [np.zeros(0, np.int32), np.array([-4, -5], np.int32)]),
            "INVALID_ARGUMENT", "gather", "node", "empty")
    run_case("errors/gather_from_empty_axis", gather_empty)

    def argmax_empty(rng):
        # A constant empty axis is refused while building; a symbolic one
        # can be 0 only at run time.
        g = tjc.Graph()
        B = g.symbol("B")
        a = g.input(F32, [B, 3], "a")
        g.output(g.argmax(a, 1), "y")  # fine: B rows of 3
        g.output(g.argmax(a, 0), "z")  # empty when B == 0
        g.finalize()
        out = g.run([np.array([[1, 5, 2]], np.float32)])
        if out[0].tolist() != [1] or out[1].tolist() != [0, 0, 0]:
            return f"B=1 gives {out}"
        return expect_error(lambda: g.run([np.zeros((0, 3), np.float32)]),
                            "INVALID_ARGUMENT", "argmax", "node", "empty")
    run_case("errors/argmax_empty_axis", argmax_empty)

    def not_cpu(rng):
        g = make()
        x = np.zeros((2, 4), np.float32)
        w = np.zeros((4, 3), np.float32)
        t, keep = tjc.tensor_of(x)
        t.device_type = 2
        return expect_error(lambda: g.run_into(
            [t, w], [np.zeros((2, 3), np.float32)]), "INVALID_ARGUMENT",
            "CPU")
    run_case("errors/input_not_cpu", not_cpu)


#===--- the capstone: y = gelu(linear(x, w, b), tanh form), B symbolic ---===#

def test_capstone():
    K, N = 1024, 4096

    def body_for(b):
        def body(rng):
            g = tjc.Graph("capstone")
            B = g.symbol("B")
            x = g.input(F32, [B, K], "x")
            w = g.input(F32, [K, N], "w")
            bias = g.input(F32, [N], "b")
            g.output(g.gelu(g.linear(x, w, bias), True), "y")
            g.finalize()
            xv = rng.standard_normal((b, K)).astype(np.float32)
            wv = (rng.standard_normal((K, N)) / 32).astype(np.float32)
            bv = rng.standard_normal(N).astype(np.float32)
            start = time.perf_counter()
            y = g.run([xv, wv, bv])[0]
            took = time.perf_counter() - start
            # The linear node rounds to f32, then gelu computes from that.
            lin = (xv.astype(np.float64) @ wv.astype(np.float64) +
                   bv.astype(np.float64)).astype(np.float32)
            want = np_gelu(lin.astype(np.float64), True).astype(np.float32)
            problem = compare(y, want, F32)
            print(f"  capstone B={b}: reference run {took:.2f} s", flush=True)
            return problem
        return body
    for b in (1, 7, 2048):
        run_case(f"capstone/B={b}", body_for(b))


def main():
    # numpy warns about the empty reductions and NaNs the cases make on
    # purpose.
    warnings.simplefilter("ignore", RuntimeWarning)
    start = time.time()
    for t in (test_unary, test_cast, test_binary, test_where, test_leaves,
              test_reductions, test_matmul, test_composites, test_movement,
              test_symbolic, test_strided, test_graphs, test_errors,
              test_capstone):
        t()
    print(f"{cases_run} cases, {len(failures)} failed "
          f"({time.time() - start:.1f} s, base seed {BASE_SEED})")
    for name, seed, _ in failures:
        print(f"  failed: {name} (seed {seed})")
    return 1 if failures or cases_run == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
