// Scheduling reads the backend's SchedulePolicy, not the buffers' device: the same CPU program
// fuses differently under another policy.
#include <gtest/gtest.h>

#include "../test_policies.h"
#include "coil/loop/interpreter.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"
#include "test_programs.h"

namespace coil::testing {
namespace {

// n independent tiny nodes (out_i = in_i + 1), CPU buffers.
void build_tiny_nodes(ProgramBuilder& b, int n) {
  const DType f = DType::Float32;
  for (int i = 0; i < n; ++i) {
    auto in = b.input(f, {b.c(1)});
    auto out = b.buffer(f, {b.c(1)});
    b.node(out, {b.c(1)}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& idx, auto&) {
      return bb.op(InstrKind::Add, f, bb.load(in, f, {idx[0]}), bb.constant(1.0, f));
    });
    b.p.outputs.push_back(out);
  }
}

TEST(SchedulePolicy, JoiningSmallKernelsIsThePolicysChoice) {
  ProgramBuilder b;
  build_tiny_nodes(b, 4);
  const CompileOptions o;
  EXPECT_EQ(sched::schedule_program(b.p, o, backend::cpu::cpu_policy()).kernels.size(), 4u);
  backend::TargetPolicy launches_cost;
  launches_cost.schedule.join_small_kernels = true;
  const sched::Schedule s = sched::schedule_program(b.p, o, launches_cost);
  EXPECT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("one launch"), std::string::npos) << s.fusion_log;
}

// x / rowsum(x) stored column-major, fused under the row sums: under the CPU policy the
// kernel's inner loop (over columns) would store at stride 64 while the unit-stride dim is its
// outer one, so the division starts a kernel of its own; a policy without that rule (the GPU's)
// fuses it.
TEST(SchedulePolicy, UnitStrideInnerLoopsIsThePolicysChoice) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  auto x = b.input(f, {b.c(64), b.c(32)});
  auto rowsum = b.buffer(f, {b.c(64), b.c(1)});
  b.node(rowsum, {b.c(64)}, {nullptr, b.ctx().zero()}, ReduceKind::Sum, {b.c(32)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(x, f, {i[0], r[0]});
         });
  auto out = b.buffer(f, {b.c(64), b.c(32)});
  b.p.buffers[out].strides = {b.c(1), b.c(64)};  // column-major
  b.node(out, {b.c(64), b.c(32)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.op(InstrKind::Div, f, bb.load(x, f, {i[0], i[1]}),
                        bb.load(rowsum, f, {i[0], b.ctx().zero()}));
         });
  b.p.outputs = {out};
  const CompileOptions o;
  const sched::Schedule cpu = sched::schedule_program(b.p, o, backend::cpu::cpu_policy());
  const sched::Schedule gpu = sched::schedule_program(b.p, o, backend::cuda::cuda_policy());
  EXPECT_EQ(cpu.kernels.size(), 2u) << cpu.fusion_log;
  EXPECT_EQ(gpu.kernels.size(), 1u) << gpu.fusion_log;
}

// A per-image sum s[n] = sum(w[n, :]) and a large pointwise out[n, c, p] = x[n, c, p] * w[n, c]
// share the input w. Joined, the kernel's outer points are the 32 images, and each would run
// 64 x 4096 of the pointwise's elements in one block: the GPU policy refuses that
// (max_work_per_outer_point), the CPU's, without a limit, takes the shared read.
TEST(SchedulePolicy, SerialWorkPerOuterPointIsThePolicysLimit) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  auto w = b.input(f, {b.c(32), b.c(64)});
  auto x = b.input(f, {b.c(32), b.c(64), b.c(4096)});
  auto sum = b.buffer(f, {b.c(32)});
  b.node(sum, {b.c(32)}, {nullptr}, ReduceKind::Sum, {b.c(64)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(w, f, {i[0], r[0]});
         });
  auto out = b.buffer(f, {b.c(32), b.c(64), b.c(4096)});
  b.node(out, {b.c(32), b.c(64), b.c(4096)}, {nullptr, nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1], i[2]}),
                        bb.load(w, f, {i[0], i[1]}));
         });
  b.p.outputs = {sum, out};
  const CompileOptions o;
  const sched::Schedule cpu = sched::schedule_program(b.p, o, backend::cpu::cpu_policy());
  EXPECT_EQ(cpu.kernels.size(), 1u) << cpu.fusion_log;
  for (auto& buffer : b.p.buffers) buffer.device = Device::CUDA;
  const sched::Schedule gpu = sched::schedule_program(b.p, o, backend::cuda::cuda_policy());
  EXPECT_EQ(gpu.kernels.size(), 2u) << gpu.fusion_log;
  EXPECT_NE(gpu.fusion_log.find("would run 262144 elements at each of 32 outer points"),
            std::string::npos)
      << gpu.fusion_log;
}

// The program `build` makes, under the CPU policy (neither align rule): align changes nothing
// and its two nodes run as two kernels. Returns the program.
template <class Build>
ProgramBuilder expect_cpu_policy_keeps_apart(Build build) {
  ProgramBuilder plain;
  build(plain);
  EXPECT_EQ(sched::align_iteration_spaces(plain.p, backend::cpu::cpu_policy().schedule), "");
  EXPECT_EQ(
      sched::schedule_program(plain.p, CompileOptions{}, backend::cpu::cpu_policy()).kernels.size(),
      2u);
  return plain;
}

// A value stored through a transposed layout (a product's operand [C, R] with strides {1, C})
// and a pointwise node over the same memory [R, C] read the same input. Under a policy that
// puts pointwise nodes in their output's memory order both iterate [R, C] and share one
// kernel; otherwise their outer ranges differ ([C, R] vs [R, C]) and they stay apart.
TEST(SchedulePolicy, PointwiseInMemoryOrderIsThePolicysChoice) {
  auto build = [](ProgramBuilder& b) {
    const DType f = DType::Float32;
    Expr R = b.c(64), C = b.c(32);
    auto x = b.input(f, {R, C});
    auto t = b.buffer(f, {C, R});
    b.p.buffers[t].strides = {b.c(1), C};
    b.node(t, {C, R}, {nullptr, nullptr}, ReduceKind::None, {},
           [&](BodyBuilder& bb, auto& i, auto&) {
             return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[1], i[0]}), bb.constant(2.0, f));
           });
    auto u = b.buffer(f, {R, C});
    b.node(u, {R, C}, {nullptr, nullptr}, ReduceKind::None, {},
           [&](BodyBuilder& bb, auto& i, auto&) {
             return bb.op(InstrKind::Add, f, bb.load(x, f, {i[0], i[1]}), bb.constant(1.0, f));
           });
    b.p.outputs = {t, u};
  };
  const CompileOptions o;
  expect_cpu_policy_keeps_apart(build);
  ProgramBuilder ordered;
  build(ordered);
  backend::TargetPolicy policy = backend::cpu::cpu_policy();
  policy.schedule.pointwise_in_memory_order = true;
  const std::string log = sched::align_iteration_spaces(ordered.p, policy.schedule);
  EXPECT_NE(log.find("reordered buf1 [32, 64] -> [64, 32] (its memory order)"), std::string::npos)
      << log;
  const sched::Schedule s = sched::schedule_program(ordered.p, o, policy);
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].outer_ranges.size(), 2u);
  EXPECT_EQ(ordered.p.ctx->as_const(s.kernels[0].outer_ranges[0]), 64);
}

// u = x * 2 over [32, 16] and the row sums of the same x read as [8, 4] rows of 16 (a
// LayerNorm's output computed again for a weight gradient next to the LayerNorm gradient's
// row sums). Under a policy that splits pointwise nodes to the rows of a reduction reading the
// same input, u iterates [8, 4, 16] and joins the row kernel, one read of x for both; the
// split program computes what the plain one does (the interpreter); otherwise two kernels.
TEST(SchedulePolicy, SplittingToARowReadersRowsIsThePolicysChoice) {
  auto build = [](ProgramBuilder& b) {
    const DType f = DType::Float32;
    auto x = b.input(f, {b.c(32), b.c(16)});
    auto u = b.buffer(f, {b.c(32), b.c(16)});
    b.node(u, {b.c(32), b.c(16)}, {nullptr, nullptr}, ReduceKind::None, {},
           [&](BodyBuilder& bb, auto& i, auto&) {
             return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1]}), bb.constant(2.0, f));
           });
    auto rows = b.buffer(f, {b.c(8), b.c(4)});
    b.node(rows, {b.c(8), b.c(4)}, {nullptr, nullptr}, ReduceKind::Sum, {b.c(16)},
           [&](BodyBuilder& bb, auto& i, auto& r) {
             sym::Context& c = b.ctx();
             return bb.load(x, f, {c.add(c.mul(i[0], c.constant(4)), i[1]), r[0]});
           });
    b.p.outputs = {u, rows};
  };
  const CompileOptions o;
  const ProgramBuilder plain = expect_cpu_policy_keeps_apart(build);
  backend::TargetPolicy policy = backend::cpu::cpu_policy();
  policy.schedule.split_to_row_readers = true;
  ProgramBuilder opted_out;
  build(opted_out);
  CompileOptions off;
  off.split_to_row_readers = false;  // the option turns the policy's rule off
  EXPECT_EQ(sched::align_iteration_spaces(opted_out.p, policy.schedule, off), "");
  ProgramBuilder split;
  build(split);
  const std::string log = sched::align_iteration_spaces(split.p, policy.schedule);
  EXPECT_NE(log.find("split buf1 [32, 16] -> [8, 4, 16] to match the rows of a reduction"),
            std::string::npos)
      << log;
  std::vector<double> xs(32 * 16);
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = double(k % 29) - 7.5;
  const auto x = loop::HostTensor::from_doubles(DType::Float32, {32, 16}, xs);
  const auto want = loop::interpret(plain.p, {x});
  const auto got = loop::interpret(split.p, {x});
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].to_doubles(), want[k].to_doubles());
  const sched::Schedule s = sched::schedule_program(split.p, o, policy);
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].outer_ranges.size(), 2u);
}

}  // namespace
}  // namespace coil::testing
