// Backend: everything coil decides by device, behind one interface.
//
// A backend owns
//   - the device choices of lowering and scheduling (policy(): a TargetPolicy, plain data that
//     src/lower and src/sched read; coil/backend/policy/target_policy.h),
//   - code generation (generate(): the source of every kernel of a scheduled program),
//   - compilation (build(): that source compiled and loaded, the entry points resolved),
//   - which of the runtime's step runners runs its kernels (KernelModule::steps).
// compile_graph (src/runtime/compile.cpp) picks the backend from the registry
// (registry.h: by option backend_target, else the first one registered for the graph's
// device) and asks it, instead of testing the device. docs/extending/write-a-backend.md adds
// one step by step; the CPU (src/backend/cpu), CUDA (src/backend/cuda) and portable C++
// (src/backend/portable) backends implement it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coil/backend/policy/target_policy.h"
#include "coil/loop/program.h"
#include "coil/sched/schedule.h"
#include "coil/support/options.h"

namespace coil::backend {

// The runtime's step runners (src/runtime/program.cpp): Host calls C-ABI kernel functions on
// host memory, the extern kernels on host memory or ATen; Cuda launches CUDA kernels on device
// memory, products on cuBLASLt, convolutions on cuDNN, the rest through ATen on the device.
enum class RuntimeSteps : uint8_t { Host, Cuda };

// What generate() produced: the text shown to the user (debug dump 05_kernels.*, coil-opt
// --emit) and whatever the backend's build() needs beyond it.
struct GeneratedCode {
  std::string text;
  std::shared_ptr<const void> detail;  // backend-specific (CUDA: its structured CudaSource)
};

// A compiled, loaded kernel module.
struct KernelModule {
  RuntimeSteps steps = RuntimeSteps::Host;
  // Host steps: per Schedule kernel, its entry point with emit_cpp.h's C ABI
  //   void kernel(void* const* bufs, const int64_t* sizes);
  // and what keeps them loaded (the shared library).
  std::vector<void*> host_entries;
  std::shared_ptr<void> library;
  // Cuda steps: the backend's compiled kernels (backend::cuda::CompiledKernels).
  std::shared_ptr<void> device_kernels;
  // For the artifacts and the debug dump.
  std::string compiler_command;
  std::string compiler_log;
  bool cache_hit = false;
  std::vector<std::string> warnings;
  std::vector<std::pair<std::string, double>> timings;  // stage -> seconds ("host_compile", ...)
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The registry name ("cpu", "cuda", "portable"), what option backend_target selects.
  virtual std::string_view name() const = 0;
  // Where the tensors of the graphs it runs live.
  virtual Device device() const = 0;
  virtual const TargetPolicy& policy() const = 0;
  // The kernels' source. Called only for a schedule with kernels.
  virtual GeneratedCode generate(const loop::LoopProgram& program, const sched::Schedule& schedule,
                                 const CompileOptions& options) const = 0;
  // Compiles and loads `code` (nullptr: the schedule has no kernels; a device backend still
  // returns its module, which the runtime needs to know the device). Throws CompileError.
  virtual KernelModule build(const GeneratedCode* code, const loop::LoopProgram& program,
                             const sched::Schedule& schedule,
                             const CompileOptions& options) const = 0;
};

}  // namespace coil::backend
