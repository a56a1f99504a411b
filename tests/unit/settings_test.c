// A context's settings (lib/env.h): read once, from tj_context_options_t
// first and the environment for the rest, through a lookup function that
// these tests replace with a fake environment.

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/env.h"
#include "lib/fs.h"
#include "lib/passes/pass.h"
#include "tests/unit/test.h"

// A fake environment: NAME=VALUE strings, NULL-terminated.
static const char* fake_lookup(void* user_data, const char* name) {
  const char* const* env = user_data;
  size_t n = strlen(name);
  for (; *env; ++env) {
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') return *env + n + 1;
  }
  return NULL;
}

static void read_settings(const tj_context_options_t* options,
                          const char* const* env, tj_settings_t* out) {
  CHECK_OK(tj_settings_read(options, fake_lookup, (void*)env,
                            tj_allocator_system(), NULL, out));
}

TEST(every_setting_comes_from_its_variable) {
  static const char* const env[] = {"TJ_LOG=fusion,cache",
                                    "TJ_PRINT_AFTER=fuse",
                                    "TJ_DUMP_DIR=/tmp/dumps",
                                    "TJ_X86_ISA=avx2",
                                    "TJ_CACHE_DIR=/cache",
                                    "TJ_OPENBLAS=none",
                                    "TJ_CUDA_GEMM_CANDIDATE=2",
                                    "TJ_NVPTX_ATTENTION=wgmma",
                                    "TJ_CUDA_WQGEMM=mma",
                                    "TJ_NVPTX_CONV=wgmma64",
                                    NULL};
  tj_settings_t s;
  read_settings(NULL, env, &s);
  CHECK_EQ_INT(TJ_LOG_FUSION | TJ_LOG_CACHE, s.log_flags);
  CHECK_STREQ("fusion,cache", s.values[TJ_SETTING_LOG]);
  CHECK_STREQ("fuse", s.values[TJ_SETTING_PRINT_AFTER]);
  CHECK_STREQ("/tmp/dumps", s.values[TJ_SETTING_DUMP_DIR]);
  CHECK_STREQ("avx2", s.values[TJ_SETTING_X86_ISA]);
  CHECK_STREQ("/cache", s.values[TJ_SETTING_CACHE_DIR]);
  CHECK_STREQ("none", s.values[TJ_SETTING_OPENBLAS]);
  CHECK_STREQ("2", s.values[TJ_SETTING_CUDA_GEMM_CANDIDATE]);
  CHECK_STREQ("wgmma", s.values[TJ_SETTING_NVPTX_ATTENTION]);
  CHECK_STREQ("mma", s.values[TJ_SETTING_CUDA_WQGEMM]);
  CHECK_STREQ("wgmma64", s.values[TJ_SETTING_NVPTX_CONV]);
  for (int i = 0; i < TJ_SETTING_COUNT_; ++i) CHECK(!s.from_options[i]);
  tj_settings_deinitialize(&s, tj_allocator_system());

  // An empty environment: nothing set, no disk cache.
  static const char* const none[] = {NULL};
  read_settings(NULL, none, &s);
  CHECK_EQ_INT(0, s.log_flags);
  for (int i = 0; i < TJ_SETTING_COUNT_; ++i) {
    if (i != TJ_SETTING_CACHE_DIR && i != TJ_SETTING_LIBDEVICE)
      CHECK(s.values[i] == NULL);
  }
  CHECK_STREQ("", s.values[TJ_SETTING_CACHE_DIR]);
  // libdevice: a toolkit's file that exists on this host, or none.
  const char* libdevice = s.values[TJ_SETTING_LIBDEVICE];
  CHECK(libdevice && (!libdevice[0] || access(libdevice, R_OK) == 0));
  tj_settings_deinitialize(&s, tj_allocator_system());
}

TEST(options_beat_the_environment) {
  static const char* const env[] = {"TJ_LOG=all", "TJ_DUMP_DIR=/tmp/dumps",
                                    "TJ_X86_ISA=sse2", "TJ_CACHE_DIR=/cache",
                                    NULL};
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.log = "recompiles";
  o.dump_dir = "";  // off, whatever the environment says
  o.cache_dir = "/mine";
  o.openblas = "libmyblas.so";
  tj_settings_t s;
  read_settings(&o, env, &s);
  CHECK_EQ_INT(TJ_LOG_RECOMPILES, s.log_flags);
  CHECK_STREQ("", s.values[TJ_SETTING_DUMP_DIR]);
  CHECK(s.from_options[TJ_SETTING_DUMP_DIR]);
  CHECK_STREQ("sse2", s.values[TJ_SETTING_X86_ISA]);  // not set: the env's
  CHECK(!s.from_options[TJ_SETTING_X86_ISA]);
  CHECK_STREQ("/mine", s.values[TJ_SETTING_CACHE_DIR]);
  CHECK_STREQ("libmyblas.so", s.values[TJ_SETTING_OPENBLAS]);
  CHECK(s.values[TJ_SETTING_PRINT_AFTER] == NULL);
  tj_settings_deinitialize(&s, tj_allocator_system());
}

TEST(default_cache_dir) {
  struct {
    const char* env[4];
    const char* dir;
  } cases[] = {
      {{"TJ_CACHE_DIR=/a", "XDG_CACHE_HOME=/xdg", "HOME=/home/u", NULL}, "/a"},
      {{"TJ_CACHE_DIR=", "XDG_CACHE_HOME=/xdg", NULL}, ""},  // "" disables
      {{"XDG_CACHE_HOME=/xdg", "HOME=/home/u", NULL}, "/xdg/tensorjit"},
      {{"XDG_CACHE_HOME=rel", "HOME=/home/u", NULL},
       "/home/u/.cache/tensorjit"},
      {{"HOME=/home/u", NULL}, "/home/u/.cache/tensorjit"},
      {{"HOME=relative", NULL}, ""},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    tj_settings_t s;
    read_settings(NULL, cases[i].env, &s);
    CHECK_STREQ(cases[i].dir, s.values[TJ_SETTING_CACHE_DIR]);
    tj_settings_deinitialize(&s, tj_allocator_system());
  }
}

// A misspelled category is reported once per process through the
// context's channel, naming where it came from, and the rest still counts.
TEST(unknown_log_category_warns_once) {
  tj_test_diagnostics_t d;
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_test_collect_into(&o, &d);
  o.log = "fusion,recompile";
  for (int i = 0; i < 2; ++i) {
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&o, &ctx));
    CHECK_EQ_INT(TJ_LOG_FUSION, tj_log_flags(ctx));
    tj_context_destroy(ctx);
  }
  CHECK_EQ_INT(1, d.warnings);
  CHECK_CONTAINS(d.text,
                 "tj_context_options_t.log: \"recompile\" is not a log "
                 "category and is ignored; the categories are passes,");
}

// The pass pipeline and the x86 backend ask the context.
TEST(layers_read_the_context) {
  tj_test_diagnostics_t d;
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_test_collect_into(&o, &d);
  o.log = "passes";
  o.print_after = "fuse2";
  char dir[] = "/tmp/tj_settings_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  o.dump_dir = dir;
  o.x86_isa = "avx9000";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  CHECK_STREQ(dir, tj_setting(ctx, TJ_SETTING_DUMP_DIR));
  CHECK_STREQ("tj_context_options_t.x86_isa",
              tj_setting_source(ctx, TJ_SETTING_X86_ISA));
  tj_pass_ctx_t pctx;
  tj_pass_ctx_initialize(&pctx, ctx);
  CHECK(pctx.log_passes && !pctx.log_fusion);
  CHECK_STREQ("fuse2", pctx.print_after);
  CHECK_STREQ(dir, pctx.dump_dir);
  CHECK_CONTAINS(d.text,
                 "tj_context_options_t.print_after: \"fuse2\" is not "
                 "a pass");
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "g", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_relu(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t co;
  tj_compile_options_initialize(&co);
  co.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "tj_context_options_t.x86_isa=\"avx9000\" is not an x86 level",
               tj_compile(g, &co, &exe));
  CHECK(exe == NULL);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  char cmd[64];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);  // and any fusion dump
  CHECK(system(cmd) == 0);
  // NULL context: empty settings.
  CHECK(tj_setting(NULL, TJ_SETTING_LOG) == NULL);
  CHECK_EQ_INT(0, tj_log_flags(NULL));
}

TEST(struct_size_is_checked) {
  tj_context_options_t o;
  memset(&o, 0, sizeof(o));
  tj_context_t* ctx = (tj_context_t*)1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_context_options_initialize",
               tj_context_create(&o, &ctx));
  CHECK(ctx == NULL);
  tj_context_options_initialize(&o);
  CHECK(o.struct_size == sizeof(o));
  CHECK_OK(tj_context_create(&o, &ctx));
  tj_context_destroy(ctx);
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_context_destroy(ctx);
}

// libdevice: $TJ_LIBDEVICE as given ("" goes without), else the first
// toolkit root whose nvvm/libdevice/libdevice.10.bc exists.
TEST(libdevice_is_found_under_a_toolkit_root) {
  char root[] = "/tmp/tj_libdevice_XXXXXX";
  CHECK(mkdtemp(root) != NULL);
  char dir[256], file[300];
  snprintf(dir, sizeof(dir), "%s/nvvm/libdevice", root);
  CHECK_EQ_INT(0, tj_make_directories(dir, 0755));
  snprintf(file, sizeof(file), "%s/libdevice.10.bc", dir);
  FILE* f = fopen(file, "w");
  CHECK(f != NULL);
  fclose(f);
  char home[300], path[300];
  snprintf(home, sizeof(home), "CUDA_HOME=%s", root);
  snprintf(path, sizeof(path), "CUDA_PATH=%s", root);
  tj_settings_t s;
  const char* by_home[] = {home, NULL};
  read_settings(NULL, by_home, &s);
  CHECK_STREQ(file, s.values[TJ_SETTING_LIBDEVICE]);
  tj_settings_deinitialize(&s, tj_allocator_system());
  // A root without the file is passed over for the next.
  const char* by_path[] = {"CUDA_HOME=/nonexistent/cuda", path, NULL};
  read_settings(NULL, by_path, &s);
  CHECK_STREQ(file, s.values[TJ_SETTING_LIBDEVICE]);
  tj_settings_deinitialize(&s, tj_allocator_system());
  // TJ_LIBDEVICE wins, unchecked (loading it says what is wrong), and ""
  // turns libdevice off whatever the toolkit has.
  const char* given[] = {"TJ_LIBDEVICE=/opt/my/libdevice.bc", home, NULL};
  read_settings(NULL, given, &s);
  CHECK_STREQ("/opt/my/libdevice.bc", s.values[TJ_SETTING_LIBDEVICE]);
  tj_settings_deinitialize(&s, tj_allocator_system());
  const char* off[] = {"TJ_LIBDEVICE=", home, NULL};
  read_settings(NULL, off, &s);
  CHECK_STREQ("", s.values[TJ_SETTING_LIBDEVICE]);
  tj_settings_deinitialize(&s, tj_allocator_system());
  remove(file);
  snprintf(dir, sizeof(dir), "%s/nvvm/libdevice", root);
  rmdir(dir);
  snprintf(dir, sizeof(dir), "%s/nvvm", root);
  rmdir(dir);
  rmdir(root);
}

// Every allocation of the read may fail: OUT_OF_MEMORY, nothing left.
TEST(oom_leaves_nothing) {
  static const char* const env[] = {"TJ_LOG=all",       "TJ_PRINT_AFTER=fuse",
                                    "TJ_X86_ISA=avx2",  "HOME=/home/u",
                                    "TJ_OPENBLAS=none", NULL};
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.dump_dir = "/d";
  o.cuda_gemm_candidate = "1";
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_settings_t s;
    tj_status_t status = tj_settings_read(&o, fake_lookup, (void*)env,
                                          tj_test_allocator_get(&t), NULL, &s);
    if (!status) {
      CHECK_EQ_INT(8, t.live_blocks);
      tj_settings_deinitialize(&s, tj_test_allocator_get(&t));
      CHECK_EQ_INT(0, t.live_blocks);
      CHECK_EQ_INT(0, t.bad_frees);
      break;
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    CHECK_EQ_INT(0, t.live_blocks);
    for (int i = 0; i < TJ_SETTING_COUNT_; ++i) CHECK(s.values[i] == NULL);
  }
}

int main(void) {
  RUN_TEST(every_setting_comes_from_its_variable);
  RUN_TEST(options_beat_the_environment);
  RUN_TEST(libdevice_is_found_under_a_toolkit_root);
  RUN_TEST(default_cache_dir);
  RUN_TEST(unknown_log_category_warns_once);
  RUN_TEST(layers_read_the_context);
  RUN_TEST(struct_size_is_checked);
  RUN_TEST(oom_leaves_nothing);
  TEST_MAIN_END();
}
