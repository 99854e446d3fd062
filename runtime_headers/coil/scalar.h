// coil runtime: scalar types, low-precision conversions and numeric limits for generated
// kernels. Included through coil/kernel_prelude.h. Deliberately free of standard headers
// (compile time of every kernel matters); everything here is inline and branch-free so that
// loops using it auto-vectorize.
#pragma once

#include <stdint.h>

#define COIL_INLINE inline __attribute__((always_inline))

namespace coil {

struct bf16 {
  uint16_t bits;
};
struct half {
  uint16_t bits;
};

namespace detail {
COIL_INLINE uint32_t f2u(float f) { return __builtin_bit_cast(uint32_t, f); }
COIL_INLINE float u2f(uint32_t u) { return __builtin_bit_cast(float, u); }
COIL_INLINE uint64_t d2u(double f) { return __builtin_bit_cast(uint64_t, f); }
COIL_INLINE double u2d(uint64_t u) { return __builtin_bit_cast(double, u); }
// Branch-free selects on bit patterns: unlike `c ? a : b`, gcc never turns these into control
// flow, so loops vectorize even under the default -ftrapping-math.
COIL_INLINE uint32_t selu(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(c);
  return (a & m) | (b & ~m);
}
COIL_INLINE float self(bool c, float a, float b) { return u2f(selu(c, f2u(a), f2u(b))); }
}  // namespace detail

// ---- to float ---------------------------------------------------------------------------------
COIL_INLINE float to_f32(float x) { return x; }
COIL_INLINE double to_f32(double x) { return x; }
COIL_INLINE float to_f32(bf16 x) { return detail::u2f(uint32_t(x.bits) << 16); }
// IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN keep their payload).
COIL_INLINE float to_f32(half x) {
  const uint32_t w = uint32_t(x.bits) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal (and inf/NaN): move exponent/mantissa into place, rebias by a multiply by 2^-112.
  const float normalized = detail::u2f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormal: mantissa into the low bits of 0.5f, then subtract 0.5f.
  const float denormalized = detail::u2f((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t r =
      detail::selu(two_w < (1u << 27), detail::f2u(denormalized), detail::f2u(normalized));
  return detail::u2f(sign | r);
}

// ---- float -> bf16 (round to nearest even; NaN stays a quiet NaN with its sign) ---------------
COIL_INLINE bf16 to_bf16(float f) {
  const uint32_t u = detail::f2u(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return bf16{uint16_t(detail::selu(is_nan, nan, rounded))};
}
COIL_INLINE bf16 to_bf16(double d) { return to_bf16(float(d)); }  // like c10::BFloat16(double)
COIL_INLINE bf16 to_bf16(bf16 x) { return x; }

// ---- float -> half (IEEE round to nearest even; overflow -> inf; NaN -> quiet NaN) ------------
COIL_INLINE half to_half(float f) {
  uint32_t x = detail::f2u(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  // Inf or NaN (or overflow: |f| >= 65536; values in [65520, 65536) overflow in the normal path).
  const uint32_t inf_nan = detail::selu(x > 0x7f800000u, 0x7e00u, 0x7c00u);
  // Subnormal or zero: align the 10 mantissa bits at the bottom by adding 0.5f (RNE by the FPU).
  const uint32_t sub = detail::f2u(detail::u2f(x) + 0.5f) - 0x3f000000u;
  // Normal: rebias the exponent and round to nearest even by hand.
  const uint32_t mant_odd = (x >> 13) & 1u;
  const uint32_t norm = (x + (uint32_t(15 - 127) << 23) + 0xfffu + mant_odd) >> 13;
  const uint32_t o =
      detail::selu(x >= 0x47800000u, inf_nan, detail::selu(x < 0x38800000u, sub, norm));
  return half{uint16_t((sign >> 16) | o)};
}
COIL_INLINE half to_half(double d) { return to_half(float(d)); }
COIL_INLINE half to_half(half x) { return x; }

// ---- numeric limits (no <limits>) -------------------------------------------------------------
// numeric<T>::lowest() / max() / inf() / nan(); inf() of an integer type is its max (for
// max/min reduction identities), lowest() of a floating type is -inf.
template <typename T>
struct numeric;
template <>
struct numeric<float> {
  static constexpr float lowest() { return -__builtin_inff(); }
  static constexpr float max() { return __builtin_inff(); }
  static constexpr float inf() { return __builtin_inff(); }
  static constexpr float nan() { return __builtin_nanf(""); }
  static constexpr float finite_max() { return 3.40282347e+38f; }
};
template <>
struct numeric<double> {
  static constexpr double lowest() { return -__builtin_inf(); }
  static constexpr double max() { return __builtin_inf(); }
  static constexpr double inf() { return __builtin_inf(); }
  static constexpr double nan() { return __builtin_nan(""); }
  static constexpr double finite_max() { return 1.7976931348623157e+308; }
};
#define COIL_INT_NUMERIC(T, LO, HI)                \
  template <>                                      \
  struct numeric<T> {                              \
    static constexpr T lowest() { return LO; }     \
    static constexpr T max() { return HI; }        \
    static constexpr T inf() { return HI; }        \
    static constexpr T finite_max() { return HI; } \
  };
COIL_INT_NUMERIC(bool, false, true)
COIL_INT_NUMERIC(int8_t, -128, 127)
COIL_INT_NUMERIC(uint8_t, 0, 255)
COIL_INT_NUMERIC(int16_t, -32768, 32767)
COIL_INT_NUMERIC(uint16_t, 0, 65535)
COIL_INT_NUMERIC(int32_t, -2147483647 - 1, 2147483647)
COIL_INT_NUMERIC(uint32_t, 0, 4294967295u)
COIL_INT_NUMERIC(int64_t, -9223372036854775807L - 1, 9223372036854775807L)
COIL_INT_NUMERIC(uint64_t, 0, 18446744073709551615ul)
#undef COIL_INT_NUMERIC

}  // namespace coil
