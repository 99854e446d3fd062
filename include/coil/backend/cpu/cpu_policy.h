// The CPU backend's lowering and scheduling choices (coil/backend/policy/target_policy.h).
// Header-only so that the layer tests of lower and sched, which link neither backend, can
// lower and schedule as the CPU backend does.
#pragma once

#include "coil/backend/policy/target_policy.h"

namespace coil::backend::cpu {

// The defaults of TargetPolicy are the CPU's: externs on host memory, native convolutions of
// every kind (option cpu_native_convolutions), loops that keep the innermost store unit-stride
// for the vectorizer, many-piece cats copied.
inline const TargetPolicy& cpu_policy() {
  static const TargetPolicy p = [] {
    TargetPolicy t;
    t.name = "cpu";
    return t;
  }();
  return p;
}

}  // namespace coil::backend::cpu
