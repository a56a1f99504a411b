// lib/shape.c: canonical symbolic dims.

#include "tests/unit/test.h"

#include "lib/shape.h"

static tj_test_allocator_t g_alloc;

static void table_init(tj_dimtab_t* tab) {
  tj_test_allocator_initialize(&g_alloc, -1);
  tj_dimtab_initialize(tab, tj_test_allocator_get(&g_alloc));
}

static void table_done(tj_dimtab_t* tab) {
  tj_dimtab_deinitialize(tab);
  CHECK_EQ_INT(0, g_alloc.live_blocks);
  CHECK_EQ_INT(0, g_alloc.bad_frees);
}

static int64_t sym(tj_dimtab_t* tab, const char* name) {
  int64_t d = TJ_DIM_INVALID;
  CHECK_OK(tj_dim_symbol(tab, name, &d));
  return d;
}
static int64_t add(tj_dimtab_t* tab, int64_t a, int64_t b) {
  int64_t d = TJ_DIM_INVALID;
  CHECK_OK(tj_dim_add(tab, a, b, &d));
  return d;
}
static int64_t mul(tj_dimtab_t* tab, int64_t a, int64_t b) {
  int64_t d = TJ_DIM_INVALID;
  CHECK_OK(tj_dim_mul(tab, a, b, &d));
  return d;
}
static const char* fmt(tj_dimtab_t* tab, int64_t d) {
  static char buf[4][128];
  static int next;
  char* b = buf[next++ % 4];
  tj_dim_format(tab, d, b, 128);
  return b;
}

TEST(symbols) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  CHECK(tj_dim_is_symbolic(b));
  CHECK_EQ_INT(b, sym(&tab, "B"));  // same name, same dim
  int64_t s = sym(&tab, "seq_len");
  CHECK(s != b);
  CHECK_EQ_INT(2, tj_dim_num_symbols(&tab));
  CHECK_STREQ("seq_len", tj_dim_symbol_name(&tab, 1));
  CHECK(tj_dim_symbol_name(&tab, 2) == NULL);
  uint32_t id = 99;
  CHECK(tj_dim_find_symbol(&tab, "B", &id));
  CHECK_EQ_INT(0, id);
  CHECK(!tj_dim_find_symbol(&tab, "C", &id));
  CHECK_EQ_INT(0, tj_dim_as_symbol(&tab, b));
  CHECK_EQ_INT(1, tj_dim_as_symbol(&tab, s));
  CHECK_EQ_INT(-1, tj_dim_as_symbol(&tab, mul(&tab, b, 2)));
  CHECK_EQ_INT(-1, tj_dim_as_symbol(&tab, 7));
  CHECK(tj_dim_expr(&tab, 7) == NULL);
  CHECK(tj_dim_expr(&tab, b) != NULL);

  int64_t d = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
               tj_dim_symbol(&tab, "1B", &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
               tj_dim_symbol(&tab, "", &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "\"a-b\" is not a C identifier",
               tj_dim_symbol(&tab, "a-b", &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a C identifier",
               tj_dim_symbol(&tab, NULL, &d));
  CHECK_EQ_INT(2, tj_dim_num_symbols(&tab));
  table_done(&tab);
}

TEST(symbol_limit) {
  tj_dimtab_t tab;
  table_init(&tab);
  char name[16];
  for (int i = 0; i < TJ_MAX_SYMBOLS; ++i) {
    snprintf(name, sizeof(name), "s%d", i);
    sym(&tab, name);
  }
  int64_t d = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "at most 64 symbols",
               tj_dim_symbol(&tab, "one_more", &d));
  // Existing ones are still found.
  CHECK_OK(tj_dim_symbol(&tab, "s63", &d));
  table_done(&tab);
}

TEST(canonical_forms) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t c = sym(&tab, "C");
  int64_t d = sym(&tab, "D");
  // B + B == 2*B
  CHECK_EQ_INT(mul(&tab, 2, b), add(&tab, b, b));
  CHECK_EQ_INT(mul(&tab, b, 2), add(&tab, b, b));
  // (B+1)*(B+1) == B*B + 2*B + 1
  int64_t b1 = add(&tab, b, 1);
  int64_t lhs = mul(&tab, b1, b1);
  int64_t rhs = add(&tab, add(&tab, mul(&tab, b, b), mul(&tab, 2, b)), 1);
  CHECK_EQ_INT(lhs, rhs);
  CHECK_STREQ("B*B+2*B+1", fmt(&tab, lhs));
  // Commutativity, associativity, distributivity.
  CHECK_EQ_INT(add(&tab, b, c), add(&tab, c, b));
  CHECK_EQ_INT(mul(&tab, b, c), mul(&tab, c, b));
  CHECK_EQ_INT(mul(&tab, mul(&tab, b, c), d), mul(&tab, b, mul(&tab, c, d)));
  CHECK_EQ_INT(add(&tab, add(&tab, b, 3), c), add(&tab, b, add(&tab, c, 3)));
  CHECK_EQ_INT(mul(&tab, b, add(&tab, c, d)),
               add(&tab, mul(&tab, b, c), mul(&tab, d, b)));
  // Identities fold to the existing dims; zero folds to the constant 0.
  CHECK_EQ_INT(b, add(&tab, b, 0));
  CHECK_EQ_INT(b, mul(&tab, b, 1));
  CHECK_EQ_INT(0, mul(&tab, b, 0));
  CHECK_EQ_INT(7, add(&tab, 3, 4));
  CHECK_EQ_INT(12, mul(&tab, 3, 4));
  // Different expressions stay different.
  CHECK(add(&tab, b, c) != mul(&tab, b, c));
  CHECK(mul(&tab, 2, b) != mul(&tab, 3, b));
  table_done(&tab);
}

TEST(many_expressions_hash_cons) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t dims[1000];
  for (int i = 0; i < 1000; ++i) dims[i] = add(&tab, mul(&tab, b, i + 2), i);
  for (int i = 0; i < 1000; ++i)
    CHECK_EQ_INT(dims[i], add(&tab, i, mul(&tab, i + 2, b)));
  // B, the 1000 products k*B and 999 sums (the first sum is 2*B + 0):
  // nothing was stored twice.
  CHECK_EQ_INT(2000, tab.num_exprs);
  CHECK_STREQ("1001*B+999", fmt(&tab, dims[999]));
  table_done(&tab);
}

TEST(overflow_and_limits) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t d = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "dim overflow: 9223372036854775807 + 1",
               tj_dim_add(&tab, INT64_MAX, 1, &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "dim overflow: 4294967296 * ",
               tj_dim_mul(&tab, (int64_t)1 << 32, (int64_t)1 << 32, &d));
  int64_t big = mul(&tab, b, INT64_MAX);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "dim overflow",
               tj_dim_add(&tab, big, b, &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "dim overflow",
               tj_dim_mul(&tab, big, 2, &d));
  // Five symbols in one term, nine terms: beyond the storage limits.
  int64_t b4 = mul(&tab, mul(&tab, b, b), mul(&tab, b, b));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "more than 4 symbols",
               tj_dim_mul(&tab, b4, b, &d));
  int64_t sum = 0;
  char name[8];
  for (int i = 0; i < TJ_DIM_MAX_TERMS; ++i) {
    snprintf(name, sizeof(name), "S%d", i);
    sum = add(&tab, sum, sym(&tab, name));
  }
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "more than 8 terms",
               tj_dim_add(&tab, sum, 1, &d));
  // Not dims of this table.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "TJ_DIM_INFER",
               tj_dim_add(&tab, -1, b, &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a dim of this graph",
               tj_dim_mul(&tab, b, -1000, &d));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a dim of this graph",
               tj_dim_add(&tab, TJ_DIM_INVALID, 1, &d));
  table_done(&tab);
}

static int64_t div_exact(tj_dimtab_t* tab, int64_t a, int64_t b, bool* ok) {
  int64_t d = TJ_DIM_INVALID;
  CHECK_OK(tj_dim_div_exact(tab, a, b, &d, ok));
  return *ok ? d : TJ_DIM_INVALID;
}

TEST(div_exact) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t c = sym(&tab, "C");
  bool ok = false;
  CHECK_EQ_INT(3, div_exact(&tab, 12, 4, &ok));
  CHECK(ok);
  div_exact(&tab, 12, 5, &ok);
  CHECK(!ok);
  div_exact(&tab, 12, 0, &ok);
  CHECK(!ok);
  div_exact(&tab, b, 0, &ok);
  CHECK(!ok);
  CHECK_EQ_INT(b, div_exact(&tab, mul(&tab, 4, b), 4, &ok));
  CHECK(ok);
  div_exact(&tab, mul(&tab, 4, b), 3, &ok);
  CHECK(!ok);
  CHECK_EQ_INT(c, div_exact(&tab, mul(&tab, b, c), b, &ok));
  CHECK_EQ_INT(1, div_exact(&tab, add(&tab, b, c), add(&tab, c, b), &ok));
  CHECK_EQ_INT(0, div_exact(&tab, 0, b, &ok));
  CHECK(ok);
  div_exact(&tab, 1024, b, &ok);
  CHECK(!ok);
  div_exact(&tab, b, c, &ok);
  CHECK(!ok);
  // (B+1)^2 / (B+1) and (B*C + B) / (C+1): division by a polynomial.
  int64_t b1 = add(&tab, b, 1);
  CHECK_EQ_INT(b1, div_exact(&tab, mul(&tab, b1, b1), b1, &ok));
  CHECK_EQ_INT(
      b, div_exact(&tab, add(&tab, mul(&tab, b, c), b), add(&tab, c, 1), &ok));
  // (B*B + 1) / (B + 1) leaves a remainder.
  div_exact(&tab, add(&tab, mul(&tab, b, b), 1), b1, &ok);
  CHECK(!ok);
  // (B^3 + 1) / (B + 1) = B*B - B + 1 is exact, but a negative coefficient
  // is outside what dims may be.
  int64_t b3p1 = add(&tab, mul(&tab, mul(&tab, b, b), b), 1);
  div_exact(&tab, b3p1, b1, &ok);
  CHECK(!ok);
  // (B^3 + 2*B*B + 2*B + 1) / (B + 1) = B*B + B + 1.
  int64_t cubic = add(&tab, add(&tab, b3p1, mul(&tab, mul(&tab, b, b), 2)),
                      mul(&tab, b, 2));
  int64_t q = div_exact(&tab, cubic, b1, &ok);
  CHECK(ok);
  CHECK_STREQ("B*B+B+1", fmt(&tab, q));
  CHECK_EQ_INT(cubic, mul(&tab, q, b1));
  // 1024*B / (2*B) = 512; 1024*B*C / (32*C) = 32*B.
  CHECK_EQ_INT(512, div_exact(&tab, mul(&tab, 1024, b), mul(&tab, 2, b), &ok));
  CHECK_EQ_INT(
      mul(&tab, 32, b),
      div_exact(&tab, mul(&tab, mul(&tab, 1024, b), c), mul(&tab, c, 32), &ok));
  int64_t d = 0;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a dim",
               tj_dim_div_exact(&tab, -77, 2, &d, &ok));
  table_done(&tab);
}

TEST(eval) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t c = sym(&tab, "C");
  int64_t values[TJ_MAX_SYMBOLS];
  for (int i = 0; i < TJ_MAX_SYMBOLS; ++i) values[i] = -1;
  values[0] = 3;
  values[1] = 5;
  int64_t b1 = add(&tab, b, 1);
  int64_t e = add(&tab, mul(&tab, b1, b1), mul(&tab, mul(&tab, 2, b), c));
  int64_t v = 0;
  CHECK_OK(tj_dim_eval(&tab, e, values, &v));
  CHECK_EQ_INT(16 + 30, v);
  CHECK_OK(tj_dim_eval(&tab, 1024, values, &v));
  CHECK_EQ_INT(1024, v);
  values[0] = 0;  // size-0 batches are legal
  CHECK_OK(tj_dim_eval(&tab, e, values, &v));
  CHECK_EQ_INT(1, v);
  values[1] = -1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "symbol C is unbound",
               tj_dim_eval(&tab, e, values, &v));
  values[1] = INT64_MAX / 2;
  values[0] = 4;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "overflows int64",
               tj_dim_eval(&tab, e, values, &v));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not a dim",
               tj_dim_eval(&tab, -5000, values, &v));
  table_done(&tab);
}

TEST(format) {
  tj_dimtab_t tab;
  table_init(&tab);
  // S is created before B; printing orders by name, not by creation.
  int64_t s = sym(&tab, "S");
  int64_t b = sym(&tab, "B");
  CHECK_STREQ("B", fmt(&tab, b));
  CHECK_STREQ("1024", fmt(&tab, 1024));
  CHECK_STREQ("0", fmt(&tab, 0));
  CHECK_STREQ("-1", fmt(&tab, TJ_DIM_INFER));
  CHECK_STREQ("?", fmt(&tab, -999));
  CHECK_STREQ("4*B+1", fmt(&tab, add(&tab, mul(&tab, b, 4), 1)));
  CHECK_STREQ("2*B*S", fmt(&tab, mul(&tab, mul(&tab, s, 2), b)));
  CHECK_STREQ("B*S+B+S",
              fmt(&tab, add(&tab, add(&tab, mul(&tab, s, b), s), b)));
  CHECK_STREQ("B*B*S+3*S*S", fmt(&tab, add(&tab, mul(&tab, 3, mul(&tab, s, s)),
                                           mul(&tab, b, mul(&tab, b, s)))));
  // snprintf semantics: truncated, NUL-terminated, returns the full length.
  char small[4];
  int64_t e = add(&tab, mul(&tab, b, 4), 1);
  CHECK_EQ_INT(5, tj_dim_format(&tab, e, small, sizeof(small)));
  CHECK_STREQ("4*B", small);
  CHECK_EQ_INT(5, tj_dim_format(&tab, e, NULL, 0));
  char shape[64];
  int64_t dims[3] = {b, 1024, e};
  CHECK_EQ_INT(14, tj_shape_format(&tab, 3, dims, shape, sizeof(shape)));
  CHECK_STREQ("[B,1024,4*B+1]", shape);
  CHECK_EQ_INT(2, tj_shape_format(&tab, 0, dims, shape, sizeof(shape)));
  CHECK_STREQ("[]", shape);
  table_done(&tab);
}

TEST(product) {
  tj_dimtab_t tab;
  table_init(&tab);
  int64_t b = sym(&tab, "B");
  int64_t d = 0;
  int64_t dims[3] = {b, 4, 8};
  CHECK_OK(tj_dim_product(&tab, 3, dims, &d));
  CHECK_EQ_INT(mul(&tab, 32, b), d);
  CHECK_OK(tj_dim_product(&tab, 0, dims, &d));
  CHECK_EQ_INT(1, d);
  int64_t zero[2] = {b, 0};
  CHECK_OK(tj_dim_product(&tab, 2, zero, &d));
  CHECK_EQ_INT(0, d);
  table_done(&tab);
}

// Builds a few dims under an allocator that fails the Nth allocation.
static tj_status_t build_dims(tj_dimtab_t* tab) {
  int64_t b, c, d;
  TJ_RETURN_IF_ERROR(tj_dim_symbol(tab, "B", &b));
  TJ_RETURN_IF_ERROR(tj_dim_symbol(tab, "C", &c));
  for (int i = 1; i < 40; ++i) {
    TJ_RETURN_IF_ERROR(tj_dim_mul(tab, b, i, &d));
    TJ_RETURN_IF_ERROR(tj_dim_add(tab, d, c, &d));
  }
  return NULL;
}

TEST(out_of_memory) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, fail_at);
    tj_dimtab_t tab;
    tj_dimtab_initialize(&tab, tj_test_allocator_get(&alloc));
    tj_status_t status = build_dims(&tab);
    uint32_t exprs = tab.num_exprs;
    tj_dimtab_deinitialize(&tab);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) {
      CHECK_EQ_INT(2 + 2 * 39 - 1, exprs);  // B, C, B*i (i>1), B*i+C
      CHECK(fail_at > 3);
      break;
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
  }
}

int main(void) {
  RUN_TEST(symbols);
  RUN_TEST(symbol_limit);
  RUN_TEST(canonical_forms);
  RUN_TEST(many_expressions_hash_cons);
  RUN_TEST(overflow_and_limits);
  RUN_TEST(div_exact);
  RUN_TEST(eval);
  RUN_TEST(format);
  RUN_TEST(product);
  RUN_TEST(out_of_memory);
  TEST_MAIN_END();
}
