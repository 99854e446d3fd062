#include "coil/loop/body.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "coil/support/error.h"
#include "scalar_semantics.h"

namespace coil::loop {

std::string_view instr_kind_name(InstrKind k) {
  switch (k) {
    case InstrKind::Load:
      return "load";
    case InstrKind::Constant:
      return "constant";
    case InstrKind::IndexExpr:
      return "index_expr";
    case InstrKind::Cast:
      return "cast";
    case InstrKind::Rand:
      return "rand";
    case InstrKind::Randn:
      return "randn";
    case InstrKind::Indirect:
      return "indirect";
#define COIL_BODY_OP_NAME(name, arity, text) \
  case InstrKind::name:                      \
    return text;
      COIL_BODY_OPS(COIL_BODY_OP_NAME)
#undef COIL_BODY_OP_NAME
  }
  return "?";
}

int instr_kind_arity(InstrKind k) {
  switch (k) {
    case InstrKind::Load:
    case InstrKind::Constant:
    case InstrKind::IndexExpr:
      return 0;
    case InstrKind::Cast:
    case InstrKind::Rand:
    case InstrKind::Randn:
    case InstrKind::Indirect:
      return 1;
#define COIL_BODY_OP_ARITY(name, arity, text) \
  case InstrKind::name:                       \
    return arity;
      COIL_BODY_OPS(COIL_BODY_OP_ARITY)
#undef COIL_BODY_OP_ARITY
  }
  return 0;
}

namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

size_t instr_hash(const Instr& in) {
  size_t h = static_cast<size_t>(in.kind) * 131 + static_cast<size_t>(in.dtype);
  for (InstrId o : in.operands) h = mix(h, static_cast<size_t>(o + 1));
  h = mix(h, static_cast<size_t>(in.buffer + 1));
  for (sym::Expr e : in.index) h = mix(h, e ? e->hash : 0);
  h = mix(h, static_cast<size_t>(in.mask + 1));
  h = mix(h, in.expr ? in.expr->hash : 0);
  h = mix(h, std::bit_cast<uint64_t>(in.fvalue));
  h = mix(h, static_cast<size_t>(in.ivalue));
  return h;
}

bool instr_equal(const Instr& a, const Instr& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.operands[0] == b.operands[0] &&
         a.operands[1] == b.operands[1] && a.operands[2] == b.operands[2] && a.buffer == b.buffer &&
         a.index == b.index && a.mask == b.mask && a.expr == b.expr &&
         std::bit_cast<uint64_t>(a.fvalue) == std::bit_cast<uint64_t>(b.fvalue) &&
         a.ivalue == b.ivalue;
}

}  // namespace

void BodyBuilder::index_pending() {
  auto& instrs = body_->instrs;
  for (; indexed_ < instrs.size(); ++indexed_) {
    cse_[instr_hash(instrs[indexed_])].push_back(static_cast<InstrId>(indexed_));
  }
}

InstrId BodyBuilder::append(Instr instr) {
  index_pending();
  size_t h = instr_hash(instr);
  auto& bucket = cse_[h];
  for (InstrId id : bucket) {
    if (instr_equal(body_->instrs[id], instr)) return id;
  }
  InstrId id = static_cast<InstrId>(body_->instrs.size());
  body_->instrs.push_back(std::move(instr));
  bucket.push_back(id);
  indexed_ = body_->instrs.size();
  return id;
}

InstrId BodyBuilder::load(BufferId buffer, DType dtype, std::vector<sym::Expr> index,
                          InstrId mask) {
  COIL_CHECK(buffer >= 0);
  Instr in;
  in.kind = InstrKind::Load;
  in.dtype = dtype;
  in.buffer = buffer;
  in.index = std::move(index);
  in.mask = mask;
  return append(std::move(in));
}

InstrId BodyBuilder::constant(double v, DType dtype) {
  if (dtype_is_floating(dtype)) {
    Instr in;
    in.kind = InstrKind::Constant;
    in.dtype = dtype;
    // A half-precision constant holds a half-precision value: full(0.1, dtype=bf16) is
    // 0.10009765625 wherever it is read (fuzz seed 492). (f32 literals are printed as
    // float literals already.)
    bool half = dtype == DType::BFloat16 || dtype == DType::Float16;
    in.fvalue = half ? detail::round_to(dtype, v) : v;
    return append(std::move(in));
  }
  if (dtype == DType::Bool) return int_constant(v != 0 ? 1 : 0, dtype);
  COIL_USER_CHECK(std::isfinite(v)) << "non-finite constant " << v << " for an integer dtype";
  return int_constant(static_cast<int64_t>(v), dtype);
}

InstrId BodyBuilder::int_constant(int64_t v, DType dtype) {
  if (dtype_is_floating(dtype)) return constant(static_cast<double>(v), dtype);
  Instr in;
  in.kind = InstrKind::Constant;
  in.dtype = dtype;
  in.ivalue = dtype == DType::Bool ? (v != 0) : v;
  return append(std::move(in));
}

InstrId BodyBuilder::index_expr(sym::Expr e, DType dtype) {
  COIL_CHECK(e != nullptr);
  if (e->is_const()) return int_constant(e->value, dtype);
  Instr in;
  in.kind = InstrKind::IndexExpr;
  in.dtype = dtype;
  in.expr = e;
  return append(std::move(in));
}

InstrId BodyBuilder::cast(InstrId v, DType dtype) {
  const Instr& src = body_->instrs.at(v);
  if (src.dtype == dtype) return v;
  if (src.kind == InstrKind::Constant) {
    // Fold: a constant converts like a scalar would.
    if (dtype_is_floating(src.dtype)) {
      if (dtype == DType::Bool) return int_constant(src.fvalue != 0, dtype);
      // Narrowing rounds (a bf16 cast of 0.1 is 0.10009765625; fuzz seed 492).
      if (dtype_is_floating(dtype)) return constant(detail::round_to(dtype, src.fvalue), dtype);
      if (std::isfinite(src.fvalue)) return int_constant(static_cast<int64_t>(src.fvalue), dtype);
    } else {
      if (dtype_is_floating(dtype)) return constant(static_cast<double>(src.ivalue), dtype);
      if (dtype == DType::Bool) return int_constant(src.ivalue != 0, dtype);
      if (dtype == DType::Int64) return int_constant(src.ivalue, dtype);
    }
  }
  Instr in;
  in.kind = InstrKind::Cast;
  in.dtype = dtype;
  in.operands[0] = v;
  return append(std::move(in));
}

InstrId BodyBuilder::op(InstrKind kind, DType dtype, InstrId a, InstrId b, InstrId c) {
  int arity = instr_kind_arity(kind);
  COIL_CHECK(kind != InstrKind::Load && kind != InstrKind::Constant &&
             kind != InstrKind::IndexExpr && kind != InstrKind::Rand && kind != InstrKind::Randn &&
             kind != InstrKind::Indirect)
      << "use the dedicated builder for " << instr_kind_name(kind);
  InstrId ops[3] = {a, b, c};
  for (int k = 0; k < 3; ++k) {
    COIL_CHECK((k < arity) == (ops[k] >= 0)) << instr_kind_name(kind) << " takes " << arity;
    COIL_CHECK(ops[k] < static_cast<InstrId>(body_->instrs.size()));
  }
  Instr in;
  in.kind = kind;
  in.dtype = dtype;
  in.operands[0] = a;
  in.operands[1] = b;
  in.operands[2] = c;
  return append(std::move(in));
}

InstrId BodyBuilder::rand(InstrId seed, sym::Expr offset, bool normal) {
  Instr in;
  in.kind = normal ? InstrKind::Randn : InstrKind::Rand;
  in.dtype = DType::Float32;
  in.operands[0] = seed;
  in.expr = offset;
  return append(std::move(in));
}

InstrId BodyBuilder::indirect(InstrId v, sym::Expr symbol) {
  COIL_CHECK(symbol != nullptr && symbol->is_symbol());
  COIL_CHECK(v >= 0 && v < static_cast<InstrId>(body_->instrs.size()));
  Instr in;
  in.kind = InstrKind::Indirect;
  in.dtype = DType::Int64;
  in.operands[0] = v;
  in.expr = symbol;
  return append(std::move(in));
}

void drop_unused_instrs(Body& body) {
  const size_t n = body.instrs.size();
  std::vector<char> live(n, 0);
  std::vector<InstrId> work;
  auto mark = [&](InstrId v) {
    if (v >= 0 && !live[static_cast<size_t>(v)]) {
      live[static_cast<size_t>(v)] = 1;
      work.push_back(v);
    }
  };
  mark(body.result);
  for (size_t i = 0; i < n; ++i)
    if (body.instrs[i].kind == InstrKind::Indirect) mark(static_cast<InstrId>(i));
  while (!work.empty()) {
    const Instr& in = body.instrs[static_cast<size_t>(work.back())];
    work.pop_back();
    for (InstrId o : in.operands) mark(o);
    mark(in.mask);
  }
  if (std::find(live.begin(), live.end(), 0) == live.end()) return;
  std::vector<InstrId> renumbered(n, -1);
  std::vector<Instr> kept;
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    renumbered[i] = static_cast<InstrId>(kept.size());
    kept.push_back(std::move(body.instrs[i]));
  }
  auto remap = [&](InstrId v) { return v < 0 ? v : renumbered[static_cast<size_t>(v)]; };
  for (Instr& in : kept) {
    for (InstrId& o : in.operands) o = remap(o);
    in.mask = remap(in.mask);
  }
  body.instrs = std::move(kept);
  body.result = remap(body.result);
}

}  // namespace coil::loop
