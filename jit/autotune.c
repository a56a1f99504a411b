// The autotuner. See autotune.h.
//
// A cached decision is a short text record, "tjtune 1 <best> <n> <ms>...",
// so that a foreign or damaged payload is recognized (and re-tuned) rather
// than trusted.

#include "jit/autotune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define kSamples 5
#define kRepeats 4

static tj_cache_key_t problem_key(const tj_autotune_problem_t* p) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, "tensorjit autotune 1");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(&h, p->kernel_text);
  tj_cache_hasher_update_string(&h, p->device);
  tj_cache_hasher_update(&h, &p->bucket, sizeof(p->bucket));
  for (int32_t i = 0; i < p->num_candidates; ++i) {
    tj_cache_hasher_update_string(&h, p->candidate_names[i]);
  }
  return tj_cache_hasher_finalize(&h);
}

// Parses a record; false for anything that is not one of ours.
static bool parse(const char* text, size_t size, int32_t num_candidates,
                  tj_autotune_result_t* out) {
  if (size == 0 || text[size - 1] != '\0') return false;
  int best = -1, n = -1, used = 0;
  if (sscanf(text, "tjtune 1 %d %d%n", &best, &n, &used) != 2) return false;
  if (n != num_candidates || best < 0 || best >= n) return false;
  const char* s = text + used;
  for (int i = 0; i < n; ++i) {
    char* end;
    out->ms[i] = strtod(s, &end);
    if (end == s) return false;
    s = end;
  }
  out->best = best;
  return out->ms[best] >= 0;
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static tj_status_t measure_all(const tj_autotune_problem_t* p,
                               tj_autotune_measure_fn measure, void* ctx,
                               tj_autotune_result_t* out) {
  double start = tj_now_ms();
  out->best = -1;
  for (int32_t c = 0; c < p->num_candidates; ++c) {
    double warm;
    tj_status_t s = measure(ctx, c, 1, &warm);
    out->ms[c] = -1;
    if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
      tj_status_free(s);
      continue;
    }
    TJ_RETURN_IF_ERROR(s);
    double samples[kSamples];
    for (int i = 0; i < kSamples; ++i) {
      TJ_RETURN_IF_ERROR(measure(ctx, c, kRepeats, &samples[i]));
    }
    qsort(samples, kSamples, sizeof(double), compare_double);
    out->ms[c] = samples[kSamples / 2];
    if (out->best < 0 || out->ms[c] < out->ms[out->best]) out->best = c;
  }
  out->tune_ms = tj_now_ms() - start;
  if (out->best < 0) {
    return tj_invalid("autotune: no candidate serves bucket %lld on %s",
                      (long long)p->bucket, p->device);
  }
  return NULL;
}

tj_status_t tj_autotune_lookup(tj_context_t* context, const char* cache_dir,
                               const tj_autotune_problem_t* p,
                               tj_autotune_result_t* out, bool* out_hit) {
  memset(out, 0, sizeof(*out));
  *out_hit = false;
  if (p->num_candidates < 1 || p->num_candidates > TJ_AUTOTUNE_MAX_CANDIDATES)
    return tj_invalid("autotune: %d candidates", (int)p->num_candidates);
  tj_allocator_t al = tj_context_allocator(context);
  tj_cache_key_t key = problem_key(p);
  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  TJ_RETURN_IF_ERROR(
      tj_memory_cache_lookup(context, key, al, &bytes, &size, &hit));
  if (!hit && cache_dir && cache_dir[0]) {
    const char* reason = NULL;
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(context, cache_dir, key, al, &bytes,
                                          &size, &hit, &reason));
  }
  if (hit) {
    bool ok = parse(bytes, size, p->num_candidates, out);
    tj_free(al, bytes, size);
    if (ok) {
      out->from_cache = true;
      *out_hit = true;
      return NULL;
    }
    memset(out, 0, sizeof(*out));
  }
  return NULL;
}

tj_status_t tj_autotune(tj_context_t* context, const char* cache_dir,
                        const tj_autotune_problem_t* p,
                        tj_autotune_measure_fn measure, void* measure_context,
                        tj_autotune_result_t* out) {
  bool hit = false;
  TJ_RETURN_IF_ERROR(tj_autotune_lookup(context, cache_dir, p, out, &hit));
  if (hit) return NULL;
  tj_cache_key_t key = problem_key(p);
  bool disk = cache_dir && cache_dir[0];
  TJ_RETURN_IF_ERROR(measure_all(p, measure, measure_context, out));
  char record[64 + 24 * TJ_AUTOTUNE_MAX_CANDIDATES];
  int n = snprintf(record, sizeof(record), "tjtune 1 %d %d", (int)out->best,
                   (int)p->num_candidates);
  for (int32_t c = 0; c < p->num_candidates && n > 0; ++c) {
    n += snprintf(record + n, sizeof(record) - (size_t)n, " %.6g", out->ms[c]);
  }
  size_t len = strlen(record) + 1;
  // A cache that cannot store only costs a later re-tune.
  tj_status_free(tj_memory_cache_store(context, key, record, len));
  if (disk) {
    tj_status_t s = tj_disk_cache_store(cache_dir, key, record, len);
    tj_disk_cache_warn_store(context, cache_dir, s);
    tj_status_free(s);
  }
  return NULL;
}
