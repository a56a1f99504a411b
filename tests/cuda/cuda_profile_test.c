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
    CHECK_EQ_INT(st.num_kernels + st.num_graph_breaks + 2, r->num_entries);
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

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  RUN_TEST(cuda_profile_names_every_kernel_and_adds_up);
  TEST_MAIN_END();
}
