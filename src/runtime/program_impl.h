// Internal to src/runtime: the state of a Program (Program::Impl) and the structs it is made
// of (Root, ViewSpec, Binding, Check, RangeCheck, ExternCall, StepOp, RunMemory), shared by
// program.cpp (preparing and running the steps) and program_extern.cpp (running extern calls:
// cuBLASLt, cuDNN, the host fallback or the library kernels).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coil/runtime/device_memory.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/runtime/program.h"
#include "coil/support/dims_text.h"
#include "cuda_steps.h"
#include "size_expr.h"

namespace coil::runtime {

namespace detail {

// Where a buffer's base pointer comes from.
struct Root {
  enum Kind : uint8_t { Input, Storage, Rng, None } kind = None;
  int index = -1;              // input position or storage id
  loop::BufferId buffer = -1;  // the root (non-View) buffer
};

// A strided window to materialize as a RuntimeTensor during a call.
struct ViewSpec {
  loop::BufferId buffer = -1;
  Root root;
  DType dtype = DType::Float32;
  SizeExpr offset;
  std::vector<SizeExpr> sizes, strides;
};

struct Binding {
  int input, dim;
  bool stride;
  int slot;
};

struct Check {
  int input, dim;
  bool stride;
  SizeExpr expected;
  std::string text;
};

struct RangeCheck {
  int slot;
  sym::Range range;
  std::string name;
  int64_t multiple = 1;  // the value is a multiple of this (sym::Context::set_multiple)
};

// Measured: the CPU runs whichever of the two was faster for these input sizes, timed on the
// step's first run (extern_provider "measured", which mode="max-autotune" sets).
enum class Provider : uint8_t { Library, Host, Measured };

struct ExternCall {
  loop::ExternKind kind;
  Provider provider;
  std::vector<ViewSpec> inputs, outputs;
  std::vector<double> scalars;
  std::vector<int64_t> ints;
  kernels::ConvParams conv;
  int graph_node = -1;
  std::string op;
  std::vector<bool> adoptable;  // per output: its storage holds only it (and its views)
  bool host_ok = false;         // the host can run it (library paths may defer to it)
  kernels::GemmPolicy gemm = kernels::GemmPolicy::Auto;  // CPU products (options.cpu_gemm)
};

struct StepOp {
  enum Kind : uint8_t { Alloc, Free, Kernel, Extern, Release } kind;
  int index;  // storage id, kernel index, extern index, or input position
};

// The blocks of one run.
struct RunMemory {
  std::shared_ptr<void> arena, small;
  char* arena_base = nullptr;
  char* small_base = nullptr;
  int64_t arena_bytes = 0;
};

}  // namespace detail

struct Program::Impl {
  // Inputs.
  struct InputSpec {
    DType dtype;
    int rank;
  };
  std::vector<InputSpec> inputs;
  std::vector<detail::Binding> bindings;
  std::vector<detail::RangeCheck> ranges;
  std::vector<detail::Check> checks;
  int num_slots = 0;
  std::vector<detail::SizeCode> code;

  // Buffers and storages.
  int num_buffers = 0;
  std::vector<std::pair<loop::BufferId, int>> input_buffers;  // (buffer, input position)
  std::vector<std::vector<loop::BufferId>> storage_buffers;   // per storage
  std::vector<detail::SizeExpr> storage_bytes;
  loop::BufferId rng_state = -1;

  // Steps.
  std::vector<detail::StepOp> steps;
  std::vector<KernelFn> kernels;
  std::vector<std::string> kernel_names;
  std::vector<detail::ExternCall> externs;
  std::vector<detail::ViewSpec> outputs;

  std::shared_ptr<void> keep_alive;
  FallbackFn fallback;
  // CUDA programs: the kernels and device operations (null on the CPU).
  Device device = Device::CPU;
  std::optional<CudaKernels> pending_cuda;  // consumed by init()
  std::unique_ptr<detail::CudaSteps> cuda;
  int num_size_symbols = 0;
  bool allow_tf32 = false;      // CompileOptions::cuda_allow_tf32, for float32 cuBLASLt products
  bool conv_allow_tf32 = true;  // CompileOptions::cuda_conv_allow_tf32, for cuDNN
  bool conv_measure = false;    // CompileOptions::cuda_conv_measure, for cuDNN
  // Profiling (Program::set_profiling): nanoseconds per step, summed over profiled runs.
  mutable std::atomic<bool> profiling{false};
  mutable std::unique_ptr<std::atomic<int64_t>[]> step_ns;
  mutable std::atomic<int64_t> profiled_runs{0};
  uint64_t seed = 0;
  mutable std::atomic<uint64_t> run_count{0};

  // CUDA device memory: where each storage's memory comes from.
  detail::DeviceMemoryPlan memory;
  void place_run_memory(const RunContext& rc, detail::RunMemory& rm) const;
  // A block of the storage's own (CUDA: through ctx.allocate); points its buffers at it.
  void* allocate_own(int s, const int64_t* env, const RunContext& rc,
                     std::vector<std::shared_ptr<void>>& storages, std::vector<void*>& bufs) const;

  RuntimeTensor view(const detail::ViewSpec& v, const std::vector<void*>& bufs, const int64_t* env,
                     const std::vector<std::shared_ptr<void>>& storages,
                     const std::vector<RuntimeTensor>& in) const {
    RuntimeTensor t;
    t.dtype = v.dtype;
    t.device = device;
    t.device_index = cuda ? cuda->device().ordinal : 0;
    size_t rank = v.sizes.size();
    t.sizes.resize(rank);
    t.strides.resize(rank);
    for (size_t d = 0; d < rank; ++d) {
      t.sizes[d] = detail::eval_size(v.sizes[d], env, code.data());
      t.strides[d] = detail::eval_size(v.strides[d], env, code.data());
    }
    int64_t off = detail::eval_size(v.offset, env, code.data());
    t.data = static_cast<char*>(bufs[v.buffer]) + off * dtype_size(v.dtype);
    if (v.root.kind == detail::Root::Storage) {
      t.owner = storages[v.root.index];
    } else if (v.root.kind == detail::Root::Input) {
      t.owner = in[v.root.index].owner;
    }
    return t;
  }

  // mm/bmm/addmm through cuBLASLt; false when the operands need the host path
  // (program_extern.cpp).
  bool cuda_matmul(const detail::ExternCall& call, const std::vector<RuntimeTensor>& ins,
                   const RuntimeTensor& out, const RunContext& rc, std::string* why) const;

  // Provider::Measured steps: the provider each ran with, per input sizes, and the two timings
  // (seconds) that chose it (program_extern.cpp: measured_provider).
  struct Measurement {
    detail::Provider chosen;
    double library_s, host_s;
  };
  mutable std::mutex measured_mutex;
  mutable std::map<std::pair<const detail::ExternCall*, std::vector<int64_t>>, Measurement>
      measured;

  // A Provider::Measured step: true with *known set where these input sizes were measured;
  // else runs `library` and `host` in turn (both write the step's outputs), records the faster
  // and returns false.
  bool measure_provider(const detail::ExternCall& call, const std::vector<RuntimeTensor>& ins,
                        const std::function<void()>& library, const std::function<void()>& host,
                        detail::Provider* known) const;

  // Runs one extern step (program_extern.cpp).
  void run_extern(const detail::ExternCall& call, std::vector<void*>& bufs, const int64_t* env,
                  std::vector<std::shared_ptr<void>>& storages,
                  const std::vector<RuntimeTensor>& in, const RunContext& rc,
                  const detail::RunMemory& rm) const;
};

}  // namespace coil::runtime
