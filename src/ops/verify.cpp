#include "coil/ops/verify.h"

#include "coil/graph/printer.h"
#include "coil/graph/verifier.h"
#include "coil/ops/registry.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

bool same_expr(sym::Context& ctx, sym::Expr a, sym::Expr b) {
  if (a == nullptr) a = ctx.zero();
  if (b == nullptr) b = ctx.zero();
  return a == b || ctx.provably_eq(a, b);
}

bool same_list(sym::Context& ctx, const std::vector<sym::Expr>& a,
               const std::vector<sym::Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_expr(ctx, a[i], b[i])) return false;
  }
  return true;
}

// A view's strides as PyTorch means them: a size-1 dim's stride is never used (PyTorch's own
// meta functions give it different values, e.g. expand and view), and an empty tensor has no
// elements to place, so neither its strides nor its offset matter.
bool same_layout(sym::Context& ctx, const TensorMeta& want, const TensorMeta& got) {
  for (sym::Expr s : want.sizes) {
    if (ctx.provably_eq(s, ctx.zero())) return true;
  }
  if (want.strides.size() != got.strides.size()) return false;
  for (size_t i = 0; i < want.strides.size(); ++i) {
    if (i < want.sizes.size() && ctx.provably_eq(want.sizes[i], ctx.one())) continue;
    if (!same_expr(ctx, want.strides[i], got.strides[i])) return false;
  }
  return same_expr(ctx, want.storage_offset, got.storage_offset);
}

// The node's arguments against its op's schema: every keyword is an argument of the op and is
// not also given by position, there are no more positional arguments than the op has, and
// every argument without a default is given. The message, or "" when they fit.
std::string check_against_schema(const Node& n, const OpSchema& s) {
  const size_t npos = n.args().size();
  if (npos > s.args.size())
    return std::to_string(npos) + " positional arguments, its op takes " +
           std::to_string(s.args.size());
  for (const auto& [name, arg] : n.kwargs()) {
    const int k = s.index_of(name);
    if (k < 0) return "keyword argument '" + name + "' is not an argument of its op";
    if (static_cast<size_t>(k) < npos)
      return "argument '" + name + "' is given by position and by keyword";
  }
  for (size_t k = npos; k < s.args.size(); ++k) {
    const ArgSchema& a = s.args[k];
    if (a.has_default || a.optional) continue;
    if (n.kwarg(a.name) == nullptr) return "required argument '" + a.name + "' is missing";
  }
  return "";
}

}  // namespace

void verify_graph_meta(const Graph& g) {
  verify_graph(g);
  sym::Context& ctx = g.ctx();
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node* n = g.nodes()[i];
    const OpDef* def = find_op(n->op_id());
    if (def == nullptr) continue;
    std::string where = "node " + std::to_string(i) + " (" + n->op() + ")";
    const OpSchema* schema = def->schema.known ? &def->schema : nullptr;
    if (schema != nullptr) {
      std::string bad = check_against_schema(*n, *schema);
      if (!bad.empty()) throw CompileError("graph verification failed: " + where + ": " + bad);
    }
    std::vector<TensorMeta> expected;
    try {
      expected = def->meta(ctx, OpCall(n->op_id(), n->args(), n->kwargs(), schema));
    } catch (const CompileError& e) {
      throw CompileError("graph verification failed: " + where + ": " + e.what());
    }
    if (expected.size() != n->outputs().size()) {
      throw CompileError("graph verification failed: " + where + " has " +
                         std::to_string(n->outputs().size()) + " outputs, its op has " +
                         std::to_string(expected.size()));
    }
    for (size_t k = 0; k < expected.size(); ++k) {
      TensorMeta want = expected[k];
      const TensorMeta& got = n->output(k)->meta();
      bool ok = want.dtype == got.dtype && want.device == got.device &&
                same_list(ctx, want.sizes, got.sizes);
      if (ok && def->family == OpFamily::View) {
        ok = same_layout(ctx, want, got);
      }
      if (!ok) {
        throw CompileError("graph verification failed: " + where + " output " + std::to_string(k) +
                           " is " + print_meta(ctx, got) + ", its meta function says " +
                           print_meta(ctx, want));
      }
    }
  }
}

}  // namespace coil::ops
