// Graph IR -> loop-level program.
//
// Each graph node is lowered by the lowering registered for its op (one file per op family
// under src/lower/). A lowering turns input TensorValues into output TensorValues; a
// TensorValue is either a realized buffer or an unrealized "loader" (a function from an index
// to a body expression), so pointwise chains and views inline into their consumers: this is
// where fusion starts. The realize-or-inline rule lives in one place (realize.cpp) with named
// thresholds from CompileOptions.
//
// An op without a lowering becomes an ExternNode of kind Fallback (run by the host's eager
// implementation) and is listed in LowerResult::fallback_ops; with options.strict it is a
// CompileError instead.
#pragma once

#include <string>
#include <vector>

#include "coil/backend/policy/target_policy.h"
#include "coil/graph/graph.h"
#include "coil/loop/program.h"
#include "coil/support/options.h"

namespace coil::lower {

struct LowerResult {
  loop::LoopProgram program;
  std::vector<std::string> fallback_ops;  // "aten.foo: reason", one per fallen-back node
};

// `target`: the device choices of the backend that generates the code (its LoweringPolicy;
// coil/backend/policy/target_policy.h). Lowering tests no device itself.
LowerResult lower_graph(const Graph& graph, const CompileOptions& options,
                        const backend::TargetPolicy& target);

// True when an op has a lowering (used by tools and the coverage report).
bool has_lowering(std::string_view op);

}  // namespace coil::lower
