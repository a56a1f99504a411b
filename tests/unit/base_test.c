// Unit tests of lib/base.h's helpers, lib/status.c, lib/alloc.c, lib/arena.c
// and lib/context.c.

#include "tests/unit/test.h"

#include "lib/arena.h"
#include "lib/base.h"

// The one shape bucket every target keys specializations and GEMM tuning
// by: its edges (0, 1, exact powers, the int64 top) are the contract.
TEST(pow2_bucket_edges) {
  CHECK_EQ_INT(0, tj_pow2_bucket(-5));
  CHECK_EQ_INT(0, tj_pow2_bucket(0));
  CHECK_EQ_INT(1, tj_pow2_bucket(1));
  CHECK_EQ_INT(2, tj_pow2_bucket(2));
  CHECK_EQ_INT(4, tj_pow2_bucket(3));
  CHECK_EQ_INT(1024, tj_pow2_bucket(1024));
  CHECK_EQ_INT(2048, tj_pow2_bucket(1025));
  CHECK_EQ_INT((int64_t)1 << 62, tj_pow2_bucket(((int64_t)1 << 61) + 1));
  CHECK_EQ_INT((int64_t)1 << 62, tj_pow2_bucket((int64_t)1 << 62));
  CHECK_EQ_INT(INT64_MAX, tj_pow2_bucket(INT64_MAX));
  double t0 = tj_now_ms(), t1 = tj_now_ms();
  CHECK(t1 >= t0);
}

TEST(version) {
  CHECK_EQ_INT(TJ_VERSION_NUMBER, tj_version_number());
  CHECK_STREQ("0.1.0", tj_version_string());
}

TEST(status_codes_and_messages) {
  CHECK_EQ_INT(TJ_STATUS_OK, tj_status_code(NULL));
  CHECK_STREQ("", tj_status_message(NULL));
  tj_status_free(NULL);
  tj_status_t s = tj_invalid("matmul (node %%%d): bad %s", 3, "shape");
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK_STREQ("matmul (node %3): bad shape", tj_status_message(s));
  s = tj_status_annotate(s, "x.tj:%d:%d", 4, 7);
  CHECK_STREQ("x.tj:4:7: matmul (node %3): bad shape", tj_status_message(s));
  tj_status_t copy = tj_status_clone(s);
  CHECK_STREQ(tj_status_message(s), tj_status_message(copy));
  tj_status_free(copy);
  tj_status_free(s);
  // OUT_OF_MEMORY never allocates and frees as a no-op.
  tj_status_t oom = tj_status_oom();
  CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(oom));
  CHECK_STREQ("OUT_OF_MEMORY", tj_status_code_name(tj_status_code(oom)));
  tj_status_free(oom);
  // join keeps the first error.
  tj_status_t j = tj_status_join(tj_internal("first"), tj_internal("second"));
  CHECK_STREQ("first", tj_status_message(j));
  tj_status_free(j);
  j = tj_status_join(NULL, tj_unsupported("cleanup"));
  CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED, tj_status_code(j));
  tj_status_free(j);
}

TEST(dtypes) {
  CHECK_STREQ("bf16", tj_dtype_name(TJ_DTYPE_BF16));
  CHECK_STREQ("?", tj_dtype_name((tj_dtype_t)99));
  CHECK_EQ_INT(2, tj_dtype_size(TJ_DTYPE_F16));
  CHECK_EQ_INT(8, tj_dtype_size(TJ_DTYPE_I64));
  CHECK_EQ_INT(1, tj_dtype_size(TJ_DTYPE_BOOL));
  CHECK_EQ_INT(0, tj_dtype_size(TJ_DTYPE_COUNT_));
}

TEST(array_reserve_grows_and_fails_cleanly) {
  tj_test_allocator_t t;
  tj_test_allocator_initialize(&t, -1);
  tj_allocator_t a = tj_test_allocator_get(&t);
  int* items = NULL;
  uint32_t capacity = 0;
  CHECK_OK(tj_array_reserve(a, (void**)&items, &capacity, 100, sizeof(int)));
  CHECK(capacity >= 100);
  for (int i = 0; i < 100; ++i) items[i] = i;
  t.fail_at = t.allocations;  // the next growth fails
  uint32_t before = capacity;
  CHECK_STATUS(
      TJ_STATUS_OUT_OF_MEMORY, "",
      tj_array_reserve(a, (void**)&items, &capacity, before + 1, sizeof(int)));
  CHECK_EQ_INT(before, capacity);
  CHECK_EQ_INT(99, items[99]);  // unchanged on failure
  tj_free(a, items, capacity * sizeof(int));
  CHECK_EQ_INT(0, t.live_blocks);
  CHECK_EQ_INT(0, t.bad_frees);
}

TEST(arena_alignment_big_blocks_and_oom) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_arena_t arena;
    tj_arena_initialize(&arena, tj_test_allocator_get(&t));
    bool ok = true;
    for (int i = 0; i < 64 && ok; ++i) {
      size_t size = (size_t)(i * 97 % 5000) + (i == 7 ? 100000 : 0);
      unsigned char* p = tj_arena_alloc(&arena, size);
      if (!p) {
        ok = false;
        break;
      }
      CHECK_EQ_INT(0, (uintptr_t)p % 16);
      memset(p, 0xab, size);
    }
    char* s = ok ? tj_arena_strdup(&arena, "hello") : NULL;
    if (ok) CHECK_STREQ("hello", s);
    tj_arena_deinitialize(&arena);
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (ok && s) break;
  }
}

static int g_diagnostics;
static void count_diagnostic(tj_severity_t severity, const char* message,
                             size_t length, void* user_data) {
  (void)severity;
  (void)message;
  (void)length;
  *(int*)user_data += 1;
}

TEST(context_uses_injected_allocator_and_diagnostics) {
  tj_test_allocator_t t;
  tj_test_allocator_initialize(&t, -1);
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.allocator = tj_test_allocator_get(&t);
  options.diagnostic_fn = count_diagnostic;
  options.diagnostic_user_data = &g_diagnostics;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&options, &ctx));
  CHECK(t.live_blocks > 0);
  tj_context_diagnostic(ctx, TJ_SEVERITY_REMARK, "hello %d", 1);
  CHECK_EQ_INT(1, g_diagnostics);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, t.live_blocks);

  t.fail_at = t.allocations;
  ctx = (tj_context_t*)1;
  CHECK_STATUS(TJ_STATUS_OUT_OF_MEMORY, "", tj_context_create(&options, &ctx));
  CHECK(ctx == NULL);
  CHECK_EQ_INT(0, t.live_blocks);
}

// A diagnostic callback that calls back into the library: it reports once
// more through the same context (as a callback that compiles would). That
// must not deadlock.
typedef struct reentrant_t {
  tj_context_t* ctx;
  int calls;
} reentrant_t;

static void reentrant_diagnostic(tj_severity_t severity, const char* message,
                                 size_t length, void* user_data) {
  (void)severity;
  (void)message;
  (void)length;
  reentrant_t* r = user_data;
  if (++r->calls == 1) {
    tj_context_diagnostic(r->ctx, TJ_SEVERITY_REMARK, "nested");
  }
}

TEST(diagnostic_callback_may_call_the_library) {
  reentrant_t r = {NULL, 0};
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.diagnostic_fn = reentrant_diagnostic;
  options.diagnostic_user_data = &r;
  CHECK_OK(tj_context_create(&options, &r.ctx));
  tj_context_diagnostic(r.ctx, TJ_SEVERITY_REMARK, "outer");
  CHECK_EQ_INT(2, r.calls);
  tj_context_destroy(r.ctx);
}

int main(void) {
  RUN_TEST(version);
  RUN_TEST(pow2_bucket_edges);
  RUN_TEST(status_codes_and_messages);
  RUN_TEST(dtypes);
  RUN_TEST(array_reserve_grows_and_fails_cleanly);
  RUN_TEST(arena_alignment_big_blocks_and_oom);
  RUN_TEST(context_uses_injected_allocator_and_diagnostics);
  RUN_TEST(diagnostic_callback_may_call_the_library);
  TEST_MAIN_END();
}
