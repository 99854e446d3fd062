// Linear-algebra lowerings: mm, bmm, addmm, matmul (the shapes that survive decomposition),
// dot, mv and convolution as ExternNodes (conventions in runtime/extern_kernels.h and
// loop/program.h). Extern inputs go through LoweringContext::as_buffer: a strided window
// (e.g. a transposed or sliced input) is passed in place, anything else is realized first.
// Vector products (dot, mv, matmul with a 1-d operand) are sum reductions instead.
#include <algorithm>
#include <optional>
#include <vector>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {
namespace {

using namespace detail;
using loop::BodyBuilder;
using loop::BufferId;
using loop::ExternKind;
using loop::ExternNode;
using loop::InstrId;
using loop::InstrKind;
using sym::Expr;

// Runs a matmul-like extern with `inputs` producing a new buffer of `sizes`.
BufferId run_extern(LoweringContext& ctx, const Node& node, ExternKind kind,
                    const std::vector<TensorValue>& inputs, DType dt, std::vector<Expr> sizes,
                    std::vector<double> scalars = {}, std::vector<int64_t> ints = {}) {
  ExternNode e = extern_for(ctx, node, kind);
  for (const TensorValue& v : inputs) e.inputs.push_back(ctx.as_buffer(cast_value(ctx, v, dt)));
  BufferId out = ctx.new_buffer(dt, std::move(sizes));
  e.outputs = {out};
  e.scalars = std::move(scalars);
  e.ints = std::move(ints);
  ctx.add_extern(std::move(e));
  return out;
}

// cuBLASLt's fast kernels need C's contiguous extent N to be a multiple of 16 bytes: GPT-2's LM
// head (N = 50257, bf16) takes 3.3 ms unpadded against 0.45 ms padded on the H100, whatever
// C's row stride. The runtime pads such products above loop::kMatmulPadMinWork multiply-adds
// (runtime/cuda_matmul.cpp); for a CUDA mm the lowering also gives the product a buffer of
// N_pad columns, so cuBLASLt writes the padded product in place and the value is its [:, :N]
// window: no copy-out (2 x 254 us per GPT-2 inference call before), and a graph output keeps
// the padded row stride, as Inductor's padded mm returns it. The pad columns hold the product
// with B's zero-padded columns (zeros) and are never read.

std::optional<int64_t> padded_columns(const LoweringContext& ctx, DType dt, const TensorValue& a,
                                      const TensorValue& b, const sym::Context& c) {
  if (!ctx.target().pad_matmul_operands) return std::nullopt;
  if (dt != DType::Float32 && dt != DType::BFloat16 && dt != DType::Float16) return std::nullopt;
  if (a.dtype != dt || b.dtype != dt) return std::nullopt;
  auto m = c.as_const(a.sizes[0]), k = c.as_const(a.sizes[1]), n = c.as_const(b.sizes[1]);
  if (!m || !k || !n) return std::nullopt;
  const int64_t per = 16 / dtype_size(dt);
  if (*n % per == 0 || *m * *n * *k < loop::kMatmulPadMinWork) return std::nullopt;
  return (*n + per - 1) / per * per;
}

}  // namespace

// A CUDA product pads an operand whose contiguous extent is not a multiple of 16 bytes
// (runtime/cuda_matmul.cpp): GPT-2's LM-head gradient [4096, 50257] in float32 was copied
// into a padded operand twice per training step (2 x 550 us on the H100). Realized with
// zeroed pad columns instead, both products read it in place (ints[2]).
std::optional<int64_t> detail::gemm_operand_pad(const LoweringContext& ctx, const TensorValue& v) {
  if (!ctx.target().pad_matmul_operands || v.sizes.size() != 2) return std::nullopt;
  if (v.dtype != DType::Float32 && v.dtype != DType::BFloat16 && v.dtype != DType::Float16)
    return std::nullopt;
  auto rows = ctx.ctx().as_const(v.sizes[0]), cols = ctx.ctx().as_const(v.sizes[1]);
  const int64_t per = 16 / dtype_size(v.dtype);
  if (!rows || !cols || *cols % per == 0 || *rows * *cols < kGemmPadOperandMinElements)
    return std::nullopt;
  return (*cols + per - 1) / per * per;
}

TensorValue detail::realize_zero_padded(LoweringContext& ctx, const TensorValue& v, int64_t cols) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const Expr n = v.sizes[1];
  TensorValue padded = ctx.pointwise(
      v.dtype, {v.sizes[0], c.constant(cols)},
      [v, n, cx](BodyBuilder& b, const std::vector<Expr>& i) {
        return load_or(b, *cx, v, i, cx->lt(i[1], n), b.constant(0, dtype_compute(v.dtype)));
      },
      v.inline_cost + 2, v.inline_reads);
  padded.device = v.device;
  TensorValue storage = ctx.realize_with_strides(padded, contiguous_strides(c, padded.sizes));
  TensorValue w =
      ctx.window(storage.strided->base, v.dtype, v.device, v.sizes, {c.constant(cols), c.one()});
  ctx.mark_zero_padded(w);
  return w;
}

namespace {

// The ints of a CUDA Mm / Addmm: the epilogue, padded columns, the zero-padded operands.
std::vector<int64_t> matmul_ints(const LoweringContext& ctx, const TensorValue& a,
                                 const TensorValue& b, bool padded_out) {
  const int64_t zero = (ctx.is_zero_padded(a) ? loop::kZeroPaddedA : 0) |
                       (ctx.is_zero_padded(b) ? loop::kZeroPaddedB : 0);
  if (zero == 0 && !padded_out) return {};
  return {loop::kEpilogueNone, padded_out ? 1 : 0, zero};
}

// A product's operand that is not yet in memory, realized zero-padded where the product would
// otherwise copy it into a padded operand, else in the layout of the graph Value it is: a
// product reads either orientation in place, and a transposed view of an elementwise result
// (a weight gradient's `permute(x)` of a value the backward computes again) is then that
// result in its own order, a plain elementwise kernel, where a contiguous [N, M] copy of an
// [M, N] computation was a tiled transpose (GPT-2's bf16-autocast backward: 0.50 ms a step on
// the H100). Contiguous where the Value's contiguous extent is not a multiple of 16 bytes
// (the CUDA product would copy it into a padded operand), or, for a batched product's
// [batch, rows, cols] operand, where the unit stride is the batch dim's (a product reads
// matrices with a unit stride). A batched product's operand used to reach run_extern's
// conversion as it was, a copy that is no graph Value's, and so was always written
// contiguously: a transposed view of an elementwise result through a tiled transpose.
TensorValue gemm_operand(LoweringContext& ctx, const TensorValue& v) {
  if (v.strided) return v;
  if (auto cols = gemm_operand_pad(ctx, v)) return realize_zero_padded(ctx, v, *cols);
  const Value* owner = ctx.stored_value_of(v);
  const size_t rank = v.sizes.size();
  if (owner == nullptr || (rank != 2 && rank != 3)) return v;
  const std::vector<sym::Expr> strides = dense_strides_like(ctx.ctx(), owner->meta());
  for (size_t d = 0; d < rank; ++d) {
    if (ctx.ctx().as_const(strides[d]) != 1) continue;
    auto extent = ctx.ctx().as_const(v.sizes[d]);
    if (d + 2 < rank ||
        (ctx.target().pad_matmul_operands && (!extent || *extent * dtype_size(v.dtype) % 16 != 0)))
      return ctx.realize_with_strides(v, contiguous_strides(ctx.ctx(), v.sizes));
  }
  return ctx.realize(v);
}

std::vector<TensorValue> lower_mm(LoweringContext& ctx, const Node& node) {
  const TensorValue a = gemm_operand(ctx, ctx.arg_value(node, 0, "self"));
  const TensorValue b = gemm_operand(ctx, ctx.arg_value(node, 1, "mat2"));
  COIL_USER_CHECK(a.sizes.size() == 2 && b.sizes.size() == 2) << "mm: 2-d operands expected";
  const DType dt = out_dtype(node);
  sym::Context& c = ctx.ctx();
  if (auto np = padded_columns(ctx, dt, a, b, c)) {
    BufferId out = run_extern(ctx, node, ExternKind::Mm, {a, b}, dt, {a.sizes[0], c.constant(*np)},
                              {}, matmul_ints(ctx, a, b, true));
    return {ctx.window(out, dt, node.output(0)->meta().device, {a.sizes[0], b.sizes[1]},
                       {c.constant(*np), c.one()})};
  }
  BufferId out = run_extern(ctx, node, ExternKind::Mm, {a, b}, dt, {a.sizes[0], b.sizes[1]}, {},
                            matmul_ints(ctx, a, b, false));
  return {ctx.from_buffer(out)};
}

std::vector<TensorValue> lower_bmm(LoweringContext& ctx, const Node& node) {
  const TensorValue a = gemm_operand(ctx, ctx.arg_value(node, 0, "self"));
  const TensorValue b = gemm_operand(ctx, ctx.arg_value(node, 1, "mat2"));
  COIL_USER_CHECK(a.sizes.size() == 3 && b.sizes.size() == 3) << "bmm: 3-d operands expected";
  BufferId out = run_extern(ctx, node, ExternKind::Bmm, {a, b}, out_dtype(node),
                            {a.sizes[0], a.sizes[1], b.sizes[2]});
  return {ctx.from_buffer(out)};
}

double scalar_arg(const Node& node, size_t i, std::string_view name, double def) {
  const Arg* a = node.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  return a->as_double();
}

// addmm(self, mat1, mat2, *, beta=1, alpha=1): Addmm inputs {bias, a, b}, scalars {beta, alpha};
// the bias is passed as is (broadcastable to [M, N]; the kernel broadcasts it).
std::vector<TensorValue> lower_addmm(LoweringContext& ctx, const Node& node) {
  const TensorValue& bias = ctx.arg_value(node, 0, "self");
  const TensorValue a = gemm_operand(ctx, ctx.arg_value(node, 1, "mat1"));
  const TensorValue b = gemm_operand(ctx, ctx.arg_value(node, 2, "mat2"));
  COIL_USER_CHECK(a.sizes.size() == 2 && b.sizes.size() == 2) << "addmm: 2-d operands expected";
  COIL_USER_CHECK(bias.sizes.size() <= 2) << "addmm: bias of rank > 2";
  double beta = scalar_arg(node, 3, "beta", 1.0);
  double alpha = scalar_arg(node, 4, "alpha", 1.0);
  BufferId out = run_extern(ctx, node, ExternKind::Addmm, {bias, a, b}, out_dtype(node),
                            {a.sizes[0], b.sizes[1]}, {beta, alpha}, matmul_ints(ctx, a, b, false));
  return {ctx.from_buffer(out)};
}

// sum_k a(out, k) * b(out, k) over k < kdim, as a realized reduction.
TensorValue contract(LoweringContext& ctx, DType dt, std::vector<Expr> out_sizes, Expr kdim,
                     Loader la, Loader lb,
                     std::function<std::vector<Expr>(const std::vector<Expr>&, Expr)> ia,
                     std::function<std::vector<Expr>(const std::vector<Expr>&, Expr)> ib) {
  DType acc = dtype_compute(dt);
  return ctx.reduce(loop::ReduceKind::Sum, dt, std::move(out_sizes), {kdim},
                    [=](BodyBuilder& b, const std::vector<Expr>& o, const std::vector<Expr>& r) {
                      InstrId x = b.cast(la(b, ia(o, r[0])), acc);
                      InstrId y = b.cast(lb(b, ib(o, r[0])), acc);
                      return b.op(InstrKind::Mul, acc, x, y);
                    });
}

std::vector<TensorValue> lower_dot(LoweringContext& ctx, const Node& node) {
  const TensorValue& a = ctx.arg_value(node, 0, "self");
  const TensorValue& b = ctx.arg_value(node, 1, "tensor");
  COIL_USER_CHECK(a.sizes.size() == 1 && b.sizes.size() == 1) << "dot: 1-d operands expected";
  auto id = [](const std::vector<Expr>&, Expr k) { return std::vector<Expr>{k}; };
  return {contract(ctx, out_dtype(node), {}, a.sizes[0], a.load, b.load, id, id)};
}

std::vector<TensorValue> lower_mv(LoweringContext& ctx, const Node& node) {
  const TensorValue& a = ctx.arg_value(node, 0, "self");
  const TensorValue& v = ctx.arg_value(node, 1, "vec");
  COIL_USER_CHECK(a.sizes.size() == 2 && v.sizes.size() == 1) << "mv: 2-d and 1-d expected";
  return {contract(
      ctx, out_dtype(node), {a.sizes[0]}, a.sizes[1], a.load, v.load,
      [](const std::vector<Expr>& o, Expr k) {
        return std::vector<Expr>{o[0], k};
      },
      [](const std::vector<Expr>&, Expr k) { return std::vector<Expr>{k}; })};
}

// `v` with dims [first, last] merged into one: a strided window when the strides allow it (no
// copy), else a lazy value that unravels the merged index.
TensorValue merge_dims(LoweringContext& ctx, const TensorValue& v, size_t first, size_t last) {
  sym::Context& c = ctx.ctx();
  std::vector<Expr> part(v.sizes.begin() + first, v.sizes.begin() + last + 1);
  std::vector<Expr> sizes(v.sizes.begin(), v.sizes.begin() + first);
  sizes.push_back(c.product(part));
  sizes.insert(sizes.end(), v.sizes.begin() + last + 1, v.sizes.end());
  sym::Context* cx = &c;
  Loader inner = v.load;
  auto unravel = [cx, part, first](const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    std::vector<Expr> full(idx.begin(), idx.begin() + first);
    std::vector<Expr> sub(part.size());
    Expr rem = idx[first];
    for (size_t k = part.size(); k-- > 0;) {
      if (k == 0) {
        sub[k] = rem;
      } else {
        sub[k] = c.mod(rem, part[k]);
        rem = c.floordiv(rem, part[k]);
      }
    }
    full.insert(full.end(), sub.begin(), sub.end());
    full.insert(full.end(), idx.begin() + first + 1, idx.end());
    return full;
  };
  TensorValue out = ctx.pointwise(
      v.dtype, sizes,
      [inner, unravel](BodyBuilder& b, const std::vector<Expr>& idx) {
        return inner(b, unravel(idx));
      },
      v.inline_cost + 2, v.inline_reads);
  if (v.strided) {
    const auto& st = v.strided->strides;
    bool ok = true;
    for (size_t k = first; k < last; ++k) {
      if (c.as_const(v.sizes[k + 1]) == 1) continue;
      ok = ok && c.provably_eq(st[k], c.mul(st[k + 1], v.sizes[k + 1]));
    }
    // Size-1 dims inside the block: their stride is irrelevant, but the check above needs the
    // next non-trivial stride; keep it simple and only accept blocks without size-1 dims.
    for (size_t k = first; k <= last && ok; ++k) ok = c.as_const(v.sizes[k]) != 1;
    if (ok) {
      StridedRef s = *v.strided;
      std::vector<Expr> ns(st.begin(), st.begin() + first);
      ns.push_back(st[last]);
      ns.insert(ns.end(), st.begin() + last + 1, st.end());
      s.strides = ns;
      out.strided = s;
      out.inline_cost = 1;
    }
  }
  return out;
}

// A buffer of sizes `flat` (row-major) read as `sizes` (same number of elements, row-major).
TensorValue reshape_buffer(LoweringContext& ctx, BufferId buf, const std::vector<Expr>& sizes) {
  sym::Context& c = ctx.ctx();
  TensorValue base = ctx.from_buffer(buf);
  const std::vector<Expr> flat = base.sizes;
  sym::Context* cx = &c;
  Loader inner = base.load;
  TensorValue out = ctx.pointwise(
      base.dtype, sizes,
      [inner, flat, sizes, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
        sym::Context& c = *cx;
        Expr lin = c.zero();
        for (size_t k = 0; k < sizes.size(); ++k) lin = c.add(c.mul(lin, sizes[k]), idx[k]);
        std::vector<Expr> fi(flat.size());
        for (size_t k = flat.size(); k-- > 0;) {
          if (k == 0) {
            fi[k] = lin;
          } else {
            fi[k] = c.mod(lin, flat[k]);
            lin = c.floordiv(lin, flat[k]);
          }
        }
        return inner(b, fi);
      },
      1, 1);
  StridedRef s = *base.strided;
  s.strides = contiguous_strides(c, sizes);
  out.strided = s;
  return out;
}

// matmul.default for what reaches lowering: 1-d cases as reductions, 2-d @ 2-d as Mm, n-d @ 2-d
// folded into one Mm, batched cases (broadcast batch dims) as Bmm.
std::vector<TensorValue> lower_matmul(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  const TensorValue& a = ctx.arg_value(node, 0, "self");
  const TensorValue& b = ctx.arg_value(node, 1, "other");
  DType dt = out_dtype(node);
  const size_t ra = a.sizes.size(), rb = b.sizes.size();
  COIL_USER_CHECK(ra >= 1 && rb >= 1) << "matmul: operands must be at least 1-d";
  if (ra == 1 && rb == 1) {
    auto id = [](const std::vector<Expr>&, Expr k) { return std::vector<Expr>{k}; };
    return {contract(ctx, dt, {}, a.sizes[0], a.load, b.load, id, id)};
  }
  if (ra == 2 && rb == 1) {
    return {contract(
        ctx, dt, {a.sizes[0]}, a.sizes[1], a.load, b.load,
        [](const std::vector<Expr>& o, Expr k) {
          return std::vector<Expr>{o[0], k};
        },
        [](const std::vector<Expr>&, Expr k) { return std::vector<Expr>{k}; })};
  }
  if (ra == 1 && rb == 2) {
    return {contract(
        ctx, dt, {b.sizes[1]}, a.sizes[0], a.load, b.load,
        [](const std::vector<Expr>&, Expr k) { return std::vector<Expr>{k}; },
        [](const std::vector<Expr>& o, Expr k) {
          return std::vector<Expr>{k, o[0]};
        })};
  }
  if (ra == 2 && rb == 2) {
    return {ctx.from_buffer(
        run_extern(ctx, node, ExternKind::Mm, {a, b}, dt, {a.sizes[0], b.sizes[1]}))};
  }
  std::vector<Expr> out_sizes = node.output(0)->meta().sizes;
  if (ra >= 3 && rb == 2) {
    // [..., M, K] @ [K, N]: one Mm over the merged leading dims.
    TensorValue a2 = merge_dims(ctx, a, 0, ra - 2);
    BufferId out = run_extern(ctx, node, ExternKind::Mm, {a2, b}, dt, {a2.sizes[0], b.sizes[1]});
    return {reshape_buffer(ctx, out, out_sizes)};
  }
  // Batched: promote 1-d operands to matrices, broadcast the batch dims, flatten them.
  TensorValue am = a, bm = b;
  sym::Context* cx = &c;
  if (ra == 1) {
    Loader l = a.load;
    am = ctx.pointwise(a.dtype, {c.one(), a.sizes[0]},
                       [l](BodyBuilder& bb, const std::vector<Expr>& i) { return l(bb, {i[1]}); });
  }
  if (rb == 1) {
    Loader l = b.load;
    bm = ctx.pointwise(b.dtype, {b.sizes[0], c.one()},
                       [l](BodyBuilder& bb, const std::vector<Expr>& i) { return l(bb, {i[0]}); });
  }
  std::vector<Expr> ba(am.sizes.begin(), am.sizes.end() - 2);
  std::vector<Expr> bb(bm.sizes.begin(), bm.sizes.end() - 2);
  std::vector<Expr> batch = broadcast_shapes(c, ba, bb);
  Expr nb = c.product(batch);
  Expr m = am.sizes[am.sizes.size() - 2], n = bm.sizes.back();
  auto batched = [&](const TensorValue& v, const std::vector<Expr>& vb) {
    Loader l = v.load;
    std::vector<Expr> bsh = batch;
    return ctx.pointwise(
        v.dtype, {nb, v.sizes[v.sizes.size() - 2], v.sizes.back()},
        [l, bsh, vb, cx](BodyBuilder& b, const std::vector<Expr>& i) {
          sym::Context& c = *cx;
          std::vector<Expr> bi(bsh.size());
          Expr rem = i[0];
          for (size_t q = bsh.size(); q-- > 0;) {
            if (q == 0) {
              bi[q] = rem;
            } else {
              bi[q] = c.mod(rem, bsh[q]);
              rem = c.floordiv(rem, bsh[q]);
            }
          }
          std::vector<Expr> src = broadcast_index(c, vb, bi);
          src.push_back(i[1]);
          src.push_back(i[2]);
          return l(b, src);
        },
        v.inline_cost + 2, v.inline_reads);
  };
  // Operands whose batch dims already have the broadcast shape merge them (in place when the
  // strides allow); the others are expanded and copied.
  TensorValue a3 =
      !ba.empty() && ba == batch ? merge_dims(ctx, am, 0, ba.size() - 1) : batched(am, ba);
  TensorValue b3 =
      !bb.empty() && bb == batch ? merge_dims(ctx, bm, 0, bb.size() - 1) : batched(bm, bb);
  BufferId out = run_extern(ctx, node, ExternKind::Bmm, {a3, b3}, dt, {nb, m, n});
  return {reshape_buffer(ctx, out, out_sizes)};
}

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups): Convolution inputs {input, weight, (bias)}, ints {stride[nd], padding[nd],
// dilation[nd], transposed, output_padding[nd], groups}, nd = rank(input) - 2. Lists given
// with one element apply to every spatial dim. The output takes the graph's (dense) strides, so
// a channels-last convolution stays channels-last.
// The Convolution ints layout from the node's args starting at position `first` (stride),
// shared by the forward and backward ops.
std::vector<int64_t> conv_ints(const Node& node, size_t first, size_t nd) {
  auto list = [&](size_t i, std::string_view name, int64_t def) {
    std::vector<int64_t> out;
    const Arg* a = node.arg(i, name);
    if (a != nullptr && a->is_list()) {
      for (const Arg& e : a->list()) out.push_back(e.as_int());
    } else if (a != nullptr && !a->is_none()) {
      out.push_back(a->as_int());
    }
    if (out.empty()) out.push_back(def);
    if (out.size() == 1) out.resize(nd, out[0]);
    COIL_USER_CHECK(out.size() == nd) << "convolution: " << name << " has the wrong length";
    return out;
  };
  std::vector<int64_t> stride = list(first, "stride", 1), padding = list(first + 1, "padding", 0),
                       dilation = list(first + 2, "dilation", 1),
                       output_padding = list(first + 4, "output_padding", 0);
  const Arg* tr = node.arg(first + 3, "transposed");
  bool transposed = tr != nullptr && !tr->is_none() && tr->as_int() != 0;
  const Arg* g = node.arg(first + 5, "groups");
  int64_t groups = (g == nullptr || g->is_none()) ? 1 : g->as_int();
  std::vector<int64_t> ints;
  for (const auto* v : {&stride, &padding, &dilation})
    ints.insert(ints.end(), v->begin(), v->end());
  ints.push_back(transposed ? 1 : 0);
  ints.insert(ints.end(), output_padding.begin(), output_padding.end());
  ints.push_back(groups);
  return ints;
}

// Whether the target's convolution library adds no bias and would take this convolution
// (ints in conv_ints' layout): then coil adds the bias and reduces its gradient. The library
// (cuDNN through coil's call) takes float32/bfloat16/float16 convolutions of 1-3 spatial dims
// that are not transposed; others run on the host (ATen), bias included. A library convolution
// that still goes to the host at run time (cuDNN refused it) gets a zero bias there
// (coil/node_fallback.py).
bool bias_by_coil(const LoweringContext& ctx, const std::vector<int64_t>& ints, size_t rank,
                  DType dt) {
  const size_t nd = rank - 2;
  const bool transposed = ints.size() > 3 * nd && ints[3 * nd] != 0;
  const bool float_type = dt == DType::Float32 || dt == DType::BFloat16 || dt == DType::Float16;
  return ctx.target().convolution_bias_pointwise && !transposed && float_type && rank <= 5;
}

std::vector<TensorValue> lower_convolution(LoweringContext& ctx, const Node& node) {
  const TensorValue& input = ctx.arg_value(node, 0, "input");
  const TensorValue& weight = ctx.arg_value(node, 1, "weight");
  const Arg* bias = node.arg(2, "bias");
  const size_t rank = input.sizes.size();
  COIL_USER_CHECK(rank >= 3) << "convolution: input must be at least 3-d (batched)";
  DType dt = out_dtype(node);
  if (rank == 4) {
    if (auto native = lower_convolution_natively(ctx, node, conv_ints(node, 3, 2)))
      return {*native};
  }
  ExternNode e = extern_for(ctx, node, ExternKind::Convolution);
  // The input and the weight keep the graph's layout (channels-last where the front end chose
  // it, python/coil/layout.py): cuDNN then runs without transposing them in and the result
  // back. (A weight's channels-last copy is a single-use clone, inline until realized here.)
  const TensorMeta& input_meta = node.arg(0, "input")->value()->meta();
  const TensorMeta& weight_meta = node.arg(1, "weight")->value()->meta();
  e.inputs = {ctx.as_buffer(ctx.realize_like(cast_value(ctx, input, dt), input_meta)),
              ctx.as_buffer(ctx.realize_like(cast_value(ctx, weight, dt), weight_meta))};
  const bool has_bias = bias != nullptr && bias->is_value();
  const bool bias_pointwise = has_bias && bias_by_coil(ctx, conv_ints(node, 3, rank - 2), rank, dt);
  if (has_bias && !bias_pointwise)
    e.inputs.push_back(ctx.as_buffer(cast_value(ctx, ctx.value(bias->value()), dt)));
  e.ints = conv_ints(node, 3, rank - 2);
  const TensorMeta& meta = node.output(0)->meta();
  BufferId out = ctx.new_buffer(dt, meta.sizes);
  ctx.program().buffers[out].strides = dense_strides_like(ctx.ctx(), meta);
  e.outputs = {out};
  ctx.add_extern(std::move(e));
  if (bias_pointwise)
    return {add_bias(ctx, ctx.from_buffer(out), cast_value(ctx, ctx.value(bias->value()), dt))};
  return {ctx.from_buffer(out)};
}

// convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
// transposed, output_padding, groups, output_mask): one ConvolutionBackward extern whose
// outputs are the gradients the mask asks for (the graph declares exactly those, in order).
std::vector<TensorValue> lower_convolution_backward(LoweringContext& ctx, const Node& node) {
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& input = ctx.arg_value(node, 1, "input");
  const TensorValue& weight = ctx.arg_value(node, 2, "weight");
  const size_t rank = input.sizes.size();
  COIL_USER_CHECK(rank >= 3) << "convolution_backward: input must be at least 3-d (batched)";
  const Arg* mask_arg = node.arg(10, "output_mask");
  COIL_USER_CHECK(mask_arg != nullptr && mask_arg->is_list() && mask_arg->list().size() == 3)
      << "convolution_backward: output_mask must be a list of 3 bools";
  std::vector<int64_t> mask;
  for (const Arg& m : mask_arg->list()) mask.push_back(m.as_int() != 0);
  const int64_t wanted = mask[0] + mask[1] + mask[2];
  COIL_USER_CHECK(static_cast<int64_t>(node.outputs().size()) == wanted)
      << "convolution_backward: " << node.outputs().size() << " outputs for " << wanted
      << " set mask entries";
  DType dt = node.output(0)->meta().dtype;
  if (rank == 4) {
    if (auto native = lower_convolution_backward_natively(ctx, node, conv_ints(node, 4, 2), mask))
      return *native;
  }
  // A bias gradient the library does not compute is a reduction of grad_output.
  std::optional<TensorValue> grad_bias;
  if (mask[2] && bias_by_coil(ctx, conv_ints(node, 4, rank - 2), rank, dt)) {
    grad_bias = bias_grad(ctx, grad, node.output(wanted - 1)->meta().dtype);
    mask[2] = 0;
    if (!mask[0] && !mask[1]) return {*grad_bias};
  }
  ExternNode e = extern_for(ctx, node, ExternKind::ConvolutionBackward);
  // grad_output and input keep the graph's layout, as the forward's input does: cuDNN converts
  // grad_output to the input's memory format, so a channels-last grad_output realized next to a
  // contiguous input (or the other way) costs a full copy per call.
  auto activation = [&](const TensorValue& v, size_t i, std::string_view name) {
    const TensorMeta& meta = node.arg(i, name)->value()->meta();
    return ctx.as_buffer(ctx.realize_like(cast_value(ctx, v, dt), meta));
  };
  e.inputs = {activation(grad, 0, "grad_output"), activation(input, 1, "input"),
              ctx.as_buffer(cast_value(ctx, weight, dt))};
  e.ints = conv_ints(node, 4, rank - 2);
  e.ints.insert(e.ints.end(), mask.begin(), mask.end());
  std::vector<TensorValue> outs;
  for (int64_t k = 0; k < mask[0] + mask[1] + mask[2]; ++k) {
    const TensorMeta& meta = node.output(static_cast<size_t>(k))->meta();
    BufferId out = ctx.new_buffer(meta.dtype, meta.sizes);
    ctx.program().buffers[out].strides = dense_strides_like(ctx.ctx(), meta);
    e.outputs.push_back(out);
  }
  ctx.add_extern(e);
  for (BufferId out : e.outputs) outs.push_back(ctx.from_buffer(out));
  if (grad_bias) outs.push_back(*grad_bias);
  return outs;
}

}  // namespace

// An activation applied to a CUDA mm/addmm product (through views) that nothing else reads runs
// in cuBLASLt's epilogue: the product is stored activated, and the kernel that would read and
// write it again is gone (GPT-2's MLP: [4096, 3072] bf16 per layer). cuBLASLt's GELU is the
// tanh form, so an exact (erf) GELU is fused only in bf16, whose rounding (2^-9 relative) is
// far above the two forms' difference (< 5e-4 absolute); ReLU always.
std::optional<TensorValue> detail::fuse_matmul_epilogue(LoweringContext& ctx, const Node& act,
                                                        loop::MatmulEpilogue epilogue,
                                                        bool exact_gelu) {
  if (!ctx.target().matmul_epilogues || act.input_values().empty()) return std::nullopt;
  const DType dt = out_dtype(act);
  if (dt != DType::Float32 && dt != DType::BFloat16 && dt != DType::Float16) return std::nullopt;
  if (exact_gelu && dt != DType::BFloat16) return std::nullopt;
  const auto& outs = ctx.graph().outputs();
  const Value* v = act.input_values()[0];
  for (;;) {
    if (v->users().size() != 1 || std::find(outs.begin(), outs.end(), v) != outs.end())
      return std::nullopt;
    const Node* p = v->producer();
    if (p == nullptr) return std::nullopt;
    const OpId op = p->op_id();
    if (op == opid::aten_view_default || op == opid::aten__unsafe_view_default ||
        op == opid::aten_reshape_default) {
      v = p->input_values().at(0);
      continue;
    }
    if (op != opid::aten_mm_default && op != opid::aten_addmm_default) return std::nullopt;
    const int pos = graph_position(ctx, *p);
    for (loop::Step& step : ctx.program().steps) {
      auto* e = std::get_if<ExternNode>(&step);
      if (e == nullptr || e->graph_node != pos) continue;
      if (e->kind != ExternKind::Mm && e->kind != ExternKind::Addmm) return std::nullopt;
      if (e->kind == ExternKind::Addmm &&
          !(e->scalars.size() == 2 && (e->scalars[0] == 0.0 || e->scalars[0] == 1.0) &&
            e->scalars[1] == 1.0))
        return std::nullopt;  // the epilogue adds the bias row unscaled
      if (ctx.program().buffer(e->outputs.at(0)).dtype != dt) return std::nullopt;
      if (!e->ints.empty() && e->ints[0] != loop::kEpilogueNone) return std::nullopt;
      if (e->ints.empty()) e->ints = {epilogue, 0};
      e->ints[0] = epilogue;
      return ctx.arg_value(act, 0, "self");
    }
    return std::nullopt;
  }
}

void register_linalg_lowerings(LoweringRegistry& r) {
  r.add("aten.convolution_backward.default", lower_convolution_backward);
  r.add("aten.mm.default", lower_mm);
  r.add("aten.bmm.default", lower_bmm);
  r.add("aten.addmm.default", lower_addmm);
  r.add("aten.dot.default", lower_dot);
  r.add("aten.mv.default", lower_mv);
  r.add("aten.matmul.default", lower_matmul);
  r.add("aten.convolution.default", lower_convolution);
}

}  // namespace coil::lower
