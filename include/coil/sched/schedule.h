// Scheduling: group a LoopProgram's ComputeNodes into kernels (fusion), order kernels and
// extern calls, and plan memory.
//
// A kernel is one generated function: an outer loop nest over `outer_ranges` (parallelized),
// and inside it the member ComputeNodes one after another, each with its own inner loops (its
// remaining pointwise dims, or its reduction range). So softmax (max-reduce, sum-reduce,
// pointwise over [rows, cols]) becomes one kernel over [rows] with three inner loops, and a
// buffer produced and consumed only inside one kernel for the same outer point is not
// materialized (it becomes a local).
#pragma once

#include <string>
#include <vector>

#include "coil/backend/policy/target_policy.h"
#include "coil/loop/program.h"
#include "coil/support/options.h"

namespace coil::sched {

struct KernelPlan {
  std::string name;                           // "kernel0", stable
  std::vector<int> steps;                     // indices into LoopProgram::steps (ComputeNodes)
  std::vector<sym::Expr> outer_ranges;        // the shared outer iteration space
  std::vector<loop::BufferId> local_buffers;  // not materialized: live inside the kernel only
};

struct ScheduledStep {
  enum class Kind { Kernel, Extern } kind;
  int index;  // Kernel: into Schedule::kernels; Extern: into LoopProgram::steps
};

// Storage for materialized buffers. Inputs and Views have no storage of their own; a
// kernel-local buffer has none at all.
struct MemoryPlan {
  std::vector<int> buffer_storage;             // per BufferId: storage id or -1
  std::vector<sym::Expr> storage_bytes;        // per storage id
  std::vector<std::vector<int>> alloc_before;  // per ScheduledStep: storages to allocate
  std::vector<std::vector<int>> free_after;    // per ScheduledStep: storages to release
  // Per program input: the last ScheduledStep that reads it (-1: none does), or kInputOutlives
  // where an output aliases it. A run that owns its inputs (a backward graph's saved
  // activations) drops each one there, so its memory can hold later results.
  static constexpr int kInputOutlives = -2;
  std::vector<int> input_last_read;
};

struct Schedule {
  std::vector<KernelPlan> kernels;
  std::vector<ScheduledStep> order;
  MemoryPlan memory;
  std::string fusion_log;  // every fusion taken or refused, with the reason
};

// `target`: the device choices of the backend that generates the code (its SchedulePolicy:
// what may fuse, how memory is planned; coil/backend/policy/target_policy.h).
Schedule schedule_program(const loop::LoopProgram& program, const CompileOptions& options,
                          const backend::TargetPolicy& target);

// Text of the scheduled program (kernels with their member nodes, extern calls, allocations).
std::string print_schedule(const loop::LoopProgram& program, const Schedule& schedule);

}  // namespace coil::sched
