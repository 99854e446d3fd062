// Test helpers: ulp distance of a float result from a double-precision reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace coil_test {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Error of `got` against the exact value `ref`, in units of the float ulp at `ref`.
// Returns 0 for matching specials, +inf for a mismatch in NaN-ness or infinities.
inline double ulp_error(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isnan(got)) return INFINITY;
  const float ref_f = static_cast<float>(ref);  // correctly rounded (overflows to inf)
  if (std::isinf(ref_f) || std::isinf(got)) return got == ref_f ? 0 : INFINITY;
  if (got == ref_f) return 0;
  const double a = std::fabs(ref);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int ulp_exp = std::max(e - 24, -149);
  return std::fabs(static_cast<double>(got) - ref) / std::ldexp(1.0, ulp_exp);
}

// Inputs: special values, a sweep over every 4093rd float bit pattern (all exponents, both
// signs) and dense samples in [-lo_hi, lo_hi].
inline std::vector<float> test_inputs(float dense_range = 10.0f, int dense = 200000) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          0.5f,
                          -0.5f,
                          2.0f,
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          88.72283935546875f,
                          88.7228469848632812f,
                          -87.33654022216797f,
                          -103.97207641601562f,
                          -103.9720840454101562f,
                          1e-30f,
                          -1e-30f,
                          3.0e-39f};
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) v.push_back(bits_float(uint32_t(u)));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-dense_range, dense_range);
  for (int i = 0; i < dense; ++i) v.push_back(dist(rng));
  for (int i = -1000; i <= 1000; ++i) v.push_back(i * 0.01f);
  return v;
}

struct UlpReport {
  double max_ulp = 0;
  float worst_input = 0;
  float worst_got = 0;
  double worst_ref = 0;
  std::string describe() const {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "max %.3f ulp at x=%.9g (got %.9g, ref %.17g)", max_ulp,
                  worst_input, worst_got, worst_ref);
    return buf;
  }
};

inline void record(UlpReport& r, float x, float got, double ref) {
  const double e = ulp_error(got, ref);
  if (e > r.max_ulp || (std::isinf(e) && !std::isinf(r.max_ulp))) {
    r.max_ulp = e;
    r.worst_input = x;
    r.worst_got = got;
    r.worst_ref = ref;
  }
}

}  // namespace coil_test
