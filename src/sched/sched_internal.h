// Internal helpers shared by the scheduler's translation units (not a public header).
#pragma once

#include <string>
#include <vector>

#include "coil/loop/program.h"
#include "coil/sched/schedule.h"

namespace coil::sched::detail {

// A Load of a buffer by a ComputeNode, as written in the body.
struct Read {
  loop::BufferId buffer = -1;         // the buffer named by the load (may be a View)
  const loop::Instr* load = nullptr;  // nullptr for extern inputs (whole-buffer reads)
};

struct StepDeps {
  std::vector<Read> reads;                 // every load / extern input, in body order
  std::vector<loop::BufferId> read_roots;  // unique storage roots read (views resolved)
  std::vector<loop::BufferId> writes;      // buffers written
};

using loop::storage_root;  // program.h

std::vector<StepDeps> compute_dependencies(const loop::LoopProgram& p);

// The graph input a ComputeNode step writes (an input mutation: src/lower/mutation.cpp), or
// -1 for every other step.
loop::BufferId mutated_input(const loop::LoopProgram& p, int step);

// Per BufferId: the step that writes it, or -1 (inputs, views).
std::vector<int> buffer_producers(const loop::LoopProgram& p, const std::vector<StepDeps>& deps);

// Storage size of a buffer in bytes: dtype size * (offset + 1 + sum (size_d - 1) * stride_d).
sym::Expr buffer_bytes(const loop::LoopProgram& p, const loop::Buffer& b);

// A rough numeric value of a size expression for ranking (symbols take a hint value).
int64_t size_hint(const sym::Context& ctx, sym::Expr e);

// "[8, s0]"
std::string ranges_str(const sym::Context& ctx, const std::vector<sym::Expr>& ranges);

// For a ComputeNode, the buffer dim d_j that holds outer index var j (store_index[d_j] is
// exactly index_vars[j]) for j < n; empty when some var is not stored as a plain dim.
std::vector<int> outer_store_dims(const loop::ComputeNode& node, size_t n);

// Kernels (fusion), their execution order together with extern steps, and the fusion log.
void fuse_program(const loop::LoopProgram& p, const std::vector<StepDeps>& deps,
                  const CompileOptions& options, const backend::SchedulePolicy& policy,
                  Schedule& out);

// Locals of each kernel (fills KernelPlan::local_buffers).
void find_locals(const loop::LoopProgram& p, const std::vector<StepDeps>& deps, Schedule& s);

// Re-lists Schedule::order so that fewer intermediates are alive at once, where that lowers the
// peak (memory_order.cpp); notes the decision in the fusion log.
void order_for_memory(const loop::LoopProgram& p, const std::vector<StepDeps>& deps, Schedule& s);

MemoryPlan plan_memory(const loop::LoopProgram& p, const std::vector<StepDeps>& deps,
                       const Schedule& s, const backend::SchedulePolicy& policy);

}  // namespace coil::sched::detail
