// Meta functions of the pointwise ops: broadcasting, type promotion (incl. Python scalars) and
// TensorIterator's output layout.
#include <array>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

enum class DTypeRule {
  Promote,       // at::result_type of the operands
  PromoteFloat,  // result_type, integral results become f32 (true division, exp, ...)
  Bool,          // comparisons and logical ops
  Where,         // result_type of operands 1 and 2 (operand 0 is the condition)
};

// Operands: positional args [0, N) (or their usual keyword names); tensors and Python numbers.
constexpr std::array<std::string_view, 3> kOperandNames = {"self", "other", "third"};

std::vector<TensorMeta> pointwise_impl(sym::Context& ctx, const OpCall& c, DTypeRule rule, size_t n,
                                       const std::array<std::string_view, 3>& names) {
  std::vector<std::vector<sym::Expr>> shapes;
  std::vector<const TensorMeta*> tensors;
  std::vector<PromoOperand> promo;
  std::optional<Device> device;
  for (size_t i = 0; i < n; ++i) {
    const Arg* a = c.arg(i, names[i]);
    COIL_USER_CHECK(a != nullptr) << c.op << ": missing argument " << names[i];
    if (a->is_value()) {
      const TensorMeta& m = a->value()->meta();
      shapes.push_back(m.sizes);
      tensors.push_back(&m);
      // A CUDA tensor wins over CPU zero-dim tensors (which PyTorch lets mix in).
      if (!device || (m.rank() > 0 && m.device != Device::CPU)) device = m.device;
    }
    if (rule == DTypeRule::Where && i == 0) continue;
    auto p = promo_operand(*a);
    COIL_USER_CHECK(p.has_value())
        << c.op << ": argument " << names[i] << " must be a tensor or a number";
    if (a->is_value() && is_scalar_slot(c.id, i)) p->kind = PromoOperand::Scalar;
    promo.push_back(*p);
  }
  COIL_USER_CHECK(!tensors.empty()) << c.op << ": needs a tensor argument";
  DType dtype = result_type(promo);
  switch (rule) {
    case DTypeRule::Promote:
    case DTypeRule::Where:
      break;
    case DTypeRule::PromoteFloat:
      if (!dtype_is_floating(dtype)) dtype = DType::Float32;
      break;
    case DTypeRule::Bool:
      dtype = DType::Bool;
      break;
  }
  TensorMeta out;
  out.dtype = dtype;
  out.device = *device;
  out.sizes = broadcast_shapes(ctx, shapes);
  out.strides = pointwise_strides(ctx, out.sizes, tensors);
  return {std::move(out)};
}

template <DTypeRule R, size_t N>
std::vector<TensorMeta> pointwise(sym::Context& ctx, const OpCall& c) {
  return pointwise_impl(ctx, c, R, N, kOperandNames);
}

std::vector<TensorMeta> where_meta(sym::Context& ctx, const OpCall& c) {
  return pointwise_impl(ctx, c, DTypeRule::Where, 3, {"condition", "self", "other"});
}

// aten.pow.Scalar(Scalar self, Tensor exponent).
std::vector<TensorMeta> pow_scalar_meta(sym::Context& ctx, const OpCall& c) {
  return pointwise_impl(ctx, c, DTypeRule::Promote, 2, {"self", "exponent", ""});
}

// div with rounding_mode: None is true division; "trunc"/"floor" keep integer types.
std::vector<TensorMeta> div_mode_meta(sym::Context& ctx, const OpCall& c) {
  const Arg* mode = c.arg(2, "rounding_mode");
  bool true_div = mode == nullptr || mode->is_none();
  if (!true_div) {
    const auto* s = std::get_if<std::string>(&mode->v);
    COIL_USER_CHECK(s && (*s == "trunc" || *s == "floor"))
        << c.op << ": rounding_mode must be None, 'trunc' or 'floor'";
  }
  return pointwise_impl(ctx, c, true_div ? DTypeRule::PromoteFloat : DTypeRule::Promote, 2,
                        kOperandNames);
}

// clamp(self, min=None, max=None): min/max take part in type promotion.
std::vector<TensorMeta> clamp_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  std::vector<PromoOperand> promo = {*promo_operand(*c.arg(0, "self"))};
  std::vector<std::vector<sym::Expr>> shapes = {self.sizes};
  std::vector<const TensorMeta*> tensors = {&self};
  const Arg* lo = c.arg(1, "min");
  const Arg* hi = c.arg(2, "max");
  COIL_USER_CHECK((lo && !lo->is_none()) || (hi && !hi->is_none()))
      << c.op << ": at least one of min and max must be given";
  for (const Arg* a : {lo, hi}) {
    if (a == nullptr || a->is_none()) continue;
    auto p = promo_operand(*a);
    COIL_USER_CHECK(p.has_value()) << c.op << ": min/max must be numbers or tensors";
    promo.push_back(*p);
    if (a->is_value()) {
      shapes.push_back(a->value()->meta().sizes);
      tensors.push_back(&a->value()->meta());
    }
  }
  TensorMeta out;
  out.dtype = result_type(promo);
  out.device = self.device;
  out.sizes = broadcast_shapes(ctx, shapes);
  out.strides = pointwise_strides(ctx, out.sizes, tensors);
  return {std::move(out)};
}

// The same layout as the input (memory_format=preserve_format), another dtype/device.
TensorMeta like(sym::Context& ctx, const TensorMeta& in, DType dtype, Device device) {
  TensorMeta out;
  out.dtype = dtype;
  out.device = device;
  out.sizes = in.sizes;
  out.strides = pointwise_strides(ctx, in.sizes, {&in});
  return out;
}

std::vector<TensorMeta> convert_element_type_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "a");
  auto dtype = opt_dtype(c, 1, "dtype");
  COIL_USER_CHECK(dtype.has_value()) << c.op << ": needs a dtype";
  return {like(ctx, in, *dtype, in.device)};
}

// aten._to_copy.default(self, *, dtype=None, layout=None, device=None, pin_memory=None,
//                       non_blocking=False, memory_format=None)
std::vector<TensorMeta> to_copy_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  DType dtype = opt_dtype(c, 99, "dtype").value_or(in.dtype);
  Device device = opt_device(c, 99, "device").value_or(in.device);
  return {like(ctx, in, dtype, device)};
}

// clone.default(self, *, memory_format=None)
std::vector<TensorMeta> clone_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "self");
  return {like(ctx, in, in.dtype, in.device)};
}

// prims.copy_strided.default(a, stride): a copy of `a` with exactly the given strides (PyTorch's
// decompositions end with it to give a result eager's layout, lerp's among them).
std::vector<TensorMeta> copy_strided_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& in = tensor_arg(c, 0, "a");
  TensorMeta m = like(ctx, in, in.dtype, in.device);
  std::vector<sym::Expr> strides = size_list_arg(ctx, c, 1, "stride");
  COIL_USER_CHECK(strides.size() == m.sizes.size()) << c.op << ": a stride per dim is needed";
  m.strides = std::move(strides);
  return {std::move(m)};
}

// aten.threshold.default(self, threshold, value): TensorIterator over self alone (the scalars
// are not operands), so the result keeps self's dtype: threshold(i32, 1.5, 2.5) is i32.
std::vector<TensorMeta> threshold_meta(sym::Context& ctx, const OpCall& c) {
  return pointwise_impl(ctx, c, DTypeRule::Promote, 1, kOperandNames);
}

// aten.masked_fill.Scalar/Tensor(self, mask, value): self's dtype (the value is cast to it),
// broadcast with the mask, and a row-major result whatever the inputs' layouts (ATen's
// masked_fill clones the expanded self with MemoryFormat::Contiguous; FakeTensor agrees).
std::vector<TensorMeta> masked_fill_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const TensorMeta& mask = tensor_arg(c, 1, "mask");
  COIL_USER_CHECK(mask.dtype == DType::Bool) << c.op << ": mask must be a bool tensor";
  const Arg* v = c.arg(2, "value");
  COIL_USER_CHECK(v != nullptr) << c.op << ": needs a value";
  if (v->is_value()) {
    COIL_USER_CHECK(v->value()->meta().rank() == 0)
        << c.op << ": value must be a 0-dimensional tensor";
  }
  return {make_contiguous(ctx, self.dtype, self.device,
                          broadcast_shapes(ctx, {self.sizes, mask.sizes}))};
}

// aten._softmax.default(self, dim, half_to_float): a row-major result (softmax's structured
// meta allocates it without strides); half_to_float gives f32 for f16/bf16 inputs.
std::vector<TensorMeta> softmax_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  auto dim = opt_int(c, 1, "dim");
  COIL_USER_CHECK(dim.has_value()) << c.op << ": needs a dim";
  wrap_dim(*dim, self.rank());
  bool half_to_float = bool_arg(c, 2, "half_to_float", false);
  DType dtype = self.dtype;
  if (half_to_float) {
    COIL_USER_CHECK(dtype == DType::Float16 || dtype == DType::BFloat16)
        << c.op << ": half_to_float needs a f16/bf16 input";
    dtype = DType::Float32;
  }
  return {make_contiguous(ctx, dtype, self.device, self.sizes)};
}

constexpr auto kPromote1 = pointwise<DTypeRule::Promote, 1>;
constexpr auto kPromote2 = pointwise<DTypeRule::Promote, 2>;
constexpr auto kFloat1 = pointwise<DTypeRule::PromoteFloat, 1>;
constexpr auto kFloat2 = pointwise<DTypeRule::PromoteFloat, 2>;
constexpr auto kBool1 = pointwise<DTypeRule::Bool, 1>;
constexpr auto kBool2 = pointwise<DTypeRule::Bool, 2>;

}  // namespace

void register_pointwise_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::Pointwise, fn); };
  // Binary arithmetic (add/sub take alpha=, which does not change the result type).
  for (const char* op : {"add", "sub", "mul", "remainder", "fmod", "bitwise_and", "bitwise_or",
                         "bitwise_xor", "floor_divide"}) {
    add("aten." + std::string(op) + ".Tensor", kPromote2);
    add("aten." + std::string(op) + ".Scalar", kPromote2);
  }
  // (Scalar self, Tensor other): the scalar first (ops::is_scalar_slot).
  for (const char* op : {"remainder", "bitwise_and", "bitwise_or", "bitwise_xor"})
    add("aten." + std::string(op) + ".Scalar_Tensor", kPromote2);
  add("aten.rsub.Tensor", kPromote2);
  add("aten.rsub.Scalar", kPromote2);
  add("aten.maximum.default", kPromote2);
  add("aten.minimum.default", kPromote2);
  add("aten.pow.Tensor_Tensor", kPromote2);
  add("aten.pow.Tensor_Scalar", kPromote2);
  add("aten.pow.Scalar", pow_scalar_meta);
  add("aten.div.Tensor", kFloat2);
  add("aten.div.Scalar", kFloat2);
  add("aten.true_divide.Tensor", kFloat2);  // an alias of div
  add("aten.true_divide.Scalar", kFloat2);
  add("aten.div.Tensor_mode", div_mode_meta);
  add("aten.div.Scalar_mode", div_mode_meta);
  add("aten.atan2.default", kFloat2);
  // Comparisons and logical ops produce bool.
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    add("aten." + std::string(op) + ".Tensor", kBool2);
    add("aten." + std::string(op) + ".Scalar", kBool2);
  }
  for (const char* op : {"logical_and", "logical_or", "logical_xor"}) {
    add("aten." + std::string(op) + ".default", kBool2);
  }
  for (const char* op : {"logical_not", "isnan", "isinf", "isfinite"}) {
    add("aten." + std::string(op) + ".default", kBool1);
  }
  add("aten.where.self", where_meta);
  add("aten.where.ScalarSelf", where_meta);
  add("aten.where.ScalarOther", where_meta);
  add("aten.where.Scalar", where_meta);
  // Unary ops that compute in floating point (integer inputs give f32).
  for (const char* op :
       {"exp",  "exp2", "expm1",  "log",  "log2",  "log10", "log1p", "tanh",      "sigmoid",
        "erf",  "erfc", "erfinv", "sqrt", "rsqrt", "sin",   "cos",   "tan",       "asin",
        "acos", "atan", "sinh",   "cosh", "asinh", "acosh", "atanh", "reciprocal"}) {
    add("aten." + std::string(op) + ".default", kFloat1);
  }
  // Unary ops that keep the dtype.
  for (const char* op :
       {"neg",   "abs",       "relu",        "gelu", "silu",        "floor",      "ceil",
        "round", "trunc",     "sign",        "sgn",  "bitwise_not", "leaky_relu", "hardtanh",
        "elu",   "hardswish", "hardsigmoid", "mish", "softplus",    "frac"}) {
    add("aten." + std::string(op) + ".default", kPromote1);
  }
  // Backward helpers of the activations (grad, saved tensor[, scalar]).
  add("aten.threshold_backward.default", kPromote2);
  add("aten.tanh_backward.default", kPromote2);
  add("aten.sigmoid_backward.default", kPromote2);
  add("aten.gelu_backward.default", kPromote2);
  add("aten.silu_backward.default", kPromote2);
  add("aten.clamp.default", clamp_meta);
  add("aten.clamp.Tensor", clamp_meta);
  add("aten.clamp_min.default", kPromote2);
  add("aten.clamp_max.default", kPromote2);
  add("prims.convert_element_type.default", convert_element_type_meta);
  add("aten._to_copy.default", to_copy_meta);
  add("aten.clone.default", clone_meta);
  add("prims.copy_strided.default", copy_strided_meta);
  // Shifts, clamp to a tensor bound, floor_divide, hypot: result_type of both operands
  // (__lshift__.Scalar's Python number only counts through its category).
  for (const char* op :
       {"aten.__lshift__.Scalar", "aten.__rshift__.Scalar", "aten.bitwise_left_shift.Tensor",
        "aten.bitwise_right_shift.Tensor", "aten.clamp_max.Tensor", "aten.clamp_min.Tensor",
        "aten.floor_divide.default", "aten.hypot.default"}) {
    add(op, kPromote2);
  }
  // copysign promotes integers to float (copysign(i32, -1) is f32).
  add("aten.copysign.Tensor", kFloat2);
  add("aten.copysign.Scalar", kFloat2);
  add("aten.lgamma.default", kFloat1);
  add("aten.digamma.default", kFloat1);
  add("aten.polygamma.default", [](sym::Context& ctx, const OpCall& c) {  // (int n, Tensor self)
    return pointwise_impl(ctx, c, DTypeRule::PromoteFloat, 2, {"n", "self", ""});
  });
  add("aten.threshold.default", threshold_meta);
  // (grad_output, self, scalars...): the two tensors promote.
  add("aten.hardtanh_backward.default", kPromote2);
  add("aten.leaky_relu_backward.default", kPromote2);
  add("aten.masked_fill.Scalar", masked_fill_meta);
  add("aten.masked_fill.Tensor", masked_fill_meta);
  add("aten._softmax.default", softmax_meta);
}

}  // namespace coil::ops
