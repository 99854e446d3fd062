// coil runtime: counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Every draw is a pure function of (seed, offset): kernels compute element i's number from
// offset = base + i, so results do not depend on threading or vectorization. Inline and
// branch-free; a `#pragma omp simd` loop over offsets vectorizes.
#pragma once

#include "vmath.h"

namespace coil {

struct U32x4 {
  uint32_t v0, v1, v2, v3;
};

// Philox4x32 with 10 rounds; counter (c0..c3), key (k0, k1).
COIL_INLINE U32x4 philox4x32_10(U32x4 c, uint32_t k0, uint32_t k1) {
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c.v0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c.v2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = U32x4{hi1 ^ c.v1 ^ k0, lo1, hi0 ^ c.v3 ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

COIL_INLINE U32x4 philox_draw(uint64_t seed, uint64_t offset) {
  return philox4x32_10(U32x4{uint32_t(offset), uint32_t(offset >> 32), 0u, 0u}, uint32_t(seed),
                       uint32_t(seed >> 32));
}

// Uniform draws use all four words of a Philox block: element `offset` takes word offset % 4
// of the block at counter offset / 4, so a thread's four consecutive elements cost one block
// (CUDA vector entry points: rand_uniform_in), not four; a dropout mask over attention
// probabilities is ~70 integer instructions an element otherwise. The block counter's third
// word is 1, a stream apart from the other draws' (0), which take one block an offset.
COIL_INLINE U32x4 philox_quad(uint64_t seed, uint64_t quad) {
  return philox4x32_10(U32x4{uint32_t(quad), uint32_t(quad >> 32), 1u, 0u}, uint32_t(seed),
                       uint32_t(seed >> 32));
}

// Word i (0-3) of a block, branch-free.
COIL_INLINE uint32_t philox_word(const U32x4& r, uint32_t i) {
  const uint32_t lo = (i & 1u) ? r.v1 : r.v0;
  const uint32_t hi = (i & 1u) ? r.v3 : r.v2;
  return (i & 2u) ? hi : lo;
}

// Uniform in [0, 1): the top 24 bits of a word.
COIL_INLINE float uniform_of_word(uint32_t w) { return float(int32_t(w >> 8)) * 0x1.0p-24f; }

COIL_INLINE float rand_uniform(uint64_t seed, uint64_t offset) {
  return uniform_of_word(philox_word(philox_quad(seed, offset >> 2), uint32_t(offset) & 3u));
}

// rand_uniform(seed, offset), given `block`, the block of the quad holding `base` (a thread's
// first element): taken from it where `offset` is in the same quad, else drawn.
COIL_INLINE float rand_uniform_in(const U32x4& block, uint64_t base, uint64_t seed,
                                  uint64_t offset) {
  return (offset >> 2) == (base >> 2) ? uniform_of_word(philox_word(block, uint32_t(offset) & 3u))
                                      : rand_uniform(seed, offset);
}

namespace detail {
// cos(2*pi*u) for u in [0, 1), branch-free: reduce to [0, 1/4] turn, Taylor in the angle.
COIL_INLINE float cos_turns(float u) {
  // cos(2 pi u) = -cos(2 pi t) with t = |u - 1/2| in [0, 1/2];
  // cos(2 pi t) = -cos(2 pi (1/2 - t)) folds t into [0, 1/4].
  const float t = m::detail::fabs_(u - 0.5f);
  const bool flip = t > 0.25f;
  const float a = m::detail::self(flip, 0.5f - t, t) * 6.28318530717958648f;  // [0, pi/2]
  const float z = a * a;
  float p = -1.1470745597729725e-11f;            // -1/14!
  p = COIL_FMAF(p, z, 2.08767569878681e-09f);    // 1/12!
  p = COIL_FMAF(p, z, -2.755731922398589e-07f);  // -1/10!
  p = COIL_FMAF(p, z, 2.48015873015873e-05f);    // 1/8!
  p = COIL_FMAF(p, z, -1.388888888888889e-03f);  // -1/6!
  p = COIL_FMAF(p, z, 4.1666666666666664e-02f);  // 1/4!
  p = COIL_FMAF(p, z, -0.5f);
  const float c = COIL_FMAF(p, z, 1.0f);
  return m::detail::self(flip, c, -c);
}
}  // namespace detail

// Standard normal by Box-Muller on the first two words. u1 in (0, 1] has 31 bits near 0, so
// the tails reach |z| ~ 6.5.
COIL_INLINE float rand_normal(uint64_t seed, uint64_t offset) {
  const U32x4 r = philox_draw(seed, offset);
  float u1 = (float(int32_t(r.v0 >> 1)) + 1.0f) * 0x1.0p-31f;
  u1 = m::detail::self(u1 > 1.0f, 1.0f, u1);
  const float u2 = float(int32_t(r.v1 >> 8)) * 0x1.0p-24f;
  return m::sqrt(-2.0f * m::log(u1)) * detail::cos_turns(u2);
}

// Uniform integer in [low, high) (torch.randint); 64 random bits, modulo (bias < 2^-32 for
// ranges below 2^32).
COIL_INLINE int64_t randint64(uint64_t seed, uint64_t offset, int64_t low, int64_t high) {
  const U32x4 r = philox_draw(seed, offset);
  const uint64_t bits = (uint64_t(r.v0) << 32) | r.v1;
  const uint64_t range = uint64_t(high) - uint64_t(low);
  return int64_t(uint64_t(low) + (range ? bits % range : 0));
}

}  // namespace coil
