// Symbolic integer expressions: sizes, strides and index arithmetic.
//
// Expressions are immutable and hash-consed in a per-compilation sym::Context: two structurally
// equal expressions are the same pointer, so `a == b` is equality and Expr can key hash maps.
// Construction canonicalizes (flattens sums and products, folds constants, combines like
// terms, orders operands deterministically), so e.g. `x + 1 - x` is the constant 0.
//
// Kinds:
//   Const     integer constant
//   Symbol    a named integer (a size like s0, or a loop index like i0 / r0)
//   Add       n-ary sum         (operands sorted; at most one Const operand, last)
//   Mul       n-ary product     (operands sorted; at most one Const operand, the coefficient,
//                                which is operand 0; never 0 or 1)
//   FloorDiv  floor(a / b)      (index arithmetic; b > 0)
//   Mod       a mod b, Python semantics (result in [0, b) for b > 0)
//   Min, Max  binary
//   Lt, Le, Eq, Ne  comparisons, value 0 or 1
//
// Sums are polynomials: like terms combine (x + x -> 2*x), a constant factor distributes over a
// sum (2*(a + b) -> 2*a + 2*b), and products of sums are expanded ((a + 1)*(b + 1) ->
// a*b + a + b + 1) while the expansion has at most 256 terms; larger products of sums stay
// unexpanded (no exponential blowup). FloorDiv/Mod/Min/Max/comparisons are atoms of the
// polynomial. Operand order is a structural total order (kind, symbol name with numeric
// suffixes compared as numbers, value, operands), independent of creation order and pointers,
// so str() is deterministic across contexts.
//
// Every symbol has a value range (default for sizes: [0, kMaxSize]); the simplifier uses ranges
// to rewrite FloorDiv/Mod (e.g. (i0*8 + i1) // 8 -> i0 when 0 <= i1 < 8, and
// (i // c) * c + i % c -> i) and to decide comparisons.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace coil::sym {

enum class ExprKind : uint8_t { Const, Symbol, Add, Mul, FloorDiv, Mod, Min, Max, Lt, Le, Eq, Ne };

struct ExprNode;
using Expr = const ExprNode*;

// Inclusive integer interval. kMaxSize stands for "unbounded" in size arithmetic.
inline constexpr int64_t kMaxSize = int64_t{1} << 62;
struct Range {
  int64_t lo = 0;
  int64_t hi = kMaxSize;
  bool contains(int64_t v) const { return lo <= v && v <= hi; }
  bool is_point() const { return lo == hi; }
};

struct ExprNode {
  ExprKind kind;
  int64_t value = 0;           // Const: the value
  std::string name;            // Symbol: its name
  std::vector<Expr> operands;  // Add/Mul: >=2 operands; binary kinds: exactly 2
  size_t hash = 0;
  int id = 0;  // creation order within its Context (deterministic)

  bool is_const() const { return kind == ExprKind::Const; }
  bool is_symbol() const { return kind == ExprKind::Symbol; }
};

// Owns every expression of one compilation. Not thread-safe; one per compile.
class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // --- leaves
  Expr constant(int64_t v);
  Expr zero() { return constant(0); }
  Expr one() { return constant(1); }
  // The symbol with this name; created on first use with range `range`. Asking again returns
  // the same Expr (and does not change its range; use set_range).
  Expr symbol(std::string_view name, Range range = Range{});
  // Whether a symbol of this name exists (fresh names must not capture a graph's symbol).
  bool has_symbol(std::string_view name) const;
  // Simplification uses the ranges in force when an expression is built (built expressions are
  // not revisited), so set ranges before building; bounds() always uses the current ranges.
  void set_range(Expr symbol, Range range);
  Range symbol_range(Expr symbol) const;
  // Declares that `symbol` is a multiple of m > 0 (Dynamo's ShapeEnv knows s0 % 3 == 0 once a
  // graph viewed [s0] as [3, s0 // 3]). The simplifier then divides exactly: s0 // 3 * 3 is
  // s0 and s0 % 3 is 0; the range's ends are rounded inward to multiples. Set it before
  // building expressions, as ranges.
  void set_multiple(Expr symbol, int64_t m);
  int64_t symbol_multiple(Expr symbol) const;  // 1 unless set_multiple said more
  // Declares 0 <= symbol < upper for a loop index whose extent is symbolic (`upper` is an
  // expression over other symbols, e.g. s1, or s1*s2). The simplifier then proves facts that
  // numeric ranges cannot, e.g. (i0*s1 + i1)//s1 -> i0 and i1 < s1. Also narrows the numeric
  // range of `symbol` to [0, bounds(upper).hi - 1]. Set it before building expressions.
  void set_upper_bound(Expr symbol, Expr upper);
  // The symbolic exclusive upper bound of `symbol` set by set_upper_bound, or nullptr.
  Expr upper_bound(Expr symbol) const;

  // --- arithmetic (canonicalizing, simplifying with the symbols' ranges)
  Expr add(Expr a, Expr b);
  Expr sub(Expr a, Expr b);
  Expr neg(Expr a);
  Expr mul(Expr a, Expr b);
  Expr floordiv(Expr a, Expr b);
  Expr mod(Expr a, Expr b);
  Expr min(Expr a, Expr b);
  Expr max(Expr a, Expr b);
  Expr lt(Expr a, Expr b);
  Expr le(Expr a, Expr b);
  Expr eq(Expr a, Expr b);
  Expr ne(Expr a, Expr b);
  Expr sum(std::span<const Expr> terms);
  Expr product(std::span<const Expr> factors);

  // --- queries
  // Bounds of `e` from the symbols' ranges (interval arithmetic, exact for constants).
  Range bounds(Expr e) const;
  std::optional<int64_t> as_const(Expr e) const;
  // True only when provable from ranges; false means "unknown or false".
  bool provably_eq(Expr a, Expr b) const;
  bool provably_lt(Expr a, Expr b) const;
  bool provably_le(Expr a, Expr b) const;
  bool provably_nonneg(Expr e) const { return bounds(e).lo >= 0; }
  // Symbols that occur in e, in id order.
  std::vector<Expr> free_symbols(Expr e) const;
  bool depends_on(Expr e, Expr symbol) const;

  // --- rewriting
  // Replace symbols per the map and re-simplify.
  Expr substitute(Expr e, const std::unordered_map<Expr, Expr>& map);
  // Evaluate with concrete symbol values; throws CompileError if a symbol is unbound or a
  // division by zero happens.
  int64_t evaluate(Expr e, const std::unordered_map<Expr, int64_t>& env) const;

  // --- text. Syntax (also what parse() accepts):
  //   42, s0, i0 + 3, 4*s0, s0*s1, (i0 + 1)//4, i0 % 8, min(a, b), max(a, b),
  //   a < b, a <= b, a == b, a != b
  std::string str(Expr e) const;
  Expr parse(std::string_view text);  // throws CompileError on bad text
  // Sets symbol ranges from "name:lo:hi[:m]" entries separated by ';' (hi empty: unbounded;
  // m: the symbol is a multiple of m), e.g. "s0:3:64;s1:2::4" (Dynamo's ShapeEnv value ranges
  // and divisibility facts, set before the graph is parsed).
  void set_ranges(std::string_view text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace coil::sym
