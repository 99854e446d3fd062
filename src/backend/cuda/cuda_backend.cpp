// The CUDA backend: emit_cuda + NVRTC + the driver behind the Backend interface (moved here
// from src/runtime/compile.cpp, unchanged but for the timing records).
#include "coil/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_map>

#include "coil/backend/common/sha256.h"
#include "coil/backend/cuda/compiled_kernels.h"
#include "coil/backend/cuda/cuda_policy.h"
#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/backend/cuda/launch.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/support/error.h"

namespace coil::backend::cuda {
namespace {

// Runs f, recording its time as `stage` in m.timings.
template <typename F>
auto timed(KernelModule& m, const char* stage, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Record {
    KernelModule& m;
    const char* stage;
    std::chrono::steady_clock::time_point t0;
    ~Record() {
      m.timings.emplace_back(
          stage, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } record{m, stage, t0};
  return f();
}

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device::CUDA; }
  const TargetPolicy& policy() const override { return cuda_policy(); }

  GeneratedCode generate(const loop::LoopProgram& program, const sched::Schedule& schedule,
                         const CompileOptions& options) const override {
    auto source = std::make_shared<const CudaSource>(emit_cuda(program, schedule, options));
    GeneratedCode code;
    code.text = strip_prelude(source->code);
    code.detail = source;
    return code;
  }

  // Compiles with NVRTC (cached), loads the module, looks up every entry point.
  KernelModule build(const GeneratedCode* code, const loop::LoopProgram& program,
                     const sched::Schedule& schedule,
                     const CompileOptions& options) const override {
    std::string why;
    COIL_USER_CHECK(Driver::get(&why) != nullptr) << "no CUDA backend: " << why;
    COIL_USER_CHECK(options.cuda_device >= 0) << "bad CUDA device ordinal " << options.cuda_device;
    const DeviceInfo& dev = device_info(static_cast<int>(options.cuda_device));
    // Modules load into the current context: the graph's device's, whatever the thread had.
    ScopedContext on_device(dev);
    KernelModule m;
    m.steps = RuntimeSteps::Cuda;
    auto k = std::make_shared<CompiledKernels>();
    k->device = &dev;
    m.device_kernels = k;
    if (code == nullptr || schedule.kernels.empty()) return m;
    const CudaSource& source = *static_cast<const CudaSource*>(code->detail.get());
    // NVRTC compiles one unit on one core and its time grows with the source, nearly all of it
    // spent instantiating entry points (each compiles its kernel's body once more). The work
    // goes into up to `jobs` units, balanced, compiled at once: whole kernels where there are
    // at least as many as units (a kernel's entry points share its parse: split, ResNet-50's
    // forward took 10% more NVRTC time in all), else single entry points, so that a graph of
    // one row kernel (four entry points) compiles in four units at once (0.36 -> 0.23 s).
    const size_t jobs = static_cast<size_t>(
        options.cuda_compile_jobs > 0 ? options.cuda_compile_jobs
                                      : std::max(1u, std::thread::hardware_concurrency()));
    const bool whole_kernels = source.distinct.size() >= jobs;
    std::vector<std::vector<std::pair<int, int>>> items;  // each: (distinct kernel, entry point)s
    std::vector<size_t> cost;
    for (size_t d = 0; d < source.distinct.size(); ++d) {
      const KernelCode& kc = source.distinct[d];
      for (size_t e = 0; e < kc.entries.size(); ++e) {
        if (e == 0 || !whole_kernels) {
          items.emplace_back();
          cost.push_back(kc.shared.size());
        }
        items.back().emplace_back(static_cast<int>(d), static_cast<int>(e));
        cost.back() += kc.entries[e].code.size();
      }
    }
    const size_t units = std::clamp<size_t>(items.size(), 1, jobs);
    const std::vector<int> unit_of_item = balance_units(cost, units);
    std::vector<std::vector<std::pair<int, int>>> parts(units);
    std::unordered_map<std::string, int> unit_of;  // entry point name -> unit
    for (size_t i = 0; i < items.size(); ++i)
      for (const auto& [d, e] : items[i]) {
        parts[unit_of_item[i]].emplace_back(d, e);
        unit_of.emplace(source.distinct[d].entries[e].name, unit_of_item[i]);
      }
    std::vector<std::string> sources;
    for (const auto& p : parts) sources.push_back(cuda_unit(source.distinct, p));
    std::vector<CubinResult> cubins = timed(m, "nvrtc", [&] {
      return compile_to_cubins(sources, dev.cc_major, dev.cc_minor, options,
                               static_cast<int>(jobs));
    });
    m.compiler_command = cubins[0].command + " (" + std::to_string(units) + " unit(s) of " +
                         std::to_string(source.distinct.size()) + " distinct kernel(s), " +
                         std::to_string(source.kernels.size()) + " in all" +
                         (whole_kernels ? "" : ", split by entry point") + ")";
    m.cache_hit = true;
    for (const auto& c : cubins) {
      m.compiler_log += c.log;
      m.warnings.insert(m.warnings.end(), c.warnings.begin(), c.warnings.end());
      m.cache_hit = m.cache_hit && c.cache_hit;
    }
    auto modules = timed(m, "load", [&] {
      auto mods = std::make_shared<std::vector<std::shared_ptr<Module>>>();
      for (size_t u = 0; u < cubins.size(); ++u) {
        try {
          mods->push_back(std::make_shared<Module>(cubins[u].cubin));
        } catch (const CompileError&) {
          if (!cubins[u].cache_hit) throw;
          // A cached image the driver rejects (digest intact: written by another NVRTC or
          // driver, say): evicted and compiled again, once.
          cubins[u] = compile_to_cubin(sources[u], dev.cc_major, dev.cc_minor, options,
                                       /*evict_cached=*/true);
          for (auto& w : cubins[u].warnings) m.warnings.push_back(w);
          mods->push_back(std::make_shared<Module>(cubins[u].cubin));
        }
      }
      return mods;
    });
    for (size_t i = 0; i < source.kernels.size(); ++i) {
      const CudaKernel& kern = source.kernels[i];
      std::array<void*, kRowEntries> fns{};
      const int entries = kern.kind == KernelKind::Pointwise ? 3 : kRowEntries;
      for (int e = 0; e < entries; ++e) {
        std::string name = entry_name(kern, e);
        if (name.empty()) continue;
        auto it = unit_of.find(name);
        COIL_CHECK(it != unit_of.end()) << "entry point " << name << " was not emitted";
        fns[e] = (*modules)[it->second]->function(name);
      }
      if (!fns[1]) fns[1] = fns[0];
      if (!fns[0]) fns[0] = fns[1];  // vector row kernels: _b also serves entry 0
      k->functions.push_back(fns);
    }
    k->kernels = source.kernels;
    k->module = modules;
    Sha256 h;
    h.update(source.code);
    h.update(cubins[0].command);
    k->key = h.hex();
    return m;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace coil::backend::cuda
