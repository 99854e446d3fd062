// TensorMeta: what is known about a tensor value at compile time. Sizes, strides and the
// storage offset are symbolic expressions (static shapes are constants).
#pragma once

#include <vector>

#include "coil/graph/dtype.h"
#include "coil/sym/expr.h"

namespace coil {

struct TensorMeta {
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  std::vector<sym::Expr> sizes;
  std::vector<sym::Expr> strides;
  sym::Expr storage_offset = nullptr;  // nullptr means 0

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
};

// Row-major strides for `sizes` (the last dim has stride 1).
std::vector<sym::Expr> contiguous_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes);
// Product of sizes.
sym::Expr numel(sym::Context& ctx, const std::vector<sym::Expr>& sizes);
// True when strides are provably the row-major strides (size-1 dims may have any stride).
bool is_contiguous(sym::Context& ctx, const TensorMeta& meta);

}  // namespace coil
