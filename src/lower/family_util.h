// Private helpers of the lowering families (src/lower only).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "coil/lower/lowering.h"
#include "coil/support/error.h"

namespace coil::lower::detail {

// Whether a copy `n` (clone, or a _to_copy that keeps the dtype) of `x` may return `x` itself:
// read only by products, or a graph output of an unshared value already in its layout
// (copy_alias.cpp).
bool copy_reads_its_source(LoweringContext& lc, const Node& n, const TensorValue& x);

inline DType out_dtype(const Node& node, size_t k = 0) { return node.output(k)->meta().dtype; }

inline int graph_position(const LoweringContext& ctx, const Node& node) {
  const auto& nodes = ctx.graph().nodes();
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes[k] == &node) return static_cast<int>(k);
  }
  return -1;
}

// An ExternNode of `kind` for `node` (graph_node and op set).
inline loop::ExternNode extern_for(const LoweringContext& ctx, const Node& node,
                                   loop::ExternKind kind) {
  loop::ExternNode e;
  e.kind = kind;
  e.graph_node = graph_position(ctx, node);
  e.op = node.op();
  return e;
}

// Where the backend says so (LoweringPolicy::indexing_through_host, fused_attention_extern:
// the GPU) some ops run through ATen (the host callback, on the device) as extern kernels, like
// a matmul, not as fallbacks of the op: index_put / scatter / embedding backward (the runtime's
// own kernels work on host memory) and scaled-dot-product attention (ATen's fused kernels). The
// extern is the graph node itself (kind Fallback: the host runs it by position with the node's
// tensor inputs; docs/cuda-backend.md): aten_extern below.

// Whether `op` is a matrix product that coil runs as an extern (mm, addmm, bmm, baddbmm): it
// reads its operands, realized, and returns no view of them.
inline bool is_matrix_product(OpId op) {
  return op == opid::aten_mm_default || op == opid::aten_addmm_default ||
         op == opid::aten_bmm_default || op == opid::aten_baddbmm_default;
}
// Whether `op` reads its tensor operands from memory, realized, whatever they are: a matrix
// product or a convolution (an extern, or a native kernel that loads each input element once
// per tap). A value such an op reads is stored for it in any case.
inline bool reads_operands_from_memory(OpId op) {
  return is_matrix_product(op) || op == opid::aten_convolution_default ||
         op == opid::aten_convolution_backward_default;
}
// Fuses activation `act` into the cuBLASLt epilogue of the CUDA mm/addmm it reads, when nothing
// else reads that product; returns act's value (the product, now stored activated), or nullopt
// to lower it as usual. Defined in linalg.cpp.
std::optional<TensorValue> fuse_matmul_epilogue(LoweringContext& ctx, const Node& act,
                                                loop::MatmulEpilogue epilogue, bool exact_gelu);
// The node as a host (ATen) extern; fresh_outputs: its op always allocates its results
// (loop::ExternNode::fresh_outputs).
std::vector<TensorValue> aten_extern(LoweringContext& ctx, const Node& node,
                                     bool fresh_outputs = false);
// A CPU convolution that coil computes itself (1x1 as a product, depthwise as a loop), or
// nullopt to run it as an extern; `ints` in conv_ints' layout. Defined in conv_native.cpp.
std::optional<TensorValue> lower_convolution_natively(LoweringContext& ctx, const Node& node,
                                                      const std::vector<int64_t>& ints);
// bias[o] added to `v` (dims [N, O, ...]) as a lazy pointwise value, and the bias gradient
// (the sum of `g` over every dim but 1). Defined in conv_native.cpp.
TensorValue add_bias(LoweringContext& ctx, const TensorValue& v, const TensorValue& bias);
TensorValue bias_grad(LoweringContext& ctx, const TensorValue& g, DType dt);
// The same for a convolution_backward node: the gradients `output_mask` asks for, in order.
std::optional<std::vector<TensorValue>> lower_convolution_backward_natively(
    LoweringContext& ctx, const Node& node, const std::vector<int64_t>& ints,
    const std::vector<int64_t>& output_mask);

// aten.copy_(input, value) at the end of a graph: the value stored into the input's own
// storage (mutation.cpp). lower_graph calls it after the graph's outputs are lowered, with
// the buffers of every input the graph's mutations write (mutated_input_buffer of each).
loop::BufferId mutated_input_buffer(const LoweringContext& ctx, const Node& node);
void lower_input_mutation(LoweringContext& ctx, const Node& node,
                          const std::vector<loop::BufferId>& written);

inline int64_t int_arg(const Node& node, size_t i, std::string_view name, int64_t def) {
  const Arg* a = node.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  return a->as_int();
}

inline bool bool_arg(const Node& node, size_t i, std::string_view name, bool def) {
  const Arg* a = node.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  return a->as_int() != 0;
}

// An int or int-list argument as a list (empty when absent or None).
inline std::vector<int64_t> int_list(const Arg* a) {
  std::vector<int64_t> out;
  if (a == nullptr || a->is_none()) return out;
  if (a->is_list()) {
    for (const Arg& e : a->list()) out.push_back(e.as_int());
  } else {
    out.push_back(a->as_int());
  }
  return out;
}

inline std::vector<int64_t> ints_arg(const Node& node, size_t i, std::string_view name) {
  return int_list(node.arg(i, name));
}

// A lazy conversion of `v` to `dtype` (v itself when it already has that dtype).
inline TensorValue cast_value(LoweringContext& ctx, const TensorValue& v, DType dtype) {
  if (v.dtype == dtype) return v;
  Loader inner = v.load;
  return ctx.pointwise(
      dtype, v.sizes,
      [inner, dtype](loop::BodyBuilder& b, const std::vector<sym::Expr>& idx) {
        return b.cast(inner(b, idx), dtype_compute(dtype));
      },
      v.inline_cost + 1, v.inline_reads);
}

// A Bool instruction for a 0/1-valued sym expression.
inline loop::InstrId cond_instr(loop::BodyBuilder& b, sym::Expr e) {
  return b.cast(b.index_expr(e, DType::Int64), DType::Bool);
}

// Conjunction of 0/1 sym expressions.
inline sym::Expr all_of(sym::Context& c, const std::vector<sym::Expr>& conds) {
  sym::Expr r = c.one();
  for (sym::Expr e : conds) r = c.mul(r, e);
  return r;
}

// v's element at `index`, with every load it performs masked by `mask` (a Bool instruction):
// where the mask is false no memory is touched and the loads read 0 (Inductor's ops.masked).
// The element is built in a scratch body and copied into `b`'s body with the masks applied.
loop::InstrId masked_load(loop::BodyBuilder& b, const TensorValue& v,
                          const std::vector<sym::Expr>& index, loop::InstrId mask);

// where(mask, v[index] (masked loads), other); a plain load when `mask_expr` is provably true,
// `other` when provably false. The result has v's compute dtype.
loop::InstrId load_or(loop::BodyBuilder& b, sym::Context& c, const TensorValue& v,
                      const std::vector<sym::Expr>& index, sym::Expr mask_expr,
                      loop::InstrId other);

// CUDA matmul operands (linalg.cpp). Values with fewer elements than this are not padded:
// the runtime's copy of a small operand costs less than a kernel that writes the pad.
constexpr int64_t kGemmPadOperandMinElements = int64_t{1} << 22;
// The padded column count of a 2-d CUDA float value whose columns are not 16-byte aligned
// (and that is large enough), or nullopt.
std::optional<int64_t> gemm_operand_pad(const LoweringContext& ctx, const TensorValue& v);
// Realizes 2-d `v` into a [rows, cols] buffer whose columns past v's hold zeros and returns
// the [rows, n] window (marked: LoweringContext::is_zero_padded).
TensorValue realize_zero_padded(LoweringContext& ctx, const TensorValue& v, int64_t cols);

}  // namespace coil::lower::detail
