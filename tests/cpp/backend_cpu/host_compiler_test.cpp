// compile_and_load: compile, load and call generated C++; the disk cache; compiler errors; and
// the runtime headers as generated kernels see them (-O3 -march=native, vectorized loops).
#include "coil/backend/cpu/host_compiler.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "coil/support/error.h"
#include "ulp_check.h"

namespace coil::backend::cpu::detail {
std::string sha256_hex(std::string_view data);  // host_compiler.cpp
}

namespace {

namespace fs = std::filesystem;
using coil::CompileOptions;
using coil::backend::cpu::compile_and_load;

using coil::test_support::TempDir;

const char* kAddSource = R"(
#include "coil/kernel_prelude.h"
COIL_KERNEL void axpy(const float* x, float* y, int64_t n) {
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i] + coil::m::exp(y[i]);
}
)";

TEST(Sha256, KnownVectors) {
  using coil::backend::cpu::detail::sha256_hex;
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HostCompiler, CompileLoadCall) {
  CompileOptions opt;
  auto r = compile_and_load(kAddSource, opt);
  ASSERT_TRUE(r.library);
  EXPECT_FALSE(r.cache_hit);
  EXPECT_GT(r.seconds, 0.0);
  EXPECT_NE(r.command.find("-fopenmp -shared -fPIC -std=c++17"), std::string::npos) << r.command;
  auto fn = reinterpret_cast<void (*)(const float*, float*, int64_t)>(r.library->symbol("axpy"));
  float x[37], y[37];
  for (int i = 0; i < 37; ++i) {
    x[i] = i * 0.5f;
    y[i] = -i * 0.1f;
  }
  fn(x, y, 37);
  for (int i = 0; i < 37; ++i) {
    EXPECT_NEAR(y[i], 2.0 * (i * 0.5) + std::exp(-i * 0.1f), 1e-5 * (1 + i)) << i;
  }
  EXPECT_THROW(r.library->symbol("no_such_kernel"), coil::CompileError);
  std::printf("  compile (no cache): %.3f s\n", r.seconds);
}

TEST(HostCompiler, ExplicitRuntimeHeadersDir) {
  CompileOptions opt;
  opt.runtime_headers_dir = COIL_SOURCE_DIR "/runtime_headers";
  auto r = compile_and_load(kAddSource, opt);
  EXPECT_NE(r.library->symbol("axpy"), nullptr);
  opt.runtime_headers_dir = COIL_SOURCE_DIR "/no/such/dir";
  EXPECT_THROW(compile_and_load(kAddSource, opt), coil::CompileError);
}

TEST(HostCompiler, DiskCache) {
  TempDir cache;
  CompileOptions opt;
  opt.cache_dir = (cache.path / "kernels").string();  // created on demand
  auto miss = compile_and_load(kAddSource, opt);
  EXPECT_FALSE(miss.cache_hit);
  auto hit = compile_and_load(kAddSource, opt);
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_LT(hit.seconds, miss.seconds);
  EXPECT_EQ(hit.library->path(), miss.library->path());
  std::printf("  cache miss %.3f s, hit %.4f s\n", miss.seconds, hit.seconds);
  int so = 0, cpp = 0, digests = 0, other = 0;
  for (auto& e : fs::directory_iterator(opt.cache_dir)) {
    const std::string ext = e.path().extension().string();
    (ext == ".so" ? so : ext == ".cpp" ? cpp : ext == ".sha256" ? digests : other)++;
  }
  EXPECT_EQ(so, 1);
  EXPECT_EQ(cpp, 1);      // the source, for debugging
  EXPECT_EQ(digests, 2);  // one per entry
  EXPECT_EQ(other, 0);    // no temporaries left

  auto fn = reinterpret_cast<void (*)(const float*, float*, int64_t)>(hit.library->symbol("axpy"));
  float x[1] = {1.0f}, y[1] = {0.0f};
  fn(x, y, 1);
  EXPECT_FLOAT_EQ(y[0], 3.0f);

  // Flags and source are part of the key.
  CompileOptions opt2 = opt;
  opt2.cxx_flags = "-O2";
  EXPECT_FALSE(compile_and_load(kAddSource, opt2).cache_hit);
  EXPECT_TRUE(compile_and_load(kAddSource, opt2).cache_hit);
  EXPECT_FALSE(compile_and_load(std::string(kAddSource) + "\n// v2\n", opt).cache_hit);
  // A different cache entry is a different file: the key is content-addressed.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(opt.cache_dir)) names.insert(e.path().filename());
  EXPECT_EQ(names.size(), 12u);  // 3 keys x (.so, .cpp) x (entry, digest)
}

TEST(HostCompiler, ConcurrentCompilesOfOneSource) {
  TempDir cache;
  CompileOptions opt;
  opt.cache_dir = cache.path.string();
  const std::string src = std::string(kAddSource) + "\n// concurrent\n";
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      auto r = compile_and_load(src, opt);
      if (r.library && r.library->symbol("axpy")) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 3);
  int so = 0;
  for (auto& e : fs::directory_iterator(cache.path)) so += e.path().extension() == ".so";
  EXPECT_EQ(so, 1);
}

TEST(HostCompiler, SyntaxErrorCarriesCompilerLog) {
  CompileOptions opt;
  const std::string bad = R"(
#include "coil/kernel_prelude.h"
COIL_KERNEL void broken(float* y) { y[0] = undeclared_thing + 1 }
)";
  try {
    compile_and_load(bad, opt);
    FAIL() << "expected a CompileError";
  } catch (const coil::CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("error:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("was not declared"), std::string::npos) << msg;
  }
  opt.cxx = "no-such-compiler-coil";
  EXPECT_THROW(compile_and_load(kAddSource, opt), coil::CompileError);
}

// Loop nests with masked loads as coil emits them (emit_cpp.cpp: open_loop): the cat of a
// 12-element buffer with itself split [12, 2] (fuzz seed 1320) and a padded row (seed 23).
// Without `#pragma GCC unroll 1`, g++ 12.2 -O3 unrolls the inner loop completely, vectorizes
// the outer one and its masked loads read zeros (out[12..15] of the cat, every row of the pad).
TEST(HostCompiler, MaskedLoadsInUnrolledInnerLoop) {
  const char* src = R"(
#include "coil/kernel_prelude.h"
COIL_KERNEL void cat2(const float* __restrict__ a, float* __restrict__ o) {
  #pragma GCC unroll 1
  for (int64_t x0 = 0; x0 < 12; ++x0) {
    #pragma GCC unroll 1
    for (int64_t x1 = 0; x1 < 2; ++x1) {
      const int64_t i = 2 * x0 + x1;
      const float hi = (12 <= i) ? a[i - 12] : 0.0f;
      o[i] = (i < 12) ? a[i] : hi;
    }
  }
}
COIL_KERNEL void pad(const float* __restrict__ a, float* __restrict__ o) {
  #pragma GCC unroll 1
  for (int64_t x1 = 0; x1 < 8; ++x1) {
    #pragma GCC unroll 1
    for (int64_t x2 = 0; x2 < 11; ++x2) {
      const bool m = (x2 - 2 < 8) && (0 <= x1 - 2) && (0 <= x2 - 2);
      o[11 * x1 + x2] = m ? a[8 * x1 + x2 - 18] : 1.0f;
    }
  }
}
)";
  CompileOptions opt;
  opt.cache_dir = "";
  auto r = compile_and_load(src, opt);
  using Fn = void (*)(const float*, float*);
  std::vector<float> a(48), o(88, -1.0f);
  for (int i = 0; i < 48; ++i) a[i] = static_cast<float>(i + 1);
  reinterpret_cast<Fn>(r.library->symbol("cat2"))(a.data(), o.data());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(o[i], a[i % 12]) << "cat out[" << i << "]";
  reinterpret_cast<Fn>(r.library->symbol("pad"))(a.data(), o.data());
  for (int r1 = 0; r1 < 8; ++r1)
    for (int c = 0; c < 11; ++c) {
      const bool m = r1 >= 2 && c >= 2 && c < 10;
      EXPECT_EQ(o[11 * r1 + c], m ? a[8 * r1 + c - 18] : 1.0f) << "pad [" << r1 << ", " << c << "]";
    }
}

TEST(HostCompiler, EmptyKernelCompileTime) {
  CompileOptions opt;
  double best_prelude = 1e9, best_empty = 1e9;
  for (int i = 0; i < 3; ++i) {
    best_prelude =
        std::min(best_prelude,
                 compile_and_load("#include \"coil/kernel_prelude.h\"\nCOIL_KERNEL void k() {}\n" +
                                      std::string(i, ' '),
                                  opt)
                     .seconds);
    best_empty =
        std::min(best_empty,
                 compile_and_load("extern \"C\" void k() {}\n" + std::string(i, ' '), opt).seconds);
  }
  std::printf("  empty kernel TU: %.3f s with the prelude, %.3f s without\n", best_prelude,
              best_empty);
  EXPECT_LT(best_prelude, best_empty + 1.0);  // the prelude must stay cheap
}

// ---- the runtime headers as kernels use them ---------------------------------------------------

struct VecFn {
  const char* name;
  const char* expr;  // of x
  double (*ref)(double);
  double max_ulp;
};

const VecFn kVecFns[] = {
    {"exp", "coil::m::exp(x)", [](double x) { return std::exp(x); }, 1.0},
    {"log", "coil::m::log(x)", [](double x) { return std::log(x); }, 1.0},
    {"tanh", "coil::m::tanh(x)", [](double x) { return std::tanh(x); }, 2.0},
    {"sigmoid", "coil::m::sigmoid(x)", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 2.0},
    {"erf", "coil::m::erf(x)", [](double x) { return std::erf(x); }, 2.0},
    {"log1p", "coil::m::log1p(x)", [](double x) { return std::log1p(x); }, 2.0},
    {"expm1", "coil::m::expm1(x)", [](double x) { return std::expm1(x); }, 2.0},
    {"exp2", "coil::m::exp2(x)", [](double x) { return std::exp2(x); }, 1.5},
    {"log2", "coil::m::log2(x)", [](double x) { return std::log2(x); }, 1.5},
    {"log10", "coil::m::log10(x)", [](double x) { return std::log10(x); }, 2.0},
    {"sqrt", "coil::m::sqrt(x)", [](double x) { return std::sqrt(x); }, 0.5},
    {"rsqrt", "coil::m::rsqrt(x)", [](double x) { return 1.0 / std::sqrt(x); }, 1.5},
    {"floor", "coil::m::floor(x)", [](double x) { return std::floor(x); }, 0},
    {"round", "coil::m::round(x)", [](double x) { return std::nearbyint(x); }, 0},
    {"abs", "coil::m::abs(x)", [](double x) { return std::fabs(x); }, 0},
    {"half", "coil::to_f32(coil::to_half(x))",
     [](double x) { return double(static_cast<float>(static_cast<_Float16>(float(x)))); }, 0},
    {"bf16", "coil::to_f32(coil::to_bf16(x))", nullptr, 0},
};

// One kernel per function, each loop body on a known line: k_<name>(const float*, float*, n).
std::string vec_source(std::vector<int>* loop_lines) {
  std::ostringstream s;
  int line = 1;
  s << "#include \"coil/kernel_prelude.h\"\n";
  ++line;
  for (const VecFn& f : kVecFns) {
    s << "COIL_KERNEL void k_" << f.name
      << "(const float* __restrict in, float* __restrict out, int64_t n) {\n";
    s << "#pragma omp simd\n";
    s << "  for (int64_t i = 0; i < n; ++i) {\n";
    loop_lines->push_back(line + 3);  // gcc reports the body's line
    s << "    const float x = in[i]; out[i] = " << f.expr << ";\n  }\n}\n";
    line += 6;
  }
  // Random numbers over offsets, vectorized too.
  s << "COIL_KERNEL void k_rand(float* __restrict out, uint64_t seed, int64_t n) {\n#pragma omp "
       "simd\n  for (int64_t i = 0; i < n; ++i) {\n    out[i] = coil::rand_normal(seed, i) + "
       "coil::rand_uniform(seed, i);\n  }\n}\n";
  loop_lines->push_back(line + 3);  // gcc reports the body's line
  return s.str();
}

TEST(RuntimeHeadersCompiled, LoopsVectorize) {
  CompileOptions opt;
  opt.cxx_flags = "-O3 -march=native -fopt-info-vec-optimized";
  std::vector<int> lines;
  auto r = compile_and_load(vec_source(&lines), opt);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string name = i < std::size(kVecFns) ? kVecFns[i].name : "rand";
    const std::regex re("kernel\\.cpp:" + std::to_string(lines[i]) +
                        ":[0-9]+: optimized: loop vectorized");
    EXPECT_TRUE(std::regex_search(r.log, re))
        << name << " (line " << lines[i] << ") not vectorized; log:\n"
        << r.log;
  }
}

TEST(RuntimeHeadersCompiled, VectorizedAccuracy) {
  // The same functions in a -O3 -march=native build (FMA, AVX2, vector loops), against double.
  CompileOptions opt;
  std::vector<int> lines;
  auto r = compile_and_load(vec_source(&lines), opt);
  const std::vector<float> xs = coil_test::test_inputs();
  std::vector<float> out(xs.size());
  for (const VecFn& f : kVecFns) {
    auto fn = reinterpret_cast<void (*)(const float*, float*, int64_t)>(
        r.library->symbol(std::string("k_") + f.name));
    fn(xs.data(), out.data(), int64_t(xs.size()));
    if (!f.ref) {  // bf16: RNE to 8 significant bits (exhaustive checks in runtime_math_test)
      for (size_t i = 0; i < xs.size(); ++i) {
        if (std::isnan(xs[i])) {
          EXPECT_TRUE(std::isnan(out[i]));
          continue;
        }
        const double err = std::fabs(double(out[i]) - xs[i]);
        ASSERT_TRUE(err <= std::ldexp(std::fabs(double(xs[i])), -8) || std::isinf(out[i]) ||
                    err <= 0x1p-134)
            << xs[i] << " -> " << out[i];
      }
      continue;
    }
    coil_test::UlpReport rep;
    for (size_t i = 0; i < xs.size(); ++i) coil_test::record(rep, xs[i], out[i], f.ref(xs[i]));
    std::printf("  %-8s %s\n", f.name, rep.describe().c_str());
    EXPECT_LE(rep.max_ulp, f.max_ulp) << f.name << ": " << rep.describe();
  }
  // Random numbers: the vectorized build draws the same numbers as a scalar call would.
  auto rnd = reinterpret_cast<void (*)(float*, uint64_t, int64_t)>(r.library->symbol("k_rand"));
  std::vector<float> draws(1 << 16);
  rnd(draws.data(), 99, int64_t(draws.size()));
  double mean = 0;
  for (float d : draws) mean += d;
  mean /= draws.size();
  EXPECT_NEAR(mean, 0.5, 0.02);  // E[normal + uniform]
}

}  // namespace
