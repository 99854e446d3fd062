// Meta functions of indexing, gathering and scattering (index, index_put, gather, scatter, the
// *_scatter ops, embedding), following torch/_meta_registrations.py.
#include <algorithm>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

TensorMeta fresh(const TensorMeta& like, DType dtype, std::vector<sym::Expr> sizes,
                 std::vector<sym::Expr> strides) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = like.device;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  return m;
}

sym::Expr index_numel(sym::Context& ctx, const TensorMeta& index) {
  return numel(ctx, index.sizes);
}

// aten.index.Tensor / _unsafe_index.Tensor(self, indices: Tensor?[]) (meta_index_Tensor).
// The index tensors broadcast to one shape B. When they are adjacent B replaces the indexed
// dims in place, else self is first permuted to put the indexed dims in front (numpy's rule).
// The result is laid out as TensorIterator lays out the output for self restrided to the
// result's shape (stride 0 along B), so a permuted self gives a permuted result.
std::vector<TensorMeta> index_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const Arg* list = c.arg(1, "indices");
  COIL_USER_CHECK(list && list->is_list() && !list->list().empty())
      << c.op << ": at least one index must be provided";
  const int64_t rank = self.rank();
  std::vector<const TensorMeta*> indices;
  for (const Arg& e : list->list()) {
    if (e.is_none()) {
      indices.push_back(nullptr);
      continue;
    }
    COIL_USER_CHECK(e.is_value()) << c.op << ": indices must be tensors or None";
    const TensorMeta& t = e.value()->meta();
    // Bool / byte masks expand into nonzero() positions: a data-dependent size.
    COIL_USER_CHECK(t.dtype == DType::Int64 || t.dtype == DType::Int32)
        << c.op << ": index with a " << dtype_name(t.dtype)
        << " tensor is not supported (a mask gives a data-dependent shape)";
    indices.push_back(&t);
  }
  COIL_USER_CHECK(static_cast<int64_t>(indices.size()) <= rank)
      << c.op << ": too many indices for tensor of dimension " << rank;
  std::vector<std::vector<sym::Expr>> shapes;
  for (const TensorMeta* t : indices) {
    if (t) shapes.push_back(t->sizes);
  }
  COIL_USER_CHECK(!shapes.empty()) << c.op << ": no index tensors";
  std::vector<sym::Expr> bshape = broadcast_shapes(ctx, shapes);
  indices.resize(rank, nullptr);

  // hasContiguousSubspace: the non-null indices are adjacent.
  int state = 0;
  bool contiguous_subspace = true;
  for (const TensorMeta* t : indices) {
    if (state == 0 && t) {
      state = 1;
    } else if (state == 1 && !t) {
      state = 2;
    } else if (state == 2 && t) {
      contiguous_subspace = false;
      break;
    }
  }
  // transposeToFront: indexed dims first, then the others, in order.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d) {
    if (contiguous_subspace || indices[d]) perm.push_back(d);
  }
  if (!contiguous_subspace) {
    for (int64_t d = 0; d < rank; ++d) {
      if (!indices[d]) perm.push_back(d);
    }
  }
  std::vector<sym::Expr> before, after, before_strides, after_strides;
  bool seen = false;
  for (int64_t d : perm) {
    if (indices[d]) {
      seen = true;
      continue;
    }
    (seen ? after : before).push_back(self.sizes[d]);
    (seen ? after_strides : before_strides).push_back(self.strides[d]);
  }
  std::vector<sym::Expr> sizes = before;
  sizes.insert(sizes.end(), bshape.begin(), bshape.end());
  sizes.insert(sizes.end(), after.begin(), after.end());
  if (ctx.provably_eq(numel(ctx, self.sizes), ctx.zero())) {
    return {make_contiguous(ctx, self.dtype, self.device, std::move(sizes))};
  }
  // restride_src: self's strides with the indexed dims replaced by B's dims at stride 0.
  TensorMeta restrided = fresh(self, self.dtype, sizes, before_strides);
  restrided.strides.insert(restrided.strides.end(), bshape.size(), ctx.zero());
  restrided.strides.insert(restrided.strides.end(), after_strides.begin(), after_strides.end());
  std::vector<sym::Expr> strides = pointwise_strides(ctx, sizes, {&restrided});
  return {fresh(self, self.dtype, std::move(sizes), std::move(strides))};
}

// aten.index_put.default / _unsafe_index_put.default(self, indices, values, accumulate=False):
// torch.empty_like(self).
std::vector<TensorMeta> index_put_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  return {fresh(self, self.dtype, self.sizes, preserve_format_strides(ctx, self))};
}

// aten.index_put_.default: in place, returns self.
std::vector<TensorMeta> index_put_inplace_meta(sym::Context& ctx, const OpCall& c) {
  return {tensor_arg(c, 0, "self")};
}

// aten.index_select.default(self, dim, index): self's sizes with dim's replaced by the number
// of indices (a 0-d self stays 0-d); contiguous (new_empty).
std::vector<TensorMeta> index_select_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const TensorMeta& index = tensor_arg(c, 2, "index");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  COIL_USER_CHECK(index.rank() <= 1) << c.op << ": index must be 0-d or 1-d";
  COIL_USER_CHECK(!dtype_is_floating(index.dtype) && index.dtype != DType::Bool)
      << c.op << ": index must be an integer tensor";
  std::vector<sym::Expr> sizes = self.sizes;
  int64_t d = wrap_dim(*dim, self.rank());
  if (self.rank() > 0) sizes[d] = index_numel(ctx, index);
  return {make_contiguous(ctx, self.dtype, self.device, std::move(sizes))};
}

// aten.gather.default(self, dim, index, sparse_grad=False): index's shape, self's dtype,
// contiguous (new_empty).
std::vector<TensorMeta> gather_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const TensorMeta& index = tensor_arg(c, 2, "index");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  wrap_dim(*dim, self.rank());
  // An empty index skips the dtype and shape checks (meta_gather): any rank goes.
  if (!ctx.provably_eq(numel(ctx, index.sizes), ctx.zero())) {
    COIL_USER_CHECK(index.dtype == DType::Int64 || index.dtype == DType::Int32)
        << c.op << ": expected dtype int32/int64 for index, got " << dtype_name(index.dtype);
    COIL_USER_CHECK(std::max<int64_t>(index.rank(), 1) == std::max<int64_t>(self.rank(), 1))
        << c.op << ": index must have the same number of dimensions as self";
  }
  return {make_contiguous(ctx, self.dtype, self.device, index.sizes)};
}

// aten.scatter.src / scatter.value / scatter_add.default(self, dim, index, src|value):
// self.new_empty(self.shape), contiguous.
std::vector<TensorMeta> scatter_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const TensorMeta& index = tensor_arg(c, 2, "index");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  wrap_dim(*dim, self.rank());
  // scatter_gather_dtype_check: int32 or int64 indices (unless there are none).
  COIL_USER_CHECK(index.dtype == DType::Int64 || index.dtype == DType::Int32 ||
                  ctx.provably_eq(numel(ctx, index.sizes), ctx.zero()))
      << c.op << ": expected dtype int32/int64 for index, got " << dtype_name(index.dtype);
  const Arg* src = c.arg(3, c.id == opid::aten_scatter_value ? "value" : "src");
  if (src && src->is_value()) {
    COIL_USER_CHECK(src->value()->meta().dtype == self.dtype)
        << c.op << ": expected self and src to have the same dtype";
  }
  return {make_contiguous(ctx, self.dtype, self.device, self.sizes)};
}

// Whether some element of m is reachable through two indices (a size > 1 dim of stride 0):
// PyTorch's has_internal_overlap, on the cases coil's graphs have (expanded tensors).
bool internal_overlap(sym::Context& ctx, const TensorMeta& m) {
  for (size_t d = 0; d < m.sizes.size() && d < m.strides.size(); ++d) {
    if (ctx.as_const(m.strides[d]) == 0 && !ctx.provably_le(m.sizes[d], ctx.one())) return true;
  }
  return false;
}

// aten.select_scatter / slice_scatter / as_strided_scatter: clone_preserve_strides(self)
// (_scatter_meta_output, prims' as_strided_scatter meta): self's strides and storage offset;
// a self with internal overlap is clone()d instead (dense strides in self's order).
std::vector<TensorMeta> scatter_like_self_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  tensor_arg(c, 1, "src");
  if (c.id != opid::aten_as_strided_scatter_default && internal_overlap(ctx, self)) {
    return {fresh(self, self.dtype, self.sizes, preserve_format_strides(ctx, self))};
  }
  TensorMeta m = self;
  return {m};
}

// aten.embedding.default(weight[n, d], indices, padding_idx=-1, scale_grad_by_freq=False,
// sparse=False): indices' shape + [d], weight's dtype, contiguous.
std::vector<TensorMeta> embedding_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& weight = tensor_arg(c, 0, "weight");
  const TensorMeta& indices = tensor_arg(c, 1, "indices");
  COIL_USER_CHECK(weight.rank() == 2) << c.op << ": weight must be 2-D";
  COIL_USER_CHECK(indices.dtype == DType::Int64 || indices.dtype == DType::Int32)
      << c.op << ": indices must be Long or Int, got " << dtype_name(indices.dtype);
  std::vector<sym::Expr> sizes = indices.sizes;
  sizes.push_back(weight.sizes[1]);
  return {make_contiguous(ctx, weight.dtype, weight.device, std::move(sizes))};
}

// aten.embedding_dense_backward.default(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq): [num_weights, grad_output.size(-1)] in grad_output's dtype.
std::vector<TensorMeta> embedding_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& grad = tensor_arg(c, 0, "grad_output");
  const Arg* n = c.arg(2, "num_weights");
  COIL_USER_CHECK(n && !n->is_none()) << c.op << ": needs num_weights";
  COIL_USER_CHECK(grad.rank() > 0) << c.op << ": grad_output must have at least one dim";
  return {make_contiguous(ctx, grad.dtype, grad.device, {size_arg(ctx, *n), grad.sizes.back()})};
}

}  // namespace

void register_index_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::Shape, fn); };
  add("aten.index.Tensor", index_meta);
  add("aten._unsafe_index.Tensor", index_meta);
  add("aten.index_put.default", index_put_meta);
  add("aten._unsafe_index_put.default", index_put_meta);
  add("aten.index_put_.default", index_put_inplace_meta);
  add("aten.index_select.default", index_select_meta);
  add("aten.gather.default", gather_meta);
  add("aten.scatter.src", scatter_meta);
  add("aten.scatter.value", scatter_meta);
  add("aten.scatter_add.default", scatter_meta);
  add("aten.select_scatter.default", scatter_like_self_meta);
  add("aten.slice_scatter.default", scatter_like_self_meta);
  add("aten.as_strided_scatter.default", scatter_like_self_meta);
  add("aten.embedding.default", embedding_meta);
  add("aten.embedding_dense_backward.default", embedding_backward_meta);
}

}  // namespace coil::ops
