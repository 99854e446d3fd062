// Helpers of the reduction / index / linalg / pool lowering tests: parse a text graph, lower it,
// run the reference interpreter, and compare with brute-force results computed in the test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../test_policies.h"
#include "coil/graph/parser.h"
#include "coil/loop/interpreter.h"
#include "coil/lower/lower.h"
#include "coil/support/error.h"

namespace coil::lower::testing {

using loop::HostTensor;

// Deterministic pseudo-random values in [lo, hi); with `integral`, whole numbers (ties!).
inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -2.0,
                                         double hi = 2.0, bool integral = false) {
  std::vector<double> out(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& v : out) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
    v = lo + (hi - lo) * u;
    if (integral) v = std::floor(v);
  }
  return out;
}

inline int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// Row-major linear index.
inline int64_t linear(const std::vector<int64_t>& sizes, const std::vector<int64_t>& idx) {
  int64_t l = 0;
  for (size_t k = 0; k < sizes.size(); ++k) l = l * sizes[k] + idx[k];
  return l;
}

// Row-major multi-index of linear position `l`.
inline std::vector<int64_t> unravel(const std::vector<int64_t>& sizes, int64_t l) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t k = sizes.size(); k-- > 0;) {
    idx[k] = l % sizes[k];
    l /= sizes[k];
  }
  return idx;
}

// Values rounded through float (what an f32 input holds).
inline std::vector<double> as_f32(std::vector<double> v) {
  for (auto& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

struct Lowered {
  std::unique_ptr<sym::Context> ctx = std::make_unique<sym::Context>();
  std::unique_ptr<Graph> graph;
  LowerResult result;
};

inline Lowered lower_text(const std::string& text, const CompileOptions& options) {
  Lowered l;
  l.graph = parse_graph(text, *l.ctx);
  l.result = lower_graph(*l.graph, options, coil::test_support::policy_for(*l.graph));
  return l;
}

inline Lowered lower_text(const std::string& text, bool strict = true) {
  CompileOptions options;
  options.strict = strict;
  return lower_text(text, options);
}

// Options under which every convolution stays an extern (none is computed by coil's loops).
inline CompileOptions extern_convolutions() {
  CompileOptions options;
  options.cpu_native_convolutions = false;
  return options;
}

inline std::vector<HostTensor> run_text(const std::string& text,
                                        const std::vector<HostTensor>& inputs) {
  Lowered l = lower_text(text);
  return loop::interpret(l.result.program, inputs);
}

// got == want elementwise (row-major), within atol + rtol*|want|; NaNs must match.
inline void expect_close(const HostTensor& got, const std::vector<int64_t>& sizes,
                         const std::vector<double>& want, double atol = 1e-5, double rtol = 1e-5) {
  ASSERT_EQ(got.sizes, sizes);
  std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size());
  for (size_t k = 0; k < g.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(g[k])) << "at " << k;
      continue;
    }
    if (std::isinf(want[k])) {
      EXPECT_EQ(g[k], want[k]) << "at " << k;
      continue;
    }
    EXPECT_NEAR(g[k], want[k], atol + rtol * std::fabs(want[k])) << "at linear index " << k;
  }
}

inline void expect_equal(const HostTensor& got, const std::vector<int64_t>& sizes,
                         const std::vector<double>& want) {
  expect_close(got, sizes, want, 0.0, 0.0);
}

}  // namespace coil::lower::testing
