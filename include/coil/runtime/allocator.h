// The runtime's caching host allocator.
//
// Blocks are 64-byte aligned and rounded up to a size class (four classes per power of two, so
// at most 25% waste). A freed block goes back to its class's free list instead of to the
// system, so a compiled graph that allocates the same buffers on every call reuses warm,
// already-faulted pages instead of paying mmap + page faults for each large buffer.
//
// Blocks are handed out as std::shared_ptr<void> owners whose deleter returns the block to the
// cache; an owner may outlive the call that allocated it (a graph output held by PyTorch).
//
// Why a process-wide instance: cached blocks are only useful if every compiled graph shares
// them, and an owner's deleter can run at any time (a tensor freed by Python long after its
// CompiledGraph is gone), so the allocator must outlive every owner. Allocator::global() is a
// function-local static that is deliberately never destroyed (no exit-order hazards); it holds
// no configuration, only the cache, and all of its state is behind a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace coil::runtime {

class Allocator {
 public:
  static constexpr size_t kAlignment = 64;

  struct Stats {
    int64_t allocations = 0;  // allocate() calls
    int64_t cache_hits = 0;   // served from a free list
    int64_t system_allocations = 0;
    size_t bytes_cached = 0;  // held in free lists
    size_t bytes_in_use = 0;  // handed out, not yet returned
  };

  Allocator() = default;
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // THE allocator of the process (see above).
  static Allocator& global();

  // A block of at least `bytes` bytes (64-byte aligned, never null, even for 0 bytes).
  std::shared_ptr<void> allocate(size_t bytes);
  // Raw interface: the block must be returned with release(ptr, bytes) with the same bytes.
  void* acquire(size_t bytes);
  void release(void* ptr, size_t bytes);

  // Returns every cached block to the system.
  void empty_cache();
  Stats stats() const;
  // Cached bytes above this limit are returned to the system when blocks are released.
  void set_cache_limit(size_t bytes);

  // The size class a request is rounded up to.
  static size_t round_size(size_t bytes);

 private:
  static int size_class(size_t bytes);  // index into free_

  mutable std::mutex mu_;
  std::vector<std::vector<void*>> free_;  // per size class
  Stats stats_;
  size_t cache_limit_ = size_t{4} << 30;
};

}  // namespace coil::runtime
