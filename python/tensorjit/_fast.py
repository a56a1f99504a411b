"""The hot path of :class:`tensorjit.Executable` calls.

A call with positional numpy arrays (or torch tensors) of the shapes,
strides and dtypes of the previous call costs a few checks and pointer
stores: the first call of a shape builds a :class:`Plan` that holds the
``tj_tensor_t`` arrays with their shapes filled in, the output shapes and
dtypes (no ``tj_executable_output_shape`` per call), and views of the
``data`` fields; later calls of that shape only store the data pointers and
call ``tj_executable_run``. Anything else (keyword inputs, other shapes,
strided or mixed inputs, DLPack capsules) takes the general path in
executable.py, which builds the plan for the new shape.

A plan serves one call at a time (its tensor arrays are shared): a call
that finds it busy (another thread inside ``tj_executable_run``, which runs
without the GIL) takes the general path.

The checks and stores of a plan are one Python function generated for it
(:func:`specialize`): its inputs' shapes, strides and dtypes are constants
of the function, its loops unrolled, so a call runs straight-line code with
no per-input tuple unpacking or attribute lookups on the plan. That halves
the Python part of a call (measured in bench/python_overhead.py; the
ctypes call itself is most of the rest).

A plan of torch tensors recycles its outputs' memory (the comment on
recycled torch outputs below): a call without ``out=`` writes into the
memory of the previous call's outputs once nothing outside the plan refers
to it, and returns new tensors over it, instead of a torch.empty per
output (about 3 us of a 9 us call on CUDA).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from .dtypes import DType, numpy_dtype
from .errors import UnsupportedError

# Slots of a tj_tensor_t, viewed as pointer-sized words (data is word 0).
_WORDS = ctypes.sizeof(_lib.Tensor_t) // ctypes.sizeof(ctypes.c_void_p)
assert _WORDS * ctypes.sizeof(ctypes.c_void_p) == ctypes.sizeof(_lib.Tensor_t)
assert _lib.Tensor_t.data.offset == 0

_from_address = ctypes.c_void_p.from_address


def _numpy_data_offset() -> int:
    """Offset of ``data`` in numpy's PyArrayObject (CPython: id() is the
    object's address; numpy's ndarraytypes.h lays out PyObject_HEAD, then
    the data pointer), checked against ``__array_interface__`` on probe
    arrays; 0 when it does not hold (the hot path then reads
    ``__array_interface__``)."""
    if sys.implementation.name != "cpython":
        return 0
    off = 2 * ctypes.sizeof(ctypes.c_void_p)
    base = np.arange(16, dtype=np.float32)
    for probe in (base, base[3:], base[::2], np.empty((2, 3), np.int8)):
        want = probe.__array_interface__["data"][0]
        if _from_address(id(probe) + off).value != want:
            return 0
    return off


_DATA_OFFSET = _numpy_data_offset()

# numpy's NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE.
_DENSE_WRITABLE = 0x0001 | 0x0400


def _numpy_flags_offset() -> int:
    """Offset of the int ``flags`` in PyArrayObject (after data, nd,
    dimensions, strides, base and descr), checked on probe arrays against
    ``ndarray.flags``; 0 when it does not hold."""
    if not _DATA_OFFSET:
        return 0
    off = _DATA_OFFSET + 6 * ctypes.sizeof(ctypes.c_void_p)
    base = np.zeros((4, 4), np.float32)
    frozen = base.copy()
    frozen.flags.writeable = False
    for probe in (base, base.T, base[:, 1:], frozen):
        want = (0x0001 if probe.flags.c_contiguous else 0) | (
            0x0400 if probe.flags.writeable else 0)
        got = ctypes.c_int.from_address(id(probe) + off).value
        if got & _DENSE_WRITABLE != want:
            return 0
    return off


_FLAGS_OFFSET = _numpy_flags_offset()
_int_at = ctypes.c_int.from_address


def numpy_pointer(x: np.ndarray) -> int:
    """The address of |x|'s first element."""
    if _DATA_OFFSET:
        return _from_address(id(x) + _DATA_OFFSET).value or 0
    return x.__array_interface__["data"][0]


_TORCH_DTYPES: Optional[dict] = None


def torch_dtype(dtype: DType) -> Any:
    """The torch dtype of a tensorjit dtype (torch must be importable)."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch  # type: ignore
        _TORCH_DTYPES = {
            DType.F32: torch.float32, DType.F16: torch.float16,
            DType.BF16: torch.bfloat16, DType.F64: torch.float64,
            DType.I8: torch.int8, DType.I32: torch.int32,
            DType.I64: torch.int64, DType.BOOL: torch.bool,
            DType.U8: torch.uint8, DType.I16: torch.int16}
        # The quantized dtypes where this torch has them (float8 since
        # 2.1, the wider unsigned integers since 2.3).
        for dt, name in ((DType.F8E4M3, "float8_e4m3fn"),
                         (DType.F8E5M2, "float8_e5m2"),
                         (DType.F8E4M3FNUZ, "float8_e4m3fnuz"),
                         (DType.F8E5M2FNUZ, "float8_e5m2fnuz"),
                         (DType.F8E8M0, "float8_e8m0fnu"),
                         (DType.U16, "uint16"), (DType.U32, "uint32"),
                         (DType.U64, "uint64")):
            if hasattr(torch, name):
                _TORCH_DTYPES[dt] = getattr(torch, name)
    if dtype not in _TORCH_DTYPES:
        raise UnsupportedError(f"no torch dtype for {dtype}")
    return _TORCH_DTYPES[dtype]


def torch_module() -> Any:
    """torch if the program imported it (we never import it ourselves to
    find out whether an object is a tensor), else None."""
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def current_stream_handle(device_id: int) -> int:
    """torch's current CUDA stream on |device_id| as a CUstream value."""
    import torch  # type: ignore
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device_id))
    return int(torch.cuda.current_stream(device_id).cuda_stream)


class CudaOrder:
    """Orders a run on the executable's stream after the caller's current
    torch stream, and the caller's stream after the run.

    |stream| is the CUstream the executable was compiled with (None: the
    library's own stream). When it is torch's current stream the run is
    simply enqueued there. Otherwise, with a torch stream bound, that
    stream waits for the current one and the current one for it (events,
    no host wait); with the library's own stream (whose runs return once
    the outputs are complete) the current stream is synchronized first so
    that the inputs are complete, as tj_executable_run asks."""

    def __init__(self, stream: Optional[int], device_id: int) -> None:
        self.stream = stream
        self.device_id = device_id
        self._bound: Any = None
        # torch's raw stream query, looked up once: before() runs on every
        # call of the hot path.
        import torch  # type: ignore
        self._raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def _bound_stream(self) -> Any:
        if self._bound is None:
            import torch  # type: ignore
            if self.stream in (0, 1):  # the legacy default stream
                self._bound = torch.cuda.default_stream(self.device_id)
            else:
                self._bound = torch.cuda.ExternalStream(
                    self.stream, device=self.device_id)
        return self._bound

    def before(self) -> Any:
        """Returns the current torch stream when it is not the bound one
        (pass it to after()), else None."""
        raw = self._raw
        current = int(raw(self.device_id)) if raw is not None else \
            current_stream_handle(self.device_id)
        bound = self.stream
        if bound is not None and (current == bound or (
                current == 0 and bound == 1)):
            return None
        import torch  # type: ignore
        cur = torch.cuda.current_stream(self.device_id)
        if bound is None:
            cur.synchronize()
            return None
        self._bound_stream().wait_stream(cur)
        return cur

    def after(self, cur: Any) -> None:
        if cur is not None:
            cur.wait_stream(self._bound_stream())


MISS = object()

#===--- recycled torch outputs ---===#
#
# A plan keeps, per torch output, a private tensor P that is never handed
# out and P's storage object S (torch keeps one Python object per storage:
# a caller's t.untyped_storage() is S itself), and returns P.data: a new
# tensor (not a view, no _base, its own metadata and version counter) over
# P's storage (.data 0.56 us, detach() 0.97 on the dev VM: no dispatch).
# The next call may write into that storage again when
#   - the storage's use count is what P and S alone give it (every tensor
#     over it, a view, a detach, .data, .numpy(), a DLPack capsule, an
#     autograd save, holds a reference to the storage),
#   - S's Python reference count is the plan's alone (no caller holds S),
#   - P's data pointer is unchanged (a storage resize_ moves it),
#   - on CUDA, torch's current stream is the one P was allocated on (the
#     caching allocator orders reuse on that stream only),
#   - torch's inference mode is what it was when P was allocated (a
#     tensor made in inference mode is an inference tensor, which
#     autograd refuses outside it).
# Then no tensor the caller can reach reads or writes that memory, and
# writing into it again is what torch's caching allocator would do with a
# freed block of that stream: unobservable. The one thing these counts do
# not see is Tensor.record_stream: an output used on another stream must
# be kept alive until that stream's work is done (or the executable's
# recycle_outputs set False).
#
# The counts are calibrated once against this Python and torch
# (_recycle_counts), with the expressions the generated code uses; where
# they do not behave as above, outputs are allocated each call.

# Outputs larger than this (all of a plan's together) are not recycled:
# the plan would hold that much device memory after the caller dropped
# it, and a call that large does not notice torch.empty.
RECYCLE_MAX_BYTES = 1 << 20
# A caller that keeps its outputs (or chains calls, each output the next
# call's input) makes every recycling miss: after this many misses in a
# row, the next RECYCLE_PAUSE calls allocate without tracking the memory.
RECYCLE_MISSES = 3
RECYCLE_PAUSE = 32

_getrc = sys.getrefcount
_RECYCLE: Optional[Tuple[int, int]] = None  # (storage uses, S's refcount)
_RECYCLE_CHECKED = False


def _recycle_counts() -> Optional[Tuple[int, int]]:
    """(use count of a storage held by P and S alone, S's refcount as
    ``getrc(r[1])`` sees it with S in list r), or None where recycling
    cannot be checked: no torch storage use count, a free-threaded Python
    (reference counts are not exact there), or counts that do not move as
    the module comment says."""
    global _RECYCLE, _RECYCLE_CHECKED
    if _RECYCLE_CHECKED:
        return _RECYCLE
    _RECYCLE_CHECKED = True
    torch = torch_module()
    torch_c = getattr(torch, "_C", None)
    suc = getattr(torch_c, "_storage_Use_Count", None)
    gil = getattr(sys, "_is_gil_enabled", None)
    if suc is None or not hasattr(torch_c, "is_inference_mode_enabled") or \
            sys.implementation.name != "cpython" or (
                gil is not None and not gil()):
        return None
    try:
        # As Plan.fresh leaves them: P and S in the list alone.
        P = torch.empty(4)
        r = [P, P.untyped_storage(), 0, P.data_ptr()]
        r[2] = r[1]._cdata
        del P
        uses, refs = suc(r[2]), _getrc(r[1])
        ok = True
        for make in (lambda: r[0].data, lambda: r[0].data.view(2, 2),
                     lambda: r[0].data.numpy(), lambda: r[0].data[1:],
                     lambda: r[0].data.detach()):
            y = make()
            ok = ok and suc(r[2]) > uses
            del y
        s = r[0].data.untyped_storage()
        ok = ok and s is r[1] and _getrc(r[1]) > refs
        del s
        ok = ok and suc(r[2]) == uses and _getrc(r[1]) == refs
        if ok:
            _RECYCLE = (uses, refs)
    except Exception:  # noqa: BLE001 - another torch: allocate each call
        _RECYCLE = None
    return _RECYCLE


def _nbytes(shape: Sequence[int], dtype: DType) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= int(d)
    return n


class Plan:
    """The tensors of one call signature, ready to run (see the module
    docstring). |kind| is "numpy" or "torch"."""

    __slots__ = ("kind", "n_in", "n_out", "checks", "in_arr", "out_arr",
                 "in_words", "out_words", "out_specs", "out_bytes",
                 "in_bytes", "in_ref", "out_ref", "keep", "lock", "last",
                 "order", "device_index", "recycled")

    def __init__(self, kind: str, in_specs: Sequence[Tuple[Any, ...]],
                 out_specs: Sequence[Tuple[Tuple[int, ...], DType]],
                 device: Any = None, order: Optional[CudaOrder] = None,
                 recycle: bool = True) -> None:
        """|in_specs|: per input (shape, dtype, tj dtype) and for numpy
        its strides; |out_specs|: per output (shape, tj dtype); |recycle|:
        whether torch outputs may be recycled."""
        self.kind = kind
        self.n_in, self.n_out = len(in_specs), len(out_specs)
        self.in_arr = (_lib.Tensor_t * max(self.n_in, 1))()
        self.out_arr = (_lib.Tensor_t * max(self.n_out, 1))()
        self.keep: List[Any] = []
        device_type = _lib.DEVICE_CPU
        device_id = 0
        if kind == "torch" and device is not None and device.type == "cuda":
            device_type = _lib.DEVICE_CUDA
            device_id = device.index or 0
        for arr, specs in ((self.in_arr, [(s[0], s[2]) for s in in_specs]),
                           (self.out_arr, out_specs)):
            for i, (shape, dt) in enumerate(specs):
                dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
                self.keep.append(dims)
                t = arr[i]
                t.device_type = device_type
                t.device_id = device_id
                t.dtype = int(dt)
                t.rank = len(shape)
                t.shape = dims
                t.strides = None
                t.byte_offset = 0
        words = ctypes.c_void_p * (_WORDS * max(self.n_in, 1))
        self.in_words = words.from_buffer(self.in_arr)
        words = ctypes.c_void_p * (_WORDS * max(self.n_out, 1))
        self.out_words = words.from_buffer(self.out_arr)
        if kind == "numpy":
            self.checks = [(s[0], s[3], s[1]) for s in in_specs]
            self.out_specs = [(shape, numpy_dtype(dt)) for shape, dt in
                              out_specs]
        else:
            dev_index = device_id if device_type == _lib.DEVICE_CUDA else -1
            self.checks = [(s[0], s[1], dev_index) for s in in_specs]
            self.out_specs = [(shape, torch_dtype(dt), device) for shape, dt
                              in out_specs]
        self.out_bytes = [_nbytes(shape, dt) for shape, dt in out_specs]
        self.in_bytes = [_nbytes(spec[0], spec[2]) for spec in in_specs]
        self.in_ref = ctypes.byref(self.in_arr)
        self.out_ref = ctypes.byref(self.out_arr)
        self.lock = threading.Lock()
        self.last: Optional[List[Any]] = None
        self.order = order
        self.device_index = device_id if device_type == _lib.DEVICE_CUDA \
            else -1
        # Per output [P, S, S's storage pointer, P's data pointer, the
        # stream P was allocated on (-1: none, or paused), the calls left
        # in a pause, the misses in a row, whether P was made in
        # inference mode] (see the recycling comment above and fresh()),
        # or None: outputs allocated each call.
        self.recycled: Optional[List[List[Any]]] = None
        if kind == "torch" and recycle and self.n_out and \
                sum(self.out_bytes) <= RECYCLE_MAX_BYTES and \
                _recycle_counts() is not None:
            self.recycled = [[None, None, 0, 0, -1, 0, 0, False]
                             for _ in range(self.n_out)]

    def fresh(self, k: int, stream: int, inference: bool) -> Any:
        """A new tensor for output |k| over new memory allocated on
        |stream| (torch's current raw stream, 0 on the CPU) with torch's
        inference mode |inference|, its pointer stored; the memory is kept
        for recycling, except while the caller keeps the outputs
        (RECYCLE_MISSES misses in a row on the same stream and mode): then
        RECYCLE_PAUSE calls allocate plainly, which saves the storage
        lookups and the private tensor's .data."""
        assert self.recycled is not None
        r = self.recycled[k]
        torch = sys.modules["torch"]
        if not r[5] and r[0] is not None and r[4] == stream and \
                r[7] is inference:
            r[6] += 1  # the memory was still held
            if r[6] >= RECYCLE_MISSES:
                r[4], r[5], r[6] = -1, RECYCLE_PAUSE, 0
        elif not r[5]:
            r[6] = 0
        # The last private tensor as the template: empty_like parses no
        # shape, dtype or device (on an H100 machine's Xeon 1.7 us against
        # torch.empty's 3.2).
        if r[0] is not None:
            P = torch.empty_like(r[0])
        else:
            shape, dtype, device = self.out_specs[k]
            P = torch.empty(shape, dtype=dtype, device=device)
        ptr = P.data_ptr()
        self.out_words[_WORDS * k] = ptr
        if r[5]:  # paused: r[4] is -1, so that every call comes here
            r[5] -= 1
            return P
        r[:5] = [P, P.untyped_storage(), 0, ptr, stream]
        r[2], r[7] = r[1]._cdata, inference
        return P.data


def plan_for(inputs: Sequence[Any], in_dtypes: Sequence[DType],
             out_specs_fn: Any, order_fn: Any, recycle: bool = True
             ) -> Optional[Plan]:
    """A plan for these bound inputs when they all are dense numpy arrays
    of their declared dtypes, or all dense torch tensors on one device;
    else None. |out_specs_fn|() gives [(shape, DType)] per output;
    |order_fn|(device_id) the CudaOrder for CUDA tensors; |recycle|
    whether torch outputs may be recycled."""
    if not inputs:
        return None
    if all(type(x) is np.ndarray for x in inputs):
        specs = []
        for x, dt in zip(inputs, in_dtypes):
            if x.dtype is not numpy_dtype(dt) or not x.flags.c_contiguous:
                return None
            specs.append((tuple(x.shape), x.dtype, dt, tuple(x.strides)))
        return Plan("numpy", specs, out_specs_fn())
    torch = torch_module()
    if torch is None or not all(type(x) is torch.Tensor for x in inputs):
        return None
    device = inputs[0].device
    specs = []
    for x, dt in zip(inputs, in_dtypes):
        if x.device != device or x.requires_grad or not x.is_contiguous() \
                or x.dtype is not torch_dtype(dt):
            return None
        specs.append((tuple(x.shape), x.dtype, dt))
    order = order_fn(device.index or 0) if device.type == "cuda" else None
    return Plan("torch", specs, out_specs_fn(), device, order, recycle)


def _unpack(names: Sequence[str], src: str) -> str:
    """`a, b = src` (one name: `a, = src`)."""
    return ", ".join(names) + (", = " if len(names) == 1 else " = ") + src


def specialize(plan: Plan, fn: Any, handle: Any) -> Any:
    """The call of |plan| as one generated function
    ``call(inputs, out, reuse)`` that returns the output or the tuple of
    them, or MISS with nothing run (inputs or out= that do not fit the
    plan: the general path runs them or says why not), taking the plan's
    lock (MISS when another thread holds it). |fn| is tj_executable_run
    without argument conversion, |handle| its converted executable.

    The inputs and an out= are checked and their data pointers stored
    inline; torch's current stream is compared with the executable's
    inline (CudaOrder only when they differ); torch outputs are recycled
    where the plan allows (see the recycling comment above). The plan does
    not hold the function (the function holds the plan), so that no
    reference cycle keeps a dropped executable's plan and outputs alive
    until the garbage collector runs."""
    n_in, n_out = plan.n_in, plan.n_out
    xs = [f"x{i}" for i in range(n_in)]
    os_ = [f"o{j}" for j in range(n_out)]
    env: dict = {"MISS": MISS, "plan": plan, "fn": fn, "h": handle,
                 "pi": plan.in_ref, "po": plan.out_ref, "check": _lib.check,
                 "acquire": plan.lock.acquire, "release": plan.lock.release,
                 "w": plan.in_words, "ow": plan.out_words}
    numpy = plan.kind == "numpy"
    off = _DATA_OFFSET if numpy else 0
    flags_off = _FLAGS_OFFSET if numpy else 0
    dev = plan.device_index
    if numpy:
        env.update(ndarray=np.ndarray, empty=np.empty, fa=_from_address,
                   int_at=_int_at)
    else:
        torch = sys.modules["torch"]
        env.update(Tensor=torch.Tensor, empty=torch.empty)
    order = plan.order
    raw = order._raw if order is not None else None
    if order is not None:
        env.update(before=order.before, after=order.after, raw=raw)
    # A CUDA plan recycles with torch's raw stream query only (the stream
    # the memory was allocated on is compared).
    recycled = plan.recycled
    if recycled is not None and dev >= 0 and raw is None:
        recycled = plan.recycled = None
    if recycled is not None:
        counts = _recycle_counts()
        assert counts is not None
        torch_c = sys.modules["torch"]._C
        env.update(suc=torch_c._storage_Use_Count, getrc=_getrc,
                   inference=torch_c.is_inference_mode_enabled,
                   fresh=plan.fresh, USES=counts[0], REFS=counts[1])
        for j, r in enumerate(recycled):
            env[f"r{j}"] = r

    def pointer(x: str) -> str:
        if not numpy:
            return f"{x}.data_ptr()"
        if off:
            return f"(fa(id({x}) + {off}).value or 0)"
        return f"{x}.__array_interface__['data'][0]"

    def checks(x: str, shape: str, dtype: str) -> List[str]:
        """The refusal of |x| unless it fits this plan (MISS: the general
        path then runs it or says why not)."""
        if numpy:
            return [f"if type({x}) is not ndarray or {x}.dtype is not "
                    f"{dtype} or {x}.shape != {shape}:"]
        return [f"if type({x}) is not Tensor or {x}.dtype is not {dtype} "
                f"or {x}.shape != {shape} or {x}.get_device() != {dev} "
                f"or {x}.requires_grad or not {x}.is_contiguous():"]

    body = [f"if len(inputs) != {n_in} or not acquire(False):",
            "    return MISS",
            "try:",
            "    " + _unpack(xs, "inputs")]
    lines = []
    for i, (x, check) in enumerate(zip(xs, plan.checks)):
        if numpy:
            shape, strides, dtype = check
            env[f"s{i}"], env[f"t{i}"], env[f"d{i}"] = shape, strides, dtype
            lines += [checks(x, f"s{i}", f"d{i}")[0][:-1] +
                      f" or {x}.strides != t{i}:", "    return MISS"]
        else:
            shape, dtype, _ = check
            env[f"s{i}"], env[f"d{i}"] = shape, dtype
            lines += checks(x, f"s{i}", f"d{i}") + ["    return MISS"]
        lines += [f"p{i} = {pointer(x)}", f"w[{i * _WORDS}] = p{i}"]
    # torch's current stream: the stream a recycled output's memory must
    # have been allocated on, and the run's order.
    same = None
    if order is not None and raw is not None:
        lines.append(f"c = raw({dev})")
        if order.stream is not None:
            same = {order.stream} | ({0} if order.stream == 1 else set())
            env["SAME"] = frozenset(same)
    elif not numpy:
        lines.append("c = 0")
    # Outputs: out= (checked here), the previous call's when reusing, else
    # recycled or new ones.
    lines.append("if out is not None:")
    ty = "ndarray" if numpy else "Tensor"
    if n_out == 1:
        lines += [f"    if type(out) is {ty}:", "        o0 = out",
                  "    elif type(out) in (list, tuple) and "
                  "len(out) == 1:", "        o0 = out[0]",
                  "    else:", "        return MISS"]
    else:
        lines += [f"    if type(out) not in (list, tuple) or len(out) != "
                  f"{n_out}:", "        return MISS",
                  "    " + _unpack(os_, "out")]
    spans = [(f"p{i}", n) for i, n in enumerate(plan.in_bytes) if n]
    for j, (o, spec) in enumerate(zip(os_, plan.out_specs)):
        env[f"os{j}"], env[f"od{j}"] = spec[0], spec[1]
        lines += ["    " + c for c in checks(o, f"os{j}", f"od{j}")]
        lines.append("        return MISS")
        if numpy and flags_off:
            lines += [f"    if int_at(id({o}) + {flags_off}).value & "
                      f"{_DENSE_WRITABLE} != {_DENSE_WRITABLE}:",
                      "        return MISS"]
        elif numpy:
            lines += [f"    if not {o}.flags.c_contiguous or not "
                      f"{o}.flags.writeable:", "        return MISS"]
        lines += [f"    q{j} = {pointer(o)}", f"    ow[{j * _WORDS}] = "
                  f"q{j} or None"]
        nb = plan.out_bytes[j]
        if nb:
            # Overlap with an input or an earlier output: the general
            # path says which.
            for p, n in spans:
                lines += [f"    if {p} and q{j} < {p} + {n} and {p} < "
                          f"q{j} + {nb}:", "        return MISS"]
            spans.append((f"q{j}", nb))
    # Reused outputs: their pointers again (an out= call between two
    # reusing calls stored its own).
    lines += ["elif reuse and plan.last is not None:",
              "    " + _unpack(os_, "plan.last")]
    lines += [f"    ow[{j * _WORDS}] = {pointer(o)}"
              for j, o in enumerate(os_)]
    lines.append("else:")
    for j, spec in enumerate(plan.out_specs):
        if recycled is not None:
            if j == 0:
                lines.append("    m = inference()")
            lines += [f"    if r{j}[4] == c and r{j}[7] is m and "
                      f"suc(r{j}[2]) == USES and getrc(r{j}[1]) == REFS "
                      f"and r{j}[0].data_ptr() == r{j}[3]:",
                      f"        o{j} = r{j}[0].data",
                      f"        ow[{j * _WORDS}] = r{j}[3]",
                      "    else:",
                      f"        o{j} = fresh({j}, c, m)"]
            continue
        if numpy:
            lines.append(f"    o{j} = empty(os{j}, od{j})")
        else:
            env[f"ov{j}"] = spec[2]
            lines.append(f"    o{j} = empty(os{j}, dtype=od{j}, "
                         f"device=ov{j})")
        lines.append(f"    ow[{j * _WORDS}] = {pointer(f'o{j}')}")
    lines.append(f"    plan.last = [{', '.join(os_)}] if reuse else None")
    if order is not None:
        if same is not None:
            lines.append("cur = None if c in SAME else before()")
        else:
            lines.append("cur = before()")
    lines += [f"status = fn(h, pi, {n_in}, po, {n_out})",
              "if status:", "    check(status)"]
    if order is not None:
        lines += ["if cur is not None:", "    after(cur)"]
    if n_out == 1:
        lines.append("return o0")
    else:
        lines.append(f"return ({', '.join(os_)})")
    body += ["    " + line for line in lines]
    body += ["finally:", "    release()"]
    src = "def call(inputs, out, reuse):\n" + "".join(
        f"    {line}\n" for line in body)
    exec(compile(src, f"<tensorjit plan {plan.kind} {n_in}->{n_out}>",
                 "exec"), env)
    # env is the function's globals: leave the function out of it (no
    # cycle through env either).
    return env.pop("call")
