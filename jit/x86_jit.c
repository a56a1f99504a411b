// The x86 JIT: TargetMachine + LLJIT, cold compile to object bytes, warm
// load of object bytes. See x86_jit.h.
//
// Every loaded object gets a JITDylib of its own, so two modules may define
// the same kernel names (the same kernel loaded twice, e.g. by two
// executables): symbols are looked up in that dylib through the execution
// session. The dylib reflects process symbols (libm for f64 math, memcpy
// and memset that LLVM may introduce). Destroying a module removes its
// code through a resource tracker and keeps the empty dylib for reuse,
// since the C API cannot remove dylibs.

#include "jit/x86_jit.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "jit/emit_llvm.h"
#include "jit/llvm_status.h"

typedef struct dylib_t {
  LLVMOrcJITDylibRef jd;
  struct dylib_t* next;  // free list
} dylib_t;

struct tj_x86_jit_t {
  tj_allocator_t allocator;
  tj_emit_target_t target;
  char* triple;  // LLVM-allocated (LLVMDisposeMessage)
  char cpu[64];
  char* features;           // tj_strdup
  char* key;                // tj_strdup
  LLVMTargetMachineRef tm;  // for passes and emission; guarded by |mutex|
  LLVMOrcLLJITRef lljit;
  LLVMOrcExecutionSessionRef es;
  char global_prefix;
  pthread_mutex_t mutex;  // compiles, the dylib free list
  dylib_t* free_dylibs;
  uint64_t next_dylib;
  _Atomic uint64_t compiles, loads, compile_ns;
};

struct tj_x86_module_t {
  tj_x86_jit_t* jit;
  dylib_t* dylib;
  LLVMOrcResourceTrackerRef tracker;
};

static pthread_once_t g_llvm_once = PTHREAD_ONCE_INIT;
static bool g_llvm_ok;

static void init_llvm(void) {
  // LLVMInitializeNative* return true (!) on failure.
  g_llvm_ok =
      !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter();
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Whether the comma-separated LLVM feature list |features| enables |name|
// ("+name").
static bool has_feature(const char* features, const char* name) {
  size_t n = strlen(name);
  for (const char* p = features; p && *p;) {
    const char* end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n + 1 && p[0] == '+' && memcmp(p + 1, name, n) == 0) {
      return true;
    }
    p = end ? end + 1 : NULL;
  }
  return false;
}

// Picks the target for |isa| on this host.
static tj_status_t choose_target(tj_x86_jit_t* jit, tj_x86_isa_t isa,
                                 const char* host_cpu,
                                 const char* host_features) {
  bool avx512 = has_feature(host_features, "avx512f") &&
                has_feature(host_features, "avx512bw") &&
                has_feature(host_features, "avx512dq") &&
                has_feature(host_features, "avx512vl");
  bool avx2 = has_feature(host_features, "avx2") &&
              has_feature(host_features, "fma") &&
              has_feature(host_features, "f16c");
  bool sse2 = has_feature(host_features, "sse2");
  if (isa == TJ_X86_ISA_HOST) {
    isa = avx512 ? TJ_X86_ISA_AVX512 : avx2 ? TJ_X86_ISA_AVX2 : TJ_X86_ISA_SSE2;
  }
  const char* cpu = NULL;
  const char* features = NULL;
  switch (isa) {
    case TJ_X86_ISA_AVX512:
      if (!avx512) return tj_unsupported("x86 jit: the host has no AVX-512");
      // The host's own CPU name and features: tuning and every extension.
      cpu = host_cpu;
      features = host_features;
      jit->target = (tj_emit_target_t){
          .lanes = 16,
          .has_fma = true,
          .has_f16c = true,
          .avx512 = true,
          .avx512bf16 = has_feature(host_features, "avx512bf16")};
      break;
    case TJ_X86_ISA_X86_64_V4:
      if (!avx512) return tj_unsupported("x86 jit: the host has no AVX-512");
      cpu = "x86-64-v4";
      features = "";
      jit->target = (tj_emit_target_t){
          .lanes = 16, .has_fma = true, .has_f16c = true, .avx512 = true};
      break;
    case TJ_X86_ISA_AVX2:
      if (!avx2) return tj_unsupported("x86 jit: the host has no AVX2+FMA");
      cpu = "x86-64-v3";
      features = "";
      jit->target = (tj_emit_target_t){
          .lanes = 8, .has_fma = true, .has_f16c = true, .avx512 = false};
      break;
    case TJ_X86_ISA_SSE2:
    default:
      if (!sse2) return tj_unsupported("x86 jit: the host has no SSE2");
      cpu = "x86-64";
      features = "";
      jit->target = (tj_emit_target_t){
          .lanes = 4, .has_fma = false, .has_f16c = false, .avx512 = false};
      break;
  }
  snprintf(jit->cpu, sizeof(jit->cpu), "%s", cpu);
  jit->features = tj_strdup(jit->allocator, features);
  return jit->features ? NULL : tj_status_oom();
}

static tj_status_t create_tm(tj_x86_jit_t* jit, LLVMTargetMachineRef* out) {
  *out = NULL;
  LLVMTargetRef target = NULL;
  char* err = NULL;
  // (The call must be sequenced before |err| is read: not as one
  // argument list.)
  LLVMBool failed = LLVMGetTargetFromTriple(jit->triple, &target, &err);
  TJ_RETURN_IF_ERROR(tj_status_from_llvm_message(
      failed, err, "x86 jit: LLVMGetTargetFromTriple"));
  LLVMTargetMachineOptionsRef o = LLVMCreateTargetMachineOptions();
  LLVMTargetMachineOptionsSetCPU(o, jit->cpu);
  LLVMTargetMachineOptionsSetFeatures(o, jit->features);
  LLVMTargetMachineOptionsSetCodeGenOptLevel(o, LLVMCodeGenLevelAggressive);
  LLVMTargetMachineOptionsSetRelocMode(o, LLVMRelocPIC);
  LLVMTargetMachineOptionsSetCodeModel(o, LLVMCodeModelSmall);
  *out = LLVMCreateTargetMachineWithOptions(target, jit->triple, o);
  LLVMDisposeTargetMachineOptions(o);
  return tj_status_from_llvm_null(*out, "x86 jit: creating a TargetMachine");
}

tj_status_t tj_x86_jit_create(tj_allocator_t allocator,
                              const tj_x86_jit_options_t* options,
                              tj_x86_jit_t** out_jit) {
  *out_jit = NULL;
  pthread_once(&g_llvm_once, init_llvm);
  if (!g_llvm_ok) {
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "x86 jit: LLVM's native target did not initialize");
  }
  tj_x86_jit_t* jit = tj_calloc(allocator, 1, sizeof(*jit));
  if (!jit) return tj_status_oom();
  jit->allocator = allocator;
  pthread_mutex_init(&jit->mutex, NULL);
  jit->triple = LLVMGetDefaultTargetTriple();
  char* host_cpu = LLVMGetHostCPUName();
  char* host_features = LLVMGetHostCPUFeatures();
  tj_status_t s = choose_target(jit, options ? options->isa : TJ_X86_ISA_HOST,
                                host_cpu, host_features);
  LLVMDisposeMessage(host_cpu);
  LLVMDisposeMessage(host_features);
  if (!s) s = create_tm(jit, &jit->tm);
  if (!s) {
    // The LLJIT's own TargetMachine only matters for IR added to it, which
    // we never do; it is built like ours for consistency. The builder
    // consumes it, and LLVMOrcCreateLLJIT consumes the builder.
    LLVMTargetMachineRef tm2 = NULL;
    s = create_tm(jit, &tm2);
    if (!s) {
      LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
      LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
          builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm2));
      s = tj_status_from_llvm_error(LLVMOrcCreateLLJIT(&jit->lljit, builder),
                                    "x86 jit: LLVMOrcCreateLLJIT");
    }
  }
  if (!s) {
    jit->es = LLVMOrcLLJITGetExecutionSession(jit->lljit);
    jit->global_prefix = LLVMOrcLLJITGetGlobalPrefix(jit->lljit);
    unsigned major, minor, patch;
    LLVMGetVersion(&major, &minor, &patch);
    char key[1024];
    snprintf(key, sizeof(key),
             "llvm=%u.%u.%u;triple=%s;cpu=%s;features=%s;opt=O3;reloc=pic;"
             "code_model=small;lanes=%d",
             major, minor, patch, jit->triple, jit->cpu, jit->features,
             jit->target.lanes);
    jit->key = tj_strdup(allocator, key);
    if (!jit->key) s = tj_status_oom();
  }
  if (s) {
    tj_x86_jit_destroy(jit);
    return s;
  }
  *out_jit = jit;
  return NULL;
}

void tj_x86_jit_destroy(tj_x86_jit_t* jit) {
  if (!jit) return;
  if (jit->lljit) {
    // Nothing useful can be done with a disposal error at teardown.
    LLVMErrorRef err = LLVMOrcDisposeLLJIT(jit->lljit);
    if (err) LLVMConsumeError(err);
  }
  for (dylib_t* d = jit->free_dylibs; d;) {
    dylib_t* next = d->next;
    tj_free(jit->allocator, d, sizeof(*d));
    d = next;
  }
  if (jit->tm) LLVMDisposeTargetMachine(jit->tm);
  if (jit->triple) LLVMDisposeMessage(jit->triple);
  tj_free_string(jit->allocator, jit->features);
  tj_free_string(jit->allocator, jit->key);
  pthread_mutex_destroy(&jit->mutex);
  tj_free(jit->allocator, jit, sizeof(*jit));
}

int32_t tj_x86_jit_lanes(const tj_x86_jit_t* jit) { return jit->target.lanes; }

const char* tj_x86_jit_target_key(const tj_x86_jit_t* jit) { return jit->key; }

void tj_x86_jit_stats(const tj_x86_jit_t* jit, tj_x86_jit_stats_t* out) {
  out->compiles = atomic_load(&((tj_x86_jit_t*)jit)->compiles);
  out->loads = atomic_load(&((tj_x86_jit_t*)jit)->loads);
  out->compile_ns = atomic_load(&((tj_x86_jit_t*)jit)->compile_ns);
}

//===--- compiling ---===//

void tj_x86_object_deinitialize(tj_x86_object_t* object) {
  if (object->data) tj_free(object->allocator, object->data, object->size);
  object->data = NULL;
  object->size = 0;
}

typedef enum stage_e {
  STAGE_IR,
  STAGE_OPT_IR,
  STAGE_ASM,
  STAGE_OBJECT
} stage_t;

// Builds the module for |kernels| and carries it to |stage|; the result
// goes to |*out_data| / |*out_size| (allocated from the jit's allocator;
// text is NUL-terminated, the size excluding the NUL).
static tj_status_t build(tj_x86_jit_t* jit, const tj_kir_t* const* kernels,
                         uint32_t n, stage_t stage, uint8_t** out_data,
                         size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (!kernels[i] || !kernels[i]->finalized) {
      return tj_invalid("x86 jit: kernel %u is not finalized", i);
    }
  }
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("tj_kernels", ctx);
  LLVMSetTarget(mod, jit->triple);
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(jit->tm);
  LLVMSetModuleDataLayout(mod, layout);
  LLVMDisposeTargetData(layout);
  tj_status_t s = tj_emit_kernels(mod, &jit->target, kernels, n);
  if (!s) {
    char* msg = NULL;
    LLVMBool broken = LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg);
    s = tj_status_from_llvm_message(
        broken, msg,
        "x86 jit: the emitted module is malformed (a libtensorjit bug)");
    if (s) {
      tj_status_t internal =
          tj_status_make(TJ_STATUS_INTERNAL, "%s", tj_status_message(s));
      tj_status_free(s);
      s = internal;
    }
  }
  if (!s && stage != STAGE_IR) {
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    s = tj_status_from_llvm_error(
        LLVMRunPasses(mod, "default<O3>", jit->tm, opts),
        "x86 jit: LLVMRunPasses(default<O3>)");
    LLVMDisposePassBuilderOptions(opts);
  }
  uint8_t* data = NULL;
  size_t size = 0;
  if (!s && (stage == STAGE_IR || stage == STAGE_OPT_IR)) {
    char* text = LLVMPrintModuleToString(mod);
    size = strlen(text);
    data = tj_alloc(jit->allocator, size + 1);
    if (data) {
      memcpy(data, text, size + 1);
    } else {
      s = tj_status_oom();
    }
    LLVMDisposeMessage(text);
  } else if (!s) {
    LLVMMemoryBufferRef buf = NULL;
    char* err = NULL;
    LLVMBool failed = LLVMTargetMachineEmitToMemoryBuffer(
        jit->tm, mod, stage == STAGE_ASM ? LLVMAssemblyFile : LLVMObjectFile,
        &err, &buf);
    s = tj_status_from_llvm_message(failed, err, "x86 jit: emitting code");
    if (!s) {
      // Assembly is text: NUL-terminate it; objects are exactly their bytes.
      size_t n_bytes = LLVMGetBufferSize(buf);
      size_t extra = stage == STAGE_ASM ? 1 : 0;
      data = n_bytes ? tj_alloc(jit->allocator, n_bytes + extra) : NULL;
      if (data) {
        memcpy(data, LLVMGetBufferStart(buf), n_bytes);
        if (extra) data[n_bytes] = 0;
        size = n_bytes;
      } else {
        s = n_bytes ? tj_status_oom()
                    : tj_internal("x86 jit: LLVM emitted no code");
      }
      LLVMDisposeMemoryBuffer(buf);
    }
  }
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  if (s) return s;
  *out_data = data;
  *out_size = size;
  return NULL;
}

static tj_status_t locked_build(tj_x86_jit_t* jit,
                                const tj_kir_t* const* kernels, uint32_t n,
                                stage_t stage, uint8_t** data, size_t* size) {
  pthread_mutex_lock(&jit->mutex);
  uint64_t t0 = now_ns();
  tj_status_t s = build(jit, kernels, n, stage, data, size);
  if (stage == STAGE_OBJECT) {
    atomic_fetch_add(&jit->compiles, 1);
    atomic_fetch_add(&jit->compile_ns, now_ns() - t0);
  }
  pthread_mutex_unlock(&jit->mutex);
  return s;
}

tj_status_t tj_x86_jit_compile(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, tj_x86_object_t* object) {
  memset(object, 0, sizeof(*object));
  object->allocator = jit->allocator;
  uint8_t* data;
  size_t size;
  TJ_RETURN_IF_ERROR(
      locked_build(jit, kernels, num_kernels, STAGE_OBJECT, &data, &size));
  object->data = data;
  object->size = size;
  return NULL;
}

static tj_status_t emit_text(tj_x86_jit_t* jit, const tj_kir_t* const* kernels,
                             uint32_t n, stage_t stage, char** out_text) {
  *out_text = NULL;
  uint8_t* data;
  size_t size;
  TJ_RETURN_IF_ERROR(locked_build(jit, kernels, n, stage, &data, &size));
  // Both text stages allocate strlen + 1 bytes, which tj_free_string frees.
  *out_text = (char*)data;
  return NULL;
}

tj_status_t tj_x86_jit_emit_ir(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, bool optimized,
                               char** out_text) {
  return emit_text(jit, kernels, num_kernels,
                   optimized ? STAGE_OPT_IR : STAGE_IR, out_text);
}

tj_status_t tj_x86_jit_emit_asm(tj_x86_jit_t* jit,
                                const tj_kir_t* const* kernels,
                                uint32_t num_kernels, char** out_text) {
  return emit_text(jit, kernels, num_kernels, STAGE_ASM, out_text);
}

//===--- loading ---===//

static tj_status_t take_dylib(tj_x86_jit_t* jit, dylib_t** out) {
  *out = NULL;
  pthread_mutex_lock(&jit->mutex);
  dylib_t* d = jit->free_dylibs;
  if (d) {
    jit->free_dylibs = d->next;
    pthread_mutex_unlock(&jit->mutex);
    *out = d;
    return NULL;
  }
  uint64_t id = jit->next_dylib++;
  pthread_mutex_unlock(&jit->mutex);
  d = tj_calloc(jit->allocator, 1, sizeof(*d));
  if (!d) return tj_status_oom();
  char name[64];
  snprintf(name, sizeof(name), "tj_module_%llu", (unsigned long long)id);
  d->jd = LLVMOrcExecutionSessionCreateBareJITDylib(jit->es, name);
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  tj_status_t s = tj_status_from_llvm_error(
      LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
          &gen, jit->global_prefix, NULL, NULL),
      "x86 jit: process symbol generator");
  if (s) {
    // The dylib stays in the session (it cannot be removed) but is empty.
    tj_free(jit->allocator, d, sizeof(*d));
    return s;
  }
  LLVMOrcJITDylibAddGenerator(d->jd, gen);  // takes |gen|
  *out = d;
  return NULL;
}

static void give_dylib(tj_x86_jit_t* jit, dylib_t* d) {
  pthread_mutex_lock(&jit->mutex);
  d->next = jit->free_dylibs;
  jit->free_dylibs = d;
  pthread_mutex_unlock(&jit->mutex);
}

tj_status_t tj_x86_jit_load(tj_x86_jit_t* jit, const void* data, size_t size,
                            tj_x86_module_t** out_module) {
  *out_module = NULL;
  if (!data || size < 4 || memcmp(data, "\177ELF", 4) != 0) {
    return tj_invalid("x86 jit: load: not an ELF object (%zu bytes)", size);
  }
  tj_x86_module_t* m = tj_calloc(jit->allocator, 1, sizeof(*m));
  if (!m) return tj_status_oom();
  m->jit = jit;
  tj_status_t s = take_dylib(jit, &m->dylib);
  if (s) {
    tj_free(jit->allocator, m, sizeof(*m));
    return s;
  }
  m->tracker = LLVMOrcJITDylibCreateResourceTracker(m->dylib->jd);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(
      (const char*)data, size, "tj_object");
  s = tj_status_from_llvm_error(LLVMOrcLLJITAddObjectFileWithRT(
                                    jit->lljit, m->tracker, buf),  // takes buf
                                "x86 jit: adding an object");
  if (s) {
    tj_x86_module_destroy(m);
    return s;
  }
  atomic_fetch_add(&jit->loads, 1);
  *out_module = m;
  return NULL;
}

typedef struct lookup_t {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  bool done;
  LLVMErrorRef err;
  LLVMOrcExecutorAddress address;
} lookup_t;

static void on_lookup(LLVMErrorRef err, LLVMOrcCSymbolMapPairs result,
                      size_t num_pairs, void* ctx) {
  lookup_t* l = ctx;
  pthread_mutex_lock(&l->mutex);
  l->err = err;
  if (!err && num_pairs == 1) l->address = result[0].Sym.Address;
  l->done = true;
  pthread_cond_signal(&l->cond);
  pthread_mutex_unlock(&l->mutex);
}

tj_status_t tj_x86_module_lookup(tj_x86_module_t* module,
                                 const char* kernel_name, tj_kir_fn_t* out_fn) {
  *out_fn = NULL;
  tj_x86_jit_t* jit = module->jit;
  char name[300];
  int n = snprintf(name, sizeof(name), "%s%s%s",
                   jit->global_prefix ? (char[]){jit->global_prefix, 0} : "",
                   "tj_kernel_", kernel_name);
  if (n < 0 || (size_t)n >= sizeof(name)) {
    return tj_invalid("x86 jit: kernel name too long: %s", kernel_name);
  }
  lookup_t l;
  memset(&l, 0, sizeof(l));
  pthread_mutex_init(&l.mutex, NULL);
  pthread_cond_init(&l.cond, NULL);
  LLVMOrcCJITDylibSearchOrderElement order = {
      module->dylib->jd, LLVMOrcJITDylibLookupFlagsMatchAllSymbols};
  LLVMOrcCLookupSetElement sym = {LLVMOrcExecutionSessionIntern(jit->es, name),
                                  LLVMOrcSymbolLookupFlagsRequiredSymbol};
  // The lookup takes the interned name; it may complete on another thread
  // (a concurrent dispatcher), so wait for the callback.
  LLVMOrcExecutionSessionLookup(jit->es, LLVMOrcLookupKindStatic, &order, 1,
                                &sym, 1, on_lookup, &l);
  pthread_mutex_lock(&l.mutex);
  while (!l.done) pthread_cond_wait(&l.cond, &l.mutex);
  pthread_mutex_unlock(&l.mutex);
  pthread_cond_destroy(&l.cond);
  pthread_mutex_destroy(&l.mutex);
  char what[320];
  snprintf(what, sizeof(what), "x86 jit: looking up kernel @%s", kernel_name);
  TJ_RETURN_IF_ERROR(tj_status_from_llvm_error(l.err, what));
  if (!l.address) {
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "%s: no address", what);
  }
  // Object code addresses become function pointers here and nowhere else.
  tj_kir_fn_t fn;
  uintptr_t addr = (uintptr_t)l.address;
  memcpy(&fn, &addr, sizeof(fn));
  *out_fn = fn;
  return NULL;
}

void tj_x86_module_destroy(tj_x86_module_t* module) {
  if (!module) return;
  tj_x86_jit_t* jit = module->jit;
  bool reusable = true;
  if (module->tracker) {
    LLVMErrorRef err = LLVMOrcResourceTrackerRemove(module->tracker);
    if (err) {
      // The dylib may still hold code: never hand it out again.
      LLVMConsumeError(err);
      reusable = false;
    }
    LLVMOrcReleaseResourceTracker(module->tracker);
  }
  if (module->dylib) {
    if (reusable) {
      give_dylib(jit, module->dylib);
    } else {
      tj_free(jit->allocator, module->dylib, sizeof(*module->dylib));
    }
  }
  tj_free(jit->allocator, module, sizeof(*module));
}
