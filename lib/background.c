// The context's background worker. See background.h.

#include "lib/background.h"

#include <string.h>

bool tj_background_initialize(tj_background_t* b) {
  memset(b, 0, sizeof(*b));
  if (pthread_mutex_init(&b->mutex, NULL) != 0) return false;
  if (pthread_cond_init(&b->changed, NULL) != 0) {
    pthread_mutex_destroy(&b->mutex);
    return false;
  }
  return true;
}

void tj_background_deinitialize(tj_background_t* b) {
  tj_background_close(b);
  pthread_cond_destroy(&b->changed);
  pthread_mutex_destroy(&b->mutex);
}

static void* worker_main(void* arg) {
  tj_background_t* b = arg;
  pthread_mutex_lock(&b->mutex);
  for (;;) {
    while (!b->head && !b->closed) pthread_cond_wait(&b->changed, &b->mutex);
    // Closing discards what is queued (tj_background_close), so an empty
    // queue here means stop.
    if (!b->head) break;
    tj_background_job_t* job = b->head;
    b->head = job->next;
    if (!b->head) b->tail = NULL;
    b->running = true;
    b->running_owner = job->owner;
    pthread_mutex_unlock(&b->mutex);
    job->run(job);  // frees the job
    pthread_mutex_lock(&b->mutex);
    b->running = false;
    b->running_owner = NULL;
    pthread_cond_broadcast(&b->changed);
  }
  pthread_mutex_unlock(&b->mutex);
  return NULL;
}

// Discards |list| (jobs already unlinked from the queue), outside the
// mutex: a discard frees memory through the host's allocator, which may
// take locks of its own.
static void discard_all(tj_background_job_t* list) {
  while (list) {
    tj_background_job_t* next = list->next;
    list->discard(list);
    list = next;
  }
}

void tj_background_close(tj_background_t* b) {
  pthread_mutex_lock(&b->mutex);
  tj_background_job_t* queued = b->head;
  b->head = b->tail = NULL;
  b->closed = true;
  b->discarding = queued != NULL;
  bool join = b->has_thread;
  b->has_thread = false;
  pthread_cond_broadcast(&b->changed);
  pthread_mutex_unlock(&b->mutex);
  if (queued) {
    discard_all(queued);
    pthread_mutex_lock(&b->mutex);
    b->discarding = false;
    pthread_cond_broadcast(&b->changed);
    pthread_mutex_unlock(&b->mutex);
  }
  if (join) pthread_join(b->thread, NULL);
}

bool tj_context_background_submit(tj_context_t* context,
                                  tj_background_job_t* job) {
  tj_background_t* b = tj_context_background(context);
  bool queued = false;
  pthread_mutex_lock(&b->mutex);
  if (!b->closed && !b->has_thread) {
    b->has_thread = pthread_create(&b->thread, NULL, worker_main, b) == 0;
  }
  if (!b->closed && b->has_thread) {
    job->next = NULL;
    if (b->tail) {
      b->tail->next = job;
    } else {
      b->head = job;
    }
    b->tail = job;
    queued = true;
    pthread_cond_broadcast(&b->changed);
  }
  pthread_mutex_unlock(&b->mutex);
  return queued;
}

void tj_context_background_cancel(tj_context_t* context, const void* owner) {
  tj_background_t* b = tj_context_background(context);
  tj_background_job_t* cancelled = NULL;
  pthread_mutex_lock(&b->mutex);
  tj_background_job_t** link = &b->head;
  b->tail = NULL;
  while (*link) {
    tj_background_job_t* job = *link;
    if (job->owner == owner) {
      *link = job->next;
      job->next = cancelled;
      cancelled = job;
    } else {
      b->tail = job;
      link = &job->next;
    }
  }
  // The owner is about to free what its jobs point at: not while one of
  // them runs, nor while tj_background_close may still be discarding one.
  while ((b->running && b->running_owner == owner) || b->discarding) {
    pthread_cond_wait(&b->changed, &b->mutex);
  }
  pthread_mutex_unlock(&b->mutex);
  discard_all(cancelled);
}

void tj_context_background_wait(tj_context_t* context) {
  tj_background_t* b = tj_context_background(context);
  pthread_mutex_lock(&b->mutex);
  while (b->head || b->running) pthread_cond_wait(&b->changed, &b->mutex);
  pthread_mutex_unlock(&b->mutex);
}
