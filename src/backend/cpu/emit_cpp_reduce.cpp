// KernelEmitter's reductions (kernel_emitter.h): a member reducing to one accumulator per
// outer point (emit_reduction), kernels of column reductions that accumulate a block of the
// kept last dim together (is_outer_reduction, emit_outer_reduction), the reduction operators
// (reduce_ops) and float sums accumulated in blocks (blocked_sum, open_sum_block).
#include <string>

#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"
#include "cpp_expr.h"
#include "kernel_emitter.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cpu::detail {

KernelEmitter::ReduceOps KernelEmitter::reduce_ops(ReduceKind r, DType acc) {
  std::string A = compute_ctype(acc);
  bool fp = dtype_is_floating(acc);
  bool is_bool = acc == DType::Bool;
  switch (r) {
    case ReduceKind::None:
      break;
    case ReduceKind::Sum:
      return {is_bool ? "false" : A + "(0)", is_bool ? "||" : "+", false};
    case ReduceKind::Prod:
      return {is_bool ? "true" : A + "(1)", is_bool ? "&&" : "*", false};
    case ReduceKind::Max:
      if (is_bool) return {"false", "||", false};
      return {"coil::numeric<" + A + ">::lowest()", "max", fp};
    case ReduceKind::Min:
      if (is_bool) return {"true", "&&", false};
      return {"coil::numeric<" + A + ">::max()", "min", fp};
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin:
      return {"", "", false};
    case ReduceKind::Any:
      return {"false", "||", false};
    case ReduceKind::All:
      return {"true", "&&", false};
  }
  COIL_INTERNAL_ERROR() << "bad reduce kind";
}

// A kernel that is one reduction whose input is contiguous along the last outer dim but not
// along the reduction (sum over dim 0 of [N, C]: bias gradients). Reducing each output
// separately would stride through memory; instead a block of adjacent outputs accumulates
// together, with the vector loop running over the block.
// A reduction whose kept last dim is unit-stride in what it reads and whose reduced dims are
// not (a channels-last mean over H and W): accumulators for a block of the last dim, the
// reduced dims as outer loops. Later members that compute one element per outer point (the
// mean's division) run in the block's finishing loop.
// Several such reductions over the same outer dims (a LayerNorm's weight and bias
// gradients, column sums over the tokens) run one after the other, each over its own blocks
// of the kept dim; the pointwise members follow the last one. Earlier reductions' results
// then live in buffers, not locals.
bool KernelEmitter::is_outer_reduction() {
  if (nodes_.empty() || k_.outer_ranges.empty()) return false;
  size_t r = 0;
  while (r < nodes_.size() && nodes_[r]->is_reduction()) ++r;
  if (r == 0) return false;
  for (size_t m = r; m < nodes_.size(); ++m)
    if (nodes_[m]->is_reduction() || nodes_[m]->ranges.size() != k_.outer_ranges.size())
      return false;
  for (size_t m = 0; m < r; ++m) {
    const ComputeNode& n = *nodes_[m];
    if (n.reduction_vars.empty() || n.ranges.size() != k_.outer_ranges.size()) return false;
    if (n.reduce != ReduceKind::Sum && n.reduce != ReduceKind::Prod &&
        n.reduce != ReduceKind::Max && n.reduce != ReduceKind::Min) {
      return false;
    }
    if (buf(n.out).dtype == DType::Bool) return false;
    if (m + 1 < r && locals_.count(n.out)) return false;
    if (vectorizable(n, n.reduction_vars.back(), false)) return false;
    if (!vectorizable(n, n.index_vars.back(), true)) return false;
  }
  return true;
}

void KernelEmitter::emit_outer_reduction(const std::string& par) {
  size_t r = 0;
  while (r < nodes_.size() && nodes_[r]->is_reduction()) ++r;
  for (size_t m = 0; m < r; ++m) emit_outer_reduction_block(par, m, m + 1 == r);
}

// The blocked column reduction of member m; with `members`, the pointwise members after it
// run in its finishing loop.
void KernelEmitter::emit_outer_reduction_block(const std::string& par, size_t m, bool members) {
  const ComputeNode& n = *nodes_[m];
  set_node_names(n);
  const size_t k = k_.outer_ranges.size();
  const DType out_t = buf(n.out).dtype;
  const std::string A = compute_ctype(out_t);
  const ReduceOps ops = reduce_ops(n.reduce, out_t);
  const std::string xl = "x" + std::to_string(k - 1);
  const std::string extent = idx(k_.outer_ranges[k - 1]);
  constexpr int kBlock = 64;
  if (!par.empty()) {
    line("#pragma omp parallel for" +
         std::string(k > 1 ? " collapse(" + std::to_string(k) + ")" : "") + par);
  }
  for (size_t j = 0; j + 1 < k; ++j) open_loop("x" + std::to_string(j), k_.outer_ranges[j]);
  line("for (int64_t xb = 0; xb < " + extent + "; xb += " + std::to_string(kBlock) + ") {");
  ++indent_;
  line("const int64_t nb = " + extent + " - xb < " + std::to_string(kBlock) + " ? " + extent +
       " - xb : " + std::to_string(kBlock) + ";");
  line(A + " acc[" + std::to_string(kBlock) + "];");
  if (ops.nan_flag) line("int nan_seen[" + std::to_string(kBlock) + "];");
  // Float sums: `acc` restarts for each block of rows of the innermost reduction loop and
  // is added into the double `total` after it (blocked_sum says why).
  const bool blocked = blocked_sum(n, A);
  const size_t nr = n.reduction_ranges.size();
  if (blocked) line("double total[" + std::to_string(kBlock) + "];");
  line("for (int64_t j = 0; j < nb; ++j) {");
  ++indent_;
  line(blocked ? "total[j] = 0;" : "acc[j] = " + ops.init + ";");
  if (ops.nan_flag) line("nan_seen[j] = 0;");
  close();
  for (size_t j = 0; j < nr; ++j) {
    const std::string var = cpp_identifier(n.reduction_vars[j]->name);
    if (!blocked || j + 1 < nr) {
      open_loop(var, n.reduction_ranges[j]);
      continue;
    }
    open_block_loop(var, idx(n.reduction_ranges[j]), kSumRows);
    line("for (int64_t j = 0; j < nb; ++j) acc[j] = 0;");
    line("for (int64_t " + var + " = " + var + "_b; " + var + " < " + var + "_e; ++" + var + ") {");
    ++indent_;
  }
  line("#pragma omp simd");
  line("for (int64_t j = 0; j < nb; ++j) {");
  ++indent_;
  line("const int64_t " + xl + " = xb + j;");
  std::string v = emit_body(n);
  switch (n.reduce) {
    case ReduceKind::Sum:
      line("acc[j] += " + A + "(" + v + ");");
      break;
    case ReduceKind::Prod:
      line("acc[j] *= " + A + "(" + v + ");");
      break;
    default: {
      bool mx = n.reduce == ReduceKind::Max;
      line("const " + A + " val = " + A + "(" + v + ");");
      line(std::string("acc[j] = val ") + (mx ? ">" : "<") + " acc[j] ? val : acc[j];");
      if (ops.nan_flag) line("nan_seen[j] |= (val != val);");
    }
  }
  close();
  if (blocked) {
    close();
    line("for (int64_t j = 0; j < nb; ++j) total[j] += acc[j];");
  }
  for (size_t j = 0; j < nr; ++j) close();
  line("for (int64_t j = 0; j < nb; ++j) {");
  ++indent_;
  line("const int64_t " + xl + " = xb + j;");
  if (ops.nan_flag) line("if (nan_seen[j]) acc[j] = coil::numeric<" + A + ">::nan();");
  declare_locals();
  emit_store(n, blocked ? A + "(total[j])" : "acc[j]");
  if (members)
    for (size_t p = m + 1; p < nodes_.size(); ++p) emit_member(p);
  close();
  close();
  for (size_t j = 0; j + 1 < k; ++j) close();
}

void KernelEmitter::emit_reduction(const ComputeNode& n) {
  const size_t k = k_.outer_ranges.size();
  DType out_t = buf(n.out).dtype;
  const Instr& res = n.body.instrs.at(n.body.result);
  bool arg = n.reduce == ReduceKind::ArgMax || n.reduce == ReduceKind::ArgMin;
  DType acc_t = arg ? res.dtype : out_t;
  // Low-precision and bool-sum accumulators compute in the compute type.
  std::string A = compute_ctype(acc_t);
  ReduceOps ops = reduce_ops(n.reduce, acc_t);
  if (arg) {
    std::string V = compute_ctype(res.dtype);
    bool mx = n.reduce == ReduceKind::ArgMax;
    line(V + " best = coil::numeric<" + V + ">::" + (mx ? "lowest" : "max") + "();");
    line("int64_t best_index = 0;");
  } else {
    if (!blocked_sum(n, A)) line(A + " acc = " + ops.init + ";");
    // An int OR vectorizes; a bool || reduction made max-reductions 2.5x slower.
    if (ops.nan_flag) line("int nan_seen = 0;");
  }
  // Reduction loops.
  bool simd = !arg && !ops.omp.empty() &&
              vectorizable(n, n.reduction_vars.empty() ? nullptr : n.reduction_vars.back(), false);
  std::string clause = ops.omp.empty() ? "" : " reduction(" + ops.omp + ":acc)";
  if (ops.nan_flag) clause += " reduction(|:nan_seen)";
  std::string par = (k == 0 && !arg) ? parallel_clause(inner_numel(n)) : "";
  const size_t nr = n.reduction_ranges.size();
  emit_invariants(n, n.reduction_vars);
  const bool blocked = blocked_sum(n, A);
  if (blocked) {
    // The float `acc` restarts for each block of the innermost loop; `acc_total` is the sum.
    line("double acc_total = 0;");
    clause = " reduction(+:acc_total)";
  }
  for (size_t j = 0; j < nr; ++j) {
    bool first = j == 0, last = j + 1 == nr;
    if (last && blocked) {
      open_sum_block(cpp_identifier(n.reduction_vars[j]->name), n.reduction_ranges[j],
                     first ? par : "", simd);
      break;
    }
    if (first && !par.empty()) {
      line(std::string("#pragma omp parallel for") + (last && simd ? " simd" : "") + clause + par);
    } else if (last && simd) {
      line("#pragma omp simd" + clause);
    }
    open_loop(cpp_identifier(n.reduction_vars[j]->name), n.reduction_ranges[j]);
  }
  std::string v = emit_body(n);
  std::string V = compute_ctype(res.dtype);
  switch (n.reduce) {
    case ReduceKind::None:
      COIL_INTERNAL_ERROR() << "not a reduction";
      break;
    case ReduceKind::Sum:
      line(acc_t == DType::Bool ? "acc = acc || bool(" + v + ");" : "acc += " + A + "(" + v + ");");
      break;
    case ReduceKind::Prod:
      line(acc_t == DType::Bool ? "acc = acc && bool(" + v + ");" : "acc *= " + A + "(" + v + ");");
      break;
    case ReduceKind::Max:
    case ReduceKind::Min: {
      bool mx = n.reduce == ReduceKind::Max;
      if (acc_t == DType::Bool) {
        line(std::string("acc = acc ") + (mx ? "||" : "&&") + " bool(" + v + ");");
        break;
      }
      line("const " + A + " val = " + A + "(" + v + ");");
      line(std::string("acc = val ") + (mx ? ">" : "<") + " acc ? val : acc;");
      if (ops.nan_flag) line("nan_seen |= (val != val);");
      break;
    }
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin: {
      bool mx = n.reduce == ReduceKind::ArgMax;
      line("const " + V + " val = " + v + ";");
      std::string cond = std::string("val ") + (mx ? ">" : "<") + " best";
      if (dtype_is_floating(res.dtype)) cond = "(" + cond + ") || (val != val && best == best)";
      line("if (" + cond + ") {");
      ++indent_;
      line("best = val;");
      // Position along the flattened reduction range.
      Expr pos = ctx_.zero();
      for (size_t j = 0; j < nr; ++j) {
        pos = ctx_.add(ctx_.mul(pos, n.reduction_ranges[j]), n.reduction_vars[j]);
      }
      line("best_index = " + idx(pos) + ";");
      --indent_;
      line("}");
      break;
    }
    case ReduceKind::Any:
      line("acc = acc || bool(" + v + ");");
      break;
    case ReduceKind::All:
      line("acc = acc && bool(" + v + ");");
      break;
  }
  if (blocked) {
    close();
    line("acc_total += acc;");
    close();  // the block loop
    for (size_t j = 0; j + 1 < nr; ++j) close();
    emit_store(n, A + "(acc_total)");
    return;
  }
  for (size_t j = 0; j < nr; ++j) close();
  if (ops.nan_flag) line("if (nan_seen) acc = coil::numeric<" + A + ">::nan();");
  emit_store(n, arg ? "best_index" : "acc");
}

bool KernelEmitter::blocked_sum(const ComputeNode& n, const std::string& acc_ctype) {
  if (n.reduce != ReduceKind::Sum || acc_ctype != "float" || n.reduction_ranges.empty())
    return false;
  if (n.reduction_ranges.size() > 1) return true;
  auto c = ctx_.as_const(n.reduction_ranges.back());
  return !c || *c > kSumBlock;
}

// Opens `for (var_b = 0; var_b < end; var_b += block) {` and declares `var_e`, the block's
// end: the loop over blocks of a blocked sum.
void KernelEmitter::open_block_loop(const std::string& var, const std::string& end, int block) {
  const std::string B = std::to_string(block);
  line("for (int64_t " + var + "_b = 0; " + var + "_b < " + end + "; " + var + "_b += " + B +
       ") {");
  ++indent_;
  line("const int64_t " + var + "_e = " + end + " - " + var + "_b < " + B + " ? " + end + " : " +
       var + "_b + " + B + ";");
}

// Opens `for (var_b...) { float acc = 0; [simd] for (var = var_b; var < var_e...) {`, the
// innermost loop of a blocked sum (blocked_sum), with the parallel pragma on the block loop
// where the sum is the kernel's whole work; `{ float acc = 0; for (var...) {` where one
// block covers the loop.
void KernelEmitter::open_sum_block(const std::string& var, Expr extent, const std::string& par,
                                   bool simd) {
  const std::string end = idx(extent);
  auto c = ctx_.as_const(extent);
  if (c && *c <= kSumBlock && par.empty()) {  // one block: a scope for its partial sum
    line("{");
    ++indent_;
    line("float acc = 0;");
    if (simd) line("#pragma omp simd reduction(+:acc)");
    open_loop(var, extent);
    return;
  }
  if (!par.empty()) line("#pragma omp parallel for reduction(+:acc_total)" + par);
  open_block_loop(var, end, kSumBlock);
  line("float acc = 0;");
  if (simd) line("#pragma omp simd reduction(+:acc)");
  line("for (int64_t " + var + " = " + var + "_b; " + var + " < " + var + "_e; ++" + var + ") {");
  ++indent_;
}

}  // namespace coil::backend::cpu::detail
