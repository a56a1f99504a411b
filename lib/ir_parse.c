// The .tj parser (grammar: docs/tj-text-format.md): a hand-written lexer and
// recursive-descent parser that builds the graph through tj_graph_append, so
// that text and the C builder share one type inference and one attribute
// normalization. The printed type on every line is checked against what
// inference produced.
//
// Every error is INVALID_ARGUMENT "<file>:<line>:<col>: <message>" (errors
// from inference keep their code and get the node's line:col prefixed), or
// OUT_OF_MEMORY with nothing leaked. Columns count bytes from 1. The text
// need not be NUL-terminated; a NUL byte inside it is an error.

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/ir_text.h"
#include "lib/scatter.h"

// Longer numbers are rejected rather than copied: the printer never writes
// more than 24 characters for one.
#define MAX_NUMBER_CHARS 64

//===--- tokens ---===//

typedef enum tok_kind_e {
  TOK_EOF,
  TOK_NEWLINE,
  TOK_IDENT,   // [A-Za-z_][A-Za-z0-9_]*
  TOK_GLOBAL,  // @ident
  TOK_LOCAL,   // %[A-Za-z0-9_]+
  TOK_NUMBER,  // -?digits(.digits)?([eE][+-]?digits)? or -?inf
  TOK_STRING,  // "..." with \" \\ \xx escapes
  TOK_LPAREN,
  TOK_RPAREN,
  TOK_LBRACKET,
  TOK_RBRACKET,
  TOK_LBRACE,
  TOK_RBRACE,
  TOK_COMMA,
  TOK_COLON,
  TOK_EQUAL,
  TOK_STAR,
  TOK_PLUS,
} tok_kind_t;

typedef struct token_t {
  tok_kind_t kind;
  size_t start, length;  // sigils included
  uint32_t line, col;
  bool is_int;  // TOK_NUMBER without '.', exponent or inf
} token_t;

// Where the lexer is; saved and restored to read constant data twice.
typedef struct lex_state_t {
  size_t pos, line_start;
  uint32_t line;
  token_t tok;
} lex_state_t;

typedef struct name_entry_t {
  const char* name;  // points into the text; NULL = empty slot
  uint32_t length;
  uint32_t node;
} name_entry_t;

typedef struct parser_t {
  const char* text;
  size_t length;
  const char* filename;
  tj_context_t* context;
  tj_allocator_t allocator;
  lex_state_t lex;
  tj_graph_t* graph;
  tj_status_t error;
  // %name -> node index (open addressing, power-of-two capacity).
  name_entry_t* names;
  uint32_t num_names, names_capacity;
  // Operands of the node being parsed (concat has any number).
  uint32_t* operands;
  uint32_t operands_capacity;
  // NUL-terminated copies of names for the C API.
  char* scratch;
  size_t scratch_capacity;
} parser_t;

#define TOK (p->lex.tok)

//===--- errors ---===//

static bool fail_atv(parser_t* p, uint32_t line, uint32_t col,
                     const char* format, va_list args) {
  if (p->error) return false;
  char message[512];
  vsnprintf(message, sizeof(message), format, args);
  p->error = tj_invalid("%s:%u:%u: %s", p->filename, line, col, message);
  return false;
}

static bool fail_at(parser_t* p, uint32_t line, uint32_t col,
                    const char* format, ...) TJ_PRINTF_LIKE(4, 5);
static bool fail_at(parser_t* p, uint32_t line, uint32_t col,
                    const char* format, ...) {
  va_list args;
  va_start(args, format);
  fail_atv(p, line, col, format, args);
  va_end(args);
  return false;
}

// An error at the current token.
static bool fail(parser_t* p, const char* format, ...) TJ_PRINTF_LIKE(2, 3);
static bool fail(parser_t* p, const char* format, ...) {
  va_list args;
  va_start(args, format);
  fail_atv(p, TOK.line, TOK.col, format, args);
  va_end(args);
  return false;
}

// Takes a status from the library and prefixes it with a location.
static bool fail_status(parser_t* p, uint32_t line, uint32_t col,
                        tj_status_t status) {
  if (p->error || tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
    if (!p->error) {
      p->error = status;
    } else {
      tj_status_free(status);
    }
    return false;
  }
  p->error = tj_status_make(tj_status_code(status), "%s:%u:%u: %s", p->filename,
                            line, col, tj_status_message(status));
  tj_status_free(status);
  return false;
}

static bool fail_oom(parser_t* p) {
  if (!p->error) p->error = tj_status_oom();
  return false;
}

// Writes a printable rendering of |n| bytes at |s| (quoted, escaped,
// shortened) for messages.
static void quote_bytes(const char* s, size_t n, char* buf, size_t size) {
  size_t out = 0;
  const size_t limit = 40;
  if (size < 8) {
    if (size) buf[0] = '\0';
    return;
  }
  buf[out++] = '\'';
  for (size_t i = 0; i < n && out + 8 < size; ++i) {
    if (i == limit) {
      memcpy(buf + out, "...", 3);
      out += 3;
      break;
    }
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7f) {
      buf[out++] = (char)c;
    } else {
      out += (size_t)snprintf(buf + out, size - out, "\\x%02x", c);
    }
  }
  buf[out++] = '\'';
  buf[out] = '\0';
}

// "end of input", "end of line" or the token's text, quoted.
static const char* describe(parser_t* p, char* buf, size_t size) {
  if (TOK.kind == TOK_EOF) return "end of input";
  if (TOK.kind == TOK_NEWLINE) return "end of line";
  quote_bytes(p->text + TOK.start, TOK.length, buf, size);
  return buf;
}

static bool fail_expected(parser_t* p, const char* what) {
  char buf[64];
  return fail(p, "expected %s, found %s", what, describe(p, buf, sizeof(buf)));
}

//===--- the lexer ---===//

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static uint32_t col_of(const parser_t* p, size_t pos) {
  size_t col = pos - p->lex.line_start + 1;
  return col > UINT32_MAX ? UINT32_MAX : (uint32_t)col;
}

static bool lex_error_at(parser_t* p, size_t pos, const char* message) {
  return fail_at(p, p->lex.line, col_of(p, pos), "%s", message);
}

static bool bad_char(parser_t* p, size_t pos) {
  unsigned char c = (unsigned char)p->text[pos];
  if (c == 0) return lex_error_at(p, pos, "unexpected NUL byte");
  char buf[16];
  quote_bytes(p->text + pos, 1, buf, sizeof(buf));
  return fail_at(p, p->lex.line, col_of(p, pos), "unexpected character %s",
                 buf);
}

static bool word_at(const parser_t* p, size_t pos, const char* word) {
  size_t n = strlen(word);
  return p->length - pos >= n && memcmp(p->text + pos, word, n) == 0 &&
         (p->length - pos == n || !is_ident_char(p->text[pos + n]));
}

static bool lex_number(parser_t* p, size_t* pos) {
  const char* s = p->text;
  size_t n = p->length, i = *pos, start = *pos;
  bool is_int = true;
  if (s[i] == '-') ++i;
  if (word_at(p, i, "inf")) {
    i += 3;
    is_int = false;
  } else {
    if (i >= n || !is_digit(s[i]))
      return lex_error_at(p, start, "expected a digit after '-'");
    while (i < n && is_digit(s[i])) ++i;
    if (i < n && s[i] == '.') {
      is_int = false;
      ++i;
      if (i >= n || !is_digit(s[i]))
        return lex_error_at(p, start,
                            "malformed number: expected a digit "
                            "after '.'");
      while (i < n && is_digit(s[i])) ++i;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
      is_int = false;
      ++i;
      if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= n || !is_digit(s[i]))
        return lex_error_at(p, start,
                            "malformed number: expected a digit in "
                            "the exponent");
      while (i < n && is_digit(s[i])) ++i;
    }
    if (i < n && (is_ident_char(s[i]) || s[i] == '.'))
      return lex_error_at(p, start, "malformed number");
  }
  if (i - start > MAX_NUMBER_CHARS)
    return lex_error_at(p, start, "number too long");
  TOK.is_int = is_int;
  *pos = i;
  return true;
}

// Scans a string starting at the '"' at |*pos|, checking its escapes.
static bool lex_string(parser_t* p, size_t* pos) {
  const char* s = p->text;
  size_t n = p->length, start = *pos, i = *pos + 1;
  for (;;) {
    if (i >= n || s[i] == '\n')
      return lex_error_at(p, start, "unterminated string");
    unsigned char c = (unsigned char)s[i];
    if (c == '"') break;
    if (c == '\\') {
      if (i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\')) {
        i += 2;
        continue;
      }
      int value = 0;
      for (int k = 1; k <= 2; ++k) {
        char h = i + (size_t)k < n ? s[i + (size_t)k] : '\0';
        int digit = is_digit(h)              ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
        if (digit < 0)
          return lex_error_at(p, i,
                              "bad escape in string: expected \\\", "
                              "\\\\ or two hex digits");
        value = value * 16 + digit;
      }
      if (value == 0) return lex_error_at(p, i, "NUL (\\00) in string");
      i += 3;
      continue;
    }
    if (c < 0x20 || c == 0x7f) return bad_char(p, i);
    ++i;
  }
  *pos = i + 1;
  return true;
}

// Reads the next token into TOK.
static bool lex(parser_t* p) {
  const char* s = p->text;
  size_t n = p->length;
  size_t i = p->lex.pos;
  for (;;) {
    if (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) {
      ++i;
    } else if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') {
        if (s[i] == '\0') return bad_char(p, i);
        ++i;
      }
    } else {
      break;
    }
  }
  TOK.start = i;
  TOK.line = p->lex.line;
  TOK.col = col_of(p, i);
  TOK.is_int = false;
  if (i >= n) {
    TOK.kind = TOK_EOF;
    TOK.length = 0;
    p->lex.pos = i;
    return true;
  }
  char c = s[i];
  switch (c) {
    case '\n':
      TOK.kind = TOK_NEWLINE;
      ++i;
      ++p->lex.line;
      p->lex.line_start = i;
      break;
    case '(':
      TOK.kind = TOK_LPAREN;
      ++i;
      break;
    case ')':
      TOK.kind = TOK_RPAREN;
      ++i;
      break;
    case '[':
      TOK.kind = TOK_LBRACKET;
      ++i;
      break;
    case ']':
      TOK.kind = TOK_RBRACKET;
      ++i;
      break;
    case '{':
      TOK.kind = TOK_LBRACE;
      ++i;
      break;
    case '}':
      TOK.kind = TOK_RBRACE;
      ++i;
      break;
    case ',':
      TOK.kind = TOK_COMMA;
      ++i;
      break;
    case ':':
      TOK.kind = TOK_COLON;
      ++i;
      break;
    case '=':
      TOK.kind = TOK_EQUAL;
      ++i;
      break;
    case '*':
      TOK.kind = TOK_STAR;
      ++i;
      break;
    case '+':
      TOK.kind = TOK_PLUS;
      ++i;
      break;
    case '"':
      TOK.kind = TOK_STRING;
      if (!lex_string(p, &i)) return false;
      break;
    case '@':
      TOK.kind = TOK_GLOBAL;
      ++i;
      if (i >= n || !is_ident_start(s[i]))
        return lex_error_at(p, TOK.start, "expected a name after '@'");
      while (i < n && is_ident_char(s[i])) ++i;
      break;
    case '%':
      TOK.kind = TOK_LOCAL;
      ++i;
      if (i >= n || !is_ident_char(s[i]))
        return lex_error_at(p, TOK.start, "expected a name after '%'");
      while (i < n && is_ident_char(s[i])) ++i;
      break;
    default:
      if (is_digit(c) || c == '-') {
        TOK.kind = TOK_NUMBER;
        if (!lex_number(p, &i)) return false;
      } else if (is_ident_start(c)) {
        TOK.kind = TOK_IDENT;
        while (i < n && is_ident_char(s[i])) ++i;
      } else {
        return bad_char(p, i);
      }
      break;
  }
  TOK.length = i - TOK.start;
  p->lex.pos = i;
  return true;
}

static bool tok_is_word(const parser_t* p, const char* word) {
  return TOK.kind == TOK_IDENT && TOK.length == strlen(word) &&
         memcmp(p->text + TOK.start, word, TOK.length) == 0;
}

// Consumes a token of |kind| or fails with "expected |what|".
static bool expect(parser_t* p, tok_kind_t kind, const char* what) {
  if (TOK.kind != kind) return fail_expected(p, what);
  return lex(p);
}

static bool skip_newlines(parser_t* p) {
  while (TOK.kind == TOK_NEWLINE) {
    if (!lex(p)) return false;
  }
  return true;
}

// The end of a statement: a newline, or the end of the input (then the
// caller reports what is missing).
static bool expect_end_of_line(parser_t* p) {
  if (TOK.kind == TOK_EOF) return true;
  if (TOK.kind != TOK_NEWLINE) return fail_expected(p, "end of line");
  return lex(p);
}

//===--- scratch strings ---===//

static char* scratch_reserve(parser_t* p, size_t size) {
  if (size <= p->scratch_capacity) return p->scratch;
  size_t capacity = p->scratch_capacity ? p->scratch_capacity : 64;
  while (capacity < size) capacity *= 2;
  char* grown =
      tj_realloc(p->allocator, p->scratch, p->scratch_capacity, capacity);
  if (!grown) {
    fail_oom(p);
    return NULL;
  }
  p->scratch = grown;
  p->scratch_capacity = capacity;
  return grown;
}

// A NUL-terminated copy of |n| bytes at |s| in the scratch buffer.
static const char* scratch_copy(parser_t* p, const char* s, size_t n) {
  char* buf = scratch_reserve(p, n + 1);
  if (!buf) return NULL;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return buf;
}

static int hex_value(char h) {
  return is_digit(h)              ? h - '0'
         : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                  : h - 'A' + 10;
}

// The decoded contents of a string token (the lexer checked its escapes)
// starting at byte |start| (the opening quote), NUL-terminated in scratch.
static const char* decode_string(parser_t* p, size_t start, size_t end) {
  const char* s = p->text;
  char* buf = scratch_reserve(p, end - start);
  if (!buf) return NULL;
  size_t out = 0;
  for (size_t i = start + 1; i + 1 < end;) {
    if (s[i] == '\\') {
      if (s[i + 1] == '"' || s[i + 1] == '\\') {
        buf[out++] = s[i + 1];
        i += 2;
      } else {
        buf[out++] = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
        i += 3;
      }
    } else {
      buf[out++] = s[i++];
    }
  }
  buf[out] = '\0';
  return buf;
}

//===--- the %name table ---===//

static uint32_t hash_name(const char* s, uint32_t n) {
  uint32_t h = 2166136261u;
  for (uint32_t i = 0; i < n; ++i) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static name_entry_t* find_slot(name_entry_t* table, uint32_t capacity,
                               const char* s, uint32_t n) {
  uint32_t mask = capacity - 1;
  for (uint32_t i = hash_name(s, n) & mask;; i = (i + 1) & mask) {
    name_entry_t* e = &table[i];
    if (!e->name || (e->length == n && memcmp(e->name, s, n) == 0)) return e;
  }
}

// The node called %|s| (without the sigil), or false.
static bool lookup_name(const parser_t* p, const char* s, uint32_t n,
                        uint32_t* out_node) {
  if (!p->names) return false;
  name_entry_t* e = find_slot(p->names, p->names_capacity, s, n);
  if (!e->name) return false;
  *out_node = e->node;
  return true;
}

static bool insert_name(parser_t* p, const char* s, uint32_t n, uint32_t node) {
  if ((p->num_names + 1) * 2 > p->names_capacity) {
    uint32_t capacity = p->names_capacity ? p->names_capacity * 2 : 64;
    if (capacity < p->names_capacity) return fail_oom(p);
    name_entry_t* table = tj_calloc(p->allocator, capacity, sizeof(*table));
    if (!table) return fail_oom(p);
    for (uint32_t i = 0; i < p->names_capacity; ++i) {
      name_entry_t* e = &p->names[i];
      if (e->name) *find_slot(table, capacity, e->name, e->length) = *e;
    }
    tj_free(p->allocator, p->names, p->names_capacity * sizeof(*p->names));
    p->names = table;
    p->names_capacity = capacity;
  }
  name_entry_t* e = find_slot(p->names, p->names_capacity, s, n);
  e->name = s;
  e->length = n;
  e->node = node;
  ++p->num_names;
  return true;
}

//===--- numbers ---===//

static bool parse_i64_token(parser_t* p, int64_t* out) {
  if (TOK.kind != TOK_NUMBER || !TOK.is_int)
    return fail_expected(p, "an integer");
  const char* s = p->text + TOK.start;
  size_t n = TOK.length, i = 0;
  bool negative = s[0] == '-';
  if (negative) ++i;
  // Accumulate negatively so that INT64_MIN is reachable.
  int64_t value = 0;
  for (; i < n; ++i) {
    if (tj_mul_overflow_i64(value, 10, &value) ||
        __builtin_sub_overflow(value, (int64_t)(s[i] - '0'), &value)) {
      return fail(p, "integer out of range");
    }
  }
  if (!negative) {
    if (value == INT64_MIN) return fail(p, "integer out of range");
    value = -value;
  }
  *out = value;
  return true;
}

// A u64 constant: 0 to 2^64 - 1, as its bits.
static bool parse_u64_token(parser_t* p, int64_t* out) {
  if (TOK.kind != TOK_NUMBER || !TOK.is_int)
    return fail_expected(p, "an integer");
  const char* s = p->text + TOK.start;
  if (s[0] == '-') {
    return fail(p, "value %.*s out of range for u64", (int)TOK.length, s);
  }
  uint64_t value = 0;
  for (size_t i = 0; i < TOK.length; ++i) {
    if (__builtin_mul_overflow(value, 10u, &value) ||
        __builtin_add_overflow(value, (uint64_t)(s[i] - '0'), &value)) {
      return fail(p, "integer out of range");
    }
  }
  *out = (int64_t)value;
  return true;
}

// A number, nan, inf or -inf as a double (TOK_NUMBER or the words).
static bool parse_f64_token(parser_t* p, double* out) {
  if (tok_is_word(p, "nan")) {
    *out = NAN;
    return true;
  }
  if (tok_is_word(p, "inf")) {
    *out = INFINITY;
    return true;
  }
  if (TOK.kind != TOK_NUMBER) return fail_expected(p, "a number");
  const char* s = p->text + TOK.start;
  if (TOK.length == 4 && memcmp(s, "-inf", 4) == 0) {
    *out = -INFINITY;
    return true;
  }
  char buf[MAX_NUMBER_CHARS + 1];
  memcpy(buf, s, TOK.length);
  buf[TOK.length] = '\0';
  char point = tj_ir_text_decimal_point();
  if (point != '.') {
    char* dot = strchr(buf, '.');
    if (dot) *dot = point;
  }
  errno = 0;
  char* end = NULL;
  double value = strtod(buf, &end);
  if (end != buf + TOK.length) return fail(p, "malformed number");
  // Underflow to a subnormal or zero is fine (and is what the printer
  // writes for subnormals); overflow is not.
  if (errno == ERANGE && isinf(value)) return fail(p, "number out of range");
  *out = value;
  return true;
}

//===--- types ---===//

typedef struct parsed_type_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  uint32_t line, col;
} parsed_type_t;

static bool lookup_symbol_dim(parser_t* p, int64_t* out) {
  const char* name = scratch_copy(p, p->text + TOK.start, TOK.length);
  if (!name) return false;
  uint32_t id;
  if (!tj_dim_find_symbol(&p->graph->dims, name, &id)) {
    char buf[64];
    return fail(p,
                "unknown symbol %s (declare it in [...] after the function "
                "name)",
                describe(p, buf, sizeof(buf)));
  }
  tj_status_t status = tj_dim_symbol(&p->graph->dims, name, out);
  if (status) return fail_status(p, TOK.line, TOK.col, status);
  return true;
}

// dim := term ('+' term)* ; term := factor ('*' factor)* ;
// factor := INT | symbol
static bool parse_dim(parser_t* p, int64_t* out) {
  uint32_t line = TOK.line, col = TOK.col;
  tj_dimtab_t* tab = &p->graph->dims;
  int64_t sum = 0;
  for (bool first_term = true;; first_term = false) {
    int64_t product = 1;
    for (bool first_factor = true;; first_factor = false) {
      int64_t factor;
      if (TOK.kind == TOK_NUMBER && TOK.is_int) {
        if (!parse_i64_token(p, &factor)) return false;
        if (factor < 0) return fail(p, "dims must be non-negative");
      } else if (TOK.kind == TOK_IDENT) {
        if (!lookup_symbol_dim(p, &factor)) return false;
      } else {
        return fail_expected(p, "a dim (an integer or a symbol)");
      }
      if (first_factor) {
        product = factor;
      } else {
        tj_status_t status = tj_dim_mul(tab, product, factor, &product);
        if (status) return fail_status(p, line, col, status);
      }
      if (!lex(p)) return false;
      if (TOK.kind != TOK_STAR) break;
      if (!lex(p)) return false;
    }
    if (first_term) {
      sum = product;
    } else {
      tj_status_t status = tj_dim_add(tab, sum, product, &sum);
      if (status) return fail_status(p, line, col, status);
    }
    // TODO(dims): the dim API has no subtraction, so terms with a negative
    // coefficient (which tj_dim_div_exact can produce) cannot be rebuilt.
    if (TOK.kind == TOK_NUMBER && p->text[TOK.start] == '-')
      return fail(p, "dims with negative terms are not supported");
    if (TOK.kind != TOK_PLUS) break;
    if (!lex(p)) return false;
  }
  *out = sum;
  return true;
}

static bool dtype_from_token(parser_t* p, tj_dtype_t* out) {
  for (int d = 0; d < TJ_DTYPE_COUNT_; ++d) {
    const char* name = tj_dtype_name((tj_dtype_t)d);
    if (TOK.kind == TOK_IDENT && strlen(name) == TOK.length &&
        memcmp(name, p->text + TOK.start, TOK.length) == 0) {
      *out = (tj_dtype_t)d;
      return true;
    }
  }
  if (TOK.kind != TOK_IDENT) return fail_expected(p, "a type such as f32[4]");
  char buf[64];
  return fail(p,
              "unknown dtype %s (expected f32, f16, bf16, f64, i8, i32, "
              "i64, bool, u8, f8e4m3, f8e5m2, i16, u16, u32, u64, "
              "f8e4m3fnuz, f8e5m2fnuz, f4e2m1, f8e8m0, i4, u4, i2 or u2)",
              describe(p, buf, sizeof(buf)));
}

// type := dtype '[' (dim (',' dim)*)? ']'
static bool parse_type(parser_t* p, parsed_type_t* t) {
  t->line = TOK.line;
  t->col = TOK.col;
  t->rank = 0;
  if (!dtype_from_token(p, &t->dtype) || !lex(p)) return false;
  if (!expect(p, TOK_LBRACKET, "'[' after the dtype")) return false;
  if (TOK.kind == TOK_RBRACKET) return lex(p);
  for (;;) {
    if (t->rank == TJ_MAX_RANK)
      return fail(p, "more than %d dims", TJ_MAX_RANK);
    if (!parse_dim(p, &t->dims[t->rank])) return false;
    ++t->rank;
    if (TOK.kind == TOK_RBRACKET) return lex(p);
    if (!expect(p, TOK_COMMA, "',' or ']' in the shape")) return false;
  }
}

// Formats a type for messages (truncated if long).
static void format_type(const tj_graph_t* g, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, char* buf, size_t size) {
  int n = snprintf(buf, size, "%s", tj_dtype_name(dtype));
  if (n < 0 || (size_t)n >= size) return;
  tj_shape_format(&g->dims, rank, dims, buf + n, size - (size_t)n);
}

//===--- attributes ---===//

typedef enum attr_key_e {
  KEY_AXES,
  KEY_PERM,
  KEY_STARTS,
  KEY_STOPS,
  KEY_STEPS,
  KEY_LOW,
  KEY_HIGH,
  KEY_INTS,  // custom
  KEY_KERNEL,
  KEY_STRIDES,
  KEY_DILATIONS,
  KEY_OUTPUT_PADDING,
  KEY_KEEPDIMS,
  KEY_APPROXIMATE,
  KEY_AXIS,
  KEY_VALUE,
  KEY_EPS,
  KEY_OP,       // custom
  KEY_VERSION,  // custom
  KEY_FLOATS,   // custom
  KEY_GROUPS,
  KEY_CEIL_MODE,
  KEY_COUNT_INCLUDE_PAD,
  KEY_P,
  KEY_SCALE,   // attention
  KEY_CAUSAL,  // attention
  // quantize, dequantize (issue 17)
  KEY_BLOCK,
  KEY_INT4,
  KEY_SATURATE,
  KEY_ODD,
  // cumsum, cumprod (ops3)
  KEY_EXCLUSIVE,
  KEY_REVERSE,
  // scatter_elements, scatter_nd (issue 15)
  KEY_REDUCTION,
  // argtopk (topk)
  KEY_K,
  KEY_LARGEST,
  KEY_COUNT_,
} attr_key_t;

// The integer-list keys come first: they index attr_values_t.lists.
#define NUM_LIST_KEYS (KEY_OUTPUT_PADDING + 1)

typedef enum attr_type_e {
  ATTR_LIST,
  ATTR_FLAG,
  ATTR_INT,
  ATTR_FLOAT,
  ATTR_STRING,
  ATTR_FLOAT_LIST,
} attr_type_t;

static const struct {
  const char* name;
  attr_type_t type;
} kAttrKeys[KEY_COUNT_] = {
    [KEY_AXES] = {"axes", ATTR_LIST},
    [KEY_PERM] = {"perm", ATTR_LIST},
    [KEY_STARTS] = {"starts", ATTR_LIST},
    [KEY_STOPS] = {"stops", ATTR_LIST},
    [KEY_STEPS] = {"steps", ATTR_LIST},
    [KEY_LOW] = {"low", ATTR_LIST},
    [KEY_HIGH] = {"high", ATTR_LIST},
    [KEY_INTS] = {"ints", ATTR_LIST},
    [KEY_KERNEL] = {"kernel", ATTR_LIST},
    [KEY_STRIDES] = {"strides", ATTR_LIST},
    [KEY_DILATIONS] = {"dilations", ATTR_LIST},
    [KEY_OUTPUT_PADDING] = {"output_padding", ATTR_LIST},
    [KEY_KEEPDIMS] = {"keepdims", ATTR_FLAG},
    [KEY_APPROXIMATE] = {"approximate", ATTR_FLAG},
    [KEY_AXIS] = {"axis", ATTR_INT},
    [KEY_VALUE] = {"value", ATTR_FLOAT},
    [KEY_EPS] = {"eps", ATTR_FLOAT},
    [KEY_OP] = {"op", ATTR_STRING},
    [KEY_VERSION] = {"version", ATTR_INT},
    [KEY_FLOATS] = {"floats", ATTR_FLOAT_LIST},
    [KEY_GROUPS] = {"groups", ATTR_INT},
    [KEY_CEIL_MODE] = {"ceil_mode", ATTR_FLAG},
    [KEY_COUNT_INCLUDE_PAD] = {"count_include_pad", ATTR_FLAG},
    [KEY_P] = {"p", ATTR_FLOAT},
    [KEY_SCALE] = {"scale", ATTR_FLOAT},
    [KEY_CAUSAL] = {"causal", ATTR_FLAG},
    [KEY_BLOCK] = {"block", ATTR_INT},
    [KEY_INT4] = {"int4", ATTR_INT},
    [KEY_SATURATE] = {"saturate", ATTR_FLAG},
    [KEY_ODD] = {"odd", ATTR_FLAG},
    [KEY_EXCLUSIVE] = {"exclusive", ATTR_FLAG},
    [KEY_REVERSE] = {"reverse", ATTR_FLAG},
    [KEY_REDUCTION] = {"reduction", ATTR_STRING},
    [KEY_K] = {"k", ATTR_INT},
    [KEY_LARGEST] = {"largest", ATTR_FLAG},
};

// 64 bits: the keys outgrew 32 (scatter's reduction, argtopk's k, largest).
#define BIT(k) (UINT64_C(1) << (k))

// Allowed and required keys per attribute kind, in printing order.
static void attr_keys_of(tj_attr_kind_t kind, uint64_t* allowed,
                         uint64_t* required) {
  *allowed = *required = 0;
  switch (kind) {
    case TJ_ATTR_KIND_NONE:
    case TJ_ATTR_KIND_NAME:
    case TJ_ATTR_KIND_DATA:
      break;
    case TJ_ATTR_KIND_VALUE:
      *allowed = *required = BIT(KEY_VALUE);
      break;
    case TJ_ATTR_KIND_AXIS:
      *allowed = *required = BIT(KEY_AXIS);
      break;
    case TJ_ATTR_KIND_AXES:
      *required = BIT(KEY_AXES);
      *allowed = *required | BIT(KEY_KEEPDIMS);
      break;
    case TJ_ATTR_KIND_PERM:
      *allowed = *required = BIT(KEY_PERM);
      break;
    case TJ_ATTR_KIND_SLICE:
      *required = BIT(KEY_STARTS) | BIT(KEY_STOPS);
      *allowed = *required | BIT(KEY_STEPS);
      break;
    case TJ_ATTR_KIND_PAD:
      *allowed = *required = BIT(KEY_LOW) | BIT(KEY_HIGH) | BIT(KEY_VALUE);
      break;
    case TJ_ATTR_KIND_APPROX:
      *allowed = BIT(KEY_APPROXIMATE);
      break;
    case TJ_ATTR_KIND_EPS:
      *allowed = *required = BIT(KEY_EPS);
      break;
    case TJ_ATTR_KIND_CUSTOM:
      *required = BIT(KEY_OP);
      *allowed = *required | BIT(KEY_VERSION) | BIT(KEY_INTS) | BIT(KEY_FLOATS);
      break;
    case TJ_ATTR_KIND_WINDOW:
      *allowed = BIT(KEY_KERNEL) | BIT(KEY_STRIDES) | BIT(KEY_DILATIONS) |
                 BIT(KEY_LOW) | BIT(KEY_HIGH) | BIT(KEY_OUTPUT_PADDING) |
                 BIT(KEY_GROUPS) | BIT(KEY_CEIL_MODE) |
                 BIT(KEY_COUNT_INCLUDE_PAD) | BIT(KEY_P);
      break;
    case TJ_ATTR_KIND_ATTENTION:
      *required = BIT(KEY_SCALE);
      *allowed = *required | BIT(KEY_CAUSAL);
      break;
    case TJ_ATTR_KIND_QUANT:
      *required = BIT(KEY_AXIS);
      *allowed = *required | BIT(KEY_BLOCK) | BIT(KEY_SATURATE) |
                 BIT(KEY_INT4) | BIT(KEY_ODD);
      break;
    case TJ_ATTR_KIND_SCAN:
      *required = BIT(KEY_AXIS);
      *allowed = *required | BIT(KEY_EXCLUSIVE) | BIT(KEY_REVERSE);
      break;
    case TJ_ATTR_KIND_SCATTER:
      *allowed = BIT(KEY_AXIS) | BIT(KEY_REDUCTION);
      break;
    case TJ_ATTR_KIND_TOPK:
      *required = BIT(KEY_AXIS);
      *allowed = *required | BIT(KEY_K) | BIT(KEY_LARGEST);
      break;
  }
}

typedef struct attr_values_t {
  uint64_t present;  // BIT(key) for each key given
  int64_t lists[NUM_LIST_KEYS][TJ_MAX_RANK];
  uint32_t list_lengths[NUM_LIST_KEYS];
  uint32_t list_line[NUM_LIST_KEYS], list_col[NUM_LIST_KEYS];
  int64_t axis, groups;
  int64_t block, int4;  // quantize, dequantize
  int64_t k;            // argtopk
  double value, eps;
  int64_t version;                     // custom
  char op[128];                        // custom: the op's name
  double floats[TJ_CUSTOM_MAX_ATTRS];  // custom
  uint32_t num_floats;
} attr_values_t;

// '[' (INT (',' INT)*)? ']'; `end` is INT64_MAX where |allow_end|.
static bool parse_int_list(parser_t* p, int64_t* values, uint32_t* out_count,
                           bool allow_end) {
  if (!expect(p, TOK_LBRACKET, "'['")) return false;
  uint32_t count = 0;
  if (TOK.kind != TOK_RBRACKET) {
    for (;;) {
      if (count == TJ_MAX_RANK)
        return fail(p, "more than %d entries in a list", TJ_MAX_RANK);
      if (allow_end && tok_is_word(p, "end")) {
        values[count] = INT64_MAX;
      } else if (!parse_i64_token(p, &values[count])) {
        return false;
      }
      ++count;
      if (!lex(p)) return false;
      if (TOK.kind == TOK_RBRACKET) break;
      if (!expect(p, TOK_COMMA, "',' or ']'")) return false;
    }
  }
  *out_count = count;
  return lex(p);
}

// '[' (FLOAT (',' FLOAT)*)? ']', at most TJ_CUSTOM_MAX_ATTRS entries.
static bool parse_float_list(parser_t* p, double* values, uint32_t* out_count) {
  if (!expect(p, TOK_LBRACKET, "'['")) return false;
  uint32_t count = 0;
  if (TOK.kind != TOK_RBRACKET) {
    for (;;) {
      if (count == TJ_CUSTOM_MAX_ATTRS)
        return fail(p, "more than %d entries in a list", TJ_CUSTOM_MAX_ATTRS);
      if (!parse_f64_token(p, &values[count])) return false;
      ++count;
      if (!lex(p)) return false;
      if (TOK.kind == TOK_RBRACKET) break;
      if (!expect(p, TOK_COMMA, "',' or ']'")) return false;
    }
  }
  *out_count = count;
  return lex(p);
}

// '{' (key ('=' value)?)* '}' for an op of |op_name| with |kind|.
static bool parse_attrs(parser_t* p, const char* op_name, tj_attr_kind_t kind,
                        attr_values_t* v) {
  uint64_t allowed, required;
  attr_keys_of(kind, &allowed, &required);
  uint32_t brace_line = TOK.line, brace_col = TOK.col;
  if (TOK.kind == TOK_LBRACE) {
    if (!lex(p)) return false;
    while (TOK.kind != TOK_RBRACE) {
      if (TOK.kind != TOK_IDENT) return fail_expected(p, "an attribute or '}'");
      int key = -1;
      for (int k = 0; k < KEY_COUNT_; ++k) {
        if (tok_is_word(p, kAttrKeys[k].name)) key = k;
      }
      char buf[64];
      if (key < 0 || !(allowed & BIT(key))) {
        return fail(p, "unknown attribute %s for '%s'",
                    describe(p, buf, sizeof(buf)), op_name);
      }
      if (v->present & BIT(key)) {
        return fail(p, "duplicate attribute %s", describe(p, buf, sizeof(buf)));
      }
      v->present |= BIT(key);
      uint32_t line = TOK.line, col = TOK.col;
      if (!lex(p)) return false;
      if (kAttrKeys[key].type == ATTR_FLAG) {
        if (TOK.kind == TOK_EQUAL)
          return fail_at(p, line, col,
                         "attribute '%s' is a flag and takes no value",
                         kAttrKeys[key].name);
        continue;
      }
      if (!expect(p, TOK_EQUAL, "'=' after the attribute name")) return false;
      switch (kAttrKeys[key].type) {
        case ATTR_LIST:
          v->list_line[key] = line;
          v->list_col[key] = col;
          if (!parse_int_list(p, v->lists[key], &v->list_lengths[key],
                              key == KEY_STOPS))
            return false;
          break;
        case ATTR_INT:
          if (!parse_i64_token(p, key == KEY_VERSION  ? &v->version
                                  : key == KEY_GROUPS ? &v->groups
                                  : key == KEY_BLOCK  ? &v->block
                                  : key == KEY_INT4   ? &v->int4
                                  : key == KEY_K      ? &v->k
                                                      : &v->axis) ||
              !lex(p))
            return false;
          break;
        case ATTR_STRING: {
          if (TOK.kind != TOK_STRING)
            return fail_expected(p, "a quoted string");
          const char* text =
              decode_string(p, TOK.start, TOK.start + TOK.length);
          if (!text) return false;
          if (strlen(text) >= sizeof(v->op))
            return fail(p, "attribute '%s' is longer than %zu bytes",
                        kAttrKeys[key].name, sizeof(v->op) - 1);
          strcpy(v->op, text);
          if (!lex(p)) return false;
          break;
        }
        case ATTR_FLOAT_LIST:
          if (!parse_float_list(p, v->floats, &v->num_floats)) return false;
          break;
        case ATTR_FLOAT:
          if (!parse_f64_token(p, key == KEY_EPS ? &v->eps : &v->value) ||
              !lex(p))
            return false;
          break;
        case ATTR_FLAG:
          break;
      }
    }
    if (!lex(p)) return false;
  }
  uint64_t missing = required & ~v->present;
  for (int k = 0; k < KEY_COUNT_; ++k) {
    if (missing & BIT(k)) {
      return fail_at(p, brace_line, brace_col, "'%s' requires attribute '%s'",
                     op_name, kAttrKeys[k].name);
    }
  }
  return true;
}

// Lays the parsed attributes out as tj_attrs_t expects them (raw, to be
// normalized by inference). |ints| has room for 3 * TJ_MAX_RANK entries.
static bool build_attrs(parser_t* p, tj_attr_kind_t kind,
                        const attr_values_t* v, int64_t* ints,
                        tj_attrs_t* out) {
  memset(out, 0, sizeof(*out));
  out->ints = ints;
  switch (kind) {
    case TJ_ATTR_KIND_NONE:
    case TJ_ATTR_KIND_NAME:
    case TJ_ATTR_KIND_DATA:
      break;
    case TJ_ATTR_KIND_VALUE:
      out->value = v->value;
      break;
    case TJ_ATTR_KIND_AXIS:
      out->axis = v->axis;
      break;
    case TJ_ATTR_KIND_AXES:
    case TJ_ATTR_KIND_PERM: {
      attr_key_t key = kind == TJ_ATTR_KIND_AXES ? KEY_AXES : KEY_PERM;
      out->num_ints = v->list_lengths[key];
      memcpy(ints, v->lists[key], out->num_ints * sizeof(int64_t));
      out->keepdims = (v->present & BIT(KEY_KEEPDIMS)) != 0;
      break;
    }
    case TJ_ATTR_KIND_SLICE: {
      uint32_t n = v->list_lengths[KEY_STARTS];
      bool has_steps = (v->present & BIT(KEY_STEPS)) != 0;
      if (v->list_lengths[KEY_STOPS] != n ||
          (has_steps && v->list_lengths[KEY_STEPS] != n)) {
        return fail_at(p, v->list_line[KEY_STOPS], v->list_col[KEY_STOPS],
                       "starts, stops and steps must have the same length "
                       "(%u, %u, %u)",
                       n, v->list_lengths[KEY_STOPS],
                       has_steps ? v->list_lengths[KEY_STEPS] : n);
      }
      for (uint32_t i = 0; i < n; ++i) {
        ints[i] = v->lists[KEY_STARTS][i];
        ints[n + i] = v->lists[KEY_STOPS][i];
        ints[2 * n + i] = has_steps ? v->lists[KEY_STEPS][i] : 1;
      }
      out->num_ints = 3 * n;
      break;
    }
    case TJ_ATTR_KIND_PAD: {
      uint32_t n = v->list_lengths[KEY_LOW];
      if (v->list_lengths[KEY_HIGH] != n) {
        return fail_at(p, v->list_line[KEY_HIGH], v->list_col[KEY_HIGH],
                       "low and high must have the same length (%u, %u)", n,
                       v->list_lengths[KEY_HIGH]);
      }
      memcpy(ints, v->lists[KEY_LOW], n * sizeof(int64_t));
      memcpy(ints + n, v->lists[KEY_HIGH], n * sizeof(int64_t));
      out->num_ints = 2 * n;
      out->value = v->value;
      break;
    }
    case TJ_ATTR_KIND_APPROX:
      out->approximate = (v->present & BIT(KEY_APPROXIMATE)) != 0;
      break;
    case TJ_ATTR_KIND_EPS:
      out->value = v->eps;
      break;
    case TJ_ATTR_KIND_CUSTOM: {
      // lib/custom_op.h's layout: [n, n ints, the floats' bit patterns].
      uint32_t n = v->list_lengths[KEY_INTS];
      ints[0] = n;
      memcpy(ints + 1, v->lists[KEY_INTS], n * sizeof(int64_t));
      for (uint32_t i = 0; i < v->num_floats; ++i) {
        memcpy(&ints[1 + n + i], &v->floats[i], sizeof(double));
      }
      out->num_ints = 1 + n + v->num_floats;
      out->name = v->op;
      out->axis = v->version;
      break;
    }
    case TJ_ATTR_KIND_WINDOW: {
      // lib/window.h: groups, flags, then six lists of n (absent: zeros,
      // the defaults; none at all: [groups, flags] only).
      static const attr_key_t kLists[6] = {KEY_KERNEL,    KEY_STRIDES,
                                           KEY_DILATIONS, KEY_LOW,
                                           KEY_HIGH,      KEY_OUTPUT_PADDING};
      uint32_t n = 0;
      for (int l = 0; l < 6; ++l) {
        attr_key_t key = kLists[l];
        if (!(v->present & BIT(key))) continue;
        if (n && v->list_lengths[key] != n)
          return fail_at(p, v->list_line[key], v->list_col[key],
                         "window lists must have one length (%u, %u)", n,
                         v->list_lengths[key]);
        n = v->list_lengths[key];
        if (n > 3)
          return fail_at(p, v->list_line[key], v->list_col[key],
                         "at most 3 spatial axes, got %u", n);
      }
      ints[0] = v->groups;
      ints[1] = ((v->present & BIT(KEY_CEIL_MODE)) ? 1 : 0) |
                ((v->present & BIT(KEY_COUNT_INCLUDE_PAD)) ? 2 : 0);
      for (int l = 0; l < 6; ++l) {
        attr_key_t key = kLists[l];
        for (uint32_t i = 0; i < n; ++i)
          ints[2 + l * n + i] = (v->present & BIT(key)) ? v->lists[key][i] : 0;
      }
      out->num_ints = 2 + 6 * n;
      out->value = v->value;
      break;
    }
    case TJ_ATTR_KIND_ATTENTION:
      ints[0] = (v->present & BIT(KEY_CAUSAL)) ? 1 : 0;
      out->num_ints = 1;
      out->value = v->value;
      break;
    case TJ_ATTR_KIND_QUANT:  // lib/quant.h's TJ_QUANT_* order
      out->axis = v->axis;
      ints[0] = v->block;
      ints[1] = (v->present & BIT(KEY_SATURATE)) ? 1 : 0;
      ints[2] = v->int4;
      ints[3] = (v->present & BIT(KEY_ODD)) ? 1 : 0;
      out->num_ints = 4;
      break;
    case TJ_ATTR_KIND_SCAN:
      out->axis = v->axis;
      ints[0] = (v->present & BIT(KEY_EXCLUSIVE)) ? 1 : 0;
      ints[1] = (v->present & BIT(KEY_REVERSE)) ? 1 : 0;
      out->num_ints = 2;
      break;
    case TJ_ATTR_KIND_SCATTER:  // the reduction's name is in v->op
      out->axis = v->axis;
      ints[0] = TJ_SCATTER_REDUCTION_NONE;
      if (v->present & BIT(KEY_REDUCTION)) {
        int32_t r = tj_scatter_reduction_of(v->op);
        if (r < 0) {
          return fail(p,
                      "unknown reduction \"%s\" (expected none, add, mul, "
                      "max or min)",
                      v->op);
        }
        ints[0] = r;
      }
      out->num_ints = 1;
      break;
    case TJ_ATTR_KIND_TOPK:
      out->axis = v->axis;
      ints[0] = (v->present & BIT(KEY_K)) ? v->k : -1;
      ints[1] = (v->present & BIT(KEY_LARGEST)) ? 1 : 0;
      out->num_ints = 2;
      break;
  }
  return true;
}

//===--- constant data ---===//

static bool is_value_token(const parser_t* p) {
  return TOK.kind == TOK_NUMBER || tok_is_word(p, "nan") ||
         tok_is_word(p, "inf") || tok_is_word(p, "true") ||
         tok_is_word(p, "false");
}

// First reading of '[' values ']': checks the syntax and counts. Newlines
// may break a long list.
static bool scan_constant_values(parser_t* p, int64_t* out_count) {
  if (!expect(p, TOK_LBRACKET, "'[' and the constant's values")) return false;
  int64_t count = 0;
  if (!skip_newlines(p)) return false;
  if (TOK.kind != TOK_RBRACKET) {
    for (;;) {
      if (!is_value_token(p))
        return fail_expected(p,
                             "a constant value (number, nan, inf, true or "
                             "false)");
      ++count;
      if (!lex(p) || !skip_newlines(p)) return false;
      if (TOK.kind == TOK_RBRACKET) break;
      if (!expect(p, TOK_COMMA, "',' or ']'") || !skip_newlines(p))
        return false;
    }
  }
  *out_count = count;
  return lex(p);
}

static bool convert_value(parser_t* p, tj_dtype_t dtype, void* data,
                          int64_t index) {
  const char* name = tj_dtype_name(dtype);
  if (dtype == TJ_DTYPE_BOOL) {
    bool is_true = tok_is_word(p, "true");
    if (!is_true && !tok_is_word(p, "false"))
      return fail_expected(p, "true or false for a bool constant");
    tj_store_i64(dtype, data, index, is_true ? 1 : 0);
    return true;
  }
  if (tj_dtype_is_int(dtype)) {
    if (TOK.kind != TOK_NUMBER || !TOK.is_int) {
      char buf[32];
      snprintf(buf, sizeof(buf), "an integer for %s", name);
      return fail_expected(p, buf);
    }
    int64_t value;
    if (dtype == TJ_DTYPE_U64) {
      if (!parse_u64_token(p, &value)) return false;
      tj_store_i64(dtype, data, index, value);
      return true;
    }
    if (!parse_i64_token(p, &value)) return false;
    int64_t lo = tj_dtype_int_lowest(dtype);
    int64_t hi = tj_dtype_int_highest(dtype);
    if (value < lo || value > hi)
      return fail(p, "value %lld out of range for %s", (long long)value, name);
    tj_store_i64(dtype, data, index, value);
    return true;
  }
  if (TOK.kind == TOK_IDENT && !tok_is_word(p, "nan") &&
      !tok_is_word(p, "inf")) {
    char buf[32];
    snprintf(buf, sizeof(buf), "a number for %s", name);
    return fail_expected(p, buf);
  }
  double value;
  if (!parse_f64_token(p, &value)) return false;
  tj_store_f64(dtype, data, index, value);
  // A narrow float's largest finite (casts saturate; a constant must fit).
  tj_minifloat_t mf;
  const double f8_max = dtype == TJ_DTYPE_F8E8M0 ? 0x1p127
                        : tj_minifloat_format(dtype, &mf)
                            ? tj_narrow_to_f64(dtype, (uint8_t)mf.max_mag)
                            : INFINITY;
  if ((!isinf(value) && isinf(tj_load_f64(dtype, data, index))) ||
      (!isinf(value) && fabs(value) > f8_max)) {
    char buf[64];
    return fail(p, "value %s out of range for %s",
                describe(p, buf, sizeof(buf)), name);
  }
  return true;
}

// Second reading, from |start| (the '['), once the dtype is known.
static bool convert_constant_values(parser_t* p, const lex_state_t* start,
                                    tj_dtype_t dtype, void* data) {
  lex_state_t resume = p->lex;
  p->lex = *start;
  bool ok = lex(p) && skip_newlines(p);  // past '['
  for (int64_t i = 0; ok && TOK.kind != TOK_RBRACKET; ++i) {
    ok = convert_value(p, dtype, data, i) && lex(p) && skip_newlines(p);
    if (ok && TOK.kind == TOK_COMMA) ok = lex(p) && skip_newlines(p);
  }
  if (ok) p->lex = resume;
  return ok;
}

//===--- statements ---===//

static bool push_operand(parser_t* p, uint32_t count, uint32_t node) {
  tj_status_t status =
      tj_array_reserve(p->allocator, (void**)&p->operands,
                       &p->operands_capacity, count + 1, sizeof(uint32_t));
  if (status) return fail_status(p, 0, 0, status);
  p->operands[count] = node;
  return true;
}

static bool check_type(parser_t* p, uint32_t index, const char* local,
                       size_t local_length, const parsed_type_t* t) {
  const tj_node_t* node = &p->graph->nodes[index];
  bool same = node->dtype == t->dtype && node->rank == t->rank;
  for (int32_t i = 0; same && i < t->rank; ++i)
    same = node->dims[i] == t->dims[i];
  if (same) return true;
  char written[160], inferred[160], name[64];
  format_type(p->graph, t->dtype, t->rank, t->dims, written, sizeof(written));
  format_type(p->graph, node->dtype, node->rank, node->dims, inferred,
              sizeof(inferred));
  quote_bytes(local, local_length, name, sizeof(name));
  return fail_at(p, t->line, t->col,
                 "type mismatch for %s: written %s, but '%s' infers %s", name,
                 written, tj_op_info(node->op)->name, inferred);
}

// LOCAL '=' op operands? attrs? ':' type
static bool parse_node(parser_t* p) {
  token_t def = TOK;
  const char* def_name = p->text + def.start + 1;
  uint32_t def_length = (uint32_t)(def.length - 1);
  uint32_t existing;
  char buf[64];
  if (lookup_name(p, def_name, def_length, &existing))
    return fail(p, "redefinition of %s", describe(p, buf, sizeof(buf)));
  if (!lex(p) || !expect(p, TOK_EQUAL, "'=' after the value name"))
    return false;
  if (TOK.kind != TOK_IDENT) return fail_expected(p, "an op name");
  tj_op_t op;
  if (!tj_op_from_name(p->text + TOK.start, TOK.length, &op))
    return fail(p, "unknown op %s", describe(p, buf, sizeof(buf)));
  const tj_op_info_t* info = tj_op_info(op);
  if (op == TJ_OP_INPUT) {
    return fail(p,
                "'input' cannot appear in the body: inputs are declared "
                "in the function signature");
  }
  uint32_t op_line = TOK.line, op_col = TOK.col;
  if (!lex(p)) return false;

  // Operands, or the constant's values.
  uint32_t num_operands = 0;
  lex_state_t data_start;
  int64_t num_values = 0;
  uint32_t data_line = 0, data_col = 0;
  if (op == TJ_OP_CONSTANT) {
    data_start = p->lex;
    data_line = TOK.line;
    data_col = TOK.col;
    if (!scan_constant_values(p, &num_values)) return false;
  } else if (TOK.kind == TOK_LOCAL || tok_is_word(p, "none")) {
    for (;;) {
      uint32_t node = TJ_NODE_NONE;
      if (TOK.kind == TOK_LOCAL) {
        if (!lookup_name(p, p->text + TOK.start + 1, (uint32_t)(TOK.length - 1),
                         &node)) {
          return fail(p, "use of undefined value %s",
                      describe(p, buf, sizeof(buf)));
        }
      } else if (!tok_is_word(p, "none")) {
        return fail_expected(p, "an operand (%name or none)");
      }
      if (!push_operand(p, num_operands, node)) return false;
      ++num_operands;
      if (!lex(p)) return false;
      if (TOK.kind != TOK_COMMA) break;
      if (!lex(p)) return false;
    }
  }
  if (info->arity >= 0 && num_operands != (uint32_t)info->arity) {
    return fail_at(p, op_line, op_col, "'%s' takes %d operand%s, got %u",
                   info->name, info->arity, info->arity == 1 ? "" : "s",
                   num_operands);
  }
  if (info->arity < 0 && num_operands == 0 && op != TJ_OP_CUSTOM)
    return fail_at(p, op_line, op_col, "'%s' takes at least one operand",
                   info->name);

  attr_values_t values;
  memset(&values, 0, sizeof(values));
  if (!parse_attrs(p, info->name, info->attr_kind, &values)) return false;
  if (!expect(p, TOK_COLON, "':' and the result type")) return false;
  parsed_type_t type;
  if (!parse_type(p, &type) || !expect_end_of_line(p)) return false;

  int64_t ints[3 * TJ_MAX_RANK];
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = num_operands;
  desc.operands = p->operands;
  if (!build_attrs(p, info->attr_kind, &values, ints, &desc.attrs))
    return false;
  if (tj_op_has(op, TJ_OPF_TYPED)) {
    desc.dtype = type.dtype;
    desc.rank = type.rank;
    desc.dims = type.dims;
  }

  void* data = NULL;
  size_t data_bytes = 0;
  static const uint64_t kEmpty = 0;
  if (op == TJ_OP_CONSTANT) {
    int64_t numel = 1;
    for (int32_t i = 0; i < type.rank; ++i) {
      if (!tj_dim_is_const(type.dims[i]))
        return fail_at(p, type.line, type.col,
                       "a constant must have a static shape");
      if (tj_mul_overflow_i64(numel, type.dims[i], &numel))
        return fail_at(p, type.line, type.col, "constant shape too large");
    }
    if (numel != num_values) {
      return fail_at(p, data_line, data_col,
                     "constant has %lld value%s but its type has %lld "
                     "element%s",
                     (long long)num_values, num_values == 1 ? "" : "s",
                     (long long)numel, numel == 1 ? "" : "s");
    }
    // numel is bounded by the text length here, so this cannot overflow.
    data_bytes = (size_t)numel * tj_dtype_size(type.dtype);
    if (data_bytes) {
      data = tj_alloc(p->allocator, data_bytes);
      if (!data) return fail_oom(p);
      if (!convert_constant_values(p, &data_start, type.dtype, data)) {
        tj_free(p->allocator, data, data_bytes);
        return false;
      }
    }
    desc.attrs.data = data ? data : (const void*)&kEmpty;
  }

  uint32_t index;
  tj_status_t status = tj_graph_append(p->graph, &desc, &index);
  tj_free(p->allocator, data, data_bytes);
  if (status) return fail_status(p, def.line, def.col, status);
  if (!check_type(p, index, p->text + def.start, def.length, &type))
    return false;
  return insert_name(p, def_name, def_length, index);
}

// 'return' (LOCAL 'as' STRING (',' ...)*)?
static bool parse_return(parser_t* p) {
  if (!lex(p)) return false;
  if (TOK.kind == TOK_NEWLINE || TOK.kind == TOK_EOF)
    return expect_end_of_line(p);
  char buf[64];
  for (;;) {
    if (TOK.kind != TOK_LOCAL) return fail_expected(p, "an output value");
    uint32_t node;
    if (!lookup_name(p, p->text + TOK.start + 1, (uint32_t)(TOK.length - 1),
                     &node)) {
      return fail(p, "use of undefined value %s",
                  describe(p, buf, sizeof(buf)));
    }
    uint32_t line = TOK.line, col = TOK.col;
    if (!lex(p)) return false;
    if (!tok_is_word(p, "as")) return fail_expected(p, "'as' and a name");
    if (!lex(p)) return false;
    if (TOK.kind != TOK_STRING)
      return fail_expected(p, "the output name as a quoted string");
    const char* name = decode_string(p, TOK.start, TOK.start + TOK.length);
    if (!name) return false;
    tj_status_t status = tj_graph_append_output(p->graph, node, name);
    if (status) return fail_status(p, line, col, status);
    if (!lex(p)) return false;
    if (TOK.kind != TOK_COMMA) break;
    if (!lex(p)) return false;
  }
  return expect_end_of_line(p);
}

// '(' (LOCAL ':' type (',' LOCAL ':' type)*)? ')'
static bool parse_signature(parser_t* p) {
  if (!expect(p, TOK_LPAREN, "'(' and the inputs") || !skip_newlines(p))
    return false;
  if (TOK.kind == TOK_RPAREN) return lex(p);
  char buf[64];
  for (;;) {
    if (TOK.kind != TOK_LOCAL)
      return fail_expected(p, "an input (%name: type)");
    token_t def = TOK;
    const char* name = p->text + def.start + 1;
    uint32_t length = (uint32_t)(def.length - 1);
    if (!is_ident_start(name[0])) {
      return fail(p, "input names must be identifiers, not %s",
                  describe(p, buf, sizeof(buf)));
    }
    uint32_t existing;
    if (lookup_name(p, name, length, &existing))
      return fail(p, "duplicate input %s", describe(p, buf, sizeof(buf)));
    if (!lex(p) || !expect(p, TOK_COLON, "':' and the input's type"))
      return false;
    parsed_type_t type;
    if (!parse_type(p, &type)) return false;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_INPUT;
    desc.dtype = type.dtype;
    desc.rank = type.rank;
    desc.dims = type.dims;
    desc.attrs.name = scratch_copy(p, name, length);
    if (!desc.attrs.name) return false;
    uint32_t index;
    tj_status_t status = tj_graph_append(p->graph, &desc, &index);
    if (status) return fail_status(p, def.line, def.col, status);
    if (!insert_name(p, name, length, index) || !skip_newlines(p)) return false;
    if (TOK.kind == TOK_RPAREN) return lex(p);
    if (!expect(p, TOK_COMMA, "',' or ')'") || !skip_newlines(p)) return false;
  }
}

// '[' (IDENT (',' IDENT)*)? ']'
static bool parse_symbols(parser_t* p) {
  if (!lex(p)) return false;
  if (TOK.kind == TOK_RBRACKET) return lex(p);
  char buf[64];
  for (;;) {
    if (TOK.kind != TOK_IDENT) return fail_expected(p, "a symbol name");
    const char* name = scratch_copy(p, p->text + TOK.start, TOK.length);
    if (!name) return false;
    uint32_t id;
    if (tj_dim_find_symbol(&p->graph->dims, name, &id))
      return fail(p, "duplicate symbol %s", describe(p, buf, sizeof(buf)));
    int64_t dim;
    tj_status_t status = tj_dim_symbol(&p->graph->dims, name, &dim);
    if (status) return fail_status(p, TOK.line, TOK.col, status);
    if (!lex(p)) return false;
    if (TOK.kind == TOK_RBRACKET) return lex(p);
    if (!expect(p, TOK_COMMA, "',' or ']'")) return false;
  }
}

// func := 'func' GLOBAL symbols? signature '{' NL stmt* 'return' ... NL '}'
static bool parse_function(parser_t* p) {
  if (!lex(p) || !skip_newlines(p)) return false;
  if (!tok_is_word(p, "func")) return fail_expected(p, "'func'");
  if (!lex(p)) return false;
  if (TOK.kind != TOK_GLOBAL)
    return fail_expected(p, "the function name (@name)");
  const char* name = scratch_copy(p, p->text + TOK.start + 1, TOK.length - 1);
  if (!name) return false;
  tj_status_t status = tj_graph_create(p->context, name, &p->graph);
  if (status) return fail_status(p, TOK.line, TOK.col, status);
  if (!lex(p)) return false;
  if (TOK.kind == TOK_LBRACKET && !parse_symbols(p)) return false;
  if (!parse_signature(p)) return false;
  if (!expect(p, TOK_LBRACE, "'{'") ||
      !expect(p, TOK_NEWLINE, "end of line after '{'"))
    return false;
  uint32_t return_line = 0, return_col = 0;
  for (;;) {
    if (!skip_newlines(p)) return false;
    if (TOK.kind == TOK_LOCAL) {
      if (!parse_node(p)) return false;
    } else if (tok_is_word(p, "return")) {
      return_line = TOK.line;
      return_col = TOK.col;
      if (!parse_return(p) || !skip_newlines(p)) return false;
      if (TOK.kind != TOK_RBRACE) return fail_expected(p, "'}' after return");
      break;
    } else if (TOK.kind == TOK_RBRACE) {
      return fail(p, "missing 'return' before '}'");
    } else {
      return fail_expected(p, "'%name = op ...', 'return' or '}'");
    }
  }
  if (!lex(p) || !skip_newlines(p)) return false;
  if (TOK.kind != TOK_EOF) {
    char buf[64];
    return fail(p, "unexpected %s after the end of the function",
                describe(p, buf, sizeof(buf)));
  }
  status = tj_graph_finalize(p->graph);
  if (status) return fail_status(p, return_line, return_col, status);
  return true;
}

tj_status_t tj_graph_parse(tj_context_t* context, const char* text,
                           size_t length, const char* filename,
                           tj_graph_t** out_graph) {
  if (!out_graph) return tj_invalid("tj_graph_parse: out_graph is NULL");
  *out_graph = NULL;
  if (!context) return tj_invalid("tj_graph_parse: context is NULL");
  if (!text && length) return tj_invalid("tj_graph_parse: text is NULL");
  parser_t p;
  memset(&p, 0, sizeof(p));
  p.text = text ? text : "";
  p.length = length;
  p.filename = filename ? filename : "<input>";
  p.context = context;
  p.allocator = tj_context_allocator(context);
  p.lex.line = 1;
  bool ok = parse_function(&p);
  tj_free(p.allocator, p.names, p.names_capacity * sizeof(*p.names));
  tj_free(p.allocator, p.operands, p.operands_capacity * sizeof(uint32_t));
  tj_free(p.allocator, p.scratch, p.scratch_capacity);
  if (!ok) {
    tj_graph_destroy(p.graph);
    return p.error ? p.error : tj_internal("tj_graph_parse failed silently");
  }
  *out_graph = p.graph;
  return NULL;
}
