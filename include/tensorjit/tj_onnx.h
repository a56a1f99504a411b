// libtensorjit: importing ONNX models as graphs.
//
// Include <tensorjit.h> rather than this file directly. The importer parses
// with protobuf-c's code for ONNX's own onnx.proto (generated at build time);
// memory comes from the context's allocator.

#ifndef TENSORJIT_TJ_ONNX_H_
#define TENSORJIT_TJ_ONNX_H_

#include "tensorjit/tj_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// tj_onnx_import_options_t
//===----------------------------------------------------------------------===//

// A value for one dim_param of the model's inputs: every dim named |name|
// becomes the constant |value| (>= 0) instead of a symbol.
typedef struct tj_onnx_symbol_override_t {
  const char* name;
  int64_t value;
} tj_onnx_symbol_override_t;

// A value for one graph input, given at import: the input becomes a
// constant, as an initializer would, and the graph no longer takes it. This
// is how a model whose shape-determining inputs (a reduction's axes,
// Reshape's shape, Pad's pads, Slice's bounds) are graph inputs is pinned
// to one value of them, which the importer needs to fold them.
typedef struct tj_onnx_input_value_t {
  const char* name;   // the ONNX graph input's name, as in the model
  tj_tensor_t value;  // a dense CPU tensor (strides NULL), borrowed
} tj_onnx_input_value_t;

typedef struct tj_onnx_import_options_t {
  // sizeof(tj_onnx_import_options_t) as the caller was compiled, set by
  // tj_onnx_import_options_initialize; an unknown size is INVALID_ARGUMENT.
  size_t struct_size;
  // The directory that external data files (TensorProto.data_location ==
  // EXTERNAL) are read from. NULL: tj_onnx_import refuses external data;
  // tj_onnx_import_file uses the model file's directory. A location must be
  // a relative path that stays inside this directory (no "..", no absolute
  // path, no link that leads out of it).
  const char* base_dir;
  // |num_symbol_overrides| entries (borrowed for the call): dim_params
  // fixed to constants. Other dim_params become graph symbols of the same
  // name (made a C identifier: other characters become '_'); a dim with
  // neither a value nor a param becomes the symbol <input>_<axis>.
  const tj_onnx_symbol_override_t* symbol_overrides;
  int32_t num_symbol_overrides;
  // |num_input_values| entries (borrowed for the call; the data is copied):
  // graph inputs made constants. Each names a graph input that is not an
  // initializer, at most once, and its value has the input's dtype and rank
  // and every declared dim_value; dim_params take the value's sizes. Else
  // INVALID_ARGUMENT naming it. Added after the first release: a caller
  // compiled with the older, shorter struct (struct_size up to
  // num_symbol_overrides) gets none.
  const tj_onnx_input_value_t* input_values;
  int32_t num_input_values;
} tj_onnx_import_options_t;

// Fills |options| with the defaults and sets |struct_size|.
TJ_API void tj_onnx_import_options_initialize(
    tj_onnx_import_options_t* options);

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

// Imports the serialized ModelProto in |bytes| (|size| bytes, borrowed for
// the call) into a new finalized graph named after the ONNX graph (made a C
// identifier). |options| may be NULL for the defaults.
//
// - Opsets 11 up to the newest the importer knows, for the default domain
//   ("" or "ai.onnx"); model-local functions (ModelProto.functions) are
//   expanded with their bodies.
// - Graph inputs that are not initializers become graph inputs in order,
//   their names made C identifiers (other characters become '_', a leading
//   digit gets a '_' before it, a repeated name gets a _N suffix); outputs
//   likewise. Initializers (raw_data, the typed fields, or external data)
//   are constants copied into the graph.
// - Shape-determining inputs (Reshape's shape, Slice's bounds, Pad's pads,
//   Expand's shape, reduction axes, ...) must be constants, or computable
//   from constants and static dims (Shape, Gather, Concat, Cast,
//   arithmetic, ...); otherwise the error names the node and input.
// - dtypes: f32, f16, bf16, f64, i8, i32, i64, bool.
// - Control flow is imported inline; the graph has no control flow op. An
//   If whose condition is known at import (a constant, folded, or pinned
//   through |input_values|) imports only its taken branch; a run-time
//   condition imports and computes both branches and selects each output
//   (they must agree in dtype and shape). A Loop needs its trip count and
//   condition known at import (its body's condition too, each iteration)
//   and is unrolled, scan outputs stacked on axis 0; a Scan is unrolled
//   over its static sequence length. At most 65536 body node copies are
//   made per outermost If, Loop or Scan. A dynamic trip count or
//   condition, or a symbolic sequence length, is UNSUPPORTED naming the
//   node and the input.
//
// Errors: INVALID_ARGUMENT for bytes that are no ModelProto, a malformed
// model (dangling names, wrong arity, bad tensor data) or an external data
// path that leaves |base_dir|; UNSUPPORTED for an op, attribute, opset or
// dtype the importer does not map, naming the node (name and index), the
// op and the opset; OUT_OF_MEMORY. On success |*out_graph| is owned by the
// caller (tj_graph_destroy); on failure it is NULL.
TJ_API tj_status_t tj_onnx_import(tj_context_t* context, const void* bytes,
                                  size_t size,
                                  const tj_onnx_import_options_t* options,
                                  tj_graph_t** out_graph);

// Reads the file at |path| and imports it as tj_onnx_import does; external
// data is read beside it unless |options|->base_dir says otherwise. A file
// that cannot be read is INVALID_ARGUMENT naming it.
TJ_API tj_status_t tj_onnx_import_file(tj_context_t* context, const char* path,
                                       const tj_onnx_import_options_t* options,
                                       tj_graph_t** out_graph);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_ONNX_H_
