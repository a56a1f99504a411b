// Every case of the conformance suite (tests/conformance/conformance.h)
// through the CUDA target's compile without a GPU (tj_cuda_compile_ptx:
// the same middle end, lowering, emission and graph breaks as tj_compile
// with TJ_TARGET_CUDA), for sm_90a and sm_80, and every PTX module made
// assembled by NVIDIA's ptxas (a module made again by a later case, once),
// warnings as errors: PTX that ptxas rejects
// would only fail on a user's GPU. Per case and arch, two modules: the
// program's (its kernel count and graph breaks checked against the CUDA
// expectation the GPU run checks, cuda_cts_expects.h), and the kernels the
// GEMM autotuner compiles apart (every other tensor-core main loop and
// tile of the arch, the cuBLASLt candidate's epilogue). Of a pair of cases
// that differ only in a bf16 or f16 token of their names, the second
// compiled makes its program's module alone (autotune off): the two take
// the same GEMM templates with another mma type, the first of the pair
// compiles the candidates, and nvptx_ptxas_test assembles every schedule
// on f16 and bf16 samples (pair_candidates). In CI's legs
// (TJ_TEST_SUBSET) the op x dtype matrix takes both archs for each op's
// first dtype and one for its others (one_arch). Nothing runs.
//
// Usage: cuda_ptx_conformance_test PTXAS. Exits 77 (skipped) when PTXAS is
// empty or missing. TJ_DUMP_PTX=dir keeps the PTX files; TJ_CTS_GROUP=name
// runs one group.

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
  int shared_modules;  // modules ptxas had already seen (seen_before)
  int pair_cases;      // the second of a bf16/f16 pair: no candidates
  int one_arch_cases;  // CI's subset of the op x dtype matrix (one_arch)
  char last_op[128];   // the matrix op of the last case, for one_arch
  int asm_failures;    // batches with a module ptxas rejected or warned on
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

// Modules wait, written to <dir>/<name>.ptx, until a batch of one arch is
// full; then ptxas assembles the batch in one run per core. Most of a
// per-module run is ptxas's start-up, and the suite makes about 1,700
// modules: batching halves the test's ptxas time. Each module's entry
// names carry a per-module prefix so the modules of a batch, one program
// to ptxas, do not collide (their only module-scope symbols are the
// kernels and the `.extern .shared` buffer, which may repeat). A batch
// that fails or warns is assembled again one module at a time, so the
// failure names its module with its own log.
#define BATCH 48
#define MAX_PENDING (BATCH + 8)

typedef struct pending_t {
  int n;
  char names[MAX_PENDING][200];
} pending_t;

static pending_t g_pending[NUM_ARCHS];

// True when |log| holds a line of wgmma's performance notes.
static bool has_wgmma_notes(FILE* f) {
  char line[512];
  bool notes = false;
  while (f && fgets(line, sizeof(line), f)) {
    for (size_t w = 0; w < TJ_ARRAY_SIZE(kWgmmaWarnings); ++w)
      notes |= strstr(line, kWgmmaWarnings[w]) != NULL;
  }
  return notes;
}

static int read_rc(const char* path) {
  int rc = -1;
  FILE* f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &rc) != 1) rc = -1;
    fclose(f);
  }
  remove(path);
  return rc;
}

// Runs |jobs| (each "inputs > log; echo $? > rc") in parallel and waits.
static void run_jobs(totals_t* t, char* cmd, size_t cap, size_t len, int n) {
  snprintf(cmd + len, cap - len, "wait");
  double start = now_ms();
  if (system(cmd) == -1) fprintf(stderr, "system() failed\n");
  t->ptxas_ms += now_ms() - start;
  t->ptxas_runs += n;
}

// One ptxas run per module of |names| (all of |arch|), each with its own
// log: the authoritative verdict. False (after printing ptxas's log) when
// one fails or warns.
static bool assemble_each(totals_t* t, const char* arch, char (*names)[200],
                          int n) {
  size_t cap = (size_t)n * 1400 + 16, len = 0;
  char* cmd = malloc(cap);
  if (!cmd) return false;
  for (int i = 0; i < n; ++i)
    len += (size_t)snprintf(
        cmd + len, cap - len,
        "('%s' -arch=%s -v --warning-as-error -o /dev/null '%s/%s.ptx' > "
        "'%s/%s.log' 2>&1; echo $? > '%s/%s.rc') & ",
        t->ptxas, arch, t->dir, names[i], t->dir, names[i], t->dir, names[i]);
  run_jobs(t, cmd, cap, len, n);
  free(cmd);
  bool ok = true;
  for (int i = 0; i < n; ++i) {
    char path[1200], log[1200], rcpath[1200], line[512];
    snprintf(path, sizeof(path), "%s/%s.ptx", t->dir, names[i]);
    snprintf(log, sizeof(log), "%s/%s.log", t->dir, names[i]);
    snprintf(rcpath, sizeof(rcpath), "%s/%s.rc", t->dir, names[i]);
    int rc = read_rc(rcpath);
    FILE* f = fopen(log, "r");
    bool notes = has_wgmma_notes(f);
    if (rc != 0 || notes) {
      ok = false;
      fprintf(stderr, "ptxas -arch=%s %s %s (exit %d):\n", arch,
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

// The batch ptxas is assembling while the next cases compile: LLVM takes
// one core and ptxas the other, so most of ptxas's time is hidden.
typedef struct flight_t {
  pid_t pid;  // 0: none in flight
  size_t arch;
  int n, first[3], halves;
  char names[MAX_PENDING][200];
} flight_t;

static flight_t g_flight;

// Waits for the batch in flight and checks it: each half that fails or
// warns is assembled again module by module.
static void finish_batch(totals_t* t) {
  flight_t* f = &g_flight;
  if (f->pid == 0) return;
  double start = now_ms();
  int wstatus = 0;
  while (waitpid(f->pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  t->ptxas_ms += now_ms() - start;
  f->pid = 0;
  const char* arch = tj_nvptx_arch_name(kArchs[f->arch]);
  for (int h = 0; h < f->halves; ++h) {
    char log[600], rcpath[600];
    snprintf(log, sizeof(log), "%s/batch%d.log", t->dir, h);
    snprintf(rcpath, sizeof(rcpath), "%s/batch%d.rc", t->dir, h);
    int rc = read_rc(rcpath);
    FILE* lf = fopen(log, "r");
    bool notes = has_wgmma_notes(lf);
    if (lf) fclose(lf);
    remove(log);
    if (rc == 0 && !notes) {
      for (int i = f->first[h]; i < f->first[h + 1] && !t->keep; ++i) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s.ptx", t->dir, f->names[i]);
        remove(path);
      }
    } else if (!assemble_each(t, arch, &f->names[f->first[h]],
                              f->first[h + 1] - f->first[h])) {
      ++t->asm_failures;
    }
  }
}

// Starts ptxas on the pending modules of arch |a|, the batch split in two
// halves run side by side, after the batch in flight is done.
static void start_batch(totals_t* t, size_t a) {
  finish_batch(t);
  pending_t* p = &g_pending[a];
  if (p->n == 0) return;
  flight_t* f = &g_flight;
  f->arch = a;
  f->n = p->n;
  memcpy(f->names, p->names, sizeof(p->names[0]) * (size_t)p->n);
  p->n = 0;
  f->halves = f->n > 1 ? 2 : 1;
  f->first[0] = 0;
  f->first[1] = f->halves == 2 ? (f->n + 1) / 2 : f->n;
  f->first[2] = f->n;
  const char* arch = tj_nvptx_arch_name(kArchs[a]);
  size_t cap = (size_t)f->n * 1300 + 4096, len = 0;
  char* cmd = malloc(cap);
  if (!cmd) {
    ++t->asm_failures;
    return;
  }
  for (int h = 0; h < f->halves; ++h) {
    len += (size_t)snprintf(cmd + len, cap - len,
                            "('%s' -arch=%s -v --warning-as-error -o "
                            "/dev/null",
                            t->ptxas, arch);
    for (int i = f->first[h]; i < f->first[h + 1]; ++i)
      len += (size_t)snprintf(cmd + len, cap - len, " '%s/%s.ptx'", t->dir,
                              f->names[i]);
    len += (size_t)snprintf(cmd + len, cap - len,
                            " > '%s/batch%d.log' 2>&1; echo $? > "
                            "'%s/batch%d.rc') & ",
                            t->dir, h, t->dir, h);
  }
  snprintf(cmd + len, cap - len, "wait");
  fflush(NULL);  // the child must not write our buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
    _exit(127);
  }
  free(cmd);
  if (pid < 0) {
    fprintf(stderr, "fork failed: %s\n", strerror(errno));
    ++t->asm_failures;
    return;
  }
  f->pid = pid;
  t->ptxas_runs += f->halves;
}

// Many cases make the same module (an op's kernel at the same dtype and
// shape in several groups: about one module in seven): ptxas sees each
// text once an arch. The hashes of the modules queued, per arch (FNV-1a
// 64 and the length: a collision would take two modules of the same
// length and hash).
#define SEEN_CAP 8192  // a power of two above the suite's modules

typedef struct seen_t {
  uint64_t hash[SEEN_CAP];
  size_t len[SEEN_CAP];  // 0: an empty slot
  int count;
} seen_t;

static seen_t g_seen[NUM_ARCHS];

// Whether |ptx| was queued before for arch |a|; records it if not.
static bool seen_before(size_t a, const char* ptx) {
  uint64_t h = 14695981039346656037ull;
  size_t len = 0;
  for (const char* p = ptx; *p; ++p, ++len)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  seen_t* s = &g_seen[a];
  if (s->count >= SEEN_CAP / 2) return false;  // full: assemble it again
  for (size_t i = h & (SEEN_CAP - 1);; i = (i + 1) & (SEEN_CAP - 1)) {
    if (s->len[i] == 0) {
      s->hash[i] = h;
      s->len[i] = len + 1;
      ++s->count;
      return false;
    }
    if (s->hash[i] == h && s->len[i] == len + 1) return true;
  }
}

// Writes |ptx| as <dir>/<name>.ptx with its kernels renamed apart (see
// above) and queues it for arch |a|, unless ptxas has it already
// (seen_before; with TJ_DUMP_PTX the file is written all the same).
static bool stage_module(totals_t* t, size_t a, const char* name,
                         const char* ptx) {
  bool shared = seen_before(a, ptx);
  t->ptx_bytes += strlen(ptx);
  if (shared) {
    ++t->shared_modules;
    if (!t->keep) return true;
  }
  char path[1200];
  snprintf(path, sizeof(path), "%s/%s.ptx", t->dir, name);
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "%s: cannot write %s\n", name, path);
    return false;
  }
  static const char kPrefix[] = "tj_kernel_";
  int id = t->modules;
  for (const char* p = ptx; *p;) {
    const char* hit = strstr(p, kPrefix);
    if (!hit) {
      fputs(p, f);
      break;
    }
    fwrite(p, 1, (size_t)(hit - p), f);
    fprintf(f, "tjm%d_kernel_", id);
    p = hit + sizeof(kPrefix) - 1;
  }
  fclose(f);
  ++t->modules;
  if (shared) return true;
  pending_t* q = &g_pending[a];
  snprintf(q->names[q->n++], sizeof(q->names[0]), "%s", name);
  if (q->n >= BATCH) start_batch(t, a);
  return true;
}

// The cases of a {bf16, f16} pair: "matmul_bf16_bias_gelu" and
// "matmul_f16_bias_gelu", "op_attention_dq_f16" and "op_attention_dq_bf16"
// (the op groups take f16 first, the GEMM groups bf16). They take the
// same GEMM templates and candidates with another mma type (as the PTX
// tests' tj_test_num_half_types says), each about 1.2 MB of PTX an arch
// on the tensor-core GEMMs, 14% of the suite's PTX for both: the first of
// a pair compiled makes its candidates, the second its program's module
// alone, whose kernel count must be its pair's. The names of the cases
// compiled with their candidates, and their kernel counts.
#define PAIR_CAP 2048

typedef struct pairs_t {
  int n;
  char names[PAIR_CAP][128];
  int kernels[PAIR_CAP];
} pairs_t;

static pairs_t g_pairs;

// Writes |name| with its first "bf16" or "f16" token (between '_'s or the
// ends) swapped for the other to |out|; false when it has none.
static bool pair_name(const char* name, char* out, size_t cap) {
  for (const char* p = name; *p; ++p) {
    if (p != name && p[-1] != '_') continue;
    size_t len = strncmp(p, "bf16", 4) == 0  ? 4
                 : strncmp(p, "f16", 3) == 0 ? 3
                                             : 0;
    if (len == 0 || (p[len] != '\0' && p[len] != '_')) continue;
    int n = snprintf(out, cap, "%.*s%s%s", (int)(p - name), name,
                     len == 4 ? "f16" : "bf16", p + len);
    return n > 0 && (size_t)n < cap;
  }
  return false;
}

// The index in g_pairs of the case |name|'s pair, or -1 where it has none
// or none was compiled with its candidates yet.
static int pair_candidates(const char* name) {
  char other[200];
  if (!pair_name(name, other, sizeof(other))) return -1;
  for (int i = 0; i < g_pairs.n; ++i)
    if (strcmp(g_pairs.names[i], other) == 0) return i;
  return -1;
}

// The op x dtype matrix (case names "op_<op>_<dtype>", the suite's last
// group: 533 cases, half of this test's time, each a small graph through
// LLVM's NVPTX codegen for both archs). In CI's legs (tj_test_ci_subset)
// an op's first dtype compiles for both archs, and its other dtypes for
// one arch each, alternating down the matrix: every op and every dtype
// still reaches both archs' emitters and ptxas, and the groups before the
// matrix (every GEMM, candidates included) run on both. Without
// TJ_TEST_SUBSET (the long mode) every case takes both. Returns the one
// arch's index, or -1 for both.
static int one_arch(totals_t* t, const char* name) {
  if (!tj_test_ci_subset() || strncmp(name, "op_", 3) != 0) return -1;
  const char* end = strrchr(name, '_');
  if (!end || end <= name + 3) return -1;
  char op[sizeof(t->last_op)];
  snprintf(op, sizeof(op), "%.*s", (int)(end - name - 3), name + 3);
  if (strcmp(op, t->last_op) != 0) {
    snprintf(t->last_op, sizeof(t->last_op), "%s", op);
    return -1;
  }
  return t->one_arch_cases++ % (int)NUM_ARCHS;
}

// tj_cts_compile_fn: the case for every arch (one where one_arch says),
// then ptxas on its modules.
static bool compile_case(void* self, const tj_cts_case_t* c,
                         const tj_compile_options_t* options,
                         tj_cts_report_t* out_report) {
  totals_t* t = self;
  ++t->cases;
  bool ok = true;
  tj_compile_options_t opts = *options;
  int pair = pair_candidates(c->name);
  if (pair >= 0) {
    opts.autotune = TJ_AUTOTUNE_OFF;
    ++t->pair_cases;
  }
  const int only = one_arch(t, c->name);
  bool first = true;  // the first arch compiled gives the case's counts
  tj_cuda_offline_ptx_t px[NUM_ARCHS];
  memset(px, 0, sizeof(px));
  for (size_t a = 0; a < NUM_ARCHS && ok; ++a) {
    if (only >= 0 && (size_t)only != a) continue;
    const char* arch = tj_nvptx_arch_name(kArchs[a]);
    double start = now_ms();
    tj_status_t s = tj_cuda_compile_ptx(c->g, &opts, kArchs[a],
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
    if (first) {
      first = false;
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
    char name[200];
    if (ok && px[a].ptx) {
      snprintf(name, sizeof(name), "%s.%s", c->name, arch);
      ok = stage_module(t, a, name, px[a].ptx);
    }
    if (ok && px[a].variants_ptx) {
      snprintf(name, sizeof(name), "%s.%s.candidates", c->name, arch);
      ok = stage_module(t, a, name, px[a].variants_ptx);
    }
  }
  if (ok && pair >= 0 && out_report->kernels != g_pairs.kernels[pair]) {
    fprintf(stderr, "%s: %d kernels, its pair %s: %d\n", c->name,
            out_report->kernels, g_pairs.names[pair], g_pairs.kernels[pair]);
    ok = false;
  } else if (ok && pair < 0 && g_pairs.n < PAIR_CAP) {
    snprintf(g_pairs.names[g_pairs.n], sizeof(g_pairs.names[0]), "%s", c->name);
    g_pairs.kernels[g_pairs.n++] = out_report->kernels;
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
    if (cs.chunks == 0) {
      CHECK(px.ptx && strlen(px.ptx) == cs.ptx_bytes);
    } else {
      // The device compiled chunks (TJ_CUDA_COMPILE_THREADS): the offline
      // program's same chunks, their PTX as many bytes.
      tj_cuda_offline_ptx_t pc;
      CHECK_OK(tj_cuda_compile_ptx_chunks(g, &o, arch, 0, tj_allocator_system(),
                                          &pc));
      size_t bytes = 0;
      for (uint32_t c = 0; c < pc.num_chunks && pc.chunk_ptx; ++c)
        bytes += pc.chunk_ptx[c] ? strlen(pc.chunk_ptx[c]) : 0;
      CHECK_EQ_INT(cs.chunks, pc.num_chunks);
      CHECK_EQ_INT(cs.ptx_bytes, bytes);
      tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &pc);
    }
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
  tj_cts_backend_t be = {"cuda-ptx", TJ_TARGET_CUDA,        ctx,
                         kSkips,     cuda_cts_expects(ctx), NULL};
  double start = now_ms();
  tj_cts_compile_all(&be, compile_case, &t);
  for (size_t a = 0; a < NUM_ARCHS; ++a) start_batch(&t, a);
  finish_batch(&t);
  double total_ms = now_ms() - start;
  // Each module ptxas rejected or warned on is printed above with its log.
  CHECK_EQ_INT(0, t.asm_failures);
  g_test_checks += tj_cts_checks;
  g_test_failures += tj_cts_failures;
  // Every case compiled; the suite has GEMMs with tensor cores, whose
  // candidates must have been assembled too.
  CHECK(t.cases > 0);
  CHECK(getenv("TJ_CTS_GROUP") || t.variant_kernels[0] > 0);
  CHECK(getenv("TJ_CTS_GROUP") || t.variant_kernels[1] > 0);
  printf(
      "# %d cases: %ld kernels on %s, %ld on %s (%ld graph breaks); GEMM "
      "candidate kernels: %ld on %s, %ld on %s (%d cases the second of a "
      "bf16/f16 pair: none; %d of the op x dtype matrix on one arch)\n",
      t.cases, t.kernels[0], tj_nvptx_arch_name(kArchs[0]), t.kernels[1],
      tj_nvptx_arch_name(kArchs[1]), t.host_steps, t.variant_kernels[0],
      tj_nvptx_arch_name(kArchs[0]), t.variant_kernels[1],
      tj_nvptx_arch_name(kArchs[1]), t.pair_cases, t.one_arch_cases);
  printf(
      "# %d PTX modules (%zu bytes; %d of them made before, assembled "
      "once) assembled by %d ptxas runs (%.0f ms waited for them); LLVM "
      "(middle end to PTX) %.0f ms; total %.0f ms\n",
      t.modules + (t.keep ? 0 : t.shared_modules), t.ptx_bytes,
      t.shared_modules, t.ptxas_runs, t.ptxas_ms, t.compile_ms, total_ms);
  if (!t.keep) rmdir(t.dir);
  tj_context_destroy(ctx);
  TEST_MAIN_END();
}
