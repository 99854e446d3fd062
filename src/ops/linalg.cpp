// Meta functions of matrix products.
#include <algorithm>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

void check_same(sym::Context& ctx, const OpCall& c, sym::Expr a, sym::Expr b, const char* what) {
  auto x = ctx.as_const(a), y = ctx.as_const(b);
  COIL_USER_CHECK(!(x && y && *x != *y))
      << c.op << ": " << what << " do not match (" << *x << " vs " << *y << ")";
}

void check_dtypes(const OpCall& c, const TensorMeta& a, const TensorMeta& b) {
  COIL_USER_CHECK(a.dtype == b.dtype)
      << c.op << ": expected both operands to have the same "
      << "dtype, got " << dtype_name(a.dtype) << " and " << dtype_name(b.dtype);
}

// aten.mm.default(self[n, k], mat2[k, m]) -> [n, m]
std::vector<TensorMeta> mm_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& a = tensor_arg(c, 0, "self");
  const TensorMeta& b = tensor_arg(c, 1, "mat2");
  COIL_USER_CHECK(a.rank() == 2 && b.rank() == 2) << c.op << ": expects 2-D operands";
  check_dtypes(c, a, b);
  check_same(ctx, c, a.sizes[1], b.sizes[0], "inner dims");
  return {make_contiguous(ctx, a.dtype, a.device, {a.sizes[0], b.sizes[1]})};
}

// aten.bmm.default(self[b, n, k], mat2[b, k, m]) -> [b, n, m]
std::vector<TensorMeta> bmm_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& a = tensor_arg(c, 0, "self");
  const TensorMeta& b = tensor_arg(c, 1, "mat2");
  COIL_USER_CHECK(a.rank() == 3 && b.rank() == 3) << c.op << ": expects 3-D operands";
  check_dtypes(c, a, b);
  check_same(ctx, c, a.sizes[0], b.sizes[0], "batch sizes");
  check_same(ctx, c, a.sizes[2], b.sizes[1], "inner dims");
  return {make_contiguous(ctx, a.dtype, a.device, {a.sizes[0], a.sizes[1], b.sizes[2]})};
}

// aten.addmm.default(self (broadcasts to [n, m]), mat1[n, k], mat2[k, m], *, beta=1, alpha=1)
std::vector<TensorMeta> addmm_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& bias = tensor_arg(c, 0, "self");
  const TensorMeta& a = tensor_arg(c, 1, "mat1");
  const TensorMeta& b = tensor_arg(c, 2, "mat2");
  COIL_USER_CHECK(a.rank() == 2 && b.rank() == 2) << c.op << ": expects 2-D matrices";
  COIL_USER_CHECK(bias.rank() <= 2) << c.op << ": bias must have rank <= 2";
  check_dtypes(c, a, b);
  check_dtypes(c, bias, a);
  check_same(ctx, c, a.sizes[1], b.sizes[0], "inner dims");
  std::vector<sym::Expr> out = {a.sizes[0], b.sizes[1]};
  broadcast_shapes(ctx, {bias.sizes, out});  // checks that the bias broadcasts
  return {make_contiguous(ctx, a.dtype, a.device, out)};
}

// aten.dot.default(self[n], tensor[n]) -> []
std::vector<TensorMeta> dot_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& a = tensor_arg(c, 0, "self");
  const TensorMeta& b = tensor_arg(c, 1, "tensor");
  COIL_USER_CHECK(a.rank() == 1 && b.rank() == 1) << c.op << ": expects 1-D operands";
  check_dtypes(c, a, b);
  check_same(ctx, c, a.sizes[0], b.sizes[0], "sizes");
  return {make_contiguous(ctx, a.dtype, a.device, {})};
}

// aten.mv.default(self[n, k], vec[k]) -> [n]
std::vector<TensorMeta> mv_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& a = tensor_arg(c, 0, "self");
  const TensorMeta& b = tensor_arg(c, 1, "vec");
  COIL_USER_CHECK(a.rank() == 2 && b.rank() == 1) << c.op << ": expects a matrix and a vector";
  check_dtypes(c, a, b);
  check_same(ctx, c, a.sizes[1], b.sizes[0], "inner dims");
  return {make_contiguous(ctx, a.dtype, a.device, {a.sizes[0]})};
}

// aten.matmul.default(self, other), torch.matmul's rules: 1-D x 1-D is a dot ([]); a 1-D
// first operand is a row vector and a 1-D second one a column vector whose added dim is
// dropped again; otherwise the batch dims (all but the last two) broadcast. The result is
// row-major. The dtype is self's: FakeTensor does not check the operands' dtypes here (a
// mismatch fails only when the product runs).
std::vector<TensorMeta> matmul_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& a = tensor_arg(c, 0, "self");
  const TensorMeta& b = tensor_arg(c, 1, "other");
  COIL_USER_CHECK(a.rank() >= 1 && b.rank() >= 1) << c.op << ": both operands need a dim";
  const int64_t ra = a.rank(), rb = b.rank();
  sym::Expr ka = a.sizes[ra - 1];
  sym::Expr kb = rb == 1 ? b.sizes[0] : b.sizes[rb - 2];
  check_same(ctx, c, ka, kb, "inner dims");
  std::vector<sym::Expr> batch_a(a.sizes.begin(), a.sizes.end() - std::min<int64_t>(ra, 2));
  std::vector<sym::Expr> batch_b(b.sizes.begin(), b.sizes.end() - std::min<int64_t>(rb, 2));
  std::vector<sym::Expr> out = broadcast_shapes(ctx, {batch_a, batch_b});
  if (ra >= 2) out.push_back(a.sizes[ra - 2]);
  if (rb >= 2) out.push_back(b.sizes[rb - 1]);
  return {make_contiguous(ctx, a.dtype, a.device, std::move(out))};
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add("aten.mm.default", OpFamily::Linalg, mm_meta);
  r.add("aten.bmm.default", OpFamily::Linalg, bmm_meta);
  r.add("aten.addmm.default", OpFamily::Linalg, addmm_meta);
  r.add("aten.matmul.default", OpFamily::Linalg, matmul_meta);
  r.add("aten.dot.default", OpFamily::Linalg, dot_meta);
  r.add("aten.mv.default", OpFamily::Linalg, mv_meta);
}

}  // namespace coil::ops
