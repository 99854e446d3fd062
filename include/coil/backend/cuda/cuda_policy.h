// The CUDA backend's lowering and scheduling choices (coil/backend/policy/target_policy.h).
// Header-only so that the layer tests of lower and sched, which link neither backend, can
// lower and schedule as the CUDA backend does; docs/cuda-backend.md explains each choice.
#pragma once

#include "coil/backend/policy/target_policy.h"

namespace coil::backend::cuda {

inline const TargetPolicy& cuda_policy() {
  static const TargetPolicy p = [] {
    TargetPolicy t;
    t.name = "cuda";
    LoweringPolicy& l = t.lowering;
    l.indexing_through_host = true;  // the runtime's index kernels read host memory
    l.device_scatter = true;         // but accumulating f32/f64 index_put: the atomic scatter
    l.fused_attention_extern = true;
    l.matmul_epilogues = true;  // cuBLASLt epilogues, 16-byte aligned operands
    l.pad_matmul_operands = true;
    l.cat_by_copies = false;  // the host would run the Cat extern through ATen
    l.split_reductions = true;
    l.inline_variance_shift = true;
    l.realize_pool_input = false;
    l.native_convolutions = NativeConvolutions::DepthwiseOnly;  // dense ones: cuDNN
    l.native_convolutions_option = &CompileOptions::cuda_native_depthwise;
    l.masked_convolution_taps = true;
    l.convolution_bias_pointwise = true;
    l.cheap_recompute_cost = 24;  // memory-bound kernels: arithmetic is nearly free
    SchedulePolicy& s = t.schedule;
    s.unit_stride_inner_loops = false;
    s.join_small_kernels = true;
    s.adopt_host_results = true;
    s.max_work_per_outer_point = int64_t{1} << 16;
    s.pointwise_in_memory_order = true;
    s.split_to_row_readers = true;
    return t;
  }();
  return p;
}

}  // namespace coil::backend::cuda
