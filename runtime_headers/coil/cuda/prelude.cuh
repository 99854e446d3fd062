// coil CUDA kernel prelude: everything a generated CUDA kernel uses, without any CUDA toolkit
// header, so NVRTC compiles with no include path (fast, and nothing to install). The CUDA
// emitter (src/backend/cuda/emit_cuda.cpp) prepends this text, followed by philox.h, to every
// translation unit; CMake embeds it into the library (no file is read at run time).
//
//   integer typedefs, coil::bf16 / coil::half (16-bit storage types, PTX conversions),
//   coil::numeric<T> (limits), coil::m::* (the scalar math of COIL_BODY_OPS, same names as
//   runtime_headers/coil/vmath.h), coil::Vec<T, N> (128-bit accesses), group reductions over
//   a warp (G = 32) or the whole block (G = 0).
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define COIL_INLINE __device__ __forceinline__
#define COIL_FMAF(a, b, c) fmaf(a, b, c)

namespace coil {

struct bf16 {
  uint16_t x;
};
struct half {
  uint16_t x;
};

// A random kernel's seed: the launch's, mixed with the run's device seed where there is one
// (RunContext::rng_device: captured CUDA graphs, whose launch arguments repeat each replay).
COIL_INLINE int64_t run_seed(int64_t seed, const int64_t* device_seed) {
  return device_seed ? (seed ^ (*device_seed & 0x3fffffffffffffffLL)) : seed;
}

COIL_INLINE float to_f32(float v) { return v; }
COIL_INLINE double to_f32(double v) { return v; }
COIL_INLINE float to_f32(bf16 v) { return __uint_as_float(uint32_t(v.x) << 16); }
COIL_INLINE float to_f32(half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
COIL_INLINE bf16 to_bf16(float f) {
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return bf16{r};
}
COIL_INLINE bf16 to_bf16(double f) { return to_bf16(float(f)); }
COIL_INLINE half to_half(float f) {
  uint16_t r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return half{r};
}
COIL_INLINE half to_half(double f) { return to_half(float(f)); }

template <class T>
struct numeric;
template <>
struct numeric<float> {
  COIL_INLINE static float lowest() { return -__int_as_float(0x7f7fffff); }
  COIL_INLINE static float max() { return __int_as_float(0x7f7fffff); }
  COIL_INLINE static float inf() { return __int_as_float(0x7f800000); }
  COIL_INLINE static float nan() { return __int_as_float(0x7fc00000); }
};
template <>
struct numeric<double> {
  COIL_INLINE static double lowest() { return -__longlong_as_double(0x7fefffffffffffffLL); }
  COIL_INLINE static double max() { return __longlong_as_double(0x7fefffffffffffffLL); }
  COIL_INLINE static double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
  COIL_INLINE static double nan() { return __longlong_as_double(0x7ff8000000000000LL); }
};
#define COIL_INT_NUMERIC(T, LO, HI)                  \
  template <>                                        \
  struct numeric<T> {                                \
    COIL_INLINE static T lowest() { return T(LO); } \
    COIL_INLINE static T max() { return T(HI); }    \
  };
COIL_INT_NUMERIC(int64_t, (-9223372036854775807LL - 1), 9223372036854775807LL)
COIL_INT_NUMERIC(int32_t, (-2147483647 - 1), 2147483647)
COIL_INT_NUMERIC(int16_t, -32768, 32767)
COIL_INT_NUMERIC(int8_t, -128, 127)
COIL_INT_NUMERIC(uint8_t, 0, 255)
#undef COIL_INT_NUMERIC

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// A Vec load of read-only data (ld.global.nc) written as one asm statement: NVRTC compiled a
// loop's two plain loads of the _cv entry point so that the second was issued only after the
// first one's value was used, one load in flight, where nvcc issued both first (BatchNorm
// statistics of [64, 256, 56, 56] on the H100: 83.9 us with NVRTC, 76.7 with this, 72.5 from
// nvcc; docs/decisions.md). Not volatile: the compiler may still move or drop it like a load.
template <class T, int N>
COIL_INLINE Vec<T, N> load_vec(const Vec<T, N>* p) {
  Vec<T, N> x;
  unsigned* w = reinterpret_cast<unsigned*>(&x);
  if constexpr (sizeof(x) == 16) {
    asm("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "l"(p));
  } else if constexpr (sizeof(x) == 8) {
    asm("ld.global.nc.v2.b32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else if constexpr (sizeof(x) == 4) {
    asm("ld.global.nc.b32 %0, [%1];" : "=r"(w[0]) : "l"(p));
  } else {
    x = *p;
  }
  return x;
}

// A store marked evict-first in the caches (st.global.cs): a row kernel's output is not read
// again soon, and it should not push out of L2 the input rows that later passes re-read.
template <class T, int N>
COIL_INLINE void store_streaming(Vec<T, N>* p, const Vec<T, N>& x) {
  if constexpr (sizeof(x) == 16) {
    const unsigned* w = reinterpret_cast<const unsigned*>(&x);
    asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3])
                 : "memory");
  } else if constexpr (sizeof(x) == 8) {
    const unsigned* w = reinterpret_cast<const unsigned*>(&x);
    asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  } else if constexpr (sizeof(x) == 4) {
    asm volatile("st.global.cs.b32 [%0], %1;" ::"l"(p), "r"(*reinterpret_cast<const unsigned*>(&x))
                 : "memory");
  } else {
    *p = x;
  }
}

// Approximate float math for kernels whose every output is bf16/f16 (KernelEmitter::fast_math_):
// their errors (a few ulp of float) are far below the rounding of the stored result, and they
// are a handful of instructions where expf and IEEE division take a dozen or more (GPT-2's
// masked softmax was bound by its arithmetic). Triton's exp and division are the same
// instructions. ex2.approx.f32 keeps denormal results (no .ftz); div.full.f32 is full-range.
namespace fast {
COIL_INLINE float exp(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
COIL_INLINE float div(float a, float b) {
  float y;
  asm("div.full.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
COIL_INLINE float sigmoid(float x) { return div(1.0f, 1.0f + exp(-x)); }
}  // namespace fast

namespace m {
namespace detail {
COIL_INLINE float fabs_(float x) { return fabsf(x); }
COIL_INLINE float self(bool c, float a, float b) { return c ? a : b; }
}  // namespace detail

// Floating point: float and double overloads of each function.
#define COIL_F1(name, f32, f64)                           \
  COIL_INLINE float name(float x) { return f32(x); }    \
  COIL_INLINE double name(double x) { return f64(x); }
COIL_F1(exp, expf, ::exp)
COIL_F1(exp2, exp2f, ::exp2)
COIL_F1(expm1, expm1f, ::expm1)
COIL_F1(log, logf, ::log)
COIL_F1(log2, log2f, ::log2)
COIL_F1(log10, log10f, ::log10)
COIL_F1(log1p, log1pf, ::log1p)
COIL_F1(sqrt, sqrtf, ::sqrt)
COIL_F1(rsqrt, rsqrtf, ::rsqrt)
COIL_F1(sin, sinf, ::sin)
COIL_F1(cos, cosf, ::cos)
COIL_F1(tan, tanf, ::tan)
COIL_F1(asin, asinf, ::asin)
COIL_F1(acos, acosf, ::acos)
COIL_F1(atan, atanf, ::atan)
COIL_F1(sinh, sinhf, ::sinh)
COIL_F1(cosh, coshf, ::cosh)
COIL_F1(tanh, tanhf, ::tanh)
COIL_F1(asinh, asinhf, ::asinh)
COIL_F1(acosh, acoshf, ::acosh)
COIL_F1(atanh, atanhf, ::atanh)
COIL_F1(erf, erff, ::erf)
COIL_F1(erfc, erfcf, ::erfc)
COIL_F1(erfinv, erfinvf, ::erfinv)
COIL_F1(lgamma, lgammaf, ::lgamma)
COIL_F1(floor, floorf, ::floor)
COIL_F1(ceil, ceilf, ::ceil)
COIL_F1(round, rintf, ::rint)  // torch.round: half to even
COIL_F1(trunc, truncf, ::trunc)
#undef COIL_F1
namespace detail {  // the double math of digamma.h (appended to this prelude)
COIL_INLINE double log_d(double x) { return ::log(x); }
COIL_INLINE double tan_d(double x) { return ::tan(x); }
COIL_INLINE double trunc_d(double x) { return ::trunc(x); }
COIL_INLINE double copysign_d(double a, double b) { return ::copysign(a, b); }
COIL_INLINE double inf_d() { return __longlong_as_double(0x7ff0000000000000LL); }
COIL_INLINE double nan_d() { return __longlong_as_double(0x7ff8000000000000LL); }
}  // namespace detail

template <class T>
COIL_INLINE T abs(T x) {
  return x < T(0) ? T(-x) : x;
}
COIL_INLINE float abs(float x) { return fabsf(x); }
COIL_INLINE double abs(double x) { return fabs(x); }
template <class T>
COIL_INLINE T reciprocal(T x) {
  return T(1) / x;
}
template <class T>
COIL_INLINE T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}
template <class T>
COIL_INLINE T sign(T x) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);
}
template <class T>
COIL_INLINE bool isnan(T x) {
  return x != x;
}
template <class T>
COIL_INLINE bool isinf(T x) {
  return x == numeric<T>::inf() || x == -numeric<T>::inf();
}

// Python semantics for integers (floor division, remainder with the divisor's sign).
template <class T>
COIL_INLINE T floordiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
}
COIL_INLINE float floordiv(float a, float b) { return floorf(a / b); }
COIL_INLINE double floordiv(double a, double b) { return ::floor(a / b); }
template <class T>
COIL_INLINE T truncdiv(T a, T b) {
  return a / b;
}
COIL_INLINE float truncdiv(float a, float b) { return truncf(a / b); }
COIL_INLINE double truncdiv(double a, double b) { return ::trunc(a / b); }
template <class T>
COIL_INLINE T remainder(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
}
COIL_INLINE float remainder(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
COIL_INLINE double remainder(double a, double b) {
  double r = ::fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
template <class T>
COIL_INLINE T fmod(T a, T b) {
  return a % b;
}
COIL_INLINE float fmod(float a, float b) { return fmodf(a, b); }
COIL_INLINE double fmod(double a, double b) { return ::fmod(a, b); }
template <class T>
COIL_INLINE T pow(T a, T b) {
  T r = 1;
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? T((b & 1) ? -1 : 1) : T(0));
  while (b) {
    if (b & 1) r *= a;
    a *= a;
    b >>= 1;
  }
  return r;
}
COIL_INLINE float pow(float a, float b) { return powf(a, b); }
COIL_INLINE double pow(double a, double b) { return ::pow(a, b); }
// NaN-propagating, as torch.maximum / torch.minimum.
template <class T>
COIL_INLINE T maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}
template <class T>
COIL_INLINE T minimum(T a, T b) {
  return (a != a || a < b) ? a : b;
}
COIL_INLINE float atan2(float a, float b) { return atan2f(a, b); }
COIL_INLINE double atan2(double a, double b) { return ::atan2(a, b); }
COIL_INLINE float hypot(float a, float b) { return hypotf(a, b); }
COIL_INLINE double hypot(double a, double b) { return ::hypot(a, b); }
COIL_INLINE float copysign(float a, float b) { return copysignf(a, b); }
COIL_INLINE double copysign(double a, double b) { return ::copysign(a, b); }
template <class T>
COIL_INLINE T shift_left(T a, T b) {
  return (b < 0 || b >= T(sizeof(T) * 8)) ? T(0) : T(a << b);
}
template <class T>
COIL_INLINE T shift_right(T a, T b) {
  return (b < 0 || b >= T(sizeof(T) * 8)) ? T(a < 0 ? -1 : 0) : T(a >> b);
}
}  // namespace m

// ---- reductions over a group of threads: G = 32 (one warp per row) or G = 0 (the block)
struct SumOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return a + b;
  }
};
struct ProdOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return a * b;
  }
};
struct MaxOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return m::maximum(a, b);
  }
};
struct MinOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return m::minimum(a, b);
  }
};
struct OrOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return a || b;
  }
};
struct AndOp {
  template <class T>
  COIL_INLINE static T apply(T a, T b) {
    return a && b;
  }
};

template <class T>
COIL_INLINE T shfl_xor(T v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
COIL_INLINE bool shfl_xor(bool v, int mask) {
  return __shfl_xor_sync(0xffffffffu, int(v), mask) != 0;
}
COIL_INLINE int8_t shfl_xor(int8_t v, int mask) {
  return int8_t(__shfl_xor_sync(0xffffffffu, int(v), mask));
}
COIL_INLINE uint8_t shfl_xor(uint8_t v, int mask) {
  return uint8_t(__shfl_xor_sync(0xffffffffu, int(v), mask));
}
COIL_INLINE int16_t shfl_xor(int16_t v, int mask) {
  return int16_t(__shfl_xor_sync(0xffffffffu, int(v), mask));
}

// Row kernels' thread groups (emit_rows.cpp): G = 32 a warp per row, G = 0 the whole block
// per row, G = T > 32 the whole block per row launched with exactly T threads (_br: sizes are
// compile-time constants), G = -C the column layout: thread t serves row r0 + t % C as lane
// t / C, so a warp's 32 threads read C adjacent rows (columns of a row-major matrix) at once.
template <int G>
COIL_INLINE int group_size() {
  if constexpr (G > 0) return G;
  else if constexpr (G == 0) return blockDim.x;
  else return blockDim.x / -G;
}
template <int G>
COIL_INLINE int group_lane() {
  if constexpr (G > 0) return threadIdx.x & (G - 1);
  else if constexpr (G == 0) return threadIdx.x;
  else return threadIdx.x / -G;
}
template <int G>
COIL_INLINE int rows_per_block() {
  if constexpr (G > 0) return blockDim.x / G;
  else if constexpr (G == 0) return 1;
  else return -G;
}
// This thread's row in the block's rows starting at r0; in the column layout a thread past
// the end takes the last row (every thread must reach the block's barriers).
template <int G>
COIL_INLINE int64_t group_row(int64_t r0, int64_t rows) {
  if constexpr (G > 0) return r0 + threadIdx.x / G;
  else if constexpr (G == 0) return r0;
  else return min(r0 + int64_t(threadIdx.x % -G), rows - 1);
}

template <int G>
COIL_INLINE void group_sync() {
  if (G == 32) {
    __threadfence_block();  // order this lane's global stores before the others' loads
    __syncwarp();
  } else {
    __syncthreads();
  }
}

template <class T>
struct SharedSlots {
  COIL_INLINE static T* get() {
    __shared__ T slots[32];
    return slots;
  }
};

// The column layout's shared slots: one per column and warp (Tag: a second array of a type).
template <class T, int C, int Tag = 0>
struct ColumnSlots {
  COIL_INLINE static T* get() {
    __shared__ T slots[32 * C];
    return slots;
  }
};

// The column layout's reduction: the lanes of a column within a warp by shuffles, then the
// warps through shared memory; every lane of the column gets the result.
template <int C, class Op, class T>
COIL_INLINE T column_reduce(T v) {
#pragma unroll
  for (int m = 16; m >= C; m >>= 1) v = Op::apply(v, shfl_xor(v, m));
  T* slots = ColumnSlots<T, C>::get();
  const int warps = (blockDim.x + 31) >> 5;
  const int col = threadIdx.x % C;
  if ((threadIdx.x & 31) < C) slots[(threadIdx.x >> 5) * C + col] = v;
  __syncthreads();
  T r = slots[col];
  for (int w = 1; w < warps; ++w) r = Op::apply(r, slots[w * C + col]);
  __syncthreads();  // the slots may be reused by the next reduction
  return r;
}

// Every thread of the group gets the reduction of the group's values.
template <int G, class Op, class T>
COIL_INLINE T group_reduce(T v) {
  if constexpr (G < 0) return column_reduce<-G, Op>(v);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = Op::apply(v, shfl_xor(v, m));
  if (G == 32) return v;
  T* slots = SharedSlots<T>::get();
  const int warps = (blockDim.x + 31) >> 5;
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = slots[0];
  for (int w = 1; w < warps; ++w) r = Op::apply(r, slots[w]);
  __syncthreads();  // the slots may be reused by the next reduction
  return r;
}

// Arg reductions: the first position of the max (min); NaN counts as the largest (smallest)
// and the first NaN wins, as on the CPU.
template <bool Max, class T>
COIL_INLINE bool arg_better(T v, int64_t i, T best, int64_t bi) {
  bool vn = v != v, bn = best != best;
  if (vn || bn) return vn && (!bn || i < bi);
  if (v == best) return i < bi;
  return Max ? v > best : v < best;
}
template <int C, bool Max, class T>
COIL_INLINE void column_argreduce(T& best, int64_t& index) {
#pragma unroll
  for (int m = 16; m >= C; m >>= 1) {
    T ov = shfl_xor(best, m);
    int64_t oi = shfl_xor(index, m);
    if (arg_better<Max>(ov, oi, best, index)) {
      best = ov;
      index = oi;
    }
  }
  T* vs = ColumnSlots<T, C>::get();
  int64_t* is = ColumnSlots<int64_t, C, 1>::get();
  const int warps = (blockDim.x + 31) >> 5;
  const int col = threadIdx.x % C;
  if ((threadIdx.x & 31) < C) {
    vs[(threadIdx.x >> 5) * C + col] = best;
    is[(threadIdx.x >> 5) * C + col] = index;
  }
  __syncthreads();
  best = vs[col];
  index = is[col];
  for (int w = 1; w < warps; ++w)
    if (arg_better<Max>(vs[w * C + col], is[w * C + col], best, index)) {
      best = vs[w * C + col];
      index = is[w * C + col];
    }
  __syncthreads();
}

template <int G, bool Max, class T>
COIL_INLINE void group_argreduce(T& best, int64_t& index) {
  if constexpr (G < 0) {
    column_argreduce<-G, Max>(best, index);
    return;
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    T ov = shfl_xor(best, m);
    int64_t oi = shfl_xor(index, m);
    if (arg_better<Max>(ov, oi, best, index)) {
      best = ov;
      index = oi;
    }
  }
  if (G == 32) return;
  T* vs = SharedSlots<T>::get();
  __shared__ int64_t is[32];
  const int warps = (blockDim.x + 31) >> 5;
  if ((threadIdx.x & 31) == 0) {
    vs[threadIdx.x >> 5] = best;
    is[threadIdx.x >> 5] = index;
  }
  __syncthreads();
  best = vs[0];
  index = is[0];
  for (int w = 1; w < warps; ++w)
    if (arg_better<Max>(vs[w], is[w], best, index)) {
      best = vs[w];
      index = is[w];
    }
  __syncthreads();
}

}  // namespace coil
