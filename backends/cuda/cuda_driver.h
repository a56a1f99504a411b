// The CUDA driver, opened at run time: libtensorjit has no link dependency
// on libcuda, so it builds and runs its CPU paths where no driver exists.
//
// tj_cuda_symbols_t is a table of function pointers filled from
// cuda_symbols.def by dlopen/dlsym (IREE's dynamic symbol table). Every
// driver call goes through a table, and every CUresult becomes a status in
// exactly one place, cuda_status.c (STYLE.md §3d).

#ifndef TJ_BACKENDS_CUDA_CUDA_DRIVER_H_
#define TJ_BACKENDS_CUDA_CUDA_DRIVER_H_

#include "backends/cuda/cuda_abi.h"
#include "lib/base.h"

//===--- tj_cuda_symbols_t ---===//

// A loaded driver. Plain data after initialization: copy it freely, read it
// from any thread. The driver itself is thread-safe.
typedef struct tj_cuda_symbols_t {
  void* library;       // dlopen handle; NULL when not initialized
  int driver_version;  // cuDriverGetVersion: 1000 * major + 10 * minor
#define TJ_CU_SYM(name, exported_name, params) tj_cu_result_t(*name) params;
#include "backends/cuda/cuda_symbols.def"
#undef TJ_CU_SYM
} tj_cuda_symbols_t;

// The driver library opened when no path is given.
#define TJ_CUDA_DRIVER_LIBRARY "libcuda.so.1"

// Opens the driver at |library_path| (NULL for TJ_CUDA_DRIVER_LIBRARY),
// resolves every symbol of cuda_symbols.def and calls cuInit(0).
// UNSUPPORTED, with a message that says which, when: the library cannot be
// opened (no driver installed), it lacks a symbol (driver too old), or
// cuInit fails because there is no usable GPU (CUDA_ERROR_NO_DEVICE, the
// toolkit's stub library, ...). Other cuInit failures are BACKEND_FAILURE.
// On failure |*out_symbols| is zeroed and nothing stays loaded; on success
// release it with tj_cuda_symbols_deinitialize. Thread-safe.
tj_status_t tj_cuda_symbols_initialize(const char* library_path,
                                       tj_cuda_symbols_t* out_symbols);

// Closes the library (its reference; the driver stays loaded while others
// hold it) and zeroes |symbols|. A zeroed table is a no-op.
void tj_cuda_symbols_deinitialize(tj_cuda_symbols_t* symbols);

//===--- CUresult -> tj_status_t (cuda_status.c) ---===//

// The status for |result| returned by driver function |call| ("cuMemAlloc"):
// NULL for CUDA_SUCCESS; OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY;
// UNSUPPORTED for "this machine cannot" results (no device, stub library,
// no binary or PTX JIT for this GPU, ...); BACKEND_FAILURE otherwise. The
// message names the call, the result's name and the driver's description,
// e.g. "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not found)".
// |symbols| may be NULL or only partly loaded (then the number is printed).
tj_status_t tj_cuda_result_status(const tj_cuda_symbols_t* symbols,
                                  tj_cu_result_t result, const char* call);

// The status code tj_cuda_result_status gives |result|.
tj_status_code_t tj_cuda_result_code(tj_cu_result_t result);

static inline tj_status_t tj_cuda_check(const tj_cuda_symbols_t* symbols,
                                        tj_cu_result_t result,
                                        const char* call) {
  if (TJ_LIKELY(result == TJ_CUDA_SUCCESS)) return NULL;
  return tj_cuda_result_status(symbols, result, call);
}

// Calls driver function |fn| of table |syms| with the parenthesized |args|
// and evaluates to its status:
//   status = TJ_CU_STATUS(syms, cuMemAlloc, (&ptr, bytes));
#define TJ_CU_STATUS(syms, fn, args) tj_cuda_check((syms), (syms)->fn args, #fn)

// Returns the failure of driver call |fn| from the enclosing function:
//   TJ_CU_RETURN_IF_ERROR(syms, cuStreamSynchronize, (stream));
#define TJ_CU_RETURN_IF_ERROR(syms, fn, args) \
  TJ_RETURN_IF_ERROR(TJ_CU_STATUS(syms, fn, args))

#endif  // TJ_BACKENDS_CUDA_CUDA_DRIVER_H_
