// Emitted C++ kernels, compiled with the host compiler and run through the memory plan, against
// the reference interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "../sched/test_programs.h"
#include "../test_policies.h"
#include "coil/backend/cpu/emit_cpp.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/loop/interpreter.h"
#include "coil/sched/schedule.h"

namespace coil::testing {
namespace {

using backend::cpu::CppSource;
using loop::HostTensor;

struct KernelRun {
  std::vector<HostTensor> outputs;
  CppSource source;
  std::string log;
  sched::Schedule schedule;
};

loop::BufferId root(const loop::LoopProgram& p, loop::BufferId b) {
  while (p.buffer(b).kind == loop::BufferKind::View) b = p.buffer(b).view_of;
  return b;
}

// Runs the scheduled program as the runtime would: storages per the memory plan (poisoned with
// NaN bytes on allocation and on free), kernels in schedule order.
KernelRun compile_and_run(const loop::LoopProgram& p, const std::vector<HostTensor>& inputs,
                          CompileOptions o = {}) {
  KernelRun run;
  run.schedule = sched::schedule_program(p, o, coil::test_support::policy_for(p));
  const auto& s = run.schedule;
  run.source = backend::cpu::emit_cpp(p, s, o);
  auto compiled = backend::cpu::compile_and_load(run.source.code, o);
  // Never dlclose: unloading a library that brought in libgomp while its worker threads idle
  // crashes them.
  static std::vector<std::shared_ptr<backend::cpu::SharedLibrary>> keep_loaded;
  keep_loaded.push_back(compiled.library);
  run.log = compiled.log;
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
      for (size_t b = 0; b < p.buffers.size(); ++b) {
        if (s.memory.buffer_storage[b] == sid) bufs[b] = storages[sid]->data();
      }
    }
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (p.buffer(b).kind == loop::BufferKind::View) bufs[b] = bufs[root(p, b)];
    }
    const auto& step = s.order[t];
    if (step.kind != sched::ScheduledStep::Kind::Kernel) {
      ADD_FAILURE() << "externs are not run here";
      return run;
    }
    using Fn = void (*)(void* const*, const int64_t*);
    auto fn = reinterpret_cast<Fn>(compiled.entry(run.source.kernel_symbols.at(step.index)));
    fn(bufs.data(), sizes.data());
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
    EXPECT_TRUE(t.storage) << "output storage was freed";
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

void expect_close(const HostTensor& got, const HostTensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes, want.sizes) << what;
  std::vector<double> g = got.to_doubles(), w = want.to_doubles();
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    bool ok = (std::isnan(g[i]) && std::isnan(w[i])) ||
              std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: got " << g[i] << ", want " << w[i];
    }
  }
}

void expect_matches_interpreter(const loop::LoopProgram& p, const std::vector<HostTensor>& in,
                                const KernelRun& run, double rtol = 1e-5, double atol = 1e-6) {
  std::vector<HostTensor> want = loop::interpret(p, in);
  ASSERT_EQ(want.size(), run.outputs.size());
  for (size_t k = 0; k < want.size(); ++k) {
    expect_close(run.outputs[k], want[k], rtol, atol, "output " + std::to_string(k));
  }
}

// Source line spans [pragma, closing brace] (1-based) of the loops that carry
// `#pragma omp ... simd`. (gcc reports a vectorized omp simd loop at its pragma, its `for` or a
// body line.)
std::vector<std::pair<int, int>> simd_loop_lines(const std::string& code) {
  std::vector<std::string> lines;
  std::istringstream is(code);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  std::vector<std::pair<int, int>> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("#pragma omp") == std::string::npos ||
        lines[i].find("simd") == std::string::npos) {
      continue;
    }
    int depth = 0;
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      for (char c : lines[j]) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (depth == 0) break;
    }
    out.push_back({static_cast<int>(i + 1), static_cast<int>(j + 1)});
  }
  return out;
}

bool span_vectorized(const std::set<int>& vec, std::pair<int, int> span) {
  auto it = vec.lower_bound(span.first);
  return it != vec.end() && *it <= span.second;
}

// Lines the vectorizer report (-fopt-info-vec-optimized) says were vectorized.
std::set<int> vectorized_lines(const std::string& log) {
  std::set<int> out;
  std::regex re(R"(\.cpp:(\d+):\d+: optimized: loop vectorized)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    out.insert(std::stoi((*it)[1]));
  }
  return out;
}

// Compiles p with the vectorizer's report, checks its outputs against the interpreter and that
// g++ vectorized every simd loop; returns the run for checks of the source.
KernelRun run_with_every_simd_loop_vectorized(const loop::LoopProgram& p,
                                              const std::vector<HostTensor>& in) {
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(p, in, o);
  expect_matches_interpreter(p, in, run);
  auto loops = simd_loop_lines(run.source.code);
  EXPECT_GE(loops.size(), 1u) << run.source.code;
  for (const auto& loop : loops)
    EXPECT_TRUE(span_vectorized(vectorized_lines(run.log), loop)) << run.source.code << "\n"
                                                                  << run.log;
  return run;
}

TEST(EmitCpp, SoftmaxOneKernelMatchesInterpreter) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(16));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {8, 16}, 1)};
  KernelRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.source.kernel_symbols.size(), 1u);
  EXPECT_NE(run.source.code.find("//   step0 buf1 = reduce max [8] over [16] (local)"),
            std::string::npos)
      << run.source.code;
  EXPECT_NE(run.source.code.find("const float* __restrict__ in0 = (const float*)bufs[0];"),
            std::string::npos);
  // Small: no OpenMP parallel region.
  EXPECT_EQ(run.source.code.find("omp parallel"), std::string::npos) << run.source.code;
  expect_matches_interpreter(b.p, in, run);
}

TEST(EmitCpp, LargeSoftmaxIsParallelAndVectorized) {
  ProgramBuilder b;
  build_softmax(b, b.c(64), b.c(1000));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {64, 1000}, 2)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  EXPECT_NE(run.source.code.find("#pragma omp parallel for"), std::string::npos) << run.source.code;
  expect_matches_interpreter(b.p, in, run);
  auto loops = simd_loop_lines(run.source.code);
  EXPECT_EQ(loops.size(), 3u) << run.source.code;  // max, sum, normalize
  std::set<int> vec = vectorized_lines(run.log);
  for (auto l : loops) {
    EXPECT_TRUE(span_vectorized(vec, l)) << "loop at line " << l.first << " not vectorized\n"
                                         << run.source.code << "\n"
                                         << run.log;
  }
}

TEST(EmitCpp, SymbolicSoftmaxDecidesParallelAtRunTime) {
  ProgramBuilder b;
  Expr s0 = b.size_symbol("s0", 0, 0), s1 = b.size_symbol("s1", 0, 1);
  build_softmax(b, s0, s1);
  EXPECT_EQ(b.p.size_symbols.size(), 2u);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{3, 5}, {37, 129}, {300, 257}}) {
    auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {r, c}, 3)};
    KernelRun run = compile_and_run(b.p, in);
    EXPECT_NE(run.source.code.find("const int64_t s1 = sizes[1];"), std::string::npos);
    EXPECT_NE(run.source.code.find(" if("), std::string::npos) << run.source.code;
    expect_matches_interpreter(b.p, in, run);
  }
}

TEST(EmitCpp, Bf16SoftmaxMatchesInterpreter) {
  ProgramBuilder b;
  build_softmax(b, b.c(16), b.c(48), DType::BFloat16);
  auto in = std::vector<HostTensor>{random_tensor(DType::BFloat16, {16, 48}, 4)};
  KernelRun run = compile_and_run(b.p, in);
  EXPECT_NE(run.source.code.find("coil::to_bf16("), std::string::npos);
  EXPECT_NE(run.source.code.find("coil::to_f32(in0["), std::string::npos);
  expect_matches_interpreter(b.p, in, run, 1e-2, 1e-3);
}

TEST(EmitCpp, LayerNormMatchesInterpreter) {
  ProgramBuilder b;
  build_layer_norm(b, b.c(33), b.c(300));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {33, 300}, 5),
                                    random_tensor(DType::Float32, {300}, 6),
                                    random_tensor(DType::Float32, {300}, 7)};
  KernelRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.schedule.kernels.size(), 1u);
  expect_matches_interpreter(b.p, in, run, 1e-4, 1e-5);
}

TEST(EmitCpp, PointwiseChainVectorizes) {
  ProgramBuilder b;
  build_pointwise_chain(b, b.c(64), b.c(256));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {64, 256}, 8),
                                    random_tensor(DType::Float32, {64, 256}, 9)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run, 1e-5, 1e-6);
  auto loops = simd_loop_lines(run.source.code);
  ASSERT_EQ(loops.size(), 1u) << run.source.code;
  EXPECT_TRUE(span_vectorized(vectorized_lines(run.log), loops[0])) << run.source.code << "\n"
                                                                    << run.log;
}

// Dims just outside a short innermost loop fold into it where every access is chained across
// them: a [8, 16, 3, 3] scaled copy (a 3x3 weight's) runs one simd loop of 144 elements per x0,
// not 128 loops of 3. A body that reads an index (here i3 as a value) keeps its loops.
TEST(EmitCpp, ShortInnerLoopsFoldChainedDims) {
  const DType f = DType::Float32;
  ProgramBuilder b;
  std::vector<Expr> sizes = {b.c(8), b.c(16), b.c(3), b.c(3)};
  BufferId x = b.input(f, sizes);
  BufferId y = b.buffer(f, sizes);
  b.node(
      y, sizes, {nullptr, nullptr, nullptr, nullptr}, ReduceKind::None, {},
      [&](BodyBuilder& bb, auto& i, auto&) {
        return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1], i[2], i[3]}), bb.constant(2, f));
      });
  BufferId z = b.buffer(f, sizes);
  b.node(z, sizes, {nullptr, nullptr, nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.op(InstrKind::Add, f, bb.load(y, f, {i[0], i[1], i[2], i[3]}),
                        bb.cast(bb.index_expr(i[3]), f));
         });
  b.p.outputs = {y, z};
  auto in = std::vector<HostTensor>{random_tensor(f, {8, 16, 3, 3}, 21)};
  CompileOptions o;
  o.fuse = false;  // one kernel per node: the folded one and the one that reads its index
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  const std::string& code = run.source.code;
  EXPECT_NE(code.find("x3 < 144; ++x3"), std::string::npos) << code;
  EXPECT_NE(code.find("x3 < 3; ++x3"), std::string::npos) << code;
}

TEST(EmitCpp, ReductionsWithNanAndTies) {
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
  KernelRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.schedule.kernels.size(), 1u);
  expect_matches_interpreter(b.p, in, run);
  // Direct checks of PyTorch semantics.
  auto mx = run.outputs[1].to_doubles(), mn = run.outputs[2].to_doubles();
  auto am = run.outputs[3].to_doubles(), any = run.outputs[4].to_doubles();
  EXPECT_TRUE(std::isnan(mx[2]) && std::isnan(mn[2]) && std::isnan(mx[5]));
  EXPECT_EQ(am[2], 5);
  EXPECT_EQ(am[5], 0);
  EXPECT_EQ(am[7], 0);
  EXPECT_EQ(any[7], 0);
  for (int r = 0; r < 8; ++r) {
    if (r == 2 || r == 5) continue;
    int first = 0;
    for (int j = 1; j < 16; ++j) {
      if (v[r * 16 + j] > v[r * 16 + first]) first = j;
    }
    EXPECT_EQ(am[r], first) << "row " << r;
  }
}

TEST(EmitCpp, TransposesThroughReusedStorage) {
  ProgramBuilder b;
  build_transposes(b, b.c(40), b.c(24));
  auto in = std::vector<HostTensor>{random_tensor(DType::Float32, {40, 24}, 11)};
  KernelRun run = compile_and_run(b.p, in);
  EXPECT_EQ(run.schedule.kernels.size(), 4u);
  EXPECT_EQ(run.schedule.memory.buffer_storage[1], run.schedule.memory.buffer_storage[3]);
  expect_matches_interpreter(b.p, in, run);
}

TEST(EmitCpp, MaskedLoadsIndexExprsAndIntegers) {
  // out[i] = where(i + 1 < N, x[i + 1] (masked), -1) + float(floordiv(i - 5, 3)) + (i % 4 == 0)
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
    InstrId r =
        bb.op(InstrKind::Eq, DType::Bool,
              bb.op(InstrKind::Remainder, i64, bb.index_expr(i[0]), bb.int_constant(4, i64)),
              bb.int_constant(0, i64));
    InstrId sum = bb.op(InstrKind::Add, f, w, bb.cast(q, f));
    return bb.op(InstrKind::Add, f, sum, bb.cast(r, f));
  });
  b.p.outputs = {out};
  auto in = std::vector<HostTensor>{random_tensor(f, {50}, 12)};
  KernelRun run = compile_and_run(b.p, in);
  expect_matches_interpreter(b.p, in, run);
  auto got = run.outputs[0].to_doubles();
  EXPECT_FLOAT_EQ(got[49], -1 + std::floor((49 - 5) / 3.0) + 0);
  EXPECT_FLOAT_EQ(got[0], in[0].to_doubles()[1] + std::floor(-5 / 3.0) + 1);
}

}  // namespace
}  // namespace coil::testing

namespace coil::testing {
namespace {

// A full reduction (outer space []) followed by a pointwise consumer over [N]: one kernel, the
// reduction parallelized with an OpenMP reduction clause; plus prod / all / int sum reductions.
TEST(EmitCpp, FullReductionThenPointwise) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr N = b.c(100000);
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
  b.p.outputs = {out, all, isum};
  auto in = std::vector<HostTensor>{random_tensor(f, {100000}, 13)};
  KernelRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.schedule.kernels.size(), 1u) << run.schedule.fusion_log;
  EXPECT_EQ(run.schedule.kernels[0].local_buffers, std::vector<int>{s});
  // The float sum runs in parallel over blocks (blocked_sum); the int sum over elements.
  EXPECT_NE(run.source.code.find("#pragma omp parallel for reduction(+:acc_total)"),
            std::string::npos)
      << run.source.code;
  EXPECT_NE(run.source.code.find("#pragma omp parallel for simd reduction(+:acc)"),
            std::string::npos)
      << run.source.code;
  expect_matches_interpreter(b.p, in, run, 1e-4, 1e-3);
}

// Float sums accumulate in float over blocks and in double across them: a row sum, a sum over
// two dims and a column sum (channels-last layout) of 2^17 values near 1 each come within an
// ulp or two of the exact sum, and the inner loops stay vectorized. One float accumulator
// over the whole range was ~30 ulps off (BatchNorm statistics: bench/bn_depth_accuracy.py).
TEST(EmitCpp, FloatSumsAccumulateInBlocksAndStayVectorized) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t R = 1 << 17, H = 512, W = 256, C = 32;
  auto x = b.input(f, {b.c(R)});
  auto row = b.buffer(f, {});
  b.node(row, {}, {}, ReduceKind::Sum, {b.c(R)},
         [&](BodyBuilder& bb, auto&, auto& r) { return bb.load(x, f, {r[0]}); });
  auto two = b.buffer(f, {});
  b.node(two, {}, {}, ReduceKind::Sum, {b.c(H), b.c(W)}, [&](BodyBuilder& bb, auto&, auto& r) {
    return bb.load(x, f, {b.ctx().add(b.ctx().mul(r[0], b.c(W)), r[1])});
  });
  auto y = b.input(f, {b.c(C), b.c(R)});  // stored [R][C]: a column sum over R
  b.p.buffers[y].strides = {b.c(1), b.c(C)};
  auto col = b.buffer(f, {b.c(C)});
  b.node(col, {b.c(C)}, {nullptr}, ReduceKind::Sum, {b.c(R)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(y, f, {i[0], r[0]});
         });
  b.p.outputs = {row, two, col};
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(1.0, 2.0);
  std::vector<double> xs(R), ys(R * C);
  for (double& v : xs) v = float(u(gen));
  for (double& v : ys) v = float(u(gen));
  auto in = std::vector<HostTensor>{
      HostTensor::from_doubles(f, {R}, xs),
      HostTensor::from_doubles(f, {R, C}, ys).as_strided({C, R}, {1, C}, 0)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  double exact = 0;
  for (double v : xs) exact += v;
  auto near = [](double got, double want) { return std::abs(got - want) <= 2.5e-7 * want; };
  EXPECT_TRUE(near(run.outputs[0].to_doubles()[0], exact)) << run.outputs[0].to_doubles()[0];
  EXPECT_TRUE(near(run.outputs[1].to_doubles()[0], exact)) << run.outputs[1].to_doubles()[0];
  std::vector<double> cols = run.outputs[2].to_doubles();
  for (int64_t c = 0; c < C; ++c) {
    double want = 0;
    for (int64_t r = 0; r < R; ++r) want += ys[r * C + c];
    EXPECT_TRUE(near(cols[c], want)) << "column " << c << ": " << cols[c] << " vs " << want;
  }
  const std::string& code = run.source.code;
  EXPECT_NE(code.find("double acc_total = 0;"), std::string::npos) << code;
  EXPECT_NE(code.find("total[j] += acc[j];"), std::string::npos) << code;
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(code);
  ASSERT_EQ(loops.size(), 3u) << code;
  for (auto l : loops)
    EXPECT_TRUE(span_vectorized(vec, l)) << "loop at line " << l.first << " not vectorized\n"
                                         << code << "\n"
                                         << run.log;
}

TEST(EmitCpp, TransposedOperandsAreReadThroughTilesAndVectorize) {
  // out[i, j] = where(xt[i, j] > 0, xt[i, j] * y[i, j], exp(xt[i, j])), xt stored transposed,
  // and out2 = erf(xt) + 1 from a 3-d operand whose transposed load keeps a run-time stride
  // (no tile: the kernel's store is contiguous along j, the load along i only every other
  // dim). Sizes are not multiples of the tile, so the edge tiles are partial.
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t R = 70, C = 45;
  auto x = b.input(f, {b.c(R), b.c(C)});
  b.p.buffers[x].strides = {b.c(1), b.c(R)};
  auto y = b.input(f, {b.c(R), b.c(C)});
  auto out = b.buffer(f, {b.c(R), b.c(C)});
  b.node(out, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           InstrId xv = bb.load(x, f, {i[0], i[1]});
           InstrId pos = bb.op(InstrKind::Gt, DType::Bool, xv, bb.constant(0, f));
           InstrId prod = bb.op(InstrKind::Mul, f, xv, bb.load(y, f, {i[0], i[1]}));
           return bb.op(InstrKind::Where, f, pos, prod, bb.op(InstrKind::Exp, f, xv));
         });
  b.p.outputs = {out};
  std::vector<double> xs(R * C);
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (double& v : xs) v = float(u(gen));
  auto in =
      std::vector<HostTensor>{HostTensor::from_doubles(f, {C, R}, xs).as_strided({R, C}, {1, R}, 0),
                              random_tensor(f, {R, C}, 6)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  const std::string& code = run.source.code;
  EXPECT_NE(code.find("float tile0[256];"), std::string::npos) << code;
  EXPECT_NE(code.find("x0_b += 16"), std::string::npos) << code;
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(code);
  ASSERT_EQ(loops.size(), 1u) << code;
  EXPECT_TRUE(span_vectorized(vec, loops[0])) << code << "\n" << run.log;
}

TEST(EmitCpp, StridedLoadsOfASimdLoopTakeARuntimeStride) {
  // out[i, j, k] = erf(x[k, j, 2 i]) over [8, 3, 40], stored contiguously: along k the load
  // steps by 48 elements, and no dim of the load has unit stride, so there is no tile to copy:
  // the simd loop reads x with a stride gcc sees only at run time (it vectorizes no loop with
  // a large constant one).
  ProgramBuilder b;
  auto& ctx = b.ctx();
  const DType f = DType::Float32;
  auto x = b.input(f, {b.c(40), b.c(3), b.c(16)});
  auto out = b.buffer(f, {b.c(8), b.c(3), b.c(40)});
  b.node(out, {b.c(8), b.c(3), b.c(40)}, {nullptr, nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           Expr twice = ctx.mul(i[0], b.c(2));
           return bb.op(InstrKind::Erf, f, bb.load(x, f, {i[2], i[1], twice}));
         });
  b.p.outputs = {out};
  auto in = std::vector<HostTensor>{random_tensor(f, {40, 3, 16}, 7)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  const std::string& code = run.source.code;
  EXPECT_NE(code.find("coil::runtime_value(48)"), std::string::npos) << code;
  EXPECT_EQ(code.find("tile0"), std::string::npos) << code;
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(code);
  ASSERT_EQ(loops.size(), 1u) << code;
  EXPECT_TRUE(span_vectorized(vec, loops[0])) << code << "\n" << run.log;
}

TEST(EmitCpp, SeveralColumnSumsEachRunOverBlocksOfColumns) {
  // Two column sums of y [64, 128] over differently shaped row loops (64, and 2 x 32), and a
  // pointwise member reading both, in one kernel: each sum accumulates blocks of columns in
  // a vector loop (emit_outer_reduction_block) instead of striding down each column alone.
  ProgramBuilder b;
  auto& ctx = b.ctx();
  const DType f = DType::Float32;
  const int64_t R = 64, C = 128;
  auto y = b.input(f, {b.c(R), b.c(C)});
  auto s1 = b.buffer(f, {b.c(C)});
  b.node(s1, {b.c(C)}, {nullptr}, ReduceKind::Sum, {b.c(R)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(y, f, {r[0], i[0]});
         });
  auto s2 = b.buffer(f, {b.c(C)});
  b.node(s2, {b.c(C)}, {nullptr}, ReduceKind::Sum, {b.c(2), b.c(32)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           Expr row = ctx.add(ctx.mul(r[0], b.c(32)), r[1]);
           InstrId v = bb.load(y, f, {row, i[0]});
           return bb.op(InstrKind::Mul, f, v, v);
         });
  auto out = b.buffer(f, {b.c(C)});
  b.node(out, {b.c(C)}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Add, f, bb.load(s1, f, {i[0]}), bb.load(s2, f, {i[0]}));
  });
  b.p.outputs = {s1, s2, out};
  auto in = std::vector<HostTensor>{random_tensor(f, {R, C}, 9)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  const std::string& code = run.source.code;
  ASSERT_EQ(run.schedule.kernels.size(), 1u) << code;
  size_t blocks = 0;
  for (size_t at = code.find("xb += 64"); at != std::string::npos;
       at = code.find("xb += 64", at + 1))
    ++blocks;
  EXPECT_EQ(blocks, 2u) << code;
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(code);
  ASSERT_EQ(loops.size(), 2u) << code;
  for (auto l : loops) EXPECT_TRUE(span_vectorized(vec, l)) << code << "\n" << run.log;
}

TEST(EmitCpp, ProdOverInnerDimAndNumThreads) {
  ProgramBuilder b;
  const DType f = DType::Float64;
  Expr R = b.c(300), C = b.c(200);
  auto x = b.input(f, {R, C});
  auto p = b.buffer(f, {R});
  b.node(p, {R}, {nullptr}, ReduceKind::Prod, {C}, [&](BodyBuilder& bb, auto& i, auto& r) {
    return bb.op(InstrKind::Add, f, bb.constant(1, f),
                 bb.op(InstrKind::Mul, f, bb.constant(0.01, f), bb.load(x, f, {i[0], r[0]})));
  });
  b.p.outputs = {p};
  CompileOptions o;
  o.num_threads = 3;
  auto in = std::vector<HostTensor>{random_tensor(f, {300, 200}, 14)};
  KernelRun run = compile_and_run(b.p, in, o);
  EXPECT_NE(run.source.code.find("num_threads(3)"), std::string::npos) << run.source.code;
  expect_matches_interpreter(b.p, in, run, 1e-10, 1e-12);
}

}  // namespace
}  // namespace coil::testing

namespace coil::testing {
namespace {

// A pointwise producer [R, C] feeding a reduction over C: the kernel's outer space shrinks to
// [R]; the producer keeps an inner loop and stays materialized.
TEST(EmitCpp, PointwiseProducerIntoReduction) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr R = b.c(20), C = b.c(70);
  auto x = b.input(f, {R, C});
  auto a = b.buffer(f, {R, C});
  b.node(a, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Tanh, f, bb.load(x, f, {i[0], i[1]}));
  });
  auto s = b.buffer(f, {R});
  b.node(s, {R}, {nullptr}, ReduceKind::Max, {C}, [&](BodyBuilder& bb, auto& i, auto& r) {
    return bb.load(a, f, {i[0], r[0]});
  });
  b.p.outputs = {s};
  auto in = std::vector<HostTensor>{random_tensor(f, {20, 70}, 15)};
  KernelRun run = compile_and_run(b.p, in);
  ASSERT_EQ(run.schedule.kernels.size(), 1u) << run.schedule.fusion_log;
  EXPECT_EQ(run.schedule.kernels[0].outer_ranges.size(), 1u);
  EXPECT_TRUE(run.schedule.kernels[0].local_buffers.empty());
  EXPECT_NE(run.schedule.fusion_log.find("fused buf2 into kernel0 (vertical, pointwise+reduction"),
            std::string::npos)
      << run.schedule.fusion_log;
  expect_matches_interpreter(b.p, in, run);
}

// Squeeze-excitation's mean over a channels-last activation: the pointwise producer (stored
// NHWC) is not fused under the [N, C] reduction, where its inner loops would run over H and W
// at stride C; the reduction becomes an outer (column) reduction vectorized over the
// channels, and the mean's division runs in its finishing loop.
TEST(EmitCpp, ChannelsLastMeanIsAColumnReductionWithItsFinish) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t N = 2, C = 24, H = 5, W = 7;
  Expr n = b.c(N), c = b.c(C), h = b.c(H), w = b.c(W);
  auto x = b.input(f, {n, c, h, w});
  b.p.buffers[x].strides = {b.c(H * W * C), b.c(1), b.c(W * C), b.c(C)};
  auto act = b.buffer(f, {n, c, h, w});
  b.p.buffers[act].strides = b.p.buffers[x].strides;
  b.node(act, {n, c, h, w}, {nullptr, nullptr, nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           InstrId v = bb.load(x, f, {i[0], i[1], i[2], i[3]});
           return bb.op(InstrKind::Mul, f, v, bb.op(InstrKind::Sigmoid, f, v));
         });
  auto sum = b.buffer(f, {n, c});
  b.node(sum, {n, c}, {nullptr, nullptr}, ReduceKind::Sum, {h, w},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.load(act, f, {i[0], i[1], r[0], r[1]});
         });
  auto mean = b.buffer(f, {n, c});
  b.node(mean, {n, c}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.op(InstrKind::Div, f, bb.load(sum, f, {i[0], i[1]}),
                        bb.constant(double(H * W), f));
         });
  b.p.outputs = {act, mean};
  auto in = std::vector<HostTensor>{
      random_tensor(f, {N, C, H, W}, 21).as_strided({N, C, H, W}, {H * W * C, 1, W * C, C}, 0)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  const std::string& log = run.schedule.fusion_log;
  EXPECT_NE(log.find("is unit-stride along outer dim 1"), std::string::npos) << log;
  ASSERT_EQ(run.schedule.kernels.size(), 2u) << log;
  EXPECT_EQ(run.schedule.kernels[1].steps.size(), 2u) << log;  // the sum and the division
  EXPECT_NE(run.source.code.find("acc[j] += "), std::string::npos) << run.source.code;
  expect_matches_interpreter(b.p, in, run);
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(run.source.code);
  ASSERT_EQ(loops.size(), 2u) << run.source.code;  // the activation over C, the column sum
  for (auto l : loops)
    EXPECT_TRUE(span_vectorized(vec, l)) << "loop at line " << l.first << " not vectorized\n"
                                         << run.source.code << "\n"
                                         << run.log;
}

// A zero-padded channels-last copy (a depthwise convolution's input): the mask depends on the
// pixel, not on the channel, so the channel loop is emitted twice under `if (mask)`, once
// reading and once writing zeros, and both copies vectorize (g++ vectorizes no loop with a
// masked load whose mask is loop-invariant).
TEST(EmitCpp, RowInvariantMaskUnswitchesTheSimdLoop) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t N = 2, C = 40, H = 5, W = 6;
  auto& c = b.ctx();
  auto x = b.input(f, {b.c(N), b.c(C), b.c(H), b.c(W)});
  b.p.buffers[x].strides = {b.c(H * W * C), b.c(1), b.c(W * C), b.c(C)};
  auto pad = b.buffer(f, {b.c(N), b.c(C), b.c(H + 2), b.c(W + 2)});
  b.p.buffers[pad].strides = {b.c((H + 2) * (W + 2) * C), b.c(1), b.c((W + 2) * C), b.c(C)};
  b.node(pad, {b.c(N), b.c(C), b.c(H + 2), b.c(W + 2)}, {nullptr, nullptr, nullptr, nullptr},
         ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
           Expr ih = c.sub(i[2], c.one()), iw = c.sub(i[3], c.one());
           Expr ok = c.mul(c.mul(c.le(c.zero(), ih), c.lt(ih, b.c(H))),
                           c.mul(c.le(c.zero(), iw), c.lt(iw, b.c(W))));
           InstrId m = bb.cast(bb.index_expr(ok, DType::Int64), DType::Bool);
           InstrId v = bb.load(x, f, {i[0], i[1], ih, iw}, m);
           return bb.op(InstrKind::Where, f, m, v, bb.constant(0.0, f));
         });
  b.p.outputs = {pad};
  auto in = std::vector<HostTensor>{
      random_tensor(f, {N, C, H, W}, 5).as_strided({N, C, H, W}, {H * W * C, 1, W * C, C}, 0)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  EXPECT_NE(run.source.code.find("} else {"), std::string::npos) << run.source.code;
  std::set<int> vec = vectorized_lines(run.log);
  auto loops = simd_loop_lines(run.source.code);
  ASSERT_EQ(loops.size(), 2u) << run.source.code;
  // The copy vectorizes (the zero-filling one may become a memset instead).
  EXPECT_TRUE(span_vectorized(vec, loops[0])) << run.source.code << "\n" << run.log;
}

// A bool converted to float beside 64-bit integer arithmetic (dropout: the mask drawn from a
// Philox counter, times the value): the conversion is emitted as a select, which g++ 12
// vectorizes; `float(mask)` left the whole loop scalar ("no vectype").
// Several row-invariant masks (a max-pool backward's windows, a stencil's two neighbours): no
// single mask to unswitch on, so each masked load reads at its index clamped into the buffer
// and selects (coil::pick), and the simd loop vectorizes. The edge rows read clamped elements
// that the masks then drop.
TEST(EmitCpp, SeveralRowMasksReadClampedAndVectorize) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t R = 9, C = 48;
  auto& c = b.ctx();
  auto x = b.input(f, {b.c(R), b.c(C)});
  auto out = b.buffer(f, {b.c(R), b.c(C)});
  b.node(out, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           Expr up = c.add(i[0], c.one()), down = c.sub(i[0], c.one());
           InstrId mu = bb.cast(bb.index_expr(c.lt(up, b.c(R)), DType::Int64), DType::Bool);
           InstrId md = bb.cast(bb.index_expr(c.le(c.zero(), down), DType::Int64), DType::Bool);
           InstrId a = bb.load(x, f, {up, i[1]}, mu);
           InstrId d = bb.load(x, f, {down, i[1]}, md);
           return bb.op(InstrKind::Add, f, a, d);
         });
  b.p.outputs = {out};
  auto in = std::vector<HostTensor>{random_tensor(f, {R, C}, 31)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  EXPECT_NE(run.source.code.find("coil::pick("), std::string::npos) << run.source.code;
  auto loops = simd_loop_lines(run.source.code);
  ASSERT_EQ(loops.size(), 1u) << run.source.code;
  EXPECT_TRUE(span_vectorized(vectorized_lines(run.log), loops[0])) << run.source.code << "\n"
                                                                    << run.log;
}

// A max-pool backward's shape: 64-bit saved indices read under row-invariant edge masks,
// compared with the element's own index, selecting 32-bit gradients, in a kernel of two
// members (the masks then stay inside the loop for g++ to hoist). g++ 12 vectorizes no select
// on a mask from outside the loop beside mixed element widths; through coil::pick's bit masks
// every simd loop vectorizes (ResNet-18's max-pool backward: 1.25 -> 0.06 ms).
TEST(EmitCpp, SelectsOnRowMasksBesideInt64IndicesVectorize) {
  ProgramBuilder b;
  const DType f = DType::Float32, i64 = DType::Int64;
  const int64_t R = 9, C = 48;
  auto& c = b.ctx();
  auto ind = b.input(i64, {b.c(R), b.c(C)});
  auto g = b.input(f, {b.c(R), b.c(C)});
  auto out = b.buffer(f, {b.c(R), b.c(C)});
  auto out2 = b.buffer(f, {b.c(R), b.c(C)});
  auto body = [&](BodyBuilder& bb, auto& i, auto&, bool second) {
    InstrId here = bb.index_expr(c.add(c.mul(i[0], b.c(C)), i[1]), i64);
    InstrId sum = bb.constant(0, f);
    for (int64_t t : {0, 1}) {
      Expr row = c.add(i[0], b.c(t));
      InstrId m = bb.cast(bb.index_expr(c.lt(row, b.c(R)), i64), DType::Bool);
      InstrId saved = bb.op(InstrKind::Where, i64, m, bb.load(ind, i64, {row, i[1]}, m),
                            bb.int_constant(-1, i64));
      InstrId gv = bb.op(InstrKind::Where, f, m, bb.load(g, f, {row, i[1]}, m), bb.constant(0, f));
      InstrId hit = bb.op(InstrKind::Eq, DType::Bool, saved, here);
      sum = bb.op(InstrKind::Add, f, sum, bb.op(InstrKind::Where, f, hit, gv, bb.constant(0, f)));
    }
    return second ? bb.op(InstrKind::Mul, f, sum, sum) : sum;
  };
  b.node(out, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto& r) { return body(bb, i, r, false); });
  b.node(out2, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto& r) { return body(bb, i, r, true); });
  b.p.outputs = {out, out2};
  // Saved indices that hit the element itself, its neighbour below, or nothing.
  std::vector<double> saved(R * C);
  for (int64_t k = 0; k < R * C; ++k) saved[k] = k % 3 == 0 ? k : (k % 3 == 1 ? k + C : -7);
  auto in = std::vector<HostTensor>{HostTensor::from_doubles(i64, {R, C}, saved),
                                    random_tensor(f, {R, C}, 6)};
  KernelRun run = run_with_every_simd_loop_vectorized(b.p, in);
  EXPECT_NE(run.source.code.find("coil::pick("), std::string::npos) << run.source.code;
}

// A stride-2 transposed read (a strided convolution's input gradient over a channels-last
// [R, C] layout): tap (r - 1) / 2 exists where r - 1 >= 0 and (r - 1) mod 2 == 0. The numerator
// reaches -1, so `mod` and the clamped load's floor division once printed as coil::m::remainder
// and coil::m::floordiv, whose sign fix-ups g++ left in the simd loop of a two-member kernel:
// scalar, 4-6x slower (LeViT's and Whisper's input gradients). Shifted to a non-negative
// numerator they print as C++'s % and /, and the loops vectorize.
TEST(EmitCpp, FloorDivAndModOfNegativeReachingIndicesVectorize) {
  ProgramBuilder b;
  const DType f = DType::Float32, i64 = DType::Int64;
  const int64_t R = 12, C = 48;
  auto& c = b.ctx();
  auto x = b.input(f, {b.c(R / 2), b.c(C)});
  auto out = b.buffer(f, {b.c(R), b.c(C)});
  auto out2 = b.buffer(f, {b.c(R), b.c(C)});
  auto body = [&](BodyBuilder& bb, auto& i, bool second) {
    Expr prev = c.sub(i[0], c.one());
    Expr ok = c.mul(c.le(c.zero(), prev), c.eq(c.mod(prev, b.c(2)), c.zero()));
    InstrId m = bb.cast(bb.index_expr(ok, i64), DType::Bool);
    InstrId v = bb.load(x, f, {c.floordiv(prev, b.c(2)), i[1]}, m);
    InstrId tap = bb.op(InstrKind::Where, f, m, v, bb.constant(0, f));
    return second ? bb.op(InstrKind::Mul, f, tap, tap) : tap;
  };
  b.node(out, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) { return body(bb, i, false); });
  b.node(out2, {b.c(R), b.c(C)}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) { return body(bb, i, true); });
  b.p.outputs = {out, out2};
  auto in = std::vector<HostTensor>{random_tensor(f, {R / 2, C}, 8)};
  KernelRun run = run_with_every_simd_loop_vectorized(b.p, in);
  EXPECT_EQ(run.source.code.find("coil::m::remainder"), std::string::npos) << run.source.code;
  EXPECT_EQ(run.source.code.find("coil::m::floordiv"), std::string::npos) << run.source.code;
}

TEST(EmitCpp, BoolToFloatBesideInt64ArithmeticVectorizes) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  const int64_t N = 1000;
  auto& c = b.ctx();
  auto x = b.input(f, {b.c(N)});
  auto out = b.buffer(f, {b.c(N)});
  b.node(out, {b.c(N)}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    InstrId hash = bb.index_expr(c.mul(i[0], b.c(2654435761)), DType::Int64);
    InstrId keep = bb.op(InstrKind::Gt, DType::Bool, hash, bb.constant(1e12, DType::Int64));
    return bb.op(InstrKind::Mul, f, bb.cast(keep, f), bb.load(x, f, {i[0]}));
  });
  b.p.outputs = {out};
  auto in = std::vector<HostTensor>{random_tensor(f, {N}, 7)};
  CompileOptions o;
  o.cxx_flags += " -fopt-info-vec-optimized";
  KernelRun run = compile_and_run(b.p, in, o);
  expect_matches_interpreter(b.p, in, run);
  EXPECT_NE(run.source.code.find("? float(1.0) : float(0.0)"), std::string::npos)
      << run.source.code;
  auto loops = simd_loop_lines(run.source.code);
  ASSERT_EQ(loops.size(), 1u) << run.source.code;
  EXPECT_TRUE(span_vectorized(vectorized_lines(run.log), loops[0])) << run.source.code << "\n"
                                                                    << run.log;
}

}  // namespace
}  // namespace coil::testing
