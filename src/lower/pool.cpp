// Pooling lowerings over the last two dims of 3-d (C, H, W) or 4-d (N, C, H, W) inputs:
// max_pool2d_with_indices (+ backward), avg_pool2d (+ backward), _adaptive_avg_pool2d
// (+ backward).
//
// Forward ops are pointwise over the output with the window unrolled (constant kernel sizes;
// larger windows than kMaxUnrolledWindow fall back, except adaptive pooling, which becomes a
// masked sum reduction). Backward ops are pointwise over the input gradient: each input position
// visits the few output windows that can contain it, as Inductor does, so no scatter is needed.
// Summation orders follow PyTorch's CPU kernels (windows and taps in ascending order).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "coil/lower/lowering.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {
namespace {

using namespace detail;
using loop::BodyBuilder;
using loop::InstrId;
using loop::InstrKind;
using sym::Expr;

// Most taps a pointwise window may unroll.
constexpr int64_t kMaxUnrolledWindow = 25;

// Expands a 1- or 2-element list to 2 (H, W); `def` when empty.
std::vector<int64_t> pair_arg(const Node& node, size_t i, std::string_view name,
                              std::vector<int64_t> def) {
  std::vector<int64_t> v = ints_arg(node, i, name);
  if (v.empty()) v = std::move(def);
  if (v.size() == 1) v.push_back(v[0]);
  COIL_USER_CHECK(v.size() == 2) << name << " must have 1 or 2 elements";
  return v;
}

struct Window {
  std::vector<int64_t> kernel, stride, padding, dilation;
};

Window window_args(const Node& node, size_t k_pos, bool has_dilation) {
  Window w;
  w.kernel = pair_arg(node, k_pos, "kernel_size", {});
  w.stride = pair_arg(node, k_pos + 1, "stride", w.kernel);
  w.padding = pair_arg(node, k_pos + 2, "padding", {0});
  w.dilation =
      has_dilation ? pair_arg(node, k_pos + 3, "dilation", {1}) : std::vector<int64_t>{1, 1};
  for (int d = 0; d < 2; ++d) {
    COIL_USER_CHECK(w.kernel[d] > 0 && w.stride[d] > 0 && w.dilation[d] > 0 && w.padding[d] >= 0)
        << "pooling: bad kernel/stride/padding/dilation";
  }
  return w;
}

void check_rank(const TensorValue& x) {
  COIL_USER_CHECK(x.sizes.size() == 3 || x.sizes.size() == 4)
      << "2-d pooling expects a 3-d or 4-d input";
}

// idx with its last two entries replaced.
std::vector<Expr> with_hw(const std::vector<Expr>& idx, Expr h, Expr w) {
  std::vector<Expr> out = idx;
  out[out.size() - 2] = h;
  out[out.size() - 1] = w;
  return out;
}

Expr c_(sym::Context& c, int64_t v) { return c.constant(v); }

// 0 <= e < n
Expr in_range(sym::Context& c, Expr e, Expr n) { return c.mul(c.le(c.zero(), e), c.lt(e, n)); }

// --- max_pool2d_with_indices

// Lowest value of a dtype's compute type (the max-pool initial value).
double lowest(DType t) {
  if (dtype_is_floating(t)) return -std::numeric_limits<double>::infinity();
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
      return 0;
    case DType::Int8:
      return -128;
    case DType::Int16:
      return -32768;
    case DType::Int32:
      return static_cast<double>(std::numeric_limits<int32_t>::min());
    default:
      return static_cast<double>(std::numeric_limits<int64_t>::min());
  }
}

std::vector<TensorValue> lower_max_pool2d(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  // On the CPU a computed input (ResNet's BatchNorm + ReLU) is realized once rather than
  // recomputed for each of the window's taps: ResNet-18 inference 180-185 -> 166-168 ms
  // (2 threads). On the GPU the taps' recomputation is cheap next to the round trip (not
  // measured there; left inline).
  const TensorValue& x_in = ctx.arg_value(node, 0, "self");
  const bool realize_input = x_in.inline_cost > 1 && ctx.target().realize_pool_input;
  const TensorValue& x = realize_input ? ctx.realize(x_in) : x_in;
  check_rank(x);
  Window w = window_args(node, 1, true);
  COIL_USER_CHECK(w.kernel[0] * w.kernel[1] <= kMaxUnrolledWindow)
      << "max_pool2d: window of " << w.kernel[0] * w.kernel[1] << " taps is too large to unroll";
  const std::vector<Expr> out_sizes = node.output(0)->meta().sizes;
  const Expr H = x.sizes[x.sizes.size() - 2], W = x.sizes.back();
  const DType acc = dtype_compute(x.dtype);
  // PyTorch's CPU kernel: the first in-bounds tap starts the window; a later tap replaces it
  // when it is greater or NaN. Returns the value or the flat index ih * W + iw of the chosen
  // tap (the index chain is built only when asked for).
  auto window = [x, w, H, W, acc, cx](BodyBuilder& b, const std::vector<Expr>& idx,
                                      bool want_index) {
    sym::Context& c = *cx;
    const Expr oh = idx[idx.size() - 2], ow = idx.back();
    InstrId best = b.constant(lowest(acc), acc);
    InstrId best_i = b.int_constant(0, DType::Int64);
    InstrId seen = -1;       // Bool: an in-bounds tap was seen (when not known statically)
    bool seen_sure = false;  // an in-bounds tap was certainly seen
    for (int64_t kh = 0; kh < w.kernel[0]; ++kh) {
      for (int64_t kw = 0; kw < w.kernel[1]; ++kw) {
        Expr ih = c.add(c.mul(oh, c_(c, w.stride[0])), c_(c, kh * w.dilation[0] - w.padding[0]));
        Expr iw = c.add(c.mul(ow, c_(c, w.stride[1])), c_(c, kw * w.dilation[1] - w.padding[1]));
        Expr ok = c.mul(in_range(c, ih, H), in_range(c, iw, W));
        if (c.as_const(ok) == 0) continue;
        const bool ok_sure = c.as_const(ok) == 1;
        InstrId v = b.cast(load_or(b, c, x, with_hw(idx, ih, iw), ok, b.constant(0, acc)), acc);
        InstrId cond = b.op(InstrKind::Gt, DType::Bool, v, best);
        if (dtype_is_floating(acc)) {
          cond =
              b.op(InstrKind::LogicalOr, DType::Bool, cond, b.op(InstrKind::IsNan, DType::Bool, v));
        }
        if (want_index && !seen_sure) {
          // The first in-bounds tap is taken even when it equals the initial value.
          InstrId first = seen < 0 ? b.int_constant(1, DType::Bool)
                                   : b.op(InstrKind::LogicalNot, DType::Bool, seen);
          cond = seen < 0 ? first : b.op(InstrKind::LogicalOr, DType::Bool, cond, first);
        }
        InstrId okv = ok_sure ? -1 : cond_instr(b, ok);
        if (okv >= 0) cond = b.op(InstrKind::LogicalAnd, DType::Bool, okv, cond);
        best = b.op(InstrKind::Where, acc, cond, v, best);
        if (want_index) {
          InstrId flat = b.index_expr(c.add(c.mul(ih, W), iw), DType::Int64);
          best_i = b.op(InstrKind::Where, DType::Int64, cond, flat, best_i);
          if (ok_sure) {
            seen_sure = true;
          } else if (!seen_sure) {
            seen = seen < 0 ? okv : b.op(InstrKind::LogicalOr, DType::Bool, seen, okv);
          }
        }
      }
    }
    return want_index ? best_i : best;
  };
  int taps = static_cast<int>(w.kernel[0] * w.kernel[1]);
  int cost = taps * (x.inline_cost + 8);
  int reads = taps * x.inline_reads;
  TensorValue values = ctx.pointwise(
      x.dtype, out_sizes,
      [window](BodyBuilder& b, const std::vector<Expr>& idx) { return window(b, idx, false); },
      cost, reads);
  TensorValue indices = ctx.pointwise(
      DType::Int64, out_sizes,
      [window](BodyBuilder& b, const std::vector<Expr>& idx) { return window(b, idx, true); }, cost,
      reads);
  return {values, indices};
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
// ceil_mode, indices): grad_input[p] = sum of grad_output[o] over the windows o that can
// contain p and whose saved index is p.
std::vector<TensorValue> lower_max_pool2d_backward(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& x = ctx.arg_value(node, 1, "self");
  const TensorValue& ind = ctx.arg_value(node, 7, "indices");
  check_rank(x);
  Window w = window_args(node, 2, true);
  const Expr H = x.sizes[x.sizes.size() - 2], W = x.sizes.back();
  const Expr OH = grad.sizes[grad.sizes.size() - 2], OW = grad.sizes.back();
  // Windows o with o*s in [p + pad - (k-1)*d, p + pad]: at most ((k-1)*d)/s + 1 of them.
  int64_t nh = (w.kernel[0] - 1) * w.dilation[0] / w.stride[0] + 1;
  int64_t nw = (w.kernel[1] - 1) * w.dilation[1] / w.stride[1] + 1;
  COIL_USER_CHECK(nh * nw <= kMaxUnrolledWindow) << "max_pool2d_backward: too many windows";
  DType dt = out_dtype(node);
  DType acc = dtype_compute(dt);
  auto loader = [grad, ind, w, H, W, OH, OW, nh, nw, acc, cx](BodyBuilder& b,
                                                              const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const Expr ih = idx[idx.size() - 2], iw = idx.back();
    auto first = [&](Expr p, int d) {
      // ceil((p + pad - (k-1)*d) / s), clamped at 0
      int64_t span = (w.kernel[d] - 1) * w.dilation[d];
      Expr num = c.add(p, c_(c, w.padding[d] - span + w.stride[d] - 1));
      return c.max(c.floordiv(num, c_(c, w.stride[d])), c.zero());
    };
    Expr oh0 = first(ih, 0), ow0 = first(iw, 1);
    InstrId here = b.index_expr(c.add(c.mul(ih, W), iw), DType::Int64);
    InstrId sum = b.constant(0, acc);
    for (int64_t th = 0; th < nh; ++th) {
      for (int64_t tw = 0; tw < nw; ++tw) {
        Expr oh = c.add(oh0, c_(c, th)), ow = c.add(ow0, c_(c, tw));
        Expr ok = c.mul(c.lt(oh, OH), c.lt(ow, OW));
        if (c.as_const(ok) == 0) continue;
        std::vector<Expr> o = with_hw(idx, oh, ow);
        InstrId saved =
            b.cast(load_or(b, c, ind, o, ok, b.int_constant(-1, DType::Int64)), DType::Int64);
        InstrId g = b.cast(load_or(b, c, grad, o, ok, b.constant(0, acc)), acc);
        InstrId hit = b.op(InstrKind::Eq, DType::Bool, saved, here);
        sum =
            b.op(InstrKind::Add, acc, sum, b.op(InstrKind::Where, acc, hit, g, b.constant(0, acc)));
      }
    }
    return sum;
  };
  int terms = static_cast<int>(nh * nw);
  return {ctx.pointwise(dt, x.sizes, loader, terms * (grad.inline_cost + ind.inline_cost + 6),
                        terms * (grad.inline_reads + ind.inline_reads))};
}

// --- avg_pool2d

struct AvgArgs {
  Window w;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override;
};

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
// with the arguments starting at `k_pos`.
AvgArgs avg_args(const Node& node, size_t k_pos) {
  AvgArgs a;
  a.w = window_args(node, k_pos, false);
  a.ceil_mode = bool_arg(node, k_pos + 3, "ceil_mode", false);
  a.count_include_pad = bool_arg(node, k_pos + 4, "count_include_pad", true);
  const Arg* d = node.arg(k_pos + 5, "divisor_override");
  if (d != nullptr && !d->is_none()) {
    a.divisor_override = d->as_int();
    COIL_USER_CHECK(*a.divisor_override != 0) << "avg_pool2d: divisor must be non-zero";
  }
  return a;
}

// The divisor of output window (oh, ow), per PyTorch's CPU kernel.
Expr avg_divisor(sym::Context& c, const AvgArgs& a, Expr oh, Expr ow, Expr H, Expr W) {
  if (a.divisor_override) return c_(c, *a.divisor_override);
  Expr hs = c.sub(c.mul(oh, c_(c, a.w.stride[0])), c_(c, a.w.padding[0]));
  Expr ws = c.sub(c.mul(ow, c_(c, a.w.stride[1])), c_(c, a.w.padding[1]));
  Expr he = c.min(c.add(hs, c_(c, a.w.kernel[0])), c.add(H, c_(c, a.w.padding[0])));
  Expr we = c.min(c.add(ws, c_(c, a.w.kernel[1])), c.add(W, c_(c, a.w.padding[1])));
  // Windows that do not exist (masked-off candidates in the backward) get divisor 1, not 0.
  if (a.count_include_pad) return c.max(c.mul(c.sub(he, hs), c.sub(we, ws)), c.one());
  Expr hn = c.max(c.sub(c.min(he, H), c.max(hs, c.zero())), c.zero());
  Expr wn = c.max(c.sub(c.min(we, W), c.max(ws, c.zero())), c.zero());
  // An empty window sums to 0; divide by 1 then instead of 0.
  return c.max(c.mul(hn, wn), c.one());
}

std::vector<TensorValue> lower_avg_pool2d(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  check_rank(x);
  AvgArgs a = avg_args(node, 1);
  const int64_t taps = a.w.kernel[0] * a.w.kernel[1];
  COIL_USER_CHECK(taps <= kMaxUnrolledWindow) << "avg_pool2d: window too large to unroll";
  const std::vector<Expr> out_sizes = node.output(0)->meta().sizes;
  const Expr H = x.sizes[x.sizes.size() - 2], W = x.sizes.back();
  DType dt = out_dtype(node);
  DType acc = dtype_compute(dt);
  auto loader = [x, a, H, W, acc, dt, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const Expr oh = idx[idx.size() - 2], ow = idx.back();
    InstrId sum = b.constant(0, acc);
    for (int64_t kh = 0; kh < a.w.kernel[0]; ++kh) {
      for (int64_t kw = 0; kw < a.w.kernel[1]; ++kw) {
        Expr ih = c.add(c.mul(oh, c_(c, a.w.stride[0])), c_(c, kh - a.w.padding[0]));
        Expr iw = c.add(c.mul(ow, c_(c, a.w.stride[1])), c_(c, kw - a.w.padding[1]));
        Expr ok = c.mul(in_range(c, ih, H), in_range(c, iw, W));
        if (c.as_const(ok) == 0) continue;
        InstrId v = b.cast(load_or(b, c, x, with_hw(idx, ih, iw), ok, b.constant(0, acc)), acc);
        sum = b.op(InstrKind::Add, acc, sum, v);
      }
    }
    InstrId div = b.cast(b.index_expr(avg_divisor(c, a, oh, ow, H, W)), acc);
    return b.cast(b.op(InstrKind::Div, acc, sum, div), dtype_compute(dt));
  };
  return {ctx.pointwise(dt, out_sizes, loader, static_cast<int>(taps) * (x.inline_cost + 4) + 4,
                        static_cast<int>(taps) * x.inline_reads)};
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override)
std::vector<TensorValue> lower_avg_pool2d_backward(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& x = ctx.arg_value(node, 1, "self");
  check_rank(x);
  AvgArgs a = avg_args(node, 2);
  const Expr H = x.sizes[x.sizes.size() - 2], W = x.sizes.back();
  const Expr OH = grad.sizes[grad.sizes.size() - 2], OW = grad.sizes.back();
  int64_t nh = (a.w.kernel[0] - 1) / a.w.stride[0] + 1;
  int64_t nw = (a.w.kernel[1] - 1) / a.w.stride[1] + 1;
  COIL_USER_CHECK(nh * nw <= kMaxUnrolledWindow) << "avg_pool2d_backward: too many windows";
  DType dt = out_dtype(node);
  DType acc = dtype_compute(dt);
  auto loader = [grad, a, H, W, OH, OW, nh, nw, acc, cx](BodyBuilder& b,
                                                         const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const Expr ih = idx[idx.size() - 2], iw = idx.back();
    // Windows o with o*s - pad <= p < o*s - pad + k: o from ceil((p + pad - k + 1) / s).
    auto first = [&](Expr p, int d) {
      Expr num = c.add(p, c_(c, a.w.padding[d] - a.w.kernel[d] + a.w.stride[d]));
      return c.max(c.floordiv(num, c_(c, a.w.stride[d])), c.zero());
    };
    Expr oh0 = first(ih, 0), ow0 = first(iw, 1);
    InstrId sum = b.constant(0, acc);
    for (int64_t th = 0; th < nh; ++th) {
      for (int64_t tw = 0; tw < nw; ++tw) {
        Expr oh = c.add(oh0, c_(c, th)), ow = c.add(ow0, c_(c, tw));
        Expr ok =
            all_of(c, {c.lt(oh, OH), c.lt(ow, OW),
                       c.le(c.sub(c.mul(oh, c_(c, a.w.stride[0])), c_(c, a.w.padding[0])), ih),
                       c.le(c.sub(c.mul(ow, c_(c, a.w.stride[1])), c_(c, a.w.padding[1])), iw)});
        if (c.as_const(ok) == 0) continue;
        InstrId g = b.cast(load_or(b, c, grad, with_hw(idx, oh, ow), ok, b.constant(0, acc)), acc);
        InstrId div = b.cast(b.index_expr(avg_divisor(c, a, oh, ow, H, W)), acc);
        sum = b.op(InstrKind::Add, acc, sum, b.op(InstrKind::Div, acc, g, div));
      }
    }
    return sum;
  };
  int terms = static_cast<int>(nh * nw);
  return {ctx.pointwise(dt, x.sizes, loader, terms * (grad.inline_cost + 6),
                        terms * grad.inline_reads)};
}

// --- adaptive average pooling: window o covers [floor(o*I/O), ceil((o+1)*I/O)).

Expr adaptive_start(sym::Context& c, Expr o, int64_t in, int64_t out) {
  return c.floordiv(c.mul(o, c_(c, in)), c_(c, out));
}
Expr adaptive_end(sym::Context& c, Expr o, int64_t in, int64_t out) {
  return c.floordiv(c.add(c.mul(c.add(o, c.one()), c_(c, in)), c_(c, out - 1)), c_(c, out));
}

int64_t const_size(sym::Context& c, Expr e, const char* what) {
  auto v = c.as_const(e);
  COIL_USER_CHECK(v.has_value()) << "adaptive pooling needs a static " << what;
  return *v;
}

// Largest window along one dim.
int64_t adaptive_max_window(int64_t in, int64_t out) {
  int64_t m = 0;
  for (int64_t o = 0; o < out; ++o) {
    int64_t s = o * in / out, e = ((o + 1) * in + out - 1) / out;
    m = std::max(m, e - s);
  }
  return m;
}

std::vector<TensorValue> lower_adaptive_avg_pool2d(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  check_rank(x);
  const std::vector<Expr> out_sizes = node.output(0)->meta().sizes;
  const size_t r = x.sizes.size();
  const int64_t ih = const_size(c, x.sizes[r - 2], "input height");
  const int64_t iw = const_size(c, x.sizes[r - 1], "input width");
  const int64_t oh = const_size(c, out_sizes[r - 2], "output height");
  const int64_t ow = const_size(c, out_sizes[r - 1], "output width");
  COIL_USER_CHECK(oh > 0 && ow > 0) << "adaptive pooling to an empty output";
  const int64_t kh = adaptive_max_window(ih, oh), kw = adaptive_max_window(iw, ow);
  DType dt = out_dtype(node);
  DType acc = dtype_compute(dt);
  // The element of window (o, t): masked off past the window's end.
  auto tap = [x, ih, iw, oh, ow, acc, cx](BodyBuilder& b, const std::vector<Expr>& idx, Expr th,
                                          Expr tw) {
    sym::Context& c = *cx;
    const Expr o_h = idx[idx.size() - 2], o_w = idx.back();
    Expr h = c.add(adaptive_start(c, o_h, ih, oh), th);
    Expr w = c.add(adaptive_start(c, o_w, iw, ow), tw);
    Expr ok = c.mul(c.lt(h, adaptive_end(c, o_h, ih, oh)), c.lt(w, adaptive_end(c, o_w, iw, ow)));
    return b.cast(load_or(b, c, x, with_hw(idx, h, w), ok, b.constant(0, acc)), acc);
  };
  auto area = [ih, iw, oh, ow, acc, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const Expr o_h = idx[idx.size() - 2], o_w = idx.back();
    Expr n = c.mul(c.sub(adaptive_end(c, o_h, ih, oh), adaptive_start(c, o_h, ih, oh)),
                   c.sub(adaptive_end(c, o_w, iw, ow), adaptive_start(c, o_w, iw, ow)));
    return b.cast(b.index_expr(n), acc);
  };
  if (kh * kw <= kMaxUnrolledWindow) {
    auto loader = [tap, area, kh, kw, acc, dt, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
      sym::Context& c = *cx;
      InstrId sum = b.constant(0, acc);
      for (int64_t th = 0; th < kh; ++th) {
        for (int64_t tw = 0; tw < kw; ++tw) {
          sum = b.op(InstrKind::Add, acc, sum, tap(b, idx, c_(c, th), c_(c, tw)));
        }
      }
      return b.cast(b.op(InstrKind::Div, acc, sum, area(b, idx)), dtype_compute(dt));
    };
    return {ctx.pointwise(dt, out_sizes, loader, static_cast<int>(kh * kw) * (x.inline_cost + 4),
                          static_cast<int>(kh * kw) * x.inline_reads)};
  }
  // Large windows (e.g. global pooling to 1x1): a sum reduction over the largest window, taps
  // past a window's end masked to 0, then the division.
  TensorValue sum =
      ctx.reduce(loop::ReduceKind::Sum, acc, out_sizes, {c_(c, kh), c_(c, kw)},
                 [tap](BodyBuilder& b, const std::vector<Expr>& o, const std::vector<Expr>& red) {
                   return tap(b, o, red[0], red[1]);
                 });
  Loader sl = sum.load;
  return {ctx.pointwise(
      dt, out_sizes,
      [sl, area, acc, dt](BodyBuilder& b, const std::vector<Expr>& idx) {
        return b.cast(b.op(InstrKind::Div, acc, sl(b, idx), area(b, idx)), dtype_compute(dt));
      },
      4, 1)};
}

// _adaptive_avg_pool2d_backward(grad_output, self): each input position sums grad / area over
// the windows containing it (window o contains p when start(o) <= p < end(o); those o start at
// floor(p*O/I) and number at most ceil(O/I) + 1).
std::vector<TensorValue> lower_adaptive_avg_pool2d_backward(LoweringContext& ctx,
                                                            const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& x = ctx.arg_value(node, 1, "self");
  check_rank(x);
  const size_t r = x.sizes.size();
  const int64_t ih = const_size(c, x.sizes[r - 2], "input height");
  const int64_t iw = const_size(c, x.sizes[r - 1], "input width");
  const int64_t oh = const_size(c, grad.sizes[r - 2], "output height");
  const int64_t ow = const_size(c, grad.sizes[r - 1], "output width");
  const int64_t nh = (oh + ih - 1) / ih + 1, nw = (ow + iw - 1) / iw + 1;
  COIL_USER_CHECK(nh * nw <= kMaxUnrolledWindow) << "adaptive_avg_pool2d_backward: upsampling "
                                                    "too far";
  DType dt = out_dtype(node);
  DType acc = dtype_compute(dt);
  auto loader = [grad, ih, iw, oh, ow, nh, nw, acc, cx](BodyBuilder& b,
                                                        const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const Expr ph = idx[idx.size() - 2], pw = idx.back();
    Expr oh0 = c.floordiv(c.mul(ph, c_(c, oh)), c_(c, ih));
    Expr ow0 = c.floordiv(c.mul(pw, c_(c, ow)), c_(c, iw));
    InstrId sum = b.constant(0, acc);
    for (int64_t th = 0; th < nh; ++th) {
      for (int64_t tw = 0; tw < nw; ++tw) {
        Expr o_h = c.add(oh0, c_(c, th)), o_w = c.add(ow0, c_(c, tw));
        Expr ok = all_of(
            c, {c.lt(o_h, c_(c, oh)), c.lt(o_w, c_(c, ow)),
                c.le(adaptive_start(c, o_h, ih, oh), ph), c.lt(ph, adaptive_end(c, o_h, ih, oh)),
                c.le(adaptive_start(c, o_w, iw, ow), pw), c.lt(pw, adaptive_end(c, o_w, iw, ow))});
        if (c.as_const(ok) == 0) continue;
        InstrId g =
            b.cast(load_or(b, c, grad, with_hw(idx, o_h, o_w), ok, b.constant(0, acc)), acc);
        Expr n = c.mul(c.sub(adaptive_end(c, o_h, ih, oh), adaptive_start(c, o_h, ih, oh)),
                       c.sub(adaptive_end(c, o_w, iw, ow), adaptive_start(c, o_w, iw, ow)));
        // Outside the valid range n may be 0: divide by max(n, 1) (the term is masked anyway).
        InstrId div = b.cast(b.index_expr(c.max(n, c.one())), acc);
        sum = b.op(InstrKind::Add, acc, sum, b.op(InstrKind::Div, acc, g, div));
      }
    }
    return sum;
  };
  int terms = static_cast<int>(nh * nw);
  return {ctx.pointwise(dt, x.sizes, loader, terms * (grad.inline_cost + 8),
                        terms * grad.inline_reads)};
}

}  // namespace

void register_pool_lowerings(LoweringRegistry& r) {
  r.add("aten.max_pool2d_with_indices.default", lower_max_pool2d);
  r.add("aten.max_pool2d_with_indices_backward.default", lower_max_pool2d_backward);
  r.add("aten.avg_pool2d.default", lower_avg_pool2d);
  r.add("aten.avg_pool2d_backward.default", lower_avg_pool2d_backward);
  r.add("aten._adaptive_avg_pool2d.default", lower_adaptive_avg_pool2d);
  r.add("aten._adaptive_avg_pool2d_backward.default", lower_adaptive_avg_pool2d_backward);
}

}  // namespace coil::lower
