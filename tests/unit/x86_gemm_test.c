// GEMM kernels built in kernel IR, JIT-compiled for every x86 level the
// host has, compared with the double-precision interpreter: odd M/N/K from
// one kernel with runtime sizes, fused epilogues (bias + gelu tanh/erf,
// residual, bf16 cast, two outputs), batches with a broadcast operand,
// transposed operands (gather packing), K split over several passes,
// K = 0, explicit schedules, and threaded runs.

#include "tests/unit/x86_test_util.h"

typedef struct gemm_desc_t {
  const char* name;
  bool runtime_sizes;  // M, N, K as params 0..2 (else constants below)
  int64_t m, n, k;
  bool batched;  // space [2, M, N]; B broadcast over the batch
  bool a_trans, b_trans;
  int epilogue;  // 0 plain, 1 bias+gelu(tanh), 2 bias+gelu(erf)+residual
                 // +bf16 second output
  tj_kir_gemm_schedule_t schedule;
} gemm_desc_t;

static tj_kir_ival_t dim_of(const gemm_desc_t* d, uint32_t param, int64_t v) {
  return d->runtime_sizes ? tj_kir_runtime(param) : tj_kir_constant(v);
}

static tj_kir_t* build_gemm(const gemm_desc_t* d) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, d->name, &k));
  if (d->runtime_sizes) {
    tj_kir_add_param(k, "M");
    tj_kir_add_param(k, "N");
    tj_kir_add_param(k, "K");
  }
  tj_kir_ival_t M = dim_of(d, 0, d->m), N = dim_of(d, 1, d->n),
                K = dim_of(d, 2, d->k);
  // Batch strides (constant: the sizes they depend on are small test
  // values; with runtime sizes the batch is not used).
  int32_t r = d->batched ? 3 : 2, o = d->batched ? 1 : 0;
  tj_kir_ival_t dims[3] = {tj_kir_constant(2), M, N};
  tj_kir_set_space(k, r, d->batched ? dims : dims + 1);
  tj_kir_ival_t sa[3], sb[3], sc[3], sbias[3], sres[3];
  sa[0] = tj_kir_constant(d->m * d->k);  // A batches are distinct
  sb[0] = tj_kir_constant(0);            // B is shared across the batch
  sc[0] = tj_kir_constant(d->m * d->n);
  sbias[0] = tj_kir_constant(0);
  sres[0] = tj_kir_constant(d->m * d->n);
  set_matrix_strides(sa, o, M, K, d->a_trans);  // A [M, K] or stored [K, M]
  set_matrix_strides(sb, o, K, N, d->b_trans);  // B [K, N] or stored [N, K]
  sc[o] = N;
  sc[o + 1] = tj_kir_constant(1);
  sbias[o] = tj_kir_constant(0);
  sbias[o + 1] = tj_kir_constant(1);
  sres[o] = N;
  sres[o + 1] = tj_kir_constant(1);
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_GEMM_B, sb);
  uint32_t bias = 0, res = 0, y2 = 0;
  if (d->epilogue) {
    bias = tj_kir_add_buffer(k, "bias", TJ_DTYPE_F32, TJ_KIR_INPUT, sbias);
  }
  if (d->epilogue == 2) {
    res = tj_kir_add_buffer(k, "res", TJ_DTYPE_F32, TJ_KIR_INPUT, sres);
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
    v = tj_kir_binary(k, TJ_OP_ADD, kir_gelu_erf(k, pre), tj_kir_load(k, res));
  }
  tj_kir_store(k, y, v);
  return k;
}

// Errors of an f32 dot product of length K with |a|, |b| <= 1.
static double gemm_atol(int64_t kk) { return (double)(kk + 1) * 2.4e-7; }

static void check_gemm(const gemm_desc_t* d, const int64_t* scalars,
                       int64_t kk) {
  tj_kir_t* k = build_gemm(d);
  fill_t f = {-1, 1, false, false};
  fill_t fills[8] = {f, f, f, f, kNoFill, kNoFill, kNoFill, kNoFill};
  check_kernel(k, scalars, fills, 8, gemm_atol(kk));
  tj_kir_destroy(k);
}

// One kernel with runtime M, N, K serves every odd size: 1 (a single
// clamped row / masked column), 7, 33, 257 (edges of the 6x64 tile and
// of the 128-column block), K past the 1024 single-pass limit.
TEST(odd_sizes_runtime) {
  gemm_desc_t d = {.name = "gemm_rt",
                   .runtime_sizes = true,
                   .m = 0,
                   .n = 0,
                   .k = 0,
                   .batched = false,
                   .a_trans = false,
                   .b_trans = false,
                   .epilogue = 0,
                   .schedule = {0, 0, 0, 0, 0}};
  tj_kir_t* k = build_gemm(&d);
  kernel_set_t set;
  prepare_kernel(k, &set);
  static const int64_t ms[] = {1, 7, 33, 257};
  static const int64_t ns[] = {1, 7, 33, 257};
  static const int64_t ks[] = {1, 7, 33, 257};
  fill_t f = {-1, 1, false, false};
  fill_t fills[3] = {f, f, kNoFill};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(ms); ++i) {
    for (size_t j = 0; j < TJ_ARRAY_SIZE(ns); ++j) {
      for (size_t q = 0; q < TJ_ARRAY_SIZE(ks); ++q) {
        int64_t scalars[3] = {ms[i], ns[j], ks[q]};
        if (!check_prepared(k, &set, scalars, fills, 8, gemm_atol(ks[q]))) {
          fprintf(stderr, "  (M %lld N %lld K %lld)\n", (long long)ms[i],
                  (long long)ns[j], (long long)ks[q]);
        }
      }
    }
  }
  // K beyond kc = 1024: partial sums through scratch, two passes.
  int64_t scalars[3] = {13, 70, 1500};
  check_prepared(k, &set, scalars, fills, 8, gemm_atol(1500));
  // K = 0: C = 0.
  int64_t zero_k[3] = {5, 9, 0};
  check_prepared(k, &set, zero_k, fills, 0, 0);
  release_set(&set);
  tj_kir_destroy(k);
}

TEST(fused_epilogues) {
  gemm_desc_t d1 = {.name = "gelu_tanh_bias",
                    .runtime_sizes = false,
                    .m = 37,
                    .n = 150,
                    .k = 96,
                    .batched = false,
                    .a_trans = false,
                    .b_trans = false,
                    .epilogue = 1,
                    .schedule = {0, 0, 0, 0, 0}};
  check_gemm(&d1, NULL, d1.k);
  gemm_desc_t d2 = {.name = "gelu_erf_res_bf16",
                    .runtime_sizes = false,
                    .m = 20,
                    .n = 77,
                    .k = 65,
                    .batched = false,
                    .a_trans = false,
                    .b_trans = false,
                    .epilogue = 2,
                    .schedule = {0, 0, 0, 0, 0}};
  check_gemm(&d2, NULL, d2.k);
}

TEST(batched_and_transposed) {
  gemm_desc_t d = {.name = "batched",
                   .runtime_sizes = false,
                   .m = 9,
                   .n = 40,
                   .k = 21,
                   .batched = true,
                   .a_trans = false,
                   .b_trans = false,
                   .epilogue = 1,
                   .schedule = {0, 0, 0, 0, 0}};
  check_gemm(&d, NULL, d.k);
  gemm_desc_t t1 = {.name = "b_trans",
                    .runtime_sizes = false,
                    .m = 11,
                    .n = 35,
                    .k = 50,
                    .batched = false,
                    .a_trans = false,
                    .b_trans = true,
                    .epilogue = 0,
                    .schedule = {0, 0, 0, 0, 0}};
  check_gemm(&t1, NULL, t1.k);
  gemm_desc_t t2 = {.name = "ab_trans",
                    .runtime_sizes = false,
                    .m = 14,
                    .n = 19,
                    .k = 23,
                    .batched = false,
                    .a_trans = true,
                    .b_trans = true,
                    .epilogue = 2,
                    .schedule = {0, 0, 0, 0, 0}};
  check_gemm(&t2, NULL, t2.k);
}

// Explicit schedules: small tiles, small blocks (many units, several m and
// n blocks), and a small kc (four passes with the epilogue on the last).
TEST(schedules) {
  static const tj_kir_gemm_schedule_t scheds[] = {{8, 32, 0, 0, 0},
                                                  {4, 16, 8, 32, 0},
                                                  {1, 16, 0, 0, 0},
                                                  {6, 64, 12, 64, 64},
                                                  {3, 48, 9, 48, 40}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(scheds); ++i) {
    char name[32];
    snprintf(name, sizeof(name), "sched%zu", i);
    gemm_desc_t d = {.name = name,
                     .runtime_sizes = false,
                     .m = 29,
                     .n = 131,
                     .k = 200,
                     .batched = false,
                     .a_trans = false,
                     .b_trans = false,
                     .epilogue = 1,
                     .schedule = scheds[i]};
    check_gemm(&d, NULL, d.k);
  }
}

// Threads: the pool splits units; results equal the serial run exactly
// (each C element is computed by one unit in one order).
TEST(threaded) {
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 3, &pool));
  gemm_desc_t d = {.name = "threaded",
                   .runtime_sizes = false,
                   .m = 301,
                   .n = 520,
                   .k = 130,
                   .batched = false,
                   .a_trans = false,
                   .b_trans = false,
                   .epilogue = 1,
                   .schedule = {6, 64, 60, 128, 0}};
  tj_kir_t* k = build_gemm(&d);
  CHECK_OK(tj_kir_finalize(k));
  for (int j = 0; j < g_num_jits; ++j) {
    compiled_t c;
    if (!compile_kernel(g_jits[j], k, &c)) continue;
    size_t na = 301 * 130, nb = 130 * 520, nc = 301 * 520;
    float* a = malloc(na * 4);
    float* b = malloc(nb * 4);
    float* bias = malloc(520 * 4);
    float* y1 = calloc(nc, 4);
    float* y2 = calloc(nc, 4);
    for (size_t i = 0; i < na; ++i) a[i] = (float)rng_uniform(-1, 1);
    for (size_t i = 0; i < nb; ++i) b[i] = (float)rng_uniform(-1, 1);
    for (size_t i = 0; i < 520; ++i) bias[i] = (float)rng_uniform(-1, 1);
    void* b1[4] = {a, b, bias, y1};
    void* b2[4] = {a, b, bias, y2};
    run_kernel(g_jits[j], k, c.fn, b1, NULL, NULL);
    run_kernel(g_jits[j], k, c.fn, b2, NULL, pool);
    CHECK(memcmp(y1, y2, nc * 4) == 0);
    // Spot check against double.
    double worst = 0;
    for (int t = 0; t < 100; ++t) {
      size_t m = rng_next() % 301, n = rng_next() % 520;
      double acc = bias[n];
      for (size_t q = 0; q < 130; ++q)
        acc += (double)a[m * 130 + q] * b[q * 520 + n];
      double g =
          0.5 * acc *
          (1 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      worst = fmax(worst, fabs(g - y1[m * 520 + n]));
    }
    CHECK(worst < 1e-4);
    free(a);
    free(b);
    free(bias);
    free(y1);
    free(y2);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  tj_thread_pool_destroy(pool);
}

// Launch arithmetic: units and scratch follow the resolved schedule.
TEST(launch_info) {
  gemm_desc_t d = {.name = "launch",
                   .runtime_sizes = true,
                   .m = 0,
                   .n = 0,
                   .k = 0,
                   .batched = false,
                   .a_trans = false,
                   .b_trans = false,
                   .epilogue = 0,
                   .schedule = {0, 0, 0, 0, 0}};
  tj_kir_t* k = build_gemm(&d);
  CHECK_OK(tj_kir_finalize(k));
  tj_kir_launch_t l;
  int64_t s1[3] = {2048, 4096, 1024};
  CHECK_OK(tj_kir_launch_info(k, 16, s1, &l));
  CHECK_EQ_INT(6, l.schedule.tile_m);
  CHECK_EQ_INT(64, l.schedule.tile_n);
  CHECK_EQ_INT(0, l.schedule.mc % 6);
  int64_t mblocks = (2048 + l.schedule.mc - 1) / l.schedule.mc;
  CHECK_EQ_INT(mblocks * (4096 / l.schedule.nc), l.units);
  CHECK_EQ_INT(1024 * l.schedule.nc * 4, l.scratch_bytes);
  int64_t s2[3] = {10, 10, 5000};  // several passes: partial sums too
  CHECK_OK(tj_kir_launch_info(k, 16, s2, &l));
  CHECK(l.scratch_bytes > (int64_t)l.schedule.kc * l.schedule.nc * 4);
  int64_t bad[3] = {-1, 10, 10};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "@launch",
               tj_kir_launch_info(k, 16, bad, &l));
  // AVX2 and SSE2 tiles fit 16 registers.
  CHECK_OK(tj_kir_launch_info(k, 8, s1, &l));
  CHECK(l.schedule.tile_m * (l.schedule.tile_n / 8) <= 13);
  CHECK_OK(tj_kir_launch_info(k, 4, s1, &l));
  CHECK(l.schedule.tile_m * (l.schedule.tile_n / 4) <= 13);
  tj_kir_destroy(k);
}

int main(void) {
  open_jits();
  RUN_TEST(odd_sizes_runtime);
  RUN_TEST(fused_epilogues);
  RUN_TEST(batched_and_transposed);
  RUN_TEST(schedules);
  RUN_TEST(threaded);
  RUN_TEST(launch_info);
  close_jits();
  TEST_MAIN_END();
}
