// Collectives between the devices of a mesh whose buffers are host memory
// (x86 and reference "devices" of one process): the host backend of the
// sharded executor (backends/shard_exec.c). Deterministic: sums run in
// device order along the axis, so every run of a plan gives the same bits.
// No allocation, no failure beyond an unsupported dtype.

#ifndef TJ_BACKENDS_RUNTIME_COLLECTIVE_H_
#define TJ_BACKENDS_RUNTIME_COLLECTIVE_H_

#include "lib/base.h"

#define TJ_COLLECTIVE_MAX_AXES 2

typedef struct tj_collective_mesh_t {
  int32_t num_axes;
  int32_t sizes[TJ_COLLECTIVE_MAX_AXES];
} tj_collective_mesh_t;

// The devices of |device|'s group along |axis| in coordinate order, into
// |members| (room for sizes[axis]); returns |device|'s coordinate.
int32_t tj_collective_group(const tj_collective_mesh_t* mesh, int32_t axis,
                            int32_t device, int32_t* members);

// All-reduce (sum) of elements [begin, end) of every device's |src| into
// its |dst| (src and dst may be the same buffers).
tj_status_t tj_collective_all_reduce(const tj_collective_mesh_t* mesh,
                                     int32_t axis, tj_dtype_t dtype,
                                     void* const* src, void* const* dst,
                                     int64_t begin, int64_t end);

// Shapes: |src_dims| is each device's |rank| local dims. All-gather along
// |dim|: dst has n times src's dims[dim], member j's block j. Reduce-
// scatter along |dim|: dst has src's dims[dim] / n, the sum of block c
// (c: the device's coordinate). Slice: dst is block c of the device's own
// src (no exchange).
tj_status_t tj_collective_all_gather(const tj_collective_mesh_t* mesh,
                                     int32_t axis, int32_t dim,
                                     tj_dtype_t dtype, int32_t rank,
                                     const int64_t* src_dims, void* const* src,
                                     void* const* dst);
tj_status_t tj_collective_reduce_scatter(const tj_collective_mesh_t* mesh,
                                         int32_t axis, int32_t dim,
                                         tj_dtype_t dtype, int32_t rank,
                                         const int64_t* src_dims,
                                         void* const* src, void* const* dst);
tj_status_t tj_collective_slice(const tj_collective_mesh_t* mesh, int32_t axis,
                                int32_t dim, tj_dtype_t dtype, int32_t rank,
                                const int64_t* src_dims, void* const* src,
                                void* const* dst);

#endif  // TJ_BACKENDS_RUNTIME_COLLECTIVE_H_
