// Internal to src/sym: the state behind sym::Context and the helpers shared by its source files.
#pragma once

#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coil/support/error.h"
#include "coil/sym/expr.h"

namespace coil::sym {

// Checked and Python-semantics integer arithmetic (CompileError on overflow / division by 0).
inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  COIL_USER_CHECK(!__builtin_add_overflow(a, b, &r)) << "integer overflow in " << a << " + " << b;
  return r;
}
inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  COIL_USER_CHECK(!__builtin_mul_overflow(a, b, &r)) << "integer overflow in " << a << " * " << b;
  return r;
}

// Python floor division / modulo (b != 0).
inline int64_t py_floordiv(int64_t a, int64_t b) {
  COIL_USER_CHECK(b != 0) << "division by zero";
  if (b == -1) return checked_mul(a, -1);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t py_mod(int64_t a, int64_t b) {
  COIL_USER_CHECK(b != 0) << "modulo by zero";
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Total, deterministic order on expressions (never pointer values); see expr.cpp.
int compare_expr(Expr a, Expr b);
inline bool expr_less(Expr a, Expr b) { return compare_expr(a, b) < 0; }

// One term of a sum: coef * mono. mono == nullptr means the constant term.
struct Term {
  int64_t coef;
  Expr mono;
};

struct NodeHash {
  size_t operator()(const ExprNode* n) const { return n->hash; }
};
struct NodeEq {
  bool operator()(const ExprNode* a, const ExprNode* b) const {
    return a->kind == b->kind && a->value == b->value && a->name == b->name &&
           a->operands == b->operands;
  }
};

struct Context::Impl {
  Context* self = nullptr;
  std::deque<ExprNode> nodes;
  std::unordered_set<const ExprNode*, NodeHash, NodeEq> table;
  std::unordered_map<std::string, Expr> symbols;
  std::unordered_map<Expr, Range> ranges;
  std::unordered_map<Expr, Range> bounds_cache;  // cleared whenever a range changes
  std::unordered_map<Expr, Expr> upper;          // symbolic exclusive upper bounds
  std::unordered_map<Expr, int64_t> multiples;   // symbol -> a known divisor of its value
  Expr zero = nullptr;
  Expr one = nullptr;

  Expr intern(ExprKind kind, int64_t value, std::string_view name, std::vector<Expr> operands);
  Expr constant(int64_t v) { return intern(ExprKind::Const, v, {}, {}); }
  // coef * product(factors); factors need not be sorted; no Const in factors.
  Expr make_term(int64_t coef, std::vector<Expr> factors);
  Expr make_term(int64_t coef, Expr mono);
  int64_t multiple(Expr symbol) const;
  // For a term coef * ... * (s // k) * ... where k divides both coef and a known multiple of s:
  // the term with (coef / k) * s in their place (the division is exact). False if none.
  bool exact_quotient_factor(int64_t& coef, std::vector<Expr>& factors);
  Term split_term(Expr t);
  void append_terms(Expr e, int64_t scale, std::vector<Term>& out);
  Expr build_sum(std::vector<Term> terms);
  Expr build_product(std::vector<Expr> factors);
  Expr multiply_monomials(Expr a, Expr b);
  Range bounds(Expr e);
  // A lower bound of e: bounds(e).lo, improved with the symbolic upper bounds of index symbols.
  int64_t lower_bound(Expr e);
  // Splits the terms of `a` into those divisible by coef_b*product(factors_b) (their quotients go
  // to q) and the rest (r). Returns whether any term was divisible.
  // For a divisor c*B (c > 0 constant, B > 0): g > 1 dividing c with terms = g*quotient +
  // rest and 0 <= rest < g (expr.cpp explains the identity it enables).
  bool split_small_remainder(const std::vector<Term>& terms, int64_t c, int64_t* g,
                             std::vector<Term>* quotient, std::vector<Term>* rest);
  bool split_divisible(Expr a, int64_t coef_b, const std::vector<Expr>& factors_b,
                       std::vector<Term>& q, std::vector<Term>& r);
  // For a divisor c*product(factors) with symbolic factors: g dividing c with terms =
  // G*quotient + rest, G = g*product(factors), 0 <= rest < G provably (with the symbolic upper
  // bounds of index symbols). Sets *g, *quotient, *rest (the symbolic form of
  // split_small_remainder).
  bool split_symbolic_remainder(const std::vector<Term>& terms, int64_t c,
                                const std::vector<Expr>& factors, int64_t* g, Expr* quotient,
                                Expr* rest);
  // For a positive sum divisor b whose terms share a factor (4096*s1 - 4096): g > 1 dividing
  // that factor with terms = g*quotient + rest, 0 <= rest < g. Sets *g, *quotient, *rest and
  // *b_over_g (split_small_remainder with the sum's content as c).
  bool split_sum_divisor(const std::vector<Term>& terms, Expr b, int64_t* g,
                         std::vector<Term>* quotient, std::vector<Term>* rest, Expr* b_over_g);
};

// Factors of a monomial (Mul without its coefficient, or the expression itself); empty for Const.
void factors_of(Expr e, std::vector<Expr>& out);
int64_t coef_of(Expr e);

}  // namespace coil::sym
