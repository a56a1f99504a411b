// The library's diagnostic environment variables, parsed in one place.
//
// TJ_LOG is a comma list of categories (or "all"); every layer asks
// tj_log_flags instead of reading the variable itself, so the spelling,
// "all" and the warning about an unknown name are the same everywhere.

#ifndef TJ_LIB_ENV_H_
#define TJ_LIB_ENV_H_

#include "lib/base.h"

typedef enum tj_log_flag_e {
  TJ_LOG_PASSES = 1u << 0,        // per-pass time and node counts
  TJ_LOG_FUSION = 1u << 1,        // fusion decisions and refusals
  TJ_LOG_RECOMPILES = 1u << 2,    // guard failures and recompiles
  TJ_LOG_CACHE = 1u << 3,         // kernel cache hits and misses
  TJ_LOG_GRAPH_BREAKS = 1u << 4,  // groups run on the host
  TJ_LOG_AUTOTUNE = 1u << 5,      // candidates timed and decisions
} tj_log_flag_t;

// The TJ_LOG categories enabled now. A name that is not a category is
// ignored with one warning per process, listing the valid names, through
// |context|'s diagnostic channel (stderr when it has none; |context| may
// be NULL).
uint32_t tj_log_flags(const tj_context_t* context);

// The category names, comma-separated, for messages.
const char* tj_log_flag_names(void);

// Sends a warning through |context|'s channel the first time |*once| is
// passed (|*once| then becomes true; thread-safe): for a misspelled
// environment variable, reported once per process rather than per compile.
void tj_warn_once(const tj_context_t* context, _Atomic(bool)* once,
                  const char* format, ...) TJ_PRINTF_LIKE(3, 4);

// Writes |text| to |dir|/|file_name| for TJ_DUMP_DIR, creating |dir| and
// its parents (mode 0755) when missing. A diagnostic never fails a
// compile: when the file cannot be written this warns (once per process)
// through |context|'s channel with the reason, and returns.
void tj_dump_write(const tj_context_t* context, const char* dir,
                   const char* file_name, const char* text);

#endif  // TJ_LIB_ENV_H_
