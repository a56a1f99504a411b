// lib/passes/quant.h: the quantization passes' entry points (issue 17).

#ifndef TJ_LIB_PASSES_QUANT_H_
#define TJ_LIB_PASSES_QUANT_H_

#include "lib/passes/pass.h"

// decompose's arm for quantize and dequantize (lib/passes/quant_decompose.c):
// appends the node's core-op form to |rw|, |ops| its three operands in the
// new graph (TJ_NODE_NONE for an absent zero point), the result in |out|.
tj_status_t tj_decompose_quant(tj_rewriter_t* rw, const tj_node_t* node,
                               const uint32_t* ops, uint32_t* out);

#endif  // TJ_LIB_PASSES_QUANT_H_
