#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../test_policies.h"
#include "coil/sched/schedule.h"
#include "coil/support/error.h"
#include "test_programs.h"

namespace coil::testing {
namespace {

using sched::Schedule;

std::string golden_path(const std::string& name) {
  return std::string(COIL_SOURCE_DIR) + "/tests/golden/sched/" + name + ".txt";
}

// Compares against tests/golden/sched/<name>.txt (COIL_UPDATE_GOLDEN=1 rewrites it).
void expect_golden(const std::string& name, const std::string& text) {
  std::string path = golden_path(name);
  if (std::getenv("COIL_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden " << path << "; run with COIL_UPDATE_GOLDEN=1";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text) << "golden " << path;
}

std::string full_text(const loop::LoopProgram& p, const Schedule& s) {
  return sched::print_schedule(p, s) + "--- fusion log\n" + s.fusion_log;
}

loop::BufferId root(const loop::LoopProgram& p, loop::BufferId b) {
  while (p.buffer(b).kind == loop::BufferKind::View) b = p.buffer(b).view_of;
  return b;
}

// Independent check of a memory plan: every materialized intermediate has a storage that is
// allocated before and not freed until after each use; two buffers share a storage only with
// disjoint lifetimes; outputs are never freed; every step appears once in the order.
void check_memory_plan(const loop::LoopProgram& p, const Schedule& s) {
  const auto& m = s.memory;
  ASSERT_EQ(m.buffer_storage.size(), p.buffers.size());
  ASSERT_EQ(m.alloc_before.size(), s.order.size());
  ASSERT_EQ(m.free_after.size(), s.order.size());
  std::set<int> locals;
  for (const auto& k : s.kernels) locals.insert(k.local_buffers.begin(), k.local_buffers.end());
  std::vector<int> seen_steps(p.steps.size(), 0);
  std::map<int, int> first_use, last_use;  // buffer -> order index
  std::set<int> live, ever;
  for (size_t t = 0; t < s.order.size(); ++t) {
    for (int sid : m.alloc_before[t]) {
      EXPECT_FALSE(ever.count(sid)) << "storage" << sid << " allocated twice";
      live.insert(sid);
      ever.insert(sid);
    }
    std::vector<int> steps = s.order[t].kind == sched::ScheduledStep::Kind::Kernel
                                 ? s.kernels[s.order[t].index].steps
                                 : std::vector<int>{s.order[t].index};
    std::vector<int> used;
    for (int st : steps) {
      seen_steps[st]++;
      if (auto* n = std::get_if<loop::ComputeNode>(&p.steps[st])) {
        used.push_back(n->out);
        for (const auto& in : n->body.instrs) {
          if (in.kind == loop::InstrKind::Load) used.push_back(root(p, in.buffer));
        }
      } else {
        const auto& e = std::get<loop::ExternNode>(p.steps[st]);
        for (auto b : e.inputs) used.push_back(root(p, b));
        for (auto b : e.outputs) used.push_back(b);
      }
    }
    for (int b : used) {
      if (p.buffer(b).kind != loop::BufferKind::Intermediate || locals.count(b)) continue;
      int sid = m.buffer_storage[b];
      ASSERT_GE(sid, 0) << p.buffer(b).name << " has no storage";
      EXPECT_TRUE(live.count(sid))
          << p.buffer(b).name << " used while storage" << sid << " is not live (step " << t << ")";
      if (!first_use.count(b)) first_use[b] = static_cast<int>(t);
      last_use[b] = static_cast<int>(t);
    }
    for (int sid : m.free_after[t]) {
      EXPECT_TRUE(live.erase(sid)) << "storage" << sid << " freed while not live";
    }
  }
  for (size_t st = 0; st < p.steps.size(); ++st) EXPECT_EQ(seen_steps[st], 1) << "step " << st;
  for (auto b : locals) EXPECT_EQ(m.buffer_storage[b], -1);
  for (auto o : p.outputs) {
    int sid = m.buffer_storage[root(p, o)];
    if (sid < 0) continue;
    EXPECT_TRUE(live.count(sid)) << "output storage" << sid << " was freed";
    for (auto& [b, f] : first_use) {
      if (b != root(p, o) && m.buffer_storage[b] == sid) {
        ADD_FAILURE() << "output " << p.buffer(o).name << " shares storage with "
                      << p.buffer(b).name;
      }
    }
  }
  for (auto& [a, fa] : first_use) {
    for (auto& [b, fb] : first_use) {
      if (a < b && m.buffer_storage[a] == m.buffer_storage[b]) {
        bool disjoint = last_use[a] < fb || last_use[b] < fa;
        EXPECT_TRUE(disjoint) << p.buffer(a).name << " and " << p.buffer(b).name
                              << " share a storage while both live";
      }
    }
  }
}

TEST(Schedule, SoftmaxIsOneKernelWithLocals) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(16));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].steps, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(s.kernels[0].outer_ranges.size(), 1u);
  EXPECT_EQ(s.kernels[0].outer_ranges[0], b.c(8));
  EXPECT_EQ(s.kernels[0].local_buffers, (std::vector<int>{1, 2}));
  EXPECT_NE(s.fusion_log.find("fused buf2 into kernel0 (vertical, reduction+reduction"),
            std::string::npos)
      << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("fused buf3 into kernel0 (vertical, reduction+pointwise"),
            std::string::npos)
      << s.fusion_log;
  check_memory_plan(b.p, s);
  EXPECT_EQ(s.memory.storage_bytes.size(), 1u);  // only the output is materialized
  expect_golden("softmax", full_text(b.p, s));
}

TEST(Schedule, SymbolicSoftmax) {
  ProgramBuilder b;
  Expr s0 = b.size_symbol("s0", 0, 0), s1 = b.size_symbol("s1", 0, 1);
  build_softmax(b, s0, s1);
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].local_buffers.size(), 2u);
  check_memory_plan(b.p, s);
  expect_golden("softmax_symbolic", full_text(b.p, s));
}

TEST(Schedule, LayerNormIsOneKernel) {
  ProgramBuilder b;
  build_layer_norm(b, b.c(8), b.c(32));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].steps.size(), 3u);
  EXPECT_EQ(s.kernels[0].local_buffers.size(), 2u);
  check_memory_plan(b.p, s);
  expect_golden("layer_norm", full_text(b.p, s));
}

TEST(Schedule, PointwiseChainIsOneKernel) {
  ProgramBuilder b;
  build_pointwise_chain(b, b.c(64), b.c(256));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].outer_ranges.size(), 2u);
  EXPECT_EQ(s.kernels[0].local_buffers.size(), 2u);  // x*2 and exp are never materialized
  check_memory_plan(b.p, s);
  expect_golden("pointwise_chain", full_text(b.p, s));
}

// A training step's forward and backward graphs number their kernels from 0 each; the
// prefix tells them apart in a profile. It becomes part of C identifiers, so only letters,
// digits and '_' are accepted.
TEST(Schedule, KernelPrefixNamesKernels) {
  ProgramBuilder b;
  build_pointwise_chain(b, b.c(64), b.c(256));
  CompileOptions o;
  o.kernel_prefix = "bw_";
  Schedule s = sched::schedule_program(b.p, o, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].name, "bw_kernel0");
  o.kernel_prefix = "a b";
  EXPECT_THROW(sched::schedule_program(b.p, o, coil::test_support::policy_for(b.p)), CompileError);
}

TEST(Schedule, IndependentReductionsFuseHorizontally) {
  ProgramBuilder b;
  build_independent_reductions(b, b.c(8), b.c(16));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 1u) << s.fusion_log;
  EXPECT_EQ(s.kernels[0].steps.size(), 5u);
  EXPECT_TRUE(s.kernels[0].local_buffers.empty());  // all are outputs
  EXPECT_NE(s.fusion_log.find("fused buf2 into kernel0 (horizontal, reduction+reduction"),
            std::string::npos)
      << s.fusion_log;
  check_memory_plan(b.p, s);
  expect_golden("independent_reductions", full_text(b.p, s));
}

// Pointwise nodes over [R, C] that share only a small broadcast row (a mask's indices, say)
// with an earlier kernel, with another kernel between them, stay apart: joined, the later one
// would be computed ahead of that kernel and its output held from there on, for a few shared
// bytes. A node sharing a large input still joins, and so does one right after the kernel.
TEST(Schedule, HorizontalJoinAheadOfOtherWorkNeedsSharedBytesWorthTheOutput) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr R = b.c(512), C = b.c(1024);  // 2 MiB outputs
  BufferId row = b.input(f, {C});
  BufferId x = b.input(f, {R, C}), y = b.input(f, {R, C}), w = b.input(f, {R, C});
  BufferId z = b.input(f, {C, R});
  auto scaled = [&](BufferId in) {
    BufferId o = b.buffer(f, {R, C});
    b.node(o, {R, C}, {nullptr, nullptr}, ReduceKind::None, {},
           [&](BodyBuilder& bb, auto& i, auto&) {
             return bb.op(InstrKind::Mul, f, bb.load(in, f, {i[0], i[1]}), bb.load(row, f, {i[1]}));
           });
    return o;
  };
  BufferId a = scaled(x);
  BufferId next = scaled(y);         // right after kernel0: joins
  BufferId t = b.buffer(f, {C, R});  // another kernel (other ranges) in between
  b.node(t, {C, R}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Neg, f, bb.load(z, f, {i[0], i[1]}));
  });
  BufferId far = scaled(w);  // shares only `row` (4 KiB) with kernel0: apart
  BufferId big = scaled(x);  // shares x (2 MiB) with kernel0: joins
  b.p.outputs = {a, next, t, far, big};
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 3u) << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("not fused " + b.p.buffer(far).name +
                              " into kernel0 (horizontal): shares 4096 bytes, writes 2097152 "
                              "ahead of other work"),
            std::string::npos)
      << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("fused " + b.p.buffer(next).name + " into kernel0 (horizontal"),
            std::string::npos)
      << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("fused " + b.p.buffer(big).name + " into kernel0 (horizontal"),
            std::string::npos)
      << s.fusion_log;
  check_memory_plan(b.p, s);
}

TEST(Schedule, TransposesDoNotFuseAndReuseMemory) {
  ProgramBuilder b;
  build_transposes(b, b.c(8), b.c(16));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 4u) << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("not fused buf2 into kernel0: outer ranges [8, 16] vs [16, 8]"),
            std::string::npos)
      << s.fusion_log;
  check_memory_plan(b.p, s);
  const auto& m = s.memory;
  // a (buf1) is dead after kernel1; u (buf3) has its size and takes its storage.
  EXPECT_EQ(m.buffer_storage[1], m.buffer_storage[3]);
  // The output (buf4) gets its own storage, never freed.
  EXPECT_NE(m.buffer_storage[4], m.buffer_storage[2]);
  EXPECT_NE(m.buffer_storage[4], m.buffer_storage[1]);
  EXPECT_EQ(m.storage_bytes.size(), 3u);
  expect_golden("transposes", full_text(b.p, s));
}

TEST(Schedule, SquareTransposeRejectedByOuterPoint) {
  ProgramBuilder b;
  build_transposes(b, b.c(16), b.c(16));
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  EXPECT_EQ(s.kernels.size(), 4u) << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("not at the kernel's outer point"), std::string::npos)
      << s.fusion_log;
  check_memory_plan(b.p, s);
  expect_golden("transposes_square", full_text(b.p, s));
}

TEST(Schedule, NoFusionWhenDisabled) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(16));
  CompileOptions o;
  o.fuse = false;
  Schedule s = sched::schedule_program(b.p, o, coil::test_support::policy_for(b.p));
  EXPECT_EQ(s.kernels.size(), 3u);
  for (const auto& k : s.kernels) EXPECT_TRUE(k.local_buffers.empty());
  check_memory_plan(b.p, s);
}

TEST(Schedule, CycleThroughExternIsRejected) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr R = b.c(8), C = b.c(16);
  auto x = b.input(f, {R, C});
  auto a = b.buffer(f, {R, C});
  b.node(a, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Mul, f, bb.load(x, f, {i[0], i[1]}), bb.constant(2, f));
  });
  auto e = b.buffer(f, {R, C});
  loop::ExternNode ext;
  ext.kind = loop::ExternKind::Fallback;
  ext.op = "aten.cumsum";
  ext.inputs = {a};
  ext.outputs = {e};
  b.p.steps.push_back(ext);
  auto out = b.buffer(f, {R, C});
  b.node(
      out, {R, C}, {nullptr, nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
        return bb.op(InstrKind::Add, f, bb.load(a, f, {i[0], i[1]}), bb.load(e, f, {i[0], i[1]}));
      });
  b.p.outputs = {out};
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  ASSERT_EQ(s.kernels.size(), 2u) << s.fusion_log;
  EXPECT_NE(s.fusion_log.find("would create a cycle through extern fallback (step 1)"),
            std::string::npos)
      << s.fusion_log;
  ASSERT_EQ(s.order.size(), 3u);
  EXPECT_EQ(s.order[1].kind, sched::ScheduledStep::Kind::Extern);
  check_memory_plan(b.p, s);
  expect_golden("extern_cycle", full_text(b.p, s));
}

TEST(Schedule, ViewOfOutputKeepsBaseAlive) {
  // a = x + 1 (intermediate) ; v = view of a (output) ; a must never be freed.
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr N = b.c(32);
  auto x = b.input(f, {N});
  auto a = b.buffer(f, {N});
  b.node(a, {N}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Add, f, bb.load(x, f, {i[0]}), bb.constant(1, f));
  });
  loop::Buffer v;
  v.kind = loop::BufferKind::View;
  v.view_of = a;
  v.dtype = f;
  v.sizes = {b.c(16)};
  v.strides = {b.c(2)};
  auto vid = b.p.add_buffer(v);
  auto c = b.buffer(f, {N});
  b.node(c, {N}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Exp, f, bb.load(a, f, {i[0]}));
  });
  b.p.outputs = {vid, c};
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  check_memory_plan(b.p, s);
  EXPECT_TRUE(s.kernels[0].local_buffers.empty());  // a is aliased by an output view
  for (const auto& fr : s.memory.free_after) {
    for (int sid : fr) EXPECT_NE(sid, s.memory.buffer_storage[a]);
  }
}

// Attention's shape: three projections of x (extern calls standing for the matmuls), the
// scores from two of them, a pointwise softmax-like kernel, and the product with the third.
// Program order keeps q, k and v alive at the scores' matmul (4 buffers); the memory-aware
// order runs v's projection after the scores (3 at most), keeps every hazard, and says so in
// the fusion log; with memory_order off, program order stays.
TEST(Schedule, MemoryOrderRunsAProjectionLate) {
  ProgramBuilder b;
  const DType f = DType::Float32;
  Expr R = b.c(256), C = b.c(256);
  auto x = b.input(f, {R, C});
  auto ext = [&](std::vector<loop::BufferId> in) {
    auto out = b.buffer(f, {R, C});
    loop::ExternNode e;
    e.kind = loop::ExternKind::Fallback;
    e.op = "aten.mm";
    e.inputs = std::move(in);
    e.outputs = {out};
    b.p.steps.push_back(e);
    return out;
  };
  auto q = ext({x}), k = ext({x}), v = ext({x});
  auto scores = ext({q, k});
  auto probs = b.buffer(f, {R, C});
  b.node(probs, {R, C}, {nullptr, nullptr}, ReduceKind::None, {},
         [&](BodyBuilder& bb, auto& i, auto&) {
           return bb.op(InstrKind::Exp, f, bb.load(scores, f, {i[0], i[1]}));
         });
  auto out = ext({probs, v});
  b.p.outputs = {out};
  auto position = [&](const Schedule& s, int step) {
    for (size_t t = 0; t < s.order.size(); ++t)
      if (s.order[t].kind == sched::ScheduledStep::Kind::Extern && s.order[t].index == step)
        return static_cast<int>(t);
    return -1;
  };
  Schedule s = sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  check_memory_plan(b.p, s);
  const int q_at = position(s, 0), k_at = position(s, 1), v_at = position(s, 2);
  const int scores_at = position(s, 3), out_at = position(s, 5);
  EXPECT_GT(v_at, scores_at) << sched::print_schedule(b.p, s);
  EXPECT_LT(q_at, scores_at);
  EXPECT_LT(k_at, scores_at);
  EXPECT_LT(v_at, out_at);
  EXPECT_NE(s.fusion_log.find("memory order: 3 of 6 steps moved, peak of intermediates 1048576 "
                              "-> 786432 bytes"),
            std::string::npos)
      << s.fusion_log;
  // On the CPU v's projection writes into q's or k's freed storage; on the GPU an extern
  // call's result is adopted by the runtime, so it gets a storage of its own.
  EXPECT_TRUE(s.memory.buffer_storage[v] == s.memory.buffer_storage[q] ||
              s.memory.buffer_storage[v] == s.memory.buffer_storage[k]);
  for (auto& buffer : b.p.buffers) buffer.device = Device::CUDA;
  Schedule gpu =
      sched::schedule_program(b.p, CompileOptions{}, coil::test_support::policy_for(b.p));
  check_memory_plan(b.p, gpu);
  for (loop::BufferId other : {q, k, scores, probs})
    EXPECT_NE(gpu.memory.buffer_storage[v], gpu.memory.buffer_storage[other]);
  for (auto& buffer : b.p.buffers) buffer.device = Device::CPU;
  CompileOptions off;
  off.memory_order = false;
  Schedule kept = sched::schedule_program(b.p, off, coil::test_support::policy_for(b.p));
  check_memory_plan(b.p, kept);
  EXPECT_EQ(position(kept, 2), 2);
  EXPECT_EQ(kept.fusion_log.find("memory order"), std::string::npos);
}

// Tiny GPU nodes with no input in common (ResNet-50's BatchNorm counters: c_i + 1 for 40
// counters) join recent small kernels over the same ranges, one launch for several, while a
// kernel keeps at most 16 buffers; large ones and CPU programs stay apart. Every decision is in
// the fusion log.
// A kernel's traffic line counts what its loads can reach: out[i] = x[i, 0] + x[i, j] summed
// over j reads x once (512 bytes, not twice), and y[i] = x[i, 0] * 2 alone reaches one column
// (32 bytes of x's 512).
TEST(Schedule, TrafficCountsWhatLoadsReach) {
  const DType f = DType::Float32;
  ProgramBuilder b;
  auto x = b.input(f, {b.c(8), b.c(16)});
  auto sum = b.buffer(f, {b.c(8)});
  b.node(sum, {b.c(8)}, {nullptr}, ReduceKind::Sum, {b.c(16)},
         [&](BodyBuilder& bb, auto& i, auto& r) {
           return bb.op(InstrKind::Add, f, bb.load(x, f, {i[0], b.ctx().zero()}),
                        bb.load(x, f, {i[0], r[0]}));
         });
  ProgramBuilder c;
  auto x2 = c.input(f, {c.c(8), c.c(16)});
  auto col = c.buffer(f, {c.c(8)});
  c.node(col, {c.c(8)}, {nullptr}, ReduceKind::None, {}, [&](BodyBuilder& bb, auto& i, auto&) {
    return bb.op(InstrKind::Mul, f, bb.load(x2, f, {i[0], c.ctx().zero()}), bb.constant(2.0, f));
  });
  b.p.outputs = {sum};
  c.p.outputs = {col};
  const CompileOptions o;
  auto check = [&](ProgramBuilder& pb, const std::string& want) {
    const Schedule s = sched::schedule_program(pb.p, o, coil::test_support::policy_for(pb.p));
    const std::string text = sched::print_schedule(pb.p, s);
    EXPECT_NE(text.find("  traffic: " + want + " bytes"), std::string::npos) << text;
    EXPECT_NE(text.find("kernels' traffic: " + want + " bytes"), std::string::npos) << text;
  };
  check(b, "reads 512, writes 32");
  check(c, "reads 32, writes 32");
}

TEST(Schedule, SmallGpuKernelsJoin) {
  auto build = [](ProgramBuilder& b, int n, int64_t size) {
    const DType f = DType::Float32;
    for (int i = 0; i < n; ++i) {
      auto in = b.input(f, {b.c(size)});
      auto out = b.buffer(f, {b.c(size)});
      b.node(out, {b.c(size)}, {nullptr}, ReduceKind::None, {},
             [&](BodyBuilder& bb, auto& idx, auto&) {
               return bb.op(InstrKind::Add, f, bb.load(in, f, {idx[0]}), bb.constant(1.0, f));
             });
      b.p.outputs.push_back(out);
    }
  };
  auto on_gpu = [](ProgramBuilder& b) {
    for (auto& buffer : b.p.buffers) buffer.device = Device::CUDA;
  };
  ProgramBuilder tiny;
  build(tiny, 40, 1);
  on_gpu(tiny);
  Schedule s =
      sched::schedule_program(tiny.p, CompileOptions{}, coil::test_support::policy_for(tiny.p));
  check_memory_plan(tiny.p, s);
  EXPECT_LT(s.kernels.size(), 10u) << s.fusion_log;
  for (const auto& k : s.kernels) EXPECT_LE(k.steps.size(), 8u);  // 2 buffers each, 16 at most
  EXPECT_NE(s.fusion_log.find("(small, 1 elements: one launch)"), std::string::npos)
      << s.fusion_log;
  ProgramBuilder cpu;
  build(cpu, 4, 1);
  EXPECT_EQ(sched::schedule_program(cpu.p, CompileOptions{}, coil::test_support::policy_for(cpu.p))
                .kernels.size(),
            4u);
  ProgramBuilder large;
  build(large, 4, 1 << 20);
  on_gpu(large);
  EXPECT_EQ(
      sched::schedule_program(large.p, CompileOptions{}, coil::test_support::policy_for(large.p))
          .kernels.size(),
      4u);
}

}  // namespace
}  // namespace coil::testing
