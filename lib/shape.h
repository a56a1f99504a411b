// Symbolic dims: small polynomials over named positive-integer symbols.
//
// A dim is an int64_t: >= 0 is a constant; <= -2 encodes expression number
// (-2 - d) in a tj_dimtab_t. Every expression is kept in one canonical form
// (terms sorted by their monomial, like terms merged, zero terms dropped,
// hash-consed), so two dims are equal iff their encodings are equal, and a
// dim is constant iff it is >= 0. The table belongs to one graph.

#ifndef TJ_LIB_SHAPE_H_
#define TJ_LIB_SHAPE_H_

#include "lib/base.h"

#define TJ_DIM_MAX_TERMS 8    // terms in one expression, constant included
#define TJ_DIM_MAX_FACTORS 4  // symbols multiplied in one term
#define TJ_MAX_SYMBOLS 64     // symbols in one graph

// coeff * sym[factors[0]] * ... ; num_factors == 0 is the constant term.
// |factors| are symbol ids in non-decreasing order (B*B is {B, B}).
typedef struct tj_dim_term_t {
  int64_t coeff;
  uint8_t num_factors;
  uint8_t factors[TJ_DIM_MAX_FACTORS];
} tj_dim_term_t;

typedef struct tj_dim_expr_t {
  uint8_t num_terms;
  tj_dim_term_t terms[TJ_DIM_MAX_TERMS];
} tj_dim_expr_t;

typedef struct tj_dimtab_t {
  tj_allocator_t allocator;
  char** symbol_names;  // owned, tj_strdup
  uint32_t num_symbols, symbol_capacity;
  tj_dim_expr_t* exprs;
  uint32_t num_exprs, expr_capacity;
  // Open-addressing hash index over |exprs| for hash-consing: slot holds
  // expression number + 1, 0 = empty; |index_capacity| is 0 or a power of 2.
  uint32_t* index;
  uint32_t index_capacity;
  // Data-dependent symbols (custom ops, tj_custom_dynamic_dim): bit i set
  // when symbol i is set at run time by the op that makes it, within the
  // dim |symbol_bounds|[i] (over the other symbols), which binds it until
  // then (lib/runtime_shape.c).
  uint64_t dynamic_symbols;
  int64_t symbol_bounds[TJ_MAX_SYMBOLS];
  // Value symbols (range with run-time inputs, lib/dd_ops.c): bit i set
  // when symbol i is a length computed from scalar graph inputs' values
  // before the run (tj_dd_bind_values), then fixed for the whole run like a
  // dim an input binds.
  uint64_t value_symbols;
} tj_dimtab_t;

// True if |s| is a C identifier ([A-Za-z_][A-Za-z0-9_]*): the rule for
// symbol, input, output and graph names, so that .tj text can spell them.
bool tj_is_c_identifier(const char* s);

static inline bool tj_dim_is_const(int64_t dim) { return dim >= 0; }
static inline bool tj_dim_is_symbolic(int64_t dim) { return dim <= -2; }

void tj_dimtab_initialize(tj_dimtab_t* tab, tj_allocator_t allocator);
void tj_dimtab_deinitialize(tj_dimtab_t* tab);
// Makes |dst| (not initialized) a copy of |src| allocated from |allocator|:
// the same symbols and the same expression numbers, so every dim of |src|
// means the same in |dst|, and dims added to |dst| later leave |src| as it
// is (kir/lower.c works on such a copy so that lowering never mutates the
// graph). OUT_OF_MEMORY leaves |dst| empty but initialized.
tj_status_t tj_dimtab_copy(tj_dimtab_t* dst, const tj_dimtab_t* src,
                           tj_allocator_t allocator);

// The dim of symbol |name| (created on first use). INVALID_ARGUMENT if
// |name| is not a C identifier or there are too many symbols.
tj_status_t tj_dim_symbol(tj_dimtab_t* tab, const char* name, int64_t* out);
// The id (0-based) and name of a symbol; the dim for symbol |id|.
uint32_t tj_dim_num_symbols(const tj_dimtab_t* tab);
const char* tj_dim_symbol_name(const tj_dimtab_t* tab, uint32_t id);
// Looks a symbol up by name without creating it; false if absent.
bool tj_dim_find_symbol(const tj_dimtab_t* tab, const char* name,
                        uint32_t* out_id);

// a + b, a * b. Constant arithmetic is overflow-checked (INVALID_ARGUMENT);
// an expression that needs more terms/factors than the limits is
// UNSUPPORTED. Both name the operands in the message.
tj_status_t tj_dim_add(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out);
tj_status_t tj_dim_mul(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out);
// a - b when the difference is a dim for every value of the symbols: a
// constant >= 0, or a polynomial with positive coefficients ((B + T) - B is
// T); INVALID_ARGUMENT naming both otherwise (T - 1, 2 - 3).
tj_status_t tj_dim_sub(tj_dimtab_t* tab, int64_t a, int64_t b, int64_t* out);
// Product of |rank| dims (1 for rank 0).
tj_status_t tj_dim_product(tj_dimtab_t* tab, int32_t rank, const int64_t* dims,
                           int64_t* out);
// a / b when b divides a exactly as a polynomial (b a nonzero constant, a
// single term, or any polynomial: exact multivariate division) and the
// quotient has only positive coefficients, like every dim; *out_ok = false
// (and NULL returned) otherwise.
tj_status_t tj_dim_div_exact(tj_dimtab_t* tab, int64_t a, int64_t b,
                             int64_t* out, bool* out_ok);

// The value of |dim| when symbol i has value |symbol_values|[i] (>= 0:
// symbols may be 0 at run time, size-0 batches are legal; a NEGATIVE value,
// by convention -1, means unbound and gives INVALID_ARGUMENT naming the
// symbol). Overflow, or a negative result, gives INVALID_ARGUMENT.
tj_status_t tj_dim_eval(const tj_dimtab_t* tab, int64_t dim,
                        const int64_t* symbol_values, int64_t* out);

// If |dim| is exactly one symbol (coefficient 1), its id; else -1.
int32_t tj_dim_as_symbol(const tj_dimtab_t* tab, int64_t dim);
// The expression behind a symbolic dim (NULL for a constant).
const tj_dim_expr_t* tj_dim_expr(const tj_dimtab_t* tab, int64_t dim);

// Writes |dim| as text ("1024", "B", "B*4+1", "2*B*S") into |buf| of |size|
// bytes, NUL-terminated and truncated if needed; returns the length it
// needed (like snprintf). The syntax is the .tj dim grammar.
int tj_dim_format(const tj_dimtab_t* tab, int64_t dim, char* buf, size_t size);
// Writes "[d0,d1,...]" for a shape, like tj_dim_format.
int tj_shape_format(const tj_dimtab_t* tab, int32_t rank, const int64_t* dims,
                    char* buf, size_t size);

#endif  // TJ_LIB_SHAPE_H_
