// Accumulating index_put on the GPU (CudaSteps::index_put_accumulate): out = self, then
// out[indices] += values with atomic adds, in a kernel of coil's own instead of ATen's.
//
// Why: ATen's CUDA index_put_(accumulate=True) sorts the indices and walks each run of equal
// ones; when a few rows receive most of the values (T5's relative-position bias: 32 buckets,
// [q, k] positions, each bucket hit thousands of times) it took 25 ms a call on an H200 where
// Inductor's atomic scatter took 3 ms. Atomic adds make the sum's order, hence its last bits,
// vary from run to run (as Inductor's scatter does); the result is otherwise exact.
//
// When the destination is small and dense and many values land on each of its elements, each
// block first sums into its own copy of the destination in shared memory and adds that copy
// into global memory once: the contended atomics then run in shared memory.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "coil/support/error.h"
#include "cuda_steps.h"
#include "index_put_shape.h"

namespace coil::runtime::detail {

namespace cu = backend::cuda;

namespace {

constexpr int kMaxRank = 8;
constexpr int kMaxIndices = 4;

constexpr const char* kIndexAddSource = R"(
typedef long long int64_t;
struct IndexAdd {
  int64_t sizes[8];      // the indexed result's shape (values broadcast to it)
  int64_t vstride[8];    // values' strides over it (0 where broadcast)
  int64_t ostride[8];    // out's strides for the dims not indexed (0 for the indices' dims)
  int64_t istride[4][8]; // each index tensor's strides over it (0 outside the indices' dims)
  int64_t isize[4];      // the size of the dim each index addresses (negatives wrap)
  int64_t istep[4];      // out's stride along that dim
  int64_t n;             // elements of the result
  int64_t shared_n;      // > 0: out is dense with this many elements, summed per block first
  int rank, k;
};
template <class T>
__device__ bool target(const IndexAdd& a, const int64_t* const* idx, int64_t l, int64_t* o,
                       int64_t* v) {
  int64_t rem = l, oo = 0, vo = 0, io[4] = {0, 0, 0, 0};
  for (int d = a.rank - 1; d >= 0; --d) {
    const int64_t c = rem % a.sizes[d];
    rem /= a.sizes[d];
    oo += c * a.ostride[d];
    vo += c * a.vstride[d];
    for (int j = 0; j < a.k; ++j) io[j] += c * a.istride[j][d];
  }
  for (int j = 0; j < a.k; ++j) {
    int64_t i = idx[j][io[j]];
    if (i < 0) i += a.isize[j];
    if (i < 0 || i >= a.isize[j]) return false;  // out of range: nothing added
    oo += i * a.istep[j];
  }
  *o = oo;
  *v = vo;
  return true;
}
template <class T>
__device__ void index_add_impl(T* out, const T* vals, const int64_t* i0, const int64_t* i1,
                               const int64_t* i2, const int64_t* i3, const IndexAdd& a) {
  const int64_t* idx[4] = {i0, i1, i2, i3};
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (a.shared_n > 0) {
    extern __shared__ unsigned char raw[];
    T* acc = reinterpret_cast<T*>(raw);
    for (int64_t e = threadIdx.x; e < a.shared_n; e += blockDim.x) acc[e] = T(0);
    __syncthreads();
    for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < a.n; l += stride) {
      int64_t o, v;
      if (target<T>(a, idx, l, &o, &v)) atomicAdd(acc + o, vals[v]);
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < a.shared_n; e += blockDim.x)
      if (acc[e] != T(0)) atomicAdd(out + e, acc[e]);
    return;
  }
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < a.n; l += stride) {
    int64_t o, v;
    if (target<T>(a, idx, l, &o, &v)) atomicAdd(out + o, vals[v]);
  }
}
extern "C" __global__ void coil_index_add_f32(float* out, const float* vals, const int64_t* i0,
    const int64_t* i1, const int64_t* i2, const int64_t* i3, IndexAdd a) {
  index_add_impl<float>(out, vals, i0, i1, i2, i3, a);
}
extern "C" __global__ void coil_index_add_f64(double* out, const double* vals, const int64_t* i0,
    const int64_t* i1, const int64_t* i2, const int64_t* i3, IndexAdd a) {
  index_add_impl<double>(out, vals, i0, i1, i2, i3, a);
}
)";

struct IndexAdd {
  int64_t sizes[kMaxRank], vstride[kMaxRank], ostride[kMaxRank];
  int64_t istride[kMaxIndices][kMaxRank];
  int64_t isize[kMaxIndices], istep[kMaxIndices];
  int64_t n, shared_n;
  int rank, k;
};

}  // namespace

bool CudaSteps::index_put_accumulate(const RuntimeTensor& self,
                                     const std::vector<RuntimeTensor>& indices,
                                     const std::vector<int64_t>& dims, const RuntimeTensor& values,
                                     const RuntimeTensor& out, void* stream,
                                     std::string* why) const {
  const size_t k = indices.size(), rank = self.sizes.size();
  if (self.dtype != DType::Float32 && self.dtype != DType::Float64) return *why = "dtype", false;
  if (values.dtype != self.dtype || out.dtype != self.dtype) return *why = "mixed dtypes", false;
  if (k == 0 || k > kMaxIndices || dims.size() != k || rank == 0)
    return *why = "number of indices", false;
  for (size_t j = 0; j < k; ++j) {
    if (indices[j].dtype != DType::Int64) return *why = "index dtype", false;
    if (dims[j] < 0 || dims[j] >= static_cast<int64_t>(rank) || (j && dims[j] <= dims[j - 1]))
      return *why = "index dims", false;
  }
  std::optional<IndexPutShape> ps = index_put_shape(self.sizes, indices, dims, why);
  if (!ps) return false;
  const std::vector<int64_t>& shape = ps->result;
  const std::vector<int64_t>& bshape = ps->bshape;
  const size_t before = ps->before;
  // out's strides over the result: the rest dims', 0 over the broadcast index dims.
  std::vector<int64_t> ostride;
  for (size_t i = 0; i < before; ++i) ostride.push_back(out.strides[ps->rest_dims[i]]);
  ostride.insert(ostride.end(), bshape.size(), 0);
  for (size_t i = before; i < ps->rest_dims.size(); ++i)
    ostride.push_back(out.strides[ps->rest_dims[i]]);
  if (shape.size() > static_cast<size_t>(kMaxRank)) return *why = "rank", false;
  IndexAdd a;
  std::memset(&a, 0, sizeof(a));
  a.rank = static_cast<int>(shape.size());
  a.k = static_cast<int>(k);
  a.n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    a.sizes[d] = shape[d];
    a.ostride[d] = ostride[d];
    a.n *= shape[d];
  }
  const RuntimeTensor v_over = broadcast_to(values, shape, "index_put");
  std::copy(v_over.strides.begin(), v_over.strides.end(), a.vstride);
  for (size_t j = 0; j < k; ++j) {
    // Index j's strides over the broadcast dims of the result, 0 over the others.
    const RuntimeTensor i_over = broadcast_to(indices[j], bshape, "index_put");
    std::copy(i_over.strides.begin(), i_over.strides.end(), a.istride[j] + before);
    a.isize[j] = self.sizes[dims[j]];
    a.istep[j] = out.strides[dims[j]];
  }
  copy(self, out, stream);
  if (a.n == 0) return true;
  int64_t numel = 1;
  bool dense = true;
  for (size_t d = rank; d-- > 0;) {
    if (self.sizes[d] != 1 && out.strides[d] != numel) dense = false;
    numel *= self.sizes[d];
  }
  const int64_t elem = dtype_size(self.dtype);
  // Per-block sums in shared memory where the destination fits in 32 KB and each of its
  // elements receives at least 16 values on average (else the block's zeroing and flushing
  // cost more than the contention they avoid).
  constexpr int64_t kSharedBytes = 32 << 10;
  a.shared_n = dense && numel * elem <= kSharedBytes && a.n >= 16 * numel ? numel : 0;
  std::call_once(index_once_, [&] {
    const auto& dev = *kernels_.device;
    cu::CubinResult r = cu::compile_to_cubin(kIndexAddSource, dev.cc_major, dev.cc_minor, options_);
    index_module_ = std::make_shared<cu::Module>(r.cubin);
    index_fns_[0] = index_module_->function("coil_index_add_f32");
    index_fns_[1] = index_module_->function("coil_index_add_f64");
  });
  const unsigned block = 256;
  const int64_t sms = std::max(1, kernels_.device->sm_count);
  // Shared sums: a few blocks per SM, each over a long stretch (its flush is numel atomics).
  // Global atomics: enough blocks to fill the device, grid-stride beyond.
  const int64_t want = (a.n + block - 1) / block;
  const int64_t blocks = std::max<int64_t>(1, std::min(want, a.shared_n ? 2 * sms : 8 * sms));
  void* o = out.data;
  void* v = values.data;
  void* ip[kMaxIndices] = {nullptr, nullptr, nullptr, nullptr};
  for (size_t j = 0; j < k; ++j) ip[j] = indices[j].data;
  void* args[7] = {&o, &v, &ip[0], &ip[1], &ip[2], &ip[3], &a};
  const cu::Driver* d = cu::Driver::get();
  d->check_run(d->cuLaunchKernel(index_fns_[self.dtype == DType::Float64 ? 1 : 0],
                                 static_cast<unsigned>(blocks), 1, 1, block, 1, 1,
                                 static_cast<unsigned>(a.shared_n * elem),
                                 static_cast<cu::CUstream>(stream), args, nullptr),
               "cuLaunchKernel index_put");
  return true;
}

}  // namespace coil::runtime::detail
