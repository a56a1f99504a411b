// Convolution, pooling and embedding gather on x86 (issue 15's x86 rows)
// through the public API, beside the memory-bandwidth yardsticks measured
// in the same run:
//   - conv2d on ResNet-50 v1.5's layer shapes (the distinct 1x1 and 3x3
//     layers and the 7x7/2 stem), f32 NCHW, constant weights and bias,
//     batch 1 and 32: ms and GFLOP/s (2 N O C/G K^2 P Q);
//   - depthwise 3x3 conv (MobileNet shapes) and max/avg/global pools:
//     GB/s of input + output bytes;
//   - gather of 8192 rows of a [50000, 768] f32 table: GB/s of the rows
//     read and written (2 x 8192 x 768 x 4 B); the row ids are drawn anew
//     before each run (not timed), as a new batch of tokens is, so a run
//     does not find the rows the one before it left in the caches;
//   - copy: memcpy of 256 MiB split over the same threads, GB/s of bytes
//     read + written; and a STREAM triad (12 B per element).
// Threads: 1 and every online CPU (tj_x86_compile_options_t.num_threads).
// Each figure is the median of --reps runs after a warm-up, with min and
// max (wall clock), and the median process CPU time. Rates (GFLOP/s, GB/s,
// the fraction of copy) come from the CPU time at 1 thread, which other
// load on a shared machine disturbs far less than wall time, and from wall
// time with more threads.
//
// oneDNN's figures come from torch in the same invocation:
//   python3 bench/conv_torch.py --ours build/bench/conv_bench [--batch 1]
// which reads this program's case list (--list) and its --csv lines and
// prints the ratios.
//
//   build/bench/conv_bench [--reps N] [--batch 1|32|0] [--only SUBSTR]
//                          [--threads T] [--csv] [--list] [--profile]

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/stream_triad.h"
#include "tensorjit.h"

static int g_reps = 5;
static bool g_csv = false;
static bool g_profile = false;  // --profile: each case's kernels after it

typedef enum kind_e {
  kConv,
  kMaxPool,
  kAvgPool,
  kGlobalPool,
  kGather,
} kind_t;

static const char* const kKindNames[] = {"conv", "maxpool", "avgpool",
                                         "globalpool", "gather"};

// One case. conv: x [n, c, h, w], w [o, c/groups, k, k]; pools: a k x k
// window; gather: a table [c, o] (vocab, width) read at n rows.
typedef struct case_t {
  const char* name;
  kind_t kind;
  int64_t n, c, h, w, o, k, stride, pad, groups;
  // conv: a chain of this many convs, relu between them (0 or 1: one; the
  // convs after the first 3x3/1 o-o with pads 1, their own weight where c
  // != o), whose values between convs the x86 backend may hold blocked
  // (nchwc, issue 15; TJ_LAYOUT=nchw keeps them row-major for A/B). Not
  // listed for the torch script.
  int64_t chain;
} case_t;

static const case_t kCases[] = {
    {"conv1 7x7/2 3-64 @224", kConv, 1, 3, 224, 224, 64, 7, 2, 3, 1, 0},
    // nchwc2: the stem storing blocks for a 3x3 conv that reads them.
    {"conv1 7x7/2 3-64 @224 x2 chain", kConv, 1, 3, 224, 224, 64, 7, 2, 3, 1,
     2},
    {"3x3 64-64 @56", kConv, 1, 64, 56, 56, 64, 3, 1, 1, 1, 0},
    {"3x3 64-64 @56 x2 chain", kConv, 1, 64, 56, 56, 64, 3, 1, 1, 1, 2},
    {"1x1 256-64 @56", kConv, 1, 256, 56, 56, 64, 1, 1, 0, 1, 0},
    {"1x1 64-256 @56", kConv, 1, 64, 56, 56, 256, 1, 1, 0, 1, 0},
    {"3x3/2 128-128 @56", kConv, 1, 128, 56, 56, 128, 3, 2, 1, 1, 0},
    {"3x3 128-128 @28", kConv, 1, 128, 28, 28, 128, 3, 1, 1, 1, 0},
    {"3x3 128-128 @28 x2 chain", kConv, 1, 128, 28, 28, 128, 3, 1, 1, 1, 2},
    {"1x1 512-128 @28", kConv, 1, 512, 28, 28, 128, 1, 1, 0, 1, 0},
    {"1x1/2 512-1024 @28", kConv, 1, 512, 28, 28, 1024, 1, 2, 0, 1, 0},
    {"3x3 256-256 @14", kConv, 1, 256, 14, 14, 256, 3, 1, 1, 1, 0},
    {"3x3 256-256 @14 x2 chain", kConv, 1, 256, 14, 14, 256, 3, 1, 1, 1, 2},
    {"1x1 1024-256 @14", kConv, 1, 1024, 14, 14, 256, 1, 1, 0, 1, 0},
    {"1x1 256-1024 @14", kConv, 1, 256, 14, 14, 1024, 1, 1, 0, 1, 0},
    {"3x3 512-512 @7", kConv, 1, 512, 7, 7, 512, 3, 1, 1, 1, 0},
    {"1x1 2048-512 @7", kConv, 1, 2048, 7, 7, 512, 1, 1, 0, 1, 0},
    {"1x1 512-2048 @7", kConv, 1, 512, 7, 7, 2048, 1, 1, 0, 1, 0},
    // Grouped (issue 15, grouped): resnext50_32x4d's 3x3 convs (32 groups
    // of 4 to 32 channels) and regnet_y_400mf's (groups of 8).
    {"g32 3x3 128-128 @56", kConv, 1, 128, 56, 56, 128, 3, 1, 1, 32, 0},
    {"g32 3x3/2 256-256 @56", kConv, 1, 256, 56, 56, 256, 3, 2, 1, 32, 0},
    {"g32 3x3 256-256 @28", kConv, 1, 256, 28, 28, 256, 3, 1, 1, 32, 0},
    {"g32 3x3 512-512 @14", kConv, 1, 512, 14, 14, 512, 3, 1, 1, 32, 0},
    {"g32 3x3 1024-1024 @7", kConv, 1, 1024, 7, 7, 1024, 3, 1, 1, 32, 0},
    {"g13 3x3 104-104 @28", kConv, 1, 104, 28, 28, 104, 3, 1, 1, 13, 0},
    {"g55 3x3 440-440 @7", kConv, 1, 440, 7, 7, 440, 3, 1, 1, 55, 0},
    // mobilenet_v2's expand and project 1x1s (few input channels, wide
    // images).
    {"1x1 16-96 @112", kConv, 1, 16, 112, 112, 96, 1, 1, 0, 1, 0},
    {"1x1 144-24 @56", kConv, 1, 144, 56, 56, 24, 1, 1, 0, 1, 0},
    {"1x1 24-144 @56", kConv, 1, 24, 56, 56, 144, 1, 1, 0, 1, 0},
    {"dw 3x3 144 @56", kConv, 1, 144, 56, 56, 144, 3, 1, 1, 144, 0},
    {"dw 3x3/2 96 @112", kConv, 1, 96, 112, 112, 96, 3, 2, 1, 96, 0},
    {"maxpool 3x3/2 64 @112", kMaxPool, 1, 64, 112, 112, 64, 3, 2, 1, 1, 0},
    {"avgpool 3x3 256 @28", kAvgPool, 1, 256, 28, 28, 256, 3, 1, 1, 1, 0},
    {"globalpool 2048 @7", kGlobalPool, 1, 2048, 7, 7, 2048, 7, 1, 0, 1, 0},
    {"gather 8192 of 50000x768", kGather, 8192, 50000, 1, 1, 768, 0, 0, 0, 0,
     0},
};
enum { kNumCases = sizeof(kCases) / sizeof(kCases[0]) };

static double now_ms(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef struct timing_t {
  double med, lo, hi, cpu;  // ms
} timing_t;

static void check(tj_status_t status, const char* what) {
  if (!status) return;
  fprintf(stderr, "conv_bench: %s: %s\n", what, tj_status_message(status));
  tj_status_free(status);
  exit(1);
}

static float* make_data(int64_t n, uint32_t seed) {
  float* p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  if (!p) exit(1);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  return p;
}

static int64_t out_size(const case_t* c) {
  return (c->h + 2 * c->pad - c->k) / c->stride + 1;
}

// FLOPs of a conv; bytes of input + output for the others.
static double work_of(const case_t* c, int64_t n) {
  if (c->kind == kGather) return 2.0 * (double)(c->n * c->o) * 4;
  const int64_t p = c->kind == kGlobalPool ? 1 : out_size(c);
  const double in = (double)(n * c->c * c->h * c->w) * 4;
  const double out = (double)(n * c->o * p * p) * 4;
  if (c->kind == kConv && c->groups == c->c) return in + out;
  if (c->kind == kConv && c->chain > 1 && c->c != c->o)
    return 2.0 * (double)(n * c->o * p * p) *
           (double)(c->c * c->k * c->k + (c->chain - 1) * c->o * 9);
  if (c->kind == kConv)
    return 2.0 * (double)(c->chain > 1 ? c->chain : 1) *
           (double)(n * c->o * (c->c / c->groups) * c->k * c->k * p * p);
  return in + out;
}

static bool is_bandwidth(const case_t* c) {
  return c->kind != kConv || c->groups == c->c;
}

typedef struct built_t {
  tj_executable_t* exe;
  tj_tensor_t in[3];
  int num_in;
  tj_tensor_t out;
  void* buffers[4];
  int64_t dims[4][4];  // the shapes the tensors point at: x, w, b, y
  int64_t* ids;        // the gather's row ids, drawn anew before each run
  int64_t num_ids, vocab;
  uint32_t seed;
} built_t;

static void draw_ids(built_t* b) {
  for (int64_t i = 0; i < b->num_ids; ++i) {
    b->seed = b->seed * 1664525u + 1013904223u;
    b->ids[i] = (int64_t)(b->seed >> 8) % b->vocab;
  }
}

// Builds and compiles case |c| at batch |n| into |*b| (which the
// tensors point into: it must not move).
static void build(tj_context_t* ctx, const case_t* c, int64_t n, int threads,
                  built_t* b) {
  memset(b, 0, sizeof(*b));
  tj_graph_t* g = NULL;
  check(tj_graph_create(ctx, "conv_bench", &g), "graph");
  tj_value_t y;
  int64_t* xd = b->dims[0];
  xd[0] = n;
  xd[1] = c->c;
  xd[2] = c->h;
  xd[3] = c->w;
  if (c->kind == kGather) {
    int64_t *td = b->dims[0], *id = b->dims[1];
    td[0] = c->c;
    td[1] = c->o;
    id[0] = c->n;
    tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, td, "table");
    tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 1, id, "ids");
    y = tj_graph_gather(g, t, ids, 0);
    float* tab = make_data(c->c * c->o, 1);
    int64_t* idx = malloc((size_t)c->n * sizeof(int64_t));
    if (!idx) exit(1);
    b->ids = idx;
    b->num_ids = c->n;
    b->vocab = c->c;
    b->seed = 7;
    draw_ids(b);
    b->in[0] = tj_tensor_make(tab, TJ_DTYPE_F32, 2, td);
    b->in[1] = tj_tensor_make(idx, TJ_DTYPE_I64, 1, id);
    b->num_in = 2;
    b->buffers[0] = tab;
    b->buffers[1] = idx;
  } else {
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 4, xd, "x");
    float* xb = make_data(n * c->c * c->h * c->w, 1);
    b->in[0] = tj_tensor_make(xb, TJ_DTYPE_F32, 4, xd);
    b->buffers[0] = xb;
    b->num_in = 1;
    tj_conv_attrs_t a;
    memset(&a, 0, sizeof(a));
    for (int i = 0; i < 2; ++i) {
      a.kernel[i] = c->k;
      a.strides[i] = c->stride;
      a.pads_begin[i] = a.pads_end[i] = c->pad;
    }
    if (c->kind == kConv) {
      a.groups = c->groups;
      int64_t *wd = b->dims[1], *bd = b->dims[2];
      wd[0] = c->o;
      wd[1] = c->c / c->groups;
      wd[2] = wd[3] = c->k;
      bd[0] = c->o;
      // Weights and bias are constants, as a model's (an ONNX file's
      // initializers): what the compiler does to them once is not timed.
      float* wb = make_data(wd[0] * wd[1] * wd[2] * wd[3], 2);
      float* bb = make_data(c->o, 3);
      tj_value_t w = tj_graph_constant(
          g, TJ_DTYPE_F32, 4, wd, wb,
          (size_t)(wd[0] * wd[1] * wd[2] * wd[3]) * sizeof(float));
      tj_value_t bias = tj_graph_constant(g, TJ_DTYPE_F32, 1, bd, bb,
                                          (size_t)c->o * sizeof(float));
      y = tj_graph_conv(g, x, w, bias, &a);
      if (c->chain > 1 && c->c != c->o) {
        float* w2b = make_data(c->o * c->o * 9, 5);
        w = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){c->o, c->o, 3, 3},
                              w2b, (size_t)(c->o * c->o * 9) * sizeof(float));
        free(w2b);
        for (int i = 0; i < 2; ++i) {
          a.kernel[i] = 3;
          a.strides[i] = 1;
          a.pads_begin[i] = a.pads_end[i] = 1;
        }
      }
      for (int64_t i = 1; i < c->chain; ++i)
        y = tj_graph_conv(g, tj_graph_relu(g, y), w, bias, &a);
      free(wb);
      free(bb);
    } else if (c->kind == kMaxPool) {
      y = tj_graph_max_pool(g, x, &a);
    } else if (c->kind == kAvgPool) {
      a.count_include_pad = true;
      y = tj_graph_avg_pool(g, x, &a);
    } else {
      y = tj_graph_mean(g, x, 2, (int32_t[]){2, 3}, true);
    }
  }
  tj_graph_output(g, y, "y");
  check(tj_graph_finalize(g), c->name);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = threads;
  check(tj_compile(g, &opts, &b->exe), c->name);
  int64_t* yd = b->dims[3];
  int32_t rank = 0;
  if (c->kind == kGather) {
    yd[0] = c->n;
    yd[1] = c->o;
    rank = 2;
  } else {
    const int64_t p = c->kind == kGlobalPool ? 1 : out_size(c);
    yd[0] = n;
    yd[1] = c->o;
    yd[2] = yd[3] = p;
    rank = 4;
  }
  int64_t count = 1;
  for (int32_t i = 0; i < rank; ++i) count *= yd[i];
  b->buffers[3] = make_data(count, 4);
  b->out = tj_tensor_make(b->buffers[3], TJ_DTYPE_F32, rank, yd);
  tj_graph_destroy(g);
}

static void destroy(built_t* b) {
  tj_executable_release(b->exe);
  for (int i = 0; i < 4; ++i) free(b->buffers[i]);
}

static timing_t time_exe(built_t* b) {
  double t[64], cpu[64];
  for (int r = -1; r < g_reps; ++r) {
    if (b->ids) draw_ids(b);
    double c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID), t0 = now_ms(CLOCK_MONOTONIC);
    check(tj_executable_run(b->exe, b->in, b->num_in, &b->out, 1), "run");
    if (r < 0) continue;
    t[r] = now_ms(CLOCK_MONOTONIC) - t0;
    cpu[r] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
  }
  qsort(t, (size_t)g_reps, sizeof(double), compare_doubles);
  qsort(cpu, (size_t)g_reps, sizeof(double), compare_doubles);
  return (timing_t){t[g_reps / 2], t[0], t[g_reps - 1], cpu[g_reps / 2]};
}

//===--- copy bandwidth ---===//

typedef struct copy_part_t {
  char* dst;
  const char* src;
  size_t bytes;
} copy_part_t;

static void* copy_part(void* arg) {
  copy_part_t* p = arg;
  memcpy(p->dst, p->src, p->bytes);
  return NULL;
}

static void parallel_copy(char* dst, const char* src, size_t bytes,
                          int threads) {
  copy_part_t parts[64];
  pthread_t ids[64];
  if (threads > 64) threads = 64;
  for (int t = 0; t < threads; ++t) {
    size_t a = bytes * (size_t)t / (size_t)threads / 64 * 64;
    size_t e = t + 1 == threads
                   ? bytes
                   : bytes * (size_t)(t + 1) / (size_t)threads / 64 * 64;
    parts[t] = (copy_part_t){dst + a, src + a, e - a};
  }
  for (int t = 1; t < threads; ++t)
    if (pthread_create(&ids[t], NULL, copy_part, &parts[t]) != 0) {
      copy_part(&parts[t]);
      ids[t] = 0;
    }
  copy_part(&parts[0]);
  for (int t = 1; t < threads; ++t)
    if (ids[t]) pthread_join(ids[t], NULL);
}

// GB/s of memcpy (read + written bytes) and of the STREAM triad.
static void bandwidth(int threads, timing_t* copy, timing_t* triad,
                      double* copy_bytes, double* triad_bytes) {
  const int64_t n = 64 << 20;  // floats: 256 MiB a buffer
  float* a = make_data(n, 1);
  float* b2 = make_data(n, 2);
  float* c = make_data(n, 3);
  double t[64], cpu[64];
  for (int which = 0; which < 2; ++which) {
    for (int r = -1; r < g_reps; ++r) {
      double c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID),
             t0 = now_ms(CLOCK_MONOTONIC);
      if (which == 0)
        parallel_copy((char*)a, (const char*)b2, (size_t)n * 4, threads);
      else
        stream_triad(a, b2, c, 3.0f, n, threads);
      if (r < 0) continue;
      t[r] = now_ms(CLOCK_MONOTONIC) - t0;
      cpu[r] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(t, (size_t)g_reps, sizeof(double), compare_doubles);
    qsort(cpu, (size_t)g_reps, sizeof(double), compare_doubles);
    timing_t s = {t[g_reps / 2], t[0], t[g_reps - 1], cpu[g_reps / 2]};
    if (which == 0)
      *copy = s;
    else
      *triad = s;
  }
  *copy_bytes = 2.0 * (double)n * 4;
  *triad_bytes = 3.0 * (double)n * 4;
  free(a);
  free(b2);
  free(c);
}

static void print_row(const char* name, int64_t n, int threads, double work,
                      bool bw, const timing_t* s, double copy_gbs) {
  // GFLOP/s or GB/s: of the CPU time at 1 thread (the shared machine's
  // other load stretches wall time, hardly CPU time), else of wall time.
  const double rate = work / ((threads == 1 ? s->cpu : s->med) * 1e6);
  if (g_csv) {
    printf("ours,%s,%lld,%d,%.4f,%.4f,%.4f,%.4f,%.3f\n", name, (long long)n,
           threads, s->med, s->lo, s->hi, s->cpu, rate);
    return;
  }
  printf("%-26s N %-3lld T %d  %9.3f ms (%.3f-%.3f) cpu %9.3f  %8.2f %s", name,
         (long long)n, threads, s->med, s->lo, s->hi, s->cpu, rate,
         bw ? "GB/s" : "GF/s");
  if (bw && copy_gbs > 0) printf("  %.2f of copy", rate / copy_gbs);
  printf("\n");
}

int main(int argc, char** argv) {
  int batch = 0, only_threads = -1;
  const char* only = NULL;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      only_threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--profile") == 0)
      g_profile = true;
    else if (strcmp(argv[i], "--csv") == 0)
      g_csv = true;
    else if (strcmp(argv[i], "--list") == 0)
      list = true;
    else {
      fprintf(stderr,
              "usage: conv_bench [--reps N] [--batch 1|32|0] [--only S] "
              "[--threads T] [--csv] [--list] [--profile]\n");
      return 2;
    }
  }
  if (g_reps < 1 || g_reps > 64) g_reps = 5;
  if (list) {
    // name;kind;n;c;h;w;o;k;stride;pad;groups (the torch script's input)
    for (int i = 0; i < kNumCases; ++i) {
      const case_t* c = &kCases[i];
      if (c->chain > 1) continue;
      printf("%s;%s;%lld;%lld;%lld;%lld;%lld;%lld;%lld;%lld;%lld\n", c->name,
             kKindNames[c->kind], (long long)c->n, (long long)c->c,
             (long long)c->h, (long long)c->w, (long long)c->o, (long long)c->k,
             (long long)c->stride, (long long)c->pad, (long long)c->groups);
    }
    return 0;
  }
  const int all = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const int thread_counts[2] = {1, all > 1 ? all : 1};
  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "context");
  if (!g_csv)
    printf(
        "conv_bench: median of %d runs (min-max) wall ms; cpu = median "
        "process CPU ms\n",
        g_reps);
  for (int ti = 0; ti < 2; ++ti) {
    const int threads = thread_counts[ti];
    if (ti == 1 && thread_counts[1] == 1) break;
    if (only_threads > 0 && threads != only_threads) continue;
    timing_t copy, triad;
    double copy_bytes, triad_bytes;
    bandwidth(threads, &copy, &triad, &copy_bytes, &triad_bytes);
    const double copy_gbs =
        copy_bytes / ((threads == 1 ? copy.cpu : copy.med) * 1e6);
    print_row("copy (memcpy 256 MiB)", 0, threads, copy_bytes, true, &copy, 0);
    print_row("triad (STREAM)", 0, threads, triad_bytes, true, &triad, 0);
    for (int i = 0; i < kNumCases; ++i) {
      const case_t* c = &kCases[i];
      if (only && !strstr(c->name, only)) continue;
      static const int64_t kBatches[2] = {1, 32};
      for (int bi = 0; bi < 2; ++bi) {
        int64_t n = kBatches[bi];
        if (c->kind == kGather) {
          if (bi) continue;
          n = c->n;
        } else if (batch && n != batch) {
          continue;
        }
        built_t b;
        build(ctx, c, n, threads, &b);
        timing_t s = time_exe(&b);
        if (g_profile) {
          tj_profile_report_t* report = NULL;
          check(tj_executable_profile(b.exe, b.in, b.num_in, &b.out, 1, g_reps,
                                      &report),
                "profile");
          char text[4096];
          tj_profile_report_format(report, 8, text, sizeof(text));
          printf("%s", text);
          tj_profile_report_destroy(report);
        }
        print_row(c->name, n, threads, work_of(c, n), is_bandwidth(c), &s,
                  copy_gbs);
        destroy(&b);
      }
    }
  }
  tj_context_destroy(ctx);
  return 0;
}
