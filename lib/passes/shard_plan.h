// The sharding propagation pass's result (lib/passes/shard_propagate.c):
// the per-device program of a graph over a device mesh, as a sequence of
// steps over numbered slots (per-device buffers). Target-free: the driver
// (backends/shard_exec.c) compiles each compute segment and runs the
// collectives (backends/runtime/collective.h).

#ifndef TJ_LIB_PASSES_SHARD_PLAN_H_
#define TJ_LIB_PASSES_SHARD_PLAN_H_

#include "lib/passes/pass.h"

#define TJ_SHARD_MAX_AXES 2

// How a value lies over the mesh: dim d split over mesh axis split[d] (-1:
// whole), and a partial sum over axis |partial| (-1: none). Each axis is
// used at most once.
typedef struct tj_shard_layout_t {
  int8_t split[TJ_MAX_RANK];
  int8_t partial;
} tj_shard_layout_t;

typedef enum tj_shard_step_kind_e {
  TJ_SHARD_STEP_COMPUTE,
  TJ_SHARD_STEP_ALL_REDUCE,      // sum over |axis|'s groups, to every member
  TJ_SHARD_STEP_ALL_GATHER,      // concat |dim|'s blocks over |axis|
  TJ_SHARD_STEP_REDUCE_SCATTER,  // sum, then member j keeps block j of |dim|
  TJ_SHARD_STEP_SLICE,           // member j keeps block j of |dim| (no comm)
} tj_shard_step_kind_t;

typedef struct tj_shard_slot_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];  // local dims, in the plan graph's dim table
  tj_shard_layout_t layout;
} tj_shard_slot_t;

typedef struct tj_shard_step_t {
  tj_shard_step_kind_t kind;
  // COMPUTE: a finalized per-device graph whose input i is slot in_slots[i]
  // and output i slot out_slots[i] (every device runs the same graph).
  tj_graph_t* graph;
  uint32_t* in_slots;
  uint32_t num_in;
  uint32_t* out_slots;
  uint32_t num_out;
  // COMPUTE: every node is independent per index of dim 0 of symbol
  // |chunk_symbol| (an id; -1: not chunkable), which is dim 0 of every input
  // and output that has it anywhere: the segment may run in row chunks.
  int32_t chunk_symbol;
  // Collectives and SLICE.
  uint32_t src, dst;
  int32_t axis, dim;
} tj_shard_step_t;

typedef struct tj_shard_plan_t {
  tj_allocator_t allocator;
  int32_t num_axes;
  int32_t axis_sizes[TJ_SHARD_MAX_AXES];
  const char* axis_names[TJ_SHARD_MAX_AXES];  // owned copies
  // The caller's graph decomposed (core ops only), owned: slot dims are in
  // its table; its inputs and outputs are the caller's.
  tj_graph_t* graph;
  tj_shard_slot_t* slots;
  uint32_t num_slots, slot_capacity;
  tj_shard_step_t* steps;
  uint32_t num_steps, step_capacity;
  uint32_t* input_slots;   // per graph input
  uint32_t* output_slots;  // per graph output
  // Plan figures at the symbol hints (tj_sharded_stats_t).
  int64_t input_bytes, value_bytes, comm_bytes, input_bytes_unsharded;
} tj_shard_plan_t;

// The inputs of the pass: mesh axes and a layout per graph input and
// output (indexes of |layouts|: inputs then outputs).
typedef struct tj_shard_request_t {
  int32_t num_axes;
  int32_t axis_sizes[TJ_SHARD_MAX_AXES];
  const char* axis_names[TJ_SHARD_MAX_AXES];
  const tj_shard_layout_t* input_layouts;
  const tj_shard_layout_t* output_layouts;
  int64_t symbol_hints[TJ_MAX_SYMBOLS];  // by symbol id; 0: 1024
} tj_shard_request_t;

// Decomposes finalized |graph| and propagates |request|'s layouts through
// it, producing the per-device program. Errors: OUT_OF_MEMORY, or
// INVALID_ARGUMENT / UNSUPPORTED naming the node. |plan| is cleared on
// failure; on success free it with tj_shard_plan_deinitialize.
tj_status_t tj_shard_propagate(tj_pass_ctx_t* ctx, const tj_graph_t* graph,
                               const tj_shard_request_t* request,
                               tj_shard_plan_t* plan);
void tj_shard_plan_deinitialize(tj_shard_plan_t* plan);

// The number of devices holding distinct coordinates along |axis|.
static inline int32_t tj_shard_axis_size(const tj_shard_plan_t* plan,
                                         int32_t axis) {
  return plan->axis_sizes[axis];
}

// The plan as text (see tj_sharded_executable_print), owned by |allocator|
// (tj_free_string).
tj_status_t tj_shard_plan_print(const tj_shard_plan_t* plan, char** out_text);

#endif  // TJ_LIB_PASSES_SHARD_PLAN_H_
