#include "coil/backend/cuda/nvrtc.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "coil/backend/common/disk_cache.h"
#include "coil/backend/common/sha256.h"
#include "coil/support/error.h"

namespace coil::backend::cuda {
namespace {

namespace fs = std::filesystem;
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

struct Nvrtc {
  nvrtcResult (*nvrtcVersion)(int* major, int* minor);
  const char* (*nvrtcGetErrorString)(nvrtcResult r);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* prog, const char* src, const char* name,
                                    int num_headers, const char* const* headers,
                                    const char* const* include_names);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* prog);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options,
                                     const char* const* options);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char* log);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char* cubin);
  int major = 0, minor = 0;
  std::string why;  // empty: loaded
};

// One table per library path (normally exactly one); never unloaded.
const Nvrtc& nvrtc(const std::string& path) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, Nvrtc>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded->find(path);
  if (it != loaded->end()) return it->second;
  Nvrtc n{};
  void* lib = nullptr;
  std::string tried;
  std::vector<std::string> names;
  if (!path.empty()) names.push_back(path);
  for (const char* s : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(s);
  for (const auto& name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  if (!lib) {
    n.why = "NVRTC not found (tried " + tried + "; install nvidia-cuda-nvrtc)";
    return loaded->emplace(path, n).first->second;
  }
  bool ok = true;
#define COIL_BIND(f)                                     \
  n.f = reinterpret_cast<decltype(n.f)>(dlsym(lib, #f)); \
  if (!n.f) {                                            \
    ok = false;                                          \
    n.why = "libnvrtc has no " #f;                       \
  }
  COIL_BIND(nvrtcVersion)
  COIL_BIND(nvrtcGetErrorString)
  COIL_BIND(nvrtcCreateProgram)
  COIL_BIND(nvrtcDestroyProgram)
  COIL_BIND(nvrtcCompileProgram)
  COIL_BIND(nvrtcGetProgramLogSize)
  COIL_BIND(nvrtcGetProgramLog)
  COIL_BIND(nvrtcGetCUBINSize)
  COIL_BIND(nvrtcGetCUBIN)
#undef COIL_BIND
  if (ok) n.nvrtcVersion(&n.major, &n.minor);
  return loaded->emplace(path, n).first->second;
}

}  // namespace

std::string nvrtc_unavailable_reason(const CompileOptions& options) {
  return nvrtc(options.cuda_nvrtc_path).why;
}

CubinResult compile_to_cubin(const std::string& source, int cc_major, int cc_minor,
                             const CompileOptions& options, bool evict_cached) {
  const auto t0 = std::chrono::steady_clock::now();
  const Nvrtc& n = nvrtc(options.cuda_nvrtc_path);
  COIL_USER_CHECK(n.why.empty()) << "no CUDA compiler: " << n.why;
  const std::string arch = std::to_string(cc_major * 10 + cc_minor);
  // Chosen for compile speed: no include path (the prelude replaces every header), C++17, no
  // debug info; -default-device lets the prelude's helpers omit __device__ where they are
  // templates. Accuracy flags stay at their IEEE defaults (no fast math), as on the CPU.
  std::vector<std::string> opts = {"--gpu-architecture=sm_" + arch, "-std=c++17",
                                   "-default-device"};
  CubinResult r;
  r.command = "nvrtc " + std::to_string(n.major) + "." + std::to_string(n.minor);
  for (const auto& o : opts) r.command += " " + o;
  std::optional<DiskCache> cache;
  std::string key, name;
  if (!options.cache_dir.empty()) {
    Sha256 h;
    h.update(source);
    h.update(std::string_view("\0", 1));
    h.update(r.command);
    key = h.hex();
    name = key + ".cubin";
    cache.emplace(options.cache_dir, "cuda", &r.warnings);
    if (!cache->enabled()) {
      cache.reset();
    } else if (evict_cached) {
      cache->evict(name, "the CUDA driver could not load it");
    } else if (std::optional<CacheEntry> hit = cache->load(name, key)) {
      // Verified against its digest. (One that cuModuleLoadData rejects anyway is evicted and
      // compiled again by the caller, runtime/compile.cpp, through evict_cached.)
      if (!hit->content.empty()) {
        r.cubin = std::move(hit->content);
        r.cache_hit = true;
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
      }
      cache->evict(name, "empty");
    }
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult rc =
      n.nvrtcCreateProgram(&prog, source.c_str(), "coil_kernels.cu", 0, nullptr, nullptr);
  COIL_USER_CHECK(rc == 0) << "nvrtcCreateProgram failed: " << n.nvrtcGetErrorString(rc);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  rc = n.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  n.nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    r.log.resize(log_size);
    n.nvrtcGetProgramLog(prog, r.log.data());
    r.log.resize(log_size - 1);
  }
  if (rc != 0) {
    n.nvrtcDestroyProgram(&prog);
    COIL_USER_CHECK(false) << "NVRTC could not compile the generated CUDA ("
                           << n.nvrtcGetErrorString(rc) << "):\n"
                           << r.log;
  }
  size_t size = 0;
  n.nvrtcGetCUBINSize(prog, &size);
  r.cubin.resize(size);
  n.nvrtcGetCUBIN(prog, r.cubin.data());
  n.nvrtcDestroyProgram(&prog);
  if (cache) cache->store(name, key, r.cubin, 0600);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<CubinResult> compile_to_cubins(const std::vector<std::string>& sources, int cc_major,
                                           int cc_minor, const CompileOptions& options, int jobs) {
  std::vector<CubinResult> out(sources.size());
  std::vector<std::exception_ptr> errors(sources.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < sources.size();) {
      try {
        out[i] = compile_to_cubin(sources[i], cc_major, cc_minor, options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min(sources.size(), static_cast<size_t>(std::max(1, jobs)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

Module::Module(const std::string& cubin) {
  std::string why;
  const Driver* d = Driver::get(&why);
  COIL_USER_CHECK(d != nullptr) << "no CUDA backend: " << why;
  d->check(d->cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
}

Module::~Module() {
  if (const Driver* d = Driver::get(); d && module_) d->cuModuleUnload(module_);
}

CUfunction Module::function(const std::string& name) const {
  const Driver* d = Driver::get();
  CUfunction f = nullptr;
  d->check(d->cuModuleGetFunction(&f, module_, name.c_str()),
           ("cuModuleGetFunction " + name).c_str());
  return f;
}

// Costliest first, each item to the unit with the least cost so far: NVRTC's time per kernel
// follows its source length (correlation 0.95 over ResNet-50's training forward), and the wall
// time is the slowest unit's. Splitting that graph's kernels into 16 contiguous runs of equal
// count left one unit 2.5x the mean, this about 1.4x.
std::vector<int> balance_units(const std::vector<size_t>& cost, size_t units) {
  std::vector<size_t> order(cost.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<size_t> load(units, 0);
  std::vector<int> unit_of(cost.size(), 0);
  for (size_t i : order) {
    const size_t u = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    unit_of[i] = static_cast<int>(u);
    load[u] += cost[i];
  }
  return unit_of;
}

}  // namespace coil::backend::cuda
