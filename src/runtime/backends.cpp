// The built-in backends. A new backend is a folder under src/backend/ with a factory, a
// coil_layer() line in CMakeLists.txt and one registration line here
// (docs/extending/write-a-backend.md).
#include "coil/runtime/backends.h"

#include "coil/backend/cpu/cpu_backend.h"
#include "coil/backend/cuda/cuda_backend.h"
#include "coil/backend/portable/portable_backend.h"

namespace coil::runtime {

const backend::BackendRegistry& backends() {
  static const backend::BackendRegistry registry = [] {
    backend::BackendRegistry r;
    r.add(backend::cpu::make_cpu_backend());  // the default for CPU graphs (added first)
    r.add(backend::cuda::make_cuda_backend());
    r.add(backend::portable::make_portable_backend());  // backend_target="portable"
    return r;
  }();
  return registry;
}

}  // namespace coil::runtime
