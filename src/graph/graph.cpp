#include "coil/graph/graph.h"

#include <algorithm>
#include <unordered_set>

#include "coil/support/error.h"

namespace coil {

int64_t Arg::as_int() const {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (auto* e = std::get_if<sym::Expr>(&v)) {
    if ((*e)->is_const()) return (*e)->value;
    COIL_UNSUPPORTED() << "expected an integer argument, got a symbolic expression";
  }
  COIL_UNSUPPORTED() << "expected an integer argument (variant index " << v.index() << ")";
}

double Arg::as_double() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  COIL_UNSUPPORTED() << "expected a number argument (variant index " << v.index() << ")";
}

const Arg* Node::kwarg(std::string_view name) const {
  for (const auto& [k, a] : kwargs_) {
    if (k == name) return &a;
  }
  return nullptr;
}

const Arg* Node::arg(size_t i, std::string_view name) const {
  if (i < args_.size()) return &args_[i];
  return kwarg(name);
}

namespace {

void collect_values(const Arg& a, std::vector<Value*>& out) {
  if (a.is_value()) {
    out.push_back(a.value());
  } else if (a.is_list()) {
    for (const Arg& e : a.list()) collect_values(e, out);
  }
}

void replace_in_arg(Arg& a, Value* from, Value* to) {
  if (a.is_value()) {
    if (a.value() == from) a.v = to;
  } else if (auto* l = std::get_if<Arg::List>(&a.v)) {
    for (Arg& e : *l) replace_in_arg(e, from, to);
  }
}

}  // namespace

std::vector<Value*> Node::input_values() const {
  std::vector<Value*> out;
  for (const Arg& a : args_) collect_values(a, out);
  for (const auto& kv : kwargs_) collect_values(kv.second, out);
  return out;
}

Value* Graph::new_value(TensorMeta meta) {
  Value& v = values_.emplace_back();
  v.id_ = next_value_id_++;
  v.meta_ = std::move(meta);
  return &v;
}

Value* Graph::add_input(TensorMeta meta) {
  Value* v = new_value(std::move(meta));
  inputs_.push_back(v);
  return v;
}

Node* Graph::add_node(OpId op, std::vector<Arg> args,
                      std::vector<std::pair<std::string, Arg>> kwargs,
                      std::vector<TensorMeta> output_metas) {
  COIL_CHECK(op.valid()) << "node without an op";
  Node& n = node_store_.emplace_back();
  n.op_ = op;
  n.args_ = std::move(args);
  n.kwargs_ = std::move(kwargs);
  for (Value* in : n.input_values()) {
    COIL_CHECK(in != nullptr) << "null value argument to " << n.op();
    in->users_.push_back(&n);
  }
  for (size_t i = 0; i < output_metas.size(); ++i) {
    Value* v = new_value(std::move(output_metas[i]));
    v->producer_ = &n;
    v->output_index_ = static_cast<int>(i);
    n.outputs_.push_back(v);
  }
  order_.push_back(&n);
  return &n;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  for (Value* v : outputs) COIL_CHECK(v != nullptr) << "null graph output";
  outputs_ = std::move(outputs);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Node*> users = std::move(from->users_);
  from->users_.clear();
  std::unordered_set<Node*> done;
  for (Node* n : users) {
    if (!done.insert(n).second) continue;
    for (Arg& a : n->args_) replace_in_arg(a, from, to);
    for (auto& kv : n->kwargs_) replace_in_arg(kv.second, from, to);
  }
  // `users` holds each node once per use, which is exactly what `to` gains.
  to->users_.insert(to->users_.end(), users.begin(), users.end());
  for (Value*& o : outputs_) {
    if (o == from) o = to;
  }
}

int Graph::remove_dead_nodes() {
  std::unordered_set<const Value*> live_outputs(outputs_.begin(), outputs_.end());
  std::vector<bool> dead(order_.size(), false);
  int removed = 0;
  for (size_t i = order_.size(); i-- > 0;) {
    Node* n = order_[i];
    bool used = n->outputs_.empty();  // a node without outputs exists for its effect (asserts)
    for (Value* v : n->outputs_) {
      if (!v->users_.empty() || live_outputs.count(v)) {
        used = true;
        break;
      }
    }
    if (used) continue;
    dead[i] = true;
    ++removed;
    for (Value* in : n->input_values()) {
      auto& u = in->users_;
      auto it = std::find(u.begin(), u.end(), n);
      COIL_CHECK(it != u.end()) << "users list of %" << in->id_ << " misses a user";
      u.erase(it);
    }
  }
  if (removed == 0) return 0;
  std::vector<Node*> kept;
  kept.reserve(order_.size() - removed);
  for (size_t i = 0; i < order_.size(); ++i) {
    if (!dead[i]) kept.push_back(order_[i]);
  }
  order_ = std::move(kept);
  return removed;
}

}  // namespace coil
