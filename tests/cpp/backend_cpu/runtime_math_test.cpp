// Accuracy of runtime_headers/coil (the headers generated kernels include), compiled here
// with the test's flags (no FMA, scalar); host_compiler_test.cpp repeats the check for the
// vectorized -march=native build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

// Relative to this file: the test target has no include path for runtime_headers/.
#include "../../../runtime_headers/coil/kernel_prelude.h"
#include "ulp_check.h"

namespace {

using coil_test::bits_float;
using coil_test::float_bits;

struct Unary {
  const char* name;
  float (*f)(float);
  double (*ref)(double);
  double max_ulp;
};

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_rsqrt(double x) { return 1.0 / std::sqrt(x); }
double ref_recip(double x) { return 1.0 / x; }
double ref_exp2(double x) { return std::exp2(x); }

const Unary kUnary[] = {
    {"exp", [](float x) { return coil::m::exp(x); }, [](double x) { return std::exp(x); }, 1.0},
    {"exp2", [](float x) { return coil::m::exp2(x); }, ref_exp2, 1.5},
    {"expm1", [](float x) { return coil::m::expm1(x); }, [](double x) { return std::expm1(x); },
     2.0},
    {"log", [](float x) { return coil::m::log(x); }, [](double x) { return std::log(x); }, 1.0},
    {"log2", [](float x) { return coil::m::log2(x); }, [](double x) { return std::log2(x); }, 1.5},
    {"log10", [](float x) { return coil::m::log10(x); }, [](double x) { return std::log10(x); },
     2.0},
    {"log1p", [](float x) { return coil::m::log1p(x); }, [](double x) { return std::log1p(x); },
     2.0},
    {"tanh", [](float x) { return coil::m::tanh(x); }, [](double x) { return std::tanh(x); }, 2.0},
    {"sigmoid", [](float x) { return coil::m::sigmoid(x); }, ref_sigmoid, 2.0},
    {"erf", [](float x) { return coil::m::erf(x); }, [](double x) { return std::erf(x); }, 2.0},
    {"erfc", [](float x) { return coil::m::erfc(x); }, [](double x) { return std::erfc(x); }, 2.0},
    {"sqrt", [](float x) { return coil::m::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.5},
    {"rsqrt", [](float x) { return coil::m::rsqrt(x); }, ref_rsqrt, 1.5},  // 1/sqrt(x), like torch
    {"reciprocal", [](float x) { return coil::m::reciprocal(x); }, ref_recip, 0.5},
    {"sin", [](float x) { return coil::m::sin(x); }, [](double x) { return std::sin(x); }, 1.0},
    {"cos", [](float x) { return coil::m::cos(x); }, [](double x) { return std::cos(x); }, 1.0},
    {"tan", [](float x) { return coil::m::tan(x); }, [](double x) { return std::tan(x); }, 1.0},
    {"asin", [](float x) { return coil::m::asin(x); }, [](double x) { return std::asin(x); }, 1.0},
    {"acos", [](float x) { return coil::m::acos(x); }, [](double x) { return std::acos(x); }, 1.0},
    {"atan", [](float x) { return coil::m::atan(x); }, [](double x) { return std::atan(x); }, 1.0},
    {"sinh", [](float x) { return coil::m::sinh(x); }, [](double x) { return std::sinh(x); }, 2.0},
    {"cosh", [](float x) { return coil::m::cosh(x); }, [](double x) { return std::cosh(x); }, 2.0},
    {"asinh", [](float x) { return coil::m::asinh(x); }, [](double x) { return std::asinh(x); },
     2.0},
    {"acosh", [](float x) { return coil::m::acosh(x); }, [](double x) { return std::acosh(x); },
     2.0},
    {"atanh", [](float x) { return coil::m::atanh(x); }, [](double x) { return std::atanh(x); },
     2.0},
    {"floor", [](float x) { return coil::m::floor(x); }, [](double x) { return std::floor(x); }, 0},
    {"ceil", [](float x) { return coil::m::ceil(x); }, [](double x) { return std::ceil(x); }, 0},
    {"trunc", [](float x) { return coil::m::trunc(x); }, [](double x) { return std::trunc(x); }, 0},
    {"round", [](float x) { return coil::m::round(x); }, [](double x) { return std::nearbyint(x); },
     0},
    {"abs", [](float x) { return coil::m::abs(x); }, [](double x) { return std::fabs(x); }, 0},
};

TEST(RuntimeMath, UnaryFloatUlp) {
  const std::vector<float> xs = coil_test::test_inputs();
  for (const Unary& u : kUnary) {
    coil_test::UlpReport rep;
    for (float x : xs) coil_test::record(rep, x, u.f(x), u.ref(static_cast<double>(x)));
    std::printf("  %-10s %s\n", u.name, rep.describe().c_str());
    EXPECT_LE(rep.max_ulp, u.max_ulp) << u.name << ": " << rep.describe();
  }
}

TEST(RuntimeMath, SignedZeroAndSpecials) {
  const float inf = INFINITY, nan = NAN;
  EXPECT_TRUE(std::signbit(coil::m::expm1(-0.0f)));
  EXPECT_TRUE(std::signbit(coil::m::log1p(-0.0f)));
  EXPECT_TRUE(std::signbit(coil::m::tanh(-0.0f)));
  EXPECT_TRUE(std::signbit(coil::m::erf(-0.0f)));
  EXPECT_EQ(coil::m::exp(-inf), 0.0f);
  EXPECT_EQ(coil::m::exp(inf), inf);
  EXPECT_EQ(coil::m::log(0.0f), -inf);
  EXPECT_EQ(coil::m::log(-0.0f), -inf);
  EXPECT_TRUE(std::isnan(coil::m::log(-1.0f)));
  EXPECT_EQ(coil::m::log1p(-1.0f), -inf);
  EXPECT_TRUE(std::isnan(coil::m::log1p(-2.0f)));
  EXPECT_EQ(coil::m::log2(8.0f), 3.0f);
  EXPECT_EQ(coil::m::log2(1.0f / 1024), -10.0f);
  EXPECT_EQ(coil::m::log10(1000.0f), 3.0f);
  EXPECT_EQ(coil::m::expm1(-inf), -1.0f);
  EXPECT_EQ(coil::m::tanh(inf), 1.0f);
  EXPECT_EQ(coil::m::tanh(-inf), -1.0f);
  EXPECT_EQ(coil::m::sigmoid(inf), 1.0f);
  EXPECT_EQ(coil::m::sigmoid(-inf), 0.0f);
  EXPECT_EQ(coil::m::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(coil::m::erf(inf), 1.0f);
  EXPECT_EQ(coil::m::erf(-inf), -1.0f);
  using F = float (*)(float);
  for (F f :
       {F(coil::m::exp), F(coil::m::log), F(coil::m::tanh), F(coil::m::sigmoid), F(coil::m::erf),
        F(coil::m::expm1), F(coil::m::log1p), F(coil::m::exp2), F(coil::m::log2)}) {
    EXPECT_TRUE(std::isnan(f(nan)));
  }
  EXPECT_TRUE(coil::m::isnan(nan));
  EXPECT_FALSE(coil::m::isnan(inf));
  EXPECT_TRUE(coil::m::isinf(-inf));
  EXPECT_FALSE(coil::m::isinf(3.0f));
  EXPECT_EQ(coil::m::rsqrt(4.0f), 0.5f);
  EXPECT_EQ(coil::m::rsqrt(0.0f), inf);
}

TEST(RuntimeMath, DoubleOverloadsMatchLibm) {
  for (double x : {-3.5, -0.7, 0.0, 0.3, 1.0, 2.5, 10.0}) {
    EXPECT_EQ(coil::m::exp(x), std::exp(x));
    EXPECT_EQ(coil::m::tanh(x), std::tanh(x));
    EXPECT_EQ(coil::m::erf(x), std::erf(x));
    EXPECT_EQ(coil::m::round(x), std::nearbyint(x));
    EXPECT_NEAR(coil::m::sigmoid(x), 1.0 / (1.0 + std::exp(-x)), 1e-16);
  }
  EXPECT_EQ(coil::to_f32(2.5), 2.5);  // identity for double
}

TEST(RuntimeMath, RoundHalfToEven) {
  const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.49999976f, 8388609.0f};
  const float out[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, 3.0f, 8388609.0f};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(coil::m::round(in[i]), out[i]);
    EXPECT_EQ(std::signbit(coil::m::round(in[i])), std::signbit(out[i]));
  }
}

TEST(RuntimeMath, Erfinv) {
  coil_test::UlpReport rep;
  for (int i = -100000; i <= 100000; ++i) {
    const float x = static_cast<float>(i) / 100000.0f * 0.9999999f;
    // Reference: bisection on the double erf.
    double lo = -10, hi = 10;
    for (int k = 0; k < 200; ++k) {
      const double mid = 0.5 * (lo + hi);
      (std::erf(mid) < x ? lo : hi) = mid;
    }
    coil_test::record(rep, x, coil::m::erfinv(x), 0.5 * (lo + hi));
  }
  for (float x : {0.99999994f, -0.99999994f, 1e-30f, 0.9999f}) {
    const double y = coil::m::erfinv(static_cast<double>(x));
    EXPECT_NEAR(std::erf(y), x, 1e-15) << x;
  }
  std::printf("  erfinv     %s\n", rep.describe().c_str());
  EXPECT_LE(rep.max_ulp, 1.0) << rep.describe();
  EXPECT_EQ(coil::m::erfinv(1.0f), INFINITY);
  EXPECT_EQ(coil::m::erfinv(-1.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(coil::m::erfinv(1.5f)));
  EXPECT_TRUE(std::isnan(coil::m::erfinv(NAN)));
  EXPECT_EQ(coil::m::erfinv(0.0f), 0.0f);
}

TEST(RuntimeMath, Lgamma) {
  // lgamma loses relative accuracy near its zeros (x = 1, 2, negative roots): absolute + ulp.
  for (float x : coil_test::test_inputs(30.0f, 50000)) {
    const double ref = std::lgamma(static_cast<double>(x));
    const float got = coil::m::lgamma(x);
    if (std::isnan(ref) || std::isinf(ref)) {
      EXPECT_EQ(std::isnan(got), std::isnan(ref)) << x;
      continue;
    }
    if (std::fabs(ref) > 1e38) continue;
    EXPECT_LE(std::fabs(got - ref), 4 * std::fabs(ref) * 6e-8 + 1e-6) << x;
  }
}

struct Binary {
  const char* name;
  float (*f)(float, float);
  double (*ref)(double, double);
  double max_ulp;
};

TEST(RuntimeMath, BinaryFloatUlp) {
  const Binary ops[] = {
      {"pow", [](float a, float b) { return coil::m::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 1.0},
      {"atan2", [](float a, float b) { return coil::m::atan2(a, b); },
       [](double a, double b) { return std::atan2(a, b); }, 2.0},
      {"hypot", [](float a, float b) { return coil::m::hypot(a, b); },
       [](double a, double b) { return std::hypot(a, b); }, 1.0},
      {"copysign", [](float a, float b) { return coil::m::copysign(a, b); },
       [](double a, double b) { return std::copysign(a, b); }, 0},
      {"fmod", [](float a, float b) { return coil::m::fmod(a, b); },
       [](double a, double b) { return std::fmod(a, b); }, 0},
      {"remainder", [](float a, float b) { return coil::m::remainder(a, b); },
       [](double a, double b) {  // Python: a - floor(a / b) * b, exactly
         double m = std::fmod(a, b);
         return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
       },
       0.5},
      {"maximum", [](float a, float b) { return coil::m::maximum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b); },
       0},
      {"minimum", [](float a, float b) { return coil::m::minimum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::fmin(a, b); },
       0},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-20, 20);
  std::vector<std::pair<float, float>> pairs;
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 0.5f, INFINITY, -INFINITY, NAN, 3.0f};
  for (float a : specials)
    for (float b : specials) pairs.push_back({a, b});
  for (int i = 0; i < 100000; ++i) pairs.push_back({d(rng), d(rng)});
  for (int i = 0; i < 100000; ++i) pairs.push_back({std::fabs(d(rng)), d(rng) * 3});
  for (const Binary& op : ops) {
    coil_test::UlpReport rep;
    for (auto [a, b] : pairs) coil_test::record(rep, a, op.f(a, b), op.ref(a, b));
    std::printf("  %-10s %s\n", op.name, rep.describe().c_str());
    EXPECT_LE(rep.max_ulp, op.max_ulp) << op.name << ": " << rep.describe();
  }
}

TEST(RuntimeMath, TorchSemanticsFloat) {
  // Values from torch 2.x on CPU.
  const float a[] = {-3.0f, 3.0f, 1.0f, -1.0f, 0.0f};
  const float b[] = {2.0f, -2.0f, 0.0f, 0.0f, -1.0f};
  const float fd[] = {-2.0f, -2.0f, INFINITY, -INFINITY, -0.0f};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(coil::m::floordiv(a[i], b[i]), fd[i]) << i;
    EXPECT_EQ(std::signbit(coil::m::floordiv(a[i], b[i])), std::signbit(fd[i])) << i;
  }
  EXPECT_EQ(coil::m::remainder(-3.0f, 2.0f), 1.0f);
  EXPECT_EQ(coil::m::remainder(3.0f, -2.0f), -1.0f);
  EXPECT_TRUE(std::signbit(coil::m::remainder(-0.0f, 2.0f)));
  EXPECT_EQ(coil::m::truncdiv(-7.0f, 2.0f), -3.0f);
  EXPECT_EQ(coil::m::sign(NAN), 0.0f);  // torch.sign(nan) == 0
  EXPECT_EQ(coil::m::sign(-0.0f), 0.0f);
  EXPECT_EQ(coil::m::sign(-2.0f), -1.0f);
  EXPECT_EQ(coil::m::sign(3.5f), 1.0f);
  EXPECT_TRUE(std::isnan(coil::m::maximum(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(coil::m::minimum(1.0f, NAN)));
  EXPECT_TRUE(std::signbit(coil::m::maximum(-0.0f, 0.0f)));  // torch returns the first
  // floordiv on many values: the torch definition (c10::div_floor_floating) agrees with floor(a/b)
  // except where a/b rounds across an integer; check it against exact double arithmetic.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-100, 100);
  for (int i = 0; i < 100000; ++i) {
    const float x = d(rng), y = d(rng);
    const double exact = std::floor(static_cast<double>(x) / y);
    EXPECT_NEAR(coil::m::floordiv(x, y), exact, 0.0) << x << " " << y;
  }
}

TEST(RuntimeMath, IntegerOps) {
  for (int64_t a = -40; a <= 40; ++a) {
    for (int64_t b = -9; b <= 9; ++b) {
      if (b == 0) {
        EXPECT_EQ(coil::m::floordiv(a, b), 0);  // defined (torch raises)
        continue;
      }
      const int64_t fl = static_cast<int64_t>(std::floor(static_cast<double>(a) / b));
      EXPECT_EQ(coil::m::floordiv(a, b), fl) << a << "//" << b;
      EXPECT_EQ(coil::m::remainder(a, b), a - fl * b) << a << "%" << b;
      EXPECT_EQ(coil::m::truncdiv(a, b), a / b);
      EXPECT_EQ(coil::m::floordiv(int32_t(a), int32_t(b)), int32_t(fl));
      EXPECT_EQ(coil::m::remainder(int8_t(a), int8_t(b)), int8_t(a - fl * b));
    }
  }
  EXPECT_EQ(coil::m::floordiv(int32_t(-7), int32_t(2)), -4);
  EXPECT_EQ(coil::m::remainder(int64_t(7), int64_t(-2)), -1);
  EXPECT_EQ(coil::m::floordiv(INT64_MIN, int64_t(-1)), INT64_MIN);  // wraps, no trap
  EXPECT_EQ(coil::m::abs(int32_t(-5)), 5);
  EXPECT_EQ(coil::m::abs(INT32_MIN), INT32_MIN);
  EXPECT_EQ(coil::m::sign(int64_t(-9)), -1);
  EXPECT_EQ(coil::m::sign(uint8_t(9)), 1);
  EXPECT_EQ(coil::m::maximum(int32_t(3), int32_t(-4)), 3);
  EXPECT_EQ(coil::m::minimum(int16_t(3), int16_t(-4)), -4);
  // torch.pow on ints: [2,-1,1,3,0] ** [-1,-3,-2,2,-1] == [0,-1,1,9,0].
  EXPECT_EQ(coil::m::pow(int64_t(2), int64_t(-1)), 0);
  EXPECT_EQ(coil::m::pow(int64_t(-1), int64_t(-3)), -1);
  EXPECT_EQ(coil::m::pow(int64_t(1), int64_t(-2)), 1);
  EXPECT_EQ(coil::m::pow(int64_t(3), int64_t(2)), 9);
  EXPECT_EQ(coil::m::pow(int64_t(0), int64_t(-1)), 0);
  for (int64_t base = -5; base <= 5; ++base) {
    int64_t r = 1;
    for (int64_t e = 0; e < 20; ++e, r *= base) EXPECT_EQ(coil::m::pow(base, e), r);
  }
  EXPECT_EQ(coil::m::pow(uint8_t(3), uint8_t(5)), uint8_t(243));
  EXPECT_EQ(coil::m::pow(int32_t(3), int32_t(21)), int32_t(uint32_t(10460353203ull)));  // wraps
  // torch.bitwise_{left,right}_shift on int32: [-8, 8] by [40, -1] -> >> [-1, 0], << [0, 0].
  EXPECT_EQ(coil::m::shift_right(int32_t(-8), int32_t(40)), -1);
  EXPECT_EQ(coil::m::shift_right(int32_t(8), int32_t(-1)), 0);
  EXPECT_EQ(coil::m::shift_left(int32_t(-8), int32_t(40)), 0);
  EXPECT_EQ(coil::m::shift_left(int32_t(8), int32_t(-1)), 0);
  EXPECT_EQ(coil::m::shift_left(int32_t(3), int32_t(4)), 48);
  EXPECT_EQ(coil::m::shift_right(int64_t(-64), int64_t(3)), -8);
  EXPECT_EQ(coil::m::shift_left(uint8_t(200), uint8_t(1)), uint8_t(144));
}

// ---- bf16 / half -------------------------------------------------------------------------------

double half_reference_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(man, -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

TEST(RuntimeConvert, HalfToFloatExhaustiveAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = coil::to_f32(coil::half{uint16_t(h)});
    const double ref = half_reference_value(uint16_t(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << h;
      const uint16_t back = coil::to_half(f).bits;
      ASSERT_EQ(back & 0x7c00, 0x7c00) << h;  // still NaN
      ASSERT_NE(back & 0x3ff, 0) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << h;
    ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << h;
    ASSERT_EQ(coil::to_half(f).bits, h) << h;  // bit-exact round trip
    // The compiler's _Float16 agrees.
    _Float16 ch;
    std::memcpy(&ch, &h, 2);
    ASSERT_EQ(static_cast<float>(ch), f) << h;
  }
}

TEST(RuntimeConvert, FloatToHalfMatchesFloat16Rounding) {
  auto check = [](float f) {
    const _Float16 ref = static_cast<_Float16>(f);  // IEEE RNE (soft-float conversion)
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    const uint16_t got = coil::to_half(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE((got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0) << f;
      ASSERT_EQ(got >> 15, float_bits(f) >> 31);
      return;
    }
    ASSERT_EQ(got, rb) << "f=" << f << " bits=" << std::hex << float_bits(f);
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) check(bits_float(uint32_t(u)));
  // Every tie and every neighbour of a tie between consecutive halves.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = half_reference_value(uint16_t(h));
    const double hi = h == 0x7bff ? 65536.0 : half_reference_value(uint16_t(h + 1));
    const float mid = static_cast<float>(0.5 * (lo + hi));  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      check(f);
      check(-f);
    }
  }
  check(65519.99f);
  check(65520.0f);
  check(1e-8f);
  check(2.98023224e-8f);  // half of the smallest subnormal: ties to 0
  check(2.98023259e-8f);
}

// Reference float -> bf16: pick the nearer of the two neighbouring bf16 values in exact double
// arithmetic, ties to even.
uint16_t bf16_reference(float f) {
  const uint32_t u = float_bits(f);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  const uint16_t down = uint16_t(u >> 16);  // truncation (towards zero)
  const uint16_t up = uint16_t(down + 1);   // away from zero (may become inf)
  const double vd = bits_float(uint32_t(down) << 16);
  // Rounding treats the value after the largest finite one as 2^128 (then overflows to inf).
  const double vu = (up & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), f)
                                            : double(bits_float(uint32_t(up) << 16));
  const double dd = std::fabs(static_cast<double>(f) - vd), du = std::fabs(vu - f);
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1) ? up : down;
}

TEST(RuntimeConvert, FloatToBf16) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 127) {
    const float f = bits_float(uint32_t(u));
    const uint16_t got = coil::to_bf16(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE((got & 0x7f80) == 0x7f80 && (got & 0x7f) != 0) << u;
      continue;
    }
    ASSERT_EQ(got, bf16_reference(f)) << std::hex << u;
  }
  // All ties (low 16 bits exactly 0x8000) and their neighbours, for every upper half.
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0u, 0xffffu}) {
      const float f = bits_float((hi << 16) | lo);
      if (std::isnan(f)) continue;
      ASSERT_EQ(coil::to_bf16(f).bits, bf16_reference(f)) << std::hex << ((hi << 16) | lo);
    }
  }
  // Every bf16 value converts to float exactly and back.
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = coil::to_f32(coil::bf16{uint16_t(b)});
    ASSERT_EQ(float_bits(f), b << 16);
    if (!std::isnan(f)) ASSERT_EQ(coil::to_bf16(f).bits, b);
  }
  EXPECT_EQ(coil::to_bf16(3.4e38f).bits, 0x7f80);      // rounds up to inf
  EXPECT_EQ(coil::to_bf16(1.00390625f).bits, 0x3f80);  // tie -> even (1.0)
  EXPECT_EQ(coil::to_bf16(1.01171875f).bits, 0x3f82);  // tie -> even (up)
}

TEST(RuntimeConvert, NumericLimits) {
  EXPECT_EQ(coil::numeric<float>::lowest(), -INFINITY);
  EXPECT_EQ(coil::numeric<int32_t>::lowest(), INT32_MIN);
  EXPECT_EQ(coil::numeric<int64_t>::max(), INT64_MAX);
  EXPECT_EQ(coil::numeric<uint8_t>::max(), 255);
  EXPECT_TRUE(std::isnan(coil::numeric<double>::nan()));
}

// ---- Philox -----------------------------------------------------------------------------------

TEST(RuntimeRandom, PhiloxKnownAnswers) {
  // Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds).
  struct Kat {
    coil::U32x4 ctr;
    uint32_t k0, k1;
    coil::U32x4 out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const coil::U32x4 r = coil::philox4x32_10(k.ctr, k.k0, k.k1);
    EXPECT_EQ(r.v0, k.out.v0);
    EXPECT_EQ(r.v1, k.out.v1);
    EXPECT_EQ(r.v2, k.out.v2);
    EXPECT_EQ(r.v3, k.out.v3);
  }
}

TEST(RuntimeRandom, UniformStatistics) {
  const int n = 1 << 20;
  const int bins = 64;
  std::vector<int> hist(bins);
  double sum = 0, sum2 = 0, lag = 0;
  float prev = 0.5f;
  for (int i = 0; i < n; ++i) {
    const float u = coil::rand_uniform(42, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum2 += double(u) * u;
    lag += (u - 0.5) * (prev - 0.5);
    prev = u;
    hist[int(u * bins)]++;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 1e-3);
  EXPECT_NEAR(lag / n, 0.0, 5 * (1.0 / 12) / std::sqrt(n));  // no lag-1 correlation
  double chi2 = 0;
  const double expect = double(n) / bins;
  for (int c : hist) chi2 += (c - expect) * (c - expect) / expect;
  EXPECT_LT(chi2, 120.0);  // 63 dof: p ~ 1e-5
  // Seeds and offsets give different streams; same (seed, offset) is deterministic.
  EXPECT_NE(coil::rand_uniform(1, 0), coil::rand_uniform(2, 0));
  EXPECT_NE(coil::rand_uniform(1, 0), coil::rand_uniform(1, 1ull << 32));
  EXPECT_EQ(coil::rand_uniform(7, 99), coil::rand_uniform(7, 99));
}

// Uniform draws take the four words of one Philox block in turn (element i: word i % 4 of the
// block at i / 4), so a thread holding the block of its first element's quad gets the same
// numbers as drawing each element alone, aligned or not (rand_uniform_in draws where the
// element lies in another quad); the four words of a block are four different numbers, and
// the uniform stream is not the normal draws' blocks.
TEST(RuntimeRandom, UniformDrawsShareABlockPerQuad) {
  for (uint64_t base : {uint64_t(0), uint64_t(4), uint64_t(6), uint64_t(1) << 32}) {
    const coil::U32x4 block = coil::philox_quad(11, base >> 2);
    for (uint64_t u = 0; u < 4; ++u)
      EXPECT_EQ(coil::rand_uniform_in(block, base, 11, base + u), coil::rand_uniform(11, base + u))
          << base << " + " << u;
  }
  const float w[4] = {coil::rand_uniform(3, 8), coil::rand_uniform(3, 9), coil::rand_uniform(3, 10),
                      coil::rand_uniform(3, 11)};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(w[i], w[j]);
  EXPECT_NE(coil::philox_quad(3, 2).v0, coil::philox_draw(3, 2).v0);
}

TEST(RuntimeRandom, NormalStatistics) {
  const int n = 1 << 21;
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  int beyond2 = 0, beyond3 = 0;
  double maxabs = 0;
  for (int i = 0; i < n; ++i) {
    const double z = coil::rand_normal(1234, uint64_t(i));
    ASSERT_TRUE(std::isfinite(z));
    s1 += z;
    s2 += z * z;
    s3 += z * z * z;
    s4 += z * z * z * z;
    beyond2 += std::fabs(z) > 2;
    beyond3 += std::fabs(z) > 3;
    maxabs = std::max(maxabs, std::fabs(z));
  }
  EXPECT_NEAR(s1 / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(s2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(s3 / n, 0.0, 5 * std::sqrt(15.0 / n));
  EXPECT_NEAR(s4 / n, 3.0, 5 * std::sqrt(96.0 / n));
  EXPECT_NEAR(double(beyond2) / n, 0.0455003, 5 * std::sqrt(0.0455 / n));
  EXPECT_NEAR(double(beyond3) / n, 0.0026998, 5 * std::sqrt(0.0027 / n));
  EXPECT_GT(maxabs, 4.5);
}

TEST(RuntimeRandom, Randint) {
  std::vector<int> hist(10);
  for (int i = 0; i < 100000; ++i) {
    const int64_t v = coil::randint64(5, uint64_t(i), -3, 7);
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 7);
    hist[v + 3]++;
  }
  for (int c : hist) EXPECT_NEAR(c, 10000, 500);
}

}  // namespace
