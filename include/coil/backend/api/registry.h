// BackendRegistry: backend name -> Backend (backend.h). A value, not global state: the
// runtime builds the one it uses once (src/runtime/backends.cpp lists the built-in backends,
// one line each); a test or tool may build its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coil/backend/api/backend.h"

namespace coil::backend {

class BackendRegistry {
 public:
  // Adds a backend; InternalError when its name is taken.
  void add(std::unique_ptr<Backend> backend);
  // The backend of that name, or nullptr.
  const Backend* find(std::string_view name) const;
  // The backend for a graph whose tensors live on `device`: the one named `requested`
  // (option backend_target; a CompileError if unknown or for another device), or, with
  // `requested` empty, the first one added for that device.
  const Backend& select(Device device, std::string_view requested) const;
  // Registered names, in order.
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

}  // namespace coil::backend
