// Meta functions of the creation ops: factories (full, zeros, arange, iota, ...), the *_like and
// new_* ops, and ops that fill or copy into a fresh tensor shaped like their input. Defaults
// follow PyTorch: dtype= absent means the default dtype (f32), except where the op infers it
// (full from its fill value, arange from its bounds, *_like/new_* from the input); device=
// absent means the CPU for factories and the input's device otherwise.
#include <cmath>

#include "coil/ops/meta_util.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

constexpr size_t kKwOnly = 99;  // keyword-only arguments are looked up by name only

TensorMeta factory(sym::Context& ctx, const OpCall& c, DType dflt_dtype,
                   std::vector<sym::Expr> sizes, Device dflt_device = Device::CPU) {
  DType dtype = opt_dtype(c, kKwOnly, "dtype").value_or(dflt_dtype);
  Device device = opt_device(c, kKwOnly, "device").value_or(dflt_device);
  bool channels_last = memory_format_arg(c, kKwOnly, "memory_format", MemoryFormat::Contiguous) ==
                       MemoryFormat::ChannelsLast;
  return make_like_format(ctx, dtype, device, std::move(sizes), channels_last);
}

// zeros/ones/empty.memory_format(size, *, dtype=None, layout, device, pin_memory[,
// memory_format]): the default dtype.
std::vector<TensorMeta> sized_factory_meta(sym::Context& ctx, const OpCall& c) {
  return {factory(ctx, c, DType::Float32, size_list_arg(ctx, c, 0, "size"))};
}

// aten.full.default(size, fill_value, *, dtype=None, ...): the dtype comes from the value
// (full((2,), 2) is i64, full((2,), True) is bool, full((2,), 2.5) is f32).
std::vector<TensorMeta> full_meta(sym::Context& ctx, const OpCall& c) {
  const Arg* v = c.arg(1, "fill_value");
  COIL_USER_CHECK(v != nullptr && !v->is_value()) << c.op << ": needs a number fill_value";
  return {factory(ctx, c, scalar_default_dtype(*v), size_list_arg(ctx, c, 0, "size"))};
}

// aten.scalar_tensor.default(s, *, dtype=None, ...): the default dtype whatever s is
// (torch.scalar_tensor(1) is f32).
std::vector<TensorMeta> scalar_tensor_meta(sym::Context& ctx, const OpCall& c) {
  return {factory(ctx, c, DType::Float32, {})};
}

// aten.empty_strided.default(size, stride, *, dtype=None, ...): exactly the given strides.
std::vector<TensorMeta> empty_strided_meta(sym::Context& ctx, const OpCall& c) {
  TensorMeta m = factory(ctx, c, DType::Float32, size_list_arg(ctx, c, 0, "size"));
  std::vector<sym::Expr> strides = size_list_arg(ctx, c, 1, "stride");
  COIL_USER_CHECK(strides.size() == m.sizes.size()) << c.op << ": size and stride differ in length";
  m.strides = std::move(strides);
  return {std::move(m)};
}

// aten.empty_permuted.default(size, physical_layout, *, dtype=None, ...): row-major in the
// order physical_layout names the dims (layout [0, 2, 3, 1] of a 4-d size is channels-last).
std::vector<TensorMeta> empty_permuted_meta(sym::Context& ctx, const OpCall& c) {
  TensorMeta m = factory(ctx, c, DType::Float32, size_list_arg(ctx, c, 0, "size"));
  const std::vector<int64_t> layout =
      opt_int_list(c, 1, "physical_layout").value_or(std::vector<int64_t>{});
  const size_t rank = m.sizes.size();
  std::vector<bool> seen(rank, false);
  COIL_USER_CHECK(layout.size() == rank)
      << c.op << ": physical_layout has " << layout.size() << " dims for a size of " << rank;
  for (int64_t d : layout) {
    COIL_USER_CHECK(d >= 0 && d < static_cast<int64_t>(rank) && !seen[d])
        << c.op << ": physical_layout is not a permutation";
    seen[d] = true;
  }
  sym::Expr stride = ctx.one();
  for (size_t k = rank; k-- > 0;) {
    const size_t d = static_cast<size_t>(layout[k]);
    m.strides[d] = stride;
    stride = ctx.mul(stride, ctx.max(m.sizes[d], ctx.one()));
  }
  return {std::move(m)};
}

// new_empty/new_zeros/new_ones(self, size, *, dtype=None, ...): self's dtype and device, a
// row-major result.
std::vector<TensorMeta> new_factory_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  return {factory(ctx, c, self.dtype, size_list_arg(ctx, c, 1, "size"), self.device)};
}

// *_like(self, [fill_value,] *, dtype=None, layout, device, pin_memory, memory_format=None):
// empty_like's layout (memory_format defaults to preserve_format).
std::vector<TensorMeta> like_factory_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  DType dtype = opt_dtype(c, kKwOnly, "dtype").value_or(self.dtype);
  Device device = opt_device(c, kKwOnly, "device").value_or(self.device);
  return {like_meta(ctx, self, dtype, device,
                    memory_format_arg(c, kKwOnly, "memory_format", MemoryFormat::Preserve))};
}

// fill.Scalar/fill.Tensor(self, value): empty_like(self) (preserve_format) filled, so self's
// dtype and layout (a 0-d tensor value is cast like a number).
std::vector<TensorMeta> fill_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const Arg* v = c.arg(1, "value");
  COIL_USER_CHECK(v != nullptr) << c.op << ": needs a value";
  if (v->is_value()) {
    COIL_USER_CHECK(v->value()->meta().rank() == 0)
        << c.op << ": value must be a 0-dimensional tensor";
  }
  return {like_meta(ctx, self, self.dtype, self.device)};
}

// lift_fresh_copy(self), bernoulli(self[, p]): FakeTensor gives a row-major result even for
// a transposed input (both go through contiguous allocations in their decompositions).
std::vector<TensorMeta> contiguous_copy_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  return {make_contiguous(ctx, self.dtype, self.device, self.sizes)};
}

// aten.copy.default(self, src, non_blocking=False): ATen's functional copy writes src into
// clone_preserve_strides(self): self's sizes, strides and storage offset unless self overlaps
// itself (a stride-0 dim of size > 1), which is cloned like empty_like. src must broadcast
// to self.
std::vector<TensorMeta> copy_meta(sym::Context& ctx, const OpCall& c) {
  const TensorMeta& self = tensor_arg(c, 0, "self");
  const TensorMeta& src = tensor_arg(c, 1, "src");
  auto shape = broadcast_shapes(ctx, {self.sizes, src.sizes});
  COIL_USER_CHECK(shape.size() == self.sizes.size())
      << c.op << ": src of rank " << src.rank() << " does not broadcast to rank " << self.rank();
  bool overlaps = self.strides.size() != self.sizes.size();
  for (size_t d = 0; !overlaps && d < self.strides.size(); ++d) {
    overlaps = ctx.as_const(self.strides[d]) == 0 && ctx.as_const(self.sizes[d]) != 1;
  }
  if (overlaps) return {like_meta(ctx, self, self.dtype, self.device)};
  TensorMeta out = self;
  return {std::move(out)};
}

// A scalar bound of arange: an int (or SymInt) or a float.
struct Bound {
  sym::Expr sym = nullptr;  // ints
  double f = 0;
  bool is_float = false;
};

Bound bound_arg(sym::Context& ctx, const OpCall& c, const Arg* a, int64_t dflt) {
  Bound b;
  if (a == nullptr || a->is_none()) {
    b.sym = ctx.constant(dflt);
  } else if (a->is_double()) {
    b.is_float = true;
    b.f = a->as_double();
  } else {
    COIL_USER_CHECK(!a->is_value()) << c.op << ": bounds must be numbers";
    b.sym = size_arg(ctx, *a);
  }
  return b;
}

// aten.arange.{default(end), start(start, end), start_step(start, end, step=1)}, *, dtype=None,
// layout, device, pin_memory. The dtype is i64 unless a bound is a float (then the default
// dtype). The length is ATen's: an int64 result truncates the bounds to int64 first and takes
// ceil((end - start) / step) exactly; every other dtype takes it in double
// (arange(2.1, -2.9, -1.0) has 4 elements as int64, 5 as int32 or float).
std::vector<TensorMeta> arange_meta(sym::Context& ctx, const OpCall& c, size_t start_pos,
                                    size_t end_pos, size_t step_pos) {
  Bound start = start_pos < 3 ? bound_arg(ctx, c, c.arg(start_pos, "start"), 0)
                              : bound_arg(ctx, c, nullptr, 0);
  Bound end = bound_arg(ctx, c, c.arg(end_pos, "end"), 0);
  COIL_USER_CHECK(c.arg(end_pos, "end") != nullptr) << c.op << ": needs an end";
  Bound step =
      step_pos < 3 ? bound_arg(ctx, c, c.arg(step_pos, "step"), 1) : bound_arg(ctx, c, nullptr, 1);
  bool any_float = start.is_float || end.is_float || step.is_float;
  DType dtype = opt_dtype(c, kKwOnly, "dtype").value_or(any_float ? DType::Float32 : DType::Int64);
  sym::Expr len;
  if (dtype == DType::Int64) {
    auto trunc = [&](Bound& b) {
      if (b.is_float) b.sym = ctx.constant(static_cast<int64_t>(b.f));
    };
    trunc(start);
    trunc(end);
    trunc(step);
    auto st = ctx.as_const(step.sym);
    COIL_USER_CHECK(st.has_value()) << c.op << ": a symbolic step is not supported";
    COIL_USER_CHECK(*st != 0) << c.op << ": step must be nonzero";
    // ceil((end - start) / step) for a result >= 0: floor((end - start + step - sgn) / step).
    sym::Expr span = ctx.sub(end.sym, start.sym);
    if (*st < 0) span = ctx.neg(span);
    int64_t mag = *st < 0 ? -*st : *st;
    len = ctx.floordiv(ctx.add(span, ctx.constant(mag - 1)), ctx.constant(mag));
  } else {
    auto value = [&](const Bound& b) -> std::optional<double> {
      if (b.is_float) return b.f;
      auto v = ctx.as_const(b.sym);
      if (!v) return std::nullopt;
      return static_cast<double>(*v);
    };
    auto s = value(start), e = value(end), d = value(step);
    if (s && e && d) {
      COIL_USER_CHECK(*d != 0) << c.op << ": step must be nonzero";
      len = ctx.constant(static_cast<int64_t>(std::ceil((*e - *s) / *d)));
    } else {
      // Symbolic integer bounds with an integer step: the same length as the int64 case.
      COIL_USER_CHECK(!start.is_float && !end.is_float && !step.is_float && d && *d != 0)
          << c.op << ": symbolic bounds with a float or symbolic step are not supported";
      int64_t st = static_cast<int64_t>(*d);
      sym::Expr span = ctx.sub(end.sym, start.sym);
      if (st < 0) span = ctx.neg(span);
      int64_t mag = st < 0 ? -st : st;
      len = ctx.floordiv(ctx.add(span, ctx.constant(mag - 1)), ctx.constant(mag));
    }
  }
  if (auto n = ctx.as_const(len)) {
    COIL_USER_CHECK(*n >= 0) << c.op << ": the bounds are inconsistent with the step's sign";
  }
  Device device = opt_device(c, kKwOnly, "device").value_or(Device::CPU);
  return {make_contiguous(ctx, dtype, device, {len})};
}

std::vector<TensorMeta> arange_end_meta(sym::Context& ctx, const OpCall& c) {
  return arange_meta(ctx, c, 99, 0, 99);
}
std::vector<TensorMeta> arange_start_meta(sym::Context& ctx, const OpCall& c) {
  return arange_meta(ctx, c, 0, 1, 99);
}
std::vector<TensorMeta> arange_start_step_meta(sym::Context& ctx, const OpCall& c) {
  return arange_meta(ctx, c, 0, 1, 2);
}

// prims.iota.default(length, *, start, step, dtype, device, requires_grad): [length] of the
// required dtype.
std::vector<TensorMeta> iota_meta(sym::Context& ctx, const OpCall& c) {
  const Arg* n = c.arg(0, "length");
  COIL_USER_CHECK(n != nullptr) << c.op << ": needs a length";
  auto dtype = opt_dtype(c, kKwOnly, "dtype");
  COIL_USER_CHECK(dtype.has_value()) << c.op << ": needs a dtype";
  Device device = opt_device(c, kKwOnly, "device").value_or(Device::CPU);
  return {make_contiguous(ctx, *dtype, device, {size_arg(ctx, *n)})};
}

}  // namespace

void register_creation_ops(OpRegistry& r) {
  auto add = [&](std::string name, MetaFn fn) { r.add(std::move(name), OpFamily::Other, fn); };
  add("aten.arange.default", arange_end_meta);
  add("aten.arange.start", arange_start_meta);
  add("aten.arange.start_step", arange_start_step_meta);
  add("prims.iota.default", iota_meta);
  add("aten.empty.memory_format", sized_factory_meta);
  add("aten.zeros.default", sized_factory_meta);
  add("aten.ones.default", sized_factory_meta);
  add("aten.full.default", full_meta);
  add("aten.scalar_tensor.default", scalar_tensor_meta);
  add("aten.empty_strided.default", empty_strided_meta);
  add("aten.empty_permuted.default", empty_permuted_meta);
  add("aten.new_empty.default", new_factory_meta);
  add("aten.new_zeros.default", new_factory_meta);
  add("aten.new_ones.default", new_factory_meta);
  add("aten.empty_like.default", like_factory_meta);
  add("aten.zeros_like.default", like_factory_meta);
  add("aten.ones_like.default", like_factory_meta);
  add("aten.full_like.default", like_factory_meta);
  add("aten.rand_like.default", like_factory_meta);
  add("aten.fill.Scalar", fill_meta);
  add("aten.fill.Tensor", fill_meta);
  add("aten.lift_fresh_copy.default", contiguous_copy_meta);
  add("aten.bernoulli.default", contiguous_copy_meta);
  add("aten.bernoulli.p", contiguous_copy_meta);
  add("aten.copy.default", copy_meta);
}

}  // namespace coil::ops
