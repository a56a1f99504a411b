// backends/cuda/cuda_graph.c
//
// CUDA graphs of a CUDA program (cuda_program.h): when a run has no graph
// break, its kernel launches (custom ops' device steps among them) are
// captured into a graph keyed by the
// symbols, every kernel argument, the arena base and every GEMM's
// candidate, and the graph is replayed while the key repeats (a few are
// kept, the least recently used replaced).

#include <string.h>

#include "backends/cuda/cuda_program.h"

// Captures every kernel launch of this run into a CUDA graph, in slot
// |e|. On failure the stream is out of capture mode again.
static tj_status_t capture(tj_cuda_program_t* p, tj_cuda_graph_entry_t* e) {
  tj_cuda_device_t* d = p->device;
  const tj_cuda_symbols_t* cu = &d->cu;
  TJ_CU_RETURN_IF_ERROR(cu, cuStreamBeginCapture,
                        (p->stream, TJ_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int64_t ignored = 0;
  tj_status_t status = tj_cuda_program_launch_steps(p, &ignored);
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
  ++p->stats.graph_captures;
  return NULL;
}

// Launches the run's kernels through a CUDA graph for its key (capturing
// one when none matches); see cuda_program.h.
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
    tj_status_t status = capture(p, victim);
    if (status) {
      // Capture is refused on the legacy stream and under some debuggers:
      // plain launches still work.
      tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                            "cuda: CUDA graph capture failed (%s); launching "
                            "kernels one by one from now on",
                            tj_status_message(status));
      tj_status_free(status);
      p->graphs.enabled = false;
      *out_fallback = true;
      return NULL;
    }
    memcpy(victim->key, p->run.key, sizeof(int64_t) * klen);
    hit = victim;
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
}
