#include "coil/ops/schema.h"

#include <algorithm>
#include <iterator>

namespace coil::ops {
namespace {

struct SchemaRow {
  std::string_view name, text;
};

constexpr SchemaRow kBuiltinSchemas[] = {
#include "schemas.inc"
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Calls `on(i, c)` for each character of `s` from `from` on that is outside string literals
// (quotes and their escapes skipped) until it returns true; returns that position, or npos.
template <class F>
size_t scan_unquoted(std::string_view s, size_t from, F on) {
  char quote = 0;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (on(i, c)) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Splits `s` at the commas outside (), [] and string literals.
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  scan_unquoted(s, 0, [&](size_t i, char c) {
    if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
    return false;
  });
  std::string_view last = trim(s.substr(start));
  if (!last.empty() || !out.empty()) out.push_back(last);
  return out;
}

// The position of the ')' that closes the '(' at `open`, or npos.
size_t closing(std::string_view s, size_t open) {
  int depth = 0;
  return scan_unquoted(s, open, [&](size_t, char c) {
    if (c == '(') ++depth;
    return c == ')' && --depth == 0;
  });
}

// "Tensor(a!)" -> "Tensor", "Tensor(a)[]" -> "Tensor[]": alias annotations do not change kinds.
std::string strip_alias(std::string_view type) {
  std::string out;
  int depth = 0;
  for (char c : type) {
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    else if (depth == 0 && c != ' ')
      out += c;
  }
  return out;
}

ArgKind kind_of(std::string_view base) {
  if (base == "Tensor") return ArgKind::Tensor;
  if (base.starts_with("Tensor") && base.ends_with("]")) return ArgKind::TensorList;
  for (std::string_view n : {"Scalar", "int", "SymInt", "float", "bool"}) {
    if (base == n) return ArgKind::Number;
    if (base.starts_with(n) && base.size() > n.size() && base[n.size()] == '[')
      return ArgKind::NumberList;
  }
  return ArgKind::Other;
}

std::optional<ArgSchema> parse_arg(std::string_view text, bool kwarg_only) {
  ArgSchema a;
  a.kwarg_only = kwarg_only;
  // "type name[=default]"; the '=' of a default is outside any parentheses.
  std::string_view decl = text;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(')
      ++depth;
    else if (text[i] == ')')
      --depth;
    else if (text[i] == '=' && depth == 0) {
      decl = trim(text.substr(0, i));
      a.has_default = true;
      break;
    }
  }
  // The name is the last word outside parentheses.
  size_t space = std::string_view::npos;
  depth = 0;
  for (size_t i = 0; i < decl.size(); ++i) {
    if (decl[i] == '(')
      ++depth;
    else if (decl[i] == ')')
      --depth;
    else if (decl[i] == ' ' && depth == 0)
      space = i;
  }
  if (space == std::string_view::npos) return std::nullopt;
  a.name = std::string(trim(decl.substr(space + 1)));
  std::string type = strip_alias(decl.substr(0, space));
  if (a.name.empty() || type.empty()) return std::nullopt;
  if (type.back() == '?') {
    a.optional = true;
    type.pop_back();
  }
  a.kind = kind_of(type);
  return a;
}

// Results: "Tensor" 1, "(Tensor, Tensor)" 2, "()" 0; a list anywhere ("Tensor[]") -1.
int count_outputs(std::string_view ret) {
  ret = trim(ret);
  if (ret.empty()) return -1;
  std::vector<std::string_view> items;
  if (ret.front() == '(') {
    const size_t end = closing(ret, 0);
    if (end == std::string_view::npos) return -1;
    items = split_top(ret.substr(1, end - 1));
  } else {
    items.push_back(ret);
  }
  for (std::string_view item : items) {
    if (strip_alias(item).find("[]") != std::string::npos) return -1;
  }
  return static_cast<int>(items.size());
}

}  // namespace

int OpSchema::index_of(std::string_view name) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::optional<OpSchema> parse_schema(std::string_view text) {
  const size_t open = text.find('(');
  if (open == std::string_view::npos) return std::nullopt;
  const size_t close = closing(text, open);
  if (close == std::string_view::npos) return std::nullopt;
  OpSchema s;
  s.known = true;
  bool kwarg_only = false;
  for (std::string_view a : split_top(text.substr(open + 1, close - open - 1))) {
    if (a == "*") {
      kwarg_only = true;
      continue;
    }
    std::optional<ArgSchema> arg = parse_arg(a, kwarg_only);
    if (!arg) return std::nullopt;
    s.args.push_back(std::move(*arg));
  }
  std::string_view rest = trim(text.substr(close + 1));
  if (!rest.starts_with("->")) return std::nullopt;
  s.num_outputs = count_outputs(rest.substr(2));
  return s;
}

std::string_view builtin_schema_text(std::string_view op) {
  auto it = std::lower_bound(std::begin(kBuiltinSchemas), std::end(kBuiltinSchemas), op,
                             [](const SchemaRow& r, std::string_view n) { return r.name < n; });
  if (it == std::end(kBuiltinSchemas) || it->name != op) return "";
  return it->text;
}

}  // namespace coil::ops
