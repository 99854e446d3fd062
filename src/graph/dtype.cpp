#include "coil/graph/dtype.h"

#include <array>

#include "coil/support/error.h"

namespace coil {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view ctype;
  int size;
  bool is_floating;
  std::string_view torch_name;
};

constexpr std::array kDTypes = {
#define COIL_DTYPE_INFO(e, name, ctype, size, fp, torch) DTypeInfo{name, ctype, size, fp, torch},
    COIL_DTYPES(COIL_DTYPE_INFO)
#undef COIL_DTYPE_INFO
};

const DTypeInfo& info(DType t) {
  size_t i = static_cast<size_t>(t);
  COIL_CHECK(i < kDTypes.size()) << "bad dtype " << i;
  return kDTypes[i];
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view dtype_ctype(DType t) { return info(t).ctype; }
std::string_view dtype_torch_name(DType t) { return info(t).torch_name; }
int dtype_size(DType t) { return info(t).size; }
bool dtype_is_floating(DType t) { return info(t).is_floating; }
bool dtype_is_integral(DType t) { return !info(t).is_floating; }

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (kDTypes[i].name == name || kDTypes[i].torch_name == name) return static_cast<DType>(i);
  }
  // Common PyTorch aliases.
  if (name == "float") return DType::Float32;
  if (name == "double") return DType::Float64;
  if (name == "half") return DType::Float16;
  if (name == "long") return DType::Int64;
  if (name == "int") return DType::Int32;
  if (name == "short") return DType::Int16;
  return std::nullopt;
}

DType dtype_compute(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16) return DType::Float32;
  return t;
}

DType dtype_promote(DType a, DType b) {
  if (a == b) return a;
  // Bool is below everything.
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = dtype_is_floating(a), fb = dtype_is_floating(b);
  if (fa != fb) return fa ? a : b;  // floating beats integral
  if (fa) {
    // f16 with bf16 -> f32; otherwise the wider one.
    if ((a == DType::Float16 && b == DType::BFloat16) ||
        (a == DType::BFloat16 && b == DType::Float16)) {
      return DType::Float32;
    }
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Both integral (non-bool). u8 is unsigned: u8 with a signed type needs a wider signed one.
  if (a == DType::UInt8 || b == DType::UInt8) {
    DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

std::string_view device_name(Device d) {
  switch (d) {
    case Device::CPU:
      return "cpu";
    case Device::CUDA:
      return "cuda";
  }
  COIL_INTERNAL_ERROR() << "bad device " << static_cast<int>(d);
}

std::optional<Device> device_from_name(std::string_view name) {
  if (name == "cpu") return Device::CPU;
  if (name == "cuda" || name == "cuda:0") return Device::CUDA;
  return std::nullopt;
}

}  // namespace coil
