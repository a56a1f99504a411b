// The CUDA side of a tj_executable_t compiled for TJ_TARGET_CUDA: its
// kernels as one PTX module loaded once, its memory plan realized in device
// memory, its runs (launches, copies, graph breaks on the host) and the
// CUDA graphs that replay them.
//
// The compile driver (backends/compile.c) owns the executable and the
// target-neutral part of compiling (the middle end, the lowering of fusion
// groups to kernel IR with tj_lower_group, the run plan with the host
// subgraphs of graph breaks, specialization). Its CUDA adapter
// (cuda_backend.c) makes one program per compiled program of the
// executable (the generic one, and one per specialized shape): it hands
// each lowered group to tj_cuda_program_add_kernels, which emits it for the
// GPU or says UNSUPPORTED (the group then runs on the host; a specialization
// is then not made), and the finished step list to tj_cuda_program_finish.
//
// The device (context, stream, caching allocator) is shared by every CUDA
// executable of a tj_context_t: a context extension, created by the first.

#ifndef TJ_BACKENDS_CUDA_CUDA_EXECUTABLE_H_
#define TJ_BACKENDS_CUDA_CUDA_EXECUTABLE_H_

#include "backends/cuda/cuda_entry.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/runtime/run_plan.h"
#include "backends/runtime/run_timing.h"
#include "kir/lower.h"
#include "jit/nvptx.h"
#include "tensorjit/tj_executable.h"

typedef struct tj_cuda_program_t tj_cuda_program_t;

typedef enum tj_cuda_step_kind_e {
  TJ_CUDA_STEP_KERNELS = 0,  // kernels [first_kernel, +num_kernels)
  TJ_CUDA_STEP_HOST = 1,     // the reference interpreter (a graph break)
  // A custom op's CUDA implementation (tj_custom_op_desc_t.cuda_ptx): the
  // run plan's host call |host| launched on the device (cuda_custom.c).
  TJ_CUDA_STEP_CUSTOM = 2,
} tj_cuda_step_kind_t;

// One step of a run, in order. Everything is borrowed from the executable,
// which outlives the program.
typedef struct tj_cuda_step_t {
  tj_cuda_step_kind_t kind;
  uint32_t first_kernel, num_kernels;
  // HOST: the run plan's host step (backends/runtime/run_plan.h), run by
  // tj_host_step_run on host copies of the values it reads and writes.
  const tj_host_step_t* host;
  // The run plan's step this is, and its group's outputs (plan nodes):
  // what an observed run (tj_cuda_program_run_observed) copies back.
  uint32_t plan_step;
  const uint32_t* outputs;
  uint32_t num_outputs;
  uint32_t custom;  // CUSTOM: its index in the program (set by finish)
} tj_cuda_step_t;

// Opens the context's device (creating it on first use) and prepares an
// empty kernel module for it. UNSUPPORTED when there is no driver or GPU
// (the message says which), or the GPU is older than sm_80. On failure
// |*out| is NULL.
tj_status_t tj_cuda_program_create(tj_context_t* context,
                                   const tj_compile_options_t* options,
                                   tj_cuda_program_t** out);

// A program that opens no device: it compiles for |arch| exactly as a
// GPU of that arch would (the same emission, refusals and candidates), and
// its finish stops at PTX: nothing is loaded, tuned or run. No cuBLASLt,
// no cache. For tj_cuda_compile_ptx (CI without a GPU checks the PTX with
// ptxas). On failure |*out| is NULL.
tj_status_t tj_cuda_program_create_offline(tj_context_t* context,
                                           const tj_compile_options_t* options,
                                           tj_nvptx_arch_t arch,
                                           tj_cuda_program_t** out);

// Emits the |count| kernels of one group (borrowed until finish, which
// receives them again in the executable's kernel array, in the same
// order). UNSUPPORTED when the GPU templates cannot express one of them
// (f64 transcendentals, a tensor-core GEMM operand whose constant stride
// or offset breaks 16-byte alignment, ...): nothing of the group stays.
tj_status_t tj_cuda_program_add_kernels(tj_cuda_program_t* program,
                                        const tj_lowered_kernel_t* kernels,
                                        uint32_t count);

// Compiles the module to PTX (or takes it from the memory or disk cache:
// |cache_dir| "" for none), loads it, uploads the graph's constants and
// sets up the runs of |graph| (the plan graph) with |memplan| and |steps|.
// |kernels| is every kernel added, in order; all of it is borrowed.
tj_status_t tj_cuda_program_finish(tj_cuda_program_t* program,
                                   const tj_graph_t* graph,
                                   const tj_memplan_t* memplan,
                                   const tj_lowered_kernel_t* kernels,
                                   uint32_t num_kernels,
                                   const tj_cuda_step_t* steps,
                                   uint32_t num_steps, const char* cache_dir);

// GEMMs on tensor cores have several implementations (candidates): the
// generated kernel with four tile schedules, and cuBLASLt's matmul followed
// by the kernel's epilogue as a pointwise kernel (rank-2 GEMMs with
// row-major operands). On the first run of each shape bucket (M rounded up
// to a power of two) every candidate is timed on the run's own buffers and
// the fastest kept (jit/autotune.h: cached in memory and on disk with the
// kernels), unless autotune is TJ_AUTOTUNE_OFF (the generated kernel
// then serves). The context's cuda_gemm_candidate setting
// (TJ_CUDA_GEMM_CANDIDATE=<0..14>) forces a candidate (tests, benchmarks);
// TJ_LOG=autotune logs every decision with the candidates' timings.

// Runs the program for symbol values |sym| (bound and checked by the
// caller, as the outputs' shapes and dtypes, and their memory by
// tj_ir_check_run_memory). See tj_executable_run.
tj_status_t tj_cuda_program_run(tj_cuda_program_t* program, const int64_t* sym,
                                const tj_tensor_t* inputs,
                                const tj_tensor_t* outputs);

// tj_cuda_program_run adding each kernel's time (an event pair around each
// launch, kernel by kernel: no CUDA graph), each host step's, the copies'
// (events around them) and the set-up's (host clock) to |timing|
// (tj_executable_profile). Waits for the stream before returning.
tj_status_t tj_cuda_program_run_timed(tj_cuda_program_t* program,
                                      const int64_t* sym,
                                      const tj_tensor_t* inputs,
                                      const tj_tensor_t* outputs,
                                      tj_run_timing_t* timing);

// tj_cuda_program_run launching step by step (no CUDA graph), calling
// |observe|(|user|, plan_step, loc) after each step with |loc| host copies
// of that step's outputs (the step's |outputs|, copied back after the
// stream is synchronized; other entries NULL): tj_verify's values between
// the groups. Writes to the copies are not seen by the run.
tj_status_t tj_cuda_program_run_observed(
    tj_cuda_program_t* program, const int64_t* sym, const tj_tensor_t* inputs,
    const tj_tensor_t* outputs,
    tj_status_t (*observe)(void* user, uint32_t step,
                           unsigned char* const* loc),
    void* user);

// NULL is a no-op. Waits for the program's work first.
void tj_cuda_program_destroy(tj_cuda_program_t* program);

typedef struct tj_cuda_program_stats_t {
  double compile_ms;       // emit + LLVM + PTX (0 on a cache hit)
  double load_ms;          // cuModuleLoadDataEx, or cuModuleLoadData of a
                           // cubin; and getting the kernels
  bool from_cache;         // the PTX or the cubin came from a cache
  const char* ptx_source;  // "LLVM", "memory cache", "disk cache", or
                           // "none (...)" when a cached cubin served
  size_t ptx_bytes;
  // With a disk cache the module is loaded from a cubin (the driver's
  // linker's ptxas output), cached beside the PTX per compute capability
  // and driver version; without one, from the PTX.
  const char* cubin_source;  // "memory cache", "disk cache", "driver
                             // linker", or "none" (loaded from PTX)
  size_t cubin_bytes;
  int64_t cubin_hits;    // cubins loaded from a cache (no LLVM, no ptxas)
  int64_t cubin_misses;  // cubins made (a refused cache entry counts too)
  double link_ms;        // cuLink* (ptxas) on a miss; with chunks, the
                         // nvJitLink ms of the chunks summed
  // Chunks (TJ_CUDA_COMPILE_THREADS): the kernels' modules, those
  // compiled (not from a cubin cache) and the threads they compiled on;
  // 0 chunks: one module (compile_ms is then LLVM alone).
  uint32_t chunks, chunks_compiled, compile_threads;
  // Kernels compiled apart from the module (the GEMM variant the autotuner
  // picks, the cuBLASLt candidate's epilogue, strided-copy kernels) go
  // through the same cubin cache: loaded from it (no LLVM back end, no
  // ptxas), or made and stored. Without a disk cache neither counts.
  int64_t kernel_cubin_hits, kernel_cubin_misses;
  int64_t strided_copies;  // gathers/scatters of strided CUDA tensors
  int64_t runs;
  int64_t kernel_launches;       // cuLaunchKernel calls, captures excluded
  int64_t graph_captures;        // runs captured into a CUDA graph, each
                                 // then instantiated or used as an update
  int64_t graph_instantiations;  // ... instantiated into a graph slot
  int64_t graph_updates;      // ... that updated a slot's graph in place (the
                              // same kernels on other buffers)
  int64_t graph_launches;     // cuGraphLaunch calls
  int64_t host_steps;         // graph breaks executed
  int64_t arena_growths;      // device arena (re)allocations
  int64_t arena_bytes;        // its current size
  int64_t tunings;            // GEMM shape buckets decided by the autotuner
  int64_t tuning_cache_hits;  // ... of them from the memory or disk cache
  double tuning_ms;           // time spent measuring candidates
  char gemm_choice[64];       // the last GEMM candidate picked
  tj_cuda_allocator_stats_t allocator;  // the context's device allocator
  char device_name[128];
  char arch[16];
} tj_cuda_program_stats_t;

void tj_cuda_program_stats(tj_cuda_program_t* program,
                           tj_cuda_program_stats_t* out_stats);

// The PTX of the module (NUL-terminated, owned by the program), for
// TJ_DUMP-style inspection and tests. NULL before finish, and when the
// module was loaded from a cached cubin (no PTX was needed).
const char* tj_cuda_program_ptx(const tj_cuda_program_t* program);

// An offline program's second module after finish: every tensor-core
// GEMM kernel again with each main loop the autotuner may pick on a GPU of
// the program's arch (kVariants), and the cuBLASLt candidate's epilogue
// kernel, each entry renamed <entry>_c<candidate>; |*out_num_kernels| of
// them. NULL (and 0) without tensor-core GEMMs, with autotuning off and
// no candidate forced (a GPU run compiles none then), and for other
// programs.
const char* tj_cuda_program_variants_ptx(const tj_cuda_program_t* program,
                                         uint32_t* out_num_kernels);

// The PTX that holds kernel |index|: its chunk's (TJ_CUDA_COMPILE_THREADS)
// or the one module's; NULL when none was compiled (a cubin cache served
// it). Borrowed, valid until the program is destroyed.
const char* tj_cuda_program_kernel_ptx(const tj_cuda_program_t* program,
                                       uint32_t index);

// An offline program (tj_cuda_program_create_offline) that compiles its
// kernels as chunks on |threads| threads (0: TJ_CUDA_COMPILE_THREADS) and
// assembles them with nvJitLink where it is found, as a GPU's program
// does, instead of the one module of tj_cuda_program_ptx. Before any
// kernel is added.
void tj_cuda_program_set_offline_chunks(tj_cuda_program_t* program,
                                        uint32_t threads);

// An offline program's chunks (after finish): their number, and per
// chunk its PTX, nvJitLink's cubin (NULL without one; |*out_cubin_bytes|
// then 0), the kernels in it and its ms on its thread (LLVM and
// nvJitLink); |*out_assembler| the nvJitLink version or why none. All
// borrowed until the program is destroyed.
typedef struct tj_cuda_program_chunks_t {
  uint32_t num_chunks;
  uint32_t threads;
  double wall_ms;  // the chunks' compile, all threads
  char* const* ptx;
  void* const* cubin;
  const size_t* cubin_bytes;
  const uint32_t* chunk_of;  // per kernel
  const double* ms;
  const double* asm_ms;  // nvJitLink's part of |ms|
  const double* cpu_ms;  // the chunk's thread's CPU ms
  const char* assembler;
} tj_cuda_program_chunks_t;
void tj_cuda_program_chunks(const tj_cuda_program_t* program,
                            tj_cuda_program_chunks_t* out);

#endif  // TJ_BACKENDS_CUDA_CUDA_EXECUTABLE_H_
