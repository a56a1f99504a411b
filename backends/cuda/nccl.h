// NCCL through dlopen("libnccl.so.2"): the collectives engine of CUDA
// meshes (include/tensorjit/tj_shard.h). No NCCL header at build time: the
// types below are nccl.h's (an int result, enums as ints, opaque comms).
// Every ncclResult_t becomes a status here (never an abort); NVLink
// multicast (NVLS) is kept off: NCCL_NVLS_ENABLE=0 is put in the process
// environment before the first communicator unless the host set it, and
// nothing here calls cuMulticastCreate.

#ifndef TJ_BACKENDS_CUDA_NCCL_H_
#define TJ_BACKENDS_CUDA_NCCL_H_

#include "backends/cuda/cuda_abi.h"
#include "lib/base.h"

// The loaded library (process-wide, opened once, never closed). UNSUPPORTED
// naming what is missing when libnccl.so.2 or one of its symbols is absent.
tj_status_t tj_nccl_load(void);
// NCCL's version as 10000 * major + 100 * minor + patch (0 if not loaded).
int32_t tj_nccl_version(void);

// One communicator per device of a single process driving |n| GPUs
// (ncclCommInitAll), rank i on CUDA ordinal devices[i].
typedef struct tj_nccl_comms_t tj_nccl_comms_t;
tj_status_t tj_nccl_comms_create(tj_allocator_t allocator, int32_t n,
                                 const int32_t* devices,
                                 tj_nccl_comms_t** out_comms);
void tj_nccl_comms_destroy(tj_nccl_comms_t* comms);
int32_t tj_nccl_comms_size(const tj_nccl_comms_t* comms);

// Brackets the calls of several ranks from one thread (ncclGroupStart/End).
tj_status_t tj_nccl_group_start(void);
tj_status_t tj_nccl_group_end(void);

// Collectives of rank |rank| on |stream| (device pointers of its GPU; the
// CUDA context of that device must be current). Sums. |count| is elements:
// of each buffer for all-reduce, of the send buffer for all-gather, of
// the receive buffer for reduce-scatter. UNSUPPORTED for bool.
tj_status_t tj_nccl_all_reduce(const tj_nccl_comms_t* comms, int32_t rank,
                               tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                               size_t count, tj_dtype_t dtype,
                               tj_cu_stream_t stream);
tj_status_t tj_nccl_all_gather(const tj_nccl_comms_t* comms, int32_t rank,
                               tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                               size_t send_count, tj_dtype_t dtype,
                               tj_cu_stream_t stream);
tj_status_t tj_nccl_reduce_scatter(const tj_nccl_comms_t* comms, int32_t rank,
                                   tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                                   size_t recv_count, tj_dtype_t dtype,
                                   tj_cu_stream_t stream);

#endif  // TJ_BACKENDS_CUDA_NCCL_H_
