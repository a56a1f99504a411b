// tj_executable_profile (backends/profile.c): every kernel named, the
// entries adding up to the run, GEMM arithmetic and traffic, host steps
// (argtopk's native host kernel) as host entries, the reference target,
// TJ_LOG=profile, the text table, errors, and every allocation failure of a
// profile.

#include <stddef.h>

#include "tests/unit/profile_util.h"

TEST(x86_profile_names_every_kernel_and_adds_up) {
  static fixture_t f;
  fixture_init(&f);
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  CHECK(g != NULL);
  if (!g) {
    tj_context_destroy(context);
    return;
  }
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 2;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK(st.num_kernels >= 3);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(1, st.num_host_kernels);  // the argsort

  enum { kRuns = 40 };
  double start = tj_now_ms();
  tj_profile_report_t* r = NULL;
  CHECK_OK(tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, kRuns, &r));
  double wall = tj_now_ms() - start;
  // The entries add up to the run around them unless the machine took a
  // core away between entries (2 cores, tests run in parallel, the
  // sanitizer legs): a profile short of 90% is taken again, up to three
  // times in all, and the last one is checked.
  for (int attempt = 1; r && attempt < 3 && r->accounted_ms < 0.9 * r->run_ms;
       ++attempt) {
    tj_profile_report_t* again = NULL;
    start = tj_now_ms();
    CHECK_OK(
        tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, kRuns, &again));
    if (!again) break;
    wall = tj_now_ms() - start;
    tj_profile_report_destroy(r);
    r = again;
  }
  CHECK(r != NULL);
  if (!r) goto done;
  check_against_reference(g, &f, 1e-4);
  CHECK_STREQ("prof", r->graph);
  CHECK_STREQ("x86", r->target);
  CHECK_EQ_INT(kRuns, r->runs);
  // Every kernel has its entry, named, each name once; one host entry per
  // host step (graph breaks and native host kernels), then the copies and
  // the set-up.
  CHECK_EQ_INT(st.num_kernels, r->num_kernels);
  CHECK_EQ_INT(st.num_kernels + st.num_graph_breaks + st.num_host_kernels + 2,
               r->num_entries);
  int kernels = 0, hosts = 0;
  for (int32_t i = 0; i < r->num_entries; ++i) {
    const tj_profile_entry_t* e = &r->entries[i];
    CHECK(e->name[0] != '\0');
    CHECK(e->ms >= 0);
    if (i > 0) CHECK(r->entries[i - 1].ms >= e->ms);
    if (e->kind == TJ_PROFILE_KERNEL) {
      ++kernels;
      CHECK(e->launches == 1.0);
      CHECK(e->bytes > 0);
      for (int32_t j = 0; j < i; ++j) {
        CHECK(r->entries[j].kind != TJ_PROFILE_KERNEL ||
              strcmp(r->entries[j].name, e->name) != 0);
      }
    }
    if (e->kind == TJ_PROFILE_HOST) {
      ++hosts;
      CHECK_CONTAINS(e->name, "host.g");
      CHECK_CONTAINS(e->detail, "argtopk");
    }
  }
  CHECK_EQ_INT(st.num_kernels, kernels);
  CHECK_EQ_INT(st.num_graph_breaks + st.num_host_kernels, hosts);
  // The entries add up to the run measured around it (within 10%), and the
  // shares to 1; the runs fit in the wall time of the whole call (one
  // warm-up run besides).
  double shares = 0, sum = 0;
  for (int32_t i = 0; i < r->num_entries; ++i) {
    shares += r->entries[i].share;
    sum += r->entries[i].ms;
  }
  CHECK(fabs(sum - r->accounted_ms) <= 1e-9 * (1 + sum));
  CHECK(r->accounted_ms <= r->run_ms * 1.0001);
  CHECK(r->accounted_ms >= 0.9 * r->run_ms);
  CHECK(shares >= 0.9 && shares <= 1.0001);
  CHECK(r->run_ms * kRuns <= wall);
  CHECK(r->kernel_ms > 0);
  // Plain runs beside it, for the log (not checked: on a loaded machine a
  // parallel region's time varies a hundredfold from run to run).
  double plain = tj_now_ms();
  for (int i = 0; i < kRuns; ++i) {
    CHECK_OK(tj_executable_run(exe, f.inputs, 2, f.outputs, 2));
  }
  plain = (tj_now_ms() - plain) / kRuns;
  printf("# run %.4f ms profiled, %.4f ms plain; entries %.1f%%\n", r->run_ms,
         plain, 100 * r->accounted_ms / r->run_ms);
  // The GEMMs: 2*M*N*K (the epilogue adds a few per element) and at least
  // A, B and C moved.
  const tj_profile_entry_t* gemm = find(r, TJ_PROFILE_KERNEL, "gemm");
  CHECK(gemm != NULL);
  if (gemm) {
    double mnk = 2.0 * kB * kD * kD;
    CHECK(gemm->flops >= mnk && gemm->flops <= mnk * 1.2);
    CHECK(gemm->bytes >= 4.0 * (kB * kD * 2 + kD * kD));
    if (gemm->ms > 0) {
      CHECK(fabs(gemm->gflops_per_s - gemm->flops / (gemm->ms * 1e6)) <
            1e-6 * gemm->gflops_per_s + 1e-12);
    }
  }
  CHECK(find(r, TJ_PROFILE_KERNEL, "row_reduce") != NULL);
  CHECK(find(r, TJ_PROFILE_COPY, NULL) != NULL);
  CHECK(find(r, TJ_PROFILE_SETUP, NULL) != NULL);
  // The table: the header, the top entry, and the count of the rest.
  char text[4096];
  size_t need = tj_profile_report_format(r, 3, text, sizeof(text));
  CHECK(need > 0 && need < sizeof(text));
  fputs(text, stdout);
  CHECK_CONTAINS(text, "@prof on x86");
  CHECK_CONTAINS(text, r->entries[0].name);
  CHECK_CONTAINS(text, "more entries");
  char small[16];
  CHECK_EQ_INT(need, tj_profile_report_format(r, 3, small, sizeof(small)));
  CHECK_EQ_INT(15, strlen(small));
  CHECK_EQ_INT(need, tj_profile_report_format(r, 3, NULL, 0));
  tj_profile_report_destroy(r);
done:
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

TEST(reference_target_is_one_host_entry) {
  static fixture_t f;
  fixture_init(&f);
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_REFERENCE;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_profile_report_t* r = NULL;
  CHECK_OK(tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, 2, &r));
  if (r) {
    check_against_reference(g, &f, 1e-4);
    CHECK_STREQ("reference", r->target);
    CHECK_EQ_INT(0, r->num_kernels);
    CHECK_EQ_INT(TJ_PROFILE_HOST, r->entries[0].kind);
    CHECK_STREQ("reference", r->entries[0].name);
    CHECK(r->accounted_ms >= 0.9 * r->run_ms);
  }
  tj_profile_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

typedef struct log_t {
  char text[8192];
  int remarks;
} log_t;

static void on_diagnostic(tj_severity_t severity, const char* message,
                          size_t length, void* user_data) {
  log_t* log = (log_t*)user_data;
  if (severity != TJ_SEVERITY_REMARK) return;
  ++log->remarks;
  size_t used = strlen(log->text);
  size_t room = sizeof(log->text) - 1 - used;
  memcpy(log->text + used, message, length < room ? length : room);
  log->text[used + (length < room ? length : room)] = '\0';
}

TEST(log_profile_prints_the_table) {
  static fixture_t f;
  fixture_init(&f);
  static log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_options_t co = tj_test_context_options();
  co.log = "profile";
  co.diagnostic_fn = on_diagnostic;
  co.diagnostic_user_data = &log;
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  CHECK_EQ_INT(0, log.remarks);
  tj_profile_report_t* r = NULL;
  CHECK_OK(tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, 3, &r));
  CHECK_EQ_INT(1, log.remarks);
  CHECK_CONTAINS(log.text, "profile: @prof on x86");
  if (r) CHECK_CONTAINS(log.text, r->entries[0].name);
  tj_profile_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

TEST(errors) {
  static fixture_t f;
  fixture_init(&f);
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  tj_profile_report_t* r = (tj_profile_report_t*)&f;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "runs is 0",
               tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, 0, &r));
  CHECK(r == NULL);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "executable is NULL",
               tj_executable_profile(NULL, f.inputs, 2, f.outputs, 2, 1, &r));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_report is NULL",
               tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, 1, NULL));
  // A run's error is the profile's.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "inputs",
               tj_executable_profile(exe, f.inputs, 1, f.outputs, 2, 1, &r));
  CHECK(r == NULL);
  tj_profile_report_destroy(NULL);
  CHECK_EQ_INT(0, tj_profile_report_format(NULL, 3, NULL, 0));
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

// Fail each allocation a profile makes (its timing tables and the report,
// besides the run's own): OUT_OF_MEMORY, nothing leaked, then a report.
TEST(every_allocation_failure_of_a_profile) {
  static fixture_t f;
  fixture_init(&f);
  long failures = 0;
  for (long n = 0; n < 200; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_options_t co = tj_test_context_options();
    co.allocator = tj_test_allocator_get(&alloc);
    tj_context_t* context = NULL;
    CHECK_OK(tj_context_create(&co, &context));
    tj_graph_t* g = build(context, f.w1, f.w2);
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.x86.num_threads = 1;  // no pool threads allocating behind the sweep
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    // The warm-up run and the deferred code first, so that the sweep sees
    // what the profile itself allocates.
    CHECK_OK(tj_executable_prepare(exe, NULL, 0));
    CHECK_OK(tj_executable_run(exe, f.inputs, 2, f.outputs, 2));
    long live_before = alloc.live_blocks;
    alloc.fail_at = alloc.allocations + n;
    tj_profile_report_t* r = NULL;
    tj_status_t status =
        tj_executable_profile(exe, f.inputs, 2, f.outputs, 2, 2, &r);
    alloc.fail_at = -1;
    if (status) {
      CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
      CHECK(r == NULL);
      CHECK_EQ_INT(live_before, alloc.live_blocks);
      tj_status_free(status);
      ++failures;
    } else {
      CHECK(r != NULL && r->num_entries > 0);
    }
    tj_profile_report_destroy(r);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(context);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) break;
  }
  printf("# %ld failure points\n", failures);
  CHECK(failures >= 3);
}

// tj_executable_stats: compile time per stage, run time, and a caller's
// shorter (older) struct filled only as far as its struct_size.
TEST(stats_stages_and_struct_size) {
  static fixture_t f;
  fixture_init(&f);
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = build(context, f.w1, f.w2);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(tj_executable_run(exe, f.inputs, 2, f.outputs, 2));
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(sizeof(st), st.struct_size);
  CHECK(st.passes_ms > 0);
  CHECK(st.lowering_ms > 0);
  CHECK(st.llvm_ms + st.cache_load_ms > 0);
  CHECK_EQ_INT(0, st.ptxas_ms);
  double stages = st.passes_ms + st.lowering_ms + st.llvm_ms + st.ptxas_ms +
                  st.tuning_ms + st.cache_load_ms;
  CHECK(stages <= st.compile_ms);
  CHECK(stages >= 0.5 * st.compile_ms);
  CHECK_EQ_INT(3, st.runs);
  CHECK(st.run_ms > 0);
  printf(
      "# compile %.1f ms: passes %.1f, lowering %.1f, llvm %.1f, cache "
      "%.1f; runs %.3f ms each\n",
      st.compile_ms, st.passes_ms, st.lowering_ms, st.llvm_ms, st.cache_load_ms,
      st.run_ms / (double)st.runs);
  // A struct as an older header declared it (up to |runs|).
  tj_executable_stats_t old;
  memset(&old, 0xab, sizeof(old));
  old.struct_size = offsetof(tj_executable_stats_t, runs) + sizeof(int64_t);
  tj_executable_stats(exe, &old);
  CHECK_EQ_INT(3, old.runs);
  CHECK_EQ_INT(st.num_kernels, old.num_kernels);
  unsigned char tail[sizeof(old)];
  memset(tail, 0xab, sizeof(tail));
  CHECK(memcmp((unsigned char*)&old + old.struct_size, tail,
               sizeof(old) - old.struct_size) == 0);
  // Too small for any field: nothing written.
  memset(&old, 0xab, sizeof(old));
  old.struct_size = 4;
  tj_executable_stats(exe, &old);
  CHECK(memcmp((unsigned char*)&old + sizeof(size_t), tail,
               sizeof(old) - sizeof(size_t)) == 0);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

// The fused attention kernel's entry counts its work: q . k over D and
// p . v over Dv per visible (query, key) pair (causal top-left with
// Tq 40 > Tk 24: 24 * 25 / 2 + 16 * 24 = 684 pairs a head) and its rows
// of D and Dv floats (it counted one float a row and no arithmetic).
TEST(attention_entry_counts_head_dims) {
  tj_context_options_t co = tj_test_context_options();
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(context, "attn", &g));
  tj_value_t q =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 40, 16}, "q");
  tj_value_t k =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 24, 16}, "k");
  tj_value_t v =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 24, 8}, "v");
  tj_value_t none = {0};
  tj_graph_output(g, tj_graph_attention(g, q, k, v, none, 0, true), "y");
  CHECK_OK(tj_graph_finalize(g));
  static float qd[4 * 40 * 16], kd[2 * 24 * 16], vd[2 * 24 * 8], yd[4 * 40 * 8];
  for (size_t i = 0; i < sizeof(qd) / sizeof(qd[0]); ++i) qd[i] = 0.01f * i;
  tj_tensor_t in[3] = {
      tj_tensor_make(qd, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 40, 16}),
      tj_tensor_make(kd, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 24, 16}),
      tj_tensor_make(vd, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 24, 8})};
  tj_tensor_t out =
      tj_tensor_make(yd, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 40, 8});
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_profile_report_t* r = NULL;
  if (exe) CHECK_OK(tj_executable_profile(exe, in, 3, &out, 1, 2, &r));
  const tj_profile_entry_t* e =
      r ? find(r, TJ_PROFILE_KERNEL, "attention") : NULL;
  CHECK(e != NULL);
  if (e) {
    CHECK(fabs(e->flops - 2.0 * 4 * 684 * (16 + 8)) < 1e-6);
    // q, k, v and y: 4*40*16 + 2*24*16 + 2*24*8 + 4*40*8 floats.
    CHECK(fabs(e->bytes - 4.0 * (2560 + 768 + 384 + 1280)) < 1e-6);
  }
  tj_profile_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

int main(void) {
  RUN_TEST(x86_profile_names_every_kernel_and_adds_up);
  RUN_TEST(reference_target_is_one_host_entry);
  RUN_TEST(log_profile_prints_the_table);
  RUN_TEST(errors);
  RUN_TEST(every_allocation_failure_of_a_profile);
  RUN_TEST(stats_stages_and_struct_size);
  RUN_TEST(attention_entry_counts_head_dims);
  TEST_MAIN_END();
}
