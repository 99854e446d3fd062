// Input mutations: the aten.copy_(input, value) nodes that AOTAutograd leaves at the end of a
// graph for the inputs it mutates (BatchNorm's running statistics and batch counter) when coil
// asks it to keep input mutations in the graph. Each becomes one pointwise ComputeNode that
// stores the value into a View of the input's own storage, so the kernel computing the new
// running mean writes it where it lives: no extra output, no copy back after the call (159
// device copies per ResNet-50 training step when AOTAutograd's wrapper did them).
//
// lower_graph lowers these nodes after the graph's outputs, so every other read of the input
// is an earlier step; the scheduler keeps it that way (sched/fusion.cpp: such a write joins a
// kernel only where no read of the input is left outside it, and runs after all of them).
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower::detail {

namespace {

// Whether the node may store straight into `root`: it reads `root` only at the element it
// stores, through a buffer of the same layout as `out` (each element is read before it is
// overwritten, by the same thread), and reads no other input that a mutation writes (two
// mutations reading each other's input, a swap, could not both run after the other).
bool stores_in_place(const loop::LoopProgram& p, const loop::ComputeNode& n, loop::BufferId root,
                     const std::vector<loop::BufferId>& written) {
  const loop::Buffer& out = p.buffer(n.out);
  for (const loop::Instr& in : n.body.instrs) {
    if (in.kind != loop::InstrKind::Load) continue;
    const loop::BufferId r = loop::storage_root(p, in.buffer);
    if (r != root) {
      if (std::find(written.begin(), written.end(), r) != written.end()) return false;
      continue;
    }
    const loop::Buffer& B = p.buffer(in.buffer);
    const bool same_layout = B.strides == out.strides && B.offset == out.offset;
    if (!same_layout || in.index != n.store_index) return false;
  }
  return true;
}

// Whether distinct indices of a tensor of `m`'s layout address distinct elements, so that
// it can be written element by element: a dense layout (any dim order), or constant strides
// that, sorted, each step over everything the smaller ones reach (a slice of a wider tensor).
// Symbolic strides (Dynamo's automatic dynamic shapes) are taken as the traced example's,
// which the in-place op's own overlap check accepted; only a constant stride 0 is refused.
bool non_overlapping(sym::Context& c, const TensorMeta& m) {
  if (m.strides.empty() || m.strides == dense_strides_like(c, m)) return true;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  bool symbolic = false;
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    const std::optional<int64_t> size = c.as_const(m.sizes[d]);
    const std::optional<int64_t> stride = c.as_const(m.strides[d]);
    if (stride == 0 && size != 1) return false;
    if (!size || !stride) {
      symbolic = true;
      continue;
    }
    if (*size > 1) dims.emplace_back(*stride, *size);
  }
  if (symbolic) return true;
  std::sort(dims.begin(), dims.end());
  int64_t reach = 1;  // elements the dims so far span
  for (const auto& [stride, size] : dims) {
    if (stride < reach) return false;
    reach += stride * (size - 1);
  }
  return true;
}

}  // namespace

loop::BufferId mutated_input_buffer(const LoweringContext& lc, const Node& node) {
  const Arg* self = node.arg(0, "self");
  COIL_USER_CHECK(self != nullptr && self->is_value()) << node.op() << ": self is not a tensor";
  COIL_USER_CHECK(self->value()->is_input())
      << node.op() << ": copies into a value that is not a graph input (only input mutations, "
      << "at the end of a graph, are supported)";
  const TensorValue& d = lc.value(self->value());
  COIL_CHECK(d.strided.has_value()) << "graph input without a buffer";
  return d.strided->base;
}

void lower_input_mutation(LoweringContext& lc, const Node& node,
                          const std::vector<loop::BufferId>& written) {
  sym::Context& c = lc.ctx();
  mutated_input_buffer(lc, node);  // checks that self is a graph input
  const Value* dst = node.arg(0, "self")->value();
  const TensorValue& d = lc.value(dst);
  const TensorMeta& m = dst->meta();
  // Every element must have a place of its own (a broadcast or overlapping input cannot be
  // written element by element).
  COIL_USER_CHECK(non_overlapping(c, m)) << node.op() << ": the mutated input's elements overlap";

  const TensorValue& src = lc.arg_value(node, 1, "src");
  const TensorValue value = lc.pointwise(
      d.dtype, d.sizes,
      [&c, load = src.load, sizes = src.sizes, dtype = d.dtype](loop::BodyBuilder& b,
                                                                const std::vector<sym::Expr>& idx) {
        return b.cast(load(b, broadcast_index(c, sizes, idx)), dtype_compute(dtype));
      },
      src.inline_cost + 1, src.inline_reads);

  loop::LoopProgram& p = lc.program();
  loop::Buffer view;
  view.kind = loop::BufferKind::View;
  view.dtype = d.dtype;
  view.device = d.device;
  view.sizes = d.sizes;
  view.strides = d.strided->strides;
  view.offset =
      d.strided->offset && c.as_const(d.strided->offset) != 0 ? d.strided->offset : nullptr;
  view.view_of = d.strided->base;
  const loop::BufferId out = p.add_buffer(std::move(view));
  lc.store_into(out, value);
  if (stores_in_place(p, std::get<loop::ComputeNode>(p.steps.back()), d.strided->base, written))
    return;
  // The value reads the input at other elements (x.copy_(x.flip(0))), or another mutated
  // input: compute it into a buffer of its own first, then copy that.
  p.steps.pop_back();
  const TensorValue tmp = lc.realize_with_strides(value, contiguous_strides(c, value.sizes));
  lc.store_into(out, tmp);
}

}  // namespace coil::lower::detail
