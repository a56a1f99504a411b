// Helpers shared by the x86 JIT unit tests: compile + load + run a kernel
// (optionally on a thread pool), and an oracle: a kernel-IR interpreter in
// double precision (int64 for integers) that follows kernel_ir.h's
// semantics one point at a time, with libm for the transcendentals.

#ifndef TJ_TESTS_UNIT_X86_TEST_UTIL_H_
#define TJ_TESTS_UNIT_X86_TEST_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/x86/thread_pool.h"
#include "kir/kernel_ir.h"
#include "jit/x86_jit.h"
#include "lib/dtype.h"
#include "tests/unit/test.h"

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

//===--- compile and run ---===//

typedef struct compiled_t {
  tj_x86_module_t* module;
  tj_kir_fn_t fn;
} compiled_t;

// Compiles and loads |k| (finalized) with |jit|. Returns false on failure
// (after recording a failed check).
static inline bool compile_kernel(tj_x86_jit_t* jit, const tj_kir_t* k,
                                  compiled_t* out) {
  memset(out, 0, sizeof(*out));
  tj_x86_object_t obj;
  tj_status_t s = tj_x86_jit_compile(jit, &k, 1, &obj);
  if (s) {
    CHECK_OK(s);
    return false;
  }
  s = tj_x86_jit_load(jit, obj.data, obj.size, &out->module);
  tj_x86_object_deinitialize(&obj);
  if (s) {
    CHECK_OK(s);
    return false;
  }
  s = tj_x86_module_lookup(out->module, k->name, &out->fn);
  if (s) {
    CHECK_OK(s);
    tj_x86_module_destroy(out->module);
    out->module = NULL;
    return false;
  }
  return true;
}

static inline void release_kernel(compiled_t* c) {
  tj_x86_module_destroy(c->module);
  c->module = NULL;
}

typedef struct run_ctx_t {
  tj_kir_fn_t fn;
  void* const* buffers;
  const int64_t* scalars;
  uint8_t* scratch;  // max_threads * stride bytes
  int64_t stride;
} run_ctx_t;

static inline void run_task(void* context, int64_t begin, int64_t end,
                            int32_t thread) {
  run_ctx_t* c = context;
  c->fn(c->buffers, c->scalars,
        c->stride ? c->scratch + (size_t)thread * (size_t)c->stride : NULL,
        begin, end);
}

// Runs |fn| (compiled from |k| with |jit|) over all its units; through
// |pool| when given, else in one call.
static inline void run_kernel(const tj_x86_jit_t* jit, const tj_kir_t* k,
                              tj_kir_fn_t fn, void* const* buffers,
                              const int64_t* scalars, tj_thread_pool_t* pool) {
  tj_kir_launch_t launch;
  CHECK_OK(tj_kir_launch_info(k, tj_x86_jit_lanes(jit), scalars, &launch));
  int32_t threads = pool ? tj_thread_pool_size(pool) : 1;
  run_ctx_t c = {fn, buffers, scalars, NULL,
                 (launch.scratch_bytes + 63) / 64 * 64};
  if (c.stride) {
    c.scratch = aligned_alloc(64, (size_t)c.stride * (size_t)threads);
  }
  if (pool) {
    tj_thread_pool_parallel_for(pool, launch.units, run_task, &c);
  } else if (launch.units > 0) {
    run_task(&c, 0, launch.units, 0);
  }
  free(c.scratch);
}

//===--- the oracle ---===//

typedef struct ival_t {
  double f;
  int64_t i;
} ival_t;

// float8 (only ever cast) is held as its value, like the other floats.
static inline bool interp_is_float(tj_dtype_t d) {
  return tj_dtype_is_float(d) || tj_dtype_is_f8(d);
}

// Wraps an integer to the width of |d| (bool: 0/1).
static inline int64_t wrap_int(tj_dtype_t d, int64_t v) {
  switch (d) {
    case TJ_DTYPE_I8:
      return (int8_t)(uint8_t)(uint64_t)v;
    case TJ_DTYPE_U8:
      return (uint8_t)(uint64_t)v;
    case TJ_DTYPE_I16:
      return (int16_t)(uint16_t)(uint64_t)v;
    case TJ_DTYPE_U16:
      return (uint16_t)(uint64_t)v;
    case TJ_DTYPE_U32:
      return (uint32_t)(uint64_t)v;
    case TJ_DTYPE_I32:
      return (int32_t)(uint32_t)(uint64_t)v;
    case TJ_DTYPE_BOOL:
      return v != 0;
    default:
      return v;
  }
}

// f32-held values round to their dtype (f16/bf16 loads are exact).
static inline double round_to(tj_dtype_t d, double v) {
  switch (d) {
    case TJ_DTYPE_F32:
      return (double)(float)v;
    case TJ_DTYPE_F16:
      return tj_f16_to_f32(tj_f32_to_f16((float)v));
    case TJ_DTYPE_BF16:
      return tj_bf16_to_f32(tj_f32_to_bf16((float)v));
    case TJ_DTYPE_F8E4M3:  // one rounding from the double
      return tj_f8e4m3_to_f64(tj_f64_to_f8e4m3(v));
    case TJ_DTYPE_F8E5M2:
      return tj_f8e5m2_to_f64(tj_f64_to_f8e5m2(v));
    default:
      return v;
  }
}

static inline int64_t f64_to_int_checked(double v, double below, double above) {
  if (!(v > below && v < above)) return 0;
  return (int64_t)v;
}

static inline ival_t interp_cast(tj_dtype_t from, tj_dtype_t to, ival_t x) {
  ival_t r = {0, 0};
  if (interp_is_float(from)) {
    if (interp_is_float(to)) {
      r.f = to == TJ_DTYPE_F64 ? x.f : round_to(to, x.f);
    } else if (to == TJ_DTYPE_BOOL) {
      r.i = x.f != 0.0;
    } else if (to == TJ_DTYPE_I64) {
      r.i = (x.f >= -9223372036854775808.0 && x.f < 9223372036854775808.0)
                ? (int64_t)x.f
                : 0;
    } else if (to == TJ_DTYPE_U64) {
      r.i = x.f > -1.0 && x.f < 18446744073709551616.0 ? (int64_t)(uint64_t)x.f
                                                       : 0;
    } else {
      r.i = f64_to_int_checked(x.f, (double)tj_dtype_int_lowest(to) - 1.0,
                               (double)tj_dtype_int_highest(to) + 1.0);
    }
  } else {
    if (interp_is_float(to)) {
      // u64 travels as its bits (lib/dtype.h): convert the unsigned value.
      r.f = round_to(
          to, from == TJ_DTYPE_U64 ? (double)(uint64_t)x.i : (double)x.i);
    } else {
      r.i = wrap_int(to, x.i);
    }
  }
  return r;
}

static inline double round_half_even(double x) {
  double r = floor(x + 0.5);
  if (r - x == 0.5 && fmod(r, 2.0) != 0.0) r -= 1.0;
  return r;
}

static inline ival_t interp_unary(tj_op_t op, tj_dtype_t d, ival_t x) {
  ival_t r = {0, 0};
  if (interp_is_float(d)) {
    double v = x.f;
    switch (op) {
      case TJ_OP_NEG:
        r.f = -v;
        break;
      case TJ_OP_ABS:
        r.f = fabs(v);
        break;
      case TJ_OP_EXP:
        r.f = exp(v);
        break;
      case TJ_OP_LOG:
        r.f = log(v);
        break;
      case TJ_OP_SQRT:
        r.f = sqrt(v);
        break;
      case TJ_OP_RSQRT:
        r.f = 1.0 / sqrt(v);
        break;
      case TJ_OP_TANH:
        r.f = tanh(v);
        break;
      case TJ_OP_SIGMOID:
        r.f = 1.0 / (1.0 + exp(-v));
        break;
      case TJ_OP_ERF:
        r.f = erf(v);
        break;
      case TJ_OP_ERFC:
        r.f = erfc(v);
        break;
      case TJ_OP_SIN:
        r.f = sin(v);
        break;
      case TJ_OP_COS:
        r.f = cos(v);
        break;
      case TJ_OP_ASIN:
        r.f = asin(v);
        break;
      case TJ_OP_ACOS:
        r.f = acos(v);
        break;
      case TJ_OP_ATAN:
        r.f = atan(v);
        break;
      case TJ_OP_RELU:
        r.f = v > 0.0 ? v : (isnan(v) ? v : 0.0);
        break;
      case TJ_OP_FLOOR:
        r.f = floor(v);
        break;
      case TJ_OP_CEIL:
        r.f = ceil(v);
        break;
      case TJ_OP_ROUND:
        r.f = round_half_even(v);
        break;
      case TJ_OP_SIGN:
        r.f = v > 0.0 ? 1.0 : v < 0.0 ? -1.0 : v;
        break;
      case TJ_OP_ISNAN:
        r.i = isnan(v);
        break;
      default:
        r.f = NAN;
        break;
    }
    return r;
  }
  int64_t v = x.i;
  if (d == TJ_DTYPE_U64 &&
      (op == TJ_OP_ABS || op == TJ_OP_RELU || op == TJ_OP_SIGN)) {
    r.i = op == TJ_OP_SIGN ? v != 0 : v;  // never negative
    return r;
  }
  switch (op) {
    case TJ_OP_NEG:
      r.i = (int64_t)(0 - (uint64_t)v);
      break;
    case TJ_OP_ABS:
      r.i = v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
      break;
    case TJ_OP_RELU:
      r.i = v > 0 ? v : 0;
      break;
    case TJ_OP_SIGN:
      r.i = (v > 0) - (v < 0);
      break;
    case TJ_OP_NOT:
      r.i = !v;
      break;
    case TJ_OP_BITWISE_NOT:
      r.i = ~v;
      break;
    default:
      break;
  }
  r.i = wrap_int(d, r.i);
  return r;
}

static inline bool is_cmp(tj_op_t op) {
  return tj_op_info(op)->kind == TJ_OP_KIND_BINARY &&
         tj_op_has(op, TJ_OPF_BOOL_RESULT);
}

static inline ival_t interp_binary(tj_op_t op, tj_dtype_t d, ival_t x,
                                   ival_t y) {
  ival_t r = {0, 0};
  if (interp_is_float(d)) {
    double a = x.f, b = y.f;
    switch (op) {
      case TJ_OP_ADD:
        r.f = a + b;
        break;
      case TJ_OP_SUB:
        r.f = a - b;
        break;
      case TJ_OP_MUL:
        r.f = a * b;
        break;
      case TJ_OP_DIV:
        r.f = a / b;
        break;
      case TJ_OP_POW:
        r.f = pow(a, b);
        break;
      case TJ_OP_MAXIMUM:
        r.f = (isnan(a) || isnan(b)) ? a + b : a > b ? a : b;
        break;
      case TJ_OP_MINIMUM:
        r.f = (isnan(a) || isnan(b)) ? a + b : a < b ? a : b;
        break;
      case TJ_OP_EQ:
        r.i = a == b;
        break;
      case TJ_OP_NE:
        r.i = a != b;
        break;
      case TJ_OP_LT:
        r.i = a < b;
        break;
      case TJ_OP_LE:
        r.i = a <= b;
        break;
      case TJ_OP_GT:
        r.i = a > b;
        break;
      case TJ_OP_GE:
        r.i = a >= b;
        break;
      case TJ_OP_FMOD:
        r.f = fmod(a, b);
        break;
      case TJ_OP_MOD:
        r.f = fmod(a, b);
        if (r.f != 0.0 && (r.f < 0.0) != (b < 0.0)) r.f += b;
        if (r.f == 0.0) r.f = copysign(0.0, b);
        break;
      default:
        r.f = NAN;
        break;
    }
    return r;
  }
  int64_t a = x.i, b = y.i;
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  if (d == TJ_DTYPE_U64) {
    switch (op) {  // the unsigned operations on its bits
      case TJ_OP_DIV:
        r.i = ub ? (int64_t)(ua / ub) : 0;
        return r;
      case TJ_OP_MOD:
      case TJ_OP_FMOD:
        r.i = ub ? (int64_t)(ua % ub) : 0;
        return r;
      case TJ_OP_SHIFT_RIGHT:
        r.i = ub >= 64 ? 0 : (int64_t)(ua >> ub);
        return r;
      default:  // compare in the unsigned order
        a = (int64_t)(ua ^ (UINT64_C(1) << 63));
        b = (int64_t)(ub ^ (UINT64_C(1) << 63));
        if (op == TJ_OP_MAXIMUM || op == TJ_OP_MINIMUM) {
          r.i = (op == TJ_OP_MAXIMUM) == (a > b) ? x.i : y.i;
          return r;
        }
        if (is_cmp(op)) break;
        a = x.i, b = y.i;
        break;
    }
  }
  switch (op) {
    case TJ_OP_ADD:
      r.i = (int64_t)(ua + ub);
      break;
    case TJ_OP_SUB:
      r.i = (int64_t)(ua - ub);
      break;
    case TJ_OP_MUL:
      r.i = (int64_t)(ua * ub);
      break;
    case TJ_OP_DIV:
      r.i = b == 0 ? 0 : b == -1 ? (int64_t)(0 - ua) : a / b;
      break;
    case TJ_OP_MAXIMUM:
      r.i = a > b ? a : b;
      break;
    case TJ_OP_MINIMUM:
      r.i = a < b ? a : b;
      break;
    case TJ_OP_EQ:
      r.i = a == b;
      break;
    case TJ_OP_NE:
      r.i = a != b;
      break;
    case TJ_OP_LT:
      r.i = a < b;
      break;
    case TJ_OP_LE:
      r.i = a <= b;
      break;
    case TJ_OP_GT:
      r.i = a > b;
      break;
    case TJ_OP_GE:
      r.i = a >= b;
      break;
    case TJ_OP_AND:
      r.i = a && b;
      break;
    case TJ_OP_OR:
      r.i = a || b;
      break;
    case TJ_OP_MOD:
    case TJ_OP_FMOD:
      r.i = b == 0 || b == -1 ? 0 : a % b;
      if (op == TJ_OP_MOD && r.i != 0 && (r.i < 0) != (b < 0)) r.i += b;
      break;
    case TJ_OP_BITWISE_AND:
      r.i = a & b;
      break;
    case TJ_OP_BITWISE_OR:
      r.i = a | b;
      break;
    case TJ_OP_BITWISE_XOR:
      r.i = a ^ b;
      break;
    case TJ_OP_SHIFT_LEFT:
      r.i = b < 0 || b >= 64 ? 0 : (int64_t)(ua << b);
      break;
    case TJ_OP_SHIFT_RIGHT:
      r.i = b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;
      break;
    default:
      break;
  }
  if (!is_cmp(op)) r.i = wrap_int(d, r.i);
  return r;
}

typedef struct interp_t {
  const tj_kir_t* k;
  void* const* buffers;
  const int64_t* scalars;
  int64_t idx[TJ_KIR_MAX_RANK];
  double acc;
  ival_t rows[64];
} interp_t;

static inline int64_t interp_offset(const interp_t* it, uint32_t b) {
  int64_t off = 0;
  for (int32_t d = 0; d < it->k->rank; ++d) {
    off += it->idx[d] *
           tj_kir_ival_eval(it->k->buffers[b].strides[d], it->scalars);
  }
  return off;
}

// Evaluates |ph| at it->idx; returns the yield.
static inline ival_t interp_body(interp_t* it, const tj_kir_phase_t* ph) {
  ival_t vals[512];
  ival_t yield = {0, 0};
  for (uint32_t i = 0; i < ph->num_insts && i < 512; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    ival_t r = {0, 0};
    switch (in->kind) {
      case TJ_KIR_LOAD: {
        const tj_kir_buffer_t* buf = &it->k->buffers[in->ref];
        int64_t off = interp_offset(it, in->ref);
        if (interp_is_float(buf->dtype)) {
          r.f = tj_load_f64(buf->dtype, it->buffers[in->ref], off);
        } else {
          r.i = tj_load_i64(buf->dtype, it->buffers[in->ref], off);
        }
        break;
      }
      case TJ_KIR_LOAD_AT: {
        const tj_kir_buffer_t* buf = &it->k->buffers[in->ref];
        int64_t off = interp_offset(it, in->ref) + vals[in->args[0]].i;
        if (interp_is_float(buf->dtype)) {
          r.f = tj_load_f64(buf->dtype, it->buffers[in->ref], off);
        } else {
          r.i = tj_load_i64(buf->dtype, it->buffers[in->ref], off);
        }
        break;
      }
      case TJ_KIR_CONST:
        if (interp_is_float(in->dtype)) {
          r.f = in->dtype == TJ_DTYPE_F64 ? in->fvalue
                                          : round_to(in->dtype, in->fvalue);
        } else {
          r.i = wrap_int(in->dtype, in->ivalue);
        }
        break;
      case TJ_KIR_PARAM:
        r.i = it->scalars[in->ref];
        break;
      case TJ_KIR_INDEX:
        r.i = it->idx[in->ref];
        break;
      case TJ_KIR_ACC:
        r.f = it->acc;
        break;
      case TJ_KIR_ROW:
        r = it->rows[in->ref];
        break;
      case TJ_KIR_OP: {
        tj_dtype_t d = ph->insts[in->args[0]].dtype;
        ival_t x = vals[in->args[0]];
        if (in->op == TJ_OP_CAST) {
          r = interp_cast(d, in->dtype, x);
        } else if (in->op == TJ_OP_WHERE) {
          r = x.i ? vals[in->args[1]] : vals[in->args[2]];
        } else if (in->num_args == 1) {
          r = interp_unary(in->op, d, x);
        } else {
          r = interp_binary(in->op, d, x, vals[in->args[1]]);
        }
        break;
      }
      case TJ_KIR_STORE: {
        const tj_kir_buffer_t* buf = &it->k->buffers[in->ref];
        int64_t off = interp_offset(it, in->ref);
        ival_t v = vals[in->args[0]];
        if (interp_is_float(buf->dtype)) {
          tj_store_f64(buf->dtype, it->buffers[in->ref], off, v.f);
        } else {
          tj_store_i64(buf->dtype, it->buffers[in->ref], off, v.i);
        }
        break;
      }
      case TJ_KIR_YIELD:
        yield = vals[in->args[0]];
        break;
      case TJ_KIR_STORE_AT: {  // scatter: plain, or combined by in->op
        const tj_kir_buffer_t* buf = &it->k->buffers[in->ref];
        int64_t off = interp_offset(it, in->ref) + vals[in->args[0]].i;
        ival_t v = vals[in->args[1]];
        bool fl = interp_is_float(buf->dtype);
        if (in->op != TJ_OP_COUNT_) {
          ival_t old;
          memset(&old, 0, sizeof(old));
          if (fl) {
            old.f = tj_load_f64(buf->dtype, it->buffers[in->ref], off);
          } else {
            old.i = tj_load_i64(buf->dtype, it->buffers[in->ref], off);
          }
          v = interp_binary(in->op, buf->dtype, old, v);
        }
        if (fl) {
          tj_store_f64(buf->dtype, it->buffers[in->ref], off, v.f);
        } else {
          tj_store_i64(buf->dtype, it->buffers[in->ref], off, v.i);
        }
        break;
      }
    }
    vals[i] = r;
  }
  return yield;
}

// Runs the whole kernel serially into |buffers|.
static inline void interp_kernel(const tj_kir_t* k, void* const* buffers,
                                 const int64_t* scalars) {
  interp_t it;
  memset(&it, 0, sizeof(it));
  it.k = k;
  it.buffers = buffers;
  it.scalars = scalars;
  int64_t dims[TJ_KIR_MAX_RANK];
  int64_t total = 1;
  for (int32_t d = 0; d < k->rank; ++d) {
    dims[d] = tj_kir_ival_eval(k->dims[d], scalars);
    total *= dims[d];
  }
  if (k->kind == TJ_KIR_POINTWISE || k->kind == TJ_KIR_GEMM) {
    int64_t kk = tj_kir_ival_eval(k->gemm_k, scalars);
    uint32_t abuf = 0, bbuf = 0;
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      if (k->buffers[b].role == TJ_KIR_GEMM_A) abuf = b;
      if (k->buffers[b].role == TJ_KIR_GEMM_B) bbuf = b;
    }
    for (int64_t lin = 0; lin < total; ++lin) {
      int64_t rest = lin;
      for (int32_t d = k->rank - 1; d >= 0; --d) {
        it.idx[d] = rest % dims[d];
        rest /= dims[d];
      }
      if (k->kind == TJ_KIR_GEMM) {
        // A at [batch.., m, k], B at [batch.., k, n]: strides index dims
        // [.., rank-2, rank-1] as (m, k) and (k, n).
        const tj_kir_buffer_t* A = &k->buffers[abuf];
        const tj_kir_buffer_t* B = &k->buffers[bbuf];
        int64_t aoff = 0, boff = 0;
        for (int32_t d = 0; d + 2 < k->rank; ++d) {
          aoff += it.idx[d] * tj_kir_ival_eval(A->strides[d], scalars);
          boff += it.idx[d] * tj_kir_ival_eval(B->strides[d], scalars);
        }
        int64_t m = it.idx[k->rank - 2], n = it.idx[k->rank - 1];
        int64_t sam = tj_kir_ival_eval(A->strides[k->rank - 2], scalars);
        int64_t sak = tj_kir_ival_eval(A->strides[k->rank - 1], scalars);
        int64_t sbk = tj_kir_ival_eval(B->strides[k->rank - 2], scalars);
        int64_t sbn = tj_kir_ival_eval(B->strides[k->rank - 1], scalars);
        // f16/bf16 operands widen exactly (tj_load_f64).
        double acc = 0.0;
        for (int64_t q = 0; q < kk; ++q) {
          acc +=
              tj_load_f64(A->dtype, buffers[abuf], aoff + m * sam + q * sak) *
              tj_load_f64(B->dtype, buffers[bbuf], boff + q * sbk + n * sbn);
        }
        it.acc = acc;
      }
      interp_body(&it, &k->phases[0]);
    }
    return;
  }
  // ROW_REDUCE.
  int32_t vd = k->rank - 1;
  int64_t len = dims[vd];
  int64_t rows = len ? total / len : 1;
  if (!len) {
    rows = 1;
    for (int32_t d = 0; d < vd; ++d) rows *= dims[d];
  }
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rest = row;
    for (int32_t d = vd - 1; d >= 0; --d) {
      it.idx[d] = rest % dims[d];
      rest /= dims[d];
    }
    for (uint32_t p = 0; p < k->num_phases; ++p) {
      const tj_kir_phase_t* ph = &k->phases[p];
      if (ph->kind == TJ_KIR_PHASE_ROW) {
        it.idx[vd] = 0;
        interp_body(&it, ph);
        continue;
      }
      if (ph->kind == TJ_KIR_PHASE_MAP) {
        for (int64_t r = 0; r < len; ++r) {
          it.idx[vd] = r;
          interp_body(&it, ph);
        }
        continue;
      }
      tj_dtype_t d = ph->insts[ph->num_insts - 1].dtype;
      bool fl = interp_is_float(d);
      ival_t acc = {0, 0};
      int64_t best_i = -1;
      switch (ph->reduce) {
        case TJ_KIR_REDUCE_SUM:
          break;
        case TJ_KIR_REDUCE_PROD:
          acc.f = 1;
          acc.i = 1;
          break;
        case TJ_KIR_REDUCE_MAX:
          acc.f = -INFINITY;
          acc.i = d == TJ_DTYPE_BOOL  ? 0
                  : d == TJ_DTYPE_I8  ? -128
                  : d == TJ_DTYPE_I32 ? INT32_MIN
                                      : INT64_MIN;
          break;
        case TJ_KIR_REDUCE_MIN:
          acc.f = INFINITY;
          acc.i = d == TJ_DTYPE_BOOL  ? 1
                  : d == TJ_DTYPE_I8  ? 127
                  : d == TJ_DTYPE_I32 ? INT32_MAX
                                      : INT64_MAX;
          break;
        case TJ_KIR_REDUCE_ARGMAX:
          break;
      }
      for (int64_t r = 0; r < len; ++r) {
        it.idx[vd] = r;
        ival_t v = interp_body(&it, ph);
        switch (ph->reduce) {
          case TJ_KIR_REDUCE_SUM:
            acc.f += v.f;
            acc.i = wrap_int(d, (int64_t)((uint64_t)acc.i + (uint64_t)v.i));
            break;
          case TJ_KIR_REDUCE_PROD:
            acc.f *= v.f;
            acc.i = wrap_int(d, (int64_t)((uint64_t)acc.i * (uint64_t)v.i));
            break;
          case TJ_KIR_REDUCE_MAX:
            if (fl)
              acc.f = (isnan(acc.f) || isnan(v.f)) ? NAN : fmax(acc.f, v.f);
            else
              acc.i = v.i > acc.i ? v.i : acc.i;
            break;
          case TJ_KIR_REDUCE_MIN:
            if (fl)
              acc.f = (isnan(acc.f) || isnan(v.f)) ? NAN : fmin(acc.f, v.f);
            else
              acc.i = v.i < acc.i ? v.i : acc.i;
            break;
          case TJ_KIR_REDUCE_ARGMAX: {
            bool take;
            if (best_i < 0) {
              take = true;
            } else if (fl) {
              take = (isnan(v.f) && !isnan(acc.f)) || v.f > acc.f;
            } else {
              take = v.i > acc.i;
            }
            if (take) {
              acc = v;
              best_i = r;
            }
            break;
          }
        }
      }
      if (ph->reduce == TJ_KIR_REDUCE_ARGMAX) {
        acc.i = best_i < 0 ? 0 : best_i;
        acc.f = 0;
      }
      it.rows[p] = acc;
    }
  }
}

//===--- comparisons ---===//

// Distance in units of |d|'s precision between |got| and |want|, with
// |atol| absolute slack. NaN == NaN; inf must match exactly.
static inline double rel_error(double got, double want, double atol) {
  if (isnan(want) || isnan(got))
    return isnan(want) && isnan(got) ? 0 : INFINITY;
  if (isinf(want) || isinf(got)) return got == want ? 0 : INFINITY;
  double diff = fabs(got - want);
  if (diff <= atol) return 0;
  return diff / fmax(fabs(want), 1e-300);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
// Uniform in [lo, hi).
static inline double rng_uniform(double lo, double hi) {
  return lo +
         (hi - lo) * (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

//===--- epilogue bodies for GEMM kernels ---===//

// Kernel IR for 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
static inline uint32_t kir_gelu_tanh(tj_kir_t* k, uint32_t v) {
  uint32_t x3 =
      tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_binary(k, TJ_OP_MUL, v, v));
  uint32_t in = tj_kir_binary(
      k, TJ_OP_ADD, v,
      tj_kir_binary(k, TJ_OP_MUL, x3,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.044715)));
  uint32_t t = tj_kir_unary(
      k, TJ_OP_TANH,
      tj_kir_binary(k, TJ_OP_MUL, in,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.7978845608028654)));
  uint32_t h =
      tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
  return tj_kir_binary(
      k, TJ_OP_MUL, h,
      tj_kir_binary(k, TJ_OP_ADD, t, tj_kir_const_float(k, TJ_DTYPE_F32, 1)));
}

// Kernel IR for 0.5 v (1 + erf(v / sqrt 2)).
static inline uint32_t kir_gelu_erf(tj_kir_t* k, uint32_t v) {
  uint32_t e = tj_kir_unary(
      k, TJ_OP_ERF,
      tj_kir_binary(k, TJ_OP_MUL, v,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.7071067811865476)));
  uint32_t h =
      tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
  return tj_kir_binary(
      k, TJ_OP_MUL, h,
      tj_kir_binary(k, TJ_OP_ADD, e, tj_kir_const_float(k, TJ_DTYPE_F32, 1)));
}

//===--- checking kernels against the oracle ---===//

// open_jits' levels, and two more a test may add (open_extra_jit).
#define MAX_TEST_JITS 5
static tj_x86_jit_t* g_jits[MAX_TEST_JITS];
static int g_num_jits;
static const char* g_isa_names[MAX_TEST_JITS];

//===--- buffers ---===//

// Elements a buffer must hold for the space |dims| (non-negative strides).
static inline int64_t buffer_elems(const tj_kir_t* k, uint32_t b,
                                   const int64_t* scalars) {
  int64_t last = 0;
  const tj_kir_buffer_t* buf = &k->buffers[b];
  for (int32_t d = 0; d < k->rank; ++d) {
    // GEMM operands index [.., m, k] and [.., k, n].
    tj_kir_ival_t dim = k->dims[d];
    if (buf->role == TJ_KIR_GEMM_A && d == k->rank - 1) dim = k->gemm_k;
    if (buf->role == TJ_KIR_GEMM_B && d == k->rank - 2) dim = k->gemm_k;
    int64_t n = tj_kir_ival_eval(dim, scalars);
    if (n == 0) return 1;
    last += (n - 1) * tj_kir_ival_eval(buf->strides[d], scalars);
  }
  return last + 1;
}

typedef struct fill_t {
  double lo, hi;
  bool specials;  // sprinkle NaN, +-inf, +-0, extremes
  bool integral;  // float values that are integers (pow exponents)
} fill_t;

static inline void fill_buffer(tj_dtype_t d, void* p, int64_t n, fill_t f) {
  static const double specials[] = {NAN,   INFINITY, -INFINITY, 0.0,
                                    -0.0,  1e-40,    -1e-40,    3e38,
                                    -3e38, 1.0,      -1.0};
  for (int64_t i = 0; i < n; ++i) {
    double v = rng_uniform(f.lo, f.hi);
    if (f.integral) v = floor(v);
    if (f.specials && i % 7 == 3) {
      v = specials[(i / 7) % TJ_ARRAY_SIZE(specials)];
      // Finite extremes are kept inside the case's range (sin of 3e38 is
      // outside the range vecmath.h promises).
      if (isfinite(v) && v > f.hi) v = f.hi;
      if (isfinite(v) && v < f.lo) v = f.lo;
    }
    if (tj_dtype_is_float(d)) {
      tj_store_f64(d, p, i, v);
    } else if (d == TJ_DTYPE_BOOL) {
      tj_store_i64(d, p, i, rng_next() & 1);
    } else {
      double c = v < f.lo ? f.lo : v > f.hi ? f.hi : v;
      tj_store_i64(d, p, i, (int64_t)floor(c));
    }
  }
}

// The spacing of |d| values near |x| (x finite).
static inline double ulp_of(tj_dtype_t d, double x) {
  x = fabs(x);
  int mant, min_exp;
  switch (d) {
    case TJ_DTYPE_F16:
      mant = 10;
      min_exp = -14;
      break;
    case TJ_DTYPE_BF16:
      mant = 7;
      min_exp = -126;
      break;
    case TJ_DTYPE_F64:
      mant = 52;
      min_exp = -1022;
      break;
    default:
      mant = 23;
      min_exp = -126;
      break;
  }
  int e = x > 0 ? ilogb(x) : min_exp;
  if (e < min_exp) e = min_exp;
  return ldexp(1.0, e - mant);
}

// Compares every element of output buffers; float outputs within |ulps|
// of their dtype (plus |atol|), others exactly. Prints the first misses.
static inline bool compare_outputs(const tj_kir_t* k, void* const* got,
                                   void* const* want, const int64_t* sizes,
                                   double ulps, double atol, const char* what) {
  bool ok = true;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role != TJ_KIR_OUTPUT) continue;
    tj_dtype_t d = k->buffers[b].dtype;
    int misses = 0;
    for (int64_t i = 0; i < sizes[b]; ++i) {
      bool same;
      if (tj_dtype_is_float(d)) {
        double g = tj_load_f64(d, got[b], i), w = tj_load_f64(d, want[b], i);
        if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
          same = (isnan(w) && isnan(g)) || g == w;
        } else {
          same = fabs(g - w) <= ulps * ulp_of(d, w) + atol;
        }
        if (!same && misses++ < 4) {
          fprintf(stderr, "  %s: %%%s[%lld] = %.9g, want %.9g (%.2f ulp)\n",
                  what, k->buffers[b].name, (long long)i, g, w,
                  fabs(g - w) / ulp_of(d, w));
        }
      } else {
        int64_t g = tj_load_i64(d, got[b], i), w = tj_load_i64(d, want[b], i);
        same = g == w;
        if (!same && misses++ < 4) {
          fprintf(stderr, "  %s: %%%s[%lld] = %lld, want %lld\n", what,
                  k->buffers[b].name, (long long)i, (long long)g, (long long)w);
        }
      }
    }
    if (misses) ok = false;
  }
  return ok;
}

// A kernel compiled by every JIT of open_jits.
typedef struct kernel_set_t {
  compiled_t c[MAX_TEST_JITS];
  bool ok[MAX_TEST_JITS];
} kernel_set_t;

// Finalizes |k| and compiles it for every JIT; false if any failed.
static inline bool prepare_kernel(tj_kir_t* k, kernel_set_t* set) {
  memset(set, 0, sizeof(*set));
  tj_status_t s = tj_kir_finalize(k);
  if (s) {
    CHECK_OK(s);
    return false;
  }
  bool all = true;
  for (int j = 0; j < g_num_jits; ++j) {
    set->ok[j] = compile_kernel(g_jits[j], k, &set->c[j]);
    all &= set->ok[j];
  }
  return all;
}

static inline void release_set(kernel_set_t* set) {
  for (int j = 0; j < MAX_TEST_JITS; ++j) {
    if (set->ok[j]) release_kernel(&set->c[j]);
  }
  memset(set, 0, sizeof(*set));
}

// Fills inputs (|fills| per buffer), runs the prepared |k| through every
// JIT and the interpreter, and compares. Returns false on any mismatch.
static inline bool check_prepared(const tj_kir_t* k, const kernel_set_t* set,
                                  const int64_t* scalars, const fill_t* fills,
                                  double ulps, double atol) {
  void* inputs[TJ_KIR_MAX_BUFFERS] = {0};
  void* want[TJ_KIR_MAX_BUFFERS] = {0};
  void* got[TJ_KIR_MAX_BUFFERS] = {0};
  int64_t sizes[TJ_KIR_MAX_BUFFERS];
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    sizes[b] = buffer_elems(k, b, scalars);
    size_t bytes = (size_t)sizes[b] * tj_dtype_size(k->buffers[b].dtype) + 64;
    inputs[b] = calloc(1, bytes);
    want[b] = calloc(1, bytes);
    got[b] = calloc(1, bytes);
    if (k->buffers[b].role != TJ_KIR_OUTPUT) {
      fill_buffer(k->buffers[b].dtype, inputs[b], sizes[b], fills[b]);
      memcpy(want[b], inputs[b], bytes);
    }
  }
  interp_kernel(k, want, scalars);
  bool ok = true;
  for (int j = 0; j < g_num_jits; ++j) {
    if (!set->ok[j]) {
      ok = false;
      continue;
    }
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      size_t bytes = (size_t)sizes[b] * tj_dtype_size(k->buffers[b].dtype) + 64;
      if (k->buffers[b].role != TJ_KIR_OUTPUT) {
        memcpy(got[b], inputs[b], bytes);
      } else {
        memset(got[b], 0, bytes);
      }
    }
    run_kernel(g_jits[j], k, set->c[j].fn, got, scalars, NULL);
    char what[128];
    snprintf(what, sizeof(what), "@%s on %s", k->name, g_isa_names[j]);
    if (!compare_outputs(k, got, want, sizes, ulps, atol, what)) ok = false;
  }
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    free(inputs[b]);
    free(want[b]);
    free(got[b]);
  }
  ++g_test_checks;
  if (!ok) {
    ++g_test_failures;
    fprintf(stderr, "%s: kernel @%s differs from the oracle\n", g_test_current,
            k->name);
  }
  return ok;
}

// prepare_kernel + check_prepared + release_set, for one-shot kernels.
static inline bool check_kernel(tj_kir_t* k, const int64_t* scalars,
                                const fill_t* fills, double ulps, double atol) {
  kernel_set_t set;
  prepare_kernel(k, &set);
  bool ok = check_prepared(k, &set, scalars, fills, ulps, atol);
  release_set(&set);
  return ok;
}

static const tj_kir_ival_t kUnit[1] = {{1, -1}};
static const fill_t kNoFill = {0, 0, false, false};

// The JITs of every x86 level the host runs: host (AVX-512 here), AVX2,
// SSE2; levels equal to the host's are skipped.
static inline void open_jits(void) {
  static const tj_x86_isa_t isas[] = {TJ_X86_ISA_HOST, TJ_X86_ISA_AVX2,
                                      TJ_X86_ISA_SSE2};
  static const char* names[] = {"host", "avx2", "sse2"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(isas); ++i) {
    tj_x86_jit_options_t o = {.isa = isas[i]};
    tj_x86_jit_t* jit;
    tj_status_t s = tj_x86_jit_create(tj_allocator_system(), &o, &jit);
    if (s) {
      printf("# skipping %s: %s\n", names[i], tj_status_message(s));
      tj_status_free(s);
      continue;
    }
    if (i > 0 && tj_x86_jit_lanes(jit) == tj_x86_jit_lanes(g_jits[0])) {
      tj_x86_jit_destroy(jit);  // the host already is this level
      continue;
    }
    printf("# %s: %d lanes\n", names[i], tj_x86_jit_lanes(jit));
    g_isa_names[g_num_jits] = names[i];
    g_jits[g_num_jits++] = jit;
  }
}

// Adds a JIT for |isa| (named |name|) after open_jits' ones, unless the
// host lacks it.
static inline void open_extra_jit(tj_x86_isa_t isa, const char* name) {
  tj_x86_jit_options_t o = {.isa = isa};
  tj_x86_jit_t* jit;
  tj_status_t s = tj_x86_jit_create(tj_allocator_system(), &o, &jit);
  if (s || g_num_jits == MAX_TEST_JITS) {
    printf("# skipping %s: %s\n", name, s ? tj_status_message(s) : "full");
    tj_status_free(s);
    if (!s) tj_x86_jit_destroy(jit);
    return;
  }
  printf("# %s: %d lanes\n", name, tj_x86_jit_lanes(jit));
  g_isa_names[g_num_jits] = name;
  g_jits[g_num_jits++] = jit;
}

static inline void close_jits(void) {
  for (int i = 0; i < g_num_jits; ++i) tj_x86_jit_destroy(g_jits[i]);
  g_num_jits = 0;
}

// Strides (at positions o, o+1 of |s|) of a logical [rows, cols] matrix
// stored row-major, or transposed (stored [cols, rows]).
static inline void set_matrix_strides(tj_kir_ival_t* s, int o,
                                      tj_kir_ival_t rows, tj_kir_ival_t cols,
                                      bool transposed) {
  s[o] = transposed ? tj_kir_constant(1) : cols;
  s[o + 1] = transposed ? rows : tj_kir_constant(1);
}

#endif  // TJ_TESTS_UNIT_X86_TEST_UTIL_H_
