#include <algorithm>

#include "coil/lower/lower.h"
#include "coil/lower/lowering.h"
#include "coil/support/error.h"

namespace coil::lower {

void LoweringRegistry::add(std::string op, LoweringFn fn) {
  COIL_CHECK(fn != nullptr) << "null lowering for " << op;
  table_.emplace_back(std::move(op), std::move(fn));
}

void LoweringRegistry::finish() {
  std::stable_sort(table_.begin(), table_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 1; k < table_.size(); ++k) {
    COIL_CHECK(table_[k - 1].first != table_[k].first)
        << "two lowerings registered for " << table_[k].first;
  }
}

const LoweringFn* LoweringRegistry::find(std::string_view op) const {
  auto it = std::lower_bound(table_.begin(), table_.end(), op,
                             [](const auto& e, std::string_view o) { return e.first < o; });
  if (it == table_.end() || it->first != op) return nullptr;
  return &it->second;
}

std::vector<std::string> LoweringRegistry::ops() const {
  std::vector<std::string> out;
  out.reserve(table_.size());
  for (const auto& e : table_) out.push_back(e.first);
  return out;
}

const LoweringRegistry& lowering_registry() {
  static const LoweringRegistry registry = [] {
    LoweringRegistry r;
    register_pointwise_lowerings(r);
    register_view_lowerings(r);
    register_creation_lowerings(r);
    register_reduction_lowerings(r);
    register_index_lowerings(r);
    register_linalg_lowerings(r);
    register_pool_lowerings(r);
    register_attention_lowerings(r);
    r.finish();
    return r;
  }();
  return registry;
}

bool has_lowering(std::string_view op) { return lowering_registry().find(op) != nullptr; }

}  // namespace coil::lower
