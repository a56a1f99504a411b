// The GEMM template's building blocks that other templates reuse
// (jit/emit_attention.c): the register-tiled microkernel and the packing
// of B panels. Internal to jit/.

#ifndef TJ_JIT_EMIT_GEMM_H_
#define TJ_JIT_EMIT_GEMM_H_

#include "jit/emit_llvm.h"

typedef struct tj_ukernel_opts_t {
  int32_t mr;      // rows of the tile
  int32_t nr;      // columns of the tile, a multiple of the lanes
  bool direct;     // B in place (row stride ldb) rather than a packed
                   // panel (row stride nr)
  bool masked;     // direct: columns past cols read as 0 (the right edge;
                   // full strips go without the masks, which would take
                   // more mask registers than there are)
  int32_t chains;  // accumulator sets over alternating k (1 or 2)
  // Packed: the panel's row stride in elements when it is wider than the
  // tile (a tile of fewer columns over the conv's last, partial panel,
  // jit/emit_conv.c); 0: nr.
  int32_t panel_ld;
  // Direct: prefetch each row's continuation in the next strip (nr columns
  // further) into L2, so that B is fetched in runs of 2 * nr columns. It
  // pays for narrow strips (NR = 64: 0.46 -> 0.27 ms at M = 4 of the
  // capstone) and costs for wide ones (4 x NR at M = 1: 0.20 -> 0.29 ms).
  bool prefetch_next;
  // Packed f32: A's next sliver (mr rows from a + mr * lda, as a prepacked
  // conv weight lays them one after the other) into L2, a line every step
  // or two, while this call multiplies: at batch 1 a sliver serves one call
  // of about kc x 12 cycles, and the hardware prefetchers, following mr
  // rows lda apart, left its first lines to be read from memory.
  bool prefetch_a_next;
  // Direct, f32 (x86conv2): B's row k starts at b + rows[k], rows an i64
  // table (the function's 12th parameter, ptr), not at b + k * ldb (ldb
  // unused): the shifted conv's rows of a zero-padded image, each tap's
  // rows its own offset into it (jit/emit_conv.c).
  bool b_rows;
  // Packed f32 (x86conv3): A's row r starts at a + pix[r] and its element
  // k at that plus rows[k] (pix and rows i64 tables, the function's 13th
  // and 12th parameters; lda and ka unused): the ocvec conv's rows are
  // output pixels of a zero-padded image and its k the (channel, tap)
  // offsets into it, broadcast against a panel of prepacked weights
  // (jit/emit_conv.c).
  bool a_rows;
  // Direct: the operands' dtypes (widened to f32 as they are read). The
  // packed path reads f32 panels and slivers (F32 here).
  tj_dtype_t a_dtype, b_dtype;
  // Packed bf16 pairs: the sliver holds (A[m][2p], A[m][2p+1]) and the
  // panel (B[2p][n], B[2p+1][n]) in one 32-bit lane each, one step per
  // pair p, accumulated with vdpbf16ps (16 lanes only).
  bool dot;
  // The function's name; NULL: "tj_ukernel_<kernel>" (packed) or
  // "tj_ukernel_<kernel>_d<mr>[_edge]" (direct).
  const char* name;
  // Never deferred (the x86 JIT's cold part): the caller is hot code.
  bool hot;
  // qgemm (issue 17): packed integer groups (0: none; 2: i16 pairs by
  // pmaddwd; 4: u8 x s8 quads by vpdpbusd) into i32 accumulators; |corr|:
  // the panel's row after the last group is added to every tile row.
  int32_t igroup;
  bool corr;
  // qgemm, quads: A is read in place (k-contiguous rows of bytes at a + r *
  // lda, a quad's 4 k one unaligned 32-bit load; no A packing), |a_flip|
  // xoring 0x80 into each byte of an s8 A. The call's |cols| argument is
  // then the pass's k count in elements: a last quad past it is read with
  // a masked load (never past the row's end).
  bool a_inplace, a_flip;
  // qfold (issue 17), direct only: B is quantized (tj_kir_bq_t; bq_bits 0:
  // not) and dequantized as it is read. The function then takes three more
  // parameters: ptr scale, ptr zero (unused without |bq_zero|), i64 the
  // scale's stride from one group of bq_group rows to the next; B's row
  // stride ldb counts bytes.
  int32_t bq_bits;
  bool bq_int4_signed, bq_zero;
  tj_dtype_t bq_qdt;  // the bytes' dtype: i8 or u8
  int64_t bq_group;   // 0: one group over all of K
} tj_ukernel_opts_t;

// Emits the microkernel function for |o| (see jit/emit_gemm.c):
// void ukernel(ptr a, i64 lda, i64 ka, ptr b, i64 ldb, i64 kc, i64 mr_valid,
//              ptr tile, i64 ld, i1 accumulate, i64 cols)
// tile[r*ld + c] (+)= sum_k a[r*lda + k*ka] * B(k, c), r < mr, c < nr, with
// B(k, c) = b[k*nr + c] (packed) or b[k*ldb + c] for c < cols and 0
// beyond (direct). Rows past mr_valid re-read the last valid row.
LLVMValueRef tj_emit_ukernel(tj_emit_t* em, const tj_ukernel_opts_t* o);

// Packs the B block at |src| (kc rows, nlen columns, element (k, n) at
// src[k*sk + n*sn], of |dt|; |unit_n| / |unit_k| say that sn / sk is the
// constant 1) into f32 panels dst[n / NR][k][n % NR] (NR = s->tile_n,
// panels kc rows long), the last panel zero padded past nlen.
void tj_emit_pack_b(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                    tj_dtype_t dt, LLVMValueRef src, LLVMValueRef sk,
                    LLVMValueRef sn, bool unit_n, bool unit_k, LLVMValueRef kc,
                    LLVMValueRef nlen, LLVMValueRef dst);

#endif  // TJ_JIT_EMIT_GEMM_H_
