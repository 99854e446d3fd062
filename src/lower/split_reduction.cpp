#include "split_reduction.h"

namespace coil::lower::detail {

std::optional<ReductionSplit> plan_reduction_split(const sym::Context& ctx, loop::ReduceKind kind,
                                                   const std::vector<sym::Expr>& out_sizes,
                                                   const std::vector<sym::Expr>& red_sizes,
                                                   int64_t min_elements, int64_t min_length) {
  if (kind == loop::ReduceKind::ArgMax || kind == loop::ReduceKind::ArgMin) return std::nullopt;
  int64_t outputs = 1, total = 1;
  for (const sym::Expr& e : out_sizes) {
    std::optional<int64_t> v = ctx.as_const(e);
    if (!v) return std::nullopt;
    outputs *= *v;
  }
  std::vector<int64_t> red;
  for (const sym::Expr& e : red_sizes) {
    std::optional<int64_t> v = ctx.as_const(e);
    if (!v) return std::nullopt;
    red.push_back(*v);
    total *= *v;
  }
  if (outputs < 1 || outputs >= kSplitMaxOutputs || total < min_length ||
      outputs * total < min_elements)
    return std::nullopt;
  // Chunks wanted: enough partials (at least kSplitMinWays, which outputs between
  // kSplitTargetPartials / 4 and kSplitMaxOutputs would otherwise round below), none shorter
  // than kSplitMinChunk.
  const int64_t want =
      std::min(std::max((kSplitTargetPartials + outputs - 1) / outputs, kSplitMinWays),
               total / kSplitMinChunk);
  ReductionSplit s;
  for (size_t d = 0; d < red.size(); ++d) {
    if (s.chunks * red[d] <= want) {
      s.chunks *= red[d];
      s.whole = d + 1;
      continue;
    }
    // The largest factor of this dim that keeps within `want`.
    for (int64_t f = want / s.chunks; f > 1; --f) {
      if (red[d] % f == 0) {
        s.factor = f;
        s.chunks *= f;
        break;
      }
    }
    break;
  }
  // Less than a kSplitMinWays split is not worth a second kernel; a split that leaves nothing
  // to reduce in stage 1 is not one.
  if (s.chunks < kSplitMinWays || s.chunks >= total) return std::nullopt;
  return s;
}

}  // namespace coil::lower::detail
