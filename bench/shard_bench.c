// The capstone and a tensor-parallel MLP sharded over a device mesh
// (tj_shard.h), beside the same graph compiled for one device, in the same
// run.
//
//   capstone: y = gelu(x @ w + b), w [K, N] split by columns (column-
//             parallel: one all-gather of y) or by rows (row-parallel: one
//             all-reduce, overlapped with the GEMM in row chunks);
//   mlp:      y = x + linear(gelu(linear(layer_norm(x), w1, b1)), w2, b2),
//             w1 split by columns, w2 by rows (Megatron: one all-reduce).
//
// For each case: ms per run (median of --reps after a warm-up) of the
// single-device executable and of the sharded one, the per-device weight
// bytes beside the unsharded ones, and the communication bytes per device.
// x86 meshes run their devices one after the other in one process, so the
// sharded time there measures the sharding's overhead (collectives, row
// chunks), not a speedup; a mesh of N GPUs would run the devices at once.
// Timings are printed, never asserted.
//
//   shard_bench [--target x86|cuda] [--devices 1,2,4] [--batch 2048]
//               [--k 1024] [--n 4096] [--reps 5] [--chunks 4]
//
// 2xH200 (issue 20's figures: capstone column-split B=16384 >= 1.8x one
// GPU, row-split >= 1.6x, transformer MLP >= 1.6x) needs a CUDA mesh of 2
// devices, which tj_compile_sharded refuses in this release (UNSUPPORTED,
// printed); --target cuda --devices 1 runs the 1-device CUDA mesh.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorjit.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static bool report(tj_status_t status, const char* what) {
  if (!status) return true;
  printf("  %s: %s: %s\n", what, tj_status_code_name(tj_status_code(status)),
         tj_status_message(status));
  tj_status_free(status);
  return false;
}

static void fill(float* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
}

typedef struct bench_case_t {
  const char* name;
  tj_graph_t* g;
  int32_t num_inputs;
  float* in[5];
  int64_t shape[5][2];
  int32_t rank[5];
  float* out;
  int64_t out_shape[2];
  tj_partition_spec_t specs[3];
  int32_t num_specs;
  int64_t weight_bytes;  // of the inputs the specs split
} bench_case_t;

static void add_input(bench_case_t* c, int32_t rank, int64_t d0, int64_t d1,
                      float scale) {
  int32_t i = c->num_inputs++;
  c->rank[i] = rank;
  c->shape[i][0] = d0;
  c->shape[i][1] = d1;
  int64_t n = rank == 1 ? d0 : d0 * d1;
  c->in[i] = malloc(sizeof(float) * (size_t)n);
  fill(c->in[i], n, 17u + (uint32_t)i, scale);
}

typedef double (*run_fn)(void* exe, bench_case_t* c, bool sharded);

static tj_status_t run_once(void* exe, bench_case_t* c, bool sharded) {
  tj_tensor_t ins[5];
  for (int32_t i = 0; i < c->num_inputs; ++i) {
    ins[i] = tj_tensor_make(c->in[i], TJ_DTYPE_F32, c->rank[i], c->shape[i]);
  }
  tj_tensor_t out = tj_tensor_make(c->out, TJ_DTYPE_F32, 2, c->out_shape);
  return sharded ? tj_sharded_executable_run(exe, ins, c->num_inputs, &out, 1)
                 : tj_executable_run(exe, ins, c->num_inputs, &out, 1);
}

static double time_ms(void* exe, bench_case_t* c, bool sharded, int reps) {
  if (!report(run_once(exe, c, sharded), "warm-up")) return NAN;
  double t[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_ms();
    if (!report(run_once(exe, c, sharded), "run")) return NAN;
    t[r] = now_ms() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), compare_doubles);
  return t[reps / 2];
}

int main(int argc, char** argv) {
  tj_target_t target = TJ_TARGET_X86;
  int32_t devices[8] = {1, 2, 4};
  int32_t num_devices = 3;
  int64_t B = 2048, K = 1024, N = 4096;
  int reps = 5, chunks = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--target")) {
      target = strcmp(argv[i + 1], "cuda") ? TJ_TARGET_X86 : TJ_TARGET_CUDA;
    } else if (!strcmp(argv[i], "--devices")) {
      num_devices = 0;
      for (char* s = argv[i + 1]; *s && num_devices < 8;) {
        devices[num_devices++] = (int32_t)strtol(s, &s, 10);
        if (*s == ',') ++s;
      }
    } else if (!strcmp(argv[i], "--batch")) {
      B = atoll(argv[i + 1]);
    } else if (!strcmp(argv[i], "--k")) {
      K = atoll(argv[i + 1]);
    } else if (!strcmp(argv[i], "--n")) {
      N = atoll(argv[i + 1]);
    } else if (!strcmp(argv[i], "--reps")) {
      reps = atoi(argv[i + 1]);
    } else if (!strcmp(argv[i], "--chunks")) {
      chunks = atoi(argv[i + 1]);
    }
  }
  tj_context_t* ctx = NULL;
  if (!report(tj_context_create(NULL, &ctx), "context")) return 1;
  printf("shard_bench: target %s, B=%lld K=%lld N=%lld, f32, median of %d\n",
         target == TJ_TARGET_CUDA ? "cuda" : "x86", (long long)B, (long long)K,
         (long long)N, reps);
  printf("NCCL: %s\n", tj_nccl_available() ? "available" : "not found");
  for (int which = 0; which < 3; ++which) {
    bench_case_t c;
    memset(&c, 0, sizeof(c));
    c.name = which == 0   ? "capstone, w column-split"
             : which == 1 ? "capstone, w row-split (all-reduce overlapped)"
                          : "MLP, w1 column- then w2 row-split";
    if (!report(tj_graph_create(ctx, which == 2 ? "mlp" : "capstone", &c.g),
                "graph")) {
      return 1;
    }
    tj_graph_t* g = c.g;
    int64_t sB = tj_graph_symbol(g, "B");
    if (which < 2) {
      tj_value_t x =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){sB, K}, "x");
      tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
      tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true),
                      "y");
      add_input(&c, 2, B, K, 1.0f);
      add_input(&c, 2, K, N, 0.05f);
      add_input(&c, 1, N, 0, 0.5f);
      c.out_shape[0] = B;
      c.out_shape[1] = N;
      if (which == 0) {
        c.specs[0] =
            (tj_partition_spec_t){.name = "w", .dim_axes = {NULL, "tp"}};
        c.specs[1] = (tj_partition_spec_t){.name = "b", .dim_axes = {"tp"}};
        c.num_specs = 2;
        c.weight_bytes = (K * N + N) * 4;
      } else {
        c.specs[0] = (tj_partition_spec_t){.name = "w", .dim_axes = {"tp"}};
        c.num_specs = 1;
        c.weight_bytes = K * N * 4;
      }
    } else {
      // D = K, F = N.
      tj_value_t x =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){sB, K}, "x");
      tj_value_t w1 =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w1");
      tj_value_t b1 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b1");
      tj_value_t w2 =
          tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){N, K}, "w2");
      tj_value_t b2 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){K}, "b2");
      tj_value_t h =
          tj_graph_layer_norm(g, x, tj_value_none(), tj_value_none(), 1e-5);
      h = tj_graph_gelu(g, tj_graph_linear(g, h, w1, b1), true);
      tj_graph_output(g, tj_graph_add(g, x, tj_graph_linear(g, h, w2, b2)),
                      "y");
      add_input(&c, 2, B, K, 1.0f);
      add_input(&c, 2, K, N, 0.05f);
      add_input(&c, 1, N, 0, 0.1f);
      add_input(&c, 2, N, K, 0.05f);
      add_input(&c, 1, K, 0, 0.1f);
      c.out_shape[0] = B;
      c.out_shape[1] = K;
      c.specs[0] =
          (tj_partition_spec_t){.name = "w1", .dim_axes = {NULL, "tp"}};
      c.specs[1] = (tj_partition_spec_t){.name = "b1", .dim_axes = {"tp"}};
      c.specs[2] = (tj_partition_spec_t){.name = "w2", .dim_axes = {"tp"}};
      c.num_specs = 3;
      c.weight_bytes = (2 * K * N + N) * 4;
    }
    if (!report(tj_graph_finalize(g), "finalize")) return 1;
    c.out = malloc(sizeof(float) * (size_t)(c.out_shape[0] * c.out_shape[1]));
    printf("\n%s\n", c.name);
    tj_compile_options_t co;
    tj_compile_options_initialize(&co);
    co.target = target;
    tj_executable_t* one = NULL;
    double one_ms = NAN;
    if (report(tj_compile(g, &co, &one), "one device")) {
      one_ms = time_ms(one, &c, false, reps);
    }
    printf("  %-22s %9.3f ms\n", "one device (unsharded)", one_ms);
    tj_executable_release(one);
    for (int32_t k = 0; k < num_devices; ++k) {
      int32_t n = devices[k];
      tj_mesh_device_t devs[TJ_MESH_MAX_DEVICES];
      for (int32_t d = 0; d < n && d < TJ_MESH_MAX_DEVICES; ++d) {
        devs[d] = (tj_mesh_device_t){target, d};
      }
      tj_mesh_t mesh = {1, {"tp", NULL}, {n, 0}, devs};
      tj_shard_options_t so;
      tj_shard_options_initialize(&so);
      so.mesh = &mesh;
      so.input_specs = c.specs;
      so.num_input_specs = c.num_specs;
      so.overlap_chunks = chunks;
      so.num_symbol_hints = 1;
      so.symbol_hint_names = (const char* const[]){"B"};
      so.symbol_hint_values = (const int64_t[]){B};
      tj_sharded_executable_t* exe = NULL;
      char label[64];
      snprintf(label, sizeof(label), "%d-device mesh", n);
      if (!report(tj_compile_sharded(g, &so, &co, &exe), label)) continue;
      double ms = time_ms(exe, &c, true, reps);
      tj_sharded_stats_t st = {.struct_size = sizeof(st)};
      tj_sharded_executable_stats(exe, &st);
      printf(
          "  %-22s %9.3f ms (%.2fx one device)  weights/device %.1f of %.1f "
          "MiB  comm/device %.2f MiB  %d all-reduce, %d all-gather, "
          "%d overlapped chunks\n",
          label, ms, one_ms / ms,
          (double)(st.input_bytes_per_device - st.input_bytes_unsharded +
                   c.weight_bytes) /
              1048576.0,
          (double)c.weight_bytes / 1048576.0,
          (double)st.last_run_comm_bytes_per_device / 1048576.0,
          st.num_all_reduce, st.num_all_gather, st.last_run_overlapped_chunks);
      tj_sharded_executable_release(exe);
    }
    for (int32_t i = 0; i < c.num_inputs; ++i) free(c.in[i]);
    free(c.out);
    tj_graph_destroy(c.g);
  }
  tj_context_destroy(ctx);
  return 0;
}
