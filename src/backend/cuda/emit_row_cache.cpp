// The row kernels' shared-memory row cache (the block-per-row vector entry point _bv): which
// re-read inputs a block keeps in shared memory (plan_row_cache), and which per-element values
// a member writes over a slot for a later member to read instead of recomputing them
// (plan_value_cache: softmax's exp(x - max)). kernel_emitter.h; docs/cuda-backend.md.
#include <algorithm>

#include "coil/backend/common/scalar_expr.h"
#include "kernel_emitter.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda::detail {

// Names member m's inner variables c0_, c1_, ..., the same in every member: the keys below
// compare two members' accesses and values element by element.
void KernelEmitter::bind_canonical_names(size_t m) {
  std::vector<std::string> canon;
  for (size_t j = 0; j < row_loop_ranges(*nodes_[m]).size(); ++j)
    canon.push_back("c" + std::to_string(j) + "_");
  bind_member_names(m, canon);
}

// The key of an element member m accesses in its row loop: buffer and element index with the
// inner variables named canonically, and the inner ranges (equal keys: the same element,
// visited by the same thread at the same step). A load's (row_load_key) equal to a pointwise
// member's store (row_store_key) reads what that member stored.
//
// Each member has variables of its own, and a sum's terms are ordered by variable: the same
// element read by two members printed as `512*x2 + c0_ + ...` in one and `... + 512*x2 + c0_`
// in the other (a softmax backward's inputs were not cached for that). So the index is first
// rewritten over shared symbols, one per position and range.
std::string KernelEmitter::row_element_key(size_t m, BufferId b, const std::vector<Expr>& index) {
  bind_canonical_names(m);
  const ComputeNode& n = *nodes_[m];
  std::unordered_map<Expr, Expr> shared;
  auto share = [&](Expr v, const std::string& position) {
    const sym::Range r = ctx_.bounds(v);
    shared[v] = ctx_.symbol(
        "row_key_" + position + "_" + std::to_string(r.lo) + "_" + std::to_string(r.hi), r);
  };
  for (size_t j = 0; j < k_.outer_ranges.size() && j < n.index_vars.size(); ++j)
    share(n.index_vars[j], "x" + std::to_string(j));
  const std::vector<Expr> inner = row_inner_vars(n);
  for (size_t j = 0; j < inner.size(); ++j) share(inner[j], "c" + std::to_string(j));
  return buf(b).name + "[" + idx(ctx_.substitute(flat_index(b, index), shared)) + "] over " +
         ranges_text(row_loop_ranges(n));
}

std::string KernelEmitter::row_load_key(size_t m, const Instr& in) {
  return row_element_key(m, in.buffer, in.index);
}

std::string KernelEmitter::row_store_key(size_t m) {
  return row_element_key(m, nodes_[m]->out, nodes_[m]->store_index);
}

std::vector<Expr> KernelEmitter::row_loop_ranges(const ComputeNode& n) {
  if (n.is_reduction()) return n.reduction_ranges;
  return std::vector<Expr>(n.ranges.begin() + k_.outer_ranges.size(), n.ranges.end());
}

// A cached step's value in the entry points that cache (CC: shared memory in _bv, registers,
// indexed by the loop's step it_, in _wv and _br), and the statement that caches one.
std::string KernelEmitter::slot_read(const RowCacheSlot& slot) const {
  if (row_regs_ == 0) return slot.name + "[e_]";
  return "(RC ? " + slot.name + "[e_] : " + slot.reg + "[it_])";
}

std::string KernelEmitter::slot_write(const RowCacheSlot& slot, const std::string& value) const {
  const std::string shared = "if constexpr (RC) " + slot.name + "[e_] = " + value + ";";
  if (row_regs_ == 0) return shared;
  return shared + " else if constexpr (RR) " + slot.reg + "[it_] = " + value + ";";
}

// Which stride-1 row loads the _bv entry point caches in shared memory: those that more
// than one member reads, from buffers no member of the kernel writes, with a constant row,
// at most kRowCacheBytes in all.
void KernelEmitter::plan_row_cache() {
  row_cache_.clear();
  if (!row_vec_) return;
  std::map<std::string, std::set<size_t>> members_of;
  std::map<std::string, std::pair<BufferId, int64_t>> what;
  std::vector<std::string> order;
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    auto [var, range] = row_inner_var(n);
    if (!var) continue;
    const std::vector<Expr> ranges = row_loop_ranges(n);
    auto elems = ctx_.as_const(product(ranges));
    if (!elems) continue;
    for (const Instr& in : n.body.instrs) {
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      if (stride_along(flat_index(in.buffer, in.index), var) != std::optional<int64_t>(1)) continue;
      bool written = false;
      for (BufferId w : written_) written = written || root(w) == root(in.buffer);
      if (written) continue;
      std::string key = row_load_key(m, in);
      if (!members_of.count(key)) order.push_back(key);
      members_of[key].insert(m);
      what[key] = {in.buffer, *elems};
    }
  }
  int64_t bytes = 0;
  for (const std::string& key : order) {
    if (members_of[key].size() < 2) continue;
    auto [b, elems] = what[key];
    const int64_t size = elems * dtype_size(buf(b).dtype);
    if (bytes + size > kRowCacheBytes) continue;
    bytes += size;
    RowCacheSlot slot;
    slot.name = "rc" + std::to_string(row_cache_.size()) + "_";
    slot.reg = "rr" + std::to_string(row_cache_.size()) + "_";
    slot.ctype = ctype(buf(b).dtype);
    slot.elements = elems;
    slot.elem_size = dtype_size(buf(b).dtype);
    row_cache_[key] = slot;
  }
}

namespace {

// Whether an instruction is worth a shared-memory store and load to compute it once: calls
// and divisions (a dozen instructions or more each), not single ALU operations.
bool costly(InstrKind k) {
  switch (k) {
    case InstrKind::Load:
    case InstrKind::Constant:
    case InstrKind::IndexExpr:
    case InstrKind::Cast:
    case InstrKind::Neg:
    case InstrKind::Abs:
    case InstrKind::Add:
    case InstrKind::Sub:
    case InstrKind::Mul:
    case InstrKind::Maximum:
    case InstrKind::Minimum:
    case InstrKind::Where:
    case InstrKind::Eq:
    case InstrKind::Ne:
    case InstrKind::Lt:
    case InstrKind::Le:
    case InstrKind::Gt:
    case InstrKind::Ge:
    case InstrKind::LogicalNot:
    case InstrKind::LogicalAnd:
    case InstrKind::LogicalOr:
    case InstrKind::LogicalXor:
    case InstrKind::Sign:
    case InstrKind::IsNan:
    case InstrKind::IsInf:
    case InstrKind::Floor:
    case InstrKind::Ceil:
    case InstrKind::Trunc:
    case InstrKind::Round:
      return false;
    default:
      return true;
  }
}

// The instructions `root` is computed from (itself included), stopping at `cut` (reached, its
// operands not followed) when cut >= 0.
std::vector<bool> reached_from(const loop::Body& b, InstrId root, InstrId cut = -1) {
  std::vector<bool> seen(b.instrs.size(), false);
  std::vector<InstrId> todo{root};
  while (!todo.empty()) {
    InstrId i = todo.back();
    todo.pop_back();
    if (i < 0 || seen[i]) continue;
    seen[i] = true;
    if (i == cut) continue;
    const Instr& in = b.instrs[i];
    for (InstrId o : in.operands) todo.push_back(o);
    todo.push_back(in.mask);
  }
  return seen;
}

}  // namespace

// A structural key per instruction of member m: equal keys in two members over the same row
// ranges are the same value of the same element (inner variables named canonically, operands
// by their own keys, interned in `intern` so keys stay short).
std::vector<std::string> KernelEmitter::value_keys(size_t m, std::map<std::string, int>& intern) {
  const ComputeNode& n = *nodes_[m];
  bind_canonical_names(m);
  std::vector<std::string> keys(n.body.instrs.size());
  value_names_ = &keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Instr& in = n.body.instrs[i];
    std::string text;
    if (in.kind == InstrKind::Rand || in.kind == InstrKind::Randn ||
        in.kind == InstrKind::Indirect) {
      text = "#" + std::to_string(m) + "." + std::to_string(i);  // never equal to another
    } else {
      text = std::string(dtype_name(in.dtype)) + " " + instr_expr(n.body, static_cast<InstrId>(i));
    }
    auto it = intern.emplace(text, static_cast<int>(intern.size())).first;
    keys[i] = "k" + std::to_string(it->second) + "_";
  }
  value_names_ = nullptr;
  return keys;
}

// Softmax's last member recomputes exp(x - max) that the sum before it computed: where the
// last member B to read a row cache slot is a pointwise row loop, the member A reading the
// slot before it is a plain reduction over the same ranges, and B uses the slot's element only
// through a value A computes too (equal value_keys) that costs more than a few ALU operations,
// A writes that value over the slot (the slot's own element is dead after A) and B reads it
// back in place of the computation. The entry points with a row cache (_bv; _wv where rows
// are short) do; the others recompute as before.
void KernelEmitter::plan_value_cache() {
  value_cache_.clear();
  std::map<std::string, int> intern;
  std::map<size_t, std::vector<std::string>> keys;
  auto keys_of = [&](size_t m) -> const std::vector<std::string>& {
    auto it = keys.find(m);
    if (it == keys.end()) it = keys.emplace(m, value_keys(m, intern)).first;
    return it->second;
  };
  for (auto& [key, slot] : row_cache_) {
    std::vector<std::pair<size_t, InstrId>> readers;  // (member, its load of the slot)
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      Expr var = row_inner_var(n).first;
      if (!var) continue;
      for (size_t i = 0; i < n.body.instrs.size(); ++i) {
        const Instr& in = n.body.instrs[i];
        if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
        if (stride_along(flat_index(in.buffer, in.index), var) != std::optional<int64_t>(1))
          continue;
        if (row_load_key(m, in) == key) readers.push_back({m, static_cast<InstrId>(i)});
      }
    }
    if (readers.size() < 2) continue;
    const auto [b, b_load] = readers.back();
    const size_t a = readers[readers.size() - 2].first;
    const ComputeNode& A = *nodes_[a];
    const ComputeNode& B = *nodes_[b];
    if (a == b || B.is_reduction() || !A.is_reduction() || A.reduce == ReduceKind::ArgMax ||
        A.reduce == ReduceKind::ArgMin || online_max_load(a) >= 0 ||
        (a > 0 && online_max_load(a - 1) >= 0))
      continue;
    if (ranges_text(row_loop_ranges(A)) != ranges_text(row_loop_ranges(B))) continue;
    const std::vector<std::string>& ka = keys_of(a);
    const std::vector<std::string>& kb = keys_of(b);
    const loop::Body& bb = B.body;
    for (InstrId j = static_cast<InstrId>(bb.instrs.size()) - 1; j >= 0; --j) {
      if (compute_ctype(bb.instrs[j].dtype) != slot.ctype) continue;
      auto i = std::find(ka.begin(), ka.end(), kb[j]);
      if (i == ka.end()) continue;
      const std::vector<bool> inside = reached_from(bb, j);
      if (!inside[b_load]) continue;
      // Worth it where a costly instruction varies along the row (the row-invariant ones,
      // mean = sum / n, are computed once per row by the compiler anyway).
      std::vector<bool> varies(bb.instrs.size(), false);
      bool worth = false;
      for (size_t t = 0; t < bb.instrs.size(); ++t) {
        const Instr& in = bb.instrs[t];
        varies[t] = static_cast<InstrId>(t) == b_load || (in.mask >= 0 && varies[in.mask]);
        for (InstrId o : in.operands) varies[t] = varies[t] || (o >= 0 && varies[o]);
        worth = worth || (inside[t] && varies[t] && costly(in.kind));
      }
      if (!worth) continue;
      const std::vector<bool> outside = reached_from(bb, bb.result, j);
      if (!outside[j] || outside[b_load]) continue;
      ValueCache c;
      c.writer = a;
      c.value = static_cast<InstrId>(i - ka.begin());
      c.reader = b;
      c.reuse = j;
      c.reader_load = b_load;
      c.slot = &slot;
      c.vec = "W" + std::to_string(value_cache_.size()) + "_";
      value_cache_.push_back(c);
      break;
    }
  }
}

const KernelEmitter::ValueCache* KernelEmitter::value_written(InstrId id) const {
  for (const ValueCache& c : value_cache_)
    if (c.writer == member_ && c.value == id) return &c;
  return nullptr;
}

const KernelEmitter::ValueCache* KernelEmitter::value_reused(InstrId id) const {
  for (const ValueCache& c : value_cache_)
    if (c.reader == member_ && c.reuse == id) return &c;
  return nullptr;
}

}  // namespace coil::backend::cuda::detail
