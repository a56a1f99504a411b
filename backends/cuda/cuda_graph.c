// backends/cuda/cuda_graph.c
//
// CUDA graphs of a CUDA program (cuda_program.h): when a run has no graph
// break, its kernel launches (custom ops' device steps among them) are
// captured into a graph keyed by the
// symbols, every kernel argument, the arena base and every GEMM's
// candidate, and the graph is replayed while the key repeats (a few are
// kept, the least recently used replaced). A key that differs from a kept
// one only in the arguments updates that graph in place.

#include <string.h>

#include "backends/cuda/cuda_program.h"

// The legacy default stream (NULL, or CU_STREAM_LEGACY) and the
// per-thread one (CU_STREAM_PER_THREAD), which cuStreamBeginCapture
// refuses.
static bool is_default_stream(tj_cu_stream_t stream) {
  uintptr_t v = (uintptr_t)stream;
  return v == 0 || v == 1 || v == 2;
}

// Captures every kernel launch of this run into a CUDA graph, *out_graph
// (the caller destroys it). On failure the stream is out of capture mode
// again.
static tj_status_t capture(tj_cuda_program_t* p, tj_cu_graph_t* out_graph) {
  tj_cuda_device_t* d = p->device;
  const tj_cuda_symbols_t* cu = &d->cu;
  *out_graph = NULL;
  // The default streams cannot be captured, and torch's current stream is
  // the legacy one unless the caller chose another: the launches are then
  // captured on a stream of the program's own (nothing runs there), and
  // the graph is launched on the program's stream as any other.
  tj_cu_stream_t run_stream = p->stream;
  if (is_default_stream(run_stream)) {
    if (!p->graphs.capture_stream)
      TJ_CU_RETURN_IF_ERROR(
          cu, cuStreamCreate,
          (&p->graphs.capture_stream, TJ_CU_STREAM_NON_BLOCKING));
    p->stream = p->graphs.capture_stream;
  }
  tj_status_t status =
      TJ_CU_STATUS(cu, cuStreamBeginCapture,
                   (p->stream, TJ_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  if (status) {
    p->stream = run_stream;
    return status;
  }
  int64_t ignored = 0;
  status = tj_cuda_program_launch_steps(p, &ignored);
  tj_cu_graph_t graph = NULL;
  tj_status_t end = TJ_CU_STATUS(cu, cuStreamEndCapture, (p->stream, &graph));
  p->stream = run_stream;
  if (!status)
    status = end;
  else
    tj_status_free(end);
  if (status) {
    if (graph) (void)cu->cuGraphDestroy(graph);
    return status;
  }
  *out_graph = graph;
  ++p->stats.graph_captures;
  return NULL;
}

// Instantiates |graph| into slot |e|.
static tj_status_t instantiate(tj_cuda_program_t* p, tj_cuda_graph_entry_t* e,
                               tj_cu_graph_t graph) {
  const tj_cuda_symbols_t* cu = &p->device->cu;
  tj_cu_graph_exec_t exec = NULL;
  TJ_CU_RETURN_IF_ERROR(cu, cuGraphInstantiate, (&exec, graph, 0));
  if (e->valid) (void)cu->cuGraphExecDestroy(e->exec);
  e->exec = exec;
  e->valid = true;
  ++p->stats.graph_instantiations;
  return NULL;
}

// Whether keys |a| and |b| differ at most in the kernel arguments: the
// same symbols, arena, GEMM candidates and custom steps, so the same
// kernels at the same launch shapes, which cuGraphExecUpdate can take.
static bool same_but_arguments(const tj_cuda_program_t* p, const int64_t* a,
                               const int64_t* b, size_t klen) {
  size_t nsym = p->plan.num_symbols, rest = nsym + p->run.num_args;
  return memcmp(a, b, sizeof(int64_t) * nsym) == 0 &&
         memcmp(a + rest, b + rest, sizeof(int64_t) * (klen - rest)) == 0;
}

// Points slot |e|'s graph at this run's arguments by updating it from
// |graph|, a capture of the same kernels; false when the driver refuses
// (|e| is then unchanged).
static bool update(tj_cuda_program_t* p, tj_cuda_graph_entry_t* e,
                   tj_cu_graph_t graph) {
  const tj_cuda_symbols_t* cu = &p->device->cu;
  // CUgraphExecUpdateResultInfo's storage; only the result code is used.
  _Alignas(8) unsigned char info[TJ_CU_GRAPH_UPDATE_INFO_BYTES];
  tj_cu_result_t r = cu->cuGraphExecUpdate(
      e->exec, graph, (tj_cu_graph_update_info_t*)(void*)info);
  if (r != TJ_CUDA_SUCCESS) return false;
  ++p->stats.graph_updates;
  return true;
}

// Launches the run's kernels through a CUDA graph for its key. A miss
// captures the run and instantiates it into a free slot, else, when a
// slot holds the same kernels on other buffers (a caller cycling through
// more output buffers than there are slots, or fresh torch tensors each
// call), updates the least recently used such graph in place, which costs
// a fraction of instantiating one; else it replaces the least recently
// used slot.
tj_status_t tj_cuda_graph_run(tj_cuda_program_t* p, const int64_t* sym,
                              bool* out_fallback) {
  *out_fallback = false;
  size_t klen = tj_cuda_graph_key_len(p);
  int64_t* key = p->run.key;
  memcpy(key, sym, sizeof(int64_t) * p->plan.num_symbols);
  key += p->plan.num_symbols;
  memcpy(key, p->run.argv, sizeof(uint64_t) * p->run.num_args);
  key += p->run.num_args;
  *key++ = (int64_t)p->run.arena;
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    *key++ = p->gemm.tunes ? p->gemm.tunes[k].current : 0;
  }
  key = tj_cuda_custom_key(p, key);
  tj_cuda_graph_entry_t* hit = NULL;
  tj_cuda_graph_entry_t* sibling = NULL;
  tj_cuda_graph_entry_t* victim = &p->graphs.entries[0];
  for (int i = 0; i < TJ_CUDA_MAX_GRAPHS; ++i) {
    tj_cuda_graph_entry_t* e = &p->graphs.entries[i];
    if (e->valid && memcmp(e->key, p->run.key, sizeof(int64_t) * klen) == 0) {
      hit = e;
      break;
    }
    if (!e->valid || (victim->valid && e->last_use < victim->last_use))
      victim = e;
  }
  if (!hit) {
    // Only a miss looks for a graph of the same kernels to update.
    for (int i = 0; i < TJ_CUDA_MAX_GRAPHS; ++i) {
      tj_cuda_graph_entry_t* e = &p->graphs.entries[i];
      if (e->valid && same_but_arguments(p, e->key, p->run.key, klen) &&
          (!sibling || e->last_use < sibling->last_use))
        sibling = e;
    }
    tj_cu_graph_t graph = NULL;
    tj_status_t status = capture(p, &graph);
    if (!status) {
      // A free slot first, so that a few buffers used in turn (double
      // buffering) all stay cached; then the least recently used graph of
      // the same kernels, updated.
      if (victim->valid && sibling && update(p, sibling, graph)) {
        hit = sibling;
      } else {
        hit = victim->valid && sibling ? sibling : victim;
        status = instantiate(p, hit, graph);
      }
      (void)p->device->cu.cuGraphDestroy(graph);
    }
    if (status) {
      // Capture is refused under some debuggers: plain launches still
      // work.
      tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                            "cuda: CUDA graph capture failed (%s); launching "
                            "kernels one by one from now on",
                            tj_status_message(status));
      tj_status_free(status);
      p->graphs.enabled = false;
      *out_fallback = true;
      return NULL;
    }
    memcpy(hit->key, p->run.key, sizeof(int64_t) * klen);
  }
  hit->last_use = ++p->graphs.clock;
  ++p->stats.graph_launches;
  return TJ_CU_STATUS(&p->device->cu, cuGraphLaunch, (hit->exec, p->stream));
}

void tj_cuda_graph_destroy_execs(tj_cuda_program_t* p) {
  tj_cuda_device_t* d = p->device;
  for (int i = 0; i < TJ_CUDA_MAX_GRAPHS; ++i) {
    if (p->graphs.entries[i].valid)
      (void)d->cu.cuGraphExecDestroy(p->graphs.entries[i].exec);
  }
  if (p->graphs.capture_stream)
    (void)d->cu.cuStreamDestroy(p->graphs.capture_stream);
  p->graphs.capture_stream = NULL;
}
