// The one header that generated coil kernels include (from runtime_headers/, on the include
// path of every kernel compile). Small on purpose: no C++ standard library headers.
//
//   coil::bf16, coil::half, coil::to_f32 / to_bf16 / to_half, coil::numeric<T>   (scalar.h)
//   coil::m::exp / log / tanh / sigmoid / erf / ... (vectorizable float math)     (vmath.h)
//   coil::rand_uniform / rand_normal / randint64 (Philox4x32-10)                  (philox.h)
//   COIL_KERNEL: the linkage of a kernel entry point.
#pragma once

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "philox.h"
#include "scalar.h"
#include "vmath.h"

#define COIL_KERNEL extern "C" __attribute__((visibility("default")))

namespace coil {
// Thread helpers usable with or without OpenMP.
#ifdef _OPENMP
COIL_INLINE int thread_id() { return omp_get_thread_num(); }
COIL_INLINE int max_threads() { return omp_get_max_threads(); }
#else
COIL_INLINE int thread_id() { return 0; }
COIL_INLINE int max_threads() { return 1; }
#endif
}  // namespace coil
