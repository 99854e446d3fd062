// Convolutions coil computes itself on the CPU instead of handing them to ATen (oneDNN) through
// the host callback. At the sizes a CPU serves (batch 1-8, small images) a call into ATen costs
// more than the arithmetic: tensors cross into Python and back, oneDNN looks up its primitive
// and reorders the weights (a depthwise 32-channel 3x3 over 16x16 pixels took ~100 us in
// oneDNN, for 150 K multiply-adds). Two shapes are common and easy to do well here:
//
//  - 1x1 convolutions (no padding, groups 1, any stride) are matrix products on the input's own
//    memory: channels-last, [N*H*W, C] @ W^T; otherwise, per image, W @ [C, H*W]. A strided
//    1x1 convolution first gathers its pixels (one small copy). The bias is a pointwise add
//    that fuses into whatever reads the product.
//  - Depthwise convolutions (groups == input channels, a window of at most kMaxDepthwiseTaps)
//    are pointwise loops over the output with the window unrolled, as pooling is: padding is a
//    masked load, the weights are read from a [KH, KW, O] copy so that the innermost
//    (channel) index of a channels-last output is unit-stride in every load, and the
//    BatchNorm and activation that follow fuse into the loop.
//
// Their convolution_backward nodes (in training graphs) follow the same split: a 1x1
// convolution's gradients are products (stride 1), a depthwise one's input gradient is a
// depthwise loop over the gradient spread out by the stride and padded, its weight gradient a
// reduction per (tap, channel) with the channel last, so that channels-last data reduces as
// vectorized columns.
//
//  - Small dense convolutions (groups 1, below kMaxGatheredConvFlops) are one product over
//    their gathered windows ("im2col"): a generated gather, the Mm extern (whose library is
//    chosen by measurement), and the bias and whatever follows fused into the readers. Their
//    backward is two products and a generated scatter of window columns back to pixels.
//
// Everything else (larger dense and grouped convolutions, transposed ones, the GPU) stays an
// extern.
#include <array>
#include <optional>
#include <vector>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "family_util.h"

namespace coil::lower::detail {
namespace {

using loop::BodyBuilder;
using loop::BufferId;
using loop::ExternKind;
using loop::ExternNode;
using loop::InstrId;
using loop::InstrKind;
using sym::Expr;

// The most taps a depthwise window unrolls (ConvNeXt's 7x7).
constexpr int64_t kMaxDepthwiseTaps = 49;

struct Conv2d {
  int64_t stride[2], padding[2], dilation[2], groups;
  bool transposed;
  int64_t output_padding[2];
};

// `ints` is conv_ints' layout for nd = 2.
Conv2d parse(const std::vector<int64_t>& ints) {
  Conv2d p{};
  for (int d = 0; d < 2; ++d) {
    p.stride[d] = ints[d];
    p.padding[d] = ints[2 + d];
    p.dilation[d] = ints[4 + d];
    p.output_padding[d] = ints[7 + d];
  }
  p.transposed = ints[6] != 0;
  p.groups = ints[9];
  return p;
}

bool float_type(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16 || t == DType::Float16;
}

// Whether `m` (4-d) is laid out channels-last (NHWC in memory).
bool is_channels_last_meta(sym::Context& c, const TensorMeta& m) {
  if (m.sizes.size() != 4 || m.strides.size() != 4) return false;
  const auto& s = m.strides;
  const Expr C = m.sizes[1], H = m.sizes[2], W = m.sizes[3];
  return c.as_const(s[1]) == 1 && c.provably_eq(s[3], C) && c.provably_eq(s[2], c.mul(W, C)) &&
         c.provably_eq(s[0], c.mul(c.mul(H, W), C));
}

// The value's strided window, realized (in the layout of `meta`) when it is not one yet.
StridedRef strided_of(LoweringContext& ctx, const TensorValue& v, const TensorMeta* meta) {
  TensorValue r = meta != nullptr ? ctx.realize_like(v, *meta) : ctx.realize(v);
  return *r.strided;
}

// NHWC strides of an [N, C, H, W] buffer.
std::vector<Expr> nhwc_strides(sym::Context& c, Expr C, Expr H, Expr W) {
  return {c.mul(c.mul(H, W), C), c.one(), c.mul(W, C), C};
}

// Every (sh, sw)-th pixel of 4-d `x`, gathered into a realized [N, C, OH, OW] buffer
// (channels-last or contiguous): what a strided 1x1 convolution and its weight gradient read.
TensorValue gather_pixels(LoweringContext& ctx, const TensorValue& x, Expr OH, Expr OW, int64_t sh,
                          int64_t sw, bool channels_last) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  Loader inner = x.load;
  TensorValue picked = ctx.pointwise(
      x.dtype, {x.sizes[0], x.sizes[1], OH, OW},
      [inner, sh, sw, cx](BodyBuilder& b, const std::vector<Expr>& i) {
        sym::Context& c = *cx;
        return inner(b, {i[0], i[1], c.mul(i[2], c.constant(sh)), c.mul(i[3], c.constant(sw))});
      },
      x.inline_cost + 1, x.inline_reads);
  return ctx.realize_with_strides(picked, channels_last ? nhwc_strides(c, x.sizes[1], OH, OW)
                                                        : contiguous_strides(c, picked.sizes));
}

}  // namespace

TensorValue add_bias(LoweringContext& ctx, const TensorValue& v, const TensorValue& bias) {
  Loader inner = v.load, lb = bias.load;
  const DType acc = dtype_compute(v.dtype);
  return ctx.pointwise(
      v.dtype, v.sizes,
      [inner, lb, acc](BodyBuilder& b, const std::vector<Expr>& i) {
        InstrId x = b.cast(inner(b, i), acc);
        InstrId y = b.cast(lb(b, {i[1]}), acc);
        return b.op(InstrKind::Add, acc, x, y);
      },
      v.inline_cost + bias.inline_cost + 1, v.inline_reads + bias.inline_reads + 1);
}

namespace {

// --- 1x1 convolutions as products

std::optional<TensorValue> pointwise_conv(LoweringContext& ctx, const Node& node,
                                          const TensorValue& input, const TensorValue& weight,
                                          const TensorMeta& input_meta, DType dt, const Conv2d& p) {
  sym::Context& c = ctx.ctx();
  const auto kh = c.as_const(weight.sizes[2]), kw = c.as_const(weight.sizes[3]);
  if (kh != 1 || kw != 1 || p.groups != 1 || p.padding[0] != 0 || p.padding[1] != 0)
    return std::nullopt;
  const Expr N = input.sizes[0], C = input.sizes[1], O = weight.sizes[0];
  const std::vector<Expr>& out_sizes = node.output(0)->meta().sizes;
  const Expr OH = out_sizes[2], OW = out_sizes[3];
  const bool channels_last = is_channels_last_meta(c, input_meta);
  // The pixels the product reads: the input itself, or its every stride-th pixel gathered
  // into a buffer of the input's layout.
  TensorValue x = cast_value(ctx, input, dt);
  if (p.stride[0] != 1 || p.stride[1] != 1) {
    x = gather_pixels(ctx, x, OH, OW, p.stride[0], p.stride[1], channels_last);
  }
  StridedRef xs = strided_of(ctx, x, x.strided ? nullptr : &input_meta);
  const std::vector<Expr>& st = xs.strides;
  const Expr pixels = c.mul(OH, OW);
  // Weight as [C, O]: element (c, o) = weight[o, c, 0, 0].
  StridedRef ws = strided_of(ctx, cast_value(ctx, weight, dt), nullptr);
  TensorValue w_co =
      ctx.window(ws.base, dt, Device::CPU, {C, O}, {ws.strides[1], ws.strides[0]}, ws.offset);
  auto unit = [&](const Expr& e) { return c.as_const(e) == 1; };
  // Channels-last (or a single pixel): rows are pixels, C contiguous, rows evenly spaced.
  const bool rows_ok = unit(pixels) || (c.provably_eq(st[2], c.mul(st[3], OW)) &&
                                        c.provably_eq(st[0], c.mul(st[2], OH)));
  if ((unit(st[1]) || unit(C)) && rows_ok && (channels_last || unit(pixels))) {
    const Expr row = unit(pixels) ? st[0] : st[3];
    TensorValue a =
        ctx.window(xs.base, dt, Device::CPU, {c.mul(N, pixels), C}, {row, c.one()}, xs.offset);
    ExternNode e = extern_for(ctx, node, ExternKind::Mm);
    e.inputs = {ctx.as_buffer(a), ctx.as_buffer(w_co)};
    BufferId out = ctx.new_buffer(dt, {c.mul(N, pixels), O});
    e.outputs = {out};
    ctx.add_extern(std::move(e));
    return ctx.window(out, dt, Device::CPU, {N, O, OH, OW},
                      {c.mul(pixels, O), c.one(), c.mul(OW, O), O});
  }
  // Contiguous pixels per channel (NCHW): out[n] = W[O, C] @ x[n][C, H*W], one batched product
  // whose weight operand repeats (batch stride 0).
  if (unit(st[3]) && c.provably_eq(st[2], OW)) {
    TensorValue a = ctx.window(ws.base, dt, Device::CPU, {N, O, C},
                               {c.zero(), ws.strides[0], ws.strides[1]}, ws.offset);
    TensorValue bm =
        ctx.window(xs.base, dt, Device::CPU, {N, C, pixels}, {st[0], st[1], c.one()}, xs.offset);
    ExternNode e = extern_for(ctx, node, ExternKind::Bmm);
    e.inputs = {ctx.as_buffer(a), ctx.as_buffer(bm)};
    BufferId out = ctx.new_buffer(dt, {N, O, pixels});
    e.outputs = {out};
    ctx.add_extern(std::move(e));
    return ctx.window(out, dt, Device::CPU, {N, O, OH, OW},
                      {c.mul(O, pixels), pixels, OW, c.one()});
  }
  return std::nullopt;
}

// --- small dense convolutions as one product over gathered windows

// Which dense convolutions are computed here, as one product over their gathered windows:
//  - small ones, up to kMaxGatheredConvFlops (2 * multiply-adds). Up to this size the host
//    call's fixed cost (~80 us: tensors into Python and back, oneDNN's primitive lookup and
//    weight reorder) is a large part of oneDNN's time, and the gather plus one product was
//    1.0-1.6x faster than ATen's own call on the 2-core CPU; from ~100 MFLOP on, oneDNN's
//    direct convolution was 25-35% faster than the gathered product.
//  - weight-bound ones, up to kMaxGatheredPixels output pixels at any size: the product then
//    streams the weight once, where oneDNN also reorders it on every call (a 3x3 512-channel
//    convolution over 2 x 3 x 3 pixels: 3.3 ms through the host, 0.9 ms as a product).
// docs/decisions.md has the measurements.
constexpr double kMaxGatheredConvFlops = 50e6;
constexpr int64_t kMaxGatheredPixels = 64;
// The largest gathered-windows buffer (elements) a convolution may make.
constexpr int64_t kMaxGatheredElements = int64_t{1} << 22;

// The static sizes of a dense convolution computed as a product over gathered windows, and the
// order of a window's elements (the product's inner dimension, R = KH*KW*C):
//  - tap-major (kh, kw, c): the gather's innermost loop runs along the channels, unit-stride in
//    a channels-last input and in the store, with one padding mask per (pixel, tap) that is
//    invariant along it (vectorized); the weight is read from an [O][KH][KW][C] copy.
//  - channel-major (c, kh, kw): the weight's own OIHW memory is the [O, R] matrix (no copy);
//    the gather runs KW elements at a time, scalar. Chosen where the weight copy would move
//    more than the gather, R*O > 4*R*pixels (the last stages of a CNN at small batch).
struct GatheredShape {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  bool tap_major;
  int64_t pixels() const { return N * OH * OW; }
  int64_t window() const { return KH * KW * C; }
  // A window element's position in cols' 6-d form [N, OH, OW, <window dims>].
  std::vector<Expr> cols_index(const Expr& n, const Expr& oh, const Expr& ow, const Expr& kh,
                               const Expr& kw, const Expr& ci) const {
    if (tap_major) return {n, oh, ow, kh, kw, ci};
    return {n, oh, ow, ci, kh, kw};
  }
  std::vector<int64_t> window_sizes() const {
    if (tap_major) return {KH, KW, C};
    return {C, KH, KW};
  }
  // The strides of the [O, C, KH, KW] weight whose [O, R] view matches the window order.
  std::vector<int64_t> weight_strides() const {
    if (tap_major) return {window(), 1, KW * C, C};
    return {window(), KH * KW, KW, 1};
  }
};

bool has_strides(sym::Context& c, const TensorValue& v, const std::vector<int64_t>& strides) {
  if (!v.strided) return false;
  for (size_t d = 0; d < strides.size(); ++d)
    if (!(c.provably_eq(v.strided->strides[d], c.constant(strides[d])) ||
          c.as_const(v.sizes[d]) == 1))
      return false;
  return true;
}

std::optional<GatheredShape> gathered_shape(sym::Context& c, const std::vector<Expr>& in,
                                            const TensorValue& weight, const std::vector<Expr>& out,
                                            const Conv2d& p) {
  if (p.groups != 1) return std::nullopt;
  const std::vector<Expr>& w = weight.sizes;
  std::array<std::optional<int64_t>, 9> v = {
      c.as_const(in[0]), c.as_const(in[1]), c.as_const(in[2]),  c.as_const(in[3]), c.as_const(w[0]),
      c.as_const(w[2]),  c.as_const(w[3]),  c.as_const(out[2]), c.as_const(out[3])};
  for (const auto& e : v)
    if (!e) return std::nullopt;
  GatheredShape s{*v[0], *v[1], *v[2], *v[3], *v[4], *v[5], *v[6], *v[7], *v[8], true};
  const double flops = 2.0 * static_cast<double>(s.pixels()) * static_cast<double>(s.window()) *
                       static_cast<double>(s.O);
  if (s.pixels() == 0 || s.window() == 0 || s.pixels() * s.window() > kMaxGatheredElements)
    return std::nullopt;
  if (flops > kMaxGatheredConvFlops && s.pixels() > kMaxGatheredPixels) return std::nullopt;
  s.tap_major = has_strides(c, weight, s.weight_strides()) || 4 * s.pixels() >= s.O;
  return s;
}

// cols[N*OH*OW, R]: every output pixel's window of `x`, in s's window order, 0 in the padding.
TensorValue gather_windows(LoweringContext& ctx, const TensorValue& input, const TensorMeta& meta,
                           const GatheredShape& s, const Conv2d& p) {
  sym::Context& c = ctx.ctx();
  // Each input element is read by up to KH*KW windows: computed once, in the graph's layout.
  const TensorValue x = ctx.realize_like(input, meta);
  sym::Context* cx = &c;
  const Expr H = x.sizes[2], W = x.sizes[3];
  std::vector<Expr> sizes = {x.sizes[0], c.constant(s.OH), c.constant(s.OW)};
  for (int64_t e : s.window_sizes()) sizes.push_back(c.constant(e));
  const bool tap_major = s.tap_major;
  TensorValue cols = ctx.pointwise(
      x.dtype, sizes,
      [x, p, H, W, tap_major, cx](BodyBuilder& b, const std::vector<Expr>& i) {
        sym::Context& c = *cx;
        const Expr kh = tap_major ? i[3] : i[4], kw = tap_major ? i[4] : i[5];
        const Expr ci = tap_major ? i[5] : i[3];
        const Expr y = c.add(c.mul(i[1], c.constant(p.stride[0])), c.constant(-p.padding[0]));
        const Expr xx = c.add(c.mul(i[2], c.constant(p.stride[1])), c.constant(-p.padding[1]));
        const Expr yy = c.add(y, c.mul(kh, c.constant(p.dilation[0])));
        const Expr xw = c.add(xx, c.mul(kw, c.constant(p.dilation[1])));
        const Expr ok =
            all_of(c, {c.le(c.zero(), yy), c.lt(yy, H), c.le(c.zero(), xw), c.lt(xw, W)});
        return load_or(b, c, x, {i[0], ci, yy, xw}, ok, b.constant(0, dtype_compute(x.dtype)));
      },
      x.inline_cost + 4, x.inline_reads);
  cols = ctx.realize_with_strides(cols, contiguous_strides(c, cols.sizes));
  const StridedRef& cs = *cols.strided;
  const Expr R = c.constant(s.window());
  return ctx.window(cs.base, x.dtype, Device::CPU, {c.constant(s.pixels()), R}, {R, c.one()},
                    cs.offset);
}

// The weight [O, C, KH, KW] realized in s's window order (a copy unless it is laid out so
// already): row o of its [O, R] view matches gather_windows' columns.
StridedRef weight_matrix(LoweringContext& ctx, const TensorValue& weight, DType dt,
                         const GatheredShape& s) {
  sym::Context& c = ctx.ctx();
  TensorValue w = cast_value(ctx, weight, dt);
  if (!has_strides(c, w, s.weight_strides())) {
    std::vector<Expr> strides;
    for (int64_t e : s.weight_strides()) strides.push_back(c.constant(e));
    w = ctx.realize_with_strides(w, strides);
  }
  return *w.strided;
}

// `v` [N, C, H, W] realized channels-last (a copy unless it is): its pixels are the rows of an
// [N*H*W, C] matrix.
StridedRef channels_last_ref(LoweringContext& ctx, const TensorValue& v, const TensorMeta& meta) {
  sym::Context& c = ctx.ctx();
  const std::vector<Expr> nhwc = nhwc_strides(c, v.sizes[1], v.sizes[2], v.sizes[3]);
  TensorValue r = ctx.realize_like(v, meta);
  bool ok = true;
  for (size_t d = 0; ok && d < 4; ++d)
    ok = c.provably_eq(r.strided->strides[d], nhwc[d]) || c.as_const(v.sizes[d]) == 1;
  if (!ok) r = ctx.realize_with_strides(r, nhwc);
  return *r.strided;
}

// A dense (groups 1) KxK convolution as one product: out[N*OH*OW, O] = cols @ Wr^T, channels-last.
std::optional<TensorValue> gathered_conv(LoweringContext& ctx, const Node& node,
                                         const TensorValue& input, const TensorValue& weight,
                                         const TensorMeta& input_meta, DType dt, const Conv2d& p) {
  sym::Context& c = ctx.ctx();
  const std::vector<Expr>& out_sizes = node.output(0)->meta().sizes;
  std::optional<GatheredShape> s = gathered_shape(c, input.sizes, weight, out_sizes, p);
  if (!s) return std::nullopt;
  TensorValue cols = gather_windows(ctx, cast_value(ctx, input, dt), input_meta, *s, p);
  StridedRef ws = weight_matrix(ctx, weight, dt, *s);
  const Expr R = c.constant(s->window()), O = weight.sizes[0];
  TensorValue wt = ctx.window(ws.base, dt, Device::CPU, {R, O}, {c.one(), R}, ws.offset);
  ExternNode e = extern_for(ctx, node, ExternKind::Mm);
  e.inputs = {ctx.as_buffer(cols), ctx.as_buffer(wt)};
  BufferId out = ctx.new_buffer(dt, {c.constant(s->pixels()), O});
  e.outputs = {out};
  ctx.add_extern(std::move(e));
  const Expr OH = out_sizes[2], OW = out_sizes[3];
  return ctx.window(out, dt, Device::CPU, {input.sizes[0], O, OH, OW}, nhwc_strides(c, O, OH, OW));
}

// --- zero-spread copies

// A realized [N, C, OH, OW] copy of 4-d `v` (channels-last when `channels_last`) whose element
// (y, x) is v[(y - off_h) / s_h, (x - off_w) / s_w] where that is a whole in-range position,
// else 0: a zero-padded copy (s = 1, off = padding), or a gradient spread out for a strided
// convolution's input gradient. One mask, the same along the channels (so the channel loop is
// unswitched on it: emit_cpp.cpp).
TensorValue spread_copy(LoweringContext& ctx, const TensorValue& v, Expr OH, Expr OW, int64_t off_h,
                        int64_t off_w, int64_t s_h, int64_t s_w, bool channels_last) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const Expr N = v.sizes[0], C = v.sizes[1], H = v.sizes[2], W = v.sizes[3];
  TensorValue src = v;
  auto source = [cx](Expr y, int64_t off, int64_t s, Expr extent, Expr* at) {
    sym::Context& c = *cx;
    const Expr t = c.sub(y, c.constant(off));
    Expr ok = c.le(c.zero(), t);
    if (s == 1) {
      *at = t;
    } else {
      // t >= 0 wherever the mask holds, so floor division and remainder are exact there.
      ok = c.mul(ok, c.eq(c.mod(t, c.constant(s)), c.zero()));
      *at = c.floordiv(t, c.constant(s));
    }
    return c.mul(ok, c.lt(*at, extent));
  };
  TensorValue spread = ctx.pointwise(
      v.dtype, {N, C, OH, OW},
      [src, off_h, off_w, s_h, s_w, H, W, source, cx](BodyBuilder& b, const std::vector<Expr>& i) {
        sym::Context& c = *cx;
        Expr iy, ix;
        const Expr ok = c.mul(source(i[2], off_h, s_h, H, &iy), source(i[3], off_w, s_w, W, &ix));
        return load_or(b, c, src, {i[0], i[1], iy, ix}, ok,
                       b.constant(0, dtype_compute(src.dtype)));
      },
      v.inline_cost + 4, v.inline_reads);
  std::vector<Expr> strides =
      channels_last ? nhwc_strides(c, C, OH, OW) : contiguous_strides(c, spread.sizes);
  return ctx.realize_with_strides(spread, strides);
}

// --- depthwise convolutions as loops

std::optional<TensorValue> depthwise_conv(LoweringContext& ctx, const Node& node,
                                          const TensorValue& input, const TensorValue& weight,
                                          const TensorMeta& input_meta, DType dt, const Conv2d& p) {
  sym::Context& c = ctx.ctx();
  const auto C = c.as_const(input.sizes[1]), O = c.as_const(weight.sizes[0]);
  const auto KH = c.as_const(weight.sizes[2]), KW = c.as_const(weight.sizes[3]);
  const auto Cg = c.as_const(weight.sizes[1]);
  if (!C || !O || !KH || !KW || Cg != 1 || p.groups != *C || *O % *C != 0 || *C == 1)
    return std::nullopt;
  if (*KH * *KW > kMaxDepthwiseTaps) return std::nullopt;
  const int64_t mult = *O / *C;  // output channels per input channel
  // The input is read KH*KW times per output: computed once, in the graph's layout, into a
  // zero-padded buffer. The window's loads are then unmasked: with a mask per tap (9 of them
  // for 3x3) g++ unswitched the channel loop on each and vectorized none of it (MobileNetV2's
  // 144-channel 3x3 ran at 1.2 GFLOP/s); the padding copy has one mask, invariant in the
  // channel loop.
  const Expr H = input.sizes[2], W = input.sizes[3];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  TensorValue x = cast_value(ctx, input, dt);
  // On the GPU the taps' loads are masked instead: a predicated load costs next to nothing
  // there, while the padded copy was a pass of its own over the block's largest activation
  // (MobileNetV2's [64, 96, 114, 114] bf16 copy took 330 us on an H100).
  const bool masked_taps = ctx.target().masked_convolution_taps;
  if (masked_taps) {
    x = ctx.realize_like(x, input_meta);
  } else if (ph > 0 || pw > 0) {
    x = spread_copy(ctx, x, c.add(H, c.constant(2 * ph)), c.add(W, c.constant(2 * pw)), ph, pw, 1,
                    1, is_channels_last_meta(c, input_meta));
  } else {
    x = ctx.realize_like(x, input_meta);
  }
  // The weight as [KH, KW, O]: the channel index is unit-stride.
  TensorValue w = cast_value(ctx, weight, dt);
  w = ctx.realize_with_strides(w, {c.one(), c.one(), c.constant(*KW * *O), c.constant(*O)});
  const DType acc = dtype_compute(dt);
  sym::Context* cx = &c;
  Loader wl = w.load, xl = x.load;
  const int64_t kh_n = *KH, kw_n = *KW;
  auto body = [wl, xl, x, p, kh_n, kw_n, mult, acc, cx, masked_taps, H, W](
                  BodyBuilder& b, const std::vector<Expr>& i) {
    sym::Context& c = *cx;
    const Expr ci = mult == 1 ? i[1] : c.floordiv(i[1], c.constant(mult));
    InstrId sum = -1;
    for (int64_t kh = 0; kh < kh_n; ++kh) {
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        // Positions in the padded input.
        Expr ih = c.add(c.mul(i[2], c.constant(p.stride[0])), c.constant(kh * p.dilation[0]));
        Expr iw = c.add(c.mul(i[3], c.constant(p.stride[1])), c.constant(kw * p.dilation[1]));
        InstrId xv;
        if (masked_taps) {  // positions in the unpadded input, loaded where they lie inside
          ih = c.sub(ih, c.constant(p.padding[0]));
          iw = c.sub(iw, c.constant(p.padding[1]));
          const Expr ok =
              c.mul(c.mul(c.le(c.zero(), ih), c.lt(ih, H)), c.mul(c.le(c.zero(), iw), c.lt(iw, W)));
          xv = b.cast(
              load_or(b, c, x, {i[0], ci, ih, iw}, ok, b.constant(0, dtype_compute(x.dtype))), acc);
        } else {
          xv = b.cast(xl(b, {i[0], ci, ih, iw}), acc);
        }
        InstrId wv = b.cast(wl(b, {i[1], c.zero(), c.constant(kh), c.constant(kw)}), acc);
        InstrId prod = b.op(InstrKind::Mul, acc, xv, wv);
        sum = sum < 0 ? prod : b.op(InstrKind::Add, acc, sum, prod);
      }
    }
    return sum;
  };
  const int taps = static_cast<int>(kh_n * kw_n);
  return ctx.pointwise(dt, node.output(0)->meta().sizes, body, 4 * taps, 2 * taps);
}

// --- backward

// The gradients a convolution_backward asks for (grad_input, grad_weight, grad_bias; nullopt
// for those it does not).
using Grads = std::array<std::optional<TensorValue>, 3>;

}  // namespace

TensorValue bias_grad(LoweringContext& ctx, const TensorValue& g, DType dt) {
  Loader gl = g.load;
  const DType acc = dtype_compute(dt);
  std::vector<Expr> rest = {g.sizes[0]};
  rest.insert(rest.end(), g.sizes.begin() + 2, g.sizes.end());
  return ctx.reduce(
      loop::ReduceKind::Sum, dt, {g.sizes[1]}, rest,
      [gl, acc](BodyBuilder& b, const std::vector<Expr>& o, const std::vector<Expr>& r) {
        std::vector<Expr> at = {r[0], o[0]};
        at.insert(at.end(), r.begin() + 1, r.end());
        return b.cast(gl(b, at), acc);
      });
}

namespace {

// 1x1, stride 1, no padding, groups 1: both gradients are products.
std::optional<Grads> pointwise_conv_backward(LoweringContext& ctx, const Node& node,
                                             const TensorValue& grad, const TensorValue& input,
                                             const TensorValue& weight, DType dt, const Conv2d& p,
                                             const std::array<bool, 3>& mask) {
  sym::Context& c = ctx.ctx();
  if (c.as_const(weight.sizes[2]) != 1 || c.as_const(weight.sizes[3]) != 1 || p.groups != 1 ||
      p.padding[0] != 0 || p.padding[1] != 0)
    return std::nullopt;
  const TensorMeta& go_meta = node.arg(0, "grad_output")->value()->meta();
  const TensorMeta& in_meta = node.arg(1, "input")->value()->meta();
  const bool cl = is_channels_last_meta(c, go_meta) && is_channels_last_meta(c, in_meta);
  const Expr N = input.sizes[0], C = input.sizes[1], IH = input.sizes[2], IW = input.sizes[3];
  // The products run over the output's pixel grid; a strided convolution's input pixels are
  // gathered onto it first, and its input gradient spread back out (zeros between).
  const Expr H = grad.sizes[2], W = grad.sizes[3];
  const int64_t sh = p.stride[0], sw = p.stride[1];
  const bool strided = sh != 1 || sw != 1;
  const Expr O = weight.sizes[0], P = c.mul(H, W);
  StridedRef gs = strided_of(ctx, cast_value(ctx, grad, dt), &go_meta);
  TensorValue x_in = cast_value(ctx, input, dt);
  if (strided && mask[1]) {
    x_in = gather_pixels(ctx, x_in, H, W, sh, sw, cl);
  }
  StridedRef xs = strided_of(ctx, x_in, x_in.strided ? nullptr : &in_meta);
  StridedRef ws = strided_of(ctx, cast_value(ctx, weight, dt), nullptr);
  auto unit = [&](const Expr& e) { return c.as_const(e) == 1; };
  auto rows_even = [&](const StridedRef& r) {
    return unit(P) || (c.provably_eq(r.strides[2], c.mul(r.strides[3], W)) &&
                       c.provably_eq(r.strides[0], c.mul(r.strides[2], H)));
  };
  auto pixels_contiguous = [&](const StridedRef& r) {
    return unit(r.strides[3]) && c.provably_eq(r.strides[2], W);
  };
  auto product = [&](ExternKind kind, const TensorValue& a, const TensorValue& b,
                     std::vector<Expr> sizes) {
    ExternNode e = extern_for(ctx, node, kind);
    e.inputs = {ctx.as_buffer(a), ctx.as_buffer(b)};
    BufferId out = ctx.new_buffer(dt, std::move(sizes));
    e.outputs = {out};
    ctx.add_extern(std::move(e));
    return out;
  };
  const Device cpu = Device::CPU;
  Grads out;
  if (cl && unit(gs.strides[1]) && unit(xs.strides[1]) && rows_even(gs) && rows_even(xs)) {
    // Pixels as rows: G [NHW, O], X [NHW, C].
    const Expr rows = c.mul(N, P);
    const Expr gr = unit(P) ? gs.strides[0] : gs.strides[3];
    const Expr xr = unit(P) ? xs.strides[0] : xs.strides[3];
    TensorValue G = ctx.window(gs.base, dt, cpu, {rows, O}, {gr, c.one()}, gs.offset);
    if (mask[0]) {  // G @ W[O, C]
      TensorValue Wm =
          ctx.window(ws.base, dt, cpu, {O, C}, {ws.strides[0], ws.strides[1]}, ws.offset);
      BufferId gi = product(ExternKind::Mm, G, Wm, {rows, C});
      out[0] = ctx.window(gi, dt, cpu, {N, C, H, W}, {c.mul(P, C), c.one(), c.mul(W, C), C});
      if (strided) out[0] = spread_copy(ctx, *out[0], IH, IW, 0, 0, sh, sw, true);
    }
    if (mask[1]) {  // G^T @ X
      TensorValue Gt = ctx.window(gs.base, dt, cpu, {O, rows}, {c.one(), gr}, gs.offset);
      TensorValue X = ctx.window(xs.base, dt, cpu, {rows, C}, {xr, c.one()}, xs.offset);
      BufferId gw = product(ExternKind::Mm, Gt, X, {O, C});
      out[1] = ctx.window(gw, dt, cpu, {O, C, c.one(), c.one()}, {C, c.one(), c.one(), c.one()});
    }
  } else if (pixels_contiguous(gs) && pixels_contiguous(xs)) {
    // Per image: G[n] [O, HW], X[n] [C, HW].
    TensorValue G =
        ctx.window(gs.base, dt, cpu, {N, O, P}, {gs.strides[0], gs.strides[1], c.one()}, gs.offset);
    if (mask[0]) {  // W^T [C, O] @ G[n]
      TensorValue Wt = ctx.window(ws.base, dt, cpu, {N, C, O},
                                  {c.zero(), ws.strides[1], ws.strides[0]}, ws.offset);
      BufferId gi = product(ExternKind::Bmm, Wt, G, {N, C, P});
      out[0] = ctx.window(gi, dt, cpu, {N, C, H, W}, {c.mul(C, P), P, W, c.one()});
      if (strided) out[0] = spread_copy(ctx, *out[0], IH, IW, 0, 0, sh, sw, false);
    }
    if (mask[1]) {  // sum over n of G[n] @ X[n]^T
      TensorValue Xt = ctx.window(xs.base, dt, cpu, {N, P, C},
                                  {xs.strides[0], c.one(), xs.strides[1]}, xs.offset);
      BufferId per = product(ExternKind::Bmm, G, Xt, {N, O, C});
      TensorValue per_image = ctx.from_buffer(per);
      Loader pl = per_image.load;
      const DType acc = dtype_compute(dt);
      TensorValue sum = ctx.reduce(
          loop::ReduceKind::Sum, dt, {O, C}, {N},
          [pl, acc](BodyBuilder& b, const std::vector<Expr>& o, const std::vector<Expr>& r) {
            return b.cast(pl(b, {r[0], o[0], o[1]}), acc);
          });
      Loader sl = sum.load;
      out[1] = ctx.pointwise(
          dt, {O, C, c.one(), c.one()},
          [sl](BodyBuilder& b, const std::vector<Expr>& i) {
            return sl(b, {i[0], i[1]});
          },
          1, 1);
    }
  } else {
    return std::nullopt;
  }
  if (mask[2])
    out[2] = bias_grad(ctx, ctx.window(gs.base, dt, cpu, grad.sizes, gs.strides, gs.offset), dt);
  return out;
}

// Depthwise: the input gradient is a depthwise convolution of the gradient spread out by the
// stride and padded (flipped taps), the weight gradient a reduction per (tap, channel).
std::optional<Grads> depthwise_conv_backward(LoweringContext& ctx, const Node& node,
                                             const TensorValue& grad, const TensorValue& input,
                                             const TensorValue& weight, DType dt, const Conv2d& p,
                                             const std::array<bool, 3>& mask) {
  sym::Context& c = ctx.ctx();
  const auto C = c.as_const(input.sizes[1]), O = c.as_const(weight.sizes[0]);
  const auto KH = c.as_const(weight.sizes[2]), KW = c.as_const(weight.sizes[3]);
  if (!C || !O || !KH || !KW || c.as_const(weight.sizes[1]) != 1 || p.groups != *C ||
      *O % *C != 0 || *C == 1 || *KH * *KW > kMaxDepthwiseTaps)
    return std::nullopt;
  const int64_t mult = *O / *C, kh_n = *KH, kw_n = *KW;
  const TensorMeta& go_meta = node.arg(0, "grad_output")->value()->meta();
  const TensorMeta& in_meta = node.arg(1, "input")->value()->meta();
  const bool cl = is_channels_last_meta(c, in_meta);
  const Expr H = input.sizes[2], W = input.sizes[3];
  const Expr OH = grad.sizes[2], OW = grad.sizes[3];
  const DType acc = dtype_compute(dt);
  sym::Context* cx = &c;
  TensorValue g = ctx.realize_like(cast_value(ctx, grad, dt), go_meta);
  Grads out;
  if (mask[0]) {
    // grad_input[ih] = sum over taps of s[ih + kh'*d] * w[KH-1-kh'], with s[y] = g[(y - off)/s]
    // where whole and in range, off = (KH-1)*d - padding.
    const int64_t off_h = (kh_n - 1) * p.dilation[0] - p.padding[0];
    const int64_t off_w = (kw_n - 1) * p.dilation[1] - p.padding[1];
    TensorValue sg = spread_copy(ctx, g, c.add(H, c.constant((kh_n - 1) * p.dilation[0])),
                                 c.add(W, c.constant((kw_n - 1) * p.dilation[1])), off_h, off_w,
                                 p.stride[0], p.stride[1], cl);
    TensorValue w = ctx.realize_with_strides(
        cast_value(ctx, weight, dt), {c.one(), c.one(), c.constant(kw_n * *O), c.constant(*O)});
    Loader sl = sg.load, wl = w.load;
    auto body = [sl, wl, p, kh_n, kw_n, mult, acc, cx](BodyBuilder& b, const std::vector<Expr>& i) {
      sym::Context& c = *cx;
      InstrId sum = -1;
      for (int64_t j = 0; j < mult; ++j) {
        const Expr o = mult == 1 ? i[1] : c.add(c.mul(i[1], c.constant(mult)), c.constant(j));
        for (int64_t kh = 0; kh < kh_n; ++kh) {
          for (int64_t kw = 0; kw < kw_n; ++kw) {
            Expr y = c.add(i[2], c.constant(kh * p.dilation[0]));
            Expr x = c.add(i[3], c.constant(kw * p.dilation[1]));
            InstrId gv = b.cast(sl(b, {i[0], o, y, x}), acc);
            InstrId wv = b.cast(
                wl(b, {o, c.zero(), c.constant(kh_n - 1 - kh), c.constant(kw_n - 1 - kw)}), acc);
            InstrId prod = b.op(InstrKind::Mul, acc, gv, wv);
            sum = sum < 0 ? prod : b.op(InstrKind::Add, acc, sum, prod);
          }
        }
      }
      return sum;
    };
    const int taps = static_cast<int>(kh_n * kw_n * mult);
    out[0] = ctx.pointwise(dt, input.sizes, body, 4 * taps, 2 * taps);
  }
  if (mask[1]) {
    // Per (kh, kw, o), o last (unit-stride in a channels-last gradient): sum over n, oh, ow of
    // g[n, o, oh, ow] * xpad[n, o / mult, oh*s + kh*d, ow*s + kw*d].
    const int64_t ph = p.padding[0], pw = p.padding[1];
    TensorValue x = cast_value(ctx, input, dt);
    if (ph > 0 || pw > 0) {
      x = spread_copy(ctx, x, c.add(H, c.constant(2 * ph)), c.add(W, c.constant(2 * pw)), ph, pw, 1,
                      1, cl);
    } else {
      x = ctx.realize_like(x, in_meta);
    }
    Loader gl = g.load, xl = x.load;
    TensorValue red = ctx.reduce(
        loop::ReduceKind::Sum, dt, {c.constant(kh_n), c.constant(kw_n), c.constant(*O)},
        {grad.sizes[0], OH, OW},
        [gl, xl, p, mult, acc, cx](BodyBuilder& b, const std::vector<Expr>& o,
                                   const std::vector<Expr>& r) {
          sym::Context& c = *cx;
          const Expr ci = mult == 1 ? o[2] : c.floordiv(o[2], c.constant(mult));
          Expr y =
              c.add(c.mul(r[1], c.constant(p.stride[0])), c.mul(o[0], c.constant(p.dilation[0])));
          Expr x =
              c.add(c.mul(r[2], c.constant(p.stride[1])), c.mul(o[1], c.constant(p.dilation[1])));
          InstrId gv = b.cast(gl(b, {r[0], o[2], r[1], r[2]}), acc);
          InstrId xv = b.cast(xl(b, {r[0], ci, y, x}), acc);
          return b.op(InstrKind::Mul, acc, gv, xv);
        });
    Loader rl = red.load;
    out[1] = ctx.pointwise(
        dt, weight.sizes,
        [rl](BodyBuilder& b, const std::vector<Expr>& i) {
          return rl(b, {i[2], i[3], i[0]});
        },
        1, 1);
  }
  if (mask[2]) out[2] = bias_grad(ctx, g, dt);
  return out;
}

// A dense convolution gathered_conv computes: the weight gradient is G^T @ cols, the input
// gradient G @ Wr scattered back from window columns to pixels (each input pixel sums the
// window entries that read it: at most KH*KW, by tap).
std::optional<Grads> gathered_conv_backward(LoweringContext& ctx, const Node& node,
                                            const TensorValue& grad, const TensorValue& input,
                                            const TensorValue& weight, DType dt, const Conv2d& p,
                                            const std::array<bool, 3>& mask) {
  sym::Context& c = ctx.ctx();
  std::optional<GatheredShape> s = gathered_shape(c, input.sizes, weight, grad.sizes, p);
  if (!s) return std::nullopt;
  const TensorMeta& go_meta = node.arg(0, "grad_output")->value()->meta();
  const Device cpu = Device::CPU;
  const Expr R = c.constant(s->window()), O = weight.sizes[0], P = c.constant(s->pixels());
  const StridedRef gs = channels_last_ref(ctx, cast_value(ctx, grad, dt), go_meta);
  TensorValue G = ctx.window(gs.base, dt, cpu, {P, O}, {O, c.one()}, gs.offset);
  auto product = [&](const TensorValue& a, const TensorValue& b, std::vector<Expr> sizes) {
    ExternNode e = extern_for(ctx, node, ExternKind::Mm);
    e.inputs = {ctx.as_buffer(a), ctx.as_buffer(b)};
    BufferId out = ctx.new_buffer(dt, std::move(sizes));
    e.outputs = {out};
    ctx.add_extern(std::move(e));
    return out;
  };
  Grads out;
  if (mask[0]) {
    StridedRef ws = weight_matrix(ctx, weight, dt, *s);
    TensorValue wr = ctx.window(ws.base, dt, cpu, {O, R}, {R, c.one()}, ws.offset);
    BufferId dcols_buf = product(G, wr, {P, R});
    // dcols in cols' 6-d form (contiguous).
    const int64_t KW = s->KW, OW = s->OW, OH = s->OH;
    std::vector<int64_t> dsizes = {s->N, OH, OW};
    for (int64_t e : s->window_sizes()) dsizes.push_back(e);
    std::vector<Expr> dsz;
    for (int64_t e : dsizes) dsz.push_back(c.constant(e));
    TensorValue dcols = ctx.window(dcols_buf, dt, cpu, dsz, contiguous_strides(c, dsz));
    sym::Context* cx = &c;
    const int64_t KH = s->KH;
    // Output position along one axis that tap k of input position y feeds, and whether it is one.
    auto source = [cx](Expr y, int64_t pad, int64_t k, int64_t dil, int64_t stride, int64_t extent,
                       Expr* at) {
      sym::Context& c = *cx;
      const Expr t = c.add(y, c.constant(pad - k * dil));
      Expr ok = c.le(c.zero(), t);
      if (stride == 1) {
        *at = t;
      } else {
        ok = c.mul(ok, c.eq(c.mod(t, c.constant(stride)), c.zero()));
        *at = c.floordiv(t, c.constant(stride));
      }
      return c.mul(ok, c.lt(*at, c.constant(extent)));
    };
    const DType acc = dtype_compute(dt);
    const GatheredShape shape = *s;
    auto body = [dcols, shape, p, KH, KW, OH, OW, acc, source, cx](BodyBuilder& b,
                                                                   const std::vector<Expr>& i) {
      sym::Context& c = *cx;
      InstrId sum = -1;
      for (int64_t kh = 0; kh < KH; ++kh) {
        Expr oh;
        const Expr ok_h = source(i[2], p.padding[0], kh, p.dilation[0], p.stride[0], OH, &oh);
        if (c.as_const(ok_h) == 0) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          Expr ow;
          const Expr ok_w = source(i[3], p.padding[1], kw, p.dilation[1], p.stride[1], OW, &ow);
          if (c.as_const(ok_w) == 0) continue;
          InstrId v = load_or(b, c, dcols,
                              shape.cols_index(i[0], oh, ow, c.constant(kh), c.constant(kw), i[1]),
                              c.mul(ok_h, ok_w), b.constant(0, acc));
          sum = sum < 0 ? v : b.op(InstrKind::Add, acc, sum, v);
        }
      }
      return sum < 0 ? b.constant(0, acc) : sum;
    };
    const int taps = static_cast<int>(KH * KW);
    out[0] = ctx.pointwise(dt, input.sizes, body, 4 * taps, taps);
  }
  if (mask[1]) {
    const TensorMeta& in_meta = node.arg(1, "input")->value()->meta();
    TensorValue cols = gather_windows(ctx, cast_value(ctx, input, dt), in_meta, *s, p);
    TensorValue gt = ctx.window(gs.base, dt, cpu, {O, P}, {c.one(), O}, gs.offset);
    BufferId dw = product(gt, cols, {O, R});
    std::vector<Expr> wst;
    for (int64_t e : s->weight_strides()) wst.push_back(c.constant(e));
    out[1] = ctx.window(dw, dt, cpu, weight.sizes, wst);
  }
  if (mask[2]) {
    TensorValue g4 =
        ctx.window(gs.base, dt, cpu, grad.sizes,
                   nhwc_strides(c, grad.sizes[1], grad.sizes[2], grad.sizes[3]), gs.offset);
    out[2] = bias_grad(ctx, g4, dt);
  }
  return out;
}

// Whether a convolution is computed here, by option: the backend says which kinds
// (LoweringPolicy::native_convolutions) and which option turns them off. The CPU lowers every
// kind natively; the GPU only depthwise ones: cuDNN's grouped kernel for MobileNetV2's bf16
// channels-last depthwise layers took 350 us where the generated loop takes ~10 (H100); dense
// convolutions stay with cuDNN.
bool native_allowed(const LoweringContext& ctx) {
  const backend::LoweringPolicy& t = ctx.target();
  return t.native_convolutions != backend::NativeConvolutions::None &&
         t.native_convolutions_option != nullptr && ctx.options().*t.native_convolutions_option;
}
// Depthwise only: 1x1 and gathered dense convolutions stay externs.
bool depthwise_only(const LoweringContext& ctx) {
  return ctx.target().native_convolutions == backend::NativeConvolutions::DepthwiseOnly;
}

}  // namespace

std::optional<std::vector<TensorValue>> lower_convolution_backward_natively(
    LoweringContext& ctx, const Node& node, const std::vector<int64_t>& ints,
    const std::vector<int64_t>& output_mask) {
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& input = ctx.arg_value(node, 1, "input");
  const TensorValue& weight = ctx.arg_value(node, 2, "weight");
  const TensorMeta& meta = node.output(0)->meta();
  const bool depthwise = depthwise_only(ctx);  // as in the forward
  if (!native_allowed(ctx) || input.sizes.size() != 4 || weight.sizes.size() != 4 ||
      grad.sizes.size() != 4)
    return std::nullopt;
  const DType dt = meta.dtype;
  if (!float_type(dt)) return std::nullopt;
  const Conv2d p = parse(ints);
  if (p.transposed) return std::nullopt;
  const std::array<bool, 3> mask{output_mask[0] != 0, output_mask[1] != 0, output_mask[2] != 0};
  std::optional<Grads> g;
  if (!depthwise) g = pointwise_conv_backward(ctx, node, grad, input, weight, dt, p, mask);
  if (!g) g = depthwise_conv_backward(ctx, node, grad, input, weight, dt, p, mask);
  if (!g && !depthwise) g = gathered_conv_backward(ctx, node, grad, input, weight, dt, p, mask);
  if (!g) return std::nullopt;
  std::vector<TensorValue> out;
  for (int k = 0; k < 3; ++k)
    if (mask[k]) out.push_back(*(*g)[k]);
  return out;
}

std::optional<TensorValue> lower_convolution_natively(LoweringContext& ctx, const Node& node,
                                                      const std::vector<int64_t>& ints) {
  const TensorMeta& meta = node.output(0)->meta();
  const bool depthwise = depthwise_only(ctx);
  const TensorValue& input = ctx.arg_value(node, 0, "input");
  const TensorValue& weight = ctx.arg_value(node, 1, "weight");
  if (!native_allowed(ctx) || input.sizes.size() != 4 || weight.sizes.size() != 4)
    return std::nullopt;
  const DType dt = meta.dtype;
  if (!float_type(dt)) return std::nullopt;
  const Conv2d p = parse(ints);
  if (p.transposed) return std::nullopt;
  const TensorMeta& input_meta = node.arg(0, "input")->value()->meta();
  std::optional<TensorValue> out;
  if (!depthwise) out = pointwise_conv(ctx, node, input, weight, input_meta, dt, p);
  if (!out) out = depthwise_conv(ctx, node, input, weight, input_meta, dt, p);
  if (!out && !depthwise) out = gathered_conv(ctx, node, input, weight, input_meta, dt, p);
  if (!out) return std::nullopt;
  const Arg* bias = node.arg(2, "bias");
  if (bias != nullptr && bias->is_value())
    out = add_bias(ctx, *out, cast_value(ctx, ctx.value(bias->value()), dt));
  return out;
}

}  // namespace coil::lower::detail
