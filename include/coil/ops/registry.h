// The op registry: what coil knows about each ATen op overload, independent of lowering.
//
// An op is named by its full overload name ("aten.add.Tensor", "aten.mm.default"). Ops that are
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
  std::string_view op;
  const std::vector<Arg>& args;
  const std::vector<std::pair<std::string, Arg>>& kwargs;

  static OpCall of(const Node& n) { return OpCall{n.op(), n.args(), n.kwargs()}; }
  // Positional arg i, else keyword `name`, else nullptr (absent optional argument).
  const Arg* arg(size_t i, std::string_view name) const;
};

// Output metas of one call. Throws CompileError for invalid arguments (shapes that do not
// broadcast, bad dims, ...).
using MetaFn = std::vector<TensorMeta> (*)(sym::Context& ctx, const OpCall& call);

struct OpDef {
  std::string name;  // "aten.add.Tensor"
  OpFamily family;
  MetaFn meta;  // never null for a registered op
};

class OpRegistry {
 public:
  void add(std::string name, OpFamily family, MetaFn meta);
  const OpDef* find(std::string_view name) const;
  const std::vector<OpDef>& ops() const { return ops_; }  // sorted by name

 private:
  friend const OpRegistry& op_registry();
  friend void register_ops(std::vector<OpDef> defs);
  void finish();
  std::vector<OpDef> ops_;
};

const OpRegistry& op_registry();
// Adds `defs` to the process-wide registry, all or nothing: CompileError naming the op when
// one is already registered or appears twice in `defs`. Thread-safe (writers are serialized;
// readers see the old table or the new one, never a half-built one). For the plugin loader.
void register_ops(std::vector<OpDef> defs);
// nullptr when coil does not know the op.
const OpDef* find_op(std::string_view name);

// Output metas for a call / an existing node; CompileError if the op has no meta function.
std::vector<TensorMeta> infer_meta(sym::Context& ctx, const OpCall& call);
std::vector<TensorMeta> infer_meta(sym::Context& ctx, const Node& node);
// Appends a node whose output metas come from the op's meta function.
Node* add_node_inferred(Graph& g, std::string op, std::vector<Arg> args,
                        std::vector<std::pair<std::string, Arg>> kwargs = {});

// Per-family registration, one per file under src/ops/.
void register_pointwise_ops(OpRegistry& r);
void register_reduction_ops(OpRegistry& r);
void register_view_ops(OpRegistry& r);
void register_linalg_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);

}  // namespace coil::ops
