// coil's own matrix-product kernel: a CUDA C++ template generated as source text, compiled by
// NVRTC and run in place of cuBLASLt where it measured faster (mode="max-autotune", option
// cuda_gemm_templates; the choice is made in src/runtime/cuda_matmul.cpp).
//
// The kernel (gemm_template_source.cpp): one block computes a BLOCK_M x BLOCK_N tile of C,
// its warps a WARP_M x WARP_N piece each, with tensor-core mma.sync (m16n8k16 bf16/f16 with
// f32 accumulation, m16n8k8 TF32 for float32). Operand tiles move global -> shared memory by
// 16-byte cp.async in a STAGES-deep pipeline, shared -> registers by ldmatrix (16-bit types;
// .trans for the operand whose contiguous dim is M or N) or scalar loads (TF32). Loads past the
// matrix edges are zero-filled (cp.async's src-size), so M, N and K need not be multiples of
// anything; the epilogue (alpha, bias row, ReLU / GELU-tanh, cast) runs in registers and
// stores guarded by the bounds. What it needs (gemm_template_plan): each operand row- or
// column-major with 16-byte aligned base, leading dim and batch stride; otherwise cuBLASLt runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coil/backend/cuda/cublaslt.h"
#include "coil/backend/cuda/driver.h"

namespace coil::backend::cuda {

// A tile shape: "128x128x32_w4_s3" is BLOCK_M x BLOCK_N x BLOCK_K, 4 warps, 3 stages.
struct GemmTileConfig {
  int block_m = 128, block_n = 128, block_k = 32;
  int warps = 4, stages = 3;

  // Warps along M and N (warps_m * warps_n == warps): as square a warp tile as divides.
  int warps_m() const;
  int warps_n() const { return warps / warps_m(); }
  std::string name() const;
  bool operator==(const GemmTileConfig&) const = default;
};

// nullopt where `name` is not of the form above.
std::optional<GemmTileConfig> parse_gemm_config(const std::string& name);

// What a generated kernel is specialized on besides its tile shape.
struct GemmKernelSpec {
  DType dtype = DType::BFloat16;  // bf16 / f16, or Float32 run as TF32
  bool a_k_contig = true;         // A [M,K] row-major (K contiguous); else column-major
  bool b_k_contig = false;        // B [K,N] column-major (K contiguous); else row-major
  bool bias = false;
  int activation = 0;        // 0 none, 1 ReLU, 2 GELU (tanh form)
  std::string name() const;  // "bf16_ak_bn_bias_relu" ...
};

// Every configuration coil knows for `dtype` (the NVRTC compile test compiles them all).
std::vector<GemmTileConfig> gemm_template_configs(DType dtype);

// Shared memory one block of `c` takes for `spec` (bytes; dynamic shared memory).
int gemm_template_smem_bytes(const GemmTileConfig& c, const GemmKernelSpec& spec);

// The kernel's extern "C" name.
std::string gemm_template_kernel_name(const GemmTileConfig& c, const GemmKernelSpec& spec);

// The CUDA C++ source of one kernel (self-contained: no headers, no prelude).
std::string gemm_template_source(const GemmTileConfig& c, const GemmKernelSpec& spec);
// The same text in its parts, in order: the preamble (this kernel's constants), the derived
// constants, the PTX instructions behind small functions, the kernel (using PTX only through
// them). The host emulation test replaces the third part.
struct GemmTemplateSourceParts {
  std::string preamble, constants, ptx, kernel;
};
GemmTemplateSourceParts gemm_template_source_parts(const GemmTileConfig& c,
                                                   const GemmKernelSpec& spec);

// Kernels coil_gemm_compare_{bf16,f16,f32}(x, ref, batch, rows, cols, ld, batch_stride,
// unsigned out[2]): out[0] = max |x - ref| (NaN or unequal infinities: infinity), out[1] =
// max |ref|, as float bits combined by atomicMax (out zeroed first). The measurement checks
// each candidate's output against cuBLASLt's with it.
std::string gemm_template_compare_source();
std::string gemm_template_compare_kernel(DType dtype);

// A product as the template runs it: the spec, and per operand its leading dim (the stride of
// its non-contiguous dim).
struct GemmTemplateProblem {
  GemmKernelSpec spec;
  int64_t lda = 0, ldb = 0;
};

// The problem where the template can run `g` (dtype bf16/f16, or float32 with allow_tf32;
// row- or column-major operands with 16-byte aligned bases, leading dims and batch strides;
// unit column stride of C, batch < 65536); nullopt with *why otherwise.
std::optional<GemmTemplateProblem> gemm_template_plan(const GemmArgs& g, std::string* why);

// The configurations worth measuring for `g` on a device of `sm_count` SMs: up to `limit`
// tile shapes, larger tiles for larger products (a product too small to give every SM a
// block of the large tiles gets the small ones).
std::vector<GemmTileConfig> gemm_template_candidates(const GemmArgs& g, int sm_count,
                                                     size_t limit = 6);

// What the product provider choice did (src/runtime/cuda_matmul.cpp), kept for tests and
// benchmarks (the binding gemm_template_events): one event per product key and decision —
// measured (times of cuBLASLt and the best template), forced, loaded from the disk cache, or
// a template dropped (wrong result, compile or launch failure) with the reason.
struct GemmTemplateEvent {
  std::string key;     // device, dtype, sizes, layouts, epilogue
  std::string choice;  // "cublaslt" or a configuration name
  std::string how;     // "measured", "disk cache", "forced", "fallback", "rejected"
  std::string detail;  // per candidate times and errors, or the reason for a fallback
  double cublaslt_ms = -1, template_ms = -1;  // measured: cuBLASLt's, the best template's
  std::string best_template;                  // measured: the fastest correct candidate
};
void record_gemm_template_event(GemmTemplateEvent e);
std::vector<GemmTemplateEvent> gemm_template_events();
void clear_gemm_template_events();

// Launches `fn` (the kernel of `c` for p.spec) on `stream`, raising its dynamic shared
// memory limit first where the tile needs more than 48 KiB; the driver's error code (0: ok).
CUresult launch_gemm_template(CUfunction fn, const GemmTileConfig& c, const GemmTemplateProblem& p,
                              const GemmArgs& g, void* stream);

}  // namespace coil::backend::cuda
