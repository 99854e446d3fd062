#include "coil/graph/printer.h"

#include <charconv>
#include <cmath>
#include <unordered_map>

namespace coil {
namespace {

class Printer {
 public:
  explicit Printer(const Graph& g) : g_(g), ctx_(g.ctx()) {}

  std::string run() {
    int next = 0;
    for (Value* v : g_.inputs()) ids_[v] = next++;
    for (Node* n : g_.nodes()) {
      for (Value* v : n->outputs()) ids_[v] = next++;
    }
    out_ += "graph(";
    for (size_t i = 0; i < g_.inputs().size(); ++i) {
      if (i) out_ += ", ";
      Value* v = g_.inputs()[i];
      value_ref(v);
      out_ += ": ";
      out_ += print_meta_impl(v->meta());
    }
    out_ += "):\n";
    for (Node* n : g_.nodes()) {
      out_ += "  ";
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        if (i) out_ += ", ";
        value_ref(n->output(i));
        out_ += ": ";
        out_ += print_meta_impl(n->output(i)->meta());
      }
      if (!n->outputs().empty()) out_ += " = ";
      out_ += n->op();
      out_ += "(";
      bool first = true;
      for (const Arg& a : n->args()) {
        if (!first) out_ += ", ";
        first = false;
        arg(a);
      }
      for (const auto& [k, a] : n->kwargs()) {
        if (!first) out_ += ", ";
        first = false;
        out_ += k;
        out_ += "=";
        arg(a);
      }
      out_ += ")\n";
    }
    out_ += "  return (";
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      if (i) out_ += ", ";
      value_ref(g_.outputs()[i]);
    }
    out_ += ")\n";
    return std::move(out_);
  }

  std::string print_meta_impl(const TensorMeta& m) { return print_meta(ctx_, m); }

 private:
  void value_ref(const Value* v) {
    auto it = ids_.find(v);
    if (it == ids_.end()) {
      // Not defined in this graph (a broken graph); print something that will not parse.
      out_ += "%!undefined";
      out_ += v ? std::to_string(v->id()) : std::string("null");
      return;
    }
    out_ += "%";
    out_ += std::to_string(it->second);
  }

  void arg(const Arg& a) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, NoneArg>) {
            out_ += "None";
          } else if constexpr (std::is_same_v<T, Value*>) {
            value_ref(x);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            out_ += std::to_string(x);
          } else if constexpr (std::is_same_v<T, double>) {
            out_ += format_double(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            out_ += x ? "true" : "false";
          } else if constexpr (std::is_same_v<T, std::string>) {
            out_ += quote_string(x);
          } else if constexpr (std::is_same_v<T, DType>) {
            out_ += "dtype(";
            out_ += dtype_name(x);
            out_ += ")";
          } else if constexpr (std::is_same_v<T, Device>) {
            out_ += "device(";
            out_ += device_name(x);
            out_ += ")";
          } else if constexpr (std::is_same_v<T, sym::Expr>) {
            if (x->is_const()) {
              out_ += std::to_string(x->value);
            } else {
              out_ += "sym(";
              out_ += ctx_.str(x);
              out_ += ")";
            }
          } else {
            static_assert(std::is_same_v<T, Arg::List>);
            out_ += "[";
            for (size_t i = 0; i < x.size(); ++i) {
              if (i) out_ += ", ";
              arg(x[i]);
            }
            out_ += "]";
          }
        },
        a.v);
  }

  const Graph& g_;
  sym::Context& ctx_;
  std::unordered_map<const Value*, int> ids_;
  std::string out_;
};

}  // namespace

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote_string(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u >= 0x7f) {
          out += "\\x";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

std::string print_meta(sym::Context& ctx, const TensorMeta& m) {
  std::string out(dtype_name(m.dtype));
  out += "[";
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    if (i) out += ", ";
    out += ctx.str(m.sizes[i]);
  }
  out += "]";
  // Strides are printed unless they are exactly the row-major strides of the sizes. Size-1
  // dims count too (PyTorch lets them have any stride), so the text round-trips exactly.
  bool default_strides = m.strides.empty() || m.strides == contiguous_strides(ctx, m.sizes);
  if (!default_strides) {
    out += "{";
    for (size_t i = 0; i < m.strides.size(); ++i) {
      if (i) out += ", ";
      out += ctx.str(m.strides[i]);
    }
    out += "}";
  }
  if (m.storage_offset && !(m.storage_offset->is_const() && m.storage_offset->value == 0)) {
    out += "+";
    if (m.storage_offset->is_const() || m.storage_offset->is_symbol()) {
      out += ctx.str(m.storage_offset);
    } else {
      out += "(" + ctx.str(m.storage_offset) + ")";
    }
  }
  if (m.device != Device::CPU) {
    out += "@";
    out += device_name(m.device);
  }
  return out;
}

std::string print_graph(const Graph& g) { return Printer(g).run(); }

}  // namespace coil
