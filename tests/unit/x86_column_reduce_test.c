// The column schedule of ROW_REDUCE kernels (jit/emit_reduce.c): rows whose
// reduced dim is strided in memory (db = sum over B of dy), walked in
// strips of rows with the lanes across rows. Kernels built in kernel IR,
// JIT-compiled for every x86 level the host has, compared with the
// double-precision interpreter (sums within (J_BLOCK + 16 + log2(L /
// J_BLOCK) + 2) eps of the sum of magnitudes: blocks of 256 rows, runs of
// 16 blocks summed pairwise;
// x86_long_sum_test takes 2^30 elements; max, min, MAP
// outputs and integers exactly); odd row counts around the strip width
// (32 vectors: 512, 256 or 128 rows) and reduced lengths around the block
// (256); a batch dim the strips must not cross; any partition of the rows
// into calls gives the same bits; the schedule is chosen (no gathers in
// the IR) only where it applies.

#include "tests/unit/x86_test_util.h"

static tj_kir_t* new_reduce(const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_ROW_REDUCE, name, &k));
  return k;
}

// The backward of a bias in a [batch.., L, C] layout: space [batch.., C, L]
// (params C, L, and NB for rank 3), x strided [.., 1, P] with a runtime
// row pitch P >= C; phases:
//   REDUCE sum of g(x) = x * 0.5 + 1     (like db = sum dy)
//   REDUCE max of x                       (only with |two|)
//   MAP    z = g(x), stored like x        (like dy itself)
//   ROW    y = sum, m = max
static tj_kir_t* build_columns(tj_dtype_t dt, int32_t rank, bool two,
                               bool map) {
  char name[64];
  snprintf(name, sizeof(name), "cols_%s_r%d%s%s", tj_dtype_name(dt), (int)rank,
           two ? "_max" : "", map ? "_map" : "");
  tj_kir_t* k = new_reduce(name);
  uint32_t C = tj_kir_add_param(k, "C");
  uint32_t L = tj_kir_add_param(k, "L");
  uint32_t P = tj_kir_add_param(k, "P");
  uint32_t NB = tj_kir_add_param(k, "NB");
  tj_kir_ival_t dims[3], sx[3], sy[3], sz[3];
  int32_t o = rank - 2;
  if (rank == 3) dims[0] = tj_kir_runtime(NB);
  dims[o] = tj_kir_runtime(C);
  dims[o + 1] = tj_kir_runtime(L);
  tj_kir_set_space(k, rank, dims);
  // Batch pitches are params too: the kernel IR has no products of params.
  uint32_t XB = tj_kir_add_param(k, "XB");  // L * P
  uint32_t ZB = tj_kir_add_param(k, "ZB");  // L * C
  if (rank == 3) {
    sx[0] = tj_kir_runtime(XB);
    sy[0] = tj_kir_runtime(C);
    sz[0] = tj_kir_runtime(ZB);
  }
  sx[o] = tj_kir_constant(1);
  sx[o + 1] = tj_kir_runtime(P);
  sy[o] = tj_kir_constant(1);
  sy[o + 1] = tj_kir_constant(0);
  sz[o] = tj_kir_constant(1);
  sz[o + 1] = tj_kir_runtime(C);
  uint32_t x = tj_kir_add_buffer(k, "x", dt, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sy);
  uint32_t m = two ? tj_kir_add_buffer(k, "m", dt, TJ_KIR_OUTPUT, sy) : 0;
  uint32_t z = map ? tj_kir_add_buffer(k, "z", dt, TJ_KIR_OUTPUT, sz) : 0;
  bool fl = tj_dtype_is_float(dt);
  uint32_t p0 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  uint32_t half =
      fl ? tj_kir_const_float(k, dt, 0.5) : tj_kir_const_int(k, dt, 3);
  uint32_t one =
      fl ? tj_kir_const_float(k, dt, 1.0) : tj_kir_const_int(k, dt, 1);
  tj_kir_yield(
      k,
      tj_kir_binary(k, TJ_OP_ADD,
                    tj_kir_binary(k, TJ_OP_MUL, tj_kir_load(k, x), half), one));
  uint32_t p1 = 0;
  if (two) {
    p1 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_MAX);
    tj_kir_yield(k, tj_kir_load(k, x));
  }
  if (map) {
    tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
    half = fl ? tj_kir_const_float(k, dt, 0.5) : tj_kir_const_int(k, dt, 3);
    one = fl ? tj_kir_const_float(k, dt, 1.0) : tj_kir_const_int(k, dt, 1);
    tj_kir_store(
        k, z,
        tj_kir_binary(k, TJ_OP_ADD,
                      tj_kir_binary(k, TJ_OP_MUL, tj_kir_load(k, x), half),
                      one));
  }
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_row(k, p0));
  if (two) tj_kir_store(k, m, tj_kir_row(k, p1));
  return k;
}

static void set_scalars(int64_t* s, int64_t C, int64_t L, int64_t NB) {
  int64_t P = C + 3;  // padded rows: the pitch is not the width
  s[0] = C;
  s[1] = L;
  s[2] = P;
  s[3] = NB;
  s[4] = L * P;
  s[5] = L * C;
}

static const int64_t kRows[] = {1, 3, 16, 17, 129, 300, 513, 1100};
static const int64_t kLens[] = {0, 1, 7, 255, 256, 257, 600};

static void check_all(tj_dtype_t dt, int32_t rank, bool two, bool map,
                      fill_t fill) {
  tj_kir_t* k = build_columns(dt, rank, two, map);
  kernel_set_t set;
  prepare_kernel(k, &set);
  double eps = dt == TJ_DTYPE_F64 ? 2.3e-16 : 1.2e-7;
  double mag = fabs(fill.lo) > fabs(fill.hi) ? fabs(fill.lo) : fabs(fill.hi);
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kRows); ++r) {
    for (size_t l = 0; l < TJ_ARRAY_SIZE(kLens); ++l) {
      // The big cases once each: they cost the interpreter most.
      if (kRows[r] > 513 && kLens[l] > 257) continue;
      // Empty rows still store their identity, but buffer_elems sizes a
      // buffer with an empty dim as one element (plus 64 bytes of slack).
      if (kLens[l] == 0 && kRows[r] > 3) continue;
      int64_t s[6];
      set_scalars(s, kRows[r], kLens[l], rank == 3 ? 3 : 1);
      fill_t fills[4] = {fill, kNoFill, kNoFill, kNoFill};
      double L = (double)kLens[l];
      double atol = tj_dtype_is_float(dt) ? (256 + log2(L / 256 + 1) + 2) *
                                                eps * L * (mag * 0.5 + 1)
                                          : 0;
      if (!check_prepared(k, &set, s, fills, 0, atol)) {
        fprintf(stderr, "  (C %lld, L %lld)\n", (long long)kRows[r],
                (long long)kLens[l]);
      }
    }
  }
  release_set(&set);
  tj_kir_destroy(k);
}

TEST(float_columns) {
  check_all(TJ_DTYPE_F32, 2, false, true, (fill_t){-4, 4, false, false});
  check_all(TJ_DTYPE_F32, 2, true, true, (fill_t){-4, 4, false, false});
  check_all(TJ_DTYPE_F32, 2, true, false, (fill_t){-4, 4, false, false});
  check_all(TJ_DTYPE_F64, 2, true, true, (fill_t){-4, 4, false, false});
}

TEST(integer_columns) {
  check_all(TJ_DTYPE_I32, 2, true, true, (fill_t){-50, 50, false, false});
  check_all(TJ_DTYPE_I64, 2, false, true, (fill_t){-50, 50, false, false});
}

// A batch dim: strips end where a batch entry's rows end.
TEST(batched_columns) {
  check_all(TJ_DTYPE_F32, 3, true, true, (fill_t){-4, 4, false, false});
}

// NaN and infinities propagate through sums and max as in the row order.
TEST(special_values) {
  check_all(TJ_DTYPE_F32, 2, true, true, (fill_t){-4, 4, true, false});
}

// The rows of one launch cut into calls at odd places (as a pool or a
// host parallel_for would) give the same bits as one call.
TEST(any_partition_same_bits) {
  tj_kir_t* k = build_columns(TJ_DTYPE_F32, 3, true, true);
  CHECK_OK(tj_kir_finalize(k));
  for (int j = 0; j < g_num_jits; ++j) {
    compiled_t c;
    if (!compile_kernel(g_jits[j], k, &c)) continue;
    int64_t s[6];
    set_scalars(s, 700, 300, 2);
    int64_t nx = buffer_elems(k, 0, s), ny = buffer_elems(k, 1, s),
            nz = buffer_elems(k, 3, s);
    float* x = malloc((size_t)nx * 4);
    for (int64_t i = 0; i < nx; ++i) x[i] = (float)rng_uniform(-3, 3);
    float *y[2], *m[2], *z[2];
    for (int v = 0; v < 2; ++v) {
      y[v] = calloc((size_t)ny, 4);
      m[v] = calloc((size_t)ny, 4);
      z[v] = calloc((size_t)nz, 4);
    }
    int64_t rows = 2 * 700;
    void* b0[4] = {x, y[0], m[0], z[0]};
    c.fn(b0, s, NULL, 0, rows);
    void* b1[4] = {x, y[1], m[1], z[1]};
    const int64_t cuts[] = {0, 1, 5, 37, 600, 699, 700, 701, 1300, rows};
    for (size_t i = 0; i + 1 < TJ_ARRAY_SIZE(cuts); ++i) {
      c.fn(b1, s, NULL, cuts[i], cuts[i + 1]);
    }
    CHECK(memcmp(y[0], y[1], (size_t)ny * 4) == 0);
    CHECK(memcmp(m[0], m[1], (size_t)ny * 4) == 0);
    CHECK(memcmp(z[0], z[1], (size_t)nz * 4) == 0);
    for (int v = 0; v < 2; ++v) {
      free(y[v]);
      free(m[v]);
      free(z[v]);
    }
    free(x);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
}

static char* ir_of(tj_kir_t* k) {
  char* text = NULL;
  CHECK_OK(tj_x86_jit_emit_ir(g_jits[0], (const tj_kir_t* const*)&k, 1, false,
                              &text));
  return text;
}

// The column walk is emitted where the reduced dim is strided, and only
// there: a row-contiguous reduction and one whose MAP reads the row result
// keep the row schedule.
TEST(schedule_choice) {
  tj_kir_t* k = build_columns(TJ_DTYPE_F32, 2, true, true);
  CHECK_OK(tj_kir_finalize(k));
  char* text = ir_of(k);
  CHECK(text && strstr(text, "col_j") != NULL);
  CHECK(text && strstr(text, "masked.gather") == NULL);
  tj_free_string(tj_allocator_system(), text);
  tj_kir_destroy(k);

  // Contiguous rows: x [R, L] row-major.
  k = new_reduce("rows_contiguous");
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_constant(5), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_runtime(L), tj_kir_constant(1)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
  uint32_t p = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_row(k, p));
  CHECK_OK(tj_kir_finalize(k));
  text = ir_of(k);
  CHECK(text && strstr(text, "col_j") == NULL);
  tj_free_string(tj_allocator_system(), text);
  tj_kir_destroy(k);

  // Strided, but the MAP subtracts the row's max (softmax over a strided
  // dim): the row schedule, and still right.
  k = new_reduce("strided_softmax_like");
  uint32_t C = tj_kir_add_param(k, "C");
  L = tj_kir_add_param(k, "L");
  tj_kir_ival_t d2[2] = {tj_kir_runtime(C), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, d2);
  tj_kir_ival_t s2[2] = {tj_kir_constant(1), tj_kir_runtime(C)};
  x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s2);
  uint32_t z = tj_kir_add_buffer(k, "z", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s2);
  p = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_MAX);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_MAX);
  tj_kir_store(
      k, z, tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), tj_kir_row(k, p)));
  CHECK_OK(tj_kir_finalize(k));
  text = ir_of(k);
  CHECK(text && strstr(text, "col_j") == NULL);
  tj_free_string(tj_allocator_system(), text);
  int64_t s[2] = {37, 300};
  fill_t fills[2] = {{-3, 3, false, false}, kNoFill};
  check_kernel(k, s, fills, 0, 0);
  tj_kir_destroy(k);
}

int main(void) {
  open_jits();
  RUN_TEST(float_columns);
  RUN_TEST(integer_columns);
  RUN_TEST(batched_columns);
  RUN_TEST(special_values);
  RUN_TEST(any_partition_same_bits);
  RUN_TEST(schedule_choice);
  close_jits();
  TEST_MAIN_END();
}
