// The portable backend: its kernels, compiled without OpenMP by the host compiler driver and
// run through the memory plan, against the reference interpreter; the source is scalar C++
// (no OpenMP or GCC pragmas, no vector types); the Backend interface's generate + build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../sched/test_programs.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/backend/portable/emit_portable.h"
#include "coil/backend/portable/portable_backend.h"
#include "coil/graph/parser.h"
#include "coil/loop/interpreter.h"
#include "coil/lower/lower.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"

namespace coil::testing {
namespace {

using loop::HostTensor;

struct PortableRun {
  std::vector<HostTensor> outputs;
  std::string code;
  std::string command;
  sched::Schedule schedule;
};

loop::BufferId root(const loop::LoopProgram& p, loop::BufferId b) {
  while (p.buffer(b).kind == loop::BufferKind::View) b = p.buffer(b).view_of;
  return b;
}

// Schedules with the portable backend's policy, generates and builds through its Backend
// interface, and runs the kernels as the runtime's host steps would (storages per the memory
// plan, poisoned on allocation and on free).
PortableRun compile_and_run(const loop::LoopProgram& p, const std::vector<HostTensor>& inputs) {
  PortableRun run;
  EXPECT_EQ(inputs.size(), p.inputs.size());
  if (inputs.size() != p.inputs.size()) return run;
  const auto backend = backend::portable::make_portable_backend();
  CompileOptions o;
  run.schedule = sched::schedule_program(p, o, backend->policy());
  const auto& s = run.schedule;
  backend::GeneratedCode code = backend->generate(p, s, o);
  run.code = code.text;
  backend::KernelModule m = backend->build(&code, p, s, o);
  EXPECT_EQ(m.steps, backend::RuntimeSteps::Host);
  EXPECT_EQ(m.host_entries.size(), s.kernels.size());
  run.command = m.compiler_command;
  static std::vector<std::shared_ptr<void>> keep_loaded;
  keep_loaded.push_back(m.library);
  std::unordered_map<sym::Expr, int64_t> env;
  std::vector<int64_t> sizes;
  for (const auto& ss : p.size_symbols) {
    const HostTensor& t = inputs.at(ss.input);
    int64_t v = ss.dim >= 0 ? t.sizes.at(ss.dim) : t.strides.at(-ss.dim - 1);
    env[ss.symbol] = v;
    sizes.push_back(v);
  }
  std::vector<std::shared_ptr<std::vector<unsigned char>>> storages(s.memory.storage_bytes.size());
  std::vector<void*> bufs(p.buffers.size(), nullptr);
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    const HostTensor& t = inputs[k];
    bufs[p.inputs[k]] = t.storage->data() + t.offset * dtype_size(t.dtype);
  }
  for (size_t t = 0; t < s.order.size(); ++t) {
    for (int sid : s.memory.alloc_before[t]) {
      int64_t bytes = p.ctx->evaluate(s.memory.storage_bytes[sid], env);
      storages[sid] = std::make_shared<std::vector<unsigned char>>(bytes, 0xff);
      for (size_t b = 0; b < p.buffers.size(); ++b)
        if (s.memory.buffer_storage[b] == sid) bufs[b] = storages[sid]->data();
    }
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (p.buffer(b).kind == loop::BufferKind::View) bufs[b] = bufs[root(p, b)];
    const auto& step = s.order[t];
    if (step.kind != sched::ScheduledStep::Kind::Kernel) {
      ADD_FAILURE() << "externs are not run here";
      return run;
    }
    using Fn = void (*)(void* const*, const int64_t*);
    reinterpret_cast<Fn>(m.host_entries.at(step.index))(bufs.data(), sizes.data());
    for (int sid : s.memory.free_after[t]) {
      std::memset(storages[sid]->data(), 0xff, storages[sid]->size());
      storages[sid].reset();
    }
  }
  for (loop::BufferId o : p.outputs) {
    const loop::Buffer& b = p.buffer(o);
    HostTensor t;
    t.dtype = b.dtype;
    for (auto e : b.sizes) t.sizes.push_back(p.ctx->evaluate(e, env));
    for (auto e : b.strides) t.strides.push_back(p.ctx->evaluate(e, env));
    t.offset = b.offset ? p.ctx->evaluate(b.offset, env) : 0;
    int sid = s.memory.buffer_storage.at(root(p, o));
    EXPECT_GE(sid, 0);
    if (sid >= 0) t.storage = storages.at(sid);
    run.outputs.push_back(t);
  }
  return run;
}

HostTensor random_tensor(DType t, std::vector<int64_t> sizes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0.0, 2.0);
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  std::vector<double> v(n);
  for (auto& x : v) x = d(gen);
  return HostTensor::from_doubles(t, std::move(sizes), v);
}

void expect_matches_interpreter(const loop::LoopProgram& p, const std::vector<HostTensor>& in,
                                const PortableRun& run, double rtol = 1e-5, double atol = 1e-6) {
  std::vector<HostTensor> want = loop::interpret(p, in);
  ASSERT_EQ(want.size(), run.outputs.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(run.outputs[k].sizes, want[k].sizes);
    std::vector<double> g = run.outputs[k].to_doubles(), w = want[k].to_doubles();
    int bad = 0;
    for (size_t i = 0; i < g.size() && bad < 5; ++i) {
      bool ok = (std::isnan(g[i]) && std::isnan(w[i])) ||
                std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "output " << k << "[" << i << "]: got " << g[i] << ", want " << w[i];
      }
    }
  }
}

// Scalar C++ that any host compiler builds, compiled without OpenMP or -march=native.
void expect_portable(const PortableRun& run) {
  for (const char* s : {"#pragma", "__restrict__", "omp_", "__m128", "__m256", "vector_size"})
    EXPECT_EQ(run.code.find(s), std::string::npos) << s << " in\n" << run.code;
  EXPECT_EQ(run.command.find("-fopenmp"), std::string::npos) << run.command;
  EXPECT_EQ(run.command.find("-march=native"), std::string::npos) << run.command;
}

TEST(EmitPortable, SoftmaxIsOneScalarKernel) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(16));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {8, 16}, 1)};
  PortableRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.schedule.kernels.size(), 1u) << run.schedule.fusion_log;
  EXPECT_NE(run.code.find("// Generated by coil (backend/portable)"), std::string::npos);
  // The max and sum are locals of the kernel: scalars, not buffers.
  EXPECT_NE(run.code.find("float buf1_v;"), std::string::npos) << run.code;
  expect_portable(run);
  expect_matches_interpreter(b.p, in, run);
}

TEST(EmitPortable, Bf16SoftmaxAndLayerNormMatchInterpreter) {
  ProgramBuilder b;
  build_softmax(b, b.c(4), b.c(40), DType::BFloat16);
  auto in = std::vector<HostTensor>{random_tensor(DType::BFloat16, {4, 40}, 2)};
  PortableRun run = compile_and_run(b.p, in);
  expect_portable(run);
  expect_matches_interpreter(b.p, in, run, 1e-2, 1e-2);

  ProgramBuilder ln;
  build_layer_norm(ln, ln.c(6), ln.c(33));
  auto lin = std::vector<HostTensor>{random_tensor(DType::Float32, {6, 33}, 3),
                                     random_tensor(DType::Float32, {33}, 4),
                                     random_tensor(DType::Float32, {33}, 5)};
  PortableRun lrun = compile_and_run(ln.p, lin);
  expect_portable(lrun);
  expect_matches_interpreter(ln.p, lin, lrun, 1e-4, 1e-5);
}

TEST(EmitPortable, ReductionsWithNanAndTies) {
  ProgramBuilder b;
  build_independent_reductions(b, b.c(8), b.c(16));
  std::vector<double> v(8 * 16);
  std::mt19937 gen(10);
  for (auto& x : v) x = static_cast<int>(gen() % 7) - 3;  // many ties
  v[2 * 16 + 5] = NAN;                                    // row 2: NaN in the middle
  v[5 * 16 + 0] = NAN;                                    // row 5: NaN first
  v[5 * 16 + 9] = NAN;
  for (int j = 0; j < 16; ++j) v[7 * 16 + j] = -1;  // row 7: all equal, none > 0
  auto in = std::vector<HostTensor>{HostTensor::from_doubles(DType::Float32, {8, 16}, v)};
  PortableRun run = compile_and_run(b.p, in);
  expect_portable(run);
  expect_matches_interpreter(b.p, in, run);
  auto mx = run.outputs[1].to_doubles(), am = run.outputs[3].to_doubles();
  auto any = run.outputs[4].to_doubles();
  EXPECT_TRUE(std::isnan(mx[2]) && std::isnan(mx[5]));
  EXPECT_EQ(am[2], 5);  // the NaN is the maximum
  EXPECT_EQ(am[5], 0);  // the first NaN
  EXPECT_EQ(am[7], 0);  // ties: the first
  EXPECT_EQ(any[7], 0);
}

TEST(EmitPortable, MaskedLoadsIndexExprsIntegersAndTransposes) {
  // out[i] = where(i + 1 < N, x[i + 1] (masked), -1) + float(floordiv(i - 5, 3))
  ProgramBuilder b;
  auto& ctx = b.ctx();
  const DType f = DType::Float32, i64 = DType::Int64;
  Expr N = b.c(50);
  auto x = b.input(f, {N});
  auto out = b.buffer(f, {N});
  b.node(out, {N}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    Expr next = ctx.add(i[0], ctx.one());
    InstrId m = bb.index_expr(ctx.lt(next, N), DType::Bool);
    InstrId ld = bb.load(x, f, {next}, m);
    InstrId w = bb.op(InstrKind::Where, f, m, ld, bb.constant(-1, f));
    InstrId q = bb.op(InstrKind::FloorDiv, i64,
                      bb.op(InstrKind::Sub, i64, bb.index_expr(i[0]), bb.int_constant(5, i64)),
                      bb.int_constant(3, i64));
    return bb.op(InstrKind::Add, f, w, bb.cast(q, f));
  });
  b.p.outputs = {out};
  auto in = std::vector<HostTensor>{random_tensor(f, {50}, 12)};
  PortableRun run = compile_and_run(b.p, in);
  expect_portable(run);
  expect_matches_interpreter(b.p, in, run);
  EXPECT_FLOAT_EQ(run.outputs[0].to_doubles()[49], -1 + std::floor((49 - 5) / 3.0));

  ProgramBuilder t;
  build_transposes(t, t.c(40), t.c(24));
  auto tin = std::vector<HostTensor>{random_tensor(f, {40, 24}, 11)};
  PortableRun trun = compile_and_run(t.p, tin);
  expect_portable(trun);
  expect_matches_interpreter(t.p, tin, trun);
}

TEST(EmitPortable, FullReductionsProdAllAndIntSum) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr N = b.c(5000);
  auto x = b.input(f, {N});
  auto s = b.buffer(f, {});
  b.node(s, {}, {}, ReduceKind::Sum, {N},
         [&](BodyBuilder& bb, auto&, auto& r) { return bb.load(x, f, {r[0]}); });
  auto out = b.buffer(f, {N});
  b.node(out, {N}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Sub, f, bb.load(x, f, {i[0]}), bb.load(s, f, {}));
  });
  auto all = b.buffer(DType::Bool, {});
  b.node(all, {}, {}, ReduceKind::All, {N}, [&](BodyBuilder& bb, auto&, auto& r) {
    return bb.op(InstrKind::Gt, DType::Bool, bb.load(x, f, {r[0]}), bb.constant(-100, f));
  });
  auto isum = b.buffer(DType::Int64, {});
  b.node(isum, {}, {}, ReduceKind::Sum, {N}, [&](BodyBuilder& bb, auto&, auto& r) {
    return bb.cast(bb.op(InstrKind::Gt, DType::Bool, bb.load(x, f, {r[0]}), bb.constant(0, f)),
                   DType::Int64);
  });
  auto prod = b.buffer(f, {});
  b.node(prod, {}, {}, ReduceKind::Prod, {b.c(20)},
         [&](BodyBuilder& bb, auto&, auto& r) { return bb.load(x, f, {r[0]}); });
  b.p.outputs = {out, all, isum, prod};
  auto in = std::vector<HostTensor>{random_tensor(f, {5000}, 13)};
  PortableRun run = compile_and_run(b.p, in);
  expect_portable(run);
  // Float sums accumulate in double.
  EXPECT_NE(run.code.find("double acc = double(0);"), std::string::npos) << run.code;
  expect_matches_interpreter(b.p, in, run, 1e-4, 1e-3);
}

// A graph lowered and scheduled with the portable backend's policy (the host defaults), with
// symbolic sizes: the kernels read the size symbols and match the interpreter.
TEST(EmitPortable, LoweredSymbolicGraphMatchesInterpreter) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[s0, 12], %1: f32[12]):\n"
      "  %2: f32[s0, 12] = aten.add.Tensor(%0, %1)\n"
      "  %3: f32[s0, 12] = aten.exp.default(%2)\n"
      "  %4: f32[s0, 1] = aten.sum.dim_IntList(%3, [1], true)\n"
      "  %5: f32[s0, 12] = aten.div.Tensor(%3, %4)\n"
      "  %6: f32[12, s0] = aten.permute.default(%5, [1, 0])\n"
      "  %7: f32[12, s0] = aten.mul.Tensor(%6, 2.0)\n"
      "  return (%5, %7)\n",
      ctx);
  const auto backend = backend::portable::make_portable_backend();
  CompileOptions o;
  o.strict = true;
  lower::LowerResult lowered = lower::lower_graph(*g, o, backend->policy());
  sched::align_iteration_spaces(lowered.program);
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {7, 12}, 21),
                                    random_tensor(DType::Float32, {12}, 22)};
  PortableRun run = compile_and_run(lowered.program, in);
  expect_portable(run);
  EXPECT_NE(run.code.find("const int64_t s0 = sizes[0];"), std::string::npos) << run.code;
  expect_matches_interpreter(lowered.program, in, run, 1e-5, 1e-6);
}

TEST(PortableBackend, IsAHostBackendWithTheHostPolicy) {
  const auto b = backend::portable::make_portable_backend();
  EXPECT_EQ(b->name(), "portable");
  EXPECT_EQ(b->device(), Device::CPU);
  const backend::TargetPolicy& p = b->policy();
  EXPECT_EQ(p.name, "portable");
  // A host target's choices: externs on host memory, the CPU's lowering and fusion rules.
  const backend::TargetPolicy host;
  EXPECT_EQ(p.lowering.indexing_through_host, host.lowering.indexing_through_host);
  EXPECT_EQ(p.lowering.native_convolutions, host.lowering.native_convolutions);
  EXPECT_EQ(p.schedule.join_small_kernels, host.schedule.join_small_kernels);
  EXPECT_EQ(p.schedule.unit_stride_inner_loops, host.schedule.unit_stride_inner_loops);
  // Nothing to compile: an empty host module.
  ProgramBuilder pb;
  pb.p.outputs = {pb.input(DType::Float32, {pb.c(4)})};
  const sched::Schedule s = sched::schedule_program(pb.p, {}, p);
  const backend::KernelModule m = b->build(nullptr, pb.p, s, {});
  EXPECT_EQ(m.steps, backend::RuntimeSteps::Host);
  EXPECT_TRUE(m.host_entries.empty());
}

}  // namespace
}  // namespace coil::testing
