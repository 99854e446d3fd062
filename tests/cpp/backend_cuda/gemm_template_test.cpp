// The GEMM template (gemm_template.h) without a GPU: configuration names, the operand checks
// that send a product to cuBLASLt instead, the candidate choice, and — where libnvrtc can be
// loaded (COIL_TEST_NVRTC names it, else the sonames) — an NVRTC compile of every tile
// configuration for every dtype and operand layout, for sm_90 and sm_80 (skipped visibly
// otherwise). Running the kernels is tests/python/test_cuda_gemm_template.py's job.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <stdexcept>

#include "coil/backend/cuda/gemm_template.h"
#include "coil/backend/cuda/nvrtc.h"

namespace coil::testing {
namespace {

namespace cu = backend::cuda;

CompileOptions nvrtc_options() {
  CompileOptions o;
  if (const char* path = std::getenv("COIL_TEST_NVRTC")) o.cuda_nvrtc_path = path;
  return o;
}

TEST(GemmTemplate, ConfigNamesRoundTrip) {
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32}) {
    for (const cu::GemmTileConfig& c : cu::gemm_template_configs(t)) {
      std::optional<cu::GemmTileConfig> p = cu::parse_gemm_config(c.name());
      ASSERT_TRUE(p) << c.name();
      EXPECT_EQ(*p, c);
      EXPECT_EQ(c.warps_m() * c.warps_n(), c.warps);
      EXPECT_EQ(c.block_m % (16 * c.warps_m()), 0) << c.name();
      EXPECT_EQ(c.block_n % (16 * c.warps_n()), 0) << c.name();
    }
  }
  EXPECT_EQ(cu::parse_gemm_config("128x128x32_w4_s3")->name(), "128x128x32_w4_s3");
  EXPECT_FALSE(cu::parse_gemm_config("128x128x32_w4"));
  EXPECT_FALSE(cu::parse_gemm_config("128x128x32_w3_s3"));   // warps not a power of two
  EXPECT_FALSE(cu::parse_gemm_config("128x128x32_w4_s3x"));  // trailing text
  EXPECT_FALSE(cu::parse_gemm_config("24x128x32_w4_s3"));    // 24 rows: not 16-row warp tiles
  EXPECT_FALSE(cu::parse_gemm_config("128x128x32_w4_s1"));   // one stage: no pipeline
}

TEST(GemmTemplate, WarpLayoutIsTheSquarestThatDivides) {
  EXPECT_EQ(cu::parse_gemm_config("128x128x32_w4_s3")->warps_m(), 2);
  EXPECT_EQ(cu::parse_gemm_config("128x256x32_w8_s3")->warps_m(), 2);
  EXPECT_EQ(cu::parse_gemm_config("256x128x32_w8_s3")->warps_m(), 4);
  EXPECT_EQ(cu::parse_gemm_config("128x64x32_w4_s3")->warps_m(), 4);
  EXPECT_EQ(cu::parse_gemm_config("32x64x64_w4_s4")->warps_m(), 2);
  EXPECT_EQ(cu::parse_gemm_config("16x64x64_w2_s4")->warps_m(), 1);
}

cu::GemmArgs row_major(DType t, int64_t m, int64_t n, int64_t k) {
  alignas(16) static char buffer[64];
  cu::GemmArgs g;
  g.dtype = t;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = {buffer, k, 1, 0};
  g.b = {buffer, n, 1, 0};
  g.c = buffer;
  g.c_stride0 = n;
  g.c_cols = n;
  return g;
}

TEST(GemmTemplate, PlanReadsLayoutsAndRefusesUnalignedOperands) {
  std::string why;
  cu::GemmArgs g = row_major(DType::BFloat16, 64, 64, 64);
  auto p = cu::gemm_template_plan(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->spec.a_k_contig);
  EXPECT_FALSE(p->spec.b_k_contig);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldb, 64);
  // Transposed views read in place: A column-major (ld 72), B column-major (x @ w.t()).
  g.a = {g.a.data, 1, 72, 0};
  g.b = {g.b.data, 1, 64, 0};
  p = cu::gemm_template_plan(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_FALSE(p->spec.a_k_contig);
  EXPECT_TRUE(p->spec.b_k_contig);
  EXPECT_EQ(p->lda, 72);
  EXPECT_EQ(p->ldb, 64);
  // Odd sizes are fine where the leading dims are padded to 16 bytes...
  g = row_major(DType::Float16, 7, 33, 4097);
  g.a.stride0 = 4104;
  g.b.stride0 = 40;
  EXPECT_TRUE(cu::gemm_template_plan(g, &why)) << why;
  // ... not where a leading dim is odd, or a base is unaligned: cuBLASLt (or its repacking).
  g.a.stride0 = 4097;
  EXPECT_FALSE(cu::gemm_template_plan(g, &why));
  EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
  g.a.stride0 = 4104;
  g.b.data = static_cast<const char*>(g.b.data) + 2;
  EXPECT_FALSE(cu::gemm_template_plan(g, &why));
  // float32 only as TF32; other dtypes never.
  g = row_major(DType::Float32, 64, 64, 64);
  EXPECT_FALSE(cu::gemm_template_plan(g, &why));
  g.allow_tf32 = true;
  EXPECT_TRUE(cu::gemm_template_plan(g, &why)) << why;
  g = row_major(DType::Float64, 64, 64, 64);
  EXPECT_FALSE(cu::gemm_template_plan(g, &why));
  // A single row (vector-matrix) has no leading dim to check.
  g = row_major(DType::BFloat16, 1, 64, 7);
  g.a.stride0 = 7;
  EXPECT_TRUE(cu::gemm_template_plan(g, &why)) << why;
  // A column vector B [K, 1] (x @ w for a one-output w) reads K contiguously, no leading dim.
  g = row_major(DType::BFloat16, 64, 1, 7);
  g.a.stride0 = 8;
  g.b = {g.b.data, 1, 1, 0};
  p = cu::gemm_template_plan(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->spec.b_k_contig);
  EXPECT_EQ(p->ldb, 0);
  // Broadcast strides: neither row- nor column-major.
  g = row_major(DType::BFloat16, 64, 64, 64);
  g.b = {g.b.data, 0, 0, 0};
  EXPECT_FALSE(cu::gemm_template_plan(g, &why));
}

TEST(GemmTemplate, CandidatesFollowTheProblemSize) {
  const int sms = 132;
  std::vector<cu::GemmTileConfig> big =
      cu::gemm_template_candidates(row_major(DType::BFloat16, 4096, 4096, 4096), sms);
  ASSERT_EQ(big.size(), 6u);
  EXPECT_GE(big[0].block_m * big[0].block_n, 128 * 256);
  std::vector<cu::GemmTileConfig> small =
      cu::gemm_template_candidates(row_major(DType::BFloat16, 64, 1000, 2048), sms);
  ASSERT_FALSE(small.empty());
  EXPECT_LE(small[0].block_m * small[0].block_n, 64 * 64);
  std::set<std::string> names;
  for (const auto& c : small) names.insert(c.name());
  EXPECT_EQ(names.size(), small.size());
}

TEST(GemmTemplate, SharedMemoryFitsAnSm80) {
  for (DType t : {DType::BFloat16, DType::Float32})
    for (const cu::GemmTileConfig& c : cu::gemm_template_configs(t))
      for (bool ak : {false, true})
        for (bool bk : {false, true}) {
          cu::GemmKernelSpec s;
          s.dtype = t;
          s.a_k_contig = ak;
          s.b_k_contig = bk;
          EXPECT_LE(cu::gemm_template_smem_bytes(c, s), 163 * 1024) << c.name() << s.name();
        }
}

TEST(GemmTemplate, SourceIsReadable) {
  cu::GemmKernelSpec s;
  s.bias = true;
  s.activation = 2;
  const std::string src = cu::gemm_template_source(*cu::parse_gemm_config("64x64x64_w4_s4"), s);
  EXPECT_NE(src.find("constexpr int BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 64;"), std::string::npos);
  EXPECT_NE(src.find("coil_gemm_64x64x64_w4_s4_bf16_ak_bn_bias_gelu"), std::string::npos);
  EXPECT_NE(src.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16"), std::string::npos);
  EXPECT_NE(src.find("cp.async.cg.shared.global"), std::string::npos);
}

// The kernels compiled: every configuration of every dtype, the four operand layouts spread
// over them (layout = configuration index % 4), with the epilogue that exercises the most code
// (bias + GELU); every layout on the first configuration; and every epilogue on one
// configuration. NVRTC takes seconds per kernel (the tile loops unroll into hundreds of
// mma.sync), so the full cross product (every configuration x layout x epilogue) runs only with
// COIL_TEST_GEMM_ALL=1.
struct Kernel {
  cu::GemmTileConfig config;
  cu::GemmKernelSpec spec;
};
std::vector<Kernel> kernels_to_compile(bool all) {
  std::vector<Kernel> out;
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32}) {
    const std::vector<cu::GemmTileConfig> configs = cu::gemm_template_configs(t);
    for (size_t i = 0; i < configs.size(); ++i) {
      for (int layout = 0; layout < 4; ++layout) {
        if (!all && layout != static_cast<int>(i % 4) && i != 0) continue;
        for (int epilogue = 0; epilogue < 6; ++epilogue) {
          if (!all && epilogue != 5 && !(i == 3 && layout == 3)) continue;
          cu::GemmKernelSpec s;
          s.dtype = t;
          s.a_k_contig = layout & 1;
          s.b_k_contig = layout & 2;
          s.bias = epilogue & 1;
          s.activation = epilogue / 2;
          out.push_back({configs[i], s});
        }
      }
    }
  }
  return out;
}

// Compiles for sm_<cc_major>0 when NVRTC is here (skips visibly otherwise), two at a time,
// with the measurement's compare kernels; `few`: one kernel per dtype.
void compile_all(int cc_major, bool few) {
  CompileOptions o = nvrtc_options();
  const std::string why = cu::nvrtc_unavailable_reason(o);
  if (!why.empty()) GTEST_SKIP() << "NVRTC not available: " << why;
  const char* all = std::getenv("COIL_TEST_GEMM_ALL");
  std::vector<Kernel> ks = kernels_to_compile(all && std::string(all) == "1");
  if (few) {
    std::vector<Kernel> one_each;
    for (const Kernel& k : ks)
      if (one_each.empty() || one_each.back().spec.dtype != k.spec.dtype) one_each.push_back(k);
    ks = one_each;
  }
  std::vector<std::string> sources;
  for (const Kernel& k : ks) sources.push_back(cu::gemm_template_source(k.config, k.spec));
  cu::CubinResult compare;
  ASSERT_NO_THROW(compare =
                      cu::compile_to_cubin(cu::gemm_template_compare_source(), cc_major, 0, o));
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32})
    EXPECT_NE(compare.cubin.find(cu::gemm_template_compare_kernel(t)), std::string::npos);
  std::vector<cu::CubinResult> r;
  try {
    r = cu::compile_to_cubins(sources, cc_major, 0, o, 2);
  } catch (const std::exception& e) {
    // Which one: compile them one by one until the failure.
    for (size_t i = 0; i < ks.size(); ++i) {
      SCOPED_TRACE(cu::gemm_template_kernel_name(ks[i].config, ks[i].spec));
      ASSERT_NO_THROW(cu::compile_to_cubin(sources[i], cc_major, 0, o)) << sources[i];
    }
    FAIL() << e.what();
  }
  ASSERT_EQ(r.size(), ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    const std::string name = cu::gemm_template_kernel_name(ks[i].config, ks[i].spec);
    EXPECT_GT(r[i].cubin.size(), 1000u) << name;
    // The kernel is there under its name (a cubin holds its symbol names as text).
    EXPECT_NE(r[i].cubin.find(name), std::string::npos) << name;
  }
}

TEST(GemmTemplate, KernelsToCompileCoverEveryConfigLayoutAndEpilogue) {
  std::set<std::string> configs, layouts, epilogues;
  for (const Kernel& k : kernels_to_compile(false)) {
    configs.insert(k.config.name() + std::to_string(static_cast<int>(k.spec.dtype)));
    layouts.insert(std::to_string(k.spec.a_k_contig) + std::to_string(k.spec.b_k_contig) +
                   std::to_string(static_cast<int>(k.spec.dtype)));
    epilogues.insert(std::to_string(k.spec.bias) + std::to_string(k.spec.activation) +
                     std::to_string(static_cast<int>(k.spec.dtype)));
  }
  EXPECT_EQ(configs.size(), 27u);
  EXPECT_EQ(layouts.size(), 12u);
  EXPECT_EQ(epilogues.size(), 18u);
  EXPECT_LT(kernels_to_compile(false).size(), 64u);
}

TEST(GemmTemplate, EveryConfigCompilesForSm90) { compile_all(9, false); }
// The same instructions (cp.async, ldmatrix, mma.sync are sm_80's): one kernel per dtype.
TEST(GemmTemplate, CompilesForSm80) { compile_all(8, true); }

}  // namespace
}  // namespace coil::testing
