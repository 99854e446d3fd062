// Convolution externs on the GPU through cuDNN (private to the runtime).
#pragma once

#include <string>
#include <vector>

#include "coil/runtime/extern_kernels.h"
#include "cuda_steps.h"

namespace coil::runtime::detail {

// Whether cuDNN may take a Convolution (`backward` false: inputs {input, weight}) or a
// ConvolutionBackward (inputs {grad_output, input, weight}, `mask` its output_mask) of this
// dtype and parameters: no bias, no bias gradient, not transposed (those stay on the host).
bool cudnn_conv_supported(bool backward, DType dtype, int rank, size_t num_inputs,
                          const kernels::ConvParams& p, const int64_t* mask);

// Runs it on rc.stream (outs: the output, or the gradients the mask asks for, in order); the
// workspace comes from the run's allocator. False (with *why) where cuDNN has no plan for it.
bool run_cudnn_conv(bool backward, const kernels::ConvParams& p, const int64_t* mask,
                    const std::vector<RuntimeTensor>& ins, const std::vector<RuntimeTensor>& outs,
                    bool allow_tf32, bool measure, const CudaSteps& steps, const RunContext& rc,
                    std::string* why);

}  // namespace coil::runtime::detail
