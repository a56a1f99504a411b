// backends/runtime/custom_call.c: custom ops' registration and the libffi
// call of a signature op. The call interface (ffi_cif) is prepared once, at
// registration, and shared read-only by every later call on any thread
// (libffi allows concurrent ffi_call on a prepared cif). The registry and
// everything graph-side is lib/custom_op.c.
//
// ffi_call classifies every argument again on each call (libffi 3.4's
// ffi_call_int runs classify_argument/examine_argument per argument: about
// 700 instructions for 3 to 6 arguments, 250-650 ns measured here). So on
// x86-64 System V, where a signature's arguments all fit in registers (at
// most 6 integer-class: pointers and i64; at most 8 SSE-class: f32 and
// f64; the two classes fill their registers independently, in order), the
// call goes straight through one fixed function type that fills all 14
// argument registers: the register each argument lands in, and the slot
// of the fixed type that fills it, are computed here, once. An f32 goes in
// the low 32 bits of its XMM register, as the callee reads it. Longer
// signatures (stack arguments) and other ABIs keep ffi_call.

#include <ffi.h>
#include <string.h>

#include "lib/custom_op.h"

typedef struct ffi_state_t {
  ffi_cif cif;
  ffi_type* types[TJ_CUSTOM_MAX_ARGS];
  // The direct call: argument k goes to integer slot slot[k] (kinds
  // OUTPUT, INPUT, I64) or SSE slot slot[k] (F32, F64).
  uint8_t slot[TJ_CUSTOM_MAX_ARGS];
} ffi_state_t;

static void ffi_state_free(tj_allocator_t al, void* state) {
  tj_free(al, state, sizeof(ffi_state_t));
}

static void ffi_invoke(const tj_custom_op_t* op, void** values,
                       int64_t* result) {
  ffi_state_t* s = op->call_state;
  // Integral results narrower than a register come back widened to ffi_arg.
  ffi_arg r = 0;
  ffi_call(&s->cif, op->function, op->sig.returns_i32 ? &r : NULL, values);
  *result = (int64_t)(int32_t)r;
}

#if defined(__x86_64__) && !defined(_WIN32)
#define TJ_CUSTOM_DIRECT_CALL 1
enum { kIntRegs = 6, kSseRegs = 8 };

// The one function type of a direct call: rdi, rsi, rdx, rcx, r8, r9 and
// xmm0-7 (the result in eax, read only for an i32 signature).
typedef int32_t (*direct_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                             uint64_t, double, double, double, double, double,
                             double, double, double);

// The function is the user's, of another C type: the call through
// direct_fn is what the ABI makes of the signature, not a C-typed call.
#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
static void
direct_invoke(const tj_custom_op_t* op, void** values, int64_t* result) {
  const ffi_state_t* s = op->call_state;
  const tj_custom_sig_t* sig = &op->sig;
  uint64_t r[kIntRegs] = {0};
  double x[kSseRegs] = {0};
  for (int32_t k = 0; k < sig->num_args; ++k) {
    switch ((tj_custom_arg_kind_t)sig->kinds[k]) {
      case TJ_CUSTOM_ARG_OUTPUT:
      case TJ_CUSTOM_ARG_INPUT:
      case TJ_CUSTOM_ARG_I64:
        memcpy(&r[s->slot[k]], values[k], sizeof(uint64_t));
        break;
      case TJ_CUSTOM_ARG_F32: {
        uint64_t bits = 0;  // the float's bits, low in the register
        memcpy(&bits, values[k], sizeof(float));
        memcpy(&x[s->slot[k]], &bits, sizeof(double));
        break;
      }
      case TJ_CUSTOM_ARG_F64:
        memcpy(&x[s->slot[k]], values[k], sizeof(double));
        break;
    }
  }
  direct_fn fn;
  void (*f)(void) = op->function;
  memcpy(&fn, &f, sizeof(fn));
  int32_t r32 = fn(r[0], r[1], r[2], r[3], r[4], r[5], x[0], x[1], x[2], x[3],
                   x[4], x[5], x[6], x[7]);
  *result = sig->returns_i32 ? (int64_t)r32 : 0;
}

// Whether |sig| fits the registers; fills |s->slot|.
static bool direct_slots(const tj_custom_sig_t* sig, ffi_state_t* s) {
  int32_t ints = 0, sses = 0;
  for (int32_t k = 0; k < sig->num_args; ++k) {
    bool sse = sig->kinds[k] == TJ_CUSTOM_ARG_F32 ||
               sig->kinds[k] == TJ_CUSTOM_ARG_F64;
    int32_t* n = sse ? &sses : &ints;
    if (*n == (sse ? kSseRegs : kIntRegs)) return false;
    s->slot[k] = (uint8_t)(*n)++;
  }
  return true;
}
#endif

bool tj_custom_call_is_direct(const tj_custom_op_t* op) {
#if defined(TJ_CUSTOM_DIRECT_CALL)
  return op && op->call == direct_invoke;
#else
  (void)op;
  return false;
#endif
}

static ffi_type* arg_type(const tj_custom_sig_t* sig, int32_t k) {
  switch ((tj_custom_arg_kind_t)sig->kinds[k]) {
    case TJ_CUSTOM_ARG_OUTPUT:
    case TJ_CUSTOM_ARG_INPUT:
      return &ffi_type_pointer;
    case TJ_CUSTOM_ARG_I64:
      return &ffi_type_sint64;
    case TJ_CUSTOM_ARG_F32:
      return &ffi_type_float;
    case TJ_CUSTOM_ARG_F64:
      return &ffi_type_double;
  }
  return &ffi_type_void;
}

// tj_context_register_op (backends/target_entry.c) once a cuda_llvm_ir
// is PTX.
tj_status_t tj_custom_op_register(tj_context_t* context,
                                  const tj_custom_op_desc_t* desc) {
  if (desc->host)
    return tj_custom_op_add(context, desc, NULL, NULL, NULL, NULL);
  tj_custom_sig_t sig;
  tj_status_t status = tj_custom_sig_parse(desc->signature, &sig);
  if (status)
    return tj_status_annotate(status, "tj_context_register_op: op %s",
                              desc->name);
  if (sig.num_input_pointers != desc->num_inputs)
    return tj_invalid(
        "tj_context_register_op: op %s: signature \"%s\" has %d input "
        "pointers (const T*) for num_inputs %d",
        desc->name, desc->signature, (int)sig.num_input_pointers,
        (int)desc->num_inputs);
  tj_allocator_t al = tj_context_allocator(context);
  ffi_state_t* s = tj_calloc(al, 1, sizeof(*s));
  if (!s) return tj_status_oom();
  for (int32_t k = 0; k < sig.num_args; ++k) s->types[k] = arg_type(&sig, k);
  ffi_status fs = ffi_prep_cif(
      &s->cif, FFI_DEFAULT_ABI, (unsigned)sig.num_args,
      sig.returns_i32 ? &ffi_type_sint32 : &ffi_type_void, s->types);
  if (fs != FFI_OK) {
    ffi_state_free(al, s);
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "tj_context_register_op: op %s: libffi refused "
                          "signature \"%s\" (ffi_prep_cif status %d)",
                          desc->name, desc->signature, (int)fs);
  }
  tj_custom_call_fn call = ffi_invoke;
#if defined(TJ_CUSTOM_DIRECT_CALL)
  if (direct_slots(&sig, s)) call = direct_invoke;
#endif
  return tj_custom_op_add(context, desc, &sig, call, s, ffi_state_free);
}
