// The CPU backend (coil/backend/api/backend.h): C++ with OpenMP loops and `#pragma omp simd`
// inner loops (emit_cpp.h), compiled by the host compiler (host_compiler.h), run by the
// runtime's host steps; lowering and scheduling as cpu_policy.h says.
#pragma once

#include <memory>

#include "coil/backend/api/backend.h"

namespace coil::backend::cpu {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace coil::backend::cpu
