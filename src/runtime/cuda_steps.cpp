#include "cuda_steps.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

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
template <class T>
__device__ void copy_impl(const T* s, T* d, const Strided& st, int64_t n) {
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < n;
       l += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = l, so = 0, dof = 0;
    for (int k = st.rank - 1; k >= 0; --k) {
      const int64_t i = rem % st.sizes[k];
      rem /= st.sizes[k];
      so += i * st.src[k];
      dof += i * st.dst[k];
    }
    d[dof] = s[so];
  }
}
extern "C" __global__ void coil_copy1(const unsigned char* s, unsigned char* d, Strided st, int64_t n) { copy_impl(s, d, st, n); }
extern "C" __global__ void coil_copy2(const unsigned short* s, unsigned short* d, Strided st, int64_t n) { copy_impl(s, d, st, n); }
extern "C" __global__ void coil_copy4(const unsigned int* s, unsigned int* d, Strided st, int64_t n) { copy_impl(s, d, st, n); }
extern "C" __global__ void coil_copy8(const unsigned long long* s, unsigned long long* d, Strided st, int64_t n) { copy_impl(s, d, st, n); }
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
}

void CudaSteps::launch(int k, const std::vector<void*>& bufs, const int64_t* env,
                       const SizeCode* code, int num_size_symbols, const int64_t rng[2],
                       void* stream) const {
  const cu::Driver* d = cu::Driver::get();
  const cu::CudaKernel& info = kernels_.kernels[k];
  const int64_t work = eval_size(launches_[k].work, env, code);
  if (work <= 0) return;
  const int64_t row = eval_size(launches_[k].row_size, env, code);
  bool aligned = true;
  const size_t nb = info.buffers.size();
  void* ptrs[64];
  int64_t ints[64];
  void* args[128];
  if (nb > 64 || num_size_symbols + 2 > 64)
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
  }
  const bool tune =
      options_.cuda_autotune && work * std::max<int64_t>(row, 1) >= cu::kTuneMinElements;
  const cu::LaunchConfig c = tune ? tuned(k, work, row, aligned, args, stream)
                                  : cu::choose_launch(info, work, row, aligned, *kernels_.device);
  auto fn = static_cast<cu::CUfunction>(kernels_.functions[k][c.entry]);
  d->check_run(d->cuLaunchKernel(fn, c.grid, 1, 1, c.block, 1, 1, 0,
                                 static_cast<cu::CUstream>(stream), args, nullptr),
               ("cuLaunchKernel " + info.name).c_str());
}

cu::LaunchConfig CudaSteps::tuned(int k, int64_t work, int64_t row, bool aligned, void** args,
                                  void* stream) const {
  const cu::CudaKernel& info = kernels_.kernels[k];
  const std::string key = kernels_.key + " " + info.name + " " + std::to_string(work) + " " +
                          std::to_string(row) + " " + (aligned ? "a" : "u");
  {
    std::lock_guard<std::mutex> lock(tune_mu_);
    auto it = tuned_.find(key);
    if (it != tuned_.end()) return it->second;
  }
  namespace fs = std::filesystem;
  fs::path file;
  if (!options_.cache_dir.empty()) {
    backend::Sha256 h;
    h.update(key);
    file = fs::path(options_.cache_dir) / "cuda" / "launch" / (h.hex() + ".txt");
    std::ifstream in(file);
    cu::LaunchConfig c;
    if (in >> c.entry >> c.grid >> c.block) {
      std::lock_guard<std::mutex> lock(tune_mu_);
      tuned_[key] = c;
      return c;
    }
  }
  const cu::Driver* d = cu::Driver::get();
  auto s = static_cast<cu::CUstream>(stream);
  std::vector<cu::LaunchConfig> cands =
      cu::launch_candidates(info, work, row, aligned, *kernels_.device);
  cu::CUevent e0 = nullptr, e1 = nullptr;
  d->check_run(d->cuEventCreate(&e0, 0), "cuEventCreate");
  d->check_run(d->cuEventCreate(&e1, 0), "cuEventCreate");
  cu::LaunchConfig best = cands[0];
  float best_ms = 1e30f;
  for (const cu::LaunchConfig& c : cands) {
    auto fn = static_cast<cu::CUfunction>(kernels_.functions[k][c.entry]);
    auto launch = [&] {
      return d->cuLaunchKernel(fn, c.grid, 1, 1, c.block, 1, 1, 0, s, args, nullptr);
    };
    if (launch() != 0) continue;  // e.g. too many registers for 1024 threads
    d->cuEventRecord(e0, s);
    for (int r = 0; r < 3; ++r) launch();
    d->cuEventRecord(e1, s);
    d->cuEventSynchronize(e1);
    float ms = 0;
    d->cuEventElapsedTime(&ms, e0, e1);
    if (ms < best_ms) {
      best_ms = ms;
      best = c;
    }
  }
  d->cuEventDestroy(e0);
  d->cuEventDestroy(e1);
  if (!file.empty()) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    const fs::path tmp = file.string() + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
    {
      std::ofstream out(tmp);
      out << best.entry << " " << best.grid << " " << best.block << "\n";
    }
    fs::rename(tmp, file, ec);
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

void CudaSteps::copy(const RuntimeTensor& src, const RuntimeTensor& dst, void* stream) const {
  if (src.dtype != dst.dtype || src.sizes != dst.sizes || src.sizes.size() > 8)
    throw std::runtime_error(
        "coil: CUDA copy of a fallback result with another dtype, size or "
        "rank > 8");
  std::call_once(copy_once_, [&] {
    const auto& dev = *kernels_.device;
    cu::CubinResult r = cu::compile_to_cubin(kCopySource, dev.cc_major, dev.cc_minor, options_);
    copy_module_ = std::make_shared<cu::Module>(r.cubin);
    const char* names[4] = {"coil_copy1", "coil_copy2", "coil_copy4", "coil_copy8"};
    for (int i = 0; i < 4; ++i) copy_fns_[i] = copy_module_->function(names[i]);
  });
  Strided st{};
  st.rank = static_cast<int>(src.sizes.size());
  int64_t n = 1;
  for (int k = 0; k < st.rank; ++k) {
    st.sizes[k] = src.sizes[k];
    st.src[k] = src.strides[k];
    st.dst[k] = dst.strides[k];
    n *= src.sizes[k];
  }
  if (n == 0) return;
  const int size = dtype_size(src.dtype);
  const int which = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
  void* s = src.data;
  void* dd = dst.data;
  void* args[4] = {&s, &dd, &st, &n};
  const unsigned block = 256;
  const int64_t blocks = std::min<int64_t>((n + block - 1) / block, 65535);
  const cu::Driver* d = cu::Driver::get();
  d->check_run(d->cuLaunchKernel(copy_fns_[which], static_cast<unsigned>(blocks), 1, 1, block, 1, 1,
                                 0, static_cast<cu::CUstream>(stream), args, nullptr),
               "cuLaunchKernel copy");
}

}  // namespace coil::runtime::detail
