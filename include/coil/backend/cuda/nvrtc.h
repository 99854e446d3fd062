// NVRTC (the CUDA run-time compiler), loaded with dlopen: generated CUDA C++ -> cubin for the
// device's architecture, cached on disk, then loaded as a module through the driver.
//
// Where libnvrtc comes from: options.cuda_nvrtc_path when set (the Python glue points it at the
// nvidia-cuda-nvrtc wheel PyTorch installs), else the sonames libnvrtc.so.13 / .12 / libnvrtc.so
// on the loader's path.
//
// The cubin cache: <options.cache_dir>/cuda/<sha256>.cubin, the key covering the source (which
// embeds the prelude), the architecture, the NVRTC version and the compile options; kept by the
// rules of coil/backend/common/disk_cache.h (trusted folder, <entry>.sha256 digests checked
// before use, atomic fsync'ed writes, warnings returned in CubinResult::warnings).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coil/backend/cuda/driver.h"
#include "coil/support/options.h"

namespace coil::backend::cuda {

struct CubinResult {
  std::string cubin;    // the image
  std::string command;  // "nvrtc <version> <options>"
  std::string log;      // NVRTC's log (warnings)
  double seconds = 0;   // compile (or cache lookup) time
  bool cache_hit = false;
  std::vector<std::string> warnings;  // cache warnings (each once per process), to show the user
};

// CompileError with NVRTC's log when the source does not compile, or when NVRTC is missing.
// evict_cached: drop the cached entry first (the driver rejected the cached image) and
// compile afresh.
CubinResult compile_to_cubin(const std::string& source, int cc_major, int cc_minor,
                             const CompileOptions& options, bool evict_cached = false);

// The unit (0 .. units-1) of each item (an entry point, a kernel) of cost `cost` (its source
// length) when they are compiled as `units` translation units at once: balanced by cost,
// every unit non-empty when there are at least as many items.
std::vector<int> balance_units(const std::vector<size_t>& cost, size_t units);

// compile_to_cubin of several sources, `jobs` at a time on threads (NVRTC programs are
// independent); the first failure is rethrown after all have finished.
std::vector<CubinResult> compile_to_cubins(const std::vector<std::string>& sources, int cc_major,
                                           int cc_minor, const CompileOptions& options, int jobs);
// "" when NVRTC can be loaded, else why not (one line).
std::string nvrtc_unavailable_reason(const CompileOptions& options);

// A loaded module; unloaded when the last owner goes.
class Module {
 public:
  explicit Module(const std::string& cubin);  // CompileError on failure
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const std::string& name) const;  // CompileError if missing

 private:
  CUmodule module_ = nullptr;
};

}  // namespace coil::backend::cuda
