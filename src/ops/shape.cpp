// Meta functions of ops that move data into a fresh tensor of a new shape.
#include <algorithm>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

// aten.cat.default(tensors, dim=0). 1-D empty tensors ([0]) are skipped (legacy PyTorch rule);
// the dtype is the promotion of all inputs.
std::vector<TensorMeta> cat_meta(sym::Context& ctx, const OpCall& c) {
  const Arg* list = c.arg(0, "tensors");
  COIL_USER_CHECK(list && list->is_list() && !list->list().empty())
      << c.op << ": needs a non-empty tensor list";
  std::vector<const TensorMeta*> ins;
  std::vector<PromoOperand> promo;
  for (const Arg& a : list->list()) {
    COIL_USER_CHECK(a.is_value()) << c.op << ": list elements must be tensors";
    const TensorMeta& m = a.value()->meta();
    promo.push_back({m.dtype, PromoOperand::Tensor});
    if (m.rank() == 1 && ctx.as_const(m.sizes[0]) == 0) continue;
    ins.push_back(&m);
  }
  DType dtype = result_type(promo);
  if (ins.empty()) {
    return {make_contiguous(ctx, dtype, list->list()[0].value()->meta().device, {ctx.zero()})};
  }
  const TensorMeta& first = *ins[0];
  COIL_USER_CHECK(first.rank() > 0) << c.op << ": zero-dimensional tensors cannot be concatenated";
  int64_t dim = wrap_dim(opt_int(c, 1, "dim").value_or(0), first.rank());
  std::vector<sym::Expr> sizes = first.sizes;
  std::vector<sym::Expr> parts;
  for (const TensorMeta* m : ins) {
    COIL_USER_CHECK(m->rank() == first.rank()) << c.op << ": tensors must have the same rank ("
                                               << m->rank() << " vs " << first.rank() << ")";
    for (int64_t i = 0; i < first.rank(); ++i) {
      if (i == dim) continue;
      auto x = ctx.as_const(m->sizes[i]), y = ctx.as_const(first.sizes[i]);
      COIL_USER_CHECK(!(x && y && *x != *y)) << c.op << ": sizes must match except in dim " << dim
                                             << " (dim " << i << ": " << *x << " vs " << *y << ")";
    }
    parts.push_back(m->sizes[dim]);
  }
  sizes[dim] = ctx.sum(parts);
  return {make_contiguous(ctx, dtype, first.device, std::move(sizes))};
}

// aten.flip.default(self, dims) / prims.rev.default(a, dims): a fresh tensor laid out like the
// input (empty_like with preserve_format: flip(x.t()) stays column-major).
std::vector<TensorMeta> flip_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dims = opt_int_list(c, 1, "dims");
  COIL_USER_CHECK(dims.has_value()) << c.op << ": needs dims";
  std::vector<bool> seen(std::max<int64_t>(in.rank(), 1), false);
  for (int64_t d : *dims) {
    int64_t w = wrap_dim(d, in.rank());
    COIL_USER_CHECK(!seen[w]) << c.op << ": dim " << d << " appears more than once";
    seen[w] = true;
  }
  return {like_meta(ctx, in, in.dtype, in.device)};
}

// aten.constant_pad_nd.default(self, pad, value=0): pad holds (before, after) pairs from the
// last dim backwards (negative pads crop). The result is row-major, or channels-last when the
// input suggests it (torch._refs.constant_pad_nd: suggest_memory_format).
std::vector<TensorMeta> constant_pad_nd_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* pad = c.arg(1, "pad");
  COIL_USER_CHECK(pad && pad->is_list()) << c.op << ": needs a pad list";
  const auto& items = pad->list();
  COIL_USER_CHECK(items.size() % 2 == 0) << c.op << ": pad must have an even length";
  COIL_USER_CHECK(static_cast<int64_t>(items.size() / 2) <= in.rank())
      << c.op << ": pad has more dims than the input";
  std::vector<sym::Expr> sizes = in.sizes;
  for (size_t i = 0; i < items.size() / 2; ++i) {
    size_t d = sizes.size() - 1 - i;
    sizes[d] =
        ctx.add(sizes[d], ctx.add(size_arg(ctx, items[2 * i]), size_arg(ctx, items[2 * i + 1])));
    if (auto n = ctx.as_const(sizes[d])) {
      COIL_USER_CHECK(*n >= 0) << c.op << ": padding gives dim " << d << " a negative size";
    }
  }
  return {make_like_format(ctx, in.dtype, in.device, std::move(sizes),
                           strides_like_channels_last(ctx, in))};
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  r.add("aten.cat.default", OpFamily::Shape, cat_meta);
  r.add("aten.flip.default", OpFamily::Shape, flip_meta);
  r.add("prims.rev.default", OpFamily::Shape, flip_meta);
  r.add("aten.constant_pad_nd.default", OpFamily::Shape, constant_pad_nd_meta);
}

}  // namespace coil::ops
