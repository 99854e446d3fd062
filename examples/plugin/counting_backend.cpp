// The backend "coil_example_portable": the portable backend's code generation and compilation
// (coil/backend/portable/portable_backend.h, a public header) under the plugin's own name,
// counting what it builds. Option backend_target="coil_example_portable" selects it for CPU
// graphs; coil_example_backend_stats() tells how many modules and kernels it built, and its
// source (a graph's debug dump, 05_kernels.cpp) starts with a line naming it, so that a test
// can tell that this backend, not coil's, compiled and ran a graph.
#include <atomic>
#include <cstdint>

#include "coil/backend/portable/portable_backend.h"
#include "coil/plugin/plugin.h"
#include "example.h"

namespace coil_example {

using namespace coil;

namespace {

std::atomic<int64_t> modules_built{0};
std::atomic<int64_t> kernels_built{0};

class CountingBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return kBackendName; }
  Device device() const override { return Device::CPU; }
  // The portable backend's choices: a host target's.
  const backend::TargetPolicy& policy() const override { return portable_->policy(); }

  backend::GeneratedCode generate(const loop::LoopProgram& program, const sched::Schedule& schedule,
                                  const CompileOptions& options) const override {
    backend::GeneratedCode code = portable_->generate(program, schedule, options);
    // The text is what the user sees; build() compiles code.detail, which stays the portable
    // backend's.
    code.text = "// backend coil_example_portable (the coil_example plugin)\n" + code.text;
    return code;
  }

  backend::KernelModule build(const backend::GeneratedCode* code, const loop::LoopProgram& program,
                              const sched::Schedule& schedule,
                              const CompileOptions& options) const override {
    backend::KernelModule module = portable_->build(code, program, schedule, options);
    if (code != nullptr) {
      modules_built.fetch_add(1);
      kernels_built.fetch_add(static_cast<int64_t>(module.host_entries.size()));
    }
    return module;
  }

 private:
  std::unique_ptr<backend::Backend> portable_ = backend::portable::make_portable_backend();
};

}  // namespace

std::shared_ptr<const backend::Backend> make_counting_backend() {
  return std::make_shared<CountingBackend>();
}

}  // namespace coil_example

// For ctypes (tests/python/test_plugin.py): the modules and kernels built so far.
extern "C" COIL_PLUGIN_EXPORT void coil_example_backend_stats(int64_t* modules, int64_t* kernels) {
  *modules = coil_example::modules_built.load();
  *kernels = coil_example::kernels_built.load();
}
