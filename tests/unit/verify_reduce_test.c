// tj-reduce's core (tools/tj-reduce.c, compiled in here): a wrong kernel
// planted behind the predicate (every maximum computes a minimum, through
// tj_verify_test_compile_planted) makes a 41-node graph fail tj_verify; the
// reducer shrinks it to at most 5 nodes that still fail, the maximum among
// them, and shrinks the symbol. Without the planted kernel the graph does
// not fail and is refused.

#define TJ_REDUCE_NO_MAIN
#include "tools/tj-reduce.c"
#include "tests/unit/test.h"

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

TEST(planted_bug_is_reduced_to_a_few_nodes) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? big_graph(ctx) : NULL;
  if (!g) {
    tj_context_destroy(ctx);
    return;
  }
  CHECK_EQ_INT(41, g->num_nodes);
  char* names[1] = {(char*)"B"};
  int64_t values[1] = {16};
  tj_reduce_t r;
  memset(&r, 0, sizeof(r));
  r.target = TJ_TARGET_X86;
  r.seed = 1;
  r.edge_values = true;
  r.num_syms = 1;
  r.names = names;
  r.values = values;
  r.compile = planted_compile;
  CHECK_OK(tj_reduce(&r, &g));
  CHECK(g->num_nodes <= 5);
  bool has_max = false;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    has_max |= g->nodes[i].op == TJ_OP_MAXIMUM;
  }
  CHECK(has_max);
  CHECK_EQ_INT(1, values[0]);
  // The reduced graph still fails, and only because of the planted kernel.
  CHECK(interesting(&r, g));
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
  tj_reduce_t r;
  memset(&r, 0, sizeof(r));
  r.target = TJ_TARGET_X86;
  r.seed = 1;
  r.num_syms = 1;
  r.names = names;
  r.values = values;
  if (g) {
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                 "does not fail the predicate to begin with",
                 tj_reduce(&r, &g));
    CHECK_EQ_INT(41, g->num_nodes);
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(void) {
  RUN_TEST(planted_bug_is_reduced_to_a_few_nodes);
  RUN_TEST(a_graph_that_does_not_fail_is_refused);
  TEST_MAIN_END();
}
