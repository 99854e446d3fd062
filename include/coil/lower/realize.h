// The realize-or-inline rule, in one place.
//
// A lowered value stays an inline loader (its consumers recompute it element by element) unless:
//   - options.inline_pointwise is off (every computed value is realized), or
//   - it is a graph output (realized right away, so later users read the buffer), or
//   - it has several users and its inline_cost is above kReuseInlineCost, unless it is cheap
//     to recompute: it costs no more than the target's LoweringPolicy::cheap_recompute_cost
//     and its F full reads (buffers read element per element, not broadcast) cost its U
//     readers no more than realizing it would even where no reader loads them anyway:
//     U (F - 1) <= F + 1 transfers (always for F <= 1). Such a value then counts as the loads
//     of its F buffers (reuse cost 1: TensorValue::reuse_cost) to its readers' own reuse
//     decisions, as the realized value would count as one, or
//   - inlining it would read more than options.max_inline_reads buffers, or
//   - its inline_cost is above kMaxInlineCost (keeps bodies small), or
//   - it feeds an extern kernel or a fallback (LoweringContext::as_buffer realizes it), or
//   - a matrix product reads it (directly or through views) and something else reads it too:
//     realized once, so that neither the product copies it nor the others recompute it, or
//   - it is a large CUDA matrix with unaligned columns that only products read (directly or
//     transposed): realized once, into a zero-padded buffer the products read in place
//     (lower/linalg.cpp, detail::realize_zero_padded).
// Values that are strided windows of a buffer (inputs, realized buffers, views of them) are never
// copied by this rule.
#pragma once

#include "coil/lower/lowering.h"

namespace coil::lower {

// A value with several users is realized when inlining it costs more than this many
// instructions per element.
inline constexpr int kReuseInlineCost = 8;
// Any value whose inline body grows beyond this many instructions is realized.
inline constexpr int kMaxInlineCost = 100;

enum class RealizeReason { None, Output, Reuse, Reads, Cost, NoInline };

// Whether `v`, which the reuse rule would realize for its `num_users` readers (several, cost
// above kReuseInlineCost), is cheaper recomputed by each than realized once
// (LoweringPolicy::cheap_recompute_cost; option recompute_cheap_values). False where the reuse
// rule would not realize it.
bool cheap_to_recompute(const TensorValue& v, int num_users, const CompileOptions& options,
                        const backend::LoweringPolicy& target);

// Why `v` (with `num_users` distinct consumer nodes) must be realized, or None.
RealizeReason realize_reason(const TensorValue& v, int num_users, bool is_graph_output,
                             const CompileOptions& options, const backend::LoweringPolicy& target);

// The strides to realize a value of `meta`'s shape with: meta's own strides when they are
// constants forming a dense non-overlapping layout (e.g. channels-last or a transposed output of
// the front end), else row-major strides.
std::vector<sym::Expr> dense_strides_like(sym::Context& ctx, const TensorMeta& meta);

// Applies the rule to every output of `node` (already lowered and stored in ctx).
void apply_realize_rule(LoweringContext& ctx, const Node& node);

}  // namespace coil::lower
