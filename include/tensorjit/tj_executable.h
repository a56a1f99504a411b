// libtensorjit: compiling a finalized graph and running the result.
// Include <tensorjit.h> rather than this file directly.

#ifndef TENSORJIT_TJ_EXECUTABLE_H_
#define TENSORJIT_TJ_EXECUTABLE_H_

#include "tensorjit/tj_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Threads: the host's job system
//===----------------------------------------------------------------------===//

// One unit of parallel work: run tasks [begin, end) of a parallel loop.
typedef void (*tj_task_fn)(void* task_context, int64_t begin, int64_t end);

// A host-supplied parallel loop (a game engine's job system): run
// |task|(|task_context|, b, e) over disjoint ranges covering [0, |count|),
// possibly concurrently, and return when all are done. |grain| is a
// suggested minimum range length.
typedef void (*tj_parallel_for_fn)(void* user_data, int64_t count,
                                   int64_t grain, tj_task_fn task,
                                   void* task_context);

//===----------------------------------------------------------------------===//
// tj_compile_options_t
//===----------------------------------------------------------------------===//

typedef enum tj_target_e {
  TJ_TARGET_X86 = 0,        // LLVM's x86 back end through ORC (the default)
  TJ_TARGET_REFERENCE = 1,  // the reference interpreter (for checking)
  TJ_TARGET_CUDA = 2,       // NVPTX through the CUDA driver
} tj_target_t;

// When to compile exact-shape kernels beside the generic ones (x86 and
// CUDA alike; the reference target has no kernels). A shape whose
// exact-shape kernels the target refuses runs the generic ones.
typedef enum tj_specialize_e {
  TJ_SPECIALIZE_NEVER = 0,    // one generic kernel set serves every shape
  TJ_SPECIALIZE_AFTER_N = 1,  // after |specialize_after| runs of a shape
  TJ_SPECIALIZE_ALWAYS = 2,   // on the first run of each shape
} tj_specialize_t;

// Whether to time GEMM schedules on the first run of each shape bucket and
// keep the fastest (the decision is cached in memory and on disk with the
// kernels, so a second compile of the graph times nothing; TJ_LOG=autotune
// prints the tables). Every candidate computes the same values to f32
// rounding, but not bit for bit (summation orders differ), and a timed
// choice depends on the machine's load.
//  - x86: per GEMM and shape bucket (M rounded up to a power of two, with
//    the actual N, K and batch), the generated kernel, a few other tile and
//    block schedules, and OpenBLAS (opened with dlopen when present; the
//    epilogue then runs as a separate pass) on the run's inputs; bounded by
//    x86.autotune_budget_ms.
//  - CUDA: per tensor-core GEMM and shape bucket, the generated kernel's
//    tile schedules and cuBLASLt plus an epilogue kernel. Off: every GEMM
//    runs the generated kernel's default tile schedule.
typedef enum tj_autotune_e {
  // The target's default: off on x86 (so that runs are reproducible), on
  // for CUDA (where the default schedule is often far from the best).
  TJ_AUTOTUNE_DEFAULT = 0,
  TJ_AUTOTUNE_ON = 1,
  TJ_AUTOTUNE_OFF = 2,
  // As ON, but a run that meets an untuned (GEMM, shape bucket) does not
  // wait for the tuning: it runs the kernel that OFF would run (same
  // values, bit for bit) and queues a job on the context's background
  // thread (one thread, started by the first job; tj_context_destroy
  // drops queued jobs, waits for the running one and joins it; after it,
  // nothing more is queued). tj_context_wait_autotune waits for the jobs.
  // TJ_LOG=autotune logs each job queued, finished and swapped in. A job
  // that fails (a candidate that does not build, out of memory) is logged
  // and leaves the default kernel in place; it never fails a run.
  // Releasing an executable drops its queued jobs and waits for its
  // running one.
  //  - x86: the job times the candidates on a snapshot of the first run's
  //    input operands (the run pays for the copy, O(inputs), not
  //    O(M*N*K)) and publishes the decision (memory and disk cache too);
  //    later runs of the executable, and the jobs of later compiles (which
  //    then only read the cache), pick it up. The timing shares the cores
  //    with the caller's runs: its times carry their load, so a close race
  //    between candidates may go either way (it may anyway: see above).
  //    GEMMs whose operand extents the tuner cannot bound (a quantized B,
  //    a gather in the epilogue) are tuned synchronously, as under ON.
  //  - CUDA: the cold cost is compiling the candidates (LLVM and ptxas,
  //    ~0.2 s each), not timing them (milliseconds): the job compiles
  //    them, and the first run of the bucket after the job times them,
  //    synchronously, on the executable's stream with that run's own
  //    operands, as ON does (so the times are not disturbed by a second
  //    stream). If no job can be queued (the context is destroyed), the
  //    run tunes synchronously, as ON.
  // Available since: 0.1.
  TJ_AUTOTUNE_BACKGROUND = 3,
} tj_autotune_t;

// The part of tj_compile_options_t that only TJ_TARGET_X86 reads.
typedef struct tj_x86_compile_options_t {
  // Worker threads for x86 kernels; 0 means one per online CPU. With
  // |parallel_for| it only sizes the work: a kernel is cut into about 4
  // chunks per thread.
  int32_t num_threads;
  // When set, kernels run their parallel loops through the host's job system
  // instead of libtensorjit's own threads. It may be called from several
  // threads at once when several runs of one executable are in flight.
  tj_parallel_for_fn parallel_for;
  void* parallel_for_user_data;
  // Bound on the time one autotuning decision spends timing candidates, in
  // ms (0: 200). A candidate whose first run would overrun it is skipped,
  // so a decision costs at most this plus one run of the generated kernel
  // (and, once per executable, compiling the other schedules unless the
  // kernel cache has them).
  int32_t autotune_budget_ms;
} tj_x86_compile_options_t;

// The part of tj_compile_options_t that only TJ_TARGET_CUDA reads (see
// "CUDA" below).
typedef struct tj_cuda_compile_options_t {
  // The device ordinal. A context drives one device: the first CUDA
  // executable compiled in a context picks it (its primary context, the
  // one the CUDA runtime and PyTorch use).
  int32_t device;
  // A CUstream to enqueue runs on (borrowed; it must outlive the
  // executable), e.g. PyTorch's current stream. NULL: the context's own
  // non-blocking stream.
  void* stream;
  // Launch every kernel on every run instead of replaying the CUDA graph
  // captured for the run's shape (for debugging and comparison).
  bool disable_graphs;
  // exp, tanh, sigmoid, erf and erfc of f32/f16/bf16 values with the precise
  // polynomials of the x86 target (1-2.5 ulp in f32, erfc 7) instead of
  // the GPU's approximate special-function instructions (<= 5 ulp in f32,
  // erfc 7; far inside the bf16 and f16 tolerances), which cost 2-4x fewer
  // instructions.
  bool precise_math;
  // f32 matmuls may run on TF32 tensor cores (off by default, as
  // torch.backends.cuda.matmul.allow_tf32): on sm_90a the GEMM autotuner
  // then also times wgmma .tf32 kernels and cuBLASLt's TF32 mode beside the
  // exact f32 kernel and keeps the fastest. TF32 keeps 10 of f32's 23
  // mantissa bits of each operand (products then carry a relative error up
  // to about 2^-10, sums are f32), so an f32 matmul is then good to about
  // 1e-3 of the sum of its terms' magnitudes, not 1e-6. With autotuning
  // off f32 matmuls stay exact f32. f32 convs that run as one kernel
  // (groups 1) then use TF32 mma.sync, as cuDNN's do under torch's
  // default torch.backends.cudnn.allow_tf32. Available since: 0.1.
  bool allow_tf32;
} tj_cuda_compile_options_t;

typedef struct tj_compile_options_t {
  // sizeof(tj_compile_options_t) as the caller was compiled, set by
  // tj_compile_options_initialize. tj_compile rejects a size it does not
  // know (INVALID_ARGUMENT), so that fields can be added later without
  // breaking callers compiled against this header: always start from
  // tj_compile_options_initialize.
  size_t struct_size;
  tj_target_t target;
  tj_specialize_t specialize;
  int32_t specialize_after;  // >= 1; the default is 16
  // Specialize per power-of-two bucket of the symbols instead of per exact
  // shape (with specialize != NEVER). On x86 the kernels of a bucket are
  // the generic kernels: they take every size as a parameter, so they run
  // each shape's actual sizes with no padding, and no bucket compiles
  // anything. (An exact-shape kernel's one advantage, constant sizes,
  // cannot hold for a whole bucket without padding, which costs copies and
  // is wrong for reductions over a padded axis.) What does differ per
  // bucket, the GEMM schedule, is chosen at run time: the small-M path
  // from M, and with |autotune| the timed pick, keyed by the same
  // power-of-two bucket of M. TJ_LOG=recompiles logs each new bucket.
  bool bucket_pow2;
  // GEMM autotuning (see tj_autotune_t); DEFAULT: off on x86, on for CUDA.
  tj_autotune_t autotune;
  // Kernel cache directory. NULL: the context's default
  // (tj_context_options_t.cache_dir: $TJ_CACHE_DIR, else
  // $XDG_CACHE_HOME/tensorjit, else ~/.cache/tensorjit). "" disables the
  // disk cache.
  //
  // The kernel cache and its threat model. The disk cache holds native
  // code (x86 objects, CUDA cubins and PTX) and autotuning decisions, which
  // this process loads and runs without recompiling them. Anyone who can
  // write a file the cache loads can therefore run arbitrary code inside
  // this process, with its privileges. So the disk cache is trusted only
  // when nobody but this user can write it, as ssh does for ~/.ssh:
  //  - the directory (created 0700 when missing) must belong to the
  //    effective user and be writable by no one else (no group or world
  //    write bit);
  //  - each directory above it, after resolving links, must belong to that
  //    user or to root and be writable by no one else, or have the sticky
  //    bit (as /tmp does: there nobody else can rename or remove the entry
  //    that leads to ours);
  //  - each file must be a regular file (never a link, FIFO or device: it
  //    is opened without following links and without blocking) that
  //    belongs to the user and that no one else may write. Files are
  //    written 0600 under a temporary name and renamed into place.
  // A directory that fails these rules is not used at all: the compile
  // goes on with the context's memory cache only, and the context's
  // diagnostic callback (else stderr) gets one warning naming the
  // directory and the rule. A file that fails them is a miss, with one
  // warning per directory and rule: its kernels are compiled again and the
  // file is rewritten (TJ_LOG=cache gives the reason of every miss).
  // Each file carries a header (magic, format, its key, its size) and an
  // XXH3 checksum of its payload. They detect accidents (a torn write, a
  // flipped bit, a file renamed to another key), not intent: whoever
  // rewrites a file can recompute them. A cached object is
  // also checked structurally before it is linked (ELF header, sections,
  // symbols, relocations within bounds, the machine, every entry point
  // defined), and one that fails those checks or does not link is a miss,
  // compiled again and rewritten; a compile never fails because of the
  // cache. But a well-formed object whose code was changed passes every
  // such check and runs: against that, the only protection is the trust
  // rules above. Do not point cache_dir at a directory that other users
  // (or less trusted processes of yours) can write, and do not share one
  // between users; share kernels by shipping them with the program
  // instead, or disable the disk cache ("").
  const char* cache_dir;
  // Comma-separated pass list replacing the default pipeline; NULL = default.
  const char* pipeline;
  // Verify the IR after every pass (on in tests; costs compile time).
  bool verify_each;

  tj_x86_compile_options_t x86;    // TJ_TARGET_X86 only
  tj_cuda_compile_options_t cuda;  // TJ_TARGET_CUDA only

  // The eager-like baseline: no fusion, every op its own kernel (or, where
  // an op cannot be a kernel alone, the smallest group the fuser accepts,
  // at most 4 nodes). For measuring what fusion saves (tj-run --diagnose's
  // break-even runs) and for tj_verify's drift check.
  bool unfused;
  // A budget of rewrites for bisecting a wrong pass (TJ_BISECT's syntax):
  // "N" lets the rewriting passes (canonicalize, cse, decompose, fold)
  // perform only their first N rewrites in the pipeline, "PASS:N" only
  // the first N of that pass (e.g. "canonicalize:12"); the rest are
  // skipped as if no rule matched. A composite left whole runs on the
  // reference semantics. NULL: the context's TJ_BISECT (environment);
  // "": none. A malformed value is INVALID_ARGUMENT. Copied while
  // compiling, not kept.
  const char* bisect;
} tj_compile_options_t;

// Fills |options| with the defaults and sets |struct_size|.
TJ_API void tj_compile_options_initialize(tj_compile_options_t* options);

//===----------------------------------------------------------------------===//
// tj_executable_t
//===----------------------------------------------------------------------===//

// A compiled graph: its kernels, memory plan and shape guards. Ref-counted;
// it does not reference the graph it came from (except borrowed constants,
// see tj_graph_constant_borrowed). Thread-safe: several threads may run one
// executable at once.
typedef struct tj_executable_t tj_executable_t;

// Compiles finalized |graph| with |options| (NULL for the defaults; copied).
// On success |*out_executable| holds one reference owned by the caller
// (tj_executable_release); on failure it is NULL. On x86, while an
// executable compiled in the same context from an equal graph (the same
// ops, attributes, types, constants and names; input values do not
// matter) with equal options lives, the new one shares its compiled code
// and plans and compiles nothing: its stats show no passes, lowering or
// cache misses (not with a specialization policy, a pass list or compile
// logs). The same holds after every such executable was released, while
// the context keeps its compiled core (tj_context_options_t.
// retain_compiled).
TJ_API tj_status_t tj_compile(const tj_graph_t* graph,
                              const tj_compile_options_t* options,
                              tj_executable_t** out_executable);

TJ_API void tj_executable_retain(tj_executable_t* executable);
// Drops a reference; the last one frees it (or, on x86 without
// specialization, hands its compiled core to the context, which keeps up
// to tj_context_options_t.retain_compiled of them for equal compiles and
// frees them with itself). NULL is a no-op.
TJ_API void tj_executable_release(tj_executable_t* executable);

// The concrete shape of output |output_index| for these inputs (as
// tj_graph_output_shape).
TJ_API tj_status_t tj_executable_output_shape(const tj_executable_t* executable,
                                              const tj_tensor_t* inputs,
                                              int32_t num_inputs,
                                              int32_t output_index,
                                              int32_t* out_rank,
                                              int64_t* out_dims);

// Runs |executable|: inputs and outputs in declaration order, outputs
// preallocated by the caller with the shapes tj_executable_output_shape
// gives. Shape guards are checked first; a shape no kernel serves is
// compiled on demand (and logged under TJ_LOG=recompiles). No host heap
// allocation happens on the steady-state path (groups that run on the
// reference interpreter, see num_graph_breaks, allocate as it does).
// Inputs and outputs are CPU tensors and may be strided (they are staged
// through contiguous memory then); an output must not overlap an input,
// another output or itself (checked on every target, see tj_tensor_t).
// Several threads may run one executable at once.
//
// CUDA: an executable compiled for TJ_TARGET_CUDA takes CPU tensors
// (copied to and from the device through pinned staging memory; strided
// ones are packed) and CUDA tensors (device_type TJ_DEVICE_CUDA, |data| a
// device pointer of the executable's device, |device_id| its ordinal): used
// in place when dense (strides NULL or row-major); strided ones (any
// strides, negative and zero included; an output's elements must not
// overlap) are gathered into and scattered out of dense device staging by a
// copy kernel on the same stream. Intermediates live in a device arena from a
// caching allocator that grows only when a larger shape comes, so a steady
// state calls no cuMemAlloc. Device inputs must be complete when run is called
// (synchronize the stream that wrote them, or pass it as cuda.stream). The
// kernels of a shape are captured once into a CUDA graph and replayed on
// later runs with the same shape and device pointers (cuda.disable_graphs
// turns it off); a change of either captures anew. Run returns once the
// outputs are complete, except that with a cuda.stream and only CUDA
// tensors it returns as soon as the work is enqueued on that stream. Runs
// of one CUDA executable are serialized. Groups the GPU templates cannot
// express run on the host (num_graph_breaks), with copies around them and
// no CUDA graph for that executable.
TJ_API tj_status_t tj_executable_run(tj_executable_t* executable,
                                     const tj_tensor_t* inputs,
                                     int32_t num_inputs,
                                     const tj_tensor_t* outputs,
                                     int32_t num_outputs);

// tj_executable_run for graphs whose outputs have data-dependent dims
// (tj_graph_nonzero, tj_graph_unique, a custom op's tj_custom_dynamic_dim),
// which tj_executable_run refuses (INVALID_ARGUMENT naming the output):
// allocate each output at the shape tj_executable_output_shape gives (a
// data-dependent dim at its upper bound), dense row-major for those
// outputs; after the run |out_shapes| (|num_outputs| * TJ_MAX_RANK
// entries, output i's dims from out_shapes[i * TJ_MAX_RANK]) holds each
// output's actual dims, and its data is dense row-major in them from the
// start of its buffer (the rest of the buffer is unspecified). Works for
// any graph (outputs without such dims get their own shapes back).
// Available since: 0.1.
TJ_API tj_status_t tj_executable_run_shaped(
    tj_executable_t* executable, const tj_tensor_t* inputs, int32_t num_inputs,
    const tj_tensor_t* outputs, int32_t num_outputs, int64_t* out_shapes);

// Warm-up at load time: compiles now everything that a run with these
// input shapes would otherwise compile on first use, so that no run of
// them compiles anything afterwards (a game engine calls it on its loading
// screen, not on its first frame). On x86 that is:
// - the deferred small-M GEMM code of the generic kernels (the path a
//   GEMM takes for M <= 16, e.g. a batch of a few agents). Without a
//   parallel_for it is built on a thread of the library's own right after
//   tj_compile, and prepare waits for it; with a parallel_for (no thread
//   behind the host's back) nothing builds it before the first run that
//   needs it, which would then pay ~50-400 ms of LLVM: call prepare;
// - with TJ_SPECIALIZE_ALWAYS, the exact-shape kernels of this shape (and
//   their deferred code). TJ_SPECIALIZE_AFTER_N counts runs, so prepare
//   does not specialize under it.
// |inputs| describe a shape the host will run: dtypes, ranks and dims are
// read and checked as tj_executable_run checks them (guards included),
// |data| may be NULL. |inputs| NULL with |num_inputs| 0 prepares what
// every shape shares (the deferred code). Call it once per shape, any
// number of times (later calls find everything built and return at once);
// thread-safe, and runs may go on meanwhile. Returns the build's error,
// if any (a later run or prepare tries again). A no-op for the reference
// target (after the checks); on CUDA, where tj_compile loads everything,
// only the exact-shape program under TJ_SPECIALIZE_ALWAYS.
TJ_API tj_status_t tj_executable_prepare(tj_executable_t* executable,
                                         const tj_tensor_t* inputs,
                                         int32_t num_inputs);

// What compiling and running has cost so far. Set |struct_size| to
// sizeof(tj_executable_stats_t) before calling tj_executable_stats:
//   tj_executable_stats_t st = {.struct_size = sizeof(st)};
// (fields are only ever added at the end: a caller compiled against an
// older header gets the fields its struct has).
typedef struct tj_executable_stats_t {
  size_t struct_size;
  // Kernels in the generic kernel set: one per fusion group, except that a
  // pointwise group with pad or concat is one kernel per box of its output.
  int32_t num_kernels;
  // Graph breaks between compiled regions: fusion groups no kernel template
  // expresses, run on the reference interpreter (the driver first splits
  // such a group into kernels of its nodes; on CUDA an f64 transcendental
  // still breaks). Custom ops (num_host_calls) and argtopk's native host
  // kernel (num_host_kernels) are not graph breaks.
  int32_t num_graph_breaks;
  double compile_ms;     // wall time of tj_compile
  int64_t cache_hits;    // kernels loaded from the memory or disk cache
  int64_t cache_misses;  // kernels compiled by LLVM
  int64_t recompiles;    // specializations compiled after tj_compile
  int64_t runs;
  // Custom ops (tj_custom_op.h) kept in the graph: each calls its host
  // implementation between the compiled regions, with no interpreter. Not
  // graph breaks.
  int32_t num_host_calls;
  // Where tj_compile's |compile_ms| went, per stage (the generic program;
  // a stage a target does not have is 0):
  double passes_ms;      // the middle end's pass pipeline
  double lowering_ms;    // fusion groups to kernel IR, the run plan
  double llvm_ms;        // LLVM IR emission, O3 and codegen (x86: to an
                         // object and its link; CUDA: to PTX) on a miss
  double ptxas_ms;       // CUDA: PTX to a cubin (the driver's linker)
  double tuning_ms;      // CUDA: GEMM candidates timed while compiling
                         // (x86 times them on first runs, not here)
  double cache_load_ms;  // kernels loaded from a cache (and linked)
  // Wall time of the successful tj_executable_run calls so far (their mean
  // is run_ms / runs): with the same figure of an executable compiled with
  // an unfused pipeline, the break-even number of runs of compiling is
  // compile_ms / (eager run - compiled run), see tj-run --scoreboard.
  double run_ms;
  // Region compile: of num_kernels, how many share the compiled code of an
  // identical kernel (the same block repeated, e.g. N layers with different
  // weights), so that only num_kernels - num_shared_kernels were compiled
  // (cache_misses) or loaded (cache_hits) for the generic program.
  int32_t num_shared_kernels;
  // CUDA (0 on other targets): device memory. The caching allocator of the
  // device, which every CUDA executable of the process shares
  // (backends/cuda/cuda_allocator.h): the bytes the driver gave it
  // (|device_reserved_bytes|: blocks in use plus blocks cached for reuse),
  // the bytes of the blocks in use (|device_allocated_bytes|, rounded to
  // their size classes), and the peaks of both; reserved - allocated is
  // what the cache holds and nothing uses (tj_diagnose's "Am I
  // fragmenting?"). |device_arena_bytes|: this executable's own arena, as
  // large as its largest run so far needed.
  int64_t device_reserved_bytes;
  int64_t device_allocated_bytes;
  int64_t device_peak_reserved_bytes;
  int64_t device_peak_allocated_bytes;
  int64_t device_arena_bytes;
  // Region compile: of the fusion groups that became kernels, how many were
  // lowered to kernel IR (the distinct ones); the others, equal to one of
  // them up to their weights (a repeated block), took a copy of its
  // lowered kernels (TJ_LOG=fusion names each).
  int32_t num_lowered_groups;
  int32_t num_copied_groups;
  // Region compile one step earlier (lib/passes/region.c): the graph was
  // |num_region_blocks| equal blocks chained by one value (0: it was not,
  // or templates were off), and the passes before fusion ran over
  // |num_region_blocks_processed| of them (3); the others are copies of
  // the third's result with their own inputs (TJ_LOG=passes says so).
  int32_t num_region_blocks;
  int32_t num_region_blocks_processed;
  // Native host kernels between the compiled regions: an argtopk that no
  // kernel template takes (rows longer than decompose's native forms, or
  // of symbolic length) runs as argtopk's own C kernel on the host (x86:
  // on the library's threads; CUDA: with its copies to and from the
  // host), not on the reference interpreter. Not graph breaks; with
  // TJ_NATIVE_TOPK=off they are graph breaks again. Available since: 0.1.
  int32_t num_host_kernels;
} tj_executable_stats_t;

// Fills the fields of |*out_stats| that lie within its |struct_size|
// bytes (none when |struct_size| is smaller than the first field's end);
// a |struct_size| of 0 (a zero-initialized struct) means this header's.
// NULL |out_stats| is a no-op; a NULL executable gives zeros.
TJ_API void tj_executable_stats(const tj_executable_t* executable,
                                tj_executable_stats_t* out_stats);

//===----------------------------------------------------------------------===//
// Profiles: where a run's time goes
//===----------------------------------------------------------------------===//

typedef enum tj_profile_kind_e {
  TJ_PROFILE_KERNEL = 0,  // one compiled kernel
  // A graph break (a group run on the reference semantics between the
  // kernels; CUDA: with its copies to and from the host), or a whole run
  // on the reference target.
  TJ_PROFILE_HOST = 1,
  // Staging of inputs and outputs (strided tensors, outputs not written in
  // place; CUDA: host <-> device copies).
  TJ_PROFILE_COPY = 2,
  // Binding symbols, checking the tensors, evaluating the memory plan and
  // the kernels' scalar params, launch set-up between the kernels.
  TJ_PROFILE_SETUP = 3,
} tj_profile_kind_t;

// One line of a profile; every figure is per run (the mean over the
// profiled runs).
typedef struct tj_profile_entry_t {
  tj_profile_kind_t kind;
  // KERNEL: the kernel's name, the one TJ_LOG=fusion and tj-opt
  // --emit=kir print and the dump directory's files carry
  // (<graph>.<name>.kir, .ll, ...). HOST: "host.g<group>" (the fusion
  // group), or "reference" for the reference target. COPY: "copies".
  // SETUP: "setup".
  char name[224];
  // KERNEL: its template ("pointwise", "row_reduce", "gemm"); HOST: the
  // ops of the group; else "".
  char detail[96];
  double ms;            // time per run
  double share;         // ms / the report's run_ms
  double launches;      // launches that did work, per run (KERNEL)
  double bytes;         // moved per run (KERNEL: every buffer's elements once)
  double flops;         // per run (KERNEL; GEMM: 2*M*N*K plus the epilogue)
  double gbytes_per_s;  // bytes / ms (0 when ms is 0)
  double gflops_per_s;
} tj_profile_entry_t;

typedef struct tj_profile_report_t {
  char graph[128];     // the graph's name
  const char* target;  // "x86", "cuda", "reference"; static storage
  int32_t runs;        // profiled runs (after one untimed warm-up run)
  // Wall time of one profiled run through the whole of tj_executable_run,
  // measured around each run (the mean): what the entries' shares divide.
  double run_ms;
  // The entries' time per run by kind, and all of them: |accounted_ms|
  // falls short of |run_ms| by the time between the measured parts.
  double kernel_ms, host_ms, copy_ms, setup_ms, accounted_ms;
  int32_t num_kernels;  // kernel entries
  // CUDA: the profiled runs launched kernel by kernel with an event pair
  // around each launch instead of replaying the shape's CUDA graph.
  bool cuda_graphs_disabled;
  int32_t num_entries;
  tj_profile_entry_t* entries;  // largest |ms| first
  tj_allocator_t allocator;     // frees the report
  size_t bytes;
} tj_profile_report_t;

// Runs |executable| once untimed (so that compiles on first use, autotuning
// and arena growth are not counted), then |runs| times (>= 1) with
// |inputs| and |outputs| as tj_executable_run takes them, timing each
// kernel launch, graph break, copy and the set-up around them inside the
// backend's run: on x86 a monotonic clock around each launch (which
// returns when the thread pool's parallel region is done); on CUDA an
// event pair around each launch, kernel by kernel (the runs do not replay
// the CUDA graph). The outputs hold the last run's results. Under
// TJ_LOG=profile the top-10 table (tj_profile_report_format) goes to the
// context's diagnostic channel after each profile. Errors are those of
// tj_executable_run, and INVALID_ARGUMENT for a NULL executable or
// |out_report| or |runs| < 1. On success |*out_report| is owned by the
// caller (tj_profile_report_destroy); on failure it is NULL.
TJ_API tj_status_t tj_executable_profile(tj_executable_t* executable,
                                         const tj_tensor_t* inputs,
                                         int32_t num_inputs,
                                         const tj_tensor_t* outputs,
                                         int32_t num_outputs, int32_t runs,
                                         tj_profile_report_t** out_report);

// Frees |report|. NULL is a no-op.
TJ_API void tj_profile_report_destroy(tj_profile_report_t* report);

// Writes |report| as a table of its |top_n| largest entries (<= 0: all),
// with the run time, the kernels' total and how much the entries account
// for, into |buffer| (|size| bytes, NUL-terminated, truncated to fit;
// |buffer| may be NULL when |size| is 0). Returns the length the whole
// text needs, as snprintf does (0 for a NULL report).
TJ_API size_t tj_profile_report_format(const tj_profile_report_t* report,
                                       int32_t top_n, char* buffer,
                                       size_t size);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_EXECUTABLE_H_
