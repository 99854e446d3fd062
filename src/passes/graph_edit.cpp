#include "graph_edit.h"

#include <unordered_set>
#include <vector>

#include "coil/support/error.h"

namespace coil::passes::detail {

void remove_nodes(Graph& g, const std::unordered_set<const Node*>& doomed) {
  if (doomed.empty()) return;
  const std::unordered_set<const Value*> graph_outputs(g.outputs().begin(), g.outputs().end());
  std::vector<Value*> pinned = g.outputs();
  size_t found = 0;
  for (const Node* n : g.nodes()) {
    if (!doomed.count(n)) {
      if (!n->outputs().empty()) pinned.push_back(n->output(0));
      continue;
    }
    ++found;
    COIL_CHECK(!n->outputs().empty()) << "cannot remove " << n->op() << ": it has no outputs";
    for (const Value* v : n->outputs()) {
      COIL_CHECK(!graph_outputs.count(v))
          << "cannot remove " << n->op() << ": %" << v->id() << " is a graph output";
      for (const Node* u : v->users()) {
        COIL_CHECK(doomed.count(u)) << "cannot remove " << n->op() << ": %" << v->id()
                                    << " is used by " << u->op() << ", which stays";
      }
    }
  }
  COIL_CHECK(found == doomed.size()) << "nodes to remove that are not in the graph";
  const std::vector<Value*> outputs = g.outputs();
  g.set_outputs(std::move(pinned));
  int removed = 0;
  try {
    removed = g.remove_dead_nodes();
  } catch (...) {
    g.set_outputs(outputs);
    throw;
  }
  g.set_outputs(outputs);
  COIL_CHECK(removed == static_cast<int>(doomed.size()))
      << "removed " << removed << " nodes, meant " << doomed.size();
}

}  // namespace coil::passes::detail
