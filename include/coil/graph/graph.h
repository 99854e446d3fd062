// The graph IR: an SSA dataflow graph of ATen op overloads, the level TorchDynamo and
// AOTAutograd hand over.
//
// A Graph owns its Nodes and Values (stable addresses, freed with the Graph). A Node applies one
// op overload ("aten.add.Tensor") to arguments; tensor arguments are Value*, everything else is
// a typed Arg (never a string map). Each Node produces one or more Values, each with TensorMeta.
//
// Text form (printer.h / parser.h; print -> parse -> print is the identity):
//
//   graph(%0: f32[8, 16], %1: f32[32, 16]):
//     %2: f32[16, 32]{1, 16} = aten.permute.default(%1, [1, 0])
//     %3: f32[8, 32] = aten.mm.default(%0, %2)
//     %4: f32[8, 32] = aten.add.Tensor(%3, 1.0, alpha=1)
//     %5: f32[8], %6: i64[8] = aten.max.dim(%4, 1)
//     return (%4, %5)
//
// Op names are the full overload names as PyTorch prints an OpOverload: "aten.mm.default",
// "aten.add.Tensor", "prims.convert_element_type.default". A Node holds its op as an interned
// OpId (coil/graph/op_id.h): the name is interned once when the node is created or parsed.
//
// The printer numbers values by definition order (inputs first), so ids in the text are
// dense even after dead-code elimination; the parser accepts any distinct ids.
//
// Meta syntax: dtype[sizes]{strides}+offset@device; {strides} is printed only when not
// contiguous, +offset only when nonzero, @device only when not cpu. Sizes are sym expressions
// ("s0*4"). Args: %value, 3 (int), 2.5 / 1e-05 / inf / -inf / nan (float: always with '.',
// 'e' or one of those names, so it never reads as an int), true, false, None, "text" (C
// escapes), dtype(f32), device(cpu), sym(s0*4) (a non-constant sym expression; constants are
// plain ints), and lists [a, b]. Keyword args follow positional ones as name=value.
//
// Details (what the printer writes; the parser accepts the same with free whitespace between
// tokens, except that a meta has no space before its '[', '{', '+' and '@'):
// - {strides} is printed unless the strides are exactly the row-major strides of the sizes
//   (size-1 dims included, so a size-1 dim with an odd stride keeps it); when absent, the
//   parser fills in row-major strides. A 0-dim tensor is "f32[]".
// - +offset is "+N" for a constant or a single symbol, otherwise parenthesized: "+(s0*4 + 2)".
// - Devices: "@cuda" ("@cuda:0" is accepted on input); dtypes also parse from torch names
//   ("float32"), but print as the short names.
// - Floats print as the shortest text that reads back bit-exactly (std::to_chars), with ".0"
//   appended when that text would read as an int: 1.0, 0.1, 1e-05, 1e+20, -0.0, inf, -inf,
//   nan. Strings use \\, \", \n, \t, \r and \xHH (exactly two hex digits).
// - A node without outputs prints as a bare call ("  aten.foo.default(%1)"). The output
//   list is always parenthesized: "return (%4)", "return ()".
// - '#' starts a comment to the end of the line (never printed).
// - Symbols that occur in the graph inputs' sizes get the range [2, kMaxSize] when parsed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "coil/graph/op_id.h"
#include "coil/graph/tensor_meta.h"

namespace coil {

class Node;
class Value;

struct ArgList;
// One argument of a node. A list is itself a vector of Args (e.g. `[%a, %b]` for aten.cat,
// `[None, %idx]` for aten.index.Tensor, `[2, 3]` for sizes).
struct NoneArg {
  bool operator==(const NoneArg&) const = default;
};
struct Arg {
  using List = std::vector<Arg>;
  std::variant<NoneArg, Value*, int64_t, double, bool, std::string, DType, Device, sym::Expr, List>
      v;

  Arg() = default;
  template <typename T>
  Arg(T x) : v(std::move(x)) {}
  Arg(int x) : v(int64_t{x}) {}

  bool is_none() const { return std::holds_alternative<NoneArg>(v); }
  bool is_value() const { return std::holds_alternative<Value*>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_double() const { return std::holds_alternative<double>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_list() const { return std::holds_alternative<List>(v); }
  bool is_sym() const { return std::holds_alternative<sym::Expr>(v); }
  Value* value() const { return std::get<Value*>(v); }
  int64_t as_int() const;    // int, bool, or constant sym; CompileError otherwise
  double as_double() const;  // double, int or bool
  const List& list() const { return std::get<List>(v); }
};

class Value {
 public:
  int id() const { return id_; }  // printed as %<id>; unique in the graph
  const TensorMeta& meta() const { return meta_; }
  TensorMeta& mutable_meta() { return meta_; }
  Node* producer() const { return producer_; }  // nullptr for graph inputs
  int output_index() const { return output_index_; }
  const std::vector<Node*>& users() const { return users_; }
  bool is_input() const { return producer_ == nullptr; }

 private:
  friend class Graph;
  int id_ = 0;
  TensorMeta meta_;
  Node* producer_ = nullptr;
  int output_index_ = 0;
  std::vector<Node*> users_;  // a node appears once per use
};

class Node {
 public:
  // The op's name, "aten.add.Tensor" (for messages and printing; compare op_id()).
  const std::string& op() const { return op_.name(); }
  // The op's interned id (coil/graph/op_id.h), what passes and lowering compare and index by.
  OpId op_id() const { return op_; }
  const std::vector<Arg>& args() const { return args_; }
  const std::vector<std::pair<std::string, Arg>>& kwargs() const { return kwargs_; }
  const Arg* kwarg(std::string_view name) const;  // nullptr if absent
  // Positional arg i, or the keyword `name`, or nullptr (for optional trailing args).
  const Arg* arg(size_t i, std::string_view name) const;
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output(size_t i = 0) const { return outputs_.at(i); }
  // Every Value* used by args and kwargs (lists included), in order.
  std::vector<Value*> input_values() const;

 private:
  friend class Graph;
  OpId op_;
  std::vector<Arg> args_;
  std::vector<std::pair<std::string, Arg>> kwargs_;
  std::vector<Value*> outputs_;
};

class Graph {
 public:
  explicit Graph(sym::Context& ctx) : ctx_(&ctx) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  sym::Context& ctx() const { return *ctx_; }

  Value* add_input(TensorMeta meta);
  // Appends a node; output metas are given (from the front end, the parser, or a meta function).
  Node* add_node(OpId op, std::vector<Arg> args, std::vector<std::pair<std::string, Arg>> kwargs,
                 std::vector<TensorMeta> output_metas);
  // The same, interning the op's name (OpId::of).
  Node* add_node(std::string_view op, std::vector<Arg> args,
                 std::vector<std::pair<std::string, Arg>> kwargs,
                 std::vector<TensorMeta> output_metas) {
    return add_node(OpId::of(op), std::move(args), std::move(kwargs), std::move(output_metas));
  }
  void set_outputs(std::vector<Value*> outputs);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  // Nodes in program (topological) order.
  const std::vector<Node*>& nodes() const { return order_; }

  // Rewrites every use of `from` (in nodes and graph outputs) to `to`.
  void replace_all_uses(Value* from, Value* to);
  // Removes nodes none of whose outputs are used (graph outputs count as uses); nodes without
  // outputs (asserts) are kept. Returns how many were removed.
  int remove_dead_nodes();

 private:
  Value* new_value(TensorMeta meta);
  sym::Context* ctx_;
  std::deque<Value> values_;  // deque: stable addresses
  std::deque<Node> node_store_;
  std::vector<Node*> order_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  int next_value_id_ = 0;
};

}  // namespace coil
