#include "cuda_steps.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "coil/backend/common/disk_cache.h"
#include "coil/backend/common/sha256.h"

#include "coil/support/error.h"

namespace coil::runtime::detail {

namespace cu = backend::cuda;

namespace {

// A strided copy of 1-, 2-, 4- or 8-byte elements (host fallback results whose layout differs
// from the buffer coil planned), rank <= 8.
constexpr const char* kCopySource = R"(
typedef long long int64_t;
struct Strided {
  int64_t sizes[8], src[8], dst[8];
  int rank;
};
// I is the index type: 32-bit division is several times cheaper than 64-bit on the GPU, and a
// copy is bound by its index arithmetic long before memory when it divides in 64 bits.
template <class T, class I>
__device__ void copy_impl(const T* s, T* d, const Strided& st, int64_t n) {
  for (I l = I(blockIdx.x) * blockDim.x + threadIdx.x; l < I(n); l += I(gridDim.x) * blockDim.x) {
    I rem = l, so = 0, dof = 0;
    for (int k = st.rank - 1; k >= 0; --k) {
      const I size = I(st.sizes[k]);
      const I i = rem % size;
      rem /= size;
      so += i * I(st.src[k]);
      dof += i * I(st.dst[k]);
    }
    d[dof] = s[so];
  }
}
// A 2-D copy into a [drows, dcols] block with row stride ld, zeros where the source [rows, cols]
// (strides s0, s1) has no element: the kernel of dense and padded-row copies, and the
// zero-padded operands of cuBLASLt products (src/runtime/cuda_matmul.cpp). Rows along grid.y,
// columns along grid.x; each thread loads 32 bytes' worth of columns (a block width apart, so coalesced
// when s1 == 1) before storing any, keeping several loads in flight; 64-bit arithmetic only
// once per row.
template <class T>
__device__ void pad_impl(const T* __restrict__ s, T* __restrict__ d, int64_t rows, int64_t cols,
                         int64_t s0, int64_t s1, int64_t drows, int64_t dcols, int64_t ld) {
  constexpr int kUnroll = 32 / sizeof(T);  // 32 bytes per thread (16 bf16, 8 float)
  const int c_in = int(cols), c_out = int(dcols), step1 = int(s1);
  const int span = int(gridDim.x) * int(blockDim.x) * kUnroll;
  for (int64_t r = blockIdx.y; r < drows; r += gridDim.y) {
    const bool in_row = r < rows;
    const T* sr = s + (in_row ? r * s0 : 0);
    T* dr = d + r * ld;
    for (int c0 = int(blockIdx.x) * int(blockDim.x) * kUnroll + int(threadIdx.x); c0 < c_out;
         c0 += span) {
      T v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * int(blockDim.x);
        v[u] = in_row && c < c_in ? sr[(long long)c * step1] : T(0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * int(blockDim.x);
        if (c < c_out) dr[c] = v[u];
      }
    }
  }
}
#define COIL_COPY(name, T) \
  extern "C" __global__ void name(const T* s, T* d, Strided st, int64_t n) { copy_impl<T, int64_t>(s, d, st, n); } \
  extern "C" __global__ void name##_i32(const T* s, T* d, Strided st, int64_t n) { copy_impl<T, unsigned>(s, d, st, n); } \
  extern "C" __global__ void name##_pad(const T* s, T* d, int64_t rows, int64_t cols, int64_t s0, int64_t s1, int64_t drows, int64_t dcols, int64_t ld) { pad_impl<T>(s, d, rows, cols, s0, s1, drows, dcols, ld); }
COIL_COPY(coil_copy1, unsigned char)
COIL_COPY(coil_copy2, unsigned short)
COIL_COPY(coil_copy4, unsigned int)
COIL_COPY(coil_copy8, unsigned long long)
)";

struct Strided {
  int64_t sizes[8], src[8], dst[8];
  int rank;
};

}  // namespace

CudaSteps::CudaSteps(CudaKernels kernels, SizeCompiler& sc, const CompileOptions& options)
    : kernels_(std::move(kernels)), options_(options) {
  COIL_CHECK(kernels_.device != nullptr) << "CUDA program without a device";
  for (const auto& k : kernels_.kernels)
    launches_.push_back({sc.compile(k.work), sc.compile(k.row_size)});
  last_.resize(kernels_.kernels.size());
}

void CudaSteps::launch(int k, const std::vector<void*>& bufs, const int64_t* env,
                       const SizeCode* code, int num_size_symbols, const int64_t rng[2],
                       const int64_t* rng_device, void* stream) const {
  const cu::Driver* d = cu::Driver::get();
  const cu::CudaKernel& info = kernels_.kernels[k];
  const int64_t work = eval_size(launches_[k].work, env, code);
  if (work <= 0) return;
  const int64_t row = eval_size(launches_[k].row_size, env, code);
  bool aligned = true;
  const size_t nb = info.buffers.size();
  // cuLaunchKernel takes up to 4 KiB of parameters, 8 bytes each here: 512 at most. (A bf16
  // training backward that computes values again from saved sources had a kernel of 64
  // buffers, over the earlier cap of 63.)
  constexpr size_t kMaxParams = 4096 / 8;
  void* ptrs[kMaxParams];
  int64_t ints[kMaxParams];
  void* args[kMaxParams];
  if (nb + 1 + static_cast<size_t>(num_size_symbols) + 2 > kMaxParams)
    throw std::runtime_error("coil: CUDA kernel with too many parameters");
  size_t na = 0;
  for (size_t i = 0; i < nb; ++i) {
    ptrs[i] = bufs[info.buffers[i]];
    aligned = aligned && (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 == 0);
    args[na++] = &ptrs[i];
  }
  int ni = 0;
  for (int s = 0; s < num_size_symbols; ++s) {
    ints[ni] = env[s];
    args[na++] = &ints[ni++];
  }
  if (info.random) {
    ints[ni] = rng[0];
    args[na++] = &ints[ni++];
    ints[ni] = rng[1];
    args[na++] = &ints[ni++];
    ptrs[nb] = const_cast<int64_t*>(rng_device);
    args[na++] = &ptrs[nb];
  }
  cu::LaunchConfig c;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(tune_mu_);
    const LastLaunch& l = last_[k];
    known = l.work == work && l.row == row && l.aligned == aligned;
    if (known) c = l.config;
  }
  if (!known) {
    const bool tune =
        options_.cuda_autotune && work * std::max<int64_t>(row, 1) >= cu::kTuneMinElements;
    const std::optional<cu::LaunchConfig> forced = forced_row_entry(info, work, row, aligned);
    c = forced ? *forced
        : tune ? tuned(k, work, row, aligned, args, stream)
               : cu::choose_launch(info, work, row, aligned, *kernels_.device);
    std::lock_guard<std::mutex> lock(tune_mu_);
    last_[k] = {work, row, aligned, c};
  }
  auto fn = static_cast<cu::CUfunction>(kernels_.functions[k][c.entry]);
  const cu::CUresult r = d->cuLaunchKernel(fn, c.grid, 1, 1, c.block, 1, 1, 0,
                                           static_cast<cu::CUstream>(stream), args, nullptr);
  if (r != 0) d->check_run(r, ("cuLaunchKernel " + info.name).c_str());
}

// Option cuda_row_entry (tests, A/B benchmarks): a row kernel that has the entry point of that
// suffix runs its first candidate configuration; nullopt where it has none.
std::optional<cu::LaunchConfig> CudaSteps::forced_row_entry(const cu::CudaKernel& info,
                                                            int64_t work, int64_t row,
                                                            bool aligned) const {
  const std::string& suffix = options_.cuda_row_entry;
  if (info.kind != cu::KernelKind::Rows || suffix.empty()) return std::nullopt;
  for (const cu::LaunchConfig& c :
       cu::launch_candidates(info, work, row, aligned, *kernels_.device)) {
    const std::string name = cu::entry_name(info, c.entry);
    if (name.size() > suffix.size() && name.ends_with(suffix)) return c;
  }
  return std::nullopt;
}

cu::LaunchConfig CudaSteps::tuned(int k, int64_t work, int64_t row, bool aligned, void** args,
                                  void* stream) const {
  const cu::CudaKernel& info = kernels_.kernels[k];
  // Copies of one kernel (CudaKernel::entry) share what was measured for it.
  const std::string& code = info.entry.empty() ? info.name : info.entry;
  const std::string key = kernels_.key + " " + code + " " + std::to_string(work) + " " +
                          std::to_string(row) + " " + (aligned ? "a" : "u");
  {
    std::lock_guard<std::mutex> lock(tune_mu_);
    auto it = tuned_.find(key);
    if (it != tuned_.end()) return it->second;
  }
  // The measured choice is kept in <cache_dir>/cuda/launch/<sha256 of key>.txt by the rules of
  // coil/backend/common/disk_cache.h, its digest bound to `key`. Its warnings are dropped here:
  // this runs at run time, where nothing reports them; the same cache folder's warnings were
  // already given when the cubins were compiled (compile_to_cubin, folder <cache_dir>/cuda).
  std::vector<std::string> cache_warnings;
  std::optional<backend::DiskCache> cache;
  std::string file;
  if (!options_.cache_dir.empty()) {
    backend::Sha256 h;
    h.update(key);
    file = h.hex() + ".txt";
    cache.emplace(options_.cache_dir, "cuda/launch", &cache_warnings);
    if (!cache->enabled()) cache.reset();
  }
  if (cache) {
    if (std::optional<backend::CacheEntry> hit = cache->load(file, key)) {
      std::istringstream in(hit->content);
      cu::LaunchConfig c;
      if (in >> c.entry >> c.grid >> c.block && c.entry >= 0 && c.entry < cu::kRowEntries &&
          c.grid > 0 && c.block > 0 && kernels_.functions[k][c.entry] != nullptr) {
        std::lock_guard<std::mutex> lock(tune_mu_);
        tuned_[key] = c;
        return c;
      }
      cache->evict(file, "not a launch configuration of this kernel");
    }
  }
  const cu::Driver* d = cu::Driver::get();
  auto s = static_cast<cu::CUstream>(stream);
  std::vector<cu::LaunchConfig> cands =
      cu::launch_candidates(info, work, row, aligned, *kernels_.device);
  // Each candidate: one untimed launch, then kReps launches timed one by one, keeping the
  // fastest (a single slow launch, a clock change or another stream's work must not decide);
  // the two best, where within 10% of each other, are timed again and the faster minimum wins.
  // (Before, one sum of three launches per candidate decided.) Launches run back to back, so
  // the L2 is not the one a model's previous kernel leaves; writing a buffer before each
  // timed launch (as Triton's do_bench does) was tried and moved resnet50_train's GPU time by
  // 0.03 ms, within noise, for a 128 MB allocation and memsets per tuned kernel on the first
  // call (docs/decisions.md).
  constexpr int kReps = 3;
  cu::CUevent ev[kReps + 1] = {};
  for (auto& e : ev) d->check_run(d->cuEventCreate(&e, 0), "cuEventCreate");
  auto measure = [&](const cu::LaunchConfig& c) -> float {
    auto fn = static_cast<cu::CUfunction>(kernels_.functions[k][c.entry]);
    auto launch = [&] {
      return d->cuLaunchKernel(fn, c.grid, 1, 1, c.block, 1, 1, 0, s, args, nullptr);
    };
    if (launch() != 0) return 1e30f;  // e.g. too many registers for 1024 threads
    d->cuEventRecord(ev[0], s);
    for (int r = 0; r < kReps; ++r) {
      launch();
      d->cuEventRecord(ev[r + 1], s);
    }
    d->cuEventSynchronize(ev[kReps]);
    float best = 1e30f;
    for (int r = 0; r < kReps; ++r) {
      float ms = 0;
      d->cuEventElapsedTime(&ms, ev[r], ev[r + 1]);
      best = std::min(best, ms);
    }
    return best;
  };
  std::vector<float> ms(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) ms[i] = measure(cands[i]);
  std::vector<size_t> order(cands.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  if (order.size() > 1 && ms[order[1]] < 1.1f * ms[order[0]]) {
    for (int j = 0; j < 2; ++j) ms[order[j]] = std::min(ms[order[j]], measure(cands[order[j]]));
    if (ms[order[1]] < ms[order[0]]) std::swap(order[0], order[1]);
  }
  const cu::LaunchConfig best = cands[order[0]];
  for (auto& e : ev) d->cuEventDestroy(e);
  if (cache) {
    cache->store(file, key,
                 std::to_string(best.entry) + " " + std::to_string(best.grid) + " " +
                     std::to_string(best.block) + "\n",
                 0600);
  }
  std::lock_guard<std::mutex> lock(tune_mu_);
  tuned_[key] = best;
  return best;
}

std::shared_ptr<void> CudaSteps::allocate(size_t bytes, const RunContext& ctx, void** ptr) const {
  if (ctx.allocate) return ctx.allocate(bytes, ptr);
  const cu::Driver* d = cu::Driver::get();
  cu::CUdeviceptr p = 0;
  d->check_run(d->cuMemAlloc(&p, std::max<size_t>(bytes, 16)), "cuMemAlloc");
  *ptr = reinterpret_cast<void*>(p);
  return std::shared_ptr<void>(*ptr, [](void* q) {
    if (const cu::Driver* dd = cu::Driver::get())
      dd->cuMemFree(reinterpret_cast<cu::CUdeviceptr>(q));
  });
}

void CudaSteps::load_copy_module() const {
  std::call_once(copy_once_, [&] {
    const auto& dev = *kernels_.device;
    cu::CubinResult r = cu::compile_to_cubin(kCopySource, dev.cc_major, dev.cc_minor, options_);
    copy_module_ = std::make_shared<cu::Module>(r.cubin);
    const char* names[4] = {"coil_copy1", "coil_copy2", "coil_copy4", "coil_copy8"};
    for (int i = 0; i < 4; ++i) {
      copy_fns_[3 * i] = copy_module_->function(names[i]);
      copy_fns_[3 * i + 1] = copy_module_->function(std::string(names[i]) + "_i32");
      copy_fns_[3 * i + 2] = copy_module_->function(std::string(names[i]) + "_pad");
    }
  });
}

namespace {
int size_class(DType t) {
  const int size = dtype_size(t);
  return size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
}
}  // namespace

void CudaSteps::pad_copy(const void* src, DType dtype, int64_t rows, int64_t cols, int64_t s0,
                         int64_t s1, void* dst, int64_t drows, int64_t dcols, int64_t ld,
                         void* stream) const {
  load_copy_module();
  if (drows <= 0 || dcols <= 0) return;
  const unsigned block = 256;
  // The kernel counts columns in int: rows must stay below 2^30 elements.
  if (dcols >= (int64_t{1} << 30) || cols >= (int64_t{1} << 30) || s1 >= (int64_t{1} << 30))
    throw std::runtime_error("coil: CUDA pad copy with rows of 2^30 elements or more");
  // 32 bytes of columns per thread (kUnroll in the kernel), at most 2^30 columns per
  // grid-stride step (so the int counters never wrap); rows over grid.y, looping past 65535.
  const int64_t per_block = int64_t{block} * (32 / dtype_size(dtype));
  const int64_t gx = std::max<int64_t>(
      1, std::min((dcols + per_block - 1) / per_block, (int64_t{1} << 30) / per_block));
  const int64_t gy = std::min<int64_t>(drows, 65535);
  void* args[9] = {const_cast<void**>(&src), &dst, &rows, &cols, &s0, &s1, &drows, &dcols, &ld};
  const cu::Driver* d = cu::Driver::get();
  d->check_run(d->cuLaunchKernel(copy_fns_[3 * size_class(dtype) + 2], static_cast<unsigned>(gx),
                                 static_cast<unsigned>(gy), 1, block, 1, 1, 0,
                                 static_cast<cu::CUstream>(stream), args, nullptr),
               "cuLaunchKernel pad copy");
}

void CudaSteps::copy(const RuntimeTensor& src, const RuntimeTensor& dst, void* stream) const {
  if (src.dtype != dst.dtype || src.sizes != dst.sizes || src.sizes.size() > 8)
    throw std::runtime_error(
        "coil: CUDA copy of a fallback result with another dtype, size or "
        "rank > 8");
  load_copy_module();
  // Size-1 dims dropped, then neighbours merged where both sides step through them as one
  // (a dense-to-dense copy becomes rank 1, a padded-rows copy rank 2).
  std::vector<int64_t> sz, ss, ds;
  int64_t n = 1;
  for (size_t k = 0; k < src.sizes.size(); ++k) {
    n *= src.sizes[k];
    if (src.sizes[k] == 1) continue;
    if (!sz.empty() && ss.back() == src.strides[k] * src.sizes[k] &&
        ds.back() == dst.strides[k] * src.sizes[k]) {
      sz.back() *= src.sizes[k];
      ss.back() = src.strides[k];
      ds.back() = dst.strides[k];
      continue;
    }
    sz.push_back(src.sizes[k]);
    ss.push_back(src.strides[k]);
    ds.push_back(dst.strides[k]);
  }
  if (n == 0) return;
  Strided st{};
  st.rank = static_cast<int>(sz.size());
  // 32-bit indices when every element offset either side can reach stays below 2^31 (the
  // grid-stride increment must not wrap an unsigned index).
  int64_t reach_s = 1, reach_d = 1;
  bool non_negative = true;
  for (int k = 0; k < st.rank; ++k) {
    st.sizes[k] = sz[k];
    st.src[k] = ss[k];
    st.dst[k] = ds[k];
    non_negative = non_negative && ss[k] >= 0 && ds[k] >= 0;
    reach_s += (sz[k] - 1) * ss[k];
    reach_d += (sz[k] - 1) * ds[k];
  }
  // Rows of unit stride on both sides (dense, or rows padded on one side): the 2-D kernel.
  if (st.rank <= 2 && (st.rank == 0 || (ss.back() == 1 && ds.back() == 1))) {
    const int64_t rows = st.rank == 2 ? sz[0] : 1, cols = st.rank == 0 ? 1 : sz.back();
    const int64_t s0 = st.rank == 2 ? ss[0] : 0, d0 = st.rank == 2 ? ds[0] : cols;
    if (d0 >= cols && cols < (int64_t{1} << 30)) {
      pad_copy(src.data, src.dtype, rows, cols, s0, 1, dst.data, rows, cols, d0, stream);
      return;
    }
  }
  const bool narrow = non_negative && std::max({n, reach_s, reach_d}) < (int64_t{1} << 31);
  const int which = 3 * size_class(src.dtype) + (narrow ? 1 : 0);
  void* s = src.data;
  void* dd = dst.data;
  void* args[4] = {&s, &dd, &st, &n};
  const unsigned block = 256;
  const int64_t blocks = std::min<int64_t>((n + block - 1) / block, 65535 * 4);
  const cu::Driver* d = cu::Driver::get();
  d->check_run(d->cuLaunchKernel(copy_fns_[which], static_cast<unsigned>(blocks), 1, 1, block, 1, 1,
                                 0, static_cast<cu::CUstream>(stream), args, nullptr),
               "cuLaunchKernel copy");
}

}  // namespace coil::runtime::detail
