// Region compile (issue 16): a block repeated N times (a stacked MLP, N
// layers with different weights) compiles the kernels of one block; the
// others share their code. Checked on x86: equal numbers against the
// reference interpreter, kernels compiled (cache_misses) equal to one
// layer's, num_shared_kernels the rest, and the OOM sweep over the path.
// Prints the compile time of 1, 8 and 24 layers (not asserted).

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensorjit.h"
#include "tests/unit/test.h"

enum { WIDTH = 32, MAX_LAYERS = 24 };

// x[B, WIDTH] -> per layer: h = h + tanh(h @ w_i + b_i) * 0.5, then
// layer-normalized (no affine): every layer a GEMM with an epilogue and a
// row reduction, over its own weights w_i, b_i (graph inputs).
static tj_status_t build_mlp(tj_context_t* ctx, int layers, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_status_t s = tj_graph_create(ctx, "mlp", &g);
  if (s) return s;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t h = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, WIDTH}, "x");
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  for (int l = 0; l < layers; ++l) {
    char wn[16], bn[16];
    snprintf(wn, sizeof(wn), "w%d", l);
    snprintf(bn, sizeof(bn), "b%d", l);
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){WIDTH, WIDTH}, wn);
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){WIDTH}, bn);
    tj_value_t z = tj_graph_add(g, tj_graph_matmul(g, h, w), b);
    h = tj_graph_add(g, h, tj_graph_mul(g, tj_graph_tanh(g, z), half));
    h = tj_graph_layer_norm(g, h, tj_value_none(), tj_value_none(), 1e-5);
  }
  tj_graph_output(g, h, "y");
  s = tj_graph_finalize(g);
  if (s) {
    tj_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

static float g_weights[MAX_LAYERS][WIDTH * WIDTH];
static float g_biases[MAX_LAYERS][WIDTH];

static void fill_weights(void) {
  for (int l = 0; l < MAX_LAYERS; ++l) {
    for (int i = 0; i < WIDTH * WIDTH; ++i)
      g_weights[l][i] = (float)(sin(i * 0.37 + l * 1.9) * 0.3);
    for (int i = 0; i < WIDTH; ++i)
      g_biases[l][i] = (float)cos(i * 0.11 + l) * 0.1f;
  }
}

// The inputs of an |layers|-layer graph for batch |b| over |x|.
static void make_inputs(int layers, int64_t* b, float* x, tj_tensor_t* in) {
  static const int64_t kSquare[2] = {WIDTH, WIDTH}, kRow[1] = {WIDTH};
  in[0] = tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){0, 0});
  in[0].shape = b;  // {B, WIDTH}
  for (int l = 0; l < layers; ++l) {
    in[1 + 2 * l] = tj_tensor_make(g_weights[l], TJ_DTYPE_F32, 2, kSquare);
    in[2 + 2 * l] = tj_tensor_make(g_biases[l], TJ_DTYPE_F32, 1, kRow);
  }
}

// Compiles an |layers|-layer stack in a fresh context twice: |*ms| is the
// cold compile's time, |*warm_ms| the second's (the memory cache warm).
static tj_executable_stats_t compile_stats(int layers, double* ms,
                                           double* warm_ms) {
  tj_context_t* ctx = NULL;  // fresh: no memory cache, no disk cache
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(build_mlp(ctx, layers, &g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  *ms = st.compile_ms;
  tj_executable_release(exe);
  exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  tj_executable_stats_t warm = {.struct_size = sizeof(warm)};
  tj_executable_stats(exe, &warm);
  *warm_ms = warm.compile_ms;
  CHECK_EQ_INT(0, (int)warm.cache_misses);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(stacked_layers_compile_one_layer) {
  double ms1, ms8, ms24, w1, w8, w24;
  tj_executable_stats_t one = compile_stats(1, &ms1, &w1);
  tj_executable_stats_t eight = compile_stats(8, &ms8, &w8);
  tj_executable_stats_t many = compile_stats(24, &ms24, &w24);
  CHECK(one.num_kernels >= 2);
  CHECK_EQ_INT(0, one.num_shared_kernels);
  CHECK_EQ_INT(8 * one.num_kernels, eight.num_kernels);
  CHECK_EQ_INT(24 * one.num_kernels, many.num_kernels);
  // The kernels compiled are one layer's; the other layers share them.
  CHECK_EQ_INT((int)one.cache_misses, (int)eight.cache_misses);
  CHECK_EQ_INT((int)one.cache_misses, (int)many.cache_misses);
  CHECK_EQ_INT(eight.num_kernels - one.num_kernels, eight.num_shared_kernels);
  CHECK_EQ_INT(many.num_kernels - one.num_kernels, many.num_shared_kernels);
  printf(
      "# cold compile: 1 layer %.1f ms, 8 layers %.1f ms (%.2fx), 24 layers "
      "%.1f ms (%.2fx); %d kernels per layer\n",
      ms1, ms8, ms8 / ms1, ms24, ms24 / ms1, one.num_kernels);
  printf(
      "# warm compile: 1 layer %.2f ms, 8 layers %.2f ms (%.2fx), 24 layers "
      "%.2f ms (%.2fx)\n",
      w1, w8, w8 / w1, w24, w24 / w1);
}

// The shared kernels compute each layer with its own weights: the 8-layer
// stack against the reference interpreter at two batches.
TEST(shared_kernels_equal_the_reference) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(build_mlp(ctx, 8, &g));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK(st.num_shared_kernels > 0);
  static float x[17 * WIDTH], y[17 * WIDTH], r[17 * WIDTH];
  for (int64_t b = 3; b <= 17; b += 14) {
    for (int64_t i = 0; i < b * WIDTH; ++i) x[i] = (float)sin(i * 0.7) * 2;
    int64_t shape[2] = {b, WIDTH};
    tj_tensor_t in[1 + 2 * 8];
    make_inputs(8, shape, x, in);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t ref = tj_tensor_make(r, TJ_DTYPE_F32, 2, shape);
    CHECK_OK(tj_executable_run(exe, in, 1 + 2 * 8, &out, 1));
    CHECK_OK(tj_reference_run(g, in, 1 + 2 * 8, &ref, 1));
    double worst = 0;
    for (int64_t i = 0; i < b * WIDTH; ++i) {
      double e = fabs((double)y[i] - (double)r[i]);
      if (e > worst) worst = e;
    }
    CHECK(worst <= 1e-3);
    if (worst > 1e-3)
      fprintf(stderr, "B=%lld: max error %g\n", (long long)b, worst);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Compile + run of a 3-layer stack with the Nth allocation failing.
static tj_status_t compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = build_mlp(ctx, 3, &g);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float x[2 * WIDTH], y[2 * WIDTH];
    for (int i = 0; i < 2 * WIDTH; ++i) x[i] = (float)i * 0.01f;
    int64_t shape[2] = {2, WIDTH};
    tj_tensor_t in[1 + 2 * 3];
    make_inputs(3, shape, x, in);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    s = tj_executable_run(exe, in, 1 + 2 * 3, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) { tj_test_oom_sweep("region compile", compile_run); }

int main(void) {
  fill_weights();
  RUN_TEST(stacked_layers_compile_one_layer);
  RUN_TEST(shared_kernels_equal_the_reference);
  RUN_TEST(oom_sweep);
  TEST_MAIN_END();
}
