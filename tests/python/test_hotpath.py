"""The Python hot path (python/tensorjit/_fast.py), the compile options and
gradients from Python, against numpy and the reference interpreter.

Torch cases skip without torch, CUDA cases without a CUDA device (the lead
runs them on the GPU machine).
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402
from tensorjit import _fast, _lib  # noqa: E402
from tensorjit.executable import _cuda_stream  # noqa: E402

RNG = np.random.default_rng(1414)

try:
    import torch  # type: ignore
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="no torch")
needs_cuda = pytest.mark.skipif(
    torch is None or not torch.cuda.is_available(), reason="no CUDA torch")


def run_on_threads(work, n):
    """work(seed) on n threads at once, seeds 0..n-1; joined."""
    threads = [threading.Thread(target=work, args=(s,)) for s in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def pointwise(symbolic=True, name="pw"):
    """y = a * b + a over [B, 5] (or [3, 5])."""
    g = tj.Graph(name)
    a = g.input("a", "f32", ["B" if symbolic else 3, 5])
    b = g.input("b", "f32", ["B" if symbolic else 3, 5])
    g.output(a * b + a, "y")
    return g


def two_outputs():
    g = tj.Graph("two")
    a = g.input("a", "f32", ["B", 6])
    b = g.input("b", "f32", [6])
    g.output((a + b).exp(), "e")
    g.output(a.sum(1), "s")
    return g


#===--- the numpy hot path ---===#


def test_numpy_pointer_matches_array_interface():
    base = np.arange(64, dtype=np.float64).reshape(8, 8)
    for a in (base, base[2:], base[:, 3:], base.T, np.empty(0),
              np.zeros((), np.int8)):
        assert _fast.numpy_pointer(a) == a.__array_interface__["data"][0]
    assert _fast._DATA_OFFSET != 0  # CPython: the hot path reads it directly


def test_hot_path_fresh_data_each_call():
    exe = tj.compile(pointwise(), num_threads=1)
    for _ in range(5):  # the plan is built on the first call, used after
        a, b = rand(4, 5), rand(4, 5)
        y = exe(a, b)
        np.testing.assert_allclose(y, a * b + a, rtol=1e-6, atol=1e-6)
    assert exe._plan is not None and exe._plan.kind == "numpy"
    # The outputs are new arrays unless asked otherwise.
    a, b = rand(4, 5), rand(4, 5)
    assert exe(a, b) is not exe(a, b)


def test_hot_path_follows_shape_changes():
    g = pointwise()
    exe = tj.compile(g, num_threads=1)
    for batch in (4, 4, 1, 7, 7, 4, 0, 2):
        a, b = rand(batch, 5), rand(batch, 5)
        y = exe(a, b)
        assert y.shape == (batch, 5)
        np.testing.assert_allclose(y, g.run_reference(a, b), rtol=1e-6,
                                   atol=1e-6)


def test_hot_path_falls_back_on_layout_and_dtype():
    g = pointwise()
    exe = tj.compile(g, num_threads=1)
    a, b = rand(4, 5), rand(4, 5)
    exe(a, b)
    # Strided view, Fortran order, a list, a float64 array: all go the
    # general path and are still right.
    big = rand(8, 5)
    for x in (big[::2], np.asfortranarray(a), a.tolist()):
        np.testing.assert_allclose(exe(x, b), np.asarray(x) * b +
                                   np.asarray(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(tj.InvalidArgumentError, match='input "a" is f64'):
        exe(a.astype(np.float64), b)
    # Keyword inputs take the general path too.
    np.testing.assert_allclose(exe(b=b, a=a), a * b + a, rtol=1e-6)
    np.testing.assert_allclose(exe(a, b), a * b + a, rtol=1e-6)


def test_generated_plan_checks_every_input_and_output():
    # The plan's call is generated per signature (_fast.specialize): each
    # input and each out= array is checked, not just the first.
    g = two_outputs()
    exe = tj.compile(g, num_threads=1)
    a, b = rand(3, 6), rand(6)
    exe(a, b)
    code = exe._call.__code__
    assert code.co_filename == "<tensorjit plan numpy 2->2>"
    with pytest.raises(tj.InvalidArgumentError, match='input "b"'):
        exe(a, rand(7))
    e, s = exe(a, rand(12)[::2])  # b strided: the general path
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5, atol=1e-5)
    outs = [np.empty((3, 6), np.float32), np.empty(3, np.float32)]
    assert exe(a, b, out=tuple(outs))[1] is outs[1]
    np.testing.assert_allclose(outs[0], np.exp(a + b), rtol=1e-5)
    with pytest.raises(tj.InvalidArgumentError, match='output "s"'):
        exe(a, b, out=[outs[0], np.empty(4, np.float32)])
    with pytest.raises(tj.InvalidArgumentError, match="overlaps input 'b'"):
        exe(a, b, out=[outs[0], b[:3]])
    with pytest.raises(tj.TensorJitError, match="list of 2 arrays"):
        exe(a, b, out=outs[0])
    with pytest.raises(tj.InvalidArgumentError, match="missing inputs b"):
        exe(a)


def test_dropped_executable_frees_its_plan_without_gc():
    # The generated call holds its plan, not the other way round: dropping
    # the executable frees the plan (and the outputs it keeps for
    # reuse_outputs) at once, with the collector off.
    import gc
    import weakref
    gc.disable()
    try:
        exe = tj.compile(pointwise(), num_threads=1, reuse_outputs=True)
        exe(rand(4, 5), rand(4, 5))  # builds the plan
        y = exe(rand(4, 5), rand(4, 5))
        assert exe(rand(4, 5), rand(4, 5)) is y  # the plan keeps y
        out = weakref.ref(y)
        del exe, y
        assert out() is None
    finally:
        gc.enable()


def test_hot_path_multiple_outputs():
    g = two_outputs()
    exe = tj.compile(g, num_threads=1)
    for batch in (3, 3, 5):
        a, b = rand(batch, 6), rand(6)
        e, s = exe(a, b)
        re, rs = g.run_reference(a, b)
        np.testing.assert_allclose(e, re, rtol=1e-5)
        np.testing.assert_allclose(s, rs, rtol=1e-5, atol=1e-5)


def test_out_on_the_hot_path():
    exe = tj.compile(pointwise(), num_threads=1)
    a, b = rand(4, 5), rand(4, 5)
    exe(a, b)
    out = np.full((4, 5), np.nan, np.float32)
    for _ in range(3):
        a, b = rand(4, 5), rand(4, 5)
        assert exe(a, b, out=out) is out
        np.testing.assert_allclose(out, a * b + a, rtol=1e-6)
    assert exe(a, b, out=[out]) is out  # one output: the array


def test_out_errors_name_the_problem():
    exe = tj.compile(pointwise(), num_threads=1)
    a, b = rand(4, 5), rand(4, 5)
    exe(a, b)
    with pytest.raises(tj.InvalidArgumentError, match="overlaps input 'a'"):
        exe(a, b, out=a)
    ro = np.empty((4, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(tj.InvalidArgumentError, match="read-only"):
        exe(a, b, out=ro)
    with pytest.raises(tj.InvalidArgumentError,
                       match='output "y" is f64 of rank 2 but the graph '
                             'makes f32'):
        exe(a, b, out=np.empty((4, 5), np.float64))
    with pytest.raises(tj.InvalidArgumentError,
                       match='output "y" dim 1 is 6 but these inputs make 5'):
        exe(a, b, out=np.empty((4, 6), np.float32))
    with pytest.raises(tj.InvalidArgumentError, match="makes 1 outputs"):
        exe(a, b, out=[np.empty((4, 5), np.float32)] * 2)
    # Still fine afterwards.
    np.testing.assert_allclose(exe(a, b), a * b + a, rtol=1e-6)


def test_out_overlapping_outputs_refused():
    exe = tj.compile(two_outputs(), num_threads=1)
    a, b = rand(3, 6), rand(6)
    exe(a, b)
    buf = np.empty(18, np.float32)
    with pytest.raises(tj.InvalidArgumentError, match="overlap"):
        exe(a, b, out=[buf.reshape(3, 6), buf[:3]])


def test_reuse_outputs_only_when_asked():
    g = pointwise()
    exe = tj.compile(g, num_threads=1, reuse_outputs=True)
    a, b = rand(4, 5), rand(4, 5)
    y1 = exe(a, b)
    y2 = exe(a, b)
    a3, b3 = rand(4, 5), rand(4, 5)
    y3 = exe(a3, b3)
    assert y2 is y3  # the same buffer, rewritten
    np.testing.assert_allclose(y3, a3 * b3 + a3, rtol=1e-6)
    np.testing.assert_allclose(y1, a * b + a, rtol=1e-6)
    # Another shape: new buffers, right values.
    a4, b4 = rand(2, 5), rand(2, 5)
    np.testing.assert_allclose(exe(a4, b4), a4 * b4 + a4, rtol=1e-6)
    exe.reuse_outputs = False
    assert exe(a4, b4) is not exe(a4, b4)


def _reuse_then_out(exe, a, b, o):
    """Two reusing calls, an out= call, a reusing call: the last writes
    into the reused output, not into the out= array."""
    exe(a, b)  # the general path builds the plan
    y = exe(a, b)  # the hot path: the reused output
    exe(b, a, out=o)
    z = exe(a * 3, b)
    assert z is y
    return z


def test_reuse_after_out_writes_the_reused_output():
    exe = tj.compile(pointwise(), num_threads=1, reuse_outputs=True)
    a, b = rand(4, 5), rand(4, 5)
    o = np.zeros((4, 5), np.float32)
    z = _reuse_then_out(exe, a, b, o)
    np.testing.assert_allclose(z, a * 3 * b + a * 3, rtol=1e-6)
    np.testing.assert_allclose(o, b * a + b, rtol=1e-6)


def test_library_errors_surface_with_their_message():
    exe = tj.compile(pointwise(symbolic=False), num_threads=1)
    a, b = rand(3, 5), rand(3, 5)
    exe(a, b)  # plan built
    with pytest.raises(tj.InvalidArgumentError,
                       match='input "a" dim 0 is 4 but the graph says 3'):
        exe(rand(4, 5), rand(4, 5))  # misses the plan; the library refuses
    exe.close()
    with pytest.raises(tj.InvalidArgumentError, match="closed"):
        exe(a, b)


def test_threads_share_an_executable():
    g = pointwise()
    exe = tj.compile(g, num_threads=1)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                a = rng.standard_normal((4, 5)).astype(np.float32)
                b = rng.standard_normal((4, 5)).astype(np.float32)
                y = exe(a, b)
                if not np.allclose(y, a * b + a, rtol=1e-6, atol=1e-6):
                    errors.append("wrong values")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    run_on_threads(work, 4)
    assert not errors, errors[:3]


def test_hot_path_without_the_struct_offsets(monkeypatch):
    # Where numpy's struct layout does not check out (another Python, a
    # future numpy), the hot path reads __array_interface__ and .flags.
    monkeypatch.setattr(_fast, "_DATA_OFFSET", 0)
    monkeypatch.setattr(_fast, "_FLAGS_OFFSET", 0)
    exe = tj.compile(two_outputs(), num_threads=1)
    for _ in range(3):
        a, b = rand(3, 6), rand(6)
        e, s = exe(a, b)
        np.testing.assert_allclose(e, np.exp(a + b), rtol=1e-5)
        np.testing.assert_allclose(s, a.sum(1), rtol=1e-5, atol=1e-5)
    outs = [np.empty((3, 6), np.float32), np.empty(3, np.float32)]
    assert exe(a, b, out=outs)[0] is outs[0]
    np.testing.assert_allclose(outs[1], a.sum(1), rtol=1e-5, atol=1e-5)
    outs[0].flags.writeable = False
    with pytest.raises(tj.InvalidArgumentError, match="read-only"):
        exe(a, b, out=outs)


#===--- compile options ---===#


def test_compile_options_reach_the_library():
    g = pointwise()
    a, b = rand(2, 5), rand(2, 5)
    for autotune in ("default", "on", "off", "background"):
        exe = tj.compile(g, autotune=autotune, autotune_budget_ms=5,
                         num_threads=1)
        np.testing.assert_allclose(exe(a, b), a * b + a, rtol=1e-6)
    with pytest.raises(tj.InvalidArgumentError, match="autotune"):
        tj.compile(g, autotune="sometimes")
    with pytest.raises(tj.ArgumentTypeError, match="autotune_budget_ms"):
        tj.compile(g, autotune_budget_ms=1.5)
    with pytest.raises(tj.InvalidArgumentError, match="cuda_device"):
        tj.compile(g, cuda_device=2**40)


def test_cuda_stream_option_values():
    assert _cuda_stream("own", 0) is None
    assert _cuda_stream(12345, 0) == 12345
    assert _cuda_stream(0, 0) == 1  # the legacy stream, not "the library's"

    class Stream:
        cuda_stream = 777

    assert _cuda_stream(Stream(), 0) == 777
    with pytest.raises(tj.InvalidArgumentError, match="cuda_stream"):
        _cuda_stream("mine", 0)
    with pytest.raises(tj.ArgumentTypeError, match="cuda_stream"):
        _cuda_stream(1.5, 0)


def test_autotune_matmul_matches_reference():
    g = tj.Graph("mm")
    x = g.input("x", "f32", ["M", 64])
    w = g.input("w", "f32", [64, 48])
    g.output(x @ w, "y")
    exe = tj.compile(g, autotune="on", autotune_budget_ms=20, num_threads=1,
                     cache_dir="")
    xs, ws = rand(33, 64), rand(64, 48)
    np.testing.assert_allclose(exe(xs, ws), xs @ ws, rtol=1e-4, atol=1e-4)


def test_background_autotune_publishes_and_wait_returns():
    # The first run serves the generated kernel while the context's worker
    # times the candidates; wait_autotune returns once the decision is
    # published (the job's remark says so), and every run matches numpy.
    remarks = []
    ctx = tj.Context(diagnostic=lambda sev, msg: remarks.append(msg),
                     log="autotune")
    try:
        g = tj.Graph("bg", context=ctx)
        x = g.input("x", "f32", ["M", 96])
        w = g.input("w", "f32", [96, 80])
        g.output(x @ w, "y")
        exe = tj.compile(g, autotune="background", autotune_budget_ms=20,
                         num_threads=1, cache_dir="")
        xs, ws = rand(70, 96), rand(96, 80)
        np.testing.assert_allclose(exe(xs, ws), xs @ ws, rtol=1e-4,
                                   atol=1e-4)
        ctx.wait_autotune()
        finished = [m for m in remarks if "background job finished" in m]
        assert len(finished) == 1, remarks
        for _ in range(2):
            np.testing.assert_allclose(exe(xs, ws), xs @ ws, rtol=1e-4,
                                       atol=1e-4)
        ctx.wait_autotune()  # nothing queued: returns at once
        assert len([m for m in remarks
                    if "background job finished" in m]) == 1, remarks
    finally:
        ctx.close()
    with pytest.raises(tj.InvalidArgumentError, match="the context is closed"):
        ctx.wait_autotune()


#===--- gradients ---===#


def test_grad_and_partition_against_numpy():
    g = tj.Graph("blk")
    x = g.input("x", "f32", ["B", 8])
    w = g.input("w", "f32", [8, 4])
    g.output((x @ w).tanh().sum(), "loss")
    joint = g.grad()
    assert [n for n, _ in joint.inputs] == ["x", "w", "grad_loss"]
    assert [n for n, _ in joint.outputs] == ["loss", "grad_x", "grad_w"]
    xs, ws = rand(5, 8), rand(8, 4)
    one = np.ones((), np.float32)
    loss, gx, gw = tj.compile(joint, num_threads=1)(xs, ws, one)
    t = np.tanh(xs @ ws)
    d = 1 - t * t
    np.testing.assert_allclose(loss, t.sum(), rtol=1e-5)
    np.testing.assert_allclose(gx, d @ ws.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw, xs.T @ d, rtol=1e-4, atol=1e-5)

    fwd, bwd, stats = joint.partition(2, 1, recompute="pointwise",
                                      symbols={"B": 5})
    assert stats.num_saved >= 0 and stats.saved_bytes >= 0
    fexe, bexe = tj.compile(fwd, num_threads=1), tj.compile(bwd,
                                                            num_threads=1)
    fouts = fexe.run([xs, ws])
    have = dict(zip([n for n, _ in fwd.outputs], fouts))
    have.update(x=xs, w=ws, grad_loss=one)
    grads = bexe.run({n: have[n] for n, _ in bwd.inputs})
    np.testing.assert_allclose(grads[0], gx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[1], gw, rtol=1e-5, atol=1e-6)
    # Both halves have a scoreboard.
    assert fwd.scoreboard(B=5).row("fuse").kernels >= 1
    assert bwd.scoreboard(B=5).row("fuse").kernels >= 1


def test_partition_saves_attention_lse():
    # lsefwd: with save_attention_lse the forward computes the VJP's
    # attention_lse and saves it (one output more), the backward reads it;
    # the gradients are the joint graph's either way.
    rng = np.random.default_rng(3)
    g = tj.Graph("attn_split")
    q, k, v = (g.input(n, "f32", [2, 4, 9, 8]) for n in "qkv")
    g.output(g.attention(q, k, v, causal=True), "y")
    joint = g.grad()
    ins = {n: rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
           for n in "qkv"}
    ins.update({n: rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
                for n, _ in joint.inputs if n not in ins})
    want = tj.compile(joint, num_threads=1).run(
        [ins[n] for n, _ in joint.inputs])
    outputs = {}
    for save in (False, True):
        fwd, bwd, stats = joint.partition(3, 1, save_attention_lse=save)
        outputs[save] = [n for n, _ in fwd.outputs]
        fouts = tj.compile(fwd, num_threads=1).run([ins[n] for n in "qkv"])
        have = dict(ins)
        have.update(zip([n for n, _ in fwd.outputs], fouts))
        grads = tj.compile(bwd, num_threads=1).run(
            {n: have[n] for n, _ in bwd.inputs})
        for got, w in zip(grads, want[1:]):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    assert len(outputs[True]) == len(outputs[False]) + 1


def test_grad_selection_and_errors():
    g = tj.Graph("sel")
    x = g.input("x", "f32", [3])
    i = g.input("i", "i32", [3])
    g.output((x * x).sum(), "l")
    joint = g.grad(outputs=["l"], wrt=["x"])
    assert [n for n, _ in joint.outputs] == ["l", "grad_x"]
    with pytest.raises(tj.InvalidArgumentError, match="no input named"):
        g.grad(wrt=["nope"])
    with pytest.raises(tj.InvalidArgumentError) as info:
        g.grad(wrt=[1])  # the i32 input: the library refuses it
    assert str(info.value)
    del i
    with pytest.raises(tj.InvalidArgumentError, match="recompute"):
        joint.partition(1, 1, recompute="some")
    with pytest.raises(tj.InvalidArgumentError):
        joint.partition(5, 1)  # counts that do not fit: the library's error


#===--- torch ---===#


@needs_torch
def test_torch_cpu_in_gives_torch_out():
    g = pointwise()
    exe = tj.compile(g, num_threads=1)
    for batch in (4, 4, 4, 2):
        a, b = torch.randn(batch, 5), torch.randn(batch, 5)
        y = exe(a, b)
        assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
        assert y.dtype == torch.float32 and tuple(y.shape) == (batch, 5)
        torch.testing.assert_close(y, a * b + a)
    assert exe._plan is not None and exe._plan.kind == "torch"
    out = torch.empty(2, 5)
    assert exe(a, b, out=out) is out
    torch.testing.assert_close(out, a * b + a)
    # A tensor that requires grad goes the general path (DLPack refuses).
    with pytest.raises(tj.TensorJitError):
        exe(a.requires_grad_(), b)


@needs_torch
def test_torch_multiple_outputs_and_noncontiguous():
    g = two_outputs()
    exe = tj.compile(g, num_threads=1)
    a, b = torch.randn(6, 3).t(), torch.randn(6)
    e, s = exe(a, b)
    re, rs = g.run_reference(a.contiguous().numpy(), b.numpy())
    np.testing.assert_allclose(e.numpy(), re, rtol=1e-5)
    np.testing.assert_allclose(s.numpy(), rs, rtol=1e-5, atol=1e-5)


@needs_cuda
def test_torch_cuda_in_gives_cuda_out_on_the_current_stream():
    g = pointwise()
    exe = tj.compile(g, "cuda")
    a = torch.randn(64, 5, device="cuda")
    b = torch.randn(64, 5, device="cuda")
    for _ in range(3):
        y = exe(a, b)
        assert y.is_cuda and y.device == a.device
        torch.testing.assert_close(y, a * b + a)
    # On a side stream: inputs written there, outputs read there.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for _ in range(3):
            a2 = torch.randn(4096, 5, device="cuda") * 3
            y2 = exe(a2, a2)
            z = y2 * 1  # enqueued on the side stream after our run
        side.synchronize()
        torch.testing.assert_close(z, a2 * a2 + a2)
    # Compiled on the side stream explicitly.
    exe2 = tj.compile(g, "cuda", cuda_stream=side)
    with torch.cuda.stream(side):
        y3 = exe2(a, b)
        z3 = y3 + 0
    side.synchronize()
    torch.testing.assert_close(z3, a * b + a)


def _recycling(device):
    """The hot path's recycled torch outputs (_fast.py) on |device|: the
    memory of a dropped output is written again, returned as a new tensor;
    memory that anything the caller holds still refers to is not."""
    exe = tj.compile(pointwise(), "cuda" if device == "cuda" else "x86",
                     num_threads=1)

    def inputs(k, batch=4):
        a = torch.full((batch, 5), float(k), device=device)
        return a, torch.arange(batch * 5, dtype=torch.float32,
                               device=device).reshape(batch, 5)

    def want(k, batch=4):
        a, b = inputs(k, batch)
        return a * b + a

    def settle():
        """Calls that drop their outputs until the plan recycles (a pause
        after misses in a row ends)."""
        for _ in range(_fast.RECYCLE_PAUSE + 2):
            exe(*inputs(0))
        p = exe(*inputs(0)).data_ptr()
        assert exe(*inputs(0)).data_ptr() == p, "recycling"
        assert exe._plan.recycled[0][5] == 0

    exe(*inputs(0))  # the general path plans
    y = exe(*inputs(1))
    assert exe._plan.recycled is not None
    p = y.data_ptr()
    del y
    y = exe(*inputs(2))
    assert y.data_ptr() == p, "a dropped output's memory is recycled"
    assert y._base is None and not y._is_view() and not y.requires_grad
    torch.testing.assert_close(y, want(2))
    # Whatever the caller keeps over the memory keeps it from the next
    # call: the output itself, a view, a detached tensor, .data, the
    # storage, a DLPack capsule, an autograd save; .numpy() on the CPU.
    def storage_view(st):
        return torch.empty(0, device=device).set_(st, 0, (4, 5), (5, 1))

    # (hold, read the held memory back as [4, 5])
    holders = [
        (lambda t: t, lambda h: h),
        (lambda t: t.view(-1), lambda h: h.view(4, 5)),
        (lambda t: t[1:], lambda h: h),
        (lambda t: t.detach(), lambda h: h),
        (lambda t: t.data, lambda h: h),
        (lambda t: t.untyped_storage(), storage_view),
        (lambda t: t.__dlpack__(), torch.from_dlpack),
        (lambda t: t * torch.ones(5, device=device, requires_grad=True),
         lambda h: h.grad_fn._saved_self),
    ]
    if device == "cpu":
        holders.append((lambda t: t.numpy(), torch.from_numpy))
    for k, (hold, read) in enumerate(holders, start=3):
        settle()
        y = exe(*inputs(k))
        kept, p = hold(y), y.data_ptr()
        del y
        z = exe(*inputs(k + 100))
        assert z.data_ptr() != p, f"holder {k - 3} did not keep the memory"
        torch.testing.assert_close(z, want(k + 100))
        got = read(kept)
        torch.testing.assert_close(got, want(k)[-got.shape[0]:])
        del kept, got, z
    # The caller's state on an output does not reach the next one: a new
    # tensor each call.
    settle()
    y = exe(*inputs(1))
    y.tag = "mine"
    y.add_(1)  # its version counter moves
    y.requires_grad_()
    p = y.data_ptr()
    del y
    y = exe(*inputs(2))
    assert y.data_ptr() == p
    assert not hasattr(y, "tag") and not y.requires_grad
    assert y._version == 0
    # A tensor made in inference mode is an inference tensor (autograd
    # refuses it): memory is recycled within the mode it was made in.
    del y
    settle()
    with torch.inference_mode():
        y = exe(*inputs(2))
        assert y.is_inference()
        del y
        y = exe(*inputs(3))
        assert y.is_inference()
        del y
    y = exe(*inputs(4))
    assert not y.is_inference()
    w = torch.ones(5, device=device, requires_grad=True)
    (y * w).sum().backward()
    torch.testing.assert_close(w.grad, want(4).sum(0))
    # A storage resized under the output (its memory moved) is left alone.
    y.untyped_storage().resize_(0)
    del y
    y = exe(*inputs(3))
    torch.testing.assert_close(y, want(3))
    # A caller that keeps every output: the plan pauses recycling after a
    # few misses, and takes it up again once the outputs are dropped.
    kept = [exe(*inputs(k)) for k in range(10)]
    for k, y in enumerate(kept):
        torch.testing.assert_close(y, want(k))
    assert len({y.data_ptr() for y in kept}) == 10
    assert exe._plan.recycled[0][5] > 0, "recycling paused"
    del kept, y
    settle()
    # Another shape plans again; an input of another dtype is refused as
    # before and the plan still serves.
    torch.testing.assert_close(exe(*inputs(4, batch=2)), want(4, batch=2))
    a, b = inputs(5)
    with pytest.raises(tj.TensorJitError):
        exe(a.double(), b)
    torch.testing.assert_close(exe(a, b), want(5))
    # Off: each call allocates (nothing kept by the plan).
    exe.recycle_outputs = False
    exe(*inputs(6))
    torch.testing.assert_close(exe(*inputs(7)), want(7))
    assert exe._plan.recycled is None
    return exe, inputs, want


@needs_torch
def test_torch_outputs_recycled_only_when_unreachable():
    _recycling("cpu")


@needs_torch
def test_torch_threads_recycle_only_what_nobody_holds():
    exe = tj.compile(pointwise(), num_threads=1)
    errors = []

    def work(seed):
        gen = torch.Generator().manual_seed(seed)
        kept = []
        try:
            for i in range(300):
                a = torch.randn(4, 5, generator=gen)
                b = torch.randn(4, 5, generator=gen)
                y = exe(a, b)
                if not torch.allclose(y, a * b + a):
                    errors.append("wrong values")
                if i % 7 == 0:  # some outputs kept to the end
                    kept.append((y, a * b + a))
            for y, want in kept:
                if not torch.allclose(y, want):
                    errors.append("a kept output was overwritten")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    run_on_threads(work, 4)
    assert not errors, errors[:3]


@needs_torch
def test_torch_reuse_after_out_writes_the_reused_output():
    exe = tj.compile(pointwise(), num_threads=1, reuse_outputs=True)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    o = torch.zeros(4, 5)
    z = _reuse_then_out(exe, a, b, o)
    torch.testing.assert_close(z, a * 3 * b + a * 3)
    torch.testing.assert_close(o, b * a + b)


@needs_torch
def test_torch_out_errors_as_the_general_path_says():
    exe = tj.compile(pointwise(), num_threads=1)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    exe(a, b)
    exe(a, b)  # the hot path
    for bad, what in ((torch.empty(4, 5, dtype=torch.float64), "f64"),
                      (torch.empty(3, 5), "dim"),
                      (torch.empty(5, 4).t(), ""),
                      (a, "overlaps")):
        if what:
            with pytest.raises(tj.TensorJitError, match=what):
                exe(a, b, out=bad)
        else:  # a strided out= is written in place by the general path
            assert exe(a, b, out=bad) is bad
            torch.testing.assert_close(bad, a * b + a)
    o = torch.empty(4, 5)
    assert exe(a, b, out=o) is o and exe(a, b, out=[o]) is o
    torch.testing.assert_close(o, a * b + a)


@needs_cuda
def test_torch_cuda_outputs_recycled_on_their_stream_only():
    exe, inputs, want = _recycling("cuda")
    exe.recycle_outputs = True
    exe(*inputs(1))
    y = exe(*inputs(2))
    p = y.data_ptr()
    del y
    # On another stream the dropped memory is not written (the caching
    # allocator orders its reuse on the stream it was allocated on).
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a, b = inputs(3)
        z = exe(a, b)
        assert z.data_ptr() != p
        w = z * 1
        side.synchronize()
    torch.testing.assert_close(w, want(3))
    # Back on the default stream, the side stream's memory is not taken.
    q = z.data_ptr()
    del z, w
    y = exe(*inputs(4))
    assert y.data_ptr() != q
    torch.testing.assert_close(y, want(4))


def _attention_numpy(q, k, v, scale, causal):
    """y and the row log-sum-exp of softmax attention, G = H / Hkv."""
    grp = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, grp, axis=1), np.repeat(v, grp, axis=1)
    s = scale * q @ kk.transpose(0, 1, 3, 2)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    p /= p.sum(-1, keepdims=True)
    return p @ vv, lse, p, kk, vv, grp


def test_attention_grad_nodes_against_numpy():
    # fabwd (issue 14): Graph.grad of attention emits attention_lse,
    # attention_dq and attention_dkv; their numbers against numpy's
    # softmax VJP, grouped-query heads, causal, symbolic B; the three
    # builders by hand give the same.
    scale = 0.3
    g = tj.Graph("attn")
    q = g.input("q", "f64", ["B", 4, 5, 3])
    k = g.input("k", "f64", ["B", 2, 6, 3])
    v = g.input("v", "f64", ["B", 2, 6, 2])
    g.output(g.attention(q, k, v, scale=scale, causal=True), "y")
    joint = g.grad()
    assert [n for n, _ in joint.outputs] == ["y", "grad_q", "grad_k",
                                             "grad_v"]
    text = str(joint)
    for op in ("attention_lse", "attention_dq", "attention_dkv"):
        assert op in text, text
    qs, ks, vs, dy = (RNG.standard_normal(s) for s in
                      ((2, 4, 5, 3), (2, 2, 6, 3), (2, 2, 6, 2), (2, 4, 5, 2)))
    y, gq, gk, gv = tj.compile(joint, num_threads=1)(qs, ks, vs, dy)
    want, lse, p, kk, vv, grp = _attention_numpy(qs, ks, vs, scale, True)
    dp = dy @ vv.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gq, scale * ds @ kk, rtol=1e-9, atol=1e-12)
    dk = scale * ds.transpose(0, 1, 3, 2) @ qs
    dv = p.transpose(0, 1, 3, 2) @ dy
    np.testing.assert_allclose(
        gk, dk.reshape(2, 2, grp, 6, 3).sum(2), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        gv, dv.reshape(2, 2, grp, 6, 2).sum(2), rtol=1e-9, atol=1e-12)

    h = tj.Graph("bwd")
    hq = h.input("q", "f64", ["B", 4, 5, 3])
    hk = h.input("k", "f64", ["B", 2, 6, 3])
    hv = h.input("v", "f64", ["B", 2, 6, 2])
    hy = h.input("y", "f64", ["B", 4, 5, 2])
    hg = h.input("g", "f64", ["B", 4, 5, 2])
    lse_v = h.attention_lse(hq, hk, scale=scale, causal=True)
    delta = (hg * hy).sum(axes=[-1])
    h.output(lse_v, "lse")
    h.output(h.attention_dq(hq, hk, hv, None, hg, lse_v, delta, scale, True),
             "dq")
    h.output(h.attention_dkv(hq, hk, hv, None, hg, lse_v, delta, scale,
                             True), "dkv")
    l2, dq2, dkv2 = tj.compile(h, num_threads=1)(qs, ks, vs, y, dy)
    np.testing.assert_allclose(l2, lse, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dq2, gq, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dkv2, np.concatenate([gk, gv], -1),
                               rtol=1e-10, atol=1e-12)
