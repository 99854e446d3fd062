// The backends compile_graph chooses from (coil/backend/api/registry.h), built once.
#pragma once

#include "coil/backend/api/registry.h"

namespace coil::runtime {

// The built-in backends, in the order select() prefers them per device: cpu, cuda, portable
// (src/runtime/backends.cpp registers each in one line).
const backend::BackendRegistry& backends();

}  // namespace coil::runtime
