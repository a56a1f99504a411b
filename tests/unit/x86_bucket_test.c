// bucket_pow2 on x86: every power-of-two bucket of B runs the generic
// kernels on the actual sizes (no padding, nothing compiled, one log line
// per new bucket under TJ_LOG=recompiles), including a GEMM on both of its
// paths and a mean over the symbolic axis, which padding would get wrong.

#include "lib/dtype.h"
#include "tests/unit/test.h"

typedef struct log_t {
  char text[8192];
  size_t length;
  int count;
} log_t;

static void capture(tj_severity_t severity, const char* message, size_t length,
                    void* user_data) {
  (void)severity;
  log_t* log = user_data;
  ++log->count;
  if (log->length + length + 2 < sizeof(log->text)) {
    memcpy(log->text + log->length, message, length);
    log->length += length;
    log->text[log->length++] = '\n';
    log->text[log->length] = '\0';
  }
}

enum { K = 24, N = 40 };

// y = tanh(x @ w + b) [B, N]; m = mean(x, axis 0) [K].
static tj_graph_t* make_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "bucketed", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_graph_output(
      g, tj_graph_tanh(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b)), "y");
  tj_graph_output(g, tj_graph_mean(g, x, 1, (int32_t[]){0}, false), "m");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void run(tj_executable_t* exe, tj_executable_t* ref, int64_t B) {
  float* x = malloc(sizeof(float) * (size_t)(B * K));
  float* w = malloc(sizeof(float) * K * N);
  float* b = malloc(sizeof(float) * N);
  float* y[2] = {calloc((size_t)(B * N), sizeof(float)),
                 calloc((size_t)(B * N), sizeof(float))};
  float* m[2] = {calloc(K, sizeof(float)), calloc(K, sizeof(float))};
  for (int64_t i = 0; i < B * K; ++i)
    x[i] = (float)((i * 7919) % 13) / 13 - 0.5f;
  for (int i = 0; i < K * N; ++i) w[i] = (float)((i * 104729) % 17) / 17 - 0.5f;
  for (int i = 0; i < N; ++i) b[i] = (float)i / N - 0.5f;
  int64_t xs[2] = {B, K}, ws[2] = {K, N}, bs[1] = {N}, ys[2] = {B, N},
          ms[1] = {K};
  tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(b, TJ_DTYPE_F32, 1, bs)};
  for (int i = 0; i < 2; ++i) {
    tj_tensor_t out[2] = {tj_tensor_make(y[i], TJ_DTYPE_F32, 2, ys),
                          tj_tensor_make(m[i], TJ_DTYPE_F32, 1, ms)};
    CHECK_OK(tj_executable_run(i ? ref : exe, in, 3, out, 2));
  }
  double worst = 0;
  for (int64_t i = 0; i < B * N; ++i)
    worst = fmax(worst, fabs(y[0][i] - y[1][i]));
  for (int i = 0; i < K; ++i) worst = fmax(worst, fabs(m[0][i] - m[1][i]));
  if (worst > 1e-5) {
    fprintf(stderr, "  B=%lld: max |x86 - reference| = %g\n", (long long)B,
            worst);
  }
  CHECK(worst <= 1e-5);
  free(x);
  free(w);
  free(b);
  for (int i = 0; i < 2; ++i) {
    free(y[i]);
    free(m[i]);
  }
}

TEST(buckets_run_generic_kernels) {
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.log = "recompiles";
  co.diagnostic_fn = capture;
  co.diagnostic_user_data = &log;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  tj_executable_t* ref = NULL;
  o.target = TJ_TARGET_REFERENCE;
  CHECK_OK(tj_compile(g, &o, &ref));
  static const tj_specialize_t policies[] = {TJ_SPECIALIZE_ALWAYS,
                                             TJ_SPECIALIZE_AFTER_N};
  for (size_t p = 0; p < TJ_ARRAY_SIZE(policies); ++p) {
    memset(&log, 0, sizeof(log));
    tj_compile_options_initialize(&o);
    o.specialize = policies[p];
    o.specialize_after = 1;
    o.bucket_pow2 = true;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    int64_t misses = st.cache_misses + st.cache_hits;
    // B = 3, 4 -> bucket 4; 5, 7, 8 -> 8; 9 -> 16 (the GEMM's in-place
    // path); 17, 30 -> 32 (its packed path).
    static const int64_t batches[] = {3, 4, 5, 7, 8, 9, 17, 30, 3};
    for (size_t i = 0; i < TJ_ARRAY_SIZE(batches); ++i) {
      run(exe, ref, batches[i]);
    }
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.recompiles);
    CHECK_EQ_INT(misses, st.cache_misses + st.cache_hits);  // nothing built
    CHECK_EQ_INT(4, log.count);
    CHECK_CONTAINS(log.text,
                   "bucket B=4 (first run B=3) runs the generic "
                   "kernels on the actual sizes");
    CHECK_CONTAINS(log.text, "bucket B=8 (first run B=5)");
    CHECK_CONTAINS(log.text, "bucket B=16 (first run B=9)");
    CHECK_CONTAINS(log.text, "bucket B=32 (first run B=17)");
    tj_executable_release(exe);
  }
  tj_executable_release(ref);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(void) {
  RUN_TEST(buckets_run_generic_kernels);
  TEST_MAIN_END();
}
