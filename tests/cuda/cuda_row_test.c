// Row kernels on the GPU (issue 14): softmax, attention's masked and scaled
// softmax, log_softmax, layer_norm and rms_norm over the last axis, f32 and
// bf16, compiled for CUDA and run against the reference interpreter at row
// lengths around the resident path's end (4096, 4097), the staged path's
// (rows32k: a row in shared memory, read from DRAM once; 4100 to its
// shared-memory bound, where the streaming path takes over, long_rows),
// the streaming path (8191, 32767, past the staged bound: softmax's
// maximum and sum in one pass, emit_online_pair in jit/emit_nvptx.c), with
// an infinity, a NaN and a far first element, many rows a block and empty
// rows, and with TJ_NVPTX_ROWS=streaming; short rows of a warp each
// (128, 509, 512 over thousands of rows: no barrier between the rows of a
// block) and rows that share a warp (1 to 200 elements; also sum, max and
// argmax). Rows with special values: partly masked (-inf every third
// element), entirely masked (NaN, as the reference), a masked tail, a
// constant row. Tolerances: f32 2e-5 relative + 1e-6, bf16 2^-7 + 2^-9;
// NaN exactly where the reference has it; no graph break. Skips without a
// GPU. Offline PTX: tests/unit/row_ptx_test.c.

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/row_cases.h"

static tj_context_t* g_ctx;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static double normal(void) {
  double u[2];
  for (int i = 0; i < 2; ++i) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    u[i] = ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

// Row values past the plain normal ones (run_case's |special| rows).
typedef enum row_values_e {
  ROW_VALUES_PLAIN,
  // rows 5..7 of 8 (the first five as ROW_VALUES_PLAIN): +inf at a third
  // of the row, NaN in the last element (the last 16-byte chunk a staged
  // row copies), and the first element 64 + u over a spread of 4 around 0
  // (layer_norm's shift far from the rest: layer_norm_large_first_element
  // in x86_reduce_edge_test).
  ROW_VALUES_SPECIAL,
} row_values_t;

static void run_case_in(tj_context_t* ctx, row_op_t op, tj_dtype_t dt,
                        int64_t rows, int64_t n, row_values_t values) {
  char what[96];
  snprintf(what, sizeof(what), "%s %s [%lld, %lld]%s", kRowOpNames[op],
           tj_dtype_name(dt), (long long)rows, (long long)n,
           values == ROW_VALUES_SPECIAL ? " special" : "");
  tj_graph_t* g = row_case_build(ctx, op, dt, 0, 0);
  CHECK(g != NULL);
  if (!g) return;
  CHECK_OK(tj_graph_finalize(g));
  const int nin = row_case_inputs(op);
  void* in[3] = {NULL, NULL, NULL};
  tj_tensor_t it[3];
  const int64_t xd[2] = {rows, n}, vd[1] = {n};
  for (int i = 0; i < nin; ++i) {
    bool vec = op == ROW_LAYER_NORM || op == ROW_RMS_NORM ? i > 0 : false;
    int64_t count = vec ? n : rows * n;
    in[i] = calloc((size_t)(count > 0 ? count : 1), tj_dtype_size(dt));
    for (int64_t k = 0; k < count; ++k) {
      double v = normal() * (i == 0 ? 4.0 : 1.0);
      if (op == ROW_MASKED_SOFTMAX && i == 1) {  // the mask
        int64_t r = k / n, c = k % n;
        v = (r % 5 == 1 && c % 3 == 0) || r % 5 == 2 ||
                    (r % 5 == 3 && c >= n / 2)
                ? -INFINITY
                : 0.0;
      }
      if (i == 0 && (k / n) % 5 == 4) v = 0.0;  // a constant row
      if (i == 0 && values == ROW_VALUES_SPECIAL) {
        int64_t r = k / n, c = k % n;
        if (r == 5 && c == n / 3) v = INFINITY;
        if (r == 6 && c == n - 1) v = NAN;
        if (r == 7) {
          g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
          double u = (double)(g_rng >> 11) * 0x1p-53;
          v = c == 0 ? 64.0 + u : 4.0 * u - 2.0;
        }
      }
      tj_store_f64(dt, in[i], k, v);
    }
    it[i] = tj_tensor_make(in[i], dt, vec ? 1 : 2, vec ? vd : xd);
  }
  size_t bytes = (size_t)(rows * n) * tj_dtype_size(dt);
  void* want = calloc(1, bytes > 0 ? bytes : 1);
  void* got = calloc(1, bytes > 0 ? bytes : 1);
  tj_tensor_t want_t = tj_tensor_make(want, dt, 2, xd);
  tj_tensor_t got_t = tj_tensor_make(got, dt, 2, xd);
  CHECK_OK(tj_reference_run(g, it, nin, &want_t, 1));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    CHECK_OK(tj_executable_run(exe, it, nin, &got_t, 1));
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    tj_executable_release(exe);
  }
  const double rtol = dt == TJ_DTYPE_F32 ? 2e-5 : 0.0078125;
  const double atol = dt == TJ_DTYPE_F32 ? 1e-6 : 0.001953125;
  int64_t bad = 0;
  for (int64_t e = 0; e < rows * n; ++e) {
    double w = tj_load_f64(dt, want, e), v = tj_load_f64(dt, got, e);
    bool ok = isnan(w) ? isnan(v) : fabs(v - w) <= atol + rtol * fabs(w);
    if (!ok && bad++ < 3)
      fprintf(stderr, "  %s: element [%lld, %lld]: %.9g, want %.9g\n", what,
              (long long)(e / n), (long long)(e % n), v, w);
  }
  CHECK_EQ_INT(0, (int)bad);
  for (int i = 0; i < nin; ++i) free(in[i]);
  free(want);
  free(got);
  tj_graph_destroy(g);
  printf("# %s: checked\n", what);
}

static void run_case(row_op_t op, tj_dtype_t dt, int64_t rows, int64_t n) {
  run_case_in(g_ctx, op, dt, rows, n, ROW_VALUES_PLAIN);
}

// Lengths around the resident path's end (4096 | 4097), the streaming
// path of odd lengths (8191, 32767: the scalar path) and the staged path
// (rows32k: rows past the registers whose staged buffers fit 224 KiB of
// shared memory on sm_90a, tj_nvptx_row_staged): 4104 its first length
// of both dtypes (4100 of f32), 8192 and 32768 within it, and its end,
// one 16-byte staged buffer a row (softmax, log_softmax, the norms): f32
// staged to 57340, streaming from 57344, bf16 staged to 114680,
// streaming from 114688; the masked softmax stages x and the mask, so
// half those lengths (f32 32768 and bf16 65536 streaming).
TEST(long_rows) {
  static const int64_t kLengths[] = {4096,  4097,  4100,   4104,  8191,
                                     8192,  32767, 32768,  57336, 57344,
                                     65536, 65544, 114680, 114688};
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l)
      for (int t = 0; t < 2; ++t)
        run_case((row_op_t)op, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32, 5,
                 kLengths[l]);
}

// Staged, resident and streaming rows with an infinity, a NaN in the last
// chunk, and a first element far from the rest (ROW_VALUES_SPECIAL).
TEST(long_rows_special_values) {
  static const int64_t kLengths[] = {4096, 4104, 8192, 32768, 65536};
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l)
      for (int t = 0; t < 2; ++t)
        run_case_in(g_ctx, (row_op_t)op, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32, 8,
                    kLengths[l], ROW_VALUES_SPECIAL);
}

// Many staged rows (more than the grid's blocks, 32 an SM: 4224 on an
// H100, so blocks stage a second row in the same shared memory) and rows
// of 0 elements.
TEST(staged_rows_many_and_empty) {
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (int t = 0; t < 2; ++t) {
      tj_dtype_t dt = t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32;
      run_case((row_op_t)op, dt, 5001, 4104);
      run_case((row_op_t)op, dt, 7, 0);
    }
}

// TJ_NVPTX_ROWS=streaming (a context of its own, which reads it): the row
// kernels without the staged path, the lengths it would take.
TEST(streaming_when_asked) {
  setenv("TJ_NVPTX_ROWS", "streaming", 1);
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  unsetenv("TJ_NVPTX_ROWS");
  if (!ctx) return;
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (int t = 0; t < 2; ++t)
      run_case_in(ctx, (row_op_t)op, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32, 8, 32768,
                  ROW_VALUES_SPECIAL);
  tj_context_destroy(ctx);
}

TEST(short_rows_a_warp_each) {
  static const int64_t kLengths[] = {128, 509, 512};
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l)
      for (int t = 0; t < 2; ++t)
        run_case((row_op_t)op, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32, 3000,
                 kLengths[l]);
}

// Rows shorter than a warp's worth share a warp (4 threads for 64 f32
// elements): the shuffles must stay inside each row. Lengths from 1 to 200
// over 3001 rows, so the last block is partial.
TEST(short_rows_share_a_warp) {
  static const int64_t kLengths[] = {1, 3, 8, 16, 33, 64, 100, 128, 200};
  for (int op = 0; op < ROW_OP_COUNT_; ++op)
    for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l)
      for (int t = 0; t < 2; ++t)
        run_case((row_op_t)op, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32, 3001,
                 kLengths[l]);
}

typedef enum { ROW_DOT, ROW_MAX, ROW_ARGMAX } plain_reduce_t;

// sum(a * b) over the last axis in f32 of |dt| inputs (attention's delta,
// rowsum(dy * y)), max, and argmax (one index a thread), [rows, n] -> [rows].
static void run_reduce_case(plain_reduce_t kind, tj_dtype_t dt, int64_t rows,
                            int64_t n) {
  static const char* const kNames[] = {"dot", "max", "argmax"};
  char what[96];
  snprintf(what, sizeof(what), "%s %s [%lld, %lld]", kNames[kind],
           tj_dtype_name(dt), (long long)rows, (long long)n);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "reduce", &g));
  if (!g) return;
  const int64_t xd[2] = {rows, n};
  const int32_t axis = 1;
  tj_value_t a = tj_graph_input(g, dt, 2, xd, "a");
  tj_value_t y;
  int nin = 1;
  if (kind == ROW_DOT) {
    tj_value_t b = tj_graph_input(g, dt, 2, xd, "b");
    nin = 2;
    y = tj_graph_sum(g,
                     tj_graph_mul(g, tj_graph_cast(g, a, TJ_DTYPE_F32),
                                  tj_graph_cast(g, b, TJ_DTYPE_F32)),
                     1, &axis, false);
  } else {
    y = kind == ROW_MAX ? tj_graph_max(g, a, 1, &axis, false)
                        : tj_graph_argmax(g, a, 1, false);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  void* in[2] = {NULL, NULL};
  tj_tensor_t it[2];
  for (int i = 0; i < nin; ++i) {
    in[i] = calloc((size_t)(rows * n), tj_dtype_size(dt));
    for (int64_t k = 0; k < rows * n; ++k) tj_store_f64(dt, in[i], k, normal());
    it[i] = tj_tensor_make(in[i], dt, 2, xd);
  }
  const tj_dtype_t yt = kind == ROW_ARGMAX ? TJ_DTYPE_I64
                        : kind == ROW_DOT  ? TJ_DTYPE_F32
                                           : dt;
  const int64_t yd[1] = {rows};
  void* want = calloc((size_t)rows, 8);
  void* got = calloc((size_t)rows, 8);
  tj_tensor_t want_t = tj_tensor_make(want, yt, 1, yd);
  tj_tensor_t got_t = tj_tensor_make(got, yt, 1, yd);
  CHECK_OK(tj_reference_run(g, it, nin, &want_t, 1));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    CHECK_OK(tj_executable_run(exe, it, nin, &got_t, 1));
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    tj_executable_release(exe);
  }
  // The dot's f32 sum in another order: 1e-6 of the magnitudes summed.
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double w = tj_load_f64(yt, want, r), v = tj_load_f64(yt, got, r);
    double tol = kind == ROW_DOT ? 1e-6 * (double)n + 1e-5 * fabs(w) : 0.0;
    if (!(fabs(v - w) <= tol) && bad++ < 3)
      fprintf(stderr, "  %s: row %lld: %.9g, want %.9g\n", what, (long long)r,
              v, w);
  }
  CHECK_EQ_INT(0, (int)bad);
  for (int i = 0; i < nin; ++i) free(in[i]);
  free(want);
  free(got);
  tj_graph_destroy(g);
  printf("# %s: checked\n", what);
}

TEST(short_reductions_share_a_warp) {
  static const int64_t kLengths[] = {1, 3, 8, 64, 100, 128, 256};
  for (int kind = 0; kind < 3; ++kind)
    for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l)
      for (int t = 0; t < 2; ++t)
        run_reduce_case((plain_reduce_t)kind, t ? TJ_DTYPE_BF16 : TJ_DTYPE_F32,
                        3001, kLengths[l]);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  // The staged path whatever its default (kRowsStagedByDefault), unless
  // the caller's TJ_NVPTX_ROWS says otherwise (=streaming: the suite on
  // the kernel of before).
  setenv("TJ_NVPTX_ROWS", "staged", 0);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  RUN_TEST(long_rows);
  RUN_TEST(long_rows_special_values);
  RUN_TEST(staged_rows_many_and_empty);
  RUN_TEST(streaming_when_asked);
  RUN_TEST(short_rows_a_warp_each);
  RUN_TEST(short_rows_share_a_warp);
  RUN_TEST(short_reductions_share_a_warp);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
