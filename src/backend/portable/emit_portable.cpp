// The portable emitter: each kernel as the scheduler describes it, in plain scalar loops.
//
// Shape of a kernel (the same model as the CPU emitter, none of its speed work):
//   the outer loop nest over the kernel's outer ranges (x0, x1, ...), then each member node in
//   program order, in a block of its own:
//     pointwise:  its remaining dims as inner loops; the body; the store
//     reduction:  an accumulator, a loop nest over the reduction range, the store
//   A member whose buffer is local to the kernel (KernelPlan::local_buffers) stores into a
//   scalar declared at the top of the outer loop body; later members read that scalar.
// Every instruction of a body is evaluated in the innermost loop: nothing is hoisted, tiled
// or vectorized. Float sums accumulate in double (the CPU emitter's blocked sums exist for the
// same reason: a float running sum over many elements drifts from eager's result).
#include "coil/backend/portable/emit_portable.h"

#include <set>
#include <sstream>
#include <unordered_map>

#include "coil/backend/common/cpp_expr.h"
#include "coil/backend/common/scalar_expr.h"
#include "coil/support/error.h"

#pragma GCC diagnostic error "-Wswitch"

namespace coil::backend::portable {
namespace {

using loop::BufferId;
using loop::ComputeNode;
using loop::Instr;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

class KernelWriter {
 public:
  KernelWriter(const loop::LoopProgram& p, const sched::KernelPlan& k, std::ostringstream& os)
      : p_(p), ctx_(*p.ctx), k_(k), os_(os) {
    locals_.insert(k.local_buffers.begin(), k.local_buffers.end());
    for (int st : k.steps) nodes_.push_back(&std::get<ComputeNode>(p.steps.at(st)));
  }

  void write() {
    line("// " + k_.name + ": " + std::to_string(nodes_.size()) + " node(s)");
    line("COIL_KERNEL void COIL_ENTRY(" + k_.name + ")(void* const* bufs, const int64_t* sizes) {");
    ++indent_;
    prologue();
    for (size_t j = 0; j < k_.outer_ranges.size(); ++j)
      open_loop("x" + std::to_string(j), k_.outer_ranges[j]);
    for (const ComputeNode* n : nodes_)
      if (locals_.count(n->out))
        line(compute_ctype(buf(n->out).dtype) + " " + local_name(n->out) + ";");
    for (const ComputeNode* n : nodes_) member(*n);
    for (size_t j = 0; j < k_.outer_ranges.size(); ++j) close();
    --indent_;
    line("}");
    line("");
  }

 private:
  const loop::Buffer& buf(BufferId b) const { return p_.buffer(b); }
  std::string local_name(BufferId b) const { return buf(b).name + "_v"; }
  std::string tmp(InstrId i) const { return "v" + std::to_string(i); }

  void line(const std::string& s) {
    if (!s.empty()) os_ << std::string(2 * indent_, ' ');
    os_ << s << "\n";
  }
  void open_loop(const std::string& var, Expr extent) {
    line("for (int64_t " + var + " = 0; " + var + " < " + idx(extent) + "; ++" + var + ") {");
    ++indent_;
  }
  void close() {
    --indent_;
    line("}");
  }

  // Index math as C++: a node's first k index vars are the kernel's outer loop variables.
  std::string idx(Expr e) {
    return cpp_index_expr(ctx_, e, [this](Expr s) -> std::string {
      auto it = names_.find(s);
      return it != names_.end() ? it->second : cpp_identifier(s->name);
    });
  }

  // Size symbols, one pointer per buffer the kernel touches (const where only read; bool
  // buffers as bytes, as the CPU backend stores them), the rng offset where a body draws.
  void prologue() {
    for (size_t i = 0; i < p_.size_symbols.size(); ++i)
      line("const int64_t " + cpp_identifier(p_.size_symbols[i].symbol->name) + " = sizes[" +
           std::to_string(i) + "];");
    std::set<BufferId> read, written;
    bool rng = false;
    for (const ComputeNode* n : nodes_) {
      if (!locals_.count(n->out)) written.insert(n->out);
      for (const Instr& in : n->body.instrs) {
        if (in.kind == InstrKind::Load && !locals_.count(in.buffer)) read.insert(in.buffer);
        rng = rng || in.kind == InstrKind::Rand || in.kind == InstrKind::Randn;
      }
    }
    std::set<BufferId> all = read;
    all.insert(written.begin(), written.end());
    for (BufferId b : all) {
      const loop::Buffer& B = buf(b);
      const std::string T = B.dtype == DType::Bool ? "uint8_t" : std::string(dtype_ctype(B.dtype));
      const std::string q = written.count(b) ? "" : "const ";
      line(q + T + "* " + B.name + " = (" + q + T + "*)bufs[" + std::to_string(b) + "];");
    }
    if (rng) {
      COIL_CHECK(p_.rng_state >= 0) << "Rand without an rng_state buffer";
      line("const int64_t rng_offset = ((const int64_t*)bufs[" + std::to_string(p_.rng_state) +
           "])[1];");
    }
  }

  Expr flat_index(BufferId b, const std::vector<Expr>& index) {
    const loop::Buffer& B = buf(b);
    COIL_CHECK(index.size() == B.strides.size())
        << B.name << ": index rank " << index.size() << " vs " << B.strides.size();
    Expr e = B.offset ? B.offset : ctx_.zero();
    for (size_t d = 0; d < index.size(); ++d) e = ctx_.add(e, ctx_.mul(index[d], B.strides[d]));
    return e;
  }

  void member(const ComputeNode& n) {
    names_.clear();
    const size_t k = k_.outer_ranges.size();
    for (size_t j = 0; j < k && j < n.index_vars.size(); ++j)
      names_[n.index_vars[j]] = "x" + std::to_string(j);
    line("{  // " + buf(n.out).name);
    ++indent_;
    if (n.is_reduction()) {
      reduction(n);
    } else {
      for (size_t j = k; j < n.ranges.size(); ++j)
        open_loop(cpp_identifier(n.index_vars[j]->name), n.ranges[j]);
      store(n, body(n));
      for (size_t j = k; j < n.ranges.size(); ++j) close();
    }
    --indent_;
    line("}");
  }

  void store(const ComputeNode& n, const std::string& v) {
    const DType t = buf(n.out).dtype;
    if (locals_.count(n.out)) {
      line(local_name(n.out) + " = " + rounded_value(t, v) + ";");
      return;
    }
    line(buf(n.out).name + "[" + idx(flat_index(n.out, n.store_index)) +
         "] = " + stored_value(t, v) + ";");
  }

  // The body's instructions as statements; returns the name of its result.
  std::string body(const ComputeNode& n) {
    const loop::Body& b = n.body;
    COIL_CHECK(b.result >= 0 && b.result < static_cast<int>(b.instrs.size()))
        << buf(n.out).name << ": body without a result";
    ScalarExprHooks h;
    h.value = [&](InstrId i) { return tmp(i); };
    h.index = [&](Expr e) { return idx(e); };
    h.load = [&](const Instr& in, InstrId) { return load(in); };
    for (size_t i = 0; i < b.instrs.size(); ++i) {
      const Instr& in = b.instrs[i];
      const auto id = static_cast<InstrId>(i);
      line("const " + compute_ctype(in.dtype) + " " + tmp(id) + " = " +
           scalar_instr_expr(b, id, h) + ";");
      // An Indirect instruction binds a symbol that later loads index with.
      if (in.kind == InstrKind::Indirect)
        line("const int64_t " + cpp_identifier(in.expr->name) + " = " + tmp(id) + ";");
    }
    return tmp(b.result);
  }

  // A load: the local scalar, or the element (16-bit floats widened); under a mask the
  // conditional operator evaluates the access only where the mask holds.
  std::string load(const Instr& in) {
    const std::string T = compute_ctype(in.dtype);
    std::string v;
    if (locals_.count(in.buffer)) {
      v = local_name(in.buffer);
    } else {
      const loop::Buffer& B = buf(in.buffer);
      v = B.name + "[" + idx(flat_index(in.buffer, in.index)) + "]";
      if (B.dtype == DType::Float16 || B.dtype == DType::BFloat16) v = "coil::to_f32(" + v + ")";
    }
    if (in.mask >= 0) return "(" + tmp(in.mask) + " ? " + T + "(" + v + ") : " + T + "(0))";
    return v;
  }

  void reduction(const ComputeNode& n) {
    const Instr& res = n.body.instrs.at(n.body.result);
    const bool arg = n.reduce == ReduceKind::ArgMax || n.reduce == ReduceKind::ArgMin;
    const DType acc_t = arg ? res.dtype : buf(n.out).dtype;
    const bool is_bool = acc_t == DType::Bool;
    const bool fp = dtype_is_floating(acc_t);
    const std::string A = compute_ctype(acc_t);
    // Float sums in double; every other accumulator in the compute type.
    const std::string acc_type = n.reduce == ReduceKind::Sum && fp ? "double" : A;
    const bool mx = n.reduce == ReduceKind::Max || n.reduce == ReduceKind::ArgMax;
    std::string init;
    switch (n.reduce) {
      case ReduceKind::None:
        COIL_INTERNAL_ERROR() << "not a reduction";
        break;
      case ReduceKind::Sum:
      case ReduceKind::Any:
        init = is_bool || n.reduce == ReduceKind::Any ? "false" : acc_type + "(0)";
        break;
      case ReduceKind::Prod:
      case ReduceKind::All:
        init = is_bool || n.reduce == ReduceKind::All ? "true" : A + "(1)";
        break;
      case ReduceKind::Max:
      case ReduceKind::Min:
        init = is_bool ? (mx ? "false" : "true")
                       : "coil::numeric<" + A + ">::" + (mx ? "lowest" : "max") + "()";
        break;
      case ReduceKind::ArgMax:
      case ReduceKind::ArgMin:
        init = "coil::numeric<" + A + ">::" + (mx ? "lowest" : "max") + "()";
        break;
    }
    const bool any_all = is_bool || n.reduce == ReduceKind::Any || n.reduce == ReduceKind::All;
    line((any_all ? std::string("bool") : acc_type) + " acc = " + init + ";");
    if (arg) line("int64_t best_index = 0;");
    const bool nan_flag = fp && (n.reduce == ReduceKind::Max || n.reduce == ReduceKind::Min);
    if (nan_flag) line("bool nan_seen = false;");
    const size_t nr = n.reduction_ranges.size();
    for (size_t j = 0; j < nr; ++j)
      open_loop(cpp_identifier(n.reduction_vars[j]->name), n.reduction_ranges[j]);
    const std::string v = body(n);
    switch (n.reduce) {
      case ReduceKind::None:
        break;
      case ReduceKind::Sum:
        line(is_bool ? "acc = acc || bool(" + v + ");" : "acc += " + acc_type + "(" + v + ");");
        break;
      case ReduceKind::Prod:
        line(is_bool ? "acc = acc && bool(" + v + ");" : "acc *= " + A + "(" + v + ");");
        break;
      case ReduceKind::Max:
      case ReduceKind::Min:
        if (is_bool) {
          line(std::string("acc = acc ") + (mx ? "||" : "&&") + " bool(" + v + ");");
          break;
        }
        line("const " + A + " val = " + A + "(" + v + ");");
        line(std::string("acc = val ") + (mx ? ">" : "<") + " acc ? val : acc;");
        if (nan_flag) line("nan_seen = nan_seen || (val != val);");
        break;
      case ReduceKind::ArgMax:
      case ReduceKind::ArgMin: {
        // The first extreme position; a NaN is the extreme (as eager), the first NaN wins.
        line("const " + A + " val = " + v + ";");
        std::string cond = std::string("val ") + (mx ? ">" : "<") + " acc";
        if (fp) cond = "(" + cond + ") || (val != val && acc == acc)";
        line("if (" + cond + ") {");
        ++indent_;
        line("acc = val;");
        Expr pos = ctx_.zero();  // the position along the flattened reduction range
        for (size_t j = 0; j < nr; ++j)
          pos = ctx_.add(ctx_.mul(pos, n.reduction_ranges[j]), n.reduction_vars[j]);
        line("best_index = " + idx(pos) + ";");
        close();
        break;
      }
      case ReduceKind::Any:
        line("acc = acc || bool(" + v + ");");
        break;
      case ReduceKind::All:
        line("acc = acc && bool(" + v + ");");
        break;
    }
    for (size_t j = 0; j < nr; ++j) close();
    if (nan_flag) line("if (nan_seen) acc = coil::numeric<" + A + ">::nan();");
    store(n, arg ? "best_index" : acc_type == A ? "acc" : A + "(acc)");
  }

  const loop::LoopProgram& p_;
  sym::Context& ctx_;
  const sched::KernelPlan& k_;
  std::ostringstream& os_;
  std::set<BufferId> locals_;
  std::vector<const ComputeNode*> nodes_;
  std::unordered_map<Expr, std::string> names_;  // symbol -> C++ name for the current node
  int indent_ = 0;
};

}  // namespace

PortableSource emit_portable(const loop::LoopProgram& program, const sched::Schedule& schedule,
                             const CompileOptions&) {
  COIL_CHECK(program.ctx != nullptr) << "LoopProgram without a sym::Context";
  std::ostringstream os;
  os << "// Generated by coil (backend/portable): " << schedule.kernels.size()
     << " kernel(s), scalar C++.\n";
  os << "#include \"coil/kernel_prelude.h\"\n\n";
  PortableSource src;
  for (const sched::KernelPlan& k : schedule.kernels) {
    KernelWriter(program, k, os).write();
    src.kernel_symbols.push_back(k.name);
  }
  src.code = os.str();
  return src;
}

}  // namespace coil::backend::portable
