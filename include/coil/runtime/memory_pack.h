// Offsets of storages packed into one device block (a CUDA run's arena of intermediates).
//
// On the GPU each storage used to be a PyTorch caching-allocator block, allocated and freed
// through a Python callback: ResNet-50's training step made 654 such calls per step (about
// 7 us each). The storages that live and die within one run are instead placed in one block
// whose offsets are packed here once per set of sizes (docs/cuda-backend.md, "Device memory").
#pragma once

#include <cstdint>
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

}  // namespace coil::runtime::detail
