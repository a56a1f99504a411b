// The 8-bit GEMM on CUDA (issue 17, jit/emit_nvptx_qgemm.c): the graphs
// shared by tests/unit/qgemm_ptx_test.c (their PTX through ptxas, no GPU)
// and tests/cuda/cuda_qgemm_test.c (their numbers on the GPU against
// tj_reference_run). Each case is matmul_i32 (or matmul_integer with zero
// points) of i8/u8 operands, B k-contiguous (transpose of an [N, K] input,
// as Linear weights are stored) or n-contiguous ([K, N]), with an
// epilogue: none (i32 out), or the dequantization f32(acc) * sa * sb with
// per-tensor or per-row (sa [M, 1]) and per-channel (sb [N]) scales.

#ifndef TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_
#define TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_

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
} qcuda_case_t;

static const qcuda_case_t kQcudaCases[] = {
    {"s8s8_kmajor_128", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 128, 128, 256, true,
     EPI_NONE, false, false, false, false},
    {"s8s8_nmajor_edges", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 200, 144, 272, false,
     EPI_NONE, false, true, false, false},
    {"u8u8_nmajor_m1", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 1, 64, 64, false, EPI_NONE,
     false, false, false, false},
    {"s8s8_kmajor_extreme", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 77, 300, 528, true,
     EPI_NONE, false, true, false, false},
    {"u8u8_nmajor_extreme", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 64, 192, 400, false,
     EPI_NONE, false, true, false, false},
    {"u8u8_batch", TJ_DTYPE_U8, TJ_DTYPE_U8, 3, 65, 96, 144, false, EPI_NONE,
     false, false, false, false},
    {"s8s8_kmajor_dequant_row_channel", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 257, 384,
     1024, true, EPI_ROW_CHANNEL, false, false, false, false},
    {"s8s8_nmajor_dequant_tensor", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 130, 208, 320,
     false, EPI_TENSOR, false, false, false, false},
    {"u8u8_zero_points_dequant", TJ_DTYPE_U8, TJ_DTYPE_U8, 0, 96, 160, 192,
     true, EPI_ROW_CHANNEL, true, false, false, false},
    {"s8s8_symbolic_m", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 300, 256, 512, true,
     EPI_ROW_CHANNEL, false, false, true, false},
    {"s8s8_nmajor_large", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 1024, 1024, 1024, false,
     EPI_NONE, false, false, false, false},
    // K = 100: A's rows are not 16 bytes apart; the group runs on the host.
    {"s8s8_k100_host", TJ_DTYPE_I8, TJ_DTYPE_I8, 0, 33, 64, 100, true, EPI_NONE,
     false, false, false, true},
    // Mixed signs: the u8 operand flipped to s8, the other's sums added.
    {"u8s8_nmajor_mixed", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 48, 64, 128, false,
     EPI_NONE, false, false, false, false},
    {"u8s8_kmajor_mixed_extreme", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 200, 136, 400,
     true, EPI_NONE, false, true, false, false},
    {"s8u8_kmajor_mixed_extreme", TJ_DTYPE_I8, TJ_DTYPE_U8, 0, 77, 300, 528,
     true, EPI_NONE, false, true, false, false},
    {"s8u8_nmajor_mixed_edges", TJ_DTYPE_I8, TJ_DTYPE_U8, 2, 130, 208, 272,
     false, EPI_NONE, false, false, false, false},
    // ONNX's DynamicQuantizeLinear -> MatMulInteger: u8 activations with a
    // zero point, s8 weights.
    {"u8s8_zero_points_dequant", TJ_DTYPE_U8, TJ_DTYPE_I8, 0, 96, 160, 192,
     true, EPI_ROW_CHANNEL, true, false, false, false},
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
  tj_value_t a =
      tj_graph_input(g, c->adt, ar, c->batch ? adims : adims + 1, "a");
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
  if (c->zero_points) {
    int64_t zbd[1] = {c->n};
    tj_value_t za = tj_graph_input(g, c->adt, 0, NULL, "za");
    tj_value_t zb = tj_graph_input(g, c->bdt, 1, zbd, "zb");
    y = tj_graph_matmul_integer(g, a, b, za, zb);
  } else {
    y = tj_graph_matmul_i32(g, a, b);
  }
  if (c->epi != EPI_NONE) {
    y = tj_graph_cast(g, y, TJ_DTYPE_F32);
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
  else
    qcuda_fill_int8(dt, r->data[i], n, false);
  return r->data[i];
}

static inline void qcuda_run_make(const qcuda_case_t* c, int64_t m,
                                  qcuda_run_t* r) {
  memset(r, 0, sizeof(*r));
  int64_t ad[3] = {c->batch, m, c->k};
  int32_t ar = c->batch ? 3 : 2;
  void* a = qcuda_add(r, c->adt, ar, c->batch ? ad : ad + 1);
  int64_t bd[2] = {c->b_kmajor ? c->n : c->k, c->b_kmajor ? c->k : c->n};
  void* b = qcuda_add(r, c->bdt, 2, bd);
  qcuda_fill_int8(c->adt, a, (c->batch ? c->batch : 1) * m * c->k, c->extreme);
  qcuda_fill_int8(c->bdt, b, c->k * c->n, c->extreme);
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
  r->ydt = c->epi == EPI_NONE ? TJ_DTYPE_I32 : TJ_DTYPE_F32;
}

static inline void qcuda_run_free(qcuda_run_t* r) {
  for (uint32_t i = 0; i < r->nin; ++i) free(r->data[i]);
}

#endif  // TJ_TESTS_UNIT_QGEMM_CUDA_CASES_H_
