// CUDA products (private to the runtime): coil's GEMM template where it was measured faster
// (option cuda_gemm_templates, mode="max-autotune"; or forced, cuda_gemm_force), else cuBLASLt
// with operands repacked where their layout would force cuBLASLt onto its 1-element-aligned
// kernels.
#pragma once

#include <string>

#include "coil/backend/cuda/cublaslt.h"
#include "cuda_steps.h"

namespace coil::runtime::detail {

// Runs `g` on rc.stream. With cuda_gemm_templates, the first product of each key (device name,
// dtype, sizes, strides, layouts, epilogue) times cuBLASLt and a few template tile shapes on
// its own operands into scratch outputs, drops a candidate whose result disagrees with
// cuBLASLt's, and keeps the fastest (the template only where faster), in memory and in
// <cache_dir>/cuda/gemm; a template that fails to compile or launch falls back to cuBLASLt,
// recorded in gemm_template_events() (gemm_template.h). cuBLASLt's fast kernels load 16 bytes at a
// time, so they need every leading dimension, base pointer and contiguous extent aligned to 16
// bytes; an odd dimension (GPT-2's 50257-word vocabulary) otherwise gets a kernel that ran 3-7x
// slower on the H100. A large product with such a dimension runs on zero-padded copies of its
// operands (and into a padded output that is then copied out), as Inductor's pad_mm does. False
// (with *why) where cuBLASLt cannot take the product at all.
bool run_gemm(const backend::cuda::GemmArgs& g, const CudaSteps& steps, const RunContext& rc,
              std::string* why);

}  // namespace coil::runtime::detail
