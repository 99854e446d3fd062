// A graph pass: arithmetic with a neutral Python number is its input, when nothing about the
// value changes (dtype, device, sizes, strides, offset): the readers read the input instead,
// and dce removes the node. Graph outputs are left alone (a pass keeps what the graph returns).
#include <algorithm>

#include "example.h"

namespace coil_example {

using namespace coil;

namespace {

bool is_number(const Arg* a, double v) {
  return a != nullptr && (a->is_double() || a->is_int()) && a->as_double() == v;
}

// The number that leaves op's first operand unchanged, for the ops this pass knows.
bool neutral_right_operand(const Node& n) {
  const std::string& op = n.op();
  const Arg* alpha = n.arg(2, "alpha");
  const bool plain_alpha = alpha == nullptr || alpha->is_none() || is_number(alpha, 1);
  if (op == "aten.mul.Tensor" || op == "aten.mul.Scalar" || op == "aten.div.Tensor" ||
      op == "aten.div.Scalar")
    return is_number(n.arg(1, "other"), 1);
  if (op == "aten.add.Tensor" || op == "aten.add.Scalar" || op == "aten.sub.Tensor" ||
      op == "aten.sub.Scalar")
    return plain_alpha && is_number(n.arg(1, "other"), 0);
  return false;
}

bool same_meta(const TensorMeta& a, const TensorMeta& b) {
  auto offset = [](const TensorMeta& m) {
    return m.storage_offset != nullptr && m.storage_offset->is_const() &&
                   m.storage_offset->value == 0
               ? nullptr
               : m.storage_offset;
  };
  return a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.strides == b.strides && offset(a) == offset(b);
}

class IdentityArithPass final : public passes::Pass {
 public:
  std::string_view name() const override { return "coil_example_identity_arith"; }
  bool run(Graph& g, const CompileOptions& options) override {
    bool changed = false;
    for (Node* n : g.nodes()) {
      if (n->outputs().size() != 1 || !neutral_right_operand(*n)) continue;
      const Arg& self = n->args().at(0);
      if (!self.is_value()) continue;
      Value* in = self.value();
      Value* out = n->output();
      if (!same_meta(in->meta(), out->meta()) || out->users().empty()) continue;
      const auto& outs = g.outputs();
      if (std::find(outs.begin(), outs.end(), out) != outs.end()) continue;
      g.replace_all_uses(out, in);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<passes::Pass> make_identity_arith_pass() {
  return std::make_unique<IdentityArithPass>();
}

}  // namespace coil_example
