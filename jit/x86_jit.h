// The x86 JIT: kernel IR -> optimized object code -> callable functions,
// through LLVM 19's C API (one ORC LLJIT per tj_x86_jit_t).
//
// Cold path:  tj_x86_jit_compile: emit LLVM IR (jit/emit_*.c), run
//             "default<O3>" with a TargetMachine for the chosen CPU (LLJIT
//             itself optimizes nothing), emit an ELF object to memory.
// Warm path:  tj_x86_jit_load: object bytes (from the compile above or from
//             a disk cache) -> a fresh JITDylib -> link on first lookup.
// The object bytes are all a cache needs to store; tj_x86_jit_target_key
// names everything that must match for them to be reusable.

#ifndef TJ_JIT_X86_JIT_H_
#define TJ_JIT_X86_JIT_H_

#include "kir/kernel_ir.h"

//===--- tj_x86_jit_t ---===//

// Instruction-set level of the generated code. HOST picks the best level
// the running CPU supports (AVX-512 with 16 f32 lanes when it has
// avx512f/bw/dq/vl, else AVX2+FMA+F16C with 8, else SSE2 with 4); the
// others force a level (UNSUPPORTED if the host lacks it), for tests and
// for portable caches.
typedef enum tj_x86_isa_e {
  TJ_X86_ISA_HOST = 0,
  TJ_X86_ISA_AVX512 = 1,
  TJ_X86_ISA_AVX2 = 2,
  TJ_X86_ISA_SSE2 = 3,
  // x86-64-v4: AVX-512 F/BW/CD/DQ/VL and nothing newer (no avx512bf16),
  // 16 lanes: a portable AVX-512 level, and how tests run the AVX-512 code
  // without the extensions this host may have.
  TJ_X86_ISA_X86_64_V4 = 4,
  // AVX-512 with AMX int8 tiles (issue 17): the host's AVX-512 level plus
  // amx-tile and amx-int8, whose integer GEMMs run on the tiles (and its
  // bf16 GEMMs too where the CPU has amx-bf16). Needs the
  // CPU's AMX and the kernel's permission for tile data
  // (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once per process): HOST picks
  // it where both are there; AVX512 is the same level without AMX.
  TJ_X86_ISA_AMX = 5,
  // x86-64-v3: AVX2+FMA+F16C and nothing newer (no AVX-VNNI), 8 lanes: the
  // AVX2 machines without VNNI (CI's), which AVX2 on a newer host is not
  // (it keeps the host's AVX-VNNI for integer GEMMs).
  TJ_X86_ISA_X86_64_V3 = 6,
} tj_x86_isa_t;

// The level named |name|: "host", "amx", "avx512", "x86-64-v4", "avx2",
// "x86-64-v3" or "sse2"
// (TJ_X86_ISA's values). False, with |*out| untouched, for any other name.
bool tj_x86_isa_from_name(const char* name, tj_x86_isa_t* out);

// The name tj_x86_isa_from_name takes for |isa|.
const char* tj_x86_isa_name(tj_x86_isa_t isa);

typedef struct tj_x86_jit_options_t {
  tj_x86_isa_t isa;
  // With TJ_X86_ISA_AMX: generate code for a CPU with AMX (Sapphire
  // Rapids) whether or not this host has it, to test that code on any
  // host. Other levels still need the host's support. Such a JIT compiles
  // and prints but refuses to load (UNSUPPORTED).
  bool compile_only;
} tj_x86_jit_options_t;

// A JIT for one CPU target: TargetMachines (for optimization and object
// emission) and one LLJIT (for linking objects into this process). One
// serves all executables of a context (backends/x86/x86_backend.h).
// Thread-safe: compiles (each with a TargetMachine of its own), loads,
// lookups, unloads and calls of loaded kernels may run on any threads at
// once.
typedef struct tj_x86_jit_t tj_x86_jit_t;

// Creates a JIT. |options| may be NULL (HOST). On success |*out_jit| is
// owned by the caller; destroy with tj_x86_jit_destroy. On failure it is
// NULL: UNSUPPORTED when the requested level is not available,
// BACKEND_FAILURE when LLVM refuses, OUT_OF_MEMORY.
tj_status_t tj_x86_jit_create(tj_allocator_t allocator,
                              const tj_x86_jit_options_t* options,
                              tj_x86_jit_t** out_jit);

// Destroys |jit| and unloads all code it loaded; every tj_x86_module_t
// from it must have been destroyed first. NULL is a no-op.
void tj_x86_jit_destroy(tj_x86_jit_t* jit);

// The level |jit| generates code for: never HOST (HOST is resolved to the
// level the CPU has).
tj_x86_isa_t tj_x86_jit_isa(const tj_x86_jit_t* jit);

// f32 lanes per vector of the generated code (16, 8 or 4): the value
// tj_kir_launch_info needs.
int32_t tj_x86_jit_lanes(const tj_x86_jit_t* jit);

// Whether GEMM |k| compiled by |jit| would read a prepacked 8-bit B
// (tj_kir_t.b_prepacked; tj_emit_gemm_prepacks_b for the JIT's target).
bool tj_x86_jit_gemm_prepacks_b(const tj_x86_jit_t* jit, const tj_kir_t* k);

// Everything an object's validity depends on besides the kernel IR: LLVM
// version, triple, CPU name, the full feature string, opt level,
// relocation and code model, lanes. Borrowed; valid until |jit| is
// destroyed.
const char* tj_x86_jit_target_key(const tj_x86_jit_t* jit);

// Counters for tests and logs (e.g. "a warm start invoked LLVM 0 times").
typedef struct tj_x86_jit_stats_t {
  uint64_t compiles;      // tj_x86_jit_compile calls that ran LLVM
  uint64_t loads;         // objects loaded
  uint64_t compile_ns;    // total time in compile, of which:
  uint64_t emit_ns;       //   building and verifying the LLVM IR
  uint64_t opt_ns;        //   the O3 pipeline
  uint64_t codegen_ns;    //   instruction selection to object bytes
  uint64_t live_modules;  // loaded and not yet destroyed
  uint64_t dylibs;        // JITDylibs ever created (kept for reuse; the C API
                    // cannot remove them): at most the peak of live_modules
} tj_x86_jit_stats_t;
void tj_x86_jit_stats(const tj_x86_jit_t* jit, tj_x86_jit_stats_t* out_stats);

//===--- compiling ---===//

// Object code of one module. |data| is allocated from |allocator|.
typedef struct tj_x86_object_t {
  tj_allocator_t allocator;
  uint8_t* data;
  size_t size;
} tj_x86_object_t;

// Frees the bytes of |object| (filled by tj_x86_jit_compile). Idempotent.
void tj_x86_object_deinitialize(tj_x86_object_t* object);

// Compiles the finalized |kernels| into one object whose functions are
// "tj_kernel_<name>". |object| is filled on success and zeroed on failure.
tj_status_t tj_x86_jit_compile(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, tj_x86_object_t* object);

// Hot and cold parts. A generic GEMM kernel carries a path that only
// small M runs take (the small-M function of jit/emit_gemm.c and the
// microkernels it calls); it is most of the kernel's LLVM time, so an
// executable compiles its kernel set without it (the HOT part) and the
// COLD part when a run first calls into it. The cold part is every
// internal void function that an emitter marked with the string attribute
// "tj-deferrable", less those that call a function with a body that
// stays hot. In the hot part each deferred function that hot code calls
// is a trampoline: it calls through the pointer @tj_lazy_fp_<i> (i in
// [0, @tj_lazy_count)), and while that is null asks the function at
// @tj_lazy_resolve with (@tj_lazy_ctx, i) for it; a null answer skips the
// call (the caller then reports the failure). Deferred functions that
// only other deferred ones call are absent from the hot part (their
// slots are still there). The cold part defines the functions as
// tj_cold_<i>. The loader of a hot part fills @tj_lazy_resolve and
// @tj_lazy_ctx (tj_x86_module_lookup_data) before any call. @tj_lazy_count
// is in every hot part (0: nothing deferred).
typedef enum tj_x86_part_e {
  TJ_X86_PART_ALL = 0,   // the whole module
  TJ_X86_PART_HOT = 1,   // with trampolines for the deferred functions
  TJ_X86_PART_COLD = 2,  // only the deferred functions
} tj_x86_part_t;

// At most this many functions of one module are deferred.
#define TJ_X86_MAX_COLD 64

// tj_x86_jit_compile for |part|; |*out_num_cold| is the number of deferred
// functions (the same for both parts of the same kernels).
tj_status_t tj_x86_jit_compile_part(tj_x86_jit_t* jit,
                                    const tj_kir_t* const* kernels,
                                    uint32_t num_kernels, tj_x86_part_t part,
                                    tj_x86_object_t* object,
                                    int32_t* out_num_cold);

// The module's LLVM IR as text, before (|optimized| false) or after the O3
// pipeline, for dumps and FileCheck tests. Free with tj_free_string(
// allocator of |jit|, text). On failure |*out_text| is NULL.
tj_status_t tj_x86_jit_emit_ir(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, bool optimized,
                               char** out_text);

// tj_x86_jit_emit_ir for |part| of the module.
tj_status_t tj_x86_jit_emit_ir_part(tj_x86_jit_t* jit,
                                    const tj_kir_t* const* kernels,
                                    uint32_t num_kernels, tj_x86_part_t part,
                                    bool optimized, char** out_text);

// The module's optimized assembly as text (same ownership as emit_ir).
tj_status_t tj_x86_jit_emit_asm(tj_x86_jit_t* jit,
                                const tj_kir_t* const* kernels,
                                uint32_t num_kernels, char** out_text);

//===--- loading ---===//

// Code loaded into a JIT. Thread-safe.
typedef struct tj_x86_module_t tj_x86_module_t;

// Loads object bytes produced by tj_x86_jit_compile with a JIT of the same
// target key (|data| is copied). Symbols are resolved at the first lookup;
// a malformed object fails there or here with BACKEND_FAILURE. On success
// |*out_module| is owned by the caller (tj_x86_module_destroy); on failure
// it is NULL.
tj_status_t tj_x86_jit_load(tj_x86_jit_t* jit, const void* data, size_t size,
                            tj_x86_module_t** out_module);

// The compiled kernel named |kernel_name| (the kernel IR name). Valid until
// |module| is destroyed. On failure |*out_fn| is NULL.
tj_status_t tj_x86_module_lookup(tj_x86_module_t* module,
                                 const char* kernel_name, tj_kir_fn_t* out_fn);

// The address of global symbol |symbol| (data or code, no prefix) in
// |module|. Valid until |module| is destroyed. On failure
// |*out_address| is NULL.
tj_status_t tj_x86_module_lookup_data(tj_x86_module_t* module,
                                      const char* symbol, void** out_address);

// tj_x86_module_lookup_data for |num_symbols| (<= 80) symbols in one ORC
// lookup: each costs a round trip through the session, which a warm start
// pays for every symbol. On failure every address is NULL.
tj_status_t tj_x86_module_lookup_symbols(tj_x86_module_t* module,
                                         const char* const* symbols,
                                         size_t num_symbols,
                                         void** out_addresses);

// Unloads the module's code. NULL is a no-op.
void tj_x86_module_destroy(tj_x86_module_t* module);

#endif  // TJ_JIT_X86_JIT_H_
