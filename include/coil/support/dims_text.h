// "[2, 3]": sizes, strides or conv parameters as text, for error messages and logs. In
// support so that every layer (the runtime's errors, the cuDNN call's problem log) writes
// them one way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace coil {

inline std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace coil
