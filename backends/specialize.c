// backends/specialize.c: the dynamic-shape policy of every executable, the
// same for every backend that lowers. A run binds the symbols and checks the
// guards (lib/runtime_shape.c); then, with TJ_SPECIALIZE_ALWAYS / AFTER_N, a
// shape (the symbol values) gets its own program, lowered again with every
// size a constant (tj_run_plan_lower) and compiled by the same backend,
// logged under TJ_LOG=recompiles with the reason. The generic program
// serves meanwhile, for every shape under NEVER, for a shape whose
// specialization the backend refuses, for a shape with a symbol of 0, and
// for every power-of-two bucket under bucket_pow2 (see
// tj_executable_note_bucket).

#include <stdio.h>
#include <string.h>

#include "backends/executable.h"
#include "lib/custom_op.h"

void tj_executable_format_key(const tj_graph_t* g, const int64_t* key,
                              char* buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < tj_dim_num_symbols(&g->dims) && n < size; ++i) {
    int m = snprintf(buf + n, size - n, "%s%s=%lld", i ? "," : "",
                     tj_dim_symbol_name(&g->dims, i), (long long)key[i]);
    if (m < 0) break;
    n += (size_t)m;
  }
}

void tj_executable_count_cache(tj_executable_t* exe,
                               const tj_lowered_program_t* p) {
  atomic_fetch_add(&exe->cache_hits, p->cache_hits);
  atomic_fetch_add(&exe->cache_misses, p->cache_misses);
}

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
  tj_executable_format_key(exe->graph, sym, key, sizeof(key));
  double start = tj_now_ms();
  tj_lowered_program_t program;
  memset(&program, 0, sizeof(program));
  program.plan = &exe->run_plan;
  program.sym = sym;
  program.label = key;
  tj_status_t status = tj_run_plan_lower(&exe->run_plan, sym, &program.kernels);
  if (!status) {
    status = exe->backend->compile(exe->target, &program, &s->program);
  }
  if (status && tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
    // Keep using the generic program for this shape; remember not to retry.
    if (exe->log_recompiles) {
      tj_context_diagnostic(exe->context, TJ_SEVERITY_WARNING,
                            "recompiles: @%s: no specialization for %s: %s",
                            exe->graph->name, key, tj_status_message(status));
    }
    tj_status_free(status);
    s->program = NULL;
    *out = s;
    return NULL;
  }
  if (status) {
    tj_free(al, s, sizeof(spec_t));
    return status;
  }
  atomic_fetch_add(&exe->recompiles, 1);
  tj_executable_count_cache(exe, &program);
  if (exe->log_recompiles) {
    tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                          "recompiles: @%s: compiled %u exact-shape kernels "
                          "for %s (%s) in %.2f ms",
                          exe->graph->name, exe->run_plan.num_kernels, key,
                          reason, tj_now_ms() - start);
  }
  *out = s;
  return NULL;
}

tj_status_t tj_executable_choose_program(tj_executable_t* exe,
                                         const int64_t* sym, void** out) {
  *out = exe->generic;
  uint32_t n = exe->num_symbols;
  // An empty batch (a symbol 0) runs the generic program: its tensors are
  // empty or broadcast, constant sizes gain nothing, and the kernel
  // templates do not lower a zero-sized dim as a constant (an output's
  // stride along it would be 0).
  for (uint32_t i = 0; i < n; ++i) {
    if (sym[i] == 0) return NULL;
  }
  for (spec_t* s = atomic_load_explicit(&exe->specs, memory_order_acquire); s;
       s = s->next) {
    if (key_equal(s->key, sym, n)) {
      if (s->program) *out = s->program;
      return NULL;
    }
  }
  char reason[96];
  pthread_mutex_lock(&exe->mutex);
  if (exe->options.specialize == TJ_SPECIALIZE_AFTER_N) {
    shape_count_t* slot = NULL;
    for (int i = 0; i < TJ_SHAPE_COUNTERS && !slot; ++i) {
      if (exe->counts[i].used && key_equal(exe->counts[i].key, sym, n)) {
        slot = &exe->counts[i];
      }
    }
    for (int i = 0; i < TJ_SHAPE_COUNTERS && !slot; ++i) {
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
      if (s->program) *out = s->program;
      pthread_mutex_unlock(&exe->mutex);
      return NULL;
    }
  }
  if (exe->num_specs >= TJ_MAX_SPECIALIZATIONS) {
    pthread_mutex_unlock(&exe->mutex);
    return NULL;
  }
  spec_t* s;
  tj_status_t status = specialize(exe, sym, reason, &s);
  if (!status) {
    s->next = atomic_load(&exe->specs);
    atomic_store_explicit(&exe->specs, s, memory_order_release);
    ++exe->num_specs;
    if (s->program) *out = s->program;
  }
  pthread_mutex_unlock(&exe->mutex);
  return status;
}

// bucket_pow2: the programs of a power-of-two bucket are the generic ones
// (see tj_compile_options_t). A kernel specialized to a bucket could not
// make its sizes constants, which is all an exact-shape kernel gains here,
// without padding every tensor to the bucket: copies in and out, and wrong
// results for reductions over a padded axis (mean, softmax, layer_norm).
// Taking sizes as parameters, the generic kernels run the actual sizes
// with no padding; the GEMMs pick their small-M path from M at run time
// and the autotuners key their schedule choice by the same bucket. So a
// new bucket compiles nothing; TJ_LOG=recompiles says so once per bucket.
void tj_executable_note_bucket(tj_executable_t* exe, const int64_t* sym) {
  if (!exe->log_recompiles) return;
  uint32_t n = exe->num_symbols;
  int64_t key[TJ_MAX_SYMBOLS];
  for (uint32_t i = 0; i < n; ++i) key[i] = tj_pow2_bucket(sym[i]);
  pthread_mutex_lock(&exe->mutex);
  shape_count_t* slot = NULL;
  bool seen = false;
  for (int i = 0; i < TJ_SHAPE_COUNTERS && !seen; ++i) {
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
  tj_executable_format_key(exe->graph, sym, actual, sizeof(actual));
  tj_executable_format_key(exe->graph, key, bucket, sizeof(bucket));
  tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                        "recompiles: @%s: bucket %s (first run %s) runs the "
                        "generic kernels on the actual sizes: no padding, "
                        "nothing compiled",
                        exe->graph->name, bucket, actual);
}

bool tj_executable_specializes(const tj_executable_t* exe) {
  // Data-dependent symbols change during a run: the generic program only.
  return exe->backend->lowers &&
         exe->options.specialize != TJ_SPECIALIZE_NEVER &&
         exe->num_symbols > 0 && !tj_custom_graph_is_dynamic(exe->graph);
}
