// cse: common-subexpression elimination on the graph IR. AOTAutograd runs CSE on the joint
// graph, but the partitioner's recomputation can put identical nodes back into a backward graph
// (two BatchNorms reading one gradient, a ResNet block's main branch and its downsample, each
// sum it over N, H and W), and Dynamo's graphs repeat what the program computed twice. It is
// the only CSE coil runs (it replaced python/coil/cse.py, an FX pass before export); the
// Python option cse=False leaves it out of the pipeline (python/coil/options.py).
//
// Two nodes are identical when they apply the same op overload to the same arguments (the same
// values, after earlier merges; equal constants of the same type: 1 and 1.0 and true differ;
// keyword arguments in any order) and give outputs of the same metas. The later of two
// identical nodes is removed and its uses read the earlier one; so chains of identical nodes
// merge in one pass. Never merged: random ops (two draws stay two), ops with side effects or
// without outputs (op_effects.h). A removed node's output that is a graph output becomes an
// aten.clone.default of the earlier node's output (appended at the end of the graph), so no
// two graph outputs share storage; where the clone would not have the output's meta (strides
// that are not row-major, a storage offset) both nodes stay, and so does a clone that is itself
// a graph output (merged, it would be a clone again). A forward graph's saved values (outputs
// only its backward reads, option shared_outputs_from) may share: there the output is the
// earlier value itself. T5's 12 cross-attention layers each compute the same attention bias
// from one mask, and each saves it for its backward: one [8, 12, 512, 512] tensor, not 12.
#pragma once

#include <memory>

#include "coil/graph/graph.h"
#include "coil/passes/pass.h"

namespace coil::passes {

// Returns how many nodes were merged into earlier identical ones. Graph outputs at positions
// from `shared_outputs_from` on (-1: none; option shared_outputs_from) may share memory: a
// removed node's output there becomes the earlier node's value itself, not a clone, unless
// that value is also an output before those positions.
int eliminate_common_subexpressions(Graph& g, int64_t shared_outputs_from = -1);

std::unique_ptr<Pass> make_cse_pass();

}  // namespace coil::passes
