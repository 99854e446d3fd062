// C++ source for the kernels of a scheduled program.
//
// One translation unit per graph; one function per KernelPlan with the C ABI
//
//   extern "C" void <kernel_name>(void* const* bufs, const int64_t* sizes);
//
// bufs[id] is the base data pointer of buffer `id` (for a View buffer, the base pointer of the
// storage it aliases; the view's offset is applied by the kernel). sizes[k] is the run-time
// value of LoopProgram::size_symbols[k]. The source includes only "coil/kernel_prelude.h" from
// runtime_headers/.
#pragma once

#include <string>
#include <vector>

#include "coil/sched/schedule.h"

namespace coil::backend::cpu {

struct CppSource {
  std::string code;
  std::vector<std::string> kernel_symbols;  // per Schedule::kernels
};

CppSource emit_cpp(const loop::LoopProgram& program, const sched::Schedule& schedule,
                   const CompileOptions& options);

}  // namespace coil::backend::cpu
