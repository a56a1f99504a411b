// LLVM running out of memory never takes the host down (issue 19, item 3).
//
// Each case runs in a child process under an address-space limit
// (RLIMIT_AS) a little above what the child has mapped before it compiles:
// from nothing left to enough for the whole compile, in 1 MB steps. The
// compile (LLVM's passes and code generation, the JIT link, the thread
// pool) must return OK or OUT_OF_MEMORY, never abort: before the guard in
// jit/llvm_guard.h, some limits ended in std::bad_alloc's terminate, others
// in BACKEND_FAILURE. After an OUT_OF_MEMORY the child lifts the limit and
// compiles and runs again: the library must still work, with the
// reference's answer. The sweep runs twice: with the headroom check (most
// cases end there, before LLVM) and without it, so that allocation
// failures happen inside LLVM and the guard must catch them.
//
// Address-space limits mean nothing under ASan or TSan (their shadow
// memory needs terabytes of it), so those builds skip this test.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit/llvm_guard.h"
#include "tests/unit/test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TJ_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TJ_TEST_SANITIZED 1
#endif
#endif

enum {
  kSteps = 24,  // limits tried: mapped + 0, 2, .., 46 MB
  kB = 8,
  kK = 64,
  kN = 96,
};

// Exit codes of a child.
enum {
  kChildOk = 0,         // compiled and ran under the limit
  kChildRecovered = 1,  // OUT_OF_MEMORY under the limit, then fine without
  kChildWrong = 2,      // a status other than OK / OUT_OF_MEMORY
  kChildMismatch = 3,   // a result differs from the reference
  kChildSetup = 4,      // could not set up (parse, context, limit)
};

#ifndef TJ_TEST_SANITIZED
static const char kCapstone[] =
    "func @capstone[B](%x: f32[B,64], %w: f32[64,96], %b: f32[96]) {\n"
    "  %h = linear %x, %w, %b : f32[B,96]\n"
    "  %y = gelu %h : f32[B,96]\n"
    "  return %y as \"y\"\n"
    "}\n";

static long mapped_bytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long pages = -1;
  if (fscanf(f, "%ld", &pages) != 1) pages = -1;
  fclose(f);
  return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

static bool set_soft_limit(rlim_t bytes) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0) return false;
  rl.rlim_cur =
      bytes == RLIM_INFINITY || bytes > rl.rlim_max ? rl.rlim_max : bytes;
  return setrlimit(RLIMIT_AS, &rl) == 0;
}

static float g_x[kB * kK], g_w[kK * kN], g_b[kN], g_y[kB * kN], g_ref[kB * kN];

// Compiles and runs |g|; OK, or the first failing status.
static tj_status_t compile_and_run(tj_graph_t* g) {
  tj_compile_options_t options;
  tj_compile_options_initialize(&options);
  options.cache_dir = "";  // every child compiles: no disk cache
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, &options, &exe);
  if (s) return s;
  const int64_t xs[] = {kB, kK}, ws[] = {kK, kN}, bs[] = {kN}, ys[] = {kB, kN};
  tj_tensor_t in[3] = {tj_tensor_make(g_x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(g_w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(g_b, TJ_DTYPE_F32, 1, bs)};
  tj_tensor_t out = tj_tensor_make(g_y, TJ_DTYPE_F32, 2, ys);
  memset(g_y, 0, sizeof(g_y));
  s = tj_executable_run(exe, in, 3, &out, 1);
  tj_executable_release(exe);
  return s;
}

static bool matches_reference(void) {
  for (int i = 0; i < kB * kN; ++i) {
    if (!(fabsf(g_y[i] - g_ref[i]) <= 1e-4f + 1e-4f * fabsf(g_ref[i]))) {
      return false;
    }
  }
  return true;
}

static int child(long extra_bytes) {
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  if (tj_context_create(NULL, &ctx)) return kChildSetup;
  if (tj_graph_parse(ctx, kCapstone, sizeof(kCapstone) - 1, NULL, &g)) {
    tj_context_destroy(ctx);
    return kChildSetup;
  }
  long mapped = mapped_bytes();
  if (mapped < 0 || !set_soft_limit((rlim_t)(mapped + extra_bytes))) {
    return kChildSetup;
  }
  int code = kChildOk;
  tj_status_t s = compile_and_run(g);
  if (s && tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
    fprintf(stderr, "limit +%ld MB: %s: %s\n", extra_bytes >> 20,
            tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    code = kChildWrong;
  } else if (s) {
    code = kChildRecovered;
    set_soft_limit(RLIM_INFINITY);
    tj_status_free(s);
    s = compile_and_run(g);
    if (s) {
      fprintf(stderr, "limit +%ld MB, then lifted: %s\n", extra_bytes >> 20,
              tj_status_message(s));
      code = kChildWrong;
    }
  }
  tj_status_free(s);
  if (code != kChildWrong && !matches_reference()) code = kChildMismatch;
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return code;
}

static void sweep(const char* what) {
  for (int i = 0; i < kB * kK; ++i) g_x[i] = (float)((i * 37) % 19 - 9) / 8;
  for (int i = 0; i < kK * kN; ++i) g_w[i] = (float)((i * 11) % 23 - 11) / 64;
  for (int i = 0; i < kN; ++i) g_b[i] = (float)(i % 7 - 3) / 4;
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  CHECK_OK(tj_graph_parse(ctx, kCapstone, sizeof(kCapstone) - 1, NULL, &g));
  const int64_t xs[] = {kB, kK}, ws[] = {kK, kN}, bs[] = {kN}, ys[] = {kB, kN};
  tj_tensor_t in[3] = {tj_tensor_make(g_x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(g_w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(g_b, TJ_DTYPE_F32, 1, bs)};
  tj_tensor_t out = tj_tensor_make(g_ref, TJ_DTYPE_F32, 2, ys);
  CHECK_OK(tj_reference_run(g, in, 3, &out, 1));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);

  int counts[5] = {0};
  printf("# %s\n", what);
  for (int step = 0; step < kSteps; ++step) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(child((long)step << 21));
    CHECK(pid > 0);
    if (pid <= 0) break;
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) {
      fprintf(stderr, "limit +%d MB: the child died of signal %d\n", step,
              WTERMSIG(status));
      CHECK(!WIFSIGNALED(status));
      continue;
    }
    int code = WEXITSTATUS(status);
    CHECK(code == kChildOk || code == kChildRecovered);
    if (code != kChildOk && code != kChildRecovered) {
      fprintf(stderr, "limit +%d MB: child exit %d\n", step, code);
    }
    if (code >= 0 && code < 5) ++counts[code];
  }
  printf("# %d limits: %d compiled, %d out of memory then recovered\n", kSteps,
         counts[kChildOk], counts[kChildRecovered]);
  // The sweep must cross the boundary, else it tested nothing.
  CHECK(counts[kChildRecovered] > 0);
  CHECK(counts[kChildOk] > 0);
}
#endif

TEST(compile_under_address_space_limits) {
#ifdef TJ_TEST_SANITIZED
  printf("# skipped: address-space limits do not apply under sanitizers\n");
#else
  sweep("with the headroom check");
  tj_llvm_set_headroom(0);
  sweep("without it: failures inside LLVM");
  tj_llvm_set_headroom(TJ_LLVM_HEADROOM_BYTES);
#endif
}

int main(void) {
  RUN_TEST(compile_under_address_space_limits);
  TEST_MAIN_END();
}
