#include <algorithm>
#include <string>

#include "coil/graph/tensor_meta.h"
#include "coil/lower/lowering.h"
#include "coil/lower/realize.h"
#include "coil/support/error.h"
#include "split_reduction.h"

namespace coil::lower {

using loop::BodyBuilder;
using loop::BufferId;
using loop::InstrId;

LoweringContext::LoweringContext(const Graph& graph, const CompileOptions& options,
                                 const backend::LoweringPolicy& target, loop::LoopProgram& program)
    : graph_(&graph), options_(&options), target_(&target), program_(&program) {
  int max_id = -1;
  for (const Value* v : graph.inputs()) max_id = std::max(max_id, v->id());
  for (const Node* n : graph.nodes()) {
    for (const Value* v : n->outputs()) max_id = std::max(max_id, v->id());
  }
  values_.resize(static_cast<size_t>(max_id + 1));
  owners_.resize(values_.size());
  if (program.ctx == nullptr) program.ctx = &graph.ctx();
}

sym::Context& LoweringContext::ctx() const { return graph_->ctx(); }

const TensorValue& LoweringContext::value(const Value* v) const {
  COIL_CHECK(v != nullptr);
  COIL_CHECK(v->id() >= 0 && static_cast<size_t>(v->id()) < values_.size() &&
             values_[v->id()].has_value())
      << "value %" << v->id() << " has not been lowered";
  return *values_[v->id()];
}

void LoweringContext::set_value(const Value* v, TensorValue tv) {
  COIL_CHECK(v != nullptr && v->id() >= 0);
  if (static_cast<size_t>(v->id()) >= values_.size()) {
    values_.resize(v->id() + 1);
    owners_.resize(v->id() + 1);
  }
  values_[v->id()] = std::move(tv);
  owners_[v->id()] = v;
}

const TensorValue& LoweringContext::arg_value(const Node& node, size_t i,
                                              std::string_view name) const {
  const Arg* a = node.arg(i, name);
  COIL_USER_CHECK(a != nullptr && a->is_value())
      << node.op() << ": argument " << i << (name.empty() ? "" : " (") << name
      << (name.empty() ? "" : ")") << " is not a tensor";
  return value(a->value());
}

TensorValue LoweringContext::pointwise(DType dtype, std::vector<sym::Expr> sizes, Loader load,
                                       int cost, int reads) {
  TensorValue tv;
  tv.dtype = dtype;
  tv.sizes = std::move(sizes);
  tv.load = std::move(load);
  tv.inline_cost = cost;
  tv.inline_reads = reads;
  return tv;
}

std::vector<sym::Expr> LoweringContext::fresh_vars(size_t n, char prefix) {
  std::vector<sym::Expr> out;
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    // Skip names the graph already uses for its own size symbols (a graph may name a size
    // t4; a fresh t4 would be that symbol, and the kernel would shadow it).
    std::string name;
    do {
      name = std::string(1, prefix) + std::to_string(next_var_++);
    } while (ctx().has_symbol(name));
    out.push_back(ctx().symbol(name, sym::Range{0, sym::kMaxSize}));
  }
  return out;
}

namespace {

// Index variables for `sizes`: size-1 dims get the constant 0 and no range; the others a fresh
// symbol with range [0, n-1].
struct IterSpace {
  std::vector<sym::Expr> index;   // one per dim
  std::vector<sym::Expr> ranges;  // non-trivial dims only
  std::vector<sym::Expr> vars;
};

}  // namespace

static IterSpace make_iter_space(LoweringContext& lc, const std::vector<sym::Expr>& sizes,
                                 char prefix) {
  sym::Context& c = lc.ctx();
  IterSpace it;
  for (sym::Expr n : sizes) {
    auto cn = c.as_const(n);
    if (cn && *cn == 1) {
      it.index.push_back(c.zero());
      continue;
    }
    sym::Expr v = lc.fresh_vars(1, prefix)[0];
    if (!cn) {
      // A symbolic extent: the simplifier then proves v < n, e.g. (8*v + x2)//(8*n) -> 0 and
      // v % n -> v, which numeric ranges cannot (docs/dynamic-shapes.md).
      c.set_upper_bound(v, n);
    } else {
      sym::Range nb = c.bounds(n);
      int64_t hi = nb.hi >= sym::kMaxSize ? sym::kMaxSize : nb.hi - 1;
      c.set_range(v, sym::Range{0, std::max<int64_t>(hi, 0)});
    }
    it.index.push_back(v);
    it.ranges.push_back(n);
    it.vars.push_back(v);
  }
  return it;
}

namespace {

// `r` rounded to the stored dtype and back (the last two instructions, as converted() in
// pointwise.cpp appends them for a bf16/f16 conversion): the store rounds to that dtype anyway
// and rounding twice gives the same value, so the round trip is dropped and `r`'s float32
// operand stored. Otherwise `r`.
InstrId drop_rounding_before_store(loop::Body& body, InstrId r, DType stored) {
  const DType compute = dtype_compute(stored);
  const auto n = static_cast<InstrId>(body.instrs.size());
  if (compute == stored || r != n - 1 || n < 2) return r;
  const loop::Instr& up = body.instrs[r];
  const loop::Instr& down = body.instrs[n - 2];
  if (up.kind != loop::InstrKind::Cast || up.dtype != compute || up.operands[0] != n - 2) return r;
  if (down.kind != loop::InstrKind::Cast || down.dtype != stored) return r;
  const InstrId inner = down.operands[0];
  if (inner < 0 || body.instrs[inner].dtype != compute) return r;
  body.instrs.resize(n - 2);
  return inner;
}

}  // namespace

TensorValue LoweringContext::realize_with_strides(const TensorValue& v,
                                                  std::vector<sym::Expr> strides) {
  COIL_CHECK(v.load) << "value has no loader";
  COIL_CHECK(strides.size() == v.sizes.size());
  BufferId out = new_buffer(v.dtype, v.sizes);
  program_->buffers[out].strides = std::move(strides);
  program_->buffers[out].device = v.device;
  store_into(out, v);
  TensorValue result = from_buffer(out);
  result.device = v.device;
  // Remember the realization when `v` is the stored value of a graph Value.
  for (auto& slot : values_) {
    if (slot.has_value() && &*slot == &v) {
      slot = result;
      break;
    }
  }
  return result;
}

void LoweringContext::store_into(BufferId out, const TensorValue& v) {
  const loop::Buffer& B = program_->buffer(out);
  COIL_CHECK(B.sizes.size() == v.sizes.size() && B.dtype == v.dtype)
      << "store_into " << B.name << ": value of another rank or dtype";
  loop::ComputeNode node;
  node.out = out;
  IterSpace it = make_iter_space(*this, v.sizes, 'i');
  node.ranges = it.ranges;
  node.index_vars = it.vars;
  BodyBuilder b(node.body);
  InstrId r = drop_rounding_before_store(node.body, v.load(b, it.index), v.dtype);
  node.body.result = b.cast(r, dtype_compute(v.dtype));
  node.store_index = it.index;
  loop::drop_unused_instrs(node.body);
  program_->steps.push_back(std::move(node));
}

const Value* LoweringContext::stored_value_of(const TensorValue& v) const {
  for (size_t id = 0; id < values_.size(); ++id)
    if (values_[id].has_value() && &*values_[id] == &v) return owners_[id];
  return nullptr;
}

TensorValue LoweringContext::realize(const TensorValue& v) {
  if (v.strided) return v;
  // A graph Value's stored value takes the Value's own dense layout (eager's strides: a
  // channels-last activation stays channels-last for the convolution that reads it).
  if (const Value* owner = stored_value_of(v)) return realize_like(v, owner->meta());
  return realize_with_strides(v, contiguous_strides(ctx(), v.sizes));
}

TensorValue LoweringContext::realize_like(const TensorValue& v, const TensorMeta& meta) {
  if (v.strided) return v;
  return realize_with_strides(v, dense_strides_like(ctx(), meta));
}

BufferId LoweringContext::as_buffer(const TensorValue& v) {
  TensorValue r = realize(v);
  COIL_CHECK(r.strided.has_value());
  const StridedRef& s = *r.strided;
  const loop::Buffer& base = program_->buffer(s.base);
  bool same = base.kind != loop::BufferKind::View && base.sizes == r.sizes &&
              base.strides == s.strides && (s.offset == nullptr || ctx().as_const(s.offset) == 0) &&
              (base.offset == nullptr || ctx().as_const(base.offset) == 0) && base.dtype == r.dtype;
  if (same) return s.base;
  loop::Buffer view;
  view.kind = loop::BufferKind::View;
  view.dtype = r.dtype;
  view.device = base.device;
  view.sizes = r.sizes;
  view.strides = s.strides;
  view.offset = (s.offset == nullptr || ctx().as_const(s.offset) == 0) ? nullptr : s.offset;
  view.view_of = s.base;
  return program_->add_buffer(std::move(view));
}

TensorValue LoweringContext::window(BufferId base, DType dtype, Device device,
                                    std::vector<sym::Expr> sizes, std::vector<sym::Expr> strides,
                                    sym::Expr offset) {
  loop::Buffer v;
  v.kind = loop::BufferKind::View;
  v.dtype = dtype;
  v.device = device;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  v.offset = offset && ctx().as_const(offset) != 0 ? offset : nullptr;
  v.view_of = base;
  TensorValue tv = from_buffer(program_->add_buffer(std::move(v)));
  tv.device = device;
  return tv;
}

bool LoweringContext::is_zero_padded(const TensorValue& v) const {
  if (!v.strided || v.sizes.size() != 2) return false;
  const StridedRef& s = *v.strided;
  for (const TensorValue& w : zero_padded_) {
    const StridedRef& ws = *w.strided;
    if (ws.base != s.base || ws.offset != s.offset) continue;
    if (v.sizes == w.sizes && s.strides == ws.strides) return true;
    if (v.sizes[0] == w.sizes[1] && v.sizes[1] == w.sizes[0] && s.strides[0] == ws.strides[1] &&
        s.strides[1] == ws.strides[0])
      return true;
  }
  return false;
}

TensorValue LoweringContext::from_buffer(BufferId id) {
  const loop::Buffer& buf = program_->buffer(id);
  TensorValue tv;
  tv.dtype = buf.dtype;
  tv.device = buf.device;
  tv.sizes = buf.sizes;
  DType ld = dtype_compute(buf.dtype);
  tv.load = [id, ld](BodyBuilder& b, const std::vector<sym::Expr>& index) {
    return b.load(id, ld, index);
  };
  StridedRef s;
  if (buf.kind == loop::BufferKind::View) {
    s.base = buf.view_of;
    s.offset = buf.offset;
  } else {
    s.base = id;
    s.offset = nullptr;  // an Input's storage offset is applied to its data pointer
  }
  s.strides = buf.strides;
  tv.strided = std::move(s);
  tv.inline_cost = 1;
  tv.inline_reads = 1;
  tv.full_read_buffers = std::vector<loop::BufferId>{tv.strided->base};
  tv.read_buffers = tv.full_read_buffers;
  return tv;
}

BufferId LoweringContext::new_buffer(DType dtype, std::vector<sym::Expr> sizes) {
  loop::Buffer b;
  b.kind = loop::BufferKind::Intermediate;
  b.dtype = dtype;
  b.strides = contiguous_strides(ctx(), sizes);
  b.sizes = std::move(sizes);
  return program_->add_buffer(std::move(b));
}

void LoweringContext::add_extern(loop::ExternNode node) {
  program_->steps.push_back(std::move(node));
}

TensorValue LoweringContext::reduce(loop::ReduceKind kind, DType dtype,
                                    std::vector<sym::Expr> out_sizes,
                                    std::vector<sym::Expr> reduction_sizes, ReduceBody body) {
  COIL_CHECK(kind != loop::ReduceKind::None);
  if (!target_->split_reductions) return reduce_node(kind, dtype, out_sizes, reduction_sizes, body);
  std::optional<detail::ReductionSplit> split = detail::plan_reduction_split(
      ctx(), kind, out_sizes, reduction_sizes, options_->split_reduction_min_elements,
      options_->split_reduction_min_length);
  if (!split) return reduce_node(kind, dtype, out_sizes, reduction_sizes, body);
  // Stage 1: partials [chunk dims..., outputs...], each over the rest of the reduction range.
  sym::Context& c = ctx();
  const size_t w = split->whole;
  const bool factored = split->factor > 1;
  std::vector<sym::Expr> chunk_sizes(reduction_sizes.begin(), reduction_sizes.begin() + w);
  std::vector<sym::Expr> rest;
  sym::Expr step = nullptr;  // a factored dim's chunk length
  if (factored) {
    chunk_sizes.push_back(c.constant(split->factor));
    step = c.constant(*c.as_const(reduction_sizes[w]) / split->factor);
    rest.push_back(step);
  }
  rest.insert(rest.end(), reduction_sizes.begin() + w + (factored ? 1 : 0), reduction_sizes.end());
  const size_t nchunk = chunk_sizes.size();
  std::vector<sym::Expr> partial_sizes = chunk_sizes;
  partial_sizes.insert(partial_sizes.end(), out_sizes.begin(), out_sizes.end());
  TensorValue partial = reduce_node(
      kind, dtype, partial_sizes, rest,
      [body, w, nchunk, factored, step, cp = &c](BodyBuilder& b, const std::vector<sym::Expr>& oi,
                                                 const std::vector<sym::Expr>& ri) {
        std::vector<sym::Expr> out(oi.begin() + static_cast<std::ptrdiff_t>(nchunk), oi.end());
        std::vector<sym::Expr> red(oi.begin(), oi.begin() + static_cast<std::ptrdiff_t>(w));
        size_t k = 0;
        if (factored) red.push_back(cp->add(cp->mul(oi[w], step), ri[k++]));
        red.insert(red.end(), ri.begin() + static_cast<std::ptrdiff_t>(k), ri.end());
        return body(b, out, red);
      });
  // Stage 2: the partials reduced over the chunk dims.
  return reduce_node(kind, dtype, std::move(out_sizes), chunk_sizes,
                     [partial](BodyBuilder& b, const std::vector<sym::Expr>& oi,
                               const std::vector<sym::Expr>& ri) {
                       std::vector<sym::Expr> idx = ri;
                       idx.insert(idx.end(), oi.begin(), oi.end());
                       return partial.load(b, idx);
                     });
}

TensorValue LoweringContext::reduce_node(loop::ReduceKind kind, DType dtype,
                                         std::vector<sym::Expr> out_sizes,
                                         std::vector<sym::Expr> reduction_sizes,
                                         const ReduceBody& body) {
  BufferId out = new_buffer(dtype, out_sizes);
  loop::ComputeNode node;
  node.out = out;
  node.reduce = kind;
  IterSpace it = make_iter_space(*this, out_sizes, 'i');
  IterSpace rt = make_iter_space(*this, reduction_sizes, 'r');
  node.ranges = it.ranges;
  node.index_vars = it.vars;
  node.reduction_ranges = rt.ranges;
  node.reduction_vars = rt.vars;
  BodyBuilder b(node.body);
  node.body.result = body(b, it.index, rt.index);
  node.store_index = it.index;
  loop::drop_unused_instrs(node.body);
  program_->steps.push_back(std::move(node));
  return from_buffer(out);
}

InstrId LoweringContext::rng_seed(BodyBuilder& b) {
  if (program_->rng_state < 0) {
    loop::Buffer st;
    st.kind = loop::BufferKind::Intermediate;
    st.dtype = DType::Int64;
    st.sizes = {ctx().constant(2)};
    st.strides = {ctx().one()};
    program_->rng_state = program_->add_buffer(std::move(st));
  }
  return b.load(program_->rng_state, DType::Int64, {ctx().zero()});
}

// Each op's range starts at a multiple of 4: a uniform draw's four consecutive elements then
// share one Philox block (runtime_headers/coil/philox.h), which the CUDA vector entry points
// compute once.
sym::Expr LoweringContext::reserve_rng_offsets(sym::Expr count) {
  if (rng_offset_ == nullptr) rng_offset_ = ctx().zero();
  sym::Expr base = rng_offset_;
  sym::Expr four = ctx().constant(4);
  rng_offset_ = ctx().add(
      rng_offset_, ctx().mul(ctx().floordiv(ctx().add(count, ctx().constant(3)), four), four));
  return base;
}

// ---------------------------------------------------------------------------------------------

std::vector<sym::Expr> broadcast_shapes(sym::Context& ctx, const std::vector<sym::Expr>& a,
                                        const std::vector<sym::Expr>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<sym::Expr> out(n);
  for (size_t k = 0; k < n; ++k) {
    sym::Expr x = k < n - a.size() ? nullptr : a[k - (n - a.size())];
    sym::Expr y = k < n - b.size() ? nullptr : b[k - (n - b.size())];
    if (x == nullptr) {
      out[k] = y;
    } else if (y == nullptr) {
      out[k] = x;
    } else if (x == y || ctx.provably_eq(x, y)) {
      out[k] = x;
    } else if (ctx.as_const(x) == 1) {
      out[k] = y;
    } else if (ctx.as_const(y) == 1) {
      out[k] = x;
    } else {
      COIL_UNSUPPORTED() << "cannot broadcast sizes " << ctx.str(x) << " and " << ctx.str(y);
    }
  }
  return out;
}

std::vector<sym::Expr> broadcast_index(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                                       const std::vector<sym::Expr>& index) {
  COIL_CHECK(sizes.size() <= index.size())
      << "broadcast_index: rank " << sizes.size() << " > " << index.size();
  size_t off = index.size() - sizes.size();
  std::vector<sym::Expr> out(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    out[k] = ctx.as_const(sizes[k]) == 1 ? ctx.zero() : index[off + k];
  }
  return out;
}

bool is_broadcast_in(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                     const std::vector<sym::Expr>& out) {
  if (sizes.size() > out.size()) return false;
  const size_t off = out.size() - sizes.size();
  for (size_t k = 0; k < out.size(); ++k) {
    if (ctx.as_const(out[k]) == 1) continue;
    if (k < off || ctx.as_const(sizes[k - off]) == 1) return true;
  }
  return false;
}

int64_t normalize_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  COIL_USER_CHECK(dim >= -r && dim < r)
      << "dimension " << dim << " out of range for a tensor of rank " << rank;
  return dim < 0 ? dim + r : dim;
}

}  // namespace coil::lower
