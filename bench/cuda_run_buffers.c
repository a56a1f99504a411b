// The host cost of a CUDA run whose device buffers change from run to run:
// a small block (x @ w1 -> GELU -> @ w2 -> softmax, bf16, three kernels,
// B = 64), run with its output cycling through 1, 2 or 16 device buffers,
// through CUDA graphs and with plain launches (cuda.disable_graphs), in
// one process. 16 buffers is more than the graph slots of an executable
// (TJ_CUDA_MAX_GRAPHS), so every run misses: it is captured, then
// instantiated into a slot or used to update a slot's graph in place.
//
//   cuda_run_buffers [--runs N]
//
// Prints, per case, the median over 7 rounds of N runs of the host time a
// run takes to enqueue (the clock stopped before the stream is waited
// for) and of the time per run with the wait (the throughput), in
// microseconds; never a pass/fail.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cuda_executable.h"
#include "bench/cuda_bench_util.h"

enum { kRounds = 7, kMaxBuffers = 16, B = 64 };

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static tj_graph_t* block_graph(tj_context_t* ctx) {
  tj_graph_t* g;
  bench_die(tj_graph_create(ctx, "block", &g), "graph");
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){b, 256}, "x");
  tj_value_t w1 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}, "w1");
  tj_value_t w2 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128}, "w2");
  tj_value_t h = tj_graph_gelu(g, tj_graph_matmul(g, x, w1), true);
  tj_value_t y = tj_graph_softmax(g, tj_graph_matmul(g, h, w2), -1);
  tj_graph_output(g, y, "y");
  bench_die(tj_graph_finalize(g), "finalize");
  return g;
}

int main(int argc, char** argv) {
  int runs = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--runs N]\n", argv[0]);
      return 2;
    }
  }
  tj_cuda_device_t* dev = NULL;
  tj_status_t s = tj_cuda_device_create(tj_allocator_system(), NULL, &dev);
  if (s) {
    printf("no GPU: %s\n", tj_status_message(s));
    tj_status_free(s);
    return 0;
  }
  tj_context_t* ctx = NULL;
  bench_die(tj_context_create(NULL, &ctx), "context");
  tj_graph_t* g = block_graph(ctx);
  tj_cu_deviceptr_t x = bench_dev_random(dev, TJ_DTYPE_BF16, B * 256, -1, 1, 1);
  tj_cu_deviceptr_t w1 =
      bench_dev_random(dev, TJ_DTYPE_BF16, 256 * 512, -0.1, 0.1, 2);
  tj_cu_deviceptr_t w2 =
      bench_dev_random(dev, TJ_DTYPE_BF16, 512 * 128, -0.1, 0.1, 3);
  tj_cu_deviceptr_t y[kMaxBuffers];
  for (int i = 0; i < kMaxBuffers; ++i)
    bench_die(tj_cuda_device_alloc(dev, 2 * B * 128, &y[i]), "alloc");
  tj_tensor_t in[3] = {
      bench_dev_tensor(dev, x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
      bench_dev_tensor(dev, w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
      bench_dev_tensor(dev, w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
  printf(
      "bf16 block (3 kernels, B = %d), %d runs a round, median of %d "
      "rounds, us a run\n",
      B, runs, kRounds);
  printf(
      "| launches | output buffers | enqueue | with the wait | captures | "
      "instantiations | updates |\n");
  printf("|---|---|---|---|---|---|---|\n");
  static const int kBuffers[] = {1, 2, kMaxBuffers};
  for (int plain = 0; plain < 2; ++plain) {
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_CUDA;
    o.cuda.stream = dev->stream;
    o.cuda.disable_graphs = plain == 1;
    o.autotune = TJ_AUTOTUNE_OFF;
    for (size_t c = 0; c < sizeof(kBuffers) / sizeof(kBuffers[0]); ++c) {
      tj_executable_t* exe = NULL;
      bench_die(tj_compile(g, &o, &exe), "tj_compile");
      int nb = kBuffers[c];
      double enq[kRounds], all[kRounds];
      for (int r = -1; r < kRounds; ++r) {  // round -1: warm-up
        double t0 = now_us(), t1 = 0;
        for (int i = 0; i < runs; ++i) {
          tj_tensor_t out = bench_dev_tensor(dev, y[i % nb], TJ_DTYPE_BF16, 2,
                                             (int64_t[]){B, 128});
          bench_die(tj_executable_run(exe, in, 3, &out, 1), "run");
        }
        t1 = now_us();
        bench_die(tj_cuda_device_synchronize(dev), "sync");
        double t2 = now_us();
        if (r >= 0) {
          enq[r] = (t1 - t0) / runs;
          all[r] = (t2 - t0) / runs;
        }
      }
      tj_cuda_program_stats_t st;
      bench_die(tj_executable_cuda_stats(exe, &st), "stats");
      printf("| %s | %d | %.2f | %.2f | %lld | %lld | %lld |\n",
             plain ? "plain" : "CUDA graphs", nb, median(enq, kRounds),
             median(all, kRounds), (long long)st.graph_captures,
             (long long)st.graph_instantiations, (long long)st.graph_updates);
      tj_executable_release(exe);
    }
  }
  for (int i = 0; i < kMaxBuffers; ++i) tj_cuda_device_free(dev, y[i]);
  tj_cuda_device_free(dev, x);
  tj_cuda_device_free(dev, w1);
  tj_cuda_device_free(dev, w2);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  tj_cuda_device_destroy(dev);
  return 0;
}
