#include "coil/lower/realize.h"

#include <algorithm>

#include "coil/graph/tensor_meta.h"
#include "family_util.h"

namespace coil::lower {

bool cheap_to_recompute(const TensorValue& v, int num_users, const CompileOptions& options,
                        const backend::LoweringPolicy& target) {
  if (num_users <= 1 || v.cost_for_reuse() <= kReuseInlineCost) return false;  // not reused
  if (!options.recompute_cheap_values || v.strided ||
      v.cost_for_reuse() > target.cheap_recompute_cost)
    return false;
  // In element-sized transfers: realized, the value costs its F full reads and a write; inline,
  // each of its U readers loads F buffers instead of one, at worst F - 1 more each (readers
  // that load those buffers anyway, as BatchNorm's backward reductions load its input, pay
  // nothing). Inline where that worst case is no more.
  const int64_t f = v.full_reads();
  return f <= 1 || int64_t{num_users} * (f - 1) <= f + 1;
}

RealizeReason realize_reason(const TensorValue& v, int num_users, bool is_graph_output,
                             const CompileOptions& options, const backend::LoweringPolicy& target) {
  if (v.strided) return RealizeReason::None;  // already a window onto storage
  if (is_graph_output) return RealizeReason::Output;
  if (num_users == 0) return RealizeReason::None;  // dead (or only a graph output)
  if (!options.inline_pointwise) return RealizeReason::NoInline;
  if (v.inline_reads > options.max_inline_reads) return RealizeReason::Reads;
  if (v.inline_cost > kMaxInlineCost) return RealizeReason::Cost;
  if (num_users > 1 && v.cost_for_reuse() > kReuseInlineCost)
    return cheap_to_recompute(v, num_users, options, target) ? RealizeReason::None
                                                             : RealizeReason::Reuse;
  return RealizeReason::None;
}

std::vector<sym::Expr> dense_strides_like(sym::Context& ctx, const TensorMeta& meta) {
  std::vector<sym::Expr> contiguous = contiguous_strides(ctx, meta.sizes);
  size_t n = meta.sizes.size();
  if (meta.strides.size() != n) return contiguous;
  std::vector<int64_t> sizes(n), strides(n);
  for (size_t k = 0; k < n; ++k) {
    auto sz = ctx.as_const(meta.sizes[k]);
    auto st = ctx.as_const(meta.strides[k]);
    if (!sz || !st || *st < 0) return contiguous;
    sizes[k] = *sz;
    strides[k] = *st;
  }
  // Dims of size 1 may have any stride; the others, sorted by stride, must nest exactly.
  std::vector<size_t> order;
  for (size_t k = 0; k < n; ++k) {
    if (sizes[k] == 0) return contiguous;
    if (sizes[k] != 1) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t k : order) {
    if (strides[k] != expected) return contiguous;
    expected *= sizes[k];
  }
  std::vector<sym::Expr> out(n);
  for (size_t k = 0; k < n; ++k) {
    out[k] = sizes[k] == 1 ? contiguous[k] : ctx.constant(strides[k]);
  }
  return out;
}

namespace {

// Whether every reader of `v` is a matrix product or a transposed view (which a product reads).
bool feeds_products(const Value* v) {
  for (const Node* u : v->users()) {
    const OpId op = u->op_id();
    if (!detail::is_matrix_product(op) && op != opid::aten_permute_default &&
        op != opid::aten_t_default && op != opid::aten_transpose_int)
      return false;
  }
  return true;
}

// Whether some reader of `v` takes it from memory (a matrix product or a convolution),
// directly or through views (a transposed weight-gradient operand, a reshape to 2-d, the
// expand AOTAutograd puts before every batched product's operand: attention's score gradient
// reaches its two products through expand + view and permute + expand + view, and was
// computed again into each).
bool read_from_memory(const Value* v, int depth = 0) {
  for (const Node* u : v->users()) {
    const OpId op = u->op_id();
    if (detail::reads_operands_from_memory(op)) return true;
    const bool view = op == opid::aten_permute_default || op == opid::aten_t_default ||
                      op == opid::aten_transpose_int || op == opid::aten_view_default ||
                      op == opid::aten__unsafe_view_default || op == opid::aten_reshape_default ||
                      op == opid::aten_expand_default;
    if (view && depth < 4)
      for (const Value* o : u->outputs())
        if (read_from_memory(o, depth + 1)) return true;
  }
  return false;
}

}  // namespace

void apply_realize_rule(LoweringContext& ctx, const Node& node) {
  const auto& outs = ctx.graph().outputs();
  for (const Value* out : node.outputs()) {
    std::vector<const Node*> users(out->users().begin(), out->users().end());
    std::sort(users.begin(), users.end());
    int distinct = static_cast<int>(std::unique(users.begin(), users.end()) - users.begin());
    bool is_output = std::find(outs.begin(), outs.end(), out) != outs.end();
    // Graph outputs are realized at the end of lowering (with the output's layout); here only
    // when something else reads them too, so that the users read the buffer.
    if (is_output && distinct == 0) continue;
    const TensorValue& tv = ctx.value(out);
    // Read only by products (directly or transposed), which would each realize it: once,
    // zero-padded where they would pad it (detail::realize_zero_padded).
    if (!is_output && distinct > 0 && !tv.strided && feeds_products(out)) {
      if (auto cols = detail::gemm_operand_pad(ctx, tv)) {
        ctx.set_value(out, detail::realize_zero_padded(ctx, tv, *cols));
        continue;
      }
    }
    // A product or a convolution reads it from memory, and others read it too: realized once,
    // in its own layout. The product then reads the buffer in place (transposed where it
    // reads a transposed view) and the other readers load it, where each would otherwise
    // recompute it from its inputs and the product would realize a copy of its own: OPT's
    // ReLU gradient was computed three times per layer, once into a transposed copy for the
    // weight gradient; ResNet-50's block output, read by the next block's first convolution
    // and its downsampling one, was stored twice by one kernel.
    if (!is_output && distinct > 1 && !tv.strided && tv.inline_reads > 0 &&
        ctx.options().inline_pointwise && read_from_memory(out)) {
      ctx.realize(tv);
      continue;
    }
    const RealizeReason why = realize_reason(tv, distinct, is_output, ctx.options(), ctx.target());
    if (why == RealizeReason::None &&
        cheap_to_recompute(tv, distinct, ctx.options(), ctx.target())) {
      // Kept inline as cheap to recompute: to its readers' own reuse decisions it counts as
      // the loads of its full-size buffers, as the realized value would count as one (its
      // arithmetic and its broadcast operands are what the target counts as free), so that a
      // reader which would have stayed inline over the realized value still does. Its real
      // cost stays in inline_cost, which kMaxInlineCost bounds.
      TensorValue cheap = tv;
      cheap.reuse_cost = 1;
      cheap.read_buffers = tv.full_read_buffers;  // its broadcast operands left out
      cheap.inline_reads = tv.full_reads();
      ctx.set_value(out, std::move(cheap));
      continue;
    }
    if (why != RealizeReason::None) {
      if (is_output) {
        ctx.realize_with_strides(tv, dense_strides_like(ctx.ctx(), out->meta()));
      } else {
        ctx.realize(tv);  // replaces the stored value
      }
    }
  }
}

}  // namespace coil::lower
