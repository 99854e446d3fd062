// Golden tests of the index expressions coil generates for reshape/permute chains with symbolic
// sizes (docs/dynamic-shapes.md): graph text -> lower -> schedule -> emitted C++. The golden
// files are the kernels as emitted; a change to the symbolic algebra or the emitter that makes
// an index longer (an undone `(i // c) * c + i % c`, a division that a range proves away) shows
// up as a diff. COIL_UPDATE_GOLDEN=1 rewrites them. Each chain also runs, compiled, against
// the loop interpreter at sizes that are odd, prime and not multiples of the vector width.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "../test_policies.h"
#include "coil/backend/cpu/emit_cpp.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/graph/parser.h"
#include "coil/loop/interpreter.h"
#include "coil/lower/lower.h"
#include "coil/sched/schedule.h"

namespace coil::testing {
namespace {

using loop::HostTensor;

struct Compiled {
  std::unique_ptr<sym::Context> ctx = std::make_unique<sym::Context>();
  std::unique_ptr<Graph> graph;
  lower::LowerResult lowered;
  sched::Schedule schedule;
  std::string source;
  std::vector<std::string> kernel_symbols;
};

// max_pointwise_cat: more cat pieces than this become a Cat extern (lower/index.cpp).
Compiled compile_text(const std::string& text,
                      int64_t max_pointwise_cat = CompileOptions{}.max_pointwise_cat) {
  Compiled c;
  c.graph = parse_graph(text, *c.ctx);
  CompileOptions o;
  o.strict = true;
  o.max_pointwise_cat = max_pointwise_cat;
  c.lowered = lower::lower_graph(*c.graph, o, coil::test_support::policy_for(*c.graph));
  c.schedule = sched::schedule_program(c.lowered.program, o,
                                       coil::test_support::policy_for(c.lowered.program));
  auto src = backend::cpu::emit_cpp(c.lowered.program, c.schedule, o);
  c.source = src.code;
  for (const auto& k : src.kernel_symbols) c.kernel_symbols.emplace_back(k);
  return c;
}

// The kernel functions of the emitted source (from the first COIL_KERNEL on): the prelude
// include and file comments are not what these tests are about.
std::string kernels_of(const std::string& source) {
  size_t at = source.find("COIL_KERNEL ");
  return at == std::string::npos ? source : source.substr(at);
}

// The goldens are the emitter's exact output, not source files: `.cpp.golden`, so that
// clang-format (which would reflow them) leaves them alone.
void expect_golden(const std::string& name, const std::string& got) {
  std::string path =
      std::string(COIL_SOURCE_DIR) + "/tests/golden/backend_cpu/" + name + ".cpp.golden";
  if (std::getenv("COIL_UPDATE_GOLDEN")) std::ofstream(path) << got;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden " << path << "; run with COIL_UPDATE_GOLDEN=1";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(got, ss.str()) << "golden " << path << " differs";
}

HostTensor iota(std::vector<int64_t> sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) n *= d;
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<double>(k % 1009) * 0.5 - 7.0;
  return HostTensor::from_doubles(DType::Float32, sizes, v);
}

// Runs the compiled kernels through the memory plan (storages sized by its symbolic byte
// counts) and the interpreter on the same inputs; the outputs must be equal.
void expect_runs_like_interpreter(const Compiled& c, const std::vector<HostTensor>& inputs) {
  const loop::LoopProgram& p = c.lowered.program;
  const sched::Schedule& s = c.schedule;
  std::vector<HostTensor> want = loop::interpret(p, inputs);
  CompileOptions o;
  auto compiled = backend::cpu::compile_and_load(c.source, o);
  static std::vector<std::shared_ptr<backend::cpu::SharedLibrary>> keep_loaded;
  keep_loaded.push_back(compiled.library);
  std::unordered_map<sym::Expr, int64_t> env;
  std::vector<int64_t> sizes;
  for (const auto& ss : p.size_symbols) {
    const HostTensor& t = inputs.at(ss.input);
    int64_t v = ss.dim >= 0 ? t.sizes.at(ss.dim) : t.strides.at(-ss.dim - 1);
    env[ss.symbol] = v;
    sizes.push_back(v);
  }
  auto root = [&](loop::BufferId b) {
    while (p.buffer(b).kind == loop::BufferKind::View) b = p.buffer(b).view_of;
    return b;
  };
  std::vector<std::shared_ptr<std::vector<unsigned char>>> storages(s.memory.storage_bytes.size());
  std::vector<void*> bufs(p.buffers.size(), nullptr);
  for (size_t k = 0; k < p.inputs.size(); ++k) bufs[p.inputs[k]] = inputs[k].storage->data();
  for (size_t sid = 0; sid < storages.size(); ++sid) {
    int64_t bytes = p.ctx->evaluate(s.memory.storage_bytes[sid], env);
    storages[sid] = std::make_shared<std::vector<unsigned char>>(bytes, 0xff);
  }
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    int sid = b < s.memory.buffer_storage.size() ? s.memory.buffer_storage[b] : -1;
    if (sid >= 0) bufs[b] = storages[sid]->data();
  }
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffer(b).kind == loop::BufferKind::View) bufs[b] = bufs[root(b)];
  for (const auto& step : s.order) {
    ASSERT_EQ(step.kind, sched::ScheduledStep::Kind::Kernel) << "externs are not run here";
    using Fn = void (*)(void* const*, const int64_t*);
    auto fn = reinterpret_cast<Fn>(compiled.entry(std::string(c.kernel_symbols.at(step.index))));
    fn(bufs.data(), sizes.data());
  }
  ASSERT_EQ(want.size(), p.outputs.size());
  for (size_t k = 0; k < want.size(); ++k) {
    std::vector<double> w = want[k].to_doubles();
    const float* got = static_cast<const float*>(bufs[p.outputs[k]]);
    for (size_t j = 0; j < w.size(); ++j) ASSERT_EQ(got[j], static_cast<float>(w[j])) << j;
  }
}

// Attention's head split and merge: [b, t, 32] -> [b, t, 4, 8] -> permute -> contiguous
// copy -> [b*4, t, 8]. The load index must be 32*s1*(x0//4) + 8*(x0%4) + 32*x1 + x2.
constexpr const char* kHeadSplit = R"(graph(%0: f32[s0, s1, 32]):
  %1: f32[s0, s1, 4, 8] = aten.view.default(%0, [sym(s0), sym(s1), 4, 8])
  %2: f32[s0, 4, s1, 8]{32*s1, 8, 32, 1} = aten.permute.default(%1, [0, 2, 1, 3])
  %3: f32[s0, 4, s1, 8] = aten._to_copy.default(%2, memory_format="torch.contiguous_format")
  %4: f32[s0*4, s1, 8] = aten._unsafe_view.default(%3, [sym(s0*4), sym(s1), 8])
  %5: f32[s0*4, s1, 8] = aten.mul.Tensor(%4, 2.0)
  return (%5)
)";

// A deep reshape chain through a flat view and a transpose: [s0, s1] -> [s0*s1] -> [s1, s0]
// -> permute -> [s0, s1]. Reading x at the flat position j*s0 + i must come out as exactly
// that (the `(k // s1) * s1 + k % s1 -> k` rule), not as a division chain.
constexpr const char* kFlatTranspose = R"(graph(%0: f32[s0, s1]):
  %1: f32[s0*s1] = aten.view.default(%0, [sym(s0*s1)])
  %2: f32[s1, s0] = aten.view.default(%1, [sym(s1), sym(s0)])
  %3: f32[s0, s1]{1, s0} = aten.permute.default(%2, [1, 0])
  %4: f32[s0, s1] = aten.add.Tensor(%3, 1.0)
  return (%4)
)";

// Channels-last style: [s0, 3, s1] -> permute [0, 2, 1] -> contiguous -> [s0, s1*3]: the
// merged dim is split again by the load (a genuine // and % by the constant 3).
constexpr const char* kMergeOdd = R"(graph(%0: f32[s0, 3, s1]):
  %1: f32[s0, s1, 3]{3*s1, 1, s1} = aten.permute.default(%0, [0, 2, 1])
  %2: f32[s0, s1, 3] = aten._to_copy.default(%1, memory_format="torch.contiguous_format")
  %3: f32[s0, s1*3] = aten._unsafe_view.default(%2, [sym(s0), sym(s1*3)])
  %4: f32[s0, s1*3] = aten.neg.default(%3)
  return (%4)
)";

TEST(SymbolicIndexGolden, HeadSplit) {
  Compiled c = compile_text(kHeadSplit);
  std::string k = kernels_of(c.source);
  expect_golden("head_split_symbolic", k);
  // x1 < s1 (the loop's symbolic upper bound) removes `x1 % s1`, and the symbolic remainder
  // rule turns (8*s1*x0 + 8*x1 + x2) // (32*s1) into x0 / 4: the load is affine in x2, so the
  // inner loop is a simd loop.
  EXPECT_EQ(k.find("% s1"), std::string::npos) << k;
  EXPECT_NE(k.find("32*s1*(x0 / 4) + 8*(x0 % 4)"), std::string::npos) << k;
  EXPECT_NE(k.find("#pragma omp simd"), std::string::npos) << k;
  for (auto [b, t] : {std::pair{2, 2}, {3, 7}, {5, 13}})
    expect_runs_like_interpreter(c, {iota({b, t, 32})});
}

TEST(SymbolicIndexGolden, FlatTranspose) {
  Compiled c = compile_text(kFlatTranspose);
  std::string k = kernels_of(c.source);
  expect_golden("flat_transpose_symbolic", k);
  EXPECT_EQ(k.find("%"), std::string::npos) << k;
  for (auto [a, b] : {std::pair{2, 3}, {7, 5}, {11, 17}})
    expect_runs_like_interpreter(c, {iota({a, b})});
}

TEST(SymbolicIndexGolden, MergeOddDim) {
  Compiled c = compile_text(kMergeOdd);
  expect_golden("merge_odd_symbolic", kernels_of(c.source));
  for (auto [a, b] : {std::pair{2, 2}, {3, 9}, {13, 5}})
    expect_runs_like_interpreter(c, {iota({a, 3, b})});
}

// A Linear's [s0*s1, 64] output read through its [s0, s1, 64] view and written back flat
// (the GELU between a transformer's two Linears). The load index was
// x1 + 64*s1*((64*x0 + x1) // (64*s1)) + 64*(x0 % s1): not affine in x1, so the GELU's inner
// loop did not vectorize (the dynamic kernel ran 7x slower than the static one). The 64 of the
// divisor now splits off (x1 < 64), and the index folds to 64*x0 + x1.
constexpr const char* kFlatThroughView = R"(graph(%0: f32[s0, s1], %1: f32[s0*s1, 64]):
  %2: f32[s0, s1, 64] = aten.view.default(%1, [sym(s0), sym(s1), 64])
  %3: f32[s0, s1, 1] = aten.unsqueeze.default(%0, -1)
  %4: f32[s0, s1, 64] = aten.add.Tensor(%2, %3)
  %5: f32[s0, s1, 64] = aten.erf.default(%4)
  %6: f32[s0*s1, 64] = aten.view.default(%5, [sym(s0*s1), 64])
  return (%6)
)";

TEST(SymbolicIndexGolden, FlatThroughViewIsAffine) {
  Compiled c = compile_text(kFlatThroughView);
  std::string k = kernels_of(c.source);
  expect_golden("flat_through_view_symbolic", k);
  EXPECT_NE(k.find("buf2[64*x0 + x1]"), std::string::npos) << k;
  EXPECT_NE(k.find("#pragma omp simd"), std::string::npos) << k;
  for (auto [a, b] : {std::pair{2, 2}, {3, 7}, {5, 13}})
    expect_runs_like_interpreter(c, {iota({a, b}), iota({a * b, 64})});
}

// A language model's loss: logits [s0, s1, 16] sliced to [s0, s1 - 1, 16], copied, viewed as
// [s0*(s1 - 1), 16], then a row max and the row minus it. The row's start divides by the sum
// s1 - 1 (16*s1 - 16 before its common factor split off); computed inside the inner loops,
// gcc left that division there and the dynamic softmax ran 4x slower than the static one. It
// is computed once per row before the loops (`base0`), and the loops are simd loops.
constexpr const char* kSlicedRows = R"(graph(%0: f32[s0, s1, 16]):
  %1: f32[s0, s1 - 1, 16]{16*s1, 16, 1} = aten.slice.Tensor(%0, 1, 0, -1)
  %2: f32[s0, s1 - 1, 16] = aten._to_copy.default(%1, memory_format="torch.contiguous_format")
  %3: f32[s0*(s1 - 1), 16] = aten._unsafe_view.default(%2, [sym(s0*(s1 - 1)), 16])
  %4: f32[s0*(s1 - 1), 1] = aten.amax.default(%3, [1], true)
  %5: f32[s0*(s1 - 1), 16] = aten.sub.Tensor(%3, %4)
  return (%5)
)";

TEST(SymbolicIndexGolden, SlicedRowsHoistSymbolicDivision) {
  Compiled c = compile_text(kSlicedRows);
  std::string k = kernels_of(c.source);
  expect_golden("sliced_rows_symbolic", k);
  EXPECT_NE(k.find("const int64_t base0 = "), std::string::npos) << k;
  // No division by a size inside a simd loop: every `/ (` and `% (` is in a base line.
  std::istringstream lines(k);
  for (std::string l; std::getline(lines, l);)
    if (l.find("/ (") != std::string::npos || l.find("% (") != std::string::npos)
      EXPECT_NE(l.find("const int64_t base"), std::string::npos) << l;
  EXPECT_NE(k.find("#pragma omp simd"), std::string::npos) << k;
  for (auto [a, b] : {std::pair{2, 2}, {3, 7}, {5, 13}})
    expect_runs_like_interpreter(c, {iota({a, b, 16})});
}

// cat of n pieces with symbolic lengths t0..t(n-1). Piece k's offset is the sum of the k
// lengths before it; written out in every index and condition, the kernel was quadratic in n
// (16 -> 64 pieces: 7.5x the text). An offset of more than two terms is now a symbol bound in
// the body to the previous offset plus one length (lower/index.cpp: running_offsets), so the
// text is linear (measured 4.05x). The inputs' own symbols are named t<N> like the bound ones:
// the fresh names skip them (a fresh t4 would have been the input's t4, shadowed in the kernel).
std::string cat_text(int n) {
  std::string hdr, args, total;
  for (int k = 0; k < n; ++k) {
    std::string t = "t" + std::to_string(k);
    hdr += (k ? ", %" : "%") + std::to_string(k) + ": f32[" + t + ", 8]";
    args += (k ? ", %" : "%") + std::to_string(k);
    total += (k ? " + " : "") + t;
  }
  std::string out = "%" + std::to_string(n), out2 = "%" + std::to_string(n + 1);
  return "graph(" + hdr + "):\n  " + out + ": f32[" + total + ", 8] = aten.cat.default([" + args +
         "])\n  " + out2 + ": f32[" + total + ", 8] = aten.mul.Tensor(" + out +
         ", 2.0)\n  return (" + out2 + ")\n";
}

TEST(SymbolicIndexGolden, CatOfManySymbolicPiecesIsLinear) {
  // The where-chain (a pointwise cat, forced here beyond max_pointwise_cat) is linear.
  const int64_t chain = 1000;
  size_t small = kernels_of(compile_text(cat_text(16), chain).source).size();
  size_t big = kernels_of(compile_text(cat_text(64), chain).source).size();
  EXPECT_LE(big, 9 * small / 2) << small << " -> " << big;
  for (int n : {6, 16}) {
    Compiled c = compile_text(cat_text(n), chain);
    std::string k = kernels_of(c.source);
    // The bound offsets do not vary along the inner loop: it stays a simd loop.
    EXPECT_NE(k.find("#pragma omp simd"), std::string::npos) << k;
    std::vector<HostTensor> in;
    for (int p = 0; p < n; ++p) in.push_back(iota({2 + 3 * p % 7, 8}));
    expect_runs_like_interpreter(c, in);
  }
  // By default 64 pieces are a Cat extern: the kernel reads one buffer, no piece is tested.
  std::string k64 = kernels_of(compile_text(cat_text(64)).source);
  EXPECT_EQ(k64.find('?'), std::string::npos) << k64;
}

}  // namespace
}  // namespace coil::testing
