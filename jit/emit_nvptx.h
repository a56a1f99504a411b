// Kernel IR -> NVPTX LLVM IR: the last lowering step of the CUDA backend.
//
// The kernel IR (kir/kernel_ir.h) and its body semantics are shared with the
// x86 JIT: bodies are emitted by tj_emit_body (jit/emit_llvm.c) with the
// same op lowering and transcendentals (jit/vecmath.h), at a point that one
// GPU thread owns. Only the templates differ:
//   POINTWISE   a 2-D grid-stride loop: blocks and threads in y walk the
//               outer dims (rows), in x the innermost dim, so symbolic sizes
//               need no recompilation. Each thread handles 16 bytes of the
//               widest buffer per step (128-bit ld/st.v4) when the innermost
//               size and every contiguous buffer allow it at run time, else
//               one element.
//   ROW_REDUCE  one row per group of ntid.x threads (ntid.y rows per block),
//               the same vector/scalar choice along the row; each REDUCE
//               phase combines per-thread partials with warp shuffles, then
//               across the row's warps through shared memory; MAP and ROW
//               phases follow while the row is hot in L1/L2. A row too
//               long for registers but not for shared memory may be
//               staged there first (a block a row, 16-byte cp.async),
//               where the launch gives it the memory
//               (tj_nvptx_row_staged).
//   GEMM        f16/bf16 operands: tensor cores (mma.sync m16n8k16, f32
//               accumulators), ldmatrix from an XOR-swizzled shared-memory
//               tile ring filled by cp.async (multi-stage pipeline), then the
//               epilogue phase on every accumulator (bias, gelu, residual,
//               cast) before the store. On sm_90a the main loop is
//               wgmma.mma_async instead, reading both operands from the
//               ring in the 128-byte swizzle layout (emit_nvptx_wgmma.c);
//               with gemm_tma, a producer warpgroup fills the ring by TMA
//               through two tensor-map parameters after the scalars.
//               f32 operands: CUDA-core FMA tiles. See emit_nvptx_gemm.c.
//               i8/u8 operands (matmul_i32, sm_90a): 8-bit wgmma into i32
//               accumulators (emit_nvptx_qgemm.c), the same epilogue.
//               A quantized B (qfold, tj_kir_bq_t): the decode kernel of
//               emit_nvptx_wqgemm.c, the same epilogue.
//   ATTENTION   FlashAttention-2's forward (issue 14): f16/bf16, head dims
//               64 and 128, a block of 4 warps per 64 query rows, K/V tiles
//               of 64 keys through shared memory by cp.async, mma.sync for
//               Q.K^T and P.V, the online softmax in registers. See
//               emit_nvptx_attention.c. On sm_90a without a mask operand
//               the forward and attention_lse run on wgmma instead
//               (FlashAttention-3's structure, 2 warpgroups per 128 query
//               rows; emit_nvptx_attention_wgmma.c; TJ_NVPTX_ATTENTION=mma
//               keeps mma.sync). f32, head dims up to 128 that are
//               multiples of 4: the same blocks and tiles on FFMA register
//               tiles, P through shared memory (emit_nvptx_attention_f32.c).
//   CONV        an f32 groups == 1 conv as an implicit GEMM (issue 15): a
//               128 x 128 tile of (output channels, pixels) a block, the
//               patch tile gathered from x through the window by cp.async
//               (zero-filled padding), FFMA register tiles or TF32
//               mma.sync (gemm_tf32), or TF32 wgmma on sm_90a
//               (conv_kernel). See emit_nvptx_conv.c. Its direct window
//               variant (depthwise conv, max/avg pool): a thread per
//               output column of a few rows, every tap unrolled, x read in
//               place. See emit_nvptx_window.c.
//
// A compiled kernel is a __global__ function "tj_kernel_<name>" whose
// parameters are the buffers' device pointers in declaration order, then
// the scalar params as int64 values; tj_nvptx_launch_config gives its grid.

#ifndef TJ_JIT_EMIT_NVPTX_H_
#define TJ_JIT_EMIT_NVPTX_H_

#include "jit/emit_llvm.h"
#include "jit/nvptx.h"

// Appends kernel |kernel| to |module| (an NVPTX module for |arch|, see
// tj_nvptx_module_create) and describes its launch in |*out_kernel|.
// |kernel| should be finalized; the emitter re-checks what it relies on and
// returns INVALID_ARGUMENT for what it cannot lower, and UNSUPPORTED for
// valid kernels the GPU path does not do yet (f64 tanh, erf, sin, cos and
// pow, which the x86 path takes from libm, when |options| has no
// libdevice; a GEMM operand that is neither
// f32, f16 nor bf16, or i8/u8 off sm_90a; mixed operand dtypes).
// |options| may be NULL (defaults); an out-of-range option is
// INVALID_ARGUMENT.
tj_status_t tj_nvptx_emit_kernel(LLVMModuleRef module, tj_nvptx_arch_t arch,
                                 const tj_kir_t* kernel,
                                 const tj_nvptx_options_t* options,
                                 tj_nvptx_kernel_t* out_kernel);

// The LLVM-level face of jit/nvptx.h's module (tests and the emitters; the
// CUDA backend uses tj_nvptx_module_t, which keeps LLVM's types inside
// jit/).

// An empty module in |context| with the target's triple and data layout.
// Owned by the caller (LLVMDisposeModule, or pass it to tj_nvptx_compile).
LLVMModuleRef tj_nvptx_module_create(const tj_nvptx_target_t* target,
                                     LLVMContextRef context, const char* name);

// Verifies |module|, optimizes it (default<O3>) and emits PTX: a
// NUL-terminated string from |allocator| in |*out_ptx| (free with
// tj_free_string), NULL on failure. Takes ownership of |module|, even on
// failure. A module that fails verification is INTERNAL (an emitter bug).
tj_status_t tj_nvptx_compile(const tj_nvptx_target_t* target,
                             LLVMModuleRef module, tj_allocator_t allocator,
                             char** out_ptx);

//===--- shared by the template files ---===//

typedef struct tj_nvptx_emit_t {
  tj_emit_t em;  // tj_emit_body's state: kernel, builder, bases, scalars
  tj_nvptx_arch_t arch;
  tj_nvptx_options_t options;
  LLVMTypeRef t_ptr_shared;  // ptr addrspace(3)
  LLVMTypeRef t_ptr_global;  // ptr addrspace(1)
  tj_nvptx_kernel_t* info;
  // gemm_tma: the tensor-map parameters of A and B (byval pointers), and
  // with gemm_tma_store the output's and its i32 flag (nonzero: encoded).
  // swiglu (issue 14): a dual GEMM's B2 map after B's, the output's then
  // at 3.
  LLVMValueRef tensor_map[4];
  LLVMValueRef store_map_ok;
} tj_nvptx_emit_t;

// A special register (e.g. "tid.x") as i32.
LLVMValueRef tj_nvptx_sreg(tj_nvptx_emit_t* nv, const char* name);
// The same, zero-extended to i64.
LLVMValueRef tj_nvptx_sreg64(tj_nvptx_emit_t* nv, const char* name);
// bar.sync 0.
void tj_nvptx_barrier(tj_nvptx_emit_t* nv);
// A module-level shared-memory array of |bytes| bytes, 16-byte aligned.
LLVMValueRef tj_nvptx_shared_array(tj_nvptx_emit_t* nv, const char* name,
                                   uint32_t bytes);
// The dynamic shared memory of the kernel (extern .shared).
LLVMValueRef tj_nvptx_dynamic_shared(tj_nvptx_emit_t* nv);
// Calls intrinsic |name| (not overloaded).
LLVMValueRef tj_nvptx_call(tj_nvptx_emit_t* nv, const char* name,
                           LLVMValueRef* args, unsigned num_args);
// Raises the alignment of the loads and stores of |point|'s unit-stride
// buffers emitted into |fn| so far to |lanes| elements (callers have
// checked it at run time): LLVM then selects 128-bit ld/st.v4.
void tj_nvptx_align_accesses(tj_nvptx_emit_t* nv, const tj_emit_point_t* point,
                             int32_t lanes);

// The GEMM template (emit_nvptx_gemm.c). Called with the kernel function
// open in the entry block.
tj_status_t tj_nvptx_emit_gemm(tj_nvptx_emit_t* nv);
tj_status_t tj_nvptx_gemm_launch(const tj_kir_t* kernel,
                                 const tj_nvptx_kernel_t* info,
                                 const int64_t* scalars, int32_t num_sms,
                                 tj_nvptx_launch_t* out_launch);

// The ATTENTION template (emit_nvptx_attention.c): f16/bf16 q, k, v with
// head dims 64 and 128 on tensor cores; f32 forward
// (emit_nvptx_attention_f32.c) with head dims d = dv up to 128 and
// multiples of 4, exact FFMA; else UNSUPPORTED. Called with the kernel
// function open in the entry block.
tj_status_t tj_nvptx_emit_attention(tj_nvptx_emit_t* nv);
tj_status_t tj_nvptx_attention_launch(const tj_kir_t* kernel,
                                      const tj_nvptx_kernel_t* info,
                                      const int64_t* scalars,
                                      tj_nvptx_launch_t* out_launch);

// The CONV template (emit_nvptx_conv.c, issue 15): an f32 implicit GEMM
// of a groups == 1 conv, FFMA, or TF32 mma.sync with gemm_tf32. Called
// with the kernel function open in the entry block.
tj_status_t tj_nvptx_emit_conv(tj_nvptx_emit_t* nv);
tj_status_t tj_nvptx_conv_launch(const tj_kir_t* kernel,
                                 const tj_nvptx_kernel_t* info,
                                 const int64_t* scalars, int32_t num_sms,
                                 tj_nvptx_launch_t* out_launch);

// The CONV template's direct window variant (emit_nvptx_window.c, cudabw):
// a depthwise conv, max_pool or avg_pool (tj_kir_conv_t.window) of at most
// TJ_NVPTX_WINDOW_MAX_TAPS taps, f32, no epilogue. tj_nvptx_emit_conv and
// tj_nvptx_conv_launch hand such kernels to these.
tj_status_t tj_nvptx_emit_window(tj_nvptx_emit_t* nv);
tj_status_t tj_nvptx_window_launch(const tj_kir_t* kernel,
                                   const tj_nvptx_kernel_t* info,
                                   const int64_t* scalars,
                                   tj_nvptx_launch_t* out_launch);

// The wgmma main loop (emit_nvptx_wgmma.c), sm_90a: what the GEMM
// template hands it.
typedef struct tj_nvptx_wgmma_t {
  int32_t tile_m, tile_n;       // 64|128 (256: TMA cooperative), 64|128|256
  int32_t stages;               // 3..8
  bool drain;                   // tj_nvptx_options_t.gemm_wgmma_drain
  int32_t c_stride;             // floats per row of the staged C tile
  uint32_t a, b;                // the GEMM_A and GEMM_B buffers
  bool f16;                     // else bf16
  bool tf32;                    // f32 on TF32 tensor cores (TMA only)
  LLVMValueRef a_base, b_base;  // the batch entry's A[0, 0], B[0, 0]
  LLVMValueRef sa_m, sb_k;      // i64 element strides of A rows, B rows
  LLVMValueRef m, n, kdim;      // i64 sizes
  LLVMValueRef m0, n0;          // i64 origin of the block's tile
  LLVMValueRef tid;             // i32 tid.x
  LLVMValueRef smem;            // the dynamic shared memory
  // B K-major (tj_kir_gemm_b_kmajor, x @ w^T): its tile is stored as A's,
  // rows of n 128 bytes of k apart, wgmma reads it without trans-b, and
  // |sb_n| (i64) is the element stride of those rows (|sb_k| unused).
  bool b_kmajor;
  LLVMValueRef sb_n;
  // Persistent (a grid of at most one block per SM): the block loops over
  // tiles ctaid.x, ctaid.x + nctaid.x, ... < |tiles| (i64) and calls
  // |tile_origin| for a tile's origin (m0, n0 above are unused) and
  // |epilogue| for each group of |rows| rows of a tile's C, staged at |c|
  // (row |row0| of the tile first), with the tile's batch entry (i64, or
  // NULL where the batch entry is the block's, ctaid.z).
  bool persistent;
  // TMA (tj_nvptx_options_t.gemm_tma): a producer warpgroup (threads
  // [0, 128)) loads through |map_a| and |map_b| (i64 generic addresses of
  // the tensor maps), tile_m / 64 consumer warpgroups compute; the tile
  // loop, tile_origin and epilogue are as for |persistent| (which here only
  // sizes the grid), and the epilogue runs on the consumers alone, whose
  // threads count from 0 (tid - 128).
  bool tma;
  // TMA: the consumer warpgroups take alternate tiles (pingpong), each
  // all tile_m rows of its tile (tile_m / 64 m64 wgmmas a k16); else both
  // take every tile (cooperative), each tile_m / 2 rows of it.
  bool pingpong;
  LLVMValueRef map_a, map_b;
  // TMA, batched GEMMs: |tiles| counts the tiles of every batch entry and
  // tile_origin names each tile's entry; an operand with a batch
  // (tj_nvptx_gemm_operand_batched) has a rank-3 map whose outermost dim
  // is the entry, the others a rank-2 map (one matrix for all entries).
  bool a_batched, b_batched;
  LLVMValueRef tiles;
  void (*tile_origin)(void* ctx, LLVMValueRef tile, LLVMValueRef* out_m0,
                      LLVMValueRef* out_n0, LLVMValueRef* out_batch);
  tj_status_t (*epilogue)(void* ctx, LLVMValueRef m0, LLVMValueRef n0,
                          LLVMValueRef batch, LLVMValueRef c, int32_t row0,
                          int32_t rows);
  void* ctx;
  // TMA, the output through a TMA store (tj_nvptx_options_t.
  // gemm_tma_store), where |store_ok| (i1) holds at run time, else the
  // staged epilogue above: the consumers call |epilogue_pair| for each
  // pair of columns (col, col + 1) of row |row| (i64, inside the tile at
  // (m0, n0)) whose accumulators are |acc| (<2 x float>); it stores the
  // output's two elements (|store_bytes| each) at |dst| (ptr
  // addrspace(3)). The tile then goes out through |map_c| (i64 generic
  // address), in panels of 128 bytes of columns by the tile's rows.
  bool tma_store;
  int32_t store_bytes;
  // |tma_store|: the pairs' epilogues one after another, not four in
  // lockstep (tj_nvptx_options_t.gemm_epilogue_in_order).
  bool pairs_in_order;
  // TMA, tj_nvptx_options_t.gemm_cluster: blocks 2 r and 2 r + 1 are a
  // cluster (cluster rank = ctaid.x % 2) running the same sequence of
  // tiles r, r + nctaid.x / 2, ... < |tiles|, tile_origin giving each its
  // own rows of the pair's (the same columns); each block's producer
  // loads the B panels of its rank's parity with TMA multicast into both
  // blocks, and each consumer warp releases a stage in both.
  bool cluster;
  LLVMValueRef map_c, store_ok;
  tj_status_t (*epilogue_pair)(void* ctx, LLVMValueRef m0, LLVMValueRef n0,
                               LLVMValueRef row, LLVMValueRef col,
                               LLVMValueRef acc, LLVMValueRef dst);
  // swiglu (issue 14): a dual GEMM (f16/bf16, tile_n 128 or 256, no
  // cluster). A stage's B holds tile_n / 2 columns of B, then the same
  // columns of B2 (|b2|, read as B is from |b2_base|, or by TMA through
  // |map_b2|), so one m64n<tile_n>k16 computes both products of a tile_n
  // / 2 wide tile of C, whose |n0| and |n| count those columns; the staged
  // rows hold C's tile_n / 2 columns, then C2's. With |tma_store| the
  // consumers call |epilogue_pair_dual| instead of |epilogue_pair|, with
  // C2's pair |acc2| beside C's, and the output tile is tile_n / 2 wide.
  bool dual;
  uint32_t b2;
  LLVMValueRef b2_base, map_b2;
  tj_status_t (*epilogue_pair_dual)(void* ctx, LLVMValueRef row,
                                    LLVMValueRef col, LLVMValueRef acc,
                                    LLVMValueRef acc2, LLVMValueRef dst);
} tj_nvptx_wgmma_t;

// The wgmma kernels' staged C rows hold column c at column
// tj_nvptx_wgmma_c_col(c): the 16-byte chunk c / 4 swaps with its
// neighbour (chunk ^ 1) where chunk bit 3 is set. The epilogue's 16-byte
// reads (a thread's 8 consecutive columns, 32 bytes apart across a warp)
// then hit the 8 chunks of a 128-byte bank line once per 8 threads instead
// of twice, and the accumulator fragment's 8-byte writes, whose pairs of
// chunks only swap, stay conflict-free. It permutes each aligned group of
// 8 columns, so a row of any multiple of 8 columns maps onto itself.
static inline int64_t tj_nvptx_wgmma_c_col(int64_t c) {
  return c ^ ((c >> 3) & 4);
}

// A wgmma shared-memory matrix descriptor for the 128-byte swizzle
// (SW128): start |addr| (i32, a shared-window address), leading and
// stride byte offsets |lbo| and |sbo| (PTX's matrix-descriptor format:
// each field is its value >> 4). The GEMM, 8-bit GEMM and attention
// kernels lay their tiles out alike and share it.
static inline LLVMValueRef tj_nvptx_wgmma_descriptor(tj_emit_t* em,
                                                     LLVMValueRef addr,
                                                     int64_t lbo, int64_t sbo) {
  LLVMBuilderRef b = em->b;
  LLVMValueRef start =
      LLVMBuildLShr(b,
                    LLVMBuildAnd(b, LLVMBuildZExt(b, addr, em->t_i64, ""),
                                 LLVMConstInt(em->t_i64, 0x3FFFF, 0), ""),
                    LLVMConstInt(em->t_i64, 4, 0), "");
  int64_t fixed = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1ll << 62);
  return LLVMBuildOr(b, start, LLVMConstInt(em->t_i64, (uint64_t)fixed, 0),
                     "desc");
}

// Dynamic shared memory of the wgmma main loop: the ring (or the staged
// C tile of |c_bytes|, which reuses it) plus the slack that aligns the
// ring to the 1024-byte swizzle atom.
int32_t tj_nvptx_wgmma_shared_bytes(const tj_nvptx_wgmma_t* w, int32_t c_bytes);

// Emits the main loop of one block: on return the block's f32 tile of
// C (tile_m x tile_n, rows |c_stride| floats apart) is in shared memory at
// |smem| and every thread has passed a barrier; the caller runs the
// epilogue. Persistent: the whole tile loop, epilogues included (their
// first error is returned).
tj_status_t tj_nvptx_emit_wgmma(tj_nvptx_emit_t* nv, const tj_nvptx_wgmma_t* w);

// The 8-bit wgmma main loop (emit_nvptx_qgemm.c, issue 17), sm_90a: i8/u8
// A and B (either, mixed) into i32, for matmul_i32's kernels. A is
// contiguous along k; B along k (|b_kmajor|) or along n.
typedef struct tj_nvptx_qgemm_t {
  int32_t tile_m, tile_n;       // 64|128, 64|128|256
  int32_t stages;               // 3..8
  int32_t c_stride;             // i32 words per row of the staged C tile
  uint32_t a, b;                // the GEMM_A and GEMM_B buffers
  tj_dtype_t a_dtype, b_dtype;  // i8 or u8; f8e4m3 or f8e5m2 (fp8)
  bool b_kmajor;
  // Mixed signs: the u8 operand is flipped to s8 (x ^ 0x80 = x - 128) in
  // shared memory and 128 times the other's sums along k are added back.
  bool flip_a, flip_b;
  LLVMValueRef a_base, b_base;  // the batch entry's A[0, 0], B[0, 0]
  LLVMValueRef sa_m;            // i64 element stride of A rows
  LLVMValueRef sb;              // i64 stride of B along n (k-major) or k
  LLVMValueRef m, n, kdim;      // i64 sizes
  LLVMValueRef m0, n0;          // i64 origin of the block's tile
  LLVMValueRef tid;             // i32 tid.x
  LLVMValueRef smem;            // the dynamic shared memory
} tj_nvptx_qgemm_t;

// Dynamic shared memory of the 8-bit main loop: the ring or the staged C
// tile of |c_bytes| (which reuses it), the sums of a mixed-sign GEMM, and
// the 1024-byte alignment slack.
int32_t tj_nvptx_qgemm_shared_bytes(const tj_nvptx_qgemm_t* q, int32_t c_bytes);

// Emits the 8-bit main loop of one block: on return the block's i32 tile
// of C (tile_m x tile_n, rows |c_stride| words apart) is in shared memory
// at |smem| and every thread has passed a barrier.
tj_status_t tj_nvptx_emit_qgemm(tj_nvptx_emit_t* nv, const tj_nvptx_qgemm_t* q);

// The weight-only quantized GEMM (emit_nvptx_wqgemm.c, issue 17, qfold):
// f32, f16 or bf16 A times a B of quantized weights (tj_kir_bq_t), for
// decode-sized M.
// Blocks of 256 threads own 16 rows and |tile_n| columns of C.
typedef struct tj_nvptx_wqgemm_t {
  int32_t bits;      // 4 or 8
  tj_dtype_t dtype;  // A's and the scale's: f32, f16 or bf16
  bool flip;         // signed q (int4 signed, i8): the sign bit flipped
  bool zero_signed;  // the zero point's bytes are signed
  int64_t group;     // rows of K a scale row; 0: one for all of K
  int32_t tile_n;    // tj_nvptx_wqgemm_tile_n(bits)
  int32_t c_stride;  // floats per row of the staged C tile (% 4 == 0)
  LLVMValueRef a_base, b_base, s_base, z_base;  // z_base NULL: no zero
  LLVMValueRef sa_m, sa_k;                      // i64 element strides of A
  LLVMValueRef sb_k;                            // i64 bytes between B rows
  LLVMValueRef ss_g;        // i64 elements between scale / zero rows
  LLVMValueRef row_bytes;   // i64 bytes of a B row that hold columns
  LLVMValueRef m, n, kdim;  // i64 sizes
  LLVMValueRef m0, n0;      // i64 origin of the block's tile
  LLVMValueRef tid;         // i32 tid.x
  LLVMValueRef smem;        // the dynamic shared memory
  // emit_nvptx_wqmma.c: K split across up to |max_splits| blocks (grid y)
  // of the |n_tiles| column tiles (N constant), 0: never.
  int32_t max_splits;
  int64_t n_tiles;
  // emit_nvptx_wqmma.c: B in the tile layout (tj_nvptx_wq_tile), b_base
  // its start; sb_k and row_bytes unused.
  bool tiled;
  // emit_nvptx_wqmma.c: threads a block, 256 (0 too) or 128.
  int32_t threads;
  // emit_nvptx_wqmma.c, with max_splits: the splits are the blocks of a
  // cluster (%cluster_nctarank, %cluster_ctarank), joined through
  // distributed shared memory (tj_nvptx_kernel_t.wq_cluster).
  bool cluster_join;
  // emit_nvptx_wqmma.c: griddepcontrol (tj_nvptx_kernel_t.wq_programmatic).
  bool programmatic;
  // emit_nvptx_wqmma.c, tiled f16/bf16 A: each warp's weight chunks go
  // through a ring of kWqRingStages chunks in shared memory by 16-byte
  // cp.async, several chunks ahead (tj_nvptx_options_t.wqgemm_ring).
  bool ring;
} tj_nvptx_wqgemm_t;

int32_t tj_nvptx_wqgemm_tile_n(int32_t bits);
// The staged C tile (16 rows of |c_stride| floats) and the reduction area.
int32_t tj_nvptx_wqgemm_shared_bytes(const tj_nvptx_wqgemm_t* w);
// Emits the main loop of one block: on return its f32 16 x tile_n tile of
// C is staged at |smem| and every thread has passed a barrier. The group
// must be a multiple of 32 (int4) or 16 (int8) rows.
tj_status_t tj_nvptx_emit_wqgemm(tj_nvptx_emit_t* nv,
                                 const tj_nvptx_wqgemm_t* w);
// The same on mma.sync tensor cores (emit_nvptx_wqmma.c, sm_80 and up):
// blocks of 256 threads own 16 rows and 64 columns (tile_n 64), groups a
// multiple of 16 rows.
int32_t tj_nvptx_wqmma_shared_bytes(const tj_nvptx_wqgemm_t* w);
tj_status_t tj_nvptx_emit_wqmma(tj_nvptx_emit_t* nv,
                                const tj_nvptx_wqgemm_t* w);

#endif  // TJ_JIT_EMIT_NVPTX_H_
