// The runtime: a compiled graph is a program of steps (allocate, run kernel, call extern,
// free) executed from C++. Also the top-level compile entry point that runs the pipeline:
// parse -> lower -> schedule -> emit C++ -> host compile -> program.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "coil/graph/dtype.h"
#include "coil/support/options.h"

namespace coil::runtime {

// A tensor crossing the runtime boundary. `owner` keeps the storage alive (a runtime
// allocation, or a host framework's tensor).
struct RuntimeTensor {
  void* data = nullptr;  // points at element 0 (storage offset already applied)
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int device_index = 0;  // the CUDA device's ordinal (0 on the CPU)
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements
  std::shared_ptr<void> owner;
};

// Thrown by CompiledGraph::run when the inputs do not match what the graph was compiled for
// (count, dtype, rank, a size or stride, a size symbol out of its range). The host should
// recompile (or run eagerly); the message names the input and dim.
class InputMismatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs one graph node eagerly on the host framework (PyTorch): the node's position in the
// graph, its tensor inputs; returns its outputs. Absent when coil runs without PyTorch.
using FallbackFn =
    std::function<std::vector<RuntimeTensor>(int graph_node, const std::vector<RuntimeTensor>&)>;

// Per-call context of a CUDA graph (ignored on the CPU). Inside PyTorch the Python glue passes
// the current stream and an allocator backed by PyTorch's caching allocator; without PyTorch
// both stay empty (the legacy default stream, cuMemAlloc).
struct RunContext {
  void* stream = nullptr;  // CUstream
  // CUDA only: a device int64 the random kernels' seed is mixed with, read when each kernel
  // runs (not when it is launched). A captured CUDA graph replays its launches with the
  // arguments they were captured with; a seed written on the device by a step captured before
  // them (torch.randint, which PyTorch advances per replay) still gives fresh numbers.
  const int64_t* rng_device = nullptr;
  // Sets *ptr to a device block of at least `bytes` bytes; the owner keeps it alive.
  std::function<std::shared_ptr<void>(size_t bytes, void** ptr)> allocate;
};

// What each stage printed, for the debug dump and for tests.
struct CompileArtifacts {
  std::string input_graph;   // graph IR text
  std::string loop_program;  // loop IR after lowering
  std::string schedule;      // kernels after fusion, memory plan
  std::string fusion_log;
  std::string source;  // generated C++
  std::string compiler_command;
  std::string compiler_log;
  std::vector<std::string> fallback_ops;
  std::vector<std::pair<std::string, double>> timings;  // stage -> seconds
  int num_kernels = 0;
  bool cache_hit = false;
  // Faults coil survived but the user should hear of (an unsafe or unwritable cache, an entry
  // evicted): one line each; the Python glue logs each distinct line once per process.
  std::vector<std::string> warnings;
  // With a debug dir: the graph after each pass that changed it, (pass name, graph text), in
  // pipeline order (the HTML report shows them; the dump has them as 01b_* files).
  std::vector<std::pair<std::string, std::string>> pass_graphs;
};

class CompiledGraph {
 public:
  virtual ~CompiledGraph() = default;
  virtual std::vector<RuntimeTensor> run(const std::vector<RuntimeTensor>& inputs) = 0;
  virtual std::vector<RuntimeTensor> run(const std::vector<RuntimeTensor>& inputs,
                                         const RunContext& ctx) {
    return run(inputs);
  }
  // Like run(), taking the inputs over: `checked` is called once the inputs passed the checks
  // (the caller drops its own references to them there, so an InputMismatchError still leaves
  // them with the caller), and the run drops each input after the last step that reads it, so
  // the input's memory can hold later results: a backward graph's saved activations die as
  // they are used instead of all at the end.
  virtual std::vector<RuntimeTensor> run_consuming(std::vector<RuntimeTensor> inputs,
                                                   const RunContext& ctx,
                                                   const std::function<void()>& checked) {
    std::vector<RuntimeTensor> out = run(inputs, ctx);
    if (checked) checked();
    return out;
  }
  // Where the graph runs (its inputs' device).
  virtual Device device() const { return Device::CPU; }
  virtual const CompileArtifacts& artifacts() const = 0;
  // The executable program (program.h), when the graph is one; for tools and the bindings.
  virtual const class Program* program() const { return nullptr; }
};

// Runs the whole pipeline. Throws CompileError (unsupported input) or InternalError (a bug).
std::unique_ptr<CompiledGraph> compile_graph(const std::string& graph_text,
                                             const CompileOptions& options, FallbackFn fallback);

}  // namespace coil::runtime
