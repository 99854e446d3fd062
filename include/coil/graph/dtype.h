// Tensor element types and devices, with their text names used by the graph IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace coil {

// X(enum, text name, C type in generated code, byte size, is_floating, torch name)
#define COIL_DTYPES(X)                                   \
  X(Bool, "b8", "bool", 1, false, "bool")                \
  X(UInt8, "u8", "uint8_t", 1, false, "uint8")           \
  X(Int8, "i8", "int8_t", 1, false, "int8")              \
  X(Int16, "i16", "int16_t", 2, false, "int16")          \
  X(Int32, "i32", "int32_t", 4, false, "int32")          \
  X(Int64, "i64", "int64_t", 8, false, "int64")          \
  X(Float16, "f16", "coil::half", 2, true, "float16")    \
  X(BFloat16, "bf16", "coil::bf16", 2, true, "bfloat16") \
  X(Float32, "f32", "float", 4, true, "float32")         \
  X(Float64, "f64", "double", 8, true, "float64")

enum class DType : uint8_t {
#define COIL_DTYPE_ENUM(e, name, ctype, size, fp, torch) e,
  COIL_DTYPES(COIL_DTYPE_ENUM)
#undef COIL_DTYPE_ENUM
};

std::string_view dtype_name(DType t);        // "f32"
std::string_view dtype_ctype(DType t);       // "float"
std::string_view dtype_torch_name(DType t);  // "float32"
int dtype_size(DType t);
bool dtype_is_floating(DType t);
bool dtype_is_integral(DType t);                              // includes Bool
std::optional<DType> dtype_from_name(std::string_view name);  // accepts text or torch names
// The type arithmetic is done in: f16/bf16 compute in f32 (PyTorch's CPU semantics).
DType dtype_compute(DType t);
// PyTorch's promotion of two tensor dtypes (bool < ints < floats; f16+bf16 -> f32).
DType dtype_promote(DType a, DType b);

enum class Device : uint8_t { CPU, CUDA };
std::string_view device_name(Device d);  // "cpu", "cuda"
std::optional<Device> device_from_name(std::string_view name);

}  // namespace coil
