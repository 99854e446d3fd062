// balance_units: entry points into NVRTC translation units by source length, checked against the
// best assignment found by brute force (longest-first greedy is within 4/3 of it).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coil/backend/cuda/nvrtc.h"

namespace coil::backend::cuda {
namespace {

size_t max_load(const std::vector<size_t>& kernels, const std::vector<int>& unit_of, size_t units) {
  std::vector<size_t> load(units, 0);
  for (size_t i = 0; i < kernels.size(); ++i) load.at(unit_of[i]) += kernels[i];
  return *std::max_element(load.begin(), load.end());
}

size_t best_max_load(const std::vector<size_t>& kernels, size_t units) {
  std::vector<int> unit_of(kernels.size(), 0);
  size_t best = SIZE_MAX;
  std::function<void(size_t)> place = [&](size_t i) {
    if (i == kernels.size()) {
      best = std::min(best, max_load(kernels, unit_of, units));
      return;
    }
    for (size_t u = 0; u < units; ++u) {
      unit_of[i] = static_cast<int>(u);
      place(i + 1);
    }
  };
  place(0);
  return best;
}

TEST(NvrtcUnits, BalancedWithinFourThirdsOfTheBestAssignment) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 3 + rng() % 6, units = 2 + rng() % 2;
    std::vector<size_t> kernels;
    for (size_t i = 0; i < n; ++i) kernels.push_back(1 + rng() % 500);
    const std::vector<int> unit_of = balance_units(kernels, units);
    ASSERT_EQ(unit_of.size(), n);
    std::vector<int> count(units, 0);
    for (int u : unit_of) ++count.at(u);
    for (size_t u = 0; u < units; ++u) EXPECT_GT(count[u], 0) << "unit " << u << " is empty";
    const size_t got = max_load(kernels, unit_of, units);
    const size_t best = best_max_load(kernels, units);
    EXPECT_LE(3 * got, 4 * best) << "trial " << trial << ": " << got << " vs " << best;
  }
}

TEST(NvrtcUnits, LongKernelsDoNotShareAUnit) {
  // Contiguous runs of equal count would put both long kernels in unit 0.
  std::vector<size_t> kernels = {1000, 900, 10, 10};
  const std::vector<int> unit_of = balance_units(kernels, 2);
  EXPECT_NE(unit_of[0], unit_of[1]);
  EXPECT_EQ(max_load(kernels, unit_of, 2), 1000u);  // the short ones join the 900
}

}  // namespace
}  // namespace coil::backend::cuda
