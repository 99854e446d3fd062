// The executable form of a compiled graph: a flat list of steps prepared once from the
// Schedule (kernel/extern order) and its MemoryPlan, run by a small interpreter.
//
//   Alloc(storage, bytes)   take a block from the caching allocator (bytes: a size expression)
//   Kernel(fn)              call a generated kernel: fn(bufs, sizes)
//   Extern(call)            a library kernel (extern_kernels.h) or the host fallback
//   Free(storage)           drop the run's reference to a storage (outputs keep theirs)
//   Release(input)          after the input's last reader: drop it, in runs that own their
//                           inputs (run_consuming); a no-op in run()
//
// Per call, run() checks the inputs against the compile-time metas (count, dtype, rank, sizes
// and strides: constants must match, size symbols are bound from the first input dim that
// names them and must agree and lie in their range), evaluates every symbolic size once into
// an int64 array (the kernels' `sizes`; LoopProgram::size_symbols come first, in order), fills
// bufs[] (per BufferId: the base pointer of its storage; inputs arrive with their storage
// offset applied, so Input buffers have offset 0), runs the steps and returns the outputs as
// views (base + offset, evaluated sizes and strides) that own their storage.
//
// run() is const and thread-safe: all per-call state is local to the call.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "coil/backend/cuda/compiled_kernels.h"
#include "coil/loop/program.h"
#include "coil/runtime/compiled_graph.h"
#include "coil/sched/schedule.h"

namespace coil::runtime {

// The C ABI of a generated kernel (backend/cpu/emit_cpp.h).
using KernelFn = void (*)(void* const* bufs, const int64_t* sizes);

// The compiled kernels of a CUDA graph (the CUDA backend's build(): KernelModule's
// device_kernels).
using CudaKernels = backend::cuda::CompiledKernels;

class Program {
 public:
  // kernels[k] is the loaded function of schedule.kernels[k]. `keep_alive` holds what the
  // kernels live in (the loaded library). Throws CompileError when an extern cannot run
  // (no library path and no fallback function).
  Program(const loop::LoopProgram& program, const sched::Schedule& schedule,
          std::vector<KernelFn> kernels, std::shared_ptr<void> keep_alive,
          const CompileOptions& options, FallbackFn fallback);
  // A CUDA program: kernel steps launch `cuda`'s kernels, storages are device memory, extern
  // steps other than the host fallback are unavailable (the host runs them).
  Program(const loop::LoopProgram& program, const sched::Schedule& schedule, CudaKernels cuda,
          const CompileOptions& options, FallbackFn fallback);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  std::vector<RuntimeTensor> run(const std::vector<RuntimeTensor>& inputs,
                                 const RunContext& ctx = {}) const;
  // run() owning its inputs (CompiledGraph::run_consuming): `checked` once they passed the
  // checks, then each is dropped at its Release step.
  std::vector<RuntimeTensor> run_consuming(std::vector<RuntimeTensor> inputs, const RunContext& ctx,
                                           const std::function<void()>& checked) const;
  Device device() const;

  // The input whose storage output `k` views (graph outputs that alias an input), or -1.
  int output_aliases_input(size_t k) const;
  size_t num_inputs() const;
  size_t num_outputs() const;
  // The steps, one per line ("alloc s0 (4096 bytes)", "kernel kernel0", "extern mm (library)").
  std::string describe() const;

  // Per-step timing of later runs (off by default: it costs two clock reads per step).
  void set_profiling(bool on) const;
  struct StepTime {
    std::string step;  // as in describe()
    double seconds;    // summed over the profiled runs
  };
  // Kernel and extern steps with their time, and how many runs were profiled.
  std::vector<StepTime> profile(int64_t* runs) const;

  struct Impl;

 private:
  void init(const loop::LoopProgram& program, const sched::Schedule& schedule,
            const CompileOptions& options);
  // Both runs: `owned` is `in` itself where the run owns its inputs (Release drops them).
  std::vector<RuntimeTensor> run_steps(const std::vector<RuntimeTensor>& in,
                                       std::vector<RuntimeTensor>* owned, const RunContext& ctx,
                                       const std::function<void()>* checked) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace coil::runtime
