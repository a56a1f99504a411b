// kir/lower.c as a library: lowering only reads the graph (its dim table
// is the same before and after, however many groups are lowered), the
// lowered kernel's own dims evaluate per run (params, a symbolic buffer
// offset, the argmax precondition), and no allocation outlives a failure
// (an OOM sweep). tests/lit/kir/ checks the kernels as text.

#include <string.h>

#include "backends/reference/reference_eval.h"
#include "kir/lower.h"
#include "lib/ir.h"
#include "lib/passes/pass.h"
#include "tensorjit.h"
#include "tests/unit/test.h"

// y = -concat(x, z) along S: two boxes, the second stored at 64*S.
static const char kConcat[] =
    "func @symbolic[B, S](%x: f32[B,S,64], %z: f32[B,S,64]) {\n"
    "  %2 = concat %x, %z {axis=1} : f32[B,2*S,64]\n"
    "  %3 = neg %2 : f32[B,2*S,64]\n"
    "  return %3 as \"y\"\n"
    "}\n";

static const char kArgmax[] =
    "func @argmax_rows[S](%x: f32[3,S]) {\n"
    "  %1 = argmax %x {axes=[1]} : i64[3]\n"
    "  return %1 as \"i\"\n"
    "}\n";

// ops (issue 15): gather_elements, gather_nd and a reduction over axes
// that are not one strided axis (the split reduced dim: coordinates by
// division, indexed loads).
static const char kIndexOps[] =
    "func @index_ops[B](%a: f32[B,6,5], %i: i64[B,4,5], %t: f32[B,4,6], "
    "%j: i32[B,2,1]) {\n"
    "  %4 = gather_elements %a, %i {axis=1} : f32[B,4,5]\n"
    "  %5 = exp %4 : f32[B,4,5]\n"
    "  %6 = gather_nd %t, %j {axis=1} : f32[B,2,6]\n"
    "  %7 = sum %a {axes=[0, 2]} : f32[6]\n"
    "  return %5 as \"y\", %6 as \"z\", %7 as \"s\"\n"
    "}\n";

// Parses |text| and runs the default pipeline (which fuses and plans).
static void make_plan(tj_context_t* context, const char* text,
                      tj_plan_t* plan) {
  tj_graph_t* graph = NULL;
  CHECK_OK(tj_graph_parse(context, text, strlen(text), "test", &graph));
  tj_plan_initialize(plan, graph);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, context);
  ctx.evaluate = tj_pass_reference_evaluator;
  CHECK_OK(tj_pipeline_default(&ctx, plan));
  CHECK(plan->fusion != NULL && plan->memplan != NULL);
}

// The first non-view group.
static uint32_t kernel_group(const tj_plan_t* plan) {
  for (uint32_t q = 0; q < plan->fusion->num_groups; ++q) {
    if (plan->fusion->groups[q].kind != TJ_GROUP_VIEW) return q;
  }
  CHECK(false);
  return 0;
}

TEST(graph_is_only_read) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, kConcat, &plan);
  const tj_graph_t* g = plan.graph;
  uint32_t exprs_before = g->dims.num_exprs;
  uint32_t q = kernel_group(&plan);
  tj_allocator_t al = tj_context_allocator(context);
  tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
  uint32_t made = 0;
  // Lower twice: the same kernels, and the graph's table never grows.
  for (int round = 0; round < 2; ++round) {
    CHECK_OK(tj_lower_group(g, plan.fusion, plan.memplan, q, NULL, al, "k", out,
                            TJ_LOWER_MAX_GROUP_KERNELS, &made));
    CHECK_EQ_INT(exprs_before, g->dims.num_exprs);
    CHECK_EQ_INT(2, made);
    // Box 1 stores at 64*S: a dim of the kernel's own table.
    const tj_lowered_kernel_t* b1 = &out[1];
    CHECK(b1->dims != NULL);
    uint32_t ob = b1->num_buffers - 1;
    CHECK(b1->buffer_offset_dims[ob] < 0);
    char text[64];
    tj_lowered_kernel_format_dim(b1, b1->buffer_offset_dims[ob], text,
                                 sizeof(text));
    CHECK_STREQ("64*S", text);
    int64_t sym[2] = {2, 3};  // B, S
    int64_t offset = -1;
    CHECK_OK(tj_lowered_kernel_buffer_offset(b1, ob, sym, &offset));
    CHECK_EQ_INT(192, offset);
    // Params $B, $e1 = 64*S, $e2 = 128*S.
    int64_t scalars[TJ_KIR_MAX_PARAMS];
    CHECK_EQ_INT(3, b1->num_params);
    CHECK_OK(tj_lowered_kernel_scalars(b1, g, sym, scalars));
    CHECK_EQ_INT(2, scalars[0]);
    CHECK_EQ_INT(192, scalars[1]);
    CHECK_EQ_INT(384, scalars[2]);
    // An unbound symbol is an error naming it.
    int64_t unbound[2] = {2, -1};
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "S",
                 tj_lowered_kernel_scalars(b1, g, unbound, scalars));
    for (uint32_t i = 0; i < made; ++i) tj_lowered_kernel_deinitialize(&out[i]);
  }
  // Specialized: constants only, no table.
  int64_t sym[2] = {2, 3};
  CHECK_OK(tj_lower_group(g, plan.fusion, plan.memplan, q, sym, al, "s", out,
                          TJ_LOWER_MAX_GROUP_KERNELS, &made));
  CHECK_EQ_INT(exprs_before, g->dims.num_exprs);
  CHECK_EQ_INT(2, made);
  CHECK(out[1].dims == NULL);
  CHECK_EQ_INT(0, out[1].num_params);
  CHECK_EQ_INT(192, out[1].buffer_offset_dims[out[1].num_buffers - 1]);
  for (uint32_t i = 0; i < made; ++i) tj_lowered_kernel_deinitialize(&out[i]);
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

TEST(argmax_precondition) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, kArgmax, &plan);
  tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
  uint32_t made = 0;
  CHECK_OK(tj_lower_group(plan.graph, plan.fusion, plan.memplan,
                          kernel_group(&plan), NULL,
                          tj_context_allocator(context), "k", out,
                          TJ_LOWER_MAX_GROUP_KERNELS, &made));
  CHECK_EQ_INT(1, made);
  int64_t scalars[TJ_KIR_MAX_PARAMS];
  int64_t five[1] = {5}, zero[1] = {0};
  CHECK_OK(tj_lowered_kernel_scalars(&out[0], plan.graph, five, scalars));
  CHECK_EQ_INT(5, scalars[0]);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "argmax (node %1): axis 1 of f32[3,0] is empty",
               tj_lowered_kernel_scalars(&out[0], plan.graph, zero, scalars));
  tj_lowered_kernel_deinitialize(&out[0]);
  tj_lowered_kernel_deinitialize(&out[0]);  // idempotent
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

// Every allocation of the lowering fails in turn: OUT_OF_MEMORY, nothing
// left in |out|, nothing leaked.
TEST(oom_sweep) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, kConcat, &plan);
  uint32_t q = kernel_group(&plan);
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
    uint32_t made = 7;
    tj_status_t s = tj_lower_group(plan.graph, plan.fusion, plan.memplan, q,
                                   NULL, tj_test_allocator_get(&t), "k", out,
                                   TJ_LOWER_MAX_GROUP_KERNELS, &made);
    if (!s) {
      CHECK_EQ_INT(2, made);
      for (uint32_t i = 0; i < made; ++i) {
        tj_lowered_kernel_deinitialize(&out[i]);
      }
    }
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (!s) {
      CHECK(fail_at > 5);
      break;
    }
    CHECK_EQ_INT(0, made);
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
  }
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

// The same for every kernel group of kIndexOps.
TEST(oom_sweep_index_ops) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_plan_t plan;
  make_plan(context, kIndexOps, &plan);
  int groups = 0;
  for (uint32_t q = 0; q < plan.fusion->num_groups; ++q) {
    if (plan.fusion->groups[q].kind == TJ_GROUP_VIEW) continue;
    ++groups;
    for (long fail_at = 0;; ++fail_at) {
      tj_test_allocator_t t;
      tj_test_allocator_initialize(&t, fail_at);
      tj_lowered_kernel_t out[TJ_LOWER_MAX_GROUP_KERNELS];
      uint32_t made = 7;
      tj_status_t s = tj_lower_group(plan.graph, plan.fusion, plan.memplan, q,
                                     NULL, tj_test_allocator_get(&t), "k", out,
                                     TJ_LOWER_MAX_GROUP_KERNELS, &made);
      if (!s) {
        CHECK_EQ_INT(1, made);
        for (uint32_t i = 0; i < made; ++i) {
          tj_lowered_kernel_deinitialize(&out[i]);
        }
      }
      CHECK_EQ_INT(0, t.live_blocks);
      CHECK_EQ_INT(0, t.bad_frees);
      if (!s) {
        CHECK(fail_at > 5);
        break;
      }
      CHECK_EQ_INT(0, made);
      bool oom = tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY;
      if (!oom) fprintf(stderr, "  group %u: %s\n", q, tj_status_message(s));
      CHECK(oom);
      tj_status_free(s);
      if (!oom) break;
    }
  }
  CHECK_EQ_INT(3, groups);
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

// Two equal groups, t = a + transpose(b) (each read by a matmul, so
// written out), whose copy (kir/lower_reuse.c) must make lowering's
// in-place check: where the memory plan (edited here; none chooses so)
// writes the copy's output in place of the input read transposed, the
// copy is refused (UNSUPPORTED) as lowering refuses (INTERNAL); in place
// of the input read at the output's index, it copies.
static const char kTwinGroups[] =
    "func @twins(%a: f32[4,4], %b: f32[4,4], %c: f32[4,4], %d: f32[4,4]) {\n"
    "  %4 = transpose %b {perm=[1,0]} : f32[4,4]\n"
    "  %5 = add %a, %4 : f32[4,4]\n"
    "  %6 = matmul %5, %5 : f32[4,4]\n"
    "  %7 = transpose %d {perm=[1,0]} : f32[4,4]\n"
    "  %8 = add %c, %7 : f32[4,4]\n"
    "  %9 = matmul %8, %8 : f32[4,4]\n"
    "  return %6 as \"y\", %9 as \"z\"\n"
    "}\n";

TEST(copy_checks_in_place) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_allocator_t al = tj_context_allocator(context);
  tj_plan_t plan;
  make_plan(context, kTwinGroups, &plan);
  const tj_fusion_t* fu = plan.fusion;
  uint32_t gp = UINT32_MAX, gq = UINT32_MAX;  // the groups writing %5, %8
  for (uint32_t q = 0; q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      if (grp->outputs[k] == 5) gp = q;
      if (grp->outputs[k] == 8) gq = q;
    }
  }
  CHECK(gp != UINT32_MAX && gq != UINT32_MAX && gp != gq);
  if (gp == UINT32_MAX || gq == UINT32_MAX) return;
  CHECK(tj_lower_group_same(plan.graph, fu, gp, gq));
  CHECK_EQ_INT((int)tj_lower_group_hash(plan.graph, fu, gp),
               (int)tj_lower_group_hash(plan.graph, fu, gq));
  tj_lowered_kernel_t src[TJ_LOWER_MAX_GROUP_KERNELS];
  tj_lowered_kernel_t dst[TJ_LOWER_MAX_GROUP_KERNELS];
  uint32_t made = 0;
  CHECK_OK(tj_lower_group(plan.graph, fu, plan.memplan, gp, NULL, al, "p", src,
                          TJ_LOWER_MAX_GROUP_KERNELS, &made));
  CHECK_EQ_INT(1, made);
  uint32_t bi = plan.memplan->buffer_of[8];
  CHECK(bi != UINT32_MAX);
  if (bi == UINT32_MAX) return;
  uint32_t was = plan.memplan->buffers[bi].in_place_of;
  // %8 in place of %d, which the kernel reads transposed.
  plan.memplan->buffers[bi].in_place_of = 3;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED,
               "kernel @p: an output in place of an input read at another "
               "index",
               tj_lower_group_copy(plan.graph, fu, plan.memplan, gp, gq, "p",
                                   "q", src, made, dst));
  uint32_t got = 0;
  tj_status_t s = tj_lower_group(plan.graph, fu, plan.memplan, gq, NULL, al,
                                 "q", dst, TJ_LOWER_MAX_GROUP_KERNELS, &got);
  CHECK_EQ_INT(TJ_STATUS_INTERNAL, tj_status_code(s));
  tj_status_free(s);
  // In place of %c, read at the output's index: copied, the same code.
  plan.memplan->buffers[bi].in_place_of = 2;
  CHECK_OK(tj_lower_group_copy(plan.graph, fu, plan.memplan, gp, gq, "p", "q",
                               src, made, dst));
  CHECK(tj_kir_same_code(src[0].kernel, dst[0].kernel));
  bool reads_c = false;
  for (uint32_t b = 0; b < dst[0].num_buffers; ++b)
    reads_c |= dst[0].buffer_nodes[b] == 2;
  CHECK(reads_c);
  tj_lowered_kernel_t lowered[TJ_LOWER_MAX_GROUP_KERNELS];
  CHECK_OK(tj_lower_group(plan.graph, fu, plan.memplan, gq, NULL, al, "q",
                          lowered, TJ_LOWER_MAX_GROUP_KERNELS, &got));
  CHECK_EQ_INT(1, got);
  CHECK(memcmp(lowered[0].buffer_nodes, dst[0].buffer_nodes,
               sizeof(uint32_t) * lowered[0].num_buffers) == 0);
  tj_lowered_kernel_deinitialize(&lowered[0]);
  tj_lowered_kernel_deinitialize(&dst[0]);
  tj_lowered_kernel_deinitialize(&src[0]);
  plan.memplan->buffers[bi].in_place_of = was;
  tj_plan_deinitialize(&plan);
  tj_context_destroy(context);
}

int main(void) {
  RUN_TEST(graph_is_only_read);
  RUN_TEST(argmax_precondition);
  RUN_TEST(oom_sweep);
  RUN_TEST(oom_sweep_index_ops);
  RUN_TEST(copy_checks_in_place);
  TEST_MAIN_END();
}
