// Portable C++ for the kernels of a scheduled program: plain scalar loops, no OpenMP, no SIMD
// pragmas, intrinsics or vector types, so that any C++17 host compiler builds it (the math
// comes from runtime_headers/coil, as for the CPU backend).
//
// The ABI is the CPU backend's (coil/backend/cpu/emit_cpp.h): one function per KernelPlan
//
//   extern "C" void <kernel_name>(void* const* bufs, const int64_t* sizes);
//
// so the runtime's host steps run the kernels unchanged.
#pragma once

#include <string>
#include <vector>

#include "coil/sched/schedule.h"

namespace coil::backend::portable {

struct PortableSource {
  std::string code;
  std::vector<std::string> kernel_symbols;  // per Schedule::kernels
};

PortableSource emit_portable(const loop::LoopProgram& program, const sched::Schedule& schedule,
                             const CompileOptions& options);

}  // namespace coil::backend::portable
