// Matrix multiplication on the GPU through cuBLASLt, loaded with dlopen (libcublasLt.so.13; a
// PyTorch process has it loaded already), with the bias epilogue where an addmm has a bias row.
//
// Row-major C[M,N] = A[M,K] B[K,N] runs as the column-major product C^T = B^T A^T, each operand
// given by its strides: a row-major operand (unit column stride) or a column-major one (unit row
// stride, a transposed view read in place); anything else (broadcast strides) is not handled
// and the caller takes another path.
#pragma once

#include <cstdint>
#include <string>

#include "coil/graph/dtype.h"

namespace coil::backend::cuda {

struct GemmOperand {
  const void* data = nullptr;
  int64_t stride0 = 0, stride1 = 0, batch_stride = 0;  // elements
};

struct GemmArgs {
  DType dtype = DType::Float32;  // of A, B, C (and the bias)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  int64_t c_stride0 = 0, c_stride1 = 1, c_batch_stride = 0;
  int64_t c_cols = 0;  // columns C's storage holds per row (>= n; the padding runtime writes)
  const void* bias = nullptr;  // [N], contiguous, added by the epilogue (nullptr: none)
  int activation = 0;          // applied by the epilogue: 0 none, 1 ReLU, 2 GELU (tanh form)
  float alpha = 1.0f;
  bool allow_tf32 = false;  // float32 may use TF32 tensor cores
  // The operand's storage holds zeros past its contiguous extent, up to its leading stride
  // (runtime/cuda_matmul.cpp pads in place instead of copying; cuBLASLt itself ignores these).
  bool a_zero_padded = false, b_zero_padded = false;
  // Which of the heuristic's algorithms for this problem runs (0: its first, the default; gemm
  // fails for an index past those it offers). The runtime picks one by measurement (option
  // cuda_gemm_measure, runtime/cuda_matmul.cpp).
  int algorithm = 0;
};

// The most of the heuristic's algorithms a problem keeps (GemmArgs::algorithm indexes them).
constexpr int kGemmAlgorithms = 8;

// cuBLASLt's version (cublasLtGetVersion; 0 where it is not loaded): the heuristic's list, so
// a measured choice's index, belongs to one version.
size_t cublaslt_version();

// "" when cuBLASLt can be loaded, else why not.
std::string cublaslt_unavailable_reason();

// Runs the product on `stream`; false (with *why) when these arguments need another path.
bool gemm(const GemmArgs& args, void* stream, std::string* why);

}  // namespace coil::backend::cuda
