// LLVM's NVPTX back end, in process: target machines for the GPUs
// libtensorjit supports, NVPTX modules of kernel IR kernels, and module ->
// PTX text. No nvcc, no NVRTC: the PTX is loaded by the CUDA driver
// (backends/cuda/cuda_runtime.h), which compiles it for the exact GPU.
//
// This header names no LLVM type: the CUDA backend works through it (and
// the opaque tj_nvptx_module_t) without seeing LLVM's headers. The emitters
// and their tests use the LLVM-level functions of jit/emit_nvptx.h.
//
// Only known (CPU, PTX version) pairs are offered. NVPTX reports an
// instruction it cannot select with report_fatal_error, which would abort
// the host process (LLVM-NOTES.md): every kernel template is compiled for
// every tj_nvptx_arch_t and checked with ptxas in CI (tests/cuda/), so that
// such a failure cannot reach users.

#ifndef TJ_JIT_NVPTX_H_
#define TJ_JIT_NVPTX_H_

#include "kir/kernel_ir.h"
#include "lib/base.h"

typedef enum tj_nvptx_arch_e {
  // Ampere (A100, RTX 30xx) and anything newer, through the driver's PTX
  // JIT: mma.sync, ldmatrix, cp.async. PTX ISA 7.8.
  TJ_NVPTX_SM_80 = 0,
  // Hopper (H100, H200) with its arch-specific features (wgmma, TMA,
  // setmaxnreg). PTX ISA 8.0. PTX for sm_90a runs on sm_90 parts only.
  TJ_NVPTX_SM_90A = 1,
  TJ_NVPTX_ARCH_COUNT_ = 2,
} tj_nvptx_arch_t;

// "sm_80", "sm_90a". Static storage.
const char* tj_nvptx_arch_name(tj_nvptx_arch_t arch);
// The arch called |name| ("sm_80", "sm_90a"); false if unknown.
bool tj_nvptx_arch_from_name(const char* name, tj_nvptx_arch_t* out_arch);

// The version of the LLVM that makes the PTX (cache keys depend on it).
void tj_nvptx_llvm_version(unsigned* major, unsigned* minor, unsigned* patch);

// A target machine for one arch. Thread-compatible: use one per thread (or
// guard it); creating one costs a fraction of a millisecond.
typedef struct tj_nvptx_target_t tj_nvptx_target_t;

// A target machine for |arch|, its bookkeeping from |allocator|. On success
// |*out_target| is owned by the caller (tj_nvptx_target_destroy); on failure
// it is NULL. Initializes LLVM's NVPTX target once per process.
tj_status_t tj_nvptx_target_create(tj_allocator_t allocator,
                                   tj_nvptx_arch_t arch,
                                   tj_nvptx_target_t** out_target);
// NULL is a no-op.
void tj_nvptx_target_destroy(tj_nvptx_target_t* target);
tj_nvptx_arch_t tj_nvptx_target_arch(const tj_nvptx_target_t* target);

// The libdevice file (libdevice.10.bc; lib/env.h's TJ_SETTING_LIBDEVICE)
// that tj_nvptx_compile links into a module whose kernels call its
// functions (tj_nvptx_options_t.libdevice); NULL or "" for none. The path
// is copied; it is read at each such compile, so an unreadable file is
// that compile's error, naming it.
tj_status_t tj_nvptx_target_set_libdevice(tj_nvptx_target_t* target,
                                          const char* path);

//===--- kernels ---===//

// The direct window kernel (cudabw, issue 15; jit/emit_nvptx_window.c)
// unrolls every tap of a window: depthwise convs and pools of at most this
// many taps stay whole on CUDA (lib/window.h's tj_window_direct), larger
// ones decompose.
#define TJ_NVPTX_WINDOW_MAX_TAPS 64

// How a lowered kernel is launched; filled by tj_nvptx_emit_kernel.
typedef struct tj_nvptx_kernel_t {
  char entry[224];  // the PTX entry name: "tj_kernel_" + <= 200 bytes
  tj_kir_kind_t kind;
  uint32_t num_buffers, num_params;
  int32_t vector_lanes;       // elements per thread step on the vector path
  int32_t threads;            // threads per block
  int32_t shared_bytes;       // dynamic shared memory per block
  int32_t min_blocks_per_sm;  // .minnctapersm, 0 for none
  // ROW_REDUCE: vectors of the row each thread holds in registers on the
  // resident path (the launch sizes blocks so a row needs no more), 0 when
  // the kernel has no such path.
  int32_t row_slots;
  // ROW_REDUCE with a SCAN phase (ops3, issue 15): a thread per row, the
  // rows spread over a 1-D grid of |threads|-thread blocks.
  bool scan_rows;
  // ROW_REDUCE, the staged path (rows32k, issue 14): a block per row that
  // copies the row of each of |row_stage_buffers| input buffers into its
  // dynamic shared memory once (16-byte cp.async) and runs every phase
  // from there. |row_stage_bytes| is the bytes an element of the row
  // takes there (the buffers' element sizes summed; 0: no staged path);
  // a row of L elements needs L * row_stage_bytes + 16 * row_stage_buffers
  // bytes, which must be at most |shared_bytes|. The kernel takes the
  // path only where the launch gives it that memory and one row a block
  // (tj_nvptx_row_staged).
  int32_t row_stage_bytes;
  int32_t row_stage_buffers;
  // The threads of a staged row's block (tj_nvptx_options_t.
  // row_stage_threads; the kernel's .maxntid): 256, 512 or 1024.
  int32_t row_stage_threads;
  // POINTWISE: vectors a thread takes per loop step (1 on the scalar path;
  // the vector path's grid is that many times narrower).
  int32_t items_per_thread;
  // GEMM.
  bool tensor_cores;  // mma.sync or wgmma path (f16/bf16 operands)
  bool wgmma;         // the sm_90a wgmma main loop
  bool persistent;    // grid of at most one block per SM, looping
  // The TMA schedule (tj_nvptx_options_t.gemm_tma): 384 threads, and two
  // more kernel parameters after the scalars, the 128-byte CUtensorMaps of
  // A and B (by value; tj_cuda_gemm_tensor_maps encodes them).
  bool tma;
  // tj_nvptx_options_t.gemm_tma_store on a TMA schedule: two parameters
  // more after those, the CUtensorMap of the output and an i32 that is
  // nonzero where it was encoded (the kernel takes today's epilogue
  // where it is 0: an output TMA cannot address).
  bool tma_store;
  // swiglu (issue 14): a dual GEMM (tj_kir_gemm_is_dual); with |tma| its
  // B2's CUtensorMap follows B's (the output's, with |tma_store|, after
  // it). tile_n is C's, the wgmma's half.
  bool dual;
  // tj_nvptx_options_t.gemm_cluster: launched in clusters of this many
  // blocks along x (cuLaunchKernelEx), the grid a multiple of it; 0: none.
  int32_t cluster;
  int32_t tile_m, tile_n, tile_k, stages;
  int32_t group_m;  // blocks of one M group share B columns in L2
  // The weight-only GEMM (emit_nvptx_wqmma.c): K may be split across up
  // to this many blocks a tile (grid y), where M fits one row tile; 0 or
  // 1: never.
  int32_t k_splits;
  // ... exactly k_splits where allowed (tj_nvptx_options_t.wqgemm_splits).
  bool k_splits_fixed;
  // ... and reads its B (the quantized weight) in the tile layout
  // (tj_nvptx_wq_tile), not as the [K, N] bytes of the graph's constant.
  bool wq_tiled;
  // ... with the S splits of a tile side by side along x (grid x = tiles
  // x S) in a cluster of S blocks (tj_nvptx_launch_t.cluster), joined
  // through distributed shared memory (tj_nvptx_options_t.wqgemm_cluster),
  // not along y through a global workspace.
  bool wq_cluster;
  // ... and may start before the kernel ahead of it in the stream ends
  // (tj_nvptx_options_t.wqgemm_programmatic; launched with programmatic
  // stream serialization): it lets its dependents start early
  // (griddepcontrol.launch_dependents) and loads only its constant weight
  // before griddepcontrol.wait, which waits for the kernel ahead of it.
  bool wq_programmatic;
  // CONV on wgmma (TF32): the kernel reads its weight prepared once
  // (tj_nvptx_conv_prepare_weight: rounded to TF32, rows padded, maybe
  // tap-major), not as the graph's [O, C, taps] f32; only a constant
  // weight may be read so (backends/cuda/cuda_program.c emits the kernel
  // again with conv_plain_weight for any other).
  bool conv_prepared;
} tj_nvptx_kernel_t;

// The tensor-core main loop of a GEMM (tj_nvptx_options_t.gemm_kernel).
typedef enum tj_nvptx_gemm_kernel_t {
  // wgmma on sm_90a, mma.sync elsewhere.
  TJ_NVPTX_GEMM_AUTO = 0,
  TJ_NVPTX_GEMM_MMA_SYNC = 1,
  // sm_90a only: UNSUPPORTED on other archs.
  TJ_NVPTX_GEMM_WGMMA = 2,
} tj_nvptx_gemm_kernel_t;

// The f16/bf16 attention forward and attention_lse kernel
// (tj_nvptx_options_t.attention_kernel; TJ_NVPTX_ATTENTION), and since
// fa3bwd attention_dq's and attention_dkv's: on sm_90a all but MMA_SYNC
// put them on wgmma (emit_nvptx_attention_bwd_wgmma.c).
typedef enum tj_nvptx_attention_kernel_t {
  // WGMMA where it applies (sm_90a, no mask operand), else mma.sync.
  TJ_NVPTX_ATTENTION_AUTO = 0,
  // mma.sync (emit_nvptx_attention.c) everywhere.
  TJ_NVPTX_ATTENTION_MMA_SYNC = 1,
  // wgmma (emit_nvptx_attention_wgmma.c) on sm_90a without a mask
  // operand; mma.sync where it does not apply.
  TJ_NVPTX_ATTENTION_WGMMA = 2,
  // The same with 128-key tiles at head dim 128 too, one block an SM
  // there (the other has two): for comparing the two.
  TJ_NVPTX_ATTENTION_WGMMA_WIDE = 3,
  // WGMMA, with the backward's last wgmmas of a step (dV and dK; dQ)
  // waited for in the step, not under the next one's first products
  // (fa3bwd, for A/B runs).
  TJ_NVPTX_ATTENTION_WGMMA_STEPWISE = 4,
  // WGMMA, with the second warpgroup of dkv too (dq's by default)
  // issuing a step's first products after the first's (a named barrier a
  // step), so that their exponentials run one after the other under the
  // other's products (fa3bwd2, for A/B runs; stepwise: in neither).
  TJ_NVPTX_ATTENTION_WGMMA_PINGPONG = 5,
} tj_nvptx_attention_kernel_t;

// The TF32 conv's main loop (tj_nvptx_options_t.conv_kernel;
// TJ_NVPTX_CONV). Only f32 convs with gemm_tf32 take it; exact f32 convs
// stay on CUDA cores.
typedef enum tj_nvptx_conv_kernel_t {
  // wgmma on sm_90a (WGMMA_64's tiles; operands rounded to TF32 to
  // nearest, as mma.sync's cvt.rna: half a TF32 ulp added in shared
  // memory, the tensor cores dropping the low bits), mma.sync elsewhere.
  TJ_NVPTX_CONV_AUTO = 0,
  // mma.sync m16n8k8 .tf32 (emit_nvptx_conv.c) everywhere.
  TJ_NVPTX_CONV_MMA_SYNC = 1,
  // wgmma m64nNk8 .tf32 on sm_90a (mma.sync elsewhere): 128 output
  // channels by 128 pixels a block, or by 64 (WGMMA_64: twice the blocks
  // and two of them an SM, for grids that 128-pixel tiles leave short).
  TJ_NVPTX_CONV_WGMMA = 2,
  TJ_NVPTX_CONV_WGMMA_64 = 3,
} tj_nvptx_conv_kernel_t;

// Choices the autotuner may vary; zeros mean the defaults.
typedef struct tj_nvptx_options_t {
  // mma.sync k-tile: 32 (default) or 64. wgmma k-tiles are 64 (one
  // 128-byte swizzle row of f16/bf16): 0 or 64. The f32 CUDA-core loop:
  // 16, else 8.
  int32_t gemm_tile_k;
  // cp.async ring depth: 2..8 (default 4); wgmma 3..8 (default 4).
  int32_t gemm_stages;
  // exp, tanh, sigmoid and erf of f32/f16/bf16 values from the GPU's
  // approximate instructions (ex2.approx, rcp.approx) instead of the
  // portable polynomials: ~4x fewer instructions, a few ulp in f32
  // (jit/nvptx_math.h states the bounds).
  bool approx_math;
  // f64 tanh, erf, erfc, sin, cos, asin, acos, atan and pow (the functions
  // x86 takes from the C library) call NVIDIA's libdevice (__nv_tanh, ...),
  // which tj_nvptx_compile links from the target's file
  // (tj_nvptx_target_set_libdevice); without it such a kernel is
  // UNSUPPORTED (a graph break).
  bool libdevice;
  // The weight-only quantized GEMM runs the tensor-core kernel
  // (emit_nvptx_wqmma.c) or the CUDA-core one (emit_nvptx_wqgemm.c). With
  // wqgemm_tiled (the default of backends/cuda/cuda_program.c) the weight
  // is in the tile layout (tj_nvptx_wq_tile) wherever the tensor cores
  // take it: every M for f16/bf16 A, a constant M of 4 (int4) or 8 (int8)
  // or more for f32 A (at M = 1 its CUDA-core kernel measured up to 1.6x
  // faster on the H200, bench/RESULTS.md). Without it, tensor cores on the [K,
  // N] layout where M is a constant of 8 or more. TJ_CUDA_WQGEMM=tiles
  // (wqgemm_tiled and wqgemm_mma) asks for the tile layout's kernel at
  // every M, =mma (wqgemm_mma) the [K, N] layout's tensor-core kernel at
  // every M, =nosplit (wqgemm_no_split) the same without its split of K
  // across blocks, =fma (wqgemm_fma) the CUDA-core one for every M.
  bool wqgemm_fma;
  bool wqgemm_mma;
  bool wqgemm_no_split;
  // TJ_CUDA_WQGEMM=splitS (S 1, 2, 4 or 8): the tile layout's kernel with
  // K split in exactly S blocks a tile where the split applies (1: no
  // join code); 0: the grid's own choice.
  int32_t wqgemm_splits;
  // TJ_CUDA_WQGEMM=blocks256: the tile layout's kernel for f16/bf16 A in
  // blocks of 256 threads, two an SM, as before issue 17's wqdecode (the
  // default since: 128 threads, four an SM).
  bool wqgemm_blocks256;
  // sm_90a, the tile layout's kernel: the K splits of a column tile run
  // as one cluster of S blocks, and block 0 of the cluster adds the
  // others' staged tiles through distributed shared memory (ld.shared::
  // cluster, in split order: the same sums as the workspace join) between
  // two cluster barriers, instead of each block storing its tile to a
  // global workspace, a fence, an atomic count and the last block's loads
  // (TJ_CUDA_WQGEMM=cluster).
  bool wqgemm_cluster;
  // sm_90a, the tensor-core kernel: programmatic dependent launch
  // (tj_nvptx_kernel_t.wq_programmatic), so that in a chain of GEMMs (a
  // decoder's layers) each one's first weight loads and set-up overlap the
  // end of the kernel before it (TJ_CUDA_WQGEMM=pdl).
  bool wqgemm_programmatic;
  // The tile layout's kernel for f16/bf16 A: a warp's weight chunks copied
  // by cp.async into its own ring of shared memory, several chunks ahead
  // of its mmas, instead of one chunk ahead in registers
  // (TJ_CUDA_WQGEMM=ring; with cluster and pdl: any of them joined by +).
  bool wqgemm_ring;
  // The tensor-core kernel reads the quantized weight in the tile layout
  // (tj_nvptx_wq_tile): each lane's B fragments of a 16-row step one
  // 16-byte load (int4; two for int8). Only a caller that puts the
  // weight there may ask (backends/cuda/cuda_program.c uploads it so for
  // kernels whose tj_nvptx_kernel_t.wq_tiled says they read it).
  bool wqgemm_tiled;
  tj_nvptx_gemm_kernel_t gemm_kernel;
  // wgmma tile of C per block: tile_m 64 or 128 (one consumer warpgroup
  // of 128 threads per 64 rows), or 256 with gemm_tma (two consumer
  // warpgroups of 128 rows each, tile_n 64 or 128), tile_n 64, 128 or
  // 256; 0 means 128. The exact f32 CUDA-core loop: 128x128 (0, the
  // default) or tile_m 256 (tile_n 0 or 128): 256x128 tiles, each of its
  // 256 threads 8x16 outputs, one block an SM (emit_nvptx_gemm.c; bk 16
  // spills a few bytes there).
  int32_t gemm_tile_m, gemm_tile_n;
  // wgmma: wait for each k-tile's wgmmas before the next (wait_group 0),
  // which lets the ring run one stage further ahead; by default one
  // k-tile's wgmmas stay in flight (emit_nvptx_wgmma.c).
  bool gemm_wgmma_drain;
  // wgmma: a persistent grid (one block per SM looping over tiles) whose
  // next tile's first k-tiles load while the current tile's epilogue
  // runs.
  bool gemm_persistent;
  // wgmma, sm_90a, rank-2 GEMMs: operands loaded by TMA
  // (cp.async.bulk.tensor through tensor maps passed as kernel
  // parameters) by a producer warpgroup, into an mbarrier ring that two
  // consumer warpgroups drain (emit_nvptx_wgmma.c): both on each
  // 128-row tile (gemm_tile_m 128, cooperative) or each on every other
  // 64-row tile (gemm_tile_m 64, pingpong: one's epilogue overlaps the
  // other's wgmmas). With gemm_persistent, the producer loads the next
  // tile while the consumers run the epilogue.
  bool gemm_tma;
  // f32 GEMMs may run on TF32 tensor cores (tj_cuda_compile_options_t.
  // allow_tf32): on sm_90a, the TMA schedules (gemm_tma) of an f32 GEMM
  // are wgmma .tf32 kernels (emit_nvptx_wgmma.c); the others stay exact
  // f32 (CUDA cores). Without it, the TMA schedules of an f32 GEMM are
  // UNSUPPORTED.
  bool gemm_tf32;
  // The f32 CUDA-core loop copies A and B with 16-byte cp.async when both
  // are contiguous along k and n and 16-byte aligned (checked per block at
  // run time), else 4 bytes at a time; this keeps the 4-byte copies
  // always (benchmarks compare the two).
  bool gemm_f32_scalar_copies;
  // The f32 256x128 loop (gemm_tile_m 256) keeps A transposed in shared
  // memory, [k][m], copied 4 bytes at a time (cuBLAS's layout: 2 16-byte
  // loads of A's 8 rows a k, 8 registers of A live, against 8 loads of 4
  // k and 32 registers row-major). The tuner's exact f32 candidate 18
  // takes it (at bk 16, 3 stages: the fastest 256x128 form on the H200).
  bool gemm_f32_a_transposed;
  // gemm_tma with gemm_tile_m 128 (tile_n 64 or 128): the pingpong schedule
  // on 128-row tiles, each consumer warpgroup on every other tile with two
  // m64 wgmmas a k16 (128 accumulators a thread at tile_n 128), so that one
  // warpgroup's epilogue overlaps the other's main loop at the cooperative
  // tile's operand traffic. gemm_tile_m 64 with gemm_tma is pingpong
  // without it. f16/bf16 only (UNSUPPORTED for tf32).
  bool gemm_pingpong;
  // gemm_tma: the consumers run the epilogue on their accumulators in
  // registers, write the output tile to shared memory in its own dtype
  // and store it with TMA (cp.async.bulk.tensor), two named barriers a
  // tile, instead of staging f32 rows and storing from every thread.
  // Taken where the output is the epilogue's one store, contiguous along
  // n, f16, bf16 or f32, unbatched, and its tile fits beside the ring;
  // at run time where TMA can address it (a 16-byte aligned base and
  // row pitch), N is even and the epilogue's other buffers allow 2-wide
  // accesses; today's staged epilogue elsewhere.
  bool gemm_tma_store;
  // gemm_tma_store on a pingpong schedule: the epilogue's column pairs
  // one after another, as before issue 13's cap2048, instead of four in
  // lockstep (for measuring the lockstep; no tuner candidate sets it).
  bool gemm_epilogue_in_order;
  // gemm_tma, rank 2, f16/bf16, tile_n 128 or 256: blocks in clusters of
  // two on vertically adjacent tiles (the same columns), each loading half
  // of the B tile's 64-column panels with TMA multicast into both, so B
  // crosses L2 once for the pair (issue 13: cuBLAS's 2-block clusters
  // read 148 MB of DRAM at 4096^3 where the single blocks read 176-186).
  // Correct on the H200 but 0.34-0.64x as fast as the same schedules
  // without it (bench/RESULTS.md, hopper8 round 2), so in no tuner
  // candidate: its DRAM reads fell to 146 MB, its tensor pipe to 66%.
  bool gemm_cluster;
  tj_nvptx_attention_kernel_t attention_kernel;
  tj_nvptx_conv_kernel_t conv_kernel;
  // The wgmma TF32 conv leaves its operands as they land in shared memory,
  // so that the tensor cores truncate them to TF32, instead of rounding
  // them to nearest: for measuring what rounding costs (TJ_NVPTX_CONV=
  // wgmma-trunc, wgmma64-trunc; 32% of resnet18's time at batch 32 on
  // the H200, bench/RESULTS.md).
  bool conv_truncate;
  // The wgmma TF32 conv reads its weight as the graph's [O, C, taps] f32
  // and rounds it in shared memory with the patches, instead of reading
  // it prepared (tj_nvptx_kernel_t.conv_prepared): for a weight that is
  // not a constant, and TJ_NVPTX_CONV=wgmma-plain / wgmma64-plain (for
  // measuring what the preparation brings).
  bool conv_plain_weight;
  // The direct window kernel's output rows a thread (1, 2 or 4; 0: its
  // own choice, window_shape in emit_nvptx_window.c): TJ_NVPTX_CONV=
  // window-rows1 / -rows2 / -rows4, for A/B comparisons.
  int32_t window_rows;
  // ROW_REDUCE kernels without the staged path (tj_nvptx_kernel_t.
  // row_stage_bytes 0): rows too long for registers stream from memory,
  // read once a phase (TJ_NVPTX_ROWS=streaming; rows32k, issue 14), for
  // A/B comparisons and as the way back.
  bool row_stage_off;
  // The staged path's threads a block (a row): 0 chooses by the length of
  // a constant row (row_stage_block in emit_nvptx.c; a symbolic one 256),
  // 256, 512 or 1024 (TJ_NVPTX_ROWS=staged-256 / -512 / -1024, for A/B
  // comparisons) whatever it is: the kernel's .maxntid grows to it and its
  // .minnctapersm shrinks by as much, so every path keeps 64 registers.
  int32_t row_stage_threads;
} tj_nvptx_options_t;

typedef struct tj_nvptx_launch_t {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t cluster;  // blocks a cluster along x (tj_nvptx_kernel_t.cluster)
  // Launched with programmatic stream serialization
  // (tj_nvptx_kernel_t.wq_programmatic).
  bool programmatic;
  bool empty;  // no work at these sizes: skip the launch
  // Bytes of buffer |zero_buffer| the launcher sets to 0 before the launch
  // (a conv split along k adds its slices' sums into its output); 0: none.
  uint64_t zero_bytes;
  uint32_t zero_buffer;
} tj_nvptx_launch_t;

// The launch of |info| (from |kernel|) for |scalars| on a GPU with
// |num_sms| multiprocessors. INVALID_ARGUMENT for negative sizes; for a
// tensor-core GEMM, UNSUPPORTED when a runtime stride of A or B breaks the
// 16-byte alignment cp.async needs (tj_nvptx_gemm_check_pointers checks the
// pointers).
tj_status_t tj_nvptx_launch_config(const tj_kir_t* kernel,
                                   const tj_nvptx_kernel_t* info,
                                   const int64_t* scalars, int32_t num_sms,
                                   tj_nvptx_launch_t* out_launch);

// Whether the launch of ROW_REDUCE kernel |info| over rows of |length|
// elements takes the staged path (tj_nvptx_kernel_t.row_stage_bytes): a
// row the resident path cannot hold in registers whose staged buffers fit
// the kernel's dynamic shared memory, on the vector path (|length| a
// multiple of its lanes). On true |*out_bytes| is the dynamic shared
// memory each block gets; else 0.
bool tj_nvptx_row_staged(const tj_nvptx_kernel_t* info, int64_t length,
                         uint32_t* out_bytes);

// The slices into which the CONV template's launch splits k for a conv of
// |pixels| output pixels (N x P), |channels| output channels and |k| = C x
// taps on a GPU of |num_sms| SMs, 1 for none: the grid's depth, in the
// tiles the emitter takes under |options| (NULL: exact f32) for |arch|
// (the wgmma TF32 kernel's on sm_90a). Only a kernel without an epilogue
// splits (jit/emit_nvptx_conv.c).
int64_t tj_nvptx_conv_slices(const tj_nvptx_options_t* options,
                             tj_nvptx_arch_t arch, int64_t pixels,
                             int64_t channels, int64_t k, int32_t num_sms);

// The weight of the wgmma TF32 conv prepared once, where the kernel says
// so (tj_nvptx_kernel_t.conv_prepared): w [O, C, taps] (taps the kernel's
// window, flattened; |spatial| axes) becomes [O, Kp] f32, Kp = C x taps
// rounded up to a multiple of 32 (zeros past C x taps), each value
// rounded to TF32 to nearest, ties away (cvt.rna's result, the low 13
// mantissa bits 0; Inf and NaN kept), with k = t * C + c (tap-major,
// where tj_nvptx_conv_weight_tap_major: a k-tile of 32 then lies in one
// tap) or k = c * taps + t (the graph's order). |dst| takes
// tj_nvptx_conv_weight_bytes; |w| (any alignment) is read only.
bool tj_nvptx_conv_weight_tap_major(int64_t c, int32_t spatial);
int64_t tj_nvptx_conv_weight_bytes(int64_t o, int64_t c, int64_t taps);
void tj_nvptx_conv_prepare_weight(int64_t o, int64_t c, int64_t taps,
                                  int32_t spatial, const void* w, float* dst);

// Whether GEMM operand |buffer| of |kernel| has a batch: a stride along a
// batch dim (those before the last two) that is not the constant 0. The
// TMA schedules address such an operand through a rank-3 tensor map (its
// batch dims as one, the outermost) and the others, one matrix for every
// batch entry, through a rank-2 map; the kernel and the maps that
// tj_cuda_gemm_tensor_maps encodes for it agree through this.
static inline bool tj_nvptx_gemm_operand_batched(const tj_kir_t* kernel,
                                                 uint32_t buffer) {
  for (int32_t d = 0; d + 2 < kernel->rank; ++d) {
    if (!tj_kir_ival_is_const(kernel->buffers[buffer].strides[d], 0))
      return true;
  }
  return false;
}

// Tensor-core GEMMs read A and B with 16-byte cp.async, and attention
// kernels q, k, v and their output: their base addresses (|buffers|,
// device pointers in declaration order) must be 16-byte aligned.
// UNSUPPORTED otherwise.
tj_status_t tj_nvptx_gemm_check_pointers(const tj_kir_t* kernel,
                                         const tj_nvptx_kernel_t* info,
                                         const uint64_t* buffers);

//===--- modules ---===//

// An NVPTX module with its own LLVM context: kernels are emitted into it
// (tj_nvptx_module_add_kernel), then it is compiled to PTX once. Used by
// one thread at a time.
typedef struct tj_nvptx_module_t tj_nvptx_module_t;

// An empty module called |name| for |target| (borrowed: it must outlive
// the module), its bookkeeping from |allocator|. On success |*out_module|
// is owned by the caller (tj_nvptx_module_destroy or
// tj_nvptx_module_compile); on failure it is NULL.
tj_status_t tj_nvptx_module_new(const tj_nvptx_target_t* target,
                                tj_allocator_t allocator, const char* name,
                                tj_nvptx_module_t** out_module);
// NULL is a no-op.
void tj_nvptx_module_destroy(tj_nvptx_module_t* module);

// Emits |kernel| into |module| for the target's arch, as
// tj_nvptx_emit_kernel (jit/emit_nvptx.h): the same errors; on an error the
// failing kernel's function is not in the module.
tj_status_t tj_nvptx_module_add_kernel(tj_nvptx_module_t* module,
                                       const tj_kir_t* kernel,
                                       const tj_nvptx_options_t* options,
                                       tj_nvptx_kernel_t* out_kernel);
// Deletes the function |entry| from |module|; none by that name is a no-op.
void tj_nvptx_module_remove_kernel(tj_nvptx_module_t* module,
                                   const char* entry);
// Renames the function |entry| to |name|; none by that name is a no-op.
void tj_nvptx_module_rename_kernel(tj_nvptx_module_t* module, const char* entry,
                                   const char* name);
// The module's LLVM IR as text (NUL-terminated, from |allocator|; free with
// tj_free_string), for cache keys.
tj_status_t tj_nvptx_module_print(const tj_nvptx_module_t* module,
                                  tj_allocator_t allocator, char** out_ir);
// Compiles |module| to PTX as tj_nvptx_compile (jit/emit_nvptx.h), the PTX
// from |allocator|. Destroys |module|, even on failure.
tj_status_t tj_nvptx_module_compile(tj_nvptx_module_t* module,
                                    tj_allocator_t allocator, char** out_ptx);

//===--- chunks: one module's kernels compiled on several threads ---===//

// The cost of compiling kernel |entry| of |module|: the LLVM instructions
// of its function and of the module's functions it calls (0 when there is
// no such function). Code generation's time grows with it: a wgmma GEMM or
// an attention kernel counts thousands, a pointwise one a few hundred.
uint64_t tj_nvptx_module_kernel_cost(const tj_nvptx_module_t* module,
                                     const char* entry);

// Chunking by cost: a kernel of at least |budget| is a chunk of its own;
// lighter ones are packed, in order, into chunks until a chunk's sum
// reaches |budget|. Writes each kernel's chunk to |chunk_of| and returns
// the number of chunks. Depends only on the costs, not on a thread count,
// so that chunks (and the caches keyed by their kernels) are the same on
// every host.
uint32_t tj_nvptx_plan_chunks(const uint64_t* costs, uint32_t count,
                              uint64_t budget, uint32_t* chunk_of);

// The default budget of tj_nvptx_plan_chunks: the blocks' GEMM,
// attention and row kernels count 1,800-4,000 instructions each and stay
// alone (a host of 16 cores then waits for its costliest kernel, not for
// a pair); pointwise ones (350-800) are packed (bench/cuda_compile_cost.c
// --blocks).
#define TJ_NVPTX_CHUNK_BUDGET 1500u

// A kernel in no chunk: not compiled (a chunk the caller found cached).
#define TJ_NVPTX_NO_CHUNK UINT32_MAX

// Called on the thread that compiled chunk |chunk| with its PTX (borrowed:
// valid during the call), e.g. to assemble it; an error fails the compile.
typedef tj_status_t (*tj_nvptx_chunk_fn)(void* ctx, uint32_t chunk,
                                         const char* ptx);

typedef struct tj_nvptx_chunks_t {
  uint32_t num_entries;
  const char* const* entries;  // every kernel function of the module
  const uint32_t* chunk_of;    // per entry: its chunk or TJ_NVPTX_NO_CHUNK
  uint32_t num_chunks;
  // At most this many chunks compile at once, the calling thread one of
  // them; 0 or 1: one after another on the calling thread.
  uint32_t threads;
  tj_nvptx_chunk_fn then;  // optional
  void* then_ctx;
} tj_nvptx_chunks_t;

// Compiles each chunk's kernels of |module| as a module of its own, as
// tj_nvptx_module_compile would, on up to |chunks->threads| threads: the
// module goes to bitcode once, and each chunk parses it into an LLVM
// context and target machine of its own and deletes the kernels of other
// chunks, so that the chunks share nothing. Their names are kept, so a
// kernel's PTX is the one the whole module gives it
// (tests/unit/nvptx_chunks_test.c). Chunks start costliest first.
// |out_ptx| (num_chunks entries) receives each chunk's PTX from
// |allocator| (tj_free_string), NULL for a chunk with no kernel;
// |out_chunk_ms| and |out_chunk_cpu_ms| (optional) each chunk's wall ms
// and its thread's CPU ms, its |then| included. Destroys |module|, even
// on failure; on failure every |out_ptx| is NULL.
tj_status_t tj_nvptx_module_compile_chunks(tj_nvptx_module_t* module,
                                           const tj_nvptx_chunks_t* chunks,
                                           tj_allocator_t allocator,
                                           char** out_ptx, double* out_chunk_ms,
                                           double* out_chunk_cpu_ms);

// The CPUs this process may run on (its affinity mask), at least 1.
uint32_t tj_nvptx_host_threads(void);

//===--- a host's own LLVM IR ---===//

// Compiles |ir| (NUL-terminated LLVM IR text, the .ll form, written for
// NVPTX) to PTX for |target|'s arch, the PTX from |allocator| (free with
// tj_free_string); |what| names the IR's owner in messages ("custom op
// topk"). The module gets our triple and data layout (a triple other than
// nvptx64-nvidia-cuda is refused), then the same O3 and PTX emission as
// our kernels. INVALID_ARGUMENT, carrying LLVM's diagnostic, for IR that
// does not parse or verify, and when the PTX has no kernel entry |entry|
// (a function without the ptx_kernel calling convention or an
// nvvm.annotations "kernel" mark). On failure |*out_ptx| is NULL.
tj_status_t tj_nvptx_compile_ir_text(const tj_nvptx_target_t* target,
                                     const char* ir, const char* entry,
                                     const char* what, tj_allocator_t allocator,
                                     char** out_ptx);

// The tile layout of a quantized weight for the tensor-core weight-only
// GEMM (emit_nvptx_wqmma.c, tj_nvptx_options_t.wqgemm_tiled): q [K, N] of
// |bits| 8 (a byte an element) or 4 (rows of ceil(N / 2) bytes, the even
// column in the low nibble), as lib/passes/quant_prepack.c lays it out,
// relaid so that lane (g = lane / 4, t = lane % 4) of a warp finds the
// values of its mma.sync B fragments for 16 rows and 64 columns in one
// 16-byte unit (int4; two for int8), the warp's 32 units contiguous.
//
// K is padded to a multiple of 128 rows and N to 64 columns (zero bits).
// Block (ks, nt) of rows 16 ks .. +15 and columns 64 nt .. +63 is T = 512
// (int4) or 1024 (int8) bytes at ((nt * Kp / 16) + ks) * T: a column
// tile's blocks follow each other along K. Lane L's unit is at byte 16 L
// of the block (int8: half h, 0 or 1, at 512 h + 16 L); word w of it
// (little-endian i32) holds, for k = 16 ks + 4 t + r and n = 64 nt + 8 g
// + j:
// - int4: nibble i (bits 4i .. 4i+3) is r = 2 ((i & 3) & 1) + (i >> 2),
//   j = 2 w + ((i & 3) >> 1): nibbles i and i + 4 are rows r and r + 1 of
//   one column, so one shift and mask (0x000F000F) gives a pair of B
//   fragment values, as packed 16-bit halves;
// - int8: byte r of word w is row r, j = 4 h + w.
// The bytes: tj_nvptx_wq_tiled_bytes. |dst| takes that many; |src| is
// read only.
int64_t tj_nvptx_wq_tiled_bytes(int32_t bits, int64_t k, int64_t n);
void tj_nvptx_wq_tile(int32_t bits, int64_t k, int64_t n, const uint8_t* src,
                      uint8_t* dst);
// The raw bits (nibble or byte) of element (k, n) of a tiled weight: the
// layout's definition as the kernel reads it, for tests.
uint8_t tj_nvptx_wq_tiled_at(int32_t bits, int64_t k, int64_t n,
                             const uint8_t* tiled, int64_t kk, int64_t nn);

#endif  // TJ_JIT_NVPTX_H_
