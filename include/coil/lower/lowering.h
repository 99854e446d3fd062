// The lowering framework: what one op's lowering sees and produces.
//
// During lowering every graph Value becomes a TensorValue. A TensorValue knows its dtype and
// sizes and how to compute any element (`load`), given an index and the BodyBuilder of the
// body being built. Calling an input's `load` from inside another value's `load` inlines the
// producer into the consumer: pointwise chains and views cost nothing until something realizes
// them. Realizing writes the value into a buffer through a pointwise ComputeNode; reductions
// and extern kernels always produce realized buffers.
//
// Views are index remappings of `load`. When a value is exactly a strided window onto a
// realized buffer's storage (inputs, realized buffers, and permute/expand/slice/select/
// squeeze/unsqueeze/contiguous-view of those) `strided` says so, so extern kernels (BLAS) can
// read it in place and graph outputs can alias without copies.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coil/backend/policy/target_policy.h"
#include "coil/graph/graph.h"
#include "coil/graph/op_id.h"
#include "coil/loop/program.h"
#include "coil/ops/registry.h"
#include "coil/support/options.h"

namespace coil::lower {

using Loader =
    std::function<loop::InstrId(loop::BodyBuilder& b, const std::vector<sym::Expr>& index)>;

// A strided window onto a realized (non-View) buffer's storage.
struct StridedRef {
  loop::BufferId base = -1;
  std::vector<sym::Expr> strides;
  sym::Expr offset = nullptr;  // elements; nullptr = 0
};

struct TensorValue {
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  std::vector<sym::Expr> sizes;
  Loader load;
  std::optional<StridedRef> strided;
  // Rough cost of inlining one element of this value (instructions), and how many distinct
  // buffer loads it performs; the realize rule (realize.h) reads both.
  int inline_cost = 0;
  int inline_reads = 0;
  // The cost the reuse rule counts (realize.h): inline_cost, less what values kept inline as
  // cheap to recompute add (each counts as a load); unset where it is inline_cost.
  std::optional<int> reuse_cost;
  int cost_for_reuse() const { return reuse_cost.value_or(inline_cost); }
  // The buffers those loads read, each once (a body loads a buffer once however many of its
  // operands read it: loads are common subexpressions); unset where the producer does not say.
  // Pointwise ops count their inline_reads from these where every operand has them.
  std::optional<std::vector<loop::BufferId>> read_buffers;
  // The buffers of those loads that read an element per element of this value (not broadcast
  // along some dim of it, as a per-channel scale is), each once however often the body loads
  // it (the body's loads are common subexpressions); unset where the producer does not say,
  // which the realize rule takes as inline_reads of them.
  std::optional<std::vector<loop::BufferId>> full_read_buffers;
  int full_reads() const {
    return full_read_buffers ? static_cast<int>(full_read_buffers->size()) : inline_reads;
  }
};

class LoweringContext;

// One op's lowering: inputs as TensorValues in Node::input_values() order are available via
// ctx.input(node, k); it returns one TensorValue per node output.
using LoweringFn = std::function<std::vector<TensorValue>(LoweringContext& ctx, const Node& node)>;

// The lowering half of the op table: one LoweringFn per op, in a table indexed by the op's
// interned id (coil/graph/op_id.h), the same id the op registry (coil/ops/registry.h) indexes
// its OpDefs by. An op without a lowering runs through the eager fallback.
class LoweringRegistry {
 public:
  // Interns `op`. CompileError when the op already has a lowering.
  void add(std::string_view op, LoweringFn fn);
  // O(1). nullptr when the op has no lowering.
  const LoweringFn* find(OpId op) const {
    if (op.index() >= by_id_.size() || !by_id_[op.index()]) return nullptr;
    return &by_id_[op.index()];
  }
  // By name (interns nothing); for tools and bindings, not per node.
  const LoweringFn* find(std::string_view op) const;
  std::vector<OpId> ids() const;         // the lowered ops, by id
  std::vector<std::string> ops() const;  // their names, sorted

 private:
  std::vector<LoweringFn> by_id_;  // OpId index -> lowering; empty where there is none
};

// Every lowering coil has. Built on first use from the per-family register functions
// (no static constructors); afterwards only register_lowerings adds to it, by publishing a new
// table (as ops::register_ops does): lookups take no lock and references stay valid.
const LoweringRegistry& lowering_registry();
// Adds lowerings to the process-wide registry, all or nothing: CompileError naming the op when
// it already has a lowering or appears twice. Thread-safe. For the plugin loader
// (coil/plugin/loader.h).
void register_lowerings(std::vector<std::pair<std::string, LoweringFn>> fns);

// One op's whole definition, both halves found by its id: the op table's entry (name, family,
// schema, meta function; nullptr when coil does not know the op) and its lowering (nullptr:
// the op runs through the eager fallback).
struct OpEntry {
  OpId id;
  const ops::OpDef* def = nullptr;
  const LoweringFn* lowering = nullptr;
};
OpEntry op_entry(OpId id);

// Per-family registration, one per file under src/lower/.
void register_pointwise_lowerings(LoweringRegistry& r);
void register_view_lowerings(LoweringRegistry& r);
void register_creation_lowerings(LoweringRegistry& r);
void register_reduction_lowerings(LoweringRegistry& r);
void register_index_lowerings(LoweringRegistry& r);
void register_linalg_lowerings(LoweringRegistry& r);
void register_pool_lowerings(LoweringRegistry& r);
void register_attention_lowerings(LoweringRegistry& r);

class LoweringContext {
 public:
  LoweringContext(const Graph& graph, const CompileOptions& options,
                  const backend::LoweringPolicy& target, loop::LoopProgram& program);

  sym::Context& ctx() const;
  // The device choices of the backend the graph is lowered for (which extern runs an op,
  // whether reductions split, ...): lowerings read these, never the device.
  const backend::LoweringPolicy& target() const { return *target_; }
  const CompileOptions& options() const { return *options_; }
  loop::LoopProgram& program() { return *program_; }
  const Graph& graph() const { return *graph_; }

  // The TensorValue of a graph Value (already lowered).
  const TensorValue& value(const Value* v) const;
  void set_value(const Value* v, TensorValue tv);
  // Shorthand: the TensorValue of the Value in node.arg(i, name).
  const TensorValue& arg_value(const Node& node, size_t i, std::string_view name = "") const;

  // --- building values
  TensorValue pointwise(DType dtype, std::vector<sym::Expr> sizes, Loader load, int cost = 1,
                        int reads = 0);
  // A realized reduction over `reduction_sizes`. `body` computes one input element from the
  // output index (size of out_sizes, keepdim layout included) and the reduction index.
  // ArgMax/ArgMin produce Int64 positions along the flattened reduction range.
  using ReduceBody =
      std::function<loop::InstrId(loop::BodyBuilder& b, const std::vector<sym::Expr>& out_index,
                                  const std::vector<sym::Expr>& red_index)>;
  // On CUDA a reduction with few outputs and a long range is split in two stages
  // (src/lower/split_reduction.h); the value returned is the same.
  TensorValue reduce(loop::ReduceKind kind, DType dtype, std::vector<sym::Expr> out_sizes,
                     std::vector<sym::Expr> reduction_sizes, ReduceBody body);
  // Materializes `v` into a new Intermediate buffer (no-op if already realized, i.e.
  // `v.strided` is set). When `v` is (a reference to) the stored value of a graph Value, the
  // buffer takes that Value's dense layout (dense_strides_like of its meta) and the Value's
  // TensorValue is replaced by the realized one, so later users read the buffer; otherwise
  // the buffer is contiguous.
  TensorValue realize(const TensorValue& v);
  // The graph Value whose stored value `v` is (the same object, as realize() tells them), or
  // nullptr where `v` is a copy or a value of the lowering's own.
  const Value* stored_value_of(const TensorValue& v) const;
  // Like realize, with the dense layout of `meta` (contiguous when meta's is not dense).
  TensorValue realize_like(const TensorValue& v, const TensorMeta& meta);
  // Like realize, but always computes a new Intermediate buffer with the given strides (a
  // dense layout, e.g. a graph output's strides).
  TensorValue realize_with_strides(const TensorValue& v, std::vector<sym::Expr> strides);
  // One pointwise ComputeNode writing every element of `v` into the existing buffer `out` (of
  // v's sizes and dtype): realize_with_strides' node, also for a View of a graph input (an
  // input mutation, src/lower/mutation.cpp).
  void store_into(loop::BufferId out, const TensorValue& v);
  // Ensures `v` is a strided window of a buffer (realizing it if not) and returns a View buffer
  // describing it, for extern kernel inputs.
  loop::BufferId as_buffer(const TensorValue& v);
  // A TensorValue reading buffer `id` (with its layout; views included).
  TensorValue from_buffer(loop::BufferId id);
  // A strided window on `base`'s storage, read through a new View buffer (no index math):
  // sizes and strides in elements, `offset` elements from the storage's start (nullptr or a
  // constant 0: none).
  TensorValue window(loop::BufferId base, DType dtype, Device device, std::vector<sym::Expr> sizes,
                     std::vector<sym::Expr> strides, sym::Expr offset = nullptr);
  // Windows whose storage holds zeros past the window's last dim, up to its row stride
  // (detail::realize_zero_padded): a CUDA matmul reads such an operand padded in place.
  void mark_zero_padded(const TensorValue& window) { zero_padded_.push_back(window); }
  // Whether `v` reads a whole such window, or its transpose, from its origin.
  bool is_zero_padded(const TensorValue& v) const;
  // A new contiguous Intermediate buffer for extern outputs.
  loop::BufferId new_buffer(DType dtype, std::vector<sym::Expr> sizes);
  void add_extern(loop::ExternNode node);
  // Fresh index symbols (i<N> / r<N>, unique within the program).
  std::vector<sym::Expr> fresh_vars(size_t n, char prefix);
  // The seed/offset state of the random instructions (creates the rng_state buffer).
  loop::InstrId rng_seed(loop::BodyBuilder& b);
  // A fresh base offset for `count` random numbers: random ops add their element's linear
  // index to it, so two random ops of one graph never draw the same numbers.
  sym::Expr reserve_rng_offsets(sym::Expr count);

 private:
  // One ComputeNode reducing `out_sizes` over `reduction_sizes` (reduce() without the split).
  TensorValue reduce_node(loop::ReduceKind kind, DType dtype, std::vector<sym::Expr> out_sizes,
                          std::vector<sym::Expr> reduction_sizes, const ReduceBody& body);

  const Graph* graph_;
  const CompileOptions* options_;
  const backend::LoweringPolicy* target_;
  loop::LoopProgram* program_;
  std::vector<std::optional<TensorValue>> values_;  // by Value::id()
  std::vector<const Value*> owners_;                // the Value of each set slot
  int next_var_ = 0;
  sym::Expr rng_offset_ = nullptr;
  std::vector<TensorValue> zero_padded_;
};

// Small helpers shared by the family files.
// Broadcast shapes per PyTorch's rules (CompileError when incompatible).
std::vector<sym::Expr> broadcast_shapes(sym::Context& ctx, const std::vector<sym::Expr>& a,
                                        const std::vector<sym::Expr>& b);
// The index into a value of `sizes` for an element at `index` of the broadcast result.
std::vector<sym::Expr> broadcast_index(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                                       const std::vector<sym::Expr>& index);
// Whether a value of `sizes` is broadcast to `out` (has fewer dims, or size 1 where `out` is not
// the constant 1): it has fewer distinct elements than the result.
bool is_broadcast_in(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                     const std::vector<sym::Expr>& out);
// Normalizes a possibly negative dim against rank.
int64_t normalize_dim(int64_t dim, int64_t rank);

}  // namespace coil::lower
