// The x86 program's balancing of GEMM work units over the threads
// (x86_program.c, balance_gemm_units): a linear layer y = x @ w + b with
// constant sizes, compiled for several thread counts at every ISA tier
// the host has, agrees with the reference interpreter, and the kernel's
// n block (the kernel dump's schedule) is narrowed only where the threads
// would otherwise idle: the batch of 2 folds into m (one GEMM of 128 rows,
// kir/lower_index.c), so 2 units of 128 x 128 leave one of 3 threads idle,
// where 8 units of 66 rows (mc halved twice) and 64 columns take 3 waves
// of a quarter the size (AVX-512: 64-column register tiles); 2 threads, 1
// thread and a symbolic M keep the default ("nc auto").

#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/random_graph.h"

static tj_context_t* g_ctx[3];
static const char* g_isa[3];
static int g_num_ctx;
static char g_dump[3][64];

// x [2, M, 96] @ w [96, 256] + b [256]; M symbolic ("M") when |m| < 0.
static tj_graph_t* linear(tj_context_t* ctx, int64_t m) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "balance", &g));
  int64_t dm = m < 0 ? tj_graph_symbol(g, "M") : m;
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, dm, 96}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){96, 256}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){256}, "b");
  tj_graph_output(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static int remove_entry(const char* path, const struct stat* st, int flag,
                        struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

// The "nc ..." field of the GEMM kernel's dump in |dir| ("" when none),
// then empties |dir| for the next compile.
static void gemm_nc(const char* dir, char* out, size_t size) {
  out[0] = '\0';
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 4, ".kir") != 0) continue;
    char path[512], text[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char* gemm = strstr(text, "gemm [");
    const char* nc = gemm ? strstr(gemm, " nc ") : NULL;
    if (!nc) continue;
    snprintf(out, size, "nc %.*s", (int)strcspn(nc + 4, " \n"), nc + 4);
  }
  closedir(d);
  nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void check(int c, int64_t m, int32_t threads, const char* want_nc) {
  tj_graph_t* g = linear(g_ctx[c], m);
  inputs_t in;
  CHECK(make_inputs_ex(g, m < 0 ? 64 : 1, 11, false, false, &in));
  run_t want, got;
  CHECK_OK(run_graph(g, &in, &want));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = "";
  opts.x86.num_threads = threads;
  tj_status_t st = run_compiled(g, &in, &opts, &got);
  CHECK_OK(st);
  if (!st) {
    char what[256] = "";
    bool ok = outputs_agree(g, &want, &got, what, sizeof(what));
    if (!ok) {
      fprintf(stderr, "  %s, M %lld, %d threads: %s\n", g_isa[c], (long long)m,
              threads, what);
    }
    CHECK(ok);
  }
  char nc[64];
  gemm_nc(g_dump[c], nc, sizeof(nc));
  if (want_nc && strcmp(nc, want_nc) != 0) {
    fprintf(stderr, "  %s, M %lld, %d threads: %s, want %s\n", g_isa[c],
            (long long)m, threads, nc, want_nc);
    CHECK(false);
  }
  if (!want_nc && strcmp(nc, "nc auto") == 0 && threads == 3 && m == 64) {
    fprintf(stderr, "  %s: 3 threads kept the default n block\n", g_isa[c]);
    CHECK(false);
  }
  run_free(&want);
  run_free(&got);
  inputs_free(&in);
  tj_graph_destroy(g);
}

TEST(balanced_units_agree_with_reference) {
  for (int c = 0; c < g_num_ctx; ++c) {
    bool zmm = c == 0 && __builtin_cpu_supports("avx512f");
    // 3 threads: narrowed on every tier (AVX-512 to 64, the others to
    // their own best width).
    check(c, 64, 3, zmm ? "nc 64" : NULL);
    check(c, 64, 5, NULL);
    check(c, 64, 16, NULL);
    check(c, 64, 2, zmm ? "nc auto" : NULL);
    check(c, 64, 1, "nc auto");
    check(c, -1, 3, "nc auto");
  }
}

int main(void) {
  static const char* isas[] = {"host", "avx2", "sse2"};
  for (int i = 0; i < 3; ++i) {
    if (i == 1 && !__builtin_cpu_supports("avx512f")) continue;
    snprintf(g_dump[g_num_ctx], sizeof(g_dump[0]), "/tmp/tj_balance_XXXXXX");
    if (!mkdtemp(g_dump[g_num_ctx])) continue;
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = isas[i];
    o.log = "";
    o.dump_dir = g_dump[g_num_ctx];
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&o, &ctx);
    if (st) {
      tj_status_free(st);
      remove(g_dump[g_num_ctx]);
      continue;
    }
    g_isa[g_num_ctx] = isas[i];
    g_ctx[g_num_ctx++] = ctx;
  }
  RUN_TEST(balanced_units_agree_with_reference);
  for (int c = 0; c < g_num_ctx; ++c) {
    tj_context_destroy(g_ctx[c]);
    nftw(g_dump[c], remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  }
  TEST_MAIN_END();
}
