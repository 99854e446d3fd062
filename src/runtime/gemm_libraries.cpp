// CPU GEMM libraries and the measured choice between them (see gemm_libraries.h).
#include "gemm_libraries.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "coil/support/error.h"

#ifdef COIL_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace coil::runtime::detail {
namespace {

// MKL's LP64 Fortran interface (column-major, every argument by pointer).
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
using DgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);

struct Mkl {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
};

}  // namespace

// Looked up once: only in a libtorch_cpu that is already loaded (RTLD_NOLOAD), never by
// loading one, and only where it has both symbols.
static const Mkl& mkl() {
  static const Mkl found = [] {
    Mkl m;
    void* lib = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return m;
    auto s = reinterpret_cast<SgemmFn>(dlsym(lib, "sgemm_"));
    auto d = reinterpret_cast<DgemmFn>(dlsym(lib, "dgemm_"));
    if (s != nullptr && d != nullptr) {
      m.sgemm = s;
      m.dgemm = d;
    }
    return m;
  }();
  return found;
}

namespace {

bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

template <typename T>
bool run_mkl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A,
             int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc) {
  const Mkl& m = mkl();
  if (m.sgemm == nullptr) return false;
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (!fits_int(v)) return false;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const char transa = tb ? 'T' : 'N', transb = ta ? 'T' : 'N';
  const int m_ = static_cast<int>(N), n_ = static_cast<int>(M), k_ = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
  if constexpr (std::is_same_v<T, float>) {
    m.sgemm(&transa, &transb, &m_, &n_, &k_, &a, B, &la, A, &lb, &b, C, &lc);
  } else {
    m.dgemm(&transa, &transb, &m_, &n_, &k_, &a, B, &la, A, &lb, &b, C, &lc);
  }
  return true;
}

template <typename T>
void run_openblas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A,
                  int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc) {
#ifdef COIL_HAVE_OPENBLAS
  auto tra = ta ? CblasTrans : CblasNoTrans;
  auto trb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, tra, trb, M, N, K, static_cast<float>(alpha), A, lda, B, ldb,
                static_cast<float>(beta), C, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, tra, trb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
  (void)ldb, (void)beta, (void)C, (void)ldc;
  COIL_CHECK(false) << "gemm: built without OpenBLAS";
#endif
}

// The measured choices, by shape (transposes, sizes, leading dimensions, element size).
using ShapeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
std::mutex choices_mutex;
std::map<ShapeKey, GemmPolicy>& choices() {
  static std::map<ShapeKey, GemmPolicy> m;
  return m;
}

constexpr int kTimedRuns = 3;

// The faster library for this shape, timed on a scratch output (best of kTimedRuns after one
// warm-up run each, the libraries interleaved so that a noisy moment hits both).
template <typename T>
GemmPolicy measure(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
                   const T* B, int64_t ldb) {
  std::vector<T> scratch(static_cast<size_t>(M * N));
  using Clock = std::chrono::steady_clock;
  double best[2] = {1e300, 1e300};
  for (int rep = 0; rep <= kTimedRuns; ++rep) {
    for (int lib = 0; lib < 2; ++lib) {
      auto t0 = Clock::now();
      if (lib == 0) {
        run_openblas<T>(ta, tb, M, N, K, 1.0, A, lda, B, ldb, 0.0, scratch.data(), N);
      } else {
        run_mkl<T>(ta, tb, M, N, K, 1.0, A, lda, B, ldb, 0.0, scratch.data(), N);
      }
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep > 0) best[lib] = std::min(best[lib], s);
    }
  }
  return best[1] < best[0] ? GemmPolicy::Mkl : GemmPolicy::OpenBlas;
}

}  // namespace

GemmPolicy parse_gemm_policy(const char* name) {
  if (std::strcmp(name, "auto") == 0) return GemmPolicy::Auto;
  if (std::strcmp(name, "openblas") == 0) return GemmPolicy::OpenBlas;
  if (std::strcmp(name, "mkl") == 0) return GemmPolicy::Mkl;
  COIL_USER_CHECK(false) << "cpu_gemm must be auto, openblas or mkl, got '" << name << "'";
  return GemmPolicy::Auto;
}

template <typename T>
void gemm(GemmPolicy policy, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc) {
  if (!mkl_gemm_available() || in_parallel()) policy = GemmPolicy::OpenBlas;
  if (policy == GemmPolicy::Auto) {
    const ShapeKey key{ta, tb, M, N, K, lda, ldb, ldc, static_cast<int>(sizeof(T))};
    {
      std::lock_guard<std::mutex> lock(choices_mutex);
      auto it = choices().find(key);
      if (it != choices().end()) policy = it->second;
    }
    if (policy == GemmPolicy::Auto) {
      policy = measure<T>(ta, tb, M, N, K, A, lda, B, ldb);
      std::lock_guard<std::mutex> lock(choices_mutex);
      choices().emplace(key, policy);
    }
  }
  if (policy == GemmPolicy::Mkl && run_mkl<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
  run_openblas<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template void gemm<float>(GemmPolicy, bool, bool, int64_t, int64_t, int64_t, double, const float*,
                          int64_t, const float*, int64_t, double, float*, int64_t);
template void gemm<double>(GemmPolicy, bool, bool, int64_t, int64_t, int64_t, double, const double*,
                           int64_t, const double*, int64_t, double, double*, int64_t);

}  // namespace coil::runtime::detail

namespace coil::runtime::kernels {
bool mkl_gemm_available() { return detail::mkl().sgemm != nullptr; }
}  // namespace coil::runtime::kernels
