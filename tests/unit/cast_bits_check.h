// check_bits, shared by the dtype tests (quant_dtype_test.c,
// narrow_dtype_test.c): a one-input, one-output graph compiled for x86 at
// every ISA tier (tj_test_tiers), generic and specialized, run, and its
// output compared byte for byte with tj_reference_run's, with no graph
// break. A test includes it once and creates g_ctx[] in its main (kIsa[]
// names the tiers: the host's, AVX2, SSE2).

#ifndef TJ_TESTS_UNIT_CAST_BITS_CHECK_H_
#define TJ_TESTS_UNIT_CAST_BITS_CHECK_H_

#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tests/unit/test.h"

enum { kTiers = 3 };
static const char* const kIsa[kTiers] = {NULL, "avx2", "sse2"};
static tj_context_t* g_ctx[kTiers];

typedef tj_graph_t* (*build_fn)(tj_context_t* ctx);

// Compiles |build|'s graph at every tier, generic and specialized, runs it
// on |in| and compares the output's bytes with the reference's.
static void check_bits(const char* what, build_fn build, tj_dtype_t in_dtype,
                       const void* in, int64_t n, tj_dtype_t out_dtype) {
  size_t out_bytes = (size_t)n * tj_dtype_size(out_dtype);
  unsigned char* want = calloc(1, out_bytes);
  unsigned char* got = calloc(1, out_bytes);
  tj_tensor_t in_t = tj_tensor_make((void*)in, in_dtype, 1, &n);
  tj_tensor_t want_t = tj_tensor_make(want, out_dtype, 1, &n);
  tj_tensor_t got_t = tj_tensor_make(got, out_dtype, 1, &n);
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = build(g_ctx[t]);
    CHECK_OK(tj_graph_finalize(g));
    CHECK_OK(tj_reference_run(g, &in_t, 1, &want_t, 1));
    for (int policy = 0; policy < 2; ++policy) {
      tj_compile_options_t o = tj_test_x86_options(1);
      o.specialize = policy ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      if (!exe) continue;
      memset(got, 0xA5, out_bytes);
      CHECK_OK(tj_executable_run(exe, &in_t, 1, &got_t, 1));
      for (int64_t i = 0; i < n; ++i) {
        size_t es = tj_dtype_size(out_dtype);
        if (memcmp(got + i * (int64_t)es, want + i * (int64_t)es, es) != 0) {
          fprintf(stderr,
                  "  %s at tier %s (%s): element %lld (in %.9g): got %.9g, "
                  "want %.9g\n",
                  what, kIsa[t] ? kIsa[t] : "host",
                  policy ? "specialized" : "generic", (long long)i,
                  tj_load_f64(in_dtype, in, i), tj_load_f64(out_dtype, got, i),
                  tj_load_f64(out_dtype, want, i));
          CHECK(false);
          break;
        }
      }
      tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
      tj_executable_stats(exe, &stats);
      CHECK_EQ_INT(0, stats.num_graph_breaks);
      tj_executable_release(exe);
    }
    tj_graph_destroy(g);
  }
  free(want);
  free(got);
}

#endif  // TJ_TESTS_UNIT_CAST_BITS_CHECK_H_
