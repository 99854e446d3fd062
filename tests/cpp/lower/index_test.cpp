// Indexing lowerings against brute-force references, through the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

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

TEST(IndexLowering, Registered) {
  LoweringRegistry r;
  register_index_lowerings(r);
  std::vector<std::string> ops = r.ops();
  for (const char* op :
       {"aten.cat.default", "aten.constant_pad_nd.default", "aten.embedding.default",
        "aten.index.Tensor", "aten.index_select.default", "aten.gather.default",
        "aten.index_put.default", "aten.scatter_add.default", "aten.scatter.src",
        "aten.scatter.value", "aten.select_scatter.default", "aten.slice_scatter.default",
        "aten.embedding_dense_backward.default"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

TEST(IndexLowering, CatThreePiecesSkipsEmptyAndInlinesLazyPieces) {
  std::vector<double> a = as_f32(random_values(6, 11)), b = as_f32(random_values(8, 12)),
                      c = as_f32(random_values(2, 13)), d = random_values(6, 14, -5, 5, true);
  auto outs =
      run_text(R"(graph(%0: f32[2, 3], %1: f32[2, 0], %2: f32[2, 4], %3: f32[2, 1], %4: i32[2, 3]):
  %5: f32[2, 8] = aten.cat.default([%0, %1, %2, %3], 1)
  %6: f32[2, 3] = aten.add.Tensor(%0, 1.0)
  %7: f32[6, 3] = aten.cat.default([%0, %6, %0], -2)
  %8: f32[2, 6] = aten.cat.default([%4, %6], 1)
  %9: f32[2, 3] = aten.cat.default([%1, %0], 1)
  return (%5, %7, %8, %9)
)",
               {HostTensor::from_doubles(DType::Float32, {2, 3}, a),
                HostTensor::from_doubles(DType::Float32, {2, 0}, {}),
                HostTensor::from_doubles(DType::Float32, {2, 4}, b),
                HostTensor::from_doubles(DType::Float32, {2, 1}, c),
                HostTensor::from_doubles(DType::Int32, {2, 3}, d)});
  std::vector<double> w5, w7, w8;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) w5.push_back(a[i * 3 + j]);
    for (int j = 0; j < 4; ++j) w5.push_back(b[i * 4 + j]);
    w5.push_back(c[i]);
  }
  for (int p = 0; p < 3; ++p) {
    for (int k = 0; k < 6; ++k) w7.push_back(a[k] + (p == 1 ? 1.0 : 0.0));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) w8.push_back(d[i * 3 + j]);
    for (int j = 0; j < 3; ++j) w8.push_back(static_cast<float>(a[i * 3 + j] + 1.0));
  }
  expect_close(outs[0], {2, 8}, w5);
  expect_close(outs[1], {6, 3}, w7);
  expect_close(outs[2], {2, 6}, w8);
  expect_close(outs[3], {2, 3}, a);
}

// More than max_pointwise_cat (8) pieces: one Cat extern copies each piece into its slice
// (no where-chain); a lazy piece (the add) is realized first, an int piece is cast. Along the
// inner dim, so every slice of the output is strided.
TEST(IndexLowering, CatOfManyPiecesIsOneCopyExtern) {
  std::string hdr, args;
  std::vector<HostTensor> in;
  std::vector<std::vector<double>> vals;
  for (int k = 0; k < 10; ++k) {
    int w = 1 + k % 3;
    hdr += "%" + std::to_string(k) + ": f32[2, " + std::to_string(w) + "], ";
    args += (k == 3 ? std::string("%11") : "%" + std::to_string(k)) + ", ";
    vals.push_back(as_f32(random_values(2 * w, 40 + k)));
    in.push_back(HostTensor::from_doubles(DType::Float32, {2, w}, vals.back()));
  }
  std::vector<double> ints = random_values(2, 60, -5, 5, true);
  in.push_back(HostTensor::from_doubles(DType::Int32, {2, 1}, ints));
  std::string text = "graph(" + hdr +
                     "%10: i32[2, 1]):\n  %11: f32[2, 1] = aten.add.Tensor(%3, 1.0)\n" +
                     "  %12: f32[2, 20] = aten.cat.default([" + args + "%10], 1)\n  return (%12)\n";
  Lowered l = lower_text(text);
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::Cat);
  EXPECT_EQ(ex[0]->inputs.size(), 11u);
  EXPECT_EQ(ex[0]->ints, (std::vector<int64_t>{1}));
  auto outs = run_text(text, in);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 10; ++k) {
      int w = 1 + k % 3;
      for (int j = 0; j < w; ++j) want.push_back(vals[k][i * w + j] + (k == 3 ? 1.0 : 0.0));
    }
    want.push_back(ints[i]);
  }
  expect_close(outs[0], {2, 20}, want);
}

TEST(IndexLowering, ConstantPadPositiveAndNegative) {
  std::vector<double> x = as_f32(random_values(12, 15));
  auto outs = run_text(R"(graph(%0: f32[3, 4]):
  %1: f32[3, 7] = aten.constant_pad_nd.default(%0, [1, 2], 0.5)
  %2: f32[4, 4] = aten.constant_pad_nd.default(%0, [1, -1, -1, 2])
  %3: f32[1, 2] = aten.constant_pad_nd.default(%0, [-1, -1, -1, -1], 9.0)
  return (%1, %2, %3)
)",
                       {HostTensor::from_doubles(DType::Float32, {3, 4}, x)});
  // Brute force: out[i][j] = x[i - top][j - left] when inside, else the value.
  auto pad = [&](int64_t top, int64_t oh, int64_t left, int64_t ow, double value) {
    std::vector<double> out;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        int64_t si = i - top, sj = j - left;
        out.push_back(si >= 0 && si < 3 && sj >= 0 && sj < 4 ? x[si * 4 + sj] : value);
      }
    }
    return out;
  };
  expect_close(outs[0], {3, 7}, pad(0, 3, 1, 7, 0.5));
  expect_close(outs[1], {4, 4}, pad(-1, 4, 1, 4, 0.0));
  expect_close(outs[2], {1, 2}, pad(-1, 1, -1, 2, 9.0));
}

TEST(IndexLowering, EmbeddingIndexSelectGather) {
  std::vector<double> w = as_f32(random_values(40, 16));
  std::vector<double> ids{3, 0, 9, 9, 1, 4};
  std::vector<double> x = as_f32(random_values(5 * 6 * 7, 17));
  std::vector<double> sel{5, -1, 0, 2};  // index_select wraps nothing in eager; -1 stays valid here
  std::vector<double> gi = random_values(5 * 6 * 3, 18, 0, 7, true);
  auto outs = run_text(
      R"(graph(%0: f32[10, 4], %1: i64[2, 3], %2: f32[5, 6, 7], %3: i64[4], %4: i64[5, 6, 3]):
  %5: f32[2, 3, 4] = aten.embedding.default(%0, %1)
  %6: f32[5, 4, 7] = aten.index_select.default(%2, 1, %3)
  %7: f32[5, 6, 3] = aten.gather.default(%2, -1, %4)
  return (%5, %6, %7)
)",
      {HostTensor::from_doubles(DType::Float32, {10, 4}, w),
       HostTensor::from_doubles(DType::Int64, {2, 3}, ids),
       HostTensor::from_doubles(DType::Float32, {5, 6, 7}, x),
       HostTensor::from_doubles(DType::Int64, {4}, sel),
       HostTensor::from_doubles(DType::Int64, {5, 6, 3}, gi)});
  std::vector<double> we, ws, wg;
  for (double id : ids) {
    for (int j = 0; j < 4; ++j) we.push_back(w[static_cast<int64_t>(id) * 4 + j]);
  }
  for (int i = 0; i < 5; ++i) {
    for (double s : sel) {
      int64_t r = s < 0 ? static_cast<int64_t>(s) + 6 : static_cast<int64_t>(s);
      for (int k = 0; k < 7; ++k) ws.push_back(x[(i * 6 + r) * 7 + k]);
    }
  }
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) {
      for (int k = 0; k < 3; ++k) {
        wg.push_back(x[(i * 6 + j) * 7 + static_cast<int64_t>(gi[(i * 6 + j) * 3 + k])]);
      }
    }
  }
  expect_equal(outs[0], {2, 3, 4}, we);
  expect_equal(outs[1], {5, 4, 7}, ws);
  expect_equal(outs[2], {5, 6, 3}, wg);
}

TEST(IndexLowering, AdvancedIndexWithNoneBroadcastAndNegativeIndices) {
  std::vector<double> x = as_f32(random_values(5 * 6 * 7, 19));
  auto at = [&](int64_t i, int64_t j, int64_t k) {
    if (i < 0) i += 5;
    if (j < 0) j += 6;
    if (k < 0) k += 7;
    return x[(i * 6 + j) * 7 + k];
  };
  std::vector<double> i1{-1, 2, 0, -6};  // dim 1 (size 6)
  std::vector<double> a{4, -5, 1};       // [3, 1] for dim 0
  std::vector<double> b{0, 5, -2, 3};    // [4] for dim 1
  std::vector<double> a2{1, -1}, c2{6, -7};
  std::vector<double> p{0, 6, -1};  // [3, 1] for dim 2 (size 7)
  auto outs = run_text(
      R"(graph(%0: f32[5, 6, 7], %1: i64[4], %2: i64[3, 1], %3: i64[4], %4: i64[2], %5: i32[2], %6: i64[3, 1]):
  %7: f32[5, 4, 7] = aten.index.Tensor(%0, [None, %1])
  %8: f32[3, 4, 7] = aten.index.Tensor(%0, [%2, %3])
  %9: f32[2, 6] = aten.index.Tensor(%0, [%4, None, %5])
  %10: f32[5, 3, 4] = aten.index.Tensor(%0, [None, %3, %6])
  %11: f32[3, 4] = aten.index.Tensor(%0, [%2, %3, %6])
  return (%7, %8, %9, %10, %11)
)",
      {HostTensor::from_doubles(DType::Float32, {5, 6, 7}, x),
       HostTensor::from_doubles(DType::Int64, {4}, i1),
       HostTensor::from_doubles(DType::Int64, {3, 1}, a),
       HostTensor::from_doubles(DType::Int64, {4}, b),
       HostTensor::from_doubles(DType::Int64, {2}, a2),
       HostTensor::from_doubles(DType::Int32, {2}, c2),
       HostTensor::from_doubles(DType::Int64, {3, 1}, p)});
  std::vector<double> w7, w8, w9, w10, w11;
  for (int i = 0; i < 5; ++i)
    for (double j : i1)
      for (int k = 0; k < 7; ++k) w7.push_back(at(i, static_cast<int64_t>(j), k));
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 4; ++s)
      for (int k = 0; k < 7; ++k)
        w8.push_back(at(static_cast<int64_t>(a[r]), static_cast<int64_t>(b[s]), k));
  // Non-adjacent index tensors: the broadcast dim goes first.
  for (int q = 0; q < 2; ++q)
    for (int j = 0; j < 6; ++j)
      w9.push_back(at(static_cast<int64_t>(a2[q]), j, static_cast<int64_t>(c2[q])));
  // [None, b (4), p (3, 1)] on dims 1, 2: adjacent, so B = [3, 4] stays in place.
  for (int i = 0; i < 5; ++i)
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 4; ++s)
        w10.push_back(at(i, static_cast<int64_t>(b[s]), static_cast<int64_t>(p[r])));
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 4; ++s)
      w11.push_back(
          at(static_cast<int64_t>(a[r]), static_cast<int64_t>(b[s]), static_cast<int64_t>(p[r])));
  expect_equal(outs[0], {5, 4, 7}, w7);
  expect_equal(outs[1], {3, 4, 7}, w8);
  expect_equal(outs[2], {2, 6}, w9);
  expect_equal(outs[3], {5, 3, 4}, w10);
  expect_equal(outs[4], {3, 4}, w11);
}

TEST(IndexLowering, SelectAndSliceScatter) {
  std::vector<double> x = as_f32(random_values(5 * 6 * 7, 20));
  std::vector<double> s1 = as_f32(random_values(5 * 7, 21));
  std::vector<double> s2 = as_f32(random_values(5 * 6 * 3, 22));
  auto outs = run_text(R"(graph(%0: f32[5, 6, 7], %1: f32[5, 7], %2: f32[5, 6, 3]):
  %3: f32[5, 6, 7] = aten.select_scatter.default(%0, %1, 1, -2)
  %4: f32[5, 6, 7] = aten.slice_scatter.default(%0, %2, 2, 1, 6, 2)
  %5: f32[5, 6, 7] = aten.slice_scatter.default(%0, %2, -1, -3)
  return (%3, %4, %5)
)",
                       {HostTensor::from_doubles(DType::Float32, {5, 6, 7}, x),
                        HostTensor::from_doubles(DType::Float32, {5, 7}, s1),
                        HostTensor::from_doubles(DType::Float32, {5, 6, 3}, s2)});
  std::vector<double> w3 = x, w4 = x, w5 = x;
  for (int i = 0; i < 5; ++i) {
    for (int k = 0; k < 7; ++k) w3[(i * 6 + 4) * 7 + k] = s1[i * 7 + k];
    for (int j = 0; j < 6; ++j) {
      for (int t = 0; t < 3; ++t) {
        w4[(i * 6 + j) * 7 + 1 + 2 * t] = s2[(i * 6 + j) * 3 + t];
        w5[(i * 6 + j) * 7 + 4 + t] = s2[(i * 6 + j) * 3 + t];
      }
    }
  }
  expect_equal(outs[0], {5, 6, 7}, w3);
  expect_equal(outs[1], {5, 6, 7}, w4);
  expect_equal(outs[2], {5, 6, 7}, w5);
}

TEST(IndexLowering, CatAndPadWithSymbolicSizes) {
  std::vector<double> x = as_f32(random_values(12, 23));
  auto outs = run_text(R"(graph(%0: f32[s0, 4]):
  %1: f32[s0 + 1, 4] = aten.constant_pad_nd.default(%0, [0, 0, 1, 0], -1.0)
  %2: f32[2*s0 + 1, 4] = aten.cat.default([%0, %1], 0)
  return (%2)
)",
                       {HostTensor::from_doubles(DType::Float32, {3, 4}, x)});
  std::vector<double> want = x;  // rows of x, then a row of -1, then rows of x
  for (int j = 0; j < 4; ++j) want.push_back(-1.0);
  want.insert(want.end(), x.begin(), x.end());
  expect_close(outs[0], {7, 4}, want);
}

TEST(IndexLowering, IndexPutAndScatterBecomeExterns) {
  Lowered l = lower_text(
      R"(graph(%0: f32[5, 6, 7], %1: i64[3], %2: f32[3, 7], %3: i64[5, 2, 7], %4: f32[5, 6, 7]):
  %5: f32[5, 6, 7] = aten.index_put.default(%0, [None, %1], %2, true)
  %6: f32[5, 6, 7] = aten.scatter_add.default(%0, 1, %3, %4)
  %7: f32[5, 6, 7] = aten.scatter.src(%0, -2, %3, %4)
  %8: f32[5, 6, 7] = aten.scatter.value(%0, 1, %3, 2.5)
  return (%5, %6, %7, %8)
)");
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 4u);
  const auto& prog = l.result.program;
  // index_put: {self, index, values}, ints {accumulate, indexed dims}.
  EXPECT_EQ(ex[0]->kind, ExternKind::IndexPut);
  EXPECT_EQ(ex[0]->inputs.size(), 3u);
  EXPECT_EQ(ex[0]->ints, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(ex[0]->graph_node, 0);
  EXPECT_EQ(ex[0]->op, "aten.index_put.default");
  // scatter_add: {self, index, src}, ints {dim}.
  EXPECT_EQ(ex[1]->kind, ExternKind::ScatterAdd);
  EXPECT_EQ(ex[1]->inputs.size(), 3u);
  EXPECT_EQ(ex[1]->ints, (std::vector<int64_t>{1}));
  EXPECT_EQ(ex[1]->graph_node, 1);
  // scatter: an IndexPut over every dim, `index` for dim 1 and stride-0 aranges elsewhere.
  for (int k : {2, 3}) {
    EXPECT_EQ(ex[k]->kind, ExternKind::IndexPut);
    ASSERT_EQ(ex[k]->inputs.size(), 5u);
    EXPECT_EQ(ex[k]->ints, (std::vector<int64_t>{0, 0, 1, 2}));
    const auto& ar = prog.buffer(ex[k]->inputs[1]);  // arange for dim 0, viewed [5, 2, 7]
    ASSERT_EQ(ar.sizes.size(), 3u);
    EXPECT_EQ(l.ctx->as_const(ar.strides[0]), 1);
    EXPECT_EQ(l.ctx->as_const(ar.strides[1]), 0);
    EXPECT_EQ(l.ctx->as_const(ar.strides[2]), 0);
    EXPECT_EQ(ar.dtype, DType::Int64);
  }
  // scatter.src reads only the [5, 2, 7] window of src, in place.
  const auto& src = prog.buffer(ex[2]->inputs[4]);
  EXPECT_EQ(l.ctx->as_const(src.sizes[1]), 2);
  EXPECT_EQ(l.ctx->as_const(src.strides[0]), 42);
}

// scatter with one index per line along dim (index of size 1 there, self's size elsewhere) is
// a pointwise, no extern: value and src forms, along dim 1 and dim 0, against brute force;
// nll_loss's backward pattern (a -1 one-hot scaled per row, then summed and subtracted) keeps
// the scaled one-hot inline for both readers (its per-row operands count as loads), so the
// only full-size buffer is the result.
TEST(IndexLowering, OneIndexPerLineScatterIsPointwise) {
  const int64_t R = 4, C = 6;
  std::vector<double> x = as_f32(random_values(R * C, 71)), src = as_f32(random_values(R * C, 72));
  std::vector<double> rows_idx = {5, 0, 3, 3}, cols_idx = {1, 0, 3, 2, 2, 0};
  const char* text = R"(graph(%0: f32[4, 6], %1: i64[4, 1], %2: i64[1, 6], %3: f32[4, 6]):
  %4: f32[4, 6] = aten.scatter.value(%0, 1, %1, -1.0)
  %5: f32[4, 6] = aten.scatter.src(%0, 1, %1, %3)
  %6: f32[4, 6] = aten.scatter.value(%0, 0, %2, 7.0)
  return (%4, %5, %6)
)";
  Lowered l = lower_text(text);
  EXPECT_TRUE(externs(l).empty());
  auto outs =
      loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, {R, C}, x),
                                         HostTensor::from_doubles(DType::Int64, {R, 1}, rows_idx),
                                         HostTensor::from_doubles(DType::Int64, {1, C}, cols_idx),
                                         HostTensor::from_doubles(DType::Float32, {R, C}, src)});
  std::vector<double> w4 = x, w5 = x, w6 = x;
  for (int64_t i = 0; i < R; ++i) {
    const int64_t j = static_cast<int64_t>(rows_idx[i]);
    w4[i * C + j] = -1.0;
    w5[i * C + j] = src[i * C];  // src[i, 0]
  }
  for (int64_t j = 0; j < C; ++j) w6[static_cast<int64_t>(cols_idx[j]) * C + j] = 7.0;
  expect_equal(outs[0], {R, C}, w4);
  expect_equal(outs[1], {R, C}, w5);
  expect_equal(outs[2], {R, C}, w6);

  Lowered nll = lower_text(R"(graph(%0: f32[64, 1000], %1: i64[64], %2: f32[]):
  %3: i64[64, 1] = aten.unsqueeze.default(%1, 1)
  %4: b8[64, 1] = aten.ne.Scalar(%3, -100)
  %5: i64[64, 1] = aten.where.self(%4, %3, 0)
  %6: f32[64, 1000] = aten.full.default([64, 1000], 0, dtype=dtype(f32))
  %7: f32[64, 1000] = aten.scatter.value(%6, 1, %5, -1.0)
  %8: f32[64, 1] = aten.where.self(%4, %2, 0.0)
  %9: f32[64, 1000] = aten.mul.Tensor(%7, %8)
  %10: f32[64, 1] = aten.sum.dim_IntList(%9, [1], true)
  %11: f32[64, 1000] = aten.exp.default(%0)
  %12: f32[64, 1000] = aten.mul.Tensor(%11, %10)
  %13: f32[64, 1000] = aten.sub.Tensor(%9, %12)
  return (%13)
)");
  EXPECT_TRUE(externs(nll).empty());
  int full_size = 0;
  for (const auto& st : nll.result.program.steps) {
    const auto* n = std::get_if<loop::ComputeNode>(&st);
    if (n && !n->is_reduction() && n->ranges.size() == 2 && nll.ctx->as_const(n->ranges[1]) == 1000)
      ++full_size;
  }
  EXPECT_EQ(full_size, 1) << "the scaled one-hot was realized";
}

TEST(IndexLowering, MaskIndexFallsBack) {
  // Boolean-mask indexing has a data-dependent shape: CompileError (strict) / fallback.
  const char* text = R"(graph(%0: f32[4, 10], %1: b8[4, 10], %2: f32[]):
  %3: f32[4, 10] = aten.index_put.default(%0, [%1], %2, true)
  return (%3)
)";
  EXPECT_THROW(lower_text(text), CompileError);
  Lowered l = lower_text(text, /*strict=*/false);
  ASSERT_EQ(l.result.fallback_ops.size(), 1u);
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::Fallback);
}

TEST(IndexLowering, EmbeddingBackwardIsAccumulatingIndexPut) {
  Lowered l = lower_text(R"(graph(%0: f32[2, 3, 4], %1: i64[2, 3]):
  %2: f32[10, 4] = aten.embedding_dense_backward.default(%0, %1, 10, 0, false)
  return (%2)
)");
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::IndexPut);
  EXPECT_EQ(ex[0]->ints, (std::vector<int64_t>{1, 0}));
  const auto& prog = l.result.program;
  ASSERT_EQ(ex[0]->inputs.size(), 3u);
  EXPECT_EQ(prog.buffer(ex[0]->inputs[1]).sizes.size(), 1u);              // flattened indices [6]
  EXPECT_EQ(l.ctx->as_const(prog.buffer(ex[0]->inputs[2]).sizes[0]), 6);  // grad [6, 4]
}

// On the GPU an accumulating float32/float64 index_put is the IndexPut extern, which the runtime
// runs with coil's atomic scatter (runtime/cuda_index.cpp); other dtypes and plain puts stay
// ATen's call (Fallback extern).
TEST(IndexLowering, CudaAccumulatingIndexPutIsTheScatterExtern) {
  auto kind_of = [](const char* dtype, const char* accumulate) {
    std::string text =
        std::string("graph(%0: ") + dtype + "[8, 4]@cuda, %1: i64[5]@cuda, %2: " + dtype +
        "[5, 4]@cuda):\n  %3: " + dtype + "[8, 4]@cuda = aten.index_put.default(%0, [%1], %2, " +
        accumulate + ")\n  return (%3)\n";
    Lowered l = lower_text(text, /*strict=*/false);
    auto ex = externs(l);
    EXPECT_EQ(ex.size(), 1u) << text;
    return ex.empty() ? ExternKind::Mm : ex[0]->kind;
  };
  EXPECT_EQ(kind_of("f32", "true"), ExternKind::IndexPut);
  EXPECT_EQ(kind_of("f64", "true"), ExternKind::IndexPut);
  EXPECT_EQ(kind_of("bf16", "true"), ExternKind::Fallback);
  EXPECT_EQ(kind_of("f32", "false"), ExternKind::Fallback);
}

TEST(IndexLowering, CudaEmbeddingBackwardIsTheScatterExtern) {
  Lowered l = lower_text(R"(graph(%0: f32[2, 3, 4]@cuda, %1: i64[2, 3]@cuda):
  %2: f32[10, 4]@cuda = aten.embedding_dense_backward.default(%0, %1, 10, -1, false)
  return (%2)
)");
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]->kind, ExternKind::IndexPut);
  EXPECT_EQ(ex[0]->ints, (std::vector<int64_t>{1, 0}));
}

// ATen's fused attention allocates all of its outputs, so its extern says so: the runtime may
// let them take over storages the memory plan shares instead of copying them in.
TEST(IndexLowering, FusedAttentionOutputsAreFresh) {
  Lowered l = lower_text(
      R"(graph(%0: bf16[2, 4, 16, 8]@cuda, %1: bf16[2, 4, 16, 8]@cuda, %2: bf16[2, 4, 16, 8]@cuda):
  %3: bf16[2, 4, 16, 8]@cuda, %4: f32[2, 4, 16, 1]@cuda, %5: i64[]@cuda, %6: i64[]@cuda = aten._scaled_dot_product_cudnn_attention.default(%0, %1, %2, None, false, 0.0, true, false)
  return (%3)
)",
      /*strict=*/false);
  auto ex = externs(l);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_TRUE(ex[0]->fresh_outputs);
  Lowered put = lower_text(R"(graph(%0: bf16[8, 4]@cuda, %1: i64[5]@cuda, %2: bf16[5, 4]@cuda):
  %3: bf16[8, 4]@cuda = aten.index_put.default(%0, [%1], %2, false)
  return (%3)
)",
                           /*strict=*/false);
  auto pex = externs(put);
  ASSERT_EQ(pex.size(), 1u);
  EXPECT_FALSE(pex[0]->fresh_outputs) << "ATen's index_put may return what aliases its input";
}

}  // namespace
}  // namespace coil::lower::testing
