// The op table, generated from lib/ops.def so that the enum in lib/ir.h and
// every per-op fact here can never disagree.

#include <string.h>

#include "lib/ir.h"

// The short flag names of lib/ops.def's FLAGS column, for this table only.
#define EXPENSIVE TJ_OPF_EXPENSIVE
#define TRANSCENDENTAL TJ_OPF_TRANSCENDENTAL
#define BOOL_RESULT TJ_OPF_BOOL_RESULT
#define TYPED TJ_OPF_TYPED
#define MEMORY_OPERANDS TJ_OPF_MEMORY_OPERANDS

const tj_op_info_t tj_op_infos[TJ_OP_COUNT_] = {
#define TJ_OP(name, text, arity, kind, attrs, dtypes, pattern, form, builder, \
              flags)                                                          \
  {text,                                                                      \
   arity,                                                                     \
   TJ_OP_KIND_##kind,                                                         \
   TJ_ATTR_KIND_##attrs,                                                      \
   TJ_OP_DTYPES_##dtypes,                                                     \
   TJ_OP_PATTERN_##pattern,                                                   \
   TJ_OP_FORM_##form,                                                         \
   #builder,                                                                  \
   (uint32_t)(flags)},
#include "lib/ops.def"
#undef TJ_OP
};

#undef EXPENSIVE
#undef TRANSCENDENTAL
#undef BOOL_RESULT
#undef TYPED
#undef MEMORY_OPERANDS

// A linear scan: ~60 short names, and only the parser calls it.
bool tj_op_from_name(const char* name, size_t length, tj_op_t* out_op) {
  for (int op = 0; op < TJ_OP_COUNT_; ++op) {
    const char* text = tj_op_infos[op].name;
    if (strlen(text) == length && memcmp(text, name, length) == 0) {
      *out_op = (tj_op_t)op;
      return true;
    }
  }
  return false;
}

//===--- the public query (tensorjit/tj_graph.h) ---===//

int32_t tj_op_count(void) { return TJ_OP_COUNT_; }

const char* tj_op_name(int32_t op) {
  return op >= 0 && op < TJ_OP_COUNT_ ? tj_op_infos[op].name : NULL;
}

const char* tj_op_builder(int32_t op) {
  return op >= 0 && op < TJ_OP_COUNT_ ? tj_op_infos[op].builder : NULL;
}

tj_op_form_t tj_op_form(int32_t op) {
  return op >= 0 && op < TJ_OP_COUNT_ ? tj_op_infos[op].form : TJ_OP_FORM_OWN;
}
