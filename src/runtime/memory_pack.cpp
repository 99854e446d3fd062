#include "coil/runtime/memory_pack.h"

#include <algorithm>
#include <numeric>

namespace coil::runtime::detail {

Packing pack_intervals(const std::vector<PackItem>& items, int64_t align) {
  auto up = [align](int64_t b) { return (std::max<int64_t>(b, 1) + align - 1) / align * align; };
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
        busy.push_back({p.offsets[j], p.offsets[j] + up(o.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    const int64_t need = up(it.bytes);
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

}  // namespace coil::runtime::detail
