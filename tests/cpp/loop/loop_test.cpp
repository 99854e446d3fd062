// Tests of the loop IR: BodyBuilder CSE, the printer, and the reference interpreter (checked
// against direct C++ computations).
#include <gtest/gtest.h>

#include <cmath>

#include "coil/loop/body.h"
#include "coil/loop/interpreter.h"
#include "coil/loop/printer.h"
#include "coil/loop/program.h"
#include "coil/support/error.h"

namespace coil::loop {
namespace {

Buffer make_buffer(sym::Context& c, BufferKind kind, DType t, std::vector<int64_t> sizes,
                   int input_index = -1) {
  Buffer b;
  b.kind = kind;
  b.dtype = t;
  int64_t s = 1;
  b.strides.resize(sizes.size());
  for (size_t k = sizes.size(); k-- > 0;) {
    b.strides[k] = c.constant(s);
    s *= sizes[k];
  }
  for (int64_t n : sizes) b.sizes.push_back(c.constant(n));
  b.input_index = input_index;
  return b;
}

TEST(Loop, KindNamesAndArity) {
  EXPECT_EQ(instr_kind_name(InstrKind::Load), "load");
  EXPECT_EQ(instr_kind_name(InstrKind::Add), "add");
  EXPECT_EQ(instr_kind_name(InstrKind::Where), "where");
  EXPECT_EQ(instr_kind_arity(InstrKind::Where), 3);
  EXPECT_EQ(instr_kind_arity(InstrKind::Exp), 1);
  EXPECT_EQ(instr_kind_arity(InstrKind::Load), 0);
  EXPECT_EQ(reduce_kind_name(ReduceKind::ArgMax), "argmax");
  EXPECT_EQ(extern_kind_name(ExternKind::Addmm), "addmm");
}

TEST(Loop, AddBufferNames) {
  sym::Context c;
  LoopProgram p;
  p.ctx = &c;
  EXPECT_EQ(p.add_buffer(make_buffer(c, BufferKind::Input, DType::Float32, {2}, 1)), 0);
  EXPECT_EQ(p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Float32, {2})), 1);
  EXPECT_EQ(p.buffers[0].name, "in1");
  EXPECT_EQ(p.buffers[1].name, "buf1");
}

TEST(Loop, BodyBuilderCse) {
  sym::Context c;
  Body body;
  BodyBuilder b(body);
  sym::Expr i0 = c.symbol("i0");
  InstrId x = b.load(0, DType::Float32, {i0});
  InstrId y = b.load(0, DType::Float32, {i0});
  EXPECT_EQ(x, y);
  InstrId z = b.load(0, DType::Float32, {c.add(i0, c.one())});
  EXPECT_NE(x, z);
  InstrId k1 = b.constant(2.0, DType::Float32), k2 = b.constant(2.0, DType::Float32);
  EXPECT_EQ(k1, k2);
  EXPECT_NE(b.constant(2.0, DType::Float64), k1);
  InstrId m1 = b.op(InstrKind::Mul, DType::Float32, x, k1);
  InstrId m2 = b.op(InstrKind::Mul, DType::Float32, y, k2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(b.cast(m1, DType::Float32), m1);
  EXPECT_EQ(body.instrs.size(), 5u);  // two loads, two constants, one mul
  // A second builder over the same body sees the existing instructions.
  BodyBuilder b2(body);
  EXPECT_EQ(b2.op(InstrKind::Mul, DType::Float32, x, k1), m1);
  // Constant casts fold.
  InstrId ci = b2.cast(b2.int_constant(3, DType::Int64), DType::Float32);
  EXPECT_EQ(body.instrs[ci].kind, InstrKind::Constant);
  EXPECT_EQ(body.instrs[ci].fvalue, 3.0);
  EXPECT_THROW(b2.op(InstrKind::Add, DType::Float32, x), InternalError);
}

// A folded cast leaves its source constant unread; a load's mask and an Indirect binding stay
// with what they guard. The kept instructions keep their order and are renumbered.
TEST(Loop, DropUnusedInstrs) {
  sym::Context c;
  Body body;
  BodyBuilder b(body);
  sym::Expr i0 = c.symbol("i0"), t = c.symbol("t0");
  InstrId idx = b.load(1, DType::Int64, {i0});
  b.indirect(idx, t);                                // binds t0 for the load below
  InstrId unused = b.load(2, DType::Float32, {i0});  // read by nothing
  InstrId mask =
      b.op(InstrKind::Lt, DType::Bool, b.index_expr(i0), b.int_constant(3, DType::Int64));
  InstrId x = b.load(0, DType::Float32, {t}, mask);
  InstrId k = b.cast(b.constant(0.3, DType::Float32), DType::BFloat16);  // 0.3 f32 stays behind
  body.result = b.op(InstrKind::Mul, DType::Float32, x, b.cast(k, DType::Float32));
  const size_t before = body.instrs.size();
  drop_unused_instrs(body);
  EXPECT_EQ(body.instrs.size(), before - 3);  // the unread load, 0.3 f32 and 0.30078125 bf16
  for (const Instr& in : body.instrs) {
    EXPECT_FALSE(in.kind == InstrKind::Load && in.buffer == 2);
    EXPECT_FALSE(in.kind == InstrKind::Constant && in.fvalue == 0.3);
    EXPECT_NE(in.dtype, DType::BFloat16);
  }
  const Instr& mul = body.instrs.at(static_cast<size_t>(body.result));
  ASSERT_EQ(mul.kind, InstrKind::Mul);
  const Instr& load = body.instrs.at(static_cast<size_t>(mul.operands[0]));
  EXPECT_EQ(load.kind, InstrKind::Load);
  EXPECT_EQ(body.instrs.at(static_cast<size_t>(load.mask)).kind, InstrKind::Lt);
  EXPECT_EQ(body.instrs.at(static_cast<size_t>(mul.operands[1])).fvalue, 0.30078125);
  EXPECT_EQ(body.instrs[1].kind, InstrKind::Indirect);
  EXPECT_EQ(body.instrs[1].operands[0], 0);
  (void)unused;
}
// out[i] = sum_r in0[i, r] * 2 + 1 as two nodes; mm of in0 and in1.
TEST(Loop, InterpreterReductionPointwiseAndMm) {
  sym::Context c;
  LoopProgram p;
  p.ctx = &c;
  BufferId in0 = p.add_buffer(make_buffer(c, BufferKind::Input, DType::Float32, {3, 4}, 0));
  BufferId in1 = p.add_buffer(make_buffer(c, BufferKind::Input, DType::Float32, {4, 2}, 1));
  BufferId red = p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Float32, {3}));
  BufferId out = p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Float64, {3}));
  BufferId mm = p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Float32, {3, 2}));
  BufferId am = p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Int64, {3}));
  p.inputs = {in0, in1};
  sym::Expr i0 = c.symbol("i0", {0, 2}), r0 = c.symbol("r0", {0, 3});
  {
    ComputeNode n;
    n.out = red;
    n.ranges = {c.constant(3)};
    n.index_vars = {i0};
    n.reduction_ranges = {c.constant(4)};
    n.reduction_vars = {r0};
    n.reduce = ReduceKind::Sum;
    BodyBuilder b(n.body);
    n.body.result = b.load(in0, DType::Float32, {i0, r0});
    n.store_index = {i0};
    p.steps.push_back(std::move(n));
  }
  {
    ComputeNode n;
    n.out = am;
    n.ranges = {c.constant(3)};
    n.index_vars = {i0};
    n.reduction_ranges = {c.constant(4)};
    n.reduction_vars = {r0};
    n.reduce = ReduceKind::ArgMax;
    BodyBuilder b(n.body);
    n.body.result = b.load(in0, DType::Float32, {i0, r0});
    n.store_index = {i0};
    p.steps.push_back(std::move(n));
  }
  {
    ComputeNode n;
    n.out = out;
    n.ranges = {c.constant(3)};
    n.index_vars = {i0};
    BodyBuilder b(n.body);
    InstrId v = b.cast(b.load(red, DType::Float32, {i0}), DType::Float64);
    InstrId w = b.op(InstrKind::Mul, DType::Float64, v, b.constant(2, DType::Float64));
    n.body.result = b.op(InstrKind::Add, DType::Float64, w, b.index_expr(i0, DType::Float64));
    n.store_index = {i0};
    p.steps.push_back(std::move(n));
  }
  ExternNode e;
  e.kind = ExternKind::Mm;
  e.inputs = {in0, in1};
  e.outputs = {mm};
  e.op = "aten.mm.default";
  p.steps.push_back(e);
  p.outputs = {out, mm, am};

  std::vector<double> a(12), bm(8);
  for (int k = 0; k < 12; ++k) a[k] = std::sin(k + 1.0);
  for (int k = 0; k < 8; ++k) bm[k] = std::cos(k * 0.5);
  auto ta = HostTensor::from_doubles(DType::Float32, {3, 4}, a);
  auto tb = HostTensor::from_doubles(DType::Float32, {4, 2}, bm);
  auto res = interpret(p, {ta, tb});
  ASSERT_EQ(res.size(), 3u);
  auto fa = ta.to_doubles(), fb = tb.to_doubles();
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    int best = 0;
    for (int r = 0; r < 4; ++r) {
      s += fa[i * 4 + r];
      if (fa[i * 4 + r] > fa[i * 4 + best]) best = r;
    }
    EXPECT_NEAR(res[0].get({{i}}), static_cast<float>(s) * 2 + i, 1e-6);
    EXPECT_EQ(res[2].get_int({{i}}), best);
    for (int j = 0; j < 2; ++j) {
      double m = 0;
      for (int k = 0; k < 4; ++k) m += fa[i * 4 + k] * fb[k * 2 + j];
      EXPECT_NEAR(res[1].get({{i, j}}), m, 1e-5);
    }
  }

  std::string text = print_program(p);
  EXPECT_NE(text.find("buf2: f32[3] = reduce sum over (i0 < 3) (r0 < 4):"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%0 = load in0[i0, r0] : f32"), std::string::npos) << text;
  EXPECT_NE(text.find("extern mm(in0, in1) -> (buf4)  # aten.mm.default"), std::string::npos)
      << text;
  EXPECT_EQ(text, print_program(p));  // deterministic
}

TEST(Loop, InterpreterViewsIntegersAndBounds) {
  sym::Context c;
  LoopProgram p;
  p.ctx = &c;
  BufferId in0 = p.add_buffer(make_buffer(c, BufferKind::Input, DType::Int32, {4, 4}, 0));
  // The transposed diagonal-ish window in0[1:3, ::2].T
  Buffer v;
  v.kind = BufferKind::View;
  v.dtype = DType::Int32;
  v.sizes = {c.constant(2), c.constant(2)};
  v.strides = {c.constant(2), c.constant(4)};
  v.offset = c.constant(4);
  v.view_of = in0;
  BufferId vw = p.add_buffer(v);
  BufferId out = p.add_buffer(make_buffer(c, BufferKind::Intermediate, DType::Int8, {2, 2}));
  p.inputs = {in0};
  sym::Expr i0 = c.symbol("i0", {0, 1}), i1 = c.symbol("i1", {0, 1});
  ComputeNode n;
  n.out = out;
  n.ranges = {c.constant(2), c.constant(2)};
  n.index_vars = {i0, i1};
  BodyBuilder b(n.body);
  InstrId x = b.load(vw, DType::Int32, {i0, i1});
  // (x * 100) wraps in int8; floordiv by -3 uses Python semantics.
  InstrId y = b.op(InstrKind::Mul, DType::Int32, x, b.int_constant(100, DType::Int32));
  InstrId q = b.op(InstrKind::FloorDiv, DType::Int32, y, b.int_constant(-3, DType::Int32));
  n.body.result = q;
  n.store_index = {i0, i1};
  p.steps.push_back(n);
  p.outputs = {out, vw};
  std::vector<double> a(16);
  for (int k = 0; k < 16; ++k) a[k] = k - 5;
  auto res = interpret(p, {HostTensor::from_doubles(DType::Int32, {4, 4}, a)});
  auto floordiv = [](int64_t x, int64_t y) {
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return q;
  };
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      int64_t e = static_cast<int64_t>(a[4 + 2 * i + 4 * j]);
      EXPECT_EQ(res[1].get_int({{i, j}}), e);
      EXPECT_EQ(res[0].get_int({{i, j}}), static_cast<int8_t>(floordiv(e * 100, -3)));
    }
  }
  // An out-of-range index is an InternalError, not a silent read.
  p.steps.clear();
  ComputeNode bad = n;
  bad.body = Body{};
  BodyBuilder bb(bad.body);
  bad.body.result = bb.load(in0, DType::Int32, {c.add(i0, c.constant(3)), i1});
  p.steps.push_back(bad);
  EXPECT_THROW(interpret(p, {HostTensor::from_doubles(DType::Int32, {4, 4}, a)}), InternalError);
}

TEST(Loop, HalfRoundingOnStore) {
  auto h = HostTensor::from_doubles(DType::Float16, {3}, {1.0 + 1.0 / 4096, 65520.0, 1e-8});
  auto v = h.to_doubles();
  EXPECT_EQ(v[0], 1.0);  // rounds to nearest even
  EXPECT_TRUE(std::isinf(v[1]));
  EXPECT_EQ(v[2], 0.0);
  auto bf = HostTensor::from_doubles(DType::BFloat16, {1}, {1.0 + 1.0 / 256});
  EXPECT_EQ(bf.to_doubles()[0], 1.0);
}

TEST(Loop, ReferenceRandom) {
  double sum = 0, sq = 0;
  for (int k = 0; k < 4000; ++k) {
    float u = reference_rand(7, k);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    float n = reference_randn(7, k);
    sq += static_cast<double>(n) * n;
  }
  EXPECT_NEAR(sum / 4000, 0.5, 0.03);
  EXPECT_NEAR(sq / 4000, 1.0, 0.1);
  EXPECT_NE(reference_rand(7, 0), reference_rand(8, 0));
}

}  // namespace
}  // namespace coil::loop
