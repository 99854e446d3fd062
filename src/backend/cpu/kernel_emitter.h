// The C++ emitter's kernel writer (internal to src/backend/cpu): one KernelEmitter writes one
// KernelPlan's C++ function (emit_cpp.h's ABI). Its members are defined by kind: emit_cpp.cpp
// (the kernel skeleton, pointwise kernels and members, stores, bodies and loads) and
// emit_cpp_reduce.cpp (reductions: one accumulator per outer point, blocked column
// reductions, blocked float sums).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "coil/backend/cpu/emit_cpp.h"

namespace coil::backend::cpu::detail {

using loop::BufferId;
using loop::ComputeNode;
using loop::Instr;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

class KernelEmitter {
 public:
  KernelEmitter(const loop::LoopProgram& p, const sched::KernelPlan& k,
                const CompileOptions& options, std::ostringstream& os)
      : p_(p), ctx_(*p.ctx), k_(k), options_(options), os_(os) {
    locals_.insert(k.local_buffers.begin(), k.local_buffers.end());
    for (int st : k.steps) nodes_.push_back(&std::get<ComputeNode>(p.steps.at(st)));
    for (const ComputeNode* n : nodes_)
      for (const Instr& in : n->body.instrs)
        masked_loads_ = masked_loads_ || (in.kind == InstrKind::Load && in.mask >= 0);
  }
  void emit();

 private:
  // ---------------------------------------------------------------- text helpers
  void line(std::string s);
  void open_loop(const std::string& var, Expr extent, bool pragma_ok = false);
  void close();
  std::string idx(Expr e);
  void set_node_names(const ComputeNode& n);
  // ---------------------------------------------------------------- structure
  void header_comment();
  std::string ranges_text(const std::vector<Expr>& r);
  const loop::Buffer& buf(BufferId b) const { return p_.buffer(b); }
  bool has_symbolic_extent() const;
  void prologue();
  Expr product(const std::vector<Expr>& v, size_t from = 0);
  Expr outer_numel() { return product(k_.outer_ranges); }
  Expr inner_numel(const ComputeNode& n);
  std::string parallel_clause(Expr work);
  void declare_locals();
  std::string local_name(BufferId b) { return buf(b).name + "_v"; }
  // ---------------------------------------------------------------- pointwise kernels
  // Side of a tile of a transposed pointwise kernel (emit_tiled_pointwise): 16 rows of 16
  // floats, one cache line each, were the fastest of 8, 16 and 32 for 128..512 square
  // transposes on the 2-core AMD EPYC (and 1024 square lost 1.5x to 8).
  static constexpr int kTransposeTile = 16;
  std::vector<size_t> pointwise_loop_order();
  Expr step(Expr flat, Expr var);
  std::optional<int64_t> const_step(Expr flat, Expr var) { return ctx_.as_const(step(flat, var)); }
  std::string tile_loop_text(size_t j);
  int transposed_dim(const std::vector<size_t>& order);
  void emit_tiled_pointwise(const std::string& par, std::vector<size_t> order, size_t t);
  void copy_transposed_tiles(const ComputeNode& n, size_t t, size_t inner);
  void emit_pure_pointwise(const std::string& par);
  Expr fold_chained_dims(std::vector<size_t>& order);
  bool chained(Expr flat, Expr inner, Expr outer, int64_t inner_extent);
  std::string clamped_load(const Instr& in);
  Expr at_least_zero(Expr e);
  bool never_empty(BufferId b);
  bool row_invariant(InstrId i) const;
  InstrId invariant_load_mask() const;
  bool vectorizable(const ComputeNode& n, Expr var, bool check_store, bool strided_loads = false);
  Expr flat_index(BufferId b, const std::vector<Expr>& index);
  // ---------------------------------------------------------------- members
  void emit_member(size_t m);
  void emit_store(const ComputeNode& n, const std::string& v);
  // ---------------------------------------------------------------- reductions
  // (emit_cpp_reduce.cpp)
  struct ReduceOps {
    std::string init;       // accumulator identity
    std::string omp;        // OpenMP reduction operator, "" = no simd reduction
    bool nan_flag = false;  // floating max/min: track NaN separately
  };
  ReduceOps reduce_ops(ReduceKind r, DType acc);
  bool is_outer_reduction();
  void emit_outer_reduction(const std::string& par);
  void emit_outer_reduction_block(const std::string& par, size_t m, bool members);
  void emit_reduction(const ComputeNode& n);
  // Float sums accumulate in blocks of at most kSumBlock iterations of the innermost reduction
  // loop: a float partial sum, vectorized with its lanes in registers, added once per block
  // into a double total. One float accumulator over a whole reduction lost ~16 ulps of a
  // BatchNorm mean over 2 x 32 x 32 elements (the running sum grows while each addend stays
  // small), 30x eager's error, which accumulates CPU BatchNorm statistics in double; after
  // ten residual blocks that flipped a ReLU and failed the training accuracy rule. A sum
  // that one vector loop of at most kSumBlock iterations covers is left as it was.
  static constexpr int kSumBlock = 1024;
  // The same for column sums (emit_outer_reduction), in rows: each adds a vector per column.
  static constexpr int kSumRows = 64;
  bool blocked_sum(const ComputeNode& n, const std::string& acc_ctype);
  void open_block_loop(const std::string& var, const std::string& end, int block);
  void open_sum_block(const std::string& var, Expr extent, const std::string& par, bool simd);
  // ---------------------------------------------------------------- bodies
  // "v" prefix: "t<N>" names the symbols bound by Indirect instructions.
  std::string tmp(InstrId i) { return "v" + std::to_string(i); }
  void emit_invariants(const ComputeNode& n, const std::vector<Expr>& inner_vars);
  void hoist_index_bases(const ComputeNode& n, std::vector<Expr> inner_vars,
                         const std::vector<bool>& variant);
  std::string index_text(Expr flat);
  void declare_load_strides(const ComputeNode& n, Expr var);
  std::vector<bool> variant_instrs(const ComputeNode& n, const std::vector<Expr>& vars);
  void emit_instr(const loop::Body& b, InstrId i);
  std::string emit_body(const ComputeNode& n);
  std::string instr_expr(const loop::Body& b, InstrId id);
  std::string load_expr(const loop::Body& b, const Instr& in);

  const loop::LoopProgram& p_;
  sym::Context& ctx_;
  const sched::KernelPlan& k_;
  const CompileOptions& options_;
  std::ostringstream& os_;
  std::set<BufferId> locals_;
  bool masked_loads_ = false;  // some node of the kernel loads under a mask (open_loop)
  std::vector<const ComputeNode*> nodes_;
  std::vector<bool> hoisted_;  // instructions of the current node emitted before its loops
  // Per instruction of the member being emitted inside a pointwise kernel's simd loop: whether
  // it is the same in every lane (row_invariant). Masked loads under such masks, and selects on
  // them, go through coil::pick so that g++ vectorizes the loop (load_expr, instr_expr).
  std::vector<bool> simd_invariant_;
  // Masks whose value is known where the body is being emitted (an unswitched loop).
  std::map<InstrId, bool> forced_masks_;
  // flat index -> (name of its hoisted base, inner part): the current node's loads and store
  std::unordered_map<Expr, std::pair<std::string, Expr>> index_bases_;
  int next_base_ = 0;  // base0, base1, ... within the kernel
  // flat index of a strided load in a simd loop -> (name of its step, the loop's variable)
  std::unordered_map<Expr, std::pair<std::string, Expr>> load_strides_;
  int next_stride_ = 0;  // stride0, stride1, ... within the kernel
  // (buffer, flat index) of a transposed load -> its element of the local tile
  // (copy_transposed_tiles)
  std::map<std::pair<BufferId, Expr>, std::string> tile_loads_;
  int next_tile_ = 0;
  std::set<BufferId> written_;  // buffers the kernel writes, and those aliasing them
  std::unordered_map<Expr, std::string> sym_names_;
  // The variables of the outer dims folded into the innermost loop (fold_chained_dims), every
  // member's, -> 0: flat_index substitutes them.
  std::unordered_map<Expr, Expr> folded_zero_;
  int indent_ = 0;
};

}  // namespace coil::backend::cpu::detail
