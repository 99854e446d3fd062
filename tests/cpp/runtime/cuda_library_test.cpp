// The C++ library on the GPU, without PyTorch: a graph of CUDA tensors compiles (NVRTC), its
// inputs are device buffers from cuMemAlloc, and run() with no RunContext works on the legacy
// default stream with coil's own cuMemAlloc storages. Results against references computed
// here on the host. Skips, saying why, where there is no driver, GPU or NVRTC
// (COIL_TEST_NVRTC=path/to/libnvrtc.so picks the library).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/runtime/compiled_graph.h"
#include "test_util.h"

namespace coil::runtime {
namespace {

using namespace testing;
namespace cu = backend::cuda;

CompileOptions cuda_options() {
  CompileOptions o;
  if (const char* path = std::getenv("COIL_TEST_NVRTC")) o.cuda_nvrtc_path = path;
  return o;
}

// Skips the test unless a GPU and NVRTC are here.
#define REQUIRE_GPU()                                                                \
  do {                                                                               \
    std::string why;                                                                 \
    if (cu::Driver::get(&why) == nullptr) GTEST_SKIP() << "no CUDA driver: " << why; \
    why = cu::nvrtc_unavailable_reason(cuda_options());                              \
    if (!why.empty()) GTEST_SKIP() << "NVRTC not available: " << why;                \
  } while (0)

// Elements a tensor's storage spans from element 0 (dense or strided, no negative strides).
int64_t span(const RuntimeTensor& t) {
  int64_t n = 1;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) return 0;
    n += (t.sizes[d] - 1) * t.strides[d];
  }
  return n;
}

// A device copy of a host float tensor, same sizes and strides, freed with cuMemFree.
RuntimeTensor to_device(const RuntimeTensor& host) {
  const cu::Driver* d = cu::Driver::get();
  cu::ensure_context(cu::device_info(0));
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(span(host), 1)) * sizeof(float);
  cu::CUdeviceptr p = 0;
  d->check(d->cuMemAlloc(&p, bytes), "cuMemAlloc");
  d->check(d->cuMemcpyHtoD(p, host.data, bytes), "cuMemcpyHtoD");
  RuntimeTensor t = host;
  t.device = Device::CUDA;
  t.data = reinterpret_cast<void*>(p);
  t.owner = std::shared_ptr<void>(
      t.data, [d](void* q) { d->cuMemFree(reinterpret_cast<cu::CUdeviceptr>(q)); });
  return t;
}

// A host copy of a device float tensor (its strides kept).
RuntimeTensor to_host(const RuntimeTensor& dev) {
  const cu::Driver* d = cu::Driver::get();
  EXPECT_EQ(dev.device, Device::CUDA);
  const int64_t n = std::max<int64_t>(span(dev), 1);
  auto storage = std::shared_ptr<float[]>(new float[n]());
  d->check(d->cuCtxSynchronize(), "cuCtxSynchronize");
  d->check(d->cuMemcpyDtoH(storage.get(), reinterpret_cast<cu::CUdeviceptr>(dev.data),
                           static_cast<size_t>(n) * sizeof(float)),
           "cuMemcpyDtoH");
  RuntimeTensor t = dev;
  t.device = Device::CPU;
  t.data = storage.get();
  t.owner = std::shared_ptr<void>(storage, storage.get());
  return t;
}

// y = relu(x @ w + b) (cuBLASLt), then a row softmax of y, a LayerNorm of y's rows and a
// column sum of y (generated kernels: rows, and a reduction across rows).
TEST(CudaLibrary, RunsWithoutPyTorch) {
  REQUIRE_GPU();
  constexpr int64_t M = 64, K = 96, N = 160;
  const char* text = R"(graph(%0: f32[64, 96]@cuda, %1: f32[96, 160]@cuda, %2: f32[160]@cuda):
  %3: f32[64, 160]@cuda = aten.mm.default(%0, %1)
  %4: f32[64, 160]@cuda = aten.add.Tensor(%3, %2)
  %5: f32[64, 160]@cuda = aten.relu.default(%4)
  %6: f32[64, 160]@cuda = aten._softmax.default(%5, -1, false)
  %7: f32[64, 1]@cuda, %8: f32[64, 1]@cuda = aten.var_mean.correction(%5, [1], correction=0, keepdim=true)
  %9: f32[64, 1]@cuda = aten.add.Tensor(%7, 1e-05)
  %10: f32[64, 1]@cuda = aten.rsqrt.default(%9)
  %11: f32[64, 160]@cuda = aten.sub.Tensor(%5, %8)
  %12: f32[64, 160]@cuda = aten.mul.Tensor(%11, %10)
  %13: f32[160]@cuda = aten.sum.dim_IntList(%5, [0])
  return (%6, %12, %13)
)";
  std::unique_ptr<CompiledGraph> g;
  ASSERT_NO_THROW(g = compile_graph(text, cuda_options(), nullptr));
  EXPECT_EQ(g->device(), Device::CUDA);
  EXPECT_GE(g->artifacts().num_kernels, 1);
  EXPECT_NE(g->artifacts().compiler_command.find("nvrtc"), std::string::npos);

  auto x = make_tensor<float>(DType::Float32, {M, K});
  auto w = make_tensor<float>(DType::Float32, {K, N});
  auto b = make_tensor<float>(DType::Float32, {N});
  fill_random<float>(x, 1);
  fill_random<float>(w, 2, -0.3, 0.3);
  fill_random<float>(b, 3, -0.5, 0.5);

  // The references, in double.
  std::vector<double> y(M * N), soft(M * N), norm(M * N), colsum(N, 0.0);
  for (int64_t i = 0; i < M; ++i) {
    double mx = -1e300, sum = 0, mean = 0, var = 0;
    for (int64_t j = 0; j < N; ++j) {
      double acc = at<float>(b, {j});
      for (int64_t k = 0; k < K; ++k) acc += double(at<float>(x, {i, k})) * at<float>(w, {k, j});
      y[i * N + j] = std::max(acc, 0.0);
      mx = std::max(mx, y[i * N + j]);
      mean += y[i * N + j] / N;
      colsum[j] += y[i * N + j];
    }
    for (int64_t j = 0; j < N; ++j) sum += std::exp(y[i * N + j] - mx);
    for (int64_t j = 0; j < N; ++j) var += (y[i * N + j] - mean) * (y[i * N + j] - mean) / N;
    for (int64_t j = 0; j < N; ++j) {
      soft[i * N + j] = std::exp(y[i * N + j] - mx) / sum;
      norm[i * N + j] = (y[i * N + j] - mean) / std::sqrt(var + 1e-5);
    }
  }

  const std::vector<RuntimeTensor> inputs = {to_device(x), to_device(w), to_device(b)};
  // Twice: the second run takes the launch configurations the first one measured.
  for (int run = 0; run < 2; ++run) {
    std::vector<RuntimeTensor> outs;
    ASSERT_NO_THROW(outs = g->run(inputs));
    ASSERT_EQ(outs.size(), 3u);
    for (const auto& o : outs) {
      EXPECT_EQ(o.device, Device::CUDA);
      EXPECT_NE(o.owner, nullptr);  // coil's own storage, freed with the tensor
    }
    const RuntimeTensor s = to_host(outs[0]), n = to_host(outs[1]), c = to_host(outs[2]);
    ASSERT_EQ(s.sizes, (std::vector<int64_t>{M, N}));
    ASSERT_EQ(c.sizes, (std::vector<int64_t>{N}));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        ASSERT_NEAR(at<float>(s, {i, j}), soft[i * N + j], 1e-5 + 1e-4 * soft[i * N + j])
            << "softmax " << i << "," << j << " run " << run;
        ASSERT_NEAR(at<float>(n, {i, j}), norm[i * N + j], 1e-3)
            << "layernorm " << i << "," << j << " run " << run;
      }
    for (int64_t j = 0; j < N; ++j)
      ASSERT_NEAR(at<float>(c, {j}), colsum[j], 1e-4 * (1 + std::abs(colsum[j])))
          << "column sum " << j << " run " << run;
  }
}

// Inputs of the wrong device, dtype or size are an InputMismatchError, not a crash.
TEST(CudaLibrary, HostInputIsAMismatch) {
  REQUIRE_GPU();
  const char* text = R"(graph(%0: f32[1000]@cuda):
  %1: f32[1000]@cuda = aten.mul.Tensor(%0, 2.0)
  return (%1)
)";
  auto g = compile_graph(text, cuda_options(), nullptr);
  auto x = make_tensor<float>(DType::Float32, {1000});
  fill_random<float>(x, 4);
  EXPECT_THROW(g->run({x}), InputMismatchError);  // a host tensor where a device one goes
  auto wrong = make_tensor<float>(DType::Float32, {999});
  EXPECT_THROW(g->run({to_device(wrong)}), InputMismatchError);
  const RuntimeTensor out = to_host(g->run({to_device(x)}).at(0));
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(at<float>(out, {i}), 2 * at<float>(x, {i}));
}

}  // namespace
}  // namespace coil::runtime
