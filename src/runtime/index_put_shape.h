// The shapes an index_put works over, as PyTorch defines them (private to the runtime): shared
// by the CPU library kernel (extern_index.cpp) and the GPU scatter (cuda_index.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coil/runtime/compiled_graph.h"

namespace coil::runtime::detail {

struct IndexPutShape {
  std::vector<int64_t> bshape;     // the index tensors' broadcast shape
  std::vector<int64_t> rest_dims;  // dims of self not indexed, in order
  size_t before = 0;               // how many of them precede bshape in the result
  // The indexed result's shape (values broadcast to it): rest dims before, then bshape, then
  // the other rest dims. bshape stands in place of the indexed dims when they are adjacent,
  // else first.
  std::vector<int64_t> result;
};

// nullopt, with *why, where the index shapes do not broadcast together. dims: ascending
// indexed dims of self, one per index tensor (the caller checks them).
std::optional<IndexPutShape> index_put_shape(const std::vector<int64_t>& self_sizes,
                                             const std::vector<RuntimeTensor>& indices,
                                             const std::vector<int64_t>& dims, std::string* why);

// A view of `t` broadcast (right-aligned) to `sizes`; a user error naming `what` where it does
// not broadcast.
RuntimeTensor broadcast_to(const RuntimeTensor& t, const std::vector<int64_t>& sizes,
                           const char* what);

}  // namespace coil::runtime::detail
