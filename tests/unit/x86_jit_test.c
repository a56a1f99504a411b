// jit/x86_jit.c: object bytes round trip (compile -> bytes -> load into a
// fresh JIT -> same results), cold and warm timings (printed, not
// asserted), one object loaded twice, several kernels per module, bad
// objects, IR and assembly dumps, the microkernel of every ISA level the
// host runs, target key, stats, hot and cold parts of
// a GEMM kernel (what each holds, the same bits as the whole at M = 1..17),
// concurrent compiles, an OOM sweep over the JIT's own allocations, and the
// AMX integer and bf16 GEMMs compiled for a CPU with AMX (amx_offline,
// amx_bf16_offline).

#include <pthread.h>

#include "jit/emit_llvm.h"
#include "tests/unit/x86_test_util.h"

// gelu(x @ w + b), tanh form, with runtime M: the capstone kernel.
static tj_kir_t* build_capstone(tj_allocator_t a, const char* name, int64_t n,
                                int64_t kk) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(a, TJ_KIR_GEMM, name, &k));
  if (!k) return NULL;
  uint32_t M = tj_kir_add_param(k, "M");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(M), tj_kir_constant(n)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sa[2] = {tj_kir_constant(kk), tj_kir_constant(1)};
  tj_kir_ival_t sw[2] = {tj_kir_constant(n), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_GEMM_B, sw);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sw);
  tj_kir_set_gemm(k, tj_kir_constant(kk), NULL);
  uint32_t acc = tj_kir_acc(k);
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, acc, tj_kir_load(k, b));
  tj_kir_store(k, y, kir_gelu_tanh(k, v));
  tj_status_t s = tj_kir_finalize(k);
  if (s) {
    CHECK_OK(s);
    tj_kir_destroy(k);
    return NULL;
  }
  return k;
}

static tj_kir_t* build_softplus(const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, name, &k));
  uint32_t n = tj_kir_add_param(k, "N");
  tj_kir_ival_t dims[1] = {tj_kir_runtime(n)};
  tj_kir_set_space(k, 1, dims);
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, kUnit);
  uint32_t e = tj_kir_unary(k, TJ_OP_EXP, tj_kir_load(k, x));
  tj_kir_store(
      k, y,
      tj_kir_unary(k, TJ_OP_LOG,
                   tj_kir_binary(k, TJ_OP_ADD, e,
                                 tj_kir_const_float(k, TJ_DTYPE_F32, 1))));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

typedef struct capstone_data_t {
  int64_t m, n, kk;
  float *x, *w, *b;
} capstone_data_t;

static void capstone_data(capstone_data_t* d, int64_t m, int64_t n,
                          int64_t kk) {
  d->m = m;
  d->n = n;
  d->kk = kk;
  d->x = malloc((size_t)(m * kk) * 4);
  d->w = malloc((size_t)(kk * n) * 4);
  d->b = malloc((size_t)n * 4);
  for (int64_t i = 0; i < m * kk; ++i) d->x[i] = (float)rng_uniform(-1, 1);
  for (int64_t i = 0; i < kk * n; ++i) d->w[i] = (float)rng_uniform(-0.1, 0.1);
  for (int64_t i = 0; i < n; ++i) d->b[i] = (float)rng_uniform(-1, 1);
}

static void capstone_free(capstone_data_t* d) {
  free(d->x);
  free(d->w);
  free(d->b);
}

static float* run_capstone(const tj_x86_jit_t* jit, const tj_kir_t* k,
                           tj_kir_fn_t fn, const capstone_data_t* d) {
  float* y = calloc((size_t)(d->m * d->n), 4);
  void* bufs[4] = {d->x, d->w, d->b, y};
  int64_t scalars[1] = {d->m};
  run_kernel(jit, k, fn, bufs, scalars, NULL);
  return y;
}

// Cold: compile (emit, O3, codegen) + load + link; warm: bytes into a new
// JIT (creation included), and into the existing one.
TEST(object_round_trip_and_timings) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_t* jit1;
  CHECK_OK(tj_x86_jit_create(a, NULL, &jit1));
  tj_kir_t* k = build_capstone(a, "capstone", 4096, 1024);
  tj_kir_t* sp = build_softplus("softplus");
  const tj_kir_t* both[2] = {k, sp};
  // The very first compile pays LLVM's one-time setup: measure it apart.
  tj_x86_object_t warmup;
  CHECK_OK(tj_x86_jit_compile(jit1, both + 1, 1, &warmup));
  tj_x86_object_deinitialize(&warmup);

  double t0 = now_ms();
  tj_x86_object_t obj;
  CHECK_OK(tj_x86_jit_compile(jit1, both, 2, &obj));
  double t_compile = now_ms() - t0;
  CHECK(obj.size > 64 && memcmp(obj.data, "\177ELF", 4) == 0);
  t0 = now_ms();
  tj_x86_module_t* m1;
  CHECK_OK(tj_x86_jit_load(jit1, obj.data, obj.size, &m1));
  tj_kir_fn_t f1 = NULL, g1 = NULL;
  CHECK_OK(tj_x86_module_lookup(m1, "capstone", &f1));
  CHECK_OK(tj_x86_module_lookup(m1, "softplus", &g1));
  double t_link = now_ms() - t0;

  // Warm, fresh JIT: what a second process does with a cached object.
  t0 = now_ms();
  tj_x86_jit_t* jit2;
  CHECK_OK(tj_x86_jit_create(a, NULL, &jit2));
  double t_jit = now_ms() - t0;
  tj_x86_module_t* m2;
  CHECK_OK(tj_x86_jit_load(jit2, obj.data, obj.size, &m2));
  tj_kir_fn_t f2 = NULL;
  CHECK_OK(tj_x86_module_lookup(m2, "capstone", &f2));
  double t_warm_fresh = now_ms() - t0;
  // Warm, existing JIT.
  t0 = now_ms();
  tj_x86_module_t* m3;
  CHECK_OK(tj_x86_jit_load(jit1, obj.data, obj.size, &m3));
  tj_kir_fn_t f3 = NULL;
  CHECK_OK(tj_x86_module_lookup(m3, "capstone", &f3));
  double t_warm = now_ms() - t0;
  printf("# capstone gelu(x@w+b) + softplus module, %zu object bytes:\n",
         obj.size);
  printf("#   cold: compile %.2f ms + load/link %.2f ms\n", t_compile, t_link);
  printf("#   warm, new JIT: %.3f ms (JIT creation %.3f ms)\n", t_warm_fresh,
         t_jit);
  printf("#   warm, existing JIT: %.3f ms\n", t_warm);

  capstone_data_t d;
  capstone_data(&d, 37, 4096, 1024);
  float* y1 = run_capstone(jit1, k, f1, &d);
  float* y2 = run_capstone(jit2, k, f2, &d);
  float* y3 = run_capstone(jit1, k, f3, &d);
  size_t bytes = (size_t)(d.m * d.n) * 4;
  CHECK(memcmp(y1, y2, bytes) == 0);
  CHECK(memcmp(y1, y3, bytes) == 0);
  double worst = 0;
  for (int t = 0; t < 64; ++t) {
    int64_t mm = (int64_t)(rng_next() % 37), nn = (int64_t)(rng_next() % 4096);
    double acc = d.b[nn];
    for (int64_t q = 0; q < 1024; ++q)
      acc += (double)d.x[mm * 1024 + q] * d.w[q * 4096 + nn];
    double g =
        0.5 * acc *
        (1 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
    worst = fmax(worst, fabs(g - y1[mm * 4096 + nn]));
  }
  CHECK(worst < 1e-4);
  // Unloading one copy leaves the others working.
  tj_x86_module_destroy(m3);
  float* y4 = run_capstone(jit1, k, f1, &d);
  CHECK(memcmp(y1, y4, bytes) == 0);
  // The softplus kernel from the same object.
  float xs[19], ys[19];
  for (int i = 0; i < 19; ++i) xs[i] = (float)i - 9.0f;
  void* bufs[2] = {xs, ys};
  int64_t n19 = 19;
  run_kernel(jit1, sp, g1, bufs, &n19, NULL);
  for (int i = 0; i < 19; ++i) {
    CHECK(fabs(ys[i] - log1p(exp(xs[i]))) < 1e-6 * (1 + fabs(xs[i])));
  }
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(jit2, &st);
  CHECK_EQ_INT(0, st.compiles);  // warm start: LLVM never compiled
  CHECK_EQ_INT(1, st.loads);
  tj_x86_jit_stats(jit1, &st);
  CHECK_EQ_INT(2, st.compiles);
  CHECK_EQ_INT(2, st.loads);
  free(y1);
  free(y2);
  free(y3);
  free(y4);
  capstone_free(&d);
  tj_x86_module_destroy(m1);
  tj_x86_module_destroy(m2);
  tj_x86_object_deinitialize(&obj);
  tj_x86_object_deinitialize(&obj);  // idempotent
  tj_kir_destroy(k);
  tj_kir_destroy(sp);
  tj_x86_jit_destroy(jit2);
  tj_x86_jit_destroy(jit1);
}

TEST(bad_objects_and_names) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_t* jit;
  CHECK_OK(tj_x86_jit_create(a, NULL, &jit));
  tj_x86_module_t* m = NULL;
  static const char junk[] = "definitely not an object file";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not an ELF object",
               tj_x86_jit_load(jit, junk, sizeof(junk), &m));
  CHECK(m == NULL);
  tj_kir_t* k = build_softplus("softplus");
  const tj_kir_t* ks[1] = {k};
  tj_x86_object_t obj;
  CHECK_OK(tj_x86_jit_compile(jit, ks, 1, &obj));
  // A truncated object is refused (at load or at the first lookup), never
  // a crash.
  tj_status_t s = tj_x86_jit_load(jit, obj.data, obj.size / 3, &m);
  if (!s) {
    tj_kir_fn_t fn;
    s = tj_x86_module_lookup(m, "softplus", &fn);
    tj_x86_module_destroy(m);
  }
  CHECK_EQ_INT(TJ_STATUS_BACKEND_FAILURE, tj_status_code(s));
  tj_status_free(s);
  // Unknown kernel name.
  CHECK_OK(tj_x86_jit_load(jit, obj.data, obj.size, &m));
  tj_kir_fn_t fn = NULL;
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "@nothere",
               tj_x86_module_lookup(m, "nothere", &fn));
  CHECK(fn == NULL);
  tj_x86_module_destroy(m);
  // Two kernels with one name in a module.
  const tj_kir_t* twice[2] = {k, k};
  tj_x86_object_t o2;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "two kernels with this name",
               tj_x86_jit_compile(jit, twice, 2, &o2));
  CHECK(o2.data == NULL);
  // A kernel that was never finalized.
  tj_kir_t* raw = NULL;
  CHECK_OK(tj_kir_create(a, TJ_KIR_POINTWISE, "raw", &raw));
  const tj_kir_t* rk[1] = {raw};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not finalized",
               tj_x86_jit_compile(jit, rk, 1, &o2));
  tj_kir_destroy(raw);
  tj_x86_object_deinitialize(&obj);
  tj_kir_destroy(k);
  tj_x86_jit_destroy(jit);
}

// The IR and assembly say what the kernel is: explicit <16 x float> math,
// and on AVX-512 an FMA microkernel with broadcast memory operands.
TEST(ir_and_asm) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_t* jit;
  CHECK_OK(tj_x86_jit_create(a, NULL, &jit));
  const char* key = tj_x86_jit_target_key(jit);
  CHECK_CONTAINS(key, "llvm=19.");
  CHECK_CONTAINS(key, "triple=x86_64");
  CHECK_CONTAINS(key, "reloc=pic");
  tj_kir_t* k = build_capstone(a, "capstone", 256, 64);
  const tj_kir_t* ks[1] = {k};
  char* ir = NULL;
  CHECK_OK(tj_x86_jit_emit_ir(jit, ks, 1, false, &ir));
  CHECK_CONTAINS(ir, "define void @tj_kernel_capstone(ptr");
  CHECK_CONTAINS(ir, "define internal void @tj_ukernel_capstone(");
  char* opt = NULL;
  CHECK_OK(tj_x86_jit_emit_ir(jit, ks, 1, true, &opt));
  CHECK_CONTAINS(opt, "@tj_kernel_capstone");
  char* as = NULL;
  CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
  if (tj_x86_jit_lanes(jit) == 16) {
    CHECK_CONTAINS(ir, "<16 x float>");
    CHECK_CONTAINS(ir, "llvm.fma.v16f32");
    CHECK_CONTAINS(as, "vfmadd231ps");
    CHECK_CONTAINS(as, "{1to16}");
    CHECK_CONTAINS(as, "%zmm");
  }
  // The microkernel's K loop keeps its accumulators in registers: no
  // stack traffic between the FMAs of one iteration.
  const char* uk = strstr(as, "tj_ukernel_capstone:");
  CHECK(uk != NULL);
  if (uk) {
    const char* end = strstr(uk, ".Lfunc_end");
    int spills = 0;
    for (const char* p = uk; end && p < end; ++p) {
      if (strncmp(p, "(%rsp)", 6) == 0) ++spills;
    }
    CHECK(spills < 4);
  }
  tj_free_string(a, ir);
  tj_free_string(a, opt);
  tj_free_string(a, as);
  tj_kir_destroy(k);
  tj_x86_jit_destroy(jit);
}

// Counts the occurrences of |needle| in [from, to).
static int count_in(const char* from, const char* to, const char* needle) {
  int n = 0;
  size_t len = strlen(needle);
  for (const char* p = from; p + len <= to; ++p) {
    if (strncmp(p, needle, len) == 0) ++n;
  }
  return n;
}

// Every level the host runs gets a register tile generated for its own
// register file, never a wider level's tile narrowed by type legalization
// (which splits each <16 x float> into 2 ymm or 4 xmm and spills, at half
// the FMA rate): at the capstone's real shape (K = 1024, N = 4096) the
// microkernel's K loop holds its accumulators in registers (no stack
// traffic), uses no register wider than the level's, and on AVX2 is the
// 6x16 tile of 12 ymm accumulators and 2 B vectors (BLIS's Haswell tile):
// 12 FMAs and 6 broadcasts per k. AVX-512 keeps its 6x64 (24 zmm).
TEST(microkernel_per_isa) {
  static const tj_x86_isa_t isas[] = {TJ_X86_ISA_HOST, TJ_X86_ISA_AVX2,
                                      TJ_X86_ISA_SSE2};
  tj_allocator_t a = tj_allocator_system();
  tj_kir_t* k = build_capstone(a, "capstone", 4096, 1024);
  if (!k) return;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(isas); ++i) {
    tj_x86_jit_options_t o = {.isa = isas[i]};
    tj_x86_jit_t* jit = NULL;
    tj_status_t s = tj_x86_jit_create(a, &o, &jit);
    if (s) {  // the host lacks this level
      tj_status_free(s);
      continue;
    }
    int32_t lanes = tj_x86_jit_lanes(jit);
    tj_kir_gemm_schedule_t sched;
    tj_kir_gemm_resolve(k, lanes, &sched);
    const tj_kir_t* ks[1] = {k};
    char* as = NULL;
    CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
    const char* uk = as ? strstr(as, "tj_ukernel_capstone:") : NULL;
    const char* end = uk ? strstr(uk, ".Lfunc_end") : NULL;
    CHECK(uk != NULL && end != NULL);
    if (uk && end) {
      printf("# %d lanes: tile %dx%d\n", lanes, sched.tile_m, sched.tile_n);
      CHECK_EQ_INT(0, count_in(uk, end, "(%rsp)"));
      if (lanes < 16) CHECK_EQ_INT(0, count_in(as, as + strlen(as), "%zmm"));
      if (lanes < 8) CHECK_EQ_INT(0, count_in(uk, end, "%ymm"));
      if (lanes == 8) {
        CHECK_EQ_INT(6, sched.tile_m);
        CHECK_EQ_INT(16, sched.tile_n);
        // The K loop is the ukernel's only loop and it is not unrolled.
        CHECK_EQ_INT(12, count_in(uk, end, "vfmadd231ps"));
        CHECK_EQ_INT(6, count_in(uk, end, "vbroadcastss"));
      }
      if (lanes == 16) {
        CHECK_EQ_INT(6, sched.tile_m);
        CHECK_EQ_INT(64, sched.tile_n);
      }
    }
    // The epilogue of AVX2 and SSE2 takes the two vectors of a tile row as
    // one vector of twice the lanes (emit_epilogue's group), AVX-512's one
    // vector at a time; the microkernel stays at the level's width.
    char* ir = NULL;
    CHECK_OK(tj_x86_jit_emit_ir(jit, ks, 1, false, &ir));
    char wide[32], wider[32];
    snprintf(wide, sizeof(wide), "<%d x float>", 2 * lanes);
    snprintf(wider, sizeof(wider), "<%d x float>", 4 * lanes);
    const char* kb = ir ? strstr(ir, "define void @tj_kernel_capstone(") : NULL;
    const char* ke = kb ? strstr(kb, "\n}\n") : NULL;
    const char* ub =
        ir ? strstr(ir, "define internal void @tj_ukernel_capstone(") : NULL;
    const char* ue = ub ? strstr(ub, "\n}\n") : NULL;
    CHECK(kb != NULL && ke != NULL && ub != NULL && ue != NULL);
    if (kb && ke && ub && ue) {
      CHECK_EQ_INT(0, count_in(ub, ue, wide));
      CHECK_EQ_INT(0, count_in(kb, ke, wider));
      if (lanes < 16) {
        CHECK(count_in(kb, ke, wide) > 0);
      } else {
        CHECK_EQ_INT(0, count_in(kb, ke, wide));
      }
    }
    tj_free_string(a, ir);
    tj_free_string(a, as);
    tj_x86_jit_destroy(jit);
  }
  tj_kir_destroy(k);
}

typedef struct compile_job_t {
  tj_x86_jit_t* jit;
  int id;
  bool ok;
} compile_job_t;

static void* compile_thread(void* arg) {
  compile_job_t* job = arg;
  char name[32];
  snprintf(name, sizeof(name), "sp%d", job->id);
  tj_kir_t* k = build_softplus(name);
  compiled_t c;
  job->ok = compile_kernel(job->jit, k, &c);
  if (job->ok) {
    float x[40], y[40];
    for (int i = 0; i < 40; ++i) x[i] = (float)(i - 20) * 0.5f;
    void* bufs[2] = {x, y};
    int64_t n = 40;
    run_kernel(job->jit, k, c.fn, bufs, &n, NULL);
    for (int i = 0; i < 40; ++i) {
      job->ok &= fabs(y[i] - log1p(exp(x[i]))) < 1e-5 * (1 + fabs(x[i]));
    }
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  return NULL;
}

// Compiles, loads and lookups from several threads on one JIT.
TEST(concurrent_compiles) {
  tj_x86_jit_t* jit;
  CHECK_OK(tj_x86_jit_create(tj_allocator_system(), NULL, &jit));
  pthread_t threads[4];
  compile_job_t jobs[4];
  for (int i = 0; i < 4; ++i) {
    jobs[i] = (compile_job_t){jit, i, false};
    pthread_create(&threads[i], NULL, compile_thread, &jobs[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(jobs[i].ok);
  }
  tj_x86_jit_destroy(jit);
}

// Every failure of the JIT's own allocations (struct, strings, object
// bytes, modules) is OUT_OF_MEMORY with nothing leaked.
TEST(oom_sweep) {
  tj_kir_t* k = build_softplus("softplus");
  const tj_kir_t* ks[1] = {k};
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_allocator_t a = tj_test_allocator_get(&t);
    tj_x86_jit_t* jit = NULL;
    tj_x86_module_t* m = NULL;
    tj_x86_object_t obj = {a, NULL, 0};
    tj_status_t s = tj_x86_jit_create(a, NULL, &jit);
    if (!s) s = tj_x86_jit_compile(jit, ks, 1, &obj);
    if (!s) s = tj_x86_jit_load(jit, obj.data, obj.size, &m);
    tj_kir_fn_t fn = NULL;
    if (!s) s = tj_x86_module_lookup(m, "softplus", &fn);
    tj_x86_module_destroy(m);
    tj_x86_object_deinitialize(&obj);
    tj_x86_jit_destroy(jit);
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (!s) break;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
  }
  tj_kir_destroy(k);
}

//===--- hot and cold parts ---===//

static int count_of(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; ++p) ++n;
  return n;
}

// Function definitions in IR |text| whose line names |symbol| ("@name").
static int count_defines(const char* text, const char* symbol) {
  int n = 0;
  for (const char* line = text; line && *line;) {
    const char* end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > 7 && strncmp(line, "define ", 7) == 0) {
      char buf[512];
      size_t c = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
      memcpy(buf, line, c);
      buf[c] = '\0';
      n += strstr(buf, symbol) != NULL;
    }
    line = end ? end + 1 : NULL;
  }
  return n;
}

// What a loader does with a hot part (backends/x86/x86_backend.c), kept
// minimal: the cold part is loaded up front, and the resolver publishes
// every tj_cold_<i> in its slot the first time a trampoline asks.
typedef struct cold_link_t {
  tj_x86_module_t* cold;
  void** slots[TJ_X86_MAX_COLD];
  int32_t count;
  int calls;
} cold_link_t;

static void* resolve_cold(void* ctx, int64_t index) {
  cold_link_t* c = ctx;
  ++c->calls;
  if (index < 0 || index >= c->count) return NULL;
  char names[TJ_X86_MAX_COLD][24];
  const char* symbols[TJ_X86_MAX_COLD];
  void* fns[TJ_X86_MAX_COLD];
  for (int32_t i = 0; i < c->count; ++i) {
    snprintf(names[i], sizeof(names[i]), "tj_cold_%d", (int)i);
    symbols[i] = names[i];
  }
  tj_status_t s =
      tj_x86_module_lookup_symbols(c->cold, symbols, (size_t)c->count, fns);
  if (s) {
    tj_status_free(s);
    return NULL;
  }
  for (int32_t i = 0; i < c->count; ++i) {
    __atomic_store_n(c->slots[i], fns[i], __ATOMIC_RELEASE);
  }
  return fns[index];
}

static tj_x86_module_t* load_object(tj_x86_jit_t* jit, tj_x86_object_t* obj) {
  tj_x86_module_t* m = NULL;
  CHECK_OK(tj_x86_jit_load(jit, obj->data, obj->size, &m));
  tj_x86_object_deinitialize(obj);
  return m;
}

// The GEMM kernel's small-M path (M <= 16) is a function of its own,
// marked "tj-deferrable" with its microkernels: the cold part holds the
// path's loop (with its copy of the epilogue) and every in-place
// microkernel, the hot part only a trampoline for the loop and the packed
// path. Split or whole, the kernel computes the same bits at every M, and
// runs with M > 16 never ask for the cold part.
TEST(hot_and_cold_parts) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_t* jit;
  CHECK_OK(tj_x86_jit_create(a, NULL, &jit));
  // N = 300 ends in a partial panel; K = 130 is not a multiple of chains.
  enum { N = 300, KK = 130, MAX_M = 17 };
  tj_kir_t* k = build_capstone(a, "split", N, KK);
  const tj_kir_t* ks[1] = {k};
  // Deferred: the loop, and for 1, 2, 4, .. rows and tile_m rows a full
  // strip and an edge microkernel.
  tj_kir_gemm_schedule_t sched;
  tj_kir_gemm_resolve(k, tj_x86_jit_lanes(jit), &sched);
  int own = 0;
  for (int32_t r = 1; r <= sched.tile_m; ++r) {
    own += r == sched.tile_m || (r & (r - 1)) == 0;
  }
  const int want_cold = 1 + 2 * own;

  char* whole_ir = NULL;
  char* hot_ir = NULL;
  char* cold_ir = NULL;
  CHECK_OK(tj_x86_jit_emit_ir(jit, ks, 1, false, &whole_ir));
  CHECK_OK(
      tj_x86_jit_emit_ir_part(jit, ks, 1, TJ_X86_PART_HOT, false, &hot_ir));
  CHECK_OK(
      tj_x86_jit_emit_ir_part(jit, ks, 1, TJ_X86_PART_COLD, false, &cold_ir));
  if (whole_ir && hot_ir && cold_ir) {
    CHECK_EQ_INT(1, count_defines(whole_ir, "@tj_small_m_split("));
    CHECK_CONTAINS(whole_ir, "\"tj-deferrable\"");
    CHECK_EQ_INT(2 * own, count_defines(whole_ir, "@tj_ukernel_split_d"));
    // Hot: the loop is a trampoline; no in-place microkernel is left.
    CHECK_EQ_INT(1, count_defines(hot_ir, "@tj_kernel_split("));
    CHECK_EQ_INT(1, count_defines(hot_ir, "@tj_ukernel_split("));
    CHECK_EQ_INT(1, count_defines(hot_ir, "@tj_small_m_split("));
    CHECK_CONTAINS(hot_ir, "@tj_lazy_resolve");
    CHECK_EQ_INT(0, count_of(hot_ir, "tj_ukernel_split_d"));
    char count_line[64];
    snprintf(count_line, sizeof(count_line), "@tj_lazy_count = constant i64 %d",
             want_cold);
    CHECK_CONTAINS(hot_ir, count_line);
    CHECK_EQ_INT(want_cold, count_of(hot_ir, "= global ptr null") - 2);
    // Cold: only the deferred functions, the loop calling the others.
    CHECK_EQ_INT(want_cold, count_defines(cold_ir, "@tj_cold_"));
    CHECK_EQ_INT(0, count_defines(cold_ir, "@tj_kernel_split("));
    CHECK_EQ_INT(0, count_of(cold_ir, "@tj_ukernel_split("));
    CHECK(count_of(cold_ir, "ptr @tj_cold_") >= 2 * own);
  }
  tj_free_string(a, whole_ir);
  tj_free_string(a, hot_ir);
  tj_free_string(a, cold_ir);

  // Compile times (printed, not asserted).
  tj_x86_jit_stats_t st0, st1;
  tj_x86_object_t whole, hot, cold;
  int32_t n_whole = -1, n_hot = -1, n_cold = -1;
  double ms[3];
  tj_x86_part_t parts[3] = {TJ_X86_PART_ALL, TJ_X86_PART_HOT, TJ_X86_PART_COLD};
  tj_x86_object_t* objs[3] = {&whole, &hot, &cold};
  int32_t* counts[3] = {&n_whole, &n_hot, &n_cold};
  static const char* const kNames[3] = {"whole", "hot", "cold"};
  for (int i = 0; i < 3; ++i) {
    tj_x86_jit_stats(jit, &st0);
    double t0 = now_ms();
    CHECK_OK(tj_x86_jit_compile_part(jit, ks, 1, parts[i], objs[i], counts[i]));
    ms[i] = now_ms() - t0;
    tj_x86_jit_stats(jit, &st1);
    printf(
        "#   %-5s part: %6.2f ms (emit %.2f, O3 %.2f, codegen %.2f), %zu "
        "bytes\n",
        kNames[i], ms[i], (double)(st1.emit_ns - st0.emit_ns) * 1e-6,
        (double)(st1.opt_ns - st0.opt_ns) * 1e-6,
        (double)(st1.codegen_ns - st0.codegen_ns) * 1e-6, objs[i]->size);
  }
  CHECK_EQ_INT(0, n_whole);  // nothing is split off
  CHECK_EQ_INT(want_cold, n_hot);
  CHECK_EQ_INT(want_cold, n_cold);

  tj_x86_module_t* m_whole = load_object(jit, &whole);
  tj_x86_module_t* m_hot = load_object(jit, &hot);
  cold_link_t link;
  memset(&link, 0, sizeof(link));
  link.cold = load_object(jit, &cold);
  link.count = want_cold;
  tj_kir_fn_t f_whole = NULL, f_hot = NULL;
  if (m_whole) CHECK_OK(tj_x86_module_lookup(m_whole, "split", &f_whole));
  if (m_hot) CHECK_OK(tj_x86_module_lookup(m_hot, "split", &f_hot));
  char names[TJ_X86_MAX_COLD + 3][24];
  const char* symbols[TJ_X86_MAX_COLD + 3];
  void* addresses[TJ_X86_MAX_COLD + 3];
  for (int i = 0; i < want_cold; ++i) {
    snprintf(names[i], sizeof(names[i]), "tj_lazy_fp_%d", i);
    symbols[i] = names[i];
  }
  symbols[want_cold] = "tj_lazy_ctx";
  symbols[want_cold + 1] = "tj_lazy_resolve";
  symbols[want_cold + 2] = "tj_lazy_count";
  bool linked = f_whole && f_hot && link.cold;
  if (linked) {
    tj_status_t s = tj_x86_module_lookup_symbols(
        m_hot, symbols, (size_t)want_cold + 3, addresses);
    CHECK_OK(s);
    linked = s == NULL;
  }
  if (linked) {
    for (int i = 0; i < want_cold; ++i) link.slots[i] = addresses[i];
    int64_t count;
    memcpy(&count, addresses[want_cold + 2], sizeof(count));
    CHECK_EQ_INT(want_cold, (int)count);
    cold_link_t* ctx = &link;
    void* (*resolve)(void*, int64_t) = resolve_cold;
    memcpy(addresses[want_cold], &ctx, sizeof(ctx));
    memcpy(addresses[want_cold + 1], &resolve, sizeof(resolve));

    capstone_data_t d;
    capstone_data(&d, MAX_M, N, KK);
    // M = 17 first: the packed path, hot code only.
    static const int64_t ms_order[MAX_M] = {17, 1,  2,  3,  4,  5,  6,  7, 8,
                                            9,  10, 11, 12, 13, 14, 15, 16};
    for (int i = 0; i < MAX_M; ++i) {
      d.m = ms_order[i];
      float* yw = run_capstone(jit, k, f_whole, &d);
      float* yh = run_capstone(jit, k, f_hot, &d);
      CHECK_EQ_INT(i == 0 ? 0 : 1, link.calls);
      CHECK(memcmp(yw, yh, (size_t)(d.m * N) * 4) == 0);
      int bad = 0;
      for (int64_t mm = 0; mm < d.m; ++mm) {
        for (int64_t nn = 0; nn < N; ++nn) {
          double acc = d.b[nn];
          for (int64_t q = 0; q < KK; ++q) {
            acc += (double)d.x[mm * KK + q] * d.w[q * N + nn];
          }
          double want = 0.5 * acc *
                        (1 + tanh(0.7978845608028654 *
                                  (acc + 0.044715 * acc * acc * acc)));
          // f32 sums of KK products (the paths test's bound) and the
          // polynomial tanh.
          double tol = (KK + 1) * 2.4e-7 + 1e-6 * fabs(want);
          bad += !(fabs(want - yh[mm * N + nn]) <= tol);
        }
      }
      if (bad) fprintf(stderr, "M = %lld: %d bad\n", (long long)d.m, bad);
      CHECK_EQ_INT(0, bad);
      free(yw);
      free(yh);
    }
    capstone_free(&d);
  }
  tj_x86_module_destroy(m_hot);  // its trampolines point into the cold part
  tj_x86_module_destroy(link.cold);
  tj_x86_module_destroy(m_whole);
  tj_kir_destroy(k);
  tj_x86_jit_destroy(jit);
}

// y = a @ b in |ydt| for a [M, kk] of |adt| (M at run time, or |m| when
// > 0) and b [kk, n] of |bdt| (stored transposed with |b_trans|); integer
// operands allow the 8-bit GEMM, others the half-precision one.
static tj_kir_t* build_gemm(tj_allocator_t a, const char* name, tj_dtype_t adt,
                            tj_dtype_t bdt, tj_dtype_t ydt, int64_t m,
                            int64_t n, int64_t kk, bool b_trans) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(a, TJ_KIR_GEMM, name, &k));
  if (!k) return NULL;
  if (tj_dtype_is_float(adt)) {
    k->allow_half_gemm = true;
  } else {
    k->allow_int8_gemm = true;
  }
  uint32_t M = tj_kir_add_param(k, "M");
  tj_kir_ival_t dims[2] = {m > 0 ? tj_kir_constant(m) : tj_kir_runtime(M),
                           tj_kir_constant(n)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sa[2] = {tj_kir_constant(kk), tj_kir_constant(1)};
  tj_kir_ival_t sw[2] = {tj_kir_constant(n), tj_kir_constant(1)};
  tj_kir_ival_t sbt[2] = {tj_kir_constant(1), tj_kir_constant(kk)};
  tj_kir_add_buffer(k, "a", adt, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "b", bdt, TJ_KIR_GEMM_B, b_trans ? sbt : sw);
  uint32_t y = tj_kir_add_buffer(k, "y", ydt, TJ_KIR_OUTPUT, sw);
  tj_kir_set_gemm(k, tj_kir_constant(kk), NULL);
  tj_kir_store(k, y, tj_kir_acc(k));
  tj_status_t s = tj_kir_finalize(k);
  if (s) {
    CHECK_OK(s);
    tj_kir_destroy(k);
    return NULL;
  }
  return k;
}

// matmul_i32's kernel: i32 out, b not transposed.
static tj_kir_t* build_qgemm(tj_allocator_t a, const char* name, tj_dtype_t adt,
                             tj_dtype_t bdt, int64_t m, int64_t n, int64_t kk) {
  return build_gemm(a, name, adt, bdt, TJ_DTYPE_I32, m, n, kk, false);
}

// AMX (issue 17) where this host cannot run it: asking for the AMX level
// is UNSUPPORTED on a CPU without the tiles; a compile-only JIT for
// Sapphire Rapids emits the integer GEMM on the tiles (a module that
// LLVM verifies and compiles: ldtilecfg, tileloadd, the tdpb*d of each
// sign pair, tilestored, tilerelease in the microkernel; no vpdpbusd
// there), keeps vpdpbusd for a K that is not a multiple of 64 and for a
// constant M of at most 16, and refuses to load what it compiled.
TEST(amx_offline) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_options_t host_amx = {.isa = TJ_X86_ISA_AMX};
  tj_x86_jit_t* jit = NULL;
  tj_status_t s = tj_x86_jit_create(a, &host_amx, &jit);
  if (s) {
    printf("# no AMX here: %s\n", tj_status_message(s));
    CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED, tj_status_code(s));
    CHECK_CONTAINS(tj_status_message(s), "AMX");
    tj_status_free(s);
  } else {
    printf("# this host runs AMX\n");
    CHECK_EQ_INT(TJ_X86_ISA_AMX, tj_x86_jit_isa(jit));
    tj_x86_jit_destroy(jit);
  }
  tj_x86_jit_options_t off = {.isa = TJ_X86_ISA_AMX, .compile_only = true};
  CHECK_OK(tj_x86_jit_create(a, &off, &jit));
  if (!jit) return;
  CHECK_CONTAINS(tj_x86_jit_target_key(jit), "cpu=sapphirerapids");
  static const struct {
    tj_dtype_t adt, bdt;
    const char* insn;
  } kPairs[4] = {{TJ_DTYPE_U8, TJ_DTYPE_I8, "tdpbusd"},
                 {TJ_DTYPE_I8, TJ_DTYPE_I8, "tdpbssd"},
                 {TJ_DTYPE_U8, TJ_DTYPE_U8, "tdpbuud"},
                 {TJ_DTYPE_I8, TJ_DTYPE_U8, "tdpbsud"}};
  for (int p = 0; p < 4; ++p) {
    tj_kir_t* k =
        build_qgemm(a, "qamx", kPairs[p].adt, kPairs[p].bdt, 0, 100, 4096 + 64);
    if (!k) continue;
    const tj_kir_t* ks[1] = {k};
    char* as = NULL;
    CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
    const char* uk = as ? strstr(as, "tj_ukernel_qamx:") : NULL;
    const char* end = uk ? strstr(uk, ".Lfunc_end") : NULL;
    CHECK(uk != NULL && end != NULL);
    if (uk && end) {
      CHECK_EQ_INT(1, count_in(uk, end, "ldtilecfg"));
      CHECK_EQ_INT(4, count_in(uk, end, kPairs[p].insn));
      // 4 C tiles when accumulating, A and 4 B tiles in the K loop.
      CHECK_EQ_INT(9, count_in(uk, end, "tileloadd"));
      CHECK_EQ_INT(4, count_in(uk, end, "tilestored"));
      CHECK_EQ_INT(1, count_in(uk, end, "tilerelease"));
      CHECK_EQ_INT(0, count_in(uk, end, "vpdpbusd"));
    }
    if (p == 0) {
      tj_x86_object_t obj;
      CHECK_OK(tj_x86_jit_compile(jit, ks, 1, &obj));
      tj_x86_module_t* m = NULL;
      s = tj_x86_jit_load(jit, obj.data, obj.size, &m);
      CHECK(s && tj_status_code(s) == TJ_STATUS_UNSUPPORTED);
      CHECK(m == NULL);
      tj_status_free(s);
      tj_x86_object_deinitialize(&obj);
    }
    tj_free_string(a, as);
    tj_kir_destroy(k);
  }
  // K 100, and a constant M of 16 (decode): the vpdpbusd kernel.
  for (int v = 0; v < 2; ++v) {
    tj_kir_t* k = build_qgemm(a, "qvnni", TJ_DTYPE_U8, TJ_DTYPE_I8, v ? 16 : 0,
                              100, v ? 128 : 100);
    if (!k) continue;
    const tj_kir_t* ks[1] = {k};
    char* as = NULL;
    CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
    if (as) {
      CHECK_EQ_INT(0, count_in(as, as + strlen(as), "tdpbusd"));
      CHECK(count_in(as, as + strlen(as), "vpdpbusd") > 0);
    }
    tj_free_string(a, as);
    tj_kir_destroy(k);
  }
  tj_x86_jit_destroy(jit);
}

// bf16 a and b, f32 out.
static tj_kir_t* build_bf16(tj_allocator_t a, const char* name, int64_t m,
                            int64_t n, int64_t kk, bool b_trans) {
  return build_gemm(a, name, TJ_DTYPE_BF16, TJ_DTYPE_BF16, TJ_DTYPE_F32, m, n,
                    kk, b_trans);
}

// The bf16 GEMM on AMX (issue 17) on any host: the compile-only JIT for
// Sapphire Rapids (amx-bf16 among its features) puts a bf16 GEMM with K a
// multiple of 32 on the tiles (ldtilecfg, tileloadd, tdpbf16ps for the 4
// C tiles, tilestored, tilerelease in the microkernel; no vdpbf16ps
// there), and keeps vdpbf16ps for K 1000 and for a constant M of 16 (B
// transposed, as the packed path then serves that M). An
// AMX target without amx-bf16 (a CPU with the int8 tiles alone, emitted
// directly since no host here is one) keeps vdpbf16ps too.
TEST(amx_bf16_offline) {
  tj_allocator_t a = tj_allocator_system();
  tj_x86_jit_options_t off = {.isa = TJ_X86_ISA_AMX, .compile_only = true};
  tj_x86_jit_t* jit = NULL;
  CHECK_OK(tj_x86_jit_create(a, &off, &jit));
  if (!jit) return;
  CHECK_CONTAINS(tj_x86_jit_target_key(jit), "+amx-bf16");
  tj_kir_t* k = build_bf16(a, "bamx", 0, 100, 1024 + 32, false);
  if (k) {
    const tj_kir_t* ks[1] = {k};
    char* as = NULL;
    CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
    const char* uk = as ? strstr(as, "tj_ukernel_bamx:") : NULL;
    const char* end = uk ? strstr(uk, ".Lfunc_end") : NULL;
    CHECK(uk != NULL && end != NULL);
    if (uk && end) {
      CHECK_EQ_INT(1, count_in(uk, end, "ldtilecfg"));
      CHECK_EQ_INT(4, count_in(uk, end, "tdpbf16ps"));
      CHECK_EQ_INT(9, count_in(uk, end, "tileloadd"));
      CHECK_EQ_INT(4, count_in(uk, end, "tilestored"));
      CHECK_EQ_INT(1, count_in(uk, end, "tilerelease"));
      CHECK_EQ_INT(0, count_in(uk, end, "vdpbf16ps"));
    }
    tj_free_string(a, as);
    tj_kir_destroy(k);
  }
  for (int v = 0; v < 2; ++v) {
    k = build_bf16(a, "bdot", v ? 16 : 0, 100, v ? 1024 : 1000, v != 0);
    if (!k) continue;
    const tj_kir_t* ks[1] = {k};
    char* as = NULL;
    CHECK_OK(tj_x86_jit_emit_asm(jit, ks, 1, &as));
    if (as) {
      CHECK_EQ_INT(0, count_in(as, as + strlen(as), "tdpbf16ps"));
      CHECK(count_in(as, as + strlen(as), "vdpbf16ps") > 0);
    }
    tj_free_string(a, as);
    tj_kir_destroy(k);
  }
  tj_x86_jit_destroy(jit);
  // The int8 tiles without amx-bf16: the emitter's choice, in the IR.
  k = build_bf16(a, "bnoamx", 0, 100, 1024, false);
  if (k) {
    tj_emit_target_t t = {.lanes = 16,
                          .has_fma = true,
                          .has_f16c = true,
                          .avx512 = true,
                          .avx512bf16 = true,
                          .vnni = true,
                          .amx = true};
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("bnoamx", ctx);
    const tj_kir_t* ks[1] = {k};
    CHECK_OK(tj_emit_kernels(mod, &t, ks, 1));
    char* ir = LLVMPrintModuleToString(mod);
    CHECK(strstr(ir, "tdpbf16ps") == NULL);
    CHECK(strstr(ir, "avx512bf16.dpbf16ps") != NULL);
    LLVMDisposeMessage(ir);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    tj_kir_destroy(k);
  }
}

int main(void) {
  RUN_TEST(amx_offline);
  RUN_TEST(amx_bf16_offline);
  RUN_TEST(object_round_trip_and_timings);
  RUN_TEST(bad_objects_and_names);
  RUN_TEST(ir_and_asm);
  RUN_TEST(microkernel_per_isa);
  RUN_TEST(hot_and_cold_parts);
  RUN_TEST(concurrent_compiles);
  RUN_TEST(oom_sweep);
  TEST_MAIN_END();
}
