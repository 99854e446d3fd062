// sym::Context::str and parse.
//
// Printing uses Python-like syntax. Operands of //, % and factors of a product are
// parenthesized unless they are atoms (symbols, non-negative constants, min/max calls), so the
// text reads unambiguously: 4*(i0//4) + i0 % 4, (i0 + 1)//4. Sums print negative terms with
// " - ". parse() accepts the same syntax plus unary minus, > and >=, and builds through the
// canonicalizing constructors, so parse(str(e)) == e.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>
#include <vector>

#include "coil/support/error.h"
#include "expr_impl.h"

namespace coil::sym {

namespace {

bool is_atom(Expr e) {
  switch (e->kind) {
    case ExprKind::Const:
      return e->value >= 0;
    case ExprKind::Symbol:
    case ExprKind::Min:
    case ExprKind::Max:
      return true;
    default:
      return false;
  }
}

bool is_comparison(Expr e) {
  return e->kind == ExprKind::Lt || e->kind == ExprKind::Le || e->kind == ExprKind::Eq ||
         e->kind == ExprKind::Ne;
}

void print(Expr e, std::string& out);

void print_wrapped(Expr e, std::string& out) {
  if (is_atom(e)) {
    print(e, out);
  } else {
    out += '(';
    print(e, out);
    out += ')';
  }
}

// coef * mono (mono non-null); coef may be negative.
void print_term(int64_t coef, Expr mono, std::string& out) {
  if (coef == -1) {
    out += '-';
  } else if (coef != 1) {
    out += std::to_string(coef);
    out += '*';
  }
  std::vector<Expr> fs;
  factors_of(mono, fs);
  for (size_t i = 0; i < fs.size(); ++i) {
    if (i > 0) out += '*';
    print_wrapped(fs[i], out);
  }
}

void print(Expr e, std::string& out) {
  switch (e->kind) {
    case ExprKind::Const:
      out += std::to_string(e->value);
      return;
    case ExprKind::Symbol:
      out += e->name;
      return;
    case ExprKind::Add: {
      for (size_t i = 0; i < e->operands.size(); ++i) {
        Expr t = e->operands[i];
        int64_t c = coef_of(t);
        if (i == 0) {
          if (t->is_const())
            out += std::to_string(c);
          else
            print_term(c, t, out);
          continue;
        }
        // -c overflows only for INT64_MIN; print it as "+ -9223372036854775808".
        bool negative = c < 0 && c != std::numeric_limits<int64_t>::min();
        out += negative ? " - " : " + ";
        if (t->is_const())
          out += std::to_string(negative ? -c : c);
        else
          print_term(negative ? -c : c, t, out);
      }
      return;
    }
    case ExprKind::Mul:
      print_term(coef_of(e), e, out);
      return;
    case ExprKind::FloorDiv:
    case ExprKind::Mod:
      print_wrapped(e->operands[0], out);
      out += e->kind == ExprKind::FloorDiv ? "//" : " % ";
      print_wrapped(e->operands[1], out);
      return;
    case ExprKind::Min:
    case ExprKind::Max:
      out += e->kind == ExprKind::Min ? "min(" : "max(";
      print(e->operands[0], out);
      out += ", ";
      print(e->operands[1], out);
      out += ')';
      return;
    case ExprKind::Lt:
    case ExprKind::Le:
    case ExprKind::Eq:
    case ExprKind::Ne: {
      static constexpr const char* kOps[] = {" < ", " <= ", " == ", " != "};
      auto side = [&](Expr o) {
        if (is_comparison(o)) {
          out += '(';
          print(o, out);
          out += ')';
        } else {
          print(o, out);
        }
      };
      side(e->operands[0]);
      out += kOps[static_cast<int>(e->kind) - static_cast<int>(ExprKind::Lt)];
      side(e->operands[1]);
      return;
    }
  }
}

class Parser {
 public:
  Parser(Context& ctx, std::string_view text) : ctx_(ctx), s_(text) {}

  Expr parse_all() {
    Expr e = comparison();
    skip_ws();
    COIL_USER_CHECK(pos_ == s_.size())
        << "sym::parse: unexpected '" << s_.substr(pos_) << "' in \"" << s_ << "\"";
    return e;
  }

 private:
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool accept(std::string_view tok) {
    skip_ws();
    if (s_.substr(pos_, tok.size()) != tok) return false;
    pos_ += tok.size();
    return true;
  }
  void expect(std::string_view tok) {
    COIL_USER_CHECK(accept(tok)) << "sym::parse: expected '" << tok << "' at offset " << pos_
                                 << " in \"" << s_ << "\"";
  }

  Expr comparison() {
    Expr a = additive();
    skip_ws();
    if (accept("<=")) return ctx_.le(a, additive());
    if (accept(">=")) return ctx_.le(additive(), a);
    if (accept("==")) return ctx_.eq(a, additive());
    if (accept("!=")) return ctx_.ne(a, additive());
    if (accept("<")) return ctx_.lt(a, additive());
    if (accept(">")) return ctx_.lt(additive(), a);
    return a;
  }

  Expr additive() {
    // All terms first, then one sum: adding them one by one rebuilds a growing sum per term,
    // quadratic in a long size like t0 + t1 + ... + t127 (a cat of many pieces).
    std::vector<Expr> terms{multiplicative()};
    for (;;) {
      if (accept("+")) {
        terms.push_back(multiplicative());
      } else if (accept("-")) {
        terms.push_back(ctx_.neg(multiplicative()));
      } else {
        return terms.size() == 1 ? terms[0] : ctx_.sum(terms);
      }
    }
  }

  Expr multiplicative() {
    Expr a = unary();
    for (;;) {
      if (accept("//")) {
        a = ctx_.floordiv(a, unary());
      } else if (accept("*")) {
        a = ctx_.mul(a, unary());
      } else if (accept("%")) {
        a = ctx_.mod(a, unary());
      } else {
        return a;
      }
    }
  }

  Expr unary() {
    if (accept("-")) {
      skip_ws();
      // A literal: parse "-9223372036854775808" without overflow.
      if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
        return ctx_.constant(number(true));
      return ctx_.neg(unary());
    }
    if (accept("+")) return unary();
    return primary();
  }

  int64_t number(bool negative) {
    // Accumulate as a negative value so INT64_MIN is representable.
    int64_t v = 0;
    size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      int d = s_[pos_] - '0';
      COIL_USER_CHECK(!__builtin_mul_overflow(v, 10, &v) && !__builtin_sub_overflow(v, d, &v))
          << "sym::parse: integer literal out of range in \"" << s_ << "\"";
      ++pos_;
    }
    COIL_USER_CHECK(pos_ > start) << "sym::parse: expected a number in \"" << s_ << "\"";
    if (negative) return v;
    COIL_USER_CHECK(v != std::numeric_limits<int64_t>::min())
        << "sym::parse: integer literal out of range in \"" << s_ << "\"";
    return -v;
  }

  Expr primary() {
    skip_ws();
    COIL_USER_CHECK(pos_ < s_.size()) << "sym::parse: unexpected end of \"" << s_ << "\"";
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return ctx_.constant(number(false));
    if (c == '(') {
      ++pos_;
      Expr e = comparison();
      expect(")");
      return e;
    }
    COIL_USER_CHECK(std::isalpha(static_cast<unsigned char>(c)) || c == '_')
        << "sym::parse: unexpected '" << c << "' at offset " << pos_ << " in \"" << s_ << "\"";
    size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    std::string_view name = s_.substr(start, pos_ - start);
    if (name == "min" || name == "max") {
      expect("(");
      Expr a = comparison();
      expect(",");
      Expr b = comparison();
      expect(")");
      return name == "min" ? ctx_.min(a, b) : ctx_.max(a, b);
    }
    return ctx_.symbol(name);
  }

  Context& ctx_;
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string Context::str(Expr e) const {
  std::string out;
  print(e, out);
  return out;
}

Expr Context::parse(std::string_view text) { return Parser(*this, text).parse_all(); }

void Context::set_ranges(std::string_view text) {
  auto number = [&](std::string_view f, std::string_view entry) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    COIL_USER_CHECK(ec == std::errc() && end == f.data() + f.size())
        << "symbol range '" << entry << "': '" << f << "' is not an integer";
    return v;
  };
  while (!text.empty()) {
    size_t semi = text.find(';');
    std::string_view entry = text.substr(0, semi);
    text = semi == std::string_view::npos ? std::string_view{} : text.substr(semi + 1);
    if (entry.empty()) continue;
    std::vector<std::string_view> fields;
    for (std::string_view rest = entry;;) {
      size_t colon = rest.find(':');
      fields.push_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest = rest.substr(colon + 1);
    }
    COIL_USER_CHECK((fields.size() == 3 || fields.size() == 4) && !fields[0].empty())
        << "symbol range '" << entry << "': expected name:lo:hi or name:lo:hi:multiple";
    Range r{number(fields[1], entry),
            fields[2].empty() ? kMaxSize : std::min(number(fields[2], entry), kMaxSize)};
    COIL_USER_CHECK(r.lo >= 0 && r.lo <= r.hi) << "symbol range '" << entry << "' is empty";
    Expr s = symbol(fields[0]);
    set_range(s, r);
    if (fields.size() == 4 && !fields[3].empty()) set_multiple(s, number(fields[3], entry));
  }
}

}  // namespace coil::sym
