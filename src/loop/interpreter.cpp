#include "coil/loop/interpreter.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <unordered_map>

#include "coil/support/error.h"
#include "scalar_semantics.h"

namespace coil::loop {

namespace {

using namespace detail;

struct BufState {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;  // elements into storage
  std::shared_ptr<std::vector<unsigned char>> storage;
  int64_t storage_elems = 0;
};

class Interpreter {
 public:
  Interpreter(const LoopProgram& p, const std::vector<HostTensor>& inputs, int64_t seed,
              int64_t rng_offset)
      : p_(p), ctx_(*p.ctx), inputs_(inputs), seed_(seed), rng_offset_(rng_offset) {}

  std::vector<HostTensor> run() {
    COIL_USER_CHECK(inputs_.size() == p_.inputs.size())
        << "interpret: " << inputs_.size() << " inputs for " << p_.inputs.size();
    for (const auto& s : p_.size_symbols) {
      const HostTensor& t = inputs_.at(s.input);
      int64_t v = s.dim >= 0 ? t.sizes.at(s.dim) : t.strides.at(-s.dim - 1);
      env_[s.symbol] = v;
    }
    bufs_.resize(p_.buffers.size());
    for (const Buffer& b : p_.buffers) setup(b.id);
    if (p_.rng_state >= 0) {
      BufState& st = bufs_[p_.rng_state];
      write_elem(DType::Int64, st.storage->data() + st.offset * 8, Val{0, seed_});
      write_elem(DType::Int64, st.storage->data() + (st.offset + 1) * 8, Val{0, rng_offset_});
    }
    for (const Step& s : p_.steps) {
      if (const auto* cn = std::get_if<ComputeNode>(&s)) {
        run_compute(*cn);
      } else {
        run_extern(std::get<ExternNode>(s));
      }
    }
    std::vector<HostTensor> out;
    for (BufferId id : p_.outputs) {
      const BufState& b = bufs_.at(id);
      HostTensor t;
      t.dtype = b.dtype;
      t.sizes = b.sizes;
      t.strides = b.strides;
      t.offset = b.offset;
      t.storage = b.storage;
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  int64_t eval(sym::Expr e) { return ctx_.evaluate(e, env_); }
  std::vector<int64_t> eval_all(const std::vector<sym::Expr>& es) {
    std::vector<int64_t> out(es.size());
    for (size_t k = 0; k < es.size(); ++k) out[k] = eval(es[k]);
    return out;
  }

  void setup(BufferId id) {
    if (bufs_[id].storage) return;
    const Buffer& b = p_.buffer(id);
    BufState& st = bufs_[id];
    st.dtype = b.dtype;
    st.sizes = eval_all(b.sizes);
    st.strides = eval_all(b.strides);
    COIL_CHECK(st.strides.size() == st.sizes.size()) << b.name << ": strides/sizes mismatch";
    int es = dtype_size(b.dtype);
    switch (b.kind) {
      case BufferKind::Input: {
        const HostTensor& t = inputs_.at(b.input_index);
        COIL_USER_CHECK(t.dtype == b.dtype && t.sizes == st.sizes)
            << "interpret: input " << b.input_index << " does not match " << b.name;
        COIL_USER_CHECK(t.strides == st.strides || t.numel() <= 1)
            << "interpret: input " << b.input_index << " strides do not match " << b.name;
        st.storage = t.storage;
        st.offset = t.offset + (b.offset ? eval(b.offset) : 0);
        st.storage_elems = static_cast<int64_t>(t.storage->size()) / es;
        break;
      }
      case BufferKind::View: {
        COIL_CHECK(b.view_of >= 0 && b.view_of != id) << b.name << ": bad view_of";
        setup(b.view_of);
        const BufState& base = bufs_[b.view_of];
        COIL_CHECK(base.dtype == b.dtype) << b.name << ": view with another dtype";
        st.storage = base.storage;
        st.offset = base.offset + (b.offset ? eval(b.offset) : 0);
        st.storage_elems = base.storage_elems;
        break;
      }
      case BufferKind::Intermediate: {
        int64_t extent = 1;
        bool empty = false;
        for (size_t k = 0; k < st.sizes.size(); ++k) {
          if (st.sizes[k] == 0) empty = true;
          extent += (st.sizes[k] - 1) * st.strides[k];
        }
        if (empty) extent = 0;
        st.offset = b.offset ? eval(b.offset) : 0;
        st.storage_elems = extent + st.offset;
        st.storage = std::make_shared<std::vector<unsigned char>>(
            static_cast<size_t>(std::max<int64_t>(st.storage_elems, 1) * es), 0);
        break;
      }
    }
  }

  unsigned char* address(BufferId id, const std::vector<int64_t>& idx) {
    BufState& b = bufs_.at(id);
    COIL_CHECK(idx.size() == b.sizes.size())
        << p_.buffer(id).name << ": index of rank " << idx.size() << " for rank " << b.sizes.size();
    int64_t off = b.offset;
    for (size_t k = 0; k < idx.size(); ++k) {
      COIL_CHECK(idx[k] >= 0 && idx[k] < b.sizes[k])
          << p_.buffer(id).name << ": index " << idx[k] << " out of range [0, " << b.sizes[k]
          << ") in dim " << k;
      off += idx[k] * b.strides[k];
    }
    COIL_CHECK(off >= 0 && off < b.storage_elems)
        << p_.buffer(id).name << ": storage offset " << off << " out of range";
    return b.storage->data() + off * dtype_size(b.dtype);
  }

  // Evaluates a body at the current env; returns the value of its result.
  Val eval_body(const Body& body) {
    vals_.assign(body.instrs.size(), Val{});
    for (size_t n = 0; n < body.instrs.size(); ++n) vals_[n] = eval_instr(body, body.instrs[n]);
    COIL_CHECK(body.result >= 0 && body.result < static_cast<InstrId>(body.instrs.size()));
    return vals_[body.result];
  }

  Val eval_instr(const Body& body, const Instr& in) {
    auto opv = [&](int k) { return vals_.at(in.operands[k]); };
    auto opt = [&](int k) { return body.instrs.at(in.operands[k]).dtype; };
    Val r;
    switch (in.kind) {
      case InstrKind::Load: {
        if (in.mask >= 0 && !truthy(vals_.at(in.mask), body.instrs.at(in.mask).dtype)) return r;
        const Buffer& b = p_.buffer(in.buffer);
        Val v = read_elem(b.dtype, address(in.buffer, eval_all(in.index)));
        return convert(v, b.dtype, in.dtype);
      }
      case InstrKind::Constant:
        if (is_fp(in.dtype)) {
          r.f = round_to(in.dtype, in.fvalue);
        } else {
          r.i = wrap_int(in.dtype, in.ivalue);
        }
        return r;
      case InstrKind::IndexExpr:
        return convert(Val{0, eval(in.expr)}, DType::Int64, in.dtype);
      case InstrKind::Cast:
        return convert(opv(0), opt(0), in.dtype);
      case InstrKind::Rand:
      case InstrKind::Randn: {
        int64_t seed = is_fp(opt(0)) ? float_to_int(opv(0).f) : opv(0).i;
        int64_t off = eval(in.expr);
        double v =
            in.kind == InstrKind::Rand ? reference_rand(seed, off) : reference_randn(seed, off);
        return convert(Val{v, 0}, DType::Float64, in.dtype);
      }
      case InstrKind::Indirect: {
        int64_t v = is_fp(opt(0)) ? float_to_int(opv(0).f) : opv(0).i;
        env_[in.expr] = v;
        r.i = v;
        return r;
      }
      default:
        break;
    }
    int arity = instr_kind_arity(in.kind);
    if (arity == 1) return unary(in, opv(0), opt(0));
    if (arity == 2) return binary(in, opv(0), opt(0), opv(1), opt(1));
    // Where
    COIL_CHECK(in.kind == InstrKind::Where);
    Val pick = truthy(opv(0), opt(0)) ? opv(1) : opv(2);
    DType pt = truthy(opv(0), opt(0)) ? opt(1) : opt(2);
    return convert(pick, pt, in.dtype);
  }

  Val unary(const Instr& in, Val a, DType at) {
    Val r;
    switch (in.kind) {
      case InstrKind::IsNan:
        r.i = is_fp(at) && std::isnan(a.f);
        return convert(r, DType::Bool, in.dtype);
      case InstrKind::IsInf:
        r.i = is_fp(at) && std::isinf(a.f);
        return convert(r, DType::Bool, in.dtype);
      case InstrKind::LogicalNot:
        r.i = !truthy(a, at);
        return convert(r, DType::Bool, in.dtype);
      case InstrKind::BitwiseNot:
        COIL_CHECK(!is_fp(at)) << "bitwise_not of a float";
        r.i = at == DType::Bool ? !a.i : ~a.i;
        return convert(r, at == DType::Bool ? DType::Bool : DType::Int64, in.dtype);
      default:
        break;
    }
    if (is_fp(in.dtype)) {
      r.f = round_to(in.dtype, unary_f(in.kind, as_double(a, at)));
      return r;
    }
    // Integer unary ops.
    int64_t x = is_fp(at) ? float_to_int(a.f) : a.i;
    switch (in.kind) {
      case InstrKind::Neg:
        r.i = static_cast<int64_t>(0ULL - static_cast<uint64_t>(x));
        break;
      case InstrKind::Abs:
        r.i = x < 0 ? -x : x;
        break;
      case InstrKind::Sign:
        r.i = (x > 0) - (x < 0);
        break;
      case InstrKind::Floor:
      case InstrKind::Ceil:
      case InstrKind::Round:
      case InstrKind::Trunc:
        r.i = x;
        break;
      default:
        r.i = float_to_int(unary_f(in.kind, static_cast<double>(x)));
        break;
    }
    r.i = wrap_int(in.dtype, r.i);
    return r;
  }

  Val binary(const Instr& in, Val a, DType at, Val b, DType bt) {
    Val r;
    // Comparisons and logical ops: operands in their own types, result bool.
    bool fp_operands = is_fp(at) || is_fp(bt);
    auto cmp = [&](auto op) {
      if (fp_operands) {
        r.i = op(as_double(a, at), as_double(b, bt));
      } else {
        r.i = op(a.i, b.i);
      }
      return convert(r, DType::Bool, in.dtype);
    };
    switch (in.kind) {
      case InstrKind::Eq:
        return cmp([](auto x, auto y) { return x == y; });
      case InstrKind::Ne:
        return cmp([](auto x, auto y) { return x != y; });
      case InstrKind::Lt:
        return cmp([](auto x, auto y) { return x < y; });
      case InstrKind::Le:
        return cmp([](auto x, auto y) { return x <= y; });
      case InstrKind::Gt:
        return cmp([](auto x, auto y) { return x > y; });
      case InstrKind::Ge:
        return cmp([](auto x, auto y) { return x >= y; });
      case InstrKind::LogicalAnd:
        r.i = truthy(a, at) && truthy(b, bt);
        return convert(r, DType::Bool, in.dtype);
      case InstrKind::LogicalOr:
        r.i = truthy(a, at) || truthy(b, bt);
        return convert(r, DType::Bool, in.dtype);
      case InstrKind::LogicalXor:
        r.i = truthy(a, at) != truthy(b, bt);
        return convert(r, DType::Bool, in.dtype);
      default:
        break;
    }
    if (is_fp(in.dtype)) {
      double x = as_double(a, at), y = as_double(b, bt), v = 0;
      switch (in.kind) {
        case InstrKind::Add:
          v = x + y;
          break;
        case InstrKind::Sub:
          v = x - y;
          break;
        case InstrKind::Mul:
          v = x * y;
          break;
        case InstrKind::Div:
          v = x / y;
          break;
        case InstrKind::FloorDiv:
          v = std::floor(x / y);
          break;
        case InstrKind::TruncDiv:
          v = std::trunc(x / y);
          break;
        case InstrKind::Remainder:
          v = mod_f(x, y);
          break;
        case InstrKind::Fmod:
          v = std::fmod(x, y);
          break;
        case InstrKind::Pow:
          v = std::pow(x, y);
          break;
        case InstrKind::Maximum:
          v = (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y);
          break;
        case InstrKind::Minimum:
          v = (std::isnan(x) || std::isnan(y)) ? NAN : std::min(x, y);
          break;
        case InstrKind::Atan2:
          v = std::atan2(x, y);
          break;
        case InstrKind::Hypot:
          v = std::hypot(x, y);
          break;
        case InstrKind::CopySign:
          v = std::copysign(x, y);
          break;
        // Integer-only, or bool results (computed above), or not binary: no default, so a
        // new binary op without its case here fails to compile.
        case InstrKind::BitwiseAnd:
        case InstrKind::BitwiseOr:
        case InstrKind::BitwiseXor:
        case InstrKind::ShiftLeft:
        case InstrKind::ShiftRight:
          COIL_CASE_BOOL_RESULT
          COIL_CASE_NON_SCALAR
          COIL_BODY_OPS(COIL_CASE_UNLESS_BINARY)
          COIL_INTERNAL_ERROR() << instr_kind_name(in.kind) << " with a float result";
      }
      r.f = round_to(in.dtype, v);
      return r;
    }
    COIL_CHECK(!fp_operands) << instr_kind_name(in.kind) << ": float operands, integer result";
    int64_t x = a.i, y = b.i, v = 0;
    auto u = [](int64_t q) { return static_cast<uint64_t>(q); };
    switch (in.kind) {
      case InstrKind::Add:
        v = static_cast<int64_t>(u(x) + u(y));
        break;
      case InstrKind::Sub:
        v = static_cast<int64_t>(u(x) - u(y));
        break;
      case InstrKind::Mul:
        v = static_cast<int64_t>(u(x) * u(y));
        break;
      case InstrKind::Div:
      case InstrKind::TruncDiv:
        COIL_USER_CHECK(y != 0) << "integer division by zero";
        v = x / y;
        break;
      case InstrKind::FloorDiv:
        v = floordiv_i(x, y);
        break;
      case InstrKind::Remainder:
        v = mod_i(x, y);
        break;
      case InstrKind::Fmod:
        COIL_USER_CHECK(y != 0) << "integer modulo by zero";
        v = x % y;
        break;
      case InstrKind::Pow:
        v = pow_i(x, y);
        break;
      case InstrKind::Maximum:
        v = std::max(x, y);
        break;
      case InstrKind::Minimum:
        v = std::min(x, y);
        break;
      case InstrKind::BitwiseAnd:
        v = x & y;
        break;
      case InstrKind::BitwiseOr:
        v = x | y;
        break;
      case InstrKind::BitwiseXor:
        v = x ^ y;
        break;
      case InstrKind::ShiftLeft:
        v = (y < 0 || y >= 64) ? 0 : static_cast<int64_t>(u(x) << y);
        break;
      case InstrKind::ShiftRight:
        v = (y < 0 || y >= 64) ? (x < 0 ? -1 : 0) : (x >> y);
        break;
      case InstrKind::CopySign:
        v = (y < 0) ? -std::abs(x) : std::abs(x);
        break;
      // Float-only, or bool results (computed above), or not binary (as above).
      case InstrKind::Atan2:
      case InstrKind::Hypot:
        COIL_CASE_BOOL_RESULT
        COIL_CASE_NON_SCALAR
        COIL_BODY_OPS(COIL_CASE_UNLESS_BINARY)
        COIL_INTERNAL_ERROR() << instr_kind_name(in.kind) << " with an integer result";
    }
    r.i = wrap_int(in.dtype, v);
    return r;
  }

  // Calls f() for every point of `ranges`, binding `vars`.
  template <typename F>
  void for_each_point(const std::vector<sym::Expr>& vars, const std::vector<int64_t>& ranges,
                      F&& f) {
    for (int64_t n : ranges) {
      if (n <= 0) return;
    }
    std::vector<int64_t> idx(ranges.size(), 0);
    while (true) {
      for (size_t k = 0; k < vars.size(); ++k) env_[vars[k]] = idx[k];
      f();
      size_t d = ranges.size();
      while (d > 0) {
        --d;
        if (++idx[d] < ranges[d]) break;
        idx[d] = 0;
        if (d == 0) return;
      }
      if (ranges.empty()) return;
    }
  }

  void store(const ComputeNode& cn, Val v, DType vt) {
    DType out_t = p_.buffer(cn.out).dtype;
    write_elem(out_t, address(cn.out, eval_all(cn.store_index)), convert(v, vt, out_t));
  }

  void run_compute(const ComputeNode& cn) {
    COIL_CHECK(cn.ranges.size() == cn.index_vars.size());
    COIL_CHECK(cn.reduction_ranges.size() == cn.reduction_vars.size());
    std::vector<int64_t> ranges = eval_all(cn.ranges);
    const Body& body = cn.body;
    DType rt = body.instrs.at(body.result).dtype;
    if (!cn.is_reduction()) {
      for_each_point(cn.index_vars, ranges, [&] { store(cn, eval_body(body), rt); });
      return;
    }
    std::vector<int64_t> rranges = eval_all(cn.reduction_ranges);
    ReduceKind kind = cn.reduce;
    bool fp = is_fp(rt);
    for_each_point(cn.index_vars, ranges, [&] {
      // Accumulator in double (floats) or int64 (integers).
      double facc = 0;
      int64_t iacc = 0;
      switch (kind) {
        case ReduceKind::Prod:
          facc = 1;
          iacc = 1;
          break;
        case ReduceKind::Max:
          facc = -INFINITY;
          iacc = std::numeric_limits<int64_t>::min();
          break;
        case ReduceKind::Min:
          facc = INFINITY;
          iacc = std::numeric_limits<int64_t>::max();
          break;
        case ReduceKind::All:
          iacc = 1;
          break;
        default:
          break;
      }
      int64_t best_pos = -1, pos = 0;
      double best_f = 0;
      int64_t best_i = 0;
      std::unordered_map<sym::Expr, int64_t> saved = env_;
      for_each_point(cn.reduction_vars, rranges, [&] {
        Val v = eval_body(body);
        switch (kind) {
          case ReduceKind::Sum:
            if (fp)
              facc += v.f;
            else
              iacc += v.i;
            break;
          case ReduceKind::Prod:
            if (fp)
              facc *= v.f;
            else
              iacc *= v.i;
            break;
          case ReduceKind::Max:
            if (fp)
              facc = (std::isnan(facc) || std::isnan(v.f)) ? NAN : std::max(facc, v.f);
            else
              iacc = std::max(iacc, v.i);
            break;
          case ReduceKind::Min:
            if (fp)
              facc = (std::isnan(facc) || std::isnan(v.f)) ? NAN : std::min(facc, v.f);
            else
              iacc = std::min(iacc, v.i);
            break;
          case ReduceKind::Any:
            iacc = iacc || truthy(v, rt);
            break;
          case ReduceKind::All:
            iacc = iacc && truthy(v, rt);
            break;
          case ReduceKind::ArgMax:
          case ReduceKind::ArgMin: {
            bool take = best_pos < 0;
            if (!take) {
              if (fp) {
                bool bn = std::isnan(best_f);
                if (!bn) {
                  take =
                      std::isnan(v.f) || (kind == ReduceKind::ArgMax ? v.f > best_f : v.f < best_f);
                }
              } else {
                take = kind == ReduceKind::ArgMax ? v.i > best_i : v.i < best_i;
              }
            }
            if (take) {
              best_pos = pos;
              best_f = v.f;
              best_i = v.i;
            }
            break;
          }
          case ReduceKind::None:
            break;
        }
        ++pos;
      });
      env_ = std::move(saved);
      Val out;
      DType ot = rt;
      if (kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin) {
        out.i = std::max<int64_t>(best_pos, 0);
        ot = DType::Int64;
      } else if (kind == ReduceKind::Any || kind == ReduceKind::All) {
        out.i = iacc;
        ot = DType::Bool;
      } else if (fp) {
        out.f = facc;
        ot = DType::Float64;
      } else {
        out.i = iacc;
        ot = DType::Int64;
      }
      store(cn, out, ot);
    });
  }

  double get(BufferId id, const std::vector<int64_t>& idx) {
    DType t = bufs_.at(id).dtype;
    return as_double(read_elem(t, address(id, idx)), t);
  }
  void put(BufferId id, const std::vector<int64_t>& idx, double v) {
    DType t = bufs_.at(id).dtype;
    write_elem(t, address(id, idx), convert(Val{v, 0}, DType::Float64, t));
  }

  void run_extern(const ExternNode& ex) {
    switch (ex.kind) {
      case ExternKind::Mm:
      case ExternKind::Bmm:
      case ExternKind::Addmm: {
        bool batched = ex.kind == ExternKind::Bmm;
        size_t first = ex.kind == ExternKind::Addmm ? 1 : 0;
        COIL_CHECK(ex.inputs.size() == first + 2 && ex.outputs.size() == 1)
            << extern_kind_name(ex.kind) << ": bad operands";
        BufferId a = ex.inputs[first], b = ex.inputs[first + 1], o = ex.outputs[0];
        const auto& as = bufs_[a].sizes;
        const auto& bs = bufs_[b].sizes;
        size_t bd = batched ? 1 : 0;
        COIL_CHECK(as.size() == 2 + bd && bs.size() == 2 + bd && as[1 + bd] == bs[bd])
            << extern_kind_name(ex.kind) << ": bad shapes";
        int64_t nb = batched ? as[0] : 1, m = as[bd], kk = as[bd + 1], n = bs[bd + 1];
        double beta = ex.scalars.size() > 0 ? ex.scalars[0] : 1.0;
        double alpha = ex.scalars.size() > 1 ? ex.scalars[1] : 1.0;
        for (int64_t z = 0; z < nb; ++z) {
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double acc = 0;
              for (int64_t k = 0; k < kk; ++k) {
                acc += batched ? get(a, {z, i, k}) * get(b, {z, k, j})
                               : get(a, {i, k}) * get(b, {k, j});
              }
              if (ex.kind == ExternKind::Addmm) {
                BufferId bias = ex.inputs[0];
                const auto& bsz = bufs_[bias].sizes;
                std::vector<int64_t> bi;
                if (bsz.size() == 1) {
                  bi = {bsz[0] == 1 ? 0 : j};
                } else if (bsz.size() == 2) {
                  bi = {bsz[0] == 1 ? 0 : i, bsz[1] == 1 ? 0 : j};
                }
                double bv = bsz.empty() ? get(bias, {}) : get(bias, bi);
                acc = beta * bv + alpha * acc;
              }
              if (batched) {
                put(o, {z, i, j}, acc);
              } else {
                put(o, {i, j}, acc);
              }
            }
          }
        }
        return;
      }
      case ExternKind::Cat: {
        COIL_CHECK(ex.outputs.size() == 1 && ex.ints.size() == 1) << "cat: bad operands";
        const BufferId o = ex.outputs[0];
        const size_t dim = static_cast<size_t>(ex.ints[0]);
        int64_t offset = 0;  // the piece's first position along dim
        for (BufferId p : ex.inputs) {
          const std::vector<int64_t> sizes = bufs_[p].sizes;
          std::vector<int64_t> idx(sizes.size(), 0);
          int64_t n = 1;
          for (int64_t s : sizes) n *= s;
          for (int64_t k = 0; k < n; ++k) {
            std::vector<int64_t> at = idx;
            at[dim] += offset;
            DType t = bufs_[o].dtype;
            write_elem(t, address(o, at),
                       convert(read_elem(bufs_[p].dtype, address(p, idx)), bufs_[p].dtype, t));
            for (size_t d = sizes.size(); d-- > 0;) {  // the next index, last dim fastest
              if (++idx[d] < sizes[d]) break;
              idx[d] = 0;
            }
          }
          offset += sizes[dim];
        }
        return;
      }
      case ExternKind::Convolution:
      case ExternKind::ConvolutionBackward:
      case ExternKind::IndexPut:
      case ExternKind::ScatterAdd:
      case ExternKind::Fallback:
        COIL_UNSUPPORTED() << "interpret: extern " << extern_kind_name(ex.kind)
                           << " is not supported (" << ex.op << ")";
    }
  }

  const LoopProgram& p_;
  sym::Context& ctx_;
  const std::vector<HostTensor>& inputs_;
  int64_t seed_, rng_offset_;
  std::unordered_map<sym::Expr, int64_t> env_;
  std::vector<BufState> bufs_;
  std::vector<Val> vals_;
};

}  // namespace

float reference_randn(int64_t seed, int64_t offset) {
  uint64_t h = rng_mix64(rng_mix64(static_cast<uint64_t>(seed)) ^ static_cast<uint64_t>(offset));
  uint64_t h2 = rng_mix64(h);
  double u1 = (static_cast<double>(h >> 40) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
  double u2 = static_cast<double>(h2 >> 40) * (1.0 / 16777216.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

// ---- HostTensor

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> sizes) {
  HostTensor t;
  t.dtype = dtype;
  t.strides.assign(sizes.size(), 1);
  int64_t s = 1;
  for (size_t k = sizes.size(); k-- > 0;) {
    t.strides[k] = s;
    s *= sizes[k];
  }
  t.sizes = std::move(sizes);
  t.storage = std::make_shared<std::vector<unsigned char>>(
      static_cast<size_t>(std::max<int64_t>(s, 1) * dtype_size(dtype)), 0);
  return t;
}

HostTensor HostTensor::from_doubles(DType dtype, std::vector<int64_t> sizes,
                                    const std::vector<double>& values) {
  HostTensor t = zeros(dtype, std::move(sizes));
  COIL_CHECK(static_cast<int64_t>(values.size()) == t.numel())
      << "from_doubles: " << values.size() << " values for " << t.numel() << " elements";
  for (size_t k = 0; k < values.size(); ++k) {
    write_elem(dtype, t.storage->data() + k * dtype_size(dtype),
               convert(Val{values[k], 0}, DType::Float64, dtype));
  }
  return t;
}

HostTensor HostTensor::as_strided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                  int64_t offset) const {
  HostTensor t = *this;
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  t.offset = offset;
  return t;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

static int64_t host_offset(const HostTensor& t, std::span<const int64_t> index) {
  COIL_CHECK(index.size() == t.sizes.size()) << "HostTensor: index rank mismatch";
  int64_t off = t.offset;
  for (size_t k = 0; k < index.size(); ++k) {
    COIL_CHECK(index[k] >= 0 && index[k] < t.sizes[k]) << "HostTensor: index out of range";
    off += index[k] * t.strides[k];
  }
  COIL_CHECK(off >= 0 && (off + 1) * dtype_size(t.dtype) <= static_cast<int64_t>(t.storage->size()))
      << "HostTensor: storage offset out of range";
  return off;
}

double HostTensor::get(std::span<const int64_t> index) const {
  Val v = read_elem(dtype, storage->data() + host_offset(*this, index) * dtype_size(dtype));
  return as_double(v, dtype);
}

int64_t HostTensor::get_int(std::span<const int64_t> index) const {
  Val v = read_elem(dtype, storage->data() + host_offset(*this, index) * dtype_size(dtype));
  return is_fp(dtype) ? float_to_int(v.f) : v.i;
}

void HostTensor::set(std::span<const int64_t> index, double v) {
  write_elem(dtype, storage->data() + host_offset(*this, index) * dtype_size(dtype),
             convert(Val{v, 0}, DType::Float64, dtype));
}

std::vector<double> HostTensor::to_doubles() const {
  std::vector<double> out;
  int64_t n = numel();
  if (n == 0) return out;
  out.reserve(static_cast<size_t>(n));
  std::vector<int64_t> idx(sizes.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    out.push_back(get(idx));
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<HostTensor> interpret(const LoopProgram& program, const std::vector<HostTensor>& inputs,
                                  int64_t seed, int64_t rng_offset) {
  COIL_CHECK(program.ctx != nullptr);
  Interpreter it(program, inputs, seed, rng_offset);
  return it.run();
}

}  // namespace coil::loop
