// Memory-bound kernels on the GPU through the public API (tj_compile with
// TJ_TARGET_CUDA, device tensors, the bench's stream, CUDA graph replay),
// beside a device-to-device copy of the same bytes in the same process:
// the copy is the ceiling, so each kernel's figure is printed as GB/s of
// its compulsory traffic (read x once + write y once) and as a fraction of
// the copy's bandwidth. Timings: CUDA events, median of 5 means of N runs.
// Prints a table; never a pass/fail.
//
//   cuda_membound [--rows R] [--cols C] [--out FILE]
//
// The default f32 [65536, 4096] is 2^28 elements (1 GiB in, 1 GiB out), the
// CUDA issue's shape. --out writes "key value" lines that
// bench/torch_membound.py reads to print ours beside torch.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_executable.h"
#include "bench/cuda_bench_util.h"
#include "lib/dtype.h"

static tj_cuda_device_t* g_dev;
static tj_context_t* g_ctx;
static FILE* g_out;
static int g_iters = 20;

// Mean GPU time of |iters| calls of |fn|, in ms.
static double mean_ms(bench_work_fn fn, void* ctx, int iters) {
  return bench_mean_ms(g_dev, fn, ctx, 0, iters, false);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// The median of 5 means, after 3 warm-up calls.
static double time_ms(bench_work_fn fn, void* ctx) {
  for (int i = 0; i < 3; ++i) fn(ctx);
  double t[5];
  for (int i = 0; i < 5; ++i) t[i] = mean_ms(fn, ctx, g_iters);
  qsort(t, 5, sizeof(double), cmp_double);
  return t[2];
}

static tj_cu_deviceptr_t dev_random(int64_t n, double lo, double hi) {
  return bench_dev_random(g_dev, TJ_DTYPE_F32, n, lo, hi, (uint64_t)n);
}

static tj_tensor_t dev_tensor(tj_cu_deviceptr_t p, int32_t rank,
                              const int64_t* shape) {
  return bench_dev_tensor(g_dev, p, TJ_DTYPE_F32, rank, shape);
}

//===--- the kernels ---===//

typedef enum which_e { W_AFFINE, W_GELU_BIAS, W_SOFTMAX, W_LAYER_NORM } which_t;

static const char* const kNames[] = {"2x+1", "gelu(x+b)", "softmax",
                                     "layer_norm"};
static const char* const kKeys[] = {"affine", "gelu_bias", "softmax",
                                    "layer_norm"};

// y = f(x) over f32 [R, C] with R symbolic, so one executable serves any R.
static tj_graph_t* make_graph(which_t which, int64_t cols) {
  tj_graph_t* g;
  bench_die(tj_graph_create(g_ctx, kKeys[which], &g), "graph");
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, cols}, "x");
  tj_value_t y;
  switch (which) {
    case W_AFFINE:
      y = tj_graph_add(
          g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 2.0)),
          tj_graph_scalar(g, TJ_DTYPE_F32, 1.0));
      break;
    case W_GELU_BIAS: {
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, &cols, "b");
      y = tj_graph_gelu(g, tj_graph_add(g, x, b), false);
      break;
    }
    case W_SOFTMAX:
      y = tj_graph_softmax(g, x, 1);
      break;
    default: {
      tj_value_t gamma = tj_graph_input(g, TJ_DTYPE_F32, 1, &cols, "gamma");
      tj_value_t beta = tj_graph_input(g, TJ_DTYPE_F32, 1, &cols, "beta");
      y = tj_graph_layer_norm(g, x, gamma, beta, 1e-5);
      break;
    }
  }
  tj_graph_output(g, y, "y");
  bench_die(tj_graph_finalize(g), "finalize");
  return g;
}

typedef struct ours_t {
  tj_executable_t* exe;
  tj_tensor_t in[3], out;
  int32_t num_in;
} ours_t;

static void run_ours(void* ctx) {
  ours_t* o = ctx;
  bench_die(tj_executable_run(o->exe, o->in, o->num_in, &o->out, 1), "run");
}

typedef struct copy_run_t {
  tj_cu_deviceptr_t dst, src;
  size_t bytes;
} copy_run_t;

static void run_copy(void* ctx) {
  copy_run_t* c = ctx;
  bench_die(tj_cuda_copy_on_device(g_dev, c->dst, c->src, c->bytes), "copy");
}

// Checks a few rows of |y| against the definition in double, so that a
// fast wrong kernel cannot print a good figure.
static double check_rows(which_t which, tj_cu_deviceptr_t x,
                         tj_cu_deviceptr_t b, tj_cu_deviceptr_t y, int64_t rows,
                         int64_t cols) {
  size_t row_bytes = (size_t)cols * 4;
  float* hx = malloc(row_bytes);
  float* hy = malloc(row_bytes);
  float* hb = malloc(row_bytes);
  if (!hx || !hy || !hb) fprintf(stderr, "out of host memory\n"), exit(1);
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  bench_die(tj_cuda_copy_to_host(g_dev, hb, b, row_bytes), "copy");
  double worst = 0;
  int64_t check[] = {0, 1, rows / 2, rows - 1};
  for (int c = 0; c < 4; ++c) {
    size_t off = (size_t)check[c] * row_bytes;
    bench_die(tj_cuda_copy_to_host(g_dev, hx, x + off, row_bytes), "copy");
    bench_die(tj_cuda_copy_to_host(g_dev, hy, y + off, row_bytes), "copy");
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    double mx = -INFINITY, sum = 0, mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mx = fmax(mx, hx[j]);
    for (int64_t j = 0; j < cols; ++j) sum += exp(hx[j] - mx), mean += hx[j];
    mean /= (double)cols;
    for (int64_t j = 0; j < cols; ++j) var += (hx[j] - mean) * (hx[j] - mean);
    var /= (double)cols;
    for (int64_t j = 0; j < cols; ++j) {
      double v = hx[j], want;
      switch (which) {
        case W_AFFINE:
          want = 2 * v + 1;
          break;
        case W_GELU_BIAS:
          v += hb[j];
          want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
          break;
        case W_SOFTMAX:
          want = exp(v - mx) / sum;
          break;
        default:
          want = (v - mean) / sqrt(var + 1e-5);
          break;  // gamma 1
      }
      double err = fabs(hy[j] - want) / (fabs(want) + 1e-6);
      if (err > worst || isnan(err)) worst = err;
    }
  }
  free(hx);
  free(hy);
  free(hb);
  return worst;
}

int main(int argc, char** argv) {
  int64_t rows = 65536, cols = 4096;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--cols") && i + 1 < argc) {
      cols = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
      g_out = fopen(argv[++i], "w");
      if (!g_out) return perror(argv[i]), 1;
    } else {
      fprintf(stderr, "usage: %s [--rows R] [--cols C] [--out FILE]\n",
              argv[0]);
      return 2;
    }
  }
  tj_status_t s = tj_cuda_device_create(tj_allocator_system(), NULL, &g_dev);
  if (s) {
    printf("no GPU: %s\n", tj_status_message(s));
    tj_status_free(s);
    return 0;
  }
  bench_die(tj_context_create(NULL, &g_ctx), "context");

  int64_t n = rows * cols;
  size_t bytes = (size_t)n * 4;
  tj_cu_deviceptr_t x = dev_random(n, -4, 4);
  tj_cu_deviceptr_t b = dev_random(cols, -1, 1);
  tj_cu_deviceptr_t ones = dev_random(cols, 1, 1);
  tj_cu_deviceptr_t zeros = dev_random(cols, 0, 0);
  tj_cu_deviceptr_t y;
  bench_die(tj_cuda_device_alloc(g_dev, bytes, &y), "alloc");

  copy_run_t copy = {y, x, bytes};
  double t_copy = time_ms(run_copy, &copy);
  double gb = 2.0 * (double)bytes * 1e-9;  // read + write
  double copy_gbs = gb / t_copy * 1e3;
  printf("f32 [%lld, %lld]: %.2f GB in + out, medians of 5 means of %d\n",
         (long long)rows, (long long)cols, gb, g_iters);
  printf("| kernel | ms | GB/s | of copy | max rel err (4 rows) |\n");
  printf("|---|---|---|---|---|\n");
  printf("| device copy | %.4f | %.0f | 1.00 | |\n", t_copy, copy_gbs);
  if (g_out) fprintf(g_out, "copy_gbs %.6g\n", copy_gbs);

  int64_t shape[2] = {rows, cols};
  for (int w = W_AFFINE; w <= W_LAYER_NORM; ++w) {
    tj_graph_t* g = make_graph((which_t)w, cols);
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_CUDA;
    o.cuda.stream = g_dev->stream;
    ours_t run = {0};
    bench_die(tj_compile(g, &o, &run.exe), "tj_compile");
    run.in[0] = dev_tensor(x, 2, shape);
    run.num_in = 1;
    if (w == W_GELU_BIAS) run.in[run.num_in++] = dev_tensor(b, 1, &cols);
    if (w == W_LAYER_NORM) {
      run.in[run.num_in++] = dev_tensor(ones, 1, &cols);
      run.in[run.num_in++] = dev_tensor(zeros, 1, &cols);
    }
    run.out = dev_tensor(y, 2, shape);
    double t = time_ms(run_ours, &run);
    double err = check_rows((which_t)w, x, b, y, rows, cols);
    double gbs = gb / t * 1e3;
    printf("| %s | %.4f | %.0f | %.2f | %.2g |\n", kNames[w], t, gbs,
           gbs / copy_gbs, err);
    if (g_out) fprintf(g_out, "%s_gbs %.6g\n", kKeys[w], gbs);
    tj_executable_release(run.exe);
    tj_graph_destroy(g);
  }

  tj_cuda_device_free(g_dev, x);
  tj_cuda_device_free(g_dev, b);
  tj_cuda_device_free(g_dev, ones);
  tj_cuda_device_free(g_dev, zeros);
  tj_cuda_device_free(g_dev, y);
  tj_context_destroy(g_ctx);
  tj_cuda_device_destroy(g_dev);
  if (g_out) fclose(g_out);
  return 0;
}
