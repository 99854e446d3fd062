// coil runtime: digamma for generated kernels (namespace coil::m), shared by the C++ runtime
// (vmath.h includes it) and the CUDA prelude (CMakeLists.txt appends it, as it does philox.h).
// It is PyTorch's CPU algorithm (calc_digamma), in double: the reflection formula below 0, the
// recurrence up to 10, then the asymptotic series; poles give what eager gives (+-inf at +-0,
// NaN at negative integers). The including code defines its double math in coil::m::detail:
// log_d, tan_d, trunc_d, copysign_d, inf_d, nan_d.
#pragma once

namespace coil {
namespace m {
COIL_INLINE double digamma(double x) {
  if (x == 0) return detail::copysign_d(detail::inf_d(), -x);
  double result = 0;
  if (x < 0) {
    if (x == detail::trunc_d(x)) return detail::nan_d();
    const double pi = 3.14159265358979323846;
    result = -pi / detail::tan_d(pi * (x - detail::trunc_d(x)));
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
    p = p * z - 2.10927960927960927961E-2;
    p = p * z + 7.57575757575757575758E-3;
    p = p * z - 4.16666666666666666667E-3;
    p = p * z + 3.96825396825396825397E-3;
    p = p * z - 8.33333333333333333333E-3;
    p = p * z + 8.33333333333333333333E-2;
    y = z * p;
  }
  return result + detail::log_d(x) - 0.5 / x - y;
}
COIL_INLINE float digamma(float x) { return float(digamma(double(x))); }
}  // namespace m
}  // namespace coil
