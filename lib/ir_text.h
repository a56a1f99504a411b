// Pieces of the .tj text form shared by the printer (lib/ir_print.c) and the
// parser (lib/ir_parse.c). Grammar: docs/tj-text-format.md.

#ifndef TJ_LIB_IR_TEXT_H_
#define TJ_LIB_IR_TEXT_H_

#include "lib/base.h"

// The decimal point snprintf/strtod use under the current C locale.
char tj_ir_text_decimal_point(void);

// Writes |value| with |digits| significant digits (%.*g, always with '.' as
// the decimal point) or as nan / inf / -inf; returns what snprintf returns.
// 17 digits round-trip any double, 9 any float.
int tj_ir_text_format_double(double value, int digits, char* buf, size_t size);

#endif  // TJ_LIB_IR_TEXT_H_
