#include "coil/runtime/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace coil::runtime {
namespace {

TEST(Allocator, RoundsToSizeClasses) {
  EXPECT_EQ(Allocator::round_size(0), 64u);
  EXPECT_EQ(Allocator::round_size(1), 64u);
  EXPECT_EQ(Allocator::round_size(65), 128u);
  EXPECT_EQ(Allocator::round_size(1024), 1024u);
  EXPECT_EQ(Allocator::round_size(1025), 1280u);
  EXPECT_EQ(Allocator::round_size(2048), 2048u);
  EXPECT_EQ(Allocator::round_size(2049), 2560u);
  // At most 25% waste above 1 KiB.
  for (size_t n = 1025; n < (size_t{1} << 24); n = n * 3 / 2 + 7) {
    size_t r = Allocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 4 + 64) << n;
    EXPECT_EQ(Allocator::round_size(r), r) << n;
  }
}

TEST(Allocator, BlocksAreAlignedAndReused) {
  Allocator a;
  void* first;
  {
    auto block = a.allocate(1 << 20);
    first = block.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % Allocator::kAlignment, 0u);
    EXPECT_EQ(a.stats().bytes_in_use, size_t{1} << 20);
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().bytes_cached, size_t{1} << 20);
  // A request of a size in the same class gets the same block back, without the system.
  auto again = a.allocate((1 << 20) - 100);
  EXPECT_EQ(again.get(), first);
  auto s = a.stats();
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.system_allocations, 1);
  // A live block is never handed out twice.
  auto other = a.allocate(1 << 20);
  EXPECT_NE(other.get(), again.get());
}

TEST(Allocator, ZeroBytesIsNotNull) {
  Allocator a;
  auto b = a.allocate(0);
  EXPECT_NE(b.get(), nullptr);
}

TEST(Allocator, EmptyCacheAndLimit) {
  Allocator a;
  { auto b = a.allocate(4096); }
  EXPECT_GT(a.stats().bytes_cached, 0u);
  a.empty_cache();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
  a.set_cache_limit(1000);
  { auto b = a.allocate(4096); }
  EXPECT_EQ(a.stats().bytes_cached, 0u);  // above the limit: returned to the system
}

TEST(Allocator, ThreadSafe) {
  Allocator a;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, t] {
      for (int i = 0; i < 2000; ++i) {
        auto b = a.allocate(64 * (1 + (i + t) % 37));
        static_cast<char*>(b.get())[0] = static_cast<char>(i);
      }
    });
  for (auto& th : threads) th.join();
  auto s = a.stats();
  EXPECT_EQ(s.allocations, 8000);
  EXPECT_EQ(s.bytes_in_use, 0u);
}

TEST(Allocator, GlobalIsOneInstance) { EXPECT_EQ(&Allocator::global(), &Allocator::global()); }

}  // namespace
}  // namespace coil::runtime
