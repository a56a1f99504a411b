// tj_executable_profile on the CUDA target: an event pair around each
// launch (the runs launch kernel by kernel, not the CUDA graph), every
// kernel named, the entries adding up to the run, the outputs right.
// Skipped (exit 77) without a driver or GPU.

#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/profile_util.h"

TEST(cuda_profile_names_every_kernel_and_adds_up) {
  static fixture_t f;
  fixture_init(&f);
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  CHECK(g != NULL);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.autotune = TJ_AUTOTUNE_OFF;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  enum { kRuns = 20 };
  tj_profile_report_t* r = NULL;
  CHECK_OK(tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, kRuns, &r));
  if (r) {
    // The GPU's approximate transcendentals: within 1e-3.
    check_against_reference(g, &f, 1e-3);
    char text[4096];
    tj_profile_report_format(r, 0, text, sizeof(text));
    fputs(text, stdout);
    CHECK_STREQ("cuda", r->target);
    CHECK(r->cuda_graphs_disabled);
    CHECK_EQ_INT(st.num_kernels, r->num_kernels);
    CHECK_EQ_INT(st.num_kernels + st.num_graph_breaks + st.num_host_kernels + 2,
                 r->num_entries);
    int kernels = 0;
    for (int32_t i = 0; i < r->num_entries; ++i) {
      const tj_profile_entry_t* e = &r->entries[i];
      CHECK(e->name[0] != '\0');
      if (e->kind != TJ_PROFILE_KERNEL) continue;
      ++kernels;
      CHECK(e->ms > 0);
      CHECK(e->bytes > 0);
    }
    CHECK_EQ_INT(st.num_kernels, kernels);
    // No double counting: host steps are timed after the kernels before
    // them finish. The GPU's idle gaps between kernels (launch latency, a
    // host step's synchronization) are no entry's: about 20% of this tiny
    // graph's run on the H200.
    CHECK(r->accounted_ms <= 1.1 * r->run_ms);
    CHECK(r->accounted_ms >= 0.6 * r->run_ms);
    const tj_profile_entry_t* gemm = find(r, TJ_PROFILE_KERNEL, "gemm");
    CHECK(gemm && gemm->flops >= 2.0 * kB * kD * kD);
  }
  tj_profile_report_destroy(r);
  // Plain runs afterwards replay the CUDA graph again and agree.
  CHECK_OK(tj_executable_run(exe, f.inputs, 2, f.outputs, 2));
  check_against_reference(g, &f, 1e-3);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

// tj_diagnose on CUDA reads the caching allocator: the executable's stats
// carry the device's reserved and allocated bytes, and "Am I fragmenting?"
// reports reserved - allocated. The second size outgrows the first's
// arena, whose block stays cached.
TEST(cuda_diagnose_reads_the_caching_allocator) {
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_test_build_capstone(context, 256, 512, &g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.autotune = TJ_AUTOTUNE_OFF;
  const char* names[1] = {"B"};
  int64_t values[1] = {64};
  tj_diagnose_report_t* r = NULL;
  if (g) CHECK_OK(tj_diagnose(g, &o, 1, names, values, 3, &r));
  if (r) {
    fputs(r->text, stdout);
    CHECK_STREQ("cuda", r->target);
    CHECK(r->device_reserved_bytes > 0);
    CHECK(r->device_reserved_bytes >= r->device_allocated_bytes);
    CHECK(r->device_allocated_bytes > 0);  // the executable's arena
    CHECK_CONTAINS(r->answers[TJ_DIAGNOSE_FRAGMENTING].measured,
                   "caching allocator: reserved ");
  }
  tj_diagnose_report_destroy(r);
  // The same numbers through the stats of a CUDA executable after a run.
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK(st.device_arena_bytes == 0);  // no run yet
  enum { kRows = 8 };
  static float x[kRows * 256], w[256 * 512], b[512], y[kRows * 512];
  for (size_t i = 0; i < TJ_ARRAY_SIZE(w); ++i) w[i] = 0.01f;
  tj_tensor_t in[3] = {
      tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){kRows, 256}),
      tj_tensor_make(w, TJ_DTYPE_F32, 2, (int64_t[]){256, 512}),
      tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){512})};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){kRows, 512});
  if (exe) CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
  tj_executable_stats(exe, &st);
  CHECK(st.device_arena_bytes > 0);
  CHECK(st.device_allocated_bytes >= st.device_arena_bytes);
  CHECK(st.device_reserved_bytes >= st.device_allocated_bytes);
  CHECK(st.device_peak_reserved_bytes >= st.device_reserved_bytes);
  CHECK(st.device_peak_allocated_bytes >= st.device_allocated_bytes);
  printf("stats: reserved %lld, allocated %lld, arena %lld\n",
         (long long)st.device_reserved_bytes,
         (long long)st.device_allocated_bytes,
         (long long)st.device_arena_bytes);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  RUN_TEST(cuda_profile_names_every_kernel_and_adds_up);
  RUN_TEST(cuda_diagnose_reads_the_caching_allocator);
  TEST_MAIN_END();
}
