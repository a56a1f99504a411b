// lib/ops.def and lib/ops.c: the rules between the table's columns that the
// passes, the lowering and the emitters rely on when they read a column
// instead of a list, and the public query (tj_op_count and friends).

#include <string.h>

#include "lib/ir.h"
#include "tests/unit/test.h"

static bool is_pointwise_kind(tj_op_kind_t kind) {
  return kind == TJ_OP_KIND_UNARY || kind == TJ_OP_KIND_BINARY ||
         kind == TJ_OP_KIND_TERNARY;
}

TEST(names_round_trip) {
  for (int i = 0; i < TJ_OP_COUNT_; ++i) {
    const tj_op_info_t* info = tj_op_info((tj_op_t)i);
    CHECK(info->name[0] != '\0');
    CHECK(info->builder[0] != '\0');
    tj_op_t op;
    CHECK(tj_op_from_name(info->name, strlen(info->name), &op));
    CHECK_EQ_INT(i, (int)op);
  }
}

// Fusion maps patterns to its classes, and memplan and the lowering use
// kinds: the two must agree outside the composites.
TEST(pattern_agrees_with_kind) {
  for (int i = 0; i < TJ_OP_COUNT_; ++i) {
    const tj_op_info_t* info = tj_op_info((tj_op_t)i);
    tj_op_pattern_t p = info->pattern;
    if (info->kind == TJ_OP_KIND_COMPOSITE) {
      // infer.c and the reference treat these as unary.
      if (p == TJ_OP_PATTERN_ELEMENTWISE) CHECK_EQ_INT(1, info->arity);
      continue;
    }
    CHECK_EQ_INT(is_pointwise_kind(info->kind), p == TJ_OP_PATTERN_ELEMENTWISE);
    CHECK_EQ_INT(info->kind == TJ_OP_KIND_LEAF,
                 p == TJ_OP_PATTERN_EXTERNAL || p == TJ_OP_PATTERN_GENERATOR);
    if (p == TJ_OP_PATTERN_REDUCE) {
      CHECK_EQ_INT(TJ_OP_KIND_REDUCTION, info->kind);
    }
    if (p == TJ_OP_PATTERN_INJECTIVE) {
      CHECK_EQ_INT(TJ_OP_KIND_MOVEMENT, info->kind);
    }
    if (p == TJ_OP_PATTERN_CONTRACTION) {
      CHECK_EQ_INT(TJ_OP_KIND_CONTRACTION, info->kind);
    }
  }
  CHECK_EQ_INT(TJ_OP_PATTERN_OPAQUE, tj_op_info(TJ_OP_ARGMAX)->pattern);
  CHECK_EQ_INT(TJ_OP_PATTERN_INJECTIVE, tj_op_info(TJ_OP_GATHER)->pattern);
  CHECK_EQ_INT(TJ_OP_PATTERN_REDUCE, tj_op_info(TJ_OP_SOFTMAX)->pattern);
  CHECK_EQ_INT(TJ_OP_PATTERN_CONTRACTION, tj_op_info(TJ_OP_LINEAR)->pattern);
}

TEST(flags_are_consistent) {
  for (int i = 0; i < TJ_OP_COUNT_; ++i) {
    tj_op_t op = (tj_op_t)i;
    const tj_op_info_t* info = tj_op_info(op);
    if (tj_op_has(op, TJ_OPF_TRANSCENDENTAL)) {
      CHECK(tj_op_has(op, TJ_OPF_EXPENSIVE));
      CHECK_EQ_INT(TJ_OP_DTYPES_FLOAT, info->dtypes);
    }
    if (tj_op_has(op, TJ_OPF_EXPENSIVE)) {
      CHECK(is_pointwise_kind(info->kind));
    }
    if (tj_op_has(op, TJ_OPF_BOOL_RESULT)) {
      CHECK(info->kind == TJ_OP_KIND_UNARY || info->kind == TJ_OP_KIND_BINARY);
    }
    // partition: what reads its operands from memory is materialized.
    if (tj_op_has(op, TJ_OPF_MEMORY_OPERANDS)) {
      CHECK(info->pattern == TJ_OP_PATTERN_CONTRACTION ||
            info->pattern == TJ_OP_PATTERN_INJECTIVE ||
            info->pattern == TJ_OP_PATTERN_OPAQUE);
    }
  }
  CHECK(tj_op_has(TJ_OP_EXP, TJ_OPF_EXPENSIVE | TJ_OPF_TRANSCENDENTAL));
  CHECK(tj_op_has(TJ_OP_DIV, TJ_OPF_EXPENSIVE));
  CHECK(!tj_op_has(TJ_OP_DIV, TJ_OPF_TRANSCENDENTAL));
  CHECK(!tj_op_has(TJ_OP_ADD, TJ_OPF_EXPENSIVE));
  CHECK(tj_op_has(TJ_OP_ISNAN, TJ_OPF_BOOL_RESULT));
  CHECK(tj_op_has(TJ_OP_CAST, TJ_OPF_TYPED));
  CHECK(!tj_op_has(TJ_OP_NOT, TJ_OPF_BOOL_RESULT));
  CHECK(tj_op_has(TJ_OP_ADD, 0));
}

// The builders of a shared form are defined from the table (lib/graph.c):
// their signatures follow from arity, kind and attributes.
TEST(forms_match_signatures) {
  for (int i = 0; i < TJ_OP_COUNT_; ++i) {
    tj_op_t op = (tj_op_t)i;
    const tj_op_info_t* info = tj_op_info(op);
    switch (info->form) {
      case TJ_OP_FORM_UNARY:
      case TJ_OP_FORM_BINARY:
        CHECK_EQ_INT(info->form == TJ_OP_FORM_UNARY ? 1 : 2, info->arity);
        CHECK_EQ_INT(TJ_ATTR_KIND_NONE, info->attr_kind);
        CHECK(!tj_op_has(op, TJ_OPF_TYPED));
        break;
      case TJ_OP_FORM_REDUCE:
        CHECK_EQ_INT(TJ_OP_KIND_REDUCTION, info->kind);
        CHECK_EQ_INT(TJ_ATTR_KIND_AXES, info->attr_kind);
        break;
      case TJ_OP_FORM_OWN:
        break;
    }
  }
  CHECK_STREQ("logical_not", tj_op_info(TJ_OP_NOT)->builder);
  CHECK_EQ_INT(TJ_OP_FORM_OWN, tj_op_info(TJ_OP_ARGMAX)->form);
}

TEST(public_query) {
  CHECK_EQ_INT(TJ_OP_COUNT_, tj_op_count());
  for (int32_t i = 0; i < tj_op_count(); ++i) {
    CHECK_STREQ(tj_op_infos[i].name, tj_op_name(i));
    CHECK_STREQ(tj_op_infos[i].builder, tj_op_builder(i));
    CHECK_EQ_INT(tj_op_infos[i].form, tj_op_form(i));
  }
  CHECK(tj_op_name(-1) == NULL);
  CHECK(tj_op_name(TJ_OP_COUNT_) == NULL);
  CHECK(tj_op_builder(TJ_OP_COUNT_) == NULL);
  CHECK_EQ_INT(TJ_OP_FORM_OWN, tj_op_form(-1));
}

int main(void) {
  RUN_TEST(names_round_trip);
  RUN_TEST(pattern_agrees_with_kind);
  RUN_TEST(flags_are_consistent);
  RUN_TEST(forms_match_signatures);
  RUN_TEST(public_query);
  TEST_MAIN_END();
}
