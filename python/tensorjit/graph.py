"""Building graphs: :class:`Context`, :class:`Graph` and :class:`Value`.

A :class:`Graph` mirrors the C builder (``tj_graph_*``): one method per op,
plus Python operators on :class:`Value` (``@ + - * / **``, unary ``-``,
``abs``) and comparison methods (``a.lt(b)``; ``==`` keeps its Python
meaning). Dims are ints or symbol names, so ``g.input("x", "f32",
["B", 1024])`` declares a dynamic batch ``B``; simple expressions such as
``"B*4+1"`` work too.

Errors are raised where they happen: the C builder records the first error
on the graph and returns a none value; the binding turns that into an
:class:`~tensorjit.InvalidArgumentError` at the call that caused it, with
the library's message (op, node, shapes). The graph keeps the error, so
later builder calls and :meth:`Graph.finalize` raise it again.
"""

from __future__ import annotations

import atexit
import ctypes
import re
import sys
import weakref
from dataclasses import dataclass
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from . import _lib
from ._tensors import as_index
from .dtypes import DType, DTypeLike, dtype_from_numpy, dtype_of
from .errors import (ArgumentTypeError, InternalError, InvalidArgumentError,
                     TensorJitError)

__all__ = ["Context", "Graph", "Value", "Dim", "Scoreboard",
           "ScoreboardRow", "default_context"]

# A dim: a size, a symbol name or expression ("B", "B*4+1"), or a symbolic
# dim code returned by Graph.symbol / dim_add / dim_mul.
Dim = Union[int, str]
Operand = Union["Value", int, float, bool, np.ndarray, np.generic]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _check_name(name: Any, what: str) -> bytes:
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{what} must be a str, got "
                                f"{type(name).__name__}")
    if "\0" in name:
        raise InvalidArgumentError(f"{what} {name!r} contains a NUL byte")
    return name.encode("utf-8")


def _int_in(value: Any, bounds: Tuple[int, int], what: str) -> int:
    v = as_index(value, what)
    if not bounds[0] <= v <= bounds[1]:
        raise InvalidArgumentError(f"{what}: {v} is out of range")
    return v


def _i32_array(values: Sequence[int], what: str) -> Any:
    vals = [_int_in(v, _INT32, what) for v in values]
    return (ctypes.c_int32 * max(len(vals), 1))(*vals)


def _i64_array(values: Sequence[int], what: str) -> Any:
    vals = [_int_in(v, _INT64, what) for v in values]
    return (ctypes.c_int64 * max(len(vals), 1))(*vals)


def _sequence(value: Any, what: str) -> List[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(
            value, (Sequence, np.ndarray)):
        raise ArgumentTypeError(f"{what} must be a list or tuple, got "
                                f"{type(value).__name__}")
    return list(value)


#===----------------------------------------------------------------------===#
# Context
#===----------------------------------------------------------------------===#


class Context:
    """A ``tj_context_t``: what the graphs and executables of one host share.

    Args:
        diagnostic: called as ``diagnostic(severity, message)`` (severity is
            ``"remark"`` or ``"warning"``) for what ``log`` asks to be
            logged; ``None`` writes to stderr. It may be called on any
            thread and must not call back into tensorjit.
        log, print_after, dump_dir: the context's diagnostic settings, with
            the syntax of ``TJ_LOG``, ``TJ_PRINT_AFTER`` and ``TJ_DUMP_DIR``
            (e.g. ``log="fusion,recompiles"``). ``None`` takes the
            environment variable as it is when the context is created;
            ``""`` turns the setting off.
        retain_compiled: how many compiled executables the context keeps
            after their last release, so that compiling an equal graph
            again takes one back instead of compiling (C:
            ``tj_context_options_t.retain_compiled``; 8 by default, 0
            unloads each executable's code when it is released).

    Every graph and executable holds a reference to it, and the C
    executables hold one of their own, so that the objects may be
    collected in any order (a garbage collector frees a cycle's objects in
    no set order, and at interpreter exit even what :meth:`close` cannot
    see any more). :meth:`close` closes what it can see first.
    """

    def __init__(self, diagnostic: Optional[Callable[[str, str], None]] = None,
                 *, log: Optional[str] = None,
                 print_after: Optional[str] = None,
                 dump_dir: Optional[str] = None,
                 retain_compiled: Optional[int] = None) -> None:
        self._handle: Optional[int] = None
        if retain_compiled is not None and (
                isinstance(retain_compiled, bool) or
                not isinstance(retain_compiled, int)):
            raise ArgumentTypeError("Context: retain_compiled must be an int")
        if retain_compiled is not None and not 0 <= retain_compiled <= 64:
            raise InvalidArgumentError(
                f"Context: retain_compiled is {retain_compiled}, not in "
                f"[0, 64]")
        self._children: "weakref.WeakSet[Any]" = weakref.WeakSet()
        settings = {}
        for name, value in (("log", log), ("print_after", print_after),
                            ("dump_dir", dump_dir)):
            if value is not None:
                if not isinstance(value, str):
                    raise ArgumentTypeError(f"Context: {name} must be a str")
                if "\0" in value:
                    raise InvalidArgumentError(f"Context: {name} contains NUL")
                settings[name] = value.encode()
        L = _lib.lib()
        options = _lib.ContextOptions_t()
        L.tj_context_options_initialize(ctypes.byref(options))
        for name, value in settings.items():
            setattr(options, name, value)  # copied by tj_context_create
        if retain_compiled is not None:
            options.retain_compiled = retain_compiled
        self._callback = None
        if diagnostic is not None:
            if not callable(diagnostic):
                raise ArgumentTypeError("diagnostic must be callable")

            def trampoline(severity: int, message: Any, length: int,
                           user_data: Any) -> None:
                text = ctypes.string_at(message, length).decode(
                    "utf-8", "replace")
                try:
                    diagnostic("warning" if severity else "remark", text)
                except Exception as e:  # noqa: BLE001 - never into C
                    print(f"tensorjit: diagnostic callback raised {e!r}",
                          file=sys.stderr)

            self._callback = _lib.DIAGNOSTIC_FN(trampoline)
            options.diagnostic_fn = self._callback
            _with_callback.add(self)
        handle = ctypes.c_void_p()
        _lib.check(L.tj_context_create(ctypes.byref(options),
                                       ctypes.byref(handle)))
        self._handle = handle.value

    @property
    def handle(self) -> int:
        """The raw ``tj_context_t*``; raises if closed."""
        if not self._handle:
            raise InvalidArgumentError("the context is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return not self._handle

    def _adopt(self, child: Any) -> None:
        self._children.add(child)

    def wait_autotune(self) -> None:
        """Blocks until every GEMM tuning job that compiles with
        ``autotune="background"`` queued on this context has finished and
        published its decision, so that the next run of each executable
        serves the tuned kernel (``tj_context_wait_autotune``). The call
        releases the GIL while it waits."""
        _lib.lib().tj_context_wait_autotune(self.handle)

    def close(self) -> None:
        """Closes every graph and executable of this context, then it."""
        if not self._handle:
            return
        for child in list(self._children):
            child.close()
        _lib.lib().tj_context_destroy(self._handle)
        self._handle = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# Contexts whose diagnostic function is Python: at exit, their executables'
# background builds (which may call it from a thread of the library's) are
# waited for while other threads can still take the GIL; once the
# interpreter is finalizing, a thread that asks for it is stopped or hangs.
_with_callback: "weakref.WeakSet[Context]" = weakref.WeakSet()


def _quiesce_at_exit() -> None:
    for ctx in list(_with_callback):
        if ctx.closed:
            continue
        for child in list(ctx._children):
            handle = getattr(child, "_handle", None)
            if handle and hasattr(child, "prepare"):
                status = _lib.lib().tj_executable_prepare(handle, None, 0)
                if status:
                    _lib.lib().tj_status_free(status)


atexit.register(_quiesce_at_exit)

_default: Optional[Context] = None


def default_context() -> Context:
    """The context used when none is given (created on first use)."""
    global _default
    if _default is None or _default.closed:
        _default = Context()
    return _default


#===----------------------------------------------------------------------===#
# Value
#===----------------------------------------------------------------------===#


class Value:
    """A value of a :class:`Graph` (a ``tj_value_t`` plus its graph).

    Supports ``a @ b``, ``a + b``, ``a - b``, ``a * b``, ``a / b``,
    ``a ** b``, ``-a``, ``abs(a)``; an operand may be a Python number (a
    scalar of the other operand's dtype) or a numpy array (a constant).
    Comparisons are methods: :meth:`eq`, :meth:`ne`, :meth:`lt`,
    :meth:`le`, :meth:`gt`, :meth:`ge`.
    """

    __slots__ = ("graph", "id", "__weakref__")

    def __init__(self, graph: "Graph", value_id: int) -> None:
        self.graph = graph
        self.id = value_id

    def _raw(self) -> _lib.Value_t:
        return _lib.Value_t(self.id)

    @property
    def dtype(self) -> DType:
        return self.graph.value_dtype(self)

    @property
    def shape(self) -> Tuple[Dim, ...]:
        """Dims: ints, or symbol names for symbolic dims."""
        return self.graph.value_shape(self)

    @property
    def rank(self) -> int:
        return len(self.shape)

    ndim = rank

    def __repr__(self) -> str:
        try:
            dims = ",".join(str(d) for d in self.shape)
            return f"<Value %{self.id}: {self.dtype.short_name}[{dims}]>"
        except TensorJitError:
            return f"<Value %{self.id} of a closed graph>"

    def __bool__(self) -> bool:
        raise ArgumentTypeError("a graph Value has no truth value; use "
                                "Graph.where for a conditional")

    # Arithmetic.
    def __add__(self, other: Operand) -> "Value":
        return self.graph.add(self, other)

    def __radd__(self, other: Operand) -> "Value":
        return self.graph.add(other, self)

    def __sub__(self, other: Operand) -> "Value":
        return self.graph.sub(self, other)

    def __rsub__(self, other: Operand) -> "Value":
        return self.graph.sub(other, self)

    def __mul__(self, other: Operand) -> "Value":
        return self.graph.mul(self, other)

    def __rmul__(self, other: Operand) -> "Value":
        return self.graph.mul(other, self)

    def __truediv__(self, other: Operand) -> "Value":
        return self.graph.div(self, other)

    def __rtruediv__(self, other: Operand) -> "Value":
        return self.graph.div(other, self)

    def __pow__(self, other: Operand) -> "Value":
        return self.graph.pow(self, other)

    def __rpow__(self, other: Operand) -> "Value":
        return self.graph.pow(other, self)

    def __matmul__(self, other: Operand) -> "Value":
        return self.graph.matmul(self, other)

    def __rmatmul__(self, other: Operand) -> "Value":
        return self.graph.matmul(other, self)

    def __neg__(self) -> "Value":
        return self.graph.neg(self)

    def __pos__(self) -> "Value":
        return self

    def __abs__(self) -> "Value":
        return self.graph.abs(self)

    # Comparisons (methods: == and != keep Python's identity meaning).
    def eq(self, other: Operand) -> "Value":
        return self.graph.eq(self, other)

    def ne(self, other: Operand) -> "Value":
        return self.graph.ne(self, other)

    def lt(self, other: Operand) -> "Value":
        return self.graph.lt(self, other)

    def le(self, other: Operand) -> "Value":
        return self.graph.le(self, other)

    def gt(self, other: Operand) -> "Value":
        return self.graph.gt(self, other)

    def ge(self, other: Operand) -> "Value":
        return self.graph.ge(self, other)

    # The common unary ops and shape ops, as methods.
    def exp(self) -> "Value":
        return self.graph.exp(self)

    def log(self) -> "Value":
        return self.graph.log(self)

    def sqrt(self) -> "Value":
        return self.graph.sqrt(self)

    def tanh(self) -> "Value":
        return self.graph.tanh(self)

    def sigmoid(self) -> "Value":
        return self.graph.sigmoid(self)

    def relu(self) -> "Value":
        return self.graph.relu(self)

    def gelu(self, approximate: bool = False) -> "Value":
        return self.graph.gelu(self, approximate)

    def cast(self, dtype: DTypeLike) -> "Value":
        return self.graph.cast(self, dtype)

    astype = cast

    def sum(self, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> "Value":
        return self.graph.sum(self, axes, keepdims)

    def mean(self, axes: Optional[Union[int, Sequence[int]]] = None,
             keepdims: bool = False) -> "Value":
        return self.graph.mean(self, axes, keepdims)

    def max(self, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> "Value":
        return self.graph.max(self, axes, keepdims)

    def min(self, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> "Value":
        return self.graph.min(self, axes, keepdims)

    def reshape(self, *dims: Any) -> "Value":
        if len(dims) == 1 and not isinstance(dims[0], (int, str, np.integer)):
            dims = tuple(dims[0])
        return self.graph.reshape(self, list(dims))

    def transpose(self, *perm: int) -> "Value":
        if len(perm) == 1 and not isinstance(perm[0], (int, np.integer)):
            perm = tuple(perm[0])
        return self.graph.transpose(self, list(perm) if perm else None)

    @property
    def T(self) -> "Value":
        return self.graph.transpose(self, None)


#===----------------------------------------------------------------------===#
# Scoreboard
#===----------------------------------------------------------------------===#

STAGES = ("eager", "canonicalize", "decompose", "fuse", "memplan")


@dataclass(frozen=True)
class ScoreboardRow:
    """One stage's numbers (``tj_scoreboard_row_t``)."""

    stage: str
    nodes: int
    kernels: int
    bytes_read: int
    bytes_written: int
    peak_bytes: int
    graph_breaks: int
    percent_compiled: float
    # Of bytes_read, the bytes of constants (weights); quantized weights
    # count their stored bytes.
    weight_bytes_read: int = 0

    @property
    def activation_bytes_moved(self) -> int:
        """Bytes moved that are not weights."""
        return self.bytes_read + self.bytes_written - self.weight_bytes_read


@dataclass(frozen=True)
class Scoreboard:
    """What the optimizer does to a graph, stage by stage
    (``tj_graph_scoreboard``)."""

    rows: Tuple[ScoreboardRow, ...]
    activation_bytes: int
    input_bytes: int
    arena_bytes: int
    live_peak_bytes: int

    def row(self, stage: str) -> ScoreboardRow:
        for r in self.rows:
            if r.stage == stage:
                return r
        raise KeyError(stage)

    def __str__(self) -> str:
        head = (f"{'stage':<13}{'nodes':>7}{'kernels':>9}{'bytes moved':>14}"
                f"{'peak bytes':>13}{'breaks':>8}{'compiled':>10}")
        lines = [head]
        for r in self.rows:
            lines.append(f"{r.stage:<13}{r.nodes:>7}{r.kernels:>9}"
                         f"{r.bytes_read + r.bytes_written:>14}"
                         f"{r.peak_bytes:>13}{r.graph_breaks:>8}"
                         f"{r.percent_compiled:>9.0f}%")
        return "\n".join(lines)


@dataclass(frozen=True)
class PartitionStats:
    """What :meth:`Graph.partition` decided (``tj_partition_stats_t``), in
    bytes at the symbol sizes given: the activations the forward saves for
    the backward, of those the bytes that were outputs anyway, the forward
    inputs the backward reads again, and the forward nodes it recomputes."""

    saved_bytes: int
    num_saved: int
    saved_output_bytes: int
    saved_input_bytes: int
    num_saved_inputs: int
    num_recomputed: int


#===----------------------------------------------------------------------===#
# Graph
#===----------------------------------------------------------------------===#


class Graph:
    """A tensor graph under construction (``tj_graph_t``).

    Args:
        name: the graph's name (a C identifier), printed as ``@name``.
        context: the :class:`Context`; the default one if ``None``.

    Example::

        g = tensorjit.Graph("block")
        x = g.input("x", "f32", ["B", 1024])
        w = g.input("w", "f32", [1024, 4096])
        b = g.input("b", "f32", [4096])
        g.output(g.gelu(x @ w + b, approximate=True), "y")
        exe = tensorjit.compile(g)          # finalizes g
        y = exe(x_array, w_array, b_array)  # numpy in, numpy out

    A graph is built by one thread at a time. Use :meth:`close` (or a
    ``with`` block) to free it early; using it afterwards raises.
    """

    def __init__(self, name: str = "main",
                 context: Optional[Context] = None) -> None:
        self._handle: Optional[int] = None
        self.context = context if context is not None else default_context()
        if not isinstance(self.context, Context):
            raise ArgumentTypeError("context must be a tensorjit.Context")
        self._borrowed: List[np.ndarray] = []
        self._dim_names: Dict[int, str] = {}
        self._symbols: Dict[str, int] = {}
        raw_name = _check_name(name, "graph name")
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().tj_graph_create(self.context.handle, raw_name,
                                              ctypes.byref(handle)))
        self._handle = handle.value
        self.name = name
        self.context._adopt(self)

    @classmethod
    def parse(cls, text: str, context: Optional[Context] = None,
              filename: Optional[str] = None) -> "Graph":
        """Parses one function of ``.tj`` text into a new finalized graph.
        Errors give ``filename:line:column``."""
        if not isinstance(text, str):
            raise ArgumentTypeError("text must be a str")
        self = cls.__new__(cls)
        self._handle = None
        self.context = context if context is not None else default_context()
        self._borrowed = []
        self._dim_names = {}
        self._symbols = {}
        raw = text.encode("utf-8")
        fname = _check_name(filename, "filename") if filename else None
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().tj_graph_parse(self.context.handle, raw,
                                             len(raw), fname,
                                             ctypes.byref(handle)))
        self._handle = handle.value
        self.context._adopt(self)
        m = re.search(r"func\s+@([A-Za-z_][A-Za-z0-9_]*)", text)
        self.name = m.group(1) if m else "main"
        # Learn the symbol names (they appear inside shapes) so shapes read
        # back by name; looking a symbol up changes nothing in the graph.
        L = _lib.lib()
        for word in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*",
                                   " ".join(re.findall(r"\[([^\]]*)\]",
                                                       text)))):
            d = int(L.tj_graph_symbol(self._handle, word.encode()))
            if d != _lib.DIM_INVALID:
                self._symbols[word] = d
                self._dim_names.setdefault(d, word)
        return self

    #===--- lifetime ---===#

    @property
    def handle(self) -> int:
        """The raw ``tj_graph_t*``; raises if the graph is closed."""
        if not self._handle:
            raise InvalidArgumentError(f"graph @{getattr(self, 'name', '?')} "
                                       f"is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return not self._handle

    def close(self) -> None:
        """Destroys the C graph. Executables compiled from it stay valid."""
        if self._handle:
            _lib.lib().tj_graph_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def finalize(self) -> "Graph":
        """Returns the first recorded error as an exception, or verifies
        and freezes the graph. Calling it again is a no-op."""
        _lib.check(_lib.lib().tj_graph_finalize(self.handle))
        return self

    def status(self) -> Optional[TensorJitError]:
        """The first recorded error (as an exception object), or None."""
        err = _lib.status_error(_lib.lib().tj_graph_status(self.handle))
        return err  # type: ignore[return-value]

    #===--- helpers ---===#

    def _value(self, raw: _lib.Value_t, op: str) -> Value:
        if raw.id:
            return Value(self, int(raw.id))
        err = _lib.status_error(_lib.lib().tj_graph_status(self.handle))
        if err is None:
            raise InternalError(f"{op}: returned none without an error")
        raise err

    def _after_void(self, op: str) -> None:
        err = _lib.status_error(_lib.lib().tj_graph_status(self.handle))
        if err is not None:
            raise err

    def _own(self, v: Any, what: str) -> Value:
        if not isinstance(v, Value):
            raise ArgumentTypeError(f"{what}: expected a Value, got "
                                    f"{type(v).__name__}")
        if v.graph is not self:
            raise InvalidArgumentError(
                f"{what}: the value belongs to graph @{v.graph.name}, not "
                f"@{self.name}")
        return v

    def _operand(self, x: Any, like: Optional[Value], what: str) -> Value:
        """A Value for |x|: itself, a scalar of |like|'s dtype for a Python
        number, a constant for a numpy array."""
        if isinstance(x, Value):
            return self._own(x, what)
        if isinstance(x, (np.ndarray, np.generic)):
            return self.constant(np.asarray(x))
        if isinstance(x, (bool, int, float)):
            if like is None:
                dtype = DType.BOOL if isinstance(x, bool) else (
                    DType.I64 if isinstance(x, int) else DType.F32)
            else:
                dtype = like.dtype
            if dtype != DType.BOOL and not dtype.is_float and isinstance(
                    x, float) and not float(x).is_integer():
                raise InvalidArgumentError(
                    f"{what}: {x!r} is not an integer but the other operand "
                    f"is {dtype.short_name}; cast it first")
            return self.scalar(dtype, float(x))
        raise ArgumentTypeError(f"{what}: expected a Value, a number or a "
                                f"numpy array, got {type(x).__name__}")

    def _pair(self, a: Any, b: Any, op: str) -> Tuple[Value, Value]:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise ArgumentTypeError(f"{op}: at least one operand must be a "
                                    f"Value")
        like_a = b if isinstance(b, Value) else None
        like_b = a if isinstance(a, Value) else None
        va = self._operand(a, like_a, f"{op} operand a")
        vb = self._operand(b, like_b, f"{op} operand b")
        return va, vb

    def _dim(self, d: Any, what: str) -> int:
        if isinstance(d, str):
            return self.dim(d)
        return _int_in(d, _INT64, what)

    def _dims(self, dims: Any, what: str) -> Tuple[int, Any]:
        items = _sequence(dims, what)
        if len(items) > _lib.MAX_RANK:
            raise InvalidArgumentError(
                f"{what}: {len(items)} dims; at most {_lib.MAX_RANK}")
        vals = [self._dim(d, f"{what}[{i}]") for i, d in enumerate(items)]
        return len(vals), (ctypes.c_int64 * max(len(vals), 1))(*vals)

    def _axes(self, axes: Any, what: str) -> Tuple[int, Any]:
        if axes is None:
            return 0, (ctypes.c_int32 * 1)()
        if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
            axes = [axes]
        items = _sequence(axes, what)
        return len(items), _i32_array(items, what)

    def _rank_of(self, v: Value) -> int:
        return int(_lib.lib().tj_graph_value_rank(self.handle, v._raw()))

    def _per_axis(self, v: Value, values: Any, what: str) -> Any:
        items = _sequence(values, what)
        rank = self._rank_of(v)
        if len(items) != rank:
            raise InvalidArgumentError(
                f"{what}: {len(items)} entries for a value of rank {rank}")
        return _i64_array(items, what)

    #===--- symbolic dims ---===#

    def symbol(self, name: str) -> int:
        """The symbolic dim named |name| (a C identifier), created on first
        use. Returns its dim code (a negative int)."""
        raw = _check_name(name, "symbol name")
        if not _IDENT.match(name):
            raise InvalidArgumentError(f"symbol name {name!r} is not a C "
                                       f"identifier")
        d = int(_lib.lib().tj_graph_symbol(self.handle, raw))
        if d == _lib.DIM_INVALID:
            self._after_void("symbol")
            raise InvalidArgumentError(
                f"symbol {name!r}: graph @{self.name} is finalized and has "
                f"no such symbol")
        self._symbols[name] = d
        self._dim_names.setdefault(d, name)
        return d

    def dim(self, expr: Union[str, int]) -> int:
        """The dim code of |expr|: an int, a symbol name, or a sum of
        products of names and ints such as ``"B*4+1"``."""
        if not isinstance(expr, str):
            return _int_in(expr, _INT64, "dim")
        text = expr.replace(" ", "")
        if not text:
            raise InvalidArgumentError("empty dim expression")
        total: Optional[int] = None
        for term in text.split("+"):
            prod: Optional[int] = None
            for factor in term.split("*"):
                if factor.isdigit():
                    f = int(factor)
                elif _IDENT.match(factor):
                    f = self.symbol(factor)
                else:
                    raise InvalidArgumentError(
                        f"dim expression {expr!r}: bad factor {factor!r} "
                        f"(expected names and ints joined by + and *)")
                prod = f if prod is None else self.dim_mul(prod, f)
            assert prod is not None
            total = prod if total is None else self.dim_add(total, prod)
        assert total is not None
        if total < -1 and total not in self._dim_names:
            self._dim_names[total] = text
        return total

    def _dim_op(self, fn: str, a: Dim, b: Dim) -> int:
        r = int(getattr(_lib.lib(), "tj_graph_" + fn)(
            self.handle, self._dim(a, "a"), self._dim(b, "b")))
        if r == _lib.DIM_INVALID:
            self._after_void(fn)
            raise InvalidArgumentError(fn + ": invalid dims")
        return r

    def dim_add(self, a: Dim, b: Dim) -> int:
        """The dim |a| + |b| (constants or symbolic)."""
        return self._dim_op("dim_add", a, b)

    def dim_mul(self, a: Dim, b: Dim) -> int:
        """The dim |a| * |b| (constants or symbolic)."""
        return self._dim_op("dim_mul", a, b)

    def dim_sub(self, a: Dim, b: Dim) -> int:
        """The dim |a| - |b| where it is a dim for every value of the
        symbols ((B + T) - B is T; T - 1 raises)."""
        return self._dim_op("dim_sub", a, b)

    def dim_div(self, a: Dim, b: Dim) -> int:
        """The dim |a| / |b| where |b| divides |a| exactly (B*T*4 / 4 is
        B*T; T / 2 raises)."""
        return self._dim_op("dim_div", a, b)

    def dim_name(self, d: int) -> Dim:
        """|d| as an int, or as its name/expression if symbolic."""
        if d >= 0:
            return d
        return self._dim_names.get(d, d)

    #===--- leaves and outputs ---===#

    def input(self, name: str, dtype: DTypeLike, dims: Sequence[Dim]
              ) -> Value:
        """Declares the next graph input, e.g. ``g.input("x", "f32",
        ["B", 1024])``."""
        raw = _check_name(name, "input name")
        dt = dtype_of(dtype)
        rank, arr = self._dims(dims, f"input {name!r} dims")
        return self._value(_lib.lib().tj_graph_input(self.handle, int(dt),
                                                     rank, arr, raw), "input")

    def constant(self, array: Any, dtype: Optional[DTypeLike] = None,
                 borrowed: bool = False) -> Value:
        """A constant tensor from |array| (any array-like). The bytes are
        copied into the graph, unless |borrowed|: then the (contiguous)
        array is kept alive by this graph and by every executable compiled
        from it, and must not be modified."""
        dt = dtype_of(dtype) if dtype is not None else None
        if isinstance(array, Value):
            raise ArgumentTypeError("constant: expected an array, got a Value")
        try:
            if dt is None:
                arr = np.asarray(array)
            elif dt == DType.BF16:
                arr = np.asarray(array)
                if arr.dtype != np.uint16 and dtype_from_numpy(arr.dtype) != \
                        DType.BF16:
                    from .dtypes import f32_to_bf16
                    arr = f32_to_bf16(arr.astype(np.float32))
            else:
                from .dtypes import numpy_dtype
                arr = np.asarray(array, dtype=numpy_dtype(dt))
        except (TypeError, ValueError) as e:
            raise ArgumentTypeError(f"constant: {e}") from None
        if dt is None:
            dt = dtype_from_numpy(arr.dtype.newbyteorder("=")
                                  if not arr.dtype.isnative else arr.dtype)
            if dt is None:
                raise InvalidArgumentError(
                    f"constant: numpy dtype {arr.dtype} has no tensorjit "
                    f"equivalent")
        # Not np.ascontiguousarray: it makes a rank-0 array shape [1],
        # which would then broadcast where a scalar was meant.
        arr = np.asarray(arr, order="C")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        rank, dims = self._dims(list(arr.shape), "constant shape")
        fn = (_lib.lib().tj_graph_constant_borrowed if borrowed else
              _lib.lib().tj_graph_constant)
        v = self._value(fn(self.handle, int(dt), rank, dims,
                           arr.ctypes.data_as(ctypes.c_void_p), arr.nbytes),
                        "constant")
        if borrowed:
            self._borrowed.append(arr)
        return v

    def scalar(self, dtype: DTypeLike, value: Union[int, float, bool]
               ) -> Value:
        """A rank-0 constant of |dtype| holding |value|."""
        dt = dtype_of(dtype)
        if not isinstance(value, (int, float, bool, np.number, np.bool_)):
            raise ArgumentTypeError(f"scalar: expected a number, got "
                                    f"{type(value).__name__}")
        return self._value(_lib.lib().tj_graph_scalar(self.handle, int(dt),
                                                      float(value)), "scalar")

    def full(self, dtype: DTypeLike, dims: Sequence[Dim],
             value: Union[int, float, bool]) -> Value:
        """A tensor of |dims| (may be symbolic) filled with |value|."""
        dt = dtype_of(dtype)
        rank, arr = self._dims(dims, "full dims")
        if not isinstance(value, (int, float, bool, np.number, np.bool_)):
            raise ArgumentTypeError("full: value must be a number")
        return self._value(_lib.lib().tj_graph_full(
            self.handle, int(dt), rank, arr, float(value)), "full")

    def zeros(self, dtype: DTypeLike, dims: Sequence[Dim]) -> Value:
        return self.full(dtype, dims, 0)

    def ones(self, dtype: DTypeLike, dims: Sequence[Dim]) -> Value:
        return self.full(dtype, dims, 1)

    def iota(self, dtype: DTypeLike, dims: Sequence[Dim], axis: int = 0
             ) -> Value:
        """Each element is its index along |axis|."""
        dt = dtype_of(dtype)
        rank, arr = self._dims(dims, "iota dims")
        return self._value(_lib.lib().tj_graph_iota(
            self.handle, int(dt), rank, arr,
            _int_in(axis, _INT32, "iota axis")), "iota")

    def output(self, value: Value, name: Optional[str] = None) -> None:
        """Marks |value| as the next output (named ``out<i>`` by default)."""
        v = self._own(value, "output")
        if name is None:
            name = f"out{self.num_outputs}"
        raw = _check_name(name, "output name")
        _lib.lib().tj_graph_output(self.handle, v._raw(), raw)
        self._after_void("output")

    #===--- elementwise ---===#

    def _unary(self, op: str, a: Value) -> Value:
        v = self._own(a, op)
        return self._value(getattr(_lib.lib(), "tj_graph_" + op)(
            self.handle, v._raw()), op)

    def _binary(self, op: str, a: Operand, b: Operand) -> Value:
        va, vb = self._pair(a, b, op)
        return self._value(getattr(_lib.lib(), "tj_graph_" + op)(
            self.handle, va._raw(), vb._raw()), op)

    def neg(self, a: Value) -> Value:
        """-a (wraps for integers)."""
        return self._unary("neg", a)

    def abs(self, a: Value) -> Value:
        """|a|."""
        return self._unary("abs", a)

    def exp(self, a: Value) -> Value:
        """e^a (float)."""
        return self._unary("exp", a)

    def log(self, a: Value) -> Value:
        """ln a (float)."""
        return self._unary("log", a)

    def sqrt(self, a: Value) -> Value:
        """sqrt(a) (float)."""
        return self._unary("sqrt", a)

    def rsqrt(self, a: Value) -> Value:
        """1 / sqrt(a) (float)."""
        return self._unary("rsqrt", a)

    def tanh(self, a: Value) -> Value:
        """tanh(a) (float)."""
        return self._unary("tanh", a)

    def sigmoid(self, a: Value) -> Value:
        """1 / (1 + e^-a) (float)."""
        return self._unary("sigmoid", a)

    def erf(self, a: Value) -> Value:
        """erf(a) (float)."""
        return self._unary("erf", a)

    def erfc(self, a: Value) -> Value:
        """erfc(a) = 1 - erf(a), accurate in the tail (float)."""
        return self._unary("erfc", a)

    def sin(self, a: Value) -> Value:
        """sin(a) (float)."""
        return self._unary("sin", a)

    def cos(self, a: Value) -> Value:
        """cos(a) (float)."""
        return self._unary("cos", a)

    def asin(self, a: Value) -> Value:
        """asin(a) in [-pi/2, pi/2]; NaN for |a| > 1 (float)."""
        return self._unary("asin", a)

    def acos(self, a: Value) -> Value:
        """acos(a) in [0, pi]; NaN for |a| > 1 (float)."""
        return self._unary("acos", a)

    def atan(self, a: Value) -> Value:
        """atan(a) in (-pi/2, pi/2) (float)."""
        return self._unary("atan", a)

    def floor(self, a: Value) -> Value:
        """floor(a) (float)."""
        return self._unary("floor", a)

    def ceil(self, a: Value) -> Value:
        """ceil(a) (float)."""
        return self._unary("ceil", a)

    def round(self, a: Value) -> Value:
        """Round half to even, as numpy.round (float)."""
        return self._unary("round", a)

    def relu(self, a: Value) -> Value:
        """max(a, 0) (numeric)."""
        return self._unary("relu", a)

    def sign(self, a: Value) -> Value:
        """-1, 0 or 1 (numeric)."""
        return self._unary("sign", a)

    def logical_not(self, a: Value) -> Value:
        """not a (bool)."""
        return self._unary("logical_not", a)

    def isnan(self, a: Value) -> Value:
        """a != a, as bool (float)."""
        return self._unary("isnan", a)

    def add(self, a: Operand, b: Operand) -> Value:
        """a + b with numpy broadcasting."""
        return self._binary("add", a, b)

    def sub(self, a: Operand, b: Operand) -> Value:
        """a - b."""
        return self._binary("sub", a, b)

    def mul(self, a: Operand, b: Operand) -> Value:
        """a * b."""
        return self._binary("mul", a, b)

    def div(self, a: Operand, b: Operand) -> Value:
        """a / b; integers truncate toward zero, x / 0 is 0."""
        return self._binary("div", a, b)

    def pow(self, a: Operand, b: Operand) -> Value:
        """a ** b (float)."""
        return self._binary("pow", a, b)

    def maximum(self, a: Operand, b: Operand) -> Value:
        return self._binary("maximum", a, b)

    def minimum(self, a: Operand, b: Operand) -> Value:
        return self._binary("minimum", a, b)

    def eq(self, a: Operand, b: Operand) -> Value:
        """a == b, as bool."""
        return self._binary("eq", a, b)

    def ne(self, a: Operand, b: Operand) -> Value:
        """a != b, as bool."""
        return self._binary("ne", a, b)

    def lt(self, a: Operand, b: Operand) -> Value:
        """a < b, as bool."""
        return self._binary("lt", a, b)

    def le(self, a: Operand, b: Operand) -> Value:
        """a <= b, as bool."""
        return self._binary("le", a, b)

    def gt(self, a: Operand, b: Operand) -> Value:
        """a > b, as bool."""
        return self._binary("gt", a, b)

    def ge(self, a: Operand, b: Operand) -> Value:
        """a >= b, as bool."""
        return self._binary("ge", a, b)

    def logical_and(self, a: Operand, b: Operand) -> Value:
        """a and b (bool)."""
        return self._binary("logical_and", a, b)

    def logical_or(self, a: Operand, b: Operand) -> Value:
        """a or b (bool)."""
        return self._binary("logical_or", a, b)

    def where(self, cond: Value, a: Operand, b: Operand) -> Value:
        """cond ? a : b elementwise; all three broadcast together."""
        c = self._own(cond, "where cond")
        like = a if isinstance(a, Value) else (b if isinstance(b, Value)
                                               else None)
        va = self._operand(a, like, "where a")
        vb = self._operand(b, va, "where b")
        return self._value(_lib.lib().tj_graph_where(
            self.handle, c._raw(), va._raw(), vb._raw()), "where")

    def cast(self, a: Value, dtype: DTypeLike) -> Value:
        """|a| converted to |dtype| (float to int truncates)."""
        v = self._own(a, "cast")
        return self._value(_lib.lib().tj_graph_cast(
            self.handle, v._raw(), int(dtype_of(dtype))), "cast")

    def bitcast(self, a: Value, dtype: DTypeLike) -> Value:
        """|a|'s bits read as |dtype|, of the same element size (ONNX
        BitCast: f32 <-> i32, i8 <-> u8, bool -> u8, ...)."""
        v = self._own(a, "bitcast")
        return self._value(_lib.lib().tj_graph_bitcast(
            self.handle, v._raw(), int(dtype_of(dtype))), "bitcast")

    # Remainders, bitwise ops and shifts (ONNX semantics; they fuse).

    def mod(self, a: Operand, b: Operand) -> Value:
        """a - floor(a / b) * b, the sign of b (numpy.mod; ONNX Mod with
        fmod=0); integers: x mod 0 is 0."""
        return self._binary("mod", a, b)

    def fmod(self, a: Operand, b: Operand) -> Value:
        """a - trunc(a / b) * b, the sign of a (numpy.fmod; ONNX Mod with
        fmod=1); integers: x fmod 0 is 0."""
        return self._binary("fmod", a, b)

    def bitwise_and(self, a: Operand, b: Operand) -> Value:
        """a & b (integers)."""
        return self._binary("bitwise_and", a, b)

    def bitwise_or(self, a: Operand, b: Operand) -> Value:
        """a | b (integers)."""
        return self._binary("bitwise_or", a, b)

    def bitwise_xor(self, a: Operand, b: Operand) -> Value:
        """a ^ b (integers)."""
        return self._binary("bitwise_xor", a, b)

    def bitwise_not(self, a: Value) -> Value:
        """~a (integers)."""
        return self._unary("bitwise_not", a)

    def shift_left(self, a: Operand, b: Operand) -> Value:
        """a << b, wrapping; 0 when b < 0 or b >= the bits (integers)."""
        return self._binary("shift_left", a, b)

    def shift_right(self, a: Operand, b: Operand) -> Value:
        """a >> b, arithmetic on signed integers (the sign bit everywhere
        when b < 0 or b >= the bits), logical on unsigned ones (0 when
        b >= the bits)."""
        return self._binary("shift_right", a, b)

    #===--- reductions ---===#

    def _reduce(self, op: str, a: Value, axes: Any, keepdims: bool) -> Value:
        v = self._own(a, op)
        n, arr = self._axes(axes, f"{op} axes")
        return self._value(getattr(_lib.lib(), "tj_graph_" + op)(
            self.handle, v._raw(), n, arr, bool(keepdims)), op)

    def sum(self, a: Value, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> Value:
        """Sum over |axes| (all when None)."""
        return self._reduce("sum", a, axes, keepdims)

    def mean(self, a: Value, axes: Optional[Union[int, Sequence[int]]] = None,
             keepdims: bool = False) -> Value:
        """Mean over |axes| (float)."""
        return self._reduce("mean", a, axes, keepdims)

    def max(self, a: Value, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> Value:
        """Max over |axes|."""
        return self._reduce("max", a, axes, keepdims)

    def min(self, a: Value, axes: Optional[Union[int, Sequence[int]]] = None,
            keepdims: bool = False) -> Value:
        """Min over |axes|."""
        return self._reduce("min", a, axes, keepdims)

    def prod(self, a: Value, axes: Optional[Union[int, Sequence[int]]] = None,
             keepdims: bool = False) -> Value:
        """Product over |axes|."""
        return self._reduce("prod", a, axes, keepdims)

    def argmax(self, a: Value, axis: int, keepdims: bool = False) -> Value:
        """i64 index of the first maximum along |axis|."""
        v = self._own(a, "argmax")
        return self._value(_lib.lib().tj_graph_argmax(
            self.handle, v._raw(), _int_in(axis, _INT32, "argmax axis"),
            bool(keepdims)), "argmax")

    def argmin(self, a: Value, axis: int, keepdims: bool = False) -> Value:
        """i64 index of the first minimum along |axis| (the first NaN wins,
        as numpy.argmin)."""
        v = self._own(a, "argmin")
        return self._value(_lib.lib().tj_graph_argmin(
            self.handle, v._raw(), _int_in(axis, _INT32, "argmin axis"),
            bool(keepdims)), "argmin")

    #===--- contraction ---===#

    def matmul(self, a: Operand, b: Operand) -> Value:
        """numpy.matmul semantics (batch dims broadcast)."""
        return self._binary("matmul", a, b)

    def matmul_i32(self, a: Operand, b: Operand) -> Value:
        """Integer matmul into i32: a, b each i8 or u8 (mixed allowed),
        numpy.matmul shapes; not differentiable."""
        return self._binary("matmul_i32", a, b)

    def matmul_f8(self, a: Operand, b: Operand) -> Value:
        """Float8 matmul into f32: a, b each f8e4m3 or f8e5m2 (mixed
        allowed), numpy.matmul shapes; not differentiable."""
        return self._binary("matmul_f8", a, b)

    #===--- data movement ---===#

    def reshape(self, a: Value, dims: Sequence[Dim]) -> Value:
        """Same elements, new shape; one dim may be -1 (inferred)."""
        v = self._own(a, "reshape")
        rank, arr = self._dims(dims, "reshape dims")
        return self._value(_lib.lib().tj_graph_reshape(
            self.handle, v._raw(), rank, arr), "reshape")

    def transpose(self, a: Value, perm: Optional[Sequence[int]] = None
                  ) -> Value:
        """Output axis i is |a|'s axis perm[i]; None reverses the axes."""
        v = self._own(a, "transpose")
        rank = self._rank_of(v)
        if perm is None:
            perm = list(range(rank))[::-1]
        items = _sequence(perm, "transpose perm")
        if len(items) != rank:
            raise InvalidArgumentError(
                f"transpose: perm has {len(items)} entries for a value of "
                f"rank {rank}")
        return self._value(_lib.lib().tj_graph_transpose(
            self.handle, v._raw(), _i32_array(items, "transpose perm")),
            "transpose")

    def broadcast_to(self, a: Value, dims: Sequence[Dim]) -> Value:
        """numpy.broadcast_to(a, dims)."""
        v = self._own(a, "broadcast_to")
        rank, arr = self._dims(dims, "broadcast_to dims")
        return self._value(_lib.lib().tj_graph_broadcast_to(
            self.handle, v._raw(), rank, arr), "broadcast_to")

    def slice(self, a: Value, starts: Sequence[int],
              stops: Sequence[Optional[int]],
              steps: Optional[Sequence[int]] = None) -> Value:
        """a[start:stop:step] per axis, numpy clamping; a stop of None runs
        to the end; steps > 0."""
        v = self._own(a, "slice")
        stops = [2**63 - 1 if s is None else s
                 for s in _sequence(stops, "slice stops")]
        st = self._per_axis(v, starts, "slice starts")
        sp = self._per_axis(v, stops, "slice stops")
        stp = None if steps is None else self._per_axis(v, steps,
                                                        "slice steps")
        return self._value(_lib.lib().tj_graph_slice(
            self.handle, v._raw(), st, sp, stp), "slice")

    def concat(self, values: Sequence[Value], axis: int = 0) -> Value:
        """Joins |values| (equal dtype and rank) along |axis|."""
        items = [self._own(x, f"concat value {i}")
                 for i, x in enumerate(_sequence(values, "concat values"))]
        arr = (_lib.Value_t * max(len(items), 1))(*[x._raw() for x in items])
        return self._value(_lib.lib().tj_graph_concat(
            self.handle, len(items), arr, _int_in(axis, _INT32,
                                                  "concat axis")), "concat")

    def pad(self, a: Value, low: Sequence[int], high: Sequence[int],
            value: float = 0.0) -> Value:
        """Pads axis i with low[i] elements before and high[i] after."""
        v = self._own(a, "pad")
        lo = self._per_axis(v, low, "pad low")
        hi = self._per_axis(v, high, "pad high")
        if not isinstance(value, (int, float, bool, np.number)):
            raise ArgumentTypeError("pad: value must be a number")
        return self._value(_lib.lib().tj_graph_pad(
            self.handle, v._raw(), lo, hi, float(value)), "pad")

    def gather(self, a: Value, indices: Operand, axis: int = 0) -> Value:
        """numpy.take(a, indices, axis) (ONNX Gather); |indices| i32 or i64.

        A negative index counts from the end; one still out of range is
        clamped into [0, n - 1]. A native kernel that fuses with its
        consumers."""
        v = self._own(a, "gather")
        if isinstance(indices, Value):
            idx = self._own(indices, "gather indices")
        else:
            idx = self.constant(np.asarray(indices, dtype=np.int64))
        return self._value(_lib.lib().tj_graph_gather(
            self.handle, v._raw(), idx._raw(),
            _int_in(axis, _INT32, "gather axis")), "gather")

    def gather_elements(self, a: Value, indices: Operand,
                        axis: int = 0) -> Value:
        """numpy.take_along_axis(a, indices, axis) (ONNX GatherElements):
        the result has |indices|' shape (i32 or i64, a's rank).

        Indices are treated as gather's: a negative one counts from the
        end, one still out of range is clamped. A native kernel that fuses
        with its consumers."""
        v = self._own(a, "gather_elements")
        if isinstance(indices, Value):
            idx = self._own(indices, "gather_elements indices")
        else:
            idx = self.constant(np.asarray(indices, dtype=np.int64))
        return self._value(_lib.lib().tj_graph_gather_elements(
            self.handle, v._raw(), idx._raw(),
            _int_in(axis, _INT32, "gather_elements axis")), "gather_elements")

    def gather_nd(self, a: Value, indices: Operand,
                  batch_dims: int = 0) -> Value:
        """ONNX GatherND: the last dim k of |indices| (i32 or i64) indexes
        a's axes batch_dims .. batch_dims + k; the result has shape
        indices.shape[:-1] + a.shape[batch_dims + k:].

        Indices are treated as gather's (negative wraps, then clamped). A
        native kernel that fuses with its consumers."""
        v = self._own(a, "gather_nd")
        if isinstance(indices, Value):
            idx = self._own(indices, "gather_nd indices")
        else:
            idx = self.constant(np.asarray(indices, dtype=np.int64))
        return self._value(_lib.lib().tj_graph_gather_nd(
            self.handle, v._raw(), idx._raw(),
            _int_in(batch_dims, _INT32, "gather_nd batch_dims")), "gather_nd")

    def cumsum(self, a: Value, axis: int, exclusive: bool = False,
               reverse: bool = False) -> Value:
        """ONNX CumSum (numpy.cumsum when neither flag is set): running sums
        along |axis|; exclusive leaves each element out of its own sum,
        reverse runs from the end. Integers wrap. A native kernel (a walk
        along the axis per row, the rows in parallel)."""
        v = self._own(a, "cumsum")
        return self._value(_lib.lib().tj_graph_cumsum(
            self.handle, v._raw(), _int_in(axis, _INT32, "cumsum axis"),
            bool(exclusive), bool(reverse)), "cumsum")

    #===--- data-dependent shapes (C's tj_custom_op.h) ---===#

    def nonzero(self, x: Value) -> Value:
        """numpy.nonzero as one i64 [max(rank, 1), NZ] tensor (ONNX
        NonZero). NZ is set at run time (at most x's size): executables
        return such outputs in their actual shape."""
        v = self._own(x, "nonzero")
        return self._value(_lib.lib().tj_graph_nonzero(self.handle, v._raw()),
                           "nonzero")

    def compress(self, x: Value, condition: Value,
                 axis: Optional[int] = None) -> Value:
        """ONNX Compress: the slices of |x| along |axis| (None: of x
        flattened) where 1-D |condition| is non-zero."""
        v = self._own(x, "compress")
        c = self._own(condition, "compress condition")
        return self._value(_lib.lib().tj_graph_compress(
            self.handle, v._raw(), c._raw(), axis is not None,
            _int_in(0 if axis is None else axis, _INT32, "compress axis")),
            "compress")

    def unique(self, x: Value, axis: Optional[int] = None,
               sorted: bool = True) -> Tuple[Value, Value, Value, Value]:
        """ONNX Unique: (values, i64 first indices, i64 inverse, i64
        counts) of the distinct elements (axis None) or slices along
        |axis|, sorted or in order of first appearance."""
        v = self._own(x, "unique")
        raw = [_lib.Value_t(0) for _ in range(3)]
        values = self._value(_lib.lib().tj_graph_unique(
            self.handle, v._raw(), axis is not None,
            _int_in(0 if axis is None else axis, _INT32, "unique axis"),
            bool(sorted), ctypes.byref(raw[0]), ctypes.byref(raw[1]),
            ctypes.byref(raw[2])), "unique")
        return (values, self._value(raw[0], "unique"),
                self._value(raw[1], "unique"), self._value(raw[2], "unique"))

    def non_max_suppression(self, boxes: Value, scores: Value,
                            max_output_boxes_per_class: Optional[Value] = None,
                            iou_threshold: Optional[Value] = None,
                            score_threshold: Optional[Value] = None,
                            center_point_box: bool = False) -> Value:
        """ONNX NonMaxSuppression: i64 [K, 3] rows (batch, class, box) of
        the boxes kept. The three scalars are one-element tensors read at
        run time (None: ONNX's defaults)."""
        def opt(x: Optional[Value], what: str) -> _lib.Value_t:
            return self._own(x, what)._raw() if x is not None \
                else _lib.Value_t(0)
        b = self._own(boxes, "non_max_suppression boxes")
        sc = self._own(scores, "non_max_suppression scores")
        return self._value(_lib.lib().tj_graph_non_max_suppression(
            self.handle, b._raw(), sc._raw(),
            opt(max_output_boxes_per_class, "max_output_boxes_per_class"),
            opt(iou_threshold, "iou_threshold"),
            opt(score_threshold, "score_threshold"), bool(center_point_box)),
            "non_max_suppression")

    def range(self, start: Operand, limit: Operand, delta: Operand) -> Value:
        """numpy.arange(start, limit, delta) of scalars known at run time
        (ONNX Range), computed from inputs and constants by casts, reshapes
        and scalar arithmetic; its length is set when a run binds them."""
        like = next((x for x in (start, limit, delta)
                     if isinstance(x, Value)), None)
        a = self._operand(start, like, "range start")
        b = self._operand(limit, a, "range limit")
        c = self._operand(delta, a, "range delta")
        return self._value(_lib.lib().tj_graph_range(
            self.handle, a._raw(), b._raw(), c._raw()), "range")

    def range_count(self, start: Operand, count: Operand,
                    delta: Operand) -> Value:
        """The running sum [max(count, 0)]: y[0] = start, y[i] = y[i - 1] +
        delta (ONNX's expanded Range), |count| an i64 or i32 scalar."""
        a = self._operand(start, None, "range_count start")
        n = self._operand(count, None, "range_count count")
        c = self._operand(delta, a, "range_count delta")
        return self._value(_lib.lib().tj_graph_range_count(
            self.handle, a._raw(), n._raw(), c._raw()), "range_count")

    def argtopk(self, a: Value, k: int, axis: int = -1,
                largest: bool = True) -> Value:
        """The i64 indices along |axis| of the |k| largest (or smallest)
        elements of each row, best first; ties keep the lower index first,
        NaN counts as the largest. k = -1 takes the whole axis (argsort);
        otherwise the axis must have a constant length >= k."""
        v = self._own(a, "argtopk")
        return self._value(_lib.lib().tj_graph_argtopk(
            self.handle, v._raw(), _int_in(k, _INT64, "argtopk k"),
            _int_in(axis, _INT32, "argtopk axis"), bool(largest)), "argtopk")

    def topk(self, a: Value, k: int, axis: int = -1,
             largest: bool = True) -> Tuple[Value, Value]:
        """ONNX TopK: (values, i64 indices) of the |k| largest (or smallest)
        elements along |axis|, sorted best first (argtopk's order). The
        values differentiate in |a|."""
        v = self._own(a, "topk")
        idx = _lib.Value_t(0)
        values = self._value(_lib.lib().tj_graph_topk(
            self.handle, v._raw(), _int_in(k, _INT64, "topk k"),
            _int_in(axis, _INT32, "topk axis"), bool(largest),
            ctypes.byref(idx)), "topk")
        return values, self._value(idx, "topk")

    def sort(self, a: Value, axis: int = -1,
             descending: bool = False) -> Tuple[Value, Value]:
        """A stable sort along |axis| (numpy.sort; NaN last, first when
        descending): (values, i64 indices)."""
        v = self._own(a, "sort")
        idx = _lib.Value_t(0)
        values = self._value(_lib.lib().tj_graph_sort(
            self.handle, v._raw(), _int_in(axis, _INT32, "sort axis"),
            bool(descending), ctypes.byref(idx)), "sort")
        return values, self._value(idx, "sort")

    def argsort(self, a: Value, axis: int = -1,
                descending: bool = False) -> Value:
        """numpy.argsort(a, axis, kind="stable") (descending: equal
        elements still in index order)."""
        v = self._own(a, "argsort")
        return self._value(_lib.lib().tj_graph_argsort(
            self.handle, v._raw(), _int_in(axis, _INT32, "argsort axis"),
            bool(descending)), "argsort")

    def einsum(self, equation: str, *operands: Value) -> Value:
        """numpy.einsum(equation, *operands) (ONNX Einsum) by decomposition
        into transposes, reshapes, diagonal slices, sums and batched
        matmuls; "..." broadcasts."""
        if not isinstance(equation, str):
            raise ArgumentTypeError("einsum: equation must be a str")
        items = [self._own(x, f"einsum operand {i}")
                 for i, x in enumerate(operands)]
        arr = (_lib.Value_t * max(len(items), 1))(*[x._raw() for x in items])
        return self._value(_lib.lib().tj_graph_einsum(
            self.handle, equation.encode(), arr, len(items)), "einsum")

    def cumprod(self, a: Value, axis: int, exclusive: bool = False,
                reverse: bool = False) -> Value:
        """ONNX CumProd (numpy.cumprod when neither flag is set): running
        products along |axis|, with cumsum's flags."""
        v = self._own(a, "cumprod")
        return self._value(_lib.lib().tj_graph_cumprod(
            self.handle, v._raw(), _int_in(axis, _INT32, "cumprod axis"),
            bool(exclusive), bool(reverse)), "cumprod")

    _SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")

    def _scatter_args(self, op: str, data: Value, indices: Operand,
                      updates: Operand, reduction: str):
        if reduction not in self._SCATTER_REDUCTIONS:
            raise ValueError(f"{op}: reduction must be one of "
                             f"{', '.join(self._SCATTER_REDUCTIONS)}, "
                             f"got {reduction!r}")
        d = self._own(data, op)
        if isinstance(indices, Value):
            idx = self._own(indices, f"{op} indices")
        else:
            idx = self.constant(np.asarray(indices, dtype=np.int64))
        if isinstance(updates, Value):
            upd = self._own(updates, f"{op} updates")
        else:
            upd = self.constant(updates, d.dtype)
        return d, idx, upd, self._SCATTER_REDUCTIONS.index(reduction)

    def scatter_elements(self, data: Value, indices: Operand,
                         updates: Operand, axis: int = 0,
                         reduction: str = "none") -> Value:
        """ONNX ScatterElements: a copy of |data| in which, for every
        position i of |indices| (i32 or i64, data's rank) in row-major order,
        the element at i with its |axis| coordinate replaced by indices[i]
        becomes updates[i] (|reduction| "none"), or is combined with it
        ("add", "mul", "max", "min"). With "none" the last of duplicate
        indices wins. Indices are treated as gather's (negative wraps, then
        clamped). Native kernels: a copy, then a walk over the updates in
        order per row."""
        d, idx, upd, r = self._scatter_args("scatter_elements", data,
                                            indices, updates, reduction)
        return self._value(_lib.lib().tj_graph_scatter_elements(
            self.handle, d._raw(), idx._raw(), upd._raw(),
            _int_in(axis, _INT32, "scatter_elements axis"), r),
            "scatter_elements")

    def scatter_nd(self, data: Value, indices: Operand, updates: Operand,
                   reduction: str = "none") -> Value:
        """ONNX ScatterND (index_put, KV-cache writes): the last dim k of
        |indices| indexes data's first k axes; |updates| has shape
        indices.shape[:-1] + data.shape[k:]. Each slice is written, or
        combined by |reduction|, in row-major order of the index tuples
        (the last of duplicates wins with "none"). Indices are treated as
        gather's."""
        d, idx, upd, r = self._scatter_args("scatter_nd", data, indices,
                                            updates, reduction)
        return self._value(_lib.lib().tj_graph_scatter_nd(
            self.handle, d._raw(), idx._raw(), upd._raw(), r), "scatter_nd")

    def custom(self, name: str, inputs: Sequence[Value],
               ints: Sequence[int] = (), floats: Sequence[float] = ()) -> Value:
        """The custom op |name| ("op" or "op@version") registered in the
        graph's context (C: tj_context_register_op) over |inputs|, with its
        int and float attributes (at most 8 each)."""
        items = [self._own(x, f"custom input {i}")
                 for i, x in enumerate(_sequence(inputs, "custom inputs"))]
        arr = (_lib.Value_t * max(len(items), 1))(*[x._raw() for x in items])
        iv = (ctypes.c_int64 * max(len(ints), 1))(*[int(i) for i in ints])
        fv = (ctypes.c_double * max(len(floats), 1))(
            *[float(f) for f in floats])
        attrs = _lib.CustomAttrs_t(len(ints), iv, len(floats), fv)
        return self._value(_lib.lib().tj_graph_custom(
            self.handle, str(name).encode(), arr, len(items),
            ctypes.byref(attrs)), "custom")

    #===--- composites ---===#

    def gelu(self, x: Value, approximate: bool = False) -> Value:
        """x * Phi(x); the tanh form when |approximate|."""
        v = self._own(x, "gelu")
        return self._value(_lib.lib().tj_graph_gelu(
            self.handle, v._raw(), bool(approximate)), "gelu")

    def silu(self, x: Value) -> Value:
        """x * sigmoid(x)."""
        return self._unary("silu", x)

    def softmax(self, x: Value, axis: int = -1) -> Value:
        v = self._own(x, "softmax")
        return self._value(_lib.lib().tj_graph_softmax(
            self.handle, v._raw(), _int_in(axis, _INT32, "softmax axis")),
            "softmax")

    def log_softmax(self, x: Value, axis: int = -1) -> Value:
        v = self._own(x, "log_softmax")
        return self._value(_lib.lib().tj_graph_log_softmax(
            self.handle, v._raw(), _int_in(axis, _INT32, "log_softmax axis")),
            "log_softmax")

    def layer_norm(self, x: Value, gamma: Optional[Value] = None,
                   beta: Optional[Value] = None, eps: float = 1e-5) -> Value:
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
        v = self._own(x, "layer_norm")
        g = self._own(gamma, "layer_norm gamma")._raw() if gamma is not None \
            else _lib.Value_t(0)
        b = self._own(beta, "layer_norm beta")._raw() if beta is not None \
            else _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_layer_norm(
            self.handle, v._raw(), g, b, float(eps)), "layer_norm")

    def rms_norm(self, x: Value, gamma: Optional[Value] = None,
                 eps: float = 1e-6) -> Value:
        """x / sqrt(mean(x^2) + eps) * gamma over the last axis."""
        v = self._own(x, "rms_norm")
        g = self._own(gamma, "rms_norm gamma")._raw() if gamma is not None \
            else _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_rms_norm(
            self.handle, v._raw(), g, float(eps)), "rms_norm")

    def linear(self, x: Value, w: Operand, b: Optional[Operand] = None
               ) -> Value:
        """x @ w + b (|b| optional)."""
        v = self._own(x, "linear x")
        vw = self._operand(w, None, "linear w")
        vb = self._operand(b, v, "linear b")._raw() if b is not None else \
            _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_linear(
            self.handle, v._raw(), vw._raw(), vb), "linear")

    def matmul_integer(self, a: Value, b: Operand,
                       a_zero_point: Optional[Operand] = None,
                       b_zero_point: Optional[Operand] = None) -> Value:
        """ONNX MatMulInteger: sum_k (a - a_zero_point) * (b - b_zero_point)
        in i32; a, b i8 or u8; each zero point optional (0), of its
        operand's dtype: a scalar, a_zero_point [.., M, 1] per row,
        b_zero_point [.., 1, N] or [N] per column."""
        va = self._own(a, "matmul_integer a")
        vb = self._operand(b, None, "matmul_integer b")
        za = self._operand(a_zero_point, va, "matmul_integer a_zero_point"
                           )._raw() if a_zero_point is not None else \
            _lib.Value_t(0)
        zb = self._operand(b_zero_point, vb, "matmul_integer b_zero_point"
                           )._raw() if b_zero_point is not None else \
            _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_matmul_integer(
            self.handle, va._raw(), vb._raw(), za, zb), "matmul_integer")

    def one_hot(self, indices: Value, values: Operand, depth: Any,
                axis: int = -1) -> Value:
        """ONNX OneHot: values[1] where the index (plus depth when
        negative) equals the position along |axis| (inserted, of length
        |depth|: an int or a symbol name), else values[0]."""
        ix = self._own(indices, "one_hot indices")
        vv = self._operand(values, None, "one_hot values")
        d = self._dim(depth, "one_hot depth")
        return self._value(_lib.lib().tj_graph_one_hot(
            self.handle, ix._raw(), vv._raw(), d,
            _int_in(axis, _INT32, "one_hot axis")), "one_hot")

    def attention(self, q: Value, k: Operand, v: Operand,
                  mask: Optional[Operand] = None, scale: float = 0.0,
                  causal: bool = False) -> Value:
        """Scaled dot-product attention (tj_graph_attention): q [B..., H,
        Tq, D], k [B..., Hkv, Tk, D], v [B..., Hkv, Tk, Dv]; |mask| bool
        (true attends) or additive; scale 0 means 1/sqrt(D); |causal| is
        top-left aligned (torch's is_causal)."""
        vq = self._own(q, "attention q")
        vk = self._operand(k, vq, "attention k")
        vv = self._operand(v, vq, "attention v")
        vm = self._operand(mask, vq, "attention mask")._raw() \
            if mask is not None else _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_attention(
            self.handle, vq._raw(), vk._raw(), vv._raw(), vm, float(scale),
            bool(causal)), "attention")

    def attention_lse(self, q: Value, k: Operand,
                      mask: Optional[Operand] = None, scale: float = 0.0,
                      causal: bool = False) -> Value:
        """The row log-sum-exp of attention's scores (tj_graph_attention_lse):
        [B..., H, Tq], f32 for f16/bf16 q; -inf on a row with no key."""
        vq = self._own(q, "attention_lse q")
        vk = self._operand(k, vq, "attention_lse k")
        vm = self._operand(mask, vq, "attention_lse mask")._raw() \
            if mask is not None else _lib.Value_t(0)
        return self._value(_lib.lib().tj_graph_attention_lse(
            self.handle, vq._raw(), vk._raw(), vm, float(scale),
            bool(causal)), "attention_lse")

    def _attention_grad(self, name: str, q: Value, k: Operand, v: Operand,
                        mask: Optional[Operand], g: Operand, lse: Operand,
                        delta: Operand, scale: float, causal: bool) -> Value:
        vq = self._own(q, name + " q")
        raw = [self._operand(x, vq, f"{name} {what}")._raw()
               for x, what in ((k, "k"), (v, "v"))]
        vm = self._operand(mask, vq, name + " mask")._raw() \
            if mask is not None else _lib.Value_t(0)
        rest = [self._operand(x, vq, f"{name} {what}")._raw()
                for x, what in ((g, "g"), (lse, "lse"), (delta, "delta"))]
        fn = getattr(_lib.lib(), "tj_graph_" + name)
        return self._value(fn(self.handle, vq._raw(), *raw, vm, *rest,
                              float(scale), bool(causal)), name)

    def attention_dq(self, q: Value, k: Operand, v: Operand,
                     mask: Optional[Operand], g: Operand, lse: Operand,
                     delta: Operand, scale: float = 0.0,
                     causal: bool = False) -> Value:
        """dq of attention (tj_graph_attention_dq) from g = dL/dy, lse
        (attention_lse) and delta = rowsum(g * y): [B..., H, Tq, D]."""
        return self._attention_grad("attention_dq", q, k, v, mask, g, lse,
                                    delta, scale, causal)

    def attention_dkv(self, q: Value, k: Operand, v: Operand,
                      mask: Optional[Operand], g: Operand, lse: Operand,
                      delta: Operand, scale: float = 0.0,
                      causal: bool = False) -> Value:
        """[dk | dv] of attention (tj_graph_attention_dkv), summed over each
        group of query heads: [B..., Hkv, Tk, D + Dv]."""
        return self._attention_grad("attention_dkv", q, k, v, mask, g, lse,
                                    delta, scale, causal)

    #===--- quantization (issue 17, quant2) ---===#

    @staticmethod
    def _quant_attrs(dtype: Optional[DTypeLike], axis: int, block_size: int,
                     saturate: bool, int4: Optional[str],
                     odd: bool) -> "_lib.QuantAttrs_t":
        kinds = {None: 0, "int4": 1, "uint4": 2}
        if int4 not in kinds:
            raise InvalidArgumentError(
                f"int4 must be None, 'int4' or 'uint4', got {int4!r}")
        a = _lib.QuantAttrs_t()
        a.dtype = int(dtype_of(dtype)) if dtype is not None else 0
        a.axis = _int_in(axis, _INT32, "quantize axis")
        a.block_size = int(block_size)
        a.no_saturate = not saturate
        a.int4 = kinds[int4]
        a.odd = bool(odd)
        return a

    def quantize(self, x: Value, scale: Operand,
                 zero_point: Optional[Operand] = None, dtype: DTypeLike = "i8",
                 axis: int = 1, block_size: int = 0, saturate: bool = True,
                 int4: Optional[str] = None) -> Value:
        """ONNX QuantizeLinear (tj_graph_quantize): saturate(round_half_even(
        x / scale) + zero_point) as |dtype| (i8, u8, f8e4m3, f8e5m2); the
        scale's shape picks per tensor (scalar), per axis (1-D) or blocked
        (x's rank, |block_size| along |axis|). |int4| 'int4' or 'uint4'
        packs two values a byte into u8, low nibble first."""
        v = self._own(x, "quantize x")
        vs = self._operand(scale, v, "quantize scale")
        vz = self._operand(zero_point, None, "quantize zero_point")._raw() \
            if zero_point is not None else _lib.Value_t(0)
        a = self._quant_attrs("u8" if int4 else dtype, axis, block_size,
                              saturate, int4, False)
        return self._value(_lib.lib().tj_graph_quantize(
            self.handle, v._raw(), vs._raw(), vz, ctypes.byref(a)),
            "quantize")

    def dequantize(self, q: Value, scale: Operand,
                   zero_point: Optional[Operand] = None, axis: int = 1,
                   block_size: int = 0, int4: Optional[str] = None,
                   odd: bool = False) -> Value:
        """ONNX DequantizeLinear (tj_graph_dequantize): (q - zero_point) *
        scale, of the scale's dtype. Packed int4 (|int4|) unpacks to twice
        q's last dim, less one when |odd|."""
        v = self._own(q, "dequantize q")
        vs = self._operand(scale, None, "dequantize scale")
        vz = self._operand(zero_point, v, "dequantize zero_point")._raw() \
            if zero_point is not None else _lib.Value_t(0)
        a = self._quant_attrs(None, axis, block_size, True, int4, odd)
        return self._value(_lib.lib().tj_graph_dequantize(
            self.handle, v._raw(), vs._raw(), vz, ctypes.byref(a)),
            "dequantize")

    #===--- convolution and pooling (convpool) ---===#

    @staticmethod
    def _conv_attrs(n: int, kernel=None, strides=None, dilations=None,
                    pads=None, output_padding=None, groups: int = 1,
                    ceil_mode: bool = False, count_include_pad: bool = False,
                    p: float = 0.0, channels_last: bool = False):
        """tj_conv_attrs_t; |pads| is begin + end per spatial axis (ONNX)."""
        a = _lib.ConvAttrs_t()
        for name, vals in (("kernel", kernel), ("strides", strides),
                           ("dilations", dilations),
                           ("output_padding", output_padding)):
            for i, v in enumerate(vals or []):
                getattr(a, name)[i] = int(v)
        if pads:
            for i in range(n):
                a.pads_begin[i] = int(pads[i])
                a.pads_end[i] = int(pads[n + i])
        a.groups = int(groups)
        a.ceil_mode = bool(ceil_mode)
        a.count_include_pad = bool(count_include_pad)
        a.p = float(p)
        a.channels_last = bool(channels_last)
        return a

    def conv(self, x: Value, w: Operand, b: Optional[Operand] = None,
             **attrs) -> Value:
        """Cross-correlation, x [N, C, S...], w [O, C/groups, K...], b [O]
        (tj_graph_conv); attrs: strides, dilations, pads (begin + end),
        groups, channels_last."""
        v = self._own(x, "conv x")
        vw = self._operand(w, v, "conv w")
        vb = self._operand(b, v, "conv b")._raw() if b is not None else \
            _lib.Value_t(0)
        a = self._conv_attrs(len(x.shape) - 2, **attrs)
        return self._value(_lib.lib().tj_graph_conv(
            self.handle, v._raw(), vw._raw(), vb, ctypes.byref(a)), "conv")

    def conv_transpose(self, x: Value, w: Operand,
                       b: Optional[Operand] = None, **attrs) -> Value:
        """The transpose of conv, w [C, O/groups, K...]
        (tj_graph_conv_transpose); attrs as conv plus output_padding."""
        v = self._own(x, "conv_transpose x")
        vw = self._operand(w, v, "conv_transpose w")
        vb = self._operand(b, v, "conv_transpose b")._raw() \
            if b is not None else _lib.Value_t(0)
        a = self._conv_attrs(len(x.shape) - 2, **attrs)
        return self._value(_lib.lib().tj_graph_conv_transpose(
            self.handle, v._raw(), vw._raw(), vb, ctypes.byref(a)),
            "conv_transpose")

    def _pool(self, fn: str, x: Value, kernel, **attrs) -> Value:
        v = self._own(x, fn)
        a = self._conv_attrs(len(x.shape) - 2, kernel=kernel, **attrs)
        return self._value(getattr(_lib.lib(), "tj_graph_" + fn)(
            self.handle, v._raw(), ctypes.byref(a)), fn)

    def max_pool(self, x: Value, kernel, **attrs) -> Value:
        """Window max of a float or integer x (tj_graph_max_pool; pads hold
        the dtype's lowest value); attrs: strides, dilations, pads,
        ceil_mode, channels_last."""
        return self._pool("max_pool", x, kernel, **attrs)

    def avg_pool(self, x: Value, kernel, **attrs) -> Value:
        """Window mean (tj_graph_avg_pool); attrs as max_pool plus
        count_include_pad."""
        return self._pool("avg_pool", x, kernel, **attrs)

    def lp_pool(self, x: Value, kernel, p: float = 2.0, **attrs) -> Value:
        """(sum |x|^p)^(1/p) over the window (tj_graph_lp_pool)."""
        return self._pool("lp_pool", x, kernel, p=p, **attrs)

    #===--- reading ---===#

    @property
    def num_inputs(self) -> int:
        return int(_lib.lib().tj_graph_num_inputs(self.handle))

    @property
    def num_outputs(self) -> int:
        return int(_lib.lib().tj_graph_num_outputs(self.handle))

    @property
    def inputs(self) -> List[Tuple[str, Value]]:
        """(name, value) of every input, in declaration order."""
        L = _lib.lib()
        return [(L.tj_graph_input_name(self.handle, i).decode(),
                 Value(self, int(L.tj_graph_input_value(self.handle, i).id)))
                for i in range(self.num_inputs)]

    @property
    def outputs(self) -> List[Tuple[str, Value]]:
        """(name, value) of every output, in declaration order."""
        L = _lib.lib()
        return [(L.tj_graph_output_name(self.handle, i).decode(),
                 Value(self, int(L.tj_graph_output_value(self.handle, i).id)))
                for i in range(self.num_outputs)]

    def value_dtype(self, v: Value) -> DType:
        v = self._own(v, "value_dtype")
        if self._rank_of(v) < 0:
            raise InvalidArgumentError(f"%{v.id} is not a value of "
                                       f"@{self.name}")
        return DType(int(_lib.lib().tj_graph_value_dtype(self.handle,
                                                         v._raw())))

    def value_shape(self, v: Value) -> Tuple[Dim, ...]:
        v = self._own(v, "value_shape")
        rank = self._rank_of(v)
        if rank < 0:
            raise InvalidArgumentError(f"%{v.id} is not a value of "
                                       f"@{self.name}")
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        _lib.lib().tj_graph_value_dims(self.handle, v._raw(), dims)
        return tuple(self.dim_name(int(d)) for d in dims[:rank])

    def text(self) -> str:
        """The graph in the ``.tj`` text form."""
        out = ctypes.c_void_p()
        _lib.check(_lib.lib().tj_graph_print(self.handle, ctypes.byref(out)))
        try:
            return ctypes.string_at(out.value).decode("utf-8")
        finally:
            _lib.lib().tj_context_free_string(self.context.handle, out)

    def __str__(self) -> str:
        try:
            return self.text()
        except TensorJitError as e:
            return f"<Graph @{self.name}: {e}>"

    def __repr__(self) -> str:
        state = "closed" if self.closed else (
            f"{self.num_inputs} inputs, {self.num_outputs} outputs")
        return f"<tensorjit.Graph @{self.name}: {state}>"

    #===--- running and measuring ---===#

    def scoreboard(self, symbols: Optional[Mapping[str, int]] = None,
                   **kw: int) -> Scoreboard:
        """Kernels, bytes and peak memory after every stage of the default
        pipeline, for these symbol values (``g.scoreboard(B=7)``). Finalizes
        the graph."""
        values = dict(symbols or {})
        values.update(kw)
        self.finalize()
        names = list(values)
        raw_names = (ctypes.c_char_p * max(len(names), 1))(
            *[_check_name(n, "symbol name") for n in names])
        vals = _i64_array([values[n] for n in names], "symbol value")
        out = _lib.Scoreboard_t()
        _lib.check(_lib.lib().tj_graph_scoreboard(
            self.handle, len(names), raw_names, vals, ctypes.byref(out)))
        rows = tuple(
            ScoreboardRow(STAGES[i], r.nodes, r.kernels, r.bytes_read,
                          r.bytes_written, r.peak_bytes, r.graph_breaks,
                          r.percent_compiled, r.weight_bytes_read)
            for i, r in enumerate(out.rows))
        return Scoreboard(rows, out.activation_bytes, out.input_bytes,
                          out.arena_bytes, out.live_peak_bytes)

    #===--- gradients (tj_autodiff.h) ---===#

    def _adopt_handle(self, handle: int, name: str) -> "Graph":
        """A Graph over |handle| (new, finalized, from this graph), with
        this graph's context, borrowed constants and symbol names. On
        failure the caller still owns |handle|."""
        g = Graph.__new__(Graph)
        g._handle = None
        g.context = self.context
        g._borrowed = list(self._borrowed)
        g._dim_names = {}
        g._symbols = {}
        g.name = name
        L = _lib.lib()
        for word in self._symbols:
            d = int(L.tj_graph_symbol(handle, word.encode()))
            if d != _lib.DIM_INVALID:
                g._symbols[word] = d
                g._dim_names.setdefault(d, word)
        self.context._adopt(g)
        g._handle = handle  # from here on g owns it
        return g

    def _indices(self, which: Any, names: List[str], what: str) -> Any:
        if which is None:
            return 0, None
        items = _sequence(which, what)
        out = []
        for item in items:
            if isinstance(item, str):
                if item not in names:
                    raise InvalidArgumentError(
                        f"{what}: @{self.name} has no {what.split()[-1]} "
                        f"named {item!r} ({', '.join(names)})")
                out.append(names.index(item))
            else:
                out.append(as_index(item, what))
        return len(out), (ctypes.c_int32 * max(len(out), 1))(*out)

    def grad(self, outputs: Optional[Sequence[Union[int, str]]] = None,
             wrt: Optional[Sequence[Union[int, str]]] = None) -> "Graph":
        """The joint forward + backward graph (``tj_graph_grad``), new and
        finalized; this graph is finalized first.

        |outputs|: the outputs y to differentiate, by index or name (None:
        every float output); |wrt|: the inputs x (None: every float input).
        The joint graph takes this graph's inputs, then one tangent
        ``grad_<y>`` per y (the incoming gradient; feed ones for a scalar
        loss), and returns this graph's outputs, then ``grad_<x>`` per x.
        Symbolic dims carry through.

        Raises InvalidArgumentError (the library's message) for a
        non-float or repeated selection or a ``grad_`` name collision."""
        self.finalize()
        n_out, out_idx = self._indices(
            outputs, [n for n, _ in self.outputs], "grad outputs")
        n_wrt, wrt_idx = self._indices(
            wrt, [n for n, _ in self.inputs], "grad wrt input")
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().tj_graph_grad(self.handle, n_out, out_idx,
                                            n_wrt, wrt_idx,
                                            ctypes.byref(handle)))
        try:
            return self._adopt_handle(handle.value, self.name + "_joint")
        except BaseException:
            _lib.lib().tj_graph_destroy(handle.value)
            raise

    def partition(self, num_primal_inputs: int, num_forward_outputs: int,
                  recompute: str = "pointwise",
                  symbols: Optional[Mapping[str, int]] = None,
                  save_attention_lse: bool = False
                  ) -> Tuple["Graph", "Graph", "PartitionStats"]:
        """Splits this joint graph (e.g. from :meth:`grad`) into a forward
        and a backward graph (``tj_graph_partition``): returns (forward,
        backward, :class:`PartitionStats`).

        Its first |num_primal_inputs| inputs are the forward's, the rest
        tangents; its first |num_forward_outputs| outputs the forward's,
        the rest gradients. The forward returns its outputs, then the saved
        values ``saved_<k>``; the backward takes the saved values (named
        after the forward input or output that gives them), then the
        tangents, and returns the gradients. |recompute|: ``"none"``,
        ``"pointwise"`` (the default), ``"reductions"`` or ``"all"``: what
        the backward may compute again instead of having it saved.
        |symbols|: sizes that weigh symbolic tensors (others count as
        1024). |save_attention_lse|: the forward computes and saves the
        VJP's attention_lse of each attention's own scores, which CUDA's
        f16/bf16 attention kernel writes beside y for free; elsewhere the
        backward recomputing it is cheaper. Compare the halves with
        :meth:`scoreboard`."""
        modes = {"none": 0, "pointwise": 1, "reductions": 2, "all": 3}
        if not isinstance(recompute, str) or recompute not in modes:
            raise InvalidArgumentError(
                f"partition: unknown recompute {recompute!r}; expected "
                f"{', '.join(modes)}")
        self.finalize()
        L = _lib.lib()
        opts = _lib.PartitionOptions_t()
        L.tj_partition_options_initialize(ctypes.byref(opts))
        opts.recompute = modes[recompute]
        opts.save_attention_lse = bool(save_attention_lse)
        names = list((symbols or {}).keys())
        raw_names = (ctypes.c_char_p * max(len(names), 1))(
            *[_check_name(n, "symbol name") for n in names])
        vals = _i64_array([(symbols or {})[n] for n in names],
                          "symbol value")
        opts.num_symbols = len(names)
        opts.symbol_names = ctypes.cast(raw_names,
                                        ctypes.POINTER(ctypes.c_char_p))
        opts.symbol_values = ctypes.cast(vals,
                                         ctypes.POINTER(ctypes.c_int64))
        fwd, bwd = ctypes.c_void_p(), ctypes.c_void_p()
        stats = _lib.PartitionStats_t()
        _lib.check(L.tj_graph_partition(
            self.handle, as_index(num_primal_inputs, "num_primal_inputs"),
            as_index(num_forward_outputs, "num_forward_outputs"),
            ctypes.byref(opts), ctypes.byref(fwd), ctypes.byref(bwd),
            ctypes.byref(stats)))
        try:
            forward = self._adopt_handle(fwd.value, self.name + "_forward")
        except BaseException:
            L.tj_graph_destroy(fwd.value)
            L.tj_graph_destroy(bwd.value)
            raise
        try:
            backward = self._adopt_handle(bwd.value, self.name + "_backward")
        except BaseException:
            L.tj_graph_destroy(bwd.value)
            forward.close()
            raise
        return forward, backward, PartitionStats(
            stats.saved_bytes, stats.num_saved, stats.saved_output_bytes,
            stats.saved_input_bytes, stats.num_saved_inputs,
            stats.num_recomputed)

    def run_reference(self, *inputs: Any, **named: Any) -> Any:
        """Runs the graph on the reference interpreter (the oracle):
        numpy arrays or DLPack tensors in, numpy arrays out. Finalizes the
        graph. One output: the array; several: a tuple."""
        from .executable import _GraphRunner
        self.finalize()
        return _GraphRunner(self).call(inputs, named, None)
