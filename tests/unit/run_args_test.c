// Hostile arguments on every CPU target (x86 and the reference interpreter,
// through tj_compile and tj_executable_run): outputs that overlap an input,
// another output or themselves, pointers that wrap, symbolic dims that
// overflow only at run time, and the size rule of tj_graph.h (zero-element
// tensors with huge other dims included). Each refusal is INVALID_ARGUMENT
// naming the tensor or node, and nothing is written first. The memory
// checks are lib/run_args.c, shared with the CUDA target.

#include <stdint.h>

#include "tests/unit/test.h"

static tj_context_t* g_ctx;

static const tj_target_t kTargets[2] = {TJ_TARGET_X86, TJ_TARGET_REFERENCE};

static const char* target_name(tj_target_t t) {
  return t == TJ_TARGET_X86 ? "x86" : "reference";
}

static tj_graph_t* new_graph(void) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "t", &g));
  return g;
}

// Finalizes |g| and compiles it for |target|; NULL (and a failed check) on
// error.
static tj_executable_t* compile_for(tj_graph_t* g, tj_target_t target) {
  tj_executable_t* e = NULL;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = target;
  o.cache_dir = "";
  o.x86.num_threads = 2;
  CHECK_OK(tj_graph_finalize(g));
  CHECK_OK(tj_compile(g, &o, &e));
  return e;
}

static void fill(float* p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; ++i) p[i] = (float)((i * seed) % 13) - 6.0f;
}

static bool all_equal(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

//===--- outputs overlapping inputs ---===//

// y = x @ w (kind 0) or y = transpose(x) + w (kind 1) on [n, n] with y over
// x's own memory: refused on both targets, and x left as it was. The
// repro: x86 accepted it and gave wrong values at n >= 64.
TEST(output_over_input_refused) {
  const int n = 64;
  float* x = malloc(sizeof(float) * 2 * n * n);
  float* w = malloc(sizeof(float) * n * n);
  float* keep = malloc(sizeof(float) * 2 * n * n);
  fill(x, 2 * n * n, 7);
  fill(w, n * n, 5);
  memcpy(keep, x, sizeof(float) * 2 * n * n);
  for (int t = 0; t < 2; ++t) {
    for (int kind = 0; kind < 2; ++kind) {
      tj_graph_t* g = new_graph();
      int64_t B = tj_graph_symbol(g, "B");
      tj_value_t xv =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, n}, "x");
      tj_value_t wv =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){n, n}, "w");
      tj_value_t y =
          kind == 0 ? tj_graph_matmul(g, xv, wv)
                    : tj_graph_add(
                          g, tj_graph_transpose(g, xv, (int32_t[]){1, 0}), wv);
      tj_graph_output(g, y, "y");
      tj_executable_t* e = compile_for(g, kTargets[t]);
      int64_t sh[2] = {n, n};
      tj_tensor_t in[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, sh),
                           tj_tensor_make(w, TJ_DTYPE_F32, 2, sh)};
      // Exactly x, then half over x's end, then x read with a byte_offset.
      tj_tensor_t out = tj_tensor_make(x, TJ_DTYPE_F32, 2, sh);
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                   "output \"y\" overlaps input \"x\"",
                   tj_executable_run(e, in, 2, &out, 1));
      out.data = x + n * n / 2;
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                   "output \"y\" overlaps input \"x\"",
                   tj_executable_run(e, in, 2, &out, 1));
      out.data = x + n * n;  // y begins where x ends
      CHECK_OK(tj_executable_run(e, in, 2, &out, 1));
      in[0].byte_offset = sizeof(float);  // x one element into y
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                   "output \"y\" overlaps input \"x\"",
                   tj_executable_run(e, in, 2, &out, 1));
      // y over w, for the other operand.
      in[0] = tj_tensor_make(x, TJ_DTYPE_F32, 2, sh);
      out.data = w;
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                   "output \"y\" overlaps input \"w\"",
                   tj_executable_run(e, in, 2, &out, 1));
      if (!all_equal(x, keep, n * n)) {
        fprintf(stderr, "  %s kind %d wrote its input\n",
                target_name(kTargets[t]), kind);
        CHECK(false);
      }
      memcpy(x, keep, sizeof(float) * 2 * n * n);
      tj_executable_release(e);
      tj_graph_destroy(g);
    }
  }
  free(x);
  free(w);
  free(keep);
}

//===--- outputs overlapping themselves or each other ---===//

// y = -x on [4, 4] CPU tensors; |strides| for y (NULL dense).
static tj_status_t run_neg(tj_executable_t* e, const float* x, float* y,
                           const int64_t* out_strides, uint64_t byte_offset) {
  int64_t sh[2] = {4, 4};
  tj_tensor_t in = tj_tensor_make((void*)x, TJ_DTYPE_F32, 2, sh);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, sh);
  out.strides = out_strides;
  out.byte_offset = byte_offset;
  return tj_executable_run(e, &in, 1, &out, 1);
}

TEST(output_over_itself_refused) {
  float x[16], y[64];
  fill(x, 16, 3);
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = new_graph();
    tj_value_t xv = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "x");
    tj_graph_output(g, tj_graph_neg(g, xv), "y");
    tj_executable_t* e = compile_for(g, kTargets[t]);
    // A zero stride, two strides that land on one element, rows closer
    // than their length: two indices write one element.
    const int64_t bad[3][2] = {{0, 1}, {1, 1}, {2, 1}};
    for (int b = 0; b < 3; ++b) {
      for (int i = 0; i < 64; ++i) y[i] = 99.0f;
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                   "output \"y\": its strides make elements share memory",
                   run_neg(e, x, y, bad[b], 0));
      CHECK(y[0] == 99.0f && y[5] == 99.0f);  // nothing written first
    }
    // Layouts whose elements are distinct still run, and right: transposed,
    // padded rows, and reversed rows (byte_offset at the last row).
    const int64_t good[3][2] = {{1, 4}, {8, 1}, {-4, 1}};
    const uint64_t offsets[3] = {0, 0, 12 * sizeof(float)};
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 64; ++i) y[i] = 99.0f;
      CHECK_OK(run_neg(e, x, y, good[k], offsets[k]));
      const float* base = y + offsets[k] / sizeof(float);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          CHECK(base[i * good[k][0] + j * good[k][1]] == -x[i * 4 + j]);
        }
      }
    }
    // An input may repeat elements (a zero stride broadcasts a row).
    int64_t sh[2] = {4, 4}, bcast[2] = {0, 1};
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, sh);
    in.strides = bcast;
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, sh);
    CHECK_OK(tj_executable_run(e, &in, 1, &out, 1));
    CHECK(y[13] == -x[1]);
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

TEST(outputs_over_each_other_refused) {
  float x[8], buf[32];
  fill(x, 8, 3);
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = new_graph();
    tj_value_t xv = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "x");
    tj_graph_output(g, tj_graph_neg(g, xv), "a");
    tj_graph_output(g, tj_graph_add(g, xv, xv), "b");
    tj_graph_output(g, tj_graph_neg(g, xv), "c");  // the same value as "a"
    tj_executable_t* e = compile_for(g, kTargets[t]);
    int64_t sh[1] = {8};
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, sh);
    tj_tensor_t out[3] = {tj_tensor_make(buf, TJ_DTYPE_F32, 1, sh),
                          tj_tensor_make(buf + 8, TJ_DTYPE_F32, 1, sh),
                          tj_tensor_make(buf + 16, TJ_DTYPE_F32, 1, sh)};
    CHECK_OK(tj_executable_run(e, &in, 1, out, 3));  // adjacent is fine
    CHECK(buf[3] == -x[3] && buf[11] == 2 * x[3] && buf[19] == -x[3]);
    out[1].data = buf + 4;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                 "output \"b\" overlaps output \"a\"",
                 tj_executable_run(e, &in, 1, out, 3));
    out[1].data = buf + 8;
    out[2].data = buf;  // one value, two outputs, one memory
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                 "output \"c\" overlaps output \"a\"",
                 tj_executable_run(e, &in, 1, out, 3));
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

//===--- pointers that wrap ---===//

TEST(wrapping_pointers_refused) {
  float x[16], y[16];
  fill(x, 16, 3);
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = new_graph();
    tj_value_t xv = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "x");
    tj_graph_output(g, tj_graph_neg(g, xv), "y");
    tj_executable_t* e = compile_for(g, kTargets[t]);
    int64_t sh[2] = {4, 4};
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, sh);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, sh);
    out.byte_offset = UINT64_MAX - 3;  // data + byte_offset wraps
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output \"y\": data",
                 tj_executable_run(e, &in, 1, &out, 1));
    out.byte_offset = 0;
    in.byte_offset = UINT64_MAX - (uint64_t)(uintptr_t)x + 8;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "input \"x\": data",
                 tj_executable_run(e, &in, 1, &out, 1));
    // Reversed rows from the start of the address space reach below 0.
    int64_t rev[2] = {-4, 1};
    in = tj_tensor_make((void*)(uintptr_t)16, TJ_DTYPE_F32, 2, sh);
    in.strides = rev;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "leave the address space",
                 tj_executable_run(e, &in, 1, &out, 1));
    // Strides whose reach overflows int64.
    int64_t huge[2] = {INT64_MAX / 2, 1};
    in = tj_tensor_make(x, TJ_DTYPE_F32, 2, sh);
    in.strides = huge;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "input \"x\": its strides reach",
                 tj_executable_run(e, &in, 1, &out, 1));
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

//===--- hostile dims ---===//

// full[big] with big = B + (2^63 - 2), B * 2^62, B * 2^61 + 2^62: finalizes
// (the dim is symbolic) and overflows int64 only once B = 3 is bound.
TEST(symbolic_dim_overflow_at_run_time) {
  for (int t = 0; t < 2; ++t) {
    for (int kind = 0; kind < 3; ++kind) {
      tj_graph_t* g = new_graph();
      int64_t B = tj_graph_symbol(g, "B");
      int64_t big =
          kind == 0 ? tj_graph_dim_add(g, B, INT64_MAX - 1)
          : kind == 1
              ? tj_graph_dim_mul(g, B, (int64_t)1 << 62)
              : tj_graph_dim_add(g, tj_graph_dim_mul(g, B, (int64_t)1 << 61),
                                 (int64_t)1 << 62);
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
      tj_value_t f = tj_graph_full(g, TJ_DTYPE_F32, 1, (int64_t[]){big}, 1.0);
      tj_graph_output(g,
                      tj_graph_add(g, tj_graph_sum(g, f, 0, NULL, false),
                                   tj_graph_sum(g, x, 0, NULL, false)),
                      "y");
      tj_executable_t* e = compile_for(g, kTargets[t]);
      float xs[3] = {1, 2, 3}, y = 0;
      tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){3});
      tj_tensor_t out = tj_tensor_make(&y, TJ_DTYPE_F32, 0, NULL);
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "overflows int64",
                   tj_executable_run(e, &in, 1, &out, 1));
      int32_t rank;
      int64_t dims[TJ_MAX_RANK];
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "full (node %1) dim 0",
                   tj_executable_output_shape(e, &in, 1, 0, &rank, dims));
      CHECK(y == 0);
      tj_executable_release(e);
      tj_graph_destroy(g);
    }
  }
}

// full, iota, broadcast_to and reshape whose size overflows: refused when
// the node is built, whatever the target.
TEST(huge_constant_dims_refused_when_built) {
  const int64_t shapes[2][2] = {{INT64_MAX, 4}, {(int64_t)1 << 62, 4}};
  for (int s = 0; s < 2; ++s) {
    for (int kind = 0; kind < 4; ++kind) {
      tj_graph_t* g = new_graph();
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
      tj_value_t v;
      const int64_t* d = shapes[s];
      switch (kind) {
        case 0:
          v = tj_graph_full(g, TJ_DTYPE_F32, 2, d, 1.0);
          break;
        case 1:
          v = tj_graph_iota(g, TJ_DTYPE_F32, 2, d, 0);
          break;
        case 2:
          v = tj_graph_broadcast_to(g, x, 2, d);
          break;
        default:
          v = tj_graph_reshape(g, tj_graph_broadcast_to(g, x, 2, d), 1,
                               (int64_t[]){-1});
          break;
      }
      tj_graph_output(g, tj_graph_sum(g, v, 0, NULL, false), "y");
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "more than 2^48 bytes",
                   tj_graph_finalize(g));
      tj_graph_destroy(g);
    }
  }
}

// The size rule leaves zero dims out of the product: an empty tensor with
// huge other dims is refused, when built and at run time, on both targets
// alike; one with modest other dims runs.
TEST(zero_element_tensors_one_rule) {
  float dummy[4] = {0};
  for (int kind = 0; kind < 2; ++kind) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){2}, "x");
    tj_value_t v =
        kind == 0 ? tj_graph_constant(g, TJ_DTYPE_F32, 3,
                                      (int64_t[]){INT64_MAX, 2, 0}, dummy, 0)
                  : tj_graph_broadcast_to(
                        g, x, 4, (int64_t[]){(int64_t)1 << 62, 4, 0, 2});
    tj_graph_output(g, v, "y");
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "without its zero dims",
                 tj_graph_finalize(g));
    tj_graph_destroy(g);
  }
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = new_graph();
    int64_t B = tj_graph_symbol(g, "B"), N = tj_graph_symbol(g, "N");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, N}, "x");
    tj_graph_output(g, tj_graph_neg(g, x), "y");
    tj_executable_t* e = compile_for(g, kTargets[t]);
    int64_t huge[2] = {0, (int64_t)1 << 62}, fine[2] = {0, (int64_t)1 << 40};
    tj_tensor_t in = tj_tensor_make(NULL, TJ_DTYPE_F32, 2, huge);
    tj_tensor_t out = tj_tensor_make(NULL, TJ_DTYPE_F32, 2, huge);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "without its zero dims",
                 tj_executable_run(e, &in, 1, &out, 1));
    int32_t rank;
    int64_t dims[TJ_MAX_RANK];
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "without its zero dims",
                 tj_executable_output_shape(e, &in, 1, 0, &rank, dims));
    in.shape = out.shape = fine;
    CHECK_OK(tj_executable_output_shape(e, &in, 1, 0, &rank, dims));
    CHECK(rank == 2 && dims[0] == 0 && dims[1] == fine[1]);
    CHECK_OK(tj_executable_run(e, &in, 1, &out, 1));
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

//===--- rank 0 ---===//

// A rank-0 slice and pad have no ints (NULL): no pass may offset that
// pointer (clang's UBSan in the sanitizer build reports NULL + 0), and both
// targets give x back.
TEST(rank0_slice_and_pad) {
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = new_graph();
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "x");
    tj_value_t s = tj_graph_slice(g, x, NULL, NULL, NULL);
    tj_graph_output(g, tj_graph_add(g, s, tj_graph_pad(g, x, NULL, NULL, 0.0)),
                    "y");
    tj_executable_t* e = compile_for(g, kTargets[t]);
    char* text = NULL;
    CHECK_OK(tj_graph_print(g, &text));
    CHECK(text && strstr(text, "slice"));
    tj_context_free_string(g_ctx, text);
    float xs = 1.5f, y = 0;
    tj_tensor_t in = tj_tensor_make(&xs, TJ_DTYPE_F32, 0, NULL);
    tj_tensor_t out = tj_tensor_make(&y, TJ_DTYPE_F32, 0, NULL);
    CHECK_OK(tj_executable_run(e, &in, 1, &out, 1));
    CHECK(y == 3.0f);
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

int main(void) {
  if (tj_context_create(NULL, &g_ctx)) return 1;
  RUN_TEST(output_over_input_refused);
  RUN_TEST(output_over_itself_refused);
  RUN_TEST(outputs_over_each_other_refused);
  RUN_TEST(wrapping_pointers_refused);
  RUN_TEST(symbolic_dim_overflow_at_run_time);
  RUN_TEST(huge_constant_dims_refused_when_built);
  RUN_TEST(zero_element_tensors_one_rule);
  RUN_TEST(rank0_slice_and_pad);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
