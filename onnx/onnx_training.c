// The ONNX importer's converters for the ai.onnx.preview.training domain:
// the optimizer update ops Adagrad, Adam and Momentum, each decomposed into
// pointwise ops exactly as ONNX's reference defines them
// (onnx/reference/ops/aionnx_preview_training). Gradient, the domain's
// other op, needs autodiff of the graph it names and is refused.
//
// Every op takes R (the learning rate, a float scalar), T (the update
// count, an int64 scalar) and then n tensors to update, their n gradients
// and their n states (1 or 2 per tensor), and returns the n updated tensors
// followed by their updated states. T is usually fed at run time (each
// training step has its own), so the branches the reference takes on
// "T > 0" are selects, and its powers of T are pow ops.

#include <string.h>

#include "onnx/onnx_internal.h"

#define TRAINING_DOMAIN "ai.onnx.preview.training"

typedef enum { OP_ADAGRAD, OP_ADAM, OP_MOMENTUM } training_op_t;

static bool find_op(const char* op, training_op_t* out) {
  static const char* const kNames[] = {"Adagrad", "Adam", "Momentum"};
  for (int i = 0; i < 3; ++i) {
    if (strcmp(op, kNames[i]) == 0) {
      *out = (training_op_t)i;
      return true;
    }
  }
  return false;
}

bool tj_onnx_is_training(const char* domain) {
  return domain && strcmp(domain, TRAINING_DOMAIN) == 0;
}

static int64_t domain_opset(const tj_onnx_importer_t* im) {
  for (size_t i = 0; i < im->model->n_opset_import; ++i) {
    const Onnx__OperatorSetIdProto* p = im->model->opset_import[i];
    if (tj_onnx_is_training(p->domain)) return p->has_version ? p->version : 1;
  }
  return -1;
}

// Errors name the node and the training domain's opset (im->opset is the
// default domain's).
static tj_status_t node_error(const tj_onnx_importer_t* im,
                              const tj_onnx_node_t* n, tj_status_code_t code,
                              const char* format, ...) TJ_PRINTF_LIKE(4, 5);
static tj_status_t node_error(const tj_onnx_importer_t* im,
                              const tj_onnx_node_t* n, tj_status_code_t code,
                              const char* format, ...) {
  va_list args;
  va_start(args, format);
  tj_status_t detail = tj_status_makev(code, format, args);
  va_end(args);
  return tj_status_annotate(detail, "onnx: node %d \"%s\" (%s, %s opset %lld)",
                            (int)n->index, n->proto->name ? n->proto->name : "",
                            n->proto->op_type, TRAINING_DOMAIN,
                            (long long)domain_opset(im));
}

// The attributes of each op, with ONNX's defaults (Momentum's are
// required).
typedef struct attrs_t {
  double alpha, beta, epsilon, decay_factor, norm_coefficient,
      norm_coefficient_post;
  bool nesterov;
} attrs_t;

static tj_status_t read_attrs(const tj_onnx_importer_t* im,
                              const tj_onnx_node_t* n, training_op_t op,
                              attrs_t* a) {
  static const char* const kTaken[] = {
      [OP_ADAGRAD] = "decay_factor,epsilon,norm_coefficient,",
      [OP_ADAM] = "alpha,beta,epsilon,norm_coefficient,norm_coefficient_post,",
      [OP_MOMENTUM] = "alpha,beta,mode,norm_coefficient,",
  };
  memset(a, 0, sizeof *a);
  a->epsilon = 1e-6f;  // Adagrad's and Adam's default, a float attribute
  if (op == OP_ADAM) {
    a->alpha = 0.9f;
    a->beta = 0.999f;
  }
  uint32_t seen = 0;  // Momentum's required attributes found, a bit each
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const Onnx__AttributeProto* p = n->proto->attribute[i];
    const char* name = p->name ? p->name : "";
    size_t len = strlen(name);
    const char* hit = len ? strstr(kTaken[op], name) : NULL;
    while (hit && !((hit == kTaken[op] || hit[-1] == ',') && hit[len] == ','))
      hit = strstr(hit + 1, name);
    if (!hit)
      return node_error(im, n, TJ_STATUS_UNSUPPORTED,
                        "unsupported attribute %s", name);
    if (strcmp(name, "mode") == 0) {
      bool standard =
          p->has_s && p->s.len == 8 && memcmp(p->s.data, "standard", 8) == 0;
      bool nesterov =
          p->has_s && p->s.len == 8 && memcmp(p->s.data, "nesterov", 8) == 0;
      if (!standard && !nesterov)
        return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                          "mode must be \"standard\" or \"nesterov\"");
      a->nesterov = nesterov;
      seen |= 1u << 2;
      continue;
    }
    if (!p->has_f)
      return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                        "attribute %s must be a float", name);
    double f = p->f;
    if (strcmp(name, "alpha") == 0) {
      a->alpha = f;
      seen |= 1u << 0;
    } else if (strcmp(name, "beta") == 0) {
      a->beta = f;
      seen |= 1u << 1;
    } else if (strcmp(name, "norm_coefficient") == 0) {
      a->norm_coefficient = f;
      seen |= 1u << 3;
    } else if (strcmp(name, "epsilon") == 0) {
      a->epsilon = f;
    } else if (strcmp(name, "decay_factor") == 0) {
      a->decay_factor = f;
    } else {
      a->norm_coefficient_post = f;
    }
  }
  if (op == OP_MOMENTUM && seen != 15)
    return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                      "Momentum requires the attributes alpha, beta, mode and "
                      "norm_coefficient");
  return NULL;
}

// Defines output |k| of |n| as |v|.
static tj_status_t define_out(tj_onnx_importer_t* im, const tj_onnx_node_t* n,
                              size_t k, tj_value_t v) {
  tj_graph_t* g = im->graph;
  if (tj_value_is_none(v)) {
    tj_status_t s = tj_graph_status(g);
    if (!s) s = tj_internal("a builder returned none without an error");
    return tj_status_annotate(s, "onnx: node %d \"%s\" (%s)", (int)n->index,
                              n->proto->name ? n->proto->name : "",
                              n->proto->op_type);
  }
  if (k >= n->proto->n_output || !n->proto->output[k][0]) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.value = v;
  val.dtype = tj_graph_value_dtype(g, v);
  val.rank = tj_graph_value_rank(g, v);
  tj_graph_value_dims(g, v, val.dims);
  return tj_onnx_define(im, n->proto->output[k], &val);
}

tj_status_t tj_onnx_convert_training(tj_onnx_importer_t* im,
                                     tj_onnx_node_t* n) {
  training_op_t op;
  if (!find_op(n->proto->op_type, &op))
    return node_error(im, n, TJ_STATUS_UNSUPPORTED, "unsupported op");
  attrs_t a;
  TJ_RETURN_IF_ERROR(read_attrs(im, n, op, &a));
  // Tensors per update: X, G and the states (Adam keeps V and H).
  int32_t per = op == OP_ADAM ? 4 : 3;
  int32_t count = (n->num_inputs - 2) / per;
  if (n->num_inputs < 2 + per || (n->num_inputs - 2) % per)
    return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                      "%d inputs: it takes R, T and %d tensors per update",
                      (int)n->num_inputs, (int)per);
  if ((int64_t)n->proto->n_output > (int64_t)count * (per - 1))
    return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                      "%zu outputs for %d updates; at most %d",
                      n->proto->n_output, (int)count, (int)(count * (per - 1)));
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (!n->inputs[i])
      return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                        "input %d is required", (int)i);
  }
  const tj_onnx_val_t* rv = n->inputs[0];
  const tj_onnx_val_t* tv = n->inputs[1];
  if (rv->rank != 0 ||
      (rv->dtype != TJ_DTYPE_F32 && rv->dtype != TJ_DTYPE_F64) ||
      tv->rank != 0 || tv->dtype != TJ_DTYPE_I64)
    return node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                      "R must be a float or double scalar and T an int64 "
                      "scalar, not %s rank %d and %s rank %d",
                      tj_dtype_name(rv->dtype), (int)rv->rank,
                      tj_dtype_name(tv->dtype), (int)tv->rank);
  for (int32_t i = 2; i < n->num_inputs; ++i) {
    const tj_onnx_val_t* x = n->inputs[2 + (i - 2) % count];
    const tj_onnx_val_t* v = n->inputs[i];
    if ((v->dtype != TJ_DTYPE_F32 && v->dtype != TJ_DTYPE_F64) ||
        v->dtype != x->dtype || v->rank != x->rank ||
        memcmp(v->dims, x->dims, sizeof(int64_t) * (size_t)x->rank))
      return node_error(
          im, n, TJ_STATUS_INVALID_ARGUMENT,
          "input %d (\"%s\") must be a float or double tensor of the shape "
          "and dtype of the tensor it updates (input %d)",
          (int)i, n->proto->input[i], (int)(2 + (i - 2) % count));
  }
  tj_graph_t* g = im->graph;
  // The scalar factors in f64, as the reference computes them (T and the
  // attributes are Python numbers there), each cast once to the tensors'
  // dtype.
  tj_value_t r =
      tj_graph_cast(g, tj_onnx_value(im, n->inputs[0]), TJ_DTYPE_F64);
  tj_value_t t =
      tj_graph_cast(g, tj_onnx_value(im, n->inputs[1]), TJ_DTYPE_F64);
  tj_value_t positive = tj_graph_gt(g, t, tj_graph_scalar(g, TJ_DTYPE_F64, 0));
  tj_value_t rate = r;                  // the learning rate the update applies
  tj_value_t gscale = tj_value_none();  // Momentum's gradient coefficient
  if (op == OP_ADAGRAD) {
    // r / (1 + t * decay_factor)
    tj_value_t decay =
        tj_graph_mul(g, t, tj_graph_scalar(g, TJ_DTYPE_F64, a.decay_factor));
    rate = tj_graph_div(
        g, r, tj_graph_add(g, tj_graph_scalar(g, TJ_DTYPE_F64, 1), decay));
  } else if (op == OP_ADAM) {
    // t > 0: r * sqrt(1 - beta^t) / (1 - alpha^t); else r.
    tj_value_t one = tj_graph_scalar(g, TJ_DTYPE_F64, 1);
    tj_value_t bt =
        tj_graph_pow(g, tj_graph_scalar(g, TJ_DTYPE_F64, a.beta), t);
    tj_value_t at =
        tj_graph_pow(g, tj_graph_scalar(g, TJ_DTYPE_F64, a.alpha), t);
    tj_value_t corrected = tj_graph_div(
        g, tj_graph_mul(g, r, tj_graph_sqrt(g, tj_graph_sub(g, one, bt))),
        tj_graph_sub(g, one, at));
    rate = tj_graph_where(g, positive, corrected, r);
  } else {
    // The gradient's coefficient is 1 at the first update (t = 0).
    gscale =
        tj_graph_where(g, positive, tj_graph_scalar(g, TJ_DTYPE_F64, a.beta),
                       tj_graph_scalar(g, TJ_DTYPE_F64, 1));
  }
  for (int32_t i = 0; i < count; ++i) {
    tj_value_t x = tj_onnx_value(im, n->inputs[2 + i]);
    tj_value_t grad = tj_onnx_value(im, n->inputs[2 + count + i]);
    tj_value_t s1 = tj_onnx_value(im, n->inputs[2 + 2 * count + i]);
    tj_dtype_t d = n->inputs[2 + i]->dtype;
#define K(value) tj_graph_scalar(g, d, (value))
    tj_value_t lr = tj_graph_cast(g, rate, d);
    // The gradient of the regularization term added: norm * x + g.
    tj_value_t gr =
        tj_graph_add(g, tj_graph_mul(g, K(a.norm_coefficient), x), grad);
    tj_value_t x_new, s1_new, s2_new = tj_value_none();
    if (op == OP_ADAGRAD) {
      s1_new = tj_graph_add(g, s1, tj_graph_mul(g, gr, gr));
      tj_value_t denom =
          tj_graph_add(g, tj_graph_sqrt(g, s1_new), K(a.epsilon));
      x_new =
          tj_graph_sub(g, x, tj_graph_div(g, tj_graph_mul(g, lr, gr), denom));
    } else if (op == OP_ADAM) {
      tj_value_t s2 = tj_onnx_value(im, n->inputs[2 + 3 * count + i]);
      s1_new = tj_graph_add(g, tj_graph_mul(g, K(a.alpha), s1),
                            tj_graph_mul(g, K(1 - a.alpha), gr));
      s2_new =
          tj_graph_add(g, tj_graph_mul(g, K(a.beta), s2),
                       tj_graph_mul(g, K(1 - a.beta), tj_graph_mul(g, gr, gr)));
      tj_value_t denom =
          tj_graph_add(g, tj_graph_sqrt(g, s2_new), K(a.epsilon));
      x_new = tj_graph_sub(g, x,
                           tj_graph_mul(g, lr, tj_graph_div(g, s1_new, denom)));
      x_new = tj_graph_mul(g, K(1 - a.norm_coefficient_post), x_new);
    } else {
      s1_new = tj_graph_add(g, tj_graph_mul(g, K(a.alpha), s1),
                            tj_graph_mul(g, tj_graph_cast(g, gscale, d), gr));
      tj_value_t step =
          a.nesterov ? tj_graph_add(g, gr, tj_graph_mul(g, K(a.alpha), s1_new))
                     : s1_new;
      x_new = tj_graph_sub(g, x, tj_graph_mul(g, lr, step));
    }
#undef K
    TJ_RETURN_IF_ERROR(define_out(im, n, (size_t)i, x_new));
    TJ_RETURN_IF_ERROR(define_out(im, n, (size_t)(count + i), s1_new));
    if (op == OP_ADAM)
      TJ_RETURN_IF_ERROR(define_out(im, n, (size_t)(2 * count + i), s2_new));
  }
  return NULL;
}
