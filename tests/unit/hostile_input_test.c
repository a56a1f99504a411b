// Hostile input, one test per case (issue 19): ranks beyond TJ_MAX_RANK,
// NULL pointers in tensor descriptors, symbol bindings that disagree or are
// negative, dims that overflow at run time, too few and too many tensors,
// wrong dtypes, devices and shapes, NULL handles to every public function
// that takes one, out-of-range enums and hostile attributes to the builders,
// constant data whose byte length is not its type's, and builder calls
// after finalize. Each is refused with INVALID_ARGUMENT (or the documented
// result) and a message naming the problem, on the reference target and
// x86 (and through tj_reference_run and tj_graph_output_shape where the
// graph is checked directly). Every test runs in a context of its own over
// a counting allocator: nothing may be left allocated when the context is
// destroyed. The defects issue's run-argument cases (outputs overlapping
// inputs, each other or themselves, pointers that wrap, huge and
// zero-element dims) are run_args_test's, one test each.

#include <stdint.h>

#include "tests/unit/test.h"

static tj_context_t* g_ctx;
static tj_test_allocator_t g_alloc;

static const tj_target_t kTargets[2] = {TJ_TARGET_REFERENCE, TJ_TARGET_X86};

// A fresh context over the counting allocator; end_context checks that it
// is all given back.
static void begin_context(void) {
  tj_test_allocator_initialize(&g_alloc, -1);
  tj_context_options_t o = tj_test_context_options();
  o.allocator = tj_test_allocator_get(&g_alloc);
  g_ctx = NULL;
  CHECK_OK(tj_context_create(&o, &g_ctx));
}

static void end_context(void) {
  tj_context_destroy(g_ctx);
  g_ctx = NULL;
  CHECK_EQ_INT(0, g_alloc.live_blocks);
  CHECK_EQ_INT(0, g_alloc.live_bytes);
  CHECK_EQ_INT(0, g_alloc.bad_frees);
}

static tj_graph_t* new_graph(void) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "hostile", &g));
  return g;
}

// Finalizes |g| and compiles it for |target|; NULL on error (a failed
// check).
static tj_executable_t* compile_for(tj_graph_t* g, tj_target_t target) {
  tj_executable_t* e = NULL;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = target;
  o.cache_dir = "";
  o.x86.num_threads = 1;
  CHECK_OK(tj_graph_finalize(g));
  CHECK_OK(tj_compile(g, &o, &e));
  return e;
}

// The graph's first builder error must have |code| and name |needle|;
// finalize reports the same one.
#define CHECK_BUILD_ERROR(g, code, needle)            \
  do {                                                \
    CHECK_STATUS(code, needle, tj_graph_status(g));   \
    CHECK_STATUS(code, needle, tj_graph_finalize(g)); \
  } while (0)

// y = x + x, x f32[B, 3]: the graph most run-time cases use.
static tj_graph_t* add_graph(void) {
  tj_graph_t* g = new_graph();
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 3}, "x");
  tj_graph_output(g, tj_graph_add(g, x, x), "y");
  return g;
}

// |status| must be INVALID_ARGUMENT with a message holding every
// '|'-separated part of |needles|; frees it. The targets word their messages
// their own way, so a check names the parts they share.
static void check_invalid(tj_status_t status, const char* needles,
                          const char* what, int line) {
  bool ok = tj_status_code(status) == TJ_STATUS_INVALID_ARGUMENT;
  const char* message = tj_status_message(status);
  for (const char* p = needles; ok && *p;) {
    const char* bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    char part[128];
    snprintf(part, sizeof(part), "%.*s", (int)n, p);
    ok = strstr(message, part) != NULL;
    p += n + (bar ? 1 : 0);
  }
  ++g_test_checks;
  if (!ok) {
    ++g_test_failures;
    fprintf(stderr,
            "%s:%d: %s: %s: expected INVALID_ARGUMENT with \"%s\", got %s: "
            "\"%s\"\n",
            __FILE__, line, g_test_current, what, needles,
            tj_status_code_name(tj_status_code(status)), message);
  }
  tj_status_free(status);
}

// Runs |in| -> |out| through every way a run is checked: each target's
// executable, tj_reference_run on the graph, and (|shape_too|) the output
// shape queries and prepare, expecting INVALID_ARGUMENT and |needles| from
// all of them.
#define check_run(g, in, num_in, out, num_out, needles, shape_too) \
  check_run_at(g, in, num_in, out, num_out, needles, shape_too, __LINE__)
static void check_run_at(tj_graph_t* g, const tj_tensor_t* in, int32_t num_in,
                         const tj_tensor_t* out, int32_t num_out,
                         const char* needles, bool shape_too, int line) {
  tj_executable_t* e[2] = {NULL, NULL};
  for (int t = 0; t < 2; ++t) e[t] = compile_for(g, kTargets[t]);
  int32_t rank = -1;
  int64_t dims[TJ_MAX_RANK];
  for (int t = 0; t < 2; ++t) {
    if (!e[t]) continue;
    const char* run_what = t ? "x86 run" : "reference run";
    check_invalid(tj_executable_run(e[t], in, num_in, out, num_out), needles,
                  run_what, line);
    if (shape_too) {
      check_invalid(
          tj_executable_output_shape(e[t], in, num_in, 0, &rank, dims), needles,
          "tj_executable_output_shape", line);
      check_invalid(tj_executable_prepare(e[t], in, num_in), needles,
                    "tj_executable_prepare", line);
    }
  }
  check_invalid(tj_reference_run(g, in, num_in, out, num_out), needles,
                "tj_reference_run", line);
  if (shape_too) {
    check_invalid(tj_graph_output_shape(g, in, num_in, 0, &rank, dims), needles,
                  "tj_graph_output_shape", line);
  }
  for (int t = 0; t < 2; ++t) tj_executable_release(e[t]);
}

//===--- ranks beyond the limit ---===//

TEST(graph_input_rank_beyond_limit) {
  begin_context();
  int64_t dims[TJ_MAX_RANK + 1];
  for (int i = 0; i <= TJ_MAX_RANK; ++i) dims[i] = 1;
  tj_graph_t* g = new_graph();
  CHECK(tj_value_is_none(
      tj_graph_input(g, TJ_DTYPE_F32, TJ_MAX_RANK + 1, dims, "x")));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "input (node %0): rank 9 is out of range [0, 8]");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(tj_graph_input(g, TJ_DTYPE_F32, -1, dims, "x")));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT,
                    "input (node %0): rank -1 is out of range [0, 8]");
  tj_graph_destroy(g);
  end_context();
}

TEST(run_tensor_rank_beyond_limit) {
  begin_context();
  int64_t shape[TJ_MAX_RANK + 1];
  for (int i = 0; i <= TJ_MAX_RANK; ++i) shape[i] = 1;
  shape[0] = 2;
  shape[1] = 3;
  float x[6] = {0}, y[6] = {0};
  tj_graph_t* g = add_graph();
  int64_t ys[2] = {2, 3};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, TJ_MAX_RANK + 1, shape);
  check_run(g, &in, 1, &out, 1, "\"x\"|rank 9", true);
  in.rank = -3;
  check_run(g, &in, 1, &out, 1, "\"x\"|rank -3", true);
  in = tj_tensor_make(x, TJ_DTYPE_F32, 2, shape);
  out.rank = TJ_MAX_RANK + 1;
  out.shape = shape;
  check_run(g, &in, 1, &out, 1, "output|\"y\"|rank 9", false);
  tj_graph_destroy(g);
  end_context();
}

//===--- NULL pointers in descriptors ---===//

TEST(null_tensor_data) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(NULL, TJ_DTYPE_F32, 2, s);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, s);
  check_run(g, &in, 1, &out, 1, "input \"x\": data is NULL", false);
  in.data = x;
  out.data = NULL;
  check_run(g, &in, 1, &out, 1, "output \"y\": data is NULL", false);
  tj_graph_destroy(g);
  end_context();
}

TEST(null_tensor_shape) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, NULL);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, s);
  check_run(g, &in, 1, &out, 1, "input \"x\": shape is NULL", true);
  in.shape = s;
  out.shape = NULL;
  check_run(g, &in, 1, &out, 1, "output|\"y\"|shape is NULL", false);
  tj_graph_destroy(g);
  end_context();
}

// NULL tensor arrays with a count that says there are tensors.
TEST(null_tensor_arrays) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, s);
  check_run(g, NULL, 1, &out, 1, "inputs is NULL", true);
  check_run(g, &in, 1, NULL, 1, "outputs is NULL", false);
  tj_graph_destroy(g);
  end_context();
}

//===--- symbol bindings ---===//

TEST(symbol_bound_to_two_values) {
  begin_context();
  tj_graph_t* g = new_graph();
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "a");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "b");
  tj_graph_output(g, tj_graph_add(g, a, b), "y");
  float x[3] = {0}, y[3] = {0};
  int64_t s2[1] = {2}, s3[1] = {3};
  tj_tensor_t in[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 1, s2),
                       tj_tensor_make(x, TJ_DTYPE_F32, 1, s3)};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 1, s2);
  check_run(g, in, 2, &out, 1, "B|\"b\"", true);
  tj_graph_destroy(g);
  end_context();
}

TEST(symbol_bound_to_negative) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {-2, 3}, ys[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
  check_run(g, &in, 1, &out, 1, "input|\"x\"|-2", true);
  tj_graph_destroy(g);
  end_context();
}

// B * 2^40 with B = 2^30 overflows int64 only when B is bound.
TEST(dim_overflows_at_run_time) {
  begin_context();
  tj_graph_t* g = new_graph();
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
  int64_t big = tj_graph_dim_mul(g, B, (int64_t)1 << 40);
  tj_graph_output(g, tj_graph_full(g, TJ_DTYPE_F32, 1, &big, 1.0), "y");
  tj_graph_output(g, x, "x2");
  CHECK_OK(tj_graph_finalize(g));
  float buf[1] = {0};
  int64_t s[1] = {(int64_t)1 << 30};
  tj_tensor_t in = tj_tensor_make(buf, TJ_DTYPE_F32, 1, s);
  int32_t rank = -1;
  int64_t dims[TJ_MAX_RANK];
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "overflows int64",
               tj_graph_output_shape(g, &in, 1, 0, &rank, dims));
  for (int t = 0; t < 2; ++t) {
    tj_executable_t* e = compile_for(g, kTargets[t]);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "overflows int64",
                 tj_executable_output_shape(e, &in, 1, 0, &rank, dims));
    tj_executable_release(e);
  }
  tj_graph_destroy(g);
  end_context();
}

//===--- counts ---===//

TEST(too_few_and_too_many_tensors) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, s),
                       tj_tensor_make(x, TJ_DTYPE_F32, 2, s)};
  tj_tensor_t out[2] = {tj_tensor_make(y, TJ_DTYPE_F32, 2, s),
                        tj_tensor_make(y, TJ_DTYPE_F32, 2, s)};
  check_run(g, in, 0, out, 1, "1 input", true);
  check_run(g, in, 2, out, 1, "1 input", true);
  check_run(g, in, -1, out, 1, "1 input", true);
  check_run(g, in, 1, out, 0, "1 output", false);
  check_run(g, in, 1, out, 2, "1 output", false);
  check_run(g, in, 1, out, -1, "1 output", false);
  tj_graph_destroy(g);
  end_context();
}

//===--- dtypes, devices, shapes ---===//

TEST(wrong_dtypes) {
  begin_context();
  double x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F64, 2, s);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, s);
  check_run(g, &in, 1, &out, 1, "input|\"x\"|f64", true);
  in.dtype = TJ_DTYPE_F32;
  out.dtype = TJ_DTYPE_I32;
  check_run(g, &in, 1, &out, 1, "output|\"y\"|i32", false);
  out.dtype = (tj_dtype_t)99;
  check_run(g, &in, 1, &out, 1, "output|\"y\"|?", false);
  in.dtype = (tj_dtype_t)-1;
  check_run(g, &in, 1, &out, 1, "input|\"x\"|?", true);
  tj_graph_destroy(g);
  end_context();
}

TEST(wrong_devices) {
  begin_context();
  float x[6] = {0}, y[6] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, s);
  in.device_type = TJ_DEVICE_CUDA;
  check_run(g, &in, 1, &out, 1, "input|\"x\"|not a CPU tensor", false);
  in.device_type = (tj_device_type_t)77;
  check_run(g, &in, 1, &out, 1, "input|\"x\"|device type 77", false);
  in.device_type = TJ_DEVICE_CPU;
  out.device_type = TJ_DEVICE_CUDA;
  check_run(g, &in, 1, &out, 1, "output|\"y\"|not a CPU tensor", false);
  out.device_type = TJ_DEVICE_CPU;
  out.device_id = 2;  // DLPack's CPU tensors are device 0
  check_run(g, &in, 1, &out, 1, "output|\"y\"|device_id must be 0", false);
  out.device_id = 0;
  in.device_id = -1;
  check_run(g, &in, 1, &out, 1, "input|\"x\"|device_id must be 0", false);
  tj_graph_destroy(g);
  end_context();
}

TEST(output_of_wrong_shape) {
  begin_context();
  float x[6] = {0}, y[8] = {0};
  int64_t s[2] = {2, 3};
  tj_graph_t* g = add_graph();
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  int64_t wrong[2] = {2, 4};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, wrong);
  check_run(g, &in, 1, &out, 1, "output|\"y\"|4|3", false);
  int64_t flat[1] = {6};
  out = tj_tensor_make(y, TJ_DTYPE_F32, 1, flat);
  check_run(g, &in, 1, &out, 1, "output|\"y\"|f32", false);
  tj_graph_destroy(g);
  end_context();
}

//===--- NULL handles ---===//

TEST(null_context_arguments) {
  tj_context_t* ctx = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_context",
               tj_context_create(NULL, NULL));
  tj_context_destroy(NULL);            // a no-op
  tj_context_free_string(NULL, NULL);  // a no-op
  tj_graph_t* g = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "context",
               tj_graph_create(NULL, "g", &g));
  CHECK(g == NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "context",
               tj_graph_parse(NULL, "", 0, NULL, &g));
  CHECK(g == NULL);
  begin_context();
  ctx = g_ctx;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_graph",
               tj_graph_create(ctx, "g", NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_graph",
               tj_graph_parse(ctx, "", 0, NULL, NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "text",
               tj_graph_parse(ctx, NULL, 4, NULL, &g));
  CHECK(g == NULL);
  end_context();
}

TEST(null_graph_arguments) {
  begin_context();
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph", tj_graph_finalize(NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph", tj_graph_status(NULL));
  tj_graph_destroy(NULL);  // a no-op
  CHECK(tj_graph_context(NULL) == NULL);
  CHECK(tj_graph_symbol(NULL, "B") == TJ_DIM_INVALID);
  CHECK(tj_graph_dim_add(NULL, 1, 2) == TJ_DIM_INVALID);
  CHECK(tj_graph_dim_mul(NULL, 1, 2) == TJ_DIM_INVALID);
  float one = 1;
  CHECK(tj_value_is_none(
      tj_graph_input(NULL, TJ_DTYPE_F32, 1, (int64_t[]){1}, "x")));
  CHECK(tj_value_is_none(
      tj_graph_constant(NULL, TJ_DTYPE_F32, 0, NULL, &one, sizeof(one))));
  CHECK(tj_value_is_none(tj_graph_constant_borrowed(NULL, TJ_DTYPE_F32, 0, NULL,
                                                    &one, sizeof(one))));
  CHECK(tj_value_is_none(tj_graph_scalar(NULL, TJ_DTYPE_F32, 1)));
  CHECK(tj_value_is_none(
      tj_graph_full(NULL, TJ_DTYPE_F32, 1, (int64_t[]){1}, 1)));
  CHECK(tj_value_is_none(
      tj_graph_iota(NULL, TJ_DTYPE_F32, 1, (int64_t[]){1}, 0)));
  tj_value_t v = {1};
  tj_graph_output(NULL, v, "y");  // a no-op
  CHECK(tj_value_is_none(tj_graph_neg(NULL, v)));
  CHECK(tj_value_is_none(tj_graph_add(NULL, v, v)));
  CHECK(tj_value_is_none(tj_graph_where(NULL, v, v, v)));
  CHECK(tj_value_is_none(tj_graph_cast(NULL, v, TJ_DTYPE_F32)));
  CHECK(tj_value_is_none(tj_graph_sum(NULL, v, 0, NULL, false)));
  CHECK(tj_value_is_none(tj_graph_argmax(NULL, v, 0, false)));
  CHECK(tj_value_is_none(tj_graph_matmul(NULL, v, v)));
  CHECK(tj_value_is_none(tj_graph_reshape(NULL, v, 0, NULL)));
  CHECK(tj_value_is_none(tj_graph_transpose(NULL, v, NULL)));
  CHECK(tj_value_is_none(tj_graph_broadcast_to(NULL, v, 0, NULL)));
  CHECK(tj_value_is_none(tj_graph_slice(NULL, v, NULL, NULL, NULL)));
  CHECK(tj_value_is_none(tj_graph_concat(NULL, 1, &v, 0)));
  CHECK(tj_value_is_none(tj_graph_pad(NULL, v, NULL, NULL, 0)));
  CHECK(tj_value_is_none(tj_graph_gather(NULL, v, v, 0)));
  CHECK(tj_value_is_none(tj_graph_gelu(NULL, v, false)));
  CHECK(tj_value_is_none(tj_graph_softmax(NULL, v, 0)));
  CHECK(tj_value_is_none(
      tj_graph_layer_norm(NULL, v, tj_value_none(), tj_value_none(), 1e-5)));
  CHECK(tj_value_is_none(tj_graph_linear(NULL, v, v, tj_value_none())));
  CHECK(tj_graph_name(NULL) == NULL);
  CHECK_EQ_INT(0, tj_graph_num_inputs(NULL));
  CHECK_EQ_INT(0, tj_graph_num_outputs(NULL));
  CHECK(tj_value_is_none(tj_graph_input_value(NULL, 0)));
  CHECK(tj_value_is_none(tj_graph_output_value(NULL, 0)));
  CHECK(tj_graph_input_name(NULL, 0) == NULL);
  CHECK(tj_graph_output_name(NULL, 0) == NULL);
  CHECK_EQ_INT(-1, tj_graph_value_rank(NULL, v));
  tj_graph_value_dims(NULL, v, NULL);  // a no-op
  char* text = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph",
               tj_graph_print(NULL, &text));
  CHECK(text == NULL);
  tj_executable_t* e = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph", tj_compile(NULL, NULL, &e));
  CHECK(e == NULL);
  int32_t rank = 0;
  int64_t dims[TJ_MAX_RANK];
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph",
               tj_graph_output_shape(NULL, NULL, 0, 0, &rank, dims));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph",
               tj_reference_run(NULL, NULL, 0, NULL, 0));
  tj_graph_t* joint = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph",
               tj_graph_grad(NULL, 0, NULL, 0, NULL, &joint));
  CHECK(joint == NULL);
  tj_graph_t *fwd = NULL, *bwd = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "joint",
               tj_graph_partition(NULL, 0, 0, NULL, &fwd, &bwd, NULL));
  CHECK(fwd == NULL && bwd == NULL);
  tj_scoreboard_t board;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "graph",
               tj_graph_scoreboard(NULL, 0, NULL, NULL, &board));
  end_context();
}

// A live graph with NULL out-parameters.
TEST(null_out_arguments) {
  begin_context();
  tj_graph_t* g = add_graph();
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_text", tj_graph_print(g, NULL));
  CHECK_OK(tj_graph_finalize(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_executable",
               tj_compile(g, NULL, NULL));
  float x[6] = {0};
  int64_t s[2] = {2, 3};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  int64_t dims[TJ_MAX_RANK];
  int32_t rank = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_rank",
               tj_graph_output_shape(g, &in, 1, 0, NULL, dims));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_dims",
               tj_graph_output_shape(g, &in, 1, 0, &rank, NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "index 1 is out of range",
               tj_graph_output_shape(g, &in, 1, 1, &rank, dims));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "index -1 is out of range",
               tj_graph_output_shape(g, &in, 1, -1, &rank, dims));
  for (int t = 0; t < 2; ++t) {
    tj_executable_t* e = compile_for(g, kTargets[t]);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_rank",
                 tj_executable_output_shape(e, &in, 1, 0, NULL, dims));
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_dims",
                 tj_executable_output_shape(e, &in, 1, 0, &rank, NULL));
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "index 7 is out of range",
                 tj_executable_output_shape(e, &in, 1, 7, &rank, dims));
    tj_executable_stats(e, NULL);  // a no-op
    tj_executable_release(e);
  }
  tj_graph_t* joint = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_joint",
               tj_graph_grad(g, 1, (int32_t[]){0}, 1, (int32_t[]){0}, NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out",
               tj_graph_scoreboard(g, 0, NULL, NULL, NULL));
  CHECK(joint == NULL);
  tj_graph_destroy(g);
  end_context();
}

// A live graph with NULL pointer arguments where a pointer is required.
TEST(null_builder_pointers) {
  begin_context();
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, NULL, &g));  // documented: "main"
  CHECK_STREQ("main", tj_graph_name(g));
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_graph_symbol(g, NULL) == TJ_DIM_INVALID);
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "name");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(
      tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){2}, NULL)));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "name");
  tj_graph_destroy(g);
  g = new_graph();
  CHECK(tj_value_is_none(tj_graph_input(g, TJ_DTYPE_F32, 2, NULL, "x")));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "dims is NULL");
  tj_graph_destroy(g);
  g = new_graph();
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){2}, "x");
  tj_graph_output(g, x, NULL);
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "name");
  tj_graph_destroy(g);
  g = new_graph();
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
  CHECK(tj_value_is_none(tj_graph_transpose(g, x, NULL)));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "perm");
  tj_graph_destroy(g);
  g = new_graph();
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
  CHECK(tj_value_is_none(tj_graph_pad(g, x, NULL, (int64_t[]){0, 0}, 0)));
  CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, "pad");
  tj_graph_destroy(g);
  g = new_graph();
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
  tj_graph_output(g, x, "y");
  tj_graph_value_dims(g, x, NULL);  // a no-op
  CHECK_EQ_INT(2, tj_graph_value_rank(g, x));
  tj_value_t bogus = {12345};
  CHECK_EQ_INT(-1, tj_graph_value_rank(g, bogus));
  CHECK(tj_graph_input_name(g, 5) == NULL);
  CHECK(tj_graph_output_name(g, -1) == NULL);
  CHECK(tj_value_is_none(tj_graph_input_value(g, 9)));
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output indices are NULL",
               tj_graph_grad(g, 1, NULL, 1, (int32_t[]){0}, &joint));
  CHECK(joint == NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "input indices are NULL",
               tj_graph_grad(g, 1, (int32_t[]){0}, 1, NULL, &joint));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "-1 inputs selected",
               tj_graph_grad(g, 1, (int32_t[]){0}, -1, NULL, &joint));
  CHECK(joint == NULL);
  tj_graph_t *fwd = NULL, *bwd = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_",
               tj_graph_partition(g, 1, 1, NULL, NULL, NULL, NULL));
  tj_scoreboard_t board;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "symbol",
               tj_graph_scoreboard(g, 1, NULL, NULL, &board));
  CHECK(fwd == NULL && bwd == NULL);
  tj_graph_destroy(g);
  end_context();
}

TEST(null_executable_arguments) {
  float x[6] = {0};
  int64_t s[2] = {2, 3};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, s);
  int64_t dims[TJ_MAX_RANK];
  int32_t rank = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "executable",
               tj_executable_run(NULL, &in, 1, &in, 1));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "executable",
               tj_executable_output_shape(NULL, &in, 1, 0, &rank, dims));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "executable",
               tj_executable_prepare(NULL, &in, 1));
  tj_executable_retain(NULL);   // a no-op
  tj_executable_release(NULL);  // a no-op
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  memset(&stats, 0xff, sizeof(stats));
  stats.struct_size = sizeof(stats);
  tj_executable_stats(NULL, &stats);  // zeroes or leaves; never crashes
  tj_compile_options_initialize(NULL);
  tj_context_options_initialize(NULL);
  tj_partition_options_initialize(NULL);
}

//===--- builders with out-of-range enums ---===//

TEST(builder_dtype_out_of_range) {
  begin_context();
  const tj_dtype_t bad[3] = {(tj_dtype_t)-1, TJ_DTYPE_COUNT_, (tj_dtype_t)1000};
  for (int i = 0; i < 3; ++i) {
    char needle[64];
    snprintf(needle, sizeof(needle), "dtype %d is not a dtype", (int)bad[i]);
    tj_graph_t* g = new_graph();
    CHECK(tj_value_is_none(tj_graph_input(g, bad[i], 1, (int64_t[]){2}, "x")));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    g = new_graph();
    int64_t zero = 0;
    CHECK(tj_value_is_none(tj_graph_constant(g, bad[i], 1, &zero, NULL, 0)));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    g = new_graph();
    CHECK(tj_value_is_none(tj_graph_scalar(g, bad[i], 1.0)));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    g = new_graph();
    CHECK(tj_value_is_none(tj_graph_full(g, bad[i], 1, (int64_t[]){2}, 1)));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    g = new_graph();
    CHECK(tj_value_is_none(tj_graph_iota(g, bad[i], 1, (int64_t[]){2}, 0)));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){2}, "x");
    CHECK(tj_value_is_none(tj_graph_cast(g, x, bad[i])));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
    CHECK(tj_dtype_name(bad[i]) != NULL);  // a placeholder, never a crash
    CHECK_EQ_INT(0, tj_dtype_size(bad[i]));
  }
  end_context();
}

TEST(op_queries_out_of_range) {
  const int32_t bad[4] = {-1, tj_op_count(), tj_op_count() + 100, INT32_MIN};
  for (int i = 0; i < 4; ++i) {
    CHECK(tj_op_name(bad[i]) == NULL);
    CHECK(tj_op_builder(bad[i]) == NULL);
    (void)tj_op_form(bad[i]);  // documented as a placeholder form
  }
  CHECK(tj_status_code_name((tj_status_code_t)12345) != NULL);
  CHECK(tj_stage_name((tj_stage_t)-7) != NULL);
}

TEST(builder_axis_out_of_range) {
  begin_context();
  for (int c = 0; c < 10; ++c) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    tj_value_t i = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){2}, "i");
    tj_value_t r = tj_value_none();
    static const char* const kNeedles[10] = {
        "softmax (node %2): axis 2 is out of range for rank 2",
        "log_softmax (node %2): axis -3 is out of range",
        "argmax (node %2): axis -2147483648 is out of range",
        "sum (node %2): axis 5 is out of range",
        "max (node %2): axis -1 is repeated",
        "mean (node %2): axes is NULL",
        "gather (node %2): axis 2 is out of range",
        "concat (node %2): axis 9 is out of range",
        "iota (node %2): axis 1 is out of range for rank 1",
        "transpose (node %2): perm repeats axis 0"};
    const char* needle = kNeedles[c];
    switch (c) {
      case 0:
        r = tj_graph_softmax(g, x, 2);
        break;
      case 1:
        r = tj_graph_log_softmax(g, x, -3);
        break;
      case 2:
        r = tj_graph_argmax(g, x, INT32_MIN, false);
        break;
      case 3:
        r = tj_graph_sum(g, x, 1, (int32_t[]){5}, false);
        break;
      case 4:
        r = tj_graph_max(g, x, 2, (int32_t[]){1, -1}, false);
        break;
      case 5:
        r = tj_graph_mean(g, x, 1, NULL, false);
        break;
      case 6:
        r = tj_graph_gather(g, x, i, 2);
        break;
      case 7:
        r = tj_graph_concat(g, 2, (tj_value_t[]){x, x}, 9);
        break;
      case 8:
        r = tj_graph_iota(g, TJ_DTYPE_I32, 1, (int64_t[]){4}, 1);
        break;
      case 9:
        r = tj_graph_transpose(g, x, (int32_t[]){0, 0});
        break;
    }
    CHECK(tj_value_is_none(r));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
  }
  end_context();
}

//===--- data movement with hostile attributes ---===//

TEST(reshape_hostile) {
  begin_context();
  for (int c = 0; c < 6; ++c) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    tj_value_t r = tj_value_none();
    static const char* const kNeedles[6] = {
        "reshape (node %1): element count differs: 6 vs 8",
        "reshape (node %1): more than one dim is -1",
        "reshape (node %1): dim 0 is -6",
        "reshape (node %1): dims is NULL",
        "reshape (node %1): rank 9 is out of range",
        "reshape (node %1): dim overflow"};
    const char* needle = kNeedles[c];
    int64_t nine[TJ_MAX_RANK + 1];
    for (int k = 0; k <= TJ_MAX_RANK; ++k) nine[k] = 1;
    nine[0] = 6;
    switch (c) {
      case 0:
        r = tj_graph_reshape(g, x, 2, (int64_t[]){4, 2});
        break;
      case 1:
        r = tj_graph_reshape(g, x, 2, (int64_t[]){-1, -1});
        break;
      case 2:
        r = tj_graph_reshape(g, x, 2, (int64_t[]){-6, -1});
        break;
      case 3:
        r = tj_graph_reshape(g, x, 2, NULL);
        break;
      case 4:
        r = tj_graph_reshape(g, x, TJ_MAX_RANK + 1, nine);
        break;
      case 5:
        r = tj_graph_reshape(g, x, 3, (int64_t[]){INT64_MAX, 2, 0});
        break;
    }
    CHECK(tj_value_is_none(r));
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
    tj_graph_destroy(g);
  }
  end_context();
}

TEST(broadcast_to_hostile) {
  begin_context();
  for (int c = 0; c < 5; ++c) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    tj_value_t r = tj_value_none();
    switch (c) {
      case 0:
        r = tj_graph_broadcast_to(g, x, 2, (int64_t[]){2, 4});
        break;
      case 1:
        r = tj_graph_broadcast_to(g, x, 1, (int64_t[]){3});
        break;
      case 2:
        r = tj_graph_broadcast_to(g, x, 2, (int64_t[]){-2, 3});
        break;
      case 3:
        r = tj_graph_broadcast_to(g, x, 2, NULL);
        break;
      case 4:
        r = tj_graph_broadcast_to(g, x, 4, (int64_t[]){INT64_MAX / 2, 4, 2, 3});
        break;
    }
    CHECK(tj_value_is_none(r));
    static const char* const kNeedles[5] = {
        "broadcast_to (node %1): cannot broadcast dim 1 (3) to 4",
        "broadcast_to (node %1): cannot broadcast rank 2 to rank 1",
        "broadcast_to (node %1): dim 0 is -2",
        "broadcast_to (node %1): dims is NULL", "broadcast_to (node %1): "};
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, kNeedles[c]);
    tj_graph_destroy(g);
  }
  end_context();
}

TEST(slice_hostile) {
  begin_context();
  for (int c = 0; c < 5; ++c) {
    tj_graph_t* g = new_graph();
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 3}, "x");
    tj_value_t r = tj_value_none();
    int64_t lo[2] = {0, 0}, hi[2] = {INT64_MAX, 3};
    switch (c) {
      case 0:
        r = tj_graph_slice(g, x, lo, hi, (int64_t[]){1, 0});
        break;
      case 1:
        r = tj_graph_slice(g, x, lo, hi, (int64_t[]){1, -1});
        break;
      case 2:
        r = tj_graph_slice(g, x, NULL, hi, NULL);
        break;
      case 3:
        r = tj_graph_slice(g, x, lo, NULL, NULL);
        break;
      case 4:  // a symbolic axis sliced in part
        r = tj_graph_slice(g, x, (int64_t[]){1, 0}, hi, NULL);
        break;
    }
    CHECK(tj_value_is_none(r));
    static const char* const kNeedles[5] = {
        "slice (node %1): step 0 on axis 1 must be > 0",
        "slice (node %1): step -1 on axis 1 must be > 0",
        "slice (node %1): starts and stops must not be NULL",
        "slice (node %1): starts and stops must not be NULL",
        "axis 0 has symbolic size B and can only be sliced whole"};
    // Documented: a symbolic axis sliced in part is UNSUPPORTED.
    CHECK_BUILD_ERROR(
        g, c == 4 ? TJ_STATUS_UNSUPPORTED : TJ_STATUS_INVALID_ARGUMENT,
        kNeedles[c]);
    tj_graph_destroy(g);
  }
  end_context();
}

TEST(concat_hostile) {
  begin_context();
  for (int c = 0; c < 6; ++c) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    tj_value_t y = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 4}, "y");
    tj_value_t z = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){2, 3}, "z");
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, "w");
    tj_value_t r = tj_value_none();
    switch (c) {
      case 0:
        r = tj_graph_concat(g, 0, (tj_value_t[]){x}, 0);
        break;
      case 1:
        r = tj_graph_concat(g, -5, (tj_value_t[]){x}, 0);
        break;
      case 2:
        r = tj_graph_concat(g, 2, NULL, 0);
        break;
      case 3:
        r = tj_graph_concat(g, 2, (tj_value_t[]){x, y}, 0);
        break;
      case 4:
        r = tj_graph_concat(g, 2, (tj_value_t[]){x, z}, 0);
        break;
      case 5:
        r = tj_graph_concat(g, 2, (tj_value_t[]){x, w}, 0);
        break;
    }
    CHECK(tj_value_is_none(r));
    static const char* const kNeedles[6] = {
        "concat (node %4): needs at least one operand",
        "concat (node %4): count is negative",
        "concat (node %4): values is NULL",
        "concat (node %4): dim 1 differs: 3 vs 4 (operand 1)",
        "concat (node %4): dtype mismatch f32 vs i32 (operand 1)",
        "concat (node %4): rank mismatch 2 vs 1 (operand 1)"};
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, kNeedles[c]);
    tj_graph_destroy(g);
  }
  end_context();
}

TEST(pad_hostile) {
  begin_context();
  for (int c = 0; c < 3; ++c) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    tj_value_t r = tj_value_none();
    switch (c) {
      case 0:
        r = tj_graph_pad(g, x, (int64_t[]){-1, 0}, (int64_t[]){0, 0}, 0);
        break;
      case 1:
        r = tj_graph_pad(g, x, (int64_t[]){0, 0}, (int64_t[]){0, -4}, 0);
        break;
      case 2:
        r = tj_graph_pad(g, x, (int64_t[]){INT64_MAX, 0},
                         (int64_t[]){INT64_MAX, 0}, 0);
        break;
    }
    CHECK(tj_value_is_none(r));
    static const char* const kNeedles[3] = {
        "pad (node %1): padding of axis 0 is -1, 0; must be >= 0",
        "pad (node %1): padding of axis 1 is 0, -4; must be >= 0",
        "pad (node %1): dim overflow: 2 + 9223372036854775807"};
    CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, kNeedles[c]);
    tj_graph_destroy(g);
  }
  end_context();
}

//===--- constant data of the wrong byte length ---===//

TEST(constant_buffer_smaller_than_its_type) {
  begin_context();
  float data[6] = {1, 2, 3, 4, 5, 6};
  for (int borrowed = 0; borrowed < 2; ++borrowed) {
    const size_t sizes[3] = {sizeof(float) * 5, 0, sizeof(data) + 4};
    for (int i = 0; i < 3; ++i) {
      tj_graph_t* g = new_graph();
      tj_value_t (*fn)(tj_graph_t*, tj_dtype_t, int32_t, const int64_t*,
                       const void*, size_t) =
          borrowed ? tj_graph_constant_borrowed : tj_graph_constant;
      CHECK(tj_value_is_none(
          fn(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, data, sizes[i])));
      char needle[96];
      snprintf(needle, sizeof(needle),
               "data is %zu bytes but the constant's type needs 24", sizes[i]);
      CHECK_BUILD_ERROR(g, TJ_STATUS_INVALID_ARGUMENT, needle);
      tj_graph_destroy(g);
    }
    // The right size builds, runs and gives the data back on both targets.
    tj_graph_t* g = new_graph();
    tj_value_t (*fn)(tj_graph_t*, tj_dtype_t, int32_t, const int64_t*,
                     const void*, size_t) =
        borrowed ? tj_graph_constant_borrowed : tj_graph_constant;
    tj_value_t k =
        fn(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, data, sizeof(data));
    tj_graph_output(g, tj_graph_neg(g, k), "y");
    for (int t = 0; t < 2; ++t) {
      tj_executable_t* e = compile_for(g, kTargets[t]);
      float y[6] = {0};
      tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){2, 3});
      CHECK_OK(tj_executable_run(e, NULL, 0, &out, 1));
      CHECK(y[0] == -1 && y[5] == -6);
      tj_executable_release(e);
    }
    tj_graph_destroy(g);
  }
  end_context();
}

// A builder call after tj_graph_finalize (the defects issue): a sticky
// INVALID_ARGUMENT naming the first call, nothing added, and nothing
// leaked (a late constant's data is not kept, a late input not declared).
TEST(builder_call_after_finalize) {
  begin_context();
  tj_graph_t* g = add_graph();
  CHECK_OK(tj_graph_finalize(g));
  float data[3] = {1, 2, 3};
  CHECK(tj_value_is_none(tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){3},
                                           data, sizeof(data))));
  CHECK(tj_value_is_none(
      tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, "late")));
  tj_graph_output(g, tj_graph_scalar(g, TJ_DTYPE_F32, 1.0), "late");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "tj_graph_constant: graph @hostile is finalized",
               tj_graph_status(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_graph_constant",
               tj_graph_finalize(g));
  CHECK_EQ_INT(1, tj_graph_num_inputs(g));
  CHECK_EQ_INT(1, tj_graph_num_outputs(g));
  tj_graph_destroy(g);
  end_context();
}

int main(void) {
  RUN_TEST(graph_input_rank_beyond_limit);
  RUN_TEST(run_tensor_rank_beyond_limit);
  RUN_TEST(null_tensor_data);
  RUN_TEST(null_tensor_shape);
  RUN_TEST(null_tensor_arrays);
  RUN_TEST(symbol_bound_to_two_values);
  RUN_TEST(symbol_bound_to_negative);
  RUN_TEST(dim_overflows_at_run_time);
  RUN_TEST(too_few_and_too_many_tensors);
  RUN_TEST(wrong_dtypes);
  RUN_TEST(wrong_devices);
  RUN_TEST(output_of_wrong_shape);
  RUN_TEST(null_context_arguments);
  RUN_TEST(null_graph_arguments);
  RUN_TEST(null_out_arguments);
  RUN_TEST(null_builder_pointers);
  RUN_TEST(null_executable_arguments);
  RUN_TEST(builder_dtype_out_of_range);
  RUN_TEST(op_queries_out_of_range);
  RUN_TEST(builder_axis_out_of_range);
  RUN_TEST(reshape_hostile);
  RUN_TEST(broadcast_to_hostile);
  RUN_TEST(slice_hostile);
  RUN_TEST(concat_hostile);
  RUN_TEST(pad_hostile);
  RUN_TEST(constant_buffer_smaller_than_its_type);
  RUN_TEST(builder_call_after_finalize);
  TEST_MAIN_END();
}
