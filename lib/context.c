// tj_context_t: the allocator and diagnostic channel shared by a host's
// graphs and executables; plus version and dtype facts.
//
// Lifetime: the host holds one reference (tj_context_create, dropped by
// tj_context_destroy) and every live executable one more (tj_context_retain
// in tj_compile, tj_context_release when it is freed). The extensions (the
// x86 JIT and its thread pools, the kernel cache, the CUDA device) go with
// the last reference: an executable released after tj_context_destroy, as a
// garbage collector may do at exit (Python collects a cycle's objects in no
// set order), still unloads its code from a live JIT and joins its own
// threads first.

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "lib/background.h"
#include "lib/base.h"
#include "lib/env.h"

struct tj_context_t {
  atomic_int refs;
  tj_allocator_t allocator;
  tj_diagnostic_fn diagnostic_fn;
  void* diagnostic_user_data;
  // Held while the host's diagnostic_fn runs, so that once
  // tj_context_destroy returns none runs or starts (|host_gone|): the
  // host may free its user data then, though executables live on.
  // Recursive: a callback may itself call the library (a compile, say),
  // which may report through the same channel.
  pthread_mutex_t diagnostic_mutex;
  bool host_gone;
  tj_settings_t settings;  // options and environment, read once (lib/env.h)
  pthread_mutex_t extension_mutex;
  void* extension_state[TJ_CONTEXT_EXTENSION_COUNT_];
  tj_extension_destroy_fn extension_destroy[TJ_CONTEXT_EXTENSION_COUNT_];
  int32_t retain_compiled;  // tj_context_options_t's, clamped to [0, 64]
  tj_background_t background;  // background autotuning (lib/background.h)
};

uint32_t tj_version_number(void) { return TJ_VERSION_NUMBER; }

const char* tj_version_string(void) {
#define TJ_STR2(x) #x
#define TJ_STR(x) TJ_STR2(x)
  return TJ_STR(TJ_VERSION_MAJOR) "." TJ_STR(TJ_VERSION_MINOR) "." TJ_STR(
      TJ_VERSION_PATCH);
#undef TJ_STR
#undef TJ_STR2
}

static const char* const kDtypeNames[TJ_DTYPE_COUNT_] = {
    "f32",        "f16",    "bf16",   "f64", "i8",  "i32", "i64", "bool",
    "u8",         "f8e4m3", "f8e5m2", "i16", "u16", "u32", "u64", "f8e4m3fnuz",
    "f8e5m2fnuz", "f4e2m1", "f8e8m0", "i4",  "u4",  "i2",  "u2"};
static const size_t kDtypeSizes[TJ_DTYPE_COUNT_] = {
    4, 2, 2, 8, 1, 4, 8, 1, 1, 1, 1, 2, 2, 4, 8, 1, 1, 1, 1, 1, 1, 1, 1};

const char* tj_dtype_name(tj_dtype_t dtype) {
  return (unsigned)dtype < TJ_DTYPE_COUNT_ ? kDtypeNames[dtype] : "?";
}

size_t tj_dtype_size(tj_dtype_t dtype) {
  return (unsigned)dtype < TJ_DTYPE_COUNT_ ? kDtypeSizes[dtype] : 0;
}

void tj_context_options_initialize(tj_context_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->allocator = tj_allocator_system();
  options->retain_compiled = 8;
}

tj_status_t tj_context_create(const tj_context_options_t* options,
                              tj_context_t** out_context) {
  if (!out_context) return tj_invalid("tj_context_create: out_context is NULL");
  *out_context = NULL;
  tj_context_options_t defaults;
  tj_context_options_initialize(&defaults);
  if (!options) options = &defaults;
  if (options->struct_size != sizeof(*options)) {
    return tj_invalid(
        "tj_context_create: options.struct_size is %zu, not %zu (fill the "
        "options with tj_context_options_initialize first)",
        options->struct_size, sizeof(*options));
  }
  tj_allocator_t allocator = options->allocator;
  if (!allocator.fn) allocator = tj_allocator_system();
  tj_context_t* context = tj_calloc(allocator, 1, sizeof(*context));
  if (!context) return tj_status_oom();
  if (pthread_mutex_init(&context->extension_mutex, NULL) != 0) {
    tj_free(allocator, context, sizeof(*context));
    return tj_internal("tj_context_create: pthread_mutex_init failed");
  }
  pthread_mutexattr_t recursive;
  pthread_mutexattr_init(&recursive);
  pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
  int failed = pthread_mutex_init(&context->diagnostic_mutex, &recursive);
  pthread_mutexattr_destroy(&recursive);
  if (failed != 0) {
    pthread_mutex_destroy(&context->extension_mutex);
    tj_free(allocator, context, sizeof(*context));
    return tj_internal("tj_context_create: pthread_mutex_init failed");
  }
  if (!tj_background_initialize(&context->background)) {
    pthread_mutex_destroy(&context->diagnostic_mutex);
    pthread_mutex_destroy(&context->extension_mutex);
    tj_free(allocator, context, sizeof(*context));
    return tj_internal("tj_context_create: pthread_mutex_init failed");
  }
  atomic_init(&context->refs, 1);
  context->allocator = allocator;
  context->diagnostic_fn = options->diagnostic_fn;
  context->diagnostic_user_data = options->diagnostic_user_data;
  int32_t retain = options->retain_compiled;
  context->retain_compiled = retain < 0 ? 0 : retain > 64 ? 64 : retain;
  // Last: a misspelled setting warns through the channel just set up.
  tj_status_t status = tj_settings_read(options, tj_env_getenv, NULL, allocator,
                                        context, &context->settings);
  if (status) {
    tj_background_deinitialize(&context->background);
    pthread_mutex_destroy(&context->diagnostic_mutex);
    pthread_mutex_destroy(&context->extension_mutex);
    tj_free(allocator, context, sizeof(*context));
    return status;
  }
  *out_context = context;
  return NULL;
}

void tj_context_retain(tj_context_t* context) {
  atomic_fetch_add_explicit(&context->refs, 1, memory_order_relaxed);
}

void tj_context_release(tj_context_t* context) {
  if (!context ||
      atomic_fetch_sub_explicit(&context->refs, 1, memory_order_acq_rel) != 1) {
    return;
  }
  // A job still queued (the host skipped tj_context_destroy) points at
  // executables, all released by now: before the extensions go.
  tj_background_deinitialize(&context->background);
  // Later layers may depend on earlier ones: destroy in reverse order.
  for (int i = TJ_CONTEXT_EXTENSION_COUNT_; i-- > 0;) {
    if (context->extension_state[i]) {
      context->extension_destroy[i](context->extension_state[i]);
    }
  }
  tj_settings_deinitialize(&context->settings, context->allocator);
  pthread_mutex_destroy(&context->extension_mutex);
  pthread_mutex_destroy(&context->diagnostic_mutex);
  tj_free(context->allocator, context, sizeof(*context));
}

void tj_context_destroy(tj_context_t* context) {
  if (!context) return;
  // Tuning jobs: queued ones dropped, the running one finished, the thread
  // joined, before the host's channel closes (a job logs as it ends).
  tj_background_close(&context->background);
  // The host's diagnostic_fn is not called from here on (messages of the
  // executables that outlive this call are dropped).
  pthread_mutex_lock(&context->diagnostic_mutex);
  context->host_gone = true;
  pthread_mutex_unlock(&context->diagnostic_mutex);
  tj_context_release(context);
}

tj_status_t tj_context_extension(tj_context_t* context,
                                 tj_context_extension_t id,
                                 tj_extension_create_fn create,
                                 tj_extension_destroy_fn destroy,
                                 void** out_state) {
  *out_state = NULL;
  if ((unsigned)id >= TJ_CONTEXT_EXTENSION_COUNT_) {
    return tj_internal("tj_context_extension: bad slot %d", (int)id);
  }
  tj_status_t status = NULL;
  pthread_mutex_lock(&context->extension_mutex);
  if (!context->extension_state[id]) {
    void* state = NULL;
    status = create(context, &state);
    if (!status) {
      context->extension_state[id] = state;
      context->extension_destroy[id] = destroy;
    }
  }
  *out_state = context->extension_state[id];
  pthread_mutex_unlock(&context->extension_mutex);
  return status;
}

void tj_context_free_string(tj_context_t* context, char* string) {
  if (context && string) tj_free_string(context->allocator, string);
}

int32_t tj_context_retain_compiled(const tj_context_t* context) {
  return context->retain_compiled;
}

tj_background_t* tj_context_background(tj_context_t* context) {
  return &context->background;
}

void tj_context_wait_autotune(tj_context_t* context) {
  if (context) tj_context_background_wait(context);
}

tj_allocator_t tj_context_allocator(const tj_context_t* context) {
  return context->allocator;
}

const tj_settings_t* tj_context_settings(const tj_context_t* context) {
  static const tj_settings_t kNone;
  return context ? &context->settings : &kNone;
}

void tj_context_diagnosticv(const tj_context_t* context, tj_severity_t severity,
                            const char* format, va_list args) {
  char message[1024];
  int n = vsnprintf(message, sizeof(message), format, args);
  if (n < 0) return;
  size_t length = (size_t)n < sizeof(message) ? (size_t)n : sizeof(message) - 1;
  if (context && context->diagnostic_fn) {
    pthread_mutex_lock((pthread_mutex_t*)&context->diagnostic_mutex);
    if (!context->host_gone) {
      context->diagnostic_fn(severity, message, length,
                             context->diagnostic_user_data);
    }
    pthread_mutex_unlock((pthread_mutex_t*)&context->diagnostic_mutex);
  } else {
    fprintf(stderr, "tensorjit %s: %.*s\n",
            severity == TJ_SEVERITY_WARNING ? "warning" : "remark", (int)length,
            message);
  }
}

void tj_context_diagnostic(const tj_context_t* context, tj_severity_t severity,
                           const char* format, ...) {
  va_list args;
  va_start(args, format);
  tj_context_diagnosticv(context, severity, format, args);
  va_end(args);
}
