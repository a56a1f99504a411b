// The kernel IR: what one JIT-compiled CPU kernel computes, independent of
// LLVM and of the graph IR. The fusion lowering targets it; jit/emit_*.c
// turn it into LLVM IR. It is small on purpose: four templates cover the
// fused groups the middle end forms (and attention, issue 14).
//
//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//
//
// A kernel has
//   - scalar params: int64 values passed at run time (symbolic sizes like B,
//     and strides that depend on them, e.g. S*H). The runtime computes them.
//   - an iteration space of |rank| dims (1..TJ_KIR_MAX_RANK); each dim is a
//     tj_kir_ival_t: a constant or a scalar param.
//   - buffer params: a base pointer with a dtype, a role and one element
//     stride per space dim (constant or param). Element (i0, .., in-1) of the
//     space lives at base + sum_d i_d * stride_d. Broadcast inputs have
//     stride 0 in the broadcast dims; transposed or sliced views have other
//     strides. Give constants where they are known: the innermost stride
//     decides the code (1: vector loads, 0: one scalar load splat to every
//     lane, anything else: gathers), and a stride held in a param is never
//     assumed to be 1.
//   - one template (tj_kir_kind_t) with one or more bodies ("phases"): SSA
//     lists of scalar instructions (tj_kir_inst_t). A body describes the work
//     for ONE point of the space; the emitter vectorizes it along the
//     innermost dim (the last one; for GEMM, n) and adds masked tails.
//
// Templates:
//   POINTWISE    space = the output shape. One MAP phase: loads of inputs at
//                the current point, math, stores to one or more outputs.
//   ROW_REDUCE   space = [rows.., L]: every dim but the last indexes a row,
//                the last one (length L) is reduced. Phases run in order for
//                each row, over the row's L elements while it is hot in
//                cache:
//                  REDUCE <op>: the body yields one value per element; the
//                    values are combined with <op> into the row result
//                    ^phase, which later phases read with TJ_KIR_ROW.
//                  MAP: a pointwise body over the row's elements (may read
//                    row results), typically storing the normalized row.
//                  ROW: a body evaluated once per row, to store per-row
//                    results (e.g. mean, rstd, argmax); it may only access
//                    buffers whose stride along L is 0.
//                  SCAN <op> -> ^phase (ops3, issue 15): the body runs once
//                    per element of L, in order (from L - 1 down to 0 when
//                    reverse), one element after the other; it reads
//                    TJ_KIR_ROW ^phase (its own phase) as the combine of
//                    the values it yielded at the elements before this
//                    one (the exclusive prefix; the identity at the
//                    first), may store, and yields the element's value.
//                    cumsum is `%p = row ^0; %x = load; %s = add %p, %x;
//                    store %y, %s; yield %x`. Sequential along L, rows in
//                    parallel: O(L) per row.
//                Softmax is REDUCE max, REDUCE sum of exp(x - ^0), MAP
//                exp(x - ^0) / ^1. layer_norm is REDUCE sum x, REDUCE sum
//                (x - mean)^2, MAP normalize.
//   GEMM         C[.., m, n] = sum_k A[.., m, k] * B[.., k, n] for a space
//                [batch.., M, N] and a contraction length K (gemm.k). A and
//                B are the buffers with roles GEMM_A / GEMM_B; their strides
//                are indexed [batch.., m, k] and [batch.., k, n]. One MAP
//                phase, the epilogue, runs on the f32 accumulator tile right
//                after the K loop (TJ_KIR_ACC reads it): bias adds, gelu,
//                residual adds, casts, and the store(s) of the result, so
//                gelu(x @ w + b) is one kernel. A and B must be f32
//                (f16/bf16 too where allow_half_gemm is set: the product
//                is still accumulated in f32).
//   ATTENTION    (issue 14) softmax attention, the attention op of
//                lib/ops.def, as one flash-attention kernel: space
//                [batch.., Hkv, G, Tq, Tk] (query head h = hkv * G + g),
//                buffers with roles ATTN_Q, ATTN_K, ATTN_V, optionally
//                ATTN_MASK (bool: true keeps; or additive, q's dtype), and
//                one OUTPUT, each with a stride per space dim (0 where it
//                does not vary: K and V along G and Tq, Q and the output
//                along Tk); the head dims (tj_kir_attention_t d and dv)
//                are contiguous (stride 1) in Q, K, V and the output.
//                y[.., i, :] = sum_j p_j v[.., j, :] / sum_j p_j with p_j =
//                exp(s_j - max s), s_j = scale * q_i . k_j + mask, minus
//                infinity where the mask is false or (causal) j > i; a row
//                with no key left gives 0. No phases' instructions (its
//                one MAP phase stays empty). tj_kir_attention_t.op names
//                the op (fabwdcuda): the forward above, or attention's
//                backward nodes on the same space: LSE (no V; the OUTPUT
//                lse [.., Tq] f32, stride 0 along Tk), DQ and DKV (V, plus
//                ATTN_DO = dL/dy with V's head dim, ATTN_LSE and
//                ATTN_DELTA with lse's strides; the OUTPUT dq as q, or
//                [dk | dv] rows of d + dv along Tk, stride 0 along G and
//                Tq, whose terms it sums).
//   CONV         (issue 15) a groups == 1 convolution, the conv op of
//                lib/ops.def, as one implicit GEMM: space [N, O, out
//                spatial..] (1 to 3 spatial dims), buffers CONV_X, CONV_W,
//                optionally CONV_BIAS, and one OUTPUT (row-major, the
//                space's strides); y[n, o, i] = b[o] + sum_{c, t} x[n, c,
//                i * stride + t * dilation - low] * w[o, c, t], x read as 0
//                outside its bounds. tj_kir_conv_t holds the window; only
//                N may be a runtime size. Either no phases' instructions
//                (the OUTPUT is y, f32), or (issue 15, convfuse) an
//                epilogue as a GEMM's: the MAP phase runs at each output
//                point with TJ_KIR_ACC reading y (the bias added), loads
//                of INPUT buffers (a residual) at the point, and stores to
//                the OUTPUT buffers (any dtype): relu(conv + residual) is
//                one kernel.
//
//===----------------------------------------------------------------------===//
// Values and dtypes
//===----------------------------------------------------------------------===//
//
// Every instruction produces one value (stores and yields produce none) with
// a tj_dtype_t. Semantics are those of lib/ops.def for the TJ_OP_* ops used,
// with these representation rules:
//   - f16 and bf16 values are held in f32: a load widens exactly, math runs
//     in f32 without rounding in between, a store or a cast to f16/bf16
//     rounds to nearest even. (The reference rounds after every op; fused
//     f16 chains are therefore at least as accurate.)
//   - f64 -> f16/bf16 casts round through f32 (two roundings; may differ by
//     one f16/bf16 ulp from a single rounding in rare ties).
//   - bool is 0/1 in one byte in memory.
//   - integer add/sub/mul/neg wrap; int div truncates, x / 0 = 0 and
//     x / -1 = -x (wrapping); float -> int casts truncate toward zero and
//     give 0 for NaN and out-of-range values; float -> bool is x != 0.
//   - row results (TJ_KIR_ROW) have the yielded dtype (i64 for ARGMAX); sums
//     of f16/bf16 accumulate in f32, of f32 in f32 with blocked partial sums.
//
// Accuracy of the transcendentals (f32: 1 to 2.5 ulp; f16/bf16 inherit it;
// tested against libm in double by tests/unit/vecmath_test.c): see
// jit/vecmath.h.
//
//===----------------------------------------------------------------------===//
// Text form (tj_kir_print), one instruction a line:
//===----------------------------------------------------------------------===//
//
//   kernel @gelu_bias pointwise [$B, 4096] ($B) {
//     buf %x: f32 in [4096, 1]
//     buf %b: f32 in [0, 1]
//     buf %y: f32 out [4096, 1]
//     map {
//       %0 = load %x : f32
//       %1 = load %b : f32
//       %2 = add %0, %1 : f32
//       store %y, %2
//     }
//   }
//
// An indexed load prints as `%5 = load %x + %4 : f32` (TJ_KIR_LOAD_AT).
// An indexed store prints as `store %y + %4, %6` or, combining,
// `store add %y + %4, %6` (TJ_KIR_STORE_AT).
// ROW_REDUCE phases print as `reduce max -> ^0 { ... yield %3 }`, `map`,
// `row`; a GEMM header prints `gemm [$B, 4096] k 1024 tile 6x64 mc 256 nc
// 128 kc 1024` ("auto" for unset schedule fields). Constants print with
// %.17g; params as $name.
//
//===----------------------------------------------------------------------===//
// Running a compiled kernel: kir/schedule.h (work units, the GEMM schedule).
//===----------------------------------------------------------------------===//

#ifndef TJ_KIR_KERNEL_IR_H_
#define TJ_KIR_KERNEL_IR_H_

#include "kir/schedule.h"
#include "lib/arena.h"
#include "lib/base.h"
#include "lib/ir.h"

#define TJ_KIR_MAX_RANK 8
#define TJ_KIR_MAX_PARAMS 64
#define TJ_KIR_MAX_BUFFERS 64
// The value returned by builder calls after an error.
#define TJ_KIR_NONE UINT32_MAX

// The signature of every compiled kernel. |buffers| holds the buffer base
// pointers in declaration order; |scalars| the scalar params.
typedef void (*tj_kir_fn_t)(void* const* buffers, const int64_t* scalars,
                            void* scratch, int64_t begin, int64_t end);

typedef enum tj_kir_kind_e {
  TJ_KIR_POINTWISE = 0,
  TJ_KIR_ROW_REDUCE = 1,
  TJ_KIR_GEMM = 2,
  TJ_KIR_ATTENTION = 3,
  TJ_KIR_CONV = 4,
} tj_kir_kind_t;

// A size or a stride: |value| when |param| < 0, else scalars[param].
typedef struct tj_kir_ival_t {
  int64_t value;
  int32_t param;
} tj_kir_ival_t;

static inline tj_kir_ival_t tj_kir_constant(int64_t value) {
  tj_kir_ival_t v = {value, -1};
  return v;
}
static inline tj_kir_ival_t tj_kir_runtime(uint32_t param) {
  tj_kir_ival_t v = {0, (int32_t)param};
  return v;
}
static inline bool tj_kir_ival_is_const(tj_kir_ival_t v, int64_t value) {
  return v.param < 0 && v.value == value;
}

typedef enum tj_kir_role_e {
  TJ_KIR_INPUT = 0,   // read by LOAD
  TJ_KIR_OUTPUT = 1,  // written by STORE; no two points may alias
  TJ_KIR_GEMM_A = 2,  // GEMM operand A (f32), strides [batch.., m, k]
  TJ_KIR_GEMM_B = 3,  // GEMM operand B (f32), strides [batch.., k, n]
  // ATTENTION operands (f32, f16 or bf16; the mask bool or q's dtype).
  TJ_KIR_ATTN_Q = 4,
  TJ_KIR_ATTN_K = 5,
  TJ_KIR_ATTN_V = 6,
  TJ_KIR_ATTN_MASK = 7,
  // qfold (issue 17): a GEMM whose B is a quantized weight (tj_kir_bq_t):
  // its scale (A's dtype) and zero point (B's dtype), strides [batch.., k
  // group, n] (the k slot steps from one group of bq.group rows of B to the
  // next).
  TJ_KIR_GEMM_BSCALE = 8,
  TJ_KIR_GEMM_BZERO = 9,
  // CONV operands (f32): the input x [N, C, spatial..] and the weight w
  // [O, C, kernel..], each with its own row-major strides (by its own
  // dims, not the space's); the bias [O] (optional) with the space's
  // strides (1 along O, 0 elsewhere).
  TJ_KIR_CONV_X = 10,
  TJ_KIR_CONV_W = 11,
  TJ_KIR_CONV_BIAS = 12,
  // ATTENTION's backward (fabwdcuda): dL/dy (q's dtype, rows of dv), the
  // row log-sum-exp and delta = rowsum(dL/dy y) (f32 for f16/bf16 q).
  TJ_KIR_ATTN_DO = 13,
  TJ_KIR_ATTN_LSE = 14,
  TJ_KIR_ATTN_DELTA = 15,
  // swiglu (issue 14): a dual GEMM's second B, of B's dtype and strides
  // ([batch.., k, n]): the kernel computes C2 = A B2 beside C = A B over
  // the same space and K (the same A read once), and its epilogue reads
  // C2 as TJ_KIR_ACC with ref 1 (tj_kir_acc2). silu(x @ wg) * (x @ wu).
  TJ_KIR_GEMM_B2 = 16,
} tj_kir_role_t;

// qfold (issue 17): GEMM only. B holds quantized weights, dequantized as
// they are read (packing, the in-place microkernels): B(k, n) = (q(k, n) -
// zero(k / group, n)) * scale(k / group, n) in f32, q i8 or u8 (bits 8),
// or int4 packed two a byte along n (bits 4, the even column in the low
// nibble; B's strides count bytes and its n stride is 1). No zero buffer:
// zero 0. group 0: one group over all of K (per output channel).
typedef struct tj_kir_bq_t {
  int32_t bits;      // 0: B is not quantized; 8 or 4
  bool int4_signed;  // bits 4: [-8, 7] (else [0, 15])
  int64_t group;     // rows of B per scale row; 0: all of K
} tj_kir_bq_t;

// Which of attention's ops an ATTENTION kernel computes (lib/ops.def's
// attention, attention_lse, attention_dq, attention_dkv).
typedef enum tj_kir_attention_op_e {
  TJ_KIR_ATTENTION_FORWARD = 0,
  TJ_KIR_ATTENTION_LSE = 1,
  TJ_KIR_ATTENTION_DQ = 2,
  TJ_KIR_ATTENTION_DKV = 3,
} tj_kir_attention_op_t;

// ATTENTION only: the head dims of q/k (d) and of v and the output (dv),
// the scale of the scores, whether keys j > i are masked (top-left) and
// the op. |with_lse| (the forward only; lsefwd): a second output after y,
// attention_lse's [.., Hkv, G, Tq] of the same scores, so that a training
// step's backward reads the row log-sum-exp the forward's loop already
// has instead of a second pass over q k^T.
typedef struct tj_kir_attention_t {
  tj_kir_ival_t d, dv;
  double scale;
  bool causal;
  bool with_lse;
  tj_kir_attention_op_t op;
} tj_kir_attention_t;

// CONV only: the window of a groups == 1 convolution over up to 3 spatial
// axes, every entry a constant; fewer axes are the last ones, the leading
// entries 1 (in, kernel, stride, dilation) and 0 (low pad). The output's
// spatial sizes are the space's dims 2.. (out = (in + low + high - (kernel
// - 1) * dilation - 1) / stride + 1, high implied). c: input channels.
//
// dwbw (issue 15): |window| other than TJ_KIR_WINDOW_GEMM makes the kernel a
// direct window kernel (jit/emit_window.c, kir/lower_window.c) instead of
// the implicit GEMM: y[n, o, i] = the window op over x[n, o / (O / C), i *
// stride + t * dilation - low] (depthwise: times w[o, 0, t], plus b[o]),
// taps outside x skipped; c is then 1 (no sum over channels) and the
// channel count of x is its strides' ratio. high is the declared end pad,
// which avg_pool's count_include_pad counts (taps past it do not count).
typedef enum tj_kir_window_t {
  TJ_KIR_WINDOW_GEMM = 0,       // groups == 1 conv, the implicit GEMM
  TJ_KIR_WINDOW_DEPTHWISE = 1,  // conv with one input channel a group
  TJ_KIR_WINDOW_MAX = 2,        // max_pool (NaN propagates)
  TJ_KIR_WINDOW_AVG = 3,        // avg_pool over the taps inside x
  TJ_KIR_WINDOW_AVG_PAD = 4,    // avg_pool, count_include_pad
} tj_kir_window_t;

typedef struct tj_kir_conv_t {
  int32_t spatial;  // 1 to 3
  int32_t window;   // tj_kir_window_t
  // Input channels a group (all of them with one group): the GEMM's K is
  // c x taps.
  int64_t c;
  int64_t in[3], kernel[3], stride[3], dilation[3], low[3], high[3];
  // GEMM convs (x86conv3): the weight is prepacked in the ocvec layout and
  // the kernel takes that variant (tj_kir_conv_schedule_t.ocvec); set by
  // the x86 backend with tj_kir_t.b_prepacked.
  int32_t ocvec;  // bool
  // nchwc (issue 15): x (xblock) and the one OUTPUT buffer (yblock) held
  // blocked, [N][C / b][spatial..][b] for b = xblock or yblock (the x86
  // vector's lanes; C and O multiples of it), 0: row-major. Set by the x86
  // backend (nchwc_assign, backends/x86/x86_program.c) on ocvec convs at
  // stride 1 that pass a value between them; a blocked OUTPUT's strides
  // are those of an element within its block, [O x P, 1, b x the spatial
  // strides of a row-major P], its block o / b at (o / b) x P x b.
  int32_t xblock, yblock;
  // Bit b: buffer b, an epilogue's INPUT of the output's shape (a residual),
  // held blocked as a blocked output is (the target's lanes a block), its
  // strides in the kernel IR likewise those within a block.
  uint32_t inblock;
  // GEMM convs (grouped, issue 15): the groups, 0 or 1 for one. Group g
  // reads x's channels [g c, (g + 1) c) and writes the output's [g O / G,
  // (g + 1) O / G) from the weight's rows of those channels ([O, c,
  // taps..] as for one group); x holds G c channels an image.
  int32_t groups;
} tj_kir_conv_t;

// The groups of |cv| (1 where it has one).
static inline int64_t tj_kir_conv_groups(const tj_kir_conv_t* cv) {
  return cv->groups > 1 ? cv->groups : 1;
}

typedef struct tj_kir_buffer_t {
  const char* name;  // owned by the kernel
  tj_dtype_t dtype;
  tj_kir_role_t role;
  tj_kir_ival_t strides[TJ_KIR_MAX_RANK];  // elements, one per space dim
} tj_kir_buffer_t;

typedef enum tj_kir_inst_kind_e {
  TJ_KIR_LOAD = 0,   // buffer[ref] at the current point
  TJ_KIR_CONST = 1,  // fvalue (float dtypes) or ivalue (int, bool)
  TJ_KIR_PARAM = 2,  // scalars[ref], i64
  TJ_KIR_INDEX = 3,  // the current point's index along dim ref, i64
  TJ_KIR_ACC = 4,    // GEMM epilogue: the accumulator, f32 (ref 1: B2's)
  TJ_KIR_ROW = 5,    // ROW_REDUCE: result of the earlier REDUCE phase ref
  TJ_KIR_OP = 6,     // op applied to args (unary, binary, WHERE, CAST)
  TJ_KIR_STORE = 7,  // buffer[ref] at the current point = args[0]
  TJ_KIR_YIELD = 8,  // REDUCE phase: args[0] is the value reduced
  // buffer[ref] at the current point plus args[0] (an i64 count of
  // elements, computed per point: a gather's index times its stride). The
  // code producing args[0] keeps the address inside the buffer (gather
  // clamps its indices); the access is a vector gather when vectorized.
  TJ_KIR_LOAD_AT = 9,
  // scatter (issue 15): output buffer[ref] at the current point plus
  // args[0] (an i64 count of elements) = args[1], or, when |op| is ADD, MUL,
  // MAXIMUM or MINIMUM, that element combined with args[1] by |op| (a
  // read-modify-write; TJ_OP_COUNT_: a plain store). The code producing
  // args[0] keeps the address inside the buffer (scatter clamps its
  // indices). Only in SCAN phases, whose walk is scalar and in order along
  // L: the writes of one row land in the order of L, and the rows of a
  // kernel must write disjoint elements.
  TJ_KIR_STORE_AT = 10,
} tj_kir_inst_kind_t;

typedef struct tj_kir_inst_t {
  tj_kir_inst_kind_t kind;
  tj_op_t op;        // TJ_KIR_OP only
  tj_dtype_t dtype;  // the result's; for STORE and YIELD the operand's
  uint32_t num_args;
  uint32_t args[3];  // indices of earlier instructions of the same phase
  uint32_t ref;      // buffer / param / dim / phase, by kind
  double fvalue;
  int64_t ivalue;
} tj_kir_inst_t;

typedef enum tj_kir_phase_kind_e {
  TJ_KIR_PHASE_MAP = 0,
  TJ_KIR_PHASE_REDUCE = 1,
  TJ_KIR_PHASE_ROW = 2,
  TJ_KIR_PHASE_SCAN = 3,
} tj_kir_phase_kind_t;

typedef enum tj_kir_reduce_e {
  TJ_KIR_REDUCE_SUM = 0,
  TJ_KIR_REDUCE_MAX = 1,  // NaN propagates; -inf (INT_MIN) when L == 0
  TJ_KIR_REDUCE_MIN = 2,  // NaN propagates; +inf (INT_MAX) when L == 0
  TJ_KIR_REDUCE_PROD = 3,
  TJ_KIR_REDUCE_ARGMAX = 4,  // i64 index of the first max; the first NaN wins
} tj_kir_reduce_t;

typedef struct tj_kir_phase_t {
  tj_kir_phase_kind_t kind;
  tj_kir_reduce_t reduce;   // REDUCE only
  tj_dtype_t result_dtype;  // REDUCE and SCAN: dtype of ^phase
  bool reverse;             // SCAN only: L walked from L - 1 down to 0
  tj_kir_inst_t* insts;
  uint32_t num_insts, inst_capacity;
} tj_kir_phase_t;

typedef struct tj_kir_t {
  tj_allocator_t allocator;
  tj_arena_t arena;  // names
  tj_kir_kind_t kind;
  const char* name;  // a C identifier; the symbol is "tj_kernel_<name>"
  int32_t rank;
  tj_kir_ival_t dims[TJ_KIR_MAX_RANK];
  // The arrays below grow while the kernel is built; a capacity of 0 with
  // a non-NULL array: a copy's (tj_kir_copy), in |arena|, never grown, or
  // borrowed from the kernel copied (tj_kir_borrow: params and phases).
  const char** param_names;
  uint32_t num_params, param_capacity;
  tj_kir_buffer_t* buffers;
  uint32_t num_buffers, buffer_capacity;
  tj_kir_phase_t* phases;
  uint32_t num_phases, phase_capacity;
  // GEMM and CONV (the contraction's K; a CONV's schedule caps its unit's
  // channel and pixel blocks, kir/schedule.h).
  tj_kir_ival_t gemm_k;
  tj_kir_gemm_schedule_t schedule;
  // GEMM only: f16 or bf16 operands are accepted too. Set before
  // tj_kir_finalize by lowerings for targets with such a template: NVPTX
  // tensor cores, and x86 (f16/bf16 widened to f32 as they are packed, or
  // bf16 pairs multiplied by vdpbf16ps where the CPU has avx512bf16;
  // jit/emit_gemm.c).
  bool allow_half_gemm;
  // ATTENTION only (tj_kir_set_attention).
  tj_kir_attention_t attention;
  // CONV only (tj_kir_set_conv); gemm_k then holds C * prod(kernel), the
  // contraction length.
  tj_kir_conv_t conv;
  // GEMM only (qgemm, issue 17): i8/u8 operands (either, mixed) are
  // accepted too, summed exactly into an i32 accumulator (acc is i32).
  // Set by lowerings for targets with the integer template (x86,
  // jit/emit_gemm.c). fp8: float8 operands likewise (both float8) into the
  // f32 acc; only CUDA's template runs them (x86 decomposes matmul_f8).
  bool allow_int8_gemm;
  // GEMM only (qfold, issue 17): B is quantized (bits 0: not).
  tj_kir_bq_t bq;
  // GEMM only (issue 17): B is an i8 constant whose every value lies in
  // [-64, 63] (lowering read them), so a u8 x B pair sum is at most 255 *
  // 64 * 2 = 32640 in magnitude and vpmaddubsw's saturating i16 sums are
  // exact: x86 tiers without VNNI multiply such a B that way.
  bool b_int7;
  // GEMM only (issue 17): B's buffer holds an 8-bit constant B prepacked
  // once at compile time (x86 backend) as the panels the integer
  // microkernels read: i32 lanes [ceil(N / P)][ceil(K / 4)][P], P the
  // schedule's tile_n at the target's lanes (tj_kir_gemm_resolve), lane (j,
  // q, c) the bytes of B(4q .. 4q + 3, jP + c), zero past K and N: each
  // panel contiguous over all of K, as the per-run packing lays one pass
  // out. Only where the x86 emitter runs B as quads without a correction
  // row (tj_emit_gemm_prepacks_b). CONV (issue 15, convfuse): the
  // CONV_W buffer holds a constant weight [O][K] relaid once (x86 backend)
  // pass by pass: pass k0 of kc (tj_kir_conv_resolve) at k0 * Opad, f32
  // rows [Opad][kn], Opad = O rounded up to mr, zero past O; with
  // conv.ocvec (x86conv3) as panels [O / nr][K][nr] instead, zero past O.
  bool b_prepacked;
  tj_status_t error;  // first builder error (sticky); owned
  bool finalized;
} tj_kir_t;

//===--- building ---===//

// Creates an empty kernel named |name| (copied; a C identifier of at most
// 200 bytes).
// POINTWISE and GEMM kernels start with their one MAP phase open. On
// success |*out_kernel| is owned by the caller; destroy with
// tj_kir_destroy. On failure it is NULL.
tj_status_t tj_kir_create(tj_allocator_t allocator, tj_kir_kind_t kind,
                          const char* name, tj_kir_t** out_kernel);
// Destroys |kernel|. NULL is a no-op.
void tj_kir_destroy(tj_kir_t* kernel);

// The builder calls below never return a status. The first error (bad
// argument, type error, OUT_OF_MEMORY) is recorded on the kernel, later
// calls do nothing and return TJ_KIR_NONE, and tj_kir_finalize reports it,
// naming the kernel, the phase and the instruction.

// Declares scalar param |name| (copied); returns its index.
uint32_t tj_kir_add_param(tj_kir_t* kernel, const char* name);
// Sets the iteration space (|rank| dims, copied).
void tj_kir_set_space(tj_kir_t* kernel, int32_t rank,
                      const tj_kir_ival_t* dims);
// Declares a buffer with |rank| strides (the space's rank); returns its
// index, which is also its slot in the |buffers| argument.
uint32_t tj_kir_add_buffer(tj_kir_t* kernel, const char* name, tj_dtype_t dtype,
                           tj_kir_role_t role, const tj_kir_ival_t* strides);
// qgemm (issue 17): whether |kernel| is a GEMM on i8/u8 operands (its
// accumulator is i32).
bool tj_kir_gemm_is_int8(const tj_kir_t* kernel);
// fp8 (issue 17): whether |kernel| is a GEMM of float8 operands (f8e4m3 or
// f8e5m2, either, mixed; matmul_f8): f32 acc, CUDA's 8-bit template only.
bool tj_kir_gemm_is_f8(const tj_kir_t* kernel);
// ktrans (issue 13): whether |kernel| is a GEMM whose B is K-major, read
// contiguous along k and not along n: the [N, K] weight of x @ w^T
// (PyTorch's Linear, every exported model's). The CUDA emitters and the
// tensor maps decide B's shared-memory layout by it, so they agree.
bool tj_kir_gemm_b_kmajor(const tj_kir_t* kernel);
// swiglu (issue 14): whether |kernel| is a dual GEMM (a GEMM_B2 buffer:
// two accumulators over one A, the epilogue reading both).
bool tj_kir_gemm_is_dual(const tj_kir_t* kernel);
// GEMM: the contraction length and the schedule (fields 0 = auto).
void tj_kir_set_gemm(tj_kir_t* kernel, tj_kir_ival_t k,
                     const tj_kir_gemm_schedule_t* schedule);
// ATTENTION: the head dims, scale and causal flag.
void tj_kir_set_attention(tj_kir_t* kernel, const tj_kir_attention_t* attn);

// ATTENTION only: whether buffer |b| is a row log-sum-exp output, one f32
// a query row written an element at a time: attention_lse's output, or
// the forward's second output under |with_lse|.
bool tj_kir_attention_lse_output(const tj_kir_t* kernel, uint32_t b);
// CONV: the window (constants; checked against the space at finalize).
void tj_kir_set_conv(tj_kir_t* kernel, const tj_kir_conv_t* conv);
// ROW_REDUCE: opens a new phase (REDUCE phases take |reduce|; the others
// ignore it) and returns its index. Instructions go to the open phase.
uint32_t tj_kir_begin_phase(tj_kir_t* kernel, tj_kir_phase_kind_t kind,
                            tj_kir_reduce_t reduce);
// ROW_REDUCE: opens a SCAN phase combining with |reduce| (SUM or PROD)
// values of |dtype| (not bool), along L reversed when |reverse|; returns
// its index. Its yield must have |dtype|.
uint32_t tj_kir_begin_scan(tj_kir_t* kernel, tj_kir_reduce_t reduce,
                           tj_dtype_t dtype, bool reverse);

// Instructions. Each returns the new value's index in the open phase.
uint32_t tj_kir_load(tj_kir_t* kernel, uint32_t buffer);
// Input |buffer| at the current point plus |offset| elements (an i64 value).
uint32_t tj_kir_load_at(tj_kir_t* kernel, uint32_t buffer, uint32_t offset);
uint32_t tj_kir_const_float(tj_kir_t* kernel, tj_dtype_t dtype, double value);
uint32_t tj_kir_const_int(tj_kir_t* kernel, tj_dtype_t dtype, int64_t value);
uint32_t tj_kir_param(tj_kir_t* kernel, uint32_t param);
uint32_t tj_kir_index(tj_kir_t* kernel, uint32_t dim);
uint32_t tj_kir_acc(tj_kir_t* kernel);
// swiglu (issue 14): a dual GEMM's second accumulator (A B2), f32;
// INVALID_ARGUMENT in a kernel without a GEMM_B2 buffer (at finalize).
uint32_t tj_kir_acc2(tj_kir_t* kernel);
// The result of the earlier REDUCE phase |phase|, or inside SCAN phase
// |phase| its running (exclusive) prefix.
uint32_t tj_kir_row(tj_kir_t* kernel, uint32_t phase);
// A unary or binary elementwise op of lib/ops.def; the result dtype follows
// its type rule (comparisons and isnan give bool).
uint32_t tj_kir_unary(tj_kir_t* kernel, tj_op_t op, uint32_t a);
uint32_t tj_kir_binary(tj_kir_t* kernel, tj_op_t op, uint32_t a, uint32_t b);
uint32_t tj_kir_where(tj_kir_t* kernel, uint32_t cond, uint32_t a, uint32_t b);
uint32_t tj_kir_cast(tj_kir_t* kernel, tj_dtype_t dtype, uint32_t a);
// |a|'s bits read as |dtype|, of the same element size (TJ_OP_BITCAST).
uint32_t tj_kir_bitcast(tj_kir_t* kernel, tj_dtype_t dtype, uint32_t a);
// Stores |value| (converted to the buffer's dtype, which must equal the
// value's) into output |buffer| at the current point.
void tj_kir_store(tj_kir_t* kernel, uint32_t buffer, uint32_t value);
// scatter (issue 15): in a SCAN phase, output |buffer| at the current point
// plus |offset| elements (an i64 value) = |value| (of the buffer's dtype),
// or combined with it by |op| (TJ_OP_ADD, TJ_OP_MUL, TJ_OP_MAXIMUM,
// TJ_OP_MINIMUM; TJ_OP_COUNT_ for a plain store).
void tj_kir_store_at(tj_kir_t* kernel, uint32_t buffer, uint32_t offset,
                     uint32_t value, tj_op_t op);
// REDUCE phases: the value reduced (exactly one yield, last).
void tj_kir_yield(tj_kir_t* kernel, uint32_t value);

// Returns the recorded builder error (owned by the caller; the kernel keeps
// a copy and stays unusable) or verifies the kernel: the template's
// structural rules, buffer roles, one yield per reduce phase. Errors are
// INVALID_ARGUMENT (UNSUPPORTED for non-f32 gemm operands) naming the kernel
// and the phase or instruction. After success the kernel is immutable.
tj_status_t tj_kir_finalize(tj_kir_t* kernel);

//===--- inspecting ---===//

const char* tj_kir_kind_name(tj_kir_kind_t kind);
const char* tj_kir_reduce_name(tj_kir_reduce_t reduce);

// Whether |a| and |b| are the same code: equal in every field of
// tj_kir_t but the names (the kernel's, its buffers'), which emission only
// copies into symbol and value names. Region compile finds the kernels of
// a repeated block with it, without printing them (x86_backend.c). A new
// field of tj_kir_t, tj_kir_phase_t, tj_kir_inst_t or tj_kir_buffer_t is
// compared there too (a static assertion on the sizes in kernel_ir.c
// fails until it is).
bool tj_kir_same_code(const tj_kir_t* a, const tj_kir_t* b);

// Writes the fields tj_kir_same_code compares, and nothing else, to
// |put| (a few calls, a kilobyte or so each): the same bytes for two
// kernels exactly when they have the same code, so a cache key may hash
// them instead of the printed text (x86_backend.c's set_key; the names
// are not in them: hash the kernel's own name beside them if it matters).
typedef void (*tj_kir_put_fn)(void* user, const void* data, size_t size);
void tj_kir_code_bytes(const tj_kir_t* kernel, tj_kir_put_fn put, void* user);

// A finalized copy of the finalized |kernel| named |name|, its buffer i
// named |buffer_names|[i] (names copied; they must be C identifiers, as
// tj_kir_create and tj_kir_add_buffer require): the same code
// (tj_kir_same_code), for a repeated block whose kernels are copied rather
// than lowered again (region compile, kir/lower_reuse.c). On success
// |*out_kernel| is owned by the caller; on failure it is NULL.
tj_status_t tj_kir_copy(const tj_kir_t* kernel, const char* name,
                        const char* const* buffer_names, tj_kir_t** out_kernel);

// tj_kir_copy that borrows: the copy's name and buffers (with their names)
// are its own, its params and phases (the instructions) are |kernel|'s,
// read in place, so |kernel| must outlive it (region compile's copies live
// in one array with the kernel they copy and are freed with it). Costs one
// block of names instead of a copy of every instruction.
tj_status_t tj_kir_borrow(const tj_kir_t* kernel, const char* name,
                          const char* const* buffer_names,
                          tj_kir_t** out_kernel);

// Prints |kernel| in the text form above into a NUL-terminated string
// allocated from the kernel's allocator; free it with tj_free_string(
// kernel->allocator, text). On failure |*out_text| is NULL.
tj_status_t tj_kir_print(const tj_kir_t* kernel, char** out_text);

// The value of |v| under |scalars|.
static inline int64_t tj_kir_ival_eval(tj_kir_ival_t v,
                                       const int64_t* scalars) {
  return v.param < 0 ? v.value : scalars[v.param];
}

#endif  // TJ_KIR_KERNEL_IR_H_
