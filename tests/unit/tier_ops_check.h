// The harness of the op tests of issue 15 and 17 (ops_misc_test,
// ops_index_test): each graph is compiled for x86 at every ISA tier the
// host has (a context per tier: the host's, AVX2, SSE2; asking for a tier
// above the host's gives the host's), generic (symbolic dims as params) and
// specialized to the shape, run, and compared with tj_reference_run:
// floats within a relative tolerance, integers and bools exactly; each
// compiled executable must have no graph break. A test includes it once
// and creates g_ctx[] in its main (kIsa[] names the tiers).

#ifndef TJ_TESTS_UNIT_TIER_OPS_CHECK_H_
#define TJ_TESTS_UNIT_TIER_OPS_CHECK_H_

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
#include "tests/unit/x86_test_util.h"

enum { kTiers = 3, kMaxIo = 8 };

static const char* const kIsa[kTiers] = {NULL, "avx2", "sse2"};
static tj_context_t* g_ctx[kTiers];

typedef struct spec_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  double lo, hi;  // inputs: the range of the random values (ints inclusive)
} spec_t;

typedef tj_graph_t* (*build_fn)(tj_context_t* ctx);

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline double rng_unit(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}

static inline int64_t numel(const spec_t* s) {
  int64_t n = 1;
  for (int32_t d = 0; d < s->rank; ++d) n *= s->dims[d];
  return n;
}

static inline void* make_data(const spec_t* s) {
  int64_t n = numel(s);
  void* p = calloc((size_t)(n ? n : 1), tj_dtype_size(s->dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (tj_dtype_is_float(s->dtype)) {
      tj_store_f64(s->dtype, p, i, s->lo + (s->hi - s->lo) * rng_unit());
    } else {
      // The span may be the whole int64 range: offsets in uint64, which
      // wraps where int64 would overflow.
      double span = s->hi - s->lo + 1;
      // A span beyond 2^64 (u64's with a negative lo) is clamped, as a
      // double that large does not convert.
      double d = rng_unit() * span;
      uint64_t offset = d >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)d;
      int64_t v = (int64_t)((uint64_t)(int64_t)s->lo + offset);
      tj_store_i64(s->dtype, p, i, v);
    }
  }
  return p;
}

// Whether |got| equals |want| (floats within |tol| relative to max(1,
// |want|); NaN equals NaN). Prints the first miss.
static inline bool same(const char* what, const spec_t* s, const void* got,
                        const void* want, double tol) {
  for (int64_t i = 0; i < numel(s); ++i) {
    if (tj_dtype_is_float(s->dtype)) {
      double g = tj_load_f64(s->dtype, got, i);
      double w = tj_load_f64(s->dtype, want, i);
      if (isnan(g) && isnan(w)) continue;
      if (g == w) continue;
      if (fabs(g - w) <= tol * fmax(1.0, fabs(w))) continue;
      fprintf(stderr, "  %s: element %lld: got %.9g, want %.9g\n", what,
              (long long)i, g, w);
      return false;
    }
    int64_t g = tj_load_i64(s->dtype, got, i);
    int64_t w = tj_load_i64(s->dtype, want, i);
    if (g != w) {
      fprintf(stderr, "  %s: element %lld: got %lld, want %lld\n", what,
              (long long)i, (long long)g, (long long)w);
      return false;
    }
  }
  return true;
}

// Builds |build|'s graph in every tier's context, compiles it (generic and
// specialized), runs it on |in| and compares with the reference. With
// |error| set, both must fail with INVALID_ARGUMENT containing it.
// check_ops with |breaks| graph breaks expected in every compiled
// executable (an op some shapes run on the host).
static inline void check_ops_breaks(const char* what, build_fn build,
                                    int32_t num_in, const spec_t* in,
                                    int32_t num_out, const spec_t* out,
                                    double tol, const char* error,
                                    int32_t breaks) {
  CHECK(num_in <= kMaxIo && num_out <= kMaxIo);
  void* in_data[kMaxIo];
  tj_tensor_t in_t[kMaxIo], want_t[kMaxIo], got_t[kMaxIo];
  void* want[kMaxIo];
  void* got[kMaxIo];
  for (int32_t i = 0; i < num_in; ++i) {
    in_data[i] = make_data(&in[i]);
    in_t[i] = tj_tensor_make(in_data[i], in[i].dtype, in[i].rank, in[i].dims);
  }
  for (int32_t o = 0; o < num_out; ++o) {
    size_t bytes = (size_t)(numel(&out[o]) ? numel(&out[o]) : 1) *
                   tj_dtype_size(out[o].dtype);
    want[o] = calloc(1, bytes);
    got[o] = calloc(1, bytes);
    want_t[o] = tj_tensor_make(want[o], out[o].dtype, out[o].rank, out[o].dims);
    got_t[o] = tj_tensor_make(got[o], out[o].dtype, out[o].rank, out[o].dims);
  }
  // Every tier, or the host's alone under TJ_TEST_TIERS=host (test.h).
  for (int32_t t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = build(g_ctx[t]);
    CHECK_OK(tj_graph_finalize(g));
    if (error) {
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, error,
                   tj_reference_run(g, in_t, num_in, want_t, num_out));
    } else {
      CHECK_OK(tj_reference_run(g, in_t, num_in, want_t, num_out));
    }
    for (int policy = 0; policy < 2; ++policy) {
      tj_compile_options_t o = tj_test_x86_options(2);
      o.specialize = policy ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      if (!exe) continue;
      for (int32_t k = 0; k < num_out; ++k) {
        memset(got[k], 0xA5,
               (size_t)numel(&out[k]) * tj_dtype_size(out[k].dtype));
      }
      tj_status_t st = tj_executable_run(exe, in_t, num_in, got_t, num_out);
      if (error) {
        CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, error, st);
      } else {
        CHECK_OK(st);
        for (int32_t k = 0; k < num_out; ++k) {
          bool ok = same(what, &out[k], got[k], want[k], tol);
          if (!ok) {
            fprintf(stderr, "  %s: output %d at tier %s, %s\n", what, k,
                    kIsa[t] ? kIsa[t] : "host",
                    policy ? "specialized" : "generic");
          }
          CHECK(ok);
        }
      }
      tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
      tj_executable_stats(exe, &stats);
      if (stats.num_graph_breaks != breaks) {
        fprintf(stderr, "  %s: %d graph breaks\n", what,
                stats.num_graph_breaks);
      }
      CHECK_EQ_INT(breaks, stats.num_graph_breaks);
      tj_executable_release(exe);
    }
    tj_graph_destroy(g);
  }
  for (int32_t i = 0; i < num_in; ++i) free(in_data[i]);
  for (int32_t o = 0; o < num_out; ++o) {
    free(want[o]);
    free(got[o]);
  }
}

static inline void check_ops(const char* what, build_fn build, int32_t num_in,
                             const spec_t* in, int32_t num_out,
                             const spec_t* out, double tol, const char* error) {
  check_ops_breaks(what, build, num_in, in, num_out, out, tol, error, 0);
}

// The kernels |build|'s graph compiles to in |ctx| (x86, one thread);
// -1 where it does not compile.
static inline int32_t tj_test_kernels_of(tj_context_t* ctx, build_fn build) {
  tj_graph_t* g = build(ctx);
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  if (exe) tj_executable_stats(exe, &stats);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  return exe ? stats.num_kernels : -1;
}

static inline tj_graph_t* new_graph(tj_context_t* ctx, const char* name) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, name, &g));
  return g;
}

#endif  // TJ_TESTS_UNIT_TIER_OPS_CHECK_H_
