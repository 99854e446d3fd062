// The portable backend: emit_portable + the host compiler driver (without OpenMP) behind the
// Backend interface. Its kernels have the CPU backend's ABI, so the runtime's host steps run
// them, and its graphs lower and schedule as a host target's (TargetPolicy's defaults).
#include "coil/backend/portable/portable_backend.h"

#include <chrono>

#include "coil/backend/cpu/host_compiler.h"
#include "coil/backend/portable/emit_portable.h"
#include "coil/support/error.h"

namespace coil::backend::portable {
namespace {

// The user's flags, unless they are the default ones: -march=native would tie the object to
// this machine's vector extensions, which a portable build leaves out.
CompileOptions portable_options(const CompileOptions& options) {
  CompileOptions o = options;
  if (o.cxx_flags == CompileOptions{}.cxx_flags) o.cxx_flags = "-O2";
  return o;
}

class PortableBackend final : public Backend {
 public:
  std::string_view name() const override { return "portable"; }
  Device device() const override { return Device::CPU; }
  const TargetPolicy& policy() const override { return portable_policy(); }

  GeneratedCode generate(const loop::LoopProgram& program, const sched::Schedule& schedule,
                         const CompileOptions& options) const override {
    auto source = std::make_shared<const PortableSource>(emit_portable(program, schedule, options));
    GeneratedCode code;
    code.text = source->code;
    code.detail = source;
    return code;
  }

  KernelModule build(const GeneratedCode* code, const loop::LoopProgram&, const sched::Schedule&,
                     const CompileOptions& options) const override {
    KernelModule m;
    m.steps = RuntimeSteps::Host;  // the CPU backend's ABI: the host steps call the kernels
    if (code == nullptr) return m;
    const auto& source = *static_cast<const PortableSource*>(code->detail.get());
    const auto t0 = std::chrono::steady_clock::now();
    cpu::HostToolchain toolchain;
    toolchain.openmp = false;
    cpu::HostCompileResult compiled = cpu::compile_and_load(source.code, portable_options(options),
                                                            source.kernel_symbols, toolchain);
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

const TargetPolicy& portable_policy() {
  static const TargetPolicy p = [] {
    TargetPolicy t;  // a host target: externs on host memory, the CPU's lowering choices
    t.name = "portable";
    return t;
  }();
  return p;
}

std::unique_ptr<Backend> make_portable_backend() { return std::make_unique<PortableBackend>(); }

}  // namespace coil::backend::portable
