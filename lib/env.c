// TJ_LOG, parsed in one place, and TJ_DUMP_DIR's writer (lib/env.h).

#include "lib/env.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/fs.h"

static const struct {
  const char* name;
  uint32_t flag;
} kLogNames[] = {
    {"passes", TJ_LOG_PASSES},
    {"fusion", TJ_LOG_FUSION},
    {"recompiles", TJ_LOG_RECOMPILES},
    {"cache", TJ_LOG_CACHE},
    {"graph_breaks", TJ_LOG_GRAPH_BREAKS},
    {"autotune", TJ_LOG_AUTOTUNE},
};

const char* tj_log_flag_names(void) {
  return "passes, fusion, recompiles, cache, graph_breaks, autotune, all";
}

void tj_warn_once(const tj_context_t* context, _Atomic(bool)* once,
                  const char* format, ...) {
  if (atomic_exchange(once, true)) return;
  va_list args;
  va_start(args, format);
  tj_context_diagnosticv(context, TJ_SEVERITY_WARNING, format, args);
  va_end(args);
}

static _Atomic(bool) g_warned_log;

uint32_t tj_log_flags(const tj_context_t* context) {
  const char* list = getenv("TJ_LOG");
  uint32_t flags = 0;
  for (const char* s = list; s && *s;) {
    const char* end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    bool known = len == 0;  // "a,,b" and a trailing comma are harmless
    if (len == 3 && memcmp(s, "all", 3) == 0) {
      flags = ~0u;
      known = true;
    }
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kLogNames) && !known; ++i) {
      if (strlen(kLogNames[i].name) == len &&
          memcmp(s, kLogNames[i].name, len) == 0) {
        flags |= kLogNames[i].flag;
        known = true;
      }
    }
    if (!known) {
      tj_warn_once(context, &g_warned_log,
                   "TJ_LOG: \"%.*s\" is not a log category and is ignored; "
                   "the categories are %s",
                   (int)(len < 64 ? len : 64), s, tj_log_flag_names());
    }
    s = end ? end + 1 : NULL;
  }
  return flags;
}

static _Atomic(bool) g_warned_dump;

void tj_dump_write(const tj_context_t* context, const char* dir,
                   const char* file_name, const char* text) {
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/%s", dir, file_name);
  int err = n < 0 || (size_t)n >= sizeof(path) ? ENAMETOOLONG
                                               : tj_make_directories(dir, 0755);
  if (!err) {
    FILE* file = fopen(path, "w");
    if (!file) {
      err = errno;
    } else {
      bool ok = fputs(text, file) >= 0;
      if (!ok) err = errno ? errno : EIO;
      if (fclose(file) != 0 && !err) err = errno ? errno : EIO;
    }
  }
  if (err) {
    tj_warn_once(context, &g_warned_dump,
                 "TJ_DUMP_DIR: cannot write %.200s/%.200s (%s); the compile "
                 "goes on without its dumps",
                 dir, file_name, strerror(err));
  }
}
