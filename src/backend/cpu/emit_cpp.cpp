// C++ emitter: one function per KernelPlan (see emit_cpp.h for the ABI, schedule.h for the
// kernel model).
//
// Shape of a kernel:
//   outer loop nest over the kernel's outer ranges (OpenMP parallel when the work is large),
//   then each member node in program order:
//     pointwise with no inner dims:   one element, stored (or kept in a local scalar)
//     pointwise with inner dims:      an inner loop nest, `#pragma omp simd` on the innermost
//     reduction:                      an accumulator and a loop nest over the reduction range
//   A kernel whose members are all pointwise over exactly the outer ranges vectorizes its last
//   outer dim instead.
//
// KernelEmitter (kernel_emitter.h) writes one kernel. This file holds its skeleton (emit, the
// prologue, locals, loops), pointwise kernels (pure pointwise, transposed tiles, members,
// stores), bodies, instructions and loads, and emit_cpp; emit_cpp_reduce.cpp its reductions.
#include "coil/backend/cpu/emit_cpp.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"
#include "cpp_expr.h"
#include "kernel_emitter.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cpu {
namespace detail {
namespace {

std::string ctype(DType t) { return std::string(dtype_ctype(t)); }

// Whether e divides (or takes a remainder) by a size that is not a constant. *unsafe: some
// such divisor is not provably positive (computing it where the original code did not, say
// outside a load's mask, might divide by zero).
bool divides_by_symbol(sym::Context& ctx, Expr e, bool* unsafe) {
  bool found = false;
  if ((e->kind == sym::ExprKind::FloorDiv || e->kind == sym::ExprKind::Mod) &&
      !e->operands[1]->is_const()) {
    found = true;
    if (ctx.bounds(e->operands[1]).lo <= 0) *unsafe = true;
  }
  for (Expr o : e->operands) found = divides_by_symbol(ctx, o, unsafe) || found;
  return found;
}
bool is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

void KernelEmitter::emit() {
  header_comment();
  // Static kernels print as they always have (no attribute).
  const std::string attrs = has_symbolic_extent() ? "COIL_SYMBOLIC_EXTENTS " : "";
  line("COIL_KERNEL " + attrs + "void COIL_ENTRY(" + k_.name +
       ")(void* const* bufs, const int64_t* sizes) {");
  ++indent_;
  prologue();
  const size_t k = k_.outer_ranges.size();
  bool pure_pointwise = k > 0 && std::all_of(nodes_.begin(), nodes_.end(), [&](auto* n) {
                          return !n->is_reduction() && n->ranges.size() == k;
                        });
  Expr work = outer_numel();
  Expr max_inner = ctx_.one();
  for (const ComputeNode* n : nodes_) max_inner = ctx_.max(max_inner, inner_numel(*n));
  work = ctx_.mul(work, max_inner);
  std::string par = parallel_clause(work);  // "" = serial
  if (pure_pointwise) {
    emit_pure_pointwise(par);
  } else if (is_outer_reduction()) {
    emit_outer_reduction(par);
  } else {
    for (size_t j = 0; j < k; ++j) {
      if (j == 0 && !par.empty()) {
        line("#pragma omp parallel for" +
             std::string(k > 1 ? " collapse(" + std::to_string(k) + ")" : "") + par);
      }
      open_loop("x" + std::to_string(j), k_.outer_ranges[j], par.empty());
    }
    declare_locals();
    for (size_t m = 0; m < nodes_.size(); ++m) emit_member(m);
    for (size_t j = 0; j < k; ++j) close();
  }
  --indent_;
  line("}");
  line("");
}

void KernelEmitter::line(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (!s.empty()) os_ << std::string(2 * indent_, ' ');
  os_ << s << "\n";
}

// pragma_ok: no OpenMP pragma binds this loop (`#pragma GCC unroll` may not stand between
// one and its loop). In a kernel with masked loads (cat, pad), such a loop is kept from
// being unrolled completely: g++ 12.2 -O3 miscompiled the outer loop vectorized over a
// fully unrolled inner one (masked loads read zeros: fuzz seed 1320's [12, 2] cat, and the
// pad of seed 23; HostCompiler.MaskedLoadsInUnrolledInnerLoop). A `#pragma omp simd` loop
// is not unrolled before vectorization anyway.
void KernelEmitter::open_loop(const std::string& var, Expr extent, bool pragma_ok) {
  if (pragma_ok && masked_loads_) line("#pragma GCC unroll 1");
  line("for (int64_t " + var + " = 0; " + var + " < " + idx(extent) + "; ++" + var + ") {");
  ++indent_;
}

void KernelEmitter::close() {
  --indent_;
  line("}");
}

// Symbol -> C++ name for the node being emitted: its first k index vars are the kernel's
// outer loop variables x0.., everything else keeps its (sanitized) name.
std::string KernelEmitter::idx(Expr e) {
  return cpp_index_expr(ctx_, e, [this](Expr s) -> std::string {
    auto it = sym_names_.find(s);
    return it != sym_names_.end() ? it->second : cpp_identifier(s->name);
  });
}

void KernelEmitter::set_node_names(const ComputeNode& n) {
  sym_names_.clear();
  for (size_t j = 0; j < k_.outer_ranges.size() && j < n.index_vars.size(); ++j) {
    sym_names_[n.index_vars[j]] = "x" + std::to_string(j);
  }
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

std::string KernelEmitter::ranges_text(const std::vector<Expr>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + ctx_.str(r[i]);
  return s + "]";
}

// Whether some loop of the kernel runs to a size that is not a constant: gcc then emits its
// simd loops with vectorized epilogues, which the prelude's COIL_SYMBOLIC_EXTENTS narrows.
bool KernelEmitter::has_symbolic_extent() const {
  auto symbolic = [&](const std::vector<Expr>& r) {
    return std::any_of(r.begin(), r.end(), [&](Expr e) { return !ctx_.as_const(e); });
  };
  if (symbolic(k_.outer_ranges)) return true;
  return std::any_of(nodes_.begin(), nodes_.end(), [&](const ComputeNode* n) {
    return symbolic(n->ranges) || symbolic(n->reduction_ranges);
  });
}

void KernelEmitter::prologue() {
  for (size_t i = 0; i < p_.size_symbols.size(); ++i) {
    line("const int64_t " + cpp_identifier(p_.size_symbols[i].symbol->name) + " = sizes[" +
         std::to_string(i) + "];");
  }
  std::set<BufferId> read, written;
  bool rng = false;
  for (const ComputeNode* n : nodes_) {
    if (!locals_.count(n->out)) written.insert(n->out);
    for (const Instr& in : n->body.instrs) {
      if (in.kind == InstrKind::Load && !locals_.count(in.buffer)) read.insert(in.buffer);
      if (in.kind == InstrKind::Rand || in.kind == InstrKind::Randn) rng = true;
    }
  }
  std::set<BufferId> all = read;
  all.insert(written.begin(), written.end());
  const std::set<BufferId> shared = loop::written_through_alias(p_, all, written);
  written_ = written;
  written_.insert(shared.begin(), shared.end());
  for (BufferId b : all) {
    const loop::Buffer& B = buf(b);
    // bool buffers are addressed as bytes: gcc would not vectorize some loops loading
    // `bool` (a causal-mask softmax), and the values are 0/1 either way.
    std::string T = B.dtype == DType::Bool ? "uint8_t" : ctype(B.dtype);
    bool w = written.count(b) > 0;
    std::string q = w ? "" : "const ";
    // A mutated input written through a view and read through another name: no restrict.
    std::string r = shared.count(b) ? "* " : "* __restrict__ ";
    line(q + T + r + B.name + " = (" + q + T + "*)bufs[" + std::to_string(b) + "];");
  }
  if (rng) {
    COIL_CHECK(p_.rng_state >= 0) << "Rand without an rng_state buffer";
    line("const int64_t rng_offset = ((const int64_t*)bufs[" + std::to_string(p_.rng_state) +
         "])[1];");
  }
}

Expr KernelEmitter::product(const std::vector<Expr>& v, size_t from) {
  Expr r = ctx_.one();
  for (size_t i = from; i < v.size(); ++i) r = ctx_.mul(r, v[i]);
  return r;
}

Expr KernelEmitter::inner_numel(const ComputeNode& n) {
  return ctx_.mul(product(n.ranges, k_.outer_ranges.size()), product(n.reduction_ranges));
}

// " if(...)" / "" (always) or "" with serial=true.
std::string KernelEmitter::parallel_clause(Expr work) {
  std::string nt =
      options_.num_threads > 0 ? " num_threads(" + std::to_string(options_.num_threads) + ")" : "";
  if (auto c = ctx_.as_const(work)) {
    if (*c < options_.parallel_threshold) return "";
    return nt.empty() ? " " : nt;  // non-empty marks "parallel"
  }
  return " if(" + idx(work) + " >= " + cpp_int_literal(options_.parallel_threshold) + ")" + nt;
}

void KernelEmitter::declare_locals() {
  for (const ComputeNode* n : nodes_) {
    if (locals_.count(n->out)) {
      line(compute_ctype(buf(n->out).dtype) + " " + local_name(n->out) + ";");
    }
  }
}

// Loop order of a pointwise kernel: the dims in order, except that the dim along which the
// first stored buffer is contiguous goes innermost (x.t() + 1 keeps x's transposed layout,
// and walking it row by row would stride through memory on every store).
std::vector<size_t> KernelEmitter::pointwise_loop_order() {
  const size_t k = k_.outer_ranges.size();
  std::vector<size_t> order(k);
  for (size_t j = 0; j < k; ++j) order[j] = j;
  if (k < 2) return order;
  for (const ComputeNode* n : nodes_) {
    if (locals_.count(n->out) || n->index_vars.size() != k) continue;
    Expr flat = flat_index(n->out, n->store_index);
    for (size_t d = 0; d + 1 < k; ++d) {
      if (const_step(flat, n->index_vars[d]) == std::optional<int64_t>(1)) {
        order.erase(order.begin() + d);
        order.push_back(d);
        break;
      }
    }
    break;
  }
  return order;
}

// How far flat index `flat` moves when `var` grows by one (an expression), and that step
// where it is a constant.
Expr KernelEmitter::step(Expr flat, Expr var) {
  return ctx_.sub(ctx_.substitute(flat, {{var, ctx_.add(var, ctx_.one())}}), flat);
}

// `for (x = x_b; x < min(x_b + tile, extent); ++x) {`: dim j's loop inside its tile.
std::string KernelEmitter::tile_loop_text(size_t j) {
  const std::string v = "x" + std::to_string(j), end = idx(k_.outer_ranges[j]);
  const std::string T = std::to_string(kTransposeTile);
  return "for (int64_t " + v + " = " + v + "_b; " + v + " < (" + end + " - " + v + "_b < " + T +
         " ? " + end + " : " + v + "_b + " + T + "); ++" + v + ") {";
}

// The dim along which some load of a pure pointwise kernel is contiguous while the store's
// dim, `inner` (innermost in `order`), strides through it: a transposed operand. -1 when there
// is none, when both dims are small enough to stay in cache, or when a load is masked (the
// unswitched loop of emit_pure_pointwise keeps those).
int KernelEmitter::transposed_dim(const std::vector<size_t>& order) {
  const size_t k = k_.outer_ranges.size();
  const size_t inner = order.back();
  int found = -1;
  for (const ComputeNode* n : nodes_) {
    if (n->index_vars.size() != k) return -1;
    for (const Instr& in : n->body.instrs) {
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      if (in.mask >= 0) return -1;
      Expr flat = flat_index(in.buffer, in.index);
      auto s = const_step(flat, n->index_vars[inner]);
      if (s && (*s == 0 || *s == 1)) continue;
      for (size_t d = 0; d < k && found < 0; ++d)
        if (d != inner && const_step(flat, n->index_vars[d]) == std::optional<int64_t>(1))
          found = static_cast<int>(d);
    }
  }
  if (found < 0) return -1;
  auto a = ctx_.as_const(k_.outer_ranges[found]);
  auto b = ctx_.as_const(k_.outer_ranges[inner]);
  if (a && b && *a * *b <= kTransposeTile * kTransposeTile) return -1;
  return found;
}

// A pure pointwise kernel with a transposed operand (transposed_dim `t`) as tiles of
// kTransposeTile x kTransposeTile over t and the store's contiguous dim: a tile's rows of the
// operand stay in L1 while the inner loop walks its columns. Walking whole rows instead
// fetched a new cache line for every element of a 512 x 512 transpose (6x slower).
void KernelEmitter::emit_tiled_pointwise(const std::string& par, std::vector<size_t> order,
                                         size_t t) {
  const size_t k = k_.outer_ranges.size();
  const size_t inner = order.back();
  order.erase(std::find(order.begin(), order.end(), t));
  order.pop_back();
  const std::string T = std::to_string(kTransposeTile);
  auto name = [](size_t j) { return "x" + std::to_string(j); };
  if (!par.empty()) line("#pragma omp parallel for collapse(" + std::to_string(k) + ")" + par);
  for (size_t j : order) open_loop(name(j), k_.outer_ranges[j]);
  for (size_t j : {t, inner}) {
    const std::string v = name(j), end = idx(k_.outer_ranges[j]);
    line("for (int64_t " + v + "_b = 0; " + v + "_b < " + end + "; " + v + "_b += " + T + ") {");
    ++indent_;
  }
  for (const ComputeNode* n : nodes_) {
    set_node_names(*n);
    copy_transposed_tiles(*n, t, inner);
  }
  for (size_t j : {t, inner}) {
    if (j == inner) {
      if (nodes_.size() == 1) {
        set_node_names(*nodes_[0]);
        emit_invariants(*nodes_[0], {nodes_[0]->index_vars.at(j)});
      }
      for (const ComputeNode* n : nodes_) {
        set_node_names(*n);
        declare_load_strides(*n, n->index_vars.at(j));
      }
      line("#pragma omp simd");
    }
    line(tile_loop_text(j));
    ++indent_;
  }
  declare_locals();
  for (size_t m = 0; m < nodes_.size(); ++m) emit_member(m);
  load_strides_.clear();
  tile_loads_.clear();
  for (size_t j = 0; j < k + 2; ++j) close();
}

// Inside the block loops of emit_tiled_pointwise: copies the tile of each transposed load
// of n (contiguous along dim t, strided along the store's dim `inner`) into a local array
// laid out along `inner`, which the simd loop then reads with unit stride (load_expr).
// Reading the operand itself in the simd loop left the loop scalar wherever gcc turned the
// strided load into a masked one (a load used under a select: "not suitable for strided
// load"), 16 ns an element for OPT's attention-probability recomputation.
void KernelEmitter::copy_transposed_tiles(const ComputeNode& n, size_t t, size_t inner) {
  const std::string T = std::to_string(kTransposeTile);
  const std::string xt = "x" + std::to_string(t), xs = "x" + std::to_string(inner);
  for (const Instr& in : n.body.instrs) {
    if (in.kind != InstrKind::Load || locals_.count(in.buffer) || in.mask >= 0) continue;
    if (written_.count(in.buffer)) continue;  // the kernel writes it: read it in place
    Expr flat = flat_index(in.buffer, in.index);
    if (tile_loads_.count({in.buffer, flat})) continue;
    auto s = const_step(flat, n.index_vars[inner]);
    if ((s && (*s == 0 || *s == 1)) || const_step(flat, n.index_vars[t]) != 1) continue;
    const loop::Buffer& B = buf(in.buffer);
    const std::string name = "tile" + std::to_string(next_tile_++);
    const std::string at = T + "*(" + xt + " - " + xt + "_b) + " + xs + " - " + xs + "_b";
    line((B.dtype == DType::Bool ? std::string("uint8_t") : ctype(B.dtype)) + " " + name + "[" +
         std::to_string(kTransposeTile * kTransposeTile) + "];");
    line(tile_loop_text(inner));
    ++indent_;
    line(tile_loop_text(t));
    ++indent_;
    line(name + "[" + at + "] = " + B.name + "[" + idx(flat) + "];");
    close();
    close();
    tile_loads_[{in.buffer, flat}] = name + "[" + at + "]";
  }
}

// Whether `flat` steps along `outer` by `inner_extent` times its step along `inner`: then
// outer*inner_extent + inner is one index, and flat at (outer = 0, inner = that index) is flat.
bool KernelEmitter::chained(Expr flat, Expr inner, Expr outer, int64_t inner_extent) {
  const std::optional<int64_t> a = const_step(flat, outer), b = const_step(flat, inner);
  return a && b && *a == *b * inner_extent;
}

// Folds the dims just outside the innermost loop into it while that loop is short (a weight
// gradient's [512, 512, 3, 3] copy ran a simd loop of 3 elements under 786 K iterations of the
// loops around it: 0.52 ms for 9 MB on the 2-core CPU) and every access is chained across
// them (chained): the innermost loop then runs over their product, and the folded dims'
// variables are 0 in every flat index (folded_zero_), which leaves it equal to its value at the
// folded element. Only plain loads, arithmetic and stores, whose indices are all flat: an index
// expression, a mask or a gather would read the folded variables otherwise. Returns the folded
// loop's extent (nullptr when nothing folds); `order` loses the folded dims.
Expr KernelEmitter::fold_chained_dims(std::vector<size_t>& order) {
  constexpr int64_t kFoldBelow = 64;  // elements of the innermost loop
  folded_zero_.clear();
  if (order.size() < 2) return nullptr;
  for (const ComputeNode* n : nodes_) {
    if (n->index_vars.size() != k_.outer_ranges.size()) return nullptr;
    for (const Instr& in : n->body.instrs) {
      if (in.kind == InstrKind::IndexExpr || in.kind == InstrKind::Indirect ||
          in.kind == InstrKind::Rand || in.kind == InstrKind::Randn || in.mask >= 0)
        return nullptr;
    }
  }
  const size_t inner = order.back();
  std::optional<int64_t> extent = ctx_.as_const(k_.outer_ranges[inner]);
  while (extent && *extent < kFoldBelow && order.size() >= 2) {
    const size_t outer = order[order.size() - 2];
    const std::optional<int64_t> e = ctx_.as_const(k_.outer_ranges[outer]);
    if (!e) break;
    bool ok = true;
    for (const ComputeNode* n : nodes_) {
      const Expr vi = n->index_vars[inner], vo = n->index_vars[outer];
      for (const Instr& in : n->body.instrs)
        if (ok && in.kind == InstrKind::Load && !locals_.count(in.buffer))
          ok = chained(flat_index(in.buffer, in.index), vi, vo, *extent);
      if (ok && !locals_.count(n->out))
        ok = chained(flat_index(n->out, n->store_index), vi, vo, *extent);
    }
    if (!ok) break;
    for (const ComputeNode* n : nodes_) folded_zero_[n->index_vars[outer]] = ctx_.zero();
    order.erase(order.end() - 2);
    extent = *extent * *e;
  }
  return folded_zero_.empty() ? nullptr : ctx_.constant(*extent);
}

void KernelEmitter::emit_pure_pointwise(const std::string& par) {
  std::vector<size_t> order = pointwise_loop_order();
  bool simd = true;
  for (const ComputeNode* n : nodes_)
    simd = simd && vectorizable(*n, n->index_vars.at(order.back()), true, true);
  if (const int t = simd && order.size() >= 2 ? transposed_dim(order) : -1; t >= 0) {
    emit_tiled_pointwise(par, order, static_cast<size_t>(t));
    return;
  }
  const Expr folded_extent = fold_chained_dims(order);
  const size_t k = order.size();
  for (size_t jj = 0; jj < k; ++jj) {
    const size_t j = order[jj];
    bool last = jj + 1 == k;
    if (last && nodes_.size() == 1) {
      // Invariants of the innermost loop (masks of a padded row) go before it.
      set_node_names(*nodes_[0]);
      emit_invariants(*nodes_[0], {nodes_[0]->index_vars.at(j)});
    }
    if (last && simd) {
      for (const ComputeNode* n : nodes_) {
        set_node_names(*n);
        declare_load_strides(*n, n->index_vars.at(j));
      }
    }

    if (jj == 0 && !par.empty()) {
      if (last) {
        line(std::string("#pragma omp parallel for") + (simd ? " simd" : "") + par);
      } else {
        line("#pragma omp parallel for" +
             std::string(k > 2 ? " collapse(" + std::to_string(k - 1) + ")" : "") + par);
      }
    }
    // The loops `parallel for` collapses: the first k - 1 (at least one).
    const size_t collapsed = par.empty() ? 0 : std::max<size_t>(1, k - 1);
    const InstrId mask = last && jj > 0 && simd ? invariant_load_mask() : -1;
    if (mask >= 0) {
      // Unswitched on the row's mask: g++ 12 vectorizes no loop with a masked load whose
      // mask is the same for every element (".MASK_LOAD: no vectype"); a padded row's
      // copy ran scalar (MobileNetV2's padded depthwise inputs: 2.6 ms for 480 K floats).
      const std::vector<bool> hoisted = hoisted_;
      const auto bases = index_bases_;
      for (bool taken : {true, false}) {
        line(taken ? "if (" + tmp(mask) + ") {" : "} else {");
        ++indent_;
        forced_masks_ = {{mask, taken}};
        hoisted_ = hoisted;
        index_bases_ = bases;
        line("#pragma omp simd");
        open_loop("x" + std::to_string(j), k_.outer_ranges[j], false);
        declare_locals();
        emit_member(0);
        close();
        --indent_;
      }
      line("}");
      forced_masks_.clear();
      load_strides_.clear();
      for (size_t j2 = 0; j2 + 1 < k; ++j2) close();
      return;
    }
    if (last && simd && (jj > 0 || par.empty())) line("#pragma omp simd");
    const Expr extent = last && folded_extent ? folded_extent : k_.outer_ranges[j];
    open_loop("x" + std::to_string(j), extent, jj >= collapsed && !(last && simd));
  }
  declare_locals();
  for (size_t m = 0; m < nodes_.size(); ++m) {
    if (simd) {
      // What does not change along the simd loop (its dim and the dims folded into it).
      const ComputeNode& n = *nodes_[m];
      std::vector<Expr> vars = {n.index_vars.at(order.back())};
      for (const auto& [var, zero] : folded_zero_)
        if (std::find(n.index_vars.begin(), n.index_vars.end(), var) != n.index_vars.end())
          vars.push_back(var);
      simd_invariant_ = variant_instrs(n, vars);
      simd_invariant_.flip();
    }
    emit_member(m);
    simd_invariant_.clear();
  }
  load_strides_.clear();
  folded_zero_.clear();
  for (size_t j = 0; j < k; ++j) close();
}

// The one mask, computed before the innermost loop (emit_invariants), under which a single
// node's loads in that loop read; -1 when there is none or several.
InstrId KernelEmitter::invariant_load_mask() const {
  if (nodes_.size() != 1) return -1;
  const loop::Body& b = nodes_[0]->body;
  InstrId found = -1;
  for (size_t i = 0; i < b.instrs.size(); ++i) {
    const Instr& in = b.instrs[i];
    if (in.kind != InstrKind::Load || in.mask < 0 || (i < hoisted_.size() && hoisted_[i])) continue;
    if (static_cast<size_t>(in.mask) >= hoisted_.size() || !hoisted_[in.mask]) return -1;
    if (found >= 0 && found != in.mask) return -1;
    found = in.mask;
  }
  return found;
}

// Whether loads and the store of node n step by 0 or 1 element along `var` (so a simd loop
// over var needs no gathers), and no load is data dependent. With `strided_loads`, loads
// may step by any amount that is the same along var (a transposed operand of a pointwise
// kernel): each lane's element is loaded on its own, but the arithmetic, where the time of
// an erf or exp goes, runs vectorized (declare_load_strides).
bool KernelEmitter::vectorizable(const ComputeNode& n, Expr var, bool check_store,
                                 bool strided_loads) {
  if (var == nullptr) return false;
  auto stride_ok = [&](Expr flat, bool store) {
    Expr d = step(flat, var);
    auto c = ctx_.as_const(d);
    if (c && (*c == 1 || (!store && *c == 0))) return true;
    // A load whose index is affine in var (its step does not change along var).
    return !store && strided_loads && !ctx_.depends_on(d, var);
  };
  std::vector<bool> variant = variant_instrs(n, {var});
  for (size_t i = 0; i < n.body.instrs.size(); ++i) {
    const Instr& in = n.body.instrs[i];
    // An index bound per element is a gather; one that is the same along the loop (a cat's
    // running offset) is not.
    if (in.kind == InstrKind::Indirect && variant[i]) return false;
    if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
    // A mask that is the same along the loop (a padded or sliced row) keeps the loop
    // vectorizable; one that changes along it would need masked vector loads.
    if (in.mask >= 0 && variant[in.mask]) return false;
    if (!stride_ok(flat_index(in.buffer, in.index), false)) return false;
  }
  if (check_store && !locals_.count(n.out) && !stride_ok(flat_index(n.out, n.store_index), true)) {
    return false;
  }
  return true;
}

Expr KernelEmitter::flat_index(BufferId b, const std::vector<Expr>& index) {
  const loop::Buffer& B = buf(b);
  COIL_CHECK(index.size() == B.strides.size())
      << B.name << ": index rank " << index.size() << " vs " << B.strides.size();
  Expr e = B.offset ? B.offset : ctx_.zero();
  for (size_t d = 0; d < index.size(); ++d) e = ctx_.add(e, ctx_.mul(index[d], B.strides[d]));
  return folded_zero_.empty() ? e : ctx_.substitute(e, folded_zero_);
}

void KernelEmitter::emit_member(size_t m) {
  const ComputeNode& n = *nodes_[m];
  set_node_names(n);
  const size_t k = k_.outer_ranges.size();
  line("// " + buf(n.out).name);
  line("{");
  ++indent_;
  if (n.is_reduction()) {
    emit_reduction(n);
  } else if (n.ranges.size() == k) {
    std::string v = emit_body(n);
    emit_store(n, v);
  } else {
    // Inner pointwise loops over dims k.. of the node.
    std::string par = k == 0 ? parallel_clause(inner_numel(n)) : "";
    bool simd = vectorizable(n, n.index_vars.back(), true, true);
    emit_invariants(n, std::vector<Expr>(n.index_vars.begin() + k, n.index_vars.end()));
    const auto outer_strides = load_strides_;
    if (simd) declare_load_strides(n, n.index_vars.back());
    for (size_t j = k; j < n.ranges.size(); ++j) {
      bool first = j == k, last = j + 1 == n.ranges.size();
      if (first && !par.empty()) {
        line(std::string("#pragma omp parallel for") + (last && simd ? " simd" : "") + par);
      } else if (last && simd) {
        line("#pragma omp simd");
      }
      open_loop(cpp_identifier(n.index_vars[j]->name), n.ranges[j],
                !(first && !par.empty()) && !(last && simd));
    }
    std::string v = emit_body(n);
    emit_store(n, v);
    for (size_t j = k; j < n.ranges.size(); ++j) close();
    load_strides_ = outer_strides;
  }
  index_bases_.clear();  // their names go out of scope here
  --indent_;
  line("}");
}

void KernelEmitter::emit_store(const ComputeNode& n, const std::string& v) {
  DType t = buf(n.out).dtype;
  if (locals_.count(n.out)) {
    line(local_name(n.out) + " = " + rounded_value(t, v) + ";");
    return;
  }
  line(buf(n.out).name + "[" + index_text(flat_index(n.out, n.store_index)) +
       "] = " + stored_value(t, v) + ";");
}

// Emits, before a node's inner loops, the instructions that do not depend on the inner loop
// variables (a row's max and sum inside softmax's last loop, log of the row sum in
// log_softmax): computed once per outer point, and the inner loop stays simple enough to
// vectorize (gcc gave up on a loop with an invariant inlined log in it).
void KernelEmitter::emit_invariants(const ComputeNode& n, const std::vector<Expr>& inner_vars) {
  const loop::Body& b = n.body;
  hoisted_.assign(b.instrs.size(), false);
  std::vector<bool> variant = variant_instrs(n, inner_vars);
  for (size_t i = 0; i < b.instrs.size(); ++i) {
    if (variant[i] || static_cast<InstrId>(i) == b.result) continue;
    emit_instr(b, static_cast<InstrId>(i));
    hoisted_[i] = true;
  }
  hoist_index_bases(n, inner_vars, variant);
}

// Emits, before a node's inner loops, the part of each index that does not change along
// them when it divides by a symbolic size: 4096*s1*(x0 / (s1 - 1)) + 4096*(x0 % (s1 - 1)),
// the row of gpt2's sliced [b*(t-1), vocab] logits. gcc keeps a division by a run-time value
// inside the loop (it could trap), and the simd loops of that softmax ran 4x slower than with
// the constant divisor of a static graph. Static indices divide by constants and are left
// as they are. Loads and stores then print `base + inner part` (index_text).
void KernelEmitter::hoist_index_bases(const ComputeNode& n, std::vector<Expr> inner_vars,
                                      const std::vector<bool>& variant) {
  index_bases_.clear();
  const loop::Body& b = n.body;
  for (size_t i = 0; i < b.instrs.size(); ++i)
    if (variant[i] && b.instrs[i].kind == InstrKind::Indirect && b.instrs[i].expr)
      inner_vars.push_back(b.instrs[i].expr);
  auto varies = [&](Expr e) {
    for (Expr v : inner_vars)
      if (ctx_.depends_on(e, v)) return true;
    return false;
  };
  std::unordered_map<Expr, std::string> names;
  auto consider = [&](BufferId id, const std::vector<Expr>& index) {
    if (locals_.count(id)) return;
    Expr flat = flat_index(id, index);
    if (flat->kind != sym::ExprKind::Add || index_bases_.count(flat)) return;
    std::vector<Expr> base, inner;
    for (Expr t : flat->operands) (varies(t) ? inner : base).push_back(t);
    if (base.empty() || inner.empty()) return;
    Expr e = ctx_.sum(base);
    bool unsafe = false;
    if (!divides_by_symbol(ctx_, e, &unsafe) || unsafe) return;
    auto [it, fresh] = names.emplace(e, "");
    if (fresh) {
      // Skip the graph's own symbol names (a size named base0 would be shadowed).
      do it->second = "base" + std::to_string(next_base_++);
      while (ctx_.has_symbol(it->second));
      line("const int64_t " + it->second + " = " + idx(e) + ";");
    }
    index_bases_[flat] = {it->second, ctx_.sum(inner)};
  };
  for (size_t i = 0; i < b.instrs.size(); ++i)
    if (variant[i] && b.instrs[i].kind == InstrKind::Load)
      consider(b.instrs[i].buffer, b.instrs[i].index);
  if (!n.is_reduction()) consider(n.out, n.store_index);
}

// A flat index as C++: a hoisted base (hoist_index_bases) plus the inner part, or all of it.
std::string KernelEmitter::index_text(Expr flat) {
  auto it = index_bases_.find(flat);
  std::string base;
  Expr rest = flat;
  if (it != index_bases_.end()) {
    base = it->second.first + " + ";
    rest = it->second.second;
  }
  auto s = load_strides_.find(flat);
  if (s == load_strides_.end()) return base + idx(rest);
  Expr var = s->second.second;
  return base + idx(ctx_.substitute(rest, {{var, ctx_.zero()}})) + " + " + s->second.first + "*" +
         idx(var);
}

// Before a simd loop over `var` (the node's own loop variable): names each strided load's
// step, `const int64_t strideN = coil::runtime_value(64);`, which index_text then prints as
// `rest + strideN*var`. The first loads and stores of the node the loop runs are n's.
void KernelEmitter::declare_load_strides(const ComputeNode& n, Expr var) {
  for (const Instr& in : n.body.instrs) {
    if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
    Expr flat = flat_index(in.buffer, in.index);
    if (load_strides_.count(flat) || tile_loads_.count({in.buffer, flat})) continue;
    Expr d = step(flat, var);
    auto c = ctx_.as_const(d);
    if ((c && (*c == 0 || *c == 1)) || ctx_.depends_on(d, var)) continue;
    std::string name;
    do name = "stride" + std::to_string(next_stride_++);
    while (ctx_.has_symbol(name));
    line("const int64_t " + name + " = coil::runtime_value(" + idx(d) + ");");
    load_strides_[flat] = {name, var};
  }
}

// Per instruction of n's body: whether its value changes with any of `vars`.
std::vector<bool> KernelEmitter::variant_instrs(const ComputeNode& n,
                                                const std::vector<Expr>& vars) {
  const loop::Body& b = n.body;
  // The symbol an Indirect instruction binds (a gathered index) varies with the loop when
  // the instruction does; loads indexed by it must not be hoisted above its definition.
  std::vector<Expr> inner_vars = vars;
  auto depends = [&](Expr e) {
    if (e == nullptr) return false;
    for (Expr v : inner_vars)
      if (ctx_.depends_on(e, v)) return true;
    return false;
  };
  std::vector<bool> variant(b.instrs.size(), false);
  for (size_t i = 0; i < b.instrs.size(); ++i) {
    const Instr& in = b.instrs[i];
    bool v = false;
    for (InstrId o : in.operands) v = v || (o >= 0 && variant[o]);
    switch (in.kind) {
      case InstrKind::Load:
        v = v || (in.mask >= 0 && variant[in.mask]);
        if (!locals_.count(in.buffer))
          for (Expr e : in.index) v = v || depends(e);
        break;
      case InstrKind::IndexExpr:
      case InstrKind::Rand:
      case InstrKind::Randn:
        v = v || depends(in.expr);
        break;
      case InstrKind::Indirect:
        if (v && in.expr != nullptr) inner_vars.push_back(in.expr);
        break;
      default:
        break;
    }
    variant[i] = v;
    if (v && in.kind == InstrKind::Indirect && in.expr != nullptr) inner_vars.push_back(in.expr);
  }
  return variant;
}

void KernelEmitter::emit_instr(const loop::Body& b, InstrId i) {
  const Instr& in = b.instrs[i];
  std::string T = compute_ctype(in.dtype);
  line("const " + T + " " + tmp(i) + " = " + instr_expr(b, i) + ";");
  if (in.kind == InstrKind::Indirect) {
    line("const int64_t " + cpp_identifier(in.expr->name) + " = " + tmp(i) + ";");
  }
}

// Emits the body's instructions as statements; returns the result's expression.
std::string KernelEmitter::emit_body(const ComputeNode& n) {
  const loop::Body& b = n.body;
  COIL_CHECK(b.result >= 0 && b.result < static_cast<int>(b.instrs.size()))
      << buf(n.out).name << ": body without a result";
  std::vector<bool> hoisted;
  hoisted.swap(hoisted_);
  for (size_t i = 0; i < b.instrs.size(); ++i) {
    if (i < hoisted.size() && hoisted[i]) continue;
    emit_instr(b, static_cast<InstrId>(i));
  }
  return tmp(b.result);
}

// The shared scalar expressions (backend/common/scalar_expr.h) with this emitter's names,
// index printing and loads.
std::string KernelEmitter::instr_expr(const loop::Body& b, InstrId id) {
  ScalarExprHooks h;
  h.value = [&](InstrId i) { return tmp(i); };
  h.index = [&](Expr e) { return idx(e); };
  h.load = [&](const Instr& in, InstrId i) { return load_expr(b, in); };
  const Instr& in = b.instrs[id];
  if (in.kind == InstrKind::Where && row_invariant(in.operands[0]) && in.dtype != DType::Bool) {
    // A select on a mask computed before the simd loop: bit masks (coil::pick).
    const std::string T = compute_ctype(in.dtype);
    return "coil::pick(" + tmp(in.operands[0]) + ", " + T + "(" + tmp(in.operands[1]) + "), " + T +
           "(" + tmp(in.operands[2]) + "))";
  }
  return scalar_instr_expr(b, id, h);
}

std::string KernelEmitter::load_expr(const loop::Body& b, const Instr& in) {
  const std::string T = compute_ctype(in.dtype);
  std::string v;
  if (locals_.count(in.buffer)) {
    v = local_name(in.buffer);
  } else {
    const loop::Buffer& B = buf(in.buffer);
    const Expr flat = flat_index(in.buffer, in.index);
    auto tile = tile_loads_.find({in.buffer, flat});
    v = tile != tile_loads_.end() ? tile->second : B.name + "[" + index_text(flat) + "]";
    if (is_low_precision(B.dtype)) v = "coil::to_f32(" + v + ")";
  }
  if (in.mask >= 0) {
    auto forced = forced_masks_.find(in.mask);
    if (forced != forced_masks_.end()) return forced->second ? v : T + "(0)";
    if (row_invariant(in.mask) && !locals_.count(in.buffer) && never_empty(in.buffer) &&
        !tile_loads_.count({in.buffer, flat_index(in.buffer, in.index)}))
      return "coil::pick(" + tmp(in.mask) + ", " + T + "(" + clamped_load(in) + "), " + T + "(0))";
    return "(" + tmp(in.mask) + " ? " + T + "(" + v + ") : " + T + "(0))";
  }
  return v;
}

// Whether instruction i of the body being emitted in a simd loop has the same value in every
// lane (it depends on the outer indices alone; emitted before the loop or hoisted by g++).
bool KernelEmitter::row_invariant(InstrId i) const {
  return i >= 0 && static_cast<size_t>(i) < simd_invariant_.size() && simd_invariant_[i];
}

// Whether every dim of buffer b has at least one element at any size (a clamped index then
// names one of them; an empty buffer has none to read).
bool KernelEmitter::never_empty(BufferId b) {
  for (Expr size : buf(b).sizes)
    if (ctx_.bounds(size).lo < 1) return false;
  return true;
}

// max(e, 0), with the clamp moved inside a floor division by a positive constant:
// max(a // c, 0) == max(a, 0) // c. The division of a non-negative value prints as C++'s `/`,
// where a floor division of a value that may be negative prints as coil::m::floordiv, whose
// select g++ left inside the simd loop (a strided 1-d convolution's input gradient, whose
// taps read (x - 1) // 2, stayed scalar).
Expr KernelEmitter::at_least_zero(Expr e) {
  if (e->kind == sym::ExprKind::FloorDiv) {
    const std::optional<int64_t> c = ctx_.as_const(e->operands[1]);
    if (c && *c > 0) return ctx_.floordiv(ctx_.max(e->operands[0], ctx_.zero()), e->operands[1]);
  }
  return ctx_.max(e, ctx_.zero());
}

// A masked load read at its index clamped into the buffer's dims, so that reading it is safe
// whatever its mask. Where the mask holds, the index is inside and the clamp changes nothing;
// where it does not, the value read is not used. The clamp of a dim whose index is provably in
// range simplifies away. Several masks of one simd loop (a max-pool's backward reads up to four
// windows per element, each under its own edge test) keep the loop from being unswitched on
// one, and g++ vectorizes no conditional load (load_expr selects the value with coil::pick).
std::string KernelEmitter::clamped_load(const Instr& in) {
  const loop::Buffer& B = buf(in.buffer);
  std::vector<Expr> index;
  for (size_t d = 0; d < in.index.size(); ++d) {
    Expr hi = ctx_.sub(B.sizes[d], ctx_.one());
    index.push_back(ctx_.min(at_least_zero(in.index[d]), hi));
  }
  std::string v = B.name + "[" + index_text(flat_index(in.buffer, index)) + "]";
  if (is_low_precision(B.dtype)) v = "coil::to_f32(" + v + ")";
  return v;
}

}  // namespace detail

CppSource emit_cpp(const loop::LoopProgram& program, const sched::Schedule& schedule,
                   const CompileOptions& options) {
  COIL_CHECK(program.ctx != nullptr) << "LoopProgram without a sym::Context";
  std::ostringstream os;
  os << "// Generated by coil (backend/cpu/emit_cpp): " << schedule.kernels.size()
     << " kernel(s).\n";
  os << "#include \"coil/kernel_prelude.h\"\n\n";
  CppSource src;
  for (const sched::KernelPlan& k : schedule.kernels) {
    detail::KernelEmitter(program, k, options, os).emit();
    src.kernel_symbols.push_back(k.name);
  }
  src.code = os.str();
  return src;
}

}  // namespace coil::backend::cpu
