// ktrans (issues 13, 14, 17): the f16/bf16 GEMM whose B is an [N, K]
// weight read transposed (x @ w^T, PyTorch's Linear and so every exported
// model's linears: B contiguous along k, tj_kir_gemm_b_kmajor) on every
// CUDA tensor-core schedule, without a GPU.
//   - kernel IR level: each schedule (mma.sync bk32/bk64, the cp.async
//     wgmma tiles, drain, persistent, the TMA cooperative, pingpong and
//     256-row ones, TF32 on the TMA schedules) emits the K-major form (wgmma
//     with trans-b 0, ldmatrix without .trans for B) for rank-2 and batched
//     kernels of runtime and ragged constant sizes (not every schedule at
//     every shape and dtype: a covering design, every_schedule_kmajor), and
//     ptxas -arch=sm_90a assembles it with no wgmma performance note
//     (C7508/C7510/C7511/C7515), several ptxas runs at once;
//   - graph level: x @ transpose(w) (plain, with bias + gelu, a [B, T, K]
//     linear3d with a shared weight, a batched [2, N, K] weight, f32 with
//     allow_tf32) compiles for sm_90a and sm_80 with no host step, and its
//     autotuner candidates are those of x @ w (none refused, none missing).
// Usage: ktrans_ptx_test [PTXAS]; without PTXAS the PTX is made but not
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

//===--- kernel IR level ---===//

typedef enum shape_e {
  SHAPE_RUNTIME,  // [M, N], K all params
  SHAPE_RAGGED,   // constant M 200, N 136, K 72: no dim a tile multiple
  SHAPE_BATCHED,  // [2, M, N], a [N, K] weight per batch entry (params)
  SHAPE_SHARED,   // [3, M, N], one [N, K] weight for every batch entry
} shape_t;

static const char* const kShapeNames[] = {"runtime", "ragged", "batched",
                                          "shared"};

// cast(acc + bias) of |dt| (the GEMMs' f32 accumulator).
static uint32_t bias_epilogue(tj_kir_t* k, tj_dtype_t dt, uint32_t b) {
  uint32_t bias = tj_kir_load(k, b);
  if (dt == TJ_DTYPE_F32)
    return tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k), bias);
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k),
                             tj_kir_cast(k, TJ_DTYPE_F32, bias));
  return tj_kir_cast(k, dt, v);
}

// y = cast(acc + bias) with B read K-major: strides (k 1, n K).
static tj_kir_t* kmajor_gemm(tj_dtype_t dt, shape_t shape) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "ktrans", &k));
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
  bool batched = shape == SHAPE_BATCHED || shape == SHAPE_SHARED;
  if (batched) {
    tj_kir_ival_t mk = tj_kir_runtime(tj_kir_add_param(k, "MK"));
    tj_kir_ival_t nk = tj_kir_runtime(tj_kir_add_param(k, "NK"));
    tj_kir_ival_t mn = tj_kir_runtime(tj_kir_add_param(k, "MN"));
    tj_kir_ival_t dims[3] = {tj_kir_constant(shape == SHAPE_SHARED ? 3 : 2), m,
                             n};
    tj_kir_set_space(k, 3, dims);
    tj_kir_set_gemm(k, kk, &sched);
    tj_kir_ival_t sa[3] = {mk, kk, c1};
    tj_kir_ival_t sw[3] = {shape == SHAPE_SHARED ? c0 : nk, c1, kk};
    tj_kir_ival_t sb[3] = {c0, c0, c1}, sy[3] = {mn, n, c1};
    tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa);
    tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw);
    uint32_t b = tj_kir_add_buffer(k, "b", dt, TJ_KIR_INPUT, sb);
    uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sy);
    tj_kir_store(k, y, bias_epilogue(k, dt, b));
  } else {
    tj_kir_ival_t dims[2] = {m, n};
    tj_kir_set_space(k, 2, dims);
    tj_kir_set_gemm(k, kk, &sched);
    tj_kir_ival_t sa[2] = {kk, c1}, sw[2] = {c1, kk}, sb[2] = {c0, c1},
                  sy[2] = {n, c1};
    tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa);
    tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw);
    uint32_t b = tj_kir_add_buffer(k, "b", dt, TJ_KIR_INPUT, sb);
    uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sy);
    tj_kir_store(k, y, bias_epilogue(k, dt, b));
  }
  // f16/bf16 operands are the CUDA template's (the x86 one reads f32).
  k->allow_half_gemm = true;
  tj_status_t s = k->error ? tj_status_clone(k->error) : tj_kir_finalize(k);
  CHECK_OK(s);
  CHECK(tj_kir_gemm_b_kmajor(k));
  return k;
}

#define WGMMA(m, n, stages)                                                   \
  .gemm_kernel = TJ_NVPTX_GEMM_WGMMA, .gemm_tile_m = (m), .gemm_tile_n = (n), \
  .gemm_stages = (stages)
#define TMA(m, n, stages) WGMMA(m, n, stages), .gemm_tma = true

// Every f16/bf16 schedule: mma.sync, the cp.async wgmma tiles, the TMA
// cooperative, pingpong and two-row-block ones (the autotuner's
// candidates among them).
static const tj_nvptx_options_t kSchedules[] = {
    {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC,
     .gemm_tile_k = 32,
     .gemm_stages = 3},
    {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC,
     .gemm_tile_k = 64,
     .gemm_stages = 3},
    {WGMMA(128, 128, 3)},
    {WGMMA(128, 256, 4)},
    {WGMMA(64, 128, 4)},
    {WGMMA(64, 256, 4), .approx_math = true},
    {WGMMA(64, 64, 8)},
    {WGMMA(128, 64, 3)},
    {WGMMA(128, 128, 3), .gemm_wgmma_drain = true},
    {WGMMA(128, 256, 4), .gemm_persistent = true},
    {TMA(128, 128, 4), .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_persistent = true},
    {TMA(64, 256, 4), .gemm_persistent = true},
    {TMA(128, 256, 3)},
    {TMA(128, 64, 8), .gemm_persistent = true},
    {TMA(64, 128, 6), .gemm_persistent = true, .approx_math = true},
    {TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true},
    {TMA(128, 64, 6), .gemm_pingpong = true, .gemm_persistent = true},
    {TMA(256, 128, 3), .gemm_persistent = true},
    {TMA(256, 64, 4)},
    // The TMA store epilogue (issue 13, hopper8), on rank-2 kernels.
    {TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true,
     .gemm_tma_store = true},
    {TMA(128, 256, 3), .gemm_persistent = true, .gemm_tma_store = true},
};

// f32 on TF32 tensor cores (allow_tf32): the TMA schedules it has.
static const tj_nvptx_options_t kTf32[] = {
    {TMA(128, 128, 4), .gemm_tf32 = true, .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_tf32 = true, .gemm_persistent = true},
    {TMA(64, 256, 4), .gemm_tf32 = true, .gemm_persistent = true},
    {TMA(128, 256, 3), .gemm_tf32 = true},
    {TMA(64, 128, 6), .gemm_tf32 = true, .gemm_persistent = true},
};

static void check_schedule(tj_dtype_t dt, shape_t shape,
                           const tj_nvptx_options_t* o, tj_nvptx_arch_t arch) {
  tj_kir_t* k = kmajor_gemm(dt, shape);
  if (!k) return;
  char what[160], sched[96];
  tj_test_describe_schedule(o, sched, sizeof(sched));
  snprintf(what, sizeof(what), "%s %s %s %s", tj_dtype_name(dt),
           kShapeNames[shape], sched, tj_nvptx_arch_name(arch));
  tj_nvptx_kernel_t info;
  memset(&info, 0, sizeof(info));
  tj_status_t s = NULL;
  char* ptx = tj_test_emit_ptx(k, o, arch, "ktrans", &info, &s);
  // Every schedule takes every shape: a refusal is a bug. The TMA ones
  // load a batched operand in 3-D boxes (its rank-3 tensor map) and one
  // without a batch in 2-D ones: x is batched in both batched shapes, w
  // in SHAPE_BATCHED only.
  bool box3 = shape >= SHAPE_BATCHED;
  bool box2 = shape < SHAPE_BATCHED || shape == SHAPE_SHARED;
  if (s) fprintf(stderr, "  %s: refused\n", what);
  CHECK_OK(s);
  if (!ptx) {
    tj_kir_destroy(k);
    return;
  }
  CHECK(info.tensor_cores);
  if (o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC) {
    // Both operands K-major in shared memory: no transposing ldmatrix.
    tj_test_check_has(what, ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                      true);
    tj_test_check_has(what, ptx, ".trans", false);
    tj_test_check_has(what, ptx, "mma.sync.aligned.m16n8k16.row.col.f32", true);
  } else if (dt == TJ_DTYPE_F32) {
    tj_test_check_has(what, ptx, "k8.f32.tf32.tf32", true);
    tj_test_check_has(what, ptx, "cp.async.bulk.tensor.2d", box2);
    tj_test_check_has(what, ptx, "cp.async.bulk.tensor.3d", box3);
  } else {
    // wgmma's operands: scale-d p, scale-a/b 1, trans-a 0, trans-b 0.
    tj_test_check_has(what, ptx, "p, 1, 1, 0, 0;", true);
    tj_test_check_has(what, ptx, "p, 1, 1, 0, 1;", false);
    if (o->gemm_tma) {
      tj_test_check_has(what, ptx, "cp.async.bulk.tensor.2d", box2);
      tj_test_check_has(what, ptx, "cp.async.bulk.tensor.3d", box3);
      tj_test_check_has(what, ptx, "cp.async.cg", false);
      // The output through TMA stores where the kernel is rank 2.
      tj_test_check_has(what, ptx,
                        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                        o->gemm_tma_store && !box3);
    } else {
      tj_test_check_has(what, ptx, "cp.async.cg.shared.global", true);
    }
  }
  // ptxas -arch=sm_90a in the background (tj_test_ptxas_queue). As for an
  // N-major B (nvptx_ptxas_test): the cooperative TMA tiles keep their
  // accumulators in registers.
  if (arch == TJ_NVPTX_SM_90A)
    tj_test_ptxas_queue(g_ptxas, what, ptx,
                        o->gemm_tma && info.tile_m >= 128 &&
                            !o->gemm_pingpong && dt != TJ_DTYPE_F32);
  printf("# %s: %zu bytes of PTX\n", what, strlen(ptx));
  tj_free_string(tj_allocator_system(), ptx);
  tj_kir_destroy(k);
}

// The cross product of dtype, shape and schedule, by a covering design
// (tj_test_covers): bf16 runs every schedule at two shapes, one rank-2 and
// one batched (runtime and batched, or ragged and shared, alternating down
// the table), f16 every schedule at one shape (the dtype is one word of the
// mma); so every schedule meets a 2-D and a 3-D tensor map, and every
// shape every family of schedules (mma.sync, cp.async wgmma, TMA,
// pingpong, the TMA store, 256 rows). sm_80 takes every shape.
TEST(every_schedule_kmajor) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t t = 0; t < tj_test_num_half_types(); ++t) {
    for (int s = 0; s <= SHAPE_SHARED; ++s) {
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kSchedules); ++i) {
        if (tj_test_covers(i, s, SHAPE_SHARED + 1, t ? 1 : tj_test_ways(2)))
          check_schedule(kTypes[t], (shape_t)s, &kSchedules[i],
                         TJ_NVPTX_SM_90A);
      }
      // sm_80: mma.sync, whatever is asked of the default.
      check_schedule(kTypes[t], (shape_t)s, &kSchedules[0], TJ_NVPTX_SM_80);
    }
  }
  tj_test_ptxas_wait();
}

// TF32: each schedule at a rank-2 and a batched shape, as bf16 above.
TEST(tf32_kmajor) {
  for (int s = 0; s <= SHAPE_SHARED; ++s) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kTf32); ++i) {
      if (tj_test_covers(i, s, SHAPE_SHARED + 1, tj_test_ways(2)))
        check_schedule(TJ_DTYPE_F32, (shape_t)s, &kTf32[i], TJ_NVPTX_SM_90A);
    }
  }
  tj_test_ptxas_wait();
}

// A B contiguous along neither k nor n still has no tensor-core form: the
// emitter says so (the group then runs elsewhere), naming the kernel.
TEST(b_strided_both_ways_is_refused) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "gemm_ss", &k));
  tj_kir_ival_t d2[2] = {tj_kir_constant(64), tj_kir_constant(64)};
  tj_kir_set_space(k, 2, d2);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, tj_kir_constant(64), &sched);
  tj_kir_ival_t sa[2] = {tj_kir_constant(64), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(2), tj_kir_constant(128)};
  tj_kir_add_buffer(k, "a", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sb);
  uint32_t o = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sa);
  tj_kir_store(k, o, tj_kir_acc(k));
  CHECK(!tj_kir_gemm_b_kmajor(k));
  tj_nvptx_kernel_t info;
  tj_status_t s = NULL;
  char* ptx = tj_test_emit_ptx(k, NULL, TJ_NVPTX_SM_90A, "ktrans", &info, &s);
  CHECK(ptx == NULL);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "@gemm_ss", tj_status_clone(s));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "B along n or k", s);
  tj_kir_destroy(k);
}

// The launch checks a K-major B's 16-byte rows along n (its k is
// contiguous), and not its k stride of 1.
TEST(launch_checks_kmajor_rows) {
  tj_kir_t* k = kmajor_gemm(TJ_DTYPE_BF16, SHAPE_RUNTIME);
  if (!k) return;
  tj_nvptx_kernel_t info;
  tj_status_t s = NULL;
  char* ptx = tj_test_emit_ptx(k, NULL, TJ_NVPTX_SM_90A, "ktrans", &info, &s);
  CHECK_OK(s);
  tj_free_string(tj_allocator_system(), ptx);
  tj_nvptx_launch_t launch;
  int64_t mnk[3] = {1000, 304, 64};
  CHECK_OK(tj_nvptx_launch_config(k, &info, mnk, 132, &launch));
  CHECK_EQ_INT(8 * 3, launch.grid[0]);
  int64_t odd_k[3] = {64, 64, 60};  // rows of 60 bf16 in A and B
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "multiples of 8",
               tj_nvptx_launch_config(k, &info, odd_k, 132, &launch));
  tj_kir_destroy(k);
}

//===--- graph level ---===//

typedef enum form_e {
  FORM_PLAIN,    // y = x[M, K] @ transpose(w[N, K]), M symbolic
  FORM_GELU,     // y = gelu(x @ w^T + b)
  FORM_LINEAR3,  // y = x[B, T, K] @ w^T + b: one rank-2 GEMM of B*T rows
  FORM_BATCHED,  // y = x[2, M, K] @ transpose(w[2, N, K], (0, 2, 1))
  FORM_HEADS,    // y = x[2, 3, M, K] @ transpose(w[2, 3, N, K]): q k^T
} form_t;

static const char* const kFormNames[] = {"plain", "gelu_bias", "linear3d",
                                         "batched", "heads"};

enum { kK = 192, kN = 136 };

// The graph of |form|; |transposed| false gives the same with w [K, N]
// (N-major, the layout the kernels took before).
static tj_graph_t* build(tj_dtype_t dt, form_t form, bool transposed) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "ktrans", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  bool batched = form == FORM_BATCHED;
  tj_value_t w;
  if (form == FORM_HEADS) {
    // Attention's scores, q @ k^T: k's head dim is B's k, contiguous.
    w = transposed ? tj_graph_input(g, dt, 4, (int64_t[]){2, 3, kN, kK}, "w")
                   : tj_graph_input(g, dt, 4, (int64_t[]){2, 3, kK, kN}, "w");
    if (transposed) w = tj_graph_transpose(g, w, (int32_t[]){0, 1, 3, 2});
  } else if (transposed) {
    w = batched ? tj_graph_input(g, dt, 3, (int64_t[]){2, kN, kK}, "w")
                : tj_graph_input(g, dt, 2, (int64_t[]){kN, kK}, "w");
    w = batched ? tj_graph_transpose(g, w, (int32_t[]){0, 2, 1})
                : tj_graph_transpose(g, w, (int32_t[]){1, 0});
  } else {
    w = batched ? tj_graph_input(g, dt, 3, (int64_t[]){2, kK, kN}, "w")
                : tj_graph_input(g, dt, 2, (int64_t[]){kK, kN}, "w");
  }
  tj_value_t x;
  if (form == FORM_HEADS) {
    x = tj_graph_input(g, dt, 4, (int64_t[]){2, 3, B, kK}, "x");
  } else if (form == FORM_LINEAR3) {
    x = tj_graph_input(g, dt, 3, (int64_t[]){B, 24, kK}, "x");
  } else if (batched) {
    x = tj_graph_input(g, dt, 3, (int64_t[]){2, B, kK}, "x");
  } else {
    x = tj_graph_input(g, dt, 2, (int64_t[]){B, kK}, "x");
  }
  tj_value_t y;
  if (form == FORM_GELU || form == FORM_LINEAR3) {
    tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){kN}, "b");
    y = tj_graph_linear(g, x, w, b);
    if (form == FORM_GELU) y = tj_graph_gelu(g, y, false);
  } else {
    y = tj_graph_matmul(g, x, w);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void compile_ptx(tj_graph_t* g, bool tf32, tj_nvptx_arch_t arch,
                        bool candidates, tj_cuda_offline_ptx_t* ptx) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cuda.allow_tf32 = tf32;
  if (!candidates) o.autotune = TJ_AUTOTUNE_OFF;
  memset(ptx, 0, sizeof(*ptx));
  CHECK_OK(tj_cuda_compile_ptx(g, &o, arch, tj_allocator_system(), ptx));
}

static void check_form(tj_dtype_t dt, form_t form, tj_nvptx_arch_t arch,
                       bool candidates) {
  bool tf32 = dt == TJ_DTYPE_F32;
  char what[96];
  snprintf(what, sizeof(what), "%s %s%s %s", tj_dtype_name(dt),
           kFormNames[form], tf32 ? " allow_tf32" : "",
           tj_nvptx_arch_name(arch));
  tj_graph_t* gt = build(dt, form, true);
  tj_graph_t* gn = build(dt, form, false);
  if (!gt || !gn) {
    tj_graph_destroy(gt);
    tj_graph_destroy(gn);
    return;
  }
  tj_cuda_offline_ptx_t pt, pn;
  compile_ptx(gt, tf32, arch, candidates, &pt);
  compile_ptx(gn, tf32, arch, candidates, &pn);
  // One kernel, nothing on the host: the transpose is the GEMM's view of w.
  if (pt.num_host_steps || pt.num_kernels != 1)
    fprintf(stderr, "  %s: %u kernels, %u host steps\n", what, pt.num_kernels,
            pt.num_host_steps);
  CHECK_EQ_INT(0, pt.num_host_steps);
  CHECK_EQ_INT(1, pt.num_kernels);
  // The same candidates as the N-major GEMM's: none dropped because it
  // would refuse the layout (cuBLASLt's epilogue kernel included).
  if (pt.num_variant_kernels != pn.num_variant_kernels)
    fprintf(stderr, "  %s: %u candidate kernels, x @ w has %u\n", what,
            pt.num_variant_kernels, pn.num_variant_kernels);
  CHECK_EQ_INT((int)pn.num_variant_kernels, (int)pt.num_variant_kernels);
  if (pt.ptx && arch == TJ_NVPTX_SM_90A && !tf32)
    tj_test_check_has(what, pt.ptx, "p, 1, 1, 0, 0;", true);
  if (pt.ptx && arch == TJ_NVPTX_SM_80)
    tj_test_check_has(what, pt.ptx, "ldmatrix.sync.aligned.m8n8.x4.trans",
                      false);
  // Rank-2 forms have the TMA candidates (linear3d folds into one).
  if (pt.variants_ptx && arch == TJ_NVPTX_SM_90A && form < FORM_BATCHED)
    tj_test_check_has(what, pt.variants_ptx, "cp.async.bulk.tensor.2d", true);
  if (pt.variants_ptx && tf32)
    tj_test_check_has(what, pt.variants_ptx, "tf32.tf32", true);
  if (arch == TJ_NVPTX_SM_90A) {
    char cands[128];
    snprintf(cands, sizeof(cands), "%s candidates", what);
    tj_test_ptxas_queue(g_ptxas, what, pt.ptx, false);
    tj_test_ptxas_queue(g_ptxas, cands, pt.variants_ptx, false);
  }
  printf("# %s: %u kernel, %u candidate kernels\n", what, pt.num_kernels,
         pt.num_variant_kernels);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &pt);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &pn);
  tj_graph_destroy(gt);
  tj_graph_destroy(gn);
}

// Form x arch x dtype by a covering design: every form on both archs,
// bf16 on one and f16 on the other (by the parity of form + arch), so that
// every pair of form, arch and dtype is compiled (each compile is the
// graph twice, with every candidate of the arch). The sanitizer leg
// (tj_test_num_half_types) takes bf16 for both; CI's legs compile the
// candidates (tj_test_candidates) of the plain and batched forms and of
// f32 with gelu alone: every K-major schedule in both dtypes is
// every_schedule_kmajor's and tf32_kmajor's.
TEST(graphs_run_on_the_gpu) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const tj_nvptx_arch_t kArchs[] = {TJ_NVPTX_SM_90A, TJ_NVPTX_SM_80};
  size_t types = tj_test_num_half_types();
  for (int f = 0; f <= FORM_HEADS; ++f) {
    for (size_t a = 0; a < TJ_ARRAY_SIZE(kArchs); ++a)
      check_form(kTypes[((size_t)f + a) % types], (form_t)f, kArchs[a],
                 tj_test_candidates(f == FORM_PLAIN || f == FORM_BATCHED));
  }
  check_form(TJ_DTYPE_F32, FORM_GELU, TJ_NVPTX_SM_90A, true);
  check_form(TJ_DTYPE_F32, FORM_LINEAR3, TJ_NVPTX_SM_90A,
             tj_test_candidates(false));
  tj_test_ptxas_wait();
}

// Half matmuls whose rows are not whole 16-byte vectors (K or a row-major
// B's N not a multiple of 8; the ONNX node suites' einsum and attention
// of K 3-6) are decompose's reductions in f32 on CUDA, not GEMMs the
// launch refuses and the host runs; an x @ w^T of odd N (a transposed B,
// read along k) and aligned shapes stay GEMMs on the tensor cores.
static void check_half_matmul(tj_dtype_t dt, int64_t m, int64_t k, int64_t n,
                              bool transposed_b, bool gemm) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "half_matmul", &g));
  if (!g) return;
  tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){5, m, k}, "x");
  tj_value_t w = transposed_b
                     ? tj_graph_transpose(
                           g, tj_graph_input(g, dt, 2, (int64_t[]){n, k}, "w"),
                           (int32_t[]){1, 0})
                     : tj_graph_input(g, dt, 3, (int64_t[]){5, k, n}, "w");
  tj_graph_output(g, tj_graph_matmul(g, x, w), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_cuda_offline_ptx_t ptx;
  compile_ptx(g, false, TJ_NVPTX_SM_90A, false, &ptx);
  char what[96];
  snprintf(what, sizeof(what), "%s [5,%lld,%lld] @ %s", tj_dtype_name(dt),
           (long long)m, (long long)k, transposed_b ? "w^T" : "w");
  if (ptx.num_host_steps != 0)
    fprintf(stderr, "  %s: %u host steps\n", what, ptx.num_host_steps);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  bool mma =
      ptx.ptx && (strstr(ptx.ptx, "mma.sync") || strstr(ptx.ptx, "wgmma"));
  if (mma != gemm)
    fprintf(stderr, "  %s: tensor-core MMA %s\n", what,
            mma ? "found" : "missing");
  CHECK_EQ_INT(gemm, mma);
  if (ptx.ptx) tj_test_assemble_ptx(g_ptxas, what, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &ptx);
  tj_graph_destroy(g);
}

TEST(misaligned_half_matmul_is_a_reduction) {
  const tj_dtype_t dts[2] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (int i = 0; i < 2; ++i) {
    check_half_matmul(dts[i], 2, 3, 4, false, false);     // K 3
    check_half_matmul(dts[i], 4, 6, 6, false, false);     // K 6, N 6
    check_half_matmul(dts[i], 64, 64, 12, false, false);  // N 12
    check_half_matmul(dts[i], 64, 64, 12, true, true);    // w^T: K-major
    check_half_matmul(dts[i], 64, 64, 64, false, true);   // aligned
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] && access(argv[1], X_OK) == 0) g_ptxas = argv[1];
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  RUN_TEST(b_strided_both_ways_is_refused);
  RUN_TEST(launch_checks_kmajor_rows);
  RUN_TEST(every_schedule_kmajor);
  RUN_TEST(tf32_kmajor);
  RUN_TEST(graphs_run_on_the_gpu);
  RUN_TEST(misaligned_half_matmul_is_a_reduction);
  tj_context_destroy(g_ctx);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
  TEST_MAIN_END();
}
