// The CUDA C++ text of coil's GEMM template (gemm_template.h): a preamble of constants for
// one tile shape and specialization, then the fixed kernel body below, which reads them with
// `if constexpr`. The body is one readable piece of CUDA rather than text assembled from
// fragments: what varies between kernels is only the preamble.
#include <sstream>

#include "coil/backend/cuda/gemm_template.h"

namespace coil::backend::cuda {
namespace {

// The kernel in three parts, parameterized by the preamble's constants (elem_t, IS_TF32,
// IS_BF16, BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, STAGES, A_K_CONTIG, B_K_CONTIG,
// HAS_BIAS, ACTIVATION, and the macro COIL_GEMM_NAME): the derived constants, the PTX
// instructions behind small functions, and the kernel, which uses PTX only through them (so a
// host emulation of those functions can run the kernel's own text: the GEMM tests on machines
// without a GPU, tests/python/gemm_template_emulator.cpp).
constexpr const char* kConstants = R"(
typedef long long i64;
typedef unsigned int u32;

constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int ELEM_BYTES = int(sizeof(elem_t));
constexpr int VEC = 16 / ELEM_BYTES;  // elements per 16-byte cp.async
constexpr int WARP_M = BLOCK_M / WARPS_M;
constexpr int WARP_N = BLOCK_N / WARPS_N;
constexpr int MMA_K = IS_TF32 ? 8 : 16;  // m16n8k8 (TF32) or m16n8k16 (bf16 / f16)
constexpr int TILES_M = WARP_M / 16;     // mma tiles per warp along M
constexpr int TILES_N = WARP_N / 8;      // ... along N
static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "warp tile must be a multiple of 16");
static_assert(BLOCK_K % MMA_K == 0 && BLOCK_K % VEC == 0, "BLOCK_K vs mma / vector width");

// Shared-memory tiles keep the operand's global orientation (so cp.async copies 16 contiguous
// bytes): A is [BLOCK_M][BLOCK_K] when K is contiguous, else [BLOCK_K][BLOCK_M]; B is
// [BLOCK_N][BLOCK_K] when K is contiguous, else [BLOCK_K][BLOCK_N]. Each row is padded so that
// the 8 rows an ldmatrix (or the 8 lanes of a TF32 fragment load) touch fall in distinct banks:
// 16 bytes for ldmatrix rows; for TF32 4 words where k varies along the row, 8 where m/n does.
constexpr int PAD_K = IS_TF32 ? 4 : 8;
constexpr int PAD_MN = 8;
constexpr int A_ROWS = A_K_CONTIG ? BLOCK_M : BLOCK_K;
constexpr int A_COLS = A_K_CONTIG ? BLOCK_K : BLOCK_M;
constexpr int A_PITCH = A_COLS + (A_K_CONTIG ? PAD_K : PAD_MN);
constexpr int B_ROWS = B_K_CONTIG ? BLOCK_N : BLOCK_K;
constexpr int B_COLS = B_K_CONTIG ? BLOCK_K : BLOCK_N;
constexpr int B_PITCH = B_COLS + (B_K_CONTIG ? PAD_K : PAD_MN);
constexpr int A_STAGE = A_ROWS * A_PITCH;  // elements per pipeline stage
constexpr int B_STAGE = B_ROWS * B_PITCH;
constexpr int A_CHUNKS = A_ROWS * A_COLS / VEC;  // 16-byte copies per stage
constexpr int B_CHUNKS = B_ROWS * B_COLS / VEC;
static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0, "tile copy must split evenly");
// Blocks are numbered in groups of GROUP_M tile rows, so that blocks running together share
// rows of A and columns of B in the L2.
constexpr int GROUP_M = 8;
)";

constexpr const char* kPtx = R"(
__device__ __forceinline__ u32 shared_address(const void* p) {
  u32 r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// 16 bytes global -> shared; only the first `bytes` are read, the rest zero-filled.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// acc += a * b on one 16 x 8 tile.
__device__ __forceinline__ void mma(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  if constexpr (IS_TF32) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (IS_BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// A float32 from shared memory rounded to TF32 (to nearest, as cuBLAS does; the tensor core
// itself would drop the low mantissa bits).
__device__ __forceinline__ u32 tf32_at(const elem_t* p) {
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(*reinterpret_cast<const float*>(p)));
  return r;
}

// Element <-> float. Templates, so that only the branch of the kernel's dtype is compiled
// (if constexpr discards nothing outside a template).
template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (sizeof(T) == 4) {
    return v;
  } else if constexpr (IS_BF16) {
    return __uint_as_float(u32(v) << 16);
  } else {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
  }
}
template <class T>
__device__ __forceinline__ T from_float(float f) {
  if constexpr (sizeof(T) == 4) {
    return f;
  } else if constexpr (IS_BF16) {
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
  } else {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
  }
}
)";

constexpr const char* kKernel = R"(
// alpha, bias and the activation on one accumulator element of column `col`.
__device__ __forceinline__ float epilogue(float acc, float alpha, const elem_t* bias, i64 col) {
  float v = alpha * acc;
  if constexpr (HAS_BIAS) v += to_float(bias[col]);
  if constexpr (ACTIVATION == 1) v = fmaxf(v, 0.0f);
  if constexpr (ACTIVATION == 2) {
    // GELU, tanh form (PyTorch's approximate="tanh", cuBLASLt's GELU epilogue).
    const float kSqrt2OverPi = 0.7978845608028654f;
    const float inner = kSqrt2OverPi * (v + 0.044715f * v * v * v);
    v = 0.5f * v * (1.0f + tanhf(inner));
  }
  return v;
}

// Stage `stage` <- the k-tile starting at k0: A rows [m0, m0 + BLOCK_M), B columns [n0, n0 +
// BLOCK_N). A 16-byte chunk reaching past the contiguous extent copies only its elements
// inside (src-size), one past the other extent copies nothing; both leave zeros, which add
// nothing to the products.
__device__ __forceinline__ void load_stage(elem_t* sa, elem_t* sb, const elem_t* a,
                                           const elem_t* b, i64 m, i64 n, i64 k, i64 lda, i64 ldb,
                                           i64 m0, i64 n0, i64 k0) {
  const int tid = threadIdx.x;
  // A: tile rows run along a_rows_dim (M, or K when column-major) from a_r0; columns from a_c0.
  const i64 a_rows = A_K_CONTIG ? m : k, a_cols = A_K_CONTIG ? k : m;
  const i64 a_r0 = A_K_CONTIG ? m0 : k0, a_c0 = A_K_CONTIG ? k0 : m0;
#pragma unroll
  for (int i = 0; i < A_CHUNKS / THREADS; ++i) {
    const int chunk = tid + i * THREADS;
    const int row = chunk / (A_COLS / VEC), col = chunk % (A_COLS / VEC) * VEC;
    const i64 gr = a_r0 + row, gc = a_c0 + col;
    const i64 left = gr < a_rows ? a_cols - gc : 0;  // elements of this chunk inside A
    const int bytes = left <= 0 ? 0 : left >= VEC ? 16 : int(left) * ELEM_BYTES;
    const elem_t* src = bytes > 0 ? a + gr * lda + gc : a;
    cp_async_16(shared_address(sa + row * A_PITCH + col), src, bytes);
  }
  const i64 b_rows = B_K_CONTIG ? n : k, b_cols = B_K_CONTIG ? k : n;
  const i64 b_r0 = B_K_CONTIG ? n0 : k0, b_c0 = B_K_CONTIG ? k0 : n0;
#pragma unroll
  for (int i = 0; i < B_CHUNKS / THREADS; ++i) {
    const int chunk = tid + i * THREADS;
    const int row = chunk / (B_COLS / VEC), col = chunk % (B_COLS / VEC) * VEC;
    const i64 gr = b_r0 + row, gc = b_c0 + col;
    const i64 left = gr < b_rows ? b_cols - gc : 0;
    const int bytes = left <= 0 ? 0 : left >= VEC ? 16 : int(left) * ELEM_BYTES;
    const elem_t* src = bytes > 0 ? b + gr * ldb + gc : b;
    cp_async_16(shared_address(sb + row * B_PITCH + col), src, bytes);
  }
}

// acc += the stage's A tile x B tile, this warp's WARP_M x WARP_N piece at (wm, wn).
__device__ __forceinline__ void compute_stage(float (&acc)[TILES_M][TILES_N][4], const elem_t* sa,
                                              const elem_t* sb, int wm, int wn) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < BLOCK_K; kk += MMA_K) {
    u32 af[TILES_M][4], bf[TILES_N][2];
    if constexpr (IS_TF32) {
      // m16n8k8 fragments (PTX ISA, "mma.m16n8k8 .tf32"): g = lane / 4, t = lane % 4;
      // A: (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B: (k t, n g), (k t + 4, n g).
      const int g = lane / 4, t = lane % 4;
      auto a_at = [&](int mi, int ki) {
        return A_K_CONTIG ? sa + mi * A_PITCH + ki : sa + ki * A_PITCH + mi;
      };
      auto b_at = [&](int ki, int ni) {
        return B_K_CONTIG ? sb + ni * B_PITCH + ki : sb + ki * B_PITCH + ni;
      };
#pragma unroll
      for (int i = 0; i < TILES_M; ++i) {
        const int mi = wm + i * 16 + g;
        af[i][0] = tf32_at(a_at(mi, kk + t));
        af[i][1] = tf32_at(a_at(mi + 8, kk + t));
        af[i][2] = tf32_at(a_at(mi, kk + t + 4));
        af[i][3] = tf32_at(a_at(mi + 8, kk + t + 4));
      }
#pragma unroll
      for (int j = 0; j < TILES_N; ++j) {
        const int ni = wn + j * 8 + g;
        bf[j][0] = tf32_at(b_at(kk + t, ni));
        bf[j][1] = tf32_at(b_at(kk + t + 4, ni));
      }
    } else {
      // ldmatrix.x4: lanes 8q .. 8q + 7 give the row addresses of 8 x 8 matrix q, r = lane % 8.
      const int q = lane / 8, r = lane % 8;
#pragma unroll
      for (int i = 0; i < TILES_M; ++i) {
        const int m_base = wm + i * 16;
        if constexpr (A_K_CONTIG) {
          // Matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
          const int row = m_base + lane % 16, col = kk + lane / 16 * 8;
          ldmatrix_x4(af[i], shared_address(sa + row * A_PITCH + col));
        } else {
          // The tile is [k][m]: the same four matrices, transposed on the way in.
          const int row = kk + r + q / 2 * 8, col = m_base + q % 2 * 8;
          ldmatrix_x4_trans(af[i], shared_address(sa + row * A_PITCH + col));
        }
      }
#pragma unroll
      for (int j = 0; j < TILES_N; j += 2) {
        const int n_base = wn + j * 8;
        u32 t4[4];
        if constexpr (B_K_CONTIG) {
          // The tile is [n][k]: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
          const int row = n_base + r + q / 2 * 8, col = kk + q % 2 * 8;
          ldmatrix_x4(t4, shared_address(sb + row * B_PITCH + col));
        } else {
          // The tile is [k][n]: the same four, transposed.
          const int row = kk + r + q % 2 * 8, col = n_base + q / 2 * 8;
          ldmatrix_x4_trans(t4, shared_address(sb + row * B_PITCH + col));
        }
        bf[j][0] = t4[0];
        bf[j][1] = t4[1];
        bf[j + 1][0] = t4[2];
        bf[j + 1][1] = t4[3];
      }
    }
#pragma unroll
    for (int i = 0; i < TILES_M; ++i)
#pragma unroll
      for (int j = 0; j < TILES_N; ++j) mma(acc[i][j], af[i], bf[j]);
  }
}

// C[b] = act(alpha * A[b] @ B[b] + bias) for the batch index blockIdx.y. Element strides:
// lda / ldb of the operands' non-contiguous dims, ldc of C's rows (C's columns are unit
// stride); c_pairs: C's base and ldc allow storing two adjacent elements at once.
extern "C" __global__ void __launch_bounds__(THREADS)
COIL_GEMM_NAME(const elem_t* __restrict__ a, const elem_t* __restrict__ b, elem_t* __restrict__ c,
               const elem_t* __restrict__ bias, i64 m, i64 n, i64 k, i64 lda, i64 ldb, i64 ldc,
               i64 a_batch, i64 b_batch, i64 c_batch, float alpha, int c_pairs) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  elem_t* smem = reinterpret_cast<elem_t*>(smem_bytes);
  const int tiles_m = int((m + BLOCK_M - 1) / BLOCK_M), tiles_n = int((n + BLOCK_N - 1) / BLOCK_N);
  // Grouped order: GROUP_M tile rows, column by column.
  const int pid = blockIdx.x;
  const int group = pid / (GROUP_M * tiles_n);
  const int first_m = group * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int in_group = pid % (GROUP_M * tiles_n);
  const i64 m0 = i64(first_m + in_group % group_rows) * BLOCK_M;
  const i64 n0 = i64(in_group / group_rows) * BLOCK_N;
  a += blockIdx.y * a_batch;
  b += blockIdx.y * b_batch;
  c += blockIdx.y * c_batch;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WARP_M, wn = warp % WARPS_N * WARP_N;
  float acc[TILES_M][TILES_N][4];
#pragma unroll
  for (int i = 0; i < TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < TILES_N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // The pipeline: STAGES - 1 k-tiles in flight while one is computed. Every iteration commits
  // one cp.async group (empty past the last tile), so "all but STAGES - 2 groups done" always
  // means "k-tile kt has arrived".
  const int k_tiles = int((k + BLOCK_K - 1) / BLOCK_K);
  elem_t* sa = smem;
  elem_t* sb = smem + STAGES * A_STAGE;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles)
      load_stage(sa + s * A_STAGE, sb + s * B_STAGE, a, b, m, n, k, lda, ldb, m0, n0,
                 i64(s) * BLOCK_K);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    // k-tile kt is visible to all; and every warp is done with the stage computed last
    // iteration, which the prefetch below overwrites.
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles) {
      const int s = next % STAGES;
      load_stage(sa + s * A_STAGE, sb + s * B_STAGE, a, b, m, n, k, lda, ldb, m0, n0,
                 i64(next) * BLOCK_K);
    }
    cp_async_commit();
    const int s = kt % STAGES;
    compute_stage(acc, sa + s * A_STAGE, sb + s * B_STAGE, wm, wn);
  }
  cp_async_wait<0>();

  // Epilogue from the accumulators (m16n8 C fragment: g = lane / 4, t = lane % 4; elements
  // (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < TILES_M; ++i) {
#pragma unroll
    for (int j = 0; j < TILES_N; ++j) {
      const i64 col = n0 + wn + j * 8 + 2 * t;
      if (col >= n) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = m0 + wm + i * 16 + g + 8 * h;
        if (row >= m) continue;
        const float v0 = epilogue(acc[i][j][2 * h], alpha, bias, col);
        elem_t* out = c + row * ldc + col;
        if (col + 1 < n) {
          const float v1 = epilogue(acc[i][j][2 * h + 1], alpha, bias, col + 1);
          if (c_pairs) {
            struct alignas(2 * sizeof(elem_t)) Pair { elem_t x, y; };
            *reinterpret_cast<Pair*>(out) = Pair{from_float<elem_t>(v0), from_float<elem_t>(v1)};
          } else {
            out[0] = from_float<elem_t>(v0);
            out[1] = from_float<elem_t>(v1);
          }
        } else {
          out[0] = from_float<elem_t>(v0);
        }
      }
    }
  }
}
)";

// The check of a candidate's output against cuBLASLt's (gemm_template_compare_source).
constexpr const char* kCompare = R"(
typedef long long i64;
__device__ __forceinline__ float value(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float value(const unsigned short* p, i64 i, bool bf16) {
  if (bf16) return __uint_as_float(unsigned(p[i]) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
  return f;
}
// out[0] = max |x - ref| (a NaN or an unequal infinity counts as infinity), out[1] = max |ref|,
// both as float bits (non-negative floats order as their bits), over C's [batch, rows, cols].
template <class T, int KIND>
__device__ void compare(const T* x, const T* ref, i64 batch, i64 rows, i64 cols, i64 ld,
                        i64 batch_stride, unsigned* out) {
  float diff = 0.0f, mag = 0.0f;
  const i64 total = batch * rows * cols;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += i64(gridDim.x) * blockDim.x) {
    const i64 col = i % cols, row = i / cols % rows, b = i / (cols * rows);
    const i64 at = b * batch_stride + row * ld + col;
    float u, v;
    if constexpr (KIND == 0) {
      u = value(x, at);
      v = value(ref, at);
    } else {
      u = value(x, at, KIND == 1);
      v = value(ref, at, KIND == 1);
    }
    float d = u == v ? 0.0f : fabsf(u - v);
    if (!(d <= 3.0e38f)) d = __int_as_float(0x7f800000);
    diff = fmaxf(diff, d);
    if (fabsf(v) <= 3.0e38f) mag = fmaxf(mag, fabsf(v));
  }
  for (int s = 16; s > 0; s /= 2) {
    diff = fmaxf(diff, __shfl_xor_sync(0xffffffffu, diff, s));
    mag = fmaxf(mag, __shfl_xor_sync(0xffffffffu, mag, s));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(out, __float_as_uint(diff));
    atomicMax(out + 1, __float_as_uint(mag));
  }
}
extern "C" __global__ void coil_gemm_compare_f32(const float* x, const float* ref, i64 batch,
                                                 i64 rows, i64 cols, i64 ld, i64 bs, unsigned* out) {
  compare<float, 0>(x, ref, batch, rows, cols, ld, bs, out);
}
extern "C" __global__ void coil_gemm_compare_bf16(const unsigned short* x, const unsigned short* ref,
                                                  i64 batch, i64 rows, i64 cols, i64 ld, i64 bs,
                                                  unsigned* out) {
  compare<unsigned short, 1>(x, ref, batch, rows, cols, ld, bs, out);
}
extern "C" __global__ void coil_gemm_compare_f16(const unsigned short* x, const unsigned short* ref,
                                                 i64 batch, i64 rows, i64 cols, i64 ld, i64 bs,
                                                 unsigned* out) {
  compare<unsigned short, 2>(x, ref, batch, rows, cols, ld, bs, out);
}
)";

const char* dtype_tag(DType t) {
  switch (t) {
    case DType::BFloat16:
      return "bf16";
    case DType::Float16:
      return "f16";
    default:
      return "tf32";
  }
}

}  // namespace

std::string GemmKernelSpec::name() const {
  std::string s = dtype_tag(dtype);
  s += a_k_contig ? "_ak" : "_am";  // A's contiguous dim
  s += b_k_contig ? "_bk" : "_bn";  // B's
  if (bias) s += "_bias";
  if (activation == 1) s += "_relu";
  if (activation == 2) s += "_gelu";
  return s;
}

std::string gemm_template_kernel_name(const GemmTileConfig& c, const GemmKernelSpec& spec) {
  return "coil_gemm_" + c.name() + "_" + spec.name();
}

std::string gemm_template_source(const GemmTileConfig& c, const GemmKernelSpec& spec) {
  const GemmTemplateSourceParts p = gemm_template_source_parts(c, spec);
  return p.preamble + p.constants + p.ptx + p.kernel;
}

GemmTemplateSourceParts gemm_template_source_parts(const GemmTileConfig& c,
                                                   const GemmKernelSpec& spec) {
  const bool tf32 = spec.dtype == DType::Float32;
  auto flag = [](bool b) { return b ? "true" : "false"; };
  std::ostringstream s;
  s << "// coil GEMM template " << c.name() << " (" << c.warps_m() << " x " << c.warps_n()
    << " warps), " << spec.name() << ":\n"
    << "// C = act(alpha * A @ B + bias); src/backend/cuda/gemm_template_source.cpp.\n"
    << "typedef " << (tf32 ? "float" : "unsigned short") << " elem_t;  // "
    << (tf32 ? "float32, multiplied as TF32" : dtype_tag(spec.dtype)) << "\n"
    << "constexpr bool IS_TF32 = " << flag(tf32) << ";\n"
    << "constexpr bool IS_BF16 = " << flag(spec.dtype == DType::BFloat16) << ";\n"
    << "constexpr int BLOCK_M = " << c.block_m << ", BLOCK_N = " << c.block_n
    << ", BLOCK_K = " << c.block_k << ";\n"
    << "constexpr int WARPS_M = " << c.warps_m() << ", WARPS_N = " << c.warps_n() << ";\n"
    << "constexpr int STAGES = " << c.stages << ";\n"
    << "constexpr bool A_K_CONTIG = " << flag(spec.a_k_contig)
    << ";  // true: A [M,K] row-major (K contiguous); false: M contiguous\n"
    << "constexpr bool B_K_CONTIG = " << flag(spec.b_k_contig)
    << ";  // true: B [K,N] column-major (K contiguous); false: N contiguous\n"
    << "constexpr bool HAS_BIAS = " << flag(spec.bias) << ";\n"
    << "constexpr int ACTIVATION = " << spec.activation << ";  // 0 none, 1 ReLU, 2 GELU-tanh\n"
    << "#define COIL_GEMM_NAME " << gemm_template_kernel_name(c, spec) << "\n";
  return {s.str(), kConstants, kPtx, kKernel};
}

std::string gemm_template_compare_source() { return kCompare; }

std::string gemm_template_compare_kernel(DType dtype) {
  return std::string("coil_gemm_compare_") + (dtype == DType::BFloat16  ? "bf16"
                                              : dtype == DType::Float16 ? "f16"
                                                                        : "f32");
}

}  // namespace coil::backend::cuda
