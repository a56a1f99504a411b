// tj_graph_einsum (topk, issue 15): numpy.einsum by decomposition into the
// graph's own ops, so each step fuses and runs on every target's kernels.
//
// The equation is parsed into a label per axis (letters, and one label per
// broadcast axis of "...", aligned from the right as numpy aligns them).
// Each operand first takes its diagonals (a label repeated within it: two
// axes of equal constant length n, transposed last, reshaped to n*n and
// sliced with step n + 1) and sums the labels no other operand and not the
// output names. Operands are then combined left to right: a pair becomes
// one batched matmul [batch.., M, K] x [batch.., K, N], batch the labels
// both hold that are still needed, K those only this pair needs, M and N
// the rest of each side, reshaped back to one axis per label. The result
// sums what the output does not name and is transposed to its order.

#include <stdio.h>
#include <string.h>

#include "lib/ir.h"
#include "tensorjit/tj_graph.h"

// Labels: 'A'..'Z', 'a'..'z' by their ASCII codes; broadcast axes of "..."
// as kEllipsis + i, i counted from the left of the widest "...".
enum { kEllipsis = 128, kMaxLabels = kEllipsis + TJ_MAX_RANK };
#define MAX_OPERANDS 16

typedef struct term_t {
  tj_value_t v;
  int32_t rank;
  int32_t labels[TJ_MAX_RANK];
  int64_t dims[TJ_MAX_RANK];
} term_t;

typedef struct einsum_t {
  tj_graph_t* g;
  const char* equation;
  int32_t num_terms;
  term_t terms[MAX_OPERANDS];
  int32_t out_rank;
  int32_t out_labels[TJ_MAX_RANK];
} einsum_t;

static tj_value_t error(einsum_t* e, const char* problem) {
  tj_graph_record_error(
      e->g, tj_invalid("tj_graph_einsum \"%s\": %s", e->equation, problem));
  return tj_value_none();
}

static bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Reads one operand's term from |*p| up to ',' '-' or the end. The labels
// of "..." are filled in once every rank is known (|*ell_at|: the position
// of "..." among the labels, -1 if none).
static bool parse_term(const char** p, int32_t* labels, int32_t* count,
                       int32_t* ell_at) {
  *count = 0;
  *ell_at = -1;
  const char* s = *p;
  while (*s && *s != ',' && *s != '-') {
    if (*s == ' ') {
      ++s;
    } else if (is_letter(*s)) {
      if (*count >= TJ_MAX_RANK) return false;
      labels[(*count)++] = (unsigned char)*s++;
    } else if (strncmp(s, "...", 3) == 0) {
      if (*ell_at >= 0) return false;
      *ell_at = *count;
      s += 3;
    } else {
      return false;
    }
  }
  *p = s;
  return true;
}

// Spreads the "..." of a term over |num| broadcast labels, the last of the
// |width| widest labels, after the |count| letters before it.
static bool place_ellipsis(int32_t* labels, int32_t count, int32_t ell_at,
                           int32_t num, int32_t width) {
  if (count + num > TJ_MAX_RANK) return false;
  memmove(labels + ell_at + num, labels + ell_at,
          (size_t)(count - ell_at) * sizeof(int32_t));
  for (int32_t i = 0; i < num; ++i)
    labels[ell_at + i] = kEllipsis + width - num + i;
  return true;
}

// Whether |label| is named by the output or by a term other than those in
// [skip_lo, skip_hi].
static bool needed(const einsum_t* e, int32_t label, int32_t skip_lo,
                   int32_t skip_hi) {
  for (int32_t i = 0; i < e->out_rank; ++i)
    if (e->out_labels[i] == label) return true;
  for (int32_t t = 0; t < e->num_terms; ++t) {
    if (t >= skip_lo && t <= skip_hi) continue;
    const term_t* x = &e->terms[t];
    for (int32_t i = 0; i < x->rank; ++i)
      if (x->labels[i] == label) return true;
  }
  return false;
}

static int32_t find(const int32_t* labels, int32_t n, int32_t label) {
  for (int32_t i = 0; i < n; ++i)
    if (labels[i] == label) return i;
  return -1;
}

// Reorders |t| to |order| (a permutation of its axes).
static void permute(einsum_t* e, term_t* t, const int32_t* order) {
  bool identity = true;
  for (int32_t i = 0; i < t->rank; ++i) identity &= order[i] == i;
  if (identity) return;
  term_t r = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    r.labels[i] = t->labels[order[i]];
    r.dims[i] = t->dims[order[i]];
  }
  r.v = tj_graph_transpose(e->g, t->v, order);
  *t = r;
}

// Sums the axes of |t| whose labels |keep| rejects.
static void sum_unneeded(einsum_t* e, term_t* t, int32_t self_lo,
                         int32_t self_hi) {
  int32_t axes[TJ_MAX_RANK], num = 0;
  term_t r = *t;
  r.rank = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (needed(e, t->labels[i], self_lo, self_hi)) {
      r.labels[r.rank] = t->labels[i];
      r.dims[r.rank++] = t->dims[i];
    } else {
      axes[num++] = i;
    }
  }
  if (num == 0) return;
  r.v = tj_graph_sum(e->g, t->v, num, axes, false);
  *t = r;
}

// Takes the diagonal of every label repeated within |t|.
static bool diagonals(einsum_t* e, term_t* t) {
  for (int32_t i = 0; i < t->rank; ++i) {
    for (int32_t j = i + 1; j < t->rank; ++j) {
      if (t->labels[i] != t->labels[j]) continue;
      int64_t n = t->dims[i];
      if (n != t->dims[j]) {
        error(e, "a label repeated within an operand has unequal dims");
        return false;
      }
      if (!tj_dim_is_const(n)) {
        error(e, "a label repeated within an operand needs a constant dim");
        return false;
      }
      // i and j last, then [.., n * n] sliced with step n + 1.
      int32_t order[TJ_MAX_RANK], k = 0;
      for (int32_t a = 0; a < t->rank; ++a)
        if (a != i && a != j) order[k++] = a;
      order[k++] = i;
      order[k++] = j;
      permute(e, t, order);
      int64_t dims[TJ_MAX_RANK], starts[TJ_MAX_RANK], stops[TJ_MAX_RANK],
          steps[TJ_MAX_RANK];
      for (int32_t a = 0; a < t->rank - 2; ++a) {
        dims[a] = t->dims[a];
        starts[a] = 0;
        stops[a] = INT64_MAX;
        steps[a] = 1;
      }
      int32_t r = t->rank - 1;
      dims[r - 1] = n * n;
      starts[r - 1] = 0;
      stops[r - 1] = n * n;
      steps[r - 1] = n + 1;
      tj_value_t flat = tj_graph_reshape(e->g, t->v, r, dims);
      t->v = tj_graph_slice(e->g, flat, starts, stops, steps);
      t->rank = r;
      t->dims[r - 1] = n;
      return diagonals(e, t);  // the labels moved: start over
    }
  }
  return true;
}

// The broadcast of two dims of one label (a 1 takes the other's).
static int64_t join_dim(int64_t a, int64_t b) { return a == 1 ? b : a; }

// Combines terms |ia| and |ib| (ia < ib) into |ia| through one matmul.
static bool contract(einsum_t* e, int32_t ia, int32_t ib) {
  term_t* a = &e->terms[ia];
  term_t* b = &e->terms[ib];
  int32_t batch[TJ_MAX_RANK], mlab[TJ_MAX_RANK], nlab[TJ_MAX_RANK],
      klab[TJ_MAX_RANK];
  int32_t nb = 0, nm = 0, nn = 0, nk = 0;
  for (int32_t i = 0; i < a->rank; ++i) {
    int32_t l = a->labels[i];
    int32_t jb = find(b->labels, b->rank, l);
    if (jb < 0) {
      mlab[nm++] = l;
    } else if (needed(e, l, ia, ib)) {
      batch[nb++] = l;
    } else {
      int64_t da = a->dims[i], db = b->dims[jb];
      if (da != db && (da == 1 || db == 1)) {
        error(e, "a summed label is broadcast (1 against n) between operands");
        return false;
      }
      klab[nk++] = l;
    }
  }
  for (int32_t i = 0; i < b->rank; ++i)
    if (find(a->labels, a->rank, b->labels[i]) < 0) nlab[nn++] = b->labels[i];
  // a -> [batch, M.., K..], b -> [batch, K.., N..].
  int32_t order_a[TJ_MAX_RANK], order_b[TJ_MAX_RANK], k = 0;
  for (int32_t i = 0; i < nb; ++i)
    order_a[k++] = find(a->labels, a->rank, batch[i]);
  for (int32_t i = 0; i < nm; ++i)
    order_a[k++] = find(a->labels, a->rank, mlab[i]);
  for (int32_t i = 0; i < nk; ++i)
    order_a[k++] = find(a->labels, a->rank, klab[i]);
  k = 0;
  for (int32_t i = 0; i < nb; ++i)
    order_b[k++] = find(b->labels, b->rank, batch[i]);
  for (int32_t i = 0; i < nk; ++i)
    order_b[k++] = find(b->labels, b->rank, klab[i]);
  for (int32_t i = 0; i < nn; ++i)
    order_b[k++] = find(b->labels, b->rank, nlab[i]);
  permute(e, a, order_a);
  permute(e, b, order_b);
  if (nb + 2 > TJ_MAX_RANK || nb + nm + nn > TJ_MAX_RANK) {
    error(e, "the result of a contraction has too many axes");
    return false;
  }
  int64_t m = 1, kk = 1, n = 1;
  for (int32_t i = 0; i < nm; ++i)
    m = tj_graph_dim_mul(e->g, m, a->dims[nb + i]);
  for (int32_t i = 0; i < nk; ++i)
    kk = tj_graph_dim_mul(e->g, kk, a->dims[nb + nm + i]);
  for (int32_t i = 0; i < nn; ++i)
    n = tj_graph_dim_mul(e->g, n, b->dims[nb + nk + i]);
  int64_t da[TJ_MAX_RANK], db[TJ_MAX_RANK];
  memcpy(da, a->dims, (size_t)nb * sizeof(int64_t));
  memcpy(db, b->dims, (size_t)nb * sizeof(int64_t));
  da[nb] = m;
  da[nb + 1] = kk;
  db[nb] = kk;
  db[nb + 1] = n;
  tj_value_t am = tj_graph_reshape(e->g, a->v, nb + 2, da);
  tj_value_t bm = tj_graph_reshape(e->g, b->v, nb + 2, db);
  tj_value_t y = tj_graph_matmul(e->g, am, bm);
  term_t r;
  r.rank = nb + nm + nn;
  for (int32_t i = 0; i < nb; ++i) {
    r.labels[i] = batch[i];
    r.dims[i] = join_dim(a->dims[i], b->dims[i]);
  }
  for (int32_t i = 0; i < nm; ++i) {
    r.labels[nb + i] = mlab[i];
    r.dims[nb + i] = a->dims[nb + i];
  }
  for (int32_t i = 0; i < nn; ++i) {
    r.labels[nb + nm + i] = nlab[i];
    r.dims[nb + nm + i] = b->dims[nb + nk + i];
  }
  r.v = tj_graph_reshape(e->g, y, r.rank, r.dims);
  *a = r;
  // Drop term ib.
  memmove(&e->terms[ib], &e->terms[ib + 1],
          (size_t)(e->num_terms - ib - 1) * sizeof(term_t));
  --e->num_terms;
  return true;
}

tj_value_t tj_graph_einsum(tj_graph_t* graph, const char* equation,
                           const tj_value_t* inputs, int32_t count) {
  if (!graph || graph->error) return tj_value_none();
  if (graph->finalized) {
    tj_graph_record_error(
        graph,
        tj_invalid("tj_graph_einsum: graph @%s is finalized", graph->name));
    return tj_value_none();
  }
  einsum_t e;
  memset(&e, 0, sizeof(e));
  e.g = graph;
  e.equation = equation ? equation : "(null)";
  if (!equation) return error(&e, "the equation is NULL");
  if (count < 1 || count > MAX_OPERANDS || !inputs)
    return error(&e, "it takes 1 to 16 operands");
  // The terms, then "->" and the output, or nothing (implicit output).
  int32_t ell_at[MAX_OPERANDS], letters[MAX_OPERANDS];
  const char* p = equation;
  for (int32_t t = 0;; ++t) {
    if (t >= count) return error(&e, "more terms than operands");
    if (!parse_term(&p, e.terms[t].labels, &letters[t], &ell_at[t]))
      return error(&e, "a term is malformed (letters and one \"...\" only)");
    e.num_terms = t + 1;
    if (*p != ',') break;
    ++p;
  }
  if (e.num_terms != count)
    return error(&e, "the number of terms differs from the operands'");
  int32_t width = 0, nums[MAX_OPERANDS];
  for (int32_t t = 0; t < count; ++t) {
    term_t* x = &e.terms[t];
    x->v = inputs[t];
    x->rank = tj_graph_value_rank(graph, inputs[t]);
    if (x->rank < 0) return error(&e, "an operand is not a value of the graph");
    tj_graph_value_dims(graph, inputs[t], x->dims);
    nums[t] = x->rank - letters[t];
    if (ell_at[t] < 0 ? nums[t] != 0 : nums[t] < 0)
      return error(&e, "a term's labels do not match its operand's rank");
    if (nums[t] > width) width = nums[t];
  }
  for (int32_t t = 0; t < count; ++t) {
    term_t* x = &e.terms[t];
    if (ell_at[t] >= 0)
      place_ellipsis(x->labels, letters[t], ell_at[t], nums[t], width);
  }
  // The output: written, or the ellipsis then the letters used once, in
  // ASCII order (numpy).
  int32_t out_ell = -1, out_letters = 0;
  if (*p == '-') {
    if (p[1] != '>') return error(&e, "expected \"->\"");
    p += 2;
    if (!parse_term(&p, e.out_labels, &out_letters, &out_ell) || *p)
      return error(&e, "the output term is malformed");
    if (out_letters + (out_ell >= 0 ? width : 0) > TJ_MAX_RANK)
      return error(&e, "the output has too many axes");
    if (out_ell >= 0)
      place_ellipsis(e.out_labels, out_letters, out_ell, width, width);
    e.out_rank = out_letters + (out_ell >= 0 ? width : 0);
    for (int32_t i = 0; i < e.out_rank; ++i) {
      if (find(e.out_labels, i, e.out_labels[i]) >= 0)
        return error(&e, "an output label is repeated");
      bool found = false;
      for (int32_t t = 0; t < count; ++t)
        found |= find(e.terms[t].labels, e.terms[t].rank, e.out_labels[i]) >= 0;
      if (!found && e.out_labels[i] < kEllipsis)
        return error(&e, "an output label is in no operand");
    }
  } else {
    if (*p) return error(&e, "unexpected text after the terms");
    int32_t uses[kMaxLabels] = {0};
    for (int32_t t = 0; t < count; ++t)
      for (int32_t i = 0; i < e.terms[t].rank; ++i)
        ++uses[e.terms[t].labels[i]];
    for (int32_t i = 0; i < width; ++i)
      e.out_labels[e.out_rank++] = kEllipsis + i;
    for (int32_t l = 0; l < kEllipsis; ++l) {
      if (uses[l] != 1) continue;
      if (e.out_rank >= TJ_MAX_RANK)
        return error(&e, "the output has too many axes");
      e.out_labels[e.out_rank++] = l;
    }
  }
  for (int32_t t = 0; t < e.num_terms; ++t) {
    if (!diagonals(&e, &e.terms[t])) return tj_value_none();
    sum_unneeded(&e, &e.terms[t], t, t);
  }
  while (e.num_terms > 1) {
    if (!contract(&e, 0, 1)) return tj_value_none();
    sum_unneeded(&e, &e.terms[0], 0, 0);
  }
  term_t* r = &e.terms[0];
  // Broadcast labels the operands lack (a "..." narrower than the output's)
  // become axes of 1.
  int32_t order[TJ_MAX_RANK];
  int64_t dims[TJ_MAX_RANK];
  bool missing = false;
  for (int32_t i = 0; i < e.out_rank; ++i) {
    int32_t at = find(r->labels, r->rank, e.out_labels[i]);
    missing |= at < 0;
    dims[i] = at < 0 ? 1 : r->dims[at];
  }
  int32_t k = 0;
  for (int32_t i = 0; i < e.out_rank; ++i) {
    int32_t at = find(r->labels, r->rank, e.out_labels[i]);
    if (at >= 0) order[k++] = at;
  }
  permute(&e, r, order);
  tj_value_t y = r->v;
  if (missing) y = tj_graph_reshape(graph, y, e.out_rank, dims);
  return y;
}
