// Library kernels: strided copy and GEMM (OpenBLAS when available).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "coil/runtime/allocator.h"
#include "coil/runtime/extern_kernels.h"
#include "element.h"

#include "gemm_libraries.h"

namespace coil::runtime::kernels {

using namespace coil::runtime::detail;

int64_t numel(const RuntimeTensor& t) {
  int64_t n = 1;
  for (int64_t s : t.sizes) n *= s;
  return n;
}

namespace {

// src and dst's dims reordered so that dst's strides decrease (the innermost dim last), with
// size-1 dims dropped and neighbours that are one run in both merged: a channels-last slice
// (a cat piece) becomes [N*H*W, C] runs of C contiguous elements instead of W-long walks at
// stride C.
void memory_order(RuntimeTensor& src, RuntimeTensor& dst) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < dst.sizes.size(); ++d)
    if (dst.sizes[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
    return std::abs(dst.strides[a]) > std::abs(dst.strides[b]);
  });
  std::vector<int64_t> sz, ss, ds;
  for (size_t d : dims) {
    if (!sz.empty() && ss.back() == src.strides[d] * src.sizes[d] &&
        ds.back() == dst.strides[d] * dst.sizes[d]) {
      sz.back() *= dst.sizes[d];
      ss.back() = src.strides[d];
      ds.back() = dst.strides[d];
      continue;
    }
    sz.push_back(dst.sizes[d]);
    ss.push_back(src.strides[d]);
    ds.push_back(dst.strides[d]);
  }
  src.sizes = sz;
  src.strides = ss;
  dst.sizes = sz;
  dst.strides = ds;
}

}  // namespace

void copy(const RuntimeTensor& src_in, const RuntimeTensor& dst_in) {
  COIL_CHECK(src_in.sizes == dst_in.sizes) << "copy: size mismatch";
  int64_t n = numel(src_in);
  if (n == 0) return;
  if (src_in.dtype == dst_in.dtype && is_contiguous(src_in) && is_contiguous(dst_in)) {
    std::memcpy(dst_in.data, src_in.data, static_cast<size_t>(n) * dtype_size(src_in.dtype));
    return;
  }
  RuntimeTensor src = src_in, dst = dst_in;
  memory_order(src, dst);
  size_t rank = src.sizes.size();
  visit_dtype(src.dtype, [&](auto s0) {
    using S = decltype(s0);
    visit_dtype(dst.dtype, [&](auto d0) {
      using D = decltype(d0);
      if (rank == 0) {
        *static_cast<D*>(dst.data) = convert<D>(*static_cast<const S*>(src.data));
        return;
      }
      std::vector<int64_t> outer(src.sizes.begin(), src.sizes.end() - 1);
      int64_t inner = src.sizes.back(), ss = src.strides.back(), ds = dst.strides.back();
      const bool run = std::is_same_v<S, D> && ss == 1 && ds == 1;
      for_each_index(outer, [&](const int64_t* idx) {
        int64_t so = 0, dof = 0;
        for (size_t d = 0; d + 1 < rank; ++d) {
          so += idx[d] * src.strides[d];
          dof += idx[d] * dst.strides[d];
        }
        const S* sp = static_cast<const S*>(src.data) + so;
        D* dp = static_cast<D*>(dst.data) + dof;
        if (run) {
          std::memcpy(dp, sp, static_cast<size_t>(inner) * sizeof(D));
        } else {
          for (int64_t i = 0; i < inner; ++i) dp[i * ds] = convert<D>(sp[i * ss]);
        }
      });
    });
  });
}

}  // namespace coil::runtime::kernels

namespace coil::runtime::detail {
namespace {

using kernels::copy;

// A 2-d operand as (data, row stride, col stride).
template <typename T>
struct Mat {
  const T* data;
  int64_t s0, s1;
};

// How BLAS can read a rows x cols row-major-ish operand in place.
struct BlasLayout {
  bool trans;
  int64_t ld;
};
std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= std::max<int64_t>(1, cols)))
    return BlasLayout{false, rows == 1 ? std::max<int64_t>(1, cols) : s0};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= std::max<int64_t>(1, rows)))
    return BlasLayout{true, cols == 1 ? std::max<int64_t>(1, rows) : s1};
  return std::nullopt;
}

// C[M,N] = alpha * A[M,K] @ B[K,N] + (accumulate ? C : 0), plain loops (any element type).
template <typename T>
void gemm_naive(int64_t M, int64_t N, int64_t K, Mat<T> A, Mat<T> B, T* C, int64_t c0, int64_t c1,
                double alpha, bool accumulate) {
  constexpr bool kInt = std::is_integral_v<T>;
  using Acc = std::conditional_t<kInt, int64_t, double>;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      Acc acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        if constexpr (kInt) {
          acc += static_cast<Acc>(A.data[m * A.s0 + k * A.s1]) *
                 static_cast<Acc>(B.data[k * B.s0 + n * B.s1]);
        } else {
          acc += to_double(A.data[m * A.s0 + k * A.s1]) * to_double(B.data[k * B.s0 + n * B.s1]);
        }
      }
      T& c = C[m * c0 + n * c1];
      if constexpr (kInt) {
        Acc v = static_cast<Acc>(alpha) * acc + (accumulate ? static_cast<Acc>(c) : 0);
        c = static_cast<T>(v);
      } else {
        double v = alpha * static_cast<double>(acc) + (accumulate ? to_double(c) : 0.0);
        c = from_double<T>(v);
      }
    }
  }
}

// C = alpha * A @ B (+ C if accumulate) for float/double, through BLAS when linked, with
// operands copied to contiguous scratch when BLAS cannot read their strides.
template <typename T>
void gemm_float(int64_t M, int64_t N, int64_t K, Mat<T> A, Mat<T> B, T* C, int64_t c0, int64_t c1,
                double alpha, bool accumulate, GemmPolicy policy) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) C[m * c0 + n * c1] = T(0);
    return;
  }
#ifdef COIL_HAVE_OPENBLAS
  DType dt = std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
  auto contiguous_copy = [&](Mat<T> X, int64_t rows, int64_t cols,
                             std::optional<Scratch>& keep) -> Mat<T> {
    keep.emplace(dt, std::vector<int64_t>{rows, cols});
    RuntimeTensor src;
    src.dtype = dt;
    src.data = const_cast<T*>(X.data);
    src.sizes = {rows, cols};
    src.strides = {X.s0, X.s1};
    copy(src, keep->t);
    return Mat<T>{static_cast<const T*>(keep->t.data), cols, 1};
  };
  std::optional<Scratch> ka, kb, kc;
  auto la = blas_layout(M, K, A.s0, A.s1);
  if (!la) {
    A = contiguous_copy(A, M, K, ka);
    la = blas_layout(M, K, A.s0, A.s1);
  }
  auto lb = blas_layout(K, N, B.s0, B.s1);
  if (!lb) {
    B = contiguous_copy(B, K, N, kb);
    lb = blas_layout(K, N, B.s0, B.s1);
  }
  bool c_direct = (N == 1 || c1 == 1) && (M == 1 || c0 >= N);
  if (c_direct) {
    int64_t ldc = M == 1 ? N : c0;
    gemm<T>(policy, la->trans, lb->trans, M, N, K, alpha, A.data, la->ld, B.data, lb->ld,
            accumulate ? 1.0 : 0.0, C, std::max<int64_t>(ldc, 1));
    return;
  }
  kc.emplace(dt, std::vector<int64_t>{M, N});
  RuntimeTensor cview;
  cview.dtype = dt;
  cview.data = C;
  cview.sizes = {M, N};
  cview.strides = {c0, c1};
  if (accumulate) copy(cview, kc->t);
  gemm<T>(policy, la->trans, lb->trans, M, N, K, alpha, A.data, la->ld, B.data, lb->ld,
          accumulate ? 1.0 : 0.0, static_cast<T*>(kc->t.data), N);
  copy(kc->t, cview);
#else
  (void)policy;
  gemm_naive<T>(M, N, K, A, B, C, c0, c1, alpha, accumulate);
#endif
}

}  // namespace

void gemm2d(const RuntimeTensor& a, const RuntimeTensor& b, const RuntimeTensor& out, double alpha,
            bool accumulate, GemmPolicy policy) {
  int64_t M = a.sizes[0], K = a.sizes[1], N = b.sizes[1];
  DType dt = out.dtype;
  if (dt == DType::Float32 || dt == DType::Float64) {
    visit_dtype(dt, [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        gemm_float<T>(M, N, K, Mat<T>{static_cast<const T*>(a.data), a.strides[0], a.strides[1]},
                      Mat<T>{static_cast<const T*>(b.data), b.strides[0], b.strides[1]},
                      static_cast<T*>(out.data), out.strides[0], out.strides[1], alpha, accumulate,
                      policy);
      }
    });
    return;
  }
  if (dt == DType::BFloat16 || dt == DType::Float16) {
    // Compute in f32 (PyTorch accumulates reduced-precision GEMMs in f32 too), round once.
    Scratch fa(DType::Float32, {M, K}), fb(DType::Float32, {K, N}), fc(DType::Float32, {M, N});
    copy(a, fa.t);
    copy(b, fb.t);
    if (accumulate) copy(out, fc.t);
    gemm_float<float>(M, N, K, Mat<float>{static_cast<const float*>(fa.t.data), K, 1},
                      Mat<float>{static_cast<const float*>(fb.t.data), N, 1},
                      static_cast<float*>(fc.t.data), N, 1, alpha, accumulate, policy);
    copy(fc.t, out);
    return;
  }
  visit_dtype(dt, [&](auto z) {
    using T = decltype(z);
    gemm_naive<T>(M, N, K, Mat<T>{static_cast<const T*>(a.data), a.strides[0], a.strides[1]},
                  Mat<T>{static_cast<const T*>(b.data), b.strides[0], b.strides[1]},
                  static_cast<T*>(out.data), out.strides[0], out.strides[1], alpha, accumulate);
  });
}

}  // namespace coil::runtime::detail

namespace coil::runtime::kernels {

using namespace coil::runtime::detail;

namespace {

RuntimeTensor slice0(const RuntimeTensor& t, int64_t i) {
  RuntimeTensor r;
  r.dtype = t.dtype;
  r.data = static_cast<char*>(t.data) + i * t.strides[0] * dtype_size(t.dtype);
  r.sizes.assign(t.sizes.begin() + 1, t.sizes.end());
  r.strides.assign(t.strides.begin() + 1, t.strides.end());
  return r;
}

}  // namespace

void matmul(const RuntimeTensor& a, const RuntimeTensor& b, const RuntimeTensor& out,
            const RuntimeTensor* bias, double beta, double alpha, GemmPolicy policy) {
  size_t rank = a.sizes.size();
  COIL_USER_CHECK((rank == 2 || rank == 3) && b.sizes.size() == rank && out.sizes.size() == rank)
      << "matmul: expected 2-d or 3-d operands";
  COIL_USER_CHECK(a.dtype == b.dtype && a.dtype == out.dtype) << "matmul: dtype mismatch";
  size_t r = rank - 2;
  COIL_USER_CHECK(a.sizes[r + 1] == b.sizes[r] && out.sizes[r] == a.sizes[r] &&
                  out.sizes[r + 1] == b.sizes[r + 1] &&
                  (rank == 2 || (a.sizes[0] == b.sizes[0] && a.sizes[0] == out.sizes[0])))
      << "matmul: shape mismatch";
  bool accumulate = false;
  if (bias && beta != 0.0) {
    // out = beta * bias (broadcast, right-aligned), then accumulate the product.
    COIL_USER_CHECK(bias->sizes.size() <= rank) << "matmul: bias rank";
    RuntimeTensor bb = *bias;
    bb.sizes.assign(rank, 1);
    bb.strides.assign(rank, 0);
    size_t lead = rank - bias->sizes.size();
    for (size_t d = 0; d < bias->sizes.size(); ++d) {
      int64_t s = bias->sizes[d];
      COIL_USER_CHECK(s == 1 || s == out.sizes[lead + d]) << "matmul: bias not broadcastable";
      bb.sizes[lead + d] = out.sizes[lead + d];
      bb.strides[lead + d] = s == 1 ? 0 : bias->strides[d];
    }
    for (size_t d = 0; d < lead; ++d) bb.sizes[d] = out.sizes[d];
    copy(bb, out);
    if (beta != 1.0) {
      visit_dtype(out.dtype, [&](auto z) {
        using T = decltype(z);
        for_each_index(out.sizes, [&](const int64_t* idx) {
          T* p = element<T>(out, idx);
          *p = from_double<T>(beta * to_double(*p));
        });
      });
    }
    accumulate = true;
  }
  if (rank == 2) {
    gemm2d(a, b, out, alpha, accumulate, policy);
  } else {
    // Attention's batched products are many small GEMMs: one per thread (OpenMP OpenBLAS runs
    // single-threaded inside a parallel region) instead of threading each tiny product.
    // Shapes and dtypes were checked above, so nothing below throws inside the region.
    const int64_t batch = a.sizes[0];
    const int64_t flops = a.sizes[1] * a.sizes[2] * b.sizes[2];
    const bool per_thread = batch > 1 && flops < (int64_t{1} << 22);
    // No `if` clause: even an inactive parallel region (if(false)) made OpenBLAS run each
    // large product on one thread (attention's 256^3 products took 3x longer).
    if (per_thread) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < batch; ++i)
        gemm2d(slice0(a, i), slice0(b, i), slice0(out, i), alpha, accumulate, policy);
    } else {
      for (int64_t i = 0; i < batch; ++i)
        gemm2d(slice0(a, i), slice0(b, i), slice0(out, i), alpha, accumulate, policy);
    }
  }
}

}  // namespace coil::runtime::kernels
