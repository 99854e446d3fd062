// The loop-level program: what lowering produces from a Graph, and what the scheduler and the
// backends consume.
//
// Buffers are typed, strided n-d arrays. A buffer is a graph input, an intermediate computed by
// a step, or a view (strided alias) of another buffer's storage. Steps run in order:
//   ComputeNode  one output buffer, computed element by element from a Body:
//                pointwise:  out[store_index(i)] = body(i)          for i in ranges
//                reduction:  out[store_index(i)] = reduce_r body(i, r)  for i in ranges
//   ExternNode   a library kernel (matmul, convolution, ...) or an eager PyTorch op
//                (Fallback) reading and writing whole buffers.
//
// Index symbols: a ComputeNode's outer loop variables are index_vars (named i0, i1, ...) over
// `ranges`; a reduction's variables are reduction_vars (r0, ...) over reduction_ranges. Size-1
// dimensions never appear in ranges (their index is the constant 0), so a keepdim reduction
// and the pointwise op that consumes it share their outer ranges.
//
// Text form (printer.h):
//   buf2: f32[8, 1] = reduce max over (i0 < 8) (r0 < 16):
//     %0 = load in0[i0, r0] : f32
//     -> store [i0, 0] %0
#pragma once

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "coil/graph/dtype.h"
#include "coil/loop/body.h"

namespace coil::loop {

enum class BufferKind : uint8_t { Input, Intermediate, View };

struct Buffer {
  BufferId id = -1;
  std::string name;  // "in0", "buf3"; stable, derived from id
  BufferKind kind = BufferKind::Intermediate;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  std::vector<sym::Expr> sizes;
  std::vector<sym::Expr> strides;
  sym::Expr offset = nullptr;  // elements; nullptr = 0 (Views may have an offset)
  int input_index = -1;        // Input: position among the graph's inputs
  BufferId view_of = -1;       // View: the buffer whose storage this aliases
};

// clang-format off
#define COIL_REDUCE_KINDS(X)                                                          \
  X(Sum, "sum")                                                                       \
  X(Prod, "prod") X(Max, "max") X(Min, "min") X(ArgMax, "argmax") X(ArgMin, "argmin") \
      X(Any, "any") X(All, "all")
// clang-format on

enum class ReduceKind : uint8_t {
  None,
#define COIL_REDUCE_ENUM(name, text) name,
  COIL_REDUCE_KINDS(COIL_REDUCE_ENUM)
#undef COIL_REDUCE_ENUM
};
std::string_view reduce_kind_name(ReduceKind k);

struct ComputeNode {
  BufferId out = -1;
  std::vector<sym::Expr> ranges;
  std::vector<sym::Expr> index_vars;  // symbols i0.. one per range
  std::vector<sym::Expr> reduction_ranges;
  std::vector<sym::Expr> reduction_vars;  // symbols r0..
  ReduceKind reduce = ReduceKind::None;
  Body body;                           // the element value (pointwise) or reduction input
  std::vector<sym::Expr> store_index;  // logical index into `out`, over index_vars
  // ArgMax/ArgMin: the body computes the value; the stored result is the position along the
  // (single, flattened) reduction range, as Int64.

  bool is_reduction() const { return reduce != ReduceKind::None; }
};

// Extern conventions (produced by src/lower/{linalg,index}.cpp, decoded by the runtime; see also
// runtime/extern_kernels.h). Inputs may be strided Views; every kind has one output.
//   Mm           inputs {a [M,K], b [K,N]}; Bmm: {a [B,M,K], b [B,K,N]}
//   Addmm        inputs {bias (broadcastable to [M,N], passed as is), a, b}; scalars {beta, alpha}
//   Mm, Addmm    (CUDA) optional ints {epilogue, padded}: epilogue 1 applies ReLU and 2 GELU (the
//                tanh form) to the result in the cuBLASLt epilogue (the activation's lowering
//                fused it: src/lower/linalg.cpp); padded 1: the output has N rounded up to 16
//                bytes (a window of it is the value). Either makes the host's ATen op unfit.
//   Convolution  inputs {input [N,C,*], weight [O,C/groups,*], (bias [O])}; ints {stride[nd],
//                padding[nd], dilation[nd], transposed (0/1), output_padding[nd], groups},
//                nd = rank(input) - 2 (one-element lists are expanded to nd); the output may have
//                the graph's dense non-contiguous strides (channels-last)
//   IndexPut     inputs {self, index_0 .. index_{k-1}, values}; ints {accumulate (0/1), dim_0 ..
//                dim_{k-1}}: index_j (int64/int32, broadcast together) indexes dim_j of self
//                (ascending; None entries of aten's list are simply absent). out = self;
//                out[indices] = values (+= with accumulate); values broadcast to the indexed
//                shape. Also used for scatter.src/value (k = rank, stride-0 arange index
//                tensors for the other dims) and embedding_dense_backward (accumulate).
//   ScatterAdd   inputs {self, index, src}; ints {dim (normalized)}: out = self;
//                out[..., index[p], ...] += src[p] for every position p of index
//   Cat          inputs {piece_0 .. piece_{n-1}} (strided, the output's dtype); ints {dim
//                (normalized)}: out = the pieces one after the other along dim, each copied
//                into its slice (a cat of many pieces; few pieces inline as a where-chain)
//   ConvolutionBackward  inputs {grad_output, input, weight}; ints: Convolution's layout
//                followed by output_mask[3]; outputs: grad_input, grad_weight, grad_bias,
//                only those whose mask entry is set, in that order.
// clang-format off
#define COIL_EXTERN_KINDS(X)                                                       \
  X(Mm, "mm")                   /* out = a @ b, 2-d */                             \
  X(Bmm, "bmm")                 /* out = a @ b, 3-d batched */                     \
  X(Addmm, "addmm")             /* out = beta*bias + alpha*(a @ b) */              \
  X(Convolution, "convolution") /* aten.convolution forward */                     \
  X(ConvolutionBackward, "convolution_backward")                                   \
  X(IndexPut, "index_put")     /* out = copy of in0; out[indices] = / += values */ \
  X(ScatterAdd, "scatter_add") /* out = copy of in0; scatter-add along a dim */    \
  X(Cat, "cat")                /* out = the inputs concatenated along a dim */     \
  X(Fallback, "fallback")      /* an eager PyTorch op, by graph node position */
// clang-format on

enum class ExternKind : uint8_t {
#define COIL_EXTERN_ENUM(name, text) name,
  COIL_EXTERN_KINDS(COIL_EXTERN_ENUM)
#undef COIL_EXTERN_ENUM
};
std::string_view extern_kind_name(ExternKind k);

struct ExternNode {
  ExternKind kind = ExternKind::Fallback;
  std::vector<BufferId> inputs;  // may be View buffers (strided); outputs are Intermediate
  std::vector<BufferId> outputs;
  // Attributes, per kind as documented above COIL_EXTERN_KINDS: scalars (Addmm {beta, alpha})
  // and ints (Convolution, IndexPut, ScatterAdd, Cat); unused otherwise.
  std::vector<double> scalars;
  std::vector<int64_t> ints;
  // The position of the graph node in Graph::nodes() and its op name. Fallback nodes are run by
  // the host (PyTorch) through this position; inputs are then the node's tensor inputs in
  // Node::input_values() order and outputs its outputs. Library kernels (Mm, Convolution, ...)
  // keep it too, so the runtime may run them through the host when that is faster (ATen's
  // kernels) and through its own library path (OpenBLAS) without PyTorch.
  int graph_node = -1;
  std::string op;
  // The host op always returns newly allocated tensors, never an alias of an input (ATen's
  // fused attention kernels; convolutions are so by kind): the runtime may then let its result
  // take over a storage the memory plan shares with other buffers, instead of copying it in.
  bool fresh_outputs = false;
};

// Mm / Addmm ints[0] (see COIL_EXTERN_KINDS): the activation cuBLASLt's epilogue applies.
enum MatmulEpilogue : int64_t { kEpilogueNone = 0, kEpilogueRelu = 1, kEpilogueGelu = 2 };
// Mm / Addmm ints[1]: 1 where the product's buffer has padded columns (src/lower/linalg.cpp);
// ints[2]: these bits for the operands whose storage holds zeros past their contiguous extent,
// up to its 16-byte-aligned row stride (lower/detail::realize_zero_padded): the runtime reads
// them padded in place instead of copying them into padded operands.
enum MatmulZeroPadded : int64_t { kZeroPaddedA = 1, kZeroPaddedB = 2 };
// CUDA products with at least this many multiply-adds and an extent that is not 16-byte aligned
// run padded (runtime/cuda_matmul.cpp; below it the copies cost more than the slow kernel
// loses); the lowering gives an mm's product padded columns (src/lower/linalg.cpp) on the same
// rule.
constexpr int64_t kMatmulPadMinWork = int64_t{1} << 31;

using Step = std::variant<ComputeNode, ExternNode>;

struct LoopProgram {
  sym::Context* ctx = nullptr;
  std::vector<Buffer> buffers;    // indexed by BufferId
  std::vector<Step> steps;        // in a valid execution order
  std::vector<BufferId> inputs;   // one per graph input
  std::vector<BufferId> outputs;  // one per graph output (may repeat, may be inputs/views)
  // Size symbols (s0, ...) the kernels need at run time, each with where to read it: the
  // size (dim >= 0) or stride (dim < 0: stride of dim -dim-1) of a graph input.
  struct SizeSymbol {
    sym::Expr symbol;
    int input = 0;
    int dim = 0;
  };
  std::vector<SizeSymbol> size_symbols;
  // An Int64[2] buffer {seed, offset} that the runtime fills before every run, for Rand/Randn
  // instructions (each run draws fresh numbers, like eager). -1 when the graph is not random.
  BufferId rng_state = -1;

  const Buffer& buffer(BufferId id) const { return buffers.at(id); }
  BufferId add_buffer(Buffer b);  // assigns id and name; returns id
};

// The buffer whose storage `id` uses (follows View::view_of to an Input or Intermediate).
BufferId storage_root(const LoopProgram& p, BufferId id);

// The buffers of `buffers` that share a storage with another of them while one of the two is
// in `written` (an input mutation's view and the input it writes): their pointers alias, so
// the backends declare them without __restrict__.
std::set<BufferId> written_through_alias(const LoopProgram& p, const std::set<BufferId>& buffers,
                                         const std::set<BufferId>& written);

}  // namespace coil::loop
