// libtensorjit: tensors handed to a run, and running on the reference
// interpreter. Include <tensorjit.h> rather than this file directly.

#ifndef TENSORJIT_TJ_TENSOR_H_
#define TENSORJIT_TJ_TENSOR_H_

#include "tensorjit/tj_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// tj_tensor_t
//===----------------------------------------------------------------------===//

// Where a tensor's bytes live; the values are DLPack's DLDeviceType codes.
typedef enum tj_device_type_e {
  TJ_DEVICE_CPU = 1,
  TJ_DEVICE_CUDA = 2,
} tj_device_type_t;

// A view of caller memory: the fields of DLPack's DLTensor. Nothing in it is
// owned by libtensorjit; every pointer is borrowed for the duration of the
// call it is passed to.
//
// What a run checks of the memory, on every target, before any work
// (INVALID_ARGUMENT naming the tensors): the device type is CPU (or CUDA
// where the target takes device tensors), and a CPU tensor's device_id is
// 0, as DLPack defines it; a tensor with elements has non-NULL data; data +
// byte_offset + the reach of its strides stays inside the address space, and
// that reach fits in int64 bytes; an output's elements are distinct (no zero
// stride on a dim of size > 1, no strides that make two indices land on one
// element; sorted by |stride|, each dim's stride must clear the span of the
// smaller ones, which dense, transposed, padded and reversed layouts do); and
// an output's bytes, taken as the interval from its lowest to one past its
// highest element, do not meet those of an input or of another output on the
// same device. Inputs may overlap each other and repeat elements (zero strides
// broadcast). Tensors with no elements take no memory and overlap nothing.
typedef struct tj_tensor_t {
  void* data;
  tj_device_type_t device_type;
  int32_t device_id;
  tj_dtype_t dtype;
  int32_t rank;
  const int64_t* shape;    // |rank| concrete sizes, each >= 0
  const int64_t* strides;  // in elements; NULL means dense row-major
  uint64_t byte_offset;    // added to |data|
} tj_tensor_t;

// A dense row-major CPU tensor descriptor over |data|.
static inline tj_tensor_t tj_tensor_make(void* data, tj_dtype_t dtype,
                                         int32_t rank, const int64_t* shape) {
  tj_tensor_t t;
  t.data = data;
  t.device_type = TJ_DEVICE_CPU;
  t.device_id = 0;
  t.dtype = dtype;
  t.rank = rank;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

//===----------------------------------------------------------------------===//
// Shapes at run time
//===----------------------------------------------------------------------===//

// Binds the symbols of finalized |graph| from the shapes of its |num_inputs|
// inputs (in declaration order) and checks every input's dtype, rank and
// dims, and every guard recorded while building (e.g. two symbols that
// broadcasting required equal). Then writes the concrete shape of output
// |output_index| to |out_dims| (room for TJ_MAX_RANK) and its rank to
// |*out_rank|. A mismatch is INVALID_ARGUMENT naming the input, the dim and
// both values.
TJ_API tj_status_t tj_graph_output_shape(const tj_graph_t* graph,
                                         const tj_tensor_t* inputs,
                                         int32_t num_inputs,
                                         int32_t output_index,
                                         int32_t* out_rank, int64_t* out_dims);

//===----------------------------------------------------------------------===//
// The reference interpreter
//===----------------------------------------------------------------------===//

// Runs finalized |graph| exactly, one op at a time, on the CPU: the oracle
// every compiled backend is checked against, and the eager baseline. Every
// op rounds its result to its dtype; float math is done in double.
// |inputs| and |outputs| are CPU tensors in declaration order; each output's
// shape must equal tj_graph_output_shape's and its memory must not overlap
// an input, another output or itself (see tj_tensor_t). Scratch memory comes
// from the graph's context allocator and is freed before returning. Thread-safe
// for a finalized graph.
TJ_API tj_status_t tj_reference_run(const tj_graph_t* graph,
                                    const tj_tensor_t* inputs,
                                    int32_t num_inputs,
                                    const tj_tensor_t* outputs,
                                    int32_t num_outputs);

// tj_reference_run for graphs whose outputs have data-dependent dims, as
// tj_executable_run_shaped: outputs at their upper bounds (dense for those
// outputs), the actual dims to |out_shapes| (TJ_MAX_RANK per output), the
// data dense in them from the start of each buffer.
TJ_API tj_status_t tj_reference_run_shaped(
    const tj_graph_t* graph, const tj_tensor_t* inputs, int32_t num_inputs,
    const tj_tensor_t* outputs, int32_t num_outputs, int64_t* out_shapes);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_TENSOR_H_
