"""A tiny ctypes binding of libtensorjit's public C API, for the tests.

The library is the file named by the TJ_LIBRARY environment variable (meson
sets it to the built libtensorjit.so). Arrays cross as numpy arrays: f16 is
numpy.float16, bf16 is numpy.uint16 holding the raw bits, bool is numpy.bool_
(one byte, 0 or 1). Strided numpy arrays are passed with their strides.
"""
import ctypes
import os

import numpy as np

F32, F16, BF16, F64, I8, I32, I64, BOOL = range(8)
DTYPES = {"f32": F32, "f16": F16, "bf16": BF16, "f64": F64, "i8": I8,
          "i32": I32, "i64": I64, "bool": BOOL}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
NUMPY_DTYPES = {F32: np.float32, F16: np.float16, BF16: np.uint16,
                F64: np.float64, I8: np.int8, I32: np.int32, I64: np.int64,
                BOOL: np.bool_}
FLOATS = (F32, F16, BF16, F64)
INTS = (I8, I32, I64)

STATUS_NAMES = ["OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "UNSUPPORTED",
                "BACKEND_FAILURE", "INTERNAL"]
DEVICE_CPU = 1
MAX_RANK = 8


class Value(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int),
                ("device_id", ctypes.c_int32), ("dtype", ctypes.c_int),
                ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class Error(Exception):
    """A non-OK tj_status_t: .code (e.g. "INVALID_ARGUMENT"), .message."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


_lib = None


def lib():
    global _lib
    if _lib is None:
        path = os.environ.get("TJ_LIBRARY")
        if not path:
            raise RuntimeError("set TJ_LIBRARY to the path of libtensorjit.so")
        handle = ctypes.CDLL(path)
        _declare(handle)
        _lib = handle
    return _lib


def _declare(L):
    vp, i32, i64, u32 = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                         ctypes.c_uint32)
    p64 = ctypes.POINTER(ctypes.c_int64)
    p32 = ctypes.POINTER(ctypes.c_int32)
    cstr = ctypes.c_char_p
    sig = {
        "tj_status_code": (ctypes.c_int, [vp]),
        "tj_status_message": (cstr, [vp]),
        "tj_status_free": (None, [vp]),
        "tj_context_create": (vp, [vp, ctypes.POINTER(vp)]),
        "tj_context_destroy": (None, [vp]),
        "tj_context_free_string": (None, [vp, vp]),
        "tj_graph_create": (vp, [vp, cstr, ctypes.POINTER(vp)]),
        "tj_graph_destroy": (None, [vp]),
        "tj_graph_finalize": (vp, [vp]),
        "tj_graph_print": (vp, [vp, ctypes.POINTER(vp)]),
        "tj_graph_symbol": (i64, [vp, cstr]),
        "tj_graph_dim_add": (i64, [vp, i64, i64]),
        "tj_graph_dim_mul": (i64, [vp, i64, i64]),
        "tj_graph_input": (Value, [vp, ctypes.c_int, i32, p64, cstr]),
        "tj_graph_constant": (Value, [vp, ctypes.c_int, i32, p64, vp,
                                ctypes.c_size_t]),
        "tj_graph_scalar": (Value, [vp, ctypes.c_int, ctypes.c_double]),
        "tj_graph_full": (Value, [vp, ctypes.c_int, i32, p64,
                                  ctypes.c_double]),
        "tj_graph_iota": (Value, [vp, ctypes.c_int, i32, p64, i32]),
        "tj_graph_output": (None, [vp, Value, cstr]),
        "tj_graph_where": (Value, [vp, Value, Value, Value]),
        "tj_graph_cast": (Value, [vp, Value, ctypes.c_int]),
        "tj_graph_argmax": (Value, [vp, Value, i32, ctypes.c_bool]),
        "tj_graph_argmin": (Value, [vp, Value, i32, ctypes.c_bool]),
        "tj_graph_reshape": (Value, [vp, Value, i32, p64]),
        "tj_graph_transpose": (Value, [vp, Value, p32]),
        "tj_graph_broadcast_to": (Value, [vp, Value, i32, p64]),
        "tj_graph_slice": (Value, [vp, Value, p64, p64, p64]),
        "tj_graph_concat": (Value, [vp, i32, ctypes.POINTER(Value), i32]),
        "tj_graph_pad": (Value, [vp, Value, p64, p64, ctypes.c_double]),
        "tj_graph_gather": (Value, [vp, Value, Value, i32]),
        "tj_graph_gather_elements": (Value, [vp, Value, Value, i32]),
        "tj_graph_gather_nd": (Value, [vp, Value, Value, i32]),
        "tj_graph_cumsum": (Value, [vp, Value, i32, ctypes.c_bool,
                                    ctypes.c_bool]),
        "tj_graph_cumprod": (Value, [vp, Value, i32, ctypes.c_bool,
                                     ctypes.c_bool]),
        "tj_graph_scatter_elements": (Value, [vp, Value, Value, Value, i32,
                                              i32]),
        "tj_graph_scatter_nd": (Value, [vp, Value, Value, Value, i32]),
        "tj_graph_gelu": (Value, [vp, Value, ctypes.c_bool]),
        "tj_graph_softmax": (Value, [vp, Value, i32]),
        "tj_graph_log_softmax": (Value, [vp, Value, i32]),
        "tj_graph_layer_norm": (Value, [vp, Value, Value, Value,
                                        ctypes.c_double]),
        "tj_graph_rms_norm": (Value, [vp, Value, Value, ctypes.c_double]),
        "tj_graph_linear": (Value, [vp, Value, Value, Value]),
        "tj_graph_num_outputs": (i32, [vp]),
        "tj_graph_value_dtype": (ctypes.c_int, [vp, Value]),
        "tj_graph_value_rank": (i32, [vp, Value]),
        "tj_graph_value_dims": (None, [vp, Value, p64]),
        "tj_graph_output_shape": (vp, [vp, ctypes.POINTER(Tensor), i32, i32,
                                       p32, p64]),
        "tj_reference_run": (vp, [vp, ctypes.POINTER(Tensor), i32,
                                  ctypes.POINTER(Tensor), i32]),
    }
    # The builders of a shared form come from the library's op table.
    for name, (restype, argtypes) in {
            "tj_op_count": (i32, []), "tj_op_builder": (cstr, [i32]),
            "tj_op_form": (ctypes.c_int, [i32])}.items():
        fn = getattr(L, name)
        fn.restype = restype
        fn.argtypes = argtypes
    form_argtypes = {
        FORM_UNARY: [vp, Value], FORM_BINARY: [vp, Value, Value],
        FORM_REDUCE: [vp, Value, i32, p32, ctypes.c_bool]}
    for op in range(L.tj_op_count()):
        form = L.tj_op_form(op)
        if form in form_argtypes:
            name = L.tj_op_builder(op).decode()
            BUILDER_FORMS[name] = form
            sig["tj_graph_" + name] = (Value, form_argtypes[form])
    for name, (restype, argtypes) in sig.items():
        if name in OPTIONAL and not hasattr(L, name):
            continue
        fn = getattr(L, name)
        fn.restype = restype
        fn.argtypes = argtypes


# Not needed by the reference tests; declared when the library has them.
OPTIONAL = {"tj_graph_print"}

# tj_op_form_t, and builder name -> form of every builder of a shared form
# (filled from the library by lib()).
FORM_UNARY, FORM_BINARY, FORM_REDUCE = 1, 2, 3
BUILDER_FORMS = {}


def check(status):
    """Raises Error for a non-NULL status (and frees it)."""
    if not status:
        return
    L = lib()
    code = L.tj_status_code(status)
    message = L.tj_status_message(status).decode()
    L.tj_status_free(status)
    raise Error(STATUS_NAMES[code] if code < len(STATUS_NAMES) else str(code),
                message)


def _i64s(values):
    values = list(values)
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def _i32s(values):
    values = list(values)
    return (ctypes.c_int32 * max(len(values), 1))(*values)


class Context:
    def __init__(self):
        self.handle = ctypes.c_void_p()
        check(lib().tj_context_create(None, ctypes.byref(self.handle)))

    def close(self):
        if self.handle:
            lib().tj_context_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self):
        self.close()


_default_context = None


def default_context():
    global _default_context
    if _default_context is None:
        _default_context = Context()
    return _default_context


class Graph:
    """A graph under construction; builder methods return Value handles."""

    def __init__(self, name="main", context=None):
        self.context = context or default_context()
        self.handle = ctypes.c_void_p()
        self._keep = []  # borrowed constant buffers
        check(lib().tj_graph_create(self.context.handle, name.encode(),
                                    ctypes.byref(self.handle)))

    def close(self):
        if self.handle:
            lib().tj_graph_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def __getattr__(self, name):
        # Plain builder calls with the graph as first argument:
        # g.add(a, b), g.relu(a), ...
        if BUILDER_FORMS.get(name) in (FORM_UNARY, FORM_BINARY) or name in (
                "where", "linear"):
            fn = getattr(lib(), "tj_graph_" + name)
            return lambda *args: fn(self.handle, *args)
        raise AttributeError(name)

    # leaves and outputs
    def symbol(self, name):
        return lib().tj_graph_symbol(self.handle, name.encode())

    def dim_add(self, a, b):
        return lib().tj_graph_dim_add(self.handle, a, b)

    def dim_mul(self, a, b):
        return lib().tj_graph_dim_mul(self.handle, a, b)

    def input(self, dtype, dims, name):
        return lib().tj_graph_input(self.handle, dtype, len(dims),
                                    _i64s(dims), name.encode())

    def constant(self, dtype, array):
        array = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[dtype])
        return lib().tj_graph_constant(self.handle, dtype, array.ndim,
                                       _i64s(array.shape),
                                       array.ctypes.data_as(ctypes.c_void_p),
                                       array.nbytes)

    def scalar(self, dtype, value):
        return lib().tj_graph_scalar(self.handle, dtype, value)

    def full(self, dtype, dims, value):
        return lib().tj_graph_full(self.handle, dtype, len(dims), _i64s(dims),
                                   value)

    def iota(self, dtype, dims, axis):
        return lib().tj_graph_iota(self.handle, dtype, len(dims), _i64s(dims),
                                   axis)

    def output(self, value, name):
        lib().tj_graph_output(self.handle, value, name.encode())

    # ops with attributes
    def cast(self, a, dtype):
        return lib().tj_graph_cast(self.handle, a, dtype)

    def reduce(self, op, a, axes=(), keepdims=False):
        return getattr(lib(), "tj_graph_" + op)(self.handle, a, len(axes),
                                                _i32s(axes), keepdims)

    def argmax(self, a, axis, keepdims=False):
        return lib().tj_graph_argmax(self.handle, a, axis, keepdims)

    def argmin(self, a, axis, keepdims=False):
        return lib().tj_graph_argmin(self.handle, a, axis, keepdims)

    def reshape(self, a, dims):
        return lib().tj_graph_reshape(self.handle, a, len(dims), _i64s(dims))

    def transpose(self, a, perm):
        return lib().tj_graph_transpose(self.handle, a, _i32s(perm))

    def broadcast_to(self, a, dims):
        return lib().tj_graph_broadcast_to(self.handle, a, len(dims),
                                           _i64s(dims))

    def slice(self, a, starts, stops, steps=None):
        return lib().tj_graph_slice(self.handle, a, _i64s(starts),
                                    _i64s(stops),
                                    None if steps is None else _i64s(steps))

    def concat(self, values, axis):
        arr = (Value * max(len(values), 1))(*values)
        return lib().tj_graph_concat(self.handle, len(values), arr, axis)

    def pad(self, a, low, high, value=0.0):
        return lib().tj_graph_pad(self.handle, a, _i64s(low), _i64s(high),
                                  value)

    def gather(self, a, indices, axis):
        return lib().tj_graph_gather(self.handle, a, indices, axis)

    def gather_elements(self, a, indices, axis):
        return lib().tj_graph_gather_elements(self.handle, a, indices, axis)

    def gather_nd(self, a, indices, batch_dims):
        return lib().tj_graph_gather_nd(self.handle, a, indices, batch_dims)

    def cumsum(self, a, axis, exclusive=False, reverse=False):
        return lib().tj_graph_cumsum(self.handle, a, axis, exclusive, reverse)

    def cumprod(self, a, axis, exclusive=False, reverse=False):
        return lib().tj_graph_cumprod(self.handle, a, axis, exclusive, reverse)

    def scatter_elements(self, a, indices, updates, axis, reduction=0):
        return lib().tj_graph_scatter_elements(self.handle, a, indices,
                                               updates, axis, reduction)

    def scatter_nd(self, a, indices, updates, reduction=0):
        return lib().tj_graph_scatter_nd(self.handle, a, indices, updates,
                                         reduction)

    def gelu(self, x, approximate=False):
        return lib().tj_graph_gelu(self.handle, x, approximate)

    def softmax(self, x, axis):
        return lib().tj_graph_softmax(self.handle, x, axis)

    def log_softmax(self, x, axis):
        return lib().tj_graph_log_softmax(self.handle, x, axis)

    def layer_norm(self, x, gamma=None, beta=None, eps=1e-5):
        return lib().tj_graph_layer_norm(self.handle, x, gamma or Value(0),
                                         beta or Value(0), eps)

    def rms_norm(self, x, gamma=None, eps=1e-6):
        return lib().tj_graph_rms_norm(self.handle, x, gamma or Value(0), eps)

    def finalize(self):
        check(lib().tj_graph_finalize(self.handle))

    def text(self):
        out = ctypes.c_void_p()
        check(lib().tj_graph_print(self.handle, ctypes.byref(out)))
        s = ctypes.cast(out, ctypes.c_char_p).value.decode()
        lib().tj_context_free_string(self.context.handle, out)
        return s

    # reading
    def value_type(self, value):
        L = lib()
        dims = (ctypes.c_int64 * MAX_RANK)()
        L.tj_graph_value_dims(self.handle, value, dims)
        rank = L.tj_graph_value_rank(self.handle, value)
        return L.tj_graph_value_dtype(self.handle, value), list(dims[:rank])

    # running
    def output_shape(self, inputs, index):
        tensors, _ = tensors_of(inputs)
        rank = ctypes.c_int32()
        dims = (ctypes.c_int64 * MAX_RANK)()
        check(lib().tj_graph_output_shape(self.handle, tensors, len(inputs),
                                          index, ctypes.byref(rank), dims))
        return tuple(dims[:rank.value])

    def run_into(self, inputs, outputs):
        """tj_reference_run with caller-made output arrays (may be strided)."""
        in_t, _k1 = tensors_of(inputs)
        out_t, _k2 = tensors_of(outputs)
        check(lib().tj_reference_run(self.handle, in_t, len(inputs), out_t,
                                     len(outputs)))

    def run(self, inputs):
        """Runs on the reference interpreter; returns the output arrays."""
        L = lib()
        outputs = []
        for k in range(L.tj_graph_num_outputs(self.handle)):
            shape = self.output_shape(inputs, k)
            dtype = output_dtype(self, k)
            outputs.append(np.zeros(shape, dtype=NUMPY_DTYPES[dtype]))
        self.run_into(inputs, outputs)
        return outputs


def output_dtype(graph, index):
    L = lib()
    if not hasattr(L, "_tj_output_value"):
        L.tj_graph_output_value.restype = Value
        L.tj_graph_output_value.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        L._tj_output_value = True
    v = L.tj_graph_output_value(graph.handle, index)
    return L.tj_graph_value_dtype(graph.handle, v)


def dtype_of_array(a):
    for code, npd in NUMPY_DTYPES.items():
        if code != BF16 and a.dtype == npd:
            return code
    if a.dtype == np.uint16:
        return BF16
    raise TypeError(f"no tensorjit dtype for {a.dtype}")


def tensor_of(array, dtype=None):
    """A Tensor describing numpy |array| (strided); returns (tensor, keep)."""
    dtype = dtype_of_array(array) if dtype is None else dtype
    shape = _i64s(array.shape)
    item = array.itemsize
    if any(s % item for s in array.strides):
        raise ValueError("strides must be multiples of the element size")
    strides = _i64s([s // item for s in array.strides])
    t = Tensor()
    t.data = array.ctypes.data if array.size else None
    t.device_type = DEVICE_CPU
    t.device_id = 0
    t.dtype = dtype
    t.rank = array.ndim
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    return t, (array, shape, strides)


def tensors_of(arrays):
    n = max(len(arrays), 1)
    tensors = (Tensor * n)()
    keep = []
    for i, a in enumerate(arrays):
        if isinstance(a, Tensor):
            tensors[i] = a
        else:
            tensors[i], k = tensor_of(a)
            keep.append(k)
    return tensors, keep
