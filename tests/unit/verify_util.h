// What the tj_verify tests share (verify_test.c, verify_ladder_test.c,
// verify_reduce_test.c): the x86 ISA tiers they try, a context capped at
// one of them (NULL when it cannot be made), the compile options they use
// and the symbol B.

#ifndef TJ_TESTS_UNIT_VERIFY_UTIL_H_
#define TJ_TESTS_UNIT_VERIFY_UTIL_H_

#include "tests/unit/test.h"

// The ISA tiers tried; a tier the host lacks fails the compile and is
// skipped.
static const char* const kTiers[] = {"host", "avx512", "avx2", "sse2"};
static const char* const kB[1] = {"B"};

// How many of kTiers a test tries (tj_test_tiers: the host's alone under
// TJ_TEST_TIERS=host), and how many of them the host must have run: the
// host's, and sse2 where it is tried.
static inline size_t num_tiers(void) {
  return (size_t)tj_test_tiers((int)TJ_ARRAY_SIZE(kTiers));
}
static inline int min_tiers(void) { return num_tiers() > 1 ? 2 : 1; }

static inline tj_context_t* tier_context(const char* isa) {
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.x86_isa = isa;
  o.cache_dir = "";
  tj_context_t* ctx = NULL;
  tj_status_t st = tj_context_create(&o, &ctx);
  if (st) {
    tj_status_free(st);
    return NULL;
  }
  return ctx;
}

// x86, no disk cache, the IR verified after every pass, two threads.
static inline tj_compile_options_t x86_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.cache_dir = "";
  o.verify_each = true;
  o.x86.num_threads = 2;
  return o;
}

#endif  // TJ_TESTS_UNIT_VERIFY_UTIL_H_
