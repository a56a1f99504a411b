// Float sums of 2^30 elements and more (jit/emit_reduce.c: blocks summed
// pairwise), on every x86 level the host has: in the row schedule (one
// contiguous row) and the column schedule (a strided reduced dim). Sums of
// ones must be exact; sums of random values and of values whose rounding
// is biased (1 + 2^-10) must be within a log2 n bound of the double sum:
//   rows:    (SUM_BLOCK / 16 + log2 n + 2) eps * sum |x|
//   columns: (J_BLOCK + 16 + 10 levels + 2 + L / 2^22) eps * sum |x|
// (runs of 16 blocks of 256 rows, 2^10 runs pairwise)
// where a serial sum per lane stops at 2^24 times its terms. The 4 GiB
// inputs are one 4 MiB memfd mapped 1024 times, so they cost no memory
// and no time to fill; the expected sum is 1024 times the chunk's. Also
// sum and mean of 2^30 and 2^32 ones end to end through tj_compile. The
// host's level takes the full 2^30 elements, the others 2^26.

#include <sys/mman.h>
#include <unistd.h>

#include "tests/unit/x86_test_util.h"

#define CHUNK_ELEMS (1 << 20)
#define COPIES 1024  // 2^30 elements
#define CHUNK_BYTES ((size_t)CHUNK_ELEMS * sizeof(float))
#define TOTAL_BYTES (CHUNK_BYTES * COPIES)

typedef struct big_t {
  float* data;   // TOTAL_BYTES of COPIES copies of chunk
  float* chunk;  // the first copy, writable (writes show in every copy)
  int fd;
} big_t;

static bool big_map(big_t* b) {
  memset(b, 0, sizeof(*b));
  b->fd = memfd_create("tj_long_sum", 0);
  if (b->fd < 0 || ftruncate(b->fd, (off_t)CHUNK_BYTES) != 0) {
    perror("memfd");
    return false;
  }
  void* base =
      mmap(NULL, TOTAL_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    perror("mmap");
    return false;
  }
  for (size_t i = 0; i < COPIES; ++i) {
    void* at = (char*)base + i * CHUNK_BYTES;
    if (mmap(at, CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             b->fd, 0) == MAP_FAILED) {
      perror("mmap chunk");
      munmap(base, TOTAL_BYTES);
      return false;
    }
  }
  b->data = base;
  b->chunk = base;
  return true;
}

static void big_unmap(big_t* b) {
  if (b->data) munmap(b->data, TOTAL_BYTES);
  if (b->fd >= 0) close(b->fd);
  b->data = NULL;
}

static const double kEps = 1.0 / (1 << 24);  // f32 unit roundoff

static tj_kir_t* new_reduce(const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_ROW_REDUCE, name, &k));
  return k;
}

// y[r] = sum x[r, :] over space [R, L]; x strides {SX, SL} (params 2, 3).
static tj_kir_t* build_rows(void) {
  tj_kir_t* k = new_reduce("long_rows");
  uint32_t R = tj_kir_add_param(k, "R");
  uint32_t L = tj_kir_add_param(k, "L");
  uint32_t SX = tj_kir_add_param(k, "SX");
  uint32_t SL = tj_kir_add_param(k, "SL");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(R), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_runtime(SX), tj_kir_runtime(SL)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
  uint32_t p0 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_row(k, p0));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

// y[c] = sum_l x[l, c] for a row-major x [L, C]: space [C, L], x strides
// {1, C} (the column schedule).
static tj_kir_t* build_columns(int64_t C) {
  tj_kir_t* k = new_reduce("long_columns");
  uint32_t L = tj_kir_add_param(k, "L");
  tj_kir_ival_t dims[2] = {tj_kir_constant(C), tj_kir_runtime(L)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(1), tj_kir_constant(C)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_constant(0)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
  uint32_t p0 = tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
  tj_kir_yield(k, tj_kir_load(k, x));
  tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
  tj_kir_store(k, y, tj_kir_row(k, p0));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

static bool within(const char* what, const char* isa, double got, double want,
                   double bound) {
  double err = fabs(got - want);
  bool ok = err <= bound;
  ++g_test_checks;
  if (!ok) {
    ++g_test_failures;
    fprintf(stderr, "%s: %s on %s: got %.9g, want %.9g (error %.3g > %.3g)\n",
            g_test_current, what, isa, got, want, err, bound);
  }
  return ok;
}

typedef enum fill_kind_t { FILL_ONES, FILL_BIASED, FILL_RANDOM } fill_kind_t;

// The chunk's values, and their double sum per column of |cols|
// (cols == 1: the whole chunk) into |sums|.
static void fill_chunk(float* chunk, fill_kind_t kind, int64_t cols,
                       double* sums) {
  for (int64_t c = 0; c < cols; ++c) sums[c] = 0;
  for (int64_t i = 0; i < CHUNK_ELEMS; ++i) {
    float v = kind == FILL_ONES     ? 1.0f
              : kind == FILL_BIASED ? 1.0f + 1.0f / 1024
                                    : (float)rng_uniform(0, 1);
    chunk[i] = v;
    sums[i % cols] += v;
  }
}

static const char* const kKindNames[] = {"ones", "1+2^-10", "uniform [0,1)"};

// Copies of the chunk summed on level |j|: 2^30 elements on the host's,
// 2^26 on the others (enough for a lane of 4 chains of 4 lanes to pass
// 2^20 terms and lose 1 + 2^-10's low bits), to keep the test short.
static int64_t copies_for(int j) { return j == 0 ? COPIES : COPIES / 16; }

// One row of 2^30 elements of biased and of random values; ones read with
// stride 0 for 2^30 and 2^32 + 3 elements (exact).
TEST(long_rows) {
  big_t big;
  if (!big_map(&big)) {
    CHECK(!"memfd mapping");
    return;
  }
  tj_kir_t* k = build_rows();
  for (int j = 0; j < g_num_jits; ++j) {
    compiled_t c;
    if (!compile_kernel(g_jits[j], k, &c)) continue;
    int64_t copies = copies_for(j);
    for (int kind = FILL_BIASED; kind <= FILL_RANDOM; ++kind) {
      double chunk_sum;
      fill_chunk(big.chunk, (fill_kind_t)kind, 1, &chunk_sum);
      float y = -1;
      int64_t scalars[4] = {1, copies * CHUNK_ELEMS, 0, 1};
      void* bufs[2] = {big.data, &y};
      run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
      double want = chunk_sum * (double)copies;
      double bound = (4096.0 / 16 + 30 + 2) * kEps * want;
      within(kKindNames[kind], g_isa_names[j], y, want, bound);
    }
    int64_t lengths[2] = {(int64_t)1 << 30, ((int64_t)1 << 32) + 3};
    for (int i = 0; i < (j == 0 ? 2 : 1); ++i) {
      float one = 1.0f, y = -1;
      int64_t scalars[4] = {1, lengths[i], 0, 0};
      void* bufs[2] = {&one, &y};
      run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
      within("broadcast ones", g_isa_names[j], y, (float)lengths[i], 0);
    }
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  big_unmap(&big);
}

// 16 columns of 2^26 rows (2^30 elements; fewer, see copies_for) of
// ones (exact), biased and random values.
TEST(long_columns) {
  enum { C = 16 };
  big_t big;
  if (!big_map(&big)) {
    CHECK(!"memfd mapping");
    return;
  }
  tj_kir_t* k = build_columns(C);
  for (int j = 0; j < g_num_jits; ++j) {
    compiled_t c;
    if (!compile_kernel(g_jits[j], k, &c)) continue;
    const int64_t copies = copies_for(j), L = copies * CHUNK_ELEMS / C;
    for (int kind = j == 0 ? FILL_ONES : FILL_BIASED; kind <= FILL_RANDOM;
         ++kind) {
      double sums[C];
      fill_chunk(big.chunk, (fill_kind_t)kind, C, sums);
      float y[C];
      for (int i = 0; i < C; ++i) y[i] = -1;
      int64_t scalars[1] = {L};
      void* bufs[2] = {big.data, y};
      run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
      for (int i = 0; i < C; ++i) {
        double want = sums[i] * (double)copies;
        double bound =
            (256.0 + 16 + 10 + 2 + (double)L / (1 << 22)) * kEps * want;
        if (kind == FILL_ONES) bound = 0;
        if (!within(kKindNames[kind], g_isa_names[j], y[i], want, bound)) {
          break;
        }
      }
    }
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  big_unmap(&big);
}

// sum and mean of full(1, [n]) through tj_compile: n and 1 exactly.
TEST(end_to_end_ones) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  static const int64_t kN[2] = {(int64_t)1 << 30, (int64_t)1 << 32};
  for (int i = 0; i < 2 && ctx; ++i) {
    tj_graph_t* g;
    CHECK_OK(tj_graph_create(ctx, "ones", &g));
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){1}, "x");
    tj_value_t f = tj_graph_full(g, TJ_DTYPE_F32, 1, &kN[i], 1.0);
    // + sum(x) (zero) keeps the reductions from being folded away.
    tj_value_t sx = tj_graph_sum(g, x, 0, NULL, false);
    tj_graph_output(g, tj_graph_add(g, tj_graph_sum(g, f, 0, NULL, false), sx),
                    "sum");
    tj_graph_output(g, tj_graph_add(g, tj_graph_mean(g, f, 0, NULL, false), sx),
                    "mean");
    CHECK_OK(tj_graph_finalize(g));
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, NULL, &exe));
    if (exe) {
      float zero = 0, s = -1, m = -1;
      tj_tensor_t in = tj_tensor_make(&zero, TJ_DTYPE_F32, 1, (int64_t[]){1});
      tj_tensor_t out[2] = {tj_tensor_make(&s, TJ_DTYPE_F32, 0, NULL),
                            tj_tensor_make(&m, TJ_DTYPE_F32, 0, NULL)};
      CHECK_OK(tj_executable_run(exe, &in, 1, out, 2));
      within("sum of ones", "x86", s, (double)kN[i], 0);
      within("mean of ones", "x86", m, 1.0, 0);
      tj_executable_release(exe);
    }
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
}

int main(void) {
  open_jits();
  RUN_TEST(long_rows);
  RUN_TEST(long_columns);
  RUN_TEST(end_to_end_ones);
  close_jits();
  TEST_MAIN_END();
}
