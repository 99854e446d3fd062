// The CUDA emitter on this (possibly GPU-less) machine: kernel kinds and entry points, the
// golden text of a softmax kernel, and — where libnvrtc can be loaded (COIL_TEST_NVRTC names
// it, else the sonames) — an NVRTC compile of every generated source for sm_90. Running the
// kernels is the GPU tests' job (tests/python/test_cuda_*.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "../sched/test_programs.h"
#include "../test_policies.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/backend/cuda/launch.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/graph/parser.h"
#include "coil/lower/lower.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"

namespace coil::testing {
namespace {

using backend::cuda::CudaSource;
using backend::cuda::KernelKind;

CudaSource emit(const loop::LoopProgram& p) {
  CompileOptions o;
  sched::Schedule s = sched::schedule_program(p, o, coil::test_support::policy_for(p));
  return backend::cuda::emit_cuda(p, s, o);
}

CompileOptions nvrtc_options() {
  CompileOptions o;
  if (const char* path = std::getenv("COIL_TEST_NVRTC")) o.cuda_nvrtc_path = path;
  return o;
}

// Compiles for sm_90 when NVRTC is here; skips visibly otherwise.
void expect_compiles(const CudaSource& src) {
  CompileOptions o = nvrtc_options();
  std::string why = backend::cuda::nvrtc_unavailable_reason(o);
  if (!why.empty()) GTEST_SKIP() << "NVRTC not available: " << why;
  backend::cuda::CubinResult r;
  ASSERT_NO_THROW(r = backend::cuda::compile_to_cubin(src.code, 9, 0, o))
      << backend::cuda::strip_prelude(src.code);
  EXPECT_GT(r.cubin.size(), 1000u);
}

TEST(EmitCuda, SoftmaxIsOneRowKernel) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(16));
  CudaSource src = emit(b.p);
  ASSERT_EQ(src.kernels.size(), 1u);
  EXPECT_EQ(src.kernels[0].kind, KernelKind::Rows);
  EXPECT_EQ(b.ctx().as_const(src.kernels[0].work), std::optional<int64_t>(8));
  EXPECT_EQ(b.ctx().as_const(src.kernels[0].row_size), std::optional<int64_t>(16));
  const std::string code = backend::cuda::strip_prelude(src.code);
  EXPECT_NE(code.find("kernel0_b("), std::string::npos);
  // Contiguous rows of 16 floats: the vector entry points step 4 elements (128 bits); the
  // scalar block entry point is kept for unaligned pointers, the scalar warp one is not.
  EXPECT_EQ(code.find("kernel0_w("), std::string::npos);
  EXPECT_EQ(backend::cuda::entry_name(src.kernels[0], 0), "");
  EXPECT_EQ(src.kernels[0].vec, 4);
  EXPECT_NE(code.find("kernel0_wv("), std::string::npos);
  EXPECT_NE(code.find("kernel0_bv("), std::string::npos);
  EXPECT_EQ(backend::cuda::entry_name(src.kernels[0], 3), "kernel0_bv");
  EXPECT_NE(code.find("group_reduce<G, coil::MaxOp>"), std::string::npos);
  EXPECT_NE(code.find("group_reduce<G, coil::SumOp>"), std::string::npos);
  // Golden text (regenerate with COIL_UPDATE_GOLDEN=1).
  const std::string path = std::string(COIL_SOURCE_DIR) + "/tests/golden/backend_cuda/softmax.cu";
  if (std::getenv("COIL_UPDATE_GOLDEN")) std::ofstream(path) << code;
  std::ifstream in(path);
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(code, want.str());
  expect_compiles(src);
}

TEST(EmitCuda, OnlineSoftmaxFusesMaxAndSumIntoOnePass) {
  ProgramBuilder b;
  build_softmax(b, b.c(8), b.c(64));
  CompileOptions o;
  o.cuda_online_softmax = true;
  sched::Schedule s = sched::schedule_program(b.p, o, coil::test_support::policy_for(b.p));
  CudaSource src = backend::cuda::emit_cuda(b.p, s, o);
  const std::string code = backend::cuda::strip_prelude(src.code);
  EXPECT_NE(code.find("in one pass"), std::string::npos) << code;
  EXPECT_NE(code.find("group_reduce<G, coil::SumOp>(s_ * coil::m::exp(m_ - rmax_))"),
            std::string::npos);
  // Two row loops (max with sum, then the output) instead of three.
  size_t loops = 0;  // plain row loops and the plain form of the step lambdas'
  for (size_t at = code.find("e_ += g_)"); at != std::string::npos;
       at = code.find("e_ += g_)", at + 1))
    ++loops;
  EXPECT_EQ(loops, 2u) << code;
  // Off (the default): three loops.
  const std::string plain = backend::cuda::strip_prelude(emit(b.p).code);
  EXPECT_EQ(plain.find("in one pass"), std::string::npos);
  expect_compiles(src);
}

// Rows of 32 KiB and more are stored evict-first (the output must not push the rows that
// later passes re-read out of L2); shorter rows with plain stores.
TEST(EmitCuda, LongRowsGetStreamingStores) {
  ProgramBuilder b1;
  build_softmax(b1, b1.c(4), b1.c(8192));
  EXPECT_NE(backend::cuda::strip_prelude(emit(b1.p).code).find("coil::store_streaming("),
            std::string::npos);
  ProgramBuilder b2;
  build_softmax(b2, b2.c(4), b2.c(4096));
  EXPECT_EQ(backend::cuda::strip_prelude(emit(b2.p).code).find("coil::store_streaming("),
            std::string::npos);
}

// The block-per-row vector entry point keeps a row that several members re-read in shared
// memory; rows too long for it (over 40 KiB) are read from global memory each pass.
TEST(EmitCuda, ReReadRowsAreCachedInSharedMemory) {
  ProgramBuilder b1;
  build_layer_norm(b1, b1.c(4), b1.c(4096));
  const std::string ln = backend::cuda::strip_prelude(emit(b1.p).code);
  EXPECT_NE(ln.find("__shared__ coil::Vec<float, V> rc0_[RC ? 4096 / V : 1];"), std::string::npos)
      << ln;
  // ... and _br (a block of 512 threads) in registers.
  EXPECT_NE(ln.find("CC ? (RC ? rc0_[e_] : rr0_[it_]) :"), std::string::npos) << ln;
  ProgramBuilder b2;
  build_softmax(b2, b2.c(4), b2.c(16384));
  EXPECT_EQ(backend::cuda::strip_prelude(emit(b2.p).code).find("__shared__"), std::string::npos);
}

TEST(EmitCuda, SymbolicSoftmaxUses64BitIndexAndCompiles) {
  ProgramBuilder b;
  Expr R = b.size_symbol("s0", 0, 0), C = b.size_symbol("s1", 0, 1);
  build_softmax(b, R, C, DType::BFloat16);
  CudaSource src = emit(b.p);
  const std::string code = backend::cuda::strip_prelude(src.code);
  EXPECT_NE(code.find("int64_t s0"), std::string::npos);
  EXPECT_NE(code.find("coil::to_f32("), std::string::npos);
  EXPECT_NE(code.find("coil::to_bf16("), std::string::npos);
  // Extents unknown at compile time: no vector entry points.
  EXPECT_EQ(src.kernels[0].vec, 0);
  EXPECT_EQ(backend::cuda::entry_name(src.kernels[0], 2), "");
  expect_compiles(src);
}

TEST(EmitCuda, ContiguousPointwiseGetsVectorEntryPoint) {
  ProgramBuilder b;
  build_pointwise_chain(b, b.c(64), b.c(128));
  CudaSource src = emit(b.p);
  ASSERT_FALSE(src.kernels.empty());
  for (const auto& k : src.kernels) {
    EXPECT_EQ(k.kind, KernelKind::Pointwise);
    EXPECT_EQ(k.vec, 4) << k.name;
  }
  const std::string code = backend::cuda::strip_prelude(src.code);
  EXPECT_NE(code.find("coil::Vec<float, 4>"), std::string::npos);
  EXPECT_NE(code.find("const int x"), std::string::npos) << "32-bit indexing expected";
  expect_compiles(src);
}

TEST(EmitCuda, LayerNormAndTransposesCompile) {
  ProgramBuilder b1;
  build_layer_norm(b1, b1.c(32), b1.c(1000));
  CudaSource ln = emit(b1.p);
  ASSERT_EQ(ln.kernels.size(), 1u);
  EXPECT_EQ(ln.kernels[0].kind, KernelKind::Rows);
  EXPECT_EQ(ln.kernels[0].vec, 4);  // 1000 = 250 steps of 4 floats
  expect_compiles(ln);
  ProgramBuilder b3;
  build_layer_norm(b3, b3.c(32), b3.c(999));
  EXPECT_EQ(emit(b3.p).kernels[0].vec, 0);  // rows not a multiple of 4: scalar only
  ProgramBuilder b2;
  build_transposes(b2, b2.c(33), b2.c(65));
  CudaSource tr = emit(b2.p);
  expect_compiles(tr);
}

// Graph text through lowering and scheduling, as compile_graph does.
CudaSource emit_graph(const std::string& text, const CompileOptions& o = {}) {
  sym::Context ctx;
  auto g = parse_graph(text, ctx);
  auto lowered = lower::lower_graph(*g, o, coil::test_support::policy_for(*g));
  sched::align_iteration_spaces(lowered.program);
  sched::Schedule s =
      sched::schedule_program(lowered.program, o, coil::test_support::policy_for(lowered.program));
  return backend::cuda::emit_cuda(lowered.program, s, o);
}

// The kernels' text of a graph, prelude left out.
std::string code_of(const std::string& text) {
  return backend::cuda::strip_prelude(emit_graph(text).code);
}

// The vector entry point (_v) of a source's only kernel, or "" where there is none.
std::string only_vector_entry(const CudaSource& src) {
  const std::string code = backend::cuda::strip_prelude(src.code);
  if (src.kernels.size() != 1) return "";
  const size_t at = code.find(src.kernels[0].name + "_v(");
  return at == std::string::npos ? "" : code.substr(at, code.find("\n}\n", at) - at);
}

TEST(EmitCuda, LoweredGraphsCompile) {
  const char* graphs[] = {
      "graph(%0: f32[1000]@cuda, %1: f32[1000]@cuda):\n"
      "  %2: f32[1000]@cuda = aten.mul.Tensor(%0, 2)\n"
      "  %3: f32[1000]@cuda = aten.add.Tensor(%2, %1)\n"
      "  %4: f32[1000]@cuda = aten.sigmoid.default(%3)\n"
      "  return (%4)\n",
      "graph(%0: f32[33, 70]@cuda):\n"
      "  %1: f32[33]@cuda = aten.sum.dim_IntList(%0, [-1])\n"
      "  return (%1)\n",
      // Vector row entry points with bf16 loads and an argmax.
      "graph(%0: bf16[16, 64]@cuda):\n"
      "  %1: i64[16]@cuda = aten.argmax.default(%0, -1)\n"
      "  %2: bf16[16, 64]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  return (%1, %2)\n",
  };
  for (const char* text : graphs) {
    CudaSource src;
    ASSERT_NO_THROW(src = emit_graph(text)) << text;
    expect_compiles(src);
  }
}

// A depthwise convolution over NHWC activations (MobileNet's 3x3 taps, fused with the ReLU
// after it) reads each tap under a padding test of the spatial position only: the vector entry
// point loads `vec` channels per tap under that one condition instead of staying scalar.
TEST(EmitCuda, DepthwiseTapsGetMaskedVectorLoads) {
  CompileOptions native;  // (off by default: cuDNN runs depthwise convolutions)
  native.cuda_native_depthwise = true;
  CudaSource src = emit_graph(
      "graph(%0: bf16[2, 32, 14, 14]{6272, 1, 448, 32}@cuda, %1: bf16[32, 1, 3, 3]@cuda):\n"
      "  %2: bf16[2, 32, 14, 14]{6272, 1, 448, 32}@cuda = aten.convolution.default(%0, %1, "
      "None, [1, 1], [1, 1], [1, 1], false, [0, 0], 32)\n"
      "  %3: bf16[2, 32, 14, 14]{6272, 1, 448, 32}@cuda = aten.relu.default(%2)\n"
      "  return (%3)\n",
      native);
  const std::string code = backend::cuda::strip_prelude(src.code);
  // The kernel of the taps: the one whose vector entry point loads under a condition.
  const std::string masked_load = ") L0 = *(const coil::Vec<coil::bf16, ";
  int found = 0;
  for (const auto& k : src.kernels) {
    const size_t at = code.find(k.name + "_v(");
    if (at == std::string::npos) continue;
    const size_t end = code.find("\n}\n", at);
    if (code.substr(at, end - at).find(masked_load) == std::string::npos) continue;
    ++found;
    // 9 taps, 9 weights and the store at 2 bytes each: 2 or 4 channels per thread keep the
    // vectors within 128 bytes (8 channels spilled registers on the GPU).
    EXPECT_GE(k.vec, 2) << code;
    EXPECT_LE(k.vec * 2 * 19, 128) << code;
  }
  EXPECT_EQ(found, 1) << code;
  expect_compiles(src);
}

// A max-pool with padding over a per-channel affine (ResNet's stem: BatchNorm and ReLU inlined
// into each of the 9 taps). The taps' loads may fall in the padding and stay masked; the
// per-channel parameters are read inside their buffers at every point, so each is one unmasked
// vector for all 9 taps, and the thread's vectors fit 4 channels in 128 bytes (9 taps, 2
// parameters, the store), where counting a parameter per tap allowed 2.
TEST(EmitCuda, InBoundsMaskedLoadsShareOneVector) {
  CudaSource src = emit_graph(
      "graph(%0: bf16[2, 64, 16, 16]{16384, 1, 1024, 64}@cuda, %1: bf16[64, 1, 1]@cuda, "
      "%2: bf16[64, 1, 1]@cuda):\n"
      "  %3: bf16[2, 64, 16, 16]{16384, 1, 1024, 64}@cuda = aten.mul.Tensor(%0, %1)\n"
      "  %4: bf16[2, 64, 16, 16]{16384, 1, 1024, 64}@cuda = aten.add.Tensor(%3, %2)\n"
      "  %5: bf16[2, 64, 16, 16]{16384, 1, 1024, 64}@cuda = aten.relu.default(%4)\n"
      "  %6: bf16[2, 64, 8, 8]{4096, 1, 512, 64}@cuda, %7: i64[2, 64, 8, 8]{4096, 1, 512, 64}@cuda "
      "= aten.max_pool2d_with_indices.default(%5, [3, 3], [2, 2], [1, 1])\n"
      "  return (%6)\n");
  const std::string v = only_vector_entry(src);
  ASSERT_NE(v, "") << backend::cuda::strip_prelude(src.code);
  EXPECT_EQ(src.kernels[0].vec, 4) << v;
  // One unmasked vector per parameter; the taps' loads at padded positions under their tests.
  for (const std::string param : {"in1", "in2"}) {
    size_t n = 0;
    for (size_t p = v.find("*)(" + param + " + "); p != std::string::npos;
         p = v.find("*)(" + param + " + ", p + 1))
      ++n;
    EXPECT_EQ(n, 1u) << param << "\n" << v;
    EXPECT_NE(v.find("= *(const coil::Vec<coil::bf16, 4>*)(" + param + " + "), std::string::npos)
        << v;
  }
  EXPECT_NE(v.find(") L0 = *(const coil::Vec<coil::bf16, 4>*)(in0 + "), std::string::npos) << v;
  expect_compiles(src);
}

// A transposed read (attention's k^T materialized for a bmm; a bias added to a permuted input)
// gets the tiled entry point _t: both tile phases, shared arrays with a padded pitch, the
// transposed load read from shared memory, the contiguous one from global memory.
// A product reads either orientation in place, so an elementwise result that it reads through
// a transpose (a weight gradient's permute of a value the backward computes again) is written
// in its own order, the transposed view's eager layout: a plain vector kernel, no tile.
TEST(EmitCuda, TransposedProductOperandIsWrittenInItsOwnOrder) {
  // mm's [rows, cols] operand, and a batched product's [batch, rows, cols] one (`b`: the batch
  // dim's text), transposed in the last two dims.
  auto product = [](const std::string& b, const std::string& strides, const std::string& perm,
                    const std::string& op) {
    return emit_graph("graph(%0: bf16[" + b + "256, 192]@cuda, %1: f32[" + b +
                      "256, 192]@cuda, %2: bf16[" + b + "256, 64]@cuda):\n  %3: f32[" + b +
                      "256, 192]@cuda = aten.mul.Tensor(%0, %1)\n  %4: bf16[" + b +
                      "256, 192]@cuda = aten._to_copy.default(%3, dtype=dtype(bf16))\n  %5: bf16[" +
                      b + "192, 256]{" + strides + "}@cuda = aten.permute.default(%4, [" + perm +
                      "])\n  %6: bf16[" + b + "192, 64]@cuda = aten." + op +
                      ".default(%5, %2)\n  return (%6)\n");
  };
  for (const CudaSource& src :
       {product("", "1, 192", "1, 0", "mm"), product("8, ", "49152, 1, 192", "0, 2, 1", "bmm")}) {
    const std::string code = backend::cuda::strip_prelude(src.code);
    ASSERT_EQ(src.kernels.size(), 1u) << code;
    const auto& k = src.kernels[0];
    EXPECT_EQ(k.kind, KernelKind::Pointwise);
    EXPECT_EQ(k.tile, 0) << code;
    EXPECT_GT(k.vec, 0) << code;
    expect_compiles(src);
  }
}

// The same element read by two members whose indices were built over their own variables (a
// softmax backward's sum over g * p, then the pointwise p * (g - sum)): one row cache slot
// for each input. Their index expressions order their terms by variable, so the cache's keys
// compare them over shared symbols.
TEST(EmitCuda, MembersReadingTheSameRowShareTheRowCache) {
  CudaSource src = emit_graph(
      "graph(%0: f32[8, 12, 512, 512]@cuda, %1: f32[8, 12, 512, 512]@cuda):\n"
      "  %2: f32[8, 12, 512, 512]@cuda = aten.mul.Tensor(%0, %1)\n"
      "  %3: f32[8, 12, 512, 1]@cuda = aten.sum.dim_IntList(%2, [-1], true)\n"
      "  %4: f32[8, 12, 512, 512]@cuda = aten.mul.Tensor(%1, %3)\n"
      "  %5: f32[8, 12, 512, 512]@cuda = aten.sub.Tensor(%2, %4)\n"
      "  return (%5)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  ASSERT_EQ(src.kernels.size(), 1u) << code;
  EXPECT_NE(code.find("CC ? (RC ? rc0_[e_]"), std::string::npos) << code;
  EXPECT_NE(code.find("CC ? (RC ? rc1_[e_]"), std::string::npos) << code;
  expect_compiles(src);
}

// A dropout after a softmax is a row kernel: it takes the row vector entry points, four
// elements a step, each step's draws from one Philox block (coil::rand_uniform_in).
TEST(EmitCuda, RowKernelsWithUniformDrawsAreVectorized) {
  CudaSource src = emit_graph(
      "graph(%0: f32[8, 512, 768]@cuda):\n"
      "  %1: f32[8, 512, 768]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  %2: f32[8, 512, 768]@cuda = aten.rand_like.default(%1)\n"
      "  %3: b8[8, 512, 768]@cuda = aten.gt.Scalar(%2, 0.1)\n"
      "  %4: f32[8, 512, 768]@cuda = aten.mul.Tensor(%1, %3)\n"
      "  return (%4)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  ASSERT_EQ(src.kernels.size(), 1u) << code;
  EXPECT_EQ(src.kernels[0].vec, 4) << code;
  EXPECT_NE(code.find("coil::philox_quad("), std::string::npos) << code;
  EXPECT_NE(code.find("coil::rand_uniform_in(rq"), std::string::npos) << code;
  expect_compiles(src);
}

// Dropout masks take the vector entry point, four elements a thread from one Philox block
// (coil::rand_uniform_in), member by member; masks over an odd inner extent stay scalar.
TEST(EmitCuda, UniformDrawsAreVectorizedFourAThread) {
  CudaSource src = emit_graph(
      "graph(%0: f32[8, 512, 768]@cuda):\n"
      "  %1: f32[8, 512, 768]@cuda = aten.rand_like.default(%0)\n"
      "  %2: b8[8, 512, 768]@cuda = aten.gt.Scalar(%1, 0.1)\n"
      "  %3: f32[8, 512, 768]@cuda = aten.rand_like.default(%0)\n"
      "  %4: b8[8, 512, 768]@cuda = aten.gt.Scalar(%3, 0.1)\n"
      "  return (%2, %4)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  ASSERT_EQ(src.kernels.size(), 1u) << code;
  EXPECT_EQ(src.kernels[0].vec, 4) << code;
  EXPECT_NE(code.find("coil::rand_uniform_in(rq0_"), std::string::npos) << code;
  EXPECT_NE(code.find("coil::rand_uniform_in(rq1_"), std::string::npos) << code;
  expect_compiles(src);
  CudaSource odd = emit_graph(
      "graph(%0: f32[8, 511]@cuda):\n"
      "  %1: f32[8, 511]@cuda = aten.rand_like.default(%0)\n"
      "  return (%1)\n");
  ASSERT_EQ(odd.kernels.size(), 1u);
  EXPECT_EQ(odd.kernels[0].vec, 0);
}

// A chain reading a new input at every step fuses into one kernel only up to 96 buffers
// (sched/fusion.cpp: too_many_buffers); a CUDA launch takes at most 4 KiB of parameters.
TEST(EmitCuda, KernelsTakeAtMost96Buffers) {
  std::string g = "graph(";
  for (int i = 0; i < 120; ++i) g += (i ? ", %" : "%") + std::to_string(i) + ": f32[64, 256]@cuda";
  g += "):\n";
  std::string last = "%0";
  for (int i = 1; i < 120; ++i) {
    const std::string v = "%" + std::to_string(119 + i);
    g += "  " + v + ": f32[64, 256]@cuda = aten.add.Tensor(" + last + ", %" + std::to_string(i) +
         ")\n";
    last = v;
  }
  g += "  return (" + last + ")\n";
  CudaSource src = emit_graph(g);
  ASSERT_GE(src.kernels.size(), 2u);
  for (const auto& k : src.kernels) EXPECT_LE(k.buffers.size(), 96u) << k.name;
}

// A concatenation along the inner dim reads each piece under a mask on the inner index
// (`768 <= x1 < 1536`): constant over aligned chunks of the vector's width where the pieces'
// boundaries are multiples of it, so the kernel gets its vector entry point, as wide as the
// boundaries allow; pieces of odd width keep the scalar loop.
TEST(EmitCuda, ConcatenationAlongInnerDimIsVectorized) {
  auto cat = [](const std::string& a, const std::string& b, const std::string& c,
                const std::string& out) {
    return emit_graph("graph(%0: bf16[64, " + a + "]@cuda, %1: bf16[64, " + b +
                      "]@cuda, %2: bf16[64, " + c + "]@cuda):\n  %3: bf16[64, " + out +
                      "]@cuda = aten.cat.default([%0, %1, %2], 1)\n  return (%3)\n");
  };
  CudaSource qkv = cat("768", "768", "768", "2304");
  ASSERT_EQ(qkv.kernels.size(), 1u);
  EXPECT_EQ(qkv.kernels[0].vec, 8) << backend::cuda::strip_prelude(qkv.code);
  expect_compiles(qkv);
  CudaSource fours = cat("100", "156", "40", "296");
  ASSERT_EQ(fours.kernels.size(), 1u);
  EXPECT_EQ(fours.kernels[0].vec, 4) << backend::cuda::strip_prelude(fours.code);
  expect_compiles(fours);
  CudaSource odd = cat("101", "155", "40", "296");
  ASSERT_EQ(odd.kernels.size(), 1u);
  EXPECT_EQ(odd.kernels[0].vec, 0) << backend::cuda::strip_prelude(odd.code);
}

TEST(EmitCuda, TransposedReadsGetTiledEntryPoint) {
  CudaSource src = emit_graph(
      "graph(%0: bf16[8, 70, 12, 64]@cuda, %1: bf16[70]@cuda):\n"
      "  %2: bf16[8, 12, 64, 70]{53760, 64, 1, 768}@cuda = aten.permute.default(%0, [0, 2, 3, 1])\n"
      "  %3: bf16[8, 12, 64, 70]@cuda = aten.add.Tensor(%2, %1)\n"
      "  return (%3)\n");
  ASSERT_EQ(src.kernels.size(), 1u);
  const auto& k = src.kernels[0];
  EXPECT_EQ(k.kind, KernelKind::Pointwise);
  EXPECT_EQ(k.tile, 64);  // 2-byte elements
  EXPECT_EQ(k.vec, 0);
  EXPECT_EQ(backend::cuda::entry_name(k, 2), k.name + "_t");
  const std::string code = backend::cuda::strip_prelude(src.code);
  EXPECT_NE(code.find("__shared__ coil::bf16 t0_[64][64 + 2];"), std::string::npos) << code;
  EXPECT_NE(code.find("t0_[i_][j_] = "), std::string::npos) << code;
  EXPECT_NE(code.find("coil::to_f32(t0_[j_][i_])"), std::string::npos) << code;
  EXPECT_EQ(code.find("t1_"), std::string::npos) << "the bias is contiguous: no tile";
  expect_compiles(src);
  backend::cuda::DeviceInfo dev;
  dev.sm_count = 132;
  auto c = backend::cuda::choose_launch(k, 8 * 12 * 64 * 70, 1, true, dev);
  EXPECT_EQ(c.entry, 2);
  EXPECT_EQ(c.block, backend::cuda::kTiledBlock);
  // A block per tile: 8 x 12 planes of 2 x 1 tiles (70 columns take two 64-wide tiles), where
  // the elements alone would fill 105 tiles.
  EXPECT_EQ(c.grid, 192u);
  // Measured candidates include the untiled scalar entry point.
  bool scalar = false;
  for (const auto& cand : backend::cuda::launch_candidates(k, 1 << 22, 1, true, dev))
    scalar |= cand.entry == 0;
  EXPECT_TRUE(scalar);
  // Symbolic sizes: 64-bit indices, ragged edge tiles guarded.
  CudaSource sym = emit_graph(
      "graph(%0: f32[s0, s1]{s1, 1}@cuda):\n"
      "  %1: f32[s1, s0]{1, s1}@cuda = aten.permute.default(%0, [1, 0])\n"
      "  %2: f32[s1, s0]@cuda = aten.mul.Tensor(%1, 2)\n"
      "  return (%2)\n");
  ASSERT_EQ(sym.kernels.size(), 1u);
  EXPECT_EQ(sym.kernels[0].tile, 32);  // 4-byte elements
  expect_compiles(sym);
  // Contiguous pointwise: no tiled entry point.
  CudaSource plain = emit_graph(
      "graph(%0: f32[64, 70]@cuda):\n"
      "  %1: f32[64, 70]@cuda = aten.mul.Tensor(%0, 2)\n"
      "  return (%1)\n");
  EXPECT_EQ(plain.kernels[0].tile, 0);
  // A transpose one of whose tiled dims is narrow (a 3x3 weight copied channels-last: its 32
  // channels against the 3 columns) keeps the untiled entries: a tile would be mostly empty.
  CudaSource narrow = emit_graph(
      "graph(%0: bf16[64, 32, 3, 3]@cuda):\n"
      "  %1: bf16[64, 32, 3, 3]{288, 1, 96, 32}@cuda = aten.clone.default(%0, "
      "memory_format=\"torch.channels_last\")\n"
      "  return (%1)\n");
  ASSERT_EQ(narrow.kernels.size(), 1u);
  EXPECT_EQ(narrow.kernels[0].tile, 0);
  EXPECT_EQ(backend::cuda::entry_name(narrow.kernels[0], 2), "");
}

// Reductions over the rows of a row-major matrix (bias gradients, LayerNorm-weight gradients,
// an argmax over dim 0) read across rows: they get the column entry point _c, C adjacent
// columns per warp (8 for f32, 16 for bf16); row reductions do not.
TEST(EmitCuda, ColumnReductionsGetColumnEntryPoint) {
  CudaSource src = emit_graph(
      "graph(%0: f32[1024, 768]@cuda, %1: f32[1024, 768]@cuda, %2: bf16[300, 50]@cuda):\n"
      "  %3: f32[1024, 768]@cuda = aten.mul.Tensor(%0, %1)\n"
      "  %4: f32[768]@cuda = aten.sum.dim_IntList(%3, [0])\n"
      "  %5: f32[768]@cuda = aten.sum.dim_IntList(%0, [0])\n"
      "  %6: i64[50]@cuda = aten.argmax.default(%2, 0)\n"
      "  %7: bf16[300, 50]@cuda = aten._softmax.default(%2, 0, false)\n"
      "  return (%4, %5, %6, %7)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  int columns = 0;
  for (const auto& k : src.kernels) {
    if (k.kind != KernelKind::Rows) continue;
    ++columns;
    EXPECT_EQ(backend::cuda::entry_name(k, 4), k.name + "_c") << code;
    EXPECT_NE(code.find(k.name + "_impl<-" + std::to_string(k.column) + ">"), std::string::npos)
        << code;
  }
  EXPECT_GE(columns, 2) << code;
  std::set<int> widths;
  for (const auto& k : src.kernels) widths.insert(k.column);
  EXPECT_TRUE(widths.count(8)) << code;
  EXPECT_TRUE(widths.count(16)) << code;
  backend::cuda::DeviceInfo dev;
  dev.sm_count = 132;
  for (const auto& k : src.kernels) {
    if (k.column == 0) continue;
    auto c = backend::cuda::choose_launch(k, 768, 4096, true, dev);
    EXPECT_EQ(c.entry, 4);
    EXPECT_GE(c.block, 128u);
    EXPECT_LE(c.block, 1024u);
    EXPECT_EQ(c.grid, 768u / k.column);
  }
  // The f32 sums over 768 columns (a multiple of 4) also get the vector column entry point
  // _cv, 4 columns a thread; the bf16 sum over 50 columns and the arg reductions do not.
  int vec_columns = 0;
  for (const auto& k : src.kernels) {
    if (k.column_vec == 0) {
      EXPECT_EQ(backend::cuda::entry_name(k, 6), "");
      continue;
    }
    ++vec_columns;
    EXPECT_EQ(k.column_vec, 4);
    EXPECT_EQ(backend::cuda::entry_name(k, 6), k.name + "_cv");
    EXPECT_NE(code.find(k.name + "_cv("), std::string::npos) << code;
    // 768 columns make 24 block-rows of 32: too few for the device, _c; 8192 make 256.
    EXPECT_EQ(backend::cuda::choose_launch(k, 768, 4096, true, dev).entry, 4);
    auto c = backend::cuda::choose_launch(k, 8192, 4096, true, dev);
    EXPECT_EQ(c.entry, 6);
    EXPECT_EQ(c.grid, 256u);
    EXPECT_EQ(backend::cuda::choose_launch(k, 8192, 4096, false, dev).entry, 4);  // unaligned
    bool candidate = false;
    for (const auto& cand : backend::cuda::launch_candidates(k, 768, 4096, true, dev))
      candidate = candidate || cand.entry == 6;
    EXPECT_TRUE(candidate);
  }
  EXPECT_EQ(vec_columns, 1) << code;  // %4 and %5 share one kernel
  CudaSource rows = emit_graph(
      "graph(%0: f32[768, 4096]@cuda):\n"
      "  %1: f32[768]@cuda = aten.sum.dim_IntList(%0, [1])\n"
      "  return (%1)\n");
  EXPECT_EQ(rows.kernels[0].column, 0);
  EXPECT_EQ(rows.kernels[0].column_vec, 0);
  EXPECT_EQ(backend::cuda::entry_name(rows.kernels[0], 4), "");
  expect_compiles(src);  // last: skips where NVRTC is missing
}

// A LayerNorm's weight and bias gradients under autocast: sums over the tokens of a bfloat16
// gradient times the float32 normalized input, whose per-token statistics every output reads.
// Those loads run along the reduction but are the same for every output (a small cached
// array, not streamed traffic): they must not outweigh the gradient's and the input's reads
// across rows, which want the column entry points (as a row-per-warp kernel this ran at 0.65
// TB/s on the H100, GPT-2's bf16-autocast training).
TEST(EmitCuda, ColumnReductionWithPerTokenStatisticsGetsColumnEntryPoints) {
  CudaSource src = emit_graph(
      "graph(%0: bf16[4096, 768]@cuda, %1: f32[4096, 768]@cuda, %2: f32[4096, 1]@cuda, "
      "%3: f32[4096, 1]@cuda):\n"
      "  %4: f32[4096, 768]@cuda = aten.sub.Tensor(%1, %2)\n"
      "  %5: f32[4096, 768]@cuda = aten.mul.Tensor(%4, %3)\n"
      "  %6: f32[4096, 768]@cuda = aten.mul.Tensor(%0, %5)\n"
      "  %7: f32[768]@cuda = aten.sum.dim_IntList(%6, [0])\n"
      "  %8: f32[768]@cuda = aten.sum.dim_IntList(%0, [0], false, dtype=\"torch.float32\")\n"
      "  return (%7, %8)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  int rows = 0;
  for (const auto& k : src.kernels) {
    if (k.kind != KernelKind::Rows) continue;
    ++rows;
    EXPECT_GT(k.column, 0) << code;
    EXPECT_EQ(backend::cuda::entry_name(k, 4), k.name + "_c") << code;
    EXPECT_EQ(k.column_vec, 4) << code;
    EXPECT_NE(code.find(k.name + "_cv("), std::string::npos) << code;
  }
  EXPECT_GE(rows, 1) << code;  // the sums' two stages where they are split
  expect_compiles(src);
}

// A pointwise kernel whose member reads back what an earlier member stores (the clone of a
// realized output) takes that member's value in the vector entry point, which loads every input
// before any member stores (GPT-2's causal mask, saved once per layer, read a stale buffer).
TEST(EmitCuda, MemberReadingAnotherMembersStoreTakesItsValue) {
  CudaSource src = emit_graph(
      "graph(%0: i64[8]@cuda):\n"
      "  %1: i64[1, 8]@cuda = aten.unsqueeze.default(%0, -2)\n"
      "  %2: i64[8, 1]@cuda = aten.unsqueeze.default(%0, -1)\n"
      "  %3: i64[8, 8]@cuda = aten.sub.Tensor(%1, %2)\n"
      "  %4: b8[8, 8]@cuda = aten.le.Scalar(%3, 0)\n"
      "  %5: b8[8, 8]@cuda = aten.clone.default(%4)\n"
      "  return (%4, %5)\n");
  const std::string v = only_vector_entry(src);
  ASSERT_NE(v, "") << backend::cuda::strip_prelude(src.code);
  // The clone reads S0 (the first member's values), and no vector load reads the mask buffer.
  EXPECT_NE(v.find("(S0.v[u_] != 0)"), std::string::npos) << v;
  EXPECT_EQ(v.find("const coil::Vec<uint8_t"), std::string::npos) << v;
  expect_compiles(src);
}

// Real models' graphs (tests/golden/cuda_models, written by tools/export_cuda_graphs.py: GPT-2
// and ResNet-50 training steps at the benchmark's quick size, exported on the CPU as the CUDA
// path would, re-annotated @cuda): every kernel emits and, where NVRTC loads, compiles. GPT-2's
// forward saves its causal mask once per layer (a clone after CSE), read back from the member
// that stores it; ResNet's backward runs BatchNorm's sums in one pass over NHWC columns.
TEST(EmitCuda, ModelGraphsEmitAndCompile) {
  auto source = [](const std::string& name) {
    std::ifstream in(std::string(COIL_SOURCE_DIR) + "/tests/golden/cuda_models/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_FALSE(ss.str().empty()) << name;
    return emit_graph(ss.str());
  };
  CudaSource gpt2_fw = source("gpt2_train_forward.graph");
  EXPECT_NE(gpt2_fw.code.find("(S0.v[u_] != 0)"), std::string::npos);
  CudaSource resnet_bw = source("resnet50_train_backward.graph");
  const std::string code = backend::cuda::strip_prelude(resnet_bw.code);
  EXPECT_NE(code.find(": one pass over the row"), std::string::npos);
  int columns = 0;
  for (const auto& k : resnet_bw.kernels) columns += k.column > 0;
  EXPECT_GT(columns, 0);
  for (const CudaSource* s : {&gpt2_fw, &resnet_bw}) EXPECT_GT(s->kernels.size(), 10u);
  for (const char* name : {"gpt2_train_backward.graph", "resnet50_train_forward.graph"})
    EXPECT_GT(source(name).kernels.size(), 10u) << name;
  expect_compiles(gpt2_fw);
  expect_compiles(resnet_bw);
}

// Each entry point is cut out of its kernel whole (NVRTC units may take some entry points of a
// kernel and not others): the names found are the ones the runtime looks up, no line is lost
// or repeated, and a unit of one entry point per kernel compiles on its own.
TEST(EmitCuda, EntryPointsSplitIntoUnits) {
  std::ifstream in(std::string(COIL_SOURCE_DIR) + "/tests/golden/cuda_models/" +
                   "resnet50_train_backward.graph");
  std::stringstream ss;
  ss << in.rdbuf();
  CudaSource src = emit_graph(ss.str());
  ASSERT_GT(src.distinct.size(), 10u);
  auto sorted_lines = [](const std::string& code, bool drop_comments) {
    std::vector<std::string> out;
    std::istringstream lines(code);
    for (std::string l; std::getline(lines, l);)
      if (!l.empty() && !(drop_comments && l.starts_with("//"))) out.push_back(l);
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<std::pair<int, int>> all, first_only;
  for (size_t d = 0; d < src.distinct.size(); ++d) {
    const backend::cuda::KernelCode& kc = src.distinct[d];
    ASSERT_FALSE(kc.entries.empty()) << kc.shared;
    for (size_t e = 0; e < kc.entries.size(); ++e) {
      all.emplace_back(static_cast<int>(d), static_cast<int>(e));
      EXPECT_TRUE(kc.entries[e].code.starts_with("extern \"C\" __global__")) << kc.entries[e].code;
      EXPECT_TRUE(kc.entries[e].code.ends_with("\n}\n")) << kc.entries[e].code;
      EXPECT_EQ(kc.shared.find("extern \"C\""), std::string::npos) << kc.shared;
    }
    first_only.emplace_back(static_cast<int>(d), 0);
  }
  // The names: exactly the entry points the runtime looks up for the kernel that owns them.
  for (size_t i = 0; i < src.kernels.size(); ++i) {
    const auto& k = src.kernels[i];
    if (!k.entry.empty()) continue;
    std::set<std::string> want, got;
    for (int e = 0; e < backend::cuda::kRowEntries; ++e)
      if (std::string n = backend::cuda::entry_name(k, e); !n.empty()) want.insert(n);
    for (const auto& e : src.distinct[src.distinct_of[i]].entries) got.insert(e.name);
    EXPECT_EQ(want, got) << k.name;
  }
  // Every line of the kernels, once (comments aside: copies of a kernel leave one in the
  // whole source and none in a unit).
  EXPECT_EQ(
      sorted_lines(backend::cuda::strip_prelude(backend::cuda::cuda_unit(src.distinct, all)), true),
      sorted_lines(backend::cuda::strip_prelude(src.code), true));
  CompileOptions o = nvrtc_options();
  if (std::string why = backend::cuda::nvrtc_unavailable_reason(o); !why.empty())
    GTEST_SKIP() << "NVRTC not available: " << why;
  EXPECT_NO_THROW(
      backend::cuda::compile_to_cubin(backend::cuda::cuda_unit(src.distinct, first_only), 9, 0, o));
}

// Reductions of one kernel over the same ranges that read none of each other's results run
// in one loop with an accumulator each (a BatchNorm backward's two sums read the gradient
// once); a reduction that reads an earlier one's result (the variance after the mean) keeps
// its own pass.
TEST(EmitCuda, IndependentReductionsShareOnePass) {
  CudaSource src = emit_graph(
      "graph(%0: f32[1024, 768]@cuda, %1: f32[1024, 768]@cuda):\n"
      "  %2: f32[768]@cuda = aten.sum.dim_IntList(%0, [0])\n"
      "  %3: f32[1024, 768]@cuda = aten.mul.Tensor(%0, %1)\n"
      "  %4: f32[768]@cuda = aten.sum.dim_IntList(%3, [0])\n"
      "  %5: f32[768]@cuda = aten.amax.default(%1, [0])\n"
      "  return (%2, %4, %5)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  ASSERT_EQ(src.kernels.size(), 1u) << code;
  EXPECT_NE(code.find(": one pass over the row"), std::string::npos) << code;
  EXPECT_NE(code.find("acc2 = coil::MaxOp::apply(acc2"), std::string::npos) << code;
  EXPECT_EQ(code.find("float acc = "), std::string::npos) << code;  // no separate pass
  expect_compiles(src);
  // (64 rows of 2048: below split_reduction_min_elements, so the variance is not one-pass.)
  CudaSource var = emit_graph(
      "graph(%0: f32[64, 2048]@cuda):\n"
      "  %1: f32[64]@cuda, %2: f32[64]@cuda = aten.var_mean.correction(%0, [1], correction=0)\n"
      "  return (%1, %2)\n");
  const std::string vcode = backend::cuda::strip_prelude(var.code);
  EXPECT_EQ(vcode.find("one pass over the row"), std::string::npos) << vcode;
}

// A row loop's dims whose strides chain in every index it computes are counted by one
// variable (fold_loop_vars): a sum over the leading dims of a contiguous [16, 32, 768] reads
// 768 * r with no div/mod by 32; over a permuted view the dims do not chain and stay apart.
TEST(EmitCuda, ChainedLoopDimsFoldIntoOneCounter) {
  const std::string folded = code_of(
      "graph(%0: f32[16, 32, 768]@cuda):\n"
      "  %1: f32[768]@cuda = aten.sum.dim_IntList(%0, [0, 1])\n"
      "  return (%1)\n");
  EXPECT_EQ(folded.find("% (int)(32)"), std::string::npos) << folded;
  EXPECT_NE(folded.find("e_ < (int)(512)"), std::string::npos) << folded;
  EXPECT_NE(folded.find("in0[x0 + 768*r"), std::string::npos) << folded;
  const std::string apart = code_of(
      "graph(%0: f32[16, 32, 768]@cuda):\n"
      "  %1: f32[32, 16, 768]@cuda = aten.permute.default(%0, [1, 0, 2])\n"
      "  %2: f32[768]@cuda = aten.sum.dim_IntList(%1, [0, 1])\n"
      "  return (%2)\n");
  EXPECT_NE(apart.find("% (int)(16)"), std::string::npos) << apart;
}

// A pointwise member whose output the next reductions read at the element it stores (GPT-2's
// loss: the contiguous copy of the sliced logits, then their max) shares their loop: the
// reductions take the stored element from registers (the vector S_, or pv_ in the scalar entry
// points), as stored (a bf16 output rounded first), and do not read the buffer back. The
// variance after the mean reads the mean: its own pass.
TEST(EmitCuda, ReductionsOfAStoredRowShareItsLoop) {
  for (const char* t : {"f32", "bf16"}) {
    const std::string T = t;
    const std::string code = code_of("graph(%0: " + T + "[64, 2048]@cuda):\n  %1: " + T +
                                     "[64, 2048]@cuda = aten.mul.Tensor(%0, 3)\n  %2: " + T +
                                     "[64]@cuda = aten.amax.default(%1, [1])\n"
                                     "  return (%1, %2)\n");
    EXPECT_NE(code.find("the reductions taking buf1's elements from registers"), std::string::npos)
        << code;
    const std::string held =
        T == "f32" ? "const float v0 = S_.v[u_];" : "const float v0 = coil::to_f32(S_.v[u_]);";
    EXPECT_NE(code.find(held), std::string::npos) << code;
    EXPECT_EQ(code.find("= buf1["), std::string::npos) << code;            // never read back
    EXPECT_EQ(code.find("*)(buf1 + "), code.rfind("*)(buf1 + ")) << code;  // stored once
  }
  const std::string scalar = code_of(
      "graph(%0: f32[64, 2047]@cuda):\n"
      "  %1: f32[64, 2047]@cuda = aten.exp.default(%0)\n"
      "  %2: f32[64]@cuda = aten.sum.dim_IntList(%1, [1])\n"
      "  %3: f32[64]@cuda = aten.amax.default(%1, [1])\n"
      "  return (%1, %2, %3)\n");
  EXPECT_NE(scalar.find("const float pv_ = float(v"), std::string::npos) << scalar;
  EXPECT_NE(scalar.find("acc1 = coil::MaxOp::apply(acc1"), std::string::npos) << scalar;
  EXPECT_EQ(scalar.find("= buf1["), std::string::npos) << scalar;
}

// Softmax's sum computes exp(x - max) per element and its last member would compute it again:
// the sum leaves it in the shared row cache over the input (dead after the sum) and the last
// member reads it back (block-per-row vector entry point only: RC). LayerNorm's members share
// only a subtraction, not worth a shared store: no value cache. A bf16 row cache cannot hold
// the f32 exp.
TEST(EmitCuda, SoftmaxSumLeavesExpInRowCache) {
  const std::string sm = code_of(
      "graph(%0: f32[64, 2048]@cuda):\n"
      "  %1: f32[64, 2048]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  return (%1)\n");
  EXPECT_NE(sm.find("if constexpr (CC) W0_.v[u_] = v"), std::string::npos) << sm;
  EXPECT_NE(sm.find("if constexpr (RC) rc0_[e_] = W0_;"), std::string::npos) << sm;
  EXPECT_NE(sm.find(" = CC ? L0.v[u_] : coil::fast::exp("), std::string::npos) << sm;
  // Rows of 2048 floats are 256 bytes a lane in _wv: no register cache there, but 16 in a
  // block of 512 threads, the _br entry point (its launch bounds: the block it must run with,
  // 3 blocks an SM).
  // (A row cache holds at most kRowCacheBytes, 40 bytes a lane of 1024 threads: every kernel
  // with one has a register-cached instantiation.)
  EXPECT_NE(sm.find("constexpr bool RR = G == 512 && V > 1;"), std::string::npos) << sm;
  EXPECT_NE(sm.find("__launch_bounds__(512, 3) kernel0_br("), std::string::npos) << sm;
  EXPECT_NE(sm.find("kernel0_impl<512, 4>("), std::string::npos) << sm;
  EXPECT_NE(sm.find("step_(lane_ + it_ * G, it_);"), std::string::npos) << sm;
  const std::string short_rows = code_of(
      "graph(%0: f32[64, 512]@cuda):\n"
      "  %1: f32[64, 512]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  return (%1)\n");
  EXPECT_NE(short_rows.find("constexpr bool RR = G == 32 && V > 1;"), std::string::npos)
      << short_rows;
  EXPECT_NE(
      short_rows.find("if constexpr (RC) rc0_[e_] = W0_; else if constexpr (RR) rr0_[it_] = W0_;"),
      std::string::npos)
      << short_rows;
  EXPECT_NE(short_rows.find("step_(lane_ + it_ * G, it_);"), std::string::npos) << short_rows;
  EXPECT_EQ(short_rows.find("_br("), std::string::npos) << short_rows;  // _wv holds it
  const std::string ln = code_of(
      "graph(%0: f32[64, 2048]@cuda, %1: f32[2048]@cuda):\n"
      "  %2: f32[64, 1]@cuda = aten.mean.dim(%0, [-1], true)\n"
      "  %3: f32[64, 2048]@cuda = aten.sub.Tensor(%0, %2)\n"
      "  %4: f32[64, 2048]@cuda = aten.mul.Tensor(%3, %3)\n"
      "  %5: f32[64, 1]@cuda = aten.mean.dim(%4, [-1], true)\n"
      "  %6: f32[64, 1]@cuda = aten.rsqrt.default(%5)\n"
      "  %7: f32[64, 2048]@cuda = aten.mul.Tensor(%3, %6)\n"
      "  %8: f32[64, 2048]@cuda = aten.mul.Tensor(%7, %1)\n"
      "  return (%8)\n");
  EXPECT_NE(ln.find("rc0_"), std::string::npos) << ln;
  EXPECT_EQ(ln.find("W0_"), std::string::npos) << ln;
  const std::string half = code_of(
      "graph(%0: bf16[64, 2048]@cuda):\n"
      "  %1: bf16[64, 2048]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  return (%1)\n");
  EXPECT_NE(half.find("rc0_"), std::string::npos) << half;
  EXPECT_EQ(half.find("W0_"), std::string::npos) << half;
}

// Kernels whose every output is bf16/f16 compute exp and float division with the approximate
// instructions (coil::fast::); float outputs, or cuda_fast_math off, keep expf and IEEE division.
TEST(EmitCuda, FastMathOnlyForLowPrecisionOutputs) {
  const char* text =
      "graph(%0: DT[64, 512]@cuda):\n"
      "  %1: DT[64, 512]@cuda = aten._softmax.default(%0, -1, false)\n"
      "  return (%1)\n";
  auto graph = [&](const char* dt) {
    std::string t = text;
    for (size_t at; (at = t.find("DT")) != std::string::npos;) t.replace(at, 2, dt);
    return t;
  };
  const std::string bf = code_of(graph("bf16"));
  EXPECT_NE(bf.find("coil::fast::exp("), std::string::npos) << bf;
  EXPECT_NE(bf.find("coil::fast::div("), std::string::npos) << bf;
  EXPECT_EQ(bf.find("coil::m::exp("), std::string::npos) << bf;
  CompileOptions exact;  // option cuda_fast_math_f32 off: float32 kernels keep IEEE math
  exact.cuda_fast_math_f32 = false;
  CudaSource f32 = emit_graph(graph("f32"), exact);
  const std::string f = backend::cuda::strip_prelude(f32.code);
  EXPECT_EQ(f.find("coil::fast::"), std::string::npos) << f;
  EXPECT_NE(f.find("coil::m::exp("), std::string::npos) << f;
  CompileOptions f32_fast;  // on (the default): float32 kernels too, sigmoid included
  const std::string ff = backend::cuda::strip_prelude(emit_graph(graph("f32"), f32_fast).code);
  EXPECT_NE(ff.find("coil::fast::exp("), std::string::npos) << ff;
  EXPECT_EQ(ff.find("coil::m::exp("), std::string::npos) << ff;
  const std::string sig =
      backend::cuda::strip_prelude(emit_graph("graph(%0: f32[64]@cuda):\n"
                                              "  %1: f32[64]@cuda = aten.sigmoid.default(%0)\n"
                                              "  return (%1)\n",
                                              f32_fast)
                                       .code);
  EXPECT_NE(sig.find("coil::fast::sigmoid("), std::string::npos) << sig;
  CudaSource bf_src = emit_graph(graph("bf16"));
  expect_compiles(bf_src);
}

// BatchNorm's inference form divides by sqrt(var + eps): one approximate reciprocal square
// root in a fast-math kernel, the IEEE square root and division in a float32 one with
// cuda_fast_math_f32 off.
TEST(EmitCuda, FastMathTakesReciprocalSqrtAsRsqrt) {
  auto graph = [](const std::string& dt) {
    return "graph(%0: f32[8, 64]@cuda, %1: f32[64]@cuda):\n"
           "  %2: f32[64]@cuda = aten.add.Tensor(%1, 1e-05)\n"
           "  %3: f32[64]@cuda = aten.sqrt.default(%2)\n"
           "  %4: f32[64]@cuda = aten.reciprocal.default(%3)\n"
           "  %5: f32[8, 64]@cuda = aten.mul.Tensor(%0, %4)\n"
           "  %6: " +
           dt + "[8, 64]@cuda = prims.convert_element_type.default(%5, dtype(" + dt +
           "))\n"
           "  return (%6)\n";
  };
  const std::string bf = code_of(graph("bf16"));
  EXPECT_NE(bf.find("coil::m::rsqrt("), std::string::npos) << bf;
  EXPECT_EQ(bf.find("coil::m::reciprocal("), std::string::npos) << bf;
  CompileOptions exact;
  exact.cuda_fast_math_f32 = false;
  const std::string f = backend::cuda::strip_prelude(emit_graph(graph("f32"), exact).code);
  EXPECT_EQ(f.find("coil::m::rsqrt("), std::string::npos) << f;
  EXPECT_NE(f.find("coil::m::reciprocal("), std::string::npos) << f;
  const std::string ff = code_of(graph("f32"));  // cuda_fast_math_f32 on
  EXPECT_NE(ff.find("coil::m::rsqrt("), std::string::npos) << ff;
  expect_compiles(emit_graph(graph("bf16")));
}

// Attention's head split realized for a bmm: the copy runs over [b*h, t, e] and reads
// 1024*(x0 / 4) + 64*(x0 % 4) + ...: no single stride along x0, but every start is a multiple of
// 8 bf16 elements, so the vector entry point exists.
TEST(EmitCuda, HeadSplitCopyIsVectorized) {
  CudaSource src = emit_graph(
      "graph(%0: bf16[2, 16, 768]@cuda, %1: bf16[8, 64, 16]@cuda):\n"
      "  %2: bf16[2, 16, 256]{12288, 768, 1}+256@cuda = aten.slice.Tensor(%0, 2, 256, 512)\n"
      "  %3: bf16[2, 16, 4, 64]{12288, 768, 64, 1}+256@cuda = aten.view.default(%2, [2, 16, 4, "
      "64])\n"
      "  %4: bf16[2, 4, 16, 64]{12288, 64, 768, 1}+256@cuda = aten.permute.default(%3, [0, 2, 1, "
      "3])\n"
      "  %5: bf16[2, 4, 16, 64]@cuda = aten._to_copy.default(%4, "
      "memory_format=\"torch.contiguous_format\")\n"
      "  %6: bf16[8, 16, 64]@cuda = aten._unsafe_view.default(%5, [8, 16, 64])\n"
      "  %7: bf16[8, 16, 16]@cuda = aten.bmm.default(%6, %1)\n"
      "  return (%7)\n");
  ASSERT_EQ(src.kernels.size(), 1u) << backend::cuda::strip_prelude(src.code);
  EXPECT_EQ(src.kernels[0].kind, KernelKind::Pointwise);
  EXPECT_EQ(src.kernels[0].vec, 8) << backend::cuda::strip_prelude(src.code);
  expect_compiles(src);
}

// A dim merged from two ([batch, seq] rows of a [batch * seq, hidden] matrix) reads the
// unmerged layout through div and mod. Inside aligned runs that divide the merged extent the
// stride is constant: attention's head merge is read as vectors (runs of the head size), and
// the [batch, hidden, seq] -> [batch * seq, hidden] transpose of its backward gets tiles.
TEST(EmitCuda, MergedDimsStepByOneWithinRuns) {
  auto merge_heads = [](int head) {
    const int heads = 4, hidden = heads * head;
    const std::string h = std::to_string(head), n = std::to_string(hidden);
    return emit_graph(
        "graph(%0: f32[2, 4, 16, " + h + "]@cuda):\n" + "  %1: f32[2, 16, 4, " + h + "]{" +
        std::to_string(16 * hidden) + ", " + h + ", " + std::to_string(16 * head) +
        ", 1}@cuda = aten.permute.default(%0, " + "[0, 2, 1, 3])\n" + "  %2: f32[2, 16, 4, " + h +
        "]@cuda = aten.clone.default(%1, memory_format=\"torch.contiguous_format\")\n" +
        "  %3: f32[32, " + n + "]@cuda = aten._unsafe_view.default(%2, [32, " + n + "])\n" +
        "  %4: f32[32, " + n + "]@cuda = aten.mul.Tensor(%3, 0.5)\n" + "  return (%4)\n");
  };
  for (auto [head, vec] : {std::pair{64, 4}, {6, 2}, {5, 0}}) {
    CudaSource src = merge_heads(head);
    ASSERT_EQ(src.kernels.size(), 1u);
    EXPECT_EQ(src.kernels[0].vec, vec) << "head size " << head << "\n"
                                       << backend::cuda::strip_prelude(src.code);
    if (vec > 0) expect_compiles(src);
  }
  // [batch, hidden, seq] transposed into [batch * seq, hidden] rows, scaled.
  auto rows_of_transpose = [](int batch, int hidden, int seq) {
    const std::string b = std::to_string(batch), h = std::to_string(hidden),
                      s = std::to_string(seq), bs = std::to_string(batch * seq);
    return emit_graph(
        "graph(%0: f32[" + b + ", " + h + ", " + s + "]@cuda):\n" + "  %1: f32[" + b + ", " + s +
        ", " + h + "]{" + std::to_string(hidden * seq) + ", 1, " + s +
        "}@cuda = aten.permute.default(%0, [0, 2, 1])\n" + "  %2: f32[" + b + ", " + s + ", " + h +
        "]@cuda = aten.clone.default(%1, memory_format=\"torch.contiguous_format\")\n" +
        "  %3: f32[" + bs + ", " + h + "]@cuda = aten._unsafe_view.default(%2, [" + bs + ", " + h +
        "])\n" + "  %4: f32[" + bs + ", " + h + "]@cuda = aten.mul.Tensor(%3, 0.35)\n" +
        "  return (%4)\n");
  };
  CudaSource t = rows_of_transpose(8, 768, 512);
  ASSERT_EQ(t.kernels.size(), 1u);
  EXPECT_EQ(t.kernels[0].tile, 32) << backend::cuda::strip_prelude(t.code);
  expect_compiles(t);
  // Runs of 48 hold a 32-wide tile's edge only where it does not cross one: no tile.
  CudaSource odd = rows_of_transpose(8, 96, 48);
  ASSERT_EQ(odd.kernels.size(), 1u);
  EXPECT_EQ(odd.kernels[0].tile, 0) << backend::cuda::strip_prelude(odd.code);
}

// Repeated layers: kernels equal up to the names of their buffers and variables are compiled
// once; a kernel that differs (another constant, another op) keeps its own code.
TEST(EmitCuda, KernelsEqualUpToNamesShareOneCompiledCopy) {
  CudaSource src = emit_graph(
      "graph(%0: f32[33, 70]@cuda, %1: f32[33, 70]@cuda, %2: f32[33, 70]@cuda):\n"
      "  %3: f32[33, 70]@cuda = aten.softmax.int(%0, -1)\n"
      "  %4: f32[33, 70]@cuda = aten.mul.Tensor(%3, %1)\n"
      "  %5: f32[33, 70]@cuda = aten.softmax.int(%4, -1)\n"
      "  %6: f32[33, 70]@cuda = aten.mul.Tensor(%5, %2)\n"
      "  %7: f32[33, 70]@cuda = aten.softmax.int(%6, -1)\n"
      "  %8: f32[33, 70]@cuda = aten.mul.Tensor(%7, 3)\n"
      "  %9: f32[33, 70]@cuda = aten.log_softmax.int(%8, -1)\n"
      "  %10: f32[33, 70]@cuda = aten.mul.Tensor(%9, 2)\n"
      "  %11: f32[33, 70]@cuda = aten.log_softmax.int(%10, -1)\n"
      "  return (%11)\n");
  const std::string code = backend::cuda::strip_prelude(src.code);
  std::set<std::string> compiled, entries;
  for (const auto& k : src.kernels) {
    if (k.entry.empty()) compiled.insert(k.name);
    entries.insert(backend::cuda::entry_name(k, 0));
    EXPECT_NE(code.find(backend::cuda::entry_name(k, 0) + "("), std::string::npos) << k.name;
  }
  ASSERT_EQ(src.kernels.size(), 4u) << code;
  // The two products by inputs share one copy; the products by 3 and by 2 differ from them
  // and from each other (only in a constant, which is not a name).
  EXPECT_EQ(compiled.size(), 3u) << code;
  EXPECT_NE(code.find("the same code as"), std::string::npos);
  expect_compiles(src);
  // Vector row kernels (64 columns) name derived loop variables (r<N>_q, r<N>_0): two equal
  // softmaxes over other buffers and variables still share one copy.
  ProgramBuilder b;
  build_softmax(b, b.c(32), b.c(64));
  build_softmax(b, b.c(32), b.c(64));
  CudaSource vsrc = emit(b.p);
  ASSERT_EQ(vsrc.kernels.size(), 2u) << backend::cuda::strip_prelude(vsrc.code);
  EXPECT_GT(vsrc.kernels[0].vec, 0);
  EXPECT_TRUE(vsrc.kernels[0].entry.empty());
  EXPECT_EQ(vsrc.kernels[1].entry, vsrc.kernels[0].name) << backend::cuda::strip_prelude(vsrc.code);
  // Tiled kernels (their _t entry) alike: two equal transposes, a product between them.
  CudaSource tsrc = emit_graph(
      "graph(%0: f32[64, 64]@cuda, %1: f32[64, 64]@cuda):\n"
      "  %2: f32[64, 64]{1, 64}@cuda = aten.permute.default(%0, [1, 0])\n"
      "  %3: f32[64, 64]@cuda = aten.mul.Tensor(%2, 2)\n"
      "  %4: f32[64, 64]@cuda = aten.mm.default(%3, %1)\n"
      "  %5: f32[64, 64]{1, 64}@cuda = aten.permute.default(%4, [1, 0])\n"
      "  %6: f32[64, 64]@cuda = aten.mul.Tensor(%5, 2)\n"
      "  return (%6)\n");
  const std::string tcode = backend::cuda::strip_prelude(tsrc.code);
  ASSERT_EQ(tsrc.kernels.size(), 2u) << tcode;
  EXPECT_GT(tsrc.kernels[0].tile, 0) << tcode;
  EXPECT_EQ(tsrc.kernels[1].entry, tsrc.kernels[0].name) << tcode;
}

TEST(LaunchHeuristics, WarpRowsBlockRowsAndVectors) {
  backend::cuda::DeviceInfo dev;
  dev.sm_count = 132;
  backend::cuda::CudaKernel rows;
  rows.kind = KernelKind::Rows;
  auto short_rows = backend::cuda::choose_launch(rows, 4096, 512, true, dev);
  EXPECT_EQ(short_rows.entry, 0);
  EXPECT_EQ(short_rows.grid * (short_rows.block / 32), 4096u);
  auto long_rows = backend::cuda::choose_launch(rows, 64, 32768, true, dev);
  EXPECT_EQ(long_rows.entry, 1);
  EXPECT_EQ(long_rows.block, 1024u);
  backend::cuda::CudaKernel pw;
  pw.kind = KernelKind::Pointwise;
  pw.vec = 4;
  EXPECT_EQ(backend::cuda::choose_launch(pw, 1 << 20, 1, true, dev).entry, 1);
  EXPECT_EQ(backend::cuda::choose_launch(pw, 1 << 20, 1, false, dev).entry, 0);
  // The scalar loop is measured against the vector one (many loads per element may favour it).
  int scalar = 0;
  for (const auto& c : backend::cuda::launch_candidates(pw, 1 << 20, 1, true, dev))
    scalar += c.entry == 0;
  EXPECT_GT(scalar, 0);
  // Rows kernels with vector entry points use them (_wv = 2, _bv = 3) on aligned pointers.
  backend::cuda::CudaKernel vrows = rows;
  vrows.vec = 4;
  EXPECT_EQ(backend::cuda::choose_launch(vrows, 4096, 512, true, dev).entry, 2);
  EXPECT_EQ(backend::cuda::choose_launch(vrows, 64, 32768, true, dev).entry, 3);
  EXPECT_EQ(backend::cuda::choose_launch(vrows, 64, 32768, false, dev).entry, 1);
  EXPECT_EQ(backend::cuda::choose_launch(vrows, 4096, 512, false, dev).entry, 1);
  for (const auto& c : backend::cuda::launch_candidates(vrows, 4096, 512, false, dev))
    EXPECT_EQ(c.entry, 1);
  // The measured set starts with the heuristic's choice and tries every block size.
  auto cands = backend::cuda::launch_candidates(rows, 4096, 2048, true, dev);
  ASSERT_GE(cands.size(), 5u);
  auto first = backend::cuda::choose_launch(rows, 4096, 2048, true, dev);
  EXPECT_EQ(cands[0].entry, first.entry);
  EXPECT_EQ(cands[0].block, first.block);
  std::set<unsigned> blocks;
  for (const auto& c : cands)
    if (c.entry == 1) blocks.insert(c.block);
  EXPECT_EQ(blocks, (std::set<unsigned>{128, 256, 512, 1024}));
  // The register-cached block per row (_br, entry 5) is measured at its own block size only,
  // on aligned pointers only, and is never the heuristic's choice.
  backend::cuda::CudaKernel br = vrows;
  br.name = "k";
  br.block_regs = 512;
  EXPECT_EQ(backend::cuda::entry_name(br, 5), "k_br");
  EXPECT_EQ(backend::cuda::entry_name(vrows, 5), "");
  EXPECT_NE(backend::cuda::choose_launch(br, 8192, 8192, true, dev).entry, 5);
  int with_br = 0;
  for (const auto& c : backend::cuda::launch_candidates(br, 8192, 8192, true, dev))
    if (c.entry == 5) {
      ++with_br;
      EXPECT_EQ(c.block, 512u);
    }
  EXPECT_EQ(with_br, 2);
  for (const auto& c : backend::cuda::launch_candidates(br, 8192, 8192, false, dev))
    EXPECT_NE(c.entry, 5);
}

}  // namespace
}  // namespace coil::testing
