#include "coil/ops/registry.h"

#include <algorithm>
#include <atomic>
#include <mutex>

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
  // Only a positional argument of the schema is checked: past them (arg(99, "dtype"), or a
  // keyword-only argument's place) a meta function asks for a keyword by name, and one meta
  // shared by several overloads may ask for a keyword only some of them have (all.default
  // has no `dim`).
  if (schema != nullptr && schema->known && !name.empty() && i < schema->args.size() &&
      !schema->args[i].kwarg_only) {
    COIL_CHECK(schema->args[i].name == name)
        << op << ": a meta function asks for argument " << i << " as '" << name
        << "', the schema calls it '" << schema->args[i].name << "'";
  }
  for (const auto& [k, a] : kwargs) {
    if (k == name) return &a;
  }
  return nullptr;
}

void OpRegistry::add(std::string name, OpFamily family, MetaFn meta, std::string schema_text) {
  COIL_CHECK(meta != nullptr) << "op " << name << " registered without a meta function";
  OpDef d{std::move(name), family, meta, std::move(schema_text)};
  std::string_view text = d.schema_text.empty() ? builtin_schema_text(d.name) : d.schema_text;
  if (!text.empty()) {
    std::optional<OpSchema> s = parse_schema(text);
    COIL_USER_CHECK(s.has_value())
        << "op " << d.name << ": cannot parse its schema '" << text << "'";
    d.schema = std::move(*s);
  }
  d.id = OpId::of(d.name);
  ops_.push_back(std::move(d));
}

void OpRegistry::finish() {
  std::sort(ops_.begin(), ops_.end(),
            [](const OpDef& a, const OpDef& b) { return a.name < b.name; });
  for (size_t i = 1; i < ops_.size(); ++i) {
    COIL_CHECK(ops_[i - 1].name != ops_[i].name) << "op registered twice: " << ops_[i].name;
  }
  by_id_.assign(OpId::count(), -1);
  for (size_t i = 0; i < ops_.size(); ++i) {
    COIL_CHECK(ops_[i].id.index() < by_id_.size());
    by_id_[ops_[i].id.index()] = static_cast<int32_t>(i);
  }
}

const OpDef* OpRegistry::find(std::string_view name) const {
  std::optional<OpId> id = OpId::find(name);
  return id ? find(*id) : nullptr;
}

// The creation family (factories, *_like, fill, copy: src/ops/creation.cpp).
void register_creation_ops(OpRegistry& r);

// Index/scatter (index.cpp) and neural-network (nn.cpp) families.
void register_index_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);

namespace {

OpRegistry builtin_ops() {
  OpRegistry r;
  register_pointwise_ops(r);
  register_reduction_ops(r);
  register_view_ops(r);
  register_linalg_ops(r);
  register_shape_ops(r);
  register_index_ops(r);
  register_nn_ops(r);
  register_creation_ops(r);
  return r;
}

// Plugins add ops after the first lookup (a model may be compiled before a plugin loads), so
// the registry cannot stay a function-local constant. Instead of a lock on every lookup (one
// per node, in verification and lowering), the registry is an immutable table published
// through an atomic pointer: register_ops copies the current table, adds, and publishes the
// copy under a mutex. A replaced table is never freed (a few per process, one per plugin), so
// the OpDef pointers and registry references that readers hold stay valid.
std::mutex& publish_mutex() {
  static std::mutex m;
  return m;
}
std::atomic<const OpRegistry*> published{nullptr};

}  // namespace

const OpRegistry& op_registry() {
  if (const OpRegistry* r = published.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(publish_mutex());
  const OpRegistry* r = published.load(std::memory_order_relaxed);
  if (r == nullptr) {
    auto* built = new OpRegistry(builtin_ops());
    built->finish();
    published.store(built, std::memory_order_release);
    r = built;
  }
  return *r;
}

void register_ops(std::vector<OpDef> defs) {
  op_registry();  // builds the built-in table first (it takes the mutex itself)
  std::lock_guard<std::mutex> lock(publish_mutex());
  const OpRegistry& base = *published.load(std::memory_order_relaxed);
  for (size_t i = 0; i < defs.size(); ++i) {
    COIL_USER_CHECK(defs[i].meta != nullptr) << "op " << defs[i].name << " has no meta function";
    COIL_USER_CHECK(base.find(defs[i].name) == nullptr)
        << "op " << defs[i].name << " is already registered";
    for (size_t j = 0; j < i; ++j)
      COIL_USER_CHECK(defs[j].name != defs[i].name) << "op " << defs[i].name << " registered twice";
  }
  auto* next = new OpRegistry(base);
  for (OpDef& d : defs) next->add(std::move(d.name), d.family, d.meta, std::move(d.schema_text));
  next->finish();
  published.store(next, std::memory_order_release);
}

const OpDef* find_op(OpId id) { return op_registry().find(id); }

const OpDef* find_op(std::string_view name) { return op_registry().find(name); }

std::vector<TensorMeta> infer_meta(sym::Context& ctx, const OpCall& call) {
  const OpDef* def = find_op(call.id);
  COIL_USER_CHECK(def != nullptr) << "no meta function for op " << call.op;
  if (call.schema != nullptr || !def->schema.known) return def->meta(ctx, call);
  return def->meta(ctx, OpCall(call.id, call.args, call.kwargs, &def->schema));
}

std::vector<TensorMeta> infer_meta(sym::Context& ctx, const Node& node) {
  return infer_meta(ctx, OpCall::of(node));
}

Node* add_node_inferred(Graph& g, OpId op, std::vector<Arg> args,
                        std::vector<std::pair<std::string, Arg>> kwargs) {
  std::vector<TensorMeta> metas = infer_meta(g.ctx(), OpCall(op, args, kwargs));
  return g.add_node(op, std::move(args), std::move(kwargs), std::move(metas));
}

}  // namespace coil::ops
