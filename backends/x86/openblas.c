// OpenBLAS through dlopen. See openblas.h.

#include "backends/x86/openblas.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define MAX_LIBRARIES 4

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static tj_openblas_t g_libraries[MAX_LIBRARIES];
static int g_num_libraries;

const tj_openblas_t* tj_openblas_open(const char* name, char* reason,
                                      size_t size) {
  if (!name) name = "libopenblas.so.0";
  if (!name[0] || strcmp(name, "none") == 0) {
    snprintf(reason, size, "disabled by the openblas setting \"%s\"", name);
    return NULL;
  }
  if (strlen(name) >= sizeof(g_libraries[0].name)) {
    snprintf(reason, size, "the OpenBLAS name is too long");
    return NULL;
  }
  const tj_openblas_t* found = NULL;
  pthread_mutex_lock(&g_mutex);
  for (int i = 0; i < g_num_libraries && !found; ++i) {
    if (strcmp(g_libraries[i].name, name) == 0) found = &g_libraries[i];
  }
  if (found || g_num_libraries == MAX_LIBRARIES) {
    pthread_mutex_unlock(&g_mutex);
    if (!found) snprintf(reason, size, "too many BLAS libraries opened");
    return found;
  }
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    snprintf(reason, size, "dlopen(\"%s\") failed: %s", name,
             why ? why : "unknown error");
    pthread_mutex_unlock(&g_mutex);
    return NULL;
  }
  void* sgemm = dlsym(handle, "cblas_sgemm");
  if (!sgemm) {
    snprintf(reason, size, "%s has no cblas_sgemm", name);
    dlclose(handle);
    pthread_mutex_unlock(&g_mutex);
    return NULL;
  }
  tj_openblas_t* lib = &g_libraries[g_num_libraries];
  memset(lib, 0, sizeof(*lib));
  // dlsym's object pointers become function pointers by copy (ISO C has no
  // cast between the two).
  memcpy(&lib->sgemm, &sgemm, sizeof(sgemm));
  void* p = dlsym(handle, "openblas_get_num_threads");
  if (p) memcpy(&lib->get_num_threads, &p, sizeof(p));
  p = dlsym(handle, "openblas_get_corename");
  if (p) memcpy(&lib->get_corename, &p, sizeof(p));
  p = dlsym(handle, "cblas_sbgemm");
  if (p) memcpy(&lib->sbgemm, &p, sizeof(p));
  snprintf(lib->name, sizeof(lib->name), "%s", name);
  ++g_num_libraries;  // the handle stays open for the process's lifetime
  pthread_mutex_unlock(&g_mutex);
  return lib;
}

// How cblas_sgemm sees one operand: transposed or not, and its leading
// dimension.
typedef struct operand_t {
  int trans;
  int64_t ld;
} operand_t;

// An operand with |rows| x |cols| (as the product reads it) and strides
// |s_row|, |s_col|: row-major with ld >= cols, or column-major (a
// transpose) with ld >= rows. A dim of length <= 1 never advances, so its
// stride does not matter.
static bool operand_layout(int64_t rows, int64_t cols, int64_t s_row,
                           int64_t s_col, operand_t* out) {
  int64_t min_cols = cols > 1 ? cols : 1, min_rows = rows > 1 ? rows : 1;
  if (s_col == 1 || cols <= 1) {
    int64_t ld = rows <= 1 ? min_cols : s_row;
    if (ld >= min_cols && ld <= INT_MAX) {
      *out = (operand_t){kNoTrans, ld};
      return true;
    }
  }
  if (s_row == 1 || rows <= 1) {
    int64_t ld = cols <= 1 ? min_rows : s_col;
    if (ld >= min_rows && ld <= INT_MAX) {
      *out = (operand_t){kTrans, ld};
      return true;
    }
  }
  return false;
}

typedef struct problem_t {
  int64_t dims[TJ_KIR_MAX_RANK];
  int64_t m, n, k, batch;
  uint32_t abuf, bbuf;
  operand_t a, b;
} problem_t;

static bool describe(const tj_kir_t* kernel, const int64_t* scalars,
                     problem_t* p, char* reason, size_t size) {
  memset(p, 0, sizeof(*p));
  const int32_t r = kernel->rank;
  p->batch = 1;
  for (int32_t d = 0; d < r; ++d) {
    p->dims[d] = tj_kir_ival_eval(kernel->dims[d], scalars);
    if (d + 2 < r) p->batch *= p->dims[d];
  }
  p->m = p->dims[r - 2];
  p->n = p->dims[r - 1];
  p->k = tj_kir_ival_eval(kernel->gemm_k, scalars);
  for (uint32_t b = 0; b < kernel->num_buffers; ++b) {
    if (kernel->buffers[b].role == TJ_KIR_GEMM_A) p->abuf = b;
    if (kernel->buffers[b].role == TJ_KIR_GEMM_B) p->bbuf = b;
  }
  const tj_kir_buffer_t* a = &kernel->buffers[p->abuf];
  const tj_kir_buffer_t* b = &kernel->buffers[p->bbuf];
  bool f32 = a->dtype == TJ_DTYPE_F32 && b->dtype == TJ_DTYPE_F32;
  bool bf16 = a->dtype == TJ_DTYPE_BF16 && b->dtype == TJ_DTYPE_BF16;
  if (!f32 && !bf16) {
    snprintf(reason, size, "operands are %s and %s, not both f32 or bf16",
             tj_dtype_name(a->dtype), tj_dtype_name(b->dtype));
    return false;
  }
  if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX) {
    snprintf(reason, size, "sizes exceed int");
    return false;
  }
  int64_t sa_m = tj_kir_ival_eval(a->strides[r - 2], scalars);
  int64_t sa_k = tj_kir_ival_eval(a->strides[r - 1], scalars);
  int64_t sb_k = tj_kir_ival_eval(b->strides[r - 2], scalars);
  int64_t sb_n = tj_kir_ival_eval(b->strides[r - 1], scalars);
  if (!operand_layout(p->m, p->k, sa_m, sa_k, &p->a)) {
    snprintf(reason, size, "A strides (%lld, %lld) are not a BLAS layout",
             (long long)sa_m, (long long)sa_k);
    return false;
  }
  if (!operand_layout(p->k, p->n, sb_k, sb_n, &p->b)) {
    snprintf(reason, size, "B strides (%lld, %lld) are not a BLAS layout",
             (long long)sb_k, (long long)sb_n);
    return false;
  }
  return true;
}

bool tj_openblas_gemm_applies(const tj_kir_t* kernel, const int64_t* scalars,
                              char* reason, size_t size) {
  problem_t p;
  return describe(kernel, scalars, &p, reason, size);
}

void tj_openblas_gemm(const tj_openblas_t* blas, const tj_kir_t* kernel,
                      void* const* buffers, const int64_t* scalars, float* c) {
  problem_t p;
  char reason[128];
  if (!describe(kernel, scalars, &p, reason, sizeof(reason))) return;
  if (p.m == 0 || p.n == 0) return;
  const int32_t r = kernel->rank;
  const tj_kir_buffer_t* a = &kernel->buffers[p.abuf];
  const tj_kir_buffer_t* b = &kernel->buffers[p.bbuf];
  int64_t idx[TJ_KIR_MAX_RANK] = {0};
  for (int64_t e = 0; e < p.batch; ++e) {
    int64_t aoff = 0, boff = 0;
    for (int32_t d = 0; d + 2 < r; ++d) {
      aoff += idx[d] * tj_kir_ival_eval(a->strides[d], scalars);
      boff += idx[d] * tj_kir_ival_eval(b->strides[d], scalars);
    }
    float* ce = c + e * p.m * p.n;
    if (p.k == 0) {
      memset(ce, 0, sizeof(float) * (size_t)(p.m * p.n));
    } else if (a->dtype == TJ_DTYPE_BF16) {
      if (!blas->sbgemm) return;  // excluded by the caller (openblas.h)
      blas->sbgemm(kRowMajor, p.a.trans, p.b.trans, (int)p.m, (int)p.n,
                   (int)p.k, 1.0f, (const uint16_t*)buffers[p.abuf] + aoff,
                   (int)p.a.ld, (const uint16_t*)buffers[p.bbuf] + boff,
                   (int)p.b.ld, 0.0f, ce, (int)p.n);
    } else {
      blas->sgemm(kRowMajor, p.a.trans, p.b.trans, (int)p.m, (int)p.n, (int)p.k,
                  1.0f, (const float*)buffers[p.abuf] + aoff, (int)p.a.ld,
                  (const float*)buffers[p.bbuf] + boff, (int)p.b.ld, 0.0f, ce,
                  (int)p.n);
    }
    for (int32_t d = r - 3; d >= 0; --d) {
      if (++idx[d] < p.dims[d]) break;
      idx[d] = 0;
    }
  }
}
