// Two (here four) processes compiling the same graph into the same empty
// disk cache at once must leave a valid cache: a fresh context then loads
// the kernels without LLVM and computes the same results, and no temporary
// file is left behind.

#include "tests/unit/test.h"

#include "lib/base.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

static tj_graph_t* build(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "race", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 48}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){48, 40}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){40}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true), "y");
  tj_status_t st = tj_graph_finalize(g);
  if (st) {
    tj_status_free(st);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// Compiles once in a fresh context whose default cache directory is |dir|;
// returns (cache_hits, cache_misses) through the pointers.
static bool compile_once(const char* dir, int64_t* hits, int64_t* misses,
                         tj_executable_t** out_exe, tj_context_t** out_ctx,
                         tj_graph_t** out_graph) {
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.cache_dir = dir;
  tj_context_t* ctx = NULL;
  if (tj_context_create(&o, &ctx)) return false;
  tj_graph_t* g = build(ctx);
  tj_executable_t* exe = NULL;
  tj_status_t st = g ? tj_compile(g, NULL, &exe) : tj_internal("build");
  if (st) {
    fprintf(stderr, "compile: %s\n", tj_status_message(st));
    tj_status_free(st);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    return false;
  }
  tj_executable_stats_t s = {.struct_size = sizeof(s)};
  tj_executable_stats(exe, &s);
  *hits = s.cache_hits;
  *misses = s.cache_misses;
  *out_exe = exe;
  *out_ctx = ctx;
  *out_graph = g;
  return true;
}

TEST(concurrent_writers_leave_a_valid_cache) {
  char dir[128];
  snprintf(dir, sizeof(dir), "/tmp/tj-cache-race-%d", (int)getpid());
  int go[2];
  CHECK(pipe(go) == 0);
  enum { kWriters = 4 };
  pid_t kids[kWriters];
  for (int i = 0; i < kWriters; ++i) {
    kids[i] = fork();
    if (kids[i] == 0) {
      char byte;
      close(go[1]);
      if (read(go[0], &byte, 1) != 0) _exit(3);  // wait for the start
      int64_t hits, misses;
      tj_executable_t* exe;
      tj_context_t* ctx;
      tj_graph_t* g;
      if (!compile_once(dir, &hits, &misses, &exe, &ctx, &g)) _exit(1);
      tj_executable_release(exe);
      tj_graph_destroy(g);
      tj_context_destroy(ctx);
      _exit(0);
    }
  }
  close(go[0]);
  close(go[1]);  // everyone starts now
  for (int i = 0; i < kWriters; ++i) {
    int status = -1;
    CHECK(waitpid(kids[i], &status, 0) == kids[i]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  int64_t hits = 0, misses = -1;
  tj_executable_t* exe = NULL;
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  CHECK(compile_once(dir, &hits, &misses, &exe, &ctx, &g));
  CHECK(hits >= 1);
  CHECK_EQ_INT(0, misses);  // nothing compiled by LLVM: loaded from disk
  if (exe) {
    float x[3 * 48], w[48 * 40], b[40], y[3 * 40], ref[3 * 40];
    for (int i = 0; i < 3 * 48; ++i) x[i] = (float)((i * 37) % 17) / 8.0f - 1;
    for (int i = 0; i < 48 * 40; ++i)
      w[i] = (float)((i * 11) % 13) / 26.0f - 0.25f;
    for (int i = 0; i < 40; ++i) b[i] = (float)i / 40.0f;
    int64_t xs[2] = {3, 48}, ws[2] = {48, 40}, bs[1] = {40}, ys[2] = {3, 40};
    tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                         tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                         tj_tensor_make(b, TJ_DTYPE_F32, 1, bs)};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
    tj_tensor_t ref_out = tj_tensor_make(ref, TJ_DTYPE_F32, 2, ys);
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    CHECK_OK(tj_reference_run(g, in, 3, &ref_out, 1));
    double worst = 0;
    for (int i = 0; i < 3 * 40; ++i) {
      double e = fabs((double)y[i] - (double)ref[i]) / (1.0 + fabs(ref[i]));
      if (!(e <= worst)) worst = e;
    }
    CHECK(worst < 1e-5);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);

  // Exactly the finished files remain: no temporaries.
  DIR* d = opendir(dir);
  CHECK(d != NULL);
  int files = 0, temps = 0;
  for (struct dirent* e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    ++files;
    if (strstr(e->d_name, ".tmp.")) ++temps;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
  CHECK(files >= 1);
  CHECK_EQ_INT(0, temps);
}

int main(void) {
  RUN_TEST(concurrent_writers_leave_a_valid_cache);
  TEST_MAIN_END();
}
