// dce: dead-code elimination. Removes every node none of whose outputs is used by another node
// or is a graph output, unless it must be kept (op_effects.h: no outputs, or side effects).
// A chain of dead nodes goes in one run; a kept node keeps what it reads alive.
#pragma once

#include <memory>

#include "coil/graph/graph.h"
#include "coil/passes/pass.h"

namespace coil::passes {

// Returns how many nodes were removed.
int eliminate_dead_code(Graph& g);

std::unique_ptr<Pass> make_dce_pass();

}  // namespace coil::passes
