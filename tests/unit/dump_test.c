// The dump directory's per-kernel files (jit/kernel_dump.h) for the
// capstone block (tests/lit/roundtrip/capstone.tj, @block): every kernel
// the profile names has <graph>.<kernel>.{kir,ll,opt.ll,s,tune.txt};
// llc-19 takes the .ll files and `as` assembles the .s (each skipped when
// the tool is missing); a directory that cannot be written is a warning
// naming the setting, and the compile goes on.
//
// Without a GPU the CUDA target's dumps come from tj_cuda_compile_ptx
// (offline, for sm_90a): per kernel its .kir, .tune.txt and .ptx (the
// module), which ptxas -arch=sm_90a takes (skipped without ptxas).
//
// Usage: dump_test CAPSTONE.tj LLC AS PTXAS (each tool "" when not found).

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/test.h"

static const char* g_capstone;
static const char* g_llc;
static const char* g_as;
static const char* g_ptxas;

static char* read_file(const char* path, size_t* out_len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc((size_t)n + 1);
  if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
    free(text);
    text = NULL;
  }
  if (text) text[n] = '\0';
  fclose(f);
  if (out_len) *out_len = (size_t)n;
  return text;
}

// The first function of the capstone file (@block).
static tj_graph_t* parse_block(tj_context_t* context) {
  size_t len = 0;
  char* text = read_file(g_capstone, &len);
  CHECK(text != NULL);
  if (!text) return NULL;
  char* cut = strstr(text, "// -----");
  if (cut) len = (size_t)(cut - text);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(context, text, len, g_capstone, &g));
  free(text);
  return g;
}

static int64_t file_size(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static int run_tool(const char* command) {
  int rc = system(command);
  if (rc != 0) fprintf(stderr, "# failed (%d): %s\n", rc, command);
  return rc;
}

typedef struct log_t {
  char text[4096];
} log_t;

static void on_diagnostic(tj_severity_t severity, const char* message,
                          size_t length, void* user_data) {
  log_t* log = (log_t*)user_data;
  if (severity != TJ_SEVERITY_WARNING) return;
  size_t used = strlen(log->text);
  size_t room = sizeof(log->text) - 1 - used;
  size_t n = length < room ? length : room;
  memcpy(log->text + used, message, n);
  log->text[used + n] = '\0';
}

TEST(capstone_kernels_have_their_dumps) {
  char dir[] = "/tmp/tj_dump_test_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_context_options_t co = tj_test_context_options();
  co.dump_dir = dir;
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = parse_block(context);
  if (!g) {
    tj_context_destroy(context);
    return;
  }
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  // The kernels the profile names.
  enum { kB = 4, kD = 1024, kH = 4096 };
  float* x = calloc((size_t)kB * kD, sizeof(float));
  float* w = calloc((size_t)kD * kH, sizeof(float));
  float* b = calloc(kH, sizeof(float));
  float* y = calloc((size_t)kB * kH, sizeof(float));
  int64_t xs[2] = {kB, kD}, ws[2] = {kD, kH}, bs[1] = {kH}, ys[2] = {kB, kH};
  tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(b, TJ_DTYPE_F32, 1, bs)};
  tj_tensor_t out[1] = {tj_tensor_make(y, TJ_DTYPE_F32, 2, ys)};
  tj_profile_report_t* r = NULL;
  CHECK_OK(tj_executable_profile(exe, in, 3, out, 1, 1, &r));
  int kernels = 0, checked_tools = 0;
  for (int32_t i = 0; r && i < r->num_entries; ++i) {
    const tj_profile_entry_t* e = &r->entries[i];
    if (e->kind != TJ_PROFILE_KERNEL) continue;
    ++kernels;
    static const char* const kExt[] = {".kir", ".ll", ".opt.ll", ".s",
                                       ".tune.txt"};
    char path[1024];
    for (size_t j = 0; j < sizeof(kExt) / sizeof(kExt[0]); ++j) {
      snprintf(path, sizeof(path), "%s/block.%s%s", dir, e->name, kExt[j]);
      if (file_size(path) <= 0) {
        fprintf(stderr, "# missing or empty: %s\n", path);
        CHECK(!"a dump is missing");
      }
    }
    snprintf(path, sizeof(path), "%s/block.%s.kir", dir, e->name);
    char* kir = read_file(path, NULL);
    char head[300];
    snprintf(head, sizeof(head), "kernel @%s ", e->name);
    CHECK_CONTAINS(kir, head);
    free(kir);
    snprintf(path, sizeof(path), "%s/block.%s.tune.txt", dir, e->name);
    char* tune = read_file(path, NULL);
    CHECK_CONTAINS(tune, "f32 lanes");
    CHECK_CONTAINS(tune, "GEMM autotune off");
    if (strcmp(e->detail, "gemm") == 0) CHECK_CONTAINS(tune, "gemm schedule");
    free(tune);
    char cmd[3000];
    if (g_llc[0]) {
      for (int opt = 0; opt < 2; ++opt) {
        snprintf(cmd, sizeof(cmd), "'%s' -filetype=null '%s/block.%s%s' 2>&1",
                 g_llc, dir, e->name, opt ? ".opt.ll" : ".ll");
        CHECK_EQ_INT(0, run_tool(cmd));
        ++checked_tools;
      }
    }
    if (g_as[0]) {
      snprintf(cmd, sizeof(cmd), "'%s' -o /dev/null '%s/block.%s.s' 2>&1", g_as,
               dir, e->name);
      CHECK_EQ_INT(0, run_tool(cmd));
      ++checked_tools;
    }
  }
  CHECK(kernels >= 1);
  printf("# %d kernels, %d tool checks (llc: %s, as: %s)\n", kernels,
         checked_tools, g_llc[0] ? g_llc : "skipped",
         g_as[0] ? g_as : "skipped");
  tj_profile_report_destroy(r);
  free(x);
  free(w);
  free(b);
  free(y);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  CHECK_EQ_INT(0, system(cmd));
}

TEST(an_unwritable_dump_dir_is_a_warning) {
  char dir[] = "/tmp/tj_dump_test_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char file[300], sub[400];
  snprintf(file, sizeof(file), "%s/file", dir);
  FILE* f = fopen(file, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  snprintf(sub, sizeof(sub), "%s/sub", file);  // under a regular file
  static log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_options_t co = tj_test_context_options();
  co.dump_dir = sub;
  co.diagnostic_fn = on_diagnostic;
  co.diagnostic_user_data = &log;
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = parse_block(context);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  CHECK(exe != NULL);
  CHECK_CONTAINS(log.text, "tj_context_options_t.dump_dir: cannot write");
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(context);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  CHECK_EQ_INT(0, system(cmd));
}

TEST(cuda_ptx_dumps_without_a_gpu) {
  char dir[] = "/tmp/tj_dump_test_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_context_options_t co = tj_test_context_options();
  co.dump_dir = dir;
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(&co, &context));
  tj_graph_t* g = parse_block(context);
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK(ptx.num_kernels >= 1);
  int found = 0, assembled = 0;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 4, ".ptx") != 0) continue;
    ++found;
    char path[1024], stem[600];
    snprintf(stem, sizeof(stem), "%.*s", (int)(n - 4), e->d_name);
    // Its kernel IR and tuning lines beside it, and its entry inside.
    snprintf(path, sizeof(path), "%s/%s.kir", dir, stem);
    CHECK(file_size(path) > 0);
    snprintf(path, sizeof(path), "%s/%s.tune.txt", dir, stem);
    char* tune = read_file(path, NULL);
    CHECK_CONTAINS(tune, "sm_90a");
    free(tune);
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    char* text = read_file(path, NULL);
    char entry[700];
    snprintf(entry, sizeof(entry), ".entry tj_kernel_%s", stem + 6);  // block.
    CHECK_CONTAINS(text, entry);
    free(text);
    if (g_ptxas[0]) {
      char cmd[3000];
      snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90a -o /dev/null '%s' 2>&1",
               g_ptxas, path);
      CHECK_EQ_INT(0, run_tool(cmd));
      ++assembled;
    }
  }
  if (d) closedir(d);
  CHECK_EQ_INT(ptx.num_kernels, found);
  printf("# %d PTX dumps, %d assembled by ptxas (%s)\n", found, assembled,
         g_ptxas[0] ? g_ptxas : "skipped");
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  tj_context_destroy(context);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  CHECK_EQ_INT(0, system(cmd));
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: dump_test CAPSTONE.tj LLC AS PTXAS\n");
    return 2;
  }
  g_capstone = argv[1];
  g_llc = argv[2];
  g_as = argv[3];
  g_ptxas = argv[4];
  RUN_TEST(capstone_kernels_have_their_dumps);
  RUN_TEST(an_unwritable_dump_dir_is_a_warning);
  RUN_TEST(cuda_ptx_dumps_without_a_gpu);
  TEST_MAIN_END();
}
