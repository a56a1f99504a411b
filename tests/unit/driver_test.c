// The compile driver (backends/compile.c) over its backends, through the
// public API: the specialization policies, bucketing and warm-up are the
// driver's, the same for every backend that lowers (x86 here; CUDA in
// tests/cuda/cuda_exec_test.c), and never apply to the reference target,
// which runs the caller's graph as it is. Every run is compared with
// tj_reference_run; a host step of the run plan (an argsort along a
// symbolic axis: argtopk's native host kernel, or under TJ_NATIVE_TOPK=off
// a graph break on the reference interpreter) sits between compiled
// kernels in every program, specialized or not.

#include <math.h>

#include "tests/unit/test.h"

enum { K = 16, NI = 3 };

// e = exp(x) [B, K]; y = e * 2 [B, K]; g = the ranks along B of
// gather(e, idx, 1) [B, NI] (an argsort along a symbolic axis: no kernel
// template, the host step), as f32; s = sum(relu(x), axis 1) [B].
static tj_graph_t* make_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "driver", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t idx = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){NI}, "idx");
  tj_value_t e = tj_graph_exp(g, x);
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_graph_output(g, tj_graph_mul(g, e, two), "y");
  tj_value_t picked = tj_graph_gather(g, e, idx, 1);
  tj_graph_output(
      g, tj_graph_cast(g, tj_graph_argsort(g, picked, 0, false), TJ_DTYPE_F32),
      "g");
  tj_graph_output(
      g, tj_graph_sum(g, tj_graph_relu(g, x), 1, (int32_t[]){1}, false), "s");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static bool close_to(float got, float want) {
  return fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-6f;
}

// Runs |exe| for batch |B| and compares every output with the reference.
static void run(tj_executable_t* exe, const tj_graph_t* g, int64_t B) {
  float* x = malloc(sizeof(float) * (size_t)(B * K));
  for (int64_t i = 0; i < B * K; ++i) x[i] = (float)((i * 31) % 23) / 23 - 0.4f;
  int32_t idx[NI] = {K - 1, 0, 5};
  int64_t xs[2] = {B, K}, is[1] = {NI}, ys[2] = {B, K}, gs[2] = {B, NI},
          ss[1] = {B};
  tj_tensor_t in[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(idx, TJ_DTYPE_I32, 1, is)};
  size_t n[3] = {(size_t)(B * K), (size_t)(B * NI), (size_t)B};
  float* got[3];
  float* want[3];
  tj_tensor_t out[2][3];
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < 3; ++i) {
      float* p = calloc(n[i] ? n[i] : 1, sizeof(float));
      if (k == 0) {
        got[i] = p;
      } else {
        want[i] = p;
      }
    }
    float** o = k == 0 ? got : want;
    out[k][0] = tj_tensor_make(o[0], TJ_DTYPE_F32, 2, ys);
    out[k][1] = tj_tensor_make(o[1], TJ_DTYPE_F32, 2, gs);
    out[k][2] = tj_tensor_make(o[2], TJ_DTYPE_F32, 1, ss);
  }
  CHECK_OK(tj_executable_run(exe, in, 2, out[0], 3));
  CHECK_OK(tj_reference_run(g, in, 2, out[1], 3));
  for (int i = 0; i < 3; ++i) {
    int bad = 0;
    for (size_t j = 0; j < n[i]; ++j) bad += !close_to(got[i][j], want[i][j]);
    CHECK_EQ_INT(0, bad);
    free(got[i]);
    free(want[i]);
  }
  free(x);
}

static tj_executable_t* compile(const tj_graph_t* g, tj_target_t target,
                                tj_specialize_t policy, bool bucket) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = target;
  o.specialize = policy;
  o.specialize_after = 2;
  o.bucket_pow2 = bucket;
  o.x86.num_threads = 2;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

static tj_executable_stats_t stats_of(const tj_executable_t* exe) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  return st;
}

// Every program's kernels count once as a cache hit or a miss.
static void check_cache_counts(const tj_executable_t* exe) {
  tj_executable_stats_t st = stats_of(exe);
  CHECK_EQ_INT((int)(st.num_kernels * (1 + st.recompiles)),
               (int)(st.cache_hits + st.cache_misses));
}

// The host step is argtopk's native kernel, or with |native_off|
// (TJ_NATIVE_TOPK=off, read when the context is created) a graph break.
static void check_always(bool native_off) {
  tj_context_t* ctx;
  if (native_off) setenv("TJ_NATIVE_TOPK", "off", 1);
  CHECK_OK(tj_context_create(NULL, &ctx));
  if (native_off) unsetenv("TJ_NATIVE_TOPK");
  tj_graph_t* g = make_graph(ctx);
  tj_executable_t* exe = compile(g, TJ_TARGET_X86, TJ_SPECIALIZE_ALWAYS, false);
  tj_executable_t* ref =
      compile(g, TJ_TARGET_REFERENCE, TJ_SPECIALIZE_ALWAYS, false);
  static const int64_t kB[] = {3, 5, 3, 1, 5};
  for (size_t i = 0; i < sizeof(kB) / sizeof(kB[0]); ++i) {
    run(exe, g, kB[i]);
    run(ref, g, kB[i]);
  }
  tj_executable_stats_t st = stats_of(exe);
  CHECK(st.num_kernels >= 1);
  // The argsort.
  CHECK_EQ_INT(native_off ? 1 : 0, st.num_graph_breaks);
  CHECK_EQ_INT(native_off ? 0 : 1, st.num_host_kernels);
  CHECK_EQ_INT(3, (int)st.recompiles);  // B = 3, 5, 1
  CHECK_EQ_INT(5, (int)st.runs);
  check_cache_counts(exe);
  // The reference target has no kernels: nothing to specialize.
  st = stats_of(ref);
  CHECK_EQ_INT(0, st.num_kernels);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(0, (int)st.recompiles);
  CHECK_EQ_INT(5, (int)st.runs);
  tj_executable_release(exe);
  tj_executable_release(ref);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(always) {
  check_always(false);
  check_always(true);
}

TEST(after_n_never_and_buckets) {
  tj_context_t* ctx;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = make_graph(ctx);
  tj_executable_t* after =
      compile(g, TJ_TARGET_X86, TJ_SPECIALIZE_AFTER_N, false);
  tj_executable_t* never =
      compile(g, TJ_TARGET_X86, TJ_SPECIALIZE_NEVER, false);
  tj_executable_t* bucket =
      compile(g, TJ_TARGET_X86, TJ_SPECIALIZE_ALWAYS, true);
  static const int64_t kB[] = {4, 4, 4, 6, 7, 0};
  static const int kAfter[] = {0, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < sizeof(kB) / sizeof(kB[0]); ++i) {
    run(after, g, kB[i]);
    run(never, g, kB[i]);
    run(bucket, g, kB[i]);
    CHECK_EQ_INT(kAfter[i], (int)stats_of(after).recompiles);
  }
  CHECK_EQ_INT(0, (int)stats_of(never).recompiles);
  CHECK_EQ_INT(0, (int)stats_of(bucket).recompiles);
  check_cache_counts(after);
  check_cache_counts(never);
  check_cache_counts(bucket);
  tj_executable_release(after);
  tj_executable_release(never);
  tj_executable_release(bucket);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// tj_executable_prepare under ALWAYS compiles the shape's program; the
// first run of the shape then compiles nothing.
TEST(prepare_specializes) {
  tj_context_t* ctx;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = make_graph(ctx);
  tj_executable_t* exe = compile(g, TJ_TARGET_X86, TJ_SPECIALIZE_ALWAYS, false);
  int64_t xs[2] = {7, K}, is[1] = {NI};
  tj_tensor_t in[2] = {tj_tensor_make(NULL, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(NULL, TJ_DTYPE_I32, 1, is)};
  CHECK_OK(tj_executable_prepare(exe, in, 2));
  CHECK_EQ_INT(1, (int)stats_of(exe).recompiles);
  CHECK_OK(tj_executable_prepare(exe, in, 2));
  run(exe, g, 7);
  CHECK_EQ_INT(1, (int)stats_of(exe).recompiles);
  // The reference target: the checks only.
  tj_executable_t* ref =
      compile(g, TJ_TARGET_REFERENCE, TJ_SPECIALIZE_ALWAYS, false);
  CHECK_OK(tj_executable_prepare(ref, in, 2));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "takes 2 inputs",
               tj_executable_prepare(ref, in, 1));
  CHECK_EQ_INT(0, (int)stats_of(ref).recompiles);
  tj_executable_release(exe);
  tj_executable_release(ref);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(void) {
  RUN_TEST(always);
  RUN_TEST(after_n_never_and_buckets);
  RUN_TEST(prepare_specializes);
  TEST_MAIN_END();
}
