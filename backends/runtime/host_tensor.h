// Host-side tensor helpers that every runtime uses (backends/x86,
// backends/cuda, the driver in backends/compile.c): density, byte
// addresses, strided copies and the check of a run's output tensors. One
// copy, one set of error messages. (A lowered kernel's scalar params are
// kir/lower.h's tj_lowered_kernel_scalars.)

#ifndef TJ_BACKENDS_RUNTIME_HOST_TENSOR_H_
#define TJ_BACKENDS_RUNTIME_HOST_TENSOR_H_

#include "lib/ir.h"
#include "tensorjit/tj_tensor.h"

// Whether |t| is dense row-major (NULL strides, or strides that say so;
// size-1 dims take any stride, and a tensor with no elements is dense).
bool tj_host_tensor_dense(const tj_tensor_t* t);

// |base| + |offset| bytes; NULL stays NULL (a tensor with no elements, an
// empty arena): C leaves even NULL + 0 undefined.
unsigned char* tj_host_byte_at(void* base, int64_t offset);

// The first element of |t|: data + byte_offset (NULL stays NULL).
unsigned char* tj_host_tensor_data(const tj_tensor_t* t);

// The product of |rank| dims.
int64_t tj_host_numel(int32_t rank, const int64_t* dims);

// Copies a |rank|-dim array of |size|-byte elements between strided host
// layouts (strides in elements; NULL is dense row-major).
void tj_host_copy_strided(unsigned char* dst, const int64_t* dst_strides,
                          const unsigned char* src, const int64_t* src_strides,
                          int32_t rank, const int64_t* shape, size_t size);

// Checks a run's |outputs| against the outputs of |graph| for symbol
// values |sym|: device (CPU, or also CUDA with |allow_cuda|), dtype, rank,
// shape, and data for tensors with elements. INVALID_ARGUMENT naming the
// output.
tj_status_t tj_host_check_outputs(const tj_graph_t* graph,
                                  const tj_tensor_t* outputs,
                                  const int64_t* sym, bool allow_cuda);

#endif  // TJ_BACKENDS_RUNTIME_HOST_TENSOR_H_
