"""Exceptions: every non-OK ``tj_status_t`` becomes one of these.

The class follows the status code, so callers can catch what they can act
on::

    try:
        exe(x_wrong_shape, w, b)
    except tensorjit.InvalidArgumentError as e:
        print(e.code, e.message)   # "INVALID_ARGUMENT", "input x dim 1 ..."

Every class derives from :class:`TensorJitError`; each also derives from the
closest built-in exception (``ValueError``, ``MemoryError``, ...) so generic
handlers keep working. Wrong Python argument types are reported as
:class:`ArgumentTypeError`, which is both an ``InvalidArgumentError`` and a
``TypeError``.
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
    "TensorJitError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "OutOfMemoryError",
    "UnsupportedError",
    "BackendError",
    "InternalError",
    "LibraryNotFoundError",
    "STATUS_CODES",
]

# tj_status_code_t, in enum order.
STATUS_CODES = ("OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "UNSUPPORTED",
                "BACKEND_FAILURE", "INTERNAL")


class TensorJitError(Exception):
    """A libtensorjit failure.

    Attributes:
        code: the status code name, e.g. ``"INVALID_ARGUMENT"``.
        code_value: the numeric ``tj_status_code_t``.
        message: the library's message (names the op, node and shapes).
    """

    code: str = "INTERNAL"

    def __init__(self, message: str, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"{self.code}: {message}")

    @property
    def code_value(self) -> int:
        try:
            return STATUS_CODES.index(self.code)
        except ValueError:
            return -1


class InvalidArgumentError(TensorJitError, ValueError):
    """TJ_STATUS_INVALID_ARGUMENT: the caller's input is wrong."""

    code = "INVALID_ARGUMENT"


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """A Python argument of the wrong type (caught before reaching C)."""


class OutOfMemoryError(TensorJitError, MemoryError):
    """TJ_STATUS_OUT_OF_MEMORY: a host or device allocation failed."""

    code = "OUT_OF_MEMORY"


class UnsupportedError(TensorJitError, NotImplementedError):
    """TJ_STATUS_UNSUPPORTED: valid, but this build or backend can't."""

    code = "UNSUPPORTED"


class BackendError(TensorJitError, RuntimeError):
    """TJ_STATUS_BACKEND_FAILURE: LLVM, the CUDA driver or libffi refused."""

    code = "BACKEND_FAILURE"


class InternalError(TensorJitError, RuntimeError):
    """TJ_STATUS_INTERNAL: a libtensorjit bug; please report it."""

    code = "INTERNAL"


class LibraryNotFoundError(TensorJitError, OSError):
    """libtensorjit.so could not be found or loaded."""

    code = "UNSUPPORTED"


_BY_CODE: Dict[int, Type[TensorJitError]] = {
    1: InvalidArgumentError,
    2: OutOfMemoryError,
    3: UnsupportedError,
    4: BackendError,
    5: InternalError,
}


def error_for_code(code: int, message: str) -> TensorJitError:
    """The exception for numeric status |code| with |message|."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return InternalError(f"unknown status code {code}: {message}")
    return cls(message)
