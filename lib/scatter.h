// scatter_elements and scatter_nd (issue 15): the names of their reductions
// (tj_scatter_reduction_t, attr.ints[0]) as the .tj text, the ONNX
// attribute and messages spell them.

#ifndef TJ_LIB_SCATTER_H_
#define TJ_LIB_SCATTER_H_

#include <stdint.h>
#include <string.h>

#include "tensorjit/tj_graph.h"

// "none", "add", "mul", "max", "min"; NULL for any other value.
static inline const char* tj_scatter_reduction_name(int64_t reduction) {
  static const char* const kNames[] = {"none", "add", "mul", "max", "min"};
  return reduction >= 0 && reduction <= TJ_SCATTER_REDUCTION_MIN
             ? kNames[reduction]
             : NULL;
}

// The reduction named |name|, or -1.
static inline int32_t tj_scatter_reduction_of(const char* name) {
  for (int32_t r = 0; r <= TJ_SCATTER_REDUCTION_MIN; ++r) {
    if (strcmp(name, tj_scatter_reduction_name(r)) == 0) return r;
  }
  return -1;
}

#endif  // TJ_LIB_SCATTER_H_
