// Decoding one serialized ONNX TensorProto (a backend test's
// input_N.pb / output_N.pb) into a host buffer, for tests and tools. Only
// the dtypes the importer maps (tj_onnx.h).

#ifndef TJ_ONNX_ONNX_TENSOR_H_
#define TJ_ONNX_ONNX_TENSOR_H_

#include "tensorjit.h"

// On success |*out_data| holds |*out_bytes| bytes of dense row-major
// |*out_dtype| elements of shape |out_dims|[0..*out_rank) (room for
// TJ_MAX_RANK), from |context|'s allocator (free with tj_free and that
// size; NULL when the size is 0). INVALID_ARGUMENT for bytes that are no
// TensorProto, UNSUPPORTED for a dtype with no libtensorjit dtype.
tj_status_t tj_onnx_tensor_parse(tj_context_t* context, const void* bytes,
                                 size_t size, tj_dtype_t* out_dtype,
                                 int32_t* out_rank, int64_t* out_dims,
                                 void** out_data, size_t* out_bytes);

// The TensorProto's name (a backend test's input files name the graph
// input they feed) into |name| (|size| bytes, NUL-terminated, cut to fit;
// "" when it has none). INVALID_ARGUMENT for bytes that are no
// TensorProto.
tj_status_t tj_onnx_tensor_name(tj_context_t* context, const void* bytes,
                                size_t size, char* name, size_t name_size);

#endif  // TJ_ONNX_ONNX_TENSOR_H_
