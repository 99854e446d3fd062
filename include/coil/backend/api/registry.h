// BackendRegistry: backend name -> Backend (backend.h). A value, not global state: the
// runtime keeps the one it uses (coil/runtime/backends.h: the built-in backends, one line each
// in src/runtime/backends.cpp, then those plugins register); a test or tool may build its own.
// A copy shares the backends (they are immutable), so adding to a copy of a table leaves the
// original, and the references into it, untouched: the runtime publishes tables that way.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coil/backend/api/backend.h"

namespace coil::backend {

class BackendRegistry {
 public:
  // Adds a backend (a std::unique_ptr converts); InternalError when its name is taken.
  void add(std::shared_ptr<const Backend> backend);
  // The backend of that name, or nullptr.
  const Backend* find(std::string_view name) const;
  // The backend for a graph whose tensors live on `device`: the one named `requested`
  // (option backend_target; a CompileError if unknown or for another device), or, with
  // `requested` empty, the first one added for that device.
  const Backend& select(Device device, std::string_view requested) const;
  // Registered names, in order.
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<const Backend>> backends_;
};

}  // namespace coil::backend
