// The failing-allocator sweep over tj_compile and a run of the capstone,
// gelu(x @ w + b), with the disk cache warm and cold (issue 19, item 3):
// for every N, the Nth allocation of the context's allocator fails; the
// compile or the run must return OUT_OF_MEMORY and leak nothing, until one
// N succeeds with the reference's answer.
//
// Warm: the cache directory holds the kernels (and the autotuner's
// decisions) from an earlier compile, so the sweep walks the cache's load
// path: reading, checking and linking objects. Cold: the directory starts
// empty before each N, so each N compiles with LLVM and writes the cache;
// that costs a compile per N, so the cold sweep takes every k-th N, with k
// chosen to keep it to kColdPoints compiles. There, an allocation failure
// while writing the cache is no error (the write is best effort), so some
// N succeed.

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lib/base.h"
#include "tests/unit/capstone_check.h"

enum { kB = 5, kK = 24, kN = 40, kColdPoints = 200 };

static char g_dir[64];
static float g_x[kB * kK], g_w[kK * kN], g_b[kN], g_ref[kB * kN];
static const tj_test_capstone_t g_capstone = {kB,  kK,  kN,    g_x,
                                              g_w, g_b, g_ref, 1e-4f};

static tj_status_t compile_and_run_with(tj_allocator_t allocator,
                                        tj_test_diagnostics_t* diagnostics) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  if (diagnostics) tj_test_collect_into(&co, diagnostics);
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_test_build_capstone(ctx, kK, kN, &g);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = g_dir;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) s = tj_test_run_capstone(exe, &g_capstone, 1);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

static tj_status_t compile_and_run(tj_allocator_t allocator) {
  return compile_and_run_with(allocator, NULL);
}

// One point of a sweep: true once the compile and run succeed.
static bool sweep_point(long fail_at) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, fail_at);
  tj_status_t s = compile_and_run(tj_test_allocator_get(&alloc));
  CHECK_EQ_INT(0, alloc.live_blocks);
  CHECK_EQ_INT(0, alloc.bad_frees);
  if (!s) return true;
  if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
    fprintf(stderr, "fail_at %ld: %s: %s\n", fail_at,
            tj_status_code_name(tj_status_code(s)), tj_status_message(s));
  }
  CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
  tj_status_free(s);
  return false;
}

// The allocations one successful compile and run makes.
static long count_allocations(bool cold) {
  if (cold) tj_test_empty_dir(g_dir);
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  CHECK_OK(compile_and_run(tj_test_allocator_get(&alloc)));
  CHECK_EQ_INT(0, alloc.live_blocks);
  return alloc.allocations;
}

TEST(oom_sweep_warm_disk_cache) {
  long total = count_allocations(true);  // fills the cache
  long n = 0;
  while (n <= total + 16 && !sweep_point(n)) ++n;
  CHECK(n <= total);
  printf("# warm cache: %ld failing allocation points of %ld\n", n, total);
}

TEST(oom_sweep_cold_disk_cache) {
  long total = count_allocations(true);
  long step = total / kColdPoints + 1, points = 0, succeeded = 0;
  for (long n = 0; n < total; n += step, ++points) {
    tj_test_empty_dir(g_dir);
    // Writing the cache is best effort: a failure there is a warning and
    // the compile goes on, so some points succeed (with the right answer).
    succeeded += sweep_point(n);
  }
  tj_test_empty_dir(g_dir);
  CHECK(sweep_point(total + 1));  // past the last one: succeeds
  CHECK(succeeded < points);
  printf(
      "# cold cache: %ld of %ld allocation points (every %ld-th), %ld "
      "succeeded without the cache write\n",
      points, total, step, succeeded);
}

// A full disk (here: a file-size limit, which fails writes with EFBIG as
// ENOSPC would) while the cache is written: the compile and run succeed
// from memory, with one warning naming the cache.
TEST(full_disk_is_a_warning) {
  tj_test_empty_dir(g_dir);
  struct rlimit old;
  CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit small = old;
  small.rlim_cur = 16;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
  tj_test_diagnostics_t d;
  CHECK_OK(compile_and_run_with(tj_allocator_system(), &d));
  CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, old_handler);
  CHECK(d.warnings >= 1);
  CHECK(strstr(d.text, "cache") != NULL);
  printf("# full disk: %d warning(s): %s", d.warnings, d.text);
  // With room again, the next compile writes the cache and warns no more.
  CHECK_OK(compile_and_run_with(tj_allocator_system(), &d));
  CHECK_EQ_INT(0, d.warnings);
}

int main(void) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/tj_x86_oom_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  for (int i = 0; i < kB * kK; ++i) g_x[i] = (float)((i * 37) % 19 - 9) / 8;
  for (int i = 0; i < kK * kN; ++i) g_w[i] = (float)((i * 11) % 23 - 11) / 32;
  for (int i = 0; i < kN; ++i) g_b[i] = (float)(i % 7 - 3) / 4;
  // The reference answer.
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  CHECK_OK(tj_test_build_capstone(ctx, kK, kN, &g));
  tj_tensor_t in[3] = {
      tj_tensor_make(g_x, TJ_DTYPE_F32, 2, (int64_t[]){kB, kK}),
      tj_tensor_make(g_w, TJ_DTYPE_F32, 2, (int64_t[]){kK, kN}),
      tj_tensor_make(g_b, TJ_DTYPE_F32, 1, (int64_t[]){kN})};
  tj_tensor_t out = tj_tensor_make(g_ref, TJ_DTYPE_F32, 2, (int64_t[]){kB, kN});
  CHECK_OK(tj_reference_run(g, in, 3, &out, 1));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);

  RUN_TEST(oom_sweep_warm_disk_cache);
  RUN_TEST(oom_sweep_cold_disk_cache);
  RUN_TEST(full_disk_is_a_warning);
  tj_test_remove_tree(g_dir);
  TEST_MAIN_END();
}
