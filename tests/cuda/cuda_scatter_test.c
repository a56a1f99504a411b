// scatter (issue 15) on the GPU: scatter_elements and scatter_nd with every
// reduction, compiled for CUDA (a copy kernel, then the walk of the updates
// with a thread per row), run on host tensors and compared with the
// reference: floats within a relative 1e-5, integers exactly, no graph
// break; sizes that give thousands of rows and duplicate indices by the
// thousand (a float add of duplicates: the same bits on every run, as the
// updates of a row are added in order by one thread). Skips without a GPU.

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static double unit(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}

typedef struct io_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[4];
  double lo, hi;
} io_t;

static int64_t count(const io_t* s) {
  int64_t n = 1;
  for (int32_t d = 0; d < s->rank; ++d) n *= s->dims[d];
  return n;
}

// Runs |g| (finalized) on the reference and twice on CUDA; the outputs
// must match the reference and each other bit for bit.
static void check(const char* what, tj_graph_t* g, int nin, const io_t* in,
                  int nout, const io_t* out, double tol) {
  void* ind[6];
  tj_tensor_t it[6], want_t[4], got_t[4], again_t[4];
  void *want[4], *got[4], *again[4];
  for (int i = 0; i < nin; ++i) {
    int64_t n = count(&in[i]);
    ind[i] = calloc((size_t)n, tj_dtype_size(in[i].dtype));
    for (int64_t k = 0; k < n; ++k) {
      double v = in[i].lo + (in[i].hi - in[i].lo +
                             (tj_dtype_is_float(in[i].dtype) ? 0 : 1)) *
                                unit();
      if (tj_dtype_is_float(in[i].dtype)) {
        tj_store_f64(in[i].dtype, ind[i], k, v);
      } else {
        tj_store_i64(in[i].dtype, ind[i], k, (int64_t)floor(v));
      }
    }
    it[i] = tj_tensor_make(ind[i], in[i].dtype, in[i].rank, in[i].dims);
  }
  for (int o = 0; o < nout; ++o) {
    size_t bytes = (size_t)count(&out[o]) * tj_dtype_size(out[o].dtype);
    want[o] = calloc(1, bytes);
    got[o] = calloc(1, bytes);
    again[o] = calloc(1, bytes);
    want_t[o] = tj_tensor_make(want[o], out[o].dtype, out[o].rank, out[o].dims);
    got_t[o] = tj_tensor_make(got[o], out[o].dtype, out[o].rank, out[o].dims);
    again_t[o] =
        tj_tensor_make(again[o], out[o].dtype, out[o].rank, out[o].dims);
  }
  CHECK_OK(tj_reference_run(g, it, nin, want_t, nout));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    CHECK_OK(tj_executable_run(exe, it, nin, got_t, nout));
    CHECK_OK(tj_executable_run(exe, it, nin, again_t, nout));
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    tj_executable_release(exe);
  }
  for (int k = 0; k < nout; ++k) {
    int64_t n = count(&out[k]), bad = 0;
    size_t es = tj_dtype_size(out[k].dtype);
    for (int64_t e = 0; e < n; ++e) {
      bool ok;
      if (tj_dtype_is_float(out[k].dtype)) {
        double w = tj_load_f64(out[k].dtype, want[k], e);
        double v = tj_load_f64(out[k].dtype, got[k], e);
        ok = (isnan(w) && isnan(v)) || fabs(v - w) <= tol * (1 + fabs(w));
      } else {
        ok = tj_load_i64(out[k].dtype, want[k], e) ==
             tj_load_i64(out[k].dtype, got[k], e);
      }
      if (!ok && bad++ < 3) {
        fprintf(stderr, "  %s: output %d element %lld: %.9g, want %.9g\n", what,
                k, (long long)e, tj_load_f64(out[k].dtype, got[k], e),
                tj_load_f64(out[k].dtype, want[k], e));
      }
    }
    CHECK_EQ_INT(0, (int)bad);
    CHECK(memcmp(got[k], again[k], (size_t)n * es) == 0);
  }
  for (int i = 0; i < nin; ++i) free(ind[i]);
  for (int k = 0; k < nout; ++k) {
    free(want[k]);
    free(got[k]);
    free(again[k]);
  }
  printf("# %s: checked\n", what);
}

static tj_graph_t* new_graph(const char* name) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, name, &g));
  return g;
}

// 3000 updates into rows of 1000 (about 3 per element), 256 rows; every
// reduction; i32 adds that wrap.
TEST(cuda_scatter_elements_every_reduction) {
  for (int r = 0; r < 5; ++r) {
    tj_graph_t* g = new_graph("cuda_scatter_elements");
    tj_value_t d =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){256, 1000}, "d");
    tj_value_t i =
        tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){256, 3000}, "i");
    tj_value_t u =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){256, 3000}, "u");
    tj_value_t a =
        tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){3000, 256}, "a");
    tj_graph_output(
        g, tj_graph_scatter_elements(g, d, i, u, 1, (tj_scatter_reduction_t)r),
        "y");
    tj_graph_output(
        g,
        tj_graph_scatter_elements(
            g,
            tj_graph_transpose(g, tj_graph_cast(g, d, TJ_DTYPE_I32),
                               (int32_t[]){1, 0}),
            tj_graph_transpose(g, i, (int32_t[]){1, 0}), a, 0,
            r == 0 ? TJ_SCATTER_REDUCTION_NONE : TJ_SCATTER_REDUCTION_ADD),
        "z");
    CHECK_OK(tj_graph_finalize(g));
    io_t in[4] = {
        {TJ_DTYPE_F32, 2, {256, 1000}, -10, 10},
        {TJ_DTYPE_I64, 2, {256, 3000}, -1010, 1009},
        {TJ_DTYPE_F32, 2, {256, 3000}, r == 2 ? 0.9 : -1, r == 2 ? 1.1 : 1},
        {TJ_DTYPE_I32, 2, {3000, 256}, -2000000000, 2000000000}};
    io_t out[2] = {{TJ_DTYPE_F32, 2, {256, 1000}, 0, 0},
                   {TJ_DTYPE_I32, 2, {1000, 256}, 0, 0}};
    check("scatter_elements", g, 4, in, 2, out, 1e-5);
    tj_graph_destroy(g);
  }
}

// A KV-cache write [4, 8, 512, 64] at 16 (b, h, t) rows each, and an
// index_put add of 5000 rows of 64 into a table of 1000 (duplicates sum).
TEST(cuda_scatter_nd_cache_and_index_put) {
  tj_graph_t* g = new_graph("cuda_scatter_nd");
  tj_value_t c =
      tj_graph_input(g, TJ_DTYPE_F16, 4, (int64_t[]){4, 8, 512, 64}, "c");
  tj_value_t ci =
      tj_graph_input(g, TJ_DTYPE_I32, 3, (int64_t[]){4, 16, 3}, "ci");
  tj_value_t cu =
      tj_graph_input(g, TJ_DTYPE_F16, 3, (int64_t[]){4, 16, 64}, "cu");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1000, 64}, "t");
  tj_value_t ti =
      tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){5000, 1}, "ti");
  tj_value_t tu =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){5000, 64}, "tu");
  tj_graph_output(
      g, tj_graph_scatter_nd(g, c, ci, cu, TJ_SCATTER_REDUCTION_NONE), "y");
  tj_graph_output(
      g, tj_graph_scatter_nd(g, t, ti, tu, TJ_SCATTER_REDUCTION_ADD), "z");
  tj_graph_output(
      g, tj_graph_scatter_nd(g, t, ti, tu, TJ_SCATTER_REDUCTION_MAX), "w");
  CHECK_OK(tj_graph_finalize(g));
  io_t in[6] = {{TJ_DTYPE_F16, 4, {4, 8, 512, 64}, -1, 1},
                {TJ_DTYPE_I32, 3, {4, 16, 3}, -8, 511},
                {TJ_DTYPE_F16, 3, {4, 16, 64}, -1, 1},
                {TJ_DTYPE_F32, 2, {1000, 64}, -1, 1},
                {TJ_DTYPE_I64, 2, {5000, 1}, -1000, 999},
                {TJ_DTYPE_F32, 2, {5000, 64}, -1, 1}};
  io_t out[3] = {{TJ_DTYPE_F16, 4, {4, 8, 512, 64}, 0, 0},
                 {TJ_DTYPE_F32, 2, {1000, 64}, 0, 0},
                 {TJ_DTYPE_F32, 2, {1000, 64}, 0, 0}};
  check("scatter_nd", g, 6, in, 3, out, 1e-5);
  tj_graph_destroy(g);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  RUN_TEST(cuda_scatter_elements_every_reduction);
  RUN_TEST(cuda_scatter_nd_cache_and_index_put);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
