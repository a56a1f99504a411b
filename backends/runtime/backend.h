// The backend interface: what a target implements so that the compile
// driver (backends/compile.c) can compile and run a graph on it. In the
// spirit of IREE's HAL driver/executable split: the driver owns everything
// target-neutral (options, the pass pipeline, lowering every fusion group
// once, the run plan with its graph breaks, shape guards, specialization
// and bucketing, the executable object, refcounts, stats), a backend turns
// a lowered program into something it can run and runs it.
//
// Per executable a backend has one |target| (its state: a JIT, a device, a
// frame pool, counters), opened first so that a target that cannot work
// here (no GPU) fails the compile before the middle end runs. A target
// compiles programs: the generic one (every symbolic size a scalar param)
// and, under a specialization policy, one per shape (every size a
// constant), all over the same run plan.
//
// Implementations: backends/x86/x86_program.c (tj_backend_x86),
// backends/cuda/cuda_backend.c (tj_backend_cuda), and
// backends/reference/reference_backend.c (tj_backend_reference). Only the
// driver names them all.

#ifndef TJ_BACKENDS_RUNTIME_BACKEND_H_
#define TJ_BACKENDS_RUNTIME_BACKEND_H_

#include "backends/runtime/run_plan.h"
#include "backends/runtime/run_timing.h"
#include "tensorjit/tj_executable.h"

// What a target is opened with. Everything is borrowed from the
// executable, which outlives the target; |options| holds the caller's
// strings (pipeline, cache_dir) only until tj_compile returns.
typedef struct tj_backend_config_t {
  tj_context_t* context;
  tj_allocator_t allocator;
  const tj_compile_options_t* options;
  uint32_t log;     // TJ_LOG flags (lib/env.h)
  const void* arg;  // backend-specific, NULL by default (cuda_backend.h)
} tj_backend_config_t;

// A program to compile: the run plan (borrowed; it outlives the program)
// and its kernels.
typedef struct tj_lowered_program_t {
  const tj_run_plan_t* plan;
  // plan->num_kernels of them (NULL when 0), allocated from the
  // executable's allocator; the backend takes them on every path.
  tj_lowered_kernel_t* kernels;
  // NULL: the generic program. Else the symbol values (by symbol id) the
  // kernels were specialized to.
  const int64_t* sym;
  const char* label;  // for logs: "generic kernels", "B=7,S=128"
  // Set by a compile that succeeds: kernels whose code came from a cache,
  // and kernels compiled (tj_executable_stats_t), and its time by stage.
  int64_t cache_hits, cache_misses;
  double llvm_ms, ptxas_ms, tuning_ms, cache_load_ms;
  // Kernels that share the code of an identical one (region compile of
  // repeated blocks), not compiled nor loaded on their own.
  int64_t kernels_shared;
} tj_lowered_program_t;

// Called by a backend's run_observed after each step |step| of the run plan
// with |loc|, the host storage of every plan node this run (dense
// row-major; a step's group outputs are valid right after it, until a later
// step reuses their slot). It may read and write them. A status stops the
// run and is returned.
typedef tj_status_t (*tj_step_observer_fn)(void* user, uint32_t step,
                                           unsigned char* const* loc);

typedef struct tj_backend_t {
  const char* name;
  // false: the target runs the caller's graph as it is (the reference
  // interpreter): no pass pipeline, no lowering, no run plan steps, no
  // specialization; run gets sym NULL and the arguments unchecked.
  bool lowers;
  // Whether runs may take CUDA tensors (the backend checks them).
  bool device_tensors;
  // Whether the target runs composite |node| of |graph| as one kernel of
  // its own, so that decompose keeps it whole (tj_pass_ctx_t.native_op;
  // issue 14: attention on x86 and CUDA). NULL: none.
  bool (*native_op)(const tj_graph_t* graph, uint32_t node);
  // Whether the GEMM template would refuse matmul |node| of
  // |graph| for its operands' layout, so that decompose writes it as a
  // reduction (tj_pass_ctx_t.matmul_misaligned). NULL: none.
  bool (*matmul_misaligned)(const tj_graph_t* graph, uint32_t node);
  // Whether the kernel of a conv kept whole runs an elementwise epilogue
  // (tj_pass_ctx_t.conv_epilogue): its emitter handles a CONV kernel whose
  // MAP phase has instructions. false: followers stay kernels of their own.
  bool conv_epilogue;
  // With conv_epilogue: whether conv |node| of |graph| should take its
  // followers (tj_pass_ctx_t.conv_epilogue_fits), |target| the opened
  // target. NULL: every conv should.
  bool (*conv_epilogue_fits)(void* target, const tj_graph_t* graph,
                             uint32_t node);
  // Whether the kernel of an attention kept whole also writes the
  // attention_lse of its own scores kept whole beside it
  // (tj_pass_ctx_t.attention_lse_output; lsefwd): its emitter handles an
  // ATTENTION forward with_lse. false: attention_lse stays a kernel.
  bool attention_lse_output;
  // Whether the attention kernel reads q, k and v and writes its result
  // through views of other strides (tj_pass_ctx_t.attention_views; issue
  // 14): its emitters take every row and head stride from the kernel IR,
  // the head dim contiguous.
  bool attention_views;
  // fuse (swiglu, issue 14; tj_pass_ctx_t.dual_gemm): whether the
  // target's GEMM kernel runs matmuls |a| and |b| of |graph| (one A, B of
  // one shape and dtype) as one dual GEMM, |target| the opened target.
  // NULL: never.
  bool (*dual_gemm)(void* target, const tj_graph_t* graph, uint32_t a,
                    uint32_t b);

  // The size of a target's state; the driver allocates it zeroed (no
  // allocation at all when 0: |target| is then NULL) and frees it after
  // close, or after an open that fails.
  size_t target_size;
  // Opens the executable's target in |target|. On failure nothing is left
  // to close. NULL: nothing to open.
  tj_status_t (*open)(void* target, const tj_backend_config_t* config);
  // While the generic run plan is built: whether the target takes one
  // group's |count| lowered kernels (borrowed; the driver's debug hook has
  // already rewritten them); UNSUPPORTED makes the group a host step.
  // NULL: all.
  tj_status_t (*accept)(void* target, const tj_lowered_kernel_t* kernels,
                        uint32_t count);
  // Compiles |program|. Specializations are compiled under the driver's
  // lock, one at a time, while runs may use other programs. UNSUPPORTED
  // for a specialization means "serve this shape with the generic
  // program". On failure |*out_program| is NULL.
  tj_status_t (*compile)(void* target, tj_lowered_program_t* program,
                         void** out_program);
  // Runs |program| for symbol values |sym|, bound by the driver, which
  // has also checked the outputs (tj_host_check_outputs) and the memory
  // of every tensor (tj_ir_check_run_memory). May run on many threads.
  tj_status_t (*run)(void* target, void* program, const int64_t* sym,
                     const tj_tensor_t* inputs, int32_t num_inputs,
                     const tj_tensor_t* outputs, int32_t num_outputs);
  // As run, calling |observe|(|user|, ...) after every step (tj_verify's
  // hook, backends/verify.c). NULL: the target cannot show its steps.
  tj_status_t (*run_observed)(void* target, void* program, const int64_t* sym,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_tensor_t* outputs, int32_t num_outputs,
                              tj_step_observer_fn observe, void* user);
  // Does now what the first run of |program| would otherwise do (deferred
  // code). NULL: nothing to do.
  tj_status_t (*prepare)(void* target, void* program);
  // Frees |program| (NULL: nothing). NULL: programs own nothing.
  void (*release)(void* target, void* program);
  // Frees what the target holds; called only for a target that opened.
  // NULL: nothing.
  void (*close)(void* target);
  // |run|, adding the time of each kernel, host step, copy and the setup
  // to |timing| (run_timing.h; tj_executable_profile). NULL: the driver
  // times the whole run as one host step.
  tj_status_t (*run_timed)(void* target, void* program, const int64_t* sym,
                           const tj_tensor_t* inputs, int32_t num_inputs,
                           const tj_tensor_t* outputs, int32_t num_outputs,
                           tj_run_timing_t* timing);
  // Frees what runs keep between runs (x86: the run frames' arenas), for
  // a target kept with no executable (compile_memo.c retires it); called
  // with no run under way. NULL: nothing to free.
  void (*trim)(void* target);
} tj_backend_t;

extern const tj_backend_t tj_backend_x86;
extern const tj_backend_t tj_backend_cuda;
extern const tj_backend_t tj_backend_reference;

#endif  // TJ_BACKENDS_RUNTIME_BACKEND_H_
