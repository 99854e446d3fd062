#include "coil/ops/registry.h"

#include <algorithm>

#include "coil/support/error.h"

namespace coil::ops {

std::string_view op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::Pointwise:
      return "pointwise";
    case OpFamily::Reduction:
      return "reduction";
    case OpFamily::View:
      return "view";
    case OpFamily::Linalg:
      return "linalg";
    case OpFamily::Shape:
      return "shape";
    case OpFamily::Other:
      return "other";
  }
  return "?";
}

const Arg* OpCall::arg(size_t i, std::string_view name) const {
  if (i < args.size()) return &args[i];
  for (const auto& [k, a] : kwargs) {
    if (k == name) return &a;
  }
  return nullptr;
}

void OpRegistry::add(std::string name, OpFamily family, MetaFn meta) {
  COIL_CHECK(meta != nullptr) << "op " << name << " registered without a meta function";
  ops_.push_back(OpDef{std::move(name), family, meta});
}

void OpRegistry::finish() {
  std::sort(ops_.begin(), ops_.end(),
            [](const OpDef& a, const OpDef& b) { return a.name < b.name; });
  for (size_t i = 1; i < ops_.size(); ++i) {
    COIL_CHECK(ops_[i - 1].name != ops_[i].name) << "op registered twice: " << ops_[i].name;
  }
}

const OpDef* OpRegistry::find(std::string_view name) const {
  auto it = std::lower_bound(ops_.begin(), ops_.end(), name,
                             [](const OpDef& d, std::string_view n) { return d.name < n; });
  if (it == ops_.end() || it->name != name) return nullptr;
  return &*it;
}

const OpRegistry& op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_pointwise_ops(r);
    register_reduction_ops(r);
    register_view_ops(r);
    register_linalg_ops(r);
    register_shape_ops(r);
    r.finish();
    return r;
  }();
  return registry;
}

const OpDef* find_op(std::string_view name) { return op_registry().find(name); }

std::vector<TensorMeta> infer_meta(sym::Context& ctx, const OpCall& call) {
  const OpDef* def = find_op(call.op);
  COIL_USER_CHECK(def != nullptr) << "no meta function for op " << call.op;
  return def->meta(ctx, call);
}

std::vector<TensorMeta> infer_meta(sym::Context& ctx, const Node& node) {
  return infer_meta(ctx, OpCall::of(node));
}

Node* add_node_inferred(Graph& g, std::string op, std::vector<Arg> args,
                        std::vector<std::pair<std::string, Arg>> kwargs) {
  std::vector<TensorMeta> metas = infer_meta(g.ctx(), OpCall{op, args, kwargs});
  return g.add_node(std::move(op), std::move(args), std::move(kwargs), std::move(metas));
}

}  // namespace coil::ops
