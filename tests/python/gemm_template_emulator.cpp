// A host emulation of coil's CUDA GEMM template, for machines without a GPU
// (test_cuda_gemm_template.py::test_emulated_kernel). The kernel's own CUDA text runs as C++:
// every GPU thread of a block is a std::thread, __syncthreads a barrier over them, and the PTX
// functions of the template's "ptx" part (gemm_template.h: GemmTemplateSourceParts) are
// replaced by the definitions below, written from the PTX ISA's fragment layouts:
//   ldmatrix .x4 (.trans): 4 matrices of 8 x 8 16-bit elements, lane 8i + r giving the address
//     of row r of matrix i; lane l receives in register i the pair at row l / 4, columns
//     2 (l % 4) + {0, 1} (.trans: rows 2 (l % 4) + {0, 1} of column l / 4), low half first.
//   mma.m16n8k16 (bf16/f16), g = lane / 4, t = lane % 4: A regs (g, 2t..), (g+8, 2t..),
//     (g, 2t+8..), (g+8, 2t+8..); B regs (k 2t.., n g), (k 2t+8.., n g); C (g, 2t), (g, 2t+1),
//     (g+8, 2t), (g+8, 2t+1).
//   mma.m16n8k8 (tf32): A (g, t), (g+8, t), (g, t+4), (g+8, t+4); B (k t, n g), (k t+4, n g).
//   cp.async: 16 bytes, the first `bytes` from global memory, zeros after; the copies of a
//     group land when a wait_group retires it (mode "late": the latest the hardware may) or
//     at once (mode "early"), so a stage overwritten while read shows in one of the two.
// Checks besides the result: every shared-memory access inside the kernel's dynamic shared
// memory (which starts NaN-filled), every global read inside an operand, every store inside
// C's [rows, cols] (C's padding columns and a guard zone keep their sentinel).
//
// The program is assembled by the test as: EMU_PART 1 (macros), the template's preamble and
// constants, EMU_PART 2 (the PTX functions), the template's kernel, EMU_PART 3 (main).
// main: m n k batch bias activation alpha late smem_bytes  ->  prints "max_err <e> max_ref <r>" and
// exits 0, or prints what went wrong and exits 1.

#if EMU_PART == 1
#include <math.h>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__
#define __align__(n)

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
thread_local Dim3 threadIdx, blockIdx;

// The block's dynamic shared memory (one block runs at a time).
alignas(16) unsigned char smem_bytes[256 * 1024];
int emu_smem_limit = 0;

[[noreturn]] void emu_fail(const char* what, long long a = 0, long long b = 0) {
  std::printf("EMULATION FAILURE: %s (%lld, %lld) thread %u block %u,%u\n", what, a, b, threadIdx.x,
              blockIdx.x, blockIdx.y);
  std::fflush(stdout);
  std::_Exit(1);
}

inline int min(int a, int b) { return a < b ? a : b; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#endif  // EMU_PART 1

#if EMU_PART == 2
// ---- the PTX functions, emulated

std::barrier<>* emu_block_barrier = nullptr;
void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

// Per warp: slots the lanes exchange through, and a barrier over the 32 lanes.
struct EmuWarp {
  std::barrier<> bar{32};
  u32 addr[32];
  u32 a[32][4], b[32][2];
  float c[32][4];
};
std::vector<std::unique_ptr<EmuWarp>> emu_warps;
inline EmuWarp& emu_warp() { return *emu_warps[threadIdx.x / 32]; }
inline int emu_lane() { return threadIdx.x % 32; }

// Operands' global extents: a read outside all of them is a failure.
struct EmuRange {
  const unsigned char *lo, *hi;
};
std::vector<EmuRange> emu_readable;
bool emu_late = true;

inline void emu_check_smem(u32 offset, int bytes) {
  if (offset % 16 != 0 && bytes == 16) emu_fail("unaligned 16-byte shared access", offset);
  if (int(offset) + bytes > emu_smem_limit)
    emu_fail("shared memory overflow", offset, emu_smem_limit);
}

u32 shared_address(const void* p) {
  const auto* q = static_cast<const unsigned char*>(p);
  if (q < smem_bytes || q >= smem_bytes + sizeof smem_bytes) emu_fail("not a shared address");
  return u32(q - smem_bytes);
}

struct EmuCopy {
  u32 dst;
  const void* src;
  int bytes;
};
thread_local std::vector<EmuCopy> emu_open;
thread_local std::deque<std::vector<EmuCopy>> emu_groups;

void emu_do_copy(const EmuCopy& c) {
  unsigned char tmp[16] = {};
  if (c.bytes > 0) std::memcpy(tmp, c.src, c.bytes);
  std::memcpy(smem_bytes + c.dst, tmp, 16);
}

void cp_async_16(u32 dst, const void* src, int bytes) {
  emu_check_smem(dst, 16);
  if (bytes < 0 || bytes > 16) emu_fail("cp.async src-size", bytes);
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) emu_fail("cp.async source not 16-byte aligned");
  if (bytes > 0) {
    const auto* s = static_cast<const unsigned char*>(src);
    bool ok = false;
    for (const EmuRange& r : emu_readable) ok = ok || (s >= r.lo && s + bytes <= r.hi);
    if (!ok) emu_fail("global read outside the operands", bytes);
  }
  EmuCopy c{dst, src, bytes};
  if (emu_late)
    emu_open.push_back(c);
  else
    emu_do_copy(c);
}
void cp_async_commit() {
  emu_groups.push_back(std::move(emu_open));
  emu_open.clear();
}
template <int N>
void cp_async_wait() {
  while (emu_groups.size() > size_t(N)) {
    for (const EmuCopy& c : emu_groups.front()) emu_do_copy(c);
    emu_groups.pop_front();
  }
}

inline unsigned short emu_u16(u32 offset) {
  emu_check_smem(offset, 2);
  unsigned short v;
  std::memcpy(&v, smem_bytes + offset, 2);
  return v;
}

void emu_ldmatrix(u32 (&r)[4], u32 addr, bool trans) {
  EmuWarp& w = emu_warp();
  const int l = emu_lane();
  emu_check_smem(addr, 16);
  w.addr[l] = addr;
  w.bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    unsigned short lo, hi;
    if (!trans) {  // row l / 4 of matrix i, columns 2 (l % 4), +1
      const u32 row = w.addr[8 * i + l / 4];
      lo = emu_u16(row + 2 * (2 * (l % 4)));
      hi = emu_u16(row + 2 * (2 * (l % 4) + 1));
    } else {  // rows 2 (l % 4), +1 of matrix i, column l / 4
      lo = emu_u16(w.addr[8 * i + 2 * (l % 4)] + 2 * (l / 4));
      hi = emu_u16(w.addr[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4));
    }
    r[i] = u32(lo) | (u32(hi) << 16);
  }
  w.bar.arrive_and_wait();
}
void ldmatrix_x4(u32 (&r)[4], u32 addr) { emu_ldmatrix(r, addr, false); }
void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) { emu_ldmatrix(r, addr, true); }

inline float emu_half_to_float(unsigned short h) {
  if constexpr (IS_BF16) return __uint_as_float(u32(h) << 16);
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return float(f);
}

void mma(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  EmuWarp& w = emu_warp();
  const int l = emu_lane();
  for (int i = 0; i < 4; ++i) w.a[l][i] = a[i], w.c[l][i] = acc[i];
  w.b[l][0] = b[0];
  w.b[l][1] = b[1];
  w.bar.arrive_and_wait();
  // The whole A [16][K] and B [K][8] from the lanes' fragments.
  constexpr int K = IS_TF32 ? 8 : 16;
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    if constexpr (IS_TF32) {
      A[g][t] = __uint_as_float(w.a[lane][0]);
      A[g + 8][t] = __uint_as_float(w.a[lane][1]);
      A[g][t + 4] = __uint_as_float(w.a[lane][2]);
      A[g + 8][t + 4] = __uint_as_float(w.a[lane][3]);
      B[t][g] = __uint_as_float(w.b[lane][0]);
      B[t + 4][g] = __uint_as_float(w.b[lane][1]);
    } else {
      auto lo = [](u32 v) { return emu_half_to_float(v & 0xffff); };
      auto hi = [](u32 v) { return emu_half_to_float(v >> 16); };
      A[g][2 * t] = lo(w.a[lane][0]), A[g][2 * t + 1] = hi(w.a[lane][0]);
      A[g + 8][2 * t] = lo(w.a[lane][1]), A[g + 8][2 * t + 1] = hi(w.a[lane][1]);
      A[g][2 * t + 8] = lo(w.a[lane][2]), A[g][2 * t + 9] = hi(w.a[lane][2]);
      A[g + 8][2 * t + 8] = lo(w.a[lane][3]), A[g + 8][2 * t + 9] = hi(w.a[lane][3]);
      B[2 * t][g] = lo(w.b[lane][0]), B[2 * t + 1][g] = hi(w.b[lane][0]);
      B[2 * t + 8][g] = lo(w.b[lane][1]), B[2 * t + 9][g] = hi(w.b[lane][1]);
    }
  }
  const int g = l / 4, t = l % 4;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    double sum = w.c[l][e];
    for (int kk = 0; kk < K; ++kk) sum += double(A[rows[e]][kk]) * double(B[kk][cols[e]]);
    acc[e] = float(sum);
  }
  w.bar.arrive_and_wait();
}

// cvt.rna.tf32.f32: round to nearest (ties away), 10 mantissa bits kept.
u32 tf32_bits(float f) {
  u32 bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;
  return bits & 0xffffe000u;
}
u32 tf32_at(const elem_t* p) {
  emu_check_smem(shared_address(p), 4);
  float f;
  std::memcpy(&f, p, 4);
  return tf32_bits(f);
}

template <class T>
float to_float(T v) {
  if constexpr (sizeof(T) == 4)
    return v;
  else
    return emu_half_to_float(v);
}
template <class T>
T from_float(float f) {
  if constexpr (sizeof(T) == 4) {
    return f;
  } else if constexpr (IS_BF16) {
    u32 u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return 0x7fc0;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // to nearest even
    return T(u >> 16);
  } else {
    _Float16 h = _Float16(f);
    T r;
    std::memcpy(&r, &h, 2);
    return r;
  }
}
#endif  // EMU_PART 2

#if EMU_PART == 3
// ---- the harness

float emu_round(float x) { return to_float(from_float<elem_t>(x)); }

int main(int argc, char** argv) {
  if (argc != 10) {
    std::printf("usage: m n k batch bias activation alpha late smem_bytes\n");
    return 2;
  }
  const long long m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  const long long batch = std::atoll(argv[4]);
  const bool bias = std::atoi(argv[5]) != 0;
  const int activation = std::atoi(argv[6]);
  const float alpha = float(std::atof(argv[7]));
  emu_late = std::atoi(argv[8]) != 0;
  emu_smem_limit = std::atoi(argv[9]);
  if (bias != HAS_BIAS || activation != ACTIVATION) emu_fail("arguments vs the kernel's spec");

  // Operands with leading dims padded to 16 bytes plus one more vector, padding NaN.
  auto pad = [](long long x) { return (x + VEC - 1) / VEC * VEC + VEC; };
  const long long a_rows = A_K_CONTIG ? m : k, a_cols = A_K_CONTIG ? k : m;
  const long long b_rows = B_K_CONTIG ? n : k, b_cols = B_K_CONTIG ? k : n;
  // C's rows: odd (element stores) with late copies, even (the paired stores) with early ones.
  const int c_pairs = emu_late ? 0 : 1;
  const long long lda = pad(a_cols), ldb = pad(b_cols), ldc = c_pairs ? n + 2 + n % 2 : n + 3;
  const long long a_batch = a_rows * lda, b_batch = b_rows * ldb,
                  c_batch = m * ldc + (c_pairs ? 6 : 5);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  const elem_t nan_value = from_float<elem_t>(std::nanf(""));
  std::vector<elem_t> A(batch * a_batch, nan_value), B(batch * b_batch, nan_value);
  for (long long bi = 0; bi < batch; ++bi) {
    for (long long r = 0; r < a_rows; ++r)
      for (long long c = 0; c < a_cols; ++c)
        A[bi * a_batch + r * lda + c] = from_float<elem_t>(normal(rng));
    for (long long r = 0; r < b_rows; ++r)
      for (long long c = 0; c < b_cols; ++c)
        B[bi * b_batch + r * ldb + c] = from_float<elem_t>(normal(rng));
  }
  std::vector<elem_t> bias_row(n);
  for (auto& v : bias_row) v = from_float<elem_t>(normal(rng));
  // C with a guard zone of 64 elements either side; sentinel everywhere.
  const elem_t sentinel = from_float<elem_t>(12345.0f);
  std::vector<elem_t> C_store(batch * c_batch + 128, sentinel);
  elem_t* Cp = C_store.data() + 64;
  emu_readable = {{reinterpret_cast<const unsigned char*>(A.data()),
                   reinterpret_cast<const unsigned char*>(A.data() + A.size())},
                  {reinterpret_cast<const unsigned char*>(B.data()),
                   reinterpret_cast<const unsigned char*>(B.data() + B.size())}};
  // A contiguous Ap / Bp ... as the kernel sees them.
  auto a_at = [&](long long bi, long long i, long long kk) {
    return to_float(A_K_CONTIG ? A[bi * a_batch + i * lda + kk] : A[bi * a_batch + kk * lda + i]);
  };
  auto b_at = [&](long long bi, long long kk, long long j) {
    return to_float(B_K_CONTIG ? B[bi * b_batch + j * ldb + kk] : B[bi * b_batch + kk * ldb + j]);
  };

  const int tiles = int((m + BLOCK_M - 1) / BLOCK_M * ((n + BLOCK_N - 1) / BLOCK_N));
  for (unsigned by = 0; by < unsigned(batch); ++by) {
    for (unsigned bx = 0; bx < unsigned(tiles); ++bx) {
      std::memset(smem_bytes, 0xFF, sizeof smem_bytes);  // NaN in every dtype
      std::barrier<> block(THREADS);
      emu_block_barrier = &block;
      emu_warps.clear();
      for (int w = 0; w < THREADS / 32; ++w) emu_warps.push_back(std::make_unique<EmuWarp>());
      std::vector<std::thread> threads;
      for (int t = 0; t < THREADS; ++t) {
        threads.emplace_back([&, t] {
          threadIdx.x = unsigned(t);
          blockIdx.x = bx;
          blockIdx.y = by;
          COIL_GEMM_NAME(A.data(), B.data(), Cp, bias ? bias_row.data() : nullptr, m, n, k, lda,
                         ldb, ldc, batch > 1 ? a_batch : 0, batch > 1 ? b_batch : 0,
                         batch > 1 ? c_batch : 0, alpha, c_pairs);
          if (!emu_open.empty() || !emu_groups.empty()) {
            for (auto& g : emu_groups)
              if (!g.empty()) emu_fail("cp.async group never waited for");
          }
          emu_groups.clear();
        });
      }
      for (auto& th : threads) th.join();
    }
  }
  // Reference (double, from the rounded operands) and the checks.
  double max_err = 0, max_ref = 0;
  for (long long bi = 0; bi < batch; ++bi) {
    for (long long i = 0; i < m; ++i) {
      for (long long j = 0; j < n; ++j) {
        double sum = 0;
        for (long long kk = 0; kk < k; ++kk) {
          double x = a_at(bi, i, kk), y = b_at(bi, kk, j);
          if constexpr (IS_TF32) {  // the operands as TF32 (rounded to nearest)
            x = __uint_as_float(tf32_bits(float(x)));
            y = __uint_as_float(tf32_bits(float(y)));
          }
          sum += x * y;
        }
        double v = alpha * sum;
        if (bias) v += to_float(bias_row[j]);
        if (activation == 1) v = v > 0 ? v : 0;
        if (activation == 2)
          v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        const double got = to_float(Cp[bi * c_batch + i * ldc + j]);
        const double err = std::fabs(got - v);
        if (!(err <= 1e30)) {
          std::printf("EMULATION FAILURE: C[%lld][%lld][%lld] = %g (ref %g)\n", bi, i, j, got, v);
          return 1;
        }
        max_err = std::max(max_err, err);
        max_ref = std::max(max_ref, std::fabs(v));
      }
    }
  }
  // Nothing written outside C's [batch, m, n].
  for (long long e = 0; e < (long long)C_store.size(); ++e) {
    const long long off = e - 64;
    bool inside = false;
    if (off >= 0) {
      const long long bi = off / c_batch, rem = off % c_batch, i = rem / ldc, j = rem % ldc;
      inside = bi < batch && i < m && j < n;
    }
    if (!inside && std::memcmp(&C_store[e], &sentinel, sizeof(elem_t)) != 0) {
      std::printf("EMULATION FAILURE: store outside C at element offset %lld\n", off);
      return 1;
    }
  }
  std::printf("max_err %.6g max_ref %.6g\n", max_err, max_ref);
  return 0;
}
#endif  // EMU_PART 3
