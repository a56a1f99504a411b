// lib/graph.c, lib/infer.c, lib/ir_verify.c, lib/runtime_shape.c: the graph
// builder, shape inference, the verifier and run-time shape binding.

#include "tests/unit/test.h"

#include "lib/dtype.h"
#include "lib/ir.h"

//===--- fixture ---===//

static tj_context_t* g_ctx;

static tj_graph_t* new_graph(void) {
  if (!g_ctx) CHECK_OK(tj_context_create(NULL, &g_ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "test", &g));
  return g;
}

static const char* type_of(tj_graph_t* g, tj_value_t v) {
  static char buf[4][256];
  static int next;
  char* b = buf[next++ % 4];
  if (tj_value_is_none(v)) return "none";
  tj_ir_format_type(g, v.id - 1, b, 256);
  return b;
}

// The graph's recorded error must have |code| and contain |needle|.
#define CHECK_GRAPH_ERROR(g, code, needle) \
  CHECK_STATUS(code, needle, tj_graph_status(g))

#define CHECK_NO_ERROR(g) CHECK_OK(tj_graph_status(g))

static const tj_node_t* node_of(tj_graph_t* g, tj_value_t v) {
  return &g->nodes[v.id - 1];
}

static tj_value_t in(tj_graph_t* g, tj_dtype_t dtype, int32_t rank,
                     const int64_t* dims, const char* name) {
  return tj_graph_input(g, dtype, rank, dims, name);
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define AXES(...) ((const int32_t[]){__VA_ARGS__})

//===--- lifecycle, inputs, symbols ---===//

TEST(create_and_destroy) {
  tj_graph_t* g = new_graph();
  CHECK(tj_graph_context(g) == g_ctx);
  CHECK_STREQ("test", g->name);
  CHECK_EQ_INT(0, tj_graph_num_inputs(g));
  CHECK_EQ_INT(0, tj_graph_num_outputs(g));
  tj_graph_destroy(g);
  CHECK_OK(tj_graph_create(g_ctx, NULL, &g));
  CHECK_STREQ("main", g->name);
  tj_graph_destroy(g);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "\"my graph\" is not a C identifier",
               tj_graph_create(g_ctx, "my graph", &g));
  CHECK(g == NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "context is NULL",
               tj_graph_create(NULL, "x", &g));
  tj_graph_destroy(NULL);
}

TEST(inputs_share_symbols) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  CHECK(b <= -2);
  CHECK_EQ_INT(b, tj_graph_symbol(g, "B"));
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t t =
      in(g, TJ_DTYPE_F32, 2, DIMS(tj_graph_symbol(g, "B"), 4096), "t");
  CHECK_STREQ("f32[B,1024]", type_of(g, x));
  CHECK_STREQ("f32[B,4096]", type_of(g, t));
  int64_t xd[TJ_MAX_RANK], td[TJ_MAX_RANK];
  tj_graph_value_dims(g, x, xd);
  tj_graph_value_dims(g, t, td);
  CHECK_EQ_INT(xd[0], td[0]);  // one B, shared
  CHECK_EQ_INT(1024, xd[1]);
  CHECK_EQ_INT(2, tj_graph_num_inputs(g));
  CHECK_EQ_INT(x.id, tj_graph_input_value(g, 0).id);
  CHECK_EQ_INT(t.id, tj_graph_input_value(g, 1).id);
  CHECK(tj_value_is_none(tj_graph_input_value(g, 2)));
  CHECK_STREQ("t", tj_graph_input_name(g, 1));
  CHECK(tj_graph_input_name(g, -1) == NULL);
  CHECK_EQ_INT(TJ_DTYPE_F32, tj_graph_value_dtype(g, t));
  CHECK_EQ_INT(2, tj_graph_value_rank(g, t));
  CHECK_EQ_INT(-1, tj_graph_value_rank(g, tj_value_none()));
  tj_value_t bogus = {77};
  CHECK_EQ_INT(-1, tj_graph_value_rank(g, bogus));
  CHECK_EQ_INT(TJ_DTYPE_COUNT_, tj_graph_value_dtype(g, bogus));
  // Rank 0 inputs and symbolic expressions as dims.
  int64_t b4 = tj_graph_dim_add(g, tj_graph_dim_mul(g, b, 4), 1);
  tj_value_t s = in(g, TJ_DTYPE_I64, 0, NULL, "s");
  tj_value_t e = in(g, TJ_DTYPE_BOOL, 1, DIMS(b4), "e");
  CHECK_STREQ("i64[]", type_of(g, s));
  CHECK_STREQ("bool[4*B+1]", type_of(g, e));
  CHECK_NO_ERROR(g);
  tj_graph_destroy(g);
}

TEST(input_errors) {
  struct {
    tj_dtype_t dtype;
    int32_t rank;
    const int64_t* dims;
    const char* name;
    const char* message;
  } cases[] = {
      {TJ_DTYPE_F32, 1, DIMS(4), "x", "input name \"x\" is already used"},
      {TJ_DTYPE_F32, 1, DIMS(4), "2x",
       "input name \"2x\" is not a C identifier"},
      {TJ_DTYPE_F32, 1, DIMS(4), NULL, "input name \"(null)\""},
      {TJ_DTYPE_F32, 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1), "y",
       "rank 9 is out of range [0, 8]"},
      {TJ_DTYPE_F32, -1, NULL, "y", "rank -1 is out of range"},
      {TJ_DTYPE_F32, 2, DIMS(4, -1), "y",
       "input (node %1): dim 1 is -1, which is neither a size nor a symbolic"},
      {TJ_DTYPE_F32, 1, DIMS(-999), "y", "dim 0 is -999"},
      {TJ_DTYPE_F32, 2, NULL, "y", "dims is NULL"},
      {(tj_dtype_t)42, 1, DIMS(4), "y", "dtype 42 is not a dtype"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    tj_graph_t* g = new_graph();
    in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
    tj_value_t v =
        in(g, cases[i].dtype, cases[i].rank, cases[i].dims, cases[i].name);
    CHECK(tj_value_is_none(v));
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, cases[i].message);
    CHECK_EQ_INT(1, tj_graph_num_inputs(g));  // nothing appended
    CHECK_EQ_INT(1, g->num_nodes);
    tj_graph_destroy(g);
  }
}

TEST(symbol_errors) {
  tj_graph_t* g = new_graph();
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_symbol(g, "not valid"));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "symbol name \"not valid\" is not a C identifier");
  tj_graph_destroy(g);

  g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_dim_add(g, b, -1));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "dim_add: dim -1");
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_dim_mul(g, b, 2));  // sticky
  tj_graph_destroy(g);

  g = new_graph();
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_dim_mul(g, INT64_MAX, 2));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "dim_mul: dim overflow");
  tj_graph_destroy(g);
}

// tj_graph_dim_sub and tj_graph_dim_div: what stays a dim for every value
// of the symbols, and a recorded error naming both operands otherwise.
TEST(dim_sub_and_div) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B"), t = tj_graph_symbol(g, "T");
  int64_t bt = tj_graph_dim_add(g, b, t);
  CHECK_EQ_INT(t, tj_graph_dim_sub(g, bt, b));
  CHECK_EQ_INT(3, tj_graph_dim_sub(g, 10, 7));
  CHECK_EQ_INT(0, tj_graph_dim_sub(g, t, t));
  int64_t t2 = tj_graph_dim_add(g, t, 2);
  CHECK_EQ_INT(t, tj_graph_dim_sub(g, t2, 2));
  int64_t bt12 = tj_graph_dim_mul(g, tj_graph_dim_mul(g, b, t), 12);
  CHECK_EQ_INT(tj_graph_dim_mul(g, b, t), tj_graph_dim_div(g, bt12, 12));
  CHECK_EQ_INT(tj_graph_dim_mul(g, b, 12), tj_graph_dim_div(g, bt12, t));
  CHECK_EQ_INT(4, tj_graph_dim_div(g, 12, 3));
  int64_t x = tj_graph_dim_div(g, tj_graph_dim_mul(g, t2, 3), 3);
  CHECK_EQ_INT(t2, x);
  tj_value_t v = in(g, TJ_DTYPE_F32, 1, DIMS(tj_graph_dim_sub(g, t2, 1)), "v");
  CHECK_STREQ("f32[T+1]", type_of(g, v));
  CHECK_NO_ERROR(g);
  tj_graph_destroy(g);

  struct {
    int which;  // 0: T - 1, 1: 2 - 3, 2: T / 2, 3: 7 / 2, 4: B - T
    const char* message;
  } cases[] = {
      {0, "tj_graph_dim_sub: dim T - 1 is no dim"},
      {1, "tj_graph_dim_sub: dim 2 - 3 is negative"},
      {2, "tj_graph_dim_div: 2 does not divide T exactly"},
      {3, "tj_graph_dim_div: 2 does not divide 7 exactly"},
      {4, "tj_graph_dim_sub: dim B - T is no dim"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    g = new_graph();
    b = tj_graph_symbol(g, "B");
    t = tj_graph_symbol(g, "T");
    int64_t r = cases[i].which == 0   ? tj_graph_dim_sub(g, t, 1)
                : cases[i].which == 1 ? tj_graph_dim_sub(g, 2, 3)
                : cases[i].which == 2 ? tj_graph_dim_div(g, t, 2)
                : cases[i].which == 3 ? tj_graph_dim_div(g, 7, 2)
                                      : tj_graph_dim_sub(g, b, t);
    CHECK_EQ_INT(TJ_DIM_INVALID, r);
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, cases[i].message);
    tj_graph_destroy(g);
  }
}

// tj_graph_output_is_data_dependent: nonzero's count is set at run time, a
// sum of it is not, and neither is anything of a graph without such ops.
TEST(output_is_data_dependent) {
  tj_graph_t* g = new_graph();
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(tj_graph_symbol(g, "R"), 3), "x");
  tj_value_t nz = tj_graph_nonzero(g, x);
  tj_graph_output(g, nz, "nz");
  tj_graph_output(g, tj_graph_sum(g, nz, 0, NULL, false), "s");
  tj_graph_output(g, x, "x_out");
  CHECK_OK(tj_graph_finalize(g));
  CHECK(tj_graph_output_is_data_dependent(g, 0));
  CHECK(!tj_graph_output_is_data_dependent(g, 1));
  CHECK(!tj_graph_output_is_data_dependent(g, 2));
  CHECK(!tj_graph_output_is_data_dependent(g, 3));
  CHECK(!tj_graph_output_is_data_dependent(g, -1));
  CHECK(!tj_graph_output_is_data_dependent(NULL, 0));
  tj_graph_destroy(g);
}

//===--- elementwise ---===//

typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);

TEST(unary_ops) {
  static const struct {
    unary_fn fn;
    const char* name;
    const char* ok_type;   // input dtype that works
    const char* bad_type;  // one that does not (NULL: none)
    const char* result;    // result dtype for the ok input
  } ops[] = {
      {tj_graph_neg, "neg", "i32", "bool", "i32"},
      {tj_graph_abs, "abs", "f16", "bool", "f16"},
      {tj_graph_exp, "exp", "f32", "i32", "f32"},
      {tj_graph_log, "log", "f64", "i64", "f64"},
      {tj_graph_sqrt, "sqrt", "bf16", "i8", "bf16"},
      {tj_graph_rsqrt, "rsqrt", "f32", "bool", "f32"},
      {tj_graph_tanh, "tanh", "f32", "i32", "f32"},
      {tj_graph_sigmoid, "sigmoid", "f32", "i32", "f32"},
      {tj_graph_erf, "erf", "f32", "i32", "f32"},
      {tj_graph_erfc, "erfc", "f32", "i32", "f32"},
      {tj_graph_sin, "sin", "f32", "i32", "f32"},
      {tj_graph_cos, "cos", "f32", "i32", "f32"},
      {tj_graph_asin, "asin", "f32", "i32", "f32"},
      {tj_graph_acos, "acos", "f32", "i32", "f32"},
      {tj_graph_atan, "atan", "f32", "i32", "f32"},
      {tj_graph_floor, "floor", "f32", "i32", "f32"},
      {tj_graph_ceil, "ceil", "f32", "i32", "f32"},
      {tj_graph_round, "round", "f32", "i32", "f32"},
      {tj_graph_relu, "relu", "i8", "bool", "i8"},
      {tj_graph_sign, "sign", "f32", "bool", "f32"},
      {tj_graph_logical_not, "not", "bool", "f32", "bool"},
      {tj_graph_isnan, "isnan", "f32", "i32", "bool"},
      {tj_graph_silu, "silu", "f32", "i32", "f32"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(ops); ++i) {
    tj_graph_t* g = new_graph();
    int64_t b = tj_graph_symbol(g, "B");
    tj_dtype_t ok = TJ_DTYPE_F32, bad = TJ_DTYPE_F32;
    CHECK(tj_dtype_from_name(ops[i].ok_type, strlen(ops[i].ok_type), &ok));
    CHECK(tj_dtype_from_name(ops[i].bad_type, strlen(ops[i].bad_type), &bad));
    tj_value_t x = in(g, ok, 2, DIMS(b, 3), "x");
    tj_value_t y = in(g, bad, 1, DIMS(5), "y");
    tj_value_t r = ops[i].fn(g, x);
    char expected[64];
    snprintf(expected, sizeof(expected), "%s[B,3]", ops[i].result);
    CHECK_STREQ(expected, type_of(g, r));
    CHECK_STREQ(ops[i].name, tj_op_info(node_of(g, r)->op)->name);
    CHECK_NO_ERROR(g);
    CHECK(tj_value_is_none(ops[i].fn(g, y)));
    char message[128];
    snprintf(message, sizeof(message), "%s (node %%3): needs ", ops[i].name);
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, message);
    snprintf(message, sizeof(message), "got %s; operands %s[5]",
             ops[i].bad_type, ops[i].bad_type);
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, message);
    tj_graph_destroy(g);
  }
}

TEST(cast) {
  tj_graph_t* g = new_graph();
  tj_value_t x = in(g, TJ_DTYPE_BOOL, 1, DIMS(4), "x");
  CHECK_STREQ("f16[4]", type_of(g, tj_graph_cast(g, x, TJ_DTYPE_F16)));
  CHECK_STREQ("bool[4]", type_of(g, tj_graph_cast(g, x, TJ_DTYPE_BOOL)));
  CHECK(tj_value_is_none(tj_graph_cast(g, x, (tj_dtype_t)-3)));
  CHECK_GRAPH_ERROR(
      g, TJ_STATUS_INVALID_ARGUMENT,
      "cast (node %3): dtype -3 is not a dtype; operands bool[4]");
  tj_graph_destroy(g);
}

TEST(binary_ops) {
  static const struct {
    binary_fn fn;
    const char* name;
    tj_dtype_t ok;
    tj_dtype_t result;
    int bad;  // a dtype the op rejects, or -1
  } ops[] = {
      {tj_graph_add, "add", TJ_DTYPE_I32, TJ_DTYPE_I32, TJ_DTYPE_BOOL},
      {tj_graph_sub, "sub", TJ_DTYPE_F32, TJ_DTYPE_F32, TJ_DTYPE_BOOL},
      {tj_graph_mul, "mul", TJ_DTYPE_I8, TJ_DTYPE_I8, TJ_DTYPE_BOOL},
      {tj_graph_div, "div", TJ_DTYPE_I64, TJ_DTYPE_I64, TJ_DTYPE_BOOL},
      {tj_graph_pow, "pow", TJ_DTYPE_F64, TJ_DTYPE_F64, TJ_DTYPE_I32},
      {tj_graph_maximum, "maximum", TJ_DTYPE_F16, TJ_DTYPE_F16, TJ_DTYPE_BOOL},
      {tj_graph_minimum, "minimum", TJ_DTYPE_BF16, TJ_DTYPE_BF16,
       TJ_DTYPE_BOOL},
      {tj_graph_eq, "eq", TJ_DTYPE_BOOL, TJ_DTYPE_BOOL, -1},
      {tj_graph_ne, "ne", TJ_DTYPE_F32, TJ_DTYPE_BOOL, -1},
      {tj_graph_lt, "lt", TJ_DTYPE_I32, TJ_DTYPE_BOOL, TJ_DTYPE_BOOL},
      {tj_graph_le, "le", TJ_DTYPE_F32, TJ_DTYPE_BOOL, TJ_DTYPE_BOOL},
      {tj_graph_gt, "gt", TJ_DTYPE_F32, TJ_DTYPE_BOOL, TJ_DTYPE_BOOL},
      {tj_graph_ge, "ge", TJ_DTYPE_F32, TJ_DTYPE_BOOL, TJ_DTYPE_BOOL},
      {tj_graph_logical_and, "and", TJ_DTYPE_BOOL, TJ_DTYPE_BOOL, TJ_DTYPE_F32},
      {tj_graph_logical_or, "or", TJ_DTYPE_BOOL, TJ_DTYPE_BOOL, TJ_DTYPE_I8},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(ops); ++i) {
    tj_graph_t* g = new_graph();
    int64_t b = tj_graph_symbol(g, "B");
    tj_value_t x = in(g, ops[i].ok, 2, DIMS(b, 1), "x");
    tj_value_t y = in(g, ops[i].ok, 1, DIMS(7), "y");
    tj_value_t r = ops[i].fn(g, x, y);
    char expected[64];
    snprintf(expected, sizeof(expected), "%s[B,7]",
             tj_dtype_name(ops[i].result));
    CHECK_STREQ(expected, type_of(g, r));
    CHECK_STREQ(ops[i].name, tj_op_info(node_of(g, r)->op)->name);
    CHECK_EQ_INT(0, g->num_guards);  // B against 1, 1 against 7: decidable
    CHECK_NO_ERROR(g);
    if (ops[i].bad >= 0) {
      tj_value_t z = in(g, (tj_dtype_t)ops[i].bad, 1, DIMS(7), "z");
      CHECK(tj_value_is_none(ops[i].fn(g, z, z)));
      char message[128];
      snprintf(message, sizeof(message), "%s (node %%4): needs", ops[i].name);
      CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, message);
    }
    tj_graph_destroy(g);
  }
}

TEST(dtype_mismatch_message) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t h = in(g, TJ_DTYPE_F16, 1, DIMS(1024), "h");
  tj_graph_exp(g, x);
  CHECK(tj_value_is_none(tj_graph_add(g, x, h)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "add (node %3): dtype mismatch f32 vs f16; operands "
                    "f32[B,1024], f16[1024]");
  CHECK_EQ_INT(3, g->num_nodes);
  tj_graph_destroy(g);
}

TEST(broadcasting) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  tj_value_t a41 = in(g, TJ_DTYPE_F32, 2, DIMS(4, 1), "a41");
  tj_value_t a3 = in(g, TJ_DTYPE_F32, 1, DIMS(3), "a3");
  tj_value_t s = in(g, TJ_DTYPE_F32, 0, NULL, "s");
  tj_value_t xb = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1), "xb");
  tj_value_t xc = in(g, TJ_DTYPE_F32, 1, DIMS(c), "xc");
  tj_value_t x7 = in(g, TJ_DTYPE_F32, 1, DIMS(7), "x7");
  tj_value_t xbb = in(g, TJ_DTYPE_F32, 1, DIMS(b), "xbb");
  CHECK_STREQ("f32[4,3]", type_of(g, tj_graph_add(g, a41, a3)));
  CHECK_STREQ("f32[4,3]", type_of(g, tj_graph_mul(g, a3, a41)));
  CHECK_STREQ("f32[3]", type_of(g, tj_graph_add(g, s, a3)));
  CHECK_STREQ("f32[]", type_of(g, tj_graph_add(g, s, s)));
  CHECK_STREQ("f32[B,3]", type_of(g, tj_graph_add(g, xb, a3)));
  CHECK_STREQ("f32[B,B]", type_of(g, tj_graph_add(g, xb, xbb)));
  CHECK_EQ_INT(0, g->num_guards);
  // B vs C: guarded, first operand's dim.
  CHECK_STREQ("f32[B,C]", type_of(g, tj_graph_add(g, xb, xc)));
  CHECK_STREQ("f32[B]", type_of(g, tj_graph_add(g, xbb, xc)));
  CHECK_EQ_INT(1, g->num_guards);  // the same pair is recorded once
  CHECK_EQ_INT(b, g->guards[0].a);
  CHECK_EQ_INT(c, g->guards[0].b);
  // B vs 7: guarded, the constant wins (either order).
  CHECK_STREQ("f32[7]", type_of(g, tj_graph_add(g, xbb, x7)));
  CHECK_STREQ("f32[7]", type_of(g, tj_graph_sub(g, x7, xbb)));
  CHECK_EQ_INT(2, g->num_guards);
  CHECK_EQ_INT(b, g->guards[1].a);
  CHECK_EQ_INT(7, g->guards[1].b);
  CHECK_NO_ERROR(g);
  // Two different constants.
  CHECK(tj_value_is_none(tj_graph_add(g, a3, x7)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "cannot broadcast 3 against 7 (result axis 0); operands "
                    "f32[3], f32[7]");
  tj_graph_destroy(g);
}

TEST(where) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t cond = in(g, TJ_DTYPE_BOOL, 2, DIMS(b, 1), "cond");
  tj_value_t a = in(g, TJ_DTYPE_I32, 1, DIMS(5), "a");
  tj_value_t s = in(g, TJ_DTYPE_I32, 0, NULL, "s");
  tj_value_t f = in(g, TJ_DTYPE_F32, 0, NULL, "f");
  CHECK_STREQ("i32[B,5]", type_of(g, tj_graph_where(g, cond, a, s)));
  CHECK(tj_value_is_none(tj_graph_where(g, a, a, a)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "where (node %5): cond must be bool, got i32");
  tj_graph_destroy(g);
  g = new_graph();
  cond = in(g, TJ_DTYPE_BOOL, 0, NULL, "cond");
  a = in(g, TJ_DTYPE_I32, 1, DIMS(5), "a");
  f = in(g, TJ_DTYPE_F32, 0, NULL, "f");
  CHECK(tj_value_is_none(tj_graph_where(g, cond, a, f)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "where (node %3): dtype mismatch i32 vs f32; operands "
                    "bool[], i32[5], f32[]");
  tj_graph_destroy(g);
}

//===--- reductions ---===//

TEST(reductions) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 3, DIMS(b, 4, 5), "x");
  tj_value_t r = tj_graph_sum(g, x, 2, AXES(-1, 0), false);
  CHECK_STREQ("f32[4]", type_of(g, r));
  const tj_node_t* n = node_of(g, r);
  CHECK_EQ_INT(2, n->attrs.num_ints);
  CHECK_EQ_INT(0, n->attrs.ints[0]);
  CHECK_EQ_INT(2, n->attrs.ints[1]);
  CHECK_STREQ("f32[1,4,1]",
              type_of(g, tj_graph_mean(g, x, 2, AXES(2, 0), true)));
  tj_value_t all = tj_graph_max(g, x, 0, NULL, false);
  CHECK_STREQ("f32[]", type_of(g, all));
  CHECK_EQ_INT(3, node_of(g, all)->attrs.num_ints);  // stored explicitly
  CHECK_STREQ("f32[1,1,1]", type_of(g, tj_graph_min(g, x, 0, NULL, true)));
  CHECK_STREQ("f32[B,5]", type_of(g, tj_graph_prod(g, x, 1, AXES(1), false)));
  tj_value_t am = tj_graph_argmax(g, x, -2, false);
  CHECK_STREQ("i64[B,5]", type_of(g, am));
  CHECK_EQ_INT(1, node_of(g, am)->attrs.axis);
  CHECK_EQ_INT(1, node_of(g, am)->attrs.num_ints);
  CHECK_EQ_INT(1, node_of(g, am)->attrs.ints[0]);
  CHECK_STREQ("i64[B,1,5]", type_of(g, tj_graph_argmax(g, x, 1, true)));
  CHECK_NO_ERROR(g);
  tj_graph_destroy(g);

  struct {
    int op;  // 0 sum, 1 mean, 2 argmax
    tj_dtype_t dtype;
    int32_t num_axes;
    const int32_t* axes;
    const char* message;
  } errors[] = {
      {0, TJ_DTYPE_F32, 2, AXES(1, -2), "sum (node %1): axis -2 is repeated"},
      {0, TJ_DTYPE_F32, 1, AXES(3), "axis 3 is out of range for rank 3"},
      {0, TJ_DTYPE_F32, 1, AXES(-4), "axis -4 is out of range for rank 3"},
      {0, TJ_DTYPE_F32, 9, AXES(0), "num_axes is out of range [0, 8]"},
      {0, TJ_DTYPE_F32, 1, NULL, "axes is NULL"},
      {0, TJ_DTYPE_BOOL, 0, NULL, "needs a numeric dtype, got bool"},
      {1, TJ_DTYPE_I32, 0, NULL, "mean (node %1): needs a float dtype"},
      {2, TJ_DTYPE_F32, 1, AXES(2), "argmax (node %1): axis 2 is empty"},
      {2, TJ_DTYPE_F32, 1, AXES(5), "axis 5 is out of range"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(errors); ++i) {
    g = new_graph();
    x = in(g, errors[i].dtype, 3, DIMS(2, 3, 0), "x");
    tj_value_t v =
        errors[i].op == 0
            ? tj_graph_sum(g, x, errors[i].num_axes, errors[i].axes, false)
        : errors[i].op == 1
            ? tj_graph_mean(g, x, errors[i].num_axes, errors[i].axes, false)
            : tj_graph_argmax(g, x, errors[i].axes[0], false);
    CHECK(tj_value_is_none(v));
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, errors[i].message);
    tj_graph_destroy(g);
  }
}

//===--- matmul ---===//

TEST(matmul) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t k = tj_graph_symbol(g, "K");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t w = in(g, TJ_DTYPE_F32, 2, DIMS(1024, 4096), "w");
  tj_value_t v = in(g, TJ_DTYPE_F32, 1, DIMS(1024), "v");
  tj_value_t b4 = in(g, TJ_DTYPE_F32, 4, DIMS(2, 1, 5, 1024), "b4");
  tj_value_t b3 = in(g, TJ_DTYPE_F32, 3, DIMS(3, 1024, 6), "b3");
  tj_value_t xk = in(g, TJ_DTYPE_F32, 2, DIMS(b, k), "xk");
  CHECK_STREQ("f32[B,4096]", type_of(g, tj_graph_matmul(g, x, w)));
  CHECK_STREQ("f32[4096]", type_of(g, tj_graph_matmul(g, v, w)));
  CHECK_STREQ("f32[B]", type_of(g, tj_graph_matmul(g, x, v)));
  CHECK_STREQ("f32[]", type_of(g, tj_graph_matmul(g, v, v)));
  CHECK_STREQ("f32[2,3,5,6]", type_of(g, tj_graph_matmul(g, b4, b3)));
  CHECK_STREQ("f32[3,6]", type_of(g, tj_graph_matmul(g, v, b3)));
  CHECK_EQ_INT(0, g->num_guards);
  // Inner dims K vs 1024: a guard.
  CHECK_STREQ("f32[B,4096]", type_of(g, tj_graph_matmul(g, xk, w)));
  CHECK_EQ_INT(1, g->num_guards);
  CHECK_EQ_INT(k, g->guards[0].a);
  CHECK_EQ_INT(1024, g->guards[0].b);
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(tj_graph_matmul(g, w, w)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "matmul (node %13): inner dims differ: 4096 vs 1024; "
                    "operands f32[1024,4096], f32[1024,4096]");
  tj_graph_destroy(g);

  g = new_graph();
  tj_value_t s = in(g, TJ_DTYPE_F32, 0, NULL, "s");
  CHECK(tj_value_is_none(tj_graph_matmul(g, s, s)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "rank >= 1");
  tj_graph_destroy(g);
  g = new_graph();
  tj_value_t m = in(g, TJ_DTYPE_BOOL, 2, DIMS(2, 2), "m");
  CHECK(tj_value_is_none(tj_graph_matmul(g, m, m)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "needs a numeric dtype");
  tj_graph_destroy(g);
  g = new_graph();
  tj_value_t p = in(g, TJ_DTYPE_F32, 3, DIMS(2, 3, 4), "p");
  tj_value_t q = in(g, TJ_DTYPE_F32, 3, DIMS(5, 4, 3), "q");
  CHECK(tj_value_is_none(tj_graph_matmul(g, p, q)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "cannot broadcast 2 against 5");
  tj_graph_destroy(g);
}

//===--- data movement ---===//

TEST(reshape) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t r = tj_graph_reshape(g, x, 3, DIMS(TJ_DIM_INFER, 32, 32));
  CHECK_STREQ("f32[B,32,32]", type_of(g, r));
  int64_t b1024 = tj_graph_dim_mul(g, b, 1024);
  CHECK_STREQ("f32[1024*B]", type_of(g, tj_graph_reshape(g, x, 1, &b1024)));
  CHECK_STREQ("f32[2,512*B]",
              type_of(g, tj_graph_reshape(g, x, 2, DIMS(2, TJ_DIM_INFER))));
  CHECK_STREQ("f32[B,2,512]",
              type_of(g, tj_graph_reshape(g, r, 3, DIMS(b, 2, 512))));
  tj_value_t s = in(g, TJ_DTYPE_I32, 1, DIMS(1), "s");
  CHECK_STREQ("i32[]", type_of(g, tj_graph_reshape(g, s, 0, NULL)));
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(tj_graph_reshape(g, x, 2, DIMS(TJ_DIM_INFER, 3))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "reshape (node %7): cannot infer dim 0: 1024*B elements "
                    "are not a multiple of 3; operands f32[B,1024]");
  tj_graph_destroy(g);

  const struct {
    int32_t rank;
    const int64_t* dims;
    const char* message;
  } errors[] = {
      {2, DIMS(TJ_DIM_INFER, TJ_DIM_INFER), "more than one dim is -1"},
      {1, DIMS(-5), "dim 0 is -5"},
      {9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 24), "rank 9 is out of range"},
      {2, DIMS(0, TJ_DIM_INFER),
       "cannot infer dim 1: 24 elements are not a "
       "multiple of 0"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(errors); ++i) {
    g = new_graph();
    x = in(g, TJ_DTYPE_F32, 2, DIMS(4, 6), "x");
    CHECK(tj_value_is_none(
        tj_graph_reshape(g, x, errors[i].rank, errors[i].dims)));
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, errors[i].message);
    tj_graph_destroy(g);
  }
  g = new_graph();
  b = tj_graph_symbol(g, "B");
  x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 6), "x");
  CHECK(tj_value_is_none(tj_graph_reshape(g, x, 2, DIMS(6, 4))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "element count differs: 6*B vs 24");
  tj_graph_destroy(g);
}

TEST(transpose) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_I8, 3, DIMS(b, 4, 5), "x");
  tj_value_t t = tj_graph_transpose(g, x, AXES(2, -3, 1));
  CHECK_STREQ("i8[5,B,4]", type_of(g, t));
  CHECK_EQ_INT(3, node_of(g, t)->attrs.num_ints);
  CHECK_EQ_INT(0, node_of(g, t)->attrs.ints[1]);  // -3 normalized
  CHECK(tj_value_is_none(tj_graph_transpose(g, x, AXES(0, 1, 1))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "transpose (node %2): perm repeats axis 1");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_I8, 2, DIMS(2, 3), "x");
  CHECK(tj_value_is_none(tj_graph_transpose(g, x, AXES(0, 2))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "axis 2 is out of range");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_I8, 2, DIMS(2, 3), "x");
  CHECK(tj_value_is_none(tj_graph_transpose(g, x, NULL)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "perm is NULL");
  tj_graph_destroy(g);
}

TEST(broadcast_to) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(1, 3), "x");
  tj_value_t y = in(g, TJ_DTYPE_F32, 1, DIMS(b), "y");
  CHECK_STREQ("f32[B,4,3]",
              type_of(g, tj_graph_broadcast_to(g, x, 3, DIMS(b, 4, 3))));
  CHECK_EQ_INT(0, g->num_guards);
  CHECK_STREQ("f32[2,C]",
              type_of(g, tj_graph_broadcast_to(g, y, 2, DIMS(2, c))));
  CHECK_EQ_INT(1, g->num_guards);
  CHECK(tj_value_is_none(tj_graph_broadcast_to(g, x, 2, DIMS(2, 4))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "broadcast_to (node %4): cannot broadcast dim 1 (3) to 4");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 2, DIMS(1, 3), "x");
  CHECK(tj_value_is_none(tj_graph_broadcast_to(g, x, 1, DIMS(3))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "cannot broadcast rank 2 to rank 1");
  tj_graph_destroy(g);
}

TEST(slice) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 10), "x");
  tj_value_t s =
      tj_graph_slice(g, x, DIMS(0, -3), DIMS(INT64_MAX, INT64_MAX), NULL);
  CHECK_STREQ("f32[B,3]", type_of(g, s));
  const int64_t* ints = node_of(g, s)->attrs.ints;
  CHECK_EQ_INT(6, node_of(g, s)->attrs.num_ints);
  CHECK_EQ_INT(0, ints[0]);
  CHECK_EQ_INT(7, ints[1]);          // -3 -> 7
  CHECK_EQ_INT(INT64_MAX, ints[2]);  // the whole symbolic axis
  CHECK_EQ_INT(10, ints[3]);         // clamped
  CHECK_EQ_INT(1, ints[4]);
  CHECK_EQ_INT(1, ints[5]);
  // numpy: x[:, 0:10:3] has 4, x[:, 8:2] 0, x[:, -100:2] 2, x[:, 1:-1:4] 2.
  CHECK_STREQ("f32[B,4]",
              type_of(g, tj_graph_slice(g, x, DIMS(INT64_MIN, 0),
                                        DIMS(INT64_MAX, 10), DIMS(1, 3))));
  CHECK_STREQ("f32[B,0]", type_of(g, tj_graph_slice(g, x, DIMS(0, 8),
                                                    DIMS(INT64_MAX, 2), NULL)));
  CHECK_STREQ("f32[B,2]", type_of(g, tj_graph_slice(g, x, DIMS(0, -100),
                                                    DIMS(INT64_MAX, 2), NULL)));
  CHECK_STREQ("f32[B,2]",
              type_of(g, tj_graph_slice(g, x, DIMS(0, 1), DIMS(INT64_MAX, -1),
                                        DIMS(1, 4))));
  CHECK_STREQ("f32[B,1]", type_of(g, tj_graph_slice(g, x, DIMS(0, 0),
                                                    DIMS(INT64_MAX, INT64_MAX),
                                                    DIMS(1, INT64_MAX))));
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(
      tj_graph_slice(g, x, DIMS(0, 0), DIMS(INT64_MAX, 5), DIMS(1, 0))));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "slice (node %7): step 0 on axis 1 must be > 0");
  tj_graph_destroy(g);

  g = new_graph();
  b = tj_graph_symbol(g, "B");
  x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 10), "x");
  CHECK(tj_value_is_none(
      tj_graph_slice(g, x, DIMS(1, 0), DIMS(INT64_MAX, 10), NULL)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_UNSUPPORTED,
                    "slice (node %1): axis 0 has symbolic size B and can only "
                    "be sliced whole");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  CHECK(tj_value_is_none(tj_graph_slice(g, x, NULL, DIMS(1), NULL)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "starts and stops");
  tj_graph_destroy(g);
}

TEST(concat) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  tj_value_t xb = in(g, TJ_DTYPE_F32, 2, DIMS(b, 4), "xb");
  tj_value_t xc = in(g, TJ_DTYPE_F32, 2, DIMS(c, 4), "xc");
  tj_value_t x5 = in(g, TJ_DTYPE_F32, 2, DIMS(b, 5), "x5");
  tj_value_t c1 = tj_graph_concat(g, 3, (tj_value_t[]){xb, xc, xb}, 0);
  CHECK_STREQ("f32[2*B+C,4]", type_of(g, c1));
  CHECK_EQ_INT(3, node_of(g, c1)->num_operands);
  CHECK_STREQ("f32[B,9]",
              type_of(g, tj_graph_concat(g, 2, (tj_value_t[]){xb, x5}, -1)));
  CHECK_EQ_INT(1, node_of(g, tj_graph_concat(g, 1, &xb, 1))->attrs.axis);
  CHECK_EQ_INT(0, g->num_guards);
  // Non-axis B vs C: guarded.
  CHECK_STREQ("f32[B,8]",
              type_of(g, tj_graph_concat(g, 2, (tj_value_t[]){xb, xc}, 1)));
  CHECK_EQ_INT(1, g->num_guards);
  // Many operands (more than the builder's stack buffer).
  tj_value_t many[40];
  for (int i = 0; i < 40; ++i) many[i] = xb;
  CHECK_STREQ("f32[40*B,4]", type_of(g, tj_graph_concat(g, 40, many, 0)));
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(tj_graph_concat(g, 2, (tj_value_t[]){xb, x5}, 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "concat (node %8): dim 1 differs: 4 vs 5 (operand 1); "
                    "operands f32[B,4], f32[B,5]");
  tj_graph_destroy(g);

  const char* messages[] = {
      "needs at least one operand", "dtype mismatch f32 vs i32 (operand 1)",
      "rank mismatch 1 vs 2 (operand 1)", "axis 1 is out of range for rank 1",
      "operands must have rank >= 1"};
  for (int i = 0; i < 5; ++i) {
    g = new_graph();
    tj_value_t a = in(g, TJ_DTYPE_F32, 1, DIMS(3), "a");
    tj_value_t ai = in(g, TJ_DTYPE_I32, 1, DIMS(3), "ai");
    tj_value_t a2 = in(g, TJ_DTYPE_F32, 2, DIMS(3, 3), "a2");
    tj_value_t s = in(g, TJ_DTYPE_F32, 0, NULL, "s");
    tj_value_t r = i == 0   ? tj_graph_concat(g, 0, NULL, 0)
                   : i == 1 ? tj_graph_concat(g, 2, (tj_value_t[]){a, ai}, 0)
                   : i == 2 ? tj_graph_concat(g, 2, (tj_value_t[]){a, a2}, 0)
                   : i == 3 ? tj_graph_concat(g, 1, &a, 1)
                            : tj_graph_concat(g, 1, &s, 0);
    CHECK(tj_value_is_none(r));
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, messages[i]);
    tj_graph_destroy(g);
  }
}

TEST(pad_and_gather) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 4), "x");
  tj_value_t p = tj_graph_pad(g, x, DIMS(1, 0), DIMS(2, 3), -1.5);
  CHECK_STREQ("f32[B+3,7]", type_of(g, p));
  CHECK(node_of(g, p)->attrs.value == -1.5);
  CHECK_EQ_INT(4, node_of(g, p)->attrs.num_ints);
  CHECK_EQ_INT(3, node_of(g, p)->attrs.ints[3]);
  tj_value_t table = in(g, TJ_DTYPE_F16, 2, DIMS(1000, 64), "table");
  tj_value_t ids = in(g, TJ_DTYPE_I32, 2, DIMS(b, 7), "ids");
  tj_value_t ids64 = in(g, TJ_DTYPE_I64, 0, NULL, "ids64");
  CHECK_STREQ("f16[B,7,64]", type_of(g, tj_graph_gather(g, table, ids, 0)));
  CHECK_STREQ("f16[1000,B,7]", type_of(g, tj_graph_gather(g, table, ids, -1)));
  CHECK_STREQ("f16[64]", type_of(g, tj_graph_gather(g, table, ids64, 0)));
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(tj_graph_pad(g, x, DIMS(0, -1), DIMS(0, 0), 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "pad (node %8): padding of axis 1 is -1, 0; must be >= 0");
  tj_graph_destroy(g);
  g = new_graph();
  table = in(g, TJ_DTYPE_F16, 2, DIMS(1000, 64), "table");
  tj_value_t bad = in(g, TJ_DTYPE_F32, 1, DIMS(3), "bad");
  CHECK(tj_value_is_none(tj_graph_gather(g, table, bad, 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "gather (node %2): indices must be i32 or i64, got f32");
  tj_graph_destroy(g);
  g = new_graph();
  table = in(g, TJ_DTYPE_F16, 5, DIMS(2, 2, 2, 2, 2), "table");
  ids = in(g, TJ_DTYPE_I64, 5, DIMS(1, 1, 1, 1, 1), "ids");
  CHECK(tj_value_is_none(tj_graph_gather(g, table, ids, 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "result rank 9 exceeds 8");
  tj_graph_destroy(g);
}

//===--- composites ---===//

TEST(composites) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t n = tj_graph_symbol(g, "N");
  tj_value_t x = in(g, TJ_DTYPE_F32, 3, DIMS(b, 8, 64), "x");
  tj_value_t gamma = in(g, TJ_DTYPE_F32, 1, DIMS(64), "gamma");
  tj_value_t beta = in(g, TJ_DTYPE_F32, 1, DIMS(64), "beta");
  tj_value_t gn = in(g, TJ_DTYPE_F32, 1, DIMS(n), "gn");
  tj_value_t none = tj_value_none();
  tj_value_t ge = tj_graph_gelu(g, x, true);
  CHECK_STREQ("f32[B,8,64]", type_of(g, ge));
  CHECK(node_of(g, ge)->attrs.approximate);
  CHECK(!node_of(g, tj_graph_gelu(g, x, false))->attrs.approximate);
  tj_value_t sm = tj_graph_softmax(g, x, -1);
  CHECK_STREQ("f32[B,8,64]", type_of(g, sm));
  CHECK_EQ_INT(2, node_of(g, sm)->attrs.axis);
  CHECK_EQ_INT(0, node_of(g, tj_graph_log_softmax(g, x, 0))->attrs.axis);
  tj_value_t ln = tj_graph_layer_norm(g, x, gamma, beta, 1e-5);
  CHECK_STREQ("f32[B,8,64]", type_of(g, ln));
  CHECK(node_of(g, ln)->attrs.value == 1e-5);
  CHECK_EQ_INT(
      TJ_NODE_NONE,
      node_of(g, tj_graph_layer_norm(g, x, none, none, 0))->operands[1]);
  CHECK_STREQ("f32[B,8,64]", type_of(g, tj_graph_rms_norm(g, x, gamma, 1e-6)));
  CHECK_STREQ("f32[B,8,64]", type_of(g, tj_graph_rms_norm(g, x, none, 1e-6)));
  CHECK_EQ_INT(0, g->num_guards);
  CHECK_STREQ("f32[B,8,64]", type_of(g, tj_graph_rms_norm(g, x, gn, 1e-6)));
  CHECK_EQ_INT(1, g->num_guards);  // N == 64
  tj_value_t w = in(g, TJ_DTYPE_F32, 2, DIMS(64, 32), "w");
  tj_value_t bias = in(g, TJ_DTYPE_F32, 1, DIMS(32), "bias");
  tj_value_t v = in(g, TJ_DTYPE_F32, 1, DIMS(64), "v");
  CHECK_STREQ("f32[B,8,32]", type_of(g, tj_graph_linear(g, x, w, bias)));
  CHECK_STREQ("f32[B,8,32]", type_of(g, tj_graph_linear(g, x, w, none)));
  CHECK_STREQ("f32[32]", type_of(g, tj_graph_linear(g, v, w, bias)));
  CHECK_NO_ERROR(g);
  tj_graph_destroy(g);

  const char* messages[] = {
      "layer_norm (node %6): eps -1 must be finite and >= 0",
      "rms_norm (node %6): eps nan must be finite",
      "layer_norm (node %6): gamma must have shape [64], got [32]",
      "layer_norm (node %6): beta must have shape [64], got rank 2",
      "rms_norm (node %6): dtype mismatch f32 vs f16 (gamma)",
      "linear (node %6): w must have rank 2",
      "linear (node %6): b must have shape [32], got [64]",
      "linear (node %6): inner dims differ: 32 vs 64",
      "softmax (node %6): axis 3 is out of range for rank 3",
      "gelu (node %6): needs a float dtype, got i32",
      "layer_norm (node %6): operand 0 is none",
  };
  for (int i = 0; i < (int)TJ_ARRAY_SIZE(messages); ++i) {
    g = new_graph();
    x = in(g, TJ_DTYPE_F32, 3, DIMS(2, 8, 64), "x");
    tj_value_t g32 = in(g, TJ_DTYPE_F32, 1, DIMS(32), "g32");
    tj_value_t m = in(g, TJ_DTYPE_F32, 2, DIMS(64, 32), "m");
    tj_value_t h = in(g, TJ_DTYPE_F16, 1, DIMS(64), "h");
    tj_value_t xi = in(g, TJ_DTYPE_I32, 1, DIMS(64), "xi");
    tj_value_t b64 = in(g, TJ_DTYPE_F32, 1, DIMS(64), "b64");
    tj_value_t r;
    switch (i) {
      case 0:
        r = tj_graph_layer_norm(g, x, none, none, -1);
        break;
      case 1:
        r = tj_graph_rms_norm(g, x, none, NAN);
        break;
      case 2:
        r = tj_graph_layer_norm(g, x, g32, none, 0);
        break;
      case 3:
        r = tj_graph_layer_norm(g, x, none, m, 0);
        break;
      case 4:
        r = tj_graph_rms_norm(g, x, h, 0);
        break;
      case 5:
        r = tj_graph_linear(g, x, x, none);
        break;
      case 6:
        r = tj_graph_linear(g, x, m, b64);
        break;
      case 7:
        r = tj_graph_linear(g, m, m, none);
        break;
      case 8:
        r = tj_graph_softmax(g, x, 3);
        break;
      case 9:
        r = tj_graph_gelu(g, xi, false);
        break;
      default:
        r = tj_graph_layer_norm(g, none, g32, g32, 0);
        break;
    }
    CHECK(tj_value_is_none(r));
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, messages[i]);
    tj_graph_destroy(g);
  }
}

//===--- leaves ---===//

TEST(leaves) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  float data[6] = {1, 2, 3, 4, 5, 6};
  tj_value_t c =
      tj_graph_constant(g, TJ_DTYPE_F32, 2, DIMS(2, 3), data, sizeof(data));
  tj_value_t cb = tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, DIMS(6), data,
                                             sizeof(data));
  data[0] = 100;  // the copy must not see this; the borrowed one must
  CHECK_STREQ("f32[2,3]", type_of(g, c));
  const float* copied = node_of(g, c)->attrs.data;
  CHECK(copied != data);
  CHECK(copied[0] == 1 && copied[5] == 6);
  CHECK(!node_of(g, c)->attrs.borrowed);
  CHECK(node_of(g, cb)->attrs.data == data);
  CHECK(node_of(g, cb)->attrs.borrowed);
  tj_value_t s = tj_graph_scalar(g, TJ_DTYPE_F16, 3.5);
  CHECK_STREQ("f16[]", type_of(g, s));
  CHECK(tj_load_f64(TJ_DTYPE_F16, node_of(g, s)->attrs.data, 0) == 3.5);
  tj_value_t si = tj_graph_scalar(g, TJ_DTYPE_I64, -7);
  CHECK_EQ_INT(-7, tj_load_i64(TJ_DTYPE_I64, node_of(g, si)->attrs.data, 0));
  tj_value_t empty = tj_graph_constant(g, TJ_DTYPE_I32, 1, DIMS(0), NULL, 0);
  CHECK_STREQ("i32[0]", type_of(g, empty));
  tj_value_t f = tj_graph_full(g, TJ_DTYPE_BOOL, 2, DIMS(b, 2), 1.0);
  CHECK_STREQ("bool[B,2]", type_of(g, f));
  CHECK(node_of(g, f)->attrs.value == 1.0);
  tj_value_t io = tj_graph_iota(g, TJ_DTYPE_I32, 2, DIMS(b, 5), -1);
  CHECK_STREQ("i32[B,5]", type_of(g, io));
  CHECK_EQ_INT(1, node_of(g, io)->attrs.axis);
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(
      tj_graph_constant(g, TJ_DTYPE_F32, 1, DIMS(b), data, 4)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "constant (node %7): dim 0 is B; constants need constant "
                    "dims");
  tj_graph_destroy(g);

  g = new_graph();
  CHECK(tj_value_is_none(
      tj_graph_constant(g, TJ_DTYPE_F32, 1, DIMS(2), NULL, 8)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "constant (node %0): data is NULL for 8 bytes");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(tj_graph_iota(g, TJ_DTYPE_BOOL, 1, DIMS(2), 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "iota (node %0): needs a numeric dtype, got bool");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(tj_graph_iota(g, TJ_DTYPE_I32, 0, NULL, 0)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "axis 0 is out of range for rank 0");
  tj_graph_destroy(g);
}

TEST(tensor_size_limits) {
  const int64_t huge = (int64_t)1 << 40;
  tj_graph_t* g = new_graph();
  // 2^47 bytes of i8 fit, 2^49 bytes of f32 do not; an empty tensor fits
  // when its non-zero dims do (the size rule of tj_graph.h).
  CHECK(!tj_value_is_none(in(g, TJ_DTYPE_I8, 1, DIMS((int64_t)1 << 47), "a")));
  CHECK(!tj_value_is_none(in(
      g, TJ_DTYPE_F32, 3, DIMS((int64_t)1 << 20, (int64_t)1 << 20, 0), "z")));
  CHECK_NO_ERROR(g);
  CHECK(tj_value_is_none(in(g, TJ_DTYPE_F32, 1, DIMS((int64_t)1 << 47), "b")));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "input (node %2): tensor size overflows: "
                    "f32[140737488355328] is more than 2^48 bytes");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(in(g, TJ_DTYPE_F32, 3, DIMS(huge, huge, 0), "e")));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "f32[1099511627776,1099511627776,0] is more than 2^48 "
                    "bytes without its zero dims");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(in(g, TJ_DTYPE_F64, 3, DIMS(huge, huge, huge), "c")));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "tensor size overflows");
  tj_graph_destroy(g);
  // A result can overflow even when its operands fit.
  g = new_graph();
  tj_value_t col = in(g, TJ_DTYPE_F32, 2, DIMS((int64_t)1 << 24, 1), "col");
  tj_value_t row = in(g, TJ_DTYPE_F32, 1, DIMS((int64_t)1 << 24), "row");
  CHECK(tj_value_is_none(tj_graph_add(g, col, row)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "add (node %2): tensor size overflows");
  tj_graph_destroy(g);
}

//===--- error discipline ---===//

TEST(sticky_first_error) {
  tj_graph_t* g = new_graph();
  tj_value_t x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_value_t i = in(g, TJ_DTYPE_I32, 1, DIMS(4), "i");
  tj_value_t e = tj_graph_exp(g, i);  // first error
  CHECK(tj_value_is_none(e));
  uint32_t nodes = g->num_nodes;
  // Later calls do nothing, even valid ones, and keep the first error.
  CHECK(tj_value_is_none(tj_graph_neg(g, x)));
  CHECK(tj_value_is_none(tj_graph_add(g, x, i)));
  CHECK(tj_value_is_none(tj_graph_relu(g, e)));
  CHECK(tj_value_is_none(in(g, TJ_DTYPE_F32, 1, DIMS(4), "late")));
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_symbol(g, "S"));
  tj_graph_output(g, x, "y");
  CHECK_EQ_INT(nodes, g->num_nodes);
  CHECK_EQ_INT(0, tj_graph_num_outputs(g));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "exp (node %2): needs a float dtype, got i32");
  // finalize returns a copy each time; the error stays recorded.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "exp (node %2)",
               tj_graph_finalize(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "exp (node %2)",
               tj_graph_finalize(g));
  CHECK(!g->finalized);
  tj_graph_destroy(g);
}

TEST(none_and_foreign_operands) {
  tj_graph_t* g = new_graph();
  tj_value_t x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  CHECK(tj_value_is_none(tj_graph_add(g, x, tj_value_none())));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "add (node %1): operand 1 is none; operands f32[4], none");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_value_t foreign = {42};
  CHECK(tj_value_is_none(tj_graph_mul(g, foreign, x)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "mul (node %1): operand 0 (value id 42) is not an earlier "
                    "value of this graph; operands ?, f32[4]");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_graph_output(g, tj_value_none(), "y");
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "output \"y\": the value is none");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_graph_output(g, foreign, "y");
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "output \"y\": node %41 is not in this graph");
  tj_graph_destroy(g);
}

TEST(outputs_and_finalize) {
  tj_graph_t* g = new_graph();
  tj_value_t x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph @test has no outputs",
               tj_graph_finalize(g));
  CHECK_NO_ERROR(g);  // not a builder error: fixable by adding an output
  tj_value_t y = tj_graph_relu(g, x);
  tj_graph_output(g, y, "y");
  tj_graph_output(g, x, "x_again");
  CHECK_EQ_INT(2, tj_graph_num_outputs(g));
  CHECK_EQ_INT(y.id, tj_graph_output_value(g, 0).id);
  CHECK_STREQ("x_again", tj_graph_output_name(g, 1));
  CHECK(tj_graph_output_name(g, 2) == NULL);
  CHECK(tj_value_is_none(tj_graph_output_value(g, -1)));
  CHECK_OK(tj_graph_finalize(g));
  CHECK(g->finalized);
  CHECK_OK(tj_graph_finalize(g));  // again: NULL
  // A finalized graph takes nothing more: the first call after finalize
  // records a sticky error naming itself (a wrapper that gets the none
  // value must find why), and later calls add nothing.
  CHECK(tj_value_is_none(tj_graph_neg(g, x)));
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "tj_graph_neg: graph @test is finalized");
  tj_graph_output(g, x, "z");
  CHECK_EQ_INT(2, tj_graph_num_outputs(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_graph_neg",
               tj_graph_finalize(g));
  CHECK_EQ_INT(TJ_DIM_INVALID, tj_graph_symbol(g, "NEW"));
  tj_graph_destroy(g);
  // Each kind of call names itself: outputs, symbols, dims, and ops with
  // attributes.
  static const char* const calls[] = {"tj_graph_output", "tj_graph_symbol",
                                      "tj_graph_dim_add", "tj_graph_reshape",
                                      "tj_graph_add"};
  for (size_t c = 0; c < TJ_ARRAY_SIZE(calls); ++c) {
    g = new_graph();
    int64_t B = tj_graph_symbol(g, "B");
    x = in(g, TJ_DTYPE_F32, 2, DIMS(B, 4), "x");
    tj_graph_output(g, x, "y");
    CHECK_OK(tj_graph_finalize(g));
    CHECK_EQ_INT(B, tj_graph_symbol(g, "B"));  // a lookup stays allowed
    CHECK_NO_ERROR(g);
    switch (c) {
      case 0:
        tj_graph_output(g, x, "z");
        break;
      case 1:
        tj_graph_symbol(g, "NEW");
        break;
      case 2:
        tj_graph_dim_add(g, B, B);
        break;
      case 3:
        tj_graph_reshape(g, x, 1, DIMS(-1));
        break;
      default:
        tj_graph_add(g, x, x);
        break;
    }
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, calls[c]);
    CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "is finalized");
    tj_graph_destroy(g);
  }

  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_graph_output(g, x, "y");
  tj_graph_output(g, x, "y");
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "output \"y\": name is already used by output 0");
  tj_graph_destroy(g);
  g = new_graph();
  x = in(g, TJ_DTYPE_F32, 1, DIMS(4), "x");
  tj_graph_output(g, x, "y-1");
  CHECK_GRAPH_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "output \"y-1\": name is not a C identifier");
  tj_graph_destroy(g);
}

//===--- the capstone and run-time shapes ---===//

// y = gelu(linear(x, w, b), approximate) with x: f32[B,1024].
static tj_status_t build_capstone(tj_context_t* ctx, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  *out = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(ctx, "block", &g));
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, DIMS(1024, 4096), "w");
  tj_value_t bias = tj_graph_input(g, TJ_DTYPE_F32, 1, DIMS(4096), "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, bias), true),
                  "y");
  tj_status_t status = tj_graph_finalize(g);
  if (status) {
    tj_graph_destroy(g);
    return status;
  }
  *out = g;
  return NULL;
}

TEST(capstone) {
  tj_graph_t* g = NULL;
  CHECK_OK(build_capstone(g_ctx, &g));
  if (!g) return;
  CHECK(g->finalized);
  tj_value_t y = tj_graph_output_value(g, 0);
  CHECK_STREQ("f32[B,4096]", type_of(g, y));
  CHECK_EQ_INT(TJ_OP_GELU, node_of(g, y)->op);
  CHECK_EQ_INT(TJ_OP_LINEAR, g->nodes[node_of(g, y)->operands[0]].op);
  CHECK_EQ_INT(0, g->num_guards);
  CHECK_OK(tj_ir_verify(g));
  static float xs[8 * 1024];
  static float ws[1024 * 4096];
  static float bs[4096];
  int64_t xshape[2] = {8, 1024}, wshape[2] = {1024, 4096}, bshape[1] = {4096};
  tj_tensor_t inputs[3] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape),
                           tj_tensor_make(ws, TJ_DTYPE_F32, 2, wshape),
                           tj_tensor_make(bs, TJ_DTYPE_F32, 1, bshape)};
  int32_t rank = -1;
  int64_t dims[TJ_MAX_RANK];
  CHECK_OK(tj_graph_output_shape(g, inputs, 3, 0, &rank, dims));
  CHECK_EQ_INT(2, rank);
  CHECK_EQ_INT(8, dims[0]);
  CHECK_EQ_INT(4096, dims[1]);
  // A size-0 batch is legal.
  xshape[0] = 0;
  CHECK_OK(tj_graph_output_shape(g, inputs, 3, 0, &rank, dims));
  CHECK_EQ_INT(0, dims[0]);
  tj_graph_destroy(g);
}

TEST(bind_symbols_errors) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  int64_t b2 = tj_graph_dim_mul(g, b, 2);
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 1024), "x");
  tj_value_t t = in(g, TJ_DTYPE_F32, 2, DIMS(b, 4096), "t");
  tj_value_t u = in(g, TJ_DTYPE_F32, 1, DIMS(c), "u");
  tj_value_t e = in(g, TJ_DTYPE_I32, 1, DIMS(b2), "e");
  tj_graph_output(g, tj_graph_add(g, tj_graph_sum(g, x, 1, AXES(1), false), u),
                  "y");
  tj_graph_output(g, e, "e_out");
  tj_graph_output(g, t, "t_out");
  CHECK_EQ_INT(1, g->num_guards);  // B == C
  int64_t values[TJ_MAX_SYMBOLS];
  static float data[64];
  int64_t xs[2] = {4, 1024}, ts[2] = {4, 4096}, us[1] = {4}, es[1] = {8};
  tj_tensor_t inputs[4] = {tj_tensor_make(data, TJ_DTYPE_F32, 2, xs),
                           tj_tensor_make(data, TJ_DTYPE_F32, 2, ts),
                           tj_tensor_make(data, TJ_DTYPE_F32, 1, us),
                           tj_tensor_make(data, TJ_DTYPE_I32, 1, es)};
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not finalized",
               tj_graph_output_shape(g, inputs, 4, 0, &rank, dims));
  CHECK_OK(tj_graph_finalize(g));
  CHECK_OK(tj_ir_bind_symbols(g, inputs, 4, values));
  CHECK_EQ_INT(4, values[0]);
  CHECK_EQ_INT(4, values[1]);
  CHECK_EQ_INT(-1, values[2]);
  CHECK_OK(tj_graph_output_shape(g, inputs, 4, 0, &rank, dims));
  CHECK_EQ_INT(1, rank);
  CHECK_EQ_INT(4, dims[0]);
  CHECK_OK(tj_graph_output_shape(g, inputs, 4, 1, &rank, dims));
  CHECK_EQ_INT(8, dims[0]);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "index 3 is out of range",
               tj_graph_output_shape(g, inputs, 4, 3, &rank, dims));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "takes 4 inputs, got 3",
               tj_ir_bind_symbols(g, inputs, 3, values));

  xs[1] = 512;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"x\" dim 1 is 512 but the graph says 1024",
               tj_ir_bind_symbols(g, inputs, 4, values));
  xs[1] = 1024;
  ts[0] = 5;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"t\" dim 0 is 5 but the graph says B, which input \"x\" "
               "dim 0 set to 4",
               tj_ir_bind_symbols(g, inputs, 4, values));
  ts[0] = 4;
  us[0] = 3;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "guard B == C failed: B is 4 but C is 3 (required by add, "
               "node %5)",
               tj_ir_bind_symbols(g, inputs, 4, values));
  us[0] = 4;
  es[0] = 7;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"e\" dim 0 is 7 but the graph says 2*B = 8",
               tj_ir_bind_symbols(g, inputs, 4, values));
  es[0] = 8;
  inputs[3].dtype = TJ_DTYPE_I64;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"e\" is i64 but the graph says i32",
               tj_ir_bind_symbols(g, inputs, 4, values));
  inputs[3].dtype = TJ_DTYPE_I32;
  inputs[2].rank = 2;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"u\" has rank 2 but the graph says 1",
               tj_ir_bind_symbols(g, inputs, 4, values));
  inputs[2].rank = 1;
  inputs[1].data = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"t\": data is NULL for 16384 elements",
               tj_ir_bind_symbols(g, inputs, 4, values));
  inputs[1].data = data;
  inputs[0].device_type = (tj_device_type_t)7;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"x\": device type 7 is neither CPU nor CUDA",
               tj_ir_bind_symbols(g, inputs, 4, values));
  inputs[0].device_type = TJ_DEVICE_CUDA;
  CHECK_OK(tj_ir_bind_symbols(g, inputs, 4, values));
  xs[0] = -2;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"x\" dim 0 is -2; sizes must be >= 0",
               tj_ir_bind_symbols(g, inputs, 4, values));
  tj_graph_destroy(g);

  // A symbol only inside an expression cannot be bound; one only in a
  // non-input node is unbound too.
  g = new_graph();
  b = tj_graph_symbol(g, "B");
  c = tj_graph_symbol(g, "C");
  x = in(g, TJ_DTYPE_F32, 1, DIMS(tj_graph_dim_add(g, b, 1)), "x");
  tj_graph_output(g, x, "y");
  CHECK_OK(tj_graph_finalize(g));
  int64_t one[1] = {5};
  tj_tensor_t single = tj_tensor_make(data, TJ_DTYPE_F32, 1, one);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "input \"x\" dim 0 (B+1): symbol B is unbound",
               tj_ir_bind_symbols(g, &single, 1, values));
  tj_graph_destroy(g);
  g = new_graph();
  c = tj_graph_symbol(g, "C");
  tj_graph_output(g, tj_graph_full(g, TJ_DTYPE_F32, 1, &c, 0.0), "y");
  CHECK_OK(tj_graph_finalize(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "full (node %0) dim 0: symbol C is unbound",
               tj_ir_bind_symbols(g, NULL, 0, values));
  tj_graph_destroy(g);
  // A binding that makes some node too large.
  g = new_graph();
  b = tj_graph_symbol(g, "B");
  x = in(g, TJ_DTYPE_F32, 1, &b, "x");
  tj_graph_output(g,
                  tj_graph_matmul(g, tj_graph_reshape(g, x, 2, DIMS(b, 1)),
                                  tj_graph_reshape(g, x, 2, DIMS(1, b))),
                  "outer");
  CHECK_OK(tj_graph_finalize(g));
  one[0] = (int64_t)1 << 24;
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT,
      "matmul (node %3): tensor size overflows: f32[16777216,16777216]",
      tj_ir_bind_symbols(g, &single, 1, values));
  tj_graph_destroy(g);
}

//===--- the verifier ---===//

TEST(verify_catches_corruption) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  tj_value_t x = in(g, TJ_DTYPE_F32, 3, DIMS(b, 4, 5), "x");
  tj_value_t u = in(g, TJ_DTYPE_F32, 1, DIMS(c), "u");
  tj_value_t s = tj_graph_sum(g, x, 2, AXES(0, 2), false);
  tj_value_t a = tj_graph_add(g, tj_graph_exp(g, x), u);  // guard C == 5
  tj_graph_output(g, s, "s");
  tj_graph_output(g, a, "a");
  CHECK_OK(tj_ir_verify(g));
  tj_node_t* sn = &g->nodes[s.id - 1];
  sn->dtype = TJ_DTYPE_F16;
  CHECK_STATUS(TJ_STATUS_INTERNAL,
               "verify: node %2 (sum) has type f16[4] but inference gives "
               "f32[4]",
               tj_ir_verify(g));
  sn->dtype = TJ_DTYPE_F32;
  sn->attrs.ints[0] = 2;
  sn->attrs.ints[1] = 0;  // unsorted axes
  CHECK_STATUS(TJ_STATUS_INTERNAL, "not in normalized form", tj_ir_verify(g));
  sn->attrs.ints[0] = 0;
  sn->attrs.ints[1] = 2;
  sn->operands[0] = s.id - 1;  // uses itself
  CHECK_STATUS(TJ_STATUS_INTERNAL,
               "verify: sum (node %2): operand 0 (value id 3) is not an "
               "earlier value",
               tj_ir_verify(g));
  sn->operands[0] = x.id - 1;
  g->num_guards = 0;
  CHECK_STATUS(TJ_STATUS_INTERNAL,
               "add (node %4): needs the guard 5 == C, which is not recorded",
               tj_ir_verify(g));
  g->num_guards = 1;
  g->outputs[1].node = 99;
  CHECK_STATUS(TJ_STATUS_INTERNAL, "output 1 does not name a node",
               tj_ir_verify(g));
  g->outputs[1].node = a.id - 1;
  g->num_inputs = 1;
  CHECK_STATUS(TJ_STATUS_INTERNAL, "2 input nodes but 1 inputs listed",
               tj_ir_verify(g));
  g->num_inputs = 2;
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_destroy(g);
}

// Every builder op in one graph: the verifier re-infers all of them.
TEST(verify_every_op) {
  tj_graph_t* g = new_graph();
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = in(g, TJ_DTYPE_F32, 2, DIMS(b, 8), "x");
  tj_value_t ix = in(g, TJ_DTYPE_I64, 1, DIMS(3), "ix");
  tj_value_t w = in(g, TJ_DTYPE_F32, 2, DIMS(8, 4), "w");
  tj_value_t bias = in(g, TJ_DTYPE_F32, 1, DIMS(4), "bias");
  unary_fn unaries[] = {tj_graph_neg,  tj_graph_abs,     tj_graph_exp,
                        tj_graph_log,  tj_graph_sqrt,    tj_graph_rsqrt,
                        tj_graph_tanh, tj_graph_sigmoid, tj_graph_erf,
                        tj_graph_sin,  tj_graph_cos,     tj_graph_floor,
                        tj_graph_ceil, tj_graph_round,   tj_graph_relu,
                        tj_graph_sign, tj_graph_silu,    tj_graph_erfc};
  tj_value_t acc = x;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(unaries); ++i)
    acc = tj_graph_add(g, acc, unaries[i](g, x));
  binary_fn binaries[] = {tj_graph_sub, tj_graph_mul,     tj_graph_div,
                          tj_graph_pow, tj_graph_maximum, tj_graph_minimum};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(binaries); ++i)
    acc = binaries[i](g, acc, x);
  binary_fn compares[] = {tj_graph_eq, tj_graph_ne, tj_graph_lt,
                          tj_graph_le, tj_graph_gt, tj_graph_ge};
  tj_value_t mask = tj_graph_isnan(g, acc);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(compares); ++i)
    mask = tj_graph_logical_or(g, mask, compares[i](g, acc, x));
  mask = tj_graph_logical_and(g, tj_graph_logical_not(g, mask), mask);
  acc = tj_graph_where(g, mask, acc, tj_graph_scalar(g, TJ_DTYPE_F32, 0));
  acc = tj_graph_add(
      g, acc,
      tj_graph_cast(g, tj_graph_iota(g, TJ_DTYPE_I32, 2, DIMS(b, 8), 1),
                    TJ_DTYPE_F32));
  acc = tj_graph_mul(g, acc, tj_graph_full(g, TJ_DTYPE_F32, 1, DIMS(8), 2.0));
  tj_value_t red = tj_graph_sum(g, acc, 1, AXES(-1), true);
  red = tj_graph_add(g, red, tj_graph_mean(g, acc, 1, AXES(1), true));
  red = tj_graph_add(g, red, tj_graph_max(g, acc, 1, AXES(1), true));
  red = tj_graph_add(g, red, tj_graph_min(g, acc, 1, AXES(1), true));
  red = tj_graph_add(g, red, tj_graph_prod(g, acc, 1, AXES(1), true));
  tj_value_t am = tj_graph_argmax(g, acc, 1, false);
  tj_value_t lin = tj_graph_linear(g, acc, w, bias);
  lin = tj_graph_add(g, lin, tj_graph_matmul(g, acc, w));
  tj_value_t r = tj_graph_reshape(g, lin, 3, DIMS(b, 2, TJ_DIM_INFER));
  r = tj_graph_transpose(g, r, AXES(0, 2, 1));
  r = tj_graph_broadcast_to(g, r, 4, DIMS(3, b, 2, 2));
  r = tj_graph_slice(g, r, DIMS(1, 0, 0, -1), DIMS(3, INT64_MAX, 2, 2),
                     DIMS(1, 1, 2, 1));
  r = tj_graph_concat(g, 2, (tj_value_t[]){r, r}, 2);
  r = tj_graph_pad(g, r, DIMS(0, 0, 1, 0), DIMS(0, 0, 1, 2), 0);
  tj_value_t gathered = tj_graph_gather(g, x, ix, 1);
  tj_value_t comp = tj_graph_gelu(g, x, false);
  comp = tj_graph_softmax(g, comp, -1);
  comp = tj_graph_log_softmax(g, comp, 0);
  comp = tj_graph_layer_norm(g, comp, tj_value_none(), tj_value_none(), 1e-5);
  comp = tj_graph_rms_norm(g, comp, tj_value_none(), 1e-6);
  float cdata[4] = {1, 2, 3, 4};
  tj_value_t k =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, DIMS(4), cdata, sizeof(cdata));
  tj_value_t kb = tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, DIMS(4), cdata,
                                             sizeof(cdata));
  tj_graph_output(g, red, "red");
  tj_graph_output(g, am, "am");
  tj_graph_output(g, r, "r");
  tj_graph_output(g, gathered, "gathered");
  tj_graph_output(g, comp, "comp");
  tj_graph_output(g, tj_graph_add(g, k, kb), "k");
  CHECK_NO_ERROR(g);
  CHECK_STREQ("f32[B,1]", type_of(g, red));
  CHECK_STREQ("i64[B]", type_of(g, am));
  CHECK_STREQ("f32[2,B,4,3]", type_of(g, r));
  CHECK_STREQ("f32[B,3]", type_of(g, gathered));
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_destroy(g);
}

//===--- allocation failure ---===//

// The capstone plus a few ops that allocate on their own paths: a copied
// constant, a wide concat, new symbols and guards.
static tj_status_t build_for_oom(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  TJ_RETURN_IF_ERROR(build_capstone(ctx, &g));
  tj_graph_destroy(g);
  TJ_RETURN_IF_ERROR(tj_graph_create(ctx, "more", &g));
  int64_t b = tj_graph_symbol(g, "B");
  int64_t c = tj_graph_symbol(g, "C");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, DIMS(b, 16), "x");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 1, DIMS(c), "u");
  static float big[4096];
  tj_value_t k =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, DIMS(4096), big, sizeof(big));
  tj_value_t many[20];
  for (int i = 0; i < 20; ++i) many[i] = tj_graph_add(g, x, u);
  tj_value_t cat = tj_graph_concat(g, 20, many, 0);
  tj_value_t r = tj_graph_reshape(g, cat, 2, DIMS(TJ_DIM_INFER, 64));
  tj_graph_output(g, tj_graph_sum(g, r, 0, NULL, false), "s");
  tj_graph_output(g, k, "k");
  tj_status_t status = tj_graph_finalize(g);
  tj_graph_destroy(g);
  return status;
}

TEST(out_of_memory_sweep) {
  long failures = 0;
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, fail_at);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&alloc);
    tj_context_t* ctx = NULL;
    tj_status_t status = tj_context_create(&options, &ctx);
    if (!status) status = build_for_oom(ctx);
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) break;
    ++failures;
    if (tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY)
      fprintf(stderr, "fail_at %ld: %s\n", fail_at, tj_status_message(status));
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (fail_at > 100000) {
      CHECK(!"the sweep does not terminate");
      break;
    }
  }
  CHECK(failures > 10);
}

int main(void) {
  RUN_TEST(create_and_destroy);
  RUN_TEST(inputs_share_symbols);
  RUN_TEST(input_errors);
  RUN_TEST(symbol_errors);
  RUN_TEST(dim_sub_and_div);
  RUN_TEST(output_is_data_dependent);
  RUN_TEST(unary_ops);
  RUN_TEST(cast);
  RUN_TEST(binary_ops);
  RUN_TEST(dtype_mismatch_message);
  RUN_TEST(broadcasting);
  RUN_TEST(where);
  RUN_TEST(reductions);
  RUN_TEST(matmul);
  RUN_TEST(reshape);
  RUN_TEST(transpose);
  RUN_TEST(broadcast_to);
  RUN_TEST(slice);
  RUN_TEST(concat);
  RUN_TEST(pad_and_gather);
  RUN_TEST(composites);
  RUN_TEST(leaves);
  RUN_TEST(tensor_size_limits);
  RUN_TEST(sticky_first_error);
  RUN_TEST(none_and_foreign_operands);
  RUN_TEST(outputs_and_finalize);
  RUN_TEST(capstone);
  RUN_TEST(bind_symbols_errors);
  RUN_TEST(verify_catches_corruption);
  RUN_TEST(verify_every_op);
  RUN_TEST(out_of_memory_sweep);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
