#include "cuda_conv.h"

#include <memory>

#include "coil/backend/cuda/cudnn.h"

namespace coil::runtime::detail {

namespace cu = backend::cuda;

namespace {

cu::ConvTensor operand(const RuntimeTensor& t) { return {t.data, t.sizes, t.strides}; }

}  // namespace

bool cudnn_conv_supported(bool backward, DType dtype, int rank, size_t num_inputs,
                          const kernels::ConvParams& p, const int64_t* mask) {
  const bool float_type =
      dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16;
  if (!float_type || p.transposed || rank < 3 || rank > 5) return false;
  if (backward ? (num_inputs != 3 || mask[2] != 0) : num_inputs != 2) return false;
  return cu::cudnn_unavailable_reason().empty();
}

bool run_cudnn_conv(bool backward, const kernels::ConvParams& p, const int64_t* mask,
                    const std::vector<RuntimeTensor>& ins, const std::vector<RuntimeTensor>& outs,
                    bool allow_tf32, bool measure, const CudaSteps& steps, const RunContext& rc,
                    std::string* why) {
  std::vector<std::shared_ptr<void>> keep;  // freed after the work is queued: stream-ordered
  const cu::WorkspaceFn workspace = [&](size_t bytes) {
    void* ptr = nullptr;
    keep.push_back(steps.allocate(bytes, rc, &ptr));
    return ptr;
  };
  cu::ConvArgs a;
  a.stride = p.stride;
  a.padding = p.padding;
  a.dilation = p.dilation;
  a.allow_tf32 = allow_tf32;
  a.measure = measure;
  if (!backward) {
    a.pass = cu::ConvPass::Forward;
    a.dtype = ins[0].dtype;
    a.x = operand(ins[0]);
    a.w = operand(ins[1]);
    a.y = operand(outs[0]);
    return cu::convolution(a, rc.stream, workspace, why);
  }
  // ins: grad_output, input, weight; outs: grad_input (mask[0]), grad_weight (mask[1]).
  a.dtype = ins[1].dtype;
  a.y = operand(ins[0]);
  size_t next = 0;
  if (mask[0] != 0) {
    a.pass = cu::ConvPass::BackwardData;
    a.x = operand(outs[next++]);
    a.w = operand(ins[2]);
    if (!cu::convolution(a, rc.stream, workspace, why)) return false;
  }
  if (mask[1] != 0) {
    a.pass = cu::ConvPass::BackwardFilter;
    a.x = operand(ins[1]);
    a.w = operand(outs[next++]);
    if (!cu::convolution(a, rc.stream, workspace, why)) return false;
  }
  return true;
}

}  // namespace coil::runtime::detail
