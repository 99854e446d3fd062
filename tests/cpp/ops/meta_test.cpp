// Meta functions against hand-computed PyTorch results (torch.result_type, broadcasting, the
// strides PyTorch gives views and TensorIterator outputs).
#include <gtest/gtest.h>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/ops/meta_util.h"
#include "coil/ops/registry.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

using Metas = std::vector<std::string>;

// Output metas (printed) of `call` applied to graph inputs declared by `inputs`.
Metas infer(const std::string& inputs, const std::string& call) {
  sym::Context ctx;
  auto g = parse_graph("graph(" + inputs + "):\n  " + call + "\n  return ()\n", ctx);
  Metas out;
  for (const TensorMeta& m : infer_meta(ctx, *g->nodes().at(0))) out.push_back(print_meta(ctx, m));
  return out;
}
std::string infer1(const std::string& inputs, const std::string& call) {
  Metas m = infer(inputs, call);
  EXPECT_EQ(m.size(), 1u);
  return m.empty() ? "" : m[0];
}

TEST(Registry, FindsOpsByOverloadName) {
  const OpDef* add = find_op("aten.add.Tensor");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->name, "aten.add.Tensor");
  EXPECT_EQ(add->family, OpFamily::Pointwise);
  EXPECT_EQ(find_op("aten.permute.default")->family, OpFamily::View);
  EXPECT_EQ(find_op("aten.sum.dim_IntList")->family, OpFamily::Reduction);
  EXPECT_EQ(find_op("aten.mm.default")->family, OpFamily::Linalg);
  EXPECT_EQ(find_op("aten.cat.default")->family, OpFamily::Shape);
  EXPECT_NE(find_op("prims.convert_element_type.default"), nullptr);
  EXPECT_EQ(find_op("aten.add"), nullptr);
  EXPECT_EQ(find_op("aten.convolution.default")->family, OpFamily::Other);
  EXPECT_EQ(find_op("aten.nonexistent.default"), nullptr);
  const auto& ops = op_registry().ops();
  EXPECT_GT(ops.size(), 100u);
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_LT(ops[i - 1].name, ops[i].name);
}

TEST(PointwiseMeta, Broadcasting) {
  EXPECT_EQ(infer1("%0: f32[4, 1, 3], %1: f32[5, 1]", "aten.add.Tensor(%0, %1)"), "f32[4, 5, 3]");
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[]", "aten.mul.Tensor(%0, %1)"), "f32[3]");
  EXPECT_EQ(infer1("%0: f32[s0, 1], %1: f32[1, s1]", "aten.sub.Tensor(%0, %1)"), "f32[s0, s1]");
  EXPECT_EQ(infer1("%0: b8[2, 1, 1], %1: f32[3, 1], %2: f32[4]", "aten.where.self(%0, %1, %2)"),
            "f32[2, 3, 4]");
  EXPECT_THROW(infer("%0: f32[3], %1: f32[4]", "aten.add.Tensor(%0, %1)"), CompileError);
}

TEST(PointwiseMeta, TypePromotionWithScalars) {
  // torch.result_type semantics: Python scalars only count through their category.
  EXPECT_EQ(infer1("%0: i32[2]", "aten.add.Tensor(%0, 2.5)"), "f32[2]");
  EXPECT_EQ(infer1("%0: i32[2]", "aten.add.Tensor(%0, 2)"), "i32[2]");
  EXPECT_EQ(infer1("%0: f16[2]", "aten.mul.Tensor(%0, 2.5)"), "f16[2]");
  EXPECT_EQ(infer1("%0: b8[2]", "aten.add.Tensor(%0, 1)"), "i64[2]");
  EXPECT_EQ(infer1("%0: b8[2]", "aten.add.Tensor(%0, true)"), "b8[2]");
  EXPECT_EQ(infer1("%0: u8[2], %1: i8[2]", "aten.add.Tensor(%0, %1)"), "i16[2]");
  EXPECT_EQ(infer1("%0: f16[2], %1: bf16[2]", "aten.add.Tensor(%0, %1)"), "f32[2]");
  // Zero-dim tensors: only a higher category wins.
  EXPECT_EQ(infer1("%0: i32[2], %1: i64[]", "aten.add.Tensor(%0, %1)"), "i32[2]");
  EXPECT_EQ(infer1("%0: i32[2], %1: f64[]", "aten.add.Tensor(%0, %1)"), "f64[2]");
  EXPECT_EQ(infer1("%0: f32[2], %1: f64[]", "aten.add.Tensor(%0, %1)"), "f32[2]");
  EXPECT_EQ(infer1("%0: f64[], %1: f16[]", "aten.add.Tensor(%0, %1)"), "f64[]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.pow.Tensor_Scalar(%0, 2)"), "i64[4]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.pow.Tensor_Scalar(%0, 0.5)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.pow.Scalar(2.0, %0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i32[4], %1: i64[4]", "aten.maximum.default(%0, %1)"), "i64[4]");
}

TEST(PointwiseMeta, DivisionComparisonsAndUnary) {
  EXPECT_EQ(infer1("%0: i64[4], %1: i64[4]", "aten.div.Tensor(%0, %1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f64[4]", "aten.div.Tensor(%0, 2)"), "f64[4]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.div.Tensor_mode(%0, 2, rounding_mode=\"floor\")"), "i64[4]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.div.Tensor_mode(%0, 2, rounding_mode=None)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f32[4], %1: f32[2, 1]", "aten.lt.Tensor(%0, %1)"), "b8[2, 4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.eq.Scalar(%0, 0.5)"), "b8[4]");
  EXPECT_EQ(infer1("%0: i64[4]", "aten.exp.default(%0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: b8[4]", "aten.sigmoid.default(%0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: bf16[4]", "aten.rsqrt.default(%0)"), "bf16[4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.neg.default(%0)"), "i32[4]");
  EXPECT_EQ(infer1("%0: f16[4]", "aten.gelu.default(%0, approximate=\"tanh\")"), "f16[4]");
  EXPECT_EQ(infer1("%0: b8[4], %1: i32[4]", "aten.where.self(%0, %1, 0.5)"), "f32[4]");
  EXPECT_EQ(infer1("%0: b8[4], %1: f16[4]", "aten.where.self(%0, %1, 0.0)"), "f16[4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.clamp.default(%0, 0.5)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.clamp.default(%0, 0, 6)"), "i32[4]");
  EXPECT_EQ(infer1("%0: f32[4]", "aten.clamp.default(%0, None, 6.0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f32[4]", "prims.convert_element_type.default(%0, dtype(f16))"), "f16[4]");
  EXPECT_EQ(
      infer1("%0: f32[4]", "aten._to_copy.default(%0, dtype=dtype(i32), device=device(cuda))"),
      "i32[4]@cuda");
}

TEST(PointwiseMeta, OutputLayoutFollowsInputs) {
  // torch.randn(3, 4).t() + 1 keeps the transposed layout.
  EXPECT_EQ(infer1("%0: f32[4, 3]{1, 4}", "aten.add.Tensor(%0, 1)"), "f32[4, 3]{1, 4}");
  // The first operand decides when layouts disagree.
  EXPECT_EQ(infer1("%0: f32[4, 3], %1: f32[4, 3]{1, 4}", "aten.add.Tensor(%0, %1)"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[4, 3]{1, 4}, %1: f32[4, 3]", "aten.add.Tensor(%0, %1)"),
            "f32[4, 3]{1, 4}");
  // Broadcast dims do not vote: torch.randn(4).expand(3, 4).exp() is row-major.
  EXPECT_EQ(infer1("%0: f32[3, 4]{0, 1}", "aten.exp.default(%0)"), "f32[3, 4]");
  // Channels-last NCHW input: (N, C, H, W) sizes with strides (H*W*C, 1, W*C, C).
  EXPECT_EQ(infer1("%0: f32[2, 3, 4, 5]{60, 1, 15, 3}", "aten.relu.default(%0)"),
            "f32[2, 3, 4, 5]{60, 1, 15, 3}");
  // Casts preserve the layout (memory_format=preserve_format).
  EXPECT_EQ(infer1("%0: f32[4, 3]{1, 4}", "prims.convert_element_type.default(%0, dtype(f16))"),
            "f16[4, 3]{1, 4}");
}

TEST(ReductionMeta, DimsKeepdimAndDtypes) {
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.sum.dim_IntList(%0, [1])"), "f32[2, 4]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.sum.dim_IntList(%0, [-1, 0], true)"), "f32[1, 3, 1]");
  EXPECT_EQ(infer1("%0: i32[2, 3]", "aten.sum.dim_IntList(%0, [1])"), "i64[2]");
  EXPECT_EQ(infer1("%0: b8[2, 3]", "aten.sum.dim_IntList(%0, None)"), "i64[]");
  EXPECT_EQ(infer1("%0: f16[2, 3]", "aten.sum.dim_IntList(%0, [1], dtype=dtype(f32))"), "f32[2]");
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.sum.default(%0)"), "f32[]");
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.mean.dim(%0, [0], true)"), "f32[1, 3]");
  EXPECT_THROW(infer("%0: i64[2, 3]", "aten.mean.dim(%0, [0])"), CompileError);
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.amax.default(%0, [])"), "f32[]");
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.amin.default(%0, [1], true)"), "f32[2, 1]");
  EXPECT_EQ(infer("%0: f32[2, 3]", "aten.max.dim(%0, 0)"), (Metas{"f32[3]", "i64[3]"}));
  EXPECT_EQ(infer("%0: f32[2, 3]", "aten.max.dim(%0, 1, true)"), (Metas{"f32[2, 1]", "i64[2, 1]"}));
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.argmax.default(%0)"), "i64[]");
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.argmax.default(%0, 1, true)"), "i64[2, 1]");
  EXPECT_EQ(
      infer("%0: f32[s0, 8]", "aten.var_mean.correction(%0, [1], correction=0, keepdim=true)"),
      (Metas{"f32[s0, 1]", "f32[s0, 1]"}));
  EXPECT_EQ(infer("%0: f32[2, 8]", "aten.var_mean.correction(%0)"), (Metas{"f32[]", "f32[]"}));
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.any.dim(%0, 1)"), "b8[2]");
  EXPECT_EQ(infer1("%0: u8[2, 3]", "aten.all.dims(%0, [0, 1], true)"), "u8[1, 1]");
  EXPECT_EQ(infer1("%0: f32[2, 3]", "aten.all.default(%0)"), "b8[]");
  EXPECT_THROW(infer("%0: f32[2, 3]", "aten.sum.dim_IntList(%0, [2])"), CompileError);
  EXPECT_THROW(infer("%0: f32[2, 3]", "aten.sum.dim_IntList(%0, [1, -1])"), CompileError);
}

TEST(ViewMeta, StridesAndOffsets) {
  EXPECT_EQ(infer1("%0: f32[4, 6]", "aten.view.default(%0, [2, -1, 3])"), "f32[2, 4, 3]");
  // Splitting a dim of a transposed tensor is a view: torch.randn(6, 4).t().view(4, 2, 3).
  EXPECT_EQ(infer1("%0: f32[4, 6]{1, 4}", "aten.view.default(%0, [4, 2, 3])"),
            "f32[4, 2, 3]{1, 12, 4}");
  // Merging across a transpose needs a copy.
  EXPECT_THROW(infer("%0: f32[4, 6]{1, 4}", "aten.view.default(%0, [24])"), CompileError);
  EXPECT_EQ(infer1("%0: f32[4, 6]{1, 4}", "aten._unsafe_view.default(%0, [24])"), "f32[24]");
  EXPECT_EQ(infer1("%0: f32[s0, 4]", "aten.view.default(%0, [-1])"), "f32[4*s0]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.permute.default(%0, [2, 0, 1])"),
            "f32[4, 2, 3]{1, 12, 4}");
  EXPECT_EQ(infer1("%0: f32[3, 1]", "aten.expand.default(%0, [2, 3, 4])"), "f32[2, 3, 4]{0, 1, 0}");
  EXPECT_EQ(infer1("%0: f32[3, 1]", "aten.expand.default(%0, [-1, 5])"), "f32[3, 5]{1, 0}");
  EXPECT_THROW(infer("%0: f32[3, 2]", "aten.expand.default(%0, [3, 5])"), CompileError);
  EXPECT_EQ(infer1("%0: f32[3, 1, 4]", "aten.squeeze.dim(%0, 1)"), "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 1, 4]", "aten.squeeze.dim(%0, 0)"), "f32[3, 1, 4]");
  EXPECT_EQ(infer1("%0: f32[1, 3, 1]", "aten.squeeze.dims(%0, [0, 2])"), "f32[3]");
  EXPECT_EQ(infer1("%0: f32[3, 4]", "aten.unsqueeze.default(%0, 1)"), "f32[3, 1, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.unsqueeze.default(%0, 1)"),
            "f32[3, 1, 4]{1, 12, 3}");
  EXPECT_EQ(infer1("%0: f32[3, 4]", "aten.unsqueeze.default(%0, -1)"), "f32[3, 4, 1]");
  // x[:, 1:7:2] of a (5, 8) tensor.
  EXPECT_EQ(infer1("%0: f32[5, 8]", "aten.slice.Tensor(%0, 1, 1, 7, 2)"), "f32[5, 3]{8, 2}+1");
  EXPECT_EQ(infer1("%0: f32[5, 8]", "aten.slice.Tensor(%0, 0, -2)"), "f32[2, 8]+24");
  EXPECT_EQ(infer1("%0: f32[5, 8]", "aten.slice.Tensor(%0, 0, 2, 100)"), "f32[3, 8]+16");
  EXPECT_EQ(infer1("%0: f32[5, 8]+3", "aten.select.int(%0, 0, -1)"), "f32[8]+35");
  EXPECT_EQ(infer1("%0: f32[5, 8]", "aten.select.int(%0, 1, 2)"), "f32[5]{8}+2");
  EXPECT_THROW(infer("%0: f32[5, 8]", "aten.select.int(%0, 1, 8)"), CompileError);
  EXPECT_EQ(infer1("%0: f32[5, 8]", "aten.t.default(%0)"), "f32[8, 5]{1, 8}");
  EXPECT_EQ(infer1("%0: f32[5]", "aten.t.default(%0)"), "f32[5]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.transpose.int(%0, 0, -1)"), "f32[4, 3, 2]{1, 4, 12}");
  EXPECT_EQ(infer1("%0: f32[16]", "aten.as_strided.default(%0, [2, 2], [1, 4], 3)"),
            "f32[2, 2]{1, 4}+3");
  EXPECT_EQ(infer1("%0: f32[s0, s1]", "aten.permute.default(%0, [1, 0])"), "f32[s1, s0]{1, s1}");
  EXPECT_EQ(infer1("%0: f32[s0, s1]", "aten.select.int(%0, 0, 1)"), "f32[s1]+s1");
}

TEST(LinalgMeta, MatmulsAndCat) {
  EXPECT_EQ(infer1("%0: f32[8, 16], %1: f32[16, 4]", "aten.mm.default(%0, %1)"), "f32[8, 4]");
  EXPECT_EQ(infer1("%0: f32[2, 8, 16], %1: f32[2, 16, 4]", "aten.bmm.default(%0, %1)"),
            "f32[2, 8, 4]");
  EXPECT_EQ(infer1("%0: f32[4], %1: f32[8, 16], %2: f32[16, 4]",
                   "aten.addmm.default(%0, %1, %2, beta=1, alpha=1)"),
            "f32[8, 4]");
  EXPECT_EQ(infer1("%0: f32[s0, 16], %1: f32[16, s1]", "aten.mm.default(%0, %1)"), "f32[s0, s1]");
  EXPECT_THROW(infer("%0: f32[8, 16], %1: f32[15, 4]", "aten.mm.default(%0, %1)"), CompileError);
  EXPECT_THROW(infer("%0: f32[8, 16], %1: f16[16, 4]", "aten.mm.default(%0, %1)"), CompileError);
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f32[4, 3]", "aten.cat.default([%0, %1])"), "f32[6, 3]");
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f16[2, 5]", "aten.cat.default([%0, %1], -1)"), "f32[2, 8]");
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f32[0]", "aten.cat.default([%0, %1], 1)"), "f32[2, 3]");
  EXPECT_EQ(infer1("%0: f32[s0, 3], %1: f32[s1, 3]", "aten.cat.default([%0, %1, %0])"),
            "f32[2*s0 + s1, 3]");
  EXPECT_THROW(infer("%0: f32[2, 3], %1: f32[2, 4]", "aten.cat.default([%0, %1])"), CompileError);
}

// ---- Creation, shape, view, linalg and pointwise metas (issue 28 item 2, "one op table").
// Expected values are PyTorch 2.13's FakeTensor results for the same calls.

TEST(CreationMeta, FactoriesAndDefaultDtypes) {
  EXPECT_EQ(infer1("", "aten.arange.default(5)"), "i64[5]");
  EXPECT_EQ(infer1("", "aten.arange.default(5.0)"), "f32[5]");
  EXPECT_EQ(infer1("", "aten.arange.start(2, 7)"), "i64[5]");
  EXPECT_EQ(infer1("", "aten.arange.start_step(0, 10, 3)"), "i64[4]");
  EXPECT_EQ(infer1("", "aten.arange.start_step(10, 0, -3)"), "i64[4]");
  EXPECT_EQ(infer1("", "aten.arange.start_step(0.0, 1.0, 0.3)"), "f32[4]");
  // int64 results truncate float bounds first: arange(2.1, -2.9, -1.0, dtype=int64) ...
  EXPECT_EQ(infer1("", "aten.arange.start_step(2.1, -2.9, -1.0, dtype=dtype(i64))"), "i64[4]");
  // ... other dtypes take ceil((end - start) / step) in double.
  EXPECT_EQ(infer1("", "aten.arange.start_step(2.1, -2.9, -1.0, dtype=dtype(i32))"), "i32[5]");
  EXPECT_EQ(infer1("", "aten.arange.start(-3.5, 4, dtype=dtype(i32))"), "i32[8]");
  EXPECT_EQ(infer1("", "aten.arange.default(4, dtype=dtype(f16), device=device(cuda))"),
            "f16[4]@cuda");
  EXPECT_EQ(infer1("%0: f32[s0]", "aten.arange.default(sym(s0))"), "i64[s0]");
  EXPECT_EQ(infer1("%0: f32[s0]", "aten.arange.start(1, sym(s0))"), "i64[s0 - 1]");
  EXPECT_THROW(infer("", "aten.arange.start_step(0, 10, -1)"), CompileError);
  EXPECT_EQ(infer1("",
                   "prims.iota.default(5, start=0, step=1, dtype=dtype(i64), "
                   "device=device(cpu), requires_grad=false)"),
            "i64[5]");
  EXPECT_EQ(infer1("", "aten.empty.memory_format([2, 3], dtype=dtype(f16))"), "f16[2, 3]");
  EXPECT_EQ(infer1("",
                   "aten.empty.memory_format([2, 3, 4, 5], "
                   "memory_format=\"torch.channels_last\")"),
            "f32[2, 3, 4, 5]{60, 1, 15, 3}");
  EXPECT_EQ(infer1("", "aten.empty_strided.default([2, 3], [1, 2])"), "f32[2, 3]{1, 2}");
  // full infers the dtype from the fill value.
  EXPECT_EQ(infer1("", "aten.full.default([2, 3], 2)"), "i64[2, 3]");
  EXPECT_EQ(infer1("", "aten.full.default([2, 3], 2.5)"), "f32[2, 3]");
  EXPECT_EQ(infer1("", "aten.full.default([2, 3], true)"), "b8[2, 3]");
  EXPECT_EQ(infer1("", "aten.ones.default([2])"), "f32[2]");
  EXPECT_EQ(infer1("", "aten.zeros.default([2], dtype=dtype(i32))"), "i32[2]");
  EXPECT_EQ(infer1("%0: f32[s0]", "aten.zeros.default([sym(s0), 3])"), "f32[s0, 3]");
  // scalar_tensor takes the default dtype whatever the number is.
  EXPECT_EQ(infer1("", "aten.scalar_tensor.default(1)"), "f32[]");
  EXPECT_EQ(infer1("", "aten.scalar_tensor.default(1.5, dtype=dtype(f64))"), "f64[]");
  // new_*: the input's dtype and device, row-major.
  EXPECT_EQ(infer1("%0: f16[3, 4]{1, 3}@cuda", "aten.new_empty.default(%0, [5, 2])"),
            "f16[5, 2]@cuda");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.new_ones.default(%0, [5], dtype=dtype(i32))"),
            "i32[5]");
  EXPECT_EQ(infer1("%0: f32[4, 3]", "aten.new_zeros.default(%0, [2, 2])"), "f32[2, 2]");
}

TEST(CreationMeta, LikeOpsPreserveTheLayout) {
  // torch.randn(4, 3).t(): dense, so its strides are kept.
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.empty_like.default(%0)"), "f32[3, 4]{1, 3}");
  // Not dense: dense strides in the input's stride order (x[:, ::2], x.t()[:, ::2]).
  EXPECT_EQ(infer1("%0: f32[4, 3]{6, 2}", "aten.empty_like.default(%0)"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[4, 3]{1, 8}", "aten.empty_like.default(%0)"), "f32[4, 3]{1, 4}");
  EXPECT_EQ(infer1("%0: f32[2, 3, 4, 3]{72, 1, 18, 6}", "aten.empty_like.default(%0)"),
            "f32[2, 3, 4, 3]{36, 1, 9, 3}");
  // torch.randn(4).expand(3, 4): broadcast dims do not vote.
  EXPECT_EQ(infer1("%0: f32[3, 4]{0, 1}", "aten.empty_like.default(%0)"), "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}",
                   "aten.empty_like.default(%0, memory_format=\"torch.contiguous_format\")"),
            "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.full_like.default(%0, 2.5)"), "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: i32[4, 3]", "aten.full_like.default(%0, 2.5)"), "i32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.ones_like.default(%0, dtype=dtype(f64))"),
            "f64[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.zeros_like.default(%0)"), "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.rand_like.default(%0)"), "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.fill.Scalar(%0, 2)"), "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: i32[3, 4]{1, 3}, %1: f32[]", "aten.fill.Tensor(%0, %1)"),
            "i32[3, 4]{1, 3}");
  // lift_fresh_copy and bernoulli give row-major results.
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.lift_fresh_copy.default(%0)"), "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.bernoulli.default(%0)"), "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.bernoulli.p(%0, 0.5)"), "f32[3, 4]");
  // copy keeps self's strides and offset (clone_preserve_strides), unless self overlaps.
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}, %1: f64[4]", "aten.copy.default(%0, %1)"),
            "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[4, 4]{8, 2}+8, %1: f32[4]", "aten.copy.default(%0, %1)"),
            "f32[4, 4]{8, 2}+8");
  EXPECT_EQ(infer1("%0: f32[3, 4]{0, 1}, %1: f32[3, 4]", "aten.copy.default(%0, %1)"), "f32[3, 4]");
  EXPECT_THROW(infer("%0: f32[3, 4], %1: f32[3]", "aten.copy.default(%0, %1)"), CompileError);
}

TEST(ViewMeta, ReshapeSplitUnbind) {
  // torch.randn(6, 4).t().reshape(4, 2, 3) is a view; .reshape(24) a row-major copy.
  EXPECT_EQ(infer1("%0: f32[4, 6]{1, 4}", "aten.reshape.default(%0, [4, 2, 3])"),
            "f32[4, 2, 3]{1, 12, 4}");
  EXPECT_EQ(infer1("%0: f32[4, 6]{1, 4}", "aten.reshape.default(%0, [24])"), "f32[24]");
  EXPECT_EQ(infer1("%0: f32[4, 8]+8", "aten.reshape.default(%0, [4, 2, 4])"), "f32[4, 2, 4]+8");
  // torch.randn(5, 8)[1:, ::2].reshape(16) is still a view.
  EXPECT_EQ(infer1("%0: f32[4, 4]{8, 2}+8", "aten.reshape.default(%0, [16])"), "f32[16]{2}+8");
  EXPECT_EQ(infer1("%0: f32[s0, 4]", "aten.reshape.default(%0, [-1])"), "f32[4*s0]");
  EXPECT_EQ(infer("%0: f32[5, 8]", "aten.split.Tensor(%0, 3, 1)"),
            (Metas{"f32[5, 3]{8, 1}", "f32[5, 3]{8, 1}+3", "f32[5, 2]{8, 1}+6"}));
  EXPECT_EQ(infer("%0: f32[5, 8]", "aten.split.Tensor(%0, 2)"),
            (Metas{"f32[2, 8]", "f32[2, 8]+16", "f32[1, 8]+32"}));
  EXPECT_EQ(infer("%0: f32[5, 8]{1, 5}", "aten.split.Tensor(%0, 3, 1)"),
            (Metas{"f32[5, 3]{1, 5}", "f32[5, 3]{1, 5}+15", "f32[5, 2]{1, 5}+30"}));
  EXPECT_EQ(infer("%0: f32[s0, 8]", "aten.split.Tensor(%0, 4, -1)"),
            (Metas{"f32[s0, 4]{8, 1}", "f32[s0, 4]{8, 1}+4"}));
  EXPECT_EQ(infer("%0: f32[s0, 8]", "aten.split.Tensor(%0, sym(s0))"), (Metas{"f32[s0, 8]"}));
  EXPECT_EQ(infer("%0: f32[5, 8]", "aten.split_with_sizes.default(%0, [2, 6], 1)"),
            (Metas{"f32[5, 2]{8, 1}", "f32[5, 6]{8, 1}+2"}));
  EXPECT_EQ(infer("%0: f32[4, 8]+8", "aten.split_with_sizes.default(%0, [1, 3])"),
            (Metas{"f32[1, 8]+8", "f32[3, 8]+16"}));
  EXPECT_THROW(infer("%0: f32[4, 8]", "aten.split_with_sizes.default(%0, [1, 2])"), CompileError);
  EXPECT_EQ(infer("%0: f32[2, 3, 4]", "aten.unbind.int(%0, 1)"),
            (Metas{"f32[2, 4]{12, 1}", "f32[2, 4]{12, 1}+4", "f32[2, 4]{12, 1}+8"}));
  EXPECT_EQ(infer("%0: f32[2, 3]", "aten.unbind.int(%0)"), (Metas{"f32[3]", "f32[3]+3"}));
}

TEST(ShapeMeta, FlipPadAndMatmul) {
  EXPECT_EQ(infer1("%0: f32[4, 3]", "aten.flip.default(%0, [0])"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.flip.default(%0, [0, 1])"), "f32[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[4, 3]{6, 2}", "aten.flip.default(%0, [0])"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "prims.rev.default(%0, [0])"), "f32[3, 4]{1, 3}");
  EXPECT_THROW(infer("%0: f32[4, 3]", "aten.flip.default(%0, [0, -2])"), CompileError);
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.constant_pad_nd.default(%0, [1, 2])"), "f32[2, 3, 7]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 4]", "aten.constant_pad_nd.default(%0, [1, 2, -1, 0], 1.5)"),
            "f32[2, 2, 7]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.constant_pad_nd.default(%0, [1, 1])"), "f32[3, 6]");
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 4, 5]{60, 1, 15, 3}", "aten.constant_pad_nd.default(%0, [1, 1, 1, 1])"),
      "f32[2, 3, 6, 7]{126, 1, 21, 3}");
  EXPECT_EQ(infer1("%0: i32[2, 3]", "aten.constant_pad_nd.default(%0, [1, 1], 2.5)"), "i32[2, 5]");
  EXPECT_EQ(infer1("%0: f32[s0, 3]", "aten.constant_pad_nd.default(%0, [0, 0, 1, 1])"),
            "f32[s0 + 2, 3]");
  // torch.matmul's 1-D and batched cases.
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[3]", "aten.matmul.default(%0, %1)"), "f32[]");
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f32[3]", "aten.matmul.default(%0, %1)"), "f32[2]");
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[3, 4]", "aten.matmul.default(%0, %1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f32[3, 4]", "aten.matmul.default(%0, %1)"), "f32[2, 4]");
  EXPECT_EQ(infer1("%0: f32[5, 2, 3], %1: f32[3]", "aten.matmul.default(%0, %1)"), "f32[5, 2]");
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[5, 3, 4]", "aten.matmul.default(%0, %1)"), "f32[5, 4]");
  EXPECT_EQ(infer1("%0: f32[5, 2, 3], %1: f32[3, 4]", "aten.matmul.default(%0, %1)"),
            "f32[5, 2, 4]");
  EXPECT_EQ(infer1("%0: f32[7, 1, 2, 3], %1: f32[5, 3, 4]", "aten.matmul.default(%0, %1)"),
            "f32[7, 5, 2, 4]");
  EXPECT_THROW(infer("%0: f32[2, 3], %1: f32[4, 5]", "aten.matmul.default(%0, %1)"), CompileError);
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[3]", "aten.dot.default(%0, %1)"), "f32[]");
  EXPECT_EQ(infer1("%0: f32[2, 3], %1: f32[3]", "aten.mv.default(%0, %1)"), "f32[2]");
  EXPECT_THROW(infer("%0: f32[2, 3], %1: f32[4]", "aten.mv.default(%0, %1)"), CompileError);
}

TEST(PointwiseMeta, MorePointwiseOps) {
  EXPECT_EQ(infer1("%0: i32[4]", "aten.__lshift__.Scalar(%0, 2)"), "i32[4]");
  EXPECT_EQ(infer1("%0: u8[4]", "aten.__rshift__.Scalar(%0, 2)"), "u8[4]");
  EXPECT_EQ(infer1("%0: i32[4], %1: i64[4]", "aten.bitwise_left_shift.Tensor(%0, %1)"), "i64[4]");
  EXPECT_EQ(infer1("%0: i8[4], %1: i64[]", "aten.bitwise_right_shift.Tensor(%0, %1)"), "i8[4]");
  EXPECT_EQ(infer1("%0: i32[4], %1: f32[]", "aten.clamp_max.Tensor(%0, %1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f32[4, 3], %1: f64[3]", "aten.clamp_min.Tensor(%0, %1)"), "f64[4, 3]");
  EXPECT_EQ(infer1("%0: f32[3], %1: f32[4, 3]", "aten.clamp_min.Tensor(%0, %1)"), "f32[4, 3]");
  // copysign computes in floating point.
  EXPECT_EQ(infer1("%0: i32[4]", "aten.copysign.Scalar(%0, -1.0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.copysign.Scalar(%0, -1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i64[4], %1: i32[4]", "aten.copysign.Tensor(%0, %1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f16[4], %1: f64[4]", "aten.copysign.Tensor(%0, %1)"), "f64[4]");
  EXPECT_EQ(infer1("%0: i32[4], %1: i64[4]", "aten.floor_divide.default(%0, %1)"), "i64[4]");
  EXPECT_EQ(infer1("%0: i32[4], %1: f64[]", "aten.floor_divide.default(%0, %1)"), "f64[4]");
  EXPECT_EQ(infer1("%0: f16[4], %1: f32[4]", "aten.hypot.default(%0, %1)"), "f32[4]");
  EXPECT_EQ(infer1("%0: i32[4]", "aten.lgamma.default(%0)"), "f32[4]");
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten.lgamma.default(%0)"), "f32[3, 4]{1, 3}");
  // threshold's scalars are not promotion operands.
  EXPECT_EQ(infer1("%0: i32[4]", "aten.threshold.default(%0, 1.5, 2.5)"), "i32[4]");
  EXPECT_EQ(infer1("%0: f16[3, 4]{1, 3}", "aten.threshold.default(%0, 1, 2)"), "f16[3, 4]{1, 3}");
  EXPECT_EQ(infer1("%0: f32[4], %1: f64[4]", "aten.hardtanh_backward.default(%0, %1, -1.0, 1.0)"),
            "f64[4]");
  EXPECT_EQ(
      infer1("%0: f16[4], %1: f32[4]", "aten.leaky_relu_backward.default(%0, %1, 0.01, false)"),
      "f32[4]");
  // masked_fill: self's dtype, broadcast with the mask, row-major.
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}, %1: b8[3, 4]", "aten.masked_fill.Scalar(%0, %1, 1.5)"),
            "f32[3, 4]");
  EXPECT_EQ(infer1("%0: i32[4, 3], %1: b8[4, 3]", "aten.masked_fill.Scalar(%0, %1, 1.5)"),
            "i32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[3], %1: b8[4, 3]", "aten.masked_fill.Scalar(%0, %1, 1)"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f32[4, 3], %1: b8[3]", "aten.masked_fill.Scalar(%0, %1, 1)"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: f16[4, 3], %1: b8[4, 3], %2: f64[]", "aten.masked_fill.Tensor(%0, %1, %2)"),
            "f16[4, 3]");
  EXPECT_THROW(
      infer("%0: f32[4, 3], %1: b8[4, 3], %2: f32[3]", "aten.masked_fill.Tensor(%0, %1, %2)"),
      CompileError);
  EXPECT_EQ(infer1("%0: f32[3, 4]{1, 3}", "aten._softmax.default(%0, 1, false)"), "f32[3, 4]");
  EXPECT_EQ(infer1("%0: f16[4, 3]", "aten._softmax.default(%0, 1, true)"), "f32[4, 3]");
  EXPECT_EQ(infer1("%0: bf16[4, 3]", "aten._softmax.default(%0, -1, false)"), "bf16[4, 3]");
  EXPECT_THROW(infer("%0: f32[4, 3]", "aten._softmax.default(%0, 2, false)"), CompileError);
}

TEST(Registry, AddNodeInferred) {
  sym::Context ctx;
  Graph g(ctx);
  TensorMeta m;
  m.sizes = {ctx.constant(3), ctx.constant(4)};
  m.strides = contiguous_strides(ctx, m.sizes);
  Value* x = g.add_input(m);
  Node* t = add_node_inferred(g, "aten.permute.default", {x, Arg::List{1, 0}});
  Node* s = add_node_inferred(g, "aten.sum.dim_IntList", {t->output(), Arg::List{0}},
                              {{"dtype", DType::Float64}});
  g.set_outputs({s->output()});
  EXPECT_EQ(print_meta(ctx, t->output()->meta()), "f32[4, 3]{1, 4}");
  EXPECT_EQ(print_meta(ctx, s->output()->meta()), "f64[3]");
  EXPECT_THROW(add_node_inferred(g, "aten.nope.default", {x}), CompileError);
}

// ---- Index/scatter, reduction (var/std/prod/prims) and nn metas. Expected values are PyTorch
// 2.13's FakeTensor results for the same calls (torch.empty_strided inputs).

TEST(IndexMeta, AdvancedIndexingShapesAndLayout) {
  // x[:, idx] with idx [3, 4]: B replaces dim 1 in place.
  EXPECT_EQ(infer1("%0: f32[5, 6, 7], %1: i64[3, 4]", "aten.index.Tensor(%0, [None, %1])"),
            "f32[5, 3, 4, 7]");
  // Non-adjacent index tensors: B goes first.
  EXPECT_EQ(
      infer1("%0: f32[5, 6, 7], %1: i64[3], %2: i64[3]", "aten.index.Tensor(%0, [%1, None, %2])"),
      "f32[3, 6]");
  EXPECT_EQ(infer1("%0: f32[5, 6, 7], %1: i64[3, 1], %2: i32[4]",
                   "aten._unsafe_index.Tensor(%0, [%1, %2])"),
            "f32[3, 4, 7]");
  // The result follows self's dim order (TensorIterator over self restrided to the result).
  EXPECT_EQ(
      infer1("%0: f32[5, 6, 7]{1, 5, 30}, %1: i64[3, 4]", "aten.index.Tensor(%0, [None, %1])"),
      "f32[5, 3, 4, 7]{1, 20, 5, 60}");
  EXPECT_EQ(infer1("%0: f32[6, 5]{1, 6}, %1: i64[4]", "aten.index.Tensor(%0, [%1])"), "f32[4, 5]");
  // A mask index has a data-dependent shape.
  EXPECT_THROW(infer("%0: f32[5, 6], %1: b8[5]", "aten.index.Tensor(%0, [%1])"), CompileError);
  EXPECT_THROW(infer("%0: f32[5], %1: i64[2]", "aten.index.Tensor(%0, [%1, %1])"), CompileError);
}

TEST(IndexMeta, IndexPutGatherScatter) {
  // index_put is empty_like(self): a dense self keeps its strides, an expanded one does not.
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[3], %2: f32[3, 6]",
                   "aten.index_put.default(%0, [%1], %2)"),
            "f32[5, 6]{1, 5}");
  EXPECT_EQ(infer1("%0: f32[5, 6]{0, 1}, %1: i64[3], %2: f32[3, 6]",
                   "aten._unsafe_index_put.default(%0, [%1], %2, true)"),
            "f32[5, 6]");
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[3], %2: f32[3, 6]",
                   "aten.index_put_.default(%0, [%1], %2)"),
            "f32[5, 6]{1, 5}");
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[4]", "aten.index_select.default(%0, 1, %1)"),
            "f32[5, 4]");
  EXPECT_EQ(infer1("%0: f32[5, 6], %1: i64[]", "aten.index_select.default(%0, -1, %1)"),
            "f32[5, 1]");
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[5, 2]", "aten.gather.default(%0, 1, %1)"),
            "f32[5, 2]");
  EXPECT_THROW(infer("%0: f32[5, 6], %1: i64[5]", "aten.gather.default(%0, 1, %1)"), CompileError);
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[2, 6], %2: f32[2, 6]",
                   "aten.scatter.src(%0, 0, %1, %2)"),
            "f32[5, 6]");
  EXPECT_EQ(infer1("%0: f64[5, 6], %1: i64[2, 6]", "aten.scatter.value(%0, 0, %1, 1.5)"),
            "f64[5, 6]");
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: i64[5, 2], %2: f32[5, 2]",
                   "aten.scatter_add.default(%0, 1, %1, %2)"),
            "f32[5, 6]");
}

TEST(IndexMeta, ScattersIntoSelfAndEmbedding) {
  // clone_preserve_strides(self): strides and storage offset kept; an overlapping (expanded)
  // self is cloned densely instead.
  EXPECT_EQ(infer1("%0: f32[5, 6]{1, 5}, %1: f32[6]", "aten.select_scatter.default(%0, %1, 0, 2)"),
            "f32[5, 6]{1, 5}");
  EXPECT_EQ(infer1("%0: f32[5, 6]{0, 1}, %1: f32[6]", "aten.select_scatter.default(%0, %1, 0, 2)"),
            "f32[5, 6]");
  EXPECT_EQ(infer1("%0: f32[5, 6]{7, 1}+3, %1: f32[5, 2]",
                   "aten.slice_scatter.default(%0, %1, 1, 0, 4, 2)"),
            "f32[5, 6]{7, 1}+3");
  EXPECT_EQ(infer1("%0: f32[4, 4]{1, 4}, %1: f32[2, 2]",
                   "aten.as_strided_scatter.default(%0, %1, [2, 2], [1, 4], 1)"),
            "f32[4, 4]{1, 4}");
  EXPECT_EQ(infer1("%0: f16[10, 8], %1: i64[3, 4]", "aten.embedding.default(%0, %1)"),
            "f16[3, 4, 8]");
  EXPECT_EQ(infer1("%0: f32[10, 8], %1: i64[]", "aten.embedding.default(%0, %1)"), "f32[8]");
  EXPECT_EQ(infer1("%0: f32[3, 4, 8], %1: i64[3, 4]",
                   "aten.embedding_dense_backward.default(%0, %1, 10, -1, false)"),
            "f32[10, 8]");
  EXPECT_EQ(infer1("%0: f32[s0, 8], %1: i64[s0]",
                   "aten.embedding_dense_backward.default(%0, %1, sym(s1), -1, false)"),
            "f32[s1, 8]");
}

TEST(ReductionMeta, VarStdProdAndPrims) {
  EXPECT_EQ(infer1("%0: f32[4, 5]", "aten.std.correction(%0, [1], correction=0, keepdim=true)"),
            "f32[4, 1]");
  EXPECT_EQ(infer1("%0: f32[4, 5]", "aten.std.dim(%0, [0], true, true)"), "f32[1, 5]");
  EXPECT_EQ(infer1("%0: f64[4, 5]", "aten.std.default(%0)"), "f64[]");
  EXPECT_EQ(infer("%0: f32[4, 5]", "aten.std_mean.correction(%0, [0])"),
            (Metas{"f32[5]", "f32[5]"}));
  EXPECT_EQ(infer("%0: f32[4, 5]", "aten.std_mean.dim(%0, [1], false, true)"),
            (Metas{"f32[4, 1]", "f32[4, 1]"}));
  EXPECT_EQ(infer("%0: f32[4, 5]", "aten.std_mean.default(%0)"), (Metas{"f32[]", "f32[]"}));
  EXPECT_EQ(infer1("%0: f32[4, 5, 6]", "aten.var.dim(%0, [0, 2])"), "f32[5]");
  EXPECT_EQ(infer1("%0: f32[4, 5]", "aten.var.default(%0)"), "f32[]");
  EXPECT_EQ(infer("%0: f32[4, 5]", "aten.var_mean.dim(%0, None, true, true)"),
            (Metas{"f32[1, 1]", "f32[1, 1]"}));
  EXPECT_EQ(infer("%0: f16[4, 5]", "aten.var_mean.default(%0)"), (Metas{"f16[]", "f16[]"}));
  EXPECT_THROW(infer("%0: i64[4, 5]", "aten.std.dim(%0, [0])"), CompileError);
  EXPECT_EQ(infer1("%0: i32[4, 5]", "aten.prod.default(%0)"), "i64[]");
  EXPECT_EQ(infer1("%0: f32[4, 5]", "aten.prod.default(%0, dtype=dtype(f64))"), "f64[]");
  // prims reductions keep the input dtype, and an empty dims list reduces nothing.
  EXPECT_EQ(infer1("%0: i32[4, 5, 6]", "prims.sum.default(%0, [0, 2])"), "i32[5]");
  EXPECT_EQ(infer1("%0: f32[4, 5]", "prims.sum.default(%0, [1], output_dtype=dtype(f64))"),
            "f64[4]");
  EXPECT_EQ(infer1("%0: f32[4, 5]", "prims.prod.default(%0, [])"), "f32[4, 5]");
  EXPECT_THROW(infer("%0: f32[4, 5]", "prims.sum.default(%0, [-1])"), CompileError);
}

TEST(NnMeta, Convolution) {
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 9, 9], %1: f32[8, 3, 3, 3], %2: f32[8]",
             "aten.convolution.default(%0, %1, %2, [2, 2], [1, 1], [1, 1], false, [0, 0], 1)"),
      "f32[2, 8, 5, 5]");
  // A channels-last input or weight gives a channels-last output (CPU backends).
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 9, 9]{243, 1, 27, 3}, %1: f32[8, 3, 3, 3]",
             "aten.convolution.default(%0, %1, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)"),
      "f32[2, 8, 7, 7]{392, 1, 56, 8}");
  EXPECT_EQ(
      infer1("%0: f32[2, 4, 9, 9], %1: f32[8, 2, 3, 3]{18, 1, 6, 2}",
             "aten.convolution.default(%0, %1, None, [1, 1], [0, 0], [2, 2], false, [0, 0], 2)"),
      "f32[2, 8, 5, 5]{200, 1, 40, 8}");
  EXPECT_EQ(
      infer1("%0: bf16[2, 3, 9, 9]{243, 1, 27, 3}, %1: bf16[8, 3, 3, 3]",
             "aten.convolution.default(%0, %1, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)"),
      "bf16[2, 8, 7, 7]{392, 1, 56, 8}");
  EXPECT_EQ(infer1("%0: f32[2, 3, 9], %1: f32[8, 3, 3]",
                   "aten.convolution.default(%0, %1, None, [1], [1], [1], false, [0], 1)"),
            "f32[2, 8, 9]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 5, 6, 7]{630, 1, 126, 21, 3}, %1: f32[4, 3, 1, 1, 1]",
                   "aten.convolution.default(%0, %1, None, [1, 1, 1], [0, 0, 0], [1, 1, 1], "
                   "false, [0, 0, 0], 1)"),
            "f32[2, 4, 5, 6, 7]{840, 1, 168, 28, 4}");
  EXPECT_EQ(
      infer1("%0: f32[2, 8, 5, 5], %1: f32[8, 3, 3, 3]",
             "aten.convolution.default(%0, %1, None, [2, 2], [1, 1], [1, 1], true, [1, 1], 1)"),
      "f32[2, 3, 10, 10]");
  // Symbolic sizes: FakeTensor skips the backend's layout choice (contiguous).
  EXPECT_EQ(
      infer1("%0: f32[s0, 3, 9, 9], %1: f32[8, 3, 3, 3]",
             "aten.convolution.default(%0, %1, None, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)"),
      "f32[s0, 8, 9, 9]");
  EXPECT_THROW(
      infer("%0: f32[2, 4, 9, 9], %1: f32[8, 3, 3, 3]",
            "aten.convolution.default(%0, %1, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)"),
      CompileError);
  EXPECT_EQ(
      infer("%0: f32[2, 8, 5, 5], %1: f32[2, 3, 9, 9], %2: f32[8, 3, 3, 3]",
            "aten.convolution_backward.default(%0, %1, %2, [8], [2, 2], [1, 1], [1, 1], false, "
            "[0, 0], 1, [true, true, true])"),
      (Metas{"f32[2, 3, 9, 9]", "f32[8, 3, 3, 3]", "f32[8]"}));
  // Only the masked gradients are outputs; grad_weight follows the input's channels-last.
  EXPECT_EQ(
      infer("%0: f32[2, 8, 7, 7]{392, 1, 56, 8}, %1: f32[2, 3, 9, 9]{243, 1, 27, 3}, "
            "%2: f32[8, 3, 3, 3]",
            "aten.convolution_backward.default(%0, %1, %2, [8], [1, 1], [0, 0], [1, 1], false, "
            "[0, 0], 1, [false, true, true])"),
      (Metas{"f32[8, 3, 3, 3]{27, 1, 9, 3}", "f32[8]"}));
}

TEST(NnMeta, Pooling) {
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 9, 9]", "aten.avg_pool2d.default(%0, [3, 3], [2, 2], [1, 1], true)"),
      "f32[2, 3, 5, 5]");
  EXPECT_EQ(infer1("%0: f32[2, 3, 8, 8]{192, 1, 24, 3}", "aten.avg_pool2d.default(%0, [2, 2])"),
            "f32[2, 3, 4, 4]{48, 1, 12, 3}");
  EXPECT_EQ(infer1("%0: f32[3, 8, 7]", "aten.avg_pool2d.default(%0, [2, 2], [], [0, 0], true)"),
            "f32[3, 4, 4]");
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 4, 4]{48, 1, 12, 3}, %1: f32[2, 3, 8, 8]{192, 1, 24, 3}",
             "aten.avg_pool2d_backward.default(%0, %1, [2, 2], [], [0, 0], false, true, None)"),
      "f32[2, 3, 8, 8]{192, 1, 24, 3}");
  EXPECT_EQ(infer1("%0: f32[2, 3, 9, 9]", "aten._adaptive_avg_pool2d.default(%0, [1, 1])"),
            "f32[2, 3, 1, 1]");
  EXPECT_EQ(
      infer1("%0: f32[2, 3, 9, 9]{243, 1, 27, 3}", "aten._adaptive_avg_pool2d.default(%0, [3, 2])"),
      "f32[2, 3, 3, 2]{18, 1, 6, 3}");
  EXPECT_EQ(infer1("%0: f32[2, 3, 1, 1], %1: f32[2, 3, 9, 9]{243, 1, 27, 3}",
                   "aten._adaptive_avg_pool2d_backward.default(%0, %1)"),
            "f32[2, 3, 9, 9]{243, 1, 27, 3}");
  EXPECT_EQ(infer("%0: f32[2, 3, 9, 9]",
                  "aten.max_pool2d_with_indices.default(%0, [3, 3], [2, 2], [1, 1], [1, 1], true)"),
            (Metas{"f32[2, 3, 5, 5]", "i64[2, 3, 5, 5]"}));
  EXPECT_EQ(infer("%0: f32[2, 3, 8, 8]{192, 1, 24, 3}",
                  "aten.max_pool2d_with_indices.default(%0, [2, 2])"),
            (Metas{"f32[2, 3, 4, 4]{48, 1, 12, 3}", "i64[2, 3, 4, 4]{48, 1, 12, 3}"}));
  EXPECT_EQ(infer("%0: f32[3, 10, 10]",
                  "aten.max_pool2d_with_indices.default(%0, [3, 3], [1, 1], [0, 0], [2, 2])"),
            (Metas{"f32[3, 6, 6]", "i64[3, 6, 6]"}));
  EXPECT_EQ(infer1("%0: f32[2, 3, 4, 4], %1: f32[2, 3, 8, 8], %2: i64[2, 3, 4, 4]",
                   "aten.max_pool2d_with_indices_backward.default(%0, %1, [2, 2], [2, 2], [0, 0], "
                   "[1, 1], false, %2)"),
            "f32[2, 3, 8, 8]");
  // Padding over half the kernel is rejected, as PyTorch does.
  EXPECT_THROW(infer("%0: f32[2, 3, 8, 8]", "aten.avg_pool2d.default(%0, [2, 2], [2, 2], [2, 2])"),
               CompileError);
}

TEST(NnMeta, FusedAttention) {
  const std::string qkv =
      "%0: bf16[2, 4, 40, 64]@cuda, %1: bf16[2, 4, 24, 64]@cuda, "
      "%2: bf16[2, 4, 24, 32]@cuda";
  // The memory-efficient kernel's output is a transposed [B, M, H, Kv] buffer; its logsumexp
  // rounds M up to a multiple of 32; seed and offset are 0-d i64.
  EXPECT_EQ(infer(qkv,
                  "aten._scaled_dot_product_efficient_attention.default(%0, %1, %2, None, "
                  "true, 0.0, true)"),
            (Metas{"bf16[2, 4, 40, 32]{5120, 32, 128, 1}@cuda", "f32[2, 4, 64]@cuda", "i64[]@cuda",
                   "i64[]@cuda"}));
  EXPECT_EQ(infer(qkv + ", %3: bf16[2, 4, 40, 32]@cuda, %4: bf16[2, 4, 40, 24]@cuda, "
                        "%5: bf16[2, 4, 40, 32]@cuda, %6: f32[2, 4, 64]@cuda, %7: i64[]@cuda",
                  "aten._scaled_dot_product_efficient_attention_backward.default(%3, %0, %1, %2, "
                  "%4, %5, %6, %7, %7, 0.0, [true, true, true, true])"),
            (Metas{"bf16[2, 4, 40, 64]{10240, 64, 256, 1}@cuda",
                   "bf16[2, 4, 24, 64]{6144, 64, 256, 1}@cuda",
                   "bf16[2, 4, 24, 32]{3072, 32, 128, 1}@cuda",
                   "bf16[2, 4, 40, 24]{5120, 1280, 32, 1}@cuda"}));
  // cuDNN: the output follows the query's dim order.
  EXPECT_EQ(infer("%0: bf16[2, 4, 40, 64]{10240, 64, 256, 1}@cuda, %1: bf16[2, 4, 24, 64]@cuda, "
                  "%2: bf16[2, 4, 24, 32]@cuda",
                  "aten._scaled_dot_product_cudnn_attention.default(%0, %1, %2, None, true)"),
            (Metas{"bf16[2, 4, 40, 32]{5120, 32, 128, 1}@cuda", "f32[2, 4, 40, 1]@cuda",
                   "i64[]@cuda", "i64[]@cuda"}));
  EXPECT_EQ(infer("%0: bf16[2, 4, 40, 64]{10240, 64, 256, 1}@cuda, %1: bf16[2, 4, 24, 64]@cuda, "
                  "%2: bf16[2, 4, 24, 32]@cuda, %3: bf16[2, 4, 40, 32]@cuda, "
                  "%4: f32[2, 4, 40, 1]@cuda, %5: i64[]@cuda",
                  "aten._scaled_dot_product_cudnn_attention_backward.default(%3, %0, %1, %2, %3, "
                  "%4, %5, %5, None, None, None, 40, 24, 0.0, false)"),
            (Metas{"bf16[2, 4, 40, 64]{10240, 64, 256, 1}@cuda", "bf16[2, 4, 24, 64]@cuda",
                   "bf16[2, 4, 24, 32]@cuda"}));
}

}  // namespace
}  // namespace coil::ops
