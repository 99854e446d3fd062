// Scaled-dot-product attention on CUDA: ATen's fused kernels (flash, memory-efficient, cuDNN)
// as extern kernels run through the host callback, forward and backward.
//
// F.scaled_dot_product_attention reaches AOTAutograd as whichever fused op PyTorch's dispatcher
// picks for the inputs (on the H100: cuDNN for bf16/f16, memory-efficient for f32), and the
// backward graph holds that op's own backward, which reads the forward's logsumexp and RNG
// state. Re-implementing them in generated code would lose to the fused kernels (they never
// store the L x L scores), so coil keeps the pair as externs, as it does matmuls: the fastest
// implementation available is the one PyTorch picked. On the CPU the fused op is
// `_scaled_dot_product_flash_attention_for_cpu`, which python/coil/decomp_sdpa.py decomposes
// into coil's primitives before it reaches here.
#include <string>

#include "coil/lower/lowering.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {
namespace {

std::vector<TensorValue> lower_fused_attention(LoweringContext& ctx, const Node& node) {
  COIL_USER_CHECK(ctx.target().fused_attention_extern)
      << node.op() << ": ATen's fused attention kernel is a CUDA extern; on the CPU "
      << "scaled_dot_product_attention goes through the flash_attention_for_cpu decomposition";
  // ATen allocates every output of these ops (never a view of an input): the runtime may
  // adopt them into storages the memory plan shares (no copy of the attention's result).
  return detail::aten_extern(ctx, node, /*fresh_outputs=*/true);
}

}  // namespace

void register_attention_lowerings(LoweringRegistry& r) {
  for (const char* op : {
           "aten._scaled_dot_product_flash_attention.default",
           "aten._scaled_dot_product_flash_attention_backward.default",
           "aten._scaled_dot_product_efficient_attention.default",
           "aten._scaled_dot_product_efficient_attention_backward.default",
           "aten._scaled_dot_product_cudnn_attention.default",
           "aten._scaled_dot_product_cudnn_attention_backward.default",
       }) {
    r.add(op, lower_fused_attention);
  }
}

}  // namespace coil::lower
