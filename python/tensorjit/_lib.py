"""Finding libtensorjit.so and declaring its C API for ctypes.

Search order (the first that loads wins):

1. ``$TJ_LIBRARY``: an explicit path, so a build tree can be tested without
   installing (the test suite sets it). An explicit override beats a bundled
   copy; if it is set but does not load, that is an error, not a fallback.
2. ``libtensorjit.so*`` next to this file: the copy ``pip install ./python``
   bundles (see ``python/tj_build_backend.py``).
3. The system: ``ctypes.util.find_library("tensorjit")`` and
   ``libtensorjit.so.0`` through the dynamic loader (``meson install`` into
   a prefix the loader searches, or ``LD_LIBRARY_PATH``).

Every function is declared with its exact argument and result types, so a
wrong Python argument is a ``ctypes.ArgumentError`` at the boundary, never a
bad pointer in C. The binding never calls a function with a pointer it has
not sized itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

from .errors import LibraryNotFoundError, error_for_code

MAX_RANK = 8  # TJ_MAX_RANK
DIM_INFER = -1  # TJ_DIM_INFER
DIM_INVALID = -(2**63)  # TJ_DIM_INVALID
DEVICE_CPU = 1
DEVICE_CUDA = 2

vp = ctypes.c_void_p
i32 = ctypes.c_int32
i64 = ctypes.c_int64
cstr = ctypes.c_char_p
cbool = ctypes.c_bool
cdouble = ctypes.c_double
cenum = ctypes.c_int
p64 = ctypes.POINTER(ctypes.c_int64)
p32 = ctypes.POINTER(ctypes.c_int32)


class Value_t(ctypes.Structure):
    """tj_value_t."""

    _fields_ = [("id", ctypes.c_uint32)]


class ConvAttrs_t(ctypes.Structure):
    # tj_conv_attrs_t (tj_graph.h): conv, conv_transpose and the pools.
    _fields_ = [("kernel", ctypes.c_int64 * 3),
                ("strides", ctypes.c_int64 * 3),
                ("dilations", ctypes.c_int64 * 3),
                ("pads_begin", ctypes.c_int64 * 3),
                ("pads_end", ctypes.c_int64 * 3),
                ("output_padding", ctypes.c_int64 * 3),
                ("groups", ctypes.c_int64),
                ("ceil_mode", ctypes.c_bool),
                ("count_include_pad", ctypes.c_bool),
                ("p", ctypes.c_double),
                ("channels_last", ctypes.c_bool)]


class QuantAttrs_t(ctypes.Structure):
    # tj_quant_attrs_t (tj_graph.h): quantize and dequantize (issue 17).
    _fields_ = [("dtype", cenum),
                ("axis", i32),
                ("block_size", ctypes.c_int64),
                ("no_saturate", ctypes.c_bool),
                ("int4", cenum),
                ("odd", ctypes.c_bool)]


class Tensor_t(ctypes.Structure):
    """tj_tensor_t: the fields of DLPack's DLTensor."""

    _fields_ = [("data", vp), ("device_type", cenum), ("device_id", i32),
                ("dtype", cenum), ("rank", i32), ("shape", p64),
                ("strides", p64), ("byte_offset", ctypes.c_uint64)]


class QuantizeWeightsOptions_t(ctypes.Structure):
    """tj_quantize_weights_options_t (tj_quant.h)."""

    _fields_ = [("format", ctypes.c_uint32), ("group_size", i64),
                ("min_elements", i64), ("flags", ctypes.c_uint32)]


class CalibrateOptions_t(ctypes.Structure):
    """tj_calibrate_options_t (tj_quant.h)."""

    _fields_ = [("method", ctypes.c_uint32), ("percentile", cdouble),
                ("dtype", cenum), ("flags", ctypes.c_uint32)]


class CustomAttrs_t(ctypes.Structure):
    """tj_custom_attrs_t."""

    _fields_ = [("num_ints", i32), ("ints", p64), ("num_floats", i32),
                ("floats", ctypes.POINTER(cdouble))]


ALLOC_FN = ctypes.CFUNCTYPE(vp, vp, vp, ctypes.c_size_t, ctypes.c_size_t)
DIAGNOSTIC_FN = ctypes.CFUNCTYPE(None, cenum, ctypes.POINTER(ctypes.c_char),
                                 ctypes.c_size_t, vp)


class Allocator_t(ctypes.Structure):
    _fields_ = [("fn", vp), ("user_data", vp)]


class ContextOptions_t(ctypes.Structure):
    """tj_context_options_t (tests/python/test_layout.py checks the layout)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("allocator", Allocator_t),
                ("diagnostic_fn", DIAGNOSTIC_FN), ("diagnostic_user_data", vp),
                ("log", cstr), ("print_after", cstr), ("dump_dir", cstr),
                ("x86_isa", cstr), ("cache_dir", cstr), ("openblas", cstr),
                ("cuda_gemm_candidate", cstr), ("retain_compiled", i32)]


class X86CompileOptions_t(ctypes.Structure):
    """tj_x86_compile_options_t."""

    _fields_ = [("num_threads", i32), ("parallel_for", vp),
                ("parallel_for_user_data", vp), ("autotune_budget_ms", i32)]


class CudaCompileOptions_t(ctypes.Structure):
    """tj_cuda_compile_options_t."""

    _fields_ = [("device", i32), ("stream", vp), ("disable_graphs", cbool),
                ("precise_math", cbool), ("allow_tf32", cbool)]


class CompileOptions_t(ctypes.Structure):
    """tj_compile_options_t (tests/python/test_layout.py checks the layout)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("target", cenum),
                ("specialize", cenum), ("specialize_after", i32),
                ("bucket_pow2", cbool), ("autotune", cenum),
                ("cache_dir", cstr), ("pipeline", cstr),
                ("verify_each", cbool), ("x86", X86CompileOptions_t),
                ("cuda", CudaCompileOptions_t), ("unfused", cbool),
                ("bisect", cstr)]


class ProfileEntry_t(ctypes.Structure):
    """tj_profile_entry_t."""

    _fields_ = [("kind", cenum), ("name", ctypes.c_char * 224),
                ("detail", ctypes.c_char * 96), ("ms", cdouble),
                ("share", cdouble), ("launches", cdouble),
                ("bytes", cdouble), ("flops", cdouble),
                ("gbytes_per_s", cdouble), ("gflops_per_s", cdouble)]


class ProfileReport_t(ctypes.Structure):
    """tj_profile_report_t."""

    _fields_ = [("graph", ctypes.c_char * 128), ("target", cstr),
                ("runs", i32), ("run_ms", cdouble), ("kernel_ms", cdouble),
                ("host_ms", cdouble), ("copy_ms", cdouble),
                ("setup_ms", cdouble), ("accounted_ms", cdouble),
                ("num_kernels", i32), ("cuda_graphs_disabled", cbool),
                ("num_entries", i32),
                ("entries", ctypes.POINTER(ProfileEntry_t)),
                ("allocator", Allocator_t), ("bytes", ctypes.c_size_t)]


class ExecutableStats_t(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_kernels", i32),
                ("num_graph_breaks", i32), ("compile_ms", cdouble),
                ("cache_hits", i64), ("cache_misses", i64),
                ("recompiles", i64), ("runs", i64),
                ("num_host_calls", i32), ("passes_ms", cdouble),
                ("lowering_ms", cdouble), ("llvm_ms", cdouble),
                ("ptxas_ms", cdouble), ("tuning_ms", cdouble),
                ("cache_load_ms", cdouble), ("run_ms", cdouble),
                ("num_shared_kernels", i32),
                ("device_reserved_bytes", i64),
                ("device_allocated_bytes", i64),
                ("device_peak_reserved_bytes", i64),
                ("device_peak_allocated_bytes", i64),
                ("device_arena_bytes", i64),
                ("num_lowered_groups", i32), ("num_copied_groups", i32),
                ("num_region_blocks", i32),
                ("num_region_blocks_processed", i32),
                ("num_host_kernels", i32)]


DTYPE_COUNT = 23  # TJ_DTYPE_COUNT_


class VerifyOptions_t(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("rtol", cdouble * DTYPE_COUNT),
                ("atol", cdouble * DTYPE_COUNT),
                ("drift_factor", cdouble), ("num_symbols", i32),
                ("symbol_names", ctypes.POINTER(cstr)),
                ("symbol_values", ctypes.POINTER(i64)),
                ("seed", ctypes.c_uint64), ("edge_values", cbool),
                ("nonfinite", cbool), ("unfused", cbool)]


class VerifyValue_t(ctypes.Structure):
    _fields_ = [("step", i32), ("group", i32),
                ("group_kind", ctypes.c_char * 16), ("node", ctypes.c_uint32),
                ("op", ctypes.c_char * 24), ("type", ctypes.c_char * 96),
                ("output_name", ctypes.c_char * 64),
                ("against_caller", cbool), ("numel", i64),
                ("mismatches", i64), ("nan_mismatches", i64),
                ("max_abs_error", cdouble), ("max_rel_error", cdouble),
                ("first_bad_index", i64), ("first_bad_got", cdouble),
                ("first_bad_want", cdouble), ("rtol", cdouble),
                ("atol", cdouble), ("first_bad_condition", cdouble)]


class VerifyReport_t(ctypes.Structure):
    _fields_ = [("verdict", cenum), ("target", ctypes.c_char * 16),
                ("boundaries", cbool), ("num_groups", ctypes.c_uint32),
                ("num_values", ctypes.c_uint32),
                ("values", ctypes.POINTER(VerifyValue_t)),
                ("first_bad", i32), ("total_mismatches", i64),
                ("max_abs_error", cdouble), ("max_rel_error", cdouble),
                ("unfused_ran", cbool), ("unfused_within_budget", cbool),
                ("unfused_max_abs_error", cdouble),
                ("unfused_max_rel_error", cdouble),
                ("unfused_mismatches", i64),
                ("fused_unfused_mismatches", i64),
                ("blamed_pass", ctypes.c_char * 16),
                ("blamed_pass_index", i32), ("text", cstr),
                ("allocator_", Allocator_t), ("text_bytes_", ctypes.c_size_t)]


LADDER_LEVEL_COUNT = 5  # TJ_LADDER_LEVEL_COUNT_


class LadderRung_t(ctypes.Structure):
    _fields_ = [("level", cenum), ("ran", cbool), ("diverges", cbool),
                ("mismatches", i64), ("max_abs_error", cdouble),
                ("max_rel_error", cdouble), ("compile_ms", cdouble),
                ("first_value", ctypes.c_char * 192),
                ("note", ctypes.c_char * 256)]


class LadderReport_t(ctypes.Structure):
    _fields_ = [("rungs", LadderRung_t * LADDER_LEVEL_COUNT),
                ("first_diverging", i32), ("blame", ctypes.c_char * 24),
                ("blamed_pass", ctypes.c_char * 16),
                ("blamed_pass_index", i32), ("pass_rewrites", i64),
                ("bad_rewrite", i64),
                ("bad_rewrite_node", ctypes.c_char * 160), ("text", cstr),
                ("allocator_", Allocator_t), ("text_bytes_", ctypes.c_size_t)]


DIAGNOSE_QUESTION_COUNT = 8


class DiagnoseAnswer_t(ctypes.Structure):
    _fields_ = [("yes", cbool), ("question", ctypes.c_char * 32),
                ("measured", ctypes.c_char * 1024),
                ("advice", ctypes.c_char * 96)]


class DiagnoseReport_t(ctypes.Structure):
    _fields_ = [("answers", DiagnoseAnswer_t * DIAGNOSE_QUESTION_COUNT),
                ("target", ctypes.c_char * 16), ("runs", i32),
                ("run_ms", cdouble), ("grown_run_ms", cdouble),
                ("host_ms", cdouble), ("kernel_ms", cdouble),
                ("eager_kernels", i64), ("kernels", i32),
                ("graph_breaks", i32), ("recompiles", i64),
                ("arena_bytes", i64), ("live_peak_bytes", i64),
                ("device_reserved_bytes", i64),
                ("device_allocated_bytes", i64),
                ("compile_ms", cdouble), ("unfused_run_ms", cdouble),
                ("break_even_runs", i64), ("text", cstr),
                ("allocator_", Allocator_t), ("text_bytes_", ctypes.c_size_t)]


STAGE_COUNT = 5


class ScoreboardRow_t(ctypes.Structure):
    _fields_ = [("stage", cenum), ("nodes", i64), ("kernels", i64),
                ("bytes_read", i64), ("bytes_written", i64),
                ("peak_bytes", i64), ("graph_breaks", i64),
                ("percent_compiled", cdouble), ("host_calls", i64),
                ("weight_bytes_read", i64)]


class Scoreboard_t(ctypes.Structure):
    _fields_ = [("rows", ScoreboardRow_t * STAGE_COUNT),
                ("activation_bytes", i64), ("input_bytes", i64),
                ("arena_bytes", i64), ("live_peak_bytes", i64)]


class PartitionOptions_t(ctypes.Structure):
    """tj_partition_options_t (tj_autodiff.h)."""

    _fields_ = [("recompute", cenum), ("num_symbols", i32),
                ("symbol_names", ctypes.POINTER(cstr)),
                ("symbol_values", ctypes.POINTER(i64)),
                ("save_attention_lse", ctypes.c_bool)]


class PartitionStats_t(ctypes.Structure):
    """tj_partition_stats_t (tj_autodiff.h)."""

    _fields_ = [("saved_bytes", i64), ("num_saved", i32),
                ("saved_output_bytes", i64), ("saved_input_bytes", i64),
                ("num_saved_inputs", i32), ("num_recomputed", i32)]


_SIGNATURES = {
    "tj_version_number": (ctypes.c_uint32, []),
    "tj_version_string": (cstr, []),
    "tj_status_code": (cenum, [vp]),
    "tj_status_message": (cstr, [vp]),
    "tj_status_code_name": (cstr, [cenum]),
    "tj_status_free": (None, [vp]),
    "tj_allocator_system": (Allocator_t, []),
    "tj_dtype_name": (cstr, [cenum]),
    "tj_dtype_size": (ctypes.c_size_t, [cenum]),
    "tj_context_options_initialize": (None, [ctypes.POINTER(
        ContextOptions_t)]),
    "tj_context_create": (vp, [ctypes.POINTER(ContextOptions_t),
                               ctypes.POINTER(vp)]),
    "tj_context_destroy": (None, [vp]),
    "tj_context_wait_autotune": (None, [vp]),
    "tj_context_free_string": (None, [vp, vp]),
    "tj_graph_create": (vp, [vp, cstr, ctypes.POINTER(vp)]),
    "tj_graph_destroy": (None, [vp]),
    "tj_graph_context": (vp, [vp]),
    "tj_graph_finalize": (vp, [vp]),
    "tj_graph_status": (vp, [vp]),
    "tj_graph_symbol": (i64, [vp, cstr]),
    "tj_graph_dim_add": (i64, [vp, i64, i64]),
    "tj_graph_dim_mul": (i64, [vp, i64, i64]),
    "tj_graph_dim_sub": (i64, [vp, i64, i64]),
    "tj_graph_dim_div": (i64, [vp, i64, i64]),
    "tj_graph_input": (Value_t, [vp, cenum, i32, p64, cstr]),
    "tj_graph_constant": (Value_t, [vp, cenum, i32, p64, vp,
                                  ctypes.c_size_t]),
    "tj_graph_constant_borrowed": (Value_t, [vp, cenum, i32, p64, vp,
                                           ctypes.c_size_t]),
    "tj_graph_scalar": (Value_t, [vp, cenum, cdouble]),
    "tj_graph_full": (Value_t, [vp, cenum, i32, p64, cdouble]),
    "tj_graph_iota": (Value_t, [vp, cenum, i32, p64, i32]),
    "tj_graph_output": (None, [vp, Value_t, cstr]),
    "tj_graph_where": (Value_t, [vp, Value_t, Value_t, Value_t]),
    "tj_graph_cast": (Value_t, [vp, Value_t, cenum]),
    "tj_graph_bitcast": (Value_t, [vp, Value_t, cenum]),
    "tj_graph_argmax": (Value_t, [vp, Value_t, i32, cbool]),
    "tj_graph_argmin": (Value_t, [vp, Value_t, i32, cbool]),
    "tj_graph_reshape": (Value_t, [vp, Value_t, i32, p64]),
    "tj_graph_transpose": (Value_t, [vp, Value_t, p32]),
    "tj_graph_broadcast_to": (Value_t, [vp, Value_t, i32, p64]),
    "tj_graph_slice": (Value_t, [vp, Value_t, p64, p64, p64]),
    "tj_graph_concat": (Value_t, [vp, i32, ctypes.POINTER(Value_t), i32]),
    "tj_graph_pad": (Value_t, [vp, Value_t, p64, p64, cdouble]),
    "tj_graph_gather": (Value_t, [vp, Value_t, Value_t, i32]),
    "tj_graph_nonzero": (Value_t, [vp, Value_t]),
    "tj_graph_compress": (Value_t, [vp, Value_t, Value_t, cbool, i32]),
    "tj_graph_unique": (Value_t, [vp, Value_t, cbool, i32, cbool,
                                  ctypes.POINTER(Value_t),
                                  ctypes.POINTER(Value_t),
                                  ctypes.POINTER(Value_t)]),
    "tj_graph_non_max_suppression": (Value_t, [vp, Value_t, Value_t, Value_t,
                                               Value_t, Value_t, cbool]),
    "tj_graph_range": (Value_t, [vp, Value_t, Value_t, Value_t]),
    "tj_graph_range_count": (Value_t, [vp, Value_t, Value_t, Value_t]),
    "tj_graph_gather_elements": (Value_t, [vp, Value_t, Value_t, i32]),
    "tj_graph_gather_nd": (Value_t, [vp, Value_t, Value_t, i32]),
    "tj_graph_cumsum": (Value_t, [vp, Value_t, i32, cbool, cbool]),
    "tj_graph_cumprod": (Value_t, [vp, Value_t, i32, cbool, cbool]),
    "tj_graph_scatter_elements": (Value_t, [vp, Value_t, Value_t, Value_t,
                                            i32, i32]),
    "tj_graph_scatter_nd": (Value_t, [vp, Value_t, Value_t, Value_t, i32]),
    "tj_graph_argtopk": (Value_t, [vp, Value_t, i64, i32, cbool]),
    "tj_graph_topk": (Value_t, [vp, Value_t, i64, i32, cbool,
                                ctypes.POINTER(Value_t)]),
    "tj_graph_sort": (Value_t, [vp, Value_t, i32, cbool,
                                ctypes.POINTER(Value_t)]),
    "tj_graph_argsort": (Value_t, [vp, Value_t, i32, cbool]),
    "tj_graph_einsum": (Value_t, [vp, cstr, ctypes.POINTER(Value_t), i32]),
    "tj_graph_custom": (Value_t, [vp, cstr, ctypes.POINTER(Value_t), i32,
                                  ctypes.POINTER(CustomAttrs_t)]),
    "tj_graph_gelu": (Value_t, [vp, Value_t, cbool]),
    "tj_graph_softmax": (Value_t, [vp, Value_t, i32]),
    "tj_graph_log_softmax": (Value_t, [vp, Value_t, i32]),
    "tj_graph_layer_norm": (Value_t, [vp, Value_t, Value_t, Value_t,
                                      cdouble]),
    "tj_graph_rms_norm": (Value_t, [vp, Value_t, Value_t, cdouble]),
    "tj_graph_linear": (Value_t, [vp, Value_t, Value_t, Value_t]),
    "tj_graph_matmul_integer": (Value_t, [vp, Value_t, Value_t, Value_t,
                                          Value_t]),
    "tj_graph_attention": (Value_t, [vp, Value_t, Value_t, Value_t, Value_t,
                                     cdouble, cbool]),
    "tj_graph_attention_lse": (Value_t, [vp, Value_t, Value_t, Value_t,
                                         cdouble, cbool]),
    "tj_graph_attention_dq": (Value_t, [vp, Value_t, Value_t, Value_t,
                                        Value_t, Value_t, Value_t, Value_t,
                                        cdouble, cbool]),
    "tj_graph_attention_dkv": (Value_t, [vp, Value_t, Value_t, Value_t,
                                         Value_t, Value_t, Value_t, Value_t,
                                         cdouble, cbool]),
    "tj_graph_quantize": (Value_t, [vp, Value_t, Value_t, Value_t,
                                    ctypes.POINTER(QuantAttrs_t)]),
    "tj_graph_dequantize": (Value_t, [vp, Value_t, Value_t, Value_t,
                                      ctypes.POINTER(QuantAttrs_t)]),
    "tj_graph_one_hot": (Value_t, [vp, Value_t, Value_t, i64, i32]),
    "tj_graph_conv": (Value_t, [vp, Value_t, Value_t, Value_t,
                                ctypes.POINTER(ConvAttrs_t)]),
    "tj_graph_conv_transpose": (Value_t, [vp, Value_t, Value_t, Value_t,
                                          ctypes.POINTER(ConvAttrs_t)]),
    "tj_graph_max_pool": (Value_t, [vp, Value_t, ctypes.POINTER(ConvAttrs_t)]),
    "tj_graph_avg_pool": (Value_t, [vp, Value_t, ctypes.POINTER(ConvAttrs_t)]),
    "tj_graph_lp_pool": (Value_t, [vp, Value_t, ctypes.POINTER(ConvAttrs_t)]),
    "tj_graph_num_inputs": (i32, [vp]),
    "tj_graph_num_outputs": (i32, [vp]),
    "tj_graph_input_value": (Value_t, [vp, i32]),
    "tj_graph_output_value": (Value_t, [vp, i32]),
    "tj_graph_input_name": (cstr, [vp, i32]),
    "tj_graph_output_name": (cstr, [vp, i32]),
    "tj_graph_value_dtype": (cenum, [vp, Value_t]),
    "tj_graph_value_rank": (i32, [vp, Value_t]),
    "tj_graph_value_dims": (None, [vp, Value_t, p64]),
    "tj_graph_print": (vp, [vp, ctypes.POINTER(vp)]),
    "tj_graph_parse": (vp, [vp, cstr, ctypes.c_size_t, cstr,
                            ctypes.POINTER(vp)]),
    "tj_graph_output_shape": (vp, [vp, ctypes.POINTER(Tensor_t), i32, i32,
                                   p32, p64]),
    "tj_reference_run": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                              ctypes.POINTER(Tensor_t), i32]),
    "tj_reference_run_shaped": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                                     ctypes.POINTER(Tensor_t), i32, p64]),
    "tj_graph_output_is_data_dependent": (cbool, [vp, i32]),
    "tj_compile_options_initialize": (None, [ctypes.POINTER(
        CompileOptions_t)]),
    "tj_compile": (vp, [vp, ctypes.POINTER(CompileOptions_t),
                        ctypes.POINTER(vp)]),
    "tj_executable_retain": (None, [vp]),
    "tj_executable_release": (None, [vp]),
    "tj_executable_output_shape": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                                        i32, p32, p64]),
    "tj_executable_run": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                               ctypes.POINTER(Tensor_t), i32]),
    "tj_executable_run_shaped": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                                      ctypes.POINTER(Tensor_t), i32, p64]),
    "tj_executable_prepare": (vp, [vp, ctypes.POINTER(Tensor_t), i32]),
    "tj_executable_stats": (None, [vp, ctypes.POINTER(ExecutableStats_t)]),
    "tj_executable_profile": (vp, [vp, ctypes.POINTER(Tensor_t), i32,
                                   ctypes.POINTER(Tensor_t), i32, i32,
                                   ctypes.POINTER(ctypes.POINTER(
                                       ProfileReport_t))]),
    "tj_profile_report_destroy": (None, [ctypes.POINTER(ProfileReport_t)]),
    "tj_profile_report_format": (ctypes.c_size_t, [
        ctypes.POINTER(ProfileReport_t), i32, ctypes.c_char_p,
        ctypes.c_size_t]),
    "tj_verify_options_initialize": (None, [ctypes.POINTER(VerifyOptions_t)]),
    "tj_verify": (vp, [vp, vp, ctypes.POINTER(Tensor_t), i32,
                       ctypes.POINTER(VerifyOptions_t),
                       ctypes.POINTER(ctypes.POINTER(VerifyReport_t))]),
    "tj_verify_report_destroy": (None, [ctypes.POINTER(VerifyReport_t)]),
    "tj_verify_ladder": (vp, [vp, ctypes.POINTER(CompileOptions_t),
                              ctypes.POINTER(Tensor_t), i32,
                              ctypes.POINTER(VerifyOptions_t),
                              ctypes.POINTER(ctypes.POINTER(LadderReport_t))]),
    "tj_ladder_report_destroy": (None, [ctypes.POINTER(LadderReport_t)]),
    "tj_diagnose": (vp, [vp, ctypes.POINTER(CompileOptions_t), i32,
                         ctypes.POINTER(cstr), p64, i32,
                         ctypes.POINTER(ctypes.POINTER(DiagnoseReport_t))]),
    "tj_diagnose_report_destroy": (None, [ctypes.POINTER(DiagnoseReport_t)]),
    "tj_stage_name": (cstr, [cenum]),
    "tj_op_count": (i32, []),
    "tj_op_name": (cstr, [i32]),
    "tj_op_builder": (cstr, [i32]),
    "tj_op_form": (cenum, [i32]),
    "tj_graph_scoreboard": (vp, [vp, i32, ctypes.POINTER(cstr), p64,
                                 ctypes.POINTER(Scoreboard_t)]),
    "tj_graph_grad": (vp, [vp, i32, p32, i32, p32, ctypes.POINTER(vp)]),
    "tj_quantize_weights_options_initialize": (None, [ctypes.POINTER(
        QuantizeWeightsOptions_t)]),
    "tj_graph_quantize_weights": (vp, [vp, ctypes.POINTER(
        QuantizeWeightsOptions_t), ctypes.POINTER(vp), p32]),
    "tj_calibrate_options_initialize": (None, [ctypes.POINTER(
        CalibrateOptions_t)]),
    "tj_calibrate": (vp, [vp, ctypes.POINTER(CalibrateOptions_t), i32,
                          ctypes.POINTER(Tensor_t), ctypes.POINTER(vp), p32]),
    "tj_partition_options_initialize": (None, [ctypes.POINTER(
        PartitionOptions_t)]),
    "tj_graph_partition": (vp, [vp, i32, i32,
                                ctypes.POINTER(PartitionOptions_t),
                                ctypes.POINTER(vp), ctypes.POINTER(vp),
                                ctypes.POINTER(PartitionStats_t)]),
}

# The builders of a shared form (tj_op_form_t) are declared from the
# library's op table (lib/ops.def through tj_op_count, tj_op_builder and
# tj_op_form), so that no op list is kept here.
OP_FORM_UNARY, OP_FORM_BINARY, OP_FORM_REDUCE = 1, 2, 3
_FORM_ARGTYPES = {
    OP_FORM_UNARY: [vp, Value_t],
    OP_FORM_BINARY: [vp, Value_t, Value_t],
    OP_FORM_REDUCE: [vp, Value_t, i32, p32, cbool],
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None


def _candidates() -> List[str]:
    found: List[str] = []
    env = os.environ.get("TJ_LIBRARY")
    if env:
        return [env]  # explicit: no fallback that would hide a typo
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libtensorjit.so", "libtensorjit.so.*",
                    "libtensorjit.dylib"):
        found.extend(sorted(glob.glob(os.path.join(here, pattern))))
    system = ctypes.util.find_library("tensorjit")
    if system:
        found.append(system)
    found.extend(["libtensorjit.so.0", "libtensorjit.so"])
    return found


def _ops_of(handle: ctypes.CDLL) -> List[Tuple[str, str, int]]:
    """(.tj name, builder name, tj_op_form_t) of every op the library has."""
    return [(handle.tj_op_name(op).decode(),
             handle.tj_op_builder(op).decode(), handle.tj_op_form(op))
            for op in range(handle.tj_op_count())]


def _declare(handle: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(handle, name)  # AttributeError: not our library
        fn.restype = restype
        fn.argtypes = argtypes
    for _, builder, form in _ops_of(handle):
        if form in _FORM_ARGTYPES:
            fn = getattr(handle, "tj_graph_" + builder)
            fn.restype = Value_t
            fn.argtypes = _FORM_ARGTYPES[form]


def ops() -> List[Tuple[str, str, int]]:
    """The library's ops: (.tj name, tj_graph_ builder name, form), in
    lib/ops.def's order; form is OP_FORM_UNARY, _BINARY, _REDUCE or 0 (a
    builder of its own signature)."""
    return _ops_of(lib())


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads (once) and returns the library; |path| forces a file.

    Raises LibraryNotFoundError listing every place tried.
    """
    global _lib, _path
    with _lock:
        if _lib is not None and path is None:
            return _lib
        tried = []
        for candidate in ([path] if path else _candidates()):
            try:
                handle = ctypes.CDLL(candidate)
                _declare(handle)
            except (OSError, AttributeError) as e:
                tried.append(f"{candidate}: {e}")
                continue
            _lib, _path = handle, candidate
            return handle
        raise LibraryNotFoundError(
            "libtensorjit.so not found; set TJ_LIBRARY to its path, install "
            "the package with the library bundled (pip install ./python after "
            "a build) or install the library (meson install). Tried: " +
            "; ".join(tried))


_raw: Dict[str, Any] = {}


def raw_function(name: str) -> Any:
    """|name| from the loaded library as a ctypes function without
    argtypes (restype void*): the caller passes ctypes objects it converted
    once (c_void_p handles, byref() of arrays, ints), which saves the
    per-call conversion on hot paths."""
    fn = _raw.get(name)
    if fn is None:
        lib()
        assert _path is not None
        fn = getattr(ctypes.CDLL(_path), name)
        fn.restype = vp
        _raw[name] = fn
    return fn


def library_path() -> str:
    """The path (or loader name) of the libtensorjit actually loaded."""
    load()
    assert _path is not None
    return _path


def lib() -> Any:
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else load()


def check(status: Optional[int]) -> None:
    """Raises the exception for non-NULL |status| (freeing it first)."""
    if not status:
        return
    L = lib()
    code = int(L.tj_status_code(status))
    raw = L.tj_status_message(status)
    message = raw.decode("utf-8", "replace") if raw else ""
    L.tj_status_free(status)
    raise error_for_code(code, message)


def status_error(status: Optional[int]) -> Optional[Exception]:
    """Like check(), but returns the exception instead of raising it."""
    try:
        check(status)
    except Exception as e:  # noqa: BLE001 - we hand it back
        return e
    return None
