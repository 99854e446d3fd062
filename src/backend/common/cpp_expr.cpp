#include "coil/backend/common/cpp_expr.h"

#include "coil/support/error.h"

namespace coil::backend {
namespace {

using sym::Expr;
using sym::ExprKind;

// Precedence: atoms/calls 100, unary minus 30, product 20, sum 10, comparison 5.
struct Printed {
  std::string text;
  int prec;
};

class Printer {
 public:
  Printer(const sym::Context& ctx, const std::function<std::string(Expr)>& name)
      : ctx_(ctx), name_(name) {}

  Printed print(Expr e) {
    switch (e->kind) {
      case ExprKind::Const:
        return {cpp_int_literal(e->value), e->value < 0 ? 30 : 100};
      case ExprKind::Symbol:
        return {name_ ? name_(e) : cpp_identifier(e->name), 100};
      case ExprKind::Add:
        return print_add(e);
      case ExprKind::Mul:
        return print_mul(e, false);
      case ExprKind::FloorDiv:
      case ExprKind::Mod: {
        Expr a = e->operands[0], b = e->operands[1];
        bool simple = ctx_.provably_nonneg(a) && ctx_.bounds(b).lo > 0;
        bool div = e->kind == ExprKind::FloorDiv;
        if (simple) {
          return {wrap(print(a), 20) + (div ? " / " : " % ") + wrap(print(b), 21), 20};
        }
        // A numerator bounded below by lo < 0 over a positive constant c: shifted by k*c >= -lo
        // it is non-negative, and C++'s / and % floor it: a // c == (a + k*c) / c - k and
        // a mod c == (a + k*c) % c. The helpers' sign fix-ups are selects that g++ leaves
        // inside simd loops, which then stay scalar (a stride-2 convolution's input gradient,
        // whose taps test (x - 1) mod 2).
        const sym::Range ra = ctx_.bounds(a);
        const std::optional<int64_t> c = ctx_.as_const(b);
        if (c && *c > 0 && ra.lo < 0 && ra.lo > -(int64_t{1} << 40)) {
          const int64_t k = (-ra.lo + *c - 1) / *c;
          const std::string shifted =
              "(" + wrap(print(a), 10) + " + " + cpp_int_literal(k * *c) + ")";
          const std::string cs = cpp_int_literal(*c);
          if (div) return {"(" + shifted + " / " + cs + " - " + cpp_int_literal(k) + ")", 100};
          return {"(" + shifted + " % " + cs + ")", 100};
        }
        return {std::string(div ? "coil::m::floordiv(" : "coil::m::remainder(") + "int64_t(" +
                    print(a).text + "), int64_t(" + print(b).text + "))",
                100};
      }
      case ExprKind::Min:
      case ExprKind::Max:
        return {std::string(e->kind == ExprKind::Min ? "coil::m::minimum" : "coil::m::maximum") +
                    "(int64_t(" + print(e->operands[0]).text + "), int64_t(" +
                    print(e->operands[1]).text + "))",
                100};
      case ExprKind::Lt:
      case ExprKind::Le:
      case ExprKind::Eq:
      case ExprKind::Ne: {
        const char* op = e->kind == ExprKind::Lt   ? " < "
                         : e->kind == ExprKind::Le ? " <= "
                         : e->kind == ExprKind::Eq ? " == "
                                                   : " != ";
        return {"int64_t(" + print(e->operands[0]).text + op + print(e->operands[1]).text + ")",
                100};
      }
    }
    COIL_INTERNAL_ERROR() << "unknown sym expression kind";
  }

 private:
  static std::string wrap(const Printed& p, int min_prec) {
    return p.prec >= min_prec ? p.text : "(" + p.text + ")";
  }

  // Coefficient of a term (Mul with a Const operand, or a Const) and whether it is negative.
  static bool negative_term(Expr t) {
    if (t->kind == ExprKind::Const) return t->value < 0;
    if (t->kind == ExprKind::Mul) {
      for (Expr o : t->operands) {
        if (o->kind == ExprKind::Const) return o->value < 0;
      }
    }
    return false;
  }

  Printed print_add(Expr e) {
    std::string s;
    bool first = true;
    // Print nonconstant terms first, the constant last (it is already last in canonical form).
    for (Expr t : e->operands) {
      bool neg = negative_term(t);
      if (first) {
        s = wrap(print(t), 10);
        first = false;
        continue;
      }
      if (neg) {
        Printed p = t->kind == ExprKind::Const ? Printed{cpp_int_literal(-t->value), 100}
                                               : print_mul(t, true);
        s += " - " + wrap(p, 11);
      } else {
        s += " + " + wrap(print(t), 11);
      }
    }
    return {s, 10};
  }

  // negate: print the product with its coefficient negated (for `a - 2*b`).
  Printed print_mul(Expr e, bool negate) {
    int64_t coef = 1;
    std::vector<Expr> rest;
    for (Expr o : e->operands) {
      if (o->kind == ExprKind::Const) {
        coef = o->value;
      } else {
        rest.push_back(o);
      }
    }
    if (negate) coef = -coef;
    std::string s;
    for (Expr o : rest) {
      if (!s.empty()) s += "*";
      s += wrap(print(o), 21);
    }
    if (coef == 1) return {s, rest.size() == 1 ? print(rest[0]).prec : 20};
    if (coef == -1) return {"-" + wrap({s, 20}, 21), 30};
    if (coef < 0) return {"(" + cpp_int_literal(coef) + ")*" + s, 20};
    return {cpp_int_literal(coef) + "*" + s, 20};
  }

  const sym::Context& ctx_;
  const std::function<std::string(Expr)>& name_;
};

}  // namespace

std::string cpp_int_literal(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807L - 1)";
  std::string s = std::to_string(v);
  if (v > 2147483647 || v < -2147483647) s += "L";
  return s;
}

std::string cpp_identifier(std::string_view name) {
  std::string s;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    s += ok ? c : '_';
  }
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) s = "v_" + s;
  return s;
}

std::string cpp_index_expr(const sym::Context& ctx, sym::Expr e,
                           const std::function<std::string(sym::Expr)>& name) {
  Printer p(ctx, name);
  return p.print(e).text;
}

}  // namespace coil::backend
