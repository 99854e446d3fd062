// Unit tests of sym::Context: canonical forms, simplification rules, queries, text.
#include "coil/sym/expr.h"

#include <gtest/gtest.h>

#include "coil/support/error.h"

namespace coil::sym {
namespace {

class SymTest : public ::testing::Test {
 protected:
  Context c;
  Expr x = c.symbol("x", {-20, 20});
  Expr y = c.symbol("y", {-20, 20});
  Expr s0 = c.symbol("s0", {2, kMaxSize});
  Expr s1 = c.symbol("s1", {2, kMaxSize});
  Expr i0 = c.symbol("i0", {0, 15});
  Expr i1 = c.symbol("i1", {0, 7});
  Expr k(int64_t v) { return c.constant(v); }
  Expr P(std::string_view s) { return c.parse(s); }
  std::string S(Expr e) { return c.str(e); }
};

TEST_F(SymTest, HashConsing) {
  EXPECT_EQ(c.add(x, k(1)), c.add(k(1), x));
  EXPECT_EQ(c.mul(x, y), c.mul(y, x));
  EXPECT_EQ(c.constant(7), c.constant(7));
  EXPECT_EQ(c.symbol("x"), x);
  EXPECT_EQ(c.symbol("x", {0, 1}), x);  // asking again does not change the range
  EXPECT_EQ(c.bounds(x).lo, -20);
  EXPECT_NE(c.add(x, k(1)), c.add(x, k(2)));
  EXPECT_TRUE(k(3)->is_const());
  EXPECT_TRUE(x->is_symbol());
}

TEST_F(SymTest, AddCombinesLikeTerms) {
  EXPECT_EQ(c.add(x, x), c.mul(k(2), x));
  EXPECT_EQ(c.sub(c.add(x, k(1)), x), k(1));
  EXPECT_EQ(c.sub(c.add(x, k(1)), c.add(x, k(1))), k(0));
  EXPECT_EQ(c.add(c.mul(k(3), c.mul(x, y)), c.mul(c.mul(y, k(-3)), x)), k(0));
  EXPECT_EQ(c.neg(c.neg(x)), x);
  Expr terms[] = {x, y, k(2), x, c.neg(y), k(-2)};
  EXPECT_EQ(c.sum(terms), c.mul(k(2), x));
  EXPECT_EQ(S(c.add(c.add(k(3), i1), c.mul(k(8), i0))), "8*i0 + i1 + 3");
  EXPECT_EQ(S(c.sub(i0, k(3))), "i0 - 3");
  EXPECT_EQ(S(c.sub(k(3), i0)), "-i0 + 3");
}

TEST_F(SymTest, MulFoldsAndDistributes) {
  EXPECT_EQ(c.mul(k(3), k(4)), k(12));
  EXPECT_EQ(c.mul(x, k(0)), k(0));
  EXPECT_EQ(c.mul(x, k(1)), x);
  EXPECT_EQ(c.mul(k(2), c.add(x, y)), c.add(c.mul(k(2), x), c.mul(k(2), y)));
  EXPECT_EQ(S(c.mul(k(2), c.add(x, k(3)))), "2*x + 6");
  // Products of sums expand (polynomial normal form).
  Expr p = c.mul(c.add(x, k(1)), c.add(y, k(1)));
  EXPECT_EQ(p, P("x*y + x + y + 1"));
  EXPECT_EQ(c.sub(c.mul(c.add(x, y), c.add(x, y)), c.mul(x, x)), P("2*x*y + y*y"));
  Expr fs[] = {k(2), x, k(3), y};
  EXPECT_EQ(S(c.product(fs)), "6*x*y");
  EXPECT_EQ(S(c.mul(s1, s0)), "s0*s1");
}

TEST_F(SymTest, FloorDivModConstantFolding) {
  EXPECT_EQ(c.floordiv(k(7), k(2)), k(3));
  EXPECT_EQ(c.floordiv(k(-7), k(2)), k(-4));
  EXPECT_EQ(c.floordiv(k(7), k(-2)), k(-4));
  EXPECT_EQ(c.mod(k(-7), k(3)), k(2));
  EXPECT_EQ(c.mod(k(7), k(-3)), k(-2));
  EXPECT_EQ(c.mod(k(-7), k(-3)), k(-1));
  EXPECT_THROW(c.floordiv(x, k(0)), CompileError);
  EXPECT_THROW(c.mod(k(1), k(0)), CompileError);
  EXPECT_EQ(c.floordiv(x, k(1)), x);
  EXPECT_EQ(c.mod(x, k(1)), k(0));
  EXPECT_EQ(c.floordiv(x, x), k(1));
}

TEST_F(SymTest, FloorDivModByBounds) {
  EXPECT_EQ(c.floordiv(i1, k(8)), k(0));
  EXPECT_EQ(c.mod(i1, k(8)), i1);
  EXPECT_EQ(c.floordiv(i1, s0), c.floordiv(i1, s0));  // s0 >= 2 only: unknown
  Expr j = c.symbol("j", {0, 1});
  EXPECT_EQ(c.floordiv(j, s0), k(0));
  EXPECT_EQ(c.mod(j, s0), j);
  Expr r = c.symbol("r", {8, 11});
  EXPECT_EQ(c.floordiv(r, k(4)), k(2));
  EXPECT_EQ(c.mod(r, k(4)), c.sub(r, k(8)));
}

TEST_F(SymTest, FloorDivModSplitsDivisibleTerms) {
  // (i0*8 + i1) // 8 -> i0, (i0*8 + i1) % 8 -> i1
  Expr e = c.add(c.mul(i0, k(8)), i1);
  EXPECT_EQ(c.floordiv(e, k(8)), i0);
  EXPECT_EQ(c.mod(e, k(8)), i1);
  // symbolic divisor
  Expr f = c.add(c.mul(i0, s1), i1);
  EXPECT_EQ(c.floordiv(f, s1), c.add(i0, c.floordiv(i1, s1)));
  EXPECT_EQ(c.mod(f, s1), c.mod(i1, s1));
  Expr g = c.add(c.mul(x, k(6)), y);
  EXPECT_EQ(c.floordiv(g, k(3)), c.add(c.mul(k(2), x), c.floordiv(y, k(3))));
  EXPECT_EQ(c.mod(g, k(3)), c.mod(y, k(3)));
  // (4*x + 2)//8 -> x//2 and (4*x + 2) % 8 -> 4*(x % 2) + 2: the remainder 2 is below the common
  // factor 4
  Expr h = c.add(c.mul(k(4), x), k(2));
  EXPECT_EQ(S(c.floordiv(h, k(8))), "x//2");
  EXPECT_EQ(S(c.mod(h, k(8))), "4*(x % 2) + 2");
  // remainder with bounds in [0, c): (4*i0 + 2*j + 1) // 4 -> i0
  Expr j = c.symbol("j", {0, 1});
  EXPECT_EQ(c.floordiv(P("4*i0 + 2*j + 1"), k(4)), i0);
  EXPECT_EQ(c.mod(P("4*i0 + 2*j + 1"), k(4)), P("2*j + 1"));
  // negative divisor
  EXPECT_EQ(c.floordiv(x, k(-2)), c.floordiv(c.neg(x), k(2)));
}

TEST_F(SymTest, ModPairCancels) {
  // (x // c) * c + x % c -> x
  EXPECT_EQ(c.add(c.mul(c.floordiv(x, k(4)), k(4)), c.mod(x, k(4))), x);
  EXPECT_EQ(c.add(c.mul(c.floordiv(i0, s1), s1), c.mod(i0, s1)), i0);
  // with a cofactor and other terms around
  Expr e = P("3*s0*((x + y)//5)*5 + 3*s0*((x + y) % 5) + 7");
  EXPECT_EQ(e, P("3*s0*x + 3*s0*y + 7"));
  // three-level reshape of a contiguous buffer flattens back:
  // x -> [x // (s0*s1), (x // s1) % s0, x % s1] -> flat index
  Expr a = c.floordiv(i0, c.mul(s0, s1));
  Expr b = c.mod(c.floordiv(i0, s1), s0);
  Expr d = c.mod(i0, s1);
  Expr flat = c.add(c.add(c.mul(a, c.mul(s0, s1)), c.mul(b, s1)), d);
  EXPECT_EQ(flat, i0);
  // same with constants (i0 in [0, 15] viewed as [2, 2, 4])
  Expr big = c.symbol("n", {0, 1000});
  Expr fl = P("16*(n//16) + 4*((n//4) % 4) + n % 4");
  EXPECT_EQ(fl, big);
}

TEST_F(SymTest, NestedFloorDivMod) {
  EXPECT_EQ(c.floordiv(c.floordiv(x, k(3)), k(4)), c.floordiv(x, k(12)));
  EXPECT_EQ(c.floordiv(c.floordiv(x, s0), s1), c.floordiv(x, c.mul(s0, s1)));
  // (x % (a*b)) // a stays
  Expr e = c.floordiv(c.mod(x, k(12)), k(4));
  EXPECT_EQ(e->kind, ExprKind::FloorDiv);
  // (x % (c*k)) % c -> x % c
  EXPECT_EQ(c.mod(c.mod(x, k(12)), k(4)), c.mod(x, k(4)));
  EXPECT_EQ(c.mod(c.mod(x, c.mul(s0, s1)), s1), c.mod(x, s1));
  // (x % 4) % 12 -> x % 4 by bounds
  EXPECT_EQ(c.mod(c.mod(x, k(4)), k(12)), c.mod(x, k(4)));
}

TEST_F(SymTest, SymbolicUpperBounds) {
  // Dynamic shapes: loop indices bounded by size symbols.
  Expr s2 = c.symbol("s2", {2, kMaxSize});
  Expr j0 = c.symbol("j0"), j1 = c.symbol("j1"), j2 = c.symbol("j2");
  c.set_upper_bound(j0, s0);
  c.set_upper_bound(j1, s1);
  c.set_upper_bound(j2, s2);
  EXPECT_EQ(c.upper_bound(j1), s1);
  EXPECT_EQ(c.upper_bound(x), nullptr);
  EXPECT_EQ(c.lt(j1, s1), k(1));
  EXPECT_EQ(c.le(c.add(j1, k(1)), s1), k(1));
  EXPECT_EQ(c.lt(s1, j1), k(0));
  EXPECT_EQ(c.min(j1, c.sub(s1, k(1))), j1);
  EXPECT_EQ(c.max(j1, s1), s1);
  // (j0*s1 + j1) // s1 -> j0, % s1 -> j1
  Expr f = c.add(c.mul(j0, s1), j1);
  EXPECT_EQ(c.floordiv(f, s1), j0);
  EXPECT_EQ(c.mod(f, s1), j1);
  EXPECT_EQ(c.mod(f, c.mul(s0, s1)), f);
  // 3-d contiguous index split back into its coordinates
  Expr flat = P("j0*s1*s2 + j1*s2 + j2");
  EXPECT_EQ(c.floordiv(flat, c.mul(s1, s2)), j0);
  EXPECT_EQ(c.mod(c.floordiv(flat, s2), s1), j1);
  EXPECT_EQ(c.mod(flat, s2), j2);
  EXPECT_EQ(c.floordiv(flat, P("s0*s1*s2")), k(0));
  // Not provable: j1 may exceed s0.
  EXPECT_EQ(c.floordiv(j1, s0)->kind, ExprKind::FloorDiv);
  // The numeric range is narrowed too.
  Expr t = c.symbol("t");
  c.set_upper_bound(t, k(10));
  EXPECT_EQ(c.symbol_range(t).hi, 9);
  EXPECT_EQ(c.mod(t, k(10)), t);
}

TEST_F(SymTest, MinMaxComparisons) {
  EXPECT_EQ(c.min(k(3), k(5)), k(3));
  EXPECT_EQ(c.max(k(3), k(5)), k(5));
  EXPECT_EQ(c.min(x, x), x);
  EXPECT_EQ(c.min(x, c.add(x, k(1))), x);
  EXPECT_EQ(c.max(x, c.add(x, k(1))), c.add(x, k(1)));
  EXPECT_EQ(c.min(i1, k(100)), i1);
  EXPECT_EQ(c.max(i1, k(-1)), i1);
  EXPECT_EQ(c.min(x, y), c.min(y, x));
  EXPECT_EQ(c.min(x, y)->kind, ExprKind::Min);
  EXPECT_EQ(c.lt(i1, k(8)), k(1));
  EXPECT_EQ(c.lt(i1, k(0)), k(0));
  EXPECT_EQ(c.le(x, x), k(1));
  EXPECT_EQ(c.lt(x, x), k(0));
  EXPECT_EQ(c.eq(x, c.add(x, k(1))), k(0));
  EXPECT_EQ(c.ne(x, c.add(x, k(1))), k(1));
  EXPECT_EQ(c.eq(x, y), c.eq(y, x));
  EXPECT_EQ(c.lt(x, y)->kind, ExprKind::Lt);
  EXPECT_EQ(c.lt(s0, k(2)), k(0));
  EXPECT_TRUE(c.provably_lt(i1, s0) == false);  // i1 up to 7, s0 from 2
  EXPECT_TRUE(c.provably_le(k(2), s0));
  EXPECT_TRUE(c.provably_eq(c.add(x, y), c.add(y, x)));
  EXPECT_TRUE(c.provably_nonneg(c.mul(s0, s1)));
}

TEST_F(SymTest, Bounds) {
  Range r = c.bounds(P("2*i0 - i1 + 1"));
  EXPECT_EQ(r.lo, -6);
  EXPECT_EQ(r.hi, 31);
  r = c.bounds(c.floordiv(i0, k(4)));
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 3);
  r = c.bounds(c.mod(x, k(4)));
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 3);
  r = c.bounds(c.mul(x, y));
  EXPECT_EQ(r.lo, -400);
  EXPECT_EQ(r.hi, 400);
  r = c.bounds(c.mul(s0, s1));  // saturates, never overflows
  EXPECT_EQ(r.lo, 4);
  EXPECT_GE(r.hi, kMaxSize);
  Expr t = c.symbol("t");
  c.set_range(t, {3, 5});
  EXPECT_EQ(c.symbol_range(t).lo, 3);
  EXPECT_EQ(c.bounds(c.add(t, k(1))).hi, 6);
  c.set_range(t, {0, 1});
  EXPECT_EQ(c.bounds(c.add(t, k(1))).hi, 2);  // the cache follows range changes
  EXPECT_EQ(c.symbol_range(c.symbol("fresh")).hi, kMaxSize);
  EXPECT_EQ(c.symbol_range(c.symbol("fresh")).lo, 0);
}

TEST_F(SymTest, QueriesAndSubstitute) {
  EXPECT_EQ(c.as_const(k(5)).value(), 5);
  EXPECT_FALSE(c.as_const(x).has_value());
  Expr e = P("y*x + (x//s0) + 3");
  auto fs = c.free_symbols(e);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0], x);  // id order: x created first
  EXPECT_EQ(fs[1], y);
  EXPECT_EQ(fs[2], s0);
  EXPECT_TRUE(c.depends_on(e, s0));
  EXPECT_FALSE(c.depends_on(e, s1));
  EXPECT_EQ(c.substitute(e, {{x, k(4)}, {s0, k(2)}}), P("4*y + 5"));
  EXPECT_EQ(c.substitute(P("(x + y)//4"), {{y, c.mul(k(4), x)}}), P("(5*x)//4"));
  EXPECT_EQ(c.substitute(P("i0*8 + i1"), {{i0, c.floordiv(x, k(8))}, {i1, c.mod(x, k(8))}}), x);
}

TEST_F(SymTest, Evaluate) {
  Expr e = P("(x - 7)//3 + (x - 7) % 3 + min(x, y)*max(x, 2) + (x < y) + (x == y)");
  EXPECT_EQ(c.evaluate(e, {{x, 1}, {y, 5}}), -2 + 0 + 1 * 2 + 1 + 0);
  EXPECT_EQ(c.evaluate(P("x % 3"), {{x, -7}}), 2);
  EXPECT_EQ(c.evaluate(P("x//3"), {{x, -7}}), -3);
  EXPECT_THROW(c.evaluate(P("x//y"), {{x, 1}, {y, 0}}), CompileError);
  EXPECT_THROW(c.evaluate(P("x % y"), {{x, 1}, {y, 0}}), CompileError);
  EXPECT_THROW(c.evaluate(x, {}), CompileError);
}

TEST_F(SymTest, TextRoundTrip) {
  for (const char* s : {"42",
                        "-3",
                        "s0",
                        "i0 + 3",
                        "4*s0",
                        "s0*s1",
                        "(i0 + 1)//4",
                        "i0 % 8",
                        "min(x, y)",
                        "max(x, y)",
                        "x < y",
                        "x <= y",
                        "x == y",
                        "x != y",
                        "8*i0 + i1 + 3",
                        "-x + 3",
                        "x - 2*y",
                        "4*(x//4)",
                        "(x//4) % 3",
                        "4*(x % 2) + 2",
                        "s0*(x % s1)",
                        "(x < y) + 1",
                        "min(x, y)//s0",
                        "-x*y"}) {
    Expr e = P(s);
    EXPECT_EQ(S(e), s) << s;
    EXPECT_EQ(P(S(e)), e) << s;
  }
  EXPECT_EQ(P("x > y"), c.lt(y, x));
  EXPECT_EQ(P("x >= y"), c.le(y, x));
  EXPECT_EQ(P("-(x + 1)"), c.sub(c.neg(x), k(1)));
  EXPECT_EQ(P("-9223372036854775808"), k(std::numeric_limits<int64_t>::min()));
  EXPECT_THROW(P("x +"), CompileError);
  EXPECT_THROW(P("(x"), CompileError);
  EXPECT_THROW(P("x $ y"), CompileError);
  EXPECT_THROW(P("99999999999999999999"), CompileError);
  EXPECT_THROW(P("min(x)"), CompileError);
}

TEST_F(SymTest, OrderIsStructuralNotCreationOrder) {
  Context a, b;
  Expr az = a.symbol("z"), ay = a.symbol("y");
  Expr by = b.symbol("y"), bz = b.symbol("z");
  EXPECT_EQ(a.str(a.add(az, ay)), b.str(b.add(bz, by)));
  EXPECT_EQ(a.str(a.add(az, ay)), "y + z");
  Expr i2 = a.symbol("i2"), i10 = a.symbol("i10");
  EXPECT_EQ(a.str(a.add(i10, i2)), "i2 + i10");
}

TEST_F(SymTest, LargeProductsStayPolynomialButBounded) {
  // (x + y + 1)^8 would have 45 terms after combining but 3^8 before: expanded.
  Expr p = c.one();
  Expr s = P("x + y + 1");
  for (int n = 0; n < 4; ++n) p = c.mul(p, s);
  EXPECT_EQ(p->kind, ExprKind::Add);
  EXPECT_EQ(c.evaluate(p, {{x, 2}, {y, 3}}), 6 * 6 * 6 * 6);
  // Far beyond the expansion cap the product is kept as a product of sums.
  Expr q = c.one();
  for (int n = 0; n < 20; ++n) q = c.mul(q, c.add(c.symbol("v" + std::to_string(n)), k(1)));
  std::unordered_map<Expr, int64_t> env;
  for (int n = 0; n < 20; ++n) env[c.symbol("v" + std::to_string(n))] = 1;
  EXPECT_EQ(c.evaluate(q, env), int64_t{1} << 20);
}

}  // namespace
}  // namespace coil::sym

namespace coil::sym {
namespace {

TEST(SymFloorDiv, SmallRemainderUnderACommonFactor) {
  // A row of a [8*127, 4096] view of a [8, 127+1, 4096] buffer: the column must not leak into
  // the row arithmetic.
  Context c;
  Expr x = c.symbol("x0", Range{0, 1015});
  Expr r = c.symbol("r0", Range{0, 4095});
  Expr flat = c.add(c.mul(c.constant(4096), x), r);
  EXPECT_EQ(c.floordiv(flat, c.constant(127 * 4096)), c.floordiv(x, c.constant(127)));
  EXPECT_EQ(c.mod(flat, c.constant(127 * 4096)),
            c.add(c.mul(c.constant(4096), c.mod(x, c.constant(127))), r));
  // Not when the remainder can reach the factor.
  Expr r2 = c.symbol("r2", Range{0, 4096});
  Expr flat2 = c.add(c.mul(c.constant(4096), x), r2);
  EXPECT_EQ(c.floordiv(flat2, c.constant(127 * 4096))->kind, ExprKind::FloorDiv);
  EXPECT_NE(c.floordiv(flat2, c.constant(127 * 4096)), c.floordiv(x, c.constant(127)));
}

TEST_F(SymTest, SymbolicCommonFactorRemainder) {
  // i2 < 8, i1 < s1: 0 <= 8*i1 + i2 < 8*s1, so it never moves the floor of 8*s1*i0 / (32*s1).
  Expr j0 = c.symbol("j0"), j1 = c.symbol("j1"), j2 = c.symbol("j2", {0, 7});
  c.set_upper_bound(j0, c.mul(k(4), s0));
  c.set_upper_bound(j1, s1);
  Expr flat = P("8*j0*s1 + 8*j1 + j2");
  EXPECT_EQ(c.floordiv(flat, P("32*s1")), P("j0//4"));
  EXPECT_EQ(c.mod(flat, P("32*s1")), P("8*s1*(j0 % 4) + 8*j1 + j2"));
  // Without the bound on the remainder (j2 unbounded above 8) nothing is rewritten.
  Expr j3 = c.symbol("j3", {0, 8});
  Expr loose = c.add(c.add(c.mul(c.mul(k(8), j0), s1), c.mul(k(8), j1)), j3);
  EXPECT_EQ(c.floordiv(loose, P("32*s1"))->kind, ExprKind::FloorDiv);
}

// The dynamic transformer's GELU read its [s0*s1, 1024] input through the [s0, s1, 1024] view
// as x1 + 1024*s1*((1024*x0 + x1) // (1024*s1)) + 1024*(x0 % s1): not affine in x1, so its
// inner loop did not vectorize. A constant factor of a symbolic divisor splits off like a
// constant divisor's, and the index folds back to 1024*x0 + x1.
TEST_F(SymTest, SmallRemainderUnderSymbolicDivisor) {
  Expr x0 = c.symbol("x0"), x1 = c.symbol("x1", {0, 1023});
  c.set_upper_bound(x0, c.mul(s0, s1));
  EXPECT_EQ(c.floordiv(P("1024*x0 + x1"), P("1024*s1")), P("x0 // s1"));
  EXPECT_EQ(c.mod(P("1024*x0 + x1"), P("1024*s1")), P("1024*(x0 % s1) + x1"));
  EXPECT_EQ(P("x1 + 1024*s1*((1024*x0 + x1) // (1024*s1)) + 1024*(x0 % s1)"), P("1024*x0 + x1"));
  // Not when the remainder can reach the factor.
  Expr x2 = c.symbol("x2", {0, 1024});
  EXPECT_EQ(c.floordiv(c.add(c.mul(k(1024), x0), x2), P("1024*s1"))->kind, ExprKind::FloorDiv);
  // Brute force over small values (s1 and the remainder's bound).
  Expr t = c.symbol("t", {2, 6}), a = c.symbol("a", {0, 40}), r = c.symbol("r", {0, 3});
  Expr num = c.add(c.mul(k(4), a), r), den = c.mul(k(4), t);
  Expr q = c.floordiv(num, den), m = c.mod(num, den);
  for (int64_t tv = 2; tv <= 6; ++tv)
    for (int64_t av = 0; av <= 40; ++av)
      for (int64_t rv = 0; rv <= 3; ++rv) {
        std::unordered_map<Expr, int64_t> env{{t, tv}, {a, av}, {r, rv}};
        EXPECT_EQ(c.evaluate(q, env), (4 * av + rv) / (4 * tv));
        EXPECT_EQ(c.evaluate(m, env), (4 * av + rv) % (4 * tv));
      }
}

// gpt2's loss reads the [b*(t-1), 4096] logits through a slice of [b, t, 4096]: the divisor
// 4096*t - 4096 is a sum; its common factor splits off the same way.
TEST_F(SymTest, SumDivisorWithCommonFactor) {
  Expr x0 = c.symbol("x0"), r = c.symbol("r", {0, 4095});
  c.set_upper_bound(x0, P("s0*s1 - s0"));
  EXPECT_EQ(c.floordiv(P("4096*x0 + r"), P("4096*s1 - 4096")), P("x0 // (s1 - 1)"));
  EXPECT_EQ(c.mod(P("4096*x0 + r"), P("4096*s1 - 4096")), P("4096*(x0 % (s1 - 1)) + r"));
  Expr r2 = c.symbol("r2", {0, 4096});
  EXPECT_EQ(c.floordiv(c.add(c.mul(k(4096), x0), r2), P("4096*s1 - 4096"))->kind,
            ExprKind::FloorDiv);
  // Brute force: (6*a + rr) // (6*t - 6) and its mod.
  Expr t = c.symbol("t", {2, 6}), a = c.symbol("a", {0, 40}), rr = c.symbol("rr", {0, 2});
  Expr num = c.add(c.mul(k(6), a), rr), den = c.sub(c.mul(k(6), t), k(6));
  Expr q = c.floordiv(num, den), m = c.mod(num, den);
  EXPECT_EQ(q, c.floordiv(a, c.sub(t, k(1))));
  for (int64_t tv = 2; tv <= 6; ++tv)
    for (int64_t av = 0; av <= 40; ++av)
      for (int64_t rv = 0; rv <= 2; ++rv) {
        std::unordered_map<Expr, int64_t> env{{t, tv}, {a, av}, {rr, rv}};
        EXPECT_EQ(c.evaluate(q, env), (6 * av + rv) / (6 * tv - 6));
        EXPECT_EQ(c.evaluate(m, env), (6 * av + rv) % (6 * tv - 6));
      }
}

// Ranges from outside the graph (Dynamo's ShapeEnv, the `symbol_ranges` compile option).
TEST(SymRanges, SetRangesFromText) {
  Context c;
  c.set_ranges("s0:3:64;s1:2:;;s2:5:5");
  Expr s0 = c.symbol("s0"), s1 = c.symbol("s1"), s2 = c.symbol("s2");
  EXPECT_EQ(c.symbol_range(s0).lo, 3);
  EXPECT_EQ(c.symbol_range(s0).hi, 64);
  EXPECT_EQ(c.symbol_range(s1).lo, 2);
  EXPECT_EQ(c.symbol_range(s1).hi, kMaxSize);
  EXPECT_TRUE(c.symbol_range(s2).is_point());
  // A slice [1:3] of a dim s0 >= 3 has exactly 2 elements; without the bound it is
  // min(3, s0) - 1.
  EXPECT_EQ(c.as_const(c.sub(c.min(c.constant(3), s0), c.one())), 2);
  EXPECT_EQ(c.as_const(c.sub(c.min(c.constant(3), s1), c.one())), std::nullopt);
  EXPECT_TRUE(c.provably_lt(s0, c.constant(65)));
  for (const char* bad :
       {"s0", "s0:3", "s0:x:4", "s0:5:4", ":2:3", "s0:-1:", "s3:2::0", "s3:2:3:4", "s3:2:3:4:5"})
    EXPECT_THROW(c.set_ranges(bad), CompileError) << bad;
}

// A fourth field: the symbol is a multiple (ShapeEnv's divisibility facts). The range's ends
// round inward, and exact divisions simplify: group_norm's view of [s0] channels as
// [3, s0 // 3] and back gives s0 again, as Dynamo guarantees.
TEST(SymRanges, MultiplesFromText) {
  Context c;
  c.set_ranges("s0:2::3;s1:2:50:8");
  Expr s0 = c.symbol("s0"), s1 = c.symbol("s1");
  EXPECT_EQ(c.symbol_multiple(s0), 3);
  EXPECT_EQ(c.symbol_range(s0).lo, 3);
  EXPECT_EQ(c.symbol_range(s1).lo, 8);
  EXPECT_EQ(c.symbol_range(s1).hi, 48);
  Expr third = c.floordiv(s0, c.constant(3));
  EXPECT_EQ(c.mul(third, c.constant(3)), s0);
  EXPECT_EQ(c.max(c.one(), third), third);  // s0 >= 3, so s0 // 3 >= 1
  EXPECT_EQ(c.str(c.mul(c.constant(3), c.floordiv(s1, c.constant(4)))), "3*(s1//4)");
  EXPECT_EQ(c.mul(c.constant(4), c.floordiv(s1, c.constant(4))), s1);
  EXPECT_EQ(c.symbol_multiple(c.symbol("s9")), 1);
}

}  // namespace
}  // namespace coil::sym
