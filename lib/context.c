// tj_context_t: the allocator and diagnostic channel shared by a host's
// graphs and executables; plus version and dtype facts.

#include <stdio.h>
#include <string.h>

#include "lib/base.h"

struct tj_context_t {
  tj_allocator_t allocator;
  tj_diagnostic_fn diagnostic_fn;
  void* diagnostic_user_data;
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
    "f32", "f16", "bf16", "f64", "i8", "i32", "i64", "bool"};
static const size_t kDtypeSizes[TJ_DTYPE_COUNT_] = {4, 2, 2, 8, 1, 4, 8, 1};

const char* tj_dtype_name(tj_dtype_t dtype) {
  return (unsigned)dtype < TJ_DTYPE_COUNT_ ? kDtypeNames[dtype] : "?";
}

size_t tj_dtype_size(tj_dtype_t dtype) {
  return (unsigned)dtype < TJ_DTYPE_COUNT_ ? kDtypeSizes[dtype] : 0;
}

void tj_context_options_initialize(tj_context_options_t* options) {
  memset(options, 0, sizeof(*options));
  options->allocator = tj_allocator_system();
}

tj_status_t tj_context_create(const tj_context_options_t* options,
                              tj_context_t** out_context) {
  *out_context = NULL;
  tj_context_options_t defaults;
  tj_context_options_initialize(&defaults);
  if (!options) options = &defaults;
  tj_allocator_t allocator = options->allocator;
  if (!allocator.fn) allocator = tj_allocator_system();
  tj_context_t* context = tj_alloc(allocator, sizeof(*context));
  if (!context) return tj_status_oom();
  context->allocator = allocator;
  context->diagnostic_fn = options->diagnostic_fn;
  context->diagnostic_user_data = options->diagnostic_user_data;
  *out_context = context;
  return NULL;
}

void tj_context_destroy(tj_context_t* context) {
  if (!context) return;
  tj_free(context->allocator, context, sizeof(*context));
}

void tj_context_free_string(tj_context_t* context, char* string) {
  if (context && string) tj_free_string(context->allocator, string);
}

tj_allocator_t tj_context_allocator(const tj_context_t* context) {
  return context->allocator;
}

void tj_context_diagnostic(const tj_context_t* context, tj_severity_t severity,
                           const char* format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  if (n < 0) return;
  size_t length = (size_t)n < sizeof(message) ? (size_t)n : sizeof(message) - 1;
  if (context && context->diagnostic_fn) {
    context->diagnostic_fn(severity, message, length, context->diagnostic_user_data);
  } else {
    fprintf(stderr, "tensorjit %s: %.*s\n",
            severity == TJ_SEVERITY_WARNING ? "warning" : "remark", (int)length,
            message);
  }
}
