// backends/cuda/cuda_custom.c
//
// Custom ops with a CUDA implementation (tj_custom_op_desc_t.cuda_ptx) as
// device steps of a CUDA program (cuda_program.h): each CUSTOM step's PTX
// loaded as a module of its own when the program finishes, its launch
// shape (the op's callback) and parameters computed with every kernel's
// arguments, and its launch enqueued between the kernels on the program's
// stream, inside the run's CUDA graph when there is one.

#include <string.h>

#include "backends/cuda/cuda_program.h"
#include "lib/custom_op.h"
#include "lib/ir.h"

static void custom_free_args(tj_cuda_program_t* p, tj_cuda_custom_t* c) {
  tj_free(p->al, c->argv, c->argv ? sizeof(uint64_t) * (c->num_params + 1) : 0);
  tj_free(p->al, c->argp, c->argp ? sizeof(void*) * (c->num_params + 1) : 0);
  c->argv = NULL;
  c->argp = NULL;
}

tj_status_t tj_cuda_custom_setup(tj_cuda_program_t* p) {
  const tj_graph_t* g = p->plan.graph;
  uint32_t n = 0;
  for (uint32_t s = 0; s < p->plan.num_steps; ++s)
    n += p->plan.steps[s].kind == TJ_CUDA_STEP_CUSTOM;
  if (n == 0) return NULL;
  p->custom.ops = tj_calloc(p->al, n, sizeof(tj_cuda_custom_t));
  if (!p->custom.ops) return tj_status_oom();
  p->custom.num = n;
  uint32_t i = 0;
  for (uint32_t s = 0; s < p->plan.num_steps; ++s) {
    tj_cuda_step_t* st = &p->plan.steps[s];
    if (st->kind != TJ_CUDA_STEP_CUSTOM) continue;
    tj_cuda_custom_t* c = &p->custom.ops[i];
    st->custom = i++;
    c->op = st->host->call;
    c->node = st->host->call_node;
    const tj_node_t* node = &g->nodes[c->node];
    uint32_t params = 1 + node->num_operands + (uint32_t)node->rank;
    for (uint32_t k = 0; k < node->num_operands; ++k)
      params += (uint32_t)g->nodes[node->operands[k]].rank;
    tj_custom_attrs_t attrs;
    double floats[TJ_CUSTOM_MAX_ATTRS];
    tj_custom_attrs_of(&node->attrs, &attrs, floats);
    params += (uint32_t)(attrs.num_ints + attrs.num_floats);
    c->num_params = params;
    c->argv = tj_calloc(p->al, params + 1, sizeof(uint64_t));
    c->argp = tj_calloc(p->al, params + 1, sizeof(void*));
    if (!c->argv || !c->argp) return tj_status_oom();
    for (uint32_t k = 0; k < params; ++k) c->argp[k] = &c->argv[k];
    // The parameters and the launch shape (7 values) are in the graph key.
    p->custom.key_len += params + 7;
  }
  return NULL;
}

tj_status_t tj_cuda_custom_load(tj_cuda_program_t* p) {
  for (uint32_t i = 0; i < p->custom.num; ++i) {
    tj_cuda_custom_t* c = &p->custom.ops[i];
    tj_status_t status =
        tj_cuda_module_load(p->device, c->op->cuda_ptx, &c->module);
    if (!status) {
      status = tj_cuda_kernel_get(c->module, c->op->cuda_entry, 0, &c->fn);
    }
    if (status) {
      return tj_status_annotate(status,
                                "custom op %s (node %u): its CUDA "
                                "implementation (entry %s) did not load",
                                c->op->name, c->node, c->op->cuda_entry);
    }
  }
  return NULL;
}

void tj_cuda_custom_release(tj_cuda_program_t* p) {
  for (uint32_t i = 0; i < p->custom.num; ++i) {
    tj_cuda_custom_t* c = &p->custom.ops[i];
    tj_cuda_module_destroy(c->module);
    custom_free_args(p, c);
  }
  tj_free(p->al, p->custom.ops,
          p->custom.ops ? sizeof(tj_cuda_custom_t) * p->custom.num : 0);
  p->custom.ops = NULL;
  p->custom.num = 0;
}

// The concrete type of plan node |index|.
static tj_status_t concrete_type(const tj_graph_t* g, uint32_t index,
                                 const int64_t* sym, tj_custom_type_t* out) {
  memset(out, 0, sizeof(*out));
  out->dtype = g->nodes[index].dtype;
  out->rank = g->nodes[index].rank;
  return tj_ir_concrete_dims(g, index, sym, out->dims);
}

static tj_status_t custom_args(tj_cuda_program_t* p, tj_cuda_custom_t* c,
                               const int64_t* sym) {
  const tj_graph_t* g = p->plan.graph;
  const tj_node_t* node = &g->nodes[c->node];
  uint32_t ni = node->num_operands;
  tj_custom_type_t out_type;
  tj_custom_type_t in_types[64];
  TJ_RETURN_IF_ERROR(concrete_type(g, c->node, sym, &out_type));
  for (uint32_t k = 0; k < ni; ++k) {
    TJ_RETURN_IF_ERROR(concrete_type(g, node->operands[k], sym, &in_types[k]));
  }
  tj_custom_attrs_t attrs;
  double floats[TJ_CUSTOM_MAX_ATTRS];
  tj_custom_attrs_of(&node->attrs, &attrs, floats);
  uint64_t* a = c->argv;
  *a++ = p->run.loc[c->node];
  for (uint32_t k = 0; k < ni; ++k) *a++ = p->run.loc[node->operands[k]];
  for (int32_t d = 0; d < out_type.rank; ++d)
    memcpy(a++, &out_type.dims[d], sizeof(int64_t));
  for (uint32_t k = 0; k < ni; ++k) {
    for (int32_t d = 0; d < in_types[k].rank; ++d)
      memcpy(a++, &in_types[k].dims[d], sizeof(int64_t));
  }
  for (int32_t k = 0; k < attrs.num_ints; ++k)
    memcpy(a++, &attrs.ints[k], sizeof(int64_t));
  for (int32_t k = 0; k < attrs.num_floats; ++k)
    memcpy(a++, &attrs.floats[k], sizeof(double));
  if ((uint32_t)(a - c->argv) != c->num_params)
    return tj_internal("custom op %s (node %u): %u parameters, %u expected",
                       c->op->name, c->node, (unsigned)(a - c->argv),
                       c->num_params);
  tj_custom_launch_t l;
  memset(&l, 0, sizeof(l));
  tj_status_t status = c->op->cuda_launch(c->op->user_data, in_types,
                                          (int32_t)ni, &attrs, &out_type, &l);
  if (status) {
    return tj_status_annotate(status, "custom op %s (node %u): launch shape",
                              c->op->name, c->node);
  }
  memset(&c->launch, 0, sizeof(c->launch));
  c->launch.empty = false;
  for (int d = 0; d < 3; ++d) {
    c->launch.grid[d] = l.grid[d];
    c->launch.block[d] = l.block[d];
    if (l.grid[d] == 0 || l.block[d] == 0) c->launch.empty = true;
  }
  c->launch.shared_bytes = l.shared_bytes;
  uint64_t threads = (uint64_t)l.block[0] * l.block[1] * l.block[2];
  if (!c->launch.empty && threads > (uint64_t)c->fn.max_threads) {
    return tj_invalid(
        "custom op %s (node %u): launch shape: a block of %llu threads "
        "exceeds the kernel's limit of %d",
        c->op->name, c->node, (unsigned long long)threads, c->fn.max_threads);
  }
  if (l.shared_bytes > 48 * 1024) {
    return tj_invalid(
        "custom op %s (node %u): launch shape: %u bytes of dynamic shared "
        "memory exceed 48 KiB",
        c->op->name, c->node, l.shared_bytes);
  }
  return NULL;
}

tj_status_t tj_cuda_custom_args(tj_cuda_program_t* p, const int64_t* sym) {
  for (uint32_t i = 0; i < p->custom.num; ++i) {
    TJ_RETURN_IF_ERROR(custom_args(p, &p->custom.ops[i], sym));
  }
  return NULL;
}

int64_t* tj_cuda_custom_key(const tj_cuda_program_t* p, int64_t* key) {
  for (uint32_t i = 0; i < p->custom.num; ++i) {
    const tj_cuda_custom_t* c = &p->custom.ops[i];
    memcpy(key, c->argv, sizeof(uint64_t) * c->num_params);
    key += c->num_params;
    for (int d = 0; d < 3; ++d) {
      *key++ = c->launch.grid[d];
      *key++ = c->launch.block[d];
    }
    *key++ = (int64_t)c->launch.shared_bytes;
  }
  return key;
}

bool tj_cuda_custom_any_launch(const tj_cuda_program_t* p) {
  for (uint32_t i = 0; i < p->custom.num; ++i) {
    if (!p->custom.ops[i].launch.empty) return true;
  }
  return false;
}

tj_status_t tj_cuda_custom_launch(tj_cuda_program_t* p, uint32_t index,
                                  int64_t* launched) {
  tj_cuda_custom_t* c = &p->custom.ops[index];
  if (c->launch.empty) return NULL;
  tj_status_t status = tj_cuda_program_launch_function(
      p, c->fn.function, &c->launch, c->argp, c->op->cuda_entry);
  if (status) {
    return tj_status_annotate(status, "custom op %s (node %u)", c->op->name,
                              c->node);
  }
  ++*launched;
  return NULL;
}
