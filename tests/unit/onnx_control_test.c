// ONNX control flow through tj_onnx_import (onnx/onnx_control.c): models
// with If, Loop and Scan built here with protobuf-c's generated code,
// imported and run on the reference interpreter against values computed
// here. Covers subgraph scopes (outer values captured, body names gone
// after the node, outer names a body redefines restored), If on a known
// condition (only the taken branch imported) and on a run-time one (both
// and a select), Loop unrolled (a for loop, a while loop on a known
// condition, carried values that grow, scan outputs), Scan with axes and
// directions, opset 8's Scan, a Loop with a run-time trip count whose
// body is a running sum (ONNX's expanded Range), every error path by code
// and message, the graphs compiled for x86 at every ISA tier against the
// reference, and the failing-allocator sweep over the import of each.

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "onnx.pb-c.h"
#include "tests/unit/onnx_build.h"
#include "tests/unit/test.h"
#include "tests/unit/tier_ops_check.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define BOOL ONNX__TENSOR_PROTO__DATA_TYPE__BOOL

//===--- building models ---===//

static Onnx__AttributeProto* attr_graph(const char* name, Onnx__GraphProto* g) {
  Onnx__AttributeProto* a = attr_int(name, 0);
  a->has_i = 0;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  a->g = g;
  return a;
}

static Onnx__AttributeProto** attrs(int n, ...) {
  Onnx__AttributeProto** out = zalloc(sizeof(void*) * (size_t)(n + 1));
  va_list args;
  va_start(args, n);
  for (int i = 0; i < n; ++i) out[i] = va_arg(args, Onnx__AttributeProto*);
  va_end(args);
  return out;
}

#define NODE(op, name, INS, OUTS, nattr, as)                                   \
  node(op, name, (int)ARRAY_SIZE(((const char* const[])INS)),                  \
       (const char* const[])INS, (int)ARRAY_SIZE(((const char* const[])OUTS)), \
       (const char* const[])OUTS, nattr, as)
#define L(...) {__VA_ARGS__}

// A tensor value info of static |dims| (rank -1: no type at all, as ONNX's
// function bodies write subgraph inputs and outputs).
static Onnx__ValueInfoProto* value_info(const char* name, int32_t elem,
                                        int rank, const int64_t* dims) {
  Onnx__ValueInfoProto* v = zalloc(sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = (char*)name;
  if (rank < 0) return v;
  Onnx__TypeProto* t = zalloc(sizeof *t);
  onnx__type_proto__init(t);
  Onnx__TypeProto__Tensor* tt = zalloc(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  Onnx__TensorShapeProto* shape = zalloc(sizeof *shape);
  onnx__tensor_shape_proto__init(shape);
  shape->n_dim = (size_t)rank;
  shape->dim = zalloc(sizeof(void*) * (size_t)(rank + 1));
  for (int i = 0; i < rank; ++i) {
    Onnx__TensorShapeProto__Dimension* d = zalloc(sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] < 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = (char*)"T";
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    }
    shape->dim[i] = d;
  }
  tt->shape = shape;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  v->type = t;
  return v;
}
static Onnx__ValueInfoProto* untyped(const char* name) {
  return value_info(name, 0, -1, NULL);
}

static Onnx__TensorProto* tensor(const char* name, int32_t elem, int rank,
                                 const int64_t* dims, const void* data,
                                 size_t bytes) {
  Onnx__TensorProto* t = zalloc(sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = (char*)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = (int64_t*)dims;
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = (uint8_t*)data;
  return t;
}
static Onnx__TensorProto* scalar_i64(const char* name, int64_t v) {
  int64_t* p = zalloc(sizeof *p);
  *p = v;
  return tensor(name, I64, 0, NULL, p, sizeof *p);
}
static Onnx__TensorProto* scalar_bool(const char* name, bool v) {
  uint8_t* p = zalloc(1);
  *p = v;
  return tensor(name, BOOL, 0, NULL, p, 1);
}
static Onnx__TensorProto* scalar_f32(const char* name, float v) {
  float* p = zalloc(sizeof *p);
  *p = v;
  return tensor(name, F32, 0, NULL, p, sizeof *p);
}

// A Constant node of one float scalar.
static Onnx__NodeProto* constant_f32(const char* out, float v) {
  Onnx__AttributeProto* a = attr_int("value", 0);
  a->has_i = 0;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  a->t = scalar_f32("", v);
  return node("Constant", "", 0, NULL, 1, (const char* const[]){out}, 1,
              attrs(1, a));
}

static Onnx__GraphProto* subgraph(const char* name, int nnode,
                                  Onnx__NodeProto** nodes, int nin,
                                  Onnx__ValueInfoProto** ins, int nout,
                                  Onnx__ValueInfoProto** outs) {
  Onnx__GraphProto* g = zalloc(sizeof *g);
  onnx__graph_proto__init(g);
  g->name = (char*)name;
  // The lists are copied: callers pass compound literals of their frame.
  g->n_node = (size_t)nnode;
  g->node = zalloc(sizeof(void*) * (size_t)(nnode + 1));
  if (nnode) memcpy(g->node, nodes, sizeof(void*) * (size_t)nnode);
  g->n_input = (size_t)nin;
  g->input = zalloc(sizeof(void*) * (size_t)(nin + 1));
  if (nin) memcpy(g->input, ins, sizeof(void*) * (size_t)nin);
  g->n_output = (size_t)nout;
  g->output = zalloc(sizeof(void*) * (size_t)(nout + 1));
  if (nout) memcpy(g->output, outs, sizeof(void*) * (size_t)nout);
  return g;
}
#define NODES(...) \
  (Onnx__NodeProto*[]) { __VA_ARGS__ }
#define INFOS(...) \
  (Onnx__ValueInfoProto*[]) { __VA_ARGS__ }

static tj_status_t import(tj_context_t* ctx, model_t* m, tj_graph_t** graph) {
  size_t size;
  uint8_t* bytes = pack(m, &size);
  return tj_onnx_import(ctx, bytes, size, NULL, graph);
}

static const int64_t kVec3[1] = {3};

// Runs |g| (one or two f32 or bool inputs, one f32 output of |n| elements)
// on the reference interpreter.
static tj_status_t run1(tj_graph_t* g, const tj_tensor_t* ins, int32_t nin,
                        float* y, int32_t rank, const int64_t* dims) {
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, rank, dims);
  return tj_reference_run(g, ins, nin, &out, 1);
}

//===--- If ---===//

// y = If(cond) then x + 1 (a Constant in the branch, x captured) else
// x * x; |cond| an initializer (|known| 0 false, 1 true) or, for |known|
// -1, a graph input. With |broken_else|, the else branch reads a name
// nothing defines: importable only when it is not taken.
static void build_if(model_t* m, int known, bool broken_else) {
  model_init(m, 13);
  add_input(m, value_info("x", F32, 1, kVec3));
  if (known >= 0)
    add_init(m, scalar_bool("cond", known == 1));
  else
    add_input(m, value_info("cond", BOOL, 0, NULL));
  Onnx__GraphProto* then_g =
      subgraph("then", 2,
               NODES(constant_f32("one", 1),
                     NODE("Add", "add1", L("x", "one"), L("then_y"), 0, NULL)),
               0, NULL, 1, INFOS(value_info("then_y", F32, 1, kVec3)));
  Onnx__GraphProto* else_g =
      subgraph("else", 1,
               NODES(NODE("Mul", "sq", L("x", broken_else ? "nowhere" : "x"),
                          L("else_y"), 0, NULL)),
               0, NULL, 1, INFOS(untyped("else_y")));
  add_node(m, NODE("If", "if", L("cond"), L("y"), 2,
                   attrs(2, attr_graph("then_branch", then_g),
                         attr_graph("else_branch", else_g))));
  add_output(m, value_info("y", F32, 1, kVec3));
}

TEST(if_known_condition_takes_one_branch) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  float x[3] = {1, -2, 0.5f}, y[3];
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, kVec3);
  for (int known = 0; known < 2; ++known) {
    model_t m;
    // The untaken branch is not imported: a broken else is fine when the
    // condition is true.
    build_if(&m, known, known == 1);
    tj_graph_t* g = NULL;
    CHECK_OK(import(ctx, &m, &g));
    if (!g) continue;
    CHECK_EQ_INT(1, tj_graph_num_inputs(g));  // cond is no input
    CHECK_OK(run1(g, &in, 1, y, 1, kVec3));
    for (int i = 0; i < 3; ++i) CHECK(y[i] == (known ? x[i] + 1 : x[i] * x[i]));
    tj_graph_destroy(g);
  }
  // Taken, the broken branch is an error naming the If and the branch.
  model_t m;
  build_if(&m, 0, true);
  tj_graph_t* g = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "onnx: node 0 \"if\" (If, opset 13): else_branch: onnx: node 0 "
               "\"sq\" (Mul, opset 13): input 1 \"nowhere\" is not defined",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

TEST(if_runtime_condition_selects) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  build_if(&m, -1, false);
  tj_graph_t* g = NULL;
  CHECK_OK(import(ctx, &m, &g));
  if (g) {
    CHECK_EQ_INT(2, tj_graph_num_inputs(g));
    float x[3] = {1, -2, 0.5f}, y[3];
    for (int c = 0; c < 2; ++c) {
      bool cond = c;
      tj_tensor_t ins[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 1, kVec3),
                            tj_tensor_make(&cond, TJ_DTYPE_BOOL, 0, NULL)};
      CHECK_OK(run1(g, ins, 2, y, 1, kVec3));
      for (int i = 0; i < 3; ++i)
        CHECK(y[i] == (cond ? x[i] + 1 : x[i] * x[i]));
    }
    tj_graph_destroy(g);
  }
  // With a run-time condition both branches are imported: a broken one is
  // an error.
  build_if(&m, -1, true);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "(If, opset 13): else_branch: onnx: node 0",
               import(ctx, &m, &g));
  // Branches of another shape cannot be selected elementwise.
  build_if(&m, -1, false);
  Onnx__GraphProto* else_g = m.nodes[0]->attribute[1]->g;
  else_g->node[0] = NODE("ReduceSum", "rs", L("x"), L("else_y"), 1,
                         attrs(1, attr_int("keepdims", 1)));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"if\" (If, opset 13): output 0: then_branch gives "
               "f32[3], else_branch f32[1]; with a condition known only at "
               "run time both branches are computed",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

TEST(if_errors) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  // No else_branch.
  build_if(&m, 1, false);
  m.nodes[0]->n_attribute = 1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "node 0 \"if\" (If, opset 13): attribute else_branch (a "
               "graph) is required",
               import(ctx, &m, &g));
  // A branch attribute that is no graph.
  build_if(&m, 1, false);
  m.nodes[0]->attribute[1] = attr_int("else_branch", 3);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "attribute else_branch is not a graph", import(ctx, &m, &g));
  // Branch output counts that disagree with the node.
  build_if(&m, 1, false);
  m.nodes[0]->attribute[0]->g->n_output = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "1 outputs, but then_branch has 0 and else_branch 1",
               import(ctx, &m, &g));
  // A condition of two elements.
  static const int64_t kTwo[1] = {2};
  build_if(&m, -1, false);
  m.inputs[1] = value_info("cond", BOOL, 1, kTwo);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "the condition has 2 elements; one expected",
               import(ctx, &m, &g));
  // A branch output that nothing defines, a declared dtype that is not the
  // value's, a sequence-typed output.
  build_if(&m, 1, false);
  Onnx__GraphProto* then_g = m.nodes[0]->attribute[0]->g;
  then_g->output[0] = untyped("ghost");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "then_branch output 0 \"ghost\" is not defined",
               import(ctx, &m, &g));
  then_g->output[0] = value_info("then_y", I64, 1, kVec3);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "then_branch output 0 \"then_y\" is declared i64 but is f32",
               import(ctx, &m, &g));
  Onnx__ValueInfoProto* seq = untyped("then_y");
  seq->type = zalloc(sizeof *seq->type);
  onnx__type_proto__init(seq->type);
  seq->type->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  seq->type->sequence_type = zalloc(sizeof *seq->type->sequence_type);
  onnx__type_proto__sequence__init(seq->type->sequence_type);
  then_g->output[0] = seq;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "(If, opset 13): then_branch output 0 \"then_y\" is not a "
               "tensor (sequence",
               import(ctx, &m, &g));
  // Sparse initializers in a branch.
  build_if(&m, 1, false);
  m.nodes[0]->attribute[0]->g->n_sparse_initializer = 1;
  m.nodes[0]->attribute[0]->g->sparse_initializer =
      zalloc(sizeof(Onnx__SparseTensorProto*));
  m.nodes[0]->attribute[0]->g->sparse_initializer[0] =
      zalloc(sizeof(Onnx__SparseTensorProto));
  onnx__sparse_tensor_proto__init(
      m.nodes[0]->attribute[0]->g->sparse_initializer[0]);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "then_branch has sparse initializers",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

// Subgraph scopes: sibling branches reuse a name; a name defined in a
// branch is gone after the If; an outer name a branch redefines comes back.
TEST(subgraph_scopes) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  model_init(&m, 13);
  add_input(&m, value_info("x", F32, 1, kVec3));
  add_input(&m, value_info("cond", BOOL, 0, NULL));
  add_init(&m, scalar_f32("k", 10));
  // Both branches define "t"; the then branch also redefines outer "k".
  Onnx__GraphProto* then_g =
      subgraph("then", 2,
               NODES(constant_f32("k", 2),
                     NODE("Mul", "m", L("x", "k"), L("t"), 0, NULL)),
               0, NULL, 1, INFOS(untyped("t")));
  Onnx__GraphProto* else_g =
      subgraph("else", 1, NODES(NODE("Add", "a", L("x", "k"), L("t"), 0, NULL)),
               0, NULL, 1, INFOS(untyped("t")));
  add_node(&m, NODE("If", "if", L("cond"), L("y0"), 2,
                    attrs(2, attr_graph("then_branch", then_g),
                          attr_graph("else_branch", else_g))));
  // After the If, "k" is the outer 10 again.
  add_node(&m, NODE("Add", "after", L("y0", "k"), L("y"), 0, NULL));
  add_output(&m, value_info("y", F32, 1, kVec3));
  CHECK_OK(import(ctx, &m, &g));
  if (g) {
    float x[3] = {1, 2, 3}, y[3];
    for (int c = 0; c < 2; ++c) {
      bool cond = c;
      tj_tensor_t ins[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 1, kVec3),
                            tj_tensor_make(&cond, TJ_DTYPE_BOOL, 0, NULL)};
      CHECK_OK(run1(g, ins, 2, y, 1, kVec3));
      for (int i = 0; i < 3; ++i)
        CHECK(y[i] == (cond ? x[i] * 2 : x[i] + 10) + 10);
    }
    tj_graph_destroy(g);
    g = NULL;
  }
  // A branch's "t" is not visible after the If.
  m.nodes[1] = NODE("Add", "after", L("y0", "t"), L("y"), 0, NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "node 1 \"after\" (Add, opset 13): input 1 \"t\" is not "
               "defined",
               import(ctx, &m, &g));
  tj_context_destroy(ctx);
  pool_free();
}

//===--- Loop ---===//

// y, ys = Loop(M, cond, y0): y = y + x * float(i) for i < M (x captured),
// ys the y of each iteration; |m_value| < 0: M a graph input; |cond_mode|
// 0: no cond, 1: cond true, 2: cond a graph input; with |while_stop| >= 0
// the body's condition is i < while_stop - 1 (a while loop, M absent when
// |m_value| is 0).
static void build_loop(model_t* m, int64_t m_value, int cond_mode,
                       int64_t while_stop) {
  model_init(m, 13);
  add_input(m, value_info("x", F32, 1, kVec3));
  add_input(m, value_info("y0", F32, 1, kVec3));
  const char* mname = "M";
  if (m_value < 0)
    add_input(m, value_info("M", I64, 0, NULL));
  else if (m_value == 0 && while_stop >= 0)
    mname = "";
  else
    add_init(m, scalar_i64("M", m_value));
  const char* cname = "";
  if (cond_mode == 1) {
    add_init(m, scalar_bool("c0", true));
    cname = "c0";
  } else if (cond_mode == 2) {
    add_input(m, value_info("c0", BOOL, 0, NULL));
    cname = "c0";
  }
  add_init(m, scalar_i64("stop", while_stop));
  Onnx__NodeProto** body_nodes = zalloc(sizeof(void*) * 5);
  int nb = 0;
  body_nodes[nb++] =
      NODE("Cast", "fi", L("i"), L("fi"), 1, attrs(1, attr_int("to", F32)));
  body_nodes[nb++] = NODE("Mul", "xi", L("x", "fi"), L("xi"), 0, NULL);
  body_nodes[nb++] = NODE("Add", "acc", L("y_in", "xi"), L("y_out"), 0, NULL);
  body_nodes[nb++] =
      while_stop >= 0
          ? node("Less", "lt", 2, (const char* const[]){"i", "stop_m1"}, 1,
                 (const char* const[]){"c_out"}, 0, NULL)
          : NODE("Identity", "c", L("c_in"), L("c_out"), 0, NULL);
  Onnx__GraphProto* body =
      subgraph("body", nb, body_nodes, 3,
               INFOS(value_info("i", I64, 0, NULL),
                     value_info("c_in", BOOL, 0, NULL), untyped("y_in")),
               3, INFOS(untyped("c_out"), untyped("y_out"), untyped("y_out")));
  if (while_stop >= 0) {
    // stop_m1 = stop - 1, outside the loop (captured).
    add_init(m, scalar_i64("one", 1));
    add_node(m, NODE("Sub", "sm1", L("stop", "one"), L("stop_m1"), 0, NULL));
  }
  add_node(m, node("Loop", "loop", 3, (const char* const[]){mname, cname, "y0"},
                   2, (const char* const[]){"y", "ys"}, 1,
                   attrs(1, attr_graph("body", body))));
  add_output(m, value_info("y", F32, 1, kVec3));
  add_output(m, value_info("ys", F32, 0, NULL));
}

// Runs a loop model: y and ys for |iters| iterations, checked.
static void check_loop(tj_graph_t* g, int64_t iters) {
  float x[3] = {1, -2, 0.25f}, y0[3] = {0.5f, 1, -1}, y[3], ys[64 * 3];
  int64_t ys_dims[2] = {iters, 3};
  tj_tensor_t ins[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 1, kVec3),
                        tj_tensor_make(y0, TJ_DTYPE_F32, 1, kVec3)};
  tj_tensor_t outs[2] = {tj_tensor_make(y, TJ_DTYPE_F32, 1, kVec3),
                         tj_tensor_make(ys, TJ_DTYPE_F32, 2, ys_dims)};
  tj_value_t v = tj_graph_output_value(g, 1);
  CHECK_EQ_INT(2, tj_graph_value_rank(g, v));
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(g, v, dims);
  CHECK_EQ_INT(iters, dims[0]);
  CHECK_EQ_INT(3, dims[1]);
  CHECK_OK(tj_reference_run(g, ins, 2, outs, 2));
  float acc[3] = {y0[0], y0[1], y0[2]};
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 3; ++j) {
      acc[j] += x[j] * (float)i;
      CHECK(fabsf(ys[i * 3 + j] - acc[j]) <= 1e-6f * (1 + fabsf(acc[j])));
    }
  }
  for (int j = 0; j < 3; ++j)
    CHECK(fabsf(y[j] - acc[j]) <= 1e-6f * (1 + fabsf(acc[j])));
}

TEST(loop_unrolled) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  // A for loop (no cond), and one with a constant-true cond.
  for (int cond_mode = 0; cond_mode < 2; ++cond_mode) {
    build_loop(&m, 5, cond_mode, -1);
    CHECK_OK(import(ctx, &m, &g));
    if (g) check_loop(g, 5);
    tj_graph_destroy(g);
    g = NULL;
  }
  // A while loop: no M, the body's condition (i < 3) known each iteration:
  // it runs for i = 0..3.
  build_loop(&m, 0, 1, 4);
  CHECK_OK(import(ctx, &m, &g));
  if (g) check_loop(g, 4);
  tj_graph_destroy(g);
  g = NULL;
  // Zero iterations: y is y0, ys is empty of the shape [0, 3] one iteration
  // would give it. A condition false at the start is zero iterations too.
  for (int c = 0; c < 2; ++c) {
    build_loop(&m, c ? 5 : 0, c, -1);
    if (c) m.inits[1] = scalar_bool("c0", false);
    CHECK_OK(import(ctx, &m, &g));
    if (g) check_loop(g, 0);
    tj_graph_destroy(g);
    g = NULL;
  }
  // M and a condition: the smaller wins.
  build_loop(&m, 2, 1, 4);
  CHECK_OK(import(ctx, &m, &g));
  if (g) check_loop(g, 2);
  tj_graph_destroy(g);
  g = NULL;
  // A Loop inside a Loop's body: the outer runs 3 times an inner loop of
  // 2 iterations that adds 1 to the carried value: y = y0 + 6.
  model_init(&m, 13);
  add_input(&m, value_info("y0", F32, 1, kVec3));
  add_init(&m, scalar_i64("three", 3));
  add_init(&m, scalar_i64("two", 2));
  Onnx__GraphProto* inner =
      subgraph("inner", 3,
               NODES(constant_f32("one", 1),
                     NODE("Add", "inc", L("u_in", "one"), L("u_out"), 0, NULL),
                     NODE("Identity", "c", L("ci"), L("co"), 0, NULL)),
               3, INFOS(untyped("j"), untyped("ci"), untyped("u_in")), 2,
               INFOS(untyped("co"), untyped("u_out")));
  Onnx__GraphProto* outer =
      subgraph("outer", 2,
               NODES(node("Loop", "inner_loop", 3,
                          (const char* const[]){"two", "", "v_in"}, 1,
                          (const char* const[]){"v_mid"}, 1,
                          attrs(1, attr_graph("body", inner))),
                     NODE("Identity", "c", L("c_in"), L("c_out"), 0, NULL)),
               3, INFOS(untyped("i"), untyped("c_in"), untyped("v_in")), 2,
               INFOS(untyped("c_out"), untyped("v_mid")));
  add_node(
      &m,
      node("Loop", "outer_loop", 3, (const char* const[]){"three", "", "y0"}, 1,
           (const char* const[]){"y"}, 1, attrs(1, attr_graph("body", outer))));
  add_output(&m, value_info("y", F32, 1, kVec3));
  CHECK_OK(import(ctx, &m, &g));
  if (g) {
    float y0[3] = {1, 2, 3}, y[3];
    tj_tensor_t in = tj_tensor_make(y0, TJ_DTYPE_F32, 1, kVec3);
    CHECK_OK(run1(g, &in, 1, y, 1, kVec3));
    for (int i = 0; i < 3; ++i) CHECK(y[i] == y0[i] + 6);
    tj_graph_destroy(g);
    g = NULL;
  }
  tj_context_destroy(ctx);
  pool_free();
}

// A loop-carried value that grows each iteration (Concat), everything
// known at import: the result is a known value, folded, so it can feed a
// Reshape's shape.
TEST(loop_carried_known_values_grow) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  model_init(&m, 13);
  static const int64_t kX[2] = {2, 6}, kOne[1] = {1}, kY[3] = {2, 3, 2};
  add_input(&m, value_info("x", F32, 2, kX));
  int64_t* two = zalloc(sizeof(int64_t));
  *two = 2;
  add_init(&m, tensor("shape0", I64, 1, kOne, two, sizeof(int64_t)));
  add_init(&m, scalar_i64("M", 2));
  static const int64_t kAxes[1] = {0};
  // Appends 3 - i: shape0 = [2] -> [2, 3] -> [2, 3, 2].
  Onnx__GraphProto* body =
      subgraph("grow", 4,
               NODES(node("Constant", "three", 0, NULL, 1,
                          (const char* const[]){"three"}, 1,
                          attrs(1, attr_int("value_int", 3))),
                     NODE("Sub", "d", L("three", "i"), L("d"), 0, NULL),
                     node("Unsqueeze", "u", 1, (const char* const[]){"d"}, 1,
                          (const char* const[]){"d1"}, 1,
                          attrs(1, attr_ints("axes", 1, kAxes))),
                     NODE("Concat", "cat", L("s_in", "d1"), L("s_out"), 1,
                          attrs(1, attr_int("axis", 0)))),
               3, INFOS(untyped("i"), untyped("c"), untyped("s_in")), 2,
               INFOS(untyped("c"), untyped("s_out")));
  add_node(&m, node("Loop", "loop", 3, (const char* const[]){"M", "", "shape0"},
                    1, (const char* const[]){"shape"}, 1,
                    attrs(1, attr_graph("body", body))));
  add_node(&m, NODE("Reshape", "r", L("x", "shape"), L("y"), 0, NULL));
  add_output(&m, value_info("y", F32, 3, kY));
  tj_graph_t* g = NULL;
  // Opset 11 for Unsqueeze's axes attribute.
  m.opset.version = 11;
  CHECK_OK(import(ctx, &m, &g));
  if (g) {
    tj_value_t y = tj_graph_output_value(g, 0);
    int64_t dims[TJ_MAX_RANK];
    CHECK_EQ_INT(3, tj_graph_value_rank(g, y));
    tj_graph_value_dims(g, y, dims);
    CHECK(dims[0] == 2 && dims[1] == 3 && dims[2] == 2);
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
  pool_free();
}

TEST(loop_errors) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  // A trip count known only at run time.
  build_loop(&m, -1, 0, -1);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"loop\" (Loop, opset 13): input 0 (trip count M, "
               "\"M\") must be a constant: the IR has no run-time loops",
               import(ctx, &m, &g));
  // A condition known only at run time.
  build_loop(&m, 3, 2, -1);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "input 1 (cond, \"c0\") must be a constant: the IR has no "
               "run-time loops",
               import(ctx, &m, &g));
  // Neither M nor cond.
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->input[0] = (char*)"";
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "neither a trip count nor a condition: an infinite loop",
               import(ctx, &m, &g));
  // Unrolling past the limit: 20000 iterations of a 4-node body.
  build_loop(&m, 20000, 0, -1);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "65540 body node copies are above the limit of 65536 "
               "(TJ_ONNX_UNROLL_LIMIT",
               import(ctx, &m, &g));
  // A body that does not match the loop-carried values.
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->attribute[0]->g->n_input = 2;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "the body has 2 inputs and 3 outputs for 1 loop-carried values",
               import(ctx, &m, &g));
  // A declared body input dtype that is not the value's (i is int64).
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->attribute[0]->g->input[0] = value_info("i", F32, 0, NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "the body input 0 \"i\" is declared f32 but is i64",
               import(ctx, &m, &g));
  // An error in the body names the iteration.
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->attribute[0]->g->node[1]->input[0] = (char*)"nowhere";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "node 0 \"loop\" (Loop, opset 13): the body, iteration 0: onnx: "
               "node 1 \"xi\" (Mul, opset 13): input 0 \"nowhere\" is not "
               "defined",
               import(ctx, &m, &g));
  // A scan output whose shape changes between iterations.
  model_init(&m, 13);
  add_init(&m, scalar_i64("M", 2));
  int64_t* one = zalloc(sizeof(int64_t));
  static const int64_t kOne[1] = {1};
  *one = 1;
  add_init(&m, tensor("s0", I64, 1, kOne, one, sizeof(int64_t)));
  Onnx__GraphProto* body =
      subgraph("grow", 1,
               NODES(NODE("Concat", "cat", L("s_in", "s_in"), L("s_out"), 1,
                          attrs(1, attr_int("axis", 0)))),
               3, INFOS(untyped("i"), untyped("c"), untyped("s_in")), 3,
               INFOS(untyped("c"), untyped("s_out"), untyped("s_out")));
  add_node(&m, node("Loop", "loop", 3, (const char* const[]){"M", "", "s0"}, 2,
                    (const char* const[]){"s", "ss"}, 1,
                    attrs(1, attr_graph("body", body))));
  add_output(&m, value_info("ss", I64, 0, NULL));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "scan output 0 of the body is i64[4] in iteration 1 but i64[2] "
               "in iteration 0",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

//===--- Loop with a run-time trip count: a running sum (ops15b) ---===//

// ys = Loop(M, cond, start) with the body prev + delta carried and prev
// scanned (ONNX's expanded Range); M a graph input; |cond_mode| 0: no
// cond, 1: true, 2: a graph input. |read_final|: the final carried value
// "yf" is a graph output too.
static void build_running_sum(model_t* m, int cond_mode, bool read_final) {
  model_init(m, 13);
  add_input(m, value_info("start", F32, 0, NULL));
  add_input(m, value_info("delta", F32, 0, NULL));
  add_input(m, value_info("M", I64, 0, NULL));
  const char* cname = "";
  if (cond_mode == 1) {
    add_init(m, scalar_bool("c0", true));
    cname = "c0";
  } else if (cond_mode == 2) {
    add_input(m, value_info("c0", BOOL, 0, NULL));
    cname = "c0";
  }
  Onnx__NodeProto** body_nodes = zalloc(sizeof(void*) * 3);
  body_nodes[0] = NODE("Identity", "c", L("c_in"), L("c_out"), 0, NULL);
  body_nodes[1] = NODE("Add", "next", L("prev", "delta"), L("cur"), 0, NULL);
  body_nodes[2] = NODE("Identity", "scan", L("prev"), L("r"), 0, NULL);
  Onnx__GraphProto* body =
      subgraph("body", 3, body_nodes, 3,
               INFOS(value_info("i", I64, 0, NULL),
                     value_info("c_in", BOOL, 0, NULL), untyped("prev")),
               3, INFOS(untyped("c_out"), untyped("cur"), untyped("r")));
  add_node(
      m, node("Loop", "loop", 3, (const char* const[]){"M", cname, "start"}, 2,
              (const char* const[]){"yf", "ys"}, 1,
              attrs(1, attr_graph("body", body))));
  add_output(m, value_info("ys", F32, 0, NULL));
  if (read_final) add_output(m, value_info("yf", F32, 0, NULL));
}

// The scan of |count| steps from 1.5 by 0.1 in f32 on the reference and
// on x86; |cond| the condition input's value where the model takes one.
static void check_running_sum(tj_context_t* ctx, int cond_mode, int64_t mv,
                              bool cond, int64_t count) {
  model_t m;
  tj_graph_t* g = NULL;
  build_running_sum(&m, cond_mode, false);
  CHECK_OK(import(ctx, &m, &g));
  if (!g) return;
  float start = 1.5f, delta = 0.1f, ys[16], xs[16];
  uint8_t c = cond;
  tj_tensor_t ins[4] = {tj_tensor_make(&start, TJ_DTYPE_F32, 0, NULL),
                        tj_tensor_make(&delta, TJ_DTYPE_F32, 0, NULL),
                        tj_tensor_make(&mv, TJ_DTYPE_I64, 0, NULL),
                        tj_tensor_make(&c, TJ_DTYPE_BOOL, 0, NULL)};
  int32_t nin = cond_mode == 2 ? 4 : 3;
  CHECK_OK(run1(g, ins, nin, ys, 1, &count));
  tj_compile_options_t o = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_tensor_t out = tj_tensor_make(xs, TJ_DTYPE_F32, 1, &count);
  if (exe) CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
  float prev = start;
  for (int64_t i = 0; i < count; ++i) {
    CHECK(ys[i] == prev && xs[i] == prev);
    prev += delta;
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(loop_running_sum) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  check_running_sum(ctx, 0, 7, true, 7);
  check_running_sum(ctx, 1, 12, true, 12);
  check_running_sum(ctx, 0, 0, true, 0);
  check_running_sum(ctx, 0, -3, true, 0);
  check_running_sum(ctx, 2, 5, true, 5);
  check_running_sum(ctx, 2, 5, false, 0);
  // The final carried value is not made: reading it is refused.
  model_t m;
  tj_graph_t* g = NULL;
  build_running_sum(&m, 0, true);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"loop\" (Loop, opset 13): with a run-time trip count "
               "(\"M\") the body runs as a running sum whose scan output is "
               "computed, but its final loop-carried value \"yf\" is read",
               import(ctx, &m, &g));
  tj_context_destroy(ctx);
}

//===--- Scan ---===//

// Scan over x[2,4,3] along axis 1 (|in_dir| 1: in reverse) with a state
// s[2,3]: s += x_t; out_t = s * 2, stacked along |out_axis| (|out_dir| 1:
// prepended). |symbolic|: x's axis 1 is a dim_param.
static void build_scan(model_t* m, int64_t in_dir, int64_t out_axis,
                       int64_t out_dir, bool symbolic) {
  static const int64_t kX[3] = {2, 4, 3}, kXs[3] = {2, -1, 3}, kS[2] = {2, 3};
  model_init(m, 16);
  add_input(m, value_info("s0", F32, 2, kS));
  add_input(m, value_info("x", F32, 3, symbolic ? kXs : kX));
  static int64_t one[1] = {1}, dirs[1], oaxes[1], odirs[1];
  dirs[0] = in_dir;
  oaxes[0] = out_axis;
  odirs[0] = out_dir;
  Onnx__GraphProto* body =
      subgraph("step", 3,
               NODES(NODE("Add", "acc", L("s_in", "x_t"), L("s_out"), 0, NULL),
                     constant_f32("two", 2),
                     NODE("Mul", "dbl", L("s_out", "two"), L("o_t"), 0, NULL)),
               2, INFOS(value_info("s_in", F32, 2, kS), untyped("x_t")), 2,
               INFOS(untyped("s_out"), untyped("o_t")));
  add_node(
      m, NODE("Scan", "scan", L("s0", "x"), L("s", "o"), 6,
              attrs(6, attr_graph("body", body), attr_int("num_scan_inputs", 1),
                    attr_ints("scan_input_axes", 1, one),
                    attr_ints("scan_input_directions", 1, dirs),
                    attr_ints("scan_output_axes", 1, oaxes),
                    attr_ints("scan_output_directions", 1, odirs))));
  add_output(m, value_info("s", F32, 2, kS));
  add_output(m, value_info("o", F32, 0, NULL));
}

// Opset 8's Scan over x[2,4,3] (batch 2, sequence 4) with a state s[2,3]:
// per batch element s += x_t, out_t = s * 2; |dir| 1 reads the sequence in
// reverse. |lens| > 0: sequence_lens given as an initializer, all |lens|.
static void build_scan8(model_t* m, int64_t dir, int32_t lens) {
  static const int64_t kX[3] = {2, 4, 3}, kS[2] = {2, 3}, kB[1] = {2};
  model_init(m, 8);
  add_input(m, value_info("s0", F32, 2, kS));
  add_input(m, value_info("x", F32, 3, kX));
  if (lens > 0) {
    int32_t* l = zalloc(2 * sizeof(int32_t));
    l[0] = l[1] = lens;
    add_init(m, tensor("lens", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, kB, l,
                       2 * sizeof(int32_t)));
  }
  int64_t* dirs = zalloc(sizeof(int64_t));
  *dirs = dir;
  add_init(m, scalar_f32("two", 2));  // captured by the body
  Onnx__GraphProto* body =
      subgraph("step8", 2,
               NODES(NODE("Add", "acc", L("s_in", "x_t"), L("s_out"), 0, NULL),
                     NODE("Mul", "dbl", L("s_out", "two"), L("o_t"), 0, NULL)),
               2, INFOS(untyped("s_in"), untyped("x_t")), 2,
               INFOS(untyped("s_out"), untyped("o_t")));
  add_node(
      m, node("Scan", "scan8", 3,
              (const char* const[]){lens > 0 ? "lens" : "", "s0", "x"}, 2,
              (const char* const[]){"s", "o"}, 3,
              attrs(3, attr_graph("body", body), attr_int("num_scan_inputs", 1),
                    attr_ints("directions", 1, dirs))));
  add_output(m, value_info("s", F32, 2, kS));
  add_output(m, value_info("o", F32, 3, kX));
}

TEST(scan8_batch_axis) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  float s0[6], x[24];
  for (int i = 0; i < 6; ++i) s0[i] = (float)i * 0.5f;
  for (int i = 0; i < 24; ++i) x[i] = (float)((i * 3) % 5) - 2;
  static const int64_t kS[2] = {2, 3}, kX[3] = {2, 4, 3};
  for (int variant = 0; variant < 3; ++variant) {
    int64_t dir = variant == 1;
    model_t m;
    build_scan8(&m, dir, variant == 2 ? 4 : 0);  // full sequence_lens
    tj_graph_t* g = NULL;
    CHECK_OK(import(ctx, &m, &g));
    if (!g) continue;
    float s[6], o[24];
    tj_tensor_t ins[2] = {tj_tensor_make(s0, TJ_DTYPE_F32, 2, kS),
                          tj_tensor_make(x, TJ_DTYPE_F32, 3, kX)};
    tj_tensor_t outs[2] = {tj_tensor_make(s, TJ_DTYPE_F32, 2, kS),
                           tj_tensor_make(o, TJ_DTYPE_F32, 3, kX)};
    CHECK_OK(tj_reference_run(g, ins, 2, outs, 2));
    for (int b = 0; b < 2; ++b) {
      float acc[3] = {s0[b * 3], s0[b * 3 + 1], s0[b * 3 + 2]};
      for (int t = 0; t < 4; ++t) {
        int at = dir ? 3 - t : t;
        for (int c = 0; c < 3; ++c) {
          acc[c] += x[(b * 4 + at) * 3 + c];
          CHECK(o[(b * 4 + t) * 3 + c] == acc[c] * 2);
        }
      }
      for (int c = 0; c < 3; ++c) CHECK(s[b * 3 + c] == acc[c]);
    }
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
  pool_free();
}

TEST(scan_axes_directions) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  float s0[6], x[24];
  for (int i = 0; i < 6; ++i) s0[i] = (float)i - 2;
  for (int i = 0; i < 24; ++i) x[i] = (float)((i * 5) % 7) - 3;
  static const int64_t kS[2] = {2, 3}, kX[3] = {2, 4, 3};
  for (int variant = 0; variant < 8; ++variant) {
    int64_t in_dir = variant & 1, out_dir = (variant >> 1) & 1;
    int64_t out_axis = (variant >> 2) ? -1 : 0;  // -1: axis 2 of [2,3,T]
    model_t m;
    build_scan(&m, in_dir, out_axis, out_dir, false);
    tj_graph_t* g = NULL;
    CHECK_OK(import(ctx, &m, &g));
    if (!g) continue;
    int64_t o_dims[3] = {4, 2, 3};
    if (out_axis == -1) {
      o_dims[0] = 2;
      o_dims[1] = 3;
      o_dims[2] = 4;
    }
    int64_t dims[TJ_MAX_RANK];
    tj_value_t ov = tj_graph_output_value(g, 1);
    CHECK_EQ_INT(3, tj_graph_value_rank(g, ov));
    tj_graph_value_dims(g, ov, dims);
    CHECK(memcmp(dims, o_dims, sizeof o_dims) == 0);
    float s[6], o[24];
    tj_tensor_t ins[2] = {tj_tensor_make(s0, TJ_DTYPE_F32, 2, kS),
                          tj_tensor_make(x, TJ_DTYPE_F32, 3, kX)};
    tj_tensor_t outs[2] = {tj_tensor_make(s, TJ_DTYPE_F32, 2, kS),
                           tj_tensor_make(o, TJ_DTYPE_F32, 3, o_dims)};
    CHECK_OK(tj_reference_run(g, ins, 2, outs, 2));
    float acc[6];
    memcpy(acc, s0, sizeof acc);
    for (int t = 0; t < 4; ++t) {
      int at = in_dir ? 3 - t : t;    // the element this iteration reads
      int pos = out_dir ? 3 - t : t;  // where its output lands
      for (int b = 0; b < 2; ++b) {
        for (int c = 0; c < 3; ++c) {
          acc[b * 3 + c] += x[(b * 4 + at) * 3 + c];
          float want = acc[b * 3 + c] * 2;
          float got = out_axis == 0 ? o[(pos * 2 + b) * 3 + c]
                                    : o[(b * 3 + c) * 4 + pos];
          CHECK(got == want);
        }
      }
    }
    for (int i = 0; i < 6; ++i) CHECK(s[i] == acc[i]);
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
  pool_free();
}

// A Scan of known values (no state, an initializer scanned in reverse)
// stays known: its output can be a Reshape's shape. Reversed twice it is
// the sequence itself, once its reverse.
TEST(scan_known_values_fold) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  static const int64_t kTwo[1] = {2}, kSix[1] = {6}, kSeq[2] = {3, 2};
  for (int out_dir = 0; out_dir < 2; ++out_dir) {
    model_t m;
    model_init(&m, 16);
    add_input(&m, value_info("x", F32, 1, kSix));
    add_init(&m, tensor("seq", I64, 1, kTwo, kSeq, sizeof kSeq));
    static const int64_t kRev[1] = {1};
    int64_t* odir = zalloc(sizeof(int64_t));
    *odir = out_dir;
    Onnx__GraphProto* body = subgraph(
        "id", 1, NODES(NODE("Identity", "id", L("e"), L("o_t"), 0, NULL)), 1,
        INFOS(untyped("e")), 1, INFOS(untyped("o_t")));
    add_node(&m, NODE("Scan", "scan", L("seq"), L("shape"), 4,
                      attrs(4, attr_graph("body", body),
                            attr_int("num_scan_inputs", 1),
                            attr_ints("scan_input_directions", 1, kRev),
                            attr_ints("scan_output_directions", 1, odir))));
    add_node(&m, NODE("Reshape", "r", L("x", "shape"), L("y"), 0, NULL));
    add_output(&m, value_info("y", F32, 0, NULL));
    tj_graph_t* g = NULL;
    CHECK_OK(import(ctx, &m, &g));
    if (!g) continue;
    tj_value_t y = tj_graph_output_value(g, 0);
    int64_t dims[TJ_MAX_RANK];
    CHECK_EQ_INT(2, tj_graph_value_rank(g, y));
    tj_graph_value_dims(g, y, dims);
    CHECK_EQ_INT(out_dir ? 3 : 2, dims[0]);
    CHECK_EQ_INT(out_dir ? 2 : 3, dims[1]);
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
  pool_free();
}

TEST(scan_errors) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  // A symbolic sequence length.
  build_scan(&m, 0, 0, 0, true);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"scan\" (Scan, opset 16): input 1 (\"x\"): the "
               "sequence length (axis 1) is a symbolic dim; it must be static",
               import(ctx, &m, &g));
  // A direction that is neither 0 nor 1.
  build_scan(&m, 2, 0, 0, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "scan_input_directions[0] is 2 (0 forward, 1 reverse)",
               import(ctx, &m, &g));
  // An output axis outside the stacked rank.
  build_scan(&m, 0, 3, 0, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "scan output 0: axis 3 is outside rank 3", import(ctx, &m, &g));
  // num_scan_inputs missing, and too large.
  build_scan(&m, 0, 0, 0, false);
  m.nodes[0]->attribute[1] = attr_int("num_scan_inputs", 3);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "num_scan_inputs must be 1 to the 2 inputs",
               import(ctx, &m, &g));
  // An input axis list of the wrong length.
  build_scan(&m, 0, 0, 0, false);
  static const int64_t kTwoAxes[2] = {0, 1};
  m.nodes[0]->attribute[2] = attr_ints("scan_input_axes", 2, kTwoAxes);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "attribute scan_input_axes has 2 entries for 1 values",
               import(ctx, &m, &g));
  // Opset 9's attributes on opset 8's Scan, and the other way round.
  build_scan(&m, 0, 0, 0, false);
  m.opset.version = 8;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "attribute scan_input_axes is Scan 9's; opset 8's Scan takes "
               "directions",
               import(ctx, &m, &g));
  build_scan8(&m, 0, 0);
  m.opset.version = 9;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "attribute directions is Scan 8's; opset 9's Scan takes "
               "scan_input_directions",
               import(ctx, &m, &g));
  // Opset 8: sequence_lens shorter than the sequence.
  build_scan8(&m, 0, 3);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"scan8\" (Scan, opset 8): input 0 (sequence_lens, "
               "\"lens\") must be a constant equal to the sequence length 4 "
               "for every batch element",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

//===--- the other error paths ---===//

// Each remaining refusal of onnx_control.c, by code and message.
TEST(more_error_paths) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  model_t m;
  tj_graph_t* g = NULL;
  // If: a second input.
  build_if(&m, 1, false);
  m.nodes[0]->n_input = 2;
  m.nodes[0]->input = names(2, (const char* const[]){"cond", "x"});
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "(If, opset 13): 2 inputs; it takes the condition only",
               import(ctx, &m, &g));
  // If: a branch initializer with no name, a branch input with no name, a
  // declared dtype the library has no dtype for.
  build_if(&m, 1, false);
  Onnx__GraphProto* then_g = m.nodes[0]->attribute[0]->g;
  then_g->n_initializer = 1;
  then_g->initializer = zalloc(sizeof(void*));
  then_g->initializer[0] = scalar_f32("", 1);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "(If, opset 13): then_branch: initializer 0 has no name",
               import(ctx, &m, &g));
  build_if(&m, 1, false);
  m.nodes[0]->attribute[0]->g->output[0] =
      value_info("then_y", ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64, 1, kVec3);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "then_branch output 0 \"then_y\": dtype complex64 is not "
               "supported",
               import(ctx, &m, &g));
  // If on a run-time condition between shapes of symbolic dims.
  model_init(&m, 13);
  static const int64_t kSym[1] = {-1};
  add_input(&m, value_info("xa", F32, 1, kSym));
  add_input(&m, value_info("xb", F32, 1, kVec3));
  add_input(&m, value_info("cond", BOOL, 0, NULL));
  add_node(&m,
           NODE("If", "if", L("cond"), L("shape"), 2,
                attrs(2,
                      attr_graph("then_branch",
                                 subgraph("t", 1,
                                          NODES(NODE("Shape", "sa", L("xa"),
                                                     L("sa"), 0, NULL)),
                                          0, NULL, 1, INFOS(untyped("sa")))),
                      attr_graph("else_branch",
                                 subgraph("e", 1,
                                          NODES(NODE("Shape", "sb", L("xb"),
                                                     L("sb"), 0, NULL)),
                                          0, NULL, 1, INFOS(untyped("sb")))))));
  add_node(&m, NODE("Reshape", "r", L("xb", "shape"), L("y"), 0, NULL));
  add_output(&m, value_info("y", F32, 1, kVec3));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "output 0 is a shape with symbolic dims chosen by a condition "
               "known only at run time",
               import(ctx, &m, &g));
  // If on a symbolic dim (Shape -> Gather fold to a shape element known
  // only at run time).
  build_if(&m, -1, false);
  m.inputs[1] = value_info("xa", F32, 1, kSym);
  add_init(&m, scalar_i64("zero", 0));
  Onnx__NodeProto* if_node = m.nodes[0];
  m.graph.n_node = 0;
  add_node(&m, NODE("Shape", "sh", L("xa"), L("sh"), 0, NULL));
  add_node(&m, NODE("Gather", "g0", L("sh", "zero"), L("cond"), 0, NULL));
  add_node(&m, if_node);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 2 \"if\" (If, opset 13): the condition is a symbolic dim",
               import(ctx, &m, &g));
  // Subgraphs nested 34 deep (each an If on a known condition).
  model_init(&m, 13);
  add_input(&m, value_info("x", F32, 1, kVec3));
  add_init(&m, scalar_bool("cond", true));
  Onnx__GraphProto* inner = subgraph(
      "leaf", 1, NODES(NODE("Identity", "id", L("x"), L("leaf_y"), 0, NULL)), 0,
      NULL, 1, INFOS(untyped("leaf_y")));
  // The else branches share the leaf (both branches the inner graph would
  // double the model at each level).
  Onnx__GraphProto* leaf = inner;
  Onnx__NodeProto* outer = NULL;
  char* out = NULL;
  for (int d = 0; d < 34; ++d) {
    out = zalloc(16);
    snprintf(out, 16, "y%d", d);
    outer = node("If", "nest", 1, (const char* const[]){"cond"}, 1,
                 (const char* const[]){out}, 2,
                 attrs(2, attr_graph("then_branch", inner),
                       attr_graph("else_branch", leaf)));
    inner = subgraph("level", 1, NODES(outer), 0, NULL, 1, INFOS(untyped(out)));
  }
  add_node(&m, outer);
  add_output(&m, value_info(out, F32, 1, kVec3));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "subgraphs nest deeper than 32",
               import(ctx, &m, &g));
  // Loop: one input; a float trip count; an absent loop-carried value; more
  // outputs than the body gives; a body input with no name.
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->n_input = 1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "(Loop, opset 13): 1 inputs; it takes M, cond and the "
               "loop-carried values",
               import(ctx, &m, &g));
  build_loop(&m, 3, 0, -1);
  m.inits[0] = scalar_f32("M", 3);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "the trip count must be one int64",
               import(ctx, &m, &g));
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->input[2] = (char*)"";
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "loop-carried value 0 is absent",
               import(ctx, &m, &g));
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->n_output = 3;
  m.nodes[0]->output = names(3, (const char* const[]){"y", "ys", "extra"});
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "3 outputs for 1 loop-carried and 1 scan outputs",
               import(ctx, &m, &g));
  build_loop(&m, 3, 0, -1);
  m.nodes[0]->attribute[0]->g->input[0] = untyped("");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "the body input 0 has no name",
               import(ctx, &m, &g));
  // Loop: the body's condition computed from a graph input.
  build_loop(&m, 3, 1, -1);
  add_input(&m, value_info("limit", I64, 0, NULL));
  m.nodes[0]->attribute[0]->g->node[3] =
      NODE("Less", "lt", L("i", "limit"), L("c_out"), 0, NULL);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "the body's condition output (\"c_out\") is computed at run "
               "time in iteration 0",
               import(ctx, &m, &g));
  // Scan: an input axis outside the rank; an absent input; a body of
  // another arity; scan inputs of two lengths.
  build_scan(&m, 0, 0, 0, false);
  static const int64_t kFive[1] = {5};
  m.nodes[0]->attribute[2] = attr_ints("scan_input_axes", 1, kFive);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "scan input 0: axis 5 is outside rank 3", import(ctx, &m, &g));
  build_scan(&m, 0, 0, 0, false);
  m.nodes[0]->input[0] = (char*)"";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "(Scan, opset 16): input 0 is absent", import(ctx, &m, &g));
  build_scan(&m, 0, 0, 0, false);
  m.nodes[0]->attribute[0]->g->n_input = 1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "the body has 1 inputs and 2 outputs for 1 states and 1 scan "
               "inputs",
               import(ctx, &m, &g));
  build_scan(&m, 0, 0, 0, false);
  static const int64_t kOnes[2] = {1, 1}, kZeros[2] = {0, 0};
  m.nodes[0]->attribute[1] = attr_int("num_scan_inputs", 2);
  m.nodes[0]->attribute[2] = attr_ints("scan_input_axes", 2, kOnes);
  m.nodes[0]->attribute[3] = attr_ints("scan_input_directions", 2, kZeros);
  m.nodes[0]->attribute[4] = attr_ints("scan_output_axes", 2, kZeros);
  m.nodes[0]->attribute[5] = attr_ints("scan_output_directions", 2, kZeros);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "scan input 1 has sequence length 4; scan input 0 has 3",
               import(ctx, &m, &g));
  // Scan 8: a batch that differs between inputs; a bad direction.
  build_scan8(&m, 0, 0);
  static const int64_t kS3[2] = {3, 3};
  m.inputs[0] = value_info("s0", F32, 2, kS3);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "(Scan, opset 8): input 2 is 2 x 4",
               import(ctx, &m, &g));
  build_scan8(&m, 2, 0);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "directions[0] is 2 (0 forward, 1 reverse)",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

//===--- compiled for x86 ---===//

// The imported graphs compiled for x86 at every ISA tier (generic and
// specialized) against the reference interpreter, with no graph break:
// what control flow becomes (where, slices, reshapes, concats) is native.
static tj_graph_t* imported(tj_context_t* ctx, model_t* m) {
  tj_graph_t* g = NULL;
  CHECK_OK(import(ctx, m, &g));
  return g;
}
static tj_graph_t* if_graph(tj_context_t* ctx) {
  model_t m;
  build_if(&m, -1, false);
  return imported(ctx, &m);
}
static tj_graph_t* loop_graph(tj_context_t* ctx) {
  model_t m;
  build_loop(&m, 5, 1, -1);
  return imported(ctx, &m);
}
static tj_graph_t* loop0_graph(tj_context_t* ctx) {
  model_t m;
  build_loop(&m, 0, 0, -1);  // zero iterations: unused body nodes
  return imported(ctx, &m);
}
static tj_graph_t* scan_graph(tj_context_t* ctx) {
  model_t m;
  build_scan(&m, 1, -1, 1, false);
  return imported(ctx, &m);
}

TEST(compiled_every_tier) {
  const spec_t if_in[2] = {{TJ_DTYPE_F32, 1, {3}, -2, 2},
                           {TJ_DTYPE_BOOL, 0, {0}, 0, 1}};
  const spec_t if_out[1] = {{TJ_DTYPE_F32, 1, {3}, 0, 0}};
  check_ops("if", if_graph, 2, if_in, 1, if_out, 1e-6, NULL);
  const spec_t loop_in[2] = {{TJ_DTYPE_F32, 1, {3}, -2, 2},
                             {TJ_DTYPE_F32, 1, {3}, -2, 2}};
  const spec_t loop_out[2] = {{TJ_DTYPE_F32, 1, {3}, 0, 0},
                              {TJ_DTYPE_F32, 2, {5, 3}, 0, 0}};
  check_ops("loop", loop_graph, 2, loop_in, 2, loop_out, 1e-6, NULL);
  const spec_t loop0_out[2] = {{TJ_DTYPE_F32, 1, {3}, 0, 0},
                               {TJ_DTYPE_F32, 2, {0, 3}, 0, 0}};
  check_ops("loop0", loop0_graph, 2, loop_in, 2, loop0_out, 1e-6, NULL);
  const spec_t scan_in[2] = {{TJ_DTYPE_F32, 2, {2, 3}, -2, 2},
                             {TJ_DTYPE_F32, 3, {2, 4, 3}, -2, 2}};
  const spec_t scan_out[2] = {{TJ_DTYPE_F32, 2, {2, 3}, 0, 0},
                              {TJ_DTYPE_F32, 3, {2, 3, 4}, 0, 0}};
  check_ops("scan", scan_graph, 2, scan_in, 2, scan_out, 1e-6, NULL);
  pool_free();
}

//===--- allocation failures ---===//

static uint8_t* g_bytes[5];
static size_t g_sizes[5];
static int g_which;

static tj_status_t import_with(tj_allocator_t allocator) {
  tj_context_options_t options = tj_test_context_options();
  options.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&options, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_onnx_import(ctx, g_bytes[g_which], g_sizes[g_which], NULL, &g);
  if (s) CHECK(g == NULL);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

// Every allocation failure during the import of a Loop (scan outputs, a
// growing array of them), a while Loop, a Scan, an If on a run-time
// condition and an opset 8 Scan: OUT_OF_MEMORY each time, nothing leaked.
TEST(control_oom_sweep) {
  model_t a, b, c, d, e;
  build_loop(&a, 5, 1, -1);
  build_loop(&b, 0, 1, 4);
  build_scan(&c, 1, -1, 1, false);
  build_if(&d, -1, false);
  build_scan8(&e, 1, 4);
  model_t* models[5] = {&a, &b, &c, &d, &e};
  static const char* const kWhat[5] = {"loop", "while loop", "scan", "if",
                                       "scan8"};
  for (g_which = 0; g_which < 5; ++g_which) {
    g_bytes[g_which] = pack(models[g_which], &g_sizes[g_which]);
    CHECK(tj_test_oom_sweep(kWhat[g_which], import_with) > 10);
  }
  pool_free();
}

// onnxseq (issue 15): an If whose branches give sequences (resolved at
// import, onnx_sequence.c) takes the branch a known condition names, and
// its sequence output is one graph output per element; with a condition
// known only at run time it is an error saying the condition must be a
// constant.
static void build_if_sequence(model_t* m, int known) {
  model_init(m, 13);
  add_input(m, value_info("x", F32, 1, kVec3));
  if (known >= 0)
    add_init(m, scalar_bool("cond", known == 1));
  else
    add_input(m, value_info("cond", BOOL, 0, NULL));
  Onnx__GraphProto* then_g = subgraph(
      "then", 1,
      NODES(NODE("SequenceConstruct", "one", L("x"), L("then_s"), 0, NULL)), 0,
      NULL, 1, INFOS(untyped("then_s")));
  Onnx__GraphProto* else_g =
      subgraph("else", 1,
               NODES(NODE("SequenceConstruct", "two", L("x", "x"), L("else_s"),
                          0, NULL)),
               0, NULL, 1, INFOS(untyped("else_s")));
  add_node(m, NODE("If", "if", L("cond"), L("s"), 2,
                   attrs(2, attr_graph("then_branch", then_g),
                         attr_graph("else_branch", else_g))));
  add_output(m, untyped("s"));
}

TEST(if_sequence_output) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  float x[3] = {1, -2, 0.5f}, y[2][3];
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, kVec3);
  for (int known = 0; known < 2; ++known) {
    model_t m;
    build_if_sequence(&m, known);
    tj_graph_t* g = NULL;
    CHECK_OK(import(ctx, &m, &g));
    if (!g) continue;
    int32_t count = known ? 1 : 2;
    CHECK_EQ_INT(count, tj_graph_num_outputs(g));
    tj_tensor_t outs[2] = {tj_tensor_make(y[0], TJ_DTYPE_F32, 1, kVec3),
                           tj_tensor_make(y[1], TJ_DTYPE_F32, 1, kVec3)};
    CHECK_OK(tj_reference_run(g, &in, 1, outs, count));
    for (int32_t k = 0; k < count; ++k)
      for (int i = 0; i < 3; ++i) CHECK(y[k][i] == x[i]);
    tj_graph_destroy(g);
  }
  model_t m;
  build_if_sequence(&m, -1);
  tj_graph_t* g = NULL;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "node 0 \"if\" (If, opset 13): output 0 is a sequence or an "
               "optional, so input 0 (the condition, \"cond\") must be a "
               "constant",
               import(ctx, &m, &g));
  CHECK(g == NULL);
  tj_context_destroy(ctx);
  pool_free();
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(if_known_condition_takes_one_branch);
  RUN_TEST(if_runtime_condition_selects);
  RUN_TEST(if_errors);
  RUN_TEST(subgraph_scopes);
  RUN_TEST(loop_unrolled);
  RUN_TEST(loop_carried_known_values_grow);
  RUN_TEST(loop_errors);
  RUN_TEST(loop_running_sum);
  RUN_TEST(scan_axes_directions);
  RUN_TEST(scan_known_values_fold);
  RUN_TEST(scan8_batch_axis);
  RUN_TEST(scan_errors);
  RUN_TEST(more_error_paths);
  RUN_TEST(compiled_every_tier);
  RUN_TEST(control_oom_sweep);
  RUN_TEST(if_sequence_output);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
