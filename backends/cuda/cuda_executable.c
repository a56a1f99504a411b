// backends/cuda/cuda_executable.c
//
// The CUDA program of an executable (cuda_executable.h).
//
// Compiling: every lowered kernel is emitted into ONE NVPTX module as its
// group is planned (so a group the GPU templates cannot express becomes a
// graph break right there), then the module is optimized and printed to
// PTX once, or the PTX is taken from the kernel cache (memory, then disk:
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

#include "backends/cuda/cuda_executable.h"

#include <llvm-c/Core.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/cuda_kir.h"
#include "jit/autotune.h"
#include "jit/cache.h"
#include "jit/emit_nvptx.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/ir.h"

#define MAX_GRAPHS 8
#define STAGE_ALIGN 256
#define MAX_CHOICES 16
#define MAX_PLANS 4
#define LT_WORKSPACE_BYTES ((size_t)8 << 20)

//===--- GEMM candidates ---===//

// Every tensor-core GEMM kernel has these implementations; the autotuner
// picks one per shape bucket (M rounded up to a power of two). 0 is the
// kernel of the program's module (on sm_90a the wgmma main loop with
// 128x128 tiles and 3 stages, elsewhere mma.sync); the others but 4 are
// the same kernel IR compiled with other main loops and tiles (each its own
// module, compiled on first need; the wgmma ones are UNSUPPORTED, so
// skipped, before sm_90a); 4 is cuBLASLt's matmul into a temporary of the
// matmul's dtype, then the kernel's epilogue (bias, gelu, residual, casts,
// stores) as a pointwise kernel that reads it: 2 launches and one more
// round trip of the intermediate.
enum { CAND_CUBLASLT = 4, NUM_CANDIDATES = 7 };
static const tj_nvptx_options_t kVariants[NUM_CANDIDATES] = {
    [1] = {.gemm_tile_k = 32,
           .gemm_stages = 3,
           .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    [2] = {.gemm_tile_k = 64,
           .gemm_stages = 3,
           .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    [3] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 128,
           .gemm_tile_n = 256},
    [5] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 64,
           .gemm_tile_n = 128},
    [6] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 128,
           .gemm_tile_n = 128},
};
static const char* const kCandidateNames[NUM_CANDIDATES] = {
    "fused default",
    "fused mma bk32 s3",
    "fused mma bk64 s3",
    "fused wgmma 128x256 s4",
    "cublaslt matmul + epilogue kernel",
    "fused wgmma 64x128 s4",
    "fused wgmma 128x128 s4"};

typedef struct choice_t {
  int64_t bucket;
  int32_t candidate;
} choice_t;

typedef struct tune_t {
  bool tunable;   // a tensor-core GEMM
  bool lt_ok;     // rank 2, row-major contiguous operands: candidate 4 fits
  uint32_t a, b;  // its GEMM_A / GEMM_B buffers
  tj_dtype_t acc_dtype;  // the temporary's: the matmul's dtype
  tj_kir_t* epi;         // the epilogue as a POINTWISE kernel; owned
  uint32_t epi_acc;      // epi's buffer reading the temporary
  uint32_t epi_map[TJ_KIR_MAX_BUFFERS];  // epi buffer -> GEMM buffer
  char* text;  // the GEMM's canonical text (the tuning key)
  tj_cuda_kir_kernel_t* variant[NUM_CANDIDATES];  // [0], [4] unused
  tj_cuda_kir_kernel_t* epi_fn;
  bool precompiled;  // the tuning candidates were compiled together
  choice_t choices[MAX_CHOICES];
  uint32_t num_choices;
  // This run.
  int32_t current;
  int64_t m;
  int64_t temp_offset;       // arena offset of the temporary, or -1
  tj_cublaslt_gemm_t* plan;  // this run's cuBLASLt plan (one of |plans|)
  tj_cublaslt_gemm_t* plans[MAX_PLANS];  // for M = plan_ms[i]
  int64_t plan_ms[MAX_PLANS];
  uint32_t next_plan;
  uint64_t epi_argv[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  void* epi_argp[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  tj_nvptx_launch_t epi_launch;
} tune_t;

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

//===--- the context's device ---===//

// tj_context_extension's create callback takes no argument: the ordinal
// asked for travels in a thread-local (the callback runs on the calling
// thread).
static _Thread_local int32_t t_requested_ordinal;

static tj_status_t device_extension_create(tj_context_t* context,
                                           void** out_state) {
  tj_cuda_device_options_t o;
  tj_cuda_device_options_initialize(&o);
  o.ordinal = t_requested_ordinal;
  tj_cuda_device_t* d = NULL;
  TJ_RETURN_IF_ERROR(
      tj_cuda_device_create(tj_context_allocator(context), &o, &d));
  *out_state = d;
  return NULL;
}

static void device_extension_destroy(void* state) {
  tj_cuda_device_destroy(state);
}

//===--- the program ---===//

typedef struct kernel_t {
  const tj_lowered_kernel_t* low;  // borrowed; set by finish
  tj_nvptx_kernel_t info;
  tj_cuda_kernel_t fn;
  uint32_t arg_offset;  // first of its values in argv
} kernel_t;

// A strided copy between a CUDA tensor's own layout and dense staging in
// the arena: a POINTWISE kernel IR kernel (one load, one store) whose
// sizes and strides are all params, compiled on first need per dtype, rank
// and direction.
typedef struct copy_kernel_t {
  tj_dtype_t dtype;
  int32_t rank;
  bool scatter;  // dense staging -> the tensor (else the tensor -> staging)
  tj_kir_t* kir;
  tj_cuda_kir_kernel_t* fn;
} copy_kernel_t;

// Room for every (dtype, rank, direction): the table never fills.
#define MAX_COPY_KERNELS (TJ_DTYPE_COUNT_ * TJ_MAX_RANK * 2)

typedef struct graph_entry_t {
  bool valid;
  uint64_t last_use;
  int64_t* key;  // symbols, then every kernel argument value
  tj_cu_graph_exec_t exec;
} graph_entry_t;

struct tj_cuda_program_t {
  tj_context_t* context;
  tj_allocator_t al;
  tj_cuda_device_t* device;  // the context's; borrowed
  tj_cu_stream_t stream;
  bool host_stream;
  bool graphs_enabled;
  tj_nvptx_arch_t arch;
  tj_nvptx_target_t* target;
  tj_nvptx_options_t nv_options;
  LLVMContextRef llvm;
  LLVMModuleRef module;  // until finish
  // Kernels, in the executable's order.
  kernel_t* kernels;
  uint32_t num_kernels, cap_kernels;
  tj_cuda_module_t* cumod;
  char* ptx;
  // The PTX cached under the module's key did not link: LLVM makes it
  // again, and the caches' entries are replaced (load_module).
  bool ptx_cache_bad;
  // Offline programs (no device): the GEMM candidates' kernels.
  char* variants_ptx;
  uint32_t num_variant_kernels;
  // The plan (borrowed from the executable).
  const tj_graph_t* graph;
  const tj_memplan_t* mp;
  tj_cuda_step_t* steps;  // copy of the array; pointers inside borrowed
  uint32_t num_steps;
  bool has_host_steps;
  uint32_t num_symbols;
  int32_t* first_output;  // per node
  tj_cu_deviceptr_t consts;
  uint64_t* const_ptr;  // per node: the device copy of a constant, or 0
  // Run state, under |mutex|.
  pthread_mutex_t mutex;
  bool mutex_ready;
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
  graph_entry_t graphs[MAX_GRAPHS];
  uint64_t clock;
  // GEMM candidates and autotuning (per kernel; NULL without GEMMs).
  tune_t* tunes;
  bool autotune;
  int32_t forced;  // TJ_CUDA_GEMM_CANDIDATE, or -1
  tj_cublaslt_t* lt;
  bool lt_unavailable;
  tj_cu_deviceptr_t lt_workspace;
  tj_cu_event_t ev_start, ev_stop;
  char cache_dir[1024];
  char device_desc[192];
  int64_t tunings, tuning_cache_hits;
  // A cuBLASLt plan was made this run: launch directly, capture next run
  // (a library's first launches may load modules, which capture forbids).
  bool fresh_plan;
  bool log_autotune;  // TJ_LOG=autotune
  double tuning_ms;
  char last_choice[64];
  copy_kernel_t copies[MAX_COPY_KERNELS];
  uint32_t num_copies;
  int64_t strided_copies;
  // Stats.
  double compile_ms, load_ms, link_ms;
  const char* ptx_source;
  const char* cubin_source;
  size_t ptx_bytes, cubin_bytes;
  int64_t cubin_hits, cubin_misses;
  int64_t kernel_cubin_hits, kernel_cubin_misses;
  int64_t runs, kernel_launches, graph_captures, graph_launches, host_steps,
      arena_growths;
};

// The graph key: symbols, every kernel argument, the arena base (GEMM
// temporaries live there) and every kernel's GEMM candidate.
static size_t key_len(const tj_cuda_program_t* p) {
  return p->num_symbols + p->num_args + 1 + p->num_kernels;
}

static tj_status_t program_create(tj_context_t* context,
                                  const tj_compile_options_t* options,
                                  tj_cuda_device_t* device,
                                  tj_nvptx_arch_t arch,
                                  tj_cuda_program_t** out);

tj_status_t tj_cuda_program_create(tj_context_t* context,
                                   const tj_compile_options_t* options,
                                   tj_cuda_program_t** out) {
  *out = NULL;
  if (options->cuda.device < 0)
    return tj_invalid("tj_compile: cuda_device is %d",
                      (int)options->cuda.device);
  t_requested_ordinal = options->cuda.device;
  void* state = NULL;
  TJ_RETURN_IF_ERROR(tj_context_extension(
      context, TJ_CONTEXT_EXTENSION_CUDA_DEVICE, device_extension_create,
      device_extension_destroy, &state));
  tj_cuda_device_t* device = state;
  if (device->ordinal != options->cuda.device)
    return tj_unsupported(
        "tj_compile: this context drives CUDA device %d; device %d needs "
        "another context",
        (int)device->ordinal, (int)options->cuda.device);
  const char* arch_name = tj_cuda_device_arch_name(device);
  tj_nvptx_arch_t arch;
  if (!arch_name || !tj_nvptx_arch_from_name(arch_name, &arch))
    return tj_unsupported(
        "tj_compile: %s is sm_%d%d; the CUDA target needs sm_80 or newer",
        device->name, (int)device->sm_major, (int)device->sm_minor);
  return program_create(context, options, device, arch, out);
}

tj_status_t tj_cuda_program_create_offline(tj_context_t* context,
                                           const tj_compile_options_t* options,
                                           tj_nvptx_arch_t arch,
                                           tj_cuda_program_t** out) {
  *out = NULL;
  if ((unsigned)arch >= TJ_NVPTX_ARCH_COUNT_)
    return tj_invalid("tj_cuda_compile_ptx: unknown arch %d", (int)arch);
  return program_create(context, options, NULL, arch, out);
}

// The program of |device| (NULL: an offline program, see
// tj_cuda_program_create_offline) for |arch|.
static tj_status_t program_create(tj_context_t* context,
                                  const tj_compile_options_t* options,
                                  tj_cuda_device_t* device,
                                  tj_nvptx_arch_t arch,
                                  tj_cuda_program_t** out) {
  tj_allocator_t al = tj_context_allocator(context);
  tj_cuda_program_t* p = tj_calloc(al, 1, sizeof(*p));
  if (!p) return tj_status_oom();
  p->context = context;
  p->al = al;
  p->device = device;
  p->stream = options->cuda.stream ? (tj_cu_stream_t)options->cuda.stream
                                   : (device ? device->stream : NULL);
  p->host_stream = options->cuda.stream != NULL;
  p->graphs_enabled = !options->cuda.disable_graphs;
  p->arch = arch;
  p->nv_options.approx_math = !options->cuda.precise_math;
  p->ptx_source = "LLVM";
  p->cubin_source = "none";
  p->autotune = options->autotune != TJ_AUTOTUNE_OFF;
  p->forced = -1;
  p->log_autotune = (tj_log_flags(context) & TJ_LOG_AUTOTUNE) != 0;
  const char* force = getenv("TJ_CUDA_GEMM_CANDIDATE");
  if (force && force[0] >= '0' && force[0] < '0' + NUM_CANDIDATES && !force[1])
    p->forced = force[0] - '0';
  snprintf(p->device_desc, sizeof(p->device_desc), "%s %s%s",
           device ? device->name : "offline", tj_nvptx_arch_name(arch),
           p->nv_options.approx_math ? " approx" : "");
  tj_status_t status = NULL;
  if (pthread_mutex_init(&p->mutex, NULL) != 0) {
    status = tj_internal("tj_compile: pthread_mutex_init failed");
  } else {
    p->mutex_ready = true;
  }
  if (!status) status = tj_nvptx_target_create(al, arch, &p->target);
  if (!status) {
    p->llvm = LLVMContextCreate();
    p->module = tj_nvptx_module_create(p->target, p->llvm, "tj_program");
  }
  if (status) {
    tj_cuda_program_destroy(p);
    return status;
  }
  *out = p;
  return NULL;
}

void tj_cuda_program_destroy(tj_cuda_program_t* p) {
  if (!p) return;
  tj_cuda_device_t* d = p->device;
  if (d && tj_cuda_device_enter(d) == NULL) {
    (void)d->cu.cuStreamSynchronize(p->stream);
    for (int i = 0; i < MAX_GRAPHS; ++i) {
      if (p->graphs[i].valid) (void)d->cu.cuGraphExecDestroy(p->graphs[i].exec);
    }
    tj_cuda_device_leave(d);
  }
  if (p->tunes) {
    for (uint32_t i = 0; i < p->num_kernels; ++i) {
      tune_t* t = &p->tunes[i];
      for (int v = 1; v < NUM_CANDIDATES; ++v)
        tj_cuda_kir_destroy(t->variant[v]);
      tj_cuda_kir_destroy(t->epi_fn);
      tj_kir_destroy(t->epi);
      for (int j = 0; j < MAX_PLANS; ++j) tj_cublaslt_gemm_destroy(t->plans[j]);
      tj_free_string(p->al, t->text);
    }
    tj_free(p->al, p->tunes, sizeof(tune_t) * (p->num_kernels + 1));
  }
  if (d && (p->ev_start || p->ev_stop) && tj_cuda_device_enter(d) == NULL) {
    if (p->ev_start) (void)d->cu.cuEventDestroy(p->ev_start);
    if (p->ev_stop) (void)d->cu.cuEventDestroy(p->ev_stop);
    tj_cuda_device_leave(d);
  }
  if (d && p->lt_workspace)
    (void)tj_cuda_allocator_free(d->allocator, p->lt_workspace, p->stream);
  tj_cublaslt_close(p->lt);
  for (uint32_t i = 0; i < p->num_copies; ++i) {
    tj_cuda_kir_destroy(p->copies[i].fn);
    tj_kir_destroy(p->copies[i].kir);
  }
  for (int i = 0; i < MAX_GRAPHS; ++i) {
    tj_free(p->al, p->graphs[i].key,
            p->graphs[i].key ? sizeof(int64_t) * (key_len(p) + 1) : 0);
  }
  if (d) {
    if (p->arena)
      (void)tj_cuda_allocator_free(d->allocator, p->arena, p->stream);
    if (p->consts)
      (void)tj_cuda_allocator_free(d->allocator, p->consts, p->stream);
    tj_cuda_host_free(d, p->pinned);
  }
  tj_cuda_module_destroy(p->cumod);
  tj_free_string(p->al, p->ptx);
  tj_free_string(p->al, p->variants_ptx);
  if (p->module) LLVMDisposeModule(p->module);
  if (p->llvm) LLVMContextDispose(p->llvm);
  tj_nvptx_target_destroy(p->target);
  tj_free(p->al, p->kernels, sizeof(kernel_t) * p->cap_kernels);
  tj_free(p->al, p->steps, sizeof(tj_cuda_step_t) * (p->num_steps + 1));
  if (p->graph) {
    tj_free(p->al, p->first_output,
            p->first_output ? sizeof(int32_t) * (p->graph->num_nodes + 1) : 0);
    tj_free(p->al, p->const_ptr,
            p->const_ptr ? sizeof(uint64_t) * (p->graph->num_nodes + 1) : 0);
  }
  tj_free(p->al, p->meta, p->meta_bytes);
  if (p->mutex_ready) pthread_mutex_destroy(&p->mutex);
  tj_free(p->al, p, sizeof(*p));
}

//===--- kernels ---===//

static void delete_entry(LLVMModuleRef module, const char* entry) {
  LLVMValueRef f = LLVMGetNamedFunction(module, entry);
  if (f) LLVMDeleteFunction(f);
}

// Tensor-core operands are read with 16-byte cp.async: strides and offsets
// that are known now must be multiples of 8 halves (symbolic ones are
// checked per run by the launch configuration).
static tj_status_t check_gemm_alignment(const tj_lowered_kernel_t* low,
                                        const tj_nvptx_kernel_t* info) {
  const tj_kir_t* k = low->kernel;
  if (k->kind != TJ_KIR_GEMM || !info->tensor_cores) return NULL;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_GEMM_A && buf->role != TJ_KIR_GEMM_B) continue;
    for (int32_t d = 0; d + 1 < k->rank; ++d) {
      tj_kir_ival_t s = buf->strides[d];
      if (s.param < 0 && s.value % 8 != 0)
        return tj_unsupported(
            "kernel @%s: tensor-core operand %%%s has stride %lld in dim %d, "
            "not a multiple of 8 elements (16 bytes)",
            k->name, buf->name, (long long)s.value, (int)d);
    }
    if (low->buffer_offsets[b] >= 0 && low->buffer_offsets[b] % 8 != 0)
      return tj_unsupported(
          "kernel @%s: tensor-core operand %%%s starts %lld elements into its "
          "value, not a multiple of 8",
          k->name, buf->name, (long long)low->buffer_offsets[b]);
  }
  return NULL;
}

tj_status_t tj_cuda_program_add_kernels(tj_cuda_program_t* p,
                                        const tj_lowered_kernel_t* kernels,
                                        uint32_t count) {
  if (!p->module) return tj_internal("cuda program: add after finish");
  if (p->num_kernels + count > p->cap_kernels) {
    uint32_t cap = p->cap_kernels ? p->cap_kernels * 2 : 16;
    while (cap < p->num_kernels + count) cap *= 2;
    kernel_t* more =
        tj_realloc(p->al, p->kernels, sizeof(kernel_t) * p->cap_kernels,
                   sizeof(kernel_t) * cap);
    if (!more) return tj_status_oom();
    p->kernels = more;
    p->cap_kernels = cap;
  }
  tj_status_t status = NULL;
  uint32_t done = 0;
  for (; done < count && !status; ++done) {
    kernel_t* k = &p->kernels[p->num_kernels + done];
    memset(k, 0, sizeof(*k));
    status = tj_nvptx_emit_kernel(p->module, p->arch, kernels[done].kernel,
                                  &p->nv_options, &k->info);
    if (!status) status = check_gemm_alignment(&kernels[done], &k->info);
    if (tj_status_code(status) == TJ_STATUS_INVALID_ARGUMENT) {
      // Lowered kernels are valid kernel IR: what the emitter still
      // rejects is a limit of the GPU templates, so the group runs on
      // the host rather than failing the compile.
      tj_status_t u = tj_unsupported("%s", tj_status_message(status));
      tj_status_free(status);
      status = u;
    }
    if (status) break;
  }
  if (status) {
    // The failing kernel's function is gone already (or stays for an
    // alignment refusal); drop the group's others too.
    for (uint32_t i = 0; i <= done && i < count; ++i) {
      delete_entry(p->module, p->kernels[p->num_kernels + i].info.entry);
    }
    return status;
  }
  p->num_kernels += count;
  return NULL;
}

// The cache key of the module: everything the PTX depends on.
static tj_status_t module_key(tj_cuda_program_t* p, tj_cache_key_t* out) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  // 3: sm_90a GEMMs default to the wgmma template (other tiles, threads
  // and shared memory than a cached mma.sync kernel's launch).
  tj_cache_hasher_update_string(&h, "tensorjit cuda module 3");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(&h, tj_nvptx_arch_name(p->arch));
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  char buf[64];
  snprintf(buf, sizeof(buf), "llvm %u.%u.%u approx %d", major, minor, patch,
           (int)p->nv_options.approx_math);
  tj_cache_hasher_update_string(&h, buf);
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    const tj_kir_t* k = p->kernels[i].low->kernel;
    char* text;
    TJ_RETURN_IF_ERROR(tj_kir_print(k, &text));
    tj_cache_hasher_update_string(&h, text);
    tj_free_string(k->allocator, text);
  }
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

// The PTX of the module by LLVM, which consumes it.
static tj_status_t compile_module(tj_cuda_program_t* p) {
  double start = tj_now_ms();
  LLVMModuleRef m = p->module;
  p->module = NULL;
  TJ_RETURN_IF_ERROR(tj_nvptx_compile(p->target, m, p->al, &p->ptx));
  p->compile_ms = tj_now_ms() - start;
  return NULL;
}

// The PTX of the module under |key|, from a cache or LLVM (which consumes
// the module).
static tj_status_t get_ptx(tj_cuda_program_t* p, const char* cache_dir,
                           tj_cache_key_t key) {
  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  if (!p->ptx_cache_bad) {
    TJ_RETURN_IF_ERROR(
        tj_memory_cache_lookup(p->context, key, p->al, &bytes, &size, &hit));
  }
  if (hit) p->ptx_source = "memory cache";
  bool disk = cache_dir && cache_dir[0];
  const char* note = NULL;
  if (!hit && disk && !p->ptx_cache_bad) {
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(p->context, cache_dir, key, p->al,
                                          &bytes, &size, &hit, &note));
    if (hit) p->ptx_source = "disk cache";
  }
  // A cached payload is the PTX with its NUL; anything else is foreign.
  if (hit && (size == 0 || ((char*)bytes)[size - 1] != '\0' ||
              strlen(bytes) + 1 != size)) {
    tj_free(p->al, bytes, size);
    hit = false;
    p->ptx_source = "LLVM";
  }
  if (hit) {
    // tj_free_string frees strlen + 1 bytes: exactly this allocation. The
    // module is kept until the PTX has linked (load_module): a cached PTX
    // the driver refuses is a miss, and LLVM compiles the module then.
    p->ptx = bytes;
  } else {
    TJ_RETURN_IF_ERROR(compile_module(p));
    size = strlen(p->ptx) + 1;
    if (disk) {
      tj_status_t s = tj_disk_cache_store(cache_dir, key, p->ptx, size);
      if (s) {
        tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                              "cache: cuda module not stored: %s",
                              tj_status_message(s));
        tj_status_free(s);
      }
    }
  }
  p->ptx_bytes = strlen(p->ptx);
  tj_status_t s =
      tj_memory_cache_store(p->context, key, p->ptx, p->ptx_bytes + 1);
  tj_status_free(s);  // a full memory cache only costs a later compile
  (void)note;
  return NULL;
}

// Compiles a kernel apart from the module (a GEMM variant, an epilogue,
// a strided copy) through the cubin cache, and counts where it came from.
static void count_kernel(tj_cuda_program_t* p, const tj_cuda_kir_kernel_t* k) {
  if (!p->cache_dir[0]) return;
  if (k->cubin_hit) {
    ++p->kernel_cubin_hits;
  } else {
    ++p->kernel_cubin_misses;
  }
}

static tj_status_t compile_kernel(tj_cuda_program_t* p, const tj_kir_t* k,
                                  const tj_nvptx_options_t* o,
                                  tj_cuda_kir_kernel_t** out) {
  TJ_RETURN_IF_ERROR(tj_cuda_kir_compile_cached(p->device, p->target, k, o,
                                                p->context, p->cache_dir, out));
  count_kernel(p, *out);
  return NULL;
}

// get_ptx for tj_cuda_cubin_load: called only on a cubin miss.
typedef struct program_ptx_t {
  tj_cuda_program_t* p;
  const char* cache_dir;
  tj_cache_key_t key;
} program_ptx_t;

static tj_status_t program_ptx(void* ctx, const char** out_ptx) {
  program_ptx_t* c = ctx;
  TJ_RETURN_IF_ERROR(get_ptx(c->p, c->cache_dir, c->key));
  *out_ptx = c->p->ptx;
  return NULL;
}

// Loads the module through the cubin cache (cuda_cubin.h): a warm start
// runs neither LLVM nor ptxas.
static tj_status_t load_module(tj_cuda_program_t* p, const char* cache_dir) {
  tj_cache_key_t key;
  TJ_RETURN_IF_ERROR(module_key(p, &key));
  program_ptx_t c = {p, cache_dir, key};
  tj_cuda_cubin_load_t load;
  memset(&load, 0, sizeof(load));
  load.context = p->context;
  load.cache_dir = cache_dir;
  load.ptx_key = key;
  load.arch = p->arch;
  load.make_ptx = program_ptx;
  load.make_ptx_ctx = &c;
  tj_cuda_cubin_result_t r;
  tj_status_t status = tj_cuda_cubin_load(p->device, &load, &p->cumod, &r);
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY &&
      p->module && p->ptx && strcmp(p->ptx_source, "LLVM") != 0) {
    // The PTX came from a cache (its checksum right, its text not: a
    // corrupt or foreign entry) and did not link: a miss. LLVM makes it
    // again and the entry is rewritten.
    char hex[33];
    tj_cache_key_format(key, hex);
    tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                          "cache: the PTX of key %s from the %s did not link "
                          "(%s); compiling it again",
                          hex, p->ptx_source, tj_status_message(status));
    tj_status_free(status);
    tj_free_string(p->al, p->ptx);
    p->ptx = NULL;
    p->ptx_cache_bad = true;
    p->ptx_source = "LLVM";
    status = tj_cuda_cubin_load(p->device, &load, &p->cumod, &r);
  }
  if (p->module) {  // a cubin hit or a cached PTX: the module was not compiled
    LLVMDisposeModule(p->module);
    p->module = NULL;
  }
  p->cubin_source = r.source;
  p->cubin_bytes = r.bytes;
  p->link_ms = r.link_ms;
  p->load_ms = r.load_ms;
  if (r.hit) {
    ++p->cubin_hits;
    p->ptx_source = strcmp(r.source, "disk cache") == 0
                        ? "none (cubin from the disk cache)"
                        : "none (cubin from the memory cache)";
  } else if (cache_dir && cache_dir[0]) {
    ++p->cubin_misses;
  }
  return status;
}

//===--- finishing ---===//

static tj_status_t setup_tunes(tj_cuda_program_t* p);

static int64_t numel_of(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

static tj_status_t upload_constants(tj_cuda_program_t* p) {
  const tj_graph_t* g = p->graph;
  const tj_memplan_t* mp = p->mp;
  p->const_ptr = tj_calloc(p->al, g->num_nodes + 1, sizeof(uint64_t));
  if (!p->const_ptr) return tj_status_oom();
  int64_t total = 0;
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    if (buf->kind != TJ_BUFFER_EXTERNAL || n->op != TJ_OP_CONSTANT) continue;
    int64_t bytes =
        numel_of(n->rank, n->dims) * (int64_t)tj_dtype_size(n->dtype);
    total += align_up(bytes ? bytes : 1, STAGE_ALIGN);
  }
  if (total == 0) return NULL;
  tj_cuda_device_t* d = p->device;
  TJ_RETURN_IF_ERROR(tj_cuda_allocator_alloc(d->allocator, (size_t)total,
                                             p->stream, &p->consts));
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(d));
  tj_status_t status = NULL;
  int64_t offset = 0;
  for (uint32_t b = 0; b < mp->num_buffers && !status; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    if (buf->kind != TJ_BUFFER_EXTERNAL || n->op != TJ_OP_CONSTANT) continue;
    int64_t bytes =
        numel_of(n->rank, n->dims) * (int64_t)tj_dtype_size(n->dtype);
    p->const_ptr[buf->node] = p->consts + (uint64_t)offset;
    if (bytes > 0) {
      status = TJ_CU_STATUS(&d->cu, cuMemcpyHtoDAsync,
                            (p->consts + (uint64_t)offset, n->attrs.data,
                             (size_t)bytes, p->stream));
    }
    offset += align_up(bytes ? bytes : 1, STAGE_ALIGN);
  }
  // Pageable sources: the copies are done when they return, but wait for
  // the stream anyway so the constants are there before any run.
  if (!status) status = TJ_CU_STATUS(&d->cu, cuStreamSynchronize, (p->stream));
  tj_cuda_device_leave(d);
  return status;
}

static tj_status_t alloc_run_state(tj_cuda_program_t* p) {
  const tj_graph_t* g = p->graph;
  uint32_t slots = p->mp->num_slots;
  uint32_t nk = p->num_kernels;
  p->num_args = 0;
  for (uint32_t i = 0; i < nk; ++i) {
    p->kernels[i].arg_offset = p->num_args;
    const tj_kir_t* k = p->kernels[i].low->kernel;
    p->num_args += k->num_buffers + k->num_params;
  }
  size_t klen = key_len(p) + 1;
  size_t bytes =
      sizeof(int64_t) * (slots + 1) + sizeof(uint64_t) * (g->num_nodes + 1) +
      sizeof(int64_t) * 2 * (g->num_inputs + g->num_outputs + 1) +
      sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1) +
      sizeof(uint64_t) * (p->num_args + 1) + sizeof(void*) * (p->num_args + 1) +
      sizeof(tj_nvptx_launch_t) * (nk + 1) + sizeof(int64_t) * klen;
  unsigned char* m = tj_calloc(p->al, 1, bytes);
  if (!m) return tj_status_oom();
  p->meta = m;
  p->meta_bytes = bytes;
  // Every array is 8-byte aligned: all elements are 8 bytes, except the
  // launches (4-byte fields), placed last but one.
  p->slot_offsets = (int64_t*)m;
  m += sizeof(int64_t) * (slots + 1);
  p->loc = (uint64_t*)m;
  m += sizeof(uint64_t) * (g->num_nodes + 1);
  p->in_stage = (int64_t*)m;
  p->in_pin = p->in_stage + g->num_inputs + 1;
  m += sizeof(int64_t) * 2 * (g->num_inputs + 1);
  p->out_stage = (int64_t*)m;
  p->out_pin = p->out_stage + g->num_outputs + 1;
  m += sizeof(int64_t) * 2 * (g->num_outputs + 1);
  p->scalars = (int64_t*)m;
  m += sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1);
  p->argv = (uint64_t*)m;
  m += sizeof(uint64_t) * (p->num_args + 1);
  p->argp = (void**)m;
  m += sizeof(void*) * (p->num_args + 1);
  p->key = (int64_t*)m;
  m += sizeof(int64_t) * klen;
  p->launches = (tj_nvptx_launch_t*)m;
  for (uint32_t i = 0; i < p->num_args; ++i) p->argp[i] = &p->argv[i];
  for (int i = 0; i < MAX_GRAPHS; ++i) {
    p->graphs[i].key = tj_calloc(p->al, klen, sizeof(int64_t));
    if (!p->graphs[i].key) return tj_status_oom();
  }
  return NULL;
}

// An offline program stops at PTX: the module's, and one more module with
// every kernel each GEMM candidate compiles apart on a GPU (the other main
// loops and tiles of kVariants, the cuBLASLt candidate's epilogue), each
// function renamed <entry>_c<candidate> so they share a module. The
// candidates a GPU of |p->arch| skips (wgmma before sm_90a) are left out
// the same way: their emission says UNSUPPORTED.
static tj_status_t finish_offline(tj_cuda_program_t* p) {
  if (p->num_kernels == 0) {
    LLVMDisposeModule(p->module);
    p->module = NULL;
    return NULL;
  }
  TJ_RETURN_IF_ERROR(compile_module(p));
  p->ptx_bytes = strlen(p->ptx);
  TJ_RETURN_IF_ERROR(setup_tunes(p));
  if (!p->tunes) return NULL;
  p->module = tj_nvptx_module_create(p->target, p->llvm, "tj_variants");
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < p->num_kernels && !status; ++i) {
    const tune_t* t = &p->tunes[i];
    if (!t->tunable) continue;
    for (int32_t c = 1; c < NUM_CANDIDATES && !status; ++c) {
      tj_nvptx_options_t o = {.approx_math = p->nv_options.approx_math};
      const tj_kir_t* k = p->kernels[i].low->kernel;
      if (c == CAND_CUBLASLT) {
        if (!t->lt_ok) continue;
        k = t->epi;
      } else {
        o = kVariants[c];
        o.approx_math = p->nv_options.approx_math;
      }
      tj_nvptx_kernel_t info;
      status = tj_nvptx_emit_kernel(p->module, p->arch, k, &o, &info);
      if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
        tj_status_free(status);
        status = NULL;
        continue;
      }
      if (status) {
        status = tj_status_annotate(status, "GEMM candidate %d (%s)", (int)c,
                                    kCandidateNames[c]);
        break;
      }
      char name[sizeof(info.entry) + 16];
      snprintf(name, sizeof(name), "%s_c%d", info.entry, (int)c);
      LLVMValueRef f = LLVMGetNamedFunction(p->module, info.entry);
      if (f) LLVMSetValueName2(f, name, strlen(name));
      ++p->num_variant_kernels;
    }
  }
  if (!status && p->num_variant_kernels > 0) {
    LLVMModuleRef m = p->module;
    p->module = NULL;
    status = tj_nvptx_compile(p->target, m, p->al, &p->variants_ptx);
  }
  if (p->module) {
    LLVMDisposeModule(p->module);
    p->module = NULL;
  }
  return status;
}

tj_status_t tj_cuda_program_finish(
    tj_cuda_program_t* p, const tj_graph_t* graph, const tj_memplan_t* memplan,
    const tj_lowered_kernel_t* kernels, uint32_t num_kernels,
    const tj_cuda_step_t* steps, uint32_t num_steps, const char* cache_dir) {
  if (num_kernels != p->num_kernels)
    return tj_internal("cuda program: %u kernels added, %u finished",
                       p->num_kernels, num_kernels);
  for (uint32_t i = 0; i < num_kernels; ++i) p->kernels[i].low = &kernels[i];
  if (!p->device) return finish_offline(p);
  p->graph = graph;
  p->mp = memplan;
  p->num_symbols = tj_dim_num_symbols(&graph->dims);
  p->steps = tj_calloc(p->al, num_steps + 1, sizeof(tj_cuda_step_t));
  if (!p->steps) return tj_status_oom();
  p->num_steps = num_steps;
  if (num_steps) memcpy(p->steps, steps, sizeof(tj_cuda_step_t) * num_steps);
  snprintf(p->cache_dir, sizeof(p->cache_dir), "%s",
           cache_dir ? cache_dir : "");
  for (uint32_t s = 0; s < num_steps; ++s) {
    p->has_host_steps |= steps[s].kind == TJ_CUDA_STEP_HOST;
  }
  p->first_output = tj_alloc(p->al, sizeof(int32_t) * (graph->num_nodes + 1));
  if (!p->first_output) return tj_status_oom();
  for (uint32_t i = 0; i < graph->num_nodes; ++i) p->first_output[i] = -1;
  for (uint32_t i = graph->num_outputs; i-- > 0;) {
    p->first_output[graph->outputs[i].node] = (int32_t)i;
  }
  TJ_RETURN_IF_ERROR(alloc_run_state(p));
  if (num_kernels > 0) {
    TJ_RETURN_IF_ERROR(load_module(p, cache_dir));
    double start = tj_now_ms();
    for (uint32_t i = 0; i < num_kernels; ++i) {
      kernel_t* k = &p->kernels[i];
      TJ_RETURN_IF_ERROR(tj_cuda_kernel_get(p->cumod, k->info.entry,
                                            k->info.shared_bytes, &k->fn));
    }
    p->load_ms += tj_now_ms() - start;
    TJ_RETURN_IF_ERROR(setup_tunes(p));
  } else if (p->module) {
    LLVMDisposeModule(p->module);
    p->module = NULL;
  }
  return upload_constants(p);
}

const char* tj_cuda_program_ptx(const tj_cuda_program_t* program) {
  return program->ptx;
}

const char* tj_cuda_program_variants_ptx(const tj_cuda_program_t* program,
                                         uint32_t* out_num_kernels) {
  *out_num_kernels = program->num_variant_kernels;
  return program->variants_ptx;
}

//===--- GEMM candidates: setup ---===//

static bool ival_eq(tj_kir_ival_t a, tj_kir_ival_t b) {
  return a.param == b.param && (a.param >= 0 || a.value == b.value);
}

// The GEMM's epilogue phase as a POINTWISE kernel over the same space and
// params that reads the accumulator from a dense [M, N] temporary of
// |t->acc_dtype| (already rounded to the matmul's dtype, as the GEMM's
// epilogue rounds it first thing).
static tj_status_t make_epilogue(tj_cuda_program_t* p, const tj_kir_t* g,
                                 tune_t* t) {
  char name[232];
  snprintf(name, sizeof(name), "%s_epi", g->name);
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(tj_kir_create(p->al, TJ_KIR_POINTWISE, name, &k));
  for (uint32_t i = 0; i < g->num_params; ++i) {
    tj_kir_add_param(k, g->param_names[i]);
  }
  tj_kir_set_space(k, g->rank, g->dims);
  uint32_t map[TJ_KIR_MAX_BUFFERS];
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &g->buffers[b];
    map[b] = TJ_KIR_NONE;
    if (buf->role == TJ_KIR_GEMM_A || buf->role == TJ_KIR_GEMM_B) continue;
    map[b] =
        tj_kir_add_buffer(k, buf->name, buf->dtype, buf->role, buf->strides);
    if (map[b] < TJ_KIR_MAX_BUFFERS) t->epi_map[map[b]] = b;
  }
  tj_kir_ival_t st[2] = {g->dims[1], tj_kir_constant(1)};
  t->epi_acc = tj_kir_add_buffer(k, "acc", t->acc_dtype, TJ_KIR_INPUT, st);
  const tj_kir_phase_t* ph = &g->phases[0];
  uint32_t* v = tj_calloc(p->al, ph->num_insts + 1, sizeof(uint32_t));
  if (!v) {
    tj_kir_destroy(k);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    const uint32_t* a = in->args;
    switch (in->kind) {
      case TJ_KIR_LOAD:
        v[i] = tj_kir_load(k, map[in->ref]);
        break;
      case TJ_KIR_CONST:
        v[i] = tj_dtype_is_float(in->dtype)
                   ? tj_kir_const_float(k, in->dtype, in->fvalue)
                   : tj_kir_const_int(k, in->dtype, in->ivalue);
        break;
      case TJ_KIR_PARAM:
        v[i] = tj_kir_param(k, in->ref);
        break;
      case TJ_KIR_INDEX:
        v[i] = tj_kir_index(k, in->ref);
        break;
      case TJ_KIR_ACC:
        v[i] = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, t->epi_acc));
        break;
      case TJ_KIR_OP:
        if (in->op == TJ_OP_CAST) {
          v[i] = tj_kir_cast(k, in->dtype, v[a[0]]);
        } else if (in->op == TJ_OP_WHERE) {
          v[i] = tj_kir_where(k, v[a[0]], v[a[1]], v[a[2]]);
        } else if (in->num_args == 1) {
          v[i] = tj_kir_unary(k, in->op, v[a[0]]);
        } else {
          v[i] = tj_kir_binary(k, in->op, v[a[0]], v[a[1]]);
        }
        break;
      case TJ_KIR_STORE:
        tj_kir_store(k, map[in->ref], v[a[0]]);
        break;
      default:
        v[i] = TJ_KIR_NONE;
        break;  // ROW, YIELD: not in a GEMM
    }
  }
  tj_free(p->al, v, sizeof(uint32_t) * (ph->num_insts + 1));
  tj_status_t status = tj_kir_finalize(k);
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  t->epi = k;
  return NULL;
}

static tj_status_t setup_tunes(tj_cuda_program_t* p) {
  bool any = false;
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    any |= p->kernels[i].info.tensor_cores;
  }
  if (!any) return NULL;
  p->tunes = tj_calloc(p->al, p->num_kernels + 1, sizeof(tune_t));
  if (!p->tunes) return tj_status_oom();
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    tune_t* t = &p->tunes[i];
    t->temp_offset = -1;
    const tj_kir_t* g = p->kernels[i].low->kernel;
    if (!p->kernels[i].info.tensor_cores) continue;
    t->tunable = true;
    for (uint32_t b = 0; b < g->num_buffers; ++b) {
      if (g->buffers[b].role == TJ_KIR_GEMM_A) t->a = b;
      if (g->buffers[b].role == TJ_KIR_GEMM_B) t->b = b;
    }
    TJ_RETURN_IF_ERROR(tj_kir_print(g, &t->text));
    // cuBLASLt takes row-major X[M,K] and W[K,N] with leading dims K, N.
    const tj_kir_buffer_t* A = &g->buffers[t->a];
    const tj_kir_buffer_t* B = &g->buffers[t->b];
    t->acc_dtype = A->dtype;
    t->lt_ok = g->rank == 2 && tj_kir_ival_is_const(A->strides[1], 1) &&
               tj_kir_ival_is_const(B->strides[1], 1) &&
               ival_eq(A->strides[0], g->gemm_k) &&
               ival_eq(B->strides[0], g->dims[1]);
    if (t->lt_ok) {
      tj_status_t s = make_epilogue(p, g, t);
      if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
      if (s) {
        // Not expressible as a pointwise kernel: candidate 4 is out.
        tj_status_free(s);
        t->lt_ok = false;
      }
    }
  }
  return NULL;
}

//===--- GEMM candidates: running ---===//

// Compiles what candidate |c| of kernel |ki| needs (once).
static tj_status_t ensure_candidate(tj_cuda_program_t* p, uint32_t ki,
                                    int32_t c) {
  tune_t* t = &p->tunes[ki];
  const tj_kir_t* g = p->kernels[ki].low->kernel;
  if (c > 0 && c != CAND_CUBLASLT && !t->variant[c]) {
    tj_nvptx_options_t o = kVariants[c];
    o.approx_math = p->nv_options.approx_math;
    TJ_RETURN_IF_ERROR(compile_kernel(p, g, &o, &t->variant[c]));
  }
  if (c == CAND_CUBLASLT) {
    if (!t->lt_ok || p->lt_unavailable)
      return tj_unsupported("cuBLASLt does not fit kernel @%s", g->name);
    if (!p->lt) {
      tj_status_t s = tj_cublaslt_open(p->al, &p->lt);
      if (s) {
        p->lt_unavailable = true;
        return s;
      }
    }
    if (!p->lt_workspace) {
      TJ_RETURN_IF_ERROR(tj_cuda_allocator_alloc(p->device->allocator,
                                                 LT_WORKSPACE_BYTES, p->stream,
                                                 &p->lt_workspace));
    }
    if (!t->epi_fn) {
      tj_nvptx_options_t o = {.approx_math = p->nv_options.approx_math};
      TJ_RETURN_IF_ERROR(compile_kernel(p, t->epi, &o, &t->epi_fn));
    }
  }
  return NULL;
}

// Arguments and grids of candidate |c| of kernel |ki| for this run (the
// fused kernel's arguments are in argv already).
static tj_status_t candidate_args(tj_cuda_program_t* p, uint32_t ki, int32_t c,
                                  const int64_t* scalars) {
  tune_t* t = &p->tunes[ki];
  kernel_t* kern = &p->kernels[ki];
  const tj_kir_t* g = kern->low->kernel;
  if (c == 0) {
    return tj_nvptx_launch_config(g, &kern->info, scalars, p->device->num_sms,
                                  &p->launches[ki]);
  }
  if (c != CAND_CUBLASLT) {
    return tj_nvptx_launch_config(g, &t->variant[c]->info, scalars,
                                  p->device->num_sms, &p->launches[ki]);
  }
  const uint64_t* argv = p->argv + kern->arg_offset;
  const tj_kir_t* e = t->epi;
  if (t->temp_offset < 0) return tj_internal("no GEMM temporary");
  uint64_t temp = p->arena + (uint64_t)t->temp_offset;
  // cuBLASLt plans assume 256-byte aligned operands.
  if (argv[t->a] % 256 || argv[t->b] % 256 || temp % 256)
    return tj_unsupported("cuBLASLt: operands not 256-byte aligned");
  for (uint32_t b = 0; b < e->num_buffers; ++b) {
    t->epi_argv[b] = b == t->epi_acc ? temp : argv[t->epi_map[b]];
    t->epi_argp[b] = &t->epi_argv[b];
  }
  for (uint32_t i = 0; i < e->num_params; ++i) {
    memcpy(&t->epi_argv[e->num_buffers + i], &scalars[i], sizeof(int64_t));
    t->epi_argp[e->num_buffers + i] = &t->epi_argv[e->num_buffers + i];
  }
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
      e, &t->epi_fn->info, scalars, p->device->num_sms, &t->epi_launch));
  int64_t n = tj_kir_ival_eval(g->dims[1], scalars);
  int64_t k = tj_kir_ival_eval(g->gemm_k, scalars);
  t->plan = NULL;
  for (int i = 0; i < MAX_PLANS && !t->plan; ++i) {
    if (t->plans[i] && t->plan_ms[i] == t->m) t->plan = t->plans[i];
  }
  if (!t->plan) {
    // Plans for the last few M (cuBLASLt's heuristic picks per shape).
    uint32_t slot = t->next_plan++ % MAX_PLANS;
    tj_cublaslt_gemm_destroy(t->plans[slot]);
    t->plans[slot] = NULL;
    TJ_RETURN_IF_ERROR(tj_cublaslt_gemm_plan(
        p->lt, t->acc_dtype, t->m, n, k, TJ_CUBLASLT_EPILOGUE_NONE,
        LT_WORKSPACE_BYTES, &t->plans[slot]));
    t->plan_ms[slot] = t->m;
    t->plan = t->plans[slot];
    p->fresh_plan = true;
  }
  return NULL;
}

static tj_status_t launch_function(tj_cuda_program_t* p, tj_cu_function_t fn,
                                   const tj_nvptx_launch_t* l, void** args,
                                   const char* entry) {
  if (l->empty) return NULL;
  return tj_status_annotate(
      TJ_CU_STATUS(
          &p->device->cu, cuLaunchKernel,
          (fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
           l->block[2], l->shared_bytes, p->stream, args, NULL)),
      "kernel %s", entry);
}

// Enqueues kernel |ki| as candidate |c|.
static tj_status_t launch_candidate(tj_cuda_program_t* p, uint32_t ki,
                                    int32_t c) {
  kernel_t* k = &p->kernels[ki];
  void** args = p->argp + k->arg_offset;
  if (c == 0)
    return launch_function(p, k->fn.function, &p->launches[ki], args,
                           k->info.entry);
  tune_t* t = &p->tunes[ki];
  if (c != CAND_CUBLASLT)
    return launch_function(p, t->variant[c]->function.function,
                           &p->launches[ki], args, k->info.entry);
  if (p->launches[ki].empty) return NULL;
  const uint64_t* argv = p->argv + k->arg_offset;
  TJ_RETURN_IF_ERROR(tj_cublaslt_gemm_run(t->plan, argv[t->a], argv[t->b], 0,
                                          p->arena + (uint64_t)t->temp_offset,
                                          p->lt_workspace, p->stream));
  return launch_function(p, t->epi_fn->function.function, &t->epi_launch,
                         t->epi_argp, t->epi_fn->info.entry);
}

typedef struct measure_ctx_t {
  tj_cuda_program_t* p;
  uint32_t ki;
  const int64_t* scalars;
} measure_ctx_t;

// Whether tuning times candidate |c|. Where wgmma runs, mma.sync main
// loops are not worth compiling to time (~0.2 s each, LLVM and ptxas): on
// the H200 they reached 0.46x cuBLAS where wgmma reached 0.69x
// (bench/cuda_bench --gemm). They stay available to TJ_CUDA_GEMM_CANDIDATE.
static bool timed_candidate(const tj_cuda_program_t* p, int32_t c) {
  return !(p->arch == TJ_NVPTX_SM_90A && c > 0 && c != CAND_CUBLASLT &&
           kVariants[c].gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC);
}

// One kernel compiled on a thread of its own (precompile_candidates).
typedef struct precompile_t {
  tj_cuda_program_t* p;
  const tj_kir_t* kernel;
  tj_nvptx_options_t options;
  tj_nvptx_target_t* target;  // the thread's own
  tj_cuda_kir_kernel_t** slot;
  tj_cuda_kir_kernel_t* out;
  tj_status_t status;
  pthread_t thread;
  bool started;
} precompile_t;

static void* precompile_main(void* arg) {
  precompile_t* w = arg;
  w->status = tj_cuda_kir_compile_cached(w->p->device, w->target, w->kernel,
                                         &w->options, w->p->context,
                                         w->p->cache_dir, &w->out);
  return NULL;
}

// Compiles the candidates of kernel |ki| that tuning is about to time and
// that are not compiled yet, each on a thread of its own: each costs LLVM
// and ptxas (~0.2 s), they are independent, and the first tuning of a
// bucket then waits for the slowest instead of their sum. Each thread has
// its own NVPTX TargetMachine (LLVM's are not to be shared across
// threads); the driver calls push the context themselves. A failure is
// left for ensure_candidate to meet again, and report, when the candidate
// is timed.
static void precompile_candidates(tj_cuda_program_t* p, uint32_t ki) {
  tune_t* t = &p->tunes[ki];
  t->precompiled = true;
  precompile_t w[NUM_CANDIDATES];
  memset(w, 0, sizeof(w));
  int32_t n = 0;
  tj_nvptx_options_t approx = {.approx_math = p->nv_options.approx_math};
  for (int32_t c = 1; c < NUM_CANDIDATES; ++c) {
    if (!timed_candidate(p, c)) continue;
    if (c == CAND_CUBLASLT) {
      if (!t->lt_ok || p->lt_unavailable || t->epi_fn) continue;
      w[n] = (precompile_t){
          .kernel = t->epi, .options = approx, .slot = &t->epi_fn};
    } else {
      if (t->variant[c]) continue;
      w[n] = (precompile_t){.kernel = p->kernels[ki].low->kernel,
                            .options = kVariants[c],
                            .slot = &t->variant[c]};
      w[n].options.approx_math = p->nv_options.approx_math;
    }
    w[n].p = p;
    ++n;
  }
  for (int32_t i = 0; i < n; ++i) {
    tj_status_t s = tj_nvptx_target_create(p->al, p->arch, &w[i].target);
    if (!s && pthread_create(&w[i].thread, NULL, precompile_main, &w[i]) == 0)
      w[i].started = true;
    tj_status_free(s);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (w[i].started) {
      pthread_join(w[i].thread, NULL);
      if (!w[i].status) {
        *w[i].slot = w[i].out;
        count_kernel(p, w[i].out);
      }
      tj_status_free(w[i].status);
    }
    tj_nvptx_target_destroy(w[i].target);
  }
}

static tj_status_t measure(void* context, int32_t c, int32_t repeats,
                           double* out_ms) {
  measure_ctx_t* m = context;
  tj_cuda_program_t* p = m->p;
  const tj_cuda_symbols_t* cu = &p->device->cu;
  if (!timed_candidate(p, c))
    return tj_unsupported("superseded by wgmma on sm_90a");
  if (!p->tunes[m->ki].precompiled) precompile_candidates(p, m->ki);
  tj_status_t s = ensure_candidate(p, m->ki, c);
  if (!s) s = candidate_args(p, m->ki, c, m->scalars);
  tj_status_code_t code = tj_status_code(s);
  if (s && code != TJ_STATUS_OUT_OF_MEMORY && code != TJ_STATUS_UNSUPPORTED) {
    // A candidate that does not build (ptxas refusing a schedule, say)
    // is skipped, not fatal: the others still serve.
    tj_context_diagnostic(
        p->context, TJ_SEVERITY_WARNING, "autotune: %s: %s skipped: %s",
        p->kernels[m->ki].info.entry, kCandidateNames[c], tj_status_message(s));
    tj_status_free(s);
    return tj_unsupported("candidate failed");
  }
  TJ_RETURN_IF_ERROR(s);
  if (!p->ev_start) {
    TJ_CU_RETURN_IF_ERROR(cu, cuEventCreate, (&p->ev_start, 0));
    TJ_CU_RETURN_IF_ERROR(cu, cuEventCreate, (&p->ev_stop, 0));
  }
  TJ_CU_RETURN_IF_ERROR(cu, cuEventRecord, (p->ev_start, p->stream));
  for (int32_t i = 0; i < repeats; ++i) {
    TJ_RETURN_IF_ERROR(launch_candidate(p, m->ki, c));
  }
  TJ_CU_RETURN_IF_ERROR(cu, cuEventRecord, (p->ev_stop, p->stream));
  TJ_CU_RETURN_IF_ERROR(cu, cuEventSynchronize, (p->ev_stop));
  float ms = 0;
  TJ_CU_RETURN_IF_ERROR(cu, cuEventElapsedTime, (&ms, p->ev_start, p->ev_stop));
  *out_ms = (double)ms / repeats;
  return NULL;
}

// Picks (tuning on the first run of a bucket) and prepares the candidate
// of every tensor-core GEMM for this run. Runs after kernel_args. The
// tuning launches write only the GEMM's outputs and its temporary, which
// this run's own launches write again afterwards.
static tj_status_t choose_candidates(tj_cuda_program_t* p) {
  if (!p->tunes) return NULL;
  for (uint32_t ki = 0; ki < p->num_kernels; ++ki) {
    tune_t* t = &p->tunes[ki];
    t->current = 0;
    if (!t->tunable || p->launches[ki].empty) continue;
    const tj_kir_t* g = p->kernels[ki].low->kernel;
    const int64_t* scalars = p->scalars + (size_t)ki * TJ_KIR_MAX_PARAMS;
    t->m = tj_kir_ival_eval(g->dims[g->rank - 2], scalars);
    int64_t bucket = tj_pow2_bucket(t->m);
    int32_t c = -1;
    for (uint32_t i = 0; i < t->num_choices && c < 0; ++i) {
      if (t->choices[i].bucket == bucket) c = t->choices[i].candidate;
    }
    if (c < 0) {
      c = 0;
      if (p->forced >= 0) {
        c = p->forced;
      } else if (p->autotune) {
        const char* names[NUM_CANDIDATES];
        for (int i = 0; i < NUM_CANDIDATES; ++i) names[i] = kCandidateNames[i];
        tj_autotune_problem_t prob = {t->text, p->device_desc, bucket,
                                      NUM_CANDIDATES, names};
        measure_ctx_t mc = {p, ki, scalars};
        tj_autotune_result_t r;
        TJ_RETURN_IF_ERROR(
            tj_autotune(p->context, p->cache_dir, &prob, measure, &mc, &r));
        c = r.best;
        ++p->tunings;
        p->tuning_cache_hits += r.from_cache;
        p->tuning_ms += r.tune_ms;
        char line[256] = "";
        int n = 0;
        for (int i = 0;
             i < prob.num_candidates && n >= 0 && (size_t)n < sizeof(line);
             ++i) {
          n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s %.4f",
                        i ? ", " : "", kCandidateNames[i], r.ms[i]);
        }
        if (p->log_autotune)
          tj_context_diagnostic(p->context, TJ_SEVERITY_REMARK,
                                "autotune: %s M bucket %lld: %s (%s%s ms)",
                                p->kernels[ki].info.entry, (long long)bucket,
                                kCandidateNames[c],
                                r.from_cache ? "cached; " : "", line);
      }
      if (t->num_choices == MAX_CHOICES) t->num_choices = 0;  // forget all
      t->choices[t->num_choices++] = (choice_t){bucket, c};
    }
    // A candidate that cannot serve this run (alignment, a missing
    // library) falls back to the module's kernel.
    tj_status_t s = ensure_candidate(p, ki, c);
    if (!s) s = candidate_args(p, ki, c, scalars);
    if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
      tj_status_free(s);
      c = 0;
      s = candidate_args(p, ki, 0, scalars);
    }
    TJ_RETURN_IF_ERROR(s);
    t->current = c;
    snprintf(p->last_choice, sizeof(p->last_choice), "%s", kCandidateNames[c]);
  }
  return NULL;
}

//===--- running ---===//

static bool tensor_dense(const tj_tensor_t* t) {
  if (!t->strides) return true;
  int64_t expect = 1;
  for (int32_t d = t->rank; d-- > 0;) {
    if (t->shape[d] == 0) return true;
    if (t->shape[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->shape[d];
  }
  return true;
}

static unsigned char* tensor_data(const tj_tensor_t* t) {
  return (unsigned char*)t->data + t->byte_offset;
}

static int64_t tensor_bytes(const tj_tensor_t* t) {
  return numel_of(t->rank, t->shape) * (int64_t)tj_dtype_size(t->dtype);
}

// Copies a |rank|-dim array of |size|-byte elements between strided host
// layouts (strides in elements; NULL is dense row-major).
static void copy_strided(unsigned char* dst, const int64_t* dst_strides,
                         const unsigned char* src, const int64_t* src_strides,
                         int32_t rank, const int64_t* shape, size_t size) {
  int64_t n = numel_of(rank, shape);
  if (n == 0) return;
  if (rank == 0 || (!dst_strides && !src_strides)) {
    memcpy(dst, src, (size_t)n * size);
    return;
  }
  int64_t ds[TJ_MAX_RANK], ss[TJ_MAX_RANK], idx[TJ_MAX_RANK] = {0};
  int64_t s = 1;
  for (int32_t d = rank; d-- > 0;) {
    ds[d] = dst_strides ? dst_strides[d] : s;
    ss[d] = src_strides ? src_strides[d] : s;
    s *= shape[d];
  }
  int64_t inner = shape[rank - 1];
  for (int64_t done = 0; done < n; done += inner) {
    int64_t doff = 0, soff = 0;
    for (int32_t d = 0; d + 1 < rank; ++d) {
      doff += idx[d] * ds[d];
      soff += idx[d] * ss[d];
    }
    for (int64_t i = 0; i < inner; ++i) {
      memcpy(dst + (doff + i * ds[rank - 1]) * (int64_t)size,
             src + (soff + i * ss[rank - 1]) * (int64_t)size, size);
    }
    for (int32_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

static bool output_direct(const tj_cuda_program_t* p, uint32_t i) {
  uint32_t node = p->graph->outputs[i].node;
  uint32_t bi = p->mp->buffer_of[node];
  return p->first_output[node] == (int32_t)i && bi != UINT32_MAX &&
         p->mp->buffers[bi].kind == TJ_BUFFER_OUTPUT;
}

static tj_status_t check_device_tensor(const tj_cuda_program_t* p,
                                       const tj_tensor_t* t, const char* what,
                                       const char* name) {
  if (t->device_type == TJ_DEVICE_CPU) return NULL;
  if (t->device_type != TJ_DEVICE_CUDA)
    return tj_invalid("%s \"%s\": device type %d is neither CPU nor CUDA", what,
                      name, (int)t->device_type);
  if (t->device_id != p->device->ordinal)
    return tj_invalid(
        "%s \"%s\" is on CUDA device %d; the executable runs on "
        "device %d",
        what, name, (int)t->device_id, (int)p->device->ordinal);
  // Strided CUDA inputs may repeat elements (zero strides broadcast);
  // outputs may not, nor overlap each other or an input: the caller,
  // tj_executable_run, checked that with tj_ir_check_run_memory.
  return NULL;
}

//===--- strided CUDA tensors ---===//

// The copy kernel for |dtype|, |rank| and direction, built on first use.
static tj_status_t copy_kernel(tj_cuda_program_t* p, tj_dtype_t dtype,
                               int32_t rank, bool scatter,
                               copy_kernel_t** out) {
  for (uint32_t i = 0; i < p->num_copies; ++i) {
    copy_kernel_t* c = &p->copies[i];
    if (c->dtype == dtype && c->rank == rank && c->scatter == scatter) {
      *out = c;
      return NULL;
    }
  }
  if (p->num_copies == MAX_COPY_KERNELS)
    return tj_internal("cuda program: more than %d strided copy kernels",
                       MAX_COPY_KERNELS);
  char name[64];
  snprintf(name, sizeof(name), "tj_%s_%s_r%d", scatter ? "scatter" : "gather",
           tj_dtype_name(dtype), (int)rank);
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(tj_kir_create(p->al, TJ_KIR_POINTWISE, name, &k));
  // Params: sizes [0, r), the tensor's strides [r, 2r), the staging's
  // strides of dims [0, r - 1) at [2r, 3r - 1); its innermost stride is 1,
  // which lets the dense side use vector accesses.
  tj_kir_ival_t dims[TJ_KIR_MAX_RANK], strided[TJ_KIR_MAX_RANK],
      dense[TJ_KIR_MAX_RANK];
  char pname[16];
  for (int32_t d = 0; d < rank; ++d) {
    snprintf(pname, sizeof(pname), "n%d", (int)d);
    dims[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  for (int32_t d = 0; d < rank; ++d) {
    snprintf(pname, sizeof(pname), "s%d", (int)d);
    strided[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  for (int32_t d = 0; d + 1 < rank; ++d) {
    snprintf(pname, sizeof(pname), "t%d", (int)d);
    dense[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  dense[rank - 1] = tj_kir_constant(1);
  tj_kir_set_space(k, rank, dims);
  uint32_t src = tj_kir_add_buffer(k, "src", dtype, TJ_KIR_INPUT,
                                   scatter ? dense : strided);
  uint32_t dst = tj_kir_add_buffer(k, "dst", dtype, TJ_KIR_OUTPUT,
                                   scatter ? strided : dense);
  tj_kir_store(k, dst, tj_kir_load(k, src));
  tj_status_t status = tj_kir_finalize(k);
  tj_cuda_kir_kernel_t* fn = NULL;
  if (!status) {
    tj_nvptx_options_t o = {.approx_math = p->nv_options.approx_math};
    status = compile_kernel(p, k, &o, &fn);
  }
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  copy_kernel_t* c = &p->copies[p->num_copies++];
  *c = (copy_kernel_t){dtype, rank, scatter, k, fn};
  *out = c;
  return NULL;
}

// Enqueues the copy between CUDA tensor |t| (any strides, byte_offset) and
// the dense array at |dense|: a gather into it, or (|scatter|) a scatter
// out of it.
static tj_status_t strided_copy(tj_cuda_program_t* p, const tj_tensor_t* t,
                                uint64_t dense, bool scatter) {
  if (numel_of(t->rank, t->shape) == 0) return NULL;
  // Dims of size 1 have no effect on addresses: drop them.
  int64_t n[TJ_MAX_RANK], s[TJ_MAX_RANK];
  int32_t r = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->shape[d] == 1) continue;
    n[r] = t->shape[d];
    s[r++] = t->strides[d];
  }
  if (r == 0) {
    n[r] = 1;
    s[r++] = 1;
  }
  copy_kernel_t* c = NULL;
  TJ_RETURN_IF_ERROR(copy_kernel(p, t->dtype, r, scatter, &c));
  int64_t scalars[3 * TJ_MAX_RANK];
  int64_t dense_stride = 1;
  for (int32_t d = r; d-- > 0;) {
    scalars[d] = n[d];
    scalars[r + d] = s[d];
    if (d + 1 < r) scalars[2 * r + d] = dense_stride;
    dense_stride *= n[d];
  }
  uint64_t argv[2 + 3 * TJ_MAX_RANK];
  void* argp[2 + 3 * TJ_MAX_RANK];
  uint64_t tensor = (uint64_t)(uintptr_t)tensor_data(t);
  argv[0] = scatter ? dense : tensor;
  argv[1] = scatter ? tensor : dense;
  uint32_t np = c->kir->num_params;
  memcpy(&argv[2], scalars, sizeof(int64_t) * np);
  for (uint32_t i = 0; i < 2 + np; ++i) argp[i] = &argv[i];
  tj_nvptx_launch_t l;
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(c->kir, &c->fn->info, scalars,
                                            p->device->num_sms, &l));
  TJ_RETURN_IF_ERROR(launch_function(p, c->fn->function.function, &l, argp,
                                     c->fn->info.entry));
  ++p->strided_copies;
  return NULL;
}

static tj_status_t kernel_scalars(tj_cuda_program_t* p, uint32_t ki,
                                  const int64_t* sym);

// Arena and pinned layout of this run; grows both as needed.
static tj_status_t plan_run(tj_cuda_program_t* p, const int64_t* sym,
                            const tj_tensor_t* inputs,
                            const tj_tensor_t* outputs, bool* out_uses_host) {
  const tj_graph_t* g = p->graph;
  int64_t arena_bytes;
  TJ_RETURN_IF_ERROR(
      tj_memplan_evaluate(p->mp, g, sym, p->slot_offsets, &arena_bytes));
  int64_t total = align_up(arena_bytes, STAGE_ALIGN);
  int64_t pin = 0;
  bool host = false;
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* t = &inputs[i];
    TJ_RETURN_IF_ERROR(
        check_device_tensor(p, t, "input", g->nodes[g->inputs[i]].attrs.name));
    p->in_stage[i] = p->in_pin[i] = -1;
    int64_t bytes = align_up(tensor_bytes(t), STAGE_ALIGN);
    if (t->device_type == TJ_DEVICE_CUDA) {
      // A strided one is gathered into dense staging.
      if (!tensor_dense(t)) {
        p->in_stage[i] = total;
        total += bytes;
      }
      continue;
    }
    host = true;
    p->in_stage[i] = total;
    total += bytes;
    p->in_pin[i] = pin;
    pin += bytes;
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    TJ_RETURN_IF_ERROR(check_device_tensor(p, t, "output", g->outputs[i].name));
    p->out_stage[i] = p->out_pin[i] = -1;
    int64_t bytes = align_up(tensor_bytes(t), STAGE_ALIGN);
    if (t->device_type == TJ_DEVICE_CUDA) {
      // A strided one is written dense, then scattered.
      if (!tensor_dense(t) && output_direct(p, i)) {
        p->out_stage[i] = total;
        total += bytes;
      }
      continue;
    }
    host = true;
    if (output_direct(p, i)) {
      p->out_stage[i] = total;
      total += bytes;
    }
    p->out_pin[i] = pin;
    pin += bytes;
  }
  // Kernel scalars, and the temporaries of GEMMs that may run as cuBLASLt
  // plus an epilogue kernel.
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    TJ_RETURN_IF_ERROR(kernel_scalars(p, k, sym));
    tune_t* t = p->tunes ? &p->tunes[k] : NULL;
    if (!t || !t->lt_ok) continue;
    t->temp_offset = -1;
    if (!p->autotune && p->forced != CAND_CUBLASLT) continue;
    const tj_kir_t* gk = p->kernels[k].low->kernel;
    const int64_t* sc = p->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
    int64_t bytes = tj_kir_ival_eval(gk->dims[0], sc) *
                    tj_kir_ival_eval(gk->dims[1], sc) *
                    (int64_t)tj_dtype_size(t->acc_dtype);
    t->temp_offset = total;
    total += align_up(bytes > 0 ? bytes : 1, STAGE_ALIGN);
  }
  tj_cuda_device_t* d = p->device;
  if (total > p->arena_cap) {
    if (p->arena) {
      TJ_RETURN_IF_ERROR(
          tj_cuda_allocator_free(d->allocator, p->arena, p->stream));
      p->arena = 0;
      p->arena_cap = 0;
    }
    TJ_RETURN_IF_ERROR(tj_cuda_allocator_alloc(d->allocator, (size_t)total,
                                               p->stream, &p->arena));
    p->arena_cap = total;
    ++p->arena_growths;
  }
  if (pin > p->pinned_cap) {
    // Runs that used the pinned buffer waited for their copies.
    tj_cuda_host_free(d, p->pinned);
    p->pinned = NULL;
    p->pinned_cap = 0;
    TJ_RETURN_IF_ERROR(tj_cuda_host_alloc(d, (size_t)pin, &p->pinned));
    p->pinned_cap = pin;
  }
  *out_uses_host = host;
  return NULL;
}

static tj_status_t kernel_scalars(tj_cuda_program_t* p, uint32_t ki,
                                  const int64_t* sym) {
  const tj_graph_t* g = p->graph;
  const tj_lowered_kernel_t* low = p->kernels[ki].low;
  int64_t* scalars = p->scalars + (size_t)ki * TJ_KIR_MAX_PARAMS;
  for (uint32_t i = 0; i < low->num_params; ++i) {
    TJ_RETURN_IF_ERROR(tj_dim_eval(&g->dims, low->params[i], sym, &scalars[i]));
  }
  if (low->nonempty_node != UINT32_MAX) {
    int64_t n;
    TJ_RETURN_IF_ERROR(tj_dim_eval(&g->dims, low->nonempty_dim, sym, &n));
    if (n == 0) {
      const tj_node_t* node = &g->nodes[low->nonempty_node];
      return tj_invalid("%s (node %%%u): axis %lld of its input is empty",
                        tj_op_info(node->op)->name, low->nonempty_node,
                        (long long)node->attrs.axis);
    }
  }
  return NULL;
}

static tj_status_t kernel_args(tj_cuda_program_t* p, uint32_t ki,
                               const int64_t* sym) {
  const tj_graph_t* g = p->graph;
  kernel_t* kern = &p->kernels[ki];
  const tj_lowered_kernel_t* low = kern->low;
  const tj_kir_t* k = low->kernel;
  int64_t* scalars = p->scalars + (size_t)ki * TJ_KIR_MAX_PARAMS;
  uint64_t* argv = p->argv + kern->arg_offset;
  for (uint32_t b = 0; b < low->num_buffers; ++b) {
    uint32_t node = low->buffer_nodes[b];
    int64_t off = low->buffer_offsets[b];
    if (off < 0) TJ_RETURN_IF_ERROR(tj_dim_eval(&g->dims, off, sym, &off));
    argv[b] = p->loc[node] +
              (uint64_t)(off * (int64_t)tj_dtype_size(g->nodes[node].dtype));
  }
  for (uint32_t i = 0; i < k->num_params; ++i) {
    memcpy(&argv[low->num_buffers + i], &scalars[i], sizeof(int64_t));
  }
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
      k, &kern->info, scalars, p->device->num_sms, &p->launches[ki]));
  if (!p->launches[ki].empty) {
    TJ_RETURN_IF_ERROR(tj_nvptx_gemm_check_pointers(k, &kern->info, argv));
  }
  return NULL;
}

static tj_status_t launch(tj_cuda_program_t* p, uint32_t ki) {
  return launch_candidate(p, ki, p->tunes ? p->tunes[ki].current : 0);
}

static tj_status_t launch_range(tj_cuda_program_t* p, uint32_t first,
                                uint32_t count, int64_t* launched) {
  for (uint32_t i = first; i < first + count; ++i) {
    TJ_RETURN_IF_ERROR(launch(p, i));
    if (!p->launches[i].empty) ++*launched;
  }
  return NULL;
}

// Captures every kernel launch of this run into a CUDA graph, in slot
// |e|. On failure the stream is out of capture mode again.
static tj_status_t capture(tj_cuda_program_t* p, graph_entry_t* e) {
  tj_cuda_device_t* d = p->device;
  const tj_cuda_symbols_t* cu = &d->cu;
  TJ_CU_RETURN_IF_ERROR(cu, cuStreamBeginCapture,
                        (p->stream, TJ_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int64_t ignored = 0;
  tj_status_t status = launch_range(p, 0, p->num_kernels, &ignored);
  tj_cu_graph_t graph = NULL;
  tj_status_t end = TJ_CU_STATUS(cu, cuStreamEndCapture, (p->stream, &graph));
  if (!status)
    status = end;
  else
    tj_status_free(end);
  tj_cu_graph_exec_t exec = NULL;
  if (!status) status = TJ_CU_STATUS(cu, cuGraphInstantiate, (&exec, graph, 0));
  if (graph) (void)cu->cuGraphDestroy(graph);
  if (status) return status;
  if (e->valid) (void)cu->cuGraphExecDestroy(e->exec);
  e->exec = exec;
  e->valid = true;
  ++p->graph_captures;
  return NULL;
}

// Launches the run's kernels through a CUDA graph for its key (capturing
// one when none matches). |*out_fallback| is set when graphs cannot be
// used at all (capture refused): the caller then launches directly.
static tj_status_t run_graph(tj_cuda_program_t* p, const int64_t* sym,
                             bool* out_fallback) {
  *out_fallback = false;
  size_t klen = key_len(p);
  int64_t* key = p->key;
  memcpy(key, sym, sizeof(int64_t) * p->num_symbols);
  key += p->num_symbols;
  memcpy(key, p->argv, sizeof(uint64_t) * p->num_args);
  key += p->num_args;
  *key++ = (int64_t)p->arena;
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    *key++ = p->tunes ? p->tunes[k].current : 0;
  }
  graph_entry_t* hit = NULL;
  graph_entry_t* victim = &p->graphs[0];
  for (int i = 0; i < MAX_GRAPHS; ++i) {
    graph_entry_t* e = &p->graphs[i];
    if (e->valid && memcmp(e->key, p->key, sizeof(int64_t) * klen) == 0) {
      hit = e;
      break;
    }
    if (!e->valid || (victim->valid && e->last_use < victim->last_use))
      victim = e;
  }
  if (!hit) {
    tj_status_t status = capture(p, victim);
    if (status) {
      // Capture is refused on the legacy stream and under some debuggers:
      // plain launches still work.
      tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                            "cuda: CUDA graph capture failed (%s); launching "
                            "kernels one by one from now on",
                            tj_status_message(status));
      tj_status_free(status);
      p->graphs_enabled = false;
      *out_fallback = true;
      return NULL;
    }
    memcpy(victim->key, p->key, sizeof(int64_t) * klen);
    hit = victim;
  }
  hit->last_use = ++p->clock;
  ++p->graph_launches;
  return TJ_CU_STATUS(&p->device->cu, cuGraphLaunch, (hit->exec, p->stream));
}

// A graph break: the reference interpreter on the host, with the values it
// reads copied down and the values it writes copied up.
static tj_status_t run_host_step(tj_cuda_program_t* p, const tj_cuda_step_t* h,
                                 const int64_t* sym,
                                 const tj_tensor_t* inputs) {
  const tj_graph_t* g = p->graph;
  const tj_cuda_symbols_t* cu = &p->device->cu;
  tj_allocator_t al = p->al;
  uint32_t nin = g->num_inputs + h->num_extra, nout = h->num_outputs;
  uint32_t nt = nin + nout;
  size_t per = sizeof(tj_tensor_t) + sizeof(int64_t) * TJ_MAX_RANK +
               sizeof(void*) + sizeof(size_t);
  unsigned char* block = tj_calloc(al, nt + 1, per);
  if (!block) return tj_status_oom();
  tj_tensor_t* ts = (tj_tensor_t*)block;
  int64_t* shapes = (int64_t*)(ts + nt + 1);
  void** temps = (void**)(shapes + (size_t)TJ_MAX_RANK * (nt + 1));
  size_t* sizes = (size_t*)(temps + nt + 1);
  tj_status_t status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  for (uint32_t j = 0; j < nt && !status; ++j) {
    uint32_t node;
    const tj_tensor_t* caller = NULL;
    if (j < g->num_inputs) {
      node = g->inputs[j];
      caller = &inputs[j];
    } else if (j < nin) {
      node = h->extra[j - g->num_inputs];
    } else {
      node = h->outputs[j - nin];
    }
    if (caller && caller->device_type == TJ_DEVICE_CPU) {
      ts[j] = *caller;
      continue;
    }
    const tj_node_t* n = &g->nodes[node];
    int64_t* shape = shapes + (size_t)TJ_MAX_RANK * j;
    status = tj_ir_concrete_dims(g, node, sym, shape);
    if (status) break;
    sizes[j] = (size_t)numel_of(n->rank, shape) * tj_dtype_size(n->dtype);
    temps[j] = tj_alloc(al, sizes[j] ? sizes[j] : 1);
    if (!temps[j]) {
      status = tj_status_oom();
      break;
    }
    ts[j] = tj_tensor_make(temps[j], n->dtype, n->rank, shape);
    if (j < nin && sizes[j]) {
      status = TJ_CU_STATUS(cu, cuMemcpyDtoHAsync,
                            (temps[j], p->loc[node], sizes[j], p->stream));
    }
  }
  if (!status) status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  if (!status) {
    status =
        tj_reference_run(h->graph, ts, (int32_t)nin, ts + nin, (int32_t)nout);
  }
  for (uint32_t j = nin; j < nt && !status; ++j) {
    uint32_t node = h->outputs[j - nin];
    if (sizes[j]) {
      status = TJ_CU_STATUS(cu, cuMemcpyHtoDAsync,
                            (p->loc[node], temps[j], sizes[j], p->stream));
    }
  }
  // The temporaries are read by the copies: wait before freeing them.
  tj_status_t sync = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  if (!status)
    status = sync;
  else
    tj_status_free(sync);
  for (uint32_t j = 0; j < nt; ++j) {
    if (temps[j]) tj_free(al, temps[j], sizes[j] ? sizes[j] : 1);
  }
  tj_free(al, block, (nt + 1) * per);
  ++p->host_steps;
  return status;
}

static tj_status_t run_locked(tj_cuda_program_t* p, const int64_t* sym,
                              const tj_tensor_t* inputs,
                              const tj_tensor_t* outputs) {
  const tj_graph_t* g = p->graph;
  const tj_memplan_t* mp = p->mp;
  tj_cuda_device_t* d = p->device;
  const tj_cuda_symbols_t* cu = &d->cu;
  bool uses_host = false;
  TJ_RETURN_IF_ERROR(plan_run(p, sym, inputs, outputs, &uses_host));
  p->fresh_plan = false;
  unsigned char* pinned = p->pinned;
  // 1. Where every value lives.
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    uint64_t ptr = 0;
    switch (buf->kind) {
      case TJ_BUFFER_EXTERNAL:
        ptr = p->const_ptr[buf->node];  // 0 for inputs, set below
        break;
      case TJ_BUFFER_OUTPUT: {
        int32_t o = p->first_output[buf->node];
        const tj_tensor_t* t = &outputs[o];
        ptr = p->out_stage[o] < 0 ? (uint64_t)(uintptr_t)tensor_data(t)
                                  : p->arena + (uint64_t)p->out_stage[o];
        break;
      }
      case TJ_BUFFER_ARENA:
        ptr = p->arena + (uint64_t)p->slot_offsets[buf->slot];
        break;
      case TJ_BUFFER_ALIAS:
        break;
    }
    p->loc[buf->node] = ptr;
  }
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* t = &inputs[i];
    uint32_t node = g->inputs[i];
    if (t->device_type == TJ_DEVICE_CUDA) {
      if (p->in_stage[i] < 0) {
        p->loc[node] = (uint64_t)(uintptr_t)tensor_data(t);
      } else {
        p->loc[node] = p->arena + (uint64_t)p->in_stage[i];
        TJ_RETURN_IF_ERROR(strided_copy(p, t, p->loc[node], false));
      }
      continue;
    }
    p->loc[node] = p->arena + (uint64_t)p->in_stage[i];
    int64_t bytes = tensor_bytes(t);
    if (bytes == 0) continue;
    copy_strided(pinned + p->in_pin[i], NULL, tensor_data(t), t->strides,
                 t->rank, t->shape, tj_dtype_size(t->dtype));
    TJ_CU_RETURN_IF_ERROR(
        cu, cuMemcpyHtoDAsync,
        (p->loc[node], pinned + p->in_pin[i], (size_t)bytes, p->stream));
  }
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    if (buf->kind == TJ_BUFFER_ALIAS) p->loc[buf->node] = p->loc[buf->alias_of];
  }
  // 2. Every kernel's arguments and grid.
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    TJ_RETURN_IF_ERROR(kernel_args(p, k, sym));
  }
  TJ_RETURN_IF_ERROR(choose_candidates(p));
  // 3. The steps: one graph launch, or kernels and host steps in order.
  bool direct = true, any = false;
  for (uint32_t k = 0; k < p->num_kernels; ++k) any |= !p->launches[k].empty;
  if (p->graphs_enabled && !p->has_host_steps && any && !p->fresh_plan) {
    bool fallback = false;
    TJ_RETURN_IF_ERROR(run_graph(p, sym, &fallback));
    direct = fallback;
  }
  for (uint32_t s = 0; direct && s < p->num_steps; ++s) {
    const tj_cuda_step_t* st = &p->steps[s];
    if (st->kind == TJ_CUDA_STEP_KERNELS) {
      TJ_RETURN_IF_ERROR(launch_range(p, st->first_kernel, st->num_kernels,
                                      &p->kernel_launches));
    } else {
      TJ_RETURN_IF_ERROR(run_host_step(p, st, sym, inputs));
    }
  }
  // 4. Outputs the kernels did not write in place: duplicates, inputs and
  // constants returned as outputs; and every CPU output, through pinned.
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    uint32_t node = g->outputs[i].node;
    int64_t bytes = tensor_bytes(t);
    if (bytes == 0) continue;
    if (t->device_type == TJ_DEVICE_CUDA) {
      if (!tensor_dense(t)) {
        TJ_RETURN_IF_ERROR(strided_copy(p, t, p->loc[node], true));
        continue;
      }
      if (output_direct(p, i)) continue;
      TJ_CU_RETURN_IF_ERROR(cu, cuMemcpyDtoDAsync,
                            ((uint64_t)(uintptr_t)tensor_data(t), p->loc[node],
                             (size_t)bytes, p->stream));
    } else {
      TJ_CU_RETURN_IF_ERROR(
          cu, cuMemcpyDtoHAsync,
          (pinned + p->out_pin[i], p->loc[node], (size_t)bytes, p->stream));
    }
  }
  if (uses_host || !p->host_stream) {
    TJ_CU_RETURN_IF_ERROR(cu, cuStreamSynchronize, (p->stream));
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    if (t->device_type != TJ_DEVICE_CPU || tensor_bytes(t) == 0) continue;
    copy_strided(tensor_data(t), t->strides, pinned + p->out_pin[i], NULL,
                 t->rank, t->shape, tj_dtype_size(t->dtype));
  }
  ++p->runs;
  return NULL;
}

tj_status_t tj_cuda_program_run(tj_cuda_program_t* p, const int64_t* sym,
                                const tj_tensor_t* inputs,
                                const tj_tensor_t* outputs) {
  pthread_mutex_lock(&p->mutex);
  tj_status_t status = tj_cuda_device_enter(p->device);
  if (!status) {
    status = run_locked(p, sym, inputs, outputs);
    tj_cuda_device_leave(p->device);
  }
  pthread_mutex_unlock(&p->mutex);
  return status;
}

void tj_cuda_program_stats(tj_cuda_program_t* p, tj_cuda_program_stats_t* out) {
  memset(out, 0, sizeof(*out));
  pthread_mutex_lock(&p->mutex);
  out->compile_ms = p->compile_ms;
  out->load_ms = p->load_ms;
  out->ptx_source = p->ptx_source;
  out->from_cache = strcmp(p->ptx_source, "LLVM") != 0;
  out->ptx_bytes = p->ptx_bytes;
  out->cubin_source = p->cubin_source;
  out->cubin_bytes = p->cubin_bytes;
  out->cubin_hits = p->cubin_hits;
  out->cubin_misses = p->cubin_misses;
  out->kernel_cubin_hits = p->kernel_cubin_hits;
  out->kernel_cubin_misses = p->kernel_cubin_misses;
  out->link_ms = p->link_ms;
  out->strided_copies = p->strided_copies;
  out->runs = p->runs;
  out->kernel_launches = p->kernel_launches;
  out->graph_captures = p->graph_captures;
  out->graph_launches = p->graph_launches;
  out->host_steps = p->host_steps;
  out->arena_growths = p->arena_growths;
  out->arena_bytes = p->arena_cap;
  out->tunings = p->tunings;
  out->tuning_cache_hits = p->tuning_cache_hits;
  out->tuning_ms = p->tuning_ms;
  snprintf(out->gemm_choice, sizeof(out->gemm_choice), "%s", p->last_choice);
  pthread_mutex_unlock(&p->mutex);
  if (p->device) {
    tj_cuda_allocator_stats(p->device->allocator, &out->allocator);
  }
  snprintf(out->device_name, sizeof(out->device_name), "%s",
           p->device ? p->device->name : "none (offline)");
  snprintf(out->arch, sizeof(out->arch), "%s", tj_nvptx_arch_name(p->arch));
}
