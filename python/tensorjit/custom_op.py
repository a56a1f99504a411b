"""Custom ops written in Python: :func:`custom_op`.

A Python function (numpy arrays in, an array out; torch tensors too) is
registered in a :class:`~tensorjit.Context` as the host implementation of a
custom op (C: ``tj_context_register_op`` with a generic host callback), with
a shape rule written in Python and, optionally, a VJP written with the
graph's builder methods. The op stays in the compiled graph as one node: the
regions on both sides of it are fused and compiled, and a run calls the
Python function between their kernels (a "host call"), taking the GIL for
the call. Example::

    import numpy as np
    import tensorjit as tj

    def same(x):                 # x: a TensorType(dtype, shape)
        return x                 # symbolic dims flow through unchanged

    @tj.custom_op("clip3", shape=same)
    def clip3(x):
        return np.clip(x, -3.0, 3.0)

    g = tj.Graph("f")
    x = g.input("x", "f32", ["B", 16])
    g.output(clip3(g.exp(x)) * 2.0, "y")
    exe = tj.compile(g)
    y = exe(np.ones((5, 16), np.float32))

Attributes: a call ``op(x, 3, 0.5)`` puts the Python ints and floats into
the node's int and float attributes (at most 8 each); the function, the
shape rule and the VJP receive the ints then the floats, after the inputs.

The shape rule receives one :class:`TensorType` per input and returns a
:class:`TensorType` or a ``(dtype, shape)`` pair. A shape's entries are ints
or :class:`SymDim` (a symbolic dim of the graph, which supports ``+`` and
``*``); a str names a symbol (created on first use). The rule runs whenever
the node is built or checked, so it must be deterministic.

An exception raised by the function, the shape rule or the VJP becomes the
run's (or the graph's) error, a :class:`~tensorjit.TensorJitError` whose
message holds the exception's type and text, and the op's name; it never
crashes the process.

Data-dependent output dims (a nonzero, a filter): the shape rule gives an
axis as :func:`dynamic_dim` with an upper bound, and the function returns
an array whose dim there is at most the bound; the ops after it run on the
actual size, with no recompile.

The ctypes callbacks live as long as the process (a context or an
executable compiled in it may call them at any time until it is gone).
"""

from __future__ import annotations

import ctypes
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .dtypes import DType, dtype_of, numpy_dtype
from .errors import ArgumentTypeError, InvalidArgumentError
from .graph import Context, Graph, Value, default_context

__all__ = ["custom_op", "CustomOp", "TensorType", "SymDim", "dynamic_dim"]

_vp = ctypes.c_void_p
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64

# tj_custom_op_flag_t
FLAG_PURE = 1 << 0
FLAG_IN_PLACE = 1 << 1
FLAG_CONTIGUOUS_INPUTS = 1 << 2

_STATUS_INVALID_ARGUMENT = 1
_STATUS_BACKEND_FAILURE = 4


class CustomType_t(ctypes.Structure):
    """tj_custom_type_t."""

    _fields_ = [("dtype", ctypes.c_int), ("rank", _i32),
                ("dims", _i64 * _lib.MAX_RANK)]


SHAPE_FN = ctypes.CFUNCTYPE(_vp, _vp, _vp, ctypes.POINTER(CustomType_t), _i32,
                            ctypes.POINTER(_lib.CustomAttrs_t),
                            ctypes.POINTER(CustomType_t))
HOST_FN = ctypes.CFUNCTYPE(_vp, _vp, ctypes.POINTER(_lib.Tensor_t), _i32,
                           ctypes.POINTER(_lib.CustomAttrs_t),
                           ctypes.POINTER(_lib.Tensor_t))
VJP_FN = ctypes.CFUNCTYPE(_vp, _vp, _vp, ctypes.POINTER(_lib.Value_t), _i32,
                          _lib.Value_t, _lib.Value_t,
                          ctypes.POINTER(_lib.CustomAttrs_t),
                          ctypes.POINTER(_lib.Value_t))


class CustomLaunch_t(ctypes.Structure):
    """tj_custom_launch_t."""

    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
                ("shared_bytes", ctypes.c_uint32)]


LAUNCH_FN = ctypes.CFUNCTYPE(_vp, _vp, ctypes.POINTER(CustomType_t), _i32,
                             ctypes.POINTER(_lib.CustomAttrs_t),
                             ctypes.POINTER(CustomType_t),
                             ctypes.POINTER(CustomLaunch_t))


class CustomOpDesc_t(ctypes.Structure):
    """tj_custom_op_desc_t (tests/python/test_layout.py checks the layout)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("version", _i32), ("num_inputs", _i32), ("shape", SHAPE_FN),
                ("function", _vp), ("signature", ctypes.c_char_p),
                ("host", HOST_FN), ("vjp", VJP_FN), ("flags", ctypes.c_uint32),
                ("user_data", _vp),
                # The CUDA implementation (custom_op's cuda_* arguments).
                ("cuda_ptx", ctypes.c_char_p), ("cuda_entry", ctypes.c_char_p),
                ("cuda_launch", LAUNCH_FN),
                ("cuda_llvm_ir", ctypes.c_char_p)]


_declared = False
_declare_lock = threading.Lock()


def _c() -> Any:
    """The library with this module's functions declared."""
    global _declared
    L = _lib.lib()
    if not _declared:
        with _declare_lock:
            L.tj_context_register_op.restype = _vp
            L.tj_context_register_op.argtypes = [
                _vp, ctypes.POINTER(CustomOpDesc_t)]
            L.tj_status_create.restype = _vp
            L.tj_status_create.argtypes = [ctypes.c_int, ctypes.c_char_p]
            L.tj_custom_dynamic_dim.restype = _i64
            L.tj_custom_dynamic_dim.argtypes = [_vp, ctypes.c_char_p, _i64]
            L.tj_custom_set_output_shape.restype = _vp
            L.tj_custom_set_output_shape.argtypes = [
                ctypes.POINTER(_lib.Tensor_t), _i32, ctypes.POINTER(_i64)]
            _declared = True
    return L


def _status(code: int, message: str) -> int:
    return int(_c().tj_status_create(code, message.encode("utf-8",
                                                          "replace")) or 0)


def _exception_status(e: BaseException) -> int:
    """A status carrying |e|'s type, text and the innermost frame (the
    library prefixes the op's name and node)."""
    frames = traceback.extract_tb(e.__traceback__)
    at = ""
    if frames:
        f = frames[-1]
        at = f" (at {f.filename}:{f.lineno} in {f.name})"
    return _status(_STATUS_BACKEND_FAILURE,
                   f"Python {type(e).__name__}: {e}{at}")


#===----------------------------------------------------------------------===#
# Types seen by a shape rule
#===----------------------------------------------------------------------===#


class SymDim:
    """A symbolic dim of the graph a shape rule runs on (its code is
    negative); ``+`` and ``*`` with ints or other SymDims build dims
    through the graph's dim API."""

    __slots__ = ("code", "_graph")

    def __init__(self, code: int, graph: int) -> None:
        self.code = int(code)
        self._graph = graph

    def _op(self, other: Any, fn: str) -> Union["SymDim", int]:
        b = _dim_code(other, self._graph)
        r = int(getattr(_lib.lib(), fn)(self._graph, self.code, b))
        if r == _lib.DIM_INVALID:
            raise InvalidArgumentError(f"{fn}: invalid dims")
        return _wrap_dim(r, self._graph)

    def __add__(self, other: Any) -> Union["SymDim", int]:
        return self._op(other, "tj_graph_dim_add")

    __radd__ = __add__

    def __mul__(self, other: Any) -> Union["SymDim", int]:
        return self._op(other, "tj_graph_dim_mul")

    __rmul__ = __mul__

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SymDim) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)

    def __repr__(self) -> str:
        return f"SymDim({self.code})"


def _wrap_dim(code: int, graph: int) -> Union[SymDim, int]:
    return code if code >= 0 else SymDim(code, graph)


def _dim_code(d: Any, graph: int) -> int:
    if isinstance(d, SymDim):
        return d.code
    if isinstance(d, str):
        code = int(_lib.lib().tj_graph_symbol(graph, d.encode()))
        if code == _lib.DIM_INVALID:
            raise InvalidArgumentError(f"symbol {d!r} cannot be created")
        return code
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise ArgumentTypeError(f"a dim is an int, a SymDim or a symbol "
                                f"name, got {type(d).__name__}")
    if int(d) < 0:
        raise InvalidArgumentError(f"dim {int(d)} is negative")
    return int(d)


# The graph a shape rule runs on, per thread (for dynamic_dim).
_shape_graph = threading.local()


def dynamic_dim(symbol: str, upper_bound: Any) -> SymDim:
    """In a shape rule: a data-dependent dim, symbol |symbol| (a fresh
    one, not a dim of any graph input) at most |upper_bound| (an int or a
    :class:`SymDim` over the inputs' dims). A run gives the function an
    output of the bound's shape to fill; it returns an array whose
    data-dependent dims are smaller, and the ops after it run on that size
    (C: tj_custom_dynamic_dim). A graph output that depends on it comes
    back in its actual shape (the binding runs such graphs with C's
    tj_executable_run_shaped)."""
    graph = getattr(_shape_graph, "handle", None)
    if graph is None:
        raise InvalidArgumentError("dynamic_dim: only inside a shape rule")
    bound = _dim_code(upper_bound, graph)
    code = int(_c().tj_custom_dynamic_dim(graph, symbol.encode(), bound))
    if code == _lib.DIM_INVALID:
        raise InvalidArgumentError(f"dynamic_dim({symbol!r}) was refused")
    return SymDim(code, graph)


class TensorType:
    """A dtype and a shape (ints and :class:`SymDim`), as a shape rule sees
    an input and returns its output."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: Any, shape: Sequence[Any]) -> None:
        self.dtype = dtype_of(dtype)
        self.shape = tuple(shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"TensorType({self.dtype.name.lower()}, {list(self.shape)})"


#===----------------------------------------------------------------------===#
# Tensors seen by the function
#===----------------------------------------------------------------------===#


def _array_of(t: _lib.Tensor_t, writeable: bool) -> np.ndarray:
    """A numpy view of CPU tensor |t| (dense row-major, as the library
    passes them to a CONTIGUOUS_INPUTS op)."""
    shape = tuple(int(t.shape[i]) for i in range(t.rank))
    npd = numpy_dtype(DType(t.dtype))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count == 0 or not t.data:
        return np.empty(shape, npd)
    buf = (ctypes.c_char * (count * npd.itemsize)).from_address(
        int(t.data) + int(t.byte_offset))
    a = np.frombuffer(buf, dtype=npd, count=count).reshape(shape)
    if not writeable:
        a.flags.writeable = False
    return a


def _torch() -> Any:
    import torch  # noqa: F401 - only when the op asks for torch tensors
    return torch


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy"):
        return x.detach().cpu().numpy()  # a torch tensor
    return np.asarray(x)


#===----------------------------------------------------------------------===#
# The op
#===----------------------------------------------------------------------===#

# Every callback object ever registered: the library may call them as long
# as the context (and its executables) live, which Python cannot see.
_keep: List[Any] = []


def _attrs_of(a: Any) -> Tuple[List[int], List[float]]:
    at = a.contents
    ints = [int(at.ints[i]) for i in range(at.num_ints)]
    floats = [float(at.floats[i]) for i in range(at.num_floats)]
    return ints, floats


class _BorrowedGraph(Graph):
    """A Graph over a handle the library owns (a VJP's joint graph): it is
    never destroyed from here."""

    def __init__(self, handle: int, context: Context) -> None:  # noqa
        self._handle = handle
        self.context = context
        self._borrowed = []
        self._dim_names = {}
        self._symbols = {}
        self.name = "vjp"

    def close(self) -> None:
        self._handle = None


class CustomOp:
    """A Python function registered as a custom op (see :func:`custom_op`).

    Calling it on :class:`~tensorjit.Value` s puts the op in their graph
    (registering it in the graph's context first if needed); calling it on
    arrays calls the function itself."""

    def __init__(self, fn: Callable[..., Any], name: str,
                 shape: Callable[..., Any], num_inputs: Optional[int],
                 vjp: Optional[Callable[..., Any]], version: int, pure: bool,
                 torch: bool, cuda_ptx: Optional[str] = None,
                 cuda_llvm_ir: Optional[str] = None,
                 cuda_entry: Optional[str] = None,
                 cuda_launch: Optional[Callable[..., Any]] = None) -> None:
        if not callable(fn) or not callable(shape):
            raise ArgumentTypeError("custom_op: the function and the shape "
                                    "rule must be callable")
        if vjp is not None and not callable(vjp):
            raise ArgumentTypeError("custom_op: vjp must be callable")
        for what, text in (("cuda_ptx", cuda_ptx),
                           ("cuda_llvm_ir", cuda_llvm_ir),
                           ("cuda_entry", cuda_entry)):
            if text is not None and not isinstance(text, str):
                raise ArgumentTypeError(f"custom_op: {what} must be a str, "
                                        f"got {type(text).__name__}")
        if cuda_launch is not None and not callable(cuda_launch):
            raise ArgumentTypeError("custom_op: cuda_launch must be callable")
        # Checked by the library (all or none, PTX or IR, the IR compiled
        # by its NVPTX back end) when the op is registered.
        self.cuda_ptx = cuda_ptx
        self.cuda_llvm_ir = cuda_llvm_ir
        self.cuda_entry = cuda_entry
        self.launch_rule = cuda_launch
        self.fn = fn
        self.name = name
        self.shape_rule = shape
        self.vjp_rule = vjp
        self.version = int(version)
        self.pure = bool(pure)
        self.torch = bool(torch)
        if num_inputs is None:
            num_inputs = _count_inputs(fn)
        self.num_inputs = int(num_inputs)
        self._contexts: Dict[int, Context] = {}
        self._lock = threading.Lock()
        self._shape_cb = SHAPE_FN(self._shape)
        self._host_cb = HOST_FN(self._host)
        self._vjp_cb = VJP_FN(self._vjp) if vjp is not None else VJP_FN()
        self._launch_cb = (LAUNCH_FN(self._launch) if cuda_launch is not None
                           else LAUNCH_FN())
        _keep.append(self)

    @property
    def qualified_name(self) -> str:
        return f"{self.name}@{self.version}"

    #===--- registration ---===#

    def register(self, context: Optional[Context] = None) -> "CustomOp":
        """Registers the op in |context| (the default one if None); a
        second call for the same context does nothing."""
        ctx = context if context is not None else default_context()
        if not isinstance(ctx, Context):
            raise ArgumentTypeError("register: expected a tensorjit.Context")
        with self._lock:
            if ctx.handle in self._contexts:
                return self
            d = CustomOpDesc_t()
            d.struct_size = ctypes.sizeof(CustomOpDesc_t)
            d.name = self.name.encode()
            d.version = self.version
            d.num_inputs = self.num_inputs
            d.shape = self._shape_cb
            d.host = self._host_cb
            d.vjp = self._vjp_cb
            d.flags = FLAG_CONTIGUOUS_INPUTS | (FLAG_PURE if self.pure else 0)
            if self.cuda_ptx is not None:
                d.cuda_ptx = self.cuda_ptx.encode()
            if self.cuda_llvm_ir is not None:
                d.cuda_llvm_ir = self.cuda_llvm_ir.encode()
            if self.cuda_entry is not None:
                d.cuda_entry = self.cuda_entry.encode()
            d.cuda_launch = self._launch_cb
            _lib.check(_c().tj_context_register_op(ctx.handle,
                                                   ctypes.byref(d)))
            self._contexts[ctx.handle] = ctx
        return self

    #===--- use ---===#

    def __call__(self, *args: Any) -> Any:
        inputs = args[:self.num_inputs]
        attrs = args[self.num_inputs:]
        if len(inputs) != self.num_inputs:
            raise InvalidArgumentError(
                f"custom op {self.name}: takes {self.num_inputs} inputs, got "
                f"{len(inputs)}")
        ints = [a for a in attrs if isinstance(a, (int, np.integer))
                and not isinstance(a, bool)]
        floats = [a for a in attrs if isinstance(a, (float, np.floating))]
        if len(ints) + len(floats) != len(attrs):
            raise ArgumentTypeError(
                f"custom op {self.name}: attributes are ints and floats")
        values = [x for x in inputs if isinstance(x, Value)]
        if values:
            if len(values) != len(inputs):
                raise ArgumentTypeError(
                    f"custom op {self.name}: mix of Values and arrays")
            g = values[0].graph
            self.register(g.context)
            return g.custom(self.qualified_name, values, ints, floats)
        return self.fn(*inputs, *ints, *floats)

    #===--- the callbacks (never raise into C) ---===#

    def _shape(self, user: Any, graph: Any, inputs: Any, n: int, attrs: Any,
               out: Any) -> int:
        try:
            types = []
            for i in range(n):
                t = inputs[i]
                types.append(TensorType(
                    DType(t.dtype),
                    [_wrap_dim(int(t.dims[k]), graph) for k in range(t.rank)]))
            ints, floats = _attrs_of(attrs)
            _shape_graph.handle = graph
            try:
                r = self.shape_rule(*types, *ints, *floats)
            finally:
                _shape_graph.handle = None
            if isinstance(r, tuple) and len(r) == 2:
                r = TensorType(r[0], r[1])
            if not isinstance(r, TensorType):
                raise ArgumentTypeError(
                    f"the shape rule returned {type(r).__name__}, not a "
                    f"TensorType or (dtype, shape)")
            if r.rank > _lib.MAX_RANK:
                raise InvalidArgumentError(
                    f"the shape rule returned rank {r.rank} (at most "
                    f"{_lib.MAX_RANK})")
            o = out.contents
            o.dtype = int(r.dtype)
            o.rank = r.rank
            for k, d in enumerate(r.shape):
                o.dims[k] = _dim_code(d, graph)
            return 0
        except BaseException as e:  # noqa: BLE001 - never into C
            return _exception_status(e)

    def _host(self, user: Any, inputs: Any, n: int, attrs: Any,
              output: Any) -> int:
        try:
            arrays: List[Any] = [_array_of(inputs[i], False)
                                 for i in range(n)]
            if self.torch:
                torch = _torch()
                arrays = [torch.from_numpy(np.array(a)) for a in arrays]
            ints, floats = _attrs_of(attrs)
            result = self.fn(*arrays, *ints, *floats)
            o = output.contents
            dst = _array_of(o, True)
            got = _to_numpy(result)
            if got.shape != dst.shape and got.ndim == dst.ndim and all(
                    a <= b for a, b in zip(got.shape, dst.shape)):
                # Data-dependent dims: the library checks which may change.
                dims = (_i64 * max(got.ndim, 1))(*got.shape)
                st = _c().tj_custom_set_output_shape(output, got.ndim, dims)
                if st:
                    return int(st)
                dst = _array_of(o, True)  # the actual shape now
            if got.shape != dst.shape:
                return _status(
                    _STATUS_INVALID_ARGUMENT,
                    f"the function returned shape "
                    f"{list(got.shape)}, the shape rule gave "
                    f"{list(dst.shape)}")
            if dst.size:
                np.copyto(dst, got, casting="same_kind")
            return 0
        except BaseException as e:  # noqa: BLE001 - never into C
            return _exception_status(e)

    def _launch(self, user: Any, inputs: Any, n: int, attrs: Any,
                output: Any, out: Any) -> int:
        try:
            def concrete(t: Any) -> TensorType:
                return TensorType(DType(t.dtype),
                                  [int(t.dims[k]) for k in range(t.rank)])
            types = [concrete(inputs[i]) for i in range(n)]
            ints, floats = _attrs_of(attrs)
            assert self.launch_rule is not None
            r = self.launch_rule(*types, concrete(output.contents), *ints,
                                 *floats)
            if not isinstance(r, (tuple, list)) or len(r) not in (2, 3):
                raise ArgumentTypeError(
                    f"the launch rule returned {r!r}, not (grid, block) or "
                    f"(grid, block, shared_bytes)")
            l = out.contents
            for field, v in (("grid", r[0]), ("block", r[1])):
                dims = list(v) if isinstance(v, (tuple, list)) else [v]
                if not 1 <= len(dims) <= 3 or not all(
                        isinstance(d, (int, np.integer)) and
                        not isinstance(d, bool) and 0 <= int(d) < 2**32
                        for d in dims):
                    raise InvalidArgumentError(
                        f"the launch rule's {field} {v!r} is not 1 to 3 "
                        f"dims in [0, 2**32)")
                dims += [1] * (3 - len(dims))
                arr = getattr(l, field)
                for k in range(3):
                    arr[k] = int(dims[k])
            shared = int(r[2]) if len(r) == 3 else 0
            if not 0 <= shared < 2**32:
                raise InvalidArgumentError(
                    f"the launch rule's shared_bytes {shared} is out of range")
            l.shared_bytes = shared
            return 0
        except BaseException as e:  # noqa: BLE001 - never into C
            return _exception_status(e)

    def _vjp(self, user: Any, graph: Any, inputs: Any, n: int, output: Any,
             grad_output: Any, attrs: Any, out_grads: Any) -> int:
        try:
            ctx = None
            for c in self._contexts.values():
                if not c.closed and int(_lib.lib().tj_graph_context(graph) or
                                        0) == c.handle:
                    ctx = c
            g = _BorrowedGraph(graph, ctx if ctx is not None
                               else default_context())
            try:
                ins = [Value(g, int(inputs[i].id)) for i in range(n)]
                ints, floats = _attrs_of(attrs)
                assert self.vjp_rule is not None
                grads = self.vjp_rule(g, ins, Value(g, int(output.id)),
                                      Value(g, int(grad_output.id)), *ints,
                                      *floats)
                grads = list(grads) if isinstance(grads, (list, tuple)) \
                    else [grads]
                if len(grads) != n:
                    raise InvalidArgumentError(
                        f"the VJP returned {len(grads)} gradients for {n} "
                        f"inputs")
                for i, v in enumerate(grads):
                    if v is None:
                        out_grads[i].id = 0
                    elif isinstance(v, Value) and v.graph is g:
                        out_grads[i].id = v._raw().id
                    else:
                        raise ArgumentTypeError(
                            f"the VJP's gradient {i} is not a Value of the "
                            f"graph it was given")
            finally:
                g.close()
            return 0
        except BaseException as e:  # noqa: BLE001 - never into C
            return _exception_status(e)

    def __repr__(self) -> str:
        return f"<tensorjit.CustomOp {self.qualified_name}>"


def _count_inputs(fn: Callable[..., Any]) -> int:
    import inspect
    params = inspect.signature(fn).parameters.values()
    return sum(1 for p in params
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.default is p.empty)


def custom_op(name: str, shape: Callable[..., Any], *,
              num_inputs: Optional[int] = None,
              vjp: Optional[Callable[..., Any]] = None, version: int = 1,
              pure: bool = True, torch: bool = False,
              context: Optional[Context] = None,
              cuda_ptx: Optional[str] = None,
              cuda_llvm_ir: Optional[str] = None,
              cuda_entry: Optional[str] = None,
              cuda_launch: Optional[Callable[..., Any]] = None
              ) -> Callable[[Callable[..., Any]], CustomOp]:
    """Decorator: registers the function as custom op |name| (a C
    identifier) of |version| in |context| (the default one if None; other
    contexts register it when a graph of theirs first uses it).

    Args:
        shape: the shape rule, ``shape(*input_types, *ints, *floats)`` ->
            :class:`TensorType` or ``(dtype, shape)``.
        num_inputs: the number of tensor inputs; by default the function's
            positional parameters without a default (the attributes, if
            any, are parameters with defaults).
        vjp: ``vjp(g, inputs, output, grad_output, *ints, *floats)`` ->
            one :class:`~tensorjit.Value` of |g| (or None: no gradient) per
            input, built with |g|'s builder methods; used by
            ``tj_graph_grad``.
        pure: same inputs give the same output, no side effects: identical
            nodes may be merged and an unused one dropped.
        torch: pass torch tensors to the function instead of numpy arrays
            (it may return either).
        cuda_ptx, cuda_llvm_ir, cuda_entry, cuda_launch: a CUDA
            implementation (C: ``tj_custom_op_desc_t.cuda_*``): the kernel
            |cuda_entry| as PTX text, or as LLVM IR text for NVPTX that the
            library compiles to PTX when the op is registered (IR that
            does not parse or verify, another triple or a missing kernel
            raise :class:`~tensorjit.InvalidArgumentError` with LLVM's
            diagnostic then), and the launch rule
            ``cuda_launch(*input_types, output_type, *ints, *floats)`` ->
            ``(grid, block)`` or ``(grid, block, shared_bytes)`` (grid and
            block an int or up to 3 ints; the types' dims are ints). The
            kernel's parameters: the output's device pointer, each input's,
            the output's dims then each input's (i64), the int attributes
            (i64), the float attributes (f64). Compiled for the CUDA
            target, the op runs as that kernel on the executable's stream,
            inside its CUDA graph; the function still serves the other
            targets and the reference interpreter.

    The function receives read-only dense arrays and returns the output
    (any array-like of the shape rule's shape; cast like
    ``numpy.copyto(casting="same_kind")``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidArgumentError(f"custom_op: {name!r} is not an "
                                   f"identifier")

    def wrap(fn: Callable[..., Any]) -> CustomOp:
        op = CustomOp(fn, name, shape, num_inputs, vjp, version, pure, torch,
                      cuda_ptx, cuda_llvm_ir, cuda_entry, cuda_launch)
        op.register(context)
        return op

    return wrap
