// The x86 GEMM autotuner. See gemm_tune.h.
//
// Decisions are read without locks on every run: each GEMM kernel has a
// small append-only table of (bucket, N, K, batch) -> candidate, published
// by an atomic count. Deciding (and building the variants) happens under
// the tuner's mutex; a run that finds it taken by another thread's tuning
// does not wait: it runs the generated kernel, which is always valid. In
// background mode the deciding is the context worker's job (see "background
// tuning" below), and runs only take |pending_mutex|, briefly, to queue it.

#include "backends/x86/gemm_tune.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backends/x86/openblas.h"
#include "jit/autotune.h"
#include "lib/background.h"
#include "lib/env.h"
#include "lib/dtype.h"

#define MAX_DECISIONS 32

typedef enum cand_kind_e {
  CAND_GENERATED = 0,  // the generic set's kernel
  CAND_VARIANT = 1,    // a generated kernel with another schedule
  CAND_OPENBLAS = 2,   // cblas_sgemm + the epilogue as a pointwise kernel
} cand_kind_t;

typedef struct candidate_t {
  cand_kind_t kind;
  char name[64];
  bool available;
  char why[288];                    // why not available
  tj_kir_gemm_schedule_t schedule;  // CAND_VARIANT: as requested
  uint32_t set_index;  // CAND_VARIANT / CAND_OPENBLAS: kernel in |variants|
} candidate_t;

typedef struct tune_key_t {
  int64_t m, bucket, n, k, batch;
} tune_key_t;

typedef struct decision_t {
  int64_t bucket, n, k, batch;
  int32_t winner;
  bool background;         // published by a background job
  atomic_bool swapped_in;  // a run has served it (logged once)
} decision_t;

typedef struct entry_t {
  uint32_t kernel;  // in the generic set
  int32_t num_candidates;
  candidate_t cands[TJ_X86_TUNER_MAX_CANDIDATES];
  // The OpenBLAS epilogue kernel's extra params: the strides of its dense
  // [batch.., M, N] input that are not constants, one per dim listed.
  uint32_t num_acc_params;
  int32_t acc_param_dim[TJ_KIR_MAX_RANK];
  char* text;  // the generic kernel's text (part of the decision key)
  size_t text_bytes;
  decision_t decisions[MAX_DECISIONS];
  _Atomic uint32_t num_decisions;
  // Background mode: the keys queued and not yet decided, under
  // |pending_mutex| (a run only checks and appends, never waits on timing).
  tune_key_t pending[MAX_DECISIONS];
  uint32_t num_pending;
  int32_t forced;  // -1: none
  bool full_logged;
} entry_t;

struct tj_x86_tuner_t {
  tj_x86_jit_t* jit;
  tj_allocator_t allocator;
  tj_context_t* context;
  char cache_dir[1024];
  const tj_x86_kernel_set_t* set;
  const tj_x86_runner_t* runner;
  int32_t budget_ms;
  bool log;
  bool background;  // TJ_AUTOTUNE_BACKGROUND
  char graph_name[128];
  const tj_openblas_t* blas;
  uint32_t num_entries;
  entry_t* entries;
  int32_t* entry_of;  // per kernel of the set: entry or -1
  pthread_mutex_t mutex;
  pthread_mutex_t pending_mutex;  // entries' |pending|
  tj_x86_kernel_set_t variants;
  _Atomic bool variants_ready;
  bool variants_tried;
  atomic_llong tunings, cached, variant_builds, openblas_runs, variant_runs;
  atomic_llong jobs_queued, jobs_done, jobs_failed;
};

static int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

//===--- kernel IR copies ---===//

// A copy of GEMM |src| named |name|: with schedule |schedule| (GEMM), or
// with |epilogue_only| as a POINTWISE kernel over the same space whose ACC
// is a load of an extra input buffer (f32, dense [batch.., M, N]; its
// strides that are not constants become extra params, listed in |entry|).
static tj_status_t clone_gemm(const tj_kir_t* src, const char* name,
                              const tj_kir_gemm_schedule_t* schedule,
                              bool epilogue_only, entry_t* entry,
                              tj_kir_t** out) {
  *out = NULL;
  tj_kir_t* k;
  TJ_RETURN_IF_ERROR(
      tj_kir_create(src->allocator,
                    epilogue_only ? TJ_KIR_POINTWISE : TJ_KIR_GEMM, name, &k));
  for (uint32_t p = 0; p < src->num_params; ++p) {
    tj_kir_add_param(k, src->param_names[p]);
  }
  tj_kir_set_space(k, src->rank, src->dims);
  for (uint32_t b = 0; b < src->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &src->buffers[b];
    tj_kir_role_t role = buf->role;
    if (epilogue_only &&
        (role == TJ_KIR_GEMM_A || role == TJ_KIR_GEMM_B ||
         role == TJ_KIR_GEMM_BSCALE || role == TJ_KIR_GEMM_BZERO)) {
      role = TJ_KIR_INPUT;  // unused: keeps the buffer slots in place
    }
    tj_kir_add_buffer(k, buf->name, buf->dtype, role, buf->strides);
  }
  uint32_t acc_buf = TJ_KIR_NONE;
  if (epilogue_only) {
    tj_kir_ival_t strides[TJ_KIR_MAX_RANK];
    entry->num_acc_params = 0;
    int64_t run = 1;
    bool constant = true;
    for (int32_t d = src->rank - 1; d >= 0; --d) {
      if (constant) {
        strides[d] = tj_kir_constant(run);
      } else {
        char pname[32];
        snprintf(pname, sizeof(pname), "tj_acc_stride%d", (int)d);
        strides[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
        entry->acc_param_dim[entry->num_acc_params++] = d;
      }
      tj_kir_ival_t dim = src->dims[d];
      if (dim.param >= 0) {
        constant = false;
      } else {
        run *= dim.value;
      }
    }
    acc_buf =
        tj_kir_add_buffer(k, "tj_acc", TJ_DTYPE_F32, TJ_KIR_INPUT, strides);
  } else {
    tj_kir_set_gemm(k, src->gemm_k, schedule);
    k->allow_half_gemm = src->allow_half_gemm;
    k->bq = src->bq;  // qfold: a quantized B stays quantized
  }
  const tj_kir_phase_t* ph = &src->phases[0];
  tj_allocator_t al = src->allocator;
  uint32_t* map = tj_alloc(al, sizeof(uint32_t) * (ph->num_insts + 1));
  if (!map) {
    tj_kir_destroy(k);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    uint32_t a0 = in->num_args > 0 ? map[in->args[0]] : 0;
    uint32_t a1 = in->num_args > 1 ? map[in->args[1]] : 0;
    uint32_t a2 = in->num_args > 2 ? map[in->args[2]] : 0;
    uint32_t v = TJ_KIR_NONE;
    switch (in->kind) {
      case TJ_KIR_LOAD:
        v = tj_kir_load(k, in->ref);
        break;
      case TJ_KIR_LOAD_AT:
        v = tj_kir_load_at(k, in->ref, a0);
        break;
      case TJ_KIR_CONST:
        v = tj_dtype_is_float(in->dtype)
                ? tj_kir_const_float(k, in->dtype, in->fvalue)
                : tj_kir_const_int(k, in->dtype, in->ivalue);
        break;
      case TJ_KIR_PARAM:
        v = tj_kir_param(k, in->ref);
        break;
      case TJ_KIR_INDEX:
        v = tj_kir_index(k, in->ref);
        break;
      case TJ_KIR_ACC:
        v = epilogue_only ? tj_kir_load(k, acc_buf) : tj_kir_acc(k);
        break;
      case TJ_KIR_OP:
        if (in->op == TJ_OP_CAST) {
          v = tj_kir_cast(k, in->dtype, a0);
        } else if (in->op == TJ_OP_WHERE) {
          v = tj_kir_where(k, a0, a1, a2);
        } else if (in->num_args == 1) {
          v = tj_kir_unary(k, in->op, a0);
        } else {
          v = tj_kir_binary(k, in->op, a0, a1);
        }
        break;
      case TJ_KIR_STORE:
        tj_kir_store(k, in->ref, a0);
        break;
      case TJ_KIR_ROW:
      case TJ_KIR_YIELD:
      case TJ_KIR_STORE_AT:
        break;  // not in a GEMM epilogue (finalize rejected them)
    }
    map[i] = v;
  }
  tj_free(al, map, sizeof(uint32_t) * (ph->num_insts + 1));
  tj_status_t status = tj_kir_finalize(k);
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  *out = k;
  return NULL;
}

//===--- problems ---===//

static void problem_key(const tj_kir_t* k, const int64_t* scalars,
                        tune_key_t* out) {
  const int32_t r = k->rank;
  out->batch = 1;
  for (int32_t d = 0; d + 2 < r; ++d) {
    out->batch *= tj_kir_ival_eval(k->dims[d], scalars);
  }
  out->m = tj_kir_ival_eval(k->dims[r - 2], scalars);
  out->n = tj_kir_ival_eval(k->dims[r - 1], scalars);
  out->k = tj_kir_ival_eval(k->gemm_k, scalars);
  out->bucket = tj_pow2_bucket(out->m);
}

// Whether (bucket, n, k, batch) is |key|'s decision key (M is bucketed).
static bool same_key(int64_t bucket, int64_t n, int64_t k, int64_t batch,
                     const tune_key_t* key) {
  return bucket == key->bucket && n == key->n && k == key->k &&
         batch == key->batch;
}

static const decision_t* find_decision(const entry_t* e,
                                       const tune_key_t* key) {
  uint32_t n = atomic_load_explicit(&e->num_decisions, memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    const decision_t* d = &e->decisions[i];
    if (same_key(d->bucket, d->n, d->k, d->batch, key)) return d;
  }
  return NULL;
}

static const tj_kir_t* generic_kernel(const tj_x86_tuner_t* t,
                                      const entry_t* e) {
  return t->set->kernels[e->kernel].kernel;
}

//===--- creation ---===//

static void schedule_name(const tj_kir_gemm_schedule_t* s, char* buf,
                          size_t size) {
  snprintf(buf, size, "jit %dx%d nc%d kc%d", s->tile_m, s->tile_n, s->nc,
           s->kc);
}

static bool same_schedule(const tj_kir_gemm_schedule_t* a,
                          const tj_kir_gemm_schedule_t* b) {
  return a->tile_m == b->tile_m && a->tile_n == b->tile_n && a->mc == b->mc &&
         a->nc == b->nc && a->kc == b->kc;
}

static tj_status_t init_entry(tj_x86_tuner_t* t, const char* blas_why,
                              entry_t* e) {
  const tj_kir_t* k = generic_kernel(t, e);
  int32_t lanes = t->runner->lanes;
  e->forced = -1;
  atomic_init(&e->num_decisions, 0);
  char* text;
  TJ_RETURN_IF_ERROR(tj_kir_print(k, &text));
  e->text = text;
  e->text_bytes = strlen(text) + 1;
  // The generated kernel, OpenBLAS (timed early: a tight budget skips the
  // last candidates), then variants whose resolved schedule differs from
  // every earlier generated candidate's.
  tj_kir_gemm_schedule_t resolved[TJ_X86_TUNER_MAX_CANDIDATES];
  candidate_t* c = &e->cands[0];
  c->kind = CAND_GENERATED;
  c->available = true;
  tj_kir_gemm_resolve(k, lanes, &resolved[0]);
  schedule_name(&resolved[0], c->name, sizeof(c->name));
  e->num_candidates = 1;
  c = &e->cands[e->num_candidates++];
  c->kind = CAND_OPENBLAS;
  tj_dtype_t adt = TJ_DTYPE_F32;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A) adt = k->buffers[b].dtype;
  }
  snprintf(c->name, sizeof(c->name), "openblas %s + epilogue",
           adt == TJ_DTYPE_BF16 ? "sbgemm" : "sgemm");
  c->available = false;
  if (!t->blas) {
    snprintf(c->why, sizeof(c->why), "%s", blas_why);
  } else if (adt == TJ_DTYPE_F16) {
    snprintf(c->why, sizeof(c->why), "OpenBLAS has no f16 GEMM");
  } else if (adt == TJ_DTYPE_BF16 && !t->blas->sbgemm) {
    snprintf(c->why, sizeof(c->why),
             "%.200s exports no cblas_sbgemm (built without BUILD_BFLOAT16)",
             t->blas->name);
  } else if (t->runner->host_parallel_for) {
    snprintf(c->why, sizeof(c->why),
             "the host's parallel_for runs the work; OpenBLAS would use "
             "threads of its own");
  } else if (t->blas->get_num_threads &&
             t->blas->get_num_threads() != t->runner->threads) {
    snprintf(c->why, sizeof(c->why),
             "OpenBLAS runs %d threads, the executable %d",
             t->blas->get_num_threads(), (int)t->runner->threads);
  } else if (k->num_params + (uint32_t)k->rank > TJ_KIR_MAX_PARAMS ||
             k->num_buffers + 1 > TJ_KIR_MAX_BUFFERS) {
    snprintf(c->why, sizeof(c->why), "no room for the epilogue's operands");
  } else {
    c->available = true;
  }
  static const tj_kir_gemm_schedule_t kVariants[] = {
      {8, 32, 0, 0, 0},   // more rows, two vectors: Inductor's AVX-512 pick
      {0, 0, 0, 256, 0},  // wider packed B blocks: fewer packs per B byte
      {0, 0, 0, 0, 512},  // shorter K passes: the B block halves in L2
  };
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kVariants); ++v) {
    tj_kir_t probe = *k;  // a shallow copy, only read by resolve
    probe.schedule = kVariants[v];
    tj_kir_gemm_schedule_t rs;
    tj_kir_gemm_resolve(&probe, lanes, &rs);
    bool dup = false;
    for (int32_t i = 0; i < e->num_candidates; ++i) {
      dup = dup || (e->cands[i].kind != CAND_OPENBLAS &&
                    same_schedule(&rs, &resolved[i]));
    }
    bool k_known_small = k->gemm_k.param < 0 && k->gemm_k.value <= 512;
    if (dup || (kVariants[v].kc && k_known_small)) continue;
    c = &e->cands[e->num_candidates];
    resolved[e->num_candidates] = rs;
    c->kind = CAND_VARIANT;
    c->available = true;
    c->schedule = kVariants[v];
    schedule_name(&rs, c->name, sizeof(c->name));
    ++e->num_candidates;
  }
  return NULL;
}

// The GEMMs the tuner times. Not one whose B is prepacked (issue 17):
// its B buffer is the program's prepacked copy, which the variants (and
// OpenBLAS) cannot read.
static bool tunable(const tj_kir_t* k) {
  return k->kind == TJ_KIR_GEMM && !k->b_prepacked;
}

tj_status_t tj_x86_tuner_create(const tj_x86_tuner_config_t* config,
                                tj_x86_tuner_t** out) {
  *out = NULL;
  const tj_x86_kernel_set_t* set = config->set;
  uint32_t n = 0;
  for (uint32_t i = 0; i < set->num_kernels; ++i) {
    n += tunable(set->kernels[i].kernel);
  }
  if (n == 0) return NULL;
  tj_allocator_t al = config->allocator;
  tj_x86_tuner_t* t = tj_calloc(al, 1, sizeof(*t));
  if (!t) return tj_status_oom();
  t->jit = config->jit;
  t->allocator = al;
  t->context = config->context;
  snprintf(t->cache_dir, sizeof(t->cache_dir), "%s",
           config->cache_dir ? config->cache_dir : "");
  t->set = set;
  t->runner = config->runner;
  t->budget_ms = config->budget_ms > 0 ? config->budget_ms : 1;
  t->log = config->log;
  t->background = config->background;
  snprintf(t->graph_name, sizeof(t->graph_name), "%s",
           config->graph_name ? config->graph_name : "?");
  atomic_init(&t->variants_ready, false);
  atomic_init(&t->tunings, 0);
  atomic_init(&t->cached, 0);
  atomic_init(&t->variant_builds, 0);
  atomic_init(&t->openblas_runs, 0);
  atomic_init(&t->variant_runs, 0);
  atomic_init(&t->jobs_queued, 0);
  atomic_init(&t->jobs_done, 0);
  atomic_init(&t->jobs_failed, 0);
  if (pthread_mutex_init(&t->mutex, NULL) != 0) {
    tj_free(al, t, sizeof(*t));
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "autotune: pthread_mutex_init failed");
  }
  if (pthread_mutex_init(&t->pending_mutex, NULL) != 0) {
    pthread_mutex_destroy(&t->mutex);
    tj_free(al, t, sizeof(*t));
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "autotune: pthread_mutex_init failed");
  }
  char why[256];
  t->blas = tj_openblas_open(tj_setting(config->context, TJ_SETTING_OPENBLAS),
                             why, sizeof(why));
  t->entries = tj_calloc(al, n, sizeof(entry_t));
  t->entry_of = tj_alloc(al, sizeof(int32_t) * set->num_kernels);
  if (!t->entries || !t->entry_of) {
    tj_x86_tuner_destroy(t);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < set->num_kernels; ++i) {
    t->entry_of[i] = -1;
    if (!tunable(set->kernels[i].kernel)) continue;
    entry_t* e = &t->entries[t->num_entries];
    e->kernel = i;
    t->entry_of[i] = (int32_t)t->num_entries++;
    tj_status_t status = init_entry(t, why, e);
    if (status) {
      tj_x86_tuner_destroy(t);
      return status;
    }
    for (int32_t c = 0; t->log && c < e->num_candidates; ++c) {
      if (e->cands[c].available) continue;
      tj_context_diagnostic(t->context, TJ_SEVERITY_REMARK,
                            "autotune: @%s %s: candidate \"%s\" skipped: %s",
                            t->graph_name, set->kernels[i].kernel->name,
                            e->cands[c].name, e->cands[c].why);
    }
  }
  *out = t;
  return NULL;
}

void tj_x86_tuner_destroy(tj_x86_tuner_t* t) {
  if (!t) return;
  // Our queued jobs are dropped, a running one finishes first: no job
  // outlives the tuner, the kernel set and the runner it points at.
  if (t->background) tj_context_background_cancel(t->context, t);
  tj_allocator_t al = t->allocator;
  tj_x86_kernel_set_deinitialize(al, &t->variants);
  for (uint32_t i = 0; t->entries && i < t->num_entries; ++i) {
    if (t->entries[i].text) {
      tj_free(al, t->entries[i].text, t->entries[i].text_bytes);
    }
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < t->set->num_kernels; ++i) {
    n += tunable(t->set->kernels[i].kernel);
  }
  if (t->entries) tj_free(al, t->entries, sizeof(entry_t) * n);
  if (t->entry_of)
    tj_free(al, t->entry_of, sizeof(int32_t) * t->set->num_kernels);
  pthread_mutex_destroy(&t->pending_mutex);
  pthread_mutex_destroy(&t->mutex);
  tj_free(al, t, sizeof(*t));
}

bool tj_x86_tuner_handles(const tj_x86_tuner_t* t, uint32_t kernel) {
  return t && kernel < t->set->num_kernels && t->entry_of[kernel] >= 0;
}

//===--- the variants ---===//

// Builds (once) the module of every entry's variant kernels and OpenBLAS
// epilogue kernels. Called with the mutex held. A failure makes those
// candidates unavailable (logged), never the run.
static tj_status_t ensure_variants(tj_x86_tuner_t* t, double* out_ms) {
  *out_ms = 0;
  if (t->variants_tried) return NULL;
  t->variants_tried = true;
  double start = tj_now_ms();
  tj_allocator_t al = t->allocator;
  uint32_t total = 0;
  for (uint32_t i = 0; i < t->num_entries; ++i) {
    const entry_t* e = &t->entries[i];
    for (int32_t c = 0; c < e->num_candidates; ++c) {
      total += e->cands[c].kind != CAND_GENERATED && e->cands[c].available;
    }
  }
  if (total == 0) return NULL;
  tj_lowered_kernel_t* lowered =
      tj_calloc(al, total, sizeof(tj_lowered_kernel_t));
  if (!lowered) {
    t->variants_tried = false;
    return tj_status_oom();
  }
  tj_status_t status = NULL;
  uint32_t made = 0;
  for (uint32_t i = 0; !status && i < t->num_entries; ++i) {
    entry_t* e = &t->entries[i];
    const tj_kir_t* k = generic_kernel(t, e);
    for (int32_t c = 0; !status && c < e->num_candidates; ++c) {
      candidate_t* cand = &e->cands[c];
      if (cand->kind == CAND_GENERATED || !cand->available) continue;
      char name[96];
      bool epi = cand->kind == CAND_OPENBLAS;
      if (epi) {
        snprintf(name, sizeof(name), "%s_epi", k->name);
      } else {
        snprintf(name, sizeof(name), "%s_v%d", k->name, (int)c);
      }
      status =
          clone_gemm(k, name, &cand->schedule, epi, e, &lowered[made].kernel);
      if (status) break;
      lowered[made].nonempty_node = UINT32_MAX;
      cand->set_index = made++;
    }
  }
  if (status) {
    for (uint32_t i = 0; i < made; ++i)
      tj_lowered_kernel_deinitialize(&lowered[i]);
    tj_free(al, lowered, sizeof(tj_lowered_kernel_t) * total);
  } else {
    status = tj_x86_kernel_set_build(t->jit, al, t->context, t->cache_dir,
                                     lowered, made, &t->variants);
  }
  *out_ms = tj_now_ms() - start;
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
      t->variants_tried = false;  // a later run may have the memory
      return status;
    }
    if (t->log) {
      tj_context_diagnostic(t->context, TJ_SEVERITY_WARNING,
                            "autotune: @%s: the variant kernels failed to "
                            "build; only the generated kernels run: %s",
                            t->graph_name, tj_status_message(status));
    }
    for (uint32_t i = 0; i < t->num_entries; ++i) {
      entry_t* e = &t->entries[i];
      for (int32_t c = 0; c < e->num_candidates; ++c) {
        if (e->cands[c].kind == CAND_GENERATED || !e->cands[c].available) {
          continue;
        }
        e->cands[c].available = false;
        snprintf(e->cands[c].why, sizeof(e->cands[c].why),
                 "its kernel failed to build");
      }
    }
    tj_status_free(status);
    return NULL;
  }
  atomic_fetch_add(&t->variant_builds, 1);
  atomic_store_explicit(&t->variants_ready, true, memory_order_release);
  return NULL;
}

//===--- running one candidate ---===//

// The scratch bytes candidate |c| needs beyond nothing (one region).
static tj_status_t candidate_scratch(const tj_x86_tuner_t* t, const entry_t* e,
                                     int32_t c, const tj_x86_launch_t* launch,
                                     const int64_t* scalars, int64_t* out) {
  const candidate_t* cand = &e->cands[c];
  *out = 0;
  if (cand->kind == CAND_GENERATED) {
    *out = launch ? launch->slot_bytes * launch->slots : 0;
    return NULL;
  }
  if (!atomic_load_explicit(&t->variants_ready, memory_order_acquire)) {
    return NULL;
  }
  if (cand->kind == CAND_VARIANT) {
    tj_x86_launch_t l;
    TJ_RETURN_IF_ERROR(tj_x86_launch_prepare(
        t->runner, t->variants.kernels[cand->set_index].kernel, scalars, &l));
    *out = l.slot_bytes * l.slots;
    return NULL;
  }
  tune_key_t key;
  problem_key(generic_kernel(t, e), scalars, &key);
  *out = align64(key.batch * key.m * key.n * (int64_t)sizeof(float));
  return NULL;
}

// Runs candidate |c|. UNSUPPORTED when it cannot serve these operands
// (OpenBLAS and strides it cannot express); the caller falls back.
static tj_status_t run_candidate(tj_x86_tuner_t* t, const entry_t* e, int32_t c,
                                 const tj_x86_launch_t* launch,
                                 void* const* buffers, const int64_t* scalars,
                                 void* scratch, int64_t scratch_bytes) {
  const candidate_t* cand = &e->cands[c];
  const tj_kir_t* k = generic_kernel(t, e);
  if (cand->kind == CAND_GENERATED) {
    tj_x86_launch_run(t->runner, launch, t->set->fns[e->kernel], buffers,
                      scalars, scratch);
    return NULL;
  }
  if (!cand->available ||
      !atomic_load_explicit(&t->variants_ready, memory_order_acquire)) {
    return tj_unsupported("autotune: candidate %s is not built", cand->name);
  }
  int64_t need;
  TJ_RETURN_IF_ERROR(candidate_scratch(t, e, c, launch, scalars, &need));
  void* temp = NULL;
  if (need > scratch_bytes) {
    temp = tj_alloc(t->allocator, (size_t)need + 64);
    if (!temp) return tj_status_oom();
    scratch = (void*)(((uintptr_t)temp + 63) / 64 * 64);
  }
  tj_status_t status = NULL;
  if (cand->kind == CAND_VARIANT) {
    const tj_kir_t* v = t->variants.kernels[cand->set_index].kernel;
    tj_x86_launch_t l;
    status = tj_x86_launch_prepare(t->runner, v, scalars, &l);
    if (!status) {
      tj_x86_launch_run(t->runner, &l, t->variants.fns[cand->set_index],
                        buffers, scalars, scratch);
    }
  } else {
    char why[160];
    if (!tj_openblas_gemm_applies(k, scalars, why, sizeof(why))) {
      status = tj_unsupported("autotune: OpenBLAS: %s", why);
    } else {
      tune_key_t key;
      problem_key(k, scalars, &key);
      float* acc = scratch;
      tj_openblas_gemm(t->blas, k, buffers, scalars, acc);
      // The epilogue kernel: the generic buffers + the result, the generic
      // params + the result's non-constant strides.
      void* bufs[TJ_KIR_MAX_BUFFERS];
      int64_t sc[TJ_KIR_MAX_PARAMS];
      memcpy(bufs, buffers, sizeof(void*) * k->num_buffers);
      bufs[k->num_buffers] = acc;
      if (k->num_params) memcpy(sc, scalars, sizeof(int64_t) * k->num_params);
      for (uint32_t p = 0; p < e->num_acc_params; ++p) {
        int64_t stride = 1;
        for (int32_t d = k->rank - 1; d > e->acc_param_dim[p]; --d) {
          stride *= tj_kir_ival_eval(k->dims[d], scalars);
        }
        sc[k->num_params + p] = stride;
      }
      const tj_kir_t* epi = t->variants.kernels[cand->set_index].kernel;
      tj_x86_launch_t l;
      status = tj_x86_launch_prepare(t->runner, epi, sc, &l);
      if (!status) {
        tj_x86_launch_run(t->runner, &l, t->variants.fns[cand->set_index], bufs,
                          sc, NULL);
      }
    }
  }
  if (temp) tj_free(t->allocator, temp, (size_t)need + 64);
  return status;
}

//===--- deciding ---===//

typedef struct measure_t {
  tj_x86_tuner_t* t;
  const entry_t* e;
  const tj_x86_launch_t* launch;
  void* const* buffers;
  const int64_t* scalars;
  int32_t map[TJ_X86_TUNER_MAX_CANDIDATES];  // autotune index -> candidate
  bool ready;
  tj_status_t setup_error;
  double start, variants_ms;
  // Scratch copies of the outputs and a scratch region for any candidate.
  void* bufs[TJ_KIR_MAX_BUFFERS];
  void* blocks[TJ_KIR_MAX_BUFFERS];
  size_t block_bytes[TJ_KIR_MAX_BUFFERS];
  void* scratch_block;
  size_t scratch_block_bytes;
  void* scratch;
  int64_t scratch_bytes;
  int32_t n;  // candidates timed
  bool warmed[TJ_X86_TUNER_MAX_CANDIDATES];
  double last_ms[TJ_X86_TUNER_MAX_CANDIDATES];
  double spent[TJ_X86_TUNER_MAX_CANDIDATES];
  char skipped[TJ_X86_TUNER_MAX_CANDIDATES][160];
} measure_t;

static void measure_free(measure_t* m) {
  tj_allocator_t al = m->t->allocator;
  for (int i = 0; i < TJ_KIR_MAX_BUFFERS; ++i) {
    if (m->blocks[i]) tj_free(al, m->blocks[i], m->block_bytes[i]);
    m->blocks[i] = NULL;
  }
  if (m->scratch_block) tj_free(al, m->scratch_block, m->scratch_block_bytes);
  m->scratch_block = NULL;
}

// Scratch outputs (the run's outputs may alias its inputs, so candidates
// must not write them) and one scratch region for every candidate.
static tj_status_t measure_setup(measure_t* m) {
  tj_x86_tuner_t* t = m->t;
  const tj_kir_t* k = generic_kernel(t, m->e);
  TJ_RETURN_IF_ERROR(ensure_variants(t, &m->variants_ms));
  memcpy(m->bufs, m->buffers, sizeof(void*) * k->num_buffers);
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_OUTPUT) continue;
    int64_t lo = 0, hi = 0;
    for (int32_t d = 0; d < k->rank; ++d) {
      int64_t span = (tj_kir_ival_eval(k->dims[d], m->scalars) - 1) *
                     tj_kir_ival_eval(buf->strides[d], m->scalars);
      if (span > 0) hi += span;
      if (span < 0) lo += span;
    }
    int64_t size = (int64_t)tj_dtype_size(buf->dtype);
    m->block_bytes[b] = (size_t)((hi - lo + 1) * size + 64);
    m->blocks[b] = tj_alloc(t->allocator, m->block_bytes[b]);
    if (!m->blocks[b]) return tj_status_oom();
    uintptr_t base = ((uintptr_t)m->blocks[b] + 63) / 64 * 64;
    m->bufs[b] = (unsigned char*)base - lo * size;
  }
  int64_t need = 0;
  for (int32_t c = 0; c < m->e->num_candidates; ++c) {
    int64_t s;
    TJ_RETURN_IF_ERROR(
        candidate_scratch(t, m->e, c, m->launch, m->scalars, &s));
    if (s > need) need = s;
  }
  m->scratch_block_bytes = (size_t)need + 64;
  m->scratch_block = tj_alloc(t->allocator, m->scratch_block_bytes);
  if (!m->scratch_block) return tj_status_oom();
  m->scratch = (void*)(((uintptr_t)m->scratch_block + 63) / 64 * 64);
  m->scratch_bytes = need;
  return NULL;
}

// jit/autotune.h's measure hook within the budget: every candidate gets a
// warm-up run (skipped when even that would overrun the budget, except for
// the generated kernel, which always runs) and, for its samples, as many
// of the asked repeats as fit in its share of the budget (budget / number
// of candidates); a sample that fits no run repeats the candidate's latest
// time. A time per call is what the hook returns either way.
static tj_status_t measure(void* context, int32_t index, int32_t repeats,
                           double* out_ms) {
  measure_t* m = context;
  if (!m->ready) {
    m->ready = true;
    m->setup_error = measure_setup(m);
    // One untimed run first: the scratch outputs' first touch and cold
    // caches would otherwise be charged to whichever candidate runs first.
    if (!m->setup_error) {
      m->setup_error = run_candidate(m->t, m->e, 0, m->launch, m->bufs,
                                     m->scalars, m->scratch, m->scratch_bytes);
    }
    m->start = tj_now_ms();
  }
  if (m->setup_error) return tj_status_clone(m->setup_error);
  int32_t c = m->map[index];
  double elapsed = tj_now_ms() - m->start;
  double budget = m->t->budget_ms;
  if (!m->warmed[c]) {
    if (c != 0 && m->warmed[0] && elapsed + m->last_ms[0] > budget) {
      snprintf(m->skipped[c], sizeof(m->skipped[c]), "over the %d ms budget",
               (int)budget);
      return tj_unsupported("autotune: over budget");
    }
    repeats = 1;
  } else {
    double share = budget / (m->n > 0 ? m->n : 1) - m->spent[c];
    int32_t fit =
        m->last_ms[c] > 0 ? (int32_t)(share / m->last_ms[c]) : repeats;
    if (fit < repeats) repeats = fit;
    if (repeats < 1 || elapsed + repeats * m->last_ms[c] > budget) {
      *out_ms = m->last_ms[c];
      return NULL;
    }
  }
  double t0 = tj_now_ms();
  for (int32_t i = 0; i < repeats; ++i) {
    tj_status_t s = run_candidate(m->t, m->e, c, m->launch, m->bufs, m->scalars,
                                  m->scratch, m->scratch_bytes);
    if (s) {
      if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
        snprintf(m->skipped[c], sizeof(m->skipped[c]), "%s",
                 tj_status_message(s));
      }
      return s;
    }
  }
  double spent = tj_now_ms() - t0;
  m->spent[c] += spent;
  m->last_ms[c] = spent / repeats;
  m->warmed[c] = true;
  *out_ms = m->last_ms[c];
  return NULL;
}

static void log_decision(tj_x86_tuner_t* t, const entry_t* e,
                         const tune_key_t* key, const measure_t* m,
                         const tj_autotune_result_t* r, int32_t n,
                         int32_t winner) {
  char table[1024];
  size_t len = 0;
  table[0] = '\0';
  for (int32_t i = 0; i < n && len < sizeof(table); ++i) {
    int32_t c = m->map[i];
    int w;
    if (r->ms[i] >= 0) {
      w = snprintf(table + len, sizeof(table) - len, "%s%s %.3f ms",
                   i ? "; " : "", e->cands[c].name, r->ms[i]);
    } else {
      w = snprintf(table + len, sizeof(table) - len, "%s%s skipped%s%s",
                   i ? "; " : "", e->cands[c].name,
                   m->skipped[c][0] ? ": " : "", m->skipped[c]);
    }
    if (w < 0) break;
    len += (size_t)w;
  }
  const tj_kir_t* k = generic_kernel(t, e);
  char how[128];
  if (r->from_cache) {
    snprintf(how, sizeof(how), "decision from the cache");
  } else if (m->variants_ms > 0) {
    snprintf(how, sizeof(how),
             "timed in %.1f ms; variant kernels built in %.1f ms first",
             r->tune_ms - m->variants_ms, m->variants_ms);
  } else {
    snprintf(how, sizeof(how), "timed in %.1f ms", r->tune_ms);
  }
  tj_context_diagnostic(
      t->context, TJ_SEVERITY_REMARK,
      "autotune: @%s %s M=%lld (bucket %lld) N=%lld K=%lld batch=%lld: "
      "[%s] -> %s (%s)",
      t->graph_name, k->name, (long long)key->m, (long long)key->bucket,
      (long long)key->n, (long long)key->k, (long long)key->batch, table,
      e->cands[winner].name, how);
}

// Records |winner| for |key|, for the runs that come after. Called with
// the mutex, with room left in |e->decisions|.
static void publish_locked(entry_t* e, const tune_key_t* key, int32_t winner,
                           bool background) {
  uint32_t count =
      atomic_load_explicit(&e->num_decisions, memory_order_relaxed);
  decision_t* d = &e->decisions[count];
  d->bucket = key->bucket;
  d->n = key->n;
  d->k = key->k;
  d->batch = key->batch;
  d->winner = winner;
  d->background = background;
  atomic_init(&d->swapped_in, false);
  atomic_store_explicit(&e->num_decisions, count + 1, memory_order_release);
}

// The winner for |key| (recorded for later runs). Called with the mutex.
static tj_status_t decide_locked(tj_x86_tuner_t* t, entry_t* e,
                                 const tune_key_t* key,
                                 const tj_x86_launch_t* launch,
                                 void* const* buffers, const int64_t* scalars,
                                 bool background, int32_t* out_winner) {
  *out_winner = 0;
  const decision_t* found = find_decision(e, key);
  if (found) {
    *out_winner = found->winner;
    return NULL;
  }
  uint32_t count =
      atomic_load_explicit(&e->num_decisions, memory_order_relaxed);
  if (count == MAX_DECISIONS) {
    if (t->log && !e->full_logged) {
      e->full_logged = true;
      tj_context_diagnostic(t->context, TJ_SEVERITY_REMARK,
                            "autotune: @%s %s: %d shapes decided; new ones "
                            "run the generated kernel untimed",
                            t->graph_name, generic_kernel(t, e)->name,
                            MAX_DECISIONS);
    }
    return NULL;
  }
  measure_t m;
  memset(&m, 0, sizeof(m));
  m.t = t;
  m.e = e;
  m.launch = launch;
  m.buffers = buffers;
  m.scalars = scalars;
  const char* names[TJ_X86_TUNER_MAX_CANDIDATES];
  int32_t n = 0;
  for (int32_t c = 0; c < e->num_candidates; ++c) {
    if (!e->cands[c].available) continue;
    m.map[n] = c;
    names[n++] = e->cands[c].name;
  }
  m.n = n;
  // The problem: the kernel (its epilogue and operand layouts) and sizes.
  char sizes[160];
  snprintf(sizes, sizeof(sizes), "x86 gemm N=%lld K=%lld batch=%lld",
           (long long)key->n, (long long)key->k, (long long)key->batch);
  size_t tlen = e->text_bytes + strlen(sizes) + 2;
  char* text = tj_alloc(t->allocator, tlen);
  if (!text) return tj_status_oom();
  snprintf(text, tlen, "%s\n%s", e->text, sizes);
  tj_autotune_problem_t problem = {text, tj_x86_jit_target_key(t->jit),
                                   key->bucket, n, names};
  tj_autotune_result_t r;
  tj_status_t status =
      tj_autotune(t->context, t->cache_dir, &problem, measure, &m, &r);
  tj_free(t->allocator, text, tlen);
  measure_free(&m);
  tj_status_free(m.setup_error);
  int32_t winner = 0;
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    if (t->log) {
      tj_context_diagnostic(t->context, TJ_SEVERITY_WARNING,
                            "autotune: @%s %s: %s; the generated kernel runs",
                            t->graph_name, generic_kernel(t, e)->name,
                            tj_status_message(status));
    }
    tj_status_free(status);
  } else {
    winner = m.map[r.best];
    atomic_fetch_add(r.from_cache ? &t->cached : &t->tunings, 1);
    if (winner != 0) {
      double ms;
      TJ_RETURN_IF_ERROR(ensure_variants(t, &ms));
      if (!e->cands[winner].available) winner = 0;
    }
    if (t->log) log_decision(t, e, key, &m, &r, n, winner);
  }
  publish_locked(e, key, winner, background);
  *out_winner = winner;
  return NULL;
}

//===--- background tuning (TJ_AUTOTUNE_BACKGROUND) ---===//

// A GEMM the worker can time on its own copy of the operands: their
// extents follow from the strides and sizes. Not a quantized B (bytes per
// element differ from the dtype's; issue 17), nor an epilogue that gathers
// (LOAD_AT: its reach depends on values); those tune synchronously.
static bool background_tunable(const tj_kir_t* k) {
  if (k->bq.bits != 0) return false;
  const tj_kir_phase_t* ph = &k->phases[0];
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    if (ph->insts[i].kind == TJ_KIR_LOAD_AT) return false;
  }
  return true;
}

// The job: the first run's key, launch and scalars, and a snapshot of its
// input buffers (the run's own memory is the caller's again once the run
// returns). Outputs stay NULL: the measurement writes scratch outputs.
typedef struct tune_job_t {
  tj_background_job_t base;
  tj_x86_tuner_t* t;
  entry_t* e;
  tune_key_t key;
  tj_x86_launch_t launch;
  int64_t scalars[TJ_KIR_MAX_PARAMS];
  void* buffers[TJ_KIR_MAX_BUFFERS];
  void* blocks[TJ_KIR_MAX_BUFFERS];
  size_t block_bytes[TJ_KIR_MAX_BUFFERS];
} tune_job_t;

static void job_free(tune_job_t* j) {
  tj_allocator_t al = j->t->allocator;
  for (int i = 0; i < TJ_KIR_MAX_BUFFERS; ++i) {
    if (j->blocks[i]) tj_free(al, j->blocks[i], j->block_bytes[i]);
  }
  tj_free(al, j, sizeof(*j));
}

// Takes |key| off |e|'s pending list (the job is over, or never queued).
static void unpend(tj_x86_tuner_t* t, entry_t* e, const tune_key_t* key) {
  pthread_mutex_lock(&t->pending_mutex);
  for (uint32_t i = 0; i < e->num_pending; ++i) {
    const tune_key_t* q = &e->pending[i];
    if (same_key(q->bucket, q->n, q->k, q->batch, key)) {
      e->pending[i] = e->pending[--e->num_pending];
      break;
    }
  }
  pthread_mutex_unlock(&t->pending_mutex);
}

static void job_discard(tj_background_job_t* base) {
  tune_job_t* j = (tune_job_t*)base;
  unpend(j->t, j->e, &j->key);
  job_free(j);
}

static void job_run(tj_background_job_t* base) {
  tune_job_t* j = (tune_job_t*)base;
  tj_x86_tuner_t* t = j->t;
  entry_t* e = j->e;
  const tj_kir_t* k = generic_kernel(t, e);
  double start = tj_now_ms();
  int32_t winner = 0;
  pthread_mutex_lock(&t->mutex);
  tj_status_t s = decide_locked(t, e, &j->key, &j->launch, j->buffers,
                                j->scalars, true, &winner);
  if (s && !find_decision(e, &j->key) &&
      atomic_load_explicit(&e->num_decisions, memory_order_relaxed) <
          MAX_DECISIONS) {
    // The generated kernel stays, for good: a job that failed (out of
    // memory) is not queued again by every later run.
    publish_locked(e, &j->key, 0, true);
  }
  pthread_mutex_unlock(&t->mutex);
  if (s) {
    atomic_fetch_add(&t->jobs_failed, 1);
    if (t->log) {
      tj_context_diagnostic(t->context, TJ_SEVERITY_WARNING,
                            "autotune: @%s %s bucket %lld: background job "
                            "failed: %s; the generated kernel stays",
                            t->graph_name, k->name, (long long)j->key.bucket,
                            tj_status_message(s));
    }
    tj_status_free(s);
  } else {
    atomic_fetch_add(&t->jobs_done, 1);
    if (t->log) {
      tj_context_diagnostic(
          t->context, TJ_SEVERITY_REMARK,
          "autotune: @%s %s bucket %lld: background job finished in %.1f "
          "ms: %s published",
          t->graph_name, k->name, (long long)j->key.bucket, tj_now_ms() - start,
          e->cands[winner].name);
    }
  }
  unpend(t, e, &j->key);
  job_free(j);
}

// Copies what buffer |b| of |k| reaches with |scalars| into a new block;
// |*out| is the copy's base pointer (matching the original's strides).
static tj_status_t snapshot_buffer(tune_job_t* j, const tj_kir_t* k, uint32_t b,
                                   const void* src, const int64_t* scalars,
                                   void** out) {
  const tj_kir_buffer_t* buf = &k->buffers[b];
  const int32_t r = k->rank;
  int64_t lo = 0, hi = 0;
  bool empty = false;
  for (int32_t d = 0; d < r; ++d) {
    // A's slots are [batch.., m, k], B's [batch.., k, n] (kernel_ir.h).
    tj_kir_ival_t dim = k->dims[d];
    if ((buf->role == TJ_KIR_GEMM_A && d == r - 1) ||
        (buf->role == TJ_KIR_GEMM_B && d == r - 2)) {
      dim = k->gemm_k;
    }
    int64_t extent = tj_kir_ival_eval(dim, scalars);
    if (extent <= 0) empty = true;
    int64_t span = (extent - 1) * tj_kir_ival_eval(buf->strides[d], scalars);
    if (span > 0) hi += span;
    if (span < 0) lo += span;
  }
  size_t size = tj_dtype_size(buf->dtype);
  size_t bytes = empty ? 0 : (size_t)(hi - lo + 1) * size;
  j->block_bytes[b] = bytes + 64;
  j->blocks[b] = tj_alloc(j->t->allocator, j->block_bytes[b]);
  if (!j->blocks[b]) return tj_status_oom();
  uintptr_t base = ((uintptr_t)j->blocks[b] + 63) / 64 * 64;
  if (bytes) {
    memcpy((void*)base, (const unsigned char*)src + lo * (int64_t)size, bytes);
  }
  *out = (unsigned char*)base - lo * (int64_t)size;
  return NULL;
}

// Queues the timing of |key| unless it is queued already or the table is
// full. A failure here costs only the tuning: the run goes on with the
// generated kernel, and a later run tries again.
static void queue_job(tj_x86_tuner_t* t, entry_t* e, const tune_key_t* key,
                      const tj_x86_launch_t* launch, void* const* buffers,
                      const int64_t* scalars) {
  pthread_mutex_lock(&t->pending_mutex);
  bool queued = find_decision(e, key) != NULL;
  for (uint32_t i = 0; !queued && i < e->num_pending; ++i) {
    const tune_key_t* q = &e->pending[i];
    queued = same_key(q->bucket, q->n, q->k, q->batch, key);
  }
  uint32_t room = MAX_DECISIONS -
                  atomic_load_explicit(&e->num_decisions, memory_order_acquire);
  bool add = !queued && e->num_pending < room;
  if (add) {
    e->pending[e->num_pending++] = *key;
  }
  pthread_mutex_unlock(&t->pending_mutex);
  if (!add) return;
  const tj_kir_t* k = generic_kernel(t, e);
  tune_job_t* j = tj_calloc(t->allocator, 1, sizeof(*j));
  tj_status_t s = j ? NULL : tj_status_oom();
  if (j) {
    j->base.run = job_run;
    j->base.discard = job_discard;
    j->base.owner = t;
    j->t = t;
    j->e = e;
    j->key = *key;
    j->launch = *launch;
    if (k->num_params) {
      memcpy(j->scalars, scalars, sizeof(int64_t) * k->num_params);
    }
    for (uint32_t b = 0; !s && b < k->num_buffers; ++b) {
      if (k->buffers[b].role == TJ_KIR_OUTPUT) continue;
      s = snapshot_buffer(j, k, b, buffers[b], j->scalars, &j->buffers[b]);
    }
  }
  bool refused = false;
  if (!s && !tj_context_background_submit(t->context, &j->base)) {
    refused = true;
    s = tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                       "no background thread (the context is destroyed, or "
                       "none could be started)");
  }
  if (s) {
    if (t->log) {
      tj_context_diagnostic(t->context, TJ_SEVERITY_WARNING,
                            "autotune: @%s %s bucket %lld: not queued: %s",
                            t->graph_name, k->name, (long long)key->bucket,
                            tj_status_message(s));
    }
    tj_status_free(s);
    if (j) job_free(j);
    if (refused) {
      // No worker will come (tj_context_destroy has run): the generated
      // kernel keeps this bucket, without a snapshot on every run.
      pthread_mutex_lock(&t->mutex);
      if (!find_decision(e, key) &&
          atomic_load_explicit(&e->num_decisions, memory_order_relaxed) <
              MAX_DECISIONS) {
        publish_locked(e, key, 0, false);
      }
      pthread_mutex_unlock(&t->mutex);
    }
    unpend(t, e, key);
    return;
  }
  atomic_fetch_add(&t->jobs_queued, 1);
  if (t->log) {
    tj_context_diagnostic(
        t->context, TJ_SEVERITY_REMARK,
        "autotune: @%s %s M=%lld (bucket %lld) N=%lld K=%lld batch=%lld: "
        "tuning queued in the background; the generated kernel runs",
        t->graph_name, k->name, (long long)key->m, (long long)key->bucket,
        (long long)key->n, (long long)key->k, (long long)key->batch);
  }
}

int64_t tj_x86_tuner_scratch(const tj_x86_tuner_t* t, uint32_t kernel,
                             const int64_t* scalars) {
  if (!tj_x86_tuner_handles(t, kernel)) return 0;
  const entry_t* e = &t->entries[t->entry_of[kernel]];
  int32_t winner = e->forced;
  if (winner < 0) {
    tune_key_t key;
    problem_key(generic_kernel(t, e), scalars, &key);
    const decision_t* d = find_decision(e, &key);
    winner = d ? d->winner : 0;
  }
  if (winner == 0) return 0;
  int64_t need = 0;
  tj_status_t s = candidate_scratch(t, e, winner, NULL, scalars, &need);
  if (s) {
    // The run reports it; the region is then only too small, never wrong.
    tj_status_free(s);
    return 0;
  }
  return need;
}

tj_status_t tj_x86_tuner_run(tj_x86_tuner_t* t, uint32_t kernel,
                             const tj_x86_launch_t* launch,
                             void* const* buffers, const int64_t* scalars,
                             void* scratch, int64_t scratch_bytes) {
  entry_t* e = &t->entries[t->entry_of[kernel]];
  const tj_kir_t* k = generic_kernel(t, e);
  tune_key_t key;
  problem_key(k, scalars, &key);
  int32_t winner = e->forced;
  if (winner < 0 && key.batch * key.m * key.n > 0) {
    const decision_t* d = find_decision(e, &key);
    if (d) {
      winner = d->winner;
      if (d->background && t->log &&
          !atomic_exchange((atomic_bool*)&d->swapped_in, true)) {
        tj_context_diagnostic(
            t->context, TJ_SEVERITY_REMARK,
            "autotune: @%s %s bucket %lld: swapped in: %s (tuned in the "
            "background) runs from here on",
            t->graph_name, k->name, (long long)key.bucket,
            e->cands[winner].name);
      }
    } else if (t->background && background_tunable(k)) {
      // The run does not wait: the generated kernel (what autotune off
      // runs) serves it, and the worker decides for the runs after.
      queue_job(t, e, &key, launch, buffers, scalars);
    } else if (pthread_mutex_trylock(&t->mutex) == 0) {
      tj_status_t s =
          decide_locked(t, e, &key, launch, buffers, scalars, false, &winner);
      pthread_mutex_unlock(&t->mutex);
      TJ_RETURN_IF_ERROR(s);
    }
  }
  if (winner > 0) {
    tj_status_t s = run_candidate(t, e, winner, launch, buffers, scalars,
                                  scratch, scratch_bytes);
    if (!s) {
      atomic_fetch_add(e->cands[winner].kind == CAND_OPENBLAS
                           ? &t->openblas_runs
                           : &t->variant_runs,
                       1);
      return NULL;
    }
    if (tj_status_code(s) != TJ_STATUS_UNSUPPORTED) return s;
    tj_status_free(s);  // e.g. strides OpenBLAS cannot take this run
  }
  return run_candidate(t, e, 0, launch, buffers, scalars, scratch,
                       scratch_bytes);
}

//===--- inspection ---===//

void tj_x86_tuner_stats(const tj_x86_tuner_t* t, tj_x86_tuner_stats_t* out) {
  memset(out, 0, sizeof(*out));
  if (!t) return;
  tj_x86_tuner_t* m = (tj_x86_tuner_t*)t;
  out->tunings = atomic_load(&m->tunings);
  out->cached = atomic_load(&m->cached);
  out->variant_builds = atomic_load(&m->variant_builds);
  out->openblas_runs = atomic_load(&m->openblas_runs);
  out->variant_runs = atomic_load(&m->variant_runs);
  out->jobs_queued = atomic_load(&m->jobs_queued);
  out->jobs_done = atomic_load(&m->jobs_done);
  out->jobs_failed = atomic_load(&m->jobs_failed);
}

int32_t tj_x86_tuner_candidates(const tj_x86_tuner_t* t, uint32_t kernel,
                                const char** names, bool* available) {
  if (!tj_x86_tuner_handles(t, kernel)) return 0;
  const entry_t* e = &t->entries[t->entry_of[kernel]];
  for (int32_t c = 0; c < e->num_candidates; ++c) {
    names[c] = e->cands[c].name;
    available[c] = e->cands[c].available;
  }
  return e->num_candidates;
}

tj_status_t tj_x86_tuner_force(tj_x86_tuner_t* t, const char* name) {
  if (!t) return tj_invalid("autotune: no tuner");
  pthread_mutex_lock(&t->mutex);
  tj_status_t status = NULL;
  if (name) {
    double ms;
    status = ensure_variants(t, &ms);
  }
  // Which candidate each entry gets; nothing changes unless one matches.
  int32_t pick[64];
  bool any = false;
  for (uint32_t i = 0; !status && i < t->num_entries; ++i) {
    const entry_t* e = &t->entries[i];
    int32_t p = name ? 0 : -1;
    for (int32_t c = 0; name && c < e->num_candidates; ++c) {
      if (e->cands[c].available && strcmp(e->cands[c].name, name) == 0) {
        p = c;
        any = true;
      }
    }
    if (i < TJ_ARRAY_SIZE(pick)) pick[i] = p;
  }
  if (!status && (any || !name)) {
    for (uint32_t i = 0; i < t->num_entries; ++i) {
      t->entries[i].forced = i < TJ_ARRAY_SIZE(pick) ? pick[i] : -1;
    }
  }
  pthread_mutex_unlock(&t->mutex);
  TJ_RETURN_IF_ERROR(status);
  if (name && !any) {
    return tj_invalid(
        "autotune: no GEMM kernel has an available candidate "
        "\"%s\"",
        name);
  }
  return NULL;
}
