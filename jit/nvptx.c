// NVPTX target machines, modules and module -> PTX. See nvptx.h.

#include "jit/nvptx.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jit/emit_nvptx.h"
#include "jit/llvm_guard.h"
#include "jit/llvm_status.h"

#define kTriple "nvptx64-nvidia-cuda"

// The PTX ISA version per arch: the oldest that has every instruction the
// templates use (sm_90a needs 8.0; bf16 mma and cp.async need 7.0, and 7.8
// adds the bf16 arithmetic LLVM may select), so that older drivers load it.
static const struct {
  const char* cpu;
  const char* features;
} kArchs[TJ_NVPTX_ARCH_COUNT_] = {
    [TJ_NVPTX_SM_80] = {"sm_80", "+ptx78"},
    [TJ_NVPTX_SM_90A] = {"sm_90a", "+ptx80"},
};

struct tj_nvptx_target_t {
  tj_allocator_t allocator;
  tj_nvptx_arch_t arch;
  LLVMTargetMachineRef machine;
  char* data_layout;  // LLVMCopyStringRepOfTargetData; LLVMDisposeMessage
  char* libdevice;    // tj_nvptx_target_set_libdevice's copy, or NULL
};

const char* tj_nvptx_arch_name(tj_nvptx_arch_t arch) {
  return (unsigned)arch < TJ_NVPTX_ARCH_COUNT_ ? kArchs[arch].cpu : "?";
}

bool tj_nvptx_arch_from_name(const char* name, tj_nvptx_arch_t* out_arch) {
  for (int a = 0; a < TJ_NVPTX_ARCH_COUNT_; ++a) {
    if (strcmp(name, kArchs[a].cpu) == 0) {
      *out_arch = (tj_nvptx_arch_t)a;
      return true;
    }
  }
  return false;
}

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;

static void initialize_nvptx(void) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
}

tj_status_t tj_nvptx_target_create(tj_allocator_t allocator,
                                   tj_nvptx_arch_t arch,
                                   tj_nvptx_target_t** out_target) {
  *out_target = NULL;
  if ((unsigned)arch >= TJ_NVPTX_ARCH_COUNT_)
    return tj_invalid("nvptx: unknown arch %d", (int)arch);
  pthread_once(&g_init_once, initialize_nvptx);
  LLVMTargetRef target = NULL;
  char* message = NULL;
  TJ_RETURN_IF_ERROR(tj_status_from_llvm_message(
      LLVMGetTargetFromTriple(kTriple, &target, &message), message,
      "nvptx: LLVMGetTargetFromTriple"));
  tj_nvptx_target_t* t = tj_calloc(allocator, 1, sizeof(*t));
  if (!t) return tj_status_oom();
  t->allocator = allocator;
  t->arch = arch;
  t->machine = LLVMCreateTargetMachine(
      target, kTriple, kArchs[arch].cpu, kArchs[arch].features,
      LLVMCodeGenLevelAggressive, LLVMRelocDefault, LLVMCodeModelDefault);
  if (!t->machine) {
    tj_free(allocator, t, sizeof(*t));
    return tj_status_from_llvm_null(NULL, "nvptx: LLVMCreateTargetMachine");
  }
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(t->machine);
  t->data_layout = LLVMCopyStringRepOfTargetData(layout);
  LLVMDisposeTargetData(layout);
  *out_target = t;
  return NULL;
}

void tj_nvptx_target_destroy(tj_nvptx_target_t* target) {
  if (!target) return;
  LLVMDisposeTargetMachine(target->machine);
  LLVMDisposeMessage(target->data_layout);
  tj_free_string(target->allocator, target->libdevice);
  tj_free(target->allocator, target, sizeof(*target));
}

tj_status_t tj_nvptx_target_set_libdevice(tj_nvptx_target_t* target,
                                          const char* path) {
  char* copy = NULL;
  if (path && path[0] && !(copy = tj_strdup(target->allocator, path)))
    return tj_status_oom();
  tj_free_string(target->allocator, target->libdevice);
  target->libdevice = copy;
  return NULL;
}

tj_nvptx_arch_t tj_nvptx_target_arch(const tj_nvptx_target_t* target) {
  return target->arch;
}

LLVMModuleRef tj_nvptx_module_create(const tj_nvptx_target_t* target,
                                     LLVMContextRef context, const char* name) {
  LLVMModuleRef module = LLVMModuleCreateWithNameInContext(name, context);
  LLVMSetTarget(module, kTriple);
  LLVMSetDataLayout(module, target->data_layout);
  return module;
}

//===--- libdevice ---===//

static bool is_libdevice_name(LLVMValueRef f) {
  size_t n;
  const char* name = LLVMGetValueName2(f, &n);
  return n > 5 && memcmp(name, "__nv_", 5) == 0;
}

// The first libdevice function |module| calls, or NULL.
static LLVMValueRef libdevice_call(LLVMModuleRef module) {
  for (LLVMValueRef f = LLVMGetFirstFunction(module); f;
       f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f) && is_libdevice_name(f) && LLVMGetFirstUse(f))
      return f;
  }
  return NULL;
}

// Links the target's libdevice into |module| when a kernel calls it (f64
// tanh, erf, sin, ...: tj_nvptx_options_t.libdevice). The bitcode is parsed
// into the module's context, given the module's triple and layout
// (libdevice says nvptx64-nvidia-gpulibs), linked, and every function it
// defines made internal, so that O3 inlines what is called and drops the
// other ~350. Its __nvvm_reflect("__CUDA_FTZ") calls are folded to 0 by
// the NVPTX target's NVVMReflect pass, which PassBuilder runs first
// (subnormals kept, as in the x86 kernels). Reading and parsing costs a
// few ms, only in the compiles that need it.
static tj_status_t link_libdevice(const tj_nvptx_target_t* target,
                                  LLVMModuleRef module) {
  LLVMValueRef call = libdevice_call(module);
  if (!call) return NULL;
  size_t n;
  const char* fn = LLVMGetValueName2(call, &n);
  if (!target->libdevice)
    return tj_unsupported(
        "nvptx: a kernel calls libdevice's %.*s, and no libdevice was found "
        "(set TJ_LIBDEVICE to libdevice.10.bc, or CUDA_HOME to the toolkit)",
        (int)n, fn);
  LLVMMemoryBufferRef buffer = NULL;
  char* message = NULL;
  if (LLVMCreateMemoryBufferWithContentsOfFile(target->libdevice, &buffer,
                                               &message)) {
    tj_status_t status = tj_unsupported(
        "nvptx: libdevice %s (for %.*s) cannot be read: %s (set TJ_LIBDEVICE "
        "to a libdevice.10.bc, or \"\" to go without)",
        target->libdevice, (int)n, fn, message ? message : "");
    LLVMDisposeMessage(message);
    return status;
  }
  LLVMModuleRef library = NULL;
  LLVMBool failed = LLVMParseBitcodeInContext2(LLVMGetModuleContext(module),
                                               buffer, &library);
  LLVMDisposeMemoryBuffer(buffer);  // the parse copied what it keeps
  if (failed)
    return tj_unsupported("nvptx: libdevice %s is not LLVM bitcode",
                          target->libdevice);
  LLVMSetTarget(library, kTriple);
  LLVMSetDataLayout(library, target->data_layout);
  if (LLVMLinkModules2(module, library))  // disposes |library|
    return tj_unsupported("nvptx: libdevice %s does not link",
                          target->libdevice);
  for (LLVMValueRef f = LLVMGetFirstFunction(module); f;
       f = LLVMGetNextFunction(f)) {
    if (!LLVMIsDeclaration(f) && is_libdevice_name(f))
      LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  return NULL;
}

static tj_status_t compile(const tj_nvptx_target_t* target,
                           LLVMModuleRef module, tj_allocator_t allocator,
                           char** out_ptx) {
  char* message = NULL;
  // An invalid module is our bug; code generation of one may crash.
  if (LLVMVerifyModule(module, LLVMReturnStatusAction, &message)) {
    tj_status_t status = tj_internal("nvptx: generated module is invalid: %s",
                                     message ? message : "");
    LLVMDisposeMessage(message);
    LLVMDisposeModule(module);
    return status;
  }
  LLVMDisposeMessage(message);
  tj_status_t status = link_libdevice(target, module);
  if (status) {
    LLVMDisposeModule(module);
    return status;
  }
  LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
  status = tj_status_from_llvm_error(
      LLVMRunPasses(module, "default<O3>", target->machine, options),
      "nvptx: LLVMRunPasses");
  LLVMDisposePassBuilderOptions(options);
  LLVMMemoryBufferRef buffer = NULL;
  if (!status) {
    message = NULL;
    status = tj_status_from_llvm_message(
        LLVMTargetMachineEmitToMemoryBuffer(
            target->machine, module, LLVMAssemblyFile, &message, &buffer),
        message, "nvptx: emitting PTX");
  }
  LLVMDisposeModule(module);
  if (status) return status;
  size_t size = LLVMGetBufferSize(buffer);
  char* ptx = tj_alloc(allocator, size + 1);
  if (!ptx) {
    LLVMDisposeMemoryBuffer(buffer);
    return tj_status_oom();
  }
  memcpy(ptx, LLVMGetBufferStart(buffer), size);
  ptx[size] = '\0';
  LLVMDisposeMemoryBuffer(buffer);
  *out_ptx = ptx;
  return NULL;
}

typedef struct compile_call_t {
  const tj_nvptx_target_t* target;
  LLVMModuleRef module;
  tj_allocator_t allocator;
  char** out_ptx;
} compile_call_t;

static tj_status_t compile_call(void* arg) {
  compile_call_t* c = arg;
  return compile(c->target, c->module, c->allocator, c->out_ptx);
}

tj_status_t tj_nvptx_compile(const tj_nvptx_target_t* target,
                             LLVMModuleRef module, tj_allocator_t allocator,
                             char** out_ptx) {
  *out_ptx = NULL;
  tj_status_t status = tj_llvm_headroom();
  if (status) {
    LLVMDisposeModule(module);
    return status;
  }
  // An interrupted compile abandons |module| (llvm_guard.h).
  compile_call_t call = {target, module, allocator, out_ptx};
  bool interrupted;
  return tj_llvm_guard(compile_call, &call, &interrupted);
}

void tj_nvptx_llvm_version(unsigned* major, unsigned* minor, unsigned* patch) {
  LLVMGetVersion(major, minor, patch);
}

//===--- tj_nvptx_module_t ---===//

struct tj_nvptx_module_t {
  tj_allocator_t allocator;
  const tj_nvptx_target_t* target;
  LLVMContextRef context;
  LLVMModuleRef module;
};

tj_status_t tj_nvptx_module_new(const tj_nvptx_target_t* target,
                                tj_allocator_t allocator, const char* name,
                                tj_nvptx_module_t** out_module) {
  *out_module = NULL;
  tj_nvptx_module_t* m = tj_calloc(allocator, 1, sizeof(*m));
  if (!m) return tj_status_oom();
  m->allocator = allocator;
  m->target = target;
  m->context = LLVMContextCreate();
  m->module = tj_nvptx_module_create(target, m->context, name);
  *out_module = m;
  return NULL;
}

void tj_nvptx_module_destroy(tj_nvptx_module_t* module) {
  if (!module) return;
  if (module->module) LLVMDisposeModule(module->module);
  LLVMContextDispose(module->context);
  tj_free(module->allocator, module, sizeof(*module));
}

tj_status_t tj_nvptx_module_add_kernel(tj_nvptx_module_t* module,
                                       const tj_kir_t* kernel,
                                       const tj_nvptx_options_t* options,
                                       tj_nvptx_kernel_t* out_kernel) {
  return tj_nvptx_emit_kernel(module->module, module->target->arch, kernel,
                              options, out_kernel);
}

void tj_nvptx_module_remove_kernel(tj_nvptx_module_t* module,
                                   const char* entry) {
  LLVMValueRef f = LLVMGetNamedFunction(module->module, entry);
  if (f) LLVMDeleteFunction(f);
}

void tj_nvptx_module_rename_kernel(tj_nvptx_module_t* module, const char* entry,
                                   const char* name) {
  LLVMValueRef f = LLVMGetNamedFunction(module->module, entry);
  if (f) LLVMSetValueName2(f, name, strlen(name));
}

tj_status_t tj_nvptx_module_print(const tj_nvptx_module_t* module,
                                  tj_allocator_t allocator, char** out_ir) {
  *out_ir = NULL;
  char* ir = LLVMPrintModuleToString(module->module);
  if (!ir) return tj_status_oom();
  char* copy = tj_strdup(allocator, ir);
  LLVMDisposeMessage(ir);
  if (!copy) return tj_status_oom();
  *out_ir = copy;
  return NULL;
}

tj_status_t tj_nvptx_module_compile(tj_nvptx_module_t* module,
                                    tj_allocator_t allocator, char** out_ptx) {
  LLVMModuleRef m = module->module;
  module->module = NULL;
  tj_status_t status = tj_nvptx_compile(module->target, m, allocator, out_ptx);
  tj_nvptx_module_destroy(module);
  return status;
}

//===--- chunks ---===//

static uint64_t function_instructions(LLVMValueRef f) {
  uint64_t n = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i;
         i = LLVMGetNextInstruction(i))
      ++n;
  }
  return n;
}

uint64_t tj_nvptx_module_kernel_cost(const tj_nvptx_module_t* module,
                                     const char* entry) {
  LLVMValueRef f = LLVMGetNamedFunction(module->module, entry);
  if (!f || LLVMIsDeclaration(f)) return 0;
  uint64_t cost = function_instructions(f);
  // The helpers it calls (defined in the module, one level: the emitters'
  // helpers call intrinsics only), each counted once.
  LLVMValueRef seen[32];
  uint32_t num_seen = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb;
       bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i;
         i = LLVMGetNextInstruction(i)) {
      if (LLVMGetInstructionOpcode(i) != LLVMCall) continue;
      LLVMValueRef callee = LLVMGetCalledValue(i);
      if (!callee || !LLVMIsAFunction(callee) || LLVMIsDeclaration(callee) ||
          callee == f)
        continue;
      bool counted = false;
      for (uint32_t s = 0; s < num_seen && !counted; ++s)
        counted = seen[s] == callee;
      if (counted) continue;
      if (num_seen < TJ_ARRAY_SIZE(seen)) seen[num_seen++] = callee;
      cost += function_instructions(callee);
    }
  }
  return cost;
}

uint32_t tj_nvptx_plan_chunks(const uint64_t* costs, uint32_t count,
                              uint64_t budget, uint32_t* chunk_of) {
  uint32_t chunks = 0;
  uint32_t open = TJ_NVPTX_NO_CHUNK;  // the chunk light kernels go into
  uint64_t open_cost = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (costs[i] >= budget) {
      chunk_of[i] = chunks++;
      continue;
    }
    if (open == TJ_NVPTX_NO_CHUNK || open_cost >= budget) {
      open = chunks++;
      open_cost = 0;
    }
    chunk_of[i] = open;
    open_cost += costs[i];
  }
  return chunks;
}

uint32_t tj_nvptx_host_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return (uint32_t)count;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (uint32_t)n : 1;
}

// The state the chunks' threads share; each writes only its chunks' slots.
typedef struct chunk_work_t {
  const tj_nvptx_target_t* target;  // the calling thread's
  const tj_nvptx_chunks_t* chunks;
  tj_allocator_t allocator;
  const char* bitcode;
  size_t bitcode_size;
  const uint32_t* order;  // chunks, costliest first
  uint32_t num_order;
  _Atomic(uint32_t) next;
  _Atomic(bool) failed;
  char** out_ptx;
  double* chunk_ms;       // optional
  double* chunk_cpu_ms;   // optional
  tj_status_t* statuses;  // per chunk
} chunk_work_t;

// Chunk |c| of |w| to PTX with |target| (the thread's own).
static tj_status_t compile_chunk(chunk_work_t* w,
                                 const tj_nvptx_target_t* target, uint32_t c) {
  TJ_RETURN_IF_ERROR(tj_llvm_headroom());
  const tj_nvptx_chunks_t* ch = w->chunks;
  LLVMContextRef context = LLVMContextCreate();
  // Not copied: the parse reads it and keeps nothing of the buffer.
  LLVMMemoryBufferRef buffer = LLVMCreateMemoryBufferWithMemoryRange(
      w->bitcode, w->bitcode_size, "tj_chunk", /*RequiresNullTerminator=*/0);
  LLVMModuleRef module = NULL;
  LLVMBool failed = LLVMParseBitcodeInContext2(context, buffer, &module);
  LLVMDisposeMemoryBuffer(buffer);
  if (failed) {
    LLVMContextDispose(context);
    return tj_internal("nvptx: chunk %u: the module's bitcode does not parse",
                       c);
  }
  for (uint32_t i = 0; i < ch->num_entries; ++i) {
    if (ch->chunk_of[i] == c) continue;
    LLVMValueRef f = LLVMGetNamedFunction(module, ch->entries[i]);
    if (f) LLVMDeleteFunction(f);
  }
  char* ptx = NULL;
  compile_call_t call = {target, module, w->allocator, &ptx};
  bool interrupted = false;
  tj_status_t status = tj_llvm_guard(compile_call, &call, &interrupted);
  // An interrupted compile abandons the context with the module.
  if (!interrupted) LLVMContextDispose(context);
  if (status) return tj_status_annotate(status, "nvptx: chunk %u", c);
  if (ch->then) status = ch->then(ch->then_ctx, c, ptx);
  if (status) {
    tj_free_string(w->allocator, ptx);
    return status;
  }
  w->out_ptx[c] = ptx;
  return NULL;
}

// The calling thread's CPU time: a chunk's cost on a loaded machine.
static double thread_cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// Takes chunks from |w| until none is left or one has failed.
static void chunk_loop(chunk_work_t* w, const tj_nvptx_target_t* target) {
  for (;;) {
    if (atomic_load(&w->failed)) return;
    uint32_t i = atomic_fetch_add(&w->next, 1);
    if (i >= w->num_order) return;
    uint32_t c = w->order[i];
    double start = tj_now_ms(), cpu = thread_cpu_ms();
    w->statuses[c] = compile_chunk(w, target, c);
    if (w->chunk_ms) w->chunk_ms[c] = tj_now_ms() - start;
    if (w->chunk_cpu_ms) w->chunk_cpu_ms[c] = thread_cpu_ms() - cpu;
    if (w->statuses[c]) atomic_store(&w->failed, true);
  }
}

typedef struct chunk_thread_t {
  chunk_work_t* work;
  tj_nvptx_target_t* target;  // its own: target machines are per thread
  tj_status_t status;         // the target's creation
  pthread_t thread;
  bool started;
} chunk_thread_t;

static void* chunk_thread_main(void* arg) {
  chunk_thread_t* t = arg;
  chunk_loop(t->work, t->target);
  return NULL;
}

tj_status_t tj_nvptx_module_compile_chunks(tj_nvptx_module_t* module,
                                           const tj_nvptx_chunks_t* chunks,
                                           tj_allocator_t allocator,
                                           char** out_ptx, double* out_chunk_ms,
                                           double* out_chunk_cpu_ms) {
  uint32_t n = chunks->num_chunks;
  for (uint32_t c = 0; c < n; ++c) {
    out_ptx[c] = NULL;
    if (out_chunk_ms) out_chunk_ms[c] = 0;
    if (out_chunk_cpu_ms) out_chunk_cpu_ms[c] = 0;
  }
  const tj_nvptx_target_t* target = module->target;
  // Per chunk: its cost, then the order (costliest first).
  uint64_t* cost = tj_calloc(allocator, n + 1, sizeof(uint64_t));
  uint32_t* order = tj_calloc(allocator, n + 1, sizeof(uint32_t));
  tj_status_t* statuses = tj_calloc(allocator, n + 1, sizeof(tj_status_t));
  tj_status_t status = NULL;
  if (!cost || !order || !statuses) status = tj_status_oom();
  for (uint32_t i = 0; i < chunks->num_entries && !status; ++i) {
    uint32_t c = chunks->chunk_of[i];
    if (c == TJ_NVPTX_NO_CHUNK) continue;
    if (c >= n) {
      status = tj_internal("nvptx: kernel %s in chunk %u of %u",
                           chunks->entries[i], c, n);
      break;
    }
    cost[c] += tj_nvptx_module_kernel_cost(module, chunks->entries[i]) + 1;
  }
  uint32_t num_order = 0;
  for (uint32_t c = 0; c < n && !status; ++c) {
    if (cost[c] == 0) continue;  // no kernel: no PTX
    uint32_t at = num_order++;
    while (at > 0 && cost[order[at - 1]] < cost[c]) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = c;
  }
  LLVMMemoryBufferRef bitcode = NULL;
  if (!status && num_order > 0) {
    bitcode = LLVMWriteBitcodeToMemoryBuffer(module->module);
    if (!bitcode) status = tj_status_oom();
  }
  tj_nvptx_module_destroy(module);
  chunk_work_t w = {
      .target = target,
      .chunks = chunks,
      .allocator = allocator,
      .bitcode = bitcode ? LLVMGetBufferStart(bitcode) : NULL,
      .bitcode_size = bitcode ? LLVMGetBufferSize(bitcode) : 0,
      .order = order,
      .num_order = num_order,
      .out_ptx = out_ptx,
      .chunk_ms = out_chunk_ms,
      .chunk_cpu_ms = out_chunk_cpu_ms,
      .statuses = statuses,
  };
  atomic_init(&w.next, 0);
  atomic_init(&w.failed, false);
  uint32_t extra = chunks->threads > 1 ? chunks->threads - 1 : 0;
  if (extra + 1 > num_order) extra = num_order > 0 ? num_order - 1 : 0;
  chunk_thread_t* threads =
      extra && !status ? tj_calloc(allocator, extra, sizeof(*threads)) : NULL;
  if (extra && !status && !threads) status = tj_status_oom();
  for (uint32_t t = 0; t < extra && !status; ++t) {
    threads[t].work = &w;
    threads[t].status =
        tj_nvptx_target_create(allocator, target->arch, &threads[t].target);
    if (!threads[t].status)
      threads[t].status =
          tj_nvptx_target_set_libdevice(threads[t].target, target->libdevice);
    // A thread that cannot start leaves its chunks to the others.
    if (!threads[t].status &&
        pthread_create(&threads[t].thread, NULL, chunk_thread_main,
                       &threads[t]) == 0)
      threads[t].started = true;
  }
  if (!status) chunk_loop(&w, target);
  for (uint32_t t = 0; t < extra && threads; ++t) {
    if (threads[t].started) pthread_join(threads[t].thread, NULL);
    tj_nvptx_target_destroy(threads[t].target);
    tj_status_free(threads[t].status);
  }
  if (threads) tj_free(allocator, threads, sizeof(*threads) * extra);
  if (bitcode) LLVMDisposeMemoryBuffer(bitcode);
  // The first failure in chunk order; the others are dropped.
  for (uint32_t c = 0; c < n && statuses; ++c) {
    if (!status) {
      status = statuses[c];
    } else {
      tj_status_free(statuses[c]);
    }
  }
  if (status) {
    for (uint32_t c = 0; c < n; ++c) {
      tj_free_string(allocator, out_ptx[c]);
      out_ptx[c] = NULL;
    }
  }
  if (cost) tj_free(allocator, cost, sizeof(uint64_t) * (n + 1));
  if (order) tj_free(allocator, order, sizeof(uint32_t) * (n + 1));
  if (statuses) tj_free(allocator, statuses, sizeof(tj_status_t) * (n + 1));
  return status;
}

//===--- a host's own LLVM IR ---===//

// Whether |ptx| declares the kernel |entry| (".entry NAME(" or
// ".entry NAME\n", after ".visible" or ".weak").
static bool ptx_has_entry(const char* ptx, const char* entry) {
  size_t n = strlen(entry);
  for (const char* p = strstr(ptx, ".entry "); p;
       p = strstr(p + 1, ".entry ")) {
    const char* name = p + 7;
    if (strncmp(name, entry, n) == 0 && (name[n] == '(' || name[n] == '\n' ||
                                         name[n] == ' ' || name[n] == '\r'))
      return true;
  }
  return false;
}

tj_status_t tj_nvptx_compile_ir_text(const tj_nvptx_target_t* target,
                                     const char* ir, const char* entry,
                                     const char* what, tj_allocator_t allocator,
                                     char** out_ptx) {
  *out_ptx = NULL;
  TJ_RETURN_IF_ERROR(tj_llvm_headroom());
  LLVMContextRef context = LLVMContextCreate();
  // The text is not copied into the buffer: ParseIR reads it and takes
  // ownership of the buffer (not of |ir|), on every path.
  LLVMMemoryBufferRef buffer = LLVMCreateMemoryBufferWithMemoryRange(
      ir, strlen(ir), "cuda_llvm_ir", /*RequiresNullTerminator=*/1);
  LLVMModuleRef module = NULL;
  char* message = NULL;
  tj_status_t status = NULL;
  if (LLVMParseIRInContext(context, buffer, &module, &message)) {
    status = tj_invalid("%s: its LLVM IR does not parse: %s", what,
                        message ? message : "(no diagnostic)");
    LLVMDisposeMessage(message);
    LLVMContextDispose(context);
    return status;
  }
  LLVMDisposeMessage(message);
  message = NULL;
  // Verified here, as the caller's input: tj_nvptx_compile treats an
  // invalid module as our own bug.
  if (LLVMVerifyModule(module, LLVMReturnStatusAction, &message)) {
    status = tj_invalid("%s: its LLVM IR is not valid: %s", what,
                        message ? message : "(no diagnostic)");
  }
  LLVMDisposeMessage(message);
  const char* triple = LLVMGetTarget(module);
  if (!status && triple && *triple && strcmp(triple, kTriple) != 0) {
    status = tj_invalid("%s: its LLVM IR targets \"%s\", not \"%s\"", what,
                        triple, kTriple);
  }
  LLVMValueRef fn = status ? NULL : LLVMGetNamedFunction(module, entry);
  if (!status && (!fn || LLVMIsDeclaration(fn))) {
    status = tj_invalid("%s: its LLVM IR defines no function @%s (cuda_entry)",
                        what, entry);
  }
  if (status) {
    LLVMDisposeModule(module);
    LLVMContextDispose(context);
    return status;
  }
  LLVMSetTarget(module, kTriple);
  LLVMSetDataLayout(module, target->data_layout);
  char* ptx = NULL;
  compile_call_t call = {target, module, allocator, &ptx};
  bool interrupted = false;
  status = tj_llvm_guard(compile_call, &call, &interrupted);
  // An interrupted compile abandons the context with the module.
  if (!interrupted) LLVMContextDispose(context);
  if (status) return tj_status_annotate(status, "%s: its LLVM IR", what);
  if (!ptx_has_entry(ptx, entry)) {
    tj_free_string(allocator, ptx);
    return tj_invalid(
        "%s: @%s is not a kernel in the PTX (give it the ptx_kernel calling "
        "convention or an nvvm.annotations \"kernel\" mark)",
        what, entry);
  }
  *out_ptx = ptx;
  return NULL;
}
