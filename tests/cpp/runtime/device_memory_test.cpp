#include "coil/runtime/device_memory.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace coil::runtime::detail {
namespace {

// Items whose step intervals overlap must not share bytes; the block holds every item.
void expect_valid(const std::vector<PackItem>& items, const Packing& p, int64_t align) {
  ASSERT_EQ(p.offsets.size(), items.size());
  auto end = [&](size_t i) { return p.offsets[i] + std::max<int64_t>(items[i].bytes, 1); };
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % align, 0) << i;
    EXPECT_LE(end(i), p.total) << i;
    for (size_t j = i + 1; j < items.size(); ++j) {
      const bool live_together = items[i].first <= items[j].last && items[j].first <= items[i].last;
      const bool share = p.offsets[i] < end(j) && p.offsets[j] < end(i);
      EXPECT_FALSE(live_together && share) << i << " and " << j;
    }
  }
}

TEST(MemoryPack, DisjointLifetimesReuseTheSameBytes) {
  // A chain: each intermediate dies when the next one is made.
  std::vector<PackItem> chain = {{1000, 0, 2}, {1000, 2, 4}, {1000, 4, 6}, {1000, 6, 8}};
  Packing p = pack_intervals(chain, 512);
  expect_valid(chain, p, 512);
  EXPECT_EQ(p.total, 2048);  // two 1024-byte slots alternate
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
}

TEST(MemoryPack, RandomIntervalsNeverOverlapAndStayNearThePeak) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PackItem> items;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 100);
      items.push_back(
          {static_cast<int64_t>(rng() % 100000), first, first + static_cast<int>(rng() % 30)});
    }
    Packing p = pack_intervals(items, 512);
    expect_valid(items, p, 512);
    // Never more than every item side by side; never less than the bytes live at one step.
    int64_t sum = 0, peak = 0;
    for (const auto& it : items) sum += (std::max<int64_t>(it.bytes, 1) + 511) / 512 * 512;
    for (int step = 0; step < 130; ++step) {
      int64_t live = 0;
      for (const auto& it : items)
        if (it.first <= step && step <= it.last) live += it.bytes;
      peak = std::max(peak, live);
    }
    EXPECT_LE(p.total, sum);
    EXPECT_GE(p.total, peak);
  }
}

}  // namespace
}  // namespace coil::runtime::detail

namespace coil::runtime::detail {
namespace {

// Small intermediates go to the arena, small outputs to the shared block; large ones, those
// of symbolic size and those a host op's result is adopted into keep their own.
TEST(DeviceMemoryPlan, PlacesStoragesBySizeAndLifetime) {
  std::vector<StorageUse> uses(7);
  uses[0] = {0, 3, false, false, 4096};          // small intermediate
  uses[1] = {1, 4, false, false, 64 << 20};      // large intermediate
  uses[2] = {2, -1, true, false, 1024};          // small output
  uses[3] = {3, -1, true, false, 64 << 20};      // large output
  uses[4] = {4, 6, false, false, std::nullopt};  // symbolic size
  uses[5] = {-1, -1, true, true, 4096};          // deferred (adopts a host op's result)
  uses[6] = {5, -1, true, false, 2048};          // another small output
  DeviceMemoryPlan plan;
  plan.build(uses);
  EXPECT_EQ(plan.place(0), Place::Arena);
  EXPECT_EQ(plan.place(1), Place::Own);
  EXPECT_EQ(plan.place(2), Place::Small);
  EXPECT_EQ(plan.place(3), Place::Own);
  EXPECT_EQ(plan.place(4), Place::Own);
  EXPECT_EQ(plan.place(5), Place::Deferred);
  EXPECT_EQ(plan.place(6), Place::Small);
  EXPECT_EQ(plan.offset(0), 0);
  EXPECT_EQ(plan.arena_bytes(), 4096);
  EXPECT_EQ(plan.offset(2), 0);
  EXPECT_EQ(plan.offset(6), DeviceMemoryPlan::kAlign * 2);
  EXPECT_EQ(plan.small_bytes(), DeviceMemoryPlan::kAlign * 6);
}

}  // namespace
}  // namespace coil::runtime::detail
