// bf16 and f16 GEMMs on x86 against the double-precision oracle.
//
// Kernel level (tests/unit/x86_test_util.h): every JIT level the host
// runs, plus x86-64-v4 (AVX-512 without avx512bf16): on a host with
// avx512bf16 the "host" JIT runs the vdpbf16ps path (bf16 pairs) and
// x86-64-v4, AVX2 and SSE2 the widening path (f16/bf16 -> f32 while
// packing, f32 FMAs; SSE2 widens f16 with integer code, having no F16C).
// Graph level: tj_compile vs tj_reference_run, with the scoreboard's
// graph-break count.
//
// Tolerances. Inputs are exact in f32 and in the oracle, so only the
// summation differs: f32 accumulation (an FMA per k, or on the dot path
// one rounding per bf16 pair product sum, products exact) against double.
// f32 outputs: |err| <= (K + 1) * 2.4e-7 * max|a| * max|b| + 2 f32 ulp
// (the f32 GEMM's bound: vdpbf16ps rounds no more often than two FMAs;
// its denormal flushing moves a sum by < 2^-126 per product, inside it).
// bf16 outputs: torch's bf16 rtol, 1.6e-2 (2 bf16 ulp), plus an absolute
// 1.6e-2 for values that cancel to near 0 after a rounding of the
// accumulator to bf16 differed by one ulp (|x @ w| <~ 2 in those cases);
// f16 outputs: 2 f16 ulp plus 2e-3 absolute.

#include <tensorjit.h>

#include "tests/unit/x86_test_util.h"

typedef struct desc_t {
  const char* name;
  tj_dtype_t dt;       // A and B
  tj_dtype_t out;      // y's dtype
  bool runtime_sizes;  // M, N, K as params 0..2
  bool runtime_m;      // M alone as param 0 (N, K constant; not batched)
  int64_t m, n, k;
  int batched;  // 0: [M, N]; 1: [2, M, N], B shared; 2: [2, M, N], B per batch
  bool runtime_batch;  // the batch dim is param 0 (symbolic), not 2
  bool a_trans, b_trans;
  bool epilogue;  // y = gelu(round_dt(acc) + bias), bias of |dt|
  bool residual;  // then y += r, r f32 [.., M, N] (with |epilogue|)
  tj_kir_gemm_schedule_t schedule;
} desc_t;

static tj_kir_t* build(const desc_t* d) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, d->name, &k));
  if (d->runtime_sizes) {
    tj_kir_add_param(k, "M");
    tj_kir_add_param(k, "N");
    tj_kir_add_param(k, "K");
  }
  if (d->runtime_m) tj_kir_add_param(k, "M");
  if (d->runtime_batch) tj_kir_add_param(k, "B");
  tj_kir_ival_t M = d->runtime_sizes || d->runtime_m ? tj_kir_runtime(0)
                                                     : tj_kir_constant(d->m),
                N = d->runtime_sizes ? tj_kir_runtime(1)
                                     : tj_kir_constant(d->n),
                K = d->runtime_sizes ? tj_kir_runtime(2)
                                     : tj_kir_constant(d->k);
  int32_t r = d->batched ? 3 : 2, o = d->batched ? 1 : 0;
  tj_kir_ival_t dims[3] = {
      d->runtime_batch ? tj_kir_runtime(0) : tj_kir_constant(2), M, N};
  tj_kir_set_space(k, r, d->batched ? dims : dims + 1);
  tj_kir_ival_t sa[3], sb[3], sc[3], sbias[3];
  sa[0] = tj_kir_constant(d->m * d->k);
  sb[0] = tj_kir_constant(d->batched == 2 ? d->k * d->n : 0);
  sc[0] = tj_kir_constant(d->m * d->n);
  sbias[0] = tj_kir_constant(0);
  set_matrix_strides(sa, o, M, K, d->a_trans);
  set_matrix_strides(sb, o, K, N, d->b_trans);
  sc[o] = N;
  sc[o + 1] = tj_kir_constant(1);
  sbias[o] = tj_kir_constant(0);
  sbias[o + 1] = tj_kir_constant(1);
  tj_kir_add_buffer(k, "x", d->dt, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", d->dt, TJ_KIR_GEMM_B, sb);
  uint32_t bias = 0;
  if (d->epilogue) {
    bias = tj_kir_add_buffer(k, "bias", d->dt, TJ_KIR_INPUT, sbias);
  }
  uint32_t res = 0;
  if (d->residual)
    res = tj_kir_add_buffer(k, "r", TJ_DTYPE_F32, TJ_KIR_INPUT, sc);
  uint32_t y = tj_kir_add_buffer(k, "y", d->out, TJ_KIR_OUTPUT, sc);
  tj_kir_set_gemm(k, K, &d->schedule);
  k->allow_half_gemm = true;
  uint32_t v = tj_kir_acc(k);
  if (d->epilogue) {
    // As the lowering writes a half matmul: the product rounded to its
    // dtype, then the epilogue in f32.
    v = tj_kir_binary(k, TJ_OP_ADD, tj_kir_cast(k, d->dt, v),
                      tj_kir_load(k, bias));
    v = kir_gelu_tanh(k, tj_kir_cast(k, TJ_DTYPE_F32, v));
    if (d->residual) v = tj_kir_binary(k, TJ_OP_ADD, v, tj_kir_load(k, res));
  }
  if (d->out != TJ_DTYPE_F32) v = tj_kir_cast(k, d->out, v);
  tj_kir_store(k, y, v);
  return k;
}

static double half_atol(tj_dtype_t out, int64_t kk, double scale) {
  if (out == TJ_DTYPE_BF16) return 1.6e-2;
  if (out == TJ_DTYPE_F16) return 2e-3;
  return (double)(kk + 1) * 2.4e-7 * scale;
}

static double half_ulps(tj_dtype_t out) {
  // bf16: 2 ulp is torch's rtol 1.6e-2 at the top of a binade.
  return 2;
  (void)out;
}

// Fills: A in [-1, 1], B in [-s, s] with s = 1/sqrt(K) when the output is
// half (|x @ w| stays ~1, see the top), else [-1, 1].
static void check(const desc_t* d, const int64_t* scalars, int64_t kk) {
  tj_kir_t* k = build(d);
  double s = d->out == TJ_DTYPE_F32 ? 1 : 1 / sqrt((double)(kk ? kk : 1));
  fill_t fa = {-1, 1, false, false}, fb = {-s, s, false, false};
  fill_t fills[4] = {fa, fb, fa, kNoFill};
  check_kernel(k, scalars, fills, half_ulps(d->out), half_atol(d->out, kk, s));
  tj_kir_destroy(k);
}

// One kernel with runtime M, N, K, per dtype, at every combination of
// {1, 3, 17, 64, 257, 1023} (the larger ones sampled: the oracle runs in
// double, one call per product): the small-M in-place path (M <= 16),
// packing edges, odd K (a zero-padded last pair), K = 1023 within a pass.
// The sanitizer leg (tj_test_sanitizer_subset) takes the shapes whose
// oracle work is at most |full| / 32 products, where a test lists more:
// its time went to the instrumented double-precision oracle (about two
// thirds of the test), which runs the same code at every size, as the
// host's side of a kernel call does; what the larger shapes add is the
// JIT's code at more sizes, which the sanitizers do not see and the plain
// leg checks at every one. Every kernel is still compiled and checked.
static double oracle_budget(double full) {
  return tj_test_sanitizer_subset() ? full / 32 : full;
}

TEST(odd_sizes) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t sz[] = {1, 3, 17, 64, 257, 1023};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    desc_t d = {.name = t ? "odd_f16" : "odd_bf16",
                .dt = dts[t],
                .out = TJ_DTYPE_F32,
                .runtime_sizes = true,
                .schedule = {0, 0, 0, 0, 0}};
    tj_kir_t* k = build(&d);
    kernel_set_t set;
    prepare_kernel(k, &set);
    fill_t f = {-1, 1, false, false};
    fill_t fills[3] = {f, f, kNoFill};
    for (size_t i = 0; i < TJ_ARRAY_SIZE(sz); ++i) {
      for (size_t j = 0; j < TJ_ARRAY_SIZE(sz); ++j) {
        for (size_t q = 0; q < TJ_ARRAY_SIZE(sz); ++q) {
          double work = (double)sz[i] * (double)sz[j] * (double)sz[q];
          // Every shape up to 2^21 products, and a quarter of the rest up
          // to 2^25 (each of M, N, K = 1023 among them); in the sanitizer
          // leg the first alone (see oracle_budget).
          if (work > 2097152.0 &&
              ((i + j + q) % 4 != 3 || work > oracle_budget(33554432.0))) {
            continue;
          }
          int64_t scalars[3] = {sz[i], sz[j], sz[q]};
          if (!check_prepared(k, &set, scalars, fills, 2,
                              half_atol(TJ_DTYPE_F32, sz[q], 1))) {
            fprintf(stderr, "  (%s M %lld N %lld K %lld)\n",
                    tj_dtype_name(dts[t]), (long long)sz[i], (long long)sz[j],
                    (long long)sz[q]);
          }
        }
      }
    }
    // K past kc (1024): two passes, the second of odd length; and K = 0.
    int64_t two[3] = {37, 130, 1501};
    check_prepared(k, &set, two, fills, 2, half_atol(TJ_DTYPE_F32, 1501, 1));
    int64_t zero_k[3] = {20, 9, 0};
    check_prepared(k, &set, zero_k, fills, 0, 0);
    release_set(&set);
    tj_kir_destroy(k);
  }
}

// The capstone's epilogue: y = gelu(round(x @ w) + b), all bf16 (f16).
TEST(bias_gelu_half_out) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t ms[] = {1, 3, 17, 64, 257};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(ms); ++i) {
      // 2^26 products at M 257: in the sanitizer leg M up to 64 (2^24).
      if ((double)ms[i] * 257 * 1023 > oracle_budget(1073741824.0)) continue;
      char name[32];
      snprintf(name, sizeof(name), "capstone_%s_%lld", tj_dtype_name(dts[t]),
               (long long)ms[i]);
      desc_t d = {.name = name,
                  .dt = dts[t],
                  .out = dts[t],
                  .m = ms[i],
                  .n = 257,
                  .k = 1023,
                  .epilogue = true,
                  .schedule = {0, 0, 0, 0, 0}};
      check(&d, NULL, d.k);
    }
  }
}

// Transposed operands (B = W^T as in dx = dy @ W^T, A = X^T as in dW =
// X^T @ dy), batches with a shared and a per-entry B, several K passes.
TEST(transposed_and_batched) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    const tj_dtype_t dt = dts[t];
    static const struct {
      const char* name;
      int64_t m, n, k;
      int batched;
      bool at, bt;
    } cases[] = {
        {"bt", 17, 257, 1023, 0, false, true},
        {"at", 64, 17, 257, 0, true, false},
        {"abt", 257, 64, 17, 0, true, true},
        {"bt_small", 3, 100, 65, 0, false, true},
        {"at_passes", 40, 70, 2101, 0, true, false},
        {"bt_passes", 30, 90, 1025, 0, false, true},
        {"batch_shared", 17, 64, 33, 1, false, false},
        {"batch_own", 33, 17, 64, 2, false, true},
        {"batch_small", 3, 40, 31, 2, true, false},
    };
    for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
      char name[48];
      snprintf(name, sizeof(name), "%s_%s", cases[i].name, tj_dtype_name(dt));
      desc_t d = {.name = name,
                  .dt = dt,
                  .out = TJ_DTYPE_F32,
                  .m = cases[i].m,
                  .n = cases[i].n,
                  .k = cases[i].k,
                  .batched = cases[i].batched,
                  .a_trans = cases[i].at,
                  .b_trans = cases[i].bt,
                  .schedule = {0, 0, 0, 0, 0}};
      check(&d, NULL, d.k);
    }
  }
}

// Explicit schedules: small tiles and blocks, a short even kc (several
// passes of pairs) and an odd kc (the widening path even with
// avx512bf16).
TEST(schedules) {
  static const tj_kir_gemm_schedule_t scheds[] = {
      {4, 16, 8, 32, 0}, {6, 64, 12, 64, 64}, {3, 48, 9, 48, 41}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(scheds); ++i) {
    char name[32];
    snprintf(name, sizeof(name), "bf16_sched%zu", i);
    desc_t d = {.name = name,
                .dt = TJ_DTYPE_BF16,
                .out = TJ_DTYPE_F32,
                .m = 29,
                .n = 131,
                .k = 201,
                .schedule = scheds[i]};
    check(&d, NULL, d.k);
  }
}

//===--- the AMX bf16 tiles ---===//
//
// On a host with amx-bf16 the "host" JIT (the amx level) multiplies a bf16
// GEMM whose K is a constant multiple of 32 and whose A is k-contiguous on
// the tiles (tdpbf16ps) in its packed path (M > 16 at run time, or a
// transposed B at any M); "avx512" (added below where the host is amx)
// runs the same kernels on vdpbf16ps. The f32 tolerance at the top holds
// unchanged: tdpbf16ps adds each product of a pair (exact in f32) to the
// f32 sum with one rounding to nearest even, no more roundings than the
// FMA chain, and its flushing of bf16 denormal inputs and f32 denormal
// sums moves a sum by less than 2^-126 per product.

// Fills every input by role: A in [-1, 1], B in [-s, s], bias and
// residual in [-1, 1].
static void role_fills(const tj_kir_t* k, double s, fill_t* out) {
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    tj_kir_role_t role = k->buffers[b].role;
    out[b] = role == TJ_KIR_OUTPUT   ? kNoFill
             : role == TJ_KIR_GEMM_B ? (fill_t){-s, s, false, false}
                                     : (fill_t){-1, 1, false, false};
  }
}

// A runtime M over every decode size 1..16, past a tile (17, 31, 33) and
// past an m block (300: mc is 258 for 6-row tiles, not a multiple of 16),
// at constant K and N: K multiples of 32 (one k step of the tiles, three,
// K = 2080 over three K passes of kc 1024 whose last is 32 long) and K
// that are not (33, 1000, 1023: vdpbf16ps at the amx level too), N with
// an edge panel or less than one (1, 17, 65, 70, 200), B n-contiguous
// (M <= 16 reads B in place) and transposed (the packed path, so the
// tiles at every M, rows past M configured away).
TEST(amx_runtime_m) {
  static const struct {
    int64_t k, n;
  } shapes[] = {{32, 17}, {96, 65}, {1024, 200}, {2080, 70},
                {64, 1},  {33, 65}, {1000, 17},  {1023, 1}};
  static const int64_t ms[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                               11, 12, 13, 14, 15, 16, 17, 31, 33, 300};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(shapes); ++i) {
    for (int bt = 0; bt < 2; ++bt) {
      char name[48];
      snprintf(name, sizeof(name), "amx_m_k%lld_n%lld%s",
               (long long)shapes[i].k, (long long)shapes[i].n, bt ? "_bt" : "");
      desc_t d = {.name = name,
                  .dt = TJ_DTYPE_BF16,
                  .out = TJ_DTYPE_F32,
                  .runtime_m = true,
                  .n = shapes[i].n,
                  .k = shapes[i].k,
                  .b_trans = bt != 0,
                  .schedule = {0, 0, 0, 0, 0}};
      tj_kir_t* k = build(&d);
      kernel_set_t set;
      prepare_kernel(k, &set);
      fill_t fills[TJ_KIR_MAX_BUFFERS];
      role_fills(k, 1, fills);
      for (size_t j = 0; j < TJ_ARRAY_SIZE(ms); ++j) {
        // The oracle runs in double: up to 2^23 products a shape (M of 1
        // and 2 at least in the sanitizer leg, see oracle_budget).
        if ((double)ms[j] * (double)d.n * (double)d.k >
                oracle_budget(8388608.0) &&
            ms[j] > 2)
          continue;
        int64_t scalars[1] = {ms[j]};
        if (!check_prepared(k, &set, scalars, fills, 2,
                            half_atol(TJ_DTYPE_F32, d.k, 1))) {
          fprintf(stderr, "  (M %lld)\n", (long long)ms[j]);
        }
      }
      release_set(&set);
      tj_kir_destroy(k);
    }
  }
}

// A symbolic batch (param 0) of 1 and 3 entries, B shared or one per
// entry: each entry's tiles at its own A, B and C.
TEST(amx_symbolic_batch) {
  static const struct {
    int64_t m, n, k;
    int batched;
    bool bt;
  } cases[] = {{33, 65, 64, 1, false},
               {20, 17, 96, 2, true},
               {17, 64, 32, 2, false},
               {40, 30, 1000, 1, false}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    char name[48];
    snprintf(name, sizeof(name), "amx_batch%zu", i);
    desc_t d = {.name = name,
                .dt = TJ_DTYPE_BF16,
                .out = TJ_DTYPE_F32,
                .m = cases[i].m,
                .n = cases[i].n,
                .k = cases[i].k,
                .batched = cases[i].batched,
                .runtime_batch = true,
                .b_trans = cases[i].bt,
                .schedule = {0, 0, 0, 0, 0}};
    tj_kir_t* k = build(&d);
    kernel_set_t set;
    prepare_kernel(k, &set);
    fill_t fills[TJ_KIR_MAX_BUFFERS];
    role_fills(k, 1, fills);
    for (int64_t b = 1; b <= 3; b += 2) {
      int64_t scalars[1] = {b};
      check_prepared(k, &set, scalars, fills, 2,
                     half_atol(TJ_DTYPE_F32, d.k, 1));
    }
    release_set(&set);
    tj_kir_destroy(k);
  }
}

// The epilogue on the tiles' f32 sums, as the lowering writes a bf16
// linear layer: gelu(round_bf16(acc) + bias), then an f32 residual, out
// in bf16 and in f32, at K = 1024 (one pass) and 4128 (five, the last 32
// long). Tolerance: the bf16 one at the top for both outputs (B scaled by
// 1/sqrt(K), |acc| <~ 2): the epilogue rounds the sum to bf16 first, and
// a sum within the f32 bound of a bf16 rounding boundary may round to the
// other side, one bf16 ulp (<= 1.6e-2 there) that gelu' <= 1.13 keeps.
TEST(amx_epilogues) {
  static const struct {
    int64_t m, n, k;
  } shapes[] = {
      {17, 129, 1024}, {64, 65, 1024}, {257, 33, 1024}, {20, 65, 4128}};
  static const tj_dtype_t outs[] = {TJ_DTYPE_BF16, TJ_DTYPE_F32};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(shapes); ++i) {
    for (size_t o = 0; o < TJ_ARRAY_SIZE(outs); ++o) {
      char name[48];
      snprintf(name, sizeof(name), "amx_epi%zu_%s", i, tj_dtype_name(outs[o]));
      desc_t d = {.name = name,
                  .dt = TJ_DTYPE_BF16,
                  .out = outs[o],
                  .m = shapes[i].m,
                  .n = shapes[i].n,
                  .k = shapes[i].k,
                  .epilogue = true,
                  .residual = true,
                  .schedule = {0, 0, 0, 0, 0}};
      tj_kir_t* k = build(&d);
      fill_t fills[TJ_KIR_MAX_BUFFERS];
      role_fills(k, 1 / sqrt((double)d.k), fills);
      check_kernel(k, NULL, fills, 2, 1.6e-2);
      tj_kir_destroy(k);
    }
  }
}

// A bf16 kernel runs vdpbf16ps only where the CPU has it, and at the amx
// level with amx-bf16 tdpbf16ps instead when K is a constant multiple of
// 32 (K 64), vdpbf16ps when it is not (K 66).
TEST(dot_instruction) {
  for (int odd = 0; odd < 2; ++odd) {
    desc_t d = {.name = "dot_probe",
                .dt = TJ_DTYPE_BF16,
                .out = TJ_DTYPE_F32,
                .m = 64,
                .n = 64,
                .k = odd ? 66 : 64,
                .schedule = {0, 0, 0, 0, 0}};
    tj_kir_t* k = build(&d);
    CHECK_OK(tj_kir_finalize(k));
    for (int j = 0; j < g_num_jits; ++j) {
      const tj_kir_t* ks[1] = {k};
      char* as = NULL;
      CHECK_OK(tj_x86_jit_emit_asm(g_jits[j], ks, 1, &as));
      if (!as) continue;
      const char* key = tj_x86_jit_target_key(g_jits[j]);
      bool has_dot = strstr(as, "vdpbf16ps") != NULL;
      bool has_tiles = strstr(as, "tdpbf16ps") != NULL;
      // The avx512 level lists the host's features then takes AMX's off.
      bool tiles = !odd && tj_x86_jit_isa(g_jits[j]) == TJ_X86_ISA_AMX &&
                   strstr(key, "+amx-bf16");
      bool dot = !tiles &&
                 (strcmp(g_isa_names[j], "host") == 0 ||
                  strcmp(g_isa_names[j], "avx512") == 0) &&
                 strstr(key, "+avx512bf16");
      if (has_dot != dot || has_tiles != tiles) {
        fprintf(stderr, "  %s K %lld: vdpbf16ps %s, tdpbf16ps %s\n",
                g_isa_names[j], (long long)d.k, has_dot ? "present" : "absent",
                has_tiles ? "present" : "absent");
      }
      CHECK(has_dot == dot);
      CHECK(has_tiles == tiles);
      tj_free_string(tj_allocator_system(), as);
    }
    tj_kir_destroy(k);
  }
}

//===--- graphs through tj_compile ---===//

// Runs finalized |g| (inputs filled in [-1, 1], input |wi| scaled by
// |wscale|) through one executable at each B of |bs|, |reps| times each
// with fresh data, against tj_reference_run: |got - want| <= rtol |want| +
// atol. Checks that no group is a graph break and nothing recompiles.
static void check_graph(tj_graph_t* g, const char* name, int64_t sym,
                        const int64_t* bs, int nb, int reps, int wi,
                        double wscale, double rtol, double atol, int kernels,
                        bool autotune) {
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = "";
  opts.autotune = autotune ? TJ_AUTOTUNE_ON : TJ_AUTOTUNE_OFF;
  opts.x86.autotune_budget_ms = 50;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  if (!exe) return;
  int ni = tj_graph_num_inputs(g), no = tj_graph_num_outputs(g);
  for (int q = 0; q < nb * reps; ++q) {
    int64_t B = bs[q % nb];
    tj_tensor_t in[4], got[2], want[2];
    int64_t shapes[6][TJ_MAX_RANK];
    void* bufs[8] = {0};
    for (int i = 0; i < ni; ++i) {
      tj_value_t v = tj_graph_input_value(g, i);
      tj_dtype_t d = tj_graph_value_dtype(g, v);
      int32_t rank = tj_graph_value_rank(g, v);
      tj_graph_value_dims(g, v, shapes[i]);
      int64_t n = 1;
      for (int32_t a = 0; a < rank; ++a) {
        if (shapes[i][a] == sym) shapes[i][a] = B;
        n *= shapes[i][a];
      }
      bufs[i] = malloc((size_t)(n ? n : 1) * tj_dtype_size(d));
      double sc = i == wi ? wscale : 1;
      for (int64_t e = 0; e < n; ++e) {
        tj_store_f64(d, bufs[i], e, rng_uniform(-sc, sc));
      }
      in[i] = tj_tensor_make(bufs[i], d, rank, shapes[i]);
    }
    for (int o = 0; o < no; ++o) {
      int32_t rank;
      int64_t* shape = shapes[4 + o];
      CHECK_OK(tj_executable_output_shape(exe, in, ni, o, &rank, shape));
      tj_dtype_t d = tj_graph_value_dtype(g, tj_graph_output_value(g, o));
      int64_t n = 1;
      for (int32_t a = 0; a < rank; ++a) n *= shape[a];
      bufs[4 + 2 * o] = calloc((size_t)(n ? n : 1), tj_dtype_size(d));
      bufs[5 + 2 * o] = calloc((size_t)(n ? n : 1), tj_dtype_size(d));
      got[o] = tj_tensor_make(bufs[4 + 2 * o], d, rank, shape);
      want[o] = tj_tensor_make(bufs[5 + 2 * o], d, rank, shape);
    }
    CHECK_OK(tj_executable_run(exe, in, ni, got, no));
    CHECK_OK(tj_reference_run(g, in, ni, want, no));
    for (int o = 0; o < no; ++o) {
      int64_t n = 1;
      for (int32_t a = 0; a < got[o].rank; ++a) n *= got[o].shape[a];
      int misses = 0;
      for (int64_t e = 0; e < n; ++e) {
        double x = tj_load_f64(got[o].dtype, got[o].data, e);
        double y = tj_load_f64(want[o].dtype, want[o].data, e);
        if (fabs(x - y) <= rtol * fabs(y) + atol) continue;
        if (misses++ < 4) {
          fprintf(stderr, "  @%s B=%lld out%d[%lld] = %.6g, want %.6g\n", name,
                  (long long)B, o, (long long)e, x, y);
        }
      }
      CHECK_EQ_INT(0, misses);
    }
    for (int i = 0; i < 8; ++i) free(bufs[i]);
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(kernels, st.num_kernels);
  CHECK_EQ_INT(0, st.recompiles);
  tj_executable_release(exe);
}

static tj_context_t* g_ctx;

// y = gelu(x @ w + b) in bf16 and f16 with a symbolic batch: one GEMM
// kernel with the fused epilogue, no graph break, every B and several
// weights from one executable.
TEST(capstone_graph) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t bs[] = {1, 3, 17, 64, 257};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    tj_graph_t* g;
    CHECK_OK(tj_graph_create(g_ctx, "capstone_half", &g));
    int64_t B = tj_graph_symbol(g, "B");
    const int64_t K = 1023, N = 257;
    tj_value_t x = tj_graph_input(g, dts[t], 2, (int64_t[]){B, K}, "x");
    tj_value_t w = tj_graph_input(g, dts[t], 2, (int64_t[]){K, N}, "w");
    tj_value_t b = tj_graph_input(g, dts[t], 1, (int64_t[]){N}, "b");
    tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true),
                    "y");
    // |x @ w| ~ 1 (w scaled by 1/sqrt K): see the top for the tolerance.
    double tol = dts[t] == TJ_DTYPE_BF16 ? 1.6e-2 : 2e-3;
    CHECK_OK(tj_graph_finalize(g));
    check_graph(g, tj_dtype_name(dts[t]), B, bs, TJ_ARRAY_SIZE(bs), 2, 1,
                1 / sqrt((double)K), tol, tol, 1, false);
    // Autotuned: the schedule variants of a half GEMM (the OpenBLAS
    // candidate only where cblas_sbgemm exists, for bf16).
    check_graph(g, tj_dtype_name(dts[t]), B, bs + 3, 2, 1, 1,
                1 / sqrt((double)K), tol, tol, 1, true);
    tj_graph_destroy(g);
  }
}

// The capstone block with a residual, y = gelu(x @ w + b) + r, in bf16 with
// a symbolic batch and K = 1024: on the amx level the tiles for B > 16,
// and the same graph at the avx512 level (vdpbf16ps) where the host's is
// amx. One kernel, the residual fused into the GEMM's epilogue.
TEST(amx_graph) {
  static const int64_t bs[] = {1, 16, 17, 100, 300};
  tj_context_t* ctxs[2] = {g_ctx, NULL};
  if (tj_x86_jit_isa(g_jits[0]) == TJ_X86_ISA_AMX) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = "avx512";
    o.log = "";
    CHECK_OK(tj_context_create(&o, &ctxs[1]));
  }
  for (int c = 0; c < 2 && ctxs[c]; ++c) {
    tj_graph_t* g;
    CHECK_OK(tj_graph_create(ctxs[c], "capstone_residual_bf16", &g));
    int64_t B = tj_graph_symbol(g, "B");
    const int64_t K = 1024, N = 200;
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, K}, "x");
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){K, N}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_BF16, 1, (int64_t[]){N}, "b");
    tj_value_t r = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, N}, "r");
    tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
    tj_graph_output(g, tj_graph_add(g, y, r), "y");
    CHECK_OK(tj_graph_finalize(g));
    // As capstone_graph: |x @ w| ~ 1, bf16 outputs.
    check_graph(g, c ? "residual_avx512" : "residual_host", B, bs,
                TJ_ARRAY_SIZE(bs), 2, 1, 1 / sqrt((double)K), 1.6e-2, 1.6e-2, 1,
                false);
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctxs[1]);
}

// The backward of a bf16 linear layer: dx = dy @ W^T (B transposed) and
// dW = X^T @ dy (A transposed, K = the batch), both compiled.
TEST(training_graph) {
  static const int64_t bs[] = {1, 17, 257};
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "linear_backward_bf16", &g));
  int64_t B = tj_graph_symbol(g, "B");
  const int64_t K = 200, N = 129;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){K, N}, "w");
  tj_value_t dy = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, N}, "dy");
  static const int32_t kSwap[2] = {1, 0};
  tj_graph_output(g, tj_graph_matmul(g, dy, tj_graph_transpose(g, w, kSwap)),
                  "dx");
  tj_graph_output(g, tj_graph_matmul(g, tj_graph_transpose(g, x, kSwap), dy),
                  "dw");
  // Each output is one rounding of an f32 sum to bf16: 2 bf16 ulp.
  CHECK_OK(tj_graph_finalize(g));
  check_graph(g, "backward", B, bs, TJ_ARRAY_SIZE(bs), 1, -1, 1, 1.6e-2, 1e-5,
              2, false);
  tj_graph_destroy(g);
}

int main(void) {
  open_jits();
  open_extra_jit(TJ_X86_ISA_X86_64_V4, "x86-64-v4");
  // Where the host's level is amx, its bf16 GEMMs with K % 32 == 0 run on
  // the tiles: avx512 keeps vdpbf16ps for them under test too.
  if (tj_x86_jit_isa(g_jits[0]) == TJ_X86_ISA_AMX) {
    open_extra_jit(TJ_X86_ISA_AVX512, "avx512");
  }
  RUN_TEST(odd_sizes);
  RUN_TEST(bias_gelu_half_out);
  RUN_TEST(transposed_and_batched);
  RUN_TEST(schedules);
  RUN_TEST(amx_runtime_m);
  RUN_TEST(amx_symbolic_batch);
  RUN_TEST(amx_epilogues);
  RUN_TEST(dot_instruction);
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  RUN_TEST(capstone_graph);
  RUN_TEST(amx_graph);
  RUN_TEST(training_graph);
  tj_context_destroy(g_ctx);
  close_jits();
  TEST_MAIN_END();
}
