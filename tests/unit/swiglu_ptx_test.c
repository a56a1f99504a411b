// swiglu (issue 14): the dual GEMM, silu(x @ wg) * (x @ wu) as one kernel
// that reads x once and computes both products of a tile (the wgmma main
// loops, emit_nvptx_wgmma.c), without a GPU.
//   - kernel IR level: a dual kernel (B and B2 [K, N] N-major or [N, K]
//     K-major; runtime, ragged constant and shared-weight batched sizes)
//     on every schedule that takes one (the cp.async wgmma tiles of 128
//     and 256 columns, drain, persistent; the TMA cooperative, pingpong and
//     256-row schedules, with the TMA store too), at the shapes and layouts
//     a covering design gives it (every_dual_schedule), emits
//     m64n<tile_n>k16 over both panels, its TMA kind a third tensor map, and
//     ptxas -arch=sm_90a assembles it (several runs at once) without a
//     wgmma note (C7508/C7510/C7511/C7515) or, on the cooperative TMA
//     tiles, a spill; mma.sync, 64-column tiles, clusters and
//     sm_80 refuse it (UNSUPPORTED, naming the kernel); the launch counts tiles
//     of C (half the wgmma's columns);
//   - graph level: the Llama MLP's mul(silu(x @ wg), x @ wu) (and gelu,
//     the operands of mul swapped, K-major weights, a [B, T, d] input)
//     compiles for sm_90a as one kernel (its wgmma over 128 columns) with
//     no host step; f32, sm_80, two A and weights of two layouts keep two
//     kernels.
// Usage: swiglu_ptx_test [PTXAS]; without PTXAS the PTX is made but not
// assembled.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "kir/kernel_ir.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/test.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

static int count_of(const char* ptx, const char* needle) {
  int n = 0;
  for (const char* p = ptx; p && (p = strstr(p, needle)) != NULL; ++p) ++n;
  return n;
}

//===--- kernel IR level ---===//

typedef enum shape_e {
  SHAPE_RUNTIME,  // [M, N], K all params
  SHAPE_RAGGED,   // constant M 200, N 136, K 72: no dim a tile multiple
  SHAPE_SHARED,   // [3, M, N], one B and B2 for every batch entry
} shape_t;

static const char* const kShapeNames[] = {"runtime", "ragged", "shared"};

// y = cast(silu(acc) * acc2) of |dt|, B and B2 N-major ([K, N]) or
// K-major ([N, K] read transposed).
static tj_kir_t* dual_gemm(tj_dtype_t dt, shape_t shape, bool kmajor) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "swiglu", &k));
  if (!k) return NULL;
  tj_kir_ival_t c0 = tj_kir_constant(0), c1 = tj_kir_constant(1);
  tj_kir_ival_t m, n, kk;
  if (shape == SHAPE_RAGGED) {
    m = tj_kir_constant(200);
    n = tj_kir_constant(136);
    kk = tj_kir_constant(72);
  } else {
    m = tj_kir_runtime(tj_kir_add_param(k, "M"));
    n = tj_kir_runtime(tj_kir_add_param(k, "N"));
    kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  }
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  bool batched = shape == SHAPE_SHARED;
  int32_t r = batched ? 3 : 2;
  tj_kir_ival_t dims[3] = {tj_kir_constant(3), m, n};
  tj_kir_set_space(k, r, batched ? dims : dims + 1);
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_ival_t mk = batched ? tj_kir_runtime(tj_kir_add_param(k, "MK")) : c0;
  tj_kir_ival_t mn = batched ? tj_kir_runtime(tj_kir_add_param(k, "MN")) : c0;
  tj_kir_ival_t sa[3] = {mk, kk, c1}, sw[3] = {c0, kk, c1}, sy[3] = {mn, n, c1};
  if (kmajor) {
    sw[1] = c1;
    sw[2] = kk;
  } else {
    sw[1] = n;
    sw[2] = c1;
  }
  tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, batched ? sa : sa + 1);
  tj_kir_add_buffer(k, "wg", dt, TJ_KIR_GEMM_B, batched ? sw : sw + 1);
  tj_kir_add_buffer(k, "wu", dt, TJ_KIR_GEMM_B2, batched ? sw : sw + 1);
  uint32_t y =
      tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, batched ? sy : sy + 1);
  uint32_t g = tj_kir_acc(k);
  uint32_t s =
      tj_kir_binary(k, TJ_OP_MUL, g, tj_kir_unary(k, TJ_OP_SIGMOID, g));
  tj_kir_store(
      k, y, tj_kir_cast(k, dt, tj_kir_binary(k, TJ_OP_MUL, s, tj_kir_acc2(k))));
  k->allow_half_gemm = true;
  tj_status_t st = k->error ? tj_status_clone(k->error) : tj_kir_finalize(k);
  CHECK_OK(st);
  CHECK(tj_kir_gemm_is_dual(k));
  CHECK(tj_kir_gemm_b_kmajor(k) == kmajor);
  return k;
}

#define WGMMA(m, n, stages)                                                   \
  .gemm_kernel = TJ_NVPTX_GEMM_WGMMA, .gemm_tile_m = (m), .gemm_tile_n = (n), \
  .gemm_stages = (stages)
#define TMA(m, n, stages) WGMMA(m, n, stages), .gemm_tma = true

// The schedules that take a dual GEMM: the autotuner's of 128 and 256
// columns and a few more (tile_n counts both products' columns).
static const tj_nvptx_options_t kSchedules[] = {
    {.gemm_kernel = TJ_NVPTX_GEMM_AUTO},
    {WGMMA(128, 128, 3)},
    {WGMMA(128, 256, 4)},
    {WGMMA(64, 128, 4)},
    {WGMMA(128, 128, 4)},
    {WGMMA(128, 128, 3), .gemm_wgmma_drain = true},
    {WGMMA(128, 256, 4), .gemm_persistent = true},
    {TMA(128, 128, 4), .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_persistent = true},
    {TMA(64, 256, 4), .gemm_persistent = true, .gemm_tma_store = true},
    {TMA(128, 256, 3)},
    {TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true,
     .gemm_tma_store = true},
    {TMA(256, 128, 3), .gemm_persistent = true, .gemm_tma_store = true},
    {TMA(256, 128, 4), .gemm_persistent = true},
};

// ... and those that refuse one.
static const tj_nvptx_options_t kRefused[] = {
    {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    {WGMMA(128, 64, 4)},
    {TMA(128, 64, 8), .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_persistent = true, .gemm_cluster = true},
};

static void check_schedule(tj_dtype_t dt, shape_t shape, bool kmajor,
                           const tj_nvptx_options_t* o) {
  tj_kir_t* k = dual_gemm(dt, shape, kmajor);
  if (!k) return;
  char what[160], sched[96];
  tj_test_describe_schedule(o, sched, sizeof(sched));
  snprintf(what, sizeof(what), "%s %s %s %s", tj_dtype_name(dt),
           kShapeNames[shape], kmajor ? "kmajor" : "nmajor", sched);
  tj_nvptx_kernel_t info;
  memset(&info, 0, sizeof(info));
  tj_status_t s = NULL;
  char* ptx = tj_test_emit_ptx(k, o, TJ_NVPTX_SM_90A, "swiglu", &info, &s);
  if (s) fprintf(stderr, "  %s: refused\n", what);
  CHECK_OK(s);
  if (!ptx) {
    tj_kir_destroy(k);
    return;
  }
  CHECK(info.dual && info.wgmma);
  // One wgmma over both products' columns (the default tile: 128).
  int32_t wide = o->gemm_tile_n ? o->gemm_tile_n : 128;
  CHECK_EQ_INT(wide / 2, info.tile_n);
  char inst[64];
  snprintf(inst, sizeof(inst), "wgmma.mma_async.sync.aligned.m64n%dk16",
           (int)wide);
  tj_test_check_has(what, ptx, inst, true);
  tj_test_check_has(what, ptx, kmajor ? "p, 1, 1, 0, 0;" : "p, 1, 1, 0, 1;",
                    true);
  if (o->gemm_tma) {
    // Three maps prefetched (A, B, B2); B's and B2's panels by TMA.
    CHECK_EQ_INT(3, count_of(ptx, "prefetch.tensormap"));
    tj_test_check_has(what, ptx, "cp.async.cg", false);
    // The TMA store where asked, on rank-2 kernels: C's tile only.
    tj_test_check_has(what, ptx, "cp.async.bulk.tensor.2d.global.shared::cta",
                      o->gemm_tma_store && shape != SHAPE_SHARED);
  } else {
    tj_test_check_has(what, ptx, "cp.async.cg.shared.global", true);
  }
  // ptxas in the background (tj_test_ptxas_queue); the cooperative TMA
  // tiles must not spill.
  tj_test_ptxas_queue(g_ptxas, what, ptx,
                      o->gemm_tma && info.tile_m >= 128 && !o->gemm_pingpong);
  printf("# %s: %zu bytes of PTX\n", what, strlen(ptx));
  tj_free_string(tj_allocator_system(), ptx);
  tj_kir_destroy(k);
}

// The cross product of dtype, shape, B layout and schedule, by a covering
// design (tj_test_covers over the 6 variants shape * 2 + layout): bf16
// runs every schedule at two variants, one of each layout and two shapes
// (runtime N-major and ragged K-major, runtime K-major and shared N-major,
// ragged N-major and shared K-major, in turn down the table), f16 every
// schedule at one (the dtype is one word of the wgmma); so every variant
// meets every family of schedules (cp.async, TMA, pingpong, the TMA store,
// 256 rows) in bf16.
TEST(every_dual_schedule) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  enum { kVariants = (SHAPE_SHARED + 1) * 2 };
  for (size_t t = 0; t < tj_test_num_half_types(); ++t) {
    for (int v = 0; v < kVariants; ++v) {
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kSchedules); ++i) {
        if (tj_test_covers(i, v, kVariants, t ? 1 : tj_test_ways(2)))
          check_schedule(kTypes[t], (shape_t)(v / 2), v % 2 != 0,
                         &kSchedules[i]);
      }
    }
  }
  tj_test_ptxas_wait();
}

TEST(refused_schedules) {
  for (int a = 0; a < 2; ++a) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kRefused) + 1; ++i) {
      // sm_80 refuses the default too.
      if (a == 1 && i > 0) break;
      tj_kir_t* k = dual_gemm(TJ_DTYPE_BF16, SHAPE_RUNTIME, false);
      if (!k) return;
      tj_nvptx_options_t none = {.gemm_kernel = TJ_NVPTX_GEMM_AUTO};
      const tj_nvptx_options_t* o = a ? &none : i ? &kRefused[i - 1] : NULL;
      if (!o) {
        tj_kir_destroy(k);
        continue;
      }
      tj_nvptx_kernel_t info;
      tj_status_t s = NULL;
      char* ptx = tj_test_emit_ptx(k, o, a ? TJ_NVPTX_SM_80 : TJ_NVPTX_SM_90A,
                                   "swiglu", &info, &s);
      CHECK(ptx == NULL);
      CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "@swiglu", s);
      tj_free_string(tj_allocator_system(), ptx);
      tj_kir_destroy(k);
    }
  }
}

// A B2 must be read as B is; an acc2 needs a B2.
TEST(verify_rejects_mismatched_b2) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "bad_b2", &k));
  tj_kir_ival_t d2[2] = {tj_kir_constant(64), tj_kir_constant(64)};
  tj_kir_set_space(k, 2, d2);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, tj_kir_constant(64), &sched);
  tj_kir_ival_t sa[2] = {tj_kir_constant(64), tj_kir_constant(1)};
  tj_kir_ival_t st[2] = {tj_kir_constant(1), tj_kir_constant(64)};
  tj_kir_add_buffer(k, "a", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sa);
  tj_kir_add_buffer(k, "b2", TJ_DTYPE_BF16, TJ_KIR_GEMM_B2, st);
  uint32_t o = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sa);
  tj_kir_store(k, o, tj_kir_acc2(k));
  k->allow_half_gemm = true;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "differs from B",
               tj_kir_finalize(k));
  tj_kir_destroy(k);
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "no_b2", &k));
  tj_kir_set_space(k, 2, d2);
  tj_kir_set_gemm(k, tj_kir_constant(64), &sched);
  tj_kir_add_buffer(k, "a", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sa);
  o = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sa);
  tj_kir_store(k, o, tj_kir_acc2(k));
  k->allow_half_gemm = true;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "without a B2", tj_kir_finalize(k));
  tj_kir_destroy(k);
}

// The launch counts tiles of C: the wgmma's columns halved.
TEST(launch_counts_tiles_of_c) {
  tj_kir_t* k = dual_gemm(TJ_DTYPE_BF16, SHAPE_RUNTIME, false);
  if (!k) return;
  tj_nvptx_options_t o = {WGMMA(128, 128, 3)};
  tj_nvptx_kernel_t info;
  tj_status_t s = NULL;
  char* ptx = tj_test_emit_ptx(k, &o, TJ_NVPTX_SM_90A, "swiglu", &info, &s);
  CHECK_OK(s);
  tj_free_string(tj_allocator_system(), ptx);
  tj_nvptx_launch_t launch;
  int64_t mnk[3] = {1000, 200, 64};  // 8 row tiles x 4 column tiles of 64
  CHECK_OK(tj_nvptx_launch_config(k, &info, mnk, 132, &launch));
  CHECK_EQ_INT(8 * 4, launch.grid[0]);
  tj_kir_destroy(k);
}

//===--- graph level ---===//

typedef enum form_e {
  FORM_SILU,     // mul(silu(x @ wg), x @ wu), x [B, d]
  FORM_SWAPPED,  // mul(x @ wu, silu(x @ wg))
  FORM_GELU,     // mul(gelu(x @ wg), x @ wu)
  FORM_KMAJOR,   // wg, wu [N, K] read transposed (Linear's layout)
  FORM_LINEAR3,  // x [B, 24, d]: one rank-2 GEMM of B*24 rows
  FORM_MLP,      // the Llama MLP: rmsnorm, the dual GEMM, down, residual
  // Refused: two kernels.
  FORM_TWO_A,  // silu(x @ wg) * (z @ wu)
  FORM_MIXED,  // wg [K, N], wu [N, K] read transposed
} form_t;

static const char* const kFormNames[] = {
    "silu", "swapped", "gelu", "kmajor", "linear3", "mlp", "two_a", "mixed"};

enum { kD = 192, kFfn = 256 };

static tj_graph_t* build(tj_dtype_t dt, form_t form) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "swiglu", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  int64_t n = kFfn;
  tj_value_t x = form == FORM_LINEAR3
                     ? tj_graph_input(g, dt, 3, (int64_t[]){B, 24, kD}, "x")
                     : tj_graph_input(g, dt, 2, (int64_t[]){B, kD}, "x");
  tj_value_t h = x;
  if (form == FORM_MLP) h = tj_graph_rms_norm(g, x, (tj_value_t){0}, 1e-6);
  tj_value_t wg, wu;
  if (form == FORM_KMAJOR) {
    wg = tj_graph_transpose(g,
                            tj_graph_input(g, dt, 2, (int64_t[]){n, kD}, "wg"),
                            (int32_t[]){1, 0});
    wu = tj_graph_transpose(g,
                            tj_graph_input(g, dt, 2, (int64_t[]){n, kD}, "wu"),
                            (int32_t[]){1, 0});
  } else {
    wg = tj_graph_input(g, dt, 2, (int64_t[]){kD, n}, "wg");
    wu = tj_graph_input(g, dt, 2, (int64_t[]){kD, n}, "wu");
  }
  if (form == FORM_MIXED)
    wu = tj_graph_transpose(
        g, tj_graph_input(g, dt, 2, (int64_t[]){n, kD}, "wu_t"),
        (int32_t[]){1, 0});
  tj_value_t a2 = h;
  if (form == FORM_TWO_A)
    a2 = tj_graph_input(g, dt, 2, (int64_t[]){B, kD}, "z");
  tj_value_t gate = tj_graph_matmul(g, h, wg);
  tj_value_t up = tj_graph_matmul(g, a2, wu);
  tj_value_t act = form == FORM_GELU ? tj_graph_gelu(g, gate, false)
                                     : tj_graph_silu(g, gate);
  tj_value_t y = form == FORM_SWAPPED ? tj_graph_mul(g, up, act)
                                      : tj_graph_mul(g, act, up);
  if (form == FORM_MLP) {
    tj_value_t wd = tj_graph_input(g, dt, 2, (int64_t[]){kFfn, kD}, "wd");
    y = tj_graph_add(g, x, tj_graph_matmul(g, y, wd));
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void check_form(tj_dtype_t dt, form_t form, tj_nvptx_arch_t arch,
                       bool candidates) {
  char what[96];
  snprintf(what, sizeof(what), "%s %s %s", tj_dtype_name(dt), kFormNames[form],
           tj_nvptx_arch_name(arch));
  tj_graph_t* g = build(dt, form);
  if (!g) return;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cuda.allow_tf32 = dt == TJ_DTYPE_F32;
  if (!candidates) o.autotune = TJ_AUTOTUNE_OFF;
  tj_cuda_offline_ptx_t pt;
  memset(&pt, 0, sizeof(pt));
  CHECK_OK(tj_cuda_compile_ptx(g, &o, arch, tj_allocator_system(), &pt));
  bool dual =
      arch == TJ_NVPTX_SM_90A && dt != TJ_DTYPE_F32 && form < FORM_TWO_A;
  // The MLP: rmsnorm, the dual GEMM, the down projection with the
  // residual in its epilogue.
  uint32_t want = (form == FORM_MLP ? 2 : 0) + (dual ? 1 : 2);
  if (pt.num_kernels != want || pt.num_host_steps)
    fprintf(stderr, "  %s: %u kernels (want %u), %u host steps\n", what,
            pt.num_kernels, want, pt.num_host_steps);
  CHECK_EQ_INT((int)want, (int)pt.num_kernels);
  CHECK_EQ_INT(0, pt.num_host_steps);
  // The dual kernel: one wgmma of 128 columns over both products'.
  if (pt.ptx && dual)
    tj_test_check_has(what, pt.ptx, "wgmma.mma_async.sync.aligned.m64n128k16",
                      true);
  if (arch == TJ_NVPTX_SM_90A) {
    char cands[128];
    snprintf(cands, sizeof(cands), "%s candidates", what);
    tj_test_ptxas_queue(g_ptxas, what, pt.ptx, false);
    tj_test_ptxas_queue(g_ptxas, cands, pt.variants_ptx, false);
  }
  printf("# %s: %u kernels, %u candidate kernels\n", what, pt.num_kernels,
         pt.num_variant_kernels);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &pt);
  tj_graph_destroy(g);
}

// Every form once, bf16 and f16 in turn (the dtype is one word of the
// wgmma; the sanitizer leg, tj_test_num_half_types, takes bf16 alone), so
// both dtypes take the dual form and a refused one. CI's legs compile
// the GEMM candidates (tj_test_candidates) of the first graph of each
// family alone: the dual kernel's (silu), sm_80's, two kernels' (two A)
// and f32's; every dual schedule in both dtypes is every_dual_schedule's.
TEST(graphs) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  size_t types = tj_test_num_half_types();
  for (int f = 0; f <= FORM_MIXED; ++f) {
    check_form(kTypes[(size_t)f % types], (form_t)f, TJ_NVPTX_SM_90A,
               tj_test_candidates(f == FORM_SILU || f == FORM_TWO_A));
    if (f == FORM_SILU) check_form(kTypes[0], (form_t)f, TJ_NVPTX_SM_80, true);
  }
  check_form(TJ_DTYPE_F32, FORM_SILU, TJ_NVPTX_SM_90A, true);
  tj_test_ptxas_wait();
}

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] && access(argv[1], X_OK) == 0) g_ptxas = argv[1];
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  RUN_TEST(verify_rejects_mismatched_b2);
  RUN_TEST(refused_schedules);
  RUN_TEST(launch_counts_tiles_of_c);
  RUN_TEST(every_dual_schedule);
  RUN_TEST(graphs);
  tj_context_destroy(g_ctx);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
  TEST_MAIN_END();
}
