// The CPU backend: emit_cpp + the host compiler behind the Backend interface.
#include "coil/backend/cpu/cpu_backend.h"

#include <chrono>

#include "coil/backend/cpu/cpu_policy.h"
#include "coil/backend/cpu/emit_cpp.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/support/error.h"

namespace coil::backend::cpu {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  const TargetPolicy& policy() const override { return cpu_policy(); }

  GeneratedCode generate(const loop::LoopProgram& program, const sched::Schedule& schedule,
                         const CompileOptions& options) const override {
    CppSource source = emit_cpp(program, schedule, options);
    COIL_CHECK(source.kernel_symbols.size() == schedule.kernels.size())
        << "emit_cpp returned " << source.kernel_symbols.size() << " symbols for "
        << schedule.kernels.size() << " kernels";
    GeneratedCode code;
    code.text = source.code;
    code.detail = std::make_shared<const CppSource>(std::move(source));
    return code;
  }

  KernelModule build(const GeneratedCode* code, const loop::LoopProgram&, const sched::Schedule&,
                     const CompileOptions& options) const override {
    KernelModule m;
    m.steps = RuntimeSteps::Host;
    if (code == nullptr) return m;
    const auto& source = *static_cast<const CppSource*>(code->detail.get());
    // The entry points are resolved (as COIL_ENTRY names, carrying the cache key) inside
    // compile_and_load, which evicts and recompiles a cached library that lacks them.
    const auto t0 = std::chrono::steady_clock::now();
    HostCompileResult compiled = compile_and_load(source.code, options, source.kernel_symbols);
    m.timings.emplace_back(
        "host_compile",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    m.compiler_command = compiled.command;
    m.compiler_log = compiled.log;
    m.cache_hit = compiled.cache_hit;
    m.warnings = compiled.warnings;
    m.host_entries = compiled.entries;
    m.library = compiled.library;
    return m;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace coil::backend::cpu
