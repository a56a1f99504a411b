// The POINTWISE template: each work unit is up to TJ_KIR_POINTWISE_BLOCK
// elements of one innermost line; full vectors first, then one masked tail.
// A line whose every store would be a scatter (tj_emit_dim_stores_scatter:
// the edge columns and corners of a padded window, cut into boxes one
// element wide) runs one element at a time instead: its vectors' scatters
// and gathers cost more than the scalar stores and loads they stand for
// (the edge boxes of a padded 3x3 depthwise conv at 144@56, batch 32,
// AVX-512: 88 ms of gathers and scatters against 29 ms for the
// scalarized 4-lane ones of SSE2, beside 53 ms for the interior).

#include <llvm-c/DebugInfo.h>  // LLVMTemporaryMDNode (loop metadata)
#include <string.h>

#include "jit/emit_llvm.h"

static tj_status_t line_map(tj_emit_t* em, const tj_kir_phase_t* phase,
                            const tj_emit_point_t* line, LLVMValueRef index0,
                            LLVMValueRef len);

static LLVMValueRef i64c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

void tj_emit_line_point(tj_emit_t* em, const tj_emit_point_t* line,
                        LLVMValueRef offset, LLVMValueRef index0,
                        tj_emit_point_t* out) {
  const tj_kir_t* k = em->k;
  int32_t vd = k->rank - 1;
  *out = *line;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    out->ptr[b] = tj_emit_advance(
        em, b, line->ptr[b],
        LLVMBuildMul(em->b, offset, tj_emit_stride(em, b, vd), ""));
  }
  out->index[vd] = LLVMBuildAdd(em->b, index0, offset, "");
}

// The inputs |phase| loads that stay put along the line (stride 0 along
// its vector dim: an embedding lookup's index, a broadcast bias) are
// loaded once, before the line's loop, and the bodies reuse them through
// the load cache: left in the loop, LLVM reloads them (and recomputes all
// that depends on them: the index's wrap, clamp and row offset) for every
// vector, since it cannot tell that the loop's stores miss them. They do:
// an output never overlaps an input (tj_executable_run), and the memory
// plan writes a value in place of an input only when that input is read
// elementwise at the output's own points (memplan.c's reads_in_place),
// never with stride 0 along a dim the output walks. Returns the cache to
// install, or NULL when there is nothing to hoist or a caller's cache is
// in use.
static tj_emit_load_cache_t* hoist_line_invariant_loads(
    tj_emit_t* em, const tj_kir_phase_t* phase, const tj_emit_point_t* line,
    tj_emit_load_cache_t* cache) {
  if (em->load_cache || line->lanes <= 1) return NULL;
  const tj_kir_t* k = em->k;
  bool any = false;
  memset(cache->values, 0, sizeof(cache->values));
  for (uint32_t i = 0; i < phase->num_insts; ++i) {
    const tj_kir_inst_t* in = &phase->insts[i];
    if (in->kind != TJ_KIR_LOAD || cache->values[0][in->ref]) continue;
    const tj_kir_buffer_t* buf = &k->buffers[in->ref];
    if (buf->role != TJ_KIR_INPUT ||
        !tj_kir_ival_is_const(buf->strides[line->vdim], 0))
      continue;
    cache->values[0][in->ref] = tj_emit_load(em, line, in->ref);
    any = true;
  }
  if (!any) return NULL;
  cache->slot = 0;
  cache->insert = false;  // the bodies' own loads are per vector
  return cache;
}

tj_status_t tj_emit_line_map(tj_emit_t* em, const tj_kir_phase_t* phase,
                             const tj_emit_point_t* line, LLVMValueRef index0,
                             LLVMValueRef len) {
  tj_emit_load_cache_t hoisted;
  tj_emit_load_cache_t* cache =
      hoist_line_invariant_loads(em, phase, line, &hoisted);
  if (cache) em->load_cache = cache;
  tj_status_t status = line_map(em, phase, line, index0, len);
  if (cache) em->load_cache = NULL;
  return status;
}

// Marks the loop whose latch is |br| "llvm.loop.vectorize.width" 1.
static void no_vectorize(tj_emit_t* em, LLVMValueRef br) {
  static const char kWidth[] = "llvm.loop.vectorize.width";
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(em->ctx, NULL, 0);
  LLVMMetadataRef what[2] = {
      LLVMMDStringInContext2(em->ctx, kWidth, sizeof(kWidth) - 1),
      LLVMValueAsMetadata(LLVMConstInt(em->t_i32, 1, 0))};
  LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(em->ctx, what, 2)};
  LLVMMetadataRef loop = LLVMMDNodeInContext2(em->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(tmp, loop);  // a loop id refers to itself
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(em->ctx, "llvm.loop", 9),
                  LLVMMetadataAsValue(em->ctx, loop));
}

static tj_status_t line_map(tj_emit_t* em, const tj_kir_phase_t* phase,
                            const tj_emit_point_t* line, LLVMValueRef index0,
                            LLVMValueRef len) {
  const int32_t w = line->lanes;
  LLVMValueRef full =
      LLVMBuildAnd(em->b, len, i64c(em, ~(int64_t)(w - 1)), "full");
  tj_emit_loop_t loop;
  LLVMValueRef i =
      tj_emit_loop_begin(em, &loop, i64c(em, 0), full, i64c(em, w), "vec");
  tj_emit_point_t p;
  tj_emit_line_point(em, line, i, index0, &p);
  p.mask = NULL;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, phase, &p, NULL));
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(em->b);
  tj_emit_loop_end(em, &loop);
  if (w == 1) {
    // No tail (every element was a whole "vector"), and no vectorizing:
    // LLVM's loop vectorizer would bring back the gathers and scatters.
    no_vectorize(em, LLVMGetBasicBlockTerminator(latch));
    return NULL;
  }
  tj_emit_if_t tail;
  tj_emit_if_begin(em, &tail, LLVMBuildICmp(em->b, LLVMIntSLT, full, len, ""),
                   "tail");
  tj_emit_line_point(em, line, full, index0, &p);
  p.mask = tj_emit_lane_mask(em, LLVMBuildSub(em->b, len, full, ""), w);
  TJ_RETURN_IF_ERROR(tj_emit_body(em, phase, &p, NULL));
  tj_emit_if_end(em, &tail);
  return NULL;
}

// A gathered output of at least this many bytes is written by
// non-temporal stores (x86): past the caches, an ordinary store reads each
// line in before writing it, 3 bytes moved for 2 (issue 15: the embedding
// gather [8192 of 50000 x 768] at 0.55 of memcpy's bandwidth).
#define kNontemporalMinBytes (INT64_C(8) << 20)

// Whether |k| reads rows by index (a LOAD_AT: gather) and writes every
// output with stride 1 along the lines, its constant outer strides
// multiples of |lanes|: the kernels whose stores may be non-temporal.
static bool gathers_rows(const tj_kir_t* k, int32_t vd, int32_t lanes) {
  const tj_kir_phase_t* ph = &k->phases[0];
  bool at = false;
  for (uint32_t i = 0; i < ph->num_insts; ++i)
    at |= ph->insts[i].kind == TJ_KIR_LOAD_AT;
  if (!at) return false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_OUTPUT) continue;
    if (!tj_kir_ival_is_const(buf->strides[vd], 1)) return false;
    for (int32_t d = 0; d < vd; ++d) {
      if (buf->strides[d].param < 0 && buf->strides[d].value % lanes != 0)
        return false;
    }
  }
  return true;
}

// True at run time where the outputs are large enough for non-temporal
// stores and every vector of them is aligned: each output's base, and its
// strides along the outer dims, multiples of the vector (a line's blocks
// start at multiples of TJ_KIR_POINTWISE_BLOCK, a multiple of it).
static LLVMValueRef nontemporal_ok(tj_emit_t* em, int32_t vd, int32_t lanes) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  LLVMValueRef elems = i64c(em, 1);
  for (int32_t d = 0; d <= vd; ++d)
    elems = LLVMBuildMul(b, elems, em->dim[d], "");
  LLVMValueRef bytes = i64c(em, 0), ok = LLVMConstInt(em->t_i1, 1, 0);
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (buf->role != TJ_KIR_OUTPUT) continue;
    const int64_t es = (int64_t)tj_dtype_size(buf->dtype);
    bytes =
        LLVMBuildAdd(b, bytes, LLVMBuildMul(b, elems, i64c(em, es), ""), "");
    LLVMValueRef addr = LLVMBuildPtrToInt(b, em->base[i], em->t_i64, "");
    ok = LLVMBuildAnd(
        b, ok,
        LLVMBuildICmp(b, LLVMIntEQ,
                      LLVMBuildAnd(b, addr, i64c(em, lanes * es - 1), ""),
                      i64c(em, 0), ""),
        "");
    for (int32_t d = 0; d < vd; ++d) {
      ok = LLVMBuildAnd(b, ok,
                        LLVMBuildICmp(b, LLVMIntEQ,
                                      LLVMBuildSRem(b, tj_emit_stride(em, i, d),
                                                    i64c(em, lanes), ""),
                                      i64c(em, 0), ""),
                        "");
    }
  }
  return LLVMBuildAnd(
      b, ok,
      LLVMBuildICmp(b, LLVMIntSGE, bytes, i64c(em, kNontemporalMinBytes), ""),
      "nontemporal");
}

// Prefetches the rows the unit |ahead| units after |u| gathers (when it is
// one of this call's units): each row starts at a random place in its
// table, where the hardware prefetchers first miss a few lines before
// they follow it; touching a later row's first lines while this unit
// copies its own hides that (the embedding gather [8192 of 50000 x 768],
// a C model of the loop with rows drawn anew each run: 0.79 of memcpy
// without, 0.96-1.00 with 2-4 rows ahead). |ahead| is a few KiB of rows.
static tj_status_t prefetch_unit_ahead(tj_emit_t* em, LLVMValueRef u,
                                       LLVMValueRef blocks) {
  const tj_kir_t* k = em->k;
  const int32_t vd = k->rank - 1;
  LLVMBuilderRef b = em->b;
  LLVMValueRef unit_len =
      tj_emit_min_i64(em, em->dim[vd], i64c(em, TJ_KIR_POINTWISE_BLOCK));
  LLVMValueRef ahead = tj_emit_min_i64(
      em, i64c(em, 16),
      LLVMBuildAdd(b, i64c(em, 2),
                   LLVMBuildUDiv(b, i64c(em, 2048),
                                 LLVMBuildOr(b, unit_len, i64c(em, 1), ""), ""),
                   ""));
  LLVMValueRef next = LLVMBuildAdd(b, u, ahead, "ahead");
  tj_emit_if_t in_range;
  tj_emit_if_begin(em, &in_range,
                   LLVMBuildICmp(b, LLVMIntULT, next, em->arg_end, ""),
                   "prefetch");
  tj_emit_point_t line;
  memset(&line, 0, sizeof(line));
  line.lanes = em->target.lanes;
  line.vdim = vd;
  tj_emit_decompose(em, LLVMBuildUDiv(b, next, blocks, ""), vd, &line);
  LLVMValueRef i0 = LLVMBuildMul(b, LLVMBuildURem(b, next, blocks, ""),
                                 i64c(em, TJ_KIR_POINTWISE_BLOCK), "");
  tj_emit_point_t p;
  tj_emit_line_point(em, &line, i0, i64c(em, 0), &p);
  p.mask = NULL;
  em->prefetch_only = true;
  tj_status_t status = tj_emit_body(em, &k->phases[0], &p, NULL);
  em->prefetch_only = false;
  tj_emit_if_end(em, &in_range);
  return status;
}

tj_status_t tj_emit_pointwise(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  int32_t vd = k->rank - 1;
  LLVMValueRef inner = em->dim[vd];
  LLVMValueRef block = i64c(em, TJ_KIR_POINTWISE_BLOCK);
  LLVMValueRef blocks = LLVMBuildUDiv(
      em->b,
      LLVMBuildAdd(em->b, inner, i64c(em, TJ_KIR_POINTWISE_BLOCK - 1), ""),
      block, "blocks");
  tj_emit_loop_t units;
  LLVMValueRef u = tj_emit_loop_begin(em, &units, em->arg_begin, em->arg_end,
                                      i64c(em, 1), "unit");
  LLVMValueRef blk = LLVMBuildURem(em->b, u, blocks, "");
  LLVMValueRef line_index = LLVMBuildUDiv(em->b, u, blocks, "");
  tj_emit_point_t line;
  memset(&line, 0, sizeof(line));
  line.lanes = tj_emit_dim_stores_scatter(em, vd) ? 1 : em->target.lanes;
  line.vdim = vd;
  tj_emit_decompose(em, line_index, vd, &line);
  LLVMValueRef i0 = LLVMBuildMul(em->b, blk, block, "");
  LLVMValueRef len =
      tj_emit_min_i64(em, block, LLVMBuildSub(em->b, inner, i0, ""));
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    line.ptr[b] =
        tj_emit_advance(em, b, line.ptr[b],
                        LLVMBuildMul(em->b, i0, tj_emit_stride(em, b, vd), ""));
  }
  const bool nt = line.lanes > 1 && gathers_rows(k, vd, line.lanes) &&
                  TJ_KIR_POINTWISE_BLOCK % line.lanes == 0;
  if (nt) {
    // The check is invariant: LLVM hoists it out of the units' loop.
    LLVMValueRef ok = nontemporal_ok(em, vd, line.lanes);
    tj_emit_if_t big, small;
    tj_emit_if_begin(em, &big, ok, "nt_lines");
    TJ_RETURN_IF_ERROR(prefetch_unit_ahead(em, u, blocks));
    em->nontemporal_stores = true;
    tj_status_t s = tj_emit_line_map(em, &k->phases[0], &line, i0, len);
    em->nontemporal_stores = false;
    TJ_RETURN_IF_ERROR(s);
    tj_emit_if_end(em, &big);
    tj_emit_if_begin(em, &small, LLVMBuildNot(em->b, ok, ""), "lines");
    TJ_RETURN_IF_ERROR(tj_emit_line_map(em, &k->phases[0], &line, i0, len));
    tj_emit_if_end(em, &small);
  } else {
    TJ_RETURN_IF_ERROR(tj_emit_line_map(em, &k->phases[0], &line, i0, len));
  }
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(em->b);
  tj_emit_loop_end(em, &units);
  // Non-temporal stores are weakly ordered: fence them before the kernel
  // returns (and the pool's hand-off publishes the output).
  if (nt) tj_emit_intrinsic(em, "llvm.x86.sse.sfence", NULL, 0, NULL, 0);
  // A scalar line of a known short length is unrolled whole, and the
  // vectorizer would then take the loop over the lines instead.
  if (line.lanes == 1) no_vectorize(em, LLVMGetBasicBlockTerminator(latch));
  return NULL;
}
