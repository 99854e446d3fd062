// sym::Context: hash-consed nodes, canonical construction, simplification.
//
// Canonical form (what every constructor returns):
//   * Sums are flattened into terms coef*monomial; like monomials are combined, zero terms
//     dropped, terms sorted by compare_expr, the constant term last.
//   * Products are flattened; constants fold into one coefficient (operand 0 of the Mul).
//     A product is distributed over sums (polynomial normal form: (a + b)*c = a*c + b*c,
//     (a + 1)*(b + 1) = a*b + a + b + 1) as long as the expansion has at most
//     kMaxExpandedTerms terms; beyond that the product of sums is kept unexpanded, so nothing
//     blows up exponentially. Multiplying by a constant always distributes.
//   * FloorDiv/Mod/Min/Max/comparisons are atoms of the polynomial; they are simplified from
//     the operands' structure and the symbols' ranges when built (see floordiv() and mod()).
// Operand order uses compare_expr, a total structural order (kind, name, value, operands),
// so the canonical form, and thus str(), does not depend on creation order or pointers.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "coil/support/error.h"
#include "expr_impl.h"

namespace coil::sym {

namespace {

constexpr size_t kMaxExpandedTerms = 256;
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

using i128 = __int128;
int64_t sat(i128 v) {
  if (v > kI64Max) return kI64Max;
  if (v < kI64Min) return kI64Min;
  return static_cast<int64_t>(v);
}
// Floor division of 128-bit values (b != 0).
i128 floordiv128(i128 a, i128 b) {
  i128 q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int kind_rank(ExprKind k) {
  switch (k) {
    case ExprKind::Const:
      return 0;
    case ExprKind::Symbol:
      return 1;
    case ExprKind::FloorDiv:
      return 2;
    case ExprKind::Mod:
      return 3;
    case ExprKind::Min:
      return 4;
    case ExprKind::Max:
      return 5;
    case ExprKind::Add:
      return 6;
    case ExprKind::Mul:
      return 7;
    case ExprKind::Lt:
      return 8;
    case ExprKind::Le:
      return 9;
    case ExprKind::Eq:
      return 10;
    case ExprKind::Ne:
      return 11;
  }
  return 12;
}

// "i2" < "i10": compare the alphabetic prefix, then the trailing number.
int compare_names(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    size_t p = s.size();
    while (p > 0 && s[p - 1] >= '0' && s[p - 1] <= '9') --p;
    return p;
  };
  size_t pa = split(a), pb = split(b);
  int c = a.compare(0, pa, b, 0, pb);
  if (c != 0) return c < 0 ? -1 : 1;
  // Compare the digit runs numerically (by length after stripping leading zeros, then text).
  auto digits = [](const std::string& s, size_t p) {
    while (p + 1 < s.size() && s[p] == '0') ++p;
    return std::string_view(s).substr(p);
  };
  std::string_view da = digits(a, pa), db = digits(b, pb);
  if (da.size() != db.size()) return da.size() < db.size() ? -1 : 1;
  c = da.compare(db);
  if (c != 0) return c < 0 ? -1 : 1;
  c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// Compare two non-Mul, non-Const atoms.
int compare_atoms(Expr a, Expr b) {
  if (a == b) return 0;
  int ra = kind_rank(a->kind), rb = kind_rank(b->kind);
  if (ra != rb) return ra < rb ? -1 : 1;
  if (a->kind == ExprKind::Symbol) return compare_names(a->name, b->name);
  size_t n = std::min(a->operands.size(), b->operands.size());
  for (size_t i = 0; i < n; ++i) {
    int c = compare_expr(a->operands[i], b->operands[i]);
    if (c != 0) return c;
  }
  if (a->operands.size() != b->operands.size())
    return a->operands.size() < b->operands.size() ? -1 : 1;
  return 0;
}

}  // namespace

void factors_of(Expr e, std::vector<Expr>& out) {
  if (e->kind == ExprKind::Const) return;
  if (e->kind == ExprKind::Mul) {
    for (Expr f : e->operands)
      if (!f->is_const()) out.push_back(f);
    return;
  }
  out.push_back(e);
}

int64_t coef_of(Expr e) {
  if (e->kind == ExprKind::Const) return e->value;
  if (e->kind == ExprKind::Mul && e->operands[0]->is_const()) return e->operands[0]->value;
  return 1;
}

// Every expression is keyed as (factor list, coefficient): Const c -> ([], c), a Mul ->
// (its non-constant factors, its coefficient), anything else x -> ([x], 1). Keys compare
// lexicographically (factors first). The key is injective, so this is a total order.
int compare_expr(Expr a, Expr b) {
  if (a == b) return 0;
  bool simple_a = a->kind != ExprKind::Mul && a->kind != ExprKind::Const;
  bool simple_b = b->kind != ExprKind::Mul && b->kind != ExprKind::Const;
  if (simple_a && simple_b) return compare_atoms(a, b);
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const)
    return a->value < b->value ? -1 : (a->value > b->value ? 1 : 0);
  // General case: walk the factor lists without materializing them.
  auto nth = [](Expr e, size_t i) -> Expr {
    if (e->kind == ExprKind::Const) return nullptr;
    if (e->kind != ExprKind::Mul) return i == 0 ? e : nullptr;
    size_t off = e->operands[0]->is_const() ? 1 : 0;
    return i + off < e->operands.size() ? e->operands[i + off] : nullptr;
  };
  for (size_t i = 0;; ++i) {
    Expr fa = nth(a, i), fb = nth(b, i);
    if (!fa && !fb) break;
    if (!fa) return -1;
    if (!fb) return 1;
    int c = compare_atoms(fa, fb);
    if (c != 0) return c;
  }
  int64_t ca = coef_of(a), cb = coef_of(b);
  return ca < cb ? -1 : (ca > cb ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------
// Impl

Expr Context::Impl::intern(ExprKind kind, int64_t value, std::string_view name,
                           std::vector<Expr> operands) {
  ExprNode tmp;
  tmp.kind = kind;
  tmp.value = value;
  tmp.name = std::string(name);
  tmp.operands = std::move(operands);
  size_t h = static_cast<size_t>(kind) * 0x9e3779b97f4a7c15ULL;
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(std::hash<int64_t>()(value));
  if (!tmp.name.empty()) mix(std::hash<std::string>()(tmp.name));
  for (Expr o : tmp.operands) mix(o->hash);
  tmp.hash = h;
  auto it = table.find(&tmp);
  if (it != table.end()) return *it;
  tmp.id = static_cast<int>(nodes.size());
  nodes.push_back(std::move(tmp));
  Expr e = &nodes.back();
  table.insert(e);
  return e;
}

int64_t Context::Impl::multiple(Expr symbol) const {
  auto it = multiples.find(symbol);
  return it == multiples.end() ? 1 : it->second;
}

bool Context::Impl::exact_quotient_factor(int64_t& coef, std::vector<Expr>& factors) {
  if (multiples.empty()) return false;
  bool changed = false;
  for (Expr& f : factors) {
    if (f->kind != ExprKind::FloorDiv || !f->operands[0]->is_symbol() ||
        !f->operands[1]->is_const())
      continue;
    const int64_t k = f->operands[1]->value;
    if (k <= 0 || coef % k != 0 || multiple(f->operands[0]) % k != 0) continue;
    coef /= k;
    f = f->operands[0];
    changed = true;
  }
  return changed;
}

Expr Context::Impl::make_term(int64_t coef, std::vector<Expr> factors) {
  if (coef == 0) return constant(0);
  if (factors.empty()) return constant(coef);
  exact_quotient_factor(coef, factors);
  if (factors.size() == 1 && coef == 1) return factors[0];
  std::sort(factors.begin(), factors.end(), expr_less);
  if (coef != 1) factors.insert(factors.begin(), constant(coef));
  return intern(ExprKind::Mul, 0, {}, std::move(factors));
}

Expr Context::Impl::make_term(int64_t coef, Expr mono) {
  if (!mono) return constant(coef);
  if (coef == 1) return mono;
  std::vector<Expr> f;
  factors_of(mono, f);
  return make_term(coef, std::move(f));
}

Term Context::Impl::split_term(Expr t) {
  if (t->is_const()) return {t->value, nullptr};
  if (t->kind == ExprKind::Mul && t->operands[0]->is_const()) {
    int64_t c = t->operands[0]->value;
    if (t->operands.size() == 2) return {c, t->operands[1]};
    std::vector<Expr> rest(t->operands.begin() + 1, t->operands.end());
    return {c, intern(ExprKind::Mul, 0, {}, std::move(rest))};
  }
  return {1, t};
}

void Context::Impl::append_terms(Expr e, int64_t scale, std::vector<Term>& out) {
  if (e->kind == ExprKind::Add) {
    for (Expr t : e->operands) append_terms(t, scale, out);
    return;
  }
  Term t = split_term(e);
  t.coef = checked_mul(t.coef, scale);
  out.push_back(t);
}

Expr Context::Impl::multiply_monomials(Expr a, Expr b) {
  std::vector<Expr> f;
  factors_of(a, f);
  factors_of(b, f);
  return make_term(checked_mul(coef_of(a), coef_of(b)), std::move(f));
}

}  // namespace coil::sym

namespace coil::sym {

namespace {

bool has_mod_factor(Expr mono) {
  if (mono->kind == ExprKind::Mod) return true;
  if (mono->kind != ExprKind::Mul) return false;
  for (Expr f : mono->operands)
    if (f->kind == ExprKind::Mod) return true;
  return false;
}

// Removes the multiset `sub` from `from` (both unsorted); false if `sub` is not contained.
bool remove_factors(std::vector<Expr>& from, const std::vector<Expr>& sub) {
  for (Expr f : sub) {
    auto it = std::find(from.begin(), from.end(), f);
    if (it == from.end()) return false;
    from.erase(it);
  }
  return true;
}

}  // namespace

Expr Context::Impl::build_sum(std::vector<Term> terms) {
  int64_t c = 0;
  std::vector<Term> combined;
  combined.reserve(terms.size());
  std::unordered_map<Expr, size_t> index;
  const bool use_map = terms.size() > 16;
  for (const Term& t : terms) {
    if (!t.mono) {
      c = checked_add(c, t.coef);
      continue;
    }
    size_t pos = combined.size();
    if (use_map) {
      auto [it, inserted] = index.emplace(t.mono, pos);
      pos = it->second;
    } else {
      for (size_t k = 0; k < combined.size(); ++k)
        if (combined[k].mono == t.mono) pos = k;
    }
    if (pos == combined.size())
      combined.push_back(t);
    else
      combined[pos].coef = checked_add(combined[pos].coef, t.coef);
  }
  std::erase_if(combined, [](const Term& t) { return t.coef == 0; });

  // 3 * (s // 3) is s where s is a multiple of 3 (set_multiple); merging terms may have made
  // a coefficient divisible, so the rewritten terms are merged again.
  if (!multiples.empty()) {
    bool changed = false;
    for (Term& t : combined) {
      std::vector<Expr> fs;
      factors_of(t.mono, fs);
      int64_t coef = t.coef;
      if (!exact_quotient_factor(coef, fs)) continue;
      Term nt = split_term(make_term(coef, std::move(fs)));
      t = nt;
      changed = true;
    }
    if (changed) {
      if (c != 0) combined.push_back({c, nullptr});
      return build_sum(std::move(combined));
    }
  }

  // (y // m) * m * k + (y % m) * k -> y * k, where k is any cofactor (constant or symbolic).
  // Only worth trying when some term has a FloorDiv factor (the partner always has one).
  bool any_floordiv = false;
  for (const Term& t : combined) {
    if (t.mono->kind == ExprKind::FloorDiv) any_floordiv = true;
    if (t.mono->kind == ExprKind::Mul)
      for (Expr f : t.mono->operands) any_floordiv |= f->kind == ExprKind::FloorDiv;
  }
  for (size_t i = 0; any_floordiv && i < combined.size(); ++i) {
    if (!has_mod_factor(combined[i].mono)) continue;
    std::vector<Expr> fs;
    factors_of(combined[i].mono, fs);
    for (size_t fi = 0; fi < fs.size(); ++fi) {
      Expr f = fs[fi];
      if (f->kind != ExprKind::Mod || (fi > 0 && fs[fi - 1] == f)) continue;
      std::vector<Expr> cof_factors = fs;
      cof_factors.erase(cof_factors.begin() + fi);
      Expr cof = make_term(combined[i].coef, cof_factors);
      Expr y = f->operands[0], m = f->operands[1];
      Expr target = build_product({cof, m, self->floordiv(y, m)});
      if (target->kind == ExprKind::Add || target->is_const()) continue;
      Term tt = split_term(target);
      for (size_t j = 0; j < combined.size(); ++j) {
        if (j == i || combined[j].mono != tt.mono || combined[j].coef != tt.coef) continue;
        std::vector<Term> next;
        next.reserve(combined.size() + 2);
        for (size_t k = 0; k < combined.size(); ++k)
          if (k != i && k != j) next.push_back(combined[k]);
        if (c != 0) next.push_back({c, nullptr});
        append_terms(build_product({cof, y}), 1, next);
        return build_sum(std::move(next));
      }
    }
  }

  if (combined.empty()) return constant(c);
  if (combined.size() == 1 && c == 0) return make_term(combined[0].coef, combined[0].mono);
  std::sort(combined.begin(), combined.end(),
            [](const Term& a, const Term& b) { return expr_less(a.mono, b.mono); });
  std::vector<Expr> ops;
  ops.reserve(combined.size() + 1);
  for (const Term& t : combined) ops.push_back(make_term(t.coef, t.mono));
  if (c != 0) ops.push_back(constant(c));
  return intern(ExprKind::Add, 0, {}, std::move(ops));
}

Expr Context::Impl::build_product(std::vector<Expr> factors) {
  int64_t coef = 1;
  std::vector<Expr> atoms, sums;
  for (Expr f : factors) {
    if (f->is_const()) {
      coef = checked_mul(coef, f->value);
    } else if (f->kind == ExprKind::Mul) {
      for (Expr g : f->operands) {
        if (g->is_const())
          coef = checked_mul(coef, g->value);
        else if (g->kind == ExprKind::Add)
          sums.push_back(g);  // an unexpanded product of sums
        else
          atoms.push_back(g);
      }
    } else if (f->kind == ExprKind::Add) {
      sums.push_back(f);
    } else {
      atoms.push_back(f);
    }
  }
  if (coef == 0) return constant(0);
  if (sums.empty()) return make_term(coef, std::move(atoms));
  size_t n = 1;
  for (Expr s : sums) {
    n *= s->operands.size();
    if (n > kMaxExpandedTerms) break;
  }
  if (n > kMaxExpandedTerms) {
    atoms.insert(atoms.end(), sums.begin(), sums.end());
    return make_term(coef, std::move(atoms));
  }
  std::vector<Expr> cur{make_term(coef, std::move(atoms))};
  for (Expr s : sums) {
    std::vector<Expr> next;
    next.reserve(cur.size() * s->operands.size());
    for (Expr p : cur)
      for (Expr t : s->operands) next.push_back(multiply_monomials(p, t));
    cur = std::move(next);
  }
  std::vector<Term> terms;
  terms.reserve(cur.size());
  for (Expr e : cur) append_terms(e, 1, terms);
  return build_sum(std::move(terms));
}

Range Context::Impl::bounds(Expr e) {
  switch (e->kind) {
    case ExprKind::Const:
      return {e->value, e->value};
    case ExprKind::Symbol: {
      auto it = ranges.find(e);
      return it == ranges.end() ? Range{} : it->second;
    }
    default:
      break;
  }
  auto cached = bounds_cache.find(e);
  if (cached != bounds_cache.end()) return cached->second;
  Range r;
  auto op = [&](int i) { return bounds(e->operands[i]); };
  switch (e->kind) {
    case ExprKind::Add: {
      i128 lo = 0, hi = 0;
      for (Expr o : e->operands) {
        Range b = bounds(o);
        lo = sat(lo + b.lo);
        hi = sat(hi + b.hi);
      }
      r = {sat(lo), sat(hi)};
      break;
    }
    case ExprKind::Mul: {
      r = op(0);
      for (size_t i = 1; i < e->operands.size(); ++i) {
        Range b = bounds(e->operands[i]);
        i128 c[4] = {i128(r.lo) * b.lo, i128(r.lo) * b.hi, i128(r.hi) * b.lo, i128(r.hi) * b.hi};
        r = {sat(*std::min_element(c, c + 4)), sat(*std::max_element(c, c + 4))};
      }
      break;
    }
    case ExprKind::FloorDiv: {
      Range a = op(0), b = op(1);
      if (b.lo > 0 || b.hi < 0) {
        i128 c[4] = {floordiv128(a.lo, b.lo), floordiv128(a.lo, b.hi), floordiv128(a.hi, b.lo),
                     floordiv128(a.hi, b.hi)};
        r = {sat(*std::min_element(c, c + 4)), sat(*std::max_element(c, c + 4))};
      } else {
        i128 m = std::max(-i128(a.lo), i128(a.hi));
        r = {sat(-m), sat(m)};
      }
      break;
    }
    case ExprKind::Mod: {
      Range a = op(0), b = op(1);
      if (b.lo > 0) {
        if (a.lo >= 0 && a.hi < b.lo) {
          r = a;
        } else {
          r = {0, b.hi - 1};
          if (a.lo >= 0) r.hi = std::min(r.hi, a.hi);
        }
      } else if (b.hi < 0) {
        r = {b.lo + 1, 0};
        if (a.hi <= 0) r.lo = std::max(r.lo, a.lo);
      } else {
        i128 m = std::max(-i128(b.lo), i128(b.hi)) - 1;
        r = {sat(-m), sat(m)};
      }
      break;
    }
    case ExprKind::Min: {
      Range a = op(0), b = op(1);
      r = {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
      break;
    }
    case ExprKind::Max: {
      Range a = op(0), b = op(1);
      r = {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
      break;
    }
    case ExprKind::Lt:
    case ExprKind::Le:
    case ExprKind::Eq:
    case ExprKind::Ne: {
      Range a = op(0), b = op(1);
      bool is_true = false, is_false = false;
      switch (e->kind) {
        case ExprKind::Lt:
          is_true = a.hi < b.lo;
          is_false = a.lo >= b.hi;
          break;
        case ExprKind::Le:
          is_true = a.hi <= b.lo;
          is_false = a.lo > b.hi;
          break;
        case ExprKind::Eq:
          is_true = a.is_point() && b.is_point() && a.lo == b.lo;
          is_false = a.hi < b.lo || b.hi < a.lo;
          break;
        default:
          is_false = a.is_point() && b.is_point() && a.lo == b.lo;
          is_true = a.hi < b.lo || b.hi < a.lo;
          break;
      }
      r = is_true ? Range{1, 1} : (is_false ? Range{0, 0} : Range{0, 1});
      break;
    }
    default:
      COIL_INTERNAL_ERROR() << "bounds: unexpected kind";
  }
  bounds_cache.emplace(e, r);
  return r;
}

// Lower bound of e using the symbolic upper bounds: if e is nonincreasing in an index symbol i
// with 0 <= i < U (every term containing i has a negative coefficient, and i occurs only as a
// plain factor next to non-negative factors), then e >= e[i := U - 1]. Substituting such
// symbols and taking numeric bounds gives a lower bound that numeric ranges alone miss, e.g.
// s1 - i1 >= 1 when i1 < s1.
int64_t Context::Impl::lower_bound(Expr e) {
  int64_t best = bounds(e).lo;
  if (upper.empty() || e->operands.empty()) return best;
  Expr cur = e;
  for (int round = 0; round < 4; ++round) {
    std::vector<Term> terms;
    append_terms(cur, 1, terms);
    std::unordered_map<Expr, Expr> sub;
    std::vector<Expr> fs;
    for (const Term& t : terms) {
      if (!t.mono) continue;
      fs.clear();
      factors_of(t.mono, fs);
      for (Expr s : fs) {
        if (!s->is_symbol() || sub.count(s)) continue;
        auto ub = upper.find(s);
        if (ub == upper.end()) continue;
        bool ok = true;
        std::vector<Expr> gs;
        for (const Term& u : terms) {
          if (!u.mono) continue;
          gs.clear();
          factors_of(u.mono, gs);
          bool has = false;
          for (Expr g : gs) {
            if (g == s)
              has = true;
            else if (!g->is_symbol() && self->depends_on(g, s))
              ok = false;
          }
          if (!ok) break;
          if (!has) continue;
          if (u.coef > 0) ok = false;
          for (Expr g : gs)
            if (g != s && bounds(g).lo < 0) ok = false;
          if (!ok) break;
        }
        if (ok) sub.emplace(s, self->sub(ub->second, one));
      }
    }
    if (sub.empty()) break;
    cur = self->substitute(cur, sub);
    best = std::max(best, bounds(cur).lo);
    if (cur->operands.empty()) break;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Context

Context::Context() : impl_(std::make_unique<Impl>()) {
  impl_->self = this;
  impl_->zero = impl_->constant(0);
  impl_->one = impl_->constant(1);
}
Context::~Context() = default;

Expr Context::constant(int64_t v) { return impl_->constant(v); }

Expr Context::symbol(std::string_view name, Range range) {
  auto it = impl_->symbols.find(std::string(name));
  if (it != impl_->symbols.end()) return it->second;
  COIL_USER_CHECK(!name.empty()) << "empty symbol name";
  COIL_USER_CHECK(range.lo <= range.hi)
      << "empty range [" << range.lo << ", " << range.hi << "] for " << name;
  Expr e = impl_->intern(ExprKind::Symbol, 0, name, {});
  impl_->symbols.emplace(std::string(name), e);
  impl_->ranges[e] = range;
  return e;
}

bool Context::has_symbol(std::string_view name) const {
  return impl_->symbols.count(std::string(name)) != 0;
}

void Context::set_range(Expr symbol, Range range) {
  COIL_CHECK(symbol && symbol->is_symbol()) << "set_range on a non-symbol";
  COIL_USER_CHECK(range.lo <= range.hi)
      << "empty range [" << range.lo << ", " << range.hi << "] for " << symbol->name;
  impl_->ranges[symbol] = range;
  impl_->bounds_cache.clear();
}

void Context::set_upper_bound(Expr symbol, Expr upper) {
  COIL_CHECK(symbol && symbol->is_symbol()) << "set_upper_bound on a non-symbol";
  COIL_CHECK(!depends_on(upper, symbol)) << "upper bound of " << symbol->name << " uses itself";
  Range r = impl_->bounds(symbol);
  Range u = impl_->bounds(upper);
  r.lo = std::max<int64_t>(r.lo, 0);
  if (u.hi < kI64Max) r.hi = std::min(r.hi, u.hi - 1);
  COIL_USER_CHECK(r.lo <= r.hi) << "empty range for " << symbol->name << " < " << str(upper);
  impl_->upper[symbol] = upper;
  set_range(symbol, r);
}

Expr Context::upper_bound(Expr symbol) const {
  auto it = impl_->upper.find(symbol);
  return it == impl_->upper.end() ? nullptr : it->second;
}

void Context::set_multiple(Expr symbol, int64_t m) {
  COIL_CHECK(symbol && symbol->is_symbol()) << "set_multiple on a non-symbol";
  COIL_USER_CHECK(m > 0) << "multiple " << m << " for " << symbol->name << " is not positive";
  if (m == 1) return;
  Range r = impl_->bounds(symbol);
  auto up = [m](int64_t v) { return v <= 0 ? 0 : (v + m - 1) / m * m; };
  r.lo = up(r.lo);
  if (r.hi < kMaxSize) r.hi = r.hi / m * m;
  COIL_USER_CHECK(r.lo <= r.hi) << "no multiple of " << m << " in the range of " << symbol->name;
  impl_->multiples[symbol] = m;
  set_range(symbol, r);
}

int64_t Context::symbol_multiple(Expr symbol) const { return impl_->multiple(symbol); }

Range Context::symbol_range(Expr symbol) const {
  COIL_CHECK(symbol && symbol->is_symbol()) << "symbol_range on a non-symbol";
  return impl_->bounds(symbol);
}

Expr Context::add(Expr a, Expr b) {
  if (a->is_const() && b->is_const()) return constant(checked_add(a->value, b->value));
  if (a->is_const() && a->value == 0) return b;
  if (b->is_const() && b->value == 0) return a;
  std::vector<Term> terms;
  impl_->append_terms(a, 1, terms);
  impl_->append_terms(b, 1, terms);
  return impl_->build_sum(std::move(terms));
}

Expr Context::sub(Expr a, Expr b) {
  if (a->is_const() && b->is_const())
    return constant(checked_add(a->value, checked_mul(b->value, -1)));
  if (a == b) return zero();
  std::vector<Term> terms;
  impl_->append_terms(a, 1, terms);
  impl_->append_terms(b, -1, terms);
  return impl_->build_sum(std::move(terms));
}

Expr Context::neg(Expr a) {
  if (a->is_const()) return constant(checked_mul(a->value, -1));
  std::vector<Term> terms;
  impl_->append_terms(a, -1, terms);
  return impl_->build_sum(std::move(terms));
}

Expr Context::mul(Expr a, Expr b) {
  if (a->is_const() && b->is_const()) return constant(checked_mul(a->value, b->value));
  if (a->is_const() && a->value == 1) return b;
  if (b->is_const() && b->value == 1) return a;
  return impl_->build_product({a, b});
}

Expr Context::sum(std::span<const Expr> terms) {
  std::vector<Term> ts;
  for (Expr t : terms) impl_->append_terms(t, 1, ts);
  return impl_->build_sum(std::move(ts));
}

Expr Context::product(std::span<const Expr> factors) {
  return impl_->build_product(std::vector<Expr>(factors.begin(), factors.end()));
}

namespace {}  // namespace

bool Context::Impl::split_divisible(Expr a, int64_t cb, const std::vector<Expr>& bf,
                                    std::vector<Term>& q, std::vector<Term>& r) {
  Context::Impl& impl = *this;
  std::vector<Term> terms;
  impl.append_terms(a, 1, terms);
  for (const Term& t : terms) {
    std::vector<Expr> tf;
    if (t.mono) factors_of(t.mono, tf);
    if (t.mono && remove_factors(tf, bf)) {
      if (t.coef % cb == 0) {
        q.push_back(impl.split_term(impl.make_term(t.coef / cb, std::move(tf))));
        continue;
      }
      // c * s / cb with s a multiple of cb / gcd(c, cb): (c / g) * (s // need), exactly.
      const int64_t g = std::gcd(t.coef < 0 ? -t.coef : t.coef, cb), need = cb / g;
      auto s = std::find_if(tf.begin(), tf.end(),
                            [&](Expr f) { return f->is_symbol() && multiple(f) % need == 0; });
      if (s != tf.end()) {
        *s = intern(ExprKind::FloorDiv, 0, {}, {*s, constant(need)});
        q.push_back(impl.split_term(impl.make_term(t.coef / g, std::move(tf))));
        continue;
      }
    }
    r.push_back(t);
  }
  return !q.empty();
}

// For a divisor c*B (c a positive constant, B positive: 1 or a product of symbols): finds g > 1
// dividing c such that the terms split into G (coefficients divisible by g) and a nonempty R
// whose sum lies in [0, g). Then
//   (G + R) // (c*B) == (G/g) // (c/g*B)  and  (G + R) mod (c*B) == g * ((G/g) mod (c/g*B)) + R,
// because 0 <= R/g < 1 never moves a floor of an integer plus R/g. This is how
// (4096*i + r) // (127*4096) becomes i // 127 for r < 4096 (a row index of a reshaped buffer).
bool Context::Impl::split_small_remainder(const std::vector<Term>& terms, int64_t c, int64_t* g,
                                          std::vector<Term>* quotient, std::vector<Term>* rest) {
  std::vector<int64_t> candidates;
  for (const Term& t : terms) {
    int64_t d = std::gcd(c, t.coef < 0 ? -t.coef : t.coef);
    if (d > 1 && std::find(candidates.begin(), candidates.end(), d) == candidates.end())
      candidates.push_back(d);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (int64_t d : candidates) {
    quotient->clear();
    rest->clear();
    for (const Term& t : terms) {
      if (t.coef % d == 0) {
        Term q = t;
        q.coef /= d;
        quotient->push_back(q);
      } else {
        rest->push_back(t);
      }
    }
    if (quotient->empty() || rest->empty()) continue;
    Range rr = bounds(build_sum(std::vector<Term>(*rest)));
    if (rr.lo >= 0 && rr.hi < d) {
      *g = d;
      return true;
    }
  }
  return false;
}

namespace {

int64_t content_gcd(const std::vector<Term>& terms, int64_t g) {
  for (const Term& t : terms) {
    g = std::gcd(g, t.coef < 0 ? -t.coef : t.coef);
    if (g == 1) break;
  }
  return g;
}

bool divides(Expr b, Expr m) {
  int64_t cb = coef_of(b), cm = coef_of(m);
  if (cb == 0 || cm % cb != 0) return false;
  std::vector<Expr> bf, mf;
  factors_of(b, bf);
  factors_of(m, mf);
  return remove_factors(mf, bf);
}

}  // namespace

// The symbolic form of split_small_remainder: (8*s1*x0 + 8*x1 + x2) // (32*s1) is x0 // 4 when
// 0 <= 8*x1 + x2 < 8*s1, which the loop bound x1 < s1 proves (a head index of a reshaped
// [b*4, t, 8] attention tensor). Candidates g are the divisors of c shared with some term.
bool Context::Impl::split_symbolic_remainder(const std::vector<Term>& terms, int64_t c,
                                             const std::vector<Expr>& factors, int64_t* g,
                                             Expr* quotient, Expr* rest) {
  if (factors.empty() || terms.size() < 2) return false;
  std::vector<int64_t> candidates;
  for (const Term& t : terms) {
    int64_t d = std::gcd(c, t.coef < 0 ? -t.coef : t.coef);
    if (d >= 1 && std::find(candidates.begin(), candidates.end(), d) == candidates.end())
      candidates.push_back(d);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  Context& ctx = *self;
  for (int64_t d : candidates) {
    std::vector<Term> q, r;
    if (!split_divisible(build_sum(std::vector<Term>(terms)), d, factors, q, r) || r.empty())
      continue;
    Expr rs = build_sum(std::move(r));
    Expr G = make_term(d, factors);
    if (bounds(rs).lo >= 0 && ctx.provably_lt(rs, G)) {
      *g = d;
      *quotient = build_sum(std::move(q));
      *rest = rs;
      return true;
    }
  }
  return false;
}

// A sum divisor b = g*B' (g the content of its terms) splits like a monomial one:
// (4096*x0 + r) // (4096*s1 - 4096) is x0 // (s1 - 1) for 0 <= r < 4096 (a row of the
// [b*(t-1), vocab] logits that a language model's loss reads through a slice of [b, t, vocab]).
bool Context::Impl::split_sum_divisor(const std::vector<Term>& terms, Expr b, int64_t* g,
                                      std::vector<Term>* quotient, std::vector<Term>* rest,
                                      Expr* b_over_g) {
  if (b->kind != ExprKind::Add || bounds(b).lo <= 0) return false;
  std::vector<Term> bt;
  append_terms(b, 1, bt);
  int64_t content = content_gcd(bt, 0);
  if (content <= 1 || !split_small_remainder(terms, content, g, quotient, rest)) return false;
  for (Term& t : bt) t.coef /= *g;
  *b_over_g = build_sum(std::move(bt));
  return true;
}

Expr Context::floordiv(Expr a, Expr b) {
  if (b->is_const()) {
    int64_t c = b->value;
    COIL_USER_CHECK(c != 0) << "division by zero in " << str(a) << "//0";
    if (a->is_const()) return constant(py_floordiv(a->value, c));
    if (c == 1) return a;
    if (c < 0) return floordiv(neg(a), constant(checked_mul(c, -1)));
  }
  if (a->is_const() && a->value == 0) return zero();
  if (a == b) return one();
  if (coef_of(b) < 0) return floordiv(neg(a), neg(b));
  const int64_t cb = coef_of(b);
  std::vector<Expr> bf;
  factors_of(b, bf);
  std::vector<Term> q, r;
  if (impl_->split_divisible(a, cb, bf, q, r))
    return add(impl_->build_sum(std::move(q)), floordiv(impl_->build_sum(std::move(r)), b));
  // (g*a) // (g*b) -> a // b
  if (int64_t g = content_gcd(r, cb); g > 1) {
    for (Term& t : r) t.coef /= g;
    return floordiv(impl_->build_sum(std::move(r)), impl_->make_term(cb / g, bf));
  }
  // The divisor may be symbolic: (1024*x0 + x1) // (1024*s1) is x0 // s1 for x1 < 1024 (a
  // row of a [s0*s1, 1024] Linear output read through its [s0, s1, 1024] view).
  if (cb > 1 && impl_->bounds(b).lo > 0) {
    int64_t g = 0;
    std::vector<Term> quotient, rest;
    if (impl_->split_small_remainder(r, cb, &g, &quotient, &rest))
      return floordiv(impl_->build_sum(std::move(quotient)), impl_->make_term(cb / g, bf));
  }
  if (cb > 0 && !bf.empty() && impl_->bounds(b).lo > 0) {
    int64_t g = 0;
    Expr quotient = nullptr, rest = nullptr;
    if (impl_->split_symbolic_remainder(r, cb, bf, &g, &quotient, &rest))
      return floordiv(quotient, constant(cb / g));
  }
  {
    int64_t g = 0;
    std::vector<Term> quotient, rest;
    Expr bg = nullptr;
    if (impl_->split_sum_divisor(r, b, &g, &quotient, &rest, &bg))
      return floordiv(impl_->build_sum(std::move(quotient)), bg);
  }
  Range ra = impl_->bounds(a), rb = impl_->bounds(b);
  if (rb.lo > 0) {
    if (ra.lo >= 0 && provably_lt(a, b)) return zero();
    if (ra.hi < 0 && ra.lo >= -rb.lo) return constant(-1);
    if (b->is_const()) {
      int64_t lo = py_floordiv(ra.lo, b->value), hi = py_floordiv(ra.hi, b->value);
      if (lo == hi) return constant(lo);
    }
    // (x // d) // b -> x // (d*b) for positive d, b.
    if (a->kind == ExprKind::FloorDiv && impl_->bounds(a->operands[1]).lo > 0)
      return floordiv(a->operands[0], mul(a->operands[1], b));
  }
  return impl_->intern(ExprKind::FloorDiv, 0, {}, {a, b});
}

Expr Context::mod(Expr a, Expr b) {
  if (b->is_const()) {
    int64_t c = b->value;
    COIL_USER_CHECK(c != 0) << "modulo by zero in " << str(a) << " % 0";
    if (a->is_const()) return constant(py_mod(a->value, c));
    if (c == 1 || c == -1) return zero();
  }
  if (a->is_const() && a->value == 0) return zero();
  if (a == b) return zero();
  // a mod b = -((-a) mod (-b))
  if (coef_of(b) < 0) return neg(mod(neg(a), neg(b)));
  const int64_t cb = coef_of(b);
  std::vector<Expr> bf;
  factors_of(b, bf);
  std::vector<Term> q, r;
  if (impl_->split_divisible(a, cb, bf, q, r)) return mod(impl_->build_sum(std::move(r)), b);
  // (g*a) mod (g*b) -> g * (a mod b)
  if (int64_t g = content_gcd(r, cb); g > 1) {
    for (Term& t : r) t.coef /= g;
    return mul(constant(g), mod(impl_->build_sum(std::move(r)), impl_->make_term(cb / g, bf)));
  }
  if (cb > 1 && impl_->bounds(b).lo > 0) {
    int64_t g = 0;
    std::vector<Term> quotient, rest;
    if (impl_->split_small_remainder(r, cb, &g, &quotient, &rest)) {
      Expr q = mod(impl_->build_sum(std::move(quotient)), impl_->make_term(cb / g, bf));
      return add(mul(constant(g), q), impl_->build_sum(std::move(rest)));
    }
  }
  if (cb > 0 && !bf.empty() && impl_->bounds(b).lo > 0) {
    int64_t g = 0;
    Expr quotient = nullptr, rest = nullptr;
    if (impl_->split_symbolic_remainder(r, cb, bf, &g, &quotient, &rest))
      return add(mul(impl_->make_term(g, bf), mod(quotient, constant(cb / g))), rest);
  }
  {
    int64_t g = 0;
    std::vector<Term> quotient, rest;
    Expr bg = nullptr;
    if (impl_->split_sum_divisor(r, b, &g, &quotient, &rest, &bg)) {
      Expr q = mod(impl_->build_sum(std::move(quotient)), bg);
      return add(mul(constant(g), q), impl_->build_sum(std::move(rest)));
    }
  }
  Range ra = impl_->bounds(a), rb = impl_->bounds(b);
  if (rb.lo > 0) {
    if (ra.lo >= 0 && provably_lt(a, b)) return a;
    if (b->is_const()) {
      int64_t lo = py_floordiv(ra.lo, b->value), hi = py_floordiv(ra.hi, b->value);
      if (lo == hi) return sub(a, constant(checked_mul(lo, b->value)));
    }
  }
  // (x mod m) mod b -> x mod b when b divides m.
  if (a->kind == ExprKind::Mod && divides(b, a->operands[1])) return mod(a->operands[0], b);
  return impl_->intern(ExprKind::Mod, 0, {}, {a, b});
}

Expr Context::min(Expr a, Expr b) {
  if (a->is_const() && b->is_const()) return a->value <= b->value ? a : b;
  if (a == b) return a;
  if (provably_le(a, b)) return a;
  if (provably_le(b, a)) return b;
  if (expr_less(b, a)) std::swap(a, b);
  return impl_->intern(ExprKind::Min, 0, {}, {a, b});
}

Expr Context::max(Expr a, Expr b) {
  if (a->is_const() && b->is_const()) return a->value >= b->value ? a : b;
  if (a == b) return a;
  if (provably_le(a, b)) return b;
  if (provably_le(b, a)) return a;
  if (expr_less(b, a)) std::swap(a, b);
  return impl_->intern(ExprKind::Max, 0, {}, {a, b});
}

Expr Context::lt(Expr a, Expr b) {
  if (provably_lt(a, b)) return one();
  if (provably_le(b, a)) return zero();
  return impl_->intern(ExprKind::Lt, 0, {}, {a, b});
}

Expr Context::le(Expr a, Expr b) {
  if (provably_le(a, b)) return one();
  if (provably_lt(b, a)) return zero();
  return impl_->intern(ExprKind::Le, 0, {}, {a, b});
}

Expr Context::eq(Expr a, Expr b) {
  if (a == b) return one();
  if (provably_lt(a, b) || provably_lt(b, a)) return zero();
  if (provably_eq(a, b)) return one();
  if (expr_less(b, a)) std::swap(a, b);
  return impl_->intern(ExprKind::Eq, 0, {}, {a, b});
}

Expr Context::ne(Expr a, Expr b) {
  if (a == b) return zero();
  if (provably_lt(a, b) || provably_lt(b, a)) return one();
  if (provably_eq(a, b)) return zero();
  if (expr_less(b, a)) std::swap(a, b);
  return impl_->intern(ExprKind::Ne, 0, {}, {a, b});
}

// ---------------------------------------------------------------------------------------------
// Queries

Range Context::bounds(Expr e) const { return impl_->bounds(e); }

std::optional<int64_t> Context::as_const(Expr e) const {
  if (e->is_const()) return e->value;
  return std::nullopt;
}

bool Context::provably_eq(Expr a, Expr b) const {
  if (a == b) return true;
  Range d = impl_->bounds(impl_->self->sub(a, b));
  return d.lo == 0 && d.hi == 0;
}

bool Context::provably_lt(Expr a, Expr b) const {
  Range ra = impl_->bounds(a), rb = impl_->bounds(b);
  if (ra.hi < rb.lo) return true;
  if (a == b || ra.lo >= rb.hi) return false;
  // With a constant side, bounds(b - a) equals the numeric answer unless symbolic bounds help.
  if ((a->is_const() || b->is_const()) && impl_->upper.empty()) return false;
  return impl_->lower_bound(impl_->self->sub(b, a)) > 0;
}

bool Context::provably_le(Expr a, Expr b) const {
  if (a == b) return true;
  Range ra = impl_->bounds(a), rb = impl_->bounds(b);
  if (ra.hi <= rb.lo) return true;
  if (ra.lo > rb.hi) return false;
  if ((a->is_const() || b->is_const()) && impl_->upper.empty()) return false;
  return impl_->lower_bound(impl_->self->sub(b, a)) >= 0;
}

namespace {
void collect_symbols(Expr e, std::unordered_set<Expr>& seen, std::vector<Expr>& out) {
  if (!seen.insert(e).second) return;
  if (e->is_symbol()) out.push_back(e);
  for (Expr o : e->operands) collect_symbols(o, seen, out);
}
}  // namespace

std::vector<Expr> Context::free_symbols(Expr e) const {
  std::unordered_set<Expr> seen;
  std::vector<Expr> out;
  collect_symbols(e, seen, out);
  std::sort(out.begin(), out.end(), [](Expr a, Expr b) { return a->id < b->id; });
  return out;
}

bool Context::depends_on(Expr e, Expr symbol) const {
  if (e == symbol) return true;
  std::vector<Expr> stack{e};
  std::unordered_set<Expr> seen{e};
  while (!stack.empty()) {
    Expr x = stack.back();
    stack.pop_back();
    if (x == symbol) return true;
    for (Expr o : x->operands)
      if (seen.insert(o).second) stack.push_back(o);
  }
  return false;
}

}  // namespace coil::sym
