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
//
// Then the floor under a run of one kernel: a tiny pointwise graph
// (y = a * b + a, f32 [4, 4], device tensors) through tj_executable_run,
// beside the driver calls such a run makes at the least: cuLaunchKernel
// of an empty kernel of 3 pointer parameters (with the context push and
// pop that bracket it), cuGraphLaunch of a graph of it, and the push and
// pop alone.

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

typedef void (*op_fn)(void* ctx);

// Median over 7 rounds of |n| calls of |fn| of the host time a call
// takes, in us; the whole context (every stream) is waited for after each
// round.
static double host_us(tj_cuda_device_t* dev, op_fn fn, void* ctx, int n) {
  double v[kRounds];
  for (int r = -1; r < kRounds; ++r) {
    double t0 = now_us();
    for (int i = 0; i < n; ++i) fn(ctx);
    double t1 = now_us();
    bench_die(tj_cuda_device_enter(dev), "enter");
    bench_die(TJ_CU_STATUS(&dev->cu, cuCtxSynchronize, ()), "sync");
    tj_cuda_device_leave(dev);
    if (r >= 0) v[r] = (t1 - t0) / n;
  }
  return median(v, kRounds);
}

typedef struct floor_t {
  tj_cuda_device_t* dev;
  tj_cuda_kernel_t kernel;
  void* args[3];
  tj_cu_graph_exec_t exec;
  tj_executable_t* exe;
  tj_tensor_t in[2], out;
} floor_t;

static void launch_empty(void* ctx) {
  floor_t* f = ctx;
  static const tj_cuda_launch_t launch = {
      .grid = {1, 1, 1}, .block = {32, 1, 1}, .shared_bytes = 0};
  bench_die(tj_cuda_kernel_launch(&f->kernel, &launch, f->args), "launch");
}

static void launch_graph(void* ctx) {
  floor_t* f = ctx;
  bench_die(TJ_CU_STATUS(&f->dev->cu, cuGraphLaunch, (f->exec, f->dev->stream)),
            "graph launch");
}

static void push_pop(void* ctx) {
  floor_t* f = ctx;
  bench_die(tj_cuda_device_enter(f->dev), "enter");
  tj_cuda_device_leave(f->dev);
}

static void run_tiny(void* ctx) {
  floor_t* f = ctx;
  bench_die(tj_executable_run(f->exe, f->in, 2, &f->out, 1), "run");
}

// The floor section (see the top of the file).
static void floor_table(tj_cuda_device_t* dev, tj_context_t* ctx, int runs) {
  static const char kPtx[] =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .entry empty(.param .u64 a, .param .u64 b, .param .u64 c)\n"
      "{\n  ret;\n}\n";
  floor_t f = {.dev = dev};
  tj_cuda_module_t* module = NULL;
  bench_die(tj_cuda_module_load(dev, kPtx, &module), "module");
  bench_die(tj_cuda_kernel_get(module, "empty", 0, &f.kernel), "kernel");
  tj_cu_deviceptr_t a = bench_dev_random(dev, TJ_DTYPE_F32, 16, -1, 1, 4);
  tj_cu_deviceptr_t b = bench_dev_random(dev, TJ_DTYPE_F32, 16, -1, 1, 5);
  tj_cu_deviceptr_t y = bench_dev_random(dev, TJ_DTYPE_F32, 16, 0, 0, 6);
  f.args[0] = &a;
  f.args[1] = &b;
  f.args[2] = &y;
  const tj_cuda_symbols_t* cu = &dev->cu;
  bench_die(tj_cuda_device_enter(dev), "enter");
  bench_die(TJ_CU_STATUS(cu, cuStreamBeginCapture,
                         (dev->stream, TJ_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)),
            "capture");
  launch_empty(&f);
  tj_cu_graph_t graph = NULL;
  bench_die(TJ_CU_STATUS(cu, cuStreamEndCapture, (dev->stream, &graph)),
            "capture");
  bench_die(TJ_CU_STATUS(cu, cuGraphInstantiate, (&f.exec, graph, 0)),
            "instantiate");
  cu->cuGraphDestroy(graph);
  printf(
      "\none kernel, us a call (host time to enqueue), median of %d rounds "
      "of %d\n",
      kRounds, runs);
  printf("| call | us |\n|---|---|\n");
  printf(
      "| cuLaunchKernel of an empty kernel, inside a context push and pop | "
      "%.2f |\n",
      host_us(dev, launch_empty, &f, runs));
  printf("| cuGraphLaunch of it, device entered | %.2f |\n",
         host_us(dev, launch_graph, &f, runs));
  tj_cuda_device_leave(dev);
  printf("| cuCtxPushCurrent + cuCtxPopCurrent | %.2f |\n",
         host_us(dev, push_pop, &f, runs));
  tj_graph_t* g;
  bench_die(tj_graph_create(ctx, "tiny", &g), "graph");
  tj_value_t va = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "a");
  tj_value_t vb = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "b");
  tj_graph_output(g, tj_graph_add(g, tj_graph_mul(g, va, vb), va), "y");
  bench_die(tj_graph_finalize(g), "finalize");
  int64_t shape[2] = {4, 4};
  f.in[0] = bench_dev_tensor(dev, a, TJ_DTYPE_F32, 2, shape);
  f.in[1] = bench_dev_tensor(dev, b, TJ_DTYPE_F32, 2, shape);
  f.out = bench_dev_tensor(dev, y, TJ_DTYPE_F32, 2, shape);
  // On the bench's stream, then on the legacy default stream (torch's
  // current stream unless the caller picks one).
  for (int legacy = 0; legacy < 2; ++legacy) {
    for (int plain = 0; plain < 2; ++plain) {
      tj_compile_options_t o;
      tj_compile_options_initialize(&o);
      o.target = TJ_TARGET_CUDA;
      o.cuda.stream = legacy ? (void*)(uintptr_t)1 : dev->stream;
      o.cuda.disable_graphs = plain == 1;
      bench_die(tj_compile(g, &o, &f.exe), "tj_compile");
      double us = host_us(dev, run_tiny, &f, runs);
      tj_cuda_program_stats_t st;
      bench_die(tj_executable_cuda_stats(f.exe, &st), "stats");
      printf(
          "| tj_executable_run, y = a * b + a, %s, %s stream (%lld graph "
          "launches) | %.2f |\n",
          plain ? "plain launch" : "CUDA graph",
          legacy ? "legacy" : "the bench's", (long long)st.graph_launches, us);
      tj_executable_release(f.exe);
    }
  }
  tj_graph_destroy(g);
  bench_die(tj_cuda_device_enter(dev), "enter");
  cu->cuGraphExecDestroy(f.exec);
  tj_cuda_device_leave(dev);
  tj_cuda_module_destroy(module);
  tj_cuda_device_free(dev, a);
  tj_cuda_device_free(dev, b);
  tj_cuda_device_free(dev, y);
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
  floor_table(dev, ctx, runs);
  for (int i = 0; i < kMaxBuffers; ++i) tj_cuda_device_free(dev, y[i]);
  tj_cuda_device_free(dev, x);
  tj_cuda_device_free(dev, w1);
  tj_cuda_device_free(dev, w2);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  tj_cuda_device_destroy(dev);
  return 0;
}
