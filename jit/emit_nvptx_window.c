// The CONV template's direct window variant on NVPTX (cudabw, issue 15): a
// depthwise conv, max_pool or avg_pool over NCHW f32 (kir/lower_window.c),
// one pass over x with no padded copy and no pad boxes. Decompose's form
// (a pointwise kernel of strided slices per box of the padded input, each
// tap a scalar load) took a launch per box and read x through 4-byte
// gathers. Here a thread owns one output column of R consecutive output
// rows of one plane (image, channel):
//
//   for each depth tap kd, and each input row q that the R rows' windows
//   read (their union, each row once):
//     for each column tap kw:
//       v = x[kd, q, j * s - low + kw * dil]  (a tap outside x reads a
//                                              clamped address and takes
//                                              the op's identity)
//       for each of the R rows r whose window reads row q (tap kh):
//         acc[r] = acc[r] op v  (depthwise: fma(v, w[kd, kh, kw], acc[r]))
//   out[r, j] = acc[r] (+ bias) (/ count: a product of per-axis counts)
//
// so a thread loads (R - 1) s + (KH - 1) dil + 1 rows of taps for R output
// rows instead of R KH, and a warp's 32 threads read 32 neighbouring
// columns (coalesced; stride 2 reads every other element, the rest of the
// sector being the next tap's). Every tap is unrolled at emit time (the
// backend keeps windows of at most TJ_NVPTX_WINDOW_MAX_TAPS taps whole;
// lib/window.h's tj_window_direct), the depthwise taps are loaded once a
// thread. Blocks of 256 threads take a plane's items (item = (d, row
// block, column)) along x, planes along y; planes smaller than a block
// share one (256 / items of them), so 7x7 planes do not idle 80% of it.
// The depthwise sum runs over the taps in (kd, kh, kw) order, as the
// reference's; max propagates NaN (tj_emit_fminmax); avg divides by the
// count of taps inside x (count_include_pad: inside the declared pads).
// Every size but the batch is a constant of the kernel.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx.h"

#define kThreads 256
#define kMaxRows 4  // output rows a thread, at most

// The launch shape, shared by the emitter and the launch: |*rows| output
// rows a thread (|rows_wanted| where it is 1 to kMaxRows, else chosen
// here; the launch passes the emitter's, tj_nvptx_kernel_t.tile_m),
// |*items| work items a plane (depth x row blocks x columns),
// |*per_block| planes a block (1 where a plane spans blocks).
static void window_shape(const tj_kir_t* k, int32_t rows_wanted, int32_t* rows,
                         int64_t* items, int64_t* per_block) {
  const tj_kir_conv_t* cv = &k->conv;
  const int32_t ns = cv->spatial;
  int64_t od[3] = {1, 1, 1};
  for (int32_t i = 0; i < ns; ++i) od[3 - ns + i] = k->dims[2 + i].value;
  int32_t r = 1;
  if (ns >= 2 && rows_wanted >= 1 && rows_wanted <= kMaxRows) {
    r = rows_wanted;
    if (od[1] < r) r = (int32_t)(od[1] > 0 ? od[1] : 1);
  } else if (ns >= 2) {
    // A row block reuses its tap rows; but at a small output (a batch-1
    // 7x7 layer) fewer, larger items would leave SMs idle.
    int64_t n = tj_kir_ival_is_const(k->dims[0], k->dims[0].value)
                    ? k->dims[0].value
                    : 1;
    int64_t outputs = n * k->dims[1].value * od[0] * od[1] * od[2];
    r = cv->stride[1] == 1 ? kMaxRows : 2;
    if (outputs < (int64_t)132 * 2048) r = 1;
    if (od[1] < r) r = (int32_t)od[1];
    if (r < 1) r = 1;
  }
  *rows = r;
  *items = od[0] * ((od[1] + r - 1) / r) * od[2];
  *per_block = *items >= kThreads ? 1 : kThreads / (*items > 0 ? *items : 1);
}

static LLVMValueRef c32(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i32, (unsigned long long)v, 1);
}

static LLVMValueRef c64(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef load_f32(tj_emit_t* em, LLVMValueRef base,
                             LLVMValueRef idx) {
  LLVMValueRef p = LLVMBuildGEP2(em->b, em->t_f32, base, &idx, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(em->b, em->t_f32, p, "");
  LLVMSetAlignment(v, 4);
  return v;
}

// Per axis of a window: the coordinate of tap |t| from |origin| (i32), whether
// it lies inside x (|*inside|), its clamped coordinate (0 outside), and
// whether avg_pool counts it (|*counted|).
typedef struct tap_t {
  LLVMValueRef coord, inside, counted;
} tap_t;

static tap_t tap_at(tj_emit_t* em, int32_t op, LLVMValueRef origin,
                    int64_t offset, int64_t in, int64_t low, int64_t high) {
  LLVMBuilderRef b = em->b;
  tap_t t;
  LLVMValueRef c = LLVMBuildAdd(b, origin, c32(em, offset), "");
  t.inside = LLVMBuildICmp(b, LLVMIntULT, c, c32(em, in), "");
  t.coord = LLVMBuildSelect(b, t.inside, c, c32(em, 0), "");
  t.counted = t.inside;
  if (op == TJ_KIR_WINDOW_AVG_PAD) {
    // count_include_pad: taps within the declared pads count, those past
    // them (ceil_mode's last windows) do not.
    t.counted = LLVMBuildAnd(
        b, LLVMBuildICmp(b, LLVMIntSGE, c, c32(em, -low), ""),
        LLVMBuildICmp(b, LLVMIntSLT, c, c32(em, in + high), ""), "");
  }
  return t;
}

static LLVMValueRef combine(tj_emit_t* em, int32_t op, LLVMValueRef acc,
                            LLVMValueRef v, LLVMValueRef w) {
  if (op == TJ_KIR_WINDOW_DEPTHWISE) return tj_emit_fmuladd(em, v, w, acc);
  if (op == TJ_KIR_WINDOW_MAX) return tj_emit_fminmax(em, true, acc, v);
  return LLVMBuildFAdd(em->b, acc, v, "");
}

tj_status_t tj_nvptx_emit_window(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  const tj_kir_conv_t* cv = &k->conv;
  LLVMBuilderRef b = em->b;
  const int32_t op = cv->window;
  // lib/passes/fuse.c's conv_epilogue joins followers to dense convs only.
  if (k->num_phases > 0 && k->phases[0].num_insts > 0)
    return tj_unsupported("kernel @%s: a window kernel with an epilogue",
                          k->name);
  int32_t xb = -1, wb = -1, ob = -1, bb = -1;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (buf->dtype != TJ_DTYPE_F32)
      return tj_unsupported("kernel @%s: window buffer %%%s is %s, not f32",
                            k->name, buf->name, tj_dtype_name(buf->dtype));
    switch (buf->role) {
      case TJ_KIR_CONV_X:
        xb = (int32_t)i;
        break;
      case TJ_KIR_CONV_W:
        wb = (int32_t)i;
        break;
      case TJ_KIR_CONV_BIAS:
        bb = (int32_t)i;
        break;
      case TJ_KIR_OUTPUT:
        ob = (int32_t)i;
        break;
      default:
        return tj_unsupported("kernel @%s: a window kernel with an epilogue",
                              k->name);
    }
  }
  const int32_t ns = cv->spatial;
  if (xb < 0 || ob < 0 || (op == TJ_KIR_WINDOW_DEPTHWISE && wb < 0) || ns < 1 ||
      ns > 3 || k->rank != ns + 2)
    return tj_internal("kernel @%s: window buffers missing", k->name);
  int64_t od[3], ins = 1, op_plane = 1, taps = 1;
  for (int32_t d = 0; d < 3; ++d) {
    od[d] = d >= 3 - ns ? k->dims[2 + d - (3 - ns)].value : 1;
    ins *= cv->in[d];
    op_plane *= od[d];
    taps *= cv->kernel[d];
  }
  const int64_t O = k->dims[1].value;
  // x's channels: its batch stride over its channel stride (row-major,
  // constants: kir/lower_window.c); a depth multiplier M = O / C maps
  // output channel o to input channel o / M.
  const tj_kir_buffer_t* xbuf = &k->buffers[xb];
  if (xbuf->strides[0].param >= 0 || xbuf->strides[1].param >= 0 ||
      xbuf->strides[1].value < 1)
    return tj_internal("kernel @%s: window kernel buffers", k->name);
  const int64_t C = xbuf->strides[0].value / xbuf->strides[1].value;
  const int64_t mult = C > 0 && O % C == 0 ? O / C : 1;
  if (taps > TJ_NVPTX_WINDOW_MAX_TAPS || ins > INT32_MAX / 4 ||
      op_plane > INT32_MAX / 4)
    return tj_unsupported(
        "kernel @%s: a window of %lld taps over planes of %lld elements is "
        "past the CUDA window kernel's (at most %d taps, 32-bit offsets)",
        k->name, (long long)taps, (long long)ins, TJ_NVPTX_WINDOW_MAX_TAPS);
  int32_t R;
  int64_t items, per_block;
  window_shape(k, nv->options.window_rows, &R, &items, &per_block);
  nv->info->threads = kThreads;
  nv->info->tile_m = R;
  const int64_t rb = (od[1] + R - 1) / R;

  // Which plane and item this thread takes.
  LLVMValueRef tid = tj_nvptx_sreg(nv, "tid.x");
  LLVMValueRef item, sub = NULL, item_ok;
  if (per_block == 1) {
    item = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_nvptx_sreg(nv, "ctaid.x"), c32(em, kThreads), ""),
        tid, "item");
    item_ok = LLVMBuildICmp(b, LLVMIntSLT, item, c32(em, items), "");
  } else {
    item = LLVMBuildURem(b, tid, c32(em, items), "item");
    sub = LLVMBuildZExt(b, LLVMBuildUDiv(b, tid, c32(em, items), ""), em->t_i64,
                        "sub");
    item_ok = LLVMBuildICmp(b, LLVMIntULT, tid, c32(em, per_block * items), "");
  }
  LLVMValueRef planes = LLVMBuildMul(b, em->dim[0], c64(em, O), "planes");
  tj_emit_if_t live;
  tj_emit_if_begin(em, &live, item_ok, "live");
  // The item's coordinates and window origins, once for every plane.
  LLVMValueRef col = LLVMBuildURem(b, item, c32(em, od[2]), "col");
  LLVMValueRef t = LLVMBuildUDiv(b, item, c32(em, od[2]), "");
  LLVMValueRef rblk = LLVMBuildURem(b, t, c32(em, rb), "");
  LLVMValueRef dep = LLVMBuildUDiv(b, t, c32(em, rb), "");
  LLVMValueRef row0 = LLVMBuildMul(b, rblk, c32(em, R), "row0");
  LLVMValueRef origin[3];
  origin[0] = LLVMBuildSub(b, LLVMBuildMul(b, dep, c32(em, cv->stride[0]), ""),
                           c32(em, cv->low[0]), "");
  origin[1] = LLVMBuildSub(b, LLVMBuildMul(b, row0, c32(em, cv->stride[1]), ""),
                           c32(em, cv->low[1]), "");
  origin[2] = LLVMBuildSub(b, LLVMBuildMul(b, col, c32(em, cv->stride[2]), ""),
                           c32(em, cv->low[2]), "");
  LLVMValueRef out_item = LLVMBuildAdd(
      b,
      LLVMBuildMul(
          b,
          LLVMBuildAdd(b, LLVMBuildMul(b, dep, c32(em, od[1]), ""), row0, ""),
          c32(em, od[2]), ""),
      col, "out_item");
  // The column taps and depth taps, the same for every row.
  const int32_t op_avg =
      op == TJ_KIR_WINDOW_AVG || op == TJ_KIR_WINDOW_AVG_PAD ? 1 : 0;
  tap_t tw[TJ_NVPTX_WINDOW_MAX_TAPS], td[TJ_NVPTX_WINDOW_MAX_TAPS];
  for (int64_t j = 0; j < cv->kernel[2]; ++j)
    tw[j] = tap_at(em, op, origin[2], j * cv->dilation[2], cv->in[2],
                   cv->low[2], cv->high[2]);
  for (int64_t j = 0; j < cv->kernel[0]; ++j)
    td[j] = tap_at(em, op, origin[0], j * cv->dilation[0], cv->in[0],
                   cv->low[0], cv->high[0]);
  // avg_pool's per-axis counts (the window is a box: its count is their
  // product) of the columns and depths; rows below.
  LLVMValueRef cnt_w = NULL, cnt_d = NULL;
  if (op_avg) {
    cnt_w = c32(em, 0);
    for (int64_t j = 0; j < cv->kernel[2]; ++j)
      cnt_w = LLVMBuildAdd(b, cnt_w,
                           LLVMBuildZExt(b, tw[j].counted, em->t_i32, ""), "");
    cnt_d = c32(em, 0);
    for (int64_t j = 0; j < cv->kernel[0]; ++j)
      cnt_d = LLVMBuildAdd(b, cnt_d,
                           LLVMBuildZExt(b, td[j].counted, em->t_i32, ""), "");
  }

  // The plane loop: planes sub, sub + per_block, ... of block y's groups.
  tj_emit_loop_t pl;
  LLVMValueRef g0 = tj_nvptx_sreg64(nv, "ctaid.y");
  LLVMValueRef gstep = tj_nvptx_sreg64(nv, "nctaid.y");
  LLVMValueRef groups =
      LLVMBuildUDiv(b, LLVMBuildAdd(b, planes, c64(em, per_block - 1), ""),
                    c64(em, per_block), "groups");
  LLVMValueRef grp = tj_emit_loop_begin(em, &pl, g0, groups, gstep, "group");
  LLVMValueRef plane = LLVMBuildMul(b, grp, c64(em, per_block), "");
  if (sub) plane = LLVMBuildAdd(b, plane, sub, "plane");
  tj_emit_if_t in_range;
  tj_emit_if_begin(em, &in_range,
                   LLVMBuildICmp(b, LLVMIntSLT, plane, planes, ""), "plane_ok");
  {
    // x's plane: image plane / O, input channel o / M (pools and plain
    // depthwise convs: the plane itself).
    LLVMValueRef oc = LLVMBuildURem(b, plane, c64(em, O), "o");
    LLVMValueRef xplane = plane;
    if (mult != 1 || C != O) {
      xplane =
          LLVMBuildAdd(b,
                       LLVMBuildMul(b, LLVMBuildUDiv(b, plane, c64(em, O), ""),
                                    c64(em, C), ""),
                       LLVMBuildUDiv(b, oc, c64(em, mult), ""), "xplane");
    }
    LLVMValueRef xoff = LLVMBuildMul(b, xplane, c64(em, ins), "");
    LLVMValueRef xbase =
        LLVMBuildGEP2(b, em->t_f32, em->base[xb], &xoff, 1, "xbase");
    LLVMValueRef wv[TJ_NVPTX_WINDOW_MAX_TAPS];
    if (op == TJ_KIR_WINDOW_DEPTHWISE) {
      LLVMValueRef woff = LLVMBuildMul(b, oc, c64(em, taps), "");
      LLVMValueRef wrow =
          LLVMBuildGEP2(b, em->t_f32, em->base[wb], &woff, 1, "wrow");
      for (int64_t j = 0; j < taps; ++j) wv[j] = load_f32(em, wrow, c32(em, j));
    }
    const double ident = op == TJ_KIR_WINDOW_MAX ? -INFINITY : 0.0;
    LLVMValueRef acc[kMaxRows];
    for (int32_t r = 0; r < R; ++r) acc[r] = tj_emit_fconst(em->t_f32, ident);
    // The rows the R output rows read, relative to row0's origin.
    const int64_t span =
        (R - 1) * cv->stride[1] + (cv->kernel[1] - 1) * cv->dilation[1] + 1;
    LLVMValueRef cnt_h[kMaxRows];
    for (int32_t r = 0; r < R; ++r) cnt_h[r] = c32(em, 0);
    for (int64_t kd = 0; kd < cv->kernel[0]; ++kd) {
      for (int64_t q = 0; q < span; ++q) {
        // Which rows read input row q, through which tap.
        int64_t kh_of[kMaxRows];
        bool any = false;
        for (int32_t r = 0; r < R; ++r) {
          kh_of[r] = -1;
          int64_t rel = q - r * cv->stride[1];
          if (rel >= 0 && rel % cv->dilation[1] == 0 &&
              rel / cv->dilation[1] < cv->kernel[1]) {
            kh_of[r] = rel / cv->dilation[1];
            any = true;
          }
        }
        if (!any) continue;
        tap_t th =
            tap_at(em, op, origin[1], q, cv->in[1], cv->low[1], cv->high[1]);
        if (op_avg && kd == 0) {
          for (int32_t r = 0; r < R; ++r) {
            if (kh_of[r] < 0) continue;
            cnt_h[r] = LLVMBuildAdd(
                b, cnt_h[r], LLVMBuildZExt(b, th.counted, em->t_i32, ""), "");
          }
        }
        LLVMValueRef row_in =
            LLVMBuildAnd(b, td[kd].inside, th.inside, "row_in");
        LLVMValueRef rowoff = LLVMBuildMul(
            b,
            LLVMBuildAdd(b,
                         LLVMBuildMul(b, td[kd].coord, c32(em, cv->in[1]), ""),
                         th.coord, ""),
            c32(em, cv->in[2]), "rowoff");
        for (int64_t kw = 0; kw < cv->kernel[2]; ++kw) {
          LLVMValueRef v =
              load_f32(em, xbase, LLVMBuildAdd(b, rowoff, tw[kw].coord, ""));
          LLVMValueRef in = LLVMBuildAnd(b, row_in, tw[kw].inside, "");
          v = LLVMBuildSelect(b, in, v, tj_emit_fconst(em->t_f32, ident), "");
          for (int32_t r = 0; r < R; ++r) {
            if (kh_of[r] < 0) continue;
            LLVMValueRef w =
                op == TJ_KIR_WINDOW_DEPTHWISE
                    ? wv[(kd * cv->kernel[1] + kh_of[r]) * cv->kernel[2] + kw]
                    : NULL;
            acc[r] = combine(em, op, acc[r], v, w);
          }
        }
      }
    }
    LLVMValueRef bias = NULL;
    if (op == TJ_KIR_WINDOW_DEPTHWISE && bb >= 0)
      bias = load_f32(em, em->base[bb], LLVMBuildTrunc(b, oc, em->t_i32, ""));
    LLVMValueRef ooff = LLVMBuildMul(b, plane, c64(em, op_plane), "");
    LLVMValueRef obase =
        LLVMBuildGEP2(b, em->t_f32, em->base[ob], &ooff, 1, "oplane");
    for (int32_t r = 0; r < R; ++r) {
      LLVMValueRef y = acc[r];
      if (bias) y = LLVMBuildFAdd(b, y, bias, "");
      if (op_avg) {
        LLVMValueRef cnt =
            LLVMBuildMul(b, LLVMBuildMul(b, cnt_d, cnt_h[r], ""), cnt_w, "");
        y = LLVMBuildFDiv(b, y, LLVMBuildUIToFP(b, cnt, em->t_f32, ""), "");
      }
      tj_emit_if_t row_ok;
      const bool guard = od[1] % R != 0 && r > 0;
      if (guard) {
        tj_emit_if_begin(
            em, &row_ok,
            LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildAdd(b, row0, c32(em, r), ""),
                          c32(em, od[1]), ""),
            "row_ok");
      }
      LLVMValueRef at = LLVMBuildAdd(b, out_item, c32(em, r * od[2]), "");
      LLVMValueRef p = LLVMBuildGEP2(b, em->t_f32, obase, &at, 1, "");
      LLVMSetAlignment(LLVMBuildStore(b, y, p), 4);
      if (guard) tj_emit_if_end(em, &row_ok);
    }
  }
  tj_emit_if_end(em, &in_range);
  tj_emit_loop_end(em, &pl);
  tj_emit_if_end(em, &live);
  return NULL;
}

tj_status_t tj_nvptx_window_launch(const tj_kir_t* k,
                                   const tj_nvptx_kernel_t* info,
                                   const int64_t* scalars,
                                   tj_nvptx_launch_t* out) {
  int64_t n = tj_kir_ival_eval(k->dims[0], scalars);
  if (n < 0)
    return tj_invalid("kernel @%s: batch is %lld", k->name, (long long)n);
  int32_t rows;
  int64_t items, per_block, planes;
  window_shape(k, info->tile_m, &rows, &items, &per_block);
  if (tj_mul_overflow_i64(n, k->dims[1].value, &planes))
    return tj_invalid("kernel @%s: batch %lld overflows", k->name,
                      (long long)n);
  if (planes == 0 || items == 0) {
    out->empty = true;
    return NULL;
  }
  int64_t gx = per_block == 1 ? (items + kThreads - 1) / kThreads : 1;
  int64_t gy = (planes + per_block - 1) / per_block;
  if (gx > 2147483647)
    return tj_unsupported("kernel @%s: %lld blocks a plane", k->name,
                          (long long)gx);
  out->grid[0] = (uint32_t)gx;
  out->grid[1] = (uint32_t)(gy < 65535 ? gy : 65535);
  out->grid[2] = 1;
  out->block[0] = (uint32_t)info->threads;
  out->block[1] = out->block[2] = 1;
  return NULL;
}
