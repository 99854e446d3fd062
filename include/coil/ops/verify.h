// Graph verification including metas: the structural checks of coil/graph/verifier.h, then,
// for every node whose op has a meta function, the node's output metas against it.
#pragma once

#include "coil/graph/graph.h"

namespace coil::ops {

// Throws CompileError("graph verification failed: ...") on the first mismatch. Checked first,
// for an op with a schema (coil/ops/schema.h): keyword names, an argument given twice, too
// many positional arguments, a missing argument that has no default. Then the
// number of outputs, dtype, device and sizes (provably equal) of every output; strides and
// storage offset too for View ops (a view's layout is part of its meaning; the layout of a
// fresh result is the producer's choice, so it is not checked for other families).
void verify_graph_meta(const Graph& g);

}  // namespace coil::ops
