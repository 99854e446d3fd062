#include "coil/graph/op_id.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "coil/support/error.h"

namespace coil {
namespace {

// Names live in fixed-size chunks that never move, reached through an array of chunk pointers
// that is written once per chunk: reading a name back needs no lock while other threads
// intern (a growing vector or deque would move or reindex its storage under the reader).
// 4096 chunks of 1024 names: four million distinct op names, far beyond any process's.
constexpr size_t kChunkBits = 10;
constexpr size_t kChunkSize = size_t{1} << kChunkBits;
constexpr size_t kMaxChunks = 4096;

class InternTable {
 public:
  InternTable() {
#define COIL_SEED_KNOWN_OP(ident, name) seed(name, opid::ident.index());
    COIL_KNOWN_OPS(COIL_SEED_KNOWN_OP)
#undef COIL_SEED_KNOWN_OP
  }

  OpId intern(std::string_view name) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = ids_.find(name); it != ids_.end()) return OpId(it->second);
    }
    std::unique_lock lock(mutex_);
    if (auto it = ids_.find(name); it != ids_.end()) return OpId(it->second);
    return append(name);
  }

  std::optional<OpId> find(std::string_view name) const {
    std::shared_lock lock(mutex_);
    auto it = ids_.find(name);
    if (it == ids_.end()) return std::nullopt;
    return OpId(it->second);
  }

  size_t count() const { return count_.load(std::memory_order_acquire); }

  const std::string& name(uint32_t index) const {
    // An id is handed out only after its name is stored, and whoever holds the id got it
    // through a synchronizing path (the lock in intern, or passing it between threads), so
    // the chunk pointer and the string are visible here.
    COIL_CHECK(index < count()) << "op id " << index << " was never interned";
    const std::string* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
    return chunk[index & (kChunkSize - 1)];
  }

 private:
  void seed(std::string_view name, uint32_t expected) {
    OpId id = append(name);
    COIL_CHECK(id.index() == expected) << "known op " << name << " listed twice";
  }

  // Called with the writer lock held (or from the constructor).
  OpId append(std::string_view name) {
    const size_t index = count_.load(std::memory_order_relaxed);
    const size_t c = index >> kChunkBits;
    COIL_CHECK(c < kMaxChunks) << "too many distinct op names";
    std::string* chunk = const_cast<std::string*>(chunks_[c].load(std::memory_order_relaxed));
    if (chunk == nullptr) {
      chunk = new std::string[kChunkSize];  // never freed: names outlive every reader
      chunks_[c].store(chunk, std::memory_order_release);
    }
    std::string& slot = chunk[index & (kChunkSize - 1)];
    slot = std::string(name);
    ids_.emplace(std::string_view(slot), static_cast<uint32_t>(index));
    count_.store(index + 1, std::memory_order_release);
    return OpId(static_cast<uint32_t>(index));
  }

  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string_view, uint32_t> ids_;  // keys point into the chunks
  std::array<std::atomic<const std::string*>, kMaxChunks> chunks_{};
  std::atomic<size_t> count_{0};
};

InternTable& table() {
  static InternTable* t = new InternTable();  // never destroyed: ids outlive static teardown
  return *t;
}

}  // namespace

OpId OpId::of(std::string_view name) { return table().intern(name); }

std::optional<OpId> OpId::find(std::string_view name) { return table().find(name); }

size_t OpId::count() { return table().count(); }

const std::string& OpId::name() const {
  COIL_CHECK(valid()) << "name of an invalid op id";
  return table().name(index_);
}

}  // namespace coil
