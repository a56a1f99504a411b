// kir/kernel_ir.c: the printed form of each template (exact text, so that
// FileCheck tests can rely on it), the builder's sticky errors and the
// verifier's structural rules, and an OOM sweep over building + printing.

#include <stdio.h>
#include <string.h>

#include "kir/kernel_ir.h"
#include "tests/unit/test.h"

static const tj_kir_ival_t kUnit[1] = {{1, -1}};

// The doc example of kernel_ir.h: y = x + b with a broadcast b.
static tj_status_t build_bias_add(tj_allocator_t a, tj_kir_t** out) {
  tj_kir_t* k;
  TJ_RETURN_IF_ERROR(tj_kir_create(a, TJ_KIR_POINTWISE, "gelu_bias", &k));
  uint32_t B = tj_kir_add_param(k, "B");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(B), tj_kir_constant(4096)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(4096), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sx);
  uint32_t lx = tj_kir_load(k, x);
  uint32_t lb = tj_kir_load(k, b);
  tj_kir_store(k, y, tj_kir_binary(k, TJ_OP_ADD, lx, lb));
  tj_status_t s = tj_kir_finalize(k);
  if (s) {
    tj_kir_destroy(k);
    return s;
  }
  *out = k;
  return NULL;
}

static void check_print(const tj_kir_t* k, const char* expected) {
  char* text = NULL;
  CHECK_OK(tj_kir_print(k, &text));
  CHECK_STREQ(expected, text);
  tj_free_string(k->allocator, text);
}

TEST(print_pointwise) {
  tj_kir_t* k = NULL;
  CHECK_OK(build_bias_add(tj_allocator_system(), &k));
  check_print(k,
              "kernel @gelu_bias pointwise [$B, 4096] ($B) {\n"
              "  buf %x: f32 in [4096, 1]\n"
              "  buf %b: f32 in [0, 1]\n"
              "  buf %y: f32 out [4096, 1]\n"
              "  map {\n"
              "    %0 = load %x : f32\n"
              "    %1 = load %b : f32\n"
              "    %2 = add %0, %1 : f32\n"
              "    store %y, %2\n"
              "  }\n"
              "}\n");
  tj_kir_destroy(k);
}

TEST(print_reduce_and_gemm) {
  tj_allocator_t a = tj_allocator_system();
  tj_kir_t* k;
  CHECK_OK(tj_kir_create(a, TJ_KIR_ROW_REDUCE, "softmax", &k));
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_constant(8), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t s[2] = {tj_kir_runtime(L), tj_kir_constant(1)};
  tj_kir_ival_t sr[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_INPUT, s);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, s);
  uint32_t i = tj_kir_add_buffer(k, "i", TJ_DTYPE_I64, TJ_KIR_OUTPUT, sr);
  uint32_t p0 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_MAX);
  tj_kir_yield(k, tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x)));
  uint32_t p1 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  uint32_t lx = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x));
  uint32_t d = tj_kir_binary(k, TJ_OP_SUB, lx, tj_kir_row(k, p0));
  tj_kir_yield(k, tj_kir_unary(k, TJ_OP_EXP, d));
  uint32_t p2 =
      tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_ARGMAX);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  lx = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x));
  d = tj_kir_binary(k, TJ_OP_SUB, lx, tj_kir_row(k, p0));
  uint32_t e = tj_kir_unary(k, TJ_OP_EXP, d);
  uint32_t q = tj_kir_binary(k, TJ_OP_DIV, e, tj_kir_row(k, p1));
  tj_kir_store(k, y, tj_kir_cast(k, TJ_DTYPE_BF16, q));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, i, tj_kir_row(k, p2));
  CHECK_OK(tj_kir_finalize(k));
  check_print(k,
              "kernel @softmax row_reduce [8, $L] ($L) {\n"
              "  buf %x: bf16 in [$L, 1]\n"
              "  buf %y: bf16 out [$L, 1]\n"
              "  buf %i: i64 out [1, 0]\n"
              "  reduce max -> ^0 {\n"
              "    %0 = load %x : bf16\n"
              "    %1 = cast %0 : f32\n"
              "    yield %1\n"
              "  }\n"
              "  reduce sum -> ^1 {\n"
              "    %0 = load %x : bf16\n"
              "    %1 = cast %0 : f32\n"
              "    %2 = row ^0 : f32\n"
              "    %3 = sub %1, %2 : f32\n"
              "    %4 = exp %3 : f32\n"
              "    yield %4\n"
              "  }\n"
              "  reduce argmax -> ^2 {\n"
              "    %0 = load %x : bf16\n"
              "    yield %0\n"
              "  }\n"
              "  map {\n"
              "    %0 = load %x : bf16\n"
              "    %1 = cast %0 : f32\n"
              "    %2 = row ^0 : f32\n"
              "    %3 = sub %1, %2 : f32\n"
              "    %4 = exp %3 : f32\n"
              "    %5 = row ^1 : f32\n"
              "    %6 = div %4, %5 : f32\n"
              "    %7 = cast %6 : bf16\n"
              "    store %y, %7\n"
              "  }\n"
              "  row {\n"
              "    %0 = row ^2 : i64\n"
              "    store %i, %0\n"
              "  }\n"
              "}\n");
  tj_kir_destroy(k);

  CHECK_OK(tj_kir_create(a, TJ_KIR_GEMM, "mlp", &k));
  uint32_t B = tj_kir_add_param(k, "B");
  tj_kir_ival_t gd[2] = {tj_kir_runtime(B), tj_kir_constant(4096)};
  tj_kir_set_space(k, 2, gd);
  tj_kir_ival_t sa[2] = {tj_kir_constant(1024), tj_kir_constant(1)};
  tj_kir_ival_t sw[2] = {tj_kir_constant(4096), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_GEMM_B, sw);
  uint32_t bias = tj_kir_add_buffer(k, "bias", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t out = tj_kir_add_buffer(k, "y", TJ_DTYPE_F16, TJ_KIR_OUTPUT, sw);
  tj_kir_gemm_schedule_t sched = {6, 64, 0, 128, 0};
  tj_kir_set_gemm(k, tj_kir_constant(1024), &sched);
  uint32_t acc = tj_kir_acc(k);
  uint32_t lb = tj_kir_load(k, bias);
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, acc, lb);
  v = tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
  tj_kir_store(k, out, tj_kir_cast(k, TJ_DTYPE_F16, v));
  CHECK_OK(tj_kir_finalize(k));
  check_print(k,
              "kernel @mlp gemm [$B, 4096] k 1024 tile 6x64 mc auto nc 128 "
              "kc auto ($B) {\n"
              "  buf %x: f32 a [1024, 1]\n"
              "  buf %w: f32 b [4096, 1]\n"
              "  buf %bias: f32 in [0, 1]\n"
              "  buf %y: f16 out [4096, 1]\n"
              "  epilogue {\n"
              "    %0 = acc : f32\n"
              "    %1 = load %bias : f32\n"
              "    %2 = add %0, %1 : f32\n"
              "    %3 = const 0.5 : f32\n"
              "    %4 = mul %2, %3 : f32\n"
              "    %5 = cast %4 : f16\n"
              "    store %y, %5\n"
              "  }\n"
              "}\n");
  tj_kir_destroy(k);
}

// A pointwise kernel with one f32 input x, one output y of |out| dtype.
static tj_kir_t* simple(tj_kir_kind_t kind, const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), kind, name, &k));
  tj_kir_ival_t dims[2] = {tj_kir_constant(4), tj_kir_constant(8)};
  tj_kir_set_space(k, 2, dims);
  return k;
}

TEST(builder_errors) {
  tj_kir_t* k = NULL;
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
      tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "9x", &k));
  CHECK(k == NULL);

  tj_kir_ival_t s2[2] = {tj_kir_constant(8), tj_kir_constant(1)};
  // exp of an integer: the first error sticks; later calls are no-ops.
  k = simple(TJ_KIR_POINTWISE, "int_exp");
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_I32, TJ_KIR_INPUT, s2);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_I32, TJ_KIR_OUTPUT, s2);
  uint32_t e = tj_kir_unary(k, TJ_OP_EXP, tj_kir_load(k, x));
  CHECK_EQ_INT(TJ_KIR_NONE, e);
  tj_kir_store(k, y, e);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "@int_exp: exp does not apply to i32", tj_kir_finalize(k));
  // The error is reported again, not forgotten.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "exp", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "store_type");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F16, TJ_KIR_OUTPUT, s2);
  tj_kir_store(k, y, tj_kir_load(k, x));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "store of f32 (%0) into f16 buffer %y", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "load_output");
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s2);
  tj_kir_load(k, y);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not an input", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "mixed");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  uint32_t z = tj_kir_add_buffer(k, "z", TJ_DTYPE_F64, TJ_KIR_INPUT, s2);
  uint32_t lx = tj_kir_load(k, x);
  uint32_t lz = tj_kir_load(k, z);
  tj_kir_binary(k, TJ_OP_ADD, lx, lz);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "add does not apply to f32 (%0), f64 (%1)", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "yield_map");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  tj_kir_yield(k, tj_kir_load(k, x));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "yield outside a reduce phase",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "bad_operand");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  tj_kir_unary(k, TJ_OP_NEG, 7);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "operand %7 is not a value",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "acc_outside");
  tj_kir_acc(k);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "acc outside a gemm or conv epilogue", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "bad_param");
  tj_kir_ival_t sp[2] = {tj_kir_runtime(3), tj_kir_constant(1)};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sp);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "refers to param 3 of 0",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  // Too many params.
  k = simple(TJ_KIR_POINTWISE, "params");
  for (int i = 0; i <= TJ_KIR_MAX_PARAMS; ++i) {
    char name[16];
    snprintf(name, sizeof(name), "p%d", i);
    tj_kir_add_param(k, name);
  }
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "more than 64 params",
               tj_kir_finalize(k));
  tj_kir_destroy(k);
}

TEST(verifier_rules) {
  tj_kir_ival_t s2[2] = {tj_kir_constant(8), tj_kir_constant(1)};
  tj_kir_ival_t s0[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_kir_ival_t srow[2] = {tj_kir_constant(1), tj_kir_constant(0)};

  tj_kir_t* k = simple(TJ_KIR_POINTWISE, "no_output");
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  tj_kir_load(k, x);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "@no_output: no output buffer",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "racy_output");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s0);
  tj_kir_store(k, y, tj_kir_load(k, x));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output %y has stride 0 in dim 0",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_ROW_REDUCE, "no_yield");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, srow);
  tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_load(k, x);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "phase 0 (reduce) has 0 yields",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_ROW_REDUCE, "row_reads_elements");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, srow);
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_load(k, x));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "accesses %x, which has a nonzero stride along the reduced dim",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_ROW_REDUCE, "row_of_map");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s2);
  uint32_t p = tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  tj_kir_row(k, p);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "row ^0 is not an earlier reduce phase", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_ROW_REDUCE, "bool_sum");
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_BOOL, TJ_KIR_INPUT, s2);
  tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "reduce sum of bool",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_GEMM, "gemm_no_b");
  tj_kir_add_buffer(k, "a", TJ_DTYPE_F32, TJ_KIR_GEMM_A, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s2);
  tj_kir_store(k, y, tj_kir_acc(k));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "needs one A and one B buffer, has 1 and 0", tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_GEMM, "gemm_f16");
  tj_kir_add_buffer(k, "a", TJ_DTYPE_F16, TJ_KIR_GEMM_A, s2);
  tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_GEMM_B, s2);
  y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s2);
  tj_kir_store(k, y, tj_kir_acc(k));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "gemm operand %a is f16",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  k = simple(TJ_KIR_POINTWISE, "one_phase");
  CHECK_EQ_INT(TJ_KIR_NONE,
               tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "exactly one phase",
               tj_kir_finalize(k));
  tj_kir_destroy(k);

  // Negative constant sizes, and a rank-0 space.
  tj_kir_t* k2 = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "neg", &k2));
  tj_kir_ival_t bad[1] = {tj_kir_constant(-3)};
  tj_kir_set_space(k2, 1, bad);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "a space dim is negative (-3)",
               tj_kir_finalize(k2));
  tj_kir_destroy(k2);
  CHECK_OK(
      tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "rank0", &k2));
  tj_kir_set_space(k2, 0, bad);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "space rank 0 is not in [1, 8]",
               tj_kir_finalize(k2));
  tj_kir_destroy(k2);
  (void)kUnit;
}

TEST(launch_pointwise_reduce) {
  tj_kir_t* k = NULL;
  CHECK_OK(build_bias_add(tj_allocator_system(), &k));
  tj_kir_launch_t l;
  int64_t b = 3;
  CHECK_OK(tj_kir_launch_info(k, 16, &b, &l));
  CHECK_EQ_INT(3, l.units);  // 4096 = one block per line
  CHECK_EQ_INT(0, l.scratch_bytes);
  b = 0;
  CHECK_OK(tj_kir_launch_info(k, 16, &b, &l));
  CHECK_EQ_INT(0, l.units);
  b = -1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "@gelu_bias: dim 0 is -1",
               tj_kir_launch_info(k, 16, &b, &l));
  b = INT64_MAX / 2;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "overflows",
               tj_kir_launch_info(k, 16, &b, &l));
  tj_kir_destroy(k);
}

// Every allocation failure during building and printing is an
// OUT_OF_MEMORY with nothing leaked.
// y = x (op) b + c over [P, n]: the variants tj_kir_same_code tells apart.
typedef struct variant_t {
  const char *name, *param, *bx, *bb, *by;
  int64_t n, b_stride;
  tj_op_t op;
  double c;
} variant_t;

static tj_kir_t* build_variant(const variant_t* v) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, v->name, &k));
  uint32_t P = tj_kir_add_param(k, v->param);
  tj_kir_ival_t dims[2] = {tj_kir_runtime(P), tj_kir_constant(v->n)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(v->n), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(v->b_stride)};
  uint32_t x = tj_kir_add_buffer(k, v->bx, TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t b = tj_kir_add_buffer(k, v->bb, TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, v->by, TJ_DTYPE_F32, TJ_KIR_OUTPUT, sx);
  uint32_t r = tj_kir_binary(k, v->op, tj_kir_load(k, x), tj_kir_load(k, b));
  uint32_t c = tj_kir_const_float(k, TJ_DTYPE_F32, v->c);
  tj_kir_store(k, y, tj_kir_binary(k, TJ_OP_ADD, r, c));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

// Names (the kernel's, its buffers') do not make different code; every
// other difference does, a constant's sign bit included.
TEST(same_code_ignores_only_names) {
  const variant_t base = {"l0_g1", "B", "in3_0",   "in4_1", "out5_0",
                          32,      1,   TJ_OP_ADD, 0.5};
  tj_kir_t* k0 = build_variant(&base);
  variant_t v = base;
  v.name = "l7_g15", v.bx = "x", v.bb = "b", v.by = "y";
  tj_kir_t* k1 = build_variant(&v);
  CHECK(tj_kir_same_code(k0, k1));
  CHECK(tj_kir_same_code(k1, k0));
  variant_t other[6];
  for (int i = 0; i < 6; ++i) other[i] = base;
  other[0].param = "S";
  other[1].n = 31;
  other[2].b_stride = 0;
  other[3].op = TJ_OP_MUL;
  other[4].c = 0.25;
  other[5].c = -0.0;
  for (int i = 0; i < 6; ++i) {
    tj_kir_t* k = build_variant(&other[i]);
    CHECK(!tj_kir_same_code(k0, k));
    if (i == 5) {
      variant_t zero = base;
      zero.c = 0.0;
      tj_kir_t* z = build_variant(&zero);
      CHECK(!tj_kir_same_code(z, k));
      tj_kir_destroy(z);
    }
    tj_kir_destroy(k);
  }
  tj_kir_destroy(k1);
  tj_kir_destroy(k0);
}

// tj_kir_code_bytes' output gathered for comparison.
typedef struct code_buf_t {
  unsigned char bytes[4096];
  size_t size;
  int calls;
} code_buf_t;

static void code_buf_put(void* user, const void* data, size_t size) {
  code_buf_t* b = user;
  ++b->calls;
  if (size > sizeof(b->bytes) - b->size) size = sizeof(b->bytes) - b->size;
  memcpy(b->bytes + b->size, data, size);
  b->size += size;
}

static bool same_code_bytes(const tj_kir_t* a, const tj_kir_t* b) {
  code_buf_t x = {.size = 0}, y = {.size = 0};
  tj_kir_code_bytes(a, code_buf_put, &x);
  tj_kir_code_bytes(b, code_buf_put, &y);
  CHECK(x.size > 0 && x.size < sizeof(x.bytes));
  return x.size == y.size && memcmp(x.bytes, y.bytes, x.size) == 0;
}

// The bytes the x86 cache key hashes instead of the printed kernel: equal
// exactly where tj_kir_same_code holds (names left out), on the same
// variants.
TEST(code_bytes_follow_same_code) {
  const variant_t base = {"l0_g1", "B", "in3_0",   "in4_1", "out5_0",
                          32,      1,   TJ_OP_ADD, 0.5};
  tj_kir_t* k0 = build_variant(&base);
  variant_t v = base;
  v.name = "l7_g15", v.bx = "x", v.bb = "b", v.by = "y";
  tj_kir_t* k1 = build_variant(&v);
  CHECK(same_code_bytes(k0, k1));
  CHECK(same_code_bytes(k0, k0));
  variant_t other[7];
  for (int i = 0; i < 7; ++i) other[i] = base;
  other[0].param = "S";
  other[1].n = 31;
  other[2].b_stride = 0;
  other[3].op = TJ_OP_MUL;
  other[4].c = 0.25;
  other[5].c = -0.0;
  other[6].c = 0.0;
  for (int i = 0; i < 7; ++i) {
    tj_kir_t* k = build_variant(&other[i]);
    CHECK(!same_code_bytes(k0, k));
    CHECK(!tj_kir_same_code(k0, k));
    if (i == 5) {
      tj_kir_t* z = build_variant(&other[6]);
      CHECK(!same_code_bytes(z, k));  // 0.0 and -0.0
      tj_kir_destroy(z);
    }
    tj_kir_destroy(k);
  }
  tj_kir_destroy(k1);
  tj_kir_destroy(k0);
}

// Every tj_kir_conv_t field the code depends on makes a kernel differ,
// for tj_kir_same_code and tj_kir_code_bytes alike: inblock (an epilogue
// input held in NCHWc blocks) was once left out of the former, which would
// let two kernels differing only there share one object.
TEST(same_code_sees_every_conv_field) {
  const variant_t base = {"l0_g1", "B", "in3_0",   "in4_1", "out5_0",
                          32,      1,   TJ_OP_ADD, 0.5};
  tj_kir_t* k0 = build_variant(&base);
  enum { kFields = 14 };
  for (int f = 0; f < kFields; ++f) {
    tj_kir_t* k = build_variant(&base);
    CHECK(k0 && k);
    if (!k0 || !k) {
      tj_kir_destroy(k);
      break;
    }
    tj_kir_conv_t* cv = &k->conv;
    switch (f) {
      case 0:
        cv->spatial += 1;
        break;
      case 1:
        cv->window += 1;
        break;
      case 2:
        cv->c += 1;
        break;
      case 3:
        cv->ocvec ^= 1;
        break;
      case 4:
        cv->xblock += 8;
        break;
      case 5:
        cv->yblock += 8;
        break;
      case 6:
        cv->inblock ^= 2u;
        break;
      case 7:
        cv->groups = 2;
        break;
      case 8:
        cv->in[1] += 1;
        break;
      case 9:
        cv->kernel[2] += 1;
        break;
      case 10:
        cv->stride[0] += 1;
        break;
      case 11:
        cv->dilation[1] += 1;
        break;
      case 12:
        cv->low[2] += 1;
        break;
      case 13:
        cv->high[0] += 1;
        break;
    }
    bool same = tj_kir_same_code(k0, k), bytes = same_code_bytes(k0, k);
    if (same || bytes)
      fprintf(stderr, "conv field %d: same_code %d, code bytes equal %d\n", f,
              same, bytes);
    CHECK(!same);
    CHECK(!bytes);
    tj_kir_destroy(k);
  }
  tj_kir_destroy(k0);
}

// tj_kir_copy (region compile's copies of a repeated block's kernels): the
// copy prints as the source with its own kernel and buffer names, has the
// same code, outlives its source (its arrays and names are its own, held in
// its arena), and is freed exactly, under every failing allocation too;
// bad names are refused with the kernel named.
static tj_status_t copy_bias_add(tj_allocator_t a, bool print) {
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(build_bias_add(a, &k));
  static const char* const kNames[3] = {"x_7", "b_7", "y_7"};
  tj_kir_t* c = NULL;
  tj_status_t s = tj_kir_copy(k, "gelu_bias_copy", kNames, &c);
  if (!s) CHECK(tj_kir_same_code(k, c));
  tj_kir_destroy(k);
  if (!s && print) {
    check_print(c,
                "kernel @gelu_bias_copy pointwise [$B, 4096] ($B) {\n"
                "  buf %x_7: f32 in [4096, 1]\n"
                "  buf %b_7: f32 in [0, 1]\n"
                "  buf %y_7: f32 out [4096, 1]\n"
                "  map {\n"
                "    %0 = load %x_7 : f32\n"
                "    %1 = load %b_7 : f32\n"
                "    %2 = add %0, %1 : f32\n"
                "    store %y_7, %2\n"
                "  }\n"
                "}\n");
  }
  tj_kir_destroy(c);
  return s;
}

static tj_status_t copy_bias_add_quiet(tj_allocator_t a) {
  return copy_bias_add(a, false);
}

TEST(copy_has_its_own_names) {
  CHECK_OK(copy_bias_add(tj_allocator_system(), true));
  tj_kir_t* k = NULL;
  CHECK_OK(build_bias_add(tj_allocator_system(), &k));
  tj_kir_t* c = NULL;
  static const char* const kBad[3] = {"x_7", "b-7", "y_7"};
  tj_status_t s = tj_kir_copy(k, "gelu_bias_copy", kBad, &c);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK(strstr(tj_status_message(s), "@gelu_bias_copy") != NULL);
  CHECK(strstr(tj_status_message(s), "b-7") != NULL);
  CHECK(c == NULL);
  tj_status_free(s);
  static const char* const kGood[3] = {"x_7", "b_7", "y_7"};
  s = tj_kir_copy(k, "9copy", kGood, &c);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK(c == NULL);
  tj_status_free(s);
  tj_kir_destroy(k);
  tj_test_oom_sweep("kernel copy", copy_bias_add_quiet);
}

// tj_kir_borrow: the copy prints as the source with its own names and
// has the same code, its instructions read in place from the source
// (which outlives it), and is freed exactly, under every failing
// allocation too, leaving the source intact.
static tj_status_t borrow_bias_add(tj_allocator_t a, bool print) {
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(build_bias_add(a, &k));
  static const char* const kNames[3] = {"x_9", "b_9", "y_9"};
  tj_kir_t* c = NULL;
  tj_status_t s = tj_kir_borrow(k, "gelu_bias_borrow", kNames, &c);
  if (!s) {
    CHECK(tj_kir_same_code(k, c));
    CHECK(c->phases == k->phases);
    CHECK(c->buffers != k->buffers);
    CHECK(strcmp(k->buffers[0].name, kNames[0]) != 0);
  }
  if (!s && print) {
    check_print(c,
                "kernel @gelu_bias_borrow pointwise [$B, 4096] ($B) {\n"
                "  buf %x_9: f32 in [4096, 1]\n"
                "  buf %b_9: f32 in [0, 1]\n"
                "  buf %y_9: f32 out [4096, 1]\n"
                "  map {\n"
                "    %0 = load %x_9 : f32\n"
                "    %1 = load %b_9 : f32\n"
                "    %2 = add %0, %1 : f32\n"
                "    store %y_9, %2\n"
                "  }\n"
                "}\n");
  }
  tj_kir_destroy(c);
  // The source after its borrower is gone: whole, and copied again.
  tj_kir_t* again = NULL;
  if (!s) s = tj_kir_copy(k, "gelu_bias_again", kNames, &again);
  if (!s) CHECK(tj_kir_same_code(k, again));
  tj_kir_destroy(again);
  tj_kir_destroy(k);
  return s;
}

static tj_status_t borrow_bias_add_quiet(tj_allocator_t a) {
  return borrow_bias_add(a, false);
}

TEST(borrow_has_its_own_names) {
  CHECK_OK(borrow_bias_add(tj_allocator_system(), true));
  tj_kir_t* k = NULL;
  CHECK_OK(build_bias_add(tj_allocator_system(), &k));
  tj_kir_t* c = NULL;
  static const char* const kBad[3] = {"x_9", "b 9", "y_9"};
  tj_status_t s = tj_kir_borrow(k, "gelu_bias_borrow", kBad, &c);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK(strstr(tj_status_message(s), "@gelu_bias_borrow") != NULL);
  CHECK(c == NULL);
  tj_status_free(s);
  static const char* const kGood[3] = {"x_9", "b_9", "y_9"};
  s = tj_kir_borrow(k, "9borrow", kGood, &c);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK(c == NULL);
  tj_status_free(s);
  tj_kir_destroy(k);
  tj_test_oom_sweep("kernel borrow", borrow_bias_add_quiet);
}

TEST(oom_sweep) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_allocator_t a = tj_test_allocator_get(&t);
    tj_kir_t* k = NULL;
    tj_status_t s = build_bias_add(a, &k);
    char* text = NULL;
    if (!s) s = tj_kir_print(k, &text);
    if (text) tj_free_string(a, text);
    tj_kir_destroy(k);
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (!s) {
      CHECK(fail_at > 3);
      break;
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
  }
}

int main(void) {
  RUN_TEST(print_pointwise);
  RUN_TEST(print_reduce_and_gemm);
  RUN_TEST(builder_errors);
  RUN_TEST(verifier_rules);
  RUN_TEST(launch_pointwise_reduce);
  RUN_TEST(same_code_ignores_only_names);
  RUN_TEST(code_bytes_follow_same_code);
  RUN_TEST(same_code_sees_every_conv_field);
  RUN_TEST(copy_has_its_own_names);
  RUN_TEST(borrow_has_its_own_names);
  RUN_TEST(oom_sweep);
  TEST_MAIN_END();
}
