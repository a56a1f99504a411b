// Every case of the conformance suite (tests/conformance/conformance.h)
// through the CUDA target's compile without a GPU (tj_cuda_compile_ptx:
// the same middle end, lowering, emission and graph breaks as tj_compile
// with TJ_TARGET_CUDA), for sm_90a and sm_80, and every PTX module made
// assembled by NVIDIA's ptxas, warnings as errors: PTX that ptxas rejects
// would only fail on a user's GPU. Per case and arch, two modules: the
// program's (its kernel count and graph breaks checked against the CUDA
// expectation the GPU run checks, cuda_cts_expects.h), and the kernels the
// GEMM autotuner compiles apart (every other tensor-core main loop and
// tile of the arch, the cuBLASLt candidate's epilogue). Nothing runs.
//
// Usage: cuda_ptx_conformance_test PTXAS. Exits 77 (skipped) when PTXAS is
// empty or missing. TJ_DUMP_PTX=dir keeps the PTX files; TJ_CTS_GROUP=name
// runs one group.

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/cuda/cuda_executable.h"
#include "tests/conformance/conformance.h"
#include "tests/cuda/cuda_cts_expects.h"
#include "tests/cuda/cuda_test_util.h"

static const tj_nvptx_arch_t kArchs[] = {TJ_NVPTX_SM_90A, TJ_NVPTX_SM_80};
#define NUM_ARCHS (sizeof(kArchs) / sizeof(kArchs[0]))

typedef struct totals_t {
  const char* ptxas;
  char dir[256];
  bool keep;  // TJ_DUMP_PTX: the files stay
  int cases, modules, ptxas_runs;
  long kernels[NUM_ARCHS], variant_kernels[NUM_ARCHS], host_steps;
  size_t ptx_bytes;
  double compile_ms, ptxas_ms;
} totals_t;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int count_entries(const char* ptx) {
  int n = 0;
  for (const char* p = ptx; (p = strstr(p, ".entry ")) != NULL; ++p) ++n;
  return n;
}

// ptxas's "performance loss" notes for wgmma code (serialized wgmmas, a
// function call or too few registers in the pipeline, an ignored
// setmaxnreg): informational in ptxas, failures here as in
// nvptx_ptxas_test.
static const char* const kWgmmaWarnings[] = {"C7508", "C7510", "C7511",
                                             "C7515"};

#define MAX_MODULES (2 * NUM_ARCHS)

// The PTX modules of one case, assembled together.
typedef struct module_t {
  char name[200];
  const char* arch;
  const char* ptx;  // borrowed
} module_t;

// Writes every module to <dir>/<name>.ptx and runs ptxas on all of them
// at once (the case's modules are independent; the runs are mostly
// process start-up). False (after printing ptxas's log) when one fails
// or warns.
static bool assemble(totals_t* t, const module_t* m, int n) {
  char cmd[MAX_MODULES * 4000 + 16];
  size_t len = 0;
  cmd[0] = '\0';
  for (int i = 0; i < n; ++i) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s.ptx", t->dir, m[i].name);
    FILE* f = fopen(path, "w");
    if (!f) {
      fprintf(stderr, "%s: cannot write %s\n", m[i].name, path);
      return false;
    }
    fputs(m[i].ptx, f);
    fclose(f);
    t->ptx_bytes += strlen(m[i].ptx);
    len += (size_t)snprintf(
        cmd + len, sizeof(cmd) - len,
        "('%s' -arch=%s -v --warning-as-error -o /dev/null '%s/%s.ptx' > "
        "'%s/%s.log' 2>&1; echo $? > '%s/%s.rc') & ",
        t->ptxas, m[i].arch, t->dir, m[i].name, t->dir, m[i].name, t->dir,
        m[i].name);
    if (len >= sizeof(cmd)) return false;
  }
  snprintf(cmd + len, sizeof(cmd) - len, "wait");
  double start = now_ms();
  int shell_rc = system(cmd);
  t->ptxas_ms += now_ms() - start;
  t->ptxas_runs += n;
  bool ok = shell_rc == 0;
  for (int i = 0; i < n; ++i) {
    char path[1200], log[1200], rcpath[1200], line[512];
    snprintf(path, sizeof(path), "%s/%s.ptx", t->dir, m[i].name);
    snprintf(log, sizeof(log), "%s/%s.log", t->dir, m[i].name);
    snprintf(rcpath, sizeof(rcpath), "%s/%s.rc", t->dir, m[i].name);
    int rc = -1;
    FILE* f = fopen(rcpath, "r");
    if (f) {
      if (fscanf(f, "%d", &rc) != 1) rc = -1;
      fclose(f);
    }
    remove(rcpath);
    bool notes = false;
    f = fopen(log, "r");
    while (f && fgets(line, sizeof(line), f)) {
      for (size_t w = 0; w < TJ_ARRAY_SIZE(kWgmmaWarnings); ++w)
        notes |= strstr(line, kWgmmaWarnings[w]) != NULL;
    }
    if (rc != 0 || notes) {
      ok = false;
      fprintf(stderr, "ptxas -arch=%s %s %s (exit %d):\n", m[i].arch,
              rc != 0 ? "rejects" : "warns about wgmma in", path, rc);
      if (f) rewind(f);
      for (int k = 0; f && k < 40 && fgets(line, sizeof(line), f); ++k) {
        if (!strstr(line, "registers") && !strstr(line, "spill") &&
            !strstr(line, "Compiling entry") &&
            !strstr(line, "Function properties"))
          fprintf(stderr, "  %s", line);
      }
    }
    if (f) fclose(f);
    // On a failure the PTX and the log stay for a look.
    if (!t->keep && rc == 0 && !notes) remove(path);
    if (rc == 0 && !notes) remove(log);
  }
  return ok;
}

// tj_cts_compile_fn: the case for every arch, then ptxas on its modules.
static bool compile_case(void* self, const tj_cts_case_t* c,
                         const tj_compile_options_t* options,
                         tj_cts_report_t* out_report) {
  totals_t* t = self;
  ++t->cases;
  bool ok = true;
  tj_cuda_offline_ptx_t px[NUM_ARCHS];
  memset(px, 0, sizeof(px));
  module_t modules[MAX_MODULES];
  int nm = 0;
  for (size_t a = 0; a < NUM_ARCHS && ok; ++a) {
    const char* arch = tj_nvptx_arch_name(kArchs[a]);
    double start = now_ms();
    tj_status_t s = tj_cuda_compile_ptx(c->g, options, kArchs[a],
                                        tj_allocator_system(), &px[a]);
    t->compile_ms += now_ms() - start;
    if (s) {
      fprintf(stderr, "%s: tj_cuda_compile_ptx(%s): %s\n", c->name, arch,
              tj_status_message(s));
      tj_status_free(s);
      ok = false;
      break;
    }
    // The counts do not depend on the arch (the GEMM templates of both
    // take the same kernel IR): the first arch's are the case's.
    if (a == 0) {
      out_report->kernels = (int)px[a].num_kernels;
      out_report->breaks = (int)px[a].num_host_steps;
      t->host_steps += px[a].num_host_steps;
    } else if ((int)px[a].num_kernels != out_report->kernels ||
               (int)px[a].num_host_steps != out_report->breaks) {
      fprintf(stderr, "%s: %s: %u kernels and %u graph breaks, %s: %d, %d\n",
              c->name, arch, px[a].num_kernels, px[a].num_host_steps,
              tj_nvptx_arch_name(kArchs[0]), out_report->kernels,
              out_report->breaks);
      ok = false;
    }
    t->kernels[a] += px[a].num_kernels;
    t->variant_kernels[a] += px[a].num_variant_kernels;
    // Every kernel is an entry of its module; none comes without one.
    int entries = px[a].ptx ? count_entries(px[a].ptx) : 0;
    int ventries = px[a].variants_ptx ? count_entries(px[a].variants_ptx) : 0;
    if (entries != (int)px[a].num_kernels ||
        ventries != (int)px[a].num_variant_kernels) {
      fprintf(stderr,
              "%s: %s: %d and %d entries in the PTX for %u kernels and %u "
              "GEMM candidate kernels\n",
              c->name, arch, entries, ventries, px[a].num_kernels,
              px[a].num_variant_kernels);
      ok = false;
    }
    if (px[a].ptx) {
      module_t* m = &modules[nm++];
      snprintf(m->name, sizeof(m->name), "%s.%s", c->name, arch);
      m->arch = arch;
      m->ptx = px[a].ptx;
    }
    if (px[a].variants_ptx) {
      module_t* m = &modules[nm++];
      snprintf(m->name, sizeof(m->name), "%s.%s.candidates", c->name, arch);
      m->arch = arch;
      m->ptx = px[a].variants_ptx;
    }
  }
  if (ok && nm > 0) {
    ok = assemble(t, modules, nm);
    t->modules += nm;
  }
  for (size_t a = 0; a < NUM_ARCHS; ++a)
    tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &px[a]);
  return ok;
}

// Bad input gets a status, and the offline path opens no device.
TEST(offline_errors) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "bad", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_exp(g, x), "y");
  tj_cuda_offline_ptx_t px;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not finalized",
               tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A,
                                   tj_allocator_system(), &px));
  CHECK(px.ptx == NULL && px.num_kernels == 0);
  CHECK_OK(tj_graph_finalize(g));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "unknown arch",
               tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_ARCH_COUNT_,
                                   tj_allocator_system(), &px));
  // One kernel, whatever the options' target says.
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  CHECK_OK(
      tj_cuda_compile_ptx(g, &o, TJ_NVPTX_SM_80, tj_allocator_system(), &px));
  CHECK_EQ_INT(1, (int)px.num_kernels);
  CHECK_EQ_INT(0, (int)px.num_host_steps);
  CHECK_CONTAINS(px.ptx, ".target sm_80");
  CHECK(px.variants_ptx == NULL);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &px);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Where a GPU is found, the offline compile must make the PTX that
// tj_compile made for the device (same size, same kernels): the offline
// path is the real one, minus the device. Elsewhere it says it skipped.
TEST(offline_matches_device) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "block", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_BF16, 1, (int64_t[]){512}, "b");
  tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
  tj_graph_output(g, y, "y");
  tj_graph_output(g, tj_graph_softmax(g, tj_graph_cast(g, y, TJ_DTYPE_F32), 1),
                  "p");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, &o, &exe);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# offline_matches_device: no GPU (%s): not compared\n",
           tj_status_message(s));
    tj_status_free(s);
  } else {
    CHECK_OK(s);
  }
  if (exe) {
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    tj_executable_stats_t es = {.struct_size = sizeof(es)};
    tj_executable_stats(exe, &es);
    tj_nvptx_arch_t arch;
    CHECK(tj_nvptx_arch_from_name(cs.arch, &arch));
    tj_cuda_offline_ptx_t px;
    CHECK_OK(tj_cuda_compile_ptx(g, &o, arch, tj_allocator_system(), &px));
    printf(
        "# offline_matches_device: %s %s: %d kernels, %zu bytes of PTX "
        "(%s); offline: %u kernels, %zu bytes\n",
        cs.device_name, cs.arch, (int)es.num_kernels, cs.ptx_bytes,
        cs.ptx_source, px.num_kernels, px.ptx ? strlen(px.ptx) : 0);
    CHECK_EQ_INT(es.num_kernels, (int)px.num_kernels);
    CHECK_EQ_INT(es.num_graph_breaks, (int)px.num_host_steps);
    CHECK_STREQ("LLVM", cs.ptx_source);
    CHECK(px.ptx && strlen(px.ptx) == cs.ptx_bytes);
    tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &px);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(int argc, char** argv) {
  totals_t t;
  memset(&t, 0, sizeof(t));
  t.ptxas = argc > 1 ? argv[1] : "";
  if (!t.ptxas[0] || access(t.ptxas, X_OK) != 0) {
    printf("# skipped: no ptxas (a CUDA toolkit) found\n");
    return TJ_TEST_EXIT_SKIP;
  }
  // Counts of compiled kernels must not depend on earlier compiles, and
  // the device's PTX must come from LLVM: every context here has no disk
  // cache (tj_test_context_create).
  RUN_TEST(offline_errors);
  RUN_TEST(offline_matches_device);
  const char* dump = getenv("TJ_DUMP_PTX");
  if (dump && dump[0]) {
    snprintf(t.dir, sizeof(t.dir), "%s", dump);
    mkdir(t.dir, 0755);
    t.keep = true;
  } else {
    snprintf(t.dir, sizeof(t.dir), "/tmp/tj_ptx_cts_XXXXXX");
    if (!mkdtemp(t.dir)) {
      fprintf(stderr, "mkdtemp failed\n");
      return 1;
    }
  }
  g_test_current = "cuda_ptx_conformance";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_cts_backend_t be = {"cuda-ptx", TJ_TARGET_CUDA, ctx,
                         kSkips,     kExpects,       NULL};
  double start = now_ms();
  tj_cts_compile_all(&be, compile_case, &t);
  double total_ms = now_ms() - start;
  g_test_checks += tj_cts_checks;
  g_test_failures += tj_cts_failures;
  // Every case compiled; the suite has GEMMs with tensor cores, whose
  // candidates must have been assembled too.
  CHECK(t.cases > 0);
  CHECK(getenv("TJ_CTS_GROUP") || t.variant_kernels[0] > 0);
  CHECK(getenv("TJ_CTS_GROUP") || t.variant_kernels[1] > 0);
  printf(
      "# %d cases: %ld kernels per arch (%ld graph breaks); GEMM candidate "
      "kernels: %ld on %s, %ld on %s\n",
      t.cases, t.kernels[0], t.host_steps, t.variant_kernels[0],
      tj_nvptx_arch_name(kArchs[0]), t.variant_kernels[1],
      tj_nvptx_arch_name(kArchs[1]));
  printf(
      "# %d PTX modules (%zu bytes) assembled by %d ptxas runs in %.0f ms; "
      "LLVM (middle end to PTX) %.0f ms; total %.0f ms\n",
      t.modules, t.ptx_bytes, t.ptxas_runs, t.ptxas_ms, t.compile_ms, total_ms);
  if (!t.keep) rmdir(t.dir);
  tj_context_destroy(ctx);
  TEST_MAIN_END();
}
