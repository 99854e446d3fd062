// BackendRegistry (coil/backend/api/registry.h).
#include "coil/backend/api/registry.h"

#include "coil/support/error.h"

namespace coil::backend {

void BackendRegistry::add(std::shared_ptr<const Backend> backend) {
  COIL_CHECK(backend != nullptr) << "null backend";
  COIL_CHECK(find(backend->name()) == nullptr)
      << "backend '" << backend->name() << "' registered twice";
  backends_.push_back(std::move(backend));
}

const Backend* BackendRegistry::find(std::string_view name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b.get();
  return nullptr;
}

namespace {
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

const Backend& BackendRegistry::select(Device device, std::string_view requested) const {
  if (!requested.empty()) {
    const Backend* b = find(requested);
    COIL_USER_CHECK(b != nullptr) << "unknown backend_target '" << requested
                                  << "' (registered: " << joined(names()) << ")";
    COIL_USER_CHECK(b->device() == device)
        << "backend_target '" << requested << "' runs " << device_name(b->device())
        << " graphs; this graph's tensors are on " << device_name(device);
    return *b;
  }
  for (const auto& b : backends_)
    if (b->device() == device) return *b;
  COIL_UNSUPPORTED() << "no backend registered for " << device_name(device) << " graphs";
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.emplace_back(b->name());
  return out;
}

}  // namespace coil::backend
