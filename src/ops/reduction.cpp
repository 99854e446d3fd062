// Meta functions of the reductions: reduced dims (lists, None = all, keepdim) and result dtypes.
#include <algorithm>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

// Which dims are reduced: `dims` absent/None or empty means all (PyTorch's dim=[] for
// sum/mean/amax/any means all dims).
std::vector<bool> reduced_mask(int64_t rank, const std::optional<std::vector<int64_t>>& dims) {
  std::vector<bool> mask(rank, false);
  if (!dims || dims->empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  for (int64_t d : *dims) {
    int64_t w = wrap_dim(d, rank);
    if (rank == 0) continue;
    COIL_USER_CHECK(!mask[w]) << "dim " << d << " appears more than once in the reduction dims";
    mask[w] = true;
  }
  return mask;
}

TensorMeta reduced(sym::Context& ctx, const TensorMeta& in, const std::vector<bool>& mask,
                   bool keepdim, DType dtype) {
  std::vector<sym::Expr> sizes;
  for (int64_t i = 0; i < in.rank(); ++i) {
    if (!mask[i]) {
      sizes.push_back(in.sizes[i]);
    } else if (keepdim) {
      sizes.push_back(ctx.one());
    }
  }
  return make_contiguous(ctx, dtype, in.device, std::move(sizes));
}

// sum: integral (and bool) inputs accumulate in i64 unless dtype= says otherwise.
DType sum_dtype(DType in, std::optional<DType> requested) {
  if (requested) return *requested;
  return dtype_is_integral(in) ? DType::Int64 : in;
}

// aten.sum.dim_IntList(self, dim, keepdim=False, *, dtype=None)
std::vector<TensorMeta> sum_dim_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto mask = reduced_mask(in.rank(), opt_int_list(c, 1, "dim"));
  return {reduced(ctx, in, mask, bool_arg(c, 2, "keepdim", false),
                  sum_dtype(in.dtype, opt_dtype(c, 3, "dtype")))};
}

// aten.sum.default(self, *, dtype=None)
std::vector<TensorMeta> sum_all_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  return {reduced(ctx, in, reduced_mask(in.rank(), std::nullopt), false,
                  sum_dtype(in.dtype, opt_dtype(c, 99, "dtype")))};
}

// aten.mean.dim(self, dim, keepdim=False, *, dtype=None): needs a floating result.
std::vector<TensorMeta> mean_dim_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  DType dtype = opt_dtype(c, 3, "dtype").value_or(in.dtype);
  COIL_USER_CHECK(dtype_is_floating(dtype))
      << c.op << ": mean needs a floating dtype, got " << dtype_name(dtype);
  auto mask = reduced_mask(in.rank(), opt_int_list(c, 1, "dim"));
  return {reduced(ctx, in, mask, bool_arg(c, 2, "keepdim", false), dtype)};
}

std::vector<TensorMeta> mean_all_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  DType dtype = opt_dtype(c, 99, "dtype").value_or(in.dtype);
  COIL_USER_CHECK(dtype_is_floating(dtype))
      << c.op << ": mean needs a floating dtype, got " << dtype_name(dtype);
  return {reduced(ctx, in, reduced_mask(in.rank(), std::nullopt), false, dtype)};
}

// aten.amax.default / amin.default(self, dim=[], keepdim=False); prod.dim_int is similar.
std::vector<TensorMeta> amax_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto mask = reduced_mask(in.rank(), opt_int_list(c, 1, "dim"));
  return {reduced(ctx, in, mask, bool_arg(c, 2, "keepdim", false), in.dtype)};
}

// aten.max.dim / min.dim(self, dim, keepdim=False) -> (values, indices)
std::vector<TensorMeta> max_dim_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  auto mask = reduced_mask(in.rank(), std::vector<int64_t>{*dim});
  bool keepdim = bool_arg(c, 2, "keepdim", false);
  return {reduced(ctx, in, mask, keepdim, in.dtype), reduced(ctx, in, mask, keepdim, DType::Int64)};
}

// aten.max.default / min.default(self): all dims.
std::vector<TensorMeta> max_all_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  return {reduced(ctx, in, reduced_mask(in.rank(), std::nullopt), false, in.dtype)};
}

// aten.argmax.default / argmin.default(self, dim=None, keepdim=False) -> i64
std::vector<TensorMeta> argmax_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dim = opt_int(c, 1, "dim");
  bool keepdim = bool_arg(c, 2, "keepdim", false);
  if (!dim) {
    // The flattened argmax; keepdim keeps every dim as 1.
    return {reduced(ctx, in, reduced_mask(in.rank(), std::nullopt), keepdim, DType::Int64)};
  }
  return {
      reduced(ctx, in, reduced_mask(in.rank(), std::vector<int64_t>{*dim}), keepdim, DType::Int64)};
}

// aten.var_mean.correction(self, dim=None, *, correction=None, keepdim=False) -> (var, mean)
// aten.var.correction(self, dim=None, *, correction=None, keepdim=False) -> var
template <int kOutputs>
std::vector<TensorMeta> var_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(dtype_is_floating(in.dtype))
      << c.op << ": needs a floating input, got " << dtype_name(in.dtype);
  auto mask = reduced_mask(in.rank(), opt_int_list(c, 1, "dim"));
  TensorMeta m = reduced(ctx, in, mask, bool_arg(c, 99, "keepdim", false), in.dtype);
  std::vector<TensorMeta> out(kOutputs, m);
  return out;
}

// The var/std family beyond var.correction / var_mean.correction (PyTorch's var, std, var_mean
// and std_mean share one shape rule; std_mean returns (std, mean)). kKeepdim is keepdim's
// position: keyword-only in the .correction overloads, positional 3 in .dim(self, dim,
// unbiased=True, keepdim=False). Integer inputs are rejected as PyTorch does ("std and var only
// support floating point and complex dtypes").
template <int kOutputs, size_t kKeepdim>
std::vector<TensorMeta> var_dim_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(dtype_is_floating(in.dtype))
      << c.op << ": needs a floating input, got " << dtype_name(in.dtype);
  auto mask = reduced_mask(in.rank(), opt_int_list(c, 1, "dim"));
  TensorMeta m = reduced(ctx, in, mask, bool_arg(c, kKeepdim, "keepdim", false), in.dtype);
  return std::vector<TensorMeta>(kOutputs, m);
}

// var.default / std.default / var_mean.default / std_mean.default(self, unbiased=True): all dims.
template <int kOutputs>
std::vector<TensorMeta> var_all_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(dtype_is_floating(in.dtype))
      << c.op << ": needs a floating input, got " << dtype_name(in.dtype);
  TensorMeta m = reduced(ctx, in, reduced_mask(in.rank(), std::nullopt), false, in.dtype);
  return std::vector<TensorMeta>(kOutputs, m);
}

// prims.sum.default / prims.prod.default(inp, dims, *, output_dtype=None): unlike aten's,
// an empty dims list reduces nothing, dims must already be non-negative, and the result keeps
// the input dtype (no i64 accumulation) unless output_dtype says otherwise (prims
// _reduction_meta: contiguous result).
std::vector<TensorMeta> prims_reduction_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "inp");
  auto dims = opt_int_list(c, 1, "dims");
  COIL_USER_CHECK(dims.has_value()) << c.op << ": needs a dims list";
  std::vector<bool> mask(in.rank(), false);
  for (int64_t d : *dims) {
    COIL_USER_CHECK(d >= 0 && d < in.rank())
        << c.op << ": dim " << d << " out of bounds for rank " << in.rank();
    mask[d] = true;
  }
  return {reduced(ctx, in, mask, false, opt_dtype(c, 99, "output_dtype").value_or(in.dtype))};
}

// aten.any / all: bool results (uint8 inputs keep uint8, as in PyTorch).
DType any_dtype(DType in) { return in == DType::UInt8 ? DType::UInt8 : DType::Bool; }

// any.dim(self, dim, keepdim=False), any.dims(self, dim=None, keepdim=False), any.default(self)
std::vector<TensorMeta> any_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dims = opt_int_list(c, 1, "dim");
  auto mask = reduced_mask(in.rank(), dims);
  return {reduced(ctx, in, mask, bool_arg(c, 2, "keepdim", false), any_dtype(in.dtype))};
}

// prod.dim_int(self, dim, keepdim=False, *, dtype=None)
std::vector<TensorMeta> prod_dim_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  auto mask = reduced_mask(in.rank(), std::vector<int64_t>{*dim});
  return {reduced(ctx, in, mask, bool_arg(c, 2, "keepdim", false),
                  sum_dtype(in.dtype, opt_dtype(c, 3, "dtype")))};
}

}  // namespace

void register_reduction_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::Reduction, fn); };
  add("aten.sum.dim_IntList", sum_dim_meta);
  add("aten.sum.default", sum_all_meta);
  add("aten.mean.dim", mean_dim_meta);
  add("aten.mean.default", mean_all_meta);
  add("aten.amax.default", amax_meta);
  add("aten.amin.default", amax_meta);
  add("aten.max.dim", max_dim_meta);
  add("aten.min.dim", max_dim_meta);
  add("aten.max.default", max_all_meta);
  add("aten.min.default", max_all_meta);
  add("aten.argmax.default", argmax_meta);
  add("aten.argmin.default", argmax_meta);
  add("aten.var_mean.correction", var_meta<2>);
  add("aten.var.correction", var_meta<1>);
  add("aten.prod.dim_int", prod_dim_meta);
  // prod.default(self, *, dtype=None) promotes integral inputs to i64 as sum.default does.
  add("aten.prod.default", sum_all_meta);
  add("prims.sum.default", prims_reduction_meta);
  add("prims.prod.default", prims_reduction_meta);
  add("aten.std.correction", var_meta<1>);
  add("aten.std_mean.correction", var_meta<2>);
  add("aten.var.dim", var_dim_meta<1, 3>);
  add("aten.std.dim", var_dim_meta<1, 3>);
  add("aten.var_mean.dim", var_dim_meta<2, 3>);
  add("aten.std_mean.dim", var_dim_meta<2, 3>);
  add("aten.var.default", var_all_meta<1>);
  add("aten.std.default", var_all_meta<1>);
  add("aten.var_mean.default", var_all_meta<2>);
  add("aten.std_mean.default", var_all_meta<2>);
  for (const char* op : {"any", "all"}) {
    add("aten." + std::string(op) + ".dim", any_meta);
    add("aten." + std::string(op) + ".dims", any_meta);
    add("aten." + std::string(op) + ".default", any_meta);
  }
}

}  // namespace coil::ops
