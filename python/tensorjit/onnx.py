"""Importing ONNX models: :func:`load` (``tj_onnx_import``, tj_onnx.h).

Example::

    import tensorjit as tj

    g = tj.onnx.load("model.onnx")          # or the model's bytes
    exe = tj.compile(g)
    y = exe(x)

The importer is the library's own (protobuf-c over ONNX's onnx.proto); this
module needs no ``onnx`` package. Input and output names are the model's,
made C identifiers (other characters become ``_``); each ``dim_param``
becomes a symbol of the same name unless ``symbols`` fixes it.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Dict, Mapping, Optional, Union

import numpy as np

from . import _lib
from .dtypes import dtype_from_numpy
from .errors import ArgumentTypeError
from .graph import Context, Graph, default_context

__all__ = ["load"]


class _SymbolOverride_t(ctypes.Structure):
    """tj_onnx_symbol_override_t."""

    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_int64)]


class _InputValue_t(ctypes.Structure):
    """tj_onnx_input_value_t."""

    _fields_ = [("name", ctypes.c_char_p), ("value", _lib.Tensor_t)]


class _ImportOptions_t(ctypes.Structure):
    """tj_onnx_import_options_t."""

    _fields_ = [("struct_size", ctypes.c_size_t),
                ("base_dir", ctypes.c_char_p),
                ("symbol_overrides", ctypes.POINTER(_SymbolOverride_t)),
                ("num_symbol_overrides", ctypes.c_int32),
                ("input_values", ctypes.POINTER(_InputValue_t)),
                ("num_input_values", ctypes.c_int32)]


_declared = False


def _declare() -> None:
    global _declared
    if _declared:
        return
    L = _lib.lib()
    vp, opts = ctypes.c_void_p, ctypes.POINTER(_ImportOptions_t)
    L.tj_onnx_import_options_initialize.restype = None
    L.tj_onnx_import_options_initialize.argtypes = [opts]
    L.tj_onnx_import.restype = vp
    L.tj_onnx_import.argtypes = [vp, ctypes.c_char_p, ctypes.c_size_t, opts,
                                 ctypes.POINTER(vp)]
    L.tj_onnx_import_file.restype = vp
    L.tj_onnx_import_file.argtypes = [vp, ctypes.c_char_p, opts,
                                      ctypes.POINTER(vp)]
    _declared = True


def load(model: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview],
         context: Optional[Context] = None, base_dir: Optional[str] = None,
         symbols: Optional[Mapping[str, int]] = None,
         input_values: Optional[Mapping[str, "np.ndarray"]] = None) -> Graph:
    """Imports an ONNX model (a path, or the serialized ModelProto's bytes)
    into a new finalized :class:`Graph`.

    ``base_dir`` is where external data files are read (default: the
    model file's directory; bytes have none unless given); ``symbols`` fixes
    dim_params to sizes (``{"batch_size": 1}``); ``input_values`` makes
    graph inputs constants (``{"axes": np.array([1])}``), which pins
    shape-determining inputs such as a reduction's axes or Reshape's shape
    so they fold; the graph then does not take them. Unsupported ops,
    attributes, opsets and dtypes raise :class:`UnsupportedError` naming the
    node; malformed models :class:`InvalidArgumentError`."""
    _declare()
    L = _lib.lib()
    ctx = context if context is not None else default_context()
    options = _ImportOptions_t()
    L.tj_onnx_import_options_initialize(ctypes.byref(options))
    if base_dir is not None:
        options.base_dir = os.fsencode(base_dir)
    keep = []
    if symbols:
        if not isinstance(symbols, Mapping):
            raise ArgumentTypeError("symbols must map names to sizes")
        arr = (_SymbolOverride_t * len(symbols))()
        for i, (name, value) in enumerate(symbols.items()):
            raw = name.encode("utf-8")
            keep.append(raw)
            arr[i].name = raw
            arr[i].value = int(value)
        options.symbol_overrides = arr
        options.num_symbol_overrides = len(symbols)
        keep.append(arr)
    if input_values:
        if not isinstance(input_values, Mapping):
            raise ArgumentTypeError("input_values must map names to arrays")
        vals = (_InputValue_t * len(input_values))()
        for i, (name, value) in enumerate(input_values.items()):
            arr = np.ascontiguousarray(value)
            code = dtype_from_numpy(arr.dtype)
            if code is None:
                raise ArgumentTypeError(
                    f"input_values[{name!r}]: dtype {arr.dtype} has no "
                    "libtensorjit dtype")
            raw = name.encode("utf-8")
            shape = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
            keep.extend([raw, arr, shape])
            vals[i].name = raw
            t = vals[i].value
            t.data = arr.ctypes.data if arr.size else None
            t.device_type = 1  # TJ_DEVICE_CPU
            t.device_id = 0
            t.dtype = int(code)
            t.rank = arr.ndim
            t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            t.strides = None
            t.byte_offset = 0
        options.input_values = vals
        options.num_input_values = len(input_values)
        keep.append(vals)
    handle = ctypes.c_void_p()
    if isinstance(model, (bytes, bytearray, memoryview)):
        raw = bytes(model)
        _lib.check(L.tj_onnx_import(ctx.handle, raw, len(raw),
                                    ctypes.byref(options),
                                    ctypes.byref(handle)))
    elif isinstance(model, (str, os.PathLike)):
        _lib.check(L.tj_onnx_import_file(ctx.handle, os.fsencode(model),
                                         ctypes.byref(options),
                                         ctypes.byref(handle)))
    else:
        raise ArgumentTypeError("model must be a path or bytes")
    return _adopt(handle.value, ctx)


def _adopt(handle: int, ctx: Context) -> Graph:
    """A Graph object over the imported C graph (as Graph.parse builds one),
    with its symbols learnt from its text so shapes read back by name."""
    g = Graph.__new__(Graph)
    g._handle = handle
    g.context = ctx
    g._borrowed = []
    g._dim_names: Dict[int, str] = {}
    g._symbols: Dict[str, int] = {}
    ctx._adopt(g)
    text = g.text()
    m = re.search(r"func\s+@([A-Za-z_][A-Za-z0-9_]*)", text)
    g.name = m.group(1) if m else "main"
    L = _lib.lib()
    # The symbols are listed after the function's name ("func @g[batch,
    # seq](...)"). Only those are looked up: the graph is finalized, where
    # tj_graph_symbol with any other word (the "e" of a constant's 1e-05)
    # records an error in the graph.
    head = re.match(r"\s*func\s+@[A-Za-z_][A-Za-z0-9_]*\[([^\]]*)\]", text)
    for word in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*",
                               head.group(1) if head else "")):
        d = int(L.tj_graph_symbol(handle, word.encode()))
        if d != _lib.DIM_INVALID:
            g._symbols[word] = d
            g._dim_names.setdefault(d, word)
    return g
