#include <gtest/gtest.h>

#include "coil/graph/dtype.h"
#include "coil/graph/tensor_meta.h"

namespace coil {
namespace {

TEST(DType, NamesAndProperties) {
  EXPECT_EQ(dtype_name(DType::Float32), "f32");
  EXPECT_EQ(dtype_name(DType::Bool), "b8");
  EXPECT_EQ(dtype_ctype(DType::Int64), "int64_t");
  EXPECT_EQ(dtype_torch_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(dtype_size(DType::Float16), 2);
  EXPECT_EQ(dtype_size(DType::Float64), 8);
  EXPECT_TRUE(dtype_is_floating(DType::BFloat16));
  EXPECT_FALSE(dtype_is_floating(DType::Int32));
  EXPECT_TRUE(dtype_is_integral(DType::Bool));
  EXPECT_EQ(dtype_from_name("i16"), DType::Int16);
  EXPECT_EQ(dtype_from_name("int16"), DType::Int16);
  EXPECT_EQ(dtype_from_name("torch.float32"), DType::Float32);
  EXPECT_EQ(dtype_from_name("f8"), std::nullopt);
  EXPECT_EQ(dtype_compute(DType::Float16), DType::Float32);
  EXPECT_EQ(dtype_compute(DType::BFloat16), DType::Float32);
  EXPECT_EQ(dtype_compute(DType::Int8), DType::Int8);
  EXPECT_EQ(device_name(Device::CUDA), "cuda");
  EXPECT_EQ(device_from_name("cpu"), Device::CPU);
  EXPECT_EQ(device_from_name("tpu"), std::nullopt);
}

// Expected values from torch.promote_types.
TEST(DType, PromotionMatchesPyTorch) {
  using D = DType;
  struct Case {
    D a, b, want;
  };
  const Case cases[] = {
      {D::Bool, D::Bool, D::Bool},           {D::Bool, D::UInt8, D::UInt8},
      {D::Bool, D::Float16, D::Float16},     {D::UInt8, D::Int8, D::Int16},
      {D::UInt8, D::Int16, D::Int16},        {D::UInt8, D::Int64, D::Int64},
      {D::Int8, D::Int32, D::Int32},         {D::Int32, D::Int64, D::Int64},
      {D::Int64, D::Float16, D::Float16},    {D::Int64, D::BFloat16, D::BFloat16},
      {D::Float16, D::BFloat16, D::Float32}, {D::Float16, D::Float32, D::Float32},
      {D::BFloat16, D::Float64, D::Float64}, {D::Float32, D::Float64, D::Float64},
      {D::UInt8, D::Float16, D::Float16},    {D::Int16, D::Int8, D::Int16},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(dtype_promote(c.a, c.b), c.want) << dtype_name(c.a) << "+" << dtype_name(c.b);
    EXPECT_EQ(dtype_promote(c.b, c.a), c.want) << dtype_name(c.b) << "+" << dtype_name(c.a);
  }
}

TEST(TensorMeta, ContiguityAndNumel) {
  sym::Context ctx;
  sym::Expr s0 = ctx.symbol("s0", {2, sym::kMaxSize});
  std::vector<sym::Expr> sizes = {ctx.constant(2), s0, ctx.constant(3)};
  auto st = contiguous_strides(ctx, sizes);
  EXPECT_EQ(st[2], ctx.one());
  EXPECT_EQ(st[1], ctx.constant(3));
  EXPECT_EQ(st[0], ctx.mul(s0, ctx.constant(3)));
  EXPECT_EQ(numel(ctx, sizes), ctx.mul(s0, ctx.constant(6)));
  TensorMeta m{DType::Float32, Device::CPU, sizes, st, nullptr};
  EXPECT_TRUE(is_contiguous(ctx, m));
  std::swap(m.strides[1], m.strides[2]);
  EXPECT_FALSE(is_contiguous(ctx, m));
  // Size-1 dims may have any stride.
  TensorMeta one{DType::Float32,
                 Device::CPU,
                 {ctx.constant(4), ctx.one()},
                 {ctx.one(), ctx.constant(99)},
                 nullptr};
  EXPECT_TRUE(is_contiguous(ctx, one));
}

}  // namespace
}  // namespace coil
