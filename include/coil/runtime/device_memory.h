// Where a CUDA run's storages get their memory (docs/cuda-backend.md, "Device memory").
//
// On the GPU each storage used to be a PyTorch caching-allocator block, allocated and freed
// through a Python callback: ResNet-50's training step made 654 such calls per step (about
// 6 us each). DeviceMemoryPlan places small intermediates in one arena per run, packed by the
// steps during which each is live (pack_intervals), and small outputs in one block per run.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace coil::runtime::detail {

struct PackItem {
  int64_t bytes = 0;
  int first = 0;  // the step that allocates it
  int last = 0;   // the step that frees it (inclusive: its memory is in use until then)
};

struct Packing {
  std::vector<int64_t> offsets;  // per item, multiples of `align`
  int64_t total = 0;             // bytes of the block
};

// First fit, largest items first: an item goes at the lowest aligned offset where it overlaps
// no placed item whose step interval overlaps its own.
Packing pack_intervals(const std::vector<PackItem>& items, int64_t align);

// Large outputs keep their own blocks: a backward graph could then free each saved activation
// at its last use, which one block holding them all would forbid. Small outputs (a BatchNorm's
// statistics, its parameters' gradients) share one block per run, which lives until all of
// them die: a few MB at most. Large intermediates keep their own blocks too: freed, a block can
// hold a later output, which the arena cannot (an arena of every intermediate held GPT-2
// inference's peak at 976 MiB against 790 MiB).
enum class Place : uint8_t {
  Own,       // its own allocator block
  Arena,     // small, freed within the run: a slice of the run's arena
  Small,     // a small output of constant size: a slice of the run's block of small outputs
  Deferred,  // first written by a host op whose result it adopts: no block of its own
};

// How a run uses one storage.
struct StorageUse {
  int first = -1;  // the step allocating it (-1: none, e.g. deferred)
  int last = -1;   // the step freeing it (-1: never freed within the run)
  bool output = false;
  bool deferred = false;
  std::optional<int64_t> constant_bytes;  // its size where it does not depend on symbols
};

class DeviceMemoryPlan {
 public:
  // 512 bytes, as PyTorch's caching allocator: every vector width and library is served.
  static constexpr int64_t kAlign = 512;
  static constexpr int64_t kSmallOutputBytes = 64 << 10;
  static constexpr int64_t kArenaMaxBytes = 1 << 20;

  // Both blocks hold only storages of constant size, so their layout is fixed here.
  void build(const std::vector<StorageUse>& uses);
  bool empty() const { return arena_bytes_ == 0 && small_bytes_ == 0; }
  Place place(int s) const { return place_.empty() ? Place::Own : place_[s]; }
  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t small_bytes() const { return small_bytes_; }
  // The storage's offset in its block (Arena and Small storages only).
  int64_t offset(int s) const { return offsets_[s]; }

 private:
  std::vector<Place> place_;
  std::vector<int64_t> offsets_;
  int64_t arena_bytes_ = 0, small_bytes_ = 0;
};

}  // namespace coil::runtime::detail
