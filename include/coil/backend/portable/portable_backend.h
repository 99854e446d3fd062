// The portable C++ backend (coil/backend/api/backend.h): scalar loops any host C++ compiler
// builds (emit_portable.h), compiled without OpenMP by the host compiler driver, run by the
// runtime's host steps. Selected with option backend_target="portable" for CPU graphs.
// docs/extending/write-a-backend.md builds it step by step.
#pragma once

#include <memory>

#include "coil/backend/api/backend.h"

namespace coil::backend::portable {

std::unique_ptr<Backend> make_portable_backend();

// Its lowering and scheduling choices: a host target's (TargetPolicy's defaults).
const TargetPolicy& portable_policy();

}  // namespace coil::backend::portable
