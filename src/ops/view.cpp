// Meta functions of the view ops: the output aliases the input's storage, so sizes, strides and
// the storage offset follow PyTorch's view semantics exactly.
#include <algorithm>
#include <limits>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

sym::Expr offset_of(sym::Context& ctx, const TensorMeta& m) {
  return m.storage_offset ? m.storage_offset : ctx.zero();
}

TensorMeta view_of(const TensorMeta& in, std::vector<sym::Expr> sizes,
                   std::vector<sym::Expr> strides, sym::Expr offset) {
  TensorMeta out;
  out.dtype = in.dtype;
  out.device = in.device;
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  out.storage_offset = (offset && offset->is_const() && offset->value == 0) ? nullptr : offset;
  return out;
}

std::vector<sym::Expr> in_strides(sym::Context& ctx, const TensorMeta& m) {
  if (m.strides.size() == m.sizes.size()) return m.strides;
  return contiguous_strides(ctx, m.sizes);
}

// Target sizes of view/reshape: an int/sym list with at most one -1.
std::vector<sym::Expr> infer_view_sizes(sym::Context& ctx, const OpCall& c, const Arg& list,
                                        const TensorMeta& in) {
  std::vector<sym::Expr> sizes;
  int infer = -1;
  const Arg::List single = {list};
  const Arg::List& items = list.is_list() ? list.list() : single;
  for (size_t i = 0; i < items.size(); ++i) {
    sym::Expr e = size_arg(ctx, items[i]);
    if (ctx.as_const(e) == -1) {
      COIL_USER_CHECK(infer < 0) << c.op << ": only one dimension can be inferred";
      infer = static_cast<int>(i);
    } else {
      COIL_USER_CHECK(!(e->is_const() && e->value < 0)) << c.op << ": invalid size " << e->value;
    }
    sizes.push_back(e);
  }
  sym::Expr total = numel(ctx, in.sizes);
  if (infer >= 0) {
    std::vector<sym::Expr> known;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (static_cast<int>(i) != infer) known.push_back(sizes[i]);
    }
    sym::Expr k = numel(ctx, known);
    COIL_USER_CHECK(ctx.as_const(k) != 0) << c.op << ": cannot infer a dim with other sizes 0";
    sizes[infer] = ctx.floordiv(total, k);
  } else {
    sym::Expr n = numel(ctx, sizes);
    auto a = ctx.as_const(total), b = ctx.as_const(n);
    COIL_USER_CHECK(!(a && b && *a != *b))
        << c.op << ": shape is invalid for an input of " << (a ? *a : -1) << " elements";
  }
  return sizes;
}

bool eq(sym::Context& ctx, sym::Expr a, sym::Expr b) { return a == b || ctx.provably_eq(a, b); }
bool lt(sym::Context& ctx, sym::Expr a, sym::Expr b) { return a != b && ctx.provably_lt(a, b); }

// PyTorch's computeStride (aten/src/ATen/TensorUtils.cpp): strides of a view of (sizes,
// strides) with new sizes, or nullopt when the view needs a copy.
std::optional<std::vector<sym::Expr>> compute_view_strides(sym::Context& ctx,
                                                           const std::vector<sym::Expr>& old_sz,
                                                           const std::vector<sym::Expr>& old_st,
                                                           const std::vector<sym::Expr>& new_sz) {
  std::vector<sym::Expr> new_st(new_sz.size());
  if (old_sz.empty()) {
    std::fill(new_st.begin(), new_st.end(), ctx.one());
    return new_st;
  }
  if (new_sz.empty()) return new_st;
  int64_t view_d = static_cast<int64_t>(new_sz.size()) - 1;
  sym::Expr chunk_base = old_st.back();
  sym::Expr tensor_numel = ctx.one();
  sym::Expr view_numel = ctx.one();
  for (int64_t td = static_cast<int64_t>(old_sz.size()) - 1; td >= 0; --td) {
    tensor_numel = ctx.mul(tensor_numel, old_sz[td]);
    bool chunk_end = td == 0 || (ctx.as_const(old_sz[td - 1]) != 1 &&
                                 !eq(ctx, old_st[td - 1], ctx.mul(tensor_numel, chunk_base)));
    if (!chunk_end) continue;
    while (view_d >= 0 &&
           (lt(ctx, view_numel, tensor_numel) || ctx.as_const(new_sz[view_d]) == 1 ||
            // Symbolic sizes: keep taking view dims while the products are not yet equal.
            (!eq(ctx, view_numel, tensor_numel) && !lt(ctx, tensor_numel, view_numel)))) {
      new_st[view_d] = ctx.mul(view_numel, chunk_base);
      view_numel = ctx.mul(view_numel, new_sz[view_d]);
      --view_d;
    }
    if (!eq(ctx, view_numel, tensor_numel)) return std::nullopt;
    if (td > 0) {
      chunk_base = old_st[td - 1];
      tensor_numel = ctx.one();
      view_numel = ctx.one();
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_st;
}

// aten.view.default(self, size) / aten._unsafe_view.default / aten.reshape.default
std::vector<TensorMeta> view_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* size = c.arg(1, "size");
  COIL_USER_CHECK(size != nullptr) << c.op << ": needs a size";
  std::vector<sym::Expr> sizes = infer_view_sizes(ctx, c, *size, in);
  std::vector<sym::Expr> strides;
  // An empty tensor can always be viewed (PyTorch's computeStride; its strides address nothing).
  if (is_contiguous(ctx, in) || ctx.as_const(numel(ctx, in.sizes)) == 0) {
    strides = contiguous_strides(ctx, sizes);
  } else {
    auto st = compute_view_strides(ctx, in.sizes, in_strides(ctx, in), sizes);
    COIL_USER_CHECK(st.has_value())
        << c.op << ": view size is not compatible with the input's size and stride";
    strides = std::move(*st);
  }
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// aten._unsafe_view.default: used on fresh tensors; the result is always row-major.
std::vector<TensorMeta> unsafe_view_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* size = c.arg(1, "size");
  COIL_USER_CHECK(size != nullptr) << c.op << ": needs a size";
  std::vector<sym::Expr> sizes = infer_view_sizes(ctx, c, *size, in);
  std::vector<sym::Expr> strides = contiguous_strides(ctx, sizes);
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// aten.permute.default(self, dims)
std::vector<TensorMeta> permute_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dims = opt_int_list(c, 1, "dims");
  COIL_USER_CHECK(dims && static_cast<int64_t>(dims->size()) == in.rank())
      << c.op << ": dims must list every dim of a rank-" << in.rank() << " tensor";
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes, strides;
  std::vector<bool> seen(in.rank(), false);
  for (int64_t d : *dims) {
    int64_t w = wrap_dim(d, in.rank());
    COIL_USER_CHECK(!seen[w]) << c.op << ": repeated dim " << d;
    seen[w] = true;
    sizes.push_back(in.sizes[w]);
    strides.push_back(st[w]);
  }
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// aten.expand.default(self, size, *, implicit=False)
std::vector<TensorMeta> expand_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* size = c.arg(1, "size");
  COIL_USER_CHECK(size && size->is_list()) << c.op << ": needs a size list";
  const auto& items = size->list();
  int64_t n = static_cast<int64_t>(items.size());
  COIL_USER_CHECK(n >= in.rank()) << c.op << ": cannot expand rank " << in.rank() << " to " << n;
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes(n), strides(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = i - (n - in.rank());
    sym::Expr want = size_arg(ctx, items[i]);
    if (j < 0) {
      COIL_USER_CHECK(ctx.as_const(want) != -1) << c.op << ": -1 not allowed for a new dim";
      sizes[i] = want;
      strides[i] = ctx.zero();
      continue;
    }
    sym::Expr have = in.sizes[j];
    if (ctx.as_const(want) == -1 || eq(ctx, want, have)) {
      sizes[i] = have;
      strides[i] = st[j];
    } else {
      COIL_USER_CHECK(ctx.as_const(have) == 1 || !(have->is_const() && want->is_const()))
          << c.op << ": cannot expand size " << have->value << " to " << want->value;
      if (ctx.as_const(have) == 1) {
        sizes[i] = want;
        strides[i] = ctx.zero();
      } else {
        sizes[i] = have;  // symbolic sizes that must be equal
        strides[i] = st[j];
      }
    }
  }
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// squeeze.dim(self, dim), squeeze.dims(self, dims), squeeze.default(self): only size-1 dims go.
std::vector<TensorMeta> squeeze_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dims = opt_int_list(c, 1, "dim");
  std::vector<bool> mask(in.rank(), !dims.has_value());
  if (dims) {
    for (int64_t d : *dims) {
      int64_t w = wrap_dim(d, in.rank());
      if (in.rank() > 0) mask[w] = true;
    }
  }
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes, strides;
  for (int64_t i = 0; i < in.rank(); ++i) {
    if (mask[i] && ctx.as_const(in.sizes[i]) == 1) continue;
    sizes.push_back(in.sizes[i]);
    strides.push_back(st[i]);
  }
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// aten.unsqueeze.default(self, dim)
std::vector<TensorMeta> unsqueeze_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  int64_t d = wrap_dim(*dim, in.rank() + 1);
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes = in.sizes, strides = st;
  sym::Expr s = d < in.rank() ? ctx.mul(in.sizes[d], st[d]) : ctx.one();
  sizes.insert(sizes.begin() + d, ctx.one());
  strides.insert(strides.begin() + d, s);
  return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
}

// aten.slice.Tensor(self, dim=0, start=None, end=None, step=1)
std::vector<TensorMeta> slice_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() > 0) << c.op << ": cannot slice a 0-dim tensor";
  int64_t dim = wrap_dim(opt_int(c, 1, "dim").value_or(0), in.rank());
  sym::Expr size = in.sizes[dim];
  auto bound = [&](size_t i, std::string_view name, sym::Expr dflt) {
    const Arg* a = c.arg(i, name);
    if (a == nullptr || a->is_none()) return dflt;
    sym::Expr e = size_arg(ctx, *a);
    if (auto v = ctx.as_const(e)) {
      if (*v < 0) e = ctx.max(ctx.add(e, size), ctx.zero());           // negative: from the end
      if (*v >= std::numeric_limits<int64_t>::max() / 2) return size;  // "to the end"
    }
    if (ctx.provably_le(e, size)) return e;
    return ctx.min(e, size);
  };
  sym::Expr start = bound(2, "start", ctx.zero());
  sym::Expr end = bound(3, "end", size);
  int64_t step = opt_int(c, 4, "step").value_or(1);
  COIL_USER_CHECK(step > 0) << c.op << ": step must be positive";
  end = ctx.max(end, start);
  sym::Expr len =
      ctx.floordiv(ctx.add(ctx.sub(end, start), ctx.constant(step - 1)), ctx.constant(step));
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes = in.sizes, strides = st;
  sizes[dim] = len;
  strides[dim] = ctx.mul(st[dim], ctx.constant(step));
  sym::Expr offset = ctx.add(offset_of(ctx, in), ctx.mul(start, st[dim]));
  return {view_of(in, std::move(sizes), std::move(strides), offset)};
}

// aten.select.int(self, dim, index)
std::vector<TensorMeta> select_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() > 0) << c.op << ": cannot select from a 0-dim tensor";
  auto dim_arg = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim_arg.has_value()) << c.op << ": needs a dim";
  int64_t dim = wrap_dim(*dim_arg, in.rank());
  const Arg* idx = c.arg(2, "index");
  COIL_USER_CHECK(idx != nullptr) << c.op << ": needs an index";
  sym::Expr index = size_arg(ctx, *idx);
  if (auto v = ctx.as_const(index); v && *v < 0) index = ctx.add(index, in.sizes[dim]);
  if (auto v = ctx.as_const(index), n = ctx.as_const(in.sizes[dim]); v && n) {
    COIL_USER_CHECK(*v >= 0 && *v < *n) << c.op << ": index out of range";
  }
  auto st = in_strides(ctx, in);
  sym::Expr offset = ctx.add(offset_of(ctx, in), ctx.mul(index, st[dim]));
  std::vector<sym::Expr> sizes = in.sizes, strides = st;
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return {view_of(in, std::move(sizes), std::move(strides), offset)};
}

TensorMeta transposed(sym::Context& ctx, const TensorMeta& in, int64_t d0, int64_t d1) {
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes = in.sizes;
  if (in.rank() > 0) {
    d0 = wrap_dim(d0, in.rank());
    d1 = wrap_dim(d1, in.rank());
    std::swap(sizes[d0], sizes[d1]);
    std::swap(st[d0], st[d1]);
  }
  return view_of(in, std::move(sizes), std::move(st), offset_of(ctx, in));
}

// aten.t.default(self): rank <= 2
std::vector<TensorMeta> t_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() <= 2) << c.op << ": expects a tensor of rank <= 2";
  if (in.rank() < 2) return {transposed(ctx, in, 0, 0)};
  return {transposed(ctx, in, 0, 1)};
}

// aten.transpose.int(self, dim0, dim1)
std::vector<TensorMeta> transpose_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  auto d0 = opt_int(c, 1, "dim0"), d1 = opt_int(c, 2, "dim1");
  COIL_USER_CHECK(d0 && d1) << c.op << ": needs two dims";
  return {transposed(ctx, in, *d0, *d1)};
}

// aten.as_strided.default(self, size, stride, storage_offset=None)
std::vector<TensorMeta> as_strided_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* size = c.arg(1, "size");
  const Arg* stride = c.arg(2, "stride");
  COIL_USER_CHECK(size && size->is_list() && stride && stride->is_list())
      << c.op << ": needs size and stride lists";
  COIL_USER_CHECK(size->list().size() == stride->list().size())
      << c.op << ": size and stride differ in length";
  std::vector<sym::Expr> sizes, strides;
  for (const Arg& a : size->list()) sizes.push_back(size_arg(ctx, a));
  for (const Arg& a : stride->list()) strides.push_back(size_arg(ctx, a));
  const Arg* off = c.arg(3, "storage_offset");
  sym::Expr offset = (off && !off->is_none()) ? size_arg(ctx, *off) : offset_of(ctx, in);
  return {view_of(in, std::move(sizes), std::move(strides), offset)};
}

// aten.alias.default / aten.detach.default (the same view)
std::vector<TensorMeta> alias_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  return {view_of(in, in.sizes, in_strides(ctx, in), offset_of(ctx, in))};
}

// aten.reshape.default(self, shape): a view where view() would be one (PyTorch's reshape
// tries computeStride first), else a row-major copy at offset 0 (clone + _unsafe_view).
std::vector<TensorMeta> reshape_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  const Arg* size = c.arg(1, "shape");
  COIL_USER_CHECK(size != nullptr) << c.op << ": needs a shape";
  std::vector<sym::Expr> sizes = infer_view_sizes(ctx, c, *size, in);
  if (is_contiguous(ctx, in) || ctx.as_const(numel(ctx, in.sizes)) == 0) {
    std::vector<sym::Expr> strides = contiguous_strides(ctx, sizes);
    return {view_of(in, std::move(sizes), std::move(strides), offset_of(ctx, in))};
  }
  if (auto st = compute_view_strides(ctx, in.sizes, in_strides(ctx, in), sizes)) {
    return {view_of(in, std::move(sizes), std::move(*st), offset_of(ctx, in))};
  }
  std::vector<sym::Expr> strides = contiguous_strides(ctx, sizes);
  return {view_of(in, std::move(sizes), std::move(strides), ctx.zero())};
}

// Views of consecutive pieces of `dim` (split, split_with_sizes): each is a slice with the
// input's strides, offset by the sizes before it.
std::vector<TensorMeta> pieces(sym::Context& ctx, const TensorMeta& in, int64_t dim,
                               const std::vector<sym::Expr>& lens) {
  auto st = in_strides(ctx, in);
  std::vector<TensorMeta> out;
  sym::Expr start = ctx.zero();
  for (sym::Expr len : lens) {
    std::vector<sym::Expr> sizes = in.sizes;
    sizes[dim] = len;
    out.push_back(
        view_of(in, std::move(sizes), st, ctx.add(offset_of(ctx, in), ctx.mul(start, st[dim]))));
    start = ctx.add(start, len);
  }
  return out;
}

// aten.split.Tensor(self, split_size, dim=0): ceil(size / split_size) pieces (at least one,
// so an empty dim gives one empty piece), the last one shorter.
std::vector<TensorMeta> split_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() > 0) << c.op << ": cannot split a 0-dim tensor";
  const Arg* sa = c.arg(1, "split_size");
  COIL_USER_CHECK(sa != nullptr) << c.op << ": needs a split_size";
  sym::Expr split = size_arg(ctx, *sa);
  int64_t dim = wrap_dim(opt_int(c, 2, "dim").value_or(0), in.rank());
  sym::Expr size = in.sizes[dim];
  std::vector<sym::Expr> lens;
  if (ctx.provably_le(size, split)) {
    lens.push_back(size);
  } else {
    COIL_USER_CHECK(ctx.as_const(split) != 0) << c.op << ": split_size 0 only splits an empty dim";
    // The number of pieces must be known: constant sizes, or a size that is a known multiple
    // of the split size (plus a known remainder).
    auto q = ctx.as_const(ctx.floordiv(size, split));
    auto r = ctx.as_const(ctx.mod(size, split));
    COIL_USER_CHECK(q && r) << c.op << ": the number of pieces depends on a symbolic size";
    for (int64_t i = 0; i < *q; ++i) lens.push_back(split);
    if (*r > 0) lens.push_back(ctx.constant(*r));
  }
  return pieces(ctx, in, dim, lens);
}

// aten.split_with_sizes.default(self, split_sizes, dim=0): the sizes must add up to the dim.
std::vector<TensorMeta> split_with_sizes_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() > 0) << c.op << ": cannot split a 0-dim tensor";
  const Arg* list = c.arg(1, "split_sizes");
  COIL_USER_CHECK(list && list->is_list()) << c.op << ": needs a list of split sizes";
  int64_t dim = wrap_dim(opt_int(c, 2, "dim").value_or(0), in.rank());
  std::vector<sym::Expr> lens;
  for (const Arg& a : list->list()) lens.push_back(size_arg(ctx, a));
  auto total = ctx.as_const(ctx.sum(lens)), size = ctx.as_const(in.sizes[dim]);
  COIL_USER_CHECK(!(total && size && *total != *size))
      << c.op << ": split sizes add up to " << *total << ", the dim has " << *size;
  return pieces(ctx, in, dim, lens);
}

// aten.unbind.int(self, dim=0): one select per index of a dim of constant size.
std::vector<TensorMeta> unbind_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() > 0) << c.op << ": cannot unbind a 0-dim tensor";
  int64_t dim = wrap_dim(opt_int(c, 1, "dim").value_or(0), in.rank());
  auto n = ctx.as_const(in.sizes[dim]);
  COIL_USER_CHECK(n.has_value()) << c.op << ": the number of pieces depends on a symbolic size";
  auto st = in_strides(ctx, in);
  std::vector<sym::Expr> sizes = in.sizes, strides = st;
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  std::vector<TensorMeta> out;
  for (int64_t i = 0; i < *n; ++i) {
    out.push_back(view_of(in, sizes, strides,
                          ctx.add(offset_of(ctx, in), ctx.mul(ctx.constant(i), st[dim]))));
  }
  return out;
}

}  // namespace

void register_view_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::View, fn); };
  add("aten.view.default", view_meta);
  add("aten._unsafe_view.default", unsafe_view_meta);
  add("aten.permute.default", permute_meta);
  add("aten.expand.default", expand_meta);
  add("aten.squeeze.dim", squeeze_meta);
  add("aten.squeeze.dims", squeeze_meta);
  add("aten.squeeze.default", squeeze_meta);
  add("aten.unsqueeze.default", unsqueeze_meta);
  add("aten.slice.Tensor", slice_meta);
  add("aten.select.int", select_meta);
  add("aten.t.default", t_meta);
  add("aten.transpose.int", transpose_meta);
  add("aten.as_strided.default", as_strided_meta);
  add("aten.alias.default", alias_meta);
  add("aten.detach.default", alias_meta);
  add("aten.reshape.default", reshape_meta);
  add("aten.split.Tensor", split_meta);
  add("aten.split_with_sizes.default", split_with_sizes_meta);
  add("aten.unbind.int", unbind_meta);
}

}  // namespace coil::ops
