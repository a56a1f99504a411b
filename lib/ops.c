// The op table, generated from lib/ops.def so that the enum in lib/ir.h and
// every per-op fact here can never disagree.

#include <string.h>

#include "lib/ir.h"

const tj_op_info_t tj_op_infos[TJ_OP_COUNT_] = {
#define TJ_OP(name, text, arity, kind, attrs) \
  {text, arity, TJ_OP_KIND_##kind, TJ_ATTR_KIND_##attrs},
#include "lib/ops.def"
#undef TJ_OP
};

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
