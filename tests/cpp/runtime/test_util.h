// Helpers for the runtime tests: owning tensors with explicit strides.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "coil/runtime/compiled_graph.h"

namespace coil::runtime::testing {

inline std::vector<int64_t> row_major(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    s[d] = acc;
    acc *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return s;
}

// A tensor of `sizes` laid out with `perm` as the memory order (perm[0] outermost), so
// perm = {1, 0} on a 2-d tensor gives a transposed (column-major) layout.
template <typename T>
RuntimeTensor make_tensor(DType dtype, std::vector<int64_t> sizes, std::vector<int> perm = {}) {
  size_t rank = sizes.size();
  if (perm.empty())
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int>(d));
  std::vector<int64_t> strides(rank);
  int64_t acc = 1;
  for (size_t i = rank; i-- > 0;) {
    strides[perm[i]] = acc;
    acc *= sizes[perm[i]] > 0 ? sizes[perm[i]] : 1;
  }
  auto storage = std::shared_ptr<T[]>(new T[acc > 0 ? acc : 1]());
  RuntimeTensor t;
  t.data = storage.get();
  t.dtype = dtype;
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  t.owner = std::shared_ptr<void>(storage, storage.get());
  return t;
}

template <typename T>
T& at(const RuntimeTensor& t, std::vector<int64_t> idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
  return static_cast<T*>(t.data)[off];
}

template <typename F>
void for_each(const std::vector<int64_t>& sizes, F&& f) {
  for (int64_t s : sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    f(idx);
    size_t d = sizes.size();
    while (d > 0) {
      --d;
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (sizes.empty()) return;
  }
}

template <typename T>
void fill_random(const RuntimeTensor& t, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for_each(t.sizes,
           [&](const std::vector<int64_t>& i) { at<T>(t, i) = static_cast<T>(dist(gen)); });
}

}  // namespace coil::runtime::testing
