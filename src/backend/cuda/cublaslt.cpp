#include "coil/backend/cuda/cublaslt.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "coil/backend/cuda/driver.h"
#include "dynamic_library.h"

namespace coil::backend::cuda {
namespace {

using Status = int;
using Handle = void*;
using Desc = void*;

// Values of cuBLASLt's and CUDA's enums (cublasLt.h, library_types.h).
enum : int {
  kR32F = 0,
  kR16F = 2,
  kR16BF = 14,
  kCompute32F = 68,
  kCompute32FFastTF32 = 77,
  kOpN = 0,
  kOpT = 1,
  kDescTransA = 3,
  kDescTransB = 4,
  kDescEpilogue = 7,
  kDescBiasPointer = 8,
  kLayoutBatchCount = 5,
  kLayoutBatchOffset = 6,
  kPrefMaxWorkspace = 1,
  kEpilogueDefault = 1,
  kEpilogueRelu = 2,
  kEpilogueBias = 4,
  kEpilogueReluBias = 6,
  kEpilogueGelu = 32,
  kEpilogueGeluBias = 36,
};

struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves;
  int reserved[4];
};

struct Lt {
  Status (*create)(Handle*);
  Status (*desc_create)(Desc*, int compute, int scale);
  Status (*desc_destroy)(Desc);
  Status (*desc_set)(Desc, int attr, const void* buf, size_t size);
  Status (*layout_create)(Desc*, int type, uint64_t rows, uint64_t cols, int64_t ld);
  Status (*layout_destroy)(Desc);
  Status (*layout_set)(Desc, int attr, const void* buf, size_t size);
  Status (*pref_create)(Desc*);
  Status (*pref_destroy)(Desc);
  Status (*pref_set)(Desc, int attr, const void* buf, size_t size);
  Status (*heuristic)(Handle, Desc op, Desc a, Desc b, Desc c, Desc d, Desc pref, int count,
                      HeuristicResult* results, int* returned);
  Status (*matmul)(Handle, Desc op, const void* alpha, const void* a, Desc ad, const void* b,
                   Desc bd, const void* beta, const void* c, Desc cd, void* d, Desc dd,
                   const Algo* algo, void* workspace, size_t workspace_size, CUstream stream);
  Handle handle = nullptr;
  CUdeviceptr workspace = 0;
  std::string why;
  std::mutex mu;  // guards `algos`
  std::map<std::string, std::optional<Algo>> algos;
};

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Lt& lt() {
  static Lt* l = [] {
    auto* r = new Lt();  // never destroyed (process lifetime, as the library)
    detail::DynamicLibrary lib({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                               "libcublasLt not found");
    auto bind = [&](auto& f, const char* name) { lib.bind(f, name); };
    bind(r->create, "cublasLtCreate");
    bind(r->desc_create, "cublasLtMatmulDescCreate");
    bind(r->desc_destroy, "cublasLtMatmulDescDestroy");
    bind(r->desc_set, "cublasLtMatmulDescSetAttribute");
    bind(r->layout_create, "cublasLtMatrixLayoutCreate");
    bind(r->layout_destroy, "cublasLtMatrixLayoutDestroy");
    bind(r->layout_set, "cublasLtMatrixLayoutSetAttribute");
    bind(r->pref_create, "cublasLtMatmulPreferenceCreate");
    bind(r->pref_destroy, "cublasLtMatmulPreferenceDestroy");
    bind(r->pref_set, "cublasLtMatmulPreferenceSetAttribute");
    bind(r->heuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(r->matmul, "cublasLtMatmul");
    r->why = lib.why;
    if (!r->why.empty()) return r;
    if (r->create(&r->handle) != 0) {
      r->why = "cublasLtCreate failed";
      return r;
    }
    const Driver* d = Driver::get(&r->why);
    if (!d) return r;
    if (d->cuMemAlloc(&r->workspace, kWorkspaceBytes) != 0) r->why = "no memory for a workspace";
    return r;
  }();
  return *l;
}

// A row-major [rows, cols] operand with strides (s0, s1) as cuBLASLt sees it: row-major
// memory is the column-major transpose (ld = s0); unit row stride is column-major (ld = s1).
struct Layout {
  bool row_major;
  int64_t ld;
};
std::optional<Layout> describe(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if (cols == 1) s1 = 1;
  if (rows == 1) s0 = std::max<int64_t>(cols, 1);
  if (s1 == 1 && s0 >= std::max<int64_t>(cols, 1)) return Layout{true, s0};
  if (s0 == 1 && s1 >= std::max<int64_t>(rows, 1)) return Layout{false, s1};
  return std::nullopt;
}

int data_type(DType t) {
  switch (t) {
    case DType::Float32:
      return kR32F;
    case DType::BFloat16:
      return kR16BF;
    case DType::Float16:
      return kR16F;
    default:
      return -1;
  }
}

}  // namespace

std::string cublaslt_unavailable_reason() { return lt().why; }

bool gemm(const GemmArgs& g, void* stream, std::string* why) {
  Lt& l = lt();
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (!l.why.empty()) return fail(l.why);
  const int type = data_type(g.dtype);
  if (type < 0) return fail("dtype " + std::string(dtype_name(g.dtype)));
  if (g.m == 0 || g.n == 0) return true;
  auto la = describe(g.m, g.k, g.a.stride0, g.a.stride1);
  auto lb = describe(g.k, g.n, g.b.stride0, g.b.stride1);
  if (!la || !lb) return fail("operand strides");
  if (!(g.c_stride1 == 1 || g.n == 1) || g.c_stride0 < std::max<int64_t>(g.n, 1))
    return fail("output strides");
  // cuBLASLt A := our B (op N when row-major), cuBLASLt B := our A, D := C^T [N, M].
  const int op_a = lb->row_major ? kOpN : kOpT;
  const int op_b = la->row_major ? kOpN : kOpT;
  const int compute = g.dtype == DType::Float32 && g.allow_tf32 ? kCompute32FFastTF32 : kCompute32F;
  Desc op = nullptr, ad = nullptr, bd = nullptr, dd = nullptr, pref = nullptr;
  auto cleanup = [&] {
    if (op) l.desc_destroy(op);
    if (ad) l.layout_destroy(ad);
    if (bd) l.layout_destroy(bd);
    if (dd) l.layout_destroy(dd);
    if (pref) l.pref_destroy(pref);
  };
  bool ok = l.desc_create(&op, compute, kR32F) == 0;
  ok = ok && l.desc_set(op, kDescTransA, &op_a, sizeof op_a) == 0;
  ok = ok && l.desc_set(op, kDescTransB, &op_b, sizeof op_b) == 0;
  static constexpr int kEpilogues[3][2] = {{kEpilogueDefault, kEpilogueBias},
                                           {kEpilogueRelu, kEpilogueReluBias},
                                           {kEpilogueGelu, kEpilogueGeluBias}};
  if (g.activation < 0 || g.activation > 2) {
    *why = "unknown epilogue activation";
    return false;
  }
  const int epilogue = kEpilogues[g.activation][g.bias ? 1 : 0];
  ok = ok && l.desc_set(op, kDescEpilogue, &epilogue, sizeof epilogue) == 0;
  if (g.bias) ok = ok && l.desc_set(op, kDescBiasPointer, &g.bias, sizeof g.bias) == 0;
  const int64_t ldc = g.n == 1 && g.m == 1 ? 1 : g.c_stride0;
  ok = ok && (lb->row_major ? l.layout_create(&ad, type, g.n, g.k, lb->ld)
                            : l.layout_create(&ad, type, g.k, g.n, lb->ld)) == 0;
  ok = ok && (la->row_major ? l.layout_create(&bd, type, g.k, g.m, la->ld)
                            : l.layout_create(&bd, type, g.m, g.k, la->ld)) == 0;
  ok = ok && l.layout_create(&dd, type, g.n, g.m, std::max<int64_t>(ldc, g.n)) == 0;
  if (ok && g.batch > 1) {
    const int32_t count = static_cast<int32_t>(g.batch);
    int64_t sa = g.b.batch_stride, sb = g.a.batch_stride, sd = g.c_batch_stride;
    ok = l.layout_set(ad, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(ad, kLayoutBatchOffset, &sa, sizeof sa) == 0 &&
         l.layout_set(bd, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(bd, kLayoutBatchOffset, &sb, sizeof sb) == 0 &&
         l.layout_set(dd, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(dd, kLayoutBatchOffset, &sd, sizeof sd) == 0;
  }
  if (!ok) {
    cleanup();
    return fail("cuBLASLt rejected the descriptors");
  }
  // The algorithm per problem (heuristic queries cost more than the small matmuls themselves).
  std::string key =
      std::to_string(type) + " " + std::to_string(compute) + " " + std::to_string(op_a) +
      std::to_string(op_b) + " " + std::to_string(g.batch) + " " + std::to_string(g.m) + " " +
      std::to_string(g.n) + " " + std::to_string(g.k) + " " + std::to_string(la->ld) + " " +
      std::to_string(lb->ld) + " " + std::to_string(ldc) + " " + std::to_string(epilogue) + " " +
      std::to_string(reinterpret_cast<uintptr_t>(g.bias) % 16) + " " +
      std::to_string(g.a.batch_stride) + " " + std::to_string(g.b.batch_stride) + " " +
      std::to_string(g.c_batch_stride);
  std::optional<Algo> algo;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    auto it = l.algos.find(key);
    if (it != l.algos.end()) {
      algo = it->second;
    } else {
      size_t ws = kWorkspaceBytes;
      HeuristicResult res{};
      int n = 0;
      if (l.pref_create(&pref) == 0 && l.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof ws) == 0 &&
          l.heuristic(l.handle, op, ad, bd, dd, dd, pref, 1, &res, &n) == 0 && n > 0) {
        algo = res.algo;
      }
      l.algos[key] = algo;
    }
  }
  if (!algo) {
    cleanup();
    return fail("no cuBLASLt algorithm for this problem");
  }
  const float alpha = g.alpha, beta = 0.0f;
  Status st = l.matmul(l.handle, op, &alpha, g.b.data, ad, g.a.data, bd, &beta, g.c, dd, g.c, dd,
                       &*algo, reinterpret_cast<void*>(l.workspace), kWorkspaceBytes,
                       static_cast<CUstream>(stream));
  cleanup();
  if (st != 0)
    throw std::runtime_error("coil: cublasLtMatmul failed (status " + std::to_string(st) + ")");
  return true;
}

}  // namespace coil::backend::cuda
