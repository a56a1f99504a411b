// backends/x86/executable.c
//
// tj_compile and tj_executable_*: the x86 target (and the reference target,
// for checking).
//
// Compiling: copy the caller's graph (the executable must not reference it),
// run the middle end (the default pipeline or the caller's pass list; fuse
// and memplan always end it, since they are this backend's input), lower
// every fusion group to one kernel IR kernel (lower.c), and JIT all kernels
// as one module (x86_backend.c) with the context's JIT, small-M GEMM paths
// deferred to the first run that takes them; the kernels run on the
// context's thread pool. A group the kernel templates cannot express
// (gather; pad or concat inside a kernel; an integer or f64 matmul) runs
// on the reference interpreter as a host call between the compiled
// kernels: correct, slow, and counted as a graph break, never as compiled.
//
// Running: bind the symbols from the inputs (tj_ir_bind_symbols checks
// dtypes, ranks, dims and guards), evaluate the memory plan for them, take a
// run frame (arena + per-run tables) from a small pool, compute each
// kernel's scalar params and launch it over its work units. Graph outputs
// are written straight into the caller's tensors when those are dense;
// strided inputs and outputs go through staging space in the arena. Frames
// keep their arena across runs and grow it only when a larger shape comes,
// so a steady state allocates nothing; concurrent runs get different
// frames.
//
// TJ_TARGET_CUDA shares everything up to the kernel IR: the groups are
// lowered by the same tj_lower_group (with f16/bf16 GEMMs allowed), each
// group's kernels are handed to the CUDA program
// (backends/cuda/cuda_executable.h), which may still refuse them (the group
// then becomes a host step here), and runs go to the program.
//
// Specialization: with TJ_SPECIALIZE_ALWAYS / AFTER_N a shape (the symbol
// values) gets its own kernel set compiled with every size constant, logged
// under TJ_LOG=recompiles with the reason; the generic set serves meanwhile
// and for every shape under NEVER.

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backends/cuda/cuda_executable.h"
#include "backends/x86/gemm_tune.h"
#include "backends/x86/x86_backend.h"
#include "jit/cache.h"
#include "lib/env.h"
#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"

#define FRAME_POOL 8
#define MAX_SPECIALIZATIONS 16
#define SHAPE_COUNTERS 32
#define HUGE_PAGE ((size_t)2 << 20)

//===--- options ---===//

void tj_compile_options_initialize(tj_compile_options_t* options) {
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->target = TJ_TARGET_X86;
  options->specialize = TJ_SPECIALIZE_NEVER;
  options->specialize_after = 16;
}

//===--- the executable ---===//

typedef enum step_kind_e {
  STEP_VIEW,    // no work: the output aliases its input
  STEP_KERNEL,  // kernel |index| of the kernel set
  STEP_HOST,    // the reference interpreter on a subgraph (a graph break)
} step_kind_t;

typedef struct host_step_t {
  tj_graph_t* graph;  // the caller's inputs, then |extra|, then the nodes
  uint32_t num_extra;
  uint32_t* extra;  // plan nodes read from memory as extra inputs
  uint32_t num_outputs;
  uint32_t* outputs;                // plan nodes written
  bool* in_place;                   // per output: shares storage with an input
  uint32_t cap_extra, cap_outputs;  // allocated lengths
} host_step_t;

typedef struct step_t {
  step_kind_t kind;
  uint32_t group;
  uint32_t index, count;  // STEP_KERNEL: kernels [index, index + count)
  host_step_t host;
} step_t;

// Everything one run needs besides the executable; pooled.
typedef struct frame_t {
  atomic_int busy;
  void* meta;  // the arrays below, one allocation
  size_t meta_bytes;
  int64_t* slot_offsets;      // memplan slots
  unsigned char** loc;        // per plan node: its storage this run
  int64_t* stage;             // per input, then per output: offset or -1
  tj_x86_launch_t* launches;  // per kernel
  int64_t* scalars;           // per kernel, TJ_KIR_MAX_PARAMS each
  void* block;                // the arena allocation
  size_t block_bytes;
  unsigned char* base;  // aligned start of the arena
  int64_t capacity;
} frame_t;

typedef struct spec_t {
  struct spec_t* next;
  int64_t key[TJ_MAX_SYMBOLS];
  bool ok;  // false: specializing failed, the generic set serves
  tj_x86_kernel_set_t set;
} spec_t;

typedef struct shape_count_t {
  int64_t key[TJ_MAX_SYMBOLS];
  int64_t count;
  bool used;
} shape_count_t;

struct tj_executable_t {
  atomic_int refs;
  tj_context_t* context;
  tj_allocator_t allocator;
  tj_compile_options_t options;
  tj_plan_t plan;
  const tj_graph_t* graph;  // plan.graph
  uint32_t num_symbols;
  bool reference;  // TJ_TARGET_REFERENCE: plan.graph runs as is
  // TJ_TARGET_CUDA: the kernels, memory and runs on the GPU. The kernel
  // set |generic| then only holds the lowered kernels (no x86 module).
  tj_cuda_program_t* cuda;
  // tj_cuda_compile_ptx: |cuda| is an offline program for |offline_arch|
  // (no device; compiling stops at PTX) and the executable never runs.
  bool offline;
  tj_nvptx_arch_t offline_arch;
  bool log_recompiles, log_cache, log_fusion, log_breaks, log_autotune;
  char cache_dir[1024];  // the disk cache; "" when disabled
  // Per plan node: the first graph output it is, or -1.
  int32_t* first_output;
  step_t* steps;
  uint32_t num_steps;
  uint32_t* kernel_group;  // kernel index -> group
  uint32_t kernel_group_len;
  // The context's JIT and pool (x86_backend.h), borrowed: executables
  // share them, and a kernel set unloads its code when it is destroyed.
  tj_x86_jit_t* jit;
  tj_x86_runner_t runner;
  tj_x86_kernel_set_t generic;
  tj_x86_tuner_t* tuner;  // GEMM autotuning of |generic| (autotune ON)
  uint32_t num_host_steps;
  // Specializations: an append-only list read without locks.
  _Atomic(spec_t*) specs;
  uint32_t num_specs;
  shape_count_t counts[SHAPE_COUNTERS];
  pthread_mutex_t mutex;  // compiling specializations, counting shapes
  bool mutex_ready;
  frame_t frames[FRAME_POOL];
  // Stats.
  double compile_ms;
  atomic_llong cache_hits, cache_misses, recompiles, runs;
};

// "B=7,S=128" for the symbols' values.
static void format_key(const tj_graph_t* g, const int64_t* key, char* buf,
                       size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < tj_dim_num_symbols(&g->dims) && n < size; ++i) {
    int m = snprintf(buf + n, size - n, "%s%s=%lld", i ? "," : "",
                     tj_dim_symbol_name(&g->dims, i), (long long)key[i]);
    if (m < 0) break;
    n += (size_t)m;
  }
}

// Counts and logs where a kernel set's code came from.
static void account_set(tj_executable_t* exe, const tj_x86_kernel_set_t* set,
                        const char* what) {
  uint32_t n = set->num_kernels;
  if (n == 0) return;
  if (set->source == TJ_X86_SOURCE_LLVM) {
    atomic_fetch_add(&exe->cache_misses, n);
  } else {
    atomic_fetch_add(&exe->cache_hits, n);
  }
  if (!exe->log_cache) return;
  static const char* const kFrom[] = {"compiled by LLVM as one module",
                                      "loaded from the memory cache",
                                      "loaded from the disk cache"};
  tj_context_diagnostic(
      exe->context, TJ_SEVERITY_REMARK,
      "cache: @%s %s: %u kernels %s (key %s, %zu bytes of object code) in "
      "%.2f ms%s%s%s; %d functions deferred to first use",
      exe->graph->name, what, n, kFrom[set->source], set->key,
      set->object_bytes, set->compile_ms, set->cache_note ? "; disk: " : "",
      set->cache_note ? set->cache_note : "",
      exe->cache_dir[0] ? "" : "; disk cache disabled", (int)set->num_deferred);
  if (set->store_status) {
    tj_context_diagnostic(exe->context, TJ_SEVERITY_WARNING,
                          "cache: @%s: not stored: %s", exe->graph->name,
                          tj_status_message(set->store_status));
  }
}

//===--- frames ---===//

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

static size_t frame_meta_bytes(const tj_executable_t* exe) {
  const tj_graph_t* g = exe->graph;
  uint32_t slots = exe->plan.memplan ? exe->plan.memplan->num_slots : 0;
  uint32_t nk = exe->generic.num_kernels;
  return sizeof(int64_t) * (slots + 1) +
         sizeof(unsigned char*) * (g->num_nodes + 1) +
         sizeof(int64_t) * (g->num_inputs + g->num_outputs + 1) +
         sizeof(tj_x86_launch_t) * (nk + 1) +
         sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1);
}

static tj_status_t frame_init_meta(tj_executable_t* exe, frame_t* f) {
  if (f->meta) return NULL;
  const tj_graph_t* g = exe->graph;
  uint32_t slots = exe->plan.memplan ? exe->plan.memplan->num_slots : 0;
  uint32_t nk = exe->generic.num_kernels;
  size_t bytes = frame_meta_bytes(exe);
  unsigned char* p = tj_alloc(exe->allocator, bytes);
  if (!p) return tj_status_oom();
  f->meta = p;
  f->meta_bytes = bytes;
  // Largest alignment first: every array is 8-byte aligned.
  f->launches = (tj_x86_launch_t*)p;
  p += sizeof(tj_x86_launch_t) * (nk + 1);
  f->slot_offsets = (int64_t*)p;
  p += sizeof(int64_t) * (slots + 1);
  f->loc = (unsigned char**)p;
  p += sizeof(unsigned char*) * (g->num_nodes + 1);
  f->stage = (int64_t*)p;
  p += sizeof(int64_t) * (g->num_inputs + g->num_outputs + 1);
  f->scalars = (int64_t*)p;
  return NULL;
}

static void frame_free(tj_executable_t* exe, frame_t* f) {
  tj_free(exe->allocator, f->meta, f->meta_bytes);
  tj_free(exe->allocator, f->block, f->block_bytes);
  f->meta = NULL;
  f->block = NULL;
  f->block_bytes = 0;
  f->base = NULL;
  f->capacity = 0;
}

// Grows |f|'s arena to |bytes|. Large arenas are 2 MiB aligned and asked
// to be backed by huge pages: a fresh 4 KiB page costs ~11 us to fault.
static tj_status_t frame_reserve(tj_executable_t* exe, frame_t* f,
                                 int64_t bytes) {
  if (bytes <= f->capacity) return NULL;
  size_t align = (size_t)bytes >= HUGE_PAGE ? HUGE_PAGE : 64;
  size_t total = (size_t)bytes + align;
  void* block = tj_alloc(exe->allocator, total);
  if (!block) return tj_status_oom();
  tj_free(exe->allocator, f->block, f->block_bytes);
  f->block = block;
  f->block_bytes = total;
  uintptr_t start = ((uintptr_t)block + align - 1) / align * align;
  f->base = (unsigned char*)start;
  f->capacity = bytes;
#ifdef MADV_HUGEPAGE
  if (align == HUGE_PAGE) {
    size_t len = (size_t)bytes / HUGE_PAGE * HUGE_PAGE;
    if (len) madvise(f->base, len, MADV_HUGEPAGE);  // a hint; may fail
  }
#endif
  return NULL;
}

// A free frame of the pool, or (all busy) a temporary one the caller
// frees: |*out_temp| says which.
static tj_status_t frame_acquire(tj_executable_t* exe, frame_t** out,
                                 bool* out_temp) {
  *out_temp = false;
  for (int i = 0; i < FRAME_POOL; ++i) {
    frame_t* f = &exe->frames[i];
    int expected = 0;
    if (atomic_compare_exchange_strong(&f->busy, &expected, 1)) {
      tj_status_t status = frame_init_meta(exe, f);
      if (status) {
        atomic_store(&f->busy, 0);
        return status;
      }
      *out = f;
      return NULL;
    }
  }
  frame_t* f = tj_alloc(exe->allocator, sizeof(frame_t));
  if (!f) return tj_status_oom();
  memset(f, 0, sizeof(*f));
  tj_status_t status = frame_init_meta(exe, f);
  if (status) {
    tj_free(exe->allocator, f, sizeof(frame_t));
    return status;
  }
  *out = f;
  *out_temp = true;
  return NULL;
}

static void frame_release(tj_executable_t* exe, frame_t* f, bool temp) {
  if (temp) {
    frame_free(exe, f);
    tj_free(exe->allocator, f, sizeof(frame_t));
  } else {
    atomic_store(&f->busy, 0);
  }
}

//===--- destruction ---===//

static void host_step_deinitialize(tj_allocator_t al, host_step_t* h) {
  tj_graph_destroy(h->graph);
  tj_free(al, h->extra, sizeof(uint32_t) * h->cap_extra);
  tj_free(al, h->outputs, sizeof(uint32_t) * h->cap_outputs);
  tj_free(al, h->in_place, sizeof(bool) * h->cap_outputs);
  memset(h, 0, sizeof(*h));
}

static void destroy(tj_executable_t* exe) {
  tj_allocator_t al = exe->allocator;
  tj_cuda_program_destroy(exe->cuda);  // borrows the kernels and steps
  spec_t* s = atomic_load(&exe->specs);
  while (s) {
    spec_t* next = s->next;
    tj_x86_kernel_set_deinitialize(al, &s->set);
    tj_free(al, s, sizeof(spec_t));
    s = next;
  }
  tj_x86_tuner_destroy(exe->tuner);  // borrows the generic set
  tj_x86_kernel_set_deinitialize(al, &exe->generic);
  for (uint32_t i = 0; i < exe->num_steps; ++i) {
    host_step_deinitialize(al, &exe->steps[i].host);
  }
  tj_free(al, exe->steps, sizeof(step_t) * exe->num_steps);
  tj_free(al, exe->kernel_group, sizeof(uint32_t) * exe->kernel_group_len);
  if (exe->first_output) {
    tj_free(al, exe->first_output,
            sizeof(int32_t) * (exe->graph->num_nodes + 1));
  }
  for (int i = 0; i < FRAME_POOL; ++i) frame_free(exe, &exe->frames[i]);
  if (exe->mutex_ready) pthread_mutex_destroy(&exe->mutex);
  tj_plan_deinitialize(&exe->plan);
  tj_context_t* context = exe->context;
  tj_free(al, exe, sizeof(*exe));
  // Last: the JIT and pools above were the context's (lib/context.c).
  tj_context_release(context);
}

void tj_executable_retain(tj_executable_t* executable) {
  if (executable) atomic_fetch_add(&executable->refs, 1);
}

void tj_executable_release(tj_executable_t* executable) {
  if (executable && atomic_fetch_sub(&executable->refs, 1) == 1) {
    destroy(executable);
  }
}

//===--- compiling ---===//

// A copy of finalized |src| (constants copied, borrowed ones still
// borrowed) that the plan can own and rewrite.
static tj_status_t copy_graph(const tj_graph_t* src, tj_graph_t** out) {
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, src));
  for (uint32_t i = 0; i < src->num_nodes; ++i) {
    if (src->nodes[i].op == TJ_OP_INPUT) continue;
    tj_status_t status = tj_rewriter_clone(&rw, i);
    if (status) {
      tj_rewriter_abandon(&rw);
      return status;
    }
  }
  return tj_rewriter_finish(&rw, out);
}

static bool has_input_name(const tj_graph_t* g, const char* name) {
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    if (strcmp(g->nodes[g->inputs[i]].attrs.name, name) == 0) return true;
  }
  return false;
}

// The subgraph of a host step: the plan graph's inputs (so the caller's
// tensors bind every symbol), the group's other inputs as inputs (constants
// as borrowed constants), the group's nodes and its outputs.
static tj_status_t build_host_step(tj_executable_t* exe, uint32_t q,
                                   host_step_t* h) {
  const tj_graph_t* g = exe->graph;
  const tj_group_t* grp = &exe->plan.fusion->groups[q];
  tj_allocator_t al = exe->allocator;
  memset(h, 0, sizeof(*h));
  h->cap_extra = grp->num_inputs + 1;
  h->cap_outputs = grp->num_outputs + 1;
  h->extra = tj_alloc(al, sizeof(uint32_t) * h->cap_extra);
  h->outputs = tj_alloc(al, sizeof(uint32_t) * h->cap_outputs);
  h->in_place = tj_calloc(al, h->cap_outputs, sizeof(bool));
  if (!h->extra || !h->outputs || !h->in_place) {
    host_step_deinitialize(al, h);  // frees what was allocated
    return tj_status_oom();
  }
  tj_rewriter_t rw;
  tj_status_t status = tj_rewriter_begin(&rw, g);
  if (status) {
    host_step_deinitialize(al, h);
    return status;
  }
  for (uint32_t k = 0; !status && k < grp->num_inputs; ++k) {
    uint32_t in = grp->inputs[k];
    if (rw.map[in] != TJ_NODE_NONE) continue;  // a graph input
    const tj_node_t* node = &g->nodes[in];
    int64_t dims[TJ_MAX_RANK];
    status = tj_rewriter_dims(&rw, node->rank, node->dims, dims);
    if (status) break;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.dtype = node->dtype;
    desc.rank = node->rank;
    desc.dims = dims;
    if (node->op == TJ_OP_CONSTANT) {
      // The plan graph keeps the bytes for the executable's lifetime.
      desc.op = TJ_OP_CONSTANT;
      desc.attrs = node->attrs;
      desc.attrs.borrowed = true;
      status = tj_rewriter_append(&rw, &desc, &rw.map[in]);
      continue;
    }
    char name[48];
    snprintf(name, sizeof(name), "tj_v%u", in);
    while (has_input_name(g, name) && strlen(name) + 1 < sizeof(name)) {
      strcat(name, "_");
    }
    desc.op = TJ_OP_INPUT;
    desc.attrs.name = name;
    status = tj_rewriter_append(&rw, &desc, &rw.map[in]);
    if (!status) h->extra[h->num_extra++] = in;
  }
  for (uint32_t j = 0; !status && j < grp->num_nodes; ++j) {
    status = tj_rewriter_clone(&rw, grp->nodes[j]);
  }
  const tj_memplan_t* mp = exe->plan.memplan;
  for (uint32_t j = 0; !status && j < grp->num_outputs; ++j) {
    uint32_t o = grp->outputs[j];
    char name[32];
    snprintf(name, sizeof(name), "o%u", o);
    status = tj_graph_append_output(rw.dst, rw.map[o], name);
    h->outputs[h->num_outputs++] = o;
    uint32_t bi = mp->buffer_of[o];
    h->in_place[j] =
        bi != UINT32_MAX && mp->buffers[bi].in_place_of != TJ_NODE_NONE;
  }
  if (!status) status = tj_graph_finalize(rw.dst);
  if (!status) {
    h->graph = rw.dst;
    rw.dst = NULL;
  }
  tj_rewriter_abandon(&rw);
  if (status) host_step_deinitialize(al, h);
  return status;
}

static void kernel_name(const tj_executable_t* exe, const char* prefix,
                        uint32_t q, char* buf, size_t size) {
  const tj_group_t* grp = &exe->plan.fusion->groups[q];
  snprintf(buf, size, "%sg%u_%s", prefix, q, tj_group_kind_name(grp->kind));
}

static void log_space(const tj_executable_t* exe, const tj_kir_t* k, char* buf,
                      size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t d = 0; d < k->rank && n < size; ++d) {
    tj_kir_ival_t v = k->dims[d];
    int m = v.param < 0 ? snprintf(buf + n, size - n, "%s%lld", d ? "," : "[",
                                   (long long)v.value)
                        : snprintf(buf + n, size - n, "%s$%s", d ? "," : "[",
                                   k->param_names[v.param]);
    if (m < 0) return;
    n += (size_t)m;
  }
  if (n < size) snprintf(buf + n, size - n, "]");
  (void)exe;
}

// Lowers every group; kernels go to |*out_kernels| (allocated here, to
// become the generic set), the others become host or view steps.
static tj_status_t plan_steps(tj_executable_t* exe,
                              tj_lowered_kernel_t** out_kernels,
                              uint32_t* out_num_kernels) {
  const tj_fusion_t* fu = exe->plan.fusion;
  tj_allocator_t al = exe->allocator;
  *out_kernels = NULL;
  *out_num_kernels = 0;
  exe->steps = tj_calloc(al, fu->num_groups + 1, sizeof(step_t));
  if (!exe->steps) return tj_status_oom();
  exe->num_steps = fu->num_groups + 1;  // freed with this size
  uint32_t cap = 0, nk = 0;
  tj_lowered_kernel_t* kernels = NULL;
  tj_status_t status = NULL;
  for (uint32_t q = 0; !status && q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    step_t* s = &exe->steps[q];
    s->group = q;
    const tj_node_t* anchor = &exe->graph->nodes[grp->anchor];
    if (grp->kind == TJ_GROUP_VIEW) {
      s->kind = STEP_VIEW;
      continue;
    }
    if (nk + TJ_LOWER_MAX_GROUP_KERNELS > cap) {
      uint32_t grown = cap ? cap * 2 : 2 * TJ_LOWER_MAX_GROUP_KERNELS;
      while (grown < nk + TJ_LOWER_MAX_GROUP_KERNELS) grown *= 2;
      tj_lowered_kernel_t* more =
          tj_realloc(al, kernels, sizeof(tj_lowered_kernel_t) * cap,
                     sizeof(tj_lowered_kernel_t) * grown);
      if (!more) {
        status = tj_status_oom();
        break;
      }
      kernels = more;
      cap = grown;
    }
    char name[64];
    kernel_name(exe, "", q, name, sizeof(name));
    uint32_t made = 0;
    status =
        tj_lower_group(exe->plan.graph, fu, exe->plan.memplan, q, NULL, al,
                       name, &kernels[nk], TJ_LOWER_MAX_GROUP_KERNELS, &made);
    if (!status && exe->cuda) {
      // The GPU templates may still refuse a kernel (f64 transcendentals,
      // misaligned tensor-core operands): the group then runs on the host.
      status = tj_cuda_program_add_kernels(exe->cuda, &kernels[nk], made);
      if (status) {
        for (uint32_t i = 0; i < made; ++i) {
          tj_lowered_kernel_deinitialize(&kernels[nk + i]);
        }
      }
    }
    if (!status) {
      s->kind = STEP_KERNEL;
      s->index = nk;
      s->count = made;
      for (uint32_t i = 0; exe->log_fusion && i < made; ++i) {
        char space[160];
        const tj_kir_t* k = kernels[nk + i].kernel;
        log_space(exe, k, space, sizeof(space));
        tj_context_diagnostic(
            exe->context, TJ_SEVERITY_REMARK,
            "fusion: @%s group %u (%s, %u nodes, anchor %s %%%u) -> kernel "
            "%s: %s %s, %u buffers, %u params",
            exe->graph->name, q, tj_group_kind_name(grp->kind), grp->num_nodes,
            tj_op_info(anchor->op)->name, grp->anchor, k->name,
            tj_kir_kind_name(k->kind), space, k->num_buffers, k->num_params);
      }
      nk += made;
      continue;
    }
    if (tj_status_code(status) != TJ_STATUS_UNSUPPORTED) break;
    if (exe->log_breaks || exe->log_fusion) {
      tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                            "graph_breaks: @%s group %u (%s %%%u) runs on "
                            "the host (reference interpreter): %s",
                            exe->graph->name, q, tj_op_info(anchor->op)->name,
                            grp->anchor, tj_status_message(status));
    }
    tj_status_free(status);
    s->kind = STEP_HOST;
    ++exe->num_host_steps;
    status = build_host_step(exe, q, &s->host);
  }
  // The kernel set owns an array of exactly |nk| entries; kernel_group
  // maps each kernel to its group.
  tj_lowered_kernel_t* exact = NULL;
  if (!status && nk) {
    exact = tj_alloc(al, sizeof(tj_lowered_kernel_t) * nk);
    if (!exact) status = tj_status_oom();
  }
  if (!status) {
    exe->kernel_group = tj_alloc(al, sizeof(uint32_t) * (nk + 1));
    exe->kernel_group_len = nk + 1;
    if (!exe->kernel_group) status = tj_status_oom();
  }
  if (status) {
    for (uint32_t i = 0; i < nk; ++i)
      tj_lowered_kernel_deinitialize(&kernels[i]);
    tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * cap);
    tj_free(al, exact, exact ? sizeof(tj_lowered_kernel_t) * nk : 0);
    return status;
  }
  if (nk) memcpy(exact, kernels, sizeof(tj_lowered_kernel_t) * nk);
  tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * cap);
  for (uint32_t q = 0; q < fu->num_groups; ++q) {
    const step_t* s = &exe->steps[q];
    if (s->kind != STEP_KERNEL) continue;
    for (uint32_t i = 0; i < s->count; ++i) {
      exe->kernel_group[s->index + i] = q;
    }
  }
  *out_kernels = exact;
  *out_num_kernels = nk;
  return NULL;
}

static tj_status_t run_pipeline(tj_executable_t* exe) {
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, exe->context);
  ctx.verify_each = exe->options.verify_each;
  ctx.evaluate = tj_pass_reference_evaluator;
  if (exe->options.pipeline) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_list(&ctx, &exe->plan, exe->options.pipeline));
  } else {
    TJ_RETURN_IF_ERROR(tj_pipeline_default(&ctx, &exe->plan));
  }
  // The backend consumes fusion groups and a memory plan.
  if (!exe->plan.fusion) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_one(&ctx, &exe->plan, &tj_pass_info_fuse));
  }
  if (!exe->plan.memplan) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_one(&ctx, &exe->plan, &tj_pass_info_memplan));
  }
  return NULL;
}

static int32_t online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 256 ? 256 : (int32_t)n);
}

// TJ_TARGET_CUDA after plan_steps: the GPU program gets the kernels and
// the step list, compiles and loads its module.
static tj_status_t finish_cuda(tj_executable_t* exe,
                               tj_lowered_kernel_t* kernels, uint32_t nk) {
  tj_allocator_t al = exe->allocator;
  // The kernel set keeps the lowered kernels (and frees them); no x86 code.
  exe->generic.kernels = kernels;
  exe->generic.num_kernels = nk;
  tj_disk_cache_open(exe->context, exe->options.cache_dir, exe->cache_dir,
                     sizeof(exe->cache_dir));
  uint32_t ns = 0;
  tj_cuda_step_t* steps = tj_calloc(al, exe->num_steps + 1, sizeof(*steps));
  if (!steps) return tj_status_oom();
  for (uint32_t q = 0; q < exe->num_steps; ++q) {
    const step_t* st = &exe->steps[q];
    if (st->kind == STEP_KERNEL && st->count > 0) {
      steps[ns].kind = TJ_CUDA_STEP_KERNELS;
      steps[ns].first_kernel = st->index;
      steps[ns].num_kernels = st->count;
      ++ns;
    } else if (st->kind == STEP_HOST) {
      const host_step_t* h = &st->host;
      steps[ns].kind = TJ_CUDA_STEP_HOST;
      steps[ns].graph = h->graph;
      steps[ns].num_extra = h->num_extra;
      steps[ns].extra = h->extra;
      steps[ns].num_outputs = h->num_outputs;
      steps[ns].outputs = h->outputs;
      ++ns;
    }
  }
  tj_status_t status =
      tj_cuda_program_finish(exe->cuda, exe->graph, exe->plan.memplan, kernels,
                             nk, steps, ns, exe->cache_dir);
  tj_free(al, steps, sizeof(*steps) * (exe->num_steps + 1));
  TJ_RETURN_IF_ERROR(status);
  tj_cuda_program_stats_t st;
  tj_cuda_program_stats(exe->cuda, &st);
  if (nk) {
    if (st.from_cache) {
      atomic_fetch_add(&exe->cache_hits, nk);
    } else {
      atomic_fetch_add(&exe->cache_misses, nk);
    }
  }
  if (exe->log_cache && nk) {
    tj_context_diagnostic(
        exe->context, TJ_SEVERITY_REMARK,
        "cache: @%s: %u CUDA kernels for %s (%s): PTX (%zu bytes) from %s in "
        "%.2f ms, loaded in %.2f ms",
        exe->graph->name, nk, st.device_name, st.arch, st.ptx_bytes,
        st.ptx_source, st.compile_ms, st.load_ms);
  }
  if (exe->log_fusion) {
    tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                          "fusion: @%s: %u groups -> %u CUDA kernels, %u "
                          "graph breaks",
                          exe->graph->name, exe->plan.fusion->num_groups, nk,
                          exe->num_host_steps);
  }
  return NULL;
}

static tj_status_t compile(tj_executable_t* exe) {
  tj_allocator_t al = exe->allocator;
  exe->graph = exe->plan.graph;
  if (exe->reference) return NULL;
  if (exe->options.target == TJ_TARGET_CUDA) {
    // First, so that a machine without a GPU fails fast and clearly.
    TJ_RETURN_IF_ERROR(
        exe->offline
            ? tj_cuda_program_create_offline(exe->context, &exe->options,
                                             exe->offline_arch, &exe->cuda)
            : tj_cuda_program_create(exe->context, &exe->options, &exe->cuda));
  }
  TJ_RETURN_IF_ERROR(run_pipeline(exe));
  exe->graph = exe->plan.graph;
  const tj_graph_t* g = exe->graph;
  exe->num_symbols = tj_dim_num_symbols(&g->dims);
  exe->first_output = tj_alloc(al, sizeof(int32_t) * (g->num_nodes + 1));
  if (!exe->first_output) return tj_status_oom();
  for (uint32_t i = 0; i < g->num_nodes; ++i) exe->first_output[i] = -1;
  for (uint32_t i = g->num_outputs; i-- > 0;) {
    exe->first_output[g->outputs[i].node] = (int32_t)i;
  }
  tj_lowered_kernel_t* kernels;
  uint32_t nk;
  if (exe->cuda) {
    TJ_RETURN_IF_ERROR(plan_steps(exe, &kernels, &nk));
    return finish_cuda(exe, kernels, nk);
  }
  tj_x86_runtime_t* runtime;
  TJ_RETURN_IF_ERROR(tj_x86_runtime_get(exe->context, &runtime));
  exe->jit = tj_x86_runtime_jit(runtime);
  TJ_RETURN_IF_ERROR(plan_steps(exe, &kernels, &nk));
  tj_disk_cache_open(exe->context, exe->options.cache_dir, exe->cache_dir,
                     sizeof(exe->cache_dir));
  // The GEMM kernels' small-M paths are compiled when a run first takes
  // them (x86_backend.h): most runs never do.
  TJ_RETURN_IF_ERROR(tj_x86_kernel_set_build_lazy(
      exe->jit, al, exe->context, exe->cache_dir, kernels, nk, g->name,
      exe->log_cache, &exe->generic));
  account_set(exe, &exe->generic, "generic kernels");
  // Threads.
  int32_t threads = exe->options.x86.num_threads > 0
                        ? exe->options.x86.num_threads
                        : online_cpus();
  exe->runner.threads = threads;
  exe->runner.lanes = tj_x86_jit_lanes(exe->jit);
  if (exe->options.x86.parallel_for) {
    exe->runner.host_parallel_for = exe->options.x86.parallel_for;
    exe->runner.host_user_data = exe->options.x86.parallel_for_user_data;
  } else if (threads > 1 && nk > 0) {
    TJ_RETURN_IF_ERROR(
        tj_x86_runtime_pool(runtime, threads, &exe->runner.pool));
  }
  // The small-M paths, in the background from here (x86_backend.c), so
  // that the first small run does not pay for them; not behind the back of
  // a host that schedules the work itself (its parallel_for): there the
  // first run that needs them builds them, as before. Nor when every run
  // takes an exact-shape specialization (its own kernel set): the generic
  // kernels then run only where one cannot be made.
  bool generic_runs = exe->options.specialize != TJ_SPECIALIZE_ALWAYS ||
                      exe->num_symbols == 0 || exe->options.bucket_pow2;
  if (!exe->options.x86.parallel_for && generic_runs) {
    tj_x86_kernel_set_build_cold_in_background(&exe->generic);
  }
  if (exe->options.autotune == TJ_AUTOTUNE_ON) {
    tj_x86_tuner_config_t tc = {exe->jit,
                                al,
                                exe->context,
                                exe->cache_dir,
                                &exe->generic,
                                &exe->runner,
                                exe->options.x86.autotune_budget_ms > 0
                                    ? exe->options.x86.autotune_budget_ms
                                    : 200,
                                exe->log_autotune,
                                g->name};
    TJ_RETURN_IF_ERROR(tj_x86_tuner_create(&tc, &exe->tuner));
  }
  if (exe->log_fusion) {
    const tj_memplan_t* mp = exe->plan.memplan;
    tj_context_diagnostic(
        exe->context, TJ_SEVERITY_REMARK,
        "fusion: @%s: %u groups -> %u kernels, %u graph breaks; arena of %u "
        "slots (%u values in place)",
        g->name, exe->plan.fusion->num_groups, nk, exe->num_host_steps,
        mp->num_slots, mp->num_in_place);
  }
  return NULL;
}

// tj_compile, or with |offline_arch| tj_cuda_compile_ptx's executable.
static tj_status_t compile_executable(const tj_graph_t* graph,
                                      const tj_compile_options_t* options,
                                      const tj_nvptx_arch_t* offline_arch,
                                      tj_executable_t** out_executable) {
  if (!out_executable) return tj_invalid("tj_compile: out_executable is NULL");
  *out_executable = NULL;
  if (!graph) return tj_invalid("tj_compile: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_compile: graph @%s is not finalized", graph->name);
  }
  tj_compile_options_t opts;
  if (options) {
    if (options->struct_size != sizeof(opts)) {
      return tj_invalid(
          "tj_compile: options.struct_size is %zu, not %zu (fill the "
          "options with tj_compile_options_initialize first)",
          options->struct_size, sizeof(opts));
    }
    opts = *options;
  } else {
    tj_compile_options_initialize(&opts);
  }
  if (opts.target != TJ_TARGET_X86 && opts.target != TJ_TARGET_REFERENCE &&
      opts.target != TJ_TARGET_CUDA) {
    return tj_invalid("tj_compile: unknown target %d", (int)opts.target);
  }
  if ((unsigned)opts.specialize > TJ_SPECIALIZE_ALWAYS ||
      (opts.specialize == TJ_SPECIALIZE_AFTER_N && opts.specialize_after < 1)) {
    return tj_invalid("tj_compile: bad specialization policy %d (after %d)",
                      (int)opts.specialize, (int)opts.specialize_after);
  }
  if ((unsigned)opts.autotune > TJ_AUTOTUNE_OFF) {
    return tj_invalid("tj_compile: unknown autotune setting %d",
                      (int)opts.autotune);
  }
  if (opts.x86.num_threads < 0) {
    return tj_invalid("tj_compile: x86.num_threads is %d",
                      (int)opts.x86.num_threads);
  }
  if (opts.x86.autotune_budget_ms < 0) {
    return tj_invalid("tj_compile: x86.autotune_budget_ms is %d",
                      (int)opts.x86.autotune_budget_ms);
  }
  if (opts.pipeline) TJ_RETURN_IF_ERROR(tj_pipeline_check(opts.pipeline));
  double start = tj_now_ms();
  tj_context_t* context = tj_graph_context(graph);
  tj_allocator_t al = tj_context_allocator(context);
  tj_executable_t* exe = tj_alloc(al, sizeof(*exe));
  if (!exe) return tj_status_oom();
  memset(exe, 0, sizeof(*exe));
  atomic_init(&exe->refs, 1);
  tj_context_retain(context);  // released by destroy()
  exe->context = context;
  exe->allocator = al;
  exe->options = opts;
  exe->reference = opts.target == TJ_TARGET_REFERENCE;
  if (offline_arch) {
    exe->offline = true;
    exe->offline_arch = *offline_arch;
  }
  uint32_t log = tj_log_flags(context);
  exe->log_recompiles = (log & TJ_LOG_RECOMPILES) != 0;
  exe->log_cache = (log & TJ_LOG_CACHE) != 0;
  exe->log_fusion = (log & TJ_LOG_FUSION) != 0;
  exe->log_breaks = (log & TJ_LOG_GRAPH_BREAKS) != 0;
  exe->log_autotune = (log & TJ_LOG_AUTOTUNE) != 0;
  for (int i = 0; i < FRAME_POOL; ++i) atomic_init(&exe->frames[i].busy, 0);
  tj_graph_t* copy = NULL;
  tj_status_t status = copy_graph(graph, &copy);
  tj_plan_initialize(&exe->plan, copy);
  exe->graph = copy;
  if (!status) {
    if (pthread_mutex_init(&exe->mutex, NULL) != 0) {
      status = tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                              "tj_compile: pthread_mutex_init failed");
    } else {
      exe->mutex_ready = true;
    }
  }
  if (!status) status = compile(exe);
  // Strings the options pointed at are the caller's: do not keep them.
  exe->options.pipeline = NULL;
  exe->options.cache_dir = NULL;
  if (status) {
    destroy(exe);
    return status;
  }
  exe->compile_ms = tj_now_ms() - start;
  *out_executable = exe;
  return NULL;
}

tj_status_t tj_compile(const tj_graph_t* graph,
                       const tj_compile_options_t* options,
                       tj_executable_t** out_executable) {
  return compile_executable(graph, options, NULL, out_executable);
}

// The compile of a CUDA executable with an offline program: the PTX is
// copied out and the executable, never run, released.
tj_status_t tj_cuda_compile_ptx(const tj_graph_t* graph,
                                const tj_compile_options_t* options,
                                tj_nvptx_arch_t arch, tj_allocator_t al,
                                tj_cuda_offline_ptx_t* out) {
  memset(out, 0, sizeof(*out));
  tj_compile_options_t opts;
  if (options) {
    opts = *options;
  } else {
    tj_compile_options_initialize(&opts);
  }
  opts.target = TJ_TARGET_CUDA;
  tj_executable_t* exe = NULL;
  TJ_RETURN_IF_ERROR(compile_executable(graph, &opts, &arch, &exe));
  tj_cuda_offline_ptx_t r;
  memset(&r, 0, sizeof(r));
  r.num_kernels = exe->generic.num_kernels;
  r.num_host_steps = exe->num_host_steps;
  const char* ptx = tj_cuda_program_ptx(exe->cuda);
  const char* variants =
      tj_cuda_program_variants_ptx(exe->cuda, &r.num_variant_kernels);
  tj_status_t status = NULL;
  if (ptx && !(r.ptx = tj_strdup(al, ptx))) status = tj_status_oom();
  if (!status && variants && !(r.variants_ptx = tj_strdup(al, variants)))
    status = tj_status_oom();
  tj_executable_release(exe);
  if (status) {
    tj_cuda_offline_ptx_deinitialize(al, &r);
    return status;
  }
  *out = r;
  return NULL;
}

void tj_cuda_offline_ptx_deinitialize(tj_allocator_t al,
                                      tj_cuda_offline_ptx_t* ptx) {
  tj_free_string(al, ptx->ptx);
  tj_free_string(al, ptx->variants_ptx);
  memset(ptx, 0, sizeof(*ptx));
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

// |base| + |offset| bytes; NULL stays NULL (a tensor with no elements, an
// empty frame): C leaves even NULL + 0 undefined.
static unsigned char* byte_at(void* base, int64_t offset) {
  return base ? (unsigned char*)base + offset : NULL;
}

static unsigned char* tensor_data(const tj_tensor_t* t) {
  return byte_at(t->data, (int64_t)t->byte_offset);
}

static int64_t numel_of(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

// Copies a |rank|-dim array of |size|-byte elements between strided
// layouts (strides in elements; NULL is dense row-major).
static void copy_strided(unsigned char* dst, const int64_t* dst_strides,
                         const unsigned char* src, const int64_t* src_strides,
                         int32_t rank, const int64_t* shape, size_t size) {
  int64_t n = numel_of(rank, shape);
  if (n == 0) return;
  int64_t ds[TJ_MAX_RANK], ss[TJ_MAX_RANK], idx[TJ_MAX_RANK] = {0};
  int64_t s = 1;
  for (int32_t d = rank; d-- > 0;) {
    ds[d] = dst_strides ? dst_strides[d] : s;
    ss[d] = src_strides ? src_strides[d] : s;
    s *= shape[d];
  }
  if (rank == 0) {
    memcpy(dst, src, size);
    return;
  }
  int64_t inner = shape[rank - 1];
  bool contiguous = ds[rank - 1] == 1 && ss[rank - 1] == 1;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t doff = 0, soff = 0;
    for (int32_t d = 0; d + 1 < rank; ++d) {
      doff += idx[d] * ds[d];
      soff += idx[d] * ss[d];
    }
    if (contiguous) {
      memcpy(dst + doff * (int64_t)size, src + soff * (int64_t)size,
             (size_t)inner * size);
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        memcpy(dst + (doff + i * ds[rank - 1]) * (int64_t)size,
               src + (soff + i * ss[rank - 1]) * (int64_t)size, size);
      }
    }
    for (int32_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

static tj_status_t check_outputs(const tj_executable_t* exe,
                                 const tj_tensor_t* outputs,
                                 const int64_t* sym) {
  const tj_graph_t* g = exe->graph;
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    uint32_t node = g->outputs[i].node;
    const tj_node_t* n = &g->nodes[node];
    const char* name = g->outputs[i].name;
    if (t->device_type != TJ_DEVICE_CPU &&
        !(exe->cuda && t->device_type == TJ_DEVICE_CUDA)) {
      return tj_invalid("output \"%s\" is not a %s tensor", name,
                        exe->cuda ? "CPU or CUDA" : "CPU");
    }
    if (t->dtype != n->dtype || t->rank != n->rank) {
      return tj_invalid(
          "output \"%s\" is %s of rank %d but the graph makes "
          "%s of rank %d",
          name, tj_dtype_name(t->dtype), (int)t->rank, tj_dtype_name(n->dtype),
          (int)n->rank);
    }
    int64_t dims[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, node, sym, dims));
    if (n->rank > 0 && !t->shape) {
      return tj_invalid("output \"%s\": shape is NULL", name);
    }
    for (int32_t d = 0; d < n->rank; ++d) {
      if (t->shape[d] != dims[d]) {
        return tj_invalid(
            "output \"%s\" dim %d is %lld but these inputs "
            "make %lld",
            name, (int)d, (long long)t->shape[d], (long long)dims[d]);
      }
    }
    if (!t->data && numel_of(n->rank, dims) > 0) {
      return tj_invalid("output \"%s\": data is NULL", name);
    }
  }
  return NULL;
}

static tj_status_t kernel_scalars(const tj_executable_t* exe,
                                  const tj_lowered_kernel_t* k,
                                  const int64_t* sym, int64_t* scalars) {
  return tj_lowered_kernel_scalars(k, exe->graph, sym, scalars);
}

// A host step: the reference interpreter on the group's subgraph. Tensors
// and in-place temporaries are allocated per call: this is the slow path
// of a graph break, not the steady state of compiled kernels.
static tj_status_t run_host(tj_executable_t* exe, const host_step_t* h,
                            const int64_t* sym, const tj_tensor_t* inputs,
                            unsigned char* const* loc) {
  const tj_graph_t* g = exe->graph;
  tj_allocator_t al = exe->allocator;
  uint32_t nin = g->num_inputs + h->num_extra, nout = h->num_outputs;
  size_t per = sizeof(tj_tensor_t) + sizeof(int64_t) * TJ_MAX_RANK;
  size_t bytes = per * (nin + nout) + sizeof(void*) * (nout + 1);
  unsigned char* block = tj_alloc(al, bytes);
  if (!block) return tj_status_oom();
  tj_tensor_t* ins = (tj_tensor_t*)block;
  tj_tensor_t* outs = ins + nin;
  int64_t* shapes = (int64_t*)(outs + nout);
  void** temps = (void**)(shapes + (size_t)TJ_MAX_RANK * (nin + nout));
  memset(temps, 0, sizeof(void*) * (nout + 1));
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < g->num_inputs; ++i) ins[i] = inputs[i];
  for (uint32_t j = 0; !status && j < nin + nout; ++j) {
    if (j < g->num_inputs) continue;
    bool is_out = j >= nin;
    uint32_t node = is_out ? h->outputs[j - nin] : h->extra[j - g->num_inputs];
    const tj_node_t* n = &g->nodes[node];
    int64_t* shape = shapes + (size_t)TJ_MAX_RANK * j;
    status = tj_ir_concrete_dims(g, node, sym, shape);
    if (status) break;
    void* data = loc[node];
    if (is_out && h->in_place[j - nin]) {
      // The interpreter may still read the input it overwrites.
      size_t sz = (size_t)numel_of(n->rank, shape) * tj_dtype_size(n->dtype);
      temps[j - nin] = tj_alloc(al, sz ? sz : 1);
      if (!temps[j - nin]) {
        status = tj_status_oom();
        break;
      }
      data = temps[j - nin];
    }
    tj_tensor_t t = tj_tensor_make(data, n->dtype, n->rank, shape);
    if (is_out) {
      outs[j - nin] = t;
    } else {
      ins[j] = t;
    }
  }
  if (!status) {
    status = tj_reference_run(h->graph, ins, (int32_t)nin, outs, (int32_t)nout);
  }
  for (uint32_t j = 0; j < nout; ++j) {
    if (!temps[j]) continue;
    const tj_node_t* n = &g->nodes[h->outputs[j]];
    size_t sz =
        (size_t)numel_of(n->rank, outs[j].shape) * tj_dtype_size(n->dtype);
    if (!status) memcpy(loc[h->outputs[j]], temps[j], sz);
    tj_free(al, temps[j], sz ? sz : 1);
  }
  tj_free(al, block, bytes);
  return status;
}

static tj_status_t run_frame(tj_executable_t* exe,
                             const tj_x86_kernel_set_t* set, const int64_t* sym,
                             const tj_tensor_t* inputs,
                             const tj_tensor_t* outputs, frame_t* f) {
  const tj_graph_t* g = exe->graph;
  const tj_memplan_t* mp = exe->plan.memplan;
  // 1. Where everything goes: the plan's slots, staging, kernel scratch.
  int64_t arena_bytes;
  TJ_RETURN_IF_ERROR(
      tj_memplan_evaluate(mp, g, sym, f->slot_offsets, &arena_bytes));
  int64_t total = align_up(arena_bytes, 64);
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    f->stage[i] = -1;
    if (tensor_dense(&inputs[i])) continue;
    const tj_node_t* n = &g->nodes[g->inputs[i]];
    f->stage[i] = total;
    total += align_up(
        numel_of(n->rank, inputs[i].shape) * (int64_t)tj_dtype_size(n->dtype),
        64);
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    int64_t* st = &f->stage[g->num_inputs + i];
    *st = -1;
    uint32_t node = g->outputs[i].node;
    uint32_t bi = mp->buffer_of[node];
    if (exe->first_output[node] != (int32_t)i || bi == UINT32_MAX ||
        mp->buffers[bi].kind != TJ_BUFFER_OUTPUT || tensor_dense(&outputs[i])) {
      continue;
    }
    const tj_node_t* n = &g->nodes[node];
    *st = total;
    total += align_up(
        numel_of(n->rank, outputs[i].shape) * (int64_t)tj_dtype_size(n->dtype),
        64);
  }
  int64_t scratch_bytes = 0;
  for (uint32_t k = 0; k < set->num_kernels; ++k) {
    int64_t* scalars = f->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
    TJ_RETURN_IF_ERROR(kernel_scalars(exe, &set->kernels[k], sym, scalars));
    tj_x86_launch_t* l = &f->launches[k];
    TJ_RETURN_IF_ERROR(tj_x86_launch_prepare(
        &exe->runner, set->kernels[k].kernel, scalars, l));
    int64_t need = l->slot_bytes * l->slots;
    if (set == &exe->generic && exe->tuner) {
      int64_t tuned = tj_x86_tuner_scratch(exe->tuner, k, scalars);
      if (tuned > need) need = tuned;
    }
    if (need > scratch_bytes) scratch_bytes = need;
  }
  int64_t scratch_offset = total;
  total += scratch_bytes;
  TJ_RETURN_IF_ERROR(frame_reserve(exe, f, total));
  unsigned char* base = f->base;
  // 2. Storage of every value in memory (an alias after its root).
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    unsigned char* p = NULL;
    switch (buf->kind) {
      case TJ_BUFFER_EXTERNAL:
        p = n->op == TJ_OP_CONSTANT ? (unsigned char*)n->attrs.data : NULL;
        break;
      case TJ_BUFFER_OUTPUT: {
        int32_t o = exe->first_output[buf->node];
        int64_t st = f->stage[g->num_inputs + (uint32_t)o];
        p = st >= 0 ? byte_at(base, st) : tensor_data(&outputs[o]);
        break;
      }
      case TJ_BUFFER_ARENA:
        p = byte_at(base, f->slot_offsets[buf->slot]);
        break;
      case TJ_BUFFER_ALIAS:
        p = f->loc[buf->alias_of];
        break;
    }
    f->loc[buf->node] = p;
  }
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* t = &inputs[i];
    uint32_t node = g->inputs[i];
    if (f->stage[i] < 0) {
      f->loc[node] = tensor_data(t);
      continue;
    }
    f->loc[node] = byte_at(base, f->stage[i]);
    copy_strided(f->loc[node], NULL, tensor_data(t), t->strides, t->rank,
                 t->shape, tj_dtype_size(t->dtype));
  }
  // Aliases of inputs (reshaped graph inputs) follow their roots.
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    if (buf->kind == TJ_BUFFER_ALIAS) f->loc[buf->node] = f->loc[buf->alias_of];
  }
  // 3. The steps.
  unsigned char* scratch = byte_at(base, scratch_offset);
  for (uint32_t s = 0; s < exe->num_steps; ++s) {
    const step_t* step = &exe->steps[s];
    for (uint32_t k = step->index;
         step->kind == STEP_KERNEL && k < step->index + step->count; ++k) {
      const tj_lowered_kernel_t* low = &set->kernels[k];
      void* buffers[TJ_KIR_MAX_BUFFERS];
      for (uint32_t b = 0; b < low->num_buffers; ++b) {
        uint32_t node = low->buffer_nodes[b];
        int64_t off;
        TJ_RETURN_IF_ERROR(tj_lowered_kernel_buffer_offset(low, b, sym, &off));
        buffers[b] = byte_at(
            f->loc[node], off * (int64_t)tj_dtype_size(g->nodes[node].dtype));
      }
      const int64_t* scalars = f->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
      if (set == &exe->generic && tj_x86_tuner_handles(exe->tuner, k)) {
        TJ_RETURN_IF_ERROR(tj_x86_tuner_run(exe->tuner, k, &f->launches[k],
                                            buffers, scalars, scratch,
                                            scratch_bytes));
      } else {
        tj_x86_launch_run(&exe->runner, &f->launches[k], set->fns[k], buffers,
                          scalars, scratch);
      }
      // A deferred path that could not be built was skipped: say so.
      TJ_RETURN_IF_ERROR(tj_x86_kernel_set_take_error(set));
    }
    if (step->kind == STEP_HOST) {
      TJ_RETURN_IF_ERROR(run_host(exe, &step->host, sym, inputs, f->loc));
    }
  }
  // 4. Outputs not written in place: staged, duplicated, or inputs and
  // constants returned as outputs.
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t node = g->outputs[i].node;
    uint32_t bi = mp->buffer_of[node];
    bool direct = exe->first_output[node] == (int32_t)i && bi != UINT32_MAX &&
                  mp->buffers[bi].kind == TJ_BUFFER_OUTPUT &&
                  f->stage[g->num_inputs + i] < 0;
    if (direct) continue;
    const tj_tensor_t* t = &outputs[i];
    copy_strided(tensor_data(t), t->strides, f->loc[node], NULL, t->rank,
                 t->shape, tj_dtype_size(t->dtype));
  }
  return NULL;
}

//===--- specialization ---===//

static bool key_equal(const int64_t* a, const int64_t* b, uint32_t n) {
  return memcmp(a, b, sizeof(int64_t) * n) == 0;
}

static tj_status_t specialize(tj_executable_t* exe, const int64_t* sym,
                              const char* reason, spec_t** out) {
  tj_allocator_t al = exe->allocator;
  *out = NULL;
  spec_t* s = tj_alloc(al, sizeof(spec_t));
  if (!s) return tj_status_oom();
  memset(s, 0, sizeof(*s));
  memcpy(s->key, sym, sizeof(int64_t) * exe->num_symbols);
  char key[256];
  format_key(exe->graph, sym, key, sizeof(key));
  uint32_t nk = exe->generic.num_kernels;
  tj_lowered_kernel_t* kernels =
      tj_calloc(al, nk ? nk : 1, sizeof(tj_lowered_kernel_t));
  tj_status_t status = kernels ? NULL : tj_status_oom();
  double start = tj_now_ms();
  uint32_t made = 0;
  for (uint32_t q = 0; !status && q < exe->num_steps; ++q) {
    const step_t* st = &exe->steps[q];
    if (st->kind != STEP_KERNEL || st->count == 0) continue;
    char name[64];
    kernel_name(exe, "s", q, name, sizeof(name));
    // Room for the generic count only: a specialization must cut the
    // group into the same boxes, kernel for kernel.
    uint32_t got = 0;
    status =
        tj_lower_group(exe->plan.graph, exe->plan.fusion, exe->plan.memplan, q,
                       sym, al, name, &kernels[st->index], st->count, &got);
    made = st->index + got;
    if (!status && got != st->count) {
      status = tj_unsupported("group %u lowers to %u kernels, not %u", q, got,
                              st->count);
    }
  }
  if (!status) {
    uint32_t count = nk;
    if (nk == 0) {
      tj_free(al, kernels, sizeof(tj_lowered_kernel_t));
      kernels = NULL;
    }
    status = tj_x86_kernel_set_build_lazy(
        exe->jit, al, exe->context, exe->cache_dir, kernels, count,
        exe->graph->name, exe->log_cache, &s->set);
    kernels = NULL;  // owned by the set now, on every path
  }
  if (kernels) {
    for (uint32_t k = 0; k < made; ++k) {
      tj_lowered_kernel_deinitialize(&kernels[k]);
    }
    tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * (nk ? nk : 1));
  }
  if (status && tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
    // Keep using the generic kernels for this shape; remember not to retry.
    if (exe->log_recompiles) {
      tj_context_diagnostic(exe->context, TJ_SEVERITY_WARNING,
                            "recompiles: @%s: no specialization for %s: %s",
                            exe->graph->name, key, tj_status_message(status));
    }
    tj_status_free(status);
    s->ok = false;
    *out = s;
    return NULL;
  }
  if (status) {
    tj_free(al, s, sizeof(spec_t));
    return status;
  }
  s->ok = true;
  atomic_fetch_add(&exe->recompiles, 1);
  account_set(exe, &s->set, key);
  if (exe->log_recompiles) {
    tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                          "recompiles: @%s: compiled %u exact-shape kernels "
                          "for %s (%s) in %.2f ms",
                          exe->graph->name, nk, key, reason,
                          tj_now_ms() - start);
  }
  *out = s;
  return NULL;
}

// The kernel set for |sym| under the policy; the generic one by default.
static tj_status_t choose_set(tj_executable_t* exe, const int64_t* sym,
                              const tj_x86_kernel_set_t** out) {
  *out = &exe->generic;
  uint32_t n = exe->num_symbols;
  for (spec_t* s = atomic_load_explicit(&exe->specs, memory_order_acquire); s;
       s = s->next) {
    if (key_equal(s->key, sym, n)) {
      if (s->ok) *out = &s->set;
      return NULL;
    }
  }
  char reason[96];
  pthread_mutex_lock(&exe->mutex);
  if (exe->options.specialize == TJ_SPECIALIZE_AFTER_N) {
    shape_count_t* slot = NULL;
    for (int i = 0; i < SHAPE_COUNTERS && !slot; ++i) {
      if (exe->counts[i].used && key_equal(exe->counts[i].key, sym, n)) {
        slot = &exe->counts[i];
      }
    }
    for (int i = 0; i < SHAPE_COUNTERS && !slot; ++i) {
      if (!exe->counts[i].used) {
        slot = &exe->counts[i];
        slot->used = true;
        slot->count = 0;
        memcpy(slot->key, sym, sizeof(int64_t) * n);
      }
    }
    if (!slot || ++slot->count < exe->options.specialize_after) {
      pthread_mutex_unlock(&exe->mutex);
      return NULL;
    }
    snprintf(reason, sizeof(reason), "policy after_n: %lld runs of it",
             (long long)slot->count);
  } else {
    snprintf(reason, sizeof(reason), "policy always: a new shape");
  }
  // Another thread may have compiled it meanwhile.
  for (spec_t* s = atomic_load(&exe->specs); s; s = s->next) {
    if (key_equal(s->key, sym, n)) {
      if (s->ok) *out = &s->set;
      pthread_mutex_unlock(&exe->mutex);
      return NULL;
    }
  }
  if (exe->num_specs >= MAX_SPECIALIZATIONS) {
    pthread_mutex_unlock(&exe->mutex);
    return NULL;
  }
  spec_t* s;
  tj_status_t status = specialize(exe, sym, reason, &s);
  if (!status) {
    s->next = atomic_load(&exe->specs);
    atomic_store_explicit(&exe->specs, s, memory_order_release);
    ++exe->num_specs;
    if (s->ok) *out = &s->set;
  }
  pthread_mutex_unlock(&exe->mutex);
  return status;
}

// bucket_pow2: the kernels of a power-of-two bucket are the generic ones
// (see tj_compile_options_t). A kernel specialized to a bucket could not
// make its sizes constants, which is all an exact-shape kernel gains here,
// without padding every tensor to the bucket: copies in and out, and wrong
// results for reductions over a padded axis (mean, softmax, layer_norm).
// Taking sizes as parameters, the generic kernels run the actual sizes
// with no padding; the GEMMs pick their small-M path from M at run time
// and the autotuner keys its schedule choice by the same bucket. So a new
// bucket compiles nothing; TJ_LOG=recompiles says so once per bucket.
static void note_bucket(tj_executable_t* exe, const int64_t* sym) {
  if (!exe->log_recompiles) return;
  uint32_t n = exe->num_symbols;
  int64_t key[TJ_MAX_SYMBOLS];
  for (uint32_t i = 0; i < n; ++i) key[i] = tj_pow2_bucket(sym[i]);
  pthread_mutex_lock(&exe->mutex);
  shape_count_t* slot = NULL;
  bool seen = false;
  for (int i = 0; i < SHAPE_COUNTERS && !seen; ++i) {
    if (exe->counts[i].used && key_equal(exe->counts[i].key, key, n)) {
      seen = true;
    } else if (!exe->counts[i].used && !slot) {
      slot = &exe->counts[i];
    }
  }
  if (!seen && slot) {
    slot->used = true;
    memcpy(slot->key, key, sizeof(int64_t) * n);
  }
  pthread_mutex_unlock(&exe->mutex);
  if (seen) return;
  char actual[256], bucket[256];
  format_key(exe->graph, sym, actual, sizeof(actual));
  format_key(exe->graph, key, bucket, sizeof(bucket));
  tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                        "recompiles: @%s: bucket %s (first run %s) runs the "
                        "generic kernels on the actual sizes: no padding, "
                        "nothing compiled",
                        exe->graph->name, bucket, actual);
}

tj_status_t tj_executable_run(tj_executable_t* executable,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_tensor_t* outputs, int32_t num_outputs) {
  tj_executable_t* exe = executable;
  if (!exe) return tj_invalid("tj_executable_run: executable is NULL");
  const tj_graph_t* g = exe->graph;
  if (num_outputs < 0 || (uint32_t)num_outputs != g->num_outputs) {
    return tj_invalid("graph @%s makes %u outputs, got %d", g->name,
                      g->num_outputs, (int)num_outputs);
  }
  if (num_outputs > 0 && !outputs) return tj_invalid("outputs is NULL");
  if (exe->reference) {
    tj_status_t status =
        tj_reference_run(g, inputs, num_inputs, outputs, num_outputs);
    if (!status) atomic_fetch_add(&exe->runs, 1);
    return status;
  }
  int64_t sym[TJ_MAX_SYMBOLS];
  TJ_RETURN_IF_ERROR(tj_ir_bind_symbols(g, inputs, num_inputs, sym));
  if (exe->cuda) {
    // Device tensors are checked by the program.
    TJ_RETURN_IF_ERROR(check_outputs(exe, outputs, sym));
    TJ_RETURN_IF_ERROR(tj_ir_check_run_memory(g, inputs, outputs));
    tj_status_t status = tj_cuda_program_run(exe->cuda, sym, inputs, outputs);
    if (!status) atomic_fetch_add(&exe->runs, 1);
    return status;
  }
  for (int32_t i = 0; i < num_inputs; ++i) {
    if (inputs[i].device_type != TJ_DEVICE_CPU) {
      return tj_invalid("input \"%s\" is not a CPU tensor",
                        g->nodes[g->inputs[i]].attrs.name);
    }
  }
  TJ_RETURN_IF_ERROR(check_outputs(exe, outputs, sym));
  TJ_RETURN_IF_ERROR(tj_ir_check_run_memory(g, inputs, outputs));
  const tj_x86_kernel_set_t* set = &exe->generic;
  if (exe->options.specialize != TJ_SPECIALIZE_NEVER && exe->num_symbols > 0) {
    if (exe->options.bucket_pow2) {
      note_bucket(exe, sym);
    } else {
      TJ_RETURN_IF_ERROR(choose_set(exe, sym, &set));
    }
  }
  frame_t* f = NULL;
  bool temp = false;
  TJ_RETURN_IF_ERROR(frame_acquire(exe, &f, &temp));
  tj_status_t status = run_frame(exe, set, sym, inputs, outputs, f);
  frame_release(exe, f, temp);
  if (!status) atomic_fetch_add(&exe->runs, 1);
  return status;
}

//===--- warming up ---===//

tj_status_t tj_executable_prepare(tj_executable_t* executable,
                                  const tj_tensor_t* inputs,
                                  int32_t num_inputs) {
  tj_executable_t* exe = executable;
  if (!exe) return tj_invalid("tj_executable_prepare: executable is NULL");
  const tj_graph_t* g = exe->graph;
  bool shape = inputs || num_inputs != 0;
  int64_t sym[TJ_MAX_SYMBOLS];
  if (shape) {
    if (num_inputs < 0 || (uint32_t)num_inputs != g->num_inputs) {
      return tj_invalid(
          "tj_executable_prepare: graph @%s takes %u inputs, "
          "got %d",
          g->name, g->num_inputs, (int)num_inputs);
    }
    if (!inputs) return tj_invalid("tj_executable_prepare: inputs is NULL");
    // Only dtypes and shapes are read: NULL data stands for "not yet".
    static const unsigned char kNoData[1];
    size_t bytes = sizeof(tj_tensor_t) * (size_t)(num_inputs ? num_inputs : 1);
    tj_tensor_t* bound = tj_alloc(exe->allocator, bytes);
    if (!bound) return tj_status_oom();
    for (int32_t i = 0; i < num_inputs; ++i) {
      bound[i] = inputs[i];
      if (!bound[i].data) {
        bound[i].data = (void*)kNoData;
        bound[i].byte_offset = 0;
      }
    }
    tj_status_t status = tj_ir_bind_symbols(g, bound, num_inputs, sym);
    tj_free(exe->allocator, bound, bytes);
    TJ_RETURN_IF_ERROR(status);
  }
  if (exe->reference || exe->cuda) return NULL;
  // The generic kernels' deferred code: waits for the background build or
  // builds it here (with a host parallel_for nothing else does before the
  // first run).
  TJ_RETURN_IF_ERROR(tj_x86_kernel_set_build_cold(&exe->generic));
  // The exact-shape kernels the first run of this shape would compile.
  if (shape && exe->options.specialize == TJ_SPECIALIZE_ALWAYS &&
      exe->num_symbols > 0 && !exe->options.bucket_pow2) {
    const tj_x86_kernel_set_t* set = &exe->generic;
    TJ_RETURN_IF_ERROR(choose_set(exe, sym, &set));
    if (set != &exe->generic) {
      TJ_RETURN_IF_ERROR(tj_x86_kernel_set_build_cold(set));
    }
  }
  return NULL;
}

tj_status_t tj_executable_output_shape(const tj_executable_t* executable,
                                       const tj_tensor_t* inputs,
                                       int32_t num_inputs, int32_t output_index,
                                       int32_t* out_rank, int64_t* out_dims) {
  if (!executable) {
    return tj_invalid("tj_executable_output_shape: executable is NULL");
  }
  return tj_graph_output_shape(executable->graph, inputs, num_inputs,
                               output_index, out_rank, out_dims);
}

tj_x86_tuner_t* tj_x86_executable_tuner(const tj_executable_t* executable) {
  return executable ? executable->tuner : NULL;
}

void tj_executable_stats(const tj_executable_t* executable,
                         tj_executable_stats_t* out_stats) {
  memset(out_stats, 0, sizeof(*out_stats));
  if (!executable) return;
  tj_executable_t* exe = (tj_executable_t*)executable;
  out_stats->num_kernels = (int32_t)exe->generic.num_kernels;
  out_stats->num_graph_breaks = (int32_t)exe->num_host_steps;
  out_stats->compile_ms = exe->compile_ms;
  out_stats->cache_hits = atomic_load(&exe->cache_hits);
  out_stats->cache_misses = atomic_load(&exe->cache_misses);
  out_stats->recompiles = atomic_load(&exe->recompiles);
  out_stats->runs = atomic_load(&exe->runs);
}

tj_status_t tj_executable_cuda_stats(const tj_executable_t* executable,
                                     tj_cuda_program_stats_t* out_stats) {
  memset(out_stats, 0, sizeof(*out_stats));
  if (!executable || !executable->cuda) {
    return tj_invalid("tj_executable_cuda_stats: not a CUDA executable");
  }
  tj_cuda_program_stats(executable->cuda, out_stats);
  return NULL;
}
