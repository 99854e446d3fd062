// The CUDA backend (coil/backend/api/backend.h): CUDA C++ (emit_cuda.h) compiled by NVRTC
// (nvrtc.h) into cubins loaded through the driver API, run by the runtime's CUDA steps;
// lowering and scheduling as cuda_policy.h says. docs/cuda-backend.md.
#pragma once

#include <memory>

#include "coil/backend/api/backend.h"

namespace coil::backend::cuda {

std::unique_ptr<Backend> make_cuda_backend();

}  // namespace coil::backend::cuda
