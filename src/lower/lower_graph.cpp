#include <algorithm>
#include <string>

#include "coil/lower/lower.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/ops/registry.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {

namespace {

// A graph's input mutations: copy_(input, value) without a result (src/lower/mutation.cpp).
constexpr OpId kInputMutationOp = opid::aten_copy__default;

void add_size_symbols(const Graph& graph, loop::LoopProgram& prog) {
  sym::Context& c = graph.ctx();
  auto known = [&](sym::Expr s) {
    return std::any_of(prog.size_symbols.begin(), prog.size_symbols.end(),
                       [&](const auto& e) { return e.symbol == s; });
  };
  const auto& inputs = graph.inputs();
  // Plain symbols first: sizes, then strides.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorMeta& m = inputs[i]->meta();
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      sym::Expr s = m.sizes[d];
      if (s->is_symbol() && !known(s)) {
        prog.size_symbols.push_back({s, static_cast<int>(i), static_cast<int>(d)});
      }
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorMeta& m = inputs[i]->meta();
    for (size_t d = 0; d < m.strides.size(); ++d) {
      sym::Expr s = m.strides[d];
      if (s->is_symbol() && !known(s)) {
        prog.size_symbols.push_back({s, static_cast<int>(i), -static_cast<int>(d) - 1});
      }
    }
  }
  // Every symbol inside a compound size or stride must be one of those.
  for (const Value* v : inputs) {
    const TensorMeta& m = v->meta();
    std::vector<sym::Expr> all = m.sizes;
    all.insert(all.end(), m.strides.begin(), m.strides.end());
    if (m.storage_offset) all.push_back(m.storage_offset);
    for (sym::Expr e : all) {
      for (sym::Expr s : c.free_symbols(e)) {
        COIL_USER_CHECK(known(s)) << "symbol " << c.str(s)
                                  << " is not a size or stride of any graph input";
      }
    }
  }
}

// An op without a lowering (or whose lowering refused it) runs eagerly on the host, by its
// position, with the node's tensor inputs: the same extern as ATen-backed CUDA ops.
void fallback(LoweringContext& lc, const Node& node) {
  std::vector<TensorValue> outs = detail::aten_extern(lc, node);
  for (size_t k = 0; k < outs.size(); ++k) lc.set_value(node.output(k), outs[k]);
}

}  // namespace

LowerResult lower_graph(const Graph& graph, const CompileOptions& options,
                        const backend::TargetPolicy& target) {
  LowerResult res;
  loop::LoopProgram& prog = res.program;
  prog.ctx = &graph.ctx();
  LoweringContext lc(graph, options, target.lowering, prog);

  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value* v = graph.inputs()[i];
    const TensorMeta& m = v->meta();
    loop::Buffer b;
    b.kind = loop::BufferKind::Input;
    b.dtype = m.dtype;
    b.device = m.device;
    b.sizes = m.sizes;
    b.strides =
        m.strides.size() == m.sizes.size() ? m.strides : contiguous_strides(graph.ctx(), m.sizes);
    b.input_index = static_cast<int>(i);
    loop::BufferId id = prog.add_buffer(std::move(b));
    prog.inputs.push_back(id);
    lc.set_value(v, lc.from_buffer(id));
  }
  add_size_symbols(graph, prog);

  const LoweringRegistry& registry = lowering_registry();
  const auto& nodes = graph.nodes();
  std::vector<const Node*> mutations;
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    const Node& node = *nodes[pos];
    if (node.op_id() == kInputMutationOp) {
      // Lowered last (below): every other reader of the input comes before the write.
      COIL_USER_CHECK(node.outputs().empty()) << node.op() << ": its result must be unused";
      mutations.push_back(&node);
      continue;
    }
    const LoweringFn* fn = registry.find(node.op_id());
    // The op table's rule: what coil lowers has a meta function, which verify_graph_meta
    // checked this node's metas with (tests/cpp/lower: EveryLoweredOpHasAMeta).
    const char* missing = fn == nullptr                           ? "no lowering"
                          : ops::find_op(node.op_id()) == nullptr ? "no meta function"
                                                                  : nullptr;
    if (missing != nullptr) {
      COIL_USER_CHECK(!options.strict) << node.op() << ": " << missing;
      res.fallback_ops.push_back(node.op() + ": " + missing);
      fallback(lc, node);
      continue;
    }
    std::vector<TensorValue> outs;
    try {
      outs = (*fn)(lc, node);
    } catch (const CompileError& e) {
      if (options.strict) throw;
      // Whatever the lowering added before failing stays as dead steps; the scheduler drops them.
      res.fallback_ops.push_back(node.op() + ": " + e.what());
      fallback(lc, node);
      continue;
    }
    COIL_CHECK(outs.size() == node.outputs().size())
        << node.op() << ": lowering returned " << outs.size() << " values for "
        << node.outputs().size() << " outputs";
    for (size_t k = 0; k < outs.size(); ++k) {
      const TensorMeta& m = node.output(k)->meta();
      COIL_CHECK(outs[k].dtype == m.dtype)
          << node.op() << ": lowered output " << k << " has dtype " << dtype_name(outs[k].dtype)
          << ", the graph says " << dtype_name(m.dtype);
      COIL_CHECK(outs[k].sizes.size() == m.sizes.size())
          << node.op() << ": lowered output " << k << " has rank " << outs[k].sizes.size()
          << ", the graph says " << m.sizes.size();
      COIL_CHECK(outs[k].load != nullptr) << node.op() << ": output " << k << " has no loader";
      outs[k].device = m.device;
      lc.set_value(node.output(k), std::move(outs[k]));
    }
    apply_realize_rule(lc, node);
  }

  for (const Value* v : graph.outputs()) {
    const TensorValue& tv = lc.value(v);
    if (tv.strided) {
      prog.outputs.push_back(lc.as_buffer(tv));
    } else {
      TensorValue r = lc.realize_with_strides(tv, dense_strides_like(graph.ctx(), v->meta()));
      prog.outputs.push_back(lc.as_buffer(r));
    }
  }
  std::vector<loop::BufferId> written;
  for (const Node* m : mutations) written.push_back(detail::mutated_input_buffer(lc, *m));
  for (const Node* m : mutations) detail::lower_input_mutation(lc, *m, written);
  return res;
}

}  // namespace coil::lower
