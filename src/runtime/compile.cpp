// compile_graph: the whole pipeline, timed per stage.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <unordered_map>

#include "coil/backend/common/sha256.h"
#include "coil/backend/cpu/emit_cpp.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/backend/cuda/launch.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/loop/printer.h"
#include "coil/lower/lower.h"
#include "coil/ops/verify.h"
#include "coil/passes/pass.h"
#include "coil/runtime/compiled_graph.h"
#include "coil/runtime/program.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"
#include "coil/support/error.h"

namespace coil::runtime {

namespace {

class ProgramGraph final : public CompiledGraph {
 public:
  ProgramGraph(CompileArtifacts artifacts, std::unique_ptr<Program> program)
      : artifacts_(std::move(artifacts)), program_(std::move(program)) {}
  std::vector<RuntimeTensor> run(const std::vector<RuntimeTensor>& inputs) override {
    return program_->run(inputs);
  }
  std::vector<RuntimeTensor> run(const std::vector<RuntimeTensor>& inputs,
                                 const RunContext& ctx) override {
    return program_->run(inputs, ctx);
  }
  std::vector<RuntimeTensor> run_consuming(std::vector<RuntimeTensor> inputs, const RunContext& ctx,
                                           const std::function<void()>& checked) override {
    return program_->run_consuming(std::move(inputs), ctx, checked);
  }
  Device device() const override { return program_->device(); }
  const CompileArtifacts& artifacts() const override { return artifacts_; }
  const Program* program() const override { return program_.get(); }

 private:
  CompileArtifacts artifacts_;
  std::unique_ptr<Program> program_;
};

class StageTimer {
 public:
  explicit StageTimer(CompileArtifacts& a) : a_(a) {}
  template <typename F>
  auto operator()(const char* stage, F&& f) {
    auto t0 = std::chrono::steady_clock::now();
    struct Record {
      CompileArtifacts& a;
      const char* stage;
      std::chrono::steady_clock::time_point t0;
      ~Record() {
        std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        a.timings.emplace_back(stage, dt.count());
      }
    } record{a_, stage, t0};
    return f();
  }

 private:
  CompileArtifacts& a_;
};

// The graph after each pass that changed it: (file name, text), for the debug dump.
using PassDumps = std::vector<std::pair<std::string, std::string>>;

// Writes what the stages produced into `dir` (the graph's debug folder; the Python glue adds
// the FX graph, the graph text, timings and fallbacks). Called after a failure too, so a
// graph that does not compile still leaves its loop IR and generated source to look at.
void dump(const CompileArtifacts& a, const PassDumps& passes, const std::string& dir,
          const std::string& error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;
  auto put = [&](const char* name, const std::string& s) {
    if (!s.empty()) std::ofstream(fs::path(dir) / name) << s;
  };
  for (const auto& [name, text] : passes) put(name.c_str(), text);
  put("02_loop_program.txt", a.loop_program);
  put("03_schedule.txt", a.schedule);
  put("04_fusion_log.txt", a.fusion_log);
  put("05_kernels.cpp", a.source);
  put("06_compiler.log", "$ " + a.compiler_command + "\n" + a.compiler_log);
  put("compile_error.txt", error);
}

}  // namespace

namespace {

// A graph runs where its inputs live; mixing devices is not supported (the glue falls back).
Device graph_device(const loop::LoopProgram& program) {
  std::optional<Device> dev;
  for (loop::BufferId b : program.inputs) {
    Device d = program.buffer(b).device;
    COIL_USER_CHECK(!dev || *dev == d) << "inputs on several devices (cpu and cuda)";
    dev = d;
  }
  if (!dev) {  // no inputs: the device of the first buffer that names one
    for (const auto& b : program.buffers)
      if (b.device == Device::CUDA) return Device::CUDA;
    return Device::CPU;
  }
  return *dev;
}

// Emit CUDA, compile it with NVRTC (cached), load the module, look up every entry point.
CudaKernels compile_cuda(const loop::LoopProgram& program, const sched::Schedule& schedule,
                         const CompileOptions& options, CompileArtifacts& a, StageTimer& time) {
  namespace cu = backend::cuda;
  std::string why;
  COIL_USER_CHECK(cu::Driver::get(&why) != nullptr) << "no CUDA backend: " << why;
  COIL_USER_CHECK(options.cuda_device >= 0) << "bad CUDA device ordinal " << options.cuda_device;
  const cu::DeviceInfo& dev = cu::device_info(static_cast<int>(options.cuda_device));
  // Modules load into the current context: the graph's device's, whatever the thread had.
  cu::ScopedContext on_device(dev);
  CudaKernels k;
  k.device = &dev;
  if (schedule.kernels.empty()) return k;
  cu::CudaSource source = time("emit", [&] { return cu::emit_cuda(program, schedule, options); });
  a.source = cu::strip_prelude(source.code);
  // NVRTC compiles one unit on one core and its time grows with the source, nearly all of it
  // spent instantiating entry points (each compiles its kernel's body once more). The work
  // goes into up to `jobs` units, balanced, compiled at once: whole kernels where there are
  // at least as many as units (a kernel's entry points share its parse: split, ResNet-50's
  // forward took 10% more NVRTC time in all), else single entry points, so that a graph of
  // one row kernel (four entry points) compiles in four units at once (0.36 -> 0.23 s).
  const size_t jobs = static_cast<size_t>(options.cuda_compile_jobs > 0
                                              ? options.cuda_compile_jobs
                                              : std::max(1u, std::thread::hardware_concurrency()));
  const bool whole_kernels = source.distinct.size() >= jobs;
  std::vector<std::vector<std::pair<int, int>>> items;  // each: (distinct kernel, entry point)s
  std::vector<size_t> cost;
  for (size_t d = 0; d < source.distinct.size(); ++d) {
    const cu::KernelCode& kc = source.distinct[d];
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
  const std::vector<int> unit_of_item = cu::balance_units(cost, units);
  std::vector<std::vector<std::pair<int, int>>> parts(units);
  std::unordered_map<std::string, int> unit_of;  // entry point name -> unit
  for (size_t i = 0; i < items.size(); ++i)
    for (const auto& [d, e] : items[i]) {
      parts[unit_of_item[i]].emplace_back(d, e);
      unit_of.emplace(source.distinct[d].entries[e].name, unit_of_item[i]);
    }
  std::vector<std::string> sources;
  for (const auto& p : parts) sources.push_back(cu::cuda_unit(source.distinct, p));
  std::vector<cu::CubinResult> cubins = time("nvrtc", [&] {
    return cu::compile_to_cubins(sources, dev.cc_major, dev.cc_minor, options,
                                 static_cast<int>(jobs));
  });
  a.compiler_command = cubins[0].command + " (" + std::to_string(units) + " unit(s) of " +
                       std::to_string(source.distinct.size()) + " distinct kernel(s), " +
                       std::to_string(source.kernels.size()) + " in all" +
                       (whole_kernels ? "" : ", split by entry point") + ")";
  a.cache_hit = true;
  for (const auto& c : cubins) {
    a.compiler_log += c.log;
    a.warnings.insert(a.warnings.end(), c.warnings.begin(), c.warnings.end());
    a.cache_hit = a.cache_hit && c.cache_hit;
  }
  auto modules = time("load", [&] {
    auto m = std::make_shared<std::vector<std::shared_ptr<cu::Module>>>();
    for (size_t u = 0; u < cubins.size(); ++u) {
      try {
        m->push_back(std::make_shared<cu::Module>(cubins[u].cubin));
      } catch (const CompileError&) {
        if (!cubins[u].cache_hit) throw;
        // A cached image the driver rejects (digest intact: written by another NVRTC or
        // driver, say): evicted and compiled again, once.
        cubins[u] = cu::compile_to_cubin(sources[u], dev.cc_major, dev.cc_minor, options,
                                         /*evict_cached=*/true);
        for (auto& w : cubins[u].warnings) a.warnings.push_back(w);
        m->push_back(std::make_shared<cu::Module>(cubins[u].cubin));
      }
    }
    return m;
  });
  for (size_t i = 0; i < source.kernels.size(); ++i) {
    const cu::CudaKernel& kern = source.kernels[i];
    std::array<void*, cu::kRowEntries> fns{};
    const int entries = kern.kind == cu::KernelKind::Pointwise ? 3 : cu::kRowEntries;
    for (int e = 0; e < entries; ++e) {
      std::string name = cu::entry_name(kern, e);
      if (name.empty()) continue;
      auto it = unit_of.find(name);
      COIL_CHECK(it != unit_of.end()) << "entry point " << name << " was not emitted";
      fns[e] = (*modules)[it->second]->function(name);
    }
    if (!fns[1]) fns[1] = fns[0];
    if (!fns[0]) fns[0] = fns[1];  // vector row kernels: _b also serves entry 0
    k.functions.push_back(fns);
  }
  k.kernels = std::move(source.kernels);
  k.module = modules;
  backend::Sha256 h;
  h.update(source.code);
  h.update(cubins[0].command);
  k.key = h.hex();
  return k;
}

// The graph passes (src/passes, options.passes). Returns, for each node left, its position in
// the graph as parsed (-1: added by a pass), the numbering the front end's per-op fallback uses;
// with a debug dir, `dumps` gets 01b_<k>_after_<pass>.txt for the k-th pass if it changed it.
std::vector<int> run_graph_passes(Graph& graph, const CompileOptions& options, PassDumps& dumps) {
  passes::NodeOrigins origins(graph);
  passes::PipelineOptions po;
  int k = 0;
  po.after_pass = [&](const passes::Pass& p, bool changed, const Graph& g) {
    ++k;
    if (changed && !options.debug_dir.empty())
      dumps.emplace_back("01b_" + std::to_string(k) + "_after_" + std::string(p.name()) + ".txt",
                         print_graph(g));
  };
  passes::build_pipeline(options).run(graph, options, po);
  return origins.positions(graph);
}

// The pipeline proper; fills `a` as the stages finish, so a failure leaves what was done.
std::unique_ptr<CompiledGraph> compile_stages(const std::string& graph_text,
                                              const CompileOptions& options, FallbackFn fallback,
                                              CompileArtifacts& a, PassDumps& pass_dumps) {
  StageTimer time(a);
  // The Context outlives everything built from it: the Program keeps only compiled sizes.
  sym::Context ctx;
  // Ranges known outside the graph (Dynamo's ShapeEnv) before parsing: the parser keeps a
  // range it finds set, and simplification uses the ranges in force when it builds.
  ctx.set_ranges(options.symbol_ranges);
  std::unique_ptr<Graph> graph = time("parse", [&] { return parse_graph(graph_text, ctx); });
  time("verify", [&] { ops::verify_graph_meta(*graph); });
  a.input_graph = print_graph(*graph);
  const std::vector<int> origin = run_graph_passes(*graph, options, pass_dumps);
  lower::LowerResult lowered = time("lower", [&] { return lower::lower_graph(*graph, options); });
  a.fallback_ops = lowered.fallback_ops;
  loop::LoopProgram& program = lowered.program;
  for (loop::Step& step : program.steps) {  // node positions as the front end numbered them
    auto* e = std::get_if<loop::ExternNode>(&step);
    if (e && e->graph_node >= 0) e->graph_node = origin.at(e->graph_node);
  }
  a.loop_program = loop::print_program(program);
  std::string align_log;
  sched::Schedule schedule = time("schedule", [&] {
    if (options.fuse) align_log = sched::align_iteration_spaces(program);
    return sched::schedule_program(program, options);
  });
  a.schedule = sched::print_schedule(program, schedule);
  a.fusion_log = align_log + schedule.fusion_log;
  a.num_kernels = static_cast<int>(schedule.kernels.size());
  if (graph_device(program) == Device::CUDA) {
    CudaKernels cuda = compile_cuda(program, schedule, options, a, time);
    auto prog = time("program", [&] {
      return std::make_unique<Program>(program, schedule, std::move(cuda), options,
                                       std::move(fallback));
    });
    return std::make_unique<ProgramGraph>(a, std::move(prog));
  }
  std::vector<KernelFn> kernels;
  std::shared_ptr<void> library;
  if (!schedule.kernels.empty()) {
    backend::cpu::CppSource source =
        time("emit", [&] { return backend::cpu::emit_cpp(program, schedule, options); });
    a.source = source.code;
    COIL_CHECK(source.kernel_symbols.size() == schedule.kernels.size())
        << "emit_cpp returned " << source.kernel_symbols.size() << " symbols for "
        << schedule.kernels.size() << " kernels";
    // The entry points are resolved (as COIL_ENTRY names, carrying the cache key) inside
    // compile_and_load, which evicts and recompiles a cached library that lacks them.
    backend::cpu::HostCompileResult compiled = time("host_compile", [&] {
      return backend::cpu::compile_and_load(source.code, options, source.kernel_symbols);
    });
    a.compiler_command = compiled.command;
    a.compiler_log = compiled.log;
    a.cache_hit = compiled.cache_hit;
    a.warnings.insert(a.warnings.end(), compiled.warnings.begin(), compiled.warnings.end());
    for (void* fn : compiled.entries) kernels.push_back(reinterpret_cast<KernelFn>(fn));
    library = compiled.library;
  }
  auto prog = time("program", [&] {
    return std::make_unique<Program>(program, schedule, std::move(kernels), std::move(library),
                                     options, std::move(fallback));
  });
  return std::make_unique<ProgramGraph>(a, std::move(prog));
}

}  // namespace

std::unique_ptr<CompiledGraph> compile_graph(const std::string& graph_text,
                                             const CompileOptions& options, FallbackFn fallback) {
  CompileArtifacts a;
  PassDumps pass_dumps;
  try {
    auto compiled = compile_stages(graph_text, options, std::move(fallback), a, pass_dumps);
    if (!options.debug_dir.empty()) dump(a, pass_dumps, options.debug_dir, "");
    return compiled;
  } catch (const std::exception& e) {
    if (!options.debug_dir.empty()) dump(a, pass_dumps, options.debug_dir, e.what());
    throw;
  }
}

}  // namespace coil::runtime
