#include "coil/ops/meta_util.h"

#include <numeric>

#include "coil/support/error.h"

namespace coil::ops {

const TensorMeta& tensor_arg(const OpCall& c, size_t i, std::string_view name) {
  const Arg* a = c.arg(i, name);
  COIL_USER_CHECK(a != nullptr && a->is_value())
      << c.op << ": argument " << i << " (" << name << ") must be a tensor";
  return a->value()->meta();
}

std::optional<int64_t> opt_int(const OpCall& c, size_t i, std::string_view name) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  return a->as_int();
}

bool bool_arg(const OpCall& c, size_t i, std::string_view name, bool dflt) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return dflt;
  return a->as_int() != 0;
}

std::optional<DType> opt_dtype(const OpCall& c, size_t i, std::string_view name) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  const DType* d = std::get_if<DType>(&a->v);
  COIL_USER_CHECK(d != nullptr) << c.op << ": argument " << name << " must be a dtype";
  return *d;
}

std::optional<std::vector<int64_t>> opt_int_list(const OpCall& c, size_t i, std::string_view name) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  std::vector<int64_t> out;
  if (a->is_list()) {
    for (const Arg& e : a->list()) out.push_back(e.as_int());
  } else {
    out.push_back(a->as_int());
  }
  return out;
}

sym::Expr size_arg(sym::Context& ctx, const Arg& a) {
  if (a.is_sym()) return std::get<sym::Expr>(a.v);
  return ctx.constant(a.as_int());
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  COIL_USER_CHECK(dim >= -r && dim < r)
      << "dimension " << dim << " out of range for a tensor of rank " << rank;
  return dim < 0 ? dim + r : dim;
}

std::vector<sym::Expr> broadcast_shapes(sym::Context& ctx,
                                        const std::vector<std::vector<sym::Expr>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<sym::Expr> out(rank, nullptr);
  for (const auto& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      sym::Expr& o = out[off + i];
      sym::Expr e = s[i];
      if (o == nullptr || o == e) {
        o = e;
        continue;
      }
      auto oc = ctx.as_const(o), ec = ctx.as_const(e);
      if (ec == 1) continue;
      if (oc == 1) {
        o = e;
        continue;
      }
      COIL_USER_CHECK(!(oc && ec))
          << "shapes do not broadcast: size " << *oc << " vs " << *ec << " at dim " << off + i;
      // Symbolic sizes (>= 2 once Dynamo specialized 0 and 1) that are not 1 must be equal;
      // keep the first (the front end guards on their equality).
      if (oc) continue;  // a constant is the more precise of the two
      if (ec) o = e;
    }
  }
  return out;
}

namespace {

enum Category { kBool = 0, kInt = 1, kFloat = 2 };
Category category(DType t) {
  if (t == DType::Bool) return kBool;
  return dtype_is_floating(t) ? kFloat : kInt;
}

// at::native::combine_categories for the non-complex dtypes.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (dtype_is_floating(*higher)) return higher;
  if (*higher == DType::Bool || dtype_is_floating(*lower)) return dtype_promote(*higher, *lower);
  return higher;
}

}  // namespace

DType result_type(const std::vector<PromoOperand>& operands) {
  std::optional<DType> dim, zero, wrapped;
  auto update = [](std::optional<DType>& s, DType t) { s = s ? dtype_promote(*s, t) : t; };
  for (const PromoOperand& o : operands) {
    switch (o.kind) {
      case PromoOperand::Tensor:
        update(dim, o.dtype);
        break;
      case PromoOperand::ZeroDimTensor:
        update(zero, o.dtype);
        break;
      case PromoOperand::Scalar: {
        // Python floats count as the default dtype (f32), ints as i64, bools as bool.
        Category c = category(o.dtype);
        update(wrapped, c == kFloat ? DType::Float32 : c == kInt ? DType::Int64 : DType::Bool);
        break;
      }
    }
  }
  auto r = combine_categories(dim, combine_categories(zero, wrapped));
  COIL_USER_CHECK(r.has_value()) << "type promotion needs at least one operand";
  return *r;
}

namespace {

// The overload-name rules, for ops without a schema.
bool is_scalar_slot_by_name(std::string_view op, size_t i) {
  if (op == "aten.pow.Scalar") return i == 0;  // pow.Scalar(Scalar self, Tensor exponent)
  const std::string_view overload = op.substr(op.rfind('.') + 1);
  if (overload == "Scalar_Tensor") return i == 0;  // remainder / bitwise_*(Scalar self, Tensor)
  if (overload == "Scalar" && op.rfind("aten.where.", 0) == 0) return i == 1 || i == 2;
  if (overload == "Scalar" || overload == "Tensor_Scalar" || overload == "Scalar_mode")
    return i == 1;
  if (overload == "ScalarSelf") return i == 1;
  if (overload == "ScalarOther") return i == 2;
  return false;
}

}  // namespace

bool is_scalar_slot(OpId op, size_t i) {
  const OpDef* def = find_op(op);
  if (def == nullptr || !def->schema.known) return is_scalar_slot_by_name(op.name(), i);
  const auto& args = def->schema.args;
  return i < args.size() && !args[i].kwarg_only && args[i].kind == ArgKind::Number;
}

std::optional<PromoOperand> promo_operand(const Arg& a) {
  if (a.is_value()) {
    const TensorMeta& m = a.value()->meta();
    return PromoOperand{m.dtype,
                        m.rank() == 0 ? PromoOperand::ZeroDimTensor : PromoOperand::Tensor};
  }
  if (a.is_bool()) return PromoOperand{DType::Bool, PromoOperand::Scalar};
  if (a.is_int() || a.is_sym()) return PromoOperand{DType::Int64, PromoOperand::Scalar};
  if (a.is_double()) return PromoOperand{DType::Float64, PromoOperand::Scalar};
  return std::nullopt;
}

std::vector<sym::Expr> pointwise_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                                         const std::vector<const TensorMeta*>& inputs) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  // Operand strides aligned to the output, 0 for broadcast dims (TensorIterator).
  std::vector<std::vector<sym::Expr>> strides;
  bool all_contiguous = true;
  for (const TensorMeta* m : inputs) {
    if (m->rank() != n || m->strides.size() != m->sizes.size()) {
      all_contiguous = false;
    } else if (!is_contiguous(ctx, *m)) {
      all_contiguous = false;
    }
    std::vector<sym::Expr> s(n, ctx.zero());
    int64_t off = n - m->rank();
    for (int64_t i = 0; i < m->rank(); ++i) {
      bool broadcast = ctx.as_const(m->sizes[i]) == 1 && ctx.as_const(sizes[off + i]) != 1;
      if (!broadcast && i < static_cast<int64_t>(m->strides.size())) s[off + i] = m->strides[i];
    }
    strides.push_back(std::move(s));
  }
  if (all_contiguous || inputs.empty() || n <= 1) return contiguous_strides(ctx, sizes);
  // perm[0] is the fastest-varying dim; start from row-major (reversed dims).
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) -> int {
    for (const auto& s : strides) {
      sym::Expr s0 = s[d0], s1 = s[d1];
      if (ctx.as_const(s0) == 0 || ctx.as_const(s1) == 0) continue;
      if (s0 != s1 && ctx.provably_lt(s0, s1)) return -1;
      if (s0 != s1 && ctx.provably_lt(s1, s0)) return 1;
      if (s0 != s1 && !ctx.provably_eq(s0, s1)) continue;  // undecidable: next operand
      if (ctx.provably_lt(sizes[d1], sizes[d0])) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < n; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      int c = should_swap(perm[dim0], perm[dim1]);
      if (c > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::vector<sym::Expr> out(n);
  sym::Expr s = ctx.one();
  for (int64_t d : perm) {
    out[d] = s;
    s = ctx.mul(s, sizes[d]);
  }
  return out;
}

TensorMeta make_contiguous(sym::Context& ctx, DType dtype, Device device,
                           std::vector<sym::Expr> sizes) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = device;
  m.strides = contiguous_strides(ctx, sizes);
  m.sizes = std::move(sizes);
  return m;
}

std::optional<Device> opt_device(const OpCall& c, size_t i, std::string_view name) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return std::nullopt;
  const Device* d = std::get_if<Device>(&a->v);
  COIL_USER_CHECK(d != nullptr) << c.op << ": " << name << " must be a device";
  return *d;
}

std::vector<sym::Expr> size_list_arg(sym::Context& ctx, const OpCall& c, size_t i,
                                     std::string_view name) {
  const Arg* a = c.arg(i, name);
  COIL_USER_CHECK(a != nullptr && !a->is_none()) << c.op << ": needs " << name;
  std::vector<sym::Expr> out;
  if (a->is_list()) {
    for (const Arg& e : a->list()) out.push_back(size_arg(ctx, e));
  } else {
    out.push_back(size_arg(ctx, *a));
  }
  for (sym::Expr e : out) {
    COIL_USER_CHECK(!(e->is_const() && e->value < 0))
        << c.op << ": negative size " << e->value << " in " << name;
  }
  return out;
}

DType scalar_default_dtype(const Arg& a) {
  if (a.is_bool()) return DType::Bool;
  if (a.is_double()) return DType::Float32;
  return DType::Int64;  // int or SymInt
}

MemoryFormat memory_format_arg(const OpCall& c, size_t i, std::string_view name,
                               MemoryFormat dflt) {
  const Arg* a = c.arg(i, name);
  if (a == nullptr || a->is_none()) return dflt;
  const auto* s = std::get_if<std::string>(&a->v);
  COIL_USER_CHECK(s != nullptr) << c.op << ": " << name << " must be a memory format";
  if (*s == "torch.preserve_format") return MemoryFormat::Preserve;
  if (*s == "torch.contiguous_format") return MemoryFormat::Contiguous;
  if (*s == "torch.channels_last") return MemoryFormat::ChannelsLast;
  COIL_USER_CHECK(false) << c.op << ": unsupported memory format " << *s;
  return dflt;
}

TensorMeta like_meta(sym::Context& ctx, const TensorMeta& in, DType dtype, Device device,
                     MemoryFormat format) {
  TensorMeta out;
  out.dtype = dtype;
  out.device = device;
  out.sizes = in.sizes;
  switch (format) {
    case MemoryFormat::Preserve:
      out.strides = preserve_format_strides(ctx, in);
      break;
    case MemoryFormat::Contiguous:
      out.strides = contiguous_strides(ctx, in.sizes);
      break;
    case MemoryFormat::ChannelsLast:
      out.strides = make_like_format(ctx, dtype, device, in.sizes, true).strides;
      break;
  }
  return out;
}

bool strides_like_channels_last(sym::Context& ctx, const TensorMeta& m) {
  const int64_t n = m.rank();
  if ((n != 4 && n != 5) || static_cast<int64_t>(m.strides.size()) != n) return false;
  // PyTorch's dim_order: C first, then the spatial dims innermost-first, then N.
  std::vector<int64_t> order =
      n == 4 ? std::vector<int64_t>{1, 3, 2, 0} : std::vector<int64_t>{1, 4, 3, 2, 0};
  if (!ctx.provably_lt(ctx.zero(), m.strides[1])) return false;  // strides[1] == 0 (or unknown)
  sym::Expr min = ctx.zero();
  for (int64_t d : order) {
    if (!ctx.provably_lt(ctx.zero(), m.sizes[d])) return false;  // an empty dim
    if (!ctx.provably_le(min, m.strides[d])) return false;
    if (d == 0 && ctx.provably_eq(min, m.strides[1])) return false;
    min = ctx.mul(m.strides[d], m.sizes[d]);
  }
  return true;
}

namespace {

// channels_last / channels_last_3d strides (row-major for other ranks).
std::vector<sym::Expr> channels_last_nd_strides(sym::Context& ctx,
                                                const std::vector<sym::Expr>& sizes) {
  const size_t n = sizes.size();
  if (n != 4 && n != 5) return contiguous_strides(ctx, sizes);
  std::vector<size_t> order = {1};  // fastest first
  for (size_t d = n - 1; d >= 2; --d) order.push_back(d);
  order.push_back(0);
  std::vector<sym::Expr> out(n);
  sym::Expr s = ctx.one();
  for (size_t d : order) {
    out[d] = s;
    s = ctx.mul(s, sizes[d]);
  }
  return out;
}

}  // namespace

TensorMeta make_like_format(sym::Context& ctx, DType dtype, Device device,
                            std::vector<sym::Expr> sizes, bool channels_last) {
  TensorMeta m = make_contiguous(ctx, dtype, device, std::move(sizes));
  if (channels_last) m.strides = channels_last_nd_strides(ctx, m.sizes);
  return m;
}

bool non_overlapping_and_dense(sym::Context& ctx, const TensorMeta& m) {
  const int64_t n = m.rank();
  if (static_cast<int64_t>(m.strides.size()) != n) return false;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < n; ++d) {
    if (ctx.provably_le(m.sizes[d], ctx.one())) continue;  // size 0 or 1: stride unused
    dims.push_back(d);
  }
  // Sort by stride (a stable insertion sort; an undecidable order fails the check).
  for (size_t i = 1; i < dims.size(); ++i) {
    for (size_t j = i; j > 0; --j) {
      sym::Expr a = m.strides[dims[j - 1]], b = m.strides[dims[j]];
      if (ctx.provably_le(a, b)) break;
      if (!ctx.provably_lt(b, a)) return false;
      std::swap(dims[j - 1], dims[j]);
    }
  }
  sym::Expr expected = ctx.one();
  for (int64_t d : dims) {
    if (!ctx.provably_eq(m.strides[d], expected)) return false;
    expected = ctx.mul(expected, m.sizes[d]);
  }
  return true;
}

std::vector<sym::Expr> preserve_format_strides(sym::Context& ctx, const TensorMeta& m) {
  if (non_overlapping_and_dense(ctx, m)) return m.strides;
  return pointwise_strides(ctx, m.sizes, {&m});
}

}  // namespace coil::ops
