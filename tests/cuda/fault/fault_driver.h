// The fault-injecting CUDA driver (a test library named libcuda.so.1; see
// gen_fault_driver.py): shared declarations of the generated file and its
// body. Found by the library's dlopen("libcuda.so.1") through
// LD_LIBRARY_PATH, which the test's meson entry sets.

#ifndef TJ_TESTS_CUDA_FAULT_FAULT_DRIVER_H_
#define TJ_TESTS_CUDA_FAULT_FAULT_DRIVER_H_

#include <stdbool.h>
#include <stddef.h>

#include "backends/cuda/cuda_abi.h"

#define FAULT_API __attribute__((visibility("default")))

// The control functions a test finds with dlsym on "libcuda.so.1".
// Arms a failure: the |nth| eligible driver call from now (0: the next)
// returns |result| (0: an error that fits the call, see fault_error).
// Cleanup calls (destroy, free, unload, release, pop) and error queries
// are never failed: they are what an error path runs.
FAULT_API void tj_fault_arm(long nth, int result);
FAULT_API void tj_fault_disarm(void);
// Eligible calls so far, and the call that failed last ("" if none).
FAULT_API long tj_fault_calls(void);
FAULT_API const char* tj_fault_last(void);
FAULT_API int tj_fault_last_result(void);

bool fault_resolve(void* library, const char* name, void* slot, size_t size);

#endif  // TJ_TESTS_CUDA_FAULT_FAULT_DRIVER_H_
