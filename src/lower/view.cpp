// View lowerings: index remappings of their input's loader, never copies. When the input is a
// strided window onto a buffer, the result's `strided` is kept exact.
#include <algorithm>
#include <limits>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {

namespace {

using detail::int_list;
using loop::BodyBuilder;
using Index = std::vector<sym::Expr>;
using Reindex = std::function<Index(const Index&)>;

TensorValue view_value(const TensorValue& x, Index sizes, Reindex f,
                       std::optional<StridedRef> strided) {
  TensorValue tv;
  tv.dtype = x.dtype;
  tv.device = x.device;
  tv.sizes = std::move(sizes);
  Loader inner = x.load;
  tv.load = [inner, f = std::move(f)](BodyBuilder& b, const Index& idx) {
    return inner(b, f(idx));
  };
  tv.strided = std::move(strided);
  tv.inline_cost = x.inline_cost;
  tv.inline_reads = x.inline_reads;
  tv.full_read_buffers = x.full_read_buffers;
  tv.read_buffers = x.read_buffers;
  tv.reuse_cost = x.reuse_cost;
  return tv;
}

sym::Expr sym_arg(sym::Context& c, const Arg& a) {
  if (a.is_sym()) return std::get<sym::Expr>(a.v);
  return c.constant(a.as_int());
}

Index sym_list(sym::Context& c, const Arg* a, const char* what) {
  COIL_USER_CHECK(a != nullptr) << "missing " << what;
  Index out;
  if (a->is_list()) {
    for (const Arg& e : a->list()) out.push_back(sym_arg(c, e));
  } else {
    out.push_back(sym_arg(c, *a));
  }
  return out;
}

int64_t int_arg(const Node& n, size_t i, std::string_view name, int64_t def) {
  const Arg* a = n.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  return a->as_int();
}

bool is_one(sym::Context& c, sym::Expr e) { return c.as_const(e) == 1; }

std::vector<TensorValue> one(TensorValue v) { return {std::move(v)}; }

TensorValue permute(const TensorValue& x, const std::vector<int64_t>& dims_in) {
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(static_cast<int64_t>(dims_in.size()) == rank) << "permute: wrong dims";
  std::vector<int64_t> dims;
  for (int64_t d : dims_in) dims.push_back(normalize_dim(d, rank));
  Index sizes;
  for (int64_t d : dims) sizes.push_back(x.sizes[d]);
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    for (size_t k = 0; k < dims.size(); ++k) s->strides[k] = x.strided->strides[dims[k]];
  }
  return view_value(
      x, sizes,
      [dims](const Index& idx) {
        Index in(idx.size());
        for (size_t k = 0; k < dims.size(); ++k) in[dims[k]] = idx[k];
        return in;
      },
      s);
}

TensorValue transpose(const TensorValue& x, int64_t d0, int64_t d1) {
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  if (rank == 0) return x;
  d0 = normalize_dim(d0, rank);
  d1 = normalize_dim(d1, rank);
  std::vector<int64_t> dims(rank);
  for (int64_t k = 0; k < rank; ++k) dims[k] = k;
  std::swap(dims[d0], dims[d1]);
  return permute(x, dims);
}

TensorValue expand(sym::Context& c, const TensorValue& x, Index sizes) {
  size_t off = sizes.size() - x.sizes.size();
  COIL_USER_CHECK(sizes.size() >= x.sizes.size()) << "expand: fewer dims than the input";
  std::vector<bool> broadcast(sizes.size(), true);
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (k < off) continue;
    sym::Expr in = x.sizes[k - off];
    if (c.as_const(sizes[k]) == -1) sizes[k] = in;
    if (sizes[k] == in || c.provably_eq(sizes[k], in)) {
      sizes[k] = in;
      broadcast[k] = false;
    } else {
      COIL_USER_CHECK(is_one(c, in)) << "expand: size " << c.str(in) << " to " << c.str(sizes[k]);
    }
  }
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    s->strides.assign(sizes.size(), c.zero());
    for (size_t k = off; k < sizes.size(); ++k) {
      if (!broadcast[k]) s->strides[k] = x.strided->strides[k - off];
    }
  }
  sym::Context* cp = &c;
  return view_value(
      x, sizes,
      [off, broadcast, cp](const Index& idx) {
        Index in;
        for (size_t k = off; k < idx.size(); ++k) {
          in.push_back(broadcast[k] ? cp->zero() : idx[k]);
        }
        return in;
      },
      s);
}

// Removes the dims in `drop` (all of size 1).
TensorValue squeeze(sym::Context& c, const TensorValue& x, std::vector<bool> drop) {
  Index sizes;
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    s->strides.clear();
  }
  for (size_t k = 0; k < x.sizes.size(); ++k) {
    if (drop[k]) continue;
    sizes.push_back(x.sizes[k]);
    if (s) s->strides.push_back(x.strided->strides[k]);
  }
  sym::Context* cp = &c;
  return view_value(
      x, sizes,
      [drop, cp](const Index& idx) {
        Index in;
        size_t j = 0;
        for (bool d : drop) in.push_back(d ? cp->zero() : idx.at(j++));
        return in;
      },
      s);
}

TensorValue unsqueeze(sym::Context& c, const TensorValue& x, int64_t dim) {
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  dim = normalize_dim(dim, rank + 1);
  Index sizes = x.sizes;
  sizes.insert(sizes.begin() + dim, c.one());
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    sym::Expr st = dim < rank ? c.mul(x.sizes[dim], x.strided->strides[dim]) : c.one();
    s->strides.insert(s->strides.begin() + dim, st);
  }
  return view_value(
      x, sizes,
      [dim](const Index& idx) {
        Index in = idx;
        in.erase(in.begin() + dim);
        return in;
      },
      s);
}

// Python slice bounds clamped to [0, size].
sym::Expr clamp_bound(sym::Context& c, std::optional<int64_t> v, sym::Expr size, bool is_end) {
  if (!v) return is_end ? size : c.zero();
  int64_t b = *v;
  auto cs = c.as_const(size);
  if (cs) {
    if (b < 0) b += *cs;
    return c.constant(std::clamp<int64_t>(b, 0, *cs));
  }
  if (b >= 0) {
    if (b >= (int64_t{1} << 40)) return size;  // "to the end"
    return c.min(c.constant(b), size);
  }
  return c.max(c.add(size, c.constant(b)), c.zero());
}

// A slice bound given as an argument (an int or, with dynamic shapes, a symbolic expression such
// as `s0 + 3`), clamped to [0, size] as slice_meta does (src/ops/view.cpp). A symbolic bound
// must be provably non-negative: a negative one counts from the end, which the bound's sign
// decides at run time.
sym::Expr clamp_bound_arg(sym::Context& c, const Arg* a, sym::Expr size, bool is_end) {
  if (a == nullptr || a->is_none()) return clamp_bound(c, std::nullopt, size, is_end);
  sym::Expr e = sym_arg(c, *a);
  if (auto v = c.as_const(e)) return clamp_bound(c, *v, size, is_end);
  COIL_USER_CHECK(c.provably_nonneg(e))
      << "slice: symbolic bound of unknown sign (negative counts from the end)";
  if (c.provably_le(e, size)) return e;
  return c.min(e, size);
}

TensorValue slice(sym::Context& c, const TensorValue& x, int64_t dim, sym::Expr start,
                  sym::Expr end, int64_t step) {
  COIL_USER_CHECK(step > 0) << "slice: step must be positive";
  Index sizes = x.sizes;
  sym::Expr len = c.max(c.sub(end, start), c.zero());
  sizes[dim] = step == 1 ? len : c.floordiv(c.add(len, c.constant(step - 1)), c.constant(step));
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    sym::Expr st = x.strided->strides[dim];
    s->offset = c.add(s->offset ? s->offset : c.zero(), c.mul(start, st));
    s->strides[dim] = c.mul(st, c.constant(step));
  }
  sym::Context* cp = &c;
  return view_value(
      x, sizes,
      [dim, start, step, cp](const Index& idx) {
        Index in = idx;
        in[dim] = cp->add(start, cp->mul(idx[dim], cp->constant(step)));
        return in;
      },
      s);
}

TensorValue select(sym::Context& c, const TensorValue& x, int64_t dim, sym::Expr index) {
  Index sizes = x.sizes;
  sizes.erase(sizes.begin() + dim);
  std::optional<StridedRef> s;
  if (x.strided) {
    s = *x.strided;
    s->offset = c.add(s->offset ? s->offset : c.zero(), c.mul(index, x.strided->strides[dim]));
    s->strides.erase(s->strides.begin() + dim);
  }
  return view_value(
      x, sizes,
      [dim, index](const Index& idx) {
        Index in = idx;
        in.insert(in.begin() + dim, index);
        return in;
      },
      s);
}

bool window_is_contiguous(sym::Context& c, const TensorValue& x) {
  if (!x.strided) return false;
  TensorMeta m;
  m.sizes = x.sizes;
  m.strides = x.strided->strides;
  return is_contiguous(c, m);
}

// PyTorch's computeStride for constant sizes and strides: the strides of `sizes` viewing the
// same elements as x without a copy, if there are such strides. A view of a non-contiguous
// tensor then stays a view with PyTorch's strides (a graph output that is such a view must
// have them: the backward graph was compiled for them; fuzz seed 209).
std::optional<Index> view_strides(sym::Context& c, const TensorValue& x, const Index& sizes) {
  if (!x.strided || x.sizes.empty() || sizes.empty()) return std::nullopt;
  std::vector<int64_t> os, ost, ns;
  for (size_t k = 0; k < x.sizes.size(); ++k) {
    auto a = c.as_const(x.sizes[k]);
    auto b = c.as_const(x.strided->strides[k]);
    if (!a || !b) return std::nullopt;
    os.push_back(*a);
    ost.push_back(*b);
  }
  for (sym::Expr e : sizes) {
    auto a = c.as_const(e);
    if (!a || *a < 0) return std::nullopt;
    ns.push_back(*a);
  }
  for (int64_t v : os)
    if (v == 0) return std::nullopt;
  std::vector<int64_t> st(ns.size(), 0);
  int64_t view_d = static_cast<int64_t>(ns.size()) - 1;
  int64_t chunk_base = ost.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base;
        view_numel *= ns[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  Index out;
  for (int64_t v : st) out.push_back(c.constant(v));
  return out;
}

TensorValue reshape(LoweringContext& lc, const TensorValue& x, Index sizes) {
  sym::Context& c = lc.ctx();
  sym::Expr total = numel(c, x.sizes);
  int infer = -1;
  sym::Expr known = c.one();
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (c.as_const(sizes[k]) == -1) {
      COIL_USER_CHECK(infer < 0) << "view: two -1 sizes";
      infer = static_cast<int>(k);
    } else {
      known = c.mul(known, sizes[k]);
    }
  }
  if (infer >= 0) sizes[infer] = c.floordiv(total, known);
  if (sizes == x.sizes) return x;
  std::optional<Index> strides;
  if (window_is_contiguous(c, x)) {
    strides = contiguous_strides(c, sizes);
  } else {
    strides = view_strides(c, x, sizes);
  }
  if (strides) {
    // A new strided window on the same storage, read through a View buffer: no index math.
    return lc.window(x.strided->base, x.dtype, x.device, sizes, *strides, x.strided->offset);
  }
  if (c.as_const(total) == 0) {
    // No elements: nothing is ever loaded (and the strides below would divide by zero).
    Index zeros(x.sizes.size(), c.zero());
    return view_value(
        x, sizes, [zeros](const Index&) { return zeros; }, std::nullopt);
  }
  // Flatten the output index, unflatten into the input's dims.
  Index in_sizes = x.sizes;
  Index out_sizes = sizes;
  sym::Context* cp = &c;
  return view_value(
      x, sizes,
      [in_sizes, out_sizes, cp](const Index& idx) {
        sym::Context& cc = *cp;
        Index os = contiguous_strides(cc, out_sizes);
        sym::Expr flat = cc.zero();
        for (size_t k = 0; k < idx.size(); ++k) {
          flat = cc.add(flat, cc.mul(idx[k], os[k]));
        }
        Index is = contiguous_strides(cc, in_sizes);
        Index in(in_sizes.size());
        for (size_t k = 0; k < in_sizes.size(); ++k) {
          if (cc.as_const(in_sizes[k]) == 1) {
            in[k] = cc.zero();
            continue;
          }
          sym::Expr q = cc.floordiv(flat, is[k]);
          in[k] = k == 0 ? q : cc.mod(q, in_sizes[k]);
        }
        return in;
      },
      std::nullopt);
}

// A View buffer of base storage (as_strided).
TensorValue as_strided(LoweringContext& lc, const Node& n) {
  sym::Context& c = lc.ctx();
  const Value* xv = n.arg(0, "self")->value();
  TensorValue x = lc.value(xv);
  if (!x.strided) x = lc.realize_with_strides(x, dense_strides_like(c, xv->meta()));
  Index sizes = sym_list(c, n.arg(1, "size"), "size");
  Index strides = sym_list(c, n.arg(2, "stride"), "stride");
  COIL_USER_CHECK(sizes.size() == strides.size()) << "as_strided: sizes/strides rank mismatch";
  const StridedRef& s = *x.strided;
  sym::Expr offset = s.offset ? s.offset : c.zero();
  const Arg* so = n.arg(3, "storage_offset");
  if (so && !so->is_none()) {
    // An absolute storage offset; our storage starts at the base buffer's element 0.
    sym::Expr abs = sym_arg(c, *so);
    const loop::Buffer& base = lc.program().buffer(s.base);
    sym::Expr base_abs = c.zero();
    if (base.kind == loop::BufferKind::Input) {
      sym::Expr o = lc.graph().inputs().at(base.input_index)->meta().storage_offset;
      if (o) base_abs = o;
    }
    offset = c.sub(abs, base_abs);
  }
  return lc.window(s.base, x.dtype, x.device, sizes, strides, offset);
}

// flip (prims.rev, what aten.flip decomposes to): index i of a flipped dim reads size-1-i. In
// PyTorch a copy; here a lazy remap without a strided window, realized where it is needed.
TensorValue flip(sym::Context& c, const TensorValue& x, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  std::vector<bool> flipped(rank, false);
  for (int64_t d : dims) flipped[normalize_dim(d, rank)] = true;
  Index sizes = x.sizes;
  return view_value(
      x, sizes,
      [&c, sizes, flipped](const Index& idx) {
        Index in = idx;
        for (size_t k = 0; k < in.size(); ++k) {
          if (flipped[k]) in[k] = c.sub(c.sub(sizes[k], c.one()), idx[k]);
        }
        return in;
      },
      std::nullopt);
}

}  // namespace

void register_view_lowerings(LoweringRegistry& r) {
  auto view_fn = [](LoweringContext& lc, const Node& n) {
    return one(
        reshape(lc, lc.arg_value(n, 0, "self"), sym_list(lc.ctx(), n.arg(1, "size"), "size")));
  };
  r.add("aten.view.default", view_fn);
  r.add("aten._unsafe_view.default", view_fn);
  r.add("aten.reshape.default", [](LoweringContext& lc, const Node& n) {
    return one(
        reshape(lc, lc.arg_value(n, 0, "self"), sym_list(lc.ctx(), n.arg(1, "shape"), "shape")));
  });
  r.add("aten.permute.default", [](LoweringContext& lc, const Node& n) {
    return one(permute(lc.arg_value(n, 0, "self"), int_list(n.arg(1, "dims"))));
  });
  r.add("aten.expand.default", [](LoweringContext& lc, const Node& n) {
    return one(
        expand(lc.ctx(), lc.arg_value(n, 0, "self"), sym_list(lc.ctx(), n.arg(1, "size"), "size")));
  });
  auto squeeze_dims = [](LoweringContext& lc, const Node& n, bool all) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    sym::Context& c = lc.ctx();
    int64_t rank = static_cast<int64_t>(x.sizes.size());
    std::vector<bool> drop(rank, false);
    if (all) {
      for (int64_t k = 0; k < rank; ++k) drop[k] = is_one(c, x.sizes[k]);
    } else {
      for (int64_t d : int_list(n.arg(1, "dim"))) {
        if (rank == 0) continue;
        d = normalize_dim(d, rank);
        drop[d] = is_one(c, x.sizes[d]);
      }
    }
    return one(squeeze(c, x, drop));
  };
  r.add("aten.squeeze.default",
        [squeeze_dims](LoweringContext& lc, const Node& n) { return squeeze_dims(lc, n, true); });
  r.add("aten.squeeze.dim",
        [squeeze_dims](LoweringContext& lc, const Node& n) { return squeeze_dims(lc, n, false); });
  r.add("aten.squeeze.dims",
        [squeeze_dims](LoweringContext& lc, const Node& n) { return squeeze_dims(lc, n, false); });
  r.add("aten.unsqueeze.default", [](LoweringContext& lc, const Node& n) {
    return one(unsqueeze(lc.ctx(), lc.arg_value(n, 0, "self"), int_arg(n, 1, "dim", 0)));
  });
  r.add("aten.slice.Tensor", [](LoweringContext& lc, const Node& n) {
    sym::Context& c = lc.ctx();
    const TensorValue& x = lc.arg_value(n, 0, "self");
    int64_t rank = static_cast<int64_t>(x.sizes.size());
    int64_t dim = normalize_dim(int_arg(n, 1, "dim", 0), rank);
    sym::Expr start = clamp_bound_arg(c, n.arg(2, "start"), x.sizes[dim], false);
    sym::Expr end = clamp_bound_arg(c, n.arg(3, "end"), x.sizes[dim], true);
    int64_t step = int_arg(n, 4, "step", 1);
    if (start == c.zero() && end == x.sizes[dim] && step == 1) return one(x);
    return one(slice(c, x, dim, start, end, step));
  });
  r.add("aten.select.int", [](LoweringContext& lc, const Node& n) {
    sym::Context& c = lc.ctx();
    const TensorValue& x = lc.arg_value(n, 0, "self");
    int64_t rank = static_cast<int64_t>(x.sizes.size());
    int64_t dim = normalize_dim(int_arg(n, 1, "dim", 0), rank);
    const Arg* ia = n.arg(2, "index");
    COIL_USER_CHECK(ia != nullptr) << "select: missing index";
    sym::Expr index = sym_arg(c, *ia);
    if (auto ci = c.as_const(index); ci && *ci < 0) index = c.add(x.sizes[dim], index);
    return one(select(c, x, dim, index));
  });
  r.add("aten.t.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    if (x.sizes.size() < 2) return one(x);
    return one(transpose(x, 0, 1));
  });
  r.add("aten.transpose.int", [](LoweringContext& lc, const Node& n) {
    return one(
        transpose(lc.arg_value(n, 0, "self"), int_arg(n, 1, "dim0", 0), int_arg(n, 2, "dim1", 1)));
  });
  r.add("aten.as_strided.default",
        [](LoweringContext& lc, const Node& n) { return one(as_strided(lc, n)); });
  r.add("aten.detach.default",
        [](LoweringContext& lc, const Node& n) { return one(lc.arg_value(n, 0, "self")); });
  auto split = [](LoweringContext& lc, const Node& n, bool with_sizes) {
    sym::Context& c = lc.ctx();
    const TensorValue& x = lc.arg_value(n, 0, "self");
    int64_t rank = static_cast<int64_t>(x.sizes.size());
    int64_t dim = normalize_dim(int_arg(n, 2, "dim", 0), rank);
    std::vector<TensorValue> outs;
    sym::Expr start = c.zero();
    size_t count = n.outputs().size();
    Index lens;
    if (with_sizes) {
      lens = sym_list(c, n.arg(1, "split_sizes"), "split_sizes");
    } else {
      sym::Expr sz = sym_arg(c, *n.arg(1, "split_size"));
      for (size_t k = 0; k < count; ++k) {
        sym::Expr rest = c.sub(x.sizes[dim], c.mul(sz, c.constant(static_cast<int64_t>(k))));
        lens.push_back(k + 1 == count ? rest : sz);
      }
    }
    COIL_USER_CHECK(lens.size() == count)
        << n.op() << ": " << lens.size() << " pieces for " << count << " outputs";
    for (size_t k = 0; k < count; ++k) {
      sym::Expr end = c.add(start, lens[k]);
      outs.push_back(slice(c, x, dim, start, end, 1));
      start = end;
    }
    return outs;
  };
  r.add("aten.split.Tensor",
        [split](LoweringContext& lc, const Node& n) { return split(lc, n, false); });
  r.add("aten.split_with_sizes.default",
        [split](LoweringContext& lc, const Node& n) { return split(lc, n, true); });
  r.add("prims.rev.default", [](LoweringContext& lc, const Node& n) {
    return one(flip(lc.ctx(), lc.arg_value(n, 0, "a"), int_list(n.arg(1, "dims"))));
  });
  r.add("aten.flip.default", [](LoweringContext& lc, const Node& n) {
    return one(flip(lc.ctx(), lc.arg_value(n, 0, "self"), int_list(n.arg(1, "dims"))));
  });
  r.add("aten.unbind.int", [](LoweringContext& lc, const Node& n) {
    sym::Context& c = lc.ctx();
    const TensorValue& x = lc.arg_value(n, 0, "self");
    int64_t dim = normalize_dim(int_arg(n, 1, "dim", 0), static_cast<int64_t>(x.sizes.size()));
    std::vector<TensorValue> outs;
    for (size_t k = 0; k < n.outputs().size(); ++k) {
      outs.push_back(select(c, x, dim, c.constant(static_cast<int64_t>(k))));
    }
    return outs;
  });
}

}  // namespace coil::lower
