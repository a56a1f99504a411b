// The context's background worker: one thread, created when the first job
// is queued (a context that never queues one has no thread), that runs
// jobs one at a time in queue order. Background autotuning (jit/autotune.h,
// TJ_AUTOTUNE_BACKGROUND) is its user: a run that meets an untuned shape
// serves the default kernel and queues the timing here.
//
// Lifetimes: a job points at state owned by someone else (an executable's
// tuner). The owner calls tj_context_background_cancel before freeing that
// state: queued jobs of the owner are discarded and a running one is waited
// for, so a job never outlives what it points at. tj_context_destroy
// discards every queued job, waits for the running one and joins the
// thread; jobs submitted after that are refused.

#ifndef TJ_LIB_BACKGROUND_H_
#define TJ_LIB_BACKGROUND_H_

#include <pthread.h>
#include <stdbool.h>

#include "lib/base.h"

typedef struct tj_background_job_t tj_background_job_t;
struct tj_background_job_t {
  // Runs on the worker thread and then frees the job (the queue does not
  // touch it afterwards).
  void (*run)(tj_background_job_t* job);
  // Frees a job that will never run (cancelled, or the context destroyed).
  void (*discard)(tj_background_job_t* job);
  // What tj_context_background_cancel matches (e.g. the tuner).
  const void* owner;
  tj_background_job_t* next;  // the queue's
};

// The queue, embedded in the context (lib/context.c).
typedef struct tj_background_t {
  pthread_mutex_t mutex;
  pthread_cond_t changed;  // a job queued or finished, or the worker stops
  tj_background_job_t *head, *tail;
  const void* running_owner;  // the running job's, while |running|
  bool running;
  // tj_background_close is discarding jobs (outside the mutex): a cancel
  // waits for it, since those jobs may be the canceller's.
  bool discarding;
  bool has_thread;
  bool closed;  // tj_context_destroy: no new jobs; the worker stops
  pthread_t thread;
} tj_background_t;

// Mutex and condition variable; false when either cannot be made.
bool tj_background_initialize(tj_background_t* background);
// Closes the queue: discards queued jobs, waits for the running one and
// joins the thread. Idempotent; the structure stays usable for close-time
// queries (submit refuses, cancel and wait return at once).
void tj_background_close(tj_background_t* background);
void tj_background_deinitialize(tj_background_t* background);

// The context's queue (lib/context.c).
tj_background_t* tj_context_background(tj_context_t* context);

// Queues |job| (job->owner set by the caller); starts the worker thread on
// first use. false when the context is closed or no thread can be started:
// the job was not queued and is still the caller's.
bool tj_context_background_submit(tj_context_t* context,
                                  tj_background_job_t* job);
// Discards the queued jobs of |owner| and waits until none of its jobs is
// running. Must not be called from a job of |owner| (it would wait for
// itself).
void tj_context_background_cancel(tj_context_t* context, const void* owner);
// Waits until the queue is empty and no job is running.
void tj_context_background_wait(tj_context_t* context);

#endif  // TJ_LIB_BACKGROUND_H_
