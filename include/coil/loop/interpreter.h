// A reference interpreter for LoopPrograms: runs every step on host memory, one element at a
// time, with concrete sizes taken from the inputs. It is the oracle for the backends' tests
// and the lowering tests, so it favours obviousness over speed:
//   - floating values are computed in double and rounded to the instruction's dtype after every
//     instruction (f32 results to float, f16/bf16 never appear as compute types), integers in
//     int64 wrapped to their dtype's width; stores convert to the buffer's dtype (f16/bf16
//     round to nearest even);
//   - loads are bounds-checked (an out-of-range logical index or storage offset throws
//     InternalError), as are integer divisions by zero (CompileError);
//   - extern kernels Mm, Bmm, Addmm run naively (double accumulation); the other extern kinds
//     (Fallback included) are unsupported (CompileError);
//   - Rand/Randn use reference_rand/reference_randn below; rng_state holds {seed, offset}.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "coil/loop/program.h"

namespace coil::loop {

// A strided n-d view of typed host storage.
struct HostTensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // elements
  int64_t offset = 0;            // elements, into storage
  std::shared_ptr<std::vector<unsigned char>> storage;

  // A zero-filled contiguous tensor.
  static HostTensor zeros(DType dtype, std::vector<int64_t> sizes);
  // A contiguous tensor holding `values` in row-major order (converted to dtype).
  static HostTensor from_doubles(DType dtype, std::vector<int64_t> sizes,
                                 const std::vector<double>& values);
  // Same storage, other sizes/strides/offset (like torch.as_strided).
  HostTensor as_strided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                        int64_t offset) const;

  int64_t numel() const;
  double get(std::span<const int64_t> index) const;       // element as double
  int64_t get_int(std::span<const int64_t> index) const;  // integral element
  void set(std::span<const int64_t> index, double v);
  // Every element in row-major logical order, as doubles.
  std::vector<double> to_doubles() const;
};

// Runs `program`. `inputs` has one tensor per graph input, with the sizes and strides the
// program's Input buffers describe (their symbols are bound through program.size_symbols).
// Returns one tensor per program output; outputs that are inputs or views share storage with
// them.
std::vector<HostTensor> interpret(const LoopProgram& program, const std::vector<HostTensor>& inputs,
                                  int64_t seed = 0, int64_t rng_offset = 0);

// Counter-based random numbers shared with the backends: a function of (seed, offset) only.
inline uint64_t rng_mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Uniform in [0, 1), a multiple of 2^-24 (exact in float).
inline float reference_rand(int64_t seed, int64_t offset) {
  uint64_t h = rng_mix64(rng_mix64(static_cast<uint64_t>(seed)) ^ static_cast<uint64_t>(offset));
  return static_cast<float>(static_cast<double>(h >> 40) * (1.0 / 16777216.0));
}
// Standard normal (Box-Muller on two 24-bit uniforms derived from (seed, offset)).
float reference_randn(int64_t seed, int64_t offset);

}  // namespace coil::loop
