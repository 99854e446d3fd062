// GEMM template configurations, the operands it accepts, and its launch (gemm_template.h).
#include "coil/backend/cuda/gemm_template.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <mutex>

namespace coil::backend::cuda {

int GemmTileConfig::warps_m() const {
  // The fewest warps along M whose warp tile is at least as wide (N) as tall (M), dividing
  // evenly: the squarest warp tile. 4 warps -> 2 x 2, 8 warps over 128 x 256 -> 2 x 4, over
  // 256 x 128 -> 4 x 2.
  int fallback = 1;
  for (int wm = 1; wm <= warps; wm *= 2) {
    if (warps % wm != 0) continue;
    const int wn = warps / wm;
    if (block_m % (wm * 16) != 0 || block_n % (wn * 16) != 0) continue;
    if (block_m / wm <= block_n / wn) return wm;
    fallback = wm;
  }
  return fallback;
}

std::string GemmTileConfig::name() const {
  return std::to_string(block_m) + "x" + std::to_string(block_n) + "x" + std::to_string(block_k) +
         "_w" + std::to_string(warps) + "_s" + std::to_string(stages);
}

std::optional<GemmTileConfig> parse_gemm_config(const std::string& name) {
  GemmTileConfig c;
  int used = 0;
  if (std::sscanf(name.c_str(), "%dx%dx%d_w%d_s%d%n", &c.block_m, &c.block_n, &c.block_k, &c.warps,
                  &c.stages, &used) != 5 ||
      used != static_cast<int>(name.size()))
    return std::nullopt;
  const bool pow2 = c.warps > 0 && (c.warps & (c.warps - 1)) == 0;
  if (c.block_m < 16 || c.block_n < 16 || c.block_k < 8 || !pow2 || c.warps > 16 || c.stages < 2 ||
      c.stages > 8 || c.block_m > 256 || c.block_n > 256 || c.block_k > 128)
    return std::nullopt;
  // The warp layout must tile the block in 16 x 16 pieces and the copies split evenly.
  const int wm = c.warps_m(), wn = c.warps_n();
  if (c.block_m % (wm * 16) != 0 || c.block_n % (wn * 16) != 0 || c.block_k % 16 != 0)
    return std::nullopt;
  return c;
}

std::vector<GemmTileConfig> gemm_template_configs(DType dtype) {
  // Tile shapes in the range CUTLASS and Triton's mm configs use on sm_80/sm_90 with mma.sync;
  // BLOCK_K is 32 bytes' worth fewer for float32 (TF32) so that the stages fit.
  if (dtype == DType::Float32) {
    return {{128, 256, 16, 8, 3}, {256, 128, 16, 8, 3}, {128, 128, 32, 4, 3},
            {128, 128, 16, 4, 4}, {128, 64, 32, 4, 4},  {64, 128, 32, 4, 4},
            {64, 64, 32, 4, 4},   {32, 64, 32, 4, 4},   {16, 64, 32, 2, 4}};
  }
  // The last, 16 rows by 2 warps: products of a few rows (decoding, small batches) without
  // computing rows that are not there.
  return {{128, 256, 32, 8, 3}, {256, 128, 32, 8, 3}, {128, 128, 64, 4, 3},
          {128, 128, 32, 4, 4}, {128, 64, 64, 4, 3},  {64, 128, 64, 4, 3},
          {64, 64, 64, 4, 4},   {32, 64, 64, 4, 4},   {16, 64, 64, 2, 4}};
}

int gemm_template_smem_bytes(const GemmTileConfig& c, const GemmKernelSpec& spec) {
  // As the kernel lays its tiles out (PAD_K / PAD_MN in gemm_template_source.cpp).
  const bool tf32 = spec.dtype == DType::Float32;
  const int es = tf32 ? 4 : 2;
  const int pad_k = tf32 ? 4 : 8, pad_mn = 8;
  const int a =
      spec.a_k_contig ? c.block_m * (c.block_k + pad_k) : c.block_k * (c.block_m + pad_mn);
  const int b =
      spec.b_k_contig ? c.block_n * (c.block_k + pad_k) : c.block_k * (c.block_n + pad_mn);
  return c.stages * (a + b) * es;
}

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One operand [rows, cols] with strides (s0, s1): whether its columns are contiguous, and the
// stride of the other dim (0 where that dim has one element, so it is never stepped along).
struct Orientation {
  bool cols_contig;
  int64_t ld;
};
std::optional<Orientation> orientation(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  // Vectors first: a [K, 1] column of unit stride is contiguous along its rows whatever its
  // column stride says (and has no leading dim to align).
  if (cols == 1 && s0 == 1) return Orientation{false, 0};
  if (rows == 1 && s1 == 1) return Orientation{true, 0};
  if (s1 == 1 || cols == 1) return Orientation{true, rows == 1 ? 0 : s0};
  if (s0 == 1 || rows == 1) return Orientation{false, cols == 1 ? 0 : s1};
  return std::nullopt;
}

}  // namespace

std::optional<GemmTemplateProblem> gemm_template_plan(const GemmArgs& g, std::string* why) {
  auto fail = [&](const char* w) -> std::optional<GemmTemplateProblem> {
    if (why) *why = w;
    return std::nullopt;
  };
  if (g.dtype != DType::BFloat16 && g.dtype != DType::Float16 &&
      !(g.dtype == DType::Float32 && g.allow_tf32))
    return fail("dtype (the template runs bf16, f16 and float32 as TF32)");
  if (g.activation < 0 || g.activation > 2) return fail("unknown epilogue activation");
  if (g.m <= 0 || g.n <= 0 || g.k < 0) return fail("empty product");
  if (g.batch < 1 || g.batch > 65535) return fail("batch count (grid.y)");
  const int64_t vec = 16 / dtype_size(g.dtype);  // elements of one 16-byte copy
  const auto a = orientation(g.m, g.k, g.a.stride0, g.a.stride1);
  const auto b = orientation(g.k, g.n, g.b.stride0, g.b.stride1);
  if (!a || !b) return fail("operand strides (neither row- nor column-major)");
  if (!aligned16(g.a.data) || !aligned16(g.b.data) || a->ld % vec != 0 || b->ld % vec != 0)
    return fail("operand not 16-byte aligned (base or leading dim)");
  if (g.batch > 1 && (g.a.batch_stride % vec != 0 || g.b.batch_stride % vec != 0))
    return fail("batch stride not 16-byte aligned");
  if (!(g.c_stride1 == 1 || g.n == 1)) return fail("output columns not unit stride");
  if (g.bias && reinterpret_cast<uintptr_t>(g.bias) % dtype_size(g.dtype) != 0)
    return fail("bias not element-aligned");
  GemmTemplateProblem p;
  p.spec.dtype = g.dtype;
  p.spec.a_k_contig = a->cols_contig;   // A [M,K]: columns are K
  p.spec.b_k_contig = !b->cols_contig;  // B [K,N]: columns are N
  p.spec.bias = g.bias != nullptr;
  p.spec.activation = g.activation;
  p.lda = a->ld;
  p.ldb = b->ld;
  return p;
}

std::vector<GemmTileConfig> gemm_template_candidates(const GemmArgs& g, int sm_count,
                                                     size_t limit) {
  std::vector<GemmTileConfig> all = gemm_template_configs(g.dtype);
  auto blocks = [&](const GemmTileConfig& c) {
    return (g.m + c.block_m - 1) / c.block_m * ((g.n + c.block_n - 1) / c.block_n) * g.batch;
  };
  // Largest tiles first (most reuse per byte loaded); those that leave SMs idle go last,
  // smallest tile first among them (most blocks).
  std::stable_sort(all.begin(), all.end(), [&](const GemmTileConfig& x, const GemmTileConfig& y) {
    const bool fx = blocks(x) >= sm_count, fy = blocks(y) >= sm_count;
    if (fx != fy) return fx;
    const int ax = x.block_m * x.block_n, ay = y.block_m * y.block_n;
    return fx ? ax > ay : ax < ay;
  });
  if (all.size() > limit) all.resize(limit);
  return all;
}

namespace {

// cuFuncSetAttribute, looked up in the already-loaded driver (driver.h declares only what the
// generated kernels need; only this template asks for more than 48 KiB of shared memory).
using SetAttribute = CUresult (*)(CUfunction, int, int);
SetAttribute set_attribute() {
  static const auto f = reinterpret_cast<SetAttribute>(driver_symbol("cuFuncSetAttribute"));
  return f;
}
constexpr int kAttrMaxDynamicSharedBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

}  // namespace

namespace {
// The log of choices: a bounded record, like the caches (oldest dropped past kMaxEvents).
constexpr size_t kMaxEvents = 4096;
std::mutex& events_mu() {
  static std::mutex mu;
  return mu;
}
std::deque<GemmTemplateEvent>& events() {
  static auto* e = new std::deque<GemmTemplateEvent>();  // process lifetime
  return *e;
}
}  // namespace

void record_gemm_template_event(GemmTemplateEvent e) {
  std::lock_guard<std::mutex> lock(events_mu());
  events().push_back(std::move(e));
  if (events().size() > kMaxEvents) events().pop_front();
}

std::vector<GemmTemplateEvent> gemm_template_events() {
  std::lock_guard<std::mutex> lock(events_mu());
  return {events().begin(), events().end()};
}

void clear_gemm_template_events() {
  std::lock_guard<std::mutex> lock(events_mu());
  events().clear();
}

CUresult launch_gemm_template(CUfunction fn, const GemmTileConfig& c, const GemmTemplateProblem& p,
                              const GemmArgs& g, void* stream) {
  const Driver* d = Driver::get();
  if (!d) return 3;  // CUDA_ERROR_NOT_INITIALIZED
  const int smem = gemm_template_smem_bytes(c, p.spec);
  if (smem > 48 * 1024) {
    SetAttribute set = set_attribute();
    if (!set) return 500;  // CUDA_ERROR_NOT_FOUND
    // Idempotent and cheap; the kernel's attribute, so every launch context sees it.
    if (CUresult r = set(fn, kAttrMaxDynamicSharedBytes, smem); r != 0) return r;
  }
  const int64_t es = dtype_size(g.dtype);
  const void* a = g.a.data;
  const void* b = g.b.data;
  void* cp = g.c;
  const void* bias = g.bias;
  int64_t m = g.m, n = g.n, k = g.k, lda = p.lda, ldb = p.ldb;
  int64_t ldc = g.m == 1 ? 0 : g.c_stride0;
  int64_t ab = g.batch > 1 ? g.a.batch_stride : 0, bb = g.batch > 1 ? g.b.batch_stride : 0;
  int64_t cb = g.batch > 1 ? g.c_batch_stride : 0;
  float alpha = g.alpha;
  // Two adjacent outputs stored at once where every pair the kernel writes (even columns) is
  // aligned to two elements.
  int pairs = reinterpret_cast<uintptr_t>(g.c) % (2 * es) == 0 && ldc % 2 == 0 && cb % 2 == 0;
  void* args[] = {&a, &b, &cp, &bias, &m, &n, &k, &lda, &ldb, &ldc, &ab, &bb, &cb, &alpha, &pairs};
  const int64_t tiles = (g.m + c.block_m - 1) / c.block_m * ((g.n + c.block_n - 1) / c.block_n);
  if (tiles >= (int64_t{1} << 31)) return 1;  // CUDA_ERROR_INVALID_VALUE
  return d->cuLaunchKernel(fn, static_cast<unsigned>(tiles), static_cast<unsigned>(g.batch), 1,
                           static_cast<unsigned>(32 * c.warps), 1, 1, static_cast<unsigned>(smem),
                           static_cast<CUstream>(stream), args, nullptr);
}

}  // namespace coil::backend::cuda
