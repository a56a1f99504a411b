// Custom ops kept in the graph (include/tensorjit/tj_custom_op.h): the
// registry, signature strings and their libffi calls for every argument
// kind, shape functions (symbolic B through them, and their errors), the
// text form, the passes (CSE/DCE of pure and impure ops, fold), the run
// plan's host call between two fused regions on x86 against the reference
// interpreter, VJPs checked by finite differences, and the OOM sweep over
// register + compile + run; the register call and ffi_call of a signature
// agreeing argument by argument.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "tensorjit.h"
#include "tests/unit/test.h"

//===--- ops under test ---===//

// Output type = input 0's type (symbolic dims flow through).
static tj_status_t same_as_first(void* user, tj_graph_t* g,
                                 const tj_custom_type_t* in, int32_t n,
                                 const tj_custom_attrs_t* attrs,
                                 tj_custom_type_t* out) {
  (void)user, (void)g, (void)n, (void)attrs;
  *out = in[0];
  return NULL;
}

// Input 0's shape with dtype *(tj_dtype_t*)user.
static tj_status_t first_shape_as(void* user, tj_graph_t* g,
                                  const tj_custom_type_t* in, int32_t n,
                                  const tj_custom_attrs_t* attrs,
                                  tj_custom_type_t* out) {
  (void)g, (void)n, (void)attrs;
  *out = in[0];
  out->dtype = *(const tj_dtype_t*)user;
  return NULL;
}

// [x, x]: the last dim doubled through the dim API (B * 2 stays symbolic
// when the last dim is B).
static tj_status_t twice_last(void* user, tj_graph_t* g,
                              const tj_custom_type_t* in, int32_t n,
                              const tj_custom_attrs_t* attrs,
                              tj_custom_type_t* out) {
  (void)user, (void)n, (void)attrs;
  *out = in[0];
  out->dims[out->rank - 1] = tj_graph_dim_mul(g, in[0].dims[in[0].rank - 1], 2);
  return NULL;
}

static tj_status_t refuse_rank(void* user, tj_graph_t* g,
                               const tj_custom_type_t* in, int32_t n,
                               const tj_custom_attrs_t* attrs,
                               tj_custom_type_t* out) {
  (void)user, (void)g, (void)n, (void)attrs;
  if (in[0].rank != 2)
    return tj_status_create(TJ_STATUS_INVALID_ARGUMENT,
                            "wants a matrix, got another rank");
  *out = in[0];
  return NULL;
}

// f32 y = x * a (f32 scalar); 1-D dims.
static void scale_f32(float* y, int64_t n, const float* x, int64_t m, float a) {
  for (int64_t i = 0; i < n && i < m; ++i) y[i] = x[i] * a;
}
// f64 2-D y = x + s.
static void add_f64(double* y, int64_t r, int64_t c, const double* x,
                    int64_t xr, int64_t xc, double s) {
  for (int64_t i = 0; i < r * c && i < xr * xc; ++i) y[i] = x[i] + s;
}
// i32 y = x * k: the i64 after x's one dim is the int attribute k.
static void mul_i32(int32_t* y, int64_t n, const int32_t* x, int64_t m,
                    int64_t k) {
  for (int64_t i = 0; i < n && i < m; ++i) y[i] = x[i] * (int32_t)k;
}
// i64 y = x + 1, returns i32 status (non-zero when asked: attribute 7).
static int32_t inc_i64(int64_t* y, int64_t n, const int64_t* x, int64_t m,
                       int64_t fail) {
  if (fail == 7) return 42;
  for (int64_t i = 0; i < n && i < m; ++i) y[i] = x[i] + 1;
  return 0;
}
// bool y = x > t (f64 threshold).
static void gt_bool(bool* y, int64_t n, const float* x, int64_t m, double t) {
  for (int64_t i = 0; i < n && i < m; ++i) y[i] = x[i] > t;
}
// f32 y[i, :] = concat(x[i, :], 2 * x[i, :]) for the twice_last shape.
static void dup_f32(float* y, const float* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      y[i * 2 * cols + j] = x[i * cols + j];
      y[i * 2 * cols + cols + j] = 2 * x[i * cols + j];
    }
  }
}

static tj_custom_op_desc_t desc_of(const char* name, int32_t num_inputs,
                                   tj_custom_shape_fn shape, void (*fn)(void),
                                   const char* signature) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = name;
  d.version = 1;
  d.num_inputs = num_inputs;
  d.shape = shape;
  d.function = fn;
  d.signature = signature;
  d.flags = TJ_CUSTOM_OP_PURE;
  return d;
}

static const tj_dtype_t kBool = TJ_DTYPE_BOOL;

static void register_all(tj_context_t* ctx) {
  tj_custom_op_desc_t d;
  d = desc_of("scale_f32", 1, same_as_first, (void (*)(void))scale_f32,
              "void(f32*, i64, const f32*, i64, f32)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("add_f64", 1, same_as_first, (void (*)(void))add_f64,
              "void(f64*, i64, i64, const f64*, i64, i64, f64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("mul_i32", 1, same_as_first, (void (*)(void))mul_i32,
              "void(i32*, i64, const i32*, i64, i64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("inc_i64", 1, same_as_first, (void (*)(void))inc_i64,
              "i32(i64 *, i64, const i64 *, i64, i64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("gt_bool", 1, first_shape_as, (void (*)(void))gt_bool,
              "void(bool*, i64, const f32*, i64, f64)");
  d.user_data = (void*)&kBool;
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("dup_f32", 1, twice_last, (void (*)(void))dup_f32,
              "void(f32*, const f32*, i64, i64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
}

//===--- signatures, one per argument kind ---===//

TEST(signature_argument_kinds) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  register_all(ctx);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "kinds", &g));
  tj_value_t xf = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "xf");
  tj_value_t xd = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){2, 3}, "xd");
  tj_value_t xi = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){4}, "xi");
  tj_value_t xl = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){3}, "xl");
  tj_custom_attrs_t a_scale = {0, NULL, 1, (double[]){2.5}};
  tj_custom_attrs_t a_add = {0, NULL, 1, (double[]){0.25}};
  tj_custom_attrs_t a_mul = {1, (int64_t[]){-3}, 0, NULL};
  tj_custom_attrs_t a_inc = {1, (int64_t[]){0}, 0, NULL};
  tj_custom_attrs_t a_gt = {0, NULL, 1, (double[]){0.5}};
  tj_graph_output(g, tj_graph_custom(g, "scale_f32", &xf, 1, &a_scale), "a");
  tj_graph_output(g, tj_graph_custom(g, "add_f64@1", &xd, 1, &a_add), "b");
  tj_graph_output(g, tj_graph_custom(g, "mul_i32", &xi, 1, &a_mul), "c");
  tj_graph_output(g, tj_graph_custom(g, "inc_i64", &xl, 1, &a_inc), "d");
  tj_graph_output(g, tj_graph_custom(g, "gt_bool", &xf, 1, &a_gt), "e");
  CHECK_OK(tj_graph_finalize(g));
  float f[5] = {1, -2, 0.5f, 3, 0.25f}, ya[5];
  double dd[6] = {1, 2, 3, 4, 5, 6}, yb[6];
  int32_t ii[4] = {1, -2, 3, 7}, yc[4];
  int64_t ll[3] = {10, -1, (int64_t)1 << 40}, yd[3];
  bool ye[5];
  tj_tensor_t in[4] = {tj_tensor_make(f, TJ_DTYPE_F32, 1, (int64_t[]){5}),
                       tj_tensor_make(dd, TJ_DTYPE_F64, 2, (int64_t[]){2, 3}),
                       tj_tensor_make(ii, TJ_DTYPE_I32, 1, (int64_t[]){4}),
                       tj_tensor_make(ll, TJ_DTYPE_I64, 1, (int64_t[]){3})};
  tj_tensor_t out[5] = {tj_tensor_make(ya, TJ_DTYPE_F32, 1, (int64_t[]){5}),
                        tj_tensor_make(yb, TJ_DTYPE_F64, 2, (int64_t[]){2, 3}),
                        tj_tensor_make(yc, TJ_DTYPE_I32, 1, (int64_t[]){4}),
                        tj_tensor_make(yd, TJ_DTYPE_I64, 1, (int64_t[]){3}),
                        tj_tensor_make(ye, TJ_DTYPE_BOOL, 1, (int64_t[]){5})};
  // On the interpreter and compiled for x86: the same host calls.
  for (int target = 0; target < 2; ++target) {
    memset(ya, 0, sizeof(ya));
    memset(yb, 0, sizeof(yb));
    memset(yc, 0, sizeof(yc));
    memset(yd, 0, sizeof(yd));
    memset(ye, 0, sizeof(ye));
    tj_executable_t* exe = NULL;
    if (target == 0) {
      CHECK_OK(tj_reference_run(g, in, 4, out, 5));
    } else {
      CHECK_OK(tj_compile(g, NULL, &exe));
      CHECK_OK(tj_executable_run(exe, in, 4, out, 5));
      tj_executable_stats_t st = {.struct_size = sizeof(st)};
      tj_executable_stats(exe, &st);
      CHECK_EQ_INT(5, st.num_host_calls);
      CHECK_EQ_INT(0, st.num_graph_breaks);
      tj_executable_release(exe);
    }
    for (int i = 0; i < 5; ++i) CHECK(ya[i] == f[i] * 2.5f);
    for (int i = 0; i < 6; ++i) CHECK(yb[i] == dd[i] + 0.25);
    for (int i = 0; i < 4; ++i) CHECK_EQ_INT(ii[i] * -3, yc[i]);
    for (int i = 0; i < 3; ++i) CHECK(yd[i] == ll[i] + 1);
    for (int i = 0; i < 5; ++i) CHECK_EQ_INT(f[i] > 0.5, ye[i]);
  }
  tj_graph_destroy(g);
  // An i32 result that is not 0 fails the run, naming the op and value.
  CHECK_OK(tj_graph_create(ctx, "fails", &g));
  xl = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){3}, "xl");
  tj_custom_attrs_t a_fail = {1, (int64_t[]){7}, 0, NULL};
  tj_graph_output(g, tj_graph_custom(g, "inc_i64", &xl, 1, &a_fail), "d");
  CHECK_OK(tj_graph_finalize(g));
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "inc_i64@1 returned 42",
               tj_reference_run(g, &in[3], 1, &out[3], 1));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "inc_i64@1 returned 42",
               tj_executable_run(exe, &in[3], 1, &out[3], 1));
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- the register call and ffi_call ---===//

// y = x + a*1 + b*2 + c*3 + d*4 (k the int attribute, added too): f64 and
// f32 interleaved, 5 integer-class and 4 SSE-class arguments: registers.
static void mixed_regs(float* y, int64_t n, const float* x, int64_t m, double a,
                       float b, int64_t k, float c, double d) {
  for (int64_t i = 0; i < n && i < m; ++i)
    y[i] = (float)(x[i] + a + 2 * b + 3 * c + 4 * d + (double)k * 1000);
}
// Two f32 inputs of rank 1, an f64 one of rank 2, an int attribute and
// eight float attributes: 10 integer-class arguments, so some go on the
// stack (ffi_call). Every argument weighs on the result.
static void wide_stack(float* y, int64_t n, const float* x0, int64_t m0,
                       const float* x1, int64_t m1, const double* x2,
                       int64_t r2, int64_t c2, int64_t k, float f0, double f1,
                       float f2, double f3, float f4, double f5, float f6,
                       double f7) {
  double w = f0 + 2 * f1 + 3 * f2 + 4 * f3 + 5 * f4 + 6 * f5 + 7 * f6 + 8 * f7 +
             (double)k * 100;
  for (int64_t i = 0; i < n && i < m0 && i < m1 && i < r2 * c2; ++i)
    y[i] = (float)(x0[i] + 10 * x1[i] + 100 * x2[i] + w);
}

// Both call paths of a signature op (x86-64: the register call for short
// signatures, ffi_call once arguments spill to the stack) against the
// functions called directly, on the interpreter and compiled.
TEST(register_call_and_ffi_call) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_custom_op_desc_t d =
      desc_of("mixed_regs", 1, same_as_first, (void (*)(void))mixed_regs,
              "void(f32*, i64, const f32*, i64, f64, f32, i64, f32, f64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  d = desc_of("wide_stack", 3, same_as_first, (void (*)(void))wide_stack,
              "void(f32*, i64, const f32*, i64, const f32*, i64, const f64*, "
              "i64, i64, i64, f32, f64, f32, f64, f32, f64, f32, f64)");
  CHECK_OK(tj_context_register_op(ctx, &d));
#if defined(__x86_64__) && !defined(_WIN32)
  CHECK(tj_custom_call_is_direct(tj_custom_op_find(ctx, "mixed_regs", 10, 1)));
#endif
  CHECK(!tj_custom_call_is_direct(tj_custom_op_find(ctx, "wide_stack", 10, 1)));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "paths", &g));
  tj_value_t x0 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){6}, "x0");
  tj_value_t x1 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){6}, "x1");
  tj_value_t x2 = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){2, 3}, "x2");
  tj_custom_attrs_t a_mixed = {1, (int64_t[]){3}, 4,
                               (double[]){0.5, 0.25, -1.5, 0.125}};
  double eight[8] = {1, -2, 0.5, 0.25, 3, -0.75, 0.0625, 2};
  tj_custom_attrs_t a_wide = {1, (int64_t[]){-7}, 8, eight};
  tj_value_t three[3] = {x0, x1, x2};
  tj_graph_output(g, tj_graph_custom(g, "mixed_regs", &x0, 1, &a_mixed), "a");
  tj_graph_output(g, tj_graph_custom(g, "wide_stack", three, 3, &a_wide), "b");
  CHECK_OK(tj_graph_finalize(g));
  float f0[6] = {1, -2, 0.5f, 3, 0.25f, 8}, f1[6] = {2, 0, -1, 4, 5, -6};
  double f2[6] = {0.5, 1, 1.5, -2, 2.5, 3};
  float want_a[6], want_b[6], ya[6], yb[6];
  mixed_regs(want_a, 6, f0, 6, 0.5, 0.25f, 3, -1.5f, 0.125);
  wide_stack(want_b, 6, f0, 6, f1, 6, f2, 2, 3, -7, 1.0f, -2, 0.5f, 0.25, 3.0f,
             -0.75, 0.0625f, 2);
  tj_tensor_t in[3] = {tj_tensor_make(f0, TJ_DTYPE_F32, 1, (int64_t[]){6}),
                       tj_tensor_make(f1, TJ_DTYPE_F32, 1, (int64_t[]){6}),
                       tj_tensor_make(f2, TJ_DTYPE_F64, 2, (int64_t[]){2, 3})};
  tj_tensor_t out[2] = {tj_tensor_make(ya, TJ_DTYPE_F32, 1, (int64_t[]){6}),
                        tj_tensor_make(yb, TJ_DTYPE_F32, 1, (int64_t[]){6})};
  for (int target = 0; target < 2; ++target) {
    memset(ya, 0, sizeof(ya));
    memset(yb, 0, sizeof(yb));
    if (target == 0) {
      CHECK_OK(tj_reference_run(g, in, 3, out, 2));
    } else {
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, NULL, &exe));
      CHECK_OK(tj_executable_run(exe, in, 3, out, 2));
      tj_executable_release(exe);
    }
    for (int i = 0; i < 6; ++i) {
      CHECK(ya[i] == want_a[i]);
      CHECK(yb[i] == want_b[i]);
    }
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(bad_signatures_are_rejected) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  static const struct {
    const char* sig;
    const char* needle;
  } kBad[] = {
      {"float(f32*)", "result type must be void or i32"},
      {"void f32*", "expected '('"},
      {"void(f32*, i64", "argument 2: expected ',' or ')'"},
      {"void(f32*, f17*)", "argument 2: unknown type \"f17\""},
      {"void(f32*, const i64)", "argument 2: const is only for input"},
      {"void(f32*, i32)", "argument 2: a scalar is i64, f32 or f64"},
      {"void(f32*, const f32*) x", "unexpected \"x\" after ')'"},
      {"void(const f32*)", "exactly one output pointer (T*), has 0"},
      {"void(f32*, f32*)", "exactly one output pointer (T*), has 2"},
      {"void(f32*, , i64)", "argument 2: expected a type"},
      {"void(f32*, const f32*, const f32*)",
       "pointers (const T*) for num_inputs 1"},
  };
  for (size_t i = 0; i < sizeof(kBad) / sizeof(kBad[0]); ++i) {
    tj_custom_op_desc_t d = desc_of("bad", 1, same_as_first,
                                    (void (*)(void))scale_f32, kBad[i].sig);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kBad[i].needle,
                 tj_context_register_op(ctx, &d));
  }
  // The desc itself.
  tj_custom_op_desc_t d =
      desc_of("ok", 1, same_as_first, (void (*)(void))scale_f32,
              "void(f32*, i64, const f32*, i64, f32)");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "desc is NULL",
               tj_context_register_op(ctx, NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "context is NULL",
               tj_context_register_op(NULL, &d));
  tj_custom_op_desc_t e = d;
  e.struct_size = 8;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "struct_size",
               tj_context_register_op(ctx, &e));
  e = d;
  e.name = "not an identifier";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
               tj_context_register_op(ctx, &e));
  e = d;
  e.version = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "version 0",
               tj_context_register_op(ctx, &e));
  e = d;
  e.shape = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "no shape function",
               tj_context_register_op(ctx, &e));
  e = d;
  e.signature = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "needs its signature",
               tj_context_register_op(ctx, &e));
  e = d;
  e.flags = 1u << 9;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "unknown flags",
               tj_context_register_op(ctx, &e));
  CHECK_OK(tj_context_register_op(ctx, &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "ok version 1 is already registered",
               tj_context_register_op(ctx, &d));
  d.version = 2;  // another version is another op
  CHECK_OK(tj_context_register_op(ctx, &d));
  tj_context_destroy(ctx);
}

//===--- graph building: shape functions and binding checks ---===//

TEST(shape_function_errors_are_sticky) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  register_all(ctx);
  tj_custom_op_desc_t d =
      desc_of("matrix_only", 1, refuse_rank, (void (*)(void))scale_f32,
              "void(f32*, i64, const f32*, i64, f32)");
  CHECK_OK(tj_context_register_op(ctx, &d));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "sticky", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_custom_attrs_t a = {0, NULL, 1, (double[]){1.0}};
  CHECK(tj_value_is_none(tj_graph_custom(g, "matrix_only", &x, 1, &a)));
  tj_status_t s = tj_graph_finalize(g);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK_CONTAINS(tj_status_message(s), "custom (node %1)");
  CHECK_CONTAINS(tj_status_message(s), "the shape function of matrix_only@1");
  CHECK_CONTAINS(tj_status_message(s), "wants a matrix");
  tj_status_free(s);
  tj_graph_destroy(g);

  // The signature against the node: dtypes, attribute counts, inputs.
  static const struct {
    const char* op;
    tj_dtype_t dtype;
    int32_t num_floats;
    const char* needle;
  } kCases[] = {
      {"scale_f32", TJ_DTYPE_F64, 1, "is f32* but the output is f64"},
      {"scale_f32", TJ_DTYPE_F32, 0, "the node has 0 and 0"},
      {"nope", TJ_DTYPE_F32, 1, "no custom op \"nope\" is registered"},
      {"scale_f32@9", TJ_DTYPE_F32, 1, "\"scale_f32\" version 9"},
      {"scale_f32@x", TJ_DTYPE_F32, 1, "not an op name or name@version"},
  };
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    CHECK_OK(tj_graph_create(ctx, "bind", &g));
    x = tj_graph_input(g, kCases[i].dtype, 1, (int64_t[]){4}, "x");
    tj_custom_attrs_t at = {0, NULL, kCases[i].num_floats, (double[]){1.0}};
    tj_graph_output(g, tj_graph_custom(g, kCases[i].op, &x, 1, &at), "y");
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kCases[i].needle,
                 tj_graph_finalize(g));
    tj_graph_destroy(g);
  }
  // Wrong input count.
  CHECK_OK(tj_graph_create(ctx, "count", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_value_t two[2] = {x, x};
  tj_graph_custom(g, "scale_f32", two, 2, &a);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "scale_f32@1 takes 1 inputs, got 2",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Symbolic B flows through the shape function: [B, C] -> [B, C * 2].
TEST(symbolic_dims_through_the_shape_function) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  register_all(ctx);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "sym", &g));
  int64_t B = tj_graph_symbol(g, "B"), C = tj_graph_symbol(g, "C");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, C}, "x");
  tj_value_t y = tj_graph_custom(g, "dup_f32", &x, 1, NULL);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[0] == B);
  CHECK(dims[1] == tj_graph_dim_mul(g, C, 2) || dims[1] < -1);
  float xs[6] = {1, 2, 3, 4, 5, 6}, ys[12];
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 2});
  int32_t rank;
  int64_t od[TJ_MAX_RANK];
  CHECK_OK(tj_graph_output_shape(g, &in, 1, 0, &rank, od));
  CHECK_EQ_INT(2, rank);
  CHECK_EQ_INT(3, (int)od[0]);
  CHECK_EQ_INT(4, (int)od[1]);
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, od);
  CHECK_OK(tj_reference_run(g, &in, 1, &out, 1));
  CHECK(ys[0] == 1 && ys[1] == 2 && ys[2] == 2 && ys[3] == 4);
  CHECK(ys[8] == 5 && ys[11] == 12);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- the text form ---===//

TEST(text_form_round_trip) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  register_all(ctx);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "text", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){B}, "x");
  tj_custom_attrs_t a = {1, (int64_t[]){-3}, 0, NULL};
  tj_value_t y = tj_graph_custom(g, "mul_i32", &x, 1, &a);
  tj_value_t xf = tj_graph_cast(g, y, TJ_DTYPE_F32);
  tj_custom_attrs_t b = {0, NULL, 1, (double[]){0.1}};
  tj_graph_output(g, tj_graph_custom(g, "scale_f32", &xf, 1, &b), "y");
  CHECK_OK(tj_graph_finalize(g));
  char* text = NULL;
  CHECK_OK(tj_graph_print(g, &text));
  CHECK_CONTAINS(text,
                 "custom %x {op=\"mul_i32\" version=1 ints=[-3]} : "
                 "i32[B]");
  CHECK_CONTAINS(text,
                 "{op=\"scale_f32\" version=1 "
                 "floats=[0.10000000000000001]} : f32[B]");
  tj_graph_t* back = NULL;
  CHECK_OK(tj_graph_parse(ctx, text, strlen(text), "text.tj", &back));
  char* again = NULL;
  if (back) CHECK_OK(tj_graph_print(back, &again));
  CHECK_STREQ(text, again);
  tj_context_free_string(ctx, again);
  tj_graph_destroy(back);
  // Parsing resolves the name in the context: an unknown op is an error.
  static const char kUnknown[] =
      "func @f(%x: f32[4]) {\n"
      "  %1 = custom %x {op=\"missing\" version=1} : f32[4]\n"
      "  return %1 as \"y\"\n}\n";
  back = NULL;
  tj_status_t s =
      tj_graph_parse(ctx, kUnknown, strlen(kUnknown), "u.tj", &back);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK_CONTAINS(tj_status_message(s), "u.tj:2:");
  CHECK_CONTAINS(tj_status_message(s), "no custom op \"missing\" version 1");
  tj_status_free(s);
  CHECK(back == NULL);
  // A written type that disagrees with the shape function.
  static const char kWrongType[] =
      "func @f(%x: f32[4]) {\n"
      "  %1 = custom %x {op=\"scale_f32\" floats=[2]} : f32[5]\n"
      "  return %1 as \"y\"\n}\n";
  s = tj_graph_parse(ctx, kWrongType, strlen(kWrongType), "w.tj", &back);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  tj_status_free(s);
  tj_context_free_string(ctx, text);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- passes and the run plan ---===//

typedef struct counter_t {
  int calls;
} counter_t;

// A generic host op over descriptors: y = x * x, counting calls.
static tj_status_t square_host(void* user, const tj_tensor_t* in, int32_t n,
                               const tj_custom_attrs_t* attrs,
                               const tj_tensor_t* out) {
  (void)n, (void)attrs;
  counter_t* c = user;
  ++c->calls;
  int64_t numel = 1;
  for (int32_t d = 0; d < out->rank; ++d) numel *= out->shape[d];
  const float* x = in[0].data;
  float* y = out->data;
  if (in[0].strides) return tj_status_create(TJ_STATUS_INTERNAL, "strided");
  for (int64_t i = 0; i < numel; ++i) y[i] = x[i] * x[i];
  return NULL;
}

// The VJP of square: g * 2x.
static tj_status_t square_vjp(void* user, tj_graph_t* g, const tj_value_t* in,
                              int32_t n, tj_value_t y, tj_value_t gy,
                              const tj_custom_attrs_t* attrs, tj_value_t* out) {
  (void)user, (void)n, (void)y, (void)attrs;
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  out[0] = tj_graph_mul(g, gy, tj_graph_mul(g, two, in[0]));
  return NULL;
}

static void register_square(tj_context_t* ctx, counter_t* c, bool pure,
                            bool vjp) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "square";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_as_first;
  d.host = square_host;
  d.vjp = vjp ? square_vjp : NULL;
  d.flags = (pure ? TJ_CUSTOM_OP_PURE : 0) | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  d.user_data = c;
  CHECK_OK(tj_context_register_op(ctx, &d));
}

static void diagnostic(tj_severity_t severity, const char* message,
                       size_t length, void* user) {
  (void)severity, (void)length;
  char* log = user;
  size_t n = strlen(log);
  snprintf(log + n, 4096 - n, "%s\n", message);
}

// The seed's order: decompose > keep in graph > graph break. One custom op
// mid-chain leaves exactly two fused regions (two kernels) around one host
// call, and no reference-interpreter step; results equal the reference's.
TEST(mid_chain_two_fused_regions) {
  char log[4096] = "";
  tj_context_options_t co = tj_test_context_options();
  co.diagnostic_fn = diagnostic;
  co.diagnostic_user_data = log;
  co.log = "graph_breaks";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  register_all(ctx);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "chain", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "b");
  tj_value_t h = tj_graph_add(g, tj_graph_tanh(g, x), b);
  tj_custom_attrs_t a = {0, NULL, 1, (double[]){-1.5}};
  tj_value_t c = tj_graph_custom(g, "scale_f32", &h, 1, &a);
  tj_value_t y = tj_graph_sigmoid(g, tj_graph_mul(g, c, x));
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(2, st.num_kernels);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(1, st.num_host_calls);
  CHECK_CONTAINS(log, "custom scale_f32@1");
  CHECK_CONTAINS(log, "is a host call");
  // The scoreboard: every stage has one host call and no graph break.
  tj_scoreboard_t sb;
  CHECK_OK(tj_graph_scoreboard(g, 1, (const char* const[]){"B"},
                               (int64_t[]){64}, &sb));
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) {
    CHECK_EQ_INT(1, (int)sb.rows[s].host_calls);
    CHECK_EQ_INT(0, (int)sb.rows[s].graph_breaks);
  }
  CHECK_EQ_INT(2, (int)sb.rows[TJ_STAGE_MEMPLAN].kernels);
  for (int64_t n = 1; n <= 67; n += 33) {
    float xs[67], bs[67], ys[67], rs[67];
    for (int64_t i = 0; i < n; ++i) {
      xs[i] = (float)sin((double)i) * 2;
      bs[i] = (float)cos((double)i * 0.3);
    }
    tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 1, &n),
                         tj_tensor_make(bs, TJ_DTYPE_F32, 1, &n)};
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, &n);
    tj_tensor_t ref = tj_tensor_make(rs, TJ_DTYPE_F32, 1, &n);
    CHECK_OK(tj_executable_run(exe, in, 2, &out, 1));
    CHECK_OK(tj_reference_run(g, in, 2, &ref, 1));
    for (int64_t i = 0; i < n; ++i) CHECK(fabsf(ys[i] - rs[i]) <= 1e-5f);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// A strided caller input reaches an op that needs contiguous inputs dense.
TEST(strided_input_made_dense) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  counter_t c = {0};
  register_square(ctx, &c, true, false);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "strided", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_custom(g, "square", &x, 1, NULL), "y");
  CHECK_OK(tj_graph_finalize(g));
  float xs[8] = {1, 0, 2, 0, 3, 0, 4, 0}, ys[4] = {0};
  int64_t shape[1] = {4}, strides[1] = {2};
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, shape);
  in.strides = strides;
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, shape);
  CHECK_OK(tj_reference_run(g, &in, 1, &out, 1));
  CHECK(ys[0] == 1 && ys[3] == 16);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  memset(ys, 0, sizeof(ys));
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  CHECK(ys[0] == 1 && ys[1] == 4 && ys[2] == 9 && ys[3] == 16);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Pure: two equal nodes merge (CSE) and an unused one goes (DCE). Impure:
// each node runs once per run, used or not. Fold never evaluates one.
static int calls_per_run(bool pure) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  counter_t c = {0};
  register_square(ctx, &c, pure, false);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "cse", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, "x");
  tj_value_t k = tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){3},
                                   (float[]){1, 2, 3}, 12);
  tj_value_t s1 = tj_graph_custom(g, "square", &x, 1, NULL);
  tj_value_t s2 = tj_graph_custom(g, "square", &x, 1, NULL);
  tj_graph_custom(g, "square", &x, 1, NULL);                  // unused
  tj_value_t s4 = tj_graph_custom(g, "square", &k, 1, NULL);  // constant in
  tj_graph_output(g, tj_graph_add(g, tj_graph_add(g, s1, s2), s4), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  int before = c.calls;
  float xs[3] = {1, 2, 3}, ys[3];
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){3});
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){3});
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  CHECK(ys[0] == 3 && ys[1] == 12 && ys[2] == 27);
  int calls = c.calls - before;
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return calls;
}

TEST(cse_dce_fold_respect_purity) {
  CHECK_EQ_INT(2, calls_per_run(true));   // s1 = s2, s3 dropped, s4
  CHECK_EQ_INT(4, calls_per_run(false));  // every node, unused one too
}

// y = -x written over x when the memory plan wants it (IN_PLACE).
static tj_status_t neg_host(void* user, const tj_tensor_t* in, int32_t n,
                            const tj_custom_attrs_t* attrs,
                            const tj_tensor_t* out) {
  (void)user, (void)n, (void)attrs;
  const float* x = in[0].data;
  float* y = out->data;
  for (int64_t i = 0; i < out->shape[0]; ++i) y[i] = -x[i];
  return NULL;
}

TEST(in_place_op_mid_chain) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "neg";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_as_first;
  d.host = neg_host;
  d.flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_IN_PLACE;
  CHECK_OK(tj_context_register_op(ctx, &d));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "inplace", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
  tj_value_t h = tj_graph_exp(g, x);
  tj_value_t c = tj_graph_custom(g, "neg", &h, 1, NULL);
  tj_graph_output(g, tj_graph_mul(g, tj_graph_add(g, c, x), x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  float xs[9], ys[9], rs[9];
  int64_t n = 9;
  for (int i = 0; i < 9; ++i) xs[i] = (float)i * 0.25f - 1;
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, &n);
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, &n);
  tj_tensor_t ref = tj_tensor_make(rs, TJ_DTYPE_F32, 1, &n);
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  CHECK_OK(tj_reference_run(g, &in, 1, &ref, 1));
  for (int i = 0; i < 9; ++i) CHECK(fabsf(ys[i] - rs[i]) <= 1e-5f);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- autodiff ---===//

TEST(vjp_matches_finite_differences) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  counter_t c = {0};
  register_square(ctx, &c, true, true);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "loss", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_value_t s = tj_graph_custom(g, "square", &x, 1, NULL);
  tj_value_t loss = tj_graph_sum(g, tj_graph_mul(g, s, tj_graph_sin(g, x)), 1,
                                 (int32_t[]){0}, false);
  tj_graph_output(g, loss, "loss");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  if (!joint) {
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    return;
  }
  // joint: inputs x, grad_loss; outputs loss, grad_x.
  float xs[4] = {0.3f, -1.2f, 2.0f, 0.7f}, one = 1, l, gx[4];
  tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){4}),
                       tj_tensor_make(&one, TJ_DTYPE_F32, 0, NULL)};
  tj_tensor_t out[2] = {tj_tensor_make(&l, TJ_DTYPE_F32, 0, NULL),
                        tj_tensor_make(gx, TJ_DTYPE_F32, 1, (int64_t[]){4})};
  CHECK_OK(tj_reference_run(joint, in, 2, out, 2));
  // Compiled for x86 too: the same gradient.
  tj_executable_t* exe = NULL;
  float cgx[4];
  out[1].data = cgx;
  CHECK_OK(tj_compile(joint, NULL, &exe));
  CHECK_OK(tj_executable_run(exe, in, 2, out, 2));
  tj_executable_release(exe);
  for (int i = 0; i < 4; ++i) {
    double h = 1e-3, x0 = xs[i];
    double fp = (x0 + h) * (x0 + h) * sin(x0 + h);
    double fm = (x0 - h) * (x0 - h) * sin(x0 - h);
    double fd = (fp - fm) / (2 * h);
    CHECK(fabs(gx[i] - fd) < 2e-3 * (1 + fabs(fd)));
    CHECK(fabsf(cgx[i] - gx[i]) < 1e-5f * (1 + fabsf(gx[i])));
  }
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(no_vjp_is_a_clear_error) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  counter_t c = {0};
  register_square(ctx, &c, true, false);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "loss", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_value_t s = tj_graph_custom(g, "square", &x, 1, NULL);
  tj_graph_output(g, tj_graph_sum(g, s, 1, (int32_t[]){0}, false), "loss");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "custom op square@1 has no VJP",
               tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  CHECK(joint == NULL);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- data-dependent output dims ---===//

// positives: x f32[R, C] -> the elements > 0 of x, in order, as f32[N] with
// N data-dependent, bounded by R * C (a nonzero-like filter).
typedef struct filter_t {
  int calls;
  int64_t report;  // >= 0: report this N whatever the data (error tests)
  bool change_rank;
} filter_t;

static tj_status_t positives_shape(void* user, tj_graph_t* g,
                                   const tj_custom_type_t* in, int32_t n,
                                   const tj_custom_attrs_t* attrs,
                                   tj_custom_type_t* out) {
  (void)user, (void)n, (void)attrs;
  int64_t bound = tj_graph_dim_mul(g, in[0].dims[0], in[0].dims[1]);
  out->dtype = in[0].dtype;
  out->rank = 1;
  out->dims[0] = tj_custom_dynamic_dim(g, "N", bound);
  return NULL;  // a failed call is recorded on |g|
}

static tj_status_t positives_host(void* user, const tj_tensor_t* in, int32_t n,
                                  const tj_custom_attrs_t* attrs,
                                  const tj_tensor_t* out) {
  (void)n, (void)attrs;
  filter_t* f = user;
  ++f->calls;
  int64_t numel = in[0].shape[0] * in[0].shape[1], count = 0;
  if (out->shape[0] != numel)
    return tj_status_create(TJ_STATUS_INTERNAL, "not given the bound");
  const float* x = in[0].data;
  float* y = out->data;
  for (int64_t i = 0; i < numel; ++i) {
    if (x[i] > 0) y[count++] = x[i];
  }
  if (f->report >= 0) count = f->report;
  if (f->change_rank)
    return tj_custom_set_output_shape(out, 2, (int64_t[]){count, 1});
  return tj_custom_set_output_shape(out, 1, &count);
}

static void register_positives(tj_context_t* ctx, filter_t* f) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "positives";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = positives_shape;
  d.host = positives_host;
  d.flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  d.user_data = f;
  CHECK_OK(tj_context_register_op(ctx, &d));
}

// x[R, 4] -> h = x * 2 - 1 -> c = positives(h) -> y = exp(-c) * c + c:
// outputs sum(y) and sum(c * 0 + 1) (the count N). Fused regions before and
// after the host call; y's kernel runs over N elements.
static tj_graph_t* positives_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "filter", &g));
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 4}, "x");
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_value_t one = tj_graph_scalar(g, TJ_DTYPE_F32, 1.0);
  tj_value_t h = tj_graph_sub(g, tj_graph_mul(g, x, two), one);
  tj_value_t c = tj_graph_custom(g, "positives", &h, 1, NULL);
  tj_value_t y = tj_graph_add(
      g, tj_graph_mul(g, tj_graph_exp(g, tj_graph_neg(g, c)), c), c);
  tj_value_t zero = tj_graph_scalar(g, TJ_DTYPE_F32, 0.0);
  tj_value_t ones = tj_graph_add(g, tj_graph_mul(g, c, zero), one);
  tj_graph_output(g, tj_graph_sum(g, y, 0, NULL, false), "total");
  tj_graph_output(g, tj_graph_sum(g, ones, 0, NULL, false), "count");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// One executable, several R and several counts N (0, some, all of R * 4),
// against a direct computation and the reference interpreter; no recompile
// even under TJ_SPECIALIZE_ALWAYS (the generic kernels serve every N).
TEST(data_dependent_dims_then_fused_region) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  filter_t f = {0, -1, false};
  register_positives(ctx, &f);
  tj_graph_t* g = positives_graph(ctx);
  for (int mode = 0; mode < 2; ++mode) {
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.specialize = mode ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_host_calls);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK(st.num_kernels >= 2);
    int64_t rows[] = {1, 3, 17, 64};
    for (int ri = 0; ri < 4; ++ri) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        int64_t R = rows[ri];
        float xs[256];
        double want_total = 0, want_count = 0;
        for (int64_t i = 0; i < R * 4; ++i) {
          double v = pattern == 0   ? -1.0 - (double)i  // none positive
                     : pattern == 1 ? sin((double)i * 1.3 + (double)R)
                                    : 1.0 + (double)i * 0.01;  // all
          xs[i] = (float)v;
          float hv = (float)v * 2.0f - 1.0f;
          if (hv > 0) {
            want_total += exp(-(double)hv) * hv + hv;
            want_count += 1;
          }
        }
        tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){R, 4});
        float got[2], ref[2];
        tj_tensor_t outs[2] = {tj_tensor_make(&got[0], TJ_DTYPE_F32, 0, NULL),
                               tj_tensor_make(&got[1], TJ_DTYPE_F32, 0, NULL)};
        tj_tensor_t refs[2] = {tj_tensor_make(&ref[0], TJ_DTYPE_F32, 0, NULL),
                               tj_tensor_make(&ref[1], TJ_DTYPE_F32, 0, NULL)};
        CHECK_OK(tj_executable_run(exe, &in, 1, outs, 2));
        CHECK_OK(tj_reference_run(g, &in, 1, refs, 2));
        CHECK(fabs(got[1] - want_count) < 0.5);
        CHECK(fabs(ref[1] - want_count) < 0.5);
        CHECK(fabs(got[0] - want_total) <= 1e-4 * (1 + fabs(want_total)));
        CHECK(fabs(got[0] - ref[0]) <= 1e-4 * (1 + fabs(want_total)));
      }
    }
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, (int)st.recompiles);
    tj_executable_release(exe);
  }
  CHECK(f.calls > 0);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// INVALID_ARGUMENT whose message holds |a| and |b|; frees it.
static void check_error(tj_status_t s, const char* a, const char* b) {
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK_CONTAINS(tj_status_message(s), a);
  CHECK_CONTAINS(tj_status_message(s), b);
  tj_status_free(s);
}

// A reported shape outside the bound, of another rank, or a graph output
// whose shape depends on N, or N bound by an input: errors naming them.
TEST(data_dependent_dims_errors) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  filter_t f = {0, -1, false};
  register_positives(ctx, &f);
  tj_graph_t* g = positives_graph(ctx);
  const char* targets[] = {"x86", "reference"};
  for (int t = 0; t < 2; ++t) {
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.target = t ? TJ_TARGET_REFERENCE : TJ_TARGET_X86;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o[2];
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){2, 4});
    tj_tensor_t outs[2] = {tj_tensor_make(&o[0], TJ_DTYPE_F32, 0, NULL),
                           tj_tensor_make(&o[1], TJ_DTYPE_F32, 0, NULL)};
    f.report = 9;  // more than the bound 8
    check_error(tj_executable_run(exe, &in, 1, outs, 2), "positives",
                "outside [0, 8]");
    f.report = -1;
    f.change_rank = true;
    check_error(tj_executable_run(exe, &in, 1, outs, 2), "positives",
                "rank 2 for an output of rank 1");
    f.change_rank = false;
    CHECK_OK(tj_executable_run(exe, &in, 1, outs, 2));
    CHECK(fabsf(o[1] - 8) < 0.5f);
    printf("# %s: errors named the op\n", targets[t]);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  // An output whose shape depends on N.
  CHECK_OK(tj_graph_create(ctx, "out", &g));
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 4}, "x");
  tj_value_t c = tj_graph_custom(g, "positives", &x, 1, NULL);
  tj_graph_output(g, tj_graph_exp(g, c), "y");
  CHECK_OK(tj_graph_finalize(g));
  {
    // tj_executable_run cannot say the actual shape: refused, naming the
    // output; tj_executable_run_shaped returns it.
    tj_executable_t* exe = NULL;
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_X86;
    o.cache_dir = "";
    CHECK_OK(tj_compile(g, &o, &exe));
    float xs[8] = {1, -1, 2, -2, 3, -3, 4, -4}, ys[8];
    int64_t xd[2] = {2, 4}, yd[1] = {8}, got[TJ_MAX_RANK];
    tj_tensor_t xt = tj_tensor_make(xs, TJ_DTYPE_F32, 2, xd);
    tj_tensor_t yt = tj_tensor_make(ys, TJ_DTYPE_F32, 1, yd);
    check_error(tj_executable_run(exe, &xt, 1, &yt, 1), "output \"y\" dim 0",
                "data-dependent symbol N");
    CHECK_OK(tj_executable_run_shaped(exe, &xt, 1, &yt, 1, got));
    CHECK(yd[0] == 8);  // the caller's array is left alone
    CHECK(got[0] == 4);
    for (int i = 0; i < 4; ++i)
      CHECK(fabsf(ys[i] - expf((float)(i + 1))) < 1e-4f * ys[i]);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  // N already bound by an input.
  CHECK_OK(tj_graph_create(ctx, "bound", &g));
  int64_t N = tj_graph_symbol(g, "N");
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){N, 4}, "x");
  c = tj_graph_custom(g, "positives", &x, 1, NULL);
  CHECK(tj_value_is_none(c));
  check_error(tj_graph_finalize(g), "positives", "bound by input \"x\"");
  tj_graph_destroy(g);
  // Two nodes making the same symbol N.
  CHECK_OK(tj_graph_create(ctx, "twice", &g));
  R = tj_graph_symbol(g, "R");
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 4}, "x");
  tj_value_t x2 = tj_graph_exp(g, x);
  CHECK(!tj_value_is_none(tj_graph_custom(g, "positives", &x, 1, NULL)));
  CHECK(tj_value_is_none(tj_graph_custom(g, "positives", &x2, 1, NULL)));
  check_error(tj_graph_finalize(g), "symbol N", "already makes");
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- OOM ---===//

// A CUDA implementation's launch shape (the x86 target never asks).
static tj_status_t no_launch(void* user, const tj_custom_type_t* in, int32_t n,
                             const tj_custom_attrs_t* attrs,
                             const tj_custom_type_t* out,
                             tj_custom_launch_t* l) {
  (void)user, (void)in, (void)n, (void)attrs, (void)out, (void)l;
  return tj_status_create(TJ_STATUS_INTERNAL, "not on x86");
}

// Register + build + compile + run with the Nth allocation failing.
static tj_status_t register_compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_custom_op_desc_t d =
      desc_of("scale_f32", 1, same_as_first, (void (*)(void))scale_f32,
              "void(f32*, i64, const f32*, i64, f32)");
  // Its PTX and entry are copied too (x86 runs the host function).
  d.cuda_ptx = ".version 7.8\n.target sm_80\n.address_size 64\n";
  d.cuda_entry = "scale_f32";
  d.cuda_launch = no_launch;
  s = tj_context_register_op(ctx, &d);
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  if (!s) s = tj_graph_create(ctx, "oom", &g);
  if (!s) {
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
    tj_value_t h = tj_graph_exp(g, tj_graph_add(g, x, x));
    tj_custom_attrs_t a = {0, NULL, 1, (double[]){0.5}};
    tj_value_t c = tj_graph_custom(g, "scale_f32", &h, 1, &a);
    tj_graph_output(g, tj_graph_relu(g, tj_graph_sub(g, c, x)), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float xs[3] = {0, 1, -1}, ys[3];
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){3});
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){3});
    s = tj_executable_run(exe, &in, 1, &out, 1);
    if (!s && fabsf(ys[1] - (expf(2) * 0.5f - 1)) > 1e-4f)
      s = tj_status_create(TJ_STATUS_INTERNAL, "oom test: wrong result");
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep_register_compile_run) {
  tj_test_oom_sweep("custom op", register_compile_run);
}

// The same with a data-dependent op: its bound binding, the host call's
// reported shape and the kernels prepared again after it.
static tj_status_t dynamic_compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  filter_t f = {0, -1, false};
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "positives";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = positives_shape;
  d.host = positives_host;
  d.flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  d.user_data = &f;
  s = tj_context_register_op(ctx, &d);
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  if (!s) s = tj_graph_create(ctx, "oomdyn", &g);
  if (!s) {
    int64_t R = tj_graph_symbol(g, "R");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 4}, "x");
    tj_value_t c = tj_graph_custom(g, "positives", &x, 1, NULL);
    tj_value_t y = tj_graph_exp(g, tj_graph_neg(g, c));
    tj_graph_output(g, tj_graph_sum(g, y, 0, NULL, false), "total");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float xs[8] = {1, -1, 2, -2, 0, 0, 3, -3}, total = 0;
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){2, 4});
    tj_tensor_t out = tj_tensor_make(&total, TJ_DTYPE_F32, 0, NULL);
    s = tj_executable_run(exe, &in, 1, &out, 1);
    float want = expf(-1) + expf(-2) + expf(-3);
    if (!s && fabsf(total - want) > 1e-5f)
      s = tj_status_create(TJ_STATUS_INTERNAL, "oom test: wrong result");
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep_data_dependent) {
  long n = 0;
  for (;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = dynamic_compile_run(tj_test_allocator_get(&alloc));
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!s) break;
    if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "fail_at %ld: %s: %s\n", n,
              tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    if (n > 100000) break;
  }
  printf("# oom sweep (data-dependent op): %ld failing allocation points\n", n);
}

int main(void) {
  RUN_TEST(signature_argument_kinds);
  RUN_TEST(register_call_and_ffi_call);
  RUN_TEST(bad_signatures_are_rejected);
  RUN_TEST(shape_function_errors_are_sticky);
  RUN_TEST(symbolic_dims_through_the_shape_function);
  RUN_TEST(text_form_round_trip);
  RUN_TEST(mid_chain_two_fused_regions);
  RUN_TEST(strided_input_made_dense);
  RUN_TEST(cse_dce_fold_respect_purity);
  RUN_TEST(in_place_op_mid_chain);
  RUN_TEST(vjp_matches_finite_differences);
  RUN_TEST(no_vjp_is_a_clear_error);
  RUN_TEST(data_dependent_dims_then_fused_region);
  RUN_TEST(data_dependent_dims_errors);
  RUN_TEST(oom_sweep_register_compile_run);
  RUN_TEST(oom_sweep_data_dependent);
  TEST_MAIN_END();
}
