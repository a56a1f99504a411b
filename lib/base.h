// Internal base: status construction, propagation macro, allocation helpers.
// Every internal file includes this first.

#ifndef TJ_LIB_BASE_H_
#define TJ_LIB_BASE_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorjit.h"

#if defined(__GNUC__)
#define TJ_LIKELY(x) __builtin_expect(!!(x), 1)
#define TJ_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TJ_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define TJ_LIKELY(x) (x)
#define TJ_UNLIKELY(x) (x)
#define TJ_PRINTF_LIKE(fmt, args)
#endif

#define TJ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

// Returns the status of |expr| from the enclosing function if it failed.
#define TJ_RETURN_IF_ERROR(expr)                            \
  do {                                                      \
    tj_status_t tj_status_ = (expr);                        \
    if (TJ_UNLIKELY(tj_status_ != NULL)) return tj_status_; \
  } while (0)

//===--- small shared helpers ---===//

// Milliseconds on the monotonic clock (for durations only).
double tj_now_ms(void);

// The power-of-two bucket of a size: 0 for |v| <= 0, else the least power
// of two >= |v|; |v| itself above 2^62, where the next power of two would
// not fit. Every shape bucket (specialization, GEMM tuning on x86 and
// CUDA) is keyed by it.
static inline int64_t tj_pow2_bucket(int64_t v) {
  if (v <= 0) return 0;
  if (v > ((int64_t)1 << 62)) return v;
  int64_t b = 1;
  while (b < v) b <<= 1;
  return b;
}

//===--- statuses ---===//

// A new status with |code| and a printf-formatted message. Never fails:
// when the message cannot be allocated the status still carries |code|
// (OUT_OF_MEMORY is returned without allocating at all).
tj_status_t tj_status_make(tj_status_code_t code, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);
tj_status_t tj_status_makev(tj_status_code_t code, const char* format,
                            va_list args);
// Shorthands.
#define tj_invalid(...) tj_status_make(TJ_STATUS_INVALID_ARGUMENT, __VA_ARGS__)
#define tj_unsupported(...) tj_status_make(TJ_STATUS_UNSUPPORTED, __VA_ARGS__)
#define tj_internal(...) tj_status_make(TJ_STATUS_INTERNAL, __VA_ARGS__)
// The allocation-free OUT_OF_MEMORY status.
tj_status_t tj_status_oom(void);
// A copy of |status| (NULL for NULL); OUT_OF_MEMORY if copying fails.
tj_status_t tj_status_clone(tj_status_t status);
// Prefixes |status|'s message with "prefix: " and returns it (consumes it).
tj_status_t tj_status_annotate(tj_status_t status, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);
// For error paths inside cleanup: returns |base| if non-NULL (freeing
// |cleanup|), else |cleanup|.
tj_status_t tj_status_join(tj_status_t base, tj_status_t cleanup);

//===--- allocation through a tj_allocator_t ---===//

// NULL on failure (or when |size| is 0).
void* tj_alloc(tj_allocator_t a, size_t size);
// Zero-filled; NULL on failure or multiplication overflow.
void* tj_calloc(tj_allocator_t a, size_t count, size_t size);
// Resizes; on failure returns NULL and leaves |ptr| valid.
void* tj_realloc(tj_allocator_t a, void* ptr, size_t old_size, size_t new_size);
// Frees |ptr| of |size| bytes. NULL is a no-op.
void tj_free(tj_allocator_t a, void* ptr, size_t size);
// A copy of NUL-terminated |s| (NULL on failure). Free with tj_free_string.
char* tj_strdup(tj_allocator_t a, const char* s);
void tj_free_string(tj_allocator_t a, char* s);

// Grows a dynamic array |*items| of |*capacity| elements of |elem_size| so
// that it holds at least |needed|. OUT_OF_MEMORY leaves it unchanged.
tj_status_t tj_array_reserve(tj_allocator_t a, void** items, uint32_t* capacity,
                             uint32_t needed, size_t elem_size);

// A reference to |context|, held by every live executable: the context's
// extensions (its JIT, pools, caches) are destroyed with the last one,
// tj_context_destroy dropping the host's (lib/context.c). NULL is a no-op
// for release.
void tj_context_retain(tj_context_t* context);
void tj_context_release(tj_context_t* context);
// The context's allocator (internal accessor).
tj_allocator_t tj_context_allocator(const tj_context_t* context);
// tj_context_options_t.retain_compiled, in [0, 64] (backends/compile_memo.c).
int32_t tj_context_retain_compiled(const tj_context_t* context);
// Sends a remark or warning down the context's diagnostic channel.
void tj_context_diagnostic(const tj_context_t* context, tj_severity_t severity,
                           const char* format, ...) TJ_PRINTF_LIKE(3, 4);
void tj_context_diagnosticv(const tj_context_t* context, tj_severity_t severity,
                            const char* format, va_list args);

// Per-context state owned by a layer above lib/ (the kernel cache of jit/,
// the CUDA runtime): one slot per id, created on first use and destroyed
// with the context, so lib/ needs no knowledge of what is stored.
typedef enum tj_context_extension_e {
  TJ_CONTEXT_EXTENSION_KERNEL_CACHE = 0,
  TJ_CONTEXT_EXTENSION_CUDA_DEVICE = 1,   // backends/cuda/cuda_program.c
  TJ_CONTEXT_EXTENSION_X86_RUNTIME = 2,   // backends/x86/x86_backend.c
  TJ_CONTEXT_EXTENSION_CUSTOM_OPS = 3,    // lib/custom_op.c (the registry)
  TJ_CONTEXT_EXTENSION_COMPILE_MEMO = 4,  // backends/compile_memo.c
  TJ_CONTEXT_EXTENSION_COUNT_,
} tj_context_extension_t;
typedef tj_status_t (*tj_extension_create_fn)(tj_context_t* context,
                                              void** out_state);
typedef void (*tj_extension_destroy_fn)(void* state);
// Returns slot |id|'s state in |*out_state|, calling |create| the first
// time (thread-safe: exactly one creation wins). |destroy| is remembered
// and called by tj_context_destroy.
tj_status_t tj_context_extension(tj_context_t* context,
                                 tj_context_extension_t id,
                                 tj_extension_create_fn create,
                                 tj_extension_destroy_fn destroy,
                                 void** out_state);

//===--- overflow-checked arithmetic ---===//

static inline bool tj_mul_overflow_i64(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline bool tj_add_overflow_i64(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

#endif  // TJ_LIB_BASE_H_
