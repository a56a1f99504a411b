// kir/schedule.c: the schedule decisions of kir/schedule.h: the GEMM
// schedule for a vector width, whether the GEMM template packs A, and the
// work-unit cut of each template.

#include "kir/schedule.h"

#include <inttypes.h>
#include <string.h>

#include "kir/kernel_ir.h"

bool tj_kir_gemm_a_k_contiguous(const tj_kir_t* kernel) {
  for (uint32_t b = 0; b < kernel->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &kernel->buffers[b];
    if (buf->role == TJ_KIR_GEMM_A) {
      tj_kir_ival_t sk = buf->strides[kernel->rank - 1];
      return sk.param < 0 && sk.value == 1;
    }
  }
  return true;
}

bool tj_kir_gemm_packs_a(const tj_kir_t* kernel) {
  for (uint32_t b = 0; b < kernel->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &kernel->buffers[b];
    if (buf->role == TJ_KIR_GEMM_A && buf->dtype != TJ_DTYPE_F32) return true;
  }
  return !tj_kir_gemm_a_k_contiguous(kernel);
}

static int32_t round_up_i32(int32_t v, int32_t m) {
  return (v + m - 1) / m * m;
}

void tj_kir_gemm_resolve(const tj_kir_t* k, int32_t lanes,
                         tj_kir_gemm_schedule_t* out) {
  tj_kir_gemm_schedule_t s = k->schedule;
  if (lanes < 1) lanes = 1;
  // Defaults by register file: 32 zmm hold 6x64 (24 accumulators, 4 B
  // vectors, broadcasts); 16 ymm/xmm hold 6x2 vectors (12 accumulators).
  if (s.tile_n == 0) s.tile_n = lanes >= 16 ? 4 * lanes : 2 * lanes;
  if (s.tile_m == 0) {
    s.tile_m = 6;
    // A known small M (a batch-1 matmul) would waste most of a 6-row tile:
    // use M rows.
    tj_kir_ival_t m = k->rank >= 2 ? k->dims[k->rank - 2] : tj_kir_constant(0);
    if (m.param < 0 && m.value >= 1 && m.value < s.tile_m) {
      s.tile_m = (int32_t)m.value;
    }
  }
  s.tile_n = round_up_i32(s.tile_n, lanes);
  // A tile wider than the register file spills in the K loop: cap the
  // accumulator count at what 32 (AVX-512) or 16 registers allow.
  int32_t max_regs = lanes >= 16 ? 28 : 13;
  while (s.tile_m * (s.tile_n / lanes) > max_regs && s.tile_n > lanes) {
    s.tile_n -= lanes;
  }
  while (s.tile_m * (s.tile_n / lanes) > max_regs && s.tile_m > 1) {
    --s.tile_m;
  }
  // K block: the A sliver (tile_m x kc) stays in L1, the packed B block
  // (kc x nc) in L2.
  // A packed A block is reused by the units after it only within one K
  // pass (emit_gemm.c): a longer pass packs it less often (dW = X^T @ dy,
  // K = 2048: 1.22x OpenBLAS's time with kc 1024, 1.04x with 2048).
  // An 8-bit operand's k block is 4x as long for the same bytes (qgemm,
  // issue 17): kc 4096 keeps the A sliver (6 x 4 KiB) in L1 and the B
  // block (4096 x 128 bytes) in L2, and runs K <= 4096 in one pass, so the
  // tile never goes round a partial-sum block and a B block packed once
  // serves every m block after it.
  if (s.kc == 0) {
    s.kc = tj_kir_gemm_is_int8(k)          ? 4096
           : tj_kir_gemm_a_k_contiguous(k) ? 1024
                                           : 2048;
  }
  if (s.nc == 0) s.nc = s.tile_n >= 64 ? 128 : 4 * s.tile_n;
  s.nc = round_up_i32(s.nc, s.tile_n);
  // 8-bit: 96 rows, a multiple of both the 6-row VNNI tile and the
  // 16-row AMX tile (emit_gemm.c), and units enough for 16 threads at M
  // 256.
  if (s.mc == 0) s.mc = tj_kir_gemm_is_int8(k) ? 96 : 256;
  s.mc = round_up_i32(s.mc, s.tile_m);
  *out = s;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void tj_kir_attention_resolve(int32_t lanes, tj_kir_attention_schedule_t* out) {
  if (lanes < 1) lanes = 1;
  // The GEMM's register tiles: 6 x 4 zmm, 6 x 2 ymm or xmm accumulators.
  out->bm = 6;
  out->nr = lanes >= 16 ? 4 * lanes : 2 * lanes;
  out->bn = lanes >= 8 ? 64 : 32;
  if (out->bn < out->nr) out->bn = out->nr;
  out->uq = 4 * out->bm;
}

static int64_t align64_i64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

enum { kReuseBytes = 2 << 20 };

bool tj_kir_conv_reads_x_in_place(const tj_kir_t* k) {
  const tj_kir_conv_t* cv = &k->conv;
  if (k->kind != TJ_KIR_CONV || k->rank < 3 ||
      cv->kernel[0] * cv->kernel[1] * cv->kernel[2] != 1) {
    return false;
  }
  for (int32_t d = 0; d < 3; ++d) {
    // Output dim d of the three (the leading ones 1) is space dim d - 3 +
    // rank.
    int64_t od = 3 - d <= k->rank - 2 ? k->dims[k->rank - 3 + d].value : 1;
    if (cv->stride[d] != 1 || cv->low[d] != 0 || cv->in[d] != od) return false;
  }
  return true;
}

// The padded image of a shifted conv may take this much of a thread's
// scratch (resnet's @56 layer: 64 x 58 x 58 f32, 0.86 MB).
enum { kShiftedBytes = 4 << 20 };

// The padded, phase-split copy of the image that the shifted and ocvec
// variants read (tj_kir_conv_schedule_t): whether |k|'s window allows it,
// and the copy's shape.
static bool phase_geometry(const tj_kir_t* k, tj_kir_conv_schedule_t* out) {
  const tj_kir_conv_t* cv = &k->conv;
  out->cols = out->e1 = out->e2 = out->xpad = 0;
  out->s1 = out->s2 = 1;
  if (k->kind != TJ_KIR_CONV || cv->window != TJ_KIR_WINDOW_GEMM ||
      k->rank < 3 || k->rank > 4 || cv->spatial > 2 || cv->kernel[0] != 1 ||
      cv->in[0] != 1 || cv->stride[0] != 1 ||
      cv->kernel[1] * cv->kernel[2] == 1) {
    return false;  // (a 1x1 would copy s1 x s2 phases to read one)
  }
  const int64_t s1 = cv->stride[1], s2 = cv->stride[2];
  if (s1 < 1 || s1 > 4 || s2 < 1 || s2 > 4) return false;
  const int64_t o1 = k->rank == 4 ? k->dims[2].value : 1;
  const int64_t o2 = k->dims[k->rank - 1].value;
  if (o1 < 1 || o2 < 1) return false;
  // Each phase's rows: the output's plus the window's reach in phase
  // steps.
  const int64_t e1 = o1 + (cv->kernel[1] - 1) * cv->dilation[1] / s1;
  const int64_t e2 = o2 + (cv->kernel[2] - 1) * cv->dilation[2] / s2;
  const int64_t xpad = cv->c * s1 * s2 * e1 * e2;
  if (xpad * 4 > kShiftedBytes) return false;
  out->s1 = (int32_t)s1;
  out->s2 = (int32_t)s2;
  out->e1 = e1;
  out->e2 = e2;
  out->xpad = xpad;
  out->cols = (o1 - 1) * e2 + o2;
  return true;
}

// Whether |k| takes the shifted variant (tj_kir_conv_schedule_t.shifted).
// Where it pays (bench/RESULTS.md, x86conv2): the shifted microkernel's
// unaligned B loads run ~10% slower than the packed panels, which packing
// costs about 1/O of; so O <= 64 (resnet's stem and @56 3x3s, 5-7%
// faster; 3x3 128 @28, 256 @14 and 3x3/2 128 @56 ran 5-20% slower
// shifted), and at most 1/16 of a row's columns dropped.
static bool shifted_fits(const tj_kir_t* k, const tj_kir_conv_schedule_t* g) {
  // (Grouped: a group's channels, which one pass of the copy serves.)
  const int64_t o = k->dims[1].value / tj_kir_conv_groups(&k->conv);
  const int64_t o2 = k->dims[k->rank - 1].value;
  return o <= 64 && o2 >= 14 && (g->e2 - o2) * 16 <= g->e2;
}

bool tj_kir_conv_ocvec_fits(const tj_kir_t* k) {
  tj_kir_conv_schedule_t g;
  return tj_kir_conv_groups(&k->conv) == 1 && phase_geometry(k, &g);
}

bool tj_kir_conv_ocvec_rule(const tj_kir_t* k) {
  // Where it pays (bench/RESULTS.md, x86conv3): stride 1 with output rows
  // of 14 or more and O >= 64 (3x3 64-64 @56 9-18% faster than shifted
  // at batch 32, 128 @28 1-8%, 256 @14 level to 10%); 3x3 512 @7 ran 20%
  // slower (49 pixels an image in groups of 6, where the packed variant
  // joins the batch's pixels), the stem 7x7/2 and 3x3/2 128 @56 level.
  // r18c: strided convs too, for their output stored in NCHWc blocks
  // straight from the tiles (resnet's stem 7x7/2 3-64 and its 3x3/2s at
  // @28 and @14: 10-14% faster at batch 32 than the shifted and packed
  // variants' blocked stores, level at batch 1); the x86 backend puts a
  // strided conv back on the shifted or packed variant where its output
  // stays row-major (settle_strided_ocvec).
  return tj_kir_conv_ocvec_fits(k) && k->dims[1].value >= 64 &&
         k->dims[k->rank - 1].value >= 14;
}

static void conv_resolve(const tj_kir_t* k, int32_t lanes, bool small,
                         tj_kir_conv_schedule_t* out) {
  if (lanes < 1) lanes = 1;
  const int32_t want_oc = small ? k->schedule.mc : 0;
  const int32_t want_nc = small ? k->schedule.nc : 0;
  // The GEMM's register tiles (6 x 4 zmm, 6 x 2 ymm or xmm), as attention.
  out->mr = 6;
  out->nr = lanes >= 16 ? 4 * lanes : 2 * lanes;
  int64_t kk = k->gemm_k.param < 0 ? k->gemm_k.value : 256;
  out->kc = kk < 256 ? (int32_t)(kk < 1 ? 1 : kk) : 256;
  // Pixels: up to 4 panels a unit (the A sliver of mr x kc is reused by
  // each), fewer when the image has fewer.
  // Grouped: a unit's channels lie in one group, so o is a group's.
  const int64_t groups = tj_kir_conv_groups(&k->conv);
  int64_t pix = 1, o = k->rank >= 2 ? k->dims[1].value / groups : 1;
  for (int32_t d = 2; d < k->rank; ++d) pix *= k->dims[d].value;
  const bool geometry = phase_geometry(k, out);
  out->ocvec = geometry && k->conv.ocvec && k->b_prepacked;
  out->shifted = geometry && !out->ocvec && shifted_fits(k, out);
  if (out->ocvec) {
    // Tiles of 6 pixels x 4 vectors of channels (2 below 16 lanes), a pass
    // of 128 rows of K (the weight's panel of 128 x 64 f32, 32 KiB, stays
    // in L1 while every pixel group of the block takes it), blocks of up
    // to 256 pixels, as even as the groups of 6 allow (196 pixels at 14x14
    // one block, not 192 + 4), and up to 256 channels.
    out->kc = kk < 128 ? (int32_t)(kk < 1 ? 1 : kk) : 128;
    const int64_t blocks = ceil_div(pix < 1 ? 1 : pix, 256);
    const int64_t nc = ceil_div(ceil_div(pix < 1 ? 1 : pix, blocks), out->mr);
    out->nc = (int32_t)(nc * out->mr);
    int64_t oc = (o + out->nr - 1) / out->nr * out->nr;
    out->oc = (int32_t)(oc < 256 ? oc : 256);
    // The x86 backend's smaller blocks (balance_conv_units), whole tiles.
    if (want_nc > 0 && want_nc < out->nc)
      out->nc = round_up_i32(want_nc, out->mr);
    if (want_oc > 0 && want_oc < out->oc)
      out->oc = round_up_i32(want_oc, out->nr);
    out->cols = pix;
    out->passes = (int32_t)ceil_div(kk < 1 ? 1 : kk, out->kc);
    out->reuse = out->join = 0;
    return;
  }
  if (!out->shifted) out->cols = out->e1 = out->e2 = out->xpad = 0;
  if (!out->shifted) out->s1 = out->s2 = 1;
  const int64_t cols = out->shifted ? out->cols : pix;
  out->cols = cols;
  int64_t panels = (cols + out->nr - 1) / out->nr;
  if (panels > 4) panels = 4;
  if (panels < 1) panels = 1;
  out->nc = (int32_t)panels * out->nr;
  if (want_nc > 0 && want_nc < out->nc)
    out->nc = round_up_i32(want_nc, out->nr);
  // Channels: the patches packed once per unit serve oc channels; 192 keeps
  // the accumulators (oc x nc) within an L2 beside the weight rows. (Fewer
  // channels a unit, to give a batch of 1 at 14x14 or 7x7 more units,
  // packs the patches that many more times: 3x3 256-256 @14 at batch 32
  // went from 51 to 70 ms of CPU time at oc 48.)
  int64_t oc = (o + out->mr - 1) / out->mr * out->mr;
  if (oc > 192) oc = 192;
  if (oc < out->mr) oc = out->mr;
  if (want_oc > 0 && want_oc < oc) oc = round_up_i32(want_oc, out->mr);
  out->oc = (int32_t)oc;
  out->passes = (int32_t)ceil_div(kk < 1 ? 1 : kk, out->kc);
  // Keep the patches for all channel blocks when there are several and
  // all passes' panels fit in 2 MiB (an L2 of the Xeons; beyond it the
  // blocks would stream them from L3, no cheaper than packing again). A
  // 1x1 at stride 1 with no padding packs nothing (jit/emit_conv.c).
  // (Grouped, each group packs patches of its own channels.)
  out->reuse = !out->shifted && !tj_kir_conv_reads_x_in_place(k) && o > oc &&
               groups == 1 &&
               (int64_t)out->passes * out->kc * out->nc * 4 <= kReuseBytes;
  out->join =
      !out->shifted && !tj_kir_conv_reads_x_in_place(k) && pix % out->nr != 0;
}

void tj_kir_conv_resolve(const tj_kir_t* k, int32_t lanes,
                         tj_kir_conv_schedule_t* out) {
  conv_resolve(k, lanes, true, out);
}

void tj_kir_conv_resolve_batch(const tj_kir_t* k, int32_t lanes, int64_t batch,
                               tj_kir_conv_schedule_t* out) {
  conv_resolve(k, lanes, k->schedule.kc <= 0 || batch < k->schedule.kc, out);
}

int64_t tj_kir_conv_scratch_bytes(const tj_kir_conv_schedule_t* s) {
  const int64_t passes = s->reuse ? s->passes : 1;
  return align64_i64(passes * s->kc * s->nc * 4) +
         align64_i64((int64_t)s->oc * s->nc * 4) +
         align64_i64((int64_t)s->nc * 3 * 4) + align64_i64((int64_t)s->nc * 8) +
         64 + align64_i64((int64_t)s->kc * 8) +
         align64_i64((int64_t)s->kc * 3 * 4) +
         (s->shifted || s->ocvec ? align64_i64(s->xpad * 4) : 0) +
         (s->ocvec ? align64_i64((int64_t)s->oc * s->nc * 4) : 0);
}

int64_t tj_kir_window_rows(const tj_kir_t* k) {
  // About 16K output elements a unit: planes of mobilenet's depthwise
  // layers (112x112 at most) split in a few blocks, so that a batch of 1
  // still has units for every thread, while a unit's rows are many enough
  // that its set-up (row pointers, masks) is small beside its loads. The
  // blocks of a plane are as even as the rows allow (130 rows: 65 + 65,
  // not 127 + 3), so that no unit is a sliver beside the others when the
  // threads share them out.
  int64_t rows = 1, cols = k->rank >= 3 ? k->dims[k->rank - 1].value : 1;
  for (int32_t d = 2; d + 1 < k->rank; ++d) rows *= k->dims[d].value;
  if (cols < 1) cols = 1;
  if (rows < 1) return 1;
  const int64_t per = (16384 + cols - 1) / cols;
  const int64_t blocks = (rows + per - 1) / per;
  return (rows + blocks - 1) / blocks;
}

void tj_kir_window_cvec_extent(const tj_kir_t* k, int32_t lanes,
                               int64_t* out_rows, int64_t* out_cols) {
  const tj_kir_conv_t* cv = &k->conv;
  const int64_t oh = k->rank == 4 ? k->dims[2].value : 1;
  const int64_t ow = k->dims[k->rank - 1].value;
  // Rows: every tap row of every output row, and x's rows after the low
  // pad. Columns: every tap column of every output column (a row
  // narrower than the lanes computes only its own pixels), and x's columns
  // after the low pad, copied a tile of |lanes| at a time.
  int64_t rows =
      (oh - 1) * cv->stride[1] + (cv->kernel[1] - 1) * cv->dilation[1] + 1;
  if (rows < cv->low[1] + cv->in[1]) rows = cv->low[1] + cv->in[1];
  int64_t cols =
      (ow - 1) * cv->stride[2] + (cv->kernel[2] - 1) * cv->dilation[2] + 1;
  const int64_t xin = cv->in[2] > lanes ? cv->in[2] : lanes;
  if (cols < cv->low[2] + xin) cols = cv->low[2] + xin;
  *out_rows = rows;
  *out_cols = cols;
}

bool tj_kir_window_cvec(const tj_kir_t* k, int32_t lanes) {
  const tj_kir_conv_t* cv = &k->conv;
  if (cv->window != TJ_KIR_WINDOW_DEPTHWISE && cv->window != TJ_KIR_WINDOW_MAX)
    return false;
  if ((lanes != 4 && lanes != 8 && lanes != 16) || k->rank != 4 ||
      cv->spatial != 2 || cv->in[0] != 1 || cv->kernel[0] != 1)
    return false;
  if (k->dims[1].param >= 0 || k->dims[2].param >= 0 || k->dims[3].param >= 0 ||
      k->dims[3].value > 16 || k->dims[3].value < 1 || k->dims[2].value < 1)
    return false;
  // One output channel an input channel (no channel multiplier): x's
  // channel stride is its plane.
  const int64_t ins = cv->in[1] * cv->in[2];
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* x = &k->buffers[i];
    if (x->role != TJ_KIR_CONV_X) continue;
    if (x->strides[0].param >= 0 || x->strides[1].param >= 0 ||
        x->strides[1].value != ins ||
        x->strides[0].value != k->dims[1].value * ins)
      return false;
  }
  int64_t rows, cols;
  tj_kir_window_cvec_extent(k, lanes, &rows, &cols);
  const int64_t taps = cv->kernel[1] * cv->kernel[2];
  const int64_t wtaps = (taps + lanes - 1) / lanes * lanes;
  return (rows * cols + wtaps) * lanes * 4 <= 32768;
}

bool tj_kir_window_blocks(const tj_kir_t* k, int32_t lanes) {
  const tj_kir_conv_t* cv = &k->conv;
  // At most 64 taps: the emitter unrolls them (and keeps a pointer per
  // tap row).
  if (k->kind != TJ_KIR_CONV || cv->window != TJ_KIR_WINDOW_MAX ||
      (lanes != 4 && lanes != 8 && lanes != 16) || k->rank != 4 ||
      cv->spatial != 2 || cv->in[0] != 1 || cv->kernel[0] != 1 ||
      cv->kernel[1] * cv->kernel[2] > 64)
    return false;
  if (k->dims[1].param >= 0 || k->dims[2].param >= 0 || k->dims[3].param >= 0 ||
      k->dims[1].value % lanes != 0 || k->dims[2].value < 1 ||
      k->dims[3].value < 1)
    return false;
  // x's channels are the output's (a pool): its channel stride its plane.
  const int64_t ins = cv->in[1] * cv->in[2];
  uint32_t outputs = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* x = &k->buffers[i];
    outputs += x->role == TJ_KIR_OUTPUT;
    if (x->role != TJ_KIR_CONV_X) continue;
    if (x->strides[0].param >= 0 || x->strides[1].param >= 0 ||
        x->strides[1].value != ins ||
        x->strides[0].value != k->dims[1].value * ins)
      return false;
  }
  return outputs == 1;
}

int64_t tj_kir_window_block_rows(const tj_kir_t* k, int32_t lanes) {
  // About 16K output floats a unit, as the row variant's units, rows as
  // even as the plane allows.
  const int64_t rows = k->dims[2].value, cols = k->dims[3].value;
  if (rows < 1 || cols < 1 || lanes < 1) return 1;
  const int64_t per = (16384 + cols * lanes - 1) / (cols * lanes);
  const int64_t blocks = (rows + per - 1) / per;
  return (rows + blocks - 1) / blocks;
}

tj_status_t tj_kir_launch_info(const tj_kir_t* k, int32_t lanes,
                               const int64_t* scalars, tj_kir_launch_t* out) {
  memset(out, 0, sizeof(*out));
  int64_t dims[TJ_KIR_MAX_RANK] = {0};
  for (int32_t d = 0; d < k->rank; ++d) {
    dims[d] = tj_kir_ival_eval(k->dims[d], scalars);
    if (dims[d] < 0) {
      return tj_invalid("kernel @%s: dim %d is %" PRId64, k->name, d, dims[d]);
    }
  }
  // Every unit count below is bounded by the element count of the space,
  // so checking that product for overflow covers them all.
  int64_t numel = 1;
  for (int32_t d = 0; d < k->rank; ++d) {
    if (tj_mul_overflow_i64(numel, dims[d], &numel)) {
      return tj_invalid("kernel @%s: the iteration space overflows int64",
                        k->name);
    }
  }
  switch (k->kind) {
    case TJ_KIR_POINTWISE: {
      int64_t outer = numel == 0 ? 0 : numel / dims[k->rank - 1];
      out->units = outer * ceil_div(dims[k->rank - 1], TJ_KIR_POINTWISE_BLOCK);
      return NULL;
    }
    case TJ_KIR_ROW_REDUCE: {
      int64_t rows = 1;
      for (int32_t d = 0; d + 1 < k->rank; ++d) rows *= dims[d];
      out->units = rows;
      return NULL;
    }
    case TJ_KIR_GEMM: {
      tj_kir_gemm_resolve(k, lanes, &out->schedule);
      const tj_kir_gemm_schedule_t* s = &out->schedule;
      int64_t kk = tj_kir_ival_eval(k->gemm_k, scalars);
      if (kk < 0) {
        return tj_invalid("kernel @%s: gemm k is %" PRId64, k->name, kk);
      }
      int64_t m = dims[k->rank - 2], n = dims[k->rank - 1];
      int64_t batch = 1;
      for (int32_t d = 0; d + 2 < k->rank; ++d) batch *= dims[d];
      out->units = batch * ceil_div(m, s->mc) * ceil_div(n, s->nc);
      // Packed B block (kc x nc), the packed A block when A is not
      // k-contiguous (mc / tile_m slivers of tile_m x kc and a vector
      // each), then, when K needs several passes, the f32 partial sums of
      // one unit (mc x nc); each rounded to 64 bytes.
      int64_t kc = kk < s->kc ? kk : s->kc;
      if (kc < 1) kc = 1;
      // An integer gemm's panels (qgemm, issue 17) hold groups of 2 or 4 k
      // and a correction row: kc + 1 rows bound them.
      int64_t brows = tj_kir_gemm_is_int8(k) ? kc + 1 : kc;
      int64_t bytes = (brows * s->nc * 4 + 63) / 64 * 64;
      if (tj_kir_gemm_packs_a(k)) {
        bytes +=
            ((kc * s->tile_m + lanes) * (s->mc / s->tile_m) * 4 + 63) / 64 * 64;
      }
      if (kk > s->kc) bytes += (int64_t)s->mc * s->nc * 4;
      out->scratch_bytes = bytes;
      return NULL;
    }
    case TJ_KIR_ATTENTION: {
      // Units: every (batch.., Hkv, G) times the query blocks; scratch as
      // tj_kir_attention_schedule_t says (emit_attention.c lays it out).
      tj_kir_attention_schedule_t as;
      tj_kir_attention_resolve(lanes, &as);
      int64_t d = tj_kir_ival_eval(k->attention.d, scalars);
      int64_t dv = tj_kir_ival_eval(k->attention.dv, scalars);
      if (d < 0 || dv < 0 || d > ((int64_t)1 << 32) ||
          dv > ((int64_t)1 << 32)) {
        return tj_invalid("kernel @%s: head dims %" PRId64 " and %" PRId64,
                          k->name, d, dv);
      }
      int64_t heads = 1;
      for (int32_t x = 0; x + 2 < k->rank; ++x) heads *= dims[x];
      out->units = heads * ceil_div(dims[k->rank - 2], as.uq);
      int64_t dvp = ceil_div(dv, as.nr) * as.nr;
      out->scratch_bytes = align64_i64((int64_t)as.bn * d * 4) +
                           align64_i64((int64_t)as.bm * as.bn * 4) +
                           align64_i64((int64_t)as.uq * dvp * 4) +
                           2 * align64_i64((int64_t)as.uq * 4) +
                           align64_i64((int64_t)as.uq * d * 4);
      return NULL;
    }
    case TJ_KIR_CONV: {
      if (k->conv.window != TJ_KIR_WINDOW_GEMM) {
        if (k->rank < 3) return tj_invalid("kernel @%s: window rank", k->name);
        int64_t rows = 1;
        for (int32_t d = 2; d + 1 < k->rank; ++d) rows *= dims[d];
        if (k->conv.yblock) {
          const int32_t bl = k->conv.yblock;
          out->units = dims[0] * ceil_div(dims[1], bl) *
                       ceil_div(dims[2], tj_kir_window_block_rows(k, bl));
        } else {
          out->units =
              tj_kir_window_cvec(k, lanes)
                  ? dims[0] * ceil_div(dims[1], lanes)
                  : dims[0] * dims[1] * ceil_div(rows, tj_kir_window_rows(k));
        }
        out->scratch_bytes = 0;
        return NULL;
      }
      tj_kir_conv_schedule_t cs;
      tj_kir_conv_resolve_batch(k, lanes, dims[0], &cs);
      if (k->rank < 3) return tj_invalid("kernel @%s: conv rank", k->name);
      int64_t pix = 1;
      for (int32_t d = 2; d < k->rank; ++d) pix *= dims[d];
      if (cs.shifted) pix = cs.cols;
      // Channel blocks: a group's channels in blocks of oc, every group.
      const int64_t groups = tj_kir_conv_groups(&k->conv);
      const int64_t oblocks = groups * ceil_div(dims[1] / groups, cs.oc);
      out->units = cs.join ? ceil_div(dims[0] * pix, cs.nc) * oblocks
                           : dims[0] * oblocks * ceil_div(pix, cs.nc);
      out->scratch_bytes = tj_kir_conv_scratch_bytes(&cs);
      return NULL;
    }
  }
  return tj_internal("kernel @%s: unknown template", k->name);
}
