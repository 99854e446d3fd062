// The CUDA emitter's kernel writer (internal to src/backend/cuda): one KernelEmitter writes
// one KernelPlan's CUDA C++ (its entry points, emit_cuda.h's ABI) and describes it. Its
// members are defined by kind: kernel_emitter.cpp (text, parameters, bodies, loads and
// stores), emit_pointwise.cpp (pointwise kernels), emit_tiled.cpp (their tiled entry point for
// transposed access), emit_rows.cpp (row kernels), emit_row_cache.cpp (their shared-memory
// row cache), emit_columns.cpp (their vector column entry point _cv).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coil/backend/cuda/emit_cuda.h"

namespace coil::backend::cuda::detail {

using loop::BufferId;
using loop::ComputeNode;
using loop::Instr;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

// Row kernels store rows of at least this many bytes with evict-first stores (emit_row_loop).
constexpr int64_t kStreamingRowBytes = 32 * 1024;
// Row kernels keep at most this many bytes of re-read inputs in shared memory (static shared
// memory is 48 KiB a block; the group reductions take a little of it).
constexpr int64_t kRowCacheBytes = 40 * 1024;
// The warp-per-row vector entry point (_wv) keeps them in registers instead where they take at
// most this many bytes a lane (24 registers: a row of 512 floats and its byte mask), and so
// does the block-per-row one of a fixed block size (_br), with the fewest threads of
// kRegisterBlocks that bring a row under it, its registers capped so that kRegisterBlockWarps
// warps fit an SM. Measured on the H100 (docs/decisions.md): 512 threads and 48 warps (40
// registers) ran softmax over 8192 floats in 0.182 ms, 58 registers and 32 warps 0.183, 32
// registers 0.191, 1024 threads 0.195; LayerNorm over 4096 0.181 with 512 threads, 0.183-0.184
// with 256.
constexpr int64_t kRowRegisterBytes = 96;
constexpr int kRegisterBlocks[] = {512, 1024};
constexpr int kRegisterBlockWarps = 48;

// The C type of a buffer element (bool is stored as a byte).
inline std::string ctype(DType t) {
  return t == DType::Bool ? "uint8_t" : std::string(dtype_ctype(t));
}
inline bool is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

class KernelEmitter {
 public:
  KernelEmitter(const loop::LoopProgram& p, const sched::KernelPlan& k, const CompileOptions& o,
                std::ostringstream& os)
      : p_(p), ctx_(*p.ctx), k_(k), options_(o), os_(os) {
    locals_.insert(k.local_buffers.begin(), k.local_buffers.end());
    for (int st : k.steps) nodes_.push_back(&std::get<ComputeNode>(p.steps.at(st)));
  }
  CudaKernel emit();

 private:
  // ---------------------------------------------------------------- text helpers
  void line(std::string s);
  void open(const std::string& s);
  void close(const std::string& s = "}");
  std::string idx(Expr e);
  void set_node_names(const ComputeNode& n);
  const loop::Buffer& buf(BufferId b) const;
  Expr product(const std::vector<Expr>& v, size_t from = 0);
  Expr inner_numel(const ComputeNode& n);
  std::string ranges_text(const std::vector<Expr>& r);
  Expr flat_index(BufferId b, const std::vector<Expr>& index);
  // ---------------------------------------------------------------- parameters
  void collect_params();
  std::string param_list();
  std::string arg_list();
  bool fits_32bit();
  void header_comment();
  void decompose(const std::string& flat, const std::vector<std::string>& vars,
                 const std::vector<Expr>& ranges);
  void decompose_text(const std::string& flat, const std::vector<std::string>& vars,
                      const std::vector<std::string>& ranges);
  std::vector<bool> foldable_loop_vars(const std::vector<size_t>& members,
                                       const std::vector<Expr>& ranges);
  std::pair<std::vector<std::string>, std::vector<Expr>> fold_loop_vars(
      const std::vector<size_t>& members, const std::vector<std::string>& vars,
      const std::vector<Expr>& ranges);
  // ---------------------------------------------------------------- pointwise kernels
  std::vector<size_t> pointwise_order();
  std::optional<int64_t> stride_along(Expr flat, Expr var);
  // The stride along `var` between neighbours inside each aligned run of `block` values of
  // var ([block*q, block*q + block)); stride_along's where that is one constant.
  std::optional<int64_t> stride_within(Expr flat, Expr var, int64_t block);
  int vector_width(size_t inner);
  // The name of the element a load of `b` at `flat` reads, under the current node's names
  // (set_node_names): two members' loads with one key read the same element.
  std::string shared_load_key(BufferId b, Expr flat) { return buf(b).name + "@" + idx(flat); }
  int forwarded_store(size_t m, const Instr& load);
  int mask_chunk_width(const loop::Body& b, InstrId mask, Expr var, Expr extent);
  // Whether a load reads inside its buffer's sizes at every point of the kernel's ranges,
  // its mask aside: such a masked load may be read unmasked (the mask then only selects 0).
  bool always_in_bounds(const Instr& load);
  std::set<InstrId> mask_chain(const loop::Body& b, InstrId mask);
  void emit_mask(const loop::Body& b, InstrId mask);
  bool starts_aligned(const std::vector<Expr>& starts, int vec, Expr extra_var = nullptr);
  void emit_member_stores();
  void emit_pointwise();
  // ---------------------------------------------------------------- tiled pointwise (_t)
  bool transposed_load(const ComputeNode& n, const Instr& in, size_t inner);
  std::optional<size_t> tile_dim(size_t inner);
  void emit_pointwise_tiled(const std::vector<size_t>& order);
  // ---------------------------------------------------------------- row kernels
  std::pair<Expr, Expr> row_inner_var(const ComputeNode& n);
  int row_vector_width();
  int row_column_width();
  std::vector<Expr> row_inner_vars(const ComputeNode& n);
  void bind_member_names(size_t m, const std::vector<std::string>& vars);
  // A piece of a row loop's step: emitted once per element (per_element) or once per step
  // of V elements (between the per-element pieces).
  struct RowPart {
    bool per_element;
    std::function<void()> emit;
  };
  void emit_row_loop(const std::vector<size_t>& members, const std::vector<std::string>& vars,
                     const std::vector<Expr>& ranges, const std::vector<RowPart>& parts);
  void emit_rows();
  // ---------------------------------------------------------------- vector columns (_cv)
  bool column_vector_load(size_t m, const Instr& in);
  size_t column_run_end();
  void override_lead_loads(size_t run);
  int column_vector_width();
  void emit_column_vector(int width);
  void bind_canonical_names(size_t m);
  std::string row_element_key(size_t m, BufferId b, const std::vector<Expr>& index);
  std::string row_load_key(size_t m, const Instr& in);
  std::string row_store_key(size_t m);
  std::vector<Expr> row_loop_ranges(const ComputeNode& n);
  void plan_row_cache();
  std::vector<std::string> value_keys(size_t m, std::map<std::string, int>& intern);
  void plan_value_cache();
  struct ValueCache;
  const ValueCache* value_written(InstrId id) const;  // of member_, or nullptr
  const ValueCache* value_reused(InstrId id) const;   // of member_, or nullptr
  BufferId root(BufferId b);
  struct ReduceOps {
    std::string init, op;
  };
  ReduceOps reduce_ops(ReduceKind r, DType acc);
  void emit_row_reduction(const ComputeNode& n);
  size_t one_pass_reductions_end(size_t m);
  void emit_one_pass_reductions(size_t first, size_t end);
  void emit_reduction_loop(size_t first, size_t end, bool lead = false);
  size_t pointwise_reductions_end(size_t m);
  InstrId online_max_load(size_t m);
  void emit_online_max_sum(size_t m, InstrId max_load);
  size_t member_of(const ComputeNode& n);
  void finish_reduction(const ComputeNode& n, const std::string& v);
  // ---------------------------------------------------------------- stores and locals
  void keep_row_value(const ComputeNode& n, const std::string& v);
  std::string local_name(BufferId b);
  void declare_local(size_t m);
  void emit_store(const ComputeNode& n, const std::string& v);
  // ---------------------------------------------------------------- bodies
  std::string tmp(InstrId i);
  std::string emit_body(const ComputeNode& n);
  std::string instr_expr(const loop::Body& b, InstrId id);
  std::string load_expr(const Instr& in, InstrId id);
  void emit_rand_blocks(size_t m);
  const loop::LoopProgram& p_;
  sym::Context& ctx_;
  const sched::KernelPlan& k_;
  const CompileOptions& options_;
  std::ostringstream& os_;
  std::set<BufferId> locals_;
  std::set<BufferId> written_, read_;
  std::unordered_map<BufferId, std::string> row_values_;  // buffer -> printed element index
  std::vector<const ComputeNode*> nodes_;
  std::unordered_map<Expr, std::string> sym_names_;
  // Loop variables folded into the next one (fold_loop_vars): 0 in every index until the
  // loop that folded them ends and clears this.
  std::unordered_map<Expr, Expr> folded_;
  std::map<std::pair<size_t, InstrId>, std::string> vec_loads_;
  bool vec_mode_ = false;
  // In the vector entry point, (member, Rand) -> the names of the thread's first offset and of
  // its Philox block (emit_rand_blocks), which the member's elements draw from.
  std::map<std::pair<size_t, InstrId>, std::pair<std::string, std::string>> rand_blocks_;
  // Exp and float division as coil::fast:: approximations: every stored output is bf16/f16
  // (option cuda_fast_math; prelude.cuh says why).
  bool fast_math_ = false;
  bool tile_mode_ = false;  // vec_loads_ name shared-memory tile elements (emit_pointwise_tiled)
  size_t member_ = 0;
  bool row_vec_ = false;   // emitting a row kernel templated on its step width V
  std::string row_store_;  // in a vector row loop: where a row member's element goes
  // Loads that read a value this thread holds instead of memory: (member, load) -> the value's
  // name (the online max m_; a fused pointwise member's stored element).
  std::map<std::pair<size_t, InstrId>, std::string> load_overrides_;
  struct RowCacheSlot {
    std::string name, reg, ctype;  // the shared array (_bv) and the register array (_wv)
    int64_t elements = 0;
    int elem_size = 0;
    bool filled = false;  // emitted: the first member's loop stores it
  };
  std::map<std::string, RowCacheSlot> row_cache_;  // row_load_key -> shared/register array
  // The group size G whose instantiation keeps the row cache in registers (RR): 32 (_wv) or
  // CudaKernel::block_regs (_br); 0: the cache is in shared memory only (_bv).
  int row_regs_ = 0;
  std::string slot_read(const RowCacheSlot& slot) const;
  std::string slot_write(const RowCacheSlot& slot, const std::string& value) const;
  // A value member `writer` computes per element (instruction `value`) that the later member
  // `reader` computes again (instruction `reuse`): the writer gathers it in the register
  // vector `vec` and stores it over the row cache `slot` (an entry of row_cache_), whose
  // element the reader loads (`reader_load`) and uses for nothing else (plan_value_cache).
  struct ValueCache {
    size_t writer = 0, reader = 0;
    InstrId value = -1, reuse = -1, reader_load = -1;
    const RowCacheSlot* slot = nullptr;
    std::string vec;
  };
  std::vector<ValueCache> value_cache_;
  const std::vector<std::string>* value_names_ = nullptr;  // tmp()'s names while keying
  std::string idx_t_ = "int64_t";
  CudaKernel info_;
  int indent_ = 0;
};

}  // namespace coil::backend::cuda::detail
