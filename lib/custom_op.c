// lib/custom_op.c: see lib/custom_op.h. The registry of custom ops (a
// context extension), signature strings, inference through the shape
// function, tj_graph_custom, and the host call over tensor descriptors.

#include "lib/custom_op.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"

//===--- the registry ---===//

typedef struct registry_t {
  tj_allocator_t allocator;
  pthread_mutex_t mutex;
  tj_custom_op_t** ops;
  uint32_t num_ops, capacity;
} registry_t;

static void op_free(tj_allocator_t al, tj_custom_op_t* op) {
  if (!op) return;
  tj_free_string(al, op->name);
  tj_free_string(al, op->signature);
  tj_free_string(al, op->cuda_ptx);
  tj_free_string(al, op->cuda_entry);
  if (op->call_state && op->free_state) op->free_state(al, op->call_state);
  tj_free(al, op, sizeof(*op));
}

static void registry_destroy(void* state) {
  registry_t* r = state;
  if (!r) return;
  for (uint32_t i = 0; i < r->num_ops; ++i) op_free(r->allocator, r->ops[i]);
  tj_free(r->allocator, r->ops, sizeof(tj_custom_op_t*) * r->capacity);
  pthread_mutex_destroy(&r->mutex);
  tj_free(r->allocator, r, sizeof(*r));
}

static tj_status_t registry_create(tj_context_t* context, void** out) {
  tj_allocator_t al = tj_context_allocator(context);
  registry_t* r = tj_calloc(al, 1, sizeof(*r));
  if (!r) return tj_status_oom();
  r->allocator = al;
  if (pthread_mutex_init(&r->mutex, NULL) != 0) {
    tj_free(al, r, sizeof(*r));
    return tj_internal("custom op registry: pthread_mutex_init failed");
  }
  *out = r;
  return NULL;
}

static tj_status_t registry_of(tj_context_t* context, registry_t** out) {
  void* state = NULL;
  TJ_RETURN_IF_ERROR(
      tj_context_extension(context, TJ_CONTEXT_EXTENSION_CUSTOM_OPS,
                           registry_create, registry_destroy, &state));
  *out = state;
  return NULL;
}

// Under the registry's lock.
static const tj_custom_op_t* find_locked(const registry_t* r, const char* name,
                                         size_t length, int32_t version) {
  const tj_custom_op_t* best = NULL;
  for (uint32_t i = 0; i < r->num_ops; ++i) {
    const tj_custom_op_t* op = r->ops[i];
    if (strlen(op->name) != length || memcmp(op->name, name, length) != 0)
      continue;
    if (version > 0 ? op->version == version
                    : (!best || op->version > best->version)) {
      best = op;
    }
  }
  return best;
}

const tj_custom_op_t* tj_custom_op_find(tj_context_t* context, const char* name,
                                        size_t length, int32_t version) {
  const tj_custom_op_t* builtin = tj_dd_builtin_find(name, length, version);
  if (builtin) return builtin;
  registry_t* r = NULL;
  tj_status_t status = registry_of(context, &r);
  if (status) {
    tj_status_free(status);
    return NULL;
  }
  pthread_mutex_lock(&r->mutex);
  const tj_custom_op_t* op = find_locked(r, name, length, version);
  pthread_mutex_unlock(&r->mutex);
  return op;
}

const tj_custom_op_t* tj_custom_op_of(const tj_graph_t* graph,
                                      const tj_node_t* node) {
  if (node->op != TJ_OP_CUSTOM || !node->attrs.name) return NULL;
  return tj_custom_op_find(graph->context, node->attrs.name,
                           strlen(node->attrs.name), (int32_t)node->attrs.axis);
}

// The CUDA fields of |d|, zero when |d| is from before them (struct_size).
static void cuda_fields(const tj_custom_op_desc_t* d, const char** ptx,
                        const char** entry, tj_custom_launch_fn* launch) {
  *ptx = *entry = NULL;
  *launch = NULL;
  if (d->struct_size <
      offsetof(tj_custom_op_desc_t, cuda_launch) + sizeof(d->cuda_launch))
    return;
  *ptx = d->cuda_ptx;
  *entry = d->cuda_entry;
  *launch = d->cuda_launch;
}

const char* tj_custom_op_desc_llvm_ir(const tj_custom_op_desc_t* d) {
  if (d->struct_size <
      offsetof(tj_custom_op_desc_t, cuda_llvm_ir) + sizeof(d->cuda_llvm_ir))
    return NULL;
  return d->cuda_llvm_ir;
}

tj_status_t tj_custom_op_check_desc(const tj_custom_op_desc_t* d) {
  if (!d) return tj_invalid("tj_context_register_op: desc is NULL");
  if (d->struct_size <
      offsetof(tj_custom_op_desc_t, user_data) + sizeof(d->user_data))
    return tj_invalid(
        "tj_context_register_op: desc.struct_size %zu is smaller than the "
        "first version of tj_custom_op_desc_t (%zu)",
        d->struct_size,
        offsetof(tj_custom_op_desc_t, user_data) + sizeof(d->user_data));
  if (!d->name || !tj_is_c_identifier(d->name))
    return tj_invalid(
        "tj_context_register_op: desc.name %s%s%s is not a C identifier",
        d->name ? "\"" : "", d->name ? d->name : "NULL", d->name ? "\"" : "");
  const char* n = d->name;
  if (d->version < 1)
    return tj_invalid("tj_context_register_op: op %s: version %d is not >= 1",
                      n, (int)d->version);
  if (d->num_inputs < 0 || d->num_inputs > 64)
    return tj_invalid(
        "tj_context_register_op: op %s: num_inputs %d is not in [0, 64]", n,
        (int)d->num_inputs);
  if (!d->shape)
    return tj_invalid("tj_context_register_op: op %s: no shape function", n);
  bool has_function = d->function != NULL || d->signature != NULL;
  if (has_function == (d->host != NULL))
    return tj_invalid(
        "tj_context_register_op: op %s: give exactly one host implementation: "
        "function + signature, or host",
        n);
  if (has_function && (!d->function || !d->signature))
    return tj_invalid(
        "tj_context_register_op: op %s: a function needs its signature string "
        "and a signature its function",
        n);
  uint32_t known = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_IN_PLACE |
                   TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  if (d->flags & ~known)
    return tj_invalid("tj_context_register_op: op %s: unknown flags 0x%x", n,
                      d->flags & ~known);
  const char *ptx, *entry;
  tj_custom_launch_fn launch;
  cuda_fields(d, &ptx, &entry, &launch);
  const char* ir = tj_custom_op_desc_llvm_ir(d);
  if (ptx && ir)
    return tj_invalid(
        "tj_context_register_op: op %s: give cuda_ptx or cuda_llvm_ir, not "
        "both",
        n);
  bool code = ptx || ir;
  if (code != (launch != NULL) || code != (entry != NULL))
    return tj_invalid(
        "tj_context_register_op: op %s: a CUDA implementation needs all of "
        "cuda_ptx (or cuda_llvm_ir), cuda_entry and cuda_launch",
        n);
  if (entry && !tj_is_c_identifier(entry))
    return tj_invalid(
        "tj_context_register_op: op %s: cuda_entry \"%s\" is not a C "
        "identifier",
        n, entry);
  return NULL;
}

tj_status_t tj_custom_op_add(tj_context_t* context,
                             const tj_custom_op_desc_t* d,
                             const tj_custom_sig_t* sig, tj_custom_call_fn call,
                             void* state,
                             void (*free_state)(tj_allocator_t, void*)) {
  tj_allocator_t al = tj_context_allocator(context);
  registry_t* r = NULL;
  tj_status_t status = registry_of(context, &r);
  tj_custom_op_t* op = NULL;
  if (!status) {
    op = tj_calloc(al, 1, sizeof(*op));
    if (!op) status = tj_status_oom();
  }
  if (status) {
    if (state && free_state) free_state(al, state);
    return status;
  }
  op->call_state = state;
  op->free_state = free_state;
  op->call = call;
  op->name = tj_strdup(al, d->name);
  if (d->signature) op->signature = tj_strdup(al, d->signature);
  const char *ptx, *entry;
  cuda_fields(d, &ptx, &entry, &op->cuda_launch);
  if (ptx) {
    op->cuda_ptx = tj_strdup(al, ptx);
    op->cuda_entry = tj_strdup(al, entry);
  }
  if (!op->name || (d->signature && !op->signature) ||
      (ptx && (!op->cuda_ptx || !op->cuda_entry))) {
    op_free(al, op);
    return tj_status_oom();
  }
  op->version = d->version;
  op->num_inputs = d->num_inputs;
  op->flags = d->flags;
  op->shape = d->shape;
  op->host = d->host;
  op->vjp = d->vjp;
  op->user_data = d->user_data;
  op->function = d->function;
  if (sig) {
    op->sig = *sig;
    op->flags |= TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  }
  pthread_mutex_lock(&r->mutex);
  if (tj_dd_builtin_find(d->name, strlen(d->name), 0)) {
    status = tj_invalid(
        "tj_context_register_op: op %s is a built-in op of the library",
        d->name);
  } else if (find_locked(r, d->name, strlen(d->name), d->version)) {
    status = tj_invalid(
        "tj_context_register_op: op %s version %d is already registered",
        d->name, (int)d->version);
  } else {
    status = tj_array_reserve(al, (void**)&r->ops, &r->capacity, r->num_ops + 1,
                              sizeof(tj_custom_op_t*));
    if (!status) r->ops[r->num_ops++] = op;
  }
  pthread_mutex_unlock(&r->mutex);
  if (status) op_free(al, op);
  return status;
}

//===--- signature strings ---===//

typedef struct sig_lexer_t {
  const char* text;
  size_t pos;
} sig_lexer_t;

static void sig_skip(sig_lexer_t* l) {
  while (l->text[l->pos] == ' ' || l->text[l->pos] == '\t') ++l->pos;
}

// The next word ([A-Za-z0-9_]+) into |buf|; false if none.
static bool sig_word(sig_lexer_t* l, char* buf, size_t size) {
  sig_skip(l);
  size_t n = 0;
  while (true) {
    char ch = l->text[l->pos];
    bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                (ch >= '0' && ch <= '9') || ch == '_';
    if (!word) break;
    if (n + 1 < size) buf[n++] = ch;
    ++l->pos;
  }
  buf[n] = '\0';
  return n > 0;
}

static bool sig_char(sig_lexer_t* l, char ch) {
  sig_skip(l);
  if (l->text[l->pos] != ch) return false;
  ++l->pos;
  return true;
}

static bool sig_dtype(const char* word, tj_dtype_t* out) {
  for (int d = 0; d < TJ_DTYPE_COUNT_; ++d) {
    if (strcmp(word, tj_dtype_name((tj_dtype_t)d)) == 0) {
      *out = (tj_dtype_t)d;
      return true;
    }
  }
  return false;
}

// What stands at the lexer, for messages.
static const char* sig_rest(const sig_lexer_t* l) {
  return l->text[l->pos] ? l->text + l->pos : "the end";
}

tj_status_t tj_custom_sig_parse(const char* text, tj_custom_sig_t* out) {
  memset(out, 0, sizeof(*out));
  if (!text) return tj_invalid("signature is NULL");
  sig_lexer_t l = {text, 0};
  char word[32];
  if (!sig_word(&l, word, sizeof(word)) ||
      (strcmp(word, "void") != 0 && strcmp(word, "i32") != 0))
    return tj_invalid(
        "signature \"%s\": the result type must be void or i32, got \"%s\"",
        text, word[0] ? word : sig_rest(&l));
  out->returns_i32 = strcmp(word, "i32") == 0;
  if (!sig_char(&l, '('))
    return tj_invalid("signature \"%s\": expected '(' after the result type",
                      text);
  sig_skip(&l);
  if (!sig_char(&l, ')')) {
    for (int32_t arg = 1;; ++arg) {
      if (out->num_args == TJ_CUSTOM_MAX_ARGS)
        return tj_invalid("signature \"%s\": more than %d arguments", text,
                          TJ_CUSTOM_MAX_ARGS);
      size_t at = l.pos;
      if (!sig_word(&l, word, sizeof(word)))
        return tj_invalid(
            "signature \"%s\": argument %d: expected a type (f32, f64, i64, "
            "const T*, T*), got \"%s\"",
            text, (int)arg, sig_rest(&l));
      bool is_const = strcmp(word, "const") == 0;
      if (is_const && !sig_word(&l, word, sizeof(word)))
        return tj_invalid(
            "signature \"%s\": argument %d: expected a type after const", text,
            (int)arg);
      tj_dtype_t dtype;
      if (!sig_dtype(word, &dtype))
        return tj_invalid(
            "signature \"%s\": argument %d: unknown type \"%s\" (f32, f16, "
            "bf16, f64, i8, i32, i64, bool)",
            text, (int)arg, word);
      bool pointer = sig_char(&l, '*');
      int32_t k = out->num_args++;
      out->dtypes[k] = dtype;
      if (pointer) {
        out->kinds[k] = is_const ? TJ_CUSTOM_ARG_INPUT : TJ_CUSTOM_ARG_OUTPUT;
        if (is_const) {
          ++out->num_input_pointers;
        } else {
          ++out->num_output_pointers;
        }
      } else if (is_const) {
        return tj_invalid(
            "signature \"%s\": argument %d: const is only for input pointers "
            "(const T*)",
            text, (int)arg);
      } else if (dtype == TJ_DTYPE_I64) {
        out->kinds[k] = TJ_CUSTOM_ARG_I64;
      } else if (dtype == TJ_DTYPE_F32) {
        out->kinds[k] = TJ_CUSTOM_ARG_F32;
      } else if (dtype == TJ_DTYPE_F64) {
        out->kinds[k] = TJ_CUSTOM_ARG_F64;
      } else {
        return tj_invalid(
            "signature \"%s\": argument %d: a scalar is i64, f32 or f64, got "
            "\"%.*s\"",
            text, (int)arg, (int)(l.pos - at), text + at);
      }
      if (sig_char(&l, ')')) break;
      if (!sig_char(&l, ','))
        return tj_invalid(
            "signature \"%s\": argument %d: expected ',' or ')', got \"%s\"",
            text, (int)arg, sig_rest(&l));
    }
  }
  sig_skip(&l);
  if (text[l.pos] != '\0')
    return tj_invalid("signature \"%s\": unexpected \"%s\" after ')'", text,
                      text + l.pos);
  if (out->num_output_pointers != 1)
    return tj_invalid(
        "signature \"%s\": needs exactly one output pointer (T*), has %d", text,
        (int)out->num_output_pointers);
  return NULL;
}

//===--- attributes ---===//

void tj_custom_attrs_of(const tj_attrs_t* a, tj_custom_attrs_t* out,
                        double* floats) {
  memset(out, 0, sizeof(*out));
  if (a->num_ints == 0) return;
  int64_t ni = a->ints[0];
  out->num_ints = (int32_t)ni;
  out->ints = ni ? a->ints + 1 : NULL;
  out->num_floats = (int32_t)(a->num_ints - 1 - (uint32_t)ni);
  for (int32_t i = 0; i < out->num_floats; ++i) {
    memcpy(&floats[i], &a->ints[1 + ni + i], sizeof(double));
  }
  out->floats = out->num_floats ? floats : NULL;
}

//===--- inference ---===//

static bool dim_is_valid(const tj_graph_t* g, int64_t dim) {
  return dim >= 0 ||
         (dim <= -2 && (uint64_t)(-(dim + 2)) < (uint64_t)g->dims.num_exprs);
}

// Checks |sig| against the node's types and attribute counts.
static tj_status_t check_binding(const tj_custom_sig_t* sig,
                                 const tj_custom_type_t* in, int32_t n,
                                 const tj_custom_type_t* out,
                                 const tj_custom_attrs_t* at) {
  int32_t next_in = 0, ints = 0, floats = 0, left = 0;
  for (int32_t k = 0; k < sig->num_args; ++k) {
    switch ((tj_custom_arg_kind_t)sig->kinds[k]) {
      case TJ_CUSTOM_ARG_OUTPUT:
        if (sig->dtypes[k] != out->dtype)
          return tj_invalid("signature argument %d is %s* but the output is %s",
                            (int)k + 1, tj_dtype_name(sig->dtypes[k]),
                            tj_dtype_name(out->dtype));
        left = out->rank;
        break;
      case TJ_CUSTOM_ARG_INPUT:
        if (next_in >= n)
          return tj_invalid(
              "signature has more input pointers than the %d "
              "inputs",
              (int)n);
        if (sig->dtypes[k] != in[next_in].dtype)
          return tj_invalid(
              "signature argument %d is const %s* but input %d is %s",
              (int)k + 1, tj_dtype_name(sig->dtypes[k]), (int)next_in,
              tj_dtype_name(in[next_in].dtype));
        left = in[next_in++].rank;
        break;
      case TJ_CUSTOM_ARG_I64:
        if (left > 0) {
          --left;
        } else {
          ++ints;
          left = 0;
        }
        break;
      case TJ_CUSTOM_ARG_F32:
      case TJ_CUSTOM_ARG_F64:
        ++floats;
        left = 0;
        break;
    }
  }
  if (next_in != n)
    return tj_invalid("signature has %d input pointers for %d inputs",
                      (int)next_in, (int)n);
  if (ints != at->num_ints || floats != at->num_floats)
    return tj_invalid(
        "signature takes %d int and %d float attributes, the node has %d and "
        "%d",
        (int)ints, (int)floats, (int)at->num_ints, (int)at->num_floats);
  return NULL;
}

// Whether CUSTOM node |n| is |d| (op, version, attributes and operands).
static bool same_node(const tj_node_t* n, const tj_node_desc_t* d) {
  const tj_attrs_t* a = &n->attrs;
  return n->num_operands == d->num_operands && a->axis == d->attrs.axis &&
         a->num_ints == d->attrs.num_ints && a->name && d->attrs.name &&
         strcmp(a->name, d->attrs.name) == 0 &&
         (!a->num_ints ||
          memcmp(a->ints, d->attrs.ints, sizeof(int64_t) * a->num_ints) == 0) &&
         (!n->num_operands || memcmp(n->operands, d->operands,
                                     sizeof(uint32_t) * n->num_operands) == 0);
}

tj_status_t tj_custom_infer(tj_graph_t* graph, const tj_node_desc_t* d,
                            tj_dtype_t* out_dtype, int32_t* out_rank,
                            int64_t* out_dims, int64_t* out_ints,
                            uint32_t* out_num_ints, int64_t* out_version) {
  const tj_attrs_t* a = &d->attrs;
  if (!a->name) return tj_invalid("no op name");
  if (a->axis < 0 || a->axis > INT32_MAX)
    return tj_invalid("version %lld is out of range", (long long)a->axis);
  const tj_custom_op_t* op = tj_custom_op_find(
      graph->context, a->name, strlen(a->name), (int32_t)a->axis);
  if (!op) {
    if (a->axis > 0)
      return tj_invalid(
          "no custom op \"%s\" version %lld is registered in "
          "the graph's context",
          a->name, (long long)a->axis);
    return tj_invalid(
        "no custom op \"%s\" is registered in the graph's context", a->name);
  }
  if (a->num_ints < 1 || a->ints[0] < 0 || a->ints[0] > TJ_CUSTOM_MAX_ATTRS ||
      a->num_ints - 1 - (uint64_t)a->ints[0] > TJ_CUSTOM_MAX_ATTRS)
    return tj_invalid("malformed attributes (at most %d ints and %d floats)",
                      TJ_CUSTOM_MAX_ATTRS, TJ_CUSTOM_MAX_ATTRS);
  if ((int64_t)d->num_operands != op->num_inputs)
    return tj_invalid("%s@%d takes %d inputs, got %u", op->name,
                      (int)op->version, (int)op->num_inputs, d->num_operands);
  tj_custom_type_t in[64];
  for (uint32_t i = 0; i < d->num_operands; ++i) {
    const tj_node_t* o = &graph->nodes[d->operands[i]];
    in[i].dtype = o->dtype;
    in[i].rank = o->rank;
    memset(in[i].dims, 0, sizeof(in[i].dims));
    for (int32_t k = 0; k < o->rank; ++k) in[i].dims[k] = o->dims[k];
  }
  double floats[TJ_CUSTOM_MAX_ATTRS];
  tj_custom_attrs_t at;
  tj_custom_attrs_of(a, &at, floats);
  tj_custom_type_t out;
  memset(&out, 0, sizeof(out));
  out.dtype = TJ_DTYPE_COUNT_;
  out.rank = -1;
  // The shape function builds dims through the public dim API, which a
  // finalized graph (re-inferred by the verifier) refuses; interned dims
  // make the same calls change nothing there.
  bool finalized = graph->finalized;
  tj_status_t before = graph->error;
  graph->finalized = false;
  graph->error = NULL;
  tj_status_t status =
      op->shape(op->user_data, graph, in, (int32_t)d->num_operands, &at, &out);
  tj_status_t recorded = graph->error;
  graph->error = before;
  graph->finalized = finalized;
  if (recorded) status = tj_status_join(status, recorded);
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    return tj_status_annotate(status, "the shape function of %s@%d", op->name,
                              (int)op->version);
  }
  if (!tj_dtype_is_valid(out.dtype) || out.rank < 0 || out.rank > TJ_MAX_RANK)
    return tj_invalid(
        "the shape function of %s@%d gave no valid dtype and rank (%d, %d)",
        op->name, (int)op->version, (int)out.dtype, (int)out.rank);
  for (int32_t k = 0; k < out.rank; ++k) {
    if (!dim_is_valid(graph, out.dims[k]))
      return tj_invalid(
          "the shape function of %s@%d gave an invalid dim %lld at axis %d",
          op->name, (int)op->version, (long long)out.dims[k], (int)k);
  }
  // A data-dependent symbol belongs to one node: two nodes sharing it
  // would set it to two sizes. (The verifier re-infers a node already in
  // the graph: the same op on the same operands and attributes, which
  // gives the same size, is not another.)
  for (int32_t k = 0; !finalized && k < out.rank; ++k) {
    int32_t s = tj_dim_as_symbol(&graph->dims, out.dims[k]);
    if (s < 0 || !(graph->dims.dynamic_symbols >> s & 1u)) continue;
    for (uint32_t i = 0; i < graph->num_nodes; ++i) {
      const tj_node_t* other = &graph->nodes[i];
      if (other->op != TJ_OP_CUSTOM || same_node(other, d)) continue;
      for (int32_t j = 0; j < other->rank; ++j) {
        if (other->dims[j] == out.dims[k])
          return tj_invalid(
              "the shape function of %s@%d gave data-dependent symbol %s, "
              "which node %%%u already makes; each node needs a symbol of "
              "its own",
              op->name, (int)op->version,
              tj_dim_symbol_name(&graph->dims, (uint32_t)s), i);
      }
    }
  }
  if (op->signature) {
    tj_status_t bad =
        check_binding(&op->sig, in, (int32_t)d->num_operands, &out, &at);
    if (bad)
      return tj_status_annotate(bad, "%s@%d \"%s\"", op->name, (int)op->version,
                                op->signature);
  }
  *out_dtype = out.dtype;
  *out_rank = out.rank;
  for (int32_t k = 0; k < out.rank; ++k) out_dims[k] = out.dims[k];
  memcpy(out_ints, a->ints, sizeof(int64_t) * a->num_ints);
  *out_num_ints = a->num_ints;
  *out_version = op->version;
  return NULL;
}

bool tj_custom_node_is_pure(const tj_graph_t* graph, const tj_node_t* node) {
  const tj_custom_op_t* op = tj_custom_op_of(graph, node);
  return op && (op->flags & TJ_CUSTOM_OP_PURE);
}

//===--- the builder ---===//

tj_value_t tj_graph_custom(tj_graph_t* graph, const char* name,
                           const tj_value_t* inputs, int32_t num_inputs,
                           const tj_custom_attrs_t* attrs) {
  if (!graph || graph->error) return tj_value_none();
  tj_status_t status = NULL;
  char base[128];
  int64_t version = 0;
  tj_custom_attrs_t none = {0, NULL, 0, NULL};
  if (!attrs) attrs = &none;
  if (graph->finalized) {
    status = tj_invalid("tj_graph_custom: the graph is finalized");
  } else if (!name) {
    status = tj_invalid("tj_graph_custom: name is NULL");
  } else if (num_inputs < 0 || num_inputs > 64 || (num_inputs > 0 && !inputs)) {
    status = tj_invalid(
        "tj_graph_custom(\"%s\"): %d inputs%s", name, (int)num_inputs,
        num_inputs > 0 && !inputs ? " but inputs is NULL" : " (0 to 64)");
  } else if (attrs->num_ints < 0 || attrs->num_ints > TJ_CUSTOM_MAX_ATTRS ||
             attrs->num_floats < 0 || attrs->num_floats > TJ_CUSTOM_MAX_ATTRS ||
             (attrs->num_ints && !attrs->ints) ||
             (attrs->num_floats && !attrs->floats)) {
    status = tj_invalid(
        "tj_graph_custom(\"%s\"): attrs hold %d ints and %d floats (0 to %d "
        "each, non-NULL arrays)",
        name, (int)attrs->num_ints, (int)attrs->num_floats,
        TJ_CUSTOM_MAX_ATTRS);
  } else {
    const char* at = strchr(name, '@');
    size_t len = at ? (size_t)(at - name) : strlen(name);
    char* end = NULL;
    if (at) version = strtoll(at + 1, &end, 10);
    if (len == 0 || len >= sizeof(base) ||
        (at && (end == at + 1 || *end != '\0' || version < 1 ||
                version > INT32_MAX))) {
      status = tj_invalid(
          "tj_graph_custom: \"%s\" is not an op name or name@version", name);
    } else {
      memcpy(base, name, len);
      base[len] = '\0';
    }
  }
  uint32_t ops[64];
  for (int32_t i = 0; !status && i < num_inputs; ++i) {
    if (tj_value_is_none(inputs[i]) || inputs[i].id > graph->num_nodes) {
      status = tj_invalid(
          "tj_graph_custom(\"%s\"): input %d is not a value "
          "of this graph",
          name, (int)i);
    } else {
      ops[i] = inputs[i].id - 1;
    }
  }
  if (status) {
    tj_graph_record_error(graph, status);
    return tj_value_none();
  }
  int64_t ints[1 + 2 * TJ_CUSTOM_MAX_ATTRS];
  uint32_t n = 0;
  ints[n++] = attrs->num_ints;
  for (int32_t i = 0; i < attrs->num_ints; ++i) ints[n++] = attrs->ints[i];
  for (int32_t i = 0; i < attrs->num_floats; ++i) {
    memcpy(&ints[n++], &attrs->floats[i], sizeof(double));
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CUSTOM;
  desc.num_operands = (uint32_t)num_inputs;
  desc.operands = ops;
  desc.attrs.name = base;
  desc.attrs.axis = version;
  desc.attrs.ints = ints;
  desc.attrs.num_ints = n;
  uint32_t node = 0;
  status = tj_graph_append(graph, &desc, &node);
  if (status) {
    tj_graph_record_error(graph, status);
    return tj_value_none();
  }
  tj_value_t v = {node + 1};
  return v;
}

//===--- calls ---===//

static tj_status_t call_signature(const tj_custom_op_t* op,
                                  const tj_tensor_t* inputs,
                                  const tj_custom_attrs_t* at,
                                  const tj_tensor_t* output) {
  const tj_custom_sig_t* sig = &op->sig;
  void* values[TJ_CUSTOM_MAX_ARGS];
  void* pointers[TJ_CUSTOM_MAX_ARGS];
  float f32s[TJ_CUSTOM_MAX_ARGS];
  double f64s[TJ_CUSTOM_MAX_ARGS];
  int32_t next_in = 0, ints = 0, floats = 0, left = 0;
  const int64_t* dims = NULL;
  for (int32_t k = 0; k < sig->num_args; ++k) {
    switch ((tj_custom_arg_kind_t)sig->kinds[k]) {
      case TJ_CUSTOM_ARG_OUTPUT:
      case TJ_CUSTOM_ARG_INPUT: {
        const tj_tensor_t* t =
            sig->kinds[k] == TJ_CUSTOM_ARG_OUTPUT ? output : &inputs[next_in++];
        pointers[k] = (unsigned char*)t->data + t->byte_offset;
        values[k] = &pointers[k];
        left = t->rank;
        dims = t->shape;
        break;
      }
      case TJ_CUSTOM_ARG_I64:
        if (left > 0) {
          values[k] = (void*)dims++;
          --left;
        } else {
          values[k] = (void*)&at->ints[ints++];
        }
        break;
      case TJ_CUSTOM_ARG_F32:
        f32s[k] = (float)at->floats[floats++];
        values[k] = &f32s[k];
        left = 0;
        break;
      case TJ_CUSTOM_ARG_F64:
        f64s[k] = at->floats[floats++];
        values[k] = &f64s[k];
        left = 0;
        break;
    }
  }
  int64_t result = 0;
  op->call(op, values, &result);
  if (sig->returns_i32 && (int32_t)result != 0)
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "custom op %s@%d returned %d", op->name,
                          (int)op->version, (int)(int32_t)result);
  return NULL;
}

tj_status_t tj_custom_op_invoke(const tj_custom_op_t* op,
                                const tj_tensor_t* inputs, int32_t num_inputs,
                                const tj_custom_attrs_t* attrs,
                                const tj_tensor_t* output) {
  if (op->signature) return call_signature(op, inputs, attrs, output);
  tj_status_t status =
      op->host(op->user_data, inputs, num_inputs, attrs, output);
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY)
    status = tj_status_annotate(status, "custom op %s@%d", op->name,
                                (int)op->version);
  return status;
}

//===--- public status construction ---===//

tj_status_t tj_status_create(tj_status_code_t code, const char* message) {
  if (code == TJ_STATUS_OK) code = TJ_STATUS_BACKEND_FAILURE;
  return tj_status_make(code, "%s", message ? message : "");
}

//===--- data-dependent output dims ---===//

int64_t tj_custom_dynamic_dim(tj_graph_t* graph, const char* symbol,
                              int64_t upper_bound) {
  if (!graph || graph->error) return TJ_DIM_INVALID;
  tj_status_t status = NULL;
  int64_t dim = TJ_DIM_INVALID;
  int32_t id = -1;
  if (graph->finalized) {
    status = tj_invalid("tj_custom_dynamic_dim: graph @%s is finalized",
                        graph->name);
  } else if (!dim_is_valid(graph, upper_bound)) {
    status = tj_invalid(
        "tj_custom_dynamic_dim(\"%s\"): upper bound %lld is not a dim of "
        "graph @%s",
        symbol ? symbol : "(null)", (long long)upper_bound, graph->name);
  } else {
    status = tj_dim_symbol(&graph->dims, symbol, &dim);
  }
  if (!status) id = tj_dim_as_symbol(&graph->dims, dim);
  tj_dimtab_t* tab = &graph->dims;
  if (!status && id < 0)
    status =
        tj_internal("tj_custom_dynamic_dim: %s is not a plain symbol", symbol);
  if (!status && (tab->dynamic_symbols >> id & 1u) &&
      tab->symbol_bounds[id] != upper_bound) {
    char was[128], now[128];
    tj_dim_format(tab, tab->symbol_bounds[id], was, sizeof(was));
    tj_dim_format(tab, upper_bound, now, sizeof(now));
    status = tj_invalid(
        "tj_custom_dynamic_dim: data-dependent symbol %s already has the "
        "upper bound %s, not %s",
        symbol, was, now);
  }
  for (uint32_t i = 0; !status && i < graph->num_inputs; ++i) {
    const tj_node_t* in = &graph->nodes[graph->inputs[i]];
    for (int32_t k = 0; !status && k < in->rank; ++k) {
      if (in->dims[k] == dim)
        status = tj_invalid(
            "tj_custom_dynamic_dim: symbol %s is bound by input \"%s\"; a "
            "data-dependent dim needs a symbol of its own",
            symbol, in->attrs.name);
    }
  }
  if (status) {
    tj_graph_record_error(graph, status);
    return TJ_DIM_INVALID;
  }
  tab->dynamic_symbols |= (uint64_t)1 << id;
  tab->symbol_bounds[id] = upper_bound;
  return dim;
}

int64_t tj_custom_value_dim(tj_graph_t* graph, const char* name) {
  if (!graph || graph->error) return TJ_DIM_INVALID;
  int64_t dim = TJ_DIM_INVALID;
  tj_status_t status = NULL;
  if (graph->finalized)
    status =
        tj_invalid("tj_custom_value_dim: graph @%s is finalized", graph->name);
  if (!status) status = tj_dim_symbol(&graph->dims, name, &dim);
  int32_t id = status ? -1 : tj_dim_as_symbol(&graph->dims, dim);
  if (!status && id < 0)
    status = tj_internal("tj_custom_value_dim: %s is not a plain symbol", name);
  if (!status && (graph->dims.dynamic_symbols >> id & 1u))
    status =
        tj_invalid("symbol %s is data-dependent, not a value symbol", name);
  for (uint32_t i = 0; !status && i < graph->num_inputs; ++i) {
    const tj_node_t* in = &graph->nodes[graph->inputs[i]];
    for (int32_t k = 0; !status && k < in->rank; ++k) {
      if (in->dims[k] == dim)
        status = tj_invalid(
            "symbol %s is bound by input \"%s\"; a range's length needs a "
            "symbol of its own",
            name, in->attrs.name);
    }
  }
  if (status) {
    tj_graph_record_error(graph, status);
    return TJ_DIM_INVALID;
  }
  graph->dims.value_symbols |= (uint64_t)1 << id;
  return dim;
}

tj_status_t tj_custom_set_output_shape(const tj_tensor_t* output, int32_t rank,
                                       const int64_t* dims) {
  if (!output || (rank > 0 && !dims))
    return tj_invalid("tj_custom_set_output_shape: output or dims is NULL");
  if (rank != output->rank)
    return tj_invalid(
        "tj_custom_set_output_shape: rank %d for an output of rank %d",
        (int)rank, (int)output->rank);
  for (int32_t k = 0; k < rank; ++k) {
    if (dims[k] < 0 || dims[k] > output->shape[k])
      return tj_invalid(
          "tj_custom_set_output_shape: dim %d is %lld, outside [0, %lld] (the "
          "upper bound)",
          (int)k, (long long)dims[k], (long long)output->shape[k]);
  }
  // The library hands every host implementation a shape array of its own.
  int64_t* shape = (int64_t*)(uintptr_t)output->shape;
  for (int32_t k = 0; k < rank; ++k) shape[k] = dims[k];
  return NULL;
}

bool tj_custom_graph_is_dynamic(const tj_graph_t* graph) {
  return graph->dims.dynamic_symbols != 0;
}

tj_status_t tj_custom_bind_dynamic(const tj_graph_t* graph, int64_t* sym) {
  const tj_dimtab_t* tab = &graph->dims;
  for (uint32_t s = 0; s < tab->num_symbols; ++s) {
    if (!(tab->dynamic_symbols >> s & 1u)) continue;
    tj_status_t status = tj_dim_eval(tab, tab->symbol_bounds[s], sym, &sym[s]);
    if (status)
      return tj_status_annotate(status,
                                "the upper bound of data-dependent symbol %s",
                                tj_dim_symbol_name(tab, s));
  }
  return NULL;
}

tj_status_t tj_custom_bind_result(const tj_graph_t* graph, uint32_t index,
                                  const int64_t* bound, const int64_t* actual,
                                  int64_t* sym) {
  const tj_node_t* node = &graph->nodes[index];
  const tj_dimtab_t* tab = &graph->dims;
  uint64_t set = 0;
  for (int32_t k = 0; k < node->rank; ++k) {
    int32_t s = tj_dim_as_symbol(tab, node->dims[k]);
    bool dynamic = s >= 0 && (tab->dynamic_symbols >> s & 1u);
    if (!dynamic) {
      if (actual[k] != bound[k])
        return tj_invalid(
            "custom op %s (node %%%u): output dim %d came back %lld, but it "
            "is not a data-dependent dim (%lld)",
            node->attrs.name, index, (int)k, (long long)actual[k],
            (long long)bound[k]);
      continue;
    }
    if (actual[k] < 0 || actual[k] > bound[k])
      return tj_invalid(
          "custom op %s (node %%%u): output dim %d (%s) came back %lld, "
          "outside [0, %lld]",
          node->attrs.name, index, (int)k, tj_dim_symbol_name(tab, (uint32_t)s),
          (long long)actual[k], (long long)bound[k]);
    if ((set >> s & 1u) && sym[s] != actual[k])
      return tj_invalid(
          "custom op %s (node %%%u): output dims of symbol %s came back %lld "
          "and %lld",
          node->attrs.name, index, tj_dim_symbol_name(tab, (uint32_t)s),
          (long long)sym[s], (long long)actual[k]);
    set |= (uint64_t)1 << s;
    sym[s] = actual[k];
  }
  return NULL;
}

// The first data-dependent symbol dim |k| of output |i| depends on, or -1.
static int32_t output_dim_symbol(const tj_graph_t* graph, uint32_t i,
                                 int32_t k) {
  const tj_dimtab_t* tab = &graph->dims;
  const tj_node_t* n = &graph->nodes[graph->outputs[i].node];
  if (!tab->dynamic_symbols || n->dims[k] >= 0) return -1;
  for (uint32_t s = 0; s < tab->num_symbols; ++s) {
    if (!(tab->dynamic_symbols >> s & 1u)) continue;
    int64_t probe[TJ_MAX_SYMBOLS], v = 0;
    for (uint32_t j = 0; j < TJ_MAX_SYMBOLS; ++j) probe[j] = 1;
    probe[s] = -1;  // unbound: the dim depends on it iff eval fails
    tj_status_t st = tj_dim_eval(tab, n->dims[k], probe, &v);
    if (!st) continue;
    tj_status_free(st);
    return (int32_t)s;
  }
  return -1;
}

bool tj_custom_output_is_dynamic(const tj_graph_t* graph, uint32_t i) {
  const tj_node_t* n = &graph->nodes[graph->outputs[i].node];
  for (int32_t k = 0; k < n->rank; ++k)
    if (output_dim_symbol(graph, i, k) >= 0) return true;
  return false;
}

tj_status_t tj_custom_check_outputs(const tj_graph_t* graph,
                                    const tj_tensor_t* outputs, bool shaped) {
  const tj_dimtab_t* tab = &graph->dims;
  if (!tab->dynamic_symbols) return NULL;
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    const tj_node_t* n = &graph->nodes[graph->outputs[i].node];
    const char* name = graph->outputs[i].name ? graph->outputs[i].name : "?";
    for (int32_t k = 0; k < n->rank; ++k) {
      int32_t s = output_dim_symbol(graph, i, k);
      if (s < 0) continue;
      if (!shaped)
        return tj_invalid(
            "output \"%s\" dim %d depends on data-dependent symbol %s (set "
            "by an op at run time): run it with tj_executable_run_shaped or "
            "tj_reference_run_shaped, which return the actual shape",
            name, (int)k, tj_dim_symbol_name(tab, (uint32_t)s));
      const tj_tensor_t* t = &outputs[i];
      bool dense = true;
      int64_t step = 1;
      for (int32_t d = t->rank - 1; t->strides && d >= 0; --d) {
        if (t->shape[d] != 1 && t->strides[d] != step) dense = false;
        step *= t->shape[d];
      }
      if (!dense)
        return tj_invalid(
            "output \"%s\" has a data-dependent dim (%s) and must be dense "
            "row-major: its data is written in the actual shape",
            name, tj_dim_symbol_name(tab, (uint32_t)s));
      break;
    }
  }
  return NULL;
}

tj_status_t tj_custom_write_output_shapes(const tj_graph_t* graph,
                                          const int64_t* sym,
                                          const tj_tensor_t* outputs) {
  if (!graph->dims.dynamic_symbols) return NULL;
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    if (!tj_custom_output_is_dynamic(graph, i)) continue;
    // Under tj_*_run_shaped the shape arrays are the library's own.
    int64_t* shape = (int64_t*)(uintptr_t)outputs[i].shape;
    TJ_RETURN_IF_ERROR(
        tj_ir_concrete_dims(graph, graph->outputs[i].node, sym, shape));
  }
  return NULL;
}
