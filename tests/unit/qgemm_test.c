// The integer GEMM (qgemm, issue 17): matmul_i32 (i8/u8 operands into i32)
// and matmul_integer (ONNX MatMulInteger: zero points folded as row and
// column sums) compiled for x86 at every ISA tier the host has (the
// host's: AVX-512 with VNNI where present; x86-64-v4: AVX-512 without
// VNNI; AVX2, with AVX-VNNI where present; x86-64-v3, AVX2 without it;
// SSE2), each compared bit for
// bit with tj_reference_run. Covers every dtype pair (u8 x s8 takes the
// vpdpbusd quads on VNNI tiers, s8 x s8 the same with the +128 flip and
// its column-sum correction, B u8 the i16 pairs), the extremes (-128, 127,
// 255: pairs that would saturate vpmaddubsw's i16), odd M/N/K, batch dims
// with broadcasting, a symbolic M at several sizes from one executable, K
// spanning several K passes, zero points scalar and per row/column, shape
// and dtype errors, and the refused gradient.

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/dtype.h"
#include "tensorjit/tj_autodiff.h"
#include "tests/unit/test.h"

// The host's level is AMX where the CPU has it (the tiles for K a
// multiple of 64), else AVX-512 with VNNI; "avx512" is AVX-512 without
// AMX (VNNI where present). A tier the host lacks is skipped.
// "x86-64-v3" is AVX2 without AVX-VNNI (the pairs, or vpmaddubsw for a
// 7-bit constant B), as CI's AVX2 machines have it.
enum { kTiers = 6 };
static const char* const kIsa[kTiers] = {NULL,   "avx512",    "x86-64-v4",
                                         "avx2", "x86-64-v3", "sse2"};
static tj_context_t* g_ctx[kTiers];

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 11);
}

// |n| bytes of |dt| (i8 or u8): random, or (|extreme|) the dtype's ends
// (-128/127, 0/255) with few values between.
static void fill(tj_dtype_t dt, unsigned char* p, int64_t n, bool extreme) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = rnd();
    int v;
    if (extreme) {
      int ends[4] = {
          dt == TJ_DTYPE_I8 ? -128 : 0, dt == TJ_DTYPE_I8 ? 127 : 255,
          dt == TJ_DTYPE_I8 ? -128 : 255, dt == TJ_DTYPE_I8 ? -1 : 1};
      v = ends[r % 4];
    } else {
      v = dt == TJ_DTYPE_I8 ? (int)(r % 256) - 128 : (int)(r % 256);
    }
    p[i] = (unsigned char)v;
  }
}

// Zero point forms: none, scalar, per row of a / per column of b.
enum { ZP_NONE, ZP_SCALAR, ZP_VECTOR };

typedef struct qcase_t {
  tj_dtype_t adt, bdt;
  int64_t batch;  // 0: a is [M, K]; else a is [batch, M, K]
  int64_t m, n, k;
  int za, zb;
  bool extreme;
  bool symbolic_m;    // M is a symbol; run at m, 1, 3 and 65 from one exe
  bool b_transposed;  // b is transpose(bt [N, K])
} qcase_t;

static int64_t numel(int32_t rank, const int64_t* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= d[i];
  return n;
}

// Builds, compiles (generic) and runs |c| at tier |t| at each M of |ms|
// (one executable), comparing with the reference bit for bit.
static void check_case(const char* what, const qcase_t* c, int t) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[t], "qgemm", &g));
  int64_t mdim = c->symbolic_m ? tj_graph_symbol(g, "M") : c->m;
  int32_t ar = c->batch ? 3 : 2;
  int64_t adims[3], bdims[2] = {c->k, c->n}, btdims[2] = {c->n, c->k};
  if (c->batch) {
    adims[0] = c->batch;
    adims[1] = mdim;
    adims[2] = c->k;
  } else {
    adims[0] = mdim;
    adims[1] = c->k;
  }
  tj_value_t a = tj_graph_input(g, c->adt, ar, adims, "a");
  tj_value_t b;
  if (c->b_transposed) {
    int32_t perm[2] = {1, 0};
    b = tj_graph_transpose(g, tj_graph_input(g, c->bdt, 2, btdims, "bt"), perm);
  } else {
    b = tj_graph_input(g, c->bdt, 2, bdims, "b");
  }
  int64_t zadims[3] = {c->batch ? 1 : mdim, mdim, 1};
  int32_t zar = c->za == ZP_VECTOR ? 2 : 0;
  if (c->za == ZP_VECTOR && c->batch) zar = 3;
  if (c->za == ZP_VECTOR && !c->batch) {
    zadims[0] = mdim;
    zadims[1] = 1;
  }
  if (c->za == ZP_VECTOR && c->batch) zadims[0] = c->batch;
  int64_t zbdims[1] = {c->n};
  tj_value_t za =
      c->za ? tj_graph_input(g, c->adt, zar, zadims, "za") : tj_value_none();
  tj_value_t zb = c->zb ? tj_graph_input(g, c->bdt, c->zb == ZP_VECTOR ? 1 : 0,
                                         zbdims, "zb")
                        : tj_value_none();
  tj_value_t y = c->za || c->zb ? tj_graph_matmul_integer(g, a, b, za, zb)
                                : tj_graph_matmul_i32(g, a, b);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = tj_test_x86_options(t == 0 ? 2 : 1);
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_compile(g, &o, &exe);
  if (st && tj_status_code(st) == TJ_STATUS_UNSUPPORTED && t > 0) {
    tj_status_free(st);  // the host lacks this tier
    tj_graph_destroy(g);
    return;
  }
  CHECK_OK(st);
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);
  CHECK_EQ_INT(0, stats.num_graph_breaks);
  int64_t ms[4] = {c->m, 1, 3, 65};
  int nm = c->symbolic_m ? 4 : 1;
  for (int mi = 0; mi < nm; ++mi) {
    int64_t m = ms[mi];
    int64_t ad[3], zad[3];
    memcpy(ad, adims, sizeof(ad));
    memcpy(zad, zadims, sizeof(zad));
    ad[c->batch ? 1 : 0] = m;
    if (c->za == ZP_VECTOR) zad[c->batch ? 1 : 0] = m;
    int64_t yd[3];
    int32_t yr = ar;
    if (c->batch) {
      yd[0] = c->batch;
      yd[1] = m;
      yd[2] = c->n;
    } else {
      yd[0] = m;
      yd[1] = c->n;
    }
    int64_t na = numel(ar, ad), nb = c->k * c->n, nza = numel(zar, zad);
    int64_t ny = numel(yr, yd);
    unsigned char* av = malloc((size_t)na);
    unsigned char* bv = malloc((size_t)nb);
    unsigned char zav[512], zbv[512];
    int32_t* want = malloc((size_t)ny * 4);
    int32_t* got = malloc((size_t)ny * 4);
    fill(c->adt, av, na, c->extreme);
    fill(c->bdt, bv, nb, c->extreme);
    fill(c->adt, zav, nza, false);
    fill(c->bdt, zbv, c->n, false);
    tj_tensor_t in[4];
    int ni = 0;
    in[ni++] = tj_tensor_make(av, c->adt, ar, ad);
    in[ni++] = tj_tensor_make(bv, c->bdt, 2, c->b_transposed ? btdims : bdims);
    if (c->za) in[ni++] = tj_tensor_make(zav, c->adt, zar, zad);
    if (c->zb) {
      in[ni++] =
          tj_tensor_make(zbv, c->bdt, c->zb == ZP_VECTOR ? 1 : 0, zbdims);
    }
    tj_tensor_t wt = tj_tensor_make(want, TJ_DTYPE_I32, yr, yd);
    tj_tensor_t gt = tj_tensor_make(got, TJ_DTYPE_I32, yr, yd);
    CHECK_OK(tj_reference_run(g, in, (uint32_t)ni, &wt, 1));
    memset(got, 0xA5, (size_t)ny * 4);
    CHECK_OK(tj_executable_run(exe, in, (uint32_t)ni, &gt, 1));
    for (int64_t i = 0; i < ny; ++i) {
      if (got[i] != want[i]) {
        fprintf(stderr,
                "  %s at tier %s, %s x %s, M %lld N %lld K %lld: element "
                "%lld: got %d, want %d\n",
                what, kIsa[t] ? kIsa[t] : "host", tj_dtype_name(c->adt),
                tj_dtype_name(c->bdt), (long long)m, (long long)c->n,
                (long long)c->k, (long long)i, got[i], want[i]);
        CHECK(false);
        break;
      }
    }
    free(av);
    free(bv);
    free(want);
    free(got);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

static const tj_dtype_t kPairs[4][2] = {{TJ_DTYPE_U8, TJ_DTYPE_I8},
                                        {TJ_DTYPE_I8, TJ_DTYPE_I8},
                                        {TJ_DTYPE_U8, TJ_DTYPE_U8},
                                        {TJ_DTYPE_I8, TJ_DTYPE_U8}};

// Every dtype pair at every tier over odd sizes, random and extreme values.
TEST(dtype_pairs_odd_sizes_every_tier) {
  static const int64_t kSizes[][3] = {
      {1, 1, 1},   {3, 17, 5},   {17, 63, 64}, {64, 65, 63},
      {65, 64, 3}, {6, 257, 65}, {63, 3, 257},
  };
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int p = 0; p < 4; ++p) {
      for (size_t s = 0; s < TJ_ARRAY_SIZE(kSizes); ++s) {
        qcase_t c = {kPairs[p][0], kPairs[p][1], 0,       kSizes[s][0],
                     kSizes[s][1], kSizes[s][2], ZP_NONE, ZP_NONE,
                     s % 2 == 1,   false,        false};
        check_case("odd sizes", &c, t);
      }
    }
  }
}

// All-extreme operands with K large enough that every i16 pair of
// vpmaddubsw would saturate, and K over several K passes (an 8-bit kc is
// 4096) ending in a partial quad.
TEST(extremes_and_long_k) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int p = 0; p < 4; ++p) {
      qcase_t c = {kPairs[p][0], kPairs[p][1], 0,    7,     33,   9001,
                   ZP_NONE,      ZP_NONE,      true, false, false};
      check_case("extremes", &c, t);
    }
  }
}

// K a multiple of 64 (the AMX tiles' case where the host has them):
// every dtype pair (tdpbssd, tdpbsud, tdpbusd, tdpbuud), M across the
// 16-row tiles and the 96-row m blocks (1, 15, 17, 97; symbolic M from
// one executable), odd N, K over two K passes (kc 4096 + 64), and a
// 200 x 300 x 1024 product over several m and n blocks.
TEST(k_multiple_of_64) {
  static const int64_t kSizes[][3] = {
      {1, 1, 64}, {15, 63, 128}, {17, 65, 192}, {97, 100, 256}, {5, 33, 4160},
  };
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int p = 0; p < 4; ++p) {
      for (size_t s = 0; s < TJ_ARRAY_SIZE(kSizes); ++s) {
        qcase_t c = {kPairs[p][0], kPairs[p][1], 0,       kSizes[s][0],
                     kSizes[s][1], kSizes[s][2], ZP_NONE, ZP_NONE,
                     s % 2 == 0,   s == 3,       false};
        check_case("k multiple of 64", &c, t);
      }
    }
    // Several m blocks by several n blocks, threads splitting them.
    qcase_t c = {TJ_DTYPE_U8, TJ_DTYPE_I8, 0,     200,   300,  1024,
                 ZP_NONE,     ZP_NONE,     false, false, false};
    check_case("k multiple of 64, blocks", &c, t);
  }
}

// Batch dims (b broadcast), a transposed b, and a symbolic M run at 4
// sizes from one executable.
TEST(batch_transpose_symbolic_m) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int p = 0; p < 4; ++p) {
      qcase_t c = {kPairs[p][0], kPairs[p][1], 3,     5,    19,   37,
                   ZP_NONE,      ZP_NONE,      false, true, false};
      check_case("batch, symbolic M", &c, t);
      qcase_t d = {kPairs[p][0], kPairs[p][1], 0,    17,    70,  45,
                   ZP_NONE,      ZP_NONE,      true, false, true};
      check_case("transposed b", &d, t);
    }
  }
}

// matmul_integer's zero points: scalar and per row / per column, each
// alone and together, with and without batch dims.
TEST(zero_points) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int p = 0; p < 4; ++p) {
      for (int za = 0; za < 3; ++za) {
        for (int zb = 0; zb < 3; ++zb) {
          if (!za && !zb) continue;
          qcase_t c = {kPairs[p][0], kPairs[p][1], (za + zb) % 2 ? 2 : 0,
                       13,           31,           29,
                       za,           zb,           (za + zb) % 3 == 0,
                       t == 0,       false};
          check_case("zero points", &c, t);
        }
      }
    }
  }
}

// The dequant epilogue a quantized linear layer needs, f32(acc) * scale_a
// * scale_b[n] + bias[n], fuses into the integer GEMM (one kernel), bit
// for bit with the reference (each f32 op rounds once on both sides); and
// the requantized form, relu then quantize to u8 (scale, zero point,
// rounding half to even, saturation), fused the same. K 99 and 128 (the
// AMX tiles' case where the host has them).
TEST(fused_dequant_epilogue) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool requant = variant % 2 == 1;
      const int64_t m = 37, n = 70, k = variant < 2 ? 99 : 128;
      tj_graph_t* g = NULL;
      CHECK_OK(tj_graph_create(g_ctx[t], "qdeq", &g));
      int64_t ad[2] = {m, k}, bd[2] = {k, n}, nd[1] = {n}, yd[2] = {m, n};
      tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, ad, "a");
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_I8, 2, bd, "b");
      tj_value_t sb = tj_graph_input(g, TJ_DTYPE_F32, 1, nd, "scale_b");
      tj_value_t bias = tj_graph_input(g, TJ_DTYPE_F32, 1, nd, "bias");
      tj_value_t y =
          tj_graph_cast(g, tj_graph_matmul_i32(g, a, b), TJ_DTYPE_F32);
      y = tj_graph_mul(g, y, tj_graph_scalar(g, TJ_DTYPE_F32, 0.0123));
      y = tj_graph_add(g, tj_graph_mul(g, y, sb), bias);
      tj_dtype_t ydt = TJ_DTYPE_F32;
      if (requant) {
        tj_quant_attrs_t qa = {.dtype = TJ_DTYPE_U8};
        y = tj_graph_quantize(g, tj_graph_relu(g, y),
                              tj_graph_scalar(g, TJ_DTYPE_F32, 0.1),
                              tj_graph_scalar(g, TJ_DTYPE_U8, 3), &qa);
        ydt = TJ_DTYPE_U8;
      }
      tj_graph_output(g, y, "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t o;
      tj_compile_options_initialize(&o);
      o.target = TJ_TARGET_X86;
      o.cache_dir = "";
      tj_executable_t* exe = NULL;
      tj_status_t st = tj_compile(g, &o, &exe);
      if (st && tj_status_code(st) == TJ_STATUS_UNSUPPORTED && t > 0) {
        tj_status_free(st);
        tj_graph_destroy(g);
        break;
      }
      CHECK_OK(st);
      tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
      tj_executable_stats(exe, &stats);
      CHECK_EQ_INT(1, stats.num_kernels);
      CHECK_EQ_INT(0, stats.num_graph_breaks);
      unsigned char* av = malloc((size_t)(m * k));
      unsigned char* bv = malloc((size_t)(k * n));
      float sv[70], biv[70];
      size_t ybytes = (size_t)(m * n) * tj_dtype_size(ydt);
      unsigned char* want = malloc(ybytes);
      unsigned char* got = malloc(ybytes);
      fill(TJ_DTYPE_U8, av, m * k, false);
      // (Extreme weights average -32.5: relu would leave only zeros.)
      fill(TJ_DTYPE_I8, bv, k * n, !requant);
      for (int i = 0; i < 70; ++i) {
        sv[i] = 0.001f * (float)(i + 1);
        biv[i] = (float)i - 35.5f;
      }
      tj_tensor_t in[4] = {tj_tensor_make(av, TJ_DTYPE_U8, 2, ad),
                           tj_tensor_make(bv, TJ_DTYPE_I8, 2, bd),
                           tj_tensor_make(sv, TJ_DTYPE_F32, 1, nd),
                           tj_tensor_make(biv, TJ_DTYPE_F32, 1, nd)};
      tj_tensor_t wt = tj_tensor_make(want, ydt, 2, yd);
      tj_tensor_t gt = tj_tensor_make(got, ydt, 2, yd);
      CHECK_OK(tj_reference_run(g, in, 4, &wt, 1));
      CHECK_OK(tj_executable_run(exe, in, 4, &gt, 1));
      CHECK(memcmp(want, got, ybytes) == 0);
      if (requant) {
        // Not degenerate: both ends of u8 and values between.
        int lo = 0, hi = 0, mid = 0;
        for (size_t i = 0; i < ybytes; ++i) {
          lo += want[i] == 0 || want[i] == 3;
          hi += want[i] == 255;
          mid += want[i] > 3 && want[i] < 255;
        }
        CHECK(lo > 0 && hi > 0 && mid > 0);
      }
      free(av);
      free(bv);
      free(want);
      free(got);
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
}

// A constant i8 B (a weight) times |adt| A [M, K], at tier |t|, bit for
// bit against the reference; B is |bvals| [K, N] (or its transpose read
// through a transpose node, |transposed|). |dir|: the context's dump
// directory (NULL: none), for the caller to look at the kernels.
static void check_const_b(const char* what, tj_dtype_t adt, int64_t m,
                          int64_t n, int64_t k, const signed char* bvals,
                          bool transposed, int t, const char* dir) {
  tj_context_t* ctx = g_ctx[t];
  if (dir) {
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.x86_isa = kIsa[t];
    co.dump_dir = dir;
    CHECK_OK(tj_context_create(&co, &ctx));
  }
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "qconst", &g));
  int64_t ad[2] = {m, k}, bd[2] = {k, n}, btd[2] = {n, k}, yd[2] = {m, n};
  tj_value_t a = tj_graph_input(g, adt, 2, ad, "a");
  tj_value_t b;
  if (transposed) {
    signed char* bt = malloc((size_t)(k * n));
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < n; ++j) bt[j * k + i] = bvals[i * n + j];
    }
    int32_t perm[2] = {1, 0};
    b = tj_graph_transpose(
        g, tj_graph_constant(g, TJ_DTYPE_I8, 2, btd, bt, (size_t)(k * n)),
        perm);
    free(bt);
  } else {
    b = tj_graph_constant(g, TJ_DTYPE_I8, 2, bd, bvals, (size_t)(k * n));
  }
  tj_graph_output(g, tj_graph_matmul_i32(g, a, b), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  o.cache_dir = "";
  o.x86.num_threads = t == 0 ? 2 : 1;
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_compile(g, &o, &exe);
  if (st && tj_status_code(st) == TJ_STATUS_UNSUPPORTED && t > 0) {
    tj_status_free(st);  // the host lacks this tier
    tj_graph_destroy(g);
    if (dir) tj_context_destroy(ctx);
    return;
  }
  CHECK_OK(st);
  unsigned char* av = malloc((size_t)(m * k));
  int32_t* want = malloc((size_t)(m * n) * 4);
  int32_t* got = malloc((size_t)(m * n) * 4);
  // Row 0 all at the top of A's range (255, or an s8 127 flipped to 255):
  // with B's -64 and 63 columns the quads' pair sums reach -32640 and
  // 32130, the most vpmaddubsw can meet with 7-bit B; row 1 the bottom;
  // the rest extremes and between.
  fill(adt, av, m * k, true);
  for (int64_t i = 0; i < k; ++i) {
    av[i] = adt == TJ_DTYPE_U8 ? 255 : 127;
    if (m > 1) av[k + i] = adt == TJ_DTYPE_U8 ? 0 : (unsigned char)-128;
  }
  tj_tensor_t in = tj_tensor_make(av, adt, 2, ad);
  tj_tensor_t wt = tj_tensor_make(want, TJ_DTYPE_I32, 2, yd);
  tj_tensor_t gt = tj_tensor_make(got, TJ_DTYPE_I32, 2, yd);
  CHECK_OK(tj_reference_run(g, &in, 1, &wt, 1));
  memset(got, 0xA5, (size_t)(m * n) * 4);
  CHECK_OK(tj_executable_run(exe, &in, 1, &gt, 1));
  for (int64_t i = 0; i < m * n; ++i) {
    if (got[i] != want[i]) {
      fprintf(stderr,
              "  %s at tier %s, %s x constant i8, M %lld N %lld K %lld: "
              "element %lld: got %d, want %d\n",
              what, kIsa[t] ? kIsa[t] : "host", tj_dtype_name(adt),
              (long long)m, (long long)n, (long long)k, (long long)i, got[i],
              want[i]);
      CHECK(false);
      break;
    }
  }
  free(av);
  free(want);
  free(got);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  if (dir) tj_context_destroy(ctx);
}

// B [K, N] of 7-bit values: column j % 4 == 0 all -64, == 1 all 63 (the
// pair sums' extremes against A's 255 rows), the rest random in [-64,
// 63]; |wide| puts one -65 in the last column (no longer 7-bit).
static signed char* int7_weights(int64_t k, int64_t n, bool wide) {
  signed char* b = malloc((size_t)(k * n));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      b[i * n + j] = j % 4 == 0   ? -64
                     : j % 4 == 1 ? 63
                                  : (signed char)((int)(rnd() % 128) - 64);
    }
  }
  if (wide) b[(k / 2) * n + n - 1] = -65;
  return b;
}

// The saturation of vpmaddubsw's i16 pair sums (issue 17): a constant B
// whose values all lie in [-64, 63] is multiplied four k at a time by
// vpmaddubsw + vpmaddwd on the tiers without VNNI (x86-64-v4, x86-64-v3),
// where |a0*b0 + a1*b1| <= 255 * 64 * 2 = 32640 < 32767 keeps every pair
// exact. Worst-case operands (A's rows of 255 against B's columns of -64
// and of 63, s8 A at 127 / -128 flipped to u8, K 4099 over a partial
// quad), odd sizes, a transposed constant, and a B with one -65 (the pairs
// path, which would saturate under vpmaddubsw) at every tier, bit for bit.
TEST(int7_constant_b_every_tier) {
  static const int64_t kSizes[][3] = {
      {7, 33, 4099}, {1, 17, 64}, {65, 70, 257}, {13, 64, 4160}};
  for (int t = 0; t < kTiers; ++t) {
    for (size_t s = 0; s < TJ_ARRAY_SIZE(kSizes); ++s) {
      int64_t m = kSizes[s][0], n = kSizes[s][1], k = kSizes[s][2];
      for (int wide = 0; wide < 2; ++wide) {
        signed char* b = int7_weights(k, n, wide);
        check_const_b(wide ? "constant B with a -65" : "7-bit constant B",
                      s % 2 ? TJ_DTYPE_I8 : TJ_DTYPE_U8, m, n, k, b, s == 2, t,
                      NULL);
        check_const_b(wide ? "constant B with a -65" : "7-bit constant B",
                      s % 2 ? TJ_DTYPE_U8 : TJ_DTYPE_I8, m, n, k, b, false, t,
                      NULL);
        free(b);
      }
    }
  }
}

// The concatenation of the files in |dir| whose names end in |ext|
// (malloc'ed; "" when none).
static char* dumped(const char* dir, const char* ext) {
  char* all = calloc(1, 1);
  size_t len = 0;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    size_t nl = strlen(e->d_name), el = strlen(ext);
    if (nl < el || strcmp(e->d_name + nl - el, ext) != 0) continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
      all = realloc(all, len + got + 1);
      memcpy(all + len, buf, got);
      len += got;
      all[len] = '\0';
    }
    fclose(f);
  }
  if (d) closedir(d);
  return all;
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

// Which path the kernels took, from the dump directory: a 7-bit constant B
// is marked b_int7 in the kernel IR and multiplied by vpmaddubsw at
// x86-64-v3 (AVX2 without VNNI; vpmaddwd pairs before this); one -65 in B
// takes the pairs (no vpmaddubsw), and an input B is never marked.
TEST(int7_constant_b_takes_pmaddubsw) {
  const int t = 4;  // x86-64-v3
  for (int wide = 0; wide < 2; ++wide) {
    char dir[] = "/tmp/tj_qgemm_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    signed char* b = int7_weights(64, 48, wide);
    check_const_b("dumped", TJ_DTYPE_U8, 9, 48, 64, b, false, t, dir);
    free(b);
    char* kir = dumped(dir, ".kir");
    char* s = dumped(dir, ".s");
    CHECK(*kir || !__builtin_cpu_supports("avx2"));
    if (*kir) {  // (empty: the host has no AVX2)
      CHECK_EQ_INT(!wide, strstr(kir, "b_int7") != NULL);
      CHECK_EQ_INT(!wide, strstr(s, "vpmaddubsw") != NULL);
      // The quads read the B prepacked at compile time; the pairs pack.
      CHECK_EQ_INT(!wide, strstr(kir, "b_prepacked") != NULL);
      CHECK(strstr(s, "vpmaddwd") != NULL);
      CHECK(strstr(s, "vpdpbusd") == NULL);
    }
    free(kir);
    free(s);
    remove_dir(dir);
  }
}

// Constant-B prepack (issue 17): a u8 (or s8) A times a constant s8 B of
// any values, at every tier (B prepacked where the tier runs quads with a
// u8 A or the AMX tiles, packed per run elsewhere), bit for bit: several
// m and n blocks on two threads, K over two passes with a partial quad,
// odd N past a panel, and K a multiple of 64 (the tiles).
TEST(prepacked_constant_b_every_tier) {
  static const int64_t kSizes[][3] = {
      {200, 300, 1024}, {5, 33, 4161}, {17, 65, 99}, {40, 130, 128}};
  for (int t = 0; t < kTiers; ++t) {
    for (size_t s = 0; s < TJ_ARRAY_SIZE(kSizes); ++s) {
      int64_t m = kSizes[s][0], n = kSizes[s][1], k = kSizes[s][2];
      signed char* b = malloc((size_t)(k * n));
      fill(TJ_DTYPE_I8, (unsigned char*)b, k * n, s % 2 == 0);
      check_const_b("prepacked B", TJ_DTYPE_U8, m, n, k, b, s == 1, t, NULL);
      check_const_b("prepacked B", TJ_DTYPE_I8, m, n, k, b, false, t, NULL);
      free(b);
    }
  }
}

// Two layers of the same shapes with different constant weights share one
// compiled kernel (region compile) and each reads its own prepacked B.
TEST(prepacked_b_per_layer) {
  enum { M = 33, N = 70, K = 256 };
  for (int t = 0; t < kTiers; ++t) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[t], "qlayers", &g));
    int64_t ad[2] = {M, K}, bd[2] = {K, N}, yd[2] = {M, N};
    static signed char b1[K * N], b2[K * N];
    fill(TJ_DTYPE_I8, (unsigned char*)b1, K * N, false);
    fill(TJ_DTYPE_I8, (unsigned char*)b2, K * N, true);
    tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, ad, "a");
    tj_value_t w1 = tj_graph_constant(g, TJ_DTYPE_I8, 2, bd, b1, sizeof(b1));
    tj_value_t w2 = tj_graph_constant(g, TJ_DTYPE_I8, 2, bd, b2, sizeof(b2));
    tj_graph_output(g, tj_graph_matmul_i32(g, a, w1), "y1");
    tj_graph_output(g, tj_graph_matmul_i32(g, a, w2), "y2");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_X86;
    o.cache_dir = "";
    tj_executable_t* exe = NULL;
    tj_status_t st = tj_compile(g, &o, &exe);
    if (st && tj_status_code(st) == TJ_STATUS_UNSUPPORTED && t > 0) {
      tj_status_free(st);
      tj_graph_destroy(g);
      continue;
    }
    CHECK_OK(st);
    static unsigned char av[M * K];
    static int32_t want[2][M * N], got[2][M * N];
    fill(TJ_DTYPE_U8, av, M * K, false);
    tj_tensor_t in = tj_tensor_make(av, TJ_DTYPE_U8, 2, ad);
    tj_tensor_t wt[2] = {tj_tensor_make(want[0], TJ_DTYPE_I32, 2, yd),
                         tj_tensor_make(want[1], TJ_DTYPE_I32, 2, yd)};
    tj_tensor_t gt[2] = {tj_tensor_make(got[0], TJ_DTYPE_I32, 2, yd),
                         tj_tensor_make(got[1], TJ_DTYPE_I32, 2, yd)};
    CHECK_OK(tj_reference_run(g, &in, 1, wt, 2));
    memset(got, 0xA5, sizeof(got));
    CHECK_OK(tj_executable_run(exe, &in, 1, gt, 2));
    CHECK(memcmp(want, got, sizeof(want)) == 0);
    CHECK(memcmp(want[0], want[1], sizeof(want[0])) != 0);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

// Compiling and running a prepacked GEMM (x86-64-v3, a 7-bit constant B:
// prepacked on any AVX2 host) under a failing allocator: every failure is
// OUT_OF_MEMORY and frees all, the prepacked copy included.
static tj_status_t prepack_compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  co.x86_isa = __builtin_cpu_supports("avx2") ? "x86-64-v3" : NULL;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "qpoom", &g);
  tj_executable_t* exe = NULL;
  static signed char b[64 * 20];
  for (int i = 0; i < 64 * 20; ++i) b[i] = (signed char)(i % 128 - 64);
  if (!s) {
    tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){3, 64}, "a");
    tj_value_t w =
        tj_graph_constant(g, TJ_DTYPE_I8, 2, (int64_t[]){64, 20}, b, sizeof(b));
    tj_graph_output(g, tj_graph_matmul_i32(g, a, w), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_X86;
  opts.x86.num_threads = 1;
  opts.cache_dir = "";
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    unsigned char a[3 * 64];
    int32_t y[3 * 20];
    for (int i = 0; i < 3 * 64; ++i) a[i] = (unsigned char)(i * 7);
    tj_tensor_t in = tj_tensor_make(a, TJ_DTYPE_U8, 2, (int64_t[]){3, 64});
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_I32, 2, (int64_t[]){3, 20});
    s = tj_executable_run(exe, &in, 1, &out, 1);
    // y[0][0] = sum_k a[k] * b[k][0], b[k][0] = (20k) % 128 - 64.
    int32_t want = 0;
    for (int i = 0; i < 64; ++i) want += a[i] * b[i * 20];
    if (!s && y[0] != want) s = tj_internal("y[0] %d, want %d", y[0], want);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(prepack_oom_sweep) {
  tj_test_oom_sweep("prepacked int8 GEMM compile and run", prepack_compile_run);
}

// matmul_integer on the reference under a failing allocator (its shifted
// i64 copies of a and b are new allocation paths): every failure is
// OUT_OF_MEMORY and leaks nothing; the run that succeeds is right.
TEST(reference_oom_sweep) {
  long failures = 0;
  for (long n = 0;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&alloc);
    tj_context_t* context = NULL;
    CHECK_OK(tj_context_create(&options, &context));
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(context, "qoom", &g));
    int64_t d[2] = {2, 3}, e[2] = {3, 2}, zd[2] = {2, 1}, nd[1] = {2};
    tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, d, "a");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_I8, 2, e, "b");
    tj_value_t za = tj_graph_input(g, TJ_DTYPE_U8, 2, zd, "za");
    tj_value_t zb = tj_graph_input(g, TJ_DTYPE_I8, 1, nd, "zb");
    tj_graph_output(g, tj_graph_matmul_integer(g, a, b, za, zb), "y");
    CHECK_OK(tj_graph_finalize(g));
    unsigned char av[6] = {1, 2, 3, 4, 5, 255}, zav[2] = {1, 4};
    signed char bv[6] = {1, -1, 2, -2, -128, 127}, zbv[2] = {0, -1};
    int32_t y[4] = {0, 0, 0, 0};
    tj_tensor_t in[4] = {tj_tensor_make(av, TJ_DTYPE_U8, 2, d),
                         tj_tensor_make(bv, TJ_DTYPE_I8, 2, e),
                         tj_tensor_make(zav, TJ_DTYPE_U8, 2, zd),
                         tj_tensor_make(zbv, TJ_DTYPE_I8, 1, nd)};
    int64_t yd[2] = {2, 2};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_I32, 2, yd);
    long live_before = alloc.live_blocks;
    alloc.fail_at = alloc.allocations + n;
    tj_status_t status = tj_reference_run(g, in, 4, &out, 1);
    alloc.fail_at = -1;
    CHECK_EQ_INT(live_before, alloc.live_blocks);
    tj_graph_destroy(g);
    tj_context_destroy(context);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) {
      // (a - za) = [[0 1 2] [0 1 251]], (b - zb) = [[1 0] [2 -1] [-128 128]]
      CHECK_EQ_INT(-254, y[0]);
      CHECK_EQ_INT(255, y[1]);
      CHECK_EQ_INT(-32126, y[2]);
      CHECK_EQ_INT(32127, y[3]);
      CHECK(failures > 2);
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
  printf("# matmul_integer reference: %ld failure points\n", failures);
}

// Dtype and shape errors name the op; the gradient is refused.
TEST(errors) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "qerr", &g));
  int64_t d[2] = {4, 4}, z[2] = {1, 4};
  tj_value_t f = tj_graph_input(g, TJ_DTYPE_F32, 2, d, "f");
  tj_graph_matmul_i32(g, f, f);
  tj_status_t st = tj_graph_finalize(g);
  CHECK(st && tj_status_code(st) == TJ_STATUS_INVALID_ARGUMENT);
  CHECK(st && strstr(tj_status_message(st), "matmul_i32"));
  tj_status_free(st);
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "qerr2", &g));
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, d, "a");
  tj_value_t za = tj_graph_input(g, TJ_DTYPE_U8, 2, z, "za");  // [1, K]
  tj_graph_matmul_integer(g, a, a, za, tj_value_none());
  st = tj_graph_finalize(g);
  CHECK(st && tj_status_code(st) == TJ_STATUS_INVALID_ARGUMENT);
  CHECK(st && strstr(tj_status_message(st), "a_zero_point"));
  tj_status_free(st);
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "qgrad", &g));
  a = tj_graph_input(g, TJ_DTYPE_U8, 2, d, "a");
  tj_value_t y =
      tj_graph_matmul_integer(g, a, a, tj_value_none(), tj_value_none());
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* grad = NULL;
  int32_t out0 = 0, wrt = 0;
  st = tj_graph_grad(g, 1, &out0, 1, &wrt, &grad);
  CHECK(st != NULL);
  // (Its i32 output has no gradient: the error names the output.)
  CHECK(st && strstr(tj_status_message(st), "only float"));
  tj_status_free(st);
  tj_graph_destroy(grad);
  tj_graph_destroy(g);
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(dtype_pairs_odd_sizes_every_tier);
  RUN_TEST(extremes_and_long_k);
  RUN_TEST(k_multiple_of_64);
  RUN_TEST(batch_transpose_symbolic_m);
  RUN_TEST(zero_points);
  RUN_TEST(fused_dequant_epilogue);
  RUN_TEST(int7_constant_b_every_tier);
  RUN_TEST(int7_constant_b_takes_pmaddubsw);
  RUN_TEST(prepacked_constant_b_every_tier);
  RUN_TEST(prepacked_b_per_layer);
  RUN_TEST(prepack_oom_sweep);
  RUN_TEST(reference_oom_sweep);
  RUN_TEST(errors);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
