// CPU GEMM libraries and the per-shape choice between them (runtime-internal).
//
// OpenBLAS is linked at build time. When coil runs inside PyTorch, PyTorch's own MKL is in the
// process too: libtorch_cpu exports MKL's Fortran sgemm_/dgemm_, found at run time through the
// already-loaded library (nothing is linked against it, so the runtime still runs without
// PyTorch). Neither library wins everywhere on the dashboard's shapes (2 cores): MKL took 0.5
// ms for [8192,16]@[16,64] where OpenBLAS took 1.3 ms, OpenBLAS 0.21 ms for [64,128]@[128,1000]
// where MKL took 0.24 ms. So GemmPolicy::Auto times both on the first product of each shape
// (on scratch output, a few repetitions each) and remembers the faster one for the process:
// a measurement, not a model. The memo is the runtime's, like a kernel cache, and holds only
// decisions; any of them is correct.
#pragma once

#include <cstdint>

#include "coil/runtime/extern_kernels.h"

namespace coil::runtime::detail {

using kernels::GemmPolicy;
using kernels::mkl_gemm_available;

// "auto" | "openblas" | "mkl" (the cpu_gemm option); CompileError otherwise.
GemmPolicy parse_gemm_policy(const char* name);

// Row-major C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C (op: transposed when ta/tb),
// with the library `policy` names (Auto: the measured choice for this shape). T is float or
// double. Inside an OpenMP parallel region (batched products, one per thread) OpenBLAS runs
// and nothing is measured: a timing there would include the other threads' work.
template <typename T>
void gemm(GemmPolicy policy, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc);

}  // namespace coil::runtime::detail
