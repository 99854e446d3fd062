// Meta functions of ops that move data into a fresh tensor of a new shape.
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

}  // namespace

void register_shape_ops(OpRegistry& r) { r.add("aten.cat.default", OpFamily::Shape, cat_meta); }

}  // namespace coil::ops
