#include "coil/graph/verifier.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "coil/support/error.h"

namespace coil {
namespace {

[[noreturn]] void bad(const std::string& msg) {
  throw CompileError("graph verification failed: " + msg);
}

std::string ref(const Value* v) {
  std::string s = "%";
  s += std::to_string(v->id());
  return s;
}

std::string where(const Node* n, size_t index) {
  return "node " + std::to_string(index) + " (" + n->op() + ")";
}

void check_meta(const TensorMeta& m, const std::string& what) {
  if (!m.strides.empty() && m.strides.size() != m.sizes.size()) {
    bad(what + " has " + std::to_string(m.sizes.size()) + " sizes but " +
        std::to_string(m.strides.size()) + " strides");
  }
  for (sym::Expr e : m.sizes) {
    if (e == nullptr) bad(what + " has a null size");
  }
  for (sym::Expr e : m.strides) {
    if (e == nullptr) bad(what + " has a null stride");
  }
}

}  // namespace

void verify_graph(const Graph& g) {
  std::unordered_set<const Value*> defined;
  std::unordered_set<int> ids;
  auto define = [&](const Value* v, const std::string& what) {
    if (v == nullptr) bad(what + " is null");
    if (!ids.insert(v->id()).second) bad("value id " + ref(v) + " is not unique");
    defined.insert(v);
    check_meta(v->meta(), ref(v));
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    define(v, "input " + std::to_string(i));
    if (!v->is_input()) bad("input " + ref(v) + " has a producer");
  }

  // Uses per (value, node), to compare with the users lists afterwards.
  std::unordered_map<const Value*, std::map<const Node*, int>> uses;
  std::unordered_set<const Node*> nodes;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node* n = g.nodes()[i];
    if (!nodes.insert(n).second) bad(where(n, i) + " appears twice in the node list");
    for (const Value* in : n->input_values()) {
      if (in == nullptr) bad(where(n, i) + " uses a null value");
      if (!defined.count(in)) {
        bad(where(n, i) + " uses " + ref(in) +
            " before its definition (or a value not in this graph)");
      }
      ++uses[in][n];
    }
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      const Value* v = n->outputs()[k];
      define(v, where(n, i) + " output " + std::to_string(k));
      if (v->producer() != n || v->output_index() != static_cast<int>(k)) {
        bad(ref(v) + " does not point back to its producer " + where(n, i));
      }
    }
  }
  auto check_users = [&](const Value* v) {
    std::map<const Node*, int> listed;
    for (const Node* u : v->users()) {
      if (!nodes.count(u)) {
        bad(ref(v) + " lists a user that is not in the graph (" + u->op() + ")");
      }
      ++listed[u];
    }
    auto it = uses.find(v);
    const std::map<const Node*, int> empty;
    const auto& actual = it == uses.end() ? empty : it->second;
    if (listed != actual) {
      bad("the users list of " + ref(v) + " does not match its uses (" +
          std::to_string(v->users().size()) + " listed)");
    }
  };
  for (const Value* v : g.inputs()) check_users(v);
  for (const Node* n : g.nodes()) {
    for (const Value* v : n->outputs()) check_users(v);
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* v = g.outputs()[i];
    if (v == nullptr || !defined.count(v)) {
      bad("graph output " + std::to_string(i) + " is not defined in the graph");
    }
  }
}

}  // namespace coil
