// tj-reduce's core (tools/tj-reduce.c, compiled in here): a wrong kernel
// planted behind the predicate (every maximum computes a minimum, through
// tj_verify_test_compile_planted) makes a generated 100-node graph (three
// outputs, one maximum among 97 ops) fail tj_verify; the reducer shrinks
// it to the maximum and its two operands made inputs, one output, the
// symbol shrunk to 1 and the concrete dims halved down to 1, in a bounded
// number of predicate calls. Without the planted kernel the reduced graph
// does not fail, and the original is refused. The --error and --crash
// predicates (a planted compile failure, a planted kill of the child)
// reduce the 41-node graph to the failing op.

#define TJ_REDUCE_NO_MAIN
#include "tools/tj-reduce.c"
#include "tests/unit/verify_util.h"

static const char kBig[] =
    "func @big[B](%x: f32[B,8], %y: f32[B,8], %w: f32[8,8]) {\n"
    "  %v0 = exp %x : f32[B,8]\n"
    "  %v1 = add %v0, %y : f32[B,8]\n"
    "  %v2 = matmul %v1, %w : f32[B,8]\n"
    "  %v3 = neg %v2 : f32[B,8]\n"
    "  %v4 = mul %v3, %v2 : f32[B,8]\n"
    "  %v5 = sigmoid %v4 : f32[B,8]\n"
    "  %v6 = sub %v5, %x : f32[B,8]\n"
    "  %v7 = exp %v6 : f32[B,8]\n"
    "  %v8 = add %v7, %y : f32[B,8]\n"
    "  %v9 = matmul %v8, %w : f32[B,8]\n"
    "  %v10 = neg %v9 : f32[B,8]\n"
    "  %v11 = mul %v10, %v9 : f32[B,8]\n"
    "  %v12 = sigmoid %v11 : f32[B,8]\n"
    "  %v13 = sub %v12, %x : f32[B,8]\n"
    "  %v14 = exp %v13 : f32[B,8]\n"
    "  %v15 = add %v14, %y : f32[B,8]\n"
    "  %v16 = matmul %v15, %w : f32[B,8]\n"
    "  %v17 = neg %v16 : f32[B,8]\n"
    "  %v18 = mul %v17, %v16 : f32[B,8]\n"
    "  %v19 = sigmoid %v18 : f32[B,8]\n"
    "  %v20 = sub %v19, %x : f32[B,8]\n"
    "  %v21 = exp %v20 : f32[B,8]\n"
    "  %v22 = add %v21, %y : f32[B,8]\n"
    "  %v23 = maximum %v22, %v5 : f32[B,8]\n"
    "  %v24 = neg %v23 : f32[B,8]\n"
    "  %v25 = mul %v24, %v23 : f32[B,8]\n"
    "  %v26 = sigmoid %v25 : f32[B,8]\n"
    "  %v27 = sub %v26, %x : f32[B,8]\n"
    "  %v28 = exp %v27 : f32[B,8]\n"
    "  %v29 = add %v28, %y : f32[B,8]\n"
    "  %v30 = matmul %v29, %w : f32[B,8]\n"
    "  %v31 = neg %v30 : f32[B,8]\n"
    "  %v32 = mul %v31, %v30 : f32[B,8]\n"
    "  %v33 = sigmoid %v32 : f32[B,8]\n"
    "  %v34 = sub %v33, %x : f32[B,8]\n"
    "  %v35 = exp %v34 : f32[B,8]\n"
    "  %v36 = add %v35, %y : f32[B,8]\n"
    "  %v37 = matmul %v36, %w : f32[B,8]\n"
    "  return %v37 as \"out\", %v10 as \"side\"\n"
    "}\n";

static tj_status_t planted_compile(void* user, const tj_graph_t* graph,
                                   const tj_compile_options_t* options,
                                   tj_executable_t** out) {
  (void)user;
  return tj_verify_test_compile_planted(graph, options,
                                        TJ_VERIFY_PLANT_EVERY_GROUP,
                                        TJ_OP_MAXIMUM, TJ_OP_MINIMUM, out);
}

static tj_graph_t* big_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  tj_status_t st = tj_graph_parse(ctx, kBig, strlen(kBig), "big.tj", &g);
  CHECK_OK(st);
  return g;
}

enum { kOps = 97, kPlantedAt = 61 };

// func @hundred[B](%x: f32[B,8], %y: f32[B,8], %w: f32[8,8]): 97 ops, a
// cycle of exp, add, matmul, neg, mul, sigmoid, sub (bounded values), the
// maximum of op kPlantedAt with op 5 planted among them; outputs the last
// op, op 10 and op 80. 100 nodes. malloc'd.
static char* hundred_text(void) {
  size_t cap = 16384, n = 0;
  char* t = malloc(cap);
  if (!t) return NULL;
  n += (size_t)snprintf(t + n, cap - n,
                        "func @hundred[B](%%x: f32[B,8], %%y: f32[B,8], "
                        "%%w: f32[8,8]) {\n");
  for (int i = 0; i < kOps; ++i) {
    char prev[16];
    if (i == 0) {
      snprintf(prev, sizeof(prev), "%%x");
    } else {
      snprintf(prev, sizeof(prev), "%%v%d", i - 1);
    }
    if (i == kPlantedAt) {
      n += (size_t)snprintf(t + n, cap - n,
                            "  %%v%d = maximum %s, %%v5 : f32[B,8]\n", i, prev);
      continue;
    }
    switch (i % 7) {
      case 0:
        n += (size_t)snprintf(t + n, cap - n, "  %%v%d = exp %s : f32[B,8]\n",
                              i, prev);
        break;
      case 1:
        n += (size_t)snprintf(t + n, cap - n,
                              "  %%v%d = add %s, %%y : f32[B,8]\n", i, prev);
        break;
      case 2:
        n += (size_t)snprintf(t + n, cap - n,
                              "  %%v%d = matmul %s, %%w : f32[B,8]\n", i, prev);
        break;
      case 3:
        n += (size_t)snprintf(t + n, cap - n, "  %%v%d = neg %s : f32[B,8]\n",
                              i, prev);
        break;
      case 4:
        n += (size_t)snprintf(t + n, cap - n,
                              "  %%v%d = mul %s, %%v%d : f32[B,8]\n", i, prev,
                              i - 2);
        break;
      case 5:
        n += (size_t)snprintf(t + n, cap - n,
                              "  %%v%d = sigmoid %s : f32[B,8]\n", i, prev);
        break;
      default:
        n += (size_t)snprintf(t + n, cap - n,
                              "  %%v%d = sub %s, %%x : f32[B,8]\n", i, prev);
        break;
    }
  }
  snprintf(t + n, cap - n,
           "  return %%v%d as \"out\", %%v10 as \"side\", %%v80 as "
           "\"late\"\n}\n",
           kOps - 1);
  return t;
}

static tj_graph_t* hundred_graph(tj_context_t* ctx) {
  char* text = hundred_text();
  tj_graph_t* g = NULL;
  if (text) CHECK_OK(tj_graph_parse(ctx, text, strlen(text), "hundred.tj", &g));
  free(text);
  return g;
}

// A reducer for |target| with the random inputs of seed 1 and the one
// symbol B (|names|, |values|: shrunk in place).
static tj_reduce_t reducer(tj_target_t target, char** names, int64_t* values) {
  tj_reduce_t r;
  memset(&r, 0, sizeof(r));
  r.target = target;
  r.seed = 1;
  r.num_syms = 1;
  r.names = names;
  r.values = values;
  return r;
}

TEST(planted_bug_in_100_nodes_is_reduced_to_the_planted_node) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? hundred_graph(ctx) : NULL;
  if (!g) {
    tj_context_destroy(ctx);
    return;
  }
  CHECK_EQ_INT(100, g->num_nodes);
  char* names[1] = {(char*)"B"};
  int64_t values[1] = {16};
  tj_reduce_t r = reducer(TJ_TARGET_X86, names, values);
  r.edge_values = true;
  r.compile = planted_compile;
  CHECK_OK(tj_reduce(&r, &g));
  // The planted node alone: a maximum of two inputs (its operands cut, or
  // one input read twice), every dim 1.
  CHECK(g->num_nodes <= 3);
  CHECK_EQ_INT(1, g->num_outputs);
  int maxima = 0, others = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_MAXIMUM) {
      ++maxima;
    } else if (n->op != TJ_OP_INPUT) {
      ++others;
    }
  }
  CHECK_EQ_INT(1, maxima);
  CHECK_EQ_INT(0, others);
  CHECK_EQ_INT(1, values[0]);
  char* typed = NULL;
  CHECK_OK(tj_graph_print(g, &typed));
  CHECK(typed && strstr(typed, "f32[B,1]") && !strstr(typed, "8]"));
  tj_context_free_string(ctx, typed);
  // A bounded number of predicate calls (each a compile and a check): the
  // test's time budget on a slow machine.
  CHECK(r.tests <= 200);
  // The reduced graph still fails, and only because of the planted kernel.
  CHECK(interesting(&r, g));
  // On the inputs tj-reduce writes beside it (random, of the seed and the
  // shrunk symbols), given to tj_verify as tj-run --inputs gives them.
  {
    int64_t sym[TJ_MAX_SYMBOLS];
    tj_verify_tensors_t in;
    memset(&in, 0, sizeof(in));
    in.allocator = tj_context_allocator(ctx);
    CHECK_OK(
        tj_verify_bind_names(g, 1, (const char* const*)names, values, sym));
    CHECK_OK(
        tj_verify_random_inputs(g, sym, r.seed, r.edge_values, false, &in));
    tj_compile_options_t co;
    tj_compile_options_initialize(&co);
    tj_executable_t* exe = NULL;
    CHECK_OK(planted_compile(NULL, g, &co, &exe));
    tj_verify_report_t* rep = NULL;
    if (exe) CHECK_OK(tj_verify(exe, g, in.tensors, in.count, NULL, &rep));
    if (rep) CHECK(verdict_fails(rep->verdict));
    tj_verify_report_destroy(rep);
    tj_executable_release(exe);
    tj_verify_tensors_deinitialize(&in);
  }
  r.compile = NULL;
  CHECK(!interesting(&r, g));
  char* text = NULL;
  CHECK_OK(tj_graph_print(g, &text));
  printf("# reduced to %u nodes in %lld tests:\n%s", g->num_nodes,
         (long long)r.tests, text ? text : "");
  tj_context_free_string(ctx, text);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(a_graph_that_does_not_fail_is_refused) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? big_graph(ctx) : NULL;
  char* names[1] = {(char*)"B"};
  int64_t values[1] = {4};
  tj_reduce_t r = reducer(TJ_TARGET_X86, names, values);
  if (g) {
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                 "does not fail the predicate to begin with",
                 tj_reduce(&r, &g));
    CHECK_EQ_INT(41, g->num_nodes);
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// The planted failure of the error and crash modes: a graph with a sigmoid
// fails to compile (UNSUPPORTED), or, with |user| set, kills the process
// compiling it (tj-reduce's child; SIGKILL leaves no core file).
static tj_status_t sigmoid_fails(void* user, const tj_graph_t* graph,
                                 const tj_compile_options_t* options,
                                 tj_executable_t** out) {
  for (uint32_t i = 0; i < graph->num_nodes; ++i) {
    if (graph->nodes[i].op != TJ_OP_SIGMOID) continue;
    if (user) raise(SIGKILL);
    return tj_unsupported("planted: sigmoid %%%u", i);
  }
  return tj_compile(graph, options, out);
}

// --error and --crash: the 41-node graph (five sigmoids among its ops)
// shrinks to one sigmoid of one input, one output, the symbol 1.
TEST(error_and_crash_modes_reduce_to_the_failing_op) {
  static const reduce_mode_t kModes[2] = {REDUCE_ERROR, REDUCE_CRASH};
  for (int m = 0; m < 2; ++m) {
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    tj_graph_t* g = ctx ? big_graph(ctx) : NULL;
    char* names[1] = {(char*)"B"};
    int64_t values[1] = {4};
    tj_reduce_t r = reducer(TJ_TARGET_REFERENCE, names, values);
    r.mode = kModes[m];
    r.compile = sigmoid_fails;
    r.compile_user = r.mode == REDUCE_CRASH ? (void*)&r : NULL;
    if (g) CHECK_OK(tj_reduce(&r, &g));
    if (r.mode == REDUCE_ERROR) {
      CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED, r.error_code);
    }
    int sigmoids = 0, others = 0;
    for (uint32_t i = 0; g && i < g->num_nodes; ++i) {
      tj_op_t op = g->nodes[i].op;
      sigmoids += op == TJ_OP_SIGMOID;
      others += op != TJ_OP_SIGMOID && op != TJ_OP_INPUT;
    }
    CHECK_EQ_INT(1, sigmoids);
    CHECK_EQ_INT(0, others);
    if (g) CHECK_EQ_INT(2, g->num_nodes);
    if (g) CHECK_EQ_INT(1, g->num_outputs);
    CHECK_EQ_INT(1, values[0]);
    CHECK(r.tests <= 200);
    // Without the planted failure the reduced graph compiles and runs.
    r.compile = NULL;
    if (g) CHECK(!interesting(&r, g));
    printf("# %s: %u nodes in %lld tests\n",
           r.mode == REDUCE_ERROR ? "--error" : "--crash", g ? g->num_nodes : 0,
           (long long)r.tests);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

int main(void) {
  RUN_TEST(planted_bug_in_100_nodes_is_reduced_to_the_planted_node);
  RUN_TEST(a_graph_that_does_not_fail_is_refused);
  RUN_TEST(error_and_crash_modes_reduce_to_the_failing_op);
  TEST_MAIN_END();
}
