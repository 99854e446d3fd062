// Element types and strided iteration shared by the runtime's library kernels (private).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "coil/runtime/allocator.h"
#include "coil/runtime/compiled_graph.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/support/error.h"

namespace coil::runtime::detail {

// 16-bit floats as storage types; arithmetic goes through float.
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float to_float(BF16 v) {
  uint32_t u = uint32_t{v.bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline BF16 bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return BF16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return BF16{static_cast<uint16_t>(u >> 16)};
}
inline float to_float(F16 v) {
  uint32_t sign = (v.bits & 0x8000u) << 16, exp = (v.bits >> 10) & 0x1f, man = v.bits & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal
      float f = std::ldexp(static_cast<float>(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline F16 f16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return F16{static_cast<uint16_t>(sign | 0x7e00)};
  if (a >= 65520.0f) return F16{static_cast<uint16_t>(sign | 0x7c00)};
  if (a < 6.103515625e-05f) {  // subnormal or zero: multiples of 2^-24, round to nearest even
    float q = std::nearbyint(a * 16777216.0f);
    return F16{static_cast<uint16_t>(sign | static_cast<uint16_t>(q))};
  }
  std::memcpy(&u, &a, 4);
  uint32_t exp = (u >> 23) - 112, man = u & 0x7fffff;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return F16{static_cast<uint16_t>(sign | h)};
}

// Conversions between any two element types (through double / float for the 16-bit ones).
template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
    return to_float(v);
  } else {
    return static_cast<double>(v);
  }
}
template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, BF16>) {
    return bf16_from_float(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, F16>) {
    return f16_from_float(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_integral_v<To> && std::is_integral_v<From> &&
                       !std::is_same_v<To, bool>) {
    return static_cast<To>(v);
  } else {
    return from_double<To>(to_double(v));
  }
}

// Calls f(T{}) with the C++ element type of `dtype`.
template <typename F>
inline void visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Bool:
      return f(bool{});
    case DType::UInt8:
      return f(uint8_t{});
    case DType::Int8:
      return f(int8_t{});
    case DType::Int16:
      return f(int16_t{});
    case DType::Int32:
      return f(int32_t{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Float16:
      return f(F16{});
    case DType::BFloat16:
      return f(BF16{});
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
  }
  COIL_INTERNAL_ERROR() << "bad dtype";
}

// Visits every index of `sizes` in row-major order: f(const int64_t* index). Nothing for
// zero-element shapes; once (with an empty index) for rank 0.
template <typename F>
inline void for_each_index(const std::vector<int64_t>& sizes, F&& f) {
  size_t rank = sizes.size();
  for (int64_t s : sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(rank, 0);
  while (true) {
    f(idx.data());
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

template <typename T>
inline T* element(const RuntimeTensor& t, const int64_t* idx) {
  int64_t off = 0;
  for (size_t d = 0; d < t.sizes.size(); ++d) off += idx[d] * t.strides[d];
  return static_cast<T*>(t.data) + off;
}

inline int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

inline bool is_contiguous(const RuntimeTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.sizes.size(); d-- > 0;) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    s[d] = acc;
    acc *= std::max<int64_t>(sizes[d], 1);
  }
  return s;
}

// A temporary buffer from the runtime allocator.
struct Scratch {
  std::shared_ptr<void> owner;
  RuntimeTensor t;
  Scratch(DType dtype, std::vector<int64_t> sizes) {
    t.dtype = dtype;
    t.strides = contiguous_strides(sizes);
    t.sizes = std::move(sizes);
    owner =
        Allocator::global().allocate(static_cast<size_t>(numel_of(t.sizes)) * dtype_size(dtype));
    t.data = owner.get();
  }
};

// One 2-d GEMM on views: out = alpha * a @ b (+ out if accumulate). Any dtype (extern_blas.cpp).
void gemm2d(const RuntimeTensor& a, const RuntimeTensor& b, const RuntimeTensor& out, double alpha,
            bool accumulate, kernels::GemmPolicy policy = kernels::GemmPolicy::OpenBlas);

}  // namespace coil::runtime::detail
