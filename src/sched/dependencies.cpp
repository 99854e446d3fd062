// Read/write sets of the steps of a LoopProgram.
#include <algorithm>
#include <unordered_map>

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched::detail {

using loop::BufferId;
using loop::BufferKind;

BufferId mutated_input(const loop::LoopProgram& p, int step) {
  const auto* n = std::get_if<loop::ComputeNode>(&p.steps.at(step));
  if (n == nullptr || p.buffer(n->out).kind != BufferKind::View) return -1;
  const BufferId root = storage_root(p, n->out);
  return p.buffer(root).kind == BufferKind::Input ? root : -1;
}

std::vector<StepDeps> compute_dependencies(const loop::LoopProgram& p) {
  std::vector<StepDeps> deps(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    StepDeps& d = deps[s];
    auto add_root = [&](BufferId b) {
      BufferId r = storage_root(p, b);
      if (std::find(d.read_roots.begin(), d.read_roots.end(), r) == d.read_roots.end()) {
        d.read_roots.push_back(r);
      }
    };
    if (const auto* n = std::get_if<loop::ComputeNode>(&p.steps[s])) {
      for (const loop::Instr& in : n->body.instrs) {
        if (in.kind != loop::InstrKind::Load) continue;
        d.reads.push_back(Read{in.buffer, &in});
        add_root(in.buffer);
      }
      d.writes.push_back(n->out);
    } else {
      const auto& e = std::get<loop::ExternNode>(p.steps[s]);
      for (BufferId b : e.inputs) {
        d.reads.push_back(Read{b, nullptr});
        add_root(b);
      }
      d.writes = e.outputs;
    }
  }
  return deps;
}

std::vector<int> buffer_producers(const loop::LoopProgram& p, const std::vector<StepDeps>& deps) {
  std::vector<int> prod(p.buffers.size(), -1);
  for (size_t s = 0; s < deps.size(); ++s) {
    for (BufferId b : deps[s].writes) {
      COIL_CHECK(prod.at(b) == -1) << p.buffer(b).name << " written by two steps";
      prod[b] = static_cast<int>(s);
    }
  }
  return prod;
}

sym::Expr buffer_bytes(const loop::LoopProgram& p, const loop::Buffer& b) {
  sym::Context& ctx = *p.ctx;
  sym::Expr elems = b.offset ? ctx.add(b.offset, ctx.one()) : ctx.one();
  for (size_t d = 0; d < b.sizes.size(); ++d) {
    elems = ctx.add(elems, ctx.mul(ctx.sub(b.sizes[d], ctx.one()), b.strides.at(d)));
  }
  return ctx.mul(elems, ctx.constant(dtype_size(b.dtype)));
}

int64_t size_hint(const sym::Context& ctx, sym::Expr e) {
  std::unordered_map<sym::Expr, int64_t> env;
  for (sym::Expr s : ctx.free_symbols(e)) {
    sym::Range r = ctx.symbol_range(s);
    env[s] = std::clamp<int64_t>(64, r.lo, r.hi);
  }
  try {
    return ctx.evaluate(e, env);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string ranges_str(const sym::Context& ctx, const std::vector<sym::Expr>& ranges) {
  std::string s = "[";
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i) s += ", ";
    s += ctx.str(ranges[i]);
  }
  return s + "]";
}

std::vector<int> outer_store_dims(const loop::ComputeNode& node, size_t n) {
  std::vector<int> dims;
  for (size_t j = 0; j < n && j < node.index_vars.size(); ++j) {
    int found = -1;
    for (size_t d = 0; d < node.store_index.size(); ++d) {
      if (node.store_index[d] == node.index_vars[j]) found = static_cast<int>(d);
    }
    if (found < 0) return {};
    dims.push_back(found);
  }
  if (dims.size() != n) return {};
  return dims;
}

}  // namespace coil::sched::detail
