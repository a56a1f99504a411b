// tj-echo: parses a .tj file, rebuilds every node through the PUBLIC
// tj_graph_* builder (one call per op, as a host program would make them)
// into a second graph, and prints that. Comparing its output with tj-opt's
// proves that the parser and the public builder agree on every op, attribute
// and type (llvm-c-test --echo in spirit).
//
//   tj-echo [--split-input-file] [FILE|-]
//
// The source graph is read through internal structs only for what the
// public API does not expose (op and attributes); everything built goes
// through tensorjit.h.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/window.h"
#include "tensorjit.h"
#include "tools/tool_io.h"

//===--- rebuilding ---===//

// The dim |d| of |src| rebuilt in |dst| from symbols, sums and products.
static int64_t echo_dim(const tj_graph_t* src, tj_graph_t* dst, int64_t d) {
  if (d >= 0) return d;
  const tj_dim_expr_t* e = tj_dim_expr(&src->dims, d);
  if (!e) return TJ_DIM_INVALID;
  int64_t sum = 0;
  for (uint32_t t = 0; t < e->num_terms; ++t) {
    const tj_dim_term_t* term = &e->terms[t];
    int64_t product = term->coeff;
    for (uint32_t f = 0; f < term->num_factors; ++f) {
      const char* name = tj_dim_symbol_name(&src->dims, term->factors[f]);
      product = tj_graph_dim_mul(dst, product, tj_graph_symbol(dst, name));
    }
    sum = tj_graph_dim_add(dst, sum, product);
  }
  return sum;
}

// The shape of |value| in |src|, through the public readers, rebuilt.
static int32_t echo_shape(const tj_graph_t* src, tj_graph_t* dst,
                          tj_value_t value, int64_t* dims) {
  int32_t rank = tj_graph_value_rank(src, value);
  tj_graph_value_dims(src, value, dims);
  for (int32_t i = 0; i < rank; ++i) dims[i] = echo_dim(src, dst, dims[i]);
  return rank;
}

static void to_i32(const int64_t* in, uint32_t n, int32_t* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = (int32_t)in[i];
}

// Constant data is rebuilt three ways, to exercise each public entry point:
// exact rank-0 values through tj_graph_scalar, then alternately copied and
// borrowed (|src| outlives |dst|'s use of it).
static tj_value_t echo_constant(const tj_graph_t* src, tj_graph_t* dst,
                                const tj_node_t* node, tj_value_t self,
                                const int64_t* dims) {
  static unsigned count;
  tj_dtype_t dtype = tj_graph_value_dtype(src, self);
  const void* data = node->attrs.data;
  if (node->rank == 0) {
    // Every value of every dtype but i64 is exact as a double.
    int64_t as_int = tj_load_i64(dtype, data, 0);
    if (dtype != TJ_DTYPE_I64 ||
        (as_int >= -(1LL << 53) && as_int <= (1LL << 53)))
      return tj_graph_scalar(dst, dtype, tj_load_f64(dtype, data, 0));
  }
  size_t bytes = tj_dtype_size(dtype);
  for (int32_t i = 0; i < node->rank; ++i) bytes *= (size_t)dims[i];
  if (count++ % 2)
    return tj_graph_constant_borrowed(dst, dtype, node->rank, dims, data,
                                      bytes);
  return tj_graph_constant(dst, dtype, node->rank, dims, data, bytes);
}

// The builders of a shared form (lib/ops.def's FORM column), called
// through their form's type; the others have a case in echo_node.
typedef void (*builder_fn)(void);
typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);
typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);
#define FORM_OWN(fn) NULL
#define FORM_UNARY(fn) (builder_fn) tj_graph_##fn
#define FORM_BINARY(fn) (builder_fn) tj_graph_##fn
#define FORM_REDUCE(fn) (builder_fn) tj_graph_##fn
static const builder_fn kBuilders[TJ_OP_COUNT_] = {
#define TJ_OP(name, text, arity, kind, attrs, dtypes, pattern, form, builder, \
              flags)                                                          \
  FORM_##form(builder),
#include "lib/ops.def"
#undef TJ_OP
};
#undef FORM_OWN
#undef FORM_UNARY
#undef FORM_BINARY
#undef FORM_REDUCE

static tj_value_t echo_node(const tj_graph_t* src, tj_graph_t* dst,
                            uint32_t index, const tj_value_t* map) {
  const tj_node_t* node = &src->nodes[index];
  const tj_attrs_t* at = &node->attrs;
  tj_value_t self = {index + 1};
  tj_value_t x[7];  // attention_dq and attention_dkv have 7 operands
  for (int i = 0; i < 7; ++i) x[i] = tj_value_none();
  for (uint32_t i = 0; i < node->num_operands && i < 7; ++i) {
    uint32_t operand = node->operands[i];
    if (operand != TJ_NODE_NONE) x[i] = map[operand];
  }
  int64_t dims[TJ_MAX_RANK];
  int32_t rank = echo_shape(src, dst, self, dims);
  tj_dtype_t dtype = tj_graph_value_dtype(src, self);
  int32_t i32[TJ_MAX_RANK];
  uint32_t n = at->num_ints;
  const builder_fn builder = kBuilders[node->op];
  switch (tj_op_info(node->op)->form) {
    case TJ_OP_FORM_UNARY:
      return ((unary_fn)builder)(dst, x[0]);
    case TJ_OP_FORM_BINARY:
      return ((binary_fn)builder)(dst, x[0], x[1]);
    case TJ_OP_FORM_REDUCE:
      if (n > TJ_MAX_RANK) return tj_value_none();
      to_i32(at->ints, n, i32);
      return ((reduce_fn)builder)(dst, x[0], (int32_t)n, i32, at->keepdims);
    case TJ_OP_FORM_OWN:
      break;
  }
  switch (node->op) {
    case TJ_OP_INPUT:
      return tj_graph_input(dst, dtype, rank, dims, at->name);
    case TJ_OP_CONSTANT:
      return echo_constant(src, dst, node, self, dims);
    case TJ_OP_FULL:
      return tj_graph_full(dst, dtype, rank, dims, at->value);
    case TJ_OP_IOTA:
      return tj_graph_iota(dst, dtype, rank, dims, (int32_t)at->axis);
    case TJ_OP_CAST:
      return tj_graph_cast(dst, x[0], dtype);
    case TJ_OP_WHERE:
      return tj_graph_where(dst, x[0], x[1], x[2]);
    case TJ_OP_ARGMAX:
      return tj_graph_argmax(dst, x[0], n ? (int32_t)at->ints[0] : 0,
                             at->keepdims);
    case TJ_OP_ARGMIN:
      return tj_graph_argmin(dst, x[0], n ? (int32_t)at->ints[0] : 0,
                             at->keepdims);
    case TJ_OP_RESHAPE:
      return tj_graph_reshape(dst, x[0], rank, dims);
    case TJ_OP_TRANSPOSE:
      if (n > TJ_MAX_RANK) return tj_value_none();
      to_i32(at->ints, n, i32);
      return tj_graph_transpose(dst, x[0], i32);
    case TJ_OP_BROADCAST_TO:
      return tj_graph_broadcast_to(dst, x[0], rank, dims);
    case TJ_OP_SLICE:
      return tj_graph_slice(dst, x[0], at->ints, at->ints + n / 3,
                            at->ints + 2 * (n / 3));
    case TJ_OP_CONCAT: {
      tj_value_t* values = malloc((node->num_operands + 1) * sizeof(*values));
      if (!values) return tj_value_none();
      for (uint32_t i = 0; i < node->num_operands; ++i)
        values[i] = map[node->operands[i]];
      tj_value_t y = tj_graph_concat(dst, (int32_t)node->num_operands, values,
                                     (int32_t)at->axis);
      free(values);
      return y;
    }
    case TJ_OP_PAD:
      return tj_graph_pad(dst, x[0], at->ints, at->ints + n / 2, at->value);
    case TJ_OP_GATHER:
      return tj_graph_gather(dst, x[0], x[1], (int32_t)at->axis);
    case TJ_OP_GATHER_ELEMENTS:
      return tj_graph_gather_elements(dst, x[0], x[1], (int32_t)at->axis);
    case TJ_OP_GATHER_ND:
      return tj_graph_gather_nd(dst, x[0], x[1], (int32_t)at->axis);
    case TJ_OP_CUMSUM:
      return tj_graph_cumsum(dst, x[0], (int32_t)at->axis, at->ints[0] != 0,
                             at->ints[1] != 0);
    case TJ_OP_CUMPROD:
      return tj_graph_cumprod(dst, x[0], (int32_t)at->axis, at->ints[0] != 0,
                              at->ints[1] != 0);
    case TJ_OP_SCATTER_ELEMENTS:
      return tj_graph_scatter_elements(dst, x[0], x[1], x[2], (int32_t)at->axis,
                                       (tj_scatter_reduction_t)at->ints[0]);
    case TJ_OP_SCATTER_ND:
      return tj_graph_scatter_nd(dst, x[0], x[1], x[2],
                                 (tj_scatter_reduction_t)at->ints[0]);
    case TJ_OP_ARGTOPK:
      return tj_graph_argtopk(dst, x[0], at->ints[0], (int32_t)at->axis,
                              at->ints[1] != 0);
    case TJ_OP_GELU:
      return tj_graph_gelu(dst, x[0], at->approximate);
    case TJ_OP_SOFTMAX:
      return tj_graph_softmax(dst, x[0], (int32_t)at->axis);
    case TJ_OP_LOG_SOFTMAX:
      return tj_graph_log_softmax(dst, x[0], (int32_t)at->axis);
    case TJ_OP_LAYER_NORM:
      return tj_graph_layer_norm(dst, x[0], x[1], x[2], at->value);
    case TJ_OP_RMS_NORM:
      return tj_graph_rms_norm(dst, x[0], x[1], at->value);
    case TJ_OP_LINEAR:
      return tj_graph_linear(dst, x[0], x[1], x[2]);
    case TJ_OP_ATTENTION:
      return tj_graph_attention(dst, x[0], x[1], x[2], x[3], at->value,
                                n && at->ints[0]);
    case TJ_OP_ATTENTION_LSE:
      return tj_graph_attention_lse(dst, x[0], x[1], x[2], at->value,
                                    n && at->ints[0]);
    case TJ_OP_ATTENTION_DQ:
      return tj_graph_attention_dq(dst, x[0], x[1], x[2], x[3], x[4], x[5],
                                   x[6], at->value, n && at->ints[0]);
    case TJ_OP_ATTENTION_DKV:
      return tj_graph_attention_dkv(dst, x[0], x[1], x[2], x[3], x[4], x[5],
                                    x[6], at->value, n && at->ints[0]);
    case TJ_OP_QUANTIZE:  // quant2 (issue 17): lib/quant.h's ints
    case TJ_OP_DEQUANTIZE: {
      tj_quant_attrs_t qa = {.dtype = node->dtype,
                             .axis = (int32_t)at->axis,
                             .block_size = at->ints[0],
                             .no_saturate = !at->ints[1],
                             .int4 = (tj_int4_t)at->ints[2],
                             .odd = at->ints[3] != 0};
      return node->op == TJ_OP_QUANTIZE
                 ? tj_graph_quantize(dst, x[0], x[1], x[2], &qa)
                 : tj_graph_dequantize(dst, x[0], x[1], x[2], &qa);
    }
    case TJ_OP_ONE_HOT:
      return tj_graph_one_hot(dst, x[0], x[1], dims[at->axis],
                              (int32_t)at->axis);
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE:
    case TJ_OP_MAX_POOL:
    case TJ_OP_AVG_POOL:
    case TJ_OP_LP_POOL: {
      // lib/window.h back to the public attributes.
      tj_window_t w = tj_window_of(at);
      tj_conv_attrs_t a;
      memset(&a, 0, sizeof(a));
      for (int32_t i = 0; i < w.n; ++i) {
        a.kernel[i] = w.kernel[i];
        a.strides[i] = w.strides[i];
        a.dilations[i] = w.dilations[i];
        a.pads_begin[i] = w.low[i];
        a.pads_end[i] = w.high[i];
        a.output_padding[i] = w.output_padding[i];
      }
      a.groups = w.groups;
      a.ceil_mode = (w.flags & TJ_WINDOW_CEIL_MODE) != 0;
      a.count_include_pad = (w.flags & TJ_WINDOW_COUNT_INCLUDE_PAD) != 0;
      a.p = w.p;
      switch (node->op) {
        case TJ_OP_CONV:
          return tj_graph_conv(dst, x[0], x[1], x[2], &a);
        case TJ_OP_CONV_TRANSPOSE:
          return tj_graph_conv_transpose(dst, x[0], x[1], x[2], &a);
        case TJ_OP_MAX_POOL:
          return tj_graph_max_pool(dst, x[0], &a);
        case TJ_OP_AVG_POOL:
          return tj_graph_avg_pool(dst, x[0], &a);
        default:
          return tj_graph_lp_pool(dst, x[0], &a);
      }
    }
    default:  // a shared form, above
      break;
  }
  return tj_value_none();
}

// Builds |src| again in a new graph through the public API.
static tj_status_t echo_graph(tj_context_t* context, const tj_graph_t* src,
                              tj_graph_t** out) {
  *out = NULL;
  tj_graph_t* dst = NULL;
  tj_status_t status = tj_graph_create(context, src->name, &dst);
  if (status) return status;
  // Symbols first, in their order, so the signatures print alike.
  for (uint32_t i = 0; i < tj_dim_num_symbols(&src->dims); ++i)
    tj_graph_symbol(dst, tj_dim_symbol_name(&src->dims, i));
  tj_value_t* map = calloc(src->num_nodes + 1, sizeof(*map));
  if (!map) {
    tj_graph_destroy(dst);
    return tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t i = 0; i < src->num_nodes; ++i)
    map[i] = echo_node(src, dst, i, map);
  for (int32_t i = 0; i < tj_graph_num_outputs(src); ++i) {
    tj_value_t value = tj_graph_output_value(src, i);
    tj_graph_output(dst, map[value.id - 1], tj_graph_output_name(src, i));
  }
  free(map);
  status = tj_graph_finalize(dst);
  if (status) {
    tj_graph_destroy(dst);
    return status;
  }
  *out = dst;
  return NULL;
}

//===--- driver ---===//

static int g_printed;

static bool echo_text(tj_context_t* context, const char* text, size_t length,
                      const char* filename) {
  tj_graph_t* src = NULL;
  tj_graph_t* dst = NULL;
  char* printed = NULL;
  tj_status_t status = tj_graph_parse(context, text, length, filename, &src);
  if (!status) status = echo_graph(context, src, &dst);
  if (!status) status = tj_graph_print(dst, &printed);
  tj_graph_destroy(dst);
  tj_graph_destroy(src);
  if (status) {
    fprintf(stderr, "tj-echo: %s\n", tj_status_message(status));
    tj_status_free(status);
    return false;
  }
  if (g_printed++) fputs("// -----\n", stdout);
  fputs(printed, stdout);
  tj_context_free_string(context, printed);
  return true;
}

typedef struct piece_args_t {
  tj_context_t* context;
  const char* path;
} piece_args_t;

static bool echo_piece(const char* text, size_t length, void* user) {
  const piece_args_t* a = user;
  return echo_text(a->context, text, length, a->path);
}

int main(int argc, char** argv) {
  bool split = false;
  const char* path = "-";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--split-input-file") == 0) {
      split = true;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "usage: tj-echo [--split-input-file] [FILE|-]\n");
      return 1;
    } else {
      path = argv[i];
    }
  }
  size_t length = 0;
  char* text = tj_tool_read_file("tj-echo", path, &length);
  if (!text) return 1;
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(NULL, &context);
  if (status) {
    fprintf(stderr, "tj-echo: %s\n", tj_status_message(status));
    tj_status_free(status);
    free(text);
    return 1;
  }
  piece_args_t args = {context, path};
  bool ok =
      tj_tool_for_each_piece("tj-echo", text, length, split, echo_piece, &args);
  tj_context_destroy(context);
  free(text);
  return ok ? 0 : 1;
}
