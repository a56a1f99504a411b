// tj_reference_run under a failing allocator: for every N, failing the Nth
// allocation of the run must give OUT_OF_MEMORY and leak nothing; and the
// run that finally succeeds must compute the right values.

#include "tests/unit/test.h"

#include "lib/base.h"

// y0 = sum(softmax(gelu(linear(x, w, b)), 1), 1)      (each row sums to 1)
// y1 = transpose(concat(x, x * 2), [1, 0])
// y2 = gather(relu(x @ w), idx, 0) with argmax(x, 1) and a cast alongside
// y3 = pad(where(x > 0, x, -x), ...)               (= abs(x) padded with 7)
// y4 = conv(x as [B, 1, 4], w4 [2, 1, 3], pads 1)  (the conv's dense copies)
static tj_status_t build(tj_context_t* context, tj_graph_t** out_graph) {
  tj_graph_t* g = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(context, "oom", &g));
  int64_t B = tj_graph_symbol(g, "B");
  int64_t xd[2] = {B, 4};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xd, "x");
  int64_t idx_dims[1] = {3};
  tj_value_t idx = tj_graph_input(g, TJ_DTYPE_I64, 1, idx_dims, "idx");
  static const float w_data[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  int64_t wd[2] = {4, 3};
  tj_value_t w =
      tj_graph_constant(g, TJ_DTYPE_F32, 2, wd, w_data, sizeof(w_data));
  int64_t bd[1] = {3};
  tj_value_t b = tj_graph_full(g, TJ_DTYPE_F32, 1, bd, 0.5);
  tj_value_t h = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
  int32_t axis1[1] = {1};
  tj_graph_output(
      g, tj_graph_sum(g, tj_graph_softmax(g, h, 1), 1, axis1, false), "y0");
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_value_t both[2] = {x, tj_graph_mul(g, x, two)};
  int32_t perm[2] = {1, 0};
  tj_graph_output(
      g, tj_graph_transpose(g, tj_graph_concat(g, 2, both, 0), perm), "y1");
  tj_value_t r = tj_graph_relu(g, tj_graph_matmul(g, x, w));
  tj_graph_output(g, tj_graph_gather(g, r, idx, 0), "y2");
  tj_graph_output(
      g, tj_graph_cast(g, tj_graph_argmax(g, x, 1, false), TJ_DTYPE_I32),
      "y2b");
  tj_value_t zero = tj_graph_scalar(g, TJ_DTYPE_F32, 0.0);
  tj_value_t sel =
      tj_graph_where(g, tj_graph_gt(g, x, zero), x, tj_graph_neg(g, x));
  int64_t low[2] = {1, 0}, high[2] = {0, 2};
  tj_graph_output(g, tj_graph_pad(g, sel, low, high, 7.0), "y3");
  // Channel 0: x[j - 1] + 2 x[j] + 3 x[j + 1]; channel 1: x[j].
  static const float w4_data[6] = {1, 2, 3, 0, 1, 0};
  int64_t w4d[3] = {2, 1, 3}, x4d[3] = {B, 1, 4};
  tj_value_t w4 =
      tj_graph_constant(g, TJ_DTYPE_F32, 3, w4d, w4_data, sizeof(w4_data));
  tj_conv_attrs_t ca = {.pads_begin = {1}, .pads_end = {1}};
  tj_graph_output(g,
                  tj_graph_conv(g, tj_graph_reshape(g, x, 3, x4d), w4,
                                (tj_value_t){0}, &ca),
                  "y4");
  tj_status_t status = tj_graph_finalize(g);
  if (status) {
    tj_graph_destroy(g);
    return status;
  }
  *out_graph = g;
  return NULL;
}

enum { kB = 3 };

typedef struct outputs_t {
  float y0[kB];
  float y1[4 * 2 * kB];
  float y2[3 * 3];
  int32_t y2b[kB];
  float y3[(kB + 1) * 6];
  float y4[kB * 2 * 4];
} outputs_t;

static const float kX[kB * 4] = {1, -2, 3, 0.5f, -1, 4, 0, 2, 0.25f, 0, -3, 1};
static const int64_t kIdx[3] = {2, 0, -1};

static tj_status_t run(const tj_graph_t* g, outputs_t* o) {
  int64_t xs[2] = {kB, 4}, is[1] = {3};
  tj_tensor_t inputs[2] = {tj_tensor_make((void*)kX, TJ_DTYPE_F32, 2, xs),
                           tj_tensor_make((void*)kIdx, TJ_DTYPE_I64, 1, is)};
  int64_t s0[1] = {kB}, s1[2] = {4, 2 * kB}, s2[2] = {3, 3},
          s3[2] = {kB + 1, 6}, s4[3] = {kB, 2, 4};
  tj_tensor_t outputs[6] = {tj_tensor_make(o->y0, TJ_DTYPE_F32, 1, s0),
                            tj_tensor_make(o->y1, TJ_DTYPE_F32, 2, s1),
                            tj_tensor_make(o->y2, TJ_DTYPE_F32, 2, s2),
                            tj_tensor_make(o->y2b, TJ_DTYPE_I32, 1, s0),
                            tj_tensor_make(o->y3, TJ_DTYPE_F32, 2, s3),
                            tj_tensor_make(o->y4, TJ_DTYPE_F32, 3, s4)};
  return tj_reference_run(g, inputs, 2, outputs, 6);
}

static void check_values(const outputs_t* o) {
  for (int i = 0; i < kB; ++i) CHECK(fabsf(o->y0[i] - 1.0f) < 1e-6f);
  // y1 = [x; 2x]^T: y1[c][r] = (r < kB ? 1 : 2) * x[r % kB][c].
  int bad = 0;
  for (int c = 0; c < 4; ++c) {
    for (int r = 0; r < 2 * kB; ++r) {
      float want = (r < kB ? 1.0f : 2.0f) * kX[(r % kB) * 4 + c];
      if (o->y1[c * 2 * kB + r] != want) ++bad;
    }
  }
  CHECK_EQ_INT(0, bad);
  // x @ w: w picks columns 0..2 and adds column 3 to each.
  float mm[kB][3];
  for (int r = 0; r < kB; ++r) {
    for (int c = 0; c < 3; ++c) {
      float v = kX[r * 4 + c] + kX[r * 4 + 3];
      mm[r][c] = v > 0 ? v : 0;
    }
  }
  const int rows[3] = {2, 0, 2};  // idx {2, 0, -1}
  bad = 0;
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 3; ++c) {
      if (o->y2[i * 3 + c] != mm[rows[i]][c]) ++bad;
    }
  }
  CHECK_EQ_INT(0, bad);
  CHECK_EQ_INT(2, o->y2b[0]);
  CHECK_EQ_INT(1, o->y2b[1]);
  CHECK_EQ_INT(3, o->y2b[2]);
  bad = 0;
  for (int r = 0; r < kB + 1; ++r) {
    for (int c = 0; c < 6; ++c) {
      float want = (r == 0 || c >= 4) ? 7.0f : fabsf(kX[(r - 1) * 4 + c]);
      if (o->y3[r * 6 + c] != want) ++bad;
    }
  }
  CHECK_EQ_INT(0, bad);
  // Small integers and quarters: every sum exact.
  bad = 0;
  for (int r = 0; r < kB; ++r) {
    for (int j = 0; j < 4; ++j) {
      const float* xr = kX + r * 4;
      float left = j > 0 ? xr[j - 1] : 0, right = j < 3 ? xr[j + 1] : 0;
      if (o->y4[(r * 2 + 0) * 4 + j] != left + 2 * xr[j] + 3 * right) ++bad;
      if (o->y4[(r * 2 + 1) * 4 + j] != xr[j]) ++bad;
    }
  }
  CHECK_EQ_INT(0, bad);
}

TEST(every_allocation_failure_is_reported_and_leaks_nothing) {
  long failures = 0;
  for (long n = 0;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&alloc);
    tj_context_t* context = NULL;
    tj_graph_t* graph = NULL;
    CHECK_OK(tj_context_create(&options, &context));
    CHECK_OK(build(context, &graph));
    if (!graph) break;
    long live_before = alloc.live_blocks;
    // Fail the nth allocation made by the run itself.
    alloc.fail_at = alloc.allocations + n;
    outputs_t out;
    memset(&out, 0, sizeof(out));
    tj_status_t status = run(graph, &out);
    CHECK_EQ_INT(live_before, alloc.live_blocks);
    tj_graph_destroy(graph);
    tj_context_destroy(context);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) {
      check_values(&out);
      // The run allocates: at least one failure point must have been seen.
      CHECK(failures > 5);
      break;
    }
    ++failures;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (n > 10000) {
      CHECK(!"the run never succeeds");
      break;
    }
  }
  printf("# %ld failure points\n", failures);
}

// A test allocator that also records the peak of live bytes.
typedef struct peak_allocator_t {
  tj_test_allocator_t inner;
  long long peak_bytes;
} peak_allocator_t;

static void* peak_alloc_fn(void* user_data, void* ptr, size_t old_size,
                           size_t new_size) {
  peak_allocator_t* p = (peak_allocator_t*)user_data;
  void* result = tj_test_alloc_fn(&p->inner, ptr, old_size, new_size);
  if (p->inner.live_bytes > p->peak_bytes) p->peak_bytes = p->inner.live_bytes;
  return result;
}

// Peak memory stays at the live set: a chain of 100 elementwise ops on a
// 256 KiB tensor keeps only a couple of buffers alive at a time.
TEST(buffers_are_freed_after_their_last_use) {
  peak_allocator_t peak;
  memset(&peak, 0, sizeof(peak));
  tj_test_allocator_initialize(&peak.inner, -1);
  tj_test_allocator_t* tracked = &peak.inner;
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.allocator.fn = peak_alloc_fn;
  options.allocator.user_data = &peak;
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&options, &context));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(context, "chain", &g));
  int64_t dims[1] = {1 << 16};
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 1, dims, "x");
  for (int i = 0; i < 50; ++i) v = tj_graph_neg(g, tj_graph_abs(g, v));
  tj_graph_output(g, v, "y");
  CHECK_OK(tj_graph_finalize(g));
  static float x[1 << 16], y[1 << 16];
  for (int i = 0; i < (1 << 16); ++i) x[i] = (float)i;
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, dims);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 1, dims);
  long long base = tracked->live_bytes;
  peak.peak_bytes = base;
  CHECK_OK(tj_reference_run(g, &in, 1, &out, 1));
  CHECK(tracked->live_bytes == base);
  // Two live 256 KiB buffers plus bookkeeping; without freeing it would be
  // 100 buffers.
  long long run_peak = peak.peak_bytes - base;
  CHECK(run_peak >= 2 * (long long)sizeof(x));
  CHECK(run_peak < 3 * (long long)sizeof(x));
  CHECK(y[5] == -5.0f && y[65535] == -65535.0f);
  tj_graph_destroy(g);
  tj_context_destroy(context);
  CHECK_EQ_INT(0, tracked->live_blocks);
}

int main(void) {
  RUN_TEST(every_allocation_failure_is_reported_and_leaks_nothing);
  RUN_TEST(buffers_are_freed_after_their_last_use);
  TEST_MAIN_END();
}
