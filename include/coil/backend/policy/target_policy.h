// TargetPolicy: the device-dependent choices that lowering (src/lower) and scheduling
// (src/sched) make, as plain data a backend returns (coil/backend/api/backend.h).
//
// Lowering and scheduling never test a device: they read the policy of the backend that will
// generate the code. The policy lives in its own small layer (backend/policy, below lower) so
// that those layers can read it without depending on the backends above them; each backend
// fills one in its own folder (cpu: coil/backend/cpu/cpu_policy.h, cuda: coil/backend/cuda/
// cuda_policy.h, portable: src/backend/portable/).
//
// The defaults are a host target whose extern kernels (products, convolutions, scatters) run
// on host memory through the runtime's library kernels or ATen: the CPU backend's choices. A
// new backend for a host starts from `TargetPolicy{}` and sets its name.
#pragma once

#include <string>

#include "coil/graph/dtype.h"
#include "coil/support/options.h"

namespace coil::backend {

// Which convolutions the lowering computes as generated loops (src/lower/conv_native.cpp)
// instead of an extern convolution.
enum class NativeConvolutions : uint8_t {
  None,           // every convolution is an extern
  AllKinds,       // 1x1 as products, depthwise as loops, small dense ones over gathered windows
  DepthwiseOnly,  // depthwise only (the library's dense kernels are faster: cuDNN)
};

// Lowering (src/lower): which extern provider runs an op, and how values reach it.
struct LoweringPolicy {
  // Indexing ops that the runtime's own extern kernels (runtime/extern_index.cpp) run on host
  // memory -- index_put, scatter, scatter_add, embedding backward -- go to the host's ATen op
  // instead (the whole node as a Fallback extern): the GPU, whose memory those kernels cannot
  // read. A target with its own scatter sets device_scatter below.
  bool indexing_through_host = false;
  // With indexing_through_host: an accumulating index_put (and embedding backward) of float32
  // or float64 values runs on the target's own atomic scatter (runtime/cuda_index.cpp).
  bool device_scatter = false;
  // ATen's fused attention ops (_scaled_dot_product_*_attention) lower to host externs
  // (src/lower/attention.cpp); without it they are a CompileError (the CPU decomposes them
  // before they reach coil).
  bool fused_attention_extern = false;
  // Products: an activation that only a product reads runs in the library's epilogue
  // (cuBLASLt), and products / operands whose rows are not 16-byte aligned are padded
  // (src/lower/linalg.cpp).
  bool matmul_epilogues = false;
  bool pad_matmul_operands = false;
  // More than max_pointwise_cat pieces: a Cat extern copies them (CPU) instead of a where-chain
  // inlined into every reader.
  bool cat_by_copies = true;
  // Large reductions split into partial sums over chunks, and a variance's squared deviations
  // come from the same pass as the sum (src/lower/split_reduction.h, reduction.cpp).
  bool split_reductions = false;
  // A variance's shift (its row's first element) is loaded by the readers instead of
  // realized, where the input is in memory (GPU: a cached load the row shares).
  bool inline_variance_shift = false;
  // Max-pooling realizes a computed input once instead of recomputing it per tap (CPU).
  bool realize_pool_input = true;
  // Native convolutions and the option that turns them off.
  NativeConvolutions native_convolutions = NativeConvolutions::AllKinds;
  bool CompileOptions::*native_convolutions_option = &CompileOptions::cpu_native_convolutions;
  // The convolution library takes no bias (cuDNN through coil's call): an extern
  // convolution's bias is a pointwise add that fuses into its readers, and a bias gradient a
  // generated reduction, so that the convolution stays on the library, not the host.
  bool convolution_bias_pointwise = false;
  // Native convolution taps load under a mask instead of reading a zero-padded copy (a
  // predicated load is nearly free on a GPU; the padded copy vectorizes on a CPU).
  bool masked_convolution_taps = false;
  // A value with several readers that reads at most one buffer element per element (the rest
  // broadcast: BatchNorm's affine over per-channel statistics) stays inline up to this cost
  // (realize.h): each reader then loads that buffer instead of the realized value, the same
  // bytes, so realizing it would only add a write and a buffer. 0: the usual rule.
  int cheap_recompute_cost = 0;
};

// Scheduling (src/sched): what may fuse and how memory is planned.
struct SchedulePolicy {
  // A pointwise member may not make a kernel's inner loops store across memory (the CPU
  // emitter vectorizes the innermost loop: fusion.cpp strided_inner_loops).
  bool unit_stride_inner_loops = true;
  // A small node with nothing to share joins one of the last kernels over the same outer
  // ranges: its time is a launch (GPU), so two launches become one.
  bool join_small_kernels = false;
  // The result of an op the host runs (a Fallback extern: ATen allocates it in device memory)
  // is adopted as its storage by the runtime, so the memory plan gives it a storage of its
  // own instead of a freed one (which would cost a device copy of the result).
  bool adopt_host_results = false;
  // A node may not join a kernel whose outer points would each run more than this many of its
  // elements, where the kernel ran fewer before (fusion.cpp: serial_work_per_point): a GPU
  // kernel runs its outer points in parallel and each one's inner loops in one block, so a
  // [32, 32, 112, 112] pointwise joined to a [32]-point reduction ran on 32 blocks
  // (EfficientNet-B0's slowest kernel). 0: no limit.
  int64_t max_work_per_outer_point = 0;
  // Pointwise nodes iterate in their output's memory order before fusion (align.cpp:
  // in_memory_order), so that a value stored through a transposed layout (a
  // product's operand) meets the kernels over the same memory: the GPU emitter picks its
  // own loop order, so only fusion sees the change.
  bool pointwise_in_memory_order = false;
  // A pointwise node is split to the rows of a reduction that reads the same input (align.cpp:
  // split_to_row_reader), so that the two may share one row kernel and one read of it.
  bool split_to_row_readers = false;
};

struct TargetPolicy {
  std::string name = "cpu";  // the backend's registry name
  LoweringPolicy lowering;
  SchedulePolicy schedule;
};

}  // namespace coil::backend
