// libtensorjit: base types shared by every part of the public API.
//
// Version, export macro, status objects, the injected allocator, dtypes and
// the context. Include <tensorjit.h> rather than this file directly.

#ifndef TENSORJIT_TJ_BASE_H_
#define TENSORJIT_TJ_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Export and version
//===----------------------------------------------------------------------===//

#if defined(TJ_BUILDING_LIBRARY) && defined(__GNUC__)
#define TJ_API __attribute__((visibility("default")))
#else
#define TJ_API
#endif

#define TJ_VERSION_MAJOR 0
#define TJ_VERSION_MINOR 1
#define TJ_VERSION_PATCH 0
// MAJOR * 10000 + MINOR * 100 + PATCH, as compiled into the caller.
#define TJ_VERSION_NUMBER \
  (TJ_VERSION_MAJOR * 10000 + TJ_VERSION_MINOR * 100 + TJ_VERSION_PATCH)

// The version of the library actually loaded, in TJ_VERSION_NUMBER form.
// Compare with TJ_VERSION_NUMBER to detect a header/library mismatch.
TJ_API uint32_t tj_version_number(void);

// "MAJOR.MINOR.PATCH". Static storage; never free it.
TJ_API const char* tj_version_string(void);

//===----------------------------------------------------------------------===//
// tj_status_t
//===----------------------------------------------------------------------===//

// The result of every fallible call. NULL means success. A non-NULL status is
// owned by the caller and must be freed with tj_status_free.
typedef struct tj_status_s* tj_status_t;

// Keep this list short. When to use each code:
typedef enum tj_status_code_e {
  TJ_STATUS_OK = 0,
  // The caller's input is wrong: shapes, dtypes, symbol values, malformed
  // .tj text, a corrupt cache file. Fix the input.
  TJ_STATUS_INVALID_ARGUMENT = 1,
  // A host or device allocation failed. Nothing was leaked; retrying with
  // more memory may succeed. LLVM running out of memory in a compile is
  // this too (never an abort); that compile's LLVM state is then abandoned
  // rather than freed, since LLVM cannot unwind it.
  TJ_STATUS_OUT_OF_MEMORY = 2,
  // The request is valid but this build, backend or machine cannot do it.
  TJ_STATUS_UNSUPPORTED = 3,
  // LLVM, the CUDA driver or libffi refused; the message says which and why.
  TJ_STATUS_BACKEND_FAILURE = 4,
  // A libtensorjit bug. Please report it with the message.
  TJ_STATUS_INTERNAL = 5,
} tj_status_code_t;

// The code of |status|; TJ_STATUS_OK for NULL.
TJ_API tj_status_code_t tj_status_code(tj_status_t status);

// The message of |status|. Borrowed: valid until tj_status_free(status).
// "" for NULL.
TJ_API const char* tj_status_message(tj_status_t status);

// A static name for |code|, e.g. "INVALID_ARGUMENT".
TJ_API const char* tj_status_code_name(tj_status_code_t code);

// Frees |status|. NULL is a no-op.
TJ_API void tj_status_free(tj_status_t status);

//===----------------------------------------------------------------------===//
// tj_allocator_t
//===----------------------------------------------------------------------===//

// One function does all host allocation (Lua's lua_Alloc): it allocates when
// |ptr| is NULL, frees when |new_size| is 0 (returning NULL), and otherwise
// resizes. It must return NULL on failure and leave |ptr| untouched. Results
// must be aligned for any C object (as malloc). May be called from any thread
// that uses the objects created with it, and from the library's own threads
// (the x86 back end's thread pool; the build of a kernel set's deferred code
// that tj_compile starts in the background): it must be thread-safe.
typedef void* (*tj_alloc_fn)(void* user_data, void* ptr, size_t old_size,
                             size_t new_size);

typedef struct tj_allocator_t {
  tj_alloc_fn fn;
  void* user_data;
} tj_allocator_t;

// The C library's malloc/realloc/free.
TJ_API tj_allocator_t tj_allocator_system(void);

//===----------------------------------------------------------------------===//
// tj_dtype_t
//===----------------------------------------------------------------------===//

typedef enum tj_dtype_e {
  TJ_DTYPE_F32 = 0,
  TJ_DTYPE_F16 = 1,   // IEEE binary16
  TJ_DTYPE_BF16 = 2,  // bfloat16: the upper half of an f32
  TJ_DTYPE_F64 = 3,
  TJ_DTYPE_I8 = 4,
  TJ_DTYPE_I32 = 5,
  TJ_DTYPE_I64 = 6,
  TJ_DTYPE_BOOL = 7,  // one byte, 0 or 1
  TJ_DTYPE_U8 = 8,    // unsigned 8-bit integer (wraps modulo 256)
  // 8-bit floats (ONNX float8e4m3fn and float8e5m2), storage dtypes: only
  // casts, movement ops, where, quantize and dequantize take them. E4M3FN:
  // bias 7, max 448, no infinity, NaN S.1111.111. E5M2: bias 15, max 57344,
  // infinities S.11111.00, NaN S.11111.{01,10,11}. Conversions to them round
  // to nearest even and saturate (out-of-range values and infinities become
  // +-max, as ONNX Cast with saturate=1); NaN becomes S.1111111 (0x7F, 0xFF).
  TJ_DTYPE_F8E4M3 = 9,
  TJ_DTYPE_F8E5M2 = 10,
  // More integers (issue 15). Arithmetic wraps modulo 2^bits as numpy;
  // unsigned values compare, divide, shift right and convert to floats as
  // unsigned; a float converts to them as to the other integers (truncated
  // toward zero; NaN and values whose truncation does not fit give 0).
  TJ_DTYPE_I16 = 11,
  TJ_DTYPE_U16 = 12,
  TJ_DTYPE_U32 = 13,
  TJ_DTYPE_U64 = 14,
  // The other narrow formats of ONNX (onnx 1.14 to 1.23), one element per
  // byte (ONNX packs the 4- and 2-bit ones in its files; the importer
  // unpacks them). Storage dtypes like float8 above: only casts, movement,
  // where, quantize and dequantize take them.
  // E4M3FNUZ: bias 8, max 240; E5M2FNUZ: bias 16, max 57344. Neither has
  // an infinity or a negative zero; their one NaN is 0x80.
  TJ_DTYPE_F8E4M3FNUZ = 15,
  TJ_DTYPE_F8E5M2FNUZ = 16,
  // float4 E2M1 in the low 4 bits (sign bit 3): bias 1, max 6, no infinity
  // or NaN (infinities become +-6, NaN -0 as in ONNX's reference).
  TJ_DTYPE_F4E2M1 = 17,
  // E8M0: an unsigned power of two 2^(bits - 127), 0xFF is NaN. Casts to it
  // round up (ONNX Cast's default round_mode) and saturate to 2^127.
  TJ_DTYPE_F8E8M0 = 18,
  // 4- and 2-bit integers, held at their value in a byte: [-8, 7], [0, 15],
  // [-2, 1], [0, 3]. Casts convert as to the other integers (floats
  // truncate toward zero, NaN and out-of-range values give 0; integers
  // wrap).
  TJ_DTYPE_I4 = 19,
  TJ_DTYPE_U4 = 20,
  TJ_DTYPE_I2 = 21,
  TJ_DTYPE_U2 = 22,
  TJ_DTYPE_COUNT_ = 23,
} tj_dtype_t;

// "f32", "f16", ...; "?" for an out-of-range value. Static storage.
TJ_API const char* tj_dtype_name(tj_dtype_t dtype);

// Size of one element in bytes; 0 for an out-of-range value.
TJ_API size_t tj_dtype_size(tj_dtype_t dtype);

//===----------------------------------------------------------------------===//
// tj_context_t
//===----------------------------------------------------------------------===//

// Severity of a message on the diagnostic channel.
typedef enum tj_severity_e {
  TJ_SEVERITY_REMARK = 0,
  TJ_SEVERITY_WARNING = 1,
} tj_severity_t;

// Receives remarks and warnings (recompiles, graph breaks, pass timings when
// the context's log setting, TJ_LOG, asks for them). May be called on any
// thread; must not call back into libtensorjit. |message| is borrowed for the
// duration of the call and is not NUL-terminated necessarily: use |length|.
typedef void (*tj_diagnostic_fn)(tj_severity_t severity, const char* message,
                                 size_t length, void* user_data);

typedef struct tj_context_options_t {
  // sizeof(tj_context_options_t) as the caller was compiled, set by
  // tj_context_options_initialize. tj_context_create rejects a size it does
  // not know (INVALID_ARGUMENT), so that fields can be added later without
  // breaking callers compiled against this header: always start from
  // tj_context_options_initialize.
  size_t struct_size;
  // Host memory for everything created in the context. {NULL, NULL} means
  // tj_allocator_system().
  tj_allocator_t allocator;
  // NULL means: write diagnostics to stderr.
  tj_diagnostic_fn diagnostic_fn;
  void* diagnostic_user_data;

  // Diagnostic and debugging settings, fixed when the context is created.
  // Each NULL field takes the value of the environment variable named
  // beside it, read then (and only then: a later setenv changes nothing);
  // a non-NULL one wins over the environment, and "" means off. Strings
  // are copied. The syntax is the variable's (see README, "Diagnostics").
  //
  // TJ_LOG: comma list of passes, fusion, recompiles, cache, graph_breaks,
  // autotune, profile (tj_executable_profile's table), or all; an unknown
  // name is ignored with one warning per process.
  const char* log;
  // TJ_PRINT_AFTER: a pass name (or all) whose result is printed to
  // stderr after it runs; a name that is no pass warns once per process.
  const char* print_after;
  // TJ_DUMP_DIR: a directory (created when missing) that receives the
  // fusion groups as Graphviz files.
  const char* dump_dir;
  // TJ_X86_ISA: host, amx, avx512, x86-64-v4, avx2, x86-64-v3 (AVX2
  // without the host's AVX-VNNI) or sse2: the x86 level
  // code is generated for (only as high as the host has; an unknown or
  // unavailable level fails the x86 compile). amx is AVX-512 with AMX
  // int8 tiles for integer GEMMs, and bf16 tiles for bf16 GEMMs where the
  // CPU has amx-bf16 too (host picks it where the CPU has the int8 tiles
  // and Linux grants the tile permission); avx512 leaves the tiles out.
  const char* x86_isa;
  // The kernel cache directory used when tj_compile_options_t.cache_dir is
  // NULL. NULL here: $TJ_CACHE_DIR, else $XDG_CACHE_HOME/tensorjit, else
  // $HOME/.cache/tensorjit (each only if absolute), else none. "" disables
  // the disk cache.
  const char* cache_dir;
  // TJ_OPENBLAS: the library x86 GEMM autotuning opens for its OpenBLAS
  // candidate (default libopenblas.so.0); "" or "none" leaves it out.
  const char* openblas;
  // TJ_CUDA_GEMM_CANDIDATE: a number (0-17) that forces every CUDA
  // GEMM that has autotuning candidates to one of them (for testing each
  // of them; 12 to 14 are split-K, which exact f32 GEMMs have too).
  const char* cuda_gemm_candidate;

  // How many compiled executables (x86, without specialization) the
  // context keeps after their last release, together holding at most
  // 64 MiB of constants, so that compiling an equal graph again (a model
  // reloaded, a stack of layers built again) takes one back instead of
  // compiling: least recently used first out, all freed with the context.
  // 0: each executable's code is unloaded at its last release. At most 64;
  // tj_context_options_initialize sets 8. Available since: 0.1.
  int32_t retain_compiled;
} tj_context_options_t;

// Fills |options| with the defaults and sets |struct_size|.
TJ_API void tj_context_options_initialize(tj_context_options_t* options);

// Everything shared by the graphs and executables of one host: allocator,
// diagnostics. Must outlive every graph created from it. Each executable
// holds a reference of its own: tj_context_destroy may come before the
// release of the last executable (in any order, as garbage collectors
// release at exit); the context's JIT, threads and caches then go with
// that last release. Thread-safe.
typedef struct tj_context_t tj_context_t;

// Creates a context. |options| may be NULL for the defaults; it is copied.
// On success |*out_context| is owned by the caller (tj_context_destroy); on
// failure it is NULL.
TJ_API tj_status_t tj_context_create(const tj_context_options_t* options,
                                     tj_context_t** out_context);

// Destroys |context|, or drops the host's reference while executables
// still hold it (see above). Either way its diagnostic_fn is not called
// once this returns. NULL is a no-op.
TJ_API void tj_context_destroy(tj_context_t* context);

// Blocks until every GEMM tuning job queued in the background
// (TJ_AUTOTUNE_BACKGROUND, tj_executable.h) has finished and published its
// decision, so that the next run of each executable serves the tuned
// kernel: for tests, benchmarks and hosts that want a warmed-up executable
// before timing it. Returns at once when nothing is queued or running.
// Thread-safe. Available since: 0.1.
TJ_API void tj_context_wait_autotune(tj_context_t* context);

// Frees a NUL-terminated string that a tj_* call returned as "owned by the
// caller" (e.g. tj_graph_print). NULL is a no-op.
TJ_API void tj_context_free_string(tj_context_t* context, char* string);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_BASE_H_
