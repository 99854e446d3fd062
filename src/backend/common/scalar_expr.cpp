#include "coil/backend/common/scalar_expr.h"

#include <cstdio>

#include "coil/backend/common/cpp_expr.h"
#include "coil/support/error.h"

// A new InstrKind without its case here must fail to compile, in both backends.
#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend {

using loop::Instr;
using loop::InstrId;
using loop::InstrKind;

std::string compute_ctype(DType t) { return std::string(dtype_ctype(dtype_compute(t))); }

std::string stored_value(DType t, const std::string& v) {
  if (t == DType::BFloat16) return "coil::to_bf16(" + v + ")";
  if (t == DType::Float16) return "coil::to_half(" + v + ")";
  return std::string(dtype_ctype(t)) + "(" + v + ")";
}

std::string rounded_value(DType t, const std::string& v) {
  if (t == DType::BFloat16 || t == DType::Float16)
    return "coil::to_f32(" + stored_value(t, v) + ")";
  return v;
}

std::string float_literal(double v, DType t) {
  bool is_f32 = dtype_compute(t) == DType::Float32;
  std::string T = is_f32 ? "float" : "double";
  if (v != v) return "coil::numeric<" + T + ">::nan()";
  if (v == __builtin_inf()) return "coil::numeric<" + T + ">::inf()";
  if (v == -__builtin_inf()) return "(-coil::numeric<" + T + ">::inf())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  if (is_f32) return "float(" + s + ")";
  return v < 0 ? "(" + s + ")" : s;
}

namespace {

// For a cast to a float type of float(int(x)), x of the same compute type (also through
// widening integer casts): x, else -1. g++ (under -fno-trapping-math) folds float(int(x)) into
// trunc(x), which is -0 for x in (-1, 0) where the integer gives +0 (copysign and 1/x see the
// sign; fuzz seed 2835). The caller emits trunc(x) + 0 instead: +0 there, and not foldable.
InstrId truncated_float_source(const loop::Body& b, const Instr& cast) {
  const DType want = dtype_compute(cast.dtype);
  const Instr* in = &cast;
  while (true) {
    if (in->operands[0] < 0) return -1;
    const InstrId src = in->operands[0];
    const Instr& op = b.instrs.at(src);
    if (in != &cast && dtype_is_floating(op.dtype))
      return dtype_compute(op.dtype) == want ? src : -1;
    if (op.kind != InstrKind::Cast || op.dtype == DType::Bool || dtype_is_floating(op.dtype))
      return -1;
    // An integer cast on the way must keep every value (a wider type): int8(300.7) wraps.
    if (in != &cast && in->dtype != op.dtype && dtype_size(in->dtype) <= dtype_size(op.dtype))
      return -1;
    in = &op;
  }
}

}  // namespace

std::string scalar_instr_expr(const loop::Body& b, InstrId id, const ScalarExprHooks& h) {
  const Instr& in = b.instrs[id];
  const std::string T = compute_ctype(in.dtype);
  const bool fp = dtype_is_floating(in.dtype);
  auto operand = [&](int k) {
    COIL_CHECK(in.operands[k] >= 0)
        << "missing operand " << k << " of " << loop::instr_kind_name(in.kind);
    return h.value(in.operands[k]);
  };
  auto a = [&] { return operand(0); };
  auto bb = [&] { return operand(1); };
  auto c = [&] { return operand(2); };
  auto call1 = [&](const char* f) {
    return std::string("coil::m::") + f + "(" + T + "(" + a() + "))";
  };
  auto call2 = [&](const char* f) {
    return std::string("coil::m::") + f + "(" + T + "(" + a() + "), " + T + "(" + bb() + "))";
  };
  auto bin = [&](const char* op) { return T + "(" + a() + " " + op + " " + bb() + ")"; };
  auto cmp = [&](const char* op) { return "(" + a() + " " + op + " " + bb() + ")"; };
  auto opd_integral = [&](int k) { return !dtype_is_floating(b.instrs.at(in.operands[k]).dtype); };
  switch (in.kind) {
    case InstrKind::Load:
      return h.load(in, id);
    case InstrKind::Constant:
      if (fp) return float_literal(in.fvalue, in.dtype);
      if (in.dtype == DType::Bool) return in.ivalue ? "true" : "false";
      return T + "(" + cpp_int_literal(in.ivalue) + ")";
    case InstrKind::IndexExpr:
      return T + "(" + h.index(in.expr) + ")";
    case InstrKind::Cast: {
      if (in.dtype == DType::Bool) return "(" + a() + " != 0)";
      if (b.instrs.at(in.operands[0]).dtype == DType::Bool) {
        // A select, not a conversion: g++ 12 vectorizes no loop that converts a bool to
        // float next to 64-bit integer arithmetic ("no vectype"), such as dropout's mask times
        // its value beside the Philox draw; the select vectorizes.
        const std::string one = fp ? float_literal(1.0, in.dtype) : T + "(1)";
        const std::string zero = fp ? float_literal(0.0, in.dtype) : T + "(0)";
        return "(" + a() + " ? " + one + " : " + zero + ")";
      }
      if (fp) {
        const InstrId x = truncated_float_source(b, in);
        if (x >= 0) {
          const std::string v = "(coil::m::trunc(" + T + "(" + h.value(x) + ")) + " + T + "(0))";
          return rounded_value(in.dtype, v);
        }
      }
      if (in.dtype == DType::BFloat16 || in.dtype == DType::Float16) {
        // Integers reach bf16/f16 through float, as c10's conversions do (and to_bf16 has only
        // float and double overloads).
        return rounded_value(in.dtype, opd_integral(0) ? "float(" + a() + ")" : a());
      }
      return T + "(" + a() + ")";
    }
    case InstrKind::Rand:
    case InstrKind::Randn:
      return std::string(in.kind == InstrKind::Rand ? "coil::rand_uniform" : "coil::rand_normal") +
             "(uint64_t(" + a() + "), uint64_t(rng_offset + " + h.index(in.expr) + "))";
    case InstrKind::Indirect:
      return "int64_t(" + a() + ")";
    case InstrKind::Neg:
      return T + "(-" + a() + ")";
    case InstrKind::Abs:
      return in.dtype == DType::Bool ? a() : call1("abs");
    case InstrKind::Exp:
      return call1("exp");
    case InstrKind::Exp2:
      return call1("exp2");
    case InstrKind::Expm1:
      return call1("expm1");
    case InstrKind::Log:
      return call1("log");
    case InstrKind::Log2:
      return call1("log2");
    case InstrKind::Log10:
      return call1("log10");
    case InstrKind::Log1p:
      return call1("log1p");
    case InstrKind::Sqrt:
      return call1("sqrt");
    case InstrKind::Rsqrt:
      return call1("rsqrt");
    case InstrKind::Reciprocal:
      return call1("reciprocal");
    case InstrKind::Sin:
      return call1("sin");
    case InstrKind::Cos:
      return call1("cos");
    case InstrKind::Tan:
      return call1("tan");
    case InstrKind::Asin:
      return call1("asin");
    case InstrKind::Acos:
      return call1("acos");
    case InstrKind::Atan:
      return call1("atan");
    case InstrKind::Sinh:
      return call1("sinh");
    case InstrKind::Cosh:
      return call1("cosh");
    case InstrKind::Tanh:
      return call1("tanh");
    case InstrKind::Asinh:
      return call1("asinh");
    case InstrKind::Acosh:
      return call1("acosh");
    case InstrKind::Atanh:
      return call1("atanh");
    case InstrKind::Sigmoid:
      return call1("sigmoid");
    case InstrKind::Erf:
      return call1("erf");
    case InstrKind::Erfc:
      return call1("erfc");
    case InstrKind::Erfinv:
      return call1("erfinv");
    case InstrKind::Lgamma:
      return call1("lgamma");
    case InstrKind::Digamma:
      return call1("digamma");
    case InstrKind::Floor:
      return fp ? call1("floor") : a();
    case InstrKind::Ceil:
      return fp ? call1("ceil") : a();
    case InstrKind::Round:
      return fp ? call1("round") : a();
    case InstrKind::Trunc:
      return fp ? call1("trunc") : a();
    case InstrKind::Sign:
      return in.dtype == DType::Bool ? a() : call1("sign");
    case InstrKind::IsNan:
      return opd_integral(0) ? "false" : "coil::m::isnan(" + a() + ")";
    case InstrKind::IsInf:
      return opd_integral(0) ? "false" : "coil::m::isinf(" + a() + ")";
    case InstrKind::LogicalNot:
      return "(!" + a() + ")";
    case InstrKind::BitwiseNot:
      return in.dtype == DType::Bool ? "(!" + a() + ")" : T + "(~" + a() + ")";
    case InstrKind::Add:
      return in.dtype == DType::Bool ? "(" + a() + " || " + bb() + ")" : bin("+");
    case InstrKind::Sub:
      return bin("-");
    case InstrKind::Mul:
      return in.dtype == DType::Bool ? "(" + a() + " && " + bb() + ")" : bin("*");
    case InstrKind::Div:
      return fp ? bin("/") : call2("truncdiv");
    case InstrKind::FloorDiv:
      return call2("floordiv");
    case InstrKind::TruncDiv:
      return call2("truncdiv");
    case InstrKind::Remainder:
      return call2("remainder");
    case InstrKind::Fmod:
      return call2("fmod");
    case InstrKind::Pow:
      return call2("pow");
    case InstrKind::Maximum:
      return in.dtype == DType::Bool ? "(" + a() + " || " + bb() + ")" : call2("maximum");
    case InstrKind::Minimum:
      return in.dtype == DType::Bool ? "(" + a() + " && " + bb() + ")" : call2("minimum");
    case InstrKind::Atan2:
      return call2("atan2");
    case InstrKind::Hypot:
      return call2("hypot");
    case InstrKind::CopySign:
      return call2("copysign");
    case InstrKind::Eq:
      return cmp("==");
    case InstrKind::Ne:
      return cmp("!=");
    case InstrKind::Lt:
      return cmp("<");
    case InstrKind::Le:
      return cmp("<=");
    case InstrKind::Gt:
      return cmp(">");
    case InstrKind::Ge:
      return cmp(">=");
    case InstrKind::LogicalAnd:
      return "(bool(" + a() + ") && bool(" + bb() + "))";
    case InstrKind::LogicalOr:
      return "(bool(" + a() + ") || bool(" + bb() + "))";
    case InstrKind::LogicalXor:
      return "(bool(" + a() + ") != bool(" + bb() + "))";
    case InstrKind::BitwiseAnd:
      return in.dtype == DType::Bool ? "(" + a() + " && " + bb() + ")" : bin("&");
    case InstrKind::BitwiseOr:
      return in.dtype == DType::Bool ? "(" + a() + " || " + bb() + ")" : bin("|");
    case InstrKind::BitwiseXor:
      return in.dtype == DType::Bool ? "(" + a() + " != " + bb() + ")" : bin("^");
    case InstrKind::ShiftLeft:
      return call2("shift_left");
    case InstrKind::ShiftRight:
      return call2("shift_right");
    case InstrKind::Where:
      return "(" + a() + " ? " + T + "(" + bb() + ") : " + T + "(" + c() + "))";
  }
  COIL_INTERNAL_ERROR() << "unhandled instruction kind";
}

}  // namespace coil::backend
