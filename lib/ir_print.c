// The .tj printer (grammar: docs/tj-text-format.md). It is the inverse of
// lib/ir_parse.c: printing a parsed graph and parsing the text again gives
// the same text byte for byte, so every float is printed with enough digits
// to round-trip and every choice (numbering, spacing, attribute order) is
// fixed here.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/ir_text.h"
#include "lib/scatter.h"
#include "lib/window.h"

//===--- a growable string from the context allocator ---===//

typedef struct sbuf_t {
  tj_allocator_t allocator;
  char* data;
  size_t length, capacity;  // |data| holds |capacity| bytes when non-NULL
  bool failed;              // an allocation failed; later writes are dropped
} sbuf_t;

// Makes room for |extra| more bytes plus a NUL.
static bool sbuf_reserve(sbuf_t* b, size_t extra) {
  if (b->failed) return false;
  size_t needed = b->length + extra + 1;
  if (needed < extra) {
    b->failed = true;
    return false;
  }
  if (needed <= b->capacity) return true;
  size_t capacity = b->capacity ? b->capacity : 256;
  while (capacity < needed) {
    if (capacity > SIZE_MAX / 2) {
      capacity = needed;
      break;
    }
    capacity *= 2;
  }
  char* grown = tj_realloc(b->allocator, b->data, b->capacity, capacity);
  if (!grown) {
    b->failed = true;
    return false;
  }
  b->data = grown;
  b->capacity = capacity;
  return true;
}

static void sbuf_append(sbuf_t* b, const char* s, size_t n) {
  if (!sbuf_reserve(b, n)) return;
  memcpy(b->data + b->length, s, n);
  b->length += n;
  b->data[b->length] = '\0';
}

static void sbuf_puts(sbuf_t* b, const char* s) {
  sbuf_append(b, s, strlen(s));
}

static void sbuf_printf(sbuf_t* b, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);
static void sbuf_printf(sbuf_t* b, const char* format, ...) {
  char small[128];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  if (n < 0) {
    b->failed = true;
    return;
  }
  if ((size_t)n < sizeof(small)) {
    sbuf_append(b, small, (size_t)n);
    return;
  }
  if (!sbuf_reserve(b, (size_t)n)) return;
  va_start(args, format);
  vsnprintf(b->data + b->length, (size_t)n + 1, format, args);
  va_end(args);
  b->length += (size_t)n;
}

//===--- pieces shared with the parser (lib/ir_text.h) ---===//

char tj_ir_text_decimal_point(void) {
  // snprintf and strtod follow the C locale's decimal point, which a host
  // may have changed; .tj text always uses '.'.
  char buf[8];
  snprintf(buf, sizeof(buf), "%.1f", 0.5);
  return buf[1];
}

int tj_ir_text_format_double(double value, int digits, char* buf, size_t size) {
  if (isnan(value)) return snprintf(buf, size, "nan");
  if (isinf(value)) return snprintf(buf, size, value < 0 ? "-inf" : "inf");
  int n = snprintf(buf, size, "%.*g", digits, value);
  char point = tj_ir_text_decimal_point();
  if (point != '.') {
    for (char* c = buf; *c; ++c) {
      if (*c == point) *c = '.';
    }
  }
  return n;
}

//===--- the printer ---===//

typedef struct printer_t {
  const tj_graph_t* graph;
  sbuf_t out;
  tj_status_t error;
} printer_t;

static void print_double(printer_t* p, double value, int digits) {
  char buf[64];
  tj_ir_text_format_double(value, digits, buf, sizeof(buf));
  sbuf_puts(&p->out, buf);
}

static void print_dim(printer_t* p, int64_t dim) {
  sbuf_t* b = &p->out;
  char small[64];
  int n = tj_dim_format(&p->graph->dims, dim, small, sizeof(small));
  if (n < 0) {
    b->failed = true;
    return;
  }
  if ((size_t)n < sizeof(small)) {
    sbuf_append(b, small, (size_t)n);
    return;
  }
  if (!sbuf_reserve(b, (size_t)n)) return;
  tj_dim_format(&p->graph->dims, dim, b->data + b->length, (size_t)n + 1);
  b->length += (size_t)n;
}

static void print_type(printer_t* p, const tj_node_t* node) {
  sbuf_puts(&p->out, tj_dtype_name(node->dtype));
  sbuf_puts(&p->out, "[");
  for (int32_t i = 0; i < node->rank; ++i) {
    if (i) sbuf_puts(&p->out, ",");
    print_dim(p, node->dims[i]);
  }
  sbuf_puts(&p->out, "]");
}

// A quoted string: printable ASCII except '"' and '\' verbatim, the rest as
// \xx hex escapes, so that any byte string survives.
static void print_quoted(printer_t* p, const char* s) {
  static const char kHex[] = "0123456789abcdef";
  sbuf_puts(&p->out, "\"");
  for (const unsigned char* c = (const unsigned char*)s; *c; ++c) {
    if (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\') {
      sbuf_append(&p->out, (const char*)c, 1);
    } else {
      char esc[3] = {'\\', kHex[*c >> 4], kHex[*c & 15]};
      sbuf_append(&p->out, esc, 3);
    }
  }
  sbuf_puts(&p->out, "\"");
}

// Non-input nodes are numbered after the inputs in node order, which is
// their node index whenever the inputs come first (as in every parsed graph)
// and keeps the text stable when a builder declared an input late.
static uint32_t inputs_before(const tj_graph_t* g, uint32_t index) {
  uint32_t lo = 0, hi = g->num_inputs;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (g->inputs[mid] < index) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static void print_ref(printer_t* p, uint32_t index) {
  const tj_graph_t* g = p->graph;
  if (index == TJ_NODE_NONE) {
    sbuf_puts(&p->out, "none");
    return;
  }
  const tj_node_t* node = &g->nodes[index];
  if (node->op == TJ_OP_INPUT) {
    sbuf_printf(&p->out, "%%%s", node->attrs.name ? node->attrs.name : "?");
  } else {
    sbuf_printf(&p->out, "%%%u",
                g->num_inputs + index - inputs_before(g, index));
  }
}

static void print_int_list(printer_t* p, const char* key, const int64_t* v,
                           uint32_t count, bool end_for_max) {
  sbuf_printf(&p->out, "%s=[", key);
  for (uint32_t i = 0; i < count; ++i) {
    if (i) sbuf_puts(&p->out, ",");
    if (end_for_max && v[i] == INT64_MAX) {
      sbuf_puts(&p->out, "end");
    } else {
      sbuf_printf(&p->out, "%lld", (long long)v[i]);
    }
  }
  sbuf_puts(&p->out, "]");
}

static void print_attrs(printer_t* p, const tj_node_t* node) {
  const tj_attrs_t* a = &node->attrs;
  uint32_t n = a->num_ints;
  switch (tj_op_info(node->op)->attr_kind) {
    case TJ_ATTR_KIND_NONE:
    case TJ_ATTR_KIND_NAME:
    case TJ_ATTR_KIND_DATA:
      return;
    case TJ_ATTR_KIND_VALUE:
      sbuf_puts(&p->out, " {value=");
      print_double(p, a->value, 17);
      break;
    case TJ_ATTR_KIND_AXIS:
      sbuf_printf(&p->out, " {axis=%lld", (long long)a->axis);
      break;
    case TJ_ATTR_KIND_AXES:
      sbuf_puts(&p->out, " {");
      print_int_list(p, "axes", a->ints, n, false);
      if (a->keepdims) sbuf_puts(&p->out, " keepdims");
      break;
    case TJ_ATTR_KIND_PERM:
      sbuf_puts(&p->out, " {");
      print_int_list(p, "perm", a->ints, n, false);
      break;
    case TJ_ATTR_KIND_SLICE:
      sbuf_puts(&p->out, " {");
      print_int_list(p, "starts", a->ints, n / 3, false);
      sbuf_puts(&p->out, " ");
      // No NULL + 0: ints is NULL for rank 0.
      print_int_list(p, "stops", n ? a->ints + n / 3 : NULL, n / 3, true);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "steps", n ? a->ints + 2 * (n / 3) : NULL, n / 3,
                     false);
      break;
    case TJ_ATTR_KIND_PAD:
      sbuf_puts(&p->out, " {");
      print_int_list(p, "low", a->ints, n / 2, false);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "high", n ? a->ints + n / 2 : NULL, n / 2, false);
      sbuf_puts(&p->out, " value=");
      print_double(p, a->value, 17);
      break;
    case TJ_ATTR_KIND_APPROX:
      if (!a->approximate) return;
      sbuf_puts(&p->out, " {approximate");
      break;
    case TJ_ATTR_KIND_EPS:
      sbuf_puts(&p->out, " {eps=");
      print_double(p, a->value, 17);
      break;
    case TJ_ATTR_KIND_CUSTOM: {
      // lib/custom_op.h's layout: [n, n ints, the floats' bit patterns].
      sbuf_printf(&p->out, " {op=\"%s\" version=%lld", a->name ? a->name : "?",
                  (long long)a->axis);
      uint32_t ni = n ? (uint32_t)a->ints[0] : 0;
      if (ni && ni < n) {
        sbuf_puts(&p->out, " ");
        print_int_list(p, "ints", a->ints + 1, ni, false);
      }
      if (n > 1 + ni) {
        sbuf_puts(&p->out, " floats=[");
        for (uint32_t i = 1 + ni; i < n; ++i) {
          double f;
          memcpy(&f, &a->ints[i], sizeof(f));
          if (i > 1 + ni) sbuf_puts(&p->out, ",");
          print_double(p, f, 17);
        }
        sbuf_puts(&p->out, "]");
      }
      break;
    }
    case TJ_ATTR_KIND_WINDOW: {
      // lib/window.h; normalized, so every list has n entries.
      tj_window_t w = tj_window_of(a);
      uint32_t k = (uint32_t)w.n;
      sbuf_puts(&p->out, " {");
      print_int_list(p, "kernel", w.kernel, k, false);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "strides", w.strides, k, false);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "dilations", w.dilations, k, false);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "low", w.low, k, false);
      sbuf_puts(&p->out, " ");
      print_int_list(p, "high", w.high, k, false);
      if (node->op == TJ_OP_CONV_TRANSPOSE) {
        sbuf_puts(&p->out, " ");
        print_int_list(p, "output_padding", w.output_padding, k, false);
      }
      if (w.groups != 1)
        sbuf_printf(&p->out, " groups=%lld", (long long)w.groups);
      if (w.flags & TJ_WINDOW_CEIL_MODE) sbuf_puts(&p->out, " ceil_mode");
      if (w.flags & TJ_WINDOW_COUNT_INCLUDE_PAD)
        sbuf_puts(&p->out, " count_include_pad");
      if (node->op == TJ_OP_LP_POOL) {
        sbuf_puts(&p->out, " p=");
        print_double(p, a->value, 17);
      }
      break;
    }
    case TJ_ATTR_KIND_ATTENTION:
      sbuf_puts(&p->out, " {scale=");
      print_double(p, a->value, 17);
      if (n && a->ints[0]) sbuf_puts(&p->out, " causal");
      break;
    case TJ_ATTR_KIND_QUANT:  // lib/quant.h's TJ_QUANT_* order
      sbuf_printf(&p->out, " {axis=%lld", (long long)a->axis);
      if (n >= 4 && a->ints[0])
        sbuf_printf(&p->out, " block=%lld", (long long)a->ints[0]);
      if (n >= 4 && a->ints[1]) sbuf_puts(&p->out, " saturate");
      if (n >= 4 && a->ints[2])
        sbuf_printf(&p->out, " int4=%lld", (long long)a->ints[2]);
      if (n >= 4 && a->ints[3]) sbuf_puts(&p->out, " odd");
      break;
    case TJ_ATTR_KIND_SCAN:
      sbuf_printf(&p->out, " {axis=%lld", (long long)a->axis);
      if (n > 0 && a->ints[0]) sbuf_puts(&p->out, " exclusive");
      if (n > 1 && a->ints[1]) sbuf_puts(&p->out, " reverse");
      break;
    case TJ_ATTR_KIND_SCATTER: {
      // scatter_nd with no reduction has nothing to print.
      bool elements = node->op == TJ_OP_SCATTER_ELEMENTS;
      const char* r =
          n > 0 && a->ints[0] ? tj_scatter_reduction_name(a->ints[0]) : NULL;
      if (!elements && !r) return;
      sbuf_puts(&p->out, " {");
      if (elements) sbuf_printf(&p->out, "axis=%lld", (long long)a->axis);
      if (r) sbuf_printf(&p->out, "%sreduction=\"%s\"", elements ? " " : "", r);
      break;
    } break;
    case TJ_ATTR_KIND_TOPK:
      sbuf_printf(&p->out, " {axis=%lld", (long long)a->axis);
      if (n > 0 && a->ints[0] >= 0)
        sbuf_printf(&p->out, " k=%lld", (long long)a->ints[0]);
      if (n > 1 && a->ints[1]) sbuf_puts(&p->out, " largest");
      break;
  }
  sbuf_puts(&p->out, "}");
}

// Whether the node's shape is concrete, so its constant data can be counted.
static bool constant_numel(const tj_node_t* node, int64_t* out) {
  int64_t numel = 1;
  for (int32_t i = 0; i < node->rank; ++i) {
    if (!tj_dim_is_const(node->dims[i]) ||
        tj_mul_overflow_i64(numel, node->dims[i], &numel))
      return false;
  }
  *out = numel;
  return true;
}

static void print_constant_data(printer_t* p, const tj_node_t* node) {
  int64_t numel;
  if (!constant_numel(node, &numel) || (numel > 0 && !node->attrs.data)) {
    p->error = tj_internal("constant node has no data or a symbolic shape");
    return;
  }
  sbuf_puts(&p->out, " [");
  const void* data = node->attrs.data;
  for (int64_t i = 0; i < numel && !p->out.failed; ++i) {
    if (i) sbuf_puts(&p->out, ", ");
    switch (node->dtype) {
      case TJ_DTYPE_F32:
      case TJ_DTYPE_F16:
      case TJ_DTYPE_BF16:
      case TJ_DTYPE_F8E4M3:
      case TJ_DTYPE_F8E5M2:
      case TJ_DTYPE_F8E4M3FNUZ:
      case TJ_DTYPE_F8E5M2FNUZ:
      case TJ_DTYPE_F4E2M1:
      case TJ_DTYPE_F8E8M0:
        print_double(p, tj_load_f64(node->dtype, data, i), 9);
        break;
      case TJ_DTYPE_F64:
        print_double(p, tj_load_f64(node->dtype, data, i), 17);
        break;
      case TJ_DTYPE_BOOL:
        sbuf_puts(&p->out,
                  tj_load_i64(node->dtype, data, i) ? "true" : "false");
        break;
      case TJ_DTYPE_U64:
        sbuf_printf(&p->out, "%llu",
                    (unsigned long long)tj_load_i64(node->dtype, data, i));
        break;
      default:
        sbuf_printf(&p->out, "%lld",
                    (long long)tj_load_i64(node->dtype, data, i));
        break;
    }
  }
  sbuf_puts(&p->out, "]");
}

static void print_node(printer_t* p, uint32_t index) {
  const tj_graph_t* g = p->graph;
  const tj_node_t* node = &g->nodes[index];
  if ((unsigned)node->op >= TJ_OP_COUNT_ || !tj_dtype_is_valid(node->dtype) ||
      node->rank < 0 || node->rank > TJ_MAX_RANK) {
    p->error =
        tj_internal("cannot print node %u: malformed op, dtype or rank", index);
    return;
  }
  for (uint32_t i = 0; i < node->num_operands; ++i) {
    uint32_t operand = node->operands[i];
    if (operand != TJ_NODE_NONE && operand >= index) {
      p->error = tj_internal(
          "cannot print node %u: operand %u refers to node %u, not an earlier "
          "one",
          index, i, operand);
      return;
    }
  }
  sbuf_puts(&p->out, "  ");
  print_ref(p, index);
  sbuf_printf(&p->out, " = %s", tj_op_info(node->op)->name);
  if (node->op == TJ_OP_CONSTANT) print_constant_data(p, node);
  for (uint32_t i = 0; i < node->num_operands; ++i) {
    sbuf_puts(&p->out, i ? ", " : " ");
    print_ref(p, node->operands[i]);
  }
  print_attrs(p, node);
  sbuf_puts(&p->out, " : ");
  print_type(p, node);
  sbuf_puts(&p->out, "\n");
}

static void print_graph(printer_t* p) {
  const tj_graph_t* g = p->graph;
  sbuf_puts(&p->out, "func @");
  sbuf_puts(&p->out, g->name ? g->name : "main");
  uint32_t num_symbols = tj_dim_num_symbols(&g->dims);
  if (num_symbols) {
    sbuf_puts(&p->out, "[");
    for (uint32_t i = 0; i < num_symbols; ++i) {
      if (i) sbuf_puts(&p->out, ", ");
      sbuf_puts(&p->out, tj_dim_symbol_name(&g->dims, i));
    }
    sbuf_puts(&p->out, "]");
  }
  sbuf_puts(&p->out, "(");
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    uint32_t index = g->inputs[i];
    if (index >= g->num_nodes || g->nodes[index].op != TJ_OP_INPUT) {
      p->error = tj_internal("cannot print: input %u is not an input node", i);
      return;
    }
    if (i) sbuf_puts(&p->out, ", ");
    print_ref(p, index);
    sbuf_puts(&p->out, ": ");
    print_type(p, &g->nodes[index]);
  }
  sbuf_puts(&p->out, ") {\n");
  for (uint32_t i = 0; i < g->num_nodes && !p->error; ++i) {
    if (g->nodes[i].op != TJ_OP_INPUT) print_node(p, i);
  }
  if (p->error) return;
  sbuf_puts(&p->out, "  return");
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    const tj_output_t* output = &g->outputs[i];
    if (output->node >= g->num_nodes) {
      p->error = tj_internal("cannot print: output %u refers to no node", i);
      return;
    }
    sbuf_puts(&p->out, i ? ", " : " ");
    print_ref(p, output->node);
    sbuf_puts(&p->out, " as ");
    print_quoted(p, output->name ? output->name : "");
  }
  sbuf_puts(&p->out, "\n}\n");
}

tj_status_t tj_graph_print(const tj_graph_t* graph, char** out_text) {
  if (!out_text) return tj_invalid("tj_graph_print: out_text is NULL");
  *out_text = NULL;
  if (!graph) return tj_invalid("tj_graph_print: graph is NULL");
  if (graph->error) {
    if (tj_status_code(graph->error) == TJ_STATUS_OUT_OF_MEMORY)
      return tj_status_oom();
    return tj_status_make(tj_status_code(graph->error),
                          "tj_graph_print: graph @%s has a recorded error: %s",
                          graph->name ? graph->name : "main",
                          tj_status_message(graph->error));
  }
  printer_t p;
  memset(&p, 0, sizeof(p));
  p.graph = graph;
  p.out.allocator = graph->allocator;
  print_graph(&p);
  if (!p.error && p.out.failed) p.error = tj_status_oom();
  if (p.error) {
    tj_free(p.out.allocator, p.out.data, p.out.capacity);
    return p.error;
  }
  // tj_context_free_string frees strlen + 1 bytes: hand back an exact block.
  char* text =
      tj_realloc(p.out.allocator, p.out.data, p.out.capacity, p.out.length + 1);
  if (!text) {
    tj_free(p.out.allocator, p.out.data, p.out.capacity);
    return tj_status_oom();
  }
  *out_text = text;
  return NULL;
}
