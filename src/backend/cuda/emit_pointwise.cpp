// Pointwise kernels: a grid-stride loop per element, and a vector entry point where every
// access is contiguous and aligned (kernel_emitter.h; docs/cuda-backend.md).
#include "kernel_emitter.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "coil/backend/common/scalar_expr.h"

#include "coil/support/error.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda::detail {

// Loop order: the dims in order, except that the dim along which the first stored buffer is
// contiguous goes innermost (adjacent threads then store adjacent elements).
std::vector<size_t> KernelEmitter::pointwise_order() {
  const size_t k = k_.outer_ranges.size();
  std::vector<size_t> order(k);
  for (size_t j = 0; j < k; ++j) order[j] = j;
  if (k < 2) return order;
  for (const ComputeNode* n : nodes_) {
    if (locals_.count(n->out)) continue;
    Expr flat = flat_index(n->out, n->store_index);
    for (size_t d = 0; d + 1 < k; ++d) {
      if (stride_along(flat, n->index_vars[d]) == std::optional<int64_t>(1)) {
        order.erase(order.begin() + d);
        order.push_back(d);
        break;
      }
    }
    break;
  }
  return order;
}

std::optional<int64_t> KernelEmitter::stride_along(Expr flat, Expr var) {
  Expr d = ctx_.sub(ctx_.substitute(flat, {{var, ctx_.add(var, ctx_.one())}}), flat);
  return ctx_.as_const(d);
}

// A dim merged from two (attention's [batch, seq] rows of a [batch * seq, hidden] matrix) reads
// a tensor laid out by the unmerged dims through div and mod: 393216*(x0 / 512) + x0 % 512
// steps by one except where x0 crosses a multiple of 512. Written as var = block*q + r with
// 0 <= r < block - 1, the simplifier turns (block*q + r) / 512 into q / (512 / block) where
// block divides 512, and the stride along r is then constant: it is the stride inside each
// run of `block` values, all a vector's lanes or a tile's edge see when their runs are aligned.
std::optional<int64_t> KernelEmitter::stride_within(Expr flat, Expr var, int64_t block) {
  if (auto s = stride_along(flat, var)) return s;
  if (block < 2) return std::nullopt;
  Expr q = ctx_.symbol("run_q_", sym::Range{0, int64_t{1} << 40});
  Expr r = ctx_.symbol("run_r" + std::to_string(block) + "_", sym::Range{0, block - 2});
  Expr start = ctx_.mul(ctx_.constant(block), q);
  return stride_along(ctx_.substitute(flat, {{var, ctx_.add(start, r)}}), r);
}

namespace {
constexpr int kMaxVectorLanes = 8;  // elements per thread of a vector entry point, at most
}  // namespace

// Elements per thread of the vector entry point, or 0. Every access must step by 0 or 1
// along the innermost dim, at least within the aligned runs of the vector's width (a merged
// dim: stride_within), the stride-1 ones starting at a multiple of the vector width (other
// strides and offsets constant multiples of it), and the innermost extent a multiple.
int KernelEmitter::vector_width(size_t inner) {
  int max_size = 0;
  // Stride-1 accesses: the buffer, the flat index and the node's inner variable.
  struct Access {
    BufferId b;
    Expr flat, var;
  };
  std::vector<Access> accesses;
  // The widest vector a merged dim's runs allow (stride_within): its lanes stay in one run.
  int run_cap = kMaxVectorLanes;
  // The stride of an access along `var` within runs of `run_cap` elements, narrowing the cap
  // to the widest run where the stride is 0 or 1.
  auto run_stride = [&](Expr flat, Expr var) -> std::optional<int64_t> {
    for (int b = run_cap; b >= 2; b /= 2) {
      auto s = stride_within(flat, var, b);
      if (s && (*s == 0 || *s == 1)) {
        run_cap = b;
        return s;
      }
    }
    return std::nullopt;
  };
  // The vector entry point loads every member's inputs before any member stores: a member
  // reading what another member of the kernel stores (a clone of a realized output, GPT-2's
  // causal mask saved twice) would read the buffer before it is written. Where it reads back
  // an earlier member's element, it takes that member's value instead (forwarded_store);
  // any other such read keeps the kernel scalar.
  std::set<BufferId> stored;
  for (const ComputeNode* n : nodes_)
    if (!locals_.count(n->out)) stored.insert(root(n->out));
  for (size_t m = 0; m < nodes_.size(); ++m)
    for (const Instr& in : nodes_[m]->body.instrs)
      if (in.kind == InstrKind::Load && !locals_.count(in.buffer) &&
          stored.count(root(in.buffer)) && forwarded_store(m, in) < 0)
        return 0;
  // Members loading the same element of the same buffer share one vector load (the emitter
  // below keys them alike), so such a load counts once toward the bytes a thread holds.
  std::set<std::string> loaded;
  int bytes = 0;  // of one element of every distinct vector load and store
  for (const ComputeNode* n : nodes_) {
    Expr var = n->index_vars.at(inner);
    set_node_names(*n);
    for (const Instr& in : n->body.instrs) {
      if (in.kind == InstrKind::Indirect || in.kind == InstrKind::Randn) return 0;
      // Uniform draws: four elements a thread, one Philox block (emit_rand_blocks), in
      // kernels whose members each run their own loop over the elements (no locals).
      if (in.kind == InstrKind::Rand) {
        if (!locals_.empty()) return 0;
        run_cap = std::min(run_cap, 4);
      }
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      // A masked load inside its buffer is read unmasked, the mask applied per element; one
      // that may lie outside reads its vector under the mask, the same for the whole vector.
      const bool masked = in.mask >= 0 && !always_in_bounds(in);
      if (masked) {
        run_cap =
            std::min(run_cap, mask_chunk_width(n->body, in.mask, var, k_.outer_ranges[inner]));
        if (run_cap < 2) return 0;
      }
      Expr flat = flat_index(in.buffer, in.index);
      auto s = run_stride(flat, var);
      if (!s || (*s != 0 && *s != 1)) return 0;
      if (*s != 1) continue;
      accesses.push_back({in.buffer, flat, var});
      if (masked || loaded.insert(shared_load_key(in.buffer, flat)).second)
        bytes += dtype_size(buf(in.buffer).dtype);
    }
    if (!locals_.count(n->out)) {
      Expr flat = flat_index(n->out, n->store_index);
      if (run_stride(flat, var) != std::optional<int64_t>(1)) return 0;
      accesses.push_back({n->out, flat, var});
      bytes += dtype_size(buf(n->out).dtype);
    }
  }
  if (accesses.empty()) return 0;
  for (const Access& a : accesses) max_size = std::max(max_size, dtype_size(buf(a.b).dtype));
  // Every vector load is held in registers before the first element is computed, and every
  // store until the last: a depthwise convolution's taps and weights (22 bf16 loads for 3x3,
  // over 100 for 7x7) at 8 elements each spilled to local memory under the 1024-thread launch
  // bound and ran 3-10x slower than the scalar loop on the H200. So the width also keeps the
  // vectors within kMaxVectorBytes per thread.
  constexpr int kMaxVectorBytes = 128;
  int vec = std::min({kMaxVectorLanes, 16 / max_size, run_cap});
  while (vec >= 2 && vec * bytes > kMaxVectorBytes) vec /= 2;
  if (vec < 2) return 0;
  auto extent = ctx_.as_const(k_.outer_ranges[inner]);
  if (!extent || *extent % vec != 0) return 0;
  // Each thread's first element is vec*q along the inner dim.
  Expr q = ctx_.symbol("run_q_", sym::Range{0, int64_t{1} << 40});
  std::vector<Expr> starts;
  for (const Access& a : accesses)
    starts.push_back(ctx_.substitute(a.flat, {{a.var, ctx_.mul(ctx_.constant(vec), q)}}));
  return starts_aligned(starts, vec, q) ? vec : 0;
}

// Before member m's elements in the vector entry point (names bound at the thread's first
// element): for each uniform draw, the offset of that element and the Philox block of its
// quad, from which the elements of the same quad take their words (coil::rand_uniform_in;
// reserve_rng_offsets starts every op's offsets at a multiple of 4, so a thread's four
// consecutive elements share one block).
void KernelEmitter::emit_rand_blocks(size_t m) {
  const ComputeNode& n = *nodes_[m];
  for (size_t i = 0; i < n.body.instrs.size(); ++i) {
    const Instr& in = n.body.instrs[i];
    if (in.kind != InstrKind::Rand) continue;
    const Instr& seed = n.body.instrs.at(in.operands[0]);
    COIL_CHECK(seed.kind == InstrKind::Load && seed.buffer == p_.rng_state)
        << "a draw's seed is not the rng state";
    const std::string tag = std::to_string(m) + "_" + std::to_string(i) + "_";
    const std::string base = "rb" + tag, block = "rq" + tag;
    line("const uint64_t " + base + " = uint64_t(rng_offset + " + idx(in.expr) + ");");
    line("const coil::U32x4 " + block +
         " = coil::philox_quad(uint64_t(coil::run_seed(rng_seed, rng_device)), " + base +
         " >> 2);");
    rand_blocks_[{m, static_cast<InstrId>(i)}] = {base, block};
  }
}

bool KernelEmitter::always_in_bounds(const Instr& load) {
  const loop::Buffer& B = buf(load.buffer);
  if (load.index.size() != B.sizes.size()) return false;
  for (size_t d = 0; d < load.index.size(); ++d) {
    const sym::Range r = ctx_.bounds(load.index[d]);
    if (r.lo < 0 || r.hi >= ctx_.bounds(B.sizes[d]).lo) return false;
  }
  return true;
}

// The widest vector (a power of two up to kMaxVectorLanes; 0: none) within whose aligned chunks
// along the inner variable `var` the mask has one value, so that the vector entry point loads
// the chunk under the mask at its first element (emit_pointwise). The mask must be computed from
// index expressions, through no load. Those that do not depend on `var` qualify at any width: a
// native convolution's padding test tests spatial positions, and NHWC's inner dim is the
// channel, so a thread's channels are all read or all padding. Those on `var` alone qualify at
// the widths where they change value only at multiples of the width: a concatenation along the
// inner dim tests `768 <= x1 < 1536` for its second piece (GPT-2's query/key/value gradients
// joined into [tokens, 2304]), constant over chunks of 8 there. They are evaluated over the
// dim's constant extent (up to kMaxCheckedExtent values); one that also reads another variable
// does not qualify.
int KernelEmitter::mask_chunk_width(const loop::Body& b, InstrId mask, Expr var, Expr extent) {
  constexpr int64_t kMaxCheckedExtent = 1 << 15;
  const std::optional<int64_t> n = ctx_.as_const(extent);
  int width = kMaxVectorLanes;
  std::vector<int64_t> values;
  for (InstrId id : mask_chain(b, mask)) {
    const Instr& in = b.instrs[id];
    switch (in.kind) {
      case InstrKind::Load:
      case InstrKind::Indirect:
      case InstrKind::Rand:
      case InstrKind::Randn:
        return 0;
      case InstrKind::IndexExpr: {
        if (!ctx_.depends_on(in.expr, var)) break;
        if (!n || *n < 2 || *n > kMaxCheckedExtent) return 0;
        values.resize(static_cast<size_t>(*n));
        for (int64_t v = 0; v < *n; ++v) {
          const std::optional<int64_t> c =
              ctx_.as_const(ctx_.substitute(in.expr, {{var, ctx_.constant(v)}}));
          if (!c) return 0;
          values[static_cast<size_t>(v)] = *c;
        }
        auto chunks_constant = [&](int w) {
          for (int64_t v = 0; v < *n; ++v)
            if (values[static_cast<size_t>(v)] != values[static_cast<size_t>(v - v % w)])
              return false;
          return true;
        };
        while (width >= 2 && !chunks_constant(width)) width /= 2;
        if (width < 2) return 0;
        break;
      }
      default:
        break;
    }
  }
  return width;
}

// The instructions `mask` is computed from, itself included, in body order (ids ascend, and
// operands come before their readers).
std::set<InstrId> KernelEmitter::mask_chain(const loop::Body& b, InstrId mask) {
  std::set<InstrId> chain;
  std::vector<InstrId> todo{mask};
  while (!todo.empty()) {
    const InstrId id = todo.back();
    todo.pop_back();
    if (!chain.insert(id).second) continue;
    const Instr& in = b.instrs[id];
    if (in.mask >= 0) todo.push_back(in.mask);
    for (InstrId o : in.operands)
      if (o >= 0) todo.push_back(o);
  }
  return chain;
}

// The mask's chain, each instruction as its `const` value (for the scope the caller opened);
// mask_chunk_width's chain, so none loads.
void KernelEmitter::emit_mask(const loop::Body& b, InstrId mask) {
  for (InstrId id : mask_chain(b, mask))
    line("const " + compute_ctype(b.instrs[id].dtype) + " " + tmp(id) + " = " + instr_expr(b, id) +
         ";");
}

// The member j < m that stores the element member m's `load` reads (the same buffer, the same
// flat index with each member's variables named alike), or -1.
int KernelEmitter::forwarded_store(size_t m, const Instr& load) {
  auto canonical = [&](size_t member, Expr e) {
    std::unordered_map<Expr, Expr> to_first;
    const ComputeNode& n = *nodes_[member];
    for (size_t d = 0; d < n.index_vars.size() && d < nodes_[0]->index_vars.size(); ++d)
      to_first[n.index_vars[d]] = nodes_[0]->index_vars[d];
    return ctx_.str(ctx_.substitute(e, to_first));
  };
  const std::string read = canonical(m, flat_index(load.buffer, load.index));
  for (size_t j = 0; j < m; ++j) {
    const ComputeNode& w = *nodes_[j];
    if (locals_.count(w.out) || w.out != load.buffer || load.mask >= 0) continue;
    if (canonical(j, flat_index(w.out, w.store_index)) == read) return static_cast<int>(j);
  }
  return -1;
}

namespace {
// Whether every value of `e` is a multiple of m, structurally: a constant that is, a sum of such
// terms, or a product with such a factor. Proves the starts of merged-dim accesses
// (1179648*(x0 / 12) + 64*(x0 % 12), attention's head split) aligned, whose stride along x0
// is not one constant.
bool provably_multiple(Expr e, int64_t m) {
  switch (e->kind) {
    case sym::ExprKind::Const:
      return e->value % m == 0;
    case sym::ExprKind::Add:
      return std::all_of(e->operands.begin(), e->operands.end(),
                         [m](Expr o) { return provably_multiple(o, m); });
    case sym::ExprKind::Mul:
      return std::any_of(e->operands.begin(), e->operands.end(),
                         [m](Expr o) { return provably_multiple(o, m); });
    default:
      return false;
  }
}
}  // namespace

// Whether every start is a multiple of `vec` for every value of the variables of the kernel's
// members: the start is structurally a multiple, or its constant term and each variable's
// coefficient are.
bool KernelEmitter::starts_aligned(const std::vector<Expr>& starts, int vec, Expr extra_var) {
  std::vector<Expr> vars;
  if (extra_var) vars.push_back(extra_var);
  for (const ComputeNode* n : nodes_) {
    vars.insert(vars.end(), n->index_vars.begin(), n->index_vars.end());
    vars.insert(vars.end(), n->reduction_vars.begin(), n->reduction_vars.end());
  }
  std::unordered_map<Expr, Expr> zero;
  for (Expr v : vars) zero[v] = ctx_.zero();
  for (Expr start : starts) {
    if (provably_multiple(start, vec)) continue;
    auto c0 = ctx_.as_const(ctx_.substitute(start, zero));
    if (!c0 || *c0 % vec != 0) return false;
    for (Expr v : vars) {
      if (!ctx_.depends_on(start, v)) continue;
      auto s = stride_along(start, v);
      if (!s || *s % vec != 0) return false;
    }
  }
  return true;
}

// Every member's body and store for one element (its loop variables already declared).
void KernelEmitter::emit_member_stores() {
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    set_node_names(n);
    member_ = m;
    open("{");
    emit_store(n, emit_body(n));
    close();
  }
}

void KernelEmitter::emit_pointwise() {
  const size_t k = k_.outer_ranges.size();
  const std::vector<size_t> order = pointwise_order();
  const std::string T = idx_t_;
  std::vector<std::string> vars;
  std::vector<Expr> ranges;
  for (size_t j : order) {
    vars.push_back("x" + std::to_string(j));
    ranges.push_back(k_.outer_ranges[j]);
  }
  const std::string numel = idx(product(k_.outer_ranges));
  // Scalar entry point.
  line("extern \"C\" __global__ void __launch_bounds__(1024) " + k_.name + "_s(" + param_list() +
       ") {");
  ++indent_;
  line("const int64_t n_ = " + numel + ";");
  open(
      "for (int64_t l_ = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l_ < n_; l_ += "
      "int64_t(gridDim.x) * blockDim.x) {");
  decompose("(" + T + ")l_", vars, ranges);
  for (size_t m = 0; m < nodes_.size(); ++m) declare_local(m);
  emit_member_stores();
  close();
  close();
  line("");
  emit_pointwise_tiled(order);
  if (k == 0) return;
  const size_t inner = order.back();
  const int vec = vector_width(inner);
  if (vec == 0) return;
  info_.vec = vec;
  // Vector entry point: thread t handles `vec` consecutive elements along the inner dim.
  const std::string V = std::to_string(vec);
  std::vector<Expr> vranges = ranges;
  vranges.back() = ctx_.constant(*ctx_.as_const(ranges.back()) / vec);
  std::string xi = vars.back();
  std::vector<std::string> vvars = vars;
  vvars.back() = xi + "_q";
  line("extern \"C\" __global__ void __launch_bounds__(1024) " + k_.name + "_v(" + param_list() +
       ") {");
  ++indent_;
  line("const int64_t n_ = " + numel + " / " + V + ";");
  open(
      "for (int64_t l_ = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l_ < n_; l_ += "
      "int64_t(gridDim.x) * blockDim.x) {");
  decompose("(" + T + ")l_", vvars, vranges);
  line("const " + T + " " + xi + "_0 = " + xi + "_q * " + V + ";");
  // Vector loads of the stride-1 accesses, at inner position xi_0.
  vec_loads_.clear();
  std::map<std::string, std::string> shared;  // shared_load_key -> the vector holding it
  int nv = 0;
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    set_node_names(n);
    sym_names_[n.index_vars[inner]] = xi + "_0";
    for (size_t i = 0; i < n.body.instrs.size(); ++i) {
      const Instr& in = n.body.instrs[i];
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      if (const int j = forwarded_store(m, in); j >= 0) {
        vec_loads_[{m, static_cast<InstrId>(i)}] = "S" + std::to_string(j);  // not stored yet
        continue;
      }
      Expr flat = flat_index(in.buffer, in.index);
      if (stride_within(flat, n.index_vars[inner], vec) != std::optional<int64_t>(1)) continue;
      const std::string key = shared_load_key(in.buffer, flat);
      // A masked load inside its buffer (a BatchNorm's per-channel parameter inlined into
      // each tap of a max-pool window) is one unmasked vector for all its masks: its uses
      // select 0 where the mask is off (load_expr), and the registers held per thread stay
      // few enough for a wider vector (vector_width).
      const bool masked = in.mask >= 0 && !always_in_bounds(in);
      if (!masked && shared.count(key)) {  // another member loaded this element already
        vec_loads_[{m, static_cast<InstrId>(i)}] = shared.at(key);
        continue;
      }
      std::string name = "L" + std::to_string(nv++);
      if (!masked) shared[key] = name;
      const std::string E = ctype(buf(in.buffer).dtype);
      const std::string vec_t = "coil::Vec<" + E + ", " + V + ">";
      const std::string load =
          "*(const " + vec_t + "*)(" + buf(in.buffer).name + " + " + idx(flat) + ")";
      if (masked) {
        // Under its mask (the same for the whole vector: vector_width); a masked-off vector
        // is not read (it may lie outside the buffer) and its lanes are not used.
        line(vec_t + " " + name + "{};");
        open("{");
        emit_mask(n.body, in.mask);
        line("if (" + tmp(in.mask) + ") " + name + " = " + load + ";");
        close();
      } else {
        line("const " + vec_t + " " + name + " = " + load + ";");
      }
      vec_loads_[{m, static_cast<InstrId>(i)}] = name;
    }
  }
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    if (locals_.count(n.out)) continue;
    const std::string E = ctype(buf(n.out).dtype);
    line("coil::Vec<" + E + ", " + V + "> S" + std::to_string(m) + ";");
  }
  // Each member's elements, all members an element at a time; in kernels that draw random
  // numbers, member by member (the thread's Philox blocks then live one member's loop
  // long, where a kernel writing twelve layers' dropout masks would hold twelve at once).
  auto element = [&](size_t m) {
    const ComputeNode& n = *nodes_[m];
    set_node_names(n);
    member_ = m;
    open("{");
    std::string v = emit_body(n);
    if (locals_.count(n.out)) {
      emit_store(n, v);
    } else {
      line("S" + std::to_string(m) + ".v[u_] = " + stored_value(buf(n.out).dtype, v) + ";");
    }
    close();
  };
  auto open_elements = [&] {
    line("#pragma unroll");
    open("for (int u_ = 0; u_ < " + V + "; ++u_) {");
    line("const " + T + " " + xi + " = " + xi + "_0 + u_;");
  };
  bool draws = false;
  for (const ComputeNode* n : nodes_)
    for (const Instr& in : n->body.instrs) draws = draws || in.kind == InstrKind::Rand;
  rand_blocks_.clear();
  if (draws) {
    for (size_t m = 0; m < nodes_.size(); ++m) {
      set_node_names(*nodes_[m]);
      sym_names_[nodes_[m]->index_vars[inner]] = xi + "_0";
      emit_rand_blocks(m);
      open_elements();
      vec_mode_ = true;
      element(m);
      vec_mode_ = false;
      close();
    }
  } else {
    open_elements();
    for (size_t m = 0; m < nodes_.size(); ++m) declare_local(m);
    vec_mode_ = true;
    for (size_t m = 0; m < nodes_.size(); ++m) element(m);
    vec_mode_ = false;
    close();
  }
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    if (locals_.count(n.out)) continue;
    set_node_names(n);
    sym_names_[n.index_vars[inner]] = xi + "_0";
    const std::string E = ctype(buf(n.out).dtype);
    line("*(coil::Vec<" + E + ", " + V + ">*)(" + buf(n.out).name + " + " +
         idx(flat_index(n.out, n.store_index)) + ") = S" + std::to_string(m) + ";");
  }
  close();
  close();
  line("");
}

}  // namespace coil::backend::cuda::detail
