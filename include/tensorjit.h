// libtensorjit: an embeddable JIT compiler for tensor graphs.
//
// A host builds a graph node by node, then runs it. The block of seed 001,
// y = gelu(x @ w + b) with a symbolic batch B, on the reference interpreter:
//
//   tj_context_t* ctx = NULL;
//   tj_graph_t* g = NULL;
//   tj_status_t st = tj_context_create(NULL, &ctx);
//   if (!st) st = tj_graph_create(ctx, "block", &g);
//   if (!st) {
//     int64_t B = tj_graph_symbol(g, "B");
//     tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2,
//                                   (int64_t[]){B, 1024}, "x");
//     tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2,
//                                   (int64_t[]){1024, 4096}, "w");
//     tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4096},
//                                   "b");
//     tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true),
//                     "y");
//     st = tj_graph_finalize(g);  // the first builder error, if any
//   }
//   if (!st) {
//     tj_tensor_t in[3] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape), ...};
//     tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, yshape);
//     st = tj_reference_run(g, in, 3, &out, 1);
//   }
//   if (st) fprintf(stderr, "%s\n", tj_status_message(st));
//   tj_status_free(st);
//   tj_graph_destroy(g);
//   tj_context_destroy(ctx);

#ifndef TENSORJIT_H_
#define TENSORJIT_H_

#include "tensorjit/tj_autodiff.h"
#include "tensorjit/tj_base.h"
#include "tensorjit/tj_custom_op.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_onnx.h"
#include "tensorjit/tj_optimize.h"
#include "tensorjit/tj_quant.h"
#include "tensorjit/tj_tensor.h"
#include "tensorjit/tj_verify.h"
#include "tensorjit/tj_shard.h"

#endif  // TENSORJIT_H_
