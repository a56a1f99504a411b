// The kernel IR: builder with a sticky error, verifier, printer and the
// host-side launch arithmetic. See kernel_ir.h for the model.

#include "kir/kernel_ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"

//===--- names ---===//

const char* tj_kir_kind_name(tj_kir_kind_t kind) {
  switch (kind) {
    case TJ_KIR_POINTWISE:
      return "pointwise";
    case TJ_KIR_ROW_REDUCE:
      return "row_reduce";
    case TJ_KIR_GEMM:
      return "gemm";
    case TJ_KIR_ATTENTION:
      return "attention";
    case TJ_KIR_CONV:
      return "conv";
  }
  return "?";
}

const char* tj_kir_reduce_name(tj_kir_reduce_t reduce) {
  switch (reduce) {
    case TJ_KIR_REDUCE_SUM:
      return "sum";
    case TJ_KIR_REDUCE_MAX:
      return "max";
    case TJ_KIR_REDUCE_MIN:
      return "min";
    case TJ_KIR_REDUCE_PROD:
      return "prod";
    case TJ_KIR_REDUCE_ARGMAX:
      return "argmax";
  }
  return "?";
}

static const char* role_name(tj_kir_role_t role) {
  switch (role) {
    case TJ_KIR_INPUT:
      return "in";
    case TJ_KIR_OUTPUT:
      return "out";
    case TJ_KIR_GEMM_A:
      return "a";
    case TJ_KIR_GEMM_B:
      return "b";
    case TJ_KIR_ATTN_Q:
      return "q";
    case TJ_KIR_ATTN_K:
      return "k";
    case TJ_KIR_ATTN_V:
      return "v";
    case TJ_KIR_ATTN_MASK:
      return "mask";
    case TJ_KIR_GEMM_BSCALE:
      return "bscale";
    case TJ_KIR_GEMM_BZERO:
      return "bzero";
    case TJ_KIR_CONV_X:
      return "x";
    case TJ_KIR_CONV_W:
      return "w";
    case TJ_KIR_CONV_BIAS:
      return "bias";
    case TJ_KIR_ATTN_DO:
      return "dy";
    case TJ_KIR_ATTN_LSE:
      return "lse";
    case TJ_KIR_ATTN_DELTA:
      return "delta";
    case TJ_KIR_GEMM_B2:
      return "b2";
  }
  return "?";
}

static const char* phase_kind_name(tj_kir_phase_kind_t kind) {
  switch (kind) {
    case TJ_KIR_PHASE_MAP:
      return "map";
    case TJ_KIR_PHASE_REDUCE:
      return "reduce";
    case TJ_KIR_PHASE_ROW:
      return "row";
    case TJ_KIR_PHASE_SCAN:
      return "scan";
  }
  return "?";
}

static bool is_identifier(const char* s) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; ++p) {
    char c = *p;
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(p != s && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// A kernel's name: a C identifier short enough for its symbols,
// "tj_kernel_<name>" and "tj_ukernel_<name>", in 256 bytes.
static tj_status_t check_kernel_name(const char* name) {
  if (!is_identifier(name)) {
    return tj_invalid("kernel name \"%s\" is not a C identifier",
                      name ? name : "(null)");
  }
  if (strlen(name) > 200) {
    return tj_invalid("kernel name \"%.32s...\" is longer than 200 bytes",
                      name);
  }
  return NULL;
}

//===--- creation ---===//

static tj_kir_phase_t* open_phase(tj_kir_t* k) {
  return k->num_phases ? &k->phases[k->num_phases - 1] : NULL;
}

static void record(tj_kir_t* k, tj_status_t status) {
  if (!status) return;
  if (k->error) {
    tj_status_free(status);
    return;
  }
  k->error = status;
}

static bool usable(tj_kir_t* k) { return k && !k->error && !k->finalized; }

static uint32_t push_phase(tj_kir_t* k, tj_kir_phase_kind_t kind,
                           tj_kir_reduce_t reduce) {
  tj_status_t s =
      tj_array_reserve(k->allocator, (void**)&k->phases, &k->phase_capacity,
                       k->num_phases + 1, sizeof(tj_kir_phase_t));
  if (s) {
    record(k, s);
    return TJ_KIR_NONE;
  }
  tj_kir_phase_t* p = &k->phases[k->num_phases];
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  p->reduce = reduce;
  p->result_dtype = TJ_DTYPE_F32;
  return k->num_phases++;
}

tj_status_t tj_kir_create(tj_allocator_t allocator, tj_kir_kind_t kind,
                          const char* name, tj_kir_t** out_kernel) {
  *out_kernel = NULL;
  if ((unsigned)kind > TJ_KIR_CONV) {
    return tj_invalid("kernel @%s: unknown template %d", name ? name : "?",
                      (int)kind);
  }
  TJ_RETURN_IF_ERROR(check_kernel_name(name));
  tj_kir_t* k = tj_calloc(allocator, 1, sizeof(*k));
  if (!k) return tj_status_oom();
  k->allocator = allocator;
  tj_arena_initialize(&k->arena, allocator);
  k->kind = kind;
  k->name = tj_arena_strdup(&k->arena, name);
  k->gemm_k = tj_kir_constant(0);
  k->attention.d = k->attention.dv = tj_kir_constant(0);
  if (!k->name) {
    tj_kir_destroy(k);
    return tj_status_oom();
  }
  if (kind != TJ_KIR_ROW_REDUCE) {
    push_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
    if (k->error) {
      tj_kir_destroy(k);
      return tj_status_oom();
    }
  }
  *out_kernel = k;
  return NULL;
}

void tj_kir_destroy(tj_kir_t* k) {
  if (!k) return;
  tj_allocator_t a = k->allocator;
  // An array of capacity 0 is none, a copy's in its arena (tj_kir_copy), or
  // another kernel's (tj_kir_borrow).
  for (uint32_t p = 0; k->phase_capacity && p < k->num_phases; ++p) {
    if (k->phases[p].inst_capacity) {
      tj_free(a, k->phases[p].insts,
              k->phases[p].inst_capacity * sizeof(tj_kir_inst_t));
    }
  }
  if (k->phase_capacity) {
    tj_free(a, k->phases, k->phase_capacity * sizeof(tj_kir_phase_t));
  }
  if (k->buffer_capacity) {
    tj_free(a, k->buffers, k->buffer_capacity * sizeof(tj_kir_buffer_t));
  }
  if (k->param_capacity) {
    tj_free(a, (void*)k->param_names, k->param_capacity * sizeof(char*));
  }
  tj_status_free(k->error);
  tj_arena_deinitialize(&k->arena);
  tj_free(a, k, sizeof(*k));
}

//===--- declarations ---===//

uint32_t tj_kir_add_param(tj_kir_t* k, const char* name) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (!is_identifier(name)) {
    record(k, tj_invalid("kernel @%s: param name \"%s\" is not an identifier",
                         k->name, name ? name : "(null)"));
    return TJ_KIR_NONE;
  }
  if (k->num_params >= TJ_KIR_MAX_PARAMS) {
    record(k, tj_invalid("kernel @%s: more than %d params", k->name,
                         TJ_KIR_MAX_PARAMS));
    return TJ_KIR_NONE;
  }
  tj_status_t s =
      tj_array_reserve(k->allocator, (void**)&k->param_names,
                       &k->param_capacity, k->num_params + 1, sizeof(char*));
  const char* copy = s ? NULL : tj_arena_strdup(&k->arena, name);
  if (!s && !copy) s = tj_status_oom();
  if (s) {
    record(k, s);
    return TJ_KIR_NONE;
  }
  k->param_names[k->num_params] = copy;
  return k->num_params++;
}

static bool check_ival(tj_kir_t* k, tj_kir_ival_t v, bool is_size,
                       const char* what) {
  if (v.param >= 0 && (uint32_t)v.param >= k->num_params) {
    record(k, tj_invalid("kernel @%s: %s refers to param %d of %u", k->name,
                         what, v.param, k->num_params));
    return false;
  }
  if (is_size && v.param < 0 && v.value < 0) {
    record(k, tj_invalid("kernel @%s: %s is negative (%" PRId64 ")", k->name,
                         what, v.value));
    return false;
  }
  return true;
}

void tj_kir_set_space(tj_kir_t* k, int32_t rank, const tj_kir_ival_t* dims) {
  if (!usable(k)) return;
  int32_t min_rank = k->kind == TJ_KIR_GEMM        ? 2
                     : k->kind == TJ_KIR_ATTENTION ? 4
                     : k->kind == TJ_KIR_CONV      ? 3
                                                   : 1;
  if (rank < min_rank || rank > TJ_KIR_MAX_RANK) {
    record(k, tj_invalid("kernel @%s: %s space rank %d is not in [%d, %d]",
                         k->name, tj_kir_kind_name(k->kind), rank, min_rank,
                         TJ_KIR_MAX_RANK));
    return;
  }
  if (k->num_buffers) {
    record(k,
           tj_invalid("kernel @%s: the space is set after buffers", k->name));
    return;
  }
  for (int32_t d = 0; d < rank; ++d) {
    if (!check_ival(k, dims[d], true, "a space dim")) return;
  }
  k->rank = rank;
  memcpy(k->dims, dims, (size_t)rank * sizeof(tj_kir_ival_t));
}

uint32_t tj_kir_add_buffer(tj_kir_t* k, const char* name, tj_dtype_t dtype,
                           tj_kir_role_t role, const tj_kir_ival_t* strides) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (!is_identifier(name)) {
    record(k, tj_invalid("kernel @%s: buffer name \"%s\" is not an identifier",
                         k->name, name ? name : "(null)"));
    return TJ_KIR_NONE;
  }
  if (k->rank == 0) {
    record(k, tj_invalid("kernel @%s: buffer %%%s declared before the space",
                         k->name, name));
    return TJ_KIR_NONE;
  }
  if (!tj_dtype_is_valid(dtype) || (unsigned)role > TJ_KIR_GEMM_B2) {
    record(k, tj_invalid("kernel @%s: buffer %%%s has a bad dtype or role",
                         k->name, name));
    return TJ_KIR_NONE;
  }
  for (int32_t d = 0; d < k->rank; ++d) {
    if (!check_ival(k, strides[d], false, "a stride")) return TJ_KIR_NONE;
  }
  if (k->num_buffers >= TJ_KIR_MAX_BUFFERS) {
    record(k, tj_invalid("kernel @%s: more than %d buffers", k->name,
                         TJ_KIR_MAX_BUFFERS));
    return TJ_KIR_NONE;
  }
  tj_status_t s =
      tj_array_reserve(k->allocator, (void**)&k->buffers, &k->buffer_capacity,
                       k->num_buffers + 1, sizeof(tj_kir_buffer_t));
  const char* copy = s ? NULL : tj_arena_strdup(&k->arena, name);
  if (!s && !copy) s = tj_status_oom();
  if (s) {
    record(k, s);
    return TJ_KIR_NONE;
  }
  tj_kir_buffer_t* b = &k->buffers[k->num_buffers];
  memset(b, 0, sizeof(*b));
  b->name = copy;
  b->dtype = dtype;
  b->role = role;
  memcpy(b->strides, strides, (size_t)k->rank * sizeof(tj_kir_ival_t));
  return k->num_buffers++;
}

void tj_kir_set_gemm(tj_kir_t* k, tj_kir_ival_t kdim,
                     const tj_kir_gemm_schedule_t* schedule) {
  if (!usable(k)) return;
  if (k->kind != TJ_KIR_GEMM) {
    record(k, tj_invalid("kernel @%s: gemm settings on a %s kernel", k->name,
                         tj_kir_kind_name(k->kind)));
    return;
  }
  if (!check_ival(k, kdim, true, "gemm k")) return;
  k->gemm_k = kdim;
  if (schedule) {
    const tj_kir_gemm_schedule_t* s = schedule;
    if (s->tile_m < 0 || s->tile_m > 16 || s->tile_n < 0 || s->tile_n > 256 ||
        s->mc < 0 || s->nc < 0 || s->kc < 0) {
      record(k, tj_invalid("kernel @%s: bad gemm schedule tile %dx%d mc %d "
                           "nc %d kc %d",
                           k->name, s->tile_m, s->tile_n, s->mc, s->nc, s->kc));
      return;
    }
    k->schedule = *s;
  }
}

void tj_kir_set_attention(tj_kir_t* k, const tj_kir_attention_t* attn) {
  if (!usable(k)) return;
  if (k->kind != TJ_KIR_ATTENTION) {
    record(k, tj_invalid("kernel @%s: attention settings on a %s kernel",
                         k->name, tj_kir_kind_name(k->kind)));
    return;
  }
  if (!check_ival(k, attn->d, true, "attention d") ||
      !check_ival(k, attn->dv, true, "attention dv")) {
    return;
  }
  k->attention = *attn;
}

bool tj_kir_attention_lse_output(const tj_kir_t* k, uint32_t b) {
  if (k->kind != TJ_KIR_ATTENTION || b >= k->num_buffers ||
      k->buffers[b].role != TJ_KIR_OUTPUT)
    return false;
  if (k->attention.op == TJ_KIR_ATTENTION_LSE) return true;
  if (!k->attention.with_lse) return false;
  // The forward's outputs are y, then lse.
  for (uint32_t i = 0; i < b; ++i)
    if (k->buffers[i].role == TJ_KIR_OUTPUT) return true;
  return false;
}

void tj_kir_set_conv(tj_kir_t* k, const tj_kir_conv_t* conv) {
  if (!usable(k)) return;
  if (k->kind != TJ_KIR_CONV) {
    record(k, tj_invalid("kernel @%s: conv settings on a %s kernel", k->name,
                         tj_kir_kind_name(k->kind)));
    return;
  }
  bool ok = conv->spatial >= 1 && conv->spatial <= 3 && conv->c >= 1 &&
            conv->window >= TJ_KIR_WINDOW_GEMM &&
            conv->window <= TJ_KIR_WINDOW_AVG_PAD &&
            (conv->window == TJ_KIR_WINDOW_GEMM || conv->c == 1) &&
            conv->groups >= 0 &&
            (conv->groups <= 1 || conv->window == TJ_KIR_WINDOW_GEMM);
  int64_t kk = conv->c;
  for (int32_t i = 0; ok && i < 3; ++i) {
    ok = conv->in[i] >= 1 && conv->kernel[i] >= 1 && conv->stride[i] >= 1 &&
         conv->dilation[i] >= 1 && conv->low[i] >= 0 && conv->high[i] >= 0 &&
         !tj_mul_overflow_i64(kk, conv->kernel[i], &kk);
  }
  if (!ok || kk > ((int64_t)1 << 31)) {
    record(k, tj_invalid("kernel @%s: bad conv window", k->name));
    return;
  }
  k->conv = *conv;
  k->gemm_k = tj_kir_constant(kk);
}

uint32_t tj_kir_begin_phase(tj_kir_t* k, tj_kir_phase_kind_t kind,
                            tj_kir_reduce_t reduce) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (k->kind != TJ_KIR_ROW_REDUCE) {
    record(k, tj_invalid("kernel @%s: a %s kernel has exactly one phase",
                         k->name, tj_kir_kind_name(k->kind)));
    return TJ_KIR_NONE;
  }
  if ((unsigned)kind > TJ_KIR_PHASE_ROW ||
      (kind == TJ_KIR_PHASE_REDUCE &&
       (unsigned)reduce > TJ_KIR_REDUCE_ARGMAX)) {
    record(k, tj_invalid("kernel @%s: bad phase kind %d / reduce %d", k->name,
                         (int)kind, (int)reduce));
    return TJ_KIR_NONE;
  }
  return push_phase(k, kind, reduce);
}

uint32_t tj_kir_begin_scan(tj_kir_t* k, tj_kir_reduce_t reduce,
                           tj_dtype_t dtype, bool reverse) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (k->kind != TJ_KIR_ROW_REDUCE ||
      (reduce != TJ_KIR_REDUCE_SUM && reduce != TJ_KIR_REDUCE_PROD) ||
      dtype == TJ_DTYPE_BOOL) {
    record(k, tj_invalid("kernel @%s: bad scan (reduce %d of %s in a %s "
                         "kernel)",
                         k->name, (int)reduce, tj_dtype_name(dtype),
                         tj_kir_kind_name(k->kind)));
    return TJ_KIR_NONE;
  }
  uint32_t p = push_phase(k, TJ_KIR_PHASE_SCAN, reduce);
  if (p != TJ_KIR_NONE) {
    k->phases[p].result_dtype = dtype;
    k->phases[p].reverse = reverse;
  }
  return p;
}

//===--- instructions ---===//

static uint32_t append(tj_kir_t* k, const tj_kir_inst_t* inst) {
  tj_kir_phase_t* p = open_phase(k);
  if (!p) {
    record(k, tj_invalid("kernel @%s: instruction before any phase", k->name));
    return TJ_KIR_NONE;
  }
  tj_status_t s =
      tj_array_reserve(k->allocator, (void**)&p->insts, &p->inst_capacity,
                       p->num_insts + 1, sizeof(tj_kir_inst_t));
  if (s) {
    record(k, s);
    return TJ_KIR_NONE;
  }
  p->insts[p->num_insts] = *inst;
  return p->num_insts++;
}

// The value |v| of the open phase, or NULL (recording an error) when it is
// not a value there.
static const tj_kir_inst_t* arg(tj_kir_t* k, uint32_t v, const char* what) {
  tj_kir_phase_t* p = open_phase(k);
  if (!p || v >= p->num_insts || p->insts[v].kind == TJ_KIR_STORE ||
      p->insts[v].kind == TJ_KIR_STORE_AT || p->insts[v].kind == TJ_KIR_YIELD) {
    record(k, tj_invalid("kernel @%s: %s: operand %%%d is not a value of "
                         "phase %u",
                         k->name, what, v == TJ_KIR_NONE ? -1 : (int)v,
                         k->num_phases ? k->num_phases - 1 : 0));
    return NULL;
  }
  return &p->insts[v];
}

static tj_kir_inst_t new_inst(tj_kir_inst_kind_t kind, tj_dtype_t dtype) {
  tj_kir_inst_t i;
  memset(&i, 0, sizeof(i));
  i.kind = kind;
  i.dtype = dtype;
  i.op = TJ_OP_COUNT_;
  return i;
}

uint32_t tj_kir_load(tj_kir_t* k, uint32_t buffer) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (buffer >= k->num_buffers || k->buffers[buffer].role != TJ_KIR_INPUT) {
    record(k, tj_invalid("kernel @%s: load: buffer %u is not an input", k->name,
                         buffer));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_LOAD, k->buffers[buffer].dtype);
  i.ref = buffer;
  return append(k, &i);
}

uint32_t tj_kir_load_at(tj_kir_t* k, uint32_t buffer, uint32_t offset) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (buffer >= k->num_buffers || k->buffers[buffer].role != TJ_KIR_INPUT) {
    record(k, tj_invalid("kernel @%s: load_at: buffer %u is not an input",
                         k->name, buffer));
    return TJ_KIR_NONE;
  }
  const tj_kir_inst_t* x = arg(k, offset, "load_at");
  if (!x) return TJ_KIR_NONE;
  if (x->dtype != TJ_DTYPE_I64) {
    record(k, tj_invalid("kernel @%s: load_at: offset %%%u is %s, not i64",
                         k->name, offset, tj_dtype_name(x->dtype)));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_LOAD_AT, k->buffers[buffer].dtype);
  i.ref = buffer;
  i.num_args = 1;
  i.args[0] = offset;
  return append(k, &i);
}

uint32_t tj_kir_const_float(tj_kir_t* k, tj_dtype_t dtype, double value) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (!tj_dtype_is_float(dtype)) {
    record(k, tj_invalid("kernel @%s: const_float of dtype %s", k->name,
                         tj_dtype_name(dtype)));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_CONST, dtype);
  i.fvalue = value;
  return append(k, &i);
}

uint32_t tj_kir_const_int(tj_kir_t* k, tj_dtype_t dtype, int64_t value) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (!tj_dtype_is_int(dtype) && dtype != TJ_DTYPE_BOOL &&
      !tj_dtype_is_f8(dtype)) {  // float8: the bits
    record(k, tj_invalid("kernel @%s: const_int of dtype %s", k->name,
                         tj_dtype_name(dtype)));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_CONST, dtype);
  // Integers wrap to their dtype, as the kernels hold them (u8, u16, u32
  // zero-extended, i16 sign-extended).
  const uint64_t u = (uint64_t)value;
  uint8_t small = 0;  // i4, u4, i2, u2: wrapped as tj_store_i64 does
  if (tj_dtype_is_small_int(dtype)) tj_store_i64(dtype, &small, 0, value);
  i.ivalue = dtype == TJ_DTYPE_BOOL         ? value != 0
             : tj_dtype_is_small_int(dtype) ? tj_load_i64(dtype, &small, 0)
             : dtype == TJ_DTYPE_U8 || tj_dtype_is_f8(dtype)
                 ? (int64_t)(uint8_t)u
             : dtype == TJ_DTYPE_U16 ? (int64_t)(uint16_t)u
             : dtype == TJ_DTYPE_I16 ? (int64_t)(int16_t)(uint16_t)u
             : dtype == TJ_DTYPE_U32 ? (int64_t)(uint32_t)u
                                     : value;
  return append(k, &i);
}

uint32_t tj_kir_param(tj_kir_t* k, uint32_t param) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (param >= k->num_params) {
    record(k, tj_invalid("kernel @%s: param %u of %u", k->name, param,
                         k->num_params));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_PARAM, TJ_DTYPE_I64);
  i.ref = param;
  return append(k, &i);
}

uint32_t tj_kir_index(tj_kir_t* k, uint32_t dim) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (dim >= (uint32_t)k->rank) {
    record(k, tj_invalid("kernel @%s: index of dim %u in a rank-%d space",
                         k->name, dim, k->rank));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_INDEX, TJ_DTYPE_I64);
  i.ref = dim;
  return append(k, &i);
}

static bool is_int8(tj_dtype_t dt) {
  return dt == TJ_DTYPE_I8 || dt == TJ_DTYPE_U8;
}

// qfold: the dtype of a quantized gemm's A, which its scale shares.
static tj_dtype_t bq_a_dtype(const tj_kir_t* k) {
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A) return k->buffers[b].dtype;
  }
  return TJ_DTYPE_F32;
}

// qfold: the dtype of a quantized B's bytes (and of its zero points).
static tj_dtype_t bq_dtype(const tj_kir_t* k) {
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_B) {
      tj_dtype_t dt = k->buffers[b].dtype;
      if (k->bq.bits == 4) return TJ_DTYPE_U8;
      return dt == TJ_DTYPE_I8 ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
    }
  }
  return TJ_DTYPE_U8;
}

static bool is_float8(tj_dtype_t dt) {
  return dt == TJ_DTYPE_F8E4M3 || dt == TJ_DTYPE_F8E5M2;
}

bool tj_kir_gemm_is_f8(const tj_kir_t* k) {
  if (k->kind != TJ_KIR_GEMM) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A)
      return is_float8(k->buffers[b].dtype);
  }
  return false;
}

bool tj_kir_gemm_b_kmajor(const tj_kir_t* k) {
  if (k->kind != TJ_KIR_GEMM || k->rank < 2) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role == TJ_KIR_GEMM_B)
      return tj_kir_ival_is_const(buf->strides[k->rank - 2], 1) &&
             !tj_kir_ival_is_const(buf->strides[k->rank - 1], 1);
  }
  return false;
}

bool tj_kir_gemm_is_int8(const tj_kir_t* k) {
  if (k->kind != TJ_KIR_GEMM) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A)
      return is_int8(k->buffers[b].dtype);
  }
  return false;
}

uint32_t tj_kir_acc(tj_kir_t* k) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (k->kind != TJ_KIR_GEMM && k->kind != TJ_KIR_CONV) {
    record(k, tj_invalid("kernel @%s: acc outside a gemm or conv epilogue",
                         k->name));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(
      TJ_KIR_ACC, tj_kir_gemm_is_int8(k) ? TJ_DTYPE_I32 : TJ_DTYPE_F32);
  return append(k, &i);
}

uint32_t tj_kir_acc2(tj_kir_t* k) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (k->kind != TJ_KIR_GEMM) {
    record(k, tj_invalid("kernel @%s: acc2 outside a gemm epilogue", k->name));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_ACC, TJ_DTYPE_F32);
  i.ref = 1;
  return append(k, &i);
}

bool tj_kir_gemm_is_dual(const tj_kir_t* k) {
  if (k->kind != TJ_KIR_GEMM) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_B2) return true;
  }
  return false;
}

uint32_t tj_kir_row(tj_kir_t* k, uint32_t phase) {
  if (!usable(k)) return TJ_KIR_NONE;
  bool earlier =
      phase + 1 < k->num_phases && k->phases[phase].kind == TJ_KIR_PHASE_REDUCE;
  bool scan =
      phase + 1 == k->num_phases && k->phases[phase].kind == TJ_KIR_PHASE_SCAN;
  if (k->kind != TJ_KIR_ROW_REDUCE || !(earlier || scan)) {
    record(k, tj_invalid("kernel @%s: row ^%u is not an earlier reduce "
                         "phase or the open scan",
                         k->name, phase));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_ROW, k->phases[phase].result_dtype);
  i.ref = phase;
  return append(k, &i);
}

// Whether |op| takes operands of dtype |a| (the DTYPES column of
// lib/ops.def).
static bool dtype_fits(tj_op_t op, tj_dtype_t a) {
  if (tj_dtype_is_narrow(a) && tj_op_info(op)->dtypes != TJ_OP_DTYPES_ANY) {
    return false;  // a storage dtype: no arithmetic (lib/infer.c)
  }
  switch (tj_op_info(op)->dtypes) {
    case TJ_OP_DTYPES_NUMERIC:
      return a != TJ_DTYPE_BOOL;
    case TJ_OP_DTYPES_FLOAT:
      return tj_dtype_is_float(a);
    case TJ_OP_DTYPES_BOOL:
      return a == TJ_DTYPE_BOOL;
    case TJ_OP_DTYPES_INT:
      return tj_dtype_is_int(a);
    case TJ_OP_DTYPES_ANY:
      break;
  }
  return true;
}

// The result dtype of unary |op| on |a|, or false if the op does not apply.
static bool unary_type(tj_op_t op, tj_dtype_t a, tj_dtype_t* out) {
  if (tj_op_info(op)->kind != TJ_OP_KIND_UNARY || op == TJ_OP_CAST ||
      op == TJ_OP_BITCAST) {
    return false;
  }
  *out = tj_op_has(op, TJ_OPF_BOOL_RESULT) ? TJ_DTYPE_BOOL : a;
  return dtype_fits(op, a);
}

static bool binary_type(tj_op_t op, tj_dtype_t a, tj_dtype_t b,
                        tj_dtype_t* out) {
  if (tj_op_info(op)->kind != TJ_OP_KIND_BINARY || a != b) return false;
  // Wider than the graph: a comparison takes any dtype, and maximum and
  // minimum take bool too (or and and).
  if (tj_op_has(op, TJ_OPF_BOOL_RESULT)) {
    *out = TJ_DTYPE_BOOL;
    return !tj_dtype_is_narrow(a);
  }
  *out = a;
  if (op == TJ_OP_MAXIMUM || op == TJ_OP_MINIMUM) return !tj_dtype_is_narrow(a);
  return dtype_fits(op, a);
}

uint32_t tj_kir_unary(tj_kir_t* k, tj_op_t op, uint32_t a) {
  if (!usable(k)) return TJ_KIR_NONE;
  if ((unsigned)op >= TJ_OP_COUNT_) {
    record(k, tj_invalid("kernel @%s: unknown op %d", k->name, (int)op));
    return TJ_KIR_NONE;
  }
  const tj_kir_inst_t* x = arg(k, a, tj_op_info(op)->name);
  if (!x) return TJ_KIR_NONE;
  tj_dtype_t type;
  if (!unary_type(op, x->dtype, &type)) {
    record(k, tj_invalid("kernel @%s: %s does not apply to %s (%%%u)", k->name,
                         tj_op_info(op)->name, tj_dtype_name(x->dtype), a));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_OP, type);
  i.op = op;
  i.num_args = 1;
  i.args[0] = a;
  return append(k, &i);
}

uint32_t tj_kir_binary(tj_kir_t* k, tj_op_t op, uint32_t a, uint32_t b) {
  if (!usable(k)) return TJ_KIR_NONE;
  if ((unsigned)op >= TJ_OP_COUNT_) {
    record(k, tj_invalid("kernel @%s: unknown op %d", k->name, (int)op));
    return TJ_KIR_NONE;
  }
  const tj_kir_inst_t* x = arg(k, a, tj_op_info(op)->name);
  const tj_kir_inst_t* y = x ? arg(k, b, tj_op_info(op)->name) : NULL;
  if (!y) return TJ_KIR_NONE;
  tj_dtype_t type;
  if (!binary_type(op, x->dtype, y->dtype, &type)) {
    record(k, tj_invalid("kernel @%s: %s does not apply to %s (%%%u), %s "
                         "(%%%u)",
                         k->name, tj_op_info(op)->name, tj_dtype_name(x->dtype),
                         a, tj_dtype_name(y->dtype), b));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_OP, type);
  i.op = op;
  i.num_args = 2;
  i.args[0] = a;
  i.args[1] = b;
  return append(k, &i);
}

uint32_t tj_kir_where(tj_kir_t* k, uint32_t cond, uint32_t a, uint32_t b) {
  if (!usable(k)) return TJ_KIR_NONE;
  const tj_kir_inst_t* c = arg(k, cond, "where");
  const tj_kir_inst_t* x = c ? arg(k, a, "where") : NULL;
  const tj_kir_inst_t* y = x ? arg(k, b, "where") : NULL;
  if (!y) return TJ_KIR_NONE;
  if (c->dtype != TJ_DTYPE_BOOL || x->dtype != y->dtype) {
    record(k, tj_invalid("kernel @%s: where needs (bool, T, T), got (%s, %s, "
                         "%s)",
                         k->name, tj_dtype_name(c->dtype),
                         tj_dtype_name(x->dtype), tj_dtype_name(y->dtype)));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_OP, x->dtype);
  i.op = TJ_OP_WHERE;
  i.num_args = 3;
  i.args[0] = cond;
  i.args[1] = a;
  i.args[2] = b;
  return append(k, &i);
}

uint32_t tj_kir_cast(tj_kir_t* k, tj_dtype_t dtype, uint32_t a) {
  if (!usable(k)) return TJ_KIR_NONE;
  if (!arg(k, a, "cast")) return TJ_KIR_NONE;
  if (!tj_dtype_is_valid(dtype)) {
    record(k, tj_invalid("kernel @%s: cast to dtype %d", k->name, (int)dtype));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_OP, dtype);
  i.op = TJ_OP_CAST;
  i.num_args = 1;
  i.args[0] = a;
  return append(k, &i);
}

uint32_t tj_kir_bitcast(tj_kir_t* k, tj_dtype_t dtype, uint32_t a) {
  if (!usable(k)) return TJ_KIR_NONE;
  const tj_kir_inst_t* x = arg(k, a, "bitcast");
  if (!x) return TJ_KIR_NONE;
  const tj_dtype_t from = x->dtype;
  if (!tj_dtype_is_valid(dtype) ||
      tj_dtype_size(dtype) != tj_dtype_size(from)) {
    record(k, tj_invalid("kernel @%s: bitcast of %s to dtype %d", k->name,
                         tj_dtype_name(from), (int)dtype));
    return TJ_KIR_NONE;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_OP, dtype);
  i.op = TJ_OP_BITCAST;
  i.num_args = 1;
  i.args[0] = a;
  return append(k, &i);
}

void tj_kir_store(tj_kir_t* k, uint32_t buffer, uint32_t value) {
  if (!usable(k)) return;
  if (buffer >= k->num_buffers || k->buffers[buffer].role != TJ_KIR_OUTPUT) {
    record(k, tj_invalid("kernel @%s: store: buffer %u is not an output",
                         k->name, buffer));
    return;
  }
  const tj_kir_inst_t* x = arg(k, value, "store");
  if (!x) return;
  if (x->dtype != k->buffers[buffer].dtype) {
    record(k, tj_invalid("kernel @%s: store of %s (%%%u) into %s buffer %%%s",
                         k->name, tj_dtype_name(x->dtype), value,
                         tj_dtype_name(k->buffers[buffer].dtype),
                         k->buffers[buffer].name));
    return;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_STORE, x->dtype);
  i.ref = buffer;
  i.num_args = 1;
  i.args[0] = value;
  append(k, &i);
}

void tj_kir_store_at(tj_kir_t* k, uint32_t buffer, uint32_t offset,
                     uint32_t value, tj_op_t op) {
  if (!usable(k)) return;
  tj_kir_phase_t* p = open_phase(k);
  if (!p || p->kind != TJ_KIR_PHASE_SCAN) {
    record(k, tj_invalid("kernel @%s: store_at outside a scan phase", k->name));
    return;
  }
  if (buffer >= k->num_buffers || k->buffers[buffer].role != TJ_KIR_OUTPUT) {
    record(k, tj_invalid("kernel @%s: store_at: buffer %u is not an output",
                         k->name, buffer));
    return;
  }
  if (op != TJ_OP_COUNT_ && op != TJ_OP_ADD && op != TJ_OP_MUL &&
      op != TJ_OP_MAXIMUM && op != TJ_OP_MINIMUM) {
    record(k, tj_invalid("kernel @%s: store_at: %s does not combine", k->name,
                         tj_op_info(op)->name));
    return;
  }
  const tj_kir_inst_t* o = arg(k, offset, "store_at");
  if (!o) return;
  if (o->dtype != TJ_DTYPE_I64) {
    record(k, tj_invalid("kernel @%s: store_at: offset %%%u is %s, not i64",
                         k->name, offset, tj_dtype_name(o->dtype)));
    return;
  }
  const tj_kir_inst_t* x = arg(k, value, "store_at");
  if (!x) return;
  tj_dtype_t bd = k->buffers[buffer].dtype;
  if (x->dtype != bd || (op != TJ_OP_COUNT_ && bd == TJ_DTYPE_BOOL)) {
    record(k, tj_invalid("kernel @%s: store_at of %s (%%%u) into %s buffer "
                         "%%%s",
                         k->name, tj_dtype_name(x->dtype), value,
                         tj_dtype_name(bd), k->buffers[buffer].name));
    return;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_STORE_AT, x->dtype);
  i.ref = buffer;
  i.op = op;
  i.num_args = 2;
  i.args[0] = offset;
  i.args[1] = value;
  append(k, &i);
}

void tj_kir_yield(tj_kir_t* k, uint32_t value) {
  if (!usable(k)) return;
  tj_kir_phase_t* p = open_phase(k);
  if (!p || (p->kind != TJ_KIR_PHASE_REDUCE && p->kind != TJ_KIR_PHASE_SCAN)) {
    record(k, tj_invalid("kernel @%s: yield outside a reduce phase or a scan",
                         k->name));
    return;
  }
  const tj_kir_inst_t* x = arg(k, value, "yield");
  if (!x) return;
  tj_dtype_t d = x->dtype;
  if (p->kind == TJ_KIR_PHASE_SCAN && d != p->result_dtype) {
    record(k,
           tj_invalid("kernel @%s: scan of %s yields %s (%%%u)", k->name,
                      tj_dtype_name(p->result_dtype), tj_dtype_name(d), value));
    return;
  }
  bool ok = p->reduce == TJ_KIR_REDUCE_MAX || p->reduce == TJ_KIR_REDUCE_MIN ||
            p->reduce == TJ_KIR_REDUCE_ARGMAX || d != TJ_DTYPE_BOOL;
  if (!ok) {
    record(k, tj_invalid("kernel @%s: reduce %s of bool (%%%u)", k->name,
                         tj_kir_reduce_name(p->reduce), value));
    return;
  }
  tj_kir_inst_t i = new_inst(TJ_KIR_YIELD, d);
  i.num_args = 1;
  i.args[0] = value;
  if (append(k, &i) != TJ_KIR_NONE && p->kind == TJ_KIR_PHASE_REDUCE) {
    p->result_dtype = p->reduce == TJ_KIR_REDUCE_ARGMAX ? TJ_DTYPE_I64 : d;
  }
}

//===--- verification ---===//

// Structural rules the builder cannot check one call at a time.
static tj_status_t verify(const tj_kir_t* k) {
  if (k->rank == 0) {
    return tj_invalid("kernel @%s: no iteration space", k->name);
  }
  uint32_t num_a = 0, num_b = 0, num_out = 0, num_attn[4] = {0, 0, 0, 0};
  uint32_t num_bq[2] = {0, 0}, num_conv[3] = {0, 0, 0};
  uint32_t num_attn_bwd[3] = {0, 0, 0}, num_b2 = 0;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role == TJ_KIR_GEMM_B2) {
      // swiglu (issue 14): the dual GEMM's second B, f16/bf16 as the
      // wgmma kernels that run it take (an 8-bit or quantized gemm has
      // none).
      bool half = buf->dtype == TJ_DTYPE_F16 || buf->dtype == TJ_DTYPE_BF16;
      if (k->kind != TJ_KIR_GEMM || !half || !k->allow_half_gemm ||
          k->bq.bits || num_b2++) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: a dual gemm's B2 is one f16/bf16 "
            "operand of a gemm that is not quantized",
            k->name, buf->name);
      }
      continue;
    }
    if (buf->role == TJ_KIR_GEMM_BSCALE || buf->role == TJ_KIR_GEMM_BZERO) {
      // qfold (issue 17): a quantized B's tables. The scale is A's
      // dtype. Zero points are unpacked: int4's are i8 (signed) or u8.
      const tj_dtype_t want =
          buf->role == TJ_KIR_GEMM_BSCALE ? bq_a_dtype(k)
          : k->bq.bits == 4 ? (k->bq.int4_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8)
                            : bq_dtype(k);
      if (k->kind != TJ_KIR_GEMM || !k->bq.bits || buf->dtype != want ||
          num_bq[buf->role - TJ_KIR_GEMM_BSCALE]++) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: a quantized gemm B's %s must be %s, one "
            "per kernel",
            k->name, buf->name, role_name(buf->role), tj_dtype_name(want));
      }
      continue;
    }
    if (buf->role >= TJ_KIR_ATTN_DO) {
      // The backward's operands: dL/dy of q's dtype, lse and delta float.
      const bool fl = buf->dtype == TJ_DTYPE_F32 ||
                      buf->dtype == TJ_DTYPE_F16 || buf->dtype == TJ_DTYPE_BF16;
      const bool bwd = k->attention.op == TJ_KIR_ATTENTION_DQ ||
                       k->attention.op == TJ_KIR_ATTENTION_DKV;
      if (k->kind != TJ_KIR_ATTENTION || !bwd || !fl ||
          num_attn_bwd[buf->role - TJ_KIR_ATTN_DO]++) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: attention's %s is one float operand of "
            "an attention_dq or attention_dkv kernel",
            k->name, buf->name, role_name(buf->role));
      }
      continue;
    }
    if (buf->role >= TJ_KIR_CONV_X) {
      if (k->kind != TJ_KIR_CONV || buf->dtype != TJ_DTYPE_F32 ||
          num_conv[buf->role - TJ_KIR_CONV_X]++) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: a conv operand must be f32, one of each "
            "role, in a conv kernel",
            k->name, buf->name);
      }
      continue;
    }
    if (k->kind == TJ_KIR_CONV && buf->role != TJ_KIR_OUTPUT &&
        buf->role != TJ_KIR_INPUT) {
      return tj_invalid(
          "kernel @%s: buffer %%%s: a conv kernel reads x, w, the bias and "
          "its epilogue's inputs",
          k->name, buf->name);
    }
    if (buf->role >= TJ_KIR_ATTN_Q) {
      if (k->kind != TJ_KIR_ATTENTION) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: attention operand in a %s "
            "kernel",
            k->name, buf->name, tj_kir_kind_name(k->kind));
      }
      bool fl = buf->dtype == TJ_DTYPE_F32 || buf->dtype == TJ_DTYPE_F16 ||
                buf->dtype == TJ_DTYPE_BF16;
      bool mask_ok =
          buf->role == TJ_KIR_ATTN_MASK && (buf->dtype == TJ_DTYPE_BOOL || fl);
      if (!fl && !mask_ok) {
        return tj_unsupported("kernel @%s: attention operand %%%s is %s",
                              k->name, buf->name, tj_dtype_name(buf->dtype));
      }
      ++num_attn[buf->role - TJ_KIR_ATTN_Q];
    } else if (k->kind == TJ_KIR_ATTENTION && buf->role != TJ_KIR_OUTPUT) {
      return tj_invalid(
          "kernel @%s: buffer %%%s: an attention kernel reads "
          "only q, k, v and mask buffers",
          k->name, buf->name);
    }
    if (buf->role == TJ_KIR_GEMM_A || buf->role == TJ_KIR_GEMM_B) {
      if (k->kind != TJ_KIR_GEMM) {
        return tj_invalid(
            "kernel @%s: buffer %%%s: gemm operand in a %s "
            "kernel",
            k->name, buf->name, tj_kir_kind_name(k->kind));
      }
      bool half = buf->dtype == TJ_DTYPE_F16 || buf->dtype == TJ_DTYPE_BF16;
      if (k->bq.bits) {
        // qfold: f32 A (f16/bf16 with allow_half_gemm: the CUDA kernel),
        // quantized B (its bytes), f32 accumulation.
        bool ok = buf->role == TJ_KIR_GEMM_A ? buf->dtype == TJ_DTYPE_F32 ||
                                                   (half && k->allow_half_gemm)
                                             : buf->dtype == bq_dtype(k);
        if (!ok) {
          return tj_invalid(
              "kernel @%s: gemm operand %%%s is %s; a quantized-B gemm takes "
              "f32 (or f16/bf16) A and %s B",
              k->name, buf->name, tj_dtype_name(buf->dtype),
              tj_dtype_name(bq_dtype(k)));
        }
        num_a += buf->role == TJ_KIR_GEMM_A;
        num_b += buf->role == TJ_KIR_GEMM_B;
        continue;
      }
      if (k->allow_int8_gemm && is_int8(buf->dtype) != tj_kir_gemm_is_int8(k)) {
        return tj_invalid(
            "kernel @%s: gemm operand %%%s is %s; an integer gemm takes "
            "i8 or u8 for both operands",
            k->name, buf->name, tj_dtype_name(buf->dtype));
      }
      if (k->allow_int8_gemm && is_float8(buf->dtype) != tj_kir_gemm_is_f8(k)) {
        return tj_invalid(
            "kernel @%s: gemm operand %%%s is %s; a float8 gemm takes "
            "f8e4m3 or f8e5m2 for both operands",
            k->name, buf->name, tj_dtype_name(buf->dtype));
      }
      if (buf->dtype != TJ_DTYPE_F32 && !(half && k->allow_half_gemm) &&
          !((is_int8(buf->dtype) || is_float8(buf->dtype)) &&
            k->allow_int8_gemm)) {
        return tj_unsupported(
            "kernel @%s: gemm operand %%%s is %s; only f32 "
            "operands are supported",
            k->name, buf->name, tj_dtype_name(buf->dtype));
      }
      num_a += buf->role == TJ_KIR_GEMM_A;
      num_b += buf->role == TJ_KIR_GEMM_B;
    }
    if (buf->role == TJ_KIR_OUTPUT) {
      ++num_out;
      // A zero stride would make several points write one element: in a
      // row reduce only the reduced dim of a row-level output may do it.
      // attention_dkv's [dk | dv] sums over G and Tq.
      const bool dkv = k->kind == TJ_KIR_ATTENTION &&
                       k->attention.op == TJ_KIR_ATTENTION_DKV;
      for (int32_t d = 0; d < k->rank; ++d) {
        bool reduced = dkv ? d == k->rank - 3 || d == k->rank - 2
                           : (k->kind == TJ_KIR_ROW_REDUCE ||
                              k->kind == TJ_KIR_ATTENTION) &&
                                 d == k->rank - 1;
        if (tj_kir_ival_is_const(buf->strides[d], 0) && !reduced &&
            !tj_kir_ival_is_const(k->dims[d], 1)) {
          return tj_invalid("kernel @%s: output %%%s has stride 0 in dim %d",
                            k->name, buf->name, d);
        }
      }
    }
  }
  if (k->bq.bits && (k->kind != TJ_KIR_GEMM || num_bq[0] != 1 ||
                     (k->bq.bits != 8 && k->bq.bits != 4) || k->bq.group < 0)) {
    return tj_invalid(
        "kernel @%s: a quantized gemm B needs bits 8 or 4, a group >= 0 and "
        "one scale buffer",
        k->name);
  }
  if (k->kind == TJ_KIR_GEMM && (num_a != 1 || num_b != 1)) {
    return tj_invalid(
        "kernel @%s: a gemm needs one A and one B buffer, has "
        "%u and %u",
        k->name, num_a, num_b);
  }
  if (num_b2) {
    // B2 is read as B is: B's dtype and strides.
    const tj_kir_buffer_t *b1 = NULL, *b2 = NULL;
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      if (k->buffers[b].role == TJ_KIR_GEMM_B) b1 = &k->buffers[b];
      if (k->buffers[b].role == TJ_KIR_GEMM_B2) b2 = &k->buffers[b];
    }
    bool same = b1->dtype == b2->dtype;
    for (int32_t d = 0; d < k->rank && same; ++d) {
      same = b1->strides[d].param == b2->strides[d].param &&
             b1->strides[d].value == b2->strides[d].value;
    }
    if (!same) {
      return tj_invalid(
          "kernel @%s: a dual gemm's B2 %%%s differs from B %%%s in dtype or "
          "strides",
          k->name, b2->name, b1->name);
    }
  }
  for (uint32_t ph = 0; ph < k->num_phases && !num_b2; ++ph) {
    for (uint32_t i = 0; i < k->phases[ph].num_insts; ++i) {
      const tj_kir_inst_t* in = &k->phases[ph].insts[i];
      if (in->kind == TJ_KIR_ACC && in->ref != 0)
        return tj_invalid("kernel @%s: acc2 (%%%u) without a B2 buffer",
                          k->name, i);
    }
  }
  if (num_out == 0) {
    return tj_invalid("kernel @%s: no output buffer", k->name);
  }
  const tj_kir_attention_op_t aop = k->attention.op;
  const bool bwd = aop == TJ_KIR_ATTENTION_DQ || aop == TJ_KIR_ATTENTION_DKV;
  if (k->kind == TJ_KIR_ATTENTION &&
      (num_attn[0] != 1 || num_attn[1] != 1 ||
       num_attn[2] != (aop == TJ_KIR_ATTENTION_LSE ? 0u : 1u) ||
       num_attn[3] > 1 || num_out != (k->attention.with_lse ? 2u : 1u) ||
       (k->attention.with_lse && aop != TJ_KIR_ATTENTION_FORWARD) ||
       (bwd && (num_attn_bwd[0] != 1 || num_attn_bwd[1] != 1 ||
                num_attn_bwd[2] != 1)))) {
    return tj_invalid(
        "kernel @%s: an attention kernel needs one q, k, output buffer (the "
        "forward with_lse two: y, lse), at most one mask, one v but for "
        "attention_lse, and for attention_dq and attention_dkv one dy, lse "
        "and delta",
        k->name);
  }
  if (k->kind == TJ_KIR_CONV) {
    // The space is [N, O, out spatial..] and the window the conv's. With
    // no epilogue (an empty MAP phase) the one output is the conv's f32
    // value; an epilogue (dense and grouped convs) stores what it computes, of
    // any dtype. A pool (dwbw) reads no weight.
    const bool pool = k->conv.window >= TJ_KIR_WINDOW_MAX;
    bool epilogue = k->num_phases == 1 && k->phases[0].num_insts > 0;
    bool ok = num_conv[0] == 1 && num_conv[1] == !pool &&
              (!pool || num_conv[2] == 0) && (num_out == 1 || epilogue) &&
              !(epilogue && k->conv.window) && k->conv.spatial == k->rank - 2 &&
              k->conv.c >= 1 && k->buffers[0].dtype == TJ_DTYPE_F32;
    for (int32_t d = 1; ok && d < k->rank; ++d) ok = k->dims[d].param < 0;
    // Grouped: the groups divide O.
    ok = ok && k->dims[1].value % tj_kir_conv_groups(&k->conv) == 0;
    for (uint32_t b = 0; ok && !epilogue && b < k->num_buffers; ++b)
      ok = k->buffers[b].dtype == TJ_DTYPE_F32;
    if (!ok) {
      return tj_invalid(
          "kernel @%s: a conv kernel needs one f32 x and w, one f32 output "
          "or an epilogue, a constant [O, spatial..] and a window of rank - "
          "2 axes",
          k->name);
    }
  }
  if (k->num_phases == 0) {
    return tj_invalid("kernel @%s: no phases", k->name);
  }
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    uint32_t yields = 0;
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      const tj_kir_inst_t* in = &ph->insts[i];
      if (in->kind == TJ_KIR_YIELD) {
        ++yields;
        if (i + 1 != ph->num_insts) {
          return tj_invalid("kernel @%s: phase %u: yield %%%u is not last",
                            k->name, p, i);
        }
      }
      if (in->kind == TJ_KIR_STORE && ph->kind == TJ_KIR_PHASE_REDUCE) {
        return tj_invalid(
            "kernel @%s: phase %u: store %%%u in a reduce "
            "phase",
            k->name, p, i);
      }
      // A ROW phase runs once per row at element 0 of L, which does not
      // exist when L == 0: it may only touch per-row buffers.
      if (ph->kind == TJ_KIR_PHASE_ROW &&
          (in->kind == TJ_KIR_LOAD || in->kind == TJ_KIR_LOAD_AT ||
           in->kind == TJ_KIR_STORE) &&
          !tj_kir_ival_is_const(k->buffers[in->ref].strides[k->rank - 1], 0)) {
        return tj_invalid(
            "kernel @%s: phase %u: %%%u accesses %%%s, which "
            "has a nonzero stride along the reduced dim, in a "
            "row phase",
            k->name, p, i, k->buffers[in->ref].name);
      }
    }
    bool yielding =
        ph->kind == TJ_KIR_PHASE_REDUCE || ph->kind == TJ_KIR_PHASE_SCAN;
    if (yielding != (yields == 1)) {
      return tj_invalid("kernel @%s: phase %u (%s) has %u yields", k->name, p,
                        phase_kind_name(ph->kind), yields);
    }
  }
  return NULL;
}

tj_status_t tj_kir_finalize(tj_kir_t* k) {
  if (k->error) {
    tj_status_t s = k->error;
    k->error = tj_status_clone(s);
    return s;
  }
  if (k->finalized) return NULL;
  tj_status_t s = verify(k);
  if (s) return s;
  k->finalized = true;
  return NULL;
}

//===--- printing ---===//

typedef struct sbuf_t {
  tj_allocator_t allocator;
  char* data;
  size_t size, capacity;
  bool failed;
} sbuf_t;

static void sbuf_printf(sbuf_t* s, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);

static void sbuf_printf(sbuf_t* s, const char* format, ...) {
  if (s->failed) return;
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (n < 0) {
    s->failed = true;
    va_end(args);
    return;
  }
  size_t need = s->size + (size_t)n + 1;
  if (need > s->capacity) {
    size_t cap = s->capacity ? s->capacity : 256;
    while (cap < need) cap *= 2;
    char* grown = tj_realloc(s->allocator, s->data, s->capacity, cap);
    if (!grown) {
      s->failed = true;
      va_end(args);
      return;
    }
    s->data = grown;
    s->capacity = cap;
  }
  vsnprintf(s->data + s->size, (size_t)n + 1, format, args);
  s->size += (size_t)n;
  va_end(args);
}

static void print_ival(sbuf_t* s, const tj_kir_t* k, tj_kir_ival_t v) {
  if (v.param >= 0) {
    sbuf_printf(s, "$%s", k->param_names[v.param]);
  } else {
    sbuf_printf(s, "%" PRId64, v.value);
  }
}

static void print_ivals(sbuf_t* s, const tj_kir_t* k, int32_t n,
                        const tj_kir_ival_t* v) {
  sbuf_printf(s, "[");
  for (int32_t d = 0; d < n; ++d) {
    if (d) sbuf_printf(s, ", ");
    print_ival(s, k, v[d]);
  }
  sbuf_printf(s, "]");
}

static void print_sched_field(sbuf_t* s, const char* name, int32_t v) {
  if (v) {
    sbuf_printf(s, " %s %d", name, v);
  } else {
    sbuf_printf(s, " %s auto", name);
  }
}

static void print_inst(sbuf_t* s, const tj_kir_t* k, uint32_t index,
                       const tj_kir_inst_t* in) {
  const char* dt = tj_dtype_name(in->dtype);
  switch (in->kind) {
    case TJ_KIR_LOAD:
      sbuf_printf(s, "    %%%u = load %%%s : %s\n", index,
                  k->buffers[in->ref].name, dt);
      return;
    case TJ_KIR_LOAD_AT:
      sbuf_printf(s, "    %%%u = load %%%s + %%%u : %s\n", index,
                  k->buffers[in->ref].name, in->args[0], dt);
      return;
    case TJ_KIR_CONST:
      if (tj_dtype_is_float(in->dtype)) {
        sbuf_printf(s, "    %%%u = const %.17g : %s\n", index, in->fvalue, dt);
      } else {
        sbuf_printf(s, "    %%%u = const %" PRId64 " : %s\n", index, in->ivalue,
                    dt);
      }
      return;
    case TJ_KIR_PARAM:
      sbuf_printf(s, "    %%%u = param $%s : i64\n", index,
                  k->param_names[in->ref]);
      return;
    case TJ_KIR_INDEX:
      sbuf_printf(s, "    %%%u = index %u : i64\n", index, in->ref);
      return;
    case TJ_KIR_ACC:
      sbuf_printf(s, "    %%%u = acc%s : %s\n", index, in->ref ? "2" : "", dt);
      return;
    case TJ_KIR_ROW:
      sbuf_printf(s, "    %%%u = row ^%u : %s\n", index, in->ref, dt);
      return;
    case TJ_KIR_OP:
      sbuf_printf(s, "    %%%u = %s", index, tj_op_info(in->op)->name);
      for (uint32_t a = 0; a < in->num_args; ++a) {
        sbuf_printf(s, "%s %%%u", a ? "," : "", in->args[a]);
      }
      sbuf_printf(s, " : %s\n", dt);
      return;
    case TJ_KIR_STORE:
      sbuf_printf(s, "    store %%%s, %%%u\n", k->buffers[in->ref].name,
                  in->args[0]);
      return;
    case TJ_KIR_YIELD:
      sbuf_printf(s, "    yield %%%u\n", in->args[0]);
      return;
    case TJ_KIR_STORE_AT:
      sbuf_printf(s, "    store %s%s%%%s + %%%u, %%%u\n",
                  in->op == TJ_OP_COUNT_ ? "" : tj_op_info(in->op)->name,
                  in->op == TJ_OP_COUNT_ ? "" : " ", k->buffers[in->ref].name,
                  in->args[0], in->args[1]);
      return;
  }
}

tj_status_t tj_kir_print(const tj_kir_t* k, char** out_text) {
  *out_text = NULL;
  sbuf_t s = {k->allocator, NULL, 0, 0, false};
  sbuf_printf(&s, "kernel @%s %s ", k->name, tj_kir_kind_name(k->kind));
  print_ivals(&s, k, k->rank, k->dims);
  if (k->kind == TJ_KIR_GEMM) {
    sbuf_printf(&s, " k ");
    print_ival(&s, k, k->gemm_k);
    if (k->schedule.tile_m && k->schedule.tile_n) {
      sbuf_printf(&s, " tile %dx%d", k->schedule.tile_m, k->schedule.tile_n);
    } else {
      sbuf_printf(&s, " tile auto");
    }
    print_sched_field(&s, "mc", k->schedule.mc);
    print_sched_field(&s, "nc", k->schedule.nc);
    print_sched_field(&s, "kc", k->schedule.kc);
    if (k->bq.bits == 8) {
      sbuf_printf(&s, " bq int8 group %lld", (long long)k->bq.group);
    } else if (k->bq.bits == 4) {
      sbuf_printf(&s, " bq int4%s group %lld", k->bq.int4_signed ? "s" : "u",
                  (long long)k->bq.group);
    }
    if (k->b_int7) sbuf_printf(&s, " b_int7");
    if (k->b_prepacked) sbuf_printf(&s, " b_prepacked");
  }
  if (k->kind == TJ_KIR_ATTENTION) {
    sbuf_printf(&s, " d ");
    print_ival(&s, k, k->attention.d);
    sbuf_printf(&s, " dv ");
    print_ival(&s, k, k->attention.dv);
    static const char* const ops[4] = {"", " lse", " dq", " dkv"};
    sbuf_printf(&s, " scale %.17g%s%s%s", k->attention.scale,
                k->attention.causal ? " causal" : "", ops[k->attention.op],
                k->attention.with_lse ? " with_lse" : "");
  }
  if (k->kind == TJ_KIR_CONV) {
    const tj_kir_conv_t* c = &k->conv;
    static const char* const windows[5] = {"", " depthwise", " max", " avg",
                                           " avg_pad"};
    sbuf_printf(&s, "%s c %lld", windows[c->window], (long long)c->c);
    if (c->groups > 1) sbuf_printf(&s, " groups %d", c->groups);
    if (k->b_prepacked) sbuf_printf(&s, " w_prepacked");
    if (c->ocvec) sbuf_printf(&s, " ocvec");
    if (k->schedule.mc) sbuf_printf(&s, " oc %d", k->schedule.mc);
    if (k->schedule.nc) sbuf_printf(&s, " nc %d", k->schedule.nc);
    if (k->schedule.kc) sbuf_printf(&s, " below_batch %d", k->schedule.kc);
    if (c->xblock) sbuf_printf(&s, " xblock %d", c->xblock);
    if (c->yblock) sbuf_printf(&s, " yblock %d", c->yblock);
    if (c->inblock) sbuf_printf(&s, " inblock 0x%x", (unsigned)c->inblock);
    static const char* const names[6] = {"in",       "kernel", "stride",
                                         "dilation", "low",    "high"};
    const int64_t* lists[6] = {c->in,       c->kernel, c->stride,
                               c->dilation, c->low,    c->high};
    for (int32_t l = 0; l < (c->window ? 6 : 5); ++l) {
      sbuf_printf(&s, " %s", names[l]);
      for (int32_t i = 3 - c->spatial; i < 3; ++i)
        sbuf_printf(&s, "%s%lld", i > 3 - c->spatial ? "x" : " ",
                    (long long)lists[l][i]);
    }
  }
  if (k->num_params) {
    sbuf_printf(&s, " (");
    for (uint32_t p = 0; p < k->num_params; ++p) {
      sbuf_printf(&s, "%s$%s", p ? ", " : "", k->param_names[p]);
    }
    sbuf_printf(&s, ")");
  }
  sbuf_printf(&s, " {\n");
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    sbuf_printf(&s, "  buf %%%s: %s %s ", buf->name, tj_dtype_name(buf->dtype),
                role_name(buf->role));
    print_ivals(&s, k, k->rank, buf->strides);
    sbuf_printf(&s, "\n");
  }
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    if (ph->kind == TJ_KIR_PHASE_REDUCE) {
      sbuf_printf(&s, "  reduce %s -> ^%u {\n", tj_kir_reduce_name(ph->reduce),
                  p);
    } else if (ph->kind == TJ_KIR_PHASE_SCAN) {
      sbuf_printf(&s, "  scan %s%s -> ^%u {\n", tj_kir_reduce_name(ph->reduce),
                  ph->reverse ? " reverse" : "", p);
    } else if (k->kind == TJ_KIR_GEMM) {
      sbuf_printf(&s, "  epilogue {\n");
    } else {
      sbuf_printf(&s, "  %s {\n", phase_kind_name(ph->kind));
    }
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      print_inst(&s, k, i, &ph->insts[i]);
    }
    sbuf_printf(&s, "  }\n");
  }
  sbuf_printf(&s, "}\n");
  if (s.failed) {
    tj_free(k->allocator, s.data, s.capacity);
    return tj_status_oom();
  }
  // Hand out exactly strlen + 1 bytes so tj_free_string can free it.
  char* text = tj_strdup(k->allocator, s.data);
  tj_free(k->allocator, s.data, s.capacity);
  if (!text) return tj_status_oom();
  *out_text = text;
  return NULL;
}

//===--- same code ---===//

// Every field compared below; a new one changes these sizes (x86-64).
_Static_assert(sizeof(tj_kir_t) == 576 && sizeof(tj_kir_phase_t) == 32 &&
                   sizeof(tj_kir_inst_t) == 48 &&
                   sizeof(tj_kir_buffer_t) == 144,
               "a field was added: compare it in tj_kir_same_code");

static bool ival_equal(tj_kir_ival_t a, tj_kir_ival_t b) {
  return a.value == b.value && a.param == b.param;
}

// Bit for bit: -0.0 and 0.0 are different constants, NaNs by payload.
static bool double_equal(double a, double b) {
  return memcmp(&a, &b, sizeof(double)) == 0;
}

static bool inst_equal(const tj_kir_inst_t* a, const tj_kir_inst_t* b) {
  if (a->kind != b->kind || a->op != b->op || a->dtype != b->dtype ||
      a->num_args != b->num_args || a->ref != b->ref ||
      a->ivalue != b->ivalue || !double_equal(a->fvalue, b->fvalue)) {
    return false;
  }
  for (uint32_t i = 0; i < a->num_args && i < 3; ++i) {
    if (a->args[i] != b->args[i]) return false;
  }
  return true;
}

// tj_kir_same_code and tj_kir_code_bytes must name every field of a kernel
// that its code depends on (the kernel set's cache key is the latter's
// bytes: a field left out lets two different kernels share one object).
// A field added to tj_kir_t or tj_kir_conv_t changes these sizes on
// x86-64: add it to both functions, then update the numbers.
#if defined(__x86_64__)
_Static_assert(sizeof(tj_kir_t) == 576,
               "a new tj_kir_t field: add it to tj_kir_same_code and "
               "tj_kir_code_bytes");
_Static_assert(sizeof(tj_kir_conv_t) == 184,
               "a new tj_kir_conv_t field: add it to conv_equal and "
               "tj_kir_code_bytes");
#endif

// Field by field: the struct has padding after |spatial|, which a copy
// need not preserve.
static bool conv_equal(const tj_kir_conv_t* a, const tj_kir_conv_t* b) {
  if (a->spatial != b->spatial || a->window != b->window || a->c != b->c ||
      a->ocvec != b->ocvec || a->xblock != b->xblock ||
      a->yblock != b->yblock || a->inblock != b->inblock ||
      tj_kir_conv_groups(a) != tj_kir_conv_groups(b))
    return false;
  for (int32_t i = 0; i < 3; ++i) {
    if (a->in[i] != b->in[i] || a->kernel[i] != b->kernel[i] ||
        a->stride[i] != b->stride[i] || a->dilation[i] != b->dilation[i] ||
        a->low[i] != b->low[i] || a->high[i] != b->high[i]) {
      return false;
    }
  }
  return true;
}

bool tj_kir_same_code(const tj_kir_t* a, const tj_kir_t* b) {
  if (a->kind != b->kind || a->rank != b->rank ||
      a->num_params != b->num_params || a->num_buffers != b->num_buffers ||
      a->num_phases != b->num_phases || a->finalized != b->finalized ||
      (a->error != NULL) != (b->error != NULL) ||
      a->allow_half_gemm != b->allow_half_gemm ||
      a->allow_int8_gemm != b->allow_int8_gemm ||
      !ival_equal(a->gemm_k, b->gemm_k) ||
      a->schedule.tile_m != b->schedule.tile_m ||
      a->schedule.tile_n != b->schedule.tile_n ||
      a->schedule.mc != b->schedule.mc || a->schedule.nc != b->schedule.nc ||
      a->schedule.kc != b->schedule.kc ||
      !ival_equal(a->attention.d, b->attention.d) ||
      !ival_equal(a->attention.dv, b->attention.dv) ||
      !double_equal(a->attention.scale, b->attention.scale) ||
      a->attention.causal != b->attention.causal ||
      a->attention.with_lse != b->attention.with_lse ||
      a->attention.op != b->attention.op || a->bq.bits != b->bq.bits ||
      a->bq.int4_signed != b->bq.int4_signed || a->bq.group != b->bq.group ||
      a->b_int7 != b->b_int7 || a->b_prepacked != b->b_prepacked ||
      !conv_equal(&a->conv, &b->conv)) {
    return false;
  }
  int32_t rank = a->rank < TJ_KIR_MAX_RANK ? a->rank : TJ_KIR_MAX_RANK;
  for (int32_t d = 0; d < rank; ++d) {
    if (!ival_equal(a->dims[d], b->dims[d])) return false;
  }
  // Params are the graph's symbols by name: the names are the values.
  for (uint32_t p = 0; p < a->num_params; ++p) {
    if (strcmp(a->param_names[p], b->param_names[p]) != 0) return false;
  }
  for (uint32_t i = 0; i < a->num_buffers; ++i) {
    const tj_kir_buffer_t *x = &a->buffers[i], *y = &b->buffers[i];
    if (x->dtype != y->dtype || x->role != y->role) return false;
    for (int32_t d = 0; d < TJ_KIR_MAX_RANK; ++d) {
      if (!ival_equal(x->strides[d], y->strides[d])) return false;
    }
  }
  for (uint32_t f = 0; f < a->num_phases; ++f) {
    const tj_kir_phase_t *x = &a->phases[f], *y = &b->phases[f];
    if (x->kind != y->kind || x->reduce != y->reduce ||
        x->result_dtype != y->result_dtype || x->reverse != y->reverse ||
        x->num_insts != y->num_insts) {
      return false;
    }
    for (uint32_t i = 0; i < x->num_insts; ++i) {
      if (!inst_equal(&x->insts[i], &y->insts[i])) return false;
    }
  }
  return true;
}

// tj_kir_code_bytes' writer: fields gathered in a buffer, handed to the
// caller's sink a kilobyte at a time.
typedef struct code_writer_t {
  tj_kir_put_fn put;
  void* user;
  size_t used;
  unsigned char buffer[1024];
} code_writer_t;

static void code_flush(code_writer_t* w) {
  if (w->used) w->put(w->user, w->buffer, w->used);
  w->used = 0;
}

static void code_put(code_writer_t* w, const void* data, size_t size) {
  if (size > sizeof(w->buffer) - w->used) code_flush(w);
  if (size > sizeof(w->buffer)) {
    w->put(w->user, data, size);
    return;
  }
  memcpy(w->buffer + w->used, data, size);
  w->used += size;
}

static void code_i64(code_writer_t* w, int64_t v) {
  code_put(w, &v, sizeof(v));
}

static void code_f64(code_writer_t* w, double v) { code_put(w, &v, sizeof(v)); }

static void code_ival(code_writer_t* w, tj_kir_ival_t v) {
  code_i64(w, v.value);
  code_i64(w, v.param);
}

void tj_kir_code_bytes(const tj_kir_t* k, tj_kir_put_fn put, void* user) {
  code_writer_t w = {.put = put, .user = user, .used = 0};
  // Field by field, as tj_kir_same_code compares them (no struct bytes:
  // padding), every count before what it counts, so that two kernels
  // write the same bytes exactly when they have the same code.
  int64_t head[] = {k->kind,
                    k->rank,
                    k->num_params,
                    k->num_buffers,
                    k->num_phases,
                    k->finalized,
                    k->error != NULL,
                    k->allow_half_gemm,
                    k->allow_int8_gemm,
                    k->schedule.tile_m,
                    k->schedule.tile_n,
                    k->schedule.mc,
                    k->schedule.nc,
                    k->schedule.kc,
                    k->attention.causal,
                    k->attention.with_lse,
                    k->attention.op,
                    k->bq.bits,
                    k->bq.int4_signed,
                    k->bq.group,
                    k->b_int7,
                    k->b_prepacked};
  code_put(&w, head, sizeof(head));
  code_ival(&w, k->gemm_k);
  code_ival(&w, k->attention.d);
  code_ival(&w, k->attention.dv);
  code_f64(&w, k->attention.scale);
  const tj_kir_conv_t* conv = &k->conv;
  code_i64(&w, conv->spatial);
  code_i64(&w, conv->window);
  code_i64(&w, conv->c);
  code_i64(&w, conv->ocvec);
  code_i64(&w, conv->xblock);
  code_i64(&w, conv->yblock);
  code_i64(&w, conv->inblock);
  code_i64(&w, tj_kir_conv_groups(conv));
  for (int32_t i = 0; i < 3; ++i) {
    int64_t window[] = {conv->in[i],       conv->kernel[i], conv->stride[i],
                        conv->dilation[i], conv->low[i],    conv->high[i]};
    code_put(&w, window, sizeof(window));
  }
  int32_t rank = k->rank < TJ_KIR_MAX_RANK ? k->rank : TJ_KIR_MAX_RANK;
  for (int32_t d = 0; d < rank; ++d) code_ival(&w, k->dims[d]);
  for (uint32_t p = 0; p < k->num_params; ++p) {
    size_t n = strlen(k->param_names[p]);
    code_i64(&w, (int64_t)n);
    code_put(&w, k->param_names[p], n);
  }
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* b = &k->buffers[i];
    code_i64(&w, b->dtype);
    code_i64(&w, b->role);
    for (int32_t d = 0; d < TJ_KIR_MAX_RANK; ++d) code_ival(&w, b->strides[d]);
  }
  for (uint32_t f = 0; f < k->num_phases; ++f) {
    const tj_kir_phase_t* ph = &k->phases[f];
    int64_t phase[] = {ph->kind, ph->reduce, ph->result_dtype, ph->reverse,
                       ph->num_insts};
    code_put(&w, phase, sizeof(phase));
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      const tj_kir_inst_t* in = &ph->insts[i];
      // The args past num_args are not compared (nor written).
      uint32_t words[8] = {(uint32_t)in->kind, (uint32_t)in->op,
                           (uint32_t)in->dtype, in->num_args, in->ref};
      uint32_t n = 5;
      for (uint32_t a = 0; a < in->num_args && a < 3; ++a) {
        words[n++] = in->args[a];
      }
      code_put(&w, words, sizeof(uint32_t) * n);
      code_f64(&w, in->fvalue);
      code_i64(&w, in->ivalue);
    }
  }
  code_flush(&w);
}

//===--- copy ---===//

// Bytes |size| takes in a block carved as tj_kir_copy carves it: each
// piece 16-byte aligned, as the arena aligns its allocations.
static size_t piece(size_t size) { return (size + 15) & ~(size_t)15; }

static void* carve(unsigned char** at, size_t size) {
  void* p = *at;
  *at += piece(size);
  return p;
}

static const char* carve_string(unsigned char** at, const char* s) {
  size_t n = strlen(s) + 1;
  char* p = carve(at, n);
  memcpy(p, s, n);
  return p;
}

// What tj_kir_copy and tj_kir_borrow check of their arguments.
static tj_status_t check_copy(const tj_kir_t* k, const char* name,
                              const char* const* buffer_names) {
  if (!k->finalized || k->error) {
    return tj_internal("kernel @%s: only a finalized kernel is copied",
                       k->name);
  }
  TJ_RETURN_IF_ERROR(check_kernel_name(name));
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (!is_identifier(buffer_names[b])) {
      return tj_invalid("kernel @%s: buffer name \"%s\" is not an identifier",
                        name, buffer_names[b] ? buffer_names[b] : "(null)");
    }
  }
  return NULL;
}

// A copy of |k|'s struct (every scalar field; the caller makes the arrays it
// owns) with an arena of its own holding one block of |total| bytes, |*at|.
static tj_status_t new_copy(const tj_kir_t* k, size_t total, tj_kir_t** out,
                            unsigned char** at) {
  tj_allocator_t al = k->allocator;
  tj_kir_t* c = tj_alloc(al, sizeof(*c));
  if (!c) return tj_status_oom();
  *c = *k;
  tj_arena_initialize(&c->arena, al);
  c->error = NULL;
  *at = tj_arena_alloc(&c->arena, total);
  if (!*at) {
    tj_arena_deinitialize(&c->arena);
    tj_free(al, c, sizeof(*c));
    return tj_status_oom();
  }
  *out = c;
  return NULL;
}

tj_status_t tj_kir_copy(const tj_kir_t* kernel, const char* name,
                        const char* const* buffer_names,
                        tj_kir_t** out_kernel) {
  *out_kernel = NULL;
  const tj_kir_t* k = kernel;
  TJ_RETURN_IF_ERROR(check_copy(k, name, buffer_names));
  // The copy is finalized, so its arrays never grow: the name, the arrays
  // and their strings are one block of its arena (a copy costs two
  // allocations, not one per array; a 24-layer stack copies 44 groups'
  // kernels a compile). Their capacities stay 0, which tells
  // tj_kir_destroy that the arena holds them.
  size_t total = piece(strlen(name) + 1);
  total += piece(sizeof(char*) * k->num_params);
  for (uint32_t p = 0; p < k->num_params; ++p)
    total += piece(strlen(k->param_names[p]) + 1);
  total += piece(sizeof(tj_kir_buffer_t) * k->num_buffers);
  for (uint32_t b = 0; b < k->num_buffers; ++b)
    total += piece(strlen(buffer_names[b]) + 1);
  total += piece(sizeof(tj_kir_phase_t) * k->num_phases);
  for (uint32_t f = 0; f < k->num_phases; ++f)
    total += piece(sizeof(tj_kir_inst_t) * k->phases[f].num_insts);
  tj_kir_t* c;
  unsigned char* at;
  TJ_RETURN_IF_ERROR(new_copy(k, total, &c, &at));
  c->name = carve_string(&at, name);
  c->param_names = carve(&at, sizeof(char*) * k->num_params);
  for (uint32_t p = 0; p < k->num_params; ++p)
    c->param_names[p] = carve_string(&at, k->param_names[p]);
  c->buffers = carve(&at, sizeof(tj_kir_buffer_t) * k->num_buffers);
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    c->buffers[b] = k->buffers[b];
    c->buffers[b].name = carve_string(&at, buffer_names[b]);
  }
  c->phases = carve(&at, sizeof(tj_kir_phase_t) * k->num_phases);
  for (uint32_t f = 0; f < k->num_phases; ++f) {
    const tj_kir_phase_t* from = &k->phases[f];
    tj_kir_phase_t* to = &c->phases[f];
    *to = *from;
    to->insts = carve(&at, sizeof(tj_kir_inst_t) * from->num_insts);
    if (from->num_insts) {
      memcpy(to->insts, from->insts, sizeof(tj_kir_inst_t) * from->num_insts);
    }
    to->inst_capacity = 0;
  }
  c->param_capacity = c->buffer_capacity = c->phase_capacity = 0;
  *out_kernel = c;
  return NULL;
}

tj_status_t tj_kir_borrow(const tj_kir_t* kernel, const char* name,
                          const char* const* buffer_names,
                          tj_kir_t** out_kernel) {
  *out_kernel = NULL;
  const tj_kir_t* k = kernel;
  TJ_RETURN_IF_ERROR(check_copy(k, name, buffer_names));
  // Only the names are the copy's: its name and its buffers (each with its
  // name) in one block of its arena; the params and phases are |kernel|'s,
  // read in place (capacities 0: tj_kir_destroy frees none of them).
  size_t total = piece(strlen(name) + 1);
  total += piece(sizeof(tj_kir_buffer_t) * k->num_buffers);
  for (uint32_t b = 0; b < k->num_buffers; ++b)
    total += piece(strlen(buffer_names[b]) + 1);
  tj_kir_t* c;
  unsigned char* at;
  TJ_RETURN_IF_ERROR(new_copy(k, total, &c, &at));
  c->name = carve_string(&at, name);
  c->buffers = carve(&at, sizeof(tj_kir_buffer_t) * k->num_buffers);
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    c->buffers[b] = k->buffers[b];
    c->buffers[b].name = carve_string(&at, buffer_names[b]);
  }
  c->param_capacity = c->buffer_capacity = c->phase_capacity = 0;
  *out_kernel = c;
  return NULL;
}
