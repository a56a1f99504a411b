// Vectorized transcendentals as LLVM IR. Accuracy and algorithms are stated
// in vecmath.h; comments here say why each step is written the way it is.
//
// Conventions: every function works on any lane count (a scalar is one
// lane). Inputs are first clamped into the range where the algorithm is
// valid with selects that also map NaN to an ordinary number, so no
// intermediate is ever poison (fptosi of NaN would be); the special values
// are patched in with selects at the end.

#include "jit/vecmath.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

//===--- helpers ---===//

static LLVMTypeRef elem(LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
}

static bool is_double(LLVMValueRef x) {
  return LLVMGetTypeKind(elem(x)) == LLVMDoubleTypeKind;
}

static LLVMValueRef fc(LLVMValueRef like, double v) {
  return tj_emit_fconst(LLVMTypeOf(like), v);
}

static LLVMValueRef vmul(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(em->b, a, b, "");
}
static LLVMValueRef vadd(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(em->b, a, b, "");
}
static LLVMValueRef vsub(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(em->b, a, b, "");
}
static LLVMValueRef vdiv(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFDiv(em->b, a, b, "");
}
static LLVMValueRef fcmp(tj_emit_t* em, LLVMRealPredicate p, LLVMValueRef a,
                         LLVMValueRef b) {
  return LLVMBuildFCmp(em->b, p, a, b, "");
}
static LLVMValueRef sel(tj_emit_t* em, LLVMValueRef c, LLVMValueRef a,
                        LLVMValueRef b) {
  return LLVMBuildSelect(em->b, c, a, b, "");
}
static LLVMValueRef fabs_(tj_emit_t* em, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return tj_emit_intrinsic(em, "llvm.fabs", &t, 1, &x, 1);
}
static LLVMValueRef copysign_(tj_emit_t* em, LLVMValueRef mag,
                              LLVMValueRef sign) {
  LLVMTypeRef t = LLVMTypeOf(mag);
  LLVMValueRef args[2] = {mag, sign};
  return tj_emit_intrinsic(em, "llvm.copysign", &t, 1, args, 2);
}
static LLVMValueRef isnan_(tj_emit_t* em, LLVMValueRef x) {
  return fcmp(em, LLVMRealUNO, x, x);
}
// x clamped to [lo, hi]; NaN becomes lo.
static LLVMValueRef clamp(tj_emit_t* em, LLVMValueRef x, double lo, double hi) {
  x = sel(em, fcmp(em, LLVMRealOGT, x, fc(x, lo)), x, fc(x, lo));
  return sel(em, fcmp(em, LLVMRealOLT, x, fc(x, hi)), x, fc(x, hi));
}
// Round to nearest even by the 1.5 * 2^(p-1) trick: no roundps/libcall
// needed on any target. Valid for |x| < 2^22 (f32) or 2^51 (f64).
static LLVMValueRef round_magic(tj_emit_t* em, LLVMValueRef x) {
  LLVMValueRef m = fc(x, is_double(x) ? 6755399441055744.0 : 12582912.0);
  return vsub(em, vadd(em, x, m), m);
}
// 2^n for integer lanes n of the float's width, valid for normal results.
static LLVMValueRef exp2_int(tj_emit_t* em, LLVMValueRef n,
                             LLVMTypeRef float_type) {
  bool dbl = LLVMGetTypeKind(LLVMGetTypeKind(float_type) == LLVMVectorTypeKind
                                 ? LLVMGetElementType(float_type)
                                 : float_type) == LLVMDoubleTypeKind;
  LLVMTypeRef it = LLVMTypeOf(n);
  LLVMValueRef biased =
      LLVMBuildAdd(em->b, n, tj_emit_iconst(it, dbl ? 1023 : 127), "");
  LLVMValueRef bits =
      LLVMBuildShl(em->b, biased, tj_emit_iconst(it, dbl ? 52 : 23), "");
  return LLVMBuildBitCast(em->b, bits, float_type, "");
}
// y * 2^n in two steps so that results down to the subnormals round once
// and 2^n itself never overflows the exponent field.
static LLVMValueRef scale(tj_emit_t* em, LLVMValueRef y, LLVMValueRef n) {
  LLVMTypeRef it = LLVMTypeOf(n);
  LLVMValueRef n1 = LLVMBuildAShr(em->b, n, tj_emit_iconst(it, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(em->b, n, n1, "");
  LLVMTypeRef ft = LLVMTypeOf(y);
  return vmul(em, vmul(em, y, exp2_int(em, n1, ft)), exp2_int(em, n2, ft));
}

//===--- exp ---===//

static LLVMValueRef exp_f32(tj_emit_t* em, LLVMValueRef x) {
  LLVMTypeRef it = tj_emit_int_like(em, LLVMTypeOf(x));
  // Beyond [-104, 89] the result is 0 or inf after scaling anyway.
  LLVMValueRef xc = clamp(em, x, -104.0, 89.0);
  LLVMValueRef q = round_magic(em, vmul(em, xc, fc(x, 1.44269504088896341)));
  // ln2 = C1 + C2 with C1 = 355/512 exact in 9 bits: q * C1 is exact and
  // xc - q * C1 exact by Sterbenz, with or without FMA (Cephes).
  LLVMValueRef r = tj_emit_fmuladd(em, q, fc(x, -0.693359375), xc);
  r = tj_emit_fmuladd(em, q, fc(x, 2.12194440e-4), r);
  static const double p[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef y = tj_emit_poly(em, r, p, 6);
  y = tj_emit_fmuladd(em, y, vmul(em, r, r), r);
  y = vadd(em, y, fc(x, 1.0));
  y = scale(em, y, LLVMBuildFPToSI(em->b, q, it, ""));
  return sel(em, isnan_(em, x), x, y);
}

static LLVMValueRef exp_f64(tj_emit_t* em, LLVMValueRef x) {
  LLVMTypeRef it = tj_emit_int_like(em, LLVMTypeOf(x));
  LLVMValueRef xc = clamp(em, x, -746.0, 710.0);
  LLVMValueRef q = round_magic(em, vmul(em, xc, fc(x, 1.44269504088896338700)));
  // fdlibm's split: ln2_hi has 32 significant bits, so q * ln2_hi is exact
  // for |q| < 2^21.
  LLVMValueRef r =
      tj_emit_fmuladd(em, q, fc(x, -6.93147180369123816490e-01), xc);
  r = tj_emit_fmuladd(em, q, fc(x, -1.90821492927058770002e-10), r);
  // Taylor to degree 13: the remainder on |r| <= ln2/2 is 4e-18.
  double c[14];
  double fact = 1.0;
  for (int i = 0; i <= 13; ++i) {
    if (i > 0) fact *= i;
    c[13 - i] = 1.0 / fact;
  }
  LLVMValueRef y = tj_emit_poly(em, r, c, 14);
  y = scale(em, y, LLVMBuildFPToSI(em->b, q, it, ""));
  return sel(em, isnan_(em, x), x, y);
}

LLVMValueRef tj_vm_exp(tj_emit_t* em, LLVMValueRef x) {
  return is_double(x) ? exp_f64(em, x) : exp_f32(em, x);
}

//===--- log ---===//

// Patches log's special values: x < 0 or NaN -> NaN, 0 -> -inf, inf -> inf.
static LLVMValueRef log_specials(tj_emit_t* em, LLVMValueRef x,
                                 LLVMValueRef r) {
  r = sel(em, fcmp(em, LLVMRealOEQ, x, fc(x, INFINITY)), x, r);
  r = sel(em, fcmp(em, LLVMRealOEQ, x, fc(x, 0.0)), fc(x, -INFINITY), r);
  return sel(em, fcmp(em, LLVMRealULT, x, fc(x, 0.0)), fc(x, NAN), r);
}

static LLVMValueRef log_f32(tj_emit_t* em, LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef ft = LLVMTypeOf(x);
  LLVMTypeRef it = tj_emit_int_like(em, ft);
  // Subnormals: scale by 2^23 so the exponent field is meaningful.
  LLVMValueRef tiny = fcmp(em, LLVMRealOLT, x, fc(x, 1.17549435e-38));
  LLVMValueRef xs = sel(em, tiny, vmul(em, x, fc(x, 8388608.0)), x);
  LLVMValueRef bits = LLVMBuildBitCast(b, xs, it, "");
  LLVMValueRef e =
      LLVMBuildSub(b, LLVMBuildLShr(b, bits, tj_emit_iconst(it, 23), ""),
                   tj_emit_iconst(it, 126), "");
  e = LLVMBuildSub(
      b, e, sel(em, tiny, tj_emit_iconst(it, 23), tj_emit_iconst(it, 0)), "");
  LLVMValueRef m = LLVMBuildBitCast(
      b,
      LLVMBuildOr(b, LLVMBuildAnd(b, bits, tj_emit_iconst(it, 0x007fffff), ""),
                  tj_emit_iconst(it, 0x3f000000), ""),
      ft, "");  // [0.5, 1)
  LLVMValueRef lt = fcmp(em, LLVMRealOLT, m, fc(x, 0.707106781186547524));
  e = LLVMBuildSub(b, e, LLVMBuildZExt(b, lt, it, ""), "");
  m = vsub(em, sel(em, lt, vadd(em, m, m), m), fc(x, 1.0));
  LLVMValueRef z = vmul(em, m, m);
  static const double p[] = {
      7.0376836292E-2,  -1.1514610310E-1, 1.1676998740E-1,
      -1.2420140846E-1, 1.4249322787E-1,  -1.6668057665E-1,
      2.0000714765E-1,  -2.4999993993E-1, 3.3333331174E-1};
  LLVMValueRef y = vmul(em, vmul(em, tj_emit_poly(em, m, p, 9), m), z);
  LLVMValueRef fe = LLVMBuildSIToFP(b, e, ft, "");
  y = tj_emit_fmuladd(em, fe, fc(x, -2.12194440e-4), y);
  y = tj_emit_fmuladd(em, z, fc(x, -0.5), y);
  LLVMValueRef r = vadd(em, m, y);
  r = tj_emit_fmuladd(em, fe, fc(x, 0.693359375), r);
  return log_specials(em, x, r);
}

static LLVMValueRef log_f64(tj_emit_t* em, LLVMValueRef x) {
  LLVMBuilderRef b = em->b;
  LLVMTypeRef ft = LLVMTypeOf(x);
  LLVMTypeRef it = tj_emit_int_like(em, ft);
  LLVMValueRef tiny = fcmp(em, LLVMRealOLT, x, fc(x, 2.2250738585072014e-308));
  LLVMValueRef xs = sel(em, tiny, vmul(em, x, fc(x, 18014398509481984.0)), x);
  LLVMValueRef bits = LLVMBuildBitCast(b, xs, it, "");
  LLVMValueRef k =
      LLVMBuildSub(b, LLVMBuildLShr(b, bits, tj_emit_iconst(it, 52), ""),
                   tj_emit_iconst(it, 1023), "");
  k = LLVMBuildSub(
      b, k, sel(em, tiny, tj_emit_iconst(it, 54), tj_emit_iconst(it, 0)), "");
  LLVMValueRef m = LLVMBuildBitCast(
      b,
      LLVMBuildOr(
          b,
          LLVMBuildAnd(b, bits, tj_emit_iconst(it, 0x000fffffffffffffLL), ""),
          tj_emit_iconst(it, 0x3ff0000000000000LL), ""),
      ft, "");  // [1, 2)
  LLVMValueRef big = fcmp(em, LLVMRealOGT, m, fc(x, 1.4142135623730951));
  m = sel(em, big, vmul(em, m, fc(x, 0.5)), m);
  k = LLVMBuildAdd(b, k, LLVMBuildZExt(b, big, it, ""), "");
  // fdlibm e_log.c: log(1+f) = f - hfsq + s*(hfsq+R), s = f/(2+f).
  LLVMValueRef f = vsub(em, m, fc(x, 1.0));
  LLVMValueRef s = vdiv(em, f, vadd(em, f, fc(x, 2.0)));
  LLVMValueRef z = vmul(em, s, s);
  LLVMValueRef w = vmul(em, z, z);
  static const double even[] = {1.531383769920937332e-01,
                                2.222219843214978396e-01,
                                3.999999999940941908e-01};
  static const double odd[] = {
      1.479819860511658591e-01, 1.818357216161805012e-01,
      2.857142874366239149e-01, 6.666666666666735130e-01};
  LLVMValueRef t1 = vmul(em, w, tj_emit_poly(em, w, even, 3));
  LLVMValueRef t2 = vmul(em, z, tj_emit_poly(em, w, odd, 4));
  LLVMValueRef rr = vadd(em, t2, t1);
  LLVMValueRef hfsq = vmul(em, vmul(em, f, f), fc(x, 0.5));
  LLVMValueRef dk = LLVMBuildSIToFP(b, k, ft, "");
  LLVMValueRef inner = vadd(em, vmul(em, s, vadd(em, hfsq, rr)),
                            vmul(em, dk, fc(x, 1.90821492927058770002e-10)));
  LLVMValueRef r = vsub(em, vmul(em, dk, fc(x, 6.93147180369123816490e-01)),
                        vsub(em, vsub(em, hfsq, inner), f));
  return log_specials(em, x, r);
}

LLVMValueRef tj_vm_log(tj_emit_t* em, LLVMValueRef x) {
  return is_double(x) ? log_f64(em, x) : log_f32(em, x);
}

//===--- f64 through the C library, lane by lane ---===//

static LLVMValueRef libm_call(tj_emit_t* em, const char* libm_name,
                              LLVMValueRef x, LLVMValueRef y) {
  unsigned nargs = y ? 2 : 1;
  LLVMTypeRef params[2] = {em->t_f64, em->t_f64};
  LLVMTypeRef fty = LLVMFunctionType(em->t_f64, params, nargs, 0);
  char name[32];
  snprintf(name, sizeof(name), "%s%s",
           em->target.libm_prefix ? em->target.libm_prefix : "", libm_name);
  LLVMValueRef fn = LLVMGetNamedFunction(em->mod, name);
  if (!fn) fn = LLVMAddFunction(em->mod, name, fty);
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  if (lanes == 1) {
    LLVMValueRef args[2] = {x, y};
    return LLVMBuildCall2(em->b, fty, fn, args, nargs, "");
  }
  LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(x));
  for (int32_t l = 0; l < lanes; ++l) {
    LLVMValueRef lane = LLVMConstInt(em->t_i32, (unsigned long long)l, 0);
    LLVMValueRef args[2] = {
        LLVMBuildExtractElement(em->b, x, lane, ""),
        y ? LLVMBuildExtractElement(em->b, y, lane, "") : NULL};
    LLVMValueRef r = LLVMBuildCall2(em->b, fty, fn, args, nargs, "");
    out = LLVMBuildInsertElement(em->b, out, r, lane, "");
  }
  return out;
}

//===--- tanh, sigmoid, erf ---===//

LLVMValueRef tj_vm_tanh(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "tanh", x, NULL);
  LLVMValueRef a = fabs_(em, x);
  // Small |x|: odd polynomial (Cephes tanhf), where 1 - 2/(e+1) would
  // cancel.
  LLVMValueRef z = vmul(em, x, x);
  static const double p[] = {-5.70498872745E-3, 2.06390887954E-2,
                             -5.37397155531E-2, 1.33314422036E-1,
                             -3.33332819422E-1};
  // x + x^3 P(x^2) is +0 at x = -0 (-0 * +0 * P < 0 is +0): tanh is odd
  // and keeps the sign of x, so copy it (C99: tanh(-0) = -0).
  LLVMValueRef small = copysign_(
      em, tj_emit_fmuladd(em, vmul(em, tj_emit_poly(em, z, p, 5), z), x, x), x);
  // Large |x|: 1 - 2/(exp(2|x|) + 1); |x| >= 44 is exactly 1 in f32 and
  // keeps exp finite.
  LLVMValueRef ac = clamp(em, a, 0.0, 44.0);
  LLVMValueRef e = exp_f32(em, vadd(em, ac, ac));
  LLVMValueRef large =
      vsub(em, fc(x, 1.0), vdiv(em, fc(x, 2.0), vadd(em, e, fc(x, 1.0))));
  large = copysign_(em, large, x);
  LLVMValueRef r =
      sel(em, fcmp(em, LLVMRealOLT, a, fc(x, 0.625)), small, large);
  return sel(em, isnan_(em, x), x, r);
}

LLVMValueRef tj_vm_sigmoid(tj_emit_t* em, LLVMValueRef x) {
  // e = exp(-|x|) never overflows; for x < 0 the result e/(1+e) keeps
  // relative accuracy down to the subnormals.
  // One division, not e * (1/(1+e)): an extra rounding would cost half an
  // ulp.
  LLVMValueRef e = tj_vm_exp(em, LLVMBuildFNeg(em->b, fabs_(em, x), ""));
  LLVMValueRef num =
      sel(em, fcmp(em, LLVMRealOLT, x, fc(x, 0.0)), e, fc(x, 1.0));
  return vdiv(em, num, vadd(em, e, fc(x, 1.0)));
}

LLVMValueRef tj_vm_erf(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "erf", x, NULL);
  LLVMValueRef a = fabs_(em, x);
  // |x| < 1: Maclaurin series x * sum_n c_n x^2n, c_n = 2/sqrt(pi) (-1)^n /
  // (n! (2n+1)); 12 terms leave a remainder below 1e-10. Written as
  // x + x * (c_0 - 1 + ...) so that the rounding of c_0 = 1.128.. and of
  // the sum only touch the small correction term.
  double c[12];
  double fact = 1.0;
  for (int n = 0; n < 12; ++n) {
    if (n > 0) fact *= n;
    double term = 1.1283791670955126 / (fact * (2 * n + 1));
    c[11 - n] = (n & 1) ? -term : term;
  }
  c[11] -= 1.0;
  LLVMValueRef z = vmul(em, x, x);
  LLVMValueRef small = tj_emit_fmuladd(em, x, tj_emit_poly(em, z, c, 12), x);
  // |x| >= 1: erf = 1 - erfc, erfc(a) = t exp(-a^2 + P(t)), t = 1/(1+a/2)
  // (Numerical Recipes erfcc). erfc <= 0.16 here, so its 1.2e-7 relative
  // error is under a third of an ulp of the result. erf(4) rounds to 1.
  LLVMValueRef ac = clamp(em, a, 0.0, 4.0);
  LLVMValueRef t =
      vdiv(em, fc(x, 1.0), tj_emit_fmuladd(em, ac, fc(x, 0.5), fc(x, 1.0)));
  static const double p[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398,
                             0.27886807, -0.18628806, 0.09678418, 0.37409196,
                             1.00002368, -1.26551223};
  LLVMValueRef arg = vsub(em, tj_emit_poly(em, t, p, 10), vmul(em, ac, ac));
  LLVMValueRef erfc = vmul(em, t, exp_f32(em, arg));
  LLVMValueRef large = copysign_(em, vsub(em, fc(x, 1.0), erfc), x);
  LLVMValueRef r = sel(em, fcmp(em, LLVMRealOLT, a, fc(x, 1.0)), small, large);
  return sel(em, isnan_(em, x), x, r);
}

// s = a + b rounded, and *err = a + b - s exactly (Knuth's two-sum).
static LLVMValueRef two_sum(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b,
                            LLVMValueRef* err) {
  LLVMValueRef s = vadd(em, a, b);
  LLVMValueRef bv = vsub(em, s, a);
  *err = vadd(em, vsub(em, a, vsub(em, s, bv)), vsub(em, b, bv));
  return s;
}

// erfc(x) = 1 - erf(x), kept accurate where it is tiny (x up to 10.05,
// erfc ~ 1e-45): gelu's tail 0.5 x erfc(-x / sqrt 2) depends on it.
// For a = |x|: erfc(a) = t exp(-a^2 + P(t)), t = 1 / (1 + a/2), the
// Numerical Recipes erfcc with a relative error under 1.2e-7 for every
// a >= 0; erfc(-a) = 2 - erfc(a). The exponent -a^2 + P(t) reaches -100:
// rounding it to f32 would cost up to 4e-6 of relative error, so a^2 is
// split exactly and the sum's rounding error recovered (two-sum);
// both go in as the factor 1 + err.
LLVMValueRef tj_vm_erfc(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "erfc", x, NULL);
  // erfc(11) = 1.4e-54 is 0 in f32; the clamp keeps a^2 finite at inf.
  LLVMValueRef a = clamp(em, fabs_(em, x), 0.0, 11.0);
  LLVMValueRef t =
      vdiv(em, fc(x, 1.0), tj_emit_fmuladd(em, a, fc(x, 0.5), fc(x, 1.0)));
  static const double p[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398,
                             0.27886807, -0.18628806, 0.09678418, 0.37409196,
                             1.00002368, -1.26551223};
  LLVMValueRef pt = tj_emit_poly(em, t, p, 10);
  // a = ah + al with ah's low 12 mantissa bits cleared (Dekker): ah^2 is
  // exact, and lo = (2 ah + al) al carries the rest to within 2^-24 of
  // itself, on every tier (no FMA needed). lo reaches 0.1, so it goes
  // into the exponent, not into the correction factor.
  LLVMTypeRef it = tj_emit_int_like(em, LLVMTypeOf(x));
  LLVMValueRef ah = LLVMBuildBitCast(
      em->b,
      LLVMBuildAnd(em->b, LLVMBuildBitCast(em->b, a, it, ""),
                   tj_emit_iconst(it, (int64_t)0xFFFFF000u), ""),
      LLVMTypeOf(x), "");
  LLVMValueRef al = vsub(em, a, ah);
  LLVMValueRef hi = vmul(em, ah, ah);
  LLVMValueRef lo = vmul(em, tj_emit_fmuladd(em, ah, fc(x, 2.0), al), al);
  // y + err = pt - hi - lo, the two subtractions' rounding errors
  // recovered exactly (Knuth's two-sum) into err, whose square is below
  // 1e-10: exp(y + err) = exp(y) (1 + err).
  LLVMValueRef e1, e2;
  LLVMValueRef y1 = two_sum(em, pt, LLVMBuildFNeg(em->b, hi, ""), &e1);
  LLVMValueRef y = two_sum(em, y1, LLVMBuildFNeg(em->b, lo, ""), &e2);
  LLVMValueRef corr = vadd(em, fc(x, 1.0), vadd(em, e1, e2));
  LLVMValueRef pos = vmul(em, vmul(em, t, exp_f32(em, y)), corr);
  LLVMValueRef neg = vsub(em, fc(x, 2.0), pos);
  LLVMValueRef r = sel(em, fcmp(em, LLVMRealOLT, x, fc(x, 0.0)), neg, pos);
  return sel(em, isnan_(em, x), x, r);
}

//===--- sin, cos ---===//

// 2/pi in 24-bit chunks, most significant first: chunk i holds the bits
// of weight 2^-(24 i + 1) .. 2^-(24 i + 24) (fdlibm's ipio2 table;
// recomputed from Machin's formula when this was written). Ten chunks
// carry 240 bits: x * 2/pi is then known to 2^-110 for every finite f32.
static const int32_t kTwoOverPi24[] = {0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1,
                                       0xF534DD, 0xC0DB62, 0x95993C, 0x439041,
                                       0xFE5163, 0xABDEBB};

// Payne-Hanek reduction of |xd| (double lanes holding f32 values, any
// finite magnitude): sets *j to the integer nearest x * 2/pi modulo 4 (as
// a double in [-20, 20]) and returns r = x - j pi/2 in double. Each
// product x * chunk_i has 24 x 24 significant bits, so it is exact in
// double; one of magnitude >= 2^50 is a multiple of 4 (its lowest bit
// weighs >= 4) and drops out modulo 4, and the rest leave p - 4
// round(p/4), exact, in [-2, 2]. Their sum is carried as a two-sum pair,
// so the fraction x * 2/pi - j keeps its relative accuracy however close x
// lies to a multiple of pi/2.
static LLVMValueRef reduce_pio2_huge(tj_emit_t* em, LLVMValueRef xd,
                                     LLVMValueRef* j) {
  LLVMValueRef hi = fc(xd, 0.0), lo = fc(xd, 0.0);
  for (size_t i = 0; i < sizeof(kTwoOverPi24) / sizeof(kTwoOverPi24[0]); ++i) {
    LLVMValueRef p =
        vmul(em, xd, fc(xd, ldexp(kTwoOverPi24[i], -24 * (int)(i + 1))));
    LLVMValueRef m =
        vsub(em, p,
             vmul(em, fc(xd, 4.0), round_magic(em, vmul(em, p, fc(xd, 0.25)))));
    m = sel(em, fcmp(em, LLVMRealOLT, fabs_(em, p), fc(xd, 0x1p50)), m,
            fc(xd, 0.0));
    LLVMValueRef e;
    hi = two_sum(em, hi, m, &e);
    lo = vadd(em, lo, e);
  }
  *j = round_magic(em, hi);
  LLVMValueRef f = vadd(em, vsub(em, hi, *j), lo);  // hi - j is exact
  // pi/2 as a double head and tail.
  return tj_emit_fmuladd(em, f, fc(xd, 1.5707963267948966),
                         vmul(em, f, fc(xd, 6.123233995736766e-17)));
}

// sin(x) (cos_shift 0) or cos(x) (cos_shift 1) for f32 lanes.
static LLVMValueRef sincos_f32(tj_emit_t* em, LLVMValueRef x, int cos_shift) {
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  LLVMTypeRef dt = tj_emit_vec(em, em->t_f64, lanes);
  LLVMTypeRef i64t = tj_emit_vec(em, em->t_i64, lanes);
  LLVMTypeRef i32t = tj_emit_vec(em, em->t_i32, lanes);
  LLVMValueRef xd = LLVMBuildFPExt(b, x, dt, "");
  LLVMValueRef ax = fabs_(em, xd);
  // Below 2^20 the three-part reduction is exact; beyond it (and for
  // infinities and NaN, patched last) the lanes reduce as 0 here.
  LLVMValueRef ok = fcmp(em, LLVMRealOLT, ax, fc(xd, 0x1p20));
  LLVMValueRef xs = sel(em, ok, xd, fc(xd, 0.0));
  LLVMValueRef j =
      round_magic(em, vmul(em, xs, fc(xd, 6.36619772367581382433e-01)));
  // pi/2 in three 33-bit parts (fdlibm): j * part is exact for |j| < 2^20.
  LLVMValueRef r =
      tj_emit_fmuladd(em, j, fc(xd, -1.57079632673412561417e+00), xs);
  r = tj_emit_fmuladd(em, j, fc(xd, -6.07710050630396597660e-11), r);
  r = tj_emit_fmuladd(em, j, fc(xd, -2.02226624871116645580e-21), r);
  // Finite lanes of 2^20 and more take the exact reduction, in a branch
  // taken only when some lane needs it (it costs ~60 double operations).
  LLVMValueRef huge =
      LLVMBuildAnd(b, fcmp(em, LLVMRealOLT, ax, fc(xd, INFINITY)),
                   LLVMBuildNot(b, ok, ""), "");
  LLVMValueRef any = huge;
  if (lanes > 1) {
    LLVMTypeRef ht = LLVMTypeOf(huge);
    any = tj_emit_intrinsic(em, "llvm.vector.reduce.or", &ht, 1, &huge, 1);
  }
  LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
  LLVMValueRef fn = LLVMGetBasicBlockParent(from);
  LLVMBasicBlockRef slow =
      LLVMAppendBasicBlockInContext(em->ctx, fn, "sincos_huge");
  LLVMBasicBlockRef done =
      LLVMAppendBasicBlockInContext(em->ctx, fn, "sincos_reduced");
  LLVMBuildCondBr(b, any, slow, done);
  LLVMPositionBuilderAtEnd(b, slow);
  LLVMValueRef jh;
  LLVMValueRef rh = reduce_pio2_huge(em, sel(em, huge, xd, fc(xd, 0.0)), &jh);
  LLVMValueRef j_slow = sel(em, huge, jh, j);
  LLVMValueRef r_slow = sel(em, huge, rh, r);
  LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(b);
  LLVMBuildBr(b, done);
  LLVMPositionBuilderAtEnd(b, done);
  LLVMValueRef phis[2] = {LLVMBuildPhi(b, dt, ""), LLVMBuildPhi(b, dt, "")};
  LLVMValueRef in_j[2] = {j, j_slow}, in_r[2] = {r, r_slow};
  LLVMBasicBlockRef in_b[2] = {from, slow_end};
  LLVMAddIncoming(phis[0], in_j, in_b, 2);
  LLVMAddIncoming(phis[1], in_r, in_b, 2);
  j = phis[0];
  r = phis[1];
  LLVMValueRef rf = LLVMBuildFPTrunc(b, r, LLVMTypeOf(x), "");
  LLVMValueRef q = LLVMBuildTrunc(b, LLVMBuildFPToSI(b, j, i64t, ""), i32t, "");
  q = LLVMBuildAdd(b, q, tj_emit_iconst(i32t, cos_shift), "");
  LLVMValueRef z = vmul(em, rf, rf);
  static const double sp[] = {-1.9515295891E-4, 8.3321608736E-3,
                              -1.6666654611E-1};
  static const double cp[] = {2.443315711809948E-005, -1.388731625493765E-003,
                              4.166664568298827E-002};
  LLVMValueRef s =
      tj_emit_fmuladd(em, vmul(em, tj_emit_poly(em, z, sp, 3), z), rf, rf);
  LLVMValueRef c =
      tj_emit_fmuladd(em, vmul(em, tj_emit_poly(em, z, cp, 3), z), z,
                      tj_emit_fmuladd(em, z, fc(x, -0.5), fc(x, 1.0)));
  LLVMValueRef odd = LLVMBuildICmp(
      b, LLVMIntNE, LLVMBuildAnd(b, q, tj_emit_iconst(i32t, 1), ""),
      tj_emit_iconst(i32t, 0), "");
  LLVMValueRef neg = LLVMBuildICmp(
      b, LLVMIntNE, LLVMBuildAnd(b, q, tj_emit_iconst(i32t, 2), ""),
      tj_emit_iconst(i32t, 0), "");
  LLVMValueRef v = sel(em, odd, c, s);
  v = sel(em, neg, LLVMBuildFNeg(b, v, ""), v);
  LLVMValueRef bad = fcmp(em, LLVMRealUEQ, fabs_(em, x), fc(x, INFINITY));
  v = sel(em, bad, fc(x, NAN), v);
  if (cos_shift) return v;
  // r + r^3 P(r^2) rounds -0 to +0 (as tanh's polynomial): sin(+-0) is x
  // itself (C99).
  return sel(em, fcmp(em, LLVMRealOEQ, x, fc(x, 0.0)), x, v);
}

LLVMValueRef tj_vm_sin(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "sin", x, NULL);
  return sincos_f32(em, x, 0);
}

LLVMValueRef tj_vm_cos(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "cos", x, NULL);
  return sincos_f32(em, x, 1);
}

//===--- asin, acos, atan ---===//

// pi/2, pi and pi/4 as an f32 head plus the rest: adding the rest last keeps
// the constant's own rounding (up to 0.4 ulp of pi/2) out of the result.
#define PIO2_HI 1.57079637050628662109375
#define PIO2_LO (1.5707963267948966192 - PIO2_HI)
#define PI_HI 3.1415927410125732421875
#define PI_LO (3.1415926535897932385 - PI_HI)
#define PIO4_HI 0.785398185253143310546875
#define PIO4_LO (0.78539816339744830962 - PIO4_HI)

// The Cephes asinf core on a = |x| in [0, 1]: for a <= 1/2, p = asin(a) by
// an odd polynomial; above, p = asin(s) with s = sqrt((1 - a) / 2), since
// asin(a) = pi/2 - 2 asin(s) keeps the argument small where asin's slope
// blows up. |a| > 1 makes s NaN, as C99 wants. Sets |*big| to the second
// case.
static LLVMValueRef asin_core(tj_emit_t* em, LLVMValueRef a,
                              LLVMValueRef* big) {
  *big = fcmp(em, LLVMRealOGT, a, fc(a, 0.5));
  LLVMValueRef zb = vmul(em, fc(a, 0.5), vsub(em, fc(a, 1.0), a));
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef sb = tj_emit_intrinsic(em, "llvm.sqrt", &t, 1, &zb, 1);
  LLVMValueRef z = sel(em, *big, zb, vmul(em, a, a));
  LLVMValueRef s = sel(em, *big, sb, a);
  static const double p[] = {4.2163199048E-2, 2.4181311049E-2, 4.5470025998E-2,
                             7.4953002686E-2, 1.6666752422E-1};
  return tj_emit_fmuladd(em, vmul(em, tj_emit_poly(em, z, p, 5), z), s, s);
}

// hi - 2p + lo, the reflection of the core's second case.
static LLVMValueRef reflect(tj_emit_t* em, double hi, double lo,
                            LLVMValueRef p) {
  return vadd(em, vsub(em, fc(p, hi), vadd(em, p, p)), fc(p, lo));
}

LLVMValueRef tj_vm_asin(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "asin", x, NULL);
  LLVMValueRef big;
  LLVMValueRef p = asin_core(em, fabs_(em, x), &big);
  LLVMValueRef r = sel(em, big, reflect(em, PIO2_HI, PIO2_LO, p), p);
  // copysign keeps asin(-0) = -0 and passes NaN through.
  return copysign_(em, r, x);
}

LLVMValueRef tj_vm_acos(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "acos", x, NULL);
  LLVMValueRef big;
  LLVMValueRef p = asin_core(em, fabs_(em, x), &big);
  // |x| > 1/2: acos(x) = 2 asin(s) for x > 0, pi - 2 asin(s) below;
  // otherwise pi/2 - asin(x).
  LLVMValueRef pos = vadd(em, p, p);
  LLVMValueRef neg = reflect(em, PI_HI, PI_LO, p);
  LLVMValueRef mid =
      vadd(em, vsub(em, fc(x, PIO2_HI), copysign_(em, p, x)), fc(x, PIO2_LO));
  LLVMValueRef r = sel(em, fcmp(em, LLVMRealOLT, x, fc(x, 0.0)), neg, pos);
  return sel(em, big, r, mid);
}

LLVMValueRef tj_vm_atan(tj_emit_t* em, LLVMValueRef x) {
  if (is_double(x)) return libm_call(em, "atan", x, NULL);
  // Cephes atanf: a = |x| is moved into [0, tan(pi/8)] by
  // atan(a) = pi/2 + atan(-1/a) (a > tan(3pi/8)) or
  // pi/4 + atan((a - 1) / (a + 1)) (a > tan(pi/8)), then an odd
  // polynomial. At a = inf, -1/a = -0 and the result is pi/2 rounded.
  LLVMValueRef a = fabs_(em, x);
  LLVMValueRef big = fcmp(em, LLVMRealOGT, a, fc(x, 2.414213562373095));
  LLVMValueRef mid = fcmp(em, LLVMRealOGT, a, fc(x, 0.4142135623730950));
  LLVMValueRef xr =
      sel(em, big, vdiv(em, fc(x, -1.0), a),
          sel(em, mid,
              vdiv(em, vsub(em, a, fc(x, 1.0)), vadd(em, a, fc(x, 1.0))), a));
  LLVMValueRef hi =
      sel(em, big, fc(x, PIO2_HI), sel(em, mid, fc(x, PIO4_HI), fc(x, 0.0)));
  LLVMValueRef lo =
      sel(em, big, fc(x, PIO2_LO), sel(em, mid, fc(x, PIO4_LO), fc(x, 0.0)));
  LLVMValueRef z = vmul(em, xr, xr);
  static const double p[] = {8.05374449538e-2, -1.38776856032E-1,
                             1.99777106478E-1, -3.33329491539E-1};
  LLVMValueRef r =
      tj_emit_fmuladd(em, vmul(em, tj_emit_poly(em, z, p, 4), z), xr, xr);
  return copysign_(em, vadd(em, hi, vadd(em, r, lo)), x);
}

//===--- pow ---===//

LLVMValueRef tj_vm_pow(tj_emit_t* em, LLVMValueRef x, LLVMValueRef y) {
  if (is_double(x)) return libm_call(em, "pow", x, y);
  LLVMBuilderRef b = em->b;
  int32_t lanes = tj_emit_lanes_of(LLVMTypeOf(x));
  LLVMTypeRef dt = tj_emit_vec(em, em->t_f64, lanes);
  LLVMTypeRef i32t = tj_emit_vec(em, em->t_i32, lanes);
  LLVMValueRef xd = LLVMBuildFPExt(b, x, dt, "");
  LLVMValueRef yd = LLVMBuildFPExt(b, y, dt, "");
  // |x|^y in double: log's error times |y log x| <= ~150 stays far below
  // an f32 ulp.
  LLVMValueRef r = exp_f64(em, vmul(em, yd, log_f64(em, fabs_(em, xd))));
  // Integer y: every f32 with |y| >= 2^24 is an even integer; below, the
  // magic rounding is exact.
  LLVMValueRef ay = fabs_(em, y);
  LLVMValueRef small_y = fcmp(em, LLVMRealOLT, ay, fc(y, 16777216.0));
  LLVMValueRef huge = LLVMBuildNot(b, small_y, "");  // also NaN and inf
  LLVMValueRef yc = sel(em, small_y, y, fc(y, 0.0));
  LLVMValueRef y_int =
      LLVMBuildOr(b, huge, fcmp(em, LLVMRealOEQ, round_magic(em, yc), y), "");
  LLVMValueRef y_odd = LLVMBuildAnd(
      b, LLVMBuildNot(b, huge, ""),
      LLVMBuildTrunc(b, LLVMBuildFPToSI(b, round_magic(em, yc), i32t, ""),
                     tj_emit_vec(em, em->t_i1, lanes), ""),
      "");
  y_odd = LLVMBuildAnd(b, y_odd, y_int, "");
  LLVMValueRef rf = LLVMBuildFPTrunc(b, r, LLVMTypeOf(x), "");
  // C99 pow: a negative sign of x survives odd integer powers; a finite
  // negative x with a finite non-integer y is NaN; y == 0 or x == 1 give 1, as
  // does x == -1 with y = +-inf.
  LLVMTypeRef it = tj_emit_int_like(em, LLVMTypeOf(x));
  LLVMValueRef x_neg_sign = LLVMBuildICmp(
      b, LLVMIntSLT, LLVMBuildBitCast(b, x, it, ""), LLVMConstNull(it), "");
  rf = sel(em, LLVMBuildAnd(b, x_neg_sign, y_odd, ""), LLVMBuildFNeg(b, rf, ""),
           rf);
  LLVMValueRef bad =
      LLVMBuildAnd(b,
                   LLVMBuildAnd(b, fcmp(em, LLVMRealOLT, x, fc(x, 0.0)),
                                fcmp(em, LLVMRealOGT, x, fc(x, -INFINITY)), ""),
                   LLVMBuildAnd(b, LLVMBuildNot(b, y_int, ""),
                                fcmp(em, LLVMRealONE, ay, fc(y, INFINITY)), ""),
                   "");
  rf = sel(em, bad, fc(x, NAN), rf);
  LLVMValueRef one = LLVMBuildOr(b, fcmp(em, LLVMRealOEQ, y, fc(y, 0.0)),
                                 fcmp(em, LLVMRealOEQ, x, fc(x, 1.0)), "");
  one =
      LLVMBuildOr(b, one,
                  LLVMBuildAnd(b, fcmp(em, LLVMRealOEQ, x, fc(x, -1.0)),
                               fcmp(em, LLVMRealOEQ, ay, fc(y, INFINITY)), ""),
                  "");
  return sel(em, one, fc(x, 1.0), rf);
}
