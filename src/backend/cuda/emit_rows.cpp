// Row kernels: a thread group per outer point, members one after another over the row;
// vector steps, the shared-memory row cache, evict-first stores, the online max and sum
// (kernel_emitter.h; docs/cuda-backend.md).
#include "kernel_emitter.h"

#include <algorithm>

#include "coil/backend/common/cpp_expr.h"
#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda::detail {

// The last inner variable and its range of a member that loops inside the row (a reduction,
// or a pointwise member with inner dims); nullptr for a one-per-row member.
std::pair<Expr, Expr> KernelEmitter::row_inner_var(const ComputeNode& n) {
  const size_t k = k_.outer_ranges.size();
  if (n.is_reduction() && !n.reduction_vars.empty())
    return {n.reduction_vars.back(), n.reduction_ranges.back()};
  if (!n.is_reduction() && n.ranges.size() > k) return {n.index_vars.back(), n.ranges.back()};
  return {nullptr, nullptr};
}

// Elements per step of a row kernel's vector entry points (_wv, _bv), or 0. As for pointwise
// kernels: in every member that loops inside the row, each access steps by 0 or 1 along the
// member's last inner variable, the stride-1 ones start at a multiple of the width (for every
// value of the other variables), and the last inner extent is a multiple of it.
//
// Uniform draws (dropout masks) take it too, four elements a step (one Philox block per
// member and draw: emit_row_loop); normal draws and gathers keep the kernel scalar.
int KernelEmitter::row_vector_width() {
  int cap = 8;
  std::vector<Expr> starts;
  std::vector<Expr> extents;
  int max_size = 0;
  for (const ComputeNode* n : nodes_) {
    auto [var, range] = row_inner_var(*n);
    if (!var) continue;
    extents.push_back(range);
    for (const Instr& in : n->body.instrs) {
      if (in.kind == InstrKind::Indirect || in.kind == InstrKind::Randn) return 0;
      if (in.kind == InstrKind::Rand) cap = 4;
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      Expr flat = flat_index(in.buffer, in.index);
      auto s = stride_along(flat, var);
      if (!s || (*s != 0 && *s != 1)) return 0;
      if (*s == 0) continue;
      if (in.mask >= 0) return 0;
      starts.push_back(ctx_.substitute(flat, {{var, ctx_.zero()}}));
      max_size = std::max(max_size, dtype_size(buf(in.buffer).dtype));
    }
    if (!n->is_reduction() && !locals_.count(n->out)) {
      Expr flat = flat_index(n->out, n->store_index);
      if (stride_along(flat, var) != std::optional<int64_t>(1)) return 0;
      starts.push_back(ctx_.substitute(flat, {{var, ctx_.zero()}}));
      max_size = std::max(max_size, dtype_size(buf(n->out).dtype));
    }
  }
  if (starts.empty()) return 0;
  const int vec = std::min(cap, 16 / max_size);
  if (vec < 2) return 0;
  for (Expr e : extents) {
    auto c = ctx_.as_const(e);
    if (!c || *c % vec != 0) return 0;
  }
  return starts_aligned(starts, vec) ? vec : 0;
}

// Columns per warp of the column entry point _c, or 0 for none. Where the members' row loops
// read more bytes across rows (stride 1 along the last outer variable: the bias gradient's
// sum over the rows of a [tokens, features] tensor) than along them, a warp of the row-per-
// warp layout would touch a sector per element. The column layout gives the threads of a
// warp C adjacent rows instead (C elements of the widest such load make a 32-byte sector),
// and splits each row over the lanes t / C of the block.
int KernelEmitter::row_column_width() {
  const size_t k = k_.outer_ranges.size();
  if (k == 0 || row_vec_) return 0;
  int64_t across = 0, along = 0;
  int max_size = 1;
  for (const ComputeNode* n : nodes_) {
    auto [var, range] = row_inner_var(*n);
    if (!var || n->index_vars.size() < k) continue;
    for (const Instr& in : n->body.instrs) {
      if (in.kind != InstrKind::Load || locals_.count(in.buffer) || in.buffer == p_.rng_state)
        continue;
      Expr flat = flat_index(in.buffer, in.index);
      const int size = dtype_size(buf(in.buffer).dtype);
      const auto inner = stride_along(flat, var);
      if (inner == std::optional<int64_t>(0)) continue;  // once per row, not the loop's traffic
      // The same for every row (a LayerNorm's per-token statistics in its weight gradient,
      // summed over the tokens): one small array every row reads, cached, not streamed.
      const auto outer = stride_along(flat, n->index_vars[k - 1]);
      if (outer == std::optional<int64_t>(0)) continue;
      if (inner == std::optional<int64_t>(1)) {
        along += size;
      } else if (outer == std::optional<int64_t>(1)) {
        across += size;
        max_size = std::max(max_size, size);
      }
    }
  }
  if (across <= along) return 0;
  return std::max(4, 32 / max_size);
}

// The inner variables of a member that loops inside the row, in loop order.
std::vector<Expr> KernelEmitter::row_inner_vars(const ComputeNode& n) {
  if (n.is_reduction()) return n.reduction_vars;
  return std::vector<Expr>(n.index_vars.begin() + k_.outer_ranges.size(), n.index_vars.end());
}

// Names member m's variables: outer ones x<j>, inner ones `vars` (the loop's names, which
// may be another member's when two members share one loop).
void KernelEmitter::bind_member_names(size_t m, const std::vector<std::string>& vars) {
  const ComputeNode& n = *nodes_[m];
  set_node_names(n);
  std::vector<Expr> inner = row_inner_vars(n);
  for (size_t j = 0; j < inner.size() && j < vars.size(); ++j) sym_names_[inner[j]] = vars[j];
  member_ = m;
}

// The loop of members over their row (one member, or several over the same inner ranges),
// `e_` counting steps of V elements along the last inner variable (V = 1: the scalar entry
// points). Each per-element part emits one element's work (in its own loop over the V
// elements of the step), binding each member's names with bind_member_names(m, vars); in
// the vector entry points the stride-1 loads of a step are one coil::Vec load each, and a
// storing member's elements go to row_store_.
void KernelEmitter::emit_row_loop(const std::vector<size_t>& members,
                                  const std::vector<std::string>& vars,
                                  const std::vector<Expr>& ranges,
                                  const std::vector<RowPart>& parts) {
  const std::string T = idx_t_;
  if (!row_vec_) {
    open("for (" + T + " e_ = lane_; e_ < (" + T + ")(" + idx(product(ranges)) + "); e_ += g_) {");
    const auto [kept, extents] = fold_loop_vars(members, vars, ranges);
    decompose("e_", kept, extents);
    for (const RowPart& part : parts) part.emit();
    close();
    folded_.clear();
    return;
  }
  // The last extent is a constant multiple of the kernel's vector width (row_vector_width).
  std::vector<std::string> qranges;
  for (Expr r : ranges) qranges.push_back("(" + T + ")(" + idx(r) + ")");
  qranges.back() = "(" + T + ")((" + idx(ranges.back()) + ") / V)";
  std::vector<std::string> qvars = vars;
  const std::string last = vars.back();
  qvars.back() = last + "_q";
  // In a kernel with the register cache (row_regs_), a loop that reads cached steps is a lambda
  // over (e_, it_): the register arrays (RR: _wv, _br) need the lane's step count it_ as a
  // constant, so those instantiations run it fully unrolled; the others run the plain loop.
  bool cached = false;
  for (size_t m : members) {
    if (row_regs_ == 0) break;
    const ComputeNode& n = *nodes_[m];
    Expr var = row_inner_var(n).first;
    for (const Instr& in : n.body.instrs)
      if (in.kind == InstrKind::Load && !locals_.count(in.buffer) &&
          stride_along(flat_index(in.buffer, in.index), var) == std::optional<int64_t>(1))
        cached = cached || row_cache_.count(row_load_key(m, in));
  }
  const std::string steps = "(" + T + ")((" + idx(product(ranges)) + ") / V)";
  if (cached) {
    open("auto step_ = [&](const " + T + " e_, [[maybe_unused]] const int it_) {");
  } else {
    open("for (" + T + " e_ = lane_; e_ < " + steps + "; e_ += g_) {");
  }
  decompose_text("e_", qvars, qranges);
  line("const " + T + " " + last + "_0 = " + last + "_q * V;");
  std::vector<std::string> first_vars = vars;
  first_vars.back() = last + "_0";
  vec_loads_.clear();
  int nv = 0;
  size_t storing = nodes_.size();
  for (size_t m : members) {
    const ComputeNode& n = *nodes_[m];
    bind_member_names(m, first_vars);
    Expr var = row_inner_var(n).first;
    for (size_t i = 0; i < n.body.instrs.size(); ++i) {
      const Instr& in = n.body.instrs[i];
      if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
      if (load_overrides_.count({m, static_cast<InstrId>(i)})) continue;
      Expr flat = flat_index(in.buffer, in.index);
      if (stride_along(flat, var) != std::optional<int64_t>(1)) continue;
      std::string name = "L" + std::to_string(nv++);
      const std::string E = ctype(buf(in.buffer).dtype);
      const std::string global =
          "*(const coil::Vec<" + E + ", V>*)(" + buf(in.buffer).name + " + " + idx(flat) + ")";
      auto slot = row_cache_.end();
      if (!row_cache_.empty()) {
        slot = row_cache_.find(row_load_key(m, in));
        bind_member_names(m, first_vars);
      }
      if (slot == row_cache_.end()) {
        line("const coil::Vec<" + E + ", V> " + name + " = " + global + ";");
      } else if (!slot->second.filled) {
        line("const coil::Vec<" + E + ", V> " + name + " = " + global + ";");
        line(slot_write(slot->second, name));
        slot->second.filled = true;
      } else {
        line("const coil::Vec<" + E + ", V> " + name + " = CC ? " + slot_read(slot->second) +
             " : " + global + ";");
      }
      vec_loads_[{m, static_cast<InstrId>(i)}] = name;
    }
    if (!n.is_reduction() && !locals_.count(n.out)) storing = m;
  }
  // Each uniform draw's Philox block at the step's first element (emit_rand_blocks): the
  // step's elements take their words from it (coil::rand_uniform_in).
  rand_blocks_.clear();
  for (size_t m : members) {
    bind_member_names(m, first_vars);
    emit_rand_blocks(m);
  }
  const bool stores = storing < nodes_.size();
  const std::string SE = stores ? ctype(buf(nodes_[storing]->out).dtype) : "";
  if (stores) line("coil::Vec<" + SE + ", V> S_;");
  std::vector<const ValueCache*> written;
  for (const ValueCache& c : value_cache_) {
    if (std::find(members.begin(), members.end(), c.writer) == members.end()) continue;
    written.push_back(&c);
    line("// " + buf(nodes_[c.reader]->out).name + " reads v" + std::to_string(c.reuse) +
         " from the row cache (" + c.slot->name + "): " + buf(nodes_[c.writer]->out).name + "'s v" +
         std::to_string(c.value) + ", computed once");
    line("[[maybe_unused]] coil::Vec<" + c.slot->ctype + ", V> " + c.vec + ";");
  }
  for (const RowPart& part : parts) {
    if (!part.per_element) {
      part.emit();
      continue;
    }
    line("#pragma unroll");
    open("for (int u_ = 0; u_ < V; ++u_) {");
    line("const " + T + " " + last + " = " + last + "_0 + u_;");
    vec_mode_ = true;
    row_store_ = stores ? "S_.v[u_]" : "";
    part.emit();
    row_store_.clear();
    vec_mode_ = false;
    close();
  }
  rand_blocks_.clear();  // their names are this step's
  for (const ValueCache* c : written) line(slot_write(*c->slot, c->vec));
  if (stores) {
    const ComputeNode& n = *nodes_[storing];
    bind_member_names(storing, first_vars);
    // Streaming (evict-first) stores where the row is long enough that the output would
    // push the rows later passes re-read out of L2: measured on the H100, softmax over 8192
    // floats (32 KiB rows) 0.220 -> 0.206 ms with them, LayerNorm over 4096 (16 KiB)
    // 0.187 -> 0.198 ms, so only rows of 32 KiB and more get them (docs/cuda-backend.md).
    const std::string dst = "(coil::Vec<" + SE + ", V>*)(" + buf(n.out).name + " + " +
                            idx(flat_index(n.out, n.store_index)) + ")";
    auto elems = ctx_.as_const(product(ranges));
    if (elems && *elems * dtype_size(buf(n.out).dtype) >= kStreamingRowBytes) {
      line("coil::store_streaming(" + dst + ", S_);");
    } else {
      line("*" + dst + " = S_;");
    }
  }
  if (!cached) {
    close();
    return;
  }
  close("};");
  open("if constexpr (RR) {");
  line("#pragma unroll");
  open("for (int it_ = 0; it_ < (" + steps + " + G - 1) / G; ++it_) {");
  line("if (lane_ + it_ * G < " + steps + ") step_(lane_ + it_ * G, it_);");
  close();
  close("} else {");
  ++indent_;
  line("for (" + T + " e_ = lane_; e_ < " + steps + "; e_ += g_) step_(e_, 0);");
  close();
}

void KernelEmitter::emit_rows() {
  const size_t k = k_.outer_ranges.size();
  const std::string T = idx_t_;
  const int vec = row_vector_width();
  row_vec_ = vec > 0;
  info_.vec = vec;
  info_.column = row_column_width();
  line(row_vec_ ? "template <int G, int V>" : "template <int G>");
  line("__device__ __forceinline__ void " + k_.name + "_impl(" + param_list() + ") {");
  ++indent_;
  plan_row_cache();
  plan_value_cache();
  if (!row_cache_.empty()) {
    // The block-per-row vector entry point keeps the inputs that several members read in
    // shared memory: each thread reads back only the steps it loaded itself, so no barrier.
    // Where they take few registers a lane (kRowRegisterBytes), the warp-per-row one keeps
    // them in registers; where a warp cannot, _br does, a block per row of a fixed size
    // (kRegisterBlocks): no shared memory to limit the blocks per SM.
    auto lane_bytes = [&](int64_t g) {
      int64_t bytes = 0;
      for (const auto& [key, slot] : row_cache_)
        bytes += (slot.elements / vec + g - 1) / g * vec * slot.elem_size;
      return bytes;
    };
    row_regs_ = lane_bytes(32) <= kRowRegisterBytes ? 32 : 0;
    for (int t : kRegisterBlocks)
      if (row_regs_ == 0 && lane_bytes(t) <= kRowRegisterBytes) row_regs_ = info_.block_regs = t;
    // Kernels without them keep the plain loops (the step lambda measured slower in _bv).
    line("constexpr bool RC = G == 0 && V > 1;");
    if (row_regs_ != 0)
      line("constexpr bool RR = G == " + std::to_string(row_regs_) + " && V > 1;");
    line(row_regs_ == 0 ? "constexpr bool CC = RC;" : "constexpr bool CC = RC || RR;");
    for (const auto& [key, slot] : row_cache_) {
      line("__shared__ coil::Vec<" + slot.ctype + ", V> " + slot.name + "[RC ? " +
           std::to_string(slot.elements) + " / V : 1];");
      if (row_regs_ != 0)
        line("[[maybe_unused]] coil::Vec<" + slot.ctype + ", V> " + slot.reg + "[RR ? (" +
             std::to_string(slot.elements) + " / V + G - 1) / (RR ? G : 1) : 1];");
    }
  }
  // G: 32 a warp per row, 0 the block per row, -C the column layout (row_column_width).
  line("const int g_ = coil::group_size<G>();");
  line("const int lane_ = coil::group_lane<G>();");
  line("const int64_t rpb_ = coil::rows_per_block<G>();");
  line("const int64_t rows_ = " + idx(product(k_.outer_ranges)) + ";");
  // The loop is uniform across the block (the column layout's group reductions sync the
  // block): a column past the end redoes the last one, writing the same values.
  open(
      "for (int64_t r0_ = int64_t(blockIdx.x) * rpb_; r0_ < rows_; r0_ += int64_t(gridDim.x) * "
      "rpb_) {");
  line("const int64_t row_ = coil::group_row<G>(r0_, rows_);");
  line("if (G > 0 && row_ >= rows_) break;");
  std::vector<std::string> vars;
  for (size_t j = 0; j < k; ++j) vars.push_back("x" + std::to_string(j));
  decompose("(" + T + ")row_", vars, k_.outer_ranges);
  for (size_t m = 0; m < nodes_.size(); ++m) {
    declare_local(m);
    // One value per row that is also stored: every thread of the group keeps it in a
    // register, and later members read that instead of the memory lane 0 wrote.
    const ComputeNode& n = *nodes_[m];
    if (!locals_.count(n.out) && (n.is_reduction() || n.ranges.size() == k))
      line(compute_ctype(buf(n.out).dtype) + " " + local_name(n.out) + ";");
  }
  std::set<BufferId> written_so_far;
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    const InstrId online = online_max_load(m);
    // A member reading what an earlier member stored (other threads of the group wrote it).
    bool needs_sync = false;
    for (size_t mm = m; mm <= m + (online >= 0 ? 1 : 0); ++mm) {
      const auto& instrs = nodes_[mm]->body.instrs;
      for (size_t i = 0; i < instrs.size(); ++i)
        if (instrs[i].kind == InstrKind::Load && written_so_far.count(root(instrs[i].buffer)) &&
            !(mm == m + 1 && static_cast<InstrId>(i) == online))
          needs_sync = true;
    }
    if (needs_sync) line("coil::group_sync<G>();");
    if (!locals_.count(n.out)) written_so_far.insert(root(n.out));
    if (online >= 0) {
      if (!locals_.count(nodes_[m + 1]->out)) written_so_far.insert(root(nodes_[m + 1]->out));
      line("// " + buf(n.out).name + ", " + buf(nodes_[m + 1]->out).name +
           ": the max and the sum of exp(. - max) in one pass");
      open("{");
      emit_online_max_sum(m, online);
      close();
      ++m;
      continue;
    }
    if (const size_t run = pointwise_reductions_end(m); run > m + 1) {
      // needs_sync above covered member m; the reductions read m's output from registers.
      bool sync = false;
      for (size_t mm = m + 1; mm < run; ++mm)
        for (const Instr& in : nodes_[mm]->body.instrs)
          sync = sync || (in.kind == InstrKind::Load && root(in.buffer) != root(n.out) &&
                          written_so_far.count(root(in.buffer)));
      if (sync && !needs_sync) line("coil::group_sync<G>();");
      for (size_t mm = m + 1; mm < run; ++mm)
        if (!locals_.count(nodes_[mm]->out)) written_so_far.insert(root(nodes_[mm]->out));
      std::string names;
      for (size_t mm = m; mm < run; ++mm) names += (mm > m ? ", " : "") + buf(nodes_[mm]->out).name;
      line("// " + names + ": one pass over the row, the reductions taking " + buf(n.out).name +
           "'s elements from registers");
      open("{");
      emit_reduction_loop(m, run, true);
      close();
      m = run - 1;
      continue;
    }
    const size_t end = one_pass_reductions_end(m);
    if (end > m + 1) {
      // needs_sync above covered member m only: the others read nothing m.. writes.
      bool sync = false;
      for (size_t mm = m + 1; mm < end; ++mm)
        for (const Instr& in : nodes_[mm]->body.instrs)
          sync = sync || (in.kind == InstrKind::Load && written_so_far.count(root(in.buffer)));
      if (sync && !needs_sync) line("coil::group_sync<G>();");
      for (size_t mm = m + 1; mm < end; ++mm)
        if (!locals_.count(nodes_[mm]->out)) written_so_far.insert(root(nodes_[mm]->out));
      emit_one_pass_reductions(m, end);
      m = end - 1;
      continue;
    }
    set_node_names(n);
    line("// " + buf(n.out).name);
    open("{");
    if (n.is_reduction()) {
      emit_row_reduction(n);
    } else if (n.ranges.size() == k) {
      std::string v = emit_body(n);
      if (locals_.count(n.out)) {
        emit_store(n, v);
      } else {
        keep_row_value(n, v);
        open("if (lane_ == 0) {");
        emit_store(n, v);
        close();
      }
    } else {
      std::vector<std::string> ivars;
      std::vector<Expr> iranges;
      for (size_t j = k; j < n.ranges.size(); ++j) {
        ivars.push_back(cpp_identifier(n.index_vars[j]->name));
        iranges.push_back(n.ranges[j]);
      }
      emit_row_loop({m}, ivars, iranges,
                    {{true, [&] {
                        bind_member_names(m, ivars);
                        std::string v = emit_body(n);
                        if (!row_store_.empty()) {
                          line(row_store_ + " = " + stored_value(buf(n.out).dtype, v) + ";");
                        } else {
                          emit_store(n, v);
                        }
                      }}});
    }
    close();
  }
  // The next row's members may overwrite what this row's last reads used (locals are
  // registers, but reductions share slots; group_reduce syncs after itself).
  close();
  close();
  auto entry = [&](const std::string& suffix, const std::string& args,
                   const std::string& bounds = "1024") {
    line("extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + k_.name + suffix +
         "(" + param_list() + ") {");
    line("  " + k_.name + "_impl<" + args + ">(" + arg_list() + ");");
    line("}");
  };
  const std::string V = std::to_string(vec);
  // With vector entry points the scalar ones serve only unaligned pointers: one of them, a
  // block per row, is enough (every instantiation costs NVRTC time).
  if (!row_vec_) entry("_w", "32");
  entry("_b", row_vec_ ? "0, 1" : "0");
  if (row_vec_) {
    entry("_wv", "32, " + V);
    entry("_bv", "0, " + V);
  }
  if (info_.column > 0) entry("_c", std::to_string(-info_.column));
  if (const int w = column_vector_width(); w > 0) {
    info_.column_vec = w;
    emit_column_vector(w);
  }
  // Launched with exactly block_regs threads (the register arrays are sized for it), and
  // registers capped so that kRegisterBlockWarps warps fit an SM.
  if (const int t = info_.block_regs; t > 0)
    entry("_br", std::to_string(t) + ", " + V,
          std::to_string(t) + ", " + std::to_string(std::max(1, kRegisterBlockWarps * 32 / t)));
  line("");
  row_vec_ = false;
  row_regs_ = 0;
  row_cache_.clear();
  value_cache_.clear();
}

BufferId KernelEmitter::root(BufferId b) {
  for (int guard = 0; buf(b).kind == loop::BufferKind::View && guard < 1000; ++guard)
    b = buf(b).view_of;
  return b;
}

KernelEmitter::ReduceOps KernelEmitter::reduce_ops(ReduceKind r, DType acc) {
  std::string A = compute_ctype(acc);
  bool is_bool = acc == DType::Bool;
  switch (r) {
    case ReduceKind::None:
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin:
      break;
    case ReduceKind::Sum:
      return is_bool ? ReduceOps{"false", "OrOp"} : ReduceOps{A + "(0)", "SumOp"};
    case ReduceKind::Prod:
      return is_bool ? ReduceOps{"true", "AndOp"} : ReduceOps{A + "(1)", "ProdOp"};
    case ReduceKind::Max:
      return is_bool ? ReduceOps{"false", "OrOp"}
                     : ReduceOps{"coil::numeric<" + A + ">::lowest()", "MaxOp"};
    case ReduceKind::Min:
      return is_bool ? ReduceOps{"true", "AndOp"}
                     : ReduceOps{"coil::numeric<" + A + ">::max()", "MinOp"};
    case ReduceKind::Any:
      return {"false", "OrOp"};
    case ReduceKind::All:
      return {"true", "AndOp"};
  }
  COIL_INTERNAL_ERROR() << "no reduction operator";
}

void KernelEmitter::emit_row_reduction(const ComputeNode& n) {
  if (n.reduce != ReduceKind::ArgMax && n.reduce != ReduceKind::ArgMin) {
    emit_reduction_loop(member_of(n), member_of(n) + 1);
    return;
  }
  const Instr& res = n.body.instrs.at(n.body.result);
  std::vector<std::string> rvars;
  for (Expr v : n.reduction_vars) rvars.push_back(cpp_identifier(v->name));
  const bool mx = n.reduce == ReduceKind::ArgMax;
  const std::string V = compute_ctype(res.dtype);
  line(V + " best = coil::numeric<" + V + ">::" + (mx ? "lowest" : "max") + "();");
  line("int64_t best_index = -1;");
  const size_t m = member_of(n);
  emit_row_loop({m}, rvars, n.reduction_ranges,
                {{true, [&] {
                    bind_member_names(m, rvars);
                    std::string v = emit_body(n);
                    line("const " + V + " val = " + v + ";");
                    Expr pos = ctx_.zero();
                    for (size_t j = 0; j < n.reduction_ranges.size(); ++j)
                      pos = ctx_.add(ctx_.mul(pos, n.reduction_ranges[j]), n.reduction_vars[j]);
                    line("const int64_t pos = " + idx(pos) + ";");
                    line(std::string("if (best_index < 0 || coil::arg_better<") +
                         (mx ? "true" : "false") +
                         ">(val, pos, best, best_index)) { best = val; best_index = pos; }");
                  }}});
  // Threads that saw nothing hold index -1: make them lose every comparison.
  line(std::string("if (best_index < 0) { best = coil::numeric<") + V +
       ">::" + (mx ? "lowest" : "max") + "(); best_index = 9223372036854775807LL; }");
  line(std::string("coil::group_argreduce<G, ") + (mx ? "true" : "false") + ">(best, best_index);");
  finish_reduction(n, "best_index");
}

// Members m.. that reduce over the same ranges and read none of each other's results (a
// BatchNorm backward's sum(g) and sum(g * (x - mean)), for two BatchNorms reading one
// gradient four sums): one loop over the row with an accumulator each, so the inputs they
// share are read once. Apart, each sum re-read its rows; over NHWC activations larger than L2
// that was from DRAM. Returns the end of the run (m + 1: none to merge).
size_t KernelEmitter::one_pass_reductions_end(size_t m) {
  auto plain = [&](size_t i) {
    const ComputeNode& n = *nodes_[i];
    return n.is_reduction() && n.reduce != ReduceKind::ArgMax && n.reduce != ReduceKind::ArgMin &&
           online_max_load(i) < 0;
  };
  if (!plain(m)) return m + 1;
  const ComputeNode& a = *nodes_[m];
  std::set<BufferId> outs{root(a.out)};
  size_t end = m + 1;
  for (; end < nodes_.size() && plain(end); ++end) {
    const ComputeNode& b = *nodes_[end];
    if (b.reduction_ranges.size() != a.reduction_ranges.size()) break;
    bool same = true;
    for (size_t j = 0; j < a.reduction_ranges.size(); ++j)
      same = same && ctx_.str(a.reduction_ranges[j]) == ctx_.str(b.reduction_ranges[j]);
    if (!same) break;
    bool reads_run = false;
    for (const Instr& in : b.body.instrs)
      reads_run = reads_run || (in.kind == InstrKind::Load && outs.count(root(in.buffer)));
    if (reads_run) break;
    outs.insert(root(b.out));
  }
  return end;
}

// A pointwise member m that loops over the row and stores, followed by reductions over the same
// inner ranges that read its output only at the element it stores in the same step (GPT-2's
// loss: the contiguous copy of the sliced logits, then their max) and none of each other's
// results: one loop, the reductions taking m's elements from registers (emit_reduction_loop's
// `lead`). Apart, each reduction re-read the stored rows, from L2 or DRAM when they are long.
// Returns the end of the run (m + 1: none).
size_t KernelEmitter::pointwise_reductions_end(size_t m) {
  const ComputeNode& p = *nodes_[m];
  if (p.is_reduction() || p.ranges.size() <= k_.outer_ranges.size() || locals_.count(p.out))
    return m + 1;
  const std::vector<Expr> ranges = row_loop_ranges(p);
  const std::string range_text = ranges_text(ranges);
  const std::string stored = row_store_key(m);
  std::set<BufferId> outs{root(p.out)};
  size_t end = m + 1;
  for (; end < nodes_.size(); ++end) {
    const ComputeNode& r = *nodes_[end];
    if (!r.is_reduction() || r.reduce == ReduceKind::ArgMax || r.reduce == ReduceKind::ArgMin ||
        online_max_load(end) >= 0 || ranges_text(r.reduction_ranges) != range_text)
      break;
    bool ok = true;
    for (const Instr& in : r.body.instrs) {
      if (in.kind != InstrKind::Load) continue;
      if (in.buffer == p.out && in.mask < 0) {
        ok = ok && row_load_key(end, in) == stored;
      } else {
        ok = ok && !outs.count(root(in.buffer));
      }
    }
    if (!ok) break;
    outs.insert(root(r.out));
  }
  return end;
}

void KernelEmitter::emit_one_pass_reductions(size_t first, size_t end) {
  std::string names;
  for (size_t m = first; m < end; ++m) names += (m > first ? ", " : "") + buf(nodes_[m]->out).name;
  line("// " + names + ": one pass over the row");
  open("{");
  emit_reduction_loop(first, end);
  close();
}

// Reductions first..end (not argmax/argmin) over the first's row loop, an accumulator each
// (`acc` alone, acc0.. for several), then combined across the group and stored.
// With `lead`, member `first` is a pointwise member over the same inner ranges whose output
// the reductions read only at the element it stores in the same step (pointwise_reductions_end):
// it is computed and stored first, and the reductions take that element from registers.
void KernelEmitter::emit_reduction_loop(size_t first, size_t end, bool lead) {
  const size_t red = lead ? first + 1 : first;  // the first reduction
  const bool several = end - red > 1 || lead;
  auto acc_name = [&](size_t m) {
    return end - red > 1 ? "acc" + std::to_string(m - red) : std::string("acc");
  };
  std::vector<std::string> rvars;  // the loop's names: the first member's inner variables
  for (Expr v : row_inner_vars(*nodes_[first])) rvars.push_back(cpp_identifier(v->name));
  std::vector<size_t> members;
  std::vector<RowPart> parts;
  if (lead) {
    // The value as stored (rounded to the buffer's type), as a load of it would read it.
    const ComputeNode& p = *nodes_[first];
    const std::string E = ctype(buf(p.out).dtype);
    const std::string held = row_vec_ ? "S_.v[u_]" : "pv_";
    for (size_t m = red; m < end; ++m) {
      const auto& instrs = nodes_[m]->body.instrs;
      for (size_t i = 0; i < instrs.size(); ++i)
        if (instrs[i].kind == InstrKind::Load && instrs[i].buffer == p.out)
          load_overrides_[{m, static_cast<InstrId>(i)}] = held;
    }
    members.push_back(first);
    parts.push_back({true, [this, first, E, &rvars] {
                       const ComputeNode& p = *nodes_[first];
                       bind_member_names(first, rvars);
                       const std::string v = emit_body(p);
                       const std::string stored = stored_value(buf(p.out).dtype, v);
                       if (!row_store_.empty()) {
                         line(row_store_ + " = " + stored + ";");
                       } else {
                         emit_store(p, v);
                         line("const " + E + " pv_ = " + stored + ";");
                       }
                     }});
  }
  for (size_t m = red; m < end; ++m) {
    const ComputeNode& n = *nodes_[m];
    const DType acc_t = buf(n.out).dtype;
    const std::string A = acc_t == DType::Bool ? "bool" : compute_ctype(acc_t);
    const std::string acc = acc_name(m);
    line(A + " " + acc + " = " + reduce_ops(n.reduce, acc_t).init + ";");
    members.push_back(m);
    parts.push_back({true, [this, m, acc, A, acc_t, several, &rvars] {
                       const ComputeNode& n = *nodes_[m];
                       if (several) open("{");  // each member's temporaries in their own scope
                       bind_member_names(m, rvars);
                       std::string v = emit_body(n);
                       std::string val =
                           acc_t == DType::Bool ? "bool(" + v + ")" : A + "(" + v + ")";
                       line(acc + " = coil::" + reduce_ops(n.reduce, acc_t).op + "::apply(" + acc +
                            ", " + val + ");");
                       if (several) close();
                     }});
  }
  emit_row_loop(members, rvars, row_loop_ranges(*nodes_[first]), parts);
  load_overrides_.clear();
  for (size_t m = red; m < end; ++m) {
    const ComputeNode& n = *nodes_[m];
    const std::string acc = acc_name(m);
    line(acc + " = coil::group_reduce<G, coil::" + reduce_ops(n.reduce, buf(n.out).dtype).op +
         ">(" + acc + ");");
    set_node_names(n);
    finish_reduction(n, acc);
  }
}

// Softmax's max and its sum of exp(h - max) in one pass over the row (the "online"
// softmax): member m reduces max in f32; member m + 1 sums, in f32 over the same inner
// ranges, exp(h - that max), reading the max only there and once per row. Returns that
// load in m + 1's body, or -1 where the pattern does not hold.
InstrId KernelEmitter::online_max_load(size_t m) {
  if (!options_.cuda_online_softmax || m + 1 >= nodes_.size()) return -1;
  const ComputeNode& a = *nodes_[m];
  const ComputeNode& b = *nodes_[m + 1];
  if (a.reduce != ReduceKind::Max || b.reduce != ReduceKind::Sum) return -1;
  if (buf(a.out).dtype != DType::Float32 || buf(b.out).dtype != DType::Float32) return -1;
  if (a.reduction_ranges.size() != b.reduction_ranges.size()) return -1;
  for (size_t j = 0; j < a.reduction_ranges.size(); ++j)
    if (ctx_.str(a.reduction_ranges[j]) != ctx_.str(b.reduction_ranges[j])) return -1;
  const auto& bi = b.body.instrs;
  const Instr& res = bi.at(b.body.result);
  if (res.kind != InstrKind::Exp || res.dtype != DType::Float32) return -1;
  const Instr& sub = bi.at(res.operands[0]);
  if (sub.kind != InstrKind::Sub) return -1;
  const InstrId l = sub.operands[1];
  const Instr& ld = bi.at(l);
  if (ld.kind != InstrKind::Load || ld.buffer != a.out || ld.mask >= 0) return -1;
  for (Expr e : ld.index)
    for (Expr v : b.reduction_vars)
      if (ctx_.depends_on(e, v)) return -1;
  for (size_t i = 0; i < bi.size(); ++i) {
    if (static_cast<InstrId>(i) == res.operands[0]) continue;
    for (InstrId o : bi[i].operands)
      if (o == l) return -1;
    if (bi[i].mask == l) return -1;
  }
  return l;
}

// Each thread keeps the running max m_ and the sum s_ of exp(h - m_), rescaling s_ when
// m_ grows; the group then combines (m_, s_) pairs. NaN and infinities come out as in the
// two-pass form (a NaN max makes every sum NaN; exp(inf - inf) is NaN in both).
void KernelEmitter::emit_online_max_sum(size_t m, InstrId max_load) {
  const ComputeNode& a = *nodes_[m];
  const ComputeNode& b = *nodes_[m + 1];
  std::vector<std::string> rvars;
  for (Expr v : a.reduction_vars) rvars.push_back(cpp_identifier(v->name));
  line("float m_ = coil::numeric<float>::lowest();");
  line("float s_ = 0.0f;");
  // Per step: the max of its elements first, one rescale, then V independent exps.
  RowPart start{false, [&] { line("float am_ = coil::numeric<float>::lowest();"); }};
  RowPart maxes{true, [&] {
                  open("{");
                  bind_member_names(m, rvars);
                  line("am_ = coil::MaxOp::apply(am_, float(" + emit_body(a) + "));");
                  close();
                }};
  RowPart rescale{false, [&] {
                    line("const float mn_ = coil::MaxOp::apply(m_, am_);");
                    line("if (mn_ != m_) { s_ *= coil::m::exp(m_ - mn_); m_ = mn_; }");
                  }};
  RowPart sums{true, [&] {
                 open("{");
                 bind_member_names(m + 1, rvars);
                 load_overrides_[{m + 1, max_load}] = "m_";  // the running max
                 line("s_ += float(" + emit_body(b) + ");");
                 load_overrides_.clear();
                 close();
               }};
  emit_row_loop({m, m + 1}, rvars, a.reduction_ranges, {start, maxes, rescale, sums});
  line("const float rmax_ = coil::group_reduce<G, coil::MaxOp>(m_);");
  line("const float rsum_ = coil::group_reduce<G, coil::SumOp>(s_ * coil::m::exp(m_ - rmax_));");
  set_node_names(a);
  finish_reduction(a, "rmax_");
  set_node_names(b);
  finish_reduction(b, "rsum_");
}

size_t KernelEmitter::member_of(const ComputeNode& n) {
  for (size_t m = 0; m < nodes_.size(); ++m)
    if (nodes_[m] == &n) return m;
  COIL_INTERNAL_ERROR() << "not a member of " << k_.name;
}

void KernelEmitter::finish_reduction(const ComputeNode& n, const std::string& v) {
  if (locals_.count(n.out)) {
    emit_store(n, v);
    return;
  }
  keep_row_value(n, v);
  open("if (lane_ == 0) {");
  emit_store(n, v);
  close();
}

}  // namespace coil::backend::cuda::detail
