// Sharding over a device mesh (tj_shard.h) on x86 "devices" in one process
// (host collectives): the capstone with w split column-wise and row-wise
// over 2 and 4 devices, a transformer-block MLP with Megatron's column ->
// row split, a 2-D mesh, reductions, reshapes and transposes through the
// propagation, reduce-scatter chosen for a split output, the row-chunked
// overlap, bad specs, and the OOM sweep. Every result is compared with the
// reference interpreter on the unsharded graph.

#include "tests/unit/test.h"
#include "tensorjit/tj_shard.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((g_rng >> 40) & 0xffff) / 32768.0f - 1.0f;
}

static float* rnd_buf(int64_t n, float scale) {
  float* p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) p[i] = rnd() * scale;
  return p;
}

typedef struct case_t {
  tj_graph_t* g;
  int32_t num_inputs, num_outputs;
  float* in[8];
  int64_t in_shape[8][TJ_MAX_RANK];
  int32_t in_rank[8];
  float* ref[4];
  float* out[4];
  int64_t out_shape[4][TJ_MAX_RANK];
  int32_t out_rank[4];
  int64_t out_numel[4];
} case_t;

static void case_inputs(case_t* c, const int64_t* symbol_values) {
  (void)symbol_values;
  tj_tensor_t ins[8];
  for (int32_t i = 0; i < c->num_inputs; ++i) {
    ins[i] =
        tj_tensor_make(c->in[i], TJ_DTYPE_F32, c->in_rank[i], c->in_shape[i]);
  }
  for (int32_t o = 0; o < c->num_outputs; ++o) {
    CHECK_OK(tj_graph_output_shape(c->g, ins, c->num_inputs, o, &c->out_rank[o],
                                   c->out_shape[o]));
    int64_t n = 1;
    for (int32_t d = 0; d < c->out_rank[o]; ++d) n *= c->out_shape[o][d];
    c->out_numel[o] = n;
    c->ref[o] = calloc((size_t)(n ? n : 1), sizeof(float));
    c->out[o] = calloc((size_t)(n ? n : 1), sizeof(float));
  }
  tj_tensor_t outs[4];
  for (int32_t o = 0; o < c->num_outputs; ++o) {
    outs[o] = tj_tensor_make(c->ref[o], TJ_DTYPE_F32, c->out_rank[o],
                             c->out_shape[o]);
  }
  CHECK_OK(tj_reference_run(c->g, ins, c->num_inputs, outs, c->num_outputs));
}

// Adds input |i| of |rank| |dims| (concrete) with random values.
static void case_input(case_t* c, int32_t i, int32_t rank, const int64_t* dims,
                       float scale) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) {
    c->in_shape[i][d] = dims[d];
    n *= dims[d];
  }
  c->in_rank[i] = rank;
  c->in[i] = rnd_buf(n, scale);
}

static void case_free(case_t* c) {
  for (int32_t i = 0; i < c->num_inputs; ++i) free(c->in[i]);
  for (int32_t o = 0; o < c->num_outputs; ++o) {
    free(c->ref[o]);
    free(c->out[o]);
  }
  tj_graph_destroy(c->g);
}

// Runs |exe| on |c|'s inputs and compares with the reference within
// |tol| (absolute plus relative).
static void case_check(case_t* c, tj_sharded_executable_t* exe, double tol) {
  tj_tensor_t ins[8], outs[4];
  for (int32_t i = 0; i < c->num_inputs; ++i) {
    ins[i] =
        tj_tensor_make(c->in[i], TJ_DTYPE_F32, c->in_rank[i], c->in_shape[i]);
  }
  for (int32_t o = 0; o < c->num_outputs; ++o) {
    memset(c->out[o], 0xff, sizeof(float) * (size_t)c->out_numel[o]);
    outs[o] = tj_tensor_make(c->out[o], TJ_DTYPE_F32, c->out_rank[o],
                             c->out_shape[o]);
  }
  CHECK_OK(
      tj_sharded_executable_run(exe, ins, c->num_inputs, outs, c->num_outputs));
  for (int32_t o = 0; o < c->num_outputs; ++o) {
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < c->out_numel[o]; ++i) {
      double r = c->ref[o][i], v = c->out[o][i];
      double err = fabs(r - v);
      if (!(err <= tol * (1 + fabs(r)))) {
        if (!bad) {
          fprintf(stderr, "output %d [%lld]: %g, reference %g\n", o,
                  (long long)i, v, r);
        }
        ++bad;
      }
      if (err > worst) worst = err;
    }
    CHECK_EQ_INT(0, bad);
  }
}

typedef struct mesh_t {
  tj_mesh_device_t devices[16];
  tj_mesh_t mesh;
} mesh_t;

static void mesh_1d(mesh_t* m, int32_t n, tj_target_t target) {
  memset(m, 0, sizeof(*m));
  for (int32_t i = 0; i < n; ++i) {
    m->devices[i].target = target;
    m->devices[i].device_id = 0;
  }
  m->mesh.num_axes = 1;
  m->mesh.axis_names[0] = "tp";
  m->mesh.axis_sizes[0] = n;
  m->mesh.devices = m->devices;
}

static tj_compile_options_t x86_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 2;
  return o;
}

static tj_sharded_executable_t* compile(case_t* c, const tj_mesh_t* mesh,
                                        const tj_partition_spec_t* in_specs,
                                        int32_t num_in,
                                        const tj_partition_spec_t* out_specs,
                                        int32_t num_out, int32_t chunks) {
  tj_shard_options_t so;
  tj_shard_options_initialize(&so);
  so.mesh = mesh;
  so.input_specs = in_specs;
  so.num_input_specs = num_in;
  so.output_specs = out_specs;
  so.num_output_specs = num_out;
  so.overlap_chunks = chunks;
  tj_compile_options_t co = x86_options();
  tj_sharded_executable_t* exe = NULL;
  CHECK_OK(tj_compile_sharded(c->g, &so, &co, &exe));
  return exe;
}

static void capstone_case(tj_context_t* ctx, case_t* c, int64_t B, int64_t k,
                          int64_t n) {
  memset(c, 0, sizeof(*c));
  CHECK_OK(tj_test_build_capstone(ctx, k, n, &c->g));
  c->num_inputs = 3;
  c->num_outputs = 1;
  case_input(c, 0, 2, (int64_t[]){B, k}, 1.0f);
  case_input(c, 1, 2, (int64_t[]){k, n}, 0.2f);
  case_input(c, 2, 1, (int64_t[]){n}, 0.5f);
  case_inputs(c, NULL);
}

static void print_program(tj_context_t* ctx, tj_sharded_executable_t* exe,
                          char** text) {
  *text = NULL;
  CHECK_OK(tj_sharded_executable_print(exe, text));
  (void)ctx;
}

//===--- the capstone ---===//

TEST(capstone_column_split) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (int32_t devices = 2; devices <= 4; devices += 2) {
    case_t c;
    capstone_case(ctx, &c, 37, 64, 128);
    mesh_t m;
    mesh_1d(&m, devices, TJ_TARGET_X86);
    tj_partition_spec_t specs[2] = {{.name = "w", .dim_axes = {NULL, "tp"}},
                                    {.name = "b", .dim_axes = {"tp"}}};
    tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 2, NULL, 0, 0);
    if (exe) {
      case_check(&c, exe, 1e-4);
      tj_sharded_stats_t st = {.struct_size = sizeof(st)};
      tj_sharded_executable_stats(exe, &st);
      CHECK_EQ_INT(devices, st.num_devices);
      // Column-parallel: no reduction; one all-gather of y (replicated).
      CHECK_EQ_INT(0, st.num_all_reduce);
      CHECK_EQ_INT(1, st.num_all_gather);
      CHECK_EQ_INT(1, st.num_compute_segments);
      // Per-device memory: w and b are 1/devices of the whole.
      int64_t whole_w = 64 * 128 * 4 + 128 * 4;
      CHECK_EQ_INT(st.input_bytes_unsharded - whole_w + whole_w / devices,
                   st.input_bytes_per_device);
      // y's all-gather: (n-1) shards of B x n/devices floats.
      CHECK_EQ_INT((devices - 1) * 37 * (128 / devices) * 4,
                   st.last_run_comm_bytes_per_device);
      char* text;
      print_program(ctx, exe, &text);
      CHECK_CONTAINS(text, "all_gather");
      CHECK_CONTAINS(text, "%s1: f32[64,");
      tj_context_free_string(ctx, text);
    }
    tj_sharded_executable_release(exe);
    case_free(&c);
  }
  tj_context_destroy(ctx);
}

TEST(capstone_row_split_all_reduce_overlapped) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (int32_t devices = 2; devices <= 4; devices += 2) {
    for (int32_t chunks = 1; chunks <= 4; chunks += 3) {
      case_t c;
      capstone_case(ctx, &c, 37, 64, 48);
      mesh_t m;
      mesh_1d(&m, devices, TJ_TARGET_X86);
      // w split along K; x is sliced to match (no communication).
      tj_partition_spec_t specs[1] = {{.name = "w", .dim_axes = {"tp"}}};
      tj_sharded_executable_t* exe =
          compile(&c, &m.mesh, specs, 1, NULL, 0, chunks);
      if (exe) {
        case_check(&c, exe, 1e-4);
        tj_sharded_stats_t st = {.struct_size = sizeof(st)};
        tj_sharded_executable_stats(exe, &st);
        CHECK_EQ_INT(1, st.num_all_reduce);
        CHECK_EQ_INT(0, st.num_all_gather);
        CHECK_EQ_INT(1, st.num_slices);
        CHECK_EQ_INT(chunks == 1 ? 0 : 4, st.last_run_overlapped_chunks);
        // all-reduce of B x n floats: 2 (n-1)/n of it.
        CHECK_EQ_INT(2 * (devices - 1) * (37 * 48 * 4 / devices),
                     st.last_run_comm_bytes_per_device);
        char* text;
        print_program(ctx, exe, &text);
        CHECK_CONTAINS(text, "all_reduce");
        CHECK_CONTAINS(text, "(row chunks)");
        tj_context_free_string(ctx, text);
        // A second run gives the same bits (deterministic order of sums).
        float* first = malloc(sizeof(float) * (size_t)c.out_numel[0]);
        memcpy(first, c.out[0], sizeof(float) * (size_t)c.out_numel[0]);
        case_check(&c, exe, 1e-4);
        CHECK(memcmp(first, c.out[0], sizeof(float) * (size_t)c.out_numel[0]) ==
              0);
        free(first);
      }
      tj_sharded_executable_release(exe);
      case_free(&c);
    }
  }
  tj_context_destroy(ctx);
}

TEST(capstone_row_split_x_sharded_too) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  capstone_case(ctx, &c, 5, 32, 16);
  mesh_t m;
  mesh_1d(&m, 4, TJ_TARGET_X86);
  tj_partition_spec_t specs[2] = {{.name = "x", .dim_axes = {NULL, "tp"}},
                                  {.name = "w", .dim_axes = {"tp"}}};
  tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 2, NULL, 0, 0);
  if (exe) {
    case_check(&c, exe, 1e-4);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_all_reduce);
    CHECK_EQ_INT(0, st.num_slices);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

//===--- a transformer block's MLP, Megatron style ---===//

// y = x + linear(gelu(linear(layer_norm(x), w1, b1)), w2, b2)
static void mlp_case(tj_context_t* ctx, case_t* c, int64_t B, int64_t D,
                     int64_t F) {
  memset(c, 0, sizeof(*c));
  CHECK_OK(tj_graph_create(ctx, "mlp", &c->g));
  tj_graph_t* g = c->g;
  int64_t sB = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){sB, D}, "x");
  tj_value_t w1 = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){D, F}, "w1");
  tj_value_t b1 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){F}, "b1");
  tj_value_t w2 = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){F, D}, "w2");
  tj_value_t b2 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){D}, "b2");
  tj_value_t h =
      tj_graph_layer_norm(g, x, tj_value_none(), tj_value_none(), 1e-5);
  h = tj_graph_gelu(g, tj_graph_linear(g, h, w1, b1), false);
  tj_value_t y = tj_graph_add(g, x, tj_graph_linear(g, h, w2, b2));
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  c->num_inputs = 5;
  c->num_outputs = 1;
  case_input(c, 0, 2, (int64_t[]){B, D}, 1.0f);
  case_input(c, 1, 2, (int64_t[]){D, F}, 0.2f);
  case_input(c, 2, 1, (int64_t[]){F}, 0.2f);
  case_input(c, 3, 2, (int64_t[]){F, D}, 0.2f);
  case_input(c, 4, 1, (int64_t[]){D}, 0.2f);
  case_inputs(c, NULL);
}

TEST(mlp_column_then_row) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (int32_t devices = 2; devices <= 4; devices += 2) {
    case_t c;
    mlp_case(ctx, &c, 19, 32, 128);
    mesh_t m;
    mesh_1d(&m, devices, TJ_TARGET_X86);
    tj_partition_spec_t specs[3] = {{.name = "w1", .dim_axes = {NULL, "tp"}},
                                    {.name = "b1", .dim_axes = {"tp"}},
                                    {.name = "w2", .dim_axes = {"tp"}}};
    tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 3, NULL, 0, 0);
    if (exe) {
      case_check(&c, exe, 2e-4);
      tj_sharded_stats_t st = {.struct_size = sizeof(st)};
      tj_sharded_executable_stats(exe, &st);
      // Megatron: one all-reduce, nothing gathered, nothing sliced.
      CHECK_EQ_INT(1, st.num_all_reduce);
      CHECK_EQ_INT(0, st.num_all_gather);
      CHECK_EQ_INT(0, st.num_slices);
      CHECK(st.last_run_overlapped_chunks > 0);
      int64_t weights = (32 * 128 * 2 + 128) * 4;
      CHECK_EQ_INT(st.input_bytes_unsharded - weights + weights / devices,
                   st.input_bytes_per_device);
    }
    tj_sharded_executable_release(exe);
    case_free(&c);
  }
  tj_context_destroy(ctx);
}

//===--- a 2-D mesh ---===//

TEST(two_d_mesh_rows_and_columns) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  memset(&c, 0, sizeof(c));
  CHECK_OK(tj_graph_create(ctx, "dp_tp", &c.g));
  tj_graph_t* g = c.g;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 24}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){24, 16}, "w");
  tj_value_t y = tj_graph_tanh(g, tj_graph_matmul(g, x, w));
  tj_graph_output(g, y, "y");
  tj_graph_output(g, tj_graph_sum(g, y, 1, (int32_t[]){0}, false), "s");
  CHECK_OK(tj_graph_finalize(g));
  c.num_inputs = 2;
  c.num_outputs = 2;
  case_input(&c, 0, 2, (int64_t[]){8, 24}, 1.0f);
  case_input(&c, 1, 2, (int64_t[]){24, 16}, 0.3f);
  case_inputs(&c, NULL);
  tj_mesh_device_t devs[4];
  for (int i = 0; i < 4; ++i) devs[i] = (tj_mesh_device_t){TJ_TARGET_X86, 0};
  tj_mesh_t mesh = {2, {"dp", "tp"}, {2, 2}, devs};
  tj_partition_spec_t specs[2] = {{.name = "x", .dim_axes = {"dp"}},
                                  {.name = "w", .dim_axes = {NULL, "tp"}}};
  // y stays split both ways; s (a sum over the dp-split rows) is a
  // partial sum all-reduced over dp, then gathered over tp.
  tj_partition_spec_t outs[1] = {{.name = "y", .dim_axes = {"dp", "tp"}}};
  tj_sharded_executable_t* exe = compile(&c, &mesh, specs, 2, outs, 1, 0);
  if (exe) {
    case_check(&c, exe, 1e-4);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_all_reduce);
    CHECK_EQ_INT(1, st.num_all_gather);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

//===--- reductions, reshape, transpose; reduce-scatter ---===//

TEST(reshape_transpose_sum_propagate) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  memset(&c, 0, sizeof(c));
  CHECK_OK(tj_graph_create(ctx, "moves", &c.g));
  tj_graph_t* g = c.g;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 12}, "x");
  tj_value_t r = tj_graph_reshape(g, x, 3, (int64_t[]){4, 2, 12});
  tj_value_t t = tj_graph_transpose(g, r, (int32_t[]){2, 0, 1});
  tj_value_t e = tj_graph_exp(g, t);
  // A sum over the split dim: a partial sum, all-reduced for the output.
  tj_graph_output(g, tj_graph_sum(g, e, 1, (int32_t[]){1}, false), "s");
  // A max over the split dim: gathered first.
  tj_graph_output(g, tj_graph_max(g, e, 1, (int32_t[]){1}, true), "m");
  // Kept whole: e itself, transposed back (split on dim 1, gathered).
  tj_graph_output(g, tj_graph_neg(g, t), "n");
  CHECK_OK(tj_graph_finalize(g));
  c.num_inputs = 1;
  c.num_outputs = 3;
  case_input(&c, 0, 2, (int64_t[]){8, 12}, 1.0f);
  case_inputs(&c, NULL);
  mesh_t m;
  mesh_1d(&m, 4, TJ_TARGET_X86);
  tj_partition_spec_t specs[1] = {{.name = "x", .dim_axes = {"tp"}}};
  tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 1, NULL, 0, 0);
  if (exe) {
    case_check(&c, exe, 1e-5);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_all_reduce);
    // e for the max, and n.
    CHECK_EQ_INT(2, st.num_all_gather);
    char* text;
    print_program(ctx, exe, &text);
    // The reshape keeps the split: x's 2 local rows become [1, 2, 12].
    CHECK_CONTAINS(text, "reshape %s0 : f32[1,2,12]");
    tj_context_free_string(ctx, text);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

TEST(split_output_of_partial_sum_is_reduce_scatter) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  memset(&c, 0, sizeof(c));
  CHECK_OK(tj_graph_create(ctx, "rs", &c.g));
  tj_graph_t* g = c.g;
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 16}, "a");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){16, 8}, "w");
  tj_value_t y = tj_graph_relu(g, tj_graph_matmul(g, a, w));
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  c.num_inputs = 2;
  c.num_outputs = 1;
  case_input(&c, 0, 2, (int64_t[]){8, 16}, 1.0f);
  case_input(&c, 1, 2, (int64_t[]){16, 8}, 0.5f);
  case_inputs(&c, NULL);
  mesh_t m;
  mesh_1d(&m, 2, TJ_TARGET_X86);
  tj_partition_spec_t specs[2] = {{.name = "a", .dim_axes = {NULL, "tp"}},
                                  {.name = "w", .dim_axes = {"tp"}}};
  tj_partition_spec_t outs[1] = {{.name = "y", .dim_axes = {"tp"}}};
  tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 2, outs, 1, 0);
  if (exe) {
    case_check(&c, exe, 1e-5);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    // relu is not linear: the partial sum is reduced before it, scattered
    // (half an all-reduce's bytes) since the output wants rows split.
    CHECK_EQ_INT(0, st.num_all_reduce);
    CHECK_EQ_INT(1, st.num_reduce_scatter);
    CHECK_EQ_INT(8 * 8 * 4 / 2, st.last_run_comm_bytes_per_device);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

TEST(partial_input_and_reference_devices) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  capstone_case(ctx, &c, 6, 16, 8);
  mesh_t m;
  mesh_1d(&m, 2, TJ_TARGET_REFERENCE);
  // x as partial sums over tp (device 0 holds it, device 1 zeros).
  tj_partition_spec_t specs[1] = {{.name = "x", .partial_axis = "tp"}};
  tj_sharded_executable_t* exe = compile(&c, &m.mesh, specs, 1, NULL, 0, 0);
  if (exe) {
    case_check(&c, exe, 1e-6);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    // x @ w is linear in x: the partial sum flows to the bias add.
    CHECK_EQ_INT(1, st.num_all_reduce);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

// A mesh of one CUDA device (the lead's H200 run): the capstone row-split
// with its chunked all-reduce, against the reference. Skipped (with a
// line saying so) where no GPU is usable.
TEST(one_cuda_device_mesh) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  case_t c;
  capstone_case(ctx, &c, 37, 64, 48);
  mesh_t m;
  mesh_1d(&m, 1, TJ_TARGET_CUDA);
  tj_partition_spec_t specs[1] = {{.name = "w", .dim_axes = {"tp"}}};
  tj_shard_options_t so;
  tj_shard_options_initialize(&so);
  so.mesh = &m.mesh;
  so.input_specs = specs;
  so.num_input_specs = 1;
  tj_sharded_executable_t* exe = NULL;
  tj_status_t s = tj_compile_sharded(c.g, &so, NULL, &exe);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped one_cuda_device_mesh: %s\n", tj_status_message(s));
    tj_status_free(s);
  } else {
    CHECK_OK(s);
  }
  if (exe) {
    case_check(&c, exe, 2e-3);
    tj_sharded_stats_t st = {.struct_size = sizeof(st)};
    tj_sharded_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_all_reduce);
    CHECK_EQ_INT(4, st.last_run_overlapped_chunks);
  }
  tj_sharded_executable_release(exe);
  case_free(&c);
  tj_context_destroy(ctx);
}

//===--- errors ---===//

TEST(bad_specs_name_the_input) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_test_build_capstone(ctx, 30, 12, &g));
  mesh_t m;
  mesh_1d(&m, 4, TJ_TARGET_X86);
  tj_shard_options_t so;
  tj_shard_options_initialize(&so);
  so.mesh = &m.mesh;
  tj_sharded_executable_t* exe = (tj_sharded_executable_t*)&so;
  struct {
    tj_partition_spec_t spec;
    bool output;
    tj_status_code_t code;
    const char* needle;
  } cases[] = {
      {{.name = "w", .dim_axes = {"tp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "input \"w\": dim 0 (30) is not divisible by mesh axis \"tp\" (4)"},
      {{.name = "w", .dim_axes = {NULL, "dp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "input \"w\": dim 1 is split over unknown "
       "mesh axis \"dp\""},
      {{.name = "x", .dim_axes = {"tp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "input \"x\": dim 0 is symbolic"},
      {{.name = "b", .dim_axes = {NULL, "tp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "input \"b\": dim 1 is split over \"tp\" "
       "but the input has rank 1"},
      {{.name = "w", .dim_axes = {"tp", "tp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "mesh axis \"tp\" splits two dims"},
      {{.name = "q", .dim_axes = {"tp"}},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "the input spec \"q\" names no input"},
      {{.name = "w", .partial_axis = "zz"},
       false,
       TJ_STATUS_INVALID_ARGUMENT,
       "partial sum over unknown mesh axis \"zz\""},
      {{.name = "y", .partial_axis = "tp"},
       true,
       TJ_STATUS_UNSUPPORTED,
       "output \"y\": partial-sum outputs"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    so.input_specs = cases[i].output ? NULL : &cases[i].spec;
    so.num_input_specs = cases[i].output ? 0 : 1;
    so.output_specs = cases[i].output ? &cases[i].spec : NULL;
    so.num_output_specs = cases[i].output ? 1 : 0;
    CHECK_STATUS(cases[i].code, cases[i].needle,
                 tj_compile_sharded(g, &so, NULL, &exe));
    CHECK(exe == NULL);
  }
  // Meshes.
  so.input_specs = NULL;
  so.num_input_specs = 0;
  so.output_specs = NULL;
  so.num_output_specs = 0;
  tj_mesh_t bad = m.mesh;
  bad.num_axes = 3;
  so.mesh = &bad;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "1 or 2 axes",
               tj_compile_sharded(g, &so, NULL, &exe));
  bad = m.mesh;
  bad.axis_sizes[0] = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "has size 0",
               tj_compile_sharded(g, &so, NULL, &exe));
  bad = m.mesh;
  bad.axis_names[0] = "t p";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
               tj_compile_sharded(g, &so, NULL, &exe));
  mesh_t mixed;
  mesh_1d(&mixed, 2, TJ_TARGET_X86);
  mixed.devices[1].target = TJ_TARGET_REFERENCE;
  so.mesh = &mixed.mesh;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "device 1's target differs",
               tj_compile_sharded(g, &so, NULL, &exe));
  mesh_t cuda;
  mesh_1d(&cuda, 2, TJ_TARGET_CUDA);
  so.mesh = &cuda.mesh;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "a mesh of 2 CUDA devices",
               tj_compile_sharded(g, &so, NULL, &exe));
  // Runs: wrong counts and shapes.
  so.mesh = &m.mesh;
  exe = NULL;
  CHECK_OK(tj_compile_sharded(g, &so, NULL, &exe));
  if (exe) {
    float xs[2 * 30] = {0}, ws[30 * 12] = {0}, bs[12] = {0}, ys[2 * 13];
    tj_tensor_t ins[3] = {
        tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){2, 30}),
        tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){30, 12}),
        tj_tensor_make(bs, TJ_DTYPE_F32, 1, (int64_t[]){12})};
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){2, 13});
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output \"y\"",
                 tj_sharded_executable_run(exe, ins, 3, &out, 1));
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "2 inputs",
                 tj_sharded_executable_run(exe, ins, 2, &out, 1));
  }
  tj_sharded_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- OOM ---===//

// Build, compile sharded (the reference target: no LLVM in the sweep) and
// run the MLP with the Nth allocation failing.
static tj_status_t mlp_oom(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "mlp", &g);
  if (!s) {
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 4}, "x");
    tj_value_t w1 = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 8}, "w1");
    tj_value_t w2 = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 4}, "w2");
    tj_value_t h = tj_graph_gelu(g, tj_graph_matmul(g, x, w1), false);
    tj_value_t y = tj_graph_add(g, x, tj_graph_matmul(g, h, w2));
    tj_graph_output(g, y, "y");
    tj_graph_output(g, tj_graph_sum(g, h, 1, (int32_t[]){1}, false), "s");
    s = tj_graph_finalize(g);
  }
  tj_sharded_executable_t* exe = NULL;
  if (!s) {
    mesh_t m;
    mesh_1d(&m, 2, TJ_TARGET_REFERENCE);
    tj_partition_spec_t specs[2] = {{.name = "w1", .dim_axes = {NULL, "tp"}},
                                    {.name = "w2", .dim_axes = {"tp"}}};
    tj_shard_options_t so;
    tj_shard_options_initialize(&so);
    so.mesh = &m.mesh;
    so.input_specs = specs;
    so.num_input_specs = 2;
    so.overlap_chunks = 2;
    s = tj_compile_sharded(g, &so, NULL, &exe);
  }
  char* text = NULL;
  if (!s) s = tj_sharded_executable_print(exe, &text);
  tj_context_free_string(ctx, text);
  if (!s) {
    float xs[12], w1s[32], w2s[32], ys[12], ss[3];
    for (int i = 0; i < 12; ++i) xs[i] = (float)i / 12;
    for (int i = 0; i < 32; ++i) w1s[i] = w2s[i] = (float)(i % 5) / 5;
    tj_tensor_t ins[3] = {
        tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}),
        tj_tensor_make(w1s, TJ_DTYPE_F32, 2, (int64_t[]){4, 8}),
        tj_tensor_make(w2s, TJ_DTYPE_F32, 2, (int64_t[]){8, 4})};
    tj_tensor_t outs[2] = {
        tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}),
        tj_tensor_make(ss, TJ_DTYPE_F32, 1, (int64_t[]){3})};
    s = tj_sharded_executable_run(exe, ins, 3, outs, 2);
  }
  tj_sharded_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep_compile_sharded_and_run) { tj_test_oom_sweep("shard", mlp_oom); }

int main(void) {
  tj_test_skip_host_tier();  // the tiers suite's avx2 run
  RUN_TEST(capstone_column_split);
  RUN_TEST(capstone_row_split_all_reduce_overlapped);
  RUN_TEST(capstone_row_split_x_sharded_too);
  RUN_TEST(mlp_column_then_row);
  RUN_TEST(two_d_mesh_rows_and_columns);
  RUN_TEST(reshape_transpose_sum_propagate);
  RUN_TEST(split_output_of_partial_sum_is_reduce_scatter);
  RUN_TEST(partial_input_and_reference_devices);
  RUN_TEST(one_cuda_device_mesh);
  RUN_TEST(bad_specs_name_the_input);
  RUN_TEST(oom_sweep_compile_sharded_and_run);
  TEST_MAIN_END();
}
