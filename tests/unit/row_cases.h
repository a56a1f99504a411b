// Row kernels over long rows (issue 14): softmax (plain and attention's
// masked, scaled form), log_softmax, layer_norm and rms_norm over the last
// axis, built for the offline PTX test (tests/unit/row_ptx_test.c) and the
// GPU test against the reference (tests/cuda/cuda_row_test.c).

#ifndef TJ_TESTS_UNIT_ROW_CASES_H_
#define TJ_TESTS_UNIT_ROW_CASES_H_

#include "tensorjit/tj_graph.h"

typedef enum row_op_e {
  ROW_SOFTMAX,         // softmax(x)
  ROW_MASKED_SOFTMAX,  // softmax(x * 0.125 + mask), mask [R, N] additive
  ROW_LOG_SOFTMAX,     // log_softmax(x)
  ROW_LAYER_NORM,      // layer_norm(x, gamma, beta), eps 1e-5
  ROW_RMS_NORM,        // rms_norm(x, gamma), eps 1e-6
  ROW_OP_COUNT_,
} row_op_t;

static const char* const kRowOpNames[ROW_OP_COUNT_] = {
    "softmax", "masked_softmax", "log_softmax", "layer_norm", "rms_norm"};

// Inputs of |op|: x [R, N], then mask [R, N] or gamma [N] (and beta [N]).
static inline int row_case_inputs(row_op_t op) {
  return op == ROW_SOFTMAX || op == ROW_LOG_SOFTMAX ? 1
         : op == ROW_LAYER_NORM                     ? 3
                                                    : 2;
}

// The graph of |op| over rows of |n| elements (n <= 0: the symbol N) and
// |rows| rows (rows <= 0: the symbol R), finalized by the caller.
static inline tj_graph_t* row_case_build(tj_context_t* ctx, row_op_t op,
                                         tj_dtype_t dt, int64_t rows,
                                         int64_t n) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, kRowOpNames[op], &g) != NULL) return NULL;
  int64_t r = rows > 0 ? rows : tj_graph_symbol(g, "R");
  int64_t c = n > 0 ? n : tj_graph_symbol(g, "N");
  tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){r, c}, "x");
  tj_value_t y = tj_value_none();
  switch (op) {
    case ROW_SOFTMAX:
      y = tj_graph_softmax(g, x, -1);
      break;
    case ROW_MASKED_SOFTMAX: {
      tj_value_t m = tj_graph_input(g, dt, 2, (int64_t[]){r, c}, "mask");
      float s = 0.125f;
      tj_value_t scale = tj_graph_cast(
          g, tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &s, sizeof(s)), dt);
      y = tj_graph_softmax(g, tj_graph_add(g, tj_graph_mul(g, x, scale), m),
                           -1);
      break;
    }
    case ROW_LOG_SOFTMAX:
      y = tj_graph_log_softmax(g, x, -1);
      break;
    case ROW_LAYER_NORM: {
      tj_value_t gamma = tj_graph_input(g, dt, 1, (int64_t[]){c}, "gamma");
      tj_value_t beta = tj_graph_input(g, dt, 1, (int64_t[]){c}, "beta");
      y = tj_graph_layer_norm(g, x, gamma, beta, 1e-5);
      break;
    }
    case ROW_RMS_NORM: {
      tj_value_t gamma = tj_graph_input(g, dt, 1, (int64_t[]){c}, "gamma");
      y = tj_graph_rms_norm(g, x, gamma, 1e-6);
      break;
    }
    case ROW_OP_COUNT_:
      break;
  }
  tj_graph_output(g, y, "y");
  return g;
}

#endif  // TJ_TESTS_UNIT_ROW_CASES_H_
