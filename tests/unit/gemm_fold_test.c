// linear3d (issues 13 and 14): a matmul whose B is one matrix for every
// batch entry (rank 2, or broadcast over every batch dim) and whose A's
// batch dims run contiguously into its rows lowers to ONE rank-2 GEMM,
// [prod(batch) * M, K] @ [K, N], its epilogue (bias, gelu, silu, residual,
// casts) fused in the same kernel (kir/lower_index.c, gemm_joins_m). Only
// a rank-2 GEMM takes cuBLASLt, the TMA schedules and split-K on CUDA; the
// transformer blocks' linears x[B, T, d] @ w[d, n] were batched GEMMs
// before. Checked here: the lowered kernel's space (rank 2, m = B*T a
// param of the symbols, so one kernel serves every B; batched B and a
// transposed A keep their batch dim), no leak when an allocation of the
// lowering fails, and the numbers at every x86 tier against the reference
// for rank-3 and rank-4 A, f32 and bf16, symbolic and odd batches, one
// executable run at several B with no recompile. The CUDA candidates on
// these GEMMs: tests/unit/blocks_ptx_test.c (offline) and
// tests/cuda/cuda_gemm_fold_test.c (on the GPU).

#include "backends/reference/reference_eval.h"
#include "kir/lower.h"
#include "lib/passes/pass.h"
#include "tests/unit/tier_ops_check.h"

//===--- the lowered space ---===//

// y = gelu(x @ w + b) + r with x [B, 128, 64]: m is B*128.
static const char kLinear3[] =
    "func @linear3[B](%x: f32[B,128,64], %w: f32[64,96], %b: f32[96], "
    "%r: f32[B,128,96]) {\n"
    "  %4 = linear %x, %w, %b : f32[B,128,96]\n"
    "  %5 = gelu %4 {approximate} : f32[B,128,96]\n"
    "  %6 = add %5, %r : f32[B,128,96]\n"
    "  return %6 as \"y\"\n"
    "}\n";

// Rank 4 A, B of rank 3 broadcast over the batch: m is 2*3*5 = 30.
static const char kRank4[] =
    "func @rank4(%x: f32[2,3,5,64], %w: f32[1,64,32]) {\n"
    "  %2 = matmul %x, %w : f32[2,3,5,32]\n"
    "  %3 = relu %2 : f32[2,3,5,32]\n"
    "  return %3 as \"y\"\n"
    "}\n";

// B differs per batch entry: a batched GEMM.
static const char kBatchedB[] =
    "func @batched_b(%x: f32[4,5,64], %w: f32[4,64,32]) {\n"
    "  %2 = matmul %x, %w : f32[4,5,32]\n"
    "  return %2 as \"y\"\n"
    "}\n";

// A's batch dim is not contiguous with its rows: a batched GEMM.
static const char kTransposedA[] =
    "func @a_transposed(%x: f32[5,4,64], %w: f32[64,32]) {\n"
    "  %2 = transpose %x {perm=[1,0,2]} : f32[4,5,64]\n"
    "  %3 = matmul %2, %w : f32[4,5,32]\n"
    "  return %3 as \"y\"\n"
    "}\n";

static void make_plan(tj_context_t* context, const char* text,
                      tj_plan_t* plan) {
  tj_graph_t* graph = NULL;
  CHECK_OK(tj_graph_parse(context, text, strlen(text), "test", &graph));
  tj_plan_initialize(plan, graph);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, context);
  ctx.evaluate = tj_pass_reference_evaluator;
  CHECK_OK(tj_pipeline_default(&ctx, plan));
  CHECK(plan->fusion != NULL && plan->memplan != NULL);
}

// The one matmul group of |plan|.
static uint32_t gemm_group(const tj_plan_t* plan) {
  for (uint32_t q = 0; q < plan->fusion->num_groups; ++q) {
    if (plan->fusion->groups[q].kind == TJ_GROUP_MATMUL) return q;
  }
  CHECK(false);
  return 0;
}

// Lowers |text|'s matmul group (generic, or specialized to |sym|) and
// checks its GEMM's rank and m (a constant, or |m_text| of the symbols).
static void check_space(const char* text, const int64_t* sym, int32_t rank,
                        int64_t m, const char* m_text) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, text, &plan);
  tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
  uint32_t made = 0;
  CHECK_OK(tj_lower_group(plan.graph, plan.fusion, plan.memplan,
                          gemm_group(&plan), sym, tj_context_allocator(context),
                          "k", out, TJ_LOWER_MAX_GROUP_KERNELS, &made));
  CHECK_EQ_INT(1, made);
  if (made == 1) {
    const tj_kir_t* k = out[0].kernel;
    CHECK_EQ_INT(TJ_KIR_GEMM, k->kind);
    CHECK_EQ_INT(rank, k->rank);
    tj_kir_ival_t dm = k->dims[k->rank - 2];
    if (m_text) {
      CHECK(dm.param >= 0);
      if (dm.param >= 0) {
        char buf[64];
        tj_lowered_kernel_format_dim(&out[0], out[0].param_dims[dm.param], buf,
                                     sizeof(buf));
        CHECK_STREQ(m_text, buf);
        // The param evaluates per run: B = 3 gives 384 rows.
        int64_t three[1] = {3}, scalars[TJ_KIR_MAX_PARAMS];
        CHECK_OK(
            tj_lowered_kernel_scalars(&out[0], plan.graph, three, scalars));
        CHECK_EQ_INT(3 * m, scalars[dm.param]);
      }
    } else {
      CHECK(tj_kir_ival_is_const(dm, m));
    }
    tj_lowered_kernel_deinitialize(&out[0]);
  }
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

TEST(linears_lower_to_rank2_gemms) {
  check_space(kLinear3, NULL, 2, 128, "128*B");
  int64_t five[1] = {5};
  check_space(kLinear3, five, 2, 640, NULL);
  check_space(kRank4, NULL, 2, 30, NULL);
  check_space(kBatchedB, NULL, 3, 5, NULL);
  check_space(kTransposedA, NULL, 3, 5, NULL);
}

// Every allocation of the folded lowering fails in turn: OUT_OF_MEMORY,
// nothing left in |out|, nothing leaked.
TEST(oom_sweep_folded_lowering) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, kLinear3, &plan);
  uint32_t q = gemm_group(&plan);
  long points = 0;
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
    uint32_t made = 7;
    tj_status_t s = tj_lower_group(plan.graph, plan.fusion, plan.memplan, q,
                                   NULL, tj_test_allocator_get(&t), "k", out,
                                   TJ_LOWER_MAX_GROUP_KERNELS, &made);
    if (!s) {
      CHECK_EQ_INT(1, made);
      CHECK_EQ_INT(2, out[0].kernel->rank);
      tj_lowered_kernel_deinitialize(&out[0]);
    }
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (!s) break;
    CHECK_EQ_INT(0, made);
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    ++points;
  }
  printf("# oom sweep (folded lowering): %ld failing allocation points\n",
         points);
  CHECK(points > 5);
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

//===--- numbers at every tier ---===//

enum { T = 7, K = 33, N = 40 };

// gelu(x @ w + b) + r, x [B, 7, 33] of |dt| (B symbolic), w [33, 40].
static tj_graph_t* build_linear3(tj_context_t* ctx, tj_dtype_t dt) {
  tj_graph_t* g = new_graph(ctx, "linear3");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){B, T, K}, "x");
  tj_value_t w = tj_graph_input(g, dt, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){N}, "b");
  tj_value_t r = tj_graph_input(g, dt, 3, (int64_t[]){B, T, N}, "r");
  tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false);
  tj_graph_output(g, tj_graph_add(g, y, r), "y");
  return g;
}
static tj_graph_t* build_linear3_f32(tj_context_t* ctx) {
  return build_linear3(ctx, TJ_DTYPE_F32);
}
static tj_graph_t* build_linear3_bf16(tj_context_t* ctx) {
  return build_linear3(ctx, TJ_DTYPE_BF16);
}

// silu(x @ w + b) as f32, x [B, 3, 5, 33] bf16 (B symbolic), w [1, 33, 40]
// broadcast over both batch dims.
static tj_graph_t* build_rank4(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "rank4");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_BF16, 4, (int64_t[]){B, 3, 5, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_BF16, 3, (int64_t[]){1, K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_BF16, 1, (int64_t[]){N}, "b");
  tj_value_t y = tj_graph_add(g, tj_graph_matmul(g, x, w), b);
  tj_graph_output(g, tj_graph_cast(g, tj_graph_silu(g, y), TJ_DTYPE_F32), "y");
  return g;
}

// The same rank-4 product in f32 with a residual of rank 4 and a bias.
static tj_graph_t* build_rank4_f32(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "rank4_f32");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 3, 5, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_value_t r =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 3, 5, N}, "r");
  tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
  tj_graph_output(g, tj_graph_add(g, r, y), "y");
  return g;
}

// Not folded (A's batch dim is not contiguous with its rows): the same
// numbers through the batched GEMM.
static tj_graph_t* build_transposed(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "transposed");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){T, B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_value_t xt = tj_graph_transpose(g, x, (int32_t[]){1, 0, 2});
  tj_graph_output(g, tj_graph_relu(g, tj_graph_linear(g, xt, w, b)), "y");
  return g;
}

static spec_t f(tj_dtype_t dt, int32_t rank, const int64_t* dims) {
  spec_t s = {.dtype = dt, .rank = rank, .lo = -1, .hi = 1};
  memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
  return s;
}

TEST(numbers_rank3_every_tier) {
  static const int64_t kBatch[] = {1, 3, 8};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBatch); ++i) {
    int64_t b = kBatch[i];
    for (int half = 0; half < 2; ++half) {
      tj_dtype_t dt = half ? TJ_DTYPE_BF16 : TJ_DTYPE_F32;
      spec_t in[4] = {f(dt, 3, (int64_t[]){b, T, K}),
                      f(dt, 2, (int64_t[]){K, N}), f(dt, 1, (int64_t[]){N}),
                      f(dt, 3, (int64_t[]){b, T, N})};
      spec_t out = f(dt, 3, (int64_t[]){b, T, N});
      // f32: a dot of 33 terms in [-1, 1]; bf16: the result's rounding
      // (2^-8) and the reference's per-op rounding of the epilogue.
      check_ops(half ? "linear3 bf16" : "linear3 f32",
                half ? build_linear3_bf16 : build_linear3_f32, 4, in, 1, &out,
                half ? 3e-2 : 1e-5, NULL);
    }
  }
}

TEST(numbers_rank4_every_tier) {
  static const int64_t kBatch[] = {1, 2, 5};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBatch); ++i) {
    int64_t b = kBatch[i];
    spec_t in[3] = {f(TJ_DTYPE_BF16, 4, (int64_t[]){b, 3, 5, K}),
                    f(TJ_DTYPE_BF16, 3, (int64_t[]){1, K, N}),
                    f(TJ_DTYPE_BF16, 1, (int64_t[]){N})};
    spec_t out = f(TJ_DTYPE_F32, 4, (int64_t[]){b, 3, 5, N});
    check_ops("rank4 bf16 silu", build_rank4, 3, in, 1, &out, 3e-2, NULL);
    spec_t in32[4] = {f(TJ_DTYPE_F32, 4, (int64_t[]){b, 3, 5, K}),
                      f(TJ_DTYPE_F32, 2, (int64_t[]){K, N}),
                      f(TJ_DTYPE_F32, 1, (int64_t[]){N}),
                      f(TJ_DTYPE_F32, 4, (int64_t[]){b, 3, 5, N})};
    spec_t out32 = f(TJ_DTYPE_F32, 4, (int64_t[]){b, 3, 5, N});
    check_ops("rank4 f32 gelu residual", build_rank4_f32, 4, in32, 1, &out32,
              1e-5, NULL);
    spec_t int_[3] = {f(TJ_DTYPE_F32, 3, (int64_t[]){T, b, K}),
                      f(TJ_DTYPE_F32, 2, (int64_t[]){K, N}),
                      f(TJ_DTYPE_F32, 1, (int64_t[]){N})};
    spec_t outt = f(TJ_DTYPE_F32, 3, (int64_t[]){b, T, N});
    check_ops("transposed A", build_transposed, 3, int_, 1, &outt, 1e-5, NULL);
  }
}

// One generic executable per tier serves every B (m = B*7 a param): odd
// batches, 1 and a larger one, each against the reference, with no
// recompile.
TEST(one_executable_every_batch) {
  static const int64_t kBatch[] = {3, 1, 16, 5};
  for (int32_t t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = build_linear3_f32(g_ctx[t]);
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t o = tj_test_x86_options(2);
    o.specialize = TJ_SPECIALIZE_NEVER;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    for (size_t i = 0; exe && i < TJ_ARRAY_SIZE(kBatch); ++i) {
      int64_t b = kBatch[i];
      spec_t in[4] = {f(TJ_DTYPE_F32, 3, (int64_t[]){b, T, K}),
                      f(TJ_DTYPE_F32, 2, (int64_t[]){K, N}),
                      f(TJ_DTYPE_F32, 1, (int64_t[]){N}),
                      f(TJ_DTYPE_F32, 3, (int64_t[]){b, T, N})};
      spec_t out = f(TJ_DTYPE_F32, 3, (int64_t[]){b, T, N});
      void* data[4];
      tj_tensor_t in_t[4];
      for (int j = 0; j < 4; ++j) {
        data[j] = make_data(&in[j]);
        in_t[j] = tj_tensor_make(data[j], in[j].dtype, in[j].rank, in[j].dims);
      }
      size_t bytes = (size_t)numel(&out) * sizeof(float);
      void* want = calloc(1, bytes);
      void* got = calloc(1, bytes);
      tj_tensor_t want_t = tj_tensor_make(want, out.dtype, 3, out.dims);
      tj_tensor_t got_t = tj_tensor_make(got, out.dtype, 3, out.dims);
      CHECK_OK(tj_reference_run(g, in_t, 4, &want_t, 1));
      CHECK_OK(tj_executable_run(exe, in_t, 4, &got_t, 1));
      bool ok = same("one executable", &out, got, want, 1e-5);
      if (!ok) {
        fprintf(stderr, "  B = %lld at tier %s\n", (long long)b,
                kIsa[t] ? kIsa[t] : "host");
      }
      CHECK(ok);
      for (int j = 0; j < 4; ++j) free(data[j]);
      free(want);
      free(got);
    }
    if (exe) {
      tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
      tj_executable_stats(exe, &stats);
      CHECK_EQ_INT(0, stats.recompiles);
      CHECK_EQ_INT(0, stats.num_graph_breaks);
      CHECK_EQ_INT((int64_t)TJ_ARRAY_SIZE(kBatch), stats.runs);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(linears_lower_to_rank2_gemms);
  RUN_TEST(oom_sweep_folded_lowering);
  RUN_TEST(numbers_rank3_every_tier);
  RUN_TEST(numbers_rank4_every_tier);
  RUN_TEST(one_executable_every_batch);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
