// ddshape (issue 15): the data-dependent ops (lib/dd_ops.c) nonzero,
// compress, unique and non-max suppression. Each sits between a fused
// region before it and one after it, compiled for x86 at every ISA tier
// the host has, and runs at several sizes from one executable: results
// against loops written here (numpy's semantics) and against the reference
// interpreter (tj_reference_run_shaped), no graph break, exactly one host
// call, no recompile. Then the data-dependent graph outputs
// (tj_executable_run_shaped), the errors, the text form and the OOM sweep;
// and the graph breaks ddshape removed (pools of many taps).

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit.h"
#include "tests/unit/test.h"

enum { kTiers = 3 };
static const char* const kIsa[kTiers] = {NULL, "avx2", "sse2"};
static tj_context_t* g_ctx[kTiers];

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double unit(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}

static tj_executable_t* compile_x86(tj_graph_t* g) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

// The regions on both sides compiled, the op a host call, nothing run on
// the reference interpreter, and after all runs no recompile.
static void check_stats(tj_executable_t* exe, int32_t calls,
                        int32_t min_kernels) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(calls, st.num_host_calls);
  CHECK(st.num_kernels >= min_kernels);
  CHECK_EQ_INT(0, (int)st.recompiles);
}

//===--- nonzero ---===//

// y = nonzero(relu(x - 0.25)) of x f32[R, 5]; then
// s[j] = exp(-(2 x + 1)[y[0, j], y[1, j]]) summed: a region before, the
// op, a region after, and the indices themselves as a second output.
static tj_graph_t* build_nonzero(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "nz", &g));
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 5}, "x");
  tj_value_t t = tj_graph_relu(
      g, tj_graph_sub(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 0.25)));
  tj_value_t nz = tj_graph_nonzero(g, t);
  int64_t nd[2];
  tj_graph_value_dims(g, nz, nd);
  tj_value_t rows =
      tj_graph_slice(g, nz, (int64_t[]){0, 0}, (int64_t[]){1, INT64_MAX}, NULL);
  tj_value_t cols =
      tj_graph_slice(g, nz, (int64_t[]){1, 0}, (int64_t[]){2, INT64_MAX}, NULL);
  tj_value_t flat_i = tj_graph_add(
      g, tj_graph_mul(g, rows, tj_graph_scalar(g, TJ_DTYPE_I64, 5)), cols);
  tj_value_t x2 =
      tj_graph_add(g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 2)),
                   tj_graph_scalar(g, TJ_DTYPE_F32, 1));
  tj_value_t xf = tj_graph_reshape(g, x2, 1, (int64_t[]){TJ_DIM_INFER});
  tj_value_t picked = tj_graph_gather(
      g, xf, tj_graph_reshape(g, flat_i, 1, (int64_t[]){nd[1]}), 0);
  tj_value_t s =
      tj_graph_sum(g, tj_graph_exp(g, tj_graph_neg(g, picked)), 0, NULL, false);
  tj_graph_output(g, s, "s");
  tj_graph_output(g, nz, "idx");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// Runs the nonzero graph at |rows| rows on |exe| (NULL: the reference) and
// checks it against loops.
static void run_nonzero(tj_graph_t* g, tj_executable_t* exe, int64_t rows) {
  int64_t n = rows * 5;
  float* x = calloc((size_t)(n ? n : 1), sizeof(float));
  for (int64_t i = 0; i < n; ++i) x[i] = (float)unit();
  if (n > 3) x[3] = -0.0f;  // not above 0.25: zero after relu
  int64_t* idx = calloc((size_t)(2 * n + 1), sizeof(int64_t));
  float s = -1;
  int64_t xd[2] = {rows, 5}, id[2] = {2, n};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, xd);
  tj_tensor_t outs[2] = {tj_tensor_make(&s, TJ_DTYPE_F32, 0, NULL),
                         tj_tensor_make(idx, TJ_DTYPE_I64, 2, id)};
  int64_t shapes[2 * TJ_MAX_RANK];
  if (exe)
    CHECK_OK(tj_executable_run_shaped(exe, &in, 1, outs, 2, shapes));
  else
    CHECK_OK(tj_reference_run_shaped(g, &in, 1, outs, 2, shapes));
  int64_t count = 0;
  double want = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] - 0.25f <= 0) continue;
    ++count;
    want += exp(-(2.0 * x[i] + 1.0));
  }
  CHECK_EQ_INT(2, (int)shapes[TJ_MAX_RANK]);
  CHECK_EQ_INT((int)count, (int)shapes[TJ_MAX_RANK + 1]);
  CHECK(fabs(s - want) <= 1e-5 * fmax(1, want));
  int64_t j = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] - 0.25f <= 0) continue;
    CHECK(idx[j] == i / 5 && idx[count + j] == i % 5);
    ++j;
  }
  free(x);
  free(idx);
}

TEST(nonzero_every_tier_several_sizes) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = build_nonzero(g_ctx[t]);
    tj_executable_t* exe = compile_x86(g);
    const int64_t sizes[] = {7, 1, 0, 33, 2, 7};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
      run_nonzero(g, exe, sizes[k]);
      if (t == 0) run_nonzero(g, NULL, sizes[k]);
    }
    check_stats(exe, 1, 2);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

//===--- compress ---===//

// y = tanh(compress(3 x, sum(x, 0) > 2.5, axis 1)) summed over rows, of
// x f32[B, 6]: the columns whose sum is above 2.5.
static tj_graph_t* build_compress(tj_context_t* ctx, bool has_axis) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "compress", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 6}, "x");
  int32_t zero = 0;
  tj_value_t cond = tj_graph_gt(g, tj_graph_sum(g, x, 1, &zero, false),
                                tj_graph_scalar(g, TJ_DTYPE_F32, 2.5));
  tj_value_t x3 = tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 3));
  tj_value_t c = tj_graph_compress(g, x3, cond, has_axis, 1);
  tj_graph_output(g, tj_graph_tanh(g, c), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void run_compress(tj_graph_t* g, tj_executable_t* exe, int64_t b,
                         bool has_axis) {
  int64_t n = b * 6;
  float* x = calloc((size_t)(n ? n : 1), sizeof(float));
  for (int64_t i = 0; i < n; ++i) x[i] = (float)unit();
  float* y = calloc((size_t)(n ? n : 1), sizeof(float));
  int64_t xd[2] = {b, 6}, yd[2] = {b, 6};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, xd);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, has_axis ? 2 : 1, yd);
  if (!has_axis) yd[0] = b < 6 ? b : 6;  // flat: bound = condition's length
  int64_t shape[TJ_MAX_RANK];
  if (exe)
    CHECK_OK(tj_executable_run_shaped(exe, &in, 1, &out, 1, shape));
  else
    CHECK_OK(tj_reference_run_shaped(g, &in, 1, &out, 1, shape));
  bool keep[6];
  int64_t kept = 0;
  for (int c = 0; c < 6; ++c) {
    float sum = 0;
    for (int64_t r = 0; r < b; ++r) sum += x[r * 6 + c];
    keep[c] = sum > 2.5f;
    kept += keep[c];
  }
  if (has_axis) {
    CHECK(shape[0] == b && shape[1] == kept);
    int64_t j = 0;
    for (int c = 0; c < 6; ++c) {
      if (!keep[c]) continue;
      for (int64_t r = 0; r < b; ++r)
        CHECK(fabsf(y[r * kept + j] - tanhf(3 * x[r * 6 + c])) < 1e-5f);
      ++j;
    }
  } else {
    // The condition selects among the first 6 elements of x flattened.
    int64_t want = 0;
    for (int c = 0; c < 6 && c < n; ++c) want += keep[c];
    CHECK(shape[0] == want);
    int64_t j = 0;
    for (int c = 0; c < 6 && c < n; ++c) {
      if (!keep[c]) continue;
      CHECK(fabsf(y[j++] - tanhf(3 * x[c])) < 1e-5f);
    }
  }
  free(x);
  free(y);
}

TEST(compress_every_tier_several_sizes) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = build_compress(g_ctx[t], true);
    tj_executable_t* exe = compile_x86(g);
    const int64_t sizes[] = {8, 1, 0, 20, 8};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
      run_compress(g, exe, sizes[k], true);
      if (t == 0) run_compress(g, NULL, sizes[k], true);
    }
    check_stats(exe, 1, 2);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

//===--- unique ---===//

// unique of x i32[N] (values in [0, 6)), all four results, after x * 2 - 3
// and before y + 1 (regions on both sides).
static tj_graph_t* build_unique(tj_context_t* ctx, bool sorted) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "unique", &g));
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_I32, 1, &N, "x");
  tj_value_t v =
      tj_graph_sub(g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_I32, 2)),
                   tj_graph_scalar(g, TJ_DTYPE_I32, 3));
  tj_value_t idx, inv, cnt;
  tj_value_t y = tj_graph_unique(g, v, false, 0, sorted, &idx, &inv, &cnt);
  tj_graph_output(g, tj_graph_add(g, y, tj_graph_scalar(g, TJ_DTYPE_I32, 1)),
                  "y");
  tj_graph_output(g, idx, "indices");
  tj_graph_output(g, inv, "inverse");
  tj_graph_output(g, cnt, "counts");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void run_unique(tj_graph_t* g, tj_executable_t* exe, int64_t n,
                       bool sorted) {
  int32_t* x = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  for (int64_t i = 0; i < n; ++i) x[i] = (int32_t)(unit() * 6);
  int32_t* y = calloc((size_t)(n + 1), sizeof(int32_t));
  int64_t* idx = calloc((size_t)(n + 1), sizeof(int64_t));
  int64_t* inv = calloc((size_t)(n + 1), sizeof(int64_t));
  int64_t* cnt = calloc((size_t)(n + 1), sizeof(int64_t));
  int64_t d[1] = {n};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_I32, 1, d);
  tj_tensor_t outs[4] = {tj_tensor_make(y, TJ_DTYPE_I32, 1, d),
                         tj_tensor_make(idx, TJ_DTYPE_I64, 1, d),
                         tj_tensor_make(inv, TJ_DTYPE_I64, 1, d),
                         tj_tensor_make(cnt, TJ_DTYPE_I64, 1, d)};
  int64_t shapes[4 * TJ_MAX_RANK];
  if (exe)
    CHECK_OK(tj_executable_run_shaped(exe, &in, 1, outs, 4, shapes));
  else
    CHECK_OK(tj_reference_run_shaped(g, &in, 1, outs, 4, shapes));
  // numpy.unique of 2 x - 3 (sorted), or in order of first appearance.
  int64_t first[6], count[6] = {0};
  for (int v = 0; v < 6; ++v) first[v] = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (first[x[i]] < 0) first[x[i]] = i;
    ++count[x[i]];
  }
  int order[6], u = 0;
  if (sorted) {
    for (int v = 0; v < 6; ++v)
      if (first[v] >= 0) order[u++] = v;
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (first[x[i]] == i) order[u++] = x[i];
  }
  CHECK_EQ_INT(u, (int)shapes[0]);
  CHECK_EQ_INT(u, (int)shapes[TJ_MAX_RANK]);
  CHECK_EQ_INT((int)n, (int)shapes[2 * TJ_MAX_RANK]);
  CHECK_EQ_INT(u, (int)shapes[3 * TJ_MAX_RANK]);
  for (int j = 0; j < u; ++j) {
    CHECK_EQ_INT(2 * order[j] - 3 + 1, y[j]);
    CHECK_EQ_INT((int)first[order[j]], (int)idx[j]);
    CHECK_EQ_INT((int)count[order[j]], (int)cnt[j]);
  }
  for (int64_t i = 0; i < n; ++i) {
    int j = 0;
    while (j < u && order[j] != x[i]) ++j;
    CHECK_EQ_INT(j, (int)inv[i]);
  }
  free(x);
  free(y);
  free(idx);
  free(inv);
  free(cnt);
}

TEST(unique_every_tier_several_sizes) {
  for (int sorted = 0; sorted < 2; ++sorted) {
    for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
      tj_graph_t* g = build_unique(g_ctx[t], sorted);
      tj_executable_t* exe = compile_x86(g);
      const int64_t sizes[] = {12, 1, 0, 100, 3, 12};
      for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
        run_unique(g, exe, sizes[k], sorted);
        if (t == 0) run_unique(g, NULL, sizes[k], sorted);
      }
      check_stats(exe, 1, 2);
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
}

// Along an axis: rows of f32[R, 3] (values in {0, 1, NaN}), sorted
// lexicographically, NaN last and equal to NaN (numpy.unique's
// equal_nan); and the same as the columns of f32[3, R] along axis -1 (a
// transpose before the host kernel; no graph break either way).
TEST(unique_rows_with_nan) {
  const float nan = NAN;
  float x[6][3] = {{1, 0, nan}, {0, 1, 1}, {1, 0, nan},
                   {0, 1, 0},   {0, 1, 1}, {nan, 0, 0}};
  float xt[3][6];  // the same rows as columns (a unique along axis 1)
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 3; ++c) xt[c][r] = x[r][c];
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int tr = 0; tr < 2; ++tr) {
      tj_graph_t* g = NULL;
      CHECK_OK(tj_graph_create(g_ctx[t], "rows", &g));
      int64_t R = tj_graph_symbol(g, "R");
      int64_t dims[2] = {tr ? 3 : R, tr ? R : 3};
      tj_value_t in = tj_graph_input(g, TJ_DTYPE_F32, 2, dims, "x");
      tj_value_t idx, inv, cnt;
      tj_value_t y =
          tj_graph_unique(g, in, true, tr ? -1 : -2, true, &idx, &inv, &cnt);
      tj_graph_output(g, y, "y");
      tj_graph_output(g, inv, "inverse");
      tj_graph_output(g, cnt, "counts");
      CHECK_OK(tj_graph_finalize(g));
      tj_executable_t* exe = compile_x86(g);
      float ys[18];
      int64_t invs[6], cnts[6], shapes[3 * TJ_MAX_RANK];
      int64_t xd[2] = {tr ? 3 : 6, tr ? 6 : 3}, yd[2] = {xd[0], xd[1]};
      int64_t nd[1] = {6};
      tj_tensor_t xin =
          tj_tensor_make(tr ? (void*)xt : (void*)x, TJ_DTYPE_F32, 2, xd);
      tj_tensor_t outs[3] = {tj_tensor_make(ys, TJ_DTYPE_F32, 2, yd),
                             tj_tensor_make(invs, TJ_DTYPE_I64, 1, nd),
                             tj_tensor_make(cnts, TJ_DTYPE_I64, 1, nd)};
      CHECK_OK(tj_executable_run_shaped(exe, &xin, 1, outs, 3, shapes));
      // Sorted: [0 1 0], [0 1 1], [1 0 nan], [nan 0 0].
      CHECK(shapes[0] == (tr ? 3 : 4) && shapes[1] == (tr ? 4 : 3));
      const float want[4][3] = {{0, 1, 0}, {0, 1, 1}, {1, 0, nan}, {nan, 0, 0}};
      for (int i = 0; i < 12; ++i) {
        float w = want[i / 3][i % 3];
        float got = tr ? ys[(i % 3) * 4 + i / 3] : ys[i];
        CHECK(isnan(w) ? isnan(got) : got == w);
      }
      const int64_t winv[6] = {2, 1, 2, 0, 1, 3}, wcnt[4] = {1, 2, 2, 1};
      for (int i = 0; i < 6; ++i) CHECK(invs[i] == winv[i]);
      for (int i = 0; i < 4; ++i) CHECK(cnts[i] == wcnt[i]);
      check_stats(exe, 1, 2);
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
}

//===--- non-max suppression ---===//

// ONNX's suppress_by_IOU case: 6 boxes, 1 class, max 3, IoU 0.5, score 0:
// boxes 3, 0, 5. The boxes come out of a region (x + 0) and the result
// feeds one (the selected box indices + 100).
TEST(nms_onnx_case_every_tier) {
  const float boxes[6][4] = {{0, 0, 1, 1},         {0, 0.1f, 1, 1.1f},
                             {0, -0.1f, 1, 0.9f},  {0, 10, 1, 11},
                             {0, 10.1f, 1, 11.1f}, {0, 100, 1, 101}};
  const float scores[6] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[t], "nms", &g));
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t b =
        tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){1, N, 4}, "boxes");
    tj_value_t s =
        tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){1, 1, N}, "scores");
    tj_value_t zero = tj_graph_scalar(g, TJ_DTYPE_F32, 0);
    tj_value_t sel = tj_graph_non_max_suppression(
        g, tj_graph_add(g, b, zero), tj_graph_add(g, s, zero),
        tj_graph_scalar(g, TJ_DTYPE_I64, 3),
        tj_graph_scalar(g, TJ_DTYPE_F32, 0.5),
        tj_graph_scalar(g, TJ_DTYPE_F32, 0), false);
    tj_graph_output(
        g, tj_graph_add(g, sel, tj_graph_scalar(g, TJ_DTYPE_I64, 100)), "sel");
    CHECK_OK(tj_graph_finalize(g));
    tj_executable_t* exe = compile_x86(g);
    for (int64_t n = 6; n >= 0; n -= 3) {
      int64_t bd[3] = {1, n, 4}, sd[3] = {1, 1, n}, od[2] = {n, 3};
      int64_t out[18], shape[TJ_MAX_RANK];
      tj_tensor_t ins[2] = {tj_tensor_make((void*)boxes, TJ_DTYPE_F32, 3, bd),
                            tj_tensor_make((void*)scores, TJ_DTYPE_F32, 3, sd)};
      tj_tensor_t o = tj_tensor_make(out, TJ_DTYPE_I64, 2, od);
      CHECK_OK(tj_executable_run_shaped(exe, ins, 2, &o, 1, shape));
      // n = 6: boxes 3, 0, 5; n = 3: box 0 only (1 and 2 overlap it).
      const int64_t want6[3] = {3, 0, 5}, want3[1] = {0};
      int64_t k = n == 6 ? 3 : n == 3 ? 1 : 0;
      CHECK(shape[0] == k && shape[1] == 3);
      for (int64_t i = 0; i < k; ++i) {
        CHECK(out[3 * i] == 100 && out[3 * i + 1] == 100);
        CHECK(out[3 * i + 2] == 100 + (n == 6 ? want6[i] : want3[i]));
      }
    }
    check_stats(exe, 1, 2);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

// Random boxes, two batches and three classes, center-point format, at
// several sizes: the compiled run equals the reference's.
TEST(nms_random_against_reference) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "nmsr", &g));
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t b =
      tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, N, 4}, "boxes");
  tj_value_t s =
      tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, 3, N}, "scores");
  tj_value_t sel = tj_graph_non_max_suppression(
      g, b, tj_graph_sigmoid(g, s), tj_graph_scalar(g, TJ_DTYPE_I64, 4),
      tj_graph_scalar(g, TJ_DTYPE_F32, 0.3),
      tj_graph_scalar(g, TJ_DTYPE_F32, 0.4), true);
  tj_graph_output(g, sel, "sel");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = compile_x86(g);
  const int64_t sizes[] = {10, 1, 25, 0, 10};
  for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); ++z) {
    int64_t n = sizes[z];
    float* bx = calloc((size_t)(2 * n * 4 + 1), sizeof(float));
    float* sc = calloc((size_t)(2 * 3 * n + 1), sizeof(float));
    for (int64_t i = 0; i < 2 * n; ++i) {
      bx[4 * i] = (float)(unit() * 4);
      bx[4 * i + 1] = (float)(unit() * 4);
      bx[4 * i + 2] = (float)(0.5 + unit());
      bx[4 * i + 3] = (float)(0.5 + unit());
    }
    for (int64_t i = 0; i < 6 * n; ++i) sc[i] = (float)(unit() * 4 - 2);
    int64_t bd[3] = {2, n, 4}, sd[3] = {2, 3, n}, od[2] = {6 * n, 3};
    int64_t* got = calloc((size_t)(18 * n + 1), sizeof(int64_t));
    int64_t* want = calloc((size_t)(18 * n + 1), sizeof(int64_t));
    int64_t gs[TJ_MAX_RANK], ws[TJ_MAX_RANK];
    tj_tensor_t ins[2] = {tj_tensor_make(bx, TJ_DTYPE_F32, 3, bd),
                          tj_tensor_make(sc, TJ_DTYPE_F32, 3, sd)};
    tj_tensor_t og = tj_tensor_make(got, TJ_DTYPE_I64, 2, od);
    tj_tensor_t ow = tj_tensor_make(want, TJ_DTYPE_I64, 2, od);
    CHECK_OK(tj_executable_run_shaped(exe, ins, 2, &og, 1, gs));
    CHECK_OK(tj_reference_run_shaped(g, ins, 2, &ow, 1, ws));
    CHECK(gs[0] == ws[0] && gs[1] == 3);
    CHECK(ws[0] <= 2 * 3 * 4);
    CHECK(memcmp(got, want, sizeof(int64_t) * (size_t)(3 * ws[0])) == 0);
    free(bx);
    free(sc);
    free(got);
    free(want);
  }
  check_stats(exe, 1, 1);  // the sigmoid; the op's output is the graph's
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

//===--- pools of many taps: no graph break ---===//

// 3-D max, avg and lp pools of 27, 64 and 125 taps (more than a pointwise
// kernel's 64 buffer views once each tap is a view), with dilations, pads
// and ceil_mode, at every tier: against the reference, no graph break.
TEST(pools_of_many_taps_every_tier) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int kind = 0; kind < 3; ++kind) {
      for (int big = 0; big < 3; ++big) {
        tj_graph_t* g = NULL;
        CHECK_OK(tj_graph_create(g_ctx[t], "pool", &g));
        int64_t N = tj_graph_symbol(g, "N");
        tj_value_t x =
            tj_graph_input(g, TJ_DTYPE_F32, 5, (int64_t[]){N, 2, 9, 8, 7}, "x");
        tj_conv_attrs_t a;
        memset(&a, 0, sizeof(a));
        for (int i = 0; i < 3; ++i) {
          a.kernel[i] = 3 + big;
          a.dilations[i] = 2;
          a.strides[i] = i + 1;
          a.pads_begin[i] = 1;
          a.pads_end[i] = i;
        }
        a.ceil_mode = big == 1;
        a.count_include_pad = kind == 1 && big;
        a.p = kind == 2 ? 2 : 0;
        tj_value_t y = kind == 0   ? tj_graph_max_pool(g, x, &a)
                       : kind == 1 ? tj_graph_avg_pool(g, x, &a)
                                   : tj_graph_lp_pool(g, x, &a);
        tj_graph_output(g, y, "y");
        CHECK_OK(tj_graph_finalize(g));
        tj_executable_t* exe = compile_x86(g);
        tj_executable_stats_t st = {.struct_size = sizeof(st)};
        tj_executable_stats(exe, &st);
        CHECK_EQ_INT(0, st.num_graph_breaks);
        for (int64_t n = 1; n <= 2; ++n) {
          int64_t xd[5] = {n, 2, 9, 8, 7}, yd[TJ_MAX_RANK];
          int32_t yr;
          int64_t numel = n * 2 * 9 * 8 * 7;
          float* xs = malloc(sizeof(float) * (size_t)numel);
          for (int64_t i = 0; i < numel; ++i) xs[i] = (float)(unit() * 2 - 1);
          tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 5, xd);
          CHECK_OK(tj_executable_output_shape(exe, &in, 1, 0, &yr, yd));
          int64_t ny = 1;
          for (int32_t k = 0; k < yr; ++k) ny *= yd[k];
          float* got = malloc(sizeof(float) * (size_t)ny);
          float* want = malloc(sizeof(float) * (size_t)ny);
          tj_tensor_t og = tj_tensor_make(got, TJ_DTYPE_F32, yr, yd);
          tj_tensor_t ow = tj_tensor_make(want, TJ_DTYPE_F32, yr, yd);
          CHECK_OK(tj_executable_run(exe, &in, 1, &og, 1));
          CHECK_OK(tj_reference_run(g, &in, 1, &ow, 1));
          int bad = 0;
          for (int64_t i = 0; i < ny; ++i)
            bad +=
                !(fabsf(got[i] - want[i]) <= 1e-5f * fmaxf(1, fabsf(want[i])));
          CHECK_EQ_INT(0, bad);
          free(xs);
          free(got);
          free(want);
        }
        tj_executable_release(exe);
        tj_graph_destroy(g);
      }
    }
  }
}

//===--- errors, the text form ---===//

TEST(errors_name_the_op) {
  tj_context_t* ctx = g_ctx[0];
  tj_graph_t* g = NULL;
  // compress: a condition of rank 2.
  CHECK_OK(tj_graph_create(ctx, "e1", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "x");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){3, 4}, "c");
  CHECK(tj_value_is_none(tj_graph_compress(g, x, c, true, 0)));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "compress: the condition has rank 2",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
  // unique: an axis out of range.
  CHECK_OK(tj_graph_create(ctx, "e2", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "x");
  CHECK(
      tj_value_is_none(tj_graph_unique(g, x, true, 2, true, NULL, NULL, NULL)));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "unique: axis 2 is outside",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
  // non_max_suppression: boxes of rank 2.
  CHECK_OK(tj_graph_create(ctx, "e3", &g));
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){5, 4}, "b");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){1, 1, 5}, "s");
  tj_value_t none = tj_value_none();
  CHECK(tj_value_is_none(
      tj_graph_non_max_suppression(g, b, s, none, none, none, false)));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_nms", tj_graph_finalize(g));
  tj_graph_destroy(g);
  // A host cannot take a built-in name.
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "tj_nonzero";
  d.version = 2;
  d.num_inputs = 1;
  d.shape = (tj_custom_shape_fn)1;
  d.host = (tj_custom_host_fn)1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "is a built-in op",
               tj_context_register_op(ctx, &d));
  // A data-dependent output: tj_executable_run refuses it, naming it; so
  // does tj_reference_run; run_shaped refuses it strided.
  g = build_nonzero(ctx);
  tj_executable_t* exe = compile_x86(g);
  float xs[10] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 1}, sum;
  int64_t idx[20], xd[2] = {2, 5}, id[2] = {2, 10}, st[2] = {1, 2};
  int64_t shapes[2 * TJ_MAX_RANK];
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, xd);
  tj_tensor_t outs[2] = {tj_tensor_make(&sum, TJ_DTYPE_F32, 0, NULL),
                         tj_tensor_make(idx, TJ_DTYPE_I64, 2, id)};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output \"idx\" dim 1",
               tj_executable_run(exe, &in, 1, outs, 2));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_executable_run_shaped",
               tj_reference_run(g, &in, 1, outs, 2));
  int64_t small[2] = {2, 5};
  outs[1].shape = small;
  outs[1].strides = st;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "must be dense",
               tj_executable_run_shaped(exe, &in, 1, outs, 2, shapes));
  outs[1].strides = NULL;
  outs[1].shape = id;
  CHECK_OK(tj_executable_run_shaped(exe, &in, 1, outs, 2, shapes));
  CHECK(shapes[TJ_MAX_RANK + 1] == 6 && id[1] == 10);
  tj_executable_release(exe);
  // The text form prints the built-in node and parses it back.
  char* text = NULL;
  CHECK_OK(tj_graph_print(g, &text));
  CHECK_CONTAINS(text, "op=\"tj_nonzero\"");
  tj_graph_t* back = NULL;
  CHECK_OK(tj_graph_parse(ctx, text, strlen(text), "nz.tj", &back));
  char* again = NULL;
  CHECK_OK(tj_graph_print(back, &again));
  CHECK_STREQ(text, again);
  tj_context_free_string(ctx, text);
  tj_context_free_string(ctx, again);
  tj_graph_destroy(back);
  tj_graph_destroy(g);
}

//===--- the OOM sweep ---===//

static tj_status_t unique_compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_I32, 1, &N, "x");
    tj_value_t cnt;
    tj_value_t y = tj_graph_unique(g, x, false, 0, true, NULL, NULL, &cnt);
    tj_graph_output(g, y, "y");
    tj_graph_output(g, cnt, "z");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_X86;
  opts.cache_dir = "";
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    int32_t xs[5] = {3, 1, 3, 3, 1}, ys[5];
    int64_t zs[5], d[1] = {5}, shapes[2 * TJ_MAX_RANK];
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_I32, 1, d);
    tj_tensor_t outs[2] = {tj_tensor_make(ys, TJ_DTYPE_I32, 1, d),
                           tj_tensor_make(zs, TJ_DTYPE_I64, 1, d)};
    s = tj_executable_run_shaped(exe, &in, 1, outs, 2, shapes);
    if (!s && (shapes[0] != 2 || ys[0] != 1 || ys[1] != 3 || zs[0] != 2 ||
               zs[1] != 3))
      s = tj_status_create(TJ_STATUS_INTERNAL, "oom test: wrong result");
    if (!s) s = tj_reference_run_shaped(g, &in, 1, outs, 2, shapes);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep_unique) { tj_test_oom_sweep("unique", unique_compile_run); }

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(nonzero_every_tier_several_sizes);
  RUN_TEST(compress_every_tier_several_sizes);
  RUN_TEST(unique_every_tier_several_sizes);
  RUN_TEST(unique_rows_with_nan);
  RUN_TEST(nms_onnx_case_every_tier);
  RUN_TEST(nms_random_against_reference);
  RUN_TEST(pools_of_many_taps_every_tier);
  RUN_TEST(errors_name_the_op);
  RUN_TEST(oom_sweep_unique);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
