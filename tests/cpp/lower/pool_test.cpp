// Pooling lowerings against brute-force references (transcriptions of PyTorch's CPU kernels),
// through the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "coil/lower/lowering.h"
#include "family_test_util.h"

namespace coil::lower::testing {
namespace {

// PyTorch's pooling_output_shape.
int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct Pool {
  int64_t kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
  bool ceil = false;
};

// max_pool2d_with_indices on P planes of H x W: {values, flat indices}.
std::pair<std::vector<double>, std::vector<double>> max_pool_ref(const std::vector<double>& x,
                                                                 int64_t P, int64_t H, int64_t W,
                                                                 const Pool& p) {
  int64_t OH = pool_out(H, p.kh, p.ph, p.sh, p.dh, p.ceil);
  int64_t OW = pool_out(W, p.kw, p.pw, p.sw, p.dw, p.ceil);
  std::vector<double> vals, idx;
  for (int64_t q = 0; q < P; ++q)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
        int64_t he = std::min(hs + (p.kh - 1) * p.dh + 1, H);
        int64_t we = std::min(ws + (p.kw - 1) * p.dw + 1, W);
        while (hs < 0) hs += p.dh;
        while (ws < 0) ws += p.dw;
        int64_t best_i = hs * W + ws;
        double best = -std::numeric_limits<double>::infinity();
        for (int64_t ih = hs; ih < he; ih += p.dh)
          for (int64_t iw = ws; iw < we; iw += p.dw) {
            double v = x[q * H * W + ih * W + iw];
            if (v > best || std::isnan(v)) {
              best = v;
              best_i = ih * W + iw;
            }
          }
        vals.push_back(best);
        idx.push_back(static_cast<double>(best_i));
      }
  return {vals, idx};
}

std::string list2(int64_t a, int64_t b) {
  std::ostringstream s;
  s << "[" << a << ", " << b << "]";
  return s.str();
}

TEST(PoolLowering, Registered) {
  LoweringRegistry r;
  register_pool_lowerings(r);
  std::vector<std::string> ops = r.ops();
  for (const char* op :
       {"aten.max_pool2d_with_indices.default", "aten.max_pool2d_with_indices_backward.default",
        "aten.avg_pool2d.default", "aten.avg_pool2d_backward.default",
        "aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d_backward.default"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

// Forward and backward max pooling for one configuration on a [2, 3, H, W] input.
void check_max_pool(const Pool& p, int64_t H, int64_t W, uint64_t seed, bool with_nan) {
  const int64_t P = 6;
  std::vector<double> x = random_values(P * H * W, seed, -4, 4, true);  // ties
  if (with_nan) x[H * W + W + 1] = std::nan("");
  int64_t OH = pool_out(H, p.kh, p.ph, p.sh, p.dh, p.ceil);
  int64_t OW = pool_out(W, p.kw, p.pw, p.sw, p.dw, p.ceil);
  auto [vals, idx] = max_pool_ref(x, P, H, W, p);
  std::vector<double> g = as_f32(random_values(P * OH * OW, seed + 1));
  std::ostringstream t;
  std::string in = "[2, 3, " + std::to_string(H) + ", " + std::to_string(W) + "]";
  std::string out = "[2, 3, " + std::to_string(OH) + ", " + std::to_string(OW) + "]";
  t << "graph(%0: f32" << in << ", %1: f32" << out << ", %2: i64" << out << "):\n"
    << "  %3: f32" << out << ", %4: i64" << out << " = aten.max_pool2d_with_indices.default(%0, "
    << list2(p.kh, p.kw) << ", " << list2(p.sh, p.sw) << ", " << list2(p.ph, p.pw) << ", "
    << list2(p.dh, p.dw) << ", " << (p.ceil ? "true" : "false") << ")\n"
    << "  %5: f32" << in << " = aten.max_pool2d_with_indices_backward.default(%1, %0, "
    << list2(p.kh, p.kw) << ", " << list2(p.sh, p.sw) << ", " << list2(p.ph, p.pw) << ", "
    << list2(p.dh, p.dw) << ", " << (p.ceil ? "true" : "false") << ", %2)\n"
    << "  return (%3, %4, %5)\n";
  SCOPED_TRACE(t.str());
  auto outs = run_text(t.str(), {HostTensor::from_doubles(DType::Float32, {2, 3, H, W}, x),
                                 HostTensor::from_doubles(DType::Float32, {2, 3, OH, OW}, g),
                                 HostTensor::from_doubles(DType::Int64, {2, 3, OH, OW}, idx)});
  expect_equal(outs[0], {2, 3, OH, OW}, vals);
  expect_equal(outs[1], {2, 3, OH, OW}, idx);
  // Backward: scatter-add of the gradient to the saved positions (PyTorch's loop order).
  std::vector<double> gi(P * H * W, 0.0);
  for (int64_t q = 0; q < P; ++q)
    for (int64_t o = 0; o < OH * OW; ++o) {
      gi[q * H * W + static_cast<int64_t>(idx[q * OH * OW + o])] += g[q * OH * OW + o];
    }
  expect_close(outs[2], {2, 3, H, W}, gi);
}

TEST(PoolLowering, MaxPoolPaddingStride) { check_max_pool({3, 3, 2, 2, 1, 1}, 7, 8, 51, false); }

TEST(PoolLowering, MaxPoolDilationCeilModeAsymmetric) {
  check_max_pool({2, 3, 1, 2, 1, 1, 2, 1, true}, 7, 8, 52, false);
}

TEST(PoolLowering, MaxPoolNanPropagatesWithItsIndex) {
  check_max_pool({3, 3, 1, 1, 1, 1}, 5, 6, 53, true);
}

TEST(PoolLowering, MaxPoolThreeDimInputDefaultStride) {
  std::vector<double> x = random_values(3 * 7 * 8, 54, -4, 4, true);
  auto outs = run_text(R"(graph(%0: f32[3, 7, 8]):
  %1: f32[3, 3, 4], %2: i64[3, 3, 4] = aten.max_pool2d_with_indices.default(%0, [2, 2])
  return (%1, %2)
)",
                       {HostTensor::from_doubles(DType::Float32, {3, 7, 8}, x)});
  auto [vals, idx] = max_pool_ref(x, 3, 7, 8, {2, 2, 2, 2, 0, 0});
  expect_equal(outs[0], {3, 3, 4}, vals);
  expect_equal(outs[1], {3, 3, 4}, idx);
}

struct Avg {
  Pool p;
  bool count_include_pad = true;
  int64_t divisor = 0;  // 0: none
};

// avg_pool2d forward and the per-window divisors (PyTorch's CPU kernel).
std::vector<double> avg_pool_ref(const std::vector<double>& x, int64_t P, int64_t H, int64_t W,
                                 const Avg& a, const std::vector<double>* grad,
                                 std::vector<double>* grad_in) {
  const Pool& p = a.p;
  int64_t OH = pool_out(H, p.kh, p.ph, p.sh, 1, p.ceil),
          OW = pool_out(W, p.kw, p.pw, p.sw, 1, p.ceil);
  std::vector<double> out;
  if (grad_in) grad_in->assign(P * H * W, 0.0);
  for (int64_t q = 0; q < P; ++q)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
        int64_t he = std::min(hs + p.kh, H + p.ph), we = std::min(ws + p.kw, W + p.pw);
        int64_t pool = (he - hs) * (we - ws);
        hs = std::max<int64_t>(hs, 0);
        ws = std::max<int64_t>(ws, 0);
        he = std::min(he, H);
        we = std::min(we, W);
        if (hs >= he || ws >= we) {
          out.push_back(0);
          continue;
        }
        double div = a.divisor ? a.divisor : (a.count_include_pad ? pool : (he - hs) * (we - ws));
        double s = 0;
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) {
            s += x[q * H * W + ih * W + iw];
            if (grad_in)
              (*grad_in)[q * H * W + ih * W + iw] += (*grad)[(q * OH + oh) * OW + ow] / div;
          }
        out.push_back(s / div);
      }
  return out;
}

void check_avg_pool(const Avg& a, int64_t H, int64_t W, uint64_t seed) {
  const Pool& p = a.p;
  const int64_t P = 6;
  std::vector<double> x = as_f32(random_values(P * H * W, seed));
  int64_t OH = pool_out(H, p.kh, p.ph, p.sh, 1, p.ceil),
          OW = pool_out(W, p.kw, p.pw, p.sw, 1, p.ceil);
  std::vector<double> g = as_f32(random_values(P * OH * OW, seed + 1));
  std::string in = "[2, 3, " + std::to_string(H) + ", " + std::to_string(W) + "]";
  std::string out = "[2, 3, " + std::to_string(OH) + ", " + std::to_string(OW) + "]";
  std::string args = list2(p.kh, p.kw) + ", " + list2(p.sh, p.sw) + ", " + list2(p.ph, p.pw) +
                     ", " + (p.ceil ? "true" : "false") + ", " +
                     (a.count_include_pad ? "true" : "false") + ", " +
                     (a.divisor ? std::to_string(a.divisor) : std::string("None"));
  std::string text = "graph(%0: f32" + in + ", %1: f32" + out + "):\n  %2: f32" + out +
                     " = aten.avg_pool2d.default(%0, " + args + ")\n  %3: f32" + in +
                     " = aten.avg_pool2d_backward.default(%1, %0, " + args +
                     ")\n  return (%2, %3)\n";
  SCOPED_TRACE(text);
  auto outs = run_text(text, {HostTensor::from_doubles(DType::Float32, {2, 3, H, W}, x),
                              HostTensor::from_doubles(DType::Float32, {2, 3, OH, OW}, g)});
  std::vector<double> gi;
  std::vector<double> want = avg_pool_ref(x, P, H, W, a, &g, &gi);
  expect_close(outs[0], {2, 3, OH, OW}, want);
  expect_close(outs[1], {2, 3, H, W}, gi);
}

TEST(PoolLowering, AvgPoolCountIncludePad) { check_avg_pool({{3, 3, 2, 2, 1, 1}, true}, 7, 8, 61); }

TEST(PoolLowering, AvgPoolExcludePad) { check_avg_pool({{3, 2, 2, 1, 1, 1}, false}, 7, 8, 62); }

TEST(PoolLowering, AvgPoolCeilModePartialWindows) {
  check_avg_pool({{3, 3, 2, 2, 0, 0, 1, 1, true}, true}, 7, 8, 63);
  check_avg_pool({{3, 3, 2, 2, 1, 1, 1, 1, true}, false}, 6, 6, 64);
}

TEST(PoolLowering, AvgPoolDivisorOverride) {
  check_avg_pool({{2, 2, 2, 2, 1, 0}, true, 5}, 5, 6, 65);
}

// _adaptive_avg_pool2d forward and backward.
void check_adaptive(int64_t H, int64_t W, int64_t OH, int64_t OW, uint64_t seed,
                    bool expect_reduction) {
  const int64_t P = 6;
  std::vector<double> x = as_f32(random_values(P * H * W, seed));
  std::vector<double> g = as_f32(random_values(P * OH * OW, seed + 1));
  std::vector<double> want, gi(P * H * W, 0.0);
  for (int64_t q = 0; q < P; ++q)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * H / OH, he = ((oh + 1) * H + OH - 1) / OH;
        int64_t ws = ow * W / OW, we = ((ow + 1) * W + OW - 1) / OW;
        double s = 0, n = static_cast<double>((he - hs) * (we - ws));
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) {
            s += x[q * H * W + ih * W + iw];
            gi[q * H * W + ih * W + iw] += g[(q * OH + oh) * OW + ow] / n;
          }
        want.push_back(s / n);
      }
  std::string in = "[2, 3, " + std::to_string(H) + ", " + std::to_string(W) + "]";
  std::string out = "[2, 3, " + std::to_string(OH) + ", " + std::to_string(OW) + "]";
  std::string text = "graph(%0: f32" + in + ", %1: f32" + out + "):\n  %2: f32" + out +
                     " = aten._adaptive_avg_pool2d.default(%0, " + list2(OH, OW) + ")\n  %3: f32" +
                     in +
                     " = aten._adaptive_avg_pool2d_backward.default(%1, %0)\n  return (%2, %3)\n";
  SCOPED_TRACE(text);
  Lowered l = lower_text(text);
  bool has_reduction = false;
  for (const auto& s : l.result.program.steps) {
    if (auto* c = std::get_if<loop::ComputeNode>(&s)) has_reduction |= c->is_reduction();
  }
  EXPECT_EQ(has_reduction, expect_reduction);
  auto outs = loop::interpret(l.result.program,
                              {HostTensor::from_doubles(DType::Float32, {2, 3, H, W}, x),
                               HostTensor::from_doubles(DType::Float32, {2, 3, OH, OW}, g)});
  expect_close(outs[0], {2, 3, OH, OW}, want);
  expect_close(outs[1], {2, 3, H, W}, gi);
}

TEST(PoolLowering, AdaptiveAvgPoolOverlappingWindows) { check_adaptive(7, 8, 3, 5, 71, false); }

TEST(PoolLowering, AdaptiveAvgPoolGlobalIsAReduction) { check_adaptive(7, 8, 1, 1, 72, true); }

TEST(PoolLowering, AdaptiveAvgPoolLargeWindowsReduce) { check_adaptive(13, 13, 2, 2, 73, true); }

TEST(PoolLowering, AdaptiveAvgPoolUpsampling) { check_adaptive(3, 4, 5, 7, 74, false); }

TEST(PoolLowering, LargeMaxPoolWindowFallsBack) {
  const char* text = R"(graph(%0: f32[1, 1, 8, 8]):
  %1: f32[1, 1, 1, 1], %2: i64[1, 1, 1, 1] = aten.max_pool2d_with_indices.default(%0, [8, 8])
  return (%1, %2)
)";
  EXPECT_THROW(lower_text(text), CompileError);
  Lowered l = lower_text(text, /*strict=*/false);
  EXPECT_EQ(l.result.fallback_ops.size(), 1u);
}

}  // namespace
}  // namespace coil::lower::testing
