// End to end: graph text -> compile_graph -> run, against references computed here.
#include <gtest/gtest.h>

#include <cmath>

#include "coil/runtime/compiled_graph.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/runtime/program.h"
#include "coil/support/error.h"
#include "test_util.h"

namespace coil::runtime {
namespace {

using namespace testing;

TEST(CompileGraph, PointwiseChain) {
  const char* text = R"(graph(%0: f32[300], %1: f32[300]):
  %2: f32[300] = aten.mul.Tensor(%0, %1)
  %3: f32[300] = aten.add.Tensor(%2, 1.0)
  %4: f32[300] = aten.exp.default(%3)
  return (%4)
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto a = make_tensor<float>(DType::Float32, {300});
  auto b = make_tensor<float>(DType::Float32, {300});
  fill_random<float>(a, 1);
  fill_random<float>(b, 2);
  auto outs = g->run({a, b});
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].sizes, std::vector<int64_t>{300});
  for (int64_t i = 0; i < 300; ++i) {
    float want = std::exp(at<float>(a, {i}) * at<float>(b, {i}) + 1.0f);
    EXPECT_NEAR(at<float>(outs[0], {i}), want, 1e-5 * want);
  }
  const auto& art = g->artifacts();
  EXPECT_GE(art.num_kernels, 1);
  EXPECT_FALSE(art.source.empty());
  EXPECT_NE(art.input_graph.find("aten.exp.default"), std::string::npos);
  ASSERT_GE(art.timings.size(), 6u);
  EXPECT_EQ(art.timings[0].first, "parse");
}

TEST(CompileGraph, Softmax) {
  const char* text = R"(graph(%0: f32[6, 40]):
  %1: f32[6, 1] = aten.amax.default(%0, [1], true)
  %2: f32[6, 40] = aten.sub.Tensor(%0, %1)
  %3: f32[6, 40] = aten.exp.default(%2)
  %4: f32[6, 1] = aten.sum.dim_IntList(%3, [1], true)
  %5: f32[6, 40] = aten.div.Tensor(%3, %4)
  return (%5)
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto x = make_tensor<float>(DType::Float32, {6, 40});
  fill_random<float>(x, 3, -5, 5);
  auto out = g->run({x})[0];
  for (int64_t r = 0; r < 6; ++r) {
    double mx = -1e30, sum = 0;
    for (int64_t c = 0; c < 40; ++c) mx = std::max(mx, double(at<float>(x, {r, c})));
    for (int64_t c = 0; c < 40; ++c) sum += std::exp(at<float>(x, {r, c}) - mx);
    for (int64_t c = 0; c < 40; ++c)
      EXPECT_NEAR(at<float>(out, {r, c}), std::exp(at<float>(x, {r, c}) - mx) / sum, 1e-6);
  }
}

TEST(CompileGraph, MmWithTransposedOperandAndEpilogue) {
  const char* text = R"(graph(%0: f32[9, 12], %1: f32[7, 12]):
  %2: f32[12, 7]{1, 12} = aten.permute.default(%1, [1, 0])
  %3: f32[9, 7] = aten.mm.default(%0, %2)
  %4: f32[9, 7] = aten.relu.default(%3)
  return (%4, %2)
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto a = make_tensor<float>(DType::Float32, {9, 12});
  auto b = make_tensor<float>(DType::Float32, {7, 12});
  fill_random<float>(a, 4);
  fill_random<float>(b, 5);
  auto outs = g->run({a, b});
  for (int64_t m = 0; m < 9; ++m)
    for (int64_t n = 0; n < 7; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < 12; ++k) acc += double(at<float>(a, {m, k})) * at<float>(b, {n, k});
      EXPECT_NEAR(at<float>(outs[0], {m, n}), std::max(acc, 0.0), 1e-5);
    }
  // The permuted input is returned as a view of the input itself.
  EXPECT_EQ(outs[1].data, b.data);
  EXPECT_EQ(outs[1].strides, (std::vector<int64_t>{1, 12}));
  EXPECT_EQ(g->program()->output_aliases_input(1), 1);
}

TEST(CompileGraph, FallbackFnAdoptsOrCopiesHostResults) {
  const char* text = R"(graph(%0: f32[4, 5]):
  %1: f32[4, 5] = aten.mul.Tensor(%0, 2.0)
  %2: f32[4, 5] = aten.cumsum.default(%1, 1)
  %3: f32[4, 5] = aten.add.Tensor(%2, 1.0)
  return (%3)
)";
  int calls = 0;
  FallbackFn fb = [&](int node, const std::vector<RuntimeTensor>& ins) {
    ++calls;
    EXPECT_EQ(node, 1);
    EXPECT_EQ(ins.size(), 1u);
    auto out = make_tensor<float>(DType::Float32, {4, 5},
                                  calls % 2 ? std::vector<int>{} : std::vector<int>{1, 0});
    for (int64_t r = 0; r < 4; ++r) {
      float acc = 0;
      for (int64_t c = 0; c < 5; ++c) at<float>(out, {r, c}) = acc += at<float>(ins[0], {r, c});
    }
    return std::vector<RuntimeTensor>{out};
  };
  auto g = compile_graph(text, CompileOptions{}, fb);
  ASSERT_EQ(g->artifacts().fallback_ops.size(), 1u);
  auto x = make_tensor<float>(DType::Float32, {4, 5});
  fill_random<float>(x, 6);
  for (int rep = 0; rep < 2; ++rep) {  // contiguous result (adopted), then transposed (copied)
    auto out = g->run({x})[0];
    for (int64_t r = 0; r < 4; ++r) {
      float acc = 0;
      for (int64_t c = 0; c < 5; ++c) {
        acc += 2 * at<float>(x, {r, c});
        EXPECT_NEAR(at<float>(out, {r, c}), acc + 1, 1e-5);
      }
    }
  }
  EXPECT_EQ(calls, 2);
  CompileOptions strict;
  strict.strict = true;
  EXPECT_THROW(compile_graph(text, strict, fb), CompileError);
  EXPECT_THROW(compile_graph(text, CompileOptions{}, nullptr), CompileError);
}

TEST(CompileGraph, RunConsumingDropsEachInputAfterItsLastReader) {
  // %0 is last read by the kernel before the host op, %1 after it; output 1 aliases %1.
  const char* text = R"(graph(%0: f32[4, 5], %1: f32[4, 5]):
  %2: f32[4, 5] = aten.mul.Tensor(%0, 2.0)
  %3: f32[4, 5] = aten.cumsum.default(%2, 1)
  %4: f32[4, 5] = aten.add.Tensor(%3, %1)
  return (%4, %1)
)";
  std::weak_ptr<void> x_alive, y_alive;
  std::vector<bool> x_seen, y_seen;  // per fallback call: still alive?
  FallbackFn fb = [&](int, const std::vector<RuntimeTensor>& ins) {
    x_seen.push_back(!x_alive.expired());
    y_seen.push_back(!y_alive.expired());
    auto out = make_tensor<float>(DType::Float32, {4, 5});
    for (int64_t r = 0; r < 4; ++r) {
      float acc = 0;
      for (int64_t c = 0; c < 5; ++c) at<float>(out, {r, c}) = acc += at<float>(ins[0], {r, c});
    }
    return std::vector<RuntimeTensor>{out};
  };
  auto g = compile_graph(text, CompileOptions{}, fb);
  EXPECT_NE(g->program()->describe().find("release input0"), std::string::npos)
      << g->program()->describe();
  EXPECT_EQ(g->program()->describe().find("release input1"), std::string::npos)
      << "an output aliases input 1";
  std::vector<float> want(20);
  auto make_inputs = [&] {
    auto x = make_tensor<float>(DType::Float32, {4, 5});
    auto y = make_tensor<float>(DType::Float32, {4, 5});
    fill_random<float>(x, 7);
    fill_random<float>(y, 8);
    for (int64_t r = 0; r < 4; ++r) {
      float acc = 0;
      for (int64_t c = 0; c < 5; ++c)
        want[r * 5 + c] = (acc += 2 * at<float>(x, {r, c})) + at<float>(y, {r, c});
    }
    x_alive = x.owner;
    y_alive = y.owner;
    return std::vector<RuntimeTensor>{std::move(x), std::move(y)};
  };
  auto check = [&](const std::vector<RuntimeTensor>& out) {
    ASSERT_EQ(out.size(), 2u);
    for (int64_t i = 0; i < 20; ++i)
      EXPECT_NEAR(static_cast<const float*>(out[0].data)[i], want[i], 1e-5);
  };

  // run(): the caller's references keep both inputs alive throughout.
  std::vector<RuntimeTensor> kept = make_inputs();
  check(g->run(kept));
  // run_consuming(): `checked` runs before any step; input 0 dies before the host op, input 1
  // lives on in output 1.
  int checked = 0;
  std::vector<RuntimeTensor> out = g->run_consuming(make_inputs(), RunContext{}, [&] {
    ++checked;
    EXPECT_EQ(x_seen.size(), 1u) << "called before the first step";
  });
  check(out);
  EXPECT_EQ(checked, 1);
  EXPECT_EQ(x_seen, (std::vector<bool>{true, false}));
  EXPECT_EQ(y_seen, (std::vector<bool>{true, true}));
  EXPECT_TRUE(x_alive.expired());
  EXPECT_FALSE(y_alive.expired());
  out.clear();
  EXPECT_TRUE(y_alive.expired());

  // Inputs that fail the checks are not taken: `checked` is not called.
  std::vector<RuntimeTensor> bad = make_inputs();
  bad[1] = make_tensor<float>(DType::Float32, {4, 6});
  EXPECT_THROW(g->run_consuming(std::move(bad), RunContext{}, [&] { ++checked; }),
               InputMismatchError);
  EXPECT_EQ(checked, 1);
}

// copy_(input, value) at the end of a graph writes the input itself (src/lower/mutation.cpp),
// after every read of its old value: the output reads it at other elements (flip) and is
// realized after the mutation node is lowered; the new value reads it at the same element.
TEST(CompileGraph, InputMutationWritesTheInputAfterEveryRead) {
  const char* text = R"(graph(%0: f32[64], %1: f32[64, 32], %7: f32[16, 64]):
  %2: f32[64] = aten.flip.default(%0, [0])
  %3: f32[64] = aten.sum.dim_IntList(%1, [1])
  %4: f32[64] = aten.mul.Tensor(%0, 0.9)
  %5: f32[64] = aten.add.Tensor(%4, %3)
  %6: f32[64] = aten.add.Tensor(%2, %0)
  aten.copy_.default(%0, %5)
  aten.copy_.default(%7, %0)
  return (%6)
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto x = make_tensor<float>(DType::Float32, {64});
  auto m = make_tensor<float>(DType::Float32, {64, 32});
  fill_random<float>(x, 4);
  fill_random<float>(m, 5);
  auto rows = make_tensor<float>(DType::Float32, {16, 64});
  std::vector<float> x0(64), m0(64 * 32);
  for (int64_t i = 0; i < 64; ++i) x0[i] = at<float>(x, {i});
  for (int64_t i = 0; i < 64 * 32; ++i) m0[i] = at<float>(m, {i / 32, i % 32});
  auto out = g->run({x, m, rows});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 64; ++i) {
    float rowsum = 0;
    for (int64_t j = 0; j < 32; ++j) rowsum += m0[i * 32 + j];
    EXPECT_NEAR(at<float>(out[0], {i}), x0[63 - i] + x0[i], 1e-5) << i;
    EXPECT_NEAR(at<float>(x, {i}), 0.9f * x0[i] + rowsum, 1e-4) << i;
    // %7 takes %0 broadcast over its rows: the old %0 (the graph's value %0 is the input as
    // it came in), so this copy runs before %0 is written.
    for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(at<float>(rows, {r, i}), x0[i]) << r << " " << i;
  }
  EXPECT_NE(g->artifacts().schedule.find("-> in0 (input mutation)"), std::string::npos)
      << g->artifacts().schedule;
}

// Two input mutations where the second copies the first input's old value at other elements
// (flip): the second must not run in the first's kernel, and must run before it.
TEST(CompileGraph, InputMutationReadByAnotherMutation) {
  const char* text = R"(graph(%0: f32[256], %1: f32[256]):
  %2: f32[256] = aten.mul.Tensor(%0, 2.0)
  %3: f32[256] = aten.flip.default(%0, [0])
  aten.copy_.default(%0, %2)
  aten.copy_.default(%1, %3)
  return ()
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto a = make_tensor<float>(DType::Float32, {256});
  auto b = make_tensor<float>(DType::Float32, {256});
  fill_random<float>(a, 6);
  std::vector<float> a0(256);
  for (int64_t i = 0; i < 256; ++i) a0[i] = at<float>(a, {i});
  g->run({a, b});
  for (int64_t i = 0; i < 256; ++i) {
    EXPECT_EQ(at<float>(a, {i}), 2 * a0[i]) << i;
    EXPECT_EQ(at<float>(b, {i}), a0[255 - i]) << i;
  }
}

// Two mutations that read each other's input (a swap): each value is computed into a buffer
// of its own before either input is written (src/lower/mutation.cpp), else neither write
// could come after the other's read.
TEST(CompileGraph, InputMutationsSwapTwoInputs) {
  const char* text = R"(graph(%0: f32[128], %1: f32[128]):
  %2: f32[128] = aten.add.Tensor(%1, 1.0)
  aten.copy_.default(%0, %2)
  aten.copy_.default(%1, %0)
  return ()
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  auto a = make_tensor<float>(DType::Float32, {128});
  auto b = make_tensor<float>(DType::Float32, {128});
  fill_random<float>(a, 8);
  fill_random<float>(b, 9);
  std::vector<float> a0(128), b0(128);
  for (int64_t i = 0; i < 128; ++i) a0[i] = at<float>(a, {i}), b0[i] = at<float>(b, {i});
  g->run({a, b});
  for (int64_t i = 0; i < 128; ++i) {
    EXPECT_EQ(at<float>(a, {i}), b0[i] + 1.0f) << i;
    EXPECT_EQ(at<float>(b, {i}), a0[i]) << i;
  }
}

TEST(CompileGraph, SymbolicSizesAndGuards) {
  const char* text = R"(graph(%0: f32[s0, 3]):
  %1: f32[s0, 3] = aten.neg.default(%0)
  return (%1)
)";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  for (int64_t n : {2, 5, 33}) {
    auto x = make_tensor<float>(DType::Float32, {n, 3});
    fill_random<float>(x, 7);
    auto out = g->run({x})[0];
    ASSERT_EQ(out.sizes, (std::vector<int64_t>{n, 3}));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(at<float>(out, {i, 2}), -at<float>(x, {i, 2}));
  }
  auto bad = make_tensor<float>(DType::Float32, {4, 4});
  EXPECT_THROW(g->run({bad}), InputMismatchError);
  auto one = make_tensor<float>(DType::Float32, {1, 3});  // s0 has the range [2, inf)
  EXPECT_THROW(g->run({one}), InputMismatchError);
  auto f64 = make_tensor<double>(DType::Float64, {4, 3});
  EXPECT_THROW(g->run({f64}), InputMismatchError);
  EXPECT_THROW(g->run({}), InputMismatchError);
}

// A cat of 12 pieces with symbolic lengths runs as the Cat extern (each piece copied to its
// slice at the offset of the lengths before it, at run time); the kernel only multiplies, so
// nothing in the source tests a piece (no select).
TEST(CompileGraph, CatOfManySymbolicPiecesCopiesEachPiece) {
  std::string hdr, args, total;
  for (int k = 0; k < 12; ++k) {
    std::string s = "s" + std::to_string(k);
    hdr += (k ? ", %" : "%") + std::to_string(k) + ": f32[" + s + ", 3]";
    args += (k ? ", %" : "%") + std::to_string(k);
    total += (k ? " + " : "") + s;
  }
  std::string text = "graph(" + hdr + "):\n  %12: f32[" + total + ", 3] = aten.cat.default([" +
                     args + "])\n  %13: f32[" + total +
                     ", 3] = aten.mul.Tensor(%12, 2.0)\n  return (%13)\n";
  auto g = compile_graph(text, CompileOptions{}, nullptr);
  EXPECT_EQ(g->artifacts().source.find('?'), std::string::npos) << g->artifacts().source;
  for (int shift : {0, 5}) {
    std::vector<RuntimeTensor> in;
    for (int k = 0; k < 12; ++k) {
      in.push_back(make_tensor<float>(DType::Float32, {2 + (3 * k + shift) % 7, 3}));
      fill_random<float>(in.back(), 100 + k);
    }
    auto out = g->run(in)[0];
    int64_t row = 0;
    for (const RuntimeTensor& p : in) {
      for (int64_t i = 0; i < p.sizes[0]; ++i, ++row)
        for (int64_t j = 0; j < 3; ++j)
          EXPECT_EQ(at<float>(out, {row, j}), 2 * at<float>(p, {i, j}));
    }
    EXPECT_EQ(out.sizes[0], row);
  }
}

}  // namespace
}  // namespace coil::runtime
