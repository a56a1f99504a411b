// A tiny test harness (chibicc's ASSERT, TAP-like output). A test file
// defines TEST(name) functions and lists them in main with RUN_TEST; the
// process exits non-zero if any check failed.

#ifndef TJ_TESTS_UNIT_TEST_H_
#define TJ_TESTS_UNIT_TEST_H_

#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tensorjit.h"

static int g_test_failures;
static int g_test_checks;
static const char* g_test_current;

#define TEST(name) static void test_##name(void)

#define RUN_TEST(name)                                                        \
  do {                                                                        \
    int before_ = g_test_failures;                                            \
    g_test_current = #name;                                                   \
    test_##name();                                                            \
    printf("%s - %s\n", g_test_failures == before_ ? "ok" : "not ok", #name); \
  } while (0)

#define TEST_MAIN_END()                                                 \
  do {                                                                  \
    printf("# %d checks, %d failed\n", g_test_checks, g_test_failures); \
    return g_test_failures ? 1 : 0;                                     \
  } while (0)

#define CHECK(cond)                                                        \
  do {                                                                     \
    ++g_test_checks;                                                       \
    if (!(cond)) {                                                         \
      ++g_test_failures;                                                   \
      fprintf(stderr, "%s:%d: %s: CHECK failed: %s\n", __FILE__, __LINE__, \
              g_test_current, #cond);                                      \
    }                                                                      \
  } while (0)

#define CHECK_EQ_INT(expected, actual)                                        \
  do {                                                                        \
    long long e_ = (long long)(expected), a_ = (long long)(actual);           \
    ++g_test_checks;                                                          \
    if (e_ != a_) {                                                           \
      ++g_test_failures;                                                      \
      fprintf(stderr, "%s:%d: %s: expected %s == %lld, got %lld\n", __FILE__, \
              __LINE__, g_test_current, #actual, e_, a_);                     \
    }                                                                         \
  } while (0)

#define CHECK_STREQ(expected, actual)                                   \
  do {                                                                  \
    const char* e_ = (expected);                                        \
    const char* a_ = (actual);                                          \
    ++g_test_checks;                                                    \
    if (!a_ || strcmp(e_, a_) != 0) {                                   \
      ++g_test_failures;                                                \
      fprintf(stderr, "%s:%d: %s: expected %s == \"%s\", got \"%s\"\n", \
              __FILE__, __LINE__, g_test_current, #actual, e_,          \
              a_ ? a_ : "(null)");                                      \
    }                                                                   \
  } while (0)

// |needle| must occur in |haystack|.
#define CHECK_CONTAINS(haystack, needle)                                       \
  do {                                                                         \
    const char* h_ = (haystack);                                               \
    ++g_test_checks;                                                           \
    if (!h_ || !strstr(h_, (needle))) {                                        \
      ++g_test_failures;                                                       \
      fprintf(stderr, "%s:%d: %s: \"%s\" does not contain \"%s\"\n", __FILE__, \
              __LINE__, g_test_current, h_ ? h_ : "(null)", (needle));         \
    }                                                                          \
  } while (0)

// The call must succeed; prints the status message otherwise (and frees it).
#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    tj_status_t s_ = (expr);                                                  \
    ++g_test_checks;                                                          \
    if (s_) {                                                                 \
      ++g_test_failures;                                                      \
      fprintf(stderr, "%s:%d: %s: %s failed: %s: %s\n", __FILE__, __LINE__,   \
              g_test_current, #expr, tj_status_code_name(tj_status_code(s_)), \
              tj_status_message(s_));                                         \
      tj_status_free(s_);                                                     \
    }                                                                         \
  } while (0)

// The status must have |code| and its message contain |needle|; frees it.
#define CHECK_STATUS(code, needle, expr)                                    \
  do {                                                                      \
    tj_status_t s_ = (expr);                                                \
    ++g_test_checks;                                                        \
    if (tj_status_code(s_) != (code) ||                                     \
        !strstr(tj_status_message(s_), (needle))) {                         \
      ++g_test_failures;                                                    \
      fprintf(                                                              \
          stderr,                                                           \
          "%s:%d: %s: %s: expected %s containing \"%s\", got %s: \"%s\"\n", \
          __FILE__, __LINE__, g_test_current, #expr,                        \
          tj_status_code_name(code), (needle),                              \
          tj_status_code_name(tj_status_code(s_)), tj_status_message(s_));  \
    }                                                                       \
    tj_status_free(s_);                                                     \
  } while (0)

//===--- a counting allocator that can fail the Nth allocation ---===//

typedef struct tj_test_allocator_t {
  long live_blocks;
  long long live_bytes;
  long allocations;  // successful allocations and growing reallocs so far
  long fail_at;      // the allocation number that fails; -1 never
  int bad_frees;     // frees whose old_size disagreed with the block
  // The library calls the allocator from threads of its own too (a kernel
  // set's background build, pool workers): the counters under a spinlock.
  // Read them only when those threads are done (after the context is
  // destroyed, or with a host parallel_for).
  atomic_flag lock;
} tj_test_allocator_t;

// Each block carries a header with its size so a wrong old_size is caught.
static void* tj_test_alloc_fn_locked(tj_test_allocator_t* t, void* ptr,
                                     size_t old_size, size_t new_size);

static void* tj_test_alloc_fn(void* user_data, void* ptr, size_t old_size,
                              size_t new_size) {
  tj_test_allocator_t* t = (tj_test_allocator_t*)user_data;
  while (atomic_flag_test_and_set_explicit(&t->lock, memory_order_acquire)) {
  }
  void* result = tj_test_alloc_fn_locked(t, ptr, old_size, new_size);
  atomic_flag_clear_explicit(&t->lock, memory_order_release);
  return result;
}

static void* tj_test_alloc_fn_locked(tj_test_allocator_t* t, void* ptr,
                                     size_t old_size, size_t new_size) {
  const size_t header = 16;
  if (new_size == 0) {
    if (ptr) {
      unsigned char* base = (unsigned char*)ptr - header;
      size_t recorded;
      memcpy(&recorded, base, sizeof(recorded));
      if (recorded != old_size) ++t->bad_frees;
      --t->live_blocks;
      t->live_bytes -= (long long)recorded;
      free(base);
    }
    return NULL;
  }
  if (t->fail_at >= 0 && t->allocations == t->fail_at) {
    ++t->allocations;
    return NULL;
  }
  ++t->allocations;
  unsigned char* base = NULL;
  if (ptr) {
    unsigned char* old_base = (unsigned char*)ptr - header;
    size_t recorded;
    memcpy(&recorded, old_base, sizeof(recorded));
    if (recorded != old_size) ++t->bad_frees;
    base = (unsigned char*)realloc(old_base, new_size + header);
    if (!base) return NULL;
    t->live_bytes += (long long)new_size - (long long)recorded;
  } else {
    base = (unsigned char*)malloc(new_size + header);
    if (!base) return NULL;
    ++t->live_blocks;
    t->live_bytes += (long long)new_size;
  }
  memcpy(base, &new_size, sizeof(new_size));
  return base + header;
}

static inline void tj_test_allocator_initialize(tj_test_allocator_t* t,
                                                long fail_at) {
  memset(t, 0, sizeof(*t));
  atomic_flag_clear(&t->lock);
  t->fail_at = fail_at;
}

static inline tj_allocator_t tj_test_allocator_get(tj_test_allocator_t* t) {
  tj_allocator_t a = {tj_test_alloc_fn, t};
  return a;
}

// The failing-allocator sweep: calls |attempt| with an allocator whose Nth
// allocation fails, for N = 0, 1, ... until an attempt succeeds (at most
// 100,000). Each failure must be OUT_OF_MEMORY, and every attempt must
// free all it allocated, with the sizes it allocated. Prints and returns
// the number of failing points.
typedef tj_status_t (*tj_test_attempt_fn)(tj_allocator_t allocator);

static inline long tj_test_oom_sweep(const char* what,
                                     tj_test_attempt_fn attempt) {
  long n = 0;
  for (;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = attempt(tj_test_allocator_get(&alloc));
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!s) break;
    if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "%s: fail_at %ld: %s: %s\n", what, n,
              tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    if (n > 100000) break;
  }
  printf("# oom sweep (%s): %ld failing allocation points\n", what, n);
  return n;
}

// The whole-run sweep: tj_test_oom_sweep stops at the first attempt that
// succeeds, and a failure that a cache or a fallback absorbs ends it
// early; this fails every allocation of a whole successful |attempt| in
// turn instead, each attempt OUT_OF_MEMORY or whole, nothing leaked either
// way. Prints and returns how many of them failed (at least one).
static inline long tj_test_every_allocation(const char* what,
                                            tj_test_attempt_fn attempt) {
  tj_test_allocator_t counting;
  tj_test_allocator_initialize(&counting, -1);
  CHECK_OK(attempt(tj_test_allocator_get(&counting)));
  long total = counting.allocations, failed = 0;
  for (long n = 0; n < total; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = attempt(tj_test_allocator_get(&alloc));
    if (alloc.live_blocks || alloc.bad_frees) {
      fprintf(stderr, "%s: allocation %ld of %ld failed: %s; %ld blocks left\n",
              what, n, total, s ? tj_status_message(s) : "ran",
              alloc.live_blocks);
    }
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (s) {
      ++failed;
      CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
      tj_status_free(s);
    }
  }
  printf(
      "# every allocation failed in turn (%s): %ld, %ld of them "
      "OUT_OF_MEMORY\n",
      what, total, failed);
  CHECK(failed > 0);
  return failed;
}

// Context options for tests that must not depend on earlier runs: the
// defaults, with no disk cache (a compile that names its cache_dir still
// has one), whatever the environment says.
static inline tj_context_options_t tj_test_context_options(void) {
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.cache_dir = "";
  return o;
}

// A context with tj_test_context_options.
static inline tj_status_t tj_test_context_create(tj_context_t** out_context) {
  tj_context_options_t o = tj_test_context_options();
  return tj_context_create(&o, out_context);
}

//===--- x86 ISA tiers ---===//

// How many of a test's x86 ISA tiers to run, of the |count| it lists with
// the host's first: all of them, or the host's alone where TJ_TEST_TIERS
// is "host". The sanitizer leg of scripts/test.sh sets it (the plain
// build's leg runs every tier). The tests that read it: those on
// tj_test_tier_contexts, tier_ops_check.h and verify_util.h, and qgemm,
// dd_ops, narrow_dtype, quant_dtype, ops_scatter and ops_sort.
static inline int tj_test_tiers(int count) {
  const char* tiers = getenv("TJ_TEST_TIERS");
  return count > 1 && tiers && strcmp(tiers, "host") == 0 ? 1 : count;
}

// Whether the tier TJ_X86_ISA names is the host's own: avx2 on a host
// without AVX-512 (the x86 JIT's rule, jit/x86_jit.c: avx512f, bw, dq and
// vl), where the host tier is avx2 itself, the same CPU name and features.
// The tiers suite's avx2 runs (tests/unit/meson.build) would repeat the
// unit suite's run of the same test byte for byte there: they print why
// and skip (tj_test_skip_host_tier).
static inline bool tj_test_tier_is_host(void) {
  const char* isa = getenv("TJ_X86_ISA");
  return isa && strcmp(isa, "avx2") == 0 &&
         !(__builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl"));
}

// Exits 77 (skipped) where tj_test_tier_is_host; a test of the tiers suite
// calls it first.
static inline void tj_test_skip_host_tier(void) {
  if (!tj_test_tier_is_host()) return;
  printf(
      "# skipped: TJ_X86_ISA=avx2 is this host's own tier, run by the "
      "unit suite\n");
  exit(77);
}

// Whether this run is the sanitizer leg's (TJ_TEST_SUBSET=sanitizer, set
// by scripts/test.sh there): the slowest tests whose variants rerun the
// same emitter code with another element type then keep one
// representative of each family. What the sanitizers watch is our C code,
// which such a variant reaches again by the same path; the plain build's
// leg runs every variant. The tests that read it: ktrans_ptx_test,
// swiglu_ptx_test and attention_ptx_test, through tj_test_num_half_types,
// blocks_ptx_test (a symbolic batch alone), x86_gemm_bf16_test (the
// shapes of less oracle work: its oracle_budget), wqgemm_ptx_test (each
// case on one arch a kernel, alternating: its on_arch), conv_cuda_ptx_test
// (each variant on one arch a math mode), attention_ptx_test (its lse and
// backward schedule variants alternating) and blocks_linears_test (one
// block a dtype); tj_test_ways and tj_test_candidates below. Each subset
// keeps the gcov line coverage of lib/, kir/, jit/ and backends/ over the
// sanitizer leg's tests as it was with the whole cases.
static inline bool tj_test_sanitizer_subset(void) {
  const char* subset = getenv("TJ_TEST_SUBSET");
  return subset && strcmp(subset, "sanitizer") == 0;
}

// Whether this run is one of CI's legs: the plain build's
// (TJ_TEST_SUBSET=ci, set by scripts/test.sh there) or the sanitizer
// one's. The plain leg then keeps the GEMM candidates of the first graph
// of each family alone in the graph-level PTX tests (tj_test_candidates):
// its other graphs' candidates are the same templates, whose PTX ptxas
// assembles on every schedule in the kernel-level tests (each test's
// schedule table, nvptx_ptxas_test's samples) and with every epilogue of
// the conformance cases (cuda_ptx_conformance_test); and
// cuda_ptx_conformance_test compiles its op x dtype matrix's cases for
// one arch each but an op's first (its one_arch). `meson test` without
// TJ_TEST_SUBSET is the long mode: every case, as before.
static inline bool tj_test_ci_subset(void) {
  const char* subset = getenv("TJ_TEST_SUBSET");
  return subset &&
         (strcmp(subset, "ci") == 0 || strcmp(subset, "sanitizer") == 0);
}

// How many variants a covering design (tj_test_covers) gives each entry
// of a schedule table: |ways| in the plain leg, one in the sanitizer leg
// (tj_test_sanitizer_subset), where every schedule still meets one variant
// and every variant the schedules of one residue class: the emitter paths
// (our C code) a schedule and a variant take are reached again, and the
// plain leg checks every pair the design gives.
static inline int tj_test_ways(int ways) {
  return tj_test_sanitizer_subset() ? 1 : ways;
}

// Whether a graph-level test compiles the GEMM candidates (autotuning on)
// for the graph it calls |first| of a family: always in the long mode
// (no TJ_TEST_SUBSET); in either leg of CI (tj_test_ci_subset) for the
// first alone, the others with autotuning off (their main kernels and
// host steps as before). A family's candidates are the same templates
// over the same options: the first reaches the candidate emitters' code,
// and LLVM's codegen of each candidate (and in the plain leg ptxas's
// assembly of it) is most of such a compile.
static inline bool tj_test_candidates(bool first) {
  return first || !tj_test_ci_subset();
}

// How many of a test's {bf16, f16} pair to run: f16 takes bf16's GEMM
// and attention templates with another mma type, so the sanitizer leg runs
// bf16 alone.
static inline size_t tj_test_num_half_types(void) {
  return tj_test_sanitizer_subset() ? 1 : 2;
}

// A context for each x86 tier that tj_test_tiers keeps of three: the
// host's, AVX2 where the host has AVX-512 (elsewhere it is the host's own)
// and SSE2, logging off; a tier the host cannot run is left out. Fills
// |out_ctx| and |out_isa| (the tiers' names) and returns how many.
static inline int tj_test_tier_contexts(tj_context_t* out_ctx[3],
                                        const char* out_isa[3]) {
  static const char* isas[] = {"host", "avx2", "sse2"};
  int n = 0;
  for (int i = 0; i < tj_test_tiers(3); ++i) {
    if (i == 1 && !__builtin_cpu_supports("avx512f")) continue;
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = isas[i];
    o.log = "";
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&o, &ctx);
    if (st) {
      tj_status_free(st);
      continue;
    }
    out_isa[n] = isas[i];
    out_ctx[n++] = ctx;
  }
  return n;
}

// Compile options for x86 as the tests that compare with the reference use
// them: no disk cache, the IR verified after every pass, |num_threads|.
static inline tj_compile_options_t tj_test_x86_options(int32_t num_threads) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  o.verify_each = true;
  o.cache_dir = "";
  o.x86.num_threads = num_threads;
  return o;
}

// A context for one step of a failing-allocator sweep: the options of
// tj_test_context_options with |allocator|, logging off.
static inline tj_status_t tj_test_sweep_context_create(
    tj_allocator_t allocator, tj_context_t** out_context) {
  tj_context_options_t o = tj_test_context_options();
  o.allocator = allocator;
  o.log = "";
  return tj_context_create(&o, out_context);
}

// One step of a whole-run sweep (tj_test_every_allocation): a context
// with |allocator|, graph |name| built by |build_graph| (which may leave
// the graph's sticky error), compiled at one thread, run by |run_exe| (which
// checks what it gets); everything released on every path. Returns the
// first failure.
typedef void (*tj_test_sweep_build_fn)(tj_graph_t* g);
typedef tj_status_t (*tj_test_sweep_run_fn)(tj_executable_t* exe);
static inline tj_status_t tj_test_sweep_compile_run(
    tj_allocator_t allocator, const char* name,
    tj_test_sweep_build_fn build_graph, tj_test_sweep_run_fn run_exe) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, name, &g);
  if (!s) {
    build_graph(g);
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) s = run_exe(exe);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

//===--- diagnostics and temporary directories ---===//

// A context's warnings, counted, with their text (remarks are dropped: a
// TJ_LOG setting would fill the buffer).
typedef struct tj_test_diagnostics_t {
  int warnings;
  char text[8192];
} tj_test_diagnostics_t;

static inline void tj_test_collect(tj_severity_t severity, const char* message,
                                   size_t size, void* user_data) {
  tj_test_diagnostics_t* d = (tj_test_diagnostics_t*)user_data;
  if (severity != TJ_SEVERITY_WARNING) return;
  ++d->warnings;
  size_t used = strlen(d->text);
  snprintf(d->text + used, sizeof(d->text) - used, "%.*s\n", (int)size,
           message);
}

// Sends |options|' diagnostics to |d| (cleared).
static inline void tj_test_collect_into(tj_context_options_t* options,
                                        tj_test_diagnostics_t* d) {
  memset(d, 0, sizeof(*d));
  options->diagnostic_fn = tj_test_collect;
  options->diagnostic_user_data = d;
}

static inline int tj_test_remove_entry(const char* path, const struct stat* st,
                                       int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

// Removes |dir| and everything below it (links are removed, not followed).
static inline void tj_test_remove_tree(const char* dir) {
  nftw(dir, tj_test_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// Empties |dir|, keeping the directory (mode 0700).
static inline void tj_test_empty_dir(const char* dir) {
  tj_test_remove_tree(dir);
  CHECK(mkdir(dir, 0700) == 0);
}

//===--- the capstone ---===//

// y = gelu(x @ w + b) with x f32[B, k], w f32[k, n], b f32[n], finalized.
static inline tj_status_t tj_test_build_capstone(tj_context_t* ctx, int64_t k,
                                                 int64_t n, tj_graph_t** out) {
  tj_status_t s = tj_graph_create(ctx, "capstone", out);
  if (s) return s;
  tj_graph_t* g = *out;
  int64_t B = tj_graph_symbol(g, "B");
  int64_t xs[2] = {B, k}, ws[2] = {k, n}, bs[1] = {n};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xs, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, ws, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, bs, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false), "y");
  return tj_graph_finalize(g);
}

#endif  // TJ_TESTS_UNIT_TEST_H_
