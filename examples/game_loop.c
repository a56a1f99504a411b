// An engine-style host embedding libtensorjit: the way a game runs a small
// neural network (say, agent steering) every frame.
//
// At load time the engine creates a context with its own allocator (which
// counts every call), compiles a small MLP once for x86 with its own job
// system as the parallel_for hook (pthreads owned by the engine), warms it
// up for the agent count it will run (tj_executable_prepare: with a host
// parallel_for the library starts no thread of its own, so the small-batch
// GEMM code, ~50-400 ms of LLVM, would otherwise be built by the first
// frame), and allocates every buffer it will need. Then it runs the game
// loop: each frame updates the agents' observations, runs inference, and
// steers the agents with the result. It prints the first frame's time and
// the percentiles of all frames, and proves that nothing is allocated
// after the first frame:
//
//   * through the injected allocator (every library allocation goes there);
//   * and, in builds without a sanitizer, through malloc itself: this
//     program interposes malloc/calloc/realloc/free/memalign so that an
//     allocation behind the allocator's back (a C library call, a stray
//     malloc in the library) would be counted too.
//
// Exits non-zero if either count changes after the first frame, if the
// library started threads of its own (all parallel work must go through
// the engine's job system; small work rightly runs inline on the game
// thread, so the job system may see no loop at all at a few agents), if a
// frame took longer than --max-frame-ms (0: no bound), or if a result
// differs from the reference interpreter.
//
//   game_loop [--frames N] [--agents N] [--workers N] [--max-frame-ms X]

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorjit.h"

#define FEATURES 32
#define HIDDEN 64
#define ACTIONS 8
#define MAX_WORKERS 16

//===----------------------------------------------------------------------===//
// Process-wide malloc counting (interposition)
//===----------------------------------------------------------------------===//

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_MALLOC 0  // the sanitizer owns malloc
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define COUNT_MALLOC 0
#endif
#endif
#if !defined(COUNT_MALLOC) && defined(__GLIBC__)
#define COUNT_MALLOC 1
#endif
#ifndef COUNT_MALLOC
#define COUNT_MALLOC 0
#endif

static atomic_llong g_process_allocs;  // every malloc-family allocation

#if COUNT_MALLOC
// glibc's own entry points: the definitions below replace malloc & co. for
// the whole process (the executable's symbols win over libc's) and forward
// here, so every allocation by any library is counted.
extern void* __libc_malloc(size_t size);
extern void* __libc_calloc(size_t count, size_t size);
extern void* __libc_realloc(void* ptr, size_t size);
extern void* __libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void* ptr);

void* malloc(size_t size) {
  atomic_fetch_add_explicit(&g_process_allocs, 1, memory_order_relaxed);
  return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) {
  atomic_fetch_add_explicit(&g_process_allocs, 1, memory_order_relaxed);
  return __libc_calloc(count, size);
}

void* realloc(void* ptr, size_t size) {
  atomic_fetch_add_explicit(&g_process_allocs, 1, memory_order_relaxed);
  return __libc_realloc(ptr, size);
}

void free(void* ptr) { __libc_free(ptr); }

void* memalign(size_t alignment, size_t size);
void* memalign(size_t alignment, size_t size) {
  atomic_fetch_add_explicit(&g_process_allocs, 1, memory_order_relaxed);
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
  return memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    return EINVAL;
  }
  void* p = memalign(alignment, size);
  if (!p && size) return ENOMEM;
  *out = p;
  return 0;
}
#endif  // COUNT_MALLOC

//===----------------------------------------------------------------------===//
// The engine's allocator: counts what the library allocates
//===----------------------------------------------------------------------===//

typedef struct engine_allocator_t {
  atomic_llong allocs;    // new blocks
  atomic_llong reallocs;  // resized blocks
  atomic_llong frees;
  atomic_llong live_bytes;
  atomic_llong peak_bytes;
} engine_allocator_t;

static void* engine_alloc(void* user_data, void* ptr, size_t old_size,
                          size_t new_size) {
  engine_allocator_t* a = user_data;
  if (new_size == 0) {
    if (ptr) {
      atomic_fetch_add(&a->frees, 1);
      atomic_fetch_sub(&a->live_bytes, (long long)old_size);
      free(ptr);
    }
    return NULL;
  }
  void* p = ptr ? realloc(ptr, new_size) : malloc(new_size);
  if (!p) return NULL;
  atomic_fetch_add(ptr ? &a->reallocs : &a->allocs, 1);
  long long live =
      atomic_fetch_add(&a->live_bytes,
                       (long long)new_size - (long long)(ptr ? old_size : 0)) +
      (long long)new_size - (long long)(ptr ? old_size : 0);
  long long peak = atomic_load(&a->peak_bytes);
  while (live > peak &&
         !atomic_compare_exchange_weak(&a->peak_bytes, &peak, live)) {
  }
  return p;
}

static long long allocator_calls(engine_allocator_t* a) {
  return atomic_load(&a->allocs) + atomic_load(&a->reallocs);
}

//===----------------------------------------------------------------------===//
// The engine's job system: parallel_for over its own worker threads
//===----------------------------------------------------------------------===//

// One parallel loop at a time: the game thread is the only one running the
// executable, so loops never overlap (an engine running one executable from
// several threads at once would need a reentrant job system: the library
// may then call parallel_for concurrently). The game thread works on the
// loop too. Nothing is allocated per loop.
typedef struct job_system_t {
  pthread_t threads[MAX_WORKERS];
  int num_workers;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  pthread_cond_t done;
  uint64_t generation;  // bumped per loop; workers wait for a new one
  int busy;             // workers still on the current loop
  bool quit;
  // The current loop.
  tj_task_fn task;
  void* task_context;
  int64_t count, chunk;
  atomic_llong next;  // next unclaimed index
  // For the report.
  atomic_llong loops, chunks_run;
} job_system_t;

static void run_chunks(job_system_t* js) {
  for (;;) {
    int64_t begin = atomic_fetch_add(&js->next, js->chunk);
    if (begin >= js->count) return;
    int64_t end = begin + js->chunk < js->count ? begin + js->chunk : js->count;
    js->task(js->task_context, begin, end);
    atomic_fetch_add_explicit(&js->chunks_run, 1, memory_order_relaxed);
  }
}

static void* worker_main(void* arg) {
  job_system_t* js = arg;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&js->mutex);
    while (!js->quit && js->generation == seen) {
      pthread_cond_wait(&js->wake, &js->mutex);
    }
    if (js->quit) {
      pthread_mutex_unlock(&js->mutex);
      return NULL;
    }
    seen = js->generation;
    pthread_mutex_unlock(&js->mutex);
    run_chunks(js);
    pthread_mutex_lock(&js->mutex);
    if (--js->busy == 0) pthread_cond_signal(&js->done);
    pthread_mutex_unlock(&js->mutex);
  }
}

// tj_parallel_for_fn: [0, count) in chunks of at least |grain|.
static void engine_parallel_for(void* user_data, int64_t count, int64_t grain,
                                tj_task_fn task, void* task_context) {
  job_system_t* js = user_data;
  if (count <= 0) return;
  atomic_fetch_add_explicit(&js->loops, 1, memory_order_relaxed);
  if (grain < 1) grain = 1;
  if (js->num_workers == 0 || count <= grain) {
    task(task_context, 0, count);
    atomic_fetch_add_explicit(&js->chunks_run, 1, memory_order_relaxed);
    return;
  }
  pthread_mutex_lock(&js->mutex);
  js->task = task;
  js->task_context = task_context;
  js->count = count;
  js->chunk = grain;
  atomic_store(&js->next, 0);
  js->busy = js->num_workers;
  ++js->generation;
  pthread_cond_broadcast(&js->wake);
  pthread_mutex_unlock(&js->mutex);
  run_chunks(js);
  pthread_mutex_lock(&js->mutex);
  while (js->busy > 0) pthread_cond_wait(&js->done, &js->mutex);
  pthread_mutex_unlock(&js->mutex);
}

static bool job_system_start(job_system_t* js, int workers) {
  memset(js, 0, sizeof(*js));
  pthread_mutex_init(&js->mutex, NULL);
  pthread_cond_init(&js->wake, NULL);
  pthread_cond_init(&js->done, NULL);
  for (int i = 0; i < workers; ++i) {
    if (pthread_create(&js->threads[i], NULL, worker_main, js) != 0) {
      return false;
    }
    js->num_workers = i + 1;
  }
  return true;
}

static void job_system_stop(job_system_t* js) {
  pthread_mutex_lock(&js->mutex);
  js->quit = true;
  pthread_cond_broadcast(&js->wake);
  pthread_mutex_unlock(&js->mutex);
  for (int i = 0; i < js->num_workers; ++i) pthread_join(js->threads[i], NULL);
  pthread_cond_destroy(&js->done);
  pthread_cond_destroy(&js->wake);
  pthread_mutex_destroy(&js->mutex);
}

//===----------------------------------------------------------------------===//
// The game
//===----------------------------------------------------------------------===//

typedef struct options_t {
  int64_t frames;
  int64_t agents;
  int workers;
  double max_frame_ms;  // 0: no bound
} options_t;

typedef struct agents_t {
  int64_t count;
  float* position;     // [count, 2]
  float* velocity;     // [count, 2]
  float* observation;  // [count, FEATURES]: the network's input
  float* action;       // [count, ACTIONS]: the network's output
} agents_t;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// The |q|th percentile of |n| sorted values (nearest rank).
static double percentile(const double* sorted, int64_t n, double q) {
  int64_t rank = (int64_t)ceil(q / 100.0 * (double)n);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

static float hash_unit(uint64_t i) {
  i = (i ^ (i >> 31)) * 0x9E3779B97F4A7C15ull;
  i ^= i >> 29;
  return (float)((i >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

// Compile-time weights of the network, baked into the graph as constants.
static void fill_weights(float* w, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = 0; i < n; ++i)
    w[i] = scale * hash_unit(seed * 1000003u + (uint64_t)i);
}

// policy(obs) = tanh(relu(relu(obs @ w1 + b1) @ w2 + b2) @ w3 + b3), with a
// symbolic agent count N.
static tj_status_t build_policy(tj_context_t* ctx, tj_graph_t** out) {
  static float w1[FEATURES * HIDDEN], b1[HIDDEN], w2[HIDDEN * HIDDEN],
      b2[HIDDEN], w3[HIDDEN * ACTIONS], b3[ACTIONS];
  fill_weights(w1, FEATURES * HIDDEN, 1, 0.25f);
  fill_weights(b1, HIDDEN, 2, 0.1f);
  fill_weights(w2, HIDDEN * HIDDEN, 3, 0.2f);
  fill_weights(b2, HIDDEN, 4, 0.1f);
  fill_weights(w3, HIDDEN * ACTIONS, 5, 0.2f);
  fill_weights(b3, ACTIONS, 6, 0.1f);
  tj_graph_t* g = NULL;
  tj_status_t status = tj_graph_create(ctx, "policy", &g);
  if (status) return status;
  int64_t n = tj_graph_symbol(g, "N");
  tj_value_t obs =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){n, FEATURES}, "obs");
  // Borrowed: the weights are static engine assets that outlive the
  // executable.
  tj_value_t h = tj_graph_relu(
      g, tj_graph_linear(
             g, obs,
             tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 2,
                                        (int64_t[]){FEATURES, HIDDEN}, w1,
                                        sizeof(w1)),
             tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, (int64_t[]){HIDDEN},
                                        b1, sizeof(b1))));
  h = tj_graph_relu(
      g,
      tj_graph_linear(
          g, h,
          tj_graph_constant_borrowed(
              g, TJ_DTYPE_F32, 2, (int64_t[]){HIDDEN, HIDDEN}, w2, sizeof(w2)),
          tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, (int64_t[]){HIDDEN},
                                     b2, sizeof(b2))));
  tj_value_t act = tj_graph_tanh(
      g,
      tj_graph_linear(
          g, h,
          tj_graph_constant_borrowed(
              g, TJ_DTYPE_F32, 2, (int64_t[]){HIDDEN, ACTIONS}, w3, sizeof(w3)),
          tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 1, (int64_t[]){ACTIONS},
                                     b3, sizeof(b3))));
  tj_graph_output(g, act, "action");
  status = tj_graph_finalize(g);  // the first builder error, if any
  if (status) {
    tj_graph_destroy(g);
    return status;
  }
  *out = g;
  return NULL;
}

// The simulation step: observations from the world, then steering.
static void observe(agents_t* a, int64_t frame) {
  float t = (float)frame * 0.016f;
  for (int64_t i = 0; i < a->count; ++i) {
    float* o = a->observation + i * FEATURES;
    float px = a->position[2 * i], py = a->position[2 * i + 1];
    for (int k = 0; k < FEATURES; k += 4) {
      float phase = (float)k * 0.37f + t;
      o[k] = px * 0.1f;
      o[k + 1] = py * 0.1f;
      o[k + 2] = sinf(phase + px);
      o[k + 3] = cosf(phase - py);
    }
  }
}

static void steer(agents_t* a) {
  for (int64_t i = 0; i < a->count; ++i) {
    const float* act = a->action + i * ACTIONS;
    a->velocity[2 * i] = 0.9f * a->velocity[2 * i] + 0.1f * act[0];
    a->velocity[2 * i + 1] = 0.9f * a->velocity[2 * i + 1] + 0.1f * act[1];
    a->position[2 * i] += a->velocity[2 * i] * 0.016f;
    a->position[2 * i + 1] += a->velocity[2 * i + 1] * 0.016f;
  }
}

static bool parse_args(int argc, char** argv, options_t* o) {
  o->frames = 10000;
  o->agents = 512;
  o->workers = 1;  // plus the game thread
  o->max_frame_ms = 0;
  for (int i = 1; i < argc; i += 2) {  // each option takes a value
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--frames") == 0 && v) {
      o->frames = atoll(v);
    } else if (strcmp(argv[i], "--agents") == 0 && v) {
      o->agents = atoll(v);
    } else if (strcmp(argv[i], "--workers") == 0 && v) {
      o->workers = atoi(v);
    } else if (strcmp(argv[i], "--max-frame-ms") == 0 && v) {
      o->max_frame_ms = atof(v);
    } else {
      return false;
    }
  }
  return o->frames >= 2 && o->agents >= 1 && o->workers >= 0 &&
         o->workers <= MAX_WORKERS && o->max_frame_ms >= 0;
}

// The process's threads (Linux: /proc/self/task), or -1 if unknown.
static int count_threads(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int fail_status(const char* what, tj_status_t status) {
  fprintf(stderr, "game_loop: %s: %s: %s\n", what,
          tj_status_code_name(tj_status_code(status)),
          tj_status_message(status));
  tj_status_free(status);
  return 1;
}

int main(int argc, char** argv) {
  options_t opt;
  if (!parse_args(argc, argv, &opt)) {
    fprintf(stderr,
            "usage: game_loop [--frames N>=2] [--agents N] [--workers 0..%d] "
            "[--max-frame-ms X]\n",
            MAX_WORKERS);
    return 2;
  }

  //===--- load time: allocate and compile everything ---===//
  static engine_allocator_t heap;
  static job_system_t jobs;
  if (!job_system_start(&jobs, opt.workers)) {
    fprintf(stderr, "game_loop: cannot start %d worker threads\n", opt.workers);
    return 1;
  }
  tj_context_options_t copts;
  tj_context_options_initialize(&copts);
  copts.allocator.fn = engine_alloc;
  copts.allocator.user_data = &heap;
  tj_context_t* ctx = NULL;
  tj_graph_t* policy = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t status = tj_context_create(&copts, &ctx);
  if (status) return fail_status("tj_context_create", status);
  status = build_policy(ctx, &policy);
  if (status) return fail_status("building the policy", status);
  tj_compile_options_t options;
  tj_compile_options_initialize(&options);
  options.target = TJ_TARGET_X86;
  options.x86.num_threads = opt.workers + 1;  // the job system's width
  options.x86.parallel_for = engine_parallel_for;
  options.x86.parallel_for_user_data = &jobs;
  options.cache_dir = "";  // a game ships its kernels; no disk cache here
  double t0 = now_us();
  status = tj_compile(policy, &options, &exe);
  if (status) return fail_status("tj_compile", status);
  double compile_ms = (now_us() - t0) / 1e3;

  agents_t agents = {.count = opt.agents};
  agents.position = calloc((size_t)opt.agents * 2, sizeof(float));
  agents.velocity = calloc((size_t)opt.agents * 2, sizeof(float));
  agents.observation = calloc((size_t)opt.agents * FEATURES, sizeof(float));
  agents.action = calloc((size_t)opt.agents * ACTIONS, sizeof(float));
  float* reference = calloc((size_t)opt.agents * ACTIONS, sizeof(float));
  double* frame_us = calloc((size_t)opt.frames, sizeof(double));
  if (!agents.position || !agents.velocity || !agents.observation ||
      !agents.action || !reference || !frame_us) {
    fprintf(stderr, "game_loop: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < opt.agents; ++i) {
    agents.position[2 * i] = 10.0f * hash_unit((uint64_t)i * 2 + 100);
    agents.position[2 * i + 1] = 10.0f * hash_unit((uint64_t)i * 2 + 101);
  }
  int64_t obs_shape[2] = {opt.agents, FEATURES};
  int64_t act_shape[2] = {opt.agents, ACTIONS};
  tj_tensor_t in =
      tj_tensor_make(agents.observation, TJ_DTYPE_F32, 2, obs_shape);
  tj_tensor_t out = tj_tensor_make(agents.action, TJ_DTYPE_F32, 2, act_shape);
  // The warm-up: everything a run of this many agents would compile is
  // compiled now, on the loading screen (only shapes are read).
  t0 = now_us();
  status = tj_executable_prepare(exe, &in, 1);
  if (status) return fail_status("tj_executable_prepare", status);
  double prepare_ms = (now_us() - t0) / 1e3;
  int load_threads = count_threads();
  long long load_allocs = allocator_calls(&heap);
  long long load_mallocs = atomic_load(&g_process_allocs);

  //===--- the game loop ---===//
  long long after_first = 0, process_after_first = 0;
  for (int64_t frame = 0; frame < opt.frames; ++frame) {
    double start = now_us();
    observe(&agents, frame);
    status = tj_executable_run(exe, &in, 1, &out, 1);
    if (status) return fail_status("tj_executable_run", status);
    steer(&agents);
    frame_us[frame] = now_us() - start;
    if (frame == 0) {
      after_first = allocator_calls(&heap);
      process_after_first = atomic_load(&g_process_allocs);
    }
  }
  long long steady_allocs = allocator_calls(&heap) - after_first;
  long long process_steady =
      atomic_load(&g_process_allocs) - process_after_first;
  int loop_threads = count_threads();  // allocates: after the counts

  //===--- after the loop: check and report ---===//
  // The last frame's action against the oracle (this allocates: it is
  // outside the measured window).
  tj_tensor_t ref = tj_tensor_make(reference, TJ_DTYPE_F32, 2, act_shape);
  status = tj_reference_run(policy, &in, 1, &ref, 1);
  if (status) return fail_status("tj_reference_run", status);
  double max_err = 0.0;
  for (int64_t i = 0; i < opt.agents * ACTIONS; ++i) {
    double e = fabs((double)agents.action[i] - (double)reference[i]);
    if (!(e <= max_err)) max_err = e;
  }
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);

  // Every frame counts, the first included: the load is over.
  double first = frame_us[0];
  qsort(frame_us, (size_t)opt.frames, sizeof(double), compare_doubles);
  double p50 = percentile(frame_us, opt.frames, 50.0);
  double p99 = percentile(frame_us, opt.frames, 99.0);
  double p999 = percentile(frame_us, opt.frames, 99.9);
  double worst = frame_us[opt.frames - 1];

  printf(
      "game_loop: %lld agents, MLP %d -> %d -> %d -> %d (relu, relu, "
      "tanh), %lld frames\n",
      (long long)opt.agents, FEATURES, HIDDEN, HIDDEN, ACTIONS,
      (long long)opt.frames);
  printf(
      "  load:   compile %.1f ms, prepare %.1f ms, %d kernels, %lld "
      "allocator calls",
      compile_ms, prepare_ms, stats.num_kernels, load_allocs);
  if (COUNT_MALLOC) printf(", %lld process mallocs", load_mallocs);
  printf("\n");
  printf(
      "  jobs:   %d worker threads + the game thread; %lld parallel loops, "
      "%lld chunks (small work runs inline); %d threads in the process\n",
      opt.workers, (long long)atomic_load(&jobs.loops),
      (long long)atomic_load(&jobs.chunks_run), loop_threads);
  printf(
      "  frame:  first %.1f us; all %lld frames: p50 %.1f us, p99 %.1f us, "
      "p99.9 %.1f us, max %.1f us\n",
      first, (long long)opt.frames, p50, p99, p999, worst);
  printf(
      "  heap:   first frame %lld allocator calls; after it %lld "
      "allocator calls",
      after_first - load_allocs, steady_allocs);
  if (COUNT_MALLOC) {
    printf(", %lld mallocs in the process\n", process_steady);
  } else {
    printf(" (malloc not counted under a sanitizer)\n");
  }
  printf(
      "  peak library heap %lld bytes; max |x86 - reference| = %.3g; "
      "%lld runs\n",
      (long long)atomic_load(&heap.peak_bytes), max_err, (long long)stats.runs);

  int failed = 0;
  if (steady_allocs != 0) {
    fprintf(stderr,
            "game_loop: FAIL: %lld allocations through the context "
            "allocator after the first frame\n",
            steady_allocs);
    failed = 1;
  }
  if (COUNT_MALLOC && process_steady != 0) {
    fprintf(stderr,
            "game_loop: FAIL: %lld process mallocs after the first "
            "frame\n",
            process_steady);
    failed = 1;
  }
  // With a parallel_for the library runs on the game thread and the job
  // system only: no pool, no background compile thread. (Whether the job
  // system sees a loop depends on the work's size: small work runs
  // inline, as it should.)
  int want_threads = 1 + jobs.num_workers;
  if ((load_threads >= 0 && load_threads != want_threads) ||
      (loop_threads >= 0 && loop_threads != want_threads)) {
    fprintf(stderr,
            "game_loop: FAIL: %d threads after load, %d after the loop; the "
            "engine has %d: the library started threads of its own\n",
            load_threads, loop_threads, want_threads);
    failed = 1;
  }
  if (opt.max_frame_ms > 0 && worst > opt.max_frame_ms * 1e3) {
    fprintf(stderr,
            "game_loop: FAIL: a frame took %.1f ms (first frame %.1f ms), "
            "over the bound of %.1f ms\n",
            worst / 1e3, first / 1e3, opt.max_frame_ms);
    failed = 1;
  }
  if (!(max_err <= 1e-5) || stats.runs != opt.frames) {
    fprintf(stderr,
            "game_loop: FAIL: error %.3g vs the reference, %lld "
            "runs\n",
            max_err, (long long)stats.runs);
    failed = 1;
  }

  //===--- unload ---===//
  tj_executable_release(exe);
  tj_graph_destroy(policy);
  tj_context_destroy(ctx);
  job_system_stop(&jobs);
  long long leaked = atomic_load(&heap.live_bytes);
  if (leaked != 0) {
    fprintf(stderr, "game_loop: FAIL: %lld bytes still allocated at unload\n",
            leaked);
    failed = 1;
  }
  free(agents.position);
  free(agents.velocity);
  free(agents.observation);
  free(agents.action);
  free(reference);
  free(frame_us);
  printf("%s\n", failed ? "FAILED"
                        : "ok: no allocation after the first "
                          "frame");
  return failed;
}
