// The context's settings, read from the options and the environment in one
// place; TJ_LOG parsed; the dump directory's writer (lib/env.h).

#include "lib/env.h"

#include <errno.h>
#include <unistd.h>
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
    {"profile", TJ_LOG_PROFILE},
};

const char* tj_log_flag_names(void) {
  return "passes, fusion, recompiles, cache, graph_breaks, autotune, profile, "
         "all";
}

void tj_warn_once(const tj_context_t* context, _Atomic(bool)* once,
                  const char* format, ...) {
  if (atomic_exchange(once, true)) return;
  va_list args;
  va_start(args, format);
  tj_context_diagnosticv(context, TJ_SEVERITY_WARNING, format, args);
  va_end(args);
}

static const struct {
  const char* env;     // the variable (NULL: resolved by hand)
  const char* option;  // the tj_context_options_t field, for messages
} kSettings[TJ_SETTING_COUNT_] = {
    [TJ_SETTING_LOG] = {"TJ_LOG", "tj_context_options_t.log"},
    [TJ_SETTING_PRINT_AFTER] = {"TJ_PRINT_AFTER",
                                "tj_context_options_t.print_after"},
    [TJ_SETTING_DUMP_DIR] = {"TJ_DUMP_DIR", "tj_context_options_t.dump_dir"},
    [TJ_SETTING_X86_ISA] = {"TJ_X86_ISA", "tj_context_options_t.x86_isa"},
    [TJ_SETTING_CACHE_DIR] = {NULL, "tj_context_options_t.cache_dir"},
    [TJ_SETTING_OPENBLAS] = {"TJ_OPENBLAS", "tj_context_options_t.openblas"},
    [TJ_SETTING_CUDA_GEMM_CANDIDATE] =
        {"TJ_CUDA_GEMM_CANDIDATE", "tj_context_options_t.cuda_gemm_candidate"},
    [TJ_SETTING_BISECT] = {"TJ_BISECT", "TJ_BISECT"},
    [TJ_SETTING_NVPTX_ATTENTION] = {"TJ_NVPTX_ATTENTION", "TJ_NVPTX_ATTENTION"},
    [TJ_SETTING_CUDA_WQGEMM] = {"TJ_CUDA_WQGEMM", "TJ_CUDA_WQGEMM"},
    [TJ_SETTING_ATTENTION_LSE] = {"TJ_ATTENTION_LSE", "TJ_ATTENTION_LSE"},
    [TJ_SETTING_NVPTX_CONV] = {"TJ_NVPTX_CONV", "TJ_NVPTX_CONV"},
    [TJ_SETTING_DUAL_GEMM] = {"TJ_DUAL_GEMM", "TJ_DUAL_GEMM"},
    [TJ_SETTING_CUBLASLT_RESIDUAL] = {"TJ_CUBLASLT_RESIDUAL",
                                      "TJ_CUBLASLT_RESIDUAL"},
    [TJ_SETTING_ATTENTION_VIEWS] = {"TJ_ATTENTION_VIEWS", "TJ_ATTENTION_VIEWS"},
    [TJ_SETTING_CONCAT_SELECT] = {"TJ_CONCAT_SELECT", "TJ_CONCAT_SELECT"},
    [TJ_SETTING_SPLIT_UNLOWERED] = {"TJ_SPLIT_UNLOWERED", "TJ_SPLIT_UNLOWERED"},
    [TJ_SETTING_X86_CONV] = {"TJ_X86_CONV", "TJ_X86_CONV"},
    [TJ_SETTING_LAYOUT] = {"TJ_LAYOUT", "TJ_LAYOUT"},
    [TJ_SETTING_NATIVE_TOPK] = {"TJ_NATIVE_TOPK", "TJ_NATIVE_TOPK"},
    [TJ_SETTING_LIBDEVICE] = {NULL, "TJ_LIBDEVICE"},
    [TJ_SETTING_CUDA_COMPILE_THREADS] = {"TJ_CUDA_COMPILE_THREADS",
                                         "TJ_CUDA_COMPILE_THREADS"},
    [TJ_SETTING_NVJITLINK] = {"TJ_NVJITLINK", "TJ_NVJITLINK"},
    [TJ_SETTING_NVPTX_ROWS] = {"TJ_NVPTX_ROWS", "TJ_NVPTX_ROWS"},
};

static const char* source_of(const tj_settings_t* settings,
                             tj_setting_t setting) {
  if (settings->from_options[setting]) return kSettings[setting].option;
  if (kSettings[setting].env) return kSettings[setting].env;
  return setting == TJ_SETTING_LIBDEVICE
             ? "TJ_LIBDEVICE, CUDA_HOME, CUDA_PATH or the toolkit's paths"
             : "TJ_CACHE_DIR, XDG_CACHE_HOME or HOME";
}

const char* tj_env_getenv(void* user_data, const char* name) {
  (void)user_data;
  return getenv(name);
}

static _Atomic(bool) g_warned_log;

static uint32_t parse_log(const tj_context_t* context, const char* source,
                          const char* list) {
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
                   "%s: \"%.*s\" is not a log category and is ignored; "
                   "the categories are %s",
                   source, (int)(len < 64 ? len : 64), s, tj_log_flag_names());
    }
    s = end ? end + 1 : NULL;
  }
  return flags;
}

// The default cache directory from the environment: $TJ_CACHE_DIR ("" too:
// it disables, as the option does), else $XDG_CACHE_HOME/tensorjit, else
// ~/.cache/tensorjit, else "" (no disk cache).
static tj_status_t default_cache_dir(tj_env_lookup_fn lookup, void* user_data,
                                     tj_allocator_t allocator, char** out) {
  const char* dir = lookup(user_data, "TJ_CACHE_DIR");
  const char* suffix = "";
  if (!dir) {
    dir = lookup(user_data, "XDG_CACHE_HOME");
    suffix = "/tensorjit";
    if (!dir || dir[0] != '/') {
      dir = lookup(user_data, "HOME");
      suffix = "/.cache/tensorjit";
    }
    if (!dir || dir[0] != '/') dir = suffix = "";
  }
  size_t a = strlen(dir), b = strlen(suffix);
  char* s = tj_alloc(allocator, a + b + 1);
  if (!s) return tj_status_oom();
  memcpy(s, dir, a);
  memcpy(s + a, suffix, b + 1);
  *out = s;
  return NULL;
}

// libdevice from the environment (tj_setting_t's TJ_SETTING_LIBDEVICE):
// $TJ_LIBDEVICE as it is, else the first toolkit path that exists.
static tj_status_t default_libdevice(tj_env_lookup_fn lookup, void* user_data,
                                     tj_allocator_t allocator, char** out) {
  static const char kFile[] = "/nvvm/libdevice/libdevice.10.bc";
  const char* v = lookup(user_data, "TJ_LIBDEVICE");
  char path[4096] = "";
  if (v) {
    snprintf(path, sizeof(path), "%s", v);
  } else {
    const char* roots[] = {lookup(user_data, "CUDA_HOME"),
                           lookup(user_data, "CUDA_PATH"), "/usr/local/cuda"};
    for (size_t i = 0; i < TJ_ARRAY_SIZE(roots) && !path[0]; ++i) {
      int n = roots[i] && roots[i][0]
                  ? snprintf(path, sizeof(path), "%s%s", roots[i], kFile)
                  : -1;
      if (n < 0 || (size_t)n >= sizeof(path) || access(path, R_OK) != 0)
        path[0] = '\0';
    }
    static const char kDebian[] =
        "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc";
    if (!path[0] && access(kDebian, R_OK) == 0)
      snprintf(path, sizeof(path), "%s", kDebian);
  }
  return (*out = tj_strdup(allocator, path)) ? NULL : tj_status_oom();
}

static const char* option_value(const tj_context_options_t* options,
                                tj_setting_t setting) {
  if (!options) return NULL;
  switch (setting) {
    case TJ_SETTING_LOG:
      return options->log;
    case TJ_SETTING_PRINT_AFTER:
      return options->print_after;
    case TJ_SETTING_DUMP_DIR:
      return options->dump_dir;
    case TJ_SETTING_X86_ISA:
      return options->x86_isa;
    case TJ_SETTING_CACHE_DIR:
      return options->cache_dir;
    case TJ_SETTING_OPENBLAS:
      return options->openblas;
    case TJ_SETTING_CUDA_GEMM_CANDIDATE:
      return options->cuda_gemm_candidate;
    case TJ_SETTING_BISECT:  // the environment only
    case TJ_SETTING_NVPTX_ATTENTION:
    case TJ_SETTING_CUDA_WQGEMM:
    case TJ_SETTING_ATTENTION_LSE:
    case TJ_SETTING_NVPTX_CONV:
    case TJ_SETTING_DUAL_GEMM:
    case TJ_SETTING_CUBLASLT_RESIDUAL:
    case TJ_SETTING_ATTENTION_VIEWS:
    case TJ_SETTING_CONCAT_SELECT:
    case TJ_SETTING_SPLIT_UNLOWERED:
    case TJ_SETTING_X86_CONV:
    case TJ_SETTING_LAYOUT:
    case TJ_SETTING_NATIVE_TOPK:
    case TJ_SETTING_LIBDEVICE:
    case TJ_SETTING_CUDA_COMPILE_THREADS:
    case TJ_SETTING_NVJITLINK:
    case TJ_SETTING_NVPTX_ROWS:
      return NULL;
    case TJ_SETTING_COUNT_:
      break;
  }
  return NULL;
}

tj_status_t tj_settings_read(const tj_context_options_t* options,
                             tj_env_lookup_fn lookup, void* user_data,
                             tj_allocator_t allocator,
                             const tj_context_t* context,
                             tj_settings_t* settings) {
  memset(settings, 0, sizeof(*settings));
  tj_status_t status = NULL;
  for (int i = 0; i < TJ_SETTING_COUNT_ && !status; ++i) {
    const char* value = option_value(options, (tj_setting_t)i);
    settings->from_options[i] = value != NULL;
    if (value) {
      if (!(settings->values[i] = tj_strdup(allocator, value))) {
        status = tj_status_oom();
      }
    } else if (i == TJ_SETTING_CACHE_DIR) {
      status =
          default_cache_dir(lookup, user_data, allocator, &settings->values[i]);
    } else if (i == TJ_SETTING_LIBDEVICE) {
      status =
          default_libdevice(lookup, user_data, allocator, &settings->values[i]);
    } else if ((value = lookup(user_data, kSettings[i].env)) != NULL) {
      if (!(settings->values[i] = tj_strdup(allocator, value))) {
        status = tj_status_oom();
      }
    }
  }
  if (status) {
    tj_settings_deinitialize(settings, allocator);
    return status;
  }
  settings->log_flags = parse_log(context, source_of(settings, TJ_SETTING_LOG),
                                  settings->values[TJ_SETTING_LOG]);
  return NULL;
}

void tj_settings_deinitialize(tj_settings_t* settings,
                              tj_allocator_t allocator) {
  for (int i = 0; i < TJ_SETTING_COUNT_; ++i) {
    tj_free_string(allocator, settings->values[i]);
  }
  memset(settings, 0, sizeof(*settings));
}

const char* tj_setting(const tj_context_t* context, tj_setting_t setting) {
  return tj_context_settings(context)->values[setting];
}

const char* tj_setting_source(const tj_context_t* context,
                              tj_setting_t setting) {
  return source_of(tj_context_settings(context), setting);
}

uint32_t tj_log_flags(const tj_context_t* context) {
  return tj_context_settings(context)->log_flags;
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
                 "%s: cannot write %.200s/%.200s (%s); the compile goes on "
                 "without its dumps",
                 tj_setting_source(context, TJ_SETTING_DUMP_DIR), dir,
                 file_name, strerror(err));
  }
}
