#include "coil/runtime/device_memory.h"

#include <algorithm>
#include <numeric>

namespace coil::runtime::detail {

namespace {
int64_t round_up(int64_t bytes, int64_t align) {
  return (std::max<int64_t>(bytes, 1) + align - 1) / align * align;
}
}  // namespace

Packing pack_intervals(const std::vector<PackItem>& items, int64_t align) {
  Packing p;
  p.offsets.assign(items.size(), 0);
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of overlapping placed items
  for (size_t i : order) {
    const PackItem& it = items[i];
    busy.clear();
    for (size_t j : placed) {
      const PackItem& o = items[j];
      if (o.first <= it.last && it.first <= o.last)
        busy.push_back({p.offsets[j], p.offsets[j] + round_up(o.bytes, align)});
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    const int64_t need = round_up(it.bytes, align);
    for (const auto& [b, e] : busy) {
      if (b - at >= need) break;
      at = std::max(at, e);
    }
    p.offsets[i] = at;
    p.total = std::max(p.total, at + need);
    placed.push_back(i);
  }
  return p;
}

void DeviceMemoryPlan::build(const std::vector<StorageUse>& uses) {
  place_.assign(uses.size(), Place::Own);
  offsets_.assign(uses.size(), 0);
  std::vector<int> arena;
  std::vector<PackItem> items;
  for (size_t s = 0; s < uses.size(); ++s) {
    const StorageUse& u = uses[s];
    const std::optional<int64_t>& b = u.constant_bytes;
    if (u.deferred) {
      place_[s] = Place::Deferred;
    } else if (u.first < 0) {
      continue;
    } else if (u.output) {
      if (b && *b <= kSmallOutputBytes) {
        place_[s] = Place::Small;
        offsets_[s] = small_bytes_;
        small_bytes_ += round_up(*b, kAlign);
      }
    } else if (u.last >= 0 && b && *b <= kArenaMaxBytes) {
      place_[s] = Place::Arena;
      arena.push_back(static_cast<int>(s));
      items.push_back({*b, u.first, u.last});
    }
  }
  Packing p = pack_intervals(items, kAlign);
  for (size_t i = 0; i < arena.size(); ++i) offsets_[arena[i]] = p.offsets[i];
  arena_bytes_ = p.total;
}

}  // namespace coil::runtime::detail
