"""Quantizing a graph (``tj_quant.h``, issue 17).

:func:`quantize_weights` turns the constant weights of a graph's matmuls
into int8 per output channel or int4 per group along K (dequantize in the
graph; the x86 GEMM reads the quantized bytes). :func:`calibrate` runs
sample inputs through the graph on the reference interpreter and inserts
static quantize -> dequantize on the activations its matmuls read. Both
return a new finalized :class:`Graph`; the input is not changed::

    q = tj.quantize_weights(g, "int4", group_size=128)
    q = tj.calibrate(q, [(x0,), (x1,)], method="percentile")
    y = tj.compile(q)(x)
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Sequence

import numpy as np

from . import _lib
from .dtypes import dtype_from_numpy
from .errors import InvalidArgumentError
from .graph import Graph

_FORMATS = {"int8": 1, "int4": 2}
_METHODS = {"minmax": 0, "percentile": 1, "entropy": 2}
_ACT_DTYPES = {"u8": 8, "i8": 4}  # TJ_DTYPE_U8, TJ_DTYPE_I8


def _enum(table: dict, value: str, what: str) -> int:
    if value not in table:
        raise InvalidArgumentError(
            f"{what} {value!r}: one of {', '.join(table)}")
    return table[value]


def quantize_weights(graph: Graph, format: str = "int8", *,
                     group_size: int = 128,
                     min_elements: int = 1024) -> Graph:
    """``tj_graph_quantize_weights``: a copy of |graph| (finalized first)
    whose matmuls (and linears) read their rank-2 f32/bf16 constant
    weights of at least |min_elements| elements as ``dequantize(q, scale)``: ``"int8"`` per
    output channel, or ``"int4"`` per group of |group_size| (32, 64, 128)
    along K. Symmetric scales (max |w| / 127 or / 7)."""
    graph.finalize()
    o = _lib.QuantizeWeightsOptions_t()
    L = _lib.lib()
    L.tj_quantize_weights_options_initialize(ctypes.byref(o))
    o.format = _enum(_FORMATS, format, "weight format")
    o.group_size = int(group_size)
    o.min_elements = int(min_elements)
    handle = ctypes.c_void_p()
    count = ctypes.c_int32()
    _lib.check(L.tj_graph_quantize_weights(graph.handle, ctypes.byref(o),
                                           ctypes.byref(handle),
                                           ctypes.byref(count)))
    try:
        return graph._adopt_handle(handle.value, graph.name + "_q" + format)
    except BaseException:
        L.tj_graph_destroy(handle.value)
        raise


def _host_tensor(a: Any, keep: List[Any], what: str) -> Any:
    arr = np.ascontiguousarray(a)
    dt = dtype_from_numpy(arr.dtype)
    if dt is None:
        raise InvalidArgumentError(f"{what}: numpy dtype {arr.dtype} has no "
                                   f"tensorjit dtype")
    shape = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
    keep.extend([arr, shape])
    t = _lib.Tensor_t()
    t.data = arr.ctypes.data
    t.device_type = _lib.DEVICE_CPU
    t.device_id = 0
    t.dtype = int(dt)
    t.rank = arr.ndim
    t.shape = shape
    t.strides = None
    t.byte_offset = 0
    return t


def calibrate(graph: Graph, samples: Sequence[Sequence[Any]], *,
              method: str = "minmax", percentile: float = 99.99,
              dtype: str = "u8", smooth: bool = False) -> Graph:
    """``tj_calibrate``: runs each sample (a sequence of host arrays, one
    per graph input, in order) through |graph| on the reference
    interpreter and returns a copy with quantize -> dequantize on every
    f32 activation a matmul reads, its scale from ``"minmax"``, the
    ``"percentile"`` |percentile| of the values seen, or ``"entropy"``
    (the KL-divergence threshold over a histogram); |dtype| ``"u8"``
    (asymmetric) or ``"i8"`` (symmetric). |smooth|: SmoothQuant's scale
    migration (``TJ_CALIBRATE_SMOOTH``, alpha 0.5) where the matmuls read
    float constant weights: the activation divided per channel by
    sqrt(max |x| / max |w|), the weights' rows multiplied by it; quantize
    the weights afterwards. Deterministic for fixed samples."""
    graph.finalize()
    n_in = len(graph.inputs)
    keep: List[Any] = []
    flat = []
    for i, sample in enumerate(samples):
        sample = list(sample)
        if len(sample) != n_in:
            raise InvalidArgumentError(
                f"calibrate: sample {i} has {len(sample)} arrays; "
                f"@{graph.name} takes {n_in} inputs")
        for k, a in enumerate(sample):
            flat.append(_host_tensor(a, keep, f"calibrate: sample {i} "
                                              f"input {k}"))
    arr = (_lib.Tensor_t * max(len(flat), 1))(*flat)
    o = _lib.CalibrateOptions_t()
    L = _lib.lib()
    L.tj_calibrate_options_initialize(ctypes.byref(o))
    o.method = _enum(_METHODS, method, "calibration method")
    o.percentile = float(percentile)
    o.dtype = _enum(_ACT_DTYPES, dtype, "activation dtype")
    o.flags = 1 if smooth else 0  # TJ_CALIBRATE_SMOOTH
    handle = ctypes.c_void_p()
    count = ctypes.c_int32()
    _lib.check(L.tj_calibrate(graph.handle, ctypes.byref(o), len(samples),
                              arr, ctypes.byref(handle), ctypes.byref(count)))
    try:
        return graph._adopt_handle(handle.value, graph.name + "_calibrated")
    except BaseException:
        L.tj_graph_destroy(handle.value)
        raise
