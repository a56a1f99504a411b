// The weight-only quantized GEMM's main loop for NVPTX (issue 17, qfold):
// C[m, n] = sum_k A[m, k] * (q[k, n] - zero[k / g, n]) * scale[k / g, n]
// for decode-sized M, where reading the weight is the whole cost; A and
// the scale f32, f16 or bf16 (the dequantized weight rounded to their
// dtype, as the reference's dequantize gives it), the sums in f32. B is the
// quantized weight as lib/passes/quant_prepack.c lays it out ([K, N], int4
// two a byte along n, scale and zero point per column or per group of g
// rows along k; tj_kir_bq_t), read once, as its stored bytes.
//
// A block of 256 threads owns tile_m = 16 rows and tile_n columns of C:
// each thread 8 consecutive columns (one 4-byte word of int4, two of int8)
// and one of 256 / (tile_n / 8) k-groups. The k-groups take chunks of
// |chunk| rows of K round-robin (chunks lie inside one scale group), issue
// the chunk's weight loads at once (so that many are in flight; in blocks
// of fewer rows for tiles of more rows, see rows_unrolled), then
// dequantize in registers: a field u (the nibble or byte, its sign bit
// flipped for signed types) is or-ed into the mantissa of 2^23, so that
// float(0x4B000000 | u) - (2^23 + bias + zero) is q - zero exactly with no
// int-to-float conversion (the magic-number trick of FasterTransformer
// and Marlin), times the group's scale: one rounding, as the reference's
// dequantize. Each k row then adds x * w into rows x columns f32
// accumulators. The row count is a run-time value (symbolic M); the block
// branches to a loop specialized for 1, 2, 4, 8 or 16 rows, the least that
// covers its rows, so M = 1 does 8 FMAs a weight word, not 128.
// The k-groups' partial sums are then added in a fixed order (butterfly
// shuffles inside a warp, then the warps' partials through shared memory
// in warp order), so results do not depend on timing. The sum lands in
// the staged C tile the GEMM template's epilogue reads.
//
// Larger M runs the same kernel per 16 rows (the weight is read once per
// row tile). The GEMM runs this kernel where M is symbolic or below 8
// (or under TJ_CUDA_WQGEMM=fma); else the same product runs on tensor
// cores (emit_nvptx_wqmma.c; tj_nvptx_options_t.wqgemm_mma).

#include <string.h>

#include "jit/emit_nvptx.h"

#define kThreads 256
#define kWarps (kThreads / 32)
#define kCols 8  // columns a thread

typedef struct wq_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_nvptx_wqgemm_t* w;
  int32_t col_threads;  // tile_n / kCols
  int32_t kgroups;      // kThreads / col_threads
  int32_t chunk;        // k rows a chunk
  int32_t word_bytes;   // weight bytes a thread a k row: 4 or 8
  LLVMValueRef ct, kg;  // i64: the thread's column slot and k-group
  LLVMValueRef col;     // i64: its first column
  LLVMValueRef rows;    // i64: rows of C in this tile (<= 16)
  LLVMValueRef acc;     // alloca [16 * kCols x float]
} wq_t;

static LLVMValueRef c32(wq_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(wq_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i64, (unsigned long long)v, 1);
}
static LLVMValueRef cf(wq_t* q, double v) {
  return LLVMConstReal(q->em->t_f32, v);
}

static LLVMValueRef gep(wq_t* q, LLVMTypeRef t, LLVMValueRef p,
                        LLVMValueRef i) {
  return LLVMBuildGEP2(q->b, t, p, &i, 1, "");
}

static LLVMValueRef acc_slot(wq_t* q, int32_t i) {
  LLVMValueRef idx[2] = {c32(q, 0), c32(q, i)};
  return LLVMBuildGEP2(q->b, LLVMArrayType2(q->em->t_f32, 16 * kCols), q->acc,
                       idx, 2, "");
}

// The LLVM type of A and the scale.
static LLVMTypeRef in_type(wq_t* q) {
  tj_emit_t* em = q->em;
  LLVMContextRef cx = LLVMGetTypeContext(em->t_f32);
  return q->w->dtype == TJ_DTYPE_F16    ? LLVMHalfTypeInContext(cx)
         : q->w->dtype == TJ_DTYPE_BF16 ? LLVMBFloatTypeInContext(cx)
                                        : em->t_f32;
}

// A value of A's or the scale's dtype at element |at| of |base|, as f32.
static LLVMValueRef load_f32(wq_t* q, LLVMValueRef base, LLVMValueRef at,
                             const char* name) {
  LLVMTypeRef t = in_type(q);
  LLVMValueRef v = LLVMBuildLoad2(q->b, t, gep(q, t, base, at), name);
  return t == q->em->t_f32 ? v : LLVMBuildFPExt(q->b, v, q->em->t_f32, "");
}

static LLVMValueRef min64(wq_t* q, LLVMValueRef a, LLVMValueRef b) {
  return tj_emit_min_i64(q->em, a, b);
}

// The weight word(s) of k row |kk| (i64) at the thread's columns, as i32
// values: |fast|, one aligned 4- or 8-byte load; else byte by byte, each
// column clamped to the row (columns past N read a neighbour and are
// never stored).
static void load_word(wq_t* q, LLVMValueRef kk, bool fast, LLVMValueRef* out) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef row =
      gep(q, em->t_i8, w->b_base, LLVMBuildMul(b, kk, w->sb_k, ""));
  int32_t words = q->word_bytes / 4;
  LLVMValueRef byte0 =
      w->bits == 4 ? LLVMBuildLShr(b, q->col, c64(q, 1), "") : q->col;
  if (fast) {
    LLVMTypeRef vt = LLVMVectorType(em->t_i32, (unsigned)words);
    LLVMValueRef v = LLVMBuildLoad2(b, vt, gep(q, em->t_i8, row, byte0), "wq");
    LLVMSetAlignment(v, (unsigned)q->word_bytes);
    for (int32_t i = 0; i < words; ++i)
      out[i] = LLVMBuildExtractElement(b, v, c32(q, i), "");
    return;
  }
  LLVMValueRef last = LLVMBuildSub(b, w->row_bytes, c64(q, 1), "");
  for (int32_t i = 0; i < words; ++i) {
    LLVMValueRef word = c32(q, 0);
    for (int32_t j = 0; j < 4; ++j) {
      LLVMValueRef at =
          min64(q, LLVMBuildAdd(b, byte0, c64(q, i * 4 + j), ""), last);
      LLVMValueRef by =
          LLVMBuildLoad2(b, em->t_i8, gep(q, em->t_i8, row, at), "");
      word = LLVMBuildOr(b, word,
                         LLVMBuildShl(b, LLVMBuildZExt(b, by, em->t_i32, ""),
                                      c32(q, 8 * j), ""),
                         "");
    }
    out[i] = word;
  }
}

// One chunk's scale and offset (2^23 + bias + zero) per column.
static void load_group(wq_t* q, LLVMValueRef k0, LLVMValueRef* scale,
                       LLVMValueRef* offset) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef grow =
      w->group ? LLVMBuildMul(b, LLVMBuildSDiv(b, k0, c64(q, w->group), ""),
                              w->ss_g, "")
               : c64(q, 0);
  LLVMValueRef last = LLVMBuildSub(b, w->n, c64(q, 1), "");
  double bias = w->flip ? (w->bits == 4 ? 8.0 : 128.0) : 0.0;
  for (int32_t j = 0; j < kCols; ++j) {
    LLVMValueRef c = min64(q, LLVMBuildAdd(b, q->col, c64(q, j), ""), last);
    LLVMValueRef at = LLVMBuildAdd(b, grow, c, "");
    scale[j] = load_f32(q, w->s_base, at, "s");
    LLVMValueRef off = cf(q, 8388608.0 + bias);
    if (w->z_base) {
      LLVMValueRef z =
          LLVMBuildLoad2(b, em->t_i8, gep(q, em->t_i8, w->z_base, at), "z");
      z = w->zero_signed ? LLVMBuildSIToFP(b, z, em->t_f32, "")
                         : LLVMBuildUIToFP(b, z, em->t_f32, "");
      off = LLVMBuildFAdd(b, off, z, "");
    }
    offset[j] = off;
  }
}

// The k rows of a chunk whose loads and FMAs are emitted as one unrolled
// block (a loop runs the chunk's blocks), for a tile of |mt| rows: at most
// 32 k-row x tile-row products (256 FMAs), so the whole chunk (|chunk|
// loads in flight) at M = 1, where the weight's bytes are the whole cost,
// and fewer rows as mt grows, where the FMAs are. A 32-row chunk unrolled
// at every tier on both load paths was 36,000 lines of PTX for int4
// (15,872 FMAs): 3.0 s of LLVM and 6.6 s of ptxas (CPU time) for one GEMM,
// against 0.6 s and 0.9 s now (bench/cuda_compile_cost). Each accumulator
// still adds the chunk's rows in k order, so the sums do not depend on the
// split. The byte-by-byte path (unaligned rows, a ragged N: the edge of a
// tile, or a weight that quant_prepack did not lay out) takes one row at
// a time.
static int32_t rows_unrolled(const wq_t* q, int32_t mt, bool fast) {
  int32_t n = fast ? 32 / mt : 1;
  return n > q->chunk ? q->chunk : n;
}

// The k-group's chunks for a tile of |mt| rows.
static void emit_chunks(wq_t* q, int32_t mt, bool fast) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  for (int32_t i = 0; i < mt * kCols; ++i)
    LLVMBuildStore(b, cf(q, 0.0), acc_slot(q, i));
  LLVMValueRef chunks =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, w->kdim, c64(q, q->chunk - 1), ""),
                    c64(q, q->chunk), "chunks");
  LLVMValueRef klast = LLVMBuildSub(b, w->kdim, c64(q, 1), "");
  LLVMValueRef rlast = LLVMBuildSub(b, q->rows, c64(q, 1), "");
  // Row r of A (clamped: rows past the tile's are computed, not stored).
  LLVMValueRef arow[16];
  for (int32_t r = 0; r < mt; ++r) {
    LLVMValueRef m = LLVMBuildAdd(b, w->m0, min64(q, c64(q, r), rlast), "");
    arow[r] = gep(q, in_type(q), w->a_base, LLVMBuildMul(b, m, w->sa_m, ""));
  }
  tj_emit_loop_t loop;
  LLVMValueRef c =
      tj_emit_loop_begin(em, &loop, q->kg, chunks, c64(q, q->kgroups), "chunk");
  LLVMValueRef k0 = LLVMBuildMul(b, c, c64(q, q->chunk), "k0");
  LLVMValueRef scale[kCols], offset[kCols];
  load_group(q, k0, scale, offset);
  int32_t nu = rows_unrolled(q, mt, fast);
  tj_emit_loop_t sub;
  bool split = nu < q->chunk;
  if (split) {
    LLVMValueRef k1 = tj_emit_loop_begin(em, &sub, c64(q, 0), c64(q, q->chunk),
                                         c64(q, nu), "rows");
    k0 = LLVMBuildAdd(b, k0, k1, "k1");
  }
  // Every weight word of the block first: |nu| loads in flight.
  LLVMValueRef words[32][2];
  LLVMValueRef valid[32];
  for (int32_t i = 0; i < nu; ++i) {
    LLVMValueRef kk = LLVMBuildAdd(b, k0, c64(q, i), "");
    valid[i] = LLVMBuildICmp(b, LLVMIntSLT, kk, w->kdim, "");
    load_word(q, min64(q, kk, klast), fast, words[i]);
  }
  LLVMValueRef acc[16 * kCols];
  for (int32_t i = 0; i < mt * kCols; ++i)
    acc[i] = LLVMBuildLoad2(b, em->t_f32, acc_slot(q, i), "");
  LLVMValueRef magic = c32(q, 0x4B000000);
  for (int32_t i = 0; i < nu; ++i) {
    LLVMValueRef kk = min64(q, LLVMBuildAdd(b, k0, c64(q, i), ""), klast);
    LLVMValueRef ka = LLVMBuildMul(b, kk, w->sa_k, "");
    LLVMValueRef x[16];
    for (int32_t r = 0; r < mt; ++r) {
      LLVMValueRef v = load_f32(q, arow[r], ka, "x");
      // k past K: the weight row is a clamped copy; x = 0 drops it.
      x[r] = LLVMBuildSelect(b, valid[i], v, cf(q, 0.0), "");
    }
    for (int32_t j = 0; j < kCols; ++j) {
      LLVMValueRef word = words[i][w->bits == 4 ? 0 : j / 4];
      int32_t shift = w->bits == 4 ? 4 * j : 8 * (j % 4);
      int32_t mask = w->bits == 4 ? 15 : 255;
      if (w->flip)
        word = LLVMBuildXor(
            b, word,
            c32(q, w->bits == 4 ? (int64_t)0x88888888 : (int64_t)0x80808080),
            "");
      LLVMValueRef u = LLVMBuildAnd(
          b, LLVMBuildLShr(b, word, c32(q, shift), ""), c32(q, mask), "");
      LLVMValueRef f =
          LLVMBuildBitCast(b, LLVMBuildOr(b, u, magic, ""), em->t_f32, "");
      LLVMValueRef wv =
          LLVMBuildFMul(b, LLVMBuildFSub(b, f, offset[j], ""), scale[j], "w");
      // f16/bf16: the dequantized weight is of that dtype, as the
      // reference's dequantize gives it (the f32 product of |q - z| <=
      // 255 and a 16-bit scale is exact, so this is its one rounding).
      if (in_type(q) != em->t_f32)
        wv = LLVMBuildFPExt(b, LLVMBuildFPTrunc(b, wv, in_type(q), ""),
                            em->t_f32, "");
      for (int32_t r = 0; r < mt; ++r)
        acc[r * kCols + j] = tj_emit_fmuladd(em, x[r], wv, acc[r * kCols + j]);
    }
  }
  for (int32_t i = 0; i < mt * kCols; ++i)
    LLVMBuildStore(b, acc[i], acc_slot(q, i));
  if (split) tj_emit_loop_end(em, &sub);
  tj_emit_loop_end(em, &loop);
}

// The thread's partial sums of |mt| rows: summed over the k-groups of the
// warp (butterfly), written by the warp's first column threads to its
// slice of the reduction area.
static void reduce_warp(wq_t* q, int32_t mt, LLVMValueRef red) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef lane = LLVMBuildAnd(b, q->w->tid, c32(q, 31), "");
  LLVMValueRef warp = LLVMBuildLShr(b, q->w->tid, c32(q, 5), "");
  for (int32_t i = 0; i < mt * kCols; ++i) {
    LLVMValueRef v = LLVMBuildLoad2(b, em->t_f32, acc_slot(q, i), "");
    for (int32_t s = q->col_threads; s < 32; s *= 2) {
      LLVMValueRef args[4] = {c32(q, -1), v, c32(q, s), c32(q, 31)};
      v = LLVMBuildFAdd(
          b, v, tj_nvptx_call(q->nv, "llvm.nvvm.shfl.sync.bfly.f32", args, 4),
          "");
    }
    LLVMBuildStore(b, v, acc_slot(q, i));
  }
  tj_emit_if_t first;
  tj_emit_if_begin(
      em, &first,
      LLVMBuildICmp(b, LLVMIntULT, lane, c32(q, q->col_threads), ""), "first");
  // red[warp][r][column of the tile]
  int32_t tn = q->w->tile_n;
  for (int32_t r = 0; r < mt; ++r) {
    for (int32_t j = 0; j < kCols; ++j) {
      LLVMValueRef at = LLVMBuildAdd(
          b, LLVMBuildMul(b, warp, c32(q, 16 * tn), ""),
          LLVMBuildAdd(b,
                       LLVMBuildMul(b, LLVMBuildTrunc(b, q->ct, em->t_i32, ""),
                                    c32(q, kCols), ""),
                       c32(q, r * tn + j), ""),
          "");
      LLVMValueRef p = LLVMBuildGEP2(b, em->t_f32, red, &at, 1, "");
      LLVMBuildStore(
          b, LLVMBuildLoad2(b, em->t_f32, acc_slot(q, r * kCols + j), ""), p);
    }
  }
  tj_emit_if_end(em, &first);
}

int32_t tj_nvptx_wqgemm_shared_bytes(const tj_nvptx_wqgemm_t* w) {
  return kWarps * 16 * w->tile_n * 4 + 16 * w->c_stride * 4;
}

int32_t tj_nvptx_wqgemm_tile_n(int32_t bits) { return bits == 4 ? 64 : 32; }

tj_status_t tj_nvptx_emit_wqgemm(tj_nvptx_emit_t* nv,
                                 const tj_nvptx_wqgemm_t* w) {
  tj_emit_t* em = &nv->em;
  wq_t q;
  memset(&q, 0, sizeof(q));
  q.nv = nv;
  q.em = em;
  q.b = em->b;
  q.w = w;
  if ((w->bits != 4 && w->bits != 8) ||
      w->tile_n != tj_nvptx_wqgemm_tile_n(w->bits) || w->c_stride % 4 != 0 ||
      w->c_stride < w->tile_n)
    return tj_internal("wqgemm: bits %d, tile_n %d, c_stride %d", (int)w->bits,
                       (int)w->tile_n, (int)w->c_stride);
  q.word_bytes = w->bits == 4 ? 4 : 8;
  q.chunk = w->bits == 4 ? 32 : 16;
  if (w->group % q.chunk != 0)
    return tj_internal("wqgemm: group %lld is not a multiple of %d",
                       (long long)w->group, (int)q.chunk);
  q.col_threads = w->tile_n / kCols;
  q.kgroups = kThreads / q.col_threads;
  LLVMBuilderRef b = q.b;
  LLVMValueRef tid = LLVMBuildZExt(b, w->tid, em->t_i64, "");
  q.ct = LLVMBuildSRem(b, tid, c64(&q, q.col_threads), "ct");
  q.kg = LLVMBuildSDiv(b, tid, c64(&q, q.col_threads), "kg");
  q.col =
      LLVMBuildAdd(b, w->n0, LLVMBuildMul(b, q.ct, c64(&q, kCols), ""), "col");
  q.rows = min64(&q, LLVMBuildSub(b, w->m, w->m0, ""), c64(&q, 16));
  q.acc = tj_emit_alloca(em, LLVMArrayType2(em->t_f32, 16 * kCols), "wq_acc");
  // The aligned loads: the thread's columns all inside N, the weight's
  // base and row pitch aligned to the word.
  LLVMValueRef wb = c64(&q, q.word_bytes);
  LLVMValueRef fast = LLVMBuildAnd(
      b,
      LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, q.col, c64(&q, kCols), ""),
                    w->n, ""),
      LLVMBuildICmp(
          b, LLVMIntEQ,
          LLVMBuildOr(
              b,
              LLVMBuildAnd(b, LLVMBuildPtrToInt(b, w->b_base, em->t_i64, ""),
                           c64(&q, q.word_bytes - 1), ""),
              LLVMBuildSRem(b, w->sb_k, wb, ""), ""),
          c64(&q, 0), ""),
      "fast");
  // The staged C tile first (where the template's epilogue reads it),
  // then the warps' partials: red[warp][row][column].
  LLVMValueRef red =
      LLVMBuildGEP2(b, em->t_f32, w->smem,
                    (LLVMValueRef[]){c32(&q, 16 * w->c_stride)}, 1, "red");
  int32_t tiers[5] = {1, 2, 4, 8, 16};
  for (int32_t t = 0; t < 5; ++t) {
    int32_t mt = tiers[t];
    LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLE, q.rows, c64(&q, mt), "");
    if (t > 0)
      in = LLVMBuildAnd(
          b, in,
          LLVMBuildICmp(b, LLVMIntSGT, q.rows, c64(&q, tiers[t - 1]), ""), "");
    tj_emit_if_t tier;
    tj_emit_if_begin(em, &tier, in, "tier");
    tj_emit_if_t vec, bytes;
    tj_emit_if_begin(em, &vec, fast, "fast");
    emit_chunks(&q, mt, true);
    tj_emit_if_end(em, &vec);
    tj_emit_if_begin(em, &bytes, LLVMBuildNot(b, fast, ""), "bytes");
    emit_chunks(&q, mt, false);
    tj_emit_if_end(em, &bytes);
    reduce_warp(&q, mt, red);
    tj_emit_if_end(em, &tier);
  }
  tj_nvptx_barrier(nv);
  // The warps' partials in warp order into the staged C tile: rows past
  // the tile's hold sums never stored.
  LLVMValueRef cbase = w->smem;
  int32_t items = 16 * w->tile_n;
  for (int32_t it0 = 0; it0 < items; it0 += kThreads) {
    LLVMValueRef it = LLVMBuildAdd(b, w->tid, c32(&q, it0), "");
    LLVMValueRef r = LLVMBuildUDiv(b, it, c32(&q, w->tile_n), "");
    LLVMValueRef cl = LLVMBuildURem(b, it, c32(&q, w->tile_n), "");
    LLVMValueRef s = cf(&q, 0.0);
    for (int32_t wp = 0; wp < kWarps; ++wp) {
      LLVMValueRef at = LLVMBuildAdd(b, it, c32(&q, wp * 16 * w->tile_n), "");
      s = LLVMBuildFAdd(
          b, s,
          LLVMBuildLoad2(b, em->t_f32,
                         LLVMBuildGEP2(b, em->t_f32, red, &at, 1, ""), ""),
          "");
    }
    LLVMValueRef at =
        LLVMBuildAdd(b, LLVMBuildMul(b, r, c32(&q, w->c_stride), ""), cl, "");
    LLVMBuildStore(b, s, LLVMBuildGEP2(b, em->t_f32, cbase, &at, 1, ""));
  }
  tj_nvptx_barrier(nv);
  return NULL;
}
