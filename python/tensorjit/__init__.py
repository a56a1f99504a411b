"""tensorjit: Python bindings of libtensorjit, an embeddable tensor JIT.

Pure Python over ctypes; the library is found through ``$TJ_LIBRARY``, a
copy bundled in this package, or the system (see :mod:`tensorjit._lib`).

Example, the block of seed 001 with a dynamic batch::

    import numpy as np
    import tensorjit as tj

    g = tj.Graph("block")
    x = g.input("x", "f32", ["B", 1024])
    w = g.input("w", "f32", [1024, 4096])
    b = g.input("b", "f32", [4096])
    g.output(g.gelu(x @ w + b, approximate=True), "y")
    exe = tj.compile(g)              # target="x86" | "reference" | "cuda"
    for B in (1, 7, 256):            # one executable, every B
        y = exe(np.ones((B, 1024), np.float32), w_np, b_np)

Every failure is a :class:`TensorJitError` carrying the library's status
code and message.
"""

from __future__ import annotations

from . import _lib, onnx
from .dtypes import DType, bf16_to_f32, f32_to_bf16, numpy_dtype
from .custom_op import (CustomOp, SymDim, TensorType, custom_op,
                        dynamic_dim)
from .errors import (ArgumentTypeError, BackendError, InternalError,
                     InvalidArgumentError, LibraryNotFoundError,
                     OutOfMemoryError, TensorJitError, UnsupportedError)
from .executable import (TARGETS, Executable, ExecutableStats, Profile,
                         ProfileEntry, VerifyReport, VerifyValue, compile)
from .executable import LadderReport, LadderRung, ladder
from .executable import DiagnoseAnswer, DiagnoseReport, diagnose, verify
from .graph import (Context, Graph, PartitionStats, Scoreboard,
                    ScoreboardRow, Value, default_context)
from .quant import calibrate, quantize_weights

__all__ = [
    "ArgumentTypeError", "BackendError", "Context", "CustomOp", "DType",
    "Executable", "SymDim", "TensorType", "custom_op", "dynamic_dim",
    "ExecutableStats", "Graph", "InternalError", "InvalidArgumentError",
    "LibraryNotFoundError", "OutOfMemoryError", "PartitionStats",
    "Profile", "ProfileEntry", "Scoreboard",
    "ScoreboardRow", "TARGETS", "TensorJitError", "UnsupportedError",
    "Value", "VerifyReport", "VerifyValue", "bf16_to_f32", "compile",
    "default_context", "f32_to_bf16", "library_path", "load_library",
    "numpy_dtype", "onnx", "version", "LadderReport", "LadderRung", "ladder",
    "DiagnoseAnswer", "DiagnoseReport", "diagnose", "verify",
    "calibrate", "quantize_weights",
    "F32", "F16", "BF16", "F64", "I8", "I32", "I64", "BOOL",
]

__version__ = "0.1.0"

F32, F16, BF16, F64 = DType.F32, DType.F16, DType.BF16, DType.F64
I8, I32, I64, BOOL = DType.I8, DType.I32, DType.I64, DType.BOOL


def load_library(path: str | None = None) -> str:
    """Loads libtensorjit now (from |path| if given) and returns the path
    that was loaded. Raises LibraryNotFoundError."""
    _lib.load(path)
    return _lib.library_path()


def library_path() -> str:
    """The path (or loader name) of the libtensorjit in use."""
    return _lib.library_path()


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.lib().tj_version_string().decode()
