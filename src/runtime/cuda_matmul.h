// cuBLASLt products with operands repacked where their layout would force cuBLASLt onto its
// 1-element-aligned kernels (private to the runtime).
#pragma once

#include <string>

#include "coil/backend/cuda/cublaslt.h"
#include "cuda_steps.h"

namespace coil::runtime::detail {

// Runs `g` on rc.stream. cuBLASLt's fast kernels load 16 bytes at a time, so they need every
// leading dimension, base pointer and contiguous extent aligned to 16 bytes; an odd dimension
// (GPT-2's 50257-word vocabulary) otherwise gets a kernel that ran 3-7x slower on the H100. A
// large product with such a dimension runs on zero-padded copies of its operands (and into a
// padded output that is then copied out), as Inductor's pad_mm does. False (with *why) where
// cuBLASLt cannot take the product at all.
bool run_gemm(const backend::cuda::GemmArgs& g, const CudaSteps& steps, const RunContext& rc,
              std::string* why);

}  // namespace coil::runtime::detail
