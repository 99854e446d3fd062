// The runtime's library kernels: what an ExternNode of kind Mm/Bmm/Addmm/Convolution/IndexPut/
// ScatterAdd runs when it does not go through the host framework. All read strided inputs in
// place (RuntimeTensor views; `data` points at element 0) and write into preallocated outputs
// of any strides. f32/f64 GEMM goes to OpenBLAS when the build found it (COIL_HAVE_OPENBLAS);
// bf16/f16 convert to f32 around it; other dtypes (and builds without OpenBLAS) use a plain
// loop. Errors on bad arguments are std::runtime_error (run-time data errors such as an
// out-of-bounds index) or CompileError (an unsupported configuration).
//
// ExternNode conventions (how the runtime decodes a node; the lowering produces them):
//   Mm          inputs {a [M,K], b [K,N]}                 outputs {out [M,N]}
//   Bmm         inputs {a [B,M,K], b [B,K,N]}             outputs {out [B,M,N]}
//   Addmm       inputs {bias (broadcastable to [M,N]), a, b}, scalars {beta, alpha}
//   Convolution inputs {input [N,C,*], weight [O,C/g,*], (bias [O])},
//               ints {stride[nd], padding[nd], dilation[nd], transposed, output_padding[nd],
//               groups} with nd = rank(input) - 2 (the library path does nd <= 2, forward only)
//   IndexPut    inputs {self, index_0, ..., index_{k-1}, values} (aten argument order; int64
//               or int32 index tensors, broadcast together), ints {accumulate, dim_0, ...,
//               dim_{k-1}}: index_j indexes dim_j of self (ascending; absent: dims 0..k-1).
//               out = self; out[indices] = values (or += with accumulate). As in PyTorch, the
//               broadcast index shape replaces the indexed dims in place when they are
//               adjacent, else it goes first; values broadcast to that shape.
//   ScatterAdd  inputs {self, index, src}, ints {dim}: out = self;
//               out[..., index[p], ...] += src[p] for every position p of index.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coil/runtime/compiled_graph.h"

namespace coil::runtime::kernels {

// Number of elements of a tensor.
int64_t numel(const RuntimeTensor& t);

// dst = src elementwise (same sizes; dtypes may differ: converted).
void copy(const RuntimeTensor& src, const RuntimeTensor& dst);

// Which CPU GEMM library runs a float/double product (src/runtime/gemm_libraries.h): Auto
// measures OpenBLAS against PyTorch's MKL (when in the process) per shape, once.
enum class GemmPolicy : uint8_t { Auto, OpenBlas, Mkl };
// Whether PyTorch's MKL GEMM is in the process (GemmPolicy::Mkl otherwise runs OpenBLAS).
bool mkl_gemm_available();

// out = beta * bias + alpha * (a @ b) for 2-d (mm) or 3-d (bmm) a, b. With bias == nullptr
// (or beta == 0, as in PyTorch: the bias is then not read) out = alpha * (a @ b).
void matmul(const RuntimeTensor& a, const RuntimeTensor& b, const RuntimeTensor& out,
            const RuntimeTensor* bias = nullptr, double beta = 0.0, double alpha = 1.0,
            GemmPolicy policy = GemmPolicy::OpenBlas);

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
  // Decodes ExternNode::ints (layout above) for `nd` spatial dims; CompileError if malformed.
  static ConvParams from_ints(std::span<const int64_t> ints, int nd);
};

// Whether convolution() handles this case (else the host must run it).
bool convolution_supported(DType dtype, int input_rank, const ConvParams& p);
// out = conv(input, weight) + bias, by im2col + GEMM.
void convolution(const RuntimeTensor& input, const RuntimeTensor& weight, const RuntimeTensor* bias,
                 const ConvParams& p, const RuntimeTensor& out);

// Gradients of a forward (non-transposed, 1-d/2-d) convolution: grad_input, grad_weight and
// grad_bias, each written only when its pointer is non-null. Direct loops accumulating in
// double: the library path for use without PyTorch (inside PyTorch, ATen runs it).
void convolution_backward(const RuntimeTensor& grad_output, const RuntimeTensor& input,
                          const RuntimeTensor& weight, const ConvParams& p,
                          const RuntimeTensor* grad_input, const RuntimeTensor* grad_weight,
                          const RuntimeTensor* grad_bias);

// out = self with out[indices] = values (accumulate: +=). `dims[j]` is the dim of self indexed
// by indices[j].
void index_put(const RuntimeTensor& self, const std::vector<RuntimeTensor>& indices,
               const std::vector<int64_t>& dims, const RuntimeTensor& values, bool accumulate,
               const RuntimeTensor& out);

// out = self, then out[index[p] along dim] += src[p].
void scatter_add(const RuntimeTensor& self, int64_t dim, const RuntimeTensor& index,
                 const RuntimeTensor& src, const RuntimeTensor& out);

}  // namespace coil::runtime::kernels
