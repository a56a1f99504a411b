// qfold (issue 17): weight-only quantized matmul on x86. matmul(x,
// dequantize(Wq, scale, zp)) over constant weights keeps the weights
// quantized: the GEMM reads their bytes and dequantizes them in registers
// (the small-M path's microkernels for M <= 16, the B packing above), and
// the graph's numbers equal the unfolded graph's (the reference
// interpreter's dequantize, then the product) within f32 reassociation.
// Each case is compiled at every ISA tier the host has, generic (symbolic
// M) and specialized, on odd K and N, int8 per output channel (i8, and u8
// with zero points) and int4 per group of 32, 64 and 128 along K (signed
// and unsigned, with and without zero points), given as [K, N] or as
// MatMulNBits gives them ([N, K] then transposed: quant_prepack relays
// them), with a bias and gelu epilogue; each executable must be one kernel
// (the dequantize is in the GEMM, not a kernel of its own) with no graph
// break. Then the OOM sweep of compile and run.

#include <stdlib.h>

#include "tests/unit/tier_ops_check.h"

typedef struct qcase_t {
  const char* what;
  int64_t K, N;
  int bits;         // 8 or 4
  bool is_signed;   // i8 / signed int4, else u8 / unsigned int4
  bool zp;          // zero points
  int64_t group;    // 0: per output channel
  bool transposed;  // weights given [N, K] and transposed (MatMulNBits)
} qcase_t;

static qcase_t g_case;
static uint8_t* g_q;
static float* g_s;
static uint8_t* g_z;
static float* g_bias;
static int64_t g_qdims[2], g_sdims[2];
static int32_t g_srank;

static uint64_t g_seed = 12345;
static uint32_t next_u32(void) {
  g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_seed >> 33);
}

// Random weights for |c|: q in the format's range, scales in [0.01, 0.05],
// zero points within the range.
static void make_weights(const qcase_t* c) {
  const int64_t K = c->K, N = c->N;
  const int64_t groups = c->group ? (K + c->group - 1) / c->group : 1;
  // Stored layout: [K, N] (or [N, K] transposed); int4 packs the last axis.
  int64_t rows = c->transposed ? N : K, cols = c->transposed ? K : N;
  int64_t qcols = c->bits == 4 ? (cols + 1) / 2 : cols;
  g_qdims[0] = rows;
  g_qdims[1] = qcols;
  g_q = calloc((size_t)(rows * qcols), 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t v = (uint8_t)next_u32();
      if (c->bits == 4) {
        v &= 15;
        g_q[r * qcols + j / 2] |= (uint8_t)(j & 1 ? v << 4 : v);
      } else {
        g_q[r * qcols + j] = v;
      }
    }
  }
  // Scale (and zero point) shape: [N] per channel; [groups, N] or, given
  // transposed, [N, groups].
  if (!c->group) {
    g_srank = 1;
    g_sdims[0] = N;
  } else {
    g_srank = 2;
    g_sdims[0] = c->transposed ? N : groups;
    g_sdims[1] = c->transposed ? groups : N;
  }
  int64_t ns = N * groups;
  g_s = malloc(sizeof(float) * (size_t)ns);
  g_z = malloc((size_t)ns);
  for (int64_t i = 0; i < ns; ++i) {
    g_s[i] = 0.01f + 0.04f * (float)(next_u32() % 1000) / 1000.0f;
    int64_t lo =
        c->bits == 4 ? (c->is_signed ? -8 : 0) : (c->is_signed ? -128 : 0);
    int64_t span = c->bits == 4 ? 16 : 256;
    g_z[i] = (uint8_t)(lo + (int64_t)(next_u32() % (uint32_t)span));
  }
  g_bias = malloc(sizeof(float) * (size_t)N);
  for (int64_t n = 0; n < N; ++n)
    g_bias[n] = (float)(next_u32() % 200) / 100.0f - 1.0f;
}

static void free_weights(void) {
  free(g_q);
  free(g_s);
  free(g_z);
  free(g_bias);
}

// gelu(x @ dequantize(Wq) + b), x [M, K] with M symbolic.
static tj_graph_t* build_case(tj_context_t* ctx) {
  const qcase_t* c = &g_case;
  tj_graph_t* g = new_graph(ctx, "qfold");
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){M, c->K}, "x");
  tj_dtype_t qd = c->bits == 8 && c->is_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
  tj_dtype_t zd = c->is_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
  tj_value_t q = tj_graph_constant(g, qd, 2, g_qdims, g_q,
                                   (size_t)(g_qdims[0] * g_qdims[1]));
  int64_t ns = g_srank == 1 ? g_sdims[0] : g_sdims[0] * g_sdims[1];
  tj_value_t s = tj_graph_constant(g, TJ_DTYPE_F32, g_srank, g_sdims, g_s,
                                   sizeof(float) * (size_t)ns);
  tj_value_t z =
      c->zp ? tj_graph_constant(g, zd, g_srank, g_sdims, g_z, (size_t)ns)
            : tj_value_none();
  tj_quant_attrs_t a = {.dtype = qd};
  if (c->bits == 4) {
    a.int4 = c->is_signed ? TJ_INT4_SIGNED : TJ_INT4_UNSIGNED;
    a.odd = ((c->transposed ? c->K : c->N) & 1) != 0;
  }
  if (c->group) {
    a.block_size = c->group;
    a.axis = c->transposed ? 1 : 0;
  } else {
    a.axis = c->transposed ? 0 : 1;
  }
  tj_value_t w = tj_graph_dequantize(g, q, s, z, &a);
  if (c->transposed) w = tj_graph_transpose(g, w, (int32_t[]){1, 0});
  tj_value_t b = tj_graph_constant(g, TJ_DTYPE_F32, 1, &c->N, g_bias,
                                   sizeof(float) * (size_t)c->N);
  tj_value_t y =
      tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), false);
  tj_graph_output(g, y, "y");
  return g;
}

// The executable of |c| at the host's tier is one kernel: the dequantize
// is read by the GEMM, not computed by a kernel of its own.
static void check_one_kernel(void) {
  tj_graph_t* g = build_case(g_ctx[0]);
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  if (st.num_kernels != 1) {
    fprintf(stderr, "  %s: %d kernels\n", g_case.what, st.num_kernels);
  }
  CHECK_EQ_INT(1, st.num_kernels);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

static void run_case(const qcase_t* c) {
  g_case = *c;
  make_weights(c);
  check_one_kernel();
  // M = 1, 4, 16: the in-place path; 17, 50: the packed path.
  static const int64_t kM[] = {1, 4, 16, 17, 50};
  for (size_t i = 0; i < sizeof(kM) / sizeof(kM[0]); ++i) {
    spec_t in = {TJ_DTYPE_F32, 2, {kM[i], c->K}, -1.0, 1.0};
    spec_t out = {TJ_DTYPE_F32, 2, {kM[i], c->N}, 0, 0};
    char what[128];
    snprintf(what, sizeof(what), "%s M=%lld", c->what, (long long)kM[i]);
    // f32 sums of K products (the reference adds in f64): an error that
    // grows with K; a wrong weight, scale or group is off by ~1e-2.
    double tol = 1e-6 * (double)c->K > 2e-5 ? 1e-6 * (double)c->K : 2e-5;
    check_ops(what, build_case, 1, &in, 1, &out, tol, NULL);
  }
  free_weights();
}

TEST(int8_per_channel) {
  run_case(&(qcase_t){"i8 per channel", 67, 45, 8, true, false, 0, false});
  run_case(&(qcase_t){"u8 per channel, zero points", 93, 70, 8, false, true, 0,
                      false});
  run_case(&(qcase_t){"i8 [N, K] transposed", 41, 33, 8, true, true, 0, true});
}

TEST(int4_per_group) {
  run_case(&(qcase_t){"int4 signed g32", 100, 37, 4, true, false, 32, false});
  run_case(
      &(qcase_t){"int4 unsigned g64 zp", 130, 48, 4, false, true, 64, false});
  run_case(
      &(qcase_t){"int4 signed g128 zp", 256, 65, 4, true, true, 128, false});
  // MatMulNBits' layout: [N, K] packed along K, scales [N, groups].
  run_case(
      &(qcase_t){"int4 unsigned g32 [N, K]", 96, 41, 4, false, true, 32, true});
  run_case(&(qcase_t){"int4 unsigned g64 [N, K] odd K", 131, 20, 4, false,
                      false, 64, true});
}

// K past the packed path's kc: the groups of a second K pass.
TEST(long_k_several_passes) {
  run_case(
      &(qcase_t){"int4 signed g32 K=1100", 1100, 40, 4, true, true, 32, false});
  run_case(
      &(qcase_t){"i8 per channel K=1030", 1030, 19, 8, true, false, 0, false});
}

// The fused scoreboard rows of gelu(x @ W + b) with W [K, N] as f32, bf16
// (a cast of bf16 constants), int8 per channel and int4 per group of 128:
// the weight bytes read fall 4x and 8x against f32 (less the scales' few
// bytes), 2x and 4x against bf16; activation bytes stay the same.
static int64_t weight_bytes(int bits, int64_t* act) {
  const int64_t K = 1024, N = 512;
  tj_graph_t* g = new_graph(g_ctx[0], "board");
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){M, K}, "x");
  size_t bytes = bits == 32   ? (size_t)(K * N) * 4
                 : bits == 16 ? (size_t)(K * N) * 2
                 : bits == 8  ? (size_t)(K * N)
                              : (size_t)(K * N / 2);
  void* data = calloc(bytes, 1);
  float* sc = calloc((size_t)N * (K / 128), sizeof(float));
  tj_value_t w;
  if (bits == 32) {
    w = tj_graph_constant(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, data, bytes);
  } else if (bits == 16) {
    w = tj_graph_cast(
        g,
        tj_graph_constant(g, TJ_DTYPE_BF16, 2, (int64_t[]){K, N}, data, bytes),
        TJ_DTYPE_F32);
  } else if (bits == 8) {
    tj_quant_attrs_t a = {.dtype = TJ_DTYPE_I8, .axis = 1};
    w = tj_graph_dequantize(
        g, tj_graph_constant(g, TJ_DTYPE_I8, 2, (int64_t[]){K, N}, data, bytes),
        tj_graph_constant(g, TJ_DTYPE_F32, 1, &N, sc, sizeof(float) * N),
        tj_value_none(), &a);
  } else {
    tj_quant_attrs_t a = {.dtype = TJ_DTYPE_U8,
                          .axis = 0,
                          .block_size = 128,
                          .int4 = TJ_INT4_SIGNED};
    w = tj_graph_dequantize(
        g,
        tj_graph_constant(g, TJ_DTYPE_U8, 2, (int64_t[]){K, N / 2}, data,
                          bytes),
        tj_graph_constant(g, TJ_DTYPE_F32, 2, (int64_t[]){K / 128, N}, sc,
                          sizeof(float) * (size_t)(N * (K / 128))),
        tj_value_none(), &a);
  }
  float bias[512] = {0};
  tj_value_t b =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, &N, bias, sizeof(float) * N);
  tj_graph_output(
      g, tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), false),
      "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_scoreboard_t sb;
  const char* names[1] = {"M"};
  const int64_t values[1] = {1};
  CHECK_OK(tj_graph_scoreboard(g, 1, names, values, &sb));
  const tj_scoreboard_row_t* r = &sb.rows[TJ_STAGE_MEMPLAN];
  *act = r->bytes_read + r->bytes_written - r->weight_bytes_read;
  printf(
      "# scoreboard M=1 w%d: %d kernels, weight bytes %lld, activation "
      "bytes %lld\n",
      bits, (int)r->kernels, (long long)r->weight_bytes_read, (long long)*act);
  // bf16 weights are widened by a cast kernel of their own (an f32 graph).
  CHECK_EQ_INT(bits == 16 ? 2 : 1, r->kernels);
  free(data);
  free(sc);
  tj_graph_destroy(g);
  return r->weight_bytes_read;
}

TEST(scoreboard_weight_bytes) {
  int64_t a32, a16, a8, a4;
  double f32 = (double)weight_bytes(32, &a32);
  double bf16 = (double)weight_bytes(16, &a16);
  double i8 = (double)weight_bytes(8, &a8);
  double i4 = (double)weight_bytes(4, &a4);
  printf(
      "# weight bytes: f32/int8 %.2fx, f32/int4 %.2fx, bf16/int8 %.2fx, "
      "bf16/int4 %.2fx\n",
      f32 / i8, f32 / i4, bf16 / i8, bf16 / i4);
  CHECK(f32 / i8 > 3.9);  // 4x less the per-channel scales
  CHECK(f32 / i4 > 7.4);  // 8x less the group scales (4.25 bits: 7.5x)
  CHECK(bf16 / i8 > 1.95);
  CHECK(bf16 / i4 > 3.7);
  CHECK_EQ_INT(a32, a8);  // activations: x read, y written
  CHECK_EQ_INT(a32, a4);
}

// Compile and run of an int4 case with the Nth allocation failing.
static tj_status_t compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "qoom", &g);
  tj_executable_t* exe = NULL;
  if (!s) {
    int64_t M = tj_graph_symbol(g, "M");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){M, 64}, "x");
    static uint8_t q[64 * 5];
    static float sc[2 * 9];
    for (int i = 0; i < 64 * 5; ++i) q[i] = (uint8_t)(i * 37);
    for (int i = 0; i < 18; ++i) sc[i] = 0.02f * (float)(i + 1);
    tj_value_t qv =
        tj_graph_constant(g, TJ_DTYPE_U8, 2, (int64_t[]){64, 5}, q, sizeof(q));
    tj_value_t sv = tj_graph_constant(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 9}, sc,
                                      sizeof(sc));
    tj_quant_attrs_t a = {.dtype = TJ_DTYPE_U8,
                          .block_size = 32,
                          .int4 = TJ_INT4_SIGNED,
                          .odd = true};
    tj_value_t w = tj_graph_dequantize(g, qv, sv, tj_value_none(), &a);
    tj_graph_output(g, tj_graph_relu(g, tj_graph_matmul(g, x, w)), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_X86;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float x[3 * 64], y[3 * 9];
    for (int i = 0; i < 3 * 64; ++i) x[i] = (float)(i % 7) * 0.1f;
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){3, 64});
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){3, 9});
    s = tj_executable_run(exe, &in, 1, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) { tj_test_oom_sweep("qfold compile and run", compile_run); }

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(int8_per_channel);
  RUN_TEST(int4_per_group);
  RUN_TEST(long_k_several_passes);
  RUN_TEST(scoreboard_weight_bytes);
  RUN_TEST(oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
