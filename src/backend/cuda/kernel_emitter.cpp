// KernelEmitter's shared members: text output, parameters, index decomposition, stores,
// locals and the scalar bodies of members (kernel_emitter.h).
#include "kernel_emitter.h"

#include <algorithm>

#include "coil/backend/common/cpp_expr.h"
#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda::detail {

CudaKernel KernelEmitter::emit() {
  info_.name = k_.name;
  collect_params();
  const size_t k = k_.outer_ranges.size();
  bool pointwise = std::all_of(nodes_.begin(), nodes_.end(), [&](auto* n) {
    return !n->is_reduction() && n->ranges.size() == k;
  });
  idx_t_ = fits_32bit() ? "int" : "int64_t";
  // Approximate float math where every stored output is bf16/f16 (its rounding dwarfs a few
  // ulp of float), and with cuda_fast_math_f32 where they are f32 too, as Triton computes
  // (Inductor's exp, sigmoid and division are the approximate instructions in every dtype).
  fast_math_ = options_.cuda_fast_math && std::all_of(nodes_.begin(), nodes_.end(), [&](auto* n) {
                 const DType d = buf(n->out).dtype;
                 return locals_.count(n->out) || is_low_precision(d) ||
                        (options_.cuda_fast_math_f32 && d == DType::Float32);
               });
  header_comment();
  if (pointwise) {
    info_.kind = KernelKind::Pointwise;
    info_.work = product(k_.outer_ranges);
    info_.row_size = ctx_.one();
    emit_pointwise();
  } else {
    info_.kind = KernelKind::Rows;
    info_.work = product(k_.outer_ranges);
    Expr row = ctx_.one();
    for (const ComputeNode* n : nodes_) row = ctx_.max(row, inner_numel(*n));
    info_.row_size = row;
    emit_rows();
  }
  return info_;
}

void KernelEmitter::line(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (!s.empty()) os_ << std::string(2 * indent_, ' ');
  os_ << s << "\n";
}

void KernelEmitter::open(const std::string& s) {
  line(s);
  ++indent_;
}

void KernelEmitter::close(const std::string& s) {
  --indent_;
  line(s);
}

std::string KernelEmitter::idx(Expr e) {
  return cpp_index_expr(ctx_, e, [this](Expr s) -> std::string {
    auto it = sym_names_.find(s);
    return it != sym_names_.end() ? it->second : cpp_identifier(s->name);
  });
}

void KernelEmitter::set_node_names(const ComputeNode& n) {
  sym_names_.clear();
  for (size_t j = 0; j < k_.outer_ranges.size() && j < n.index_vars.size(); ++j)
    sym_names_[n.index_vars[j]] = "x" + std::to_string(j);
}

const loop::Buffer& KernelEmitter::buf(BufferId b) const { return p_.buffer(b); }

Expr KernelEmitter::product(const std::vector<Expr>& v, size_t from) {
  Expr r = ctx_.one();
  for (size_t i = from; i < v.size(); ++i) r = ctx_.mul(r, v[i]);
  return r;
}

Expr KernelEmitter::inner_numel(const ComputeNode& n) {
  return ctx_.mul(product(n.ranges, k_.outer_ranges.size()), product(n.reduction_ranges));
}

std::string KernelEmitter::ranges_text(const std::vector<Expr>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + ctx_.str(r[i]);
  return s + "]";
}

Expr KernelEmitter::flat_index(BufferId b, const std::vector<Expr>& index) {
  const loop::Buffer& B = buf(b);
  COIL_CHECK(index.size() == B.strides.size())
      << B.name << ": index rank " << index.size() << " vs " << B.strides.size();
  Expr e = B.offset ? B.offset : ctx_.zero();
  for (size_t d = 0; d < index.size(); ++d) e = ctx_.add(e, ctx_.mul(index[d], B.strides[d]));
  return folded_.empty() ? e : ctx_.substitute(e, folded_);
}

void KernelEmitter::collect_params() {
  std::set<BufferId> read, written;
  for (const ComputeNode* n : nodes_) {
    if (!locals_.count(n->out)) written.insert(n->out);
    for (const Instr& in : n->body.instrs) {
      // The rng state lives on the host: its two values become the seed/offset parameters.
      bool rng = in.kind == InstrKind::Load && in.buffer == p_.rng_state;
      if (in.kind == InstrKind::Load && !locals_.count(in.buffer) && !rng) read.insert(in.buffer);
      if (rng || in.kind == InstrKind::Rand || in.kind == InstrKind::Randn) info_.random = true;
    }
  }
  written_ = written;
  read_ = read;
  std::set<BufferId> all = read;
  all.insert(written.begin(), written.end());
  info_.buffers.assign(all.begin(), all.end());
}

std::string KernelEmitter::param_list() {
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : ", ") + x; };
  const std::set<BufferId> all(info_.buffers.begin(), info_.buffers.end());
  const std::set<BufferId> shared = loop::written_through_alias(p_, all, written_);
  for (BufferId b : info_.buffers) {
    const loop::Buffer& B = buf(b);
    bool w = written_.count(b) > 0;
    // A buffer this kernel both writes and reads (through other threads of the group) gets
    // no __restrict__: the compiler must not move its loads across the group barrier. Nor
    // does a mutated input written through a view and read through another name.
    bool rw = (w && read_.count(b) > 0) || shared.count(b) > 0;
    add(std::string(w ? "" : "const ") + ctype(B.dtype) + (rw ? "* " : "* __restrict__ ") + B.name);
  }
  for (const auto& ss : p_.size_symbols) add("int64_t " + cpp_identifier(ss.symbol->name));
  if (info_.random) {
    add("int64_t rng_seed");
    add("int64_t rng_offset");
    add("const int64_t* rng_device");  // RunContext::rng_device (null: the seed alone)
  }
  return s;
}

std::string KernelEmitter::arg_list() {
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : ", ") + x; };
  for (BufferId b : info_.buffers) add(buf(b).name);
  for (const auto& ss : p_.size_symbols) add(cpp_identifier(ss.symbol->name));
  if (info_.random) {
    add("rng_seed");
    add("rng_offset");
    add("rng_device");
  }
  return s;
}

// 32-bit index math is safe when every loop extent and every element a buffer access can
// reach is a constant below 2^31.
bool KernelEmitter::fits_32bit() {
  const int64_t limit = int64_t{1} << 31;
  auto small = [&](Expr e) {
    auto c = ctx_.as_const(e);
    return c && *c >= 0 && *c < limit;
  };
  if (!small(product(k_.outer_ranges))) return false;
  for (const ComputeNode* n : nodes_) {
    if (!small(ctx_.mul(product(n->ranges), product(n->reduction_ranges)))) return false;
  }
  for (BufferId b : info_.buffers) {
    const loop::Buffer& B = buf(b);
    Expr extent = B.offset ? B.offset : ctx_.zero();
    for (size_t d = 0; d < B.sizes.size(); ++d) {
      auto st = ctx_.as_const(B.strides[d]);
      if (!st) return false;
      extent = ctx_.add(extent, ctx_.mul(B.sizes[d], ctx_.constant(*st < 0 ? -*st : *st)));
    }
    if (!small(extent)) return false;
  }
  return true;
}

void KernelEmitter::header_comment() {
  line("// " + k_.name + ": outer " + ranges_text(k_.outer_ranges) + ", " +
       std::to_string(nodes_.size()) + " node(s)");
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    std::string s = "//   step" + std::to_string(k_.steps[m]) + " " + buf(n.out).name + " = ";
    if (n.is_reduction()) {
      s += "reduce " + std::string(loop::reduce_kind_name(n.reduce)) + " " + ranges_text(n.ranges) +
           " over " + ranges_text(n.reduction_ranges);
    } else {
      s += "pointwise " + ranges_text(n.ranges);
    }
    if (locals_.count(n.out)) s += " (local)";
    line(s);
  }
}

// Decomposes the flat position `flat` into the variables `vars` over `ranges` (last fastest,
// in the order given).
void KernelEmitter::decompose(const std::string& flat, const std::vector<std::string>& vars,
                              const std::vector<Expr>& ranges) {
  std::vector<std::string> texts;
  for (Expr r : ranges) texts.push_back("(" + idx_t_ + ")(" + idx(r) + ")");
  decompose_text(flat, vars, texts);
}

void KernelEmitter::decompose_text(const std::string& flat, const std::vector<std::string>& vars,
                                   const std::vector<std::string>& ranges) {
  const std::string T = idx_t_;
  if (vars.empty()) return;
  if (vars.size() == 1) {
    line("const " + T + " " + vars[0] + " = " + flat + ";");
    return;
  }
  line(T + " rem_ = " + flat + ";");
  for (size_t j = vars.size(); j-- > 0;) {
    const std::string& r = ranges[j];
    if (j == 0) {
      line("const " + T + " " + vars[j] + " = rem_;");
    } else {
      line("const " + T + " " + vars[j] + " = rem_ % " + r + ";");
      line("rem_ /= " + r + ";");
    }
  }
}

// Which adjacent loop variables of the members' shared loop can share one index: fold[d] when
// every index a member computes is affine in its loop variables with variable d's stride that
// of d + 1 times d + 1's extent (the dims are contiguous in every buffer the loop touches, as a
// channels-last [N, H, W] is), and no member uses a loop variable as a value or a random
// offset. A folded loop indexes with one counter and no div/mod per element: measured on the
// H100 with two steps in flight (docs/decisions.md), BatchNorm statistics over [64, 256, 56, 56]
// channels-last 79.5 -> 72.5 us.
std::vector<bool> KernelEmitter::foldable_loop_vars(const std::vector<size_t>& members,
                                                    const std::vector<Expr>& ranges) {
  const size_t k = ranges.size();
  std::vector<bool> fold(k, k > 1);
  if (k < 2) return fold;
  auto none = [&] { return std::vector<bool>(k, false); };
  for (size_t m : members) {
    const ComputeNode& n = *nodes_[m];
    const std::vector<Expr> vars = row_inner_vars(n);
    if (vars.size() != k) return none();
    std::vector<Expr> flats;
    for (const Instr& in : n.body.instrs) {
      if (in.kind == InstrKind::IndexExpr || in.kind == InstrKind::Rand ||
          in.kind == InstrKind::Randn || in.kind == InstrKind::Indirect)
        return none();
      if (in.kind == InstrKind::Load) flats.push_back(flat_index(in.buffer, in.index));
    }
    if (!n.is_reduction()) flats.push_back(flat_index(n.out, n.store_index));
    for (Expr f : flats) {
      std::vector<Expr> stride(k);
      Expr rest = f;
      for (size_t d = 0; d < k; ++d) {
        stride[d] = ctx_.sub(ctx_.substitute(f, {{vars[d], ctx_.add(vars[d], ctx_.one())}}), f);
        for (Expr v : vars)
          if (ctx_.depends_on(stride[d], v)) return none();
        rest = ctx_.sub(rest, ctx_.mul(stride[d], vars[d]));
      }
      for (Expr v : vars)
        if (ctx_.depends_on(rest, v)) return none();
      for (size_t d = 0; d + 1 < k; ++d)
        if (!ctx_.provably_eq(stride[d], ctx_.mul(stride[d + 1], ranges[d + 1]))) fold[d] = false;
    }
  }
  fold[k - 1] = false;
  return fold;
}

// The members' shared loop with its foldable variables (foldable_loop_vars) folded into the
// next: returns the variables that stay and their extents, the last of each run counting the
// run's whole extent, for decompose(); the folded ones read as 0 in every index from now on
// (folded_, which flat_index substitutes, until the caller clears it after the loop).
std::pair<std::vector<std::string>, std::vector<Expr>> KernelEmitter::fold_loop_vars(
    const std::vector<size_t>& members, const std::vector<std::string>& vars,
    const std::vector<Expr>& ranges) {
  const std::vector<bool> fold = foldable_loop_vars(members, ranges);
  std::vector<std::string> kept;
  std::vector<Expr> extents;
  Expr run = ctx_.one();
  for (size_t d = 0; d < ranges.size(); ++d) {
    run = ctx_.mul(run, ranges[d]);
    if (fold[d]) continue;
    kept.push_back(vars[d]);
    extents.push_back(run);
    run = ctx_.one();
  }
  for (size_t m : members) {
    const std::vector<Expr> inner = row_inner_vars(*nodes_[m]);
    for (size_t d = 0; d < ranges.size(); ++d)
      if (fold[d]) folded_[inner[d]] = ctx_.zero();
  }
  return {kept, extents};
}

// The register copy of a stored one-per-row value (declared in emit_rows), rounded as the
// stored value is; loads of exactly that element by later members read the register.
void KernelEmitter::keep_row_value(const ComputeNode& n, const std::string& v) {
  DType t = buf(n.out).dtype;
  std::string val = t == DType::Bool ? "bool(" + v + ")" : rounded_value(t, v);
  line(local_name(n.out) + " = " + val + ";");
  row_values_[n.out] = idx(flat_index(n.out, n.store_index));
}

std::string KernelEmitter::local_name(BufferId b) { return buf(b).name + "_v"; }

void KernelEmitter::declare_local(size_t m) {
  const ComputeNode& n = *nodes_[m];
  if (locals_.count(n.out)) line(compute_ctype(buf(n.out).dtype) + " " + local_name(n.out) + ";");
}

void KernelEmitter::emit_store(const ComputeNode& n, const std::string& v) {
  DType t = buf(n.out).dtype;
  if (locals_.count(n.out)) {
    line(local_name(n.out) + " = " + rounded_value(t, v) + ";");
    return;
  }
  line(buf(n.out).name + "[" + idx(flat_index(n.out, n.store_index)) + "] = " + stored_value(t, v) +
       ";");
}

std::string KernelEmitter::tmp(InstrId i) {
  return value_names_ ? (*value_names_)[i] : "v" + std::to_string(i);
}

std::string KernelEmitter::emit_body(const ComputeNode& n) {
  const loop::Body& b = n.body;
  COIL_CHECK(b.result >= 0 && b.result < static_cast<int>(b.instrs.size()))
      << buf(n.out).name << ": body without a result";
  for (size_t i = 0; i < b.instrs.size(); ++i) {
    const Instr& in = b.instrs[i];
    const InstrId id = static_cast<InstrId>(i);
    std::string e = instr_expr(b, id);
    const ValueCache* reused = vec_mode_ ? value_reused(id) : nullptr;
    if (reused) e = "CC ? " + vec_loads_.at({member_, reused->reader_load}) + ".v[u_] : " + e;
    line("const " + compute_ctype(in.dtype) + " " + tmp(id) + " = " + e + ";");
    if (const ValueCache* written = vec_mode_ ? value_written(id) : nullptr)
      line("if constexpr (CC) " + written->vec + ".v[u_] = " + tmp(id) + ";");
    if (in.kind == InstrKind::Indirect)
      line("const int64_t " + cpp_identifier(in.expr->name) + " = " + tmp(i) + ";");
  }
  return tmp(b.result);
}

// The shared scalar expressions (backend/common/scalar_expr.h) with this emitter's names,
// index printing and loads.
std::string KernelEmitter::instr_expr(const loop::Body& b, InstrId id) {
  const Instr& in = b.instrs[id];
  if (fast_math_ && in.dtype == DType::Float32) {
    if (in.kind == InstrKind::Exp) return "coil::fast::exp(" + tmp(in.operands[0]) + ")";
    if (in.kind == InstrKind::Sigmoid) return "coil::fast::sigmoid(" + tmp(in.operands[0]) + ")";
    if (in.kind == InstrKind::Div)
      return "coil::fast::div(" + tmp(in.operands[0]) + ", " + tmp(in.operands[1]) + ")";
    if (in.kind == InstrKind::Reciprocal) {
      // BatchNorm's inference decomposition divides by sqrt(var + eps) per element: one
      // approximate reciprocal square root (rsqrtf, 2 ulp) instead of an IEEE square root and
      // an IEEE division, a dozen instructions each (the sqrt, left unread, is dropped).
      const Instr& x = b.instrs[in.operands[0]];
      if (x.kind == InstrKind::Sqrt && x.dtype == DType::Float32)
        return "coil::m::rsqrt(" + tmp(x.operands[0]) + ")";
      return "coil::fast::div(1.0f, " + tmp(in.operands[0]) + ")";
    }
  }
  if (in.kind == InstrKind::Rand && vec_mode_) {
    auto it = rand_blocks_.find({member_, id});
    if (it != rand_blocks_.end())
      return "coil::rand_uniform_in(" + it->second.second + ", " + it->second.first +
             ", uint64_t(" + tmp(in.operands[0]) + "), uint64_t(rng_offset + " + idx(in.expr) +
             "))";
  }
  ScalarExprHooks h;
  h.value = [&](InstrId i) { return tmp(i); };
  h.index = [&](Expr e) { return idx(e); };
  h.load = [&](const Instr& in, InstrId i) { return load_expr(in, i); };
  return scalar_instr_expr(b, id, h);
}

std::string KernelEmitter::load_expr(const Instr& in, InstrId id) {
  const std::string T = compute_ctype(in.dtype);
  std::string v;
  auto rv = row_values_.find(in.buffer);
  auto over = load_overrides_.find({member_, id});
  if (over != load_overrides_.end()) {
    v = over->second;  // a value this thread holds (load_overrides_)
    if (is_low_precision(buf(in.buffer).dtype)) v = "coil::to_f32(" + v + ")";
    if (buf(in.buffer).dtype == DType::Bool) v = "(" + v + " != 0)";
  } else if (locals_.count(in.buffer)) {
    v = local_name(in.buffer);
  } else if (rv != row_values_.end() && idx(flat_index(in.buffer, in.index)) == rv->second) {
    v = local_name(in.buffer);
  } else if (in.buffer == p_.rng_state) {
    auto pos = in.index.size() == 1 ? ctx_.as_const(in.index[0]) : std::nullopt;
    COIL_CHECK(pos && (*pos == 0 || *pos == 1)) << "rng state read at a non-constant index";
    v = *pos == 0 ? "coil::run_seed(rng_seed, rng_device)" : "rng_offset";
  } else {
    const loop::Buffer& B = buf(in.buffer);
    auto it = vec_mode_ || tile_mode_ ? vec_loads_.find({member_, id}) : vec_loads_.end();
    if (it != vec_loads_.end()) {
      v = vec_mode_ ? it->second + ".v[u_]" : it->second;
    } else {
      v = B.name + "[" + idx(flat_index(in.buffer, in.index)) + "]";
    }
    if (is_low_precision(B.dtype)) v = "coil::to_f32(" + v + ")";
    if (B.dtype == DType::Bool) v = "(" + v + " != 0)";
  }
  if (in.mask >= 0) {
    // The masked-off element is not read at all (it may lie outside the buffer).
    return "(" + tmp(in.mask) + " ? " + T + "(" + v + ") : " + T + "(0))";
  }
  return v;
}

}  // namespace coil::backend::cuda::detail
