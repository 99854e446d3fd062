// Parses the text form of a Graph (the syntax is documented at the top of graph.h).
#pragma once

#include <memory>
#include <string_view>

#include "coil/graph/graph.h"

namespace coil {

// Builds a Graph whose sizes and strides live in `ctx`. Symbols that occur in the sizes of the
// graph inputs and still have the default range get the range [2, kMaxSize] (Dynamo
// specializes sizes 0 and 1). Throws CompileError("<line>:<col>: <message>") on bad text
// (lines and columns count from 1). Only structure is checked here; run verify_graph for the
// rest. `#` starts a comment that runs to the end of the line.
std::unique_ptr<Graph> parse_graph(std::string_view text, sym::Context& ctx);

// One meta ("f32[4, s0]{1, 4}"), for tests and tools.
TensorMeta parse_meta(std::string_view text, sym::Context& ctx);

}  // namespace coil
