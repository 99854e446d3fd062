// Convolutions on the GPU through cuDNN's backend (graph) API, loaded with dlopen
// (libcudnn.so.9; a PyTorch process has it loaded already), called from C++ without a round
// trip through Python.
//
// Why not the host fallback: ATen's convolution reached through a Python callback cost 90-156
// us of host time per call on the H100 machine (tensor wrapping both ways, the dispatcher, the
// plan cache), and a ResNet-50 training step makes 106 of them: the step was host-bound.
// Here a call is a plan-cache lookup and one cudnnBackendExecute.
//
// Each problem (pass, dtype, sizes, strides, parameters, pointer alignment) gets its engine
// once. Candidates are the engine configurations cuDNN's heuristics rank first, minus those
// PyTorch's own settings would reject (TF32 tensor cores for float32 when TF32 is off, engines
// that down-convert float32 inputs), in the heuristics' order, engines that cuDNN compiles at
// run time included (as PyTorch takes them). With `measure` the first few candidates
// are timed on the first call's own operands and the fastest runs from then on (what
// torch.backends.cudnn.benchmark does); without it the first that finalizes runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "coil/graph/dtype.h"

namespace coil::backend::cuda {

// A dense tensor of sizes [N, C, spatial...] (any dim order in memory), strides in elements.
struct ConvTensor {
  void* data = nullptr;
  std::vector<int64_t> sizes, strides;
};

// Forward: y = conv(x, w). BackwardData: x = the gradient of the input given y (the output's
// gradient) and w. BackwardFilter: w = the gradient of the weight given x and y.
enum class ConvPass { Forward, BackwardData, BackwardFilter };

struct ConvArgs {
  ConvPass pass = ConvPass::Forward;
  DType dtype = DType::Float32;                    // of x, w and y (float32, bfloat16 or float16)
  ConvTensor x, w, y;                              // w: [K, C / groups, spatial...]
  std::vector<int64_t> stride, padding, dilation;  // one per spatial dim
  bool allow_tf32 = true;                          // float32 may use TF32 tensor cores
  bool measure = false;                            // time the heuristics' first engines
};

// A choice made where measuring is on: the problem, the candidate engines (cuDNN's global
// engine indices) with their ms per call (-1: failed to run; empty where there was only one
// candidate, nothing to time), and the index of the one chosen (-1: none ran).
struct ConvEngineChoice {
  std::string problem;
  std::vector<int64_t> engines;
  std::vector<float> ms;
  std::vector<bool> runtime_compiled;  // per engine: compiled by cuDNN at run time
  int chosen = -1;
  double build_ms = 0;  // finalizing the candidates' plans
};

// Every measurement made in this process, oldest first (bounded: the latest 4096).
std::vector<ConvEngineChoice> conv_engine_choices();

// Device memory of at least `bytes`, valid for the work queued on the call's stream.
using WorkspaceFn = std::function<void*(size_t bytes)>;

// "" when cuDNN can be loaded, else why not.
std::string cudnn_unavailable_reason();

// Queues the pass on `stream`; false (with *why) when cuDNN cannot take these arguments (the
// caller takes another path). Throws when cuDNN fails while executing a plan it accepted.
bool convolution(const ConvArgs& args, void* stream, const WorkspaceFn& workspace,
                 std::string* why);

}  // namespace coil::backend::cuda
