// backends/cuda/cuda_gemm_tune.c
//
// The GEMM candidates of a CUDA program (cuda_program.h): every
// tensor-core GEMM kernel can run as one of TJ_CUDA_GEMM_CANDIDATES
// implementations; this file sets them up (the cuBLASLt candidate's
// epilogue kernel), compiles them (precompiling a bucket's candidates in
// parallel), measures them through jit/autotune.h, chooses one per M
// bucket, and launches the choice. Offline programs emit them all
// (tj_cuda_gemm_emit_candidates).

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_program.h"
#include "jit/autotune.h"
#include "lib/background.h"
#include "lib/dtype.h"
#include "lib/env.h"

#define LT_WORKSPACE_BYTES ((size_t)8 << 20)

//===--- GEMM candidates ---===//

// Every tensor-core GEMM kernel has these implementations
// (TJ_CUDA_GEMM_CUBLASLT and TJ_CUDA_GEMM_CANDIDATES in cuda_program.h); the
// autotuner picks one per shape bucket (M rounded up to a power of two). 0 is
// the kernel of the program's module (on sm_90a the wgmma main loop with
// 128x128 tiles and 3 stages, elsewhere mma.sync); the others but 4 are
// the same kernel IR compiled with other main loops and tiles (each its own
// module, compiled on first need; the wgmma ones are UNSUPPORTED, so
// skipped, before sm_90a); 4 is cuBLASLt's matmul into a temporary of the
// matmul's dtype, then the kernel's epilogue (bias, gelu, residual, casts,
// stores) as a pointwise kernel that reads it: 2 launches and one more
// round trip of the intermediate (a plain matmul's, whose epilogue only
// rounds and stores into a dense output, with at most a bias and a
// residual added: cuBLASLt into that output, its BIAS epilogue and the
// residual as C with beta 1, one launch, lt_direct; direct_store). 7, 8
// and 9 are the TMA, warp-specialized
// persistent schedule (cooperative, then pingpong), 10 the cooperative one
// on a grid of a block a tile, 11 cooperative 128x64 tiles for small M or
// N, 15 pingpong on 128x128 tiles and 16 cooperative on 256x128 (batched
// GEMMs too, the batch entries folded into the tile index, where each
// operand's batch is one dim of evenly spaced matrices or none), whose
// launches add the tensor maps encoded for the run's pointers and sizes
// (tj_cuda_gemm_tensor_maps; UNSUPPORTED, so skipped, where TMA cannot
// address the operands). 17 is the cp.async wgmma main loop on
// 128x64 tiles, for batched GEMMs with a small N.
// f32 GEMMs are tuned too when allow_tf32 lets them use TF32 tensor cores
// on sm_90a (nv_options.gemm_tf32): 0 is then the exact f32 kernel (CUDA
// cores), 4 cuBLASLt in its TF32 mode, 7 to 10 the TMA schedules on wgmma
// .tf32 (11's 128x64 cooperative tile, 15 and 16 have no tf32 form, and
// the cp.async wgmma and mma.sync ones none at all: UNSUPPORTED, so
// skipped).
// 12, 13 and 14 are split-K (tj_cuda_gemm_split_t, kSplits): K in 2, 4
// or 8 slices, each a batch entry of the module's main loop (wgmma on sm_90a,
// mma.sync before, the exact CUDA-core kernel for f32) writing f32
// partials, then a pointwise kernel that sums them in slice order and runs
// the epilogue once: 2 launches, for M x N too small to fill the GPU with
// tiles while K is long. Rank-2 GEMMs whose K and N are constants (the
// slices' bounds and the workspace's strides are then constants too);
// exact f32 GEMMs (no allow_tf32, or before sm_90a) have these and 4,
// cuBLASLt's exact sgemm (CUBLAS_COMPUTE_32F) and the epilogue, beside 0,
// and 18 (TJ_CUDA_GEMM_F32_WIDE, theirs alone): the exact CUDA-core kernel
// on 256x128 tiles, 128 accumulators a thread (emit_nvptx_gemm.c), where
// its tiles fill the GPU.
static const tj_nvptx_options_t kVariants[TJ_CUDA_GEMM_CANDIDATES] = {
    [1] = {.gemm_tile_k = 32,
           .gemm_stages = 3,
           .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    [2] = {.gemm_tile_k = 64,
           .gemm_stages = 3,
           .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
    [3] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 128,
           .gemm_tile_n = 256},
    [5] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 64,
           .gemm_tile_n = 128},
    [6] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tile_m = 128,
           .gemm_tile_n = 128},
    // TMA loads by a producer warpgroup, two consumer warpgroups, a
    // persistent grid (emit_nvptx_wgmma.c). 9, 15 and 16 store their
    // output with TMA where it allows (gemm_tma_store; the staged
    // epilogue elsewhere): on the H200 (bench/RESULTS.md, issue 13,
    // hopper8) 1.00-1.22x faster than staged on the six bf16 goal shapes,
    // pingpong 128x128 from 0.84-0.90x cuBLAS to 0.92-0.94x on five of
    // them. 7 keeps the staged epilogue: with the store it was 0.98x as
    // fast at (8192, 3072, 768), where it is the fastest candidate, and
    // at 4096^3.
    [7] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tma = true,
           .gemm_persistent = true,
           .gemm_tile_m = 128,
           .gemm_tile_n = 128},
    [8] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tma = true,
           .gemm_persistent = true,
           .gemm_tile_m = 128,
           .gemm_tile_n = 256},
    // The same, pingpong: 64-row tiles, the two consumer warpgroups on
    // alternate tiles, so one's epilogue overlaps the other's wgmmas.
    [9] = {.gemm_stages = 4,
           .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
           .gemm_tma = true,
           .gemm_tma_store = true,
           .gemm_persistent = true,
           .gemm_tile_m = 64,
           .gemm_tile_n = 256},
    // TMA 128x256 with a 3-stage ring, a block a tile: 144 KiB of ring
    // leave room to stage 64 rows of C at a time (2 epilogue rounds a
    // tile, against 4 of 32 rows beside s4's 192 KiB). The fastest TMA
    // kernel at (2048, 1024, 4096) and fused at (4096, 4096, 4096) in
    // bench/RESULTS.md (issue 13), and not a candidate until now.
    [10] = {.gemm_stages = 3,
            .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
            .gemm_tma = true,
            .gemm_tile_m = 128,
            .gemm_tile_n = 256},
    // TMA 128x64 with an 8-stage ring, persistent: for small M or N,
    // where 128x128 tiles leave SMs idle (M 256, N 4096: 64 tiles on 132
    // SMs; 128x64 makes 128) and K is long enough for a deep ring. On the
    // H200 (bench/RESULTS.md, issue 13, hopper2) 0.99x cuBLAS at (256,
    // 1024, 4096) and 0.96x at (1024, 1024, 1024), against 0.80x and
    // 0.78x for the best candidate before (wgmma 64x128 s4); slower than
    // 128x128 on the large shapes, where timing drops it.
    [11] = {.gemm_stages = 8,
            .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
            .gemm_tma = true,
            .gemm_persistent = true,
            .gemm_tile_m = 128,
            .gemm_tile_n = 64},
    // TMA pingpong on 128x128 tiles (issue 13, hopper7): each consumer
    // warpgroup computes a whole tile (two m64 wgmmas a k16) and the two
    // alternate, so one's epilogue overlaps the other's main loop, which
    // the cooperative tiles cannot (hopper5's profile: 35-43% of their
    // samples in the epilogue); the operand bytes a flop are the
    // cooperative 128x128's, 4/5 of the 64x256 pingpong's.
    [15] = {.gemm_stages = 4,
            .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
            .gemm_tma = true,
            .gemm_tma_store = true,
            .gemm_persistent = true,
            .gemm_pingpong = true,
            .gemm_tile_m = 128,
            .gemm_tile_n = 128},
    // TMA cooperative on 256x128 tiles, each consumer warpgroup 128 rows
    // (two m64 wgmmas a k16): cuBLAS's tile on the H200 (its kernel
    // nvjet_sm90_tst_256x128_64x4, hopper5), the fewest operand bytes a
    // flop of any candidate; 3 stages leave room for 128 rows of C.
    [16] = {.gemm_stages = 3,
            .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
            .gemm_tma = true,
            .gemm_tma_store = true,
            .gemm_persistent = true,
            .gemm_tile_m = 256,
            .gemm_tile_n = 128},
    // cp.async wgmma on 128x64 tiles, 4 stages: the batched GEMMs' tile
    // (their operands have no TMA form, so 11 cannot serve them). At
    // attention's context GEMM [192, 512, 512] @ [192, 512, 64] (N = 64)
    // the 128x128 tiles compute half zeros; 128x64 reached 0.97x cuBLAS's
    // strided batched GEMM there against 0.67x for the best candidate
    // (bench/RESULTS.md, issue 13, hopper7).
    [17] = {.gemm_stages = 4,
            .gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
            .gemm_tile_m = 128,
            .gemm_tile_n = 64},
    // Exact f32 GEMMs: cuBLAS's sgemm tile (issue 13, sgemm; its H200
    // kernel is sm80_xmma_gemm_f32f32..._tilesize256x128x8), one block of
    // 256 threads an SM, 8x16 outputs a thread, A transposed in shared
    // memory, bk 16, 3 stages: the fastest of the 256x128 forms on the
    // H200 (bench/RESULTS.md, issue 13, sgemm), 0.81-0.86x cuBLAS's sgemm
    // on the three goal shapes where the default 128x128 kernel reached
    // 0.76-0.82x (it spills 40 bytes; the bk8 forms, which do not, were
    // slower).
    [TJ_CUDA_GEMM_F32_WIDE] = {.gemm_tile_m = 256,
                               .gemm_tile_k = 16,
                               .gemm_stages = 3,
                               .gemm_f32_a_transposed = true},
};

// Candidate |c|'s schedule (kVariants) with what every kernel of |p|
// keeps: its math options (tj_cuda_program_math_options) and allow_tf32.
static tj_nvptx_options_t variant_options(const tj_cuda_program_t* p,
                                          int32_t c) {
  tj_nvptx_options_t o = kVariants[c];
  tj_nvptx_options_t math = tj_cuda_program_math_options(p);
  o.approx_math = math.approx_math;
  o.libdevice = math.libdevice;
  o.gemm_tf32 = p->nv_options.gemm_tf32;
  return o;
}
// Every candidate is timed by jit/autotune.h, which takes at most
// TJ_AUTOTUNE_MAX_CANDIDATES (more: tuning fails with INVALID_ARGUMENT).
_Static_assert(TJ_CUDA_GEMM_CANDIDATES <= TJ_AUTOTUNE_MAX_CANDIDATES,
               "jit/autotune.h times at most TJ_AUTOTUNE_MAX_CANDIDATES");
static const char* const kCandidateNames[TJ_CUDA_GEMM_CANDIDATES] = {
    "fused default",
    "fused mma bk32 s3",
    "fused mma bk64 s3",
    "fused wgmma 128x256 s4",
    "cublaslt matmul + epilogue kernel",
    "fused wgmma 64x128 s4",
    "fused wgmma 128x128 s4",
    "fused tma ws 128x128 s4 persistent",
    "fused tma ws 128x256 s4 persistent",
    "fused tma pingpong 64x256 s4 persistent",
    "fused tma ws 128x256 s3",
    "fused tma ws 128x64 s8 persistent",
    "split-k 2 + reduce epilogue",
    "split-k 4 + reduce epilogue",
    "split-k 8 + reduce epilogue",
    "fused tma pingpong 128x128 s4 persistent",
    "fused tma ws 256x128 s3 persistent",
    "fused wgmma 128x64 s4",
    "fused f32 cuda cores 256x128 bk16 s3 a-transposed"};

// The slices of K of split-K candidate TJ_CUDA_GEMM_SPLIT_K + j.
// 8 serves the f32 CUDA-core kernel at (256, 4096, 1024) and (512, 8192,
// 512), whose 16 tiles leave 68 of 132 SMs idle even at 4 slices.
static const int32_t kSplits[TJ_CUDA_GEMM_SPLITS] = {2, 4, 8};

// The split-K entry of candidate |c|, or -1.
static int32_t split_index(int32_t c) {
  int32_t j = c - TJ_CUDA_GEMM_SPLIT_K;
  return j >= 0 && j < TJ_CUDA_GEMM_SPLITS ? j : -1;
}

//===--- GEMM candidates: setup ---===//

static bool ival_eq(tj_kir_ival_t a, tj_kir_ival_t b) {
  return a.param == b.param && (a.param >= 0 || a.value == b.value);
}

// The GEMM's epilogue phase as a POINTWISE kernel over the same space and
// params, named <g>_<suffix>, whose accumulator is read from |num_acc|
// buffers of |acc_dtype| with strides |acc_strides| (the first is
// *|out_acc|, the others follow it) and summed in their order. The
// buffers of g it reads besides A and B are mapped in |out_map| (epilogue
// buffer -> GEMM buffer).
// A dual GEMM's (swiglu, issue 14) second accumulator (acc2) is read
// from the buffer after the first's, "acc2", when |num_acc| is 1.
static tj_status_t epilogue_kernel(tj_cuda_program_t* p, const tj_kir_t* g,
                                   const char* suffix, int32_t num_acc,
                                   tj_dtype_t acc_dtype,
                                   const tj_kir_ival_t* acc_strides,
                                   tj_kir_t** out, uint32_t* out_acc,
                                   uint32_t* out_map) {
  char name[232];
  snprintf(name, sizeof(name), "%s_%s", g->name, suffix);
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(tj_kir_create(p->al, TJ_KIR_POINTWISE, name, &k));
  for (uint32_t i = 0; i < g->num_params; ++i) {
    tj_kir_add_param(k, g->param_names[i]);
  }
  tj_kir_set_space(k, g->rank, g->dims);
  uint32_t map[TJ_KIR_MAX_BUFFERS];
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &g->buffers[b];
    map[b] = TJ_KIR_NONE;
    if (buf->role == TJ_KIR_GEMM_A || buf->role == TJ_KIR_GEMM_B ||
        buf->role == TJ_KIR_GEMM_B2)
      continue;
    map[b] =
        tj_kir_add_buffer(k, buf->name, buf->dtype, buf->role, buf->strides);
    if (map[b] < TJ_KIR_MAX_BUFFERS) out_map[map[b]] = b;
  }
  uint32_t acc = TJ_KIR_NONE;
  for (int32_t s = 0; s < num_acc; ++s) {
    char acc_name[16];
    snprintf(acc_name, sizeof(acc_name), "acc%d", (int)s);
    uint32_t a = tj_kir_add_buffer(k, num_acc == 1 ? "acc" : acc_name,
                                   acc_dtype, TJ_KIR_INPUT, acc_strides);
    if (s == 0) acc = a;
  }
  if (tj_kir_gemm_is_dual(g) && num_acc == 1)
    tj_kir_add_buffer(k, "acc2", acc_dtype, TJ_KIR_INPUT, acc_strides);
  const tj_kir_phase_t* ph = &g->phases[0];
  uint32_t* v = tj_calloc(p->al, ph->num_insts + 1, sizeof(uint32_t));
  if (!v) {
    tj_kir_destroy(k);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    const uint32_t* a = in->args;
    switch (in->kind) {
      case TJ_KIR_LOAD:
        v[i] = tj_kir_load(k, map[in->ref]);
        break;
      case TJ_KIR_LOAD_AT:
        v[i] = tj_kir_load_at(k, map[in->ref], v[a[0]]);
        break;
      case TJ_KIR_CONST:
        v[i] = tj_dtype_is_float(in->dtype)
                   ? tj_kir_const_float(k, in->dtype, in->fvalue)
                   : tj_kir_const_int(k, in->dtype, in->ivalue);
        break;
      case TJ_KIR_PARAM:
        v[i] = tj_kir_param(k, in->ref);
        break;
      case TJ_KIR_INDEX:
        v[i] = tj_kir_index(k, in->ref);
        break;
      case TJ_KIR_ACC:
        v[i] = tj_kir_cast(k, TJ_DTYPE_F32,
                           tj_kir_load(k, in->ref ? acc + 1 : acc));
        for (int32_t s = 1; s < num_acc; ++s) {
          v[i] = tj_kir_binary(
              k, TJ_OP_ADD, v[i],
              tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, acc + (uint32_t)s)));
        }
        break;
      case TJ_KIR_OP:
        if (in->op == TJ_OP_CAST) {
          v[i] = tj_kir_cast(k, in->dtype, v[a[0]]);
        } else if (in->op == TJ_OP_WHERE) {
          v[i] = tj_kir_where(k, v[a[0]], v[a[1]], v[a[2]]);
        } else if (in->num_args == 1) {
          v[i] = tj_kir_unary(k, in->op, v[a[0]]);
        } else {
          v[i] = tj_kir_binary(k, in->op, v[a[0]], v[a[1]]);
        }
        break;
      case TJ_KIR_STORE:
        tj_kir_store(k, map[in->ref], v[a[0]]);
        break;
      default:
        v[i] = TJ_KIR_NONE;
        break;  // ROW, YIELD, STORE_AT: not in a GEMM
    }
  }
  tj_free(p->al, v, sizeof(uint32_t) * (ph->num_insts + 1));
  tj_status_t status = tj_kir_finalize(k);
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  *out = k;
  *out_acc = acc;
  return NULL;
}

// The cuBLASLt candidate's epilogue: it reads the accumulator from a dense
// [M, N] temporary of |t->acc_dtype| (already rounded to the matmul's
// dtype, as the GEMM's epilogue rounds it first thing).
static tj_status_t make_epilogue(tj_cuda_program_t* p, const tj_kir_t* g,
                                 tj_cuda_gemm_tune_t* t) {
  tj_kir_ival_t st[2] = {g->dims[1], tj_kir_constant(1)};
  return epilogue_kernel(p, g, "epi", 1, t->acc_dtype, st, &t->epi, &t->epi_acc,
                         t->epi_map);
}

//===--- GEMM candidates: split-K ---===//

// Whether split-K in |s| slices fits GEMM |g|: rank 2, f32/f16/bf16
// operands (no quantized B), K and N constants, K a multiple of 64 * s
// (each slice whole k-tiles, its start 16-byte aligned for cp.async), and
// the k strides of A and B constants (the slices' offsets).
static bool split_fits(const tj_kir_t* g, int32_t s) {
  if (g->kind != TJ_KIR_GEMM || g->rank != 2 || g->num_phases != 1 ||
      g->bq.bits != 0 || tj_kir_gemm_is_int8(g) || g->gemm_k.param >= 0 ||
      g->dims[1].param >= 0 || g->gemm_k.value % (64 * s) != 0)
    return false;
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &g->buffers[b];
    // f32 partials: exact for f32, f16 and bf16 operands, not for f64.
    if (buf->role == TJ_KIR_GEMM_A &&
        (buf->strides[1].param >= 0 ||
         (buf->dtype != TJ_DTYPE_F32 && buf->dtype != TJ_DTYPE_F16 &&
          buf->dtype != TJ_DTYPE_BF16)))
      return false;
    if (buf->role == TJ_KIR_GEMM_B && buf->strides[0].param >= 0) return false;
    if (buf->role != TJ_KIR_GEMM_A && buf->role != TJ_KIR_GEMM_B &&
        buf->role != TJ_KIR_INPUT && buf->role != TJ_KIR_OUTPUT)
      return false;
  }
  return true;
}

// The partial GEMM of split |sp| of |g|: space [S, M, N], K / S, batch
// entry s reading A's columns and B's rows from s * K / S on, its
// epilogue one store of the f32 accumulator into the workspace [M, S, N].
static tj_status_t make_split_part(tj_cuda_program_t* p, const tj_kir_t* g,
                                   tj_cuda_gemm_split_t* sp) {
  char name[232];
  snprintf(name, sizeof(name), "%s_sk%d", g->name, (int)sp->s);
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(tj_kir_create(p->al, TJ_KIR_GEMM, name, &k));
  for (uint32_t i = 0; i < g->num_params; ++i) {
    tj_kir_add_param(k, g->param_names[i]);
  }
  int64_t n = g->dims[1].value;
  int64_t kslice = g->gemm_k.value / sp->s;
  tj_kir_ival_t dims[3] = {tj_kir_constant(sp->s), g->dims[0], g->dims[1]};
  tj_kir_set_space(k, 3, dims);
  tj_kir_set_gemm(k, tj_kir_constant(kslice), &g->schedule);
  k->allow_half_gemm = g->allow_half_gemm;
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &g->buffers[b];
    if (buf->role == TJ_KIR_GEMM_A) {
      tj_kir_ival_t st[3] = {tj_kir_constant(kslice * buf->strides[1].value),
                             buf->strides[0], buf->strides[1]};
      tj_kir_add_buffer(k, buf->name, buf->dtype, buf->role, st);
    } else if (buf->role == TJ_KIR_GEMM_B) {
      tj_kir_ival_t st[3] = {tj_kir_constant(kslice * buf->strides[0].value),
                             buf->strides[0], buf->strides[1]};
      tj_kir_add_buffer(k, buf->name, buf->dtype, buf->role, st);
    }
  }
  tj_kir_ival_t ws_st[3] = {tj_kir_constant(n), tj_kir_constant(sp->s * n),
                            tj_kir_constant(1)};
  uint32_t ws =
      tj_kir_add_buffer(k, "partial", TJ_DTYPE_F32, TJ_KIR_OUTPUT, ws_st);
  tj_kir_store(k, ws, tj_kir_acc(k));
  tj_status_t status = tj_kir_finalize(k);
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  sp->part = k;
  return NULL;
}

// Sets up split-K candidate j of kernel |g|: its two kernel IR kernels
// (a kernel whose epilogue is no pointwise kernel has none).
static tj_status_t make_split(tj_cuda_program_t* p, const tj_kir_t* g,
                              tj_cuda_gemm_tune_t* t, int32_t j) {
  tj_cuda_gemm_split_t* sp = &t->split[j];
  sp->s = kSplits[j];
  if (!split_fits(g, sp->s)) return NULL;
  int64_t n = g->dims[1].value;
  tj_kir_ival_t st[2] = {tj_kir_constant(sp->s * n), tj_kir_constant(1)};
  char suffix[16];
  snprintf(suffix, sizeof(suffix), "skr%d", (int)sp->s);
  tj_status_t s = epilogue_kernel(p, g, suffix, sp->s, TJ_DTYPE_F32, st,
                                  &sp->reduce, &sp->reduce_acc, sp->reduce_map);
  if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
  if (s) {
    tj_status_free(s);
    return NULL;
  }
  s = make_split_part(p, g, sp);
  if (s) {
    tj_kir_destroy(sp->reduce);
    sp->reduce = NULL;
    if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
    tj_status_free(s);
    return NULL;
  }
  t->split_ok = true;
  return NULL;
}

// Whether |g|'s epilogue is one that cuBLASLt computes as it writes a
// dense row-major [M, N] output of |dtype| itself: the accumulator (the
// terms tagged kTermAcc), plus at most a bias (an input of |dtype| with
// stride 0 along m and 1 along n, cuBLASLt's BIAS epilogue) and, with
// |with_c|, at most a residual (an input of |dtype| laid out as the output,
// cuBLASLt's C with beta 1; issue 14), every value between the terms and
// the one store rounded to |dtype| or widened to f32, nothing else. A
// plain matmul is the accumulator alone. The sums are then formed in f32
// and rounded once, where the epilogue rounds the product and each sum
// (bench/RESULTS.md: the bf16 and f16 tolerance). Sets |*out| to the
// output's buffer and |*bias|, |*c| to the others' or TJ_KIR_NONE.
enum { kTermAcc = 1, kTermBias = 2, kTermC = 4 };
static bool direct_store(const tj_kir_t* g, tj_dtype_t dtype, bool with_c,
                         uint32_t* out, uint32_t* bias, uint32_t* c) {
  const tj_kir_phase_t* ph = &g->phases[0];
  if (g->rank != 2 || ph->num_insts > 64) return false;
  uint8_t terms[64];
  uint32_t stores = 0;
  *bias = TJ_KIR_NONE;
  *c = TJ_KIR_NONE;
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    const uint32_t* a = in->args;
    terms[i] = 0;
    if (in->kind == TJ_KIR_ACC && in->ref == 0) {
      terms[i] = kTermAcc;
    } else if (in->kind == TJ_KIR_LOAD) {
      const tj_kir_buffer_t* b = &g->buffers[in->ref];
      if (b->role != TJ_KIR_INPUT || b->dtype != dtype || in->dtype != dtype ||
          !tj_kir_ival_is_const(b->strides[1], 1))
        return false;
      if (tj_kir_ival_is_const(b->strides[0], 0) && *bias == TJ_KIR_NONE) {
        *bias = in->ref;
        terms[i] = kTermBias;
      } else if (with_c && ival_eq(b->strides[0], g->dims[1]) &&
                 *c == TJ_KIR_NONE) {
        *c = in->ref;
        terms[i] = kTermC;
      } else {
        return false;
      }
    } else if (in->kind == TJ_KIR_OP && in->op == TJ_OP_CAST &&
               (in->dtype == dtype || in->dtype == TJ_DTYPE_F32)) {
      terms[i] = terms[a[0]];
    } else if (in->kind == TJ_KIR_OP && in->op == TJ_OP_ADD &&
               in->num_args == 2 &&
               (in->dtype == dtype || in->dtype == TJ_DTYPE_F32) &&
               terms[a[0]] && terms[a[1]] && !(terms[a[0]] & terms[a[1]])) {
      terms[i] = terms[a[0]] | terms[a[1]];
    } else if (in->kind == TJ_KIR_STORE && (terms[a[0]] & kTermAcc) &&
               ph->insts[a[0]].dtype == dtype) {
      const tj_kir_buffer_t* b = &g->buffers[in->ref];
      // Every term summed, once: a bias or residual loaded and not added
      // would be a second store's, which there is not.
      if (b->dtype != dtype || !tj_kir_ival_is_const(b->strides[1], 1) ||
          !ival_eq(b->strides[0], g->dims[1]) ||
          (*bias != TJ_KIR_NONE && !(terms[a[0]] & kTermBias)) ||
          (*c != TJ_KIR_NONE && !(terms[a[0]] & kTermC)))
        return false;
      *out = in->ref;
      ++stores;
    } else {
      return false;
    }
    if (in->kind != TJ_KIR_STORE && !terms[i]) return false;
  }
  return stores == 1;
}

// Whether kernel |i| is an f32 GEMM that allow_tf32 lets run on TF32
// tensor cores (sm_90a).
static bool tf32_gemm(const tj_cuda_program_t* p, uint32_t i) {
  const tj_kir_t* g = p->kernels[i].low->kernel;
  if (p->kernels[i].info.tensor_cores || g->kind != TJ_KIR_GEMM ||
      !p->nv_options.gemm_tf32 || p->arch != TJ_NVPTX_SM_90A)
    return false;
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    if (g->buffers[b].role == TJ_KIR_GEMM_A)
      return g->buffers[b].dtype == TJ_DTYPE_F32;
  }
  return false;
}

// Whether kernel |i| runs on CUDA cores, where none of kVariants' main
// loops has an exact form: an exact f32 GEMM (no allow_tf32, or not on
// sm_90a). Its candidates besides its own (0) are cuBLASLt's exact sgemm
// (4; our exact kernel reached 0.71-0.82x of it on the H200,
// bench/RESULTS.md) and split-K.
static bool exact_f32(const tj_cuda_program_t* p, uint32_t i) {
  return !p->kernels[i].info.tensor_cores && !tf32_gemm(p, i);
}

// Whether kernel |i| has GEMM candidates: a tensor-core GEMM, an f32 one
// that allow_tf32 lets run on TF32 tensor cores (sm_90a), or an exact f32
// GEMM (cuBLASLt's sgemm, and split-K where it fits).
static bool has_candidates(const tj_cuda_program_t* p, uint32_t i) {
  const tj_kir_t* g = p->kernels[i].low->kernel;
  // The 8-bit gemms (int8 and fp8) and the quantized-B one (issue 17)
  // have one schedule and no cuBLASLt twin. (fp8 had the cp.async wgmma
  // tiles as candidates by accident, and cuBLASLt and the TMA schedules,
  // which it cannot run, tried at every first run.)
  if (tj_kir_gemm_is_int8(g) || tj_kir_gemm_is_f8(g) || g->bq.bits)
    return false;
  // A conv (TJ_KIR_CONV; its TF32 kernel says tensor_cores) has none:
  // kVariants' options are a GEMM's, so each candidate was the conv
  // compiled again without the context's TJ_NVPTX_CONV (mma.sync), and a
  // decision an mma.sync context had cached chose those under wgmma too.
  if (g->kind == TJ_KIR_CONV) return false;
  if (p->kernels[i].info.tensor_cores || tf32_gemm(p, i)) return true;
  if (g->kind != TJ_KIR_GEMM) return false;
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    if (g->buffers[b].role == TJ_KIR_GEMM_A &&
        g->buffers[b].dtype == TJ_DTYPE_F32)
      return true;
  }
  for (int32_t j = 0; j < TJ_CUDA_GEMM_SPLITS; ++j) {
    if (split_fits(g, kSplits[j])) return true;
  }
  return false;
}

tj_status_t tj_cuda_gemm_setup(tj_cuda_program_t* p) {
  bool any = false;
  for (uint32_t i = 0; i < p->num_kernels; ++i) any |= has_candidates(p, i);
  if (!any) return NULL;
  p->gemm.tunes =
      tj_calloc(p->al, p->num_kernels + 1, sizeof(tj_cuda_gemm_tune_t));
  if (!p->gemm.tunes) return tj_status_oom();
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    tj_cuda_gemm_tune_t* t = &p->gemm.tunes[i];
    t->temp_offset = -1;
    t->split_offset = -1;
    const tj_kir_t* g = p->kernels[i].low->kernel;
    if (!has_candidates(p, i)) continue;
    t->tunable = true;
    for (uint32_t b = 0; b < g->num_buffers; ++b) {
      if (g->buffers[b].role == TJ_KIR_GEMM_A) t->a = b;
      if (g->buffers[b].role == TJ_KIR_GEMM_B) t->b = b;
    }
    TJ_RETURN_IF_ERROR(tj_kir_print(g, &t->text));
    // cuBLASLt takes row-major X[M,K] and W[K,N] with leading dims K, N,
    // or W as the [N, K] matrix of x @ w^T (lt_w_transposed, rows K apart).
    const tj_kir_buffer_t* A = &g->buffers[t->a];
    const tj_kir_buffer_t* B = &g->buffers[t->b];
    t->acc_dtype = A->dtype;
    t->lt_w_transposed = tj_kir_gemm_b_kmajor(g);
    // A dual GEMM (swiglu, issue 14): cuBLASLt twice (B2 is read as B
    // is), then the epilogue kernel on both temporaries.
    t->b2 = TJ_KIR_NONE;
    for (uint32_t b = 0; b < g->num_buffers; ++b) {
      if (g->buffers[b].role == TJ_KIR_GEMM_B2) t->b2 = b;
    }
    t->lt_ok = g->rank == 2 && tj_kir_ival_is_const(A->strides[1], 1) &&
               ival_eq(A->strides[0], g->gemm_k) &&
               (t->lt_w_transposed ? ival_eq(B->strides[1], g->gemm_k)
                                   : tj_kir_ival_is_const(B->strides[1], 1) &&
                                         ival_eq(B->strides[0], g->dims[1]));
    t->lt_bias = t->lt_c = TJ_KIR_NONE;
    if (t->lt_ok) {
      t->lt_direct = g->rank == 2 && t->b2 == TJ_KIR_NONE &&
                     direct_store(g, t->acc_dtype, !p->gemm.lt_residual_off,
                                  &t->out, &t->lt_bias, &t->lt_c);
      tj_status_t s = make_epilogue(p, g, t);
      if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
      if (s) {
        // Not expressible as a pointwise kernel: candidate 4 is out.
        tj_status_free(s);
        t->lt_ok = false;
      }
    }
    for (int32_t j = 0; j < TJ_CUDA_GEMM_SPLITS; ++j)
      TJ_RETURN_IF_ERROR(make_split(p, g, t, j));
  }
  return NULL;
}

//===--- GEMM candidates: running ---===//

// Compiles what candidate |c| of kernel |ki| needs (once).
static tj_status_t ensure_candidate(tj_cuda_program_t* p, uint32_t ki,
                                    int32_t c) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  const tj_kir_t* g = p->kernels[ki].low->kernel;
  int32_t j = split_index(c);
  if (j >= 0) {
    tj_cuda_gemm_split_t* sp = &t->split[j];
    if (!sp->part)
      return tj_unsupported("split-K in %d does not fit kernel @%s",
                            (int)kSplits[j], g->name);
    tj_nvptx_options_t o = tj_cuda_program_math_options(p);
    if (!sp->part_fn)
      TJ_RETURN_IF_ERROR(
          tj_cuda_program_compile_kernel(p, sp->part, &o, &sp->part_fn));
    if (!sp->reduce_fn)
      TJ_RETURN_IF_ERROR(
          tj_cuda_program_compile_kernel(p, sp->reduce, &o, &sp->reduce_fn));
    return NULL;
  }
  if (c > 0 && c != TJ_CUDA_GEMM_CUBLASLT && c != TJ_CUDA_GEMM_F32_WIDE &&
      exact_f32(p, ki))
    return tj_unsupported("candidate %d has no exact f32 form", (int)c);
  if (c == TJ_CUDA_GEMM_F32_WIDE && !exact_f32(p, ki))
    return tj_unsupported("candidate %d is the exact f32 GEMM's alone", (int)c);
  if (c > 0 && c != TJ_CUDA_GEMM_CUBLASLT && !t->variant[c]) {
    tj_nvptx_options_t o = variant_options(p, c);
    TJ_RETURN_IF_ERROR(
        tj_cuda_program_compile_kernel(p, g, &o, &t->variant[c]));
  }
  if (c == TJ_CUDA_GEMM_CUBLASLT) {
    if (!t->lt_ok || p->gemm.lt_unavailable)
      return tj_unsupported("cuBLASLt does not fit kernel @%s", g->name);
    if (!p->gemm.lt) {
      tj_status_t s = tj_cublaslt_open(p->al, &p->gemm.lt);
      if (s) {
        p->gemm.lt_unavailable = true;
        return s;
      }
    }
    if (!p->gemm.lt_workspace) {
      TJ_RETURN_IF_ERROR(tj_cuda_allocator_alloc(p->device->allocator,
                                                 LT_WORKSPACE_BYTES, p->stream,
                                                 &p->gemm.lt_workspace));
    }
    if (!t->epi_fn) {
      tj_nvptx_options_t o = tj_cuda_program_math_options(p);
      TJ_RETURN_IF_ERROR(
          tj_cuda_program_compile_kernel(p, t->epi, &o, &t->epi_fn));
    }
  }
  return NULL;
}

// Arguments and grids of split-K candidate |c| of kernel |ki| for this
// run: the partial GEMM reads A and B and writes the workspace; the
// reduction reads the workspace (partial s at column block s of each row
// of [M, S, N]) and the GEMM's other buffers.
static tj_status_t split_args(tj_cuda_program_t* p, uint32_t ki, int32_t c,
                              const int64_t* scalars) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  tj_cuda_program_kernel_t* kern = &p->kernels[ki];
  const tj_kir_t* g = kern->low->kernel;
  tj_cuda_gemm_split_t* sp = &t->split[split_index(c)];
  if (t->split_offset < 0)
    return tj_unsupported("kernel @%s: no split-K workspace this run", g->name);
  const uint64_t* argv = p->run.argv + kern->arg_offset;
  uint64_t ws = p->run.arena + (uint64_t)t->split_offset;
  const tj_kir_t* part = sp->part;
  for (uint32_t b = 0; b < part->num_buffers; ++b) {
    tj_kir_role_t role = part->buffers[b].role;
    sp->part_argv[b] = role == TJ_KIR_GEMM_A   ? argv[t->a]
                       : role == TJ_KIR_GEMM_B ? argv[t->b]
                                               : ws;
    sp->part_argp[b] = &sp->part_argv[b];
  }
  for (uint32_t i = 0; i < part->num_params; ++i) {
    memcpy(&sp->part_argv[part->num_buffers + i], &scalars[i], sizeof(int64_t));
    sp->part_argp[part->num_buffers + i] =
        &sp->part_argv[part->num_buffers + i];
  }
  TJ_RETURN_IF_ERROR(
      tj_nvptx_gemm_check_pointers(part, &sp->part_fn->info, sp->part_argv));
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
      part, &sp->part_fn->info, scalars, p->device->num_sms, &sp->part_launch));
  const tj_kir_t* e = sp->reduce;
  uint64_t row = (uint64_t)g->dims[1].value * sizeof(float);
  for (uint32_t b = 0; b < e->num_buffers; ++b) {
    bool acc = b >= sp->reduce_acc && b < sp->reduce_acc + (uint32_t)sp->s;
    sp->reduce_argv[b] =
        acc ? ws + (b - sp->reduce_acc) * row : argv[sp->reduce_map[b]];
    sp->reduce_argp[b] = &sp->reduce_argv[b];
  }
  for (uint32_t i = 0; i < e->num_params; ++i) {
    memcpy(&sp->reduce_argv[e->num_buffers + i], &scalars[i], sizeof(int64_t));
    sp->reduce_argp[e->num_buffers + i] = &sp->reduce_argv[e->num_buffers + i];
  }
  return tj_nvptx_launch_config(e, &sp->reduce_fn->info, scalars,
                                p->device->num_sms, &sp->reduce_launch);
}

// Arguments and grids of candidate |c| of kernel |ki| for this run (the
// fused kernel's arguments are in argv already).
static tj_status_t candidate_args(tj_cuda_program_t* p, uint32_t ki, int32_t c,
                                  const int64_t* scalars) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  tj_cuda_program_kernel_t* kern = &p->kernels[ki];
  const tj_kir_t* g = kern->low->kernel;
  if (c == 0) {
    return tj_nvptx_launch_config(g, &kern->info, scalars, p->device->num_sms,
                                  &p->run.launches[ki]);
  }
  if (split_index(c) >= 0) return split_args(p, ki, c, scalars);
  if (c != TJ_CUDA_GEMM_CUBLASLT) {
    const tj_nvptx_kernel_t* info = &t->variant[c]->info;
    TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
        g, info, scalars, p->device->num_sms, &p->run.launches[ki]));
    if (!info->tma || p->run.launches[ki].empty) return NULL;
    // Encoded per run: the maps hold the pointers and sizes (the graph
    // key has both, so a replayed graph's copies stay right).
    const uint64_t* argv = p->run.argv + kern->arg_offset;
    TJ_RETURN_IF_ERROR(
        tj_cuda_gemm_tensor_maps(p->device, g, info, argv, scalars, &t->maps));
    uint32_t n = g->num_buffers + g->num_params;
    memcpy(t->tma_argp, p->run.argp + kern->arg_offset, n * sizeof(void*));
    tj_cuda_tensor_map_args(info, &t->maps, t->tma_argp + n);
    return NULL;
  }
  const uint64_t* argv = p->run.argv + kern->arg_offset;
  const tj_kir_t* e = t->epi;
  if (t->lt_direct) {
    bool bias = t->lt_bias != TJ_KIR_NONE, with_c = t->lt_c != TJ_KIR_NONE;
    if (argv[t->a] % 256 || argv[t->b] % 256 || argv[t->out] % 256 ||
        (bias && argv[t->lt_bias] % 256) || (with_c && argv[t->lt_c] % 256))
      return tj_unsupported("cuBLASLt: operands not 256-byte aligned");
    // C may be the output itself (cuBLASLt's in-place form), not overlap
    // it otherwise.
    uint64_t bytes = (uint64_t)t->m *
                     (uint64_t)tj_kir_ival_eval(g->dims[1], scalars) *
                     tj_dtype_size(t->acc_dtype);
    if (with_c && argv[t->lt_c] != argv[t->out] &&
        argv[t->lt_c] < argv[t->out] + bytes &&
        argv[t->out] < argv[t->lt_c] + bytes)
      return tj_unsupported("cuBLASLt: C overlaps the output");
  } else if (t->temp_offset < 0) {
    return tj_internal("no GEMM temporary");
  }
  if (!t->lt_direct) {
    uint64_t temp = p->run.arena + (uint64_t)t->temp_offset;
    uint64_t temp2 = p->run.arena + (uint64_t)t->temp2_offset;
    bool dual = t->b2 != TJ_KIR_NONE;
    // cuBLASLt plans assume 256-byte aligned operands.
    if (argv[t->a] % 256 || argv[t->b] % 256 || temp % 256 ||
        (dual && (argv[t->b2] % 256 || temp2 % 256)))
      return tj_unsupported("cuBLASLt: operands not 256-byte aligned");
    for (uint32_t b = 0; b < e->num_buffers; ++b) {
      t->epi_argv[b] = b == t->epi_acc               ? temp
                       : dual && b == t->epi_acc + 1 ? temp2
                                                     : argv[t->epi_map[b]];
      t->epi_argp[b] = &t->epi_argv[b];
    }
    for (uint32_t i = 0; i < e->num_params; ++i) {
      memcpy(&t->epi_argv[e->num_buffers + i], &scalars[i], sizeof(int64_t));
      t->epi_argp[e->num_buffers + i] = &t->epi_argv[e->num_buffers + i];
    }
    TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(
        e, &t->epi_fn->info, scalars, p->device->num_sms, &t->epi_launch));
  }
  int64_t n = tj_kir_ival_eval(g->dims[1], scalars);
  int64_t k = tj_kir_ival_eval(g->gemm_k, scalars);
  t->plan = NULL;
  for (int i = 0; i < TJ_CUDA_GEMM_MAX_PLANS && !t->plan; ++i) {
    if (t->plans[i] && t->plan_ms[i] == t->m) t->plan = t->plans[i];
  }
  if (!t->plan) {
    // Plans for the last few M (cuBLASLt's heuristic picks per shape).
    uint32_t slot = t->next_plan++ % TJ_CUDA_GEMM_MAX_PLANS;
    tj_cublaslt_gemm_destroy(t->plans[slot]);
    t->plans[slot] = NULL;
    TJ_RETURN_IF_ERROR(tj_cublaslt_gemm_plan_ex(
        p->gemm.lt, t->acc_dtype, p->nv_options.gemm_tf32, t->lt_w_transposed,
        t->m, n, k,
        t->lt_direct && t->lt_bias != TJ_KIR_NONE ? TJ_CUBLASLT_EPILOGUE_BIAS
                                                  : TJ_CUBLASLT_EPILOGUE_NONE,
        LT_WORKSPACE_BYTES, &t->plans[slot]));
    t->plan_ms[slot] = t->m;
    t->plan = t->plans[slot];
    p->gemm.fresh_plan = true;
  }
  return NULL;
}

// Enqueues kernel |ki| as candidate |c|.
tj_status_t tj_cuda_gemm_launch(tj_cuda_program_t* p, uint32_t ki, int32_t c) {
  tj_cuda_program_kernel_t* k = &p->kernels[ki];
  void** args = p->run.argp + k->arg_offset;
  if (c == 0)
    return tj_cuda_program_launch_function(
        p, k->fn.function, &p->run.launches[ki], args, k->info.entry);
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  int32_t j = split_index(c);
  if (j >= 0) {
    tj_cuda_gemm_split_t* sp = &t->split[j];
    TJ_RETURN_IF_ERROR(tj_cuda_program_launch_function(
        p, sp->part_fn->function.function, &sp->part_launch, sp->part_argp,
        sp->part_fn->info.entry));
    return tj_cuda_program_launch_function(p, sp->reduce_fn->function.function,
                                           &sp->reduce_launch, sp->reduce_argp,
                                           sp->reduce_fn->info.entry);
  }
  if (c != TJ_CUDA_GEMM_CUBLASLT)
    return tj_cuda_program_launch_function(
        p, t->variant[c]->function.function, &p->run.launches[ki],
        t->variant[c]->info.tma ? t->tma_argp : args, k->info.entry);
  if (p->run.launches[ki].empty) return NULL;
  const uint64_t* argv = p->run.argv + k->arg_offset;
  if (t->lt_direct)
    return tj_cublaslt_gemm_run_c(
        t->plan, argv[t->a], argv[t->b],
        t->lt_bias != TJ_KIR_NONE ? argv[t->lt_bias] : 0,
        t->lt_c != TJ_KIR_NONE ? argv[t->lt_c] : 0, argv[t->out],
        p->gemm.lt_workspace, p->stream);
  TJ_RETURN_IF_ERROR(
      tj_cublaslt_gemm_run(t->plan, argv[t->a], argv[t->b], 0,
                           p->run.arena + (uint64_t)t->temp_offset,
                           p->gemm.lt_workspace, p->stream));
  // A dual GEMM's second product (swiglu, issue 14): the same plan.
  if (t->b2 != TJ_KIR_NONE)
    TJ_RETURN_IF_ERROR(
        tj_cublaslt_gemm_run(t->plan, argv[t->a], argv[t->b2], 0,
                             p->run.arena + (uint64_t)t->temp2_offset,
                             p->gemm.lt_workspace, p->stream));
  return tj_cuda_program_launch_function(p, t->epi_fn->function.function,
                                         &t->epi_launch, t->epi_argp,
                                         t->epi_fn->info.entry);
}

typedef struct measure_ctx_t {
  tj_cuda_program_t* p;
  uint32_t ki;
  const int64_t* scalars;
} measure_ctx_t;

//===--- GEMM candidates: pruning before compiling ---===//

// Whether the TMA schedules can load this run's operands: what
// tj_cuda_gemm_tensor_maps will ask (rows that are contiguous, 16-byte
// aligned bases and row pitches; a batched operand's batch dims one dim
// of evenly spaced matrices, 16-byte multiples apart: a dense [B, H, T,
// D] tensor's are). Broadcast or permuted batches stay on the cp.async
// kernels.
static bool tma_fits(const tj_cuda_program_t* p, uint32_t ki,
                     const int64_t* scalars) {
  const tj_cuda_program_kernel_t* kern = &p->kernels[ki];
  const tj_kir_t* g = kern->low->kernel;
  int32_t r = g->rank;
  const uint64_t* argv = p->run.argv + kern->arg_offset;
  bool kmajor = tj_kir_gemm_b_kmajor(g);
  for (uint32_t b = 0; b < g->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &g->buffers[b];
    if (buf->role != TJ_KIR_GEMM_A && buf->role != TJ_KIR_GEMM_B &&
        buf->role != TJ_KIR_GEMM_B2)
      continue;
    // A K-major B's rows are its rows of n (tj_cuda_gemm_tensor_maps).
    int inner = buf->role != TJ_KIR_GEMM_A && kmajor ? r - 2 : r - 1;
    int64_t pitch = tj_kir_ival_eval(buf->strides[2 * r - 3 - inner], scalars);
    int64_t elem = (int64_t)tj_dtype_size(buf->dtype);
    if (!tj_kir_ival_is_const(buf->strides[inner], 1) || argv[b] % 16 != 0 ||
        pitch <= 0 || pitch * elem % 16 != 0)
      return false;
    if (!tj_nvptx_gemm_operand_batched(g, b)) continue;
    int64_t next = -1;  // the stride batch dim d must have
    for (int32_t d = r - 3; d >= 0; --d) {
      int64_t dim = tj_kir_ival_eval(g->dims[d], scalars);
      int64_t stride = tj_kir_ival_eval(buf->strides[d], scalars);
      if (dim == 1) continue;
      if ((next >= 0 && stride != next) || stride <= 0 ||
          stride * elem % 16 != 0)
        return false;
      next = stride * dim;
    }
  }
  return true;
}

// The wave model of candidate |c| (a wgmma tile): the C elements the
// busiest SM computes, ceil(tiles / SMs) tiles of tile_m x tile_n (K is
// the same for every candidate), over |batch| matrices of M x N. It sees
// wave quantization and tiles larger than the problem, which is what
// separates the tiles at small M or N; it does not rank schedules of one
// tile (timing does).
static double wave_cost(const tj_cuda_program_t* p, int32_t c, int64_t batch,
                        int64_t m, int64_t n, bool dual) {
  int64_t tm = kVariants[c].gemm_tile_m ? kVariants[c].gemm_tile_m : 128;
  int64_t tn = kVariants[c].gemm_tile_n ? kVariants[c].gemm_tile_n : 128;
  // A dual GEMM's tile of C is half its wgmma's columns (the other half
  // is the second product's).
  if (dual) tn /= 2;
  int64_t sms = p->device && p->device->num_sms > 0 ? p->device->num_sms : 1;
  int64_t tiles = batch * ((m + tm - 1) / tm) * ((n + tn - 1) / tn);
  return (double)((tiles + sms - 1) / sms) * (double)(tm * tn);
}

// A candidate whose wave model is this many times the best one's is not
// compiled (at (256, 1024, 4096) on 132 SMs: the 128x256 tiles, 2x the
// 128x128 and 3.2x the 64x128; these leave 132 SMs a tile or none).
#define kWaveSlack 2.0

// Split-K is timed where the GEMM's 128x128 tiles leave at least half the
// SMs idle and each slice keeps at least this much of K: below it the
// partials' round trip through memory outweighs what the slices gain.
#define kSplitMinK 256

static bool split_timed(const tj_cuda_program_t* p, uint32_t ki, int32_t c,
                        const int64_t* scalars) {
  const tj_cuda_gemm_split_t* sp = &p->gemm.tunes[ki].split[split_index(c)];
  if (!sp->part) return false;
  const tj_kir_t* g = p->kernels[ki].low->kernel;
  if (g->gemm_k.value / sp->s < kSplitMinK) return false;
  int64_t m = tj_kir_ival_eval(g->dims[0], scalars);
  int64_t n = g->dims[1].value;
  int64_t sms = p->device && p->device->num_sms > 0 ? p->device->num_sms : 1;
  int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
  return 2 * tiles <= sms;
}

int64_t tj_cuda_gemm_split_bytes(const tj_cuda_program_t* p, uint32_t ki,
                                 const int64_t* scalars) {
  if (!p->gemm.tunes || !p->gemm.tunes[ki].split_ok) return 0;
  const tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  const tj_kir_t* g = p->kernels[ki].low->kernel;
  int64_t m = tj_kir_ival_eval(g->dims[0], scalars);
  if (m <= 0) return 0;
  // A bucket tuned earlier may have chosen split-K where this run's M
  // alone would not time it.
  int32_t chosen = -1;
  for (uint32_t i = 0; i < t->num_choices; ++i) {
    if (t->choices[i].bucket == tj_pow2_bucket(m))
      chosen = t->choices[i].candidate;
  }
  int64_t most = 0;
  for (int32_t j = 0; j < TJ_CUDA_GEMM_SPLITS; ++j) {
    int32_t c = TJ_CUDA_GEMM_SPLIT_K + j;
    if (!t->split[j].part) continue;
    bool used = p->gemm.forced >= 0 ? p->gemm.forced == c
                : chosen >= 0
                    ? chosen == c
                    : p->gemm.autotune && split_timed(p, ki, c, scalars);
    if (used && t->split[j].s > most) most = t->split[j].s;
  }
  return m * most * g->dims[1].value * (int64_t)sizeof(float);
}

// Whether tuning compiles and times candidate |c| of kernel |ki| for the
// run with |scalars|: a cost model prunes, before any LLVM or ptxas
// work (the TMA kernels cost ptxas ~1 s each), what cannot win.
//   - Where wgmma runs, mma.sync main loops (~0.2 s each to compile): on
//     the H200 they reached 0.46x cuBLAS where wgmma reached 0.69x
//     (bench/cuda_bench --gemm).
//   - The TMA schedules where TMA cannot load the operands (they would
//     be compiled, then refused by their tensor maps).
//   - Where the TMA schedules serve a rank-2 GEMM, the cp.async wgmma
//     kernels of the same tiles (128x128 s4, 128x256 s4, 128x64 s4): the
//     TMA kernel of each tile was faster on every shape of
//     bench/RESULTS.md's issue 13 table. The module's own kernel (0) is
//     compiled anyway and always timed.
//   - Tiles whose wave model (wave_cost) is over kWaveSlack times the
//     best's.
//   - Split-K where the tiles fill the GPU or the slices are short
//     (split_timed).
// Pruned candidates stay available to TJ_CUDA_GEMM_CANDIDATE.
static bool timed_candidate(const tj_cuda_program_t* p, uint32_t ki, int32_t c,
                            const int64_t* scalars) {
  if (split_index(c) >= 0) return split_timed(p, ki, c, scalars);
  if (c == 0 || c == TJ_CUDA_GEMM_CUBLASLT) return true;
  if (exact_f32(p, ki)) {
    if (c != TJ_CUDA_GEMM_F32_WIDE) return false;
    // Its 256x128 tiles where they fill the SMs at least once (fewer
    // leave SMs idle that the 128x128 tiles or split-K would use).
    const tj_kir_t* g = p->kernels[ki].low->kernel;
    int64_t n = tj_kir_ival_eval(g->dims[g->rank - 1], scalars);
    int64_t tiles = (p->gemm.tunes[ki].m + 255) / 256 * ((n + 127) / 128);
    for (int32_t d = 0; d + 2 < g->rank; ++d)
      tiles *= tj_kir_ival_eval(g->dims[d], scalars);
    int64_t sms = p->device && p->device->num_sms > 0 ? p->device->num_sms : 1;
    return tiles >= sms;
  }
  if (c == TJ_CUDA_GEMM_F32_WIDE) return false;
  const tj_nvptx_options_t* o = &kVariants[c];
  if (p->arch != TJ_NVPTX_SM_90A) return o->gemm_kernel != TJ_NVPTX_GEMM_WGMMA;
  if (o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC) return false;
  bool tma = tma_fits(p, ki, scalars);
  // f32 (allow_tf32): only the TMA schedules have a tf32 form, and not
  // the 128x64 cooperative tile or the two-row-block ones, pingpong
  // 128x128 and 256x128 (emit_nvptx_wgmma.c).
  if (!p->kernels[ki].info.tensor_cores &&
      (!o->gemm_tma || (o->gemm_tile_m == 128 && o->gemm_tile_n < 128) ||
       o->gemm_pingpong || o->gemm_tile_m == 256))
    return false;
  if (o->gemm_tma && !tma) return false;
  const tj_kir_t* g = p->kernels[ki].low->kernel;
  // A dual GEMM (swiglu, issue 14): the wgmma tiles of 128 or 256
  // columns (64 or 128 of each product), no cluster.
  bool dual = tj_kir_gemm_is_dual(g);
  if (dual && (o->gemm_tile_n < 128 || o->gemm_cluster)) return false;
  if (!o->gemm_tma && tma && g->rank == 2) {
    for (int32_t v = 1; v < TJ_CUDA_GEMM_CANDIDATES; ++v) {
      if (kVariants[v].gemm_tma && kVariants[v].gemm_tile_m == o->gemm_tile_m &&
          kVariants[v].gemm_tile_n == o->gemm_tile_n)
        return false;
    }
  }
  int64_t m = p->gemm.tunes[ki].m;
  int64_t n = tj_kir_ival_eval(g->dims[g->rank - 1], scalars);
  // A batched GEMM's tiles are those of every matrix: 16 tiles of 128x128
  // at M = N = 512 leave the GPU idle, 192 such matrices fill 23 waves.
  int64_t batch = 1;
  for (int32_t d = 0; d + 2 < g->rank; ++d)
    batch *= tj_kir_ival_eval(g->dims[d], scalars);
  double best = wave_cost(p, 0, batch, m, n, dual);
  for (int32_t v = 1; v < TJ_CUDA_GEMM_CANDIDATES; ++v) {
    if (v == TJ_CUDA_GEMM_CUBLASLT ||
        kVariants[v].gemm_kernel != TJ_NVPTX_GEMM_WGMMA ||
        (kVariants[v].gemm_tma && !tma) ||
        (dual && kVariants[v].gemm_tile_n < 128))
      continue;
    double cost = wave_cost(p, v, batch, m, n, dual);
    if (cost < best) best = cost;
  }
  return wave_cost(p, c, batch, m, n, dual) <= kWaveSlack * best;
}

// One kernel compiled on a thread of its own (precompile_candidates).
typedef struct precompile_t {
  tj_cuda_program_t* p;
  const tj_kir_t* kernel;
  tj_nvptx_options_t options;
  tj_nvptx_target_t* target;  // the thread's own
  tj_cuda_kir_kernel_t** slot;
  tj_cuda_kir_kernel_t* out;
  tj_status_t status;
  pthread_t thread;
  bool started;
} precompile_t;

static void* precompile_main(void* arg) {
  precompile_t* w = arg;
  w->status = tj_cuda_kir_compile_cached(w->p->device, w->target, w->kernel,
                                         &w->options, w->p->context,
                                         w->p->cache_dir, &w->out);
  return NULL;
}

// The candidates of kernel |ki| that tuning would time for |scalars| and
// that are not compiled yet, into |w| (returns the count); with
// |skip_tried|, not those a background job has compiled or tried to
// (bg_tried). Reads the program's kernel slots: under its mutex.
static int32_t collect_precompiles(tj_cuda_program_t* p, uint32_t ki,
                                   const int64_t* scalars, bool skip_tried,
                                   int32_t only, precompile_t* w,
                                   uint32_t* out_mask) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  int32_t n = 0;
  *out_mask = 0;
  tj_nvptx_options_t approx = tj_cuda_program_math_options(p);
  for (int32_t c = 1; c < TJ_CUDA_GEMM_CANDIDATES; ++c) {
    if (skip_tried && (t->bg_tried & (1u << c))) continue;
    if (only >= 0 && c != only) continue;
    if (!timed_candidate(p, ki, c, scalars)) continue;
    int32_t before = n;
    int32_t j = split_index(c);
    if (j >= 0) {
      tj_cuda_gemm_split_t* sp = &t->split[j];
      if (!sp->part_fn) {
        w[n] = (precompile_t){
            .kernel = sp->part, .options = approx, .slot = &sp->part_fn};
        w[n++].p = p;
      }
      if (!sp->reduce_fn) {
        w[n] = (precompile_t){
            .kernel = sp->reduce, .options = approx, .slot = &sp->reduce_fn};
        w[n++].p = p;
      }
    } else if (c == TJ_CUDA_GEMM_CUBLASLT) {
      if (t->lt_ok && !p->gemm.lt_unavailable && !t->epi_fn) {
        w[n] = (precompile_t){
            .kernel = t->epi, .options = approx, .slot = &t->epi_fn};
        w[n++].p = p;
      }
    } else if (!t->variant[c]) {
      w[n] = (precompile_t){.kernel = p->kernels[ki].low->kernel,
                            .options = variant_options(p, c),
                            .slot = &t->variant[c]};
      w[n++].p = p;
    }
    if (n > before) *out_mask |= 1u << c;
  }
  return n;
}

// Compiles |w|, each on a thread of its own: each costs LLVM and ptxas
// (~0.2 s), they are independent, and the first tuning of a bucket then
// waits for the slowest instead of their sum. Each thread has its own
// NVPTX TargetMachine (LLVM's are not to be shared across threads); the
// driver calls push the context themselves. Writes nothing shared.
static void compile_precompiles(tj_cuda_program_t* p, precompile_t* w,
                                int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    tj_status_t s = tj_nvptx_target_create(p->al, p->arch, &w[i].target);
    if (!s)
      s = tj_nvptx_target_set_libdevice(
          w[i].target, tj_setting(p->context, TJ_SETTING_LIBDEVICE));
    if (!s && pthread_create(&w[i].thread, NULL, precompile_main, &w[i]) == 0)
      w[i].started = true;
    tj_status_free(s);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (w[i].started) pthread_join(w[i].thread, NULL);
    tj_nvptx_target_destroy(w[i].target);
    w[i].target = NULL;
  }
}

// Puts what |w| compiled into the program's slots (under its mutex). A
// failure is left for ensure_candidate to meet again, and report, when
// the candidate is timed; a slot a run has filled meanwhile keeps its own.
static void install_precompiles(tj_cuda_program_t* p, precompile_t* w,
                                int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (!w[i].started) continue;
    if (!w[i].status && !*w[i].slot) {
      *w[i].slot = w[i].out;
      tj_cuda_program_count_kernel(p, w[i].out);
    } else if (!w[i].status) {
      tj_cuda_kir_destroy(w[i].out);
    }
    tj_status_free(w[i].status);
    w[i].status = NULL;
  }
}

// Compiles the candidates of kernel |ki| that tuning is about to time and
// that are not compiled yet (on the run's thread, in parallel).
static void precompile_candidates(tj_cuda_program_t* p, uint32_t ki,
                                  const int64_t* scalars) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  t->precompiled = true;
  precompile_t w[TJ_CUDA_GEMM_CANDIDATES + TJ_CUDA_GEMM_SPLITS];
  memset(w, 0, sizeof(w));
  uint32_t mask;
  int32_t n = collect_precompiles(p, ki, scalars, false, -1, w, &mask);
  compile_precompiles(p, w, n);
  install_precompiles(p, w, n);
}

// The autotuner's problem for kernel |t| at |bucket|; |names| (the
// candidates' names) must outlive it.
static tj_autotune_problem_t tune_problem(const tj_cuda_program_t* p,
                                          const tj_cuda_gemm_tune_t* t,
                                          int64_t bucket, const char** names) {
  for (int i = 0; i < TJ_CUDA_GEMM_CANDIDATES; ++i)
    names[i] = kCandidateNames[i];
  return (tj_autotune_problem_t){t->text, p->gemm.device_desc, bucket,
                                 TJ_CUDA_GEMM_CANDIDATES, names};
}

//===--- background compiles (TJ_AUTOTUNE_BACKGROUND) ---===//

// On CUDA the cold cost of tuning is compiling the candidates (LLVM and
// ptxas, ~0.2 s each, 0.5-2.8 s for a bucket), not timing them (a few
// ms). So the job compiles, on the context's worker, and the first run of
// the bucket after it times, synchronously, on the executable's stream
// and that run's own operands (what the run's launches would write, as in
// ON): no second stream and no copy of the operands, and the times are
// those of the real launches. Until the job ends, runs of the bucket serve
// candidate 0, what autotune off runs.
typedef struct compile_job_t {
  tj_background_job_t base;
  tj_cuda_program_t* p;
  uint32_t ki;
  uint32_t mask;  // the candidates it compiles (bg_tried)
  int64_t bucket;
  int32_t n;
  precompile_t w[TJ_CUDA_GEMM_CANDIDATES + TJ_CUDA_GEMM_SPLITS];
} compile_job_t;

static void compile_job_free(compile_job_t* j) {
  tj_free(j->p->al, j, sizeof(*j));
}

static void compile_job_run(tj_background_job_t* base) {
  compile_job_t* j = (compile_job_t*)base;
  tj_cuda_program_t* p = j->p;
  double start = tj_now_ms();
  compile_precompiles(p, j->w, j->n);
  int32_t failed = 0;
  for (int32_t i = 0; i < j->n; ++i) {
    failed += !j->w[i].started || j->w[i].status != NULL;
  }
  pthread_mutex_lock(&p->mutex);
  install_precompiles(p, j->w, j->n);
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[j->ki];
  t->bg_tried |= j->mask;
  t->bg_queued = false;
  t->bg_done[t->bg_next_done++ % TJ_ARRAY_SIZE(t->bg_done)] = j->bucket;
  pthread_mutex_unlock(&p->mutex);
  if (p->gemm.log_autotune) {
    tj_context_diagnostic(
        p->context, failed ? TJ_SEVERITY_WARNING : TJ_SEVERITY_REMARK,
        "autotune: %s M bucket %lld: background job finished: %d candidate "
        "kernels compiled in %.1f ms%s; the next run of the bucket times "
        "them",
        p->kernels[j->ki].info.entry, (long long)j->bucket,
        (int)(j->n - failed), tj_now_ms() - start,
        failed ? " (some failed: timing skips them, logged)" : "");
  }
  compile_job_free(j);
}

static void compile_job_discard(tj_background_job_t* base) {
  compile_job_t* j = (compile_job_t*)base;
  tj_cuda_program_t* p = j->p;
  pthread_mutex_lock(&p->mutex);
  p->gemm.tunes[j->ki].bg_queued = false;
  pthread_mutex_unlock(&p->mutex);
  compile_job_free(j);
}

// Whether this run of an undecided |bucket| of kernel |ki| serves
// candidate 0 while the candidates compile in the background (queuing
// the job when none is queued); false when the bucket's job has ended
// (time now), or no job can be queued (then this run tunes synchronously,
// as under ON). Every bucket's first run serves candidate 0, even when
// its job finds nothing left to compile. Under the program's mutex.
static bool compiling_in_background(tj_cuda_program_t* p, uint32_t ki,
                                    int64_t bucket, const int64_t* scalars) {
  tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
  if (t->bg_queued) return true;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(t->bg_done); ++i) {
    if (t->bg_done[i] == bucket) {
      t->precompiled = true;  // what is left compiles as under ON
      return false;
    }
  }
  // A decision already cached (an earlier process, an equal kernel of
  // another executable) needs only its winner compiled, not every
  // candidate; the run after the job then takes it from the cache.
  const char* names[TJ_CUDA_GEMM_CANDIDATES];
  tj_autotune_problem_t prob = tune_problem(p, t, bucket, names);
  tj_autotune_result_t cached;
  bool hit = false;
  tj_status_t s =
      tj_autotune_lookup(p->context, p->cache_dir, &prob, &cached, &hit);
  if (s) {  // an unreadable cache only costs the full job
    tj_status_free(s);
    hit = false;
  }
  compile_job_t* j = tj_calloc(p->al, 1, sizeof(*j));
  if (!j) return false;
  j->n = collect_precompiles(p, ki, scalars, true, hit ? cached.best : -1, j->w,
                             &j->mask);
  j->base.run = compile_job_run;
  j->base.discard = compile_job_discard;
  j->base.owner = p;
  j->p = p;
  j->ki = ki;
  j->bucket = bucket;
  t->bg_queued = true;
  if (!tj_context_background_submit(p->context, &j->base)) {
    t->bg_queued = false;
    compile_job_free(j);
    return false;
  }
  if (p->gemm.log_autotune) {
    tj_context_diagnostic(
        p->context, TJ_SEVERITY_REMARK,
        "autotune: %s M bucket %lld: %d candidate kernels queued to compile "
        "in the background%s; %s runs meanwhile",
        p->kernels[ki].info.entry, (long long)bucket, (int)j->n,
        hit ? " (the cached decision's)" : "", kCandidateNames[0]);
  }
  return true;
}

static tj_status_t measure(void* context, int32_t c, int32_t repeats,
                           double* out_ms) {
  measure_ctx_t* m = context;
  tj_cuda_program_t* p = m->p;
  const tj_cuda_symbols_t* cu = &p->device->cu;
  if (!timed_candidate(p, m->ki, c, m->scalars))
    return tj_unsupported("pruned by the cost model");
  if (!p->gemm.tunes[m->ki].precompiled)
    precompile_candidates(p, m->ki, m->scalars);
  tj_status_t s = ensure_candidate(p, m->ki, c);
  if (!s) s = candidate_args(p, m->ki, c, m->scalars);
  tj_status_code_t code = tj_status_code(s);
  if (s && code != TJ_STATUS_OUT_OF_MEMORY && code != TJ_STATUS_UNSUPPORTED) {
    // A candidate that does not build (ptxas refusing a schedule, say)
    // is skipped, not fatal: the others still serve.
    tj_context_diagnostic(
        p->context, TJ_SEVERITY_WARNING, "autotune: %s: %s skipped: %s",
        p->kernels[m->ki].info.entry, kCandidateNames[c], tj_status_message(s));
    tj_status_free(s);
    return tj_unsupported("candidate failed");
  }
  TJ_RETURN_IF_ERROR(s);
  if (!p->gemm.ev_start) {
    TJ_CU_RETURN_IF_ERROR(cu, cuEventCreate, (&p->gemm.ev_start, 0));
    TJ_CU_RETURN_IF_ERROR(cu, cuEventCreate, (&p->gemm.ev_stop, 0));
  }
  TJ_CU_RETURN_IF_ERROR(cu, cuEventRecord, (p->gemm.ev_start, p->stream));
  for (int32_t i = 0; i < repeats; ++i) {
    TJ_RETURN_IF_ERROR(tj_cuda_gemm_launch(p, m->ki, c));
  }
  TJ_CU_RETURN_IF_ERROR(cu, cuEventRecord, (p->gemm.ev_stop, p->stream));
  TJ_CU_RETURN_IF_ERROR(cu, cuEventSynchronize, (p->gemm.ev_stop));
  float ms = 0;
  TJ_CU_RETURN_IF_ERROR(cu, cuEventElapsedTime,
                        (&ms, p->gemm.ev_start, p->gemm.ev_stop));
  *out_ms = (double)ms / repeats;
  return NULL;
}

// Picks (tuning on the first run of a bucket) and prepares the candidate
// of every tensor-core GEMM for this run. Runs after kernel_args. The
// tuning launches write only the GEMM's outputs and its temporary, which
// this run's own launches write again afterwards.
tj_status_t tj_cuda_gemm_choose(tj_cuda_program_t* p) {
  return tj_cuda_gemm_choose_from(p, 0);
}

tj_status_t tj_cuda_gemm_choose_from(tj_cuda_program_t* p, uint32_t first) {
  if (!p->gemm.tunes) return NULL;
  for (uint32_t ki = first; ki < p->num_kernels; ++ki) {
    tj_cuda_gemm_tune_t* t = &p->gemm.tunes[ki];
    t->current = 0;
    if (!t->tunable || p->run.launches[ki].empty) continue;
    const tj_kir_t* g = p->kernels[ki].low->kernel;
    const int64_t* scalars = p->run.scalars + (size_t)ki * TJ_KIR_MAX_PARAMS;
    t->m = tj_kir_ival_eval(g->dims[g->rank - 2], scalars);
    int64_t bucket = tj_pow2_bucket(t->m);
    int32_t c = -1;
    for (uint32_t i = 0; i < t->num_choices && c < 0; ++i) {
      if (t->choices[i].bucket == bucket) c = t->choices[i].candidate;
    }
    if (c < 0) {
      c = 0;
      bool compiling = p->gemm.forced < 0 && p->gemm.background &&
                       compiling_in_background(p, ki, bucket, scalars);
      if (p->gemm.forced >= 0) {
        c = p->gemm.forced;
      } else if (compiling) {
        // Candidate 0 serves; no decision is recorded, so the first run
        // after the job times.
      } else if (p->gemm.autotune) {
        const char* names[TJ_CUDA_GEMM_CANDIDATES];
        tj_autotune_problem_t prob = tune_problem(p, t, bucket, names);
        measure_ctx_t mc = {p, ki, scalars};
        tj_autotune_result_t r;
        TJ_RETURN_IF_ERROR(
            tj_autotune(p->context, p->cache_dir, &prob, measure, &mc, &r));
        c = r.best;
        ++p->stats.tunings;
        p->stats.tuning_cache_hits += r.from_cache;
        p->stats.tuning_ms += r.tune_ms;
        char line[1024] = "";
        int n = 0;
        for (int i = 0;
             i < prob.num_candidates && n >= 0 && (size_t)n < sizeof(line);
             ++i) {
          n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s %.4f",
                        i ? ", " : "", kCandidateNames[i], r.ms[i]);
        }
        if (p->gemm.log_autotune)
          tj_context_diagnostic(p->context, TJ_SEVERITY_REMARK,
                                "autotune: %s M bucket %lld: %s (%s%s ms)",
                                p->kernels[ki].info.entry, (long long)bucket,
                                kCandidateNames[c],
                                r.from_cache ? "cached; " : "", line);
        if (p->gemm.background && p->gemm.log_autotune)
          tj_context_diagnostic(p->context, TJ_SEVERITY_REMARK,
                                "autotune: %s M bucket %lld: swapped in: %s "
                                "from this run on",
                                p->kernels[ki].info.entry, (long long)bucket,
                                kCandidateNames[c]);
      }
      if (!compiling) {
        if (t->num_choices == TJ_CUDA_GEMM_MAX_CHOICES)
          t->num_choices = 0;  // forget all
        t->choices[t->num_choices++] = (tj_cuda_gemm_choice_t){bucket, c};
      }
    }
    // A candidate that cannot serve this run (alignment, a missing
    // library) falls back to the module's kernel.
    tj_status_t s = ensure_candidate(p, ki, c);
    if (!s) s = candidate_args(p, ki, c, scalars);
    if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
      tj_status_free(s);
      c = 0;
      s = candidate_args(p, ki, 0, scalars);
    }
    TJ_RETURN_IF_ERROR(s);
    t->current = c;
    snprintf(p->gemm.last_choice, sizeof(p->gemm.last_choice), "%s",
             kCandidateNames[c]);
  }
  return NULL;
}

//===--- offline programs ---===//

// Emits split-K candidate |c|'s two kernels into |module|, renamed
// <entry>_c<c> (the partial GEMM) and <entry>_c<c>r (the reduction).
static tj_status_t emit_split(tj_cuda_program_t* p, tj_nvptx_module_t* module,
                              const tj_cuda_gemm_split_t* sp, int32_t c) {
  const tj_kir_t* kernels[2] = {sp->part, sp->reduce};
  for (int i = 0; i < 2; ++i) {
    tj_nvptx_options_t o = tj_cuda_program_math_options(p);
    tj_nvptx_kernel_t info;
    tj_status_t status =
        tj_nvptx_module_add_kernel(module, kernels[i], &o, &info);
    if (status)
      return tj_status_annotate(status, "GEMM candidate %d (%s)", (int)c,
                                kCandidateNames[c]);
    char name[sizeof(info.entry) + 16];
    snprintf(name, sizeof(name), "%s_c%d%s", info.entry, (int)c, i ? "r" : "");
    tj_nvptx_module_rename_kernel(module, info.entry, name);
    ++p->mod.num_variant_kernels;
  }
  return NULL;
}

// Emits into |module| every kernel the candidates of each tensor-core GEMM
// compile apart on a GPU (the other main loops and tiles of kVariants, the
// cuBLASLt candidate's epilogue), each function renamed
// <entry>_c<candidate>. The candidates a GPU of |p->arch| skips (wgmma
// before sm_90a) are left out the same way: their emission says
// UNSUPPORTED.
tj_status_t tj_cuda_gemm_emit_candidates(tj_cuda_program_t* p,
                                         tj_nvptx_module_t* module) {
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < p->num_kernels && !status; ++i) {
    const tj_cuda_gemm_tune_t* t = &p->gemm.tunes[i];
    if (!t->tunable) continue;
    for (int32_t c = 1; c < TJ_CUDA_GEMM_CANDIDATES && !status; ++c) {
      tj_nvptx_options_t o = tj_cuda_program_math_options(p);
      const tj_kir_t* k = p->kernels[i].low->kernel;
      int32_t j = split_index(c);
      if (j >= 0) {
        if (t->split[j].part) status = emit_split(p, module, &t->split[j], c);
        continue;
      }
      if (c != TJ_CUDA_GEMM_CUBLASLT &&
          exact_f32(p, i) != (c == TJ_CUDA_GEMM_F32_WIDE))
        continue;
      if (c == TJ_CUDA_GEMM_CUBLASLT) {
        if (!t->lt_ok) continue;
        k = t->epi;
      } else {
        o = variant_options(p, c);
      }
      tj_nvptx_kernel_t info;
      status = tj_nvptx_module_add_kernel(module, k, &o, &info);
      if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
        tj_status_free(status);
        status = NULL;
        continue;
      }
      if (status) {
        status = tj_status_annotate(status, "GEMM candidate %d (%s)", (int)c,
                                    kCandidateNames[c]);
        break;
      }
      char name[sizeof(info.entry) + 16];
      snprintf(name, sizeof(name), "%s_c%d", info.entry, (int)c);
      tj_nvptx_module_rename_kernel(module, info.entry, name);
      ++p->mod.num_variant_kernels;
    }
  }
  return status;
}

//===--- release ---===//

void tj_cuda_gemm_release(tj_cuda_program_t* p) {
  // A compile job of ours: dropped when queued, waited for when running
  // (it writes our kernel slots), before anything goes.
  if (p->gemm.background && p->mutex_ready)
    tj_context_background_cancel(p->context, p);
  tj_cuda_device_t* d = p->device;
  if (p->gemm.tunes) {
    for (uint32_t i = 0; i < p->num_kernels; ++i) {
      tj_cuda_gemm_tune_t* t = &p->gemm.tunes[i];
      for (int v = 1; v < TJ_CUDA_GEMM_CANDIDATES; ++v)
        tj_cuda_kir_destroy(t->variant[v]);
      tj_cuda_kir_destroy(t->epi_fn);
      tj_kir_destroy(t->epi);
      for (int j = 0; j < TJ_CUDA_GEMM_SPLITS; ++j) {
        tj_cuda_kir_destroy(t->split[j].part_fn);
        tj_cuda_kir_destroy(t->split[j].reduce_fn);
        tj_kir_destroy(t->split[j].part);
        tj_kir_destroy(t->split[j].reduce);
      }
      for (int j = 0; j < TJ_CUDA_GEMM_MAX_PLANS; ++j)
        tj_cublaslt_gemm_destroy(t->plans[j]);
      tj_free_string(p->al, t->text);
    }
    tj_free(p->al, p->gemm.tunes,
            sizeof(tj_cuda_gemm_tune_t) * (p->num_kernels + 1));
  }
  if (d && (p->gemm.ev_start || p->gemm.ev_stop) &&
      tj_cuda_device_try_enter(d)) {
    if (p->gemm.ev_start) (void)d->cu.cuEventDestroy(p->gemm.ev_start);
    if (p->gemm.ev_stop) (void)d->cu.cuEventDestroy(p->gemm.ev_stop);
    tj_cuda_device_leave(d);
  }
  if (d && p->gemm.lt_workspace)
    (void)tj_cuda_allocator_free(d->allocator, p->gemm.lt_workspace, p->stream);
  tj_cublaslt_close(p->gemm.lt);
}
