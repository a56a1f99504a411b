// Symbolic dims: canonical polynomials over named symbols, hash-consed.
//
// Canonical form (the invariant every function here keeps): the terms of an
// expression are sorted by monomial in graded-lexicographic order (higher
// degree first; equal degree by the sorted symbol-id list, smaller first),
// like monomials are merged, zero terms are dropped, and the constant term
// (degree 0) comes last. Because the form is unique and the table interns
// each expression once, dim equality is int64_t equality. An expression that
// reduces to a constant is never stored: it is returned as the constant.
//
// Graded-lex is a monomial order (compatible with multiplication), which is
// what makes the leading term of a product the product of leading terms and
// lets tj_dim_div_exact run the ordinary division algorithm.

#include "lib/shape.h"

#include <stdio.h>
#include <string.h>

//===--- working polynomials ---===//

// Wider than stored expressions: a product of two stored expressions has up
// to 8 * 8 terms of up to 4 + 4 factors before it is merged and checked
// against the storage limits.
#define WORK_FACTORS (2 * TJ_DIM_MAX_FACTORS)
#define WORK_TERMS (TJ_DIM_MAX_TERMS * TJ_DIM_MAX_TERMS + TJ_DIM_MAX_TERMS)

typedef struct wterm_t {
  int64_t coeff;
  uint8_t num_factors;
  uint8_t factors[WORK_FACTORS];  // symbol ids, non-decreasing
} wterm_t;

typedef struct wpoly_t {
  uint32_t num_terms;
  wterm_t terms[WORK_TERMS];
} wpoly_t;

// Why interning failed; the caller turns it into a message naming operands.
typedef enum intern_result_e {
  INTERN_OK,
  INTERN_NEGATIVE,  // the expression is a negative constant
  INTERN_TOO_MANY_TERMS,
  INTERN_TOO_MANY_FACTORS,
  INTERN_OUT_OF_MEMORY,
} intern_result_t;

static bool expr_index(const tj_dimtab_t* tab, int64_t dim, uint32_t* out) {
  if (dim > -2) return false;
  // -2 - dim cannot overflow for dim <= -2 (INT64_MIN gives 2^63 - 2).
  uint64_t index = (uint64_t)(-2 - dim);
  if (index >= tab->num_exprs) return false;
  *out = (uint32_t)index;
  return true;
}

static bool dim_valid(const tj_dimtab_t* tab, int64_t dim) {
  uint32_t index;
  return dim >= 0 || expr_index(tab, dim, &index);
}

static void load(const tj_dimtab_t* tab, int64_t dim, wpoly_t* out) {
  out->num_terms = 0;
  if (dim >= 0) {
    if (dim == 0) return;
    wterm_t* t = &out->terms[out->num_terms++];
    memset(t, 0, sizeof(*t));
    t->coeff = dim;
    return;
  }
  uint32_t index = 0;
  expr_index(tab, dim, &index);  // callers have validated |dim|
  const tj_dim_expr_t* e = &tab->exprs[index];
  for (uint32_t i = 0; i < e->num_terms; ++i) {
    wterm_t* t = &out->terms[out->num_terms++];
    memset(t, 0, sizeof(*t));
    t->coeff = e->terms[i].coeff;
    t->num_factors = e->terms[i].num_factors;
    memcpy(t->factors, e->terms[i].factors, e->terms[i].num_factors);
  }
}

// < 0 when |a| sorts before |b| in the canonical (graded-lex) order.
static int monomial_cmp(const wterm_t* a, const wterm_t* b) {
  if (a->num_factors != b->num_factors)
    return a->num_factors > b->num_factors ? -1 : 1;
  for (uint32_t i = 0; i < a->num_factors; ++i) {
    if (a->factors[i] != b->factors[i])
      return a->factors[i] < b->factors[i] ? -1 : 1;
  }
  return 0;
}

// Sorts, merges like terms and drops zeros. False on coefficient overflow.
static bool canonicalize(wpoly_t* p) {
  for (uint32_t i = 1; i < p->num_terms; ++i) {
    wterm_t t = p->terms[i];
    uint32_t j = i;
    while (j > 0 && monomial_cmp(&t, &p->terms[j - 1]) < 0) {
      p->terms[j] = p->terms[j - 1];
      --j;
    }
    p->terms[j] = t;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->num_terms; ++i) {
    if (n > 0 && monomial_cmp(&p->terms[n - 1], &p->terms[i]) == 0) {
      if (tj_add_overflow_i64(p->terms[n - 1].coeff, p->terms[i].coeff,
                              &p->terms[n - 1].coeff))
        return false;
    } else {
      p->terms[n++] = p->terms[i];
    }
    if (p->terms[n - 1].coeff == 0) --n;
  }
  p->num_terms = n;
  return true;
}

// Product of two terms. False on coefficient overflow.
static bool term_mul(const wterm_t* a, const wterm_t* b, wterm_t* out) {
  memset(out, 0, sizeof(*out));
  if (tj_mul_overflow_i64(a->coeff, b->coeff, &out->coeff)) return false;
  uint32_t i = 0, j = 0, n = 0;
  while (i < a->num_factors || j < b->num_factors) {
    if (n == WORK_FACTORS) return false;  // unreachable with stored inputs
    if (j == b->num_factors ||
        (i < a->num_factors && a->factors[i] <= b->factors[j])) {
      out->factors[n++] = a->factors[i++];
    } else {
      out->factors[n++] = b->factors[j++];
    }
  }
  out->num_factors = (uint8_t)n;
  return true;
}

//===--- the hash-consing table ---===//

static uint32_t expr_hash(const tj_dim_expr_t* e) {
  uint64_t h = UINT64_C(1469598103934665603);  // FNV-1a
#define TJ_MIX(byte) (h = (h ^ (uint8_t)(byte)) * UINT64_C(1099511628211))
  for (uint32_t i = 0; i < e->num_terms; ++i) {
    uint64_t c = (uint64_t)e->terms[i].coeff;
    for (int k = 0; k < 8; ++k) TJ_MIX(c >> (8 * k));
    TJ_MIX(e->terms[i].num_factors);
    for (uint32_t f = 0; f < e->terms[i].num_factors; ++f)
      TJ_MIX(e->terms[i].factors[f]);
  }
#undef TJ_MIX
  return (uint32_t)(h ^ (h >> 32));
}

static bool expr_equal(const tj_dim_expr_t* a, const tj_dim_expr_t* b) {
  if (a->num_terms != b->num_terms) return false;
  for (uint32_t i = 0; i < a->num_terms; ++i) {
    const tj_dim_term_t* x = &a->terms[i];
    const tj_dim_term_t* y = &b->terms[i];
    if (x->coeff != y->coeff || x->num_factors != y->num_factors ||
        memcmp(x->factors, y->factors, x->num_factors) != 0)
      return false;
  }
  return true;
}

// Rebuilds the index with |capacity| slots (a power of 2 above the load).
static bool index_rebuild(tj_dimtab_t* tab, uint32_t capacity) {
  uint32_t* slots = tj_calloc(tab->allocator, capacity, sizeof(uint32_t));
  if (!slots) return false;
  for (uint32_t e = 0; e < tab->num_exprs; ++e) {
    uint32_t slot = expr_hash(&tab->exprs[e]) & (capacity - 1);
    while (slots[slot] != 0) slot = (slot + 1) & (capacity - 1);
    slots[slot] = e + 1;
  }
  tj_free(tab->allocator, tab->index,
          (size_t)tab->index_capacity * sizeof(uint32_t));
  tab->index = slots;
  tab->index_capacity = capacity;
  return true;
}

// Interns canonical |p|: a constant comes back as itself, anything else as
// the encoding of its (possibly new) table entry.
static intern_result_t intern(tj_dimtab_t* tab, const wpoly_t* p,
                              int64_t* out) {
  if (p->num_terms == 0) {
    *out = 0;
    return INTERN_OK;
  }
  if (p->num_terms == 1 && p->terms[0].num_factors == 0) {
    if (p->terms[0].coeff < 0) return INTERN_NEGATIVE;
    *out = p->terms[0].coeff;
    return INTERN_OK;
  }
  if (p->num_terms > TJ_DIM_MAX_TERMS) return INTERN_TOO_MANY_TERMS;
  tj_dim_expr_t e;
  memset(&e, 0, sizeof(e));
  e.num_terms = (uint8_t)p->num_terms;
  for (uint32_t i = 0; i < p->num_terms; ++i) {
    if (p->terms[i].num_factors > TJ_DIM_MAX_FACTORS)
      return INTERN_TOO_MANY_FACTORS;
    e.terms[i].coeff = p->terms[i].coeff;
    e.terms[i].num_factors = p->terms[i].num_factors;
    memcpy(e.terms[i].factors, p->terms[i].factors, p->terms[i].num_factors);
  }
  uint32_t hash = expr_hash(&e);
  if (tab->index_capacity > 0) {
    uint32_t mask = tab->index_capacity - 1;
    for (uint32_t slot = hash & mask; tab->index[slot] != 0;
         slot = (slot + 1) & mask) {
      uint32_t found = tab->index[slot] - 1;
      if (expr_equal(&tab->exprs[found], &e)) {
        *out = -2 - (int64_t)found;
        return INTERN_OK;
      }
    }
  }
  // Grow everything first so that a failure leaves the table unchanged.
  if (tab->num_exprs >= UINT32_MAX / 4) return INTERN_OUT_OF_MEMORY;
  if (tj_array_reserve(tab->allocator, (void**)&tab->exprs, &tab->expr_capacity,
                       tab->num_exprs + 1, sizeof(tj_dim_expr_t)) != NULL)
    return INTERN_OUT_OF_MEMORY;
  // Load factor at most 1/2 keeps probe sequences short.
  if ((uint64_t)(tab->num_exprs + 1) * 2 > tab->index_capacity) {
    uint32_t capacity = tab->index_capacity ? tab->index_capacity * 2 : 16;
    if (!index_rebuild(tab, capacity)) return INTERN_OUT_OF_MEMORY;
  }
  uint32_t id = tab->num_exprs++;
  tab->exprs[id] = e;
  uint32_t mask = tab->index_capacity - 1;
  uint32_t slot = hash & mask;
  while (tab->index[slot] != 0) slot = (slot + 1) & mask;
  tab->index[slot] = id + 1;
  *out = -2 - (int64_t)id;
  return INTERN_OK;
}

void tj_dimtab_initialize(tj_dimtab_t* tab, tj_allocator_t allocator) {
  memset(tab, 0, sizeof(*tab));
  tab->allocator = allocator;
}

void tj_dimtab_deinitialize(tj_dimtab_t* tab) {
  for (uint32_t i = 0; i < tab->num_symbols; ++i)
    tj_free_string(tab->allocator, tab->symbol_names[i]);
  tj_free(tab->allocator, tab->symbol_names,
          (size_t)tab->symbol_capacity * sizeof(char*));
  tj_free(tab->allocator, tab->exprs,
          (size_t)tab->expr_capacity * sizeof(tj_dim_expr_t));
  tj_free(tab->allocator, tab->index,
          (size_t)tab->index_capacity * sizeof(uint32_t));
  memset(tab, 0, sizeof(*tab));
}

tj_status_t tj_dimtab_copy(tj_dimtab_t* dst, const tj_dimtab_t* src,
                           tj_allocator_t al) {
  tj_dimtab_initialize(dst, al);
  dst->dynamic_symbols = src->dynamic_symbols;
  dst->value_symbols = src->value_symbols;
  memcpy(dst->symbol_bounds, src->symbol_bounds, sizeof(dst->symbol_bounds));
  if (src->num_symbols) {
    dst->symbol_names = tj_calloc(al, src->num_symbols, sizeof(char*));
    if (!dst->symbol_names) return tj_status_oom();
    dst->symbol_capacity = src->num_symbols;
    for (uint32_t i = 0; i < src->num_symbols; ++i, ++dst->num_symbols) {
      dst->symbol_names[i] = tj_strdup(al, src->symbol_names[i]);
      if (!dst->symbol_names[i]) goto oom;
    }
  }
  if (src->num_exprs) {
    dst->exprs = tj_alloc(al, (size_t)src->num_exprs * sizeof(tj_dim_expr_t));
    if (!dst->exprs) goto oom;
    dst->expr_capacity = dst->num_exprs = src->num_exprs;
    memcpy(dst->exprs, src->exprs,
           (size_t)src->num_exprs * sizeof(tj_dim_expr_t));
  }
  if (src->index_capacity) {
    dst->index = tj_alloc(al, (size_t)src->index_capacity * sizeof(uint32_t));
    if (!dst->index) goto oom;
    dst->index_capacity = src->index_capacity;
    memcpy(dst->index, src->index,
           (size_t)src->index_capacity * sizeof(uint32_t));
  }
  return NULL;
oom:
  tj_dimtab_deinitialize(dst);
  dst->allocator = al;
  return tj_status_oom();
}

//===--- errors ---===//

static tj_status_t invalid_dim(const tj_dimtab_t* tab, int64_t dim) {
  (void)tab;
  if (dim == -1) return tj_invalid("dim -1 (TJ_DIM_INFER) is not allowed here");
  return tj_invalid("dim %lld is not a dim of this graph", (long long)dim);
}

// The status for a failed a <op> b.
static tj_status_t op_error(const tj_dimtab_t* tab, intern_result_t result,
                            const char* op, int64_t a, int64_t b) {
  char sa[128], sb[128];
  tj_dim_format(tab, a, sa, sizeof(sa));
  tj_dim_format(tab, b, sb, sizeof(sb));
  switch (result) {
    case INTERN_OUT_OF_MEMORY:
      return tj_status_oom();
    case INTERN_TOO_MANY_TERMS:
      return tj_unsupported("dim %s %s %s needs more than %d terms", sa, op, sb,
                            TJ_DIM_MAX_TERMS);
    case INTERN_TOO_MANY_FACTORS:
      return tj_unsupported("dim %s %s %s needs more than %d symbols in a term",
                            sa, op, sb, TJ_DIM_MAX_FACTORS);
    case INTERN_NEGATIVE:
      return tj_invalid("dim %s %s %s is negative", sa, op, sb);
    case INTERN_OK:
      break;
  }
  return tj_invalid("dim overflow: %s %s %s", sa, op, sb);
}

//===--- symbols ---===//

bool tj_is_c_identifier(const char* s) {
  if (!s ||
      !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return false;
  for (++s; *s; ++s) {
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  }
  return true;
}

static int64_t symbol_dim(tj_dimtab_t* tab, uint32_t id, intern_result_t* r) {
  wpoly_t p;
  p.num_terms = 1;
  memset(&p.terms[0], 0, sizeof(p.terms[0]));
  p.terms[0].coeff = 1;
  p.terms[0].num_factors = 1;
  p.terms[0].factors[0] = (uint8_t)id;
  int64_t dim = 0;
  *r = intern(tab, &p, &dim);
  return dim;
}

tj_status_t tj_dim_symbol(tj_dimtab_t* tab, const char* name, int64_t* out) {
  if (!tj_is_c_identifier(name))
    return tj_invalid("symbol name \"%s\" is not a C identifier",
                      name ? name : "(null)");
  uint32_t id;
  intern_result_t r;
  if (tj_dim_find_symbol(tab, name, &id)) {
    // Created together with the symbol, so this only looks it up.
    *out = symbol_dim(tab, id, &r);
    return r == INTERN_OK ? NULL : tj_status_oom();
  }
  if (tab->num_symbols >= TJ_MAX_SYMBOLS)
    return tj_invalid("symbol %s: a graph has at most %d symbols", name,
                      TJ_MAX_SYMBOLS);
  TJ_RETURN_IF_ERROR(tj_array_reserve(
      tab->allocator, (void**)&tab->symbol_names, &tab->symbol_capacity,
      tab->num_symbols + 1, sizeof(char*)));
  char* copy = tj_strdup(tab->allocator, name);
  if (!copy) return tj_status_oom();
  int64_t dim = symbol_dim(tab, tab->num_symbols, &r);
  if (r != INTERN_OK) {
    tj_free_string(tab->allocator, copy);
    return tj_status_oom();
  }
  tab->symbol_names[tab->num_symbols++] = copy;
  *out = dim;
  return NULL;
}

uint32_t tj_dim_num_symbols(const tj_dimtab_t* tab) { return tab->num_symbols; }

const char* tj_dim_symbol_name(const tj_dimtab_t* tab, uint32_t id) {
  return id < tab->num_symbols ? tab->symbol_names[id] : NULL;
}

bool tj_dim_find_symbol(const tj_dimtab_t* tab, const char* name,
                        uint32_t* out_id) {
  for (uint32_t i = 0; i < tab->num_symbols; ++i) {
    if (strcmp(tab->symbol_names[i], name) == 0) {
      *out_id = i;
      return true;
    }
  }
  return false;
}

//===--- arithmetic ---===//

tj_status_t tj_dim_add(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out) {
  if (!dim_valid(tab, a)) return invalid_dim(tab, a);
  if (!dim_valid(tab, b)) return invalid_dim(tab, b);
  if (a >= 0 && b >= 0) {
    if (tj_add_overflow_i64(a, b, out))
      return op_error(tab, INTERN_OK, "+", a, b);
    return NULL;
  }
  wpoly_t p, q;
  load(tab, a, &p);
  load(tab, b, &q);
  memcpy(&p.terms[p.num_terms], q.terms, q.num_terms * sizeof(wterm_t));
  p.num_terms += q.num_terms;
  if (!canonicalize(&p)) return op_error(tab, INTERN_OK, "+", a, b);
  intern_result_t r = intern(tab, &p, out);
  return r == INTERN_OK ? NULL : op_error(tab, r, "+", a, b);
}

tj_status_t tj_dim_mul(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out) {
  if (!dim_valid(tab, a)) return invalid_dim(tab, a);
  if (!dim_valid(tab, b)) return invalid_dim(tab, b);
  if (a >= 0 && b >= 0) {
    if (tj_mul_overflow_i64(a, b, out))
      return op_error(tab, INTERN_OK, "*", a, b);
    return NULL;
  }
  wpoly_t p, q, r;
  load(tab, a, &p);
  load(tab, b, &q);
  r.num_terms = 0;
  for (uint32_t i = 0; i < p.num_terms; ++i) {
    for (uint32_t j = 0; j < q.num_terms; ++j) {
      if (!term_mul(&p.terms[i], &q.terms[j], &r.terms[r.num_terms++]))
        return op_error(tab, INTERN_OK, "*", a, b);
    }
  }
  if (!canonicalize(&r)) return op_error(tab, INTERN_OK, "*", a, b);
  intern_result_t result = intern(tab, &r, out);
  return result == INTERN_OK ? NULL : op_error(tab, result, "*", a, b);
}

tj_status_t tj_dim_sub(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out) {
  if (!dim_valid(tab, a)) return invalid_dim(tab, a);
  if (!dim_valid(tab, b)) return invalid_dim(tab, b);
  char sa[128], sb[128];
  if (a >= 0 && b >= 0) {
    if (a >= b) {
      *out = a - b;
      return NULL;
    }
    return tj_invalid("dim %lld - %lld is negative", (long long)a,
                      (long long)b);
  }
  wpoly_t p, q;
  load(tab, a, &p);
  load(tab, b, &q);
  for (uint32_t i = 0; i < q.num_terms; ++i) {
    wterm_t t = q.terms[i];
    if (t.coeff == INT64_MIN) return op_error(tab, INTERN_OK, "-", a, b);
    t.coeff = -t.coeff;
    p.terms[p.num_terms++] = t;
  }
  if (!canonicalize(&p)) return op_error(tab, INTERN_OK, "-", a, b);
  // Only what add and mul could have built is a dim: a term with a
  // negative coefficient (T - 1) is negative for some symbol value.
  for (uint32_t i = 0; i < p.num_terms; ++i) {
    if (p.terms[i].coeff < 0) {
      tj_dim_format(tab, a, sa, sizeof(sa));
      tj_dim_format(tab, b, sb, sizeof(sb));
      return tj_invalid(
          "dim %s - %s is no dim: it is negative for some values of its "
          "symbols",
          sa, sb);
    }
  }
  intern_result_t r = intern(tab, &p, out);
  return r == INTERN_OK ? NULL : op_error(tab, r, "-", a, b);
}

tj_status_t tj_dim_product(tj_dimtab_t* tab, int32_t rank, const int64_t* dims,
                           int64_t* out) {
  int64_t acc = 1;
  for (int32_t i = 0; i < rank; ++i)
    TJ_RETURN_IF_ERROR(tj_dim_mul(tab, acc, dims[i], &acc));
  *out = acc;
  return NULL;
}

// |lead| / |divisor| as a term, if the monomial and the coefficient divide.
static bool term_div(const wterm_t* lead, const wterm_t* divisor,
                     wterm_t* out) {
  if (divisor->coeff == 0 || lead->coeff % divisor->coeff != 0) return false;
  if (divisor->coeff == -1 && lead->coeff == INT64_MIN) return false;
  memset(out, 0, sizeof(*out));
  out->coeff = lead->coeff / divisor->coeff;
  // Multiset difference of two sorted factor lists.
  uint32_t j = 0, n = 0;
  for (uint32_t i = 0; i < lead->num_factors; ++i) {
    if (j < divisor->num_factors && divisor->factors[j] == lead->factors[i]) {
      ++j;
    } else {
      out->factors[n++] = lead->factors[i];
    }
  }
  if (j != divisor->num_factors) return false;
  out->num_factors = (uint8_t)n;
  return true;
}

tj_status_t tj_dim_div_exact(tj_dimtab_t* tab, int64_t a, int64_t b,
                             int64_t* out, bool* out_ok) {
  *out_ok = false;
  if (!dim_valid(tab, a)) return invalid_dim(tab, a);
  if (!dim_valid(tab, b)) return invalid_dim(tab, b);
  if (b == 0) return NULL;
  if (a == b) {
    *out = 1;
    *out_ok = true;
    return NULL;
  }
  if (a >= 0 && b >= 0) {
    if (a % b != 0) return NULL;
    *out = a / b;
    *out_ok = true;
    return NULL;
  }
  // The division algorithm: with one divisor and a monomial order, a is a
  // multiple of b iff repeatedly cancelling the leading term of the
  // remainder with a multiple of b's leading term reaches zero.
  wpoly_t rem, div, quot;
  load(tab, a, &rem);
  load(tab, b, &div);
  quot.num_terms = 0;
  for (int steps = 0; rem.num_terms > 0; ++steps) {
    if (steps > 4 * WORK_TERMS || quot.num_terms == WORK_TERMS ||
        rem.num_terms + div.num_terms > WORK_TERMS)
      return NULL;
    wterm_t t;
    if (!term_div(&rem.terms[0], &div.terms[0], &t)) return NULL;
    quot.terms[quot.num_terms++] = t;
    for (uint32_t i = 0; i < div.num_terms; ++i) {
      wterm_t* sub = &rem.terms[rem.num_terms++];
      if (!term_mul(&t, &div.terms[i], sub) || sub->coeff == INT64_MIN)
        return NULL;
      sub->coeff = -sub->coeff;
    }
    if (!canonicalize(&rem)) return NULL;
  }
  if (!canonicalize(&quot)) return NULL;
  // Dims are sums of products with positive coefficients: that is all add
  // and mul can build and all .tj text can spell. (B*B*B+1) / (B+1) =
  // B*B-B+1 is exact but outside that language, so it counts as "no".
  for (uint32_t i = 0; i < quot.num_terms; ++i) {
    if (quot.terms[i].coeff < 0) return NULL;
  }
  int64_t q = 0;
  intern_result_t r = intern(tab, &quot, &q);
  if (r == INTERN_OUT_OF_MEMORY) return tj_status_oom();
  // A quotient the table cannot hold, or a negative one, is "no".
  if (r != INTERN_OK) return NULL;
  *out = q;
  *out_ok = true;
  return NULL;
}

tj_status_t tj_dim_eval(const tj_dimtab_t* tab, int64_t dim,
                        const int64_t* symbol_values, int64_t* out) {
  if (dim >= 0) {
    *out = dim;
    return NULL;
  }
  uint32_t index;
  if (!expr_index(tab, dim, &index)) return invalid_dim(tab, dim);
  const tj_dim_expr_t* e = &tab->exprs[index];
  int64_t sum = 0;
  bool overflow = false;
  for (uint32_t i = 0; i < e->num_terms; ++i) {
    int64_t v = e->terms[i].coeff;
    for (uint32_t f = 0; f < e->terms[i].num_factors; ++f) {
      uint8_t id = e->terms[i].factors[f];
      int64_t s = symbol_values[id];
      if (s < 0)
        return tj_invalid("symbol %s is unbound", tj_dim_symbol_name(tab, id));
      overflow |= tj_mul_overflow_i64(v, s, &v);
    }
    overflow |= tj_add_overflow_i64(sum, v, &sum);
  }
  if (overflow || sum < 0) {
    char text[128];
    tj_dim_format(tab, dim, text, sizeof(text));
    if (overflow) return tj_invalid("dim %s overflows int64", text);
    return tj_invalid("dim %s evaluates to %lld", text, (long long)sum);
  }
  *out = sum;
  return NULL;
}

int32_t tj_dim_as_symbol(const tj_dimtab_t* tab, int64_t dim) {
  const tj_dim_expr_t* e = tj_dim_expr(tab, dim);
  if (!e || e->num_terms != 1 || e->terms[0].coeff != 1 ||
      e->terms[0].num_factors != 1)
    return -1;
  return e->terms[0].factors[0];
}

const tj_dim_expr_t* tj_dim_expr(const tj_dimtab_t* tab, int64_t dim) {
  uint32_t index;
  return expr_index(tab, dim, &index) ? &tab->exprs[index] : NULL;
}

//===--- text ---===//

// snprintf-style appending: counts what it would need, writes what fits.
typedef struct sbuf_t {
  char* buf;
  size_t size;
  size_t len;
} sbuf_t;

static void sb_put(sbuf_t* sb, const char* s) {
  size_t n = strlen(s);
  if (sb->size > 0 && sb->len < sb->size - 1) {
    size_t room = sb->size - 1 - sb->len;
    memcpy(sb->buf + sb->len, s, n < room ? n : room);
  }
  sb->len += n;
}

static void sb_put_u64(sbuf_t* sb, uint64_t v) {
  char text[24];
  snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
  sb_put(sb, text);
}

static int sb_finish(sbuf_t* sb) {
  if (sb->size > 0) sb->buf[sb->len < sb->size ? sb->len : sb->size - 1] = '\0';
  return sb->len > (size_t)INT32_MAX ? INT32_MAX : (int)sb->len;
}

// A term's factor names sorted by name: printing by name rather than by
// symbol id makes the text independent of the order symbols were created
// in, so printed IR re-parses to the same text.
typedef struct named_term_t {
  const tj_dim_term_t* term;
  const char* names[TJ_DIM_MAX_FACTORS];
} named_term_t;

static int named_term_cmp(const named_term_t* a, const named_term_t* b) {
  if (a->term->num_factors != b->term->num_factors)
    return a->term->num_factors > b->term->num_factors ? -1 : 1;
  for (uint32_t i = 0; i < a->term->num_factors; ++i) {
    int c = strcmp(a->names[i], b->names[i]);
    if (c != 0) return c;
  }
  return 0;
}

static void format_dim(const tj_dimtab_t* tab, int64_t dim, sbuf_t* sb) {
  if (dim >= 0) {
    sb_put_u64(sb, (uint64_t)dim);
    return;
  }
  const tj_dim_expr_t* e = tj_dim_expr(tab, dim);
  if (!e) {
    sb_put(sb, dim == -1 ? "-1" : "?");
    return;
  }
  named_term_t terms[TJ_DIM_MAX_TERMS];
  for (uint32_t i = 0; i < e->num_terms; ++i) {
    named_term_t* t = &terms[i];
    t->term = &e->terms[i];
    for (uint32_t f = 0; f < t->term->num_factors; ++f) {
      const char* name = tj_dim_symbol_name(tab, t->term->factors[f]);
      uint32_t k = f;
      for (; k > 0 && strcmp(name, t->names[k - 1]) < 0; --k)
        t->names[k] = t->names[k - 1];
      t->names[k] = name;
    }
    for (uint32_t k = i; k > 0 && named_term_cmp(t, &terms[k - 1]) < 0; --k) {
      named_term_t tmp = terms[k];
      terms[k] = terms[k - 1];
      terms[k - 1] = tmp;
      t = &terms[k - 1];
    }
  }
  for (uint32_t i = 0; i < e->num_terms; ++i) {
    const named_term_t* t = &terms[i];
    int64_t c = t->term->coeff;
    uint64_t magnitude = c < 0 ? (uint64_t)0 - (uint64_t)c : (uint64_t)c;
    if (c < 0) {
      sb_put(sb, "-");
    } else if (i > 0) {
      sb_put(sb, "+");
    }
    bool print_coeff = magnitude != 1 || t->term->num_factors == 0;
    if (print_coeff) sb_put_u64(sb, magnitude);
    for (uint32_t f = 0; f < t->term->num_factors; ++f) {
      if (print_coeff || f > 0) sb_put(sb, "*");
      sb_put(sb, t->names[f]);
    }
  }
}

int tj_dim_format(const tj_dimtab_t* tab, int64_t dim, char* buf, size_t size) {
  sbuf_t sb = {buf, size, 0};
  format_dim(tab, dim, &sb);
  return sb_finish(&sb);
}

int tj_shape_format(const tj_dimtab_t* tab, int32_t rank, const int64_t* dims,
                    char* buf, size_t size) {
  sbuf_t sb = {buf, size, 0};
  sb_put(&sb, "[");
  for (int32_t i = 0; i < rank; ++i) {
    if (i > 0) sb_put(&sb, ",");
    format_dim(tab, dims[i], &sb);
  }
  sb_put(&sb, "]");
  return sb_finish(&sb);
}
