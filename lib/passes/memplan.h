// The memory plan (lib/passes/memplan.c makes it): where every value a
// kernel writes lives, for any values of the graph's symbols.
//
// Each intermediate a group writes gets a slot of one arena. A slot holds
// values whose lifetimes (in group positions, from the group that writes
// to the last group that reads) do not overlap, except that a value written
// "in place" may take the slot of an input its own group reads for the last
// time (elementwise, same index, same size and dtype). Sizes are symbolic:
// a value's size is coeff * product of symbolic dims, and a slot is as large
// as the largest value it ever holds, i.e. a max-expression; slot offsets
// are the running sum of slot sizes rounded up to |alignment|, evaluated at
// run time for concrete symbol values (tj_memplan_evaluate). Lifetimes do
// not depend on the symbols, so one plan serves every batch size.
//
// Graph inputs and constants stay where the caller and the graph keep them;
// graph outputs are written straight into the caller's buffers; a view (a
// VIEW group's reshape) aliases the storage of the value it reshapes.

#ifndef TJ_LIB_PASSES_MEMPLAN_H_
#define TJ_LIB_PASSES_MEMPLAN_H_

#include "lib/arena.h"
#include "lib/passes/fusion.h"

// bytes = coeff * factors[0] * ... (symbolic dims of the plan's graph,
// ascending encodings; constant dims are folded into coeff).
typedef struct tj_mem_size_t {
  int64_t coeff;
  uint32_t num_factors;
  int64_t factors[TJ_MAX_RANK];
} tj_mem_size_t;

typedef enum tj_buffer_kind_e {
  TJ_BUFFER_EXTERNAL,  // a graph input or constant
  TJ_BUFFER_OUTPUT,    // a graph output: the caller's buffer
  TJ_BUFFER_ARENA,     // a slot of the arena
  TJ_BUFFER_ALIAS,     // a view: the storage of |alias_of|
} tj_buffer_kind_t;

typedef struct tj_buffer_t {
  uint32_t node;
  tj_buffer_kind_t kind;
  uint32_t slot;         // ARENA
  uint32_t alias_of;     // ALIAS: the node whose storage it shares
  uint32_t in_place_of;  // ARENA: the input whose slot it took, or NONE
  uint32_t first;        // position of the group that writes it (0 for
                         // inputs and constants)
  uint32_t last;         // position of the last group reading it
  tj_mem_size_t size;
} tj_buffer_t;

typedef struct tj_slot_t {
  uint32_t num_sizes;
  tj_mem_size_t* sizes;  // the slot is max(sizes), none dominated by another
} tj_slot_t;

struct tj_memplan_t {
  tj_arena_t arena;
  uint32_t alignment;  // bytes; every slot offset is a multiple
  uint32_t num_buffers;
  tj_buffer_t* buffers;  // ascending node
  uint32_t* buffer_of;   // per node: index into |buffers| or UINT32_MAX
  uint32_t num_slots;
  tj_slot_t* slots;
  uint32_t num_in_place;
};

void tj_memplan_destroy(tj_memplan_t* plan);

// The bytes of |size| for |symbol_values| (by symbol id, as tj_dim_eval).
tj_status_t tj_mem_size_eval(const tj_mem_size_t* size, const tj_graph_t* graph,
                             const int64_t* symbol_values, int64_t* out);

// Slot offsets (|out_offsets| has num_slots entries, may be NULL) and the
// arena's size for |symbol_values|.
tj_status_t tj_memplan_evaluate(const tj_memplan_t* plan,
                                const tj_graph_t* graph,
                                const int64_t* symbol_values,
                                int64_t* out_offsets, int64_t* out_arena_bytes);

// The most arena bytes live at once (a lower bound for any plan, XLA's
// NoFragmentationStatsHeap) for |symbol_values|.
tj_status_t tj_memplan_live_peak(const tj_memplan_t* plan,
                                 const tj_graph_t* graph,
                                 const tj_fusion_t* fusion,
                                 const int64_t* symbol_values,
                                 int64_t* out_bytes);

// Checks that no two values sharing a slot are live at once (except an
// in-place pair at its group) and that every slot holds its values.
tj_status_t tj_memplan_verify(const tj_memplan_t* plan, const tj_graph_t* graph,
                              const tj_fusion_t* fusion);

// Formats |size| as "4*B*S" into |buf| (like snprintf).
int tj_mem_size_format(const tj_mem_size_t* size, const tj_graph_t* graph,
                       char* buf, size_t length);

#endif  // TJ_LIB_PASSES_MEMPLAN_H_
