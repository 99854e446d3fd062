// The compiled kernels of a CUDA graph, what the CUDA backend's build() hands the runtime's
// CUDA steps (KernelModule::device_kernels): per kernel its description and the CUfunction of
// each entry point (launch.h: entry_name).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/backend/cuda/launch.h"

namespace coil::backend::cuda {

struct CompiledKernels {
  std::shared_ptr<void> module;  // keeps the loaded module alive
  std::vector<CudaKernel> kernels;
  std::vector<std::array<void*, kRowEntries>> functions;
  const DeviceInfo* device = nullptr;
  std::string key;  // identifies the module (hash of its source and NVRTC command), for caches
};

}  // namespace coil::backend::cuda
