// cuDNN's loader and argument checks. The convolutions themselves run in
// tests/python/test_cuda_conv.py on the GPU machine, against eager PyTorch.
#include "coil/backend/cuda/cudnn.h"

#include <gtest/gtest.h>

namespace coil::testing {
namespace {

namespace cu = backend::cuda;

cu::ConvArgs valid_2d() {
  cu::ConvArgs a;
  a.x = {nullptr, {2, 4, 8, 8}, {256, 64, 8, 1}};
  a.w = {nullptr, {6, 4, 3, 3}, {36, 9, 3, 1}};
  a.y = {nullptr, {2, 6, 6, 6}, {216, 36, 6, 1}};
  a.stride = {1, 1};
  a.padding = {0, 0};
  a.dilation = {1, 1};
  return a;
}

// Without cuDNN every call says why (and the runtime then takes ATen's path); with it,
// malformed arguments are refused before any descriptor is built. Nothing here touches memory.
TEST(Cudnn, RefusesWithAReasonInsteadOfFailing) {
  const std::string missing = cu::cudnn_unavailable_reason();
  auto why_of = [](const cu::ConvArgs& a) {
    std::string why;
    EXPECT_FALSE(cu::convolution(
        a, nullptr, [](size_t) { return nullptr; }, &why));
    return why;
  };
  cu::ConvArgs wrong_rank = valid_2d();
  wrong_rank.stride = {1};
  cu::ConvArgs int_type = valid_2d();
  int_type.dtype = DType::Int64;
  cu::ConvArgs empty = valid_2d();
  empty.x.sizes[0] = 0;
  if (!missing.empty()) {
    EXPECT_NE(missing.find("libcudnn"), std::string::npos) << missing;
    EXPECT_EQ(why_of(wrong_rank), missing);
    return;
  }
  EXPECT_EQ(why_of(wrong_rank), "convolution ranks");
  EXPECT_EQ(why_of(int_type), "dtype " + std::string(dtype_name(DType::Int64)));
  EXPECT_EQ(why_of(empty), "an empty tensor");
}

}  // namespace
}  // namespace coil::testing
