// Meta functions of the neural-network ops: convolution and its backward, 2-d average, adaptive
// average and max pooling and their backwards (torch/_meta_registrations.py and, for
// convolution's memory format, the fake-tensor convolution in torch/_subclasses/fake_impls.py).
#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

// An int-list argument of `n` entries; a single entry (or a bare int) applies to every dim.
std::vector<int64_t> per_dim(const OpCall& c, size_t i, std::string_view name, size_t n,
                             std::optional<int64_t> dflt = std::nullopt) {
  auto v = opt_int_list(c, i, name);
  if (!v || v->empty()) {
    COIL_USER_CHECK(dflt.has_value()) << c.op << ": needs " << name;
    return std::vector<int64_t>(n, *dflt);
  }
  if (v->size() == 1) return std::vector<int64_t>(n, (*v)[0]);
  COIL_USER_CHECK(v->size() == n) << c.op << ": " << name << " must have 1 or " << n << " entries";
  return *v;
}

bool all_const(sym::Context& ctx, const std::vector<sym::Expr>& sizes) {
  for (sym::Expr e : sizes) {
    if (!ctx.as_const(e)) return false;
  }
  return true;
}

// ---- convolution ----

// aten.convolution.default(input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups) (calc_conv_nd_return_shape):
//   out = (in + 2p - d(k-1) - 1) // s + 1, transposed: (in-1)s - 2p + d(k-1) + op + 1,
// with weight.size(0) output channels (groups * weight.size(1) transposed). The memory format
// is the backend's (fake_impls.conv): on CPU channels-last when the input or the weight suggests
// it, for 4-d and 5-d convolutions whose sizes are all known; with symbolic sizes FakeTensor
// skips the backend choice and the result stays contiguous.
std::vector<TensorMeta> convolution_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "input");
  const TensorMeta& w = tensor_arg(c, 1, "weight");
  COIL_USER_CHECK(in.rank() >= 3 && w.rank() == in.rank())
      << c.op << ": expects a batched input and a weight of the same rank";
  COIL_USER_CHECK(in.dtype == w.dtype)
      << c.op << ": input type (" << dtype_name(in.dtype) << ") and weight type ("
      << dtype_name(w.dtype) << ") should be the same";
  const size_t nd = static_cast<size_t>(in.rank() - 2);
  auto stride = per_dim(c, 3, "stride", nd, 1);
  auto padding = per_dim(c, 4, "padding", nd, 0);
  auto dilation = per_dim(c, 5, "dilation", nd, 1);
  const bool transposed = bool_arg(c, 6, "transposed", false);
  auto groups = opt_int(c, 8, "groups").value_or(1);
  std::vector<sym::Expr> sizes = {in.sizes[0]};
  if (transposed) {
    sizes.push_back(ctx.mul(ctx.constant(groups), w.sizes[1]));
  } else {
    auto wc = ctx.as_const(w.sizes[1]), ic = ctx.as_const(in.sizes[1]);
    COIL_USER_CHECK(!(wc && ic && *wc * groups != *ic)) << c.op << ": invalid channel dimensions";
    sizes.push_back(w.sizes[0]);
  }
  if (ctx.provably_eq(in.sizes[1], ctx.zero())) sizes[1] = ctx.zero();
  auto output_padding =
      transposed ? per_dim(c, 7, "output_padding", nd, 0) : std::vector<int64_t>(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    sym::Expr ln = in.sizes[2 + i], k = w.sizes[2 + i];
    sym::Expr dk = ctx.mul(ctx.constant(dilation[i]), ctx.sub(k, ctx.one()));
    if (transposed) {
      sym::Expr o = ctx.mul(ctx.sub(ln, ctx.one()), ctx.constant(stride[i]));
      o = ctx.add(ctx.sub(o, ctx.constant(2 * padding[i])), dk);
      sizes.push_back(ctx.add(o, ctx.constant(output_padding[i] + 1)));
    } else {
      sym::Expr num = ctx.sub(ctx.add(ln, ctx.constant(2 * padding[i] - 1)), dk);
      sym::Expr o = ctx.add(ctx.floordiv(num, ctx.constant(stride[i])), ctx.one());
      auto oc = ctx.as_const(o);
      COIL_USER_CHECK(!(oc && *oc <= 0)) << c.op << ": kernel size can't be greater than the "
                                         << "padded input size";
      sizes.push_back(o);
    }
  }
  const bool cl = all_const(ctx, in.sizes) && all_const(ctx, w.sizes) &&
                  (strides_like_channels_last(ctx, in) || strides_like_channels_last(ctx, w));
  return {make_like_format(ctx, in.dtype, in.device, std::move(sizes), cl)};
}

// aten.convolution_backward.default(grad_output, input, weight, bias_sizes, stride, padding,
// dilation, transposed, output_padding, groups, output_mask) -> the gradients output_mask asks
// for (coil's graphs declare only those): grad_input like input, grad_weight like weight, both
// channels-last when the input or the weight suggests it; grad_bias [bias_sizes], contiguous.
// All take grad_output's dtype (grad_output.new_empty).
std::vector<TensorMeta> convolution_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& grad = tensor_arg(c, 0, "grad_output");
  const TensorMeta& in = tensor_arg(c, 1, "input");
  const TensorMeta& w = tensor_arg(c, 2, "weight");
  const Arg* mask = c.arg(10, "output_mask");
  COIL_USER_CHECK(mask && mask->is_list() && mask->list().size() == 3)
      << c.op << ": output_mask must be a list of 3 bools";
  const bool cl = strides_like_channels_last(ctx, in) || strides_like_channels_last(ctx, w);
  std::vector<TensorMeta> out;
  if (mask->list()[0].as_int())
    out.push_back(make_like_format(ctx, grad.dtype, grad.device, in.sizes, cl));
  if (mask->list()[1].as_int())
    out.push_back(make_like_format(ctx, grad.dtype, grad.device, w.sizes, cl));
  if (mask->list()[2].as_int()) {
    const Arg* bias_sizes = c.arg(3, "bias_sizes");
    COIL_USER_CHECK(bias_sizes && bias_sizes->is_list()) << c.op << ": grad_bias needs bias_sizes";
    std::vector<sym::Expr> sizes;
    for (const Arg& a : bias_sizes->list()) sizes.push_back(size_arg(ctx, a));
    out.push_back(make_contiguous(ctx, grad.dtype, grad.device, std::move(sizes)));
  }
  return out;
}

// ---- pooling ----

// pooling_output_shape: floor((in + 2 pad - dilation (k-1) - 1 [+ stride-1 in ceil mode]) /
// stride) + 1, less one in ceil mode when the last window would start in the right padding.
sym::Expr pooled_size(sym::Context& ctx, const OpCall& c, sym::Expr in, int64_t k, int64_t pad,
                      int64_t stride, int64_t dilation, bool ceil_mode) {
  COIL_USER_CHECK(stride != 0) << c.op << ": stride should not be zero";
  COIL_USER_CHECK(pad >= 0 && pad <= ((k - 1) * dilation + 1) / 2)
      << c.op << ": pad should be at most half of effective kernel size";
  int64_t extra = 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  sym::Expr out =
      ctx.add(ctx.floordiv(ctx.add(in, ctx.constant(extra)), ctx.constant(stride)), ctx.one());
  if (ceil_mode) {
    sym::Expr last = ctx.mul(ctx.sub(out, ctx.one()), ctx.constant(stride));
    if (ctx.provably_le(ctx.add(in, ctx.constant(pad)), last)) out = ctx.sub(out, ctx.one());
  }
  return out;
}

struct Pool2d {
  int64_t kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
};

// kernel_size (1 or 2 entries), stride (empty = kernel_size), padding, dilation.
Pool2d pool_params(const OpCall& c, size_t first, bool has_dilation) {
  Pool2d p;
  auto k = per_dim(c, first, "kernel_size", 2);
  p.kh = k[0];
  p.kw = k[1];
  auto s = opt_int_list(c, first + 1, "stride");
  if (!s || s->empty()) {
    p.sh = p.kh;
    p.sw = p.kw;
  } else {
    auto sv = per_dim(c, first + 1, "stride", 2);
    p.sh = sv[0];
    p.sw = sv[1];
  }
  auto pad = per_dim(c, first + 2, "padding", 2, 0);
  p.ph = pad[0];
  p.pw = pad[1];
  if (has_dilation) {
    auto d = per_dim(c, first + 3, "dilation", 2, 1);
    p.dh = d[0];
    p.dw = d[1];
  }
  return p;
}

// The pooled result of a 3-d (C, H, W) or 4-d (N, C, H, W) input, in the input's suggested
// memory format (torch.empty(..., memory_format=suggest_memory_format(input))).
TensorMeta pooled(sym::Context& ctx, const OpCall& c, const TensorMeta& in, const Pool2d& p,
                  bool ceil_mode, DType dtype) {
  COIL_USER_CHECK(in.rank() == 3 || in.rank() == 4)
      << c.op << ": expects a 3-D or 4-D input, got rank " << in.rank();
  std::vector<sym::Expr> sizes(in.sizes.begin(), in.sizes.end() - 2);
  sizes.push_back(pooled_size(ctx, c, in.sizes[in.rank() - 2], p.kh, p.ph, p.sh, p.dh, ceil_mode));
  sizes.push_back(pooled_size(ctx, c, in.sizes[in.rank() - 1], p.kw, p.pw, p.sw, p.dw, ceil_mode));
  return make_like_format(ctx, dtype, in.device, std::move(sizes),
                          strides_like_channels_last(ctx, in));
}

// A gradient of the pool's input: its sizes and suggested memory format.
TensorMeta like_input(sym::Context& ctx, const TensorMeta& in, DType dtype) {
  return make_like_format(ctx, dtype, in.device, in.sizes, strides_like_channels_last(ctx, in));
}

// aten.avg_pool2d.default(self, kernel_size, stride=[], padding=0, ceil_mode=False,
// count_include_pad=True, divisor_override=None)
std::vector<TensorMeta> avg_pool2d_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.dtype != DType::UInt8) << c.op << ": not implemented for u8";
  return {
      pooled(ctx, c, in, pool_params(c, 1, false), bool_arg(c, 4, "ceil_mode", false), in.dtype)};
}

// aten.avg_pool2d_backward.default(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override): self's sizes and dtype.
std::vector<TensorMeta> avg_pool2d_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 1, "self");
  return {like_input(ctx, in, in.dtype)};
}

// aten.max_pool2d_with_indices.default(self, kernel_size, stride=[], padding=0, dilation=1,
// ceil_mode=False) -> (values, int64 indices), both in the input's memory format.
std::vector<TensorMeta> max_pool2d_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  Pool2d p = pool_params(c, 1, true);
  bool ceil_mode = bool_arg(c, 5, "ceil_mode", false);
  return {pooled(ctx, c, in, p, ceil_mode, in.dtype),
          pooled(ctx, c, in, p, ceil_mode, DType::Int64)};
}

// aten.max_pool2d_with_indices_backward.default(grad_output, self, kernel_size, stride,
// padding, dilation, ceil_mode, indices): self's sizes and dtype.
std::vector<TensorMeta> max_pool2d_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& grad = tensor_arg(c, 0, "grad_output");
  const TensorMeta& in = tensor_arg(c, 1, "self");
  COIL_USER_CHECK(grad.dtype == in.dtype) << c.op << ": expected dtype " << dtype_name(in.dtype)
                                          << " for gradOutput, got " << dtype_name(grad.dtype);
  return {like_input(ctx, in, in.dtype)};
}

// aten._adaptive_avg_pool2d.default(self, output_size): self.shape[:-2] + output_size.
std::vector<TensorMeta> adaptive_avg_pool2d_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  COIL_USER_CHECK(in.rank() == 3 || in.rank() == 4)
      << c.op << ": expects a 3-D or 4-D input, got rank " << in.rank();
  const Arg* os = c.arg(1, "output_size");
  COIL_USER_CHECK(os && os->is_list() && os->list().size() == 2)
      << c.op << ": output_size must have 2 entries";
  std::vector<sym::Expr> sizes(in.sizes.begin(), in.sizes.end() - 2);
  for (const Arg& a : os->list()) sizes.push_back(size_arg(ctx, a));
  return {make_like_format(ctx, in.dtype, in.device, std::move(sizes),
                           strides_like_channels_last(ctx, in))};
}

// aten._adaptive_avg_pool2d_backward.default(grad_output, self): self's sizes and dtype.
std::vector<TensorMeta> adaptive_avg_pool2d_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& grad = tensor_arg(c, 0, "grad_output");
  const TensorMeta& in = tensor_arg(c, 1, "self");
  COIL_USER_CHECK(grad.dtype == in.dtype) << c.op << ": expected dtype " << dtype_name(in.dtype)
                                          << " for grad_output, got " << dtype_name(grad.dtype);
  return {like_input(ctx, in, in.dtype)};
}

// ---- fused scaled-dot-product attention (CUDA; _meta_registrations.py). Only tensor outputs
// are listed (coil's graphs drop the None entries and the max_q / max_k ints).

TensorMeta sdpa_empty_like(sym::Context& ctx, const TensorMeta& t) {
  TensorMeta m = t;
  m.strides = preserve_format_strides(ctx, t);
  m.storage_offset = nullptr;
  return m;
}

// Dense strides of `sizes` in the physical dim order `order` (outermost first): PyTorch's
// empty_permuted, and a transposed result of a [B, L, H, D] allocation.
std::vector<sym::Expr> permuted_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                                        const std::vector<int64_t>& order) {
  std::vector<sym::Expr> out(sizes.size());
  sym::Expr s = ctx.one();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    out[*it] = s;
    s = ctx.mul(s, sizes[*it]);
  }
  return out;
}

TensorMeta sdpa_fresh(sym::Context& ctx, DType dtype, Device device, std::vector<sym::Expr> sizes,
                      const std::vector<int64_t>& order) {
  TensorMeta m = make_contiguous(ctx, dtype, device, std::move(sizes));
  m.strides = permuted_strides(ctx, m.sizes, order);
  return m;
}

// The philox seed and offset of the efficient and cuDNN kernels: 0-d i64 on q's device.
TensorMeta philox_meta(sym::Context& ctx, const TensorMeta& q) {
  return make_contiguous(ctx, DType::Int64, q.device, {});
}

void check_sdpa_inputs(const OpCall& c, const TensorMeta& q, const TensorMeta& k,
                       const TensorMeta& v) {
  COIL_USER_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4)
      << c.op << ": expects 4-d query, key and value";
}

// _scaled_dot_product_efficient_attention(query, key, value, attn_bias, compute_log_sumexp,
// dropout_p=0, is_causal=False, *, scale=None) -> (output [B, H, M, Kv] allocated as
// [B, M, H, Kv], logsumexp f32 [B, H, ceil(M / 32) * 32, or 0 without compute_log_sumexp],
// philox_seed, philox_offset).
std::vector<TensorMeta> sdpa_efficient_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& q = tensor_arg(c, 0, "query");
  const TensorMeta& k = tensor_arg(c, 1, "key");
  const TensorMeta& v = tensor_arg(c, 2, "value");
  check_sdpa_inputs(c, q, k, v);
  sym::Expr b = q.sizes[0], h = q.sizes[1], m = q.sizes[2];
  TensorMeta out = sdpa_fresh(ctx, q.dtype, q.device, {b, h, m, v.sizes[3]}, {0, 2, 1, 3});
  sym::Expr lse_len =
      bool_arg(c, 4, "compute_log_sumexp", false)
          ? ctx.mul(ctx.floordiv(ctx.add(m, ctx.constant(31)), ctx.constant(32)), ctx.constant(32))
          : ctx.zero();
  TensorMeta lse = make_contiguous(ctx, DType::Float32, q.device, {b, h, lse_len});
  return {out, lse, philox_meta(ctx, q), philox_meta(ctx, q)};
}

// _scaled_dot_product_efficient_attention_backward(grad_out, query, key, value, attn_bias, out,
// logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal=False, *,
// scale=None) -> grad_q, grad_k, grad_v (empty_permuted as [B, L, H, D]) and, with a bias and
// grad_input_mask[3], grad_bias: the bias's sizes, a slice of a buffer whose last dim is
// rounded up to a multiple of 16.
std::vector<TensorMeta> sdpa_efficient_backward_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& q = tensor_arg(c, 1, "query");
  const TensorMeta& k = tensor_arg(c, 2, "key");
  const TensorMeta& v = tensor_arg(c, 3, "value");
  check_sdpa_inputs(c, q, k, v);
  const std::vector<int64_t> blhd = {0, 2, 1, 3};
  std::vector<TensorMeta> out = {sdpa_fresh(ctx, q.dtype, q.device, q.sizes, blhd),
                                 sdpa_fresh(ctx, k.dtype, k.device, k.sizes, blhd),
                                 sdpa_fresh(ctx, v.dtype, v.device, v.sizes, blhd)};
  const Arg* bias = c.arg(4, "attn_bias");
  const Arg* mask = c.arg(10, "grad_input_mask");
  if (bias && bias->is_value() && mask && mask->is_list() && mask->list().size() > 3 &&
      mask->list()[3].as_int()) {
    const TensorMeta& bm = bias->value()->meta();
    COIL_USER_CHECK(bm.rank() > 0) << c.op << ": attn_bias must have at least one dim";
    std::vector<sym::Expr> aligned = bm.sizes;
    sym::Expr last = aligned.back();
    aligned.back() =
        ctx.mul(ctx.floordiv(ctx.add(last, ctx.constant(15)), ctx.constant(16)), ctx.constant(16));
    TensorMeta g = make_contiguous(ctx, bm.dtype, bm.device, bm.sizes);
    g.strides = contiguous_strides(ctx, aligned);
    out.push_back(g);
  }
  return out;
}

// _scaled_dot_product_cudnn_attention(query, key, value, attn_bias, compute_log_sumexp,
// dropout_p=0, is_causal=False, return_debug_mask=False, *, scale=None) -> (output
// [B, H, S_Q, D_V] in query's dim order (alloc_with_matching_layout), logsumexp f32
// [B, H, S_Q, 1], philox_seed, philox_offset).
std::vector<TensorMeta> sdpa_cudnn_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& q = tensor_arg(c, 0, "query");
  const TensorMeta& k = tensor_arg(c, 1, "key");
  const TensorMeta& v = tensor_arg(c, 2, "value");
  check_sdpa_inputs(c, q, k, v);
  std::vector<sym::Expr> sizes = {q.sizes[0], q.sizes[1], q.sizes[2], v.sizes[3]};
  TensorMeta out;
  if (ctx.provably_eq(v.sizes[3], q.sizes[3])) {
    out = sdpa_empty_like(ctx, q);
  } else {
    // Dims by decreasing query stride (a stable sort, as Python's sorted(reverse=True)).
    std::vector<int64_t> order = {0, 1, 2, 3};
    for (size_t i = 1; i < order.size(); ++i) {
      for (size_t j = i; j > 0 && ctx.provably_lt(q.strides[order[j - 1]], q.strides[order[j]]);
           --j) {
        std::swap(order[j - 1], order[j]);
      }
    }
    out = sdpa_fresh(ctx, q.dtype, q.device, sizes, order);
  }
  TensorMeta lse = make_contiguous(ctx, DType::Float32, q.device,
                                   {q.sizes[0], q.sizes[1], q.sizes[2], ctx.one()});
  return {out, lse, philox_meta(ctx, q), philox_meta(ctx, q)};
}

// _scaled_dot_product_cudnn_attention_backward(grad_out, query, key, value, out, logsumexp,
// ...) and _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out,
// logsumexp, ...): empty_like(query), empty_like(key), empty_like(value).
std::vector<TensorMeta> sdpa_grads_like_inputs_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& q = tensor_arg(c, 1, "query");
  const TensorMeta& k = tensor_arg(c, 2, "key");
  const TensorMeta& v = tensor_arg(c, 3, "value");
  check_sdpa_inputs(c, q, k, v);
  return {sdpa_empty_like(ctx, q), sdpa_empty_like(ctx, k), sdpa_empty_like(ctx, v)};
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::Other, fn); };
  add("aten.convolution.default", convolution_meta);
  add("aten.convolution_backward.default", convolution_backward_meta);
  add("aten.avg_pool2d.default", avg_pool2d_meta);
  add("aten.avg_pool2d_backward.default", avg_pool2d_backward_meta);
  add("aten.max_pool2d_with_indices.default", max_pool2d_meta);
  add("aten.max_pool2d_with_indices_backward.default", max_pool2d_backward_meta);
  add("aten._adaptive_avg_pool2d.default", adaptive_avg_pool2d_meta);
  add("aten._adaptive_avg_pool2d_backward.default", adaptive_avg_pool2d_backward_meta);
  add("aten._scaled_dot_product_efficient_attention.default", sdpa_efficient_meta);
  add("aten._scaled_dot_product_efficient_attention_backward.default",
      sdpa_efficient_backward_meta);
  add("aten._scaled_dot_product_cudnn_attention.default", sdpa_cudnn_meta);
  add("aten._scaled_dot_product_cudnn_attention_backward.default", sdpa_grads_like_inputs_meta);
  add("aten._scaled_dot_product_flash_attention_backward.default", sdpa_grads_like_inputs_meta);
}

}  // namespace coil::ops
