// Seeded fuzz tests of sym::Context against brute force.
//
// Random expression trees over a few symbols with small ranges are built twice: as a plain tree
// that this file evaluates itself (Python semantics for // and %), and through the Context's
// canonicalizing constructors. For every assignment of the symbols within their ranges the
// canonical Expr must evaluate to the reference value and lie within Context::bounds. The
// canonical Expr must also survive parse(str(e)) == e.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "coil/support/error.h"
#include "coil/sym/expr.h"

namespace coil::sym {
namespace {

enum class Op { Const, Sym, Add, Sub, Neg, Mul, Div, Mod, Min, Max, Lt, Le, Eq, Ne };

struct Tree {
  Op op;
  int64_t value = 0;  // Const value or Sym index
  std::unique_ptr<Tree> a, b;
};
using TreeP = std::unique_ptr<Tree>;

int64_t ref_floordiv(int64_t a, int64_t b) {
  // floor(a / b) by exact search over a small window around the truncated quotient.
  int64_t q = a / b;
  while (q * b > a && b > 0) --q;
  while ((q + 1) * b <= a && b > 0) ++q;
  while (q * b < a && b < 0) --q;
  while ((q + 1) * b >= a && b < 0) ++q;
  return q;
}
int64_t ref_mod(int64_t a, int64_t b) { return a - b * ref_floordiv(a, b); }

struct SymInfo {
  const char* name;
  Range range;
  int below = -1;   // symbolic bound: value < value of symbol `below` (or, with below2,
  int below2 = -1;  // < the product of the two)
};
// Small ranges: brute force enumerates every combination.
const SymInfo kSyms[] = {{"a", {-3, 4}}, {"b", {0, 5}}, {"c", {1, 3}}, {"d", {0, 2}}};
constexpr int kNumSyms = 4;
// Dynamic-shape flavour: sizes n, m and index symbols i < n, j < m, k < n*m.
const SymInfo kIdxSyms[] = {
    {"n", {1, 4}}, {"m", {1, 3}}, {"i", {0, 3}, 0}, {"j", {0, 2}, 1}, {"k", {0, 11}, 0, 1}};
constexpr int kNumIdxSyms = 5;

int64_t ref_eval(const Tree& t, const int64_t* env) {
  switch (t.op) {
    case Op::Const:
      return t.value;
    case Op::Sym:
      return env[t.value];
    case Op::Neg:
      return -ref_eval(*t.a, env);
    default:
      break;
  }
  int64_t x = ref_eval(*t.a, env), y = ref_eval(*t.b, env);
  switch (t.op) {
    case Op::Add:
      return x + y;
    case Op::Sub:
      return x - y;
    case Op::Mul:
      return x * y;
    case Op::Div:
      return ref_floordiv(x, y);
    case Op::Mod:
      return ref_mod(x, y);
    case Op::Min:
      return x < y ? x : y;
    case Op::Max:
      return x > y ? x : y;
    case Op::Lt:
      return x < y;
    case Op::Le:
      return x <= y;
    case Op::Eq:
      return x == y;
    case Op::Ne:
      return x != y;
    default:
      return 0;
  }
}

TreeP leaf(Op op, int64_t v) {
  auto t = std::make_unique<Tree>();
  t->op = op;
  t->value = v;
  return t;
}
TreeP node(Op op, TreeP a, TreeP b = nullptr) {
  auto t = std::make_unique<Tree>();
  t->op = op;
  t->a = std::move(a);
  t->b = std::move(b);
  return t;
}
TreeP clone(const Tree& t) {
  auto r = std::make_unique<Tree>();
  r->op = t.op;
  r->value = t.value;
  if (t.a) r->a = clone(*t.a);
  if (t.b) r->b = clone(*t.b);
  return r;
}

class Gen {
 public:
  // div_syms: symbols that are always >= 1 (usable as divisors).
  explicit Gen(uint32_t seed, int nsyms = kNumSyms, std::vector<int> div_syms = {2})
      : rng_(seed), nsyms_(nsyms), div_syms_(std::move(div_syms)) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // A divisor that is never zero: a non-zero constant, the symbol c (>= 1), c*k, c + k,
  // c - 5 (negative), max(e, 1), or a product of those.
  TreeP divisor(int depth) {
    switch (pick(8)) {
      case 0:
      case 1: {
        static const int64_t kDivs[] = {1, 2, 3, 4, 5, 6, 8, -1, -2, -3};
        return leaf(Op::Const, kDivs[pick(10)]);
      }
      case 2:
        return dsym();
      case 3:
        return node(Op::Mul, dsym(), leaf(Op::Const, 1 + pick(3)));
      case 4:
        return node(Op::Add, dsym(), leaf(Op::Const, pick(3)));
      case 5:
        return node(Op::Max, expr(depth - 1), leaf(Op::Const, 1));
      case 6:
        return node(Op::Sub, dsym(), leaf(Op::Const, 5));
      default:
        return node(Op::Mul, divisor(0), divisor(0));
    }
  }

  TreeP expr(int depth) {
    if (depth <= 0 || pick(5) == 0) {
      if (pick(3) == 0) return leaf(Op::Const, pick(11) - 5);
      return leaf(Op::Sym, pick(nsyms_));
    }
    switch (pick(16)) {
      case 0:
      case 1:
        return node(Op::Add, expr(depth - 1), expr(depth - 1));
      case 2:
        return node(Op::Sub, expr(depth - 1), expr(depth - 1));
      case 3:
        return node(Op::Neg, expr(depth - 1));
      case 4:
      case 5:
        return node(Op::Mul, expr(depth - 1), expr(depth - 1));
      case 6:
      case 7:
        return node(Op::Div, expr(depth - 1), divisor(depth - 1));
      case 8:
      case 9:
        return node(Op::Mod, expr(depth - 1), divisor(depth - 1));
      case 10:
        return node(Op::Min, expr(depth - 1), expr(depth - 1));
      case 11:
        return node(Op::Max, expr(depth - 1), expr(depth - 1));
      case 12: {
        static const Op kCmp[] = {Op::Lt, Op::Le, Op::Eq, Op::Ne};
        return node(kCmp[pick(4)], expr(depth - 1), expr(depth - 1));
      }
      case 13: {
        // The reshape pattern: (e // m) * m * k + (e % m) * k (+ rest).
        TreeP e = expr(depth - 1);
        TreeP m = divisor(depth - 1);
        TreeP k = pick(2) ? leaf(Op::Const, 1 + pick(3)) : leaf(Op::Sym, pick(nsyms_));
        TreeP q =
            node(Op::Mul, node(Op::Mul, node(Op::Div, clone(*e), clone(*m)), clone(*m)), clone(*k));
        TreeP r = node(Op::Mul, node(Op::Mod, std::move(e), std::move(m)), std::move(k));
        TreeP s = pick(2) ? node(Op::Add, std::move(q), std::move(r))
                          : node(Op::Add, std::move(r), std::move(q));
        if (pick(2)) s = node(Op::Add, std::move(s), expr(depth - 2));
        return s;
      }
      case 14: {
        // Index arithmetic: (e*m + r) // m and % m with a divisor m.
        TreeP m = divisor(0);
        TreeP r = pick(2) ? expr(depth - 1) : leaf(Op::Sym, pick(nsyms_));
        TreeP e = node(Op::Add, node(Op::Mul, expr(depth - 1), clone(*m)), std::move(r));
        return node(pick(2) ? Op::Div : Op::Mod, std::move(e), std::move(m));
      }
      default: {
        // Nested: (e // m1) // m2, (e % m1) % m2, (e % m1) // m2.
        TreeP inner = node(pick(2) ? Op::Div : Op::Mod, expr(depth - 1), divisor(0));
        return node(pick(2) ? Op::Div : Op::Mod, std::move(inner), divisor(0));
      }
    }
  }

 private:
  TreeP dsym() { return leaf(Op::Sym, div_syms_[pick(static_cast<int>(div_syms_.size()))]); }

  std::mt19937 rng_;
  int nsyms_;
  std::vector<int> div_syms_;
};

Expr build(Context& c, const Tree& t, const std::vector<Expr>& syms) {
  switch (t.op) {
    case Op::Const:
      return c.constant(t.value);
    case Op::Sym:
      return syms[t.value];
    case Op::Neg:
      return c.neg(build(c, *t.a, syms));
    default:
      break;
  }
  Expr x = build(c, *t.a, syms), y = build(c, *t.b, syms);
  switch (t.op) {
    case Op::Add:
      return c.add(x, y);
    case Op::Sub:
      return c.sub(x, y);
    case Op::Mul:
      return c.mul(x, y);
    case Op::Div:
      return c.floordiv(x, y);
    case Op::Mod:
      return c.mod(x, y);
    case Op::Min:
      return c.min(x, y);
    case Op::Max:
      return c.max(x, y);
    case Op::Lt:
      return c.lt(x, y);
    case Op::Le:
      return c.le(x, y);
    case Op::Eq:
      return c.eq(x, y);
    case Op::Ne:
      return c.ne(x, y);
    default:
      return nullptr;
  }
}

std::string tree_str(const Tree& t, const SymInfo* syms = kSyms) {
  static const char* kNames[] = {"",  "",    "+",   "-", "neg", "*",  "//",
                                 "%", "min", "max", "<", "<=",  "==", "!="};
  if (t.op == Op::Const) return std::to_string(t.value);
  if (t.op == Op::Sym) return syms[t.value].name;
  if (t.op == Op::Neg) return "(-" + tree_str(*t.a, syms) + ")";
  return std::string("(") + kNames[static_cast<int>(t.op)] + " " + tree_str(*t.a, syms) + " " +
         tree_str(*t.b, syms) + ")";
}

// Calls f(env) for every assignment of the symbols within their ranges (and symbolic bounds).
template <typename F>
void for_all_assignments(F&& f, const SymInfo* syms = kSyms, int nsyms = kNumSyms) {
  int64_t env[8];
  for (int i = 0; i < nsyms; ++i) env[i] = syms[i].range.lo;
  for (;;) {
    bool valid = true;
    for (int i = 0; i < nsyms; ++i) {
      if (syms[i].below < 0) continue;
      int64_t ub = env[syms[i].below] * (syms[i].below2 < 0 ? 1 : env[syms[i].below2]);
      valid &= env[i] < ub;
    }
    if (valid) f(env);
    int i = 0;
    while (i < nsyms && env[i] == syms[i].range.hi) {
      env[i] = syms[i].range.lo;
      ++i;
    }
    if (i == nsyms) return;
    ++env[i];
  }
}

TEST(SymFuzz, CanonicalFormMatchesBruteForce) {
  Gen gen(12345);
  Context c;
  std::vector<Expr> syms;
  for (const SymInfo& s : kSyms) syms.push_back(c.symbol(s.name, s.range));
  int checked = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    TreeP t = gen.expr(1 + iter % 5);
    SCOPED_TRACE(tree_str(*t));
    Expr e = build(c, *t, syms);
    SCOPED_TRACE(c.str(e));
    Range r = c.bounds(e);
    std::unordered_map<Expr, int64_t> env_map;
    bool ok = true;
    for_all_assignments([&](const int64_t* env) {
      if (!ok) return;
      for (int i = 0; i < kNumSyms; ++i) env_map[syms[i]] = env[i];
      int64_t want = ref_eval(*t, env);
      int64_t got = c.evaluate(e, env_map);
      if (got != want || !r.contains(got)) {
        ok = false;
        std::string where;
        for (int i = 0; i < kNumSyms; ++i)
          where += std::string(kSyms[i].name) + "=" + std::to_string(env[i]) + " ";
        ADD_FAILURE() << "at " << where << "want " << want << " got " << got << " bounds [" << r.lo
                      << ", " << r.hi << "]";
      }
    });
    ++checked;
    if (!ok) break;
  }
  EXPECT_EQ(checked, 4000);
}

// Symbols known to be multiples (Context::set_multiple: Dynamo's divisibility facts): p of 3,
// q of 2. Every canonical form must still agree with brute force over the assignments that
// respect them, and exact divisions must simplify.
TEST(SymFuzz, MultiplesMatchBruteForce) {
  const SymInfo syms_info[] = {{"p", {0, 12}}, {"q", {2, 8}}, {"c", {1, 3}}, {"d", {0, 2}}};
  const int64_t multiples[] = {3, 2, 1, 1};
  Gen gen(2026);
  Context c;
  std::vector<Expr> syms;
  for (int i = 0; i < kNumSyms; ++i) {
    syms.push_back(c.symbol(syms_info[i].name, syms_info[i].range));
    c.set_multiple(syms.back(), multiples[i]);
  }
  Expr p = syms[0], q = syms[1];
  EXPECT_EQ(c.mul(c.constant(3), c.floordiv(p, c.constant(3))), p);
  EXPECT_EQ(c.mod(p, c.constant(3)), c.zero());
  EXPECT_EQ(c.mod(c.add(c.mul(q, c.constant(3)), c.mul(p, c.constant(2))), c.constant(6)),
            c.zero());
  EXPECT_EQ(c.add(c.floordiv(p, c.constant(3)), c.mul(c.constant(2), c.floordiv(p, c.constant(3)))),
            p);
  EXPECT_EQ(c.floordiv(c.mul(q, c.constant(3)), c.constant(2)),
            c.mul(c.constant(3), c.floordiv(q, c.constant(2))));
  EXPECT_NE(c.mod(p, c.constant(2)), c.zero());  // 3 does not make p even
  int checked = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    TreeP t = gen.expr(1 + iter % 5);
    SCOPED_TRACE(tree_str(*t, syms_info));
    Expr e = build(c, *t, syms);
    SCOPED_TRACE(c.str(e));
    ASSERT_EQ(c.parse(c.str(e)), e);
    Range r = c.bounds(e);
    std::unordered_map<Expr, int64_t> env_map;
    bool ok = true;
    for_all_assignments(
        [&](const int64_t* env) {
          if (!ok) return;
          for (int i = 0; i < kNumSyms; ++i) {
            if (env[i] % multiples[i] != 0) return;
            env_map[syms[i]] = env[i];
          }
          int64_t want = ref_eval(*t, env);
          int64_t got = c.evaluate(e, env_map);
          if (got != want || !r.contains(got)) {
            ok = false;
            ADD_FAILURE() << "p=" << env[0] << " q=" << env[1] << " c=" << env[2] << " d=" << env[3]
                          << ": want " << want << " got " << got;
          }
        },
        syms_info, kNumSyms);
    ++checked;
    if (!ok) break;
  }
  EXPECT_EQ(checked, 3000);
}

TEST(SymFuzz, TextRoundTrip) {
  Gen gen(777);
  Context c;
  std::vector<Expr> syms;
  for (const SymInfo& s : kSyms) syms.push_back(c.symbol(s.name, s.range));
  for (int iter = 0; iter < 3000; ++iter) {
    TreeP t = gen.expr(1 + iter % 6);
    Expr e = build(c, *t, syms);
    std::string s = c.str(e);
    Expr p = c.parse(s);
    ASSERT_EQ(p, e) << s << " reparsed as " << c.str(p);
    ASSERT_EQ(c.str(p), s);
  }
}

TEST(SymFuzz, CanonicalTextIndependentOfCreationOrder) {
  // Two contexts that create the symbols in opposite orders print the same canonical text.
  Gen gen(4242);
  Context c1, c2;
  std::vector<Expr> s1, s2(kNumSyms);
  for (const SymInfo& s : kSyms) s1.push_back(c1.symbol(s.name, s.range));
  for (int i = kNumSyms - 1; i >= 0; --i) s2[i] = c2.symbol(kSyms[i].name, kSyms[i].range);
  for (int iter = 0; iter < 2000; ++iter) {
    TreeP t = gen.expr(1 + iter % 5);
    ASSERT_EQ(c1.str(build(c1, *t, s1)), c2.str(build(c2, *t, s2))) << tree_str(*t);
  }
}

TEST(SymFuzz, SubstituteMatchesBruteForce) {
  // substitute(e, {a -> f}) evaluates like e with a replaced by f's value.
  Gen gen(99);
  Context c;
  std::vector<Expr> syms;
  for (const SymInfo& s : kSyms) syms.push_back(c.symbol(s.name, s.range));
  for (int iter = 0; iter < 1500; ++iter) {
    TreeP t = gen.expr(1 + iter % 4);
    // f: an expression over b, c, d whose values stay within a's range [-3, 4].
    TreeP f = node(Op::Sub, node(Op::Mod, gen.expr(2), leaf(Op::Const, 8)), leaf(Op::Const, 3));
    Expr e = build(c, *t, syms);
    Expr fe = build(c, *f, syms);
    if (c.depends_on(fe, syms[0])) continue;
    Expr sub = c.substitute(e, {{syms[0], fe}});
    ASSERT_FALSE(c.depends_on(sub, syms[0]));
    std::unordered_map<Expr, int64_t> env_map;
    for_all_assignments([&](const int64_t* env) {
      int64_t env2[kNumSyms] = {ref_eval(*f, env), env[1], env[2], env[3]};
      for (int i = 0; i < kNumSyms; ++i) env_map[syms[i]] = env[i];
      ASSERT_EQ(c.evaluate(sub, env_map), ref_eval(*t, env2))
          << tree_str(*t) << " with a = " << tree_str(*f) << " -> " << c.str(sub);
    });
  }
}

TEST(SymFuzz, SymbolicIndexBoundsMatchBruteForce) {
  // Index symbols bounded by size symbols (i < n, j < m, k < n*m) through set_upper_bound;
  // brute force enumerates only the assignments that satisfy the bounds.
  Gen gen(2024, kNumIdxSyms, {0, 1});
  Context c;
  std::vector<Expr> syms;
  for (const SymInfo& s : kIdxSyms) syms.push_back(c.symbol(s.name, s.range));
  for (int i = 0; i < kNumIdxSyms; ++i) {
    const SymInfo& s = kIdxSyms[i];
    if (s.below < 0) continue;
    Expr ub = syms[s.below];
    if (s.below2 >= 0) ub = c.mul(ub, syms[s.below2]);
    c.set_upper_bound(syms[i], ub);
  }
  std::unordered_map<Expr, int64_t> env_map;
  for (int iter = 0; iter < 3000; ++iter) {
    TreeP t = gen.expr(1 + iter % 5);
    Expr e = build(c, *t, syms);
    bool ok = true;
    for_all_assignments(
        [&](const int64_t* env) {
          if (!ok) return;
          for (int i = 0; i < kNumIdxSyms; ++i) env_map[syms[i]] = env[i];
          int64_t want = ref_eval(*t, env), got = c.evaluate(e, env_map);
          if (want != got) {
            ok = false;
            std::string where;
            for (int i = 0; i < kNumIdxSyms; ++i)
              where += std::string(kIdxSyms[i].name) + "=" + std::to_string(env[i]) + " ";
            ADD_FAILURE() << tree_str(*t, kIdxSyms) << " -> " << c.str(e) << " at " << where
                          << "want " << want << " got " << got;
          }
        },
        kIdxSyms, kNumIdxSyms);
    if (!ok) break;
    ASSERT_EQ(c.parse(c.str(e)), e) << c.str(e);
  }
}

}  // namespace
}  // namespace coil::sym
