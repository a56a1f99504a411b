// The sharded executable (include/tensorjit/tj_shard.h): checks the mesh
// and the partition specs, runs the sharding propagation pass
// (lib/passes/shard_plan.h), compiles each compute segment of the
// per-device program, and runs the program on every device of the mesh from
// the calling thread, the collectives between host-memory devices through
// backends/runtime/collective.h. A segment whose result is all-reduced and
// that is independent per row (a row-parallel matmul) runs in row chunks,
// each chunk's all-reduce on a helper thread while the next chunk computes.

#include <pthread.h>
#include <string.h>

#include "backends/runtime/collective.h"
#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/passes/shard_plan.h"
#include "tensorjit/tj_shard.h"

#define MAX_CHUNKS 32
#define MAX_OVERLAPPED 8

struct tj_sharded_executable_t {
  tj_context_t* context;
  tj_allocator_t a;
  tj_shard_plan_t plan;
  int32_t num_devices;
  tj_collective_mesh_t mesh;
  tj_executable_t** exes;  // per step; NULL for collectives
  int32_t overlap_chunks;
  pthread_mutex_t lock;
  tj_sharded_stats_t stats;
  // Every device's slots, kept across runs (grown for a larger shape), so
  // that a steady state allocates and faults nothing.
  char* arena;
  size_t arena_bytes;
};

void tj_shard_options_initialize(tj_shard_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->overlap_chunks = 4;
}

//===--- checking the mesh and the specs ---===//

static bool is_identifier(const char* s) {
  if (!s || !*s) return false;
  for (const char* c = s; *c; ++c) {
    bool alpha =
        (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
    bool digit = *c >= '0' && *c <= '9';
    if (!alpha && !(digit && c != s)) return false;
  }
  return true;
}

static tj_status_t check_mesh(const tj_mesh_t* mesh, int32_t* out_devices) {
  if (!mesh) return tj_invalid("tj_compile_sharded: no mesh");
  if (mesh->num_axes < 1 || mesh->num_axes > TJ_MESH_MAX_AXES) {
    return tj_invalid("tj_compile_sharded: a mesh has 1 or 2 axes, not %d",
                      mesh->num_axes);
  }
  int64_t n = 1;
  for (int32_t i = 0; i < mesh->num_axes; ++i) {
    if (!is_identifier(mesh->axis_names[i])) {
      return tj_invalid(
          "tj_compile_sharded: mesh axis %d's name is not a C identifier", i);
    }
    for (int32_t j = 0; j < i; ++j) {
      if (strcmp(mesh->axis_names[i], mesh->axis_names[j]) == 0) {
        return tj_invalid("tj_compile_sharded: mesh axis \"%s\" named twice",
                          mesh->axis_names[i]);
      }
    }
    if (mesh->axis_sizes[i] < 1 || mesh->axis_sizes[i] > TJ_MESH_MAX_DEVICES) {
      return tj_invalid("tj_compile_sharded: mesh axis \"%s\" has size %d",
                        mesh->axis_names[i], mesh->axis_sizes[i]);
    }
    n *= mesh->axis_sizes[i];
  }
  if (n > TJ_MESH_MAX_DEVICES) {
    return tj_invalid("tj_compile_sharded: %lld devices (at most %d)",
                      (long long)n, TJ_MESH_MAX_DEVICES);
  }
  if (!mesh->devices) return tj_invalid("tj_compile_sharded: no devices");
  for (int64_t d = 0; d < n; ++d) {
    tj_target_t t = mesh->devices[d].target;
    if (t != TJ_TARGET_X86 && t != TJ_TARGET_REFERENCE && t != TJ_TARGET_CUDA) {
      return tj_invalid("tj_compile_sharded: device %lld has target %d",
                        (long long)d, (int)t);
    }
    if (t != mesh->devices[0].target) {
      return tj_invalid(
          "tj_compile_sharded: device %lld's target differs from device 0's",
          (long long)d);
    }
  }
  if (mesh->devices[0].target == TJ_TARGET_CUDA && n > 1) {
    return tj_unsupported(
        "tj_compile_sharded: a mesh of %lld CUDA devices does not run yet "
        "(one CUDA device per context; NCCL is loaded, see "
        "tj_nccl_available); use one CUDA device, or x86 or reference "
        "devices",
        (long long)n);
  }
  *out_devices = (int32_t)n;
  return NULL;
}

static int32_t find_axis(const tj_mesh_t* mesh, const char* name) {
  for (int32_t i = 0; i < mesh->num_axes; ++i) {
    if (strcmp(mesh->axis_names[i], name) == 0) return i;
  }
  return -1;
}

// The layout of |spec| for a value of |rank| |dims|; |what| is "input" or
// "output", |name| its name.
static tj_status_t spec_layout(const tj_mesh_t* mesh,
                               const tj_partition_spec_t* spec,
                               const char* what, const char* name, int32_t rank,
                               const int64_t* dims, tj_shard_layout_t* out) {
  memset(out->split, -1, sizeof(out->split));
  out->partial = -1;
  if (!spec) return NULL;
  bool used[TJ_MESH_MAX_AXES] = {false, false};
  // Names first (rank, unknown axes, an axis used twice), then sizes.
  for (int32_t d = 0; d < TJ_MAX_RANK; ++d) {
    const char* axis_name = spec->dim_axes[d];
    if (!axis_name) continue;
    if (d >= rank) {
      return tj_invalid(
          "tj_compile_sharded: %s \"%s\": dim %d is split over \"%s\" but "
          "the %s has rank %d",
          what, name, d, axis_name, what, rank);
    }
    int32_t axis = find_axis(mesh, axis_name);
    if (axis < 0) {
      return tj_invalid(
          "tj_compile_sharded: %s \"%s\": dim %d is split over unknown mesh "
          "axis \"%s\"",
          what, name, d, axis_name);
    }
    if (used[axis]) {
      return tj_invalid(
          "tj_compile_sharded: %s \"%s\": mesh axis \"%s\" splits two dims",
          what, name, axis_name);
    }
    used[axis] = true;
    out->split[d] = (int8_t)axis;
  }
  for (int32_t d = 0; d < rank; ++d) {
    if (out->split[d] < 0) continue;
    const char* axis_name = spec->dim_axes[d];
    int64_t size = mesh->axis_sizes[out->split[d]];
    if (!tj_dim_is_const(dims[d])) {
      return tj_invalid(
          "tj_compile_sharded: %s \"%s\": dim %d is symbolic and cannot be "
          "split over \"%s\"",
          what, name, d, axis_name);
    }
    if (dims[d] % size) {
      return tj_invalid(
          "tj_compile_sharded: %s \"%s\": dim %d (%lld) is not divisible by "
          "mesh axis \"%s\" (%lld)",
          what, name, d, (long long)dims[d], axis_name, (long long)size);
    }
  }
  if (spec->partial_axis) {
    if (strcmp(what, "output") == 0) {
      return tj_unsupported(
          "tj_compile_sharded: output \"%s\": partial-sum outputs are not "
          "supported",
          name);
    }
    int32_t axis = find_axis(mesh, spec->partial_axis);
    if (axis < 0) {
      return tj_invalid(
          "tj_compile_sharded: input \"%s\": partial sum over unknown mesh "
          "axis \"%s\"",
          name, spec->partial_axis);
    }
    if (used[axis]) {
      return tj_invalid(
          "tj_compile_sharded: input \"%s\": mesh axis \"%s\" both splits "
          "and sums",
          name, spec->partial_axis);
    }
    out->partial = (int8_t)axis;
  }
  return NULL;
}

static tj_status_t build_request(const tj_graph_t* g,
                                 const tj_shard_options_t* o,
                                 tj_shard_request_t* req,
                                 tj_shard_layout_t* layouts) {
  const tj_mesh_t* mesh = o->mesh;
  memset(req, 0, sizeof(*req));
  req->num_axes = mesh->num_axes;
  for (int32_t i = 0; i < mesh->num_axes; ++i) {
    req->axis_sizes[i] = mesh->axis_sizes[i];
    req->axis_names[i] = mesh->axis_names[i];
  }
  // Every spec must name an input or output.
  for (int32_t side = 0; side < 2; ++side) {
    const tj_partition_spec_t* specs = side ? o->output_specs : o->input_specs;
    int32_t num = side ? o->num_output_specs : o->num_input_specs;
    if (num < 0 || (num && !specs)) {
      return tj_invalid("tj_compile_sharded: bad %s spec count %d",
                        side ? "output" : "input", num);
    }
    for (int32_t s = 0; s < num; ++s) {
      bool found = false;
      uint32_t count = side ? g->num_outputs : g->num_inputs;
      for (uint32_t i = 0; i < count && !found; ++i) {
        const char* name =
            side ? g->outputs[i].name : g->nodes[g->inputs[i]].attrs.name;
        found = specs[s].name && strcmp(specs[s].name, name) == 0;
      }
      if (!found) {
        return tj_invalid(
            "tj_compile_sharded: the %s spec \"%s\" names no %s of graph "
            "\"%s\"",
            side ? "output" : "input", specs[s].name ? specs[s].name : "(null)",
            side ? "output" : "input", g->name);
      }
    }
  }
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_node_t* n = &g->nodes[g->inputs[i]];
    const tj_partition_spec_t* spec = NULL;
    for (int32_t s = 0; s < o->num_input_specs; ++s) {
      if (strcmp(o->input_specs[s].name, n->attrs.name) == 0) {
        spec = &o->input_specs[s];
      }
    }
    TJ_RETURN_IF_ERROR(spec_layout(mesh, spec, "input", n->attrs.name, n->rank,
                                   n->dims, &layouts[i]));
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_node_t* n = &g->nodes[g->outputs[i].node];
    const tj_partition_spec_t* spec = NULL;
    for (int32_t s = 0; s < o->num_output_specs; ++s) {
      if (strcmp(o->output_specs[s].name, g->outputs[i].name) == 0) {
        spec = &o->output_specs[s];
      }
    }
    TJ_RETURN_IF_ERROR(spec_layout(mesh, spec, "output", g->outputs[i].name,
                                   n->rank, n->dims,
                                   &layouts[g->num_inputs + i]));
  }
  req->input_layouts = layouts;
  req->output_layouts = layouts + g->num_inputs;
  for (int32_t i = 0; i < o->num_symbol_hints; ++i) {
    if (!o->symbol_hint_names || !o->symbol_hint_values) break;
    uint32_t id;
    if (tj_dim_find_symbol(&g->dims, o->symbol_hint_names[i], &id)) {
      req->symbol_hints[id] = o->symbol_hint_values[i];
    }
  }
  return NULL;
}

//===--- compile ---===//

void tj_sharded_executable_release(tj_sharded_executable_t* exe) {
  if (!exe) return;
  if (exe->exes) {
    for (uint32_t i = 0; i < exe->plan.num_steps; ++i) {
      tj_executable_release(exe->exes[i]);
    }
    tj_free(exe->a, exe->exes, sizeof(tj_executable_t*) * exe->plan.num_steps);
  }
  tj_shard_plan_deinitialize(&exe->plan);
  if (exe->arena) tj_free(exe->a, exe->arena, exe->arena_bytes);
  pthread_mutex_destroy(&exe->lock);
  tj_context_t* context = exe->context;
  tj_free(exe->a, exe, sizeof(*exe));
  tj_context_release(context);
}

tj_status_t tj_compile_sharded(const tj_graph_t* graph,
                               const tj_shard_options_t* shard,
                               const tj_compile_options_t* options,
                               tj_sharded_executable_t** out_executable) {
  if (!out_executable) return tj_invalid("tj_compile_sharded: no output");
  *out_executable = NULL;
  if (!graph || !shard) {
    return tj_invalid("tj_compile_sharded: NULL graph or shard options");
  }
  if (!graph->finalized) {
    return tj_invalid("tj_compile_sharded: graph \"%s\" is not finalized",
                      graph->name);
  }
  tj_shard_options_t so;
  tj_shard_options_initialize(&so);
  size_t size = shard->struct_size ? shard->struct_size : sizeof(so);
  if (size > sizeof(so)) {
    return tj_invalid("tj_compile_sharded: shard options struct_size %zu",
                      size);
  }
  memcpy(&so, shard, size);
  so.struct_size = sizeof(so);
  if (so.overlap_chunks < 0) {
    return tj_invalid("tj_compile_sharded: overlap_chunks %d",
                      so.overlap_chunks);
  }
  tj_compile_options_t co;
  tj_compile_options_initialize(&co);
  if (options) {
    if (options->struct_size != sizeof(co)) {
      return tj_invalid(
          "tj_compile_sharded: options.struct_size is %zu, not "
          "%zu",
          options->struct_size, sizeof(co));
    }
    co = *options;
  }
  int32_t num_devices = 0;
  TJ_RETURN_IF_ERROR(check_mesh(so.mesh, &num_devices));
  co.target = so.mesh->devices[0].target;
  if (co.target == TJ_TARGET_CUDA)
    co.cuda.device = so.mesh->devices[0].device_id;
  tj_allocator_t a = tj_context_allocator(graph->context);
  uint32_t num_layouts = graph->num_inputs + graph->num_outputs;
  tj_shard_layout_t* layouts =
      tj_alloc(a, sizeof(tj_shard_layout_t) * (num_layouts ? num_layouts : 1));
  if (!layouts) return tj_status_oom();
  tj_shard_request_t req;
  tj_status_t status = build_request(graph, &so, &req, layouts);
  tj_sharded_executable_t* exe = NULL;
  if (!status) {
    exe = tj_calloc(a, 1, sizeof(*exe));
    if (!exe) status = tj_status_oom();
  }
  if (!status) {
    exe->a = a;
    exe->context = graph->context;
    tj_context_retain(exe->context);
    pthread_mutex_init(&exe->lock, NULL);
    exe->num_devices = num_devices;
    exe->mesh.num_axes = so.mesh->num_axes;
    for (int32_t i = 0; i < so.mesh->num_axes; ++i) {
      exe->mesh.sizes[i] = so.mesh->axis_sizes[i];
    }
    exe->overlap_chunks = so.overlap_chunks == 0 ? 4 : so.overlap_chunks;
    if (exe->overlap_chunks > MAX_CHUNKS) exe->overlap_chunks = MAX_CHUNKS;
    tj_pass_ctx_t ctx;
    tj_pass_ctx_initialize(&ctx, graph->context);
    status = tj_shard_propagate(&ctx, graph, &req, &exe->plan);
  }
  tj_free(a, layouts,
          sizeof(tj_shard_layout_t) * (num_layouts ? num_layouts : 1));
  if (!status) {
    exe->exes = tj_calloc(a, exe->plan.num_steps ? exe->plan.num_steps : 1,
                          sizeof(tj_executable_t*));
    if (!exe->exes) status = tj_status_oom();
  }
  for (uint32_t i = 0; !status && i < exe->plan.num_steps; ++i) {
    const tj_shard_step_t* s = &exe->plan.steps[i];
    if (s->kind != TJ_SHARD_STEP_COMPUTE) continue;
    status = tj_compile(s->graph, &co, &exe->exes[i]);
    if (status) {
      status = tj_status_annotate(status, "tj_compile_sharded: segment %u", i);
    }
  }
  if (status) {
    if (exe && !exe->plan.graph) {
      // propagate failed: the plan is clear, keep release simple
    }
    tj_sharded_executable_release(exe);
    return status;
  }
  tj_sharded_stats_t* st = &exe->stats;
  st->struct_size = sizeof(*st);
  st->num_devices = num_devices;
  for (uint32_t i = 0; i < exe->plan.num_steps; ++i) {
    switch (exe->plan.steps[i].kind) {
      case TJ_SHARD_STEP_COMPUTE:
        ++st->num_compute_segments;
        break;
      case TJ_SHARD_STEP_ALL_REDUCE:
        ++st->num_all_reduce;
        break;
      case TJ_SHARD_STEP_ALL_GATHER:
        ++st->num_all_gather;
        break;
      case TJ_SHARD_STEP_REDUCE_SCATTER:
        ++st->num_reduce_scatter;
        break;
      case TJ_SHARD_STEP_SLICE:
        ++st->num_slices;
        break;
    }
  }
  st->input_bytes_per_device = exe->plan.input_bytes;
  st->value_bytes_per_device = exe->plan.value_bytes;
  st->comm_bytes_per_device = exe->plan.comm_bytes;
  st->input_bytes_unsharded = exe->plan.input_bytes_unsharded;
  *out_executable = exe;
  return NULL;
}

//===--- running ---===//

typedef struct run_t {
  tj_sharded_executable_t* exe;
  const tj_shard_plan_t* plan;
  int64_t sym[TJ_MAX_SYMBOLS];
  int64_t* slot_dims;   // num_slots x TJ_MAX_RANK concrete local dims
  size_t* slot_offset;  // num_slots: offset in each device's region
  size_t device_bytes;
  char* base;  // the executable's arena
  int64_t comm_bytes;
} run_t;

static void* slot_ptr(const run_t* r, int32_t device, uint32_t slot) {
  return r->base + (size_t)device * r->device_bytes + r->slot_offset[slot];
}

static const int64_t* slot_shape(const run_t* r, uint32_t slot) {
  return r->slot_dims + (size_t)slot * TJ_MAX_RANK;
}

static int64_t shape_numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

static int32_t coord_of(const tj_collective_mesh_t* mesh, int32_t axis,
                        int32_t device) {
  int32_t members[TJ_MESH_MAX_DEVICES];
  return tj_collective_group(mesh, axis, device, members);
}

// Copies the box [start, start + len) of strided CPU tensor |t| to or from
// dense |dense|.
static void copy_box(const tj_tensor_t* t, bool into_tensor, void* dense,
                     const int64_t* start, const int64_t* len) {
  int32_t rank = t->rank;
  size_t es = tj_dtype_size(t->dtype);
  int64_t strides[TJ_MAX_RANK];
  int64_t acc = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    strides[d] = t->strides ? t->strides[d] : acc;
    acc *= t->shape[d];
  }
  int64_t numel = shape_numel(rank, len);
  if (numel == 0) return;
  char* tbase = (char*)t->data + t->byte_offset;
  // Rows of the innermost dim: one memcpy each when it is contiguous.
  int64_t row = rank ? len[rank - 1] : 1;
  bool contiguous = rank == 0 || strides[rank - 1] == 1;
  int64_t idx[TJ_MAX_RANK] = {0};
  for (int64_t e = 0; e < numel; e += row) {
    int64_t off = 0;
    for (int32_t d = 0; d < rank; ++d) off += (start[d] + idx[d]) * strides[d];
    char* dp = (char*)dense + e * (int64_t)es;
    for (int64_t i = 0; i < row; ++i) {
      char* tp = tbase +
                 (off + (contiguous ? i : i * strides[rank - 1])) * (int64_t)es;
      if (contiguous) {
        if (into_tensor) {
          memcpy(tp, dp, (size_t)row * es);
        } else {
          memcpy(dp, tp, (size_t)row * es);
        }
        break;
      }
      if (into_tensor) {
        memcpy(tp, dp + i * (int64_t)es, es);
      } else {
        memcpy(dp + i * (int64_t)es, tp, es);
      }
    }
    for (int32_t d = rank - 2; d >= 0; --d) {
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
}

// The box of the global tensor device |device| holds under |layout|.
static void device_box(const run_t* r, int32_t device, uint32_t slot,
                       int64_t* start) {
  const tj_shard_slot_t* s = &r->plan->slots[slot];
  const int64_t* local = slot_shape(r, slot);
  for (int32_t d = 0; d < s->rank; ++d) {
    start[d] = 0;
    if (s->layout.split[d] >= 0) {
      start[d] = coord_of(&r->exe->mesh, s->layout.split[d], device) * local[d];
    }
  }
}

static tj_status_t run_collective(run_t* r, const tj_shard_step_t* s) {
  const tj_shard_slot_t* src = &r->plan->slots[s->src];
  void* srcs[TJ_MESH_MAX_DEVICES];
  void* dsts[TJ_MESH_MAX_DEVICES];
  for (int32_t d = 0; d < r->exe->num_devices; ++d) {
    srcs[d] = slot_ptr(r, d, s->src);
    dsts[d] = slot_ptr(r, d, s->dst);
  }
  const int64_t* dims = slot_shape(r, s->src);
  int64_t n = r->exe->mesh.sizes[s->axis];
  int64_t bytes =
      shape_numel(src->rank, dims) * (int64_t)tj_dtype_size(src->dtype);
  const tj_collective_mesh_t* mesh = &r->exe->mesh;
  switch (s->kind) {
    case TJ_SHARD_STEP_ALL_REDUCE:
      r->comm_bytes += 2 * (n - 1) * (bytes / n);
      return tj_collective_all_reduce(mesh, s->axis, src->dtype, srcs, dsts, 0,
                                      shape_numel(src->rank, dims));
    case TJ_SHARD_STEP_ALL_GATHER:
      r->comm_bytes += (n - 1) * bytes;
      return tj_collective_all_gather(mesh, s->axis, s->dim, src->dtype,
                                      src->rank, dims, srcs, dsts);
    case TJ_SHARD_STEP_REDUCE_SCATTER:
      r->comm_bytes += (n - 1) * (bytes / n);
      return tj_collective_reduce_scatter(mesh, s->axis, s->dim, src->dtype,
                                          src->rank, dims, srcs, dsts);
    case TJ_SHARD_STEP_SLICE:
      return tj_collective_slice(mesh, s->axis, s->dim, src->dtype, src->rank,
                                 dims, srcs, dsts);
    case TJ_SHARD_STEP_COMPUTE:
      break;
  }
  return tj_internal("shard: compute step run as a collective");
}

static tj_tensor_t slot_tensor(const run_t* r, int32_t device, uint32_t slot,
                               int64_t row_begin, int64_t row_end, bool chunked,
                               int64_t* shape) {
  const tj_shard_slot_t* s = &r->plan->slots[slot];
  memcpy(shape, slot_shape(r, slot), sizeof(int64_t) * (size_t)s->rank);
  tj_tensor_t t =
      tj_tensor_make(slot_ptr(r, device, slot), s->dtype, s->rank, shape);
  if (chunked) {
    int64_t row = (int64_t)tj_dtype_size(s->dtype);
    for (int32_t d = 1; d < s->rank; ++d) row *= shape[d];
    t.byte_offset = (uint64_t)(row_begin * row);
    shape[0] = row_end - row_begin;
  }
  return t;
}

// Runs compute step |s| on every device over rows [row_begin, row_end) of
// the slots that have chunk symbol |sym| at dim 0 (all rows: sym < 0).
static tj_status_t run_compute(run_t* r, uint32_t index, int32_t sym,
                               int64_t row_begin, int64_t row_end) {
  const tj_shard_step_t* s = &r->plan->steps[index];
  tj_tensor_t ins[16], outs[16];
  int64_t in_shapes[16][TJ_MAX_RANK], out_shapes[16][TJ_MAX_RANK];
  if (s->num_in > 16 || s->num_out > 16) {
    // Large segments: allocate per device.
    return tj_unsupported("shard: a segment with %u inputs and %u outputs",
                          s->num_in, s->num_out);
  }
  for (int32_t d = 0; d < r->exe->num_devices; ++d) {
    for (uint32_t i = 0; i < s->num_in; ++i) {
      uint32_t slot = s->in_slots[i];
      bool chunked = sym >= 0 && r->plan->slots[slot].rank > 0 &&
                     tj_dim_as_symbol(&r->plan->graph->dims,
                                      r->plan->slots[slot].dims[0]) == sym;
      ins[i] =
          slot_tensor(r, d, slot, row_begin, row_end, chunked, in_shapes[i]);
    }
    for (uint32_t i = 0; i < s->num_out; ++i) {
      uint32_t slot = s->out_slots[i];
      bool chunked = sym >= 0 && r->plan->slots[slot].rank > 0 &&
                     tj_dim_as_symbol(&r->plan->graph->dims,
                                      r->plan->slots[slot].dims[0]) == sym;
      outs[i] =
          slot_tensor(r, d, slot, row_begin, row_end, chunked, out_shapes[i]);
    }
    tj_status_t status =
        tj_executable_run(r->exe->exes[index], ins, (int32_t)s->num_in, outs,
                          (int32_t)s->num_out);
    if (status) {
      return tj_status_annotate(status, "shard: segment %u on device %d", index,
                                d);
    }
  }
  return NULL;
}

//===--- overlap: row chunks with a helper thread for the all-reduces ---===//

typedef struct overlap_job_t {
  uint32_t step;
  int64_t begin, end;  // elements
} overlap_job_t;

typedef struct overlap_t {
  run_t* r;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  overlap_job_t jobs[MAX_CHUNKS * MAX_OVERLAPPED];
  uint32_t head, tail;
  bool done;
  tj_status_t status;
} overlap_t;

static tj_status_t run_job(run_t* r, const overlap_job_t* j) {
  const tj_shard_step_t* s = &r->plan->steps[j->step];
  void* srcs[TJ_MESH_MAX_DEVICES];
  void* dsts[TJ_MESH_MAX_DEVICES];
  for (int32_t d = 0; d < r->exe->num_devices; ++d) {
    srcs[d] = slot_ptr(r, d, s->src);
    dsts[d] = slot_ptr(r, d, s->dst);
  }
  return tj_collective_all_reduce(&r->exe->mesh, s->axis,
                                  r->plan->slots[s->src].dtype, srcs, dsts,
                                  j->begin, j->end);
}

static void* overlap_main(void* arg) {
  overlap_t* o = arg;
  for (;;) {
    pthread_mutex_lock(&o->mu);
    while (o->head == o->tail && !o->done) pthread_cond_wait(&o->cv, &o->mu);
    if (o->head == o->tail) {
      pthread_mutex_unlock(&o->mu);
      return NULL;
    }
    overlap_job_t job = o->jobs[o->head++];
    bool failed = o->status != NULL;
    pthread_mutex_unlock(&o->mu);
    if (failed) continue;
    tj_status_t s = run_job(o->r, &job);
    if (s) {
      pthread_mutex_lock(&o->mu);
      if (!o->status) {
        o->status = s;
      } else {
        tj_status_free(s);
      }
      pthread_mutex_unlock(&o->mu);
    }
  }
}

// Steps after compute step |index| that all-reduce its row-chunked outputs;
// their count (at most MAX_OVERLAPPED), 0 if none.
static uint32_t overlapped_steps(const run_t* r, uint32_t index) {
  const tj_shard_step_t* s = &r->plan->steps[index];
  if (s->chunk_symbol < 0) return 0;
  uint32_t n = 0;
  for (uint32_t k = index + 1; k < r->plan->num_steps && n < MAX_OVERLAPPED;
       ++k) {
    const tj_shard_step_t* c = &r->plan->steps[k];
    if (c->kind != TJ_SHARD_STEP_ALL_REDUCE) break;
    bool ours = false;
    for (uint32_t i = 0; i < s->num_out; ++i) ours |= s->out_slots[i] == c->src;
    const tj_shard_slot_t* slot = &r->plan->slots[c->src];
    if (!ours || slot->rank == 0 ||
        tj_dim_as_symbol(&r->plan->graph->dims, slot->dims[0]) !=
            s->chunk_symbol) {
      break;
    }
    ++n;
  }
  return n;
}

static tj_status_t run_overlapped(run_t* r, uint32_t index, uint32_t num_ar,
                                  int32_t* out_chunks) {
  const tj_shard_step_t* s = &r->plan->steps[index];
  int64_t rows = r->sym[s->chunk_symbol];
  int64_t chunks = r->exe->overlap_chunks;
  if (chunks > rows) chunks = rows;
  *out_chunks = 0;
  if (chunks < 2) {
    TJ_RETURN_IF_ERROR(run_compute(r, index, -1, 0, 0));
    for (uint32_t k = 1; k <= num_ar; ++k) {
      TJ_RETURN_IF_ERROR(run_collective(r, &r->plan->steps[index + k]));
    }
    return NULL;
  }
  overlap_t* o = tj_calloc(r->exe->a, 1, sizeof(*o));
  if (!o) return tj_status_oom();
  o->r = r;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  pthread_t thread;
  bool threaded = pthread_create(&thread, NULL, overlap_main, o) == 0;
  tj_status_t status = NULL;
  for (int64_t c = 0; c < chunks && !status; ++c) {
    int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
    status = run_compute(r, index, s->chunk_symbol, r0, r1);
    for (uint32_t k = 1; !status && k <= num_ar; ++k) {
      const tj_shard_step_t* ar = &r->plan->steps[index + k];
      const tj_shard_slot_t* slot = &r->plan->slots[ar->src];
      int64_t row =
          shape_numel(slot->rank, slot_shape(r, ar->src)) / (rows ? rows : 1);
      overlap_job_t job = {index + k, r0 * row, r1 * row};
      if (!threaded) {
        status = run_job(r, &job);
        continue;
      }
      pthread_mutex_lock(&o->mu);
      o->jobs[o->tail++] = job;
      pthread_cond_signal(&o->cv);
      pthread_mutex_unlock(&o->mu);
    }
  }
  if (threaded) {
    pthread_mutex_lock(&o->mu);
    o->done = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(thread, NULL);
  }
  status = tj_status_join(status, o->status);
  for (uint32_t k = 1; k <= num_ar; ++k) {
    const tj_shard_step_t* ar = &r->plan->steps[index + k];
    const tj_shard_slot_t* slot = &r->plan->slots[ar->src];
    int64_t n = r->exe->mesh.sizes[ar->axis];
    int64_t bytes = shape_numel(slot->rank, slot_shape(r, ar->src)) *
                    (int64_t)tj_dtype_size(slot->dtype);
    r->comm_bytes += 2 * (n - 1) * (bytes / n);
  }
  pthread_cond_destroy(&o->cv);
  pthread_mutex_destroy(&o->mu);
  tj_free(r->exe->a, o, sizeof(*o));
  if (!status) *out_chunks = (int32_t)chunks;
  return status;
}

//===--- the run ---===//

static tj_status_t check_outputs(const run_t* r, const tj_tensor_t* outputs,
                                 int32_t num_outputs) {
  const tj_graph_t* g = r->plan->graph;
  if (num_outputs != (int32_t)g->num_outputs) {
    return tj_invalid("tj_sharded_executable_run: %d outputs, the graph has %u",
                      num_outputs, g->num_outputs);
  }
  if (num_outputs && !outputs) {
    return tj_invalid("tj_sharded_executable_run: NULL outputs");
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_node_t* n = &g->nodes[g->outputs[i].node];
    const tj_tensor_t* t = &outputs[i];
    int64_t dims[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(
        tj_ir_concrete_dims(g, g->outputs[i].node, r->sym, dims));
    bool ok = t->device_type == TJ_DEVICE_CPU && t->dtype == n->dtype &&
              t->rank == n->rank && (t->rank == 0 || t->shape);
    for (int32_t d = 0; ok && d < n->rank; ++d) ok = t->shape[d] == dims[d];
    if (!ok) {
      return tj_invalid(
          "tj_sharded_executable_run: output \"%s\" must be a CPU tensor of "
          "the output's dtype and shape",
          g->outputs[i].name);
    }
  }
  return NULL;
}

static tj_status_t run_locked(tj_sharded_executable_t* exe,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_tensor_t* outputs, int32_t num_outputs,
                              run_t* r) {
  const tj_shard_plan_t* plan = &exe->plan;
  const tj_graph_t* g = plan->graph;
  if (num_inputs != (int32_t)g->num_inputs || (num_inputs && !inputs)) {
    return tj_invalid("tj_sharded_executable_run: %d inputs, the graph has %u",
                      num_inputs, g->num_inputs);
  }
  for (int32_t i = 0; i < num_inputs; ++i) {
    if (inputs[i].device_type != TJ_DEVICE_CPU) {
      return tj_invalid(
          "tj_sharded_executable_run: input \"%s\" is not a CPU "
          "tensor",
          g->nodes[g->inputs[i]].attrs.name);
    }
  }
  TJ_RETURN_IF_ERROR(tj_ir_bind_symbols(g, inputs, num_inputs, r->sym));
  TJ_RETURN_IF_ERROR(check_outputs(r, outputs, num_outputs));
  TJ_RETURN_IF_ERROR(tj_ir_check_run_memory(g, inputs, outputs));
  // Every slot's concrete local dims and its place in a device's region.
  size_t nslots = plan->num_slots ? plan->num_slots : 1;
  r->slot_dims = tj_alloc(exe->a, sizeof(int64_t) * TJ_MAX_RANK * nslots);
  r->slot_offset = tj_alloc(exe->a, sizeof(size_t) * nslots);
  if (!r->slot_dims || !r->slot_offset) return tj_status_oom();
  size_t offset = 0;
  for (uint32_t i = 0; i < plan->num_slots; ++i) {
    const tj_shard_slot_t* s = &plan->slots[i];
    int64_t* dims = r->slot_dims + (size_t)i * TJ_MAX_RANK;
    for (int32_t d = 0; d < s->rank; ++d) {
      TJ_RETURN_IF_ERROR(tj_dim_eval(&g->dims, s->dims[d], r->sym, &dims[d]));
    }
    r->slot_offset[i] = offset;
    size_t bytes = (size_t)shape_numel(s->rank, dims) * tj_dtype_size(s->dtype);
    offset += (bytes + 63) & ~(size_t)63;
  }
  r->device_bytes = offset ? offset : 64;
  size_t need = r->device_bytes * (size_t)exe->num_devices;
  if (exe->arena_bytes < need) {
    if (exe->arena) tj_free(exe->a, exe->arena, exe->arena_bytes);
    exe->arena_bytes = 0;
    exe->arena = tj_alloc(exe->a, need);
    if (!exe->arena) return tj_status_oom();
    exe->arena_bytes = need;
  }
  r->base = exe->arena;
  // Scatter the inputs.
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    uint32_t slot = plan->input_slots[i];
    const tj_shard_slot_t* s = &plan->slots[slot];
    for (int32_t d = 0; d < exe->num_devices; ++d) {
      void* dst = slot_ptr(r, d, slot);
      if (s->layout.partial >= 0 &&
          coord_of(&exe->mesh, s->layout.partial, d) != 0) {
        memset(dst, 0,
               (size_t)shape_numel(s->rank, slot_shape(r, slot)) *
                   tj_dtype_size(s->dtype));
        continue;
      }
      int64_t start[TJ_MAX_RANK];
      device_box(r, d, slot, start);
      copy_box(&inputs[i], false, dst, start, slot_shape(r, slot));
    }
  }
  int32_t overlapped = 0;
  for (uint32_t i = 0; i < plan->num_steps; ++i) {
    const tj_shard_step_t* s = &plan->steps[i];
    if (s->kind != TJ_SHARD_STEP_COMPUTE) {
      TJ_RETURN_IF_ERROR(run_collective(r, s));
      continue;
    }
    uint32_t num_ar = exe->overlap_chunks > 1 ? overlapped_steps(r, i) : 0;
    if (num_ar) {
      int32_t chunks = 0;
      TJ_RETURN_IF_ERROR(run_overlapped(r, i, num_ar, &chunks));
      overlapped += chunks;
      i += num_ar;
    } else {
      TJ_RETURN_IF_ERROR(run_compute(r, i, -1, 0, 0));
    }
  }
  // Gather the outputs.
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t slot = plan->output_slots[i];
    const tj_shard_slot_t* s = &plan->slots[slot];
    for (int32_t d = 0; d < exe->num_devices; ++d) {
      bool holder = true;
      for (int32_t a = 0; a < exe->mesh.num_axes; ++a) {
        bool splits = false;
        for (int32_t k = 0; k < s->rank; ++k) splits |= s->layout.split[k] == a;
        if (!splits && coord_of(&exe->mesh, a, d) != 0) holder = false;
      }
      if (!holder) continue;
      int64_t start[TJ_MAX_RANK];
      device_box(r, d, slot, start);
      copy_box(&outputs[i], true, slot_ptr(r, d, slot), start,
               slot_shape(r, slot));
    }
  }
  exe->stats.last_run_comm_bytes_per_device = r->comm_bytes;
  exe->stats.last_run_overlapped_chunks = overlapped;
  ++exe->stats.runs;
  return NULL;
}

tj_status_t tj_sharded_executable_run(tj_sharded_executable_t* exe,
                                      const tj_tensor_t* inputs,
                                      int32_t num_inputs,
                                      const tj_tensor_t* outputs,
                                      int32_t num_outputs) {
  if (!exe) return tj_invalid("tj_sharded_executable_run: NULL executable");
  pthread_mutex_lock(&exe->lock);
  run_t r;
  memset(&r, 0, sizeof(r));
  r.exe = exe;
  r.plan = &exe->plan;
  tj_status_t status =
      run_locked(exe, inputs, num_inputs, outputs, num_outputs, &r);
  size_t nslots = exe->plan.num_slots ? exe->plan.num_slots : 1;
  if (r.slot_dims) {
    tj_free(exe->a, r.slot_dims, sizeof(int64_t) * TJ_MAX_RANK * nslots);
  }
  if (r.slot_offset) tj_free(exe->a, r.slot_offset, sizeof(size_t) * nslots);
  pthread_mutex_unlock(&exe->lock);
  return status;
}

void tj_sharded_executable_stats(const tj_sharded_executable_t* exe,
                                 tj_sharded_stats_t* stats) {
  if (!exe || !stats) return;
  size_t size = stats->struct_size ? stats->struct_size : sizeof(*stats);
  if (size > sizeof(*stats)) size = sizeof(*stats);
  tj_sharded_executable_t* mut = (tj_sharded_executable_t*)exe;
  pthread_mutex_lock(&mut->lock);
  tj_sharded_stats_t st = exe->stats;
  pthread_mutex_unlock(&mut->lock);
  st.struct_size = size;
  memcpy(stats, &st, size);
}

tj_status_t tj_sharded_executable_print(const tj_sharded_executable_t* exe,
                                        char** out_text) {
  if (!out_text) return tj_invalid("tj_sharded_executable_print: no output");
  *out_text = NULL;
  if (!exe) return tj_invalid("tj_sharded_executable_print: NULL executable");
  return tj_shard_plan_print(&exe->plan, out_text);
}
