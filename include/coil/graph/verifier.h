// Structural checks of a Graph. Meta checks against the ops' meta functions live one layer up
// (coil/ops/verify.h), because the graph layer does not know the ops.
#pragma once

#include "coil/graph/graph.h"

namespace coil {

// Throws CompileError("graph verification failed: ...") when any of these does not hold:
// value ids are unique; every value a node uses is a graph input or an output of an earlier
// node; every user list holds exactly the nodes that use the value (once per use); each node's
// outputs point back to it with the right output index; graph outputs are defined; every meta
// has as many strides as sizes.
void verify_graph(const Graph& g);

}  // namespace coil
