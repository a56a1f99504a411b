// The GEMM template's paths beyond the packed default, on every x86 level
// the host has, against the double-precision interpreter:
//   - small M (M <= 16: B read in place, per-row-count microkernels with
//     strips of 1-4 panels, consecutive units merged into one span) with
//     and without a fused epilogue, M = 1, 2, 5, 15, 16 and 17 (the first
//     packed size) from one kernel with runtime sizes, and threaded runs
//     equal to serial ones bit for bit;
//   - transposed operands: B stored [N, K] (packed by in-register
//     transposes, plus a gathered tail when K % lanes != 0), A stored
//     [K, M] (slivers packed into [kc][MR]), both, batched, and with K over
//     several kc passes;
//   - no path reads past the end of its operands (guard pages).

#include <sys/mman.h>
#include <unistd.h>

#include "tests/unit/x86_test_util.h"

typedef struct desc_t {
  const char* name;
  bool a_trans, b_trans;
  bool batched;  // space [3, M, N]; B broadcast over the batch
  int epilogue;  // 0 plain, 1 bias + gelu(tanh), 2 bias + residual + bf16
  tj_kir_gemm_schedule_t schedule;
} desc_t;

// M, N, K are params 0..2.
static tj_kir_t* build(const desc_t* d) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, d->name, &k));
  uint32_t pm = tj_kir_add_param(k, "M"), pn = tj_kir_add_param(k, "N"),
           pk = tj_kir_add_param(k, "K");
  uint32_t pmk = tj_kir_add_param(k, "MK"), pmn = tj_kir_add_param(k, "MN");
  tj_kir_ival_t M = tj_kir_runtime(pm), N = tj_kir_runtime(pn),
                K = tj_kir_runtime(pk);
  int32_t r = d->batched ? 3 : 2, o = d->batched ? 1 : 0;
  tj_kir_ival_t dims[3] = {tj_kir_constant(3), M, N};
  tj_kir_set_space(k, r, d->batched ? dims : dims + 1);
  tj_kir_ival_t sa[3], sb[3], sc[3], sbias[3];
  sa[0] = tj_kir_runtime(pmk);  // A batches are distinct: M*K apart
  sb[0] = tj_kir_constant(0);   // B is shared across the batch
  sc[0] = tj_kir_runtime(pmn);
  sbias[0] = tj_kir_constant(0);
  set_matrix_strides(sa, o, M, K, d->a_trans);  // A [M, K] or stored [K, M]
  set_matrix_strides(sb, o, K, N, d->b_trans);  // B [K, N] or stored [N, K]
  sc[o] = N;
  sc[o + 1] = tj_kir_constant(1);
  sbias[o] = tj_kir_constant(0);
  sbias[o + 1] = tj_kir_constant(1);
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_GEMM_B, sb);
  uint32_t bias = 0, res = 0, y2 = 0;
  if (d->epilogue) {
    bias = tj_kir_add_buffer(k, "bias", TJ_DTYPE_F32, TJ_KIR_INPUT, sbias);
  }
  if (d->epilogue == 2) {
    res = tj_kir_add_buffer(k, "res", TJ_DTYPE_F32, TJ_KIR_INPUT, sc);
  }
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sc);
  if (d->epilogue == 2) {
    y2 = tj_kir_add_buffer(k, "pre", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sc);
  }
  tj_kir_set_gemm(k, K, &d->schedule);
  uint32_t v = tj_kir_acc(k);
  if (d->epilogue == 1) {
    v = kir_gelu_tanh(k, tj_kir_binary(k, TJ_OP_ADD, v, tj_kir_load(k, bias)));
  } else if (d->epilogue == 2) {
    uint32_t pre = tj_kir_binary(k, TJ_OP_ADD, v, tj_kir_load(k, bias));
    tj_kir_store(k, y2, tj_kir_cast(k, TJ_DTYPE_BF16, pre));
    v = tj_kir_binary(k, TJ_OP_ADD, pre, tj_kir_load(k, res));
  }
  tj_kir_store(k, y, v);
  return k;
}

static double gemm_atol(int64_t kk) { return (double)(kk + 1) * 2.4e-7; }

static bool check_sizes(const tj_kir_t* k, const kernel_set_t* set, int64_t m,
                        int64_t n, int64_t kk) {
  int64_t scalars[5] = {m, n, kk, m * kk, m * n};
  fill_t f = {-1, 1, false, false};
  fill_t fills[8] = {f, f, f, f, f, f, f, f};
  bool ok = check_prepared(k, set, scalars, fills, 8, gemm_atol(kk));
  if (!ok) {
    fprintf(stderr, "  (@%s M %lld N %lld K %lld)\n", k->name, (long long)m,
            (long long)n, (long long)kk);
  }
  return ok;
}

// One kernel serves the in-place path (M <= 16) and the packed one (17):
// every row count, strips narrower and wider than N, N past one 128-wide
// block (several units in one span), odd K.
TEST(small_m) {
  static const int64_t ms[] = {1, 2, 5, 15, 16, 17};
  static const int64_t ns[] = {1, 13, 64, 200, 600};
  static const int64_t ks[] = {1, 7, 130};
  for (int epi = 0; epi <= 2; epi += 1) {
    char name[32];
    snprintf(name, sizeof(name), "small_m_e%d", epi);
    desc_t d = {name, false, false, false, epi, {0, 0, 0, 0, 0}};
    tj_kir_t* k = build(&d);
    kernel_set_t set;
    prepare_kernel(k, &set);
    for (size_t i = 0; i < TJ_ARRAY_SIZE(ms); ++i) {
      for (size_t j = 0; j < TJ_ARRAY_SIZE(ns); ++j) {
        for (size_t q = 0; q < TJ_ARRAY_SIZE(ks); ++q) {
          // The full grid for the plain kernel; a diagonal for the others.
          if (epi && (i + j + q) % 3 != 0) continue;
          check_sizes(k, &set, ms[i], ns[j], ks[q]);
        }
      }
    }
    // K = 0 in place: C = epilogue(0).
    check_sizes(k, &set, 3, 70, 0);
    release_set(&set);
    tj_kir_destroy(k);
  }
}

// Other tiles take the in-place path too (8x32: strips of 4, 2 and 1
// panels of 32), as do batches (B broadcast, A per batch entry), and a
// transposed A read in place.
TEST(small_m_schedules_batches) {
  desc_t d1 = {"small_8x32", false, false, false, 1, {8, 32, 0, 0, 0}};
  tj_kir_t* k = build(&d1);
  kernel_set_t set;
  prepare_kernel(k, &set);
  for (int64_t m = 1; m <= 9; ++m) check_sizes(k, &set, m, 150, 33);
  release_set(&set);
  tj_kir_destroy(k);
  // One 16-wide vector per row: a single row has 4 accumulators in a
  // 64-wide strip, too few for the FMA latency: two chains over k (odd K
  // leaves one step for the tail loop).
  desc_t d4 = {"small_2x16", false, false, false, 0, {2, 16, 0, 0, 0}};
  k = build(&d4);
  prepare_kernel(k, &set);
  check_sizes(k, &set, 1, 100, 33);
  check_sizes(k, &set, 1, 100, 1);
  check_sizes(k, &set, 3, 40, 8);
  release_set(&set);
  tj_kir_destroy(k);
  desc_t d2 = {"small_batched", false, false, true, 2, {0, 0, 0, 0, 0}};
  k = build(&d2);
  prepare_kernel(k, &set);
  check_sizes(k, &set, 3, 300, 40);
  check_sizes(k, &set, 16, 129, 17);
  release_set(&set);
  tj_kir_destroy(k);
  desc_t d3 = {"small_a_trans", true, false, false, 1, {0, 0, 0, 0, 0}};
  k = build(&d3);
  prepare_kernel(k, &set);
  check_sizes(k, &set, 1, 100, 50);
  check_sizes(k, &set, 7, 260, 50);
  release_set(&set);
  tj_kir_destroy(k);
}

// Transposed operands on the packed path (M >= 17), with K a multiple of
// the lanes (transposes only), not (a gathered tail), over several kc
// passes (A slivers and B blocks packed per pass), and small M with a
// transposed B (packed: the in-place path needs B contiguous along n).
TEST(transposed) {
  static const desc_t descs[] = {
      {"bt", false, true, false, 0, {0, 0, 0, 0, 0}},
      {"at", true, false, false, 1, {0, 0, 0, 0, 0}},
      {"abt", true, true, false, 2, {0, 0, 0, 0, 0}},
      {"abt_batched", true, true, true, 1, {0, 0, 0, 0, 0}},
      {"abt_small_kc", true, true, false, 1, {5, 48, 10, 96, 40}},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(descs); ++i) {
    tj_kir_t* k = build(&descs[i]);
    kernel_set_t set;
    prepare_kernel(k, &set);
    check_sizes(k, &set, 40, 35, 64);
    check_sizes(k, &set, 17, 130, 50);
    check_sizes(k, &set, 100, 200, 33);
    check_sizes(k, &set, 2, 70, 19);
    if (!descs[i].batched) check_sizes(k, &set, 23, 70, 1100);
    release_set(&set);
    tj_kir_destroy(k);
  }
}

// Threads: spans and packed blocks split across threads give the serial
// result bit for bit (each C element is summed by one microkernel call in
// one order whatever the split).
TEST(threaded_equals_serial) {
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 3, &pool));
  static const desc_t descs[] = {
      {"thr_small", false, false, false, 1, {0, 0, 0, 0, 0}},
      {"thr_trans", true, true, false, 1, {0, 0, 0, 0, 0}},
  };
  static const int64_t ms[] = {1, 5, 16, 90};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(descs); ++i) {
    tj_kir_t* k = build(&descs[i]);
    CHECK_OK(tj_kir_finalize(k));
    compiled_t c;
    if (!compile_kernel(g_jits[0], k, &c)) continue;
    for (size_t q = 0; q < TJ_ARRAY_SIZE(ms); ++q) {
      int64_t m = ms[q], n = 1000, kk = 77;
      int64_t scalars[5] = {m, n, kk, m * kk, m * n};
      size_t na = (size_t)(m * kk), nb = (size_t)(kk * n), nc = (size_t)(m * n);
      float* a = malloc(na * 4);
      float* b = malloc(nb * 4);
      float* bias = malloc((size_t)n * 4);
      float* y1 = calloc(nc, 4);
      float* y2 = calloc(nc, 4);
      for (size_t e = 0; e < na; ++e) a[e] = (float)rng_uniform(-1, 1);
      for (size_t e = 0; e < nb; ++e) b[e] = (float)rng_uniform(-1, 1);
      for (int64_t e = 0; e < n; ++e) bias[e] = (float)rng_uniform(-1, 1);
      void* b1[4] = {a, b, bias, y1};
      void* b2[4] = {a, b, bias, y2};
      run_kernel(g_jits[0], k, c.fn, b1, scalars, NULL);
      run_kernel(g_jits[0], k, c.fn, b2, scalars, pool);
      CHECK(memcmp(y1, y2, nc * 4) == 0);
      free(a);
      free(b);
      free(bias);
      free(y1);
      free(y2);
    }
    release_kernel(&c);
    tj_kir_destroy(k);
  }
  tj_thread_pool_destroy(pool);
}

// Scratch: a transposed A adds its packed block to the launch's scratch.
TEST(launch_scratch) {
  desc_t d = {"scratch_at", true, false, false, 0, {0, 0, 0, 0, 0}};
  tj_kir_t* k = build(&d);
  CHECK_OK(tj_kir_finalize(k));
  CHECK(tj_kir_gemm_packs_a(k));
  tj_kir_launch_t l;
  int64_t s[5] = {100, 256, 300, 30000, 25600};
  CHECK_OK(tj_kir_launch_info(k, 16, s, &l));
  int64_t b_bytes = 300 * (int64_t)l.schedule.nc * 4;
  int64_t slivers = l.schedule.mc / l.schedule.tile_m;
  int64_t a_bytes =
      ((300 * (int64_t)l.schedule.tile_m + 16) * slivers * 4 + 63) / 64 * 64;
  CHECK_EQ_INT((b_bytes + 63) / 64 * 64 + a_bytes, l.scratch_bytes);
  tj_kir_destroy(k);
  desc_t n = {"scratch_an", false, true, false, 0, {0, 0, 0, 0, 0}};
  k = build(&n);
  CHECK_OK(tj_kir_finalize(k));
  CHECK(!tj_kir_gemm_packs_a(k));
  tj_kir_destroy(k);
}

// |n| floats ending right before an inaccessible page, so that a read past
// the end faults. Unmap with guarded_free.
typedef struct guarded_t {
  void* map;
  size_t bytes;
  float* data;
} guarded_t;

static guarded_t guarded_make(int64_t n) {
  guarded_t g = {NULL, 0, NULL};
  size_t page = (size_t)sysconf(_SC_PAGESIZE), want = (size_t)n * 4;
  g.bytes = (want + page - 1) / page * page + page;
  g.map = mmap(NULL, g.bytes, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g.map == MAP_FAILED) {
    g.map = NULL;
    return g;
  }
  unsigned char* end = (unsigned char*)g.map + g.bytes - page;
  CHECK(mprotect(end, page, PROT_NONE) == 0);
  g.data = (float*)(end - want);
  for (int64_t i = 0; i < n; ++i) g.data[i] = (float)(i % 5) - 2;
  return g;
}

static void guarded_free(guarded_t* g) {
  if (g->map) munmap(g->map, g->bytes);
}

// Operands that end where memory ends: every path (in place, packed,
// transposed packs with their masked edges) reads only its elements.
// Integer data: the sums are exact.
TEST(no_reads_past_operands) {
  static const int64_t ms[] = {1, 3, 16, 17, 40};
  static const int64_t ns[] = {1, 17, 65, 257};
  static const int64_t ks[] = {1, 17, 70};
  for (int lay = 0; lay < 4; ++lay) {
    bool at = lay & 1, bt = lay & 2;
    desc_t d = {"guarded", at, bt, false, 0, {0, 0, 0, 0, 0}};
    tj_kir_t* k = build(&d);
    CHECK_OK(tj_kir_finalize(k));
    for (int j = 0; j < g_num_jits; ++j) {
      compiled_t c;
      if (!compile_kernel(g_jits[j], k, &c)) continue;
      for (size_t i = 0; i < TJ_ARRAY_SIZE(ms); ++i) {
        for (size_t q = 0; q < TJ_ARRAY_SIZE(ns); ++q) {
          for (size_t r = 0; r < TJ_ARRAY_SIZE(ks); ++r) {
            int64_t m = ms[i], n = ns[q], kk = ks[r];
            int64_t scalars[5] = {m, n, kk, m * kk, m * n};
            guarded_t a = guarded_make(m * kk), b = guarded_make(kk * n),
                      y = guarded_make(m * n);
            if (!a.data || !b.data || !y.data) continue;
            void* bufs[3] = {a.data, b.data, y.data};
            run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
            double want = 0;
            for (int64_t e = 0; e < kk; ++e) {
              want += (double)a.data[at ? e * m + (m - 1) : (m - 1) * kk + e] *
                      b.data[bt ? (n - 1) * kk + e : e * n + (n - 1)];
            }
            CHECK(y.data[m * n - 1] == (float)want);
            guarded_free(&a);
            guarded_free(&b);
            guarded_free(&y);
          }
        }
      }
      release_kernel(&c);
    }
    tj_kir_destroy(k);
  }
}

int main(void) {
  open_jits();
  RUN_TEST(small_m);
  RUN_TEST(small_m_schedules_batches);
  RUN_TEST(transposed);
  RUN_TEST(threaded_equals_serial);
  RUN_TEST(launch_scratch);
  RUN_TEST(no_reads_past_operands);
  close_jits();
  TEST_MAIN_END();
}
