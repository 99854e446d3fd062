// The vector column entry point _cv of row kernels that read across rows (kernel_emitter.h;
// docs/cuda-backend.md): each thread takes W adjacent rows (columns of the row-major data,
// the channels of a channels-last activation) and reads them with one 128-bit coil::Vec
// load per input and element of the row loop, where _c reads one row per thread with 4-byte
// loads and too few of them in flight to fill the H100's memory pipe.
#include <algorithm>

#include "coil/backend/common/cpp_expr.h"
#include "coil/backend/common/scalar_expr.h"
#include "coil/backend/cuda/launch.h"
#include "kernel_emitter.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda::detail {

// Whether load `in` of member m is one coil::Vec load across the W rows: unmasked (a mask
// guards an element that may lie outside the buffer) and contiguous along the last outer
// variable.
bool KernelEmitter::column_vector_load(size_t m, const Instr& in) {
  const size_t k = k_.outer_ranges.size();
  const ComputeNode& n = *nodes_[m];
  const auto id = static_cast<InstrId>(&in - n.body.instrs.data());
  return in.kind == InstrKind::Load && in.mask < 0 && !locals_.count(in.buffer) &&
         in.buffer != p_.rng_state && !load_overrides_.count({m, id}) &&
         stride_along(flat_index(in.buffer, in.index), n.index_vars[k - 1]) ==
             std::optional<int64_t>(1);
}

// Rows per thread of _cv (W), or 0 for none. The kernel has the column entry point _c, its
// first members are one pass over the row (column_run_end) and the others one value per row
// that read what the kernel stores only at their own row (a BatchNorm's mean, rstd and
// running statistics from its sums, each thread's W rows from its registers); every
// load contiguous along the last outer variable starts at a multiple of W elements, that
// variable's extent is a multiple of W, and the leading member's store is contiguous along it
// too. Other loads read scalars inside the loop over the W rows, as _c does.
int KernelEmitter::column_vector_width() {
  const size_t k = k_.outer_ranges.size();
  const size_t n = nodes_.size();
  if (info_.column == 0 || k == 0 || info_.random || !locals_.empty() || n == 0) return 0;
  for (const ComputeNode* node : nodes_)
    for (const Instr& in : node->body.instrs)
      if (in.kind == InstrKind::Indirect) return 0;
  const size_t run = column_run_end();
  if (run == 0) return 0;
  const bool lead = !nodes_[0]->is_reduction();
  std::set<BufferId> stored;  // what the run stores: later members read it at their own row
  for (size_t m = 0; m < run; ++m) stored.insert(root(nodes_[m]->out));
  for (size_t m = run; m < n; ++m) {
    const ComputeNode& node = *nodes_[m];
    if (node.is_reduction() || node.ranges.size() != k) return 0;
    set_node_names(node);
    for (const Instr& in : node.body.instrs) {
      if (in.kind != InstrKind::Load || !stored.count(root(in.buffer))) continue;
      // Only the element of its own row, which the thread holds in a register.
      const ComputeNode* w = nullptr;
      for (size_t j = 0; j < m; ++j)
        if (nodes_[j]->out == in.buffer) w = nodes_[j];
      if (!w || w->ranges.size() != k || in.mask >= 0) return 0;
      const std::string read = idx(flat_index(in.buffer, in.index));
      set_node_names(*w);
      const std::string written = idx(flat_index(w->out, w->store_index));
      set_node_names(node);
      if (read != written) return 0;
    }
    stored.insert(root(node.out));
  }
  override_lead_loads(run);
  std::vector<Expr> starts;
  int max_size = 0;
  bool scalar_only = false;
  for (size_t m = 0; m < run; ++m) {
    const ComputeNode& node = *nodes_[m];
    const Expr var = node.index_vars[k - 1];
    for (const Instr& in : node.body.instrs) {
      if (in.kind == InstrKind::Load && root(in.buffer) == root(nodes_[0]->out) &&
          !load_overrides_.count({m, static_cast<InstrId>(&in - node.body.instrs.data())}))
        scalar_only = true;
      if (!column_vector_load(m, in)) continue;
      Expr flat = flat_index(in.buffer, in.index);
      starts.push_back(ctx_.substitute(flat, {{var, ctx_.zero()}}));
      max_size = std::max(max_size, dtype_size(buf(in.buffer).dtype));
    }
  }
  if (lead) {
    const ComputeNode& p = *nodes_[0];
    Expr flat = flat_index(p.out, p.store_index);
    if (stride_along(flat, p.index_vars[k - 1]) != std::optional<int64_t>(1)) scalar_only = true;
    starts.push_back(ctx_.substitute(flat, {{p.index_vars[k - 1], ctx_.zero()}}));
    max_size = std::max(max_size, dtype_size(buf(p.out).dtype));
  }
  load_overrides_.clear();
  if (scalar_only || starts.empty()) return 0;
  const int width = std::min(8, 16 / max_size);
  auto extent = ctx_.as_const(k_.outer_ranges[k - 1]);
  if (width < 2 || !extent || *extent % width != 0) return 0;
  return starts_aligned(starts, width) ? width : 0;
}

// The end of the members that loop over the row in _cv (0: none): reductions that read none
// of each other's results (one_pass_reductions_end), or one pointwise member over the row and
// the reductions that take its elements from registers (pointwise_reductions_end).
size_t KernelEmitter::column_run_end() {
  if (!nodes_[0]->is_reduction()) {
    const size_t end = pointwise_reductions_end(0);
    return end > 1 ? end : 0;
  }
  const size_t end = one_pass_reductions_end(0);
  for (size_t m = 0; m < end; ++m)
    if (nodes_[m]->reduce == ReduceKind::ArgMax || nodes_[m]->reduce == ReduceKind::ArgMin)
      return 0;
  return end;
}

// With a leading pointwise member, the run's reductions read its element of the row u_ from
// the stored vector S_ (load_overrides_), not from memory.
void KernelEmitter::override_lead_loads(size_t run) {
  if (nodes_[0]->is_reduction()) return;
  for (size_t m = 1; m < run; ++m)
    for (size_t i = 0; i < nodes_[m]->body.instrs.size(); ++i) {
      const Instr& in = nodes_[m]->body.instrs[i];
      if (in.kind == InstrKind::Load && in.buffer == nodes_[0]->out)
        load_overrides_[{m, static_cast<InstrId>(i)}] = "S_.v[u_]";
    }
}

// <name>_cv: kColumnVecThreads threads per block-row, each taking `width` adjacent rows; the
// block's lanes (threadIdx.x / C) split the row loop, as in _c.
void KernelEmitter::emit_column_vector(int width) {
  const size_t k = k_.outer_ranges.size();
  const size_t n = nodes_.size();
  const std::string T = idx_t_;
  const bool lead = !nodes_[0]->is_reduction();
  const size_t run = column_run_end();
  const std::string C = std::to_string(kColumnVecThreads);  // launch.h sizes the grid by it
  const std::string W = std::to_string(width);
  row_values_.clear();
  line("// " + k_.name + "_cv: " + W + " adjacent rows a thread, one " + W +
       "-wide load per input and element");
  line("__device__ __forceinline__ void " + k_.name + "_cv_impl(" + param_list() + ") {");
  ++indent_;
  line("constexpr int C = " + C + ", W = " + W + ";");
  line("const int g_ = blockDim.x / C;");
  line("const int lane_ = threadIdx.x / C;");
  line("const int64_t rows_ = " + idx(product(k_.outer_ranges)) + ";");
  // Uniform across the block (the reductions sync it): a thread past the end redoes the last
  // W rows, writing the same values.
  open(
      "for (int64_t r0_ = int64_t(blockIdx.x) * (C * W); r0_ < rows_; r0_ += int64_t(gridDim.x) "
      "* (C * W)) {");
  line("const int64_t row_ = min(r0_ + int64_t(threadIdx.x % C) * W, rows_ - W);");
  std::vector<std::string> vars;
  for (size_t j = 0; j < k; ++j) vars.push_back("x" + std::to_string(j));
  decompose("(" + T + ")row_", vars, k_.outer_ranges);
  const std::string xw = "x" + std::to_string(k - 1);
  // Binds member m's names, its last outer variable to the row u_ of the thread's W (xc_) or
  // to the first of them (the vector loads and stores).
  std::vector<std::string> rvars;
  for (Expr v : row_inner_vars(*nodes_[0])) rvars.push_back(cpp_identifier(v->name));
  auto bind = [&](size_t m, bool per_row) {
    bind_member_names(m, rvars);
    if (per_row) sym_names_[nodes_[m]->index_vars[k - 1]] = "xc_";
  };
  const size_t red = lead ? 1 : 0;
  std::string names;
  for (size_t m = 0; m < run; ++m) names += (m ? ", " : "") + buf(nodes_[m]->out).name;
  line("// " + names + ": one pass over the rows");
  auto acc = [&](size_t m) { return "acc" + std::to_string(m - red); };
  auto acc_type = [&](size_t m) {
    const DType t = buf(nodes_[m]->out).dtype;
    return t == DType::Bool ? std::string("bool") : compute_ctype(t);
  };
  for (size_t m = red; m < run; ++m) line(acc_type(m) + " " + acc(m) + "[W];");
  line("#pragma unroll");
  open("for (int u_ = 0; u_ < W; ++u_) {");
  for (size_t m = red; m < run; ++m)
    line(acc(m) + "[u_] = " + reduce_ops(nodes_[m]->reduce, buf(nodes_[m]->out).dtype).init + ";");
  close();
  override_lead_loads(run);
  // The loop takes U steps a pass, every step's loads before any step's arithmetic, so a
  // thread has U loads per input in flight (docs/decisions.md: with the folded index,
  // [64, 256, 56, 56] statistics 79.5 -> 72.5 us on the H100); U = 1 where the loads would
  // take too many registers.
  std::vector<size_t> members;
  for (size_t m = 0; m < run; ++m) members.push_back(m);
  const std::vector<Expr> ranges = row_loop_ranges(*nodes_[0]);
  const std::string N = "(" + T + ")(" + idx(product(ranges)) + ")";
  const auto [kept, extents] = fold_loop_vars(members, rvars, ranges);
  // The distinct vector loads (two members reading one element share it), by printed address;
  // those the loop does not move (a variance's shift) are loaded once, before it.
  std::vector<std::pair<std::string, std::string>> loads;  // (declaration type, address)
  std::map<std::string, std::string> by_address;
  int hoisted = 0;
  vec_loads_.clear();
  for (size_t m = 0; m < run; ++m) {
    bind(m, false);
    const auto& instrs = nodes_[m]->body.instrs;
    const std::vector<Expr> inner = row_inner_vars(*nodes_[m]);
    for (size_t i = 0; i < instrs.size(); ++i) {
      const Instr& in = instrs[i];
      if (!column_vector_load(m, in)) continue;
      const std::string type = "coil::Vec<" + ctype(buf(in.buffer).dtype) + ", W>";
      const Expr flat = flat_index(in.buffer, in.index);
      const std::string address = buf(in.buffer).name + " + " + idx(flat);
      bool moves = false;
      for (Expr v : inner) moves = moves || ctx_.depends_on(flat, v);
      auto [it, fresh] = by_address.emplace(address, "");
      if (fresh && moves) {
        it->second = "L" + std::to_string(loads.size());
        loads.emplace_back(type, address);
      } else if (fresh) {
        it->second = "K" + std::to_string(hoisted++);
        line("const " + type + " " + it->second + " = *(const " + type + "*)(" + address + ");");
      }
      vec_loads_[{m, static_cast<InstrId>(i)}] = it->second + (moves ? "[s_]" : "");
    }
  }
  const int unroll = loads.size() <= 4 ? 2 : 1;
  line("constexpr int U = " + std::to_string(unroll) + ";");
  line(T + " e0_ = lane_;");
  // One pass: `steps` steps (U in the loop, then 1 for what is left of the row), each
  // element e_. The leftover steps run in a loop of their own: a bound check inside the
  // unrolled loop took 53 registers against 32 without (two 1024-thread blocks an SM).
  auto pass = [&](const std::string& steps) {
    for (size_t j = 0; j < loads.size(); ++j)
      line(loads[j].first + " L" + std::to_string(j) + "[" + steps + "];");
    line("#pragma unroll");
    open("for (int s_ = 0; s_ < " + steps + "; ++s_) {");
    line("const " + T + " e_ = e0_ + s_ * g_;");
    bind(0, false);
    decompose("e_", kept, extents);
    for (size_t j = 0; j < loads.size(); ++j)
      line("L" + std::to_string(j) + "[s_] = coil::load_vec((const " + loads[j].first + "*)(" +
           loads[j].second + "));");
    close();
    line("#pragma unroll");
    open("for (int s_ = 0; s_ < " + steps + "; ++s_) {");
    line("const " + T + " e_ = e0_ + s_ * g_;");
    decompose("e_", kept, extents);
    const std::string SE = lead ? ctype(buf(nodes_[0]->out).dtype) : "";
    if (lead) line("coil::Vec<" + SE + ", W> S_;");
    line("#pragma unroll");
    open("for (int u_ = 0; u_ < W; ++u_) {");
    line("const " + T + " xc_ = " + xw + " + u_;");
    vec_mode_ = true;
    for (size_t m = 0; m < run; ++m) {
      const ComputeNode& node = *nodes_[m];
      open("{");
      bind(m, true);
      const std::string v = emit_body(node);
      if (m == 0 && lead) {
        line("S_.v[u_] = " + stored_value(buf(node.out).dtype, v) + ";");
      } else {
        const DType t = buf(node.out).dtype;
        const std::string val = t == DType::Bool ? "bool(" + v + ")" : acc_type(m) + "(" + v + ")";
        line(acc(m) + "[u_] = coil::" + reduce_ops(node.reduce, t).op + "::apply(" + acc(m) +
             "[u_], " + val + ");");
      }
      close();
    }
    vec_mode_ = false;
    close();
    if (lead) {
      bind(0, false);
      line("*(coil::Vec<" + SE + ", W>*)(" + buf(nodes_[0]->out).name + " + " +
           idx(flat_index(nodes_[0]->out, nodes_[0]->store_index)) + ") = S_;");
    }
    close();
  };
  open("for (; e0_ + (U - 1) * g_ < " + N + "; e0_ += U * g_) {");
  pass("U");
  close();
  open("for (; e0_ < " + N + "; e0_ += g_) {");
  pass("1");
  close();
  folded_.clear();
  load_overrides_.clear();
  vec_loads_.clear();
  line("#pragma unroll");
  open("for (int u_ = 0; u_ < W; ++u_) {");
  line("const " + T + " xc_ = " + xw + " + u_;");
  // Each row's results, then the members computed from them (kept in registers: later
  // members read the element of their own row from there, keep_row_value).
  for (size_t m = red; m < n; ++m) {
    const ComputeNode& node = *nodes_[m];
    std::string v;
    if (m < run) {
      v = acc(m) + "[u_]";
      line(v + " = coil::group_reduce<-C, coil::" +
           reduce_ops(node.reduce, buf(node.out).dtype).op + ">(" + v + ");");
    }
    set_node_names(node);
    sym_names_[node.index_vars[k - 1]] = "xc_";
    member_ = m;
    line(compute_ctype(buf(node.out).dtype) + " " + local_name(node.out) + ";");
    open("{");  // the member's temporaries
    if (m >= run) v = emit_body(node);
    keep_row_value(node, v);
    open("if (lane_ == 0) {");
    emit_store(node, v);
    close();
    close();
  }
  row_values_.clear();
  close();
  close();
  --indent_;
  line("}");
  line("extern \"C\" __global__ void __launch_bounds__(1024) " + k_.name + "_cv(" + param_list() +
       ") {");
  line("  " + k_.name + "_cv_impl(" + arg_list() + ");");
  line("}");
}

}  // namespace coil::backend::cuda::detail
