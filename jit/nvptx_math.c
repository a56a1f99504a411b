// Fast f32 transcendentals for NVPTX kernels. See nvptx_math.h.

#include "jit/nvptx_math.h"

#include <string.h>

// log2(e) as float plus the rest, and ln(2).
#define kLog2eHi 1.44269502162933349609375
#define kLog2eLo 1.925963033500011079e-08
#define kLog2e 1.4426950408889634074
#define kLn2 0.693147180559945309

static LLVMValueRef fc(LLVMValueRef like, double v) {
  return tj_emit_fconst(LLVMTypeOf(like), v);
}

static LLVMValueRef fma3(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b,
                         LLVMValueRef c) {
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef args[3] = {a, b, c};
  return tj_emit_intrinsic(em, "llvm.fma", &t, 1, args, 3);
}

static LLVMValueRef fabs1(tj_emit_t* em, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return tj_emit_intrinsic(em, "llvm.fabs", &t, 1, &x, 1);
}

// copysign(mag, sign) for a |mag| known to be >= 0 (or NaN): one OR of the
// sign bit. LLVM 19's NVPTX back end expands llvm.copysign into six
// instructions (abs, neg, shift, and, compare, select).
static LLVMValueRef with_sign_of(tj_emit_t* em, LLVMValueRef mag,
                                 LLVMValueRef sign) {
  LLVMTypeRef t = LLVMTypeOf(mag);
  LLVMTypeRef it = tj_emit_int_like(em, t);
  LLVMValueRef bits = LLVMBuildAnd(em->b, LLVMBuildBitCast(em->b, sign, it, ""),
                                   tj_emit_iconst(it, INT32_MIN), "");
  return LLVMBuildBitCast(
      em->b, LLVMBuildOr(em->b, LLVMBuildBitCast(em->b, mag, it, ""), bits, ""),
      t, "");
}

static LLVMValueRef mul(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(em->b, a, b, "");
}

static LLVMValueRef lt(tj_emit_t* em, LLVMValueRef a, double v) {
  return LLVMBuildFCmp(em->b, LLVMRealOLT, a, fc(a, v), "");
}

// A non-overloaded f32 -> f32 NVVM intrinsic applied to every lane.
static LLVMValueRef per_lane(tj_emit_t* em, const char* name, LLVMValueRef x) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(em->mod, id, NULL, 0);
  LLVMTypeRef type = LLVMIntrinsicGetType(em->ctx, id, NULL, 0);
  if (LLVMGetTypeKind(LLVMTypeOf(x)) != LLVMVectorTypeKind)
    return LLVMBuildCall2(em->b, type, fn, &x, 1, "");
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  LLVMValueRef out = LLVMGetUndef(LLVMTypeOf(x));
  for (int32_t i = 0; i < lanes; ++i) {
    LLVMValueRef idx = LLVMConstInt(em->t_i32, (unsigned long long)i, 0);
    LLVMValueRef lane = LLVMBuildExtractElement(em->b, x, idx, "");
    LLVMValueRef r = LLVMBuildCall2(em->b, type, fn, &lane, 1, "");
    out = LLVMBuildInsertElement(em->b, out, r, idx, "");
  }
  return out;
}

static LLVMValueRef rcp(tj_emit_t* em, LLVMValueRef x) {
  return per_lane(em, "llvm.nvvm.rcp.approx.ftz.f", x);
}

// exp(x) = 2^t, t = x*log2(e) = hi + lo exactly enough: hi is the rounded
// product, lo its rounding error (fma) plus x times log2(e)'s tail. The
// SFU computes 2^hi (its fraction is exact, so the error does not grow
// with |x| as __expf's does); 2^lo ~ 1 + lo*ln2 since |lo| < 2^-22.
// From |hi| >= 128 on the result is 0 or inf and lo may be NaN (x = inf):
// 2^hi alone then. Results below 2^-126 flush to 0 (ftz).
static LLVMValueRef fast_exp(tj_emit_t* em, LLVMValueRef x) {
  LLVMValueRef hi = mul(em, x, fc(x, kLog2eHi));
  LLVMValueRef lo = fma3(em, x, fc(x, kLog2eHi), LLVMBuildFNeg(em->b, hi, ""));
  lo = fma3(em, x, fc(x, kLog2eLo), lo);
  LLVMValueRef e = per_lane(em, "llvm.nvvm.ex2.approx.ftz.f", hi);
  LLVMValueRef corrected = fma3(em, e, mul(em, lo, fc(x, kLn2)), e);
  return tj_emit_select(em, lt(em, fabs1(em, hi), 128.0), corrected, e);
}

static LLVMValueRef fast_tanh(tj_emit_t* em, LLVMValueRef x) {
  LLVMValueRef a = fabs1(em, x);
  // |x| < 0.625: x + x^3 P(x^2) (Cephes tanhf).
  static const double p[] = {-5.70498872745E-3, 2.06390887954E-2,
                             -5.37397155531E-2, 1.33314422036E-1,
                             -3.33332819422E-1};
  // Both branches give |tanh x| (>= 0: +0 at x = +-0) and the sign of x is
  // ORed in once, so tanh(-0) = -0 (C99), as x + x^3 P would not give.
  LLVMValueRef z = mul(em, x, x);
  LLVMValueRef q = fc(x, p[0]);
  for (size_t i = 1; i < TJ_ARRAY_SIZE(p); ++i) q = fma3(em, q, z, fc(x, p[i]));
  LLVMValueRef small = fma3(em, mul(em, a, z), q, a);
  // Else 1 - 2 / (e^(2|x|) + 1); e = inf gives 1, NaN stays NaN.
  LLVMValueRef e = fast_exp(em, LLVMBuildFAdd(em->b, a, a, ""));
  LLVMValueRef r = rcp(em, LLVMBuildFAdd(em->b, e, fc(x, 1.0), ""));
  LLVMValueRef large = fma3(em, r, fc(x, -2.0), fc(x, 1.0));
  return with_sign_of(em, tj_emit_select(em, lt(em, a, 0.625), small, large),
                      x);
}

static LLVMValueRef fast_sigmoid(tj_emit_t* em, LLVMValueRef x) {
  LLVMValueRef e = fast_exp(em, LLVMBuildFNeg(em->b, fabs1(em, x), ""));
  LLVMValueRef r = rcp(em, LLVMBuildFAdd(em->b, e, fc(x, 1.0), ""));
  return tj_emit_select(em, lt(em, x, 0.0), mul(em, e, r), r);
}

// N. Juffa's erff (0.96 ulp with a correctly rounded exp); both branches
// are computed and one selected, so a warp does not diverge.
static LLVMValueRef fast_erf(tj_emit_t* em, LLVMValueRef x) {
  LLVMValueRef t = fabs1(em, x);
  LLVMValueRef s = mul(em, x, x);
  // |x| > 0.927734375: 1 - exp(Q(|x|)) = 1 - 2^(log2(e) Q(|x|)), the
  // polynomial's coefficients scaled by log2(e) (and its last step,
  // t (P(t) - 1), folded into one constant) so that it yields the
  // exponent of 2 directly: no range reduction before ex2 (the f32
  // rounding of the scaled polynomial costs < 0.1 ulp of erf over
  // [0.93, 5]). |x| is clamped to 5, where erf is 1 in f32 and the
  // exponent ~ -39: always in range (a NaN x takes the other branch).
  static const double q[] = {
      -1.72853470e-5, 3.83197126e-4,  -3.88396438e-3,      2.42546219e-2,
      -1.06777877e-1, -6.34846687e-1, -1.28717512e-1 - 1.0};
  double c[TJ_ARRAY_SIZE(q)];
  for (size_t i = 0; i < TJ_ARRAY_SIZE(q); ++i) c[i] = q[i] * kLog2e;
  LLVMTypeRef type = LLVMTypeOf(t);
  LLVMValueRef min_args[2] = {t, fc(x, 5.0)};
  LLVMValueRef tc = tj_emit_intrinsic(em, "llvm.minnum", &type, 1, min_args, 2);
  LLVMValueRef r = fma3(em, fc(x, c[0]), tc, fc(x, c[1]));
  LLVMValueRef u = fma3(em, fc(x, c[2]), tc, fc(x, c[3]));
  r = fma3(em, r, mul(em, tc, tc), u);
  r = fma3(em, r, tc, fc(x, c[4]));
  r = fma3(em, r, tc, fc(x, c[5]));
  r = fma3(em, r, tc, fc(x, c[6]));
  r = mul(em, r, tc);
  LLVMValueRef e = per_lane(em, "llvm.nvvm.ex2.approx.ftz.f", r);
  LLVMValueRef large =
      with_sign_of(em, LLVMBuildFSub(em->b, fc(x, 1.0), e, ""), x);
  // Else x + x * P(x^2).
  static const double p[] = {-5.96761703e-4, 4.99119423e-3,  -2.67681349e-2,
                             1.12819925e-1,  -3.76125336e-1, 1.28379166e-1};
  LLVMValueRef qs = fc(x, p[0]);
  for (size_t i = 1; i < TJ_ARRAY_SIZE(p); ++i)
    qs = fma3(em, qs, s, fc(x, p[i]));
  LLVMValueRef small = fma3(em, qs, x, x);
  LLVMValueRef big =
      LLVMBuildFCmp(em->b, LLVMRealOGT, t, fc(x, 0.927734375), "");
  return tj_emit_select(em, big, large, small);
}

// erfc(x) = 1 - erf(x), relative error a few ulp where it is tiny (gelu's
// negative tail, 0.5 x erfc(-x / sqrt 2), rests on it). For a = |x|
// (clamped to 9.4, past which erfc is below 2^-126 and flushes):
//   erfc(a) = exp(-a^2) (1 + P(q)) / (1 + 2a),  q = (a - 2) / (a + 2),
// where P, of degree 9, is a minimax fit (relative, 1e-8 in double, 3e-8
// with f32 coefficients) of (1 + 2a) exp(a^2) erfc(a) - 1 over q in
// [-1, 0.649]: the form of N. Juffa's erfcf, one branch for every a, so
// no select between two polynomials. The division by 1 + 2a is rcp.approx
// plus one fma-exact residual step (its error would otherwise add a
// whole ulp). exp(-a^2) is 2^hi e^lo with a^2 = s + t split exactly by
// fma and -s log2(e) = hi + its rounding error, both small parts (t and
// that error) summed in lo, |lo| < 1e-5, so e^lo = 1 + lo. erfc(-a) =
// 2 - erfc(a). NaN stays NaN (the clamp keeps it), +-inf give 0 and 2.
// 38 PTX instructions: no division, no branch, two rcp and one ex2.
static LLVMValueRef fast_erfc(tj_emit_t* em, LLVMValueRef x) {
  static const double p[] = {
      -4.087407724e-04, -1.244046609e-03, 1.314590918e-03, 8.642866276e-03,
      -8.057760075e-03, -5.420712382e-02, 1.640547663e-01, -1.660311818e-01,
      -9.276395291e-02, 2.769784033e-01};
  LLVMValueRef a = fabs1(em, x);
  a = tj_emit_select(em, LLVMBuildFCmp(em->b, LLVMRealOGT, a, fc(x, 9.4), ""),
                     fc(x, 9.4), a);
  LLVMValueRef q = mul(em, LLVMBuildFSub(em->b, a, fc(x, 2.0), ""),
                       rcp(em, LLVMBuildFAdd(em->b, a, fc(x, 2.0), "")));
  LLVMValueRef pq = fc(x, p[0]);
  for (size_t i = 1; i < TJ_ARRAY_SIZE(p); ++i)
    pq = fma3(em, pq, q, fc(x, p[i]));
  // erfcx(a) = (1 + P) / d: r (1 + P), then + r (1 + P - d e).
  LLVMValueRef d = fma3(em, a, fc(x, 2.0), fc(x, 1.0));
  LLVMValueRef r = rcp(em, d);
  LLVMValueRef e = fma3(em, pq, r, r);
  LLVMValueRef res = LLVMBuildFAdd(
      em->b, fma3(em, LLVMBuildFNeg(em->b, e, ""), d, fc(x, 1.0)), pq, "");
  e = fma3(em, res, r, e);
  LLVMValueRef s = mul(em, a, a);
  LLVMValueRef t = fma3(em, a, a, LLVMBuildFNeg(em->b, s, ""));
  LLVMValueRef ns = LLVMBuildFNeg(em->b, s, "");
  LLVMValueRef hi = mul(em, ns, fc(x, kLog2eHi));
  LLVMValueRef hi_err =
      fma3(em, ns, fc(x, kLog2eHi), LLVMBuildFNeg(em->b, hi, ""));
  // lo = hi_err ln2 - s (log2(e) - kLog2eHi) ln2 - t, in nats.
  LLVMValueRef lo =
      fma3(em, hi_err, fc(x, kLn2),
           fma3(em, ns, fc(x, kLog2eLo * kLn2), LLVMBuildFNeg(em->b, t, "")));
  LLVMValueRef big = mul(em, per_lane(em, "llvm.nvvm.ex2.approx.ftz.f", hi), e);
  LLVMValueRef pos = fma3(em, big, lo, big);
  return tj_emit_select(em, lt(em, x, 0.0),
                        LLVMBuildFSub(em->b, fc(x, 2.0), pos, ""), pos);
}

// gelu (erf) of a value of a 16-bit float dtype (f16, bf16: the reference
// rounds it to 8 or 11 bits): x Phi(x), Phi(x) = h for x < 0, 1 - h else,
// h = Phi(-|x|) = erfc(|x| / sqrt 2) / 2 = exp(-x^2 / 2) t Q(t),
// t = 1 / (1 + p |x|), Q of degree 5: the form of Abramowitz and Stegun
// 7.1.26, but our own fit, minimax in h's relative error over t in
// [1 / (1 + 14 p), 1] (4.1e-6 in double), so the negative tail, where
// gelu is x h, stays relative too. exp is one ex2.approx of
// -x^2 log2(e) / 2 + 64 (one fma), Q's coefficients scaled by 2^-64, so
// that ex2's ftz does not flush h before f32 does (|x| 13.2-16.2). In f32,
// emulated against mpmath over [-13, 8]: 7.8e-6 relative, the bound
// claimed 1.5e-5 (2^-16), 8x below f16's half ulp (2^-12) and 64x below
// bf16's (2^-9). 16 PTX instructions, one rcp.approx and one ex2.approx,
// against erfc's 38 and three more around it. NaN gives NaN, +inf inf,
// -inf NaN (-inf * 0), as x * erfc(-x / sqrt 2) * 0.5 does.
static LLVMValueRef fast_gelu16(tj_emit_t* em, LLVMValueRef x) {
  static const double q[] = {6.6640820542183e-21,    6.4281566533656085e-21,
                             7.423250487402283e-21,  3.2021002626979284e-22,
                             1.0364154638221759e-20, -4.094826759885918e-21};
  LLVMValueRef u = fabs1(em, x);
  LLVMValueRef t = rcp(em, fma3(em, u, fc(x, 0.3075000047683716), fc(x, 1.0)));
  LLVMValueRef qt = fc(x, q[5]);
  for (size_t i = TJ_ARRAY_SIZE(q) - 1; i-- > 0;)
    qt = fma3(em, qt, t, fc(x, q[i]));
  LLVMValueRef y = fma3(em, mul(em, x, x), fc(x, -0.5 * kLog2e), fc(x, 64.0));
  LLVMValueRef e = per_lane(em, "llvm.nvvm.ex2.approx.ftz.f", y);
  LLVMValueRef h = mul(em, mul(em, e, t), qt);
  LLVMValueRef phi = tj_emit_select(em, lt(em, x, 0.0), h,
                                    LLVMBuildFSub(em->b, fc(x, 1.0), h, ""));
  return mul(em, x, phi);
}

LLVMValueRef tj_nvptx_gelu_erf(struct tj_emit_t* em, tj_dtype_t dtype,
                               LLVMValueRef x) {
  if (dtype != TJ_DTYPE_F16 && dtype != TJ_DTYPE_BF16) return NULL;
  return fast_gelu16(em, x);
}

LLVMValueRef tj_nvptx_approx_unary(struct tj_emit_t* em, tj_op_t op,
                                   LLVMValueRef x) {
  switch (op) {
    case TJ_OP_EXP:
      return fast_exp(em, x);
    case TJ_OP_TANH:
      return fast_tanh(em, x);
    case TJ_OP_SIGMOID:
      return fast_sigmoid(em, x);
    case TJ_OP_ERF:
      return fast_erf(em, x);
    case TJ_OP_ERFC:
      return fast_erfc(em, x);
    default:
      return NULL;
  }
}
