"""Compiling graphs and running them: :func:`compile` and
:class:`Executable`.

An executable is called with numpy arrays or DLPack tensors, positionally
in input order or by input name, and returns numpy arrays (torch tensors,
on the inputs' device, when the inputs are torch tensors)::

    exe = tensorjit.compile(g)                 # x86 JIT by default
    y = exe(x, w, b)                           # one output: the array
    y = exe(x=x, w=w, b=b)                     # by name
    exe(x, w, b, out=y)                        # into caller memory

Outputs are allocated by the binding with the shapes the library computes
for these inputs (``tj_executable_output_shape``), so one executable serves
every value of a symbolic dim; a call of the previous call's signature
reuses those shapes and its marshalled tensors (``_fast.py``).
numpy arrays support DLPack themselves: ``torch.from_dlpack(y)`` shares
their memory.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _fast, _lib
from ._tensors import Marshal, overlaps
from .dtypes import DType, numpy_dtype
from .errors import (ArgumentTypeError, InvalidArgumentError,
                     UnsupportedError)
from .graph import Context, Graph

__all__ = ["compile", "Executable", "ExecutableStats", "Profile",
           "ProfileEntry", "TARGETS", "VerifyReport", "VerifyValue",
           "LadderReport", "LadderRung", "ladder", "DiagnoseAnswer",
           "DiagnoseReport", "diagnose", "verify"]

TARGETS = {"x86": 0, "cpu": 0, "reference": 1, "cuda": 2}
_SPECIALIZE = {"never": 0, "after_n": 1, "always": 2}
_AUTOTUNE = {"default": 0, "on": 1, "off": 2, "background": 3}


@dataclass(frozen=True)
class ExecutableStats:
    """What compiling and running has cost so far
    (``tj_executable_stats_t``)."""

    num_kernels: int
    num_graph_breaks: int
    compile_ms: float
    cache_hits: int
    cache_misses: int
    recompiles: int
    runs: int
    passes_ms: float = 0.0
    lowering_ms: float = 0.0
    llvm_ms: float = 0.0
    ptxas_ms: float = 0.0
    tuning_ms: float = 0.0
    cache_load_ms: float = 0.0
    run_ms: float = 0.0
    # CUDA (0 elsewhere): the device's caching allocator, shared by every
    # CUDA executable: reserved (in use + cached), allocated (in use), their
    # peaks, and this executable's own arena.
    device_reserved_bytes: int = 0
    device_allocated_bytes: int = 0
    device_peak_reserved_bytes: int = 0
    device_peak_allocated_bytes: int = 0
    device_arena_bytes: int = 0
    # Region compile: fusion groups lowered (the distinct ones) and groups
    # that copied an equal group's kernels (a repeated block).
    num_lowered_groups: int = 0
    num_copied_groups: int = 0
    # Region templates: the equal blocks the graph was made of (0: none)
    # and how many of them the passes before fusion ran over.
    num_region_blocks: int = 0
    num_region_blocks_processed: int = 0
    # argtopk's native host kernel between the compiled regions (an
    # argtopk no kernel template takes): not graph breaks.
    num_host_kernels: int = 0


@dataclass(frozen=True)
class ProfileEntry:
    """One line of a :class:`Profile` (``tj_profile_entry_t``), per run:
    a kernel (named as the dumps and ``TJ_LOG=fusion`` name it), a graph
    break (``host.g<group>``), the copies or the set-up."""

    kind: str  # "kernel", "host", "copy" or "setup"
    name: str
    detail: str
    ms: float
    share: float
    launches: float
    bytes: float
    flops: float
    gbytes_per_s: float
    gflops_per_s: float


@dataclass(frozen=True)
class Profile:
    """Where a run's time goes (``tj_executable_profile``): the entries,
    largest first, and the table ``TJ_LOG=profile`` prints (``text``)."""

    graph: str
    target: str
    runs: int
    run_ms: float
    kernel_ms: float
    host_ms: float
    copy_ms: float
    setup_ms: float
    accounted_ms: float
    entries: List[ProfileEntry]
    text: str

    def __str__(self) -> str:
        return self.text


_PROFILE_KINDS = ("kernel", "host", "copy", "setup")


def _profile_of(r: Any) -> Profile:
    L = _lib.lib()
    size = L.tj_profile_report_format(r, 0, None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    L.tj_profile_report_format(r, 0, buf, size + 1)
    c = r.contents
    entries = [ProfileEntry(
        _PROFILE_KINDS[e.kind] if 0 <= e.kind < 4 else str(e.kind),
        e.name.decode(), e.detail.decode(), e.ms, e.share, e.launches,
        e.bytes, e.flops, e.gbytes_per_s, e.gflops_per_s)
        for e in c.entries[:c.num_entries]]
    return Profile(c.graph.decode(), (c.target or b"").decode(), c.runs,
                   c.run_ms, c.kernel_ms, c.host_ms, c.copy_ms, c.setup_ms,
                   c.accounted_ms, entries, buf.value.decode())


@dataclass(frozen=True)
class VerifyValue:
    """One value :meth:`Executable.verify` compared
    (``tj_verify_value_t``): a value crossing a fusion-group boundary, or
    an output against the caller's graph (``against_caller``)."""

    step: int
    group: int
    group_kind: str
    node: int
    op: str
    type: str
    output_name: str
    against_caller: bool
    numel: int
    mismatches: int
    nan_mismatches: int
    max_abs_error: float
    max_rel_error: float
    first_bad_index: int
    first_bad_got: float
    first_bad_want: float
    rtol: float
    atol: float
    # The first bad element's condition (the sum of the magnitudes of its
    # terms): its budget is atol + rtol * first_bad_condition.
    first_bad_condition: float


@dataclass(frozen=True)
class VerifyReport:
    """What :meth:`Executable.verify` found (``tj_verify_report_t``).
    ``verdict`` is "clean", "drift", "wrong fused kernel", "wrong kernel",
    "wrong passes" or "mismatch"; ``first_bad`` the first value out of
    budget in run order (its group and node), or None; ``blamed_pass`` the
    pass a "wrong passes" verdict blames ("" otherwise); ``text`` the report
    as ``tj-run --verify`` prints it."""

    verdict: str
    target: str
    boundaries: bool
    num_groups: int
    values: List[VerifyValue]
    first_bad: Optional[VerifyValue]
    total_mismatches: int
    max_abs_error: float
    max_rel_error: float
    unfused_ran: bool
    unfused_within_budget: bool
    blamed_pass: str
    text: str

    @property
    def ok(self) -> bool:
        """Clean, or drift (summation order): no bug found."""
        return self.verdict in ("clean", "drift")


_VERDICTS = ["clean", "drift", "wrong fused kernel", "wrong kernel",
             "wrong passes", "mismatch"]


class _Runner:
    """The calling convention shared by executables and reference runs."""

    input_names: List[str]
    input_dtypes: List[DType]
    output_names: List[str]
    output_dtypes: List[DType]
    label: str

    def _describe(self, graph: Graph) -> None:
        self.input_names, self.input_dtypes = [], []
        for name, v in graph.inputs:
            self.input_names.append(name)
            self.input_dtypes.append(v.dtype)
        self.output_names, self.output_dtypes = [], []
        for name, v in graph.outputs:
            self.output_names.append(name)
            self.output_dtypes.append(v.dtype)
        # Outputs whose dims an op sets at run time (nonzero, unique, a
        # custom op's dynamic_dim): allocated at their bounds, run with
        # the *_run_shaped call and returned in their actual shapes.
        is_dd = _lib.lib().tj_graph_output_is_data_dependent
        self.data_dependent = any(
            bool(is_dd(graph.handle, k)) for k in range(len(graph.outputs)))

    # Subclasses: the C calls.
    def _shape_fn(self) -> Tuple[Any, Any]:
        raise NotImplementedError

    def _run_fn(self) -> Tuple[Any, Any]:
        raise NotImplementedError

    def _run_shaped_fn(self) -> Tuple[Any, Any]:
        raise NotImplementedError

    def _bind(self, args: Sequence[Any], named: Mapping[str, Any]
              ) -> List[Any]:
        n = len(self.input_names)
        if len(args) > n:
            raise InvalidArgumentError(
                f"{self.label} takes {n} inputs "
                f"({', '.join(self.input_names)}), got {len(args)}")
        bound: List[Any] = list(args) + [None] * (n - len(args))
        given = [True] * len(args) + [False] * (n - len(args))
        for key, value in named.items():
            if key not in self.input_names:
                raise InvalidArgumentError(
                    f"{self.label} has no input named {key!r} (inputs: "
                    f"{', '.join(self.input_names)})")
            i = self.input_names.index(key)
            if given[i]:
                raise InvalidArgumentError(f"input {key!r} given twice")
            bound[i], given[i] = value, True
        missing = [self.input_names[i] for i in range(n) if not given[i]]
        if missing:
            raise InvalidArgumentError(
                f"{self.label}: missing inputs {', '.join(missing)}")
        return bound

    def output_shapes(self, *inputs: Any, **named: Any
                      ) -> List[Tuple[int, ...]]:
        """The concrete output shapes for these inputs."""
        bound = self._bind(inputs, named)
        with Marshal() as m:
            arr = (_lib.Tensor_t * max(len(bound), 1))()
            for i, x in enumerate(bound):
                m.tensor(x, f"input {self.input_names[i]!r}",
                         self.input_dtypes[i], t=arr[i])
            return [self._shape(arr, len(bound), k)
                    for k in range(len(self.output_names))]

    def _shape(self, arr: Any, n: int, k: int) -> Tuple[int, ...]:
        fn, handle = self._shape_fn()
        rank = ctypes.c_int32()
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        _lib.check(fn(handle, arr, n, k, ctypes.byref(rank), dims))
        return tuple(int(d) for d in dims[:rank.value])

    def _allocate(self, shape: Tuple[int, ...], dtype: DType, device: int,
                  device_id: int, torch_out: bool = False) -> Any:
        if device == _lib.DEVICE_CPU and not torch_out:
            return np.empty(shape, dtype=numpy_dtype(dtype))
        if _fast.torch_module() is None:
            try:
                import torch  # type: ignore  # noqa: F401
            except ImportError:
                raise UnsupportedError(
                    "outputs on a CUDA device need torch to allocate them, "
                    "or pass out= with device tensors") from None
        torch = _fast.torch_module()
        where = "cpu" if device == _lib.DEVICE_CPU else f"cuda:{device_id}"
        return torch.empty(shape, dtype=_fast.torch_dtype(dtype),
                           device=where)

    # The CUDA stream order for torch tensors (executables override).
    def _cuda_order(self, device_id: int) -> Optional[_fast.CudaOrder]:
        return None

    def call(self, args: Sequence[Any], named: Mapping[str, Any],
             out: Any, always_list: bool = False,
             invoke: Any = None) -> Any:
        bound = self._bind(args, named)
        n_out = len(self.output_names)
        outs: Optional[List[Any]] = None
        if out is not None:
            if n_out == 1 and not isinstance(out, (list, tuple)):
                outs = [out]
            elif isinstance(out, (list, tuple)):
                outs = list(out)
            else:
                raise ArgumentTypeError(
                    f"out must be a list of {n_out} arrays")
            if len(outs) != n_out:
                raise InvalidArgumentError(
                    f"{self.label} makes {n_out} outputs, out has {len(outs)}")
        n_in = len(bound)
        in_arr = (_lib.Tensor_t * max(n_in, 1))()
        out_arr = (_lib.Tensor_t * max(n_out, 1))()
        # Torch tensors in give torch tensors out.
        torch_out = any(_fast.is_torch_tensor(x) for x in bound)
        order, cur = None, None
        with Marshal() as m:
            device, device_id = _lib.DEVICE_CPU, 0
            for i, x in enumerate(bound):
                t, _, dev = m.tensor(x, f"input {self.input_names[i]!r}",
                                     self.input_dtypes[i], t=in_arr[i])
                if dev != _lib.DEVICE_CPU:
                    device, device_id = dev, int(t.device_id)
            if torch_out and device == _lib.DEVICE_CUDA:
                order = self._cuda_order(device_id)
            if outs is None:
                outs = [self._allocate(self._shape(in_arr, n_in, k),
                                       self.output_dtypes[k], device,
                                       device_id, torch_out)
                        for k in range(n_out)]
            result = outs
            for k, o in enumerate(outs):
                t, _, _ = m.tensor(o, f"output {self.output_names[k]!r}",
                                   self.output_dtypes[k], writable=True,
                                   t=out_arr[k])
                for i in range(n_in):
                    if overlaps(t, in_arr[i]):
                        raise InvalidArgumentError(
                            f"output {self.output_names[k]!r} overlaps input "
                            f"{self.input_names[i]!r} in memory")
                for j in range(k):
                    if overlaps(t, out_arr[j]):
                        raise InvalidArgumentError(
                            f"outputs {self.output_names[j]!r} and "
                            f"{self.output_names[k]!r} overlap in memory")
            if order is not None:
                cur = order.before()
            if invoke is not None:
                invoke(in_arr, n_in, out_arr, n_out)
            elif self.data_dependent:
                fn, handle = self._run_shaped_fn()
                shapes = (ctypes.c_int64 * (_lib.MAX_RANK * max(n_out, 1)))()
                _lib.check(fn(handle, in_arr, n_in, out_arr, n_out, shapes))
                result = [_actual(o, shapes, k) for k, o in enumerate(outs)]
            else:
                fn, handle = self._run_fn()
                _lib.check(fn(handle, in_arr, n_in, out_arr, n_out))
            if order is not None:
                order.after(cur)
            if invoke is None:
                self._learn(bound, in_arr, n_in)
        if always_list:
            return list(result)
        return result[0] if n_out == 1 else tuple(result)

    # After a successful general call: build the hot path's plan for this
    # signature (executables override).
    def _learn(self, bound: Sequence[Any], in_arr: Any, n_in: int) -> None:
        pass


def _actual(o: Any, shapes: Any, k: int) -> Any:
    """Output |o| (dense, allocated at its bounds) as a view of its leading
    elements in the actual shape that a *_run_shaped call wrote for output
    |k|."""
    rank = len(o.shape)
    actual = tuple(int(d) for d in shapes[k * _lib.MAX_RANK:
                                           k * _lib.MAX_RANK + rank])
    if actual == tuple(o.shape):
        return o
    n = math.prod(actual)
    if isinstance(o, np.ndarray):
        return o.reshape(-1)[:n].reshape(actual)
    return o.view(-1)[:n].view(actual)


class _GraphRunner(_Runner):
    """tj_reference_run on a finalized graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.label = f"graph @{graph.name}"
        self._describe(graph)

    def _shape_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_graph_output_shape, self.graph.handle

    def _run_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_reference_run, self.graph.handle

    def _run_shaped_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_reference_run_shaped, self.graph.handle


class Executable(_Runner):
    """A compiled graph (``tj_executable_t``), made by :func:`compile`.

    Call it with the inputs (positionally or by name); it returns the
    output array, or a tuple of them for several outputs. It does not
    reference the graph it came from, which may be closed. Safe to call
    from several threads at once. :meth:`close` releases it early.
    """

    def __init__(self, handle: int, graph: Graph, target: str,
                 stream: Optional[int] = None,
                 reuse_outputs: bool = False) -> None:
        self._handle: Optional[int] = handle
        # The hot path (see _fast.py): the plan of the last call signature.
        self._plan: Optional[_fast.Plan] = None
        self._call: Any = None  # _fast.specialize(self._plan)
        self._handle_arg = ctypes.c_void_p(handle)
        # tj_executable_run without ctypes argument conversion (the plan
        # converts its arguments once).
        self._raw_run = _lib.raw_function("tj_executable_run")
        self._stream = stream
        #: When true, a call without ``out=`` writes into the arrays the
        #: previous call of the same shapes returned (no allocation);
        #: arrays returned earlier are then overwritten by later calls.
        self.reuse_outputs = bool(reuse_outputs)
        self._recycle_outputs = True
        self.context: Context = graph.context
        self.target = target
        self.name = graph.name
        self.label = f"executable @{graph.name}"
        # Borrowed constants must outlive the executable.
        self._borrowed = list(graph._borrowed)
        # For verify (tj_verify needs the graph compiled).
        self._graph = graph
        self._describe(graph)
        self.context._adopt(self)

    @property
    def handle(self) -> int:
        """The raw ``tj_executable_t*``; raises if closed."""
        if not self._handle:
            raise InvalidArgumentError(f"{self.label} is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return not self._handle

    @property
    def recycle_outputs(self) -> bool:
        """Whether a call with torch tensors and no ``out=`` may write into
        the memory of an earlier call's outputs once nothing outside this
        executable refers to it any more (no tensor, view, storage or
        DLPack capsule over it; on CUDA, torch's current stream still the
        one it was allocated on), returning new tensors over it: what
        torch's caching allocator would do with that freed memory, without
        a torch.empty per output. True by default, for outputs of up to
        1 MiB together (the memory stays with the executable until its
        next call of that shape or its close). Set it False when an output
        goes to ``Tensor.record_stream`` and is dropped before that
        stream's work is done: the reference counts do not show it."""
        return self._recycle_outputs

    @recycle_outputs.setter
    def recycle_outputs(self, value: bool) -> None:
        self._recycle_outputs = bool(value)
        self._plan = self._call = None  # the next call plans again

    def close(self) -> None:
        """Drops this object's reference (tj_executable_release)."""
        self._plan = self._call = None
        if self._handle:
            _lib.lib().tj_executable_release(self._handle)
            self._handle = None

    def __enter__(self) -> "Executable":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d.short_name}" for n, d in
                        zip(self.input_names, self.input_dtypes))
        state = " (closed)" if self.closed else ""
        return (f"<tensorjit.Executable @{self.name} [{self.target}]"
                f"({ins}){state}>")

    def _shape_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_executable_output_shape, self.handle

    def _run_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_executable_run, self.handle

    def _run_shaped_fn(self) -> Tuple[Any, Any]:
        return _lib.lib().tj_executable_run_shaped, self.handle

    def __call__(self, *inputs: Any, out: Any = None, **named: Any) -> Any:
        """Runs on these inputs. |out|: an array (one output) or a list of
        arrays to write into instead of allocating; it is returned.

        Torch tensors in give torch tensors out, on the inputs' device;
        CUDA tensors run in order with torch's current stream (see
        :func:`compile`'s ``cuda_stream``). A positional call whose inputs
        have the dtypes, shapes and (dense) layout of the previous call
        takes the hot path: no output-shape query, no marshalling beyond
        storing the data pointers."""
        call = self._call
        if call is not None and not named:
            r = call(inputs, out, self.reuse_outputs)
            if r is not _fast.MISS:
                return r
        return self.call(inputs, named, out)

    def _learn(self, bound: Sequence[Any], in_arr: Any, n_in: int) -> None:
        def out_specs() -> List[Tuple[Tuple[int, ...], DType]]:
            return [(self._shape(in_arr, n_in, k), self.output_dtypes[k])
                    for k in range(len(self.output_names))]
        if self.data_dependent:
            return  # the hot path runs tj_executable_run: shapes are fixed
        if self._plan is not None and self._plan.lock.locked():
            return  # another thread's call is on it: keep it
        call = None
        try:
            plan = _fast.plan_for(bound, self.input_dtypes, out_specs,
                                  self._cuda_order, self._recycle_outputs)
            if plan is not None:
                call = _fast.specialize(plan, self._raw_run,
                                        self._handle_arg)
        except Exception:  # noqa: BLE001 - the general path still works
            plan = None
        if plan is not None and self._handle:
            self._plan, self._call = plan, call

    def _cuda_order(self, device_id: int) -> Optional[_fast.CudaOrder]:
        if self.target != "cuda":
            return None
        return _fast.CudaOrder(self._stream, device_id)

    def run(self, inputs: Union[Sequence[Any], Mapping[str, Any]],
            out: Optional[Sequence[Any]] = None) -> List[Any]:
        """Like calling it, with the inputs as a list or a name->array
        mapping; always returns a list of outputs."""
        if isinstance(inputs, Mapping):
            return self.call((), inputs, out, always_list=True)
        if isinstance(inputs, (str, bytes)) or not isinstance(
                inputs, Sequence):
            raise ArgumentTypeError("inputs must be a list or a mapping")
        return self.call(tuple(inputs), {}, out, always_list=True)

    def prepare(self, *inputs: Any, **named: Any) -> None:
        """Load-time warm-up (``tj_executable_prepare``): compiles now what
        a call with inputs of these shapes would compile on its first run
        (the deferred small-batch GEMM code; with ``specialize="always"``
        the shape's own kernels), so that no call of those shapes compiles
        anything. Only dtypes and shapes are read. With no inputs, prepares
        what every shape shares."""
        L = _lib.lib()
        if not inputs and not named:
            _lib.check(L.tj_executable_prepare(self.handle, None, 0))
            return
        bound = self._bind(inputs, named)
        with Marshal() as m:
            arr = (_lib.Tensor_t * max(len(bound), 1))()
            for i, x in enumerate(bound):
                m.tensor(x, f"input {self.input_names[i]!r}",
                         self.input_dtypes[i], t=arr[i])
            _lib.check(L.tj_executable_prepare(self.handle, arr, len(bound)))

    def profile(self, *inputs: Any, runs: int = 10, out: Any = None,
                **named: Any) -> Profile:
        """Runs once untimed, then |runs| times, timing each kernel, graph
        break, copy and the set-up (``tj_executable_profile``); returns
        the :class:`Profile`. Inputs and |out| as for a call."""
        L = _lib.lib()
        report = ctypes.POINTER(_lib.ProfileReport_t)()

        def invoke(in_arr: Any, n_in: int, out_arr: Any, n_out: int) -> None:
            _lib.check(L.tj_executable_profile(self.handle, in_arr, n_in,
                                               out_arr, n_out, int(runs),
                                               ctypes.byref(report)))

        self.call(inputs, named, out, invoke=invoke)
        try:
            return _profile_of(report)
        finally:
            L.tj_profile_report_destroy(report)

    def verify(self, *inputs: Any, symbols: Optional[Mapping[str, int]] = None,
               seed: int = 1, edge_values: bool = True,
               nonfinite: bool = False, unfused: bool = True,
               rtol: Optional[Mapping[str, float]] = None,
               atol: Optional[Mapping[str, float]] = None,
               graph: Optional[Graph] = None, **named: Any) -> VerifyReport:
        """Checks this executable against the reference interpreter at
        every fusion-group boundary (``tj_verify``) and returns the report.

        Inputs as for a call; with none, random ones are made for
        |symbols| (e.g. ``{"B": 8}``), |seed|, with edge values (+-0,
        denormals, large magnitudes) unless |edge_values| is false, and NaN
        and infinities when |nonfinite|. |rtol| and |atol| override the
        per-dtype budgets by dtype name (``{"f32": 1e-3}``). With |unfused|,
        a mismatch is checked against the unfused pipeline (drift or a
        wrong kernel). |graph|: the graph compiled (default: the one this
        executable was compiled from)."""
        L = _lib.lib()
        g = graph if graph is not None else self._graph
        opts = _lib.VerifyOptions_t()
        L.tj_verify_options_initialize(ctypes.byref(opts))
        names = list((symbols or {}).keys())
        c_names = (ctypes.c_char_p * max(len(names), 1))(
            *[n.encode() for n in names])
        c_values = (ctypes.c_int64 * max(len(names), 1))(
            *[int(symbols[n]) for n in names])  # type: ignore[index]
        opts.num_symbols = len(names)
        opts.symbol_names = ctypes.cast(c_names, ctypes.POINTER(ctypes.c_char_p))
        opts.symbol_values = ctypes.cast(c_values, ctypes.POINTER(ctypes.c_int64))
        opts.seed = seed
        opts.edge_values = edge_values
        opts.nonfinite = nonfinite
        opts.unfused = unfused
        by_name = {d.short_name: d for d in DType}
        for table, field in ((rtol, opts.rtol), (atol, opts.atol)):
            for name, value in (table or {}).items():
                if name not in by_name:
                    raise InvalidArgumentError(
                        f"verify: no dtype {name!r} (one of "
                        f"{', '.join(by_name)})")
                field[int(by_name[name])] = float(value)
        report = ctypes.POINTER(_lib.VerifyReport_t)()
        with Marshal() as m:
            if inputs or named:
                bound = self._bind(inputs, named)
                arr = (_lib.Tensor_t * max(len(bound), 1))()
                for i, x in enumerate(bound):
                    m.tensor(x, f"input {self.input_names[i]!r}",
                             self.input_dtypes[i], t=arr[i])
                _lib.check(L.tj_verify(self.handle, g.handle, arr,
                                       len(bound), ctypes.byref(opts),
                                       ctypes.byref(report)))
            else:
                _lib.check(L.tj_verify(self.handle, g.handle, None, 0,
                                       ctypes.byref(opts),
                                       ctypes.byref(report)))
        try:
            r = report.contents
            values = [_value(r.values[i]) for i in range(r.num_values)]
            return VerifyReport(
                _VERDICTS[r.verdict], r.target.decode(), r.boundaries,
                r.num_groups, values,
                values[r.first_bad] if r.first_bad >= 0 else None,
                r.total_mismatches, r.max_abs_error, r.max_rel_error,
                r.unfused_ran, r.unfused_within_budget,
                r.blamed_pass.decode(), (r.text or b"").decode())
        finally:
            L.tj_verify_report_destroy(report)

    @property
    def stats(self) -> ExecutableStats:
        """Kernels, graph breaks, compile time, cache and run counters."""
        s = _lib.ExecutableStats_t()
        s.struct_size = ctypes.sizeof(s)
        _lib.lib().tj_executable_stats(self.handle, ctypes.byref(s))
        return ExecutableStats(s.num_kernels, s.num_graph_breaks,
                               s.compile_ms, s.cache_hits, s.cache_misses,
                               s.recompiles, s.runs, s.passes_ms,
                               s.lowering_ms, s.llvm_ms, s.ptxas_ms,
                               s.tuning_ms, s.cache_load_ms, s.run_ms,
                               s.device_reserved_bytes,
                               s.device_allocated_bytes,
                               s.device_peak_reserved_bytes,
                               s.device_peak_allocated_bytes,
                               s.device_arena_bytes, s.num_lowered_groups,
                               s.num_copied_groups, s.num_region_blocks,
                               s.num_region_blocks_processed,
                               s.num_host_kernels)


def _value(v: Any) -> VerifyValue:
    return VerifyValue(
        v.step, v.group, v.group_kind.decode(), v.node, v.op.decode(),
        v.type.decode(), v.output_name.decode(), v.against_caller, v.numel,
        v.mismatches, v.nan_mismatches, v.max_abs_error, v.max_rel_error,
        v.first_bad_index, v.first_bad_got, v.first_bad_want, v.rtol, v.atol,
        v.first_bad_condition)


def compile(graph: Union[Graph, str], target: str = "x86", *,
            num_threads: int = 0, specialize: str = "never",
            specialize_after: int = 16, bucket_pow2: bool = False,
            cache_dir: Optional[str] = None, pipeline: Optional[str] = None,
            verify_each: bool = False, autotune: str = "default",
            autotune_budget_ms: int = 0, cuda_device: int = 0,
            cuda_stream: Any = None, cuda_graphs: bool = True,
            precise_math: bool = False, allow_tf32: bool = False,
            reuse_outputs: bool = False, unfused: bool = False,
            bisect: Optional[str] = None) -> Executable:
    """Compiles |graph| (finalizing it first) for |target|
    (``tj_compile`` with ``tj_compile_options_t``).

    Args:
        graph: a :class:`Graph`, or ``.tj`` text.
        target: ``"x86"`` (LLVM JIT, the default), ``"reference"`` (the
            interpreter, for checking) or ``"cuda"``.
        num_threads: worker threads for x86 kernels; 0 = one per CPU.
        specialize: ``"never"`` (one generic kernel set for every shape),
            ``"after_n"`` (after |specialize_after| runs of a shape) or
            ``"always"``.
        bucket_pow2: round symbolic sizes up to powers of two for
            specialized kernels.
        cache_dir: kernel cache directory; ``""`` disables the disk cache.
        pipeline: comma-separated pass list replacing the default.
        verify_each: verify the IR after every pass.
        autotune: GEMM autotuning, ``"default"`` (off on x86, on for
            CUDA), ``"on"``, ``"off"`` or ``"background"`` (``tj_autotune_t``;
            background: the first runs of a shape serve the generated kernel
            while the context's worker thread tunes, and later runs pick up
            the decision; :meth:`Context.wait_autotune` waits for it).
        autotune_budget_ms: x86: bound on the time one tuning decision
            spends timing candidates (0: the library's 200 ms).
        cuda_device: CUDA: the device ordinal.
        cuda_stream: CUDA: the stream runs are enqueued on. ``None``: torch's
            current stream on |cuda_device| at compile time when the program
            has imported torch and CUDA is available in it, else the
            library's own stream; ``"torch"``: torch's current stream (torch
            must be importable); ``"own"``: the library's own stream; an
            int (a CUstream) or an object with ``cuda_stream`` (a
            ``torch.cuda.Stream``), which must outlive the executable.
            Calls with torch CUDA tensors are ordered after torch's current
            stream at the time of the call and before its later work, also
            when that is another stream (see ``CudaOrder`` in _fast.py).
            On torch's default stream (the legacy stream, which refuses
            CUDA graph capture) the library captures the runs on a stream
            of its own and launches the graphs on the legacy stream. Import
            torch before compiling, or calls with torch CUDA tensors wait
            on the host for torch's stream before each run.
        cuda_graphs: CUDA: replay each shape's kernels as a captured CUDA
            graph (``cuda.disable_graphs`` is its negation).
        precise_math: CUDA: exp, tanh, sigmoid and erf with the x86
            target's precise polynomials instead of the GPU's approximate
            instructions.
        allow_tf32: CUDA: f32 matmuls may run on TF32 tensor cores (off by
            default, as ``torch.backends.cuda.matmul.allow_tf32``): about
            1e-3 of the sum of the terms' magnitudes instead of f32's 1e-6.
            On sm_90a the autotuner then also times TF32 kernels and keeps
            the fastest (``tj_cuda_compile_options_t.allow_tf32``).
        reuse_outputs: see :attr:`Executable.reuse_outputs`.
        unfused: the eager-like baseline: no fusion, every op its own
            kernel (``tj_compile_options_t.unfused``; what
            ``tj-run --diagnose`` measures compiling against).
        bisect: a rewrite budget for bisecting a wrong pass (TJ_BISECT's
            syntax): ``"N"`` (the first N rewrites of the rewriting passes)
            or ``"PASS:N"`` (the first N of that pass, e.g.
            ``"canonicalize:12"``); ``""``: none; ``None``: the context's
            ``TJ_BISECT``. A malformed one is InvalidArgumentError.

    Raises:
        TensorJitError: the library's status (e.g. UnsupportedError for a
        target this build cannot compile for); InvalidArgumentError or
        ArgumentTypeError for an option of the wrong value or type.
    """
    if isinstance(graph, str):
        graph = Graph.parse(graph)
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"compile: expected a Graph, got "
                                f"{type(graph).__name__}")
    if not isinstance(target, str) or target not in TARGETS:
        raise InvalidArgumentError(f"compile: unknown target {target!r}; "
                                   f"expected x86, reference or cuda")
    if not isinstance(specialize, str) or specialize not in _SPECIALIZE:
        raise InvalidArgumentError(
            f"compile: unknown specialize policy {specialize!r}; expected "
            f"never, after_n or always")
    if not isinstance(autotune, str) or autotune not in _AUTOTUNE:
        raise InvalidArgumentError(
            f"compile: unknown autotune {autotune!r}; expected default, on, "
            f"off or background")
    for name, value in (("num_threads", num_threads),
                        ("specialize_after", specialize_after),
                        ("autotune_budget_ms", autotune_budget_ms),
                        ("cuda_device", cuda_device)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ArgumentTypeError(f"compile: {name} must be an int")
        if not -(2**31) <= int(value) < 2**31:
            raise InvalidArgumentError(f"compile: {name} {value} is out of "
                                       f"range")
    keep: Dict[str, bytes] = {}
    for name, value in (("cache_dir", cache_dir), ("pipeline", pipeline),
                        ("bisect", bisect)):
        if value is not None:
            if not isinstance(value, str):
                raise ArgumentTypeError(f"compile: {name} must be a str")
            if "\0" in value:
                raise InvalidArgumentError(f"compile: {name} contains NUL")
            keep[name] = value.encode()
    graph.finalize()
    L = _lib.lib()
    opts = _lib.CompileOptions_t()
    L.tj_compile_options_initialize(ctypes.byref(opts))
    opts.target = TARGETS[target]
    opts.x86.num_threads = int(num_threads)
    opts.specialize = _SPECIALIZE[specialize]
    opts.specialize_after = int(specialize_after)
    opts.bucket_pow2 = bool(bucket_pow2)
    opts.cache_dir = keep.get("cache_dir")
    opts.pipeline = keep.get("pipeline")
    opts.verify_each = bool(verify_each)
    opts.unfused = bool(unfused)
    opts.bisect = keep.get("bisect")
    opts.autotune = _AUTOTUNE[autotune]
    opts.x86.autotune_budget_ms = int(autotune_budget_ms)
    stream = None
    if target == "cuda":
        stream = _cuda_stream(cuda_stream, int(cuda_device))
        opts.cuda.device = int(cuda_device)
        opts.cuda.stream = stream
        # The library captures runs on the legacy stream (torch's
        # default, which refuses capture) on a stream of its own.
        opts.cuda.disable_graphs = not cuda_graphs
        opts.cuda.precise_math = bool(precise_math)
        opts.cuda.allow_tf32 = bool(allow_tf32)
    handle = ctypes.c_void_p()
    _lib.check(L.tj_compile(graph.handle, ctypes.byref(opts),
                            ctypes.byref(handle)))
    try:
        return Executable(handle.value, graph, target, stream,
                          reuse_outputs)
    except BaseException:
        L.tj_executable_release(handle.value)
        raise


@dataclass(frozen=True)
class LadderRung:
    """One rung of :func:`ladder` (``tj_ladder_rung_t``): its level
    ("decomposed", "unfused", "fused", "full", "specialized"), whether it
    ran and diverges from the reference, its output errors, compile time,
    the first diverging value tj_verify named there, and why it did not
    run (``note``)."""

    level: str
    ran: bool
    diverges: bool
    mismatches: int
    max_abs_error: float
    max_rel_error: float
    compile_ms: float
    first_value: str
    note: str


@dataclass(frozen=True)
class LadderReport:
    """What :func:`ladder` found (``tj_ladder_report_t``): every rung, the
    first that diverges (its level, or None), the part to blame ("passes",
    "kernel", "fusion", "options", "specialization" or ""), and for the
    passes the blamed pass, its rewrites and the first bad one (the
    ``TJ_BISECT=PASS:N`` that diverges; -1 when none was isolated) with its
    node; ``text`` as ``tj-run --ladder`` prints it."""

    rungs: List[LadderRung]
    first_diverging: Optional[str]
    blame: str
    blamed_pass: str
    pass_rewrites: int
    bad_rewrite: int
    bad_rewrite_node: str
    text: str


_LADDER_LEVELS = ["decomposed", "unfused", "fused", "full", "specialized"]


def _checked_graph(what: str, graph: Union[Graph, str], target: str,
                   specialize: str) -> Graph:
    """|graph| (parsed when text) after checking it, |target| and
    |specialize| as :func:`ladder` and :func:`diagnose` take them; errors
    name |what|."""
    if isinstance(graph, str):
        graph = Graph.parse(graph)
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"{what}: expected a Graph, got "
                                f"{type(graph).__name__}")
    if not isinstance(target, str) or target not in TARGETS:
        raise InvalidArgumentError(f"{what}: unknown target {target!r}; "
                                   f"expected x86, reference or cuda")
    if not isinstance(specialize, str) or specialize not in _SPECIALIZE:
        raise InvalidArgumentError(f"{what}: unknown specialize policy "
                                   f"{specialize!r}")
    return graph


def ladder(graph: Union[Graph, str], target: str = "x86", *,
           symbols: Optional[Mapping[str, int]] = None, seed: int = 1,
           edge_values: bool = True, nonfinite: bool = False,
           specialize: str = "never",
           bisect: Optional[str] = None) -> LadderReport:
    """Climbs the diagnostic ladder for |graph| (``tj_verify_ladder``): the
    passes on the reference interpreter, then compiled for |target| unfused,
    fused without autotuning, with the full pipeline and specialized, each
    on the same random inputs (|symbols|, |seed|, edge values and
    |nonfinite| as :meth:`Executable.verify` makes them) against the
    reference; names the first rung that diverges and what to blame,
    bisecting a blamed pass to its first bad rewrite.

    bisect: a rewrite budget (TJ_BISECT's syntax, ``"N"`` or ``"PASS:N"``)
        every rung climbs under, the decomposed rung's replay of the passes
        included: with the budget that stops before the reported bad
        rewrite (``f"{r.blamed_pass}:{r.bad_rewrite - 1}"``) the ladder
        climbs clean. None: the environment's TJ_BISECT; "": none. A
        malformed budget raises InvalidArgumentError."""
    graph = _checked_graph("ladder", graph, target, specialize)
    if bisect is not None:
        if not isinstance(bisect, str):
            raise ArgumentTypeError("ladder: bisect must be a str")
        if "\0" in bisect:
            raise InvalidArgumentError("ladder: bisect contains NUL")
    c_bisect = bisect.encode() if bisect is not None else None
    graph.finalize()
    L = _lib.lib()
    copts = _lib.CompileOptions_t()
    L.tj_compile_options_initialize(ctypes.byref(copts))
    copts.target = TARGETS[target]
    copts.specialize = _SPECIALIZE[specialize]
    copts.bisect = c_bisect
    vopts = _lib.VerifyOptions_t()
    L.tj_verify_options_initialize(ctypes.byref(vopts))
    names = list((symbols or {}).keys())
    c_names = (ctypes.c_char_p * max(len(names), 1))(
        *[n.encode() for n in names])
    c_values = (ctypes.c_int64 * max(len(names), 1))(
        *[int(symbols[n]) for n in names])  # type: ignore[index]
    vopts.num_symbols = len(names)
    vopts.symbol_names = ctypes.cast(c_names, ctypes.POINTER(ctypes.c_char_p))
    vopts.symbol_values = ctypes.cast(c_values,
                                      ctypes.POINTER(ctypes.c_int64))
    vopts.seed = seed
    vopts.edge_values = edge_values
    vopts.nonfinite = nonfinite
    report = ctypes.POINTER(_lib.LadderReport_t)()
    _lib.check(L.tj_verify_ladder(graph.handle, ctypes.byref(copts), None, 0,
                                  ctypes.byref(vopts), ctypes.byref(report)))
    try:
        r = report.contents
        rungs = [LadderRung(_LADDER_LEVELS[g.level], g.ran, g.diverges,
                            g.mismatches, g.max_abs_error, g.max_rel_error,
                            g.compile_ms, g.first_value.decode(),
                            g.note.decode()) for g in r.rungs]
        return LadderReport(
            rungs, _LADDER_LEVELS[r.first_diverging]
            if r.first_diverging >= 0 else None, r.blame.decode(),
            r.blamed_pass.decode(), r.pass_rewrites, r.bad_rewrite,
            r.bad_rewrite_node.decode(), (r.text or b"").decode())
    finally:
        L.tj_ladder_report_destroy(report)


def verify(executable: Union["Executable", Graph, str], *inputs: Any,
           target: str = "x86", **kwargs: Any) -> "VerifyReport":
    """``tj_verify`` as a function: checks |executable| (or |executable|
    compiled for |target| when it is a :class:`Graph` or ``.tj`` text)
    against the reference interpreter at every fusion-group boundary;
    |inputs| and |kwargs| as :meth:`Executable.verify` takes them."""
    if not isinstance(executable, Executable):
        executable = compile(executable, target)
    return executable.verify(*inputs, **kwargs)


@dataclass(frozen=True)
class DiagnoseAnswer:
    """One question of :func:`diagnose` (``tj_diagnose_answer_t``): the
    question, the verdict, the measurements behind it and the seed's
    advice for a yes."""

    question: str
    yes: bool
    measured: str
    advice: str


@dataclass(frozen=True)
class DiagnoseReport:
    """What :func:`diagnose` measured (``tj_diagnose_report_t``): the
    answers in order (launch bound, fusible traffic, recompiling, graph
    breaks, one op dominating, collective, fragmenting, compiling pays),
    the numbers behind them, and ``text`` as ``tj-run --diagnose`` prints
    it. ``answer(word)`` finds an answer by a word of its question."""

    answers: List[DiagnoseAnswer]
    target: str
    runs: int
    run_ms: float
    grown_run_ms: float
    host_ms: float
    kernel_ms: float
    eager_kernels: int
    kernels: int
    graph_breaks: int
    recompiles: int
    arena_bytes: int
    live_peak_bytes: int
    compile_ms: float
    unfused_run_ms: float
    break_even_runs: int
    text: str
    # CUDA: the caching allocator's reserved and allocated bytes after the
    # runs (0 elsewhere).
    device_reserved_bytes: int = 0
    device_allocated_bytes: int = 0

    def answer(self, word: str) -> DiagnoseAnswer:
        for a in self.answers:
            if word.lower() in a.question.lower():
                return a
        raise KeyError(word)


def diagnose(graph: Union[Graph, str], target: str = "x86", *,
             symbols: Optional[Mapping[str, int]] = None, runs: int = 10,
             specialize: str = "never") -> DiagnoseReport:
    """Seed 003's diagnostic ladder, measured (``tj_diagnose``): compiles
    |graph| for |target| (|specialize| as :func:`compile` takes it),
    profiles |runs| runs at |symbols| and with the first symbol doubled,
    and answers each question with a verdict."""
    graph = _checked_graph("diagnose", graph, target, specialize)
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)):
        raise ArgumentTypeError("diagnose: runs must be an int")
    graph.finalize()
    L = _lib.lib()
    copts = _lib.CompileOptions_t()
    L.tj_compile_options_initialize(ctypes.byref(copts))
    copts.target = TARGETS[target]
    copts.specialize = _SPECIALIZE[specialize]
    names = list((symbols or {}).keys())
    c_names = (ctypes.c_char_p * max(len(names), 1))(
        *[n.encode() for n in names])
    c_values = (ctypes.c_int64 * max(len(names), 1))(
        *[int(symbols[n]) for n in names])  # type: ignore[index]
    report = ctypes.POINTER(_lib.DiagnoseReport_t)()
    _lib.check(L.tj_diagnose(graph.handle, ctypes.byref(copts), len(names),
                             ctypes.cast(c_names,
                                         ctypes.POINTER(ctypes.c_char_p)),
                             ctypes.cast(c_values,
                                         ctypes.POINTER(ctypes.c_int64)),
                             int(runs), ctypes.byref(report)))
    try:
        r = report.contents
        answers = [DiagnoseAnswer(a.question.decode(), bool(a.yes),
                                  a.measured.decode(), a.advice.decode())
                   for a in r.answers]
        return DiagnoseReport(
            answers, r.target.decode(), r.runs, r.run_ms, r.grown_run_ms,
            r.host_ms, r.kernel_ms, r.eager_kernels, r.kernels,
            r.graph_breaks, r.recompiles, r.arena_bytes, r.live_peak_bytes,
            r.compile_ms, r.unfused_run_ms, r.break_even_runs,
            (r.text or b"").decode(), r.device_reserved_bytes,
            r.device_allocated_bytes)
    finally:
        L.tj_diagnose_report_destroy(report)


# CU_STREAM_LEGACY: the legacy default stream (torch's default stream, whose
# cuda_stream is 0) as a handle; 0 would mean the library's own stream.
_CU_STREAM_LEGACY = 1


def _cuda_stream(spec: Any, device: int) -> Optional[int]:
    """The CUstream for compile()'s |cuda_stream| (None: the library's).
    torch's current stream is read through its public API, which also
    initializes CUDA in torch (making its context current on this thread,
    as the legacy stream's handle needs)."""
    if isinstance(spec, str):
        if spec == "own":
            return None
        if spec != "torch":
            raise InvalidArgumentError(
                f"compile: unknown cuda_stream {spec!r}; expected None, "
                f"\"torch\", \"own\", a CUstream or a torch stream")
        try:
            import torch  # type: ignore  # noqa: F401
        except ImportError:
            raise UnsupportedError('compile: cuda_stream="torch" needs '
                                   'torch') from None
    elif spec is None:
        torch = _fast.torch_module()
        if torch is None or not torch.cuda.is_available():
            return None
    else:
        raw = getattr(spec, "cuda_stream", spec)
        if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)):
            raise ArgumentTypeError(
                f"compile: cuda_stream must be None, a str, an int or a "
                f"stream object, got {type(spec).__name__}")
        return int(raw) or _CU_STREAM_LEGACY
    import torch  # type: ignore
    return int(torch.cuda.current_stream(device).cuda_stream) or \
        _CU_STREAM_LEGACY
