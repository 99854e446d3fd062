// The op registry: what coil knows about each ATen op overload, independent of lowering.
//
// An op is named by its full overload name ("aten.add.Tensor", "aten.mm.default") and found by
// its interned id (coil/graph/op_id.h; Node::op_id()) in O(1): the registry keeps a table
// indexed by OpId. Each OpDef holds the op's name, family, schema (coil/ops/schema.h) and
// meta function; its lowering lives one layer up, in lower/'s table indexed by the same id
// (coil/lower/lowering.h; lower::op_entry shows both halves of one op). Ops that are
// not in the registry may still appear in graphs (they run eagerly as fallbacks), but every op
// coil lowers is in it (lower_graph refuses one that is not; LowerCore.EveryLoweredOpHasAMeta).
// Ops in it have a meta function that computes their output TensorMetas (dtype, device, sizes,
// strides, storage offset) from the arguments, following PyTorch's semantics (broadcasting, type
// promotion with Python scalars, view strides).
//
// The registry is built on first use from per-family register functions (one source file per
// family under src/ops/; no static constructors). Afterwards only register_ops adds to it (the
// plugin loader, coil/plugin/loader.h): it publishes a new table instead of changing the one
// readers hold, so lookups take no lock and references into it stay valid.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coil/graph/graph.h"
#include "coil/graph/op_id.h"
#include "coil/ops/schema.h"

namespace coil::ops {

enum class OpFamily : uint8_t {
  Pointwise,  // elementwise with broadcasting (incl. casts, where, clamp)
  Reduction,  // reduces dims (sum, mean, amax, max.dim, var_mean, any, ...)
  View,       // output aliases the input's storage (view, permute, expand, slice, ...)
  Linalg,     // mm, bmm, addmm
  Shape,      // data movement into a fresh tensor (cat, ...)
  Other,
};
std::string_view op_family_name(OpFamily f);

// The arguments of one op application, before or after a Node exists (so passes can compute
// metas for a node they are about to create).
struct OpCall {
  OpCall(OpId id, const std::vector<Arg>& args,
         const std::vector<std::pair<std::string, Arg>>& kwargs, const OpSchema* schema = nullptr)
      : id(id), op(id.name()), args(args), kwargs(kwargs), schema(schema) {}
  // Interns `op` (OpId::of).
  OpCall(std::string_view op, const std::vector<Arg>& args,
         const std::vector<std::pair<std::string, Arg>>& kwargs)
      : OpCall(OpId::of(op), args, kwargs) {}

  OpId id;
  std::string_view op;  // id's name, for messages
  const std::vector<Arg>& args;
  const std::vector<std::pair<std::string, Arg>>& kwargs;
  // The op's schema when known (infer_meta and verify_graph_meta set it): arg() checks names
  // against it.
  const OpSchema* schema = nullptr;

  static OpCall of(const Node& n) { return OpCall(n.op_id(), n.args(), n.kwargs()); }
  // Positional arg i, else keyword `name`, else nullptr (absent optional argument). With a
  // schema and i one of its positional arguments, `name` must be the schema's name of it (an
  // InternalError otherwise: the meta function asks for the wrong argument), checked when the
  // lookup goes past the positional args, where the name is what finds the argument.
  const Arg* arg(size_t i, std::string_view name) const;
};

// Output metas of one call. Throws CompileError for invalid arguments (shapes that do not
// broadcast, bad dims, ...).
using MetaFn = std::vector<TensorMeta> (*)(sym::Context& ctx, const OpCall& call);

// One op's definition. Registering fills in `id` and `schema`.
struct OpDef {
  std::string name;  // "aten.add.Tensor"
  OpFamily family;
  MetaFn meta;  // never null for a registered op
  // PyTorch's schema text for an op outside the built-in table (a plugin's); built-in ops
  // take theirs from the generated table (builtin_schema_text).
  std::string schema_text = {};
  OpSchema schema = {};  // parsed; schema.known is false when the op has none
  OpId id = {};          // OpId::of(name)
};

class OpRegistry {
 public:
  void add(std::string name, OpFamily family, MetaFn meta, std::string schema_text = {});
  // O(1): an index into a table by id. nullptr when the op is not registered.
  const OpDef* find(OpId id) const {
    if (id.index() >= by_id_.size()) return nullptr;
    const int32_t k = by_id_[id.index()];
    return k < 0 ? nullptr : &ops_[k];
  }
  // By name (interns nothing); for tools and bindings, not per node.
  const OpDef* find(std::string_view name) const;
  const std::vector<OpDef>& ops() const { return ops_; }  // sorted by name

 private:
  friend const OpRegistry& op_registry();
  friend void register_ops(std::vector<OpDef> defs);
  void finish();
  std::vector<OpDef> ops_;
  std::vector<int32_t> by_id_;  // OpId index -> position in ops_, -1 for none
};

const OpRegistry& op_registry();
// Adds `defs` to the process-wide registry, all or nothing: CompileError naming the op when
// one is already registered or appears twice in `defs`. Thread-safe (writers are serialized;
// readers see the old table or the new one, never a half-built one). For the plugin loader.
void register_ops(std::vector<OpDef> defs);
// nullptr when coil does not know the op.
const OpDef* find_op(OpId id);
const OpDef* find_op(std::string_view name);

// Output metas for a call / an existing node; CompileError if the op has no meta function.
std::vector<TensorMeta> infer_meta(sym::Context& ctx, const OpCall& call);
std::vector<TensorMeta> infer_meta(sym::Context& ctx, const Node& node);
// Appends a node whose output metas come from the op's meta function.
Node* add_node_inferred(Graph& g, OpId op, std::vector<Arg> args,
                        std::vector<std::pair<std::string, Arg>> kwargs = {});
inline Node* add_node_inferred(Graph& g, std::string_view op, std::vector<Arg> args,
                               std::vector<std::pair<std::string, Arg>> kwargs = {}) {
  return add_node_inferred(g, OpId::of(op), std::move(args), std::move(kwargs));
}

// Per-family registration, one per file under src/ops/.
void register_pointwise_ops(OpRegistry& r);
void register_reduction_ops(OpRegistry& r);
void register_view_ops(OpRegistry& r);
void register_linalg_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);

}  // namespace coil::ops
