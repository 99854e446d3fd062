// Tests: the built-in backends' TargetPolicy for a graph or loop program, by its device, as
// compile_graph selects the backend (src/runtime/backends.cpp). The layer tests of lower and
// sched link no backend; the policies are header-only data.
#pragma once

#include <algorithm>

#include "coil/backend/cpu/cpu_policy.h"
#include "coil/backend/cuda/cuda_policy.h"
#include "coil/graph/graph.h"
#include "coil/loop/program.h"

namespace coil::test_support {

inline const backend::TargetPolicy& policy_for(Device d) {
  return d == Device::CUDA ? backend::cuda::cuda_policy() : backend::cpu::cpu_policy();
}

// CUDA when some value of the graph is on the GPU.
inline const backend::TargetPolicy& policy_for(const Graph& g) {
  for (const Value* v : g.inputs())
    if (v->meta().device == Device::CUDA) return policy_for(Device::CUDA);
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs())
      if (v->meta().device == Device::CUDA) return policy_for(Device::CUDA);
  return policy_for(Device::CPU);
}

// CUDA when some buffer of the program is on the GPU.
inline const backend::TargetPolicy& policy_for(const loop::LoopProgram& p) {
  const bool cuda = std::any_of(p.buffers.begin(), p.buffers.end(),
                                [](const loop::Buffer& b) { return b.device == Device::CUDA; });
  return policy_for(cuda ? Device::CUDA : Device::CPU);
}

}  // namespace coil::test_support
