// backends/cuda/cuda_program.h (internal to backends/cuda)
//
// The private state of a tj_cuda_program_t (cuda_executable.h), its
// members grouped by concern, and the functions its files share. The
// program is cut as IREE's CUDA driver is:
//   cuda_program.c    create/destroy, adding kernels, the module (its key,
//                     PTX from LLVM or a cache, the cubin load), constants,
//                     run-state allocation, finish, offline programs
//   cuda_gemm_tune.c  the GEMM candidates: setup, precompiling, measuring,
//                     choosing, launching
//   cuda_staging.c    device tensor checks, host/device copies of strided
//                     tensors, the strided copy kernels
//   cuda_graph.c      CUDA graph capture and replay
//   cuda_custom.c     custom ops' CUDA implementations as device steps
//   cuda_run.c        the run plan, kernel arguments, launches, host steps,
//                     run and stats
//
// Compiling: every lowered kernel is emitted into ONE NVPTX module as its
// group is planned (so a group the GPU templates cannot express becomes a
// graph break right there). By default (issue 14, cudacold) the kernels
// are then cut into chunks by cost, each chunk's cubin taken from the
// cubin caches or, for the others at once, compiled on the host's threads
// as a module of its own (jit/nvptx.h's tj_nvptx_module_compile_chunks)
// and assembled by nvJitLink on the same thread (nvjitlink.h; the
// driver's JIT where it is missing), one CUmodule a chunk (load_chunks in
// cuda_program.c). With TJ_CUDA_COMPILE_THREADS=module, the way before:
// the module is optimized and printed to PTX once, or the PTX is taken
// from the kernel cache (memory, then disk:
// jit/cache.h, keyed by the kernels' text, the arch, the math mode, LLVM's
// and the library's versions). With a disk cache the PTX is then made a
// cubin by the driver's linker (ptxas, in process) and the cubin cached
// beside it, keyed also by the GPU's compute capability and the driver
// version: a warm start loads that cubin with cuModuleLoadData, running
// neither LLVM nor ptxas. Without one the PTX is loaded with
// cuModuleLoadDataEx (the driver keeps its own cache of ptxas's work).
//
// Running: the memory plan's slots, plus device staging for CPU tensors,
// live in one device arena taken from the context's caching allocator; it
// is kept across runs and only replaced when a larger shape needs more, so
// a steady state calls no cuMemAlloc. CPU tensors go through one pinned
// host buffer (truly asynchronous copies; strided tensors are packed and
// unpacked there). Strided CUDA tensors are gathered into dense staging in
// the arena, and scattered out of it, by a generated copy kernel on the
// stream. Every kernel's arguments (device pointers, then int64
// scalars) are computed first; then, when the program has no graph break,
// the launches are captured into a CUDA graph keyed by the symbol values
// and every argument, and replayed while the key repeats: one cuGraphLaunch
// instead of one cuLaunchKernel per kernel. A new shape, or new device
// pointers from the caller, captures anew (a few graphs are kept, least
// recently used replaced).

#ifndef TJ_BACKENDS_CUDA_CUDA_PROGRAM_H_
#define TJ_BACKENDS_CUDA_CUDA_PROGRAM_H_

#include <pthread.h>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/cuda_executable.h"
#include "backends/cuda/cuda_kir.h"
#include "backends/runtime/host_tensor.h"
#include "jit/nvptx.h"

#define TJ_CUDA_MAX_GRAPHS 8
#define TJ_CUDA_STAGE_ALIGN 256
#define TJ_CUDA_GEMM_MAX_CHOICES 16
#define TJ_CUDA_GEMM_MAX_PLANS 4

static inline int64_t tj_cuda_align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

//===--- kernels ---===//

typedef struct tj_cuda_program_kernel_t {
  const tj_lowered_kernel_t* low;  // borrowed; set by finish
  tj_nvptx_kernel_t info;
  tj_cuda_kernel_t fn;
  uint32_t arg_offset;  // first of its values in argv
} tj_cuda_program_kernel_t;

//===--- GEMM candidates (cuda_gemm_tune.c) ---===//

// Every tensor-core GEMM kernel has TJ_CUDA_GEMM_CANDIDATES
// implementations; cuda_gemm_tune.c says which. TJ_CUDA_GEMM_CUBLASLT is
// cuBLASLt's matmul plus an epilogue kernel; TJ_CUDA_GEMM_SPLIT_K and
// the next TJ_CUDA_GEMM_SPLITS - 1 are split-K (tj_cuda_gemm_split_t).
// TJ_CUDA_GEMM_F32_WIDE is the exact f32 CUDA-core kernel on 256x128 tiles
// (exact f32 GEMMs only).
enum {
  TJ_CUDA_GEMM_CUBLASLT = 4,
  TJ_CUDA_GEMM_SPLIT_K = 12,
  TJ_CUDA_GEMM_SPLITS = 3,
  TJ_CUDA_GEMM_F32_WIDE = 18,
  TJ_CUDA_GEMM_CANDIDATES = 19
};

// A split-K candidate (cuda_gemm_tune.c) of a rank-2 GEMM: |part| computes
// the s-th slice of K's partial product into a workspace [M, S, N] of f32
// (a batched GEMM whose batch entry s reads A and B from s * K / S on);
// |reduce| sums the S partials of each element in slice order (so the
// result does not depend on the schedule), then runs the GEMM's epilogue.
typedef struct tj_cuda_gemm_split_t {
  int32_t s;            // slices of K
  tj_kir_t* part;       // owned
  tj_kir_t* reduce;     // owned
  uint32_t reduce_acc;  // reduce's first partial (S consecutive buffers)
  uint32_t reduce_map[TJ_KIR_MAX_BUFFERS];  // reduce buffer -> GEMM buffer
  tj_cuda_kir_kernel_t* part_fn;
  tj_cuda_kir_kernel_t* reduce_fn;
  // This run.
  uint64_t part_argv[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  void* part_argp[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  uint64_t reduce_argv[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  void* reduce_argp[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  tj_nvptx_launch_t part_launch, reduce_launch;
} tj_cuda_gemm_split_t;

typedef struct tj_cuda_gemm_choice_t {
  int64_t bucket;
  int32_t candidate;
} tj_cuda_gemm_choice_t;

typedef struct tj_cuda_gemm_tune_t {
  bool tunable;  // a tensor-core GEMM
  bool lt_ok;    // rank 2, row-major contiguous operands: candidate 4 fits
  // B is w^T of a row-major [N, K] w (tj_kir_gemm_b_kmajor): cuBLASLt
  // reads it transposed (tj_cublaslt_gemm_plan_ex).
  bool lt_w_transposed;
  // Candidate 4 stores straight into the output: the epilogue is the
  // accumulator rounded to the matmul's dtype into a dense [M, N] output
  // (no temporary, no epilogue kernel), with at most a bias (a vector
  // along n, cuBLASLt's BIAS epilogue) and a residual (an input laid out
  // as the output, cuBLASLt's C with beta 1; issue 14) added to it
  // (direct_store in cuda_gemm_tune.c).
  bool lt_direct;
  uint32_t out;      // that output's buffer
  uint32_t lt_bias;  // the bias's buffer, or TJ_KIR_NONE
  uint32_t lt_c;     // the residual's buffer, or TJ_KIR_NONE
  uint32_t a, b;     // its GEMM_A / GEMM_B buffers
  // swiglu (issue 14): a dual GEMM's B2 buffer (else TJ_KIR_NONE); its
  // candidate 4 is cuBLASLt twice, A B and A B2 into two temporaries,
  // then the epilogue kernel reading both (epi_acc and epi_acc + 1).
  uint32_t b2;
  tj_dtype_t acc_dtype;  // the temporary's: the matmul's dtype
  tj_kir_t* epi;         // the epilogue as a POINTWISE kernel; owned
  uint32_t epi_acc;      // epi's buffer reading the temporary
  uint32_t epi_map[TJ_KIR_MAX_BUFFERS];  // epi buffer -> GEMM buffer
  char* text;  // the GEMM's canonical text (the tuning key)
  tj_cuda_kir_kernel_t*
      variant[TJ_CUDA_GEMM_CANDIDATES];  // [0], [4], splits unused
  tj_cuda_kir_kernel_t* epi_fn;
  bool precompiled;  // the tuning candidates were compiled together
  // TJ_AUTOTUNE_BACKGROUND (cuda_gemm_tune.c), under the program's mutex:
  // a compile job of this kernel's candidates is on the context's worker
  // (runs of undecided buckets serve candidate 0 meanwhile), and the
  // candidates (bit c) that a job has compiled or tried to.
  bool bg_queued;
  uint32_t bg_tried;
  // The buckets whose job has ended (the last few; 0: none): their next
  // run times.
  int64_t bg_done[8];
  uint32_t bg_next_done;
  tj_cuda_gemm_choice_t choices[TJ_CUDA_GEMM_MAX_CHOICES];
  uint32_t num_choices;
  // This run.
  int32_t current;
  int64_t m;
  int64_t temp_offset;       // arena offset of the temporary, or -1
  int64_t temp2_offset;      // a dual GEMM's second temporary's
  tj_cublaslt_gemm_t* plan;  // this run's cuBLASLt plan (one of |plans|)
  tj_cublaslt_gemm_t* plans[TJ_CUDA_GEMM_MAX_PLANS];  // for M = plan_ms[i]
  int64_t plan_ms[TJ_CUDA_GEMM_MAX_PLANS];
  uint32_t next_plan;
  uint64_t epi_argv[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  void* epi_argp[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  tj_nvptx_launch_t epi_launch;
  // A TMA candidate's arguments: the kernel's, then its tensor maps.
  tj_cuda_tensor_maps_t maps;
  void* tma_argp[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS + 5];
  // Split-K: |split_ok| when K and N are constants that the slices divide.
  bool split_ok;
  tj_cuda_gemm_split_t split[TJ_CUDA_GEMM_SPLITS];
  int64_t split_offset;  // arena offset of the workspace, or -1
} tj_cuda_gemm_tune_t;

//===--- strided copies (cuda_staging.c) ---===//

// A strided copy between a CUDA tensor's own layout and dense staging in
// the arena: a POINTWISE kernel IR kernel (one load, one store) whose
// sizes and strides are all params, compiled on first need per dtype, rank
// and direction.
typedef struct tj_cuda_copy_kernel_t {
  tj_dtype_t dtype;
  int32_t rank;
  bool scatter;  // dense staging -> the tensor (else the tensor -> staging)
  tj_kir_t* kir;
  tj_cuda_kir_kernel_t* fn;
} tj_cuda_copy_kernel_t;

// Room for every (dtype, rank, direction): the table never fills.
#define TJ_CUDA_MAX_COPY_KERNELS (TJ_DTYPE_COUNT_ * TJ_MAX_RANK * 2)

//===--- CUDA graphs (cuda_graph.c) ---===//

typedef struct tj_cuda_graph_entry_t {
  bool valid;
  uint64_t last_use;
  int64_t* key;  // symbols, then every kernel argument value
  tj_cu_graph_exec_t exec;
} tj_cuda_graph_entry_t;

//===--- custom ops' device steps (cuda_custom.c) ---===//

typedef struct tj_cuda_custom_t {
  const struct tj_custom_op_t* op;  // the context's
  uint32_t node;                    // its plan node
  tj_cuda_module_t* module;         // its PTX, loaded
  tj_cuda_kernel_t fn;
  uint32_t num_params;
  uint64_t* argv;  // this run's parameters (tj_custom_op_desc_t.cuda_ptx)
  void** argp;     // &argv[i]
  tj_nvptx_launch_t launch;  // this run's
} tj_cuda_custom_t;

//===--- the program ---===//

struct tj_cuda_program_t {
  tj_context_t* context;
  tj_allocator_t al;
  tj_cuda_device_t* device;  // the context's; borrowed
  tj_cu_stream_t stream;
  bool host_stream;
  tj_nvptx_arch_t arch;
  tj_nvptx_target_t* target;
  tj_nvptx_options_t nv_options;
  char cache_dir[1024];
  // Kernels, in the executable's order.
  tj_cuda_program_kernel_t* kernels;
  uint32_t num_kernels, cap_kernels;
  // Run state (|run|, |graphs|, the per-run parts of |gemm| and |stats|)
  // is under |mutex|.
  pthread_mutex_t mutex;
  bool mutex_ready;

  // The module and its PTX (cuda_program.c).
  struct {
    tj_nvptx_module_t* nvptx;  // until finish
    tj_cuda_module_t* cumod;
    char* ptx;
    // The PTX cached under the module's key did not link: LLVM makes it
    // again, and the caches' entries are replaced (load_module).
    bool ptx_cache_bad;
    // Offline programs (no device): the GEMM candidates' kernels.
    char* variants_ptx;
    uint32_t num_variant_kernels;
    // Chunks (issue 14, cudacold; load_chunks in cuda_program.c): the
    // kernels in several modules, compiled on |threads| threads
    // (TJ_CUDA_COMPILE_THREADS; 0: the one module above) and assembled
    // by nvJitLink on the same threads where it is found, each chunk a
    // CUmodule of its own. Per chunk, |num_chunks| entries each.
    uint32_t threads;
    // An offline program compiles chunks only when asked
    // (tj_cuda_offline_arg_t.chunks): its |ptx| is one module otherwise.
    bool offline_chunks;
    uint32_t num_chunks;
    uint32_t* chunk_of;         // per kernel
    tj_cuda_module_t** cumods;  // the loaded chunks
    char** chunk_ptx;           // the compiled chunks' PTX, else NULL
    void** chunk_cubin;         // nvJitLink's cubin, else NULL
    size_t* chunk_cubin_bytes;
    tj_status_t* chunk_asm_status;  // nvJitLink's failure, else NULL
    double* chunk_ms;               // LLVM and nvJitLink on the chunk's thread
    double* chunk_asm_ms;           // nvJitLink's part
    double* chunk_cpu_ms;           // the chunk's thread's CPU ms
    struct tj_nvjitlink_t* nvjitlink;  // NULL: the driver's JIT
    char nvjitlink_why[160];           // why there is none
  } mod;

  // The plan (borrowed from the executable) and the constants.
  struct {
    const tj_graph_t* graph;
    const tj_memplan_t* mp;
    tj_cuda_step_t* steps;  // copy of the array; pointers inside borrowed
    uint32_t num_steps;
    bool has_host_steps;
    uint32_t num_symbols;
    int32_t* first_output;  // per node
    tj_cu_deviceptr_t consts;
    uint64_t* const_ptr;  // per node: the device copy of a constant, or 0
    // per node: the copy of a quantized weight in the tile layout
    // (tj_nvptx_wq_tile) that kernels with tj_nvptx_kernel_t.wq_tiled read
    // as their B, or of a conv weight prepared (tj_nvptx_conv_prepare_weight)
    // that kernels with conv_prepared read as their weight, or 0.
    uint64_t* wq_tiled_ptr;
  } plan;

  // This run's layout and arguments (cuda_run.c).
  struct {
    void* meta;  // the arrays below, one allocation
    size_t meta_bytes;
    int64_t* slot_offsets;
    uint64_t* loc;       // per node: its device storage this run
    int64_t* in_stage;   // per input: arena offset of its staging, or -1
    int64_t* out_stage;  // per output: arena offset of its staging, or -1
    int64_t* in_pin;     // per input: pinned offset, or -1
    int64_t* out_pin;    // per output: pinned offset, or -1
    int64_t* scalars;    // per kernel, TJ_KIR_MAX_PARAMS
    uint64_t* argv;      // per kernel: buffers, then scalars
    void** argp;         // &argv[i]
    tj_nvptx_launch_t* launches;
    int64_t* key;  // this run's graph key
    uint32_t num_args;
    tj_cu_deviceptr_t arena;
    int64_t arena_cap;
    void* pinned;
    int64_t pinned_cap;
  } run;

  // CUDA graphs (cuda_graph.c).
  struct {
    bool enabled;
    tj_cuda_graph_entry_t entries[TJ_CUDA_MAX_GRAPHS];
    uint64_t clock;
    // Where runs on a default stream are captured (cuda_graph.c); created
    // on the first such capture.
    tj_cu_stream_t capture_stream;
  } graphs;

  // GEMM candidates and autotuning (cuda_gemm_tune.c).
  struct {
    tj_cuda_gemm_tune_t* tunes;  // per kernel; NULL without GEMMs
    bool autotune;
    bool background;  // TJ_AUTOTUNE_BACKGROUND: compile candidates off-run
    int32_t forced;   // TJ_CUDA_GEMM_CANDIDATE, or -1
    tj_cublaslt_t* lt;
    bool lt_unavailable;
    // TJ_CUBLASLT_RESIDUAL=off: no residual as cuBLASLt's C (lt_c).
    bool lt_residual_off;
    tj_cu_deviceptr_t lt_workspace;
    tj_cu_event_t ev_start, ev_stop;
    char device_desc[192];
    // A cuBLASLt plan was made this run: launch directly, capture next run
    // (a library's first launches may load modules, which capture forbids).
    bool fresh_plan;
    bool log_autotune;  // TJ_LOG=autotune
    char last_choice[64];
  } gemm;

  // Custom ops' device steps, in step order (cuda_custom.c).
  struct {
    tj_cuda_custom_t* ops;
    uint32_t num;
    uint32_t key_len;  // their part of the graph key
  } custom;

  // Strided copy kernels (cuda_staging.c).
  struct {
    tj_cuda_copy_kernel_t copies[TJ_CUDA_MAX_COPY_KERNELS];
    uint32_t num_copies;
  } staging;

  // tj_cuda_program_stats.
  struct {
    double compile_ms, load_ms, link_ms;
    uint32_t chunks, chunks_compiled, compile_threads;
    const char* ptx_source;
    const char* cubin_source;
    size_t ptx_bytes, cubin_bytes;
    int64_t cubin_hits, cubin_misses;
    int64_t kernel_cubin_hits, kernel_cubin_misses;
    int64_t runs, kernel_launches, graph_captures, graph_instantiations,
        graph_updates, graph_launches, host_steps, arena_growths;
    int64_t strided_copies;
    int64_t tunings, tuning_cache_hits;
    double tuning_ms;
  } stats;
};

// The graph key: symbols, every kernel argument, the arena base (GEMM
// temporaries live there), every kernel's GEMM candidate and every custom
// op's parameters and launch shape.
// The options every kernel of |p| keeps whatever a candidate varies: its
// math (approximate unless precise_math) and libdevice's f64 functions.
static inline tj_nvptx_options_t tj_cuda_program_math_options(
    const tj_cuda_program_t* p) {
  return (tj_nvptx_options_t){.approx_math = p->nv_options.approx_math,
                              .libdevice = p->nv_options.libdevice};
}

static inline size_t tj_cuda_graph_key_len(const tj_cuda_program_t* p) {
  return p->plan.num_symbols + p->run.num_args + 1 + p->num_kernels +
         p->custom.key_len;
}

//===--- cuda_program.c ---===//

// Compiles a kernel apart from the module (a GEMM variant, an epilogue,
// a strided copy) through the cubin cache, and counts where it came from.
tj_status_t tj_cuda_program_compile_kernel(tj_cuda_program_t* p,
                                           const tj_kir_t* k,
                                           const tj_nvptx_options_t* o,
                                           tj_cuda_kir_kernel_t** out);
// Counts where |k| came from (the kernel cubin stats).
void tj_cuda_program_count_kernel(tj_cuda_program_t* p,
                                  const tj_cuda_kir_kernel_t* k);

//===--- cuda_gemm_tune.c ---===//

// Sets up the candidates of every tensor-core GEMM (none: tunes stay NULL).
tj_status_t tj_cuda_gemm_setup(tj_cuda_program_t* p);
// Offline programs: emits every kernel the candidates compile apart on a
// GPU into |module|, each renamed <entry>_c<candidate>.
tj_status_t tj_cuda_gemm_emit_candidates(tj_cuda_program_t* p,
                                         tj_nvptx_module_t* module);
// Frees the candidates, cuBLASLt and the timing events.
void tj_cuda_gemm_release(tj_cuda_program_t* p);
// Picks (tuning on the first run of a bucket) and prepares the candidate
// of every tensor-core GEMM for this run. Runs after the kernel arguments.
tj_status_t tj_cuda_gemm_choose(tj_cuda_program_t* p);
// The same for the kernels from |first| on (after a data-dependent host
// call set new sizes; the earlier ones have run).
tj_status_t tj_cuda_gemm_choose_from(tj_cuda_program_t* p, uint32_t first);
// The bytes of split-K workspace kernel |ki| may use in a run with its
// |scalars| (0 when no split-K candidate can serve or be timed there).
int64_t tj_cuda_gemm_split_bytes(const tj_cuda_program_t* p, uint32_t ki,
                                 const int64_t* scalars);
// Enqueues kernel |ki| as candidate |c|.
tj_status_t tj_cuda_gemm_launch(tj_cuda_program_t* p, uint32_t ki, int32_t c);

//===--- cuda_staging.c ---===//

// The bytes of |t|'s elements, dense. The other tensor helpers are the
// host ones every runtime shares (backends/runtime/host_tensor.h).
int64_t tj_cuda_tensor_bytes(const tj_tensor_t* t);
// INVALID_ARGUMENT unless |t| is on the CPU or on the program's device.
tj_status_t tj_cuda_check_device_tensor(const tj_cuda_program_t* p,
                                        const tj_tensor_t* t, const char* what,
                                        const char* name);
// Enqueues the copy between CUDA tensor |t| (any strides, byte_offset) and
// the dense array at |dense|: a gather into it, or (|scatter|) a scatter
// out of it.
tj_status_t tj_cuda_strided_copy(tj_cuda_program_t* p, const tj_tensor_t* t,
                                 uint64_t dense, bool scatter);
// Frees the copy kernels.
void tj_cuda_staging_release(tj_cuda_program_t* p);

//===--- cuda_graph.c ---===//

// Launches the run's kernels through a CUDA graph for its key (capturing
// one when none matches). |*out_fallback| is set when graphs cannot be
// used at all (capture refused): the caller then launches directly.
tj_status_t tj_cuda_graph_run(tj_cuda_program_t* p, const int64_t* sym,
                              bool* out_fallback);
// Destroys the instantiated graphs and the capture stream; the device is
// entered.
void tj_cuda_graph_destroy_execs(tj_cuda_program_t* p);

//===--- cuda_custom.c ---===//

// Sets up a tj_cuda_custom_t per CUSTOM step (numbering the steps) and
// their part of the graph key; before the run state is allocated.
tj_status_t tj_cuda_custom_setup(tj_cuda_program_t* p);
// Loads every custom op's PTX; a rejection carries the driver's log and
// names the op and node.
tj_status_t tj_cuda_custom_load(tj_cuda_program_t* p);
// Unloads the modules and frees the steps; the device is entered.
void tj_cuda_custom_release(tj_cuda_program_t* p);
// This run's parameters and launch shapes (the ops' callbacks); after
// every value's location is known.
tj_status_t tj_cuda_custom_args(tj_cuda_program_t* p, const int64_t* sym);
// Writes the custom ops' part of the graph key at |key|; returns its end.
int64_t* tj_cuda_custom_key(const tj_cuda_program_t* p, int64_t* key);
// Whether any custom op launches this run.
bool tj_cuda_custom_any_launch(const tj_cuda_program_t* p);
// Enqueues custom step |index| (counting it in |*launched| unless empty).
tj_status_t tj_cuda_custom_launch(tj_cuda_program_t* p, uint32_t index,
                                  int64_t* launched);

//===--- cuda_run.c ---===//

// cuLaunchKernel of |fn| on the program's stream; an empty launch is
// skipped.
tj_status_t tj_cuda_program_launch_function(tj_cuda_program_t* p,
                                            tj_cu_function_t fn,
                                            const tj_nvptx_launch_t* l,
                                            void** args, const char* entry);
// Enqueues every KERNELS and CUSTOM step in order (a run with no host
// step), counting the non-empty launches in |*launched|.
tj_status_t tj_cuda_program_launch_steps(tj_cuda_program_t* p,
                                         int64_t* launched);
// Enqueues kernels [first, first + count) as this run's candidates,
// counting the non-empty launches in |*launched|.
tj_status_t tj_cuda_program_launch_range(tj_cuda_program_t* p, uint32_t first,
                                         uint32_t count, int64_t* launched);

#endif  // TJ_BACKENDS_CUDA_CUDA_PROGRAM_H_
