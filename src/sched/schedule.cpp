// schedule_program: dependencies -> fusion -> locals -> memory-aware order -> memory plan.
#include "coil/sched/schedule.h"

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched {

Schedule schedule_program(const loop::LoopProgram& program, const CompileOptions& options,
                          const backend::TargetPolicy& target) {
  COIL_CHECK(program.ctx != nullptr) << "LoopProgram without a sym::Context";
  std::vector<detail::StepDeps> deps = detail::compute_dependencies(program);
  Schedule s;
  detail::fuse_program(program, deps, options, target.schedule, s);
  detail::find_locals(program, deps, s);
  if (options.memory_order) detail::order_for_memory(program, deps, s);
  s.memory = detail::plan_memory(program, deps, s, target.schedule);
  return s;
}

}  // namespace coil::sched
