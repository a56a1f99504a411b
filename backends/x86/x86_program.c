// backends/x86/x86_program.c: the x86 target of the compile driver
// (tj_backend_x86, backends/runtime/backend.h).
//
// A program is a kernel set (x86_backend.h): every kernel of the run plan
// JIT-compiled as one module with the context's JIT, small-M GEMM paths
// deferred to first use (built in the background right after the generic
// compile, by tj_executable_prepare, or by the first run that takes them).
// The generic program also has the GEMM autotuner (gemm_tune.h) when
// options.autotune asks for it. Kernels run on the context's thread pool
// or the host's parallel_for.
//
// Running: evaluate the memory plan for the run's symbols, take a run
// frame (arena + per-run tables) from a small pool, compute each kernel's
// scalar params and launch it over its work units; host steps run on the
// reference semantics in between (backends/runtime/run_plan.h). Graph outputs
// are written straight into the caller's tensors when those are dense; strided
// inputs and outputs go through staging space in the arena. Frames keep
// their arena across runs and grow it only when a larger shape comes, so a
// steady state allocates nothing; concurrent runs get different frames.

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/runtime/backend.h"
#include "backends/runtime/host_tensor.h"
#include "backends/x86/gemm_tune.h"
#include "backends/x86/x86_backend.h"
#include "jit/cache.h"
#include "jit/kernel_dump.h"
#include "lib/custom_op.h"
#include "lib/env.h"
#include "lib/passes/fusion.h"
#include "lib/quant.h"
#include "lib/shape.h"
#include "lib/window.h"

#define FRAME_POOL 8
#define HUGE_PAGE ((size_t)2 << 20)

// Everything one run needs besides the program; pooled.
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

// A kernel's constant operand packed at compile time (tj_kir_t.b_prepacked):
// an 8-bit GEMM's B as the quads the integer microkernels read (issue 17),
// or a conv's weight by passes or ocvec panels (prepack_conv_one); passed
// as that buffer in place of the constant.
typedef struct prepacked_t {
  void* raw;  // the allocation; NULL: this kernel's B is not prepacked
  size_t bytes;
  unsigned char* data;  // 64-byte aligned
  uint32_t buffer;      // the kernel's B buffer
} prepacked_t;

typedef struct program_t {
  tj_x86_kernel_set_t set;
  bool generic;
  tj_x86_tuner_t* tuner;   // the generic program's (autotune ON), or NULL
  prepacked_t* prepacked;  // per kernel, or NULL when none is
  uint32_t num_kernels;    // of |prepacked|
  // nchwc (issue 15): the values held blocked between convs
  // (nchwc_assign), which an observed run shows its observer row-major.
  struct nchwc_value_t* blocked;
  uint32_t num_blocked;
} program_t;

// A value held blocked: node |node|, written by step |step|, [N][c / lanes]
// [p][lanes] (p its spatial size).
typedef struct nchwc_value_t {
  uint32_t node, step;
  int64_t c, p, lanes;
} nchwc_value_t;

typedef struct target_t {
  tj_backend_config_t config;  // its |arg| is not kept
  bool log_cache, log_fusion, log_autotune;
  char cache_dir[1024];       // the disk cache; "" when disabled
  const tj_run_plan_t* plan;  // set by the generic compile
  // The context's JIT and pool (x86_backend.h), borrowed: executables
  // share them, and a kernel set unloads its code when it is destroyed.
  tj_x86_runtime_t* runtime;
  tj_x86_jit_t* jit;
  tj_x86_runner_t runner;
  frame_t frames[FRAME_POOL];
} target_t;

//===--- frames ---===//

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

static size_t frame_meta_bytes(const target_t* t) {
  const tj_graph_t* g = t->plan->graph;
  uint32_t slots = t->plan->memplan ? t->plan->memplan->num_slots : 0;
  uint32_t nk = t->plan->num_kernels;
  return sizeof(int64_t) * (slots + 1) +
         sizeof(unsigned char*) * (g->num_nodes + 1) +
         sizeof(int64_t) * (g->num_inputs + g->num_outputs + 1) +
         sizeof(tj_x86_launch_t) * (nk + 1) +
         sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1);
}

static tj_status_t frame_init_meta(target_t* t, frame_t* f) {
  if (f->meta) return NULL;
  const tj_graph_t* g = t->plan->graph;
  uint32_t slots = t->plan->memplan ? t->plan->memplan->num_slots : 0;
  uint32_t nk = t->plan->num_kernels;
  size_t bytes = frame_meta_bytes(t);
  unsigned char* p = tj_alloc(t->config.allocator, bytes);
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

static void frame_free(target_t* t, frame_t* f) {
  tj_free(t->config.allocator, f->meta, f->meta_bytes);
  tj_free(t->config.allocator, f->block, f->block_bytes);
  f->meta = NULL;
  f->block = NULL;
  f->block_bytes = 0;
  f->base = NULL;
  f->capacity = 0;
}

// Grows |f|'s arena to |bytes|. Large arenas are 2 MiB aligned and asked
// to be backed by huge pages: a fresh 4 KiB page costs ~11 us to fault.
static tj_status_t frame_reserve(target_t* t, frame_t* f, int64_t bytes) {
  if (bytes <= f->capacity) return NULL;
  size_t align = (size_t)bytes >= HUGE_PAGE ? HUGE_PAGE : 64;
  size_t total = (size_t)bytes + align;
  void* block = tj_alloc(t->config.allocator, total);
  if (!block) return tj_status_oom();
  tj_free(t->config.allocator, f->block, f->block_bytes);
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
static tj_status_t frame_acquire(target_t* t, frame_t** out, bool* out_temp) {
  *out_temp = false;
  for (int i = 0; i < FRAME_POOL; ++i) {
    frame_t* f = &t->frames[i];
    int expected = 0;
    if (atomic_compare_exchange_strong(&f->busy, &expected, 1)) {
      tj_status_t status = frame_init_meta(t, f);
      if (status) {
        atomic_store(&f->busy, 0);
        return status;
      }
      *out = f;
      return NULL;
    }
  }
  frame_t* f = tj_alloc(t->config.allocator, sizeof(frame_t));
  if (!f) return tj_status_oom();
  memset(f, 0, sizeof(*f));
  tj_status_t status = frame_init_meta(t, f);
  if (status) {
    tj_free(t->config.allocator, f, sizeof(frame_t));
    return status;
  }
  *out = f;
  *out_temp = true;
  return NULL;
}

static void frame_release(target_t* t, frame_t* f, bool temp) {
  if (temp) {
    frame_free(t, f);
    tj_free(t->config.allocator, f, sizeof(frame_t));
  } else {
    atomic_store(&f->busy, 0);
  }
}

//===--- the target ---===//

static tj_status_t x86_open(void* target, const tj_backend_config_t* config) {
  target_t* t = target;
  t->config = *config;
  t->config.arg = NULL;
  t->log_cache = (config->log & TJ_LOG_CACHE) != 0;
  t->log_fusion = (config->log & TJ_LOG_FUSION) != 0;
  t->log_autotune = (config->log & TJ_LOG_AUTOTUNE) != 0;
  for (int i = 0; i < FRAME_POOL; ++i) atomic_init(&t->frames[i].busy, 0);
  return NULL;
}

static void x86_close(void* target) {
  target_t* t = target;
  for (int i = 0; i < FRAME_POOL; ++i) frame_free(t, &t->frames[i]);
}

static void x86_trim(void* target) {
  target_t* t = target;
  for (int i = 0; i < FRAME_POOL; ++i) {
    frame_t* f = &t->frames[i];
    if (atomic_load(&f->busy) == 0) frame_free(t, f);
  }
}

static void x86_release(void* target, void* program) {
  target_t* t = target;
  program_t* p = program;
  if (!p) return;
  tj_x86_tuner_destroy(p->tuner);  // borrows the set
  tj_x86_kernel_set_deinitialize(t->config.allocator, &p->set);
  for (uint32_t i = 0; p->prepacked && i < p->num_kernels; ++i) {
    tj_free(t->config.allocator, p->prepacked[i].raw, p->prepacked[i].bytes);
  }
  if (p->prepacked) {
    tj_free(t->config.allocator, p->prepacked,
            sizeof(prepacked_t) * p->num_kernels);
  }
  if (p->blocked) {
    tj_free(t->config.allocator, p->blocked,
            sizeof(nchwc_value_t) * p->num_blocked);
  }
  tj_free(t->config.allocator, p, sizeof(*p));
}

// Counts and logs where a kernel set's code came from.
static void account_set(target_t* t, const tj_x86_kernel_set_t* set,
                        tj_lowered_program_t* lp) {
  uint32_t all = set->num_kernels;
  if (all == 0) return;
  // Region compile: identical kernels are compiled (or loaded) once.
  uint32_t n = set->unique ? set->num_unique : all;
  lp->kernels_shared = all - n;
  if (set->source == TJ_X86_SOURCE_LLVM) {
    lp->cache_misses = n;
    lp->llvm_ms = set->compile_ms;
  } else {
    lp->cache_hits = n;
    lp->cache_load_ms = set->compile_ms;
  }
  tj_disk_cache_warn_store(t->config.context, t->cache_dir, set->store_status);
  if (!t->log_cache) return;
  const char* what = lp->label;
  static const char* const kFrom[] = {"compiled by LLVM as one module",
                                      "loaded from the memory cache",
                                      "loaded from the disk cache"};
  const char* name = t->plan->graph->name;
  tj_context_diagnostic(
      t->config.context, TJ_SEVERITY_REMARK,
      "cache: @%s %s: %u kernels (%u sharing their code) %s (key %s, %zu "
      "bytes of object code) in %.2f ms%s%s%s; %d functions deferred to first "
      "use",
      name, what, all, all - n, kFrom[set->source], set->key, set->object_bytes,
      set->compile_ms, set->cache_note ? "; disk: " : "",
      set->cache_note ? set->cache_note : "",
      t->cache_dir[0] ? "" : "; disk cache disabled", (int)set->num_deferred);
}

static int32_t online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 256 ? 256 : (int32_t)n);
}

// What only the generic program has: threads, the background build of its
// deferred code, the autotuner; and the fusion summary.
static tj_status_t finish_generic(target_t* t, program_t* p) {
  const tj_compile_options_t* o = t->config.options;
  const tj_run_plan_t* rp = t->plan;
  uint32_t nk = rp->num_kernels;
  int32_t threads = o->x86.num_threads > 0 ? o->x86.num_threads : online_cpus();
  t->runner.threads = threads;
  t->runner.lanes = tj_x86_jit_lanes(t->jit);
  if (o->x86.parallel_for) {
    t->runner.host_parallel_for = o->x86.parallel_for;
    t->runner.host_user_data = o->x86.parallel_for_user_data;
  } else if (threads > 1 && nk > 0) {
    TJ_RETURN_IF_ERROR(
        tj_x86_runtime_pool(t->runtime, threads, &t->runner.pool));
  }
  // The small-M paths, in the background from here (x86_backend.c), so
  // that the first small run does not pay for them; not behind the back of
  // a host that schedules the work itself (its parallel_for): there the
  // first run that needs them builds them, as before. Nor when every run
  // takes an exact-shape specialization (its own kernel set): the generic
  // kernels then run only where one cannot be made.
  bool generic_runs = o->specialize != TJ_SPECIALIZE_ALWAYS ||
                      tj_dim_num_symbols(&rp->graph->dims) == 0 ||
                      o->bucket_pow2;
  if (!o->x86.parallel_for && generic_runs) {
    tj_x86_kernel_set_build_cold_in_background(&p->set);
  }
  if (o->autotune == TJ_AUTOTUNE_ON || o->autotune == TJ_AUTOTUNE_BACKGROUND) {
    tj_x86_tuner_config_t tc = {
        t->jit,
        t->config.allocator,
        t->config.context,
        t->cache_dir,
        &p->set,
        &t->runner,
        o->x86.autotune_budget_ms > 0 ? o->x86.autotune_budget_ms : 200,
        t->log_autotune,
        o->autotune == TJ_AUTOTUNE_BACKGROUND,
        rp->graph->name};
    TJ_RETURN_IF_ERROR(tj_x86_tuner_create(&tc, &p->tuner));
  }
  if (t->log_fusion) {
    const tj_memplan_t* mp = rp->memplan;
    tj_context_diagnostic(
        t->config.context, TJ_SEVERITY_REMARK,
        "fusion: @%s: %u groups -> %u kernels, %u graph breaks; arena of %u "
        "slots (%u values in place)",
        rp->graph->name, rp->fusion->num_groups, nk, rp->num_host_steps,
        mp->num_slots, mp->num_in_place);
  }
  return NULL;
}

// The dump directory's per-kernel files of a program (jit/kernel_dump.h):
// the generic one as <graph>.<kernel>.*, a specialized one (|shape|, e.g.
// "B=7,S=128") as <graph>.B=7_S=128.<kernel>.*. Never fails: a problem is
// a warning.
static void dump_kernels(target_t* t, const program_t* p, const char* shape) {
  const char* dir = tj_setting(t->config.context, TJ_SETTING_DUMP_DIR);
  uint32_t n = p->set.num_kernels;
  if (!dir || !*dir || n == 0) return;
  const tj_kir_t** kirs = tj_alloc(t->config.allocator, sizeof(*kirs) * n);
  if (!kirs) {
    tj_context_diagnostic(
        t->config.context, TJ_SEVERITY_WARNING,
        "%s: no kernel dumps: out of memory",
        tj_setting_source(t->config.context, TJ_SETTING_DUMP_DIR));
    return;
  }
  for (uint32_t i = 0; i < n; ++i) kirs[i] = p->set.kernels[i].kernel;
  const tj_compile_options_t* o = t->config.options;
  char note[160];
  snprintf(note, sizeof(note),
           "program: %s%.64s kernels, %d threads%s, GEMM autotune %s",
           shape ? "specialized to " : "generic", shape ? shape : "",
           (int)t->runner.threads,
           o->x86.parallel_for ? " (the host's parallel_for)" : "",
           p->tuner ? "on (timed per shape bucket at run time)" : "off");
  char graph[256];
  tj_dump_program_name(graph, sizeof(graph), t->plan->graph->name, shape);
  tj_x86_dump_kernels(t->jit, t->config.allocator, t->config.context, dir,
                      graph, kirs, n, note);
  tj_free(t->config.allocator, kirs, sizeof(*kirs) * n);
}

// The n block (and where it pays the m block) of each GEMM kernel whose
// schedule is left to the default and whose sizes are all constants,
// chosen so that its work units fill the threads evenly. A unit is (batch, mc
// rows, nc columns); with fewer units than a few per thread the last wave
// leaves threads idle: the GPT block's d x d projections at B.T = 1024 are 4 x
// 6 = 24 units of 256 x 128, two waves on 16 threads of which the second
// runs 8. Time goes as the waves times a unit's size, so the candidates are nc
// = the default, then down by a register tile's width: 24 units of 128 columns
// take 2 waves of 128 where 48 of 64 take 3 of 64 (0.75x). Ties keep the wider
// block, and mc stays unless halving it (at most twice) is strictly better than
// every wider block: B's packing per unit costs in proportion to nc, as its
// compute does, while a smaller mc packs B more often per flop. It can be:
// a batch that lowering folded into m (kir/lower_index.c, x[2, 64, d] @ w
// as one GEMM of 128 rows) is one m block of 128 rows, 2 units on 3
// threads where the batched GEMM had 4 units of 64 rows; 66-row blocks
// give back its 8 units of 64 columns in 3 waves. A host parallel_for (its
// thread count unknown) and one thread leave it alone.
static void balance_gemm_units(const target_t* t, tj_lowered_kernel_t* ks,
                               uint32_t nk) {
  const tj_compile_options_t* o = t->config.options;
  if (o->x86.parallel_for) return;
  int64_t threads = o->x86.num_threads > 0 ? o->x86.num_threads : online_cpus();
  if (threads < 2) return;
  int32_t lanes = tj_x86_jit_lanes(t->jit);
  for (uint32_t i = 0; i < nk; ++i) {
    tj_kir_t* k = ks[i].kernel;
    if (k->kind != TJ_KIR_GEMM || tj_kir_gemm_is_int8(k) ||
        k->schedule.nc != 0 || k->schedule.mc != 0) {
      continue;
    }
    bool constant = true;
    int64_t batch = 1;
    for (int32_t d = 0; d < k->rank; ++d) {
      constant = constant && k->dims[d].param < 0;
      if (d + 2 < k->rank) batch *= k->dims[d].value;
    }
    if (!constant || k->rank < 2) continue;
    tj_kir_gemm_schedule_t s;
    tj_kir_gemm_resolve(k, lanes, &s);
    int64_t m = k->dims[k->rank - 2].value, n = k->dims[k->rank - 1].value;
    if (batch * m * n == 0) continue;
    int64_t best_nc = s.nc, best_mc = s.mc, best_cost = -1;
    for (int32_t half = 0; half < 3; ++half) {
      int64_t mc = s.mc >> half;
      mc = (mc + s.tile_m - 1) / s.tile_m * s.tile_m;
      if (half > 0 && mc >= m) continue;  // no more m blocks than before
      int64_t mrows = m < mc ? m : mc;
      int64_t mblocks = batch * ((m + mc - 1) / mc);
      for (int64_t nc = s.nc; nc >= s.tile_n; nc -= s.tile_n) {
        int64_t units = mblocks * ((n + nc - 1) / nc);
        int64_t waves = (units + threads - 1) / threads;
        int64_t cost = waves * mrows * (n < nc ? n : nc);
        if (best_cost < 0 || cost < best_cost) {
          best_cost = cost;
          best_nc = nc;
          best_mc = mc;
        }
      }
    }
    if (best_nc != s.nc) k->schedule.nc = (int32_t)best_nc;
    if (best_mc != s.mc) k->schedule.mc = (int32_t)best_mc;
  }
}

// Kernel |i|'s prepacked copy of its buffer |buffer|: |bytes| zeroed and
// 64-byte aligned, returned in |out|; the program's table of |nk| kernels
// made on first use.
static tj_status_t prepacked_alloc(tj_allocator_t al, program_t* p, uint32_t nk,
                                   uint32_t i, uint32_t buffer, size_t bytes,
                                   unsigned char** out) {
  *out = NULL;
  if (!p->prepacked) {
    p->prepacked = tj_calloc(al, nk, sizeof(prepacked_t));
    if (!p->prepacked) return tj_status_oom();
    p->num_kernels = nk;
  }
  prepacked_t* pp = &p->prepacked[i];
  pp->bytes = bytes + 64;  // alignment
  pp->raw = tj_alloc(al, pp->bytes);
  if (!pp->raw) return tj_status_oom();
  pp->data = (unsigned char*)(((uintptr_t)pp->raw + 63) / 64 * 64);
  pp->buffer = buffer;
  memset(pp->data, 0, bytes);
  *out = pp->data;
  return NULL;
}

// Constant-B prepack (issue 17): each 8-bit GEMM whose B is a constant
// (a weight) and which the JIT runs on quads (the AMX tiles, vpdpbusd or
// vpmaddubsw with a u8 A; tj_x86_jit_gemm_prepacks_b) gets its B packed
// here, once, into the quads layout of tj_kir_t.b_prepacked, and the
// kernel reads that instead of packing B into scratch on every run: at M
// 256, N 1024, K 4096 the per-run packing was most of the AMX kernel's
// time (bench/RESULTS.md, "x86 int8 GEMM on VNNI and AMX").
static tj_status_t prepack_gemm_b(const target_t* t, program_t* p,
                                  const tj_graph_t* g, tj_lowered_kernel_t* ks,
                                  uint32_t nk) {
  tj_allocator_t al = t->config.allocator;
  for (uint32_t i = 0; i < nk; ++i) {
    tj_kir_t* k = ks[i].kernel;
    if (!tj_x86_jit_gemm_prepacks_b(t->jit, k)) continue;
    uint32_t bb = TJ_KIR_NONE;
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      if (k->buffers[b].role == TJ_KIR_GEMM_B) bb = b;
    }
    if (bb == TJ_KIR_NONE || ks[i].buffer_offset_dims[bb] != 0) continue;
    const tj_node_t* n = &g->nodes[ks[i].buffer_nodes[bb]];
    const tj_kir_ival_t* st = k->buffers[bb].strides;
    int32_t dk = k->rank - 2, dn = k->rank - 1;
    if (n->op != TJ_OP_CONSTANT || !n->attrs.data || st[dk].param >= 0 ||
        st[dn].param >= 0) {
      continue;
    }
    // Panels of P = tile_n columns, each all of K's quads (see
    // tj_kir_t.b_prepacked).
    tj_kir_gemm_schedule_t sched;
    tj_kir_gemm_resolve(k, tj_x86_jit_lanes(t->jit), &sched);
    const int64_t K = k->gemm_k.value, N = k->dims[dn].value;
    const int64_t sk = st[dk].value, sn = st[dn].value, P = sched.tile_n;
    const int64_t panels = (N + P - 1) / P, kq = (K + 3) / 4;
    unsigned char* packed = NULL;
    TJ_RETURN_IF_ERROR(prepacked_alloc(al, p, nk, i, bb,
                                       (size_t)(panels * kq * P * 4), &packed));
    const unsigned char* src = n->attrs.data;
    for (int64_t c = 0; c < N; ++c) {
      unsigned char* col = packed + ((c / P) * kq * P + c % P) * 4;
      for (int64_t kk = 0; kk < K; ++kk) {
        col[(kk / 4) * P * 4 + kk % 4] = src[kk * sk + c * sn];
      }
    }
    k->b_prepacked = true;
  }
  return NULL;
}

static _Atomic(bool) g_warned_conv;

// Whether conv kernel |k| takes the ocvec variant: TJ_X86_CONV "ocvec"
// wherever it can, "packed" nowhere, unset or "" by the rule; anything
// else warns once and leaves the rule.
static bool conv_ocvec(const target_t* t, const tj_kir_t* k) {
  if (!tj_kir_conv_ocvec_fits(k)) return false;
  const char* v = tj_setting(t->config.context, TJ_SETTING_X86_CONV);
  if (v && strcmp(v, "ocvec") == 0) return true;
  if (v && strcmp(v, "packed") == 0) return false;
  if (v && v[0]) {
    tj_warn_once(t->config.context, &g_warned_conv,
                 "TJ_X86_CONV: \"%.32s\" is neither ocvec nor packed and is "
                 "ignored",
                 v);
  }
  return tj_kir_conv_ocvec_rule(k);
}

// Constant-weight prepack of the CONV template (issue 15, convfuse): a
// conv whose weight w [O, C, taps..] (row-major, [O][K]) is a constant gets
// it relaid once here pass by pass (tj_kir_t.b_prepacked of a CONV
// kernel): per pass of kc over K, the rows [Opad][kn] f32, zero past O, so
// that the microkernel's pass over a block of channels reads one
// contiguous run of A rows kn apart instead of rows K apart. A conv that
// takes the ocvec variant (conv_ocvec; x86conv3) gets panels of nr
// channels instead, [O / nr][K][nr], and is marked (tj_kir_conv_t.ocvec).
// Kernel |i| of |ks|; |allow_ocvec| false keeps it off the ocvec variant.
static tj_status_t prepack_conv_one(const target_t* t, program_t* p,
                                    const tj_graph_t* g,
                                    tj_lowered_kernel_t* ks, uint32_t nk,
                                    uint32_t i, bool allow_ocvec) {
  tj_allocator_t al = t->config.allocator;
  tj_kir_t* k = ks[i].kernel;
  // A 1x1 reading x in place keeps w in place too: its prepacked rows
  // ran 1.2-1.4x slower (1x1 2048-512 @7, bench/RESULTS.md, convfuse).
  if (k->kind != TJ_KIR_CONV || tj_kir_conv_reads_x_in_place(k)) return NULL;
  uint32_t wb = TJ_KIR_NONE;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_CONV_W) wb = b;
  }
  if (wb == TJ_KIR_NONE || ks[i].buffer_offset_dims[wb] != 0) return NULL;
  const tj_node_t* n = &g->nodes[ks[i].buffer_nodes[wb]];
  if (n->op != TJ_OP_CONSTANT || !n->attrs.data || n->dtype != TJ_DTYPE_F32) {
    return NULL;
  }
  tj_kir_conv_schedule_t sched;
  tj_kir_conv_resolve(k, tj_x86_jit_lanes(t->jit), &sched);
  const int64_t O = k->dims[1].value, K = k->gemm_k.value, mr = sched.mr;
  // The ocvec variant's weight (tj_kir_conv_schedule_t.ocvec): panels
  // of nr channels, [O / nr][K][nr], zero past O.
  const bool ocvec = allow_ocvec && conv_ocvec(t, k);
  const int64_t kc = sched.kc,
                opad = ocvec ? (O + sched.nr - 1) / sched.nr * sched.nr
                             : (O + mr - 1) / mr * mr;
  unsigned char* packed = NULL;
  TJ_RETURN_IF_ERROR(prepacked_alloc(
      al, p, nk, i, wb, (size_t)(opad * K) * sizeof(float), &packed));
  const float* src = n->attrs.data;
  float* dst = (float*)packed;
  if (ocvec) {
    const int64_t nr = sched.nr;
    for (int64_t o = 0; o < O; ++o) {
      float* panel = dst + o / nr * K * nr + o % nr;
      for (int64_t kx = 0; kx < K; ++kx) panel[kx * nr] = src[o * K + kx];
    }
  }
  for (int64_t k0 = 0; k0 < K && !ocvec; k0 += kc) {
    const int64_t kn = K - k0 < kc ? K - k0 : kc;
    float* pass = dst + k0 * opad;
    for (int64_t o = 0; o < O; ++o)
      memcpy(pass + o * kn, src + o * K + k0, (size_t)kn * sizeof(float));
  }
  k->b_prepacked = true;
  k->conv.ocvec = ocvec;
  return NULL;
}

// Every conv kernel of |ks| (prepack_conv_one).
static tj_status_t prepack_conv_w(const target_t* t, program_t* p,
                                  const tj_graph_t* g, tj_lowered_kernel_t* ks,
                                  uint32_t nk) {
  for (uint32_t i = 0; i < nk; ++i)
    TJ_RETURN_IF_ERROR(prepack_conv_one(t, p, g, ks, nk, i, true));
  return NULL;
}

// conv16 (issue 15): the channel and pixel blocks (tj_kir_t.schedule's mc
// and nc, kir/schedule.h) of each GEMM-window conv whose sizes but the
// batch are constants and whose default units are fewer than two a thread,
// chosen as balance_gemm_units chooses a GEMM's, by waves times a unit's
// cost. At batch 1, resnet18's 3x3 256-256 @14 was one unit of 256 channels x
// 196 pixels and its @7 convs three of 192 channels: 1 to 3 of 16 threads busy.
// The time is taken as (waves + 1/2) units, the half a unit that a thread late
// to its last one costs, so that of two splits in one wave the finer wins (at
// most 4 units a thread). A unit costs its tiles plus what it does once
// whatever its channels: the packed variant packs its patches (about 32
// channels' worth of its multiply: 3x3 256-256 @14 at batch 32 took 70 instead
// of 51 ms of CPU at 48 channels a unit, not 192), the ocvec variant streams
// its weight panels from L2 into L1 once a pixel block (counted as 12 pixels)
// and copies the padded image (2 FMAs a float: 15% of a 64 x 66 unit of 3x3
// 64-64 @56). Candidates: the ocvec variant's channels by nr and its pixels in
// blocks as even as the groups of mr allow; the others' channels by whole
// blocks of mr and of the vector (a blocked output stays whole blocks a unit,
// nchwc_sums_out) and pixels by panels of nr. Ties keep the larger block. A
// symbolic batch (the exported models' "batch") is balanced for 1 image, and
// the kernel takes the default blocks from the batch that gives them two units
// a thread (schedule.kc; the template emits both unit loops and picks one by
// the run's batch, kir/schedule.h), so a large batch keeps the schedule it had.
// A kernel with units enough at batch 1, a host parallel_for and one thread
// leave the schedule alone. Runs after prepack_conv_w (its ocvec mark picks the
// variant) and before nchwc_assign (which asks whether a unit's channels are
// whole blocks).
static void balance_conv_units(const target_t* t, tj_lowered_kernel_t* ks,
                               uint32_t nk) {
  const tj_compile_options_t* o = t->config.options;
  if (o->x86.parallel_for) return;
  int64_t threads = o->x86.num_threads > 0 ? o->x86.num_threads : online_cpus();
  if (threads < 2) return;
  const int32_t lanes = tj_x86_jit_lanes(t->jit);
  for (uint32_t i = 0; i < nk; ++i) {
    tj_kir_t* k = ks[i].kernel;
    if (k->kind != TJ_KIR_CONV || k->conv.window != TJ_KIR_WINDOW_GEMM ||
        k->schedule.mc != 0 || k->schedule.nc != 0 || k->rank < 3 ||
        k->gemm_k.param >= 0) {
      continue;
    }
    // Every size a constant but perhaps the batch, and then the batch one
    // of at most 16 params: its units counted at a batch of 1.
    bool constant = true;
    for (int32_t d = 1; d < k->rank; ++d)
      constant = constant && k->dims[d].param < 0;
    const int32_t bp = k->dims[0].param;
    if (!constant || k->num_params > 16) continue;
    int64_t sc[16];
    for (uint32_t j = 0; j < k->num_params; ++j) sc[j] = 1;
    const int64_t* scalars = bp >= 0 ? sc : NULL;
    tj_kir_launch_t info;
    tj_status_t st = tj_kir_launch_info(k, lanes, scalars, &info);
    if (st || info.units >= 2 * threads || info.units == 0) {
      tj_status_free(st);
      continue;
    }
    tj_kir_conv_schedule_t s;
    tj_kir_conv_resolve(k, lanes, &s);
    const int64_t O = k->dims[1].value;
    int64_t pix = 1;
    for (int32_t d = 2; d < k->rank; ++d) pix *= k->dims[d].value;
    if (s.shifted) pix = s.cols;
    // The channel step; the pixel candidates by count of blocks (ocvec)
    // or panels (the others).
    int64_t ostep = s.mr;
    while (!s.ocvec && (ostep % lanes != 0)) ostep += s.mr;
    if (s.ocvec) ostep = s.nr;
    const bool packs =
        !s.ocvec && !s.shifted && !tj_kir_conv_reads_x_in_place(k);
    // An ocvec unit copies the image (its thread's key does not outlive a
    // call, and a call of the pool is one unit where units are few): 2
    // FMAs' worth a float, in tile cells of K FMAs.
    const int64_t kk = k->gemm_k.value > 0 ? k->gemm_k.value : 1;
    const int64_t copy = s.ocvec ? 2 * s.xpad / kk : 0;
    int64_t best_cost = -1, best_oc = s.oc, best_nc = s.nc;
    for (int64_t oc = s.oc; oc >= ostep; oc = (oc - 1) / ostep * ostep) {
      int64_t last_nc = -1;
      for (int64_t b = 1; b <= pix; ++b) {
        int64_t nc;
        if (s.ocvec) {
          nc = (pix + b - 1) / b;
          nc = (nc + s.mr - 1) / s.mr * s.mr;
          if (nc > s.nc) continue;
          if (nc < 2 * s.mr && b > 1) break;
        } else {
          nc = s.nc / s.nr - (b - 1);
          if (nc < 1) break;
          nc *= s.nr;
        }
        if (nc == last_nc) continue;
        last_nc = nc;
        k->schedule.mc = oc == s.oc ? 0 : (int32_t)oc;
        k->schedule.nc = nc == s.nc ? 0 : (int32_t)nc;
        tj_kir_launch_t ci;
        st = tj_kir_launch_info(k, lanes, scalars, &ci);
        if (st) {
          tj_status_free(st);
          continue;
        }
        if (ci.units > 4 * threads) continue;
        const int64_t waves = (ci.units + threads - 1) / threads;
        const int64_t rows = O < oc ? O : oc;
        const int64_t cols = pix < nc ? pix : nc;
        const int64_t unit = s.ocvec ? rows * (cols + 12) + copy
                                     : (rows + (packs ? 32 : 8)) * cols;
        const int64_t cost = (2 * waves + 1) * unit;
        if (best_cost < 0 || cost < best_cost) {
          best_cost = cost;
          best_oc = oc;
          best_nc = nc;
        }
      }
    }
    k->schedule.mc = 0;
    k->schedule.nc = 0;
    if (best_oc == s.oc && best_nc == s.nc) continue;
    // A symbolic batch: the default blocks from the batch whose units
    // they give two a thread (resnet18's 3x3 256-256 @14 at 16 threads:
    // 32 images); the smaller ones below it.
    int64_t from = 0;
    for (int64_t n = 2; bp >= 0 && n < (1 << 16) && !from; ++n) {
      sc[bp] = n;
      st = tj_kir_launch_info(k, lanes, sc, &info);
      if (st || info.units >= 2 * threads) from = n;
      tj_status_free(st);
    }
    if (bp >= 0 && !from) from = 1 << 16;
    k->schedule.mc = best_oc == s.oc ? 0 : (int32_t)best_oc;
    k->schedule.nc = best_nc == s.nc ? 0 : (int32_t)best_nc;
    k->schedule.kc = (int32_t)from;
  }
}

// nchwc (issue 15): how a conv kernel may meet a blocked value.
typedef enum nchwc_use_e {
  NCHWC_X,         // as its x: its padded copy made blocked
  NCHWC_OUT,       // as its one output: stored from its tiles
  NCHWC_RESIDUAL,  // as an epilogue input of its output's shape
} nchwc_use_t;

// Whether conv kernel |k| (marked ocvec by prepack_conv_w) may take a
// blocked value of |lanes| channels a block in the role |use| (buffer |b|
// for a residual): the ocvec variant at stride 1, the channels (x's, or
// the output's) a multiple of the block; a blocked output's kernel has one
// output; a residual is read at the output's own points (its strides
// row-major over the output's space).
static bool nchwc_conv(const tj_kir_t* k, int32_t lanes, nchwc_use_t use,
                       uint32_t b) {
  const tj_kir_conv_t* cv = &k->conv;
  if (k->kind != TJ_KIR_CONV || cv->window != TJ_KIR_WINDOW_GEMM ||
      !cv->ocvec || !k->b_prepacked)
    return false;
  tj_kir_conv_schedule_t s;
  tj_kir_conv_resolve(k, lanes, &s);
  if (!s.ocvec) return false;
  if (use == NCHWC_X) {
    for (int32_t d = 0; d < 3; ++d) {
      if (cv->stride[d] != 1) return false;
    }
    return cv->c % lanes == 0;
  }
  if (k->dims[1].param >= 0 || k->dims[1].value % lanes != 0) return false;
  if (use == NCHWC_RESIDUAL) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    int64_t inner = 1;
    for (int32_t d = k->rank - 1; d >= 1; --d) {
      if (!tj_kir_ival_is_const(buf->strides[d], inner)) return false;
      inner *= k->dims[d].value;
    }
    return buf->role == TJ_KIR_INPUT &&
           tj_kir_ival_is_const(buf->strides[0], inner);
  }
  uint32_t outputs = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i)
    outputs += k->buffers[i].role == TJ_KIR_OUTPUT;
  return outputs == 1;
}

// nchwc2 (issue 15): whether conv kernel |k| may store its one output
// blocked from its channel-major sums, on the shifted variant (resnet's
// stem, 7x7/2 3-64: its x, 3 channels, stays row-major) or the packed one
// (the strided 3x3s and the 1x1/2 downsamples), at any stride: the
// output's channels a multiple of |lanes| and a unit's channels whole
// blocks (one block a unit, or units of a multiple of |lanes|). Not a
// 1x1 at stride 1 that reads x in place.
static bool nchwc_sums_out(const tj_kir_t* k, int32_t lanes) {
  if (k->kind != TJ_KIR_CONV || k->conv.window != TJ_KIR_WINDOW_GEMM ||
      k->conv.ocvec || tj_kir_conv_groups(&k->conv) != 1 ||
      k->dims[1].param >= 0 || k->dims[1].value % lanes != 0 ||
      tj_kir_conv_reads_x_in_place(k))
    return false;
  tj_kir_conv_schedule_t s;
  tj_kir_conv_resolve(k, lanes, &s);
  if (s.ocvec || (k->dims[1].value > s.oc && s.oc % lanes != 0)) return false;
  uint32_t outputs = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i)
    outputs += k->buffers[i].role == TJ_KIR_OUTPUT;
  return outputs == 1;
}

// The strides within a block of a blocked buffer of conv kernel |k|'s
// output shape (tj_kir_conv_t.yblock): [O x P, 1, lanes x the spatial
// strides of a row-major P]; returns P.
static int64_t nchwc_strides(const tj_kir_t* k, int32_t lanes,
                             tj_kir_ival_t* strides) {
  int64_t inner = lanes, P = 1;
  for (int32_t d = k->rank - 1; d >= 2; --d) {
    strides[d] = tj_kir_constant(inner);
    inner *= k->dims[d].value;
    P *= k->dims[d].value;
  }
  strides[1] = tj_kir_constant(1);
  strides[0] = tj_kir_constant(k->dims[1].value * P);
  return P;
}

// Whether the memory plan writes |node| in place of |input| (an input its
// group reads at its own points): a blocked layout on one side only would
// overwrite what other units still read.
static bool in_place(const tj_memplan_t* mp, uint32_t num_nodes, uint32_t node,
                     uint32_t input) {
  if (!mp || node >= num_nodes) return false;
  const uint32_t bi = mp->buffer_of[node];
  return bi != UINT32_MAX && mp->buffers[bi].kind == TJ_BUFFER_ARENA &&
         mp->buffers[bi].in_place_of == input;
}

// Whether kernel |i|'s output buffer |ob| may hold its value blocked,
// with the window kernels in |cand| (r18) reading and writing blocks: the
// value is no graph output, not written in place of one of the producer's
// inputs, every group that reads it is a step of kernels, and every kernel
// buffer of it but the producer's output is the x of a conv that can take
// it blocked or of a window kernel in |cand|, or a residual of a conv whose
// output is not written in its place. |*out_step|: the step that writes it
// (for observed runs).
static bool nchwc_value_ok(const tj_run_plan_t* rp, const uint32_t* step_of,
                           const tj_lowered_kernel_t* ks, uint32_t nk,
                           const bool* cand, int32_t w, uint32_t i, uint32_t ob,
                           uint32_t* out_step) {
  const tj_fusion_t* fu = rp->fusion;
  const uint32_t nn = rp->graph->num_nodes;
  const tj_kir_t* k = ks[i].kernel;
  if (ks[i].buffer_offset_dims[ob] != 0) return false;
  const uint32_t val = ks[i].buffer_nodes[ob];
  if (val >= nn || rp->first_output[val] >= 0) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_INPUT &&
        in_place(rp->memplan, nn, val, ks[i].buffer_nodes[b]))
      return false;
  }
  for (uint32_t gi = 0; gi < fu->num_groups; ++gi) {
    const tj_group_t* gr = &fu->groups[gi];
    for (uint32_t j = 0; j < gr->num_inputs; ++j) {
      if (gr->inputs[j] != val) continue;
      const uint32_t s = step_of[gi];
      if (s == UINT32_MAX || rp->steps[s].kind != TJ_RUN_STEP_KERNELS)
        return false;
    }
  }
  uint32_t readers = 0;
  for (uint32_t j = 0; j < nk; ++j) {
    const tj_kir_t* kj = ks[j].kernel;
    for (uint32_t b = 0; b < kj->num_buffers; ++b) {
      if (ks[j].buffer_nodes[b] != val || (j == i && b == ob)) continue;
      if (ks[j].buffer_offset_dims[b] != 0 || j == i) return false;
      if (kj->buffers[b].role == TJ_KIR_CONV_X) {
        if (!nchwc_conv(kj, w, NCHWC_X, b) && !cand[j]) return false;
      } else {
        if (!nchwc_conv(kj, w, NCHWC_RESIDUAL, b) || b >= 32) return false;
        for (uint32_t c = 0; c < kj->num_buffers; ++c) {
          if (kj->buffers[c].role == TJ_KIR_OUTPUT &&
              in_place(rp->memplan, nn, ks[j].buffer_nodes[c], val))
            return false;
        }
      }
      ++readers;
    }
  }
  if (readers == 0) return false;
  *out_step = UINT32_MAX;
  for (uint32_t st = 0; st < rp->num_steps; ++st) {
    const tj_run_step_t* rs = &rp->steps[st];
    if (rs->kind == TJ_RUN_STEP_KERNELS && i >= rs->first_kernel &&
        i - rs->first_kernel < rs->num_kernels)
      *out_step = st;
  }
  return *out_step != UINT32_MAX;
}

// Kernel |k|'s one OUTPUT buffer (TJ_KIR_NONE: none, or several).
static uint32_t one_output(const tj_kir_t* k) {
  uint32_t ob = TJ_KIR_NONE;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role != TJ_KIR_OUTPUT) continue;
    if (ob != TJ_KIR_NONE) return TJ_KIR_NONE;
    ob = b;
  }
  return ob;
}

// nchwc (issue 15): the blocked layout carried between x86 convs. A value
// that an ocvec conv writes and that only ocvec convs read, as their x or
// as a residual of their epilogue (resnet's conv -> relu -> conv inside a
// basic block, and a block's output that the next block reads both ways),
// is held as [N][C / w][H][W][w] (w the vector's lanes, 16 on AVX-512):
// the producer stores each pixel's w channels from its registers as one
// vector, a sequential run per block of channels, with no transpose and
// no channel rows P apart (tj_kir_conv_t.yblock), each x reader's padded
// copy of the image is blocked too, a vector a pixel (xblock), and each
// residual reader reads the blocks through its epilogue (inblock). A max
// pool (r18: tj_kir_window_blocks) reads and writes blocks together, so
// it is taken only where both its x and its output qualify, with the
// pools that do so taken as readers and producers (a fixpoint over the
// candidate pools): resnet's stem -> max pool -> layer1. The value is none
// of the graph's outputs, no graph break, view or other kernel reads it,
// and none of its kernels writes in place of a value of the other layout,
// so only these kernels ever see its bytes (and an observed run's
// observer, row-major: observe_step); the graph, the reference and the
// other targets keep NCHW. TJ_LAYOUT=nchw (or off) leaves every value
// row-major.
static tj_status_t nchwc_assign(const target_t* t, program_t* prog,
                                const tj_run_plan_t* rp,
                                tj_lowered_kernel_t* ks, uint32_t nk) {
  const char* v = tj_setting(t->config.context, TJ_SETTING_LAYOUT);
  if (v && (strcmp(v, "off") == 0 || strcmp(v, "nchw") == 0)) return NULL;
  const int32_t w = tj_x86_jit_lanes(t->jit);
  if (w < 4 || nk == 0 || !rp->fusion) return NULL;
  const tj_fusion_t* fu = rp->fusion;
  tj_allocator_t al = t->config.allocator;
  // The run plan's step of each group (UINT32_MAX: none), and the window
  // kernels that may read and write blocks.
  uint32_t* step_of = tj_alloc(al, sizeof(uint32_t) * (fu->num_groups + 1));
  bool* cand = tj_alloc(al, sizeof(bool) * nk);
  if (!step_of || !cand) {
    tj_free(al, step_of, sizeof(uint32_t) * (fu->num_groups + 1));
    tj_free(al, cand, sizeof(bool) * nk);
    return tj_status_oom();
  }
  for (uint32_t gi = 0; gi < fu->num_groups; ++gi) step_of[gi] = UINT32_MAX;
  for (uint32_t s = 0; s < rp->num_steps; ++s) {
    if (rp->steps[s].group < fu->num_groups) step_of[rp->steps[s].group] = s;
  }
  bool any = false;
  for (uint32_t i = 0; i < nk; ++i) {
    cand[i] = tj_kir_window_blocks(ks[i].kernel, w) &&
              one_output(ks[i].kernel) != TJ_KIR_NONE;
    any = any || cand[i];
  }
  // A candidate pool stays one while its output may be blocked and so may
  // its x: written by a conv that stores blocks, or a candidate pool.
  for (bool changed = any; changed;) {
    changed = false;
    for (uint32_t j = 0; j < nk; ++j) {
      if (!cand[j]) continue;
      const tj_kir_t* kj = ks[j].kernel;
      uint32_t step, xv = UINT32_MAX;
      bool ok = nchwc_value_ok(rp, step_of, ks, nk, cand, w, j, one_output(kj),
                               &step);
      for (uint32_t b = 0; b < kj->num_buffers; ++b) {
        if (kj->buffers[b].role == TJ_KIR_CONV_X) xv = ks[j].buffer_nodes[b];
      }
      bool made = false;
      for (uint32_t i = 0; i < nk && ok && !made; ++i) {
        const tj_kir_t* k = ks[i].kernel;
        const uint32_t ob = one_output(k);
        if (ob == TJ_KIR_NONE || ks[i].buffer_nodes[ob] != xv) continue;
        made = (nchwc_conv(k, w, NCHWC_OUT, 0) || nchwc_sums_out(k, w) ||
                cand[i]) &&
               nchwc_value_ok(rp, step_of, ks, nk, cand, w, i, ob, &step);
      }
      if (!ok || !made) {
        cand[j] = false;
        changed = true;
      }
    }
  }
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < nk; ++i) {
    tj_kir_t* k = ks[i].kernel;
    if (!nchwc_conv(k, w, NCHWC_OUT, 0) && !nchwc_sums_out(k, w) && !cand[i])
      continue;
    const uint32_t ob = one_output(k);
    uint32_t step;
    if (ob == TJ_KIR_NONE ||
        !nchwc_value_ok(rp, step_of, ks, nk, cand, w, i, ob, &step))
      continue;
    const uint32_t val = ks[i].buffer_nodes[ob];
    nchwc_value_t* grown =
        tj_alloc(al, sizeof(nchwc_value_t) * (prog->num_blocked + 1));
    if (!grown) {
      status = tj_status_oom();
      break;
    }
    if (prog->blocked) {
      memcpy(grown, prog->blocked, sizeof(nchwc_value_t) * prog->num_blocked);
      tj_free(al, prog->blocked, sizeof(nchwc_value_t) * prog->num_blocked);
    }
    prog->blocked = grown;
    k->conv.yblock = w;
    const int64_t P = nchwc_strides(k, w, k->buffers[ob].strides);
    prog->blocked[prog->num_blocked++] =
        (nchwc_value_t){val, step, k->dims[1].value, P, w};
    for (uint32_t j = 0; j < nk; ++j) {
      tj_kir_t* kj = ks[j].kernel;
      for (uint32_t b = 0; b < kj->num_buffers; ++b) {
        if (ks[j].buffer_nodes[b] != val || (j == i && b == ob)) continue;
        if (kj->buffers[b].role == TJ_KIR_CONV_X) {
          kj->conv.xblock = w;
        } else {
          kj->conv.inblock |= 1u << b;
          nchwc_strides(kj, w, kj->buffers[b].strides);
        }
      }
    }
  }
  tj_free(al, step_of, sizeof(uint32_t) * (fu->num_groups + 1));
  tj_free(al, cand, sizeof(bool) * nk);
  if (status) return status;
  // Region compile: a kernel whose layouts now differ from those of the
  // kernel it shares code with compiles on its own. Only a blocked value
  // changes kernels here; with none, every copy is as lowering made it
  // (46 full compares of a 24-layer stack's kernels otherwise).
  if (prog->num_blocked == 0) return NULL;
  for (uint32_t i = 0; i < nk; ++i) {
    const tj_kir_t* src = ks[i].code_of;
    if (src && !tj_kir_same_code(src, ks[i].kernel)) ks[i].code_of = NULL;
  }
  return NULL;
}

// r18c (issue 15): a strided conv takes the ocvec variant
// (tj_kir_conv_ocvec_rule: resnet's stem, 7x7/2 3-64, and its 3x3/2s)
// for the store of its output in NCHWc blocks (yblock: each pixel's
// channel vector straight from the tiles, no transpose); where
// nchwc_assign left that output row-major, the transposed channel-row
// store makes ocvec the slower variant (the stem 168.6 ms against 120.0
// shifted at batch 32, bench/RESULTS.md, r18), so the kernel goes back to
// the variant it would take without the mark: its weight laid out again
// and its units balanced again. TJ_X86_CONV=ocvec keeps the mark.
static tj_status_t settle_strided_ocvec(const target_t* t, program_t* p,
                                        const tj_graph_t* g,
                                        tj_lowered_kernel_t* ks, uint32_t nk) {
  const char* v = tj_setting(t->config.context, TJ_SETTING_X86_CONV);
  if (v && strcmp(v, "ocvec") == 0) return NULL;
  bool any = false;
  for (uint32_t i = 0; i < nk; ++i) {
    tj_kir_t* k = ks[i].kernel;
    const tj_kir_conv_t* cv = &k->conv;
    if (k->kind != TJ_KIR_CONV || !cv->ocvec || cv->yblock ||
        (cv->stride[1] == 1 && cv->stride[2] == 1) || !p->prepacked ||
        !p->prepacked[i].raw)
      continue;
    prepacked_t* pp = &p->prepacked[i];
    tj_free(t->config.allocator, pp->raw, pp->bytes);
    memset(pp, 0, sizeof(*pp));
    k->b_prepacked = false;
    k->conv.ocvec = false;
    k->schedule.mc = k->schedule.nc = k->schedule.kc = 0;
    TJ_RETURN_IF_ERROR(prepack_conv_one(t, p, g, ks, nk, i, false));
    balance_conv_units(t, ks + i, 1);
    any = true;
  }
  // As at nchwc_assign's end: a kernel that now differs from the one it
  // shares code with compiles on its own.
  for (uint32_t i = 0; any && i < nk; ++i) {
    const tj_kir_t* src = ks[i].code_of;
    if (src && !tj_kir_same_code(src, ks[i].kernel)) ks[i].code_of = NULL;
  }
  return NULL;
}

static tj_status_t x86_compile(void* target, tj_lowered_program_t* lp,
                               void** out_program) {
  target_t* t = target;
  *out_program = NULL;
  tj_lowered_kernel_t* kernels = lp->kernels;
  lp->kernels = NULL;
  uint32_t nk = lp->plan->num_kernels;
  // The context's JIT, created by the first x86 compile of the context
  // (after the middle end: a graph it refuses costs no JIT).
  tj_status_t status = NULL;
  if (!t->jit) {
    status = tj_x86_runtime_get(t->config.context, &t->runtime);
    if (!status) t->jit = tj_x86_runtime_jit(t->runtime);
  }
  program_t* p = status ? NULL : tj_alloc(t->config.allocator, sizeof(*p));
  if (!p) {
    tj_run_plan_free_kernels(t->config.allocator, kernels, nk);
    return status ? status : tj_status_oom();
  }
  memset(p, 0, sizeof(*p));
  p->generic = lp->sym == NULL;
  if (p->generic) {
    t->plan = lp->plan;
    tj_disk_cache_open(t->config.context, t->config.options->cache_dir,
                       t->cache_dir, sizeof(t->cache_dir));
  }
  balance_gemm_units(t, kernels, nk);
  status = prepack_gemm_b(t, p, lp->plan->graph, kernels, nk);
  if (!status) status = prepack_conv_w(t, p, lp->plan->graph, kernels, nk);
  if (!status) balance_conv_units(t, kernels, nk);
  if (!status) status = nchwc_assign(t, p, lp->plan, kernels, nk);
  if (!status)
    status = settle_strided_ocvec(t, p, lp->plan->graph, kernels, nk);
  if (status) {
    tj_run_plan_free_kernels(t->config.allocator, kernels, nk);
    x86_release(t, p);
    return status;
  }
  // The GEMM kernels' small-M paths are compiled when a run first takes
  // them (x86_backend.h): most runs never do. The set owns |kernels| now.
  status = tj_x86_kernel_set_build_lazy(
      t->jit, t->config.allocator, t->config.context, t->cache_dir, kernels, nk,
      lp->plan->graph->name, t->log_cache, &p->set);
  if (!status) {
    account_set(t, &p->set, lp);
    if (p->generic) status = finish_generic(t, p);
    if (!status) dump_kernels(t, p, p->generic ? NULL : lp->label);
  }
  if (status) {
    x86_release(t, p);
    return status;
  }
  *out_program = p;
  return NULL;
}

//===--- running ---===//

// After a host call set data-dependent symbols (|sym|), the scalars and
// launches of the kernels of the steps after step |after| again. Memory
// stays as planned for the upper bounds, which hold every actual size.
static tj_status_t prepare_after(target_t* t, program_t* p, frame_t* f,
                                 const int64_t* sym, uint32_t after,
                                 int64_t scratch_bytes) {
  const tj_run_plan_t* rp = t->plan;
  const tj_x86_kernel_set_t* set = &p->set;
  for (uint32_t s = after + 1; s < rp->num_steps; ++s) {
    const tj_run_step_t* step = &rp->steps[s];
    if (step->kind != TJ_RUN_STEP_KERNELS) continue;
    for (uint32_t k = step->first_kernel;
         k < step->first_kernel + step->num_kernels; ++k) {
      int64_t* scalars = f->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
      TJ_RETURN_IF_ERROR(
          tj_lowered_kernel_scalars(&set->kernels[k], rp->graph, sym, scalars));
      tj_x86_launch_t* l = &f->launches[k];
      TJ_RETURN_IF_ERROR(tj_x86_launch_prepare(
          &t->runner, set->kernels[k].kernel, scalars, l));
      int64_t need = l->slot_bytes * l->slots;
      if (p->tuner) {
        int64_t tuned = tj_x86_tuner_scratch(p->tuner, k, scalars);
        if (tuned > need) need = tuned;
      }
      if (need > scratch_bytes)
        return tj_internal(
            "kernel %u needs %lld bytes of scratch under the actual "
            "data-dependent sizes, more than the %lld of their bounds",
            k, (long long)need, (long long)scratch_bytes);
    }
  }
  return NULL;
}

// |tm| (NULL on the plain path) gets each kernel's, host step's and copy's
// time (tj_executable_profile): a monotonic clock around each launch,
// which returns when the parallel region is done.
// Value |v| of an observed run, in place between its blocked layout and
// row-major (|to_plain|) through a copy from the allocator.
static tj_status_t nchwc_relayout(const target_t* t, const nchwc_value_t* v,
                                  int64_t n, float* data, bool to_plain) {
  const int64_t count = n * v->c * v->p;
  if (count == 0 || !data) return NULL;
  float* tmp = tj_alloc(t->config.allocator, sizeof(float) * (size_t)count);
  if (!tmp) return tj_status_oom();
  memcpy(tmp, data, sizeof(float) * (size_t)count);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < v->c; ++c) {
      for (int64_t q = 0; q < v->p; ++q) {
        const int64_t plain = (i * v->c + c) * v->p + q;
        const int64_t blocked =
            ((i * v->c / v->lanes + c / v->lanes) * v->p + q) * v->lanes +
            c % v->lanes;
        if (to_plain) {
          data[plain] = tmp[blocked];
        } else {
          data[blocked] = tmp[plain];
        }
      }
    }
  }
  tj_free(t->config.allocator, tmp, sizeof(float) * (size_t)count);
  return NULL;
}

// The values step |s| wrote blocked, relaid in place: to row-major
// (|to_rows|) or back to blocked.
static tj_status_t relayout_step(const target_t* t, const program_t* p,
                                 const int64_t* sym, frame_t* f, uint32_t s,
                                 bool to_rows) {
  const tj_graph_t* g = t->plan->graph;
  for (uint32_t b = 0; b < p->num_blocked; ++b) {
    const nchwc_value_t* v = &p->blocked[b];
    if (v->step != s) continue;
    int64_t n;
    TJ_RETURN_IF_ERROR(
        tj_dim_eval(&g->dims, g->nodes[v->node].dims[0], sym, &n));
    TJ_RETURN_IF_ERROR(
        nchwc_relayout(t, v, n, (float*)f->loc[v->node], to_rows));
  }
  return NULL;
}

// An observed run's observer after step |s|: the values held blocked that
// the step wrote are shown to it row-major (as the observer's contract
// says every value is), and blocked again for their readers.
static tj_status_t observe_step(const target_t* t, const program_t* p,
                                const int64_t* sym, frame_t* f, uint32_t s,
                                tj_step_observer_fn observe, void* user) {
  TJ_RETURN_IF_ERROR(relayout_step(t, p, sym, f, s, true));
  TJ_RETURN_IF_ERROR(observe(user, s, f->loc));
  return relayout_step(t, p, sym, f, s, false);
}

static tj_status_t run_frame(target_t* t, program_t* p, const int64_t* sym,
                             const tj_tensor_t* inputs,
                             const tj_tensor_t* outputs, frame_t* f,
                             tj_run_timing_t* tm, tj_step_observer_fn observe,
                             void* user) {
  double t_start = tm ? tj_now_ms() : 0, t_copy = 0;
  const tj_run_plan_t* rp = t->plan;
  const tj_graph_t* g = rp->graph;
  const tj_memplan_t* mp = rp->memplan;
  const tj_x86_kernel_set_t* set = &p->set;
  // Data-dependent symbols (custom ops) are set during the run: a copy.
  int64_t dsym[TJ_MAX_SYMBOLS];
  bool dynamic = tj_custom_graph_is_dynamic(g);
  if (dynamic) {
    memcpy(dsym, sym, sizeof(dsym));
    sym = dsym;
  }
  // 1. Where everything goes: the plan's slots, staging, kernel scratch.
  int64_t arena_bytes;
  TJ_RETURN_IF_ERROR(
      tj_memplan_evaluate(mp, g, sym, f->slot_offsets, &arena_bytes));
  int64_t total = align_up(arena_bytes, 64);
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    f->stage[i] = -1;
    if (tj_host_tensor_dense(&inputs[i])) continue;
    const tj_node_t* n = &g->nodes[g->inputs[i]];
    f->stage[i] = total;
    total += align_up(tj_host_numel(n->rank, inputs[i].shape) *
                          (int64_t)tj_dtype_size(n->dtype),
                      64);
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    int64_t* st = &f->stage[g->num_inputs + i];
    *st = -1;
    uint32_t node = g->outputs[i].node;
    uint32_t bi = mp->buffer_of[node];
    if (rp->first_output[node] != (int32_t)i || bi == UINT32_MAX ||
        mp->buffers[bi].kind != TJ_BUFFER_OUTPUT ||
        tj_host_tensor_dense(&outputs[i])) {
      continue;
    }
    const tj_node_t* n = &g->nodes[node];
    *st = total;
    total += align_up(tj_host_numel(n->rank, outputs[i].shape) *
                          (int64_t)tj_dtype_size(n->dtype),
                      64);
  }
  int64_t scratch_bytes = 0;
  for (uint32_t k = 0; k < set->num_kernels; ++k) {
    int64_t* scalars = f->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
    TJ_RETURN_IF_ERROR(
        tj_lowered_kernel_scalars(&set->kernels[k], g, sym, scalars));
    tj_x86_launch_t* l = &f->launches[k];
    TJ_RETURN_IF_ERROR(
        tj_x86_launch_prepare(&t->runner, set->kernels[k].kernel, scalars, l));
    int64_t need = l->slot_bytes * l->slots;
    if (p->tuner) {
      int64_t tuned = tj_x86_tuner_scratch(p->tuner, k, scalars);
      if (tuned > need) need = tuned;
    }
    if (need > scratch_bytes) scratch_bytes = need;
  }
  int64_t scratch_offset = total;
  total += scratch_bytes;
  TJ_RETURN_IF_ERROR(frame_reserve(t, f, total));
  unsigned char* base = f->base;
  // 2. Storage of every value in memory (an alias after its root).
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    unsigned char* ptr = NULL;
    switch (buf->kind) {
      case TJ_BUFFER_EXTERNAL:
        ptr = n->op == TJ_OP_CONSTANT ? (unsigned char*)n->attrs.data : NULL;
        break;
      case TJ_BUFFER_OUTPUT: {
        int32_t o = rp->first_output[buf->node];
        int64_t st = f->stage[g->num_inputs + (uint32_t)o];
        ptr = st >= 0 ? tj_host_byte_at(base, st)
                      : tj_host_tensor_data(&outputs[o]);
        break;
      }
      case TJ_BUFFER_ARENA:
        ptr = tj_host_byte_at(base, f->slot_offsets[buf->slot]);
        break;
      case TJ_BUFFER_ALIAS:
        ptr = f->loc[buf->alias_of];
        break;
    }
    f->loc[buf->node] = ptr;
  }
  if (tm) t_copy = tj_now_ms();
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* in = &inputs[i];
    uint32_t node = g->inputs[i];
    if (f->stage[i] < 0) {
      f->loc[node] = tj_host_tensor_data(in);
      continue;
    }
    f->loc[node] = tj_host_byte_at(base, f->stage[i]);
    tj_host_copy_strided(f->loc[node], NULL, tj_host_tensor_data(in),
                         in->strides, in->rank, in->shape,
                         tj_dtype_size(in->dtype));
  }
  if (tm) {
    double now = tj_now_ms();
    tm->copy_ms += now - t_copy;
    tm->setup_ms += t_copy - t_start;
    t_start = now;
  }
  // Aliases of inputs (reshaped graph inputs) follow their roots.
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    if (buf->kind == TJ_BUFFER_ALIAS) f->loc[buf->node] = f->loc[buf->alias_of];
  }
  // 3. The steps.
  unsigned char* scratch = tj_host_byte_at(base, scratch_offset);
  uint32_t host_index = 0;  // HOST steps so far
  for (uint32_t s = 0; s < rp->num_steps; ++s) {
    const tj_run_step_t* step = &rp->steps[s];
    for (uint32_t k = step->first_kernel;
         step->kind == TJ_RUN_STEP_KERNELS &&
         k < step->first_kernel + step->num_kernels;
         ++k) {
      const tj_lowered_kernel_t* low = &set->kernels[k];
      void* buffers[TJ_KIR_MAX_BUFFERS];
      for (uint32_t b = 0; b < low->num_buffers; ++b) {
        uint32_t node = low->buffer_nodes[b];
        int64_t off;
        TJ_RETURN_IF_ERROR(tj_lowered_kernel_buffer_offset(low, b, sym, &off));
        buffers[b] = tj_host_byte_at(
            f->loc[node], off * (int64_t)tj_dtype_size(g->nodes[node].dtype));
      }
      if (p->prepacked && p->prepacked[k].data) {
        buffers[p->prepacked[k].buffer] = p->prepacked[k].data;
      }
      const int64_t* scalars = f->scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
      if (tm) {
        tm->setup_ms += tj_now_ms() - t_start;
        t_start = tj_now_ms();
      }
      if (tj_x86_tuner_handles(p->tuner, k)) {
        TJ_RETURN_IF_ERROR(tj_x86_tuner_run(p->tuner, k, &f->launches[k],
                                            buffers, scalars, scratch,
                                            scratch_bytes));
      } else {
        tj_x86_launch_run(&t->runner, &f->launches[k], set->fns[k], buffers,
                          scalars, scratch);
      }
      if (tm) {
        double now = tj_now_ms();
        tj_run_kernel_timing_t* kt = &tm->kernels[k];
        kt->ms += now - t_start;
        t_start = now;
        kt->name = low->kernel->name;
        kt->kind = low->kernel->kind;
        if (f->launches[k].units > 0) {
          double bytes, flops;
          tj_kernel_traffic(low->kernel, scalars, &bytes, &flops);
          kt->bytes += bytes;
          kt->flops += flops;
          ++kt->launches;
        }
      }
      // A deferred path that could not be built was skipped: say so.
      TJ_RETURN_IF_ERROR(tj_x86_kernel_set_take_error(set));
    }
    if (step->kind == TJ_RUN_STEP_HOST) {
      if (tm) {
        tm->setup_ms += tj_now_ms() - t_start;
        t_start = tj_now_ms();
      }
      tj_host_parallel_t par = tj_x86_runner_parallel(&t->runner);
      if (dynamic) {
        TJ_RETURN_IF_ERROR(tj_host_step_run_dynamic(
            g, rp->allocator, &step->host, dsym, inputs, f->loc, &par));
        if (step->host.call)
          TJ_RETURN_IF_ERROR(prepare_after(t, p, f, dsym, s, scratch_bytes));
      } else {
        TJ_RETURN_IF_ERROR(tj_host_step_run(g, rp->allocator, &step->host, sym,
                                            inputs, f->loc, &par));
      }
      if (tm) {
        double now = tj_now_ms();
        tm->host_ms[host_index++] += now - t_start;
        t_start = now;
      }
    }
    if (observe)
      TJ_RETURN_IF_ERROR(observe_step(t, p, sym, f, s, observe, user));
  }
  if (tm) tm->setup_ms += tj_now_ms() - t_start;
  // Outputs with data-dependent dims (tj_executable_run_shaped): their
  // actual shapes, which the copies below follow.
  if (dynamic)
    TJ_RETURN_IF_ERROR(tj_custom_write_output_shapes(g, sym, outputs));
  // 4. Outputs not written in place: staged, duplicated, or inputs and
  // constants returned as outputs.
  if (tm) t_copy = tj_now_ms();
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t node = g->outputs[i].node;
    uint32_t bi = mp->buffer_of[node];
    bool direct = rp->first_output[node] == (int32_t)i && bi != UINT32_MAX &&
                  mp->buffers[bi].kind == TJ_BUFFER_OUTPUT &&
                  f->stage[g->num_inputs + i] < 0;
    if (direct) continue;
    const tj_tensor_t* out = &outputs[i];
    tj_host_copy_strided(tj_host_tensor_data(out), out->strides, f->loc[node],
                         NULL, out->rank, out->shape,
                         tj_dtype_size(out->dtype));
  }
  if (tm) tm->copy_ms += tj_now_ms() - t_copy;
  return NULL;
}

static tj_status_t x86_run_timed(void* target, void* program,
                                 const int64_t* sym, const tj_tensor_t* inputs,
                                 int32_t num_inputs, const tj_tensor_t* outputs,
                                 int32_t num_outputs, tj_run_timing_t* timing) {
  (void)num_inputs;
  (void)num_outputs;
  target_t* t = target;
  frame_t* f = NULL;
  bool temp = false;
  double start = timing ? tj_now_ms() : 0;
  TJ_RETURN_IF_ERROR(frame_acquire(t, &f, &temp));
  if (timing) timing->setup_ms += tj_now_ms() - start;
  tj_status_t status =
      run_frame(t, program, sym, inputs, outputs, f, timing, NULL, NULL);
  frame_release(t, f, temp);
  return status;
}

static tj_status_t x86_run(void* target, void* program, const int64_t* sym,
                           const tj_tensor_t* inputs, int32_t num_inputs,
                           const tj_tensor_t* outputs, int32_t num_outputs) {
  return x86_run_timed(target, program, sym, inputs, num_inputs, outputs,
                       num_outputs, NULL);
}

static tj_status_t x86_run_observed(
    void* target, void* program, const int64_t* sym, const tj_tensor_t* inputs,
    int32_t num_inputs, const tj_tensor_t* outputs, int32_t num_outputs,
    tj_step_observer_fn observe, void* user) {
  (void)num_inputs;
  (void)num_outputs;
  target_t* t = target;
  frame_t* f = NULL;
  bool temp = false;
  TJ_RETURN_IF_ERROR(frame_acquire(t, &f, &temp));
  tj_status_t status =
      run_frame(t, program, sym, inputs, outputs, f, NULL, observe, user);
  frame_release(t, f, temp);
  return status;
}

// The deferred code: waits for the background build or builds it here.
static tj_status_t x86_prepare(void* target, void* program) {
  const program_t* p = program;
  return tj_x86_kernel_set_build_cold(&p->set);
}

// dwbw (issue 15): a depthwise conv (groups = C, one input channel a
// group) and max/avg pools, f32 with every size but the batch a constant,
// run as the CONV template's direct window kernel (kir/lower_window.c,
// jit/emit_window.c): one kernel reading x's rows in place, its pads as
// masked lanes, instead of a pointwise kernel per pad box. Others (lp_pool,
// f16/bf16, symbolic spatial sizes) decompose.
static bool native_window(const tj_graph_t* g, const tj_node_t* n) {
  return tj_window_direct(g, (uint32_t)(n - g->nodes), 0);
}

// Issue 14: attention runs as one flash-attention kernel (the ATTENTION
// template, kir/lower_attention.c, jit/emit_attention.c) when its inputs
// are f32, f16 or bf16, its rank fits the kernel IR's space and the query
// heads are a constant multiple of the kv heads (else it decomposes).
//
// qfold (issue 17): a dequantize of constant weights whose every user is
// a matmul reading it as B (f32 A) stays whole (tj_quant_gemm_weight):
// the GEMM reads the quantized bytes and dequantizes them in registers
// (kir/lower_gemm.c, jit/emit_gemm.c).
static bool x86_native_op(const tj_graph_t* g, uint32_t node) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op == TJ_OP_DEQUANTIZE) return tj_quant_gemm_weight(g, node, false);
  // lastbreak (issue 15): argtopk's native host kernel, not decompose's k
  // selection passes, on rows past 256 with k > 4 (5 to 16: at [8, 50257],
  // k = 8, 0.98 ms of selection passes against 0.32 of the host kernel;
  // at k = 4 they are even; bench/RESULTS.md).
  if (n->op == TJ_OP_ARGTOPK) {
    const tj_node_t* x = &g->nodes[n->operands[0]];
    int64_t len = x->dims[n->attrs.axis], k = n->attrs.ints[0];
    return tj_dim_is_const(len) && len > 256 && k > 4 &&
           tj_host_topk_takes(x->dtype);
  }
  // issue 15: lib/window.h says which convs the CONV template keeps
  // (tj_window_conv_whole, shared with CUDA; here grouped ones too, a GEMM
  // a group); dwbw's window variant keeps depthwise convs and max/avg
  // pools.
  if (n->op == TJ_OP_CONV)
    return tj_window_conv_whole(g, node, true) || native_window(g, n);
  if (n->op == TJ_OP_MAX_POOL || n->op == TJ_OP_AVG_POOL)
    return native_window(g, n);
  if (n->op != TJ_OP_ATTENTION || n->rank < 3 || n->rank > 7) return false;
  const tj_node_t* q = &g->nodes[n->operands[0]];
  const tj_node_t* k = &g->nodes[n->operands[1]];
  const tj_node_t* v = &g->nodes[n->operands[2]];
  tj_dtype_t dt = q->dtype;
  if ((dt != TJ_DTYPE_F32 && dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16) ||
      k->dtype != dt || v->dtype != dt || q->rank != n->rank || k->rank < 3 ||
      v->rank < 3) {
    return false;
  }
  int64_t h = q->dims[q->rank - 3], hkv = k->dims[k->rank - 3];
  return h == hkv || (h >= 0 && hkv > 0 && h % hkv == 0);
}

const tj_backend_t tj_backend_x86 = {
    .name = "x86",
    .target_size = sizeof(target_t),
    .lowers = true,
    .device_tensors = false,
    .native_op = x86_native_op,
    .conv_epilogue = true,
    .open = x86_open,
    .accept = NULL,
    .compile = x86_compile,
    .run = x86_run,
    .run_observed = x86_run_observed,
    .prepare = x86_prepare,
    .release = x86_release,
    .close = x86_close,
    .run_timed = x86_run_timed,
    .trim = x86_trim,
};

tj_x86_tuner_t* tj_x86_backend_tuner(const void* program) {
  return program ? ((const program_t*)program)->tuner : NULL;
}
