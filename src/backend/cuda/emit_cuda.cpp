// CUDA emitter: one __global__ function pair per KernelPlan (see emit_cuda.h for the kernel
// kinds and the ABI).
#include "coil/backend/cuda/emit_cuda.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "coil/backend/common/cpp_expr.h"
#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::cuda {
namespace {

using loop::BufferId;
using loop::ComputeNode;
using loop::Instr;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

constexpr const char* kMarker = "// ---- coil kernels ----\n";
// Row kernels store rows of at least this many bytes with evict-first stores (emit_row_loop).
constexpr int64_t kStreamingRowBytes = 32 * 1024;
// Row kernels keep at most this many bytes of re-read inputs in shared memory (static shared
// memory is 48 KiB a block; the group reductions take a little of it).
constexpr int64_t kRowCacheBytes = 40 * 1024;

std::string ctype(DType t) { return t == DType::Bool ? "uint8_t" : std::string(dtype_ctype(t)); }
bool is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

class KernelEmitter {
 public:
  KernelEmitter(const loop::LoopProgram& p, const sched::KernelPlan& k, const CompileOptions& o,
                std::ostringstream& os)
      : p_(p), ctx_(*p.ctx), k_(k), options_(o), os_(os) {
    locals_.insert(k.local_buffers.begin(), k.local_buffers.end());
    for (int st : k.steps) nodes_.push_back(&std::get<ComputeNode>(p.steps.at(st)));
  }

  CudaKernel emit() {
    info_.name = k_.name;
    collect_params();
    const size_t k = k_.outer_ranges.size();
    bool pointwise = std::all_of(nodes_.begin(), nodes_.end(), [&](auto* n) {
      return !n->is_reduction() && n->ranges.size() == k;
    });
    idx_t_ = fits_32bit() ? "int" : "int64_t";
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

 private:
  // ---------------------------------------------------------------- text helpers
  void line(std::string s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    if (!s.empty()) os_ << std::string(2 * indent_, ' ');
    os_ << s << "\n";
  }
  void open(const std::string& s) {
    line(s);
    ++indent_;
  }
  void close(const std::string& s = "}") {
    --indent_;
    line(s);
  }
  std::string idx(Expr e) {
    return cpp_index_expr(ctx_, e, [this](Expr s) -> std::string {
      auto it = sym_names_.find(s);
      return it != sym_names_.end() ? it->second : cpp_identifier(s->name);
    });
  }
  void set_node_names(const ComputeNode& n) {
    sym_names_.clear();
    for (size_t j = 0; j < k_.outer_ranges.size() && j < n.index_vars.size(); ++j)
      sym_names_[n.index_vars[j]] = "x" + std::to_string(j);
  }
  const loop::Buffer& buf(BufferId b) const { return p_.buffer(b); }
  Expr product(const std::vector<Expr>& v, size_t from = 0) {
    Expr r = ctx_.one();
    for (size_t i = from; i < v.size(); ++i) r = ctx_.mul(r, v[i]);
    return r;
  }
  Expr inner_numel(const ComputeNode& n) {
    return ctx_.mul(product(n.ranges, k_.outer_ranges.size()), product(n.reduction_ranges));
  }
  std::string ranges_text(const std::vector<Expr>& r) {
    std::string s = "[";
    for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + ctx_.str(r[i]);
    return s + "]";
  }
  Expr flat_index(BufferId b, const std::vector<Expr>& index) {
    const loop::Buffer& B = buf(b);
    COIL_CHECK(index.size() == B.strides.size())
        << B.name << ": index rank " << index.size() << " vs " << B.strides.size();
    Expr e = B.offset ? B.offset : ctx_.zero();
    for (size_t d = 0; d < index.size(); ++d) e = ctx_.add(e, ctx_.mul(index[d], B.strides[d]));
    return e;
  }

  // ---------------------------------------------------------------- parameters
  void collect_params() {
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

  std::string param_list() {
    std::string s;
    auto add = [&](const std::string& x) { s += (s.empty() ? "" : ", ") + x; };
    for (BufferId b : info_.buffers) {
      const loop::Buffer& B = buf(b);
      bool w = written_.count(b) > 0;
      // A buffer this kernel both writes and reads (through other threads of the group) gets
      // no __restrict__: the compiler must not move its loads across the group barrier.
      bool rw = w && read_.count(b) > 0;
      add(std::string(w ? "" : "const ") + ctype(B.dtype) + (rw ? "* " : "* __restrict__ ") +
          B.name);
    }
    for (const auto& ss : p_.size_symbols) add("int64_t " + cpp_identifier(ss.symbol->name));
    if (info_.random) {
      add("int64_t rng_seed");
      add("int64_t rng_offset");
    }
    return s;
  }
  std::string arg_list() {
    std::string s;
    auto add = [&](const std::string& x) { s += (s.empty() ? "" : ", ") + x; };
    for (BufferId b : info_.buffers) add(buf(b).name);
    for (const auto& ss : p_.size_symbols) add(cpp_identifier(ss.symbol->name));
    if (info_.random) {
      add("rng_seed");
      add("rng_offset");
    }
    return s;
  }

  // 32-bit index math is safe when every loop extent and every element a buffer access can
  // reach is a constant below 2^31.
  bool fits_32bit() {
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

  void header_comment() {
    line("// " + k_.name + ": outer " + ranges_text(k_.outer_ranges) + ", " +
         std::to_string(nodes_.size()) + " node(s)");
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      std::string s = "//   step" + std::to_string(k_.steps[m]) + " " + buf(n.out).name + " = ";
      if (n.is_reduction()) {
        s += "reduce " + std::string(loop::reduce_kind_name(n.reduce)) + " " +
             ranges_text(n.ranges) + " over " + ranges_text(n.reduction_ranges);
      } else {
        s += "pointwise " + ranges_text(n.ranges);
      }
      if (locals_.count(n.out)) s += " (local)";
      line(s);
    }
  }

  // Decomposes the flat position `flat` into the variables `vars` over `ranges` (last fastest,
  // in the order given).
  void decompose(const std::string& flat, const std::vector<std::string>& vars,
                 const std::vector<Expr>& ranges) {
    std::vector<std::string> texts;
    for (Expr r : ranges) texts.push_back("(" + idx_t_ + ")(" + idx(r) + ")");
    decompose_text(flat, vars, texts);
  }
  void decompose_text(const std::string& flat, const std::vector<std::string>& vars,
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

  // ---------------------------------------------------------------- pointwise kernels
  // Loop order: the dims in order, except that the dim along which the first stored buffer is
  // contiguous goes innermost (adjacent threads then store adjacent elements).
  std::vector<size_t> pointwise_order() {
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

  std::optional<int64_t> stride_along(Expr flat, Expr var) {
    Expr d = ctx_.sub(ctx_.substitute(flat, {{var, ctx_.add(var, ctx_.one())}}), flat);
    return ctx_.as_const(d);
  }

  // Elements per thread of the vector entry point, or 0. Every access must step by 0 or 1
  // along the innermost dim, the stride-1 ones starting at a multiple of the vector width
  // (other strides and offsets constant multiples of it), and the innermost extent a multiple.
  int vector_width(size_t inner) {
    int max_size = 0;
    std::vector<std::pair<BufferId, Expr>> accesses;
    for (const ComputeNode* n : nodes_) {
      Expr var = n->index_vars.at(inner);
      for (const Instr& in : n->body.instrs) {
        if (in.kind == InstrKind::Indirect || in.kind == InstrKind::Rand ||
            in.kind == InstrKind::Randn)
          return 0;
        if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
        if (in.mask >= 0) return 0;
        Expr flat = flat_index(in.buffer, in.index);
        auto s = stride_along(flat, var);
        if (!s || (*s != 0 && *s != 1)) return 0;
        if (*s == 1) accesses.push_back({in.buffer, ctx_.substitute(flat, {{var, ctx_.zero()}})});
      }
      if (!locals_.count(n->out)) {
        Expr flat = flat_index(n->out, n->store_index);
        if (stride_along(flat, var) != std::optional<int64_t>(1)) return 0;
        accesses.push_back({n->out, ctx_.substitute(flat, {{var, ctx_.zero()}})});
      }
    }
    if (accesses.empty()) return 0;
    for (auto& [b, start] : accesses) max_size = std::max(max_size, dtype_size(buf(b).dtype));
    const int vec = std::min(8, 16 / max_size);
    if (vec < 2) return 0;
    auto extent = ctx_.as_const(k_.outer_ranges[inner]);
    if (!extent || *extent % vec != 0) return 0;
    for (auto& [b, start] : accesses) {
      // start must be a multiple of vec for every value of the other vars: check the constant
      // term and each var's coefficient.
      const ComputeNode* n = nodes_[0];
      (void)n;
      auto c0 = ctx_.as_const(ctx_.substitute(start, zero_all_vars()));
      if (!c0 || *c0 % vec != 0) return 0;
      for (const ComputeNode* m : nodes_) {
        for (Expr v : m->index_vars) {
          if (!ctx_.depends_on(start, v)) continue;
          auto s = stride_along(start, v);
          if (!s || *s % vec != 0) return 0;
        }
      }
    }
    return vec;
  }
  std::unordered_map<Expr, Expr> zero_all_vars() {
    std::unordered_map<Expr, Expr> m;
    for (const ComputeNode* n : nodes_)
      for (Expr v : n->index_vars) m[v] = ctx_.zero();
    return m;
  }

  void emit_pointwise() {
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
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      set_node_names(n);
      open("{");
      std::string v = emit_body(n);
      emit_store(n, v);
      close();
    }
    close();
    close();
    line("");
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
    int nv = 0;
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      set_node_names(n);
      sym_names_[n.index_vars[inner]] = xi + "_0";
      for (size_t i = 0; i < n.body.instrs.size(); ++i) {
        const Instr& in = n.body.instrs[i];
        if (in.kind != InstrKind::Load || locals_.count(in.buffer)) continue;
        Expr flat = flat_index(in.buffer, in.index);
        if (stride_along(flat, n.index_vars[inner]) != std::optional<int64_t>(1)) continue;
        std::string name = "L" + std::to_string(nv++);
        const std::string E = ctype(buf(in.buffer).dtype);
        line("const coil::Vec<" + E + ", " + V + "> " + name + " = *(const coil::Vec<" + E + ", " +
             V + ">*)(" + buf(in.buffer).name + " + " + idx(flat) + ");");
        vec_loads_[{m, static_cast<InstrId>(i)}] = name;
      }
    }
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      if (locals_.count(n.out)) continue;
      const std::string E = ctype(buf(n.out).dtype);
      line("coil::Vec<" + E + ", " + V + "> S" + std::to_string(m) + ";");
    }
    line("#pragma unroll");
    open("for (int u_ = 0; u_ < " + V + "; ++u_) {");
    line("const " + T + " " + xi + " = " + xi + "_0 + u_;");
    for (size_t m = 0; m < nodes_.size(); ++m) declare_local(m);
    vec_mode_ = true;
    for (size_t m = 0; m < nodes_.size(); ++m) {
      const ComputeNode& n = *nodes_[m];
      set_node_names(n);
      member_ = m;
      open("{");
      std::string v = emit_body(n);
      if (locals_.count(n.out)) {
        emit_store(n, v);
      } else {
        line("S" + std::to_string(m) + ".v[u_] = " + store_value(buf(n.out).dtype, v) + ";");
      }
      close();
    }
    vec_mode_ = false;
    close();
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

  // ---------------------------------------------------------------- row kernels
  // The last inner variable and its range of a member that loops inside the row (a reduction,
  // or a pointwise member with inner dims); nullptr for a one-per-row member.
  std::pair<Expr, Expr> row_inner_var(const ComputeNode& n) {
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
  int row_vector_width() {
    if (info_.random) return 0;
    std::vector<Expr> starts;
    std::vector<Expr> extents;
    int max_size = 0;
    for (const ComputeNode* n : nodes_) {
      auto [var, range] = row_inner_var(*n);
      if (!var) continue;
      extents.push_back(range);
      for (const Instr& in : n->body.instrs) {
        if (in.kind == InstrKind::Indirect || in.kind == InstrKind::Rand ||
            in.kind == InstrKind::Randn)
          return 0;
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
    const int vec = std::min(8, 16 / max_size);
    if (vec < 2) return 0;
    for (Expr e : extents) {
      auto c = ctx_.as_const(e);
      if (!c || *c % vec != 0) return 0;
    }
    std::unordered_map<Expr, Expr> zero;
    std::vector<Expr> all_vars;
    for (const ComputeNode* n : nodes_) {
      for (Expr v : n->index_vars) all_vars.push_back(v);
      for (Expr v : n->reduction_vars) all_vars.push_back(v);
    }
    for (Expr v : all_vars) zero[v] = ctx_.zero();
    for (Expr start : starts) {
      auto c0 = ctx_.as_const(ctx_.substitute(start, zero));
      if (!c0 || *c0 % vec != 0) return 0;
      for (Expr v : all_vars) {
        if (!ctx_.depends_on(start, v)) continue;
        auto s = stride_along(start, v);
        if (!s || *s % vec != 0) return 0;
      }
    }
    return vec;
  }

  // The inner variables of a member that loops inside the row, in loop order.
  std::vector<Expr> row_inner_vars(const ComputeNode& n) {
    if (n.is_reduction()) return n.reduction_vars;
    return std::vector<Expr>(n.index_vars.begin() + k_.outer_ranges.size(), n.index_vars.end());
  }
  // Names member m's variables: outer ones x<j>, inner ones `vars` (the loop's names, which
  // may be another member's when two members share one loop).
  void bind_member_names(size_t m, const std::vector<std::string>& vars) {
    const ComputeNode& n = *nodes_[m];
    set_node_names(n);
    std::vector<Expr> inner = row_inner_vars(n);
    for (size_t j = 0; j < inner.size() && j < vars.size(); ++j) sym_names_[inner[j]] = vars[j];
    member_ = m;
  }

  // A piece of a row loop's step: emitted once per element (per_element) or once per step
  // of V elements (between the per-element pieces).
  struct RowPart {
    bool per_element;
    std::function<void()> emit;
  };

  // The loop of members over their row (one member, or several over the same inner ranges),
  // `e_` counting steps of V elements along the last inner variable (V = 1: the scalar entry
  // points). Each per-element part emits one element's work (in its own loop over the V
  // elements of the step), binding each member's names with bind_member_names(m, vars); in
  // the vector entry points the stride-1 loads of a step are one coil::Vec load each, and a
  // storing member's elements go to row_store_.
  void emit_row_loop(const std::vector<size_t>& members, const std::vector<std::string>& vars,
                     const std::vector<Expr>& ranges, const std::vector<RowPart>& parts) {
    const std::string T = idx_t_;
    if (!row_vec_) {
      open("for (" + T + " e_ = lane_; e_ < (" + T + ")(" + idx(product(ranges)) +
           "); e_ += g_) {");
      decompose("e_", vars, ranges);
      for (const RowPart& part : parts) part.emit();
      close();
      return;
    }
    // The last extent is a constant multiple of the kernel's vector width (row_vector_width).
    std::vector<std::string> qranges;
    for (Expr r : ranges) qranges.push_back("(" + T + ")(" + idx(r) + ")");
    qranges.back() = "(" + T + ")((" + idx(ranges.back()) + ") / V)";
    std::vector<std::string> qvars = vars;
    const std::string last = vars.back();
    qvars.back() = last + "_q";
    open("for (" + T + " e_ = lane_; e_ < (" + T + ")((" + idx(product(ranges)) +
         ") / V); e_ += g_) {");
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
        Expr flat = flat_index(in.buffer, in.index);
        if (stride_along(flat, var) != std::optional<int64_t>(1)) continue;
        std::string name = "L" + std::to_string(nv++);
        const std::string E = ctype(buf(in.buffer).dtype);
        const std::string global =
            "*(const coil::Vec<" + E + ", V>*)(" + buf(in.buffer).name + " + " + idx(flat) + ")";
        auto slot = row_cache_.end();
        if (!row_cache_.empty()) {
          slot = row_cache_.find(row_load_key(m, in, row_loop_ranges(n)));
          bind_member_names(m, first_vars);
        }
        if (slot == row_cache_.end()) {
          line("const coil::Vec<" + E + ", V> " + name + " = " + global + ";");
        } else if (!slot->second.filled) {
          line("const coil::Vec<" + E + ", V> " + name + " = " + global + ";");
          line("if constexpr (RC) " + slot->second.name + "[e_] = " + name + ";");
          slot->second.filled = true;
        } else {
          line("const coil::Vec<" + E + ", V> " + name + " = RC ? " + slot->second.name +
               "[e_] : " + global + ";");
        }
        vec_loads_[{m, static_cast<InstrId>(i)}] = name;
      }
      if (!n.is_reduction() && !locals_.count(n.out)) storing = m;
    }
    const bool stores = storing < nodes_.size();
    const std::string SE = stores ? ctype(buf(nodes_[storing]->out).dtype) : "";
    if (stores) line("coil::Vec<" + SE + ", V> S_;");
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
    close();
  }

  void emit_rows() {
    const size_t k = k_.outer_ranges.size();
    const std::string T = idx_t_;
    const int vec = row_vector_width();
    row_vec_ = vec > 0;
    V_n_ = vec;
    info_.vec = vec;
    line(row_vec_ ? "template <int G, int V>" : "template <int G>");
    line("__device__ __forceinline__ void " + k_.name + "_impl(" + param_list() + ") {");
    ++indent_;
    plan_row_cache();
    if (!row_cache_.empty()) {
      // The block-per-row vector entry point keeps the inputs that several members read in
      // shared memory: each thread reads back only the steps it loaded itself, so no barrier.
      line("constexpr bool RC = G == 0 && V > 1;");
      for (const auto& [key, slot] : row_cache_)
        line("__shared__ coil::Vec<" + slot.ctype + ", V> " + slot.name + "[RC ? " +
             std::to_string(slot.elements) + " / V : 1];");
    }
    line("const int g_ = G ? G : blockDim.x;");
    line("const int lane_ = G ? (threadIdx.x & (G - 1)) : threadIdx.x;");
    line("const int64_t rpb_ = blockDim.x / g_;");
    line("const int64_t rows_ = " + idx(product(k_.outer_ranges)) + ";");
    open(
        "for (int64_t row_ = int64_t(blockIdx.x) * rpb_ + threadIdx.x / g_; row_ < rows_; row_ "
        "+= int64_t(gridDim.x) * rpb_) {");
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
                            line(row_store_ + " = " + store_value(buf(n.out).dtype, v) + ";");
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
    auto entry = [&](const std::string& suffix, const std::string& args) {
      line("extern \"C\" __global__ void __launch_bounds__(1024) " + k_.name + suffix + "(" +
           param_list() + ") {");
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
    line("");
    row_vec_ = false;
    row_cache_.clear();
  }

  // The key of a row loop's stride-1 load: its buffer and element index with the member's
  // inner variables named canonically, and the inner ranges (equal keys: the same elements,
  // visited by the same thread at the same step).
  std::string row_load_key(size_t m, const Instr& in, const std::vector<Expr>& ranges) {
    std::vector<std::string> canon;
    for (size_t j = 0; j < ranges.size(); ++j) canon.push_back("c" + std::to_string(j) + "_");
    bind_member_names(m, canon);
    return buf(in.buffer).name + "[" + idx(flat_index(in.buffer, in.index)) + "] over " +
           ranges_text(ranges);
  }
  std::vector<Expr> row_loop_ranges(const ComputeNode& n) {
    if (n.is_reduction()) return n.reduction_ranges;
    return std::vector<Expr>(n.ranges.begin() + k_.outer_ranges.size(), n.ranges.end());
  }

  // Which stride-1 row loads the _bv entry point caches in shared memory: those that more
  // than one member reads, from buffers no member of the kernel writes, with a constant row,
  // at most kRowCacheBytes in all.
  void plan_row_cache() {
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
        if (stride_along(flat_index(in.buffer, in.index), var) != std::optional<int64_t>(1))
          continue;
        bool written = false;
        for (BufferId w : written_) written = written || root(w) == root(in.buffer);
        if (written) continue;
        std::string key = row_load_key(m, in, ranges);
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
      slot.ctype = ctype(buf(b).dtype);
      slot.elements = elems;
      row_cache_[key] = slot;
    }
  }

  BufferId root(BufferId b) {
    for (int guard = 0; buf(b).kind == loop::BufferKind::View && guard < 1000; ++guard)
      b = buf(b).view_of;
    return b;
  }

  struct ReduceOps {
    std::string init, op;
  };
  ReduceOps reduce_ops(ReduceKind r, DType acc) {
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

  void emit_row_reduction(const ComputeNode& n) {
    const DType out_t = buf(n.out).dtype;
    const Instr& res = n.body.instrs.at(n.body.result);
    const bool arg = n.reduce == ReduceKind::ArgMax || n.reduce == ReduceKind::ArgMin;
    std::vector<std::string> rvars;
    for (Expr v : n.reduction_vars) rvars.push_back(cpp_identifier(v->name));
    if (arg) {
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
      line(std::string("coil::group_argreduce<G, ") + (mx ? "true" : "false") +
           ">(best, best_index);");
      finish_reduction(n, "best_index");
      return;
    }
    const DType acc_t = out_t;
    const std::string A = acc_t == DType::Bool ? "bool" : compute_ctype(acc_t);
    const ReduceOps ops = reduce_ops(n.reduce, acc_t);
    line(A + " acc = " + ops.init + ";");
    const size_t m = member_of(n);
    emit_row_loop({m}, rvars, n.reduction_ranges,
                  {{true, [&] {
                      bind_member_names(m, rvars);
                      std::string v = emit_body(n);
                      std::string val =
                          acc_t == DType::Bool ? "bool(" + v + ")" : A + "(" + v + ")";
                      line("acc = coil::" + ops.op + "::apply(acc, " + val + ");");
                    }}});
    line("acc = coil::group_reduce<G, coil::" + ops.op + ">(acc);");
    finish_reduction(n, "acc");
  }

  // Softmax's max and its sum of exp(h - max) in one pass over the row (the "online"
  // softmax): member m reduces max in f32; member m + 1 sums, in f32 over the same inner
  // ranges, exp(h - that max), reading the max only there and once per row. Returns that
  // load in m + 1's body, or -1 where the pattern does not hold.
  InstrId online_max_load(size_t m) {
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
  void emit_online_max_sum(size_t m, InstrId max_load) {
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
                   load_override_ = {m + 1, max_load};
                   line("s_ += float(" + emit_body(b) + ");");
                   load_override_ = {nodes_.size(), -1};
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

  size_t member_of(const ComputeNode& n) {
    for (size_t m = 0; m < nodes_.size(); ++m)
      if (nodes_[m] == &n) return m;
    COIL_INTERNAL_ERROR() << "not a member of " << k_.name;
  }

  void finish_reduction(const ComputeNode& n, const std::string& v) {
    if (locals_.count(n.out)) {
      emit_store(n, v);
      return;
    }
    keep_row_value(n, v);
    open("if (lane_ == 0) {");
    emit_store(n, v);
    close();
  }

  // ---------------------------------------------------------------- stores and locals
  // The register copy of a stored one-per-row value (declared in emit_rows), rounded as the
  // stored value is; loads of exactly that element by later members read the register.
  void keep_row_value(const ComputeNode& n, const std::string& v) {
    DType t = buf(n.out).dtype;
    std::string val = v;
    if (t == DType::BFloat16) val = "coil::to_f32(coil::to_bf16(" + v + "))";
    if (t == DType::Float16) val = "coil::to_f32(coil::to_half(" + v + "))";
    if (t == DType::Bool) val = "bool(" + v + ")";
    line(local_name(n.out) + " = " + val + ";");
    row_values_[n.out] = idx(flat_index(n.out, n.store_index));
  }

  std::string local_name(BufferId b) { return buf(b).name + "_v"; }
  void declare_local(size_t m) {
    const ComputeNode& n = *nodes_[m];
    if (locals_.count(n.out)) line(compute_ctype(buf(n.out).dtype) + " " + local_name(n.out) + ";");
  }
  std::string store_value(DType t, const std::string& v) {
    if (t == DType::BFloat16) return "coil::to_bf16(" + v + ")";
    if (t == DType::Float16) return "coil::to_half(" + v + ")";
    return ctype(t) + "(" + v + ")";
  }
  void emit_store(const ComputeNode& n, const std::string& v) {
    DType t = buf(n.out).dtype;
    if (locals_.count(n.out)) {
      std::string val = v;
      if (t == DType::BFloat16) val = "coil::to_f32(coil::to_bf16(" + v + "))";
      if (t == DType::Float16) val = "coil::to_f32(coil::to_half(" + v + "))";
      line(local_name(n.out) + " = " + val + ";");
      return;
    }
    line(buf(n.out).name + "[" + idx(flat_index(n.out, n.store_index)) +
         "] = " + store_value(t, v) + ";");
  }

  // ---------------------------------------------------------------- bodies
  std::string tmp(InstrId i) { return "v" + std::to_string(i); }

  std::string emit_body(const ComputeNode& n) {
    const loop::Body& b = n.body;
    COIL_CHECK(b.result >= 0 && b.result < static_cast<int>(b.instrs.size()))
        << buf(n.out).name << ": body without a result";
    for (size_t i = 0; i < b.instrs.size(); ++i) {
      const Instr& in = b.instrs[i];
      line("const " + compute_ctype(in.dtype) + " " + tmp(static_cast<InstrId>(i)) + " = " +
           instr_expr(b, static_cast<InstrId>(i)) + ";");
      if (in.kind == InstrKind::Indirect)
        line("const int64_t " + cpp_identifier(in.expr->name) + " = " + tmp(i) + ";");
    }
    return tmp(b.result);
  }

  // The shared scalar expressions (backend/common/scalar_expr.h) with this emitter's names,
  // index printing and loads.
  std::string instr_expr(const loop::Body& b, InstrId id) {
    ScalarExprHooks h;
    h.value = [&](InstrId i) { return tmp(i); };
    h.index = [&](Expr e) { return idx(e); };
    h.load = [&](const Instr& in, InstrId i) { return load_expr(in, i); };
    return scalar_instr_expr(b, id, h);
  }

  std::string load_expr(const Instr& in, InstrId id) {
    const std::string T = compute_ctype(in.dtype);
    std::string v;
    auto rv = row_values_.find(in.buffer);
    if (load_override_.first == member_ && load_override_.second == id) {
      v = "m_";  // the running max of an online max and sum (emit_online_max_sum)
    } else if (locals_.count(in.buffer)) {
      v = local_name(in.buffer);
    } else if (rv != row_values_.end() && idx(flat_index(in.buffer, in.index)) == rv->second) {
      v = local_name(in.buffer);
    } else if (in.buffer == p_.rng_state) {
      auto pos = in.index.size() == 1 ? ctx_.as_const(in.index[0]) : std::nullopt;
      COIL_CHECK(pos && (*pos == 0 || *pos == 1)) << "rng state read at a non-constant index";
      v = *pos == 0 ? "rng_seed" : "rng_offset";
    } else {
      const loop::Buffer& B = buf(in.buffer);
      auto it = vec_mode_ ? vec_loads_.find({member_, id}) : vec_loads_.end();
      if (it != vec_loads_.end()) {
        v = it->second + ".v[u_]";
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
  std::map<std::pair<size_t, InstrId>, std::string> vec_loads_;
  bool vec_mode_ = false;
  size_t member_ = 0;
  bool row_vec_ = false;   // emitting a row kernel templated on its step width V
  int V_n_ = 0;            // that kernel's vector width
  std::string row_store_;  // in a vector row loop: where a row member's element goes
  std::pair<size_t, InstrId> load_override_{static_cast<size_t>(-1), -1};
  struct RowCacheSlot {
    std::string name, ctype;
    int64_t elements = 0;
    bool filled = false;  // emitted: the first member's loop stores it
  };
  std::map<std::string, RowCacheSlot> row_cache_;  // row_load_key -> shared array
  std::string idx_t_ = "int64_t";
  CudaKernel info_;
  int indent_ = 0;
};

// The identifiers a kernel's text binds itself (so renaming them consistently does not change
// what it computes): its name and entry points, the names of its buffers (pointer parameters,
// locals and their register copies) and the loop and index variables of its members.
// Size symbols, runtime helpers and functions are not among them.
std::unordered_set<std::string> renamable_names(const loop::LoopProgram& p,
                                                const sched::KernelPlan& k,
                                                const CudaKernel& info) {
  std::unordered_set<std::string> names;
  for (const char* suffix : {"", "_impl", "_s", "_v", "_w", "_b", "_wv", "_bv"})
    names.insert(k.name + suffix);
  auto add_buffer = [&](BufferId b) {
    names.insert(p.buffer(b).name);
    names.insert(p.buffer(b).name + "_v");
  };
  // The kernel's text names only its parameters, its locals and its members' outputs.
  for (BufferId b : info.buffers) add_buffer(b);
  for (BufferId b : k.local_buffers) add_buffer(b);
  for (int st : k.steps) {
    const ComputeNode& n = std::get<ComputeNode>(p.steps.at(st));
    add_buffer(n.out);
    // A loop variable and the names the vector loops derive from it (<var>_q, <var>_0).
    auto add_var = [&](Expr v) {
      const std::string id = cpp_identifier(v->name);
      for (const char* suffix : {"", "_q", "_0"}) names.insert(id + suffix);
    };
    for (Expr v : n.index_vars) add_var(v);
    for (Expr v : n.reduction_vars) add_var(v);
    for (const Instr& in : n.body.instrs)
      if (in.kind == InstrKind::Indirect) names.insert(cpp_identifier(in.expr->name));
  }
  for (const auto& ss : p.size_symbols) names.erase(cpp_identifier(ss.symbol->name));
  return names;
}

// `code` without its comment lines and with every renamable identifier replaced by its order
// of first appearance: two kernels with equal canonical texts compute the same thing.
std::string canonical_kernel_text(const std::string& code,
                                  const std::unordered_set<std::string>& renamable) {
  std::string out;
  out.reserve(code.size());
  std::unordered_map<std::string, int> order;
  auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::istringstream lines(code);
  for (std::string l; std::getline(lines, l);) {
    size_t first = l.find_first_not_of(' ');
    if (first != std::string::npos && l.compare(first, 2, "//") == 0) continue;
    for (size_t i = 0; i < l.size();) {
      // Identifiers only; a digit run is copied whole so that "1e5f" stays one literal.
      if (ident_start(l[i]) || std::isdigit(static_cast<unsigned char>(l[i]))) {
        size_t j = i;
        while (j < l.size() && ident_char(l[j])) ++j;
        std::string tok = l.substr(i, j - i);
        if (ident_start(tok[0]) && renamable.count(tok)) {
          auto [it, fresh] = order.emplace(tok, static_cast<int>(order.size()));
          (void)fresh;
          out += "@" + std::to_string(it->second);
        } else {
          out += tok;
        }
        i = j;
      } else {
        out += l[i++];
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace

CudaSource emit_cuda(const loop::LoopProgram& program, const sched::Schedule& schedule,
                     const CompileOptions& options) {
  COIL_CHECK(program.ctx != nullptr) << "LoopProgram without a sym::Context";
  std::ostringstream os;
  os << cuda_prelude() << kMarker;
  os << "// Generated by coil (backend/cuda/emit_cuda): " << schedule.kernels.size()
     << " kernel(s).\n";
  CudaSource src;
  // Repeated layers give kernels that differ only in the names of their buffers and loop
  // variables; NVRTC time grows with the source, so each distinct kernel is compiled once and
  // its copies launch the first one's entry points (the same ABI: pointers by position).
  std::unordered_map<std::string, int> first_by_code;  // canonical text -> kernel index
  for (const sched::KernelPlan& k : schedule.kernels) {
    std::ostringstream one;
    CudaKernel info = KernelEmitter(program, k, options, one).emit();
    std::string code = one.str();
    const int index = static_cast<int>(src.kernels.size());
    auto [it, fresh] = first_by_code.emplace(
        canonical_kernel_text(code, renamable_names(program, k, info)), index);
    if (fresh) {
      os << code;
      src.distinct_of.push_back(static_cast<int>(src.distinct.size()));
      src.distinct.push_back(std::move(code));
    } else {
      const CudaKernel& first = src.kernels[it->second];
      info.entry = first.name;
      src.distinct_of.push_back(src.distinct_of[it->second]);
      os << "// " << k.name << ": the same code as " << first.name << "\n\n";
    }
    src.kernels.push_back(std::move(info));
  }
  src.code = os.str();
  return src;
}

std::string cuda_unit(const std::vector<std::string>& kernel_code) {
  std::string s = cuda_prelude() + kMarker;
  for (const std::string& k : kernel_code) s += k;
  return s;
}

std::string strip_prelude(const std::string& code) {
  size_t at = code.find(kMarker);
  return at == std::string::npos ? code : code.substr(at + std::string(kMarker).size());
}

}  // namespace coil::backend::cuda
