#include "coil/graph/tensor_meta.h"

namespace coil {

std::vector<sym::Expr> contiguous_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes) {
  std::vector<sym::Expr> strides(sizes.size());
  sym::Expr s = ctx.one();
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s = ctx.mul(s, sizes[i]);
  }
  return strides;
}

sym::Expr numel(sym::Context& ctx, const std::vector<sym::Expr>& sizes) {
  return ctx.product(sizes);
}

bool is_contiguous(sym::Context& ctx, const TensorMeta& meta) {
  if (meta.strides.size() != meta.sizes.size()) return false;
  sym::Expr expected = ctx.one();
  for (size_t i = meta.sizes.size(); i-- > 0;) {
    sym::Expr size = meta.sizes[i];
    if (ctx.as_const(size) == 1) continue;  // any stride is fine for a size-1 dim
    if (meta.strides[i] != expected && !ctx.provably_eq(meta.strides[i], expected)) return false;
    expected = ctx.mul(expected, size);
  }
  return true;
}

}  // namespace coil
