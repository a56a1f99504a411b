// A graph's kernels through the NVPTX emitter for sm_90a (no GPU needed):
// every node in a kernel (no host steps), and the PTX assembled by ptxas
// when the test was given its path. Shared by the dtype and op tests that
// check their PTX offline.

#ifndef TJ_TESTS_UNIT_PTX_CHECK_H_
#define TJ_TESTS_UNIT_PTX_CHECK_H_

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "tests/unit/test.h"

// |text| assembled by ptxas for sm_90a; |ptxas| "" skips it. |what| names
// the module in a failure.
static inline void tj_test_assemble_ptx(const char* ptxas, const char* what,
                                        const char* text) {
  if (!ptxas[0] || !text) return;
  char path[] = "/tmp/tj_test_ptx_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return;
  fputs(text, f);
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90a -o /dev/null '%s' 2>&1", ptxas,
           path);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  %s: ptxas failed\n", what);
  CHECK_EQ_INT(0, rc);
  remove(path);
}

// Reads the ptxas -v log at |log| (then removes it) of the run that
// exited |rc| on |what|'s module: returns |rc|, or 1 where the log has a
// wgmma note, and sets |*spills| to the spill stores it reports.
static inline int tj_test_ptxas_log_verdict(const char* what, const char* log,
                                            int rc, long* spills) {
  // ptxas's notes that wgmma code lost its pipelining or registers
  // (serialized wgmmas, a function call or too few registers in the
  // pipeline, an ignored setmaxnreg): failures in the schedule tests.
  static const char* const kWgmmaNotes[] = {"C7508", "C7510", "C7511", "C7515"};
  *spills = 0;
  FILE* f = fopen(log, "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof(line), f)) {
      if (strstr(line, "rror") || strstr(line, "arning")) {
        printf("#   %s: %s", what, line);
      }
      const char* sp = strstr(line, "bytes spill stores");
      if (sp) {
        const char* q = sp;
        while (q > line && q[-1] == ' ') --q;
        while (q > line && q[-1] >= '0' && q[-1] <= '9') --q;
        *spills += strtol(q, NULL, 10);
      }
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaNotes); ++i) {
        if (strstr(line, kWgmmaNotes[i])) {
          printf("#   %s: %s", what, line);
          if (rc == 0) rc = 1;
        }
      }
    }
    fclose(f);
  }
  remove(log);
  return rc;
}

// Writes |ptx| to a new temporary file, its name into |path| (a
// "/tmp/tj_test_ptx_XXXXXX" buffer); false when it cannot.
static inline bool tj_test_write_ptx(const char* ptx, char* path) {
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return false;
  fputs(ptx, f);
  fclose(f);
  return true;
}

// Assembles |ptx| for sm_90a with |ptxas| -v --warning-as-error ("": 0,
// nothing run); returns its exit status (1 where the log has one of
// ptxas's wgmma notes) and sets |*spills| to the spill
// stores it reports.
static inline int tj_test_ptxas_wgmma(const char* ptxas, const char* what,
                                      const char* ptx, long* spills) {
  *spills = 0;
  if (!ptxas[0]) return 0;
  char path[] = "/tmp/tj_test_ptx_XXXXXX";
  if (!tj_test_write_ptx(ptx, path)) return -1;
  char log[64], cmd[1200];
  snprintf(log, sizeof(log), "%s.log", path);
  snprintf(cmd, sizeof(cmd),
           "'%s' -arch=sm_90a -v --warning-as-error -o /dev/null '%s' > '%s' "
           "2>&1",
           ptxas, path, log);
  int rc = tj_test_ptxas_log_verdict(what, log, system(cmd), spills);
  remove(path);
  return rc;
}

// Assembles |ptx| for sm_90a with |ptxas| -v ("": 0, nothing run), checks
// that ptxas accepts it (naming |what| when not), prints its register and
// spill lines, and returns the bytes of spill stores it reports. Shared
// by the tests that print a kernel's registers and allow it no spills
// (window_ptx_test, concat_select_ptx_test).
static inline long tj_test_ptxas_spills(const char* ptxas, const char* what,
                                        const char* ptx) {
  if (!ptxas[0] || !ptx) return 0;
  char path[] = "/tmp/tj_test_ptx_XXXXXX";
  if (!tj_test_write_ptx(ptx, path)) return 0;
  char log[64], cmd[1200];
  snprintf(log, sizeof(log), "%s.log", path);
  snprintf(cmd, sizeof(cmd),
           "'%s' -arch=sm_90a -v -o /dev/null '%s' > '%s' 2>&1", ptxas, path,
           log);
  int rc = system(cmd);
  FILE* f = fopen(log, "r");
  char line[512];
  while (f && fgets(line, sizeof(line), f)) {
    if (strstr(line, "registers") || strstr(line, "bytes spill stores"))
      printf("#   %s: %s", what, line);
  }
  if (f) fclose(f);
  long spills = 0;
  rc = tj_test_ptxas_log_verdict(what, log, rc, &spills);
  if (rc != 0) fprintf(stderr, "  %s: ptxas failed\n", what);
  CHECK_EQ_INT(0, rc);
  remove(path);
  return spills;
}

//===--- ptxas in the background ---===//
//
// The GEMM schedule tests (ktrans_ptx_test, swiglu_ptx_test) assemble one
// module per check, and ptxas takes about as long as LLVM's emission of
// the next: each run goes to a child process (at most
// TJ_TEST_PTXAS_JOBS at once) while the test compiles on, and its verdict
// is checked when the child is reaped, under the test that queued it
// (every TEST that queues calls tj_test_ptxas_wait before it returns).

#define TJ_TEST_PTXAS_JOBS 2

typedef struct tj_test_ptxas_job_t {
  pid_t pid;     // 0: a free slot
  unsigned seq;  // the order queued: the oldest is reaped first
  char path[32];
  char what[160];
  bool no_spills;  // a spill fails the check too
} tj_test_ptxas_job_t;

// The jobs in flight (a function's static: a file that includes this
// header and queues nothing has no unused variable).
static inline tj_test_ptxas_job_t* tj_test_ptxas_jobs(void) {
  static tj_test_ptxas_job_t jobs[TJ_TEST_PTXAS_JOBS];
  return jobs;
}

// Reaps |job| and checks its verdict: ptxas exits 0 with no wgmma note
// (and no spill where |job->no_spills|).
static inline void tj_test_ptxas_reap(tj_test_ptxas_job_t* job) {
  int wstatus = 0;
  while (waitpid(job->pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  job->pid = 0;
  int rc = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  char log[64];
  snprintf(log, sizeof(log), "%s.log", job->path);
  long spills = 0;
  rc = tj_test_ptxas_log_verdict(job->what, log, rc, &spills);
  remove(job->path);
  if (rc != 0) fprintf(stderr, "  %s: ptxas failed\n", job->what);
  CHECK_EQ_INT(0, rc);
  if (job->no_spills) {
    if (spills) fprintf(stderr, "  %s: %ld bytes spilled\n", job->what, spills);
    CHECK_EQ_INT(0, (int)spills);
  }
  printf("# %s: ptxas: %ld bytes spilled\n", job->what, spills);
}

// Waits for every queued ptxas run and checks each.
static inline void tj_test_ptxas_wait(void) {
  tj_test_ptxas_job_t* jobs = tj_test_ptxas_jobs();
  for (;;) {
    tj_test_ptxas_job_t* oldest = NULL;
    for (int i = 0; i < TJ_TEST_PTXAS_JOBS; ++i)
      if (jobs[i].pid > 0 && (!oldest || jobs[i].seq < oldest->seq))
        oldest = &jobs[i];
    if (!oldest) return;
    tj_test_ptxas_reap(oldest);
  }
}

// tj_test_ptxas_wgmma on |ptx| in a child process (|ptxas| "": nothing
// run), after a slot is free; its verdict is checked when it is reaped,
// a spill failing it too where |no_spills|. Where no child can be made
// it runs here and now.
static inline void tj_test_ptxas_queue(const char* ptxas, const char* what,
                                       const char* ptx, bool no_spills) {
  if (!ptxas[0] || !ptx) return;
  tj_test_ptxas_job_t* jobs = tj_test_ptxas_jobs();
  tj_test_ptxas_job_t* job = NULL;
  for (int i = 0; i < TJ_TEST_PTXAS_JOBS && !job; ++i)
    if (jobs[i].pid == 0) job = &jobs[i];
  if (!job) {
    job = &jobs[0];
    for (int i = 1; i < TJ_TEST_PTXAS_JOBS; ++i)
      if (jobs[i].seq < job->seq) job = &jobs[i];
    tj_test_ptxas_reap(job);
  }
  static unsigned seq;
  job->seq = ++seq;
  snprintf(job->what, sizeof(job->what), "%s", what);
  job->no_spills = no_spills;
  snprintf(job->path, sizeof(job->path), "/tmp/tj_test_ptx_XXXXXX");
  if (!tj_test_write_ptx(ptx, job->path)) return;
  char log[64];
  snprintf(log, sizeof(log), "%s.log", job->path);
  fflush(NULL);  // the child must not write our buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    execl(ptxas, ptxas, "-arch=sm_90a", "-v", "--warning-as-error", "-o",
          "/dev/null", job->path, (char*)NULL);
    _exit(127);
  }
  if (pid < 0) {
    long spills = 0;
    int rc = tj_test_ptxas_wgmma(ptxas, what, ptx, &spills);
    CHECK_EQ_INT(0, rc);
    if (no_spills) CHECK_EQ_INT(0, (int)spills);
    remove(job->path);
    return;
  }
  job->pid = pid;
}

// A covering design for the schedule tests' cross products: whether
// schedule |i| of a table is checked at variant |v| of |n| (a shape, or a
// shape and a B layout), |ways| variants a schedule (|ways| divides |n|):
// those congruent to |i| modulo n / ways. Every schedule is checked at
// |ways| variants, every variant by the schedules of one residue class, and
// a run of consecutive schedules (a table's family: the TMA ones, the
// pingpong ones) meets every variant once it has n / ways members.
static inline bool tj_test_covers(size_t i, int v, int n, int ways) {
  int period = n / ways;
  return v % period == (int)(i % (size_t)period);
}

// tj_test_check_ptx with compile |options| (NULL: the defaults). With
// |options|->autotune off the GEMM candidates are not emitted (a GPU run
// compiles none): for a graph whose candidates another check compiles.
static inline void tj_test_check_ptx_with(const char* ptxas, const char* what,
                                          tj_graph_t* g,
                                          const tj_compile_options_t* options) {
  CHECK_OK(tj_graph_finalize(g));
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, options, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK(ptx.num_kernels >= 1);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  tj_test_assemble_ptx(ptxas, what, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

// Finalizes and destroys |g|. |ptxas| "" skips the assembly; |what| names
// the graph in a failure.
static inline void tj_test_check_ptx(const char* ptxas, const char* what,
                                     tj_graph_t* g) {
  tj_test_check_ptx_with(ptxas, what, g, NULL);
}

// Whether |ptx| has |needle| as |want| says; names |what| (not the PTX)
// when not.
static inline void tj_test_check_has(const char* what, const char* ptx,
                                     const char* needle, bool want) {
  bool found = ptx && strstr(ptx, needle) != NULL;
  if (found != want)
    fprintf(stderr, "  %s: %s \"%s\" in the PTX\n", what,
            want ? "no" : "unexpected", needle);
  CHECK(found == want);
}

// |k| emitted with |o| for |arch| into a module called |module|, as PTX
// (free with tj_free_string); NULL where the emitter refuses, |*out_status|
// then saying why. Shared by the GEMM schedule tests (ktrans, swiglu).
static inline char* tj_test_emit_ptx(const tj_kir_t* k,
                                     const tj_nvptx_options_t* o,
                                     tj_nvptx_arch_t arch, const char* module,
                                     tj_nvptx_kernel_t* info,
                                     tj_status_t* out_status) {
  tj_allocator_t al = tj_allocator_system();
  tj_nvptx_target_t* target = NULL;
  *out_status = tj_nvptx_target_create(al, arch, &target);
  if (*out_status) return NULL;
  tj_nvptx_module_t* mod = NULL;
  char* ptx = NULL;
  *out_status = tj_nvptx_module_new(target, al, module, &mod);
  if (!*out_status) *out_status = tj_nvptx_module_add_kernel(mod, k, o, info);
  if (!*out_status) {
    *out_status = tj_nvptx_module_compile(mod, al, &ptx);
  } else {
    tj_nvptx_module_destroy(mod);
  }
  tj_nvptx_target_destroy(target);
  return ptx;
}

// A GEMM schedule's name for failure messages: main loop, tile, k-tile,
// stages and the options set.
static inline void tj_test_describe_schedule(const tj_nvptx_options_t* o,
                                             char* buf, size_t size) {
  snprintf(buf, size, "%s%s %dx%d bk%d s%d%s%s%s%s%s%s",
           o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC ? "mma.sync" : "wgmma",
           o->gemm_tma ? " tma" : "", (int)o->gemm_tile_m, (int)o->gemm_tile_n,
           (int)o->gemm_tile_k, (int)o->gemm_stages,
           o->gemm_pingpong ? " pingpong" : "",
           o->gemm_persistent ? " persistent" : "",
           o->gemm_wgmma_drain ? " drain" : "",
           o->gemm_cluster ? " cluster" : "", o->gemm_tf32 ? " tf32" : "",
           o->gemm_tma_store ? " store" : "");
}

#endif  // TJ_TESTS_UNIT_PTX_CHECK_H_
