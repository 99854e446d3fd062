#include "coil/sched/align.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched {
namespace {

using loop::BufferId;
using loop::ComputeNode;
using sym::Expr;

// Splits n's outer dims so that its ranges start with `outer` (a reduction's ranges must then
// equal `outer`). A dim is split when it is provably a multiple of the outer size: 2048 into
// 8 x 256, or s0*s1 into s0 x s1 (dynamic shapes). Returns nullopt when that is impossible or
// nothing changes.
std::optional<ComputeNode> split_to(const ComputeNode& n, const std::vector<Expr>& outer,
                                    sym::Context& ctx, int step) {
  std::vector<Expr> ranges, vars;
  std::unordered_map<Expr, Expr> old_value;  // old index var -> expression of new vars
  size_t i = 0;
  bool changed = false;
  int fresh = 0;
  auto new_var = [&](Expr size) {
    Expr v = ctx.symbol("j" + std::to_string(step) + "_" + std::to_string(fresh++));
    auto c = ctx.as_const(size);
    if (c) {
      ctx.set_range(v, sym::Range{0, *c - 1});
    } else {
      ctx.set_upper_bound(v, size);
    }
    return v;
  };
  std::vector<std::pair<Expr, Expr>> parts;  // (var, size) of the dim being split
  auto finish_dim = [&](size_t dim) {
    Expr value = ctx.zero();
    for (auto& [v, size] : parts) value = ctx.add(ctx.mul(value, size), v);
    old_value[n.index_vars[dim]] = value;
    parts.clear();
  };
  Expr rem = nullptr;  // what is left of a dim being split
  for (Expr o : outer) {
    if (i >= n.ranges.size()) return std::nullopt;
    Expr cur = rem ? rem : n.ranges[i];
    if (cur == o || ctx.provably_eq(cur, o)) {
      Expr v = parts.empty() ? n.index_vars[i] : new_var(o);
      if (!parts.empty() || rem) {
        parts.push_back({v, o});
        finish_dim(i);
      } else {
        old_value[n.index_vars[i]] = v;
      }
      ranges.push_back(o);
      vars.push_back(v);
      ++i;
      rem = nullptr;
      continue;
    }
    // o must divide cur exactly, with a quotient > 1 and o > 1 (both provably).
    if (ctx.bounds(o).lo <= 1) return std::nullopt;
    Expr q = ctx.floordiv(cur, o);
    if (q->kind == sym::ExprKind::FloorDiv || ctx.bounds(q).lo <= 1) return std::nullopt;
    Expr back = ctx.mul(q, o);
    if (back != cur && !ctx.provably_eq(back, cur)) return std::nullopt;
    Expr v = new_var(o);
    parts.push_back({v, o});
    ranges.push_back(o);
    vars.push_back(v);
    rem = q;
    changed = true;
  }
  if (rem) {  // the rest of a split dim becomes the first inner dim
    Expr size = rem;
    Expr v = new_var(size);
    parts.push_back({v, size});
    finish_dim(i);
    ranges.push_back(size);
    vars.push_back(v);
    ++i;
  }
  for (; i < n.ranges.size(); ++i) {
    ranges.push_back(n.ranges[i]);
    vars.push_back(n.index_vars[i]);
  }
  if (!changed) return std::nullopt;
  if (n.is_reduction() && ranges.size() != outer.size()) return std::nullopt;

  ComputeNode out = n;
  out.ranges = ranges;
  out.index_vars = vars;
  auto subst = [&](Expr e) { return e ? ctx.substitute(e, old_value) : e; };
  for (loop::Instr& in : out.body.instrs) {
    for (Expr& e : in.index) e = subst(e);
    in.expr = in.kind == loop::InstrKind::Indirect ? in.expr : subst(in.expr);
  }
  for (Expr& e : out.store_index) e = subst(e);
  return out;
}

// n's dims in its output's memory order (outermost first: strides descending, ties in the
// node's order), or nullopt where that is the order already or cannot be told: n must be
// pointwise and store to a buffer of constant strides at its index variables, one per dim.
std::optional<ComputeNode> in_memory_order(const ComputeNode& n, const loop::Buffer& out,
                                           sym::Context& ctx) {
  if (n.is_reduction() || out.kind == loop::BufferKind::View) return std::nullopt;
  const size_t d = n.index_vars.size();
  if (d < 2 || n.store_index.size() != d || out.strides.size() != d) return std::nullopt;
  std::vector<int64_t> stride(d, -1);  // per index variable
  for (size_t k = 0; k < d; ++k) {
    auto it = std::find(n.index_vars.begin(), n.index_vars.end(), n.store_index[k]);
    const std::optional<int64_t> st = ctx.as_const(out.strides[k]);
    if (it == n.index_vars.end() || !st) return std::nullopt;
    const size_t v = static_cast<size_t>(it - n.index_vars.begin());
    if (stride[v] >= 0) return std::nullopt;
    // A dim of size 1 has no order: it keeps its place (its stride counts as the largest).
    stride[v] = ctx.as_const(n.ranges[v]) == std::optional<int64_t>(1)
                    ? std::numeric_limits<int64_t>::max()
                    : *st;
  }
  std::vector<size_t> order(d);
  for (size_t v = 0; v < d; ++v) order[v] = v;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return stride[a] > stride[b]; });
  bool same = true;
  for (size_t v = 0; v < d; ++v) same = same && order[v] == v;
  if (same) return std::nullopt;
  ComputeNode r = n;
  for (size_t v = 0; v < d; ++v) {
    r.ranges[v] = n.ranges[order[v]];
    r.index_vars[v] = n.index_vars[order[v]];
  }
  return r;
}

// Per buffer, the steps (in order) of the row reductions that load it: reductions with outer
// ranges, the candidates of split_to_row_reader.
std::vector<std::vector<int>> row_readers(const loop::LoopProgram& p) {
  std::vector<std::vector<int>> readers(p.buffers.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto* r = std::get_if<ComputeNode>(&p.steps[s]);
    if (r == nullptr || !r->is_reduction() || r->ranges.empty() || r->reduction_ranges.empty())
      continue;
    for (const loop::Instr& in : r->body.instrs)
      if (in.kind == loop::InstrKind::Load &&
          (readers[in.buffer].empty() || readers[in.buffer].back() != int(s)))
        readers[in.buffer].push_back(int(s));
  }
  return readers;
}

// The first row reduction (in step order) that reads a buffer n reads and whose rows n can be
// split into: n's ranges become the reduction's outer ranges followed by its reduced ranges.
// nullopt where none fits. A LayerNorm's output computed again for a weight gradient
// ([4096, 768]) and the LayerNorm gradient's row sums ([8, 512] rows of 768) both read the
// residual: split to [8, 512, 768], the two can share one row kernel and one read of it.
std::optional<ComputeNode> split_to_row_reader(const loop::LoopProgram& p, const ComputeNode& n,
                                               const std::vector<std::vector<int>>& readers,
                                               sym::Context& ctx, int step) {
  if (n.is_reduction() || n.ranges.empty()) return std::nullopt;
  std::vector<int> candidates;
  for (const loop::Instr& in : n.body.instrs)
    if (in.kind == loop::InstrKind::Load)
      candidates.insert(candidates.end(), readers[in.buffer].begin(), readers[in.buffer].end());
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (int c : candidates) {
    const auto& r = std::get<ComputeNode>(p.steps[static_cast<size_t>(c)]);
    if (r.ranges.size() + r.reduction_ranges.size() <= n.ranges.size()) continue;
    std::optional<ComputeNode> split = split_to(n, r.ranges, ctx, step);
    if (!split || split->ranges.size() != r.ranges.size() + r.reduction_ranges.size()) continue;
    bool rows_match = true;
    for (size_t d = 0; d < r.reduction_ranges.size() && rows_match; ++d) {
      Expr a = split->ranges[r.ranges.size() + d], b = r.reduction_ranges[d];
      rows_match = a == b || ctx.provably_eq(a, b);
    }
    if (rows_match) return split;
  }
  return std::nullopt;
}

}  // namespace

std::string align_iteration_spaces(loop::LoopProgram& p, const backend::SchedulePolicy& policy,
                                   const CompileOptions& options) {
  COIL_CHECK(p.ctx != nullptr) << "LoopProgram without a sym::Context";
  sym::Context& ctx = *p.ctx;
  std::ostringstream log;
  if (policy.pointwise_in_memory_order) {
    for (loop::Step& step : p.steps) {
      auto* n = std::get_if<ComputeNode>(&step);
      if (n == nullptr) continue;
      std::optional<ComputeNode> r = in_memory_order(*n, p.buffer(n->out), ctx);
      if (!r) continue;
      log << "reordered " << p.buffer(n->out).name << " " << detail::ranges_str(ctx, n->ranges)
          << " -> " << detail::ranges_str(ctx, r->ranges) << " (its memory order)\n";
      *n = std::move(*r);
    }
  }
  if (policy.split_to_row_readers && options.split_to_row_readers) {
    // Only pointwise nodes change here, so the reductions indexed once stay as they are.
    const std::vector<std::vector<int>> readers = row_readers(p);
    for (size_t s = 0; s < p.steps.size(); ++s) {
      auto* n = std::get_if<ComputeNode>(&p.steps[s]);
      if (n == nullptr) continue;
      std::optional<ComputeNode> r = split_to_row_reader(p, *n, readers, ctx, static_cast<int>(s));
      if (!r) continue;
      log << "split " << p.buffer(n->out).name << " " << detail::ranges_str(ctx, n->ranges)
          << " -> " << detail::ranges_str(ctx, r->ranges)
          << " to match the rows of a reduction reading the same input\n";
      *n = std::move(*r);
    }
  }
  std::vector<int> producer(p.buffers.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (const auto* n = std::get_if<ComputeNode>(&p.steps[s])) producer[n->out] = int(s);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    auto* n = std::get_if<ComputeNode>(&p.steps[s]);
    if (n == nullptr) continue;
    for (const loop::Instr& in : n->body.instrs) {
      if (in.kind != loop::InstrKind::Load) continue;
      int ps = producer[in.buffer];  // Views have no producer: left alone
      if (ps < 0) continue;
      const auto& prod = std::get<ComputeNode>(p.steps[ps]);
      if (prod.ranges.empty()) continue;
      auto split = split_to(*n, prod.ranges, ctx, static_cast<int>(s));
      if (!split) continue;
      log << "split " << p.buffer(n->out).name << " " << detail::ranges_str(ctx, n->ranges)
          << " -> " << detail::ranges_str(ctx, split->ranges) << " to match "
          << p.buffer(prod.out).name << "\n";
      *n = std::move(*split);
      break;
    }
  }
  return log.str();
}

}  // namespace coil::sched
