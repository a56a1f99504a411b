// Internal view of the vector-Jacobian rules of lib/autodiff.c, for tests
// and tools: which ops gradients flow through, and each rule's formula.

#ifndef TJ_LIB_AUTODIFF_H_
#define TJ_LIB_AUTODIFF_H_

#include "lib/ir.h"

// Whether a gradient flows through |op| (to at least one operand).
bool tj_autodiff_op_differentiable(tj_op_t op);

// The rule of |op| as text ("ga = g * y"), or why none flows; never NULL
// for a valid op (every op of ops.def has an entry).
const char* tj_autodiff_rule(tj_op_t op);

#endif  // TJ_LIB_AUTODIFF_H_
