// When a copy (clone, or a _to_copy that keeps the dtype) needs no copying: the lowering of
// the copy ops (pointwise.cpp) returns its source instead where one of the two rules below holds.
#include <algorithm>
#include <vector>

#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/ops/registry.h"
#include "family_util.h"

namespace coil::lower::detail {

namespace {

// Whether `v` is read only by products (mm, addmm, bmm, baddbmm), directly or through view
// ops, and is not a graph output on the way.
bool read_only_by_products(const Value* v, const std::vector<const Value*>& outs, int depth = 0) {
  if (depth > 4 || v->users().empty()) return false;
  if (std::find(outs.begin(), outs.end(), v) != outs.end()) return false;
  for (const Node* u : v->users()) {
    const OpId op = u->op_id();
    if (is_matrix_product(op)) continue;
    const bool view = op == opid::aten_view_default || op == opid::aten__unsafe_view_default ||
                      op == opid::aten_reshape_default || op == opid::aten_permute_default ||
                      op == opid::aten_t_default || op == opid::aten_transpose_int ||
                      op == opid::aten_expand_default || op == opid::aten_unsqueeze_default ||
                      op == opid::aten_squeeze_dim || op == opid::aten_squeeze_dims;
    if (!view || u->outputs().size() != 1 || !read_only_by_products(u->output(0), outs, depth + 1))
      return false;
  }
  return true;
}

// A copy (clone, or a _to_copy that keeps the dtype) of a value already in an intermediate
// buffer, read only by products, reads that buffer instead. The graph is functional, so
// nothing writes the buffer afterwards, and a product returns no view of its operands. A copy
// that is a graph output, or read by anything else, still copies: the caller may write an
// output, and an output must not share storage the graph does not say it shares.
// DistilBERT's attention copies its input twice (_to_copy, then a clone for the key and value
// projections): each was a [tokens, hidden] copy before an extern product.
bool copy_may_alias(LoweringContext& lc, const Node& n, const TensorValue& x) {
  const Arg* fmt = n.kwarg("memory_format");
  if (fmt != nullptr && !fmt->is_none()) return false;
  if (!x.strided || x.strided->base < 0) return false;
  loop::BufferId root = x.strided->base;
  while (lc.program().buffer(root).kind == loop::BufferKind::View)
    root = lc.program().buffer(root).view_of;
  if (lc.program().buffer(root).kind != loop::BufferKind::Intermediate) return false;
  const auto& outs = lc.graph().outputs();
  return read_only_by_products(n.output(0), std::vector<const Value*>(outs.begin(), outs.end()));
}

// A copy that is a graph output (clone, or a _to_copy that keeps the dtype) of a value
// nothing else reads, already laid out as the output is, returns that value: its buffer
// becomes the output's. The front end's layout pass restores a graph output's traced strides
// with such a clone (python/coil/layout.py), which copied a weight gradient coil had computed
// in the traced layout anyway: ResNet-18's training step copied 8 of them, 0.3-0.5 ms each for
// 512-channel 3x3 weights on the 2-core CPU. The value must come from an op that makes a fresh
// tensor (not a view: its storage would be another value's), own its whole intermediate
// buffer (no offset, no elements beyond its own), and be read by the copy alone (so no other
// value, output or not, shares the storage the caller may then write).
bool output_copy_may_alias(LoweringContext& lc, const Node& n, const TensorValue& x) {
  const Value* src = n.arg(0, "self")->value();
  const Node* producer = src->producer();
  if (producer == nullptr || src->users().size() != 1) return false;
  const ops::OpDef* def = ops::find_op(producer->op_id());
  if (def == nullptr || def->family == ops::OpFamily::View) return false;
  const auto& outs = lc.graph().outputs();
  if (std::find(outs.begin(), outs.end(), src) != outs.end()) return false;
  if (std::find(outs.begin(), outs.end(), n.output(0)) == outs.end()) return false;
  if (!x.strided || x.strided->base < 0) return false;
  sym::Context& c = lc.ctx();
  if (x.strided->offset && c.as_const(x.strided->offset) != 0) return false;
  loop::BufferId root = x.strided->base;
  while (lc.program().buffer(root).kind == loop::BufferKind::View) {
    const loop::Buffer& v = lc.program().buffer(root);
    if (v.offset && c.as_const(v.offset) != 0) return false;
    root = v.view_of;
  }
  const loop::Buffer& R = lc.program().buffer(root);
  if (R.kind != loop::BufferKind::Intermediate) return false;
  sym::Expr numel = c.one(), root_numel = c.one();
  for (sym::Expr e : x.sizes) numel = c.mul(numel, e);
  for (sym::Expr e : R.sizes) root_numel = c.mul(root_numel, e);
  if (!c.provably_eq(numel, root_numel)) return false;
  const std::vector<sym::Expr> want = dense_strides_like(c, n.output(0)->meta());
  for (size_t d = 0; d < want.size(); ++d)
    if (c.as_const(x.sizes[d]) != 1 && !c.provably_eq(x.strided->strides[d], want[d])) return false;
  return true;
}

}  // namespace

bool copy_reads_its_source(LoweringContext& lc, const Node& n, const TensorValue& x) {
  return copy_may_alias(lc, n, x) || output_copy_may_alias(lc, n, x);
}

}  // namespace coil::lower::detail
