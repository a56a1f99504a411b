// Shared by the tests that need a GPU: open the device or skip, the
// random data and the comparison against the reference, and the compile
// set-up of the tests that force GEMM candidates (cuda_residual_test,
// cuda_attention_views_test, cuda_swiglu_test, cuda_ktrans_test,
// cuda_gemm_fold_test).

#ifndef TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include <math.h>

#include "backends/cuda/cuda_executable.h"
#include "backends/cuda/cuda_runtime.h"
#include "lib/dtype.h"
#include "tests/unit/test.h"

// meson treats this exit code as "skipped".
#define TJ_TEST_EXIT_SKIP 77

// TJ_TEST_ONLY=a,b runs only the tests named a and b (a GPU call's time is
// short); unset or empty, every test.
static inline bool tj_test_selected(const char* name) {
  const char* only = getenv("TJ_TEST_ONLY");
  if (!only || !only[0]) return true;
  size_t len = strlen(name);
  for (const char* p = only; (p = strstr(p, name)) != NULL; p += len) {
    bool starts = p == only || p[-1] == ',';
    if (starts && (p[len] == ',' || p[len] == '\0')) return true;
  }
  return false;
}

#undef RUN_TEST
#define RUN_TEST(name)                                                        \
  do {                                                                        \
    if (!tj_test_selected(#name)) break;                                      \
    int before_ = g_test_failures;                                            \
    g_test_current = #name;                                                   \
    test_##name();                                                            \
    printf("%s - %s\n", g_test_failures == before_ ? "ok" : "not ok", #name); \
  } while (0)

// The default device, or exits with TJ_TEST_EXIT_SKIP (printing why) when
// the machine has no usable driver or GPU. Any other failure fails.
static inline tj_cuda_device_t* tj_test_open_device_or_skip(void) {
  tj_cuda_device_t* device = NULL;
  tj_status_t status =
      tj_cuda_device_create(tj_allocator_system(), NULL, &device);
  if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped: %s\n", tj_status_message(status));
    tj_status_free(status);
    exit(TJ_TEST_EXIT_SKIP);
  }
  if (status) {
    fprintf(stderr, "cuda device: %s: %s\n",
            tj_status_code_name(tj_status_code(status)),
            tj_status_message(status));
    tj_status_free(status);
    exit(1);
  }
  printf("# device %d: %s, sm_%d%d, %d SMs, %zu MiB, driver %d\n",
         device->ordinal, device->name, device->sm_major, device->sm_minor,
         device->num_sms, device->total_bytes >> 20, device->cu.driver_version);
  return device;
}

// Opens the default device (or skips, tj_test_open_device_or_skip) and
// closes it again; returns whether it is an sm_90a one.
static inline bool tj_test_require_gpu(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  const char* arch = tj_cuda_device_arch_name(device);
  bool sm90a = arch && strcmp(arch, "sm_90a") == 0;
  tj_cuda_device_destroy(device);
  return sm90a;
}

//===--- data and its check against the reference ---===//

// A uniform double in [0, 1) from the generator |*state| (a 64-bit LCG:
// each test's data is the same on every run).
static inline double tj_test_unit(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*state >> 11) / 9007199254740992.0;
}

// |n| elements of |dt|, uniform in [-scale, scale), from |*state| (free
// with free()).
static inline void* tj_test_random_tensor(uint64_t* state, tj_dtype_t dt,
                                          int64_t n, double scale) {
  void* p = calloc((size_t)n, tj_dtype_size(dt));
  for (int64_t i = 0; p && i < n; ++i)
    tj_store_f64(dt, p, i, scale * (2 * tj_test_unit(state) - 1));
  return p;
}

// Whether each of the |n| elements of |got| is within |tol| of |want|'s,
// relative to it (absolute below 1); prints the first that is not, with
// |what|. NaN is never close.
static inline bool tj_test_close_enough(const char* what, tj_dtype_t dt,
                                        const void* got, const void* want,
                                        int64_t n, double tol) {
  for (int64_t i = 0; i < n; ++i) {
    double g = tj_load_f64(dt, got, i), w = tj_load_f64(dt, want, i);
    if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w)))) {
      fprintf(stderr, "  %s: element %lld: got %.9g, want %.9g\n", what,
              (long long)i, g, w);
      return false;
    }
  }
  return true;
}

//===--- compiling for the GPU ---===//

// A context with the tests' options (tj_test_context_options) and the GEMM
// candidate |forced| (as TJ_CUDA_GEMM_CANDIDATE; NULL: autotuned); NULL
// (the check failed) when it cannot be made.
static inline tj_context_t* tj_test_cuda_context_create(const char* forced) {
  tj_context_options_t co = tj_test_context_options();
  co.cuda_gemm_candidate = forced;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  return ctx;
}

// Options for a compile for the CUDA target with no disk cache (each
// compile is the one measured), TF32 allowed where |dt| is f32 (the
// tests' f32 GEMMs are PyTorch's with allow_tf32; those of exact f32 set
// it back).
static inline void tj_test_cuda_compile_options(tj_compile_options_t* o,
                                                tj_dtype_t dt) {
  tj_compile_options_initialize(o);
  o->target = TJ_TARGET_CUDA;
  o->cache_dir = "";
  o->cuda.allow_tf32 = dt == TJ_DTYPE_F32;
}

// Fills |out_stats| with |exe|'s CUDA stats and checks that the GEMM
// choice it reports starts with |expect| (NULL: any), naming |what| when
// not.
static inline void tj_test_check_gemm_choice(
    const char* what, tj_executable_t* exe, const char* expect,
    tj_cuda_program_stats_t* out_stats) {
  memset(out_stats, 0, sizeof(*out_stats));
  CHECK_OK(tj_executable_cuda_stats(exe, out_stats));
  const char* choice = out_stats->gemm_choice;
  if (expect && strncmp(choice, expect, strlen(expect)) != 0) {
    fprintf(stderr, "  %s: ran \"%s\", want \"%s\"\n", what, choice, expect);
    CHECK(false);
  }
}

// Whether tj_compile for the CUDA target says UNSUPPORTED (no driver or
// GPU: the test skips, and this prints why) for a one-op graph of |ctx|,
// compiled with |options| (NULL: the defaults, target CUDA). Any other
// failure fails the test.
static inline bool tj_test_cuda_unsupported(
    tj_context_t* ctx, const tj_compile_options_t* options) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "probe", &g));
  if (!g) return false;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_exp(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, options ? options : &o, &exe);
  tj_graph_destroy(g);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped: tj_compile(TJ_TARGET_CUDA): %s\n", tj_status_message(s));
    tj_status_free(s);
    return true;
  }
  CHECK_OK(s);
  tj_executable_release(exe);
  return false;
}

#endif  // TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
