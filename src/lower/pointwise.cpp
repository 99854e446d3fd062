// Pointwise lowerings: elementwise math with PyTorch's type promotion and broadcasting, dtype
// conversions, copies, and the random pointwise ops.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/ops/meta_util.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {

namespace {

using loop::BodyBuilder;
using loop::InstrId;
using loop::InstrKind;

// One input of a pointwise op: a tensor or a scalar (Python number or symbolic int).
struct Operand {
  enum Kind { Tensor, Float, Int, Bool, Sym } kind = Float;
  TensorValue t;
  double f = 0;
  int64_t i = 0;
  sym::Expr s = nullptr;
  // A tensor in a Scalar slot of the schema (ops::is_scalar_slot): promotes as a Python number.
  bool wrapped = false;

  bool is_tensor() const { return kind == Tensor; }
  // The scalar's own dtype (for promotion: floats count as the default dtype).
  DType scalar_dtype() const {
    switch (kind) {
      case Float:
        return DType::Float32;
      case Bool:
        return DType::Bool;
      default:
        return DType::Int64;
    }
  }
  DType dtype() const { return is_tensor() ? t.dtype : scalar_dtype(); }
};

Operand scalar_operand(double v) {
  Operand o;
  o.kind = Operand::Float;
  o.f = v;
  return o;
}

Operand arg_operand(LoweringContext& lc, const Node& node, size_t i, std::string_view name) {
  const Arg* a = node.arg(i, name);
  COIL_USER_CHECK(a != nullptr) << node.op() << ": missing argument " << i << " " << name;
  Operand o;
  if (a->is_value()) {
    o.kind = Operand::Tensor;
    o.t = lc.value(a->value());
    o.wrapped = ops::is_scalar_slot(node.op_id(), i);
  } else if (a->is_double()) {
    o.kind = Operand::Float;
    o.f = a->as_double();
  } else if (a->is_bool()) {
    o.kind = Operand::Bool;
    o.i = a->as_int();
    o.f = static_cast<double>(o.i);
  } else if (a->is_int()) {
    o.kind = Operand::Int;
    o.i = a->as_int();
    o.f = static_cast<double>(o.i);
  } else if (a->is_sym()) {
    sym::Expr e = std::get<sym::Expr>(a->v);
    if (e->is_const()) {
      o.kind = Operand::Int;
      o.i = e->value;
      o.f = static_cast<double>(o.i);
    } else {
      o.kind = Operand::Sym;
      o.s = e;
    }
  } else {
    COIL_UNSUPPORTED() << node.op() << ": argument " << i << " is not a tensor or a number";
  }
  return o;
}

bool has_arg(const Node& node, size_t i, std::string_view name) {
  const Arg* a = node.arg(i, name);
  return a != nullptr && !a->is_none();
}

// PyTorch's result_type: dim>0 tensors, then 0-dim tensors, then scalars, each group only
// raising the category (c10 combine_categories).
DType result_type(const std::vector<const Operand*>& ops) {
  std::optional<DType> dim_r, zero_r, wrapped_r;
  auto upd = [](std::optional<DType>& r, DType t) { r = r ? dtype_promote(*r, t) : t; };
  for (const Operand* o : ops) {
    if (o->is_tensor() && o->wrapped) {
      // A symbolic Python number's carrier promotes as that number: floats as f32 (the
      // default dtype), ints as i64, bools as bool.
      DType t = o->t.dtype;
      upd(wrapped_r, dtype_is_floating(t) ? DType::Float32 : t == DType::Bool ? t : DType::Int64);
    } else if (o->is_tensor()) {
      upd(o->t.sizes.empty() ? zero_r : dim_r, o->t.dtype);
    } else {
      upd(wrapped_r, o->scalar_dtype());
    }
  }
  auto combine = [](std::optional<DType> higher,
                    std::optional<DType> lower) -> std::optional<DType> {
    if (!higher) return lower;
    if (!lower) return higher;
    if (dtype_is_floating(*higher)) return higher;
    if (*higher == DType::Bool || dtype_is_floating(*lower)) return dtype_promote(*higher, *lower);
    return higher;
  };
  auto r = combine(dim_r, combine(zero_r, wrapped_r));
  COIL_CHECK(r.has_value()) << "result_type of no operands";
  return *r;
}

DType int_to_float(DType t) { return dtype_is_floating(t) ? t : DType::Float32; }

// Loads operand `o` at `index` (of the broadcast shape) converted to `ct`.
InstrId load_operand(BodyBuilder& b, sym::Context& c, const Operand& o, DType ct,
                     const std::vector<sym::Expr>& index) {
  switch (o.kind) {
    case Operand::Tensor:
      return b.cast(o.t.load(b, broadcast_index(c, o.t.sizes, index)), ct);
    case Operand::Float:
      return b.constant(o.f, ct);
    case Operand::Int:
    case Operand::Bool:
      return b.cast(b.int_constant(o.i, o.kind == Operand::Bool ? DType::Bool : DType::Int64), ct);
    case Operand::Sym:
      return b.cast(b.index_expr(o.s, DType::Int64), ct);
  }
  return -1;
}

using Fn = std::function<InstrId(BodyBuilder& b, const std::vector<InstrId>& x)>;

// The broadcast shape of the tensor operands and the inlining cost and reads they add.
struct OperandSummary {
  std::vector<sym::Expr> sizes;
  int cost = 0;
  int reuse_cost = 0;  // TensorValue::reuse_cost
  int reads = 0;
  // the buffers read element per element of the result (TensorValue::full_read_buffers)
  std::optional<std::vector<loop::BufferId>> full_reads = std::vector<loop::BufferId>{};
  std::optional<std::vector<loop::BufferId>> read_buffers = std::vector<loop::BufferId>{};
};

// `into` with the buffers of `from` it lacks; unset where either is.
void merge_buffers(std::optional<std::vector<loop::BufferId>>& into,
                   const std::optional<std::vector<loop::BufferId>>& from) {
  if (!into) return;
  if (!from) {
    into.reset();
    return;
  }
  for (loop::BufferId b : *from)
    if (std::find(into->begin(), into->end(), b) == into->end()) into->push_back(b);
}
// `tv` with what its operands' summary says of its loads (the realize rule's inputs).
TensorValue with_reads(TensorValue tv, std::optional<std::vector<loop::BufferId>> full_reads,
                       std::optional<std::vector<loop::BufferId>> read_buffers, int reuse_cost) {
  tv.full_read_buffers = std::move(full_reads);
  tv.read_buffers = std::move(read_buffers);
  tv.reuse_cost = reuse_cost;
  return tv;
}

// An operand broadcast along some dim of the result (a per-row scale, a [rows, 1] target) is
// one value per many elements: its chain counts as a load towards the result's cost, so that a
// cheap per-element value over per-row inputs (nll_loss's scaled one-hot) stays inline for its
// two readers instead of being realized at the full [rows, cols] size (realize.h).
OperandSummary summarize(sym::Context& c, const std::vector<Operand>& ops, int cost) {
  OperandSummary s;
  s.cost = cost;
  s.reuse_cost = cost;
  for (const Operand& o : ops)
    if (o.is_tensor()) s.sizes = broadcast_shapes(c, s.sizes, o.t.sizes);
  for (const Operand& o : ops) {
    if (!o.is_tensor()) continue;
    const bool broadcast = is_broadcast_in(c, o.t.sizes, s.sizes);
    s.cost += broadcast ? std::min(o.t.inline_cost, 1) : o.t.inline_cost;
    s.reuse_cost += broadcast ? std::min(o.t.cost_for_reuse(), 1) : o.t.cost_for_reuse();
    s.reads += o.t.inline_reads;
    merge_buffers(s.read_buffers, o.t.read_buffers);
    if (!broadcast) merge_buffers(s.full_reads, o.t.full_read_buffers);
  }
  // Operands that load the same buffer load it once.
  if (s.read_buffers) s.reads = static_cast<int>(s.read_buffers->size());
  return s;
}

// The pointwise value out_dtype[broadcast shape] = fn(operands loaded as `compute`).
TensorValue make_pointwise(LoweringContext& lc, std::vector<Operand> ops, DType compute,
                           DType out_dtype, Fn fn, int cost = 1) {
  sym::Context& c = lc.ctx();
  auto [sizes, total_cost, reuse_cost, reads, full_reads, read_buffers] = summarize(c, ops, cost);
  DType result_compute = dtype_compute(out_dtype);
  Loader load = [ops = std::move(ops), compute, result_compute, fn = std::move(fn), &c](
                    BodyBuilder& b, const std::vector<sym::Expr>& index) {
    std::vector<InstrId> x;
    x.reserve(ops.size());
    for (const Operand& o : ops) x.push_back(load_operand(b, c, o, compute, index));
    return b.cast(fn(b, x), result_compute);
  };
  return with_reads(lc.pointwise(out_dtype, std::move(sizes), std::move(load), total_cost, reads),
                    std::move(full_reads), std::move(read_buffers), reuse_cost);
}

// ---- registration helpers

using Family = std::function<std::vector<TensorValue>(LoweringContext&, const Node&)>;

InstrId un(BodyBuilder& b, InstrKind k, InstrId x) { return b.op(k, b.dtype(x), x); }

// Unary float math: ints promote to the default float dtype.
void unary_float(LoweringRegistry& r, const std::string& name, InstrKind k) {
  r.add("aten." + name + ".default", [k](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    DType out = int_to_float(x.dtype());
    return std::vector<TensorValue>{make_pointwise(
        lc, {x}, dtype_compute(out), out,
        [k](BodyBuilder& b, const std::vector<InstrId>& v) { return un(b, k, v[0]); })};
  });
}

// Unary, same dtype; `int_identity`: the op is the identity on integers (floor, round, ...).
void unary_same(LoweringRegistry& r, const std::string& name, InstrKind k, bool int_identity) {
  r.add("aten." + name + ".default", [k, int_identity](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    DType out = x.dtype();
    bool identity = int_identity && !dtype_is_floating(out);
    return std::vector<TensorValue>{
        make_pointwise(lc, {x}, dtype_compute(out), out,
                       [k, identity](BodyBuilder& b, const std::vector<InstrId>& v) {
                         return identity ? v[0] : un(b, k, v[0]);
                       })};
  });
}

// Binary with default promotion, computed in the common dtype.
TensorValue binary_value(LoweringContext& lc, Operand a, Operand b, InstrKind k,
                         bool int_to_float_result = false) {
  DType common = result_type({&a, &b});
  if (int_to_float_result) common = int_to_float(common);
  DType ct = dtype_compute(common);
  return make_pointwise(
      lc, {std::move(a), std::move(b)}, ct, common,
      [k, ct](BodyBuilder& bb, const std::vector<InstrId>& v) { return bb.op(k, ct, v[0], v[1]); });
}

void binary(LoweringRegistry& r, const std::vector<std::string>& ops, InstrKind k,
            bool int_to_float_result = false) {
  for (const std::string& op : ops) {
    r.add(op, [k, int_to_float_result](LoweringContext& lc, const Node& n) {
      return std::vector<TensorValue>{binary_value(lc, arg_operand(lc, n, 0, "self"),
                                                   arg_operand(lc, n, 1, "other"), k,
                                                   int_to_float_result)};
    });
  }
}

// Comparisons: promote, compare, bool result.
// PyTorch computes an op of a bf16/f16 tensor in that common dtype: an operand of another
// dtype (a Python scalar, an f32 0-d tensor) is rounded to it first. coil computes in f32, and
// rounds such operands the same way: x >= 0.0708 holds where x == bf16(0.0708) (fuzz seed
// 492), and clamp(x, max=0.3) or masked_fill(x, m, 0.3) inlined into a reader is the bf16
// value eager stores (seed 8081: a comparison with a stored copy of the value flipped).
bool rounds_to_common(const Operand& o, DType common, DType ct) {
  return common != ct && o.dtype() != common;
}
InstrId in_common(BodyBuilder& b, InstrId x, bool round, DType common, DType ct) {
  return round ? b.cast(b.cast(x, common), ct) : x;
}

void compare(LoweringRegistry& r, const std::string& name, InstrKind k) {
  for (const char* ov : {".Tensor", ".Scalar"}) {
    r.add("aten." + name + ov, [k](LoweringContext& lc, const Node& n) {
      Operand a = arg_operand(lc, n, 0, "self"), b = arg_operand(lc, n, 1, "other");
      DType common = result_type({&a, &b});
      DType ct = dtype_compute(common);
      bool round_a = rounds_to_common(a, common, ct), round_b = rounds_to_common(b, common, ct);
      return std::vector<TensorValue>{make_pointwise(
          lc, {a, b}, ct, DType::Bool,
          [k, common, ct, round_a, round_b](BodyBuilder& bb, const std::vector<InstrId>& v) {
            return bb.op(k, DType::Bool, in_common(bb, v[0], round_a, common, ct),
                         in_common(bb, v[1], round_b, common, ct));
          })};
    });
  }
}

double scalar_arg(const Node& n, size_t i, std::string_view name, double def) {
  const Arg* a = n.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  return a->as_double();
}

// add/sub with alpha: a + alpha * b (sub: a - alpha * b).
TensorValue add_sub(LoweringContext& lc, const Node& n, bool sub, bool reverse) {
  Operand a = arg_operand(lc, n, 0, "self"), b = arg_operand(lc, n, 1, "other");
  if (reverse) std::swap(a, b);
  DType common = result_type({&a, &b});
  const Arg* alpha_arg = n.arg(2, "alpha");
  std::optional<Operand> alpha;
  if (alpha_arg && !alpha_arg->is_none()) {
    alpha = alpha_arg->is_double() ? scalar_operand(alpha_arg->as_double()) : Operand{};
    if (!alpha_arg->is_double()) {
      alpha->kind = Operand::Int;
      alpha->i = alpha_arg->as_int();
      alpha->f = static_cast<double>(alpha->i);
    }
    COIL_USER_CHECK(dtype_is_floating(common) || alpha->kind != Operand::Float)
        << n.op() << ": a float alpha needs a floating result";
    if (alpha->kind != Operand::Float && alpha->i == 1) alpha.reset();
    if (alpha && alpha->kind == Operand::Float && alpha->f == 1.0) alpha.reset();
  }
  DType ct = dtype_compute(common);
  COIL_USER_CHECK(!(sub && common == DType::Bool)) << n.op() << ": subtraction of bools";
  std::vector<Operand> ops = {a, b};
  if (alpha) ops.push_back(*alpha);
  bool has_alpha = alpha.has_value();
  return make_pointwise(lc, std::move(ops), ct, common,
                        [sub, ct, has_alpha](BodyBuilder& bb, const std::vector<InstrId>& v) {
                          InstrId y = has_alpha ? bb.op(InstrKind::Mul, ct, v[2], v[1]) : v[1];
                          if (ct == DType::Bool) return bb.op(InstrKind::LogicalOr, ct, v[0], y);
                          return bb.op(sub ? InstrKind::Sub : InstrKind::Add, ct, v[0], y);
                        });
}

TensorValue div_value(LoweringContext& lc, const Node& n, Operand a, Operand b) {
  const Arg* mode_arg = n.arg(2, "rounding_mode");
  std::string mode;
  if (mode_arg && !mode_arg->is_none()) mode = std::get<std::string>(mode_arg->v);
  if (mode.empty()) return binary_value(lc, std::move(a), std::move(b), InstrKind::Div, true);
  COIL_USER_CHECK(mode == "trunc" || mode == "floor") << n.op() << ": rounding_mode " << mode;
  DType common = result_type({&a, &b});
  DType ct = dtype_compute(common);
  bool fp = dtype_is_floating(common);
  bool trunc = mode == "trunc";
  return make_pointwise(
      lc, {a, b}, ct, common, [fp, trunc, ct](BodyBuilder& bb, const std::vector<InstrId>& v) {
        if (!fp) {
          return bb.op(trunc ? InstrKind::TruncDiv : InstrKind::FloorDiv, ct, v[0], v[1]);
        }
        InstrId q = bb.op(InstrKind::Div, ct, v[0], v[1]);
        if (trunc) return bb.op(InstrKind::Trunc, ct, q);
        return bb.op(InstrKind::FloorDiv, ct, v[0], v[1]);
      });
}

// Where(cond, a, b) with the result type of a and b.
TensorValue where_value(LoweringContext& lc, Operand cond, Operand a, Operand b,
                        std::optional<DType> force = std::nullopt) {
  DType common = force ? *force : result_type({&a, &b});
  DType ct = dtype_compute(common);
  bool round_a = rounds_to_common(a, common, ct), round_b = rounds_to_common(b, common, ct);
  return make_pointwise(
      lc, {cond, a, b}, ct, common,
      [ct, common, round_a, round_b](BodyBuilder& bb, const std::vector<InstrId>& v) {
        InstrId c = bb.cast(v[0], DType::Bool);
        return bb.op(InstrKind::Where, ct, c, in_common(bb, v[1], round_a, common, ct),
                     in_common(bb, v[2], round_b, common, ct));
      });
}

// Loads tensor operands in their own dtypes (for conditions), scalars as `ct`.
TensorValue mixed_pointwise(LoweringContext& lc, std::vector<Operand> ops,
                            std::vector<DType> load_types, DType out, Fn fn, int cost = 1) {
  // Wrap each operand's loader so it converts to its own load type.
  sym::Context& c = lc.ctx();
  auto [sizes, total_cost, reuse_cost, reads, full_reads, read_buffers] = summarize(c, ops, cost);
  DType rc = dtype_compute(out);
  Loader load = [ops = std::move(ops), load_types = std::move(load_types), fn = std::move(fn), rc,
                 &c](BodyBuilder& b, const std::vector<sym::Expr>& index) {
    std::vector<InstrId> x;
    for (size_t k = 0; k < ops.size(); ++k) {
      x.push_back(load_operand(b, c, ops[k], load_types[k], index));
    }
    return b.cast(fn(b, x), rc);
  };
  return with_reads(lc.pointwise(out, std::move(sizes), std::move(load), total_cost, reads),
                    std::move(full_reads), std::move(read_buffers), reuse_cost);
}

std::optional<DType> dtype_kwarg(const Node& n, size_t pos, std::string_view name) {
  const Arg* a = n.arg(pos, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  const DType* d = std::get_if<DType>(&a->v);
  COIL_USER_CHECK(d != nullptr) << n.op() << ": " << name << " is not a dtype";
  return *d;
}

// A copy of `v` converted to `dtype` that never aliases v's storage.
TensorValue converted(LoweringContext& lc, const TensorValue& v, DType dtype) {
  Operand o;
  o.kind = Operand::Tensor;
  o.t = v;
  // Inside a kernel a bf16/f16 value lives in float32. A conversion to the narrow type must
  // still round, as eager's does: `x.to(bf16) == x` is false for most x (fuzz seed 5107).
  // (PyTorch's batch norm decomposition normalized with unrounded statistics and saved rounded
  // ones; leaving this unrounded hid that. coil's own: python/coil/decomp_batch_norm.py.)
  const bool narrows = dtype_compute(dtype) != dtype && v.dtype != dtype;
  TensorValue r = make_pointwise(
      lc, {o}, dtype_compute(v.dtype), dtype,
      [narrows, dtype](BodyBuilder& b, const std::vector<InstrId>& x) {
        return narrows ? b.cast(x[0], dtype) : x[0];
      },
      0);
  r.device = v.device;
  return r;
}

// Row-major linear index of `index` in `sizes`.
sym::Expr linear_index(sym::Context& c, const std::vector<sym::Expr>& sizes,
                       const std::vector<sym::Expr>& index) {
  std::vector<sym::Expr> strides = contiguous_strides(c, sizes);
  sym::Expr e = c.zero();
  for (size_t k = 0; k < sizes.size(); ++k) e = c.add(e, c.mul(index[k], strides[k]));
  return e;
}

// Uniform [0, 1) numbers of `sizes` (float32 compute).
TensorValue uniform(LoweringContext& lc, std::vector<sym::Expr> sizes, DType dtype) {
  sym::Context& c = lc.ctx();
  sym::Expr base = lc.reserve_rng_offsets(numel(c, sizes));
  Loader load = [&lc, &c, sizes, base, dtype](BodyBuilder& b, const std::vector<sym::Expr>& index) {
    InstrId seed = lc.rng_seed(b);
    InstrId r = b.rand(seed, c.add(base, linear_index(c, sizes, index)), false);
    return b.cast(r, dtype_compute(dtype));
  };
  return lc.pointwise(dtype, std::move(sizes), std::move(load), 4, 1);
}

InstrId gelu_body(BodyBuilder& b, InstrId x, bool tanh_approx) {
  DType t = b.dtype(x);
  auto c = [&](double v) { return b.constant(v, t); };
  InstrId half_x = b.op(InstrKind::Mul, t, c(0.5), x);
  InstrId inner;
  if (tanh_approx) {
    InstrId x3 = b.op(InstrKind::Mul, t, b.op(InstrKind::Mul, t, x, x), x);
    InstrId s = b.op(InstrKind::Add, t, x, b.op(InstrKind::Mul, t, c(0.044715), x3));
    inner =
        b.op(InstrKind::Tanh, t, b.op(InstrKind::Mul, t, c(std::sqrt(2.0 / std::numbers::pi)), s));
  } else {
    inner = b.op(InstrKind::Erf, t, b.op(InstrKind::Mul, t, x, c(std::numbers::sqrt2 / 2)));
  }
  return b.op(InstrKind::Mul, t, half_x, b.op(InstrKind::Add, t, c(1.0), inner));
}

InstrId gelu_backward_body(BodyBuilder& b, InstrId g, InstrId x, bool tanh_approx) {
  DType t = b.dtype(x);
  auto c = [&](double v) { return b.constant(v, t); };
  auto mul = [&](InstrId p, InstrId q) { return b.op(InstrKind::Mul, t, p, q); };
  auto add = [&](InstrId p, InstrId q) { return b.op(InstrKind::Add, t, p, q); };
  if (!tanh_approx) {
    InstrId cdf =
        mul(c(0.5), add(c(1.0), b.op(InstrKind::Erf, t, mul(x, c(std::numbers::sqrt2 / 2)))));
    InstrId pdf = mul(b.op(InstrKind::Exp, t, mul(c(-0.5), mul(x, x))),
                      c(1.0 / std::sqrt(2.0 * std::numbers::pi)));
    return mul(g, add(cdf, mul(x, pdf)));
  }
  double beta = std::sqrt(2.0 / std::numbers::pi), kappa = 0.044715;
  InstrId x2 = mul(x, x);
  InstrId inner = mul(c(beta), add(x, mul(c(kappa), mul(x2, x))));
  InstrId th = b.op(InstrKind::Tanh, t, inner);
  InstrId left = mul(c(0.5), x);
  InstrId right = add(c(1.0), th);
  InstrId left_d = mul(c(0.5), right);
  InstrId one_minus = b.op(InstrKind::Sub, t, c(1.0), mul(th, th));
  InstrId inner_d = mul(c(beta), add(c(1.0), mul(c(3.0 * kappa), x2)));
  InstrId right_d = mul(mul(left, one_minus), inner_d);
  return mul(g, add(left_d, right_d));
}

std::string str_arg(const Node& n, size_t i, std::string_view name, std::string def) {
  const Arg* a = n.arg(i, name);
  if (a == nullptr || a->is_none()) return def;
  const std::string* s = std::get_if<std::string>(&a->v);
  COIL_USER_CHECK(s != nullptr) << n.op() << ": " << name << " is not a string";
  return *s;
}

std::vector<TensorValue> one(TensorValue v) { return {std::move(v)}; }

Operand tensor_operand(const TensorValue& v) {
  Operand o;
  o.kind = Operand::Tensor;
  o.t = v;
  return o;
}

}  // namespace

void register_pointwise_lowerings(LoweringRegistry& r) {
  // ---- arithmetic
  for (const char* ov : {".Tensor", ".Scalar"}) {
    r.add(std::string("aten.add") + ov,
          [](LoweringContext& lc, const Node& n) { return one(add_sub(lc, n, false, false)); });
    r.add(std::string("aten.sub") + ov,
          [](LoweringContext& lc, const Node& n) { return one(add_sub(lc, n, true, false)); });
    r.add(std::string("aten.rsub") + ov,
          [](LoweringContext& lc, const Node& n) { return one(add_sub(lc, n, true, true)); });
    for (const char* name : {"aten.div", "aten.true_divide"})
      r.add(std::string(name) + ov, [](LoweringContext& lc, const Node& n) {
        return one(div_value(lc, n, arg_operand(lc, n, 0, "self"), arg_operand(lc, n, 1, "other")));
      });
    r.add(std::string("aten.div") + ov + "_mode", [](LoweringContext& lc, const Node& n) {
      return one(div_value(lc, n, arg_operand(lc, n, 0, "self"), arg_operand(lc, n, 1, "other")));
    });
  }
  auto mul_fn = [](LoweringContext& lc, const Node& n) {
    Operand a = arg_operand(lc, n, 0, "self"), b = arg_operand(lc, n, 1, "other");
    bool is_bool = result_type({&a, &b}) == DType::Bool;
    return one(binary_value(lc, a, b, is_bool ? InstrKind::LogicalAnd : InstrKind::Mul));
  };
  r.add("aten.mul.Tensor", mul_fn);
  r.add("aten.mul.Scalar", mul_fn);
  binary(r, {"aten.maximum.default"}, InstrKind::Maximum);
  binary(r, {"aten.minimum.default"}, InstrKind::Minimum);
  binary(r, {"aten.fmod.Tensor", "aten.fmod.Scalar"}, InstrKind::Fmod);
  binary(r, {"aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor"},
         InstrKind::Remainder);
  binary(r, {"aten.atan2.default"}, InstrKind::Atan2, true);
  binary(r, {"aten.hypot.default"}, InstrKind::Hypot);
  binary(r, {"aten.copysign.Tensor", "aten.copysign.Scalar"}, InstrKind::CopySign, true);
  binary(r, {"aten.floor_divide.default", "aten.floor_divide.Scalar"}, InstrKind::FloorDiv);
  binary(r,
         {"aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar", "aten.bitwise_and.Scalar_Tensor"},
         InstrKind::BitwiseAnd);
  binary(r, {"aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar", "aten.bitwise_or.Scalar_Tensor"},
         InstrKind::BitwiseOr);
  binary(r,
         {"aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar", "aten.bitwise_xor.Scalar_Tensor"},
         InstrKind::BitwiseXor);
  binary(r, {"aten.bitwise_left_shift.Tensor", "aten.__lshift__.Scalar"}, InstrKind::ShiftLeft);
  binary(r, {"aten.bitwise_right_shift.Tensor", "aten.__rshift__.Scalar"}, InstrKind::ShiftRight);

  // ---- pow
  auto pow_fn = [](LoweringContext& lc, const Node& n) {
    Operand a = arg_operand(lc, n, 0, "self"), e = arg_operand(lc, n, 1, "exponent");
    DType common = result_type({&a, &e});
    DType ct = dtype_compute(common);
    if (a.is_tensor() && !e.is_tensor() && e.kind != Operand::Sym) {
      double ev = e.f;
      if (ev == 1.0)
        return one(make_pointwise(
            lc, {a}, ct, common, [](BodyBuilder&, auto& v) { return v[0]; }, 0));
      if (ev == 2.0) {
        return one(make_pointwise(lc, {a}, ct, common, [ct](BodyBuilder& b, auto& v) {
          return b.op(InstrKind::Mul, ct, v[0], v[0]);
        }));
      }
      if (ev == 0.5 && dtype_is_floating(common)) {
        return one(make_pointwise(lc, {a}, ct, common, [ct](BodyBuilder& b, auto& v) {
          return b.op(InstrKind::Sqrt, ct, v[0]);
        }));
      }
      // The other exponents ATen's CPU kernel special-cases (and computes the same way): a
      // libm pow call per element kept GELU-tanh's x**3 from vectorizing (GPT-2's MLP: 0.55
      // ms for 16 K elements).
      if (dtype_is_floating(common) && (ev == 3.0 || ev == -1.0 || ev == -2.0 || ev == -0.5)) {
        return one(make_pointwise(lc, {a}, ct, common, [ct, ev](BodyBuilder& b, auto& v) {
          if (ev == 3.0)
            return b.op(InstrKind::Mul, ct, b.op(InstrKind::Mul, ct, v[0], v[0]), v[0]);
          if (ev == -1.0) return b.op(InstrKind::Reciprocal, ct, v[0]);
          if (ev == -2.0)
            return b.op(InstrKind::Reciprocal, ct, b.op(InstrKind::Mul, ct, v[0], v[0]));
          return b.op(InstrKind::Reciprocal, ct, b.op(InstrKind::Sqrt, ct, v[0]));
        }));
      }
    }
    return one(make_pointwise(lc, {a, e}, ct, common, [ct](BodyBuilder& b, auto& v) {
      return b.op(InstrKind::Pow, ct, v[0], v[1]);
    }));
  };
  r.add("aten.pow.Tensor_Scalar", pow_fn);
  r.add("aten.pow.Tensor_Tensor", pow_fn);
  r.add("aten.pow.Scalar", pow_fn);

  // ---- unary
  unary_same(r, "neg", InstrKind::Neg, false);
  unary_same(r, "abs", InstrKind::Abs, false);
  unary_same(r, "floor", InstrKind::Floor, true);
  unary_same(r, "ceil", InstrKind::Ceil, true);
  unary_same(r, "round", InstrKind::Round, true);
  unary_same(r, "trunc", InstrKind::Trunc, true);
  unary_same(r, "sign", InstrKind::Sign, false);
  unary_same(r, "sgn", InstrKind::Sign, false);  // sign for real dtypes (abs's backward)
  unary_same(r, "bitwise_not", InstrKind::BitwiseNot, false);
  for (auto [name, k] : std::initializer_list<std::pair<const char*, InstrKind>>{
           {"exp", InstrKind::Exp},         {"exp2", InstrKind::Exp2},
           {"expm1", InstrKind::Expm1},     {"log", InstrKind::Log},
           {"log2", InstrKind::Log2},       {"log10", InstrKind::Log10},
           {"log1p", InstrKind::Log1p},     {"sqrt", InstrKind::Sqrt},
           {"rsqrt", InstrKind::Rsqrt},     {"reciprocal", InstrKind::Reciprocal},
           {"sin", InstrKind::Sin},         {"cos", InstrKind::Cos},
           {"tan", InstrKind::Tan},         {"asin", InstrKind::Asin},
           {"acos", InstrKind::Acos},       {"atan", InstrKind::Atan},
           {"sinh", InstrKind::Sinh},       {"cosh", InstrKind::Cosh},
           {"tanh", InstrKind::Tanh},       {"asinh", InstrKind::Asinh},
           {"acosh", InstrKind::Acosh},     {"atanh", InstrKind::Atanh},
           {"sigmoid", InstrKind::Sigmoid}, {"erf", InstrKind::Erf},
           {"erfc", InstrKind::Erfc},       {"erfinv", InstrKind::Erfinv},
           {"lgamma", InstrKind::Lgamma},   {"digamma", InstrKind::Digamma}}) {
    unary_float(r, name, k);
  }
  // polygamma(n, x): n = 0 is digamma, n = 1 trigamma (digamma's backward), composed as
  // PyTorch's kernels compute it: reflection below 1/2, six steps of the recurrence, then the
  // asymptotic series. Higher orders need the Hurwitz zeta function: not lowered.
  r.add("aten.polygamma.default", [](LoweringContext& lc, const Node& n) {
    const int64_t order = detail::int_arg(n, 0, "n", -1);
    COIL_USER_CHECK(order == 0 || order == 1)
        << "aten.polygamma.default: order " << order << " is not lowered (only 0 and 1)";
    Operand x = arg_operand(lc, n, 1, "self");
    const DType out = int_to_float(x.dtype()), ct = dtype_compute(out);
    return one(make_pointwise(lc, {x}, ct, out, [order, ct](BodyBuilder& b, auto& v) {
      if (order == 0) return b.op(InstrKind::Digamma, ct, v[0]);
      auto c = [&](double k) { return b.constant(k, ct); };
      auto op = [&](InstrKind k, InstrId a, InstrId bb) { return b.op(k, ct, a, bb); };
      const InstrId small = b.op(InstrKind::Lt, DType::Bool, v[0], c(0.5));
      const InstrId pi = c(std::numbers::pi);
      const InstrId sin = b.op(InstrKind::Sin, ct, op(InstrKind::Mul, pi, v[0]));
      const InstrId reflected =
          op(InstrKind::Div, op(InstrKind::Mul, pi, pi), op(InstrKind::Mul, sin, sin));
      InstrId y = b.op(InstrKind::Where, ct, small, op(InstrKind::Sub, c(1), v[0]), v[0]);
      InstrId sum = c(0);
      for (int i = 0; i < 6; ++i) {
        sum = op(InstrKind::Add, sum, op(InstrKind::Div, c(1), op(InstrKind::Mul, y, y)));
        y = op(InstrKind::Add, y, c(1));
      }
      const InstrId iyy = op(InstrKind::Div, c(1), op(InstrKind::Mul, y, y));
      InstrId series = op(InstrKind::Sub, c(1.0 / 30), op(InstrKind::Mul, iyy, c(1.0 / 42)));
      series = op(InstrKind::Sub, c(1.0 / 6), op(InstrKind::Mul, iyy, series));
      series = op(InstrKind::Add,
                  op(InstrKind::Add, c(1), op(InstrKind::Div, c(1), op(InstrKind::Mul, c(2), y))),
                  op(InstrKind::Mul, iyy, series));
      const InstrId result = op(InstrKind::Add, sum, op(InstrKind::Div, series, y));
      return b.op(InstrKind::Where, ct, small, op(InstrKind::Sub, reflected, result), result);
    }));
  });
  for (auto [name, k] : std::initializer_list<std::pair<const char*, InstrKind>>{
           {"isnan", InstrKind::IsNan}, {"isinf", InstrKind::IsInf}}) {
    InstrKind kk = k;
    r.add(std::string("aten.") + name + ".default", [kk](LoweringContext& lc, const Node& n) {
      Operand x = arg_operand(lc, n, 0, "self");
      bool fp = dtype_is_floating(x.dtype());
      return one(make_pointwise(lc, {x}, dtype_compute(x.dtype()), DType::Bool,
                                [kk, fp](BodyBuilder& b, auto& v) {
                                  if (!fp) return b.int_constant(0, DType::Bool);
                                  return b.op(kk, DType::Bool, v[0]);
                                }));
    });
  }

  // ---- comparisons and logic
  compare(r, "eq", InstrKind::Eq);
  compare(r, "ne", InstrKind::Ne);
  compare(r, "lt", InstrKind::Lt);
  compare(r, "le", InstrKind::Le);
  compare(r, "gt", InstrKind::Gt);
  compare(r, "ge", InstrKind::Ge);
  r.add("aten.logical_not.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    return one(make_pointwise(
        lc, {x}, dtype_compute(x.dtype()), DType::Bool,
        [](BodyBuilder& b, auto& v) { return b.op(InstrKind::LogicalNot, DType::Bool, v[0]); }));
  });
  for (auto [name, k] : std::initializer_list<std::pair<const char*, InstrKind>>{
           {"logical_and", InstrKind::LogicalAnd},
           {"logical_or", InstrKind::LogicalOr},
           {"logical_xor", InstrKind::LogicalXor}}) {
    InstrKind kk = k;
    r.add(std::string("aten.") + name + ".default", [kk](LoweringContext& lc, const Node& n) {
      Operand a = arg_operand(lc, n, 0, "self"), b = arg_operand(lc, n, 1, "other");
      return one(mixed_pointwise(
          lc, {a, b}, {dtype_compute(a.dtype()), dtype_compute(b.dtype())}, DType::Bool,
          [kk](BodyBuilder& bb, auto& v) { return bb.op(kk, DType::Bool, v[0], v[1]); }));
    });
  }

  // ---- where / masked_fill / clamp
  auto where_fn = [](LoweringContext& lc, const Node& n) {
    return one(where_value(lc, arg_operand(lc, n, 0, "condition"), arg_operand(lc, n, 1, "self"),
                           arg_operand(lc, n, 2, "other")));
  };
  for (const char* ov : {"self", "ScalarSelf", "ScalarOther", "Scalar"}) {
    r.add(std::string("aten.where.") + ov, where_fn);
  }
  auto masked_fill = [](LoweringContext& lc, const Node& n) {
    Operand self = arg_operand(lc, n, 0, "self");
    return one(where_value(lc, arg_operand(lc, n, 1, "mask"), arg_operand(lc, n, 2, "value"), self,
                           self.dtype()));
  };
  r.add("aten.masked_fill.Scalar", masked_fill);
  r.add("aten.masked_fill.Tensor", masked_fill);

  auto clamp_fn = [](bool has_lo, bool has_hi) {
    return [has_lo, has_hi](LoweringContext& lc, const Node& n) {
      std::vector<Operand> ops = {arg_operand(lc, n, 0, "self")};
      bool lo = false, hi = false;
      if (has_lo && has_arg(n, 1, "min")) {
        ops.push_back(arg_operand(lc, n, 1, "min"));
        lo = true;
      }
      size_t hi_pos = has_lo ? 2 : 1;
      if (has_hi && has_arg(n, hi_pos, "max")) {
        ops.push_back(arg_operand(lc, n, hi_pos, "max"));
        hi = true;
      }
      std::vector<const Operand*> ptrs;
      for (const Operand& o : ops) ptrs.push_back(&o);
      DType common = result_type(ptrs);
      DType ct = dtype_compute(common);
      std::vector<bool> round;  // per operand: rounded to the common dtype (rounds_to_common)
      for (const Operand& o : ops) round.push_back(rounds_to_common(o, common, ct));
      return one(
          make_pointwise(lc, ops, ct, common, [lo, hi, ct, common, round](BodyBuilder& b, auto& v) {
            auto in = [&](size_t k) { return in_common(b, v[k], round[k], common, ct); };
            InstrId x = in(0);
            size_t k = 1;
            if (lo) x = b.op(InstrKind::Maximum, ct, x, in(k++));
            if (hi) x = b.op(InstrKind::Minimum, ct, x, in(k++));
            return x;
          }));
    };
  };
  r.add("aten.clamp.default", clamp_fn(true, true));
  r.add("aten.clamp.Tensor", clamp_fn(true, true));
  r.add("aten.clamp_min.default", clamp_fn(true, false));
  r.add("aten.clamp_min.Tensor", clamp_fn(true, false));
  r.add("aten.clamp_max.default", clamp_fn(false, true));
  r.add("aten.clamp_max.Tensor", clamp_fn(false, true));

  // ---- activations and their backwards
  r.add("aten.relu.default", [](LoweringContext& lc, const Node& n) {
    if (auto fused = detail::fuse_matmul_epilogue(lc, n, loop::kEpilogueRelu, false))
      return one(*fused);
    Operand x = arg_operand(lc, n, 0, "self");
    DType ct = dtype_compute(x.dtype());
    return one(make_pointwise(lc, {x}, ct, x.dtype(), [ct](BodyBuilder& b, auto& v) {
      return b.op(InstrKind::Maximum, ct, v[0], b.constant(0, ct));
    }));
  });
  r.add("aten.silu.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    DType ct = dtype_compute(x.dtype());
    return one(make_pointwise(lc, {x}, ct, x.dtype(), [ct](BodyBuilder& b, auto& v) {
      return b.op(InstrKind::Mul, ct, v[0], b.op(InstrKind::Sigmoid, ct, v[0]));
    }));
  });
  r.add("aten.gelu.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    std::string approx = str_arg(n, 1, "approximate", "none");
    COIL_USER_CHECK(approx == "none" || approx == "tanh") << "gelu: approximate=" << approx;
    bool t = approx == "tanh";
    if (auto fused = detail::fuse_matmul_epilogue(lc, n, loop::kEpilogueGelu, !t))
      return one(*fused);
    return one(make_pointwise(
        lc, {x}, dtype_compute(x.dtype()), x.dtype(),
        [t](BodyBuilder& b, auto& v) { return gelu_body(b, v[0], t); }, 8));
  });
  r.add("aten.gelu_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), x = arg_operand(lc, n, 1, "self");
    std::string approx = str_arg(n, 2, "approximate", "none");
    COIL_USER_CHECK(approx == "none" || approx == "tanh") << "gelu: approximate=" << approx;
    bool t = approx == "tanh";
    DType common = result_type({&g, &x});
    return one(make_pointwise(
        lc, {g, x}, dtype_compute(common), common,
        [t](BodyBuilder& b, auto& v) { return gelu_backward_body(b, v[0], v[1], t); }, 16));
  });
  r.add("aten.sigmoid_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), y = arg_operand(lc, n, 1, "output");
    DType common = result_type({&g, &y});
    DType ct = dtype_compute(common);
    return one(make_pointwise(
        lc, {g, y}, ct, common,
        [ct](BodyBuilder& b, auto& v) {
          InstrId one_minus = b.op(InstrKind::Sub, ct, b.constant(1, ct), v[1]);
          return b.op(InstrKind::Mul, ct, v[0], b.op(InstrKind::Mul, ct, one_minus, v[1]));
        },
        3));
  });
  r.add("aten.tanh_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), y = arg_operand(lc, n, 1, "output");
    DType common = result_type({&g, &y});
    DType ct = dtype_compute(common);
    return one(make_pointwise(
        lc, {g, y}, ct, common,
        [ct](BodyBuilder& b, auto& v) {
          InstrId y2 = b.op(InstrKind::Mul, ct, v[1], v[1]);
          return b.op(InstrKind::Mul, ct, v[0], b.op(InstrKind::Sub, ct, b.constant(1, ct), y2));
        },
        3));
  });
  r.add("aten.threshold_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), x = arg_operand(lc, n, 1, "self");
    Operand th = arg_operand(lc, n, 2, "threshold");
    DType common = result_type({&g, &x});
    DType ct = dtype_compute(common);
    DType xt = dtype_compute(x.dtype());
    return one(mixed_pointwise(lc, {g, x, th}, {ct, xt, xt}, common, [ct](BodyBuilder& b, auto& v) {
      InstrId c = b.op(InstrKind::Le, DType::Bool, v[1], v[2]);
      return b.op(InstrKind::Where, ct, c, b.constant(0, ct), v[0]);
    }));
  });
  r.add("aten.threshold.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self"), th = arg_operand(lc, n, 1, "threshold"),
            val = arg_operand(lc, n, 2, "value");
    DType ct = dtype_compute(x.dtype());
    return one(make_pointwise(lc, {x, th, val}, ct, x.dtype(), [ct](BodyBuilder& b, auto& v) {
      InstrId c = b.op(InstrKind::Le, DType::Bool, v[0], v[1]);
      return b.op(InstrKind::Where, ct, c, v[2], v[0]);
    }));
  });
  r.add("aten.leaky_relu.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    double slope = scalar_arg(n, 1, "negative_slope", 0.01);
    DType ct = dtype_compute(x.dtype());
    return one(make_pointwise(
        lc, {x}, ct, x.dtype(),
        [ct, slope](BodyBuilder& b, auto& v) {
          InstrId pos = b.op(InstrKind::Gt, DType::Bool, v[0], b.constant(0, ct));
          return b.op(InstrKind::Where, ct, pos, v[0],
                      b.op(InstrKind::Mul, ct, v[0], b.constant(slope, ct)));
        },
        3));
  });
  r.add("aten.leaky_relu_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), x = arg_operand(lc, n, 1, "self");
    double slope = scalar_arg(n, 2, "negative_slope", 0.01);
    DType common = result_type({&g, &x});
    DType ct = dtype_compute(common);
    return one(make_pointwise(
        lc, {g, x}, ct, common,
        [ct, slope](BodyBuilder& b, auto& v) {
          InstrId pos = b.op(InstrKind::Gt, DType::Bool, v[1], b.constant(0, ct));
          return b.op(InstrKind::Where, ct, pos, v[0],
                      b.op(InstrKind::Mul, ct, v[0], b.constant(slope, ct)));
        },
        3));
  });
  r.add("aten.hardtanh.default", [](LoweringContext& lc, const Node& n) {
    Operand x = arg_operand(lc, n, 0, "self");
    double lo = scalar_arg(n, 1, "min_val", -1.0), hi = scalar_arg(n, 2, "max_val", 1.0);
    DType ct = dtype_compute(x.dtype());
    return one(make_pointwise(
        lc, {x}, ct, x.dtype(),
        [ct, lo, hi](BodyBuilder& b, auto& v) {
          InstrId y = b.op(InstrKind::Maximum, ct, v[0], b.constant(lo, ct));
          return b.op(InstrKind::Minimum, ct, y, b.constant(hi, ct));
        },
        2));
  });
  r.add("aten.hardtanh_backward.default", [](LoweringContext& lc, const Node& n) {
    Operand g = arg_operand(lc, n, 0, "grad_output"), x = arg_operand(lc, n, 1, "self");
    double lo = scalar_arg(n, 2, "min_val", -1.0), hi = scalar_arg(n, 3, "max_val", 1.0);
    DType common = result_type({&g, &x});
    DType ct = dtype_compute(common);
    return one(make_pointwise(
        lc, {g, x}, ct, common,
        [ct, lo, hi](BodyBuilder& b, auto& v) {
          InstrId out = b.op(InstrKind::LogicalOr, DType::Bool,
                             b.op(InstrKind::Le, DType::Bool, v[1], b.constant(lo, ct)),
                             b.op(InstrKind::Ge, DType::Bool, v[1], b.constant(hi, ct)));
          return b.op(InstrKind::Where, ct, out, b.constant(0, ct), v[0]);
        },
        4));
  });

  // ---- dtype conversions and copies
  r.add("prims.convert_element_type.default", [](LoweringContext& lc, const Node& n) {
    auto dt = dtype_kwarg(n, 1, "dtype");
    COIL_USER_CHECK(dt.has_value()) << n.op() << ": missing dtype";
    return one(converted(lc, lc.arg_value(n, 0, "a"), *dt));
  });
  r.add("aten._to_copy.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    const Arg* dev = n.kwarg("device");
    if (dev && !dev->is_none()) {
      const Device* d = std::get_if<Device>(&dev->v);
      COIL_USER_CHECK(d != nullptr && *d == x.device) << "_to_copy: device changes unsupported";
    }
    const Arg* mf = n.kwarg("memory_format");
    (void)mf;  // the realized layout follows the graph's output strides
    auto dt = dtype_kwarg(n, 1000, "dtype");
    if ((!dt || *dt == x.dtype) && detail::copy_reads_its_source(lc, n, x)) return one(x);
    return one(converted(lc, x, dt.value_or(x.dtype)));
  });
  auto copy_of_self = [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    return one(converted(lc, x, x.dtype));
  };
  r.add("aten.clone.default", [copy_of_self](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    if (detail::copy_reads_its_source(lc, n, x)) return one(x);
    return copy_of_self(lc, n);
  });
  r.add("aten.lift_fresh_copy.default", copy_of_self);
  // A copy laid out by the node's output strides (the meta's): a copy like clone's.
  r.add("prims.copy_strided.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "a");
    return one(converted(lc, x, x.dtype));
  });
  r.add("aten.alias.default",
        [](LoweringContext& lc, const Node& n) { return one(lc.arg_value(n, 0, "self")); });
  r.add("aten.copy.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& self = lc.arg_value(n, 0, "self");
    Operand src = tensor_operand(lc.arg_value(n, 1, "src"));
    // Broadcast src into self's shape.
    broadcast_shapes(lc.ctx(), self.sizes, src.t.sizes);
    std::vector<sym::Expr> sizes = self.sizes;
    sym::Context& c = lc.ctx();
    DType out = self.dtype;
    TensorValue s = src.t;
    Loader load = [s, out, &c](BodyBuilder& b, const std::vector<sym::Expr>& index) {
      return b.cast(s.load(b, broadcast_index(c, s.sizes, index)), dtype_compute(out));
    };
    return one(lc.pointwise(out, sizes, std::move(load), s.inline_cost, s.inline_reads));
  });
  auto fill = [](LoweringContext& lc, const Node& n) {
    const TensorValue& self = lc.arg_value(n, 0, "self");
    Operand v = arg_operand(lc, n, 1, "value");
    DType out = self.dtype;
    sym::Context& c = lc.ctx();
    std::vector<sym::Expr> sizes = self.sizes;
    Loader load = [v, out, &c](BodyBuilder& b, const std::vector<sym::Expr>& index) {
      return load_operand(b, c, v, dtype_compute(out), std::vector<sym::Expr>(index.size()));
    };
    if (v.is_tensor()) {
      COIL_USER_CHECK(v.t.sizes.empty()) << "fill.Tensor: value must be 0-dim";
      load = [v, out](BodyBuilder& b, const std::vector<sym::Expr>&) {
        return b.cast(v.t.load(b, {}), dtype_compute(out));
      };
    }
    return one(lc.pointwise(out, sizes, std::move(load), 1, v.is_tensor() ? 1 : 0));
  };
  r.add("aten.fill.Scalar", fill);
  r.add("aten.fill.Tensor", fill);

  // ---- random
  r.add("aten.rand_like.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    DType dt = dtype_kwarg(n, 1000, "dtype").value_or(x.dtype);
    COIL_USER_CHECK(dtype_is_floating(dt)) << "rand_like: non-float dtype";
    return one(uniform(lc, x.sizes, dt));
  });
  r.add("aten.bernoulli.p", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    double p = scalar_arg(n, 1, "p", 0.5);
    const Arg* gen = n.arg(2, "generator");
    COIL_USER_CHECK(gen == nullptr || gen->is_none()) << "bernoulli: explicit generator";
    TensorValue u = uniform(lc, x.sizes, DType::Float32);
    DType out = x.dtype;
    return one(
        make_pointwise(lc, {tensor_operand(u)}, DType::Float32, out, [p](BodyBuilder& b, auto& v) {
          return b.op(InstrKind::Lt, DType::Bool, v[0], b.constant(p, DType::Float32));
        }));
  });
  r.add("aten.bernoulli.default", [](LoweringContext& lc, const Node& n) {
    const TensorValue& x = lc.arg_value(n, 0, "self");
    const Arg* gen = n.arg(1, "generator");
    COIL_USER_CHECK(gen == nullptr || gen->is_none()) << "bernoulli: explicit generator";
    TensorValue u = uniform(lc, x.sizes, DType::Float32);
    DType ct = dtype_compute(x.dtype);
    return one(mixed_pointwise(
        lc, {tensor_operand(u), tensor_operand(x)}, {ct, ct}, x.dtype,
        [](BodyBuilder& b, auto& v) { return b.op(InstrKind::Lt, DType::Bool, v[0], v[1]); }));
  });
}

}  // namespace coil::lower
