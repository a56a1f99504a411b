// The 8-bit GEMM on CUDA (issue 17, jit/emit_nvptx_qgemm.c): the graphs
// shared by tests/unit/qgemm_ptx_test.c (their PTX through ptxas, no GPU)
// and tests/cuda/cuda_qgemm_test.c (their numbers on the GPU against
// tj_reference_run). Each case is matmul_i32 (or matmul_integer with zero
// points) of i8/u8 operands, B k-contiguous (transpose of an [N, K] input,
// as Linear weights are stored) or n-contiguous ([K, N]), with an
// epilogue: none (i32 out), or the dequantization f32(acc) * sa * sb with
// per-tensor or per-row (sa [M, 1]) and per-channel (sb [N]) scales.
// fp8 (issue 17): cases of f8e4m3/f8e5m2 operands are matmul_f8 (f32
// out, the scales multiplied in as above), or with |qdq| the static QDQ
// quant_matmul folds onto it: matmul(dequantize(quantize(x, s) to f8e4m3,
// saturating), dequantize(b, sb [N])) with x f32 (some |x / s| past 448).

#ifndef TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_
#define TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"

enum { EPI_NONE, EPI_TENSOR, EPI_ROW_CHANNEL };

typedef struct qcuda_case_t {
  const char* name;
  tj_dtype_t adt, bdt;
  int64_t batch;  // 0: a is [M, K]; else [batch, M, K] (b broadcast)
  int64_t m, n, k;
  bool b_kmajor;  // b is transpose(bt [N, K])
  int epi;
  bool zero_points;  // matmul_integer with a scalar a_zp and b_zp [N]
  bool extreme;      // operands at the dtype's ends
  bool symbolic_m;   // M a symbol (the GPU test runs several)
  bool host;         // expected to run on the host (a graph break)
  bool nan;          // float8: some NaN bytes in A (rows of NaN in y)
  bool qdq;          // float8: the static QDQ graph (see above)
} qcuda_case_t;

static inline bool qcuda_is_f8(tj_dtype_t dt) {
  return dt == TJ_DTYPE_F8E4M3 || dt == TJ_DTYPE_F8E5M2;
}

static const qcuda_case_t kQcudaCases[] = {
    {"s8s8_kmajor_128", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 128, 128, 256, true,
     EPI_NONE, false, false, false, false, false, false},
    {"s8s8_nmajor_edges", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 200, 144, 272, false,
     EPI_NONE, false, true, false, false, false, false},
    {"u8u8_nmajor_m1", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 1, 64, 64, false, EPI_NONE,
     false, false, false, false, false, false},
    {"s8s8_kmajor_extreme", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 77, 300, 528, true,
     EPI_NONE, false, true, false, false, false, false},
    {"u8u8_nmajor_extreme", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 64, 192, 400, false,
     EPI_NONE, false, true, false, false, false, false},
    {"u8u8_batch", TJ_DTYPE_U8, TJ_DTYPE_U8, 3, 65, 96, 144, false, EPI_NONE,
     false, false, false, false, false, false},
    {"s8s8_kmajor_dequant_row_channel", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 257, 384,
     1024, true, EPI_ROW_CHANNEL, false, false, false, false, false, false},
    {"s8s8_nmajor_dequant_tensor", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 130, 208, 320,
     false, EPI_TENSOR, false, false, false, false, false, false},
    {"u8u8_zero_points_dequant", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 96, 160, 192,
     true, EPI_ROW_CHANNEL, true, false, false, false, false, false},
    {"s8s8_symbolic_m", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 300, 256, 512, true,
     EPI_ROW_CHANNEL, false, false, true, false, false, false},
    {"s8s8_nmajor_large", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 1024, 1024, 1024, false,
     EPI_NONE, false, false, false, false, false, false},
    // K = 100: A's rows are not 16 bytes apart; the group runs on the host.
    {"s8s8_k100_host", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 33, 64, 100, true, EPI_NONE,
     false, false, false, true, false, false},
    // Mixed signs: the u8 operand flipped to s8, the other's sums added.
    {"u8s8_nmajor_mixed", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 48, 64, 128, false,
     EPI_NONE, false, false, false, false, false, false},
    {"u8s8_kmajor_mixed_extreme", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 200, 136, 400,
     true, EPI_NONE, false, true, false, false, false, false},
    {"s8u8_kmajor_mixed_extreme", TJ_DTYPE_I8, TJ_DTYPE_U8, 0, 77, 300, 528,
     true, EPI_NONE, false, true, false, false, false, false},
    {"s8u8_nmajor_mixed_edges", TJ_DTYPE_I8, TJ_DTYPE_U8, 2, 130, 208, 272,
     false, EPI_NONE, false, false, false, false, false, false},
    // ONNX's DynamicQuantizeLinear -> MatMulInteger: u8 activations with a
    // zero point, s8 weights.
    {"u8s8_zero_points_dequant", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 96, 160, 192,
     true, EPI_ROW_CHANNEL, true, false, false, false, false, false},
    // fp8: e4m3 / e5m2 wgmma into f32.
    {"e4m3_kmajor_128", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 128, 128, 256,
     true, EPI_NONE, false, false, false, false, false, false},
    {"e4m3_nmajor_edges_row_channel", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 200,
     144, 272, false, EPI_ROW_CHANNEL, false, false, false, false, false,
     false},
    {"e4m3_kmajor_extreme_tensor", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 77, 300,
     528, true, EPI_TENSOR, false, true, false, false, false, false},
    {"e5m2_nmajor_batch", TJ_DTYPE_F8E5M2, TJ_DTYPE_F8E5M2, 3, 65, 96, 144,
     false, EPI_NONE, false, false, false, false, false, false},
    {"e4m3e5m2_kmajor_mixed", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E5M2, 0, 130, 208,
     320, true, EPI_ROW_CHANNEL, false, false, false, false, false, false},
    {"e4m3_symbolic_m", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 300, 256, 512,
     true, EPI_ROW_CHANNEL, false, false, true, false, false, false},
    {"e4m3_nan", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 96, 160, 192, true,
     EPI_NONE, false, false, false, false, true, false},
    {"e4m3_k100_host", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 33, 64, 100, true,
     EPI_NONE, false, false, false, true, false, false},
    // int8 static QDQ: quant_matmul folds it onto matmul_integer (no
    // zero points: matmul_i32) with the scales in the epilogue.
    {"s8_static_qdq", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 130, 208, 320, false,
     EPI_NONE, false, false, false, false, false, true},
    {"e4m3_static_qdq_symbolic", TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E4M3, 0, 257, 384,
     1024, false, EPI_NONE, false, false, true, false, false, true},
};

enum { kQcudaNumCases = sizeof(kQcudaCases) / sizeof(kQcudaCases[0]) };

static uint64_t g_qcuda_rng = 0x2545F4914F6CDD1Dull;

static inline uint32_t qcuda_rnd(void) {
  g_qcuda_rng ^= g_qcuda_rng << 13;
  g_qcuda_rng ^= g_qcuda_rng >> 7;
  g_qcuda_rng ^= g_qcuda_rng << 17;
  return (uint32_t)(g_qcuda_rng >> 11);
}

static inline void qcuda_fill_int8(tj_dtype_t dt, unsigned char* p, int64_t n,
                                   bool extreme) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = qcuda_rnd();
    int v = dt == TJ_DTYPE_I8 ? (int)(r % 256) - 128 : (int)(r % 256);
    if (extreme)
      v = dt == TJ_DTYPE_I8 ? (r & 1 ? 127 : -128) : (r & 1 ? 255 : 0);
    p[i] = (unsigned char)v;
  }
}

// float8 bits: random finite values (NaN and infinity skipped), or the
// format's extremes (+-max, +-min subnormal) with |extreme|.
static inline void qcuda_fill_f8(tj_dtype_t dt, unsigned char* p, int64_t n,
                                 bool extreme) {
  bool e4 = dt == TJ_DTYPE_F8E4M3;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = qcuda_rnd();
    unsigned v = r & 0xFF;
    while ((v & 0x7F) >= (e4 ? 0x7Fu : 0x7Cu)) v = (v + 0x35) & 0xFF;
    if (extreme) {
      unsigned mag = (r >> 8) & 1 ? (e4 ? 0x7E : 0x7B) : 0x01;
      v = mag | (r & 0x10000 ? 0x80 : 0);
    }
    p[i] = (unsigned char)v;
  }
}

// The value of float8 bits |v| (as the reference decodes them), or of an
// i8 / u8 byte.
static inline double qcuda_f8_value(tj_dtype_t dt, unsigned v) {
  if (dt == TJ_DTYPE_I8) return (double)(signed char)v;
  if (dt == TJ_DTYPE_U8) return (double)v;
  bool e4 = dt == TJ_DTYPE_F8E4M3;
  int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
  unsigned mag = v & 0x7F;
  int e = (int)(mag >> mbits), m = (int)(mag & ((1u << mbits) - 1));
  double x;
  if (e4 && mag == 0x7F) {
    x = NAN;
  } else if (!e4 && e == 31) {
    x = m ? NAN : INFINITY;
  } else if (e == 0) {
    x = ldexp((double)m, 1 - bias - mbits);
  } else {
    x = ldexp((double)((1 << mbits) + m), e - bias - mbits);
  }
  return v & 0x80 ? -x : x;
}

static inline void qcuda_fill_scale(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    p[i] = 1e-3f * (float)(1 + qcuda_rnd() % 1000) / 64.0f;
}

// The graph of case |c| on |ctx| (inputs a, b or bt, then za, zb, then
// sa, sb as the case has them), finalized; NULL on failure (checked).
static inline tj_graph_t* qcuda_build(tj_context_t* ctx,
                                      const qcuda_case_t* c) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, c->name, &g));
  if (!g) return NULL;
  int64_t m = c->symbolic_m ? tj_graph_symbol(g, "M") : c->m;
  int64_t adims[3] = {c->batch, m, c->k};
  int32_t ar = c->batch ? 3 : 2;
  tj_value_t a = tj_graph_input(g, c->qdq ? TJ_DTYPE_F32 : c->adt, ar,
                                c->batch ? adims : adims + 1, "a");
  tj_value_t b;
  if (c->b_kmajor) {
    int64_t btd[2] = {c->n, c->k};
    int32_t perm[2] = {1, 0};
    b = tj_graph_transpose(g, tj_graph_input(g, c->bdt, 2, btd, "bt"), perm);
  } else {
    int64_t bd[2] = {c->k, c->n};
    b = tj_graph_input(g, c->bdt, 2, bd, "b");
  }
  tj_value_t y;
  if (c->qdq) {
    // Static QDQ (quant_matmul folds it): x f32 [M, K] and b f8 [K, N]
    // with per-tensor / per-column scales, all inputs after a.
    int64_t sbd[1] = {c->n};
    tj_value_t sx = tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "sx");
    tj_value_t sb = tj_graph_input(g, TJ_DTYPE_F32, 1, sbd, "sb");
    tj_quant_attrs_t qa = {.dtype = c->adt};
    tj_quant_attrs_t qb = {.dtype = c->bdt, .axis = 1};
    tj_value_t xa = tj_graph_dequantize(
        g, tj_graph_quantize(g, a, sx, tj_value_none(), &qa), sx,
        tj_value_none(), &qa);
    y = tj_graph_matmul(g, xa,
                        tj_graph_dequantize(g, b, sb, tj_value_none(), &qb));
  } else if (qcuda_is_f8(c->adt)) {
    y = tj_graph_matmul_f8(g, a, b);
  } else if (c->zero_points) {
    int64_t zbd[1] = {c->n};
    tj_value_t za = tj_graph_input(g, c->adt, 0, NULL, "za");
    tj_value_t zb = tj_graph_input(g, c->bdt, 1, zbd, "zb");
    y = tj_graph_matmul_integer(g, a, b, za, zb);
  } else {
    y = tj_graph_matmul_i32(g, a, b);
  }
  if (c->epi != EPI_NONE) {
    if (!qcuda_is_f8(c->adt)) y = tj_graph_cast(g, y, TJ_DTYPE_F32);
    if (c->epi == EPI_TENSOR) {
      y = tj_graph_mul(g, y, tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "s"));
    } else {
      int64_t sad[2] = {m, 1}, sbd[1] = {c->n};
      y = tj_graph_mul(g, y, tj_graph_input(g, TJ_DTYPE_F32, 2, sad, "sa"));
      y = tj_graph_mul(g, y, tj_graph_input(g, TJ_DTYPE_F32, 1, sbd, "sb"));
    }
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// The inputs of case |c| at M |m|, and its output's shape.
typedef struct qcuda_run_t {
  tj_tensor_t in[6];
  uint32_t nin;
  void* data[6];
  int64_t dims[6][3];
  double* bound;  // float8, QDQ: sum_k |a b| (times the scales) each
  bool f8;        // float8 operands
  int64_t ydims[3];
  int32_t yrank;
  int64_t ny;
  tj_dtype_t ydt;
} qcuda_run_t;

static inline void* qcuda_add(qcuda_run_t* r, tj_dtype_t dt, int32_t rank,
                              const int64_t* dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  uint32_t i = r->nin++;
  r->data[i] = malloc((size_t)(n ? n : 1) * tj_dtype_size(dt));
  if (rank) memcpy(r->dims[i], dims, sizeof(int64_t) * (size_t)rank);
  r->in[i] = tj_tensor_make(r->data[i], dt, rank, r->dims[i]);
  if (dt == TJ_DTYPE_F32)
    qcuda_fill_scale(r->data[i], n);
  else if (qcuda_is_f8(dt))
    qcuda_fill_f8(dt, r->data[i], n, false);
  else
    qcuda_fill_int8(dt, r->data[i], n, false);
  return r->data[i];
}

static inline void qcuda_run_make(const qcuda_case_t* c, int64_t m,
                                  qcuda_run_t* r) {
  memset(r, 0, sizeof(*r));
  int64_t ad[3] = {c->batch, m, c->k};
  int32_t ar = c->batch ? 3 : 2;
  tj_dtype_t adt = c->qdq ? TJ_DTYPE_F32 : c->adt;
  void* a = qcuda_add(r, adt, ar, c->batch ? ad : ad + 1);
  int64_t bd[2] = {c->b_kmajor ? c->n : c->k, c->b_kmajor ? c->k : c->n};
  void* b = qcuda_add(r, c->bdt, 2, bd);
  int64_t na = (c->batch ? c->batch : 1) * m * c->k;
  if (c->qdq) {
    float* x = a;  // in [-1.2, 1.2]; sx = 1 / 400 saturates past 1.12
    for (int64_t i = 0; i < na; ++i)
      x[i] = 2.4f * (float)(qcuda_rnd() % 100000) / 100000.0f - 1.2f;
  } else if (qcuda_is_f8(c->adt)) {
    qcuda_fill_f8(c->adt, a, na, c->extreme);
    // NaN bytes in a few rows of A (0x7F: e4m3's NaN).
    if (c->nan) {
      for (int64_t i = 0; i < na; i += 997) ((unsigned char*)a)[i] = 0x7F;
    }
  } else {
    qcuda_fill_int8(c->adt, a, na, c->extreme);
  }
  if (qcuda_is_f8(c->bdt))
    qcuda_fill_f8(c->bdt, b, c->k * c->n, c->extreme);
  else
    qcuda_fill_int8(c->bdt, b, c->k * c->n, c->extreme);
  if (c->qdq) {
    int64_t sbd[1] = {c->n};
    float* sx = qcuda_add(r, TJ_DTYPE_F32, 0, NULL);
    // float8: 1 / 400 (e4m3 saturates past 1.12); int8: 1 / 100.
    *sx = qcuda_is_f8(c->adt) ? 1.0f / 400.0f : 1.0f / 100.0f;
    qcuda_add(r, TJ_DTYPE_F32, 1, sbd);
  }
  if (c->zero_points) {
    int64_t zbd[1] = {c->n};
    qcuda_add(r, c->adt, 0, NULL);
    qcuda_add(r, c->bdt, 1, zbd);
  }
  if (c->epi == EPI_TENSOR) qcuda_add(r, TJ_DTYPE_F32, 0, NULL);
  if (c->epi == EPI_ROW_CHANNEL) {
    int64_t sad[2] = {m, 1}, sbd[1] = {c->n};
    qcuda_add(r, TJ_DTYPE_F32, 2, sad);
    qcuda_add(r, TJ_DTYPE_F32, 1, sbd);
  }
  r->yrank = ar;
  int64_t yd[3] = {c->batch, m, c->n};
  memcpy(r->ydims, c->batch ? yd : yd + 1, sizeof(int64_t) * (size_t)ar);
  r->ny = (c->batch ? c->batch : 1) * m * c->n;
  r->ydt = c->epi == EPI_NONE && !qcuda_is_f8(c->adt) && !c->qdq ? TJ_DTYPE_I32
                                                                 : TJ_DTYPE_F32;
  r->bound = NULL;
  r->f8 = qcuda_is_f8(c->adt);
  if (!r->f8 && !c->qdq) return;
  // sum_k |a b| times the scales' magnitudes: what an f32 (or the
  // tensor cores' narrower) accumulation's error is relative to.
  r->bound = calloc((size_t)(r->ny ? r->ny : 1), sizeof(double));
  const unsigned char* qa = a;
  const unsigned char* qb = b;
  int64_t batches = c->batch ? c->batch : 1;
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < c->n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < c->k; ++kk) {
          int64_t ia = (bi * m + i) * c->k + kk;
          // QDQ: |x| in place of its quantized value (the same within
          // the quantization step, less where it saturates).
          double xa = c->qdq ? (double)((const float*)a)[ia]
                             : qcuda_f8_value(c->adt, qa[ia]);
          unsigned vb = c->b_kmajor ? qb[j * c->k + kk] : qb[kk * c->n + j];
          s += fabs(xa * qcuda_f8_value(c->bdt, vb));
        }
        if (c->qdq) s *= ((const float*)r->data[r->nin - 1])[j];
        if (c->epi == EPI_TENSOR) s *= *(const float*)r->data[r->nin - 1];
        if (c->epi == EPI_ROW_CHANNEL) {
          s *= ((const float*)r->data[r->nin - 2])[i] *
               ((const float*)r->data[r->nin - 1])[j];
        }
        r->bound[(bi * m + i) * c->n + j] = s;
      }
    }
  }
}

static inline void qcuda_run_free(qcuda_run_t* r) {
  for (uint32_t i = 0; i < r->nin; ++i) free(r->data[i]);
  free(r->bound);
}

#endif  // TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_
