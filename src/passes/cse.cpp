#include "coil/passes/cse.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coil/graph/printer.h"
#include "coil/passes/op_effects.h"
#include "graph_edit.h"

namespace coil::passes {
namespace {

void key_of_expr(sym::Expr e, std::string& out) {
  // Hash-consed: equal expressions of one Context are one pointer.
  out += "e";
  out += std::to_string(reinterpret_cast<uintptr_t>(e));
}

// Appends a text that is equal for two args iff they are the same argument: the type is part
// of it (1, 1.0 and true differ, as they do in the FX graph).
void key_of_arg(const Arg& a, std::string& out) {
  struct Visitor {
    std::string& out;
    void put(char tag, std::string_view text) {
      out += tag;
      out += text;
    }
    void operator()(const NoneArg&) { out += 'N'; }
    void operator()(Value* v) { put('%', std::to_string(v->id())); }
    void operator()(int64_t i) { put('i', std::to_string(i)); }
    // The printed form: bit-exact, except that every NaN is "nan" (Python: repr).
    void operator()(double d) { put('d', format_double(d)); }
    void operator()(bool b) { out += b ? 'T' : 'F'; }
    void operator()(const std::string& s) { put('s', quote_string(s)); }
    void operator()(DType t) { put('t', dtype_name(t)); }
    void operator()(Device d) { put('D', device_name(d)); }
    void operator()(sym::Expr e) { key_of_expr(e, out); }
    void operator()(const Arg::List& l) {
      out += "[";
      for (const Arg& x : l) {
        key_of_arg(x, out);
        out += ",";
      }
      out += "]";
    }
  };
  std::visit(Visitor{out}, a.v);
}

void key_of_meta(const TensorMeta& m, std::string& out) {
  out += std::string(dtype_name(m.dtype)) + "@" + std::string(device_name(m.device)) + "[";
  for (sym::Expr e : m.sizes) key_of_expr(e, out);
  out += "]{";
  for (sym::Expr e : m.strides) key_of_expr(e, out);
  out += "}+";
  const bool zero =
      m.storage_offset == nullptr || (m.storage_offset->is_const() && m.storage_offset->value == 0);
  if (!zero) key_of_expr(m.storage_offset, out);
}

// Op, positional args, keyword args by name, output metas.
std::string node_key(const Node& n) {
  // The op by its interned id: equal ids are equal names, and the key stays short.
  std::string key = std::to_string(n.op_id().index());
  key += "(";
  for (const Arg& a : n.args()) {
    key_of_arg(a, key);
    key += ",";
  }
  std::vector<const std::pair<std::string, Arg>*> kwargs;
  for (const auto& kv : n.kwargs()) kwargs.push_back(&kv);
  std::sort(kwargs.begin(), kwargs.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (const auto* kv : kwargs) {
    key += kv->first + "=";
    key_of_arg(kv->second, key);
    key += ",";
  }
  key += ")->(";
  for (const Value* v : n.outputs()) {
    key_of_meta(v->meta(), key);
    key += ",";
  }
  key += ")";
  return key;
}

// A clone of a value with this meta has this meta: row-major strides (also on size-1 dims),
// no storage offset.
bool clone_keeps_meta(sym::Context& ctx, const TensorMeta& m) {
  const bool zero_offset =
      m.storage_offset == nullptr || (m.storage_offset->is_const() && m.storage_offset->value == 0);
  return zero_offset && m.strides == contiguous_strides(ctx, m.sizes);
}

}  // namespace

int eliminate_common_subexpressions(Graph& g, int64_t shared_outputs_from) {
  std::unordered_map<std::string, Node*> first_of;
  std::unordered_set<const Node*> merged;
  const std::vector<Node*> nodes = g.nodes();  // the clones added below are not visited
  // The graph outputs of the nodes still to visit do not change below (a merged node's outputs
  // leave, clones come, neither is visited again).
  const std::unordered_set<const Value*> graph_outputs(g.outputs().begin(), g.outputs().end());
  auto is_graph_output = [&](const Value* v) { return graph_outputs.count(v) > 0; };
  // Output positions whose values may share memory with each other (a forward graph's saved
  // values, which only its backward reads).
  auto may_share = [&](size_t j) {
    return shared_outputs_from >= 0 && static_cast<int64_t>(j) >= shared_outputs_from;
  };
  OpEffectCache effects;
  for (Node* n : nodes) {
    if (effects.must_keep(*n) || effects.is_random_op(n->op_id())) continue;
    // A clone that is a graph output would only become another clone (and a second run would
    // find the clones this one adds).
    if (n->op_id() == opid::aten_clone_default && is_graph_output(n->output())) continue;
    auto [it, inserted] = first_of.emplace(node_key(*n), n);
    if (inserted) continue;
    Node* first = it->second;
    // Per output k of n: where it is a graph output that may be the first node's value itself
    // (a shared position, while the first node's value is no output before those), and where
    // it needs a clone.
    std::vector<std::vector<size_t>> shared(n->outputs().size()), cloned(n->outputs().size());
    bool clonable = true;
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      const Value* from = n->output(k);
      if (!is_graph_output(from)) continue;
      const std::vector<Value*>& outs = g.outputs();
      bool to_is_private_output = false;  // an output whose storage must stay its own
      for (size_t j = 0; j < outs.size(); ++j) {
        if (outs[j] == first->output(k) && !may_share(j)) to_is_private_output = true;
      }
      for (size_t j = 0; j < outs.size(); ++j) {
        if (outs[j] != from) continue;
        (may_share(j) && !to_is_private_output ? shared[k] : cloned[k]).push_back(j);
      }
      // A clone keeps the output's meta only where it is row-major (otherwise both stay).
      if (!cloned[k].empty() && !clone_keeps_meta(g.ctx(), from->meta())) clonable = false;
    }
    if (!clonable) continue;
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      Value* from = n->output(k);
      Value* to = first->output(k);
      g.replace_all_uses(from, to);
      if (shared[k].empty() && cloned[k].empty()) continue;
      std::vector<Value*> outputs = g.outputs();
      for (size_t j : shared[k]) outputs[j] = to;
      if (!cloned[k].empty()) {
        Node* copy = g.add_node(opid::aten_clone_default, {Arg(to)}, {}, {from->meta()});
        for (size_t j : cloned[k]) outputs[j] = copy->output();
      }
      g.set_outputs(std::move(outputs));
    }
    merged.insert(n);
  }
  detail::remove_nodes(g, merged);
  return static_cast<int>(merged.size());
}

namespace {

class CsePass final : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  bool run(Graph& g, const CompileOptions& options) override {
    return eliminate_common_subexpressions(g, options.shared_outputs_from) > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_cse_pass() { return std::make_unique<CsePass>(); }

}  // namespace coil::passes
