// Graph edits the passes share (internal to src/passes).
#pragma once

#include <unordered_set>

#include "coil/graph/graph.h"

namespace coil::passes::detail {

// Removes exactly the nodes in `doomed`. Every use of a doomed node's outputs must be by
// another doomed node, none may be a graph output, and each must have outputs (InternalError
// otherwise). Graph offers only remove_dead_nodes(), which removes every node with unused
// outputs; the other nodes are kept by listing one output of each among the graph outputs
// for the call (the outputs are restored after it).
void remove_nodes(Graph& g, const std::unordered_set<const Node*>& doomed);

}  // namespace coil::passes::detail
