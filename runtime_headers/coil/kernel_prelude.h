// The one header that generated coil kernels include (from runtime_headers/, on the include
// path of every kernel compile). Small on purpose: no C++ standard library headers.
//
//   coil::bf16, coil::half, coil::to_f32 / to_bf16 / to_half, coil::numeric<T>   (scalar.h)
//   coil::m::exp / log / tanh / sigmoid / erf / ... (vectorizable float math)     (vmath.h)
//   coil::rand_uniform / rand_normal / randint64 (Philox4x32-10)                  (philox.h)
//   COIL_KERNEL: the linkage of a kernel entry point; COIL_SYMBOLIC_EXTENTS: see below.
#pragma once

#include <stdint.h>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "philox.h"
#include "scalar.h"
#include "vmath.h"

#define COIL_KERNEL extern "C" __attribute__((visibility("default")))

// COIL_ENTRY(kernel0): a kernel entry point's name, kernel0_k<key> where the host compiler passes
// -DCOIL_CACHE_KEY=k<key> (the cache key of this very source), so that a library compiled from
// another source (a swapped or stale cache entry) cannot bind; plain kernel0 without it.
#ifdef COIL_CACHE_KEY
#define COIL_ENTRY_PASTE_(name, key) name##_##key
#define COIL_ENTRY_EXPAND_(name, key) COIL_ENTRY_PASTE_(name, key)
#define COIL_ENTRY(name) COIL_ENTRY_EXPAND_(name, COIL_CACHE_KEY)
#else
#define COIL_ENTRY(name) name
#endif

// On a kernel whose loops run to symbolic extents (dynamic shapes): 256-bit vector loops. With
// an unknown trip count g++ -O3 emits each simd loop three times (the 512-bit body, a 256-bit
// vectorized epilogue, a scalar tail), and that machine code made g++ take 1.5x the CPU time of
// the static graph's source on resnet18_eval (constant trip counts pick one width, no
// epilogue). 256 bits is what gcc's own tuning prefers on Intel AVX-512 parts anyway; other
// compilers and targets do not take the option.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define COIL_SYMBOLIC_EXTENTS __attribute__((target("prefer-vector-width=256")))
#else
#define COIL_SYMBOLIC_EXTENTS
#endif

namespace coil {
// Thread helpers usable with or without OpenMP.
#ifdef _OPENMP
COIL_INLINE int thread_id() { return omp_get_thread_num(); }
COIL_INLINE int max_threads() { return omp_get_max_threads(); }
#else
COIL_INLINE int thread_id() { return 0; }
COIL_INLINE int max_threads() { return 1; }
#endif

// `v`, which the compiler may no longer treat as a constant. g++ 12 vectorizes no loop that
// loads with a constant stride of many elements ("no vectype for stmt"), but vectorizes the
// same load when its stride is a run-time value. The strides of a simd loop's strided loads
// (a transposed operand) go through this, computed once before the loop.
COIL_INLINE int64_t runtime_value(int64_t v) {
  asm("" : "+r"(v));
  return v;
}

// `m ? a : b` inside a simd loop where `m` is computed before the loop (a row-invariant mask).
// A masked load under such a mask reads at its index clamped into its buffer and selects
// through this; selects on such a mask go through it too. g++ 12 vectorizes no conditional
// load (".MASK_LOAD: no vectype") and no select on a mask from outside the loop once it mixes
// element widths ("relevant stmt not supported": a max-pool backward's 64-bit indices beside
// its 32-bit gradients left the loop scalar, 20x slower than eager). Numbers are selected with
// bit masks, which it vectorizes, and keep their exact bits.
template <typename U, typename T>
COIL_INLINE T pick_bits(bool m, T a, T b) {
  const U all = U(0) - U(m);
  const U ua = __builtin_bit_cast(U, a), ub = __builtin_bit_cast(U, b);
  return __builtin_bit_cast(T, U(ub ^ ((ua ^ ub) & all)));
}

template <typename T>
COIL_INLINE T pick(bool m, T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return pick_bits<std::make_unsigned_t<T>>(m, a, b);
  } else if constexpr (std::is_same_v<T, float>) {
    return pick_bits<uint32_t>(m, a, b);
  } else if constexpr (std::is_same_v<T, double>) {
    return pick_bits<uint64_t>(m, a, b);
  } else {
    return m ? a : b;
  }
}
}  // namespace coil
