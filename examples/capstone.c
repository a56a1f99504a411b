// The capstone of seed 001, end to end on the CPU: y = gelu(x @ w + b) with
// a symbolic batch B, x: f32[B,1024], w: f32[1024,4096], b: f32[4096].
//
// Builds the block through the C API, prints it and parses it back, prints
// the scoreboard stage by stage, compiles it once (cold, then warm from the
// disk cache in a fresh process), runs one executable for several B without
// recompiling, checks every result against the reference interpreter and
// times it beside numpy's eager evaluation of the same block.
//
//   capstone [--k K] [--n N] [--batches 1,7,256,2048] [--reps R]
//            [--threads T] [--numpy PATH_TO_numpy_capstone.py | --no-numpy]
//            [--device cpu|cuda] [--help]
//   capstone --compile-only     (used for the warm-start measurement)
//
// Times are min / median / max over R runs after a warm-up. --threads sets
// the library's worker threads (0: one per CPU) and OpenBLAS's for numpy's
// column, so both sides use the same cores. numpy runs under $PYTHON
// (python3 when unset), which scripts/demo.sh sets.
// --device cuda compiles for the GPU (NVPTX through the CUDA driver); the
// host tensors are copied to and from the device inside each run.

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tensorjit.h"

#ifndef TJ_SOURCE_ROOT
#define TJ_SOURCE_ROOT "."
#endif

#define MAX_BATCHES 8

typedef struct options_t {
  int64_t k, n;
  int64_t batches[MAX_BATCHES];
  int num_batches;
  int reps;
  int threads;               // 0: one per CPU
  const char* numpy_script;  // NULL: no numpy column
  bool compile_only;
  bool cuda;
} options_t;

static options_t g_options;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef struct spread_t {
  double min, median, max;
} spread_t;

static spread_t spread_of(double* values, int count) {
  qsort(values, (size_t)count, sizeof(double), compare_doubles);
  double med = count % 2 ? values[count / 2]
                         : 0.5 * (values[count / 2 - 1] + values[count / 2]);
  return (spread_t){values[0], med, values[count - 1]};
}

// Exits with the status message: this is an application, not the library.
static void check(tj_status_t status, const char* what) {
  if (!status) return;
  fprintf(stderr, "capstone: %s: %s: %s\n", what,
          tj_status_code_name(tj_status_code(status)),
          tj_status_message(status));
  tj_status_free(status);
  exit(1);
}

// Collects the library's diagnostics (TJ_LOG=recompiles) for the report.
typedef struct log_t {
  char text[4096];
  size_t length;
  int lines;
} log_t;

static void collect_diagnostic(tj_severity_t severity, const char* message,
                               size_t length, void* user_data) {
  (void)severity;
  log_t* log = user_data;
  int n = snprintf(log->text + log->length, sizeof(log->text) - log->length,
                   "  %.*s\n", (int)length, message);
  if (n > 0 && log->length + (size_t)n < sizeof(log->text)) {
    log->length += (size_t)n;
  }
  ++log->lines;
}

static tj_graph_t* build_block(tj_context_t* ctx, int64_t k, int64_t n) {
  tj_graph_t* g = NULL;
  check(tj_graph_create(ctx, "block", &g), "tj_graph_create");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, k}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){k, n}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){n}, "b");
  tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
  tj_graph_output(g, y, "y");
  check(tj_graph_finalize(g), "tj_graph_finalize");
  return g;
}

static void fill_random(float* data, int64_t count, uint64_t seed,
                        float scale) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    data[i] = scale * ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
  }
}

static tj_compile_options_t compile_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = g_options.cuda ? TJ_TARGET_CUDA : TJ_TARGET_X86;
  o.x86.num_threads = g_options.threads;
  return o;
}

// Times of numpy's eager block at batch |batch|, or NANs.
static spread_t numpy_ms(const options_t* opt, int64_t batch) {
  spread_t t = {NAN, NAN, NAN};
  if (!opt->numpy_script) return t;
  const char* python = getenv("PYTHON");
  char threads[64] = "";
  if (opt->threads > 0) {
    snprintf(threads, sizeof(threads), "OPENBLAS_NUM_THREADS=%d ",
             opt->threads);
  }
  char command[1400];
  snprintf(command, sizeof(command),
           "%s'%s' '%s' --batch %lld --k %lld --n %lld --reps %d --spread "
           "2>/dev/null",
           threads, python && *python ? python : "python3", opt->numpy_script,
           (long long)batch, (long long)opt->k, (long long)opt->n, opt->reps);
  FILE* p = popen(command, "r");
  if (!p) return t;
  if (fscanf(p, "%lf %lf %lf", &t.min, &t.median, &t.max) != 3) {
    t = (spread_t){NAN, NAN, NAN};
  }
  pclose(p);
  return t;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: capstone [--k K] [--n N] [--batches 1,7,256,2048] "
          "[--reps R]\n"
          "                [--threads T] [--numpy SCRIPT | --no-numpy]\n"
          "                [--device cpu|cuda] [--compile-only] [--help]\n"
          "  y = gelu(x @ w + b) with x: f32[B,K], w: f32[K,N], b: f32[N]\n"
          "  --batches    the values of B to run (at most %d)\n"
          "  --reps       timed runs per B (min / median / max reported)\n"
          "  --threads    worker threads, and numpy's OpenBLAS threads "
          "(0: one per CPU)\n"
          "  --numpy      numpy's eager block (default "
          "bench/numpy_capstone.py, run by $PYTHON)\n"
          "  --device     cpu (x86) or cuda\n",
          MAX_BATCHES);
}

// Compiles the block in this process and prints the wall time: run by the
// parent in a fresh process so that "warm" means "from the disk cache".
static int compile_only(const options_t* opt) {
  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "tj_context_create");
  tj_graph_t* g = build_block(ctx, opt->k, opt->n);
  tj_compile_options_t co = compile_options();
  tj_executable_t* exe = NULL;
  double t0 = now_ms();
  check(tj_compile(g, &co, &exe), "tj_compile");
  double t1 = now_ms();
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);
  printf("%.3f %lld %lld\n", t1 - t0, (long long)stats.cache_hits,
         (long long)stats.cache_misses);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return 0;
}

static void parse_args(int argc, char** argv, options_t* opt) {
  opt->k = 1024;
  opt->n = 4096;
  int64_t defaults[] = {1, 7, 256, 2048};
  opt->num_batches = 4;
  memcpy(opt->batches, defaults, sizeof(defaults));
  opt->reps = 5;
  static char script[1024];
  snprintf(script, sizeof(script), "%s/bench/numpy_capstone.py",
           TJ_SOURCE_ROOT);
  opt->numpy_script = access(script, R_OK) == 0 ? script : NULL;
  opt->compile_only = false;
  opt->cuda = false;
  opt->threads = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--k") && v) {
      opt->k = atoll(v), ++i;
    } else if (!strcmp(a, "--n") && v) {
      opt->n = atoll(v), ++i;
    } else if (!strcmp(a, "--reps") && v) {
      opt->reps = atoi(v), ++i;
    } else if (!strcmp(a, "--threads") && v) {
      opt->threads = atoi(v), ++i;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--numpy") && v) {
      opt->numpy_script = v, ++i;
    } else if (!strcmp(a, "--device") && v) {
      if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
        fprintf(stderr, "capstone: --device is cpu or cuda, not %s\n", v);
        exit(2);
      }
      opt->cuda = !strcmp(v, "cuda"), ++i;
    } else if (!strcmp(a, "--no-numpy")) {
      opt->numpy_script = NULL;
    } else if (!strcmp(a, "--compile-only")) {
      opt->compile_only = true;
    } else if (!strcmp(a, "--batches") && v) {
      opt->num_batches = 0;
      for (char* s = argv[++i]; *s && opt->num_batches < MAX_BATCHES;) {
        opt->batches[opt->num_batches++] = strtoll(s, &s, 10);
        if (*s == ',') ++s;
      }
    } else {
      fprintf(stderr, "capstone: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      exit(2);
    }
  }
  if (opt->k < 1 || opt->n < 1 || opt->reps < 1 || opt->num_batches < 1 ||
      opt->threads < 0) {
    fprintf(stderr,
            "capstone: sizes, reps and batches must be positive, threads "
            "not negative\n");
    exit(2);
  }
}

static void print_scoreboard(const tj_graph_t* g, int64_t batch) {
  const char* names[] = {"B"};
  tj_scoreboard_t sb;
  check(tj_graph_scoreboard(g, 1, names, &batch, &sb), "tj_graph_scoreboard");
  double act = (double)sb.activation_bytes;
  printf(
      "\n== Scoreboard at B = %lld (bytes in units of the activation y, "
      "%.1f MB) ==\n",
      (long long)batch, act / 1e6);
  printf("  %-13s %7s %8s %12s %12s %11s %7s %10s\n", "stage", "nodes",
         "kernels", "bytes r+w", "x activation", "peak MB", "breaks",
         "% compiled");
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) {
    const tj_scoreboard_row_t* r = &sb.rows[s];
    double bytes = (double)(r->bytes_read + r->bytes_written);
    printf("  %-13s %7lld %8lld %10.1fMB %11.1fx %11.1f %7lld %9.0f%%\n",
           tj_stage_name(r->stage), (long long)r->nodes, (long long)r->kernels,
           bytes / 1e6, bytes / act, (double)r->peak_bytes / 1e6,
           (long long)r->graph_breaks, r->percent_compiled);
  }
}

int main(int argc, char** argv) {
  options_t opt;
  parse_args(argc, argv, &opt);
  g_options = opt;
  if (opt.compile_only) return compile_only(&opt);

  printf(
      "libtensorjit %s: capstone y = gelu(x @ w + b), tanh form, f32, on "
      "the %s\n",
      tj_version_string(), opt.cuda ? "GPU (CUDA)" : "CPU (x86)");
  printf("x: f32[B,%lld]  w: f32[%lld,%lld]  b: f32[%lld]  (B symbolic)\n",
         (long long)opt.k, (long long)opt.k, (long long)opt.n,
         (long long)opt.n);

  // Every guard failure and recompile is reported through the context's
  // diagnostic channel; collect them for the recompile log below.
  // The log categories: TJ_LOG when the user set it, else recompiles.
  static log_t log;
  const char* log_categories = getenv("TJ_LOG");
  if (!log_categories) log_categories = "recompiles";
  tj_context_options_t context_options;
  tj_context_options_initialize(&context_options);
  context_options.log = log_categories;
  context_options.diagnostic_fn = collect_diagnostic;
  context_options.diagnostic_user_data = &log;
  tj_context_t* ctx = NULL;
  check(tj_context_create(&context_options, &ctx), "tj_context_create");

  // 1. Capture: the C API, then the text form, round trip exact.
  tj_graph_t* g = build_block(ctx, opt.k, opt.n);
  char* text = NULL;
  check(tj_graph_print(g, &text), "tj_graph_print");
  tj_graph_t* parsed = NULL;
  check(tj_graph_parse(ctx, text, strlen(text), "capstone.tj", &parsed),
        "tj_graph_parse");
  char* text2 = NULL;
  check(tj_graph_print(parsed, &text2), "tj_graph_print");
  bool round_trip = strcmp(text, text2) == 0;
  printf("\n== Typed SSA IR (printed, parsed back: %s) ==\n%s",
         round_trip ? "identical" : "DIFFERENT", text);
  tj_context_free_string(ctx, text);
  tj_context_free_string(ctx, text2);
  tj_graph_destroy(parsed);
  if (!round_trip) return 1;

  // 2. The scoreboard, stage by stage, at the largest batch.
  int64_t big = opt.batches[0];
  for (int i = 1; i < opt.num_batches; ++i)
    if (opt.batches[i] > big) big = opt.batches[i];
  print_scoreboard(g, big);

  // 3. Compile: cold in this process, warm in a fresh one from disk.
  tj_compile_options_t co = compile_options();
  tj_executable_t* exe = NULL;
  double t0 = now_ms();
  check(tj_compile(g, &co, &exe), "tj_compile");
  double cold_ms = now_ms() - t0;
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);
  printf("\n== Compile ==\n");
  printf(
      "  this process: %8.1f ms  (%d kernels; %lld compiled by LLVM, "
      "%lld from the cache)\n",
      cold_ms, stats.num_kernels, (long long)stats.cache_misses,
      (long long)stats.cache_hits);
  printf(
      "    by stage:   passes %.1f, lowering %.1f, LLVM %.1f, ptxas %.1f, "
      "tuning %.1f, cache load %.1f ms\n",
      stats.passes_ms, stats.lowering_ms, stats.llvm_ms, stats.ptxas_ms,
      stats.tuning_ms, stats.cache_load_ms);
  char command[1200];
  snprintf(command, sizeof(command),
           "'/proc/%d/exe' --compile-only --k %lld --n %lld --device %s "
           "--threads %d",
           (int)getpid(), (long long)opt.k, (long long)opt.n,
           opt.cuda ? "cuda" : "cpu", opt.threads);
  FILE* p = popen(command, "r");
  double warm_ms = NAN;
  long long warm_hits = 0, warm_misses = 0;
  if (p) {
    if (fscanf(p, "%lf %lld %lld", &warm_ms, &warm_hits, &warm_misses) != 3)
      warm_ms = NAN;
    pclose(p);
  }
  printf(
      "  new process:  %8.1f ms  (%lld from the disk cache, %lld "
      "compiled)\n",
      warm_ms, warm_hits, warm_misses);

  // The eager-like baseline of the amortization: the same graph compiled
  // unfused (tj_compile_options_t.unfused: one op a kernel).
  tj_compile_options_t uo = compile_options();
  uo.unfused = true;
  tj_executable_t* unfused = NULL;
  check(tj_compile(g, &uo, &unfused), "tj_compile (unfused)");

  // 4. One executable, every B: time, numpy, error against the reference.
  int reps = opt.reps < 64 ? opt.reps : 64;
  char threads[32] = "one per CPU";
  if (opt.threads) snprintf(threads, sizeof(threads), "%d", opt.threads);
  printf(
      "\n== Runs of one executable (ms: min / median / max of %d; threads: "
      "%s) ==\n",
      reps, threads);
  printf("  %6s %26s %26s %8s %12s %10s\n", "B", "ours", "numpy eager",
         "speedup", "max |err|", "recompiles");
  float* w = malloc(sizeof(float) * (size_t)(opt.k * opt.n));
  float* b = malloc(sizeof(float) * (size_t)opt.n);
  if (!w || !b) return 1;
  fill_random(w, opt.k * opt.n, 2, 0.1f);
  fill_random(b, opt.n, 3, 1.0f);
  int64_t wshape[] = {opt.k, opt.n}, bshape[] = {opt.n};
  int failures = 0;
  enum { kMaxShown = MAX_BATCHES };
  double saved[kMaxShown];          // per B: numpy eager's median minus ours
  double saved_unfused[kMaxShown];  // the unfused build's median minus ours
  for (int bi = 0; bi < opt.num_batches; ++bi) {
    int64_t B = opt.batches[bi];
    size_t ny = (size_t)(B * opt.n);
    float* x = malloc(sizeof(float) * (size_t)(B * opt.k) + 1);
    float* y = malloc(sizeof(float) * ny + 1);
    float* ref = malloc(sizeof(float) * ny + 1);
    if (!x || !y || !ref) return 1;
    fill_random(x, B * opt.k, 1 + (uint64_t)B, 2.0f);
    int64_t xshape[] = {B, opt.k}, yshape[] = {B, opt.n};
    tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xshape),
                         tj_tensor_make(w, TJ_DTYPE_F32, 2, wshape),
                         tj_tensor_make(b, TJ_DTYPE_F32, 1, bshape)};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, yshape);
    tj_tensor_t ref_out = tj_tensor_make(ref, TJ_DTYPE_F32, 2, yshape);
    double times[64];
    check(tj_executable_run(exe, in, 3, &out, 1), "tj_executable_run");
    for (int r = 0; r < reps; ++r) {
      double s = now_ms();
      check(tj_executable_run(exe, in, 3, &out, 1), "tj_executable_run");
      times[r] = now_ms() - s;
    }
    spread_t ours = spread_of(times, reps);
    check(tj_executable_run(unfused, in, 3, &out, 1), "tj_executable_run");
    for (int r = 0; r < reps; ++r) {
      double s = now_ms();
      check(tj_executable_run(unfused, in, 3, &out, 1), "tj_executable_run");
      times[r] = now_ms() - s;
    }
    spread_t eager = spread_of(times, reps);
    check(tj_executable_run(exe, in, 3, &out, 1), "tj_executable_run");
    check(tj_reference_run(g, in, 3, &ref_out, 1), "tj_reference_run");
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ny; ++i) {
      double e = fabs((double)y[i] - (double)ref[i]);
      if (!(e <= max_err)) max_err = e;  // NaN counts as the worst
      if (fabs((double)ref[i]) > max_ref) max_ref = fabs((double)ref[i]);
    }
    // f32 GEMM over K terms against an f64-accumulated reference.
    double tolerance = 1e-5 * (1.0 + max_ref) * sqrt((double)opt.k);
    bool ok = max_err <= tolerance;
    failures += !ok;
    tj_executable_stats(exe, &stats);
    spread_t np = numpy_ms(&opt, B);
    printf(
        "  %6lld %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %7.2fx %12.3g%s %8lld\n",
        (long long)B, ours.min, ours.median, ours.max, np.min, np.median,
        np.max, np.median / ours.median, max_err, ok ? "  " : " !",
        (long long)stats.recompiles);
    if (bi < kMaxShown) saved[bi] = np.median - ours.median;
    if (bi < kMaxShown) saved_unfused[bi] = eager.median - ours.median;
    free(x);
    free(y);
    free(ref);
  }
  // Compiling pays off once (t_eager - t_compiled) * N_runs > t_compile.
  printf("\n== Compile amortization (against numpy eager) ==\n");
  printf("  %6s %14s %22s %22s\n", "B", "saved a run", "break-even (cold)",
         "break-even (disk cache)");
  for (int bi = 0; bi < opt.num_batches && bi < kMaxShown; ++bi) {
    if (!(saved[bi] > 0)) {
      printf("  %6lld %11.3f ms %22s %22s\n", (long long)opt.batches[bi],
             saved[bi], "never (not faster)", "never");
      continue;
    }
    printf("  %6lld %11.3f ms %17.0f runs %17.0f runs\n",
           (long long)opt.batches[bi], saved[bi], ceil(cold_ms / saved[bi]),
           isnan(warm_ms) ? NAN : ceil(warm_ms / saved[bi]));
  }
  // The same against this graph compiled unfused (one op a kernel): what
  // fusion saves, t_eager measured on the same library.
  printf(
      "\n== Compile amortization (against the unfused build, one op a "
      "kernel) ==\n");
  printf("  %6s %14s %22s\n", "B", "saved a run", "break-even (cold)");
  for (int bi = 0; bi < opt.num_batches && bi < kMaxShown; ++bi) {
    if (!(saved_unfused[bi] > 0)) {
      printf("  %6lld %11.3f ms %22s\n", (long long)opt.batches[bi],
             saved_unfused[bi], "never (not faster)");
      continue;
    }
    printf("  %6lld %11.3f ms %17.0f runs\n", (long long)opt.batches[bi],
           saved_unfused[bi], ceil(cold_ms / saved_unfused[bi]));
  }
  tj_executable_release(unfused);
  tj_executable_stats(exe, &stats);
  printf("\n== Recompile log (TJ_LOG=%s) ==\n", log_categories);
  if (log.lines) printf("%s", log.text);
  if (stats.recompiles == 0) {
    printf(
        "  no recompiles over %d batch sizes: one generic kernel set "
        "served every B.\n",
        opt.num_batches);
  } else {
    printf("  %lld recompiles over %d batch sizes.\n",
           (long long)stats.recompiles, opt.num_batches);
  }
  if (failures)
    printf("  %d batch sizes exceeded the error tolerance\n", failures);
  free(w);
  free(b);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return failures ? 1 : 0;
}
