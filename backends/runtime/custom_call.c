// backends/runtime/custom_call.c: tj_context_register_op and the libffi
// call of a signature op. The call interface (ffi_cif) is prepared once, at
// registration, and shared read-only by every later call on any thread
// (libffi allows concurrent ffi_call on a prepared cif). The registry and
// everything graph-side is lib/custom_op.c.

#include <ffi.h>
#include <string.h>

#include "lib/custom_op.h"

typedef struct ffi_state_t {
  ffi_cif cif;
  ffi_type* types[TJ_CUSTOM_MAX_ARGS];
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

tj_status_t tj_context_register_op(tj_context_t* context,
                                   const tj_custom_op_desc_t* desc) {
  if (!context) return tj_invalid("tj_context_register_op: context is NULL");
  TJ_RETURN_IF_ERROR(tj_custom_op_check_desc(desc));
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
  return tj_custom_op_add(context, desc, &sig, ffi_invoke, s, ffi_state_free);
}
