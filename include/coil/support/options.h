// CompileOptions: the one typed value that configures a compilation. Built once at the Python
// boundary (from torch.compile options and COIL_* environment variables) and passed down by
// const reference. Passes never read the environment or globals.
//
// Every field that can change generated code is part of cache_key(); COIL_OPTION_FIELDS lists
// the fields once so the key cannot forget one.
#pragma once

#include <cstdint>
#include <string>

namespace coil {

// X(type, name, default, affects_code)
#define COIL_OPTION_FIELDS(X)                                                                     \
  X(bool, strict, false, false)               /* fallbacks become CompileErrors */                \
  X(bool, fuse, true, true)                   /* run the fusion scheduler */                      \
  X(bool, inline_pointwise, true, true)       /* inline producers into consumers */               \
  X(bool, memory_order, true, true)           /* reorder steps for a lower peak */                \
  X(bool, recompute_cheap_values, true, true) /* one-read values stay inline (target policy) */   \
  X(int64_t, max_inline_reads, 8, true)       /* realize when inlining repeats more */            \
  X(int64_t, max_pointwise_cat, 8, true)      /* more cat pieces: copied, no where-chain */       \
  X(int64_t, split_reduction_min_elements, 1 << 18, true) /* GPU: smaller stay one stage */       \
  X(int64_t, split_reduction_min_length, 2048, true)      /* GPU: shorter stay one stage */       \
  X(int64_t, parallel_threshold, 32768, true)             /* min elements for an OpenMP loop */   \
  X(int64_t, num_threads, 0, true)                        /* 0: OpenMP default */                 \
  X(std::string, cxx, "g++", true)                        /* host compiler */                     \
  X(std::string, cxx_flags, "-O3 -march=native", true)                                            \
  X(std::string, cache_dir, "", false)           /* kernel cache; "" = no disk cache */           \
  X(std::string, debug_dir, "", false)           /* "" = no debug dump */                         \
  X(std::string, runtime_headers_dir, "", true)  /* "" = the build's source tree */               \
  X(std::string, extern_provider, "auto", false) /* matmul/conv: auto|host|library */             \
  X(int64_t, seed, -1, false)                    /* rand/randn base seed; -1: nondeterministic */ \
  X(std::string, cuda_nvrtc_path, "", false)     /* libnvrtc to dlopen; "": by soname */          \
  X(bool, cuda_allow_tf32, false, false)         /* fp32 matmuls may use TF32 (torch's flag) */   \
  X(bool, cuda_conv_allow_tf32, true, false)     /* fp32 convs may use TF32 (cudnn.allow_tf32) */ \
  X(bool, cuda_conv_measure, false, false)       /* time cuDNN's top engines (max-autotune) */    \
  X(bool, cuda_autotune, true, false)            /* measure launch configs once, cache them */    \
  X(int64_t, cuda_compile_jobs, 0, false)        /* NVRTC units at once; 0: one per core */       \
  X(std::string, cuda_row_entry, "", false)      /* "_br": force a row entry point (tests) */     \
  X(bool, cuda_online_softmax, false, true)      /* softmax's max and sum in one pass */          \
  X(bool, split_to_row_readers, true, true)      /* where the policy has it: align.cpp (CUDA) */  \
  X(bool, cuda_fast_math, true, true)            /* approx exp/div where outputs are bf16/f16 */  \
  X(bool, cuda_fast_math_f32, true, true)        /* ... and where they are f32 too */             \
  X(bool, cuda_gemm_templates, false, false)     /* products: coil's template where faster */     \
  X(bool, cuda_gemm_measure, true, false)        /* products: cuBLASLt's top algorithms timed */  \
  X(std::string, cuda_gemm_force, "", false)     /* "128x128x32_w4_s4": that template (tests) */  \
  X(std::string, symbol_ranges, "", true)        /* "s0:3:64;s1:2:" symbol ranges (ShapeEnv) */   \
  X(std::string, kernel_prefix, "", true)        /* "bw_": profiles tell graphs' kernels apart */ \
  X(int64_t, compile_timeout_s, 300, false)      /* host compiler killed after; 0: no limit */    \
  X(int64_t, cuda_device, 0, false)              /* CUDA device ordinal the graph runs on */      \
  X(bool, cpu_native_convolutions, true, true)   /* CPU 1x1/depthwise convs: products, loops */   \
  X(bool, cuda_native_depthwise, false, true)    /* CUDA depthwise convs: loops, not cuDNN */     \
  X(std::string, cpu_gemm, "auto", false)        /* CPU GEMM: auto (measured)|openblas|mkl */     \
  X(std::string, passes, "dce,cse", true)        /* graph passes, in order (src/passes) */        \
  X(int64_t, shared_outputs_from, -1, true) /* outputs from here on may share memory; -1: none */ \
  X(std::string, backend_target, "", true)  /* backend by name; "": the device's default */

struct CompileOptions {
#define COIL_DECLARE_OPTION(type, name, def, affects) type name = def;
  COIL_OPTION_FIELDS(COIL_DECLARE_OPTION)
#undef COIL_DECLARE_OPTION

  // A stable text of every code-affecting field, for cache keys.
  std::string cache_key() const;
};

}  // namespace coil
