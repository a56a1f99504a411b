// jit/emit_nvptx_attention.h: what the NVPTX attention kernels share
// (fabwdcuda): the forward and attention_lse (emit_nvptx_attention.c) and
// attention_dq / attention_dkv (emit_nvptx_attention_bwd.c) use the same
// tiles of 64 rows in XOR-swizzled shared memory, cp.async copies, ldmatrix
// fragments and mma.sync m16n8k16; the helpers are small and on every
// kernel's hot path, so they are inline here rather than calls. The f32
// forward (emit_nvptx_attention_f32.c) takes the same state, constants,
// buffer roles, block placement and scalar helpers, with FFMA tiles and
// padded (not swizzled) rows of its own.

#ifndef TJ_JIT_EMIT_NVPTX_ATTENTION_H_
#define TJ_JIT_EMIT_NVPTX_ATTENTION_H_

#include "jit/emit_nvptx.h"

#define kBM 64  // query rows per block
#define kBN 64  // keys per K/V tile
#define kThreads 128
#define kLog2e 1.4426950408889634

typedef struct fa_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_kir_t* k;
  int32_t d;          // head dim: 64 or 128 (f32: up to 128)
  int32_t chunks;     // 16-byte chunks per row: d / 8 (f32: d / 4)
  int32_t row_bytes;  // d * 2 (f32: chunks rounded up to odd, x 16)
  int32_t tile_bytes;
  bool f16;  // else bf16
  uint32_t qb, kb, vb, ob;
  int32_t mb;  // -1: no mask
  // The forward with_lse (lsefwd): its second output, the row lse; -1:
  // none.
  int32_t lob;
  // attention_dq / attention_dkv (fabwdcuda): dL/dy, lse, delta.
  uint32_t dob, lseb, deltab;
  tj_kir_attention_op_t op;
  // f32 forward: keys a K/V tile (64, or 32 where 64 would leave one block
  // an SM), score columns a thread (bn / 8), P's row bytes ((bn + 4)
  // floats, an odd number of chunks), chunks of d a thread in P.V.
  int32_t bn, cols, p_row_bytes, slots;
  LLVMValueRef smem;
  LLVMValueRef tid, lane, warp;  // i32
} fa_t;

static inline LLVMValueRef c32(fa_t* f, int64_t v) {
  return LLVMConstInt(f->em->t_i32, (unsigned long long)v, 1);
}
static inline LLVMValueRef c64(fa_t* f, int64_t v) {
  return LLVMConstInt(f->em->t_i64, (unsigned long long)v, 1);
}
static inline LLVMValueRef cf(fa_t* f, double v) {
  return LLVMConstReal(f->em->t_f32, v);
}

static inline LLVMValueRef smem_at(fa_t* f, LLVMValueRef off) {
  return LLVMBuildGEP2(f->b, f->em->t_i8, f->smem, &off, 1, "");
}

static inline LLVMValueRef intrinsic(fa_t* f, const char* name,
                                     LLVMValueRef* args, unsigned n) {
  return tj_emit_intrinsic(f->em, name, NULL, 0, args, n);
}

static inline LLVMValueRef fmax2(fa_t* f, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef args[2] = {a, b};
  return tj_emit_intrinsic(f->em, "llvm.maxnum", &f->em->t_f32, 1, args, 2);
}

static inline LLVMValueRef ex2(fa_t* f, LLVMValueRef x) {
  return intrinsic(f, "llvm.nvvm.ex2.approx.ftz.f", &x, 1);
}

static inline LLVMValueRef shfl_xor(fa_t* f, LLVMValueRef v, int32_t offset) {
  LLVMValueRef args[4] = {c32(f, 0xffffffff), v, c32(f, offset), c32(f, 0x1f)};
  return intrinsic(f, "llvm.nvvm.shfl.sync.bfly.f32", args, 4);
}

// The byte offset of 16-byte chunk |ch| of row |row| (both i32) in a
// swizzled tile.
static inline LLVMValueRef swizzled(fa_t* f, LLVMValueRef row,
                                    LLVMValueRef ch) {
  LLVMBuilderRef b = f->b;
  return LLVMBuildAdd(
      b, LLVMBuildMul(b, row, c32(f, f->row_bytes), ""),
      LLVMBuildShl(b,
                   LLVMBuildXor(b, ch, LLVMBuildAnd(b, row, c32(f, 7), ""), ""),
                   c32(f, 4), ""),
      "");
}

// Starts the copy of rows [r0, r0 + 64) of a [rows, d] operand of buffer
// |buf| (row r at |base| + r * |stride| elements; rows >= |limit| are
// zero-filled) into the tile at byte |dst| of shared memory.
static inline void load_tile_at(fa_t* f, uint32_t buf, LLVMValueRef base,
                                LLVMValueRef stride, LLVMValueRef r0,
                                LLVMValueRef limit, LLVMValueRef dst) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  const int32_t shift = f->chunks == 8 ? 3 : 4;
  for (int32_t i = 0; i < kBM * f->chunks / kThreads; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, f->tid, c32(f, i * kThreads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(f, shift), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(f, f->chunks - 1), "");
    LLVMValueRef gr =
        LLVMBuildAdd(b, r0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, gr, limit, "");
    // Rows past the limit read nothing (src-size 0) from row 0.
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, ok, gr, c64(f, 0)), stride, ""),
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(f, 8), ""),
        "");
    LLVMValueRef src = LLVMBuildAddrSpaceCast(
        b, tj_emit_advance(em, buf, base, off), f->nv->t_ptr_global, "");
    LLVMValueRef args[3] = {
        smem_at(f, LLVMBuildAdd(b, dst, swizzled(f, row, ch), "")), src,
        tj_emit_select(em, ok, c32(f, 16), c32(f, 0))};
    intrinsic(f, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
  }
}

static inline void load_tile(fa_t* f, uint32_t buf, LLVMValueRef base,
                             LLVMValueRef stride, LLVMValueRef r0,
                             LLVMValueRef limit, int32_t dst) {
  load_tile_at(f, buf, base, stride, r0, limit, c32(f, dst));
}

static inline void commit(fa_t* f) {
  intrinsic(f, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

static inline void wait_groups(fa_t* f, int32_t pending) {
  LLVMValueRef n = c32(f, pending);
  intrinsic(f, "llvm.nvvm.cp.async.wait.group", &n, 1);
}

static inline void ldmatrix(fa_t* f, bool trans, LLVMValueRef off,
                            LLVMValueRef* out) {
  LLVMTypeRef pt = f->nv->t_ptr_shared;
  LLVMValueRef ptr = smem_at(f, off);
  LLVMValueRef r = tj_emit_intrinsic(
      f->em,
      trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16"
            : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
      &pt, 1, &ptr, 1);
  for (unsigned i = 0; i < 4; ++i)
    out[i] = LLVMBuildExtractValue(f->b, r, i, "");
}

// d = a . b + c, one m16n8k16 (a: 4 x b32, b: 2 x b32 of f16/bf16 pairs).
static inline void mma(fa_t* f, LLVMValueRef* a, LLVMValueRef* bf,
                       LLVMValueRef* c) {
  LLVMBuilderRef b = f->b;
  LLVMValueRef args[10];
  LLVMTypeRef h2 = LLVMVectorType(f->em->t_f16, 2);
  for (int i = 0; i < 4; ++i)
    args[i] = f->f16 ? LLVMBuildBitCast(b, a[i], h2, "") : a[i];
  for (int i = 0; i < 2; ++i)
    args[4 + i] = f->f16 ? LLVMBuildBitCast(b, bf[i], h2, "") : bf[i];
  for (int i = 0; i < 4; ++i) args[6 + i] = c[i];
  LLVMValueRef d = intrinsic(f,
                             f->f16 ? "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
                                    : "llvm.nvvm.mma.m16n8k16.row.col.bf16",
                             args, 10);
  for (unsigned i = 0; i < 4; ++i) c[i] = LLVMBuildExtractValue(b, d, i, "");
}

// (lo, hi) rounded to the input dtype, packed into a b32 (lo in bits 0-15).
static inline LLVMValueRef pack(fa_t* f, LLVMValueRef lo, LLVMValueRef hi) {
  LLVMBuilderRef b = f->b;
  LLVMTypeRef h = f->f16 ? f->em->t_f16 : LLVMBFloatTypeInContext(f->em->ctx);
  LLVMTypeRef v2 = LLVMVectorType(h, 2);
  LLVMValueRef v = LLVMGetUndef(v2);
  v = LLVMBuildInsertElement(b, v, LLVMBuildFPTrunc(b, lo, h, ""), c32(f, 0),
                             "");
  v = LLVMBuildInsertElement(b, v, LLVMBuildFPTrunc(b, hi, h, ""), c32(f, 1),
                             "");
  return LLVMBuildBitCast(b, v, f->em->t_i32, "");
}

static inline LLVMValueRef load_f32(fa_t* f, LLVMValueRef slot) {
  return LLVMBuildLoad2(f->b, f->em->t_f32, slot, "");
}

// Finds the kernel's buffers by role (f->qb.., f->mb, f->op);
// INVALID_ARGUMENT for a buffer of another role, a missing one or a mask
// of a third dtype.
tj_status_t tj_nvptx_fa_buffers(fa_t* f);

// tj_nvptx_fa_buffers, then what the tensor-core kernels take: f16/bf16 q,
// k, v (and dL/dy), head dims d = dv of 64 or 128; UNSUPPORTED otherwise.
tj_status_t tj_nvptx_fa_check_kernel(fa_t* f);

// A forward block's place: one block per (query tile of |rows_per_block|
// rows, head), the tiles of one head walking from the last one down
// (causal attention starts its longest blocks first).
typedef struct tj_nvptx_fa_block_t {
  tj_emit_point_t at;   // every buffer's pointer at the block's head
  LLVMValueRef tq, tk;  // i64
  LLVMValueRef q0;      // i64: the block's first query row
  LLVMValueRef ntiles;  // i64: key tiles it reads (causal: none past its
                        // last row's diagonal)
} tj_nvptx_fa_block_t;
void tj_nvptx_fa_block(fa_t* f, int64_t rows_per_block, int64_t keys_per_tile,
                       tj_nvptx_fa_block_t* out);

// attention_dkv's block (both backward kernels, fa3bwd2): one block per
// (|keys_per_block| keys, kv head), the first keys (causal's longest
// blocks, which every later query sees) first; its place, and the strides
// of what it reads once (K, V), writes ([dk | dv]) and copies a step (Q,
// dY, lse, delta of head g of the group).
typedef struct tj_nvptx_fa_dkv_t {
  tj_emit_point_t at;                 // every buffer's pointer at the head
  LLVMValueRef tq, tk, group;         // i64: Tq, Tk, G
  LLVMValueRef kt, k0;                // i64: the block's key tile, first key
  LLVMValueRef sk, sv, so;            // along Tk: k, v, [dk | dv]
  LLVMValueRef sq, sdo, sl, sdl;      // along Tq: q, dY, lse, delta
  LLVMValueRef sqg, sdog, slg, sdlg;  // along G: the same
} tj_nvptx_fa_dkv_t;
void tj_nvptx_fa_dkv_setup(fa_t* f, int64_t keys_per_block,
                           tj_nvptx_fa_dkv_t* out);

// attention_lse's epilogue, and the forward's with_lse: into buffer
// |buf| (at |obase|, |so| elements a row), lse = (m + log2 l) ln 2 per
// row (the scores were scaled into base 2), -inf where no key was seen
// (l = 0), one lane of each quad storing the f32 of its rows |row_i| (g
// and g + 8 of its warp's C fragment rows, i64) below Tq; |m_slot| and
// |l_slot| hold each row's running max and the lane's part of its sum.
tj_status_t tj_nvptx_fa_store_lse(fa_t* f, uint32_t buf, LLVMValueRef obase,
                                  LLVMValueRef so, LLVMValueRef* row_i,
                                  LLVMValueRef tq, LLVMValueRef* m_slot,
                                  LLVMValueRef* l_slot);

//===--- the wgmma kernels' pieces (emit_nvptx_attention_wgmma.c) ---===//
//
// Blocks of kWgThreads (two consumer warpgroups); tiles in panels of 64
// columns in wgmma's 128-byte swizzle (see emit_nvptx_attention_wgmma.c).

#define kWgThreads 256
#define kSwRow 128  // bytes of a swizzle row: a panel's row
#define kSwAtom 1024

// Shared byte offset (i32) of 16-byte chunk |ch| of row |row| (both i32)
// in a panelled tile of |rows| rows.
LLVMValueRef tj_nvptx_fa_panel_offset(fa_t* f, int32_t rows, LLVMValueRef row,
                                      LLVMValueRef ch);

// Starts the copy (cp.async, every one of kWgThreads threads) of rows
// [r0, r0 + |rows|) of a [.., d] operand of buffer |buf| (row r at |base|
// + r * |stride| elements; rows >= |limit| are zero-filled) into the
// panelled tile at byte |dst| (i32) of |tiles|.
void tj_nvptx_fa_load_rows(fa_t* f, LLVMValueRef tiles, int32_t rows,
                           uint32_t buf, LLVMValueRef base, LLVMValueRef stride,
                           LLVMValueRef r0, LLVMValueRef limit,
                           LLVMValueRef dst);

// Inline asm |text| with no operand, clobbering memory.
void tj_nvptx_fa_asm(fa_t* f, const char* text);

// acc (m64n<n_cols> f32, n_cols / 2 a thread) = A . B (+ acc when
// |accumulate|), A and B by descriptors |da| and |db| (i64), B K-major.
void tj_nvptx_fa_wgmma_ss(fa_t* f, LLVMValueRef* acc, int32_t n_cols,
                          LLVMValueRef da, LLVMValueRef db, bool accumulate);

// acc (m64n<n_cols> f32) += A . B, A the register fragment |a| (4 x i32
// of packed pairs), B by descriptor |db| (i64), MN-major (trans-b 1).
void tj_nvptx_fa_wgmma_rs(fa_t* f, LLVMValueRef* acc, int32_t n_cols,
                          LLVMValueRef* a, LLVMValueRef db);

// wgmma.wait_group |pending|, the |n| accumulators |acc| tied through it
// (so that nothing reads them before it).
void tj_nvptx_fa_wgmma_wait(fa_t* f, int32_t pending, LLVMValueRef* acc,
                            int32_t n);

// attention_dkv and attention_dq on sm_90a's wgmma
// (emit_nvptx_attention_bwd_wgmma.c), tj_nvptx_fa_check_kernel passed.
tj_status_t tj_nvptx_emit_attention_dkv_wgmma(fa_t* f);
tj_status_t tj_nvptx_emit_attention_dq_wgmma(fa_t* f);

// The forward and attention_lse on sm_90a's wgmma
// (emit_nvptx_attention_wgmma.c), tj_nvptx_fa_check_kernel passed, no
// mask operand.
tj_status_t tj_nvptx_emit_attention_wgmma(fa_t* f);

// The f32 forward (emit_nvptx_attention_f32.c), its buffers found.
tj_status_t tj_nvptx_emit_attention_f32(fa_t* f);

// attention_dq and attention_dkv (emit_nvptx_attention_bwd.c).
tj_status_t tj_nvptx_emit_attention_bwd(fa_t* f);

#endif  // TJ_JIT_EMIT_NVPTX_ATTENTION_H_
