// Reduction lowerings against brute-force references, through the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "family_test_util.h"

namespace coil::lower::testing {
namespace {

// The elements of each output position (input row-major order within a group), output
// positions in row-major order of the kept dims.
std::vector<std::vector<double>> groups(const std::vector<int64_t>& sizes,
                                        const std::vector<double>& x, std::set<int> dims) {
  if (dims.empty()) {
    for (int d = 0; d < static_cast<int>(sizes.size()); ++d) dims.insert(d);
  }
  std::vector<int64_t> kept;
  for (int d = 0; d < static_cast<int>(sizes.size()); ++d) {
    if (!dims.count(d)) kept.push_back(sizes[d]);
  }
  std::vector<std::vector<double>> out(static_cast<size_t>(product(kept)));
  for (int64_t l = 0; l < product(sizes); ++l) {
    std::vector<int64_t> idx = unravel(sizes, l), ki;
    for (int d = 0; d < static_cast<int>(sizes.size()); ++d) {
      if (!dims.count(d)) ki.push_back(idx[d]);
    }
    out[linear(kept, ki)].push_back(x[l]);
  }
  return out;
}

std::vector<double> map_groups(const std::vector<std::vector<double>>& g,
                               const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& v : g) out.push_back(f(v));
  return out;
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double prod_of(const std::vector<double>& v) {
  double s = 1;
  for (double x : v) s *= x;
  return s;
}
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double argmax_of(const std::vector<double>& v) {
  return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin());  // first max
}
double argmin_of(const std::vector<double>& v) {
  return static_cast<double>(std::min_element(v.begin(), v.end()) - v.begin());
}
double var_of(const std::vector<double>& v, double correction) {
  double m = sum_of(v) / static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(static_cast<double>(v.size()) - correction, 0.0);
}

TEST(ReductionLowering, SumMeanKeepdimNegativeAndNonAdjacentDims) {
  const std::vector<int64_t> sz{3, 4, 5};
  std::vector<double> x = as_f32(random_values(60, 1));
  auto outs = run_text(R"(graph(%0: f32[3, 4, 5]):
  %1: f32[4] = aten.sum.dim_IntList(%0, [0, 2])
  %2: f32[1, 4, 1] = aten.sum.dim_IntList(%0, [-1, 0], true)
  %3: f32[] = aten.sum.default(%0)
  %4: f32[3, 5] = aten.mean.dim(%0, [1])
  %5: f32[3, 1, 1] = aten.mean.dim(%0, [-1, -2], true)
  %6: f32[] = aten.sum.dim_IntList(%0, [])
  %7: f32[] = aten.mean.default(%0)
  return (%1, %2, %3, %4, %5, %6, %7)
)",
                       {HostTensor::from_doubles(DType::Float32, sz, x)});
  ASSERT_EQ(outs.size(), 7u);
  auto mean_of = [](const std::vector<double>& v) { return sum_of(v) / v.size(); };
  expect_close(outs[0], {4}, map_groups(groups(sz, x, {0, 2}), sum_of));
  expect_close(outs[1], {1, 4, 1}, map_groups(groups(sz, x, {0, 2}), sum_of));
  expect_close(outs[2], {}, {sum_of(x)});
  expect_close(outs[3], {3, 5}, map_groups(groups(sz, x, {1}), mean_of));
  expect_close(outs[4], {3, 1, 1}, map_groups(groups(sz, x, {1, 2}), mean_of));
  expect_close(outs[5], {}, {sum_of(x)});
  expect_close(outs[6], {}, {sum_of(x) / 60});
}

TEST(ReductionLowering, IntegerAndBoolSumsPromoteToInt64) {
  const std::vector<int64_t> sz{4, 6};
  std::vector<double> x = random_values(24, 2, -3, 4, true);
  std::vector<double> m = random_values(24, 3, 0, 2, true);
  Lowered l = lower_text(R"(graph(%0: i32[4, 6], %1: b8[4, 6]):
  %2: i64[4] = aten.sum.dim_IntList(%0, [1])
  %3: i64[] = aten.sum.default(%1)
  %4: i64[6] = aten.prod.dim_int(%0, 0)
  %5: f64[4] = aten.sum.dim_IntList(%0, [1], false, dtype=dtype(f64))
  %6: i64[] = aten.prod.default(%0)
  return (%2, %3, %4, %5, %6)
)");
  auto outs = loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Int32, sz, x),
                                                 HostTensor::from_doubles(DType::Bool, sz, m)});
  EXPECT_EQ(outs[0].dtype, DType::Int64);
  expect_equal(outs[0], {4}, map_groups(groups(sz, x, {1}), sum_of));
  expect_equal(outs[1], {}, {sum_of(m)});
  expect_equal(outs[2], {6}, map_groups(groups(sz, x, {0}), prod_of));
  EXPECT_EQ(outs[3].dtype, DType::Float64);
  expect_equal(outs[3], {4}, map_groups(groups(sz, x, {1}), sum_of));
  expect_equal(outs[4], {}, {prod_of(x)});
}

TEST(ReductionLowering, ExtremesAndIndicesWithTies) {
  const std::vector<int64_t> sz{5, 7};
  // Whole numbers in [-3, 3]: many ties, so the first-occurrence rule is exercised.
  std::vector<double> x = random_values(35, 4, -3, 4, true);
  auto outs = run_text(R"(graph(%0: f32[5, 7]):
  %1: f32[5] = aten.amax.default(%0, [1])
  %2: f32[] = aten.amin.default(%0, [])
  %3: f32[5], %4: i64[5] = aten.max.dim(%0, 1)
  %5: f32[1, 7], %6: i64[1, 7] = aten.min.dim(%0, 0, true)
  %7: f32[] = aten.max.default(%0)
  %8: i64[] = aten.argmax.default(%0)
  %9: i64[5, 1] = aten.argmin.default(%0, 1, true)
  %10: i64[7] = aten.argmax.default(%0, -2)
  %11: i64[1, 1] = aten.argmax.default(%0, None, true)
  %12: f32[] = aten.min.default(%0)
  %13: f32[7] = aten.amin.default(%0, [-2], false)
  return (%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13)
)",
                       {HostTensor::from_doubles(DType::Float32, sz, x)});
  ASSERT_EQ(outs.size(), 13u);
  expect_equal(outs[0], {5}, map_groups(groups(sz, x, {1}), max_of));
  expect_equal(outs[1], {}, {min_of(x)});
  expect_equal(outs[2], {5}, map_groups(groups(sz, x, {1}), max_of));
  EXPECT_EQ(outs[3].dtype, DType::Int64);
  expect_equal(outs[3], {5}, map_groups(groups(sz, x, {1}), argmax_of));
  expect_equal(outs[4], {1, 7}, map_groups(groups(sz, x, {0}), min_of));
  expect_equal(outs[5], {1, 7}, map_groups(groups(sz, x, {0}), argmin_of));
  expect_equal(outs[6], {}, {max_of(x)});
  expect_equal(outs[7], {}, {argmax_of(x)});
  expect_equal(outs[8], {5, 1}, map_groups(groups(sz, x, {1}), argmin_of));
  expect_equal(outs[9], {7}, map_groups(groups(sz, x, {0}), argmax_of));
  expect_equal(outs[10], {1, 1}, {argmax_of(x)});
  expect_equal(outs[11], {}, {min_of(x)});
  expect_equal(outs[12], {7}, map_groups(groups(sz, x, {0}), min_of));
}

TEST(ReductionLowering, ArgmaxOverThreeDims) {
  const std::vector<int64_t> sz{2, 3, 4};
  std::vector<double> x = random_values(24, 5, -5, 5, true);
  auto outs = run_text(R"(graph(%0: f32[2, 3, 4]):
  %1: i64[] = aten.argmax.default(%0)
  %2: i64[2, 4] = aten.argmin.default(%0, 1)
  return (%1, %2)
)",
                       {HostTensor::from_doubles(DType::Float32, sz, x)});
  expect_equal(outs[0], {}, {argmax_of(x)});
  expect_equal(outs[1], {2, 4}, map_groups(groups(sz, x, {1}), argmin_of));
}

TEST(ReductionLowering, AnyAll) {
  const std::vector<int64_t> sz{5, 7};
  std::vector<double> b = random_values(35, 6, 0, 1.3, true);  // mostly 0
  std::vector<double> f = random_values(35, 7, 0, 1.1, true);  // mostly 0, some 1
  for (int64_t j = 0; j < 7; ++j) f[2 * 7 + j] = 0.5;          // a row of nonzeros
  auto outs = run_text(R"(graph(%0: b8[5, 7], %1: f32[5, 7]):
  %2: b8[5] = aten.any.dim(%0, 1)
  %3: b8[] = aten.all.dims(%0, [0, 1])
  %4: b8[] = aten.any.default(%1)
  %5: b8[1, 7] = aten.all.dim(%1, 0, true)
  %6: b8[5] = aten.all.dim(%1, -1)
  %7: b8[7] = aten.any.dims(%1, [0])
  return (%2, %3, %4, %5, %6, %7)
)",
                       {HostTensor::from_doubles(DType::Bool, sz, b),
                        HostTensor::from_doubles(DType::Float32, sz, f)});
  auto any_of = [](const std::vector<double>& v) {
    return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1.0 : 0.0;
  };
  auto all_of = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1.0 : 0.0;
  };
  EXPECT_EQ(outs[0].dtype, DType::Bool);
  expect_equal(outs[0], {5}, map_groups(groups(sz, b, {1}), any_of));
  expect_equal(outs[1], {}, {all_of(b)});
  expect_equal(outs[2], {}, {any_of(f)});
  expect_equal(outs[3], {1, 7}, map_groups(groups(sz, f, {0}), all_of));
  expect_equal(outs[4], {5}, map_groups(groups(sz, f, {1}), all_of));
  expect_equal(outs[5], {7}, map_groups(groups(sz, f, {0}), any_of));
}

TEST(ReductionLowering, VarStdVarMeanTwoPassIsAccurate) {
  const std::vector<int64_t> sz{6, 50};
  // A large common offset: the one-pass E[x^2] - E[x]^2 formula loses every digit in f32.
  std::vector<double> x = random_values(300, 8, 0, 1);
  for (auto& v : x) v += 10000.0;
  x = as_f32(x);
  auto outs = run_text(R"(graph(%0: f32[6, 50]):
  %1: f32[6] = aten.var.correction(%0, [1], correction=1)
  %2: f32[1, 1] = aten.var.correction(%0, None, correction=0, keepdim=true)
  %3: f32[50] = aten.std.correction(%0, [0])
  %4: f32[], %5: f32[] = aten.var_mean.correction(%0, [0, 1], correction=1)
  %6: f32[6, 1] = aten.var.dim(%0, [-1], false, true)
  %7: f32[] = aten.std.default(%0)
  return (%1, %2, %3, %4, %5, %6, %7)
)",
                       {HostTensor::from_doubles(DType::Float32, sz, x)});
  ASSERT_EQ(outs.size(), 7u);
  auto var1 = [](const std::vector<double>& v) { return var_of(v, 1); };
  auto var0 = [](const std::vector<double>& v) { return var_of(v, 0); };
  auto std1 = [](const std::vector<double>& v) { return std::sqrt(var_of(v, 1)); };
  expect_close(outs[0], {6}, map_groups(groups(sz, x, {1}), var1), 1e-4, 1e-3);
  expect_close(outs[1], {1, 1}, {var0(x)}, 1e-4, 1e-3);
  expect_close(outs[2], {50}, map_groups(groups(sz, x, {0}), std1), 1e-4, 1e-3);
  expect_close(outs[3], {}, {var1(x)}, 1e-4, 1e-3);
  expect_close(outs[4], {}, {sum_of(x) / 300}, 1e-3, 1e-6);
  expect_close(outs[5], {6, 1}, map_groups(groups(sz, x, {1}), var0), 1e-4, 1e-3);
  expect_close(outs[6], {}, {std1(x)}, 1e-4, 1e-3);
}

TEST(ReductionLowering, VarWithTooLargeCorrectionIsInfOrNan) {
  std::vector<double> x{1, 2, 3};
  auto outs = run_text(R"(graph(%0: f32[3]):
  %1: f32[] = aten.var.correction(%0, None, correction=3)
  return (%1)
)",
                       {HostTensor::from_doubles(DType::Float32, {3}, x)});
  expect_close(outs[0], {}, {std::numeric_limits<double>::infinity()});
}

TEST(ReductionLowering, HalfSumsAccumulateInFloat) {
  // 4096 ones: an f16 accumulator stalls at 2048 (the spacing there is 2); f32 does not.
  std::vector<double> ones(4096, 1.0);
  Lowered l = lower_text(R"(graph(%0: f16[4096], %1: bf16[4, 1024]):
  %2: f16[] = aten.sum.default(%0)
  %3: bf16[4] = aten.sum.dim_IntList(%1, [1])
  %4: bf16[4] = aten.mean.dim(%1, [1])
  %5: bf16[4] = aten.amax.default(%1, [1])
  return (%2, %3, %4, %5)
)");
  std::vector<double> y = random_values(4096, 9, 0, 1);
  auto outs =
      loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float16, {4096}, ones),
                                         HostTensor::from_doubles(DType::BFloat16, {4, 1024}, y)});
  EXPECT_EQ(outs[0].dtype, DType::Float16);
  expect_equal(outs[0], {}, {4096.0});
  std::vector<double> yb = HostTensor::from_doubles(DType::BFloat16, {4, 1024}, y).to_doubles();
  auto g = groups({4, 1024}, yb, {1});
  // bf16 keeps 8 bits: results within 2^-8 relative of the exact sums.
  expect_close(outs[1], {4}, map_groups(g, sum_of), 0, 1.0 / 128);
  expect_close(outs[2], {4},
               map_groups(g, [](const std::vector<double>& v) { return sum_of(v) / 1024; }), 0,
               1.0 / 128);
  expect_equal(outs[3], {4}, map_groups(g, max_of));
}

TEST(ReductionLowering, ZeroDimInput) {
  auto outs = run_text(R"(graph(%0: f32[]):
  %1: f32[] = aten.sum.default(%0)
  %2: i64[] = aten.argmax.default(%0)
  %3: f32[] = aten.amax.default(%0, [0])
  return (%1, %2, %3)
)",
                       {HostTensor::from_doubles(DType::Float32, {}, {2.5})});
  expect_equal(outs[0], {}, {2.5});
  expect_equal(outs[1], {}, {0});
  expect_equal(outs[2], {}, {2.5});
}

TEST(ReductionLowering, ReductionsAreRealizedComputeNodes) {
  Lowered l = lower_text(R"(graph(%0: f32[8, 16]):
  %1: f32[8] = aten.sum.dim_IntList(%0, [1])
  %2: f32[8] = aten.mul.Tensor(%1, %1)
  return (%2)
)");
  int reductions = 0;
  for (const auto& s : l.result.program.steps) {
    if (auto* c = std::get_if<loop::ComputeNode>(&s)) {
      if (c->is_reduction()) {
        ++reductions;
        EXPECT_EQ(c->reduce, loop::ReduceKind::Sum);
        ASSERT_EQ(c->reduction_ranges.size(), 1u);
        EXPECT_EQ(l.ctx->as_const(c->reduction_ranges[0]), 16);
      }
    }
  }
  EXPECT_EQ(reductions, 1);
}

TEST(ReductionLowering, SymbolicSizesAndInlinedProducer) {
  const std::vector<int64_t> sz{5, 4};
  std::vector<double> x = as_f32(random_values(20, 10));
  Lowered l = lower_text(R"(graph(%0: f32[s0, 4]):
  %1: f32[s0, 4] = aten.mul.Tensor(%0, %0)
  %2: f32[4] = aten.sum.dim_IntList(%1, [0])
  %3: f32[s0] = aten.mean.dim(%0, [-1])
  %4: f32[] = aten.var.correction(%0, None, correction=1)
  return (%2, %3, %4)
)");
  // The square is inlined into the reduction body: no step computes it on its own.
  int pointwise_before_first_reduction = 0;
  for (const auto& s : l.result.program.steps) {
    auto* c = std::get_if<loop::ComputeNode>(&s);
    if (c == nullptr) continue;
    if (c->is_reduction()) break;
    ++pointwise_before_first_reduction;
  }
  EXPECT_EQ(pointwise_before_first_reduction, 0);
  auto outs = loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, sz, x)});
  std::vector<double> sq = x;
  for (auto& v : sq) v *= v;
  expect_close(outs[0], {4}, map_groups(groups(sz, sq, {0}), sum_of));
  expect_close(outs[1], {5}, map_groups(groups(sz, x, {1}), [](const std::vector<double>& v) {
                 return sum_of(v) / v.size();
               }));
  expect_close(outs[2], {}, {var_of(x, 1)});
}

TEST(ReductionLowering, DuplicateDimIsACompileError) {
  EXPECT_THROW(lower_text(R"(graph(%0: f32[3, 4]):
  %1: f32[] = aten.sum.dim_IntList(%0, [1, -1])
  return (%1)
)"),
               CompileError);
}

// CUDA reductions with few outputs and a long range are split in two stages
// (src/lower/split_reduction.h); the CPU keeps one. The result is the same reduction.
TEST(ReductionLowering, CudaSplitsFewOutputsOverALongRange) {
  // [N=2, C=8, H=512, W=128] over N, H, W: 8 outputs of 131072 elements each. Chunks wanted:
  // min(8192 / 8, 131072 / 256) = 512 = N whole (2) times a factor 256 of H: partials
  // [2, 256(H chunks), 8(C)] each over [2, 128], then [8] over [2, 256].
  const std::vector<int64_t> sz{2, 8, 512, 128};
  const int64_t n = product(sz);
  std::vector<double> x = as_f32(random_values(n, 41));
  std::vector<double> b = random_values(n, 42, 0, 1.0001, true);  // almost all 0
  // @D: the device.
  const std::string graph = R"(graph(%0: f32[2, 8, 512, 128]@D, %1: b8[2, 8, 512, 128]@D):
  %2: f32[8]@D = aten.sum.dim_IntList(%0, [0, 2, 3])
  %3: f32[1, 8, 1, 1]@D = aten.amax.default(%0, [0, 2, 3], true)
  %4: b8[8]@D = aten.any.dims(%1, [0, 2, 3])
  %5: i64[2, 512, 128]@D = aten.argmax.default(%0, 1)
  return (%2, %3, %4, %5)
)";
  auto reduction_ranges = [](const Lowered& l) {
    std::vector<std::string> out;
    for (const auto& s : l.result.program.steps) {
      auto* c = std::get_if<loop::ComputeNode>(&s);
      if (c == nullptr || !c->is_reduction()) continue;
      std::string r;
      for (const auto& e : c->ranges) r += l.ctx->str(e) + " ";
      r += "over";
      for (const auto& e : c->reduction_ranges) r += " " + l.ctx->str(e);
      out.push_back(r);
    }
    return out;
  };
  auto text = [&](const std::string& dev) {
    std::string t = graph;
    for (size_t p = t.find("@D"); p != std::string::npos; p = t.find("@D", p)) t.replace(p, 2, dev);
    return t;
  };
  Lowered cuda = lower_text(text("@cuda"));
  const std::vector<std::string> want_cuda = {
      "2 256 8 over 2 128", "8 over 2 256",  // sum
      "2 256 8 over 2 128", "8 over 2 256",  // amax (keepdim is a view of [8])
      "2 256 8 over 2 128", "8 over 2 256",  // any
      "2 512 128 over 8"};                   // argmax: not split (and only 8 long)
  EXPECT_EQ(reduction_ranges(cuda), want_cuda);
  Lowered cpu = lower_text(text(""));
  EXPECT_EQ(reduction_ranges(cpu).size(), 4u);
  // Not split: a prime length has no factor for the chunks; 4096 outputs are enough already;
  // 1024 elements per output are too few to pay for a second kernel.
  Lowered prime =
      lower_text(R"(graph(%0: f32[16411]@cuda, %1: f32[4096, 16384]@cuda, %2: f32[1024, 768]@cuda):
  %3: f32[]@cuda = aten.sum.default(%0)
  %4: f32[4096]@cuda = aten.sum.dim_IntList(%1, [1])
  %5: f32[768]@cuda = aten.sum.dim_IntList(%2, [0])
  return (%3, %4, %5)
)");
  EXPECT_EQ(reduction_ranges(prime),
            (std::vector<std::string>{"over 16411", "4096 over 16384", "768 over 1024"}));
  // 1024 channels over [64, 14, 14] (ResNet-50's third stage): 8 chunks of 8 images; 512 over
  // [64, 7, 7] (its last stage): 8 chunks too, of 392 elements; a GPT-2 bias gradient, 768
  // columns over 4096 rows: 8 chunks of 512 rows.
  Lowered bn = lower_text(R"(graph(%0: f32[64, 1024, 14, 14]@cuda):
  %1: f32[1024]@cuda = aten.sum.dim_IntList(%0, [0, 2, 3])
  return (%1)
)");
  EXPECT_EQ(reduction_ranges(bn), (std::vector<std::string>{"8 1024 over 8 14 14", "1024 over 8"}));
  Lowered small = lower_text(R"(graph(%0: f32[64, 512, 7, 7]@cuda, %1: f32[4096, 768]@cuda):
  %2: f32[512]@cuda = aten.sum.dim_IntList(%0, [0, 2, 3])
  %3: f32[768]@cuda = aten.sum.dim_IntList(%1, [0])
  return (%2, %3)
)");
  EXPECT_EQ(reduction_ranges(small), (std::vector<std::string>{"8 512 over 8 7 7", "512 over 8",
                                                               "8 768 over 512", "768 over 8"}));
  // 3072 columns over 4096 rows (a BERT FFN bias gradient) want ceil(8192 / 3072) = 3 chunks:
  // raised to the 4-way minimum, not left whole; 2560 columns likewise.
  Lowered wide = lower_text(R"(graph(%0: f32[4096, 3072]@cuda, %1: f32[2048, 2560]@cuda):
  %2: f32[3072]@cuda = aten.sum.dim_IntList(%0, [0])
  %3: f32[2560]@cuda = aten.sum.dim_IntList(%1, [0])
  return (%2, %3)
)");
  EXPECT_EQ(reduction_ranges(wide), (std::vector<std::string>{"4 3072 over 1024", "3072 over 4",
                                                              "4 2560 over 512", "2560 over 4"}));
  // EfficientNet-B0's 40 channels over [32, 28, 28], 1.0 M elements: split by default (the
  // 32 images times 2 of the 28 rows: min(8192 / 40, 25088 / 256) = 98 chunks wanted); one
  // stage where split_reduction_min_elements is above its size.
  const std::string few = R"(graph(%0: f32[32, 40, 28, 28]@cuda):
  %1: f32[40]@cuda = aten.sum.dim_IntList(%0, [0, 2, 3])
  return (%1)
)";
  EXPECT_EQ(reduction_ranges(lower_text(few)),
            (std::vector<std::string>{"32 2 40 over 14 28", "40 over 32 2"}));
  CompileOptions one_stage;
  one_stage.split_reduction_min_elements = int64_t{1} << 20;
  EXPECT_EQ(reduction_ranges(lower_text(few, one_stage)),
            (std::vector<std::string>{"40 over 32 28 28"}));

  std::vector<HostTensor> ins = {HostTensor::from_doubles(DType::Float32, sz, x),
                                 HostTensor::from_doubles(DType::Bool, sz, b)};
  auto outs = loop::interpret(cuda.result.program, ins);
  expect_close(outs[0], {8}, map_groups(groups(sz, x, {0, 2, 3}), sum_of), 1e-3, 1e-5);
  expect_equal(outs[1], {1, 8, 1, 1}, map_groups(groups(sz, x, {0, 2, 3}), max_of));
  auto any_of = [](const std::vector<double>& v) {
    return std::any_of(v.begin(), v.end(), [](double e) { return e != 0; }) ? 1.0 : 0.0;
  };
  expect_equal(outs[2], {8}, map_groups(groups(sz, b, {0, 2, 3}), any_of));
}

// A CUDA var_mean large enough to be split takes one pass: sum(x - K) and sum((x - K)^2) read
// the input in the same stage-1 loops. A common offset of 1000 with unit noise still gives
// the variance to 1e-5 relative, and equal values a variance of exactly 0.
TEST(ReductionLowering, CudaLargeVarianceTakesOnePass) {
  const std::vector<int64_t> sz{2, 8, 512, 128};
  const int64_t n = product(sz);
  std::vector<double> x = as_f32(random_values(n, 43, 999, 1001));
  for (int64_t i = 0; i < n; ++i)
    if ((i / (512 * 128)) % 8 == 3) x[i] = 7.25;  // channel 3: all equal
  Lowered l = lower_text(R"(graph(%0: f32[2, 8, 512, 128]@cuda):
  %1: f32[1, 8, 1, 1]@cuda, %2: f32[1, 8, 1, 1]@cuda = aten.var_mean.correction(%0, [0, 2, 3], correction=0, keepdim=true)
  return (%1, %2)
)");
  // Two stage-1 loops over [2, 128] (the sum and the sum of squares, each split), neither
  // reading a reduction's result: the emitter runs them as one pass.
  std::set<loop::BufferId> reduced;
  std::vector<const loop::ComputeNode*> stage1;
  for (const auto& s : l.result.program.steps) {
    auto* c = std::get_if<loop::ComputeNode>(&s);
    if (c == nullptr || !c->is_reduction()) continue;
    reduced.insert(c->out);
    if (l.ctx->as_const(c->reduction_ranges.back()) == 128) stage1.push_back(c);
  }
  ASSERT_EQ(stage1.size(), 2u);
  for (const auto* c : stage1)
    for (const auto& in : c->body.instrs)
      EXPECT_FALSE(in.kind == loop::InstrKind::Load && reduced.count(in.buffer));
  auto outs = loop::interpret(l.result.program, {HostTensor::from_doubles(DType::Float32, sz, x)});
  auto g = groups(sz, x, {0, 2, 3});
  std::vector<double> var, mean;
  for (const auto& v : g) {
    double m = sum_of(v) / static_cast<double>(v.size()), ss = 0;
    for (double e : v) ss += (e - m) * (e - m);
    var.push_back(ss / static_cast<double>(v.size()));
    mean.push_back(m);
  }
  expect_close(outs[0], {1, 8, 1, 1}, var, 0.0, 1e-4);
  expect_close(outs[1], {1, 8, 1, 1}, mean, 0.0, 1e-6);
  EXPECT_EQ(outs[0].to_doubles()[3], 0.0);
  EXPECT_EQ(outs[1].to_doubles()[3], 7.25);
}

}  // namespace
}  // namespace coil::lower::testing
