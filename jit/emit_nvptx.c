// Kernel IR -> NVPTX LLVM IR: kernel entry, the POINTWISE and ROW_REDUCE
// templates and their launch configuration. See emit_nvptx.h.

#include "jit/emit_nvptx.h"
#include "jit/nvptx_math.h"
#include "lib/dtype.h"

#include <stdio.h>
#include <string.h>

#define kThreads 256
#define kMaxGridY 65535u
#define kMaxGridX 2147483647u
// Steps per iteration of a row-reduce REDUCE loop.
#define kUnroll 4
// Iterations of the streaming REDUCE loop that a float sum adds into a
// fresh partial (64 steps a lane at kUnroll 4) before the partial goes
// into the thread's compensated total (see fold_compensated): the error of
// a row's sum then stays near (64 + 2 + log2 threads) eps * sum |x| for any
// length, instead of growing with the length / (threads * lanes) of one
// serial partial per lane.
#define kSumBlock 16
// Elements of a row each thread holds in registers on the resident path,
// as slots of one vector each: 4 slots of f32x4, 2 of bf16x8 (rows of up
// to 4096 elements at 256 threads). More cost registers that the 64-register
// budget below does not have.
#define kRowElements 16
#define kMaxRowSlots 8
// Row-reduce blocks per SM that ptxas must leave registers for (64 a
// thread at 256 threads). Measured on the H200, f32 [65536, 4096], of a
// device copy's bandwidth: softmax 0.83 -> 0.90 and layer_norm 0.76 ->
// 0.92 against the 80-88 registers ptxas picks unasked (2-3 blocks); 6 or
// 8 blocks (40 or 32 registers) spill and fall to 0.4-0.6.
#define kRowBlocksPerSm 4
// Items (16-byte vectors) a pointwise thread takes per step on the vector
// path.
#define kPointwiseItems 2
// The dynamic shared memory a staged row may take (rows32k, issue 14):
// sm_90a's 227 KiB a block, less the row partials' static arrays, rounded
// down; sm_80 modules also run on sm_86 and sm_89 (99 KiB).
#define kRowStageMaxSm90 (224 * 1024)
#define kRowStageMaxSm80 (96 * 1024)
// The least shared memory a staged row takes: shorter rows stream. 0:
// every row past the registers that fits is staged (not yet measured
// against the streaming path on a GPU, which reached copy speed to 16384
// bf16 and 8192 f32 elements: bench/RESULTS.md).
#define kRowStageMinBytes 0
// Ranges a staged row is copied in, each its own cp.async group, so that
// the first phase walks a range while the later ones are still in flight.
#define kStageGroups 4

//===--- helpers shared with emit_nvptx_gemm.c ---===//

LLVMValueRef tj_nvptx_call(tj_nvptx_emit_t* nv, const char* name,
                           LLVMValueRef* args, unsigned num_args) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(nv->em.mod, id, NULL, 0);
  LLVMTypeRef type = LLVMIntrinsicGetType(nv->em.ctx, id, NULL, 0);
  return LLVMBuildCall2(nv->em.b, type, fn, args, num_args, "");
}

LLVMValueRef tj_nvptx_sreg(tj_nvptx_emit_t* nv, const char* name) {
  char full[64];
  snprintf(full, sizeof(full), "llvm.nvvm.read.ptx.sreg.%s", name);
  return tj_nvptx_call(nv, full, NULL, 0);
}

LLVMValueRef tj_nvptx_sreg64(tj_nvptx_emit_t* nv, const char* name) {
  return LLVMBuildZExt(nv->em.b, tj_nvptx_sreg(nv, name), nv->em.t_i64, name);
}

void tj_nvptx_barrier(tj_nvptx_emit_t* nv) {
  tj_nvptx_call(nv, "llvm.nvvm.barrier0", NULL, 0);
}

LLVMValueRef tj_nvptx_shared_array(tj_nvptx_emit_t* nv, const char* name,
                                   uint32_t bytes) {
  LLVMTypeRef t = LLVMArrayType2(nv->em.t_i8, bytes);
  LLVMValueRef g = LLVMAddGlobalInAddressSpace(nv->em.mod, t, name, 3);
  LLVMSetLinkage(g, LLVMInternalLinkage);
  LLVMSetInitializer(g, LLVMGetUndef(t));
  LLVMSetAlignment(g, 16);
  return g;
}

LLVMValueRef tj_nvptx_dynamic_shared(tj_nvptx_emit_t* nv) {
  const char* name = "tj_dynamic_shared";
  LLVMValueRef g = LLVMGetNamedGlobal(nv->em.mod, name);
  if (g) return g;
  LLVMTypeRef t = LLVMArrayType2(nv->em.t_i8, 0);
  g = LLVMAddGlobalInAddressSpace(nv->em.mod, t, name, 3);
  LLVMSetLinkage(g, LLVMExternalLinkage);
  LLVMSetAlignment(g, 128);
  return g;
}

// The memory type's size in bytes.
static int32_t elem_size(tj_dtype_t dtype) {
  return (int32_t)tj_dtype_size(dtype);
}

// Vector accesses at |point|'s address of a buffer of stride 1 along the
// lanes take the vector's alignment (the callers' vector paths check that
// each such address is aligned), and so do vector loads at that address
// plus an offset known to be a multiple of the lanes
// (TJ_EMIT_MD_LANES_ALIGNED: a gathered row, which would otherwise be
// |lanes| scalar loads).
void tj_nvptx_align_accesses(tj_nvptx_emit_t* nv, const tj_emit_point_t* point,
                             int32_t lanes) {
  const tj_kir_t* k = nv->em.k;
  unsigned md_kind =
      LLVMGetMDKindIDInContext(nv->em.ctx, TJ_EMIT_MD_LANES_ALIGNED,
                               (unsigned)strlen(TJ_EMIT_MD_LANES_ALIGNED));
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(nv->em.fn); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;
         in = LLVMGetNextInstruction(in)) {
      LLVMOpcode op = LLVMGetInstructionOpcode(in);
      if (op != LLVMLoad && op != LLVMStore) continue;
      LLVMValueRef ptr = LLVMGetOperand(in, op == LLVMLoad ? 0 : 1);
      LLVMTypeRef vt =
          op == LLVMLoad ? LLVMTypeOf(in) : LLVMTypeOf(LLVMGetOperand(in, 0));
      if (LLVMGetTypeKind(vt) != LLVMVectorTypeKind) continue;
      if (op == LLVMLoad && LLVMGetMetadata(in, md_kind) &&
          LLVMIsAGetElementPtrInst(ptr)) {
        ptr = LLVMGetOperand(ptr, 0);  // the point's address
      }
      for (uint32_t b = 0; b < k->num_buffers; ++b) {
        if (point->ptr[b] == ptr &&
            tj_kir_ival_is_const(k->buffers[b].strides[point->vdim], 1)) {
          LLVMSetAlignment(in,
                           (unsigned)(lanes * elem_size(k->buffers[b].dtype)));
        }
      }
    }
  }
}

// i64 helpers.
static LLVMValueRef i64c(tj_nvptx_emit_t* nv, int64_t v) {
  return LLVMConstInt(nv->em.t_i64, (unsigned long long)v, 1);
}

// A loop over [start, limit) in steps of |step| whose counter lives in an
// entry-block slot (SROA makes it a phi).
static LLVMValueRef loop_begin(tj_nvptx_emit_t* nv, tj_emit_loop_t* loop,
                               LLVMValueRef start, LLVMValueRef limit,
                               LLVMValueRef step, const char* name) {
  return tj_emit_loop_begin(&nv->em, loop, start, limit, step, name);
}

//===--- checks before emission ---===//

// Ops the x86 path takes from libm in f64: on the GPU they call libdevice,
// which the options must say the target links.
static tj_status_t check_bodies(const tj_kir_t* k,
                                const tj_nvptx_options_t* options) {
  if (options && options->libdevice) return NULL;
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      const tj_kir_inst_t* in = &ph->insts[i];
      if (in->kind != TJ_KIR_OP || in->dtype != TJ_DTYPE_F64) continue;
      switch (in->op) {
        case TJ_OP_TANH:
        case TJ_OP_ERF:
        case TJ_OP_ERFC:
        case TJ_OP_SIN:
        case TJ_OP_COS:
        case TJ_OP_ASIN:
        case TJ_OP_ACOS:
        case TJ_OP_ATAN:
        case TJ_OP_POW:
          return tj_unsupported(
              "kernel @%s: phase %u instruction %%%u: f64 %s needs NVIDIA's "
              "libdevice on the GPU, and none was found (set TJ_LIBDEVICE "
              "to libdevice.10.bc, or CUDA_HOME to the toolkit)",
              k->name, p, i, tj_op_info(in->op)->name);
        default:
          break;
      }
    }
  }
  return NULL;
}

// No call may remain but to intrinsics and, with options->libdevice, to
// libdevice's functions, which tj_nvptx_compile links: an external function
// would only fail later, in the driver's linker.
static tj_status_t check_no_calls(LLVMModuleRef module, const char* kernel,
                                  const tj_nvptx_options_t* options) {
  bool libdevice = options && options->libdevice;
  for (LLVMValueRef f = LLVMGetFirstFunction(module); f;
       f = LLVMGetNextFunction(f)) {
    size_t n;
    const char* name = LLVMGetValueName2(f, &n);
    if (libdevice && n > 5 && memcmp(name, "__nv_", 5) == 0) continue;
    if (LLVMIsDeclaration(f) && LLVMGetIntrinsicID(f) == 0)
      return tj_internal("kernel @%s: the NVPTX lowering calls %.*s", kernel,
                         (int)n, name);
  }
  return NULL;
}

//===--- POINTWISE ---===//

// Lanes of the vector path: 16 bytes of the widest buffer that is
// contiguous along the innermost dim; 1 if none is.
static int32_t vector_lanes(const tj_kir_t* k) {
  int32_t widest = 0;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_INPUT && buf->role != TJ_KIR_OUTPUT) continue;
    if (!tj_kir_ival_is_const(buf->strides[k->rank - 1], 1)) continue;
    if (elem_size(buf->dtype) > widest) widest = elem_size(buf->dtype);
  }
  if (widest == 0) return 1;
  int32_t lanes = 16 / widest;
  return lanes < 1 ? 1 : lanes > 8 ? 8 : lanes;
}

// Whether the vector path may run: the innermost size is a multiple of
// |lanes|, and every buffer contiguous along it starts |lanes| elements
// aligned in each row.
static LLVMValueRef vector_ok(tj_nvptx_emit_t* nv, int32_t lanes) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  int32_t inner = k->rank - 1;
  LLVMBuilderRef b = em->b;
  LLVMValueRef ok = LLVMBuildICmp(
      b, LLVMIntEQ, LLVMBuildSRem(b, em->dim[inner], i64c(nv, lanes), ""),
      i64c(nv, 0), "");
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (!tj_kir_ival_is_const(buf->strides[inner], 1)) continue;
    int64_t bytes = (int64_t)lanes * elem_size(buf->dtype);
    LLVMValueRef addr = LLVMBuildPtrToInt(b, em->base[i], em->t_i64, "");
    ok = LLVMBuildAnd(
        b, ok,
        LLVMBuildICmp(b, LLVMIntEQ,
                      LLVMBuildAnd(b, addr, i64c(nv, bytes - 1), ""),
                      i64c(nv, 0), ""),
        "");
    for (int32_t d = 0; d < inner; ++d) {
      tj_kir_ival_t s = buf->strides[d];
      if (s.param < 0) {
        if (s.value % lanes != 0) return LLVMConstInt(em->t_i1, 0, 0);
        continue;
      }
      ok = LLVMBuildAnd(b, ok,
                        LLVMBuildICmp(b, LLVMIntEQ,
                                      LLVMBuildSRem(b, em->scalar[s.param],
                                                    i64c(nv, lanes), ""),
                                      i64c(nv, 0), ""),
                        "");
    }
  }
  return ok;
}

// The product of dims [0, n).
static LLVMValueRef outer_size(tj_nvptx_emit_t* nv, int32_t n) {
  LLVMValueRef size = i64c(nv, 1);
  for (int32_t d = 0; d < n; ++d)
    size = LLVMBuildMul(nv->em.b, size, nv->em.dim[d], "");
  return size;
}

// |point| at (row start already in point->ptr) + |col| along the innermost
// dim.
static void at_column(tj_nvptx_emit_t* nv, const tj_emit_point_t* row,
                      LLVMValueRef col, tj_emit_point_t* point) {
  const tj_kir_t* k = nv->em.k;
  int32_t inner = k->rank - 1;
  *point = *row;
  point->index[inner] = col;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (tj_kir_ival_is_const(k->buffers[b].strides[inner], 0)) continue;
    LLVMValueRef off =
        LLVMBuildMul(nv->em.b, col, tj_emit_stride(&nv->em, b, inner), "");
    point->ptr[b] = tj_emit_advance(&nv->em, b, row->ptr[b], off);
  }
}

static tj_status_t emit_pointwise_path(tj_nvptx_emit_t* nv, int32_t lanes) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  int32_t inner = k->rank - 1;
  LLVMValueRef rows = outer_size(nv, inner);
  LLVMValueRef items =
      LLVMBuildSDiv(b, em->dim[inner], i64c(nv, lanes), "items");
  LLVMValueRef row0 =
      LLVMBuildAdd(b,
                   LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.y"),
                                tj_nvptx_sreg64(nv, "ntid.y"), ""),
                   tj_nvptx_sreg64(nv, "tid.y"), "");
  LLVMValueRef row_step = LLVMBuildMul(b, tj_nvptx_sreg64(nv, "nctaid.y"),
                                       tj_nvptx_sreg64(nv, "ntid.y"), "");
  LLVMValueRef col0 =
      LLVMBuildAdd(b,
                   LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.x"),
                                tj_nvptx_sreg64(nv, "ntid.x"), ""),
                   tj_nvptx_sreg64(nv, "tid.x"), "");
  LLVMValueRef col_step = LLVMBuildMul(b, tj_nvptx_sreg64(nv, "nctaid.x"),
                                       tj_nvptx_sreg64(nv, "ntid.x"), "");
  tj_emit_loop_t row_loop, col_loop;
  LLVMValueRef row = loop_begin(nv, &row_loop, row0, rows, row_step, "row");
  tj_emit_point_t row_point;
  memset(&row_point, 0, sizeof(row_point));
  row_point.lanes = lanes;
  row_point.vdim = inner;
  row_point.aligned = lanes > 1;  // vector_ok checked the buffers
  tj_emit_decompose(em, row, inner, &row_point);
  // The vector path takes kPointwiseItems items a step, item + i *
  // col_step for i < kPointwiseItems (coalesced per i), and loads them all
  // before the first store: the stores may alias the loads as far as the
  // compiler knows, so without that each thread would keep only one 16-byte
  // load in flight. Items past the end load at the step's first (valid)
  // item and store nothing.
  int32_t unroll = lanes > 1 ? kPointwiseItems : 1;
  LLVMValueRef item =
      loop_begin(nv, &col_loop, col0, items,
                 LLVMBuildMul(b, col_step, i64c(nv, unroll), ""), "col");
  tj_emit_load_cache_t cache;
  memset(&cache, 0, sizeof(cache));
  cache.insert = true;
  if (unroll > 1) em->load_cache = &cache;
  tj_emit_point_t points[kPointwiseItems];
  LLVMValueRef valid[kPointwiseItems];
  const tj_kir_phase_t* ph = &k->phases[0];
  for (int32_t i = 0; i < unroll; ++i) {
    LLVMValueRef it =
        LLVMBuildAdd(b, item, LLVMBuildMul(b, col_step, i64c(nv, i), ""), "");
    valid[i] = LLVMBuildICmp(b, LLVMIntSLT, it, items, "valid");
    at_column(nv, &row_point,
              LLVMBuildMul(b, tj_emit_select(em, valid[i], it, item),
                           i64c(nv, lanes), "col"),
              &points[i]);
    cache.slot = i;
    for (uint32_t n = 0; n < ph->num_insts && unroll > 1; ++n)
      if (ph->insts[n].kind == TJ_KIR_LOAD)
        tj_emit_load(em, &points[i], ph->insts[n].ref);
  }
  tj_status_t status = NULL;
  for (int32_t i = 0; i < unroll && !status; ++i) {
    tj_emit_if_t guard;
    if (i > 0) tj_emit_if_begin(em, &guard, valid[i], "item");
    cache.slot = i;
    status = tj_emit_body(em, ph, &points[i], NULL);
    if (!status && lanes > 1) tj_nvptx_align_accesses(nv, &points[i], lanes);
    if (i > 0) tj_emit_if_end(em, &guard);
  }
  em->load_cache = NULL;
  TJ_RETURN_IF_ERROR(status);
  tj_emit_loop_end(em, &col_loop);
  tj_emit_loop_end(em, &row_loop);
  return NULL;
}

static tj_status_t emit_pointwise(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  if (em->k->num_phases != 1 || em->k->phases[0].kind != TJ_KIR_PHASE_MAP)
    return tj_invalid("kernel @%s: a pointwise kernel has one map phase",
                      em->k->name);
  int32_t lanes = vector_lanes(em->k);
  nv->info->vector_lanes = lanes;
  nv->info->items_per_thread = lanes > 1 ? kPointwiseItems : 1;
  if (lanes == 1) return emit_pointwise_path(nv, 1);
  tj_emit_if_t vec, scalar;
  LLVMValueRef ok = vector_ok(nv, lanes);
  tj_emit_if_begin(em, &vec, ok, "vector");
  TJ_RETURN_IF_ERROR(emit_pointwise_path(nv, lanes));
  tj_emit_if_end(em, &vec);
  tj_emit_if_begin(em, &scalar, LLVMBuildNot(em->b, ok, ""), "scalar");
  TJ_RETURN_IF_ERROR(emit_pointwise_path(nv, 1));
  tj_emit_if_end(em, &scalar);
  return NULL;
}

//===--- ROW_REDUCE ---===//

// Reductions combine compute-type values: f32 (also for f16/bf16), f64,
// integers, or i1 (bool max/min).
typedef struct reducer_t {
  tj_kir_reduce_t kind;
  tj_dtype_t dtype;  // of the yielded values
  LLVMTypeRef type;  // scalar compute type
} reducer_t;

static tj_status_t make_reducer(tj_nvptx_emit_t* nv, uint32_t phase,
                                reducer_t* out) {
  const tj_kir_t* k = nv->em.k;
  const tj_kir_phase_t* ph = &k->phases[phase];
  if (ph->num_insts == 0 || ph->insts[ph->num_insts - 1].kind != TJ_KIR_YIELD)
    return tj_invalid("kernel @%s: reduce phase %u does not end in a yield",
                      k->name, phase);
  out->kind = ph->reduce;
  out->dtype = ph->insts[ph->num_insts - 1].dtype;
  out->type = tj_emit_compute_type(&nv->em, out->dtype);
  if (out->dtype == TJ_DTYPE_BOOL && out->kind != TJ_KIR_REDUCE_MAX &&
      out->kind != TJ_KIR_REDUCE_MIN)
    return tj_unsupported("kernel @%s: phase %u: %s of bool values", k->name,
                          phase, tj_kir_reduce_name(out->kind));
  return NULL;
}

static bool is_float_type(LLVMTypeRef t) {
  LLVMTypeKind kind = LLVMGetTypeKind(t);
  return kind == LLVMFloatTypeKind || kind == LLVMDoubleTypeKind;
}

static LLVMValueRef identity(tj_nvptx_emit_t* nv, const reducer_t* r,
                             int32_t lanes) {
  LLVMTypeRef t = tj_emit_vec(&nv->em, r->type, lanes);
  bool fl = is_float_type(r->type);
  unsigned bits = fl ? 0 : LLVMGetIntTypeWidth(r->type);
  switch (r->kind) {
    case TJ_KIR_REDUCE_SUM:
      return LLVMConstNull(t);
    case TJ_KIR_REDUCE_PROD:
      return fl ? tj_emit_fconst(t, 1.0) : tj_emit_iconst(t, 1);
    case TJ_KIR_REDUCE_MAX:
    case TJ_KIR_REDUCE_ARGMAX:
      if (fl) return tj_emit_fconst(t, -__builtin_inf());
      if (bits == 1) return tj_emit_iconst(t, 0);
      return tj_emit_iconst(t, tj_dtype_int_lowest(r->dtype));
    case TJ_KIR_REDUCE_MIN:
      if (fl) return tj_emit_fconst(t, __builtin_inf());
      if (bits == 1) return tj_emit_iconst(t, 1);
      return tj_emit_iconst(t, tj_dtype_int_highest(r->dtype));
  }
  return LLVMConstNull(t);
}

// a <op> b, lane-wise; max/min propagate NaN as the reference does.
static LLVMValueRef combine(tj_nvptx_emit_t* nv, const reducer_t* r,
                            LLVMValueRef a, LLVMValueRef x) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  bool fl = is_float_type(r->type);
  bool is_bool = !fl && LLVMGetIntTypeWidth(r->type) == 1;
  switch (r->kind) {
    case TJ_KIR_REDUCE_SUM:
      return fl ? LLVMBuildFAdd(b, a, x, "") : LLVMBuildAdd(b, a, x, "");
    case TJ_KIR_REDUCE_PROD:
      return fl ? LLVMBuildFMul(b, a, x, "") : LLVMBuildMul(b, a, x, "");
    case TJ_KIR_REDUCE_MAX:
    case TJ_KIR_REDUCE_MIN:
    case TJ_KIR_REDUCE_ARGMAX: {
      bool max = r->kind != TJ_KIR_REDUCE_MIN;
      if (is_bool)
        return max ? LLVMBuildOr(b, a, x, "") : LLVMBuildAnd(b, a, x, "");
      if (!fl) {
        // u64 in its order; the other unsigned are held non-negative.
        LLVMIntPredicate p = r->dtype == TJ_DTYPE_U64
                                 ? (max ? LLVMIntUGT : LLVMIntULT)
                                 : (max ? LLVMIntSGT : LLVMIntSLT);
        return tj_emit_select(em, LLVMBuildICmp(b, p, a, x, ""), a, x);
      }
      // f32: max.NaN / min.NaN (sm_80 and later), one instruction for the
      // compare, select and NaN test below.
      if (LLVMGetTypeKind(r->type) == LLVMFloatTypeKind) {
        LLVMTypeRef t = LLVMTypeOf(a);
        LLVMValueRef args[2] = {a, x};
        return tj_emit_intrinsic(em, max ? "llvm.maximum" : "llvm.minimum", &t,
                                 1, args, 2);
      }
      return tj_emit_fminmax(em, max, a, x);
    }
  }
  return a;
}

// Argmax: whether candidate (x, xi) beats the current (a, ai): a larger
// value, or the first NaN, or an equal value at a smaller index. Order
// independent, so any combination tree gives the first maximum.
static LLVMValueRef argmax_takes(tj_nvptx_emit_t* nv, const reducer_t* r,
                                 LLVMValueRef a, LLVMValueRef ai,
                                 LLVMValueRef x, LLVMValueRef xi) {
  LLVMBuilderRef b = nv->em.b;
  LLVMValueRef earlier = LLVMBuildICmp(b, LLVMIntSLT, xi, ai, "");
  if (!is_float_type(r->type)) {
    if (LLVMGetIntTypeWidth(r->type) == 1) {
      LLVMValueRef gt = LLVMBuildAnd(b, x, LLVMBuildNot(b, a, ""), "");
      LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, x, a, "");
      return LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), "");
    }
    LLVMValueRef gt = LLVMBuildICmp(
        b, r->dtype == TJ_DTYPE_U64 ? LLVMIntUGT : LLVMIntSGT, x, a, "");
    LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, x, a, "");
    return LLVMBuildOr(b, gt, LLVMBuildAnd(b, eq, earlier, ""), "");
  }
  LLVMValueRef a_nan = LLVMBuildFCmp(b, LLVMRealUNO, a, a, "");
  LLVMValueRef x_nan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  LLVMValueRef gt = LLVMBuildFCmp(b, LLVMRealOGT, x, a, "");
  LLVMValueRef eq = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealOEQ, x, a, ""),
                                LLVMBuildAnd(b, a_nan, x_nan, ""), "");
  LLVMValueRef nan_wins =
      LLVMBuildAnd(b, x_nan, LLVMBuildNot(b, a_nan, ""), "");
  return LLVMBuildOr(b, LLVMBuildOr(b, nan_wins, gt, ""),
                     LLVMBuildAnd(b, eq, earlier, ""), "");
}

// Butterfly exchange of a scalar of any compute type across the warp.
static LLVMValueRef shuffle_xor(tj_nvptx_emit_t* nv, LLVMValueRef v,
                                int32_t offset) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  LLVMTypeRef t = LLVMTypeOf(v);
  LLVMValueRef mask = LLVMConstInt(em->t_i32, 0xffffffffu, 0);
  LLVMValueRef off = LLVMConstInt(em->t_i32, (unsigned)offset, 0);
  LLVMValueRef clamp = LLVMConstInt(em->t_i32, 0x1f, 0);
  if (LLVMGetTypeKind(t) == LLVMFloatTypeKind) {
    LLVMValueRef args[4] = {mask, v, off, clamp};
    return tj_nvptx_call(nv, "llvm.nvvm.shfl.sync.bfly.f32", args, 4);
  }
  unsigned bits =
      LLVMGetTypeKind(t) == LLVMDoubleTypeKind ? 64 : LLVMGetIntTypeWidth(t);
  LLVMValueRef bits_v = LLVMGetTypeKind(t) == LLVMDoubleTypeKind
                            ? LLVMBuildBitCast(b, v, em->t_i64, "")
                            : v;
  if (bits <= 32) {
    LLVMValueRef w =
        bits < 32 ? LLVMBuildZExt(b, bits_v, em->t_i32, "") : bits_v;
    LLVMValueRef args[4] = {mask, w, off, clamp};
    LLVMValueRef r = tj_nvptx_call(nv, "llvm.nvvm.shfl.sync.bfly.i32", args, 4);
    return bits < 32 ? LLVMBuildTrunc(b, r, t, "") : r;
  }
  LLVMValueRef lo = LLVMBuildTrunc(b, bits_v, em->t_i32, "");
  LLVMValueRef hi = LLVMBuildTrunc(
      b, LLVMBuildLShr(b, bits_v, i64c(nv, 32), ""), em->t_i32, "");
  LLVMValueRef args_lo[4] = {mask, lo, off, clamp};
  LLVMValueRef args_hi[4] = {mask, hi, off, clamp};
  lo = tj_nvptx_call(nv, "llvm.nvvm.shfl.sync.bfly.i32", args_lo, 4);
  hi = tj_nvptx_call(nv, "llvm.nvvm.shfl.sync.bfly.i32", args_hi, 4);
  LLVMValueRef r = LLVMBuildOr(
      b, LLVMBuildZExt(b, lo, em->t_i64, ""),
      LLVMBuildShl(b, LLVMBuildZExt(b, hi, em->t_i64, ""), i64c(nv, 32), ""),
      "");
  return LLVMGetTypeKind(t) == LLVMDoubleTypeKind
             ? LLVMBuildBitCast(b, r, t, "")
             : r;
}

// State of one row-reduce path (vector or scalar).
typedef struct row_ctx_t {
  int32_t lanes;
  LLVMValueRef active;              // i1: this thread's row exists
  LLVMValueRef limit;               // L, or 0 for inactive rows
  LLVMValueRef j0, j_step;          // this thread's first element and step
  tj_emit_point_t row;              // pointers at the row start
  LLVMValueRef rows[64];            // results of the phases so far
  LLVMValueRef smem_val, smem_idx;  // [32] x i64 slots
  LLVMValueRef warp_slot;           // i64: this warp's slot
  LLVMValueRef lane;                // i32 lane id
  LLVMValueRef first_slot;          // i64: the row's first warp slot
  LLVMValueRef warps;               // i64: warps per row (0 below a warp)
  LLVMValueRef threads;             // i64: threads per row (ntid.x)
  // The staged path's first phase (emit_staged_phases): the row's
  // |stage_vectors| (i64) vectors in |stage_groups| ranges, each walked
  // once its copies have landed (range_loop_begin), by the threads that
  // copied it (the same vectors), so the phase overlaps the copy of the
  // ranges after it; 0: the phase walks [j0, limit).
  int32_t stage_groups;
  LLVMValueRef stage_vectors;
  // The streaming phases walk sibling REDUCE phases together
  // (sibling_reduce): a staged row, where a walk is a pass over shared
  // memory that nothing overlaps at one block an SM.
  bool siblings;
} row_ctx_t;

// The first vector of range |g| of a staged row's |groups| ranges of
// |vectors| (i64) vectors: vectors * g / groups (|groups| a power of two),
// for the copy loops (emit_staged_phases).
static LLVMValueRef stage_range(tj_nvptx_emit_t* nv, LLVMValueRef vectors,
                                int32_t g, int32_t groups) {
  LLVMBuilderRef b = nv->em.b;
  if (g == 0) return i64c(nv, 0);
  if (g == groups) return vectors;
  int32_t shift = 0;
  while ((1 << shift) < groups) ++shift;
  return LLVMBuildLShr(b, LLVMBuildMul(b, vectors, i64c(nv, g), ""),
                       i64c(nv, shift), "");
}

// The loop over the ranges of a staged row's first phase
// (row_ctx_t.stage_groups), around the phase's walk, so that the walk's
// code is emitted once: range_loop_begin opens it (nothing without
// ranges), waits for range g's copies, stores the range's first element
// of this thread into |j_var| and returns the range's end (|c->limit|
// without ranges); range_loop_end closes it. The range bounds are
// vectors * g / groups, as stage_range's.
static LLVMValueRef range_loop_begin(tj_nvptx_emit_t* nv, const row_ctx_t* c,
                                     LLVMValueRef j_var, tj_emit_loop_t* loop) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  const int32_t groups = c->stage_groups;
  if (groups == 0) return c->limit;
  LLVMValueRef g =
      loop_begin(nv, loop, i64c(nv, 0), i64c(nv, groups), i64c(nv, 1), "range");
  // cp.async.wait_group takes an immediate: one for each range.
  for (int32_t i = 0; i < groups; ++i) {
    tj_emit_if_t wait;
    tj_emit_if_begin(em, &wait, LLVMBuildICmp(b, LLVMIntEQ, g, i64c(nv, i), ""),
                     "wait");
    LLVMValueRef pending =
        LLVMConstInt(em->t_i32, (unsigned)(groups - 1 - i), 0);
    tj_emit_intrinsic(em, "llvm.nvvm.cp.async.wait.group", NULL, 0, &pending,
                      1);
    tj_emit_if_end(em, &wait);
  }
  int32_t shift = 0;
  while ((1 << shift) < groups) ++shift;
  LLVMValueRef lanes = i64c(nv, c->lanes);
  LLVMValueRef first = LLVMBuildLShr(
      b, LLVMBuildMul(b, c->stage_vectors, g, ""), i64c(nv, shift), "");
  LLVMValueRef end =
      LLVMBuildLShr(b,
                    LLVMBuildMul(b, c->stage_vectors,
                                 LLVMBuildAdd(b, g, i64c(nv, 1), ""), ""),
                    i64c(nv, shift), "");
  LLVMBuildStore(
      b,
      LLVMBuildMul(b, LLVMBuildAdd(b, first, tj_nvptx_sreg64(nv, "tid.x"), ""),
                   lanes, ""),
      j_var);
  return LLVMBuildMul(b, end, lanes, "range_end");
}

static void range_loop_end(tj_nvptx_emit_t* nv, const row_ctx_t* c,
                           tj_emit_loop_t* loop) {
  if (c->stage_groups > 0) tj_emit_loop_end(&nv->em, loop);
}

// Reduces |v| (and argmax index |vi|) over the warp, then over the row's
// warps through shared memory; every thread of the row gets the result.
// The |lanes| lanes of vector |v| combined into one scalar, lane 0 first.
static LLVMValueRef combine_lanes(tj_nvptx_emit_t* nv, const reducer_t* r,
                                  LLVMValueRef v, int32_t lanes) {
  LLVMBuilderRef b = nv->em.b;
  LLVMValueRef s =
      LLVMBuildExtractElement(b, v, LLVMConstInt(nv->em.t_i32, 0, 0), "");
  for (int32_t l = 1; l < lanes; ++l)
    s = combine(nv, r, s,
                LLVMBuildExtractElement(
                    b, v, LLVMConstInt(nv->em.t_i32, (unsigned)l, 0), ""));
  return s;
}

//
// With |r2| (not argmax, nor |r|), |v2| is reduced alongside |v| in the
// index slots, so that two sibling reductions share the shuffles' latency
// and one round of barriers (sibling_reduce).
static void reduce_across_threads(tj_nvptx_emit_t* nv, const reducer_t* r,
                                  row_ctx_t* c, LLVMValueRef* v,
                                  LLVMValueRef* vi, const reducer_t* r2,
                                  LLVMValueRef* v2) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  bool arg = r->kind == TJ_KIR_REDUCE_ARGMAX;
  // A short row has fewer threads than a warp (ntid.x a power of two below
  // 32, rows side by side in the warp): a step whose partner lies in
  // another row exchanges anyway (every lane must take part) and keeps its
  // own value.
  for (int32_t off = 16; off >= 1; off /= 2) {
    LLVMValueRef in_row =
        LLVMBuildICmp(b, LLVMIntULT, i64c(nv, off), c->threads, "in_row");
    LLVMValueRef o = shuffle_xor(nv, *v, off);
    if (r2) {
      LLVMValueRef o2 = shuffle_xor(nv, *v2, off);
      *v2 = tj_emit_select(em, in_row, combine(nv, r2, *v2, o2), *v2);
    }
    if (arg) {
      LLVMValueRef oi = shuffle_xor(nv, *vi, off);
      LLVMValueRef take =
          LLVMBuildAnd(b, in_row, argmax_takes(nv, r, *v, *vi, o, oi), "");
      *v = tj_emit_select(em, take, o, *v);
      *vi = tj_emit_select(em, take, oi, *vi);
    } else {
      *v = tj_emit_select(em, in_row, combine(nv, r, *v, o), *v);
    }
  }
  LLVMValueRef acc = tj_emit_alloca(em, r->type, "acc");
  LLVMValueRef acc_i = tj_emit_alloca(em, em->t_i64, "acc_i");
  LLVMValueRef acc2 = r2 ? tj_emit_alloca(em, r2->type, "acc2") : NULL;
  LLVMBuildStore(b, *v, acc);
  LLVMBuildStore(b, arg ? *vi : i64c(nv, INT64_MAX), acc_i);
  if (r2) LLVMBuildStore(b, *v2, acc2);
  // A row of one warp has its result now: no shared memory and no barrier,
  // so that the rows of a block (a warp each when short) do not wait for
  // one another. The condition is uniform over the block.
  tj_emit_if_t multi;
  tj_emit_if_begin(em, &multi,
                   LLVMBuildICmp(b, LLVMIntUGT, c->warps, i64c(nv, 1), ""),
                   "warps");
  // Across warps: lane 0 of each publishes; all read their row's slots.
  LLVMValueRef slot_v =
      LLVMBuildGEP2(b, em->t_i64, c->smem_val, &c->warp_slot, 1, "");
  LLVMValueRef slot_i =
      LLVMBuildGEP2(b, em->t_i64, c->smem_idx, &c->warp_slot, 1, "");
  tj_emit_if_t lane0;
  tj_emit_if_begin(
      em, &lane0,
      LLVMBuildICmp(b, LLVMIntEQ, c->lane, LLVMConstInt(em->t_i32, 0, 0), ""),
      "publish");
  LLVMBuildStore(b, *v, slot_v);
  if (arg) LLVMBuildStore(b, *vi, slot_i);
  if (r2) LLVMBuildStore(b, *v2, slot_i);
  tj_emit_if_end(em, &lane0);
  tj_nvptx_barrier(nv);
  LLVMBuildStore(b, identity(nv, r, 1), acc);
  LLVMBuildStore(b, i64c(nv, INT64_MAX), acc_i);
  if (r2) LLVMBuildStore(b, identity(nv, r2, 1), acc2);
  tj_emit_loop_t w;
  LLVMValueRef wi = loop_begin(nv, &w, i64c(nv, 0), c->warps, i64c(nv, 1), "w");
  LLVMValueRef s = LLVMBuildAdd(b, c->first_slot, wi, "");
  LLVMValueRef x = LLVMBuildLoad2(
      b, r->type, LLVMBuildGEP2(b, em->t_i64, c->smem_val, &s, 1, ""), "");
  LLVMValueRef cur = LLVMBuildLoad2(b, r->type, acc, "");
  if (arg) {
    LLVMValueRef xi = LLVMBuildLoad2(
        b, em->t_i64, LLVMBuildGEP2(b, em->t_i64, c->smem_idx, &s, 1, ""), "");
    LLVMValueRef cur_i = LLVMBuildLoad2(b, em->t_i64, acc_i, "");
    LLVMValueRef take = argmax_takes(nv, r, cur, cur_i, x, xi);
    LLVMBuildStore(b, tj_emit_select(em, take, x, cur), acc);
    LLVMBuildStore(b, tj_emit_select(em, take, xi, cur_i), acc_i);
  } else {
    LLVMBuildStore(b, combine(nv, r, cur, x), acc);
  }
  if (r2) {
    LLVMValueRef x2 = LLVMBuildLoad2(
        b, r2->type, LLVMBuildGEP2(b, em->t_i64, c->smem_idx, &s, 1, ""), "");
    LLVMBuildStore(
        b, combine(nv, r2, LLVMBuildLoad2(b, r2->type, acc2, ""), x2), acc2);
  }
  tj_emit_loop_end(em, &w);
  // The slots are reused by the next phase.
  tj_nvptx_barrier(nv);
  tj_emit_if_end(em, &multi);
  *v = LLVMBuildLoad2(b, r->type, acc, "");
  if (arg) *vi = LLVMBuildLoad2(b, em->t_i64, acc_i, "");
  if (r2) *v2 = LLVMBuildLoad2(b, r2->type, acc2, "");
}

// Adds the block partial at |acc| (a vector of type |vt|, its lanes added
// first) into the compensated (Kahan) scalar total |sum| + |comp| and
// clears the partial; scalars keep the registers of a bf16x8 row for the
// loads. A non-finite total (an infinity or NaN in the row, or an overflow)
// keeps a zero compensation, so that inf - inf never makes a NaN the plain
// sum would not have made.
static void fold_compensated(tj_nvptx_emit_t* nv, const reducer_t* r,
                             LLVMTypeRef vt, int32_t lanes, LLVMValueRef acc,
                             LLVMValueRef sum, LLVMValueRef comp) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  LLVMValueRef x = LLVMBuildLoad2(b, vt, acc, "");
  if (lanes > 1) x = combine_lanes(nv, r, x, lanes);
  LLVMValueRef s = LLVMBuildLoad2(b, r->type, sum, "");
  LLVMValueRef k = LLVMBuildLoad2(b, r->type, comp, "");
  LLVMValueRef y = LLVMBuildFSub(b, x, k, "");
  LLVMValueRef t = LLVMBuildFAdd(b, s, y, "");
  LLVMValueRef lost = LLVMBuildFSub(b, LLVMBuildFSub(b, t, s, ""), y, "");
  LLVMValueRef zero = LLVMConstNull(r->type);
  LLVMValueRef finite =
      LLVMBuildFCmp(b, LLVMRealOEQ, LLVMBuildFSub(b, t, t, ""), zero, "finite");
  LLVMBuildStore(b, t, sum);
  LLVMBuildStore(b, tj_emit_select(em, finite, lost, zero), comp);
  LLVMBuildStore(b, LLVMConstNull(vt), acc);
}

// REDUCE phase |p| walked over the row, or with |count| 2 phases |p| and
// |p| + 1 together (siblings, sibling_reduce: one walk, their loads
// shared through the load cache, and one crossing of the threads).
static tj_status_t emit_reduce_phase(tj_nvptx_emit_t* nv, uint32_t p,
                                     uint32_t count, row_ctx_t* c) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  reducer_t r[2];
  LLVMTypeRef vt[2];
  LLVMValueRef acc[2], sum[2] = {NULL, NULL}, comp[2] = {NULL, NULL};
  int32_t lanes = c->lanes;
  bool arg = false;
  // Float sums: blocks of kSumBlock iterations into a compensated total.
  bool blocked[2] = {false, false};
  for (uint32_t q = 0; q < count; ++q) {
    TJ_RETURN_IF_ERROR(make_reducer(nv, p + q, &r[q]));
    arg |= r[q].kind == TJ_KIR_REDUCE_ARGMAX;
    blocked[q] = r[q].kind == TJ_KIR_REDUCE_SUM && is_float_type(r[q].type);
  }
  if (arg && count > 1)
    return tj_internal("kernel @%s: an argmax among sibling phases",
                       em->k->name);
  // (The slots in the order of the one-phase walk before siblings, so its
  // code stays as it was.)
  for (uint32_t q = 0; q < count; ++q) {
    vt[q] = tj_emit_vec(em, r[q].type, lanes);
    acc[q] = tj_emit_alloca(em, vt[q], "partial");
  }
  LLVMValueRef acc_i = tj_emit_alloca(em, em->t_i64, "partial_i");
  for (uint32_t q = 0; q < count; ++q)
    LLVMBuildStore(b, identity(nv, &r[q], lanes), acc[q]);
  LLVMBuildStore(b, i64c(nv, INT64_MAX), acc_i);
  // Argmax walks one element at a time. Other reductions take kUnroll
  // steps per iteration while they fit: the loads of all steps are issued
  // before the first is combined, so each thread keeps several 16-byte
  // loads in flight (a row-reduce block has few threads per row element).
  int32_t unroll = arg ? 1 : kUnroll;
  LLVMValueRef j_var = tj_emit_alloca(em, em->t_i64, "j");
  LLVMBuildStore(b, c->j0, j_var);
  for (uint32_t q = 0; q < count; ++q) {
    if (!blocked[q]) continue;
    sum[q] = tj_emit_alloca(em, r[q].type, "sum");
    comp[q] = tj_emit_alloca(em, r[q].type, "comp");
  }
  LLVMValueRef iters = NULL;
  if (blocked[0] || blocked[1]) iters = tj_emit_alloca(em, em->t_i64, "iters");
  for (uint32_t q = 0; q < count; ++q) {
    if (!blocked[q]) continue;
    LLVMBuildStore(b, LLVMConstNull(r[q].type), sum[q]);
    LLVMBuildStore(b, LLVMConstNull(r[q].type), comp[q]);
  }
  if (iters) LLVMBuildStore(b, i64c(nv, 0), iters);
  // Siblings read the same loads: one per step and buffer.
  tj_emit_load_cache_t cache;
  tj_emit_loop_t range_loop;
  LLVMValueRef limit = range_loop_begin(nv, c, j_var, &range_loop);
  for (int32_t pass = 0; pass < 2; ++pass) {
    int32_t steps = pass == 0 ? unroll : 1;
    if (pass == 0 && steps == 1) continue;
    LLVMBasicBlockRef cond =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "j");
    LLVMBasicBlockRef body =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "j");
    LLVMBasicBlockRef done =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "j");
    LLVMBuildBr(b, cond);
    LLVMPositionBuilderAtEnd(b, cond);
    LLVMValueRef j = LLVMBuildLoad2(b, em->t_i64, j_var, "j");
    LLVMValueRef last = LLVMBuildAdd(
        b, j, LLVMBuildMul(b, c->j_step, i64c(nv, steps - 1), ""), "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, last, limit, ""), body,
                    done);
    LLVMPositionBuilderAtEnd(b, body);
    // Loads of this step only: the cache's values must dominate their
    // uses.
    if (count > 1) {
      memset(&cache, 0, sizeof(cache));
      cache.insert = true;
      em->load_cache = &cache;
    }
    LLVMValueRef ys[2][kUnroll], js[kUnroll];
    tj_status_t status = NULL;
    for (int32_t u = 0; u < steps && !status; ++u) {
      js[u] =
          LLVMBuildAdd(b, j, LLVMBuildMul(b, c->j_step, i64c(nv, u), ""), "");
      tj_emit_point_t point;
      at_column(nv, &c->row, js[u], &point);
      point.rows = c->rows;
      if (count > 1) cache.slot = u;
      for (uint32_t q = 0; q < count && !status; ++q) {
        status = tj_emit_body(em, &em->k->phases[p + q], &point, &ys[q][u]);
        if (!status && !ys[q][u])
          status = tj_invalid("kernel @%s: phase %u yields nothing",
                              em->k->name, p + q);
      }
      if (!status && lanes > 1) tj_nvptx_align_accesses(nv, &point, lanes);
    }
    em->load_cache = NULL;
    if (status) return status;
    for (uint32_t q = 0; q < count; ++q) {
      for (int32_t u = 0; u < steps; ++u) {
        LLVMValueRef cur = LLVMBuildLoad2(b, vt[q], acc[q], "");
        if (arg) {
          LLVMValueRef cur_i = LLVMBuildLoad2(b, em->t_i64, acc_i, "");
          LLVMValueRef take =
              argmax_takes(nv, &r[q], cur, cur_i, ys[q][u], js[u]);
          LLVMBuildStore(b, tj_emit_select(em, take, ys[q][u], cur), acc[q]);
          LLVMBuildStore(b, tj_emit_select(em, take, js[u], cur_i), acc_i);
        } else {
          LLVMBuildStore(b, combine(nv, &r[q], cur, ys[q][u]), acc[q]);
        }
      }
    }
    if (iters && pass == 0) {
      LLVMValueRef n = LLVMBuildAdd(b, LLVMBuildLoad2(b, em->t_i64, iters, ""),
                                    i64c(nv, 1), "");
      LLVMBuildStore(b, n, iters);
      tj_emit_if_t full;
      tj_emit_if_begin(
          em, &full,
          LLVMBuildICmp(b, LLVMIntEQ,
                        LLVMBuildAnd(b, n, i64c(nv, kSumBlock - 1), ""),
                        i64c(nv, 0), ""),
          "block");
      for (uint32_t q = 0; q < count; ++q) {
        if (blocked[q])
          fold_compensated(nv, &r[q], vt[q], lanes, acc[q], sum[q], comp[q]);
      }
      tj_emit_if_end(em, &full);
    }
    LLVMBuildStore(
        b,
        LLVMBuildAdd(b, j, LLVMBuildMul(b, c->j_step, i64c(nv, steps), ""), ""),
        j_var);
    LLVMBuildBr(b, cond);
    LLVMPositionBuilderAtEnd(b, done);
  }
  range_loop_end(nv, c, &range_loop);
  LLVMValueRef v[2], vi = LLVMBuildLoad2(b, em->t_i64, acc_i, "");
  for (uint32_t q = 0; q < count; ++q) {
    if (blocked[q]) {
      fold_compensated(nv, &r[q], vt[q], lanes, acc[q], sum[q], comp[q]);
      v[q] = LLVMBuildFSub(b, LLVMBuildLoad2(b, r[q].type, sum[q], ""),
                           LLVMBuildLoad2(b, r[q].type, comp[q], ""), "");
    } else {
      v[q] = LLVMBuildLoad2(b, vt[q], acc[q], "");
      if (lanes > 1) v[q] = combine_lanes(nv, &r[q], v[q], lanes);
    }
  }
  reduce_across_threads(nv, &r[0], c, &v[0], &vi, count > 1 ? &r[1] : NULL,
                        count > 1 ? &v[1] : NULL);
  if (arg) {
    // An empty row has no first maximum; report index 0.
    v[0] = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntEQ, vi, i64c(nv, INT64_MAX), ""),
        i64c(nv, 0), vi);
  }
  for (uint32_t q = 0; q < count; ++q) c->rows[p + q] = v[q];
  return NULL;
}

//===--- the online softmax pair ---===//

// Whether instruction |a| of |pa| computes the same value as instruction
// |b| of |pb| (same kinds, dtypes, buffers, constants and operands, the
// operands compared the same way); |budget| bounds the comparisons.
static bool same_value(const tj_kir_phase_t* pa, uint32_t a,
                       const tj_kir_phase_t* pb, uint32_t b, int32_t* budget) {
  if (--*budget < 0 || a >= pa->num_insts || b >= pb->num_insts) return false;
  const tj_kir_inst_t* x = &pa->insts[a];
  const tj_kir_inst_t* y = &pb->insts[b];
  if (x->kind != y->kind || x->dtype != y->dtype ||
      x->num_args != y->num_args || x->ref != y->ref)
    return false;
  switch (x->kind) {
    case TJ_KIR_CONST:
      if (memcmp(&x->fvalue, &y->fvalue, sizeof(x->fvalue)) != 0 ||
          x->ivalue != y->ivalue)
        return false;
      break;
    case TJ_KIR_OP:
      if (x->op != y->op) return false;
      break;
    case TJ_KIR_LOAD:
    case TJ_KIR_LOAD_AT:
    case TJ_KIR_PARAM:
    case TJ_KIR_INDEX:
    case TJ_KIR_ROW:
      break;
    default:
      return false;
  }
  for (uint32_t i = 0; i < x->num_args; ++i)
    if (!same_value(pa, x->args[i], pb, y->args[i], budget)) return false;
  return true;
}

// Whether phases |p| and |p| + 1 are softmax's pair: REDUCE max of an f32
// value a, then REDUCE sum of exp(a - ^p) with a computed the same way
// (the lowering of softmax and log_softmax, kir/lower_reduce.c).
static bool online_pair(const tj_kir_t* k, uint32_t p) {
  if (p + 1 >= k->num_phases) return false;
  const tj_kir_phase_t* pm = &k->phases[p];
  const tj_kir_phase_t* ps = &k->phases[p + 1];
  if (pm->kind != TJ_KIR_PHASE_REDUCE || pm->reduce != TJ_KIR_REDUCE_MAX ||
      ps->kind != TJ_KIR_PHASE_REDUCE || ps->reduce != TJ_KIR_REDUCE_SUM ||
      pm->num_insts < 2 || ps->num_insts < 4)
    return false;
  const tj_kir_inst_t* ym = &pm->insts[pm->num_insts - 1];
  const tj_kir_inst_t* ys = &ps->insts[ps->num_insts - 1];
  if (ym->kind != TJ_KIR_YIELD || ys->kind != TJ_KIR_YIELD ||
      ym->dtype != TJ_DTYPE_F32 || ys->dtype != TJ_DTYPE_F32)
    return false;
  const tj_kir_inst_t* e = &ps->insts[ys->args[0]];
  if (e->kind != TJ_KIR_OP || e->op != TJ_OP_EXP || e->dtype != TJ_DTYPE_F32)
    return false;
  const tj_kir_inst_t* d = &ps->insts[e->args[0]];
  if (d->kind != TJ_KIR_OP || d->op != TJ_OP_SUB || d->dtype != TJ_DTYPE_F32)
    return false;
  const tj_kir_inst_t* r = &ps->insts[d->args[1]];
  if (r->kind != TJ_KIR_ROW || r->ref != p) return false;
  int32_t budget = 4096;
  return same_value(pm, ym->args[0], ps, d->args[0], &budget);
}

// exp(x - y) for scalars, 1 where x == y (so -inf - -inf gives no NaN).
static LLVMValueRef rescale(tj_nvptx_emit_t* nv, LLVMValueRef x,
                            LLVMValueRef y) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  LLVMValueRef e =
      tj_emit_unary(em, TJ_OP_EXP, TJ_DTYPE_F32, LLVMBuildFSub(b, x, y, ""));
  return tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOEQ, x, y, ""),
                        tj_emit_fconst(em->t_f32, 1.0), e);
}

// Softmax's pair (online_pair) in one pass over the row instead of two:
// the online normalizer (Milakov and Gimelshein, arXiv 1805.02867). A
// thread keeps a running maximum m (one scalar) and per lane a running sum
// s of exp(a - m). Each loop step evaluates the max phase's body at its
// kUnroll points, takes the step's maximum m', multiplies s by exp(m - m')
// once, and adds the sum phase's body evaluated with ^p = m' (its loads
// reuse the max body's, tj_emit_load_cache_t): one exponential an element,
// as in the two passes, plus one a step. Across threads the (m, s) pairs
// combine the same way. ^p is exact; ^p+1 differs from the two passes
// only in rounding. While m' is -inf (every element so far masked) the
// sum body runs with ^p = 0, whose exp(-inf) adds 0, so that no NaN comes
// from -inf - -inf; a row whose maximum is -inf then gets the NaN the two
// passes give (the sum of exp(-inf - -inf)), an empty row the sum 0.
static tj_status_t emit_online_pair(tj_nvptx_emit_t* nv, uint32_t p,
                                    row_ctx_t* c) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_phase_t* pm = &em->k->phases[p];
  const tj_kir_phase_t* ps = &em->k->phases[p + 1];
  reducer_t rmax, rsum;
  TJ_RETURN_IF_ERROR(make_reducer(nv, p, &rmax));
  TJ_RETURN_IF_ERROR(make_reducer(nv, p + 1, &rsum));
  const int32_t lanes = c->lanes;
  LLVMTypeRef ft = em->t_f32;
  LLVMTypeRef vt = tj_emit_vec(em, ft, lanes);
  LLVMValueRef ninf = tj_emit_fconst(ft, -__builtin_inf());
  LLVMValueRef m_var = tj_emit_alloca(em, ft, "m");
  LLVMValueRef s_var = tj_emit_alloca(em, vt, "s");
  LLVMValueRef j_var = tj_emit_alloca(em, em->t_i64, "j");
  LLVMBuildStore(b, ninf, m_var);
  LLVMBuildStore(b, LLVMConstNull(vt), s_var);
  LLVMBuildStore(b, c->j0, j_var);
  tj_emit_load_cache_t cache;
  tj_emit_loop_t range_loop;
  LLVMValueRef limit = range_loop_begin(nv, c, j_var, &range_loop);
  for (int32_t pass = 0; pass < 2; ++pass) {
    const int32_t steps = pass == 0 ? kUnroll : 1;
    LLVMBasicBlockRef cond =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "online");
    LLVMBasicBlockRef body =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "online");
    LLVMBasicBlockRef done =
        LLVMAppendBasicBlockInContext(em->ctx, em->fn, "online");
    LLVMBuildBr(b, cond);
    LLVMPositionBuilderAtEnd(b, cond);
    LLVMValueRef j = LLVMBuildLoad2(b, em->t_i64, j_var, "j");
    LLVMValueRef last = LLVMBuildAdd(
        b, j, LLVMBuildMul(b, c->j_step, i64c(nv, steps - 1), ""), "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, last, limit, ""), body,
                    done);
    LLVMPositionBuilderAtEnd(b, body);
    // Loads of this step only: the cache's values must dominate their uses.
    memset(&cache, 0, sizeof(cache));
    cache.insert = true;
    em->load_cache = &cache;
    tj_emit_point_t points[kUnroll];
    LLVMValueRef a[kUnroll], y[kUnroll];
    tj_status_t status = NULL;
    for (int32_t u = 0; u < steps && !status; ++u) {
      LLVMValueRef ju =
          LLVMBuildAdd(b, j, LLVMBuildMul(b, c->j_step, i64c(nv, u), ""), "");
      at_column(nv, &c->row, ju, &points[u]);
      points[u].rows = c->rows;
      cache.slot = u;
      status = tj_emit_body(em, pm, &points[u], &a[u]);
      if (!status && lanes > 1) tj_nvptx_align_accesses(nv, &points[u], lanes);
    }
    LLVMValueRef m = LLVMBuildLoad2(b, ft, m_var, "");
    LLVMValueRef mnew = m;
    if (!status) {
      LLVMValueRef v = a[0];
      for (int32_t u = 1; u < steps; ++u) v = combine(nv, &rmax, v, a[u]);
      if (lanes > 1) v = combine_lanes(nv, &rmax, v, lanes);
      mnew = combine(nv, &rmax, m, v);
    }
    LLVMValueRef saved = c->rows[p];
    c->rows[p] =
        tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOEQ, mnew, ninf, ""),
                       tj_emit_fconst(ft, 0.0), mnew);
    for (int32_t u = 0; u < steps && !status; ++u) {
      cache.slot = u;
      status = tj_emit_body(em, ps, &points[u], &y[u]);
    }
    c->rows[p] = saved;
    em->load_cache = NULL;
    if (status) return status;
    LLVMValueRef s = LLVMBuildLoad2(b, vt, s_var, "");
    s = LLVMBuildFMul(b, s, tj_emit_splat(em, rescale(nv, m, mnew), lanes), "");
    for (int32_t u = 0; u < steps; ++u) s = LLVMBuildFAdd(b, s, y[u], "");
    LLVMBuildStore(b, s, s_var);
    LLVMBuildStore(b, mnew, m_var);
    LLVMBuildStore(
        b,
        LLVMBuildAdd(b, j, LLVMBuildMul(b, c->j_step, i64c(nv, steps), ""), ""),
        j_var);
    LLVMBuildBr(b, cond);
    LLVMPositionBuilderAtEnd(b, done);
  }
  range_loop_end(nv, c, &range_loop);
  LLVMValueRef m = LLVMBuildLoad2(b, ft, m_var, "");
  LLVMValueRef s = LLVMBuildLoad2(b, vt, s_var, "");
  if (lanes > 1) s = combine_lanes(nv, &rsum, s, lanes);
  LLVMValueRef big = m, none = NULL;
  reduce_across_threads(nv, &rmax, c, &big, &none, NULL, NULL);
  s = LLVMBuildFMul(b, s, rescale(nv, m, big), "");
  reduce_across_threads(nv, &rsum, c, &s, &none, NULL, NULL);
  LLVMValueRef dead =
      LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOEQ, big, ninf, ""),
                   LLVMBuildICmp(b, LLVMIntSGT, c->limit, i64c(nv, 0), ""), "");
  c->rows[p] = big;
  c->rows[p + 1] =
      tj_emit_select(em, dead, tj_emit_fconst(ft, __builtin_nan("")), s);
  return NULL;
}

static tj_status_t emit_map_phase(tj_nvptx_emit_t* nv, uint32_t p,
                                  row_ctx_t* c) {
  tj_emit_t* em = &nv->em;
  tj_emit_loop_t loop;
  LLVMValueRef j = loop_begin(nv, &loop, c->j0, c->limit, c->j_step, "j");
  tj_emit_point_t point;
  at_column(nv, &c->row, j, &point);
  point.rows = c->rows;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, &em->k->phases[p], &point, NULL));
  if (c->lanes > 1) tj_nvptx_align_accesses(nv, &point, c->lanes);
  tj_emit_loop_end(em, &loop);
  return NULL;
}

static tj_status_t emit_row_phase(tj_nvptx_emit_t* nv, uint32_t p,
                                  row_ctx_t* c) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  tj_emit_if_t once;
  LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, tj_nvptx_sreg(nv, "tid.x"),
                                     LLVMConstInt(em->t_i32, 0, 0), "");
  tj_emit_if_begin(em, &once, LLVMBuildAnd(b, first, c->active, ""), "row");
  tj_emit_point_t point;
  at_column(nv, &c->row, i64c(nv, 0), &point);
  point.lanes = 1;
  point.rows = c->rows;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, &em->k->phases[p], &point, NULL));
  tj_emit_if_end(em, &once);
  return NULL;
}

// Slots of the resident path for vectors of |lanes| elements.
static int32_t row_slots(int32_t lanes) {
  int32_t slots = kRowElements / lanes;
  return slots < 1 ? 1 : slots > kMaxRowSlots ? kMaxRowSlots : slots;
}

// Whether REDUCE phase |p| + 1 is a sibling of REDUCE phase |p|: neither
// is an argmax and |p| + 1 does not read ^p, so the two can cross threads
// together (layer_norm's mean(x - m) and mean((x - m)^2)).
static bool sibling_reduce(const tj_kir_t* k, uint32_t p) {
  if (p + 1 >= k->num_phases) return false;
  const tj_kir_phase_t* a = &k->phases[p];
  const tj_kir_phase_t* b = &k->phases[p + 1];
  if (a->kind != TJ_KIR_PHASE_REDUCE || b->kind != TJ_KIR_PHASE_REDUCE ||
      a->reduce == TJ_KIR_REDUCE_ARGMAX || b->reduce == TJ_KIR_REDUCE_ARGMAX)
    return false;
  for (uint32_t i = 0; i < b->num_insts; ++i) {
    if (b->insts[i].kind == TJ_KIR_ROW && b->insts[i].ref == p) return false;
  }
  return true;
}

// The phases over a row of any length: each phase walks the row from
// memory (the later passes mostly hit L1/L2), except softmax's max and sum,
// which walk it once together (emit_online_pair), and on a staged row
// sibling phases (row_ctx_t.siblings).
static tj_status_t emit_streaming_phases(tj_nvptx_emit_t* nv, row_ctx_t* c) {
  const tj_kir_t* k = nv->em.k;
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    switch (k->phases[p].kind) {
      case TJ_KIR_PHASE_REDUCE:
        if (online_pair(k, p)) {  // softmax: max and sum in one pass
          TJ_RETURN_IF_ERROR(emit_online_pair(nv, p, c));
          ++p;
          break;
        }
        // A staged row's sibling phases (layer_norm's sums of c and c^2)
        // walk shared memory once.
        if (c->siblings && sibling_reduce(k, p)) {
          TJ_RETURN_IF_ERROR(emit_reduce_phase(nv, p, 2, c));
          ++p;
          break;
        }
        TJ_RETURN_IF_ERROR(emit_reduce_phase(nv, p, 1, c));
        break;
      case TJ_KIR_PHASE_MAP:
        TJ_RETURN_IF_ERROR(emit_map_phase(nv, p, c));
        break;
      case TJ_KIR_PHASE_ROW:
        TJ_RETURN_IF_ERROR(emit_row_phase(nv, p, c));
        break;
      case TJ_KIR_PHASE_SCAN:  // emit_scan_rows takes these kernels
        return tj_internal("kernel @%s: a scan on the row path", k->name);
    }
    // A staged row's ranges (emit_staged_phases) were the first phase's;
    // every copy has landed, and after this barrier every thread sees
    // them all.
    if (c->stage_groups > 0) {
      tj_nvptx_barrier(nv);
      c->stage_groups = 0;
    }
  }
  return NULL;
}

// The phases over a row that fits kRowSlots vectors per thread, fully
// unrolled over the slots: the first phase to read a buffer at a slot
// loads it, and later phases reuse the value (tj_emit_load_cache_t), so
// softmax and layer_norm read their row from memory once instead of once
// per phase. Every slot loads at a valid column (its own, or the row's
// first when past the end), so its value dominates the later phases; a
// reduction takes only the valid slots, a map stores only them.
static tj_status_t emit_resident_phases(tj_nvptx_emit_t* nv, row_ctx_t* c) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  tj_emit_load_cache_t cache;
  memset(&cache, 0, sizeof(cache));
  cache.slot = -1;
  cache.insert = true;
  LLVMValueRef valid[kMaxRowSlots];
  tj_emit_point_t points[kMaxRowSlots];
  const int32_t kSlots = row_slots(c->lanes);
  for (int32_t u = 0; u < kSlots; ++u) {
    LLVMValueRef j =
        LLVMBuildAdd(b, c->j0, LLVMBuildMul(b, c->j_step, i64c(nv, u), ""), "");
    valid[u] = LLVMBuildICmp(b, LLVMIntSLT, j, c->limit, "valid");
    at_column(nv, &c->row, tj_emit_select(em, valid[u], j, i64c(nv, 0)),
              &points[u]);
    points[u].rows = c->rows;
  }
  em->load_cache = &cache;
  tj_status_t status = NULL;
  for (uint32_t p = 0; p < k->num_phases && !status; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    if (ph->kind == TJ_KIR_PHASE_ROW) {
      cache.slot = -1;  // one thread, under a condition: nothing to share
      status = emit_row_phase(nv, p, c);
      continue;
    }
    if (ph->kind == TJ_KIR_PHASE_MAP) {
      // Stores only at valid slots; loads first seen here are not kept
      // (they are under the condition).
      cache.insert = false;
      for (int32_t u = 0; u < kSlots && !status; ++u) {
        tj_emit_if_t store;
        tj_emit_if_begin(em, &store, valid[u], "slot");
        cache.slot = u;
        status = tj_emit_body(em, ph, &points[u], NULL);
        if (!status) tj_nvptx_align_accesses(nv, &points[u], c->lanes);
        tj_emit_if_end(em, &store);
      }
      cache.insert = true;
      continue;
    }
    // This phase, and its sibling when it has one (sibling_reduce).
    const uint32_t count = sibling_reduce(k, p) ? 2 : 1;
    reducer_t r[2];
    LLVMValueRef v[2];
    for (uint32_t q = 0; q < count && !status; ++q) {
      status = make_reducer(nv, p + q, &r[q]);
      if (status) break;
      if (r[q].kind == TJ_KIR_REDUCE_ARGMAX) {  // argmax kernels are scalar
        status =
            tj_internal("kernel @%s: argmax on the resident path", k->name);
        break;
      }
      LLVMValueRef acc = identity(nv, &r[q], c->lanes);
      for (int32_t u = 0; u < kSlots && !status; ++u) {
        cache.slot = u;
        LLVMValueRef y = NULL;
        status = tj_emit_body(em, &k->phases[p + q], &points[u], &y);
        if (!status && !y)
          status =
              tj_invalid("kernel @%s: phase %u yields nothing", k->name, p + q);
        if (status) break;
        tj_nvptx_align_accesses(nv, &points[u], c->lanes);
        acc = tj_emit_select(em, valid[u], combine(nv, &r[q], acc, y), acc);
      }
      if (!status) v[q] = combine_lanes(nv, &r[q], acc, c->lanes);
    }
    if (status) break;
    LLVMValueRef vi = NULL;
    reduce_across_threads(nv, &r[0], c, &v[0], &vi, count > 1 ? &r[1] : NULL,
                          count > 1 ? &v[1] : NULL);
    for (uint32_t q = 0; q < count; ++q) c->rows[p + q] = v[q];
    p += count - 1;
  }
  em->load_cache = NULL;
  return status;
}

//===--- the staged row ---===//

// The dynamic shared memory a staged row may take on |arch|.
static int32_t row_stage_max_bytes(tj_nvptx_arch_t arch) {
  return arch == TJ_NVPTX_SM_90A ? kRowStageMaxSm90 : kRowStageMaxSm80;
}

// The input buffers a staged row holds in shared memory (rows32k).
typedef struct row_stage_t {
  uint32_t count;
  uint32_t buffers[TJ_KIR_MAX_BUFFERS];
  int32_t bytes;  // of an element of every staged buffer
} row_stage_t;

// The times the streaming path reads buffer |b|'s row from memory: once
// for each MAP or REDUCE phase that loads it, softmax's pair once
// (online_pair); -1 where a phase loads it at a computed offset
// (LOAD_AT), which may leave the row.
static int32_t row_reads(const tj_kir_t* k, uint32_t b) {
  int32_t reads = 0;
  bool paired = false;  // phase p is the second of an online pair
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    bool loads = false;
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      const tj_kir_inst_t* in = &ph->insts[i];
      if (in->kind == TJ_KIR_LOAD_AT && in->ref == b) return -1;
      loads |= in->kind == TJ_KIR_LOAD && in->ref == b;
    }
    if (loads && ph->kind != TJ_KIR_PHASE_ROW && !paired) ++reads;
    paired = !paired && ph->kind == TJ_KIR_PHASE_REDUCE && online_pair(k, p);
  }
  return reads;
}

// The buffers worth staging on the vector path of |lanes| lanes: inputs
// read along the row (stride 1, one row each: not stride 0 along every
// outer dim, as layer_norm's gamma is), at least twice a row by the
// streaming path, whose |lanes| elements are one 16-byte chunk; none
// where the row's length is a constant that the launch would not stage.
static void row_stage_plan(const tj_nvptx_emit_t* nv, int32_t lanes,
                           row_stage_t* out) {
  memset(out, 0, sizeof(*out));
  const tj_kir_t* k = nv->em.k;
  const int32_t inner = k->rank - 1;
  if (nv->options.row_stage_off || lanes < 2) return;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_INPUT ||
        !tj_kir_ival_is_const(buf->strides[inner], 1) ||
        lanes * elem_size(buf->dtype) != 16)
      continue;
    bool per_row = false;
    for (int32_t d = 0; d < inner; ++d)
      per_row |= !tj_kir_ival_is_const(buf->strides[d], 0);
    if (!per_row || row_reads(k, b) < 2) continue;
    out->buffers[out->count++] = b;
    out->bytes += elem_size(buf->dtype);
  }
  // A row of constant length that no launch would stage (held in
  // registers, or past the shared memory) leaves the path out.
  tj_kir_ival_t n = k->dims[inner];
  if (out->count > 0 && n.param < 0) {
    tj_nvptx_kernel_t info;
    memset(&info, 0, sizeof(info));
    info.kind = TJ_KIR_ROW_REDUCE;
    info.threads = kThreads;
    info.vector_lanes = lanes;
    info.row_slots = row_slots(lanes);
    info.row_stage_bytes = out->bytes;
    info.row_stage_buffers = (int32_t)out->count;
    info.shared_bytes = row_stage_max_bytes(nv->arch);
    uint32_t bytes = 0;
    if (!tj_nvptx_row_staged(&info, n.value, &bytes))
      memset(out, 0, sizeof(*out));
  }
}

// The threads of a staged row's block: the option's where it names them
// (TJ_NVPTX_ROWS=staged-256/-512/-1024), else by the staged bytes of a
// row of constant length. On an H100 (session 28, bench/softmax_rows.py
// under each setting, bench/RESULTS.md "Staged rows") 256 threads keep up
// with rows of up to 32 KiB, 512 with 64 KiB (an f32 row of 16384: 0.95-
// 0.99 of copy bandwidth against 0.75-0.99 on 256) and 1024 past that (f32
// 32768: 0.84-0.96 against 0.46-0.97): fewer threads leave too few loads
// in flight for one row a block, more idle at the barriers of short rows.
// A row of symbolic length keeps 256.
static int32_t row_stage_block(const tj_nvptx_emit_t* nv,
                               const row_stage_t* st) {
  if (nv->options.row_stage_threads > 0) return nv->options.row_stage_threads;
  const tj_kir_t* k = nv->em.k;
  tj_kir_ival_t n = k->dims[k->rank - 1];
  if (n.param >= 0) return kThreads;
  int64_t bytes = n.value * st->bytes;
  return bytes <= 32768 ? kThreads : bytes <= 65536 ? 512 : 1024;
}

// The byte offset of each staged buffer's row in the dynamic shared
// memory (each 16-byte aligned) and, at [count], the bytes they take,
// for rows of |length| (i64) elements.
static void row_stage_offsets(tj_nvptx_emit_t* nv, const row_stage_t* st,
                              LLVMValueRef length, LLVMValueRef* out) {
  LLVMBuilderRef b = nv->em.b;
  out[0] = i64c(nv, 0);
  for (uint32_t i = 0; i < st->count; ++i) {
    int32_t size = elem_size(nv->em.k->buffers[st->buffers[i]].dtype);
    LLVMValueRef bytes = LLVMBuildAnd(
        b,
        LLVMBuildAdd(b, LLVMBuildMul(b, length, i64c(nv, size), ""),
                     i64c(nv, 15), ""),
        i64c(nv, -16), "");
    out[i + 1] = LLVMBuildAdd(b, out[i], bytes, "stage_end");
  }
}

// The phases over a row staged in shared memory (rows32k, issue 14): the
// block (one row, ntid.y 1) copies the row of each staged buffer into
// its dynamic shared memory by 16-byte cp.async, every chunk in flight
// at once, in kStageGroups ranges of one cp.async group each, and the
// phases then run as on the streaming path with those buffers' loads
// reading shared memory (the generic pointers cast from the shared
// window, which LLVM's address-space inference turns into ld.shared), so
// the row leaves DRAM once whatever the phases. A first REDUCE phase
// walks each range as soon as its group has landed, the rest still in
// flight (row_ctx_t.stage_groups): with one block an SM (an f32 row of
// 32768, 128 KiB) nothing else would overlap the copy. A barrier after
// the phases keeps the next row's copy from overwriting a row still
// being read.
static tj_status_t emit_staged_phases(tj_nvptx_emit_t* nv, const row_ctx_t* c,
                                      const row_stage_t* st,
                                      const LLVMValueRef* offsets) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_t* k = em->k;
  LLVMValueRef smem = tj_nvptx_dynamic_shared(nv);
  LLVMValueRef tid = tj_nvptx_sreg64(nv, "tid.x");
  LLVMValueRef ntid = tj_nvptx_sreg64(nv, "ntid.x");
  row_ctx_t s = *c;
  // A first REDUCE phase walks the row range by range as the copies land
  // (row_ctx_t.stage_groups); any other first phase waits for them all.
  const int32_t groups =
      k->phases[0].kind == TJ_KIR_PHASE_REDUCE ? kStageGroups : 1;
  // Range g: vectors [V g / groups, V (g + 1) / groups) of the row's V; a
  // staged buffer's vector is one 16-byte chunk (row_stage_plan), and the
  // vector path's rows are whole vectors, 16-byte aligned (vector_ok).
  LLVMValueRef vectors = LLVMBuildUDiv(b, c->limit, i64c(nv, c->lanes), "");
  LLVMValueRef dst[TJ_KIR_MAX_BUFFERS], src[TJ_KIR_MAX_BUFFERS];
  for (uint32_t i = 0; i < st->count; ++i) {
    uint32_t buf = st->buffers[i];
    LLVMValueRef off = offsets[i];
    dst[i] = LLVMBuildGEP2(b, em->t_i8, smem, &off, 1, "stage");
    src[i] = LLVMBuildAddrSpaceCast(b, c->row.ptr[buf], nv->t_ptr_global, "");
    s.row.ptr[buf] = LLVMBuildAddrSpaceCast(b, dst[i], em->t_ptr, "staged");
  }
  for (int32_t g = 0; g < groups; ++g) {
    for (uint32_t i = 0; i < st->count; ++i) {
      tj_emit_loop_t copy;
      LLVMValueRef q = loop_begin(
          nv, &copy,
          LLVMBuildAdd(b, stage_range(nv, vectors, g, groups), tid, ""),
          stage_range(nv, vectors, g + 1, groups), ntid, "copy");
      LLVMValueRef at = LLVMBuildMul(b, q, i64c(nv, 16), "");
      LLVMValueRef args[2] = {
          LLVMBuildGEP2(b, em->t_i8, dst[i], &at, 1, ""),
          LLVMBuildGEP2(b, em->t_i8, src[i], &at, 1, ""),
      };
      tj_emit_intrinsic(em, "llvm.nvvm.cp.async.cg.shared.global.16", NULL, 0,
                        args, 2);
      tj_emit_loop_end(em, &copy);
    }
    tj_emit_intrinsic(em, "llvm.nvvm.cp.async.commit.group", NULL, 0, NULL, 0);
  }
  s.siblings = true;
  if (groups > 1) {
    s.stage_groups = groups;
    s.stage_vectors = vectors;
  } else {
    tj_emit_intrinsic(em, "llvm.nvvm.cp.async.wait.all", NULL, 0, NULL, 0);
    tj_nvptx_barrier(nv);
  }
  TJ_RETURN_IF_ERROR(emit_streaming_phases(nv, &s));
  tj_nvptx_barrier(nv);
  return NULL;
}

// Whether the block stages its row: the launch gave it a row per block
// (ntid.y 1) and the shared memory the staged buffers take
// (%dynamic_smem_size, so the launch alone decides: tj_nvptx_row_staged).
static LLVMValueRef row_staged(tj_nvptx_emit_t* nv, LLVMValueRef need) {
  tj_emit_t* em = &nv->em;
  LLVMBuilderRef b = em->b;
  LLVMValueRef dyn = tj_emit_inline_asm(
      em, em->t_i32, "mov.u32 $0, %dynamic_smem_size;", "=r", NULL, 0);
  LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntULE, need,
                                  LLVMBuildZExt(b, dyn, em->t_i64, ""), "");
  ok = LLVMBuildAnd(b, ok,
                    LLVMBuildICmp(b, LLVMIntEQ, tj_nvptx_sreg(nv, "ntid.y"),
                                  LLVMConstInt(em->t_i32, 1, 0), ""),
                    "");
  return LLVMBuildAnd(
      b, ok, LLVMBuildICmp(b, LLVMIntSGT, need, i64c(nv, 0), ""), "staged");
}

static tj_status_t emit_reduce_path(tj_nvptx_emit_t* nv, int32_t lanes,
                                    LLVMValueRef smem_val,
                                    LLVMValueRef smem_idx) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  int32_t inner = k->rank - 1;
  row_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.lanes = lanes;
  c.smem_val = smem_val;
  c.smem_idx = smem_idx;
  LLVMValueRef tid_x = tj_nvptx_sreg64(nv, "tid.x");
  LLVMValueRef tid_y = tj_nvptx_sreg64(nv, "tid.y");
  LLVMValueRef ntid_x = tj_nvptx_sreg64(nv, "ntid.x");
  LLVMValueRef ntid_y = tj_nvptx_sreg64(nv, "ntid.y");
  c.lane = tj_nvptx_sreg(nv, "laneid");
  c.warps = LLVMBuildUDiv(b, ntid_x, i64c(nv, 32), "warps");
  c.threads = ntid_x;
  c.first_slot = LLVMBuildMul(b, tid_y, c.warps, "");
  c.warp_slot = LLVMBuildAdd(b, c.first_slot,
                             LLVMBuildUDiv(b, tid_x, i64c(nv, 32), ""), "slot");
  c.j0 = LLVMBuildMul(b, tid_x, i64c(nv, lanes), "");
  c.j_step = LLVMBuildMul(b, ntid_x, i64c(nv, lanes), "");
  LLVMValueRef rows = outer_size(nv, inner);
  // Every thread runs every group iteration (barriers inside); a thread
  // whose row is past the end just has an empty element range.
  tj_emit_loop_t groups;
  LLVMValueRef group0 =
      LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.x"), ntid_y, "");
  LLVMValueRef group_step =
      LLVMBuildMul(b, tj_nvptx_sreg64(nv, "nctaid.x"), ntid_y, "");
  LLVMValueRef group =
      loop_begin(nv, &groups, group0, rows, group_step, "rows");
  LLVMValueRef row = LLVMBuildAdd(b, group, tid_y, "row");
  c.active = LLVMBuildICmp(b, LLVMIntSLT, row, rows, "active");
  c.limit = tj_emit_select(em, c.active, em->dim[inner], i64c(nv, 0));
  c.row.lanes = lanes;
  c.row.vdim = inner;
  tj_emit_decompose(em, tj_emit_select(em, c.active, row, i64c(nv, 0)), inner,
                    &c.row);
  if (lanes == 1) {
    TJ_RETURN_IF_ERROR(emit_streaming_phases(nv, &c));
  } else {
    // A row of at most kRowSlots vectors per thread (non-empty: the
    // resident path loads at clamped columns, which must exist) is read
    // from memory once; longer rows stream through the phases. The
    // condition is uniform over the block, so the barriers inside stay
    // convergent.
    LLVMValueRef length = em->dim[inner];
    LLVMValueRef fits = LLVMBuildAnd(
        b, LLVMBuildICmp(b, LLVMIntSGT, length, i64c(nv, 0), ""),
        LLVMBuildICmp(b, LLVMIntSLE, length,
                      LLVMBuildMul(b, c.j_step, i64c(nv, row_slots(lanes)), ""),
                      ""),
        "resident");
    tj_emit_if_t resident, staged, streaming;
    tj_emit_if_begin(em, &resident, fits, "resident");
    TJ_RETURN_IF_ERROR(emit_resident_phases(nv, &c));
    tj_emit_if_end(em, &resident);
    LLVMValueRef rest = LLVMBuildNot(b, fits, "");
    // A longer row staged in shared memory where the launch allows it
    // (tj_nvptx_row_staged), else streamed.
    row_stage_t st;
    row_stage_plan(nv, lanes, &st);
    if (st.count > 0) {
      LLVMValueRef offsets[TJ_KIR_MAX_BUFFERS + 1];
      row_stage_offsets(nv, &st, length, offsets);
      LLVMValueRef take =
          LLVMBuildAnd(b, rest, row_staged(nv, offsets[st.count]), "staged");
      tj_emit_if_begin(em, &staged, take, "staged");
      TJ_RETURN_IF_ERROR(emit_staged_phases(nv, &c, &st, offsets));
      tj_emit_if_end(em, &staged);
      rest = LLVMBuildAnd(b, rest, LLVMBuildNot(b, take, ""), "");
      nv->info->row_stage_bytes = st.bytes;
      nv->info->row_stage_buffers = (int32_t)st.count;
      nv->info->row_stage_threads = row_stage_block(nv, &st);
      nv->info->shared_bytes = row_stage_max_bytes(nv->arch);
    }
    tj_emit_if_begin(em, &streaming, rest, "streaming");
    TJ_RETURN_IF_ERROR(emit_streaming_phases(nv, &c));
    tj_emit_if_end(em, &streaming);
    nv->info->row_slots = row_slots(lanes);
  }
  tj_emit_loop_end(em, &groups);
  return NULL;
}

// A kernel of SCAN phases (ops3, issue 15): each thread takes whole rows
// (grid-stride over them) and walks each one element after the other, in
// order (backwards when reverse), carrying the running combine that the
// body reads as ^p. Rows are independent, so the threads of a warp read
// neighbouring rows: coalesced when the scanned dim is not the innermost
// in memory (a cumsum over axis 0), L1-served lines when it is.
static tj_status_t emit_scan_rows(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    if (k->phases[p].kind != TJ_KIR_PHASE_SCAN)
      return tj_unsupported("kernel @%s: a scan beside other phases", k->name);
  }
  nv->info->vector_lanes = 1;
  nv->info->scan_rows = true;
  int32_t inner = k->rank - 1;
  LLVMValueRef len = em->dim[inner];
  LLVMValueRef rows = outer_size(nv, inner);
  LLVMValueRef ntid = tj_nvptx_sreg64(nv, "ntid.x");
  LLVMValueRef first =
      LLVMBuildAdd(b, LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.x"), ntid, ""),
                   tj_nvptx_sreg64(nv, "tid.x"), "");
  LLVMValueRef step =
      LLVMBuildMul(b, tj_nvptx_sreg64(nv, "nctaid.x"), ntid, "");
  LLVMValueRef results[64] = {0};
  tj_emit_loop_t rloop;
  LLVMValueRef r = loop_begin(nv, &rloop, first, rows, step, "scan_row");
  tj_emit_point_t row;
  memset(&row, 0, sizeof(row));
  row.lanes = 1;
  row.vdim = inner;
  row.rows = results;
  tj_emit_decompose(em, r, inner, &row);
  row.index[inner] = i64c(nv, 0);
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    reducer_t red;
    TJ_RETURN_IF_ERROR(make_reducer(nv, p, &red));
    LLVMValueRef acc = tj_emit_alloca(em, red.type, "scan");
    LLVMBuildStore(b, identity(nv, &red, 1), acc);
    tj_emit_loop_t loop;
    LLVMValueRef i = loop_begin(nv, &loop, i64c(nv, 0), len, i64c(nv, 1), "j");
    LLVMValueRef j =
        ph->reverse
            ? LLVMBuildSub(b, LLVMBuildSub(b, len, i64c(nv, 1), ""), i, "")
            : i;
    tj_emit_point_t point;
    at_column(nv, &row, j, &point);
    point.lanes = 1;
    point.mask = NULL;
    LLVMValueRef prefix = LLVMBuildLoad2(b, red.type, acc, "prefix");
    results[p] = prefix;
    LLVMValueRef y = NULL;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &point, &y));
    if (!y)
      return tj_invalid("kernel @%s: scan phase %u yields nothing", k->name, p);
    LLVMBuildStore(b, combine(nv, &red, prefix, y), acc);
    tj_emit_loop_end(em, &loop);
    results[p] = NULL;
  }
  tj_emit_loop_end(em, &rloop);
  return NULL;
}

static tj_status_t emit_row_reduce(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  if (k->num_phases > 64)
    return tj_unsupported("kernel @%s: %u phases; the GPU path takes 64",
                          k->name, k->num_phases);
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    if (k->phases[p].kind == TJ_KIR_PHASE_SCAN) return emit_scan_rows(nv);
  }
  bool any_argmax = false;
  for (uint32_t p = 0; p < k->num_phases; ++p)
    any_argmax |= k->phases[p].kind == TJ_KIR_PHASE_REDUCE &&
                  k->phases[p].reduce == TJ_KIR_REDUCE_ARGMAX;
  LLVMValueRef smem_val = tj_nvptx_shared_array(nv, "tj_row_partials", 32 * 8);
  LLVMValueRef smem_idx = tj_nvptx_shared_array(nv, "tj_row_indices", 32 * 8);
  // Argmax tracks one index per thread: scalar elements only.
  int32_t lanes = any_argmax ? 1 : vector_lanes(k);
  nv->info->vector_lanes = lanes;
  if (lanes == 1) return emit_reduce_path(nv, 1, smem_val, smem_idx);
  LLVMValueRef ok = vector_ok(nv, lanes);
  tj_emit_if_t vec, scalar;
  tj_emit_if_begin(em, &vec, ok, "vector");
  TJ_RETURN_IF_ERROR(emit_reduce_path(nv, lanes, smem_val, smem_idx));
  tj_emit_if_end(em, &vec);
  tj_emit_if_begin(em, &scalar, LLVMBuildNot(em->b, ok, ""), "scalar");
  TJ_RETURN_IF_ERROR(emit_reduce_path(nv, 1, smem_val, smem_idx));
  tj_emit_if_end(em, &scalar);
  return NULL;
}

//===--- the kernel function ---===//

static void annotate(tj_nvptx_emit_t* nv, const char* key, int32_t value) {
  tj_emit_t* em = &nv->em;
  LLVMMetadataRef md[3] = {
      LLVMValueAsMetadata(em->fn),
      LLVMMDStringInContext2(em->ctx, key, strlen(key)),
      LLVMValueAsMetadata(LLVMConstInt(em->t_i32, (unsigned)value, 0)),
  };
  LLVMAddNamedMetadataOperand(
      em->mod, "nvvm.annotations",
      LLVMMetadataAsValue(em->ctx, LLVMMDNodeInContext2(em->ctx, md, 3)));
}

// Parameters |first| to |first| + |count| - 1 of the kernel are CUtensorMaps
// passed by value (128 bytes, 64-byte aligned) and read in place: byval, and
// "grid_constant" in nvvm.annotations so that LLVM keeps them in the
// parameter space (cvta.param gives their generic address, which TMA
// takes) instead of copying them to a local stack slot.
static void tensor_map_params(tj_nvptx_emit_t* nv, uint32_t first,
                              uint32_t count) {
  tj_emit_t* em = &nv->em;
  LLVMTypeRef words = LLVMArrayType2(em->t_i64, 16);
  LLVMTypeRef map = LLVMStructTypeInContext(em->ctx, &words, 1, 1);
  const char* byval = "byval";
  const char* align = "align";
  // One entry a map: |count| is at most 4 (A, B, a dual GEMM's B2, the
  // output's), as nv->tensor_map holds.
  LLVMMetadataRef index[TJ_ARRAY_SIZE(nv->tensor_map)];
  for (uint32_t i = 0; i < count; ++i) {
    unsigned at = first + i + 1;  // attribute index 0 is the return value
    LLVMAddAttributeAtIndex(
        em->fn, at,
        LLVMCreateTypeAttribute(
            em->ctx, LLVMGetEnumAttributeKindForName(byval, strlen(byval)),
            map));
    LLVMAddAttributeAtIndex(
        em->fn, at,
        LLVMCreateEnumAttribute(
            em->ctx, LLVMGetEnumAttributeKindForName(align, strlen(align)),
            64));
    nv->tensor_map[i] = LLVMGetParam(em->fn, first + i);
    index[i] = LLVMValueAsMetadata(LLVMConstInt(em->t_i32, at, 0));
  }
  const char* key = "grid_constant";
  LLVMMetadataRef md[3] = {
      LLVMValueAsMetadata(em->fn),
      LLVMMDStringInContext2(em->ctx, key, strlen(key)),
      LLVMMDNodeInContext2(em->ctx, index, count),
  };
  LLVMAddNamedMetadataOperand(
      em->mod, "nvvm.annotations",
      LLVMMetadataAsValue(em->ctx, LLVMMDNodeInContext2(em->ctx, md, 3)));
}

static void init_types(tj_emit_t* em, LLVMModuleRef module) {
  em->mod = module;
  em->ctx = LLVMGetModuleContext(module);
  em->t_void = LLVMVoidTypeInContext(em->ctx);
  em->t_i1 = LLVMInt1TypeInContext(em->ctx);
  em->t_i8 = LLVMInt8TypeInContext(em->ctx);
  em->t_i16 = LLVMInt16TypeInContext(em->ctx);
  em->t_i32 = LLVMInt32TypeInContext(em->ctx);
  em->t_i64 = LLVMInt64TypeInContext(em->ctx);
  em->t_f16 = LLVMHalfTypeInContext(em->ctx);
  em->t_f32 = LLVMFloatTypeInContext(em->ctx);
  em->t_f64 = LLVMDoubleTypeInContext(em->ctx);
  em->t_ptr = LLVMPointerTypeInContext(em->ctx, 0);
}

static tj_status_t emit_function(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  tj_nvptx_kernel_t* info = nv->info;
  if (k->rank < 1 || k->rank > TJ_KIR_MAX_RANK || k->num_phases < 1)
    return tj_invalid("kernel @%s: no iteration space or no phases", k->name);
  if (LLVMGetNamedFunction(em->mod, info->entry))
    return tj_invalid("kernel @%s: two kernels with this name in one module",
                      k->name);
  uint32_t n = k->num_buffers + k->num_params;
  LLVMTypeRef params[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS + 5];
  for (uint32_t i = 0; i < k->num_buffers; ++i) params[i] = em->t_ptr;
  for (uint32_t i = 0; i < k->num_params; ++i)
    params[k->num_buffers + i] = em->t_i64;
  bool maps = k->kind == TJ_KIR_GEMM && nv->options.gemm_tma;
  // The output's map and its flag (tj_nvptx_kernel_t.tma_store), after a
  // dual GEMM's B2 map (swiglu, issue 14).
  bool store = maps && nv->options.gemm_tma_store;
  bool dual = maps && tj_kir_gemm_is_dual(k);
  uint32_t num_maps = maps ? 2 + (dual ? 1 : 0) + (store ? 1 : 0) : 0;
  for (uint32_t i = 0; i < num_maps; ++i) params[n + i] = em->t_ptr;
  if (store) params[n + num_maps] = em->t_i32;
  em->fn = LLVMAddFunction(
      em->mod, info->entry,
      LLVMFunctionType(em->t_void, params, n + num_maps + (store ? 1 : 0), 0));
  LLVMSetFunctionCallConv(em->fn, LLVMPTXKernelCallConv);
  if (maps) tensor_map_params(nv, n, num_maps);
  if (store) nv->store_map_ok = LLVMGetParam(em->fn, n + num_maps);
  info->tma_store = store;
  const char* nounwind = "nounwind";
  LLVMAddAttributeAtIndex(
      em->fn, LLVMAttributeFunctionIndex,
      LLVMCreateEnumAttribute(
          em->ctx, LLVMGetEnumAttributeKindForName(nounwind, strlen(nounwind)),
          0));
  em->entry = LLVMAppendBasicBlockInContext(em->ctx, em->fn, "entry");
  LLVMPositionBuilderAtEnd(em->b, em->entry);
  for (uint32_t i = 0; i < k->num_buffers; ++i)
    em->base[i] = LLVMGetParam(em->fn, i);
  for (uint32_t i = 0; i < k->num_params; ++i)
    em->scalar[i] = LLVMGetParam(em->fn, k->num_buffers + i);
  for (int32_t d = 0; d < k->rank; ++d)
    em->dim[d] = tj_emit_ival(em, k->dims[d]);
  em->gemm_k = tj_emit_ival(em, k->gemm_k);
  tj_status_t s = NULL;
  switch (k->kind) {
    case TJ_KIR_POINTWISE:
      info->threads = kThreads;
      s = emit_pointwise(nv);
      break;
    case TJ_KIR_ROW_REDUCE:
      info->threads = kThreads;
      info->min_blocks_per_sm = kRowBlocksPerSm;
      s = emit_row_reduce(nv);
      break;
    case TJ_KIR_GEMM:
      s = tj_nvptx_emit_gemm(nv);
      break;
    case TJ_KIR_ATTENTION:
      s = tj_nvptx_emit_attention(nv);
      break;
    case TJ_KIR_CONV:
      s = tj_nvptx_emit_conv(nv);
      break;
    default:
      s = tj_invalid("kernel @%s: unknown template %d", k->name, (int)k->kind);
  }
  if (!s && em->error) {
    s = em->error;
    em->error = NULL;
  }
  if (s) return s;
  LLVMBuildRetVoid(em->b);
  // A staged row's blocks may be larger (row_stage_threads): the
  // register budget stays that of min_blocks_per_sm blocks of |threads|.
  int32_t max_threads = info->threads, min_blocks = info->min_blocks_per_sm;
  if (info->row_stage_threads > max_threads) {
    min_blocks = min_blocks * max_threads / info->row_stage_threads;
    max_threads = info->row_stage_threads;
  }
  annotate(nv, "maxntidx", max_threads);
  // GEMM blocks are sized so that two share an SM (one's epilogue then
  // overlaps the other's main loop), row reductions so that enough rows
  // are in flight: ask ptxas for registers that allow it.
  if (min_blocks > 0) annotate(nv, "minctasm", min_blocks);
  return NULL;
}

tj_status_t tj_nvptx_emit_kernel(LLVMModuleRef module, tj_nvptx_arch_t arch,
                                 const tj_kir_t* kernel,
                                 const tj_nvptx_options_t* options,
                                 tj_nvptx_kernel_t* out_kernel) {
  memset(out_kernel, 0, sizeof(*out_kernel));
  if (kernel->num_buffers > TJ_KIR_MAX_BUFFERS ||
      kernel->num_params > TJ_KIR_MAX_PARAMS)
    return tj_invalid("kernel @%s: too many buffers or params", kernel->name);
  TJ_RETURN_IF_ERROR(check_bodies(kernel, options));
  int n = snprintf(out_kernel->entry, sizeof(out_kernel->entry), "tj_kernel_%s",
                   kernel->name);
  if (n < 0 || (size_t)n >= sizeof(out_kernel->entry))
    return tj_invalid("kernel @%s: name too long", kernel->name);
  out_kernel->kind = kernel->kind;
  out_kernel->num_buffers = kernel->num_buffers;
  out_kernel->num_params = kernel->num_params;
  tj_nvptx_emit_t nv;
  memset(&nv, 0, sizeof(nv));
  init_types(&nv.em, module);
  nv.em.k = kernel;
  // The GPU has FMA, f16 conversions (cvt.f32.f16) and, from sm_80 (every
  // target here), f32 -> bf16 ones (cvt.rn.bf16.f32).
  nv.em.target.lanes = 4;
  nv.em.target.has_fma = true;
  nv.em.target.has_f16c = true;
  nv.em.target.has_bf16_cvt = true;
  nv.em.target.has_cvt_x2 = true;
  nv.em.target.recip_invariant_div = true;
  nv.em.target.strided_as_gather = true;
  nv.em.target.libm_prefix = "__nv_";
  if (options && options->approx_math) {
    nv.em.target.unary_f32 = tj_nvptx_approx_unary;
    nv.em.target.gelu_half = tj_nvptx_gelu_erf;
  }
  nv.em.b = LLVMCreateBuilderInContext(nv.em.ctx);
  nv.arch = arch;
  if (options) nv.options = *options;
  nv.t_ptr_shared = LLVMPointerTypeInContext(nv.em.ctx, 3);
  nv.t_ptr_global = LLVMPointerTypeInContext(nv.em.ctx, 1);
  nv.info = out_kernel;
  tj_status_t s = emit_function(&nv);
  tj_status_free(nv.em.error);
  LLVMDisposeBuilder(nv.em.b);
  if (!s) s = check_no_calls(module, kernel->name, options);
  if (s && nv.em.fn) LLVMDeleteFunction(nv.em.fn);
  return s;
}

//===--- launch configuration ---===//

static uint32_t next_pow2(int64_t v) {
  uint32_t p = 1;
  while ((int64_t)p < v && p < (1u << 30)) p <<= 1;
  return p;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static tj_status_t eval_dims(const tj_kir_t* k, const int64_t* scalars,
                             int64_t* dims, int64_t* out_outer) {
  int64_t outer = 1;
  for (int32_t d = 0; d < k->rank; ++d) {
    dims[d] = tj_kir_ival_eval(k->dims[d], scalars);
    if (dims[d] < 0)
      return tj_invalid("kernel @%s: dim %d is %lld", k->name, (int)d,
                        (long long)dims[d]);
  }
  for (int32_t d = 0; d + 1 < k->rank; ++d) {
    if (tj_mul_overflow_i64(outer, dims[d], &outer))
      return tj_invalid("kernel @%s: the iteration space overflows int64",
                        k->name);
  }
  *out_outer = outer;
  return NULL;
}

tj_status_t tj_nvptx_launch_config(const tj_kir_t* kernel,
                                   const tj_nvptx_kernel_t* info,
                                   const int64_t* scalars, int32_t num_sms,
                                   tj_nvptx_launch_t* out_launch) {
  memset(out_launch, 0, sizeof(*out_launch));
  if (kernel->kind == TJ_KIR_GEMM)
    return tj_nvptx_gemm_launch(kernel, info, scalars, num_sms, out_launch);
  if (kernel->kind == TJ_KIR_ATTENTION)
    return tj_nvptx_attention_launch(kernel, info, scalars, out_launch);
  if (kernel->kind == TJ_KIR_CONV)
    return tj_nvptx_conv_launch(kernel, info, scalars, num_sms, out_launch);
  int64_t dims[TJ_KIR_MAX_RANK];
  int64_t rows = 0;
  TJ_RETURN_IF_ERROR(eval_dims(kernel, scalars, dims, &rows));
  int64_t length = dims[kernel->rank - 1];
  int64_t items = ceil_div(length, info->vector_lanes);
  out_launch->block[2] = out_launch->grid[2] = 1;
  if (kernel->kind == TJ_KIR_POINTWISE) {
    if (rows == 0 || length == 0) {
      out_launch->empty = true;
      return NULL;
    }
    // Each thread takes items_per_thread items, so a row needs that many
    // times fewer threads.
    int32_t per = info->items_per_thread > 1 ? info->items_per_thread : 1;
    int64_t threads_per_row = ceil_div(items, per);
    uint32_t tx = next_pow2(threads_per_row);
    if (tx > (uint32_t)info->threads) tx = (uint32_t)info->threads;
    uint32_t ty = (uint32_t)info->threads / tx;
    int64_t gx = ceil_div(threads_per_row, tx), gy = ceil_div(rows, ty);
    out_launch->block[0] = tx;
    out_launch->block[1] = ty;
    out_launch->grid[0] = (uint32_t)(gx < kMaxGridX ? gx : kMaxGridX);
    out_launch->grid[1] = (uint32_t)(gy < kMaxGridY ? gy : kMaxGridY);
    return NULL;
  }
  // ROW_REDUCE: a row per ntid.x threads, a power of two; below a warp,
  // the warp holds 32 / ntid.x rows and its shuffles stay inside each
  // (reduce_across_threads).
  if (rows == 0) {
    out_launch->empty = true;
    return NULL;
  }
  if (info->scan_rows) {  // a thread per row
    int64_t g = ceil_div(rows, info->threads);
    int64_t cap = (int64_t)(num_sms > 0 ? num_sms : 1) * 32;
    out_launch->block[0] = (uint32_t)info->threads;
    out_launch->block[1] = 1;
    out_launch->grid[0] = (uint32_t)(g < cap ? g : cap);
    out_launch->grid[1] = 1;
    return NULL;
  }
  // A row staged in shared memory (rows32k): a block of |threads| a row.
  uint32_t staged_bytes = 0;
  if (tj_nvptx_row_staged(info, length, &staged_bytes)) {
    int64_t cap = (int64_t)(num_sms > 0 ? num_sms : 1) * 32;
    out_launch->block[0] =
        (uint32_t)(info->row_stage_threads > 0 ? info->row_stage_threads
                                               : info->threads);
    out_launch->block[1] = 1;
    out_launch->grid[0] = (uint32_t)(rows < cap ? rows : cap);
    out_launch->grid[1] = 1;
    out_launch->shared_bytes = staged_bytes;
    return NULL;
  }
  // With a resident path, as few threads per row as hold it in
  // row_slots vectors each: short rows then share a block, and rows of at
  // most 31 x row_slots vectors a warp (a head's 64 or 128 elements: 4 or
  // 8 threads), instead of idling most of a warp or a 256-thread block.
  int64_t per_row =
      info->row_slots > 0 ? ceil_div(items, info->row_slots) : items;
  uint32_t tx = next_pow2(per_row);
  if (tx > (uint32_t)info->threads) tx = (uint32_t)info->threads;
  uint32_t ty = (uint32_t)info->threads / tx;
  int64_t g = ceil_div(rows, ty);
  // Enough resident blocks to fill the GPU; more only add loop overhead.
  int64_t cap = (int64_t)(num_sms > 0 ? num_sms : 1) * 32;
  out_launch->block[0] = tx;
  out_launch->block[1] = ty;
  out_launch->grid[0] = (uint32_t)(g < cap ? g : cap);
  out_launch->grid[1] = 1;
  return NULL;
}

bool tj_nvptx_row_staged(const tj_nvptx_kernel_t* info, int64_t length,
                         uint32_t* out_bytes) {
  *out_bytes = 0;
  const int32_t lanes = info->vector_lanes;
  if (info->kind != TJ_KIR_ROW_REDUCE || info->row_stage_bytes <= 0 ||
      lanes < 2 || length <= 0 || length % lanes != 0)
    return false;
  // Rows the resident path holds in registers stay there.
  if (ceil_div(length, lanes) <= (int64_t)info->threads * info->row_slots)
    return false;
  if (length > (INT32_MAX - 16 * (int64_t)info->row_stage_buffers) /
                   info->row_stage_bytes)
    return false;
  int64_t need =
      length * info->row_stage_bytes + 16 * (int64_t)info->row_stage_buffers;
  if (need < kRowStageMinBytes || need > info->shared_bytes) return false;
  *out_bytes = (uint32_t)need;
  return true;
}
