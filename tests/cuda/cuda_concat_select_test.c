// A concat whose inputs are pointwise functions of slices of the same
// tensors as one select per element on the GPU (rope14, issue 14;
// kir/lower_select.c, the piecewise LOAD_AT of jit/emit_llvm.c), against
// tj_reference_run, one executable per graph (B symbolic) run at B = 1 and
// 3:
//   - rotary embeddings as the Llama block builds them, v * cos +
//     concat([-hi, lo], 3) * sin, v a transposed view of x [B, T, H*D] (the
//     blocks' heads()) or an input; head dims 128 and 64 (halves a multiple
//     of the vector path's 8 or 4 lanes: 16-byte loads), 10 and 9 (halves
//     of 5, and of 5 and 4: vectors straddle them and gather), T 7 and 130;
//     bf16, f16, f32;
//   - three inputs, scaled, negated and shifted, of unequal sizes;
//   - a non-last axis; a symbolic concat axis (x [B, S], S 5 and 64);
// each one kernel, and under TJ_CONCAT_SELECT=off (read when a context is
// created) the boxes again (two or three kernels), the same numbers.
// bf16 within 4e-2, f16 8e-3, f32 1e-5 (relative, absolute below 1): the
// kernel rounds once where the reference rounds every op, 2 ulps of terms
// up to 4 in magnitude. Skips (exit 77)
// without a driver or GPU.

#include <stdlib.h>

#include "tests/cuda/cuda_test_util.h"

// The inputs' generator (tj_test_random_tensor).
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

typedef enum kind_e { ROPE, ROPE_VIEW, THREE, MIDDLE, SYMBOLIC } kind_t;

typedef struct shape_t {
  kind_t kind;
  int64_t t, d;  // rope: T and the head dim; SYMBOLIC: S
} shape_t;

enum { kH = 3, kMaxIn = 3 };

static tj_value_t slice_axis(tj_graph_t* g, tj_value_t v, int32_t rank,
                             int32_t axis, int64_t start, int64_t stop) {
  int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK];
  for (int32_t d = 0; d < rank; ++d) stops[d] = INT64_MAX;
  starts[axis] = start;
  stops[axis] = stop;
  return tj_graph_slice(g, v, starts, stops, NULL);
}

static tj_value_t scalar(tj_graph_t* g, tj_dtype_t dt, double value) {
  return tj_graph_full(g, dt, 0, NULL, value);
}

// The inputs' and the output's dims at batch |b|; returns the input count.
static int32_t dims_of(const shape_t* s, int64_t b, int32_t* ranks,
                       int64_t dims[][4], int32_t* y_rank, int64_t* y_dims) {
  switch (s->kind) {
    case ROPE:
    case ROPE_VIEW:
      if (s->kind == ROPE) {
        ranks[0] = 4;
        memcpy(dims[0], (int64_t[]){b, kH, s->t, s->d}, sizeof(dims[0]));
      } else {
        ranks[0] = 3;
        memcpy(dims[0], (int64_t[]){b, s->t, kH * s->d, 0}, sizeof(dims[0]));
      }
      ranks[1] = ranks[2] = 2;
      memcpy(dims[1], (int64_t[]){s->t, s->d, 0, 0}, sizeof(dims[1]));
      memcpy(dims[2], dims[1], sizeof(dims[2]));
      *y_rank = 4;
      memcpy(y_dims, (int64_t[]){b, kH, s->t, s->d}, sizeof(int64_t) * 4);
      return 3;
    case THREE:
      ranks[0] = *y_rank = 2;
      memcpy(dims[0], (int64_t[]){b, 13, 0, 0}, sizeof(dims[0]));
      memcpy(y_dims, dims[0], sizeof(int64_t) * 4);
      return 1;
    case MIDDLE:
      ranks[0] = *y_rank = 3;
      memcpy(dims[0], (int64_t[]){b, 7, 6, 0}, sizeof(dims[0]));
      memcpy(y_dims, dims[0], sizeof(int64_t) * 4);
      return 1;
    case SYMBOLIC:
      ranks[0] = *y_rank = 2;
      memcpy(dims[0], (int64_t[]){b, s->t, 0, 0}, sizeof(dims[0]));
      memcpy(y_dims, (int64_t[]){b, 2 * s->t, 0, 0}, sizeof(int64_t) * 4);
      return 1;
  }
  return 0;
}

static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const shape_t* s) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "concat_select", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t y = tj_value_none();
  if (s->kind == ROPE || s->kind == ROPE_VIEW) {
    int64_t D = s->d, half = s->d / 2;
    tj_value_t v;
    if (s->kind == ROPE_VIEW) {
      tj_value_t x =
          tj_graph_input(g, dt, 3, (int64_t[]){B, s->t, kH * D}, "x");
      v = tj_graph_transpose(
          g, tj_graph_reshape(g, x, 4, (int64_t[]){B, s->t, kH, D}),
          (const int32_t[]){0, 2, 1, 3});
    } else {
      v = tj_graph_input(g, dt, 4, (int64_t[]){B, kH, s->t, D}, "v");
    }
    tj_value_t c = tj_graph_input(g, dt, 2, (int64_t[]){s->t, D}, "cos");
    tj_value_t sn = tj_graph_input(g, dt, 2, (int64_t[]){s->t, D}, "sin");
    tj_value_t lo = slice_axis(g, v, 4, 3, 0, half);
    tj_value_t hi = slice_axis(g, v, 4, 3, half, INT64_MAX);
    tj_value_t rot =
        tj_graph_concat(g, 2, (tj_value_t[]){tj_graph_neg(g, hi), lo}, 3);
    y = tj_graph_add(g, tj_graph_mul(g, v, c), tj_graph_mul(g, rot, sn));
  } else if (s->kind == THREE) {
    tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){B, 13}, "x");
    tj_value_t a = tj_graph_mul(g, slice_axis(g, x, 2, 1, 9, INT64_MAX),
                                scalar(g, dt, 2.0));
    tj_value_t b = tj_graph_neg(g, slice_axis(g, x, 2, 1, 4, 9));
    tj_value_t c =
        tj_graph_add(g, slice_axis(g, x, 2, 1, 0, 4), scalar(g, dt, 1.0));
    tj_value_t cat = tj_graph_concat(g, 3, (tj_value_t[]){a, b, c}, 1);
    y = tj_graph_add(g, tj_graph_mul(g, cat, x), scalar(g, dt, 0.5));
  } else if (s->kind == MIDDLE) {
    tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){B, 7, 6}, "x");
    tj_value_t cat = tj_graph_concat(
        g, 2,
        (tj_value_t[]){slice_axis(g, x, 3, 1, 3, INT64_MAX),
                       tj_graph_neg(g, slice_axis(g, x, 3, 1, 0, 3))},
        1);
    y = tj_graph_add(g, cat, x);
  } else {
    int64_t S = tj_graph_symbol(g, "S");
    tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){B, S}, "x");
    y = tj_graph_concat(g, 2,
                        (tj_value_t[]){tj_graph_mul(g, x, scalar(g, dt, 3.0)),
                                       tj_graph_neg(g, x)},
                        1);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct data_t {
  int32_t num_in;
  void* in[kMaxIn];
  int64_t dims[kMaxIn][4];
  int32_t ranks[kMaxIn];
  int64_t ny;
  int64_t y_dims[4];
  int32_t y_rank;
  void* want;
} data_t;

static int64_t numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

static void data_make(tj_graph_t* ref, tj_dtype_t dt, const shape_t* s,
                      int64_t b, data_t* d) {
  memset(d, 0, sizeof(*d));
  d->num_in = dims_of(s, b, d->ranks, d->dims, &d->y_rank, d->y_dims);
  tj_tensor_t in[kMaxIn];
  for (int32_t i = 0; i < d->num_in; ++i) {
    // Uniform in [-2, 2); every input has elements (B >= 1).
    d->in[i] =
        tj_test_random_tensor(&g_rng, dt, numel(d->ranks[i], d->dims[i]), 2.0);
    in[i] = tj_tensor_make(d->in[i], dt, d->ranks[i], d->dims[i]);
  }
  d->ny = numel(d->y_rank, d->y_dims);
  d->want = calloc((size_t)(d->ny ? d->ny : 1), tj_dtype_size(dt));
  tj_tensor_t want = tj_tensor_make(d->want, dt, d->y_rank, d->y_dims);
  CHECK_OK(tj_reference_run(ref, in, d->num_in, &want, 1));
}

static void data_free(data_t* d) {
  for (int32_t i = 0; i < d->num_in; ++i) free(d->in[i]);
  free(d->want);
}

// The tolerance of |dt| (see the top), relative, absolute below 1.
static double tolerance(tj_dtype_t dt) {
  return dt == TJ_DTYPE_BF16 ? 4e-2 : dt == TJ_DTYPE_F16 ? 8e-3 : 1e-5;
}

static tj_context_t* g_ref_ctx;

// Compiles |s| in |dt| for CUDA and checks each run against the reference;
// returns the kernel count (-1 on failure).
static int32_t check(tj_dtype_t dt, const shape_t* s, data_t* runs,
                     int32_t num_runs) {
  // A context of its own: TJ_CONCAT_SELECT is read when it is created.
  tj_context_t* ctx = tj_test_cuda_context_create(NULL);
  if (!ctx) return -1;
  tj_graph_t* g = build(ctx, dt, s);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);  // no GEMM: allow_tf32 moves nothing
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  static const char* const kNames[] = {"rope", "rope view", "three", "middle",
                                       "symbolic"};
  char what[128];
  snprintf(what, sizeof(what), "%s %s t%lld d%lld%s", kNames[s->kind],
           tj_dtype_name(dt), (long long)s->t, (long long)s->d,
           getenv("TJ_CONCAT_SELECT") ? " TJ_CONCAT_SELECT=off" : "");
  for (int32_t i = 0; exe && i < num_runs; ++i) {
    data_t* r = &runs[i];
    tj_tensor_t in[kMaxIn];
    for (int32_t j = 0; j < r->num_in; ++j)
      in[j] = tj_tensor_make(r->in[j], dt, r->ranks[j], r->dims[j]);
    void* got = calloc((size_t)(r->ny ? r->ny : 1), tj_dtype_size(dt));
    tj_tensor_t got_t = tj_tensor_make(got, dt, r->y_rank, r->y_dims);
    CHECK_OK(tj_executable_run(exe, in, r->num_in, &got_t, 1));
    bool ok =
        tj_test_close_enough(what, dt, got, r->want, r->ny, tolerance(dt));
    if (!ok)
      fprintf(stderr, "  (%s at B = %lld)\n", what, (long long)r->y_dims[0]);
    CHECK(ok);
    free(got);
  }
  int32_t kernels = -1;
  if (exe) {
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    kernels = st.num_kernels;
    printf("# %s: %d kernels\n", what, (int)kernels);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return kernels;
}

static const int64_t kBs[] = {1, 3};
enum { kNumBs = 2 };

// |s| in |dt|: one kernel; with |boxes| > 0 also under TJ_CONCAT_SELECT=off,
// |boxes| kernels and the same numbers.
static void check_ab(tj_dtype_t dt, const shape_t* s, int32_t boxes) {
  tj_graph_t* ref = build(g_ref_ctx, dt, s);
  data_t runs[kNumBs];
  for (int32_t i = 0; i < kNumBs; ++i) data_make(ref, dt, s, kBs[i], &runs[i]);
  tj_graph_destroy(ref);
  CHECK_EQ_INT(1, check(dt, s, runs, kNumBs));
  if (boxes > 0) {
    setenv("TJ_CONCAT_SELECT", "off", 1);
    CHECK_EQ_INT(boxes, check(dt, s, runs, kNumBs));
    unsetenv("TJ_CONCAT_SELECT");
  }
  for (int32_t i = 0; i < kNumBs; ++i) data_free(&runs[i]);
}

static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16, TJ_DTYPE_F32};

TEST(rope) {
  const int64_t heads[] = {128, 64, 10, 9};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    for (size_t h = 0; h < TJ_ARRAY_SIZE(heads); ++h) {
      shape_t s = {h % 2 ? ROPE : ROPE_VIEW, h < 2 ? 130 : 7, heads[h]};
      check_ab(kTypes[t], &s, t == 0 ? 2 : 0);
    }
  }
}

TEST(three) {
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    shape_t s = {THREE, 0, 0};
    check_ab(kTypes[t], &s, t == 0 ? 3 : 0);
  }
}

TEST(middle) {
  shape_t s = {MIDDLE, 0, 0};
  check_ab(TJ_DTYPE_BF16, &s, 2);
  check_ab(TJ_DTYPE_F32, &s, 0);
}

TEST(symbolic) {
  shape_t s = {SYMBOLIC, 5, 0};
  check_ab(TJ_DTYPE_F32, &s, 2);
  shape_t s2 = {SYMBOLIC, 64, 0};
  check_ab(TJ_DTYPE_BF16, &s2, 0);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  if (tj_test_context_create(&g_ref_ctx) != NULL) return 1;
  RUN_TEST(rope);
  RUN_TEST(three);
  RUN_TEST(middle);
  RUN_TEST(symbolic);
  tj_context_destroy(g_ref_ctx);
  TEST_MAIN_END();
}
