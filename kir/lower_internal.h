// The private state of the lowering (kir/lower.c and its parts
// kir/lower_index.c, kir/lower_pointwise.c, kir/lower_reduce.c,
// kir/lower_gemm.c) and the functions they share. Not for other layers:
// kir/lower.h is the interface.
//
// Two passes per attempt: with |emit| false the walk only collects facts
// (buffers, index uses, requests to refine the space or cut boxes); with
// |emit| true it builds the kernel over the final space. Every function
// that builds IR does nothing (and returns a placeholder) in the first.

#ifndef TJ_KIR_LOWER_INTERNAL_H_
#define TJ_KIR_LOWER_INTERNAL_H_

#include "kir/lower.h"

#define MAXV TJ_KIR_MAX_RANK  // dims of the virtual (refined) space
#define NONE32 UINT32_MAX
#define MAX_ATTEMPTS 16
#define MAX_SEGMENTS 8  // per root dim
#define MAX_BOXES 64    // kernels per group

// coords of a node = coef * space + off, per node dim. Entries are dims.
typedef struct tj_lower_map_t {
  int32_t rank;
  int32_t unused_;
  int64_t coef[TJ_MAX_RANK][MAXV];
  int64_t off[TJ_MAX_RANK];
} tj_lower_map_t;

typedef struct tj_lower_buffer_t {
  uint32_t node;
  tj_kir_role_t role;
  int64_t strides[MAXV];  // dims, per virtual dim
  int64_t offset;         // dim, elements
} tj_lower_buffer_t;

// A concat lowered as one select (kir/lower_select.c): the loads its
// inputs make, merged across inputs. Load |node| with |strides| (over the
// virtual space) is read by input i at element |offset|[i] when the
// concat's coordinate is left unshifted; |present| has bit i when input i
// reads it. One LOAD_AT of |buffer| (input |base|'s offset: the least,
// where every offset is a constant, so that the buffer is the one a load
// outside the concat makes, rope's v * cos, and as aligned as it; else
// input 0's) serves every input.
#define MAX_SELECT_LOADS 16
typedef struct tj_lower_select_load_t {
  uint32_t node;
  uint32_t buffer;
  int32_t base;
  uint32_t present;
  uint32_t value;  // the LOAD_AT once emitted, else NONE32
  int64_t strides[MAXV];
  int64_t offset[MAX_SEGMENTS];
} tj_lower_select_load_t;

typedef struct tj_lower_select_t {
  bool collect;  // a walk that records loads (no IR), else one that emits
  bool ok;       // every load so far merges
  int32_t branch;
  int32_t k;     // inputs
  int32_t sdim;  // the virtual dim that walks the concat's axis
  int64_t starts[MAX_SEGMENTS];
  uint32_t cond[MAX_SEGMENTS];  // emitted: coordinate < end of input i
  uint32_t num_loads;
  tj_lower_select_load_t loads[MAX_SELECT_LOADS];
} tj_lower_select_t;

typedef struct tj_lower_memo_t {
  uint32_t node;
  uint32_t value;
  tj_lower_map_t map;
} tj_lower_memo_t;

typedef struct tj_lowering_t {
  const tj_graph_t* g;
  // A copy of the graph's dim table: the dims of the graph mean the same in
  // it, and the expressions the strides and offsets need are added to it,
  // not to the graph's (lowering only reads the graph).
  tj_dimtab_t dims;
  const tj_fusion_t* fu;
  const tj_group_t* grp;
  const tj_memplan_t* mp;
  const int64_t* sym;  // specialization values, or NULL
  tj_allocator_t al;
  tj_kir_kind_t kind;
  bool emit;
  tj_kir_t* k;
  bool* in_group;       // per node
  uint32_t* red_phase;  // per node: REDUCE phase index, or NONE32

  // Root dims, each factored into consecutive virtual dims.
  int32_t root_rank;
  int64_t root_dims[TJ_MAX_RANK];
  int32_t nfac[TJ_MAX_RANK];
  int64_t fac[TJ_MAX_RANK][MAXV];
  bool root_reduced[TJ_MAX_RANK];
  int32_t root_beg[TJ_MAX_RANK], root_end[TJ_MAX_RANK];
  // The virtual space.
  int32_t vrank;
  int64_t vdims[MAXV];
  bool vreduced[MAXV];
  bool vfixed[MAXV];  // GEMM m and n: never dropped or merged
  // Boxes (pointwise groups with pad or concat): root dim d is cut into
  // |nseg[d]| consecutive segments; each combination of segments (a box)
  // is one kernel in which every pad and concat takes one branch.
  int32_t nseg[TJ_MAX_RANK];
  int64_t seg_start[TJ_MAX_RANK][MAX_SEGMENTS];
  int64_t seg_size[TJ_MAX_RANK][MAX_SEGMENTS];
  int32_t cur_seg[TJ_MAX_RANK];
  int64_t full_dims[TJ_MAX_RANK];
  // A segmentation asked for by a pad or concat: segment cur_seg[d] of root
  // dim |segq_dim| becomes |segq_n| segments.
  bool want_segments;
  int32_t segq_dim, segq_n;
  int64_t segq_start[MAX_SEGMENTS], segq_size[MAX_SEGMENTS];
  // A refinement asked for by a reshape (applied before the next attempt).
  bool want_split;
  int32_t split_root, split_pos, split_n;
  int64_t split_dims[MAXV];
  // Facts of the first pass.
  tj_lower_buffer_t bufs[TJ_KIR_MAX_BUFFERS];
  uint32_t num_bufs;
  // Bit b: input bufs[b] is read at the index every output is written
  // (tj_lowered_kernel_t.index_aligned), set by lower_box.
  uint64_t aligned;
  bool index_used[MAXV];
  // The final space: final dim f covers virtual dims [fbeg, fend) (empty
  // for a size-1 dim standing for nothing).
  int32_t frank;
  int32_t fbeg[MAXV], fend[MAXV];
  int64_t fdims[MAXV];
  int32_t vfinal[MAXV];  // virtual -> final dim, -1 when dropped
  // Params of the kernel: symbolic dims.
  uint32_t num_params;
  int64_t params[TJ_KIR_MAX_PARAMS];
  // The phase being built.
  tj_kir_phase_kind_t phase;
  tj_lower_memo_t* memo;
  uint32_t num_memo, memo_cap;
  // Reduction facts.
  int64_t red_count;  // elements reduced per row (dim)
  // Reduced axes that no buffer reads as one strided axis (axes 0 and 2 of
  // a dense [A, B, C]): the final reduced dim |red_final| is their product
  // and every buffer has stride 0 along it; a read computes each reduced
  // coordinate from that dim's index by division (row-major over the kept
  // reduced virtual dims |red_v|) and adds coordinate times stride to an
  // indexed load (TJ_KIR_LOAD_AT). No permute, no copy.
  bool red_split;
  int32_t red_final;
  int32_t red_nv;
  int32_t red_v[MAXV];
  // GEMM facts.
  uint32_t mm;
  // swiglu (issue 14): a dual GEMM's second matmul (same A, B of the same
  // shape, read as GEMM_B2, its value TJ_KIR_ACC ref 1), or NONE32.
  uint32_t mm2;
  int64_t gemm_k;
  tj_kir_bq_t bq;  // qfold: a GEMM's quantized B (lower_gemm.c)
  bool b_int7;     // a GEMM's B is an i8 constant in [-64, 63] (lower_gemm.c)
  // A gather whose indexed axis may be empty at run time (a symbolic dim):
  // the kernel's run-time check (tj_lowered_kernel_t.nonempty_node), one
  // per kernel; NONE32 when none.
  uint32_t gather_check;
  int64_t gather_extent;
  // ops3 (issue 15): the value the SCAN phase yields (the scanned
  // operand's at the point), set by tj_lower_scan_value.
  uint32_t scan_yield;
  // rope14 (issue 14): the concat whose inputs are being walked as one
  // select (kir/lower_select.c), or NULL. While set, values are not
  // memoized (an input's nodes are evaluated at the concat's unshifted
  // coordinate, which a map does not tell apart) and loads go through it.
  tj_lower_select_t* sel;
} tj_lowering_t;

static inline const tj_node_t* NODE(const tj_lowering_t* lw, uint32_t i) {
  return &lw->g->nodes[i];
}

static inline const char* op_name(tj_op_t op) { return tj_op_info(op)->name; }

//===--- lower_index.c: dims, maps, buffers, the space ---===//

// Dim arithmetic as the lowering sees it: |d| evaluated when specializing;
// products and sums of constants overflow-checked (UNSUPPORTED), of
// symbolic dims added to the scratch table |lw->dims|.
tj_status_t tj_lower_dim(tj_lowering_t* lw, int64_t d, int64_t* out);
tj_status_t tj_lower_node_dim(tj_lowering_t* lw, uint32_t node, int32_t axis,
                              int64_t* out);
tj_status_t tj_lower_dim_mul(tj_lowering_t* lw, int64_t a, int64_t b,
                             int64_t* out);
tj_status_t tj_lower_dim_add(tj_lowering_t* lw, int64_t a, int64_t b,
                             int64_t* out);
// The row-major strides of |node|'s storage (the layout rule).
tj_status_t tj_lower_row_major(tj_lowering_t* lw, uint32_t node,
                               int64_t* strides);
void tj_lower_map_clear(tj_lower_map_t* m, int32_t rank);
// |dim| as a size or stride of the kernel: a constant, or a param (declared
// on first use). tj_lower_body_dim: the same as an i64 value of the body.
tj_status_t tj_lower_ival(tj_lowering_t* lw, int64_t dim, tj_kir_ival_t* out);
tj_status_t tj_lower_body_dim(tj_lowering_t* lw, int64_t dim, uint32_t* out);
// The buffer of |node| read (or written) with |strides| over the virtual
// space from element |offset|: found, or added in the first pass.
tj_status_t tj_lower_add_buffer(tj_lowering_t* lw, uint32_t node,
                                tj_kir_role_t role, const int64_t* strides,
                                int64_t offset, uint32_t* out);
// The strides and offset of |node|'s storage read through |map|.
tj_status_t tj_lower_compose(tj_lowering_t* lw, uint32_t node,
                             const tj_lower_map_t* map, int64_t* strides,
                             int64_t* offset);
// The map of an operand from the map of |node|, through broadcasting,
// transpose, slice and reshape (a reshape may ask for a refinement and
// return UNSUPPORTED "split").
tj_status_t tj_lower_broadcast_map(tj_lowering_t* lw, uint32_t node,
                                   uint32_t opnd, const tj_lower_map_t* map,
                                   tj_lower_map_t* res);
tj_status_t tj_lower_transpose_map(tj_lowering_t* lw, uint32_t node,
                                   const tj_lower_map_t* map,
                                   tj_lower_map_t* res);
tj_status_t tj_lower_slice_map(tj_lowering_t* lw, uint32_t node,
                               const tj_lower_map_t* map, tj_lower_map_t* res);
tj_status_t tj_lower_reshape_map(tj_lowering_t* lw, uint32_t node,
                                 const tj_lower_map_t* map,
                                 tj_lower_map_t* res);
// The virtual space (root dims in |order|, each split into its factors),
// the map of a root-shaped node, the final space after the first pass, and
// a buffer's stride along final dim |f|.
void tj_lower_build_virtual(tj_lowering_t* lw, const int32_t* order);
tj_status_t tj_lower_root_map(tj_lowering_t* lw, tj_lower_map_t* map);
tj_status_t tj_lower_decide_space(tj_lowering_t* lw);
int64_t tj_lower_final_stride(const tj_lowering_t* lw,
                              const tj_lower_buffer_t* v, int32_t f);
// Split reductions (red_split): the coordinate of reduced virtual dim
// |vdim| at the current point (i64), and the element offset of a buffer
// read with |strides| along the reduced dims (NONE32 in |*out| when the
// read needs none: no split, or stride 0 along every reduced dim).
tj_status_t tj_lower_split_coord(tj_lowering_t* lw, int32_t vdim,
                                 uint32_t* out);
tj_status_t tj_lower_split_offset(tj_lowering_t* lw, const int64_t* strides,
                                  uint32_t* out);

//===--- lower_pointwise.c: values and stores ---===//

// A constant of |dtype| read from |data| (nothing in the first pass).
uint32_t tj_lower_const(tj_lowering_t* lw, tj_dtype_t dtype, const void* data);
// The value of |node| at |map| in the open phase (memoized); its store to
// the node's storage; every output of the group, values first.
tj_status_t tj_lower_value(tj_lowering_t* lw, uint32_t node,
                           const tj_lower_map_t* map, uint32_t* out);
tj_status_t tj_lower_store(tj_lowering_t* lw, uint32_t node,
                           const tj_lower_map_t* map);
tj_status_t tj_lower_store_outputs(tj_lowering_t* lw,
                                   const tj_lower_map_t* map);
// Opens a phase (ROW_REDUCE kernels get a new one in the IR).
void tj_lower_begin_phase(tj_lowering_t* lw, tj_kir_phase_kind_t kind,
                          tj_kir_reduce_t reduce);
// The body of each template over the current box (both passes).
tj_status_t tj_lower_body_pointwise(tj_lowering_t* lw);
// The value of gather |node| at |map|: its indices' value, wrapped and
// clamped, as an offset into the table read from memory (lower_gather.c).
tj_status_t tj_lower_gather_value(tj_lowering_t* lw, uint32_t node,
                                  const tj_lower_map_t* map, uint32_t* out);
// The offset (elements, i64) of the row picked by index value |iv| (of
// dtype |idt|) along an axis of |extent| elements whose row-major stride is
// |stride| (dims): wrapped once when negative, clamped into [0, n - 1]
// (gathers and scatters alike).
tj_status_t tj_lower_clamped_offset(tj_lowering_t* lw, uint32_t iv,
                                    tj_dtype_t idt, int64_t extent,
                                    int64_t stride, uint32_t* out);
// The same for gather_elements and gather_nd (ops, issue 15).
tj_status_t tj_lower_gather_elements_value(tj_lowering_t* lw, uint32_t node,
                                           const tj_lower_map_t* map,
                                           uint32_t* out);
tj_status_t tj_lower_gather_nd_value(tj_lowering_t* lw, uint32_t node,
                                     const tj_lower_map_t* map, uint32_t* out);

//===--- lower_reduce.c ---===//

// Whether |op| reduces; the row result of reduction |node| (mean divided
// by the count).
bool tj_lower_is_reduction(tj_op_t op);
tj_status_t tj_lower_row_value(tj_lowering_t* lw, uint32_t node, uint32_t* out);
tj_status_t tj_lower_body_reduce(tj_lowering_t* lw);
// ops3 (issue 15): cumsum and cumprod, an OPAQUE group on the ROW_REDUCE
// template: one SCAN phase along the scanned axis (last in the space).
bool tj_lower_is_scan(tj_op_t op);
tj_status_t tj_lower_scan_value(tj_lowering_t* lw, uint32_t node,
                                const tj_lower_map_t* map, uint32_t* out);
tj_status_t tj_lower_body_scan(tj_lowering_t* lw);

//===--- lower_gemm.c ---===//

tj_status_t tj_lower_body_gemm(tj_lowering_t* lw);

//===--- lower_attention.c ---===//

// The ATTENTION kernel of the group's one attention node into |out| (its
// kernel, params, buffers; not its dim table).
tj_status_t tj_lower_attention_kernel(tj_lowering_t* lw, const char* name,
                                      tj_lowered_kernel_t* out);

//===--- lower_conv.c ---===//

// The CONV kernel of the group's one conv node (groups 1, f32) into |out|
// (its kernel, params, buffers; not its dim table).
tj_status_t tj_lower_conv_kernel(tj_lowering_t* lw, const char* name,
                                 tj_lowered_kernel_t* out);
// The body of a conv group with an epilogue (kind TJ_KIR_CONV through the
// generic lowering): x, w and the bias, then the epilogue as the MAP phase.
tj_status_t tj_lower_body_conv(tj_lowering_t* lw);
// The CONV kernel of |space| and |cv| with buffers x, w, out and the bias
// (row-major; TJ_NODE_NONE: none, as a pool's w) into |out|, shared by the
// dense conv and the window variant (kir/lower_window.c).
tj_status_t tj_lower_conv_finish(tj_lowering_t* lw, const char* name,
                                 const uint32_t nodes[4], const int64_t* space,
                                 const tj_kir_conv_t* cv,
                                 tj_lowered_kernel_t* out);

//===--- lower_window.c ---===//

// dwbw (issue 15): the CONV template's direct window kernel of the group's
// one depthwise conv (groups > 1, one input channel a group), max_pool or
// avg_pool node (f32) into |out| (its kernel, params, buffers; not its dim
// table).
tj_status_t tj_lower_window_kernel(tj_lowering_t* lw, const char* name,
                                   tj_lowered_kernel_t* out);

//===--- lower_scatter.c ---===//

// scatter (issue 15): scatter_elements and scatter_nd, a group of the node
// alone: a POINTWISE copy of data into the output, then a ROW_REDUCE walk
// of the updates (|*out_count| = 2 kernels into |out|; their params and
// buffers, not their dim tables).
bool tj_lower_is_scatter(tj_op_t op);
tj_status_t tj_lower_scatter_kernels(tj_lowering_t* lw, const char* name,
                                     tj_lowered_kernel_t* out, uint32_t max_out,
                                     uint32_t* out_count);

//===--- lower_select.c: a concat as one select ---===//

// rope14 (issue 14): the value of concat |node| at |map| as a per-element
// select when its inputs are pointwise functions of the same loads
// (|*out_taken| true), else nothing done (false: take the boxes).
tj_status_t tj_lower_concat_select(tj_lowering_t* lw, uint32_t node,
                                   const tj_lower_map_t* map, uint32_t* out,
                                   bool* out_taken);
// A load of |node| (read through |view|'s row-major strides) at |map|
// inside the inputs of the concat being selected.
tj_status_t tj_lower_select_load(tj_lowering_t* lw, uint32_t node,
                                 uint32_t view, const tj_lower_map_t* map,
                                 uint32_t* out);
// The i64 index of virtual dim |vdim| at the current point.
tj_status_t tj_lower_index_value(tj_lowering_t* lw, int32_t vdim,
                                 uint32_t* out);

//===--- lower.c: pad and concat ---===//

// Values of pad and concat: the branch the whole box takes, or a request
// to cut the box.
tj_status_t tj_lower_concat_value(tj_lowering_t* lw, uint32_t node,
                                  const tj_lower_map_t* map, uint32_t* out);
tj_status_t tj_lower_pad_value(tj_lowering_t* lw, uint32_t node,
                               const tj_lower_map_t* map, uint32_t* out);

#endif  // TJ_KIR_LOWER_INTERNAL_H_
