#include "coil/graph/parser.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "coil/support/error.h"

namespace coil {
namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view text, sym::Context& ctx) : text_(text), ctx_(ctx) {}

  std::unique_ptr<Graph> parse_graph() {
    auto g = std::make_unique<Graph>(ctx_);
    g_ = g.get();
    skip_ws();
    expect_word("graph");
    expect('(');
    if (!try_consume(')')) {
      do {
        auto [id, pos] = value_def();
        expect(':');
        TensorMeta meta = parse_meta();
        for (const sym::Expr& s : meta.sizes) {
          for (sym::Expr sym : ctx_.free_symbols(s)) {
            sym::Range r = ctx_.symbol_range(sym);
            if (r.lo == 0 && r.hi == sym::kMaxSize)
              ctx_.set_range(sym, sym::Range{2, sym::kMaxSize});
          }
        }
        define(id, pos, g->add_input(std::move(meta)));
      } while (try_consume(','));
      expect(')');
    }
    expect(':');
    while (true) {
      skip_ws();
      if (at_end()) fail("expected a node or 'return'");
      if (peek_word() == "return") break;
      parse_node();
    }
    expect_word("return");
    expect('(');
    std::vector<Value*> outs;
    if (!try_consume(')')) {
      do {
        outs.push_back(value_use());
      } while (try_consume(','));
      expect(')');
    }
    g->set_outputs(std::move(outs));
    skip_ws();
    if (!at_end()) fail("unexpected text after 'return'");
    return g;
  }

  TensorMeta parse_meta_only() {
    skip_ws();
    TensorMeta m = parse_meta();
    skip_ws();
    if (!at_end()) fail("unexpected text after the meta");
    return m;
  }

 private:
  // ---- positions and errors
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw CompileError(std::to_string(line) + ":" + std::to_string(col) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }

  bool at_end() const { return pos_ >= text_.size(); }
  char cur() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_ws() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool try_consume(char c) {
    skip_ws();
    if (cur() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!try_consume(c)) {
      fail(std::string("expected '") + c + "'" +
           (at_end() ? std::string(" at end of input") : std::string(", got '") + cur() + "'"));
    }
  }

  std::string_view peek_word() {
    skip_ws();
    size_t p = pos_;
    if (p < text_.size() && is_ident_start(text_[p])) {
      while (p < text_.size() && is_ident_char(text_[p])) ++p;
    }
    return text_.substr(pos_, p - pos_);
  }
  std::string_view word() {
    std::string_view w = peek_word();
    if (w.empty()) fail("expected a name");
    pos_ += w.size();
    return w;
  }
  void expect_word(std::string_view w) {
    if (peek_word() != w) fail("expected '" + std::string(w) + "'");
    pos_ += w.size();
  }

  // ---- values
  std::pair<int64_t, size_t> value_ref_token() {
    skip_ws();
    size_t start = pos_;
    if (cur() != '%') fail("expected a value (%<id>)");
    ++pos_;
    size_t p = pos_;
    while (!at_end() && is_digit(cur())) ++pos_;
    if (p == pos_) fail("expected digits after '%'");
    int64_t id = 0;
    auto r = std::from_chars(text_.data() + p, text_.data() + pos_, id);
    if (r.ec != std::errc()) fail_at(start, "bad value id");
    return {id, start};
  }
  std::pair<int64_t, size_t> value_def() {
    auto [id, pos] = value_ref_token();
    if (values_.count(id)) fail_at(pos, "redefinition of %" + std::to_string(id));
    return {id, pos};
  }
  void define(int64_t id, size_t pos, Value* v) { values_[id] = v; }
  Value* value_use() {
    auto [id, pos] = value_ref_token();
    auto it = values_.find(id);
    if (it == values_.end()) fail_at(pos, "use of undefined value %" + std::to_string(id));
    return it->second;
  }

  // ---- symbolic expressions
  // Scans a sym expression up to a ',' or a closing bracket at nesting depth 0.
  sym::Expr sym_until_delim() {
    skip_ws();
    size_t start = pos_;
    int depth = 0;
    while (!at_end()) {
      char c = cur();
      if (c == '(' || c == '[' || c == '{') {
        ++depth;
      } else if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) break;
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      } else if (c == '\n' || c == '#') {
        break;
      }
      ++pos_;
    }
    return sym_text(start, pos_);
  }
  sym::Expr sym_text(size_t start, size_t end) {
    std::string_view t = text_.substr(start, end - start);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (t.empty()) fail_at(start, "expected a symbolic expression");
    try {
      return ctx_.parse(t);
    } catch (const CompileError& e) {
      fail_at(start, "bad symbolic expression '" + std::string(t) + "': " + e.what());
    }
  }
  // A parenthesized expression: '(' ... ')' with balanced parentheses; returns the inside.
  sym::Expr sym_parenthesized() {
    expect('(');
    size_t start = pos_;
    int depth = 0;
    while (true) {
      if (at_end()) fail_at(start, "unbalanced parentheses");
      char c = cur();
      if (c == '(') ++depth;
      if (c == ')') {
        if (depth == 0) break;
        --depth;
      }
      ++pos_;
    }
    sym::Expr e = sym_text(start, pos_);
    ++pos_;
    return e;
  }
  std::vector<sym::Expr> sym_list(char open, char close) {
    expect(open);
    std::vector<sym::Expr> out;
    if (try_consume(close)) return out;
    do {
      out.push_back(sym_until_delim());
    } while (try_consume(','));
    expect(close);
    return out;
  }

  // ---- metas: dtype[sizes]{strides}+offset@device
  TensorMeta parse_meta() {
    skip_ws();
    size_t p = pos_;
    std::string_view dt = word();
    auto dtype = dtype_from_name(dt);
    if (!dtype) fail_at(p, "unknown dtype '" + std::string(dt) + "'");
    TensorMeta m;
    m.dtype = *dtype;
    if (cur() != '[') fail("expected '[' after the dtype");
    m.sizes = sym_list('[', ']');
    if (cur() == '{') {
      size_t sp = pos_;
      m.strides = sym_list('{', '}');
      if (m.strides.size() != m.sizes.size()) {
        fail_at(sp, "expected " + std::to_string(m.sizes.size()) + " strides, got " +
                        std::to_string(m.strides.size()));
      }
    } else {
      m.strides = contiguous_strides(ctx_, m.sizes);
    }
    if (cur() == '+') {
      ++pos_;
      if (cur() == '(') {
        m.storage_offset = sym_parenthesized();
      } else {
        size_t s = pos_;
        while (!at_end() && (is_ident_char(cur()) && cur() != '.')) ++pos_;
        m.storage_offset = sym_text(s, pos_);
      }
      if (m.storage_offset->is_const() && m.storage_offset->value == 0) m.storage_offset = nullptr;
    }
    if (cur() == '@') {
      ++pos_;
      size_t dp = pos_;
      std::string_view dev = word();
      if (cur() == ':') {  // "cuda:0"
        ++pos_;
        while (is_digit(cur())) ++pos_;
        dev = text_.substr(dp, pos_ - dp);
      }
      auto d = device_from_name(dev);
      if (!d) fail_at(dp, "unknown device '" + std::string(dev) + "'");
      m.device = *d;
    }
    return m;
  }

  // ---- nodes
  void parse_node() {
    std::vector<std::pair<int64_t, size_t>> defs;
    std::vector<TensorMeta> metas;
    if (cur() == '%') {
      do {
        defs.push_back(value_def());
        for (size_t i = 0; i + 1 < defs.size(); ++i) {
          if (defs[i].first == defs.back().first) {
            fail_at(defs.back().second, "redefinition of %" + std::to_string(defs.back().first));
          }
        }
        expect(':');
        metas.push_back(parse_meta());
      } while (try_consume(','));
      expect('=');
    }
    skip_ws();
    size_t op_pos = pos_;
    std::string_view name = word();
    if (name == "return") fail_at(op_pos, "expected an op name");
    const OpId op = OpId::of(name);  // interned once per node, here
    expect('(');
    std::vector<Arg> args;
    std::vector<std::pair<std::string, Arg>> kwargs;
    if (!try_consume(')')) {
      do {
        skip_ws();
        // A keyword argument is `name=value`.
        std::string_view w = peek_word();
        size_t save = pos_;
        if (!w.empty()) {
          pos_ += w.size();
          skip_ws();
          if (cur() == '=' && (pos_ + 1 >= text_.size() || text_[pos_ + 1] != '=')) {
            ++pos_;
            for (const auto& kv : kwargs) {
              if (kv.first == w)
                fail_at(save, "duplicate keyword argument '" + std::string(w) + "'");
            }
            kwargs.emplace_back(std::string(w), parse_arg());
            continue;
          }
          pos_ = save;
        }
        if (!kwargs.empty()) fail("positional argument after keyword arguments");
        args.push_back(parse_arg());
      } while (try_consume(','));
      expect(')');
    }
    Node* n = g_->add_node(op, std::move(args), std::move(kwargs), std::move(metas));
    for (size_t i = 0; i < defs.size(); ++i) define(defs[i].first, defs[i].second, n->output(i));
  }

  Arg parse_arg() {
    skip_ws();
    char c = cur();
    if (c == '%') return Arg(value_use());
    if (c == '[') {
      ++pos_;
      Arg::List l;
      if (!try_consume(']')) {
        do {
          l.push_back(parse_arg());
        } while (try_consume(','));
        expect(']');
      }
      return Arg(std::move(l));
    }
    if (c == '"') return Arg(parse_string());
    if (c == '-' || c == '+' || is_digit(c) || c == '.') return parse_number();
    size_t p = pos_;
    std::string_view w = peek_word();
    if (w.empty()) fail("expected an argument");
    pos_ += w.size();
    if (w == "None") return Arg(NoneArg{});
    if (w == "true" || w == "True") return Arg(true);
    if (w == "false" || w == "False") return Arg(false);
    if (w == "inf") return Arg(std::numeric_limits<double>::infinity());
    if (w == "nan") return Arg(std::numeric_limits<double>::quiet_NaN());
    if (w == "dtype" || w == "device") {
      expect('(');
      skip_ws();
      size_t np = pos_;
      std::string_view name = word();
      if (cur() == ':') {
        ++pos_;
        while (is_digit(cur())) ++pos_;
        name = text_.substr(np, pos_ - np);
      }
      expect(')');
      if (w == "dtype") {
        auto d = dtype_from_name(name);
        if (!d) fail_at(np, "unknown dtype '" + std::string(name) + "'");
        return Arg(*d);
      }
      auto d = device_from_name(name);
      if (!d) fail_at(np, "unknown device '" + std::string(name) + "'");
      return Arg(*d);
    }
    if (w == "sym") {
      skip_ws();
      return Arg(sym_parenthesized());
    }
    fail_at(p, "unexpected '" + std::string(w) + "' (expected an argument)");
  }

  Arg parse_number() {
    size_t start = pos_;
    if (cur() == '-' || cur() == '+') ++pos_;
    if (text_.substr(pos_, 3) == "inf" &&
        (pos_ + 3 >= text_.size() || !is_ident_char(text_[pos_ + 3]))) {
      pos_ += 3;
      double inf = std::numeric_limits<double>::infinity();
      return Arg(text_[start] == '-' ? -inf : inf);
    }
    bool is_float = false;
    while (!at_end()) {
      char c = cur();
      if (is_digit(c)) {
        ++pos_;
      } else if (c == '.') {
        is_float = true;
        ++pos_;
      } else if (c == 'e' || c == 'E') {
        is_float = true;
        ++pos_;
        if (cur() == '+' || cur() == '-') ++pos_;
      } else {
        break;
      }
    }
    const char* b = text_.data() + start;
    const char* e = text_.data() + pos_;
    if (*b == '+') ++b;
    if (is_float) {
      double d = 0;
      auto r = std::from_chars(b, e, d);
      if (r.ec != std::errc() || r.ptr != e) fail_at(start, "bad float literal");
      return Arg(d);
    }
    int64_t i = 0;
    auto r = std::from_chars(b, e, i);
    if (r.ec == std::errc::result_out_of_range) fail_at(start, "integer literal out of range");
    if (r.ec != std::errc() || r.ptr != e) fail_at(start, "bad number");
    return Arg(i);
  }

  std::string parse_string() {
    size_t start = pos_;
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end() || cur() == '\n') fail_at(start, "unterminated string");
      char c = text_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail_at(start, "unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '\\':
          out += '\\';
          break;
        case '"':
          out += '"';
          break;
        case '\'':
          out += '\'';
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'x': {
          int v = 0;
          for (int k = 0; k < 2; ++k) {
            char h = cur();
            int d = is_digit(h)              ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) fail("expected two hex digits after \\x");
            v = v * 16 + d;
            ++pos_;
          }
          out += static_cast<char>(v);
          break;
        }
        default:
          fail_at(pos_ - 2, std::string("unknown escape '\\") + e + "'");
      }
    }
    return out;
  }

  std::string_view text_;
  sym::Context& ctx_;
  size_t pos_ = 0;
  Graph* g_ = nullptr;
  std::unordered_map<int64_t, Value*> values_;
};

}  // namespace

std::unique_ptr<Graph> parse_graph(std::string_view text, sym::Context& ctx) {
  return Parser(text, ctx).parse_graph();
}

TensorMeta parse_meta(std::string_view text, sym::Context& ctx) {
  return Parser(text, ctx).parse_meta_only();
}

}  // namespace coil
