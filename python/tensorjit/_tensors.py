"""Turning numpy arrays and DLPack producers into ``tj_tensor_t``s.

Inputs and ``out=`` arrays may be:

* numpy arrays, any layout: strides are passed through (in elements); a
  layout ctypes cannot describe (a stride that is not a multiple of the
  element size, a non-native byte order) is copied first;
* any object with ``__dlpack__`` / ``__dlpack_device__`` (torch tensors,
  cupy arrays, jax arrays, numpy arrays wrapped by another library): the
  DLPack tensor is read in place, zero-copy, on the CPU or on a CUDA device;
* a DLPack capsule itself (the legacy ``to_dlpack()`` protocol), named
  ``"dltensor"`` or ``"dltensor_versioned"``.

A capsule is consumed as the DLPack protocol asks: renamed to
``"used_dltensor"`` (so its destructor leaves it alone) and its deleter is
called once the run is over, on every path.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _lib
from .dtypes import DType, dtype_from_numpy, numpy_dtype
from .errors import (ArgumentTypeError, InvalidArgumentError,
                     UnsupportedError)

#===--- DLPack (dlpack.h, v1.0) ---===#

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6
DLPACK_FLAG_READ_ONLY = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


# The C-API capsule functions, on a private handle so our argtypes never
# clash with another library's use of ctypes.pythonapi.
_py = ctypes.PyDLL(None)
_py.PyCapsule_IsValid.restype = ctypes.c_int
_py.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_py.PyCapsule_SetName.restype = ctypes.c_int
_py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The capsule keeps a pointer to its name: these buffers live forever.
_USED = ctypes.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")
# Deleters run with the GIL held (numpy's and torch's take it themselves,
# which is fine re-entrantly; some producers assume it).
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)

_DL_DTYPES = {(KDL_FLOAT, 32): DType.F32, (KDL_FLOAT, 16): DType.F16,
              (KDL_BFLOAT, 16): DType.BF16, (KDL_FLOAT, 64): DType.F64,
              (KDL_INT, 8): DType.I8, (KDL_INT, 32): DType.I32,
              (KDL_INT, 64): DType.I64, (KDL_BOOL, 8): DType.BOOL,
              (KDL_UINT, 8): DType.U8, (KDL_INT, 16): DType.I16,
              (KDL_UINT, 16): DType.U16, (KDL_UINT, 32): DType.U32,
              (KDL_UINT, 64): DType.U64,
              # DLPack 1.1's float8 codes (torch exports its float8 tensors
              # with them): e4m3fn 10, e4m3fnuz 11, e5m2 12, e5m2fnuz 13,
              # e8m0fnu 14.
              (10, 8): DType.F8E4M3, (11, 8): DType.F8E4M3FNUZ,
              (12, 8): DType.F8E5M2, (13, 8): DType.F8E5M2FNUZ,
              (14, 8): DType.F8E8M0}


def is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def is_dlpack(obj: Any) -> bool:
    """True for a DLPack producer or capsule (numpy arrays included)."""
    return hasattr(obj, "__dlpack__") or is_capsule(obj)


def dlpack_device(obj: Any) -> Tuple[int, int]:
    """(device_type, device_id) of a DLPack producer; CPU for capsules."""
    fn = getattr(obj, "__dlpack_device__", None)
    if fn is None:
        return (KDL_CPU, 0)
    dev = fn()
    return (int(dev[0]), int(dev[1]))


class Marshal:
    """Keeps everything a set of tj_tensor_t's points at alive, and frees
    the DLPack tensors it consumed. Use as a context manager."""

    def __init__(self) -> None:
        self.keep: List[Any] = []
        self._deleters: List[Tuple[int, int]] = []

    def __enter__(self) -> "Marshal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def release(self) -> None:
        deleters, self._deleters = self._deleters, []
        for fn, managed in deleters:
            _DELETER(fn)(managed)
        self.keep.clear()

    #===--- numpy ---===#

    def from_numpy(self, arr: np.ndarray, what: str,
                   expect: Optional[DType],
                   t: Optional[_lib.Tensor_t] = None
                   ) -> Tuple[_lib.Tensor_t, DType]:
        """A tensor over |arr| (copied only if ctypes cannot describe it),
        written into |t| when given."""
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        dtype = dtype_from_numpy(arr.dtype)
        if expect == DType.BF16 and arr.dtype == np.uint16:
            dtype = DType.BF16  # raw bf16 bits
        if expect is not None and expect.is_float8 and \
                arr.dtype == np.uint8:
            dtype = expect  # raw float8 bits
        if dtype is None:
            wanted = f" (expected {expect.short_name})" if expect is not None \
                else ""
            raise InvalidArgumentError(
                f"{what}: numpy dtype {arr.dtype} has no tensorjit "
                f"equivalent{wanted}")
        ndim = arr.ndim
        if ndim > _lib.MAX_RANK:
            raise InvalidArgumentError(
                f"{what}: rank {ndim} is above the maximum "
                f"{_lib.MAX_RANK} (shape {arr.shape})")
        if t is None:
            t = _lib.Tensor_t()
        shape = (ctypes.c_int64 * max(ndim, 1))(*arr.shape)
        t.shape = shape
        if arr.flags.c_contiguous:
            t.strides = None  # dense row-major: the fast path in C
            self.keep.append(shape)
        else:
            item = arr.itemsize
            if any(s % item for s in arr.strides):
                arr = np.ascontiguousarray(arr)
                t.strides = None
                self.keep.append(shape)
            else:
                strides = (ctypes.c_int64 * max(ndim, 1))(
                    *[s // item for s in arr.strides])
                t.strides = strides
                self.keep.extend((shape, strides))
        t.data = arr.__array_interface__["data"][0] or None
        t.device_type = _lib.DEVICE_CPU
        t.device_id = 0
        t.dtype = int(dtype)
        t.rank = ndim
        t.byte_offset = 0
        self.keep.append(arr)
        return t, dtype

    #===--- DLPack ---===#

    def from_dlpack(self, obj: Any, what: str, expect: Optional[DType],
                    writable: bool = False,
                    t: Optional[_lib.Tensor_t] = None
                    ) -> Tuple[_lib.Tensor_t, DType, int]:
        """A tensor over a DLPack producer or capsule, zero-copy. Returns
        (tensor, dtype, DLPack device type)."""
        capsule = obj
        if not is_capsule(obj):
            try:
                try:
                    capsule = obj.__dlpack__(max_version=(1, 0))
                except TypeError:  # a producer older than DLPack 1.0
                    capsule = obj.__dlpack__()
            except Exception as e:  # noqa: BLE001 - BufferError, torch's...
                raise InvalidArgumentError(
                    f"{what}: __dlpack__ refused: {type(e).__name__}: {e}") \
                    from None
        if not is_capsule(capsule):
            raise ArgumentTypeError(f"{what}: __dlpack__ returned "
                                    f"{type(capsule).__name__}, not a capsule")
        flags = 0
        if _py.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
            ptr = _py.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
            managed = DLManagedTensorVersioned.from_address(ptr)
            if managed.version.major > 1:
                raise UnsupportedError(
                    f"{what}: DLPack {managed.version.major}."
                    f"{managed.version.minor} is newer than this binding "
                    f"reads (1.x)")
            _py.PyCapsule_SetName(capsule, _USED_VERSIONED)
            flags = int(managed.flags)
        elif _py.PyCapsule_IsValid(capsule, b"dltensor"):
            ptr = _py.PyCapsule_GetPointer(capsule, b"dltensor")
            managed = DLManagedTensor.from_address(ptr)  # type: ignore
            _py.PyCapsule_SetName(capsule, _USED)
        else:
            raise InvalidArgumentError(
                f"{what}: not an unused DLPack capsule (already consumed?)")
        # From here on we own the tensor: its deleter runs in release().
        if managed.deleter:
            self._deleters.append((int(managed.deleter), int(ptr)))
        self.keep.append(capsule)
        dl = managed.dl_tensor
        if writable and flags & DLPACK_FLAG_READ_ONLY:
            raise InvalidArgumentError(f"{what}: the DLPack tensor is "
                                       f"read-only")
        dev = int(dl.device.device_type)
        if dev in (KDL_CPU, KDL_CUDA_HOST):
            device_type = _lib.DEVICE_CPU
        elif dev in (KDL_CUDA, KDL_CUDA_MANAGED):
            device_type = _lib.DEVICE_CUDA
        else:
            raise UnsupportedError(f"{what}: DLPack device type {dev} is "
                                   f"neither CPU nor CUDA")
        code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), \
            int(dl.dtype.lanes)
        dtype = _DL_DTYPES.get((code, bits))
        if expect == DType.BF16 and (code, bits) == (KDL_UINT, 16):
            dtype = DType.BF16
        if expect in (DType.BOOL, DType.F8E4M3, DType.F8E5M2) and (
                code, bits) == (KDL_UINT, 8):
            # older producers export bool as uint8; float8 travels as its
            # uint8 bits
            dtype = expect
        if dtype is None or lanes != 1:
            raise InvalidArgumentError(
                f"{what}: DLPack dtype (code {code}, {bits} bits, {lanes} "
                f"lanes) has no tensorjit equivalent")
        ndim = int(dl.ndim)
        if ndim < 0 or ndim > _lib.MAX_RANK:
            raise InvalidArgumentError(f"{what}: rank {ndim} is outside "
                                       f"[0, {_lib.MAX_RANK}]")
        # Copy shape and strides: they belong to the producer.
        shape = (ctypes.c_int64 * max(ndim, 1))(*dl.shape[:ndim])
        strides = None
        if dl.strides:
            strides = (ctypes.c_int64 * max(ndim, 1))(*dl.strides[:ndim])
        if t is None:
            t = _lib.Tensor_t()
        t.data = dl.data
        t.device_type = device_type
        t.device_id = int(dl.device.device_id)
        t.dtype = int(dtype)
        t.rank = ndim
        t.shape = shape
        t.strides = strides
        t.byte_offset = int(dl.byte_offset)
        self.keep.extend((shape, strides))
        return t, dtype, device_type

    #===--- anything ---===#

    def tensor(self, obj: Any, what: str, expect: Optional[DType],
               writable: bool = False, t: Optional[_lib.Tensor_t] = None
               ) -> Tuple[_lib.Tensor_t, DType, int]:
        """A tensor for |obj| (written into |t| when given): numpy array,
        DLPack producer or capsule, or (inputs only) anything numpy.asarray
        takes, converted to |expect|."""
        if isinstance(obj, np.ndarray):
            if writable and not obj.flags.writeable:
                raise InvalidArgumentError(f"{what}: the array is read-only")
            t, dtype = self.from_numpy(obj, what, expect, t)
            if writable and t.data is not None and \
                    obj.__array_interface__["data"][0] != t.data:
                raise InvalidArgumentError(
                    f"{what}: this layout would need a copy; pass a "
                    f"contiguous or element-strided array")
            return t, dtype, _lib.DEVICE_CPU
        if is_dlpack(obj):
            return self.from_dlpack(obj, what, expect, writable, t)
        if writable:
            raise ArgumentTypeError(
                f"{what}: expected a numpy array or a DLPack tensor, got "
                f"{type(obj).__name__}")
        if isinstance(obj, (str, bytes)) or obj is None:
            raise ArgumentTypeError(
                f"{what}: expected an array, got {type(obj).__name__}")
        try:
            arr = np.asarray(obj, dtype=numpy_dtype(expect) if expect is not
                             None else None)
        except (TypeError, ValueError, OverflowError) as e:
            raise ArgumentTypeError(f"{what}: cannot make an array of "
                                    f"{type(obj).__name__}: {e}") from None
        if arr.dtype == object:
            raise ArgumentTypeError(f"{what}: cannot make an array of "
                                    f"{type(obj).__name__}")
        t, dtype = self.from_numpy(arr, what, expect, t)
        return t, dtype, _lib.DEVICE_CPU


def byte_extent(t: _lib.Tensor_t) -> Optional[Tuple[int, int]]:
    """[lo, hi) bytes that |t| touches; None when empty."""
    if not t.data:
        return None
    size = DType(t.dtype).itemsize
    lo = hi = int(t.data) + int(t.byte_offset)
    contiguous = 1
    for d in reversed(range(t.rank)):
        n = int(t.shape[d])
        if n == 0:
            return None
        stride = int(t.strides[d]) if t.strides else contiguous
        contiguous *= n
        span = (n - 1) * stride * size
        if span < 0:
            lo += span
        else:
            hi += span
    return (lo, hi + size)


def overlaps(a: _lib.Tensor_t, b: _lib.Tensor_t) -> bool:
    if a.device_type != b.device_type or a.device_id != b.device_id:
        return False
    ea, eb = byte_extent(a), byte_extent(b)
    return ea is not None and eb is not None and ea[0] < eb[1] and \
        eb[0] < ea[1]


def as_index(value: Any, what: str) -> int:
    """|value| as a Python int (numpy ints too), or ArgumentTypeError."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{what}: expected an integer, got a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{what}: expected an integer, got "
                                f"{type(value).__name__}") from None
