// Kernel IR -> LLVM IR: module entry point, types, control flow helpers,
// loads and stores with dtype conversion, and the per-op semantics of
// kernel bodies. The templates live in emit_pointwise.c, emit_reduce.c and
// emit_gemm.c; transcendentals in vecmath.c.

#include "jit/emit_llvm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/vecmath.h"
#include "lib/dtype.h"

//===--- types and constants ---===//

LLVMTypeRef tj_emit_compute_type(tj_emit_t* em, tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F32:
    case TJ_DTYPE_F16:
    case TJ_DTYPE_BF16:
      return em->t_f32;
    case TJ_DTYPE_F64:
      return em->t_f64;
    case TJ_DTYPE_I8:
    case TJ_DTYPE_F8E4M3:  // float8: the bits (casts convert them)
    case TJ_DTYPE_F8E5M2:
    case TJ_DTYPE_F8E4M3FNUZ:
    case TJ_DTYPE_F8E5M2FNUZ:
    case TJ_DTYPE_F4E2M1:
    case TJ_DTYPE_F8E8M0:
    case TJ_DTYPE_I4:  // held sign-extended; every result is wrapped
    case TJ_DTYPE_I2:
    case TJ_DTYPE_U4:  // held zero-extended; every result is masked
    case TJ_DTYPE_U2:
      return em->t_i8;
    case TJ_DTYPE_U8:   // held zero-extended; every u8 result is masked
    case TJ_DTYPE_U16:  // likewise
    case TJ_DTYPE_I16:  // held sign-extended; every i16 result is wrapped
    case TJ_DTYPE_I32:
      return em->t_i32;
    case TJ_DTYPE_U32:  // held zero-extended; every u32 result is masked
    case TJ_DTYPE_U64:  // its bits: unsigned operations (emit_binary)
    case TJ_DTYPE_I64:
      return em->t_i64;
    case TJ_DTYPE_BOOL:
      return em->t_i1;
    default:
      return em->t_f32;
  }
}

LLVMTypeRef tj_emit_memory_type(tj_emit_t* em, tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F16:
      return em->target.has_f16c ? em->t_f16 : em->t_i16;
    case TJ_DTYPE_BF16:
      return em->t_i16;
    case TJ_DTYPE_BOOL:
    case TJ_DTYPE_U8:
      return em->t_i8;
    case TJ_DTYPE_I16:
    case TJ_DTYPE_U16:
      return em->t_i16;
    case TJ_DTYPE_U32:
      return em->t_i32;
    default:
      return tj_emit_compute_type(em, dtype);
  }
}

LLVMTypeRef tj_emit_vec(tj_emit_t* em, LLVMTypeRef scalar, int32_t lanes) {
  (void)em;
  return lanes == 1 ? scalar : LLVMVectorType(scalar, (unsigned)lanes);
}

int32_t tj_emit_lanes_of(LLVMTypeRef type) {
  return LLVMGetTypeKind(type) == LLVMVectorTypeKind
             ? (int32_t)LLVMGetVectorSize(type)
             : 1;
}

static LLVMTypeRef elem_of(LLVMTypeRef type) {
  return LLVMGetTypeKind(type) == LLVMVectorTypeKind ? LLVMGetElementType(type)
                                                     : type;
}

LLVMTypeRef tj_emit_int_like(tj_emit_t* em, LLVMTypeRef type) {
  LLVMTypeRef e = elem_of(type);
  LLVMTypeRef i =
      LLVMGetTypeKind(e) == LLVMDoubleTypeKind ? em->t_i64 : em->t_i32;
  return tj_emit_vec(em, i, tj_emit_lanes_of(type));
}

static LLVMValueRef splat_const(LLVMTypeRef type, LLVMValueRef c) {
  int32_t lanes = tj_emit_lanes_of(type);
  if (lanes == 1) return c;
  LLVMValueRef elems[64];
  for (int32_t i = 0; i < lanes && i < 64; ++i) elems[i] = c;
  return LLVMConstVector(elems, (unsigned)lanes);
}

LLVMValueRef tj_emit_fconst(LLVMTypeRef type, double value) {
  return splat_const(type, LLVMConstReal(elem_of(type), value));
}

LLVMValueRef tj_emit_iconst(LLVMTypeRef type, int64_t value) {
  return splat_const(type,
                     LLVMConstInt(elem_of(type), (unsigned long long)value, 1));
}

LLVMValueRef tj_emit_splat(tj_emit_t* em, LLVMValueRef value, int32_t lanes) {
  if (lanes == 1) return value;
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(value), (unsigned)lanes);
  if (LLVMIsConstant(value)) return splat_const(vt, value);
  LLVMValueRef zero = LLVMConstInt(em->t_i32, 0, 0);
  LLVMValueRef v =
      LLVMBuildInsertElement(em->b, LLVMGetPoison(vt), value, zero, "");
  LLVMValueRef mask = LLVMConstNull(LLVMVectorType(em->t_i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(em->b, v, LLVMGetPoison(vt), mask, "splat");
}

LLVMValueRef tj_emit_iota(tj_emit_t* em, LLVMTypeRef elem, int32_t lanes) {
  (void)em;
  LLVMValueRef elems[64];
  for (int32_t i = 0; i < lanes && i < 64; ++i) {
    elems[i] = LLVMConstInt(elem, (unsigned long long)i, 0);
  }
  return lanes == 1 ? elems[0] : LLVMConstVector(elems, (unsigned)lanes);
}

//===--- instructions ---===//

LLVMValueRef tj_emit_intrinsic(tj_emit_t* em, const char* name,
                               LLVMTypeRef* types, unsigned num_types,
                               LLVMValueRef* args, unsigned num_args) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (id == 0) {
    if (!em->error) em->error = tj_internal("unknown LLVM intrinsic %s", name);
    return LLVMGetUndef(num_args ? LLVMTypeOf(args[0]) : em->t_i32);
  }
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(em->mod, id, types, num_types);
  LLVMTypeRef fty = LLVMIntrinsicGetType(em->ctx, id, types, num_types);
  return LLVMBuildCall2(em->b, fty, fn, args, num_args, "");
}

LLVMValueRef tj_emit_inline_asm(tj_emit_t* em, LLVMTypeRef ret,
                                const char* text, const char* constraints,
                                LLVMValueRef* args, unsigned num_args) {
  LLVMTypeRef types[132];
  if (num_args > 132) {
    if (!em->error) em->error = tj_internal("inline asm of %u args", num_args);
    return LLVMGetUndef(ret);
  }
  for (unsigned i = 0; i < num_args; ++i) types[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef fty = LLVMFunctionType(ret, types, num_args, 0);
  LLVMValueRef fn =
      LLVMGetInlineAsm(fty, text, strlen(text), constraints,
                       strlen(constraints), 1, 0, LLVMInlineAsmDialectATT, 0);
  return LLVMBuildCall2(em->b, fty, fn, args, num_args, "");
}

LLVMValueRef tj_emit_fmuladd(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b,
                             LLVMValueRef c) {
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef args[3] = {a, b, c};
  return tj_emit_intrinsic(em, "llvm.fmuladd", &t, 1, args, 3);
}

LLVMValueRef tj_emit_poly(tj_emit_t* em, LLVMValueRef x, const double* c,
                          int n) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef acc = tj_emit_fconst(t, c[0]);
  for (int i = 1; i < n; ++i) {
    acc = tj_emit_fmuladd(em, acc, x, tj_emit_fconst(t, c[i]));
  }
  return acc;
}

LLVMValueRef tj_emit_select(tj_emit_t* em, LLVMValueRef cond, LLVMValueRef a,
                            LLVMValueRef b) {
  return LLVMBuildSelect(em->b, cond, a, b, "");
}

LLVMValueRef tj_emit_fminmax(tj_emit_t* em, bool max, LLVMValueRef a,
                             LLVMValueRef b) {
  LLVMBuilderRef bl = em->b;
  LLVMValueRef pick = tj_emit_select(
      em, LLVMBuildFCmp(bl, max ? LLVMRealOGT : LLVMRealOLT, a, b, ""), a, b);
  // A tie of equal numbers is ±0 against ∓0 or a value against itself:
  // min takes a when its sign is set, max when it is clear.
  LLVMTypeRef t = LLVMTypeOf(a);
  bool vec = LLVMGetTypeKind(t) == LLVMVectorTypeKind;
  LLVMTypeRef st = vec ? LLVMGetElementType(t) : t;
  LLVMTypeKind kind = LLVMGetTypeKind(st);
  unsigned bits = kind == LLVMDoubleTypeKind  ? 64
                  : kind == LLVMFloatTypeKind ? 32
                                              : 16;  // half, bfloat
  LLVMTypeRef it = LLVMIntTypeInContext(em->ctx, bits);
  if (vec) it = LLVMVectorType(it, LLVMGetVectorSize(t));
  LLVMValueRef neg = LLVMBuildICmp(
      bl, LLVMIntSLT, LLVMBuildBitCast(bl, a, it, ""), LLVMConstNull(it), "");
  LLVMValueRef take_a =
      LLVMBuildAnd(bl, LLVMBuildFCmp(bl, LLVMRealOEQ, a, b, ""),
                   max ? LLVMBuildNot(bl, neg, "") : neg, "");
  pick = tj_emit_select(em, take_a, a, pick);
  // NaN propagates: a NaN operand makes a + b NaN.
  return tj_emit_select(em, LLVMBuildFCmp(bl, LLVMRealUNO, a, b, ""),
                        LLVMBuildFAdd(bl, a, b, ""), pick);
}

LLVMValueRef tj_emit_min_i64(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(em->b, LLVMBuildICmp(em->b, LLVMIntSLT, a, b, ""), a,
                         b, "");
}

void tj_emit_transpose_tile(tj_emit_t* em, LLVMValueRef* row, int32_t w) {
  LLVMTypeRef i32 = LLVMInt32TypeInContext(em->ctx);
  for (int32_t h = w / 2; h >= 1; h /= 2) {
    LLVMValueRef lo[16], hi[16];
    for (int32_t c = 0; c < w; ++c) {
      lo[c] = LLVMConstInt(i32, (uint64_t)(c & h ? w + c - h : c), false);
      hi[c] = LLVMConstInt(i32, (uint64_t)(c & h ? w + c : c + h), false);
    }
    LLVMValueRef mlo = LLVMConstVector(lo, (unsigned)w);
    LLVMValueRef mhi = LLVMConstVector(hi, (unsigned)w);
    for (int32_t i = 0; i < w; ++i) {
      if (i & h) continue;
      LLVMValueRef a = row[i], z = row[i + h];
      row[i] = LLVMBuildShuffleVector(em->b, a, z, mlo, "");
      row[i + h] = LLVMBuildShuffleVector(em->b, a, z, mhi, "");
    }
  }
}

LLVMValueRef tj_emit_alloca(tj_emit_t* em, LLVMTypeRef type, const char* name) {
  LLVMBuilderRef tmp = LLVMCreateBuilderInContext(em->ctx);
  LLVMValueRef first = LLVMGetFirstInstruction(em->entry);
  if (first) {
    LLVMPositionBuilderBefore(tmp, first);
  } else {
    LLVMPositionBuilderAtEnd(tmp, em->entry);
  }
  LLVMValueRef slot = LLVMBuildAlloca(tmp, type, name);
  LLVMDisposeBuilder(tmp);
  return slot;
}

LLVMValueRef tj_emit_loop_begin(tj_emit_t* em, tj_emit_loop_t* loop,
                                LLVMValueRef start, LLVMValueRef limit,
                                LLVMValueRef step, const char* name) {
  loop->var = tj_emit_alloca(em, em->t_i64, name);
  loop->limit = limit;
  loop->step = step;
  LLVMBuildStore(em->b, start, loop->var);
  loop->cond = LLVMAppendBasicBlockInContext(em->ctx, em->fn, name);
  loop->body = LLVMAppendBasicBlockInContext(em->ctx, em->fn, name);
  loop->done = LLVMAppendBasicBlockInContext(em->ctx, em->fn, name);
  LLVMBuildBr(em->b, loop->cond);
  LLVMPositionBuilderAtEnd(em->b, loop->cond);
  LLVMValueRef i = LLVMBuildLoad2(em->b, em->t_i64, loop->var, "");
  LLVMBuildCondBr(em->b, LLVMBuildICmp(em->b, LLVMIntSLT, i, limit, ""),
                  loop->body, loop->done);
  LLVMPositionBuilderAtEnd(em->b, loop->body);
  return LLVMBuildLoad2(em->b, em->t_i64, loop->var, name);
}

void tj_emit_loop_end(tj_emit_t* em, tj_emit_loop_t* loop) {
  LLVMValueRef i = LLVMBuildLoad2(em->b, em->t_i64, loop->var, "");
  LLVMBuildStore(em->b, LLVMBuildAdd(em->b, i, loop->step, ""), loop->var);
  LLVMBuildBr(em->b, loop->cond);
  LLVMPositionBuilderAtEnd(em->b, loop->done);
}

void tj_emit_if_begin(tj_emit_t* em, tj_emit_if_t* branch, LLVMValueRef cond,
                      const char* name) {
  branch->then_block = LLVMAppendBasicBlockInContext(em->ctx, em->fn, name);
  branch->done = LLVMAppendBasicBlockInContext(em->ctx, em->fn, name);
  LLVMBuildCondBr(em->b, cond, branch->then_block, branch->done);
  LLVMPositionBuilderAtEnd(em->b, branch->then_block);
}

void tj_emit_if_end(tj_emit_t* em, tj_emit_if_t* branch) {
  LLVMBuildBr(em->b, branch->done);
  LLVMPositionBuilderAtEnd(em->b, branch->done);
}

//===--- memory ---===//

LLVMValueRef tj_emit_ival(tj_emit_t* em, tj_kir_ival_t v) {
  if (v.param >= 0) return em->scalar[v.param];
  return LLVMConstInt(em->t_i64, (unsigned long long)v.value, 1);
}

LLVMValueRef tj_emit_stride(tj_emit_t* em, uint32_t b, int32_t d) {
  return tj_emit_ival(em, em->k->buffers[b].strides[d]);
}

LLVMValueRef tj_emit_advance(tj_emit_t* em, uint32_t b, LLVMValueRef ptr,
                             LLVMValueRef count) {
  LLVMTypeRef t = tj_emit_memory_type(em, em->k->buffers[b].dtype);
  return LLVMBuildGEP2(em->b, t, ptr, &count, 1, "");
}

LLVMValueRef tj_emit_lane_mask(tj_emit_t* em, LLVMValueRef count,
                               int32_t lanes) {
  LLVMValueRef n = tj_emit_min_i64(
      em, count, LLVMConstInt(em->t_i64, (unsigned long long)lanes, 0));
  n = LLVMBuildTrunc(em->b, n, em->t_i32, "");
  return LLVMBuildICmp(em->b, LLVMIntSLT, tj_emit_iota(em, em->t_i32, lanes),
                       tj_emit_splat(em, n, lanes), "mask");
}

static unsigned elem_bytes(tj_dtype_t dtype) {
  return (unsigned)tj_dtype_size(dtype);
}

// f16 bits (i32 lanes holding 16 bits) -> f32, for targets without F16C
// (F. Giesen's half_to_float: exact, subnormals renormalized by a float
// subtraction).
static LLVMValueRef half_bits_to_float(tj_emit_t* em, LLVMValueRef h) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef it = LLVMTypeOf(h);
  LLVMTypeRef ft = tj_emit_vec(em, em->t_f32, tj_emit_lanes_of(it));
  LLVMValueRef o =
      LLVMBuildShl(b, LLVMBuildAnd(b, h, tj_emit_iconst(it, 0x7fff), ""),
                   tj_emit_iconst(it, 13), "");
  LLVMValueRef exp = LLVMBuildAnd(b, o, tj_emit_iconst(it, 0x7c00 << 13), "");
  o = LLVMBuildAdd(b, o, tj_emit_iconst(it, (127 - 15) << 23), "");
  LLVMValueRef is_special =
      LLVMBuildICmp(b, LLVMIntEQ, exp, tj_emit_iconst(it, 0x7c00 << 13), "");
  LLVMValueRef is_small =
      LLVMBuildICmp(b, LLVMIntEQ, exp, tj_emit_iconst(it, 0), "");
  LLVMValueRef special =
      LLVMBuildAdd(b, o, tj_emit_iconst(it, (128 - 16) << 23), "");
  LLVMValueRef small_f = LLVMBuildFSub(
      b,
      LLVMBuildBitCast(b, LLVMBuildAdd(b, o, tj_emit_iconst(it, 1 << 23), ""),
                       ft, ""),
      tj_emit_fconst(ft, 6.103515625e-05), "");  // 2^-14 = float(113 << 23)
  LLVMValueRef small = LLVMBuildBitCast(b, small_f, it, "");
  o = tj_emit_select(em, is_special, special, o);
  o = tj_emit_select(em, is_small, small, o);
  LLVMValueRef sign =
      LLVMBuildShl(b, LLVMBuildAnd(b, h, tj_emit_iconst(it, 0x8000), ""),
                   tj_emit_iconst(it, 16), "");
  return LLVMBuildBitCast(b, LLVMBuildOr(b, o, sign, ""), ft, "");
}

// f32 -> f16 bits (in i32 lanes), round to nearest even, for targets
// without F16C (F. Giesen's float_to_half_fast3_rtne).
static LLVMValueRef float_to_half_bits(tj_emit_t* em, LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef ft = LLVMTypeOf(x);
  LLVMTypeRef it = tj_emit_int_like(em, ft);
  LLVMValueRef f = LLVMBuildBitCast(b, x, it, "");
  LLVMValueRef sign =
      LLVMBuildAnd(b, f, tj_emit_iconst(it, (int64_t)0x80000000u), "");
  f = LLVMBuildXor(b, f, sign, "");
  const int64_t f32_inf = 255 << 23, f16_max = (127 + 16) << 23;
  const int64_t denorm_magic = ((127 - 15) + (23 - 10) + 1) << 23;
  LLVMValueRef inf_nan = tj_emit_select(
      em, LLVMBuildICmp(b, LLVMIntUGT, f, tj_emit_iconst(it, f32_inf), ""),
      tj_emit_iconst(it, 0x7e00), tj_emit_iconst(it, 0x7c00));
  LLVMValueRef sub_f = LLVMBuildFAdd(
      b, LLVMBuildBitCast(b, f, ft, ""),
      LLVMBuildBitCast(b, tj_emit_iconst(it, denorm_magic), ft, ""), "");
  LLVMValueRef sub = LLVMBuildSub(b, LLVMBuildBitCast(b, sub_f, it, ""),
                                  tj_emit_iconst(it, denorm_magic), "");
  LLVMValueRef odd =
      LLVMBuildAnd(b, LLVMBuildLShr(b, f, tj_emit_iconst(it, 13), ""),
                   tj_emit_iconst(it, 1), "");
  LLVMValueRef norm = LLVMBuildAdd(
      b, f, tj_emit_iconst(it, (int64_t)((15 - 127) * (1 << 23)) + 0xfff), "");
  norm = LLVMBuildLShr(b, LLVMBuildAdd(b, norm, odd, ""),
                       tj_emit_iconst(it, 13), "");
  LLVMValueRef o = tj_emit_select(
      em, LLVMBuildICmp(b, LLVMIntULT, f, tj_emit_iconst(it, 113 << 23), ""),
      sub, norm);
  o = tj_emit_select(
      em, LLVMBuildICmp(b, LLVMIntUGE, f, tj_emit_iconst(it, f16_max), ""),
      inf_nan, o);
  return LLVMBuildOr(b, o, LLVMBuildLShr(b, sign, tj_emit_iconst(it, 16), ""),
                     "");
}

// bf16 bits (i32 lanes) -> f32: the upper half of the f32 bit pattern.
static LLVMValueRef bf16_bits_to_float(tj_emit_t* em, LLVMValueRef h) {
  LLVMTypeRef it = LLVMTypeOf(h);
  LLVMTypeRef ft = tj_emit_vec(em, em->t_f32, tj_emit_lanes_of(it));
  return LLVMBuildBitCast(
      em->b, LLVMBuildShl(em->b, h, tj_emit_iconst(it, 16), ""), ft, "");
}

// f32 -> bf16 bits (i32 lanes), round to nearest even; NaN stays a quiet
// NaN.
static LLVMValueRef float_to_bf16_bits(tj_emit_t* em, LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef it = tj_emit_int_like(em, LLVMTypeOf(x));
  LLVMValueRef u = LLVMBuildBitCast(b, x, it, "");
  LLVMValueRef hi = LLVMBuildLShr(b, u, tj_emit_iconst(it, 16), "");
  LLVMValueRef odd = LLVMBuildAnd(b, hi, tj_emit_iconst(it, 1), "");
  LLVMValueRef r = LLVMBuildAdd(
      b, LLVMBuildAdd(b, u, tj_emit_iconst(it, 0x7fff), ""), odd, "");
  r = LLVMBuildLShr(b, r, tj_emit_iconst(it, 16), "");
  LLVMValueRef nan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  return tj_emit_select(em, nan,
                        LLVMBuildOr(b, hi, tj_emit_iconst(it, 0x40), ""), r);
}

// Memory value -> compute value.
static LLVMValueRef widen(tj_emit_t* em, tj_dtype_t dtype, LLVMValueRef v) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(v));
  LLVMTypeRef i32v = tj_emit_vec(em, em->t_i32, lanes);
  LLVMTypeRef f32v = tj_emit_vec(em, em->t_f32, lanes);
  switch (dtype) {
    case TJ_DTYPE_F16:
      if (em->target.has_f16c) return LLVMBuildFPExt(b, v, f32v, "");
      return half_bits_to_float(em, LLVMBuildZExt(b, v, i32v, ""));
    case TJ_DTYPE_BF16:
      if (em->target.has_bf16_cvt) {
        // fpext, not the shift: LLVM then folds a rounding to bf16 and
        // back (a cast's) into the store's fptrunc (a cvt.rn.bf16.f32
        // and a widening fewer per element of a fused epilogue).
        LLVMTypeRef bf = tj_emit_vec(em, LLVMBFloatTypeInContext(em->ctx),
                                     tj_emit_lanes_of(LLVMTypeOf(v)));
        return LLVMBuildFPExt(b, LLVMBuildBitCast(b, v, bf, ""), f32v, "");
      }
      return bf16_bits_to_float(em, LLVMBuildZExt(b, v, i32v, ""));
    case TJ_DTYPE_BOOL:
      return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
    case TJ_DTYPE_U8:
    case TJ_DTYPE_U16:
      return LLVMBuildZExt(b, v, i32v, "");
    case TJ_DTYPE_I16:
      return LLVMBuildSExt(b, v, i32v, "");
    case TJ_DTYPE_U32:
      return LLVMBuildZExt(b, v, tj_emit_vec(em, em->t_i64, lanes), "");
    default:
      return v;
  }
}

LLVMValueRef tj_emit_widen(tj_emit_t* em, tj_dtype_t dtype,
                           LLVMValueRef value) {
  return widen(em, dtype, value);
}

// f32 lanes |v| rounded to the 16-bit float type |ht| (half or bfloat),
// as lanes of the memory type |mt| (i16 or |ht|), in hardware: a widened value
// of that type is its source (exact), and pairs of lanes narrow in one
// instruction (|x2|, the NVVM intrinsic, where has_cvt_x2), else fptrunc.
static LLVMValueRef narrow_hw(tj_emit_t* em, LLVMValueRef v, LLVMTypeRef ht,
                              LLVMTypeRef mt, const char* x2) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(v));
  LLVMTypeRef hv = tj_emit_vec(em, ht, lanes);
  LLVMTypeRef i16v = tj_emit_vec(em, mt, lanes);
  if (LLVMIsAInstruction(v) && LLVMGetInstructionOpcode(v) == LLVMFPExt &&
      LLVMTypeOf(LLVMGetOperand(v, 0)) == hv)
    return LLVMBuildBitCast(b, LLVMGetOperand(v, 0), i16v, "");
  if (!em->target.has_cvt_x2 || lanes % 2 != 0)
    return LLVMBuildBitCast(b, LLVMBuildFPTrunc(b, v, hv, ""), i16v, "");
  unsigned id = LLVMLookupIntrinsicID(x2, strlen(x2));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(em->mod, id, NULL, 0);
  LLVMTypeRef type = LLVMIntrinsicGetType(em->ctx, id, NULL, 0);
  LLVMTypeRef i32v = tj_emit_vec(em, em->t_i32, lanes / 2);
  LLVMValueRef out = LLVMGetUndef(i32v);
  for (int32_t k = 0; k < lanes / 2; ++k) {
    // cvt.rn.bf16x2.f32 d, a, b puts a in d's upper half: lane 2k + 1.
    LLVMValueRef args[2] = {
        LLVMBuildExtractElement(
            b, v, LLVMConstInt(em->t_i32, (unsigned long long)(2 * k + 1), 0),
            ""),
        LLVMBuildExtractElement(
            b, v, LLVMConstInt(em->t_i32, (unsigned long long)(2 * k), 0), "")};
    LLVMValueRef pair = LLVMBuildCall2(b, type, fn, args, 2, "");
    pair = LLVMBuildBitCast(b, pair, em->t_i32, "");
    if (lanes == 2) return LLVMBuildBitCast(b, pair, i16v, "");
    out = LLVMBuildInsertElement(
        b, out, pair, LLVMConstInt(em->t_i32, (unsigned long long)k, 0), "");
  }
  return LLVMBuildBitCast(b, out, i16v, "");
}

// Compute value -> memory value.
static LLVMValueRef narrow(tj_emit_t* em, tj_dtype_t dtype, LLVMValueRef v) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(v));
  LLVMTypeRef i16v = tj_emit_vec(em, em->t_i16, lanes);
  switch (dtype) {
    case TJ_DTYPE_F16:
      if (em->target.has_f16c) {
        if (em->target.has_cvt_x2)
          return narrow_hw(em, v, em->t_f16, em->t_f16,
                           "llvm.nvvm.ff2f16x2.rn");
        return LLVMBuildFPTrunc(b, v, tj_emit_vec(em, em->t_f16, lanes), "");
      }
      return LLVMBuildTrunc(b, float_to_half_bits(em, v), i16v, "");
    case TJ_DTYPE_BF16:
      if (em->target.has_bf16_cvt) {
        return narrow_hw(em, v, LLVMBFloatTypeInContext(em->ctx), em->t_i16,
                         "llvm.nvvm.ff2bf16x2.rn");
      }
      return LLVMBuildTrunc(b, float_to_bf16_bits(em, v), i16v, "");
    case TJ_DTYPE_BOOL:
      return LLVMBuildZExt(b, v, tj_emit_vec(em, em->t_i8, lanes), "");
    case TJ_DTYPE_U8:
      return LLVMBuildTrunc(b, v, tj_emit_vec(em, em->t_i8, lanes), "");
    case TJ_DTYPE_I16:
    case TJ_DTYPE_U16:
      return LLVMBuildTrunc(b, v, i16v, "");
    case TJ_DTYPE_U32:
      return LLVMBuildTrunc(b, v, tj_emit_vec(em, em->t_i32, lanes), "");
    default:
      return v;
  }
}

LLVMValueRef tj_emit_narrow(tj_emit_t* em, tj_dtype_t dtype, LLVMValueRef v) {
  return narrow(em, dtype, v);
}

typedef enum stride_kind_e {
  STRIDE_UNIT,
  STRIDE_ZERO,
  STRIDE_SMALL,  // a constant 2 to kMaxSpanStride: loads read the span
  STRIDE_OTHER
} stride_kind_t;

// The largest constant lane stride a load reads as one contiguous span and
// a shuffle (strided windows: pools, depthwise convs and im2col taps of
// stride 2 to 4) rather than as a gather of every lane: a span of 16 f32
// lanes at stride 4 is 4 vector loads and 3 two-source permutes, against
// 16 element loads of a gather (and a scalarized gather where the target
// has none: AVX2 without fast gathers, SSE2).
enum { kMaxSpanStride = 4 };

static stride_kind_t vector_stride_kind(tj_emit_t* em,
                                        const tj_emit_point_t* point,
                                        uint32_t b) {
  tj_kir_ival_t s = em->k->buffers[b].strides[point->vdim];
  if (tj_kir_ival_is_const(s, 1)) return STRIDE_UNIT;
  if (tj_kir_ival_is_const(s, 0)) return STRIDE_ZERO;
  if (s.param < 0 && s.value >= 2 && s.value <= kMaxSpanStride &&
      !em->target.strided_as_gather)
    return STRIDE_SMALL;
  return STRIDE_OTHER;
}

bool tj_emit_dim_stores_scatter(tj_emit_t* em, int32_t vdim) {
  tj_emit_point_t point;
  memset(&point, 0, sizeof(point));
  point.vdim = vdim;
  point.lanes = em->target.lanes;
  bool any = false;
  for (uint32_t b = 0; b < em->k->num_buffers; ++b) {
    if (em->k->buffers[b].role != TJ_KIR_OUTPUT) continue;
    if (vector_stride_kind(em, &point, b) != STRIDE_OTHER) return false;
    any = true;
  }
  return any;
}

// Buffer |b| at |point| whose lanes are |stride| (2 to kMaxSpanStride)
// elements apart: one load of the (lanes - 1) * stride + 1 elements from
// the first lane's to the last lane's, which lie inside the tensor (so the
// span reads nothing the lanes' own addresses would not bound), then a
// shuffle that picks every stride-th. Masked lanes (a tail) mask their
// elements of the span; the elements between lanes are masked off too, so
// a tail reads no element past its last active lane.
static LLVMValueRef load_span(tj_emit_t* em, const tj_emit_point_t* point,
                              uint32_t b, int64_t stride) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  const unsigned align = elem_bytes(buf->dtype);
  const int32_t lanes = point->lanes;
  const int32_t span = (int32_t)((lanes - 1) * stride + 1);
  LLVMTypeRef st = tj_emit_vec(em, mt, span);
  LLVMValueRef pick[64], v;
  for (int32_t l = 0; l < lanes; ++l)
    pick[l] = LLVMConstInt(em->t_i32, (unsigned long long)(l * stride), 0);
  if (point->mask) {
    // Span element j is lane j / stride's when j % stride == 0, else off:
    // index |lanes| of the shuffle is the first element of a false vector.
    LLVMValueRef spread[(64 - 1) * kMaxSpanStride + 1];
    for (int32_t j = 0; j < span; ++j)
      spread[j] = LLVMConstInt(
          em->t_i32, (unsigned long long)(j % stride ? lanes : j / stride), 0);
    LLVMValueRef mask = LLVMBuildShuffleVector(
        em->b, point->mask, LLVMConstNull(LLVMTypeOf(point->mask)),
        LLVMConstVector(spread, (unsigned)span), "");
    LLVMTypeRef types[2] = {st, em->t_ptr};
    LLVMValueRef args[4] = {point->ptr[b], LLVMConstInt(em->t_i32, align, 0),
                            mask, LLVMConstNull(st)};
    v = tj_emit_intrinsic(em, "llvm.masked.load", types, 2, args, 4);
  } else {
    v = LLVMBuildLoad2(em->b, st, point->ptr[b], buf->name);
    LLVMSetAlignment(v, align);
  }
  v = LLVMBuildShuffleVector(em->b, v, LLVMGetUndef(st),
                             LLVMConstVector(pick, (unsigned)lanes), "");
  return widen(em, buf->dtype, v);
}

// The addresses of the lanes of a strided access.
static LLVMValueRef lane_pointers(tj_emit_t* em, const tj_emit_point_t* point,
                                  uint32_t b) {
  LLVMValueRef offs = LLVMBuildMul(
      em->b, tj_emit_iota(em, em->t_i64, point->lanes),
      tj_emit_splat(em, tj_emit_stride(em, b, point->vdim), point->lanes), "");
  LLVMTypeRef t = tj_emit_memory_type(em, em->k->buffers[b].dtype);
  return LLVMBuildGEP2(em->b, t, point->ptr[b], &offs, 1, "lanes");
}

static LLVMValueRef all_true(tj_emit_t* em, int32_t lanes) {
  return tj_emit_iconst(tj_emit_vec(em, em->t_i1, lanes), 1);
}

static LLVMValueRef load_uncached(tj_emit_t* em, const tj_emit_point_t* point,
                                  uint32_t b);

LLVMValueRef tj_emit_load(tj_emit_t* em, const tj_emit_point_t* point,
                          uint32_t b) {
  tj_emit_load_cache_t* cache = em->load_cache;
  if (!cache || cache->slot < 0) return load_uncached(em, point, b);
  LLVMValueRef* entry = &cache->values[cache->slot][b];
  if (*entry) return *entry;
  LLVMValueRef v = load_uncached(em, point, b);
  if (cache->insert) *entry = v;
  return v;
}

static LLVMValueRef load_uncached(tj_emit_t* em, const tj_emit_point_t* point,
                                  uint32_t b) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  unsigned align = elem_bytes(buf->dtype);
  int32_t lanes = point->lanes;
  LLVMValueRef v;
  stride_kind_t kind =
      lanes == 1 ? STRIDE_ZERO : vector_stride_kind(em, point, b);
  if (kind == STRIDE_ZERO) {
    v = LLVMBuildLoad2(em->b, mt, point->ptr[b], buf->name);
    LLVMSetAlignment(v, align);
    return tj_emit_splat(em, widen(em, buf->dtype, v), lanes);
  }
  if (kind == STRIDE_SMALL && lanes <= 64)
    return load_span(em, point, b,
                     em->k->buffers[b].strides[point->vdim].value);
  LLVMTypeRef vt = tj_emit_vec(em, mt, lanes);
  LLVMValueRef align_v = LLVMConstInt(em->t_i32, align, 0);
  if (kind == STRIDE_UNIT) {
    if (point->mask) {
      LLVMTypeRef types[2] = {vt, em->t_ptr};
      LLVMValueRef args[4] = {point->ptr[b], align_v, point->mask,
                              LLVMConstNull(vt)};
      v = tj_emit_intrinsic(em, "llvm.masked.load", types, 2, args, 4);
    } else {
      v = LLVMBuildLoad2(em->b, vt, point->ptr[b], buf->name);
      LLVMSetAlignment(v, align);
    }
  } else {
    LLVMValueRef ptrs = lane_pointers(em, point, b);
    LLVMTypeRef types[2] = {vt, LLVMTypeOf(ptrs)};
    LLVMValueRef args[4] = {ptrs, align_v,
                            point->mask ? point->mask : all_true(em, lanes),
                            LLVMConstNull(vt)};
    v = tj_emit_intrinsic(em, "llvm.masked.gather", types, 2, args, 4);
  }
  return widen(em, buf->dtype, v);
}

static LLVMValueRef gather_at(tj_emit_t* em, const tj_emit_point_t* point,
                              uint32_t b, LLVMValueRef offs) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  int32_t lanes = point->lanes;
  LLVMValueRef ptrs =
      LLVMBuildGEP2(em->b, mt, lane_pointers(em, point, b), &offs, 1, "at");
  LLVMTypeRef vt = tj_emit_vec(em, mt, lanes);
  LLVMTypeRef types[2] = {vt, LLVMTypeOf(ptrs)};
  LLVMValueRef args[4] = {
      ptrs, LLVMConstInt(em->t_i32, elem_bytes(buf->dtype), 0),
      point->mask ? point->mask : all_true(em, lanes), LLVMConstNull(vt)};
  return widen(em, buf->dtype,
               tj_emit_intrinsic(em, "llvm.masked.gather", types, 2, args, 4));
}

// The vector of buffer |b| at |point| plus |off0| elements along its
// stride-1 vector dim, at |align| bytes (masked where the point is), in
// memory form: a gathered row's vector.
static LLVMValueRef vector_load_at(tj_emit_t* em, const tj_emit_point_t* point,
                                   uint32_t b, LLVMValueRef off0,
                                   unsigned align) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  LLVMValueRef p = LLVMBuildGEP2(em->b, mt, point->ptr[b], &off0, 1, "at");
  LLVMTypeRef vt = tj_emit_vec(em, mt, point->lanes);
  if (point->mask) {
    LLVMTypeRef types[2] = {vt, em->t_ptr};
    LLVMValueRef args[4] = {p, LLVMConstInt(em->t_i32, align, 0), point->mask,
                            LLVMConstNull(vt)};
    return tj_emit_intrinsic(em, "llvm.masked.load", types, 2, args, 4);
  }
  LLVMValueRef v = LLVMBuildLoad2(em->b, vt, p, buf->name);
  LLVMSetAlignment(v, align);
  return v;
}

// A concat lowered as one select (kir/lower_select.c) reads through
// offsets that a where picks per element by the concat coordinate: the
// same in every lane of a vector that lies inside one input's range, which
// is every vector where the ranges' bounds are multiples of the lanes
// (rope's halves). Such a vector takes one vector load at lane 0's offset
// (at an aligned point, NVPTX's vector path, only where that offset keeps
// the alignment, so the load stays one 16-byte access); the others gather.
// A branch a vector: POINTWISE kernels only, whose bodies nothing else
// walks block by block.
static LLVMValueRef load_at_piecewise(tj_emit_t* em,
                                      const tj_emit_point_t* point, uint32_t b,
                                      LLVMValueRef offs) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMBuilderRef bld = em->b;
  int32_t lanes = point->lanes;
  unsigned align = elem_bytes(buf->dtype);
  LLVMValueRef off0 =
      LLVMBuildExtractElement(bld, offs, LLVMConstInt(em->t_i32, 0, 0), "");
  LLVMValueRef eq =
      LLVMBuildICmp(bld, LLVMIntEQ, offs, tj_emit_splat(em, off0, lanes), "");
  LLVMTypeRef bits = LLVMIntTypeInContext(em->ctx, (unsigned)lanes);
  LLVMValueRef same =
      LLVMBuildICmp(bld, LLVMIntEQ, LLVMBuildBitCast(bld, eq, bits, ""),
                    LLVMConstAllOnes(bits), "same");
  if (point->aligned) {
    LLVMValueRef low = LLVMBuildAnd(
        bld, off0, LLVMConstInt(em->t_i64, (unsigned long long)lanes - 1, 0),
        "");
    same = LLVMBuildAnd(
        bld, same,
        LLVMBuildICmp(bld, LLVMIntEQ, low, LLVMConstInt(em->t_i64, 0, 0), ""),
        "");
    align *= (unsigned)lanes;
  }
  LLVMBasicBlockRef vec_bb =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "at.vector");
  LLVMBasicBlockRef gather_bb =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "at.gather");
  LLVMBasicBlockRef done_bb =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "at.done");
  LLVMBuildCondBr(bld, same, vec_bb, gather_bb);
  LLVMPositionBuilderAtEnd(bld, vec_bb);
  LLVMValueRef from_vec =
      widen(em, buf->dtype, vector_load_at(em, point, b, off0, align));
  LLVMBasicBlockRef vec_end = LLVMGetInsertBlock(bld);
  LLVMBuildBr(bld, done_bb);
  LLVMPositionBuilderAtEnd(bld, gather_bb);
  LLVMValueRef from_gather = gather_at(em, point, b, offs);
  LLVMBasicBlockRef gather_end = LLVMGetInsertBlock(bld);
  LLVMBuildBr(bld, done_bb);
  LLVMPositionBuilderAtEnd(bld, done_bb);
  LLVMValueRef phi = LLVMBuildPhi(bld, LLVMTypeOf(from_vec), "at");
  LLVMValueRef in_vals[2] = {from_vec, from_gather};
  LLVMBasicBlockRef in_bbs[2] = {vec_end, gather_end};
  LLVMAddIncoming(phi, in_vals, in_bbs, 2);
  return phi;
}

// The power of two that integer instruction |i| of |ph| is known to be a
// multiple of, as a count of trailing zero bits (63 for 0), up to |depth|
// instructions back: constants, and sums, products, maxima, minima,
// selects and casts of them. A gather's offset, the clamped index times
// the row's constant stride (kir/lower_gather.c), is a multiple of that
// stride's power of two. Bits below the result's width survive wrapping.
static int32_t known_pow2_factor(const tj_kir_phase_t* ph, uint32_t i,
                                 int32_t depth) {
  const tj_kir_inst_t* in = &ph->insts[i];
  if (depth <= 0 || tj_dtype_is_float(in->dtype)) return 0;
  if (in->kind == TJ_KIR_CONST) {
    uint64_t v = (uint64_t)in->ivalue;
    int32_t tz = 0;
    if (v == 0) return 63;
    while (!(v & 1) && tz < 63) {
      v >>= 1;
      ++tz;
    }
    return tz;
  }
  if (in->kind != TJ_KIR_OP) return 0;
  int32_t a =
      in->num_args > 0 ? known_pow2_factor(ph, in->args[0], depth - 1) : 0;
  switch (in->op) {
    case TJ_OP_CAST:
      return tj_dtype_is_float(ph->insts[in->args[0]].dtype) ? 0 : a;
    case TJ_OP_MUL: {
      int32_t t = a + known_pow2_factor(ph, in->args[1], depth - 1);
      return t > 63 ? 63 : t;
    }
    case TJ_OP_ADD:
    case TJ_OP_SUB:
    case TJ_OP_MAXIMUM:
    case TJ_OP_MINIMUM: {
      int32_t c = known_pow2_factor(ph, in->args[1], depth - 1);
      return a < c ? a : c;
    }
    case TJ_OP_WHERE: {
      int32_t x = known_pow2_factor(ph, in->args[1], depth - 1);
      int32_t y = known_pow2_factor(ph, in->args[2], depth - 1);
      return x < y ? x : y;
    }
    default:
      return 0;
  }
}

// Buffer |b| at |point| plus |offs| elements (i64, one per lane): a
// scalar load; a vector load when every lane has the same offset
// (|uniform|: a gathered row read along its unit-stride dim, the
// embedding lookup) and the buffer walks the lanes with stride 1; else a
// masked gather of every lane's address. Never cached: the address
// depends on a value, not only on the point. Where |offs| is known to be
// a multiple of the lanes (|pow2_factor|, known_pow2_factor), the vector
// load carries TJ_EMIT_MD_LANES_ALIGNED: an emitter that knows the
// point's address is aligned to the vector (NVPTX's vector path,
// tj_nvptx_align_accesses) may align this load too, so that it is one
// 16-byte load and not one per lane.
static LLVMValueRef load_at(tj_emit_t* em, const tj_emit_point_t* point,
                            uint32_t b, LLVMValueRef offs, bool uniform,
                            bool piecewise, int32_t pow2_factor) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  unsigned align = elem_bytes(buf->dtype);
  int32_t lanes = point->lanes;
  if (lanes > 1 && uniform && vector_stride_kind(em, point, b) == STRIDE_UNIT) {
    LLVMValueRef off0 =
        LLVMBuildExtractElement(em->b, offs, LLVMConstInt(em->t_i32, 0, 0), "");
    LLVMValueRef v = vector_load_at(em, point, b, off0, align);
    if (!point->mask) {
      if (pow2_factor >= 30 || ((int64_t)1 << pow2_factor) % lanes == 0) {
        unsigned kind = LLVMGetMDKindIDInContext(
            em->ctx, TJ_EMIT_MD_LANES_ALIGNED,
            (unsigned)strlen(TJ_EMIT_MD_LANES_ALIGNED));
        LLVMSetMetadata(v, kind,
                        LLVMMetadataAsValue(
                            em->ctx, LLVMMDNodeInContext2(em->ctx, NULL, 0)));
      }
    }
    return widen(em, buf->dtype, v);
  }
  if (lanes == 1) {
    if (LLVMGetTypeKind(LLVMTypeOf(offs)) == LLVMVectorTypeKind) {
      offs = LLVMBuildExtractElement(em->b, offs, LLVMConstInt(em->t_i32, 0, 0),
                                     "");
    }
    LLVMValueRef p = LLVMBuildGEP2(em->b, mt, point->ptr[b], &offs, 1, "at");
    LLVMValueRef v = LLVMBuildLoad2(em->b, mt, p, buf->name);
    LLVMSetAlignment(v, align);
    return widen(em, buf->dtype, v);
  }
  if (piecewise && em->k->kind == TJ_KIR_POINTWISE &&
      vector_stride_kind(em, point, b) == STRIDE_UNIT)
    return load_at_piecewise(em, point, b, offs);
  return gather_at(em, point, b, offs);
}

// prefetch_only's LOAD_AT: the first TJ_EMIT_PREFETCH_LINES lines of the
// row a vector of one offset reads with stride 1, into L1 (a prefetch
// never faults, so a row shorter than that costs nothing past its end).
// Other LOAD_ATs (a gather lane by lane) are left to the hardware.
static void prefetch_at(tj_emit_t* em, const tj_emit_point_t* point, uint32_t b,
                        LLVMValueRef offs, bool uniform) {
  if (!uniform || point->lanes == 1 ||
      vector_stride_kind(em, point, b) != STRIDE_UNIT)
    return;
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  LLVMValueRef off0 =
      LLVMBuildExtractElement(em->b, offs, LLVMConstInt(em->t_i32, 0, 0), "");
  LLVMValueRef p = LLVMBuildGEP2(em->b, tj_emit_memory_type(em, buf->dtype),
                                 point->ptr[b], &off0, 1, "ahead");
  LLVMTypeRef pt = em->t_ptr;
  for (int32_t line = 0; line < TJ_EMIT_PREFETCH_LINES; ++line) {
    LLVMValueRef at = LLVMConstInt(em->t_i64, (unsigned long long)line * 64, 0);
    LLVMValueRef args[4] = {
        LLVMBuildGEP2(em->b, em->t_i8, p, &at, 1, ""),
        LLVMConstInt(em->t_i32, 0, 0),   // read
        LLVMConstInt(em->t_i32, 3, 0),   // keep in all levels
        LLVMConstInt(em->t_i32, 1, 0)};  // data
    tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
  }
}

void tj_emit_store(tj_emit_t* em, const tj_emit_point_t* point, uint32_t b,
                   LLVMValueRef value) {
  const tj_kir_buffer_t* buf = &em->k->buffers[b];
  unsigned align = elem_bytes(buf->dtype);
  int32_t lanes = point->lanes;
  LLVMValueRef v = narrow(em, buf->dtype, value);
  stride_kind_t kind =
      lanes == 1 ? STRIDE_UNIT : vector_stride_kind(em, point, b);
  LLVMValueRef align_v = LLVMConstInt(em->t_i32, align, 0);
  if (kind == STRIDE_ZERO) {
    // Every lane writes the same element (only the verifier's size-1 dims
    // allow it): the last active lane's value wins, as in a serial loop.
    // Stores lane by lane keep that order.
    for (int32_t l = 0; l < lanes; ++l) {
      LLVMValueRef lane = LLVMConstInt(em->t_i32, (unsigned long long)l, 0);
      LLVMValueRef e = LLVMBuildExtractElement(em->b, v, lane, "");
      if (point->mask) {
        tj_emit_if_t branch;
        tj_emit_if_begin(em, &branch,
                         LLVMBuildExtractElement(em->b, point->mask, lane, ""),
                         "lane");
        LLVMSetAlignment(LLVMBuildStore(em->b, e, point->ptr[b]), align);
        tj_emit_if_end(em, &branch);
      } else {
        LLVMSetAlignment(LLVMBuildStore(em->b, e, point->ptr[b]), align);
      }
    }
    return;
  }
  if (kind == STRIDE_UNIT) {
    if (point->mask) {
      LLVMTypeRef types[2] = {LLVMTypeOf(v), em->t_ptr};
      LLVMValueRef args[4] = {v, point->ptr[b], align_v, point->mask};
      tj_emit_intrinsic(em, "llvm.masked.store", types, 2, args, 4);
    } else if (em->nontemporal_stores && lanes > 1 &&
               buf->role == TJ_KIR_OUTPUT) {
      LLVMValueRef st = LLVMBuildStore(em->b, v, point->ptr[b]);
      LLVMSetAlignment(st, align * (unsigned)lanes);
      LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(em->t_i32, 1, 0));
      LLVMSetMetadata(
          st, LLVMGetMDKindIDInContext(em->ctx, "nontemporal", 11),
          LLVMMetadataAsValue(em->ctx, LLVMMDNodeInContext2(em->ctx, &one, 1)));
    } else {
      LLVMSetAlignment(LLVMBuildStore(em->b, v, point->ptr[b]), align);
    }
    return;
  }
  LLVMValueRef ptrs = lane_pointers(em, point, b);
  LLVMTypeRef types[2] = {LLVMTypeOf(v), LLVMTypeOf(ptrs)};
  LLVMValueRef args[4] = {v, ptrs, align_v,
                          point->mask ? point->mask : all_true(em, lanes)};
  tj_emit_intrinsic(em, "llvm.masked.scatter", types, 2, args, 4);
}

//===--- casts ---===//

static LLVMValueRef unary_abs(tj_emit_t* em, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return tj_emit_intrinsic(em, "llvm.fabs", &t, 1, &x, 1);
}

// float8 / float4 bits (i8 lanes) -> f32, exactly (lib/dtype.c's
// tj_narrow_to_f64); the layouts are lib/dtype.h's tj_minifloat_t.
static LLVMValueRef f8_to_f32(tj_emit_t* em, LLVMValueRef v, tj_dtype_t from) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(v));
  LLVMTypeRef it = tj_emit_vec(em, em->t_i32, lanes);
  LLVMTypeRef ft = tj_emit_vec(em, em->t_f32, lanes);
  LLVMValueRef u = LLVMBuildZExt(b, v, it, "");
  if (from == TJ_DTYPE_F8E8M0) {
    // 2^(bits - 127): the bits as an f32 exponent field; 0 is 2^-127, an
    // f32 subnormal; 0xFF is NaN.
    LLVMValueRef r = LLVMBuildShl(b, u, tj_emit_iconst(it, 23), "");
    r = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntEQ, u, tj_emit_iconst(it, 0), ""),
        tj_emit_iconst(it, 0x00400000), r);
    r = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntEQ, u, tj_emit_iconst(it, 0xFF), ""),
        tj_emit_iconst(it, 0x7FC00000), r);
    return LLVMBuildBitCast(b, r, ft, "");
  }
  tj_minifloat_t f;
  (void)tj_minifloat_format(from, &f);
  LLVMValueRef sign = LLVMBuildShl(
      b, LLVMBuildAnd(b, u, tj_emit_iconst(it, INT64_C(1) << f.sign_bit), ""),
      tj_emit_iconst(it, 31 - f.sign_bit), "");
  LLVMValueRef mag = LLVMBuildAnd(
      b, u, tj_emit_iconst(it, (INT64_C(1) << f.sign_bit) - 1), "");
  // Normal: the exponent field rebased to f32's bias, the mantissa shifted.
  LLVMValueRef normal = LLVMBuildAdd(
      b, LLVMBuildShl(b, mag, tj_emit_iconst(it, 23 - f.mant_bits), ""),
      tj_emit_iconst(it, (int64_t)(127 - f.bias) << 23), "");
  // Subnormal (exponent field 0): mant * 2^(1 - bias - mant_bits).
  LLVMValueRef sub = LLVMBuildBitCast(
      b,
      LLVMBuildFMul(b, LLVMBuildSIToFP(b, mag, ft, ""),
                    tj_emit_fconst(ft, ldexp(1.0, 1 - f.bias - f.mant_bits)),
                    ""),
      it, "");
  LLVMValueRef is_sub = LLVMBuildICmp(
      b, LLVMIntULT, mag, tj_emit_iconst(it, INT64_C(1) << f.mant_bits), "");
  LLVMValueRef r = tj_emit_select(em, is_sub, sub, normal);
  LLVMValueRef nan = tj_emit_iconst(it, 0x7FC00000);
  if (f.special == TJ_MINIFLOAT_IEEE) {
    LLVMValueRef inf_pat = tj_emit_iconst(it, f.max_mag + 1);
    r = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntEQ, mag, inf_pat, ""),
                       tj_emit_iconst(it, 0x7F800000), r);
    r = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntUGT, mag, inf_pat, ""), nan,
                       r);
  } else if (f.special == TJ_MINIFLOAT_FN) {
    r = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntEQ, mag, tj_emit_iconst(it, 0x7F), ""), nan,
        r);
  } else if (f.special == TJ_MINIFLOAT_FNUZ) {
    // 0x80 (the sign alone) is the NaN: clear the sign so it stays one.
    LLVMValueRef is_nan =
        LLVMBuildICmp(b, LLVMIntEQ, u, tj_emit_iconst(it, 0x80), "");
    r = tj_emit_select(em, is_nan, nan, r);
    sign = tj_emit_select(em, is_nan, tj_emit_iconst(it, 0), sign);
  }
  return LLVMBuildBitCast(b, LLVMBuildOr(b, r, sign, ""), ft, "");
}

// f32 -> E8M0 bits (lib/dtype.c's tj_f64_to_narrow): the exponent field,
// plus one when any mantissa bit is set (rounding up; an f32 subnormal
// gives 1), saturating at 0xFE; NaN gives 0xFF. The sign is ignored.
static LLVMValueRef f32_to_e8m0(tj_emit_t* em, LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  LLVMTypeRef it = tj_emit_vec(em, em->t_i32, lanes);
  LLVMValueRef ab = LLVMBuildAnd(b, LLVMBuildBitCast(b, x, it, ""),
                                 tj_emit_iconst(it, 0x7FFFFFFF), "");
  LLVMValueRef field = LLVMBuildLShr(b, ab, tj_emit_iconst(it, 23), "");
  LLVMValueRef has_mant = LLVMBuildZExt(
      b,
      LLVMBuildICmp(b, LLVMIntNE,
                    LLVMBuildAnd(b, ab, tj_emit_iconst(it, 0x7FFFFF), ""),
                    tj_emit_iconst(it, 0), ""),
      it, "");
  LLVMValueRef r = LLVMBuildAdd(b, field, has_mant, "");
  LLVMValueRef max = tj_emit_iconst(it, 0xFE);
  r = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntUGT, r, max, ""), max, r);
  LLVMValueRef is_nan =
      LLVMBuildICmp(b, LLVMIntUGT, ab, tj_emit_iconst(it, 0x7F800000), "");
  r = tj_emit_select(em, is_nan, tj_emit_iconst(it, 0xFF), r);
  return LLVMBuildTrunc(b, r, tj_emit_vec(em, em->t_i8, lanes), "");
}

// f32 -> float8 / float4 bits: round to nearest even, saturate to +-max
// (infinities too); NaN -> the format's NaN (lib/dtype.c's
// tj_f64_to_narrow with saturate). Rounding an f32 that was itself rounded
// from a double or an integer agrees with rounding that value once: 24 >=
// 2 * 4 + 2 bits.
static LLVMValueRef f32_to_f8(tj_emit_t* em, LLVMValueRef x, tj_dtype_t to) {
  if (to == TJ_DTYPE_F8E8M0) return f32_to_e8m0(em, x);
  LLVMBuilderRef b = em->b;
  tj_minifloat_t f;
  (void)tj_minifloat_format(to, &f);
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  LLVMTypeRef it = tj_emit_vec(em, em->t_i32, lanes);
  LLVMTypeRef ft = tj_emit_vec(em, em->t_f32, lanes);
  const int shift = 23 - f.mant_bits;
  const int min_exp = 1 - f.bias;  // the smallest normal is 2^min_exp
  LLVMValueRef xb = LLVMBuildBitCast(b, x, it, "");
  LLVMValueRef sign =
      LLVMBuildShl(b, LLVMBuildLShr(b, xb, tj_emit_iconst(it, 31), ""),
                   tj_emit_iconst(it, f.sign_bit), "");
  LLVMValueRef ab = LLVMBuildAnd(b, xb, tj_emit_iconst(it, 0x7FFFFFFF), "");
  LLVMValueRef a = LLVMBuildBitCast(b, ab, ft, "");
  // Normal: round the f32 bits at the format's last mantissa bit (ties to
  // even: add half - 1 plus the kept lsb), rebase the exponent.
  LLVMValueRef lsb =
      LLVMBuildAnd(b, LLVMBuildLShr(b, ab, tj_emit_iconst(it, shift), ""),
                   tj_emit_iconst(it, 1), "");
  LLVMValueRef rounded = LLVMBuildAdd(
      b,
      LLVMBuildAdd(b, ab, tj_emit_iconst(it, (INT64_C(1) << (shift - 1)) - 1),
                   ""),
      lsb, "");
  LLVMValueRef normal = LLVMBuildSub(
      b, LLVMBuildLShr(b, rounded, tj_emit_iconst(it, shift), ""),
      tj_emit_iconst(it, (int64_t)(127 - f.bias) << f.mant_bits), "");
  // Subnormal: the count of 2^(min_exp - mant_bits) quanta, rounded to
  // even by adding and subtracting 2^23 (exact scaling, one rounding); 2^m
  // quanta is the smallest normal's pattern.
  LLVMValueRef scaled = LLVMBuildFMul(
      b, a, tj_emit_fconst(ft, ldexp(1.0, f.mant_bits - min_exp)), "");
  LLVMValueRef magic = tj_emit_fconst(ft, 8388608.0);
  LLVMValueRef sub = LLVMBuildFPToSI(
      b, LLVMBuildFSub(b, LLVMBuildFAdd(b, scaled, magic, ""), magic, ""), it,
      "");
  LLVMValueRef is_sub = LLVMBuildFCmp(
      b, LLVMRealOLT, a, tj_emit_fconst(ft, ldexp(1.0, min_exp)), "");
  LLVMValueRef r = tj_emit_select(em, is_sub, sub, normal);
  LLVMValueRef max = tj_emit_iconst(it, f.max_mag);
  r = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, r, max, ""), max, r);
  LLVMValueRef is_nan =
      LLVMBuildICmp(b, LLVMIntUGT, ab, tj_emit_iconst(it, 0x7F800000), "");
  if (f.special == TJ_MINIFLOAT_FNUZ) {
    // No -0: a zero magnitude drops the sign; NaN is 0x80 whatever its sign.
    sign = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntEQ, r, tj_emit_iconst(it, 0), ""),
        tj_emit_iconst(it, 0), sign);
    r = LLVMBuildOr(b, r, sign, "");
    r = tj_emit_select(em, is_nan, tj_emit_iconst(it, 0x80), r);
  } else if (f.special == TJ_MINIFLOAT_NONE) {
    // E2M1 has no NaN: ONNX's reference gives -0 (the sign bit alone).
    r = LLVMBuildOr(b, r, sign, "");
    r = tj_emit_select(em, is_nan, tj_emit_iconst(it, INT64_C(1) << f.sign_bit),
                       r);
  } else {
    r = tj_emit_select(em, is_nan, tj_emit_iconst(it, 0x7F), r);
    r = LLVMBuildOr(b, r, sign, "");
  }
  return LLVMBuildTrunc(b, r, tj_emit_vec(em, em->t_i8, lanes), "");
}

// f64 -> f32 rounding to odd (an inexact result gets an odd last bit), so
// that rounding the f32 again to a float8 (4 or 3 bits) rounds as the
// double would have: one rounding, as lib/dtype.c does. An f32 rounded to
// nearest could land on a float8 tie the double was not on.
static LLVMValueRef f64_to_f32_odd(tj_emit_t* em, LLVMValueRef d) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(d));
  LLVMTypeRef it = tj_emit_vec(em, em->t_i32, lanes);
  LLVMTypeRef ft = tj_emit_vec(em, em->t_f32, lanes);
  LLVMTypeRef dt = tj_emit_vec(em, em->t_f64, lanes);
  LLVMValueRef t = LLVMBuildFPTrunc(b, d, ft, "");
  LLVMValueRef back = LLVMBuildFPExt(b, t, dt, "");
  LLVMValueRef tb = LLVMBuildBitCast(b, t, it, "");
  LLVMValueRef even = LLVMBuildICmp(
      b, LLVMIntEQ, LLVMBuildAnd(b, tb, tj_emit_iconst(it, 1), ""),
      tj_emit_iconst(it, 0), "");
  LLVMValueRef inexact =
      LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealONE, back, d, ""), even, "");
  // Toward |d|: one step down in magnitude if t overshot it, else up.
  LLVMValueRef over =
      LLVMBuildFCmp(b, LLVMRealOGT, unary_abs(em, back), unary_abs(em, d), "");
  LLVMValueRef step =
      tj_emit_select(em, over, tj_emit_iconst(it, -1), tj_emit_iconst(it, 1));
  LLVMValueRef fixed = LLVMBuildAdd(b, tb, step, "");
  return LLVMBuildBitCast(b, tj_emit_select(em, inexact, fixed, tb), ft, "");
}

// Whether |dtype| is held in a wider compute integer, so that every result
// of it is wrapped to its width (wrap_int).
static bool held_wide(tj_dtype_t dtype) {
  return dtype == TJ_DTYPE_U8 || dtype == TJ_DTYPE_U16 ||
         dtype == TJ_DTYPE_U32 || dtype == TJ_DTYPE_I16 ||
         tj_dtype_is_small_int(dtype);
}

// Wraps a compute value of a dtype held wide to its width: u8, u16, u32
// masked (zero-extended), i16 sign-extended from its 16 bits.
static LLVMValueRef wrap_int(tj_emit_t* em, tj_dtype_t dtype, LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  switch (dtype) {
    case TJ_DTYPE_U8:
      return LLVMBuildAnd(em->b, v, tj_emit_iconst(t, 0xFF), "");
    case TJ_DTYPE_U16:
      return LLVMBuildAnd(em->b, v, tj_emit_iconst(t, 0xFFFF), "");
    case TJ_DTYPE_U32:
      return LLVMBuildAnd(em->b, v, tj_emit_iconst(t, 0xFFFFFFFFll), "");
    case TJ_DTYPE_I16: {
      LLVMValueRef sh = tj_emit_iconst(t, 16);
      return LLVMBuildAShr(em->b, LLVMBuildShl(em->b, v, sh, ""), sh, "");
    }
    case TJ_DTYPE_U4:
      return LLVMBuildAnd(em->b, v, tj_emit_iconst(t, 0xF), "");
    case TJ_DTYPE_U2:
      return LLVMBuildAnd(em->b, v, tj_emit_iconst(t, 0x3), "");
    case TJ_DTYPE_I4:
    case TJ_DTYPE_I2: {
      // Sign-extend from the low 4 (2) bits of whatever width |v| has.
      unsigned width = LLVMGetIntTypeWidth(elem_of(t));
      LLVMValueRef sh =
          tj_emit_iconst(t, (int64_t)width - (dtype == TJ_DTYPE_I4 ? 4 : 2));
      return LLVMBuildAShr(em->b, LLVMBuildShl(em->b, v, sh, ""), sh, "");
    }
    default:
      return v;
  }
}

// Rounds an f32 compute value to f16 or bf16 precision (kept in f32).
static LLVMValueRef round_to_half(tj_emit_t* em, LLVMValueRef v,
                                  tj_dtype_t to) {
  return widen(em, to, narrow(em, to, v));
}

LLVMValueRef tj_emit_cast(tj_emit_t* em, LLVMValueRef v, tj_dtype_t from,
                          tj_dtype_t to) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(v));
  LLVMTypeRef tt = tj_emit_vec(em, tj_emit_compute_type(em, to), lanes);
  bool half_to = to == TJ_DTYPE_F16 || to == TJ_DTYPE_BF16;
  if (from == to) return v;
  if (tj_dtype_is_f8(from)) {
    return tj_emit_cast(em, f8_to_f32(em, v, from), TJ_DTYPE_F32, to);
  }
  if (tj_dtype_is_f8(to)) {
    if (from == TJ_DTYPE_I64 || from == TJ_DTYPE_U64) {
      // through double, as the reference does
      LLVMTypeRef dt = tj_emit_vec(em, em->t_f64, lanes);
      v = from == TJ_DTYPE_U64 ? LLVMBuildUIToFP(b, v, dt, "")
                               : LLVMBuildSIToFP(b, v, dt, "");
      from = TJ_DTYPE_F64;
    }
    if (from == TJ_DTYPE_F64) return f32_to_f8(em, f64_to_f32_odd(em, v), to);
    return f32_to_f8(em, tj_emit_cast(em, v, from, TJ_DTYPE_F32), to);
  }
  if (from == TJ_DTYPE_BOOL) {
    return tj_dtype_is_float(to) ? LLVMBuildUIToFP(b, v, tt, "")
                                 : LLVMBuildZExt(b, v, tt, "");
  }
  if (to == TJ_DTYPE_BOOL) {
    LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(v));
    return tj_dtype_is_float(from) ? LLVMBuildFCmp(b, LLVMRealUNE, v, zero, "")
                                   : LLVMBuildICmp(b, LLVMIntNE, v, zero, "");
  }
  if (tj_dtype_is_float(from) && tj_dtype_is_float(to)) {
    LLVMValueRef r = v;
    if (LLVMTypeOf(v) != tt) {
      r = from == TJ_DTYPE_F64 ? LLVMBuildFPTrunc(b, v, tt, "")
                               : LLVMBuildFPExt(b, v, tt, "");
    }
    // f32-held values are already exact in any wider format; only a
    // narrowing to f16/bf16 needs rounding (bf16 -> f16 and back too).
    return half_to ? round_to_half(em, r, to) : r;
  }
  if (tj_dtype_is_int(from) && tj_dtype_is_float(to)) {
    // The unsigned dtypes held wide are non-negative there.
    LLVMValueRef r = from == TJ_DTYPE_U64 ? LLVMBuildUIToFP(b, v, tt, "")
                                          : LLVMBuildSIToFP(b, v, tt, "");
    return half_to ? round_to_half(em, r, to) : r;
  }
  if (tj_dtype_is_int(from) && tj_dtype_is_int(to)) {
    // The unsigned dtypes held wide are non-negative there: sign extension
    // of them is exact (and of u64 to a wider type never happens).
    unsigned fw = LLVMGetIntTypeWidth(elem_of(LLVMTypeOf(v)));
    unsigned tw = LLVMGetIntTypeWidth(elem_of(tt));
    LLVMValueRef r = fw < tw   ? LLVMBuildSExt(b, v, tt, "")
                     : fw > tw ? LLVMBuildTrunc(b, v, tt, "")
                               : v;
    return wrap_int(em, to, r);
  }
  // float -> int: truncate toward zero; NaN and out-of-range give 0. The
  // range test runs in double with the reference's bounds, and the
  // conversion only ever sees in-range values (fptosi of others is poison).
  LLVMTypeRef dt = tj_emit_vec(em, em->t_f64, lanes);
  LLVMValueRef d = from == TJ_DTYPE_F64 ? v : LLVMBuildFPExt(b, v, dt, "");
  LLVMValueRef in_range;
  if (to == TJ_DTYPE_I64) {
    in_range = LLVMBuildAnd(
        b,
        LLVMBuildFCmp(b, LLVMRealOGE, d,
                      tj_emit_fconst(dt, -9223372036854775808.0), ""),
        LLVMBuildFCmp(b, LLVMRealOLT, d,
                      tj_emit_fconst(dt, 9223372036854775808.0), ""),
        "");
  } else if (to == TJ_DTYPE_U64) {
    // [0, 2^64) converts; (-1, 0) truncates to 0 as the 0 it is replaced by.
    in_range = LLVMBuildAnd(
        b, LLVMBuildFCmp(b, LLVMRealOGE, d, tj_emit_fconst(dt, 0.0), ""),
        LLVMBuildFCmp(b, LLVMRealOLT, d,
                      tj_emit_fconst(dt, 18446744073709551616.0), ""),
        "");
  } else {
    // Beyond the dtype's extremes by less than 1: (lo, hi) exclusive.
    double hi = (double)tj_dtype_int_highest(to) + 1.0;
    double lo = (double)tj_dtype_int_lowest(to) - 1.0;
    in_range = LLVMBuildAnd(
        b, LLVMBuildFCmp(b, LLVMRealOGT, d, tj_emit_fconst(dt, lo), ""),
        LLVMBuildFCmp(b, LLVMRealOLT, d, tj_emit_fconst(dt, hi), ""), "");
  }
  d = tj_emit_select(em, in_range, d, tj_emit_fconst(dt, 0.0));
  return to == TJ_DTYPE_U64 ? LLVMBuildFPToUI(b, d, tt, "")
                            : LLVMBuildFPToSI(b, d, tt, "");
}

//===--- op semantics ---===//

static LLVMValueRef unary_intrinsic(tj_emit_t* em, const char* name,
                                    LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return tj_emit_intrinsic(em, name, &t, 1, &x, 1);
}

LLVMValueRef tj_emit_unary(tj_emit_t* em, tj_op_t op, tj_dtype_t dt,
                           LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef t = LLVMTypeOf(x);
  bool fl = tj_dtype_is_float(dt);
  if (em->target.unary_f32 && fl && dt != TJ_DTYPE_F64) {
    LLVMValueRef v = em->target.unary_f32(em, op, x);
    if (v) return v;
  }
  if (dt == TJ_DTYPE_U64) {  // never negative (u8/u16/u32: held so)
    switch (op) {
      case TJ_OP_ABS:
      case TJ_OP_RELU:
        return x;
      case TJ_OP_SIGN:
        return LLVMBuildZExt(
            b, LLVMBuildICmp(b, LLVMIntNE, x, LLVMConstNull(t), ""), t, "");
      default:
        break;
    }
  }
  switch (op) {
    case TJ_OP_NEG:
      return fl ? LLVMBuildFNeg(b, x, "") : LLVMBuildNeg(b, x, "");
    case TJ_OP_ABS: {
      if (fl) return unary_intrinsic(em, "llvm.fabs", x);
      LLVMValueRef args[2] = {x, LLVMConstInt(em->t_i1, 0, 0)};
      return tj_emit_intrinsic(em, "llvm.abs", &t, 1, args, 2);
    }
    case TJ_OP_EXP:
      return tj_vm_exp(em, x);
    case TJ_OP_LOG:
      return tj_vm_log(em, x);
    case TJ_OP_SQRT:
      return unary_intrinsic(em, "llvm.sqrt", x);
    case TJ_OP_RSQRT:
      return LLVMBuildFDiv(b, tj_emit_fconst(t, 1.0),
                           unary_intrinsic(em, "llvm.sqrt", x), "");
    case TJ_OP_TANH:
      return tj_vm_tanh(em, x);
    case TJ_OP_SIGMOID:
      return tj_vm_sigmoid(em, x);
    case TJ_OP_ERF:
      return tj_vm_erf(em, x);
    case TJ_OP_ERFC:
      return tj_vm_erfc(em, x);
    case TJ_OP_SIN:
      return tj_vm_sin(em, x);
    case TJ_OP_COS:
      return tj_vm_cos(em, x);
    case TJ_OP_ASIN:
      return tj_vm_asin(em, x);
    case TJ_OP_ACOS:
      return tj_vm_acos(em, x);
    case TJ_OP_ATAN:
      return tj_vm_atan(em, x);
    case TJ_OP_RELU:
      if (fl) {
        // x > 0 or NaN: x; else +0 (the reference's rule).
        LLVMValueRef zero = tj_emit_fconst(t, 0.0);
        return tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealUGT, x, zero, ""), x,
                              zero);
      }
      return tj_emit_select(
          em, LLVMBuildICmp(b, LLVMIntSGT, x, LLVMConstNull(t), ""), x,
          LLVMConstNull(t));
    case TJ_OP_FLOOR:
      return unary_intrinsic(em, "llvm.floor", x);
    case TJ_OP_CEIL:
      return unary_intrinsic(em, "llvm.ceil", x);
    case TJ_OP_ROUND:
      return unary_intrinsic(em, "llvm.roundeven", x);
    case TJ_OP_SIGN:
      if (fl) {
        LLVMValueRef zero = tj_emit_fconst(t, 0.0);
        LLVMValueRef neg =
            tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOLT, x, zero, ""),
                           tj_emit_fconst(t, -1.0), x);
        return tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOGT, x, zero, ""),
                              tj_emit_fconst(t, 1.0), neg);
      } else {
        LLVMValueRef zero = LLVMConstNull(t);
        LLVMValueRef pos =
            LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntSGT, x, zero, ""), t, "");
        LLVMValueRef neg =
            LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntSLT, x, zero, ""), t, "");
        return LLVMBuildSub(b, pos, neg, "");
      }
    case TJ_OP_NOT:
    case TJ_OP_BITWISE_NOT:
      return LLVMBuildNot(b, x, "");
    case TJ_OP_ISNAN:
      return LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
    default:
      if (!em->error) {
        em->error = tj_internal("kernel @%s: no lowering for unary %s",
                                em->k->name, tj_op_info(op)->name);
      }
      return x;
  }
}

// mod (|floor|: the sign of y, numpy.mod) or fmod (the sign of x, C fmod)
// as lib/ops.def and the reference define them: floats through frem (libm's
// fmod on x86), ints through srem with x rem 0 = x rem -1 = 0.
static LLVMValueRef emit_remainder(tj_emit_t* em, bool floor, bool fl,
                                   LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef zero = LLVMConstNull(t);
  LLVMValueRef r;
  if (fl) {
    r = LLVMBuildFRem(b, x, y, "");
    if (!floor) return r;
    LLVMValueRef r_neg = LLVMBuildFCmp(b, LLVMRealOLT, r, zero, "");
    LLVMValueRef y_neg = LLVMBuildFCmp(b, LLVMRealOLT, y, zero, "");
    LLVMValueRef fix =
        LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealONE, r, zero, ""),
                     LLVMBuildICmp(b, LLVMIntNE, r_neg, y_neg, ""), "");
    r = tj_emit_select(em, fix, LLVMBuildFAdd(b, r, y, ""), r);
    // A zero result has y's sign.
    LLVMValueRef signed_zero =
        tj_emit_select(em, y_neg, LLVMBuildFNeg(b, zero, ""), zero);
    return tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOEQ, r, zero, ""),
                          signed_zero, r);
  }
  LLVMValueRef bad = LLVMBuildOr(
      b, LLVMBuildICmp(b, LLVMIntEQ, y, zero, ""),
      LLVMBuildICmp(b, LLVMIntEQ, y, tj_emit_iconst(t, -1), ""), "");
  LLVMValueRef safe = tj_emit_select(em, bad, tj_emit_iconst(t, 1), y);
  r = tj_emit_select(em, bad, zero, LLVMBuildSRem(b, x, safe, ""));
  if (!floor) return r;
  LLVMValueRef fix = LLVMBuildAnd(
      b, LLVMBuildICmp(b, LLVMIntNE, r, zero, ""),
      LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildXor(b, r, y, ""), zero, ""), "");
  return tj_emit_select(em, fix, LLVMBuildAdd(b, r, y, ""), r);
}

static LLVMValueRef emit_binary(tj_emit_t* em, tj_op_t op, tj_dtype_t dt,
                                LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef t = LLVMTypeOf(x);
  bool fl = tj_dtype_is_float(dt);
  bool is_bool = dt == TJ_DTYPE_BOOL;
  if (dt == TJ_DTYPE_U64) {
    // The unsigned operations (u8/u16/u32 are held non-negative in a wider
    // integer, where the signed ones agree). x / 0 = x % 0 = 0.
    LLVMValueRef zero = LLVMConstNull(t);
    switch (op) {
      case TJ_OP_DIV:
      case TJ_OP_MOD:
      case TJ_OP_FMOD: {
        LLVMValueRef is_zero = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
        LLVMValueRef safe =
            tj_emit_select(em, is_zero, tj_emit_iconst(t, 1), y);
        LLVMValueRef r = op == TJ_OP_DIV ? LLVMBuildUDiv(b, x, safe, "")
                                         : LLVMBuildURem(b, x, safe, "");
        return tj_emit_select(em, is_zero, zero, r);
      }
      case TJ_OP_MAXIMUM:
      case TJ_OP_MINIMUM:
        return tj_emit_select(
            em,
            LLVMBuildICmp(b, op == TJ_OP_MAXIMUM ? LLVMIntUGT : LLVMIntULT, x,
                          y, ""),
            x, y);
      default:
        break;
    }
  }
  switch (op) {
    case TJ_OP_ADD:
      return fl ? LLVMBuildFAdd(b, x, y, "") : LLVMBuildAdd(b, x, y, "");
    case TJ_OP_SUB:
      return fl ? LLVMBuildFSub(b, x, y, "") : LLVMBuildSub(b, x, y, "");
    case TJ_OP_MUL:
      return fl ? LLVMBuildFMul(b, x, y, "") : LLVMBuildMul(b, x, y, "");
    case TJ_OP_DIV: {
      if (fl) return LLVMBuildFDiv(b, x, y, "");
      // x / 0 = 0 and x / -1 = -x (wrapping); sdiv never sees either.
      LLVMValueRef zero = LLVMConstNull(t);
      LLVMValueRef one = tj_emit_iconst(t, 1);
      LLVMValueRef is_zero = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
      LLVMValueRef is_m1 =
          LLVMBuildICmp(b, LLVMIntEQ, y, tj_emit_iconst(t, -1), "");
      LLVMValueRef safe =
          tj_emit_select(em, LLVMBuildOr(b, is_zero, is_m1, ""), one, y);
      LLVMValueRef q = LLVMBuildSDiv(b, x, safe, "");
      q = tj_emit_select(em, is_m1, LLVMBuildNeg(b, x, ""), q);
      return tj_emit_select(em, is_zero, zero, q);
    }
    case TJ_OP_POW:
      return tj_vm_pow(em, x, y);
    case TJ_OP_MAXIMUM:
    case TJ_OP_MINIMUM: {
      bool max = op == TJ_OP_MAXIMUM;
      if (is_bool)
        return max ? LLVMBuildOr(b, x, y, "") : LLVMBuildAnd(b, x, y, "");
      if (!fl) {
        return tj_emit_select(
            em, LLVMBuildICmp(b, max ? LLVMIntSGT : LLVMIntSLT, x, y, ""), x,
            y);
      }
      // As the reference: NaN if either is NaN, else the larger (smaller).
      LLVMValueRef r = tj_emit_select(
          em, LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, x, y, ""), x,
          y);
      return tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealUNO, x, y, ""),
                            LLVMBuildFAdd(b, x, y, ""), r);
    }
    case TJ_OP_EQ:
    case TJ_OP_NE:
    case TJ_OP_LT:
    case TJ_OP_LE:
    case TJ_OP_GT:
    case TJ_OP_GE: {
      static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE,
                                             LLVMRealOLT, LLVMRealOLE,
                                             LLVMRealOGT, LLVMRealOGE};
      static const LLVMIntPredicate sp[] = {LLVMIntEQ,  LLVMIntNE,  LLVMIntSLT,
                                            LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
      static const LLVMIntPredicate up[] = {LLVMIntEQ,  LLVMIntNE,  LLVMIntULT,
                                            LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
      int i = (int)op - (int)TJ_OP_EQ;
      if (fl) return LLVMBuildFCmp(b, fp[i], x, y, "");
      return LLVMBuildICmp(
          b, is_bool || tj_dtype_is_unsigned(dt) ? up[i] : sp[i], x, y, "");
    }
    case TJ_OP_AND:
    case TJ_OP_BITWISE_AND:
      return LLVMBuildAnd(b, x, y, "");
    case TJ_OP_OR:
    case TJ_OP_BITWISE_OR:
      return LLVMBuildOr(b, x, y, "");
    case TJ_OP_BITWISE_XOR:
      return LLVMBuildXor(b, x, y, "");
    case TJ_OP_MOD:
    case TJ_OP_FMOD:
      return emit_remainder(em, op == TJ_OP_MOD, fl, x, y);
    case TJ_OP_SHIFT_LEFT:
    case TJ_OP_SHIFT_RIGHT: {
      // A count outside [0, bits) shifts every bit out: 0 to the left, the
      // sign bit to the right (LLVM's shifts would be poison).
      // The compute type's width: a u8 is held in i32 (its shifted-out bits
      // are masked afterwards).
      unsigned bits = LLVMGetIntTypeWidth(elem_of(t));
      LLVMValueRef out =
          LLVMBuildICmp(b, LLVMIntUGE, y, tj_emit_iconst(t, (int64_t)bits), "");
      // Unsigned: logical, 0 beyond (the held-wide ones are non-negative,
      // and shift in zeros either way).
      if (op == TJ_OP_SHIFT_LEFT || tj_dtype_is_unsigned(dt)) {
        LLVMValueRef c = tj_emit_select(em, out, LLVMConstNull(t), y);
        LLVMValueRef s = op == TJ_OP_SHIFT_LEFT ? LLVMBuildShl(b, x, c, "")
                                                : LLVMBuildLShr(b, x, c, "");
        return tj_emit_select(em, out, LLVMConstNull(t), s);
      }
      return LLVMBuildAShr(
          b, x,
          tj_emit_select(em, out, tj_emit_iconst(t, (int64_t)bits - 1), y), "");
    }
    default:
      if (!em->error) {
        em->error = tj_internal("kernel @%s: no lowering for binary %s",
                                em->k->name, tj_op_info(op)->name);
      }
      return x;
  }
}

// A float constant of |dtype| as the f32/f64 value it holds.
static double round_const(tj_dtype_t dtype, double v) {
  switch (dtype) {
    case TJ_DTYPE_F32:
      return (double)(float)v;
    case TJ_DTYPE_F16:
      return (double)tj_f16_to_f32(tj_f64_to_f16(v));
    case TJ_DTYPE_BF16:
      return (double)tj_bf16_to_f32(tj_f64_to_bf16(v));
    default:
      return v;
  }
}

// scatter (issue 15): buffer in->ref at |point| plus |offs| elements =
// |value|, or that element combined with |value| by in->op. Scalar: the
// kernel IR allows it only in SCAN phases, which walk one point at a time
// (a vector of lanes could hold two writes to one element).
static void store_at(tj_emit_t* em, const tj_emit_point_t* point,
                     const tj_kir_inst_t* in, LLVMValueRef offs,
                     LLVMValueRef value) {
  const tj_kir_buffer_t* buf = &em->k->buffers[in->ref];
  LLVMTypeRef mt = tj_emit_memory_type(em, buf->dtype);
  unsigned align = elem_bytes(buf->dtype);
  LLVMValueRef zero = LLVMConstInt(em->t_i32, 0, 0);
  if (LLVMGetTypeKind(LLVMTypeOf(offs)) == LLVMVectorTypeKind)
    offs = LLVMBuildExtractElement(em->b, offs, zero, "");
  if (LLVMGetTypeKind(LLVMTypeOf(value)) == LLVMVectorTypeKind)
    value = LLVMBuildExtractElement(em->b, value, zero, "");
  LLVMValueRef p =
      LLVMBuildGEP2(em->b, mt, point->ptr[in->ref], &offs, 1, "at");
  if (in->op != TJ_OP_COUNT_) {
    LLVMValueRef old = LLVMBuildLoad2(em->b, mt, p, buf->name);
    LLVMSetAlignment(old, align);
    value =
        emit_binary(em, in->op, buf->dtype, widen(em, buf->dtype, old), value);
    if (held_wide(buf->dtype)) value = wrap_int(em, buf->dtype, value);
  }
  LLVMSetAlignment(LLVMBuildStore(em->b, narrow(em, buf->dtype, value), p),
                   align);
}

// Whether instruction |i| of |ph| is a constant within 1e-7 of |v|.
static bool const_near(const tj_kir_phase_t* ph, uint32_t i, double v) {
  const tj_kir_inst_t* in = &ph->insts[i];
  return in->kind == TJ_KIR_CONST && tj_dtype_is_float(in->dtype) &&
         fabs(in->fvalue - v) <= 1e-7;
}

// Whether instruction |i| of |ph| is the op |op| of two arguments, one of
// them a constant near |v|: the other in |*out|.
static bool op_by_const(const tj_kir_phase_t* ph, uint32_t i, tj_op_t op,
                        double v, uint32_t* out) {
  const tj_kir_inst_t* in = &ph->insts[i];
  if (in->kind != TJ_KIR_OP || in->op != op || in->num_args != 2) return false;
  for (int k = 0; k < 2; ++k) {
    if (const_near(ph, in->args[k], v)) {
      *out = in->args[1 - k];
      return true;
    }
  }
  return false;
}

// Decompose's gelu (erf) ending at instruction |i| of |ph|:
// m = x * -sqrt(1/2), e = erfc(m), a = x * e (either order), a * 0.5, all
// of one float dtype. Returns the f16/bf16 dtype its value is rounded to
// (its own, or that of the casts that alone read an f32 one) with x in
// |*out_x|; TJ_DTYPE_F32 where there is no such gelu.
static tj_dtype_t gelu_half_at(const tj_kir_phase_t* ph, uint32_t i,
                               uint32_t* out_x) {
  const tj_kir_inst_t* insts = ph->insts;
  tj_dtype_t dt = insts[i].dtype;
  uint32_t a, e, m, x;
  if (dt != TJ_DTYPE_F32 && dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16)
    return TJ_DTYPE_F32;
  if (!op_by_const(ph, i, TJ_OP_MUL, 0.5, &a)) return TJ_DTYPE_F32;
  const tj_kir_inst_t* in = &insts[a];
  if (in->kind != TJ_KIR_OP || in->op != TJ_OP_MUL || in->num_args != 2 ||
      in->dtype != dt)
    return TJ_DTYPE_F32;
  bool found = false;
  for (int k = 0; k < 2 && !found; ++k) {
    e = in->args[k];
    x = in->args[1 - k];
    const tj_kir_inst_t* ie = &insts[e];
    found = ie->kind == TJ_KIR_OP && ie->op == TJ_OP_ERFC && ie->dtype == dt &&
            op_by_const(ph, ie->args[0], TJ_OP_MUL, -0.70710678118654752, &m) &&
            m == x && insts[ie->args[0]].dtype == dt && insts[x].dtype == dt;
  }
  if (!found) return TJ_DTYPE_F32;
  *out_x = x;
  if (dt != TJ_DTYPE_F32) return dt;
  // An f32 gelu: every reader a cast to f16/bf16 (decompose's upcast).
  tj_dtype_t to = TJ_DTYPE_F32;
  for (uint32_t j = i + 1; j < ph->num_insts; ++j) {
    const tj_kir_inst_t* u = &insts[j];
    bool reads = false;
    for (uint32_t k = 0; k < u->num_args; ++k) reads |= u->args[k] == i;
    if (!reads) continue;
    if (u->kind != TJ_KIR_OP || u->op != TJ_OP_CAST ||
        (u->dtype != TJ_DTYPE_F16 && u->dtype != TJ_DTYPE_BF16))
      return TJ_DTYPE_F32;
    to = u->dtype;
  }
  return to;
}

// Instruction |i|'s value from the target's gelu_half hook, where it is
// such a gelu and the hook has a form for it.
static bool gelu_half_value(tj_emit_t* em, const tj_kir_phase_t* phase,
                            uint32_t i, const LLVMValueRef* vals,
                            LLVMValueRef* out) {
  uint32_t x;
  if (!em->target.gelu_half || phase->insts[i].op != TJ_OP_MUL) return false;
  tj_dtype_t to = gelu_half_at(phase, i, &x);
  if (to == TJ_DTYPE_F32) return false;
  LLVMValueRef v = em->target.gelu_half(em, to, vals[x]);
  if (v) *out = v;
  return v != NULL;
}

tj_status_t tj_emit_body(tj_emit_t* em, const tj_kir_phase_t* phase,
                         const tj_emit_point_t* point,
                         LLVMValueRef* out_yield) {
  if (out_yield) *out_yield = NULL;
  if (phase->num_insts == 0) return NULL;
  tj_allocator_t a = em->k->allocator;
  LLVMValueRef* vals = tj_calloc(a, phase->num_insts, sizeof(LLVMValueRef));
  // Per value: the same in every lane of the point (loads of buffers with
  // stride 0 along the lanes, constants, params, other dims' indices and
  // ops of such values): an indexed load at a uniform offset is a vector
  // load.
  bool* uniform = tj_calloc(a, phase->num_insts, sizeof(bool));
  // Per value: the same at every point along the innermost dim (a row
  // value, a broadcast load, ...), for target.recip_invariant_div.
  bool* invariant = tj_calloc(a, phase->num_insts, sizeof(bool));
  // Per value: computed from a row value (a reduction's result). Only such
  // a divisor becomes a reciprocal: a user's x / y with y broadcast stays
  // a division, correctly rounded, and 1 / y cannot overflow where x / y
  // does not (y subnormal).
  bool* from_row = tj_calloc(a, phase->num_insts, sizeof(bool));
  if (!vals || !uniform || !invariant || !from_row) {
    tj_free(a, vals, vals ? phase->num_insts * sizeof(LLVMValueRef) : 0);
    tj_free(a, uniform, uniform ? phase->num_insts * sizeof(bool) : 0);
    tj_free(a, invariant, invariant ? phase->num_insts * sizeof(bool) : 0);
    tj_free(a, from_row, from_row ? phase->num_insts * sizeof(bool) : 0);
    return tj_status_oom();
  }
  int32_t lanes = point->lanes;
  for (uint32_t i = 0; i < phase->num_insts && !em->error; ++i) {
    const tj_kir_inst_t* in = &phase->insts[i];
    switch (in->kind) {
      case TJ_KIR_LOAD:
        uniform[i] =
            lanes == 1 || tj_kir_ival_is_const(
                              em->k->buffers[in->ref].strides[point->vdim], 0);
        break;
      case TJ_KIR_LOAD_AT:
        uniform[i] = lanes == 1 ||
                     (uniform[in->args[0]] &&
                      tj_kir_ival_is_const(
                          em->k->buffers[in->ref].strides[point->vdim], 0));
        break;
      case TJ_KIR_CONST:
      case TJ_KIR_PARAM:
      case TJ_KIR_ROW:
        uniform[i] = true;
        break;
      case TJ_KIR_INDEX:
        uniform[i] = lanes == 1 || (int32_t)in->ref != point->vdim;
        break;
      case TJ_KIR_OP: {
        bool u = true;
        for (uint32_t k = 0; k < in->num_args; ++k) u &= uniform[in->args[k]];
        uniform[i] = u;
        break;
      }
      default:
        break;
    }
    switch (in->kind) {
      case TJ_KIR_LOAD:
        invariant[i] = tj_kir_ival_is_const(
            em->k->buffers[in->ref].strides[point->vdim], 0);
        break;
      case TJ_KIR_ROW:
        from_row[i] = true;
        invariant[i] = true;
        break;
      case TJ_KIR_CONST:
      case TJ_KIR_PARAM:
        invariant[i] = true;
        break;
      case TJ_KIR_INDEX:
        invariant[i] = (int32_t)in->ref != point->vdim;
        break;
      case TJ_KIR_OP: {
        bool v = true, r = false;
        for (uint32_t k = 0; k < in->num_args; ++k) {
          v &= invariant[in->args[k]];
          r |= from_row[in->args[k]];
        }
        invariant[i] = v;
        from_row[i] = r;
        break;
      }
      default:
        break;
    }
    LLVMTypeRef ct =
        tj_emit_vec(em, tj_emit_compute_type(em, in->dtype), lanes);
    switch (in->kind) {
      case TJ_KIR_LOAD:
        // prefetch_only loads only what stays put along the vector (a
        // gather's index): its point is in bounds, while a vector of a
        // later unit may run past its line.
        vals[i] = em->prefetch_only && !invariant[i]
                      ? LLVMConstNull(ct)
                      : tj_emit_load(em, point, in->ref);
        break;
      case TJ_KIR_LOAD_AT:
        if (em->prefetch_only) {
          prefetch_at(em, point, in->ref, vals[in->args[0]],
                      uniform[in->args[0]]);
          vals[i] = LLVMConstNull(ct);
          break;
        }
        vals[i] =
            load_at(em, point, in->ref, vals[in->args[0]], uniform[in->args[0]],
                    phase->insts[in->args[0]].kind == TJ_KIR_OP &&
                        phase->insts[in->args[0]].op == TJ_OP_WHERE,
                    known_pow2_factor(phase, in->args[0], 16));
        break;
      case TJ_KIR_CONST:
        vals[i] = tj_dtype_is_float(in->dtype)
                      ? tj_emit_fconst(ct, round_const(in->dtype, in->fvalue))
                      : tj_emit_iconst(ct, in->ivalue);
        break;
      case TJ_KIR_PARAM:
        vals[i] = tj_emit_splat(em, em->scalar[in->ref], lanes);
        break;
      case TJ_KIR_INDEX: {
        LLVMValueRef base = tj_emit_splat(em, point->index[in->ref], lanes);
        if (lanes > 1 && (int32_t)in->ref == point->vdim) {
          base =
              LLVMBuildAdd(em->b, base, tj_emit_iota(em, em->t_i64, lanes), "");
        }
        vals[i] = base;
        break;
      }
      case TJ_KIR_ACC:
        // A dual GEMM's (ref 1): its emitters set acc2; no other kernel
        // passes verification with one.
        vals[i] = in->ref ? point->acc2 : point->acc;
        break;
      case TJ_KIR_ROW:
        vals[i] = tj_emit_splat(em, point->rows[in->ref], lanes);
        break;
      case TJ_KIR_OP: {
        tj_dtype_t dt = phase->insts[in->args[0]].dtype;
        LLVMValueRef x = vals[in->args[0]];
        if (in->op == TJ_OP_CAST) {
          vals[i] = tj_emit_cast(em, x, dt, in->dtype);
        } else if (in->op == TJ_OP_BITCAST) {
          // The memory form's bits (both of one size), read back as the
          // result's compute form.
          LLVMValueRef m = narrow(em, dt, x);
          LLVMTypeRef mt = tj_emit_vec(em, tj_emit_memory_type(em, in->dtype),
                                       tj_emit_lanes_of(LLVMTypeOf(x)));
          vals[i] = widen(em, in->dtype, LLVMBuildBitCast(em->b, m, mt, ""));
        } else if (in->op == TJ_OP_WHERE) {
          vals[i] = tj_emit_select(em, x, vals[in->args[1]], vals[in->args[2]]);
        } else if (in->num_args == 1) {
          vals[i] = tj_emit_unary(em, in->op, dt, x);
        } else if (gelu_half_value(em, phase, i, vals, &vals[i])) {
          // the hook's gelu; the erfc and products before it stay only
          // where something else reads them (LLVM drops them otherwise)
        } else if (in->op == TJ_OP_DIV && dt == TJ_DTYPE_F32 &&
                   em->target.recip_invariant_div && !invariant[i] &&
                   invariant[in->args[1]] && from_row[in->args[1]]) {
          // x / s with s the same along the row (softmax's sum, a norm's
          // denominator): x * (1 / s), one division a row, not an element.
          LLVMValueRef y = vals[in->args[1]];
          vals[i] = LLVMBuildFMul(
              em->b, x,
              LLVMBuildFDiv(em->b, tj_emit_fconst(LLVMTypeOf(y), 1.0), y, ""),
              "");
        } else {
          vals[i] = emit_binary(em, in->op, dt, x, vals[in->args[1]]);
        }
        if (held_wide(in->dtype) && in->op != TJ_OP_CAST &&
            in->op != TJ_OP_BITCAST && vals[i]) {
          // arithmetic in the wider integer, wrapped
          vals[i] = wrap_int(em, in->dtype, vals[i]);
        }
        break;
      }
      case TJ_KIR_STORE:
        if (!em->prefetch_only)
          tj_emit_store(em, point, in->ref, vals[in->args[0]]);
        break;
      case TJ_KIR_YIELD:
        if (out_yield) *out_yield = vals[in->args[0]];
        break;
      case TJ_KIR_STORE_AT:
        if (!em->prefetch_only)
          store_at(em, point, in, vals[in->args[0]], vals[in->args[1]]);
        break;
    }
  }
  tj_free(a, vals, phase->num_insts * sizeof(LLVMValueRef));
  tj_free(a, uniform, phase->num_insts * sizeof(bool));
  tj_free(a, invariant, phase->num_insts * sizeof(bool));
  tj_free(a, from_row, phase->num_insts * sizeof(bool));
  return NULL;
}

//===--- decomposition of a linear index ---===//

void tj_emit_decompose(tj_emit_t* em, LLVMValueRef linear, int32_t ndims,
                       tj_emit_point_t* point) {
  const tj_kir_t* k = em->k;
  LLVMValueRef offs[TJ_KIR_MAX_BUFFERS];
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    offs[b] = LLVMConstInt(em->t_i64, 0, 0);
  }
  LLVMValueRef rest = linear;
  for (int32_t d = ndims - 1; d >= 0; --d) {
    LLVMValueRef idx = rest;
    if (d > 0) {
      idx = LLVMBuildURem(em->b, rest, em->dim[d], "");
      rest = LLVMBuildUDiv(em->b, rest, em->dim[d], "");
    }
    point->index[d] = idx;
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      if (tj_kir_ival_is_const(k->buffers[b].strides[d], 0)) continue;
      offs[b] = LLVMBuildAdd(
          em->b, offs[b],
          LLVMBuildMul(em->b, idx, tj_emit_stride(em, b, d), ""), "");
    }
  }
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    point->ptr[b] = tj_emit_advance(em, b, em->base[b], offs[b]);
  }
}

//===--- the module ---===//

static void add_fn_attr(tj_emit_t* em, LLVMValueRef fn, const char* name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(em->ctx, kind, 0));
}

static tj_status_t emit_kernel(tj_emit_t* em, const tj_kir_t* k) {
  em->k = k;
  if (!k->finalized) {
    return tj_invalid("kernel @%s is not finalized", k->name);
  }
  char name[256];
  snprintf(name, sizeof(name), "tj_kernel_%s", k->name);
  if (LLVMGetNamedFunction(em->mod, name)) {
    return tj_invalid("kernel @%s: two kernels with this name in one module",
                      k->name);
  }
  LLVMTypeRef params[5] = {em->t_ptr, em->t_ptr, em->t_ptr, em->t_i64,
                           em->t_i64};
  LLVMTypeRef fty = LLVMFunctionType(em->t_void, params, 5, 0);
  em->fn = LLVMAddFunction(em->mod, name, fty);
  add_fn_attr(em, em->fn, "nounwind");
  char width[16];
  snprintf(width, sizeof(width), "%d", em->target.lanes * 32);
  LLVMAddAttributeAtIndex(
      em->fn, LLVMAttributeFunctionIndex,
      LLVMCreateStringAttribute(em->ctx, "prefer-vector-width", 19, width,
                                (unsigned)strlen(width)));
  em->arg_buffers = LLVMGetParam(em->fn, 0);
  em->arg_scalars = LLVMGetParam(em->fn, 1);
  em->arg_scratch = LLVMGetParam(em->fn, 2);
  em->arg_begin = LLVMGetParam(em->fn, 3);
  em->arg_end = LLVMGetParam(em->fn, 4);
  em->entry = LLVMAppendBasicBlockInContext(em->ctx, em->fn, "entry");
  LLVMPositionBuilderAtEnd(em->b, em->entry);
  for (uint32_t p = 0; p < k->num_params; ++p) {
    LLVMValueRef idx = LLVMConstInt(em->t_i64, p, 0);
    LLVMValueRef ptr =
        LLVMBuildGEP2(em->b, em->t_i64, em->arg_scalars, &idx, 1, "");
    em->scalar[p] = LLVMBuildLoad2(em->b, em->t_i64, ptr, k->param_names[p]);
  }
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    LLVMValueRef idx = LLVMConstInt(em->t_i64, b, 0);
    LLVMValueRef ptr =
        LLVMBuildGEP2(em->b, em->t_ptr, em->arg_buffers, &idx, 1, "");
    em->base[b] = LLVMBuildLoad2(em->b, em->t_ptr, ptr, k->buffers[b].name);
  }
  for (int32_t d = 0; d < k->rank; ++d)
    em->dim[d] = tj_emit_ival(em, k->dims[d]);
  em->gemm_k = tj_emit_ival(em, k->gemm_k);
  tj_status_t s = NULL;
  switch (k->kind) {
    case TJ_KIR_POINTWISE:
      s = tj_emit_pointwise(em);
      break;
    case TJ_KIR_ROW_REDUCE:
      s = tj_emit_row_reduce(em);
      break;
    case TJ_KIR_GEMM:
      s = tj_emit_gemm(em);
      break;
    case TJ_KIR_ATTENTION:
      s = tj_emit_attention(em);
      break;
    case TJ_KIR_CONV:
      // dwbw: depthwise convs and pools are the direct window variant.
      s = k->conv.window != TJ_KIR_WINDOW_GEMM ? tj_emit_window(em)
                                               : tj_emit_conv(em);
      break;
  }
  if (!s && em->error) {
    s = em->error;
    em->error = NULL;
  }
  if (s) return s;
  LLVMBuildRetVoid(em->b);
  return NULL;
}

tj_status_t tj_emit_kernels(LLVMModuleRef module,
                            const tj_emit_target_t* target,
                            const tj_kir_t* const* kernels,
                            uint32_t num_kernels) {
  tj_emit_t em;
  memset(&em, 0, sizeof(em));
  em.mod = module;
  em.ctx = LLVMGetModuleContext(module);
  em.target = *target;
  em.b = LLVMCreateBuilderInContext(em.ctx);
  em.t_void = LLVMVoidTypeInContext(em.ctx);
  em.t_i1 = LLVMInt1TypeInContext(em.ctx);
  em.t_i8 = LLVMInt8TypeInContext(em.ctx);
  em.t_i16 = LLVMInt16TypeInContext(em.ctx);
  em.t_i32 = LLVMInt32TypeInContext(em.ctx);
  em.t_i64 = LLVMInt64TypeInContext(em.ctx);
  em.t_f16 = LLVMHalfTypeInContext(em.ctx);
  em.t_f32 = LLVMFloatTypeInContext(em.ctx);
  em.t_f64 = LLVMDoubleTypeInContext(em.ctx);
  em.t_ptr = LLVMPointerTypeInContext(em.ctx, 0);
  tj_status_t s = NULL;
  for (uint32_t i = 0; i < num_kernels && !s; ++i) {
    s = emit_kernel(&em, kernels[i]);
  }
  tj_status_free(em.error);
  LLVMDisposeBuilder(em.b);
  return s;
}
