// The capstone block on the CPU, forward and training step, beside numpy in
// the same run.
//
//   forward:  y = gelu(x @ w + b) (tanh form), f32
//   training: loss = sum(gelu(x @ w + b)); dx, dw, db
//
// Ours: one executable per half (compiled once, symbolic B). numpy: eager,
// the backward written by hand (bench/numpy_capstone.py). Medians of --reps
// runs after a warm-up. Timings are printed, never asserted.
//
//   capstone_bench [--batches 256,2048] [--reps 7] [--k 1024] [--n 4096]

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tensorjit.h"

#ifndef TJ_SOURCE_ROOT
#define TJ_SOURCE_ROOT "."
#endif

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void check(tj_status_t status, const char* what) {
  if (!status) return;
  fprintf(stderr, "capstone_bench: %s: %s\n", what, tj_status_message(status));
  tj_status_free(status);
  exit(1);
}

static void fill(float* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
}

// A dense tensor with its own shape storage.
typedef struct buffer_t {
  float* data;
  int64_t shape[4];
  int32_t rank;
} buffer_t;

static buffer_t buffer_make(int32_t rank, const int64_t* shape) {
  buffer_t b;
  memset(&b, 0, sizeof(b));
  b.rank = rank;
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= (b.shape[i] = shape[i]);
  b.data = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!b.data) exit(1);
  return b;
}

static tj_tensor_t view(buffer_t* b) {
  return tj_tensor_make(b->data, TJ_DTYPE_F32, b->rank, b->shape);
}

static double numpy_ms(const char* mode, int64_t batch, int64_t k, int64_t n,
                       int reps) {
  char command[1024];
  snprintf(command, sizeof(command),
           "python3 '%s/bench/numpy_capstone.py' --mode %s --batch %lld --k "
           "%lld --n %lld --reps %d",
           TJ_SOURCE_ROOT, mode, (long long)batch, (long long)k, (long long)n,
           reps);
  FILE* p = popen(command, "r");
  double ms = NAN;
  if (p) {
    if (fscanf(p, "%lf", &ms) != 1) ms = NAN;
    pclose(p);
  }
  return ms;
}

int main(int argc, char** argv) {
  int64_t batches[8] = {256, 2048};
  int num_batches = 2, reps = 7;
  int64_t K = 1024, N = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) {
      reps = atoi(argv[i + 1]);
    } else if (!strcmp(argv[i], "--k")) {
      K = atoll(argv[i + 1]);
    } else if (!strcmp(argv[i], "--n")) {
      N = atoll(argv[i + 1]);
    } else if (!strcmp(argv[i], "--batches")) {
      num_batches = 0;
      for (char* s = argv[i + 1]; *s && num_batches < 8;) {
        batches[num_batches++] = strtoll(s, &s, 10);
        if (*s == ',') ++s;
      }
    } else {
      fprintf(stderr,
              "usage: capstone_bench [--batches 256,2048] [--reps 7] "
              "[--k K] [--n N]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 64) reps = 7;

  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "context");
  // Forward-only graph: y. Training: grad of loss wrt x, w, b, partitioned.
  tj_graph_t* fwd_only = NULL;
  check(tj_graph_create(ctx, "block", &fwd_only), "graph");
  {
    int64_t B2 = tj_graph_symbol(fwd_only, "B");
    tj_value_t x2 =
        tj_graph_input(fwd_only, TJ_DTYPE_F32, 2, (int64_t[]){B2, K}, "x");
    tj_value_t w2 =
        tj_graph_input(fwd_only, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
    tj_value_t b2 =
        tj_graph_input(fwd_only, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
    tj_graph_output(
        fwd_only,
        tj_graph_gelu(fwd_only, tj_graph_linear(fwd_only, x2, w2, b2), true),
        "y");
    check(tj_graph_finalize(fwd_only), "finalize");
  }
  tj_graph_t* loss_graph = NULL;  // loss only: the training forward
  check(tj_graph_create(ctx, "loss", &loss_graph), "graph");
  {
    int64_t B3 = tj_graph_symbol(loss_graph, "B");
    tj_value_t x3 =
        tj_graph_input(loss_graph, TJ_DTYPE_F32, 2, (int64_t[]){B3, K}, "x");
    tj_value_t w3 =
        tj_graph_input(loss_graph, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
    tj_value_t b3 =
        tj_graph_input(loss_graph, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
    tj_value_t y3 = tj_graph_gelu(
        loss_graph, tj_graph_linear(loss_graph, x3, w3, b3), true);
    tj_graph_output(loss_graph, tj_graph_sum(loss_graph, y3, 0, NULL, false),
                    "loss");
    check(tj_graph_finalize(loss_graph), "finalize");
  }
  tj_graph_t *joint = NULL, *fwd = NULL, *bwd = NULL;
  check(tj_graph_grad(loss_graph, 0, NULL, 0, NULL, &joint), "grad");
  tj_partition_stats_t pstats;
  check(tj_graph_partition(joint, 3, 1, NULL, &fwd, &bwd, &pstats),
        "partition");

  tj_executable_t *exe_y = NULL, *exe_f = NULL, *exe_b = NULL;
  check(tj_compile(fwd_only, NULL, &exe_y), "compile forward");
  check(tj_compile(fwd, NULL, &exe_f), "compile training forward");
  check(tj_compile(bwd, NULL, &exe_b), "compile backward");
  tj_executable_stats_t sy = {.struct_size = sizeof(sy)}, sf = {.struct_size = sizeof(sf)}, sb = {.struct_size = sizeof(sb)};
  tj_executable_stats(exe_y, &sy);
  tj_executable_stats(exe_f, &sf);
  tj_executable_stats(exe_b, &sb);

  char cpu[256] = "?";
  FILE* info = popen("lscpu | sed -n 's/^Model name: *//p'", "r");
  if (info) {
    if (!fgets(cpu, sizeof(cpu), info)) strcpy(cpu, "?\n");
    pclose(info);
  }
  printf("capstone_bench: K=%lld N=%lld f32, %ld CPUs, %s", (long long)K,
         (long long)N, sysconf(_SC_NPROCESSORS_ONLN), cpu);
  // The partitioner weighs symbolic sizes at B = 1024 by default.
  printf(
      "kernels: forward %d; training forward %d + backward %d; saved "
      "activations %.1f KB per batch row\n",
      sy.num_kernels, sf.num_kernels, sb.num_kernels,
      (double)pstats.saved_bytes / 1024.0 / 1024.0);
  printf("%6s %-9s %10s %10s %8s\n", "B", "what", "ours ms", "numpy ms",
         "speedup");

  for (int bi = 0; bi < num_batches; ++bi) {
    int64_t nb = batches[bi];
    buffer_t bx = buffer_make(2, (int64_t[]){nb, K});
    buffer_t bw = buffer_make(2, (int64_t[]){K, N});
    buffer_t bb = buffer_make(1, (int64_t[]){N});
    buffer_t by = buffer_make(2, (int64_t[]){nb, N});
    fill(bx.data, nb * K, 1, 2.0f);
    fill(bw.data, K * N, 2, 0.06f);
    fill(bb.data, N, 3, 1.0f);
    tj_tensor_t in[3] = {view(&bx), view(&bw), view(&bb)};

    // Forward outputs of the training half, then the backward's inputs by
    // name: a forward input, a forward output, or the tangent grad_loss.
    int32_t nfo = tj_graph_num_outputs(fwd);
    buffer_t fo[16];
    tj_tensor_t fo_t[16];
    for (int32_t i = 0; i < nfo && i < 16; ++i) {
      int32_t rank;
      int64_t dims[TJ_MAX_RANK];
      check(tj_executable_output_shape(exe_f, in, 3, i, &rank, dims), "shape");
      fo[i] = buffer_make(rank, dims);
      fo_t[i] = view(&fo[i]);
    }
    float one = 1.0f;
    int32_t nbi = tj_graph_num_inputs(bwd);
    tj_tensor_t bi_t[16];
    for (int32_t i = 0; i < nbi && i < 16; ++i) {
      const char* name = tj_graph_input_name(bwd, i);
      bool found = false;
      for (int32_t j = 0; j < 3 && !found; ++j) {
        if (!strcmp(name, tj_graph_input_name(fwd, j))) {
          bi_t[i] = in[j];
          found = true;
        }
      }
      for (int32_t j = 0; j < nfo && !found; ++j) {
        if (!strcmp(name, tj_graph_output_name(fwd, j))) {
          bi_t[i] = fo_t[j];
          found = true;
        }
      }
      if (!found && !strcmp(name, "grad_loss")) {
        bi_t[i] = tj_tensor_make(&one, TJ_DTYPE_F32, 0, NULL);
        found = true;
      }
      if (!found) {
        fprintf(stderr, "capstone_bench: backward input %s unknown\n", name);
        return 1;
      }
    }
    buffer_t go[3];
    tj_tensor_t go_t[3];
    for (int32_t i = 0; i < 3; ++i) {
      int32_t rank;
      int64_t dims[TJ_MAX_RANK];
      check(tj_executable_output_shape(exe_b, bi_t, nbi, i, &rank, dims),
            "shape");
      go[i] = buffer_make(rank, dims);
      go_t[i] = view(&go[i]);
    }
    tj_tensor_t out_y = view(&by);

    double ty[64], tt[64];
    check(tj_executable_run(exe_y, in, 3, &out_y, 1), "run");
    check(tj_executable_run(exe_f, in, 3, fo_t, nfo), "run");
    check(tj_executable_run(exe_b, bi_t, nbi, go_t, 3), "run");
    for (int r = 0; r < reps; ++r) {
      double t0 = now_ms();
      check(tj_executable_run(exe_y, in, 3, &out_y, 1), "run");
      double t1 = now_ms();
      check(tj_executable_run(exe_f, in, 3, fo_t, nfo), "run");
      check(tj_executable_run(exe_b, bi_t, nbi, go_t, 3), "run");
      double t2 = now_ms();
      ty[r] = t1 - t0;
      tt[r] = t2 - t1;
    }
    qsort(ty, (size_t)reps, sizeof(double), compare_doubles);
    qsort(tt, (size_t)reps, sizeof(double), compare_doubles);
    double np_f = numpy_ms("forward", nb, K, N, reps);
    double np_t = numpy_ms("train", nb, K, N, reps);
    printf("%6lld %-9s %10.2f %10.2f %7.2fx\n", (long long)nb, "forward",
           ty[reps / 2], np_f, np_f / ty[reps / 2]);
    printf("%6lld %-9s %10.2f %10.2f %7.2fx\n", (long long)nb, "train",
           tt[reps / 2], np_t, np_t / tt[reps / 2]);
    fflush(stdout);
    free(bx.data);
    free(bw.data);
    free(bb.data);
    free(by.data);
    for (int32_t i = 0; i < nfo && i < 16; ++i) free(fo[i].data);
    for (int32_t i = 0; i < 3; ++i) free(go[i].data);
  }
  tj_executable_release(exe_y);
  tj_executable_release(exe_f);
  tj_executable_release(exe_b);
  tj_graph_destroy(fwd_only);
  tj_graph_destroy(loss_graph);
  tj_graph_destroy(joint);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_context_destroy(ctx);
  return 0;
}
