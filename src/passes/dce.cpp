#include "coil/passes/dce.h"

#include <unordered_set>

#include "coil/passes/op_effects.h"
#include "graph_edit.h"

namespace coil::passes {

int eliminate_dead_code(Graph& g) {
  // Backwards: a node is live when it must be kept or a live node or the graph reads it.
  std::unordered_set<const Value*> read(g.outputs().begin(), g.outputs().end());
  std::unordered_set<const Node*> dead;
  const auto& nodes = g.nodes();
  OpEffectCache effects;
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node* n = nodes[i];
    bool live = effects.must_keep(*n);
    for (const Value* v : n->outputs()) live = live || read.count(v);
    if (!live) {
      dead.insert(n);
      continue;
    }
    for (const Value* in : n->input_values()) read.insert(in);
  }
  detail::remove_nodes(g, dead);
  return static_cast<int>(dead.size());
}

namespace {

class DcePass final : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  bool run(Graph& g, const CompileOptions&) override { return eliminate_dead_code(g) > 0; }
};

}  // namespace

std::unique_ptr<Pass> make_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace coil::passes
