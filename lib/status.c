// tj_status_t: NULL is OK; otherwise a heap block holding a code and a
// message. Statuses use the C library's malloc, not a context allocator: a
// status must be creatable when the context allocator is the thing failing,
// and freeable without knowing which context made it. OUT_OF_MEMORY (and any
// status whose message cannot be allocated) is a static object, so reporting
// allocation failure never allocates.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base.h"

struct tj_status_s {
  tj_status_code_t code;
  bool is_static;
  const char* message;  // static text, or the bytes right after the struct
};

// One static status per code, for messages that could not be allocated.
static struct tj_status_s g_static_statuses[] = {
    {TJ_STATUS_OK, true, ""},
    {TJ_STATUS_INVALID_ARGUMENT, true, "invalid argument"},
    {TJ_STATUS_OUT_OF_MEMORY, true, "out of memory"},
    {TJ_STATUS_UNSUPPORTED, true, "unsupported"},
    {TJ_STATUS_BACKEND_FAILURE, true, "backend failure"},
    {TJ_STATUS_INTERNAL, true, "internal error"},
};

static tj_status_t static_status(tj_status_code_t code) {
  if ((size_t)code >= TJ_ARRAY_SIZE(g_static_statuses))
    code = TJ_STATUS_INTERNAL;
  return &g_static_statuses[code];
}

tj_status_t tj_status_oom(void) {
  return static_status(TJ_STATUS_OUT_OF_MEMORY);
}

tj_status_t tj_status_makev(tj_status_code_t code, const char* format,
                            va_list args) {
  if (code == TJ_STATUS_OK) code = TJ_STATUS_INTERNAL;
  if (code == TJ_STATUS_OUT_OF_MEMORY) return tj_status_oom();
  va_list copy;
  va_copy(copy, args);
  int needed = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (needed < 0) return static_status(code);
  struct tj_status_s* s = malloc(sizeof(*s) + (size_t)needed + 1);
  if (!s) return static_status(code);
  s->code = code;
  s->is_static = false;
  char* text = (char*)(s + 1);
  vsnprintf(text, (size_t)needed + 1, format, args);
  s->message = text;
  return s;
}

tj_status_t tj_status_make(tj_status_code_t code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  tj_status_t s = tj_status_makev(code, format, args);
  va_end(args);
  return s;
}

tj_status_t tj_status_clone(tj_status_t status) {
  if (!status) return NULL;
  if (status->is_static) return status;
  return tj_status_make(status->code, "%s", status->message);
}

tj_status_t tj_status_annotate(tj_status_t status, const char* format, ...) {
  if (!status || status->is_static) return status;
  char prefix[256];
  va_list args;
  va_start(args, format);
  vsnprintf(prefix, sizeof(prefix), format, args);
  va_end(args);
  tj_status_t annotated =
      tj_status_make(status->code, "%s: %s", prefix, status->message);
  if (annotated->is_static) return status;  // keep the more useful message
  tj_status_free(status);
  return annotated;
}

tj_status_t tj_status_join(tj_status_t base, tj_status_t cleanup) {
  if (base) {
    tj_status_free(cleanup);
    return base;
  }
  return cleanup;
}

tj_status_code_t tj_status_code(tj_status_t status) {
  return status ? status->code : TJ_STATUS_OK;
}

const char* tj_status_message(tj_status_t status) {
  return status ? status->message : "";
}

const char* tj_status_code_name(tj_status_code_t code) {
  switch (code) {
    case TJ_STATUS_OK:
      return "OK";
    case TJ_STATUS_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case TJ_STATUS_OUT_OF_MEMORY:
      return "OUT_OF_MEMORY";
    case TJ_STATUS_UNSUPPORTED:
      return "UNSUPPORTED";
    case TJ_STATUS_BACKEND_FAILURE:
      return "BACKEND_FAILURE";
    case TJ_STATUS_INTERNAL:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

void tj_status_free(tj_status_t status) {
  if (status && !status->is_static) free(status);
}
