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
// Everything else (dense KxK convolutions, transposed ones, the GPU) stays an extern.
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

// bias[o] added to `v` (dims [N, O, ...]) as a lazy pointwise value.
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
    Loader inner = x.load;
    const int64_t sh = p.stride[0], sw = p.stride[1];
    sym::Context* cx = &c;
    TensorValue picked = ctx.pointwise(
        dt, {N, C, OH, OW},
        [inner, sh, sw, cx](BodyBuilder& b, const std::vector<Expr>& i) {
          sym::Context& c = *cx;
          return inner(b, {i[0], i[1], c.mul(i[2], c.constant(sh)), c.mul(i[3], c.constant(sw))});
        },
        x.inline_cost + 1, x.inline_reads);
    std::vector<Expr> strides =
        channels_last ? std::vector<Expr>{c.mul(c.mul(OH, OW), C), c.one(), c.mul(OW, C), C}
                      : contiguous_strides(c, picked.sizes);
    x = ctx.realize_with_strides(picked, strides);
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
  const Expr N = input.sizes[0], Cx = input.sizes[1], H = input.sizes[2], W = input.sizes[3];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  TensorValue x = cast_value(ctx, input, dt);
  const Expr Hp = c.add(H, c.constant(2 * ph)), Wp = c.add(W, c.constant(2 * pw));
  if (ph > 0 || pw > 0) {
    sym::Context* cx = &c;
    TensorValue src = x;
    TensorValue padded = ctx.pointwise(
        dt, {N, Cx, Hp, Wp},
        [src, ph, pw, H, W, cx](BodyBuilder& b, const std::vector<Expr>& i) {
          sym::Context& c = *cx;
          const Expr ih = c.sub(i[2], c.constant(ph)), iw = c.sub(i[3], c.constant(pw));
          const Expr ok =
              c.mul(c.mul(c.le(c.zero(), ih), c.lt(ih, H)), c.mul(c.le(c.zero(), iw), c.lt(iw, W)));
          return load_or(b, c, src, {i[0], i[1], ih, iw}, ok,
                         b.constant(0, dtype_compute(src.dtype)));
        },
        src.inline_cost + 4, src.inline_reads);
    std::vector<Expr> strides =
        is_channels_last_meta(c, input_meta)
            ? std::vector<Expr>{c.mul(c.mul(Hp, Wp), Cx), c.one(), c.mul(Wp, Cx), Cx}
            : contiguous_strides(c, padded.sizes);
    x = ctx.realize_with_strides(padded, strides);
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
  auto body = [wl, xl, p, kh_n, kw_n, mult, acc, cx](BodyBuilder& b, const std::vector<Expr>& i) {
    sym::Context& c = *cx;
    const Expr ci = mult == 1 ? i[1] : c.floordiv(i[1], c.constant(mult));
    InstrId sum = -1;
    for (int64_t kh = 0; kh < kh_n; ++kh) {
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        // Positions in the padded input.
        Expr ih = c.add(c.mul(i[2], c.constant(p.stride[0])), c.constant(kh * p.dilation[0]));
        Expr iw = c.add(c.mul(i[3], c.constant(p.stride[1])), c.constant(kw * p.dilation[1]));
        InstrId xv = b.cast(xl(b, {i[0], ci, ih, iw}), acc);
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

}  // namespace

std::optional<TensorValue> lower_convolution_natively(LoweringContext& ctx, const Node& node,
                                                      const std::vector<int64_t>& ints) {
  if (!ctx.options().cpu_native_convolutions) return std::nullopt;
  const TensorMeta& meta = node.output(0)->meta();
  const TensorValue& input = ctx.arg_value(node, 0, "input");
  const TensorValue& weight = ctx.arg_value(node, 1, "weight");
  if (meta.device != Device::CPU || input.sizes.size() != 4 || weight.sizes.size() != 4)
    return std::nullopt;
  const DType dt = meta.dtype;
  if (!float_type(dt)) return std::nullopt;
  const Conv2d p = parse(ints);
  if (p.transposed) return std::nullopt;
  const TensorMeta& input_meta = node.arg(0, "input")->value()->meta();
  std::optional<TensorValue> out = pointwise_conv(ctx, node, input, weight, input_meta, dt, p);
  if (!out) out = depthwise_conv(ctx, node, input, weight, input_meta, dt, p);
  if (!out) return std::nullopt;
  const Arg* bias = node.arg(2, "bias");
  if (bias != nullptr && bias->is_value())
    out = add_bias(ctx, *out, cast_value(ctx, ctx.value(bias->value()), dt));
  return out;
}

}  // namespace coil::lower::detail
