// Scalar semantics of the reference interpreter: element storage, dtype rounding and
// conversion, and the math of each InstrKind, following PyTorch's CPU results. Private to
// src/loop (interpreter.cpp); kept apart so the interpreter file holds only the traversal.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>

#include "coil/loop/body.h"
#include "coil/support/error.h"

namespace coil::loop::detail {

// ---- f16 / bf16 conversions (round to nearest even)

inline uint16_t float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// ---- scalars

// A value of one instruction: floats in f, integers and bools in i.
struct Val {
  double f = 0;
  int64_t i = 0;
};

inline bool is_fp(DType t) { return dtype_is_floating(t); }

inline double round_to(DType t, double v) {
  switch (t) {
    case DType::Float32:
      return static_cast<double>(static_cast<float>(v));
    case DType::Float16:
      return half_to_float(float_to_half(static_cast<float>(v)));
    case DType::BFloat16:
      return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    default:
      return v;
  }
}

inline int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::Bool:
      return v != 0;
    case DType::UInt8:
      return static_cast<uint8_t>(v);
    case DType::Int8:
      return static_cast<int8_t>(v);
    case DType::Int16:
      return static_cast<int16_t>(v);
    case DType::Int32:
      return static_cast<int32_t>(v);
    default:
      return v;
  }
}

inline int64_t float_to_int(double v) {
  if (std::isnan(v)) return std::numeric_limits<int64_t>::min();
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);  // truncation toward zero, as a C++ cast
}

// Converts a value of type `from` to type `to`.
inline Val convert(Val v, DType from, DType to) {
  Val r;
  if (is_fp(to)) {
    r.f = round_to(to, is_fp(from) ? v.f : static_cast<double>(v.i));
  } else if (to == DType::Bool) {
    r.i = is_fp(from) ? (v.f != 0) : (v.i != 0);
  } else {
    r.i = wrap_int(to, is_fp(from) ? float_to_int(v.f) : v.i);
  }
  return r;
}

inline double as_double(Val v, DType t) { return is_fp(t) ? v.f : static_cast<double>(v.i); }
inline bool truthy(Val v, DType t) { return is_fp(t) ? v.f != 0 : v.i != 0; }

inline Val read_elem(DType t, const unsigned char* p) {
  Val v;
  switch (t) {
    case DType::Bool:
      v.i = *p != 0;
      break;
    case DType::UInt8:
      v.i = *p;
      break;
    case DType::Int8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      v.i = x;
      break;
    }
    case DType::Int16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      v.i = x;
      break;
    }
    case DType::Int32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      v.i = x;
      break;
    }
    case DType::Int64:
      std::memcpy(&v.i, p, 8);
      break;
    case DType::Float16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.f = half_to_float(x);
      break;
    }
    case DType::BFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.f = bf16_to_float(x);
      break;
    }
    case DType::Float32: {
      float x;
      std::memcpy(&x, p, 4);
      v.f = x;
      break;
    }
    case DType::Float64:
      std::memcpy(&v.f, p, 8);
      break;
  }
  return v;
}

// `v` already of type t.
inline void write_elem(DType t, unsigned char* p, Val v) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
      *p = static_cast<unsigned char>(v.i);
      break;
    case DType::Int8: {
      int8_t x = static_cast<int8_t>(v.i);
      std::memcpy(p, &x, 1);
      break;
    }
    case DType::Int16: {
      int16_t x = static_cast<int16_t>(v.i);
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::Int32: {
      int32_t x = static_cast<int32_t>(v.i);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::Int64:
      std::memcpy(p, &v.i, 8);
      break;
    case DType::Float16: {
      uint16_t x = float_to_half(static_cast<float>(v.f));
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::BFloat16: {
      uint16_t x = float_to_bf16(static_cast<float>(v.f));
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::Float32: {
      float x = static_cast<float>(v.f);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::Float64:
      std::memcpy(p, &v.f, 8);
      break;
  }
}

inline int64_t floordiv_i(int64_t a, int64_t b) {
  COIL_USER_CHECK(b != 0) << "integer division by zero";
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t mod_i(int64_t a, int64_t b) {
  COIL_USER_CHECK(b != 0) << "integer modulo by zero";
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
inline double mod_f(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
inline int64_t pow_i(int64_t a, int64_t b) {
  if (b < 0) {
    COIL_USER_CHECK(a != 0) << "integer pow: zero to a negative power";
    if (a == 1) return 1;
    if (a == -1) return (b % 2 == 0) ? 1 : -1;
    return 0;
  }
  int64_t r = 1;
  while (b) {
    if (b & 1) r = static_cast<int64_t>(static_cast<uint64_t>(r) * static_cast<uint64_t>(a));
    a = static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(a));
    b >>= 1;
  }
  return r;
}

// digamma as PyTorch's CPU kernel computes it (calc_digamma): the reflection formula below 0,
// the recurrence up to 10, then the asymptotic series (runtime_headers' coil::m::digamma and
// the CUDA prelude's are the same steps).
inline double digamma_d(double x) {
  if (x == 0) return std::copysign(INFINITY, -x);
  double result = 0;
  if (x < 0) {
    if (x == std::trunc(x)) return NAN;
    result = -std::numbers::pi / std::tan(std::numbers::pi * (x - std::trunc(x)));
    x = 1 - x;
  }
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + 2.25175258906672110764;
  double y = 0;
  if (x < 1.0e17) {
    const double z = 1 / (x * x);
    double p = 8.33333333333333333333E-2;
    for (double a :
         {-2.10927960927960927961E-2, 7.57575757575757575758E-3, -4.16666666666666666667E-3,
          3.96825396825396825397E-3, -8.33333333333333333333E-3, 8.33333333333333333333E-2})
      p = p * z + a;
    y = z * p;
  }
  return result + std::log(x) - 0.5 / x - y;
}

inline double erfinv_d(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  // Initial guess (Giles' approximation) refined by Newton steps on erf.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    x = 3.43273939e-07 + x * w;
    x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w;
    x = 0.00021858087 + x * w;
    x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w;
    x = 0.246640727 + x * w;
    x = 1.50140941 + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    x = 0.000100950558 + x * w;
    x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w;
    x = 0.00573950773 + x * w;
    x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w;
    x = 1.00167406 + x * w;
    x = 2.83297682 + x * w;
  }
  x *= y;
  for (int k = 0; k < 3; ++k) {
    double err = std::erf(x) - y;
    x -= err / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}

// Case labels for the instruction kinds that are not scalar ops, and for the scalar ops of
// COIL_BODY_OPS whose arity is not 1 (COIL_CASE_UNLESS_UNARY) or not 2
// (COIL_CASE_UNLESS_BINARY). A switch over the unary (binary) ops lists these instead of a
// `default:`, so a new op of that arity added to COIL_BODY_OPS without its case here fails to
// compile (-Werror=switch): every consumer handles every scalar op, checked by the compiler.
#define COIL_CASE_NON_SCALAR \
  case InstrKind::Load:      \
  case InstrKind::Constant:  \
  case InstrKind::IndexExpr: \
  case InstrKind::Cast:      \
  case InstrKind::Rand:      \
  case InstrKind::Randn:     \
  case InstrKind::Indirect:
// The binary ops whose result is bool (comparisons, logical ops): computed apart from the
// float and integer arithmetic of the other binary ops.
#define COIL_CASE_BOOL_RESULT \
  case InstrKind::Eq:         \
  case InstrKind::Ne:         \
  case InstrKind::Lt:         \
  case InstrKind::Le:         \
  case InstrKind::Gt:         \
  case InstrKind::Ge:         \
  case InstrKind::LogicalAnd: \
  case InstrKind::LogicalOr:  \
  case InstrKind::LogicalXor:
#define COIL_CASE_UNLESS_UNARY(name, arity, text) COIL_CASE_UNLESS_UNARY_##arity(name)
#define COIL_CASE_UNLESS_UNARY_1(name)
#define COIL_CASE_UNLESS_UNARY_2(name) case InstrKind::name:
#define COIL_CASE_UNLESS_UNARY_3(name) case InstrKind::name:
#define COIL_CASE_UNLESS_BINARY(name, arity, text) COIL_CASE_UNLESS_BINARY_##arity(name)
#define COIL_CASE_UNLESS_BINARY_1(name) case InstrKind::name:
#define COIL_CASE_UNLESS_BINARY_2(name)
#define COIL_CASE_UNLESS_BINARY_3(name) case InstrKind::name:

inline double unary_f(InstrKind k, double x) {
  switch (k) {
    case InstrKind::Neg:
      return -x;
    case InstrKind::Abs:
      return std::fabs(x);
    case InstrKind::Exp:
      return std::exp(x);
    case InstrKind::Exp2:
      return std::exp2(x);
    case InstrKind::Expm1:
      return std::expm1(x);
    case InstrKind::Log:
      return std::log(x);
    case InstrKind::Log2:
      return std::log2(x);
    case InstrKind::Log10:
      return std::log10(x);
    case InstrKind::Log1p:
      return std::log1p(x);
    case InstrKind::Sqrt:
      return std::sqrt(x);
    case InstrKind::Rsqrt:
      return 1.0 / std::sqrt(x);
    case InstrKind::Reciprocal:
      return 1.0 / x;
    case InstrKind::Sin:
      return std::sin(x);
    case InstrKind::Cos:
      return std::cos(x);
    case InstrKind::Tan:
      return std::tan(x);
    case InstrKind::Asin:
      return std::asin(x);
    case InstrKind::Acos:
      return std::acos(x);
    case InstrKind::Atan:
      return std::atan(x);
    case InstrKind::Sinh:
      return std::sinh(x);
    case InstrKind::Cosh:
      return std::cosh(x);
    case InstrKind::Tanh:
      return std::tanh(x);
    case InstrKind::Asinh:
      return std::asinh(x);
    case InstrKind::Acosh:
      return std::acosh(x);
    case InstrKind::Atanh:
      return std::atanh(x);
    case InstrKind::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case InstrKind::Erf:
      return std::erf(x);
    case InstrKind::Erfc:
      return std::erfc(x);
    case InstrKind::Erfinv:
      return erfinv_d(x);
    case InstrKind::Lgamma:
      return std::lgamma(x);
    case InstrKind::Digamma:
      return digamma_d(x);
    case InstrKind::Floor:
      return std::floor(x);
    case InstrKind::Ceil:
      return std::ceil(x);
    case InstrKind::Round:
      return std::nearbyint(x);
    case InstrKind::Trunc:
      return std::trunc(x);
    case InstrKind::Sign:
      return std::isnan(x) ? x : static_cast<double>((x > 0) - (x < 0));
    // Unary with a bool or bitwise result: the interpreter computes them before this.
    case InstrKind::IsNan:
    case InstrKind::IsInf:
    case InstrKind::LogicalNot:
    case InstrKind::BitwiseNot:
      COIL_CASE_NON_SCALAR
      COIL_BODY_OPS(COIL_CASE_UNLESS_UNARY)
      break;
  }
  COIL_INTERNAL_ERROR() << "not a float unary op: " << instr_kind_name(k);
}

}  // namespace coil::loop::detail
