// The conformance suite (tests/conformance/conformance.h) on the x86
// backend: every op of lib/ops.def on every dtype it takes, and the shared
// op cases, against the reference interpreter, dense and strided CPU
// tensors, B = 0, 1, 7, 33, 257 from one executable.

#include "tests/conformance/conformance.h"
#include "tests/unit/test.h"

// Nothing is skipped on x86.
static const tj_cts_skip_t kSkips[] = {{NULL, NULL}};

// Where x86 differs from the portable kernel / graph-break counts.
static const tj_cts_expect_t kExpects[] = {
    {NULL, 0, 0, NULL},
};

int main(void) {
  tj_test_skip_host_tier();  // the tiers suite's avx2 run
  g_test_current = "x86_conformance";
  // No disk cache: counts of compiled kernels must not depend on earlier
  // runs.
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_cts_backend_t be = {"x86", TJ_TARGET_X86, ctx, kSkips, kExpects, NULL};
  tj_cts_run_all(&be);
  g_test_checks += tj_cts_checks;
  g_test_failures += tj_cts_failures;
  tj_context_destroy(ctx);
  TEST_MAIN_END();
}
