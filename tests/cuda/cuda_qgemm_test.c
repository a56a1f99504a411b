// The 8-bit GEMM on the GPU (issue 17, jit/emit_nvptx_qgemm.c): every case
// of tests/unit/qgemm_cuda_cases.h compiled for CUDA and run against
// tj_reference_run: i32 results bit for bit, the dequantized f32 ones
// (f32(acc) * scales: two roundings either side) within 1e-6 relative.
// The cases the template takes run with no graph break; the other (K =
// 100) runs on the host with the same numbers. fp8 (matmul_f8 and the
// static QDQ quant_matmul folds onto it): NaN where the reference has it,
// else within 2^-8 of sum_k |a b| (the tensor cores' f32 accumulation of
// float8 products keeps fewer bits; the worst ratio is printed). A symbolic M
// runs at several sizes (1, 129, 513 and the case's) from one executable.
// Skips (exit 77) without a driver or GPU.

#include <math.h>

#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/qgemm_cuda_cases.h"

static tj_context_t* g_ctx;
static double g_worst;  // fp8: the largest |got - want| / sum_k |a b|

static bool compare(const char* what, const qcuda_run_t* r, const void* want,
                    const void* got) {
  for (int64_t i = 0; i < r->ny; ++i) {
    if (r->ydt == TJ_DTYPE_I32) {
      int32_t w = ((const int32_t*)want)[i], g = ((const int32_t*)got)[i];
      if (w != g) {
        fprintf(stderr, "  %s: element %lld: got %d, want %d\n", what,
                (long long)i, g, w);
        return false;
      }
    } else if (r->bound) {
      // fp8: NaN where the reference has NaN; else within 2^-8 of sum_k
      // |a b| (times the scales): wgmma accumulates float8 products in
      // f32 with fewer mantissa bits than an f32 add keeps.
      float w = ((const float*)want)[i], g = ((const float*)got)[i];
      double err = fabs((double)g - (double)w), b = r->bound[i];
      // (int8 static QDQ: exact i32 sums, so only f32 roundings: 1e-6.)
      double tol = r->f8 ? 0x1p-8 : 1e-6;
      if (isnan(w) ? !isnan(g) : !(err <= tol * b + 1e-6 * fabs(w))) {
        fprintf(stderr, "  %s: element %lld: got %.9g, want %.9g (bound %g)\n",
                what, (long long)i, (double)g, (double)w, b);
        return false;
      }
      if (b > 0 && err / b > g_worst) g_worst = err / b;
    } else {
      float w = ((const float*)want)[i], g = ((const float*)got)[i];
      if (!(fabsf(g - w) <= 1e-6f * fabsf(w) + 1e-30f)) {
        fprintf(stderr, "  %s: element %lld: got %.9g, want %.9g\n", what,
                (long long)i, (double)g, (double)w);
        return false;
      }
    }
  }
  return true;
}

static void run_case(const qcuda_case_t* c) {
  tj_graph_t* g = qcuda_build(g_ctx, c);
  if (!g) return;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.verify_each = true;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    tj_executable_stats(exe, &stats);
    if (c->host) {
      CHECK(stats.num_graph_breaks >= 1);
    } else {
      CHECK_EQ_INT(0, stats.num_graph_breaks);
    }
  }
  int64_t ms[4] = {c->m, 1, 129, 513};
  int runs = c->symbolic_m ? 4 : 1;
  for (int i = 0; i < runs && exe; ++i) {
    qcuda_run_t r;
    qcuda_run_make(c, ms[i], &r);
    size_t bytes = (size_t)(r.ny ? r.ny : 1) * 4;
    void* want = malloc(bytes);
    void* got = malloc(bytes);
    tj_tensor_t wt = tj_tensor_make(want, r.ydt, r.yrank, r.ydims);
    tj_tensor_t gt = tj_tensor_make(got, r.ydt, r.yrank, r.ydims);
    CHECK_OK(tj_reference_run(g, r.in, r.nin, &wt, 1));
    memset(got, 0xA5, bytes);
    CHECK_OK(tj_executable_run(exe, r.in, r.nin, &gt, 1));
    char what[128];
    snprintf(what, sizeof(what), "%s at M %lld", c->name, (long long)ms[i]);
    g_worst = 0;
    bool same = compare(what, &r, want, got);
    CHECK(same);
    if (r.bound) printf("# %s: max |error| / sum|ab| = %.3g\n", what, g_worst);
    free(want);
    free(got);
    qcuda_run_free(&r);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(every_case_against_the_reference) {
  for (int i = 0; i < kQcudaNumCases; ++i) run_case(&kQcudaCases[i]);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  RUN_TEST(every_case_against_the_reference);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
