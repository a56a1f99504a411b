// The ONNX model builder of the importer's tests (onnx_import_test.c,
// onnx_control_test.c): models made with protobuf-c's generated code, then
// packed. Everything a builder allocates lives in one pool; pool_free
// frees it. A test includes it once, after onnx.pb-c.h.

#ifndef TJ_TESTS_UNIT_ONNX_BUILD_H_
#define TJ_TESTS_UNIT_ONNX_BUILD_H_

#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

// Everything a model is built from lives in one pool freed at the end.
static void* g_pool[8192];
static int g_pool_used;
static void* keep(void* p) {
  g_pool[g_pool_used++] = p;
  return p;
}
static void pool_free(void) {
  while (g_pool_used) free(g_pool[--g_pool_used]);
}
static void* zalloc(size_t n) { return keep(calloc(1, n)); }

static char** names(int count, const char* const* list) {
  char** out = zalloc(sizeof(char*) * (size_t)(count + 1));
  for (int i = 0; i < count; ++i) out[i] = (char*)list[i];
  return out;
}

static Onnx__AttributeProto* attr_int(const char* name, int64_t v) {
  Onnx__AttributeProto* a = zalloc(sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char*)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
  return a;
}

static Onnx__AttributeProto* attr_ints(const char* name, int n,
                                       const int64_t* v) {
  Onnx__AttributeProto* a = attr_int(name, 0);
  a->has_i = 0;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = (size_t)n;
  a->ints = (int64_t*)v;
  return a;
}

static Onnx__NodeProto* node(const char* op, const char* name, int nin,
                             const char* const* ins, int nout,
                             const char* const* outs, int nattr,
                             Onnx__AttributeProto** as) {
  Onnx__NodeProto* n = zalloc(sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = (char*)op;
  n->name = (char*)name;
  n->n_input = (size_t)nin;
  n->input = names(nin, ins);
  n->n_output = (size_t)nout;
  n->output = names(nout, outs);
  n->n_attribute = (size_t)nattr;
  n->attribute = as;
  return n;
}

typedef struct {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto* opsets[1];
  Onnx__NodeProto* nodes[32];
  Onnx__ValueInfoProto* inputs[16];
  Onnx__ValueInfoProto* outputs[8];
  Onnx__TensorProto* inits[8];
} model_t;

static void model_init(model_t* m, int64_t opset) {
  memset(m, 0, sizeof *m);
  onnx__model_proto__init(&m->model);
  onnx__graph_proto__init(&m->graph);
  onnx__operator_set_id_proto__init(&m->opset);
  m->opset.domain = (char*)"";
  m->opset.has_version = 1;
  m->opset.version = opset;
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1;
  m->model.opset_import = m->opsets;
  m->model.has_ir_version = 1;
  m->model.ir_version = 8;
  m->graph.name = (char*)"test-graph";
  m->graph.node = m->nodes;
  m->graph.input = m->inputs;
  m->graph.output = m->outputs;
  m->graph.initializer = m->inits;
  m->model.graph = &m->graph;
}
static void add_node(model_t* m, Onnx__NodeProto* n) {
  m->nodes[m->graph.n_node++] = n;
}
static void add_input(model_t* m, Onnx__ValueInfoProto* v) {
  m->inputs[m->graph.n_input++] = v;
}
static void add_output(model_t* m, Onnx__ValueInfoProto* v) {
  m->outputs[m->graph.n_output++] = v;
}
static void add_init(model_t* m, Onnx__TensorProto* t) {
  m->inits[m->graph.n_initializer++] = t;
}

static uint8_t* pack(model_t* m, size_t* size) {
  *size = onnx__model_proto__get_packed_size(&m->model);
  uint8_t* buf = keep(malloc(*size + 1));
  onnx__model_proto__pack(&m->model, buf);
  return buf;
}

#endif  // TJ_TESTS_UNIT_ONNX_BUILD_H_
