// OpenBLAS as a GEMM candidate of the x86 autotuner (gemm_tune.h), opened
// with dlopen at run time: never a link dependency, and a machine without
// it only loses a candidate.

#ifndef TJ_BACKENDS_X86_OPENBLAS_H_
#define TJ_BACKENDS_X86_OPENBLAS_H_

#include "kir/kernel_ir.h"

typedef void (*tj_cblas_sgemm_fn)(int order, int trans_a, int trans_b, int m,
                                  int n, int k, float alpha, const float* a,
                                  int lda, const float* b, int ldb, float beta,
                                  float* c, int ldc);

// cblas_sbgemm: bf16 (uint16_t bit patterns) operands, f32 C.
typedef void (*tj_cblas_sbgemm_fn)(int order, int trans_a, int trans_b, int m,
                                   int n, int k, float alpha, const uint16_t* a,
                                   int lda, const uint16_t* b, int ldb,
                                   float beta, float* c, int ldc);

typedef struct tj_openblas_t {
  tj_cblas_sgemm_fn sgemm;
  // NULL when the library lacks it (OpenBLAS built without
  // BUILD_BFLOAT16, as Debian 12's 0.3.21 is).
  tj_cblas_sbgemm_fn sbgemm;
  int (*get_num_threads)(void);  // NULL when the library lacks it
  char* (*get_corename)(void);   // NULL when the library lacks it
  char name[256];                // the file name or path that was opened
} tj_openblas_t;

// The OpenBLAS of this process: the library |name| (a file name or a path:
// the context's openblas setting, TJ_OPENBLAS; "" or "none" disables the
// candidate, e.g. to test its absence), NULL for "libopenblas.so.0". Each
// name is opened once and kept for
// the process's lifetime: unloading OpenBLAS while its worker threads
// exist is not safe. Returns NULL when the library cannot be opened or has
// no cblas_sgemm, with the reason in |reason| (|size| bytes).
const tj_openblas_t* tj_openblas_open(const char* name, char* reason,
                                      size_t size);

// Whether |kernel| (a finalized GEMM) can be computed by cblas_sgemm with
// |scalars|: f32 operands (or bf16 ones, for cblas_sbgemm, which the
// caller must check |blas->sbgemm| for), A and B each contiguous along one
// of their two dims (a transpose is a flag), sizes and leading dimensions
// within int. When not, |reason| says why.
bool tj_openblas_gemm_applies(const tj_kir_t* kernel, const int64_t* scalars,
                              char* reason, size_t size);

// C = A @ B for |kernel| on |buffers| and |scalars| (which must pass
// tj_openblas_gemm_applies), one cblas_sgemm (cblas_sbgemm for bf16) per
// batch entry, into |c|: dense row-major f32 [batch.., M, N].
void tj_openblas_gemm(const tj_openblas_t* blas, const tj_kir_t* kernel,
                      void* const* buffers, const int64_t* scalars, float* c);

#endif  // TJ_BACKENDS_X86_OPENBLAS_H_
