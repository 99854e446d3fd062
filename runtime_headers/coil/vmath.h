// coil runtime: math for generated kernels (namespace coil::m).
//
// Float versions of exp, log, log2, log10, log1p, expm1, tanh, sigmoid and erf are inline,
// branch-free (range reduction + polynomial, special cases by selects) so that gcc vectorizes
// a `#pragma omp simd` loop calling them; they are accurate to ~1-2 ulp against a
// double-precision reference. The rest call libm through compiler builtins (no <cmath>:
// including it costs ~150 ms per kernel compile). Integer overloads follow PyTorch's CPU
// semantics (floor division, Python remainder, shifts, integer pow).
#pragma once

#include "scalar.h"

#ifdef __FMA__
#define COIL_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define COIL_FMAF(a, b, c) ((a) * (b) + (c))
#endif

namespace coil::m {

namespace detail {
using coil::detail::f2u;
using coil::detail::self;
using coil::detail::u2f;
// 2^k as a float for k in [-126, 127].
COIL_INLINE float pow2i(int32_t k) { return u2f(uint32_t(k + 127) << 23); }
COIL_INLINE int32_t seli(bool c, int32_t a, int32_t b) {
  return int32_t(coil::detail::selu(c, uint32_t(a), uint32_t(b)));
}
COIL_INLINE float fabs_(float x) { return u2f(f2u(x) & 0x7fffffffu); }
COIL_INLINE float copysign_(float mag, float sgn) {
  return u2f((f2u(mag) & 0x7fffffffu) | (f2u(sgn) & 0x80000000u));
}
COIL_INLINE bool isnan_(float x) { return (f2u(x) & 0x7fffffffu) > 0x7f800000u; }
// x clamped to [lo, hi], NaN -> 0 (so that float -> int conversions stay defined).
COIL_INLINE float clamp_(float x, float lo, float hi) {
  float r = self(x < lo, lo, x);
  r = self(r > hi, hi, r);
  return self(isnan_(x), 0.0f, r);
}

// exp(x) for x already free of NaN and clamped to [-104, 88.8].
COIL_INLINE float exp_core(float x) {
  const float n = __builtin_rintf(x * 1.44269504088896341f);
  const int32_t ni = int32_t(n);
  float r = COIL_FMAF(n, -0.693359375f, x);
  r = COIL_FMAF(n, 2.12194440e-4f, r);
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = COIL_FMAF(p, r, 1.3981999507e-3f);
  p = COIL_FMAF(p, r, 8.3334519073e-3f);
  p = COIL_FMAF(p, r, 4.1665795894e-2f);
  p = COIL_FMAF(p, r, 1.6666665459e-1f);
  p = COIL_FMAF(p, r, 5.0000001201e-1f);
  const float y = COIL_FMAF(p, z, r) + 1.0f;
  // Scale in two steps so results in the subnormal range round once.
  const int32_t n1 = ni >> 1;
  return y * pow2i(n1) * pow2i(ni - n1);
}

// log decomposition: x (> 0, finite, maybe subnormal) = 2^e * (1 + f), f in [sqrt(.5)-1,
// sqrt(2)-1); returns e and t with log(1 + f) = f + t (t is the polynomial tail).
struct LogParts {
  float e, f, t;
};
COIL_INLINE LogParts log_parts(float x) {
  const bool sub = x < 1.17549435e-38f;
  const float xs = self(sub, x * 8388608.0f, x);
  const uint32_t ix = f2u(xs);
  int32_t e = int32_t((ix >> 23) & 0xffu) - 126 - seli(sub, 23, 0);
  const float m = u2f((ix & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e = e - seli(small, 1, 0);
  const float f = self(small, m + m, m) - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = COIL_FMAF(p, f, -1.1514610310e-1f);
  p = COIL_FMAF(p, f, 1.1676998740e-1f);
  p = COIL_FMAF(p, f, -1.2420140846e-1f);
  p = COIL_FMAF(p, f, 1.4249322787e-1f);
  p = COIL_FMAF(p, f, -1.6668057665e-1f);
  p = COIL_FMAF(p, f, 2.0000714765e-1f);
  p = COIL_FMAF(p, f, -2.4999993993e-1f);
  p = COIL_FMAF(p, f, 3.3333331174e-1f);
  const float t = COIL_FMAF(p * f, z, -0.5f * z);
  return {float(e), f, t};
}
// Special values of log-like functions: NaN -> NaN, x < 0 -> NaN, 0 -> -inf, inf -> inf.
COIL_INLINE float log_special(float x, float r) {
  r = self(x == __builtin_inff(), x, r);
  r = self(x == 0.0f, -__builtin_inff(), r);
  r = self(x < 0.0f, __builtin_nanf(""), r);
  return self(isnan_(x), x, r);
}
}  // namespace detail

// ============================== float: vectorizable ===========================================

COIL_INLINE float exp(float x) {
  const float r = detail::exp_core(detail::clamp_(x, -104.0f, 88.8f));
  return detail::self(detail::isnan_(x), x, r);
}

COIL_INLINE float exp2(float x) {
  // 2^x = 2^n * e^(r*ln2), r = x - n; exact range reduction.
  const float xc = detail::clamp_(x, -151.0f, 129.0f);
  const float n = __builtin_rintf(xc);
  const int32_t ni = int32_t(n);
  const float r = (xc - n) * 0.693147180559945309f;  // |r| <= ln2/2
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = COIL_FMAF(p, r, 1.3981999507e-3f);
  p = COIL_FMAF(p, r, 8.3334519073e-3f);
  p = COIL_FMAF(p, r, 4.1665795894e-2f);
  p = COIL_FMAF(p, r, 1.6666665459e-1f);
  p = COIL_FMAF(p, r, 5.0000001201e-1f);
  const float y = COIL_FMAF(p, z, r) + 1.0f;
  const int32_t n1 = ni >> 1;
  const float res = y * detail::pow2i(n1) * detail::pow2i(ni - n1);
  return detail::self(detail::isnan_(x), x, res);
}

COIL_INLINE float log(float x) {
  const detail::LogParts p = detail::log_parts(x);
  float r = COIL_FMAF(p.e, -2.12194440e-4f, p.t);
  r = p.f + r;
  r = COIL_FMAF(p.e, 0.693359375f, r);
  return detail::log_special(x, r);
}

COIL_INLINE float log2(float x) {
  const detail::LogParts p = detail::log_parts(x);
  // log2(1+f) = (f + t) * log2(e), with log2(e) split in hi + lo.
  const float hi = 1.4426950216293335f, lo = 1.9259629911e-8f;
  const float s = p.f + p.t;
  const float r = COIL_FMAF(s, hi, COIL_FMAF(s, lo, ((p.f - s) + p.t) * hi)) + p.e;
  return detail::log_special(x, r);
}

COIL_INLINE float log10(float x) {
  const detail::LogParts p = detail::log_parts(x);
  const float l10e = 0.434294481903251828f;
  float r = COIL_FMAF(p.e, 7.90315898e-7f, (p.f + p.t) * l10e);  // e * log10(2) lo part
  r = COIL_FMAF(p.e, 0.301029205322265625f, r);                  // e * log10(2) hi part
  return detail::log_special(x, r);
}

COIL_INLINE float log1p(float x) {
  const float u = 1.0f + x;
  const float ue = detail::self(u == 0.0f, 1.0f, u);  // keep the correction finite at x == -1
  // log(u) is exact up to the rounding of u; correct by (x - (u - 1)) / u.
  float r = log(u) + (x - (u - 1.0f)) / ue;
  r = detail::self(x == __builtin_inff(), x, r);
  r = detail::self(x == 0.0f, x, r);  // keeps -0
  return detail::self(detail::isnan_(x), x, r);
}

COIL_INLINE float expm1(float x) {
  const float xc = detail::clamp_(x, -30.0f, 30.0f);
  // n = 0 on (-ln2, ln2) (polynomial up to |r| < 0.7), else round(x / ln2).
  float n = __builtin_rintf(xc * 1.44269504088896341f);
  n = detail::self(detail::fabs_(xc) < 0.693147180559945309f, 0.0f, n);
  float r = COIL_FMAF(n, -0.693359375f, xc);
  r = COIL_FMAF(n, 2.12194440e-4f, r);
  // expm1(r) = r + r^2 * P(r), Taylor to r^10 / 10!.
  float p = 2.75573192e-7f;
  p = COIL_FMAF(p, r, 2.75573192e-6f);
  p = COIL_FMAF(p, r, 2.48015873e-5f);
  p = COIL_FMAF(p, r, 1.98412698e-4f);
  p = COIL_FMAF(p, r, 1.38888889e-3f);
  p = COIL_FMAF(p, r, 8.33333333e-3f);
  p = COIL_FMAF(p, r, 4.16666667e-2f);
  p = COIL_FMAF(p, r, 1.66666667e-1f);
  p = COIL_FMAF(p, r, 0.5f);
  const float em1 = COIL_FMAF(p, r * r, r);
  const float t = detail::pow2i(int32_t(n));
  float res = COIL_FMAF(t, em1, t - 1.0f);
  res = detail::self(x > 30.0f, exp(x), res);
  res = detail::self(x == 0.0f, x, res);  // keeps -0
  return detail::self(detail::isnan_(x), x, res);
}

COIL_INLINE float tanh(float x) {
  const float a = detail::fabs_(x);
  // |x| < 0.625: odd polynomial (Cephes tanhf).
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = COIL_FMAF(p, z, 2.06390887954e-2f);
  p = COIL_FMAF(p, z, -5.37397155531e-2f);
  p = COIL_FMAF(p, z, 1.33314422036e-1f);
  p = COIL_FMAF(p, z, -3.33332819422e-1f);
  const float small = COIL_FMAF(p * z, x, x);
  // otherwise 1 - 2 / (exp(2|x|) + 1).
  const float e = exp(a + a);
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float r = detail::copysign_(detail::self(a < 0.625f, small, big), x);  // tanh(-0) = -0
  return detail::self(detail::isnan_(x), x, r);
}

COIL_INLINE float sigmoid(float x) {
  // e = exp(-|x|) never overflows; sigmoid = 1/(1+e) for x >= 0, e/(1+e) for x < 0.
  const float e = exp(-detail::fabs_(x));
  const float num = detail::self(x >= 0.0f, 1.0f, e);
  // num / (1 + e) with the rounding error of 1 + e compensated: 1 + e = s + lo exactly.
  const float s = 1.0f + e;
  const float lo = e - (s - 1.0f);
  const float q = num / s;
  const float r = COIL_FMAF(-q, lo / s, q);
  return detail::self(detail::isnan_(x), x, r);
}

COIL_INLINE float erf(float x) {
  const float a = detail::fabs_(x);
  // |x| < 1: x + x * Q(x^2).
  const float z = x * x;
  float q = 7.806903159e-05f;
  q = COIL_FMAF(q, z, -7.997853099e-04f);
  q = COIL_FMAF(q, z, 5.187162198e-03f);
  q = COIL_FMAF(q, z, -2.685334720e-02f);
  q = COIL_FMAF(q, z, 1.128357872e-01f);
  q = COIL_FMAF(q, z, -3.761262596e-01f);
  q = COIL_FMAF(q, z, 1.283791661e-01f);
  const float small = COIL_FMAF(x, q, x);
  // 1 <= |x| < 3.9375: 1 - exp(-x^2) * G(1/x - 0.6); beyond, erf rounds to 1.
  const float ac = detail::clamp_(a, 1.0f, 4.0f);
  const float t = 1.0f / ac - 0.6f;
  float g = -3.247211874e-02f;
  g = COIL_FMAF(g, t, 3.487951681e-02f);
  g = COIL_FMAF(g, t, -2.486058977e-03f);
  g = COIL_FMAF(g, t, -2.737176605e-02f);
  g = COIL_FMAF(g, t, 4.801407829e-02f);
  g = COIL_FMAF(g, t, -5.376323685e-02f);
  g = COIL_FMAF(g, t, 2.961679921e-02f);
  g = COIL_FMAF(g, t, 4.112586007e-02f);
  g = COIL_FMAF(g, t, -1.755821854e-01f);
  g = COIL_FMAF(g, t, 3.909840286e-01f);
  g = COIL_FMAF(g, t, 2.962874770e-01f);
  const float big = detail::self(a >= 3.9375f, 1.0f, 1.0f - detail::exp_core(-ac * ac) * g);
  const float r = detail::self(a < 1.0f, small, detail::copysign_(big, x));
  return detail::self(detail::isnan_(x), x, r);
}

// ============================== float: libm / simple ==========================================
// Not vectorized. Where glibc's float version is above ~1 ulp the double one is rounded to
// float (<= ~0.5 ulp).

COIL_INLINE float sqrt(float x) { return __builtin_sqrtf(x); }
COIL_INLINE float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
COIL_INLINE float reciprocal(float x) { return 1.0f / x; }
COIL_INLINE float sin(float x) { return __builtin_sinf(x); }
COIL_INLINE float cos(float x) { return __builtin_cosf(x); }
COIL_INLINE float tan(float x) { return float(__builtin_tan(double(x))); }
COIL_INLINE float asin(float x) { return float(__builtin_asin(double(x))); }
COIL_INLINE float acos(float x) { return float(__builtin_acos(double(x))); }
COIL_INLINE float atan(float x) { return float(__builtin_atan(double(x))); }
COIL_INLINE float sinh(float x) { return float(__builtin_sinh(double(x))); }
COIL_INLINE float cosh(float x) { return float(__builtin_cosh(double(x))); }
COIL_INLINE float asinh(float x) { return float(__builtin_asinh(double(x))); }
COIL_INLINE float acosh(float x) { return float(__builtin_acosh(double(x))); }
COIL_INLINE float atanh(float x) { return float(__builtin_atanh(double(x))); }
COIL_INLINE float erfc(float x) { return float(__builtin_erfc(double(x))); }
COIL_INLINE float lgamma(float x) { return float(__builtin_lgamma(double(x))); }
COIL_INLINE float floor(float x) { return __builtin_floorf(x); }
COIL_INLINE float ceil(float x) { return __builtin_ceilf(x); }
COIL_INLINE float trunc(float x) { return __builtin_truncf(x); }
COIL_INLINE float round(float x) { return __builtin_rintf(x); }  // half to even (torch.round)
COIL_INLINE float abs(float x) { return __builtin_fabsf(x); }
COIL_INLINE float sign(float x) {  // sign(nan) = 0 like torch
  return detail::self(0.0f < x, 1.0f, detail::self(x < 0.0f, -1.0f, 0.0f));
}  // sign(nan) = 0
COIL_INLINE float pow(float a, float b) { return __builtin_powf(a, b); }
COIL_INLINE float atan2(float a, float b) { return float(__builtin_atan2(a, b)); }
COIL_INLINE float hypot(float a, float b) { return __builtin_hypotf(a, b); }
COIL_INLINE float copysign(float a, float b) { return __builtin_copysignf(a, b); }
COIL_INLINE float fmod(float a, float b) { return __builtin_fmodf(a, b); }
COIL_INLINE bool isnan(float x) { return detail::isnan_(x); }
COIL_INLINE bool isinf(float x) { return (detail::f2u(x) & 0x7fffffffu) == 0x7f800000u; }

// ============================== double ========================================================

COIL_INLINE double exp(double x) { return __builtin_exp(x); }
COIL_INLINE double exp2(double x) { return __builtin_exp2(x); }
COIL_INLINE double expm1(double x) { return __builtin_expm1(x); }
COIL_INLINE double log(double x) { return __builtin_log(x); }
COIL_INLINE double log2(double x) { return __builtin_log2(x); }
COIL_INLINE double log10(double x) { return __builtin_log10(x); }
COIL_INLINE double log1p(double x) { return __builtin_log1p(x); }
COIL_INLINE double sqrt(double x) { return __builtin_sqrt(x); }
COIL_INLINE double rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }
COIL_INLINE double reciprocal(double x) { return 1.0 / x; }
COIL_INLINE double sin(double x) { return __builtin_sin(x); }
COIL_INLINE double cos(double x) { return __builtin_cos(x); }
COIL_INLINE double tan(double x) { return __builtin_tan(x); }
COIL_INLINE double asin(double x) { return __builtin_asin(x); }
COIL_INLINE double acos(double x) { return __builtin_acos(x); }
COIL_INLINE double atan(double x) { return __builtin_atan(x); }
COIL_INLINE double sinh(double x) { return __builtin_sinh(x); }
COIL_INLINE double cosh(double x) { return __builtin_cosh(x); }
COIL_INLINE double tanh(double x) { return __builtin_tanh(x); }
COIL_INLINE double asinh(double x) { return __builtin_asinh(x); }
COIL_INLINE double acosh(double x) { return __builtin_acosh(x); }
COIL_INLINE double atanh(double x) { return __builtin_atanh(x); }
COIL_INLINE double sigmoid(double x) {
  const double e = __builtin_exp(-__builtin_fabs(x));
  const double r = (x >= 0.0 ? 1.0 : e) / (1.0 + e);
  return x != x ? x : r;
}
COIL_INLINE double erf(double x) { return __builtin_erf(x); }
COIL_INLINE double erfc(double x) { return __builtin_erfc(x); }
COIL_INLINE double lgamma(double x) { return __builtin_lgamma(x); }
COIL_INLINE double floor(double x) { return __builtin_floor(x); }
COIL_INLINE double ceil(double x) { return __builtin_ceil(x); }
COIL_INLINE double trunc(double x) { return __builtin_trunc(x); }
COIL_INLINE double round(double x) { return __builtin_rint(x); }
COIL_INLINE double abs(double x) { return __builtin_fabs(x); }
COIL_INLINE double sign(double x) { return double((0.0 < x) - (x < 0.0)); }
COIL_INLINE double pow(double a, double b) { return __builtin_pow(a, b); }
COIL_INLINE double atan2(double a, double b) { return __builtin_atan2(a, b); }
COIL_INLINE double hypot(double a, double b) { return __builtin_hypot(a, b); }
COIL_INLINE double copysign(double a, double b) { return __builtin_copysign(a, b); }
COIL_INLINE double fmod(double a, double b) { return __builtin_fmod(a, b); }
COIL_INLINE bool isnan(double x) { return x != x; }
COIL_INLINE bool isinf(double x) { return __builtin_fabs(x) == __builtin_inf(); }

// erfinv: Giles' single-precision initial guess, then Newton steps in double on erf.
COIL_INLINE double erfinv(double x) {
  const float xf = float(x);
  float w = -__builtin_logf((1.0f - xf) * (1.0f + xf));
  float p;
  if (w < 5.0f) {
    w = w - 2.5f;
    p = 2.81022636e-08f;
    p = 3.43273939e-07f + p * w;
    p = -3.5233877e-06f + p * w;
    p = -4.39150654e-06f + p * w;
    p = 0.00021858087f + p * w;
    p = -0.00125372503f + p * w;
    p = -0.00417768164f + p * w;
    p = 0.246640727f + p * w;
    p = 1.50140941f + p * w;
  } else {
    w = __builtin_sqrtf(w) - 3.0f;
    p = -0.000200214257f;
    p = 0.000100950558f + p * w;
    p = 0.00134934322f + p * w;
    p = -0.00367342844f + p * w;
    p = 0.00573950773f + p * w;
    p = -0.0076224613f + p * w;
    p = 0.00943887047f + p * w;
    p = 1.00167406f + p * w;
    p = 2.83297682f + p * w;
  }
  double y = double(p) * x;
  if (!(__builtin_fabs(x) < 1.0)) {  // +-1 -> +-inf; |x| > 1 or NaN -> NaN
    return __builtin_fabs(x) == 1.0 ? __builtin_copysign(__builtin_inf(), x) : __builtin_nan("");
  }
  if (__builtin_isinf(y)) y = __builtin_copysign(6.0, x);  // |x| within 1 ulp of 1 in float
  for (int i = 0; i < 3; ++i) {
    const double err = __builtin_erf(y) - x;
    y -= err / (1.1283791670955126 * __builtin_exp(-y * y));
  }
  return y;
}
COIL_INLINE float erfinv(float x) { return float(erfinv(double(x))); }

// ============================== float/double: torch semantics =================================

// NaN-propagating maximum / minimum (torch.maximum / torch.minimum).
COIL_INLINE float maximum(float a, float b) {
  const float r = detail::self(a < b, b, a);
  return detail::self(detail::isnan_(a), a, detail::self(detail::isnan_(b), b, r));
}
COIL_INLINE float minimum(float a, float b) {
  const float r = detail::self(b < a, b, a);
  return detail::self(detail::isnan_(a), a, detail::self(detail::isnan_(b), b, r));
}
COIL_INLINE double maximum(double a, double b) {
  const double r = a < b ? b : a;
  return a != a ? a : (b != b ? b : r);
}
COIL_INLINE double minimum(double a, double b) {
  const double r = b < a ? b : a;
  return a != a ? a : (b != b ? b : r);
}

// remainder: Python/torch semantics, result has the divisor's sign.
COIL_INLINE float remainder(float a, float b) {
  const float mod = __builtin_fmodf(a, b);
  return detail::self(mod != 0.0f && ((b < 0.0f) != (mod < 0.0f)), mod + b, mod);
}
COIL_INLINE double remainder(double a, double b) {
  const double mod = __builtin_fmod(a, b);
  return (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) ? mod + b : mod;
}

// floordiv: torch.floor_divide for floating point (c10::div_floor_floating).
template <typename T>
COIL_INLINE T floordiv_fp_(T a, T b, T mod) {
  if (b == T(0)) return a / b;
  T div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  if (div != T(0)) {
    T fl = floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return fl;
  }
  return copysign(T(0), a / b);
}
COIL_INLINE float floordiv(float a, float b) {
  return floordiv_fp_<float>(a, b, __builtin_fmodf(a, b));
}
COIL_INLINE double floordiv(double a, double b) {
  return floordiv_fp_<double>(a, b, __builtin_fmod(a, b));
}
COIL_INLINE float truncdiv(float a, float b) { return __builtin_truncf(a / b); }
COIL_INLINE double truncdiv(double a, double b) { return __builtin_trunc(a / b); }

// ============================== integers ======================================================
// Division by zero returns 0 (torch raises; a kernel must not trap), MIN / -1 wraps.

#define COIL_INT_OPS(T)                                                                \
  COIL_INLINE T abs(T x) { return x < T(0) ? T(uint64_t(0) - uint64_t(x)) : x; }       \
  COIL_INLINE T sign(T x) { return T((T(0) < x) - (x < T(0))); }                       \
  COIL_INLINE T maximum(T a, T b) { return a < b ? b : a; }                            \
  COIL_INLINE T minimum(T a, T b) { return b < a ? b : a; }                            \
  COIL_INLINE bool isnan(T) { return false; }                                          \
  COIL_INLINE bool isinf(T) { return false; }                                          \
  COIL_INLINE T truncdiv(T a, T b) {                                                   \
    return b == T(0) ? T(0) : (b == T(-1) ? T(uint64_t(0) - uint64_t(a)) : T(a / b));  \
  }                                                                                    \
  COIL_INLINE T floordiv(T a, T b) {                                                   \
    if (b == T(0)) return T(0);                                                        \
    if (b == T(-1)) return T(uint64_t(0) - uint64_t(a));                               \
    const T q = T(a / b), r = T(a % b);                                                \
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(q - T(1)) : q;                \
  }                                                                                    \
  COIL_INLINE T remainder(T a, T b) {                                                  \
    if (b == T(0) || b == T(-1)) return T(0);                                          \
    const T r = T(a % b);                                                              \
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(r + b) : r;                   \
  }                                                                                    \
  COIL_INLINE T fmod(T a, T b) { return (b == T(0) || b == T(-1)) ? T(0) : T(a % b); } \
  COIL_INLINE T pow(T a, T b) {                                                        \
    if (b < T(0)) {                                                                    \
      if (a == T(1)) return T(1);                                                      \
      if (a == T(-1)) return (b & T(1)) ? T(-1) : T(1);                                \
      return T(0);                                                                     \
    }                                                                                  \
    T result = T(1);                                                                   \
    while (b) {                                                                        \
      if (b & T(1)) result = T(uint64_t(result) * uint64_t(a));                        \
      b = T(b >> 1);                                                                   \
      a = T(uint64_t(a) * uint64_t(a));                                                \
    }                                                                                  \
    return result;                                                                     \
  }                                                                                    \
  /* torch.bitwise_left_shift / right_shift: out-of-range shift -> 0 / sign fill */    \
  COIL_INLINE T shift_left(T a, T b) {                                                 \
    constexpr int kBits = int(sizeof(T) * 8);                                          \
    return (b < T(0) || b >= T(kBits)) ? T(0) : T(uint64_t(a) << b);                   \
  }                                                                                    \
  COIL_INLINE T shift_right(T a, T b) {                                                \
    constexpr int kBits = int(sizeof(T) * 8);                                          \
    return (b < T(0) || b >= T(kBits)) ? T(a >> (kBits - 1)) : T(a >> b);              \
  }

// Multiplications in pow wrap like torch's (promoted to int for the narrow types, then cast).
COIL_INT_OPS(int8_t)
COIL_INT_OPS(int16_t)
COIL_INT_OPS(int32_t)
COIL_INT_OPS(int64_t)
#undef COIL_INT_OPS

#define COIL_UINT_OPS(T)                                                    \
  COIL_INLINE T abs(T x) { return x; }                                      \
  COIL_INLINE T sign(T x) { return T(x != T(0)); }                          \
  COIL_INLINE T maximum(T a, T b) { return a < b ? b : a; }                 \
  COIL_INLINE T minimum(T a, T b) { return b < a ? b : a; }                 \
  COIL_INLINE bool isnan(T) { return false; }                               \
  COIL_INLINE bool isinf(T) { return false; }                               \
  COIL_INLINE T truncdiv(T a, T b) { return b == T(0) ? T(0) : T(a / b); }  \
  COIL_INLINE T floordiv(T a, T b) { return b == T(0) ? T(0) : T(a / b); }  \
  COIL_INLINE T remainder(T a, T b) { return b == T(0) ? T(0) : T(a % b); } \
  COIL_INLINE T fmod(T a, T b) { return b == T(0) ? T(0) : T(a % b); }      \
  COIL_INLINE T pow(T a, T b) {                                             \
    T result = T(1);                                                        \
    while (b) {                                                             \
      if (b & T(1)) result = T(uint64_t(result) * uint64_t(a));             \
      b = T(b >> 1);                                                        \
      a = T(uint64_t(a) * uint64_t(a));                                     \
    }                                                                       \
    return result;                                                          \
  }                                                                         \
  COIL_INLINE T shift_left(T a, T b) {                                      \
    return b >= T(sizeof(T) * 8) ? T(0) : T(uint64_t(a) << b);              \
  }                                                                         \
  COIL_INLINE T shift_right(T a, T b) { return b >= T(sizeof(T) * 8) ? T(0) : T(a >> b); }

COIL_UINT_OPS(uint8_t)
COIL_UINT_OPS(uint16_t)
COIL_UINT_OPS(uint32_t)
COIL_UINT_OPS(uint64_t)
#undef COIL_UINT_OPS

}  // namespace coil::m

namespace coil::m::detail {  // the double math of digamma.h
COIL_INLINE double log_d(double x) { return __builtin_log(x); }
COIL_INLINE double tan_d(double x) { return __builtin_tan(x); }
COIL_INLINE double trunc_d(double x) { return __builtin_trunc(x); }
COIL_INLINE double copysign_d(double a, double b) { return __builtin_copysign(a, b); }
COIL_INLINE double inf_d() { return __builtin_inf(); }
COIL_INLINE double nan_d() { return __builtin_nan(""); }
}  // namespace coil::m::detail

#include "digamma.h"
