// Indexing lowerings: cat, constant_pad_nd, embedding, index.Tensor, index_select, gather,
// select_scatter, slice_scatter (pointwise, with masked loads and indirect indexing), and
// index_put / scatter / scatter_add / embedding_dense_backward (ExternNodes IndexPut and
// ScatterAdd; conventions in runtime/extern_kernels.h and loop/program.h).
//
// Masked loads: a value's loader takes no mask, so `masked_load` builds the element in a scratch
// body and copies it into the consumer's body with every Load masked (Inductor's ops.masked
// subblock): out-of-range positions never touch memory and the final `where` picks the pad or
// the other piece.
//
// Indirect indexing: an index tensor's element is loaded, converted to Int64 (negative values
// wrapped where PyTorch allows them), and bound to a fresh symbol t<N> by an Indirect
// instruction; the indexed load then uses that symbol in its index.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/support/error.h"
#include "family_util.h"

namespace coil::lower {

namespace detail {

using loop::Body;
using loop::BodyBuilder;
using loop::Instr;
using loop::InstrId;
using loop::InstrKind;
using sym::Expr;

// v's element at `index`, with every load it performs masked by `mask` (a Bool instruction):
// where the mask is false no memory is touched and the loads read 0.
InstrId masked_load(BodyBuilder& b, const TensorValue& v, const std::vector<Expr>& index,
                    InstrId mask) {
  Body scratch;
  BodyBuilder sb(scratch);
  InstrId r = v.load(sb, index);
  std::vector<InstrId> map(scratch.instrs.size(), -1);
  for (size_t k = 0; k < scratch.instrs.size(); ++k) {
    const Instr& in = scratch.instrs[k];
    auto opnd = [&](int j) { return in.operands[j] >= 0 ? map[in.operands[j]] : -1; };
    InstrId out = -1;
    switch (in.kind) {
      case InstrKind::Load: {
        InstrId m = mask;
        if (in.mask >= 0) m = b.op(InstrKind::LogicalAnd, DType::Bool, map[in.mask], mask);
        out = b.load(in.buffer, in.dtype, in.index, m);
        break;
      }
      case InstrKind::Constant:
        out = dtype_is_floating(in.dtype) ? b.constant(in.fvalue, in.dtype)
                                          : b.int_constant(in.ivalue, in.dtype);
        break;
      case InstrKind::IndexExpr:
        out = b.index_expr(in.expr, in.dtype);
        break;
      case InstrKind::Cast:
        out = b.cast(opnd(0), in.dtype);
        break;
      case InstrKind::Rand:
      case InstrKind::Randn:
        out = b.rand(opnd(0), in.expr, in.kind == InstrKind::Randn);
        break;
      case InstrKind::Indirect:
        out = b.indirect(opnd(0), in.expr);
        break;
#define COIL_MASKED_COPY_OP(name, arity, text) case InstrKind::name:
        COIL_BODY_OPS(COIL_MASKED_COPY_OP)
#undef COIL_MASKED_COPY_OP
        out = b.op(in.kind, in.dtype, opnd(0), opnd(1), opnd(2));
        break;
    }
    map[k] = out;
  }
  return map[r];
}

// where(mask, v[index] (masked), other); when `mask_expr` is provably true, a plain load.
InstrId load_or(BodyBuilder& b, sym::Context& c, const TensorValue& v,
                const std::vector<Expr>& index, Expr mask_expr, InstrId other) {
  if (c.as_const(mask_expr) == 1) return v.load(b, index);
  if (c.as_const(mask_expr) == 0) return other;
  InstrId m = cond_instr(b, mask_expr);
  InstrId x = masked_load(b, v, index, m);
  DType t = b.dtype(x);
  return b.op(InstrKind::Where, t, m, x, b.cast(other, t));
}

std::vector<TensorValue> aten_extern(LoweringContext& ctx, const Node& node, bool fresh_outputs) {
  loop::ExternNode e = extern_for(ctx, node, loop::ExternKind::Fallback);
  e.fresh_outputs = fresh_outputs;
  for (const Value* v : node.input_values()) e.inputs.push_back(ctx.as_buffer(ctx.value(v)));
  std::vector<TensorValue> outs;
  for (const Value* v : node.outputs()) {
    loop::BufferId id = ctx.new_buffer(v->meta().dtype, v->meta().sizes);
    auto& buf = ctx.program().buffers[id];
    buf.strides = dense_strides_like(ctx.ctx(), v->meta());
    buf.device = v->meta().device;
    e.outputs.push_back(id);
    outs.push_back(ctx.from_buffer(id));
  }
  ctx.add_extern(std::move(e));
  return outs;
}

}  // namespace detail

namespace {

using namespace detail;

// Integer value `v` as an expression over the loop indices, where it is one: integer constants,
// index expressions, casts between integer types, sums, differences and products (an arange,
// start + i * step, inlined as an embedding's or a gather's indices). nullopt where it reads
// memory or does anything else.
std::optional<Expr> affine_value(sym::Context& c, const loop::Body& body, InstrId v,
                                 int depth = 0) {
  if (v < 0 || depth > 16) return std::nullopt;
  const Instr& in = body.instrs[static_cast<size_t>(v)];
  const bool integer = in.dtype == DType::Int64 || in.dtype == DType::Int32;
  if (!integer) return std::nullopt;
  switch (in.kind) {
    case InstrKind::Constant:
      return c.constant(in.ivalue);
    case InstrKind::IndexExpr:
      return in.expr;
    case InstrKind::Cast: {
      const Instr& from = body.instrs[static_cast<size_t>(in.operands[0])];
      // Narrowing to Int32 could wrap; an index fits Int64.
      if (in.dtype != DType::Int64 || (from.dtype != DType::Int64 && from.dtype != DType::Int32))
        return std::nullopt;
      return affine_value(c, body, in.operands[0], depth + 1);
    }
    case InstrKind::Add:
    case InstrKind::Sub:
    case InstrKind::Mul: {
      if (in.dtype != DType::Int64) return std::nullopt;
      std::optional<Expr> a = affine_value(c, body, in.operands[0], depth + 1);
      std::optional<Expr> b = a ? affine_value(c, body, in.operands[1], depth + 1) : std::nullopt;
      if (!b) return std::nullopt;
      return in.kind == InstrKind::Add   ? c.add(*a, *b)
             : in.kind == InstrKind::Sub ? c.sub(*a, *b)
                                         : c.mul(*a, *b);
    }
    default:
      return std::nullopt;
  }
}

// A fresh indirect-index symbol bound to integer value `v` (wrapped into [0, size) when
// `wrap_negative`), with range [0, size - 1] when size is known. Where v is an expression over
// the loop indices known to be non-negative (an arange's positions), that expression itself:
// the load stays affine, so it vectorizes and its buffer's dependency stays exact.
Expr indirect_index(LoweringContext& ctx, BodyBuilder& b, InstrId v, Expr size,
                    bool wrap_negative) {
  sym::Context& c = ctx.ctx();
  if (std::optional<Expr> e = affine_value(c, b.body(), v)) {
    if (c.bounds(*e).lo >= 0) return *e;
  }
  v = b.cast(v, DType::Int64);
  if (wrap_negative) {
    InstrId zero = b.int_constant(0, DType::Int64);
    InstrId neg = b.op(InstrKind::Lt, DType::Bool, v, zero);
    InstrId wrapped = b.op(InstrKind::Add, DType::Int64, v, b.index_expr(size, DType::Int64));
    v = b.op(InstrKind::Where, DType::Int64, neg, wrapped, v);
  }
  Expr t = ctx.fresh_vars(1, 't')[0];
  sym::Range sr = c.bounds(size);
  if (sr.hi < sym::kMaxSize && sr.hi >= 1) c.set_range(t, sym::Range{0, sr.hi - 1});
  b.indirect(v, t);
  return t;
}

std::vector<const TensorValue*> tensor_list(LoweringContext& ctx, const Arg* a) {
  COIL_USER_CHECK(a != nullptr && a->is_list()) << "expected a list of tensors";
  std::vector<const TensorValue*> out;
  for (const Arg& e : a->list()) {
    COIL_USER_CHECK(e.is_value()) << "expected a tensor in the list";
    out.push_back(&ctx.value(e.value()));
  }
  return out;
}

// --- cat

// The offsets of a cat's pieces. A symbolic offset is the flat sum of the lengths before it,
// so writing every piece's offset out makes a cat of n symbolic pieces quadratic in n (kernel
// text, simplifier work, g++ time). Offsets stay expressions while they have at most two terms;
// from the first longer one on, each is a fresh symbol bound in the body (Indirect) to the
// previous offset plus one length, and only its range is computed here: linear. The bound
// symbols do not depend on the loop indices, so the emitter computes them outside the inner
// loop and the loads stay affine. The last offset (the total, the loop extent) stays an
// expression, so `x < total` simplifies away.
struct CatOffsets {
  std::vector<Expr> lengths;       // piece k's length along the cat dim
  std::vector<Expr> exprs;         // n + 1 offsets; nullptr: bound in the body
  std::vector<sym::Range> ranges;  // of the bound ones
};

int64_t saturating_add(int64_t a, int64_t b) {
  if (b > 0 && a > sym::kMaxSize - b) return sym::kMaxSize;
  return a + b;
}

CatOffsets cat_offsets(sym::Context& c, std::vector<Expr> lengths) {
  const size_t n = lengths.size();
  CatOffsets o;
  o.exprs.assign(n + 1, nullptr);
  o.ranges.assign(n + 1, sym::Range{0, 0});
  o.exprs[0] = c.zero();
  for (size_t k = 1; k < n; ++k) {
    sym::Range lr = c.bounds(lengths[k - 1]);
    o.ranges[k] = {saturating_add(o.ranges[k - 1].lo, lr.lo),
                   saturating_add(o.ranges[k - 1].hi, lr.hi)};
    if (o.exprs[k - 1] == nullptr) continue;
    Expr e = c.add(o.exprs[k - 1], lengths[k - 1]);
    if (e->kind != sym::ExprKind::Add || e->operands.size() <= 2) o.exprs[k] = e;
  }
  o.exprs[n] = c.sum(lengths);
  o.lengths = std::move(lengths);
  return o;
}

// The offsets for one body: bound symbols for those cat_offsets left to the body.
std::vector<Expr> running_offsets(LoweringContext& ctx, BodyBuilder& b, const CatOffsets& o) {
  sym::Context& c = ctx.ctx();
  std::vector<Expr> out = o.exprs;
  InstrId prev = -1;  // the value of out[k - 1] when it is a bound symbol
  for (size_t k = 1; k + 1 < out.size(); ++k) {
    if (out[k] != nullptr) continue;
    InstrId base = prev >= 0 ? prev : b.index_expr(out[k - 1]);
    InstrId v = b.op(InstrKind::Add, DType::Int64, base, b.index_expr(o.lengths[k - 1]));
    out[k] = ctx.fresh_vars(1, 't')[0];
    c.set_range(out[k], o.ranges[k]);
    prev = b.indirect(v, out[k]);
  }
  return out;
}

// A cat of many pieces as an extern (Inductor's ConcatKernel): each piece is copied into its
// slice of the output at run time, so nothing in the kernels grows with the piece count. The
// where-chain that a pointwise cat inlines into every reader tests every piece per element:
// at 64 pieces 256 conditional instructions per element in the emitted source, and with
// symbolic lengths 64 running offsets and conditions that do not fold, which made g++ take
// 2.5x the static graph's time. The cost: the result is realized (one more pass over it).
// Where the host would run the extern through ATen (the GPU: LoweringPolicy::cat_by_copies
// off), the where-chain stays.
TensorValue cat_by_copies(LoweringContext& ctx, const Node& node,
                          const std::vector<TensorValue>& pieces, int64_t dim, DType dt) {
  sym::Context& c = ctx.ctx();
  loop::ExternNode e = extern_for(ctx, node, loop::ExternKind::Cat);
  std::vector<Expr> lengths;
  for (const TensorValue& p : pieces) {
    e.inputs.push_back(ctx.as_buffer(p));
    lengths.push_back(p.sizes[dim]);
  }
  std::vector<Expr> sizes = pieces[0].sizes;
  sizes[dim] = c.sum(lengths);
  loop::BufferId out = ctx.new_buffer(dt, std::move(sizes));
  e.outputs = {out};
  e.ints = {dim};
  ctx.add_extern(std::move(e));
  return ctx.from_buffer(out);
}

std::vector<TensorValue> lower_cat(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  std::vector<const TensorValue*> all = tensor_list(ctx, node.arg(0, "tensors"));
  DType dt = out_dtype(node);
  const size_t rank = node.output(0)->meta().sizes.size();
  int64_t dim = normalize_dim(int_arg(node, 1, "dim", 0), static_cast<int64_t>(rank));
  // Drop empty pieces: legacy 1-d [0] tensors and pieces of size 0 along `dim`.
  std::vector<TensorValue> pieces;
  for (const TensorValue* p : all) {
    if (p->sizes.size() != rank) {
      COIL_USER_CHECK(p->sizes.size() == 1 && c.as_const(p->sizes[0]) == 0)
          << "cat: tensors of different ranks";
      continue;
    }
    if (c.as_const(p->sizes[dim]) == 0) continue;
    pieces.push_back(cast_value(ctx, *p, dt));
  }
  if (pieces.empty()) {
    // Every piece is empty: the result is empty too.
    std::vector<Expr> sizes = node.output(0)->meta().sizes;
    return {ctx.pointwise(dt, sizes, [dt](BodyBuilder& b, const std::vector<Expr>&) {
      return b.constant(0, dtype_compute(dt));
    })};
  }
  if (pieces.size() == 1) return {pieces[0]};
  if (static_cast<int64_t>(pieces.size()) > ctx.options().max_pointwise_cat &&
      ctx.target().cat_by_copies) {
    return {cat_by_copies(ctx, node, pieces, dim, dt)};
  }
  std::vector<Expr> lengths;
  for (const TensorValue& p : pieces) lengths.push_back(p.sizes[dim]);
  CatOffsets offsets = cat_offsets(c, std::move(lengths));
  std::vector<Expr> sizes = pieces[0].sizes;
  sizes[dim] = offsets.exprs.back();
  int cost = 0, reads = 0;
  for (const TensorValue& p : pieces) {
    cost += p.inline_cost + 3;
    reads += p.inline_reads;
  }
  LoweringContext* lc = &ctx;
  auto loader = [pieces, offsets, dim, dt, cx, lc](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    const size_t n = pieces.size();
    std::vector<Expr> off = running_offsets(*lc, b, offsets);
    InstrId result = -1;
    for (size_t k = n; k-- > 0;) {
      std::vector<Expr> pi = idx;
      pi[dim] = c.sub(idx[dim], off[k]);
      Expr in_range = c.mul(c.le(off[k], idx[dim]), c.lt(idx[dim], off[k + 1]));
      if (result < 0) {
        // The last piece: positions not claimed by an earlier piece.
        result = load_or(b, c, pieces[k], pi, in_range, b.constant(0, dtype_compute(dt)));
      } else {
        result = load_or(b, c, pieces[k], pi, in_range, result);
      }
    }
    return result;
  };
  return {ctx.pointwise(dt, sizes, loader, cost, reads)};
}

// --- constant_pad_nd

std::vector<TensorValue> lower_constant_pad(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const Arg* pa = node.arg(1, "pad");
  COIL_USER_CHECK(pa && pa->is_list()) << "constant_pad_nd: pad must be a list";
  std::vector<Expr> pad;
  for (const Arg& e : pa->list()) {
    pad.push_back(e.is_sym() ? std::get<sym::Expr>(e.v) : c.constant(e.as_int()));
  }
  const Arg* va = node.arg(2, "value");
  double value = (va == nullptr || va->is_none()) ? 0.0 : va->as_double();
  const size_t rank = x.sizes.size();
  COIL_USER_CHECK(pad.size() % 2 == 0 && pad.size() / 2 <= rank)
      << "constant_pad_nd: bad pad length " << pad.size();
  std::vector<Expr> lo(rank, c.zero());
  std::vector<Expr> sizes = x.sizes;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    size_t d = rank - 1 - k;
    lo[d] = pad[2 * k];
    sizes[d] = c.add(c.add(x.sizes[d], pad[2 * k]), pad[2 * k + 1]);
    COIL_USER_CHECK(c.bounds(sizes[d]).hi >= 0) << "constant_pad_nd: negative output size";
  }
  DType dt = out_dtype(node);
  TensorValue xv = cast_value(ctx, x, dt);
  std::vector<Expr> in_sizes = x.sizes;
  auto loader = [xv, lo, in_sizes, value, dt, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    std::vector<Expr> src(idx.size());
    std::vector<Expr> conds;
    for (size_t d = 0; d < idx.size(); ++d) {
      src[d] = c.sub(idx[d], lo[d]);
      conds.push_back(c.le(c.zero(), src[d]));
      conds.push_back(c.lt(src[d], in_sizes[d]));
    }
    return load_or(b, c, xv, src, all_of(c, conds), b.constant(value, dtype_compute(dt)));
  };
  return {ctx.pointwise(dt, sizes, loader, x.inline_cost + 4, x.inline_reads)};
}

// --- embedding, index_select, gather, index.Tensor

std::vector<TensorValue> lower_embedding(LoweringContext& ctx, const Node& node) {
  const TensorValue& w = ctx.arg_value(node, 0, "weight");
  const TensorValue& ind = ctx.arg_value(node, 1, "indices");
  COIL_USER_CHECK(w.sizes.size() == 2) << "embedding: weight must be 2-d";
  COIL_USER_CHECK(!dtype_is_floating(ind.dtype) && ind.dtype != DType::Bool)
      << "embedding: integer indices expected";
  std::vector<Expr> sizes = ind.sizes;
  sizes.push_back(w.sizes[1]);
  Expr rows = w.sizes[0];
  LoweringContext* lc = &ctx;
  auto loader = [w, ind, rows, lc](BodyBuilder& b, const std::vector<Expr>& idx) {
    std::vector<Expr> ii(idx.begin(), idx.end() - 1);
    Expr t = indirect_index(*lc, b, ind.load(b, ii), rows, /*wrap_negative=*/false);
    return w.load(b, {t, idx.back()});
  };
  return {ctx.pointwise(w.dtype, sizes, loader, w.inline_cost + ind.inline_cost + 3,
                        w.inline_reads + ind.inline_reads)};
}

std::vector<TensorValue> lower_index_select(LoweringContext& ctx, const Node& node) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& ind = ctx.arg_value(node, 2, "index");
  COIL_USER_CHECK(ind.sizes.size() <= 1) << "index_select: index must be 0-d or 1-d";
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  if (rank == 0) {
    return {x};
  }
  int64_t dim = normalize_dim(node.arg(1, "dim")->as_int(), rank);
  std::vector<Expr> sizes = x.sizes;
  sizes[dim] = ind.sizes.empty() ? ctx.ctx().one() : ind.sizes[0];
  Expr n = x.sizes[dim];
  LoweringContext* lc = &ctx;
  auto loader = [x, ind, dim, n, lc](BodyBuilder& b, const std::vector<Expr>& idx) {
    std::vector<Expr> ii;
    if (!ind.sizes.empty()) ii.push_back(idx[dim]);
    std::vector<Expr> src = idx;
    src[dim] = indirect_index(*lc, b, ind.load(b, ii), n, /*wrap_negative=*/true);
    return x.load(b, src);
  };
  return {ctx.pointwise(x.dtype, sizes, loader, x.inline_cost + ind.inline_cost + 5,
                        x.inline_reads + ind.inline_reads)};
}

std::vector<TensorValue> lower_gather(LoweringContext& ctx, const Node& node) {
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& ind = ctx.arg_value(node, 2, "index");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  const int64_t ind_rank = static_cast<int64_t>(ind.sizes.size());
  if (ctx.ctx().as_const(numel(ctx.ctx(), ind.sizes)) == 0) {
    // An empty index (PyTorch then allows any rank): an empty result, nothing is read.
    return {ctx.pointwise(x.dtype, ind.sizes, [dt = x.dtype](BodyBuilder& b, const auto&) {
      return b.constant(0, dtype_compute(dt));
    })};
  }
  // PyTorch counts a 0-d tensor as 1-d here (ensure_nonempty_dim).
  COIL_USER_CHECK(std::max<int64_t>(ind_rank, 1) == std::max<int64_t>(rank, 1))
      << "gather: index must have the rank of self";
  int64_t dim = normalize_dim(node.arg(1, "dim")->as_int(), rank);
  Expr n = rank == 0 ? ctx.ctx().one() : x.sizes[dim];
  LoweringContext* lc = &ctx;
  auto loader = [x, ind, dim, n, lc, rank](BodyBuilder& b, const std::vector<Expr>& idx) {
    // A 0-d self is read at no index at all; a 0-d index into a 1-d self reads position t.
    Expr t = indirect_index(*lc, b, ind.load(b, idx), n, /*wrap_negative=*/true);
    std::vector<Expr> src = rank == 0     ? std::vector<Expr>{}
                            : idx.empty() ? std::vector<Expr>{t}
                                          : idx;
    if (!src.empty()) src[dim] = t;
    return x.load(b, src);
  };
  return {ctx.pointwise(x.dtype, ind.sizes, loader, x.inline_cost + ind.inline_cost + 5,
                        x.inline_reads + ind.inline_reads)};
}

// Advanced indexing: the index tensors (None entries skipped) broadcast to one shape B. When the
// indexed dims are adjacent, B replaces them in place, else B goes first (PyTorch's rule).
struct AdvancedIndex {
  std::vector<int64_t> dims;                // indexed dims of self, ascending
  std::vector<const TensorValue*> tensors;  // one per indexed dim
  std::vector<Expr> bshape;                 // broadcast shape B
  bool front = false;                       // B goes first
  int64_t first = 0;                        // where B starts in the result (when !front)
};

AdvancedIndex plan_advanced_index(LoweringContext& ctx, const Arg* list, int64_t rank) {
  COIL_USER_CHECK(list && list->is_list()) << "index: indices must be a list";
  AdvancedIndex ai;
  int64_t d = 0;
  for (const Arg& e : list->list()) {
    if (e.is_value()) {
      const TensorValue& t = ctx.value(e.value());
      COIL_USER_CHECK(t.dtype != DType::Bool && t.dtype != DType::UInt8 &&
                      !dtype_is_floating(t.dtype))
          << "index with a " << dtype_name(t.dtype) << " (mask) tensor has a data-dependent shape";
      ai.dims.push_back(d);
      ai.tensors.push_back(&t);
      ai.bshape =
          ai.tensors.size() == 1 ? t.sizes : broadcast_shapes(ctx.ctx(), ai.bshape, t.sizes);
    } else {
      COIL_USER_CHECK(e.is_none()) << "index: entries must be tensors or None";
    }
    ++d;
  }
  COIL_USER_CHECK(d <= std::max<int64_t>(rank, 1)) << "index: too many indices";
  COIL_USER_CHECK(!ai.dims.empty()) << "index: no index tensors";
  for (size_t k = 1; k < ai.dims.size(); ++k) {
    if (ai.dims[k] != ai.dims[k - 1] + 1) ai.front = true;
  }
  ai.first = ai.front ? 0 : ai.dims[0];
  return ai;
}

std::vector<TensorValue> lower_index(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(rank > 0) << "index of a 0-d tensor";
  AdvancedIndex ai = plan_advanced_index(ctx, node.arg(1, "indices"), rank);
  // Result: the non-indexed dims in order, with B inserted at `ai.first` among them (front) or
  // where the indexed block was.
  std::vector<int64_t> rest;  // non-indexed dims of self
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(ai.dims.begin(), ai.dims.end(), d) == ai.dims.end()) rest.push_back(d);
  }
  // Number of rest dims before B.
  size_t before = 0;
  if (!ai.front) {
    while (before < rest.size() && rest[before] < ai.dims[0]) ++before;
  }
  std::vector<Expr> sizes;
  for (size_t k = 0; k < before; ++k) sizes.push_back(x.sizes[rest[k]]);
  for (Expr e : ai.bshape) sizes.push_back(e);
  for (size_t k = before; k < rest.size(); ++k) sizes.push_back(x.sizes[rest[k]]);

  std::vector<TensorValue> tensors;
  int cost = x.inline_cost, reads = x.inline_reads;
  for (const TensorValue* t : ai.tensors) {
    tensors.push_back(*t);
    cost += t->inline_cost + 5;
    reads += t->inline_reads;
  }
  LoweringContext* lc = &ctx;
  const size_t nb = ai.bshape.size();
  auto loader = [x, ai, tensors, rest, before, nb, lc, cx](BodyBuilder& b,
                                                           const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    std::vector<Expr> bidx(idx.begin() + before, idx.begin() + before + nb);
    std::vector<Expr> src(x.sizes.size());
    for (size_t k = 0; k < rest.size(); ++k) {
      src[rest[k]] = idx[k < before ? k : k + nb];
    }
    for (size_t j = 0; j < ai.dims.size(); ++j) {
      const TensorValue& t = tensors[j];
      InstrId v = t.load(b, broadcast_index(c, t.sizes, bidx));
      src[ai.dims[j]] = indirect_index(*lc, b, v, x.sizes[ai.dims[j]], /*wrap_negative=*/true);
    }
    return x.load(b, src);
  };
  return {ctx.pointwise(x.dtype, sizes, loader, cost, reads)};
}

// --- select_scatter, slice_scatter

std::vector<TensorValue> lower_select_scatter(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& src = ctx.arg_value(node, 1, "src");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(rank > 0) << "select_scatter on a 0-d tensor";
  int64_t dim = normalize_dim(node.arg(2, "dim")->as_int(), rank);
  int64_t index = node.arg(3, "index")->as_int();
  Expr at = index < 0 ? c.add(x.sizes[dim], c.constant(index)) : c.constant(index);
  DType dt = x.dtype;
  TensorValue sv = cast_value(ctx, src, dt);
  auto loader = [x, sv, dim, at, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    std::vector<Expr> si = idx;
    si.erase(si.begin() + dim);
    return load_or(b, c, sv, si, c.eq(idx[dim], at), x.load(b, idx));
  };
  return {ctx.pointwise(dt, x.sizes, loader, x.inline_cost + sv.inline_cost + 4,
                        x.inline_reads + sv.inline_reads)};
}

std::vector<TensorValue> lower_slice_scatter(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& src = ctx.arg_value(node, 1, "src");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(rank > 0) << "slice_scatter on a 0-d tensor";
  int64_t dim = normalize_dim(int_arg(node, 2, "dim", 0), rank);
  Expr n = x.sizes[dim];
  // start/end: None, ints (possibly negative or past the end), or sym expressions.
  auto bound = [&](size_t i, std::string_view name, Expr def) -> Expr {
    const Arg* a = node.arg(i, name);
    if (a == nullptr || a->is_none()) return def;
    Expr e;
    if (a->is_sym()) {
      e = std::get<sym::Expr>(a->v);
    } else {
      int64_t v = a->as_int();
      if (v < 0) {
        e = c.add(n, c.constant(v));
      } else {
        e = c.constant(std::min<int64_t>(v, sym::kMaxSize));
      }
    }
    return c.min(c.max(e, c.zero()), n);
  };
  Expr start = bound(3, "start", c.zero());
  Expr end = bound(4, "end", n);
  int64_t step = int_arg(node, 5, "step", 1);
  COIL_USER_CHECK(step >= 1) << "slice_scatter: step must be positive";
  DType dt = x.dtype;
  TensorValue sv = cast_value(ctx, src, dt);
  auto loader = [x, sv, dim, start, end, step, cx](BodyBuilder& b, const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    Expr rel = c.sub(idx[dim], start);
    std::vector<Expr> conds{c.le(start, idx[dim]), c.lt(idx[dim], end)};
    if (step != 1) conds.push_back(c.eq(c.mod(rel, c.constant(step)), c.zero()));
    std::vector<Expr> si = idx;
    si[dim] = step == 1 ? rel : c.floordiv(rel, c.constant(step));
    return load_or(b, c, sv, si, all_of(c, conds), x.load(b, idx));
  };
  return {ctx.pointwise(dt, x.sizes, loader, x.inline_cost + sv.inline_cost + 6,
                        x.inline_reads + sv.inline_reads)};
}

// as_strided_scatter(self, src, size, stride, offset): self's values, with the elements that
// self.as_strided(size, stride, offset) would see replaced by src's. Lowered like slice_scatter
// where that strided view is a box of the output's dense layout: every view dim of size > 1
// steps along one output dim (by that dim's stride), and the offset is a corner inside the
// output. Then an output element is in the view when each such dim's index lies in its range
// and every other dim's index equals the corner's. Anything else (overlapping or skewed views)
// runs in ATen.
std::vector<TensorValue> lower_as_strided_scatter(LoweringContext& ctx, const Node& node) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& src = ctx.arg_value(node, 1, "src");
  const TensorMeta& meta = node.output(0)->meta();
  const std::vector<int64_t> size = ints_arg(node, 2, "size");
  const std::vector<int64_t> stride = ints_arg(node, 3, "stride");
  const Arg* off_arg = node.arg(4, "storage_offset");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  std::vector<int64_t> out_sizes, out_strides;
  bool box = size.size() == stride.size() && size.size() == src.sizes.size() &&
             (off_arg == nullptr || off_arg->is_none() || !off_arg->is_sym());
  for (int64_t d = 0; box && d < rank; ++d) {
    const auto n = c.as_const(meta.sizes[d]), st = c.as_const(meta.strides[d]);
    box = n && st;
    if (box) {
      out_sizes.push_back(*n);
      out_strides.push_back(*st);
    }
  }
  int64_t offset = 0;
  if (box && off_arg != nullptr && !off_arg->is_none()) offset = off_arg->as_int();
  // The corner: offset decomposed along the output's dims, largest stride first (dense).
  std::vector<int64_t> corner(rank, 0), order(rank);
  for (int64_t d = 0; d < rank; ++d) order[d] = d;
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return out_strides[a] > out_strides[b]; });
  int64_t rest = offset;
  for (int64_t d : order) {
    if (!box) break;
    if (out_sizes[d] == 1 || out_strides[d] == 0) continue;
    corner[d] = rest / out_strides[d];
    rest -= corner[d] * out_strides[d];
    box = corner[d] < out_sizes[d];
  }
  box = box && rest == 0;
  // Which output dim each view dim of size > 1 steps along.
  std::vector<int64_t> along(size.size(), -1);
  std::vector<bool> used(rank, false);
  for (size_t e = 0; box && e < size.size(); ++e) {
    if (size[e] == 1) continue;
    box = false;
    for (int64_t d = 0; d < rank; ++d) {
      if (!used[d] && out_sizes[d] > 1 && out_strides[d] == stride[e] &&
          corner[d] + size[e] <= out_sizes[d]) {
        along[e] = d;
        used[d] = true;
        box = true;
        break;
      }
    }
  }
  if (!box) return aten_extern(ctx, node);
  const DType dt = x.dtype;
  TensorValue sv = cast_value(ctx, src, dt);
  auto loader = [x, sv, along, used, corner, rank, cx](BodyBuilder& b,
                                                       const std::vector<Expr>& idx) {
    sym::Context& c = *cx;
    std::vector<Expr> conds;
    for (int64_t d = 0; d < rank; ++d) {
      if (used[d]) continue;
      conds.push_back(c.eq(idx[d], c.constant(corner[d])));
    }
    std::vector<Expr> si(along.size(), c.zero());
    for (size_t e = 0; e < along.size(); ++e) {
      if (along[e] < 0) continue;
      const int64_t d = along[e];
      si[e] = c.sub(idx[d], c.constant(corner[d]));
      conds.push_back(c.le(c.constant(corner[d]), idx[d]));
      conds.push_back(c.lt(si[e], sv.sizes[e]));
    }
    return load_or(b, c, sv, si, all_of(c, conds), x.load(b, idx));
  };
  return {ctx.pointwise(dt, x.sizes, loader, x.inline_cost + sv.inline_cost + 6,
                        x.inline_reads + sv.inline_reads)};
}

// --- extern kernels: index_put, scatter, scatter_add, embedding_dense_backward

// IndexPut: inputs {self, index_0..index_{k-1}, values}, ints {accumulate, dim_0..dim_{k-1}}.
TensorValue index_put_extern(LoweringContext& ctx, const Node& node, const TensorValue& self,
                             const std::vector<int64_t>& dims,
                             const std::vector<TensorValue>& indices, const TensorValue& values,
                             bool accumulate, DType dt) {
  loop::ExternNode e = extern_for(ctx, node, loop::ExternKind::IndexPut);
  e.inputs.push_back(ctx.as_buffer(cast_value(ctx, self, dt)));
  for (const TensorValue& t : indices) e.inputs.push_back(ctx.as_buffer(t));
  e.inputs.push_back(ctx.as_buffer(cast_value(ctx, values, dt)));
  e.ints.push_back(accumulate ? 1 : 0);
  for (int64_t d : dims) e.ints.push_back(d);
  loop::BufferId out = ctx.new_buffer(dt, self.sizes);
  e.outputs.push_back(out);
  ctx.add_extern(std::move(e));
  return ctx.from_buffer(out);
}

// Whether the target scatters an accumulating index_put of `dt` itself (the GPU's atomic-add
// kernel, runtime/cuda_index.cpp: LoweringPolicy::device_scatter) rather than through ATen:
// float32 and float64 values.
bool scatter_on_device(const LoweringContext& ctx, DType dt) {
  return ctx.target().device_scatter && (dt == DType::Float32 || dt == DType::Float64);
}

std::vector<TensorValue> lower_index_put(LoweringContext& ctx, const Node& node) {
  bool accumulate = bool_arg(node, 3, "accumulate", false);
  const bool through_host = ctx.target().indexing_through_host;
  if (through_host && !(accumulate && scatter_on_device(ctx, out_dtype(node))))
    return aten_extern(ctx, node);
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(rank > 0) << "index_put on a 0-d tensor";
  AdvancedIndex ai = plan_advanced_index(ctx, node.arg(1, "indices"), rank);
  const TensorValue& values = ctx.arg_value(node, 2, "values");
  std::vector<TensorValue> idx;
  for (const TensorValue* t : ai.tensors) idx.push_back(*t);
  // On the GPU the node's own ATen call is the fallback for what the kernel refuses: its
  // inputs must be the node's (int64 indices as they are, no index planning beyond that).
  if (through_host) {
    bool plain = idx.size() == node.input_values().size() - 2;
    for (const TensorValue& t : idx) plain = plain && t.dtype == DType::Int64;
    if (!plain) return aten_extern(ctx, node);
  }
  return {index_put_extern(ctx, node, x, ai.dims, idx, values, accumulate, out_dtype(node))};
}

// The window of `v` with sizes `sizes` (each <= v's) at its origin: v itself re-sized when it
// is strided (no copy), else a pointwise over `sizes`.
TensorValue leading_window(LoweringContext& ctx, const TensorValue& v,
                           const std::vector<Expr>& sizes) {
  TensorValue w = v;
  w.sizes = sizes;
  if (!v.strided) {
    Loader inner = v.load;
    w = ctx.pointwise(v.dtype, sizes, inner, v.inline_cost, v.inline_reads);
  }
  return w;
}

// scatter with one index per line along `dim` (index of size 1 there, of self's size along
// every other dim): out[i] = i[dim] == index[i with dim 0] ? src[i with dim 0] (or value)
// : self[i], a pointwise that fuses with its neighbours. The one-hot of nll_loss's backward
// (scatter of -1 into zeros, then scaled, summed and subtracted) becomes one row kernel
// instead of a zero fill, a scatter and two passes over the [tokens, vocab] tensor. An index
// out of range (an error in eager) writes nothing. nullopt where the shapes differ.
std::optional<TensorValue> scatter_one_per_line(LoweringContext& ctx, const Node& node,
                                                const TensorValue& x, const TensorValue& index,
                                                int64_t dim, DType dt, bool has_src) {
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  if (index.sizes[dim] != c.one()) return std::nullopt;
  for (size_t d = 0; d < x.sizes.size(); ++d)
    if (static_cast<int64_t>(d) != dim && index.sizes[d] != x.sizes[d]) return std::nullopt;
  TensorValue xv = cast_value(ctx, x, dt);
  std::optional<TensorValue> src;
  double value = 0;
  if (has_src) {
    src = cast_value(ctx, ctx.arg_value(node, 3, "src"), dt);
  } else {
    value = node.arg(3, "value")->as_double();
  }
  auto loader = [xv, index, src, value, dim, dt, cx](BodyBuilder& b, const std::vector<Expr>& i) {
    std::vector<Expr> at = i;
    at[dim] = cx->zero();
    InstrId where = b.cast(index.load(b, at), DType::Int64);
    InstrId hit = b.op(InstrKind::Eq, DType::Bool, where, b.index_expr(i[dim]));
    const DType ct = dtype_compute(dt);
    InstrId v = src ? b.cast(src->load(b, at), ct) : b.constant(value, ct);
    return b.op(InstrKind::Where, ct, hit, v, b.cast(xv.load(b, i), ct));
  };
  // The index is one value per line: it counts as a load (as broadcast operands, pointwise.cpp).
  int cost = xv.inline_cost + 4 + (src ? src->inline_cost : 0);
  int reads = xv.inline_reads + index.inline_reads + (src ? src->inline_reads : 0);
  return ctx.pointwise(dt, x.sizes, loader, cost, reads);
}

// scatter.src / scatter.value: out = self; out[..., index[p], ...] = src[p] (or value). An
// IndexPut whose index tensors are `index` for `dim` and a zero-strided arange for every other
// dim (no extra kind for the runtime to implement).
std::vector<TensorValue> lower_scatter(LoweringContext& ctx, const Node& node, bool has_src) {
  sym::Context& c = ctx.ctx();
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& index = ctx.arg_value(node, 2, "index");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  COIL_USER_CHECK(rank > 0 && static_cast<int64_t>(index.sizes.size()) == rank)
      << "scatter: index must have the rank of self (and self be at least 1-d)";
  int64_t dim = normalize_dim(node.arg(1, "dim")->as_int(), rank);
  DType dt = out_dtype(node);
  if (auto one_hot = scatter_one_per_line(ctx, node, x, index, dim, dt, has_src)) return {*one_hot};
  if (ctx.target().indexing_through_host) return aten_extern(ctx, node);
  std::vector<TensorValue> indices;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    dims.push_back(d);
    if (d == dim) {
      indices.push_back(index);
      continue;
    }
    // arange(index.size(d)) realized once, viewed with stride 0 along the other dims.
    TensorValue ar = ctx.realize(ctx.pointwise(
        DType::Int64, {index.sizes[d]},
        [](BodyBuilder& b, const std::vector<Expr>& i) { return b.index_expr(i[0]); }));
    TensorValue v = ar;
    v.sizes = index.sizes;
    StridedRef s = *ar.strided;
    Expr st = s.strides[0];
    s.strides.assign(rank, c.zero());
    s.strides[d] = st;
    v.strided = s;
    v.load = [ar, d](BodyBuilder& b, const std::vector<Expr>& i) { return ar.load(b, {i[d]}); };
    indices.push_back(v);
  }
  TensorValue values;
  if (has_src) {
    values = leading_window(ctx, ctx.arg_value(node, 3, "src"), index.sizes);
  } else {
    double value = node.arg(3, "value")->as_double();
    values = ctx.pointwise(dt, {}, [value, dt](BodyBuilder& b, const std::vector<Expr>&) {
      return b.constant(value, dtype_compute(dt));
    });
  }
  return {index_put_extern(ctx, node, x, dims, indices, values, false, dt)};
}

std::vector<TensorValue> lower_scatter_add(LoweringContext& ctx, const Node& node) {
  if (ctx.target().indexing_through_host) return aten_extern(ctx, node);
  const TensorValue& x = ctx.arg_value(node, 0, "self");
  const TensorValue& index = ctx.arg_value(node, 2, "index");
  const TensorValue& src = ctx.arg_value(node, 3, "src");
  const int64_t rank = static_cast<int64_t>(x.sizes.size());
  // The runtime kernel's precondition, checked here so that other shapes fall back at compile
  // time instead of failing at run time.
  COIL_USER_CHECK(rank > 0 && static_cast<int64_t>(index.sizes.size()) == rank &&
                  static_cast<int64_t>(src.sizes.size()) == rank)
      << "scatter_add: index and src must have the rank of self (and self be at least 1-d)";
  int64_t dim = normalize_dim(node.arg(1, "dim")->as_int(), rank);
  DType dt = out_dtype(node);
  loop::ExternNode e = extern_for(ctx, node, loop::ExternKind::ScatterAdd);
  e.inputs = {ctx.as_buffer(cast_value(ctx, x, dt)), ctx.as_buffer(index),
              ctx.as_buffer(cast_value(ctx, src, dt))};
  e.ints = {dim};
  loop::BufferId out = ctx.new_buffer(dt, x.sizes);
  e.outputs = {out};
  ctx.add_extern(std::move(e));
  return {ctx.from_buffer(out)};
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
// zeros(num_weights, D) with rows indices[p] += grad[p] (rows equal to padding_idx get nothing),
// an accumulating IndexPut. scale_grad_by_freq needs per-index counts: not lowered (fallback).
std::vector<TensorValue> lower_embedding_backward(LoweringContext& ctx, const Node& node) {
  // On the GPU the runtime's atomic scatter takes every float32/float64 case (int64 flat
  // indices, one index dim), so ATen's call is never needed as a fallback there.
  if (ctx.target().indexing_through_host && !scatter_on_device(ctx, out_dtype(node)))
    return aten_extern(ctx, node);
  sym::Context& c = ctx.ctx();
  sym::Context* cx = &c;
  const TensorValue& grad = ctx.arg_value(node, 0, "grad_output");
  const TensorValue& ind = ctx.arg_value(node, 1, "indices");
  COIL_USER_CHECK(!bool_arg(node, 4, "scale_grad_by_freq", false))
      << "embedding_dense_backward with scale_grad_by_freq";
  const Arg* nw = node.arg(2, "num_weights");
  Expr rows = nw->is_sym() ? std::get<sym::Expr>(nw->v) : c.constant(nw->as_int());
  int64_t padding_idx = int_arg(node, 3, "padding_idx", -1);
  DType dt = out_dtype(node);
  Expr d = grad.sizes.back();
  // Flatten indices to [N] and grad to [N, D] (row-major unravel of the leading dims).
  std::vector<Expr> lead = ind.sizes;
  Expr n = c.product(lead);
  auto unravel = [lead, cx](Expr flat) {
    sym::Context& c = *cx;
    std::vector<Expr> out(lead.size());
    Expr rem = flat;
    for (size_t k = lead.size(); k-- > 0;) {
      if (k == 0) {
        out[k] = rem;
      } else {
        out[k] = c.mod(rem, lead[k]);
        rem = c.floordiv(rem, lead[k]);
      }
    }
    return out;
  };
  TensorValue flat_ind = ctx.pointwise(
      DType::Int64, {n},
      [ind, unravel](BodyBuilder& b, const std::vector<Expr>& i) {
        return b.cast(ind.load(b, unravel(i[0])), DType::Int64);
      },
      ind.inline_cost + 2, ind.inline_reads);
  TensorValue flat_grad = ctx.pointwise(
      dt, {n, d},
      [grad, ind, unravel, padding_idx, dt](BodyBuilder& b, const std::vector<Expr>& i) {
        std::vector<Expr> gi = unravel(i[0]);
        gi.push_back(i[1]);
        InstrId g = b.cast(grad.load(b, gi), dtype_compute(dt));
        if (padding_idx < 0) return g;
        InstrId iv = b.cast(ind.load(b, unravel(i[0])), DType::Int64);
        InstrId is_pad =
            b.op(InstrKind::Eq, DType::Bool, iv, b.int_constant(padding_idx, DType::Int64));
        return b.op(InstrKind::Where, dtype_compute(dt), is_pad, b.constant(0, dtype_compute(dt)),
                    g);
      },
      grad.inline_cost + ind.inline_cost + 4, grad.inline_reads + ind.inline_reads);
  TensorValue zeros = ctx.pointwise(dt, {rows, d}, [dt](BodyBuilder& b, const std::vector<Expr>&) {
    return b.constant(0, dtype_compute(dt));
  });
  return {index_put_extern(ctx, node, zeros, {0}, {flat_ind}, flat_grad, true, dt)};
}

}  // namespace

void register_index_lowerings(LoweringRegistry& r) {
  r.add("aten.cat.default", lower_cat);
  r.add("aten.constant_pad_nd.default", lower_constant_pad);
  r.add("aten.embedding.default", lower_embedding);
  r.add("aten.index_select.default", lower_index_select);
  r.add("aten.gather.default", lower_gather);
  r.add("aten.index.Tensor", lower_index);
  r.add("aten._unsafe_index.Tensor", lower_index);
  r.add("aten.select_scatter.default", lower_select_scatter);
  r.add("aten.slice_scatter.default", lower_slice_scatter);
  r.add("aten.as_strided_scatter.default", lower_as_strided_scatter);
  // Functional graphs (AOTAutograd) carry index_put; index_put_ is lowered functionally too.
  r.add("aten.index_put.default", lower_index_put);
  r.add("aten.index_put_.default", lower_index_put);
  r.add("aten._unsafe_index_put.default", lower_index_put);
  r.add("aten.scatter.src",
        [](LoweringContext& ctx, const Node& node) { return lower_scatter(ctx, node, true); });
  r.add("aten.scatter.value",
        [](LoweringContext& ctx, const Node& node) { return lower_scatter(ctx, node, false); });
  r.add("aten.scatter_add.default", lower_scatter_add);
  r.add("aten.embedding_dense_backward.default", lower_embedding_backward);
}

}  // namespace coil::lower
