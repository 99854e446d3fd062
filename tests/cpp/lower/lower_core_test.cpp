// Tests of the lowering framework and the pointwise / view / creation lowerings: each graph is
// lowered, run by the reference loop interpreter, and compared with a direct C++ computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "../test_policies.h"
#include "coil/graph/parser.h"
#include "coil/loop/interpreter.h"
#include "coil/loop/printer.h"
#include "coil/lower/lower.h"
#include "coil/lower/lowering.h"
#include "coil/ops/registry.h"
#include "coil/support/error.h"

namespace coil::lower {
namespace {

using loop::HostTensor;

struct Lowered {
  std::unique_ptr<sym::Context> ctx = std::make_unique<sym::Context>();
  std::unique_ptr<Graph> graph;
  LowerResult result;
  std::string text() const { return loop::print_program(result.program); }
  std::vector<HostTensor> run(const std::vector<HostTensor>& inputs, int64_t seed = 0) const {
    return loop::interpret(result.program, inputs, seed);
  }
};

Lowered lower_text(const std::string& text, CompileOptions opts = {}) {
  Lowered l;
  l.graph = parse_graph(text, *l.ctx);
  l.result = lower_graph(*l.graph, opts, coil::test_support::policy_for(*l.graph));
  return l;
}

// Deterministic test data: values in [-2, 2) (ints: [-5, 5)).
std::vector<double> data(int64_t n, int salt = 0, bool integral = false) {
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) {
    int64_t h = (k * 37 + salt * 101 + 13) % 97;
    v[k] = integral ? static_cast<double>(h % 10 - 5) : (h - 48) / 24.0;
  }
  return v;
}

HostTensor tensor(DType t, std::vector<int64_t> sizes, int salt = 0) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return HostTensor::from_doubles(t, sizes, data(n, salt, !dtype_is_floating(t)));
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << "at " << k;
    } else {
      EXPECT_NEAR(got[k], want[k], tol * (1 + std::fabs(want[k]))) << "at " << k;
    }
  }
}

TEST(LowerCore, BroadcastAddAlpha) {
  auto l = lower_text(R"(graph(%0: f32[4, 3], %1: f32[3]):
  %2: f32[4, 3] = aten.add.Tensor(%0, %1, alpha=2)
  return (%2)
)");
  auto a = tensor(DType::Float32, {4, 3}, 1), b = tensor(DType::Float32, {3}, 2);
  auto out = l.run({a, b});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(a.get({{i, j}}) + 2 * b.get({{j}}));
  expect_near(out[0].to_doubles(), want);
  EXPECT_TRUE(l.result.fallback_ops.empty());
}

TEST(LowerCore, PromotionIntFloatScalar) {
  auto l = lower_text(R"(graph(%0: i32[5]):
  %1: f32[5] = aten.mul.Tensor(%0, 2.5)
  %2: b8[5] = aten.gt.Scalar(%0, 0)
  %3: i32[5] = aten.add.Tensor(%0, 3)
  return (%1, %2, %3)
)");
  auto a = tensor(DType::Int32, {5}, 3);
  auto out = l.run({a});
  auto av = a.to_doubles();
  std::vector<double> w1, w2, w3;
  for (double x : av) {
    w1.push_back(x * 2.5);
    w2.push_back(x > 0);
    w3.push_back(x + 3);
  }
  EXPECT_EQ(out[0].dtype, DType::Float32);
  expect_near(out[0].to_doubles(), w1);
  EXPECT_EQ(out[1].dtype, DType::Bool);
  expect_near(out[1].to_doubles(), w2);
  expect_near(out[2].to_doubles(), w3);
}

TEST(LowerCore, PromotionDivIntsAndModes) {
  auto l = lower_text(R"(graph(%0: i64[6], %1: i64[6]):
  %2: f32[6] = aten.div.Tensor(%0, %1)
  %3: i64[6] = aten.div.Tensor_mode(%0, %1, rounding_mode="floor")
  %4: i64[6] = aten.div.Tensor_mode(%0, %1, rounding_mode="trunc")
  %5: i64[6] = aten.remainder.Tensor(%0, %1)
  return (%2, %3, %4, %5)
)");
  auto a = HostTensor::from_doubles(DType::Int64, {6}, {7, -7, 7, -7, 0, 9});
  auto b = HostTensor::from_doubles(DType::Int64, {6}, {2, 2, -2, -2, 3, 4});
  auto out = l.run({a, b});
  expect_near(out[0].to_doubles(), {3.5, -3.5, -3.5, 3.5, 0, 2.25});
  expect_near(out[1].to_doubles(), {3, -4, -4, 3, 0, 2});
  expect_near(out[2].to_doubles(), {3, -3, -3, 3, 0, 2});
  expect_near(out[3].to_doubles(), {1, 1, -1, -1, 0, 1});
}

TEST(LowerCore, PromotionZeroDimAndBool) {
  auto l = lower_text(R"(graph(%0: i32[3], %1: i64[], %2: b8[3], %3: f16[3], %4: f32[]):
  %5: i32[3] = aten.add.Tensor(%0, %1)
  %6: i64[3] = aten.add.Tensor(%2, 1)
  %7: f16[3] = aten.mul.Tensor(%3, %4)
  return (%5, %6, %7)
)");
  auto a = tensor(DType::Int32, {3}, 1);
  auto z = HostTensor::from_doubles(DType::Int64, {}, {4});
  auto bo = HostTensor::from_doubles(DType::Bool, {3}, {1, 0, 1});
  auto h = HostTensor::from_doubles(DType::Float16, {3}, {0.5, 1.5, -2});
  auto f = HostTensor::from_doubles(DType::Float32, {}, {3});
  auto out = l.run({a, z, bo, h, f});
  auto av = a.to_doubles();
  expect_near(out[0].to_doubles(), {av[0] + 4, av[1] + 4, av[2] + 4});
  expect_near(out[1].to_doubles(), {2, 1, 2});
  EXPECT_EQ(out[2].dtype, DType::Float16);
  expect_near(out[2].to_doubles(), {1.5, 4.5, -6});
}

struct UnaryCase {
  const char* op;
  std::function<double(double)> ref;
  double lo, hi;
};

TEST(LowerCore, UnaryMath) {
  const double pi = 3.14159265358979323846;
  std::vector<UnaryCase> cases = {
      {"neg", [](double x) { return -x; }, -2, 2},
      {"abs", [](double x) { return std::fabs(x); }, -2, 2},
      {"exp", [](double x) { return std::exp(x); }, -2, 2},
      {"exp2", [](double x) { return std::exp2(x); }, -2, 2},
      {"expm1", [](double x) { return std::expm1(x); }, -2, 2},
      {"log", [](double x) { return std::log(x); }, 0.1, 3},
      {"log2", [](double x) { return std::log2(x); }, 0.1, 3},
      {"log10", [](double x) { return std::log10(x); }, 0.1, 3},
      {"log1p", [](double x) { return std::log1p(x); }, -0.5, 3},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 4},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.1, 4},
      {"reciprocal", [](double x) { return 1 / x; }, 0.1, 4},
      {"sin", [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](double x) { return std::cos(x); }, -3, 3},
      {"tan", [](double x) { return std::tan(x); }, -1, 1},
      {"asin", [](double x) { return std::asin(x); }, -0.9, 0.9},
      {"acos", [](double x) { return std::acos(x); }, -0.9, 0.9},
      {"atan", [](double x) { return std::atan(x); }, -3, 3},
      {"sinh", [](double x) { return std::sinh(x); }, -2, 2},
      {"cosh", [](double x) { return std::cosh(x); }, -2, 2},
      {"tanh", [](double x) { return std::tanh(x); }, -2, 2},
      {"asinh", [](double x) { return std::asinh(x); }, -2, 2},
      {"acosh", [](double x) { return std::acosh(x); }, 1, 3},
      {"atanh", [](double x) { return std::atanh(x); }, -0.9, 0.9},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -4, 4},
      {"erf", [](double x) { return std::erf(x); }, -2, 2},
      {"erfc", [](double x) { return std::erfc(x); }, -2, 2},
      {"erfinv", [](double x) { return x; }, -0.9, 0.9},  // checked through erf below
      {"floor", [](double x) { return std::floor(x); }, -3, 3},
      {"ceil", [](double x) { return std::ceil(x); }, -3, 3},
      {"round", [](double x) { return std::nearbyint(x); }, -3, 3},
      {"trunc", [](double x) { return std::trunc(x); }, -3, 3},
      {"sign", [](double x) { return (x > 0) - (x < 0); }, -3, 3},
      {"relu", [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, -3, 3},
  };
  (void)pi;
  for (const auto& c : cases) {
    std::string text = std::string("graph(%0: f32[9]):\n  %1: f32[9] = aten.") + c.op +
                       ".default(%0)\n  return (%1)\n";
    auto l = lower_text(text);
    std::vector<double> xs;
    for (int k = 0; k < 9; ++k) xs.push_back(c.lo + (c.hi - c.lo) * k / 8.0);
    auto in = HostTensor::from_doubles(DType::Float32, {9}, xs);
    auto got = l.run({in})[0].to_doubles();
    auto xin = in.to_doubles();  // rounded to f32
    for (int k = 0; k < 9; ++k) {
      double want = c.ref(xin[k]);
      if (std::string(c.op) == "erfinv") {
        EXPECT_NEAR(std::erf(got[k]), xin[k], 1e-5) << c.op << " at " << xin[k];
        continue;
      }
      if (std::isinf(want)) {
        EXPECT_EQ(got[k], want) << c.op;
        continue;
      }
      EXPECT_NEAR(got[k], want, 1e-5 * (1 + std::fabs(want))) << c.op << " at " << xin[k];
    }
  }
}

TEST(LowerCore, IntUnaryPromotesToFloat) {
  auto l = lower_text(R"(graph(%0: i64[4]):
  %1: f32[4] = aten.exp.default(%0)
  %2: i64[4] = aten.abs.default(%0)
  %3: i64[4] = aten.floor.default(%0)
  return (%1, %2, %3)
)");
  auto a = HostTensor::from_doubles(DType::Int64, {4}, {-2, -1, 0, 3});
  auto out = l.run({a});
  expect_near(out[0].to_doubles(), {std::exp(-2.0), std::exp(-1.0), 1, std::exp(3.0)});
  expect_near(out[1].to_doubles(), {2, 1, 0, 3});
  expect_near(out[2].to_doubles(), {-2, -1, 0, 3});
}

TEST(LowerCore, BinaryAndSelectionOps) {
  auto l = lower_text(R"(graph(%0: f32[6], %1: f32[6], %2: b8[6]):
  %3: f32[6] = aten.pow.Tensor_Scalar(%0, 2)
  %4: f32[6] = aten.pow.Tensor_Tensor(%1, %0)
  %5: f32[6] = aten.maximum.default(%0, %1)
  %6: f32[6] = aten.where.self(%2, %0, %1)
  %7: f32[6] = aten.clamp.default(%0, -0.5, 0.5)
  %8: f32[6] = aten.masked_fill.Scalar(%0, %2, 7.0)
  %9: f32[6] = aten.atan2.default(%0, %1)
  %10: f32[6] = aten.fmod.Tensor(%0, %1)
  %11: f32[6] = aten.sub.Tensor(%0, %1, alpha=3)
  %12: f32[6] = aten.rsub.Scalar(%0, 1.0)
  %13: b8[6] = aten.logical_and.default(%2, %0)
  %14: f32[6] = aten.leaky_relu.default(%0, 0.1)
  %15: f32[6] = aten.hardtanh.default(%0)
  %16: f32[6] = aten.where.ScalarOther(%2, %0, 0.0)
  return (%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16)
)");
  auto a = HostTensor::from_doubles(DType::Float32, {6}, {-1.5, -0.25, 0, 0.75, 1.25, 2});
  auto b = HostTensor::from_doubles(DType::Float32, {6}, {0.5, 1.5, 2, 0.25, 3, 1.25});
  auto m = HostTensor::from_doubles(DType::Bool, {6}, {1, 0, 1, 1, 0, 0});
  auto out = l.run({a, b, m});
  auto av = a.to_doubles(), bv = b.to_doubles(), mv = m.to_doubles();
  std::vector<std::vector<double>> want(14);
  for (int k = 0; k < 6; ++k) {
    double x = av[k], y = bv[k];
    bool c = mv[k] != 0;
    want[0].push_back(x * x);
    want[1].push_back(std::pow(y, x));
    want[2].push_back(std::max(x, y));
    want[3].push_back(c ? x : y);
    want[4].push_back(std::clamp(x, -0.5, 0.5));
    want[5].push_back(c ? 7.0 : x);
    want[6].push_back(std::atan2(x, y));
    want[7].push_back(std::fmod(x, y));
    want[8].push_back(x - 3 * y);
    want[9].push_back(1.0 - x);
    want[10].push_back(c && x != 0);
    want[11].push_back(x > 0 ? x : 0.1 * x);
    want[12].push_back(std::clamp(x, -1.0, 1.0));
    want[13].push_back(c ? x : 0.0);
  }
  for (size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE(k);
    expect_near(out[k].to_doubles(), want[k]);
  }
}

TEST(LowerCore, BackwardOps) {
  auto l = lower_text(R"(graph(%0: f32[5], %1: f32[5]):
  %2: f32[5] = aten.sigmoid_backward.default(%0, %1)
  %3: f32[5] = aten.tanh_backward.default(%0, %1)
  %4: f32[5] = aten.threshold_backward.default(%0, %1, 0.0)
  %5: f32[5] = aten.gelu_backward.default(%0, %1)
  %6: f32[5] = aten.gelu.default(%1, approximate="tanh")
  %7: f32[5] = aten.gelu_backward.default(%0, %1, approximate="tanh")
  return (%2, %3, %4, %5, %6, %7)
)");
  auto g = tensor(DType::Float32, {5}, 4), y = tensor(DType::Float32, {5}, 5);
  auto out = l.run({g, y});
  auto gv = g.to_doubles(), yv = y.to_doubles();
  auto gelu_t = [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  std::vector<std::vector<double>> want(6);
  for (int k = 0; k < 5; ++k) {
    double gr = gv[k], x = yv[k];
    want[0].push_back(gr * (1 - x) * x);
    want[1].push_back(gr * (1 - x * x));
    want[2].push_back(x <= 0 ? 0 : gr);
    double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
    double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    want[3].push_back(gr * (cdf + x * pdf));
    want[4].push_back(gelu_t(x));
    double h = 1e-4;  // numeric derivative of the tanh approximation
    want[5].push_back(gr * (gelu_t(x + h) - gelu_t(x - h)) / (2 * h));
  }
  for (size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE(k);
    expect_near(out[k].to_doubles(), want[k], k == 5 ? 1e-4 : 1e-5);
  }
}

// Brute force strided reference: element of a row-major [sizes] tensor at storage offset.
TEST(LowerCore, ViewsPermuteReshapeRoundTrip) {
  auto l = lower_text(R"(graph(%0: f32[2, 3, 4]):
  %1: f32[4, 2, 3]{1, 12, 4} = aten.permute.default(%0, [2, 0, 1])
  %2: f32[4, 2, 3] = aten.mul.Tensor(%1, 2.0)
  %3: f32[8, 3] = aten.view.default(%2, [8, 3])
  %4: f32[3, 8]{1, 3} = aten.t.default(%3)
  %5: f32[24] = aten.reshape.default(%0, [-1])
  return (%4, %5)
)");
  auto a = tensor(DType::Float32, {2, 3, 4}, 6);
  auto out = l.run({a});
  // out0[c][r] = 2 * a[p][i][j] where r = k*2 + p, (k, p, i) -> a[p][i][k]
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 8; ++r) want.push_back(2 * a.get({{r % 2, i, r / 2}}));
  expect_near(out[0].to_doubles(), want);
  expect_near(out[1].to_doubles(), a.to_doubles());
  // %5 is a view of the input: no copy.
  const auto& p = l.result.program;
  EXPECT_NE(p.buffer(p.outputs[1]).kind, loop::BufferKind::Intermediate);
}

TEST(LowerCore, ReshapeOfContiguousBufferHasNoDivMod) {
  auto l = lower_text(R"(graph(%0: f32[4, 6]):
  %1: f32[4, 6] = aten.exp.default(%0)
  %2: f32[4, 6] = aten.sin.default(%1)
  %3: f32[4, 6] = aten.add.Tensor(%1, %2)
  %4: f32[24] = aten.view.default(%0, [24])
  %5: f32[2, 12] = aten.view.default(%0, [2, 12])
  %6: f32[2, 12] = aten.add.Tensor(%5, 1.0)
  %7: f32[24] = aten.add.Tensor(%4, 1.0)
  return (%3, %6, %7)
)");
  std::string text = l.text();
  std::regex load_re(R"(load (\w+)\[([^\]]*)\])");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), load_re);
       it != std::sregex_iterator(); ++it) {
    std::string idx = (*it)[2];
    EXPECT_EQ(idx.find("//"), std::string::npos) << text;
    EXPECT_EQ(idx.find('%'), std::string::npos) << text;
  }
  auto a = tensor(DType::Float32, {4, 6}, 7);
  auto out = l.run({a});
  std::vector<double> w0, w1;
  for (double x : a.to_doubles()) {
    double e = static_cast<float>(std::exp(x));
    w0.push_back(e + std::sin(e));
    w1.push_back(x + 1);
  }
  expect_near(out[0].to_doubles(), w0);
  expect_near(out[1].to_doubles(), w1);
  expect_near(out[2].to_doubles(), w1);
}

TEST(LowerCore, ReshapeOfComputedValueUsesIndexMath) {
  auto l = lower_text(R"(graph(%0: f32[3, 8]):
  %1: f32[8, 3]{1, 8} = aten.permute.default(%0, [1, 0])
  %2: f32[6, 4] = aten.view.default(%1, [6, 4])
  %3: f32[6, 4] = aten.neg.default(%2)
  return (%3)
)");
  auto a = tensor(DType::Float32, {3, 8}, 8);
  auto out = l.run({a})[0].to_doubles();
  std::vector<double> want;
  for (int f = 0; f < 24; ++f) want.push_back(-a.get({{f % 3, f / 3}}));
  expect_near(out, want);
}

TEST(LowerCore, SlicesSelectsAndSteps) {
  auto l = lower_text(R"(graph(%0: f32[5, 10]):
  %1: f32[5, 3] = aten.slice.Tensor(%0, 1, 1, 9223372036854775807, 3)
  %2: f32[2, 10] = aten.slice.Tensor(%0, 0, -2)
  %3: f32[10] = aten.select.int(%0, 0, -1)
  %4: f32[3] = aten.slice.Tensor(%3, 0, 2, 8, 2)
  %5: f32[3] = aten.add.Tensor(%4, 1.0)
  %6: f32[5, 0] = aten.slice.Tensor(%0, 1, 7, 3)
  return (%1, %2, %3, %5, %6)
)");
  auto a = tensor(DType::Float32, {5, 10}, 9);
  auto out = l.run({a});
  std::vector<double> w1, w2, w3, w5;
  for (int i = 0; i < 5; ++i)
    for (int j = 1; j < 10; j += 3) w1.push_back(a.get({{i, j}}));
  for (int i = 3; i < 5; ++i)
    for (int j = 0; j < 10; ++j) w2.push_back(a.get({{i, j}}));
  for (int j = 0; j < 10; ++j) w3.push_back(a.get({{4, j}}));
  for (int j = 2; j < 8; j += 2) w5.push_back(a.get({{4, j}}) + 1);
  expect_near(out[0].to_doubles(), w1);
  expect_near(out[1].to_doubles(), w2);
  expect_near(out[2].to_doubles(), w3);
  expect_near(out[3].to_doubles(), w5);
  EXPECT_EQ(out[4].numel(), 0);
  // Pure views of the input are outputs without copies.
  const auto& p = l.result.program;
  for (int k : {0, 1, 2}) EXPECT_EQ(p.buffer(p.outputs[k]).kind, loop::BufferKind::View) << k;
}

TEST(LowerCore, AsStrided) {
  auto l = lower_text(R"(graph(%0: f32[4, 4]):
  %1: f32[3, 2]{1, 4} = aten.as_strided.default(%0, [3, 2], [1, 4], 2)
  %2: f32[3, 2] = aten.mul.Tensor(%1, 3.0)
  %3: f32[4, 4] = aten.exp.default(%0)
  %4: f32[2, 2]{5, 1} = aten.as_strided.default(%3, [2, 2], [5, 1])
  return (%2, %4)
)");
  auto a = tensor(DType::Float32, {4, 4}, 10);
  auto out = l.run({a});
  auto flat = a.to_doubles();
  std::vector<double> w0, w1;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) w0.push_back(3 * flat[2 + i + 4 * j]);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) w1.push_back(std::exp(flat[5 * i + j]));
  expect_near(out[0].to_doubles(), w0);
  expect_near(out[1].to_doubles(), w1);
}

TEST(LowerCore, ExpandSqueezeUnsqueezeSplit) {
  auto l = lower_text(R"(graph(%0: f32[3, 1], %1: f32[1, 6]):
  %2: f32[2, 3, 4] = aten.expand.default(%0, [2, -1, 4])
  %3: f32[3] = aten.squeeze.dim(%0, 1)
  %4: f32[1, 3] = aten.unsqueeze.default(%3, 0)
  %5: f32[6] = aten.squeeze.default(%1)
  %6: f32[4], %7: f32[2] = aten.split.Tensor(%5, 4)
  %8: f32[1], %9: f32[5] = aten.split_with_sizes.default(%5, [1, 5])
  %10: f32[2, 3, 4] = aten.add.Tensor(%2, 1.0)
  return (%10, %4, %7, %9)
)");
  auto a = tensor(DType::Float32, {3, 1}, 11), b = tensor(DType::Float32, {1, 6}, 12);
  auto out = l.run({a, b});
  std::vector<double> w0;
  for (int z = 0; z < 2; ++z)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) w0.push_back(a.get({{i, 0}}) + 1);
  expect_near(out[0].to_doubles(), w0);
  expect_near(out[1].to_doubles(), a.to_doubles());
  auto bv = b.to_doubles();
  expect_near(out[2].to_doubles(), {bv[4], bv[5]});
  expect_near(out[3].to_doubles(), {bv[1], bv[2], bv[3], bv[4], bv[5]});
}

TEST(LowerCore, CreationOps) {
  auto l = lower_text(R"(graph(%0: f32[2, 3]):
  %1: f32[2, 3] = aten.full.default([2, 3], 1.5, dtype=dtype(f32))
  %2: i64[5] = aten.arange.start_step(2, 12, 2)
  %3: f32[4] = aten.arange.start_step(0.5, 2.5, 0.5, dtype=dtype(f32))
  %4: f32[2, 3] = aten.zeros_like.default(%0)
  %5: f32[2, 3] = aten.ones_like.default(%0)
  %6: f32[2, 3] = aten.add.Tensor(%4, %5)
  %7: f32[2, 3] = aten.add.Tensor(%6, %1)
  %8: i64[3] = aten.arange.default(3)
  %9: f32[] = aten.scalar_tensor.default(2.0)
  return (%7, %2, %3, %8, %9)
)");
  auto out = l.run({tensor(DType::Float32, {2, 3})});
  expect_near(out[0].to_doubles(), std::vector<double>(6, 2.5));
  expect_near(out[1].to_doubles(), {2, 4, 6, 8, 10});
  expect_near(out[2].to_doubles(), {0.5, 1, 1.5, 2});
  expect_near(out[3].to_doubles(), {0, 1, 2});
  expect_near(out[4].to_doubles(), {2});
}

TEST(LowerCore, ConversionsAndCopies) {
  auto l = lower_text(R"(graph(%0: f32[4], %1: f32[2, 4]):
  %2: i32[4] = prims.convert_element_type.default(%0, dtype(i32))
  %3: f16[4] = aten._to_copy.default(%0, dtype=dtype(f16))
  %4: f32[4] = aten.clone.default(%0)
  %5: f32[2, 4] = aten.copy.default(%1, %0)
  %6: f32[2, 4] = aten.fill.Scalar(%1, 3.0)
  return (%2, %3, %4, %5, %6)
)");
  auto a = HostTensor::from_doubles(DType::Float32, {4}, {-1.7, 0.2, 2.9, 1e-4});
  auto out = l.run({a, tensor(DType::Float32, {2, 4})});
  expect_near(out[0].to_doubles(), {-1, 0, 2, 0});
  EXPECT_EQ(out[1].dtype, DType::Float16);
  expect_near(out[1].to_doubles(), a.to_doubles(), 1e-3);
  expect_near(out[2].to_doubles(), a.to_doubles());
  // clone is a copy, never an alias of the input.
  const auto& p = l.result.program;
  EXPECT_EQ(p.buffer(p.outputs[2]).kind, loop::BufferKind::Intermediate);
  auto av = a.to_doubles();
  std::vector<double> w;
  for (int k = 0; k < 8; ++k) w.push_back(av[k % 4]);
  expect_near(out[3].to_doubles(), w);
  expect_near(out[4].to_doubles(), std::vector<double>(8, 3.0));
}

TEST(LowerCore, RandomOps) {
  auto l = lower_text(R"(graph(%0: f32[4, 5]):
  %1: f32[4, 5] = aten.rand_like.default(%0)
  %2: f32[4, 5] = aten.bernoulli.p(%0, 0.3)
  return (%1, %2)
)");
  auto out = l.run({tensor(DType::Float32, {4, 5})}, 1234);
  auto r = out[0].to_doubles();
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(r[k], loop::reference_rand(1234, k));
    EXPECT_GE(r[k], 0);
    EXPECT_LT(r[k], 1);
  }
  auto bern = out[1].to_doubles();
  for (int k = 0; k < 20; ++k) {
    // The second random op draws from offsets [20, 40).
    EXPECT_EQ(bern[k], loop::reference_rand(1234, 20 + k) < 0.3f ? 1.0 : 0.0);
  }
  EXPECT_GE(l.result.program.rng_state, 0);
}

TEST(LowerCore, RealizeRule) {
  // %1 is cheap: inlined into both users. %4 is expensive with two users: realized once.
  auto l = lower_text(R"(graph(%0: f32[8]):
  %1: f32[8] = aten.mul.Tensor(%0, 2.0)
  %2: f32[8] = aten.gelu.default(%1)
  %3: f32[8] = aten.sin.default(%1)
  %4: f32[8] = aten.gelu_backward.default(%2, %3)
  %5: f32[8] = aten.exp.default(%4)
  %6: f32[8] = aten.cos.default(%4)
  %7: f32[8] = aten.add.Tensor(%5, %6)
  return (%7)
)");
  const auto& p = l.result.program;
  EXPECT_EQ(p.steps.size(), 2u) << l.text();
  auto a = tensor(DType::Float32, {8}, 13);
  auto got = l.run({a})[0].to_doubles();
  // Without inlining every value is realized; results agree.
  CompileOptions no_inline;
  no_inline.inline_pointwise = false;
  auto l2 = lower_text(R"(graph(%0: f32[8]):
  %1: f32[8] = aten.mul.Tensor(%0, 2.0)
  %2: f32[8] = aten.gelu.default(%1)
  %3: f32[8] = aten.sin.default(%1)
  %4: f32[8] = aten.gelu_backward.default(%2, %3)
  %5: f32[8] = aten.exp.default(%4)
  %6: f32[8] = aten.cos.default(%4)
  %7: f32[8] = aten.add.Tensor(%5, %6)
  return (%7)
)",
                       no_inline);
  EXPECT_EQ(l2.result.program.steps.size(), 7u);
  expect_near(got, l2.run({a})[0].to_doubles());
}

TEST(LowerCore, MaxInlineReads) {
  CompileOptions opts;
  opts.max_inline_reads = 2;
  auto l = lower_text(R"(graph(%0: f32[4], %1: f32[4], %2: f32[4]):
  %3: f32[4] = aten.add.Tensor(%0, %1)
  %4: f32[4] = aten.add.Tensor(%3, %2)
  %5: f32[4] = aten.neg.default(%4)
  return (%5)
)",
                      opts);
  EXPECT_EQ(l.result.program.steps.size(), 2u) << l.text();
}

// BatchNorm's affine over per-channel statistics, read by two reductions and a pointwise
// output: on the GPU (LoweringPolicy::cheap_recompute_cost) it stays inline, since each reader
// loads its one full-size input instead of the realized value; on the CPU, and with
// recompute_cheap_values off, the usual rule realizes it (several readers, cost above
// kReuseInlineCost). Both agree with each other.
TEST(LowerCore, CheapOneReadValuesStayInlineOnTheGpu) {
  const std::string body = R"(
  %5: f32[2, 4, 3, 3]D = aten.sub.Tensor(%0, %1)
  %6: f32[2, 4, 3, 3]D = aten.mul.Tensor(%5, %2)
  %7: f32[2, 4, 3, 3]D = aten.mul.Tensor(%6, %3)
  %8: f32[2, 4, 3, 3]D = aten.add.Tensor(%7, %3)
  %9: f32[4]D = aten.sum.dim_IntList(%8, [0, 2, 3])
  %10: f32[2, 4, 3, 3]D = aten.mul.Tensor(%8, %4)
  %11: f32[4]D = aten.sum.dim_IntList(%10, [0, 2, 3])
  %12: f32[2, 4, 3, 3]D = aten.relu.default(%8)
  return (%9, %11, %12)
)";
  auto graph_on = [&](const std::string& dev) {
    std::string t =
        "graph(%0: f32[2, 4, 3, 3]D, %1: f32[1, 4, 1, 1]D, %2: f32[1, 4, 1, 1]D, "
        "%3: f32[4, 1, 1]D, %4: f32[2, 4, 3, 3]D):" +
        body;
    for (size_t at; (at = t.find("]D")) != std::string::npos;) t.replace(at, 2, "]" + dev);
    return t;
  };
  auto intermediates = [](const Lowered& l) {
    int n = 0;
    for (const auto& b : l.result.program.buffers)
      if (b.kind == loop::BufferKind::Intermediate && b.sizes.size() == 4) ++n;
    return n;
  };
  Lowered gpu = lower_text(graph_on("@cuda"));
  Lowered cpu = lower_text(graph_on(""));
  CompileOptions off;
  off.recompute_cheap_values = false;
  Lowered gpu_off = lower_text(graph_on("@cuda"), off);
  EXPECT_EQ(intermediates(gpu), 1) << gpu.text();  // the relu output alone
  EXPECT_EQ(intermediates(cpu), 2) << cpu.text();  // and the affine
  EXPECT_EQ(intermediates(gpu_off), 2) << gpu_off.text();
  std::vector<HostTensor> in = {
      tensor(DType::Float32, {2, 4, 3, 3}, 1), tensor(DType::Float32, {1, 4, 1, 1}, 2),
      tensor(DType::Float32, {1, 4, 1, 1}, 3), tensor(DType::Float32, {4, 1, 1}, 4),
      tensor(DType::Float32, {2, 4, 3, 3}, 5)};
  auto want = cpu.run(in);
  auto got = gpu.run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) expect_near(got[k].to_doubles(), want[k].to_doubles());
}

// A value with two full-size reads (SiLU's gradient: the incoming gradient and the saved
// input) stays inline on the GPU for up to three readers: realized it costs two reads and a
// write, inline at most one more read a reader (U (F - 1) <= F + 1); with four readers it is
// realized. Loads of one buffer by several operands count once (x below is read three times).
TEST(LowerCore, TwoReadValuesStayInlineForUpToThreeGpuReaders) {
  auto graph = [](int readers) {
    std::string t = R"(graph(%0: f32[2, 4, 8]@cuda, %1: f32[2, 4, 8]@cuda, %2: f32[4, 1]@cuda):
  %3: f32[2, 4, 8]@cuda = aten.sigmoid.default(%0)
  %4: f32[2, 4, 8]@cuda = aten.mul.Tensor(%0, %3)
  %5: f32[2, 4, 8]@cuda = aten.sub.Tensor(%0, %4)
  %6: f32[2, 4, 8]@cuda = aten.mul.Tensor(%1, %5)
  %7: f32[2, 4, 8]@cuda = aten.mul.Tensor(%6, %2)
)";
    std::string outs;
    for (int r = 0; r < readers; ++r) {
      const std::string v = "%" + std::to_string(8 + r);
      t += "  " + v + ": f32[4]@cuda = aten.sum.dim_IntList(%7, [0, 2]";
      t += r == 0 ? ")\n" : ", false, dtype=dtype(f32))\n";  // distinct nodes, one sum each
      outs += (r ? ", " : "") + v;
    }
    return t + "  return (" + outs + ")\n";
  };
  auto realized_3d = [](const Lowered& l) {
    int n = 0;
    for (const auto& b : l.result.program.buffers)
      if (b.kind == loop::BufferKind::Intermediate && b.sizes.size() == 3) ++n;
    return n;
  };
  Lowered three = lower_text(graph(3));
  Lowered four = lower_text(graph(4));
  EXPECT_EQ(realized_3d(three), 0) << three.text();
  EXPECT_EQ(realized_3d(four), 1) << four.text();
  CompileOptions off;
  off.recompute_cheap_values = false;
  Lowered usual = lower_text(graph(3), off);
  EXPECT_EQ(realized_3d(usual), 1) << usual.text();  // several readers, cost above 8
  std::vector<HostTensor> in = {tensor(DType::Float32, {2, 4, 8}, 1),
                                tensor(DType::Float32, {2, 4, 8}, 2),
                                tensor(DType::Float32, {4, 1}, 3)};
  auto a = three.run(in), b = four.run(in);
  for (size_t k = 0; k < a.size(); ++k) expect_near(a[k].to_doubles(), b[k].to_doubles());
}

TEST(LowerCore, FallbackAndStrict) {
  const char* text = R"(graph(%0: f32[4]):
  %1: f32[4] = aten.exp.default(%0)
  %2: f32[4] = aten.made_up_op.default(%1)
  %3: f32[4] = aten.neg.default(%2)
  return (%3)
)";
  auto l = lower_text(text);
  ASSERT_EQ(l.result.fallback_ops.size(), 1u);
  EXPECT_EQ(l.result.fallback_ops[0], "aten.made_up_op.default: no lowering");
  const auto& p = l.result.program;
  int externs = 0;
  for (const auto& s : p.steps) {
    if (const auto* e = std::get_if<loop::ExternNode>(&s)) {
      ++externs;
      EXPECT_EQ(e->kind, loop::ExternKind::Fallback);
      EXPECT_EQ(e->graph_node, 1);
      ASSERT_EQ(e->inputs.size(), 1u);
      // The extern's input is realized.
      EXPECT_EQ(p.buffer(e->inputs[0]).kind, loop::BufferKind::Intermediate);
    }
  }
  EXPECT_EQ(externs, 1);
  CompileOptions strict;
  strict.strict = true;
  EXPECT_THROW(lower_text(text, strict), CompileError);
  EXPECT_TRUE(has_lowering("aten.add.Tensor"));
  EXPECT_FALSE(has_lowering("aten.made_up_op.default"));
}

// The op table's rule (issue 28): every op coil lowers has a meta function (verify_graph_meta
// checks each node with it; lower_graph refuses a lowered op without one). The exception's
// outputs have no coil dtype, so no graph with it reaches coil.
TEST(LowerCore, EveryLoweredOpHasAMeta) {
  const std::set<std::string> exempt = {
      "aten._scaled_dot_product_flash_attention.default",  // uint64 philox seed and offset
  };
  std::string missing;
  for (OpId id : lowering_registry().ids()) {
    const OpEntry e = op_entry(id);
    ASSERT_NE(e.lowering, nullptr) << id.name();
    if (e.def == nullptr && !exempt.count(id.name())) missing += id.name() + " ";
  }
  EXPECT_EQ(missing, "");
  for (const std::string& op : exempt) EXPECT_EQ(ops::find_op(op), nullptr) << op << " has one now";
}

// Both halves of an op are found by its id, and agree with the lookups by name.
TEST(LowerCore, OpEntryByIdAgreesWithNames) {
  for (const std::string& name : lowering_registry().ops()) {
    const OpId id = OpId::of(name);
    EXPECT_EQ(lowering_registry().find(id), lowering_registry().find(name)) << name;
    EXPECT_EQ(op_entry(id).def, ops::find_op(name)) << name;
  }
  const OpEntry mm = op_entry(opid::aten_mm_default);
  ASSERT_NE(mm.def, nullptr);
  EXPECT_EQ(mm.def->name, "aten.mm.default");
  EXPECT_NE(mm.lowering, nullptr);
  // An op nobody registered: neither half.
  const OpEntry none = op_entry(OpId::of("test_lower_core.unknown.default"));
  EXPECT_EQ(none.def, nullptr);
  EXPECT_EQ(none.lowering, nullptr);
}

TEST(LowerCore, SymbolicSizes) {
  auto l = lower_text(R"(graph(%0: f32[s0, 3], %1: f32[3]):
  %2: f32[s0, 3] = aten.mul.Tensor(%0, %1)
  %3: f32[3*s0] = aten.view.default(%2, [-1])
  return (%3)
)");
  const auto& p = l.result.program;
  ASSERT_EQ(p.size_symbols.size(), 1u);
  EXPECT_EQ(p.size_symbols[0].input, 0);
  EXPECT_EQ(p.size_symbols[0].dim, 0);
  for (int64_t n : {2, 5}) {
    auto a = tensor(DType::Float32, {n, 3}, 14), b = tensor(DType::Float32, {3}, 15);
    auto got = l.run({a, b})[0].to_doubles();
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(a.get({{i, j}}) * b.get({{j}}));
    expect_near(got, want);
  }
}

// Fuzz seed 4523 (dynamic): the backward of a cat along a symbolic dim slices its gradient at
// a symbolic bound (`s0 + 3`); the slice lowering took only integer bounds.
TEST(LowerCore, SliceWithSymbolicBounds) {
  auto l = lower_text(R"(graph(%0: f32[s0, 5]):
  %1: f32[s0 - 1, 5]+5 = aten.slice.Tensor(%0, 0, 1, sym(s0))
  %2: f32[s0 - 1, 5] = aten.neg.default(%1)
  return (%2)
)");
  for (int64_t n : {2, 6}) {
    auto a = tensor(DType::Float32, {n, 5}, 17);
    auto got = l.run({a})[0].to_doubles();
    std::vector<double> want;
    for (int64_t i = 1; i < n; ++i)
      for (int j = 0; j < 5; ++j) want.push_back(-a.get({{i, j}}));
    expect_near(got, want);
  }
}

TEST(LowerCore, OutputLayoutFollowsGraphStrides) {
  auto l = lower_text(R"(graph(%0: f32[3, 4]{1, 3}):
  %1: f32[3, 4]{1, 3} = aten.exp.default(%0)
  return (%1)
)");
  const auto& p = l.result.program;
  const auto& out = p.buffer(p.outputs[0]);
  EXPECT_EQ(p.ctx->str(out.strides[0]), "1");
  EXPECT_EQ(p.ctx->str(out.strides[1]), "3");
  auto base = tensor(DType::Float32, {4, 3}, 16);
  auto a = base.as_strided({3, 4}, {1, 3}, 0);
  auto got = l.run({a})[0].to_doubles();
  std::vector<double> want;
  for (double x : a.to_doubles()) want.push_back(std::exp(x));
  expect_near(got, want);
}

// Fuzz seed 5107: a conversion to bf16 inlined into a float32 consumer kept float32's value
// (x - float(bf16(x)) was 0 everywhere). Eager rounds.
TEST(LowerCore, InlinedNarrowingConversionRounds) {
  auto l = lower_text(R"(graph(%0: f32[64]):
  %1: bf16[64] = prims.convert_element_type.default(%0, dtype(bf16))
  %2: f32[64] = aten._to_copy.default(%1, dtype=dtype(f32))
  %3: f32[64] = aten.sub.Tensor(%0, %2)
  return (%3)
)");
  EXPECT_EQ(l.result.program.steps.size(), 1u) << l.text();  // one kernel: %1 inlined
  std::vector<double> x, want;
  for (int k = 0; k < 64; ++k) {
    const float f = 1.0f + static_cast<float>(k) / 1000.0f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // round to nearest even bf16
    float r;
    std::memcpy(&r, &u, 4);
    x.push_back(f);
    want.push_back(static_cast<double>(f) - static_cast<double>(r));
  }
  auto got = l.run({HostTensor::from_doubles(DType::Float32, {64}, x)})[0].to_doubles();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << "at " << k;
}

TEST(LowerCore, GoldenPointwiseChain) {
  auto l = lower_text(R"(graph(%0: f32[8, 16], %1: f32[16]):
  %2: f32[8, 16] = aten.add.Tensor(%0, %1)
  %3: f32[8, 16] = aten.relu.default(%2)
  %4: f32[16, 8]{1, 16} = aten.permute.default(%3, [1, 0])
  %5: f32[16, 8] = aten.mul.Tensor(%4, 0.5)
  %6: f16[16, 8] = prims.convert_element_type.default(%5, dtype(f16))
  return (%6, %3)
)");
  std::string got = l.text();
  std::string path = std::string(COIL_SOURCE_DIR) + "/tests/golden/lower/pointwise_chain.txt";
  if (std::getenv("COIL_UPDATE_GOLDEN")) {
    std::ofstream(path) << got;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden file " << path << "; run with COIL_UPDATE_GOLDEN=1";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(got, ss.str());
}

}  // namespace
}  // namespace coil::lower
