// backends/cuda/cuda_run.c
//
// Running a CUDA program (cuda_program.h): the run's plan (where every
// value lives in the arena, the staging of CPU and strided tensors, the
// GEMM temporaries), every kernel's scalars, arguments and grid, the
// launches (through a CUDA graph when there is no graph break), the graph
// breaks run on the host by the reference interpreter, the outputs' copies
// back, and the stats.

#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_program.h"
#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/ir.h"

tj_status_t tj_cuda_program_launch_function(tj_cuda_program_t* p,
                                            tj_cu_function_t fn,
                                            const tj_nvptx_launch_t* l,
                                            void** args, const char* entry) {
  if (l->empty) return NULL;
  if (l->zero_bytes) {
    uint64_t out = *(const uint64_t*)args[l->zero_buffer];
    TJ_RETURN_IF_ERROR(
        tj_status_annotate(TJ_CU_STATUS(&p->device->cu, cuMemsetD8Async,
                                        (out, 0, l->zero_bytes, p->stream)),
                           "kernel %s: zeroing its output", entry));
  }
  return tj_status_annotate(
      tj_cuda_launch_on(&p->device->cu, fn, l->grid, l->block, l->shared_bytes,
                        l->cluster, l->programmatic, p->stream, args),
      "kernel %s", entry);
}

static bool output_direct(const tj_cuda_program_t* p, uint32_t i) {
  uint32_t node = p->plan.graph->outputs[i].node;
  uint32_t bi = p->plan.mp->buffer_of[node];
  return p->plan.first_output[node] == (int32_t)i && bi != UINT32_MAX &&
         p->plan.mp->buffers[bi].kind == TJ_BUFFER_OUTPUT;
}

static tj_status_t kernel_scalars(tj_cuda_program_t* p, uint32_t ki,
                                  const int64_t* sym);

// Arena and pinned layout of this run; grows both as needed.
static tj_status_t plan_run(tj_cuda_program_t* p, const int64_t* sym,
                            const tj_tensor_t* inputs,
                            const tj_tensor_t* outputs, bool* out_uses_host) {
  const tj_graph_t* g = p->plan.graph;
  int64_t arena_bytes;
  TJ_RETURN_IF_ERROR(tj_memplan_evaluate(p->plan.mp, g, sym,
                                         p->run.slot_offsets, &arena_bytes));
  int64_t total = tj_cuda_align_up(arena_bytes, TJ_CUDA_STAGE_ALIGN);
  int64_t pin = 0;
  bool host = false;
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* t = &inputs[i];
    TJ_RETURN_IF_ERROR(tj_cuda_check_device_tensor(
        p, t, "input", g->nodes[g->inputs[i]].attrs.name));
    p->run.in_stage[i] = p->run.in_pin[i] = -1;
    int64_t bytes =
        tj_cuda_align_up(tj_cuda_tensor_bytes(t), TJ_CUDA_STAGE_ALIGN);
    if (t->device_type == TJ_DEVICE_CUDA) {
      // A strided one is gathered into dense staging.
      if (!tj_host_tensor_dense(t)) {
        p->run.in_stage[i] = total;
        total += bytes;
      }
      continue;
    }
    host = true;
    p->run.in_stage[i] = total;
    total += bytes;
    p->run.in_pin[i] = pin;
    pin += bytes;
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    TJ_RETURN_IF_ERROR(
        tj_cuda_check_device_tensor(p, t, "output", g->outputs[i].name));
    p->run.out_stage[i] = p->run.out_pin[i] = -1;
    int64_t bytes =
        tj_cuda_align_up(tj_cuda_tensor_bytes(t), TJ_CUDA_STAGE_ALIGN);
    if (t->device_type == TJ_DEVICE_CUDA) {
      // A strided one is written dense, then scattered.
      if (!tj_host_tensor_dense(t) && output_direct(p, i)) {
        p->run.out_stage[i] = total;
        total += bytes;
      }
      continue;
    }
    host = true;
    if (output_direct(p, i)) {
      p->run.out_stage[i] = total;
      total += bytes;
    }
    p->run.out_pin[i] = pin;
    pin += bytes;
  }
  // Kernel scalars, and the temporaries of GEMMs that may run as cuBLASLt
  // plus an epilogue kernel or as split-K (its partials).
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    TJ_RETURN_IF_ERROR(kernel_scalars(p, k, sym));
    tj_cuda_gemm_tune_t* t = p->gemm.tunes ? &p->gemm.tunes[k] : NULL;
    if (!t) continue;
    t->split_offset = -1;
    int64_t split = tj_cuda_gemm_split_bytes(
        p, k, p->run.scalars + (size_t)k * TJ_KIR_MAX_PARAMS);
    if (split > 0) {
      t->split_offset = total;
      total += tj_cuda_align_up(split, TJ_CUDA_STAGE_ALIGN);
    }
    if (!t->lt_ok) continue;
    t->temp_offset = -1;
    if (t->lt_direct) continue;  // cuBLASLt writes the output itself
    if (!p->gemm.autotune && p->gemm.forced != TJ_CUDA_GEMM_CUBLASLT) continue;
    const tj_kir_t* gk = p->kernels[k].low->kernel;
    const int64_t* sc = p->run.scalars + (size_t)k * TJ_KIR_MAX_PARAMS;
    int64_t bytes = tj_kir_ival_eval(gk->dims[0], sc) *
                    tj_kir_ival_eval(gk->dims[1], sc) *
                    (int64_t)tj_dtype_size(t->acc_dtype);
    t->temp_offset = total;
    total += tj_cuda_align_up(bytes > 0 ? bytes : 1, TJ_CUDA_STAGE_ALIGN);
    // A dual GEMM's second product (swiglu, issue 14).
    t->temp2_offset = total;
    if (t->b2 != TJ_KIR_NONE)
      total += tj_cuda_align_up(bytes > 0 ? bytes : 1, TJ_CUDA_STAGE_ALIGN);
  }
  tj_cuda_device_t* d = p->device;
  if (total > p->run.arena_cap) {
    if (p->run.arena) {
      TJ_RETURN_IF_ERROR(
          tj_cuda_allocator_free(d->allocator, p->run.arena, p->stream));
      p->run.arena = 0;
      p->run.arena_cap = 0;
    }
    TJ_RETURN_IF_ERROR(tj_cuda_allocator_alloc(d->allocator, (size_t)total,
                                               p->stream, &p->run.arena));
    p->run.arena_cap = total;
    ++p->stats.arena_growths;
  }
  if (pin > p->run.pinned_cap) {
    // Runs that used the pinned buffer waited for their copies.
    tj_cuda_host_free(d, p->run.pinned);
    p->run.pinned = NULL;
    p->run.pinned_cap = 0;
    TJ_RETURN_IF_ERROR(tj_cuda_host_alloc(d, (size_t)pin, &p->run.pinned));
    p->run.pinned_cap = pin;
  }
  *out_uses_host = host;
  return NULL;
}

static tj_status_t kernel_scalars(tj_cuda_program_t* p, uint32_t ki,
                                  const int64_t* sym) {
  return tj_lowered_kernel_scalars(
      p->kernels[ki].low, p->plan.graph, sym,
      p->run.scalars + (size_t)ki * TJ_KIR_MAX_PARAMS);
}

static tj_status_t kernel_args(tj_cuda_program_t* p, uint32_t ki,
                               const int64_t* sym) {
  const tj_graph_t* g = p->plan.graph;
  tj_cuda_program_kernel_t* kern = &p->kernels[ki];
  const tj_lowered_kernel_t* low = kern->low;
  const tj_kir_t* k = low->kernel;
  int64_t* scalars = p->run.scalars + (size_t)ki * TJ_KIR_MAX_PARAMS;
  uint64_t* argv = p->run.argv + kern->arg_offset;
  for (uint32_t b = 0; b < low->num_buffers; ++b) {
    uint32_t node = low->buffer_nodes[b];
    int64_t off;
    TJ_RETURN_IF_ERROR(tj_lowered_kernel_buffer_offset(low, b, sym, &off));
    argv[b] = p->run.loc[node] +
              (uint64_t)(off * (int64_t)tj_dtype_size(g->nodes[node].dtype));
    // The quantized weight, its scale and zero point relaid for the
    // kernel (their offsets are 0).
    tj_kir_role_t role = k->buffers[b].role;
    if (kern->info.wq_tiled &&
        (role == TJ_KIR_GEMM_B || role == TJ_KIR_GEMM_BSCALE ||
         role == TJ_KIR_GEMM_BZERO))
      argv[b] = p->plan.wq_tiled_ptr[node];
    // A conv weight prepared for the kernel (tj_nvptx_conv_prepare_weight).
    if (kern->info.conv_prepared && role == TJ_KIR_CONV_W)
      argv[b] = p->plan.wq_tiled_ptr[node];
  }
  for (uint32_t i = 0; i < k->num_params; ++i) {
    memcpy(&argv[low->num_buffers + i], &scalars[i], sizeof(int64_t));
  }
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
      k, &kern->info, scalars, p->device->num_sms, &p->run.launches[ki]));
  if (!p->run.launches[ki].empty) {
    TJ_RETURN_IF_ERROR(tj_nvptx_gemm_check_pointers(k, &kern->info, argv));
  }
  return NULL;
}

static tj_status_t launch(tj_cuda_program_t* p, uint32_t ki) {
  return tj_cuda_gemm_launch(p, ki,
                             p->gemm.tunes ? p->gemm.tunes[ki].current : 0);
}

tj_status_t tj_cuda_program_launch_steps(tj_cuda_program_t* p,
                                         int64_t* launched) {
  for (uint32_t s = 0; s < p->plan.num_steps; ++s) {
    const tj_cuda_step_t* st = &p->plan.steps[s];
    if (st->kind == TJ_CUDA_STEP_KERNELS) {
      TJ_RETURN_IF_ERROR(tj_cuda_program_launch_range(
          p, st->first_kernel, st->num_kernels, launched));
    } else if (st->kind == TJ_CUDA_STEP_CUSTOM) {
      TJ_RETURN_IF_ERROR(tj_cuda_custom_launch(p, st->custom, launched));
    }
  }
  return NULL;
}

tj_status_t tj_cuda_program_launch_range(tj_cuda_program_t* p, uint32_t first,
                                         uint32_t count, int64_t* launched) {
  for (uint32_t i = first; i < first + count; ++i) {
    TJ_RETURN_IF_ERROR(launch(p, i));
    if (!p->run.launches[i].empty) ++*launched;
  }
  return NULL;
}

// A graph break: the values it reads copied down to host temporaries (CPU
// inputs are read where they are), the run plan's host step on them
// (tj_host_step_run, as on x86), the values it writes copied up.
// In a graph with data-dependent dims (tj_custom_dynamic_dim), a host
// call may set its symbols in |sym| (tj_host_step_run_dynamic): the
// values it reads and writes are copied at the sizes before the call (the
// bound, for its own output).
static tj_status_t run_host_step(tj_cuda_program_t* p, const tj_cuda_step_t* st,
                                 int64_t* sym, const tj_tensor_t* inputs) {
  const tj_host_step_t* h = st->host;
  const tj_graph_t* g = p->plan.graph;
  const tj_cuda_symbols_t* cu = &p->device->cu;
  tj_allocator_t al = p->al;
  // Values j: the graph's inputs, then |extra|, then the outputs.
  uint32_t ni = g->num_inputs, nread = ni + h->num_extra;
  uint32_t nt = nread + h->num_outputs;
  size_t per = sizeof(tj_tensor_t) + sizeof(int64_t) * TJ_MAX_RANK +
               sizeof(void*) + sizeof(size_t);
  size_t bytes = per * (nt + 1) + sizeof(unsigned char*) * (g->num_nodes + 1);
  unsigned char* block = tj_calloc(al, 1, bytes);
  if (!block) return tj_status_oom();
  tj_tensor_t* ins = (tj_tensor_t*)block;  // the first |ni| are used
  int64_t* shapes = (int64_t*)(ins + nt + 1);
  void** temps = (void**)(shapes + (size_t)TJ_MAX_RANK * (nt + 1));
  size_t* sizes = (size_t*)(temps + nt + 1);
  unsigned char** loc = (unsigned char**)(sizes + nt + 1);  // per plan node
  tj_status_t status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  for (uint32_t j = 0; j < nt && !status; ++j) {
    uint32_t node = j < ni      ? g->inputs[j]
                    : j < nread ? h->extra[j - ni]
                                : h->outputs[j - nread];
    if (j < ni && inputs[j].device_type == TJ_DEVICE_CPU) {
      ins[j] = inputs[j];
      continue;
    }
    const tj_node_t* n = &g->nodes[node];
    int64_t* shape = shapes + (size_t)TJ_MAX_RANK * j;
    status = tj_ir_concrete_dims(g, node, sym, shape);
    if (status) break;
    sizes[j] = (size_t)tj_host_numel(n->rank, shape) * tj_dtype_size(n->dtype);
    temps[j] = tj_alloc(al, sizes[j] ? sizes[j] : 1);
    if (!temps[j]) {
      status = tj_status_oom();
      break;
    }
    if (j < ni) {
      ins[j] = tj_tensor_make(temps[j], n->dtype, n->rank, shape);
    } else {
      loc[node] = temps[j];
    }
    if (j < nread && sizes[j]) {
      status = TJ_CU_STATUS(cu, cuMemcpyDtoHAsync,
                            (temps[j], p->run.loc[node], sizes[j], p->stream));
    }
  }
  if (!status) status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  if (!status) status = tj_host_step_run_dynamic(g, al, h, sym, ins, loc, NULL);
  for (uint32_t j = nread; j < nt && !status; ++j) {
    uint32_t node = h->outputs[j - nread];
    if (sizes[j]) {
      status = TJ_CU_STATUS(cu, cuMemcpyHtoDAsync,
                            (p->run.loc[node], temps[j], sizes[j], p->stream));
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
  tj_free(al, block, bytes);
  ++p->stats.host_steps;
  return status;
}

//===--- profiled runs ---===//

// The events of one profiled run: a pair per kernel, then the input and
// the output copies' pairs.
typedef struct run_events_t {
  tj_cu_event_t* ev;
  uint32_t count, created;
  size_t bytes;
} run_events_t;

static tj_status_t events_create(tj_cuda_program_t* p, run_events_t* e) {
  memset(e, 0, sizeof(*e));
  e->count = 2 * p->num_kernels + 4;
  e->bytes = sizeof(tj_cu_event_t) * e->count;
  e->ev = tj_calloc(p->al, 1, e->bytes);
  if (!e->ev) return tj_status_oom();
  for (; e->created < e->count; ++e->created) {
    TJ_CU_RETURN_IF_ERROR(&p->device->cu, cuEventCreate,
                          (&e->ev[e->created], 0));
  }
  return NULL;
}

static void events_destroy(tj_cuda_program_t* p, run_events_t* e) {
  for (uint32_t i = 0; i < e->created; ++i) {
    p->device->cu.cuEventDestroy(e->ev[i]);
  }
  tj_free(p->al, e->ev, e->bytes);
  memset(e, 0, sizeof(*e));
}

static tj_status_t record(tj_cuda_program_t* p, const run_events_t* e,
                          uint32_t i) {
  if (!e || !e->ev) return NULL;
  return TJ_CU_STATUS(&p->device->cu, cuEventRecord, (e->ev[i], p->stream));
}

static double elapsed(tj_cuda_program_t* p, const run_events_t* e,
                      uint32_t first) {
  float ms = 0;
  if (p->device->cu.cuEventElapsedTime(&ms, e->ev[first], e->ev[first + 1]) !=
      TJ_CUDA_SUCCESS) {
    return 0;  // a pair around nothing that was recorded
  }
  return ms;
}

//===--- observed runs ---===//

// backends/runtime/backend.h's step_observer_fn.
typedef tj_status_t (*step_observer_fn)(void* user, uint32_t step,
                                        unsigned char* const* loc);

// After step |st| of an observed run: host copies of its outputs, handed
// to |observe| (tj_cuda_program_run_observed).
static tj_status_t observe_step(tj_cuda_program_t* p, const tj_cuda_step_t* st,
                                const int64_t* sym, step_observer_fn observe,
                                void* user) {
  const tj_graph_t* g = p->plan.graph;
  const tj_cuda_symbols_t* cu = &p->device->cu;
  size_t loc_bytes = sizeof(unsigned char*) * (g->num_nodes + 1);
  unsigned char** loc = tj_calloc(p->al, 1, loc_bytes);
  size_t* sizes = tj_calloc(p->al, st->num_outputs + 1, sizeof(size_t));
  tj_status_t status = loc && sizes ? NULL : tj_status_oom();
  if (!status) status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  for (uint32_t j = 0; j < st->num_outputs && !status; ++j) {
    uint32_t node = st->outputs[j];
    const tj_node_t* n = &g->nodes[node];
    int64_t shape[TJ_MAX_RANK];
    status = tj_ir_concrete_dims(g, node, sym, shape);
    if (status || loc[node]) continue;
    sizes[j] = (size_t)tj_host_numel(n->rank, shape) * tj_dtype_size(n->dtype);
    loc[node] = tj_alloc(p->al, sizes[j] ? sizes[j] : 1);
    if (!loc[node]) {
      status = tj_status_oom();
    } else if (sizes[j] && p->run.loc[node]) {
      status = TJ_CU_STATUS(cu, cuMemcpyDtoHAsync,
                            (loc[node], p->run.loc[node], sizes[j], p->stream));
    }
  }
  if (!status) status = TJ_CU_STATUS(cu, cuStreamSynchronize, (p->stream));
  if (!status) status = observe(user, st->plan_step, loc);
  for (uint32_t j = 0; loc && sizes && j < st->num_outputs; ++j) {
    uint32_t node = st->outputs[j];
    if (!loc[node]) continue;
    tj_free(p->al, loc[node], sizes[j] ? sizes[j] : 1);
    loc[node] = NULL;
  }
  if (sizes) tj_free(p->al, sizes, sizeof(size_t) * (st->num_outputs + 1));
  if (loc) tj_free(p->al, loc, loc_bytes);
  return status;
}

static tj_status_t run_locked(tj_cuda_program_t* p, const int64_t* sym,
                              const tj_tensor_t* inputs,
                              const tj_tensor_t* outputs, tj_run_timing_t* tm,
                              const run_events_t* ev, step_observer_fn observe,
                              void* user) {
  double t_start = tm ? tj_now_ms() : 0;
  uint32_t copy_ev = 2 * p->num_kernels;  // in: +0, +1; out: +2, +3
  const tj_graph_t* g = p->plan.graph;
  const tj_memplan_t* mp = p->plan.mp;
  tj_cuda_device_t* d = p->device;
  const tj_cuda_symbols_t* cu = &d->cu;
  bool uses_host = false;
  TJ_RETURN_IF_ERROR(plan_run(p, sym, inputs, outputs, &uses_host));
  p->gemm.fresh_plan = false;
  unsigned char* pinned = p->run.pinned;
  // 1. Where every value lives.
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    uint64_t ptr = 0;
    switch (buf->kind) {
      case TJ_BUFFER_EXTERNAL:
        ptr = p->plan.const_ptr[buf->node];  // 0 for inputs, set below
        break;
      case TJ_BUFFER_OUTPUT: {
        int32_t o = p->plan.first_output[buf->node];
        const tj_tensor_t* t = &outputs[o];
        ptr = p->run.out_stage[o] < 0
                  ? (uint64_t)(uintptr_t)tj_host_tensor_data(t)
                  : p->run.arena + (uint64_t)p->run.out_stage[o];
        break;
      }
      case TJ_BUFFER_ARENA:
        ptr = p->run.arena + (uint64_t)p->run.slot_offsets[buf->slot];
        break;
      case TJ_BUFFER_ALIAS:
        break;
    }
    p->run.loc[buf->node] = ptr;
  }
  TJ_RETURN_IF_ERROR(record(p, ev, copy_ev));
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_tensor_t* t = &inputs[i];
    uint32_t node = g->inputs[i];
    if (t->device_type == TJ_DEVICE_CUDA) {
      if (p->run.in_stage[i] < 0) {
        p->run.loc[node] = (uint64_t)(uintptr_t)tj_host_tensor_data(t);
      } else {
        p->run.loc[node] = p->run.arena + (uint64_t)p->run.in_stage[i];
        TJ_RETURN_IF_ERROR(tj_cuda_strided_copy(p, t, p->run.loc[node], false));
      }
      continue;
    }
    p->run.loc[node] = p->run.arena + (uint64_t)p->run.in_stage[i];
    int64_t bytes = tj_cuda_tensor_bytes(t);
    if (bytes == 0) continue;
    tj_host_copy_strided(pinned + p->run.in_pin[i], NULL,
                         tj_host_tensor_data(t), t->strides, t->rank, t->shape,
                         tj_dtype_size(t->dtype));
    TJ_CU_RETURN_IF_ERROR(cu, cuMemcpyHtoDAsync,
                          (p->run.loc[node], pinned + p->run.in_pin[i],
                           (size_t)bytes, p->stream));
  }
  TJ_RETURN_IF_ERROR(record(p, ev, copy_ev + 1));
  for (uint32_t b = 0; b < mp->num_buffers; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    if (buf->kind == TJ_BUFFER_ALIAS)
      p->run.loc[buf->node] = p->run.loc[buf->alias_of];
  }
  // 2. Every kernel's arguments and grid.
  for (uint32_t k = 0; k < p->num_kernels; ++k) {
    TJ_RETURN_IF_ERROR(kernel_args(p, k, sym));
  }
  TJ_RETURN_IF_ERROR(tj_cuda_custom_args(p, sym));
  TJ_RETURN_IF_ERROR(tj_cuda_gemm_choose(p));
  // 3. The steps: one graph launch, or kernels and host steps in order.
  bool direct = true, any = false;
  uint32_t host_index = 0;    // HOST steps so far (the run plan's order)
  uint32_t kernels_done = 0;  // of the KERNELS steps so far
  // The symbols as the steps see them: a data-dependent host call binds
  // its output's (bound by tj_ir_bind_symbols to their upper bounds, at
  // which the memory was planned) to the actual sizes for the steps after.
  int64_t step_sym[TJ_MAX_SYMBOLS];
  memcpy(step_sym, sym, sizeof(step_sym));
  for (uint32_t k = 0; k < p->num_kernels; ++k)
    any |= !p->run.launches[k].empty;
  any |= tj_cuda_custom_any_launch(p);
  if (tm) {
    tm->graphs_disabled = p->graphs.enabled;
    tm->setup_ms += tj_now_ms() - t_start;
  }
  if (p->graphs.enabled && !p->plan.has_host_steps && any &&
      !p->gemm.fresh_plan && !tm && !observe) {
    bool fallback = false;
    TJ_RETURN_IF_ERROR(tj_cuda_graph_run(p, sym, &fallback));
    direct = fallback;
  }
  for (uint32_t s = 0; direct && s < p->plan.num_steps; ++s) {
    const tj_cuda_step_t* st = &p->plan.steps[s];
    if (st->kind == TJ_CUDA_STEP_KERNELS && tm) {
      for (uint32_t k = st->first_kernel;
           k < st->first_kernel + st->num_kernels; ++k) {
        TJ_RETURN_IF_ERROR(record(p, ev, 2 * k));
        TJ_RETURN_IF_ERROR(
            tj_cuda_program_launch_range(p, k, 1, &p->stats.kernel_launches));
        TJ_RETURN_IF_ERROR(record(p, ev, 2 * k + 1));
      }
    } else if (st->kind == TJ_CUDA_STEP_KERNELS) {
      TJ_RETURN_IF_ERROR(tj_cuda_program_launch_range(
          p, st->first_kernel, st->num_kernels, &p->stats.kernel_launches));
    }
    if (st->kind == TJ_CUDA_STEP_KERNELS) {
      kernels_done = st->first_kernel + st->num_kernels;
    } else if (st->kind == TJ_CUDA_STEP_CUSTOM) {
      // The run plan's host call, on the device: its host_ms stays 0.
      TJ_RETURN_IF_ERROR(
          tj_cuda_custom_launch(p, st->custom, &p->stats.kernel_launches));
      ++host_index;
    } else {
      // Profiled, the host step's time is its own: the kernels before it
      // finish first (their time is the events'), not inside its wait.
      if (tm) TJ_CU_RETURN_IF_ERROR(cu, cuStreamSynchronize, (p->stream));
      double start = tm ? tj_now_ms() : 0;
      TJ_RETURN_IF_ERROR(run_host_step(p, st, step_sym, inputs));
      if (tm && host_index < tm->num_host_steps) {
        tm->host_ms[host_index] += tj_now_ms() - start;
      }
      ++host_index;
      if (memcmp(step_sym, sym, sizeof(step_sym)) != 0) {
        // The generic kernels after it run at the actual sizes: their
        // scalars, arguments (views' offsets) and grids again; the values
        // stay where the bound's plan put them. No recompile.
        for (uint32_t k = kernels_done; k < p->num_kernels; ++k) {
          TJ_RETURN_IF_ERROR(kernel_scalars(p, k, step_sym));
          TJ_RETURN_IF_ERROR(kernel_args(p, k, step_sym));
        }
        TJ_RETURN_IF_ERROR(tj_cuda_gemm_choose_from(p, kernels_done));
      }
    }
    if (observe)
      TJ_RETURN_IF_ERROR(observe_step(p, st, step_sym, observe, user));
  }
  // Outputs with data-dependent dims (tj_executable_run_shaped): their
  // actual shapes, which the copies below follow.
  TJ_RETURN_IF_ERROR(tj_custom_write_output_shapes(g, step_sym, outputs));
  TJ_RETURN_IF_ERROR(record(p, ev, copy_ev + 2));
  // 4. Outputs the kernels did not write in place: duplicates, inputs and
  // constants returned as outputs; and every CPU output, through pinned.
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    uint32_t node = g->outputs[i].node;
    int64_t bytes = tj_cuda_tensor_bytes(t);
    if (bytes == 0) continue;
    if (t->device_type == TJ_DEVICE_CUDA) {
      if (!tj_host_tensor_dense(t)) {
        TJ_RETURN_IF_ERROR(tj_cuda_strided_copy(p, t, p->run.loc[node], true));
        continue;
      }
      if (output_direct(p, i)) continue;
      TJ_CU_RETURN_IF_ERROR(cu, cuMemcpyDtoDAsync,
                            ((uint64_t)(uintptr_t)tj_host_tensor_data(t),
                             p->run.loc[node], (size_t)bytes, p->stream));
    } else {
      TJ_CU_RETURN_IF_ERROR(cu, cuMemcpyDtoHAsync,
                            (pinned + p->run.out_pin[i], p->run.loc[node],
                             (size_t)bytes, p->stream));
    }
  }
  TJ_RETURN_IF_ERROR(record(p, ev, copy_ev + 3));
  if (uses_host || !p->host_stream || tm) {
    TJ_CU_RETURN_IF_ERROR(cu, cuStreamSynchronize, (p->stream));
  }
  double t_host_copy = tm ? tj_now_ms() : 0;
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_tensor_t* t = &outputs[i];
    if (t->device_type != TJ_DEVICE_CPU || tj_cuda_tensor_bytes(t) == 0)
      continue;
    tj_host_copy_strided(tj_host_tensor_data(t), t->strides,
                         pinned + p->run.out_pin[i], NULL, t->rank, t->shape,
                         tj_dtype_size(t->dtype));
  }
  if (tm) {
    tm->copy_ms += tj_now_ms() - t_host_copy + elapsed(p, ev, copy_ev) +
                   elapsed(p, ev, copy_ev + 2);
    for (uint32_t k = 0; k < p->num_kernels && k < tm->num_kernels; ++k) {
      const tj_kir_t* kir = p->kernels[k].low->kernel;
      tj_run_kernel_timing_t* kt = &tm->kernels[k];
      kt->name = kir->name;
      kt->kind = kir->kind;
      kt->ms += elapsed(p, ev, 2 * k);
      if (p->run.launches[k].empty) continue;
      double bytes, flops;
      tj_kernel_traffic(kir, p->run.scalars + (size_t)k * TJ_KIR_MAX_PARAMS,
                        &bytes, &flops);
      kt->bytes += bytes;
      kt->flops += flops;
      ++kt->launches;
    }
  }
  ++p->stats.runs;
  return NULL;
}

tj_status_t tj_cuda_program_run_timed(tj_cuda_program_t* p, const int64_t* sym,
                                      const tj_tensor_t* inputs,
                                      const tj_tensor_t* outputs,
                                      tj_run_timing_t* timing) {
  pthread_mutex_lock(&p->mutex);
  tj_status_t status = tj_cuda_device_enter(p->device);
  if (!status) {
    run_events_t ev;
    memset(&ev, 0, sizeof(ev));
    if (timing) status = events_create(p, &ev);
    if (!status) {
      status = run_locked(p, sym, inputs, outputs, timing, timing ? &ev : NULL,
                          NULL, NULL);
    }
    if (timing) {
      // The events may still be pending after an error.
      if (status) p->device->cu.cuStreamSynchronize(p->stream);
      events_destroy(p, &ev);
    }
    tj_cuda_device_leave(p->device);
  }
  pthread_mutex_unlock(&p->mutex);
  return status;
}

tj_status_t tj_cuda_program_run_observed(tj_cuda_program_t* p,
                                         const int64_t* sym,
                                         const tj_tensor_t* inputs,
                                         const tj_tensor_t* outputs,
                                         step_observer_fn observe, void* user) {
  pthread_mutex_lock(&p->mutex);
  tj_status_t status = tj_cuda_device_enter(p->device);
  if (!status) {
    status = run_locked(p, sym, inputs, outputs, NULL, NULL, observe, user);
    if (status) p->device->cu.cuStreamSynchronize(p->stream);
    tj_cuda_device_leave(p->device);
  }
  pthread_mutex_unlock(&p->mutex);
  return status;
}

tj_status_t tj_cuda_program_run(tj_cuda_program_t* p, const int64_t* sym,
                                const tj_tensor_t* inputs,
                                const tj_tensor_t* outputs) {
  return tj_cuda_program_run_timed(p, sym, inputs, outputs, NULL);
}

void tj_cuda_program_stats(tj_cuda_program_t* p, tj_cuda_program_stats_t* out) {
  memset(out, 0, sizeof(*out));
  pthread_mutex_lock(&p->mutex);
  out->compile_ms = p->stats.compile_ms;
  out->load_ms = p->stats.load_ms;
  out->ptx_source = p->stats.ptx_source;
  out->from_cache = strcmp(p->stats.ptx_source, "LLVM") != 0;
  out->ptx_bytes = p->stats.ptx_bytes;
  out->cubin_source = p->stats.cubin_source;
  out->cubin_bytes = p->stats.cubin_bytes;
  out->cubin_hits = p->stats.cubin_hits;
  out->cubin_misses = p->stats.cubin_misses;
  out->kernel_cubin_hits = p->stats.kernel_cubin_hits;
  out->kernel_cubin_misses = p->stats.kernel_cubin_misses;
  out->link_ms = p->stats.link_ms;
  out->chunks = p->stats.chunks;
  out->chunks_compiled = p->stats.chunks_compiled;
  out->compile_threads = p->stats.compile_threads;
  out->strided_copies = p->stats.strided_copies;
  out->runs = p->stats.runs;
  out->kernel_launches = p->stats.kernel_launches;
  out->graph_captures = p->stats.graph_captures;
  out->graph_instantiations = p->stats.graph_instantiations;
  out->graph_updates = p->stats.graph_updates;
  out->graph_launches = p->stats.graph_launches;
  out->host_steps = p->stats.host_steps;
  out->arena_growths = p->stats.arena_growths;
  out->arena_bytes = p->run.arena_cap;
  out->tunings = p->stats.tunings;
  out->tuning_cache_hits = p->stats.tuning_cache_hits;
  out->tuning_ms = p->stats.tuning_ms;
  snprintf(out->gemm_choice, sizeof(out->gemm_choice), "%s",
           p->gemm.last_choice);
  pthread_mutex_unlock(&p->mutex);
  if (p->device) {
    tj_cuda_allocator_stats(p->device->allocator, &out->allocator);
  }
  snprintf(out->device_name, sizeof(out->device_name), "%s",
           p->device ? p->device->name : "none (offline)");
  snprintf(out->arch, sizeof(out->arch), "%s", tj_nvptx_arch_name(p->arch));
}
