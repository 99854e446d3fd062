#include "coil/backend/cuda/cublaslt.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

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

// One product's cuBLASLt objects: the operation (its bias pointer is set per call), the
// three layouts and the heuristic's algorithms, best first (none: cuBLASLt has no algorithm
// for it).
struct Problem {
  Desc op = nullptr, ad = nullptr, bd = nullptr, dd = nullptr;
  std::vector<Algo> algos;
};
// What a Problem depends on (gemm's `key`).
constexpr size_t kKeyFields = 16;

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
  size_t (*version)();
  Status (*matmul)(Handle, Desc op, const void* alpha, const void* a, Desc ad, const void* b,
                   Desc bd, const void* beta, const void* c, Desc cd, void* d, Desc dd,
                   const Algo* algo, void* workspace, size_t workspace_size, CUstream stream);
  std::string why;
  // What belongs to one device (its primary context): a handle made and a workspace allocated
  // there, and each problem's descriptors and algorithm, made once (creating them and asking
  // the heuristic on every call cost more host time than launching the product). A product on
  // cuda:1 must not use a workspace of cuda:0.
  struct OnDevice {
    Handle handle = nullptr;
    CUdeviceptr workspace = 0;
    std::string why;
    std::map<std::array<int64_t, kKeyFields>, std::unique_ptr<Problem>> problems;
  };
  std::mutex mu;  // guards `devices`, and a problem's descriptors while it is launched
  std::map<CUcontext, std::unique_ptr<OnDevice>> devices;
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
    bind(r->version, "cublasLtGetVersion");
    r->why = lib.why;
    if (!r->why.empty()) return r;
    Driver::get(&r->why);
    return r;
  }();
  return *l;
}

// The current context's state, made on first use (l.mu held); nullptr with *why set where none
// can be made.
Lt::OnDevice* on_current_device(Lt& l, std::string* why) {
  const Driver* d = Driver::get(why);
  if (!d) return nullptr;
  CUcontext ctx = nullptr;
  if (d->cuCtxGetCurrent(&ctx) != 0 || !ctx) {
    *why = "no current CUDA context";
    return nullptr;
  }
  std::unique_ptr<Lt::OnDevice>& slot = l.devices[ctx];
  if (!slot) {
    slot = std::make_unique<Lt::OnDevice>();
    if (l.create(&slot->handle) != 0)
      slot->why = "cublasLtCreate failed";
    else if (d->cuMemAlloc(&slot->workspace, kWorkspaceBytes) != 0)
      slot->why = "no memory for a workspace";
  }
  if (!slot->why.empty()) {
    *why = slot->why;
    return nullptr;
  }
  return slot.get();
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

// Creates p's descriptors for the product of gemm() and asks the heuristic for its first
// kGemmAlgorithms algorithms; false where cuBLASLt rejects a descriptor (p is then left empty).
bool prepare(Lt& l, Handle handle, const GemmArgs& g, Problem& p, int type, int compute, int op_a,
             int op_b, int epilogue, const Layout& la, const Layout& lb, int64_t ldc) {
  bool ok = l.desc_create(&p.op, compute, kR32F) == 0;
  ok = ok && l.desc_set(p.op, kDescTransA, &op_a, sizeof op_a) == 0;
  ok = ok && l.desc_set(p.op, kDescTransB, &op_b, sizeof op_b) == 0;
  ok = ok && l.desc_set(p.op, kDescEpilogue, &epilogue, sizeof epilogue) == 0;
  ok = ok && (lb.row_major ? l.layout_create(&p.ad, type, g.n, g.k, lb.ld)
                           : l.layout_create(&p.ad, type, g.k, g.n, lb.ld)) == 0;
  ok = ok && (la.row_major ? l.layout_create(&p.bd, type, g.k, g.m, la.ld)
                           : l.layout_create(&p.bd, type, g.m, g.k, la.ld)) == 0;
  ok = ok && l.layout_create(&p.dd, type, g.n, g.m, std::max<int64_t>(ldc, g.n)) == 0;
  if (ok && g.batch > 1) {
    const int32_t count = static_cast<int32_t>(g.batch);
    int64_t sa = g.b.batch_stride, sb = g.a.batch_stride, sd = g.c_batch_stride;
    ok = l.layout_set(p.ad, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(p.ad, kLayoutBatchOffset, &sa, sizeof sa) == 0 &&
         l.layout_set(p.bd, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(p.bd, kLayoutBatchOffset, &sb, sizeof sb) == 0 &&
         l.layout_set(p.dd, kLayoutBatchCount, &count, sizeof count) == 0 &&
         l.layout_set(p.dd, kLayoutBatchOffset, &sd, sizeof sd) == 0;
  }
  // The heuristic sees a bias pointer of the call's alignment (part of the problem's key).
  if (ok && g.bias) ok = l.desc_set(p.op, kDescBiasPointer, &g.bias, sizeof g.bias) == 0;
  if (ok) {
    size_t ws = kWorkspaceBytes;
    std::array<HeuristicResult, kGemmAlgorithms> res{};
    int n = 0;
    Desc pref = nullptr;
    if (l.pref_create(&pref) == 0 && l.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof ws) == 0 &&
        l.heuristic(handle, p.op, p.ad, p.bd, p.dd, p.dd, pref, kGemmAlgorithms, res.data(), &n) ==
            0)
      for (int i = 0; i < std::min(n, kGemmAlgorithms); ++i)
        if (res[i].state == 0) p.algos.push_back(res[i].algo);
    if (pref) l.pref_destroy(pref);
    return true;
  }
  if (p.op) l.desc_destroy(p.op);
  for (Desc d : {p.ad, p.bd, p.dd})
    if (d) l.layout_destroy(d);
  p = Problem{};
  return false;
}

}  // namespace

std::string cublaslt_unavailable_reason() { return lt().why; }

size_t cublaslt_version() {
  Lt& l = lt();
  return l.why.empty() ? l.version() : 0;
}

namespace {

// g's problem on the current device, its descriptors made and the heuristic asked on first
// use (l.mu held); nullptr with *why where g needs another path. *handle, *workspace: the
// device's.
Problem* problem_of(Lt& l, const GemmArgs& g, Handle* handle, CUdeviceptr* workspace,
                    std::string* why) {
  if (!l.why.empty()) return *why = l.why, nullptr;
  const int type = data_type(g.dtype);
  if (type < 0) return *why = "dtype " + std::string(dtype_name(g.dtype)), nullptr;
  auto la = describe(g.m, g.k, g.a.stride0, g.a.stride1);
  auto lb = describe(g.k, g.n, g.b.stride0, g.b.stride1);
  if (!la || !lb) return *why = "operand strides", nullptr;
  if (!(g.c_stride1 == 1 || g.n == 1) || g.c_stride0 < std::max<int64_t>(g.n, 1))
    return *why = "output strides", nullptr;
  // cuBLASLt A := our B (op N when row-major), cuBLASLt B := our A, D := C^T [N, M].
  const int op_a = lb->row_major ? kOpN : kOpT;
  const int op_b = la->row_major ? kOpN : kOpT;
  const int compute = g.dtype == DType::Float32 && g.allow_tf32 ? kCompute32FFastTF32 : kCompute32F;
  if (g.activation < 0 || g.activation > 2) return *why = "unknown epilogue activation", nullptr;
  static constexpr int kEpilogues[3][2] = {{kEpilogueDefault, kEpilogueBias},
                                           {kEpilogueRelu, kEpilogueReluBias},
                                           {kEpilogueGelu, kEpilogueGeluBias}};
  const int epilogue = kEpilogues[g.activation][g.bias ? 1 : 0];
  const int64_t ldc = g.n == 1 && g.m == 1 ? 1 : g.c_stride0;
  const std::array<int64_t, kKeyFields> key = {
      type,
      compute,
      op_a * 2 + op_b,
      g.batch,
      g.m,
      g.n,
      g.k,
      la->ld,
      lb->ld,
      ldc,
      epilogue,
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(g.bias) % 16),
      g.a.batch_stride,
      g.b.batch_stride,
      g.c_batch_stride,
      0};
  Lt::OnDevice* dev = on_current_device(l, why);
  if (!dev) return nullptr;
  *handle = dev->handle;
  *workspace = dev->workspace;
  std::unique_ptr<Problem>& slot = dev->problems[key];
  if (!slot) {
    auto p = std::make_unique<Problem>();
    if (!prepare(l, dev->handle, g, *p, type, compute, op_a, op_b, epilogue, *la, *lb, ldc)) {
      dev->problems.erase(key);
      return *why = "cuBLASLt rejected the descriptors", nullptr;
    }
    slot = std::move(p);
  }
  return slot.get();
}

}  // namespace

bool gemm(const GemmArgs& g, void* stream, std::string* why) {
  Lt& l = lt();
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (g.m == 0 || g.n == 0) {  // nothing to write; the checks still say whether it could run
    if (!l.why.empty()) return fail(l.why);
    if (data_type(g.dtype) < 0) return fail("dtype " + std::string(dtype_name(g.dtype)));
    return true;
  }
  std::lock_guard<std::mutex> lock(l.mu);
  Handle handle = nullptr;
  CUdeviceptr workspace = 0;
  std::string no;
  Problem* found = problem_of(l, g, &handle, &workspace, &no);
  if (!found) return fail(no);
  Problem& p = *found;
  if (p.algos.empty()) return fail("no cuBLASLt algorithm for this problem");
  if (g.algorithm < 0 || static_cast<size_t>(g.algorithm) >= p.algos.size())
    return fail("cuBLASLt offers " + std::to_string(p.algos.size()) + " algorithms, not #" +
                std::to_string(g.algorithm));
  const Algo& algo = p.algos[static_cast<size_t>(g.algorithm)];
  if (g.bias && l.desc_set(p.op, kDescBiasPointer, &g.bias, sizeof g.bias) != 0)
    return fail("cuBLASLt rejected the bias");
  const float alpha = g.alpha, beta = 0.0f;
  Status st = l.matmul(handle, p.op, &alpha, g.b.data, p.ad, g.a.data, p.bd, &beta, g.c, p.dd, g.c,
                       p.dd, &algo, reinterpret_cast<void*>(workspace), kWorkspaceBytes,
                       static_cast<CUstream>(stream));
  if (st != 0)
    throw std::runtime_error("coil: cublasLtMatmul failed (status " + std::to_string(st) + ")");
  return true;
}

}  // namespace coil::backend::cuda
