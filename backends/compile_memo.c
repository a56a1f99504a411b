// backends/compile_memo.c: the compile memo (region compile, issue 16).
//
// A context's live executables are indexed by a structural key of the
// graph and options they were compiled from. A compile of an equal graph
// (the same model compiled again, a host rebuilding its stack of layers,
// several sessions of one model) while such an executable lives runs no
// pass, lowers nothing and loads no object: its executable shares that
// one's processed graph, run plan, target and generic program by
// reference (compile.c, share_core), so the compile costs a hash, not the
// passes and lowering that grow with the number of layers.
//
// The key is what the compiled result depends on: every node's op,
// dtype, dims (symbolic dims by their canonical expression numbers, with
// the symbols' names and bounds), operands and attributes; constants by
// their bytes; inputs', outputs' and the graph's names (messages and
// kernel names carry them); the guards; the backend and the options that
// change the result. Weights passed as inputs are not in it. A finalized
// graph keeps its part of the key (tj_graph_t.memo_key), so compiling the
// same graph again does not walk it.
//
// The memo holds no reference to a live executable. When the last
// reference to one goes, the memo retires it instead of letting it be
// freed: its run frames are trimmed (backend trim), it drops its context
// reference, and it stays compiled, so that compiling an equal graph
// again (the same model reloaded, a host rebuilding its stack of layers
// after releasing the first) revives it at the cost of the key, not the
// passes, lowering and kernel-set load that grow with the number of
// layers. At most tj_context_options_t.retain_compiled cores (8 by
// default; 0: none, each is freed at its release) whose graphs hold at
// most kRetiredBytes of constants together are kept, least recently used
// first out; the context's teardown frees the rest (memo_destroy, before
// the x86 runtime whose JIT holds their code: extensions go in reverse
// order). A retired core runs nothing and holds no arena.

#include <pthread.h>
#include <string.h>

#include "backends/executable.h"
#include "jit/cache.h"
#include "lib/env.h"
#include "lib/ir.h"

enum { kMemoEntries = 64 };
static const size_t kRetiredBytes = (size_t)64 << 20;

typedef struct memo_entry_t {
  tj_cache_key_t key;
  // Not a reference while it lives; the memo's own once |retired|. NULL:
  // a free slot.
  tj_executable_t* core;
  uint64_t used;  // the memo's clock at the last hit or store
  bool retired;   // |core| has no reference left but the memo's
  size_t bytes;   // its graph's constants, when retired
} memo_entry_t;

typedef struct memo_t {
  tj_allocator_t allocator;
  pthread_mutex_t mutex;
  memo_entry_t entries[kMemoEntries];
  uint64_t clock;
} memo_t;

static tj_status_t memo_create(tj_context_t* context, void** out_state) {
  tj_allocator_t al = tj_context_allocator(context);
  memo_t* m = tj_calloc(al, 1, sizeof(*m));
  if (!m) return tj_status_oom();
  if (pthread_mutex_init(&m->mutex, NULL) != 0) {
    tj_free(al, m, sizeof(*m));
    return tj_internal("compile memo: pthread_mutex_init failed");
  }
  m->allocator = al;
  *out_state = m;
  return NULL;
}

// Every live executable is gone by then (each holds a context
// reference); the retired ones go here, while the backends' extensions
// (the JIT holding their code) are still there.
static void memo_destroy(void* state) {
  memo_t* m = state;
  for (int i = 0; i < kMemoEntries; ++i) {
    if (m->entries[i].core && m->entries[i].retired)
      tj_executable_destroy_retired(m->entries[i].core);
  }
  pthread_mutex_destroy(&m->mutex);
  tj_free(m->allocator, m, sizeof(*m));
}

static tj_status_t memo_of(tj_context_t* context, memo_t** out) {
  void* state = NULL;
  TJ_RETURN_IF_ERROR(tj_context_extension(context,
                                          TJ_CONTEXT_EXTENSION_COMPILE_MEMO,
                                          memo_create, memo_destroy, &state));
  *out = state;
  return NULL;
}

//===--- the key ---===//

// Bytes gathered before they go to the hasher: one update per few hundred
// nodes instead of several per node (each update is length-prefixed).
typedef struct key_writer_t {
  tj_cache_hasher_t hasher;
  size_t used;
  unsigned char buffer[4096];
} key_writer_t;

static void put(key_writer_t* w, const void* data, size_t size) {
  if (size == 0) return;  // data may be NULL (an empty array)
  if (size > sizeof(w->buffer) - w->used) {
    if (w->used) tj_cache_hasher_update(&w->hasher, w->buffer, w->used);
    w->used = 0;
    if (size > sizeof(w->buffer)) {
      tj_cache_hasher_update(&w->hasher, data, size);
      return;
    }
  }
  memcpy(w->buffer + w->used, data, size);
  w->used += size;
}

static void put_i64(key_writer_t* w, int64_t v) { put(w, &v, sizeof(v)); }

static void put_string(key_writer_t* w, const char* s) {
  size_t n = s ? strlen(s) : 0;
  put_i64(w, s ? (int64_t)n : -1);
  if (n) put(w, s, n);
}

// A constant's bytes (its dims are constants).
static size_t constant_bytes(const tj_node_t* n) {
  size_t numel = 1;
  for (int32_t d = 0; d < n->rank; ++d) numel *= (size_t)n->dims[d];
  return numel * tj_dtype_size(n->dtype);
}

static void put_graph(key_writer_t* w, const tj_graph_t* g) {
  put_string(w, g->name);
  const tj_dimtab_t* t = &g->dims;
  put_i64(w, t->num_symbols);
  for (uint32_t s = 0; s < t->num_symbols; ++s) {
    put_string(w, t->symbol_names[s]);
    put_i64(w, t->symbol_bounds[s]);
  }
  put(w, &t->dynamic_symbols, sizeof(t->dynamic_symbols));
  put(w, &t->value_symbols, sizeof(t->value_symbols));
  // Expressions by their fields: the struct has padding.
  put_i64(w, t->num_exprs);
  for (uint32_t e = 0; e < t->num_exprs; ++e) {
    const tj_dim_expr_t* x = &t->exprs[e];
    put_i64(w, x->num_terms);
    for (uint8_t k = 0; k < x->num_terms; ++k) {
      put_i64(w, x->terms[k].coeff);
      put(w, &x->terms[k].num_factors, 1);
      put(w, x->terms[k].factors, x->terms[k].num_factors);
    }
  }
  put_i64(w, g->num_nodes);
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    // One record for the fixed fields (the attributes' too, every count
    // before what it counts), then the arrays: a node costs a few puts
    // and some 50 bytes, not a dozen puts and twice the bytes (a rebuilt
    // graph's compile is this walk).
    const tj_attrs_t* a = &n->attrs;
    size_t name_len = a->name ? strlen(a->name) : 0;
    uint32_t head[6] = {(uint32_t)n->op,
                        (uint32_t)n->dtype,
                        (uint32_t)n->rank,
                        n->num_operands,
                        a->num_ints,
                        (uint32_t)a->keepdims | (uint32_t)a->approximate << 1 |
                            (uint32_t)a->borrowed << 2 |
                            (uint32_t)(a->name != NULL) << 3};
    unsigned char record[sizeof(head) + 3 * sizeof(int64_t)];
    int64_t len = (int64_t)name_len;
    memcpy(record, head, sizeof(head));
    memcpy(record + sizeof(head), &a->axis, sizeof(int64_t));
    memcpy(record + sizeof(head) + 8, &a->value, sizeof(double));
    memcpy(record + sizeof(head) + 16, &len, sizeof(int64_t));
    put(w, record, sizeof(record));
    if (n->rank) put(w, n->dims, sizeof(int64_t) * (size_t)n->rank);
    if (n->num_operands)
      put(w, n->operands, sizeof(uint32_t) * n->num_operands);
    if (a->num_ints) put(w, a->ints, sizeof(int64_t) * a->num_ints);
    if (name_len) put(w, a->name, name_len);
    if (n->op == TJ_OP_CONSTANT && n->attrs.data)
      put(w, n->attrs.data, constant_bytes(n));
  }
  put_i64(w, g->num_inputs);
  put(w, g->inputs, sizeof(uint32_t) * g->num_inputs);
  put_i64(w, g->num_outputs);
  for (uint32_t o = 0; o < g->num_outputs; ++o) {
    put_i64(w, g->outputs[o].node);
    put_string(w, g->outputs[o].name);
  }
  put_i64(w, g->num_guards);
  for (uint32_t k = 0; k < g->num_guards; ++k) {
    int64_t guard[3] = {g->guards[k].a, g->guards[k].b, g->guards[k].node};
    put(w, guard, sizeof(guard));
  }
}

enum { kGraphUnknown = 0, kGraphKeyed = 1, kGraphNotMemoized = 2 };

// The graph's part of the key, computed once per graph: a finalized
// graph does not change, so a warm compile of the same graph costs no
// walk over its nodes.
static bool graph_key(const tj_graph_t* graph, uint64_t out[2]) {
  tj_graph_t* g = (tj_graph_t*)graph;  // only the atomic cache is written
  int state = atomic_load_explicit(&g->memo_state, memory_order_acquire);
  if (state == kGraphUnknown) {
    state = kGraphKeyed;
    // Borrowed constants are the caller's memory: the core would keep
    // pointing at the first graph's.
    for (uint32_t i = 0; i < g->num_nodes && state == kGraphKeyed; ++i) {
      if (g->nodes[i].op == TJ_OP_CONSTANT && g->nodes[i].attrs.borrowed)
        state = kGraphNotMemoized;
    }
    if (state == kGraphKeyed) {
      key_writer_t* w = &(key_writer_t){.used = 0};
      tj_cache_hasher_initialize(&w->hasher);
      put_graph(w, g);
      if (w->used) tj_cache_hasher_update(&w->hasher, w->buffer, w->used);
      tj_cache_key_t k = tj_cache_hasher_finalize(&w->hasher);
      atomic_store_explicit(&g->memo_key[0], k.lo, memory_order_relaxed);
      atomic_store_explicit(&g->memo_key[1], k.hi, memory_order_relaxed);
    }
    // Threads racing here store the same values.
    atomic_store_explicit(&g->memo_state, state, memory_order_release);
  }
  if (state != kGraphKeyed) return false;
  out[0] = atomic_load_explicit(&g->memo_key[0], memory_order_relaxed);
  out[1] = atomic_load_explicit(&g->memo_key[1], memory_order_relaxed);
  return true;
}

bool tj_compile_memo_key(const tj_graph_t* graph,
                         const tj_compile_options_t* opts,
                         const tj_backend_t* backend, tj_cache_key_t* out_key) {
  // What a memo hit could not honour: a backend whose runs are not known
  // to be safe to share between executables, specializations (compiled
  // into the shared target under each executable's own lock), pass lists
  // and bisection (strings), and logs that describe the compile's work.
  uint32_t compile_logs = TJ_LOG_PASSES | TJ_LOG_FUSION | TJ_LOG_CACHE |
                          TJ_LOG_GRAPH_BREAKS | TJ_LOG_AUTOTUNE;
  uint64_t gk[2];
  if (backend != &tj_backend_x86 || opts->specialize != TJ_SPECIALIZE_NEVER ||
      opts->pipeline || opts->bisect || opts->unfused ||
      (tj_log_flags(graph->context) & compile_logs) || !graph_key(graph, gk)) {
    return false;
  }
  key_writer_t* w = &(key_writer_t){.used = 0};
  tj_cache_hasher_initialize(&w->hasher);
  put_string(w, "tensorjit compile memo 1");
  put_string(w, backend->name);
  int64_t o[7] = {opts->target,
                  opts->specialize_after,
                  opts->bucket_pow2,
                  opts->autotune,
                  opts->verify_each,
                  opts->x86.num_threads,
                  opts->x86.autotune_budget_ms};
  put(w, o, sizeof(o));
  put(w, &opts->x86.parallel_for, sizeof(opts->x86.parallel_for));
  put(w, &opts->x86.parallel_for_user_data,
      sizeof(opts->x86.parallel_for_user_data));
  put_string(w, opts->cache_dir);
  put(w, gk, sizeof(gk));
  tj_cache_hasher_update(&w->hasher, w->buffer, w->used);
  *out_key = tj_cache_hasher_finalize(&w->hasher);
  return true;
}

static bool key_equal(tj_cache_key_t a, tj_cache_key_t b) {
  return a.lo == b.lo && a.hi == b.hi;
}

// tj_executable_retain unless its last reference is already gone (its
// destroy() is waiting for the memo's lock to forget it).
static bool retain_live(tj_executable_t* exe) {
  int refs = atomic_load(&exe->refs);
  while (refs > 0) {
    if (atomic_compare_exchange_weak(&exe->refs, &refs, refs + 1)) return true;
  }
  return false;
}

tj_status_t tj_compile_memo_find(tj_context_t* context, tj_cache_key_t key,
                                 tj_executable_t** out_core) {
  *out_core = NULL;
  memo_t* m;
  TJ_RETURN_IF_ERROR(memo_of(context, &m));
  pthread_mutex_lock(&m->mutex);
  for (int i = 0; i < kMemoEntries; ++i) {
    memo_entry_t* e = &m->entries[i];
    if (!e->core || !key_equal(e->key, key)) continue;
    if (e->retired) {
      // Revived: the memo's reference becomes the caller's, and the core
      // holds the context again.
      e->retired = false;
      atomic_store(&e->core->refs, 1);
      tj_context_retain(e->core->context);
    } else if (!retain_live(e->core)) {
      continue;
    }
    e->used = ++m->clock;
    *out_core = e->core;
    break;
  }
  pthread_mutex_unlock(&m->mutex);
  return NULL;
}

tj_status_t tj_compile_memo_store(tj_context_t* context, tj_cache_key_t key,
                                  tj_executable_t* core) {
  memo_t* m;
  TJ_RETURN_IF_ERROR(memo_of(context, &m));
  pthread_mutex_lock(&m->mutex);
  memo_entry_t* slot = NULL;
  bool present = false;
  for (int i = 0; i < kMemoEntries && !present; ++i) {
    memo_entry_t* e = &m->entries[i];
    // Another thread compiled the same graph meanwhile: keep its core.
    present = e->core && key_equal(e->key, key);
    if (!slot || !e->core || (slot->core && e->used < slot->used)) slot = e;
  }
  tj_executable_t* evicted = NULL;
  if (!present) {
    // The least recently used entry, when every one is taken, is no
    // longer found: a live executable's retire finds no entry then, a
    // retired one is freed.
    if (slot->core && slot->retired) evicted = slot->core;
    slot->key = key;
    slot->core = core;
    slot->retired = false;
    slot->used = ++m->clock;
    core->memoized = true;
  }
  pthread_mutex_unlock(&m->mutex);
  if (evicted) tj_executable_destroy_retired(evicted);
  return NULL;
}

// The bytes of |g|'s constants (what a retired core keeps that may be
// large; its code and plan are small beside a model's weights).
static size_t graph_constant_bytes(const tj_graph_t* g) {
  size_t bytes = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_CONSTANT && n->attrs.data) bytes += constant_bytes(n);
  }
  return bytes;
}

bool tj_compile_memo_retire(tj_context_t* context, tj_executable_t* core) {
  memo_t* m;
  tj_status_t status = memo_of(context, &m);  // exists: |core| was stored
  tj_status_free(status);
  if (status) return false;
  // No run is under way: its last reference is gone.
  const tj_backend_t* b = core->backend;
  if (b->trim && core->opened) b->trim(core->target);
  size_t bytes = graph_constant_bytes(core->graph);
  int32_t max_retired = tj_context_retain_compiled(context);
  tj_executable_t* evicted[kMemoEntries];
  int num_evicted = 0;
  bool kept = false;
  pthread_mutex_lock(&m->mutex);
  memo_entry_t* mine = NULL;
  for (int i = 0; i < kMemoEntries && !mine; ++i) {
    if (m->entries[i].core == core) mine = &m->entries[i];
  }
  if (mine && max_retired > 0 && bytes <= kRetiredBytes) {
    mine->retired = true;
    mine->bytes = bytes;
    kept = true;
    // Over the bounds: the least recently used other retired cores go.
    for (;;) {
      int count = 0;
      size_t total = 0;
      memo_entry_t* oldest = NULL;
      for (int i = 0; i < kMemoEntries; ++i) {
        memo_entry_t* e = &m->entries[i];
        if (!e->core || !e->retired) continue;
        ++count;
        total += e->bytes;
        if (e != mine && (!oldest || e->used < oldest->used)) oldest = e;
      }
      if ((count <= max_retired && total <= kRetiredBytes) || !oldest) break;
      evicted[num_evicted++] = oldest->core;
      oldest->core = NULL;
      oldest->retired = false;
    }
  } else if (mine) {
    mine->core = NULL;
  }
  pthread_mutex_unlock(&m->mutex);
  for (int i = 0; i < num_evicted; ++i)
    tj_executable_destroy_retired(evicted[i]);
  return kept;
}
