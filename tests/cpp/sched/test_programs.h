// Hand-built LoopPrograms shared by the scheduler and C++ emitter tests (what lowering would
// produce: fresh index symbols per node, size-1 dims out of the ranges, keepdim reductions).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coil/loop/program.h"
#include "coil/sym/expr.h"

namespace coil::testing {

using loop::BodyBuilder;
using loop::BufferId;
using loop::ComputeNode;
using loop::InstrId;
using loop::InstrKind;
using loop::ReduceKind;
using sym::Expr;

class ProgramBuilder {
 public:
  ProgramBuilder() : ctx_(std::make_unique<sym::Context>()) { p.ctx = ctx_.get(); }
  sym::Context& ctx() { return *ctx_; }

  Expr c(int64_t v) { return ctx_->constant(v); }
  // A size symbol read from input `input`, dim `dim` (range [2, 2^20]).
  Expr size_symbol(const std::string& name, int input, int dim) {
    Expr s = ctx_->symbol(name, sym::Range{2, int64_t{1} << 20});
    p.size_symbols.push_back({s, input, dim});
    return s;
  }

  std::vector<Expr> contiguous(const std::vector<Expr>& sizes) {
    std::vector<Expr> st(sizes.size());
    Expr acc = ctx_->one();
    for (size_t d = sizes.size(); d-- > 0;) {
      st[d] = acc;
      acc = ctx_->mul(acc, sizes[d]);
    }
    return st;
  }

  BufferId input(DType t, std::vector<Expr> sizes) {
    loop::Buffer b;
    b.kind = loop::BufferKind::Input;
    b.dtype = t;
    b.strides = contiguous(sizes);
    b.sizes = std::move(sizes);
    b.input_index = static_cast<int>(p.inputs.size());
    BufferId id = p.add_buffer(std::move(b));
    p.inputs.push_back(id);
    return id;
  }
  BufferId buffer(DType t, std::vector<Expr> sizes) {
    loop::Buffer b;
    b.dtype = t;
    b.strides = contiguous(sizes);
    b.sizes = std::move(sizes);
    return p.add_buffer(std::move(b));
  }

  // Fresh loop symbols over `ranges` ("i7", "r8", ...), as lowering makes them.
  std::vector<Expr> vars(char prefix, const std::vector<Expr>& ranges) {
    std::vector<Expr> v;
    for (Expr n : ranges) {
      Expr s = ctx_->symbol(std::string(1, prefix) + std::to_string(next_var_++));
      auto cn = ctx_->as_const(n);
      if (cn) {
        ctx_->set_range(s, sym::Range{0, *cn - 1});
      } else {
        ctx_->set_upper_bound(s, n);
      }
      v.push_back(s);
    }
    return v;
  }

  // A node over `ranges` (and `rranges` when a reduction); `fill` builds the body from the
  // node's index vars and reduction vars and returns the result.
  template <typename F>
  BufferId node(BufferId out, std::vector<Expr> ranges, std::vector<Expr> store_index, ReduceKind r,
                std::vector<Expr> rranges, F fill, std::vector<Expr>* vars_out = nullptr) {
    ComputeNode n;
    n.out = out;
    n.ranges = ranges;
    n.index_vars = vars('i', ranges);
    n.reduce = r;
    n.reduction_ranges = rranges;
    n.reduction_vars = vars('r', rranges);
    BodyBuilder b(n.body);
    n.body.result = fill(b, n.index_vars, n.reduction_vars);
    // store_index given over placeholders: entries nullptr mean "the next index var".
    size_t k = 0;
    for (Expr& e : store_index) {
      if (e == nullptr) e = n.index_vars.at(k++);
    }
    n.store_index = std::move(store_index);
    p.steps.push_back(std::move(n));
    return out;
  }

  loop::LoopProgram p;

 private:
  std::unique_ptr<sym::Context> ctx_;
  int next_var_ = 0;
};

// softmax over the last dim of x: [R, C] -> max, sum(exp(x - max)), exp(x - max) / sum.
inline void build_softmax(ProgramBuilder& b, Expr R, Expr C, DType t = DType::Float32) {
  auto& ctx = b.ctx();
  BufferId x = b.input(t, {R, C});
  DType ct = dtype_compute(t);
  BufferId mx = b.buffer(t, {R, b.c(1)});
  b.node(mx, {R}, {nullptr, ctx.zero()}, ReduceKind::Max, {C},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(x, ct, {i[0], r[0]});
         });
  BufferId sm = b.buffer(t, {R, b.c(1)});
  b.node(sm, {R}, {nullptr, ctx.zero()}, ReduceKind::Sum, {C},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           InstrId v = bb.load(x, ct, {i[0], r[0]});
           InstrId m = bb.load(mx, ct, {i[0], ctx.zero()});
           return bb.op(InstrKind::Exp, ct, bb.op(InstrKind::Sub, ct, v, m));
         });
  BufferId out = b.buffer(t, {R, C});
  b.node(out, {R, C}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           InstrId v = bb.load(x, ct, {i[0], i[1]});
           InstrId m = bb.load(mx, ct, {i[0], ctx.zero()});
           InstrId s = bb.load(sm, ct, {i[0], ctx.zero()});
           InstrId e = bb.op(InstrKind::Exp, ct, bb.op(InstrKind::Sub, ct, v, m));
           return bb.op(InstrKind::Div, ct, e, s);
         });
  b.p.outputs = {out};
}

// layer_norm over the last dim, decomposed: sum, sum of squared deviations, normalize.
inline void build_layer_norm(ProgramBuilder& b, Expr R, Expr C) {
  auto& ctx = b.ctx();
  const DType f = DType::Float32;
  BufferId x = b.input(f, {R, C});
  BufferId w = b.input(f, {C});
  BufferId bias = b.input(f, {C});
  double n = static_cast<double>(*ctx.as_const(C));
  BufferId sum = b.buffer(f, {R, b.c(1)});
  b.node(sum, {R}, {nullptr, ctx.zero()}, ReduceKind::Sum, {C},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(x, f, {i[0], r[0]});
         });
  auto centered = [&](BodyBuilder& bb, Expr i, Expr j) {
    InstrId v = bb.load(x, f, {i, j});
    InstrId mean = bb.op(InstrKind::Div, f, bb.load(sum, f, {i, ctx.zero()}), bb.constant(n, f));
    return bb.op(InstrKind::Sub, f, v, mean);
  };
  BufferId var = b.buffer(f, {R, b.c(1)});
  b.node(var, {R}, {nullptr, ctx.zero()}, ReduceKind::Sum, {C},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           InstrId d = centered(bb, i[0], r[0]);
           return bb.op(InstrKind::Mul, f, d, d);
         });
  BufferId out = b.buffer(f, {R, C});
  b.node(
      out, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
        InstrId d = centered(bb, i[0], i[1]);
        InstrId v =
            bb.op(InstrKind::Div, f, bb.load(var, f, {i[0], ctx.zero()}), bb.constant(n, f));
        InstrId rs = bb.op(InstrKind::Rsqrt, f, bb.op(InstrKind::Add, f, v, bb.constant(1e-5, f)));
        InstrId y =
            bb.op(InstrKind::Mul, f, bb.op(InstrKind::Mul, f, d, rs), bb.load(w, f, {i[1]}));
        return bb.op(InstrKind::Add, f, y, bb.load(bias, f, {i[1]}));
      });
  b.p.outputs = {out};
}

// A pointwise chain realized in steps: a = x*2; e = exp(a); out = e + y.
inline void build_pointwise_chain(ProgramBuilder& b, Expr R, Expr C) {
  const DType f = DType::Float32;
  BufferId x = b.input(f, {R, C});
  BufferId y = b.input(f, {R, C});
  BufferId a = b.buffer(f, {R, C});
  b.node(a, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1]}), bb.constant(2, f));
  });
  BufferId e = b.buffer(f, {R, C});
  b.node(e, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Exp, f, bb.load(a, f, {i[0], i[1]}));
  });
  BufferId out = b.buffer(f, {R, C});
  b.node(
      out, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
        return bb.op(InstrKind::Add, f, bb.load(e, f, {i[0], i[1]}), bb.load(y, f, {i[0], i[1]}));
      });
  b.p.outputs = {out};
}

// Independent reductions of x over its last dim (outputs): sum, max, min, argmax, any(x > 0).
inline void build_independent_reductions(ProgramBuilder& b, Expr R, Expr C) {
  auto& ctx = b.ctx();
  const DType f = DType::Float32;
  BufferId x = b.input(f, {R, C});
  auto red = [&](ReduceKind k, DType out_t) {
    BufferId o = b.buffer(out_t, {R});
    b.node(o, {R}, {nullptr}, k, {C}, [&](BodyBuilder& bb, auto& i, auto& r) {
      InstrId v = bb.load(x, f, {i[0], r[0]});
      if (k == ReduceKind::Any) {
        return bb.op(InstrKind::Gt, DType::Bool, v, bb.constant(0, f));
      }
      return v;
    });
    return o;
  };
  (void)ctx;
  b.p.outputs = {red(ReduceKind::Sum, f), red(ReduceKind::Max, f), red(ReduceKind::Min, f),
                 red(ReduceKind::ArgMax, DType::Int64), red(ReduceKind::Any, DType::Bool)};
}

// Transposes that cannot fuse: a = x*2 [R, C]; t = a^T + 1 [C, R]; u = t^T * 3 [R, C];
// out = u^T [C, R]. a and u have the same size (storage reuse); out is the only output.
inline void build_transposes(ProgramBuilder& b, Expr R, Expr C) {
  const DType f = DType::Float32;
  BufferId x = b.input(f, {R, C});
  BufferId a = b.buffer(f, {R, C});
  b.node(a, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1]}), bb.constant(2, f));
  });
  BufferId t = b.buffer(f, {C, R});
  b.node(t, {C, R}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Add, f, bb.load(a, f, {i[1], i[0]}), bb.constant(1, f));
  });
  BufferId u = b.buffer(f, {R, C});
  b.node(u, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Mul, f, bb.load(t, f, {i[1], i[0]}), bb.constant(3, f));
  });
  BufferId out = b.buffer(f, {C, R});
  b.node(out, {C, R}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.load(u, f, {i[1], i[0]});
         });
  b.p.outputs = {out};
}

}  // namespace coil::testing
