"""tensorjit.custom_op: Python functions as custom ops inside compiled graphs,
against numpy.

Runs under pytest, or as a plain script:

    TJ_LIBRARY=build/libtensorjit.so python3 tests/python/test_custom_op.py
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402
from tensorjit import _lib  # noqa: E402

RNG = np.random.default_rng(16)


def same(x, *attrs):
    return x


def host_stats(exe):
    s = _lib.ExecutableStats_t()
    s.struct_size = ctypes.sizeof(s)
    _lib.lib().tj_executable_stats(exe.handle, ctypes.byref(s))
    return s


calls = {"clip3": 0}


@tj.custom_op("py_clip3", shape=same)
def clip3(x):
    calls["clip3"] += 1
    assert not x.flags.writeable  # inputs are read-only views
    return np.clip(x, -3.0, 3.0)


@pytest.mark.parametrize("target", ["x86", "reference"])
def test_mid_chain(target):
    """exp -> clip3 (Python) -> mul/add: two fused regions around one host
    call, no graph break, every batch from one executable."""
    g = tj.Graph("mid")
    x = g.input("x", "f32", ["B", 16])
    g.output(clip3(g.exp(x) * 4.0 - 6.0) * 2.0 + 1.0, "y")
    exe = tj.compile(g, target=target)
    for b in (1, 5, 33):
        a = RNG.standard_normal((b, 16)).astype(np.float32)
        before = calls["clip3"]
        y = exe(a)
        assert calls["clip3"] == before + 1
        want = np.clip(np.exp(a) * 4.0 - 6.0, -3.0, 3.0) * 2.0 + 1.0
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)
    if target == "x86":
        s = host_stats(exe)
        assert s.num_host_calls == 1
        assert s.num_graph_breaks == 0
        assert s.num_kernels == 2
        assert s.recompiles == 0


def cat_rule(a, b):
    # [B, N] and [B, M] -> [B, N + M]: symbolic dims through dim_add.
    assert a.dtype == tj.F32 and a.rank == 2
    return tj.TensorType(a.dtype, (a.shape[0], a.shape[1] + b.shape[1]))


@tj.custom_op("py_cat", shape=cat_rule)
def py_cat(a, b):
    return np.concatenate([a, b], axis=1)


def test_symbolic_dims_flow_through():
    g = tj.Graph("cat")
    a = g.input("a", "f32", ["B", "N"])
    b = g.input("b", "f32", ["B", 3])
    y = py_cat(g.tanh(a), b)
    g.output(g.sum(y * y, axes=[1]), "s")
    g.output(y, "y")
    exe = tj.compile(g)
    for bb, n in ((2, 1), (4, 7)):
        av = RNG.standard_normal((bb, n)).astype(np.float32)
        bv = RNG.standard_normal((bb, 3)).astype(np.float32)
        s, y = exe(av, bv)
        want = np.concatenate([np.tanh(av), bv], axis=1)
        assert y.shape == (bb, n + 3)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s, (want * want).sum(1), rtol=1e-5)


@tj.custom_op("py_affine", shape=same)
def py_affine(x, times=1, scale=1.0):
    return np.repeat(x * scale, 1) * times


def test_attributes():
    g = tj.Graph("attrs")
    x = g.input("x", "f64", [6])
    g.output(py_affine(x, 3, 0.5), "y")
    assert "py_affine" in str(g) if hasattr(g, "__str__") else True
    exe = tj.compile(g)
    a = RNG.standard_normal(6)
    np.testing.assert_allclose(exe(a), a * 0.5 * 3, rtol=1e-12)
    # Called on arrays, the op is the plain function.
    np.testing.assert_allclose(py_affine(a, 2, 2.0), a * 4.0)


@tj.custom_op("py_boom", shape=same)
def py_boom(x):
    if float(x.reshape(-1)[0]) > 0:
        raise ValueError("the first element is positive")
    return x


@pytest.mark.parametrize("target", ["x86", "reference"])
def test_exception_is_the_run_error(target):
    g = tj.Graph("boom")
    x = g.input("x", "f32", [4])
    g.output(py_boom(x + 1.0) * 2.0, "y")
    exe = tj.compile(g, target=target)
    with pytest.raises(tj.TensorJitError) as info:
        exe(np.ones(4, np.float32))
    msg = str(info.value)
    assert "py_boom" in msg
    assert "ValueError: the first element is positive" in msg
    # The executable still works afterwards.
    a = -np.full(4, 5.0, np.float32)
    np.testing.assert_allclose(exe(a), (a + 1.0) * 2.0)


@tj.custom_op("py_badshape", shape=same)
def py_badshape(x):
    return np.zeros(x.size + 1, x.dtype)


def test_wrong_result_shape():
    g = tj.Graph("bad")
    x = g.input("x", "f32", [3])
    g.output(py_badshape(x), "y")
    exe = tj.compile(g)
    with pytest.raises(tj.TensorJitError, match="py_badshape.*shape"):
        exe(np.ones(3, np.float32))


def broken_rule(x):
    raise KeyError("no rule for this input")


@tj.custom_op("py_broken", shape=broken_rule)
def py_broken(x):
    return x


def test_shape_rule_exception_is_the_graph_error():
    g = tj.Graph("broken")
    x = g.input("x", "f32", [3])
    with pytest.raises(tj.TensorJitError) as info:
        py_broken(x)
    msg = str(info.value)
    assert "py_broken" in msg and "KeyError" in msg
    assert "no rule for this input" in msg


def test_shape_rule_bad_result():
    op = tj.custom_op("py_norule", shape=lambda x: 42)(lambda x: x)
    g = tj.Graph("norule")
    x = g.input("x", "f32", [3])
    with pytest.raises(tj.TensorJitError, match="py_norule.*TensorType"):
        op(x)


def test_dtype_from_rule_and_cast():
    op = tj.custom_op("py_count", shape=lambda x: ("i64", [1]))(
        lambda x: np.array([np.count_nonzero(x > 0)]))
    g = tj.Graph("count")
    x = g.input("x", "f32", ["N"])
    g.output(op(x) + 1, "y")
    exe = tj.compile(g)
    a = np.array([1, -1, 2, 3, -5], np.float32)
    y = exe(a)
    assert y.dtype == np.int64 and y.tolist() == [4]


def cube_vjp(g, inputs, output, grad_output):
    (x,) = inputs
    return [grad_output * x * x * 3.0]


@tj.custom_op("py_cube", shape=same, vjp=cube_vjp)
def py_cube(x):
    return x * x * x


def _grad(g, wrt):
    """tj_graph_grad of output 0 with respect to inputs |wrt|, as a Graph."""
    L = _lib.lib()
    fn = L.tj_graph_grad
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int32,
                   ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                   ctypes.POINTER(ctypes.c_int32),
                   ctypes.POINTER(ctypes.c_void_p)]
    outs = (ctypes.c_int32 * 1)(0)
    w = (ctypes.c_int32 * len(wrt))(*wrt)
    joint = ctypes.c_void_p()
    _lib.check(fn(g.handle, 1, outs, len(wrt), w, ctypes.byref(joint)))
    j = tj.Graph.__new__(tj.Graph)
    j._handle = joint.value
    j.context = g.context
    j._borrowed, j._dim_names, j._symbols = [], {}, {}
    j.name = "joint"
    g.context._adopt(j)
    return j


@pytest.mark.parametrize("target", ["x86", "reference"])
def test_vjp_through_autodiff(target):
    g = tj.Graph("cube")
    x = g.input("x", "f32", ["B", 4])
    g.output(g.sum(py_cube(x * 0.5), axes=[0, 1]), "loss")
    g.finalize()
    joint = _grad(g, [0])
    exe = tj.compile(joint, target=target)
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    outs = exe.run([a, np.ones((), np.float32)])
    loss, dx = outs[0], outs[-1]
    np.testing.assert_allclose(loss, ((a * 0.5) ** 3).sum(), rtol=1e-5)
    # d/dx sum((x/2)^3) = 3 (x/2)^2 / 2, and central differences agree.
    np.testing.assert_allclose(dx, 3 * (a * 0.5) ** 2 * 0.5, rtol=1e-5,
                               atol=1e-6)
    a64 = a.astype(np.float64)
    eps = 1e-3
    fd = np.zeros_like(a64)
    for i in np.ndindex(a.shape):
        p, m = a64.copy(), a64.copy()
        p[i] += eps
        m[i] -= eps
        fd[i] = (((p * 0.5) ** 3).sum() - ((m * 0.5) ** 3).sum()) / (2 * eps)
    np.testing.assert_allclose(dx, fd, rtol=1e-3, atol=1e-4)


def test_vjp_exception_fails_grad():
    def bad_vjp(g, inputs, output, grad_output):
        raise RuntimeError("no gradient today")

    op = tj.custom_op("py_badvjp", shape=same, vjp=bad_vjp)(lambda x: x)
    g = tj.Graph("badvjp")
    x = g.input("x", "f32", [2])
    g.output(g.sum(op(x), axes=[0]), "loss")
    g.finalize()
    with pytest.raises(tj.TensorJitError) as info:
        _grad(g, [0])
    assert "py_badvjp" in str(info.value)
    assert "RuntimeError: no gradient today" in str(info.value)


def test_other_context_registers_on_use():
    ctx = tj.Context()
    g = tj.Graph("ctx", context=ctx)
    x = g.input("x", "f32", [5])
    g.output(clip3(x * 10.0), "y")
    exe = tj.compile(g)
    a = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(exe(a), np.clip(a * 10.0, -3, 3), rtol=1e-6)
    exe.close()
    ctx.close()


def test_threads_take_the_gil():
    """Runs from several Python threads at once: each host call takes the
    GIL, none deadlocks or mixes results."""
    g = tj.Graph("thr")
    x = g.input("x", "f32", ["B", 8])
    g.output(clip3(x * 3.0) + 1.0, "y")
    exe = tj.compile(g)
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                a = rng.standard_normal((1 + seed, 8)).astype(np.float32)
                np.testing.assert_allclose(
                    exe(a), np.clip(a * 3.0, -3, 3) + 1.0, rtol=1e-6)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_torch_tensors():
    torch = pytest.importorskip("torch")

    @tj.custom_op("py_torch_relu", shape=same, torch=True)
    def relu(x):
        assert isinstance(x, torch.Tensor)
        return torch.relu(x)

    g = tj.Graph("torch")
    x = g.input("x", "f32", [7])
    g.output(relu(x - 0.5), "y")
    a = RNG.standard_normal(7).astype(np.float32)
    np.testing.assert_allclose(tj.compile(g)(a), np.maximum(a - 0.5, 0))


def test_registration_errors():
    with pytest.raises(tj.InvalidArgumentError):
        tj.custom_op("not an identifier", shape=same)
    with pytest.raises(tj.TensorJitError, match="already registered"):
        tj.custom_op("py_clip3", shape=same)(lambda x: x)


def positives_rule(x):
    return (x.dtype, [tj.dynamic_dim("N", x.shape[0] * x.shape[1])])


@tj.custom_op("py_positives", shape=positives_rule)
def py_positives(x):
    return x[x > 0]  # fewer elements than the bound


@pytest.mark.parametrize("target", ["x86", "reference"])
def test_data_dependent_dim(target):
    """A nonzero-like filter, then pointwise ops and a sum over its
    data-dependent size, at several sizes with no recompile."""
    g = tj.Graph("filter")
    x = g.input("x", "f32", ["R", 3])
    c = py_positives(x * 2.0 - 1.0)
    y = g.exp(-c) * c + c
    g.output(g.sum(y), "total")
    g.output(g.sum(c * 0.0 + 1.0), "count")
    exe = tj.compile(g, target=target, specialize="always")
    for r in (1, 4, 50):
        for a in (-np.ones((r, 3), np.float32),
                  RNG.standard_normal((r, 3)).astype(np.float32),
                  np.ones((r, 3), np.float32)):
            h = a.astype(np.float64) * 2 - 1
            p = h[h > 0]
            total, count = exe(a)
            assert int(round(float(count))) == p.size
            np.testing.assert_allclose(total, (np.exp(-p) * p + p).sum(),
                                       rtol=1e-5, atol=1e-5)
    if target == "x86":
        assert exe.stats.recompiles == 0


def test_data_dependent_errors():
    too_big = tj.custom_op("py_toobig", shape=positives_rule)(
        lambda x: np.zeros(x.size + 1, x.dtype))
    g = tj.Graph("toobig")
    x = g.input("x", "f32", [2, 2])
    g.output(g.sum(too_big(x)), "s")
    with pytest.raises(tj.TensorJitError, match="py_toobig.*shape"):
        tj.compile(g)(np.ones((2, 2), np.float32))
    g = tj.Graph("dynout")
    x = g.input("x", "f32", [2, 2])
    g.output(py_positives(x), "y")
    # Such an output comes back in its actual shape (the binding runs
    # tj_executable_run_shaped for graphs that have one).
    exe = tj.compile(g)
    for a in (np.float32([[1, -2], [3, 0]]), -np.ones((2, 2), np.float32)):
        np.testing.assert_array_equal(exe(a), a[a > 0])
    with pytest.raises(tj.InvalidArgumentError, match="shape rule"):
        tj.dynamic_dim("N", 4)


# A CUDA implementation from LLVM IR (cuda_llvm_ir): y = x * a + b over a
# [B, 64] f32 tensor, one thread per element. Its parameters: out, in, the
# output's dims, the input's dims, then the float attributes a and b.
AXPB_IR = """target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare float @llvm.fma.f32(float, float, float)

define ptx_kernel void @py_axpb(ptr %out, ptr %in, i64 %od0, i64 %od1,
                                i64 %id0, i64 %id1, double %a, double %b) {
entry:
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c64 = zext i32 %c to i64
  %n64 = zext i32 %n to i64
  %t64 = zext i32 %t to i64
  %base = mul i64 %c64, %n64
  %i = add i64 %base, %t64
  %total = mul i64 %od0, %od1
  %inside = icmp slt i64 %i, %total
  br i1 %inside, label %body, label %done
body:
  %pi = getelementptr float, ptr %in, i64 %i
  %x = load float, ptr %pi
  %af = fptrunc double %a to float
  %bf = fptrunc double %b to float
  %y = call float @llvm.fma.f32(float %x, float %af, float %bf)
  %po = getelementptr float, ptr %out, i64 %i
  store float %y, ptr %po
  br label %done
done:
  ret void
}
"""

ir_calls = {"host": 0, "launch": 0}


def axpb_launch(x, out, a, b):
    """One thread per element, 128 a block; a batch of 13 is refused."""
    ir_calls["launch"] += 1
    assert out.shape == x.shape and all(isinstance(d, int) for d in x.shape)
    if out.shape[0] == 13:
        raise ValueError("no batch of 13")
    n = out.shape[0] * out.shape[1]
    return ((n + 127) // 128, 1, 1), 128


@tj.custom_op("py_axpb_ir", shape=same, cuda_llvm_ir=AXPB_IR,
              cuda_entry="py_axpb", cuda_launch=axpb_launch)
def py_axpb_ir(x, a=1.0, b=0.0):
    ir_calls["host"] += 1
    return (x.astype(np.float64) * a + b).astype(np.float32)


def axpb_chain(name="axpb_chain"):
    """exp(x) * 0.5 + x -> axpb(2, 1) -> tanh(c) * c - 0.25."""
    g = tj.Graph(name)
    x = g.input("x", "f32", ["B", 64])
    c = py_axpb_ir(g.exp(x) * 0.5 + x, 2.0, 1.0)
    g.output(g.tanh(c) * c - 0.25, "y")
    return g


def test_cuda_llvm_ir_registers_offline():
    """The IR compiles to PTX when the op is registered (no GPU needed);
    off the GPU the Python function runs, mid-chain, as a host call."""
    exe = tj.compile(axpb_chain(), target="x86")
    ref = tj.compile(axpb_chain(), target="reference")
    for b in (1, 7):
        a = RNG.standard_normal((b, 64)).astype(np.float32)
        before = ir_calls["host"]
        y = exe(a)
        assert ir_calls["host"] == before + 1
        np.testing.assert_allclose(y, ref(a), rtol=1e-5, atol=1e-5)
    assert host_stats(exe).num_host_calls == 1
    assert host_stats(exe).num_graph_breaks == 0


def test_cuda_llvm_ir_errors():
    """Bad IR is refused at registration with LLVM's diagnostic and the
    op's name; PTX and IR together, and IR without a launch rule, too."""
    undefined = ("define ptx_kernel void @k(ptr %p) {\n"
                 "  store i32 %nothing, ptr %p\n  ret void\n}\n")
    x86 = ('target triple = "x86_64-pc-linux-gnu"\n'
           "define ptx_kernel void @k(ptr %p) {\n  ret void\n}\n")
    cases = [(undefined, "k", "use of undefined value '%nothing'"),
             ("define ptx_kernel void @k(", "k", "does not parse"),
             (x86, "k", "x86_64-pc-linux-gnu"),
             (AXPB_IR, "k", "no function @k")]
    for i, (ir, entry, message) in enumerate(cases):
        with pytest.raises(tj.InvalidArgumentError) as e:
            tj.custom_op(f"py_bad_ir{i}", shape=same, cuda_llvm_ir=ir,
                         cuda_entry=entry, cuda_launch=axpb_launch)(
                lambda x: x)
        assert f"op py_bad_ir{i}" in str(e.value)
        assert message in str(e.value)
    with pytest.raises(tj.InvalidArgumentError, match="not both"):
        tj.custom_op("py_both", shape=same, cuda_llvm_ir=AXPB_IR,
                     cuda_ptx=".version 7.8\n", cuda_entry="py_axpb",
                     cuda_launch=axpb_launch)(lambda x: x)
    with pytest.raises(tj.InvalidArgumentError, match="cuda_launch"):
        tj.custom_op("py_nolaunch", shape=same, cuda_llvm_ir=AXPB_IR,
                     cuda_entry="py_axpb")(lambda x: x)
    with pytest.raises(tj.ArgumentTypeError, match="cuda_llvm_ir"):
        tj.custom_op("py_notext", shape=same, cuda_llvm_ir=b"bytes",
                     cuda_entry="py_axpb", cuda_launch=axpb_launch)(
            lambda x: x)
    with pytest.raises(tj.ArgumentTypeError, match="cuda_launch"):
        tj.custom_op("py_notcallable", shape=same, cuda_llvm_ir=AXPB_IR,
                     cuda_entry="py_axpb", cuda_launch=3)(lambda x: x)


def cuda_available():
    g = tj.Graph("probe")
    a = g.input("a", "f32", [1])
    g.output(a + a, "y")
    try:
        tj.compile(g, "cuda").close()
        return True
    except (tj.UnsupportedError, tj.BackendError):
        return False


def test_cuda_llvm_ir_on_the_gpu():
    """On the CUDA target the kernel compiled from the IR runs between the
    two fused regions (the launch rule called each run, the Python
    function not at all), three batches from one executable, against the
    reference; the launch rule's exception is the run's error."""
    if not cuda_available():
        pytest.skip("no CUDA device")
    exe = tj.compile(axpb_chain("axpb_gpu"), target="cuda")
    ref = tj.compile(axpb_chain("axpb_gpu"), target="reference")
    for b in (1, 33, 5, 33):
        a = RNG.standard_normal((b, 64)).astype(np.float32)
        host, launch = ir_calls["host"], ir_calls["launch"]
        y = exe(a)
        assert ir_calls["host"] == host
        assert ir_calls["launch"] > launch
        np.testing.assert_allclose(y, ref(a), rtol=1e-5, atol=1e-5)
    with pytest.raises(tj.TensorJitError, match="py_axpb_ir.*no batch of 13"):
        exe(np.ones((13, 64), np.float32))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


# The library's own data-dependent ops from Python: outputs whose dims an
# op sets at run time come back in their actual shapes (the binding runs
# tj_executable_run_shaped for such graphs), many sizes from one
# executable, against numpy.
@pytest.mark.parametrize("target", ["x86", "reference"])
def test_builtin_data_dependent_outputs(target):
    g = tj.Graph("nz")
    x = g.input("x", "f32", ["R", 3])
    g.output(g.nonzero(x), "nz")
    g.output(g.sum(x), "s")
    run = tj.compile(g, target=target) if target == "x86" else g.run_reference
    for r in (1, 4, 9):
        for a in (np.zeros((r, 3), np.float32),
                  (RNG.standard_normal((r, 3)) > 0.3).astype(np.float32),
                  np.ones((r, 3), np.float32)):
            for _ in range(2):  # a second call of the same shapes
                nz, s = run(a)
                np.testing.assert_array_equal(nz, np.array(np.nonzero(a)))
                assert nz.dtype == np.int64
                np.testing.assert_allclose(s, a.sum(), rtol=1e-6)
    if target == "x86":
        assert run.stats.recompiles == 0

    g = tj.Graph("uniq")
    v = g.input("v", "i64", ["N"])
    vals, first, inverse, counts = g.unique(v)
    for out, name in ((vals, "vals"), (first, "first"), (inverse, "inv"),
                      (counts, "counts")):
        g.output(out, name)
    g.output(g.compress(v, g.gt(v, g.scalar("i64", 2)), axis=0), "big")
    exe = tj.compile(g, target=target) if target == "x86" else g.run_reference
    for n in (1, 7, 30):
        a = RNG.integers(0, 6, n).astype(np.int64)
        got = exe(a)
        want = np.unique(a, return_index=True, return_inverse=True,
                         return_counts=True)
        for gv, wv in zip(got[:4], want):
            np.testing.assert_array_equal(gv, np.asarray(wv).reshape(-1))
        np.testing.assert_array_equal(got[4], a[a > 2])


def test_range_from_python():
    g = tj.Graph("rng")
    start = g.input("start", "f32", [])
    limit = g.input("limit", "f32", [])
    y = g.range(start, limit, 0.5)
    g.output(y, "y")
    g.output(y * 2.0 + 1.0, "z")
    exe = tj.compile(g)
    for a, b in ((0.0, 3.0), (2.0, 2.0), (-1.25, 4.0), (5.0, 1.0)):
        y, z = exe(np.float32(a), np.float32(b))
        want = np.arange(a, b, 0.5, dtype=np.float32)
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(z, want * 2 + 1)
    g = tj.Graph("rngc")
    n = g.input("n", "i64", [])
    g.output(g.range_count(g.scalar("i32", 3), n, g.scalar("i32", -2)), "y")
    exe = tj.compile(g)
    for count in (0, 1, 5):
        np.testing.assert_array_equal(exe(np.int64(count)),
                                      3 - 2 * np.arange(count, dtype=np.int32))


def test_non_max_suppression_from_python():
    g = tj.Graph("nms")
    boxes = g.input("boxes", "f32", [1, "N", 4])
    scores = g.input("scores", "f32", [1, 1, "N"])
    keep = g.non_max_suppression(boxes, scores, g.constant(np.int64([10])),
                                 g.constant(np.float32([0.5])))
    g.output(keep, "keep")
    exe = tj.compile(g)
    b = np.float32([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6]]])
    s = np.float32([[[0.9, 0.8, 0.7]]])
    np.testing.assert_array_equal(exe(b, s), [[0, 0, 0], [0, 0, 2]])
