// The context's settings (tj_context_options_t's diagnostic and debugging
// strings), and the one place the library reads the environment: when a
// context is created, each setting the options leave NULL comes from its
// environment variable (TJ_LOG, TJ_PRINT_AFTER, TJ_DUMP_DIR, TJ_X86_ISA,
// TJ_OPENBLAS, TJ_CUDA_GEMM_CANDIDATE, TJ_BISECT, TJ_NVPTX_ATTENTION, the
// other A/B switches of tj_setting_t, and TJ_CACHE_DIR /
// XDG_CACHE_HOME / HOME for the cache directory). Every layer asks the context
// (tj_setting, tj_log_flags), never getenv.
//
// TJ_LOG is a comma list of categories (or "all"), parsed here once, so the
// spelling, "all" and the warning about an unknown name are the same
// everywhere.

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
  TJ_LOG_PROFILE = 1u << 6,       // tj_executable_profile's top-N table
} tj_log_flag_t;

typedef enum tj_setting_e {
  TJ_SETTING_LOG = 0,          // TJ_LOG
  TJ_SETTING_PRINT_AFTER = 1,  // TJ_PRINT_AFTER
  TJ_SETTING_DUMP_DIR = 2,     // TJ_DUMP_DIR
  TJ_SETTING_X86_ISA = 3,      // TJ_X86_ISA
  TJ_SETTING_CACHE_DIR = 4,    // the resolved default kernel cache directory
  TJ_SETTING_OPENBLAS = 5,     // TJ_OPENBLAS
  TJ_SETTING_CUDA_GEMM_CANDIDATE = 6,  // TJ_CUDA_GEMM_CANDIDATE
  TJ_SETTING_BISECT = 7,  // TJ_BISECT (environment only; the compile
                          // option tj_compile_options_t.bisect wins)
  // TJ_NVPTX_ATTENTION (environment only): "mma", "wgmma" (the default
  // on sm_90a) or "wgmma-wide", the CUDA f16/bf16 attention forward's
  // kernel (tj_nvptx_attention_kernel_t), for A/B comparisons and as a
  // way back; the backward's kernels likewise (fa3bwd: "mma" keeps them
  // on mma.sync).
  TJ_SETTING_NVPTX_ATTENTION = 8,
  TJ_SETTING_CUDA_WQGEMM = 9,  // TJ_CUDA_WQGEMM (environment only)
  // TJ_ATTENTION_LSE (environment only): "separate" keeps attention_lse a
  // kernel of its own where the target's attention kernel could write it
  // (tj_pass_ctx_t.attention_lse_output), for A/B comparisons.
  TJ_SETTING_ATTENTION_LSE = 10,
  // TJ_NVPTX_CONV (environment only): "mma", "wgmma" or "wgmma64", the
  // CUDA TF32 conv's kernel (tj_nvptx_conv_kernel_t), for A/B comparisons
  // and as a way back; "wgmma-trunc" and "wgmma64-trunc" the wgmma ones
  // with operands truncated to TF32, not rounded (measuring its cost).
  TJ_SETTING_NVPTX_CONV = 11,
  // TJ_DUAL_GEMM (environment only): "off" keeps the two matmuls of a
  // dual GEMM (tj_pass_ctx_t.dual_gemm; swiglu, issue 14) kernels of
  // their own, for A/B comparisons and as a way back.
  TJ_SETTING_DUAL_GEMM = 12,
  // TJ_CUBLASLT_RESIDUAL (environment only): "off" keeps a residual added
  // to a GEMM out of cuBLASLt's C (beta 1) on CUDA: the cuBLASLt candidate
  // then writes a temporary that an epilogue kernel adds the residual to
  // (issue 14), for A/B comparisons.
  TJ_SETTING_CUBLASLT_RESIDUAL = 13,
  // TJ_ATTENTION_VIEWS (environment only): "off" keeps q, k and v that
  // attention reads through a transpose copied into memory of their own
  // by a kernel (tj_pass_ctx_t.attention_views; issue 14), for A/B
  // comparisons.
  TJ_SETTING_ATTENTION_VIEWS = 14,
  // TJ_CONCAT_SELECT (environment only): "off" cuts every concat into
  // boxes, one kernel a box, where one whose inputs are pointwise
  // functions of the same loads is one select (tj_pass_ctx_t.concat_boxes;
  // rope14, issue 14), for A/B comparisons.
  TJ_SETTING_CONCAT_SELECT = 15,
  // TJ_SPLIT_UNLOWERED (environment only): "off" runs a fusion group that
  // no kernel template lowers on the host (the reference semantics), as
  // before the driver split such groups into kernels of their own nodes
  // (backends/compile.c, split_unlowered; issue 15), for A/B comparisons.
  TJ_SETTING_SPLIT_UNLOWERED = 16,
  // TJ_X86_CONV (environment only): "ocvec" puts every conv the ocvec
  // variant can take (tj_kir_conv_schedule_t.ocvec: a constant weight,
  // one or two spatial axes, strides 1 to 4, not 1x1) on it, "packed"
  // none (the shifted and packed variants by their rules), for A/B
  // comparisons and as a way back (issue 15, x86conv3).
  TJ_SETTING_X86_CONV = 17,
  // TJ_NATIVE_TOPK (environment only): "off" runs an argtopk that no
  // kernel template lowers (rows past decompose's native forms, rows of
  // symbolic length) on the reference interpreter, a graph break, instead
  // of argtopk's native host kernel (backends/runtime/host_topk.h;
  // lastbreak, issue 15), and decompose then takes the long rows with
  // 4 < k <= 16 that x86 would leave to that kernel; for A/B comparisons
  // and for the tests of the graph-break path.
  TJ_SETTING_NATIVE_TOPK = 18,
  // TJ_LAYOUT (environment only): "off" leaves the transposes where the
  // graph has them, where the layout pass sinks them through elementwise
  // ops to their inverses (tj_pass_ctx_t.layout; issue 15), for A/B
  // comparisons.
  TJ_SETTING_LAYOUT = 19,
  // NVIDIA's libdevice (libdevice.10.bc), whose f64 functions the CUDA
  // kernels link for what x86 takes from the C library (tanh, erf, erfc,
  // sin, cos, asin, acos, atan, pow in f64): $TJ_LIBDEVICE (environment
  // only; "" goes without), else the first file that exists of
  // $CUDA_HOME/nvvm/libdevice/libdevice.10.bc, the same under $CUDA_PATH
  // and /usr/local/cuda, and Debian's /usr/lib/nvidia-cuda-toolkit/
  // libdevice/libdevice.10.bc; "" when none is found (such a group is then
  // a graph break).
  TJ_SETTING_LIBDEVICE = 20,
  // TJ_CUDA_COMPILE_THREADS (environment only): the threads a CUDA
  // program's kernel chunks compile on (jit/nvptx.h's
  // tj_nvptx_module_compile_chunks; issue 14): "auto" the CPUs the
  // process may run on, a number that many (1: one after another, for
  // measuring); unset, "" or "module" the one module of every kernel
  // compiled at once and loaded by the driver's JIT (the default until the
  // chunks have run on a GPU).
  TJ_SETTING_CUDA_COMPILE_THREADS = 21,
  // TJ_NVJITLINK (environment only): the nvJitLink that assembles a CUDA
  // program's chunks to cubins (backends/cuda/nvjitlink.h): unset or ""
  // libnvJitLink.so.13 (then .12), "off" none (the driver's JIT
  // assembles them, as where the library is missing), else its path.
  TJ_SETTING_NVJITLINK = 22,
  // TJ_NVPTX_ROWS (environment only): "streaming" leaves CUDA row kernels
  // without the staged path (jit/nvptx.h's tj_nvptx_options_t.
  // row_stage_off; rows32k, issue 14), so that rows past the registers
  // stream from memory once a phase, for A/B comparisons and as the way
  // back; "staged" or unset the default; "staged-512" and "staged-1024"
  // stage with blocks of that many threads, not 256 (A/B comparisons).
  TJ_SETTING_NVPTX_ROWS = 23,
  TJ_SETTING_COUNT_,
} tj_setting_t;

// A context's settings: each value NULL (unset) or a string owned here.
typedef struct tj_settings_t {
  char* values[TJ_SETTING_COUNT_];
  bool from_options[TJ_SETTING_COUNT_];  // else from the environment
  uint32_t log_flags;                    // TJ_SETTING_LOG parsed
} tj_settings_t;

// Looks up environment variable |name|: NULL when it is not set. The value
// is borrowed until the next call.
typedef const char* (*tj_env_lookup_fn)(void* user_data, const char* name);

// getenv as a tj_env_lookup_fn (|user_data| unused).
const char* tj_env_getenv(void* user_data, const char* name);

// Fills |settings| from |options| (non-NULL strings win, "" included) and,
// for the rest, from |lookup|. The cache directory resolves to
// $TJ_CACHE_DIR, else $XDG_CACHE_HOME/tensorjit, else
// $HOME/.cache/tensorjit (the last two only for absolute paths), else ""
// (no disk cache). A TJ_LOG name that is not a category is ignored with
// one warning per process through |context|'s channel (which may be
// NULL). Strings are copied with |allocator|; OUT_OF_MEMORY leaves
// nothing allocated. tj_context_create calls it with tj_env_getenv.
tj_status_t tj_settings_read(const tj_context_options_t* options,
                             tj_env_lookup_fn lookup, void* user_data,
                             tj_allocator_t allocator,
                             const tj_context_t* context,
                             tj_settings_t* settings);
void tj_settings_deinitialize(tj_settings_t* settings,
                              tj_allocator_t allocator);

// |context|'s settings (lib/context.c); NULL gives empty settings.
const tj_settings_t* tj_context_settings(const tj_context_t* context);

// The value of |setting| for |context|: NULL when unset or |context| is
// NULL; "" when set to nothing.
const char* tj_setting(const tj_context_t* context, tj_setting_t setting);

// Where |setting|'s value came from, for messages: "TJ_LOG" or
// "tj_context_options_t.log", etc.
const char* tj_setting_source(const tj_context_t* context,
                              tj_setting_t setting);

// The TJ_LOG categories enabled in |context| (0 for NULL).
uint32_t tj_log_flags(const tj_context_t* context);

// The category names, comma-separated, for messages.
const char* tj_log_flag_names(void);

// Sends a warning through |context|'s channel the first time |*once| is
// passed (|*once| then becomes true; thread-safe): for a misspelled
// environment variable, reported once per process rather than per compile.
void tj_warn_once(const tj_context_t* context, _Atomic(bool)* once,
                  const char* format, ...) TJ_PRINTF_LIKE(3, 4);

// Writes |text| to |dir|/|file_name| for the dump directory, creating |dir| and
// its parents (mode 0755) when missing. A diagnostic never fails a
// compile: when the file cannot be written this warns (once per process)
// through |context|'s channel with the reason, and returns.
void tj_dump_write(const tj_context_t* context, const char* dir,
                   const char* file_name, const char* text);

#endif  // TJ_LIB_ENV_H_
