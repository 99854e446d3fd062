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

// Strides of size-0/1 dims never address anything (PyTorch's view leaves them free: with a
// symbolic batch of 1 its view of [1, s, 16] keeps 16*s where coil's meta says s).
bool same_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                  const std::vector<sym::Expr>& a, const std::vector<sym::Expr>& b) {
  if (a.size() != b.size() || a.size() != sizes.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto n = ctx.as_const(sizes[i]);
    if (n && *n <= 1) continue;
    if (!same_expr(ctx, a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

void verify_graph_meta(const Graph& g) {
  verify_graph(g);
  sym::Context& ctx = g.ctx();
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node* n = g.nodes()[i];
    const OpDef* def = find_op(n->op());
    if (def == nullptr) continue;
    std::string where = "node " + std::to_string(i) + " (" + n->op() + ")";
    std::vector<TensorMeta> expected;
    try {
      expected = def->meta(ctx, OpCall::of(*n));
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
        ok = same_strides(ctx, got.sizes, want.strides, got.strides) &&
             same_expr(ctx, want.storage_offset, got.storage_offset);
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
