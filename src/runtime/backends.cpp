// The built-in backends, and the ones registered later. A new backend in the tree is a folder
// under src/backend/ with a factory, a coil_layer() line in CMakeLists.txt and one registration
// line here (docs/extending/write-a-backend.md); one outside it is a plugin's
// (Registrar::add_backend, coil/plugin/plugin.h).
#include "coil/runtime/backends.h"

#include <atomic>
#include <mutex>
#include <string>

#include "coil/backend/cpu/cpu_backend.h"
#include "coil/backend/cuda/cuda_backend.h"
#include "coil/backend/portable/portable_backend.h"
#include "coil/support/error.h"

namespace coil::runtime {

namespace {

backend::BackendRegistry builtin_backends() {
  backend::BackendRegistry r;
  r.add(backend::cpu::make_cpu_backend());  // the default for CPU graphs (added first)
  r.add(backend::cuda::make_cuda_backend());
  r.add(backend::portable::make_portable_backend());  // backend_target="portable"
  return r;
}

// Plugins add backends after the first compile may have selected one, so the table cannot be a
// function-local constant; a lock on every selection is what the op registry avoids too
// (coil/ops/registry.h). The table is immutable and published through an atomic pointer:
// register_backends copies it, adds, and publishes the copy under a mutex. A replaced table is
// never freed (one per registration, a few per process), so references to it stay valid; the
// backends themselves are shared by every table that holds them.
std::mutex& publish_mutex() {
  static std::mutex m;
  return m;
}
std::atomic<const backend::BackendRegistry*> published{nullptr};

bool valid_name(std::string_view name) {
  return !name.empty() && name.find_first_of(", \t\n") == std::string_view::npos;
}

}  // namespace

const backend::BackendRegistry& backends() {
  if (const backend::BackendRegistry* r = published.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(publish_mutex());
  const backend::BackendRegistry* r = published.load(std::memory_order_relaxed);
  if (r == nullptr) {
    r = new backend::BackendRegistry(builtin_backends());
    published.store(r, std::memory_order_release);
  }
  return *r;
}

void register_backends(std::vector<std::shared_ptr<const backend::Backend>> added) {
  backends();  // builds the built-in table first (it takes the mutex itself)
  std::lock_guard<std::mutex> lock(publish_mutex());
  const backend::BackendRegistry& base = *published.load(std::memory_order_relaxed);
  // Every backend is checked before the new table is built: all or nothing.
  for (size_t i = 0; i < added.size(); ++i) {
    COIL_USER_CHECK(added[i] != nullptr) << "null backend";
    const std::string name(added[i]->name());
    COIL_USER_CHECK(valid_name(name)) << "bad backend name '" << name << "' (no commas or blanks)";
    COIL_USER_CHECK(base.find(name) == nullptr) << "backend '" << name << "' is already registered";
    for (size_t j = 0; j < i; ++j)
      COIL_USER_CHECK(added[j]->name() != name) << "backend '" << name << "' registered twice";
  }
  auto* next = new backend::BackendRegistry(base);
  for (auto& b : added) next->add(std::move(b));
  published.store(next, std::memory_order_release);
}

}  // namespace coil::runtime
