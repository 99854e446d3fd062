#include <algorithm>
#include <atomic>
#include <mutex>

#include "coil/lower/lower.h"
#include "coil/lower/lowering.h"
#include "coil/ops/registry.h"
#include "coil/support/error.h"

namespace coil::lower {

void LoweringRegistry::add(std::string_view op, LoweringFn fn) {
  COIL_CHECK(fn != nullptr) << "null lowering for " << op;
  const OpId id = OpId::of(op);
  if (id.index() >= by_id_.size()) by_id_.resize(OpId::count());
  COIL_CHECK(!by_id_[id.index()]) << "two lowerings registered for " << op;
  by_id_[id.index()] = std::move(fn);
}

const LoweringFn* LoweringRegistry::find(std::string_view op) const {
  std::optional<OpId> id = OpId::find(op);
  return id ? find(*id) : nullptr;
}

std::vector<OpId> LoweringRegistry::ids() const {
  std::vector<OpId> out;
  for (size_t i = 0; i < by_id_.size(); ++i) {
    if (by_id_[i]) out.push_back(OpId(static_cast<uint32_t>(i)));
  }
  return out;
}

std::vector<std::string> LoweringRegistry::ops() const {
  std::vector<std::string> out;
  for (OpId id : ids()) out.push_back(id.name());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

LoweringRegistry builtin_lowerings() {
  LoweringRegistry r;
  register_pointwise_lowerings(r);
  register_view_lowerings(r);
  register_creation_lowerings(r);
  register_reduction_lowerings(r);
  register_index_lowerings(r);
  register_linalg_lowerings(r);
  register_pool_lowerings(r);
  register_attention_lowerings(r);
  return r;
}

// Published like the op registry (src/ops/registry.cpp): plugins add lowerings after the first
// compile, readers take no lock, and a replaced table is never freed (the LoweringFn pointers
// and references handed out stay valid).
std::mutex& publish_mutex() {
  static std::mutex m;
  return m;
}
std::atomic<const LoweringRegistry*> published{nullptr};

}  // namespace

const LoweringRegistry& lowering_registry() {
  if (const LoweringRegistry* r = published.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(publish_mutex());
  const LoweringRegistry* r = published.load(std::memory_order_relaxed);
  if (r == nullptr) {
    auto* built = new LoweringRegistry(builtin_lowerings());
    published.store(built, std::memory_order_release);
    r = built;
  }
  return *r;
}

void register_lowerings(std::vector<std::pair<std::string, LoweringFn>> fns) {
  lowering_registry();  // builds the built-in table first (it takes the mutex itself)
  std::lock_guard<std::mutex> lock(publish_mutex());
  const LoweringRegistry& base = *published.load(std::memory_order_relaxed);
  for (size_t i = 0; i < fns.size(); ++i) {
    COIL_USER_CHECK(fns[i].second != nullptr) << "null lowering for " << fns[i].first;
    COIL_USER_CHECK(base.find(fns[i].first) == nullptr)
        << "op " << fns[i].first << " already has a lowering";
    for (size_t j = 0; j < i; ++j)
      COIL_USER_CHECK(fns[j].first != fns[i].first)
          << "two lowerings registered for " << fns[i].first;
  }
  auto* next = new LoweringRegistry(base);
  for (auto& [op, fn] : fns) next->add(op, std::move(fn));
  published.store(next, std::memory_order_release);
}

bool has_lowering(std::string_view op) { return lowering_registry().find(op) != nullptr; }

OpEntry op_entry(OpId id) { return OpEntry{id, ops::find_op(id), lowering_registry().find(id)}; }

}  // namespace coil::lower
