// libtensorjit: running one graph sharded over a mesh of devices.
//
// Include <tensorjit.h> rather than this file directly.
//
// A mesh is N devices arranged along one or two named axes (e.g. "tp" of 4,
// or "dp" 2 x "tp" 2). Each graph input gets a partition spec: replicated,
// split along some dims over mesh axes, or a partial sum over an axis (each
// device holds a summand). tj_compile_sharded propagates the specs through
// the graph (lib/passes/shard_propagate.c: pointwise ops, matmuls column-
// and row-parallel, reductions, reshapes, transposes), inserts all-reduce,
// all-gather, reduce-scatter and local slices where a use demands another
// layout, and compiles the resulting per-device program (compute segments
// separated by collectives) for each device. A run takes the whole (global)
// tensors on the host, hands each device its shard, runs the devices'
// programs and collectives from the calling thread, and writes the whole
// outputs.
//
// Collectives: between x86 "devices" (several devices of one process) they
// run in host memory, summing in device order (deterministic); for CUDA
// devices the engine is NCCL, opened with dlopen("libnccl.so.2"), with
// NVLink multicast off (the library sets NCCL_NVLS_ENABLE=0 in the process
// environment unless the host set it). This release runs sharded
// executables on meshes of TJ_TARGET_X86 or TJ_TARGET_REFERENCE devices,
// and on a mesh of one CUDA device (its segments' tensors staged through
// the host, as a CPU tensor passed to tj_executable_run is); a mesh of
// several CUDA devices is UNSUPPORTED by tj_compile_sharded (a context
// drives one GPU; the NCCL loader exists, see tj_nccl_available).

#ifndef TENSORJIT_TJ_SHARD_H_
#define TENSORJIT_TJ_SHARD_H_

#include "tensorjit/tj_executable.h"

#ifdef __cplusplus
extern "C" {
#endif

// The most mesh axes and devices.
#define TJ_MESH_MAX_AXES 2
#define TJ_MESH_MAX_DEVICES 64

// One device of a mesh: a target and, for CUDA, its ordinal.
typedef struct tj_mesh_device_t {
  tj_target_t target;
  int32_t device_id;
} tj_mesh_device_t;

// A mesh: |num_axes| (1 or 2) axes named |axis_names| (C identifiers,
// distinct) of |axis_sizes| (>= 1); |devices| holds the product of the
// sizes, row-major over the axes (device d of a 2-D mesh sits at
// (d / axis_sizes[1], d % axis_sizes[1])). Borrowed for the call.
typedef struct tj_mesh_t {
  int32_t num_axes;
  const char* axis_names[TJ_MESH_MAX_AXES];
  int32_t axis_sizes[TJ_MESH_MAX_AXES];
  const tj_mesh_device_t* devices;
} tj_mesh_t;

// How one graph input or output is laid out over the mesh.
//  - |name|: the input's or output's name.
//  - |dim_axes|[d]: the mesh axis that dim d is split over (its size must
//    be a constant divisible by the axis size; device at coordinate j of
//    that axis holds the j-th contiguous block), or NULL: not split. Dims
//    past the tensor's rank must be NULL. An axis splits at most one dim.
//  - |partial_axis|: inputs only: each device along this axis holds a
//    summand, the value is their sum; NULL: none. It may not also split a
//    dim.
// A spec with every field NULL (or no spec at all) means replicated.
typedef struct tj_partition_spec_t {
  const char* name;
  const char* dim_axes[TJ_MAX_RANK];
  const char* partial_axis;
} tj_partition_spec_t;

typedef struct tj_shard_options_t {
  // sizeof(tj_shard_options_t) as the caller was compiled (0: this
  // header's); set by tj_shard_options_initialize.
  size_t struct_size;
  const tj_mesh_t* mesh;
  // Specs for inputs and outputs, matched by name; unnamed ones are
  // replicated. Borrowed for the call.
  const tj_partition_spec_t* input_specs;
  int32_t num_input_specs;
  const tj_partition_spec_t* output_specs;
  int32_t num_output_specs;
  // Compute/communication overlap: a compute segment whose result is
  // all-reduced (a row-parallel matmul) and whose work is independent per
  // row of its leading symbolic dim runs in this many row chunks, the
  // all-reduce of chunk i running while chunk i+1 computes. 0: 4; 1: off.
  int32_t overlap_chunks;
  // Symbol values at which communication bytes and per-device memory are
  // estimated for tj_sharded_executable_stats' plan figures (by symbol
  // name); symbols not named count as 1024.
  int32_t num_symbol_hints;
  const char* const* symbol_hint_names;
  const int64_t* symbol_hint_values;
} tj_shard_options_t;

// Zeroes |options| and sets |struct_size| and the defaults.
TJ_API void tj_shard_options_initialize(tj_shard_options_t* options);

typedef struct tj_sharded_executable_t tj_sharded_executable_t;

// Compiles finalized |graph| for |shard|'s mesh. |options| (NULL: the
// defaults) are the per-device compile options; their target is ignored
// (each device's comes from the mesh). Errors (INVALID_ARGUMENT unless
// said): a mesh with no axes, more than 2, an axis size < 1, duplicate or
// non-identifier names, more than TJ_MESH_MAX_DEVICES devices, or devices
// of mixed targets; a spec naming no input or output of the graph, an
// unknown axis, an axis used twice in one spec, a split dim past the rank,
// a split dim that is symbolic or not divisible by the axis size (each
// names the input or output, the dim and the axis); a partial output spec
// (UNSUPPORTED); a mesh of several CUDA devices (UNSUPPORTED, see above). On
// success
// |*out_executable| is owned by the caller (tj_sharded_executable_release);
// on failure it is NULL and nothing is leaked.
TJ_API tj_status_t tj_compile_sharded(const tj_graph_t* graph,
                                      const tj_shard_options_t* shard,
                                      const tj_compile_options_t* options,
                                      tj_sharded_executable_t** out_executable);

TJ_API void tj_sharded_executable_release(tj_sharded_executable_t* executable);

// Runs the sharded program on whole (global) CPU tensors, in the graph's
// declaration order, with the shapes tj_graph_output_shape gives. A
// partial-sum input is the sum: device 0 along that axis receives it and
// the others zeros. Outputs are assembled from the devices' shards (split
// specs) or taken from the first device (replicated). Runs of one sharded
// executable are serialized. Memory for the shards comes from the graph's
// context allocator, per run (OUT_OF_MEMORY frees everything).
TJ_API tj_status_t tj_sharded_executable_run(
    tj_sharded_executable_t* executable, const tj_tensor_t* inputs,
    int32_t num_inputs, const tj_tensor_t* outputs, int32_t num_outputs);

// The per-device scoreboard.
typedef struct tj_sharded_stats_t {
  // sizeof(tj_sharded_stats_t) as the caller was compiled (0: this
  // header's).
  size_t struct_size;
  int32_t num_devices;
  int32_t num_compute_segments;  // per device
  int32_t num_all_reduce, num_all_gather, num_reduce_scatter, num_slices;
  // Plan figures at the symbol hints, per device: the bytes of the inputs'
  // shards it holds (weights included), of every value its program makes
  // or receives, and what it sends in collectives (ring algorithms:
  // all-reduce 2(n-1)/n of the buffer, all-gather and reduce-scatter
  // (n-1)/n of the whole tensor).
  int64_t input_bytes_per_device;
  int64_t value_bytes_per_device;
  int64_t comm_bytes_per_device;
  // The same unsharded: the whole inputs, as one device would hold them.
  int64_t input_bytes_unsharded;
  // The last run's exact figure, and whether its collectives overlapped
  // compute (row chunks of a segment whose result was all-reduced).
  int64_t last_run_comm_bytes_per_device;
  int32_t last_run_overlapped_chunks;
  int64_t runs;
} tj_sharded_stats_t;

// Fills the fields within |stats->struct_size| bytes.
TJ_API void tj_sharded_executable_stats(
    const tj_sharded_executable_t* executable, tj_sharded_stats_t* stats);

// The per-device program as text: each compute segment's graph (the .tj
// form) with the slots it reads and writes, and each collective as a line
// "all_reduce %s3 -> %s4 over tp" (with "dim=d" for gathers and
// scatters). Owned by the caller (tj_context_free_string of the graph's
// context).
TJ_API tj_status_t tj_sharded_executable_print(
    const tj_sharded_executable_t* executable, char** out_text);

// Whether libnccl.so.2 can be opened and has every symbol the NCCL backend
// uses (for skipping tests and benchmarks). Never aborts.
TJ_API bool tj_nccl_available(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_SHARD_H_
