#include "coil/runtime/allocator.h"

#include <bit>
#include <cstdlib>
#include <new>

namespace coil::runtime {

namespace {

// Sizes up to kSmall are rounded to multiples of 64; above, four classes per power of two.
constexpr size_t kSmall = 1024;

struct BlockDeleter {
  Allocator* alloc;
  size_t bytes;
  void operator()(void* p) const { alloc->release(p, bytes); }
};

}  // namespace

Allocator& Allocator::global() {
  // Never destroyed: owners may be released during interpreter shutdown, after static
  // destructors would have run.
  static Allocator* instance = new Allocator();
  return *instance;
}

Allocator::~Allocator() { empty_cache(); }

size_t Allocator::round_size(size_t bytes) {
  if (bytes <= kSmall)
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) & ~(kAlignment - 1);
  // Four classes per power of two: step = 2^(floor(log2(bytes)) - 2).
  int log2 = std::bit_width(bytes - 1) - 1;  // bytes-1 in [2^log2, 2^(log2+1))
  size_t step = size_t{1} << (log2 - 2);
  return (bytes + step - 1) & ~(step - 1);
}

int Allocator::size_class(size_t rounded) {
  if (rounded <= kSmall) return static_cast<int>(rounded / kAlignment) - 1;  // 0..15
  int log2 = std::bit_width(rounded - 1) - 1;
  size_t step = size_t{1} << (log2 - 2);
  size_t base = size_t{1} << log2;
  int sub = static_cast<int>((rounded - base + step - 1) / step) - 1;  // 0..3
  // log2 >= 10 here: classes 16.. for (log2=10, sub 0..3), ...
  return 16 + (log2 - 10) * 4 + sub;
}

void* Allocator::acquire(size_t bytes) {
  size_t rounded = round_size(bytes);
  int cls = size_class(rounded);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    stats_.bytes_in_use += rounded;
    if (cls < static_cast<int>(free_.size()) && !free_[cls].empty()) {
      void* p = free_[cls].back();
      free_[cls].pop_back();
      ++stats_.cache_hits;
      stats_.bytes_cached -= rounded;
      return p;
    }
    ++stats_.system_allocations;
  }
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= rounded;
    throw std::bad_alloc();
  }
  return p;
}

void Allocator::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t rounded = round_size(bytes);
  int cls = size_class(rounded);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= rounded;
    if (stats_.bytes_cached + rounded <= cache_limit_) {
      if (cls >= static_cast<int>(free_.size())) free_.resize(cls + 1);
      free_[cls].push_back(ptr);
      stats_.bytes_cached += rounded;
      return;
    }
  }
  std::free(ptr);
}

std::shared_ptr<void> Allocator::allocate(size_t bytes) {
  void* p = acquire(bytes);
  try {
    return std::shared_ptr<void>(p, BlockDeleter{this, bytes});
  } catch (...) {
    release(p, bytes);
    throw;
  }
}

void Allocator::empty_cache() {
  std::vector<std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    stats_.bytes_cached = 0;
  }
  for (auto& list : blocks)
    for (void* p : list) std::free(p);
}

Allocator::Stats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Allocator::set_cache_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_limit_ = bytes;
}

}  // namespace coil::runtime
