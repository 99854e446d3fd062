// Creation lowerings: constant-filled tensors and ranges. They read no buffer, so they inline
// into their consumers for free. Output dtypes and sizes follow the node's TensorMeta (which
// already applied PyTorch's defaults, e.g. full(..., 2) -> i64).
#include "coil/lower/lowering.h"
#include "coil/support/error.h"

namespace coil::lower {

namespace {

using loop::BodyBuilder;
using loop::InstrId;
using loop::InstrKind;

std::vector<TensorValue> one(TensorValue v) { return {std::move(v)}; }

// A scalar argument, kept exact: integers and bools as int64, floats as double.
struct Scalar {
  bool is_float = false;
  double f = 0;
  int64_t i = 0;
  sym::Expr s = nullptr;  // a symbolic int
};

Scalar scalar_arg(const Node& n, size_t pos, std::string_view name, double def) {
  Scalar s;
  const Arg* a = n.arg(pos, name);
  if (a == nullptr || a->is_none()) {
    s.i = static_cast<int64_t>(def);
    s.f = def;
    s.is_float = static_cast<double>(s.i) != def;
    return s;
  }
  if (a->is_double()) {
    s.is_float = true;
    s.f = a->as_double();
  } else if (a->is_sym() && !std::get<sym::Expr>(a->v)->is_const()) {
    s.s = std::get<sym::Expr>(a->v);
  } else {
    s.i = a->as_int();
    s.f = static_cast<double>(s.i);
  }
  return s;
}

InstrId scalar_instr(BodyBuilder& b, const Scalar& s, DType t) {
  if (s.s) return b.cast(b.index_expr(s.s), t);
  if (s.is_float) return b.constant(s.f, t);
  return b.int_constant(s.i, t);
}

TensorValue filled(LoweringContext& lc, const Node& n, Scalar v) {
  const TensorMeta& m = n.output()->meta();
  DType ct = dtype_compute(m.dtype);
  // The value in the tensor's own dtype first: scalar_tensor(0.3, dtype=bf16) read by an
  // inlined reader is bf16(0.3), as eager stores it (fuzz seed 8081: masked_fill's scalar).
  Loader load = [v, dtype = m.dtype, ct](BodyBuilder& b, const std::vector<sym::Expr>&) {
    return b.cast(scalar_instr(b, v, dtype), ct);
  };
  return lc.pointwise(m.dtype, m.sizes, std::move(load), 1, 0);
}

Scalar constant(double v) {
  Scalar s;
  s.is_float = true;
  s.f = v;
  return s;
}

// ATen's integer ranges run in int64 (its accumulate type): float bounds are truncated first,
// so arange(2.1, -2.9, -1.0, dtype=int64) is [2, 1, 0, -1], not trunc(2.1 - i).
Scalar truncated(Scalar s) {
  if (s.is_float) {
    s.i = static_cast<int64_t>(s.f);
    s.is_float = false;
  }
  return s;
}

// start + i * step, computed in f64 (floats) or i64 (integers), converted to the output dtype.
TensorValue range(LoweringContext& lc, const Node& n, Scalar start, Scalar step) {
  const TensorMeta& m = n.output()->meta();
  COIL_USER_CHECK(m.sizes.size() == 1) << n.op() << ": expected a 1-d result";
  DType out = m.dtype;
  if (!dtype_is_floating(out)) {
    start = truncated(start);
    step = truncated(step);
  }
  bool fp = dtype_is_floating(out) || start.is_float || step.is_float;
  DType acc = fp ? DType::Float64 : DType::Int64;
  Loader load = [start, step, acc, out](BodyBuilder& b, const std::vector<sym::Expr>& idx) {
    InstrId i = b.cast(b.index_expr(idx.at(0)), acc);
    InstrId v = b.op(InstrKind::Add, acc, scalar_instr(b, start, acc),
                     b.op(InstrKind::Mul, acc, i, scalar_instr(b, step, acc)));
    return b.cast(v, dtype_compute(out));
  };
  return lc.pointwise(out, m.sizes, std::move(load), 3, 0);
}

}  // namespace

void register_creation_lowerings(LoweringRegistry& r) {
  r.add("aten.full.default", [](LoweringContext& lc, const Node& n) {
    return one(filled(lc, n, scalar_arg(n, 1, "fill_value", 0)));
  });
  r.add("aten.full_like.default", [](LoweringContext& lc, const Node& n) {
    return one(filled(lc, n, scalar_arg(n, 1, "fill_value", 0)));
  });
  r.add("aten.scalar_tensor.default", [](LoweringContext& lc, const Node& n) {
    return one(filled(lc, n, scalar_arg(n, 0, "s", 0)));
  });
  for (const char* op :
       {"aten.zeros.default", "aten.zeros_like.default", "aten.empty.memory_format",
        "aten.empty_like.default", "aten.empty_strided.default", "aten.empty_permuted.default",
        "aten.new_zeros.default", "aten.new_empty.default"}) {
    r.add(op, [](LoweringContext& lc, const Node& n) { return one(filled(lc, n, constant(0))); });
  }
  for (const char* op : {"aten.ones.default", "aten.ones_like.default", "aten.new_ones.default"}) {
    r.add(op, [](LoweringContext& lc, const Node& n) { return one(filled(lc, n, constant(1))); });
  }
  r.add("aten.arange.default", [](LoweringContext& lc, const Node& n) {
    Scalar zero;
    Scalar step;
    step.i = 1;
    return one(range(lc, n, zero, step));
  });
  r.add("aten.arange.start", [](LoweringContext& lc, const Node& n) {
    Scalar step;
    step.i = 1;
    return one(range(lc, n, scalar_arg(n, 0, "start", 0), step));
  });
  r.add("aten.arange.start_step", [](LoweringContext& lc, const Node& n) {
    Scalar s = scalar_arg(n, 2, "step", 1);
    return one(range(lc, n, scalar_arg(n, 0, "start", 0), s));
  });
  r.add("prims.iota.default", [](LoweringContext& lc, const Node& n) {
    return one(range(lc, n, scalar_arg(n, 1000, "start", 0), scalar_arg(n, 1000, "step", 1)));
  });
}

}  // namespace coil::lower
