"""Element types: ``tj_dtype_t`` and its numpy counterparts.

A dtype may be given as a :class:`DType`, its name (``"f32"``, ``"bf16"``,
...), a numpy dtype or scalar type (``numpy.float32``), or a few common
spellings (``"float32"``, ``"int64"``, ``"bool"``).

numpy has no bfloat16: bf16 arrays cross as ``numpy.uint16`` holding the
raw bits (the upper half of an f32), or as ``ml_dtypes.bfloat16`` when that
package is installed. An input declared bf16 accepts either; elsewhere
``numpy.uint16`` is u16.
"""

from __future__ import annotations

import enum
import sys
from typing import Any, Optional, Union

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["DType", "DTypeLike", "dtype_of", "numpy_dtype", "dtype_from_numpy",
           "bf16_to_f32", "f32_to_bf16"]


class DType(enum.IntEnum):
    """tj_dtype_t."""

    F32 = 0
    F16 = 1
    BF16 = 2
    F64 = 3
    I8 = 4
    I32 = 5
    I64 = 6
    BOOL = 7
    U8 = 8
    F8E4M3 = 9  # float8 e4m3fn: a storage dtype (casts, movement, QDQ)
    F8E5M2 = 10  # float8 e5m2: a storage dtype
    I16 = 11
    U16 = 12
    U32 = 13
    U64 = 14
    # The other narrow storage dtypes, one element per byte (tj_base.h):
    # numpy sees their bits as uint8 (int8 for i4 and i2).
    F8E4M3FNUZ = 15
    F8E5M2FNUZ = 16
    F4E2M1 = 17
    F8E8M0 = 18
    I4 = 19
    U4 = 20
    I2 = 21
    U2 = 22

    @property
    def short_name(self) -> str:
        """The .tj spelling: "f32", "bf16", ..."""
        return _NAMES[self]

    @property
    def itemsize(self) -> int:
        return _SIZES[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16, DType.F64)

    @property
    def is_integer(self) -> bool:
        return self in (DType.I8, DType.I32, DType.I64, DType.U8, DType.I16,
                        DType.U16, DType.U32, DType.U64, DType.I4, DType.U4,
                        DType.I2, DType.U2)

    @property
    def is_float8(self) -> bool:
        """The narrow floats (float8 and float4): bytes holding bits."""
        return self in (DType.F8E4M3, DType.F8E5M2, DType.F8E4M3FNUZ,
                        DType.F8E5M2FNUZ, DType.F4E2M1, DType.F8E8M0)

    def __str__(self) -> str:
        return self.short_name


_NAMES = {DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16",
          DType.F64: "f64", DType.I8: "i8", DType.I32: "i32",
          DType.I64: "i64", DType.BOOL: "bool", DType.U8: "u8",
          DType.F8E4M3: "f8e4m3", DType.F8E5M2: "f8e5m2", DType.I16: "i16",
          DType.U16: "u16", DType.U32: "u32", DType.U64: "u64",
          DType.F8E4M3FNUZ: "f8e4m3fnuz", DType.F8E5M2FNUZ: "f8e5m2fnuz",
          DType.F4E2M1: "f4e2m1", DType.F8E8M0: "f8e8m0", DType.I4: "i4",
          DType.U4: "u4", DType.I2: "i2", DType.U2: "u2"}
_SIZES = {DType.F32: 4, DType.F16: 2, DType.BF16: 2, DType.F64: 8,
          DType.I8: 1, DType.I32: 4, DType.I64: 8, DType.BOOL: 1,
          DType.U8: 1, DType.F8E4M3: 1, DType.F8E5M2: 1, DType.I16: 2,
          DType.U16: 2, DType.U32: 4, DType.U64: 8, DType.F8E4M3FNUZ: 1,
          DType.F8E5M2FNUZ: 1, DType.F4E2M1: 1, DType.F8E8M0: 1, DType.I4: 1,
          DType.U4: 1, DType.I2: 1, DType.U2: 1}
_BY_NAME = {v: k for k, v in _NAMES.items()}
_BY_NAME.update({"float32": DType.F32, "float16": DType.F16, "half":
                 DType.F16, "bfloat16": DType.BF16, "float64": DType.F64,
                 "double": DType.F64, "float": DType.F32, "int8": DType.I8,
                 "int32": DType.I32, "int64": DType.I64, "bool_":
                 DType.BOOL, "uint8": DType.U8, "float8_e4m3fn":
                 DType.F8E4M3, "float8_e5m2": DType.F8E5M2, "int16":
                 DType.I16, "uint16": DType.U16, "uint32": DType.U32,
                 "uint64": DType.U64})

# ml_dtypes (optional: real bfloat16 and float8 numpy dtypes) is imported
# on first need, not with the package: importing it costs about 0.7 s per
# interpreter, which an f32-only program should not pay. Needed means: a
# bf16 or float8 numpy dtype asked for (numpy_dtype), or a numpy dtype not
# otherwise known while ml_dtypes is already imported (a caller's
# ml_dtypes.bfloat16 array: the caller imported it).
_ML_DTYPES_LOADED = False
_ML_KINDS = ("BF16", "F8E4M3", "F8E5M2")


def _load_ml_dtypes() -> None:
    """Puts ml_dtypes' bf16 and float8 dtypes in the tables, once; without
    ml_dtypes they stay raw bits (uint16, uint8)."""
    global _ML_DTYPES_LOADED
    if _ML_DTYPES_LOADED:
        return
    _ML_DTYPES_LOADED = True
    try:
        import ml_dtypes  # type: ignore
        found = {DType.BF16: np.dtype(ml_dtypes.bfloat16),
                 DType.F8E4M3: np.dtype(ml_dtypes.float8_e4m3fn),
                 DType.F8E5M2: np.dtype(ml_dtypes.float8_e5m2)}
    except Exception:  # noqa: BLE001 - any import failure means "absent"
        return
    for d, npd in found.items():
        _TO_NUMPY[d] = npd
        _FROM_NUMPY[npd] = d


_TO_NUMPY = {DType.F32: np.dtype(np.float32), DType.F16: np.dtype(np.float16),
             DType.BF16: np.dtype(np.uint16),
             DType.F64: np.dtype(np.float64), DType.I8: np.dtype(np.int8),
             DType.I32: np.dtype(np.int32), DType.I64: np.dtype(np.int64),
             DType.BOOL: np.dtype(np.bool_), DType.U8: np.dtype(np.uint8),
             DType.F8E4M3: np.dtype(np.uint8),
             DType.F8E5M2: np.dtype(np.uint8),
             DType.I16: np.dtype(np.int16), DType.U16: np.dtype(np.uint16),
             DType.U32: np.dtype(np.uint32), DType.U64: np.dtype(np.uint64),
             DType.F8E4M3FNUZ: np.dtype(np.uint8),
             DType.F8E5M2FNUZ: np.dtype(np.uint8),
             DType.F4E2M1: np.dtype(np.uint8), DType.F8E8M0: np.dtype(np.uint8),
             DType.I4: np.dtype(np.int8), DType.U4: np.dtype(np.uint8),
             DType.I2: np.dtype(np.int8), DType.U2: np.dtype(np.uint8)}
_FROM_NUMPY = {np.dtype(np.float32): DType.F32,
               np.dtype(np.float16): DType.F16,
               np.dtype(np.float64): DType.F64, np.dtype(np.int8): DType.I8,
               np.dtype(np.int32): DType.I32, np.dtype(np.int64): DType.I64,
               np.dtype(np.bool_): DType.BOOL, np.dtype(np.uint8): DType.U8,
               np.dtype(np.int16): DType.I16, np.dtype(np.uint16): DType.U16,
               np.dtype(np.uint32): DType.U32, np.dtype(np.uint64): DType.U64}


def _from_numpy(npd: np.dtype) -> Optional[DType]:
    found = _FROM_NUMPY.get(npd)
    if found is None and not _ML_DTYPES_LOADED and "ml_dtypes" in sys.modules:
        _load_ml_dtypes()
        found = _FROM_NUMPY.get(npd)
    return found

DTypeLike = Union[DType, str, np.dtype, type]


def dtype_of(value: Any) -> DType:
    """The DType named by |value| (see the module docstring)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, bool) or value is None:
        raise ArgumentTypeError(f"not a dtype: {value!r}")
    if isinstance(value, int):
        try:
            return DType(value)
        except ValueError:
            raise InvalidArgumentError(f"no dtype has code {value}") from None
    if isinstance(value, str):
        found = _BY_NAME.get(value.lower())
        if found is None:
            raise InvalidArgumentError(
                f"unknown dtype {value!r}; expected one of "
                f"{', '.join(_NAMES.values())}")
        return found
    try:
        npd = np.dtype(value)
    except TypeError:
        raise ArgumentTypeError(f"not a dtype: {value!r}") from None
    found = _from_numpy(npd.newbyteorder("=") if npd.byteorder in "<>"
                        else npd)
    if found is None:
        raise InvalidArgumentError(f"numpy dtype {npd} has no tensorjit "
                                   f"equivalent")
    return found


def numpy_dtype(dtype: DTypeLike) -> np.dtype:
    """The numpy dtype arrays of |dtype| use (uint16 bits for bf16 and uint8
    bits for the float8 dtypes unless ml_dtypes is installed)."""
    d = dtype_of(dtype)
    if d.name in _ML_KINDS:
        _load_ml_dtypes()
    return _TO_NUMPY[d]


def dtype_from_numpy(npd: np.dtype) -> Optional[DType]:
    """The DType of numpy dtype |npd| in native byte order, or None.
    uint16 is u16, or bf16 bits where a bf16 value is expected; uint8 is
    u8, or float8 bits where a float8 value is expected."""
    return _from_numpy(npd)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 raw bits (uint16) to float32, exactly."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        bits = bits.view(np.uint16)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 to bf16 raw bits (uint16), rounding to nearest even."""
    f = np.asarray(values, dtype=np.float32, order="C")  # rank 0 stays 0
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1)))
    # np.where, not item assignment: on a rank-0 array the arithmetic
    # above gives numpy scalars.
    out = np.where(np.isnan(f), np.uint16(0x7FC0),
                   (rounded >> np.uint64(16)).astype(np.uint16))
    return np.asarray(out, dtype=np.uint16).reshape(f.shape)
