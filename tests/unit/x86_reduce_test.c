// ROW_REDUCE kernels built in kernel IR, JIT-compiled for every x86 level
// the host has, compared with the double-precision interpreter: each reduce
// op over odd row lengths (tails, NaN, ties), integer and half dtypes, a
// strided reduced dim, empty rows, softmax and layer_norm as multi-phase
// kernels, and a threaded run.

#include "tests/unit/x86_test_util.h"

static tj_kir_t* new_reduce(const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_ROW_REDUCE, name, &k));
  return k;
}

static const int64_t kLengths[] = {0,  1,  3,  15,  16,   17,
                                   63, 64, 65, 100, 1000, 4099};

// y[r] = reduce_op(x[r, :]) for x [R, L] (runtime L, padded rows), stored
// by a ROW phase; also z[r, l] = x[r, l] - y[r] by a MAP phase. |scale|
// bounds the magnitude of partial sums or products.
static void check_simple(tj_kir_reduce_t op, tj_dtype_t dt, fill_t fill,
                         double scale) {
  char name[64];
  snprintf(name, sizeof(name), "red_%s_%s", tj_kir_reduce_name(op),
           tj_dtype_name(dt));
  tj_kir_t* k = new_reduce(name);
  uint32_t L = tj_kir_add_param(k, "L");
  uint32_t P = tj_kir_add_param(k, "P");  // row pitch of x
  tj_kir_ival_t dims[2] = {tj_kir_constant(3), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_runtime(P), tj_kir_constant(1)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  tj_kir_ival_t sz[2] = {tj_kir_runtime(L), tj_kir_constant(1)};
  tj_dtype_t rd = op == TJ_KIR_REDUCE_ARGMAX ? TJ_DTYPE_I64 : dt;
  uint32_t x = tj_kir_add_buffer(k, "x", dt, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", rd, TJ_KIR_OUTPUT, sy);
  uint32_t z = UINT32_MAX;
  bool with_map = dt != TJ_DTYPE_BOOL && op != TJ_KIR_REDUCE_ARGMAX;
  if (with_map) z = tj_kir_add_buffer(k, "z", dt, TJ_KIR_OUTPUT, sz);
  uint32_t p0 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, op);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, op);
  tj_kir_store(k, y, tj_kir_row(k, p0));
  if (with_map) {
    tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, op);
    tj_kir_store(
        k, z,
        tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), tj_kir_row(k, p0)));
  }
  kernel_set_t set;
  prepare_kernel(k, &set);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kLengths); ++i) {
    int64_t len = kLengths[i];
    int64_t scalars[2] = {len, len + 5};
    fill_t fills[3] = {fill, kNoFill, kNoFill};
    // Sums and products round once per element in f32 (f64), against an
    // exact double result: an error bound of (len + 1) eps |scale|.
    double eps = dt == TJ_DTYPE_F64 ? 2.3e-16 : 1.2e-7;
    double atol = (op == TJ_KIR_REDUCE_SUM || op == TJ_KIR_REDUCE_PROD) &&
                          tj_dtype_is_float(dt)
                      ? (double)(len + 1) * eps * scale
                      : 0;
    if (!check_prepared(k, &set, scalars, fills, 1, atol)) {
      fprintf(stderr, "  (row length %lld)\n", (long long)len);
    }
  }
  release_set(&set);
  tj_kir_destroy(k);
}

TEST(float_reductions) {
  check_simple(TJ_KIR_REDUCE_SUM, TJ_DTYPE_F32, (fill_t){-10, 10, false, false},
               10);
  check_simple(TJ_KIR_REDUCE_MAX, TJ_DTYPE_F32, (fill_t){-10, 10, true, false},
               0);
  check_simple(TJ_KIR_REDUCE_MIN, TJ_DTYPE_F32, (fill_t){-10, 10, true, false},
               0);
  check_simple(TJ_KIR_REDUCE_PROD, TJ_DTYPE_F32,
               (fill_t){0.98, 1.02, false, false}, 8);
  // Ties (integral values) and NaNs: the first max, the first NaN.
  check_simple(TJ_KIR_REDUCE_ARGMAX, TJ_DTYPE_F32, (fill_t){-4, 4, true, true},
               0);
  check_simple(TJ_KIR_REDUCE_ARGMAX, TJ_DTYPE_F32, (fill_t){-4, 4, false, true},
               0);
  check_simple(TJ_KIR_REDUCE_SUM, TJ_DTYPE_F64, (fill_t){-10, 10, false, false},
               10);
  check_simple(TJ_KIR_REDUCE_MAX, TJ_DTYPE_F64, (fill_t){-10, 10, true, false},
               0);
  check_simple(TJ_KIR_REDUCE_SUM, TJ_DTYPE_F16, (fill_t){-4, 4, false, false},
               4);
  check_simple(TJ_KIR_REDUCE_SUM, TJ_DTYPE_BF16, (fill_t){-4, 4, false, false},
               4);
  check_simple(TJ_KIR_REDUCE_MAX, TJ_DTYPE_BF16, (fill_t){-4, 4, true, false},
               0);
}

TEST(integer_reductions) {
  check_simple(TJ_KIR_REDUCE_SUM, TJ_DTYPE_I32,
               (fill_t){-2e9, 2e9, false, false}, 0);
  check_simple(TJ_KIR_REDUCE_PROD, TJ_DTYPE_I64, (fill_t){-3, 3, false, false},
               0);
  check_simple(TJ_KIR_REDUCE_MAX, TJ_DTYPE_I8,
               (fill_t){-128, 127, false, false}, 0);
  check_simple(TJ_KIR_REDUCE_MIN, TJ_DTYPE_I8,
               (fill_t){-128, 127, false, false}, 0);
  check_simple(TJ_KIR_REDUCE_ARGMAX, TJ_DTYPE_I32,
               (fill_t){-5, 5, false, false}, 0);
  check_simple(TJ_KIR_REDUCE_MAX, TJ_DTYPE_BOOL, (fill_t){0, 1, false, false},
               0);
  check_simple(TJ_KIR_REDUCE_MIN, TJ_DTYPE_BOOL, (fill_t){0, 1, false, false},
               0);
  check_simple(TJ_KIR_REDUCE_ARGMAX, TJ_DTYPE_BOOL,
               (fill_t){0, 1, false, false}, 0);
}

// Softmax over the last dim as three phases on each row: max, sum of
// exp(x - max), normalize.
static tj_kir_t* build_softmax(tj_dtype_t dt) {
  char name[64];
  snprintf(name, sizeof(name), "softmax_%s", tj_dtype_name(dt));
  tj_kir_t* k = new_reduce(name);
  uint32_t R = tj_kir_add_param(k, "R");
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(R), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t s[2] = {tj_kir_runtime(L), tj_kir_constant(1)};
  uint32_t x = tj_kir_add_buffer(k, "x", dt, TJ_KIR_INPUT, s);
  uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, s);
  tj_dtype_t ct = dt == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
  uint32_t pmax = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_MAX);
  tj_kir_yield(k, tj_kir_cast(k, ct, tj_kir_load(k, x)));
  uint32_t psum = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  uint32_t d = tj_kir_binary(
      k, TJ_OP_SUB, tj_kir_cast(k, ct, tj_kir_load(k, x)), tj_kir_row(k, pmax));
  tj_kir_yield(k, tj_kir_unary(k, TJ_OP_EXP, d));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  d = tj_kir_binary(k, TJ_OP_SUB, tj_kir_cast(k, ct, tj_kir_load(k, x)),
                    tj_kir_row(k, pmax));
  uint32_t e = tj_kir_unary(k, TJ_OP_EXP, d);
  tj_kir_store(
      k, y,
      tj_kir_cast(k, dt, tj_kir_binary(k, TJ_OP_DIV, e, tj_kir_row(k, psum))));
  return k;
}

TEST(softmax) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16, TJ_DTYPE_F64};
  static const int64_t shapes[][2] = {{1, 1},    {7, 3},    {5, 17},
                                      {3, 1000}, {2, 4096}, {4, 10007}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    tj_kir_t* k = build_softmax(dts[t]);
    kernel_set_t set;
    prepare_kernel(k, &set);
    for (size_t i = 0; i < TJ_ARRAY_SIZE(shapes); ++i) {
      int64_t scalars[2] = {shapes[i][0], shapes[i][1]};
      // Large logits: max subtraction is what keeps exp finite. x - max
      // rounds in f32, which costs |x - max| ulps in exp for the tiny
      // probabilities: an absolute tolerance covers those.
      fill_t fills[2] = {{-80, 80, false, false}, kNoFill};
      check_prepared(k, &set, scalars, fills, 8,
                     dts[t] == TJ_DTYPE_F64 ? 1e-15 : 1e-9);
    }
    release_set(&set);
    tj_kir_destroy(k);
  }
  // Rows sum to 1 and a -inf logit gets probability 0.
  tj_kir_t* k = build_softmax(TJ_DTYPE_F32);
  CHECK_OK(tj_kir_finalize(k));
  compiled_t c;
  if (compile_kernel(g_jits[0], k, &c)) {
    float x[2 * 33], y[2 * 33];
    for (int i = 0; i < 66; ++i) x[i] = (float)rng_uniform(-30, 30);
    x[5] = -INFINITY;
    int64_t scalars[2] = {2, 33};
    void* bufs[2] = {x, y};
    run_kernel(g_jits[0], k, c.fn, bufs, scalars, NULL);
    for (int r = 0; r < 2; ++r) {
      double s = 0;
      for (int i = 0; i < 33; ++i) s += y[r * 33 + i];
      CHECK(fabs(s - 1.0) < 1e-5);
    }
    CHECK(y[5] == 0.0f);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
}

// layer_norm over the last dim: mean, two-pass variance, normalize with
// gamma and beta; mean and rstd stored per row (a ROW phase).
TEST(layer_norm) {
  tj_kir_t* k = new_reduce("layer_norm");
  uint32_t R = tj_kir_add_param(k, "R");
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(R), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t s[2] = {tj_kir_runtime(L), tj_kir_constant(1)};
  tj_kir_ival_t sg[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_kir_ival_t sr[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s);
  uint32_t g = tj_kir_add_buffer(k, "gamma", TJ_DTYPE_F32, TJ_KIR_INPUT, sg);
  uint32_t bt = tj_kir_add_buffer(k, "beta", TJ_DTYPE_F32, TJ_KIR_INPUT, sg);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s);
  uint32_t mo = tj_kir_add_buffer(k, "mean", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sr);
  uint32_t ro = tj_kir_add_buffer(k, "rstd", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sr);
  uint32_t psum = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  // mean = sum / L, recomputed where needed (cheap, and keeps phases
  // independent).
#define MEAN()                                     \
  tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, psum), \
                tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_param(k, L)))
  uint32_t pvar = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  uint32_t d = tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), MEAN());
  tj_kir_yield(k, tj_kir_binary(k, TJ_OP_MUL, d, d));
#define RSTD()                                                                \
  tj_kir_unary(k, TJ_OP_RSQRT,                                                \
               tj_kir_binary(k, TJ_OP_ADD,                                    \
                             tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, pvar), \
                                           tj_kir_cast(k, TJ_DTYPE_F32,       \
                                                       tj_kir_param(k, L))),  \
                             tj_kir_const_float(k, TJ_DTYPE_F32, 1e-5)))
  tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  d = tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), MEAN());
  uint32_t n = tj_kir_binary(k, TJ_OP_MUL, d, RSTD());
  n = tj_kir_binary(k, TJ_OP_ADD,
                    tj_kir_binary(k, TJ_OP_MUL, n, tj_kir_load(k, g)),
                    tj_kir_load(k, bt));
  tj_kir_store(k, y, n);
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, mo, MEAN());
  tj_kir_store(k, ro, RSTD());
#undef MEAN
#undef RSTD
  static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {4, 768}, {2, 1031}};
  kernel_set_t set;
  prepare_kernel(k, &set);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(shapes); ++i) {
    int64_t scalars[2] = {shapes[i][0], shapes[i][1]};
    fill_t fills[6] = {{-3, 5, false, false},
                       {0.5, 1.5, false, false},
                       {-1, 1, false, false},
                       kNoFill,
                       kNoFill,
                       kNoFill};
    check_prepared(k, &set, scalars, fills, 8, 2e-5);
  }
  release_set(&set);
  tj_kir_destroy(k);
}

// Reducing a strided dim: column sums of a row-major [L, C] matrix are
// rows of the space [C, L] with strides [1, C] (gathers along L).
TEST(strided_reduce_dim) {
  tj_kir_t* k = new_reduce("colsum");
  uint32_t C = tj_kir_add_param(k, "C");
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(C), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(1), tj_kir_runtime(C)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
  uint32_t p = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_row(k, p));
  int64_t scalars[2] = {13, 301};
  fill_t fills[2] = {{-1, 1, false, false}, kNoFill};
  check_kernel(k, scalars, fills, 1, 302 * 1.2e-7);
  tj_kir_destroy(k);
}

// Rows on a pool give the serial result bit for bit (each row is one unit).
TEST(threaded_rows) {
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 2, &pool));
  tj_kir_t* k = build_softmax(TJ_DTYPE_F32);
  CHECK_OK(tj_kir_finalize(k));
  compiled_t c;
  if (compile_kernel(g_jits[0], k, &c)) {
    int64_t rows = 257, len = 513;
    float* x = malloc((size_t)(rows * len) * 4);
    float* y1 = calloc((size_t)(rows * len), 4);
    float* y2 = calloc((size_t)(rows * len), 4);
    for (int64_t i = 0; i < rows * len; ++i) x[i] = (float)rng_uniform(-9, 9);
    int64_t scalars[2] = {rows, len};
    void* b1[2] = {x, y1};
    void* b2[2] = {x, y2};
    run_kernel(g_jits[0], k, c.fn, b1, scalars, NULL);
    run_kernel(g_jits[0], k, c.fn, b2, scalars, pool);
    CHECK(memcmp(y1, y2, (size_t)(rows * len) * 4) == 0);
    free(x);
    free(y1);
    free(y2);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  tj_thread_pool_destroy(pool);
}

int main(void) {
  open_jits();
  RUN_TEST(float_reductions);
  RUN_TEST(integer_reductions);
  RUN_TEST(softmax);
  RUN_TEST(layer_norm);
  RUN_TEST(strided_reduce_dim);
  RUN_TEST(threaded_rows);
  close_jits();
  TEST_MAIN_END();
}
