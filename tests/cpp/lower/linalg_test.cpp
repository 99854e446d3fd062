// Linear-algebra lowerings against brute-force references, through the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "coil/loop/printer.h"
#include "coil/lower/lowering.h"
#include "family_test_util.h"

namespace coil::lower::testing {
namespace {

using loop::ExternKind;
using loop::ExternNode;

std::vector<const ExternNode*> externs(const Lowered& l) {
  std::vector<const ExternNode*> out;
  for (const auto& s : l.result.program.steps) {
    if (auto* e = std::get_if<ExternNode>(&s)) out.push_back(e);
  }
  return out;
}

// C[b][m][n] = sum_k A[b][m][k] * B[b][k][n], row-major, `batch` matrices each.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b,
                               int64_t batch, int64_t m, int64_t k, int64_t n,
                               bool broadcast_a = false, bool broadcast_b = false) {
  std::vector<double> c(batch * m * n, 0.0);
  for (int64_t q = 0; q < batch; ++q) {
    const double* pa = a.data() + (broadcast_a ? 0 : q * m * k);
    const double* pb = b.data() + (broadcast_b ? 0 : q * k * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += pa[i * k + t] * pb[t * n + j];
        c[(q * m + i) * n + j] = s;
      }
  }
  return c;
}

TEST(LinalgLowering, Registered) {
  LoweringRegistry r;
  register_linalg_lowerings(r);
  std::vector<std::string> ops = r.ops();
  for (const char* op : {"aten.mm.default", "aten.bmm.default", "aten.addmm.default",
                         "aten.matmul.default", "aten.convolution.default"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

TEST(LinalgLowering, MmReadsTransposedInputInPlace) {
  std::vector<double> a = as_f32(random_values(24, 31)), bt = as_f32(random_values(30, 32));
  const char* text = R"(graph(%0: f32[4, 6], %1: f32[5, 6]):
  %2: f32[6, 5]{1, 6} = aten.permute.default(%1, [1, 0])
  %3: f32[4, 5] = aten.mm.default(%0, %2)
  return (%3)
)";
  Lowered l = lower_text(text);
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::Mm);
  EXPECT_EQ(ex[0]->graph_node, 1);
  // No copy: the second operand is a View of the input with strides {1, 6}.
  const auto& prog = l.result.program;
  const auto& v = prog.buffer(ex[0]->inputs[1]);
  ASSERT_EQ(v.strides.size(), 2u);
  EXPECT_EQ(l.ctx->as_const(v.strides[0]), 1);
  EXPECT_EQ(l.ctx->as_const(v.strides[1]), 6);
  for (const auto& s : prog.steps) EXPECT_FALSE(std::holds_alternative<loop::ComputeNode>(s));
  auto outs = loop::interpret(prog, {HostTensor::from_doubles(DType::Float32, {4, 6}, a),
                                     HostTensor::from_doubles(DType::Float32, {5, 6}, bt)});
  std::vector<double> b(30);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) b[i * 5 + j] = bt[j * 6 + i];
  expect_close(outs[0], {4, 5}, matmul_ref(a, b, 1, 4, 6, 5));
}

// A large CUDA value with unaligned columns that only products read (here realized for its two
// readers) is realized into a zero-padded buffer ([2048, 2052] for 2049 float columns): both the
// product that reads it and the one that reads its transpose get it in place, marked zero-padded
// (ints[2]), so the runtime pads without copying. Small values and CPU graphs keep a dense buffer.
TEST(LinalgLowering, CudaProductOperandsRealizedZeroPadded) {
  const char* text =
      R"(graph(%0: f32[2048, 2049]@cuda, %1: f32[2049, 64]@cuda, %2: f32[2048, 64]@cuda):
  %10: f32[2048, 2049]@cuda = aten.mul.Tensor(%0, 2)
  %11: f32[2048, 2049]@cuda = aten.sigmoid.default(%10)
  %12: f32[2048, 2049]@cuda = aten.tanh.default(%11)
  %13: f32[2048, 2049]@cuda = aten.exp.default(%12)
  %14: f32[2048, 2049]@cuda = aten.sin.default(%13)
  %15: f32[2048, 2049]@cuda = aten.cos.default(%14)
  %16: f32[2048, 2049]@cuda = aten.sigmoid.default(%15)
  %17: f32[2048, 2049]@cuda = aten.tanh.default(%16)
  %3: f32[2048, 2049]@cuda = aten.mul.Tensor(%17, %0)
  %4: f32[2049, 2048]{1, 2049}@cuda = aten.permute.default(%3, [1, 0])
  %5: f32[2048, 64]@cuda = aten.mm.default(%3, %1)
  %6: f32[2049, 64]@cuda = aten.mm.default(%4, %2)
  %7: f32[2048, 2049]@cuda = aten.add.Tensor(%0, 1)
  %8: f32[2048, 64]@cuda = aten.mm.default(%7, %1)
  return (%5, %6, %8)
)";
  Lowered l = lower_text(text);
  const auto& prog = l.result.program;
  int padded_nodes = 0;
  for (const auto& s : prog.steps) {
    if (auto* n = std::get_if<loop::ComputeNode>(&s)) {
      ASSERT_EQ(n->ranges.size(), 2u);
      EXPECT_EQ(l.ctx->as_const(n->ranges[1]), 2052);
      ++padded_nodes;
    }
  }
  EXPECT_EQ(padded_nodes, 2);  // %3 (two readers) and %7 (one)
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 3u);
  for (const ExternNode* e : ex) {
    ASSERT_EQ(e->ints.size(), 3u);
    EXPECT_EQ(e->ints[2], loop::kZeroPaddedA);
    const auto& a = prog.buffer(e->inputs[0]);
    const bool transposed = l.ctx->as_const(a.strides[0]) == 1;
    EXPECT_EQ(l.ctx->as_const(a.strides[transposed ? 1 : 0]), 2052);
  }
  // Small, or on the CPU: no padding.
  for (const char* small : {R"(graph(%0: f32[64, 33]@cuda, %1: f32[33, 8]@cuda):
  %2: f32[64, 33]@cuda = aten.mul.Tensor(%0, 2)
  %3: f32[64, 8]@cuda = aten.mm.default(%2, %1)
  return (%3)
)",
                            R"(graph(%0: f32[2048, 2049], %1: f32[2049, 64]):
  %2: f32[2048, 2049] = aten.mul.Tensor(%0, 2)
  %3: f32[2048, 64] = aten.mm.default(%2, %1)
  return (%3)
)"}) {
    Lowered s = lower_text(small);
    for (const ExternNode* e : externs(s)) EXPECT_TRUE(e->ints.empty());
  }
}

TEST(LinalgLowering, BmmAndAddmmWithBroadcastBias) {
  std::vector<double> a = as_f32(random_values(24, 33)), b = as_f32(random_values(40, 34));
  std::vector<double> m1 = as_f32(random_values(12, 35)), m2 = as_f32(random_values(20, 36));
  std::vector<double> bias = as_f32(random_values(5, 37));
  Lowered l = lower_text(
      R"(graph(%0: f32[2, 3, 4], %1: f32[2, 4, 5], %2: f32[5], %3: f32[3, 4], %4: f32[4, 5]):
  %5: f32[2, 3, 5] = aten.bmm.default(%0, %1)
  %6: f32[3, 5] = aten.addmm.default(%2, %3, %4, beta=0.5, alpha=2.0)
  %7: f32[3, 5] = aten.addmm.default(%2, %3, %4)
  return (%5, %6, %7)
)");
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(ex[0]->kind, ExternKind::Bmm);
  EXPECT_EQ(ex[1]->kind, ExternKind::Addmm);
  EXPECT_EQ(ex[1]->scalars, (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(ex[2]->scalars, (std::vector<double>{1.0, 1.0}));
  auto outs =
      loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, {2, 3, 4}, a),
                                         HostTensor::from_doubles(DType::Float32, {2, 4, 5}, b),
                                         HostTensor::from_doubles(DType::Float32, {5}, bias),
                                         HostTensor::from_doubles(DType::Float32, {3, 4}, m1),
                                         HostTensor::from_doubles(DType::Float32, {4, 5}, m2)});
  expect_close(outs[0], {2, 3, 5}, matmul_ref(a, b, 2, 3, 4, 5));
  std::vector<double> mm = matmul_ref(m1, m2, 1, 3, 4, 5), w6, w7;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      w6.push_back(0.5 * bias[j] + 2.0 * mm[i * 5 + j]);
      w7.push_back(bias[j] + mm[i * 5 + j]);
    }
  expect_close(outs[1], {3, 5}, w6);
  expect_close(outs[2], {3, 5}, w7);
}

TEST(LinalgLowering, MatmulShapes) {
  std::vector<double> a4 = as_f32(random_values(2 * 3 * 4 * 5, 38));
  std::vector<double> b2 = as_f32(random_values(5 * 6, 39));
  std::vector<double> m34 = as_f32(random_values(12, 40));
  std::vector<double> b245 = as_f32(random_values(40, 41));
  std::vector<double> v4 = as_f32(random_values(4, 42)), w4 = as_f32(random_values(4, 43));
  std::vector<double> m45 = as_f32(random_values(20, 44));
  std::vector<double> x2134 = as_f32(random_values(24, 45)), y546 = as_f32(random_values(120, 46));
  Lowered l = lower_text(
      R"(graph(%0: f32[2, 3, 4, 5], %1: f32[5, 6], %2: f32[3, 4], %3: f32[2, 4, 5], %4: f32[4], %5: f32[4], %6: f32[4, 5], %7: f32[2, 1, 3, 4], %8: f32[5, 4, 6]):
  %9: f32[2, 3, 4, 6] = aten.matmul.default(%0, %1)
  %10: f32[2, 3, 5] = aten.matmul.default(%2, %3)
  %11: f32[] = aten.matmul.default(%4, %5)
  %12: f32[3] = aten.matmul.default(%2, %4)
  %13: f32[5] = aten.matmul.default(%4, %6)
  %14: f32[2, 5, 3, 6] = aten.matmul.default(%7, %8)
  %15: f32[2, 5] = aten.matmul.default(%4, %3)
  %16: f32[] = aten.dot.default(%4, %5)
  %17: f32[3] = aten.mv.default(%2, %4)
  return (%9, %10, %11, %12, %13, %14, %15, %16, %17)
)");
  auto outs = loop::interpret(l.result.program,
                              {HostTensor::from_doubles(DType::Float32, {2, 3, 4, 5}, a4),
                               HostTensor::from_doubles(DType::Float32, {5, 6}, b2),
                               HostTensor::from_doubles(DType::Float32, {3, 4}, m34),
                               HostTensor::from_doubles(DType::Float32, {2, 4, 5}, b245),
                               HostTensor::from_doubles(DType::Float32, {4}, v4),
                               HostTensor::from_doubles(DType::Float32, {4}, w4),
                               HostTensor::from_doubles(DType::Float32, {4, 5}, m45),
                               HostTensor::from_doubles(DType::Float32, {2, 1, 3, 4}, x2134),
                               HostTensor::from_doubles(DType::Float32, {5, 4, 6}, y546)});
  ASSERT_EQ(outs.size(), 9u);
  expect_close(outs[0], {2, 3, 4, 6}, matmul_ref(a4, b2, 1, 24, 5, 6));
  expect_close(outs[1], {2, 3, 5}, matmul_ref(m34, b245, 2, 3, 4, 5, true, false));
  double dot = 0;
  for (int k = 0; k < 4; ++k) dot += v4[k] * w4[k];
  expect_close(outs[2], {}, {dot});
  expect_close(outs[3], {3}, matmul_ref(m34, v4, 1, 3, 4, 1));
  expect_close(outs[4], {5}, matmul_ref(v4, m45, 1, 1, 4, 5));
  // [2, 1, 3, 4] @ [5, 4, 6] -> [2, 5, 3, 6]: batch dims broadcast.
  std::vector<double> w14;
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 5; ++q) {
      std::vector<double> xa(x2134.begin() + p * 12, x2134.begin() + p * 12 + 12);
      std::vector<double> yb(y546.begin() + q * 24, y546.begin() + q * 24 + 24);
      auto c = matmul_ref(xa, yb, 1, 3, 4, 6);
      w14.insert(w14.end(), c.begin(), c.end());
    }
  expect_close(outs[5], {2, 5, 3, 6}, w14);
  expect_close(outs[6], {2, 5}, matmul_ref(v4, b245, 2, 1, 4, 5, true, false));
  expect_close(outs[7], {}, {dot});
  expect_close(outs[8], {3}, matmul_ref(m34, v4, 1, 3, 4, 1));
  // The n-d @ 2-d case is one Mm on the merged leading dims of the input, read in place.
  auto ex = externs(l);
  ASSERT_FALSE(ex.empty());
  EXPECT_EQ(ex[0]->kind, ExternKind::Mm);
  EXPECT_EQ(l.result.program.buffer(ex[0]->inputs[0]).kind, loop::BufferKind::View);
}

TEST(LinalgLowering, ConvolutionExternLayout) {
  Lowered l = lower_text(
      R"(graph(%0: f32[2, 3, 8, 8], %1: f32[6, 3, 3, 3], %2: f32[6], %3: f32[2, 3, 8, 8]):
  %4: f32[2, 6, 4, 8] = aten.convolution.default(%0, %1, %2, [2, 1], [1], [1, 1], false, [0, 0], 1)
  %5: f32[2, 6, 6, 6] = aten.convolution.default(%3, %1, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)
  return (%4, %5)
)",
      extern_convolutions());
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0]->kind, ExternKind::Convolution);
  EXPECT_EQ(ex[0]->inputs.size(), 3u);
  // {stride[2], padding[2], dilation[2], transposed, output_padding[2], groups}
  EXPECT_EQ(ex[0]->ints, (std::vector<int64_t>{2, 1, 1, 1, 1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(ex[0]->graph_node, 0);
  EXPECT_EQ(ex[1]->inputs.size(), 2u);
  EXPECT_EQ(ex[1]->ints, (std::vector<int64_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 1}));
  const auto& out = l.result.program.buffer(ex[0]->outputs[0]);
  EXPECT_EQ(l.ctx->as_const(out.sizes[2]), 4);
}

// convolution_backward's grad_output and input are realized in the graph's layout: a
// channels-last grad_output computed by a pointwise (BatchNorm's backward, here a ReLU mask)
// reaches the extern channels-last (cuDNN would otherwise copy one of them per call).
TEST(LinalgLowering, ConvolutionBackwardActivationsKeepTheGraphLayout) {
  Lowered l = lower_text(
      R"(graph(%0: f32[2, 6, 4, 4]{96, 1, 24, 6}, %1: f32[2, 3, 4, 4]{48, 1, 12, 3}, %2: f32[6, 3, 3, 3]):
  %3: f32[2, 6, 4, 4]{96, 1, 24, 6} = aten.relu.default(%0)
  %4: f32[2, 3, 4, 4]{48, 1, 12, 3} = aten.mul.Tensor(%1, 2)
  %5: f32[2, 3, 4, 4]{48, 1, 12, 3}, %6: f32[6, 3, 3, 3] = aten.convolution_backward.default(%3, %4, %2, [6], [1, 1], [1, 1], [1, 1], false, [0, 0], 1, [true, true, false])
  return (%5, %6)
)",
      extern_convolutions());
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::ConvolutionBackward);
  auto strides = [&](loop::BufferId b) {
    std::vector<int64_t> out;
    for (const auto& e : l.result.program.buffer(b).strides) out.push_back(*l.ctx->as_const(e));
    return out;
  };
  EXPECT_EQ(strides(ex[0]->inputs[0]), (std::vector<int64_t>{96, 1, 24, 6}));
  EXPECT_EQ(strides(ex[0]->inputs[1]), (std::vector<int64_t>{48, 1, 12, 3}));
  EXPECT_EQ(strides(ex[0]->outputs[0]), (std::vector<int64_t>{48, 1, 12, 3}));
}

// A clone of a value already in a buffer, read only by a product, reads the buffer in place
// (clone_may_alias); a clone the graph returns is still a copy.
TEST(LinalgLowering, CloneReadByAProductReadsItsSourceInPlace) {
  std::vector<double> a = as_f32(random_values(24, 41)), b = as_f32(random_values(30, 42)),
                      c = as_f32(random_values(15, 43));
  const char* text = R"(graph(%0: f32[4, 6], %1: f32[6, 5], %2: f32[5, 3]):
  %3: f32[4, 5] = aten.mm.default(%0, %1)
  %4: f32[4, 5] = aten.clone.default(%3)
  %5: f32[4, 3] = aten.mm.default(%4, %2)
  return (%5)
)";
  Lowered l = lower_text(text);
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 2u);
  const auto& prog = l.result.program;
  for (const auto& s : prog.steps) EXPECT_FALSE(std::holds_alternative<loop::ComputeNode>(s));
  auto outs = loop::interpret(prog, {HostTensor::from_doubles(DType::Float32, {4, 6}, a),
                                     HostTensor::from_doubles(DType::Float32, {6, 5}, b),
                                     HostTensor::from_doubles(DType::Float32, {5, 3}, c)});
  expect_close(outs[0], {4, 3}, matmul_ref(matmul_ref(a, b, 1, 4, 6, 5), c, 1, 4, 5, 3));

  const char* returned = R"(graph(%0: f32[4, 6], %1: f32[6, 5], %2: f32[5, 3]):
  %3: f32[4, 5] = aten.mm.default(%0, %1)
  %4: f32[4, 5] = aten.clone.default(%3)
  %5: f32[4, 3] = aten.mm.default(%4, %2)
  return (%5, %4, %3)
)";
  Lowered r = lower_text(returned);
  int copies = 0;
  for (const auto& s : r.result.program.steps)
    copies += std::holds_alternative<loop::ComputeNode>(s);
  EXPECT_GE(copies, 1);
}

// A value two batched products read, one through expand + view and one through permute +
// expand + view (attention's score gradient as AOTAutograd hands it to dq's and dk's
// products), is computed once: the second product reads the buffer transposed in place.
// Before, the expands hid the products from the realize rule and each computed it again.
TEST(LinalgLowering, ValueReadByTwoBatchedProductsThroughExpandsIsComputedOnce) {
  const char* text =
      R"(graph(%0: f32[2, 3, 8, 8]@cuda, %1: f32[2, 3, 8, 8]@cuda, %2: f32[6, 8, 4]@cuda, %3: f32[6, 8, 4]@cuda):
  %4: f32[2, 3, 8, 8]@cuda = aten.mul.Tensor(%0, %1)
  %5: f32[2, 3, 8, 8]@cuda = aten.exp.default(%4)
  %6: f32[2, 3, 8, 8]@cuda = aten.expand.default(%5, [2, 3, 8, 8])
  %7: f32[6, 8, 8]@cuda = aten.view.default(%6, [6, 8, 8])
  %8: f32[6, 8, 4]@cuda = aten.bmm.default(%7, %2)
  %9: f32[2, 3, 8, 8]{192, 64, 1, 8}@cuda = aten.permute.default(%5, [0, 1, 3, 2])
  %10: f32[2, 3, 8, 8]{192, 64, 1, 8}@cuda = aten.expand.default(%9, [2, 3, 8, 8])
  %11: f32[6, 8, 8]{64, 1, 8}@cuda = aten.view.default(%10, [6, 8, 8])
  %12: f32[6, 8, 4]@cuda = aten.bmm.default(%11, %3)
  return (%8, %12)
)";
  Lowered l = lower_text(text);
  int computed = 0;
  for (const auto& s : l.result.program.steps)
    computed += std::holds_alternative<loop::ComputeNode>(s);
  EXPECT_EQ(computed, 1) << loop::print_program(l.result.program);
  std::vector<double> a = as_f32(random_values(384, 51)), b = as_f32(random_values(384, 52)),
                      c = as_f32(random_values(192, 53)), d = as_f32(random_values(192, 54));
  auto outs =
      loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, {2, 3, 8, 8}, a),
                                         HostTensor::from_doubles(DType::Float32, {2, 3, 8, 8}, b),
                                         HostTensor::from_doubles(DType::Float32, {6, 8, 4}, c),
                                         HostTensor::from_doubles(DType::Float32, {6, 8, 4}, d)});
  std::vector<double> e(384), et(384);
  for (int m = 0; m < 6; ++m)
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        e[m * 64 + i * 8 + j] = std::exp(a[m * 64 + i * 8 + j] * b[m * 64 + i * 8 + j]);
        et[m * 64 + j * 8 + i] = e[m * 64 + i * 8 + j];
      }
  expect_close(outs[0], {6, 8, 4}, matmul_ref(e, c, 6, 8, 8, 4), 1e-4, 1e-5);
  expect_close(outs[1], {6, 8, 4}, matmul_ref(et, d, 6, 8, 8, 4), 1e-4, 1e-5);
}

// A graph output that is a clone of a fresh value nothing else reads, already in the output's
// layout (the layout pass's clone restoring a weight gradient's strides), is that value's
// buffer: no copy. Another layout, another reader, a graph input or a view keep the copy.
TEST(LinalgLowering, OutputCloneOfAFreshValueInItsLayoutIsThatValue) {
  auto copies_in = [](const char* text) {
    Lowered l = lower_text(text);
    int n = 0;
    for (const auto& s : l.result.program.steps) n += std::holds_alternative<loop::ComputeNode>(s);
    return n;
  };
  std::vector<double> a = as_f32(random_values(24, 61)), b = as_f32(random_values(30, 62));
  const char* fresh = R"(graph(%0: f32[4, 6], %1: f32[6, 5]):
  %2: f32[4, 5] = aten.mm.default(%0, %1)
  %3: f32[4, 5] = aten.clone.default(%2, memory_format="torch.contiguous_format")
  return (%3)
)";
  EXPECT_EQ(copies_in(fresh), 0);
  Lowered l = lower_text(fresh);
  auto outs =
      loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, {4, 6}, a),
                                         HostTensor::from_doubles(DType::Float32, {6, 5}, b)});
  expect_close(outs[0], {4, 5}, matmul_ref(a, b, 1, 4, 6, 5));
  EXPECT_GE(copies_in(R"(graph(%0: f32[4, 6], %1: f32[6, 5]):
  %2: f32[4, 5] = aten.mm.default(%0, %1)
  %3: f32[4, 5]{1, 4} = aten.clone.default(%2, memory_format="torch.preserve_format")
  return (%3)
)"),
            1)
      << "another layout";
  EXPECT_GE(copies_in(R"(graph(%0: f32[4, 6], %1: f32[6, 5]):
  %2: f32[4, 5] = aten.mm.default(%0, %1)
  %3: f32[4, 5] = aten.clone.default(%2, memory_format="torch.contiguous_format")
  %4: f32[4, 5] = aten.mul.Tensor(%2, 2)
  return (%3, %4)
)"),
            2)
      << "another reader";
  EXPECT_GE(copies_in(R"(graph(%0: f32[4, 6]):
  %1: f32[4, 6] = aten.clone.default(%0, memory_format="torch.contiguous_format")
  return (%1)
)"),
            1)
      << "a graph input";
  EXPECT_GE(copies_in(R"(graph(%0: f32[4, 6], %1: f32[6, 5]):
  %2: f32[4, 5] = aten.mm.default(%0, %1)
  %3: f32[20] = aten.view.default(%2, [20])
  %4: f32[20] = aten.clone.default(%3, memory_format="torch.contiguous_format")
  return (%4)
)"),
            1)
      << "a view";
}

TEST(LinalgLowering, GradientReadByProductsAndASumIsComputedOnce) {
  // A linear layer's backward: the ReLU gradient %4 feeds dX (mm), dW (mm of its transpose)
  // and the bias gradient (a column sum). Realized once (realize.cpp, read_by_a_product): dW's
  // product reads it transposed in place and the sum loads it, rather than a transposed copy
  // for dW and the sum recomputing it from %0 and %1.
  const int64_t N = 8, H = 16, O = 4, I = 5;
  std::vector<double> g = as_f32(random_values(N * H, 51)), x = as_f32(random_values(N * H, 52)),
                      w = as_f32(random_values(H * O, 53)), a = as_f32(random_values(N * I, 54));
  const char* text = R"(graph(%0: f32[8, 16], %1: f32[8, 16], %2: f32[16, 4], %3: f32[8, 5]):
  %4: f32[8, 16] = aten.threshold_backward.default(%0, %1, 0)
  %5: f32[8, 4] = aten.mm.default(%4, %2)
  %6: f32[16, 8]{1, 16} = aten.t.default(%4)
  %7: f32[16, 5] = aten.mm.default(%6, %3)
  %8: f32[16] = aten.sum.dim_IntList(%4, [0])
  return (%5, %7, %8)
)";
  Lowered l = lower_text(text);
  const auto& prog = l.result.program;
  int pointwise = 0;
  for (const auto& s : prog.steps)
    if (auto* n = std::get_if<loop::ComputeNode>(&s)) pointwise += !n->is_reduction();
  EXPECT_EQ(pointwise, 1) << loop::print_program(prog);
  std::vector<double> r(N * H), rt(H * N), bias(H, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < H; ++j) {
      r[i * H + j] = x[i * H + j] <= 0 ? 0.0 : g[i * H + j];
      rt[j * N + i] = r[i * H + j];
      bias[j] += r[i * H + j];
    }
  auto outs = loop::interpret(prog, {HostTensor::from_doubles(DType::Float32, {N, H}, g),
                                     HostTensor::from_doubles(DType::Float32, {N, H}, x),
                                     HostTensor::from_doubles(DType::Float32, {H, O}, w),
                                     HostTensor::from_doubles(DType::Float32, {N, I}, a)});
  expect_close(outs[0], {N, O}, matmul_ref(r, w, 1, N, H, O));
  expect_close(outs[1], {H, I}, matmul_ref(rt, a, 1, H, N, I));
  expect_close(outs[2], {H}, bias);
}

}  // namespace
}  // namespace coil::lower::testing
