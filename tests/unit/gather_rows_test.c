// cudabw (issue 15): the embedding gather on x86 at every ISA tier the host
// runs (tj_test_tier_contexts), against the reference, bit for bit. Its
// rows are written by non-temporal stores where the output is at least
// 8 MiB and every vector of it is aligned (jit/emit_pointwise.c's
// nontemporal_ok; a run-time choice, so one executable takes both paths):
// [3000 of 64 x 768] f32 (9.2 MB, the non-temporal path) and [T of
// 64 x 768] at T 5 (the plain path) from one executable with T symbolic,
// bf16 rows of 768 and 1536 (vectors of 16 and 32 halves), f32 rows of 7
// (scalar lines, never non-temporal), an output written through a
// misaligned view (an odd offset into a caller's buffer: the plain path),
// and ids that are negative (counted from the end) or past either end
// (clamped), i32 and i64, on 1 and 2 threads. The kernels' assembly
// (TJ_DUMP_DIR's .s) must hold a non-temporal store (movnt*, every tier
// has one) for the rows of 768 and 1536 and none for the rows of 7, and
// likewise a prefetch (prefetcht0) of a later unit's rows, which the
// non-temporal path issues (emit_pointwise.c's prefetch_unit_ahead).

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "lib/dtype.h"
#include "tests/unit/test.h"

static tj_context_t* g_ctx[3];
static const char* g_isa[3];
static int g_num_ctx;
static char g_dir[] = "/tmp/tj_gather_rows_XXXXXX";

// Whether a dumped .s file whose name starts with |prefix| holds |needle|.
static bool dump_has(const char* prefix, const char* needle) {
  DIR* d = opendir(g_dir);
  bool found = false;
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL && !found) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || n < 2 ||
        strcmp(e->d_name + n - 2, ".s") != 0)
      continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
    FILE* f = fopen(path, "r");
    char line[512];
    while (f && !found && fgets(line, sizeof(line), f))
      found = strstr(line, needle) != NULL;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return found;
}

// Removes the dumps (one level of files) and the directory.
static void remove_dumps(void) {
  DIR* d = opendir(g_dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(g_dir);
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float uniform(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct gcase_t {
  const char* name;
  tj_dtype_t table, ids;
  int64_t v, d;
  int64_t tokens[2];  // runs of one executable (T symbolic)
} gcase_t;

static const gcase_t kCases[] = {
    {"f32_768", TJ_DTYPE_F32, TJ_DTYPE_I64, 64, 768, {3000, 5}},
    {"bf16_768", TJ_DTYPE_BF16, TJ_DTYPE_I32, 50, 768, {6000, 3}},
    {"bf16_1536", TJ_DTYPE_BF16, TJ_DTYPE_I64, 9, 1536, {2800, 1}},
    {"f32_7", TJ_DTYPE_F32, TJ_DTYPE_I64, 11, 7, {400000, 2}},
};

// Runs |exe| on |t| ids and compares with the reference; |skew| elements
// into a larger output buffer (misaligned for any skew not a multiple of
// the vector).
static void check(const gcase_t* c, tj_graph_t* g, tj_executable_t* exe,
                  const unsigned char* tab, int64_t t, int64_t skew,
                  const char* what) {
  const size_t es = tj_dtype_size(c->table);
  const int64_t pick[8] = {0, c->v - 1, -1, -c->v, c->v, -c->v - 1, 1 << 30, 2};
  int64_t* i64 = malloc((size_t)(t ? t : 1) * 8);
  int32_t* i32 = malloc((size_t)(t ? t : 1) * 4);
  for (int64_t i = 0; i < t; ++i) {
    i64[i] = i < 8 ? pick[i] : (int64_t)((i * 7919) % (3 * c->v)) - c->v;
    i32[i] = (int32_t)i64[i];
  }
  int64_t td[2] = {c->v, c->d}, is[1] = {t}, ys[2] = {t, c->d};
  tj_tensor_t in[2];
  in[0] = tj_tensor_make((void*)tab, c->table, 2, td);
  in[1] = tj_tensor_make(c->ids == TJ_DTYPE_I64 ? (void*)i64 : (void*)i32,
                         c->ids, 1, is);
  const size_t bytes = (size_t)(t * c->d) * es;
  unsigned char* want = calloc(bytes + 1, 1);
  unsigned char* space = malloc(bytes + (size_t)(skew + 64) * es);
  unsigned char* got = space + (size_t)skew * es;
  memset(got, 0xff, bytes);
  tj_tensor_t w = tj_tensor_make(want, c->table, 2, ys);
  CHECK_OK(tj_reference_run(g, in, 2, &w, 1));
  tj_tensor_t o = tj_tensor_make(got, c->table, 2, ys);
  CHECK_OK(tj_executable_run(exe, in, 2, &o, 1));
  bool same = memcmp(got, want, bytes) == 0;
  if (!same)
    fprintf(stderr, "  %s %s T=%lld skew %lld: differs from the reference\n",
            c->name, what, (long long)t, (long long)skew);
  CHECK(same);
  free(i64);
  free(i32);
  free(want);
  free(space);
}

TEST(gathers_every_tier) {
  for (size_t ci = 0; ci < TJ_ARRAY_SIZE(kCases); ++ci) {
    const gcase_t* c = &kCases[ci];
    const size_t es = tj_dtype_size(c->table);
    unsigned char* tab = malloc((size_t)(c->v * c->d) * es);
    for (int64_t i = 0; i < c->v * c->d; ++i) {
      float f = uniform();
      if (c->table == TJ_DTYPE_F32) {
        memcpy(tab + i * 4, &f, 4);
      } else {
        uint16_t h = tj_f32_to_bf16(f);
        memcpy(tab + i * 2, &h, 2);
      }
    }
    for (int ti = 0; ti < g_num_ctx; ++ti) {
      for (int32_t threads = 1; threads <= 2; ++threads) {
        char name[64];
        snprintf(name, sizeof(name), "gather_%s_%s_%d", c->name, g_isa[ti],
                 (int)threads);
        tj_graph_t* g = NULL;
        CHECK_OK(tj_graph_create(g_ctx[ti], name, &g));
        if (!g) continue;
        int64_t td[2] = {c->v, c->d};
        int64_t id[1] = {tj_graph_symbol(g, "T")};
        tj_value_t table = tj_graph_input(g, c->table, 2, td, "table");
        tj_value_t ids = tj_graph_input(g, c->ids, 1, id, "ids");
        tj_graph_output(g, tj_graph_gather(g, table, ids, 0), "y");
        CHECK_OK(tj_graph_finalize(g));
        tj_compile_options_t o = tj_test_x86_options(threads);
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile(g, &o, &exe));
        if (exe) {
          tj_executable_stats_t st = {.struct_size = sizeof(st)};
          tj_executable_stats(exe, &st);
          CHECK_EQ_INT(1, st.num_kernels);
          CHECK_EQ_INT(0, st.num_graph_breaks);
          const bool nt = c->d % 16 == 0;
          char prefix[72];
          snprintf(prefix, sizeof(prefix), "%s.", name);
          if (dump_has(prefix, "movnt") != nt)
            fprintf(stderr, "  %s: %s non-temporal store in the assembly\n",
                    name, nt ? "no" : "a");
          CHECK(dump_has(prefix, "movnt") == nt);
          if (dump_has(prefix, "prefetcht0") != nt)
            fprintf(stderr, "  %s: %s prefetch in the assembly\n", name,
                    nt ? "no" : "a");
          CHECK(dump_has(prefix, "prefetcht0") == nt);
          char what[48];
          snprintf(what, sizeof(what), "%s/%d", g_isa[ti], (int)threads);
          for (int r = 0; r < 2; ++r)
            check(c, g, exe, tab, c->tokens[r], 0, what);
          // Misaligned: the plain stores on the large output.
          check(c, g, exe, tab, c->tokens[0], 1, what);
          tj_executable_release(exe);
        }
        tj_graph_destroy(g);
      }
    }
    free(tab);
  }
}

int main(void) {
  if (!mkdtemp(g_dir)) return 1;
  // tj_test_tier_contexts' tiers, with the assembly dumped.
  static const char* isas[] = {"host", "avx2", "sse2"};
  for (int i = 0; i < tj_test_tiers(3); ++i) {
    if (i == 1 && !__builtin_cpu_supports("avx512f")) continue;
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = isas[i];
    o.log = "";
    o.dump_dir = g_dir;
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&o, &ctx);
    if (st) {
      tj_status_free(st);
      continue;
    }
    g_isa[g_num_ctx] = isas[i];
    g_ctx[g_num_ctx++] = ctx;
  }
  CHECK(g_num_ctx >= 1);
  RUN_TEST(gathers_every_tier);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  remove_dumps();
  TEST_MAIN_END();
}
