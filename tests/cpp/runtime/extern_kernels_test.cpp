#include "coil/runtime/extern_kernels.h"

#include <gtest/gtest.h>

#include <cmath>

#include "coil/support/error.h"
#include "test_util.h"

namespace coil::runtime {
namespace {

using namespace testing;

// Reference: out[m,n] = sum_k a[m,k] b[k,n] (in double).
void ref_mm(const RuntimeTensor& a, const RuntimeTensor& b, std::vector<double>& out) {
  int64_t M = a.sizes[0], K = a.sizes[1], N = b.sizes[1];
  out.assign(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(at<float>(a, {m, k})) * at<float>(b, {k, n});
      out[m * N + n] = acc;
    }
}

struct MmCase {
  int64_t M, K, N;
  std::vector<int> pa, pb, pout;
};

class MmLayouts : public ::testing::TestWithParam<MmCase> {};

TEST_P(MmLayouts, MatchesNaive) {
  const MmCase& c = GetParam();
  auto a = make_tensor<float>(DType::Float32, {c.M, c.K}, c.pa);
  auto b = make_tensor<float>(DType::Float32, {c.K, c.N}, c.pb);
  auto out = make_tensor<float>(DType::Float32, {c.M, c.N}, c.pout);
  fill_random<float>(a, 1);
  fill_random<float>(b, 2);
  kernels::matmul(a, b, out);
  std::vector<double> ref;
  ref_mm(a, b, ref);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n)
      EXPECT_NEAR(at<float>(out, {m, n}), ref[m * c.N + n], 1e-4) << m << "," << n;
}

INSTANTIATE_TEST_SUITE_P(
    Strides, MmLayouts,
    ::testing::Values(MmCase{5, 7, 3, {}, {}, {}}, MmCase{5, 7, 3, {1, 0}, {}, {}},
                      MmCase{5, 7, 3, {}, {1, 0}, {}}, MmCase{5, 7, 3, {1, 0}, {1, 0}, {1, 0}},
                      MmCase{1, 9, 4, {1, 0}, {}, {}}, MmCase{6, 1, 4, {}, {1, 0}, {}},
                      MmCase{33, 64, 17, {}, {1, 0}, {1, 0}}, MmCase{4, 0, 3, {}, {}, {}}));

TEST(Matmul, NeitherStrideIsOneCopies) {
  // a is a [4, 3] view with strides {6, 2} (every other column of a [4, 6] buffer).
  auto base = make_tensor<float>(DType::Float32, {4, 6});
  fill_random<float>(base, 3);
  RuntimeTensor a = base;
  a.sizes = {4, 3};
  a.strides = {6, 2};
  auto b = make_tensor<float>(DType::Float32, {3, 2});
  fill_random<float>(b, 4);
  auto out = make_tensor<float>(DType::Float32, {4, 2});
  kernels::matmul(a, b, out);
  std::vector<double> ref;
  ref_mm(a, b, ref);
  for (int64_t m = 0; m < 4; ++m)
    for (int64_t n = 0; n < 2; ++n) EXPECT_NEAR(at<float>(out, {m, n}), ref[m * 2 + n], 1e-5);
}

TEST(Matmul, AddmmBroadcastBiasBetaAlpha) {
  auto a = make_tensor<float>(DType::Float32, {3, 4});
  auto b = make_tensor<float>(DType::Float32, {4, 5}, {1, 0});
  auto bias = make_tensor<float>(DType::Float32, {5});
  auto out = make_tensor<float>(DType::Float32, {3, 5});
  fill_random<float>(a, 5);
  fill_random<float>(b, 6);
  fill_random<float>(bias, 7);
  kernels::matmul(a, b, out, &bias, 0.5, 2.0);
  std::vector<double> ref;
  ref_mm(a, b, ref);
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t n = 0; n < 5; ++n)
      EXPECT_NEAR(at<float>(out, {m, n}), 0.5 * at<float>(bias, {n}) + 2.0 * ref[m * 5 + n], 1e-5);
  // beta = 0 ignores the bias, NaNs included (as PyTorch).
  at<float>(bias, {0}) = NAN;
  kernels::matmul(a, b, out, &bias, 0.0, 1.0);
  EXPECT_NEAR(at<float>(out, {0, 0}), ref[0], 1e-5);
}

TEST(Matmul, BatchedF64) {
  auto a = make_tensor<double>(DType::Float64, {3, 4, 5}, {0, 2, 1});
  auto b = make_tensor<double>(DType::Float64, {3, 5, 2});
  auto out = make_tensor<double>(DType::Float64, {3, 4, 2});
  fill_random<double>(a, 8);
  fill_random<double>(b, 9);
  kernels::matmul(a, b, out);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t m = 0; m < 4; ++m)
      for (int64_t n = 0; n < 2; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < 5; ++k) acc += at<double>(a, {i, m, k}) * at<double>(b, {i, k, n});
        EXPECT_NEAR(at<double>(out, {i, m, n}), acc, 1e-12);
      }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Matmul, BFloat16ThroughF32) {
  auto a = make_tensor<uint16_t>(DType::BFloat16, {4, 8});
  auto b = make_tensor<uint16_t>(DType::BFloat16, {8, 3}, {1, 0});
  auto out = make_tensor<uint16_t>(DType::BFloat16, {4, 3});
  std::mt19937 gen(10);
  std::uniform_real_distribution<float> dist(-1, 1);
  for_each(a.sizes, [&](auto i) { at<uint16_t>(a, i) = to_bf16(dist(gen)); });
  for_each(b.sizes, [&](auto i) { at<uint16_t>(b, i) = to_bf16(dist(gen)); });
  kernels::matmul(a, b, out);
  for (int64_t m = 0; m < 4; ++m)
    for (int64_t n = 0; n < 3; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < 8; ++k)
        acc += double(from_bf16(at<uint16_t>(a, {m, k}))) * from_bf16(at<uint16_t>(b, {k, n}));
      EXPECT_NEAR(from_bf16(at<uint16_t>(out, {m, n})), acc, 0.02 * (1 + std::fabs(acc)));
    }
}

TEST(Matmul, IntegerNaive) {
  auto a = make_tensor<int64_t>(DType::Int64, {2, 3});
  auto b = make_tensor<int64_t>(DType::Int64, {3, 2});
  auto out = make_tensor<int64_t>(DType::Int64, {2, 2});
  for (int64_t i = 0; i < 6; ++i) {
    static_cast<int64_t*>(a.data)[i] = i + 1;  // [[1,2,3],[4,5,6]]
    static_cast<int64_t*>(b.data)[i] = 6 - i;  // [[6,5],[4,3],[2,1]]
  }
  kernels::matmul(a, b, out);
  EXPECT_EQ(at<int64_t>(out, {0, 0}), 20);
  EXPECT_EQ(at<int64_t>(out, {0, 1}), 14);
  EXPECT_EQ(at<int64_t>(out, {1, 0}), 56);
  EXPECT_EQ(at<int64_t>(out, {1, 1}), 41);
}

// Naive direct convolution, 2-d.
void ref_conv2d(const RuntimeTensor& in, const RuntimeTensor& w, const RuntimeTensor* bias,
                const kernels::ConvParams& p, const RuntimeTensor& out) {
  int64_t N = in.sizes[0], C = in.sizes[1], H = in.sizes[2], W = in.sizes[3];
  int64_t O = w.sizes[0], Cg = w.sizes[1], KH = w.sizes[2], KW = w.sizes[3];
  int64_t OH = out.sizes[2], OW = out.sizes[3], Og = O / p.groups;
  (void)C;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? at<float>(*bias, {o}) : 0.0;
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc +=
                    double(at<float>(in, {n, g * Cg + c, ih, iw})) * at<float>(w, {o, c, kh, kw});
              }
          at<float>(out, {n, o, oh, ow}) = static_cast<float>(acc);
        }
}

struct ConvCase {
  int64_t N, C, H, W, O, K, stride, pad, dil, groups;
  bool bias;
  std::vector<int> in_perm;
};

class Conv2d : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2d, Im2colMatchesDirect) {
  const ConvCase& c = GetParam();
  kernels::ConvParams p;
  p.stride = {c.stride, c.stride};
  p.padding = {c.pad, c.pad};
  p.dilation = {c.dil, c.dil};
  p.output_padding = {0, 0};
  p.groups = c.groups;
  int64_t OH = (c.H + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
  int64_t OW = (c.W + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
  auto in = make_tensor<float>(DType::Float32, {c.N, c.C, c.H, c.W}, c.in_perm);
  auto w = make_tensor<float>(DType::Float32, {c.O, c.C / c.groups, c.K, c.K});
  auto bias = make_tensor<float>(DType::Float32, {c.O});
  auto out = make_tensor<float>(DType::Float32, {c.N, c.O, OH, OW});
  auto ref = make_tensor<float>(DType::Float32, {c.N, c.O, OH, OW});
  fill_random<float>(in, 11);
  fill_random<float>(w, 12);
  fill_random<float>(bias, 13);
  kernels::convolution(in, w, c.bias ? &bias : nullptr, p, out);
  ref_conv2d(in, w, c.bias ? &bias : nullptr, p, ref);
  for_each(out.sizes, [&](auto i) { EXPECT_NEAR(at<float>(out, i), at<float>(ref, i), 1e-4); });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2d,
    ::testing::Values(ConvCase{2, 3, 8, 8, 4, 3, 1, 1, 1, 1, true, {}},
                      ConvCase{1, 4, 9, 7, 6, 3, 2, 0, 1, 2, false, {}},
                      ConvCase{2, 3, 10, 10, 5, 3, 1, 2, 2, 1, true, {}},
                      ConvCase{2, 8, 5, 5, 4, 1, 1, 0, 1, 1, true, {}},              // 1x1 direct
                      ConvCase{2, 8, 5, 5, 4, 1, 1, 0, 1, 1, true, {0, 2, 3, 1}},    // NHWC
                      ConvCase{1, 6, 6, 6, 6, 3, 1, 1, 1, 6, true, {0, 2, 3, 1}}));  // depthwise

TEST(Convolution, OneDimensional) {
  auto p = kernels::ConvParams::from_ints(std::vector<int64_t>{2, 1, 1, 0, 0, 1}, 1);
  EXPECT_EQ(p.stride[0], 2);
  EXPECT_EQ(p.padding[0], 1);
  auto in = make_tensor<float>(DType::Float32, {1, 2, 9});
  auto w = make_tensor<float>(DType::Float32, {3, 2, 3});
  auto out = make_tensor<float>(DType::Float32, {1, 3, 5});
  fill_random<float>(in, 14);
  fill_random<float>(w, 15);
  kernels::convolution(in, w, nullptr, p, out);
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t l = 0; l < 5; ++l) {
      double acc = 0;
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t k = 0; k < 3; ++k) {
          int64_t i = l * 2 - 1 + k;
          if (i >= 0 && i < 9) acc += double(at<float>(in, {0, c, i})) * at<float>(w, {o, c, k});
        }
      EXPECT_NEAR(at<float>(out, {0, o, l}), acc, 1e-5);
    }
}

TEST(Convolution, TransposedIsNotALibraryCase) {
  auto p = kernels::ConvParams::from_ints(std::vector<int64_t>{1, 1, 0, 0, 1, 1, 1, 0, 0, 1}, 2);
  EXPECT_TRUE(p.transposed);
  EXPECT_FALSE(kernels::convolution_supported(DType::Float32, 4, p));
  EXPECT_THROW(kernels::ConvParams::from_ints(std::vector<int64_t>{1, 2, 3}, 2), CompileError);
}

TEST(IndexPut, AccumulateWithDuplicatesAndNegativeIndices) {
  auto self = make_tensor<float>(DType::Float32, {5, 3});
  fill_random<float>(self, 16);
  auto idx = make_tensor<int64_t>(DType::Int64, {4});
  int64_t iv[] = {0, 2, -1, 2};
  std::memcpy(idx.data, iv, sizeof iv);
  auto values = make_tensor<float>(DType::Float32, {4, 3});
  fill_random<float>(values, 17);
  auto out = make_tensor<float>(DType::Float32, {5, 3});
  kernels::index_put(self, {idx}, {0}, values, true, out);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      double want = at<float>(self, {r, c});
      for (int j = 0; j < 4; ++j)
        if ((iv[j] + 5) % 5 == r) want += at<float>(values, {j, c});
      EXPECT_NEAR(at<float>(out, {r, c}), want, 1e-6);
    }
  // Out of bounds throws.
  iv[1] = 5;
  std::memcpy(idx.data, iv, sizeof iv);
  EXPECT_THROW(kernels::index_put(self, {idx}, {0}, values, true, out), std::out_of_range);
}

// Whole rows (embedding's backward): one index into dim 0, rows of several dims, double.
TEST(IndexPut, RowsOfSeveralDimsPut) {
  auto self = make_tensor<double>(DType::Float64, {6, 2, 4});
  fill_random<double>(self, 18);
  auto idx = make_tensor<int64_t>(DType::Int64, {3});
  int64_t iv[] = {4, -6, 1};
  std::memcpy(idx.data, iv, sizeof iv);
  auto values = make_tensor<double>(DType::Float64, {3, 2, 4});
  fill_random<double>(values, 19);
  auto out = make_tensor<double>(DType::Float64, {6, 2, 4});
  kernels::index_put(self, {idx}, {0}, values, false, out);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t c = 0; c < 4; ++c) {
        double want = at<double>(self, {r, a, c});
        for (int j = 0; j < 3; ++j)
          if ((iv[j] + 6) % 6 == r) want = at<double>(values, {j, a, c});
        EXPECT_EQ(at<double>(out, {r, a, c}), want);
      }
}

// Embedding's backward: a [batch, seq] index of token ids accumulates rows, repeats included
// (the row path; the values' rows follow the index in row-major order).
TEST(IndexPut, TwoDimIndexAccumulatesRows) {
  auto self = make_tensor<float>(DType::Float32, {5, 4});
  fill_random<float>(self, 20);
  auto idx = make_tensor<int64_t>(DType::Int64, {2, 3});
  int64_t iv[] = {3, 0, 3, -1, 2, 0};
  std::memcpy(idx.data, iv, sizeof iv);
  auto values = make_tensor<float>(DType::Float32, {2, 3, 4});
  fill_random<float>(values, 21);
  auto out = make_tensor<float>(DType::Float32, {5, 4});
  kernels::index_put(self, {idx}, {0}, values, true, out);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 4; ++c) {
      double want = at<float>(self, {r, c});
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 3; ++b)
          if ((iv[a * 3 + b] + 5) % 5 == r) want += at<float>(values, {a, b, c});
      EXPECT_NEAR(at<float>(out, {r, c}), want, 1e-5) << r << "," << c;
    }
}

// Bilinear upsampling's backward: indices on H and W (broadcast [3, 1] x [4]) under N and C,
// contiguous values, repeats accumulated (the offsets path), against a brute-force sum.
TEST(IndexPut, IndexedInnerDimsAccumulateByOffsets) {
  auto self = make_tensor<float>(DType::Float32, {2, 3, 5, 6});
  fill_random<float>(self, 22);
  auto hi = make_tensor<int64_t>(DType::Int64, {3, 1});
  auto wi = make_tensor<int64_t>(DType::Int64, {4});
  int64_t hv[] = {4, 0, 4}, wv[] = {5, 0, -1, 2};
  std::memcpy(hi.data, hv, sizeof hv);
  std::memcpy(wi.data, wv, sizeof wv);
  auto values = make_tensor<float>(DType::Float32, {2, 3, 3, 4});
  fill_random<float>(values, 23);
  auto out = make_tensor<float>(DType::Float32, {2, 3, 5, 6});
  kernels::index_put(self, {hi, wi}, {2, 3}, values, true, out);
  for_each(out.sizes, [&](auto p) {
    double want = at<float>(self, p);
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 4; ++b)
        if (hv[a] == p[2] && (wv[b] + 6) % 6 == p[3]) want += at<float>(values, {p[0], p[1], a, b});
    EXPECT_NEAR(at<float>(out, p), want, 1e-5);
  });
}

TEST(IndexPut, TwoIndexedDimsBroadcastValues) {
  // out[:, i, j] = v (indices on dims 1 and 2, adjacent: result shape [2, 3]; v is [1] -> bcast)
  auto self = make_tensor<float>(DType::Float32, {2, 4, 4});
  auto i = make_tensor<int64_t>(DType::Int64, {3});
  auto j = make_tensor<int32_t>(DType::Int32, {3});
  int64_t iv[] = {0, 1, 3};
  int32_t jv[] = {2, 2, 0};
  std::memcpy(i.data, iv, sizeof iv);
  std::memcpy(j.data, jv, sizeof jv);
  auto v = make_tensor<float>(DType::Float32, {1});
  at<float>(v, {0}) = 7;
  auto out = make_tensor<float>(DType::Float32, {2, 4, 4});
  kernels::index_put(self, {i, j}, {1, 2}, v, false, out);
  for_each(out.sizes, [&](auto p) {
    bool hit = false;
    for (int k = 0; k < 3; ++k) hit |= p[1] == iv[k] && p[2] == jv[k];
    EXPECT_EQ(at<float>(out, p), hit ? 7.f : 0.f);
  });
}

TEST(IndexPut, NonAdjacentDimsPutBroadcastFirst) {
  // self [3, 2, 4], indices on dims 0 and 2 -> result shape [B=2, 2]; values [2, 2].
  auto self = make_tensor<float>(DType::Float32, {3, 2, 4});
  auto i = make_tensor<int64_t>(DType::Int64, {2});
  auto k = make_tensor<int64_t>(DType::Int64, {2});
  int64_t iv[] = {2, 0}, kv[] = {1, 3};
  std::memcpy(i.data, iv, sizeof iv);
  std::memcpy(k.data, kv, sizeof kv);
  auto v = make_tensor<float>(DType::Float32, {2, 2});
  float vv[] = {1, 2, 3, 4};
  std::memcpy(v.data, vv, sizeof vv);
  auto out = make_tensor<float>(DType::Float32, {3, 2, 4});
  kernels::index_put(self, {i, k}, {0, 2}, v, false, out);
  EXPECT_EQ(at<float>(out, {2, 0, 1}), 1);
  EXPECT_EQ(at<float>(out, {2, 1, 1}), 2);
  EXPECT_EQ(at<float>(out, {0, 0, 3}), 3);
  EXPECT_EQ(at<float>(out, {0, 1, 3}), 4);
  EXPECT_EQ(at<float>(out, {1, 0, 0}), 0);
}

TEST(ScatterAdd, AlongDimWithStridedSelf) {
  auto self = make_tensor<float>(DType::Float32, {3, 4}, {1, 0});
  fill_random<float>(self, 18);
  auto index = make_tensor<int64_t>(DType::Int64, {2, 4});
  int64_t ix[] = {0, 1, 2, 0, 2, 2, 1, 0};
  std::memcpy(index.data, ix, sizeof ix);
  auto src = make_tensor<float>(DType::Float32, {2, 5});
  fill_random<float>(src, 19);
  auto out = make_tensor<float>(DType::Float32, {3, 4});
  kernels::scatter_add(self, 0, index, src, out);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c) {
      double want = at<float>(self, {r, c});
      for (int64_t p = 0; p < 2; ++p)
        if (ix[p * 4 + c] == r) want += at<float>(src, {p, c});
      EXPECT_NEAR(at<float>(out, {r, c}), want, 1e-6);
    }
  ix[0] = 3;
  std::memcpy(index.data, ix, sizeof ix);
  EXPECT_THROW(kernels::scatter_add(self, 0, index, src, out), std::out_of_range);
}

TEST(Copy, ConvertsAndHandlesStrides) {
  auto src = make_tensor<float>(DType::Float32, {3, 4}, {1, 0});
  fill_random<float>(src, 20, -100, 100);
  auto dst = make_tensor<double>(DType::Float64, {3, 4});
  kernels::copy(src, dst);
  for_each(src.sizes, [&](auto i) { EXPECT_EQ(at<double>(dst, i), double(at<float>(src, i))); });
}

// convolution_backward against the forward kernel: L(x, w) = sum(g * conv(x, w)) is linear in
// x and in w, so L(x + e_i, w) - L(x, w) is exactly grad_input[i] (and likewise for w).
class ConvBackward : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvBackward, GradientsMatchForwardDifferences) {
  const ConvCase& c = GetParam();
  kernels::ConvParams p;
  p.stride = {c.stride, c.stride};
  p.padding = {c.pad, c.pad};
  p.dilation = {c.dil, c.dil};
  p.output_padding = {0, 0};
  p.groups = c.groups;
  const int64_t OH = (c.H + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
  const int64_t OW = (c.W + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
  auto x = make_tensor<double>(DType::Float64, {c.N, c.C, c.H, c.W}, c.in_perm);
  auto w = make_tensor<double>(DType::Float64, {c.O, c.C / c.groups, c.K, c.K});
  auto g = make_tensor<double>(DType::Float64, {c.N, c.O, OH, OW});
  fill_random<double>(x, 21);
  fill_random<double>(w, 22);
  fill_random<double>(g, 23);
  auto gx = make_tensor<double>(DType::Float64, x.sizes);
  auto gw = make_tensor<double>(DType::Float64, w.sizes);
  auto gb = make_tensor<double>(DType::Float64, {c.O});
  kernels::convolution_backward(g, x, w, p, &gx, &gw, &gb);

  auto out = make_tensor<double>(DType::Float64, g.sizes);
  auto loss = [&] {
    kernels::convolution(x, w, nullptr, p, out);
    double s = 0;
    for_each(out.sizes, [&](auto i) { s += at<double>(out, i) * at<double>(g, i); });
    return s;
  };
  const double base = loss();
  for_each(x.sizes, [&](auto i) {
    at<double>(x, i) += 1.0;
    EXPECT_NEAR(loss() - base, at<double>(gx, i), 1e-9);
    at<double>(x, i) -= 1.0;
  });
  for_each(w.sizes, [&](auto i) {
    at<double>(w, i) += 1.0;
    EXPECT_NEAR(loss() - base, at<double>(gw, i), 1e-9);
    at<double>(w, i) -= 1.0;
  });
  for (int64_t o = 0; o < c.O; ++o) {
    double s = 0;
    for_each(g.sizes, [&](auto i) {
      if (i[1] == o) s += at<double>(g, i);
    });
    EXPECT_NEAR(at<double>(gb, {o}), s, 1e-9);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvBackward,
                         ::testing::Values(ConvCase{2, 3, 5, 5, 4, 3, 1, 1, 1, 1, false, {}},
                                           ConvCase{1, 4, 7, 6, 4, 3, 2, 1, 1, 2, false, {}},
                                           ConvCase{
                                               1, 2, 6, 6, 3, 3, 1, 2, 2, 1, false, {0, 2, 3, 1}}));

}  // namespace
}  // namespace coil::runtime
