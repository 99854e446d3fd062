// Reduction lowerings: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin,
// any/all, var/std/var_mean, softmax.
//
// Every reduction is realized by LoweringContext::reduce; what follows a reduction (the mean's
// division, a dtype cast) stays a lazy pointwise value that consumers inline. Accumulation
// happens in dtype_compute of the result type (f16/bf16 accumulate in f32); sums and products of
// bools and integers accumulate and return int64 as PyTorch does (the node's output meta carries
// the result dtype, dtype= arguments included).
#include <algorithm>
#include <optional>
#include <vector>

#include "coil/lower/lowering.h"
#include "coil/support/error.h"
#include "family_util.h"
#include "split_reduction.h"

namespace coil::lower {
namespace {

using namespace detail;
using loop::BodyBuilder;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

// The dims of an int-or-list argument; nullopt when absent or None.
std::optional<std::vector<int64_t>> int_list_arg(const Node& node, size_t i,
                                                 std::string_view name) {
  const Arg* a = node.arg(i, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  std::vector<int64_t> out;
  if (a->is_list()) {
    for (const Arg& e : a->list()) out.push_back(e.as_int());
  } else {
    out.push_back(a->as_int());
  }
  return out;
}

// Which dims of the input are reduced, and the resulting shapes.
struct ReducePlan {
  std::vector<bool> reduced;    // per input dim
  std::vector<Expr> out_sizes;  // keepdim layout included
  std::vector<Expr> red_sizes;  // sizes of the reduced dims, in dim order
  bool keepdim = false;

  // The input index of the element (out_index, red_index).
  std::vector<Expr> input_index(const std::vector<Expr>& out_index,
                                const std::vector<Expr>& red_index) const {
    std::vector<Expr> idx;
    size_t o = 0, r = 0;
    for (size_t d = 0; d < reduced.size(); ++d) {
      if (reduced[d]) {
        idx.push_back(red_index.at(r++));
        if (keepdim) ++o;
      } else {
        idx.push_back(out_index.at(o++));
      }
    }
    return idx;
  }
};

// `dims`: nullopt or empty = every dim. Negative dims are normalized; duplicates rejected.
ReducePlan plan_reduction(LoweringContext& ctx, const std::vector<Expr>& sizes,
                          const std::optional<std::vector<int64_t>>& dims, bool keepdim) {
  ReducePlan p;
  p.keepdim = keepdim;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  p.reduced.assign(sizes.size(), dims == std::nullopt || dims->empty());
  if (dims && !dims->empty()) {
    for (int64_t d : *dims) {
      if (rank == 0) {
        COIL_USER_CHECK(d == 0 || d == -1) << "dim " << d << " out of range for a 0-d tensor";
        continue;
      }
      int64_t nd = normalize_dim(d, rank);
      COIL_USER_CHECK(!p.reduced[nd]) << "dim " << d << " appears twice in the reduction";
      p.reduced[nd] = true;
    }
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (p.reduced[d]) {
      p.red_sizes.push_back(sizes[d]);
      if (keepdim) p.out_sizes.push_back(ctx.ctx().one());
    } else {
      p.out_sizes.push_back(sizes[d]);
    }
  }
  return p;
}

Expr numel_of(LoweringContext& ctx, const std::vector<Expr>& sizes) {
  return ctx.ctx().product(sizes);
}

// Reduces `x` (each element mapped by `pre`, which receives the loaded and converted value) with
// `kind`, accumulating in `acc` and returning `out` (a lazy cast of the realized reduction when
// the types differ).
using PreFn = std::function<InstrId(BodyBuilder& b, InstrId v, const std::vector<Expr>& out_idx)>;

TensorValue reduce_value(LoweringContext& ctx, const TensorValue& x, const ReducePlan& p,
                         ReduceKind kind, DType acc, DType out, PreFn pre = nullptr) {
  Loader load = x.load;
  ReducePlan plan = p;
  const bool is_arg = kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin;
  if (plan.red_sizes.empty()) {
    // Nothing to reduce (0-d input): the element itself, or position 0 for argmax/argmin.
    if (is_arg) {
      return ctx.pointwise(out, plan.out_sizes, [](BodyBuilder& b, const std::vector<Expr>&) {
        return b.int_constant(0, DType::Int64);
      });
    }
    return ctx.pointwise(
        out, plan.out_sizes,
        [load, plan, acc, out, pre](BodyBuilder& b, const std::vector<Expr>& idx) {
          InstrId v = b.cast(load(b, plan.input_index(idx, {})), acc);
          if (pre) v = pre(b, v, idx);
          return b.cast(v, out);
        },
        x.inline_cost + 2, x.inline_reads);
  }
  // The reduction's buffer has the result type when it accumulates in `acc` anyway
  // (ctx.reduce accumulates in dtype_compute of its dtype), else `acc` plus a lazy cast.
  DType stored = is_arg ? DType::Int64 : (dtype_compute(out) == acc ? out : acc);
  TensorValue r =
      ctx.reduce(kind, stored, plan.out_sizes, plan.red_sizes,
                 [load, plan, acc, pre](BodyBuilder& b, const std::vector<Expr>& out_idx,
                                        const std::vector<Expr>& red_idx) {
                   InstrId v = b.cast(load(b, plan.input_index(out_idx, red_idx)), acc);
                   if (pre) v = pre(b, v, out_idx);
                   return v;
                 });
  return cast_value(ctx, r, out);
}

// Accumulation type for sum/prod/mean results of dtype `out`.
DType acc_dtype(DType out) { return dtype_is_floating(out) ? dtype_compute(out) : DType::Int64; }

// --- sum / prod / mean

std::vector<TensorValue> lower_sum_like(LoweringContext& ctx, const Node& node, ReduceKind kind,
                                        const std::optional<std::vector<int64_t>>& dims,
                                        bool keepdim) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  DType out = out_dtype(node, 0);
  return {reduce_value(ctx, x, p, kind, acc_dtype(out), out)};
}

TensorValue mean_of(LoweringContext& ctx, const TensorValue& x, const ReducePlan& p, DType out) {
  DType acc = dtype_compute(out);
  COIL_USER_CHECK(dtype_is_floating(out)) << "mean of a non-floating dtype";
  TensorValue sum = reduce_value(ctx, x, p, ReduceKind::Sum, acc, acc);
  Expr n = numel_of(ctx, p.red_sizes);
  Loader sl = sum.load;
  return ctx.pointwise(
      out, p.out_sizes,
      [sl, n, acc, out](BodyBuilder& b, const std::vector<Expr>& idx) {
        InstrId s = sl(b, idx);
        InstrId d = b.cast(b.index_expr(n), acc);
        return b.cast(b.op(InstrKind::Div, acc, s, d), out);
      },
      3, 1);
}

std::vector<TensorValue> lower_mean(LoweringContext& ctx, const Node& node,
                                    const std::optional<std::vector<int64_t>>& dims, bool keepdim) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  return {mean_of(ctx, x, p, out_dtype(node, 0))};
}

// --- amax / amin / max / min / argmax / argmin

std::vector<TensorValue> lower_extreme(LoweringContext& ctx, const Node& node, ReduceKind kind,
                                       const std::optional<std::vector<int64_t>>& dims,
                                       bool keepdim) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  DType out = out_dtype(node, 0);
  return {reduce_value(ctx, x, p, kind, dtype_compute(x.dtype), out)};
}

// max.dim / min.dim: values and Int64 indices of the first extreme element.
std::vector<TensorValue> lower_extreme_dim(LoweringContext& ctx, const Node& node, bool is_max) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  int64_t dim = node.arg(1, "dim")->as_int();
  bool keepdim = bool_arg(node, 2, "keepdim", false);
  ReducePlan p = plan_reduction(ctx, x.sizes, std::vector<int64_t>{dim}, keepdim);
  DType vt = out_dtype(node, 0);
  TensorValue values = reduce_value(ctx, x, p, is_max ? ReduceKind::Max : ReduceKind::Min,
                                    dtype_compute(x.dtype), vt);
  TensorValue indices = reduce_value(ctx, x, p, is_max ? ReduceKind::ArgMax : ReduceKind::ArgMin,
                                     dtype_compute(x.dtype), DType::Int64);
  return {values, indices};
}

std::vector<TensorValue> lower_arg(LoweringContext& ctx, const Node& node, bool is_max) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  std::optional<std::vector<int64_t>> dims = int_list_arg(node, 1, "dim");
  bool keepdim = bool_arg(node, 2, "keepdim", false);
  // dim=None: the position in the flattened tensor (ArgMax over every dim flattens them
  // row-major, which is exactly that); keepdim then keeps every dim as size 1.
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  return {reduce_value(ctx, x, p, is_max ? ReduceKind::ArgMax : ReduceKind::ArgMin,
                       dtype_compute(x.dtype), DType::Int64)};
}

// --- any / all

std::vector<TensorValue> lower_any_all(LoweringContext& ctx, const Node& node, bool is_any,
                                       const std::optional<std::vector<int64_t>>& dims,
                                       bool keepdim) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  DType out = out_dtype(node, 0);
  DType in = dtype_compute(x.dtype);
  PreFn pre = [in](BodyBuilder& b, InstrId v, const std::vector<Expr>&) {
    if (in == DType::Bool) return v;
    return b.op(InstrKind::Ne, DType::Bool, v, b.constant(0, in));
  };
  // `pre` receives the value converted to `in`; the reduction runs on Bool.
  ReducePlan plan = p;
  Loader load = x.load;
  if (p.red_sizes.empty()) {
    return {ctx.pointwise(
        out, p.out_sizes,
        [load, plan, in, pre, out](BodyBuilder& b, const std::vector<Expr>& idx) {
          InstrId v = b.cast(load(b, plan.input_index(idx, {})), in);
          return b.cast(pre(b, v, idx), out);
        },
        x.inline_cost + 2, x.inline_reads)};
  }
  TensorValue r = ctx.reduce(is_any ? ReduceKind::Any : ReduceKind::All, DType::Bool,
                             plan.out_sizes, plan.red_sizes,
                             [load, plan, in, pre](BodyBuilder& b, const std::vector<Expr>& oi,
                                                   const std::vector<Expr>& ri) {
                               InstrId v = b.cast(load(b, plan.input_index(oi, ri)), in);
                               return pre(b, v, oi);
                             });
  return {cast_value(ctx, r, out)};
}

// --- var / std / var_mean
//
// Two passes over data shifted by K, the row's first element: s = sum(x - K) (a sum reduction,
// realized), mean = K + s / N, then the sum of squared deviations sum(((x - K) - s / N)^2) (a
// second reduction whose body reads s and K at its output index). Subtracting the mean before
// squaring avoids the cancellation of the one-pass E[x^2] - E[x]^2 formula and is as accurate as
// Welford's online algorithm, at the cost of reading the input twice, which fusion can share
// with other consumers; it also keeps the reduction kinds to plain sums. The shift makes equal
// values exact, as Welford's update keeps them in eager: every x - K is 0, so the variance is 0
// and the mean is K (unshifted, the mean of equal floats can come out one ulp off and their
// variance ~1e-15; fuzz seeds 5204, 6528). K is realized, one element per output point, so the
// reductions read it like the sum, not the input's first element per element (that kept the
// CPU loops off their vector path: docs/fuzzing.md). Rows that may be empty are not shifted.
// Large CUDA reductions take one pass instead (one_pass_var below).

struct VarResult {
  TensorValue var;
  TensorValue mean;
};

// On CUDA, where the reduction is large enough to be split (split_reduction.h: a BatchNorm's
// statistics over N*H*W), the second pass re-reads the input from DRAM. There the squared
// deviations come from the same pass as the sum, sum((x - K)^2) - sum(x - K)^2 / N: with K a
// sample of the row the cancellation costs about (mean - K)^2 / var ulps (a few), where the
// unshifted E[x^2] - E[x]^2 would lose every digit of a large common offset. Equal values still
// give exactly 0.
bool one_pass_var(LoweringContext& ctx, const ReducePlan& p) {
  return ctx.target().split_reductions &&
         detail::plan_reduction_split(ctx.ctx(), ReduceKind::Sum, p.out_sizes, p.red_sizes,
                                      ctx.options().split_reduction_min_elements,
                                      ctx.options().split_reduction_min_length);
}

VarResult var_and_mean(LoweringContext& ctx, const TensorValue& x,
                       const std::optional<std::vector<int64_t>>& dims, bool keepdim,
                       double correction, DType out, bool take_sqrt) {
  COIL_USER_CHECK(dtype_is_floating(out)) << "var/std of a non-floating dtype";
  ReducePlan p = plan_reduction(ctx, x.sizes, dims, keepdim);
  DType acc = dtype_compute(out);
  sym::Context& c = ctx.ctx();
  bool shifted = !p.red_sizes.empty();
  for (Expr r : p.red_sizes) shifted = shifted && (!c.as_const(r) || *c.as_const(r) > 0);
  Loader shift = [acc](BodyBuilder& b, const std::vector<Expr>&) { return b.constant(0, acc); };
  if (shifted) {
    Loader xl = x.load;
    std::vector<Expr> first(p.red_sizes.size(), c.zero());
    Loader first_element = [xl, p, first, acc](BodyBuilder& b, const std::vector<Expr>& idx) {
      return b.cast(xl(b, p.input_index(idx, first)), acc);
    };
    if (ctx.target().inline_variance_shift && x.strided) {
      // On the GPU the readers load the row's first element of the realized input themselves
      // (a cached load the row shares): realized, K was one more tiny kernel per BatchNorm,
      // and the two statistics' last stages read no common input to be fused by.
      shift = first_element;
    } else {
      shift = ctx.realize(ctx.pointwise(acc, p.out_sizes, first_element, x.inline_cost + 1,
                                        x.inline_reads))
                  .load;
    }
  }
  PreFn minus_k = [shift, acc, shifted](BodyBuilder& b, InstrId v,
                                        const std::vector<Expr>& out_idx) {
    return shifted ? b.op(InstrKind::Sub, acc, v, shift(b, out_idx)) : v;
  };
  TensorValue sum = reduce_value(ctx, x, p, ReduceKind::Sum, acc, acc, minus_k);
  Expr n = numel_of(ctx, p.red_sizes);
  Loader sl = sum.load;
  Loader mean_shifted = [sl, n, acc](BodyBuilder& b, const std::vector<Expr>& idx) {
    return b.op(InstrKind::Div, acc, sl(b, idx), b.cast(b.index_expr(n), acc));
  };
  Loader mean_acc = [mean_shifted, shift, acc, shifted](BodyBuilder& b,
                                                        const std::vector<Expr>& idx) {
    InstrId m = mean_shifted(b, idx);
    return shifted ? b.op(InstrKind::Add, acc, shift(b, idx), m) : m;
  };
  Loader ssl;
  if (one_pass_var(ctx, p)) {
    // sum((x - K)^2) - s^2 / N, independent of s: both sums read x in one pass.
    PreFn sq = [minus_k, acc](BodyBuilder& b, InstrId v, const std::vector<Expr>& out_idx) {
      InstrId d = minus_k(b, v, out_idx);
      return b.op(InstrKind::Mul, acc, d, d);
    };
    Loader s2 = reduce_value(ctx, x, p, ReduceKind::Sum, acc, acc, sq).load;
    ssl = [s2, sl, mean_shifted, acc](BodyBuilder& b, const std::vector<Expr>& idx) {
      InstrId d = b.op(InstrKind::Sub, acc, s2(b, idx),
                       b.op(InstrKind::Mul, acc, sl(b, idx), mean_shifted(b, idx)));
      return b.op(InstrKind::Maximum, acc, d, b.constant(0, acc));
    };
  } else {
    PreFn sq = [minus_k, mean_shifted, acc](BodyBuilder& b, InstrId v,
                                            const std::vector<Expr>& out_idx) {
      InstrId d = b.op(InstrKind::Sub, acc, minus_k(b, v, out_idx), mean_shifted(b, out_idx));
      return b.op(InstrKind::Mul, acc, d, d);
    };
    ssl = reduce_value(ctx, x, p, ReduceKind::Sum, acc, acc, sq).load;
  }
  TensorValue var = ctx.pointwise(
      out, p.out_sizes,
      [ssl, n, acc, out, correction, take_sqrt](BodyBuilder& b, const std::vector<Expr>& idx) {
        // PyTorch: divisor = max(N - correction, 0) (0 gives inf/nan, as eager).
        InstrId nn = b.cast(b.index_expr(n), acc);
        InstrId div =
            b.op(InstrKind::Maximum, acc,
                 b.op(InstrKind::Sub, acc, nn, b.constant(correction, acc)), b.constant(0, acc));
        InstrId v = b.op(InstrKind::Div, acc, ssl(b, idx), div);
        if (take_sqrt) v = b.op(InstrKind::Sqrt, acc, v);
        return b.cast(v, out);
      },
      6, 1);
  TensorValue mean = ctx.pointwise(
      out, p.out_sizes,
      [mean_acc, out](BodyBuilder& b, const std::vector<Expr>& idx) {
        return b.cast(mean_acc(b, idx), out);
      },
      4, 2);
  return {var, mean};
}

// --- softmax

// aten._softmax(self, dim, half_to_float): the row's max, the sum of exp(x - max), and
// exp(x - max) / sum, in dtype_compute of the result. Lowered here rather than decomposed: in
// the decomposition exp(x - max) is a value with two readers (the sum and the division), and
// with an inlined input of some cost (GPT-2's masked, scaled attention scores) the reuse rule
// realized it, a float32 round trip of the whole [B, H, T, T] tensor (H100: the softmax kernel
// took 78 us, not 37). Here only x is read, three times, through its loader.
std::vector<TensorValue> lower_softmax(LoweringContext& ctx, const Node& node) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  const int64_t dim_arg = node.arg(1, "dim")->as_int();
  // A 0-d tensor is its own row (plan_reduction checks dim is 0 or -1).
  const size_t dim = rank == 0 ? 0 : static_cast<size_t>(normalize_dim(dim_arg, rank));
  DType out = out_dtype(node, 0);
  COIL_USER_CHECK(dtype_is_floating(out)) << "_softmax of a non-floating dtype";
  DType acc = dtype_compute(out);
  ReducePlan p = plan_reduction(ctx, x.sizes, std::vector<int64_t>{dim_arg}, /*keepdim=*/true);
  TensorValue mx = reduce_value(ctx, x, p, ReduceKind::Max, acc, acc);
  Loader ml = mx.load;
  PreFn shifted_exp = [ml, acc](BodyBuilder& b, InstrId v, const std::vector<Expr>& out_idx) {
    return b.op(InstrKind::Exp, acc, b.op(InstrKind::Sub, acc, v, ml(b, out_idx)));
  };
  TensorValue sum = reduce_value(ctx, x, p, ReduceKind::Sum, acc, acc, shifted_exp);
  Loader xl = x.load, sl = sum.load;
  sym::Context& c = ctx.ctx();
  return {ctx.pointwise(
      out, x.sizes,
      [xl, ml, sl, dim, acc, out, &c](BodyBuilder& b, const std::vector<Expr>& idx) {
        std::vector<Expr> row = idx;
        if (!row.empty()) row[dim] = c.zero();
        InstrId v = b.cast(xl(b, idx), acc);
        InstrId e = b.op(InstrKind::Exp, acc, b.op(InstrKind::Sub, acc, v, ml(b, row)));
        return b.cast(b.op(InstrKind::Div, acc, e, sl(b, row)), out);
      },
      x.inline_cost + 4, x.inline_reads + 2)};
}

// Reads correction (Scalar?) or, for the older overloads, unbiased (bool).
double correction_arg(const Node& node, bool correction_overload, size_t unbiased_pos) {
  if (correction_overload) {
    const Arg* c = node.arg(2, "correction");
    if (c == nullptr || c->is_none()) return 1.0;
    return c->as_double();
  }
  return bool_arg(node, unbiased_pos, "unbiased", true) ? 1.0 : 0.0;
}

// Registers the variance family: `which` 0 = var, 1 = std, 2 = var_mean, 3 = std_mean.
void add_var(LoweringRegistry& r, const std::string& base, int which) {
  auto make = [which](int mode) {
    // mode 0: .correction(self, dim=None, *, correction=None, keepdim=False)
    // mode 1: .dim(self, dim, unbiased=True, keepdim=False)
    // mode 2: .default(self, unbiased=True)
    return [which, mode](LoweringContext& ctx, const Node& node) {
      const TensorValue& x = ctx.arg_value(node, 0, "self");
      std::optional<std::vector<int64_t>> dims;
      bool keepdim = false;
      double correction = 1.0;
      if (mode == 0) {
        dims = int_list_arg(node, 1, "dim");
        keepdim = bool_arg(node, 3, "keepdim", false);
        correction = correction_arg(node, true, 0);
      } else if (mode == 1) {
        dims = int_list_arg(node, 1, "dim");
        correction = correction_arg(node, false, 2);
        keepdim = bool_arg(node, 3, "keepdim", false);
      } else {
        correction = correction_arg(node, false, 1);
      }
      bool take_sqrt = which == 1 || which == 3;
      VarResult vr = var_and_mean(ctx, x, dims, keepdim, correction, out_dtype(node, 0), take_sqrt);
      if (which >= 2) return std::vector<TensorValue>{vr.var, vr.mean};
      return std::vector<TensorValue>{vr.var};
    };
  };
  r.add(base + ".correction", make(0));
  r.add(base + ".dim", make(1));
  r.add(base + ".default", make(2));
}

}  // namespace

void register_reduction_lowerings(LoweringRegistry& r) {
  // sum
  r.add("aten.sum.default", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Sum, std::nullopt, false);
  });
  r.add("aten.sum.dim_IntList", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Sum, int_list_arg(node, 1, "dim"),
                          bool_arg(node, 2, "keepdim", false));
  });
  // prims.sum / prims.prod: what PyTorch's cumsum / cumprod decompositions reduce with.
  r.add("prims.sum.default", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Sum, int_list_arg(node, 1, "dims"), false);
  });
  r.add("prims.prod.default", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Prod, int_list_arg(node, 1, "dims"), false);
  });
  // prod
  r.add("aten.prod.default", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Prod, std::nullopt, false);
  });
  r.add("aten.prod.dim_int", [](LoweringContext& ctx, const Node& node) {
    return lower_sum_like(ctx, node, ReduceKind::Prod,
                          std::vector<int64_t>{node.arg(1, "dim")->as_int()},
                          bool_arg(node, 2, "keepdim", false));
  });
  // mean
  r.add("aten.mean.default", [](LoweringContext& ctx, const Node& node) {
    return lower_mean(ctx, node, std::nullopt, false);
  });
  r.add("aten.mean.dim", [](LoweringContext& ctx, const Node& node) {
    return lower_mean(ctx, node, int_list_arg(node, 1, "dim"), bool_arg(node, 2, "keepdim", false));
  });
  r.add("aten._softmax.default", lower_softmax);
  // amax / amin (dim=[] reduces every dim)
  r.add("aten.amax.default", [](LoweringContext& ctx, const Node& node) {
    return lower_extreme(ctx, node, ReduceKind::Max, int_list_arg(node, 1, "dim"),
                         bool_arg(node, 2, "keepdim", false));
  });
  r.add("aten.amin.default", [](LoweringContext& ctx, const Node& node) {
    return lower_extreme(ctx, node, ReduceKind::Min, int_list_arg(node, 1, "dim"),
                         bool_arg(node, 2, "keepdim", false));
  });
  // max / min
  r.add("aten.max.default", [](LoweringContext& ctx, const Node& node) {
    return lower_extreme(ctx, node, ReduceKind::Max, std::nullopt, false);
  });
  r.add("aten.min.default", [](LoweringContext& ctx, const Node& node) {
    return lower_extreme(ctx, node, ReduceKind::Min, std::nullopt, false);
  });
  r.add("aten.max.dim",
        [](LoweringContext& ctx, const Node& node) { return lower_extreme_dim(ctx, node, true); });
  r.add("aten.min.dim",
        [](LoweringContext& ctx, const Node& node) { return lower_extreme_dim(ctx, node, false); });
  // argmax / argmin
  r.add("aten.argmax.default",
        [](LoweringContext& ctx, const Node& node) { return lower_arg(ctx, node, true); });
  r.add("aten.argmin.default",
        [](LoweringContext& ctx, const Node& node) { return lower_arg(ctx, node, false); });
  // any / all
  for (bool is_any : {true, false}) {
    std::string base = is_any ? "aten.any" : "aten.all";
    r.add(base + ".default", [is_any](LoweringContext& ctx, const Node& node) {
      return lower_any_all(ctx, node, is_any, std::nullopt, false);
    });
    r.add(base + ".dim", [is_any](LoweringContext& ctx, const Node& node) {
      return lower_any_all(ctx, node, is_any, std::vector<int64_t>{node.arg(1, "dim")->as_int()},
                           bool_arg(node, 2, "keepdim", false));
    });
    r.add(base + ".dims", [is_any](LoweringContext& ctx, const Node& node) {
      return lower_any_all(ctx, node, is_any, int_list_arg(node, 1, "dim"),
                           bool_arg(node, 2, "keepdim", false));
    });
  }
  add_var(r, "aten.var", 0);
  add_var(r, "aten.std", 1);
  add_var(r, "aten.var_mean", 2);
  add_var(r, "aten.std_mean", 3);
}

}  // namespace coil::lower
