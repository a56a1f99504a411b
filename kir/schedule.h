// Layout and schedule decisions as data (seed stages 07 and 08): what a
// kernel-IR kernel's memory looks like and how its work is cut, decided on
// the host, with no LLVM, the same for every target.
//
// Stage 07, layout. Every value a kernel reads or writes is dense and
// row-major in the shape of its node (a graph input the caller passes
// strided is staged there first). A kernel buffer is such a value plus an
// element offset, the start of a slice (or of a box of a pad or concat); its
// per-space-dim strides are what the index mapping through broadcasts
// (stride 0), transposes (permuted), slices (scaled) and reshapes makes of
// the row-major strides. kir/lower_index.c applies the rule; the lowered
// kernel records each buffer's node and offset (kir/lower.h).
//
// Stage 08, schedule. Decided here, from the kernel alone (and the target's
// vector width in f32 lanes), deterministically, because the kernel cache
// keys on the printed kernel and the tuner on the resolved schedule:
//   - the work-unit cut (tj_kir_launch_info): a POINTWISE unit is up to
//     TJ_KIR_POINTWISE_BLOCK elements of one innermost line; a ROW_REDUCE
//     unit is one row; a GEMM unit is an (mc x nc) block of C of one batch
//     entry. Any partition of [0, units) into ranges, run in any order on
//     any threads, computes the same result; each concurrently running call
//     needs its own scratch of scratch_bytes (64-byte aligned; NULL when
//     scratch_bytes is 0).
//   - the GEMM unit order: batch, then n block, then m block (fastest), so
//     that a thread that runs consecutive units of one n block packs its B
//     panel once; when the template packs A (tj_kir_gemm_packs_a), m block,
//     then n block fastest, so that it packs its A block once.
//   - the GEMM schedule (tj_kir_gemm_schedule_t, resolved by
//     tj_kir_gemm_resolve): the register tile, the cache blocks mc, nc, kc.
// `tj-opt --emit=kir --lanes=N` prints these decisions;
// tests/lit/kir/schedule.tj pins them at 16, 8 and 4 lanes.

#ifndef TJ_KIR_SCHEDULE_H_
#define TJ_KIR_SCHEDULE_H_

#include "lib/base.h"

typedef struct tj_kir_t tj_kir_t;  // kir/kernel_ir.h

// Elements of one innermost line per POINTWISE work unit.
#define TJ_KIR_POINTWISE_BLOCK 4096

// How a GEMM is blocked. 0 in a field means "choose for the target"
// (tj_kir_gemm_resolve). tile_n and nc are in f32 elements.
typedef struct tj_kir_gemm_schedule_t {
  int32_t tile_m;  // rows of the register tile (1..16)
  int32_t tile_n;  // columns of the register tile, a multiple of the lanes
  int32_t mc;      // rows of C per work unit, a multiple of tile_m
  int32_t nc;      // columns of C per work unit (the packed B block width),
                   // a multiple of tile_n
  int32_t kc;      // K per pass; K <= kc: one pass, the epilogue runs on the
                   // accumulators; K > kc: partial sums go through scratch
} tj_kir_gemm_schedule_t;

// The GEMM schedule used on a target whose vectors hold |f32_lanes| floats:
// the kernel's fields, with 0s filled in and values rounded to the target's
// constraints. Deterministic: the cache relies on it.
void tj_kir_gemm_resolve(const tj_kir_t* kernel, int32_t f32_lanes,
                         tj_kir_gemm_schedule_t* out_schedule);

// Whether A's stride along k is the constant 1 (rows of A are read along
// k in place).
bool tj_kir_gemm_a_k_contiguous(const tj_kir_t* kernel);

// Whether the x86 GEMM template packs A (its mc x kc block as slivers of
// tile_m rows, in scratch after the packed B block; tj_kir_launch_info
// counts them): when A's stride along k is not the constant 1
// (a transposed or strided A), whose in-place reads would touch a new
// cache line, often a new page, every k step; and when A is f16 or bf16,
// so that the microkernel's broadcasts read f32 (or bf16 pairs for
// vdpbf16ps) instead of widening a value per row and k step on the
// shuffle port the FMAs need. It also decides the unit order (above).
bool tj_kir_gemm_packs_a(const tj_kir_t* kernel);

// The ATTENTION template's blocking for a vector of |f32_lanes| floats:
// query rows per register tile (bm, the microkernels' rows), keys per K/V
// tile (bn, packed K^T panels of nr keys), columns of the microkernels'
// tiles (nr, a multiple of the lanes: the GEMM's tile_n) and query rows
// per work unit (uq, a multiple of bm: one K/V tile is packed once per
// unit and used by its uq / bm row blocks). A unit is one block of uq
// query rows of one (batch.., kv head, group member); its scratch holds
// the packed K^T tile (bn x d f32), the score tile (bm x bn), the output
// accumulators (uq x dv rounded up to nr), the running max and sum (uq
// each) and the unit's query rows widened to f32 (uq x d, f16/bf16 q
// only), each part 64-byte aligned.
typedef struct tj_kir_attention_schedule_t {
  int32_t bm, bn, nr, uq;
} tj_kir_attention_schedule_t;
void tj_kir_attention_resolve(int32_t f32_lanes,
                              tj_kir_attention_schedule_t* out_schedule);

// The CONV template's blocking (jit/emit_conv.c) for a vector of
// |f32_lanes| floats: the GEMM microkernel's register tile (mr output
// channels x nr output pixels), kc (the contraction, C x taps, per packed
// pass), nc (output pixels per work unit, a multiple of nr) and oc (output
// channels per work unit, a multiple of mr). A unit is an (oc x nc) block
// of one image's output, the unit order image, channel block, pixel block
// (fastest). Grouped (tj_kir_conv_t.groups), C is a group's input
// channels and the channel blocks a group's O / G channels in blocks of
// oc, group after group; such a conv never reuses patches nor takes the
// ocvec variant. Its scratch holds the packed patches (kc x nc f32, as nc / nr
// panels of kc x nr), the f32 accumulators (oc x nc) and the unit's pixel
// coordinates (nc x 3 i32 and nc i64), 64 bytes for the key below, and a
// pass's tap table (kc i64 offsets in x and kc x 3 i32 tap offsets), each
// 64-byte aligned.
//
// With |reuse| (convfuse: several channel blocks and a packing of all of
// K x nc that fits kReuseBytes) the order is image, pixel block, channel
// block (fastest) instead, and the scratch holds the packed patches of
// every pass (passes x kc x nc f32) plus the i64 key (image x pixel
// blocks + pixel block) of the block they hold: consecutive units of one
// thread pack their patches once for all channel blocks, where each unit
// packed its own (1x1/2 512-1024 @28 packed them 6 times).
//
// conv16 (issue 15): the kernel's tj_kir_t.schedule, zero by default,
// may make a unit smaller, set by the x86 backend where a batch leaves too
// few units for its threads (balance_conv_units in
// backends/x86/x86_program.c): mc (> 0) caps oc, nc (> 0) caps nc, each
// rounded up to its multiple (mr and nr here, nr and mr for ocvec below).
// With kc > 0 (a symbolic batch) they serve only batches of fewer than kc
// images, and the default blocks the others: the template emits both
// unit loops and takes one by the run's batch, as tj_kir_launch_info
// counts the units (tj_kir_conv_resolve_batch).
typedef struct tj_kir_conv_schedule_t {
  int32_t mr, nr, kc, nc, oc;
  int32_t reuse;   // bool
  int32_t passes;  // ceil(K / kc)
  // The pixel blocks run over the batch's N x P pixels (the unit order
  // pixel block and channel block as above, no image): where P is not a
  // multiple of nr, each image's last panel was partly padding (7x7: 49
  // pixels in a panel of 64); joined, only the batch's last one is. A 1x1
  // that reads x in place never joins.
  int32_t join;  // bool
  // x86conv2 (issue 15): a conv of O <= 64 channels (not 1x1) over one or
  // two spatial axes, strides 1 to 4, output rows of 14 or more with at
  // most 1/16 of a padded row dropped, reads its patches in place from a
  // zero-padded copy of the image (made once per image a thread takes,
  // after the other parts of the scratch, the image it holds in the key's
  // place). At stride 1 the copy is C x E1 x E2 f32, E = out + (kernel -
  // 1) x dilation along each axis; GEMM column n = i1 x E2 + i2 is output
  // pixel (i1, i2) for i2 < out2 (the other E2 - out2 a row are computed
  // and dropped), and row k = (c, tap) of B is the copy from c x E1 x E2 +
  // the tap's offset, so the microkernel loads B through a table of kc row
  // offsets (tj_ukernel_opts_t.b_rows) and nothing is packed. A stride s1,
  // s2 of 2 to 4 splits the copy into s1 x s2 phases (phase (a1, a2) row
  // r, column t: padded row s1 r + a1, column s2 t + a2), E = out +
  // (kernel - 1) x dilation / s their rows and row length, and tap (t1, t2)
  // is phase (t1 d1 % s1, t2 d2 % s2) shifted by (t1 d1 / s1, t2 d2 / s2).
  // |cols| is the GEMM's columns an image (P, or shifted (out1 - 1) x E2 +
  // out2), the pixel blocks nc of them; never joined nor reused.
  int32_t shifted;  // bool
  int32_t s1, s2;   // shifted: the strides (phases) along the two axes
  int64_t cols;
  int64_t e1, e2;  // shifted: a phase's rows and row length
  int64_t xpad;    // shifted: the copy's f32 elements (C x s1 x s2 x E1 x E2)
  // x86conv3 (issue 15): output channels along the vector, as oneDNN's and
  // MLAS's NCHWc kernels. A conv marked so (tj_kir_conv_t.ocvec: its
  // constant weight prepacked for it; by the rule, stride 1, O >= 64 and
  // output rows of 14 or more; the shifted variant's geometry: one or two
  // spatial axes, strides 1 to 4, not 1x1) multiplies tiles of
  // mr output pixels x nr output channels: each pixel's value of row k =
  // (c, tap) broadcast from the zero-padded, phase-split copy of the image
  // (the shifted variant's; s1, s2, e1, e2, xpad as there) at the pixel's
  // offset plus the tap's (tj_ukernel_opts_t.a_rows), against a row of nr
  // channels of the weight, prepacked as [O / nr][K][nr] (zero past O;
  // backends/x86/x86_program.c). Units are (image, block of oc channels,
  // block of nc pixels); a unit's tiles sum into a pixel-major block of
  // the scratch (nc x oc), transposed into the channel-major block the
  // epilogue reads (oc x nc) at the unit's end; no pixel is computed and
  // dropped, nothing is packed but the image's copy. Never joined or
  // reused; |cols| is P.
  int32_t ocvec;  // bool
} tj_kir_conv_schedule_t;
void tj_kir_conv_resolve(const tj_kir_t* kernel, int32_t f32_lanes,
                         tj_kir_conv_schedule_t* out_schedule);
// The schedule a run of |batch| images takes (the smaller blocks of
// tj_kir_t.schedule, or from its kc images on the default ones);
// tj_kir_conv_resolve is the one of a batch of 1.
void tj_kir_conv_resolve_batch(const tj_kir_t* kernel, int32_t f32_lanes,
                               int64_t batch,
                               tj_kir_conv_schedule_t* out_schedule);
// Whether CONV kernel |k| reads x in place as the GEMM's B (a 1x1 window,
// stride 1, no padding: rows of the image's pixels per channel), packing
// no patches (jit/emit_conv.c's direct microkernels).
bool tj_kir_conv_reads_x_in_place(const tj_kir_t* kernel);
// Whether CONV kernel |k| can take the ocvec variant
// (tj_kir_conv_schedule_t.ocvec) once its weight is prepacked in that
// variant's layout, and whether the rule gives it that variant; the x86
// backend asks both (TJ_X86_CONV may force either way) and marks the
// kernel (tj_kir_conv_t.ocvec).
bool tj_kir_conv_ocvec_fits(const tj_kir_t* kernel);
bool tj_kir_conv_ocvec_rule(const tj_kir_t* kernel);
// The scratch bytes of a CONV unit under |s|.
int64_t tj_kir_conv_scratch_bytes(const tj_kir_conv_schedule_t* s);

// dwbw (issue 15): a direct window kernel's (conv.window != GEMM) output
// rows (every output spatial axis but the last, flattened) per work unit.
// A unit is that many rows of one (image, channel) plane, the unit order
// image, channel, row block (fastest). No scratch.
int64_t tj_kir_window_rows(const tj_kir_t* kernel);
// mobile2 (issue 15): whether a direct window kernel takes the channel
// vector variant at |lanes| lanes: a depthwise conv (one output channel an
// input channel) or max_pool over two spatial axes whose output rows are
// at most 16 wide, where a vector of output columns would mostly be masked
// lanes. A unit is then one image's block of |lanes| channels (the unit
// order image, channel block), its planes copied transposed, [H][W][lanes]
// and padded with the op's identity, into a stack buffer of at most 32 KiB
// (jit/emit_window.c). No scratch.
bool tj_kir_window_cvec(const tj_kir_t* kernel, int32_t lanes);
// The padded rows and columns of that buffer.
void tj_kir_window_cvec_extent(const tj_kir_t* kernel, int32_t lanes,
                               int64_t* out_rows, int64_t* out_cols);
// r18 (issue 15): whether a direct window kernel may read x and write its
// output blocked at |lanes| lanes (tj_kir_conv_t.xblock and yblock, set
// together by the x86 backend): a max_pool over two spatial axes of at
// most 64 taps whose sizes but the batch are constants, its channels a
// multiple of |lanes|.
// Such a kernel's unit is one image's block of |lanes| channels over
// tj_kir_window_block_rows output rows (the unit order image, channel
// block, row block (fastest)); each output pixel's taps are plain vector
// loads of x's blocks (jit/emit_window.c). No scratch.
bool tj_kir_window_blocks(const tj_kir_t* kernel, int32_t lanes);
// The output rows of a unit of such a kernel under |lanes| lanes a block.
int64_t tj_kir_window_block_rows(const tj_kir_t* kernel, int32_t lanes);

typedef struct tj_kir_launch_t {
  int64_t units;                    // run the kernel over [0, units)
  int64_t scratch_bytes;            // per concurrent call
  tj_kir_gemm_schedule_t schedule;  // GEMM: the resolved schedule
} tj_kir_launch_t;

// How to run a finalized |kernel| compiled for |f32_lanes| with |scalars|
// (may be NULL when the kernel has no params). INVALID_ARGUMENT when a size
// is negative or the work overflows int64.
tj_status_t tj_kir_launch_info(const tj_kir_t* kernel, int32_t f32_lanes,
                               const int64_t* scalars,
                               tj_kir_launch_t* out_launch);

#endif  // TJ_KIR_SCHEDULE_H_
