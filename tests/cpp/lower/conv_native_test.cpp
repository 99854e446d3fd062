// CPU convolutions that coil computes itself (src/lower/conv_native.cpp): 1x1 convolutions as
// products on the input's memory, depthwise convolutions as pointwise loops and small dense
// ones as a product over their gathered windows, against a brute-force convolution, through
// the reference interpreter. Large dense and grouped convolutions stay externs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../test_policies.h"
#include "coil/lower/lowering.h"
#include "family_test_util.h"

namespace coil::lower::testing {
namespace {

using loop::ExternKind;
using loop::ExternNode;

std::vector<ExternKind> extern_kinds(const Lowered& l) {
  std::vector<ExternKind> out;
  for (const auto& s : l.result.program.steps)
    if (auto* e = std::get_if<ExternNode>(&s)) out.push_back(e->kind);
  return out;
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, pad, dil, groups;
  bool bias, channels_last;
};

int64_t out_dim(int64_t in, const ConvCase& p) {
  return (in + 2 * p.pad - p.dil * (p.k - 1) - 1) / p.stride + 1;
}

// out[n][o][y][x] = bias[o] + sum over the group's channels and the window, row-major.
std::vector<double> conv_ref(const ConvCase& p, const std::vector<double>& x,
                             const std::vector<double>& w, const std::vector<double>& b) {
  const int64_t oh = out_dim(p.h, p), ow = out_dim(p.w, p);
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  std::vector<double> out;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double s = p.bias ? b[o] : 0.0;
          const int64_t g = o / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < p.k; ++ky)
              for (int64_t kx = 0; kx < p.k; ++kx) {
                const int64_t iy = y * p.stride + ky * p.dil - p.pad;
                const int64_t ix = xx * p.stride + kx * p.dil - p.pad;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                const int64_t c = g * cg + ci;
                s += x[((n * p.c + c) * p.h + iy) * p.w + ix] *
                     w[((o * cg + ci) * p.k + ky) * p.k + kx];
              }
          out.push_back(s);
        }
  return out;
}

std::string dims(const std::vector<int64_t>& d, bool channels_last) {
  std::string s = "[";
  for (size_t k = 0; k < d.size(); ++k) s += (k ? ", " : "") + std::to_string(d[k]);
  s += "]";
  if (channels_last) {
    const int64_t c = d[1], h = d[2], w = d[3];
    s += "{" + std::to_string(h * w * c) + ", 1, " + std::to_string(w * c) + ", " +
         std::to_string(c) + "}";
  }
  return s;
}

// Values `v` (row-major logical order) in a tensor of `sizes`, stored NHWC when asked.
HostTensor stored(const std::vector<int64_t>& sizes, const std::vector<double>& v,
                  bool channels_last) {
  if (!channels_last) return HostTensor::from_doubles(DType::Float32, sizes, v);
  const int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  HostTensor t = HostTensor::zeros(DType::Float32, {sizes[0], h, w, c})
                     .as_strided(sizes, {h * w * c, 1, w * c, c}, 0);
  for (int64_t i = 0; i < product(sizes); ++i) t.set(unravel(sizes, i), v[i]);
  return t;
}

// Lowers the case, checks which externs it became, and compares the interpreter's result.
void check_case(const ConvCase& p, std::vector<ExternKind> want_externs) {
  const int64_t oh = out_dim(p.h, p), ow = out_dim(p.w, p);
  const std::vector<int64_t> xs{p.n, p.c, p.h, p.w}, ws{p.o, p.c / p.groups, p.k, p.k},
      os{p.n, p.o, oh, ow};
  const std::string text =
      "graph(%0: f32" + dims(xs, p.channels_last) + ", %1: f32" + dims(ws, false) + ", %2: f32[" +
      std::to_string(p.o) + "]):\n  %3: f32" + dims(os, p.channels_last) +
      " = aten.convolution.default(%0, %1, " + (p.bias ? "%2" : "None") + ", [" +
      std::to_string(p.stride) + ", " + std::to_string(p.stride) + "], [" + std::to_string(p.pad) +
      ", " + std::to_string(p.pad) + "], [" + std::to_string(p.dil) + ", " + std::to_string(p.dil) +
      "], false, [0, 0], " + std::to_string(p.groups) + ")\n  return (%3)\n";
  SCOPED_TRACE(text);
  Lowered l = lower_text(text);
  EXPECT_EQ(extern_kinds(l), want_externs);
  // (The interpreter runs no convolution extern: ATen's result is tested from Python.)
  if (!want_externs.empty() && want_externs[0] == ExternKind::Convolution) return;
  const auto x = as_f32(random_values(product(xs), 1)), w = as_f32(random_values(product(ws), 2)),
             b = as_f32(random_values(p.o, 3));
  const HostTensor xt = stored(xs, x, p.channels_last);
  auto out =
      loop::interpret(l.result.program, {xt, HostTensor::from_doubles(DType::Float32, ws, w),
                                         HostTensor::from_doubles(DType::Float32, {p.o}, b)});
  ASSERT_EQ(out.size(), 1u);
  expect_close(out[0], os, conv_ref(p, x, w, b), 1e-4, 1e-4);
}

TEST(ConvNative, PointwiseChannelsLastIsOneProduct) {
  check_case({2, 8, 5, 6, 12, 1, 1, 0, 1, 1, true, true}, {ExternKind::Mm});
  check_case({2, 8, 5, 6, 12, 1, 1, 0, 1, 1, false, true}, {ExternKind::Mm});
}

TEST(ConvNative, PointwiseContiguousIsABatchedProduct) {
  check_case({2, 8, 5, 6, 12, 1, 1, 0, 1, 1, true, false}, {ExternKind::Bmm});
}

TEST(ConvNative, StridedPointwiseGathersItsPixels) {
  check_case({2, 8, 7, 9, 4, 1, 2, 0, 1, 1, true, true}, {ExternKind::Mm});
  check_case({2, 8, 7, 9, 4, 1, 2, 0, 1, 1, false, false}, {ExternKind::Bmm});
}

// Squeeze-excitation's convolutions over a 1x1 image: the same product in either layout.
TEST(ConvNative, SinglePixelPointwise) {
  check_case({3, 16, 1, 1, 4, 1, 1, 0, 1, 1, true, false}, {ExternKind::Mm});
  check_case({3, 16, 1, 1, 4, 1, 1, 0, 1, 1, true, true}, {ExternKind::Mm});
}

TEST(ConvNative, DepthwiseIsALoop) {
  check_case({2, 6, 7, 8, 6, 3, 1, 1, 1, 6, true, true}, {});
  check_case({2, 6, 7, 8, 6, 3, 2, 1, 1, 6, false, true}, {});
  check_case({2, 6, 9, 9, 6, 5, 1, 2, 1, 6, true, false}, {});
  check_case({1, 4, 10, 10, 4, 7, 1, 3, 1, 4, true, true}, {});
}

TEST(ConvNative, DepthwiseWithDilationAndChannelMultiplier) {
  check_case({2, 4, 9, 9, 8, 3, 1, 2, 2, 4, true, true}, {});
  check_case({2, 3, 6, 6, 6, 3, 2, 0, 1, 3, false, false}, {});
}

// Small dense convolutions: a gather of every output pixel's window, then one product.
TEST(ConvNative, SmallDenseIsOneProductOverGatheredWindows) {
  check_case({2, 4, 6, 6, 6, 3, 1, 1, 1, 1, true, true}, {ExternKind::Mm});
  check_case({2, 3, 9, 9, 5, 3, 2, 1, 1, 1, false, false}, {ExternKind::Mm});
  check_case({1, 4, 10, 10, 3, 3, 1, 2, 2, 1, true, true}, {ExternKind::Mm});
  check_case({2, 3, 11, 11, 4, 7, 2, 3, 1, 1, true, false}, {ExternKind::Mm});
  check_case({2, 5, 8, 7, 3, 2, 3, 0, 1, 1, false, true}, {ExternKind::Mm});
  // A padded 1x1 convolution is not a product of the input's pixels, but of their windows.
  check_case({2, 4, 5, 5, 6, 1, 1, 1, 1, 1, false, true}, {ExternKind::Mm});
  // Few pixels for many output channels: windows channel-major, the OIHW weight read in place.
  check_case({1, 5, 3, 3, 8, 3, 1, 0, 1, 1, true, true}, {ExternKind::Mm});
  check_case({1, 5, 3, 3, 20, 3, 2, 1, 1, 1, false, false}, {ExternKind::Mm});
}

TEST(ConvNative, LargeDenseAndGroupedConvolutionsStayExterns) {
  // 2 * 2048 pixels * 576 * 64 = 151 MFLOP: oneDNN's direct convolution is faster there.
  check_case({2, 64, 32, 32, 64, 3, 1, 1, 1, 1, false, true}, {ExternKind::Convolution});
  check_case({2, 4, 6, 6, 6, 3, 1, 1, 1, 2, true, false}, {ExternKind::Convolution});
}

// --- convolution_backward

struct Grads {
  std::vector<double> input, weight, bias;
};

Grads conv_backward_ref(const ConvCase& p, const std::vector<double>& x,
                        const std::vector<double>& w, const std::vector<double>& go) {
  const int64_t oh = out_dim(p.h, p), ow = out_dim(p.w, p);
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  Grads g;
  g.input.assign(p.n * p.c * p.h * p.w, 0.0);
  g.weight.assign(p.o * cg * p.k * p.k, 0.0);
  g.bias.assign(p.o, 0.0);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          const double gv = go[((n * p.o + o) * oh + y) * ow + xx];
          g.bias[o] += gv;
          const int64_t grp = o / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < p.k; ++ky)
              for (int64_t kx = 0; kx < p.k; ++kx) {
                const int64_t iy = y * p.stride + ky * p.dil - p.pad;
                const int64_t ix = xx * p.stride + kx * p.dil - p.pad;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                const int64_t c = grp * cg + ci;
                const int64_t xi = ((n * p.c + c) * p.h + iy) * p.w + ix;
                const int64_t wi = ((o * cg + ci) * p.k + ky) * p.k + kx;
                g.input[xi] += gv * w[wi];
                g.weight[wi] += gv * x[xi];
              }
        }
  return g;
}

// Lowers convolution_backward for the case (all three gradients), checks that no extern
// convolution is left, and compares each gradient with the brute-force one.
void check_backward(const ConvCase& p, std::vector<ExternKind> want_externs) {
  const int64_t oh = out_dim(p.h, p), ow = out_dim(p.w, p);
  const std::vector<int64_t> xs{p.n, p.c, p.h, p.w}, ws{p.o, p.c / p.groups, p.k, p.k},
      os{p.n, p.o, oh, ow};
  auto pair = [](int64_t v) { return "[" + std::to_string(v) + ", " + std::to_string(v) + "]"; };
  const std::string text =
      "graph(%0: f32" + dims(os, p.channels_last) + ", %1: f32" + dims(xs, p.channels_last) +
      ", %2: f32" + dims(ws, false) + "):\n  %3: f32" + dims(xs, p.channels_last) + ", %4: f32" +
      dims(ws, false) + ", %5: f32[" + std::to_string(p.o) +
      "] = aten.convolution_backward.default(%0, %1, %2, [" + std::to_string(p.o) + "], " +
      pair(p.stride) + ", " + pair(p.pad) + ", " + pair(p.dil) + ", false, [0, 0], " +
      std::to_string(p.groups) + ", [true, true, true])\n  return (%3, %4, %5)\n";
  SCOPED_TRACE(text);
  Lowered l = lower_text(text);
  EXPECT_EQ(extern_kinds(l), want_externs);
  const auto x = as_f32(random_values(product(xs), 4)), w = as_f32(random_values(product(ws), 5)),
             go = as_f32(random_values(product(os), 6));
  auto out = loop::interpret(l.result.program,
                             {stored(os, go, p.channels_last), stored(xs, x, p.channels_last),
                              HostTensor::from_doubles(DType::Float32, ws, w)});
  ASSERT_EQ(out.size(), 3u);
  const Grads want = conv_backward_ref(p, x, w, go);
  expect_close(out[0], xs, want.input, 1e-4, 1e-4);
  expect_close(out[1], ws, want.weight, 1e-3, 1e-4);
  expect_close(out[2], {p.o}, want.bias, 1e-4, 1e-4);
}

TEST(ConvNative, PointwiseBackwardIsProducts) {
  check_backward({2, 8, 5, 6, 12, 1, 1, 0, 1, 1, true, true}, {ExternKind::Mm, ExternKind::Mm});
  check_backward({2, 8, 5, 6, 12, 1, 1, 0, 1, 1, true, false}, {ExternKind::Bmm, ExternKind::Bmm});
  // A strided (downsampling) one: pixels gathered, the input gradient spread back out.
  check_backward({2, 8, 7, 9, 4, 1, 2, 0, 1, 1, true, true}, {ExternKind::Mm, ExternKind::Mm});
  check_backward({2, 8, 7, 9, 4, 1, 2, 0, 1, 1, false, false}, {ExternKind::Bmm, ExternKind::Bmm});
}

TEST(ConvNative, DepthwiseBackwardIsLoops) {
  check_backward({2, 6, 7, 8, 6, 3, 1, 1, 1, 6, true, true}, {});
  check_backward({2, 6, 7, 8, 6, 3, 2, 1, 1, 6, true, true}, {});
  check_backward({2, 6, 9, 9, 6, 5, 2, 2, 1, 6, true, false}, {});
  check_backward({2, 4, 9, 9, 8, 3, 1, 2, 2, 4, true, true}, {});
  check_backward({1, 3, 6, 7, 6, 3, 2, 0, 1, 3, true, false}, {});
}

TEST(ConvNative, SmallDenseBackwardIsProductsAndAScatter) {
  const std::vector<ExternKind> two{ExternKind::Mm, ExternKind::Mm};
  check_backward({2, 4, 6, 6, 6, 3, 1, 1, 1, 1, true, true}, two);
  check_backward({2, 3, 9, 9, 5, 3, 2, 1, 1, 1, true, false}, two);
  check_backward({1, 4, 10, 10, 3, 3, 1, 2, 2, 1, true, true}, two);
  check_backward({2, 3, 11, 11, 4, 5, 2, 2, 1, 1, true, true}, two);
  check_backward({2, 5, 8, 7, 3, 2, 3, 0, 1, 1, true, false}, two);
  // Channel-major windows.
  check_backward({1, 5, 3, 3, 8, 3, 1, 0, 1, 1, true, true}, two);
  check_backward({1, 5, 3, 3, 20, 3, 2, 1, 1, 1, true, false}, two);
}

TEST(ConvNative, LargeDenseBackwardStaysAnExtern) {
  const std::string text =
      R"(graph(%0: f32[2, 64, 32, 32], %1: f32[2, 64, 32, 32], %2: f32[64, 64, 3, 3]):
  %3: f32[2, 64, 32, 32], %4: f32[64, 64, 3, 3] = aten.convolution_backward.default(%0, %1, %2, [64], [1, 1], [1, 1], [1, 1], false, [0, 0], 1, [true, true, false])
  return (%3, %4)
)";
  EXPECT_EQ(extern_kinds(lower_text(text)),
            std::vector<ExternKind>{ExternKind::ConvolutionBackward});
}

// On the GPU the library (cuDNN through coil) takes no bias: the convolution's bias is a
// pointwise add after the extern, and convolution_backward's bias gradient a reduction of
// grad_output, with the extern's output_mask asking only for the other two.
TEST(ConvNative, CudaBiasIsAddedAndReducedByCoil) {
  const std::string text =
      R"(graph(%0: f32[2, 8, 6, 6]@cuda, %1: f32[16, 8, 3, 3]@cuda, %2: f32[16]@cuda, %3: f32[2, 16, 6, 6]@cuda):
  %4: f32[2, 16, 6, 6]@cuda = aten.convolution.default(%0, %1, %2, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)
  %5: f32[2, 8, 6, 6]@cuda, %6: f32[16, 8, 3, 3]@cuda, %7: f32[16]@cuda = aten.convolution_backward.default(%3, %0, %1, [16], [1, 1], [1, 1], [1, 1], false, [0, 0], 1, [true, true, true])
  %8: f32[16]@cuda = aten.convolution_backward.default(%3, %0, %1, [16], [1, 1], [1, 1], [1, 1], false, [0, 0], 1, [false, false, true])
  return (%4, %5, %6, %7, %8)
)";
  Lowered l = lower_text(text);
  std::vector<const ExternNode*> externs;
  for (const auto& s : l.result.program.steps)
    if (auto* e = std::get_if<ExternNode>(&s)) externs.push_back(e);
  ASSERT_EQ(externs.size(), 2u);  // the bias gradient alone needs no convolution
  EXPECT_EQ(externs[0]->kind, ExternKind::Convolution);
  EXPECT_EQ(externs[0]->inputs.size(), 2u);  // input, weight: no bias
  EXPECT_EQ(externs[1]->kind, ExternKind::ConvolutionBackward);
  EXPECT_EQ(externs[1]->outputs.size(), 2u);
  const std::vector<int64_t> mask(externs[1]->ints.end() - 3, externs[1]->ints.end());
  EXPECT_EQ(mask, (std::vector<int64_t>{1, 1, 0}));
  // A transposed convolution runs on the host (ATen), bias included: the extern keeps it.
  const std::string transposed =
      R"(graph(%0: f32[2, 8, 6, 6]@cuda, %1: f32[8, 16, 3, 3]@cuda, %2: f32[16]@cuda):
  %3: f32[2, 16, 8, 8]@cuda = aten.convolution.default(%0, %1, %2, [1, 1], [0, 0], [1, 1], true, [0, 0], 1)
  return (%3)
)";
  Lowered t = lower_text(transposed);
  for (const auto& s : t.result.program.steps)
    if (auto* e = std::get_if<ExternNode>(&s)) EXPECT_EQ(e->inputs.size(), 3u);
  // On the CPU oneDNN adds the bias: the extern keeps it (the dense 3x3 stays an extern).
  const std::string cpu = R"(graph(%0: f32[2, 64, 32, 32], %1: f32[64, 64, 3, 3], %2: f32[64]):
  %3: f32[2, 64, 32, 32] = aten.convolution.default(%0, %1, %2, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)
  return (%3)
)";
  Lowered c = lower_text(cpu);
  for (const auto& s : c.result.program.steps)
    if (auto* e = std::get_if<ExternNode>(&s)) EXPECT_EQ(e->inputs.size(), 3u);
}

TEST(ConvNative, OptionOffKeepsTheExtern) {
  const std::string text = R"(graph(%0: f32[2, 4, 5, 5], %1: f32[4, 1, 3, 3]):
  %2: f32[2, 4, 5, 5] = aten.convolution.default(%0, %1, None, [1, 1], [1, 1], [1, 1], false, [0, 0], 4)
  return (%2)
)";
  Lowered l;
  l.graph = parse_graph(text, *l.ctx);
  CompileOptions options;
  options.cpu_native_convolutions = false;
  l.result = lower_graph(*l.graph, options, coil::test_support::policy_for(*l.graph));
  EXPECT_EQ(extern_kinds(l), std::vector<ExternKind>{ExternKind::Convolution});
}

}  // namespace
}  // namespace coil::lower::testing
