// libtensorjit: quantizing a graph (issue 17).
//
// Two transforms a user calls on a finalized float graph, each returning a
// new finalized graph (the input is not changed):
//
//   tj_graph_quantize_weights  the constant weights of its matmuls become
//       int8 per output channel or int4 per group along K, written as
//       dequantize(q, scale) in the graph (QDQ form). Weights need no data:
//       each channel's (or group's) scale is its largest magnitude over 127
//       (int8) or 7 (int4), symmetric, no zero point. On x86 the GEMM then
//       reads the quantized bytes and dequantizes them in registers: the
//       weights move 4x (int8) or ~7.8x (int4, f32 scale per 128) fewer
//       bytes than f32.
//   tj_calibrate  runs sample inputs through the graph on the reference
//       interpreter, picks a scale (and zero point) for the activation each
//       matmul reads (by min-max, a percentile of the values seen, or the
//       entropy threshold) and
//       inserts quantize -> dequantize on it (static QDQ). Deterministic for
//       fixed inputs.
//
//   tj_graph_t* q = NULL;
//   tj_quantize_weights_options_t wo;
//   tj_quantize_weights_options_initialize(&wo);
//   wo.format = TJ_WEIGHT_INT4_PER_GROUP;   // group_size 128
//   tj_status_t s = tj_graph_quantize_weights(graph, &wo, &q, NULL);
//   // ... tj_compile(q, ...), run as before; tj_graph_destroy(q).
//
// Include <tensorjit.h> rather than this file directly. Available since:
// 0.1 (unstable, like the rest of the API before 1.0).

#ifndef TENSORJIT_TJ_QUANT_H_
#define TENSORJIT_TJ_QUANT_H_

#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// tj_graph_quantize_weights
//===----------------------------------------------------------------------===//

typedef uint32_t tj_weight_format_t;
enum tj_weight_format_e {
  // i8 [K, N], one f32 scale per output channel n: max_k |W[k, n]| / 127.
  TJ_WEIGHT_INT8_PER_CHANNEL = 1,
  // Signed int4 packed two a byte along N, one f32 scale per group of
  // |group_size| rows along K and output channel: max |W| / 7.
  TJ_WEIGHT_INT4_PER_GROUP = 2,
};

typedef struct tj_quantize_weights_options_t {
  tj_weight_format_t format;  // TJ_WEIGHT_*
  int64_t group_size;         // int4: 32, 64 or 128 (default 128)
  // Weights with fewer elements stay float (default 1024: a bias-sized
  // matrix gains nothing).
  int64_t min_elements;
  uint32_t flags;  // must be 0
} tj_quantize_weights_options_t;

// Defaults: int8 per channel, groups of 128, min_elements 1024.
TJ_API void tj_quantize_weights_options_initialize(
    tj_quantize_weights_options_t* options);

// Returns a copy of finalized |graph| in which every matmul whose B operand
// (or linear whose w) is a rank-2 f32 or bf16 constant [K, N] of at least
// |min_elements| elements reads dequantize(q, scale) instead (q rounded half to
// even, as quantize does). |*out_num_quantized| (may be NULL) is the number of
// weights replaced. On success |*out_graph| is finalized and owned by the
// caller; destroy with tj_graph_destroy. On failure it is NULL:
// INVALID_ARGUMENT for an unfinalized graph, a bad format, group size or
// flags. Uses |graph|'s context allocator. Thread-safe for a finalized
// graph.
TJ_API tj_status_t tj_graph_quantize_weights(
    const tj_graph_t* graph, const tj_quantize_weights_options_t* options,
    tj_graph_t** out_graph, int32_t* out_num_quantized);

//===----------------------------------------------------------------------===//
// tj_calibrate
//===----------------------------------------------------------------------===//

typedef uint32_t tj_calibrate_method_t;
enum tj_calibrate_method_e {
  // The range of every value seen (widened to contain 0).
  TJ_CALIBRATE_MINMAX = 0,
  // The |percentile| and 100 - |percentile| percentiles of the values seen
  // (symmetric i8: the |percentile| percentile of |x|): outliers clip.
  TJ_CALIBRATE_PERCENTILE = 1,
  // Entropy (KL divergence, TensorRT's and ONNX Runtime's method): the
  // histogram of |x| in 2048 bins, and the threshold t (a bin edge, 128 bins
  // or more) whose clipped distribution merged into 128 levels loses the
  // least information (KL(P || Q)); the range is [-t, t] (symmetric i8) or
  // the values' range clipped to it (u8). Clips rare outliers.
  TJ_CALIBRATE_ENTROPY = 2,
};

typedef struct tj_calibrate_options_t {
  tj_calibrate_method_t method;
  double percentile;  // PERCENTILE: in (50, 100] (default 99.99)
  // The activations' quantized dtype: TJ_DTYPE_U8 (asymmetric, zero point;
  // the default) or TJ_DTYPE_I8 (symmetric, no zero point).
  tj_dtype_t dtype;
  uint32_t flags;  // TJ_CALIBRATE_* flags below, or 0
} tj_calibrate_options_t;

// tj_calibrate_options_t.flags.
enum tj_calibrate_flag_e {
  // SmoothQuant's scale migration (alpha 0.5) for activations whose every
  // matmul reads a float constant weight [K, N]: per input channel k,
  // s_k = sqrt(max |x_k| / max_n |W[k, n]|) over the samples, the
  // activation divided by s (a mul by 1/s before its quantize) and the
  // weights' rows multiplied by it (new constants), so that channels of
  // outlier activations no longer set the whole tensor's scale. Quantize
  // the weights after (tj_graph_quantize_weights on the result).
  TJ_CALIBRATE_SMOOTH = 1u << 0,
};

// Defaults: min-max, percentile 99.99, u8.
TJ_API void tj_calibrate_options_initialize(tj_calibrate_options_t* options);

// Runs |num_samples| samples through finalized |graph| on the reference
// interpreter (sample i: |graph|'s inputs in order at |samples|[i * n ..
// i * n + n - 1], n = the graph's input count; the tensors are read only)
// and returns a copy in which the f32 activation each matmul reads as A
// (not a constant) goes through quantize -> dequantize with the scale and
// zero point the method picks from the values seen by all samples.
// |*out_num_calibrated| (may be NULL) is the number of activations given
// QDQ. On success |*out_graph| is finalized and owned by the caller;
// destroy with tj_graph_destroy. On failure it is NULL: INVALID_ARGUMENT
// for bad options, no samples, or a sample the reference refuses (its
// message names the sample). Deterministic: the same samples give the same
// graph. Thread-safe for a finalized graph.
TJ_API tj_status_t tj_calibrate(const tj_graph_t* graph,
                                const tj_calibrate_options_t* options,
                                int32_t num_samples, const tj_tensor_t* samples,
                                tj_graph_t** out_graph,
                                int32_t* out_num_calibrated);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_QUANT_H_
