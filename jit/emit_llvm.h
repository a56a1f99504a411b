// Kernel IR -> LLVM IR: the internal interface shared by emit_llvm.c (the
// module entry point, types, loads/stores, the op semantics), vecmath.c
// (transcendentals), and the three template emitters emit_pointwise.c,
// emit_reduce.c and emit_gemm.c.
//
// Code is written with explicit vector types of |lanes| f32 lanes (16 for
// AVX-512, 8 for AVX2, 4 for SSE2): f64 and i64 values use the same lane
// count and LLVM splits them over two registers. Only target-independent
// intrinsics are used, so one emitter serves every x86 level; the target
// only picks widths and whether FMA / F16C instructions may be assumed.

#ifndef TJ_JIT_EMIT_LLVM_H_
#define TJ_JIT_EMIT_LLVM_H_

#include <llvm-c/Core.h>

#include "kir/kernel_ir.h"

struct tj_emit_t;

// A target's own code for unary op |op| on |x|, an f32 value (scalar or
// vector) of an f32, f16 or bf16 computation; NULL means "use the portable
// code" (jit/vecmath.h). The NVPTX emitter's fast math is one
// (jit/nvptx_math.h).
typedef LLVMValueRef (*tj_emit_unary_hook_fn)(struct tj_emit_t* em, tj_op_t op,
                                              LLVMValueRef x);

// gelu (erf) of |x| (compute-type lanes), whose value the reference rounds
// to |dtype| (f16 or bf16) before anything else reads it; NULL where the
// target has no such form for |dtype|.
typedef LLVMValueRef (*tj_emit_gelu_hook_fn)(struct tj_emit_t* em,
                                             tj_dtype_t dtype, LLVMValueRef x);

// What the emitter may assume about the CPU that runs the code.
typedef struct tj_emit_target_t {
  int32_t lanes;  // f32 lanes per vector: 16, 8 or 4
  bool has_fma;   // llvm.fma is one instruction (else fmuladd: mul + add)
  bool has_f16c;  // f16 <-> f32 in hardware (else integer emulation)
  // f32 -> bf16 in hardware (fptrunc to bfloat: NVPTX's cvt.rn.bf16.f32,
  // sm_80 and later), else the integer rounding of float_to_bf16_bits,
  // seven instructions a value that dominated the GPU GEMM epilogues
  // (ncu, issue 13). Round to nearest even either way; a NaN stays a NaN
  // (the hardware's is the canonical one).
  bool has_bf16_cvt;
  // Two f32 -> f16/bf16 in one instruction (NVPTX's cvt.rn.{bf16x2,
  // f16x2}.f32 through llvm.nvvm.ff2{bf16,f16}x2.rn): a vector of an even
  // number of lanes narrows a pair at a time (with has_f16c and
  // has_bf16_cvt; LLVM 19 converts each lane and packs them).
  bool has_cvt_x2;
  bool avx512;  // 32 vector registers, masked loads for every width
  // vdpbf16ps (llvm.x86.avx512bf16.dpbf16ps.512): the bf16 GEMM multiplies
  // pairs of bf16 into f32 sums in one instruction (emit_gemm.c).
  bool avx512bf16;
  // qgemm (issue 17): vpdpbusd at this width (AVX512-VNNI with 16 lanes,
  // AVX-VNNI's VEX form with 8): the integer GEMM's u8 x s8 quads.
  bool vnni;
  // qgemm (issue 17): AMX int8 tiles (tdpbusd and its sign variants) for
  // the integer GEMM; the process has the tile data permission.
  bool amx;
  // AMX bf16 tiles (tdpbf16ps) besides: the bf16 GEMM's packed path
  // multiplies on the tiles too (emit_gemm.c). Only with |amx|.
  bool amx_bf16;
  tj_emit_unary_hook_fn unary_f32;  // optional
  // The f64 functions jit/vecmath.c calls lane by lane (tanh, erf, erfc,
  // sin, cos, asin, acos, atan, pow) are named with this prefix: NULL for
  // the C library's (x86), "__nv_" for NVIDIA's libdevice (NVPTX).
  const char* libm_prefix;
  // Optional: decompose's gelu (erf), x * erfc(x * -sqrt(1/2)) * 0.5, found
  // in a body (tj_emit_body) where it is an f16/bf16 value or an f32 one
  // read only by casts to f16/bf16, is this hook's value (NVPTX's
  // approximate math: 16 instructions, not erfc's 38 and three).
  tj_emit_gelu_hook_fn gelu_half;
  // An f32 division whose divisor is the same along the innermost dim (a
  // row result, a broadcast operand) and whose dividend is not becomes a
  // multiplication by the divisor's reciprocal: within 1.5 ulp of the
  // division (a divisor below 2^-126 in magnitude gives +-inf); NVPTX,
  // where a correctly rounded division is a dozen instructions.
  bool recip_invariant_div;
  // Vector lanes a small constant stride apart load as a gather of each
  // lane's element, not as one load of their span and a shuffle
  // (emit_llvm.c's load_span): NVPTX, which splits a long vector load into
  // scalar loads anyway and would read the elements between the lanes too.
  bool strided_as_gather;
} tj_emit_target_t;

// Emits one function "tj_kernel_<name>" (a tj_kir_fn_t) per finalized
// kernel into |module|, which must be empty of those names.
tj_status_t tj_emit_kernels(LLVMModuleRef module,
                            const tj_emit_target_t* target,
                            const tj_kir_t* const* kernels,
                            uint32_t num_kernels);

//===--- shared emitter state ---===//

typedef struct tj_emit_t {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  tj_emit_target_t target;
  const tj_kir_t* k;
  LLVMValueRef fn;
  LLVMBasicBlockRef entry;
  LLVMTypeRef t_void, t_i1, t_i8, t_i16, t_i32, t_i64, t_f16, t_f32, t_f64,
      t_ptr;
  // The kernel's arguments.
  LLVMValueRef arg_buffers, arg_scalars, arg_scratch, arg_begin, arg_end;
  // Loaded in the entry block.
  LLVMValueRef base[TJ_KIR_MAX_BUFFERS];   // buffer base pointers
  LLVMValueRef scalar[TJ_KIR_MAX_PARAMS];  // i64 scalar params
  LLVMValueRef dim[TJ_KIR_MAX_RANK];       // i64 space dims
  LLVMValueRef gemm_k;                     // i64
  tj_status_t error;  // first emission error; emission stops adding code
  struct tj_emit_load_cache_t* load_cache;  // NULL: every load is emitted
  // Unmasked vector stores of stride 1 into OUTPUT buffers are
  // non-temporal and aligned to the vector (the caller checked that the
  // point's address is): x86's pointwise gather of rows past the caches
  // (emit_pointwise.c), which would otherwise read each output line in
  // before writing it.
  bool nontemporal_stores;
  // tj_emit_body emits no store: each row a uniform LOAD_AT reads (one
  // offset for the whole vector, stride 1) is prefetched from its first
  // TJ_EMIT_PREFETCH_LINES cache lines instead of loaded, and the values
  // computed from it are dead. The pointwise gather (emit_pointwise.c) so
  // touches a later unit's rows while it copies this unit's.
  bool prefetch_only;
} tj_emit_t;

#define TJ_EMIT_PREFETCH_LINES 8

// The metadata kind (no operands) on a vector load at a point plus an
// offset known to be a multiple of its lanes (a gathered row:
// jit/emit_llvm.c's load_at): aligned where the point is.
#define TJ_EMIT_MD_LANES_ALIGNED "tj.lanes_aligned"

// Loads already emitted, reused by tj_emit_load instead of loading again:
// a template that evaluates a buffer at the same point several times (the
// NVPTX row reduction holding its row in registers across phases) or wants
// the loads of several points issued before their stores (an unrolled map
// whose stores might alias its loads) sets |slot| to the point's number
// before each body. Entries are per (slot, buffer): a point reads each
// buffer at one address. With |insert| false, misses are loaded but not
// remembered (bodies emitted under a condition, whose values would not
// dominate later uses).
#define TJ_EMIT_LOAD_CACHE_SLOTS 16
typedef struct tj_emit_load_cache_t {
  int32_t slot;  // < TJ_EMIT_LOAD_CACHE_SLOTS, or -1: bypass the cache
  bool insert;
  LLVMValueRef values[TJ_EMIT_LOAD_CACHE_SLOTS][TJ_KIR_MAX_BUFFERS];
} tj_emit_load_cache_t;

// A point (or a vector of |lanes| consecutive points along dim |vdim|) at
// which a body is evaluated.
typedef struct tj_emit_point_t {
  int32_t lanes;      // 1, or the target's lane count
  int32_t vdim;       // dim the lanes walk along (when lanes > 1)
  LLVMValueRef mask;  // <lanes x i1> of active lanes; NULL: all active
  // Every buffer of stride 1 along |vdim| has lane 0's address aligned to
  // |lanes| elements (NVPTX's pointwise vector path checks it before it
  // runs): a load at an offset that is a multiple of the lanes keeps it.
  bool aligned;
  // Address of lane 0's element per buffer (NULL: not addressable here).
  LLVMValueRef ptr[TJ_KIR_MAX_BUFFERS];
  LLVMValueRef index[TJ_KIR_MAX_RANK];  // i64 index of lane 0 per dim
  LLVMValueRef acc;                     // GEMM: the accumulator vector
  LLVMValueRef acc2;  // a dual GEMM's second accumulator (TJ_KIR_ACC ref 1)
  const LLVMValueRef* rows;  // ROW_REDUCE: row results (scalars)
} tj_emit_point_t;

//===--- types and constants ---===//

// The in-register type of a dtype's values: f32 for f32/f16/bf16, f64,
// i8/i32/i64, i1 for bool.
LLVMTypeRef tj_emit_compute_type(tj_emit_t* em, tj_dtype_t dtype);
// The in-memory element type: half (F16C) or i16 for f16, i16 for bf16,
// i8 for bool.
LLVMTypeRef tj_emit_memory_type(tj_emit_t* em, tj_dtype_t dtype);
// |scalar| as a vector of |lanes| (unchanged when lanes == 1).
LLVMTypeRef tj_emit_vec(tj_emit_t* em, LLVMTypeRef scalar, int32_t lanes);
// Lanes of a value type (1 for scalars).
int32_t tj_emit_lanes_of(LLVMTypeRef type);
// The integer type with the element width and lane count of float |type|.
LLVMTypeRef tj_emit_int_like(tj_emit_t* em, LLVMTypeRef type);
// Constants shaped like |type| (scalar or vector).
LLVMValueRef tj_emit_fconst(LLVMTypeRef type, double value);
LLVMValueRef tj_emit_iconst(LLVMTypeRef type, int64_t value);
// |value| (a scalar) broadcast to |lanes| lanes.
LLVMValueRef tj_emit_splat(tj_emit_t* em, LLVMValueRef value, int32_t lanes);
// <0, 1, .., lanes-1> as i64 (or i32) lanes.
LLVMValueRef tj_emit_iota(tj_emit_t* em, LLVMTypeRef elem, int32_t lanes);

//===--- instructions ---===//

// Calls the overloaded intrinsic |name| with |num_types| overload types.
LLVMValueRef tj_emit_intrinsic(tj_emit_t* em, const char* name,
                               LLVMTypeRef* types, unsigned num_types,
                               LLVMValueRef* args, unsigned num_args);
// A call of inline assembly |text| (AT&T dialect, with side effects)
// returning |ret|, for instructions LLVM 19 has no intrinsic for (NVPTX's
// wgmma, fence.proxy, descriptors). At most 132 arguments.
LLVMValueRef tj_emit_inline_asm(tj_emit_t* em, LLVMTypeRef ret,
                                const char* text, const char* constraints,
                                LLVMValueRef* args, unsigned num_args);
// a * b + c, fused when the target has FMA (llvm.fmuladd).
LLVMValueRef tj_emit_fmuladd(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b,
                             LLVMValueRef c);
// Horner: c[0] * x^(n-1) + ... + c[n-1].
LLVMValueRef tj_emit_poly(tj_emit_t* em, LLVMValueRef x, const double* c,
                          int n);
LLVMValueRef tj_emit_select(tj_emit_t* em, LLVMValueRef cond, LLVMValueRef a,
                            LLVMValueRef b);
// The float min (max) reductions' combine step: NaN if either is NaN,
// and -0 below +0 (IEEE 754-2019 minimum/maximum), so that the result of a
// reduction does not depend on the order of its tree (the reference keeps
// the same order; a lane tree over {+0, -0} would otherwise give either).
LLVMValueRef tj_emit_fminmax(tj_emit_t* em, bool max, LLVMValueRef a,
                             LLVMValueRef b);
// Element-wise min/max of two i64 scalars.
LLVMValueRef tj_emit_min_i64(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b);
// |w| rows of |w| lanes (w a power of 2, at most 16), |row|, transposed
// in registers: lane j of row i becomes lane i of row j, in log2(w) stages
// of two-source shuffles, stage h swapping bit h of the row index with bit
// h of the lane index (the x86 conv's and window's NCHWc tiles).
void tj_emit_transpose_tile(tj_emit_t* em, LLVMValueRef* row, int32_t w);

// An i64 slot in the entry block (for loop counters and accumulators that
// SROA turns back into SSA values).
LLVMValueRef tj_emit_alloca(tj_emit_t* em, LLVMTypeRef type, const char* name);

// A counted loop: for (i = start; i < limit; i += step). The body is emitted
// between loop_begin (which returns i) and loop_end.
typedef struct tj_emit_loop_t {
  LLVMValueRef var, limit, step;
  LLVMBasicBlockRef cond, body, done;
} tj_emit_loop_t;
LLVMValueRef tj_emit_loop_begin(tj_emit_t* em, tj_emit_loop_t* loop,
                                LLVMValueRef start, LLVMValueRef limit,
                                LLVMValueRef step, const char* name);
void tj_emit_loop_end(tj_emit_t* em, tj_emit_loop_t* loop);

// Runs the code emitted between if_begin and if_end when |cond| holds.
typedef struct tj_emit_if_t {
  LLVMBasicBlockRef then_block, done;
} tj_emit_if_t;
void tj_emit_if_begin(tj_emit_t* em, tj_emit_if_t* branch, LLVMValueRef cond,
                      const char* name);
void tj_emit_if_end(tj_emit_t* em, tj_emit_if_t* branch);

//===--- memory ---===//

// The i64 value of stride |d| of buffer |b| (constant or loaded param).
LLVMValueRef tj_emit_stride(tj_emit_t* em, uint32_t b, int32_t d);
// The i64 value of |v|.
LLVMValueRef tj_emit_ival(tj_emit_t* em, tj_kir_ival_t v);
// |ptr| advanced by |count| elements of buffer |b|'s memory type.
LLVMValueRef tj_emit_advance(tj_emit_t* em, uint32_t b, LLVMValueRef ptr,
                             LLVMValueRef count);
// Lane mask <lanes x i1>: lane < |count| (an i64 scalar).
LLVMValueRef tj_emit_lane_mask(tj_emit_t* em, LLVMValueRef count,
                               int32_t lanes);
// Loads buffer |b| at |point| as its compute type (vector or scalar).
LLVMValueRef tj_emit_load(tj_emit_t* em, const tj_emit_point_t* point,
                          uint32_t b);
// Whether a vector along space dim |vdim| would store every output it
// writes as a scatter: each output's stride along it is neither 1, nor 0,
// nor a span's 2 to 4 (the edge columns and corners of a padded window,
// where the boxes cut the innermost axis into pieces of one element).
bool tj_emit_dim_stores_scatter(tj_emit_t* em, int32_t vdim);
// Stores compute-type |value| to buffer |b| at |point|.
void tj_emit_store(tj_emit_t* em, const tj_emit_point_t* point, uint32_t b,
                   LLVMValueRef value);

// A value of |dtype|'s memory type (scalar or vector) widened to its
// compute type: f16/bf16 -> f32 exactly, bool -> i1; others unchanged.
LLVMValueRef tj_emit_widen(tj_emit_t* em, tj_dtype_t dtype, LLVMValueRef value);

// The inverse: a compute-type value of |dtype| in its memory type
// (f16/bf16 rounded to nearest even, bool as i8).
LLVMValueRef tj_emit_narrow(tj_emit_t* em, tj_dtype_t dtype,
                            LLVMValueRef value);

// Converts a value of |from| (compute type) to dtype |to| (compute type),
// with the rounding and saturation rules of kernel_ir.h.
LLVMValueRef tj_emit_cast(tj_emit_t* em, LLVMValueRef value, tj_dtype_t from,
                          tj_dtype_t to);

// Unary op |op| of a body (TJ_KIR_OP with one argument) on |x|, a compute-
// type value (scalar or vector) of |dtype|, as bodies emit it (the
// target's hook first). For emitters that restructure a body's math, such
// as the NVPTX online softmax, and must round as the body would.
LLVMValueRef tj_emit_unary(tj_emit_t* em, tj_op_t op, tj_dtype_t dtype,
                           LLVMValueRef x);

//===--- bodies ---===//

// Emits |phase|'s instructions at |point|. Returns the yielded value in
// |*out_yield| (REDUCE phases; may be NULL otherwise).
tj_status_t tj_emit_body(tj_emit_t* em, const tj_kir_phase_t* phase,
                         const tj_emit_point_t* point, LLVMValueRef* out_yield);

//===--- templates ---===//

tj_status_t tj_emit_pointwise(tj_emit_t* em);
// The point |offset| elements into a line along the last space dim whose
// element 0 is at |line| (with index |index0| along that dim).
void tj_emit_line_point(tj_emit_t* em, const tj_emit_point_t* line,
                        LLVMValueRef offset, LLVMValueRef index0,
                        tj_emit_point_t* out);
// Emits |phase| over elements [0, len) of a line along the last space dim
// (|line| points at its element 0, whose index along that dim is |index0|):
// full vectors, then a masked tail. Shared by POINTWISE and the MAP phases
// of ROW_REDUCE.
tj_status_t tj_emit_line_map(tj_emit_t* em, const tj_kir_phase_t* phase,
                             const tj_emit_point_t* line, LLVMValueRef index0,
                             LLVMValueRef len);
tj_status_t tj_emit_row_reduce(tj_emit_t* em);
tj_status_t tj_emit_gemm(tj_emit_t* em);
// Whether GEMM |k| on |target| reads B as the quads of a prepacked B
// (tj_kir_t.b_prepacked) could give: an 8-bit GEMM on the AMX tiles, or
// on vpdpbusd / vpmaddubsw quads with a u8 A; B one for every batch, K and
// N constants.
bool tj_emit_gemm_prepacks_b(const tj_emit_target_t* target, const tj_kir_t* k);
tj_status_t tj_emit_attention(tj_emit_t* em);  // emit_attention.c
tj_status_t tj_emit_conv(tj_emit_t* em);       // emit_conv.c
tj_status_t tj_emit_window(tj_emit_t* em);     // emit_window.c (dwbw)

// Pointers for every buffer at the point whose multi-index over dims
// [0, ndims) is derived from |linear| (row-major over those dims); sets
// point->ptr and point->index for those dims.
void tj_emit_decompose(tj_emit_t* em, LLVMValueRef linear, int32_t ndims,
                       tj_emit_point_t* point);

#endif  // TJ_JIT_EMIT_LLVM_H_
