// Aligning iteration spaces before fusion.
//
// A view between a reduction and its pointwise consumer changes how the consumer's loops are
// shaped: LayerNorm computes its statistics over [8, 256] rows, but the normalized value is
// realized as [2048, 256] because a Linear layer views it so. Fusion matches outer ranges by
// prefix, so [8, 256] and [2048, 256] would not fuse. This pass splits a ComputeNode's dims
// (2048 -> 8 x 256) to match the outer ranges of a ComputeNode whose output it reads.
// Splitting never introduces division: the old index is a*256 + b, and the consumer's
// reads of the producer simplify back to plain index variables.
#pragma once

#include <string>

#include "coil/backend/policy/target_policy.h"
#include "coil/loop/program.h"
#include "coil/support/options.h"

namespace coil::sched {

// Where `policy` asks for it (pointwise_in_memory_order), first puts each pointwise node's
// dims in its output's memory order: a node storing [3072, 4096] through a transposed layout
// (strides {1, 3072}) iterates [4096, 3072], as the kernels over that memory do. Where it asks
// for split_to_row_readers (and option split_to_row_readers leaves it on), splits a pointwise
// node to the rows of a reduction that reads the same input: [4096, 768] -> [8, 512, 768]
// next to row sums over [8, 512] x [768], so that both may share one kernel and one read.
//
// Rewrites nodes in place; returns one log line per change.
std::string align_iteration_spaces(loop::LoopProgram& program,
                                   const backend::SchedulePolicy& policy = {},
                                   const CompileOptions& options = {});

}  // namespace coil::sched
