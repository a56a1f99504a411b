// cuBLASLt through dlopen. See cublaslt.h.
//
// The values below are cublasLt.h's and library_types.h's (CUDA 12 and
// 13 agree); opaque handles are void pointers.

#include "backends/cuda/cublaslt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

enum {
  kStatusSuccess = 0,
  kComputeF32 = 68,          // CUBLAS_COMPUTE_32F
  kComputeF32FastTf32 = 77,  // CUBLAS_COMPUTE_32F_FAST_TF32
  kR32F = 0,                 // CUDA_R_32F
  kR16F = 2,                 // CUDA_R_16F
  kR16BF = 14,               // CUDA_R_16BF
  kDescTransA = 3,           // CUBLASLT_MATMUL_DESC_TRANSA
  kDescTransB = 4,
  kDescEpilogue = 7,
  kDescBiasPointer = 8,
  kDescBiasDataType = 26,
  kEpilogueDefault = 1,  // CUBLASLT_EPILOGUE_*
  kEpilogueBias = 4,
  kEpilogueGeluBias = 36,
  kPrefMaxWorkspace = 1,  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
  kOpN = 0,               // CUBLAS_OP_N
  kOpT = 1,               // CUBLAS_OP_T
};

// cublasLtMatmulHeuristicResult_t.
typedef struct heuristic_t {
  uint64_t algo[8];
  size_t workspace_size;
  int state;
  float waves;
  int reserved[4];
} heuristic_t;

typedef int (*create_fn)(void** handle);
typedef int (*destroy_fn)(void* handle);
typedef size_t (*version_fn)(void);
typedef int (*desc_create_fn)(void** desc, int compute, int scale);
typedef int (*desc_set_fn)(void* desc, int attr, const void* buf, size_t size);
typedef int (*layout_create_fn)(void** layout, int type, uint64_t rows,
                                uint64_t cols, int64_t ld);
typedef int (*pref_create_fn)(void** pref);
typedef int (*heuristic_fn)(void* handle, void* desc, void* a, void* b, void* c,
                            void* d, void* pref, int requested,
                            heuristic_t* results, int* returned);
typedef int (*matmul_fn)(void* handle, void* desc, const void* alpha,
                         const void* a, void* adesc, const void* b, void* bdesc,
                         const void* beta, const void* c, void* cdesc, void* d,
                         void* ddesc, const void* algo, void* workspace,
                         size_t workspace_size, tj_cu_stream_t stream);

struct tj_cublaslt_t {
  tj_allocator_t al;
  void* lib;
  void* handle;
  char version[48];
  create_fn create;
  destroy_fn destroy;
  desc_create_fn desc_create;
  destroy_fn desc_destroy;
  desc_set_fn desc_set;
  layout_create_fn layout_create;
  destroy_fn layout_destroy;
  pref_create_fn pref_create;
  destroy_fn pref_destroy;
  desc_set_fn pref_set;
  heuristic_fn heuristic;
  matmul_fn matmul;
};

struct tj_cublaslt_gemm_t {
  tj_cublaslt_t* lt;
  void* desc;
  void* a;  // W
  void* b;  // X
  void* d;  // Y
  heuristic_t algo;
  tj_cublaslt_epilogue_t epilogue;
  tj_dtype_t dtype;
  size_t workspace_bytes;
};

static tj_status_t lt_status(int s, const char* call) {
  if (s == kStatusSuccess) return NULL;
  // CUBLAS_STATUS_ALLOC_FAILED is 3; NOT_SUPPORTED 15.
  if (s == 3) return tj_status_oom();
  return tj_status_make(
      s == 15 ? TJ_STATUS_UNSUPPORTED : TJ_STATUS_BACKEND_FAILURE,
      "%s: cublasStatus_t %d", call, s);
}

tj_status_t tj_cublaslt_open(tj_allocator_t allocator, tj_cublaslt_t** out) {
  *out = NULL;
  static const char* const kNames[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                       "libcublasLt.so"};
  void* lib = NULL;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNames) && !lib; ++i) {
    lib = dlopen(kNames[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib) {
    return tj_unsupported("cuBLASLt: libcublasLt.so.13/.12 not found (%s)",
                          dlerror());
  }
  tj_cublaslt_t* lt = tj_calloc(allocator, 1, sizeof(*lt));
  if (!lt) {
    dlclose(lib);
    return tj_status_oom();
  }
  lt->al = allocator;
  lt->lib = lib;
  struct {
    const char* name;
    void** slot;
  } syms[] = {
      {"cublasLtCreate", (void**)&lt->create},
      {"cublasLtDestroy", (void**)&lt->destroy},
      {"cublasLtMatmulDescCreate", (void**)&lt->desc_create},
      {"cublasLtMatmulDescDestroy", (void**)&lt->desc_destroy},
      {"cublasLtMatmulDescSetAttribute", (void**)&lt->desc_set},
      {"cublasLtMatrixLayoutCreate", (void**)&lt->layout_create},
      {"cublasLtMatrixLayoutDestroy", (void**)&lt->layout_destroy},
      {"cublasLtMatmulPreferenceCreate", (void**)&lt->pref_create},
      {"cublasLtMatmulPreferenceDestroy", (void**)&lt->pref_destroy},
      {"cublasLtMatmulPreferenceSetAttribute", (void**)&lt->pref_set},
      {"cublasLtMatmulAlgoGetHeuristic", (void**)&lt->heuristic},
      {"cublasLtMatmul", (void**)&lt->matmul},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(syms); ++i) {
    // POSIX allows converting dlsym's void* to a function pointer.
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      tj_cublaslt_close(lt);
      return tj_unsupported("cuBLASLt: symbol %s missing", syms[i].name);
    }
  }
  version_fn version = (version_fn)(uintptr_t)dlsym(lib, "cublasLtGetVersion");
  snprintf(lt->version, sizeof(lt->version), "cuBLASLt %zu",
           version ? version() : (size_t)0);
  tj_status_t status = lt_status(lt->create(&lt->handle), "cublasLtCreate");
  if (status) {
    lt->handle = NULL;
    tj_cublaslt_close(lt);
    return status;
  }
  *out = lt;
  return NULL;
}

void tj_cublaslt_close(tj_cublaslt_t* lt) {
  if (!lt) return;
  if (lt->handle) (void)lt->destroy(lt->handle);
  dlclose(lt->lib);
  tj_free(lt->al, lt, sizeof(*lt));
}

const char* tj_cublaslt_version(const tj_cublaslt_t* lt) { return lt->version; }

void tj_cublaslt_gemm_destroy(tj_cublaslt_gemm_t* g) {
  if (!g) return;
  tj_cublaslt_t* lt = g->lt;
  if (g->desc) (void)lt->desc_destroy(g->desc);
  if (g->a) (void)lt->layout_destroy(g->a);
  if (g->b) (void)lt->layout_destroy(g->b);
  if (g->d) (void)lt->layout_destroy(g->d);
  tj_free(lt->al, g, sizeof(*g));
}

tj_status_t tj_cublaslt_gemm_plan(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                  int64_t m, int64_t n, int64_t k,
                                  tj_cublaslt_epilogue_t epilogue,
                                  size_t workspace_bytes,
                                  tj_cublaslt_gemm_t** out) {
  return tj_cublaslt_gemm_plan_tf32(lt, dtype, false, m, n, k, epilogue,
                                    workspace_bytes, out);
}

tj_status_t tj_cublaslt_gemm_plan_tf32(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                       bool allow_tf32, int64_t m, int64_t n,
                                       int64_t k,
                                       tj_cublaslt_epilogue_t epilogue,
                                       size_t workspace_bytes,
                                       tj_cublaslt_gemm_t** out) {
  return tj_cublaslt_gemm_plan_ex(lt, dtype, allow_tf32, false, m, n, k,
                                  epilogue, workspace_bytes, out);
}

tj_status_t tj_cublaslt_gemm_plan_ex(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                     bool allow_tf32, bool w_transposed,
                                     int64_t m, int64_t n, int64_t k,
                                     tj_cublaslt_epilogue_t epilogue,
                                     size_t workspace_bytes,
                                     tj_cublaslt_gemm_t** out) {
  *out = NULL;
  int type;
  switch (dtype) {
    case TJ_DTYPE_BF16:
      type = kR16BF;
      break;
    case TJ_DTYPE_F16:
      type = kR16F;
      break;
    case TJ_DTYPE_F32:
      type = kR32F;
      break;
    default:
      return tj_unsupported("cuBLASLt: %s GEMM", tj_dtype_name(dtype));
  }
  if (m <= 0 || n <= 0 || k <= 0)
    return tj_invalid("cuBLASLt: GEMM of %lld x %lld x %lld", (long long)m,
                      (long long)n, (long long)k);
  tj_cublaslt_gemm_t* g = tj_calloc(lt->al, 1, sizeof(*g));
  if (!g) return tj_status_oom();
  g->lt = lt;
  g->epilogue = epilogue;
  g->dtype = dtype;
  int compute =
      dtype == TJ_DTYPE_F32 && allow_tf32 ? kComputeF32FastTf32 : kComputeF32;
  tj_status_t s = lt_status(lt->desc_create(&g->desc, compute, kR32F),
                            "cublasLtMatmulDescCreate");
  // Column-major, Y^T = W^T X^T: cuBLAS's A is W, an N x K matrix of
  // leading dim N, or with |w_transposed| ([N, K] row-major) the K x N
  // matrix of leading dim K it is, transposed.
  int op = kOpN, op_a = w_transposed ? kOpT : kOpN;
  if (!s)
    s = lt_status(lt->desc_set(g->desc, kDescTransA, &op_a, sizeof(op_a)),
                  "cublasLtMatmulDescSetAttribute");
  if (!s)
    s = lt_status(lt->desc_set(g->desc, kDescTransB, &op, sizeof(op)),
                  "cublasLtMatmulDescSetAttribute");
  int epi = epilogue == TJ_CUBLASLT_EPILOGUE_BIAS        ? kEpilogueBias
            : epilogue == TJ_CUBLASLT_EPILOGUE_BIAS_GELU ? kEpilogueGeluBias
                                                         : kEpilogueDefault;
  if (!s)
    s = lt_status(lt->desc_set(g->desc, kDescEpilogue, &epi, sizeof(epi)),
                  "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  if (!s && epilogue != TJ_CUBLASLT_EPILOGUE_NONE)
    s = lt_status(lt->desc_set(g->desc, kDescBiasDataType, &type, sizeof(type)),
                  "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  if (!s)
    s = lt_status(
        w_transposed
            ? lt->layout_create(&g->a, type, (uint64_t)k, (uint64_t)n, k)
            : lt->layout_create(&g->a, type, (uint64_t)n, (uint64_t)k, n),
        "cublasLtMatrixLayoutCreate");
  if (!s)
    s = lt_status(lt->layout_create(&g->b, type, (uint64_t)k, (uint64_t)m, k),
                  "cublasLtMatrixLayoutCreate");
  if (!s)
    s = lt_status(lt->layout_create(&g->d, type, (uint64_t)n, (uint64_t)m, n),
                  "cublasLtMatrixLayoutCreate");
  void* pref = NULL;
  if (!s)
    s = lt_status(lt->pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  if (!s)
    s = lt_status(lt->pref_set(pref, kPrefMaxWorkspace, &workspace_bytes,
                               sizeof(workspace_bytes)),
                  "cublasLtMatmulPreferenceSetAttribute");
  int found = 0;
  if (!s)
    s = lt_status(lt->heuristic(lt->handle, g->desc, g->a, g->b, g->d, g->d,
                                pref, 1, &g->algo, &found),
                  "cublasLtMatmulAlgoGetHeuristic");
  if (pref) (void)lt->pref_destroy(pref);
  if (!s && found < 1)
    s = tj_unsupported("cuBLASLt: no algorithm for %s %lld x %lld x %lld",
                       tj_dtype_name(dtype), (long long)m, (long long)n,
                       (long long)k);
  if (s) {
    tj_cublaslt_gemm_destroy(g);
    return s;
  }
  g->workspace_bytes = g->algo.workspace_size;
  *out = g;
  return NULL;
}

tj_status_t tj_cublaslt_gemm_run(const tj_cublaslt_gemm_t* g,
                                 tj_cu_deviceptr_t x, tj_cu_deviceptr_t w,
                                 tj_cu_deviceptr_t bias, tj_cu_deviceptr_t y,
                                 tj_cu_deviceptr_t workspace,
                                 tj_cu_stream_t stream) {
  return tj_cublaslt_gemm_run_c(g, x, w, bias, 0, y, workspace, stream);
}

tj_status_t tj_cublaslt_gemm_run_c(const tj_cublaslt_gemm_t* g,
                                   tj_cu_deviceptr_t x, tj_cu_deviceptr_t w,
                                   tj_cu_deviceptr_t bias, tj_cu_deviceptr_t c,
                                   tj_cu_deviceptr_t y,
                                   tj_cu_deviceptr_t workspace,
                                   tj_cu_stream_t stream) {
  tj_cublaslt_t* lt = g->lt;
  if (g->epilogue != TJ_CUBLASLT_EPILOGUE_NONE) {
    // The bias pointer is a descriptor attribute; one plan runs on one
    // stream at a time (the caller's contract), so setting it is safe.
    void* p = (void*)(uintptr_t)bias;
    TJ_RETURN_IF_ERROR(
        lt_status(lt->desc_set(g->desc, kDescBiasPointer, &p, sizeof(p)),
                  "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  // C has D's layout (the heuristic was asked with it): the algorithm
  // does not depend on beta.
  float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
  return lt_status(
      lt->matmul(lt->handle, g->desc, &alpha, (const void*)(uintptr_t)w, g->a,
                 (const void*)(uintptr_t)x, g->b, &beta,
                 (const void*)(uintptr_t)(c ? c : y), g->d, (void*)(uintptr_t)y,
                 g->d, g->algo.algo, (void*)(uintptr_t)workspace,
                 g->workspace_bytes, stream),
      "cublasLtMatmul");
}
