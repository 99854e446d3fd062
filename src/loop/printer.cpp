#include "coil/loop/printer.h"

#include <string>

#include "coil/graph/printer.h"
#include "coil/graph/tensor_meta.h"
#include "coil/support/error.h"

namespace coil::loop {

namespace {

std::string expr_list(const sym::Context& ctx, const std::vector<sym::Expr>& es) {
  std::string out;
  for (size_t k = 0; k < es.size(); ++k) {
    if (k) out += ", ";
    out += es[k] ? ctx.str(es[k]) : "?";
  }
  return out;
}

std::string buffer_type(sym::Context& ctx, const Buffer& b) {
  std::string out(dtype_name(b.dtype));
  out += "[" + expr_list(ctx, b.sizes) + "]";
  TensorMeta m;
  m.sizes = b.sizes;
  m.strides = b.strides;
  if (b.strides.size() == b.sizes.size() && !is_contiguous(ctx, m)) {
    out += "{" + expr_list(ctx, b.strides) + "}";
  }
  if (b.offset && !(b.offset->is_const() && b.offset->value == 0)) {
    out += "+" + ctx.str(b.offset);
  }
  if (b.device != Device::CPU) {
    out += "@";
    out += device_name(b.device);
  }
  return out;
}

std::string ranges_text(const sym::Context& ctx, const std::vector<sym::Expr>& vars,
                        const std::vector<sym::Expr>& ranges) {
  std::string out = "(";
  for (size_t k = 0; k < ranges.size(); ++k) {
    if (k) out += ", ";
    out += (k < vars.size() && vars[k] ? ctx.str(vars[k]) : "?") + " < " + ctx.str(ranges[k]);
  }
  return out + ")";
}

std::string buffer_name(const LoopProgram& p, BufferId id) {
  if (id < 0 || id >= static_cast<BufferId>(p.buffers.size())) {
    return "<bad buffer " + std::to_string(id) + ">";
  }
  return p.buffers[id].name;
}

std::string instr_text(const LoopProgram& p, const Instr& in) {
  const sym::Context& ctx = *p.ctx;
  std::string out(instr_kind_name(in.kind));
  auto opnd = [&](int k) { return "%" + std::to_string(in.operands[k]); };
  switch (in.kind) {
    case InstrKind::Load:
      out += " " + buffer_name(p, in.buffer) + "[" + expr_list(ctx, in.index) + "]";
      if (in.mask >= 0) out += " mask %" + std::to_string(in.mask);
      break;
    case InstrKind::Constant:
      out += " ";
      if (dtype_is_floating(in.dtype)) {
        out += format_double(in.fvalue);
      } else if (in.dtype == DType::Bool) {
        out += in.ivalue ? "true" : "false";
      } else {
        out += std::to_string(in.ivalue);
      }
      break;
    case InstrKind::IndexExpr:
      out += " " + (in.expr ? ctx.str(in.expr) : std::string("?"));
      break;
    case InstrKind::Cast:
      out += " " + opnd(0);
      break;
    case InstrKind::Rand:
    case InstrKind::Randn:
      out += " " + opnd(0) + ", " + (in.expr ? ctx.str(in.expr) : std::string("?"));
      break;
    case InstrKind::Indirect:
      out += " " + (in.expr ? ctx.str(in.expr) : std::string("?")) + " = " + opnd(0);
      break;
#define COIL_PRINT_OP(name, arity, text) case InstrKind::name:
      COIL_BODY_OPS(COIL_PRINT_OP)
#undef COIL_PRINT_OP
      {
        int arity = instr_kind_arity(in.kind);
        for (int k = 0; k < arity; ++k) out += (k ? ", " : " ") + opnd(k);
        break;
      }
  }
  out += " : ";
  out += dtype_name(in.dtype);
  return out;
}

}  // namespace

std::string print_body(const LoopProgram& p, const Body& body, int indent) {
  std::string pad(indent, ' ');
  std::string out;
  for (size_t k = 0; k < body.instrs.size(); ++k) {
    out += pad + "%" + std::to_string(k) + " = " + instr_text(p, body.instrs[k]) + "\n";
  }
  return out;
}

std::string print_step(const LoopProgram& p, const Step& step) {
  const sym::Context& ctx = *p.ctx;
  std::string out;
  if (const auto* cn = std::get_if<ComputeNode>(&step)) {
    out += buffer_name(p, cn->out);
    if (cn->out >= 0 && cn->out < static_cast<BufferId>(p.buffers.size())) {
      out += ": " + buffer_type(*p.ctx, p.buffers[cn->out]);
    }
    if (cn->is_reduction()) {
      out += " = reduce ";
      out += reduce_kind_name(cn->reduce);
      out += " over " + ranges_text(ctx, cn->index_vars, cn->ranges) + " " +
             ranges_text(ctx, cn->reduction_vars, cn->reduction_ranges) + ":\n";
    } else {
      out += " = pointwise over " + ranges_text(ctx, cn->index_vars, cn->ranges) + ":\n";
    }
    out += print_body(p, cn->body, 2);
    out += "  -> store [" + expr_list(ctx, cn->store_index) + "] %" +
           std::to_string(cn->body.result) + "\n";
  } else {
    const auto& ex = std::get<ExternNode>(step);
    out += "extern ";
    out += extern_kind_name(ex.kind);
    out += "(";
    for (size_t k = 0; k < ex.inputs.size(); ++k) {
      out += (k ? ", " : "") + buffer_name(p, ex.inputs[k]);
    }
    out += ") -> (";
    for (size_t k = 0; k < ex.outputs.size(); ++k) {
      out += (k ? ", " : "") + buffer_name(p, ex.outputs[k]);
    }
    out += ")";
    if (!ex.scalars.empty()) {
      out += " scalars [";
      for (size_t k = 0; k < ex.scalars.size(); ++k) {
        out += (k ? ", " : "") + format_double(ex.scalars[k]);
      }
      out += "]";
    }
    if (!ex.ints.empty()) {
      out += " ints [";
      for (size_t k = 0; k < ex.ints.size(); ++k) {
        out += (k ? ", " : "") + std::to_string(ex.ints[k]);
      }
      out += "]";
    }
    if (ex.fresh_outputs) out += " fresh";
    out += "  # " + (ex.op.empty() ? std::string("?") : ex.op) + ", node " +
           std::to_string(ex.graph_node) + "\n";
  }
  return out;
}

std::string print_program(const LoopProgram& p) {
  COIL_CHECK(p.ctx != nullptr) << "LoopProgram without a sym::Context";
  std::string out = "buffers:\n";
  for (const Buffer& b : p.buffers) {
    out += "  " + b.name + ": " + buffer_type(*p.ctx, b);
    if (b.kind == BufferKind::Input) out += " input " + std::to_string(b.input_index);
    if (b.kind == BufferKind::View) out += " view of " + buffer_name(p, b.view_of);
    if (b.id == p.rng_state) out += " rng_state";
    out += "\n";
  }
  for (const auto& s : p.size_symbols) {
    out += "size " + p.ctx->str(s.symbol) + " = " + buffer_name(p, p.inputs.at(s.input));
    if (s.dim >= 0) {
      out += ".size(" + std::to_string(s.dim) + ")\n";
    } else {
      out += ".stride(" + std::to_string(-s.dim - 1) + ")\n";
    }
  }
  for (const Step& st : p.steps) out += print_step(p, st);
  out += "outputs: ";
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    out += (k ? ", " : "") + buffer_name(p, p.outputs[k]);
  }
  out += "\n";
  return out;
}

}  // namespace coil::loop
