// The CUDA side of a Program (private to the runtime): launching generated kernels with their
// launch configuration, device allocations, and device copies of host-fallback results.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coil/backend/cuda/launch.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/runtime/program.h"
#include "size_expr.h"

namespace coil::runtime::detail {

class CudaSteps {
 public:
  CudaSteps(CudaKernels kernels, SizeCompiler& sc, const CompileOptions& options);

  // Launches kernel k on `stream` (bufs: per BufferId base pointers; env: evaluated slots, the
  // first `num_size_symbols` are the kernels' size parameters; rng: {seed, offset};
  // rng_device: RunContext::rng_device, may be null).
  void launch(int k, const std::vector<void*>& bufs, const int64_t* env, const SizeCode* code,
              int num_size_symbols, const int64_t rng[2], const int64_t* rng_device,
              void* stream) const;

  // A device block: through ctx.allocate (PyTorch's caching allocator) when given, else
  // cuMemAlloc (freed with cuMemFree when the owner goes).
  std::shared_ptr<void> allocate(size_t bytes, const RunContext& ctx, void** ptr) const;

  // dst = src on the device (same dtype and sizes, any strides).
  void copy(const RuntimeTensor& src, const RuntimeTensor& dst, void* stream) const;

  // dst[r * ld + c] for r < drows, c < dcols: src[r * s0 + c * s1] inside the source's
  // [rows, cols], zero outside (a dense or zero-padded 2-D copy; elements of `dtype`).
  void pad_copy(const void* src, DType dtype, int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                void* dst, int64_t drows, int64_t dcols, int64_t ld, void* stream) const;

  // out = self, then out[indices at dims] += values (index_put with accumulate=True), by
  // atomic adds in a kernel of coil's own (cuda_index.cpp). False, with *why, for what it does
  // not cover (dtypes other than float32/float64, int32 indices, more than 4 indices, results
  // of rank > 8): the caller runs ATen's instead.
  bool index_put_accumulate(const RuntimeTensor& self, const std::vector<RuntimeTensor>& indices,
                            const std::vector<int64_t>& dims, const RuntimeTensor& values,
                            const RuntimeTensor& out, void* stream, std::string* why) const;

  const backend::cuda::DeviceInfo& device() const { return *kernels_.device; }
  const CompileOptions& options() const { return options_; }

 private:
  struct Launch {
    SizeExpr work, row_size;
  };
  // The configuration kernel k last launched with, at those sizes (a step launches at the same
  // sizes call after call: no key string, map lookup or driver-error text per launch).
  struct LastLaunch {
    int64_t work = -1, row = -1;
    bool aligned = false;
    backend::cuda::LaunchConfig config;
  };
  // The measured best configuration for kernel k at these sizes (memory, then the disk cache,
  // then measuring launch_candidates on `stream`; every candidate recomputes the same output).
  std::optional<backend::cuda::LaunchConfig> forced_row_entry(const backend::cuda::CudaKernel& info,
                                                              int64_t work, int64_t row,
                                                              bool aligned) const;
  backend::cuda::LaunchConfig tuned(int k, int64_t work, int64_t row, bool aligned, void** args,
                                    void* stream) const;
  mutable std::mutex tune_mu_;
  mutable std::map<std::string, backend::cuda::LaunchConfig> tuned_;
  mutable std::vector<LastLaunch> last_;  // per kernel, under tune_mu_
  CudaKernels kernels_;
  std::vector<Launch> launches_;
  CompileOptions options_;
  void load_copy_module() const;
  mutable std::once_flag copy_once_;
  mutable std::shared_ptr<backend::cuda::Module> copy_module_;
  mutable std::array<backend::cuda::CUfunction, 12> copy_fns_{};  // per size: 64-bit, 32-bit, pad
  mutable std::once_flag index_once_;
  mutable std::shared_ptr<backend::cuda::Module> index_module_;
  mutable std::array<backend::cuda::CUfunction, 2> index_fns_{};  // float32, float64
};

}  // namespace coil::runtime::detail
