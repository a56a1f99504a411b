// Region compile (issue 16): a block repeated N times (a stacked MLP, N
// layers with different weights) compiles the kernels of one block; the
// others share their code. Checked on x86: equal numbers against the
// reference interpreter, kernels compiled (cache_misses) equal to one
// layer's, num_shared_kernels the rest, and the OOM sweep over the path.
// A warm compile of an equal graph shares the compiled graph (the compile
// memo), also after every executable of it was released (the context
// keeps the compiled core: retain_compiled), and the kernels' cache key
// does not depend on the layer count.
// Prints the compile time of 1, 8 and 24 layers (not asserted).

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/compile.h"
#include "backends/reference/reference_eval.h"
#include "backends/runtime/run_plan.h"
#include "backends/x86/x86_backend.h"
#include "lib/passes/pass.h"
#include "tensorjit.h"
#include "tests/unit/test.h"

enum { WIDTH = 32, MAX_LAYERS = 24 };

// The stacks' common end: |h| the output "y", |g| finalized into |*out|
// (destroyed on failure).
static tj_status_t finish_stack(tj_graph_t* g, tj_value_t h, tj_graph_t** out) {
  tj_graph_output(g, h, "y");
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    tj_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

// A stack's start: the graph "mlp" and its input x[B, WIDTH], |*out_x|
// (B in |*out_batch| unless NULL).
static tj_status_t start_stack(tj_context_t* ctx, tj_graph_t** out_g,
                               tj_value_t* out_x, int64_t* out_batch) {
  tj_status_t s = tj_graph_create(ctx, "mlp", out_g);
  if (s) return s;
  int64_t B = tj_graph_symbol(*out_g, "B");
  *out_x = tj_graph_input(*out_g, TJ_DTYPE_F32, 2, (int64_t[]){B, WIDTH}, "x");
  if (out_batch) *out_batch = B;
  return NULL;
}

// Layer |l|'s weights: the inputs w<l>[WIDTH, WIDTH] and b<l>[WIDTH].
static void layer_weights(tj_graph_t* g, int l, tj_value_t* out_w,
                          tj_value_t* out_b) {
  char wn[16], bn[16];
  snprintf(wn, sizeof(wn), "w%d", l);
  snprintf(bn, sizeof(bn), "b%d", l);
  *out_w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){WIDTH, WIDTH}, wn);
  *out_b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){WIDTH}, bn);
}

// A layer's parts: z = h @ w + b; h + t * c; the norm (no affine).
static tj_value_t linear(tj_graph_t* g, tj_value_t h, tj_value_t w,
                         tj_value_t b) {
  return tj_graph_add(g, tj_graph_matmul(g, h, w), b);
}

static tj_value_t residual(tj_graph_t* g, tj_value_t h, tj_value_t t,
                           tj_value_t c) {
  return tj_graph_add(g, h, tj_graph_mul(g, t, c));
}

static tj_value_t norm(tj_graph_t* g, tj_value_t h) {
  return tj_graph_layer_norm(g, h, tj_value_none(), tj_value_none(), 1e-5);
}

// x[B, WIDTH] -> per layer: h = h + tanh(h @ w_i + b_i) * 0.5, then
// layer-normalized (no affine): every layer a GEMM with an epilogue and a
// row reduction, over its own weights w_i, b_i (graph inputs).
static tj_status_t build_mlp_scaled(tj_context_t* ctx, int layers, double scale,
                                    tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t h;
  tj_status_t s = start_stack(ctx, &g, &h, NULL);
  if (s) return s;
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, scale);
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    tj_value_t z = linear(g, h, w, b);
    h = norm(g, residual(g, h, tj_graph_tanh(g, z), half));
  }
  return finish_stack(g, h, out);
}

static tj_status_t build_mlp(tj_context_t* ctx, int layers, tj_graph_t** out) {
  return build_mlp_scaled(ctx, layers, 0.5, out);
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

// Compiles an |layers|-layer stack in a fresh context three times: |*ms|
// is the cold compile's time, |*warm_ms| the second's while the first
// executable lives (shared, compile_memo.c), |*reload_ms| the third's after
// both were released (the kernels from the memory cache).
static tj_executable_stats_t compile_stats(int layers, double* ms,
                                           double* warm_ms, double* reload_ms) {
  tj_context_t* ctx = NULL;  // fresh: no memory cache, no disk cache
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(build_mlp(ctx, layers, &g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  tj_executable_t *exe = NULL, *warm_exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  *ms = st.compile_ms;
  CHECK_OK(tj_compile(g, &opts, &warm_exe));
  tj_executable_stats_t warm = {.struct_size = sizeof(warm)};
  tj_executable_stats(warm_exe, &warm);
  *warm_ms = warm.compile_ms;
  CHECK_EQ_INT(0, (int)warm.cache_misses);
  tj_executable_release(exe);
  tj_executable_release(warm_exe);
  exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  tj_executable_stats_t reload = {.struct_size = sizeof(reload)};
  tj_executable_stats(exe, &reload);
  *reload_ms = reload.compile_ms;
  CHECK_EQ_INT(0, (int)reload.cache_misses);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(stacked_layers_compile_one_layer) {
  double ms1, ms8, ms24, w1, w8, w24, r1, r8, r24;
  tj_executable_stats_t one = compile_stats(1, &ms1, &w1, &r1);
  tj_executable_stats_t eight = compile_stats(8, &ms8, &w8, &r8);
  tj_executable_stats_t many = compile_stats(24, &ms24, &w24, &r24);
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
      "# warm compile: 1 layer %.4f ms, 8 layers %.4f ms (%.2fx), 24 layers "
      "%.4f ms (%.2fx)\n",
      w1, w8, w8 / w1, w24, w24 / w1);
  printf(
      "# after release (kernel cache): 1 layer %.2f ms, 8 layers %.2f ms "
      "(%.2fx), 24 layers %.2f ms (%.2fx)\n",
      r1, r8, r8 / r1, r24, r24 / r1);
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

// Runs |exe| (compiled from |g|, |layers| layers) at batch 5 and checks
// it against the reference interpreter.
static void check_against_reference(tj_executable_t* exe, const tj_graph_t* g,
                                    int layers) {
  static float x[5 * WIDTH], y[5 * WIDTH], r[5 * WIDTH];
  for (int64_t i = 0; i < 5 * WIDTH; ++i) x[i] = (float)cos(i * 0.3) * 1.5f;
  int64_t shape[2] = {5, WIDTH};
  tj_tensor_t in[1 + 2 * MAX_LAYERS];
  make_inputs(layers, shape, x, in);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
  tj_tensor_t ref = tj_tensor_make(r, TJ_DTYPE_F32, 2, shape);
  CHECK_OK(tj_executable_run(exe, in, 1 + 2 * layers, &out, 1));
  CHECK_OK(tj_reference_run(g, in, 1 + 2 * layers, &ref, 1));
  double worst = 0;
  for (int64_t i = 0; i < 5 * WIDTH; ++i) {
    double e = fabs((double)y[i] - (double)r[i]);
    if (!(e <= worst)) worst = e;
  }
  CHECK(worst <= 1e-3);
  if (!(worst <= 1e-3))
    fprintf(stderr, "%d layers: max error %g\n", layers, worst);
}

static tj_executable_stats_t stats_of(const tj_executable_t* exe) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  return st;
}

// A warm compile of an equal graph (the same one, or one built again)
// while an executable of it lives runs no pass and lowers and loads
// nothing: it shares that compile's processed graph, run plan and
// kernels, which outlive the first executable and the graphs, and even the
// host's context handle.
TEST(warm_compile_shares_the_compiled_graph) {
  for (int layers = 1; layers <= MAX_LAYERS; layers += 23) {
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    tj_graph_t *g1 = NULL, *g2 = NULL, *g3 = NULL;
    CHECK_OK(build_mlp(ctx, layers, &g1));
    CHECK_OK(build_mlp(ctx, layers, &g2));
    tj_executable_t *e1 = NULL, *e2 = NULL, *e3 = NULL;
    CHECK_OK(tj_compile(g1, NULL, &e1));
    tj_executable_stats_t cold = stats_of(e1);
    CHECK(cold.passes_ms > 0);
    CHECK(cold.cache_misses > 0);
    CHECK_OK(tj_compile(g1, NULL, &e2));  // the same graph
    tj_executable_release(e1);            // the core lives on
    tj_graph_destroy(g1);
    CHECK_OK(tj_compile(g2, NULL, &e3));  // an equal graph built again
    const tj_executable_t* warm[2] = {e2, e3};
    for (int i = 0; i < 2; ++i) {
      tj_executable_stats_t st = stats_of(warm[i]);
      CHECK(st.passes_ms == 0 && st.lowering_ms == 0);
      CHECK_EQ_INT(0, (int)st.cache_misses);
      CHECK_EQ_INT((int)(cold.cache_misses + cold.cache_hits),
                   (int)st.cache_hits);
      CHECK_EQ_INT(cold.num_kernels, st.num_kernels);
      CHECK_EQ_INT(cold.num_shared_kernels, st.num_shared_kernels);
    }
    check_against_reference(e2, g2, layers);
    check_against_reference(e3, g2, layers);
    // A different constant is a different graph: compiled, not shared.
    CHECK_OK(build_mlp_scaled(ctx, layers, 0.25, &g3));
    tj_executable_t* e4 = NULL;
    CHECK_OK(tj_compile(g3, NULL, &e4));
    CHECK(stats_of(e4).passes_ms > 0);
    check_against_reference(e4, g3, layers);
    tj_executable_release(e2);
    tj_graph_destroy(g2);
    tj_graph_destroy(g3);
    // The host lets go of the context first: the executables keep it.
    tj_context_destroy(ctx);
    float x[WIDTH], y[WIDTH];
    for (int i = 0; i < WIDTH; ++i) x[i] = (float)i * 0.05f;
    int64_t shape[2] = {1, WIDTH};
    tj_tensor_t in[1 + 2 * MAX_LAYERS];
    make_inputs(layers, shape, x, in);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    CHECK_OK(tj_executable_run(e3, in, 1 + 2 * layers, &out, 1));
    tj_executable_release(e3);
    tj_executable_release(e4);
  }
}

// The kernels' memory-cache key does not depend on the number of layers:
// after a 1-layer stack, a 24-layer one in the same context compiles no
// kernel.
TEST(kernel_cache_key_ignores_the_layer_count) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t *one = NULL, *many = NULL;
  CHECK_OK(build_mlp(ctx, 1, &one));
  CHECK_OK(build_mlp(ctx, MAX_LAYERS, &many));
  tj_executable_t *e1 = NULL, *e24 = NULL;
  CHECK_OK(tj_compile(one, NULL, &e1));
  CHECK_OK(tj_compile(many, NULL, &e24));
  tj_executable_stats_t s1 = stats_of(e1), s24 = stats_of(e24);
  CHECK(s1.cache_misses > 0);
  CHECK_EQ_INT(0, (int)s24.cache_misses);
  CHECK_EQ_INT((int)s1.cache_misses, (int)s24.cache_hits);
  check_against_reference(e24, many, MAX_LAYERS);
  tj_executable_release(e1);
  tj_executable_release(e24);
  tj_graph_destroy(one);
  tj_graph_destroy(many);
  tj_context_destroy(ctx);
}

// The context keeps a released executable's compiled core (retain_compiled,
// 8 by default): compiling the same graph, or an equal one built again,
// after every executable of it is gone takes it back: no pass, no
// lowering, no module loaded, the same results. With retain_compiled = 2
// the least recently released goes first, and with 0 nothing is kept
// (the passes run again). The retained cores go with the context: the
// counting allocator sees nothing left.
TEST(released_executable_is_kept_for_an_equal_compile) {
  for (int retain = 0; retain <= 8; retain += 2) {
    if (retain == 4 || retain == 6) continue;
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_options_t co = tj_test_context_options();
    co.allocator = tj_test_allocator_get(&alloc);
    co.retain_compiled = retain;
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    // Three distinct stacks (scales 1, 0.5, 0.25), compiled and released
    // in that order.
    tj_graph_t* g[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; ++k) {
      CHECK_OK(build_mlp_scaled(ctx, MAX_LAYERS, 1.0 / (1 << k), &g[k]));
      tj_executable_t* e = NULL;
      CHECK_OK(tj_compile(g[k], NULL, &e));
      CHECK(stats_of(e).passes_ms > 0);
      tj_executable_release(e);
    }
    tj_x86_jit_stats_t before, after;
    tj_x86_jit_stats(tj_x86_context_jit(ctx), &before);
    // The last one, rebuilt: kept under every nonzero bound.
    tj_graph_t* again = NULL;
    CHECK_OK(build_mlp_scaled(ctx, MAX_LAYERS, 0.25, &again));
    tj_executable_t* e = NULL;
    CHECK_OK(tj_compile(again, NULL, &e));
    tj_executable_stats_t st = stats_of(e);
    tj_x86_jit_stats(tj_x86_context_jit(ctx), &after);
    if (retain > 0) {
      CHECK(st.passes_ms == 0 && st.lowering_ms == 0);
      CHECK_EQ_INT(0, (int)st.cache_misses);
      CHECK_EQ_INT((int)before.loads, (int)after.loads);
    } else {
      CHECK(st.passes_ms > 0);
      CHECK(after.loads > before.loads);
    }
    check_against_reference(e, again, MAX_LAYERS);
    tj_executable_release(e);
    // The first one: kept only when the bound holds all three.
    CHECK_OK(tj_compile(g[0], NULL, &e));
    st = stats_of(e);
    CHECK(retain >= 3 ? st.passes_ms == 0 : st.passes_ms > 0);
    check_against_reference(e, g[0], MAX_LAYERS);
    tj_executable_release(e);
    tj_graph_destroy(again);
    for (int k = 0; k < 3; ++k) tj_graph_destroy(g[k]);
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
  }
}

// Compile + run of a 3-layer stack with the Nth allocation failing; then
// again after the release (the core kept by the context, taken back).
// Like build_mlp_scaled, each layer's scale its own one-element constant:
// |scales|[l] (a constant lowering inlines, so layers of other scales are
// other kernels).
static tj_status_t build_mlp_scales(tj_context_t* ctx, int layers,
                                    const double* scales, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t h;
  tj_status_t s = start_stack(ctx, &g, &h, NULL);
  if (s) return s;
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    tj_value_t z = linear(g, h, w, b);
    tj_value_t c = tj_graph_scalar(g, TJ_DTYPE_F32, scales[l]);
    h = norm(g, residual(g, h, tj_graph_tanh(g, z), c));
  }
  return finish_stack(g, h, out);
}

// The run plan of |exe| built again, with and without copying the kernels
// of equal groups: the same kernels, printed text (names included), buffer
// nodes, params and preconditions alike. |*out_lowered|: groups lowered
// with copying.
static void check_copies_equal_lowering(const tj_executable_t* exe,
                                        uint32_t* out_lowered,
                                        uint32_t* out_stitched) {
  const tj_run_plan_t* rp = tj_executable_run_plan(exe);
  // The groups the region stitching made from another (tj_fusion_t.copy_of),
  // which the run plan copies without comparing: each equals its source as
  // lowering reads it.
  const uint32_t* of = rp->fusion->copy_of;
  *out_stitched = 0;
  for (uint32_t q = 0; of && q < rp->fusion->num_groups; ++q) {
    if (of[q] == TJ_GROUP_NONE) continue;
    CHECK(of[q] < q);
    CHECK(of[q] < q && tj_lower_group_same(rp->graph, rp->fusion, of[q], q));
    ++*out_stitched;
  }
  tj_plan_t plan = {rp->context, rp->graph, (tj_fusion_t*)rp->fusion,
                    (tj_memplan_t*)rp->memplan};
  tj_run_plan_t copied, lowered;
  tj_lowered_kernel_t *kc = NULL, *kl = NULL;
  CHECK_OK(tj_run_plan_build(&copied, rp->context, rp->allocator, &plan, 0,
                             true, NULL, NULL, &kc));
  CHECK_OK(tj_run_plan_build(&lowered, rp->context, rp->allocator, &plan, 0,
                             false, NULL, NULL, &kl));
  CHECK_EQ_INT((int)lowered.num_kernels, (int)copied.num_kernels);
  CHECK_EQ_INT(0, (int)lowered.num_copied_groups);
  CHECK_EQ_INT((int)lowered.num_lowered_groups,
               (int)(copied.num_lowered_groups + copied.num_copied_groups));
  for (uint32_t i = 0; i < copied.num_kernels; ++i) {
    const tj_lowered_kernel_t *a = &kc[i], *b = &kl[i];
    char *ta = NULL, *tb = NULL;
    CHECK_OK(tj_kir_print(a->kernel, &ta));
    CHECK_OK(tj_kir_print(b->kernel, &tb));
    CHECK(strcmp(ta, tb) == 0);
    if (strcmp(ta, tb) != 0)
      fprintf(stderr, "copied:\n%s\nlowered:\n%s", ta, tb);
    CHECK(tj_kir_same_code(a->kernel, b->kernel));
    CHECK_EQ_INT((int)b->num_buffers, (int)a->num_buffers);
    CHECK(memcmp(a->buffer_nodes, b->buffer_nodes,
                 sizeof(uint32_t) * b->num_buffers) == 0);
    CHECK_EQ_INT((int)b->num_params, (int)a->num_params);
    CHECK(memcmp(a->param_dims, b->param_dims,
                 sizeof(int64_t) * b->num_params) == 0);
    CHECK(memcmp(a->buffer_offset_dims, b->buffer_offset_dims,
                 sizeof(int64_t) * b->num_buffers) == 0);
    CHECK_EQ_INT((int)b->nonempty_node, (int)a->nonempty_node);
    CHECK((a->dims == NULL) == (b->dims == NULL));
    tj_context_free_string(rp->context, ta);
    tj_context_free_string(rp->context, tb);
  }
  *out_lowered = copied.num_lowered_groups;
  // Specialized to B = 5 (every size a constant): the copies again as a
  // fresh lowering of each group makes them.
  const int64_t sym[1] = {5};
  tj_lowered_kernel_t* ks = NULL;
  CHECK_OK(tj_run_plan_lower(rp, sym, &ks));
  for (uint32_t q = 0; ks && q < rp->num_steps; ++q) {
    const tj_run_step_t* step = &rp->steps[q];
    if (step->kind != TJ_RUN_STEP_KERNELS) continue;
    char name[64];
    snprintf(name, sizeof(name), "sg%u_%s", q,
             tj_group_kind_name(rp->fusion->groups[q].kind));
    tj_lowered_kernel_t fresh[TJ_LOWER_MAX_GROUP_KERNELS];
    uint32_t got = 0;
    CHECK_OK(tj_lower_group(rp->graph, rp->fusion, rp->memplan, q, sym,
                            rp->allocator, name, fresh,
                            TJ_LOWER_MAX_GROUP_KERNELS, &got));
    CHECK_EQ_INT((int)step->num_kernels, (int)got);
    for (uint32_t k = 0; k < got && k < step->num_kernels; ++k) {
      char *ta = NULL, *tb = NULL;
      CHECK_OK(tj_kir_print(ks[step->first_kernel + k].kernel, &ta));
      CHECK_OK(tj_kir_print(fresh[k].kernel, &tb));
      CHECK(strcmp(ta, tb) == 0);
      CHECK(memcmp(ks[step->first_kernel + k].buffer_nodes,
                   fresh[k].buffer_nodes,
                   sizeof(uint32_t) * fresh[k].num_buffers) == 0);
      tj_context_free_string(rp->context, ta);
      tj_context_free_string(rp->context, tb);
    }
    for (uint32_t k = 0; k < got; ++k)
      tj_lowered_kernel_deinitialize(&fresh[k]);
  }
  tj_run_plan_free_kernels(rp->allocator, ks, rp->num_kernels);
  tj_run_plan_free_kernels(rp->allocator, kc, copied.num_kernels);
  tj_run_plan_free_kernels(rp->allocator, kl, lowered.num_kernels);
  tj_run_plan_deinitialize(&copied);
  tj_run_plan_deinitialize(&lowered);
}

// Runs |exe| (|layers| layers, weights from layer |first| on) on |x| at
// batch 5 into |y|.
static void run_layers(tj_executable_t* exe, int layers, int first,
                       const float* x, float* y) {
  static const int64_t kSquare[2] = {WIDTH, WIDTH}, kRow[1] = {WIDTH};
  int64_t shape[2] = {5, WIDTH};
  tj_tensor_t in[1 + 2 * MAX_LAYERS];
  in[0] = tj_tensor_make((void*)x, TJ_DTYPE_F32, 2, shape);
  for (int l = 0; l < layers; ++l) {
    in[1 + 2 * l] =
        tj_tensor_make(g_weights[first + l], TJ_DTYPE_F32, 2, kSquare);
    in[2 + 2 * l] = tj_tensor_make(g_biases[first + l], TJ_DTYPE_F32, 1, kRow);
  }
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
  CHECK_OK(tj_executable_run(exe, in, 1 + 2 * layers, &out, 1));
}

// Region compile in lowering: of a 24-layer stack's groups, only the
// distinct ones are lowered (as many as for 1 and 8 layers: independent of
// N; block 1, written in place of block 0's value, copies block 0, which
// reads the graph's input, its carried value first among its inputs),
// the others copy an equal group's kernels, and the copies are what
// lowering would have made. The stack computes bit for bit what 24
// separately compiled 1-layer graphs chained by hand do, on every ISA
// tier. Layers whose one-element scale differs are not copies.
TEST(equal_groups_are_lowered_once) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  uint32_t lowered_at[3] = {0, 0, 0};
  int counts[3] = {1, 8, MAX_LAYERS};
  for (int c = 0; c < 3; ++c) {
    tj_graph_t* g = NULL;
    CHECK_OK(build_mlp(ctx, counts[c], &g));
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.x86.num_threads = 1;
    opts.pipeline = "default";  // no compile memo: lowered every time
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    tj_executable_stats_t st = stats_of(exe);
    CHECK_EQ_INT(st.num_kernels, st.num_lowered_groups + st.num_copied_groups);
    CHECK(st.num_lowered_groups <= 2);  // one layer's two groups
    CHECK(st.num_copied_groups >= st.num_kernels - 2);
    uint32_t lowered = 0, stitched = 0;
    check_copies_equal_lowering(exe, &lowered, &stitched);
    CHECK_EQ_INT(st.num_lowered_groups, (int)lowered);
    // blocks 3.. take block 2's two groups from the stitching
    CHECK_EQ_INT(counts[c] > 3 ? 2 * (counts[c] - 3) : 0, (int)stitched);
    lowered_at[c] = lowered;
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
  CHECK_EQ_INT((int)lowered_at[0], (int)lowered_at[1]);
  CHECK_EQ_INT((int)lowered_at[0], (int)lowered_at[2]);

  // Bit for bit against 24 separately compiled layers, at every tier (a
  // tier above the host's gives the host's).
  static float x[5 * WIDTH], y[5 * WIDTH], h[2][5 * WIDTH];
  for (int64_t i = 0; i < 5 * WIDTH; ++i) x[i] = (float)cos(i * 0.3) * 1.5f;
  static const char* const kTiers[] = {NULL, "avx2", "sse2"};
  for (int t = 0; t < 3; ++t) {
    tj_context_options_t co = tj_test_context_options();
    co.x86_isa = kTiers[t];
    tj_context_t* tier = NULL;
    CHECK_OK(tj_context_create(&co, &tier));
    tj_graph_t *stack = NULL, *one = NULL;
    CHECK_OK(build_mlp(tier, MAX_LAYERS, &stack));
    CHECK_OK(build_mlp(tier, 1, &one));
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.x86.num_threads = 1;
    opts.pipeline = "default";
    // Generic, then specialized to the run's shape (its kernels lowered
    // again with constant sizes, equal groups copied there too).
    for (int spec = 0; spec < 2; ++spec) {
      opts.specialize = spec ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER;
      tj_executable_t *es = NULL, *e1 = NULL;
      CHECK_OK(tj_compile(stack, &opts, &es));
      CHECK_OK(tj_compile(one, &opts, &e1));
      run_layers(es, MAX_LAYERS, 0, x, y);
      memcpy(h[0], x, sizeof(x));
      for (int l = 0; l < MAX_LAYERS; ++l) {
        run_layers(e1, 1, l, h[l % 2], h[(l + 1) % 2]);
      }
      CHECK(memcmp(y, h[MAX_LAYERS % 2], sizeof(y)) == 0);
      CHECK_EQ_INT(spec, (int)stats_of(es).recompiles);
      check_against_reference(es, stack, MAX_LAYERS);
      tj_executable_release(es);
      tj_executable_release(e1);
    }
    tj_graph_destroy(stack);
    tj_graph_destroy(one);
    tj_context_destroy(tier);
  }

  // Scales 0.5 and 0.25 alternating: the groups reading them differ.
  double scales[MAX_LAYERS];
  for (int l = 0; l < MAX_LAYERS; ++l) scales[l] = l % 2 ? 0.25 : 0.5;
  tj_graph_t* g = NULL;
  CHECK_OK(build_mlp_scales(ctx, MAX_LAYERS, scales, &g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  tj_executable_stats_t st = stats_of(exe);
  CHECK(st.num_lowered_groups > (int)lowered_at[2]);
  CHECK(st.num_copied_groups > 0);
  uint32_t lowered = 0, stitched = 0;
  check_copies_equal_lowering(exe, &lowered, &stitched);
  CHECK_EQ_INT(st.num_lowered_groups, (int)lowered);
  static float xr[5 * WIDTH], yr[5 * WIDTH], rr[5 * WIDTH];
  for (int64_t i = 0; i < 5 * WIDTH; ++i) xr[i] = (float)sin(i * 0.2);
  int64_t shape[2] = {5, WIDTH};
  tj_tensor_t in[1 + 2 * MAX_LAYERS];
  make_inputs(MAX_LAYERS, shape, xr, in);
  tj_tensor_t out = tj_tensor_make(yr, TJ_DTYPE_F32, 2, shape);
  tj_tensor_t ref = tj_tensor_make(rr, TJ_DTYPE_F32, 2, shape);
  CHECK_OK(tj_executable_run(exe, in, 1 + 2 * MAX_LAYERS, &out, 1));
  CHECK_OK(tj_reference_run(g, in, 1 + 2 * MAX_LAYERS, &ref, 1));
  double worst = 0;
  for (int64_t i = 0; i < 5 * WIDTH; ++i) {
    double e = fabs((double)yr[i] - (double)rr[i]);
    if (!(e <= worst)) worst = e;
  }
  CHECK(worst <= 1e-3);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// build_mlp's stack of |layers| in which layer |odd| differs from the
// others in one thing. Every layer adds to its bias 0.01 times the sum of
// its weights over axis 0 (a reduction of [WIDTH, WIDTH] to [WIDTH]);
// |what| 1: layer |odd| sums over axis 1 instead (the same types, another
// attribute); 2: layer |odd| computes in f64 (its input, weights and bias
// cast to f64 and its result back to f32: its groups' nodes of another
// dtype). 0: no layer differs.
static tj_status_t build_mlp_odd(tj_context_t* ctx, int layers, int odd,
                                 int what, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t h;
  tj_status_t s = start_stack(ctx, &g, &h, NULL);
  if (s) return s;
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    bool f64 = l == odd && what == 2;
    tj_dtype_t dt = f64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
    if (f64) {
      h = tj_graph_cast(g, h, dt);
      w = tj_graph_cast(g, w, dt);
      b = tj_graph_cast(g, b, dt);
    }
    int32_t axis = l == odd && what == 1 ? 1 : 0;
    tj_value_t ws = tj_graph_sum(g, w, 1, &axis, false);
    b = tj_graph_add(g, b, tj_graph_mul(g, ws, tj_graph_scalar(g, dt, 0.01)));
    tj_value_t half = tj_graph_scalar(g, dt, 0.5);
    tj_value_t z = linear(g, h, w, b);
    h = norm(g, residual(g, h, tj_graph_tanh(g, z), half));
    if (f64) h = tj_graph_cast(g, h, TJ_DTYPE_F32);
  }
  return finish_stack(g, h, out);
}

// A wrong share is a silent wrong answer: a stack in which one layer
// differs from the others in an attribute or a dtype lowers that layer's
// groups itself (more groups lowered than for the uniform stack), every
// copy is what lowering would have made, and the numbers are the
// reference's, with and without the compile memo, at every tier. (A
// different one-element constant: equal_groups_are_lowered_once.)
TEST(layers_that_differ_do_not_share) {
  static const char* const kTiers[] = {NULL, "avx2", "sse2"};
  for (int t = 0; t < 3; ++t) {
    tj_context_options_t co = tj_test_context_options();
    co.x86_isa = kTiers[t];
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    int uniform_lowered = 0;
    for (int what = 0; what < 3; ++what) {
      for (int memo = 0; memo < 2; ++memo) {
        tj_graph_t* g = NULL;
        CHECK_OK(build_mlp_odd(ctx, MAX_LAYERS, 12, what, &g));
        tj_compile_options_t opts;
        tj_compile_options_initialize(&opts);
        opts.x86.num_threads = 1;
        opts.pipeline = memo ? NULL : "default";
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile(g, &opts, &exe));
        tj_executable_stats_t st = stats_of(exe);
        CHECK(st.num_copied_groups > 0);
        if (what == 0) {
          uniform_lowered = st.num_lowered_groups;
        } else {
          CHECK(st.num_lowered_groups > uniform_lowered);
        }
        uint32_t lowered = 0, stitched = 0;
        check_copies_equal_lowering(exe, &lowered, &stitched);
        CHECK_EQ_INT(st.num_lowered_groups, (int)lowered);
        check_against_reference(exe, g, MAX_LAYERS);
        tj_executable_release(exe);
        tj_graph_destroy(g);
      }
    }
    tj_context_destroy(ctx);
  }
}

// build_mlp's stack with a computed prefix (h = tanh(x) * 0.75) and a
// suffix reading the last layer and the input (y = relu(h) + x) when
// |ends|.
static tj_status_t build_mlp_ends(tj_context_t* ctx, int layers, bool ends,
                                  tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t x;
  tj_status_t s = start_stack(ctx, &g, &x, NULL);
  if (s) return s;
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t h = x;
  if (ends) {
    h = tj_graph_mul(g, tj_graph_tanh(g, x),
                     tj_graph_scalar(g, TJ_DTYPE_F32, 0.75));
  }
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    tj_value_t z = linear(g, h, w, b);
    h = norm(g, residual(g, h, tj_graph_tanh(g, z), half));
  }
  if (ends) h = tj_graph_add(g, tj_graph_relu(g, h), x);
  return finish_stack(g, h, out);
}

// The default pipeline over |g| (taken), with region templates or
// without: the plan printed (grouped by fusion), and the blocks templated.
static char* pipeline_text(tj_context_t* ctx, tj_graph_t* g, bool templates,
                           uint32_t* out_blocks, uint32_t* out_processed) {
  tj_plan_t plan;
  tj_plan_initialize(&plan, g);
  tj_pass_ctx_t pc;
  tj_pass_ctx_initialize(&pc, ctx);
  pc.evaluate = tj_pass_reference_evaluator;
  pc.verify_each = true;
  pc.region_template = templates;
  CHECK_OK(tj_pipeline_default(&pc, &plan));
  *out_blocks = pc.region_blocks;
  *out_processed = pc.region_blocks_processed;
  char* text = NULL;
  CHECK_OK(tj_plan_print(&plan, &text));
  tj_plan_deinitialize(&plan);
  return text;
}

// Region templates (lib/passes/region.c): the graph stages of the
// pipeline over one block (its boundary values plain: an input or a
// product, as here), the others copied, give the graph and fusion groups
// the pipeline gives over every node: the printed plans are equal, for 1
// to 24 layers, with and without a computed prefix and a suffix, for the
// graph as built (weights within the blocks) and as tj_compile copies it
// (inputs first). From 4 blocks on the passes ran over 1.
TEST(region_template_equals_the_whole_pipeline) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  static const int kCounts[] = {1, 3, 4, 5, 9, MAX_LAYERS};
  for (int ends = 0; ends < 2; ++ends) {
    for (int copy = 0; copy < 2; ++copy) {
      for (size_t c = 0; c < TJ_ARRAY_SIZE(kCounts); ++c) {
        int layers = kCounts[c];
        char* text[2];
        uint32_t blocks[2], processed[2];
        for (int t = 0; t < 2; ++t) {
          tj_graph_t* g = NULL;
          CHECK_OK(build_mlp_ends(ctx, layers, ends, &g));
          if (copy) {
            tj_graph_t* clone = NULL;
            CHECK_OK(tj_graph_clone(g, &clone));
            tj_graph_destroy(g);
            g = clone;
          }
          text[t] = pipeline_text(ctx, g, t == 1, &blocks[t], &processed[t]);
        }
        CHECK_STREQ(text[0], text[1]);
        CHECK_EQ_INT(0, (int)blocks[0]);
        CHECK_EQ_INT(layers >= 4 ? layers : 0, (int)blocks[1]);
        CHECK_EQ_INT(layers >= 4 ? 1 : 0, (int)processed[1]);
        if (strcmp(text[0], text[1]) != 0 ||
            (int)blocks[1] != (layers >= 4 ? layers : 0)) {
          fprintf(stderr, "layers %d, ends %d, copy %d\n", layers, ends, copy);
        }
        tj_context_free_string(ctx, text[0]);
        tj_context_free_string(ctx, text[1]);
      }
    }
  }
  tj_context_destroy(ctx);
}

// build_mlp's stack of |layers| whose first or last block differs from a
// middle one at its boundary in one way (|what|): 0 none; 1 the prefix
// hands the blocks relu(x) (a value canonicalize looks through); 2 each
// block's value is tanh of its layer norm; 3 each block first adds a
// shared value computed after x (t = tanh(x2)), so that the carried value
// stands before a shared operand in block 0 and after it in the others
// (commutative operands are ordered by node); 4 each block's epilogue is
// a softmax (attention_match's pattern); 5 each block also adds x itself,
// the value block 0 carries in; 6 the prefix also computes x * 3 (a
// prefix node reading the carried value), which every block adds; 7 the
// suffix is a softmax of the last block's value.
static tj_status_t build_boundary_case(tj_context_t* ctx, int layers, int what,
                                       tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t x;
  int64_t B = 0;
  tj_status_t s = start_stack(ctx, &g, &x, &B);
  if (s) return s;
  tj_value_t shared = tj_value_none();
  if (what == 3) {
    tj_value_t x2 =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, WIDTH}, "x2");
    shared = tj_graph_tanh(g, x2);
  }
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t h = what == 1 ? tj_graph_relu(g, x) : x;
  tj_value_t x3 = tj_value_none();
  if (what == 6) x3 = tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 3));
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    if (what == 3) h = tj_graph_add(g, h, shared);
    tj_value_t z = linear(g, h, w, b);
    tj_value_t t = what == 4 ? tj_graph_softmax(g, z, 1) : tj_graph_tanh(g, z);
    h = norm(g, residual(g, h, t, half));
    if (what == 2) h = tj_graph_tanh(g, h);
    if (what == 5) h = tj_graph_add(g, h, x);
    if (what == 6) h = tj_graph_add(g, h, x3);
  }
  if (what == 7) h = tj_graph_softmax(g, h, 1);
  return finish_stack(g, h, out);
}

// A block whose first or last differs from a middle one at its boundary
// is not probed alone: the checks on the boundary values send it through
// the three-block probe (3 blocks processed), and the plan is still the
// whole pipeline's; the uniform stack takes one block.
TEST(boundary_that_differs_takes_three_blocks) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (int what = 0; what <= 7; ++what) {
    for (int copy = 0; copy < 2; ++copy) {
      char* text[2];
      uint32_t blocks[2], processed[2];
      for (int t = 0; t < 2; ++t) {
        tj_graph_t* g = NULL;
        CHECK_OK(build_boundary_case(ctx, 6, what, &g));
        if (copy) {
          tj_graph_t* clone = NULL;
          CHECK_OK(tj_graph_clone(g, &clone));
          tj_graph_destroy(g);
          g = clone;
        }
        text[t] = pipeline_text(ctx, g, t == 1, &blocks[t], &processed[t]);
      }
      CHECK_STREQ(text[0], text[1]);
      CHECK_EQ_INT(6, (int)blocks[1]);
      CHECK_EQ_INT(what == 0 ? 1 : 3, (int)processed[1]);
      if (strcmp(text[0], text[1]) != 0 || blocks[1] != 6 ||
          (int)processed[1] != (what == 0 ? 1 : 3)) {
        fprintf(stderr, "what %d, copy %d: %u blocks, %u processed\n", what,
                copy, blocks[1], processed[1]);
      }
      tj_context_free_string(ctx, text[0]);
      tj_context_free_string(ctx, text[1]);
    }
  }
  tj_context_destroy(ctx);
}

// build_mlp's stack in which every layer also adds the value of the layer
// two before it (x for the first two): block j reads block j - 2's value
// beside block j - 1's, so no one value chains the blocks (block 1's value
// is carried to block 3).
static tj_status_t build_skip_two(tj_context_t* ctx, int layers,
                                  tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t x;
  tj_status_t s = start_stack(ctx, &g, &x, NULL);
  if (s) return s;
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t h = x, before = x;
  for (int l = 0; l < layers; ++l) {
    tj_value_t w, b;
    layer_weights(g, l, &w, &b);
    tj_value_t z = linear(g, h, w, b);
    tj_value_t y = residual(g, h, tj_graph_tanh(g, z), half);
    y = tj_graph_add(g, y, before);
    before = h;
    h = norm(g, y);
  }
  return finish_stack(g, h, out);
}

// A value carried past the next block (block 1's read by block 3) is not a
// chain the templates copy: the whole pipeline runs, its plan the one
// without templates, no group marked as the stitching's copy, and
// tj_compile's numbers the reference's.
TEST(value_carried_two_blocks_is_not_templated) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (int copy = 0; copy < 2; ++copy) {
    char* text[2];
    uint32_t blocks[2], processed[2];
    for (int t = 0; t < 2; ++t) {
      tj_graph_t* g = NULL;
      CHECK_OK(build_skip_two(ctx, 8, &g));
      if (copy) {
        tj_graph_t* clone = NULL;
        CHECK_OK(tj_graph_clone(g, &clone));
        tj_graph_destroy(g);
        g = clone;
      }
      text[t] = pipeline_text(ctx, g, t == 1, &blocks[t], &processed[t]);
    }
    CHECK_STREQ(text[0], text[1]);
    CHECK_EQ_INT(0, (int)blocks[1]);
    tj_context_free_string(ctx, text[0]);
    tj_context_free_string(ctx, text[1]);
  }
  tj_graph_t* g = NULL;
  CHECK_OK(build_skip_two(ctx, 8, &g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  opts.pipeline = "default";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  CHECK_EQ_INT(0, stats_of(exe).num_region_blocks);
  uint32_t lowered = 0, stitched = 0;
  check_copies_equal_lowering(exe, &lowered, &stitched);
  CHECK_EQ_INT(0, (int)stitched);
  check_against_reference(exe, g, 8);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// A stack whose blocks scale their bias by a shared input declared among
// the weights, after layer |at|'s: in tj_compile's copy (inputs first) it
// stands after the first blocks' weights and before the later ones', so a
// copied block's group reads its inputs in another order than block 2's.
static tj_status_t build_shared_among_weights(tj_context_t* ctx, int layers,
                                              int at, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  tj_value_t h;
  tj_status_t s = start_stack(ctx, &g, &h, NULL);
  if (s) return s;
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t w[MAX_LAYERS], b[MAX_LAYERS], scale = tj_value_none();
  for (int l = 0; l < layers; ++l) {
    layer_weights(g, l, &w[l], &b[l]);
    if (l == at)
      scale = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){WIDTH}, "s");
  }
  for (int l = 0; l < layers; ++l) {
    tj_value_t z = tj_graph_add(g, tj_graph_matmul(g, h, w[l]),
                                tj_graph_mul(g, b[l], scale));
    h = norm(g, residual(g, h, tj_graph_tanh(g, z), half));
  }
  return finish_stack(g, h, out);
}

// Blocks 3.. are copies of block 2's stitched nodes and groups, each
// block's weights in place of block 2's. A shared input before block 2's
// weights or after the last block's keeps its place against every
// block's: the blocks are templated. One between two later blocks'
// weights stands after block 2's b2 and before b4, so that canonicalize
// orders mul(b2, s) but mul(s, b4): the stack falls back to the whole
// pipeline (no blocks), which a copy of block 2 would have contradicted.
// Either way the plan is the whole pipeline's.
TEST(copied_blocks_read_their_own_weights) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  static const int kAt[] = {0, 3, 7};
  for (size_t a = 0; a < TJ_ARRAY_SIZE(kAt); ++a) {
    char* text[2];
    uint32_t blocks[2], processed[2];
    for (int t = 0; t < 2; ++t) {
      tj_graph_t* g = NULL;
      CHECK_OK(build_shared_among_weights(ctx, 8, kAt[a], &g));
      tj_graph_t* clone = NULL;
      CHECK_OK(tj_graph_clone(g, &clone));
      tj_graph_destroy(g);
      text[t] = pipeline_text(ctx, clone, t == 1, &blocks[t], &processed[t]);
    }
    CHECK_STREQ(text[0], text[1]);
    int expected = kAt[a] == 3 ? 0 : 8;
    CHECK_EQ_INT(expected, (int)blocks[1]);
    if (strcmp(text[0], text[1]) != 0 || (int)blocks[1] != expected)
      fprintf(stderr, "shared input after layer %d\n", kAt[a]);
    tj_context_free_string(ctx, text[0]);
    tj_context_free_string(ctx, text[1]);
  }
  tj_context_destroy(ctx);
}

// The executables with and without region templates compute the same
// bits, at every ISA tier (a tier above the host's gives the host's), and
// equal the reference; the stats say 24 blocks, 1 run through the passes.
TEST(region_template_gives_the_same_numbers) {
  static float x[5 * WIDTH], y[2][5 * WIDTH];
  for (int64_t i = 0; i < 5 * WIDTH; ++i) x[i] = (float)cos(i * 0.3) * 1.5f;
  static const char* const kTiers[] = {NULL, "avx2", "sse2"};
  for (int t = 0; t < 3; ++t) {
    tj_context_options_t co = tj_test_context_options();
    co.x86_isa = kTiers[t];
    tj_context_t* tier = NULL;
    CHECK_OK(tj_context_create(&co, &tier));
    for (int ends = 0; ends < 2; ++ends) {
      tj_graph_t* g = NULL;
      CHECK_OK(build_mlp_ends(tier, MAX_LAYERS, ends, &g));
      tj_compile_options_t opts;
      tj_compile_options_initialize(&opts);
      opts.x86.num_threads = 1;
      for (int off = 0; off < 2; ++off) {
        tj_compile_debug_t debug;
        memset(&debug, 0, sizeof(debug));
        debug.no_region_template = off;
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile_debug(g, &opts, &debug, &exe));
        tj_executable_stats_t st = stats_of(exe);
        CHECK_EQ_INT(off ? 0 : MAX_LAYERS, st.num_region_blocks);
        CHECK_EQ_INT(off ? 0 : 1, st.num_region_blocks_processed);
        run_layers(exe, MAX_LAYERS, 0, x, y[off]);
        check_against_reference(exe, g, MAX_LAYERS);
        tj_executable_release(exe);
      }
      CHECK(memcmp(y[0], y[1], sizeof(y[0])) == 0);
      tj_graph_destroy(g);
    }
    tj_context_destroy(tier);
  }
}

// 5 layers: the middle ones' groups copy the kernels of equal groups.
// tj_graph_clone (tj_compile's copy of the caller's graph) copies a
// finalized graph field by field instead of building it again: the copy
// prints as the original (nodes, types, symbolic dims, attributes,
// constants' bytes, inputs, outputs), keeps its guards, owns its constants
// (a borrowed one stays the caller's), and frees exactly under every
// failing allocation.
static float g_borrowed[4] = {1, 2, 3, 4};

static tj_status_t build_clone_case(tj_context_t* ctx, tj_graph_t** out) {
  tj_graph_t* g = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(ctx, "clone_case", &g));
  int64_t B = tj_graph_symbol(g, "B"), C = tj_graph_symbol(g, "C");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 4}, "x");
  tj_value_t y = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){C, 4}, "y");
  static const float kOwned[4] = {0.5f, -1, 2, 0.25f};
  tj_value_t k = tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, kOwned,
                                   sizeof(kOwned));
  tj_value_t kb = tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, (int64_t[]){4},
                                             g_borrowed, sizeof(g_borrowed));
  // B against C: a guard B == C.
  tj_value_t z = tj_graph_mul(g, tj_graph_add(g, x, y), k);
  int32_t axis = 1;
  z = tj_graph_add(g, tj_graph_sum(g, tj_graph_add(g, z, kb), 1, &axis, true),
                   tj_graph_scalar(g, TJ_DTYPE_F32, 1.5));
  tj_graph_output(g, z, "z");
  tj_graph_output(g, tj_graph_tanh(g, x), "t");
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    tj_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

static void check_clone(tj_context_t* ctx, const tj_graph_t* g) {
  tj_graph_t* c = NULL;
  CHECK_OK(tj_graph_clone(g, &c));
  char *a = NULL, *b = NULL;
  CHECK_OK(tj_graph_print(g, &a));
  CHECK_OK(tj_graph_print(c, &b));
  CHECK_STREQ(a, b);
  CHECK(c->finalized);
  CHECK_EQ_INT((int)g->num_guards, (int)c->num_guards);
  for (uint32_t i = 0; i < g->num_nodes && i < c->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op != TJ_OP_CONSTANT || !n->attrs.data) continue;
    CHECK(n->attrs.borrowed == (c->nodes[i].attrs.data == n->attrs.data));
  }
  tj_context_free_string(ctx, a);
  tj_context_free_string(ctx, b);
  tj_graph_destroy(c);
}

static tj_status_t clone_attempt(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&co, &ctx));
  tj_graph_t *g = NULL, *c = NULL;
  tj_status_t s = build_clone_case(ctx, &g);
  if (!s) s = tj_graph_clone(g, &c);
  tj_graph_destroy(c);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(clone_copies_a_finalized_graph) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(build_clone_case(ctx, &g));
  CHECK(g->num_guards > 0);
  check_clone(ctx, g);
  tj_graph_destroy(g);
  CHECK_OK(build_mlp(ctx, MAX_LAYERS, &g));
  check_clone(ctx, g);
  tj_graph_destroy(g);
  CHECK_OK(build_mlp_odd(ctx, 6, 2, 2, &g));
  check_clone(ctx, g);
  tj_graph_destroy(g);
  CHECK_OK(build_mlp_ends(ctx, 5, true, &g));
  check_clone(ctx, g);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  tj_test_oom_sweep("graph clone", clone_attempt);
}

// The default pipeline over build_boundary_case(5 layers, |what|) as
// tj_compile copies it, in a context of |allocator|, with or without
// region templates: the printed plan (malloc'd) in |*out_text|.
static tj_status_t region_plan_text(tj_allocator_t allocator, int what,
                                    bool templates, char** out_text) {
  *out_text = NULL;
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&co, &ctx));
  tj_graph_t *g = NULL, *clone = NULL;
  tj_status_t s = build_boundary_case(ctx, 5, what, &g);
  if (!s) s = tj_graph_clone(g, &clone);
  tj_graph_destroy(g);
  if (!s) {
    tj_plan_t plan;
    tj_plan_initialize(&plan, clone);
    clone = NULL;
    tj_pass_ctx_t pc;
    tj_pass_ctx_initialize(&pc, ctx);
    pc.evaluate = tj_pass_reference_evaluator;
    pc.verify_each = true;
    pc.region_template = templates;
    s = tj_pipeline_default(&pc, &plan);
    char* text = NULL;
    if (!s) s = tj_plan_print(&plan, &text);
    if (!s) {
      *out_text = strdup(text);
      tj_context_free_string(ctx, text);
    }
    tj_plan_deinitialize(&plan);
  }
  tj_graph_destroy(clone);
  tj_context_destroy(ctx);
  return s;
}

// The region path under every failing allocation (the one-block probe and,
// for a prefix handing the blocks relu(x), the three-block one): a failure
// there falls back (to three blocks, then to the whole pipeline), so each
// run either reports OUT_OF_MEMORY or gives the whole pipeline's plan, and
// none leaks. (oom_sweep stops at the first run that succeeds, which a
// fallback makes early.)
TEST(region_path_under_failing_allocations) {
  for (int what = 0; what <= 1; ++what) {
    char* want = NULL;
    tj_test_allocator_t counter;
    tj_test_allocator_initialize(&counter, -1);
    CHECK_OK(
        region_plan_text(tj_test_allocator_get(&counter), what, false, &want));
    tj_test_allocator_initialize(&counter, -1);
    char* text = NULL;
    CHECK_OK(
        region_plan_text(tj_test_allocator_get(&counter), what, true, &text));
    CHECK(want && text && strcmp(want, text) == 0);
    free(text);
    long total = counter.allocations, failed = 0, fell_back = 0;
    for (long n = 0; n < total; ++n) {
      tj_test_allocator_t alloc;
      tj_test_allocator_initialize(&alloc, n);
      tj_status_t s =
          region_plan_text(tj_test_allocator_get(&alloc), what, true, &text);
      CHECK_EQ_INT(0, alloc.live_blocks);
      CHECK_EQ_INT(0, alloc.bad_frees);
      if (s) {
        CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
        tj_status_free(s);
        ++failed;
      } else {
        CHECK(text && strcmp(want, text) == 0);
        ++fell_back;
      }
      free(text);
    }
    CHECK(fell_back > 0);
    printf(
        "# region path, case %d: %ld allocations, %ld failed runs, %ld "
        "absorbed\n",
        what, total, failed, fell_back);
    free(want);
  }
}

static int g_oom_case;  // build_boundary_case's |what| for compile_run

static tj_status_t compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = build_boundary_case(ctx, 5, g_oom_case, &g);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float x[2 * WIDTH], y[2 * WIDTH];
    for (int i = 0; i < 2 * WIDTH; ++i) x[i] = (float)i * 0.01f;
    int64_t shape[2] = {2, WIDTH};
    tj_tensor_t in[1 + 2 * 5];
    make_inputs(5, shape, x, in);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    s = tj_executable_run(exe, in, 1 + 2 * 5, &out, 1);
    tj_executable_release(exe);
    exe = NULL;
    if (!s) s = tj_compile(g, &opts, &exe);
    if (!s) s = tj_executable_run(exe, in, 1 + 2 * 5, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

// The one-block probe (the uniform stack) and the three-block one (a
// prefix handing the blocks relu(x)).
TEST(oom_sweep) {
  g_oom_case = 0;
  tj_test_oom_sweep("region compile, one block", compile_run);
  g_oom_case = 1;
  tj_test_oom_sweep("region compile, three blocks", compile_run);
}

int main(void) {
  fill_weights();
  RUN_TEST(stacked_layers_compile_one_layer);
  RUN_TEST(shared_kernels_equal_the_reference);
  RUN_TEST(warm_compile_shares_the_compiled_graph);
  RUN_TEST(kernel_cache_key_ignores_the_layer_count);
  RUN_TEST(released_executable_is_kept_for_an_equal_compile);
  RUN_TEST(equal_groups_are_lowered_once);
  RUN_TEST(region_template_equals_the_whole_pipeline);
  RUN_TEST(boundary_that_differs_takes_three_blocks);
  RUN_TEST(copied_blocks_read_their_own_weights);
  RUN_TEST(value_carried_two_blocks_is_not_templated);
  RUN_TEST(region_template_gives_the_same_numbers);
  RUN_TEST(layers_that_differ_do_not_share);
  RUN_TEST(clone_copies_a_finalized_graph);
  RUN_TEST(oom_sweep);
  RUN_TEST(region_path_under_failing_allocations);
  TEST_MAIN_END();
}
