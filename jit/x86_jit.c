// The x86 JIT: TargetMachine + LLJIT, cold compile to object bytes, warm
// load of object bytes. See x86_jit.h.
//
// Every loaded object gets a JITDylib of its own, so two modules may define
// the same kernel names (the same kernel loaded twice, e.g. by two
// executables): symbols are looked up in that dylib through the execution
// session. The dylib reflects process symbols (libm for f64 math, memcpy
// and memset that LLVM may introduce). Destroying a module removes its
// code through a resource tracker and keeps the empty dylib for reuse,
// since the C API cannot remove dylibs: a host that compiles and drops
// executables for hours holds as many dylibs as it ever had kernel sets
// loaded at once, and the code memory of dropped ones is returned.
//
// One JIT serves every executable of a context (x86_backend.h), so
// compiles from several threads must not queue behind one another: each
// build takes a TargetMachine of its own from a small free list (a
// TargetMachine is not thread-safe; creating one costs ~0.1 ms; none is
// made before the first build, since a warm start needs none) and its own
// LLVMContext. Adding objects, lookups and removals go through ORC's
// ExecutionSession, which is thread-safe.

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
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "jit/emit_llvm.h"
#include "jit/llvm_guard.h"
#include "jit/llvm_status.h"

typedef struct dylib_t {
  LLVMOrcJITDylibRef jd;
  struct dylib_t* next;  // free list
} dylib_t;

// TargetMachines kept for the next builds; more concurrent builds than
// this create and dispose extra ones.
#define SPARE_TMS 4

struct tj_x86_jit_t {
  tj_allocator_t allocator;
  tj_emit_target_t target;
  tj_x86_isa_t isa;   // never HOST
  bool compile_only;  // tj_x86_jit_options_t: loads are refused
  char* triple;       // LLVM-allocated (LLVMDisposeMessage)
  char cpu[64];
  char* features;  // tj_strdup
  char* key;       // tj_strdup
  LLVMOrcLLJITRef lljit;
  LLVMOrcExecutionSessionRef es;
  char global_prefix;
  pthread_mutex_t mutex;  // the free lists below
  dylib_t* free_dylibs;
  uint64_t next_dylib;
  LLVMTargetMachineRef spare_tms[SPARE_TMS];
  int32_t num_spare_tms;
  _Atomic uint64_t compiles, loads, compile_ns, live_modules;
  _Atomic uint64_t emit_ns, opt_ns, codegen_ns;  // object builds only
};

struct tj_x86_module_t {
  tj_x86_jit_t* jit;
  dylib_t* dylib;
  LLVMOrcResourceTrackerRef tracker;
  bool counted;  // in |jit->live_modules|
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

// AMX (issue 17): Linux keeps the tile data state (XSTATE component 18,
// XFEATURE_XTILEDATA) off until a process asks for it, and the first tile
// instruction without that permission is fatal (SIGILL). The request is
// made once per process, and only by a JIT for the HOST or AMX level on a
// CPU with AMX; it holds for every thread. It enlarges this process's
// signal frames by the 8 KiB of tile data: the kernel refuses it when an
// alternate signal stack already installed is too small, and then the
// GEMMs stay on VNNI (TJ_X86_ISA=avx512 keeps a host from asking at all).
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx_ok;

static void request_amx(void) {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
  enum { kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18 };
  g_amx_ok =
      syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#endif
}

// LLVM features that switch AMX off after the host's list (the last
// setting of a feature wins): the AVX512 level without tiles.
static const char kNoAmx[] =
    ",-amx-tile,-amx-int8,-amx-bf16,-amx-fp16,-amx-complex";

// Picks the target for |isa| on this host (|compile_only|: for a CPU that
// has the level, see tj_x86_jit_options_t).
static tj_status_t choose_target(tj_x86_jit_t* jit, tj_x86_isa_t isa,
                                 bool compile_only, const char* host_cpu,
                                 const char* host_features) {
  if (compile_only && isa == TJ_X86_ISA_AMX) {
    jit->isa = isa;
    snprintf(jit->cpu, sizeof(jit->cpu), "sapphirerapids");
    jit->features = tj_strdup(jit->allocator, "+amx-tile,+amx-int8,+amx-bf16");
    jit->target = (tj_emit_target_t){.lanes = 16,
                                     .has_fma = true,
                                     .has_f16c = true,
                                     .avx512 = true,
                                     .avx512bf16 = true,
                                     .vnni = true,
                                     .amx = true,
                                     .amx_bf16 = true};
    return jit->features ? NULL : tj_status_oom();
  }
  bool avx512 = has_feature(host_features, "avx512f") &&
                has_feature(host_features, "avx512bw") &&
                has_feature(host_features, "avx512dq") &&
                has_feature(host_features, "avx512vl");
  bool avx2 = has_feature(host_features, "avx2") &&
              has_feature(host_features, "fma") &&
              has_feature(host_features, "f16c");
  bool sse2 = has_feature(host_features, "sse2");
  bool amx = avx512 && has_feature(host_features, "amx-tile") &&
             has_feature(host_features, "amx-int8");
  if (amx && (isa == TJ_X86_ISA_HOST || isa == TJ_X86_ISA_AMX)) {
    pthread_once(&g_amx_once, request_amx);
    amx = g_amx_ok;
  }
  if (isa == TJ_X86_ISA_HOST) {
    isa = amx      ? TJ_X86_ISA_AMX
          : avx512 ? TJ_X86_ISA_AVX512
          : avx2   ? TJ_X86_ISA_AVX2
                   : TJ_X86_ISA_SSE2;
  }
  const char* cpu = NULL;
  const char* features = NULL;
  bool strip_amx = false;
  jit->isa = isa;
  switch (isa) {
    case TJ_X86_ISA_AMX:
      if (!amx) {
        return tj_unsupported(
            "x86 jit: the host has no AMX int8 tiles (amx-tile, amx-int8 "
            "and AVX-512), or Linux refused the tile data permission");
      }
      cpu = host_cpu;
      features = host_features;
      jit->target = (tj_emit_target_t){
          .lanes = 16,
          .has_fma = true,
          .has_f16c = true,
          .avx512 = true,
          .avx512bf16 = has_feature(host_features, "avx512bf16"),
          .vnni = has_feature(host_features, "avx512vnni"),
          .amx = true,
          // A CPU may have the int8 tiles alone: bf16 stays on vdpbf16ps
          // there.
          .amx_bf16 = has_feature(host_features, "amx-bf16")};
      break;
    case TJ_X86_ISA_AVX512:
      if (!avx512) return tj_unsupported("x86 jit: the host has no AVX-512");
      // The host's own CPU name and features: tuning and every extension
      // but AMX (the AMX level's).
      cpu = host_cpu;
      features = host_features;
      strip_amx = has_feature(host_features, "amx-tile");
      jit->target = (tj_emit_target_t){
          .lanes = 16,
          .has_fma = true,
          .has_f16c = true,
          .avx512 = true,
          .avx512bf16 = has_feature(host_features, "avx512bf16"),
          .vnni = has_feature(host_features, "avx512vnni")};
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
      // qgemm (issue 17): AVX-VNNI (VEX vpdpbusd) where the host has it.
      features = has_feature(host_features, "avxvnni") ? "+avxvnni" : "";
      jit->target =
          (tj_emit_target_t){.lanes = 8,
                             .has_fma = true,
                             .has_f16c = true,
                             .avx512 = false,
                             .vnni = has_feature(host_features, "avxvnni")};
      break;
    case TJ_X86_ISA_X86_64_V3:
      if (!avx2) return tj_unsupported("x86 jit: the host has no AVX2+FMA");
      cpu = "x86-64-v3";
      features = "";
      jit->target = (tj_emit_target_t){
          .lanes = 8, .has_fma = true, .has_f16c = true, .avx512 = false};
      break;
    case TJ_X86_ISA_SSE2:
    default:
      jit->isa = TJ_X86_ISA_SSE2;
      if (!sse2) return tj_unsupported("x86 jit: the host has no SSE2");
      cpu = "x86-64";
      features = "";
      jit->target = (tj_emit_target_t){
          .lanes = 4, .has_fma = false, .has_f16c = false, .avx512 = false};
      break;
  }
  snprintf(jit->cpu, sizeof(jit->cpu), "%s", cpu);
  if (strip_amx) {
    size_t n = strlen(features), extra = sizeof(kNoAmx);
    jit->features = tj_alloc(jit->allocator, n + extra);
    if (jit->features) {
      memcpy(jit->features, features, n);
      memcpy(jit->features + n, kNoAmx, extra);
    }
  } else {
    jit->features = tj_strdup(jit->allocator, features);
  }
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
  jit->compile_only = options && options->compile_only;
  tj_status_t s = choose_target(jit, options ? options->isa : TJ_X86_ISA_HOST,
                                jit->compile_only, host_cpu, host_features);
  LLVMDisposeMessage(host_cpu);
  LLVMDisposeMessage(host_features);
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
    char key[2048];
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
  for (int32_t i = 0; i < jit->num_spare_tms; ++i) {
    LLVMDisposeTargetMachine(jit->spare_tms[i]);
  }
  if (jit->triple) LLVMDisposeMessage(jit->triple);
  tj_free_string(jit->allocator, jit->features);
  tj_free_string(jit->allocator, jit->key);
  pthread_mutex_destroy(&jit->mutex);
  tj_free(jit->allocator, jit, sizeof(*jit));
}

static const char* const kIsaNames[] = {
    [TJ_X86_ISA_HOST] = "host",           [TJ_X86_ISA_AVX512] = "avx512",
    [TJ_X86_ISA_AVX2] = "avx2",           [TJ_X86_ISA_SSE2] = "sse2",
    [TJ_X86_ISA_X86_64_V4] = "x86-64-v4", [TJ_X86_ISA_AMX] = "amx",
    [TJ_X86_ISA_X86_64_V3] = "x86-64-v3"};

bool tj_x86_isa_from_name(const char* name, tj_x86_isa_t* out) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kIsaNames); ++i) {
    if (name && strcmp(name, kIsaNames[i]) == 0) {
      *out = (tj_x86_isa_t)i;
      return true;
    }
  }
  return false;
}

const char* tj_x86_isa_name(tj_x86_isa_t isa) {
  return (size_t)isa < TJ_ARRAY_SIZE(kIsaNames) ? kIsaNames[isa] : "?";
}

tj_x86_isa_t tj_x86_jit_isa(const tj_x86_jit_t* jit) { return jit->isa; }

int32_t tj_x86_jit_lanes(const tj_x86_jit_t* jit) { return jit->target.lanes; }

bool tj_x86_jit_gemm_prepacks_b(const tj_x86_jit_t* jit, const tj_kir_t* k) {
  return tj_emit_gemm_prepacks_b(&jit->target, k);
}

const char* tj_x86_jit_target_key(const tj_x86_jit_t* jit) { return jit->key; }

void tj_x86_jit_stats(const tj_x86_jit_t* jit, tj_x86_jit_stats_t* out) {
  out->compiles = atomic_load(&((tj_x86_jit_t*)jit)->compiles);
  out->loads = atomic_load(&((tj_x86_jit_t*)jit)->loads);
  out->compile_ns = atomic_load(&((tj_x86_jit_t*)jit)->compile_ns);
  out->live_modules = atomic_load(&((tj_x86_jit_t*)jit)->live_modules);
  out->emit_ns = atomic_load(&((tj_x86_jit_t*)jit)->emit_ns);
  out->opt_ns = atomic_load(&((tj_x86_jit_t*)jit)->opt_ns);
  out->codegen_ns = atomic_load(&((tj_x86_jit_t*)jit)->codegen_ns);
  pthread_mutex_lock(&((tj_x86_jit_t*)jit)->mutex);
  out->dylibs = jit->next_dylib;
  pthread_mutex_unlock(&((tj_x86_jit_t*)jit)->mutex);
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

//===--- hot and cold parts ---===//

// Whether |fn| may go to the cold part: an internal void function that an
// emitter marked with the string attribute "tj-deferrable" (jit/
// emit_gemm.c: the small-M path and its microkernels). split_module also
// requires that it names no function with a body outside the cold part.
static bool deferrable(LLVMValueRef fn) {
  if (LLVMIsDeclaration(fn) || LLVMGetLinkage(fn) != LLVMInternalLinkage) {
    return false;
  }
  LLVMTypeRef fty = LLVMGlobalGetValueType(fn);
  if (LLVMGetTypeKind(LLVMGetReturnType(fty)) != LLVMVoidTypeKind ||
      LLVMIsFunctionVarArg(fty) || LLVMCountParams(fn) > 32) {
    return false;
  }
  static const char kAttr[] = "tj-deferrable";
  return LLVMGetStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, kAttr,
                                       sizeof(kAttr) - 1) != NULL;
}

static bool in_set(LLVMValueRef fn, LLVMValueRef const* set, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (set[i] == fn) return true;
  }
  return false;
}

// Whether operand |v| names a function with a body outside |set|, itself
// or inside a constant expression (|depth| levels).
static bool names_outside(LLVMValueRef v, LLVMValueRef const* set, int32_t n,
                          int depth) {
  if (LLVMIsAFunction(v)) return !LLVMIsDeclaration(v) && !in_set(v, set, n);
  if (depth > 0 && LLVMIsAConstantExpr(v)) {
    for (int i = 0; i < LLVMGetNumOperands(v); ++i) {
      if (names_outside(LLVMGetOperand(v, i), set, n, depth - 1)) return true;
    }
  }
  return false;
}

// Whether every function that |fn| names (calls, or takes the address of:
// the small-M path calls its microkernels through a select of them) is a
// declaration or in |set|: then |fn| links in a module of |set| alone.
static bool names_only(LLVMValueRef fn, LLVMValueRef const* set, int32_t n) {
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;
         in = LLVMGetNextInstruction(in)) {
      for (int i = 0; i < LLVMGetNumOperands(in); ++i) {
        if (names_outside(LLVMGetOperand(in, i), set, n, 4)) return false;
      }
    }
  }
  return true;
}

// Turns |fn| into a declaration (external: a declaration cannot be
// internal). Uses of its values are replaced first, so nothing dangles.
static void drop_body(LLVMValueRef fn) {
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;
         in = LLVMGetNextInstruction(in)) {
      LLVMTypeRef t = LLVMTypeOf(in);
      if (LLVMGetTypeKind(t) != LLVMVoidTypeKind) {
        LLVMReplaceAllUsesWith(in, LLVMGetPoison(t));
      }
    }
  }
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef in; (in = LLVMGetFirstInstruction(bb)) != NULL;) {
      LLVMInstructionEraseFromParent(in);
    }
  }
  for (LLVMBasicBlockRef bb; (bb = LLVMGetFirstBasicBlock(fn)) != NULL;) {
    LLVMDeleteBasicBlock(bb);
  }
  LLVMSetLinkage(fn, LLVMExternalLinkage);
}

static LLVMValueRef add_global(LLVMModuleRef mod, LLVMTypeRef type,
                               const char* name, LLVMValueRef init,
                               bool constant) {
  LLVMValueRef g = LLVMAddGlobal(mod, type, name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, constant);
  LLVMSetLinkage(g, LLVMExternalLinkage);
  LLVMSetAlignment(g, 8);
  return g;
}

// @tj_lazy_fp_<index>, null until the cold part is loaded.
static LLVMValueRef add_slot(LLVMModuleRef mod, int32_t index) {
  LLVMTypeRef ptr = LLVMPointerTypeInContext(LLVMGetModuleContext(mod), 0);
  char name[64];
  snprintf(name, sizeof(name), "tj_lazy_fp_%d", (int)index);
  return add_global(mod, ptr, name, LLVMConstNull(ptr), false);
}

// The body of deferred function |fn| (number |index|) in the hot part:
//   fp = atomic load acquire @tj_lazy_fp_<index>
//   if (!fp) fp = (*@tj_lazy_resolve)(@tj_lazy_ctx, index); if (!fp) return
//   fp(args...)
static void emit_trampoline(LLVMModuleRef mod, LLVMValueRef fn, int32_t index) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(ctx, 0);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMValueRef slot = add_slot(mod, index);
  LLVMValueRef resolve = LLVMGetNamedGlobal(mod, "tj_lazy_resolve");
  LLVMValueRef lazy_ctx = LLVMGetNamedGlobal(mod, "tj_lazy_ctx");
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(ctx, fn, "entry");
  LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(ctx, fn, "resolve");
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(ctx, fn, "call");
  LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(ctx, fn, "out");
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef fp = LLVMBuildLoad2(b, ptr, slot, "fp");
  LLVMSetOrdering(fp, LLVMAtomicOrderingAcquire);
  LLVMSetAlignment(fp, 8);
  LLVMBuildCondBr(b, LLVMBuildIsNull(b, fp, ""), slow, go);
  LLVMPositionBuilderAtEnd(b, slow);
  LLVMTypeRef rargs[2] = {ptr, i64};
  LLVMTypeRef rty = LLVMFunctionType(ptr, rargs, 2, 0);
  LLVMValueRef call_args[2] = {LLVMBuildLoad2(b, ptr, lazy_ctx, ""),
                               LLVMConstInt(i64, (unsigned long long)index, 0)};
  LLVMValueRef r = LLVMBuildCall2(b, rty, LLVMBuildLoad2(b, ptr, resolve, ""),
                                  call_args, 2, "fp");
  LLVMBuildCondBr(b, LLVMBuildIsNull(b, r, ""), out, go);
  LLVMPositionBuilderAtEnd(b, go);
  LLVMValueRef f = LLVMBuildPhi(b, ptr, "f");
  LLVMValueRef in_vals[2] = {fp, r};
  LLVMBasicBlockRef in_blocks[2] = {entry, slow};
  LLVMAddIncoming(f, in_vals, in_blocks, 2);
  unsigned nargs = LLVMCountParams(fn);
  LLVMValueRef args[32];
  for (unsigned i = 0; i < nargs && i < 32; ++i) args[i] = LLVMGetParam(fn, i);
  LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), f, args, nargs, "");
  LLVMBuildBr(b, out);
  LLVMPositionBuilderAtEnd(b, out);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
}

// Splits |mod| (see x86_jit.h): PART_HOT keeps everything but replaces the
// body of each deferrable function that hot code calls with a trampoline,
// deletes the ones only cold code calls (the small-M path's microkernels),
// and adds @tj_lazy_count and every slot; PART_COLD keeps only the
// deferrable functions, renamed tj_cold_<i>. |*out_num_cold| is their
// number.
static void split_module(LLVMModuleRef mod, tj_x86_part_t part,
                         int32_t* out_num_cold) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(ctx, 0);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMValueRef cold[TJ_X86_MAX_COLD];
  int32_t n = 0;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn;
       fn = LLVMGetNextFunction(fn)) {
    if (n < TJ_X86_MAX_COLD && deferrable(fn)) cold[n++] = fn;
  }
  // Drop candidates that name functions staying hot, until none does (the
  // cold part is linked alone).
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < n; ++i) {
      if (names_only(cold[i], cold, n)) continue;
      cold[i] = cold[--n];
      changed = true;
      break;
    }
  }
  *out_num_cold = n;
  if (part == TJ_X86_PART_HOT) {
    add_global(mod, i64, "tj_lazy_count",
               LLVMConstInt(i64, (unsigned long long)n, 0), true);
    if (n == 0) return;
    add_global(mod, ptr, "tj_lazy_resolve", LLVMConstNull(ptr), false);
    add_global(mod, ptr, "tj_lazy_ctx", LLVMConstNull(ptr), false);
    // All bodies first: a call between two deferred functions is then gone,
    // and a function left without uses needs no trampoline (O3 would
    // delete it; not emitting it at all is cheaper).
    for (int32_t i = 0; i < n; ++i) drop_body(cold[i]);
    for (int32_t i = 0; i < n; ++i) {
      if (LLVMGetFirstUse(cold[i])) {
        emit_trampoline(mod, cold[i], i);
      } else {
        add_slot(mod, i);  // still looked up by the loader
        LLVMDeleteFunction(cold[i]);
      }
    }
    return;
  }
  // PART_COLD: every other function with a body goes.
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn;) {
    LLVMValueRef next = LLVMGetNextFunction(fn);
    bool keep = false;
    for (int32_t i = 0; i < n && !keep; ++i) keep = cold[i] == fn;
    if (!keep && !LLVMIsDeclaration(fn)) drop_body(fn);
    fn = next;
  }
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn;) {
    LLVMValueRef next = LLVMGetNextFunction(fn);
    if (LLVMIsDeclaration(fn) && !LLVMGetFirstUse(fn)) LLVMDeleteFunction(fn);
    fn = next;
  }
  for (int32_t i = 0; i < n; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "tj_cold_%d", (int)i);
    LLVMSetValueName2(cold[i], name, strlen(name));
    LLVMSetLinkage(cold[i], LLVMExternalLinkage);
  }
}

// Builds the module for |kernels| (|part| of it) and carries it to
// |stage|; the result goes to |*out_data| / |*out_size| (allocated from
// the jit's allocator; text is NUL-terminated, the size excluding the
// NUL). Object builds add their stage times to the jit's stats.
static tj_status_t build(tj_x86_jit_t* jit, LLVMTargetMachineRef tm,
                         const tj_kir_t* const* kernels, uint32_t n,
                         stage_t stage, tj_x86_part_t part,
                         int32_t* out_num_cold, uint8_t** out_data,
                         size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  *out_num_cold = 0;
  uint64_t t0 = now_ns();
  for (uint32_t i = 0; i < n; ++i) {
    if (!kernels[i] || !kernels[i]->finalized) {
      return tj_invalid("x86 jit: kernel %u is not finalized", i);
    }
  }
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("tj_kernels", ctx);
  LLVMSetTarget(mod, jit->triple);
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, layout);
  LLVMDisposeTargetData(layout);
  tj_status_t s = tj_emit_kernels(mod, &jit->target, kernels, n);
  if (!s && part != TJ_X86_PART_ALL) split_module(mod, part, out_num_cold);
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
  uint64_t t1 = now_ns();
  if (!s && stage != STAGE_IR) {
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    s = tj_status_from_llvm_error(LLVMRunPasses(mod, "default<O3>", tm, opts),
                                  "x86 jit: LLVMRunPasses(default<O3>)");
    LLVMDisposePassBuilderOptions(opts);
  }
  uint64_t t2 = now_ns();
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
        tm, mod, stage == STAGE_ASM ? LLVMAssemblyFile : LLVMObjectFile, &err,
        &buf);
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
  if (stage == STAGE_OBJECT) {
    atomic_fetch_add(&jit->emit_ns, t1 - t0);
    atomic_fetch_add(&jit->opt_ns, t2 - t1);
    atomic_fetch_add(&jit->codegen_ns, now_ns() - t2);
  }
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  if (s) return s;
  *out_data = data;
  *out_size = size;
  return NULL;
}

// A TargetMachine for one build: a spare one, or a new one.
static tj_status_t take_tm(tj_x86_jit_t* jit, LLVMTargetMachineRef* out) {
  pthread_mutex_lock(&jit->mutex);
  if (jit->num_spare_tms > 0) {
    *out = jit->spare_tms[--jit->num_spare_tms];
    pthread_mutex_unlock(&jit->mutex);
    return NULL;
  }
  pthread_mutex_unlock(&jit->mutex);
  return create_tm(jit, out);
}

static void give_tm(tj_x86_jit_t* jit, LLVMTargetMachineRef tm) {
  pthread_mutex_lock(&jit->mutex);
  if (jit->num_spare_tms < SPARE_TMS) {
    jit->spare_tms[jit->num_spare_tms++] = tm;
    tm = NULL;
  }
  pthread_mutex_unlock(&jit->mutex);
  if (tm) LLVMDisposeTargetMachine(tm);
}

// build's arguments, for tj_llvm_guard.
typedef struct build_call_t {
  tj_x86_jit_t* jit;
  LLVMTargetMachineRef tm;
  const tj_kir_t* const* kernels;
  uint32_t n;
  stage_t stage;
  tj_x86_part_t part;
  int32_t* num_cold;
  uint8_t** data;
  size_t* size;
} build_call_t;

static tj_status_t build_call(void* arg) {
  build_call_t* c = arg;
  return build(c->jit, c->tm, c->kernels, c->n, c->stage, c->part, c->num_cold,
               c->data, c->size);
}

static tj_status_t timed_build(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels, uint32_t n,
                               stage_t stage, tj_x86_part_t part,
                               int32_t* num_cold, uint8_t** data,
                               size_t* size) {
  *data = NULL;
  *size = 0;
  uint64_t t0 = now_ns();
  TJ_RETURN_IF_ERROR(tj_llvm_headroom());
  LLVMTargetMachineRef tm;
  TJ_RETURN_IF_ERROR(take_tm(jit, &tm));
  build_call_t call = {jit, tm, kernels, n, stage, part, num_cold, data, size};
  bool interrupted;
  tj_status_t s = tj_llvm_guard(build_call, &call, &interrupted);
  // An interrupted build abandons its TargetMachine with its module (see
  // llvm_guard.h): it may be half-way through code generation.
  if (!interrupted) give_tm(jit, tm);
  if (stage == STAGE_OBJECT) {
    atomic_fetch_add(&jit->compiles, 1);
    atomic_fetch_add(&jit->compile_ns, now_ns() - t0);
  }
  return s;
}

tj_status_t tj_x86_jit_compile(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, tj_x86_object_t* object) {
  int32_t num_cold;
  return tj_x86_jit_compile_part(jit, kernels, num_kernels, TJ_X86_PART_ALL,
                                 object, &num_cold);
}

tj_status_t tj_x86_jit_compile_part(tj_x86_jit_t* jit,
                                    const tj_kir_t* const* kernels,
                                    uint32_t num_kernels, tj_x86_part_t part,
                                    tj_x86_object_t* object,
                                    int32_t* out_num_cold) {
  memset(object, 0, sizeof(*object));
  object->allocator = jit->allocator;
  uint8_t* data;
  size_t size;
  TJ_RETURN_IF_ERROR(timed_build(jit, kernels, num_kernels, STAGE_OBJECT, part,
                                 out_num_cold, &data, &size));
  object->data = data;
  object->size = size;
  return NULL;
}

static tj_status_t emit_text(tj_x86_jit_t* jit, const tj_kir_t* const* kernels,
                             uint32_t n, stage_t stage, tj_x86_part_t part,
                             char** out_text) {
  *out_text = NULL;
  uint8_t* data;
  size_t size;
  int32_t num_cold;
  TJ_RETURN_IF_ERROR(
      timed_build(jit, kernels, n, stage, part, &num_cold, &data, &size));
  // Both text stages allocate strlen + 1 bytes, which tj_free_string frees.
  *out_text = (char*)data;
  return NULL;
}

tj_status_t tj_x86_jit_emit_ir(tj_x86_jit_t* jit,
                               const tj_kir_t* const* kernels,
                               uint32_t num_kernels, bool optimized,
                               char** out_text) {
  return tj_x86_jit_emit_ir_part(jit, kernels, num_kernels, TJ_X86_PART_ALL,
                                 optimized, out_text);
}

tj_status_t tj_x86_jit_emit_ir_part(tj_x86_jit_t* jit,
                                    const tj_kir_t* const* kernels,
                                    uint32_t num_kernels, tj_x86_part_t part,
                                    bool optimized, char** out_text) {
  return emit_text(jit, kernels, num_kernels,
                   optimized ? STAGE_OPT_IR : STAGE_IR, part, out_text);
}

tj_status_t tj_x86_jit_emit_asm(tj_x86_jit_t* jit,
                                const tj_kir_t* const* kernels,
                                uint32_t num_kernels, char** out_text) {
  return emit_text(jit, kernels, num_kernels, STAGE_ASM, TJ_X86_PART_ALL,
                   out_text);
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

typedef struct add_object_call_t {
  tj_x86_module_t* module;
  const void* data;
  size_t size;
} add_object_call_t;

// Links an object into the module's dylib (for tj_llvm_guard).
static tj_status_t add_object(void* arg) {
  add_object_call_t* c = arg;
  tj_x86_module_t* m = c->module;
  m->tracker = LLVMOrcJITDylibCreateResourceTracker(m->dylib->jd);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(
      (const char*)c->data, c->size, "tj_object");
  return tj_status_from_llvm_error(
      LLVMOrcLLJITAddObjectFileWithRT(m->jit->lljit, m->tracker,
                                      buf),  // takes buf
      "x86 jit: adding an object");
}

tj_status_t tj_x86_jit_load(tj_x86_jit_t* jit, const void* data, size_t size,
                            tj_x86_module_t** out_module) {
  *out_module = NULL;
  if (jit->compile_only) {
    return tj_unsupported(
        "x86 jit: load: this JIT compiles for a CPU it does not run on (%s)",
        jit->cpu);
  }
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
  add_object_call_t call = {m, data, size};
  bool interrupted = false;
  s = tj_llvm_headroom();
  if (!s) s = tj_llvm_guard(add_object, &call, &interrupted);
  if (s) {
    // An interrupted link leaves ORC's state for this dylib unknown: the
    // module is abandoned, not destroyed (llvm_guard.h).
    if (!interrupted) tj_x86_module_destroy(m);
    return s;
  }
  atomic_fetch_add(&jit->loads, 1);
  atomic_fetch_add(&jit->live_modules, 1);
  m->counted = true;
  *out_module = m;
  return NULL;
}

#define MAX_LOOKUP 80  // symbols per lookup_many

typedef struct lookup_t {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  bool done;
  LLVMErrorRef err;
  size_t n;
  const LLVMOrcSymbolStringPoolEntryRef* names;  // compared, not used
  LLVMOrcExecutorAddress* addresses;
} lookup_t;

static void on_lookup(LLVMErrorRef err, LLVMOrcCSymbolMapPairs result,
                      size_t num_pairs, void* ctx) {
  lookup_t* l = ctx;
  pthread_mutex_lock(&l->mutex);
  l->err = err;
  for (size_t i = 0; !err && i < num_pairs; ++i) {
    for (size_t j = 0; j < l->n; ++j) {
      if (result[i].Name == l->names[j])
        l->addresses[j] = result[i].Sym.Address;
    }
  }
  l->done = true;
  pthread_cond_signal(&l->cond);
  pthread_mutex_unlock(&l->mutex);
}

// The addresses of |n| symbols (without the global prefix) in |module|, in
// one ORC lookup. |what| names them in errors.
static tj_status_t lookup_many(tj_x86_module_t* module,
                               const char* const* symbols, size_t n,
                               const char* what, uintptr_t* out_addresses) {
  if (n > MAX_LOOKUP) return tj_internal("x86 jit: %zu symbols at once", n);
  tj_x86_jit_t* jit = module->jit;
  LLVMOrcCLookupSetElement syms[MAX_LOOKUP];
  LLVMOrcSymbolStringPoolEntryRef names[MAX_LOOKUP];
  LLVMOrcExecutorAddress addresses[MAX_LOOKUP];
  for (size_t i = 0; i < n; ++i) {
    out_addresses[i] = 0;
    addresses[i] = 0;
    char name[300];
    int len = snprintf(
        name, sizeof(name), "%s%s",
        jit->global_prefix ? (char[]){jit->global_prefix, 0} : "", symbols[i]);
    if (len < 0 || (size_t)len >= sizeof(name)) {
      // The names interned so far belong to no lookup yet.
      for (size_t j = 0; j < i; ++j) {
        LLVMOrcReleaseSymbolStringPoolEntry(names[j]);
      }
      return tj_invalid("x86 jit: symbol name too long: %s", symbols[i]);
    }
    names[i] = LLVMOrcExecutionSessionIntern(jit->es, name);
    syms[i] = (LLVMOrcCLookupSetElement){
        names[i], LLVMOrcSymbolLookupFlagsRequiredSymbol};
  }
  lookup_t l;
  memset(&l, 0, sizeof(l));
  l.n = n;
  l.names = names;
  l.addresses = addresses;
  pthread_mutex_init(&l.mutex, NULL);
  pthread_cond_init(&l.cond, NULL);
  LLVMOrcCJITDylibSearchOrderElement order = {
      module->dylib->jd, LLVMOrcJITDylibLookupFlagsMatchAllSymbols};
  // The lookup takes the interned names; it may complete on another thread
  // (a concurrent dispatcher), so wait for the callback.
  LLVMOrcExecutionSessionLookup(jit->es, LLVMOrcLookupKindStatic, &order, 1,
                                syms, n, on_lookup, &l);
  pthread_mutex_lock(&l.mutex);
  while (!l.done) pthread_cond_wait(&l.cond, &l.mutex);
  pthread_mutex_unlock(&l.mutex);
  pthread_cond_destroy(&l.cond);
  pthread_mutex_destroy(&l.mutex);
  TJ_RETURN_IF_ERROR(tj_status_from_llvm_error(l.err, what));
  for (size_t i = 0; i < n; ++i) {
    if (!addresses[i]) {
      return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "%s: @%s has no address",
                            what, symbols[i]);
    }
    out_addresses[i] = (uintptr_t)addresses[i];
  }
  return NULL;
}

static tj_status_t lookup_address(tj_x86_module_t* module, const char* symbol,
                                  const char* what, uintptr_t* out_address) {
  return lookup_many(module, &symbol, 1, what, out_address);
}

tj_status_t tj_x86_module_lookup(tj_x86_module_t* module,
                                 const char* kernel_name, tj_kir_fn_t* out_fn) {
  *out_fn = NULL;
  char symbol[300];
  int n = snprintf(symbol, sizeof(symbol), "tj_kernel_%s", kernel_name);
  if (n < 0 || (size_t)n >= sizeof(symbol)) {
    return tj_invalid("x86 jit: kernel name too long: %s", kernel_name);
  }
  char what[320];
  snprintf(what, sizeof(what), "x86 jit: looking up kernel @%s", kernel_name);
  uintptr_t addr;
  TJ_RETURN_IF_ERROR(lookup_address(module, symbol, what, &addr));
  // Object code addresses become function pointers here and nowhere else.
  tj_kir_fn_t fn;
  memcpy(&fn, &addr, sizeof(fn));
  *out_fn = fn;
  return NULL;
}

tj_status_t tj_x86_module_lookup_symbols(tj_x86_module_t* module,
                                         const char* const* symbols,
                                         size_t num_symbols,
                                         void** out_addresses) {
  for (size_t i = 0; i < num_symbols; ++i) out_addresses[i] = NULL;
  uintptr_t addrs[MAX_LOOKUP];
  TJ_RETURN_IF_ERROR(lookup_many(module, symbols, num_symbols,
                                 "x86 jit: looking up symbols", addrs));
  for (size_t i = 0; i < num_symbols; ++i) out_addresses[i] = (void*)addrs[i];
  return NULL;
}

tj_status_t tj_x86_module_lookup_data(tj_x86_module_t* module,
                                      const char* symbol, void** out_address) {
  *out_address = NULL;
  char what[320];
  snprintf(what, sizeof(what), "x86 jit: looking up @%s", symbol);
  uintptr_t addr;
  TJ_RETURN_IF_ERROR(lookup_address(module, symbol, what, &addr));
  *out_address = (void*)addr;
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
  if (module->counted) atomic_fetch_sub(&jit->live_modules, 1);
  tj_free(jit->allocator, module, sizeof(*module));
}
